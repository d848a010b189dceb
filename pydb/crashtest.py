"""The crashtest: C threads against Python threads on one database.

After OpenIsis 0.9's multithreaded read test (docs/experiments.md §1).  The
pure-C program ``pydb-crashtest`` (benchmarks/crashtest.c, installed inside
this package) and the Python twin below run the same workload:

1. a sequential read of every record 1..max MFN in one thread, then
2. for each thread count (default 8, 2, 1, 4), that many threads each
   reading every record of the list, each starting at a different offset
   (thread i of T at i*n/T) and wrapping, reporting the rows per second of
   all threads together.

The list comes from a pluggable *row source* (:class:`RowSource`).  Where
the database has an inverted index (its native index, else the ISIS
inverted file: :func:`open_row_index`), the crashtest starts as the
original did with the index phase, :class:`PrefixRows`: enumerate the keys
of a prefix (``--prefix``, default ``Z``), print "N terms" and "M postings
max mfn X", and read the MFN of every posting of those keys (409 terms and
4,205 postings on the default database, the original's figures).  The C
program does its own index phase (``--prefix``, through
pydb_native_index_open / pydb_index_terms / pydb_index_postings) and the
runner checks that it found as many postings as Python did.  Without an
index, :class:`XrfRows` reads the active MFNs of the XRF (a list file,
``--list``, is the C program's third source).

Modes: cache ``warm`` (files in the page cache), ``cold`` (files dropped
from the page cache with posix_fadvise before each pass; a pass then reads
the list once), ``direct`` (O_DIRECT reads, every read goes to the disk);
lock ``none`` or ``mutex`` (one mutex around every record read).

A pass reads the whole list once, repeats until ``min_time`` seconds have
passed (warm only), and is cut off after ``max_time`` seconds.  Each cell
(implementation x mode x thread count) is repeated ``reps`` times; the
report gives medians and, for every difference, a ministat verdict at 95%
confidence from the repetitions' samples (Student's t, pydb.ministat).
Each block line says how many passes its rows are (a warm pass's rows
are several passes; a pass cut at ``max_time`` part of one).  The report
ends with the targets of docs/design.md §9, each judged met, missed or
undecided by :func:`target_verdict` (met: the whole confidence interval
at or above the target; undecided lines say about how many repetitions
would decide them), and a paragraph (:func:`summary`) on whether more
threads pay off in each cache mode, for C and Python.

The Python twin reads through ``read_many`` batches of 256 records (one
GIL release per batch; :data:`PY_READS` ``"batch"``), one ``db[mfn]`` per
record (``"record"``), or one ``db[mfn]`` per record with a CPU-bound
Python thread running beside the readers (``"busy"``: what a web handler
or a parser in the same process does to them); the default runs all
three side by side.  A read whose pages are in the page cache keeps the
GIL, one that may wait for the disk releases it: released on every read,
a busy thread would take the GIL for a switch interval (5 ms) per read.
Measured on the 2-core development machine (CPython 3.11, synthetic
unesb, warm, medians of 7-11 runs in one process): batch reads are 1.2-1.4x
faster than per-record reads at 1 thread (one Python call and one GIL
round trip per 256 records instead of per record), and both keep 8
threads at about 1.0-1.3x of 1 thread; the context switches that a GIL
hand-off per record would cost stay rare (under 0.001 per record with mmap,
0.004 with pread, counted with getrusage), because a thread that releases
the GIL around a short read usually takes it back before a waiting thread
wakes.  The 0.29x (8 threads vs 1, warm mmap) of an earlier run did not
reproduce; on this shared machine single runs vary by 2x, hence the
repetitions and the verdicts.  What remains serial is the Python-level
work per record (creating Record objects under the GIL): on 2 cores
Python threads cannot add throughput to warm reads, only overlap waits.
"""

from __future__ import annotations

import array
import contextlib
import errno
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import ministat
from ._cli import tool_parser
from .database import open as open_db
from .errors import Error, UnsupportedError
from .unesb import GENERATOR_VERSION, default_cache_dir, default_database

__all__ = ["Settings", "RowSource", "XrfRows", "PrefixRows", "open_row_index",
           "has_index", "run_python", "run_python_with", "run_c",
           "crashtest_binary", "comparison", "format_block", "format_table", "plot",
           "main", "c_main", "BusyThread", "CACHES", "LOCKS", "PY_READS", "BATCH",
           "LABELS", "TargetVerdict", "target_verdict", "summary"]

CACHES = ("warm", "cold", "direct")
LOCKS = ("none", "mutex")
PY_READS = ("batch", "record", "busy")
#: Records per read_many call in the Python twin's "batch" reads (the same
#: batch the binding uses when iterating).
BATCH = 256

#: How the report names each implementation (the ``impl`` of the samples).
LABELS = {"c": "C", "python": "Python batch", "python-record": "Python record",
          "python-busy": "Python busy", "python-ft": "Python-FT batch",
          "python-ft-record": "Python-FT record", "python-ft-busy": "Python-FT busy"}


def _label(impl: str) -> str:
    return LABELS.get(impl, impl)


def _threads(t: int) -> str:
    return f"{t} thread{'' if t == 1 else 's'}"


# ---------------------------------------------------------------- rows

class RowSource(Protocol):
    """Where the threads' list of records comes from."""

    def rows(self, db) -> tuple[list[str], list[int]]:
        """(header lines in the original's style, list of MFNs to read)."""
        ...


class XrfRows:
    """The active MFNs of the XRF, in MFN order: the row source of a
    database without an inverted index."""

    def rows(self, db) -> tuple[list[str], list[int]]:
        mfns = db.mfns()
        return ([f"{len(mfns)} records (from the XRF; no index phase)",
                 f"{len(mfns)} rows max mfn {db.max_mfn}"], mfns)


