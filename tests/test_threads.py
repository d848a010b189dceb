"""Threads: concurrent readers, the GIL, and close() racing with reads.

(a) 8 threads reading one database in their own random orders get exactly
    what one thread gets (io mmap/pread x lock none/mutex; a generated
    database, and LILACS from the shared data folder when present).
(b) The GIL is released while the core waits for the disk: with
    ``_pydb._testing.set_read_delay`` making every core pread sleep, the main thread
    keeps running Python code during the read.
(c) A Python thread keeps at least 25 % of its solo speed while two other
    threads read every record repeatedly with io="direct".
(d) close() while other threads read: no crash; each reader finishes or
    gets pydb.ClosedError.
(e) Iteration and read_many() with a concurrent close().

Tests for bugs found here (double close, close() run from inside argument
conversion, mfns() racing close()) run their reproduction in a subprocess,
so that a regression crashes that test only.
"""

from __future__ import annotations

import contextlib
import faulthandler
import itertools
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import pydb
from pydb import _pydb

from conftest import SANITIZER, data_path

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = [pytest.mark.sanitize_address, pytest.mark.sanitize_thread]


LILACS = "scieloorg__pyisis/pyisis/pyisis/sample/lilacs"
NTHREADS = 8

# A free-threaded interpreter running without the GIL (docs/free-threaded.md):
# the tests of when reads keep or release the GIL measure nothing there.
needs_gil = pytest.mark.skipif(not getattr(sys, "_is_gil_enabled", lambda: True)(),
                               reason="no GIL to keep or release (free-threaded)")


@pytest.fixture(autouse=True)
def _hang_guard():
    """A deadlock is a failure: dump every thread's stack and exit."""
    faulthandler.dump_traceback_later(180, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
    _pydb._testing.set_read_delay(0)


def _records(n: int):
    rnd = random.Random(1234)
    out = []
    for i in range(1, n + 1):
        fields = [(1, b"mfn %d" % i)]
        for _ in range(rnd.randint(0, 12)):
            fields.append((rnd.randint(2, 999),
                           bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 300)))))
        out.append(fields)
    return out


@pytest.fixture(scope="module")
def gen_db(tmp_path_factory) -> Path:
    """A generated database of 1500 records (FFI aligned, MSTXL 3)."""
    d = tmp_path_factory.mktemp("threads")
    _pydb._build(str(d / "gen"), "ffi-aligned", 3, _records(1500), False)
    return d / "gen"


def _lilacs() -> Path:
    p = data_path(LILACS)
    if not p.with_suffix(".mst").is_file():
        pytest.skip("LILACS sample not available")
    return p


def _db_path(which, gen_db):
    return gen_db if which == "generated" else _lilacs()


def snap(rec):
    return (rec.mfn, tuple((f.tag, f.raw) for f in rec.fields))


def run_threads(targets, timeout=120):
    """Start the callables together (barrier), join them, return the
    exceptions they raised (as a list)."""
    errors = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn):
        def run():
            try:
                barrier.wait()
                fn()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a reader thread hangs"
    return errors


# ------------------------------------------------------- (a) determinism

@pytest.mark.parametrize("lock", ["none", "mutex"])
@pytest.mark.parametrize("io", ["mmap", "pread"])
@pytest.mark.parametrize("which", ["generated", "lilacs"])
def test_concurrent_readers_agree(which, io, lock, gen_db):
    path = _db_path(which, gen_db)
    passes = 3 if which == "generated" else 1
    with pydb.open(path, io=io, lock=lock, encoding="latin-1") as db:
        mfns = db.mfns()
        assert len(mfns) == len(db) > 1000 and mfns == list(range(1, len(mfns) + 1))
        if SANITIZER:           # 5-10x slower there: a slice will do
            mfns, passes = mfns[:400], 1
        reference = {m: snap(db[m]) for m in mfns}   # one thread, MFN order
        results = [[] for _ in range(NTHREADS)]

        def reader(i):
            def run():
                rnd = random.Random(i)
                out = results[i]
                for p in range(passes):
                    order = mfns[:]
                    rnd.shuffle(order)
                    if (i + p) % 3 == 0:        # one record per call
                        out.extend((m, snap(db[m])) for m in order)
                    elif (i + p) % 3 == 1:      # batches of 1..64
                        k = 0
                        while k < len(order):
                            chunk = order[k:k + rnd.randint(1, 64)]
                            out.extend(zip(chunk, map(snap, db.read_many(chunk)), strict=True))
                            k += len(chunk)
                    else:                       # iteration (MFN order)
                        out.extend((r.mfn, snap(r)) for r in
                                   itertools.islice(db, len(mfns)))
                        out.extend((m, snap(db[m])) for m in order[:200])
            return run

        errors = run_threads([reader(i) for i in range(NTHREADS)])
        assert not errors, errors
    for i, out in enumerate(results):
        assert len(out) >= passes * len(mfns)
        bad = [(m, s) for m, s in out if s != reference.get(m)]
        assert not bad, f"thread {i}: {len(bad)} records differ, first MFN {bad[0][0]}"


