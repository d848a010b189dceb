"""Write throughput of pydb (records/s): append and update, sync=True and
sync=False, one record per autocommit transaction and batched
transactions, on a 58,880-record load of the synthetic unesb catalogue
(pydb/unesb.py, docs/experiments.md §1).

    python benchmarks/bench_write.py [--records 58880] [--batch 1000]
                                     [--repeat 3] [--max-seconds 20]
                                     [--dir DIR] [--json FILE]

Each (operation, sync, mode) case runs --repeat times on a fresh database
and the median is reported.  Autocommit with sync=True does three
fdatasyncs per record, so that case stops after --max-seconds and reports
the rate over the records it did (the count is printed).  Updates rewrite
records of a database loaded with the same 58,880 records (each update
appends a new version, docs/isis-formats.md §2.4).

Also a pytest-benchmark file: ``python -m pytest benchmarks/bench_write.py``
runs the batched sync=False cases once each (--benchmark-disable) or timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pydb  # noqa: E402
from pydb import unesb  # noqa: E402

N = unesb.RECORDS_PER_SCALE


def records(n: int, seed: int = 1):
    return list(unesb._records(n, seed))


def run_case(folder: Path, recs, op: str, sync: bool, batch: int, max_seconds: float):
    """One run on a fresh database: returns (records done, seconds)."""
    base = folder / "w"
    for ext in (".mst", ".xrf", ".wal"):
        if os.path.exists(f"{base}{ext}"):
            os.unlink(f"{base}{ext}")
    db = pydb.create(base, sync=False)
    if op == "update":                          # load first (not timed)
        with db.transaction() as tx:
            for r in recs:
                tx.append(r)
        db.close()
        db = pydb.open(base, readonly=False, sync=sync)
        # the same content in reverse order, so every record changes size
        work = [(i + 1, recs[len(recs) - 1 - i]) for i in range(len(recs))]
    else:
        db.close()
        db = pydb.open(base, readonly=False, sync=sync)
        work = [(None, r) for r in recs]
    done = 0
    t0 = time.perf_counter()
    if batch <= 1:
        for mfn, r in work:
            if mfn is None:
                db.append(r)
            else:
                db.update(mfn, r)
            done += 1
            if done % 64 == 0 and time.perf_counter() - t0 > max_seconds:
                break
    else:
        for i in range(0, len(work), batch):
            with db.transaction() as tx:
                for mfn, r in work[i:i + batch]:
                    if mfn is None:
                        tx.append(r)
                    else:
                        tx.update(mfn, r)
            done += len(work[i:i + batch])
            if time.perf_counter() - t0 > max_seconds:
                break
    secs = time.perf_counter() - t0
    db.close()
    return done, secs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=N)
    ap.add_argument("--batch", type=int, default=1000, help="records per batched transaction")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-seconds", type=float, default=20.0,
                    help="stop a case after this long (autocommit+sync)")
    ap.add_argument("--dir", help="folder for the databases (default: a temp folder)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    recs = records(args.records)
    folder = Path(args.dir or tempfile.mkdtemp(prefix="pydb-bench-write-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    print(f"{len(recs)} unesb records, {args.repeat} runs per case, median shown")
    print(f"{'operation':<8} {'sync':<6} {'mode':<16} {'records':>8} {'records/s':>12}")
    try:
        for op in ("append", "update"):
            for sync in (False, True):
                for batch in (1, args.batch):
                    rates, dones = [], []
                    for _ in range(args.repeat):
                        done, secs = run_case(folder, recs, op, sync, batch,
                                              args.max_seconds)
                        rates.append(done / secs)
                        dones.append(done)
                    mode = "autocommit" if batch == 1 else f"batch of {batch}"
                    med = statistics.median(rates)
                    results.append(dict(operation=op, sync=sync, mode=mode,
                                        records=int(statistics.median(dones)),
                                        records_per_s=round(med), runs=[round(x) for x in rates]))
                    print(f"{op:<8} {str(sync):<6} {mode:<16} {int(statistics.median(dones)):>8} "
                          f"{med:>12,.0f}", flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


# ---- pytest-benchmark ------------------------------------------------------

def _bench(benchmark, tmp_path, op):
    recs = records(N)

    def once():
        return run_case(tmp_path, recs, op, False, 1000, 1e9)

    done, _ = benchmark.pedantic(once, rounds=1, iterations=1)
    assert done == N


def test_append_batched_nosync(benchmark, tmp_path):
    _bench(benchmark, tmp_path, "append")


def test_update_batched_nosync(benchmark, tmp_path):
    _bench(benchmark, tmp_path, "update")


if __name__ == "__main__":
    sys.exit(main())
