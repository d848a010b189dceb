"""Throughput of ISO 2709 / JSON Lines export and import (records/s).

Runs on the synthetic unesb database (58,880 records x --scale, see
pydb.unesb) in a temporary folder: export to the CDS/ISIS flavour, the
MARC flavour and JSON Lines, then import each file into a new database
(sync=False, so the disk is not what is measured), best of --reps runs.

    python benchmarks/bench_iso.py [--scale 1] [--reps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pydb  # noqa: E402
from pydb import unesb  # noqa: E402


def best(reps, fn):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--count", type=int, default=None, help="records (overrides --scale)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results to this file")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="pydb-bench-iso-")
    results = {}
    try:
        base = unesb.generate(tmp, scale=args.scale, count=args.count)
        with pydb.open(base) as db:
            n = len(db)
            for fmt in ("isis", "marc", "jsonl"):
                out = os.path.join(tmp, "x." + fmt)
                if fmt == "jsonl":
                    t = best(args.reps, lambda out=out: pydb.export_jsonl(db, out))
                else:
                    t = best(args.reps, lambda out=out, fmt=fmt: pydb.export_iso(db, out, fmt))
                size = os.path.getsize(out)
                k = [0]

                def imp(k=k, fmt=fmt, out=out):
                    k[0] += 1
                    target = os.path.join(tmp, f"imp-{fmt}-{k[0]}")
                    if fmt == "jsonl":
                        pydb.import_jsonl(out, target, sync=False)
                    else:
                        pydb.import_iso(out, target, sync=False)
                ti = best(args.reps, imp)
                results[fmt] = {"records": n, "bytes": size,
                                "export_rec_per_s": round(n / t),
                                "import_rec_per_s": round(n / ti)}
                print(f"{fmt:>5}: {n} records, {size / 1e6:.1f} MB; export "
                      f"{n / t:,.0f} rec/s, import {n / ti:,.0f} rec/s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
