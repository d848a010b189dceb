"""Many writer processes on one database: single-record commits per second
when N processes (default 16) each update their own record K times, back
to back, with the native index kept up to date and the collector on --
pydb side by side with SQLite (WAL mode, an FTS5 index on the same text,
``synchronous=OFF`` to match pydb's ``sync=False``; both wait for their
writer lock).

    python benchmarks/bench_writers.py [--processes 16] [--commits 200]
                                       [--repeat 3] [--gc background]

pydb's line also gives the most index segment files seen (sampled every
0.2 s): each commit adds one, the collector merges them, and a collector
that falls behind makes every later commit and lookup slower (the
writer lock lets a waiting collector step go first: docs/design.md,
"Writer lock").  The medians of --repeat runs are printed with the
ratio pydb / SQLite.

Also a pytest-benchmark file: ``python -m pytest benchmarks/bench_writers.py``
runs one small case of each (--benchmark-disable) or times them.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pydb  # noqa: E402

FST = "1 4 v1\n"


def _pydb_client(base: str, c: int, commits: int, gc: str, barrier) -> None:
    with pydb.open(base, readonly=False, sync=False, gc=gc, lock_timeout=120) as db:
        barrier.wait()
        for i in range(commits):
            db.update(c + 1, [(1, f"client {c} iteration {i} words")])


def _sqlite_client(path: str, c: int, commits: int, barrier) -> None:
    con = sqlite3.connect(path, timeout=120, isolation_level=None)
    con.execute("PRAGMA synchronous=OFF")
    barrier.wait()
    for i in range(commits):
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE t SET body = ? WHERE rowid = ?",
                    (f"client {c} iteration {i} words", c + 1))
        con.execute("COMMIT")
    con.close()


def _segments(base: str) -> int:
    try:
        return sum(1 for f in os.listdir(base + ".pdx") if f.startswith("seg"))
    except FileNotFoundError:
        return 0


def _run(target, args_of, n: int, watch=None) -> tuple[float, int]:
    """Start n client processes (fork), release them together, wait;
    returns (seconds, most segment files seen by `watch`)."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(n + 1)
    ps = [ctx.Process(target=target, args=args_of(c) + (barrier,)) for c in range(n)]
    for p in ps:
        p.start()
    barrier.wait()
    t0 = time.perf_counter()
    most = 0
    while any(p.is_alive() for p in ps):
        if watch:
            most = max(most, watch())
        time.sleep(0.2)
    secs = time.perf_counter() - t0
    for p in ps:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a client process ended with status {p.exitcode}")
    return secs, most


def run_pydb(folder: Path, n: int, commits: int, gc: str) -> tuple[float, int]:
    """Commits/s of n pydb processes and the most segment files seen."""
    base = str(folder / "p")
    with pydb.create(base, sync=False, fst=FST, gc="none") as db:
        for _ in range(n):
            db.append([(1, "x")])
    secs, most = _run(_pydb_client, lambda c: (base, c, commits, gc), n,
                      lambda: _segments(base))
    return n * commits / secs, most


def run_sqlite(folder: Path, n: int, commits: int) -> float:
    """Commits/s of n SQLite processes (WAL, FTS5 kept by a trigger)."""
    path = str(folder / "s.db")
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t(body TEXT)")
    con.execute("CREATE VIRTUAL TABLE f USING fts5(body, content='t', content_rowid='rowid')")
    con.execute("CREATE TRIGGER tu AFTER UPDATE ON t BEGIN "
                "INSERT INTO f(f, rowid, body) VALUES('delete', old.rowid, old.body); "
                "INSERT INTO f(rowid, body) VALUES (new.rowid, new.body); END")
    con.executemany("INSERT INTO t(body) VALUES (?)", [("x",)] * n)
    con.execute("INSERT INTO f(f) VALUES('rebuild')")
    con.close()
    secs, _ = _run(_sqlite_client, lambda c: (path, c, commits), n)
    return n * commits / secs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=16, help="writer processes (default 16)")
    ap.add_argument("--commits", type=int, default=200,
                    help="single-record commits per process (default 200)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    ap.add_argument("--gc", default="background", help="pydb's collection policy "
                    "(default background)")
    a = ap.parse_args(argv)
    ours, peer, most = [], [], []
    for r in range(a.repeat):
        with tempfile.TemporaryDirectory() as d:
            rate, m = run_pydb(Path(d), a.processes, a.commits, a.gc)
            ours.append(rate)
            most.append(m)
        with tempfile.TemporaryDirectory() as d:
            peer.append(run_sqlite(Path(d), a.processes, a.commits))
        print(f"run {r + 1}: pydb {ours[-1]:,.0f} commits/s (at most {most[-1]} segment "
              f"files), SQLite {peer[-1]:,.0f} commits/s", flush=True)
    po, pp = statistics.median(ours), statistics.median(peer)
    print(f"{a.processes} processes x {a.commits} commits, medians of {a.repeat}: "
          f"pydb ({a.gc}) {po:,.0f}/s, SQLite WAL+FTS5 {pp:,.0f}/s, ratio {po / pp:.2f}; "
          f"segment files at most {max(most)}")
    return 0


def test_pydb_writers(benchmark, tmp_path):
    rate, most = benchmark.pedantic(run_pydb, args=(tmp_path, 4, 25, "background"),
                                    rounds=1, iterations=1)
    assert rate > 0 and most <= 100


def test_sqlite_writers(benchmark, tmp_path):
    assert benchmark.pedantic(run_sqlite, args=(tmp_path, 4, 25), rounds=1, iterations=1) > 0


if __name__ == "__main__":
    sys.exit(main())
