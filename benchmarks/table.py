"""Issue 12's table of figures from one benchmark run: pydb against its
peers, side by side, each with ministat's verdict.

    python -m pytest benchmarks/ --benchmark-only --benchmark-json=bench.json
    python -m benchmarks.table bench.json

(peers: ``pip install '.[bench]'``; a run of only some files gives the rows
whose benchmarks it holds, the others are marked "not run").  Each row
reads the round times pytest-benchmark stored (``stats.data``, seconds)
or the figure a benchmark put in ``extra_info``; a ratio is of medians,
and where two timed benchmarks do the same work the verdict is ministat's
(pydb.ministat.compare, Student's t at 95%) of pydb's round times against
the peer's: pydb's time as a percent of the peer's, or "no difference
proven".  Nothing here measures: it only reads the run's JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pydb import ministat

from .bench_commit import (  # records committed per round
    COMMITS,
    PROCS,
    THREAD_COMMITS,
    THREADS,
)


@dataclass(frozen=True)
class Row:
    figure: str        # what is measured
    pydb: str          # pydb's figure
    peer: str          # the peer's figure, with its name
    verdict: str       # ministat's, or "" where no two timings compare
    target: str        # issue 12's target
    met: str           # "yes", "no", or "not run"


class Run:
    """The benchmarks of one pytest-benchmark JSON report, by full name
    (``benchmarks/bench_x.py::test_y[param]``)."""

    def __init__(self, report: dict):
        self.by_name = {b["fullname"]: b for b in report.get("benchmarks", [])}

    def get(self, name: str) -> dict | None:
        return self.by_name.get(name)

    def times(self, name: str) -> list[float] | None:
        """The round times (seconds) of benchmark `name`, or None."""
        b = self.get(name)
        if b is None:
            return None
        data = b["stats"].get("data")
        return list(data) if data else [b["stats"]["median"]]

    def median(self, name: str) -> float | None:
        t = self.times(name)
        return statistics.median(t) if t else None

    def extra(self, name: str, key: str):
        b = self.get(name)
        return None if b is None else b.get("extra_info", {}).get(key)


def verdict(mine: list[float] | None, peer: list[float] | None) -> str:
    """ministat's verdict (95%) of `mine` against `peer` (round times):
    "pydb's time -42.0% +/- 3.1% of the peer's" or "no difference
    proven"; "" when either has fewer than 2 rounds."""
    if not mine or not peer or len(mine) < 2 or len(peer) < 2:
        return ""
    v = ministat.compare(peer, mine)
    if not v.significant:
        return "no difference proven"
    return f"time {v.pct:+.1f}% +/- {v.pct_ci:.1f}%"


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _dur(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def timed_pair(run: Run, figure: str, mine: str, peers: list[tuple[str, str]],
               target: str, need: float | None,
               rate: Callable[[float], float] | None = None,
               unit: str = "", need_rate: float | None = None) -> Row:
    """A row comparing timed benchmark `mine` with the fastest of `peers`
    ((label, name)): with `rate` (work / seconds) the figures are rates,
    else times; met when peer time / pydb time >= `need` (with
    `need_rate`: when pydb's rate is at least that; `need` None: no
    target)."""
    m = run.median(mine)
    got = [(med, label, name) for label, name in peers
           if (med := run.median(name)) is not None]
    if m is None or not got:
        return Row(figure, "-", "-", "", target, "not run")
    p, label, name = min(got)
    speedup = p / m
    if rate:
        mine_s, peer_s = f"{_num(rate(m))} {unit}", f"{label} {_num(rate(p))} {unit}"
    else:
        mine_s, peer_s = _dur(m), f"{label} {_dur(p)}"
    if need is None:
        met = "-"   # a figure shown beside the others, without a target
    elif need_rate is None:
        met = "yes" if speedup >= need else "no"
    elif rate is None:
        met = "unknown"   # the benchmark did not store its amount of work
    else:
        met = "yes" if rate(m) >= need_rate else "no"
    return Row(figure, f"{mine_s} ({speedup:.2f}x)", peer_s,
               verdict(run.times(mine), run.times(name)), target, met)


def extra_row(run: Run, figure: str, key: str, mine: str, peers: list[tuple[str, str]],
              target: str, need: float) -> Row:
    """A row of a figure benchmarks store in extra_info[key] (higher is
    better): met when pydb's is >= `need`."""
    m = run.extra(mine, key)
    if m is None:
        return Row(figure, "-", "-", "", target, "not run")
    got = [(label, run.extra(name, key)) for label, name in peers]
    got = [g for g in got if g[1] is not None]
    peer = ", ".join(f"{label} {v:.3g}" for label, v in got) or "-"
    return Row(figure, f"{m:.3g}", peer, "", target, "yes" if m >= need else "no")


def real_files_row(run: Run) -> Row:
    """pydb against the pure-Python struct reader on each real master
    file (bench_real.py): the smallest and largest speedup."""
    figure = "real master files, fields decoded, vs a pure-Python struct reader"
    target = ">= 10x"
    prefix = "benchmarks/bench_real.py::test_real_fields["
    ratios = []
    for name in run.by_name:
        if name.startswith(prefix) and name.endswith("-pydb]"):
            other = name[:-len("-pydb]")] + "-struct]"
            m, s = run.median(name), run.median(other)
            if m and s:
                ratios.append((s / m, name[len(prefix):-len("-pydb]")]))
    if not ratios:
        return Row(figure, "-", "-", "", target, "not run")
    lo, hi = min(ratios), max(ratios)
    return Row(figure, f"{lo[0]:.1f}x ({lo[1]}) to {hi[0]:.1f}x ({hi[1]})",
               f"struct reader, {len(ratios)} files", "", target,
               "yes" if lo[0] >= 10 else "no")


#: The query rows: (figure, bench_index.py query, peer label, peer's
#: test suffix, target, speedup needed).
QUERY_ROWS = [
    ("frequent-term query", "term", "FTS5", "sqlite_fts5", ">= 5x FTS5", 5.0),
    ("two-letter truncation BA$", "truncation", "FTS5", "sqlite_fts5", ">= 10x FTS5",
     10.0),
    ("adjacency (T1 $ T2)", "adjacent", "tantivy", "tantivy", ">= tantivy", 1.0),
    ("proximity (T1 . . . T2)", "proximity", "tantivy", "tantivy", ">= tantivy", 1.0),
    ("adjacency, frequent and rare (T1 $ R)", "adjacent_rare", "tantivy", "tantivy",
     ">= tantivy", 1.0),
]


def rows(run: Run) -> list[Row]:
    gil = "benchmarks/bench_gil.py::test_reads_beside_busy_thread"
    thr = "benchmarks/bench_gil.py::test_reads_by_key_threads"
    scan = "benchmarks/bench_reads.py::test_scan_fields"
    com = "benchmarks/bench_commit.py::test_durable_commits"
    comt = "benchmarks/bench_commit.py::test_durable_commits_threads"
    q = "benchmarks/bench_index.py::test_query_"
    load = "benchmarks/bench_load.py::test_bulk_load"
    marc = "benchmarks/bench_marc.py::test_marc_parse"
    scan_rows = run.extra(f"{scan}[pydb]", "rows")
    return [
        extra_row(run, "reads by key beside a CPU-bound Python thread, fraction "
                  "of the rate alone (io=mmap, the default)", "fraction_of_solo",
                  f"{gil}[pydb]", [("pread", f"{gil}[pydb-pread]"),
                                   ("py-lmdb", f"{gil}[lmdb]"),
                                   ("sqlite3", f"{gil}[sqlite3]"),
                                   ("pure Python", f"{gil}[python]")],
                  ">= 0.45", 0.45),
        extra_row(run, "reads by key, 8 threads / 1 thread", "threads_8_over_1",
                  f"{thr}[pydb]", [("py-lmdb", f"{thr}[lmdb]"),
                                   ("sqlite3", f"{thr}[sqlite3]"),
                                   ("pure Python", f"{thr}[python]")],
                  ">= 1.0", 1.0),
        timed_pair(run, "scan with fields decoded", f"{scan}[pydb]",
                   [("sqlite3", f"{scan}[sqlite3]"), ("py-lmdb", f"{scan}[lmdb]")],
                   ">= 2M rows/s", 0.0,
                   rate=(lambda s: scan_rows / s) if scan_rows else None,
                   unit="rows/s", need_rate=2e6),
        real_files_row(run),
        timed_pair(run, "durable single-record commits (sync=True)", f"{com}[pydb]",
                   [("SQLite WAL FULL", f"{com}[sqlite3]")], ">= SQLite WAL FULL", 1.0,
                   rate=lambda s: COMMITS / s, unit="commits/s"),
        *(timed_pair(run, figure, f"{q}pydb[{query}]",
                     [(label, f"{q}{peer}[{query}]")], target, need)
          for figure, query, label, peer, target, need in QUERY_ROWS),
        timed_pair(run, "MARC ISO 2709 parsing", f"{marc}[pydb]",
                   [("pymarc", f"{marc}[pymarc]")], ">= 10x pymarc", 10.0),
        timed_pair(run, "bulk load, one durable transaction", f"{load}[pydb]",
                   [("py-lmdb", f"{load}[lmdb]")], ">= py-lmdb", 1.0),
        timed_pair(run, "durable commits with a word index", f"{com}[pydb-index]",
                   [("SQLite FTS5", f"{com}[sqlite3-fts5]")], "(no target)", None,
                   rate=lambda s: COMMITS / s, unit="commits/s"),
        timed_pair(run, "single-record commits, sync=False (power cut: recent commits "
                   "lost, never damage)", f"{com}[pydb-normal]",
                   [("SQLite WAL NORMAL", f"{com}[sqlite3-normal]")], "(no target)", None,
                   rate=lambda s: COMMITS / s, unit="commits/s"),
        timed_pair(run, f"durable single-record commits from {THREADS} threads of one "
                   "process (group commit)", f"{comt}[pydb-threads]",
                   [("SQLite WAL FULL", f"{comt}[sqlite3-threads]"),
                    ("py-lmdb", f"{comt}[lmdb-threads]")], "(no target)", None,
                   rate=lambda s: THREAD_COMMITS / s, unit="commits/s"),
        timed_pair(run, f"durable single-record commits from {PROCS} processes (one "
                   "fsync for many)", f"{comt}[pydb-procs]",
                   [("SQLite WAL FULL", f"{comt}[sqlite3-procs]"),
                    ("py-lmdb", f"{comt}[lmdb-procs]")], "(no target)", None,
                   rate=lambda s: THREAD_COMMITS / s, unit="commits/s"),
    ]


def markdown(table: list[Row]) -> str:
    lines = ["| figure | pydb | best peer | ministat (95%), pydb's time vs the peer's "
             "| target | met |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.figure} | {r.pydb} | {r.peer} | {r.verdict or '-'} | {r.target} "
              f"| {r.met} |" for r in table]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="pytest-benchmark's --benchmark-json file")
    args = ap.parse_args(argv)
    with open(args.json, encoding="utf-8") as f:
        report = json.load(f)
    print(markdown(rows(Run(report))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
