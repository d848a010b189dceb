"""Garbage collection under an update-only load (issue 11's targets):

1. **Bounded files.**  A writer process rewrites the records of a small
   indexed database over and over (``FACTOR`` times as many updates as the
   database has records, one record per commit).  Sampled every
   ``SAMPLE_EVERY`` commits: the size of the ``.mst`` and of the native
   index directory.  With a collecting policy both stay within a small
   multiple of their size after the load (the collector compacts and
   merges while the writer goes on); under ``none`` they grow with the
   load.
2. **Reader latency during collection.**  Meanwhile a reader in this
   process reads random records (``db[mfn].fields``) and searches a word
   the writer keeps rewriting, and times each call.  Its p99 under a
   collecting policy is compared with its p99 under ``none``, nothing
   collected, over a load of only ``--none-factor`` (default 2) times the
   database: the reader's latency while the writer makes garbage, before
   the uncollected garbage itself slows it down (under ``none`` a load of
   100x would make the baseline meaningless, and take hours: every
   commit adds a segment that each later commit's MANIFEST names).
   Because under ``none`` the reader also pays for the garbage itself,
   the fair baseline is ``paused``: the same load, nothing collected
   while the reader is timed, but every ``PAUSE_EVERY`` commits the
   writer stops and collects everything (``db.collect()``) while the
   reader's calls are not counted -- the garbage stays at the level a
   collector that keeps up leaves, and no collection runs beside the
   timed calls (over the ``--none-factor`` load too: a full collection
   every 16 commits compacts the master file each time).
   ``p99/paused`` is the target's ratio: a reader's p99
   during collection against its p99 without it.

Run it as a report (a benchmark, not a test: nothing is asserted about
sizes or times)::

    python -m benchmarks.bench_gc_bounds [--records 2000] [--factor 100]
        [--none-factor 2] [--policies none,paused,background,combined]
        [--json FILE]

The normal test run calls :func:`run` once on a tiny database (untimed,
so that it never rots) and checks only that the figures are there and
that the database is sound afterwards.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pydb

FST = "24 4 v24\n"
SAMPLE_EVERY = 200
PAUSE_EVERY = 16   # the paused baseline's commits between collections


def _record(mfn: int, version: int) -> list[tuple[int, str]]:
    words = " ".join(f"w{(mfn * 7 + version + k) % 500}" for k in range(6))
    return [(24, f"BOUNDS{mfn % 10} {words} v{version}"),
            (70, "x" * 900)]   # about 1 KB per record, as real catalogues


def _dir_bytes(path: Path) -> int:
    """Bytes of the files in `path` (0 if it is not a directory); files
    the collector removes meanwhile count 0."""
    total = 0
    if not path.is_dir():
        return 0
    for p in path.iterdir():
        try:
            total += p.stat().st_size if p.is_file() else 0
        except FileNotFoundError:
            pass
    return total


def _writer(base: str, policy: str, records: int, updates: int, q: Any,
            pauses: Any) -> None:
    """Child process: `updates` single-record commits, sampling the file
    sizes; puts [(commit, mst bytes, index bytes)] and the final stat.
    Policy ``paused``: nothing collected but every PAUSE_EVERY commits a
    full collection, with `pauses` (a shared counter) odd meanwhile."""
    rng = random.Random(1)
    samples = []
    mst = Path(base + ".mst")
    pdx = Path(base + ".pdx")
    paused = policy == "paused"
    with pydb.open(base, readonly=False, sync=False,
                   gc="none" if paused else policy) as db:
        for i in range(1, updates + 1):
            mfn = rng.randint(1, records)
            db.update(mfn, _record(mfn, i))
            if i % SAMPLE_EVERY == 0:
                samples.append((i, mst.stat().st_size, _dir_bytes(pdx)))
            if paused and i % PAUSE_EVERY == 0:
                pauses.value += 1
                db.collect(timeout=60)
                pauses.value += 1
        st = db.stat()
    q.put((samples, st["master_file"]["size"], st["garbage"]["versions"]))


def _percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def run(workdir: Path, records: int, factor: int, policies: list[str],
        none_factor: int | None = None) -> dict[str, Any]:
    """One load per policy on a fresh copy (`factor` updates per record;
    under none `none_factor`, default `factor`); returns the figures by
    policy."""
    template = workdir / "template"
    template.mkdir(parents=True, exist_ok=True)
    with pydb.create(template / "db", fst=FST, sync=False, gc="none") as db:
        with db.transaction() as tx:
            for mfn in range(1, records + 1):
                tx.append(_record(mfn, 0))
    start_mst = (template / "db.mst").stat().st_size
    start_pdx = _dir_bytes(template / "db.pdx")
    nf = factor if none_factor is None else none_factor
    out: dict[str, Any] = {"records": records, "updates": records * factor,
                           "none_updates": records * nf,
                           "start_mst_bytes": start_mst, "start_index_bytes": start_pdx,
                           "policies": {}}
    ctx = mp.get_context("fork")
    for policy in policies:
        d = workdir / policy
        d.mkdir()
        for ext in (".mst", ".xrf"):
            (d / f"db{ext}").write_bytes((template / f"db{ext}").read_bytes())
        (d / "db.pdx").mkdir()
        for f in (template / "db.pdx").iterdir():
            (d / "db.pdx" / f.name).write_bytes(f.read_bytes())
        base = str(d / "db")
        q = ctx.Queue()
        pauses = ctx.Value("l", 0, lock=False)
        updates = records * (nf if policy in ("none", "paused") else factor)
        proc = ctx.Process(target=_writer, args=(base, policy, records, updates, q,
                                                 pauses))
        lat: list[float] = []
        with pydb.open(base) as reader:
            proc.start()
            rng = random.Random(2)
            while proc.is_alive():
                mfn = rng.randint(1, records)
                p0 = pauses.value
                t0 = time.perf_counter()
                _ = reader[mfn].fields
                _ = len(reader.search(f"BOUNDS{mfn % 10}"))
                t1 = time.perf_counter()
                if p0 % 2 == 0 and pauses.value == p0:   # no collection beside it
                    lat.append(t1 - t0)
                if not q.empty():
                    break
            samples, final_mst, left = q.get(timeout=600)
            proc.join(60)
        with pydb.open(base) as db:
            report = db.check()
            if not report.ok:
                raise AssertionError(f"{policy}: check failed: {report.summary()}")
        out["policies"][policy] = {
            "updates": updates,
            "max_mst_bytes": max((s[1] for s in samples), default=start_mst),
            "max_index_bytes": max((s[2] for s in samples), default=start_pdx),
            "final_mst_bytes": final_mst,
            "garbage_versions_at_end": left,
            "reader_calls": len(lat),
            "reader_p50_ms": round(_percentile(lat, 0.50) * 1e3, 3),
            "reader_p99_ms": round(_percentile(lat, 0.99) * 1e3, 3),
            "samples": samples,
        }
    none, quiet = out["policies"].get("none"), out["policies"].get("paused")
    for policy, fig in out["policies"].items():
        fig["max_mst_x_start"] = round(fig["max_mst_bytes"] / start_mst, 2)
        fig["max_index_x_start"] = round(fig["max_index_bytes"] / max(start_pdx, 1), 2)
        for name, base_fig in (("none", none), ("paused", quiet)):
            if base_fig and policy not in ("none", "paused"):
                fig[f"p99_x_{name}"] = round(
                    fig["reader_p99_ms"] / max(base_fig["reader_p99_ms"], 1e-9), 2)
    return out


def test_bounds_run_untimed(tmp_path):
    """The report's code path on a tiny database (no timing, no sizes
    asserted): every policy gives its figures and leaves a sound database."""
    out = run(tmp_path, records=60, factor=5, policies=["none", "paused", "background"])
    for policy in ("none", "paused", "background"):
        fig = out["policies"][policy]
        assert fig["reader_calls"] > 0 and fig["max_mst_bytes"] >= out["start_mst_bytes"]
    # under none every update left its back version (300 updates); the
    # paused writer collected every 16 (300 = 18 x 16 + 12): at least the
    # last 12 are left, and more only where the reader's registration
    # pinned a version during a collection
    assert out["policies"]["none"]["garbage_versions_at_end"] == 300
    assert 12 <= out["policies"]["paused"]["garbage_versions_at_end"] < 300
    assert "p99_x_paused" in out["policies"]["background"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2000,
                    help="records of the database (default 2000)")
    ap.add_argument("--factor", type=int, default=100,
                    help="updates per record of the database (default 100: 100x its size)")
    ap.add_argument("--none-factor", type=int, default=2,
                    help="updates per record under none, the latency baseline (default 2)")
    ap.add_argument("--policies", default="none,paused,background,combined",
                    help="comma-separated gc policies, and the baseline paused (default "
                    "none,paused,background,combined)")
    ap.add_argument("--json", help="write every figure (with the size samples) to this file")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        out = run(Path(d), args.records, args.factor, args.policies.split(","),
                  args.none_factor)
    print(f"{out['records']} records, {out['updates']:,} single-record updates "
          f"({out['none_updates']:,} under none); "
          f"start: .mst {out['start_mst_bytes']:,} B, index {out['start_index_bytes']:,} B")
    print(f"{'policy':12} {'updates':>9} {'max .mst':>12} {'x start':>8} {'max index':>12} "
          f"{'x start':>8} {'garbage':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99/none':>9} "
          f"{'p99/paused':>10}")
    for policy, f in out["policies"].items():
        print(f"{policy:12} {f['updates']:>9,} {f['max_mst_bytes']:>12,} {f['max_mst_x_start']:>8} "
              f"{f['max_index_bytes']:>12,} {f['max_index_x_start']:>8} "
              f"{f['garbage_versions_at_end']:>8} {f['reader_p50_ms']:>8} "
              f"{f['reader_p99_ms']:>8} {f.get('p99_x_none', '-'):>9} "
              f"{f.get('p99_x_paused', '-'):>10}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
