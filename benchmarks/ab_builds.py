"""Two builds of pydb side by side: one store of bench_commit.py (durable
single-record commits), or a scan, timed in each of two source trees, a
round in each in turn, each round in a new process, with ministat's
verdict.

    python -m benchmarks.ab_builds OLD_TREE NEW_TREE [STORE] [ROUNDS]

OLD_TREE and NEW_TREE are checkouts with the extension built in place
(``git worktree add /tmp/old <commit>``, then ``python setup.py
build_ext --inplace`` there); STORE is a key of bench_commit.STORES
(default ``pydb-index``) or ``scan-fields`` (every record of the default
database read with ``rec.fields``, as bench_reads.py's test_scan_fields,
after one untimed scan) or ``scan-fields=PATH`` (the same on the master
file at PATH, without .mst, opened with ``encoding="auto"``: a real
database, as bench_real.py reads them), ROUNDS the rounds per tree
(default 15).

Why not two runs one after the other: on a file system where creating a
file costs more the more files were deleted lately (ext4 without a
journal scans recently deleted inodes at each create), a run is slowed
by the one before it, and a commit with a native index creates files.
Taking turns gives both builds the same state of the disk.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

from pydb import ministat

#: One round, run in a tree: the records and stores of that tree's
#: bench_commit.py, a new folder, the time in seconds on stdout.
ROUND = """
import sys, tempfile, time, shutil
from pathlib import Path
import pydb
from pydb import unesb
from benchmarks import bench_commit as bc
from benchmarks.peers import serialize
recs = []
with pydb.open(unesb.default_database()) as db:
    for r in db:
        recs.append(([(f.tag, f.raw) for f in r.fields], serialize(r)))
        if len(recs) == bc.COMMITS:
            break
folder = Path(tempfile.mkdtemp())
t0 = time.perf_counter()
assert bc.STORES[sys.argv[1]](folder, recs) == bc.COMMITS
print(time.perf_counter() - t0)
shutil.rmtree(folder)
"""

#: One round of ``scan-fields``: seconds of the second of two scans.
SCAN_ROUND = """
import time
import pydb
from pydb import unesb

def scan(db):
    n = 0
    for rec in db:
        _ = rec.fields
        n += 1
    return n

import sys
path = sys.argv[1] if len(sys.argv) > 1 else unesb.default_database()
with pydb.open(path, encoding="auto") as db:
    scan(db)
    t0 = time.perf_counter()
    n = scan(db)
    print(n, time.perf_counter() - t0)
"""


def one_round(tree: str, store: str) -> tuple[int, float]:
    """(operations, seconds) of one round of `store` in a new process in
    `tree`: COMMITS commits, or the records a scan read."""
    env = dict(os.environ, PYTHONPATH=tree)
    scan = store.partition("=")
    if scan[0] == "scan-fields":
        args = ["-c", SCAN_ROUND, *([scan[2]] if scan[2] else [])]
    else:
        args = ["-c", ROUND, store]
    out = subprocess.run([sys.executable, *args], cwd=tree, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    if scan[0] == "scan-fields":
        return int(out[-2]), float(out[-1])
    from benchmarks.bench_commit import COMMITS
    return COMMITS, float(out[-1])


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = argv[0], argv[1]
    store = argv[2] if len(argv) > 2 else "pydb-index"
    rounds = int(argv[3]) if len(argv) > 3 else 15
    times: dict[str, list[float]] = {old: [], new: []}
    ops = 0
    for k in range(rounds):
        for tree in ((old, new) if k % 2 == 0 else (new, old)):
            ops, seconds = one_round(tree, store)
            times[tree].append(seconds)
    unit = "records" if store.startswith("scan-fields") else "commits"
    for tree, ts in times.items():
        print(f"{tree}: {ops / statistics.median(ts):,.0f} {unit}/s "
              f"(median of {rounds} rounds of {ops:,}, {store})")
    v = ministat.compare(times[old], times[new])
    what = (f"{v.pct:+.1f}% +/- {v.pct_ci:.1f}% of the old one's" if v.significant
            else "no difference proven")
    print(f"the new tree's time: {what} (95%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
