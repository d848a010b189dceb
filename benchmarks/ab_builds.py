"""Two builds of pydb side by side: one store of bench_commit.py (durable
single-record commits) timed in each of two source trees, a round in
each in turn, each round in a new process, with ministat's verdict.

    python -m benchmarks.ab_builds OLD_TREE NEW_TREE [STORE] [ROUNDS]

OLD_TREE and NEW_TREE are checkouts with the extension built in place
(``git worktree add /tmp/old <commit>``, then ``python setup.py
build_ext --inplace`` there); STORE is a key of bench_commit.STORES
(default ``pydb-index``), ROUNDS the rounds per tree (default 15).

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


def one_round(tree: str, store: str) -> float:
    """Seconds of one round of `store` in a new process in `tree`."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, "-c", ROUND, store], cwd=tree, env=env,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = argv[0], argv[1]
    store = argv[2] if len(argv) > 2 else "pydb-index"
    rounds = int(argv[3]) if len(argv) > 3 else 15
    times: dict[str, list[float]] = {old: [], new: []}
    for k in range(rounds):
        for tree in ((old, new) if k % 2 == 0 else (new, old)):
            times[tree].append(one_round(tree, store))
    from benchmarks.bench_commit import COMMITS
    for tree, ts in times.items():
        print(f"{tree}: {COMMITS / statistics.median(ts):,.0f} commits/s "
              f"(median of {rounds} rounds of {COMMITS}, {store})")
    v = ministat.compare(times[old], times[new])
    what = (f"{v.pct:+.1f}% +/- {v.pct_ci:.1f}% of the old one's" if v.significant
            else "no difference proven")
    print(f"the new tree's time: {what} (95%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
