"""Garbage collection of the master file by compaction (issue 11;
csrc/compact.c, docs/compaction.md): the versions of the latest commit
are copied into a new .mst/.xrf pair that replaces the old one by renames,
in bounded steps.  Driven through the test entry point
_pydb._testing.compact(db, budget) (a whole job; returns the versions, bytes
and compactions it reclaimed), until Database.collect() drives it.

What is shown:
- every MFN reads the same after a compaction (fields, logically deleted
  records stay so, physically deleted entries stay so, XRF flags), no
  record has a back version, the files shrink by the garbage bytes,
  `check` passes and Biblio::Isis reads the result;
- a snapshot taken before a compaction reads its commit after it (in this
  process and in another), an older snapshot pins the garbage;
- readers in other processes (plain reads and snapshots, pread and mmap)
  and threads of the compacting handle never see a torn or wrong record
  while compactions replace the files;
- kill -9 at random points of a writer that compacts (>= 100 kills) and
  at each file operation of a compaction, then reopen, `check` and the
  acknowledged state;
- ENOSPC and EIO at each file operation of a compaction: the database
  stays usable and unchanged, the job's files are removed and the garbage
  stays counted.

About 40 s on 2 cores.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import random
import shutil
import signal
import threading
import time

import pytest

import pydb
from pydb import _pydb

from writer_model import Oracle, check_files, content, decode_ops, encode_ops, run_random_txn

testing = _pydb._testing
compact = testing.compact

pytestmark = pytest.mark.sanitize_address


def entry(db, mfn):
    """Everything a reader can tell about one MFN."""
    x = db.xrf_entry(mfn)
    e = (x["state"], x["new"], x["pending"])
    if x["state"] in ("active", "logically deleted"):
        r = db[mfn]
        e += (r.deleted, r.status, tuple((f.tag, f.raw) for f in r.fields))
    return e


def dump(db):
    return [entry(db, m) for m in range(1, db.max_mfn + 1)]


def leftovers(base):
    d = os.path.dirname(str(base))
    return sorted(n for n in os.listdir(d) if n.endswith(("-compact", "-swap")))


def make_db(tmp_path, layout="isis-packed", mstxl=0, n=120, name="c", gaps=True):
    """A database built with gaps (physically deleted entries) and
    logically deleted records, then updated: (base, number of versions
    superseded, their bytes)."""
    base = tmp_path / name
    recs = [None if gaps and m % 17 == 0 else content(m, 0, m * 13 % 400)
            for m in range(1, n + 1)]
    _pydb._build(str(base), layout, mstxl, recs, False, {5, 9})
    versions = nbytes = 0
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        for rnd in range(3):
            with db.transaction() as tx:
                for m in range(1, n + 1, 2 + rnd):
                    if m % 17 or not gaps:
                        old = db[m]
                        tx.update(m, content(m, rnd + 1, (m * 7 + rnd) % 900))
                        versions += 1
                        nbytes += old.mfrl
        for m in (20, 21):
            nbytes += db[m].mfrl
            db.delete(m)
            versions += 1
        nbytes += db[21].mfrl
        db.undelete(21)
        versions += 1
        db.append(content(n + 1, 0, 10))
    return base, versions, nbytes


# ------------------------------------------------------------- contents

@pytest.mark.parametrize("layout,mstxl", [("isis-packed", 0), ("isis-aligned", 0),
                                          ("ffi-aligned", 2), ("isis-packed", 3)])
def test_compaction_keeps_every_record(tmp_path, layout, mstxl):
    base, versions, nbytes = make_db(tmp_path, layout, mstxl)
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        before = dump(db)
        counts = db.counts()
        size = os.path.getsize(f"{base}.mst")
        got = compact(db, 16)
        assert got[0] == versions and got[2] == 1
        after = dump(db)
        assert after == before
        assert db.counts() == counts
        assert all(db[m].back_offset is None for m in db.mfns(deleted=True))
        new_size = os.path.getsize(f"{base}.mst")
        # shrinks by the garbage bytes (placement and the last block's
        # padding aside)
        assert size - nbytes - 1024 <= new_size <= size - nbytes + 1024
        assert got[1] == size - new_size
        assert compact(db, 16) == (0, 0, 0)   # no garbage left
        # the handle writes on in the new files
        db.update(3, content(3, 9, 50))
        assert entry(db, 3)[-1] == tuple(content(3, 9, 50))
        assert db.check().ok
    assert leftovers(base) == []
    check_files(base)
    with pydb.open(base) as ro:
        d = dump(ro)
        assert d[:2] == after[:2] and d[3:] == after[3:]
        assert ro.check().ok


def test_states_kept_as_stored(tmp_path):
    base, _, _ = make_db(tmp_path)
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        five = db[5].raw(1)
        compact(db, 1000)
        assert db.xrf_entry(17)["state"] == "physically deleted"
        assert db.xrf_entry(5)["state"] == "logically deleted"
        assert db[5].deleted and db[5].status == 1
        assert db[20].deleted and not db[21].deleted
        db.undelete(5)   # a logically deleted record still undeletes
        assert db[5].raw(1) == five and not db[5].deleted


def test_biblio_isis_reads_compacted_files(tmp_path):
    from test_biblio_isis import _have_biblio_isis, perl_dump, pydb_dump
    if not _have_biblio_isis():
        pytest.skip("perl module Biblio::Isis not installed")
    base, _, _ = make_db(tmp_path, n=300, gaps=False)
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        db.update(7, [(24, b"x" * 3000)])
        compact(db, 50)
    theirs = perl_dump(base)
    assert theirs == pydb_dump(base)
    assert "MFN 5 1" in theirs and "MFN 21 0" in theirs


# ------------------------------------------------------------ snapshots

def test_snapshot_taken_before_reads_its_commit_after(tmp_path):
    base, _, _ = make_db(tmp_path)
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        snap = db.snapshot()
        ro = pydb.open(base, io="mmap")
        rsnap = ro.snapshot()
        old = {m: entry(db, m)[3:] for m in db.mfns(deleted=True)}
        assert compact(db, 10)[2] == 1
        for m in range(1, 60):
            db.update(m + 1 if (m + 1) % 17 else 1, content(m, 50, 30))
        for s in (snap, rsnap):
            for m, e in old.items():
                r = s[m]
                assert (r.deleted, r.status, tuple((f.tag, f.raw) for f in r.fields)) == e
            assert len(s.mfns(deleted=True)) == len(old)
        # the snapshots pin the garbage made since: no compaction
        assert compact(db, 10)[2] == 0
        snap.close()
        rsnap.close()
        assert compact(db, 10)[2] == 1
        assert ro[2].raw(1) == [b"1:50"]
        ro.close()


def test_old_snapshot_pins_garbage(tmp_path):
    base, versions, _ = make_db(tmp_path)
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        snap = db.snapshot()
        db.update(1, content(1, 7, 7))
        assert compact(db, 10) == (0, 0, 0)   # the snapshot is behind
        snap.close()
        assert compact(db, 10)[0] == versions + 1


# ------------------------------------------------------ concurrent readers

def valid(r) -> int:
    """The version a record of writer_model.content() holds; raises
    AssertionError on a torn or wrong record."""
    f = [(x.tag, x.raw) for x in r.fields]
    mfn, ver = (int(x) for x in f[0][1].split(b":"))
    assert mfn == r.mfn, (mfn, r.mfn)
    assert f == content(mfn, ver, len(f[1][1])), f[:1]
    return ver


def _in_child(q, work) -> None:
    """work() in a child process, its result sent to the test as ("ok",
    result), or its failure as ("error", repr)."""
    try:
        q.put(("ok", work()))
    except BaseException as e:   # pragma: no cover - reported to the test
        q.put(("error", repr(e)))


def reader_proc(base, io, use_snap, seconds, q):
    def work() -> int:
        db = pydb.open(base, io=io)
        seen: dict[int, int] = {}
        end = time.time() + seconds
        n = 0
        while time.time() < end:
            if use_snap:
                s = db.snapshot()
                first = {m: valid(s[m]) for m in range(1, 41)}
                time.sleep(0.002)
                assert {m: valid(s[m]) for m in range(1, 41)} == first
                assert len(s) == len(first)
                s.close()
                time.sleep(0.004)   # leave compactions a window
            else:
                for m in range(1, 41):
                    v = valid(db[m])
                    assert v >= seen.get(m, -1), (m, v, seen.get(m))
                    seen[m] = v
            n += 1
        db.close()
        return n
    _in_child(q, work)


def test_readers_in_other_processes_during_compactions(tmp_path):
    base = tmp_path / "r"
    with pydb.create(base, sync=False) as db:
        with db.transaction() as tx:
            for m in range(1, 41):
                tx.append(content(m, 0, m * 11))
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=reader_proc, args=(str(base), io, snap, 4.0, q))
             for io, snap in (("pread", False), ("mmap", False), ("pread", True),
                              ("mmap", True))]
    for p in procs:
        p.start()
    done = 0
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        end = time.time() + 4.0
        ver = 0
        rnd = random.Random(5)
        while time.time() < end:
            ver += 1
            with db.transaction() as tx:
                for m in rnd.sample(range(1, 41), 8):
                    tx.update(m, content(m, ver, rnd.choice([0, 10, 300, 2000])))
            if ver % 5 == 0:
                done += compact(db, 7)[2]
    res = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    assert all(r[0] == "ok" for r in res), "\n".join(map(str, res))
    assert done >= 2


def test_copies_a_catch_up_left_dead_are_not_pinned_versions(tmp_path):
    """A compaction interrupted by collect(0) and finished after commits
    changed records it had copied: the dead copies are garbage bytes of
    the new file, not versions.  Before, they were counted as versions:
    collect() reported them as pinned with no reader at all, and the next
    collect() compacted the whole file again for them (a review)."""
    base = tmp_path / "d"
    with pydb.create(base, gc="none") as w:
        with w.transaction() as tx:
            for _ in range(3000):
                tx.append([(24, "x" * 100)])
        with w.transaction() as tx:
            for m in range(1, 3001):
                tx.update(m, [(24, "y" * 100)])
        with pytest.raises(pydb.LockTimeoutError):
            w.collect(0)                           # one step: MFNs 1..256 copied
        for m in range(1, 200):
            w.update(m, [(24, "z")])               # copied already: caught up again
        got = w.collect()
        assert (got["versions"], got["compactions"], got["pinned"]) == (3199, 1, 0)
        assert w.stat(index=False)["garbage"]["versions"] == 0
        assert w.collect()["compactions"] == 0
        assert [r[24] for r in w][:200] == [["z"]] * 199 + [["y" * 100]]
        assert w.check().ok


def test_an_old_snapshot_starts_no_copy_of_the_master_file(tmp_path):
    """A snapshot held across commits for more than a second (the
    reader table keeps when it registered) pins the garbage: collect()
    starts no compaction job, which would copy the whole master file
    beside it and keep the copy while the snapshot lives (the code
    review: 11 MB of .mst-compact beside a 22 MB .mst, the reader timed
    from the collector's first look at it); once it is closed, the next
    collect() compacts."""
    base = tmp_path / "o"
    with pydb.create(base, gc="none") as db:
        with db.transaction() as tx:
            for _ in range(2000):
                tx.append([(24, "x" * 100)])
        snap = db.snapshot()
        with db.transaction() as tx:
            for m in range(1, 2001):
                tx.update(m, [(24, "y" * 100)])
        time.sleep(1.1)                               # an old reader now
        for _ in range(2):
            got = db.collect(timeout=2)
            assert (got["compactions"], got["pinned"]) == (0, 2000)
            assert leftovers(base) == []
        snap.close()
        got = db.collect()
        assert (got["versions"], got["compactions"], got["pinned"]) == (2000, 1, 0)


def test_a_wait_for_readers_keeps_within_collects_timeout(tmp_path):
    """The swap's wait for a young reader behind it grows after each wait
    that failed (0.1 s, 0.2 s, then 0.4 s), but collect(timeout) waits
    within its timeout: collect(0.05) took 0.8 s, the writer lock held,
    before (the code review)."""
    with pydb.create(tmp_path / "w", gc="none") as db:
        db.append([(1, "a" * 100)])

        def collect_beside_own_snapshot(timeout):
            with db.snapshot() as s:
                s[1]
                db.update(1, [(1, "b" * 100)])
                t0 = time.monotonic()
                got = db.collect(timeout=timeout)
                return time.monotonic() - t0, got["pinned"]
        for gap in (1.05, 2.05):                   # waits that fail: 0.1 s, 0.2 s
            took, pinned = collect_beside_own_snapshot(5)
            assert took >= 0.09 and pinned >= 1
            time.sleep(gap)                        # past the pause after each
        took, pinned = collect_beside_own_snapshot(0.05)
        assert took < 0.25 and pinned == 3


def _overlapping_reader(base, delay, seconds, q):
    def work() -> int:
        db = pydb.open(base)
        time.sleep(delay)
        end = time.time() + seconds
        n = 0
        while time.time() < end:
            with db.snapshot() as s:
                assert s[1].raw(24)[0][:1] in (b"x", b"y")
                time.sleep(0.3)
            n += 1
        db.close()
        return n
    _in_child(q, work)


def test_overlapping_short_snapshots_do_not_stop_compactions(tmp_path):
    """Two processes hold 0.3 s snapshots, staggered so that one of them
    is always behind the writer's latest commit: the collector still
    compacts, its swap waiting, the writer lock held, for the readers
    behind (csrc/compact.c, drain_readers).  Before, no compaction
    started while any reader was behind, and the master file of this one
    record grew without bound (a review: 51.6 MB in 8.7 s)."""
    base = tmp_path / "o"
    with pydb.create(base, gc="none") as db:
        db.append([(24, "x" * 200)])
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_overlapping_reader, args=(str(base), delay, 12.0, q))
             for delay in (0.0, 0.15)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    try:
        with pydb.open(base, readonly=False, gc="background", sync=False) as w:
            end = time.time() + 10
            gen = 0
            while time.time() < end and gen < 2:
                for _ in range(500):
                    w.update(1, [(24, "y" * 200)])
                gen = w.stat(index=False)["header"]["file_generation"]
    finally:
        for p in procs:
            p.kill()
            p.join(10)
    assert gen >= 2
    errors = []
    while not q.empty():                              # a reader reports only a failure
        errors.append(q.get(timeout=1))
    assert errors == []


@pytest.mark.sanitize_thread
@pytest.mark.parametrize("io", ["mmap", "pread", "direct"])
def test_threads_of_the_compacting_handle(tmp_path, io):
    """Threads reading through the handle that compacts (it switches its
    own files under them): plain reads never go back, snapshots stay."""
    base = tmp_path / "t"
    with pydb.create(base, sync=False) as db:
        with db.transaction() as tx:
            for m in range(1, 41):
                tx.append(content(m, 0, 100))
    try:
        db = pydb.open(base, readonly=False, sync=False, io=io, gc="none")
    except pydb.UnsupportedError:
        pytest.skip("no O_DIRECT on this file system")
    stop = threading.Event()
    errors: list[str] = []

    def reader():
        seen: dict[int, int] = {}
        try:
            while not stop.is_set():
                for m in range(1, 41):
                    v = valid(db[m])
                    assert v >= seen.get(m, -1)
                    seen[m] = v
                if random.random() < 0.2:
                    s = db.snapshot()
                    a = [valid(s[m]) for m in range(1, 41)]
                    assert a == [valid(s[m]) for m in range(1, 41)]
                    s.close()
        except BaseException as e:
            errors.append(repr(e))

    ts = [threading.Thread(target=reader) for _ in range(3)]
    for t in ts:
        t.start()
    done = 0
    for ver in range(1, 120):
        with db.transaction() as tx:
            for m in range(1 + ver % 3, 41, 3):
                tx.update(m, content(m, ver, (ver * m) % 700))
        if ver % 4 == 0:
            for _ in range(200):   # a reader's snapshot may pin it: again
                if compact(db, 9)[2]:
                    done += 1
                    break
                time.sleep(0.001)
    stop.set()
    for t in ts:
        t.join()
    db.close()
    assert errors == []
    assert done >= 20


# ---------------------------------------------------------------- crashes

def _child_writer(base, log, seed, compact_every):
    """Random transactions, acknowledged in `log`, and compactions."""
    rnd = random.Random(seed)
    db = pydb.open(base, readonly=False, sync=False, gc="none")
    with open(log, "a") as f:
        ver = 1000 * seed
        while True:
            ver += 1
            tx, ops = run_random_txn(db, rnd, ver)
            f.write("P " + encode_ops(ops) + "\n")
            f.flush()
            tx.commit()
            f.write("A\n")
            f.flush()
            if ver % compact_every == 0:
                compact(db, rnd.choice([1, 3, 8, 50]))


def acked(log, oracle):
    """The acknowledged state and the pending transaction (or None)."""
    pending = None
    for line in open(log).read().splitlines():
        if line.startswith("P "):
            pending = decode_ops(line[2:])
        elif line == "A" and pending is not None:
            oracle.apply(pending)
            pending = None
    return oracle, pending


def verify(base, oracle, pending):
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        rep = db.check()
        assert rep.ok, rep
        ok, why = oracle.matches(db)
        if not ok and pending is not None:
            alt = oracle.copy()
            alt.apply(pending)
            ok2, why2 = alt.matches(db)
            if ok2:
                oracle.state = alt.state
                ok = True
        assert ok, why
    assert leftovers(base) == []
    check_files(base)


def test_version_chains_read_during_compactions(tmp_path):
    """db.versions() and a snapshot's versions() beside a writer whose
    collector compacts: each chain is one master file's (MFN 1's versions,
    newest first, offsets falling, values v{k} counting down), never a
    false CorruptionError (a service developer's trial: 51 in 6.2 million
    calls, the back pointers of the old file followed in the new one) nor
    a version taken for another's back version."""
    db = pydb.create(tmp_path / "db", gc="background")
    for _ in range(20):
        db.append([(24, "v0")])
    stop = threading.Event()
    errors: list[BaseException] = []
    calls = [0, 0]

    def writer():
        v = 0
        while not stop.is_set():
            v += 1
            with db.transaction() as tx:
                for m in range(1, 21):
                    tx.update(m, [(24, f"v{v}")])

    def reader(snap: bool):
        while not stop.is_set():
            try:
                if snap:
                    with db.snapshot() as s:
                        chain = s.versions(1)
                else:
                    chain = db.versions(1)
                assert [r.mfn for r in chain] == [1] * len(chain)
                offsets = [r.offset for r in chain]
                assert offsets == sorted(set(offsets), reverse=True)
                values = [int(r[24][0][1:]) for r in chain]
                assert values == sorted(values, reverse=True), values
                calls[snap] += 1
            except BaseException as e:      # noqa: BLE001 (reported below)
                errors.append(e)
                return

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(s,)) for s in (False, True)]
    for t in threads:
        t.start()
    time.sleep(4)
    stop.set()
    for t in threads:
        t.join()
    generations = db.stat()["header"]["file_generation"]
    db.close()
    assert errors == []
    assert generations > 20 and calls[0] > 1000 and calls[1] > 1000