class PrefixRows:
    """The original's index phase: enumerate the keys of the database's
    inverted index that start with `prefix` (brought into key form) and
    collect the MFN of each of their postings, in key order (a record
    named by several postings is read several times, as in OpenIsis's
    crashtest).  Uses :func:`open_row_index` (native index, else the ISIS
    inverted file) unless another `index` with the same ``terms(prefix)``
    and ``postings(key, raw=True)`` is given.  Raises
    :class:`~pydb.UnsupportedError` when the database has no index."""

    def __init__(self, prefix: str = "Z", index=None):
        self.prefix, self.index = prefix, index

    def rows(self, db) -> tuple[list[str], list[int]]:
        index = self.index if self.index is not None else open_row_index(db)
        if index is None:
            raise UnsupportedError(errno.ENOENT, "the database has no inverted index "
                                   "(no native index, no ISIS inverted file)", db.path)
        keys = [t.key for t in index.terms(self.prefix)]
        mfns = [p.mfn for k in keys for p in index.postings(k, raw=True)]
        return ([f"{len(keys)} terms",
                 f"{len(mfns)} postings max mfn {db.max_mfn}"], mfns)


def open_row_index(db):
    """The inverted index the index phase reads: :attr:`pydb.Database.index`
    (the native index, else the ISIS inverted file; closed with the
    database), or None without one.  The same precedence as the C
    program's ``--prefix``.  A damaged index is reported on stderr and
    treated as absent."""
    try:
        return db.index
    except Exception as e:  # noqa: BLE001 - a damaged index: say so, use the XRF
        print(f"crashtest: index of {db.path} unusable ({e}); reading the XRF's MFNs",
              file=sys.stderr)
        return None


def has_index(db) -> bool:
    """True if `db` has an inverted index usable for :class:`PrefixRows`
    (a damaged one is reported on stderr and treated as absent)."""
    return open_row_index(db) is not None


# ---------------------------------------------------------------- settings

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
    py_read: str = "batch"
    mfns: list[int] | None = None      # the row list; None: from `prefix`, else the XRF
    prefix: str | None = None          # index phase: rows from the postings of this prefix

    def pass_min_time(self) -> float:
        # A cold or direct pass reads the list once: repeating it would
        # measure the cache it just filled (cold) or is pointless (direct).
        return 0.0 if self.cache in ("cold", "direct") else self.min_time


def crashtest_binary() -> Path:
    """Path of the pure-C benchmark ``pydb/pydb-crashtest``, built with the
    extension by ``pip install -e .``, ``pip install .`` or ``python
    setup.py build_ext --inplace``.

    Raises FileNotFoundError if it is missing (not built, or a broken
    install)."""
    p = Path(__file__).with_name("pydb-crashtest")
    if not p.exists():
        raise FileNotFoundError(f"{p} is missing: build it (pip install -e ., or "
                                "python setup.py build_ext --inplace) or reinstall pydb")
    return p


# ---------------------------------------------------------------- runs