# ----------------------------------------------------------- (b) the GIL

def _count_during(op, delay_us, window_trim):
    """Run op() in a thread with every core pread delayed by delay_us; the
    main thread counts Python loop iterations meanwhile, timestamping every
    1000th.  Returns (iterations counted strictly inside the call, call
    duration).  If the GIL were held during the call, no timestamp could
    fall inside it."""
    span = {}
    done = threading.Event()

    def reader():
        try:
            span["t0"] = time.perf_counter()
            span["result"] = op()
            span["t1"] = time.perf_counter()
        except BaseException as e:  # noqa: BLE001
            span["error"] = e
        finally:
            done.set()

    stamps = []
    _pydb._testing.set_read_delay(delay_us)
    try:
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        n = 0
        while not done.is_set():
            n += 1
            if n % 1000 == 0:
                stamps.append(time.perf_counter())
        t.join()
    finally:
        _pydb._testing.set_read_delay(0)
    assert "error" not in span, span["error"]
    lo, hi = span["t0"] + window_trim, span["t1"] - window_trim
    inside = sum(1 for s in stamps if lo < s < hi) * 1000
    return inside, span["t1"] - span["t0"], span["result"]


def test_gil_released_during_read(gen_db):
    """The issue's proof: 200 ms per pread, db[1] in a thread, the main
    thread keeps counting."""
    with pydb.open(gen_db, io="pread") as db:
        want = snap(db[1])
        inside, duration, rec = _count_during(lambda: db[1], 200_000, 0.02)
    assert snap(rec) == want
    assert duration >= 0.35, "the read delay hook did not take effect"   # 2 preads
    assert inside > 10_000, f"main thread ran only {inside} iterations during the read"


@pytest.mark.parametrize("op", ["read_many", "iterate", "mfns", "len", "counts",
                                "xrf_entry", "versions", "open"])
def test_gil_released_by_every_operation(op, gen_db):
    db = pydb.open(gen_db, io="pread")
    ops = {
        "read_many": lambda: db.read_many([1, 2, 700]),
        "iterate": lambda: sum(1 for _ in db.records(start=1498)),
        "mfns": lambda: len(db.mfns()),
        "len": lambda: len(db),
        "counts": lambda: db.counts(),
        "xrf_entry": lambda: db.xrf_entry(5),
        "versions": lambda: db.versions(9),
        "open": lambda: pydb.open(gen_db, io="pread").close(),
    }
    delay = 5_000 if op == "open" else 50_000
    try:
        # On a loaded machine the counting thread may get no core for a
        # window of tens of milliseconds: a call that held the GIL
        # counts 0 whatever the delay, so the next try doubles it.
        for _attempt in range(3):
            inside, duration, _result = _count_during(ops[op], delay, 0.01)
            assert duration >= delay / 1e6
            if inside > 2_000:
                break
            delay *= 2
    finally:
        db.close()
    assert inside > 2_000, f"{op}: main thread ran only {inside} iterations"


# ------------------------------------------ (b2) the GIL only when I/O blocks