def test_kill_during_compactions(tmp_path):
    base = tmp_path / "k"
    with pydb.create(base, sync=False) as db:
        with db.transaction() as tx:
            for m in range(1, 31):
                tx.append(content(m, 0, m * 10))
    oracle = Oracle({m: (False, 0, m * 10) for m in range(1, 31)})
    rnd = random.Random(11)
    kills = 0
    start = time.time()
    while kills < 120 and time.time() - start < 50:
        log = tmp_path / f"log{kills}"
        log.write_text("")
        pid = os.fork()
        if pid == 0:   # pragma: no cover - child
            try:
                _child_writer(str(base), str(log), kills + 1, rnd.choice([1, 2]))
            finally:
                os._exit(3)
        time.sleep(rnd.uniform(0.005, 0.06))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        kills += 1
        oracle, pending = acked(log, oracle)
        verify(base, oracle, pending)
    assert kills >= 100


def count_compaction_ops(tmp_path):
    base, _, _ = make_db(tmp_path, n=60, name="count")
    with pydb.open(base, readonly=False, sync=True, gc="none") as db:
        testing.fail_io(-1)
        try:
            assert compact(db, 20)[2] == 1
            n = testing.io_count()
        finally:
            testing.fail_io(0)
    return n


def test_crash_at_each_file_operation_of_a_compaction(tmp_path):
    nops = count_compaction_ops(tmp_path)
    assert nops >= 8
    base0, _, _ = make_db(tmp_path, n=60, name="pristine")
    with pydb.open(base0) as db:
        want = dump(db)
    for n in range(1, nops + 1):
        d = tmp_path / f"crash{n}"
        d.mkdir()
        for ext in (".mst", ".xrf"):
            shutil.copy(f"{base0}{ext}", d / f"db{ext}")
        base = d / "db"
        pid = os.fork()
        if pid == 0:   # pragma: no cover - child
            try:
                db = pydb.open(base, readonly=False, sync=True, gc="none")
                db.update(1, content(1, 99, 5))   # garbage + a fresh header
                testing.fail_io(n, crash=True)
                compact(db, 20)
                os._exit(0)
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        assert code in (0, 137), (n, code)
        # a reader opening first finishes (or drops) the swap as well
        with pydb.open(base) as ro:
            got = dump(ro)
        assert got[1:] == want[1:], n
        assert got[0][-1] == tuple(content(1, 99, 5))
        with pydb.open(base, readonly=False, sync=False, gc="none") as db:
            assert db.check().ok
            assert dump(db) == got
            db.update(2, content(2, 5, 5))
        assert leftovers(base) == [], n
        check_files(base)


