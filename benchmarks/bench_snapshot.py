"""The cost of reading one committed state (issue 10): a plain read now
that every read takes the latest state from the commit header, a read
through a snapshot, and taking + releasing a snapshot (in C and in
Python).

Two copies of the benchmark database are read: as built (no commit has
published a state yet: "files mode", the state comes from the control
record) and after one commit ("header mode", the state comes from
``<base>.shm``), which is what a database that has been written by pydb
reads like.

Run: ``python -m pytest benchmarks/bench_snapshot.py --benchmark-enable``
(timed, default database); compare ``min`` within each group.  The plain
read before the change is ``bench_reads.py::test_read_single[pydb]`` run
in a checkout of the older commit (same sample, same group).  The C
figures come from ``pydb-crashtest``: ``--snapshot-cost N`` prints the
nanoseconds of one take + release (``extra_info["ns_per_op"]`` here),
``--snapshot`` reads through a snapshot per thread.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

import pydb
from pydb import crashtest

from .conftest import SAMPLE

SNAPSHOT_ROUNDS = 200_000


def _copy(bench_db, folder):
    """The database's .mst/.xrf (and FST) copied into `folder`."""
    src = pydb.open(bench_db)
    info = src.info()
    src.close()
    base = folder / "b"
    for key, ext in (("mst_path", ".mst"), ("xrf_path", ".xrf")):
        shutil.copyfile(info[key], base.with_suffix(ext))
    return base


@pytest.fixture(scope="module", params=["files", "header"])
def mode_db(request, bench_db, tmp_path_factory):
    """(mode, base): a copy of the benchmark database as built ("files")
    or after one commit ("header": the commit header holds a state)."""
    base = _copy(bench_db, tmp_path_factory.mktemp(request.param))
    if request.param == "header":
        with pydb.open(base, readonly=False) as db:
            first = db[1]
            db.update(1, [(f.tag, f.value) for f in first.fields])
    return request.param, base


def _has_snapshots(db) -> bool:
    return hasattr(db, "snapshot")


@pytest.mark.benchmark(group=f"plain read db[mfn] (x{SAMPLE})")
def test_plain_read(benchmark, mode_db, sample):
    mode, base = mode_db
    with pydb.open(base) as db:
        def run():
            for m in sample:
                db[m]
            return len(sample)

        assert benchmark(run) == len(sample)
        benchmark.extra_info["mode"] = mode


@pytest.mark.benchmark(group=f"read through a snapshot snap[mfn] (x{SAMPLE})")
def test_snapshot_read(benchmark, mode_db, sample):
    mode, base = mode_db
    with pydb.open(base) as db:
        if not _has_snapshots(db):
            pytest.skip("Database.snapshot() is not there yet")
        with db.snapshot() as snap:
            def run():
                for m in sample:
                    snap[m]
                return len(sample)

            assert benchmark(run) == len(sample)
            assert snap[sample[0]] == db[sample[0]]
        benchmark.extra_info["mode"] = mode


@pytest.mark.benchmark(group="Python: db.snapshot() + close() (x1000)")
def test_snapshot_take_release_python(benchmark, mode_db):
    mode, base = mode_db
    with pydb.open(base) as db:
        if not _has_snapshots(db):
            pytest.skip("Database.snapshot() is not there yet")

        def run():
            for _ in range(1000):
                db.snapshot().close()
            return 1000

        assert benchmark(run) == 1000
        benchmark.extra_info["mode"] = mode


def _crashtest(*args):
    try:
        exe = crashtest.crashtest_binary()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    p = subprocess.run([str(exe), "--json", *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


@pytest.mark.benchmark(group="C: pydb_snapshot_take + release")
def test_c_snapshot_take_release(benchmark, mode_db):
    """pydb-crashtest --snapshot-cost: nanoseconds per take + release in
    one thread (extra_info).  With a commit header the snapshot is
    registered in the reader table; in files mode it also re-reads the
    control record (a refresh)."""
    mode, base = mode_db
    out = benchmark.pedantic(_crashtest, args=("--snapshot-cost", SNAPSHOT_ROUNDS, base),
                             rounds=1, iterations=1)
    assert [(x["phase"], x["rounds"]) for x in out] == [("snapshot-cost", SNAPSHOT_ROUNDS)]
    if mode == "header":           # files mode registers only if a header file exists
        assert out[0]["registered"] == 1
    benchmark.extra_info.update(mode=mode, ns_per_op=out[0]["ns_per_op"])


@pytest.mark.benchmark(group="C: crashtest reads, plain and through snapshots")
@pytest.mark.parametrize("through", ["plain", "snapshot"])
def test_c_reads(benchmark, mode_db, through):
    """pydb-crashtest (sequential read, then 2 threads) with and without
    --snapshot: the same rows either way; rows per second in extra_info."""
    mode, base = mode_db
    extra = ["--snapshot"] if through == "snapshot" else []
    out = benchmark.pedantic(_crashtest, args=(*extra, "--threads", "2", base),
                             rounds=1, iterations=1)
    with pydb.open(base) as db:
        active = db.counts()["active"]
    assert [(x["phase"], x["threads"], x["rows"]) for x in out] == [
        ("seq", 1, active), ("threads", 2, 2 * active)]
    benchmark.extra_info.update(mode=mode, through=through,
                                rows_per_sec={x["phase"]: x["rows_per_sec"] for x in out})
