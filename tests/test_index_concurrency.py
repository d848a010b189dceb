"""The native index beside writers in other processes (issue 10: defects
2, 3 and 5, and snapshots of the index).

Each test starts a writer in a child process (``python -c``, stdout lines
reporting acknowledged commits) and works beside it from this process:
opening the database over and over while commits merge segments away
(defect 2), rebuilding the index with ``python -m pydb index`` while
commits go on (defect 3), searching for the word of each acknowledged
commit (defect 5), and reading an index view pinned to a snapshot while
later commits merge (``_pydb._snapshot_index``).  Writers are ended with
SIGKILL, so a writer killed anywhere in a commit is part of each test.
No test depends on timing: loops are bounded by counts, not seconds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import pydb
from pydb import _pydb
from pydb.search import search

REPO = Path(__file__).resolve().parent.parent
FST = "1 4 v1\n"      # the words of field 1


def word(prefix: str, i: int) -> str:
    """A word of letters only (digits are not word characters): prefix +
    i written in base 26 with a..z."""
    s = ""
    while True:
        s = chr(ord("a") + i % 26) + s
        i //= 26
        if i == 0:
            return prefix + s


def child(code: str, *args) -> subprocess.Popen:
    """A Python child running `code` (sys.argv[1:] = args) with this
    checkout on its path; stdin/stdout are pipes of text lines."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=REPO, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)


def kill(p: subprocess.Popen, counter: Counter | None = None) -> None:
    """SIGKILL `p` (if it still runs), reap it, let `counter`'s thread
    read to EOF, and close the pipes."""
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait()
    if counter is not None:
        counter.t.join()
    for f in (p.stdin, p.stdout):
        if f is not None:
            f.close()


class Counter:
    """Reads a child's stdout lines in a thread: `count` lines seen so far,
    `last` the last one; wait_for(n) blocks until n lines (or EOF)."""

    def __init__(self, p: subprocess.Popen) -> None:
        self.count = 0
        self.last = ""
        self.eof = False
        self.cond = threading.Condition()
        self.t = threading.Thread(target=self._run, args=(p,), daemon=True)
        self.t.start()

    def _run(self, p: subprocess.Popen) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            with self.cond:
                self.count += 1
                self.last = line.strip()
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_for(self, n: int) -> int:
        """The count once it reaches n (or at EOF).  The 300 s limit only
        keeps a hung writer from hanging the suite; nothing is timed."""
        with self.cond:
            self.cond.wait_for(lambda: self.count >= n or self.eof, timeout=300)
            return self.count


def full_scan(db) -> dict[str, list[int]]:
    """word -> MFNs of the active records whose field 1 has it (the index
    FST's answer, computed from the records)."""
    want: dict[str, set[int]] = {}
    for rec in db:
        if rec.deleted:
            continue
        for f in rec.fields:
            if f.tag == 1:
                for w in str(f.value).split():
                    want.setdefault(w.upper(), set()).add(rec.mfn)
    return {w: sorted(m) for w, m in want.items()}


def assert_index_matches_records(db) -> int:
    """Every word's search equals the full scan, and the index has no
    other key; returns the number of words."""
    want = full_scan(db)
    terms = {t.key: t.count for t in db.terms()}
    assert sorted(terms) == sorted(want)
    for w, mfns in want.items():
        assert list(db.search(w)) == mfns, w
    return len(want)


# ------------------------------------------------------------ defect 2

APPENDER = """
import sys, pydb
db = pydb.open(sys.argv[1], readonly=False, sync=False)
i = 0
while True:
    i += 1
    db.append([(1, "common")])
    print(i, flush=True)
"""


def test_open_beside_merging_commits_never_fails(tmp_path):
    """Defect 2: pydb.open() (read-only and writable, alternating) beside a
    process appending in a loop with the native index attached; every 8
    commits merge segments away.  Before the reader table, opens failed
    with 'cannot open ... seg-N.pds' (266 of 6,919)."""
    base = tmp_path / "app"
    pydb.create(base, fst=FST).close()
    w = child(APPENDER, base)
    seen = Counter(w)
    failures: list[str] = []
    opens = 0
    try:
        assert seen.wait_for(1) >= 1   # the child may be ahead
        while opens < 5000 or seen.count < 80:   # 80 commits: 10 merges at least
            readonly = opens % 2 == 0
            try:
                with pydb.open(base, readonly=readonly) as db:
                    n = len(db.search("COMMON"))
                    assert n >= 1
            except Exception as e:   # noqa: BLE001 - every failure is counted
                failures.append(f"{type(e).__name__}: {e}")
            opens += 1
            if seen.eof:
                break
    finally:
        kill(w, seen)
    assert w.returncode == -signal.SIGKILL   # it was still appending
    assert failures == []
    assert opens >= 5000
    assert seen.count >= 80
    # killed anywhere: the next writable open recovers a consistent pair
    with pydb.open(base, readonly=False) as db:
        top = db.max_mfn
        assert top >= seen.count
        assert list(db.search("COMMON")) == list(range(1, top + 1))
        assert db.append([(1, "common")]) == top + 1
        assert list(db.search("COMMON")) == list(range(1, top + 2))


