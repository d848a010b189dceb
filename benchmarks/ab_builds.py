"""Two builds of pydb side by side: one store of bench_commit.py (durable
single-record commits), or a scan, timed in each of two source trees, a
round in each in turn, each round in a new process, with ministat's
verdict.

    python -m benchmarks.ab_builds OLD_TREE NEW_TREE [STORE] [ROUNDS]

OLD_TREE and NEW_TREE are checkouts with the extension built in place
(``git worktree add /tmp/old <commit>``, then ``python setup.py
build_ext --inplace`` there); STORE is a key of bench_commit.STORES
or THREAD_STORES (default ``pydb-index``; a tree without THREAD_STORES
can be given the newer bench_commit.py for ``pydb-threads``) or
``scan-fields`` (every record of the default
database read with ``rec.fields``, as bench_reads.py's test_scan_fields,
after one untimed scan) or ``scan-fields=PATH`` (the same on the master
file at PATH, without .mst, opened with ``encoding="auto"``: a real
database) or ``real=PATH`` (bench_real.py's scan of that master file: the
``fields`` of every record, all kept until the scan ends; a round is the
fastest of 5 such scans) or ``query=EXPR`` (the search
expression EXPR on a native index of the default database with
bench_index.py's FST, built by each tree in its own folder before the
rounds: the trees may write different index formats; a round is the
fastest of 9 loops of 100 searches), ROUNDS the rounds per tree
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
import tempfile

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
threaded = getattr(bc, "THREAD_STORES", {})
stores = {**bc.STORES, **threaded}
t0 = time.perf_counter()
assert stores[sys.argv[1]](folder, recs) == (
    bc.THREAD_COMMITS if sys.argv[1] in threaded else bc.COMMITS)
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


#: One round of ``real=``: seconds of the fastest of 5 scans that keep
#: every record's fields (bench_real.pydb_scan), after an untimed one.
REAL_ROUND = """
import sys, time
import pydb
with pydb.open(sys.argv[1], encoding="auto") as db:
    kept = [rec.fields for rec in db]
    best = None
    for _ in range(5):
        del kept
        t0 = time.perf_counter()
        kept = [rec.fields for rec in db]
        t = time.perf_counter() - t0
        best = t if best is None else min(best, t)
    print(len(kept), best)
"""

#: Before the rounds of ``query=``: the tree's own copy of the default
#: database, indexed, in the folder argv[1].
INDEX_SETUP = """
import shutil, sys
from pydb import _pydb, unesb
from benchmarks.bench_index import UNESB_FST
src, dst = str(unesb.default_database()), sys.argv[1] + "/unesb"
for ext in (".mst", ".xrf"):
    shutil.copy(src + ext, dst + ext)
_pydb._index_build(dst, UNESB_FST)
"""

#: One round of ``query=``: the fastest of 9 loops of 100 searches.
QUERY_ROUND = """
import sys, time
from pydb import _pydb
from pydb.search import search
ix = _pydb._open_native_index(sys.argv[1] + "/unesb")
search(ix, sys.argv[2])
best = None
for _ in range(9):
    t0 = time.perf_counter()
    for _ in range(100):
        search(ix, sys.argv[2])
    t = (time.perf_counter() - t0) / 100
    best = t if best is None else min(best, t)
print(1, best)
"""


def one_round(tree: str, store: str, folder: str = "") -> tuple[int, float]:
    """(operations, seconds) of one round of `store` in a new process in
    `tree`: COMMITS commits (THREAD_COMMITS), the records a scan read, or one search (in
    the tree's index in `folder`)."""
    env = dict(os.environ, PYTHONPATH=tree)
    scan = store.partition("=")
    if scan[0] == "query":
        args = ["-c", QUERY_ROUND, folder, scan[2]]
        out = subprocess.run([sys.executable, *args], cwd=tree, env=env,
                             capture_output=True, text=True, check=True).stdout.split()
        return 1, float(out[-1])
    if scan[0] == "scan-fields":
        args = ["-c", SCAN_ROUND, *([scan[2]] if scan[2] else [])]
    elif scan[0] == "real":
        args = ["-c", REAL_ROUND, scan[2]]
    else:
        args = ["-c", ROUND, store]
    out = subprocess.run([sys.executable, *args], cwd=tree, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    if scan[0] in ("scan-fields", "real"):
        return int(out[-2]), float(out[-1])
    from benchmarks.bench_commit import COMMITS, THREAD_COMMITS, THREAD_STORES
    return (THREAD_COMMITS if store in THREAD_STORES else COMMITS), float(out[-1])


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = argv[0], argv[1]
    store = argv[2] if len(argv) > 2 else "pydb-index"
    rounds = int(argv[3]) if len(argv) > 3 else 15
    times: dict[str, list[float]] = {old: [], new: []}
    folders = {old: "", new: ""}
    ops = 0
    with tempfile.TemporaryDirectory() as tmp:
        if store.startswith("query="):
            for i, tree in enumerate((old, new)):
                folders[tree] = os.path.join(tmp, str(i))
                os.mkdir(folders[tree])
                subprocess.run([sys.executable, "-c", INDEX_SETUP, folders[tree]],
                               cwd=tree, env=dict(os.environ, PYTHONPATH=tree), check=True)
        for k in range(rounds):
            for tree in ((old, new) if k % 2 == 0 else (new, old)):
                ops, seconds = one_round(tree, store, folders[tree])
                times[tree].append(seconds)
    unit = ("records" if store.startswith(("scan-fields", "real=")) else
            "searches" if store.startswith("query=") else "commits")
    for tree, ts in times.items():
        each = (f", {statistics.median(ts) * 1e6:.1f} us each"
                if unit == "searches" else "")
        print(f"{tree}: {ops / statistics.median(ts):,.0f} {unit}/s{each} "
              f"(median of {rounds} rounds of {ops:,}, {store})")
    v = ministat.compare(times[old], times[new])
    what = (f"{v.pct:+.1f}% +/- {v.pct_ci:.1f}% of the old one's" if v.significant
            else "no difference proven")
    print(f"the new tree's time: {what} (95%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
