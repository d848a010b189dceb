"""Peak memory and rate of the native index's bulk build across database
sizes (issue 14 item 2: memory bounded by a constant, the build rate kept).

For each scale the default database (``python -m pydb gen-unesb --scale N
--no-index``, 58,880 records per unit of scale) is generated once into
the data folder; then ``python -m pydb index --quiet DB`` runs ``repeat``
times as a child process, each time after the index folder is removed,
and the child's peak resident set size (``ru_maxrss`` of ``os.wait4``,
the child alone) and wall time are recorded.  The report gives, per
scale, the median peak RSS (MiB) and the median rate (records per
second of wall time; the machines are shared, so repeat and compare
medians).

Run it as a report (nothing is asserted about sizes or times)::

    python -m benchmarks.bench_index_memory [--scales 1,4,20] [--repeat 3]
        [--root DIR [--root DIR]] [--data DIR] [--json FILE]

``--root`` runs the pydb of another checkout (built in place), e.g. one
of the commit before the bounded build; given twice, the two checkouts'
builds alternate on the same databases, a before/after table.  The CPU
rate (records per CPU second of the child) is the steadier figure on a
shared machine.  Scale 20 needs about 300 MB of disk for the database and
as much again for the index and its runs.

The normal test run calls :func:`run` once on a tiny database (untimed, so
that it never rots) and checks that the figures are there and that the
index it built answers a search.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
UNIT = 58880   # records of the default database per unit of scale


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    return env


def database(data: Path, scale: int, count: int | None = None) -> Path:
    """Base path of the default database at `scale` (or of `count`
    records) in `data`, generated without index when missing."""
    name = f"unesb-n{count}" if count else f"unesb-s{scale}"
    folder = data / name
    base = folder / "unesb"
    if not (folder / "unesb.mst").exists():
        shutil.rmtree(folder, ignore_errors=True)
        cmd = [sys.executable, "-m", "pydb", "gen-unesb", "--no-index", str(folder)]
        cmd += ["--count", str(count)] if count else ["--scale", str(scale)]
        subprocess.run(cmd, check=True, env=_env(REPO), stdout=subprocess.DEVNULL)
    return base


def build_once(base: Path, root: Path) -> tuple[float, float, int]:
    """Build the index of `base` from scratch with the pydb of `root` in a
    child process: (wall seconds, CPU seconds, peak RSS in bytes), of the
    child alone."""
    shutil.rmtree(f"{base}.pdx", ignore_errors=True)
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "pydb", "index", "--quiet", str(base)],
                             env=_env(root), cwd=root, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    dt = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"pydb index {base} failed with status {child.returncode}")
    return dt, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024   # Linux: KiB


def run(scales: list[int], repeat: int = 3, roots: tuple[Path, ...] = (REPO,),
        data: Path | None = None, count: int | None = None) -> list[dict[str, Any]]:
    """One row per checkout and scale: records, the medians of peak RSS
    (bytes), rate (records per wall second) and CPU rate (records per CPU
    second) over `repeat` builds, and every build's figures.  With several
    checkouts their builds alternate, so that they share the machine's
    load alike."""
    data = data or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pydb"
    data.mkdir(parents=True, exist_ok=True)
    rows = []
    for scale in scales:
        base = database(data, scale, count)
        records = count or UNIT * scale
        runs: dict[Path, list[tuple[float, float, int]]] = {r: [] for r in roots}
        for _ in range(repeat):
            for root in roots:
                runs[root].append(build_once(base, root))
        for root in roots:
            got = runs[root]
            rows.append({
                "root": str(root), "scale": scale, "records": records,
                "peak_rss": statistics.median(r for _, _, r in got),
                "rate": statistics.median(records / t for t, _, _ in got),
                "cpu_rate": statistics.median(records / c for _, c, _ in got),
                "runs": [{"seconds": round(t, 3), "cpu_seconds": round(c, 3), "peak_rss": r}
                         for t, c, r in got],
            })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", default="1,4", help="comma-separated scales (default 1,4)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--root", type=Path, action="append", default=None,
                    help="checkout whose pydb builds (default: this one); repeat it to "
                    "compare checkouts, their builds alternating")
    ap.add_argument("--data", type=Path, default=None,
                    help="folder of the generated databases (default ~/.cache/pydb)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = run([int(s) for s in args.scales.split(",")], args.repeat,
               tuple(args.root or [REPO]), args.data)
    print(f"{'scale':>5} {'records':>10} {'peak RSS MiB':>13} {'records/s':>10} "
          f"{'rec/CPU s':>10}  checkout")
    for r in rows:
        print(f"{r['scale']:>5} {r['records']:>10,} {r['peak_rss'] / 2**20:>13.1f} "
              f"{r['rate']:>10,.0f} {r['cpu_rate']:>10,.0f}  {r['root']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def test_index_memory_report(tmp_path):
    """The report runs (a tiny database, one build) and the index it built
    answers a search."""
    import pydb
    rows = run([1], repeat=1, data=tmp_path, count=2000)
    assert [r["records"] for r in rows] == [2000]
    assert rows[0]["peak_rss"] > 0 and rows[0]["rate"] > 0 and rows[0]["cpu_rate"] > 0
    base = tmp_path / "unesb-n2000" / "unesb"
    with pydb.open(base) as db:
        assert db.index is not None
        english = [r.mfn for r in db
                   if any(f.tag == 40 and f.value.upper() == "EN" for f in r.fields)]
        assert english and list(db.search("LA=EN")) == english


if __name__ == "__main__":
    sys.exit(main())