def _drop_cache(base: Path) -> bool:
    """Evict the .mst/.xrf pages no process maps from the page cache;
    False where the .mst stays cached (tmpfs) or mincore is absent."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    for suf in (".mst", ".xrf"):
        fd = os.open(f"{base}{suf}", os.O_RDONLY)
        try:
            os.fsync(fd)              # dirty pages are never dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            size = os.fstat(fd).st_size
            m = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)  # never written
        finally:
            os.close(fd)
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            view = ctypes.c_char.from_buffer(m)
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(view)),
                              ctypes.c_size_t(size), vec)
            del view
            if rc != 0:
                return False
            resident = sum(v & 1 for v in vec)
        finally:
            m.close()
        if suf == ".mst" and resident > pages // 4:
            return False
    return True


def _gil_taken_by_other_thread(fn) -> int:
    """Run fn() while another thread waits for the GIL, with a switch
    interval of 0.5 s: the other thread runs during fn() only if fn()
    releases the GIL (fn() must take well under the interval).  Returns
    how many loop turns it made meanwhile."""
    box = {"n": 0, "stop": False}

    def count():
        while not box["stop"]:
            box["n"] += 1

    old = sys.getswitchinterval()
    t = threading.Thread(target=count, daemon=True)
    t.start()
    try:
        time.sleep(0.02)          # let it run; it now holds the GIL
        sys.setswitchinterval(0.5)
        time.sleep(0.001)         # take the GIL back: the other thread waits
        before = box["n"]
        fn()
        during = box["n"] - before
    finally:
        box["stop"] = True
        sys.setswitchinterval(old)
        t.join(30)
    return during


def _nowait_reads_work(base: Path) -> bool:
    """True if a cached read with RWF_NOWAIT succeeds on this file system."""
    if not hasattr(os, "RWF_NOWAIT"):
        return False
    fd = os.open(f"{base}.mst", os.O_RDONLY)
    try:
        os.pread(fd, 4096, 0)
        buf = bytearray(64)
        return os.preadv(fd, [buf], 0, os.RWF_NOWAIT) == 64
    except OSError:
        return False
    finally:
        os.close(fd)


@needs_gil
@pytest.mark.skipif(bool(SANITIZER), reason="sanitizer builds take locks of their own")
@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_cache_hits_keep_the_gil(io, gen_db):
    """Reads of cached records never hand the GIL to another thread (a
    CPU-bound thread beside them would take it for a switch interval at
    every read)."""
    if io == "pread" and not _nowait_reads_work(gen_db):
        pytest.skip("preadv2(RWF_NOWAIT) is not supported on this file system")
    with pydb.open(gen_db, io=io, gc="none") as db:
        mfns = db.mfns()
        for m in mfns:
            db[m]                      # every page cached and seen
        want = [snap(db[m]) for m in mfns[:500]]
        got = []
        during = _gil_taken_by_other_thread(
            lambda: got.extend(snap(db[m]) for m in mfns[:500]))
    assert got == want
    assert during == 0, f"{io}: the GIL was released during cached reads"


@needs_gil
@pytest.mark.skipif(bool(SANITIZER), reason="sanitizer builds take locks of their own")
def test_snapshot_cache_hits_keep_the_gil(gen_db):
    """The same for reads through a snapshot of records unchanged since."""
    with pydb.open(gen_db, gc="none") as db, db.snapshot() as view:
        mfns = db.mfns()[:500]
        want = [snap(db[m]) for m in mfns]
        for m in mfns:
            view[m]
        got = []
        during = _gil_taken_by_other_thread(lambda: got.extend(snap(view[m]) for m in mfns))
    assert got == want
    assert during == 0, "the GIL was released during cached snapshot reads"


@needs_gil
@pytest.mark.skipif(bool(SANITIZER), reason="sanitizer builds take locks of their own")
def test_cold_mmap_read_releases_the_gil(gen_db):
    """py-lmdb #65: a read whose pages are on the disk, not in the page
    cache, runs with the GIL released, in the default mode too."""
    with pydb.open(gen_db, io="pread", gc="none") as db:
        mfn = db.mfns()[-300]
        want = snap(db[mfn])
    with pydb.open(gen_db, io="mmap", gc="none") as db:
        off = db.xrf_entry(mfn)["offset"]   # the .xrf only: the .mst page
        if not _drop_cache(gen_db):         # is not mapped here yet
            pytest.skip("the page cache cannot be dropped here (tmpfs?)")
        assert _pydb._testing.resident(db, False, off, 64) is False
        got = []
        during = _gil_taken_by_other_thread(lambda: got.append(snap(db[mfn])))
        assert got == [want]
        assert during > 0, "the cold read kept the GIL"
        assert _pydb._testing.resident(db, False, off, 64) is True


def test_residency_is_what_the_copy_touched(gen_db):
    """The residency answer covers every page of the range: a range not
    mapped is None, a chunk seen once is answered from its bitmap."""
    with pydb.open(gen_db, io="mmap", gc="none") as db:
        size = os.path.getsize(f"{gen_db}.mst")
        for m in db.mfns():
            db[m]
        assert _pydb._testing.resident(db, False, 0, size) is True
        assert _pydb._testing.resident(db, False, -1, 10) is None
        assert _pydb._testing.resident(db, False, 0, 0) is None
        assert _pydb._testing.resident(db, False, 0, 1 << 40) is None
    with pydb.open(gen_db, io="pread", gc="none") as db:
        assert _pydb._testing.resident(db, False, 0, 10) is None


# ---------------------------- (b3) searches: the GIL only when they may wait

_SEARCH_WORDS = ["ALPHA", "BETA", "GAMMA", "DELTA", "EPSILON"]
_SEARCHES = ["ALPHA", "BETA * GAMMA", "DEL$", "(ALPHA + DELTA) ^ BETA", '"ALPHA"',
             "NOTHINGHERE", "ALPHA . BETA", "BETA $ GAMMA", "ALPHA (F) EPSILON"]


def _search_db(path: Path, n: int = 400) -> pydb.Database:
    """A database with a native index of the words above, n records, each
    with some of them (record i: the words whose position divides i+1)."""
    db = pydb.create(path, fst="1 4 v24", sync=False, gc="none")
    with db.transaction() as tx:
        for i in range(n):
            words = [w for k, w in enumerate(_SEARCH_WORDS) if (i + 1) % (k + 1) == 0]
            tx.append([(24, " ".join(words))])
    return db


def _want(db, expr: str, n: int = 400) -> list[int]:
    """What _search_db's index gives: the Boolean expressions worked out by
    hand, the positional ones as the search with the GIL released finds
    them (no postings may be read with it held)."""
    has = {w: {i + 1 for i in range(n) if (i + 1) % (k + 1) == 0}
           for k, w in enumerate(_SEARCH_WORDS)}
    by_hand = {"ALPHA": has["ALPHA"], '"ALPHA"': has["ALPHA"], "NOTHINGHERE": set(),
               "BETA * GAMMA": has["BETA"] & has["GAMMA"], "DEL$": has["DELTA"],
               "(ALPHA + DELTA) ^ BETA": (has["ALPHA"] | has["DELTA"]) - has["BETA"]}
    if expr in by_hand:
        return sorted(by_hand[expr])
    old = _pydb._testing.set_nowait_postings(0)
    try:
        return list(db.search(expr))
    finally:
        _pydb._testing.set_nowait_postings(old)


def has_adjacent(n: int) -> list[int]:
    """Records of _search_db whose field has ALPHA right before BETA: those
    with BETA (every second one)."""
    return list(range(2, n + 1, 2))


@needs_gil
@pytest.mark.skipif(bool(SANITIZER), reason="sanitizer builds take locks of their own")
def test_cached_searches_keep_the_gil(tmp_path):
    """Searches of a native index whose segments are in the page cache
    never hand the GIL to another thread: a CPU-bound thread beside them
    would take it for a switch interval at every search."""
    with _search_db(tmp_path / "s") as db:
        want = [_want(db, e) for e in _SEARCHES]
        assert want[6] == has_adjacent(400) and want[7] and want[8]
        assert [list(db.search(e)) for e in _SEARCHES] == want   # pages seen
        got: list[list[int]] = []
        during = _gil_taken_by_other_thread(
            lambda: got.extend(list(db.search(e)) for e in _SEARCHES * 20))
    assert got == want * 20
    assert during == 0, "the GIL was released during cached searches"


def _until_other_thread_ran(fn, tries: int = 200) -> None:
    """Call fn() until a thread waiting for the GIL got it at least once
    (the switch interval then makes the next call wait for it: each call
    after a release takes one interval), at most `tries` times.  A release
    hands the GIL over only if the waiting thread wakes before the call
    takes it back, which a loaded machine may delay past one short call."""
    for _ in range(tries):
        t0 = time.perf_counter()
        fn()
        if time.perf_counter() - t0 > 0.1:
            return   # it waited a switch interval: the other thread ran


@needs_gil
@pytest.mark.skipif(bool(SANITIZER), reason="sanitizer builds take locks of their own")
def test_long_searches_release_the_gil(tmp_path):
    """A search that would read more postings than the limit (65,536 by
    default) gives the GIL up and is redone without it: the same answer,
    and a thread waiting for the interpreter runs meanwhile.  Under a
    higher limit the same searches keep it."""
    n = 70_000
    db = pydb.create(tmp_path / "s", fst="1 4 v24", sync=False, gc="none")
    with db:
        with db.transaction() as tx:
            for _ in range(n):
                tx.append([(24, "ALPHA")])
        assert len(db.search("ALPHA")) == n
        got: list[int] = []
        during = _gil_taken_by_other_thread(
            lambda: _until_other_thread_ran(lambda: got.append(len(db.search("ALPHA")))))
        old = _pydb._testing.set_nowait_postings(n)
        try:
            kept = _gil_taken_by_other_thread(
                lambda: got.extend(len(db.search("ALPHA")) for _ in range(20)))
        finally:
            assert _pydb._testing.set_nowait_postings(old) == n
    assert got == [n] * len(got) and len(got) >= 21
    assert during > 0, f"searches of {n} postings kept the GIL"
    assert kept == 0, f"searches of {n} postings under a limit of {n} released the GIL"


@pytest.mark.parametrize("writer", ["handle", "process"])
def test_search_sees_a_commit_at_once(tmp_path, writer):
    """A search served without reading the MANIFEST (the commit header
    says no commit replaced it) still sees the next commit of another
    handle or process at once: each commit moves the header."""
    path = tmp_path / "s"
    _search_db(path).close()
    alpha = list(range(1, 401))
    with pydb.open(path, gc="none") as reader:
        for i in range(5):
            assert list(reader.search("ALPHA")) == alpha   # cached
            word = f"ZETA{'ABCDE'[i]}"
            if writer == "handle":
                with pydb.open(path, readonly=False, gc="none") as w:
                    mfn = w.append([(24, f"{word} ALPHA")])
            else:
                out = subprocess.run(
                    [sys.executable, "-c", textwrap.dedent(f"""
                        import pydb
                        with pydb.open({str(path)!r}, readonly=False, gc="none") as w:
                            print(w.append([(24, "{word} ALPHA")]))
                    """)], capture_output=True, text=True, check=True,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
                mfn = int(out.stdout)
            assert mfn == 401 + i
            alpha.append(mfn)
            assert list(reader.search(word)) == [mfn]
            assert list(reader.search("ALPHA")) == alpha


@needs_gil
@pytest.mark.skipif(bool(SANITIZER), reason="sanitizer builds take locks of their own")
def test_cooperative_step_is_not_taken_with_the_gil(tmp_path):
    """Under the cooperative policy a reader that meets garbage collects
    some: with the GIL released (the read served with it held is dropped
    and redone), never while other threads wait for the interpreter."""
    db = _search_db(tmp_path / "s", 50)
    db.close()
    with pydb.open(tmp_path / "s", readonly=False, sync=False, gc="cooperative") as db:
        # The other thread must also get a core in the step's short window:
        # on a loaded machine it may not, so up to five tries (a read that
        # keeps the GIL gives 0 in every one).
        for attempt in range(5):
            for i in range(10):
                db.update(7, [(24, f"ALPHA V{'ABCDEFGHIJ'[i]}{attempt}")])
            assert db.stat()["garbage"]["versions"] > 0
            got: list = []
            during = _gil_taken_by_other_thread(lambda out=got: out.append(snap(db[7])))
            assert got == [snap(db[7])]
            if during > 0:
                break
        assert during > 0, "the read that met garbage kept the GIL for the step"


# --------------------------------------- (c) Python keeps running (direct)

def _rate(seconds, stop_after=None):
    """Loop iterations per second of a Python counting thread."""
    box = {"stop": False, "n": 0}

    def count():
        n = 0
        t0 = time.perf_counter()
        while not box["stop"]:
            n += 1
        box["n"], box["t"] = n, time.perf_counter() - t0

    t = threading.Thread(target=count, daemon=True)
    t.start()
    time.sleep(seconds)
    box["stop"] = True
    t.join(30)
    return box["n"] / box["t"]


def test_python_thread_keeps_running_during_direct_reads(gen_db):
    path = gen_db
    try:
        p = _lilacs()
        path = p
    except pytest.skip.Exception:
        pass
    try:
        db = pydb.open(path, io="direct", encoding="latin-1")
    except pydb.UnsupportedError as e:
        pytest.skip(f"O_DIRECT refused here: {e}")
    with db:
        mfns = db.mfns()
        stop = threading.Event()
        reads = [0, 0]

        def by_iteration():
            while not stop.is_set():
                for _ in db:
                    reads[0] += 1
                    if stop.is_set():
                        return

        def by_mfn():
            while not stop.is_set():
                for m in mfns:
                    db[m]
                    reads[1] += 1
                    if stop.is_set():
                        return

        solo_before = _rate(0.4)
        readers = [threading.Thread(target=f, daemon=True) for f in (by_iteration, by_mfn)]
        for t in readers:
            t.start()
        time.sleep(0.05)
        loaded = _rate(1.0)
        stop.set()
        for t in readers:
            t.join(60)
        solo_after = _rate(0.4)
    solo = (solo_before + solo_after) / 2
    assert reads[0] > 100 and reads[1] > 100, reads      # the readers did read
    assert loaded >= 0.25 * solo, (
        f"counting thread fell to {loaded / solo:.0%} of its solo rate "
        f"({loaded:.0f}/s vs {solo:.0f}/s) while {reads} records were read")


# ------------------------------------------- (d), (e) close() during reads

@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_close_while_reading(io, gen_db):
    db = pydb.open(gen_db, io=io)
    mfns = db.mfns()
    reference = {m: snap(db[m]) for m in mfns}
    got = [[] for _ in range(6)]
    outcomes = []

    def reader(i):
        def run():
            rnd = random.Random(i)
            try:
                for _ in range(1000):
                    kind = (i + rnd.randrange(4)) % 4
                    if kind == 0:
                        m = rnd.choice(mfns)
                        got[i].append(snap(db[m]))
                    elif kind == 1:
                        got[i].extend(map(snap, db.read_many(rnd.sample(mfns, 20))))
                    elif kind == 2:
                        for r in db.records(start=rnd.choice(mfns)):
                            got[i].append(snap(r))
                    else:
                        got[i].extend(map(snap, db.versions(rnd.choice(mfns))))
                        len(db)
                outcomes.append("finished")
            except pydb.ClosedError:
                outcomes.append("closed")
        return run

    def closer():
        time.sleep(0.15)
        db.close()
        outcomes.append("close returned")

    if io == "pread":
        _pydb._testing.set_read_delay(300)     # keep reads in flight
    try:
        errors = run_threads([reader(i) for i in range(6)] + [closer])
    finally:
        _pydb._testing.set_read_delay(0)
    assert not errors, errors
    assert sorted(outcomes).count("close returned") == 1
    assert len(outcomes) == 7
    assert "closed" in outcomes, "close() came after every reader finished"
    assert db.closed
    for out in got:
        for m, fields in out:
            assert (m, fields) == reference[m]
    with pytest.raises(pydb.ClosedError):
        db[1]
    db.close()   # idempotent


@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_iterate_with_concurrent_close(io, gen_db):
    db = pydb.open(gen_db, io=io)
    reference = [snap(r) for r in db]
    got, box = [], {}
    started = threading.Event()

    def iterate():
        try:
            for r in db:
                got.append(snap(r))
                started.set()
                time.sleep(0.0005)          # slow consumer: close() lands mid-way
            box["end"] = "finished"
        except pydb.ClosedError:
            box["end"] = "closed"

    def closer():
        started.wait(30)
        time.sleep(0.05)
        db.close()

    errors = run_threads([iterate, closer])
    assert not errors, errors
    assert box["end"] in ("finished", "closed")
    assert got == reference[:len(got)]
    if box["end"] == "closed":
        # The batch already read stays valid; nothing past it was returned.
        assert len(got) < len(reference)


@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_read_many_with_concurrent_close(io, gen_db):
    db = pydb.open(gen_db, io=io)
    mfns = db.mfns()
    reference = [snap(db[m]) for m in mfns]
    results = []
    go = threading.Event()

    def bulk():
        go.set()
        for _ in range(200):
            try:
                recs = db.read_many(mfns)
            except pydb.ClosedError:
                results.append("closed")
                return
            results.append([snap(r) for r in recs])

    def closer():
        go.wait(30)
        time.sleep(0.02)
        db.close()

    if io == "pread":
        _pydb._testing.set_read_delay(20)
    try:
        errors = run_threads([bulk, bulk, closer])
    finally:
        _pydb._testing.set_read_delay(0)
    assert not errors, errors
    assert results.count("closed") == 2, "close() never overlapped read_many()"
    for r in results:
        assert r == "closed" or r == reference


def test_record_outlives_database(gen_db):
    db = pydb.open(gen_db)
    recs = db.read_many([1, 2, 3])
    it = iter(db)
    first = next(it)
    db.close()
    assert [r.mfn for r in recs] == [1, 2, 3] and first.mfn == 1
    assert recs[0][1] and first.fields
    with pytest.raises(pydb.ClosedError):
        for _ in it:       # the rest of the first batch, then ClosedError
            pass


# ------------------------------------------- pydb bugs (subprocess repros)

def _run_script(code: str, tmp_path: Path, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(pydb.__file__).resolve().parents[1])] +
        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONFAULTHANDLER"] = "1"
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=timeout)


# Crash reproductions are not rerun under sanitizers (conftest.py skips them there).
crash_repro = pytest.mark.crash_repro


@crash_repro
def test_concurrent_close_calls(gen_db, tmp_path):
    p = _run_script(f"""
        import threading, time, pydb
        from pydb import _pydb
        db = pydb.open({str(gen_db)!r}, io="pread")
        _pydb._testing.set_read_delay(200_000)
        r = threading.Thread(target=lambda: db[1]); r.start()
        time.sleep(0.1)
        cs = [threading.Thread(target=db.close) for _ in range(2)]
        for c in cs: c.start()
        for c in cs + [r]: c.join()
        _pydb._testing.set_read_delay(0)
        print("survived")
    """, tmp_path)
    assert p.returncode == 0 and "survived" in p.stdout, (p.returncode, p.stderr[-3000:])


@crash_repro
def test_mfns_with_concurrent_close(tmp_path):
    p = _run_script("""
        import threading, time, pydb
        from pydb import _pydb
        _pydb._build("big", "isis-packed", 0, ([(1, b"r")] for _ in range(20000)), False)
        for attempt in range(8):
            db = pydb.open("big", io="mmap")
            stop = []
            def reader():
                try:
                    for _ in range(50):
                        db.mfns()
                except pydb.ClosedError:
                    pass
            def busy():
                while not stop:
                    pass
            def closer():
                time.sleep(0.02)
                db.close()
            ts = [threading.Thread(target=f) for f in (reader, busy, closer)]
            for t in ts: t.start()
            ts[0].join(); ts[2].join(); stop.append(1); ts[1].join()
        print("survived")
    """, tmp_path)
    assert p.returncode == 0 and "survived" in p.stdout, (p.returncode, p.stderr[-3000:])


@crash_repro
def test_read_many_argument_closes_database(gen_db, tmp_path):
    p = _run_script(f"""
        import pydb
        db = pydb.open({str(gen_db)!r})
        def mfns():
            yield 1
            db.close()
            yield 2
        try:
            db.read_many(mfns())
        except pydb.ClosedError:
            pass
        print("survived")
    """, tmp_path)
    assert p.returncode == 0 and "survived" in p.stdout, (p.returncode, p.stderr[-3000:])


@crash_repro
def test_read_at_argument_closes_database(gen_db, tmp_path):
    p = _run_script(f"""
        import pydb
        db = pydb.open({str(gen_db)!r})
        class Offset:
            def __index__(self):
                db.close()
                return 64
        try:
            db._read_at(1, Offset())
        except pydb.ClosedError:
            pass
        print("survived")
    """, tmp_path)
    assert p.returncode == 0 and "survived" in p.stdout, (p.returncode, p.stderr[-3000:])


# ------------------------------------- objects shared between threads (PEP 703)
#
# What the GIL used to serialise for free: these hold with and without it
# (tests/test_free_threaded.py runs them on a free-threaded interpreter).

def test_iterator_used_by_two_threads_at_once(gen_db):
    """A RecordIterator whose batch is being read by one thread refuses
    another thread's next() (RuntimeError), as a running generator does,
    instead of filling the same batch twice."""
    db = pydb.open(gen_db, io="pread")
    it = iter(db)
    box = {}

    def first():
        box["first"] = next(it).mfn

    _pydb._testing.set_read_delay(2000)       # the batch takes > 0.5 s
    try:
        t = threading.Thread(target=first)
        t.start()
        time.sleep(0.2)
        with pytest.raises(RuntimeError, match="in use by another thread"):
            next(it)
        t.join(60)
    finally:
        _pydb._testing.set_read_delay(0)
    assert box == {"first": 1}
    assert next(it).mfn == 2                   # usable again afterwards
    assert [r.mfn for r in it] == list(range(3, 1501))
    db.close()


def _snapshots_against_close(path, delay):
    db = pydb.open(path, io="mmap")
    reference = snap(db[7])
    outcomes, bad = [], []

    def taker(i):
        def run():
            try:
                for _ in range(300):
                    s = db.snapshot()
                    if snap(s[7]) != reference:
                        bad.append(i)
                    if i % 2:
                        s.close()
                outcomes.append("finished")
            except pydb.ClosedError:
                outcomes.append("closed")
        return run

    def closer():
        time.sleep(delay)
        db.close()

    errors = run_threads([taker(i) for i in range(4)] + [closer])
    assert not errors, errors
    assert not bad
    assert set(outcomes) <= {"closed", "finished"}
    assert len(outcomes) == 4
    assert db.closed


def test_snapshots_taken_and_closed_while_database_closes(gen_db):
    """Threads taking, reading and closing snapshots while another closes
    the database: no crash; every snapshot read before the close is right
    and each thread ends with ClosedError or finishes."""
    for attempt in range(5):
        _snapshots_against_close(gen_db, 0.005 * (attempt + 1))


def test_a_transaction_dropped_while_threads_read_releases_the_writer_lock(tmp_path):
    """A Transaction left neither committed nor aborted (an exception
    leaves the handler that began it) is aborted when it is freed, while
    other threads read through the same handle: the same thread, another
    thread and another handle write at once after it.  Before, it was
    aborted only when nothing was in flight on the handle, and the writer
    lock stayed held until close() (found by a review)."""
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        with db.transaction() as tx:
            for i in range(2000):
                tx.append([(24, f"record {i}")])
    db = pydb.open(base, readonly=False, sync=False, lock_timeout=2)
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            db.read_many(range(1, 2001))

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for t in readers:
        t.start()
    try:
        time.sleep(0.05)

        def handle_request():
            tx = db.transaction()
            tx.append([(24, "never committed")])
            raise ValueError("the request failed")

        for _ in range(5):
            with pytest.raises(ValueError):
                handle_request()
        assert db.append([(24, "same thread")]) == 2001
        out = []
        t = threading.Thread(target=lambda: out.append(db.append([(24, "other thread")])))
        t.start()
        t.join()
        assert out == [2002]
    finally:
        stop.set()
        for t in readers:
            t.join()
    with pydb.open(base, readonly=False, sync=False, lock_timeout=2) as other:
        assert other.append([(24, "other handle")]) == 2003
    assert [db[m].raw(24) for m in (2001, 2002, 2003)] == [
        [b"same thread"], [b"other thread"], [b"other handle"]]
    db.close()


def test_a_second_close_returns_when_the_handle_is_closed(tmp_path):
    """Two threads close a handle while a third reads through it: the
    second close() returns when the files are closed, not at once while
    the first still waits for the read in flight (a caller may move or
    remove the files after it: found by a review, with a collection in
    flight)."""
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        with db.transaction() as tx:
            for i in range(20000):
                tx.append([(24, f"record {i}"), (70, "z" * 200)])
    db = pydb.open(base, io="pread")

    def open_fds():
        return [f for f in Path("/proc/self/fd").iterdir()
                if os.path.realpath(f).startswith(str(tmp_path))]

    def reader():
        with contextlib.suppress(pydb.ClosedError):
            while True:
                db.read_many(range(1, 20001))

    r = threading.Thread(target=reader)
    r.start()
    time.sleep(0.1)
    first = threading.Thread(target=db.close)
    first.start()
    time.sleep(0.005)
    db.close()
    assert db.closed and open_fds() == []
    first.join()
    r.join()


def test_a_second_close_of_a_snapshot_returns_when_it_is_released(tmp_path):
    """Two threads close a snapshot while a third reads through it: the
    second close() returns when the snapshot has left the reader table
    (what a compaction waits for), not at once while the first still
    waits for the read in flight (as the Database's close() does)."""
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        with db.transaction() as tx:
            for i in range(20000):
                tx.append([(24, f"record {i}"), (70, "z" * 200)])
    with pydb.open(base, io="pread") as db:
        for _ in range(3):
            snap = db.snapshot()

            def reader(snap):
                with contextlib.suppress(pydb.ClosedError):
                    while True:
                        snap.read_many(range(1, 20001))

            r = threading.Thread(target=reader, args=(snap,))
            r.start()
            time.sleep(0.1)
            first = threading.Thread(target=snap.close)
            first.start()
            time.sleep(0.005)
            snap.close()
            assert snap.closed and db.stat()["header"]["readers"] == 0
            first.join()
            r.join()