def run_c(s: Settings) -> list[dict]:
    """Run ``pydb-crashtest --json`` with settings `s`; returns its samples
    (list of dicts: impl, phase, threads, rep, rows, seconds, rows_per_sec,
    cache, lock).  With ``s.prefix`` the program does its own index phase
    (``--prefix``); when ``s.mfns`` is given too, the number of postings it
    found must equal ``len(s.mfns)``.  Otherwise ``s.mfns`` is handed over
    as ``--list``, or the program reads the XRF's active MFNs.  Raises
    RuntimeError if the program fails or its index phase disagrees."""
    cmd = [os.fspath(crashtest_binary()), "--json",
           "--threads", ",".join(map(str, s.threads)), "--cache", s.cache,
           "--lock", s.lock, "--reps", str(s.reps),
           "--min-time", str(s.pass_min_time()), "--max-time", str(s.max_time)]
    if s.cache != "direct":
        cmd += ["--io", s.io]
    tmp = None
    try:
        if s.prefix is not None:
            cmd += ["--prefix", s.prefix]
        elif s.mfns is not None:
            tmp = tempfile.NamedTemporaryFile("w", suffix=".mfns", delete=False)
            with tmp:
                tmp.write("".join(f"{m}\n" for m in s.mfns))
            cmd += ["--list", tmp.name]
        proc = subprocess.run(cmd + [os.fspath(s.db)], capture_output=True, text=True)
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
    if proc.returncode != 0:
        raise RuntimeError(f"pydb-crashtest failed ({proc.returncode}): {proc.stderr.strip()}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    index = [x for x in lines if x["phase"] == "index"]
    if s.prefix is not None:
        if len(index) != 1:
            raise RuntimeError("pydb-crashtest --prefix reported no index phase")
        if s.mfns is not None and index[0]["postings"] != len(s.mfns):
            raise RuntimeError(f"index phase: the C program found {index[0]['postings']} "
                               f"postings under {s.prefix!r}, Python {len(s.mfns)}")
    return [x for x in lines if x["phase"] != "index"]


def _sample(impl: str, s: Settings, phase: str, threads: int, rep: int, rows: int,
            secs: float) -> dict:
    return {"impl": impl, "phase": phase, "threads": threads, "rep": rep,
            "rows": rows, "seconds": secs, "rows_per_sec": rows / secs if secs > 0 else 0.0,
            "cache": s.cache, "lock": s.lock}


def impl_name(py_read: str) -> str:
    """The ``impl`` of the Python twin's samples: ``python`` for batch
    reads, ``python-record`` for one ``db[mfn]`` per record,
    ``python-busy`` for those beside a CPU-bound thread."""
    return "python" if py_read == "batch" else f"python-{py_read}"


class BusyThread:
    """A CPU-bound Python thread (a counting loop) for the time of a
    ``with`` block: it wants the GIL all the time."""

    def __enter__(self) -> BusyThread:
        self._stop = False
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        return self

    def _spin(self) -> None:
        n = 0
        while not self._stop:
            n += 1

    def __exit__(self, *exc) -> None:
        self._stop = True
        self._thread.join()


def run_python(s: Settings) -> list[dict]:
    """The Python twin of pydb-crashtest: same phases, same order, same
    record list (``s.mfns``; else the postings of ``s.prefix``,
    :class:`PrefixRows`; else the XRF's active MFNs).  ``s.py_read``
    ``"batch"``: the sequential read iterates ``db.records(deleted=True)``
    (256 records per GIL release) and the threads call
    ``db.read_many`` on 256 MFNs at a time; ``"record"``: one ``db[mfn]``
    per record; ``"busy"``: as ``"record"``, with a :class:`BusyThread`
    running through every pass.  Returns samples in the same shape as
    :func:`run_c`, with impl :func:`impl_name`."""
    if s.py_read not in PY_READS:
        raise ValueError(f"py_read must be one of {PY_READS}, not {s.py_read!r}")
    io = "direct" if s.cache == "direct" else s.io
    impl = impl_name(s.py_read)
    batch = s.py_read == "batch"
    out = []
    with open_db(s.db, io=io, lock=s.lock) as db, \
            (BusyThread() if s.py_read == "busy" else contextlib.nullcontext()):
        if s.mfns is not None:
            mfns = list(s.mfns)
        elif s.prefix is not None:
            mfns = PrefixRows(s.prefix).rows(db)[1]
        else:
            mfns = db.mfns()
        if not mfns:
            raise RuntimeError(f"{s.db} has no records to read")
        max_mfn = db.max_mfn
        for rep in range(s.reps):
            if s.cache == "cold":
                db.drop_cache()
            t0 = time.perf_counter()
            rows = _seq_pass(db, max_mfn, batch, t0 + s.pass_min_time(), t0 + s.max_time)
            out.append(_sample(impl, s, "seq", 1, rep, rows, time.perf_counter() - t0))
        for t in s.threads:
            n = len(mfns)
            # each thread's MFNs in an array of C ints, whose iteration
            # makes the thread's own int objects, as a thread serving its
            # own requests has: on a free-threaded build two threads
            # walking one list of ints write their shared reference
            # counts (a cache line bounced per row), which is the test's
            # cost, not the reads'
            lists = [mfns[n * i // t:] + mfns[:n * i // t] for i in range(t)]
            orders = [array.array("i", o) for o in lists]
            chunks = [[o[k:k + BATCH] for k in range(0, n, BATCH)] for o in lists]
            for rep in range(s.reps):
                if s.cache == "cold":
                    db.drop_cache()
                rows, secs = _threads_pass(db, s, orders, chunks, batch)
                out.append(_sample(impl, s, "threads", t, rep, rows, secs))
    return out


_TWIN = """\
import dataclasses, json, sys
from pydb.crashtest import Settings, run_python
s = Settings(**json.load(sys.stdin))
gil = getattr(sys, "_is_gil_enabled", lambda: True)()
samples = run_python(s)
print(json.dumps({"version": sys.version, "gil": gil, "samples": samples}))
"""


def run_python_with(python: str, s: Settings) -> tuple[list[dict], str, bool]:
    """:func:`run_python` under another interpreter, `python` (a
    free-threaded ``python3.13t``), in a subprocess that imports this pydb
    (the source tree above this file, with the binding built for that
    interpreter: ``python3.13t setup.py build_ext --inplace``).  Returns
    the samples, their impl renamed ``python-ft``, ``python-ft-record``,
    ``python-ft-busy``; the interpreter's ``sys.version``; and whether it
    ran with the GIL (``sys._is_gil_enabled()`` after importing pydb).
    Raises RuntimeError if the subprocess fails."""
    env = dict(os.environ)
    root = os.fspath(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]]
                                                  if env.get("PYTHONPATH") else []))
    settings = {f: getattr(s, f) for f in Settings.__dataclass_fields__}
    proc = subprocess.run([python, "-c", _TWIN], input=json.dumps(settings), env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{python} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    samples = out["samples"]
    for x in samples:
        x["impl"] = x["impl"].replace("python", "python-ft", 1)
    return samples, out["version"], bool(out["gil"])


def _seq_pass(db, max_mfn: int, batch: bool, deadline: float, stop: float) -> int:
    rows = 0
    clock = time.perf_counter
    if batch:
        while True:
            for _ in db.records(deleted=True):
                rows += 1
                if not rows & 255 and clock() >= stop:
                    return rows
            if clock() >= deadline:
                return rows
    read = db.get
    while True:
        for mfn in range(1, max_mfn + 1):
            if read(mfn) is None:
                continue
            rows += 1
            # every 16 reads: beside a busy thread a read may wait a switch
            # interval (5 ms), and 256 of them overran --max-time fivefold
            if not rows & 15 and clock() >= stop:
                return rows
        if clock() >= deadline:
            return rows


def _threads_pass(db, s: Settings, orders, chunks, batch: bool) -> tuple[int, float]:
    t = len(orders)
    counts = [0] * t
    barrier = threading.Barrier(t + 1)
    errors: list[BaseException] = []
    timing: dict[str, float] = {}
    clock = time.perf_counter

    def work(i):
        # the thread's own bound methods (shared ones: see run_python)
        read, read_many = db.read, db.read_many
        rows = 0
        barrier.wait()
        start = timing["t0"]
        deadline, stop = start + s.pass_min_time(), start + s.max_time
        try:
            while True:
                if batch:
                    for c in chunks[i]:
                        read_many(c)
                        rows += len(c)
                        if clock() >= stop:
                            return
                else:
                    for mfn in orders[i]:
                        read(mfn)
                        rows += 1
                        if not rows & 15 and clock() >= stop:   # (as _seq_pass)
                            return
                if clock() >= deadline:
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
    return sum(counts), secs


# ---------------------------------------------------------------- report

def _values(samples, impl, phase, threads, cache=None, lock=None) -> list[float]:
    return [x["rows_per_sec"] for x in samples
            if x["impl"] == impl and x["phase"] == phase and x["threads"] == threads
            and (cache is None or x["cache"] == cache) and (lock is None or x["lock"] == lock)]


def _median(v):
    return statistics.median(v) if v else None


def _passes(rows: float, per_pass: int | None, seconds: float, max_time: float) -> str:
    """" (N passes over M rows)" for a count of rows read in `seconds`,
    with ": cut at --max-time" where those took `max_time` (a part of a
    pass is also the threads' passes ending apart, or the median of an
    even number of runs), or ""."""
    if not per_pass:
        return ""
    n = rows / per_pass
    whole = abs(n - round(n)) < 1e-9
    cut = ": cut at --max-time" if seconds >= 0.95 * max_time else ""
    return (f" ({n:.0f} pass{'' if round(n) == 1 else 'es'} over {per_pass} rows{cut})"
            if whole else f" ({n:.2f} passes over {per_pass} rows{cut})")


def format_block(samples: list[dict], impl: str, s: Settings, header: Sequence[str],
                 seq_rows: int | None = None, list_rows: int | None = None) -> str:
    """The original crashtest's output for one implementation and mode
    (medians over repetitions); `header` are the row source's lines.
    With `seq_rows` (records a sequential pass reads) and `list_rows`
    (MFNs in the threads' list), each line says how many passes its rows
    are: a warm pass repeats until ``min_time``, every pass stops at
    ``max_time``, and T threads read the list T times per pass."""
    lines = [f"== {_label(impl)}, cache {s.cache}, lock {s.lock} (median of {s.reps})",
             *header]
    seq = [x for x in samples if x["impl"] == impl and x["phase"] == "seq"]
    if seq:
        med = statistics.median(x["rows_per_sec"] for x in seq)
        rows = statistics.median(x["rows"] for x in seq)
        lines.append(f"sequential read {rows:.0f} rows in {rows / med:.3f} seconds "
                     f"{med:.0f} rows per sec"
                     f"{_passes(rows, seq_rows, rows / med, s.max_time)}")
    for t in s.threads:
        r = _median(_values(samples, impl, "threads", t))
        if r is not None:
            rows = statistics.median(x["rows"] for x in samples if x["impl"] == impl
                                     and x["phase"] == "threads" and x["threads"] == t)
            passes = _passes(rows, list_rows * t if list_rows else None, rows / r,
                             s.max_time)
            lines.append(f"{_threads(t)}  {r:.0f} rows per sec, {rows:.0f} rows{passes}")
    return "\n".join(lines)


def _verdict(a: list[float], b: list[float], confidence: float = 95.0):
    """ministat verdict of b against a, or None with fewer than 3 samples."""
    if len(a) + len(b) < 3 or not a or not b:
        return None
    return ministat.compare(a, b, confidence)


def comparison(samples: list[dict], threads: Sequence[int], impls: Sequence[str],
               confidence: float = 95.0) -> list[dict]:
    """Rows of the comparison table for the samples of one mode: per phase
    (``seq`` and each thread count): median rows/s per implementation; each
    Python implementation against C (ratio of medians and ministat verdict);
    each implementation's scaling against its 1-thread run (ratio and
    verdict).  Verdicts are :class:`pydb.ministat.Verdict` or None."""
    rows = []
    phases = [("sequential", "seq", 1)] + [(_threads(t), "threads", t) for t in threads]
    for label, phase, t in phases:
        row: dict[str, Any] = {"label": label, "phase": phase, "threads": t, "median": {},
                               "vs_c": {}, "scaling": {}}
        c = _values(samples, "c", phase, t)
        for impl in impls:
            v = _values(samples, impl, phase, t)
            if not v:
                continue
            med = row["median"][impl] = statistics.median(v)
            if impl != "c" and c:
                row["vs_c"][impl] = (med / statistics.median(c), _verdict(c, v, confidence))
            one = _values(samples, impl, "threads", 1)
            if phase == "threads" and t != 1 and one:
                row["scaling"][impl] = (med / statistics.median(one),
                                        _verdict(one, v, confidence))
        rows.append(row)
    return rows


def _short(v) -> str:
    if v is None:
        return "(too few runs)"
    return f"{v.pct:+.1f}% +/- {v.pct_ci:.1f}%" if v.significant else "no difference proven"


def format_table(samples: list[dict], s: Settings, impls: Sequence[str] = ("c", "python"),
                 confidence: float = 95.0) -> str:
    """The comparison table of one mode: median rows/s per implementation,
    each Python implementation against C (ratio of medians; ministat:
    difference of the means in percent +/- its half-width at `confidence`,
    or "no difference proven"), then each implementation's thread scaling
    against its 1-thread run (ratio; verdict).  Each table ends with a
    line that explains its columns."""
    impls = [i for i in impls if any(x["impl"] == i for x in samples)]
    rows = comparison(samples, s.threads, impls, confidence)
    py = [i for i in impls if i != "c"]
    name = {i: _label(i) for i in impls}
    w_med = {i: max(15, len(name[i]) + 8) for i in impls}
    w_vs = {i: max(10, len(name[i]) + 5) for i in py}
    w_sc = {i: max(8, len(name[i]) + 1) for i in impls}
    out = [f"-- C vs Python, cache {s.cache}, lock {s.lock} "
           f"(medians of {s.reps}; ministat at {confidence:g}% confidence)"]
    head = f"{'':>12}" + "".join(f" {name[i] + ' rows/s':>{w_med[i]}}" for i in impls)
    head += "".join(f" {name[i] + ' / C':>{w_vs[i]}} {'(ministat)':>22}" for i in py)
    out.append(head)
    for r in rows:
        if not r["median"]:
            continue
        line = f"{r['label']:>12}" + "".join(
            f" {r['median'][i]:>{w_med[i]},.0f}" if i in r["median"] else f" {'-':>{w_med[i]}}"
            for i in impls)
        for i in py:
            if i in r["vs_c"]:
                ratio, v = r["vs_c"][i]
                line += f" {ratio:>{w_vs[i]}.3f} {_short(v):>22}"
        out.append(line)
    out.append(f"   (X / C: X's median over C's; ministat: X's mean against C's, "
               f"{s.reps} runs each)")
    out.append("")
    out.append(f"-- thread scaling: rows/s against the same implementation with 1 thread, "
               f"cache {s.cache}, lock {s.lock}")
    out.append(f"{'':>12}" + "".join(f" {name[i]:>{w_sc[i]}} {'(ministat)':>22}"
                                      for i in impls))
    for r in rows:
        if not r["scaling"]:
            continue
        line = f"{r['label']:>12}"
        for i in impls:
            if i in r["scaling"]:
                ratio, v = r["scaling"][i]
                line += f" {ratio:>{w_sc[i]}.2f}x {_short(v):>21}"
            else:
                line += f" {'-':>{w_sc[i]}} {'':>22}"
        out.append(line)
    out.append("   (1.00x: as fast as 1 thread; 2.00x: twice the rows per second)")
    return "\n".join(out)


def plot(samples: list[dict], path, title: str = "") -> None:
    """Draw rows/s against threads for every implementation in each mode
    (one panel per cache x lock; medians with min-max bars; log scale)
    into the PNG `path`.  Raises ImportError without matplotlib
    (``pip install 'pydb[plot]'``)."""
    # matplotlib is optional (pydb[plot]): imported only when a chart is drawn
    import matplotlib  # type: ignore[import-not-found, unused-ignore]
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    modes = sorted({(x["cache"], x["lock"]) for x in samples},
                   key=lambda m: (CACHES.index(m[0]), LOCKS.index(m[1])))
    impls = sorted({x["impl"] for x in samples}, key=lambda i: (i != "c", i))
    ncol = min(2, len(modes))
    nrow = (len(modes) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(6 * ncol, 4 * nrow), squeeze=False)
    for ax, (cache, lock) in zip(axes.flat, modes, strict=False):  # spare panels
        for impl in impls:
            ts = sorted({x["threads"] for x in samples if x["phase"] == "threads"
                         and x["impl"] == impl and x["cache"] == cache and x["lock"] == lock})
            if not ts:
                continue
            vals = [_values(samples, impl, "threads", t, cache, lock) for t in ts]
            med = [statistics.median(v) for v in vals]
            err = [[m - min(v) for m, v in zip(med, vals, strict=True)],
                   [max(v) - m for m, v in zip(med, vals, strict=True)]]
            ax.errorbar(ts, med, yerr=err, marker="o", capsize=3, label=_label(impl))
        ax.set_title(f"{cache} cache, lock {lock}")
        ax.set_xlabel("threads (log scale)")
        ax.set_ylabel("rows read per second (log scale)")
        ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        all_ts = sorted({x["threads"] for x in samples if x["phase"] == "threads"})
        ax.set_xticks(all_ts)
        ax.set_xticklabels([str(t) for t in all_ts])
        ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    for ax in list(axes.flat)[len(modes):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(f"{title}: median of the repetitions, bars from min to max")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- command line

def _csv(value: str, allowed, what, ap):
    items = [v for v in value.split(",") if v]
    if not items:
        ap.error(f"no {what} given ({', '.join(allowed)})")
    for v in items:
        if v not in allowed:
            ap.error(f"unknown {what} {v!r} ({', '.join(allowed)})")
    return items


#: Exit statuses of ``pydb crashtest`` (its --help shows them).
EXIT_STATUSES = (
    (0, "done, whether or not the design card's targets were met (the report says)"),
    (1, "failed, the reason on stderr (a pydb or OS error, the C program failing, "
        "nothing to read)"),
    (2, "bad usage (unknown option, bad value)"),
    (130, "interrupted by Ctrl-C (SIGINT), after one line saying so"),
)


def main(argv=None) -> int:
    """``python -m pydb crashtest [DB] [options]``: run both programs in
    each requested mode and print the original-style blocks, the
    comparison tables with ministat verdicts, and optionally write every
    sample (``--json``) and a chart (``--plot``).  Returns the exit
    status."""
    ap = tool_parser("pydb crashtest", __doc__.split("\n\n")[0], EXIT_STATUSES)
    ap.add_argument("db", nargs="?", help="database (default: the built-in synthetic unesb)")
    ap.add_argument("--threads", default="8,2,1,4", help="thread counts (default 8,2,1,4)")
    ap.add_argument("--cache", default="warm,cold,direct",
                    help="cache modes, comma-separated: warm, cold, direct (default all)")
    ap.add_argument("--lock", default=None,
                    help="lock modes, comma-separated: none, mutex (default both; "
                         "--quick: none)")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions of every cell, the samples of the verdicts (default 5)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="warm passes repeat the list until this many seconds (default "
                         "0.2; --quick: 0.05)")
    ap.add_argument("--max-time", type=float, default=None,
                    help="a pass is cut off after this many seconds (default 1.0; "
                         "--quick: 0.25)")
    ap.add_argument("--io", default="mmap", choices=["mmap", "pread"],
                    help="I/O for warm and cold passes (default mmap)")
    ap.add_argument("--py-read", default="batch,record,busy",
                    help="Python twin's reads, comma-separated: batch (read_many, 256 "
                         "records per call), record (db[mfn]), busy (db[mfn] with a "
                         "CPU-bound Python thread beside the readers) (default all three)")
    ap.add_argument("--prefix", default="Z",
                    help="index phase: read the records named by the postings of the keys "
                         "with this prefix, where the database has an index (default Z)")
    ap.add_argument("--python-ft", metavar="PYTHON",
                    help="a third implementation: the Python twin's reads (--py-read) run "
                         "again under this interpreter, a free-threaded python3.13t "
                         "(docs/free-threaded.md; build the binding for it first)")
    ap.add_argument("--quick", action="store_true",
                    help="short passes, lock none only, 3 repetitions, each unless its "
                         "own option is given (under a minute)")
    ap.add_argument("--json", metavar="FILE", help="write every sample to FILE as JSON")
    ap.add_argument("--plot", metavar="FILE.png", default=None,
                    help="chart rows/s against threads, one panel per mode (needs "
                         "matplotlib: pip install 'pydb[plot]'; default: crashtest.png in "
                         "the current folder when matplotlib is installed)")
    ap.add_argument("--no-plot", action="store_true", help="draw no chart")
    args = ap.parse_args(argv)

    try:
        threads = [int(t) for t in args.threads.split(",")]
        if not threads or len(threads) > 16 or any(not 1 <= t <= 1024 for t in threads):
            raise ValueError
    except ValueError:
        ap.error("--threads takes up to 16 thread counts of 1..1024, separated by commas")
    caches = _csv(args.cache, CACHES, "cache mode", ap)
    py_reads = _csv(args.py_read, PY_READS, "Python read", ap)
    # --quick's settings stand for the options not given
    quick = args.quick
    locks = _csv(args.lock if args.lock is not None else "none" if quick else "none,mutex",
                 LOCKS, "lock mode", ap)
    reps = args.reps if args.reps is not None else 3 if quick else 5
    min_time = args.min_time if args.min_time is not None else 0.05 if quick else 0.2
    max_time = args.max_time if args.max_time is not None else 0.25 if quick else 1.0
    if reps < 1 or max_time <= 0 or min_time < 0:
        ap.error("--reps must be >= 1, --max-time > 0, --min-time >= 0")
    if min_time > max_time:
        ap.error(f"--min-time ({min_time:g} s) must not exceed --max-time ({max_time:g} s): "
                 "a pass is cut at --max-time")
    if args.python_ft and not (os.path.isfile(args.python_ft)
                               and os.access(args.python_ft, os.X_OK)):
        ap.error(f"--python-ft {args.python_ft}: no such executable")
    if args.no_plot:
        args.plot = None
    elif args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error("--plot needs matplotlib, which is not installed: "
                     "pip install 'pydb[plot]' (or pip install matplotlib)")
    elif importlib.util.find_spec("matplotlib") is not None:
        args.plot = "crashtest.png"    # drawn by default where it can be

    db_path = args.db
    if db_path is None:
        if not _default_ready():
            print("building the default database (synthetic unesb, 58,880 records) "
                  "on first use...", file=sys.stderr)
        db_path = os.fspath(default_database())
    try:
        with open_db(db_path) as db:
            index = open_row_index(db)
            indexed = index is not None
            source: RowSource = PrefixRows(args.prefix, index) if indexed else XrfRows()
            header, mfns = source.rows(db)
            n_records, max_mfn = len(db), db.max_mfn
            seq_rows = len(db.mfns(deleted=True))
            if args.db is None:     # a cache a user or a crash cut short
                rep = db.check(max_problems=1)
                if not rep.ok:
                    raise Error(str(rep.problems[0]))
    except Error as e:
        if args.db is not None:
            raise
        folder = os.path.dirname(db_path)
        raise Error(f"the cached default database is damaged ({e}); remove {folder} and "
                    "run again: it is built anew") from e
    if not mfns:
        what = f"no postings under the prefix {args.prefix!r}" if indexed else "no records"
        print(f"crashtest: {what} to read in {db_path}", file=sys.stderr)
        return 1
    how = f"index, prefix {args.prefix!r}" if indexed else "XRF (no index: every active record)"
    print(f"crashtest on {db_path}: {n_records} active records, max MFN {max_mfn}; "
          f"rows from the {how}")
    print(textwrap.fill(
        f"A pass reads every row once: {seq_rows} records for the sequential read, the "
        f"list of {len(mfns)} MFNs T times for T threads.  Warm passes repeat until "
        f"{min_time:g} s have passed (--min-time), so their rows are several passes; "
        f"cold and direct passes read once; every pass stops at {max_time:g} s "
        f"(--max-time), so a slow one reads part of a pass.  Figures are medians of "
        f"{reps} repetitions (--reps); verdicts are ministat's at 95% confidence.", 79))
    impls = ["c"] + [impl_name(r) for r in py_reads]
    if args.python_ft:
        impls += [impl_name(r).replace("python", "python-ft", 1) for r in py_reads]
    everything: list[dict] = []
    for cache in caches:
        for lock in locks:
            s = Settings(db=db_path, threads=threads, cache=cache, lock=lock, reps=reps,
                         min_time=min_time, max_time=max_time, io=args.io,
                         mfns=mfns if indexed else None,
                         prefix=args.prefix if indexed else None)
            print(f"(running cache {cache}, lock {lock}: C, then "
                  f"{', '.join(map(_label, impls[1:]))}; {reps} repetitions...)",
                  file=sys.stderr)
            try:
                samples = run_c(s)
                for r in py_reads:
                    s.py_read = r
                    samples += run_python(s)
                for r in py_reads if args.python_ft else ():
                    s.py_read = r
                    ft, version, gil = run_python_with(args.python_ft, s)
                    samples += ft
                    if r == py_reads[0]:
                        print(f"(Python-FT: {args.python_ft}, {version.split()[0]}, GIL "
                              f"{'enabled' if gil else 'disabled'})", file=sys.stderr)
            except (RuntimeError, OSError) as e:
                if cache == "direct" and ("O_DIRECT" in str(e) or getattr(e, "errno", 0) == 22):
                    print(f"\n(cache direct skipped: {e})")
                    break
                raise
            everything += samples
            for impl in impls:
                print()
                print(format_block(samples, impl, s, header, seq_rows, len(mfns)))
            print()
            print(format_table(samples, s, impls))
            sys.stdout.flush()
    if args.db is None and args.io == "mmap" and args.prefix == "Z":
        _print_targets(everything, impls)
    elif everything:
        print("\n-- docs/design.md §9 targets: not judged (they are for the default "
              "database, --io mmap and --prefix Z)")
    if everything:
        print()
        print(summary(everything))
    if args.json:
        settings = {"threads": threads, "caches": caches, "locks": locks, "reps": reps,
                    "min_time": min_time, "max_time": max_time, "io": args.io,
                    "py_read": py_reads, "row_source": how, "python_ft": args.python_ft}
        machine = {"cpus": os.cpu_count(), "python": sys.version,
                   "platform": platform.platform()}
        Path(args.json).write_text(json.dumps(
            {"db": db_path, "settings": settings, "machine": machine, "header": header,
             "samples": everything}, indent=1))
    if args.plot:
        plot(everything, args.plot, title=f"crashtest: {os.path.basename(db_path)}")
        print(f"\nplot written to {args.plot}")
    return 0


@dataclass(frozen=True)
class TargetVerdict:
    """How a measurement stands against a target of docs/design.md §9.

    ``word``: ``"met"`` (the whole confidence interval of the figure lies
    at or above the target), ``"missed"`` (all of it below), or
    ``"undecided"`` (the interval holds the target, or too few runs to
    have one); ``value``: the figure shown (a median, or a ratio of
    medians); ``target``; ``low``, ``high``: the confidence interval of
    the mean figure (None with too few runs); ``runs``: repetitions behind
    each side; ``runs_needed``: for an undecided verdict, about how many
    repetitions would make the interval narrow enough to decide (the
    half-width shrinks as 1/sqrt(runs); None when the mean is on the
    target); ``ministat``: ministat's verdict in words."""
    word: str
    value: float
    target: float
    low: float | None
    high: float | None
    runs: int
    runs_needed: int | None
    ministat: str


def _decide(value: float, target: float, mean: float, half: float | None, runs: int,
            text: str) -> TargetVerdict:
    if half is None:
        return TargetVerdict("undecided", value, target, None, None, runs, 3, text)
    low, high = mean - half, mean + half
    word = "met" if low >= target else "missed" if high < target else "undecided"
    needed = None
    if word == "undecided" and mean != target:
        needed = max(runs + 1, math.ceil(runs * (half / abs(mean - target)) ** 2))
    return TargetVerdict(word, value, target, low, high, runs, needed, text)


def target_verdict(values: Sequence[float], target: float,
                   reference: Sequence[float] | None = None,
                   confidence: float = 95.0) -> TargetVerdict:
    """Judge measurements against a target.

    Without `reference`, the target is on the figure itself (rows/s):
    the interval is the mean of `values` +/- Student's t (n-1 degrees of
    freedom; from FreeBSD ministat's table at its confidence levels, as
    :func:`pydb.ministat.compare` takes it) times the standard error.
    With `reference`, the target is on the ratio `values` / `reference`
    (e.g. 8 threads against 1): the interval is 1 + ministat's difference
    in percent +/- its half-width (:func:`pydb.ministat.compare`, Student's
    t with pooled variance, relative to the reference's mean), and the
    figure shown is the ratio of the medians.

    Args:
        values: samples (at least one).
        target: the least acceptable figure or ratio.
        reference: samples of the reference, or None.
        confidence: percent, as for :func:`pydb.ministat.compare`.

    Returns:
        A :class:`TargetVerdict`; undecided with too few samples (fewer
        than 2 without `reference`, fewer than 3 in all with it).

    Raises:
        ValueError: `values` or `reference` is empty, or a bad confidence.
    """
    if not values or reference is not None and not reference:
        raise ValueError("target_verdict needs samples on both sides")
    exact = float(confidence) not in ministat.CONFIDENCES    # else FreeBSD's t table
    if reference is None:
        st = ministat.summarize(values)
        if st.n < 2:
            return _decide(st.median, target, st.avg, None, st.n,
                           "one run: no confidence interval")
        t = (ministat.student_t(confidence, st.n - 1) if exact
             else ministat.student_t_table(confidence, st.n - 1))
        half = t * st.stddev / math.sqrt(st.n)
        return _decide(st.median, target, st.avg, half, st.n,
                       f"mean {st.avg:,.0f} +/- {half:,.0f} at {confidence:g}%")
    ratio = statistics.median(values) / statistics.median(reference)
    runs = min(len(values), len(reference))
    if len(values) + len(reference) < 3:
        return _decide(ratio, target, ratio, None, runs, "too few runs for ministat")
    v = ministat.compare(reference, values, confidence, exact=exact)
    text = (f"{v.pct:+.1f}% +/- {v.pct_ci:.1f}%" if v.significant else
            f"no difference proven ({v.pct:+.1f}% +/- {v.pct_ci:.1f}%)")
    return _decide(ratio, target, 1 + v.pct / 100, v.pct_ci / 100, runs, text)


def format_target(what: str, tv: TargetVerdict, unit: str = "x") -> str:
    """One target line: the verdict word, what was measured, the figure,
    the target, ministat's verdict and the interval (and for an undecided
    verdict, how many repetitions would likely decide it)."""
    if unit == "x":
        fig, goal = f"{tv.value:.2f}x", f">= {tv.target:g}x"
        span = ("" if tv.low is None or tv.high is None else
                f", ratio of means {max(0.0, tv.low):.2f}x..{tv.high:.2f}x")
    else:
        fig, goal = f"{tv.value:,.0f} {unit}", f">= {tv.target:,.0f}"
        span = ""
    line = (f"{tv.word.upper():<9} {what}: {fig} (target {goal}); ministat: {tv.ministat}"
            f"{span}; {tv.runs} run{'' if tv.runs == 1 else 's'}")
    if tv.word == "undecided":
        line += ("; more runs would decide it" + (f" (about --reps {tv.runs_needed})"
                                                  if tv.runs_needed else ""))
    return line


def _print_targets(samples: list[dict], impls: Sequence[str]) -> None:
    # docs/design.md §9 rows that this run measures.
    lines = []

    def v(impl, phase, t, cache):
        return _values(samples, impl, phase, t, cache, "none")

    c_seq = v("c", "seq", 1, "warm")
    if c_seq:
        lines.append(format_target("C sequential read, warm",
                                   target_verdict(c_seq, 10_000_000), "rows/s"))
    # the busy mode's own target is its share against per-record reads
    # (below): beside a CPU-bound thread the others cannot hold
    twins = [impl for impl in impls[1:] if impl != "python-busy"]
    for impl in twins:
        seq = v(impl, "seq", 1, "warm")
        if seq:
            lines.append(format_target(f"{_label(impl)} sequential read, warm",
                                       target_verdict(seq, 1_000_000), "rows/s"))
        many, one = v(impl, "threads", 8, "warm"), v(impl, "threads", 1, "warm")
        if many and one:
            lines.append(format_target(f"{_label(impl)}, 8 threads vs 1 thread, warm",
                                       target_verdict(many, 1.0, one)))
    busy, rec = v("python-busy", "threads", 1, "warm"), v("python-record", "threads", 1, "warm")
    if busy and rec:
        lines.append(format_target("Python busy vs Python per-record, 1 thread, warm "
                                   "(0.5 is the GIL's share)", target_verdict(busy, 0.45, rec)))
    many, one = v("c", "threads", 8, "direct"), v("c", "threads", 1, "direct")
    if many and one:
        lines.append(format_target("C, 8 threads vs 1 thread, O_DIRECT",
                                   target_verdict(many, 3.5, one)))
    for impl in twins:
        py, c = v(impl, "threads", 8, "direct"), v("c", "threads", 8, "direct")
        if py and c:
            lines.append(format_target(f"{_label(impl)} vs C, 8 threads, O_DIRECT",
                                       target_verdict(py, 0.9, c)))
    if lines:
        words = [line.split()[0].lower() for line in lines]
        print(f"\n-- docs/design.md §9 targets (lock none, 95% confidence): "
              f"{words.count('met')} met, {words.count('missed')} missed, "
              f"{words.count('undecided')} undecided")
        print("\n".join(lines))


def summary(samples: list[dict], confidence: float = 95.0) -> str:
    """One paragraph on what the run shows, from its samples (lock
    ``none`` when it was measured, else the first lock): per cache mode,
    whether the most threads measured read faster than 1 thread (ministat
    at `confidence`), for C and each Python implementation, and Python's
    speed as a fraction of C's with 1 thread and with the most threads.
    Returns "" without samples."""
    if not samples:
        return ""
    locks = [lk for lk in LOCKS if any(x["lock"] == lk for x in samples)]
    lock = "none" if "none" in locks else locks[0]
    order = list(LABELS)
    impls = sorted({x["impl"] for x in samples},
                   key=lambda i: (order.index(i) if i in order else len(order), i))
    threads = sorted({x["threads"] for x in samples if x["phase"] == "threads"})
    where = {"warm": "Cached (warm)", "cold": "After dropping the page cache (cold)",
             "direct": "From the disk (O_DIRECT)"}
    top = max(threads) if threads else 1
    out = []
    undecided = False
    for cache in [c for c in CACHES if any(x["cache"] == c for x in samples)]:
        items = []
        for impl in impls:
            one = _values(samples, impl, "threads", 1, cache, lock)
            many = _values(samples, impl, "threads", top, cache, lock)
            if not one or not many or top == 1:
                continue
            ver = _verdict(one, many, confidence)
            if ver is None or not ver.significant:
                word = "no gain proven"
                undecided = True
            else:
                word = "pays off" if ver.diff > 0 else "slower"
            items.append(f"{_label(impl)} {statistics.median(many) / statistics.median(one):.2f}x "
                         f"({word})")
        c1 = _values(samples, "c", "threads", 1, cache, lock)
        cn = _values(samples, "c", "threads", top, cache, lock)
        py = [i for i in impls if i != "c"]
        vs = []
        for impl in py[:1]:
            p1 = _values(samples, impl, "threads", 1, cache, lock)
            pn = _values(samples, impl, "threads", top, cache, lock)
            if c1 and p1:
                vs.append(f"{_label(impl)} reads at {_median(p1) / _median(c1):.2f}x of C's "
                          "speed with 1 thread")
            if cn and pn and top != 1:
                vs.append(f"{_median(pn) / _median(cn):.2f}x with {top}")
        text = f"{where.get(cache, cache)}: "
        text += (f"{top} threads against 1 give " + ", ".join(items)) if items else \
            "no thread scaling measured"
        if vs:
            text += "; " + " and ".join(vs)
        if cache == "cold" and items:
            # the cache is dropped once a pass, and T threads read the same list
            text += (" (no measure of disk overlap: the page cache is dropped once a "
                     "pass and the threads read the same records, so all but the first "
                     "read of each find it cached; the O_DIRECT figures are)")
        out.append(text)
    reps = max((x["rep"] for x in samples), default=0) + 1
    para = "Does multithreading pay off? " + ". ".join(out) + "."
    if "python-busy" in impls:
        para += (" Python busy's gain is the readers' share of the GIL growing against "
                 "the CPU-bound thread's, not more work done.")
    if undecided:
        para += (f" \"No gain proven\" means the difference is within the noise of {reps} "
                 "repetitions per cell; more repetitions (--reps) narrow the interval.")
    return (f"-- summary (lock {lock}, ministat at {confidence:g}% confidence)\n"
            + textwrap.fill(para, 79))


def _default_ready() -> bool:
    return (default_cache_dir() / f"unesb-v{GENERATOR_VERSION}-x1" / "complete").exists()


def c_main() -> None:
    """Console entry point ``pydb-crashtest``: runs the C program with the
    same arguments."""
    binary = os.fspath(crashtest_binary())
    os.execv(binary, [binary] + sys.argv[1:])
