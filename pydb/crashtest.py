"""The crashtest: C threads against Python threads on one database.

After OpenIsis 0.9's multithreaded read test (experiments.md §1).  The
pure-C program ``pydb-crashtest`` (benchmarks/crashtest.c, installed inside
this package) and the Python twin below run the same workload:

1. a sequential read of every record 1..max MFN in one thread, then
2. for each thread count (default 8, 2, 1, 4), that many threads each
   reading every record of the list, each starting at a different offset
   (thread i of T at i*n/T) and wrapping, reporting the rows per second of
   all threads together.

Until the inverted index exists, the list is the active MFNs of the XRF.
Modes: cache ``warm`` (files in the page cache), ``cold`` (files dropped
from the page cache with posix_fadvise before each pass; a pass then reads
the list once), ``direct`` (O_DIRECT reads, every read goes to the disk);
lock ``none`` or ``mutex`` (one mutex around every record read).

A pass reads the whole list once, repeats until ``min_time`` seconds have
passed, and is cut off after ``max_time`` seconds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .database import open as open_db
from .errors import NotFoundError

__all__ = ["Settings", "run_python", "run_c", "crashtest_binary", "main", "c_main"]

CACHES = ("warm", "cold", "direct")
LOCKS = ("none", "mutex")


@dataclass
class Settings:
    """One crashtest configuration (times in seconds)."""
    db: str
    threads: list[int] = field(default_factory=lambda: [8, 2, 1, 4])
    cache: str = "warm"
    lock: str = "none"
    reps: int = 3
    min_time: float = 0.2
    max_time: float = 2.0
    io: str = "mmap"

    def pass_min_time(self) -> float:
        # A cold or direct pass reads the list once: repeating it would
        # measure the cache it just filled (cold) or is pointless (direct).
        return 0.0 if self.cache in ("cold", "direct") else self.min_time


def crashtest_binary() -> Path:
    """Path of the pure-C benchmark built by ``pip install .``.

    Raises FileNotFoundError if it is missing (a broken install)."""
    p = Path(__file__).with_name("pydb-crashtest")
    if not p.exists():
        raise FileNotFoundError(f"{p} is missing: reinstall pydb (pip install .)")
    return p


def run_c(s: Settings) -> list[dict]:
    """Run ``pydb-crashtest --json`` with settings `s`; returns its samples
    (list of dicts: impl, phase, threads, rep, rows, seconds, rows_per_sec,
    cache, lock).  Raises RuntimeError if the program fails."""
    cmd = [os.fspath(crashtest_binary()), "--json",
           "--threads", ",".join(map(str, s.threads)), "--cache", s.cache,
           "--lock", s.lock, "--reps", str(s.reps),
           "--min-time", str(s.pass_min_time()), "--max-time", str(s.max_time),
           os.fspath(s.db)]
    if s.cache != "direct":
        cmd[1:1] = ["--io", s.io]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pydb-crashtest failed ({proc.returncode}): {proc.stderr.strip()}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _sample(s: Settings, phase: str, threads: int, rep: int, rows: int, secs: float) -> dict:
    return {"impl": "python", "phase": phase, "threads": threads, "rep": rep,
            "rows": rows, "seconds": secs, "rows_per_sec": rows / secs if secs > 0 else 0.0,
            "cache": s.cache, "lock": s.lock}


def run_python(s: Settings) -> list[dict]:
    """The Python twin of pydb-crashtest: same phases, same order, same
    record list; each read is ``db[mfn]`` (one GIL release per record).
    Returns samples in the same shape as :func:`run_c`."""
    io = "direct" if s.cache == "direct" else s.io
    out = []
    with open_db(s.db, io=io, lock=s.lock) as db:
        mfns = db.mfns()
        if not mfns:
            raise RuntimeError(f"{s.db} has no active records")
        max_mfn = db.max_mfn
        read = db.read
        for rep in range(s.reps):
            if s.cache == "cold":
                db.drop_cache()
            rows = 0
            t0 = time.perf_counter()
            deadline, stop = t0 + s.pass_min_time(), t0 + s.max_time
            while True:
                for mfn in range(1, max_mfn + 1):
                    try:
                        read(mfn)
                    except NotFoundError:
                        continue
                    rows += 1
                    if not rows & 255 and time.perf_counter() >= stop:
                        break
                else:
                    if time.perf_counter() < deadline:
                        continue
                break
            out.append(_sample(s, "seq", 1, rep, rows, time.perf_counter() - t0))
        for t in s.threads:
            n = len(mfns)
            orders = [mfns[n * i // t:] + mfns[:n * i // t] for i in range(t)]
            for rep in range(s.reps):
                if s.cache == "cold":
                    db.drop_cache()
                counts = [0] * t
                barrier = threading.Barrier(t + 1)
                errors: list[BaseException] = []
                timing = {}

                def work(i):
                    order = orders[i]
                    rows = 0
                    barrier.wait()
                    start = timing["t0"]
                    deadline, stop = start + s.pass_min_time(), start + s.max_time
                    try:
                        while True:
                            for mfn in order:
                                read(mfn)
                                rows += 1
                                if not rows & 255 and time.perf_counter() >= stop:
                                    return
                            if time.perf_counter() >= deadline:
                                return
                    except BaseException as e:  # reported after join
                        errors.append(e)
                    finally:
                        counts[i] = rows

                workers = [threading.Thread(target=work, args=(i,)) for i in range(t)]
                for w in workers:
                    w.start()
                timing["t0"] = time.perf_counter()
                barrier.wait()
                for w in workers:
                    w.join()
                secs = time.perf_counter() - timing["t0"]
                if errors:
                    raise errors[0]
                out.append(_sample(s, "threads", t, rep, sum(counts), secs))
    return out


# ---------------------------------------------------------------- report

def _median_rps(samples, impl, phase, threads):
    v = [x["rows_per_sec"] for x in samples
         if x["impl"] == impl and x["phase"] == phase and x["threads"] == threads]
    return statistics.median(v) if v else None


def format_block(samples: list[dict], impl: str, s: Settings, n_records: int, max_mfn: int) -> str:
    """The original crashtest's output for one implementation and mode
    (medians over repetitions)."""
    lines = [f"== {impl}, cache {s.cache}, lock {s.lock} (median of {s.reps})",
             f"{n_records} records (from the XRF; the index phase comes with the index)",
             f"{n_records} postings max mfn {max_mfn}"]
    seq = [x for x in samples if x["impl"] == impl and x["phase"] == "seq"]
    if seq:
        med = statistics.median(x["rows_per_sec"] for x in seq)
        rows = statistics.median(x["rows"] for x in seq)
        lines.append(f"sequential read {rows:.0f} rows in {rows / med:.3f} seconds "
                     f"{med:.0f} rows per sec")
    for t in s.threads:
        r = _median_rps(samples, impl, "threads", t)
        if r is not None:
            lines.append(f"{t} threads  {r:.0f} rows per sec")
    return "\n".join(lines)


def format_table(samples: list[dict], s: Settings) -> str:
    """C against Python per thread count: medians and their ratio."""
    head = f"{'':>12} {'C rows/s':>14} {'Python rows/s':>14} {'Python/C':>9}"
    lines = [f"-- C vs Python, cache {s.cache}, lock {s.lock}", head]
    rows = [("sequential", "seq", 1)] + [(f"{t} threads", "threads", t) for t in s.threads]
    for label, phase, t in rows:
        c = _median_rps(samples, "c", phase, t)
        p = _median_rps(samples, "python", phase, t)
        if c is None or p is None:
            continue
        lines.append(f"{label:>12} {c:>14,.0f} {p:>14,.0f} {p / c:>9.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m pydb crashtest [DB] [options]``: run both programs in
    each requested mode and print the original-style blocks and the
    comparison.  Returns the exit status."""
    import argparse
    from .unesb import default_database

    ap = argparse.ArgumentParser(prog="python -m pydb crashtest",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("db", nargs="?", help="database (default: the built-in synthetic unesb)")
    ap.add_argument("--threads", default="8,2,1,4", help="thread counts (default 8,2,1,4)")
    ap.add_argument("--cache", default="warm,direct",
                    help="cache modes, comma-separated: warm, cold, direct (default warm,direct)")
    ap.add_argument("--lock", default="none,mutex",
                    help="lock modes, comma-separated: none, mutex (default none,mutex)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per pass (default 3)")
    ap.add_argument("--min-time", type=float, default=0.2,
                    help="warm passes repeat the list until this many seconds (default 0.2)")
    ap.add_argument("--max-time", type=float, default=1.0,
                    help="a pass is cut off after this many seconds (default 1.0)")
    ap.add_argument("--io", default="mmap", choices=["mmap", "pread"],
                    help="I/O for warm and cold passes (default mmap)")
    ap.add_argument("--quick", action="store_true",
                    help="one repetition, short passes, warm and direct, no mutex")
    ap.add_argument("--json", metavar="FILE", help="write every sample to FILE as JSON")
    args = ap.parse_args(argv)

    try:
        threads = [int(t) for t in args.threads.split(",")]
        if any(t < 1 for t in threads):
            raise ValueError
    except ValueError:
        ap.error("--threads takes positive integers separated by commas")
    caches = args.cache.split(",")
    locks = args.lock.split(",")
    for c in caches:
        if c not in CACHES:
            ap.error(f"unknown cache mode {c!r} (warm, cold, direct)")
    for lk in locks:
        if lk not in LOCKS:
            ap.error(f"unknown lock mode {lk!r} (none, mutex)")
    reps, min_time, max_time = args.reps, args.min_time, args.max_time
    if args.quick:
        reps, min_time, max_time, locks = 1, 0.05, 0.3, ["none"]
    if reps < 1 or max_time <= 0 or min_time < 0:
        ap.error("--reps must be >= 1, --max-time > 0, --min-time >= 0")

    db_path = args.db
    if db_path is None:
        if not _default_ready():
            print("building the default database (synthetic unesb, 58,880 records) "
                  "on first use...", file=sys.stderr)
        db_path = os.fspath(default_database())
    with open_db(db_path) as db:
        n_records, max_mfn = len(db), db.max_mfn
    print(f"crashtest on {db_path}: {n_records} active records, max MFN {max_mfn}")
    everything = []
    for cache in caches:
        for lock in locks:
            s = Settings(db=db_path, threads=threads, cache=cache, lock=lock, reps=reps,
                         min_time=min_time, max_time=max_time, io=args.io)
            try:
                samples = run_c(s) + run_python(s)
            except (RuntimeError, OSError) as e:
                if cache == "direct" and ("O_DIRECT" in str(e) or getattr(e, "errno", 0) == 22):
                    print(f"\n(cache direct skipped: {e})")
                    break
                raise
            everything += samples
            print()
            print(format_block(samples, "c", s, n_records, max_mfn))
            print()
            print(format_block(samples, "python", s, n_records, max_mfn))
            print()
            print(format_table(samples, s))
            sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps({"db": db_path, "samples": everything}, indent=1))
    return 0


def _default_ready() -> bool:
    from .unesb import GENERATOR_VERSION, default_cache_dir
    return (default_cache_dir() / f"unesb-v{GENERATOR_VERSION}-x1" / "complete").exists()


def c_main() -> None:
    """Console entry point ``pydb-crashtest``: runs the C program with the
    same arguments."""
    binary = os.fspath(crashtest_binary())
    os.execv(binary, [binary] + sys.argv[1:])