# ------------------------------------------------------------ defect 3

COMMITTER = """
import random, sys, time, pydb
def word(prefix, i):
    s = ""
    while True:
        s = chr(ord("a") + i % 26) + s
        i //= 26
        if i == 0:
            return prefix + s
# sync: each commit holds the lock through its fsyncs, the window in
# which an unlocked rebuild used to break the index.  Mostly updates: the
# writer is inside a commit most of the time, and the number of records
# (the cost of a rebuild) grows slowly.  The short pause between commits
# lets a rebuild polling for the writer lock find it free (the lock is
# not fair); it is a pace, nothing is measured.
db = pydb.open(sys.argv[1], readonly=False, sync=True)
rnd = random.Random(int(sys.argv[2]))
i = 0
while True:
    i += 1
    with db.transaction() as t:
        n = db.max_mfn
        if i % 8 == 0:
            t.append([(1, word("a", i) + " " + word("x", i % 7))])
        for _ in range(3):
            t.update(rnd.randint(1, n), [(1, word("b", rnd.randint(1, 9 * i)) + " "
                                          + word("x", i % 5))])
        if i % 16 == 0:
            t.delete(rnd.randint(1, n))
    print(i, flush=True)
    time.sleep(0.001)
"""


def test_index_rebuild_beside_a_writer(tmp_path):
    """Defect 3: `python -m pydb index DB` 30 times beside a process that
    commits appends, updates and deletions; every rebuild succeeds, and
    afterwards the database opens for writing and the search of every
    word matches a full scan of the records.  Before, the MANIFEST named a
    segment that no longer existed (5 of 5 runs)."""
    base = tmp_path / "reb"
    with pydb.create(base, fst=FST) as db:
        for i in range(1, 41):
            db.append([(1, f"{word('a', i)} {word('x', i % 7)}")])
    w = child(COMMITTER, base, 7)
    seen = Counter(w)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        assert seen.wait_for(1) >= 1   # the child may be ahead
        for k in range(30):
            before = seen.count
            r = subprocess.run([sys.executable, "-m", "pydb", "index", str(base), "--quiet"],
                               cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
            assert (k, r.returncode, r.stderr) == (k, 0, "")
            assert r.stdout.startswith("indexed ")
            assert seen.wait_for(before + 2) >= before + 2   # commits between rebuilds
            assert (k, w.poll()) == (k, None)   # the writer's commits go on
            with pydb.open(base) as db:         # and a reader finds the index
                assert len(db.search("X$")) >= 1
    finally:
        kill(w, seen)
    assert seen.count >= 40
    # the hook of the writer adopted each rebuild: its commits are indexed
    with pydb.open(base, readonly=False) as db:
        assert db.index is not None and db.index.kind == "native"
        words = assert_index_matches_records(db)
        assert words > 40
        m = db.append([(1, "fresh words")])
        assert list(db.search("FRESH")) == [m]
        assert_index_matches_records(db)
    # and a reader opened now agrees
    with pydb.open(base) as db:
        assert_index_matches_records(db)


def test_rebuild_across_a_compaction(tmp_path):
    """A compaction that replaces the master file while a rebuild scans,
    then commits that change records: the rebuild indexes those commits.
    It finds them by their versions lying past the end of records of its
    scan's state, which says nothing once a compaction has rewritten the
    file shorter; before, the index kept the words the commits removed
    (the intermittent failure of the test above: its writer's collector
    compacts every few dozen commits).  The callback runs between the
    scan and the build's commit."""
    base = tmp_path / "cmp"
    # no index yet: the collection below is the compaction alone (a merge
    # would commit, and a commit after the scan's state pins the garbage)
    with pydb.create(base, gc="none") as db:
        for i in range(1, 41):
            db.append([(1, f"{word('a', i)} {word('x', i % 7)}")])
        for i in range(1, 41):
            db.update(i, [(1, word("b", i))])   # 40 back versions of garbage
    compactions = []

    def between_scan_and_commit(done: int, total: int) -> None:
        assert (done, total) == (40, 40)
        with pydb.open(base, readonly=False, gc="none") as db:
            compactions.append(db.collect()["compactions"])
            for i in (3, 5, 7):
                db.update(i, [(1, word("c", i))])
            db.delete(9)
            db.append([(1, "fresh")])

    assert pydb.native.build_index(base, FST, progress=between_scan_and_commit) == 40
    assert compactions == [1]
    with pydb.open(base) as db:
        assert db.stat()["header"]["file_generation"] == 1
        assert assert_index_matches_records(db) == 40
        assert [list(db.search(w)) for w in ("CD", "BD", "BJ", "FRESH")] == [[3], [], [], [41]]


def test_index_command_keeps_the_stored_settings(tmp_path):
    """The index command keeps the FST, the encoding and the key length
    the index was built with: a database made by create(fst=...) has no
    .fst file and is rebuilt without --fst; a UTF-8 index stays UTF-8."""
    base = tmp_path / "utf"
    with pydb.create(base, fst=FST, max_key=12) as db:
        db.append([(1, "Ça déjà vu extraordinarily")])
    before = _pydb._native_index_stored(str(base))
    assert {k: before[k] for k in ("utf8", "max_key", "fst", "stw")} == {
        "utf8": True, "max_key": 12, "fst": b"1 4 v1\n", "stw": b""}
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "pydb", "index", str(base), "--quiet"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    assert _pydb._native_index_stored(str(base)) == before
    # no reader was registered: the build removed the old index's segments
    segs = sorted(p.name for p in Path(f"{base}.pdx").iterdir() if p.name.startswith("seg-"))
    manifest = Path(f"{base}.pdx/MANIFEST").read_text(encoding="latin-1")
    assert [ln.split()[1] for ln in manifest.splitlines() if ln.startswith("segment ")] == segs
    assert len(segs) == 1
    with pydb.open(base) as db:
        assert [t.key for t in db.terms()] == ["CA", "DEJA", "EXTRAORDINAR", "VU"]
    # told otherwise, it follows
    r = subprocess.run([sys.executable, "-m", "pydb", "index", str(base), "--quiet",
                        "--encoding", "latin-1", "--max-key", "0"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    assert _pydb._native_index_stored(str(base))["utf8"] is False
    assert _pydb._native_index_stored(str(base))["max_key"] == 0
    # no .fst and no index: the message names --fst
    bare = tmp_path / "bare"
    pydb.create(bare).close()
    r = subprocess.run([sys.executable, "-m", "pydb", "index", str(bare), "--quiet"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "--fst" in r.stderr and "fst=" not in r.stderr.replace("--fst", "")
    assert _pydb._native_index_stored(str(bare)) is None


# ------------------------------------------------------------ defect 5

ACKER = """
import sys, pydb
def word(prefix, i):
    s = ""
    while True:
        s = chr(ord("a") + i % 26) + s
        i //= 26
        if i == 0:
            return prefix + s
db = pydb.open(sys.argv[1], readonly=False, sync=False)
for k in range(1, int(sys.argv[2]) + 1):
    sys.stdin.readline()   # one commit per request
    with db.transaction() as t:
        m = t.append([(1, word("u", k))])
        if k > 1:
            t.update(k - 1, [(1, word("u", k - 1) + " " + word("v", k - 1))])
    print(k, m, flush=True)
"""


def test_search_finds_every_acknowledged_commit(tmp_path):
    """Defect 5: a reader process's search finds the word of a commit
    that was acknowledged (its line read from the writer's pipe) before
    the search started -- every time, over 300 commits with merges, while
    `python -m pydb index` rebuilds the index beside them now and then
    (an unlocked rebuild could publish a MANIFEST generation a reader had
    already seen, which then ignored it).  A long-lived reader, and a
    fresh one every 25 commits."""
    base = tmp_path / "ack"
    pydb.create(base, fst=FST).close()
    n = 300
    w = child(ACKER, base, n)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rebuild = None
    missed = []
    reader = pydb.open(base)
    try:
        assert w.stdin is not None and w.stdout is not None
        for k in range(1, n + 1):
            if k % 50 == 10:
                rebuild = subprocess.Popen([sys.executable, "-m", "pydb", "index", str(base),
                                            "--quiet"], cwd=REPO, env=env,
                                           stdout=subprocess.DEVNULL)
            w.stdin.write("go\n")
            w.stdin.flush()
            assert w.stdout.readline().split() == [str(k), str(k)]
            # acknowledged: this commit and every earlier one are visible
            if list(reader.search(word("u", k).upper())) != [k]:
                missed.append(k)
            if k > 1 and list(reader.search(word("v", k - 1).upper())) != [k - 1]:
                missed.append(-k)
            if k % 25 == 0:
                with pydb.open(base) as fresh:
                    assert list(fresh.search(word("u", k).upper())) == [k]
                    assert list(fresh.search("V$")) == list(range(1, k))
            if k % 50 == 40 and rebuild is not None:
                assert rebuild.wait(timeout=120) == 0
                rebuild = None
        assert w.wait() == 0
    finally:
        reader.close()
        kill(w)
        if rebuild is not None:
            rebuild.wait()
    assert missed == []


# ------------------------------------------------------------ snapshots

STEPPER = """
import sys, pydb
def word(prefix, i):
    s = ""
    while True:
        s = chr(ord("a") + i % 26) + s
        i //= 26
        if i == 0:
            return prefix + s
db = pydb.open(sys.argv[1], readonly=False, sync=False)
for line in sys.stdin:
    for _ in range(int(line)):
        with db.transaction() as t:
            m = t.append([(1, word("a", db.max_mfn + 1) + " common")])
            if m > 1:
                t.update(m - 1, [(1, word("b", m - 1) + " common")])
    print(db.max_mfn, flush=True)
"""


def state_at(next_mfn: int) -> dict[str, list[int]]:
    """What the index says after the commit that appended MFN next_mfn-1
    (STEPPER: every earlier record was rewritten with its b-word)."""
    top = next_mfn - 1
    want = {word("b", m).upper(): [m] for m in range(1, top)}
    want[word("a", top).upper()] = [top]
    want["COMMON"] = list(range(1, top + 1))
    return want


def view_state(view) -> dict[str, list[int]]:
    from pydb.index import Index
    ix = Index(view)
    return {t.key: [p.mfn for p in ix.postings(t.key.encode())] for t in ix.terms()}


def test_snapshot_view_keeps_its_commit_while_another_process_merges(tmp_path):
    """pydb_snapshot_index: a view taken with a snapshot answers as of the
    snapshot's commit (its MANIFEST generation) while another process
    commits 40 more transactions (5 merges, the view's segments removed
    from the directory); the database's own index follows the commits."""
    base = tmp_path / "snapix"
    with pydb.create(base, fst=FST) as db:
        db.append([(1, "aa common")])
    w = child(STEPPER, base)
    assert w.stdin is not None and w.stdout is not None
    try:
        w.stdin.write("5\n")
        assert w.stdout.readline().strip() == "6"
        with pydb.open(base) as db:
            view, info = _pydb._snapshot_index(db, db.index.handle)
            assert info["next_mfn"] == 7 and info["registered"] is True
            assert info["index_gen"] > 0
            assert view.kind == "native"
            assert view_state(view) == state_at(7)
            for step in range(5):
                w.stdin.write("8\n")
                assert w.stdout.readline().strip() == str(14 + 8 * step)
                assert view_state(view) == state_at(7)
                assert list(search(view, "COMMON")) == list(range(1, 7))
                # plain reads see the latest commit
                assert list(db.search("COMMON")) == list(range(1, 15 + 8 * step))
            later, info2 = _pydb._snapshot_index(db, db.index.handle)
            assert info2["next_mfn"] == 47 and info2["index_gen"] > info["index_gen"]
            assert view_state(later) == state_at(47)
            later.close()
        # the view outlives its database and index
        assert view_state(view) == state_at(7)
        view.close()
    finally:
        kill(w)


APPEND_ON_REQUEST = """
import json, sys, pydb
db = pydb.open(sys.argv[1], readonly=False, sync=False)
for line in sys.stdin:
    print(db.append([tuple(f) for f in json.loads(line)]), flush=True)
"""


def test_rebuild_with_another_fst_reaches_an_attached_writer(tmp_path):
    """A rebuild told to use another FST (and key length) replaces the
    index of a writable Database that another process holds open with the
    index attached: that writer's next commit makes its keys by the new
    FST, the segments of the old index are not brought back, and a reader
    that opened the index before the rebuild searches by the new rules."""
    base = tmp_path / "fst2"
    with pydb.create(base, fst=FST) as db:
        db.append([(1, "alpha one"), (2, "beta")])
    (tmp_path / "new.fst").write_text("2 4 v2\n")
    w = child(APPEND_ON_REQUEST, base)
    assert w.stdin is not None and w.stdout is not None

    def append(fields) -> int:
        import json
        w.stdin.write(json.dumps(fields) + "\n")
        w.stdin.flush()
        return int(w.stdout.readline())

    env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        reader = pydb.open(base)
        assert append([[1, "alpha two"], [2, "gamma"]]) == 2
        assert [t.key for t in reader.terms()] == ["ALPHA", "ONE", "TWO"]
        r = subprocess.run([sys.executable, "-m", "pydb", "index", str(base), "--quiet",
                            "--fst", str(tmp_path / "new.fst"), "--max-key", "3"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert (r.returncode, r.stderr) == (0, "")
        assert append([[1, "alpha three"], [2, "delta beta"]]) == 3
        assert list(reader.terms()) == [("BET", 2), ("DEL", 1), ("GAM", 1)]
        assert list(reader.search("beta")) == [1, 3]
        assert list(reader.search("ALPHA")) == []
        reader.close()
    finally:
        kill(w)
    with pydb.open(base, readonly=False) as db:
        assert list(db.terms()) == [("BET", 2), ("DEL", 1), ("GAM", 1)]
        assert _pydb._native_index_stored(str(base))["fst"] == b"2 4 v2\n"


def test_rebuild_repairs_a_damaged_manifest(tmp_path):
    """A damaged MANIFEST, and its spare too, have no settings to keep (a
    spare alone: test_cli's test_index_rebuilds_a_damaged_manifest_...):
    the rebuild goes on with the FST it is given (or the database's .fst)
    and repairs the index; without either the index command names
    --fst."""
    base = tmp_path / "dmg"
    with pydb.create(base, fst=FST) as db:
        db.append([(1, "alpha beta")])
    for name in ("MANIFEST", "MANIFEST.pydb-next"):
        manifest = Path(f"{base}.pdx/{name}")
        data = bytearray(manifest.read_bytes())
        data[len(data) // 2] ^= 0x20
        manifest.write_bytes(bytes(data))
    with pytest.raises(pydb.CorruptionError):
        _pydb._native_index_stored(str(base))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "pydb", "index", str(base), "--quiet"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "--fst" in r.stderr
    (tmp_path / "dmg.fst").write_text(FST)
    r = subprocess.run([sys.executable, "-m", "pydb", "index", str(base), "--quiet"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    with pydb.open(base, readonly=False) as db:
        assert list(db.terms()) == [("ALPHA", 1), ("BETA", 1)]
        db.append([(1, "gamma")])
        assert list(db.search("GAMMA")) == [2]


# ------------------------------------------------------------ the C API

def test_snapshot_index_and_search_in_c(tmp_path):
    """tests/c/snapshot_index_main.c (the public C API alone, built with
    ASan and UBSan): a snapshot's view answers as of its commit after 21
    more commits and a collection (pydb_gc_collect; commits never merge);
    its segment files (the build's: the commits' small segments are
    inline in the MANIFEST) stay on disk while it is registered and go
    with the first collection after its release (policy none: no collector thread
    merges or removes around the snapshot, so the counts are exact); a handle
    that holds neither its generation nor finds it in the MANIFEST
    answers PYDB_EWOULDBLOCK; an in-memory index searched as of a snapshot
    drops only the records inactive at that commit."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not sys.platform.startswith("linux"):
        pytest.skip("no C compiler")
    exe = tmp_path / "snapshot_index_main"
    srcs = sorted(str(p) for p in (REPO / "csrc").glob("*.c"))
    p = subprocess.run([cc, "-std=gnu11", "-O1", "-Wall", "-Werror",
                        "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-g",
                        "-I", str(REPO / "csrc"),
                        str(REPO / "tests" / "c" / "snapshot_index_main.c"), *srcs,
                        "-o", str(exe), "-pthread"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([str(exe), str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=env)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [
        "snapshot next_mfn=2 registered=1 gen_known=1",
        "stale_handle EWOULDBLOCK",
        "view_common 1",
        "view_alpha 1",
        "view_gamma",
        "latest_common 1 2",
        "latest_alpha",
        "attached_handle_now EWOULDBLOCK",
        "while_registered held:1 unnamed:1 kept:1",   # the build's file
        "after_release removed_all:1",
        "memory_snapshot 1 2 3",
        "memory_handle_snapshot 1 2 3",
        "memory_latest 1 3",
        "done",
    ]
