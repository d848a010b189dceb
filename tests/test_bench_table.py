"""benchmarks/table.py: issue 12's table from a pytest-benchmark JSON
report -- exact rows from a made-up report (the table only reads)."""

from __future__ import annotations

import json

from benchmarks import table


def _bench(name, data, extra=None):
    return {"fullname": name, "extra_info": extra or {},
            "stats": {"data": data, "median": sorted(data)[len(data) // 2]}}


def _report():
    q = "benchmarks/bench_index.py::test_query_"
    return {"benchmarks": [
        _bench("benchmarks/bench_gil.py::test_reads_beside_busy_thread[pydb]", [1.0],
               {"fraction_of_solo": 0.48}),
        _bench("benchmarks/bench_gil.py::test_reads_beside_busy_thread[lmdb]", [1.0],
               {"fraction_of_solo": 0.02}),
        _bench("benchmarks/bench_reads.py::test_scan_fields[pydb]", [0.1, 0.1, 0.1],
               {"rows": 100_000}),
        _bench("benchmarks/bench_reads.py::test_scan_fields[sqlite3]", [0.4, 0.5, 0.6]),
        _bench("benchmarks/bench_real.py::test_real_fields[a-pydb]", [1.0, 1.0, 1.0]),
        _bench("benchmarks/bench_real.py::test_real_fields[a-struct]", [12.0, 12.0, 12.0]),
        _bench("benchmarks/bench_real.py::test_real_fields[b-pydb]", [1.0, 1.0, 1.0]),
        _bench("benchmarks/bench_real.py::test_real_fields[b-struct]", [8.0, 8.0, 8.0]),
        _bench(f"{q}pydb[term]", [1.0, 1.1, 0.9]),
        _bench(f"{q}sqlite_fts5[term]", [6.0, 6.1, 5.9]),
        _bench(f"{q}pydb[adjacent]", [0.0002, 0.00021, 0.00019]),
        _bench(f"{q}tantivy[adjacent]", [0.0002, 0.00022, 0.00018]),
    ]}


def test_rows_of_a_report(tmp_path, capsys):
    rows = {r.figure: r for r in table.rows(table.Run(_report()))}
    gil = rows["reads by key beside a CPU-bound Python thread, fraction of the "
               "rate alone (io=mmap, the default)"]
    assert (gil.pydb, gil.peer, gil.met) == ("0.48", "py-lmdb 0.02", "yes")
    assert rows["reads by key, 8 threads / 1 thread"].met == "not run"
    scan = rows["scan with fields decoded"]
    # 100,000 rows in 0.1 s: 1M rows/s, 5x sqlite3, short of 2M rows/s
    assert (scan.pydb, scan.peer, scan.met) == (
        "1,000,000 rows/s (5.00x)", "sqlite3 200,000 rows/s", "no")
    assert scan.verdict.startswith("time -80.0% +/- ")
    real = rows["real master files, fields decoded, vs a pure-Python struct reader"]
    assert (real.pydb, real.met) == ("8.0x (b) to 12.0x (a)", "no")
    term = rows["frequent-term query"]
    assert (term.pydb, term.peer, term.met) == ("1 s (6.00x)", "FTS5 6 s", "yes")
    adj = rows["adjacency (T1 $ T2)"]
    assert (adj.pydb, adj.peer, adj.verdict, adj.met) == (
        "200 us (1.00x)", "tantivy 200 us", "no difference proven", "yes")
    assert rows["bulk load, one durable transaction"].met == "not run"
    comt = "benchmarks/bench_commit.py::test_durable_commits_threads"
    idx = table.rows(table.Run({"benchmarks": [
        _bench("benchmarks/bench_commit.py::test_durable_commits[pydb-index]", [0.1] * 3),
        _bench("benchmarks/bench_commit.py::test_durable_commits[sqlite3-fts5]", [0.2] * 3),
    ]}))[-4]
    assert (idx.pydb, idx.peer, idx.met) == (
        "2,000 commits/s (2.00x)", "SQLite FTS5 1,000 commits/s", "-")
    # 200 commits with sync=False: pydb 0.01 s, SQLite NORMAL 0.02 s
    normal = table.rows(table.Run({"benchmarks": [
        _bench("benchmarks/bench_commit.py::test_durable_commits[pydb-normal]", [0.01] * 3),
        _bench("benchmarks/bench_commit.py::test_durable_commits[sqlite3-normal]", [0.02] * 3),
    ]}))[-3]
    assert normal.figure.startswith("single-record commits, sync=False")
    assert (normal.pydb, normal.peer, normal.met) == (
        "20,000 commits/s (2.00x)", "SQLite WAL NORMAL 10,000 commits/s", "-")
    # 800 commits: pydb 0.04 s, SQLite 0.2 s, py-lmdb 0.1 s (the best peer)
    thr = table.rows(table.Run({"benchmarks": [
        _bench(f"{comt}[pydb-threads]", [0.04] * 3),
        _bench(f"{comt}[sqlite3-threads]", [0.2] * 3),
        _bench(f"{comt}[lmdb-threads]", [0.1] * 3),
    ]}))[-2]
    assert thr.figure == ("durable single-record commits from 8 threads of one process "
                          "(group commit)")
    assert (thr.pydb, thr.peer, thr.met) == (
        "20,000 commits/s (2.50x)", "py-lmdb 8,000 commits/s", "-")
    # 800 commits from 4 processes: pydb 0.08 s, SQLite 0.2 s (the best
    # peer), py-lmdb not run
    procs = table.rows(table.Run({"benchmarks": [
        _bench(f"{comt}[pydb-procs]", [0.08] * 3),
        _bench(f"{comt}[sqlite3-procs]", [0.2] * 3),
    ]}))[-1]
    assert procs.figure == "durable single-record commits from 4 processes (one fsync for many)"
    assert (procs.pydb, procs.peer, procs.met) == (
        "10,000 commits/s (2.50x)", "SQLite WAL FULL 4,000 commits/s", "-")
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_report()))
    assert table.main([str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| figure | pydb | best peer |")
    assert len(out) == 2 + len(rows)
    assert "| frequent-term query | 1 s (6.00x) | FTS5 6 s |" in out[2 + 5]