@pytest.mark.parametrize("eno", [errno.ENOSPC, errno.EIO])
def test_io_errors_during_a_compaction(tmp_path, eno):
    nops = count_compaction_ops(tmp_path)
    for n in range(1, nops + 1):
        base, versions, _ = make_db(tmp_path, n=60, name=f"e{eno}_{n}")
        with pydb.open(base, readonly=False, sync=True, gc="none") as db:
            want = dump(db)
            testing.fail_io(n, eno)
            try:
                got = compact(db, 20)
            except pydb.DiskError as e:
                assert e.errno == eno
                got = None
            finally:
                fired = testing.io_fired()
                testing.fail_io(0)
            assert fired is not None, n
            assert dump(db) == want, n
            if got is None or got[2] == 0:
                # nothing replaced: the job's files are gone, the garbage
                # is still counted and the next compaction takes it
                assert leftovers(base) == [], n
                assert compact(db, 20)[0] == versions, n
            db.update(1, content(1, 42, 5))   # still usable
            assert db.check().ok
        with pydb.open(base) as ro:
            assert dump(ro)[1:] == want[1:]
        assert leftovers(base) == [], n


# ------------------------------------------------------ through collect()

def test_collect_compacts_the_master_file(tmp_path):
    """Database.collect() (gc.c) runs the job: whatever the policy."""
    base, versions, nbytes = make_db(tmp_path)
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        before = dump(db)
        got = db.collect()
        assert got["compactions"] == 1 and got["versions"] == versions
        assert dump(db) == before
        assert db.check().ok
    with pydb.open(base, readonly=False, sync=False) as db:   # background
        for m in range(1, 30):
            if m % 17:
                db.update(m, content(m, 77, 20))
        deadline = time.time() + 20
        while os.path.getsize(f"{base}.mst") > 0 and time.time() < deadline:
            if db.stat()["garbage"]["versions"] == 0:
                break
            time.sleep(0.05)
        assert db.stat()["garbage"]["versions"] == 0   # the thread compacted
        assert db[1].raw(1) == [b"1:77"]



