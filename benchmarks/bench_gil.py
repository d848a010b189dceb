"""Reads by key and the GIL: what a CPU-bound Python thread beside the
readers costs them, and what 8 reading threads get against one, pydb in
its default mode (mmap) and with io="pread" against its peers, in one run.

A read that releases the GIL hands it to any runnable Python thread,
which keeps it for a switch interval (5 ms): released on every read, a
few hundred reads per second are left beside a busy thread.  pydb keeps
the GIL for reads whose pages are in the page cache (csrc/resident.c,
preadv2 RWF_NOWAIT) and releases it only when a read may wait for the
disk.  Every read decodes the record's fields, as an application does:
pydb ``db[mfn].fields``; the peers split their stored bytes into
(tag, value) pairs.

A control, ``python``, reads the same records split the peers' way out
of a dict, with no store and no system call: its figures are what the
GIL itself leaves to pure Python on this machine (switching between
threads costs something; a busy machine, more), the ceiling for any
reader that keeps the GIL.

Each test stores its figure in ``extra_info``: ``fraction_of_solo``
(median rate beside the busy thread / median rate alone, 0.5 is the
GIL's limit for two runnable threads) and ``threads_8_over_1`` (records
per second with 8 threads / with 1).  Run:
``python -m pytest benchmarks/bench_gil.py --benchmark-only`` (peers:
``pip install '.[bench]'``).
"""

from __future__ import annotations

import statistics
import threading
import time

import pytest

import pydb
from pydb.crashtest import BusyThread

from .conftest import timed
from .peers import LmdbEngine, SqliteEngine

ROUNDS = 5     # timed rounds (an untimed run calls each function once)
SECONDS = 0.5  # reads per measurement: 100 switch intervals


def _split(value: bytes):
    return [line.split(b"\t", 1) for line in value.split(b"\n") if line]


class _Reader:
    """read(mfn) -> decoded fields, for pydb in one I/O mode, a peer, or
    ``python``: the peers' splitting of records kept in a dict, no store
    at all -- what a pure-Python read gets beside a busy thread and from 8
    threads on this machine, the GIL's own limit, for comparison."""

    def __init__(self, name, bench_db, records, folder):
        self.name = name
        self.engine = None
        if name == "python":
            kept = dict(records)
            self.read = lambda m: _split(kept[m])
            return
        if name.startswith("pydb"):
            self.db = pydb.open(bench_db, io="pread" if name.endswith("pread") else "mmap")
            self.read = lambda m: self.db[m].fields
            return
        if name == "sqlite3":
            self.engine = SqliteEngine(str(folder / "rec.sqlite"), records)
        else:
            pytest.importorskip("lmdb", reason="py-lmdb not installed (pip install 'pydb[lmdb]')")
            self.engine = LmdbEngine(str(folder), records)
        get = self.engine.get
        self.read = lambda m: _split(get(m))

    def close(self):
        if self.engine is not None:
            self.engine.close()
        elif self.name != "python":
            self.db.close()


@pytest.fixture(scope="module", params=["pydb", "pydb-pread", "sqlite3", "lmdb", "python"])
def reader(request, bench_db, tmp_path_factory):
    records = None if request.param.startswith("pydb") else request.getfixturevalue("records")
    r = _Reader(request.param, bench_db, records, tmp_path_factory.mktemp(request.param))
    yield r
    r.close()


def _read_all(read, mfns):
    for m in mfns:
        read(m)
    return len(mfns)


#: passes over the sample per thread in the 8-threads test (about 20 ms
#: of pydb's reads for one thread, several switch intervals)
PASSES = 20


def _read_passes(read, mfns, passes):
    for _ in range(passes):
        _read_all(read, mfns)


def _seconds(fn, *args):
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def _rate(read, mfns, seconds):
    """Reads per second over passes of `mfns` lasting at least `seconds`
    (many switch intervals: a busy thread gets its share of the GIL), the
    clock looked at every 50 reads (a peer that releases the GIL on every
    read does a few dozen reads a second beside a busy thread)."""
    n = 0
    t0 = time.perf_counter()
    while True:
        for k in range(0, len(mfns), 50):
            n += _read_all(read, mfns[k:k + 50])
            t = time.perf_counter() - t0
            if t >= seconds:
                return n / t


@pytest.mark.benchmark(group="reads by key beside a CPU-bound Python thread")
def test_reads_beside_busy_thread(benchmark, reader, sample):
    """Reads of `sample`, over and over for SECONDS, with a busy thread
    beside them (timed) and alone (measured here, alternating), as a
    fraction of the rate alone."""
    _read_all(reader.read, sample)            # warm: pages cached and seen
    alone, beside = [], []

    def busy_round():
        with BusyThread():
            beside.append(_rate(reader.read, sample, SECONDS))
        alone.append(_rate(reader.read, sample, SECONDS))

    benchmark.pedantic(busy_round, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    fraction = statistics.median(beside) / statistics.median(alone)
    benchmark.extra_info.update(
        fraction_of_solo=round(fraction, 3),
        solo_reads_per_s=round(statistics.median(alone)),
        beside_reads_per_s=round(statistics.median(beside)))
    assert 0 < fraction


@pytest.mark.benchmark(group="reads by key, 8 threads against 1")
def test_reads_by_key_threads(benchmark, reader, sample, pytestconfig):
    """Every thread reads all of `sample` by key, one record at a time,
    PASSES times; 8 threads do 8 times the work of one (timed).  A pass
    of pydb's takes about a millisecond, less than the interpreter's
    switch interval: a single pass per thread made a round a few
    milliseconds, whose ratio varied from 0.80 to 0.98 between runs."""
    _read_all(reader.read, sample)
    passes = PASSES if timed(pytestconfig) else 1   # the untimed run: once
    one = []

    def eight_round():
        one.append(_seconds(_read_passes, reader.read, sample, passes))
        barrier = threading.Barrier(8)

        def work():
            barrier.wait()
            _read_passes(reader.read, sample, passes)

        ts = [threading.Thread(target=work) for _ in range(8)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        eight.append(time.perf_counter() - t0)
        return 8 * passes * len(sample)

    eight: list[float] = []
    got = benchmark.pedantic(eight_round, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    assert got == 8 * passes * len(sample)
    ratio = 8 * statistics.median(one) / statistics.median(eight)
    benchmark.extra_info.update(
        threads_8_over_1=round(ratio, 3),
        one_thread_reads_per_s=round(passes * len(sample) / statistics.median(one)))
    assert ratio > 0