def _compact_in_a_loop(base, seconds, updates, out):
    """A process that, for `seconds`, updates `updates` random records
    (when not 0) and calls collect(), then writes the values it left, or
    its error, to the file `out` (JSON)."""
    import json
    rnd, values = random.Random(os.getpid()), {}
    try:
        with pydb.open(base, readonly=False, sync=False, gc="none") as db:
            deadline, n = time.time() + seconds, 0
            while time.time() < deadline:
                for m in rnd.sample(range(1, 401), updates):
                    values[m] = f"{n}:{m}"
                    db.update(m, [(1, values[m]), (2, "x" * 300)])
                db.collect(timeout=2)
                n += 1
        result = {"values": values}
    except Exception as e:   # the parent reports it
        result = {"error": repr(e)}
    with open(out, "w") as f:
        json.dump(result, f)


def test_two_processes_compacting_at_once(tmp_path):
    """Two processes call collect() on one indexed database at once, one
    of them updating records between calls: every compaction replaces
    the files with whole ones, and the database reads the last value of
    each record and checks clean.  (A review: a job let the locks of its
    finished new files go before it renamed them; the other process's
    job took the names and emptied them, and the renames put an empty
    XRF and a control record of zeros in place of the database, in 3 of
    3 runs within 11 s.)"""
    import json
    base = tmp_path / "db"
    with pydb.create(base, fst="1 0 v1\n", sync=False) as db:
        with db.transaction() as tx:
            for _ in range(400):
                tx.append([(1, "init"), (2, "x" * 300)])
    ctx = multiprocessing.get_context("fork")
    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    procs = [ctx.Process(target=_compact_in_a_loop, args=(base, 6, n, outs[i]))
             for i, n in enumerate((20, 0))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        if p.exitcode is None:   # (hung: not left behind)
            p.kill()
            p.join()
        assert p.exitcode == 0
    results = [json.loads(o.read_text()) for o in outs]
    assert [r.get("error") for r in results] == [None, None]
    with pydb.open(base) as db:
        assert len(db) == 400 and db.check().ok
        for m in range(1, 401):
            assert db[m].raw(1) == [results[0]["values"].get(str(m), "init").encode()], m
        assert db.search('"INIT"').mfns == tuple(
            m for m in range(1, 401) if str(m) not in results[0]["values"])

def copy_with_log(base, dst, log: bytes):
    """Copy the .mst/.xrf of `base` to `dst` with `log` as its .wal: the
    files as a power cut leaves them when the log's truncation was lost."""
    for ext in (".mst", ".xrf"):
        shutil.copy(f"{base}{ext}", f"{dst}{ext}")
    with open(f"{dst}.wal", "wb") as f:
        f.write(log)
    return dst


def test_collection_makes_the_emptied_log_durable_first(tmp_path):
    """A commit without a usable commit header (files mode; here a process
    that cannot tell the boot) empties its log with an ftruncate it does
    not sync (as does a checkpoint whose fdatasync fails), so after a
    power cut the log of the last commit can be back although that commit
    is in the files.
    Replaying it there is harmless; replaying it over files a compaction
    rewrote since puts its records and XRF blocks at their old offsets
    (found by the power-loss tier, docs/reliability.md §2.2 a2: "the record
    at offset 57078 has MFN 1111638594, but the XRF entry of MFN 6 points
    there").  So a collection step makes the empty log durable before it
    changes the live files (a checkpoint, pydb__wal_checkpoint): a compaction, before its
    first rename.
    The lost truncation is emulated: the truncation is made to fail so
    that the log's bytes can be read, then the file is emptied as the
    truncation would have done (in the page cache only)."""
    base, _, _ = make_db(tmp_path, n=60)
    wal = f"{base}.wal"
    # (files mode: with a usable header a commit leaves its frame in the
    # log until a checkpoint, wal.h)
    testing.set_boot_unknown(True)
    try:
        with pydb.open(base, readonly=False, sync=False, gc="none") as db:
            testing.fail_io(-1)
            try:
                db.update(2, content(2, 50, 5))
                ops = testing.io_count()
            finally:
                testing.fail_io(0)
            testing.fail_io(ops, errno.EIO)   # the last operation of the same commit
            try:
                db.update(2, content(2, 51, 5))
                assert testing.io_fired() == "ftruncate"
            finally:
                testing.fail_io(0)
            with open(wal, "rb") as f:
                applied_log = f.read()
            assert applied_log
            os.truncate(wal, 0)
            want = dump(db)
    finally:
        testing.set_boot_unknown(False)
    # a cut before any collection: the applied log is replayed harmlessly
    with pydb.open(copy_with_log(base, tmp_path / "cut0", applied_log), readonly=False,
                   gc="none") as db:
        assert dump(db) == want and db.check().ok
    # the compaction writes its new files, then, before its first rename,
    # syncs the empty log: fail each of its operations in turn (on copies,
    # after a commit: the header counts the garbage)
    trace = []
    for n in range(1, 100):
        d = copy_with_log(base, tmp_path / f"op{n}", b"")
        with pydb.open(d, readonly=False, sync=True, gc="none") as db:
            db.update(1, content(1, 99, 5))   # garbage + a fresh header
            testing.fail_io(n, errno.EIO)
            try:
                compact(db, 16)
                trace.append(None)
            except pydb.DiskError as e:
                # (operation, file kind: "wal", "mst-compact", ...)
                trace.append((testing.io_fired(), os.path.basename(e.filename).split(".", 1)[-1]))
            finally:
                testing.fail_io(0)
        if trace[-1] is None:
            break
    first_rename = next(i for i, t in enumerate(trace) if t and t[0] == "rename")
    assert ("fdatasync", "wal") in trace[:first_rename], trace
    with pydb.open(base, readonly=False, sync=True, gc="none") as db:
        assert compact(db, 16)[2] == 1
        assert dump(db) == want
    with pydb.open(base, readonly=False, gc="none") as db:
        assert dump(db) == want and db.check().ok
    check_files(base)
    # why: the applied log replayed over the compacted files damages them
    with pydb.open(copy_with_log(base, tmp_path / "late", applied_log), readonly=False,
                   gc="none") as db:
        assert not db.check().ok


CRASHING_APPEND = r"""
import sys
import pydb
from pydb import _pydb
base, n = sys.argv[1], int(sys.argv[2])
db = pydb.open(base, readonly=False, sync=True, gc="none")
_pydb._testing.fail_io(n, crash=True)   # n > 0: exit before the n-th file operation
db.append([(1, "NEWREC")])
print(_pydb._testing.io_count(), flush=True)
"""


def values(db) -> list[bytes]:
    return [f.raw for r in db for f in r.fields if f.tag == 1 and f.raw.endswith(b"REC")]


def test_a_dead_writer_s_commit_reaches_the_pair_a_compaction_made(tmp_path):
    """Writer handle B is open on the files that a compaction of another
    handle then replaces; a third writer, on the new pair, is killed just
    before each write-side file operation of one append in turn, so that
    from its commit point on the log holds a commit B has never seen.
    B's next transaction switches to the new pair before it replays the
    log: the dead writer's record is kept exactly when a recovery of a
    copy taken after the crash keeps it, B's record follows it, and the
    header describes the new pair (a fresh reader reads both, check()
    passes).  Before, B replayed the log into the replaced pair: the
    commit was lost from the files everyone reads and the header
    described the old pair."""
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    base0, _, _ = make_db(tmp_path, n=40, name="pristine")
    count = tmp_path / "count"
    for ext in (".mst", ".xrf"):
        shutil.copy(f"{base0}{ext}", f"{count}{ext}")
    total = int(subprocess.run([sys.executable, "-c", CRASHING_APPEND, str(count), "-1"],
                               env=env, capture_output=True, text=True, check=True).stdout)
    kept = 0
    for k in range(1, total + 1):
        base = tmp_path / f"c{k}"
        for ext in (".mst", ".xrf"):
            shutil.copy(f"{base0}{ext}", f"{base}{ext}")
        with pydb.open(base, readonly=False, sync=True, gc="none") as b:
            for m in range(1, 6):   # garbage (this header's count) for the compaction
                b.update(m, content(m, 9, 50))
            with pydb.open(base, readonly=False, sync=True, gc="none") as c:
                assert compact(c, 1000)[2] == 1
            p = subprocess.run([sys.executable, "-c", CRASHING_APPEND, str(base), str(k)],
                               env=env, capture_output=True, text=True)
            assert p.returncode == 137, (k, p.stdout, p.stderr[-2000:])
            oracle = tmp_path / f"o{k}"
            for ext in (".mst", ".xrf", ".wal"):
                shutil.copy(f"{base}{ext}", f"{oracle}{ext}")
            with pydb.open(oracle) as o:                 # its recovery
                want = values(o)
            b.append([(1, "BREC")])
        assert want in ([], [b"NEWREC"]), (k, want)
        kept += want == [b"NEWREC"]
        with pydb.open(base) as r:
            assert values(r) == want + [b"BREC"], (k, want)
            assert r.check().ok
    assert 0 < kept < total   # crash points before and after the commit point


def test_a_handle_on_a_replaced_pair_leaves_the_log_at_close(tmp_path):
    """Writer A is open on the files a compaction of writer C then
    replaces; C commits with sync=True (its frame stays in the log until a
    checkpoint syncs the new pair).  A's close must not checkpoint: it
    would fsync its own, replaced files and empty the log, and a power cut
    would then lose C's acknowledged commit.  The log keeps C's frame
    until C (on the new pair) closes, and every record is there."""
    base, _, _ = make_db(tmp_path, n=40)
    wal = f"{base}.wal"
    a = pydb.open(base, readonly=False, sync=True, gc="none")
    for m in range(1, 6):   # garbage (this header's count) for the compaction
        a.update(m, content(m, 9, 50))
    with pydb.open(base, readonly=False, sync=True, gc="none") as c:
        assert compact(c, 1000)[2] == 1
        mfn = c.append([(1, "CREC")])
        assert os.path.getsize(wal) > 0   # the frame, kept for a checkpoint
        a.close()
        assert os.path.getsize(wal) > 0   # A left it
    assert os.path.getsize(wal) == 0      # C's close checkpointed the new pair
    with pydb.open(base) as r:
        assert [f.raw for f in r[mfn].fields] == [b"CREC"]
        assert r.check().ok


# ------------------------------------------- ISIS's "update pending" records

def _winisis_copy(tmp_path):
    """A copy of the WinISIS sample BIBL (cp850): MFN 5 is "update
    pending", its back pointer at the version BIBL.IFP reflects."""
    from conftest import data_path
    src = data_path("cpan__Biblio-Isis-0.24/data/winisis")
    if not src.is_dir():
        pytest.skip(f"real data not found: {src} (set PYDB_TEST_DATA)")
    dst = tmp_path / "winisis"
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    return dst / "BIBL"


def _chain(db, mfn):
    return [tuple((f.tag, f.raw) for f in v.fields) for v in db.versions(mfn)]


@pytest.mark.parametrize("catch_up", [False, True])
def test_a_pending_record_keeps_the_version_its_isis_index_reflects(tmp_path, catch_up):
    """A compaction keeps, for a record whose XRF says "update pending",
    the version the ISIS inverted file reflects (the oldest of its chain:
    ISIS clears the back pointer of the version it inverts), named by the
    back pointer of the current one, so that ISIS's inverted-file update
    can still remove its keys.  Before, every pending record was left with
    no back version, WinISIS's own untouched MFN 5 included (a review).
    Records pydb made (flag "new") and active ones with no pending flag
    keep none."""
    base = _winisis_copy(tmp_path)
    with pydb.open(base, readonly=False, encoding="cp850", gc="none") as db:
        five = _chain(db, 5)
        two = _chain(db, 2)
        assert len(five) == 2 and db[5].pending and len(two) == 1
        db.update(2, [(24, "first")])             # pending now: chain of 2
        db.update(2, [(24, "second")])            # chain of 3
        new = db.append([(24, "made here")])
        db.update(new, [(24, "made here, changed")])
        db.delete(1)
        if catch_up:
            with db.transaction() as tx:          # more than one step copies
                for _ in range(600):
                    tx.append([(24, "filler")])
            with pytest.raises(pydb.LockTimeoutError):
                db.collect(0)                     # one step: MFNs 1..256 copied
            db.update(5, [(24, "changed after its copy")])  # copied again
        got = db.collect()
        assert got["compactions"] == 1
        if catch_up:
            assert _chain(db, 5) == [((24, b"changed after its copy"),), five[1]]
        else:
            assert _chain(db, 5) == five          # untouched: as WinISIS left it
        assert _chain(db, 2) == [((24, b"second"),), two[0]]
        assert db[2].pending and db[5].pending
        assert _chain(db, new) == [((24, b"made here, changed"),)]
        assert [v.back_offset for v in db.versions(5)][1:] == [None]
        # kept versions are back versions, not garbage: nothing to collect
        garbage = db.stat(index=False)["garbage"]
        assert (garbage["versions"], garbage["bytes"]) == (0, 0)
        assert db.collect()["compactions"] == 0
        rep = db.check()
        assert rep.ok and rep.warnings == 0, rep.problems


def test_a_compaction_replaces_the_files_symbolic_links_lead_to(tmp_path):
    """A database whose .mst and .xrf are symbolic links (to another
    folder): a compaction replaces the files the links lead to, and the
    links stay links, so both paths read the same database after it.
    Before, the new files were renamed over the links, and the folder the
    links led to kept the old files (review of real data)."""
    real, links = tmp_path / "real", tmp_path / "links"
    real.mkdir()
    links.mkdir()
    base = real / "db"
    with pydb.create(base, gc="none") as db:
        for i in range(50):
            db.append([(24, f"record {i}")])
    for ext in ("mst", "xrf"):
        (links / f"db.{ext}").symlink_to(real / f"db.{ext}")
    with pydb.open(links / "db", readonly=False, gc="none") as db:
        for m in range(1, 51, 2):
            db.update(m, [(24, f"changed {m}")])
        assert db.collect()["compactions"] == 1
        db.append([(24, "after the compaction")])
    assert (links / "db.mst").is_symlink() and (links / "db.xrf").is_symlink()
    assert leftovers(links / "db") == [] and leftovers(base) == []
    with pydb.open(links / "db") as a, pydb.open(base) as b:
        assert dump(a) == dump(b) and a.max_mfn == 51
        assert a[1].raw(24) == [b"changed 1"] and len(a.versions(1)) == 1
        assert b.check().ok


def _abcd_copy(tmp_path, name):
    """A copy of ABCD's Windows example database `name` (master file,
    XRF, inverted file)."""
    from conftest import data_path
    src = data_path(f"ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/{name}/data")
    if not src.is_dir():
        pytest.skip(f"real data not found: {src} (set PYDB_TEST_DATA)")
    dst = tmp_path / name
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    return dst / name


@pytest.mark.filterwarnings("ignore::pydb.StaleIndexWarning")   # its 4 pending records
def test_collect_compacts_the_dead_space_other_programs_left(tmp_path):
    """ABCD's unimarc example: 291,328 bytes of master file of which its
    18 records' versions hold 13,962 (3.8% live): what WinISIS/CISIS
    updates leave, which no pydb writer counted, so collect() reclaimed
    nothing (a librarian's trial).  collect() now finds the dead space
    (one walk) and compacts: every version the XRF reaches is kept (the 4
    "update pending" records keep the one their inverted file reflects),
    the inverted file still answers, and a second call finds nothing.
    ABCD's odds example, which holds damage, is left alone."""
    base = _abcd_copy(tmp_path, "unimarc")
    with pydb.open(base, readonly=False, gc="none", encoding="utf-8") as db:
        before = {m: _chain(db, m) for m in db.mfns()}
        counts = db.counts()
        found = list(db.search("A$"))
        assert db.stat(index=False)["master_file"]["size"] == 291_328
        got = db.collect()
        assert (got["compactions"], got["versions"], got["bytes"]) == (1, 0, 276_992)
        assert {m: _chain(db, m) for m in db.mfns()} == before
        assert db.counts() == counts and counts["pending"] == 4
        assert list(db.search("A$")) == found and len(found) == 10
        assert db.stat(index=False)["master_file"]["size"] == 14_336
        assert db.collect()["compactions"] == 0
        assert db.check().ok
    odds = _abcd_copy(tmp_path, "odds")
    size = os.path.getsize(f"{odds}.mst")
    with pydb.open(odds, readonly=False, gc="none", encoding="cp1252") as db:
        assert db.stat(index=False)["records"]["damaged"] == 1
        assert db.collect()["compactions"] == 0
    assert os.path.getsize(f"{odds}.mst") == size


def test_collect_leaves_the_padding_of_aligned_versions(tmp_path):
    """A master file of small versions aligned to 64 bytes (MSTXL 6) is
    mostly padding, which a compaction writes again: collect() does not
    compact it (it would at every call)."""
    with pydb.create(tmp_path / "x", mstxl=6, gc="none") as db:
        with db.transaction() as tx:
            for _ in range(2000):
                tx.append([(1, "x")])
        size = os.path.getsize(tmp_path / "x.mst")
        assert db.collect()["compactions"] == 0
        assert os.path.getsize(tmp_path / "x.mst") == size
    # nor the rest of the last block (a review: a database of one small
    # record was compacted at every call, each of which makes a commit)
    for layout in pydb.LAYOUTS:
        with pydb.create(tmp_path / layout, layout=layout, gc="none") as db:
            db.append([(1, "hello")])
            assert [db.collect()["compactions"] for _ in range(3)] == [0, 0, 0], layout
