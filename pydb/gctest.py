"""gctest: Firebird's garbage-collector experiment on pydb.

After the Firebird developer's test of a new background garbage-collector
thread (docs/experiments.md §3, docs/gctest.md): N clients (default 16)
run the same update-heavy script against one database, first one after
another (*serial*), then all at once (*parallel*), once per collection
policy (``none``, ``background``, ``cooperative``, ``combined``), each
series on a fresh copy of the database.  After each series the test waits
for the collector to become quiet, validates the database (``check``) and
reads its statistics (``stat``), and prints the original's table: per
policy the serial runs, their average, maximum and total run time and the
garbage left, and the same for the parallel runs; the run time of every
serial run (so that a series that grows slower and slower is visible, as
the original's 2.4 s to 175 s was); ministat verdicts at 95% confidence
(:mod:`pydb.ministat`) between policies and between serial and parallel;
and whether Firebird's three conclusions hold, computed from the numbers.

The client script (:class:`Client`): each client owns a few *hot* records
and, per iteration, (1) rewrites one of them with a new field of words
(:data:`WORK_TAG`, indexed by the line :data:`WORK_FST` added to the copy's
FST): a word unique to the client, run and iteration, the client's own
word, and a word shared by every hot record (:data:`HOT_WORD`); commits
without fsync; (2) reads the record back; (3) reads its hot records through
a snapshot held across :data:`SNAPSHOT_SPAN` updates (the older versions
through the back-pointer chain); (4) searches the word just written, the
word the record carried before (which must be gone), the frequent
:data:`HOT_WORD` and every unique word by truncation (:data:`UNIQUE_PREFIX`);
every answer is checked and a wrong one fails the run
(:class:`WorkloadError`).  Every update leaves one back version and one
segment of the native index (one per commit) whose tombstone makes the
record's older postings dead: without collection each later search visits
more segments and decodes more dead postings (the truncated search
enumerates every segment's dead terms too), so later runs are slower.

Commits are made with ``sync=False``: the experiment is about garbage, not
about the disk; an fsync per commit would make every run as slow as the
disk and hide the cost of garbage (and a crash is not part of the test).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import multiprocessing
import os
import platform
import queue
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import ministat
from ._cli import tool_parser
from .database import Database
from .database import open as open_db
from .errors import Error
from .native import _stored_or_none, build_index
from .paths import find_sidecar
from .unesb import GENERATOR_VERSION, default_cache_dir, default_database

__all__ = ["POLICIES", "SERIES", "WORK_TAG", "WORK_FST", "HOT_WORD", "UNIQUE_PREFIX",
           "Settings", "Client", "WorkloadError", "prepare_template", "fresh_copy",
           "hot_records", "open_for", "settle_time", "wait_quiescent", "run_series",
           "run_gctest", "comparisons", "conclusions", "growth", "format_report", "plot",
           "parse_args", "main"]

POLICIES = ("none", "background", "cooperative", "combined")
SERIES = ("serial", "parallel")
#: The field the script rewrites, and the FST line that indexes it word
#: by word (technique 4) in the copy's native index.
WORK_TAG = 932
WORK_FST = b"932 4 mhu,v932"
#: Every word the script writes starts with this (checked absent from the
#: database before the test), so that the searches' answers are exact.
WORD_PREFIX = "GCX"
HOT_WORD = "GCXHOT"
#: The truncated search of every unique word: a prefix enumerates the
#: terms of every segment, the dead ones too.
UNIQUE_PREFIX = "GCXU$"
#: Hot records per client, and the iterations a snapshot is held for.
HOT_PER_CLIENT = 4
SNAPSHOT_SPAN = 4
#: Iterations per client run: default (a few minutes for the whole test
#: on 2 cores) and --quick (under a minute).
ITERATIONS = 120
QUICK_ITERATIONS = 12
#: Quiescence: poll stat() until its garbage figures stay unchanged for
#: SETTLE seconds (or are all 0), at most QUIESCE_TIMEOUT seconds.
QUIESCE_TIMEOUT = 10.0
SETTLE = 1.0
#: ... under a collector thread: its merge of the whole index (a 6.6 MB
#: base and hundreds of small segments, in 50 ms slices at nice +10)
#: publishes nothing for seconds.
LONG_SETTLE = 5.0
POLL = 0.1
#: "differs little" / "about the same" in the conclusions: within 25%.
LITTLE = 0.25
CONFIDENCE = 95.0


class WorkloadError(AssertionError):
    """A client read or found something else than it wrote: the run (and
    the test) fails."""


# ---------------------------------------------------------------- settings

@dataclass
class Settings:
    """One gctest configuration."""
    db: str                                   # the source database (copied, never written)
    clients: int = 16
    policies: list[str] = field(default_factory=lambda: list(POLICIES))
    runs: int = 1                             # rounds per series: each client runs N times
    iterations: int = ITERATIONS              # iterations of one client run
    processes: bool = False                   # clients as processes (own handles)
    hot: int = HOT_PER_CLIENT
    snapshot_span: int = SNAPSHOT_SPAN
    quiesce_timeout: float = QUIESCE_TIMEOUT
    settle: float = SETTLE
    long_settle: float = LONG_SETTLE


# ---------------------------------------------------------------- words

def letters(n: int, width: int) -> str:
    """`n` >= 0 written with the letters A..Z (base 26, most significant
    first) in exactly `width` letters: digits are not word characters
    of an ISIS index (docs/isis-formats.md §5.3)."""
    out = []
    for _ in range(width):
        n, r = divmod(n, 26)
        out.append(chr(65 + r))
    if n:
        raise ValueError(f"number too large for {width} letters")
    return "".join(reversed(out))


def unique_word(client: int, rnd: int, iteration: int) -> str:
    """The word of one update: unique to client, round and iteration."""
    return f"{WORD_PREFIX}U{letters(client, 3)}{letters(rnd, 3)}{letters(iteration, 4)}"


def client_word(client: int) -> str:
    """The word every update of one client carries."""
    return f"{WORD_PREFIX}C{letters(client, 3)}"


# ---------------------------------------------------------------- the database

def _source_files(source: str) -> tuple[str, str, int]:
    """The master file and XRF of `source` and its active records, after a
    check (read-only: the source is never written).  Raises ValueError
    naming the first error where the check finds one: the series run on
    copies in a temporary folder, whose files an error found later would
    name."""
    with open_db(source, readonly=True) as db:
        info = db.info()
        report = db.check()
        if not report.ok:
            # the first error, unless the kept problems are all warnings
            first = next((p for p in report.problems if p.severity == "error"),
                         f"{report.errors} errors")
            raise ValueError(f"{source} is damaged, and gctest needs a sound database: "
                             f"{first} (pydb check {source} lists every problem)")
        return info["mst_path"], info["xrf_path"], len(db)


def prepare_template(source, folder) -> Path:
    """Copy the database `source` (.mst, .xrf, .fst, .stw and the ISIS
    character tables beside it) into `folder` as ``gc`` and build its native
    index from the database's FST (its .fst, else the FST of its native
    index, else none) plus :data:`WORK_FST`, with the index's stored key
    settings where it has a readable index.  The source is never written.
    Returns the base path of the copy.

    Raises ValueError when the database is damaged (its check finds an
    error), already holds words of the script (:data:`WORD_PREFIX`) or
    has too few records (checked by :func:`hot_records`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / "gc"
    mst, xrf, _ = _source_files(os.fspath(source))
    shutil.copyfile(mst, base.with_suffix(".mst"))
    shutil.copyfile(xrf, base.with_suffix(".xrf"))
    stored = _stored_or_none(source)
    fst_path = find_sidecar(source, "fst")
    if fst_path is not None:
        fst = Path(fst_path).read_bytes()
    elif stored is not None:
        fst = stored["fst"]
    else:
        fst = b""
    stw = find_sidecar(source, "stw")
    if stw is not None:
        shutil.copyfile(stw, base.with_suffix(".stw"))
    src_dir = os.path.dirname(os.path.abspath(mst))
    for cand in glob.glob(os.path.join(glob.escape(src_dir), "*")):
        if os.path.basename(cand).upper() in ("ISISUC.TAB", "ISISAC.TAB"):
            shutil.copyfile(cand, folder / os.path.basename(cand))
    lines = [ln for ln in fst.replace(b"\r\n", b"\n").split(b"\n") if ln.strip()]
    fst_all = b"\n".join(lines + [WORK_FST]) + b"\n"
    base.with_suffix(".fst").write_bytes(fst_all)
    kw: dict[str, Any] = {}
    if stored is not None:
        kw = {"utf8": stored["utf8"], "max_key": stored["max_key"]}
        if stored["stw"] and stw is None:
            kw["stw"] = stored["stw"]
    build_index(base, fst=fst_all, progress=False, **kw)
    with open_db(base) as db:
        if len(db.search(WORD_PREFIX + "$")):
            raise ValueError(f"{source} already holds words starting with {WORD_PREFIX}: "
                             "the script's searches would not be exact")
    return base


def fresh_copy(template: Path, folder) -> Path:
    """A copy of the prepared database `template` (.mst, .xrf, .fst, .stw,
    tables and the .pdx index directory; no commit header, no log) in the
    new directory `folder`; returns its base path."""
    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    src = Path(template).parent
    for p in src.iterdir():
        if p.name.endswith((".shm", ".wal")) or p.name.endswith(".lock"):
            continue
        if p.is_dir():
            shutil.copytree(p, folder / p.name)
        else:
            shutil.copyfile(p, folder / p.name)
    return folder / Path(template).name


def hot_records(db: Database, clients: int, per_client: int) -> list[list[int]]:
    """The hot records of each client: clients x per_client active MFNs
    spread evenly over the database, client c taking every clients-th.
    Raises ValueError when the database has too few active records."""
    mfns = db.mfns()
    need = clients * per_client
    if len(mfns) < need:
        raise ValueError(f"{clients} clients x {per_client} hot records need {need} active "
                         f"records; the database has {len(mfns)}")
    step = len(mfns) / need
    hot = [mfns[int(i * step)] for i in range(need)]
    return [hot[c::clients] for c in range(clients)]


def open_for(path, policy: str) -> Database:
    """The database at `path` opened for writing without fsync (see the
    module docstring) under the collection `policy`."""
    db = open_db(path, readonly=False, sync=False, lock_timeout=120.0, gc=policy,
                 encoding="utf-8")   # its copy: no warning about the source's values
    if db.gc_policy != policy:
        db.close()
        raise RuntimeError(f"opened with gc={policy!r}, the handle says {db.gc_policy!r}")
    return db


# ---------------------------------------------------------------- the script

def _fields(rec) -> list[tuple[int, str]]:
    return [(f.tag, f.value) for f in rec.fields]


class Client:
    """One client's script and its state across runs (the content it wrote
    to each of its hot records, the unique word each carries, which ones it
    touched).  The same for threads and processes; only this client writes
    its hot records, so every expected answer is exact."""

    def __init__(self, index: int, hot: Sequence[int], all_hot: Sequence[int],
                 snapshot_span: int = SNAPSHOT_SPAN):
        self.index = index
        self.hot = list(hot)
        self.all_hot = frozenset(all_hot)
        self.snapshot_span = max(1, snapshot_span)
        self.content: dict[int, list[tuple[int, str]]] = {}
        self.word: dict[int, str] = {}
        self.touched: set[int] = set()
        self.cword = client_word(index)

    def load(self, db) -> None:
        """Read the current content of the hot records (before the first run)."""
        self.content = {m: _fields(db[m]) for m in self.hot}

    def _fail(self, what: str, rnd: int, i: int) -> WorkloadError:
        return WorkloadError(f"client {self.index + 1}, run {rnd + 1}, iteration {i + 1}: "
                             f"{what}")

    def run(self, db, rnd: int, iterations: int,
            others_touched: Sequence[int] | None = None) -> dict:
        """Run the script once (`iterations` iterations) on `db` as round
        `rnd`.  `others_touched`: the hot records other clients have
        updated in this series when they all ran before this one (serial):
        the frequent word's hit count is then exact; None (parallel): it is
        checked between bounds.  Returns {"client", "round", "start",
        "end", "seconds", "updates", "touched"} (start/end: time.monotonic,
        comparable between processes).  Raises WorkloadError on a wrong
        answer."""
        if not self.content:
            self.load(db)
        others = set(others_touched) if others_touched is not None else None
        snap: Any = None
        snap_content: dict[int, list[tuple[int, str]]] = {}
        k = len(self.hot)
        start = time.monotonic()
        t0 = time.perf_counter()
        try:
            for i in range(iterations):
                if i % self.snapshot_span == 0:
                    if snap is not None:
                        snap.close()
                    snap = db.snapshot()
                    snap_content = {m: list(v) for m, v in self.content.items()}
                mfn = self.hot[(rnd * iterations + i) % k]
                word = unique_word(self.index, rnd, i)
                old_word = self.word.get(mfn)
                fields = [(t, v) for t, v in self.content[mfn] if t != WORK_TAG]
                fields.append((WORK_TAG, f"{word} {self.cword} {HOT_WORD}"))
                db.update(mfn, fields)
                self.content[mfn] = fields
                self.word[mfn] = word
                self.touched.add(mfn)
                got = _fields(db[mfn])
                if got != fields:
                    raise self._fail(f"MFN {mfn} read back {got!r}, wrote {fields!r}", rnd, i)
                for m in self.hot:
                    got = _fields(snap[m])
                    if got != snap_content[m]:
                        raise self._fail(f"MFN {m} through a snapshot: {got!r}, expected "
                                         f"{snap_content[m]!r}", rnd, i)
                found = list(db.search(word))
                if found != [mfn]:
                    raise self._fail(f"search {word!r} found {found}, expected [{mfn}]", rnd, i)
                if old_word is not None:
                    found = list(db.search(old_word))
                    if found:
                        raise self._fail(f"search {old_word!r} (the record's previous word) "
                                         f"found {found}, expected none", rnd, i)
                for expr in (HOT_WORD, UNIQUE_PREFIX):
                    hits = db.search(expr)
                    n = len(hits)
                    if others is not None:
                        want = len(others | self.touched)
                        if n != want:
                            raise self._fail(f"search {expr!r} found {n} records, expected "
                                             f"{want}", rnd, i)
                    if not self.touched <= set(hits) or not set(hits) <= self.all_hot:
                        raise self._fail(f"search {expr!r} found {sorted(hits)}: not between "
                                         f"this client's updated records "
                                         f"{sorted(self.touched)} and the hot records", rnd, i)
        finally:
            if snap is not None:
                snap.close()
        secs = time.perf_counter() - t0
        return {"client": self.index + 1, "round": rnd + 1, "start": start,
                "end": time.monotonic(), "seconds": secs, "updates": iterations,
                "touched": sorted(self.touched)}


# ---------------------------------------------------------------- clients

class _Threads:
    """The clients as threads sharing one writable handle `db`."""

    def __init__(self, db, clients: list[Client]):
        self.db, self.clients = db, clients

    def run_one(self, c: int, rnd: int, iterations: int, others) -> dict:
        return self.clients[c].run(self.db, rnd, iterations, others)

    def run_all(self, rnd: int, iterations: int) -> list[dict]:
        n = len(self.clients)
        barrier = threading.Barrier(n)
        out: list[Any] = [None] * n

        def work(c):
            try:
                barrier.wait()
                out[c] = self.clients[c].run(self.db, rnd, iterations, None)
            except BaseException as e:  # noqa: BLE001 - reported after join
                out[c] = e
                barrier.abort()

        ts = [threading.Thread(target=work, args=(c,), name=f"gctest-{c + 1}")
              for c in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return _results(out)

    def close(self, at_once: bool = False) -> None:
        pass


def _results(out: list) -> list[dict]:
    errors = [e for e in out if isinstance(e, BaseException)]
    wrong = [e for e in errors if isinstance(e, WorkloadError)]
    if wrong or errors:
        raise (wrong or errors)[0]
    return out


def _process_main(path: str, policy: str, c: int, hot: list[int], all_hot: list[int],
                  span: int, commands, results, barrier) -> None:
    """A client process: its own handle, its Client, commands from the
    parent (("run", round, iterations, others, parallel) or None to stop).
    Ctrl-C is the parent's: it kills the clients (_Processes.close), where
    each one's KeyboardInterrupt printed its traceback (a review)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # drops one pending since
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})   # _sigint_held
    try:
        db = open_for(path, policy)
        client = Client(c, hot, all_hot, span)
        client.load(db)
    except BaseException:  # noqa: BLE001 - sent to the parent
        results.put((c, "error", traceback.format_exc()))
        return
    results.put((c, "ready", None))
    try:
        while True:
            cmd = commands.get()
            if cmd is None:
                break
            _, rnd, iterations, others, parallel = cmd
            try:
                if parallel:
                    barrier.wait()
                results.put((c, "done", client.run(db, rnd, iterations, others)))
            except WorkloadError as e:
                results.put((c, "wrong", str(e)))
            except BaseException:  # noqa: BLE001 - sent to the parent
                if parallel:
                    barrier.abort()
                results.put((c, "error", traceback.format_exc()))
    finally:
        db.close()


class _Processes:
    """The clients as processes (spawned: no handle or thread of the parent
    is inherited), each with its own writable handle under the policy."""

    def __init__(self, path, policy: str, hot: list[list[int]], span: int):
        ctx = multiprocessing.get_context("spawn")
        n = len(hot)
        all_hot = [m for h in hot for m in h]
        self.results = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(n)]
        self.barrier = ctx.Barrier(n)
        self.procs = [ctx.Process(target=_process_main, name=f"gctest-{c + 1}",
                                  args=(os.fspath(path), policy, c, hot[c], all_hot, span,
                                        self.commands[c], self.results, self.barrier))
                      for c in range(n)]
        try:
            # started with SIGINT blocked, which a spawned child keeps from
            # its first instruction until _process_main ignores it: a
            # Ctrl-C during a client's start-up printed its traceback
            # (the code review); this process takes it once they started
            _sigint_held(self._start)
            self._collect(n)
        except BaseException:
            self.close(at_once=True)
            raise

    def _start(self) -> None:
        for p in self.procs:
            p.start()

    def _collect(self, n: int) -> list[dict]:
        out: list[Any] = [None] * len(self.procs)
        got = 0
        while got < n:
            try:
                c, kind, value = self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [p.name for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"client process(es) {', '.join(dead)} ended "
                                       "unexpectedly") from None
                continue
            got += 1
            if kind == "wrong":
                out[c] = WorkloadError(value)
            elif kind == "error":
                out[c] = RuntimeError(f"client {c + 1} failed:\n{value}")
            else:
                out[c] = value
        return _results([x for x in out if x is not None])

    def run_one(self, c: int, rnd: int, iterations: int, others) -> dict:
        self.commands[c].put(("run", rnd, iterations, list(others), False))
        return self._collect(1)[0]

    def run_all(self, rnd: int, iterations: int) -> list[dict]:
        for q in self.commands:
            q.put(("run", rnd, iterations, None, True))
        res = self._collect(len(self.procs))
        return sorted(res, key=lambda r: r["client"])

    def close(self, at_once: bool = False) -> None:
        """Stop the clients: each ends after its run, or (`at_once`: an
        interrupt, a failure) is killed, as kill -9 would; pydb loses no
        commit to that."""
        for q in self.commands:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for p in self.procs:
            if p.pid is None:
                continue   # never started
            if at_once:
                p.kill()
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()


def _sigint_held(fn: Callable[[], Any]) -> None:
    """fn() with SIGINT blocked in this thread (children it starts inherit
    the mask); a Ctrl-C meanwhile is delivered when fn returns."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        fn()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _uninterrupted(fn: Callable[[], Any]) -> None:
    """fn() with Ctrl-C ignored (in the main thread): a second Ctrl-C
    during the removal of the temporary folder left it half removed."""
    if threading.current_thread() is not threading.main_thread():
        fn()
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fn()
    finally:
        signal.signal(signal.SIGINT, old)


# ---------------------------------------------------------------- a series

def _garbage_key(st: dict) -> tuple:
    g, ix, mf = st["garbage"], st.get("index") or {}, st["master_file"]
    return (g["versions"], g["bytes"], g["postings"], g["segment_files"],
            ix.get("segments"), ix.get("dead_postings"), ix.get("unused_files"), mf["size"],
            st["header"].get("file_generation"))


def _nothing_to_collect(st: dict) -> bool:
    # pinned garbage cannot be collected: only what is collectable counts
    g, ix = st["garbage"], st.get("index") or {}
    return (g["collectable_versions"] == 0 and g["postings"] == 0
            and g["segment_files"] == 0 and not ix.get("dead_postings"))


def settle_time(policy: str, settle: float = SETTLE,
                long_settle: float = LONG_SETTLE) -> float:
    """How long the garbage must stay unchanged before a series counts as
    quiet: `settle` seconds, `long_settle` under a policy with a collector
    thread, whose work (a merge of the whole index in slices on a busy
    machine, a compaction) may publish nothing for seconds."""
    return long_settle if policy in ("background", "combined") else settle


def wait_quiescent(db, timeout: float = QUIESCE_TIMEOUT, settle: float = SETTLE) -> dict:
    """Poll ``db.stat()`` every 0.1 s until nothing is left to collect (no
    collectable version, dead posting or unused segment file), or the
    handle's collector says it has no more work (``header.pending``
    False), or the garbage figures (versions, bytes, dead postings, segment
    files, index segments, master-file size and generation) stay unchanged
    for `settle` seconds; at most `timeout` seconds.  (The handle's count
    of finished collections is no sign of quiet: a collection may end with
    most of the index's garbage left for the next one.)  Collects nothing itself
    (``db.collect()`` would hide what the policy leaves).  Returns
    {"seconds", "polls", "settled" (False: timed out), "stat"}."""
    t0 = time.monotonic()
    st = db.stat()
    polls, key, since = 1, _garbage_key(st), t0
    while not _nothing_to_collect(st) and st["header"].get("pending") is not False:
        now = time.monotonic()
        if now - since >= settle:
            break
        if now - t0 >= timeout:
            return {"seconds": now - t0, "polls": polls, "settled": False, "stat": st}
        time.sleep(POLL)
        st = db.stat()
        polls += 1
        k = _garbage_key(st)
        if k != key:
            key, since = k, time.monotonic()
    return {"seconds": time.monotonic() - t0, "polls": polls, "settled": True, "stat": st}


def _check_summary(report) -> dict:
    return {"ok": report.ok, "errors": report.errors, "warnings": report.warnings,
            "summary": report.summary(),
            "problems": [str(p) for p in report.problems[:20]]}


def run_series(template: Path, folder, s: Settings, policy: str, series: str,
               log: Callable[[str], object] = lambda m: None) -> dict:
    """One series (`series` "serial" or "parallel") under `policy` on a
    fresh copy of `template` in `folder`: open, stat (before), the runs,
    quiescence (:func:`wait_quiescent`, :func:`settle_time`), check, stat
    (after; when the check changed the garbage -- its reads cooperated,
    or a step ended -- after quiescence again).  Returns the series' record (see
    docs/gctest.md, "JSON")."""
    base = fresh_copy(template, folder)
    db = open_for(base, policy)
    try:
        before = db.stat()
        hot = hot_records(db, s.clients, s.hot)
        all_hot = [m for h in hot for m in h]
        clients: _Threads | _Processes
        if s.processes:
            clients = _Processes(base, policy, hot, s.snapshot_span)
        else:
            cl = [Client(c, hot[c], all_hot, s.snapshot_span) for c in range(s.clients)]
            for client in cl:
                client.load(db)
            clients = _Threads(db, cl)
        runs: list[dict] = []
        try:
            for rnd in range(s.runs):
                if series == "serial":
                    for c in range(s.clients):
                        others = sorted({m for r in runs if r["client"] != c + 1
                                         for m in r["touched"]})
                        runs.append(clients.run_one(c, rnd, s.iterations, others))
                        log(f"  {policy} serial run {len(runs)}: {runs[-1]['seconds']:.3f} s")
                else:
                    got = clients.run_all(rnd, s.iterations)
                    runs += got
                    log(f"  {policy} parallel round {rnd + 1}: max "
                        f"{max(r['seconds'] for r in got):.3f} s")
        except BaseException:
            clients.close(at_once=True)
            raise
        clients.close()
        wall = max(r["end"] for r in runs) - min(r["start"] for r in runs)
        if policy in ("background", "combined") and "pending" in before["header"]:
            # the collector thread says when it is done: no guessing
            wait = (s.quiesce_timeout, s.quiesce_timeout)
        else:
            wait = (s.quiesce_timeout, settle_time(policy, s.settle, s.long_settle))
        q1 = wait_quiescent(db, *wait)
        report = db.check()
        after = db.stat()
        q2: dict[str, Any] = {"seconds": 0.0, "polls": 1, "settled": True, "stat": after}
        if _garbage_key(after) != _garbage_key(q1["stat"]):
            # the validator's reads collected (cooperative) or a step ended
            q2 = wait_quiescent(db, *wait)
            after = q2["stat"]
    finally:
        db.close()
    made = sum(r["updates"] for r in runs)
    for r in runs:
        del r["touched"]
    return {"policy": policy, "series": series, "runs": runs,
            "times": [r["seconds"] for r in runs], "wall": wall,
            "updates": made, "garbage_made": made,
            "quiescence": [{k: v for k, v in q.items() if k != "stat"} for q in (q1, q2)],
            "check": _check_summary(report), "stat_before": before, "stat_after": after}


def run_gctest(s: Settings, workdir=None,
               log: Callable[[str], object] = lambda m: None) -> dict:
    """Every series of `s`: per policy, serial then parallel, each on a
    fresh copy (in `workdir`, default a temporary directory removed
    afterwards).  Returns everything (JSON-able): settings, machine,
    database, results (one :func:`run_series` record each), comparisons
    (:func:`comparisons`) and conclusions (:func:`conclusions`)."""
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="pydb-gctest-")
        workdir = tmp.name
    try:
        work = Path(workdir)
        log(f"preparing a copy of {s.db} with its native index...")
        template = prepare_template(s.db, work / "template")
        with open_db(template) as db:
            n_records, max_mfn = len(db), db.max_mfn
        results = []
        for policy in s.policies:
            for series in SERIES:
                log(f"running {policy}, {series}...")
                results.append(run_series(template, work / f"{policy}-{series}", s,
                                          policy, series, log))
    finally:
        if tmp is not None:
            _uninterrupted(tmp.cleanup)
    out = {"db": os.fspath(s.db), "records": n_records, "max_mfn": max_mfn,
           "settings": asdict(s),
           "machine": {"cpus": os.cpu_count(), "python": sys.version,
                       "platform": platform.platform()},
           "results": results}
    out["comparisons"] = comparisons(results)
    out["conclusions"] = conclusions(results)
    return out


# ---------------------------------------------------------------- analysis

def _find(results: list[dict], policy: str, series: str) -> dict | None:
    for r in results:
        if r["policy"] == policy and r["series"] == series:
            return r
    return None


def _verdict(a: Sequence[float], b: Sequence[float]) -> ministat.Verdict | None:
    if not a or not b or len(a) + len(b) < 3:
        return None
    return ministat.compare(a, b, CONFIDENCE)


def _words(v: ministat.Verdict | None, b: str, a: str) -> str:
    if v is None:
        return f"{b} vs {a}: too few runs to compare"
    if not v.significant or math.isnan(v.pct):
        return (f"{b} vs {a}: no difference proven at {CONFIDENCE:g}% confidence "
                f"({v.pct:+.1f}% +/- {v.pct_ci:.1f}%)")
    how = "slower" if v.diff > 0 else "faster"
    return (f"{b} is {abs(v.pct):.1f}% +/- {v.pct_ci:.1f}% {how} than {a} "
            f"({CONFIDENCE:g}% confidence)")


def _vdict(v: ministat.Verdict | None) -> dict | None:
    return None if v is None else asdict(v)


def comparisons(results: list[dict]) -> list[dict]:
    """ministat verdicts at 95%: the run times of each policy against
    ``none`` (serial, parallel), and per policy the serial run times
    against the parallel run times divided by the number of clients that
    ran at once (a parallel run's share of the series: comparable with a
    serial run when the clients take turns on the CPUs).  Each item:
    {"kind", "series" or "policy", "a", "b", "verdict" (ministat's numbers
    or None), "words"}."""
    out = []
    policies = list(dict.fromkeys(r["policy"] for r in results))
    for series in SERIES:
        base = _find(results, "none", series)
        if base is None:
            continue
        for p in policies:
            r = _find(results, p, series)
            if p == "none" or r is None:
                continue
            v = _verdict(base["times"], r["times"])
            out.append({"kind": "policy", "series": series, "a": "none", "b": p,
                        "verdict": _vdict(v),
                        "words": f"{series}: " + _words(v, p, "none")})
    for p in policies:
        a, b = _find(results, p, "serial"), _find(results, p, "parallel")
        if a is None or b is None:
            continue
        width = max(1, sum(1 for r in b["runs"] if r["round"] == 1))
        share = [t / width for t in b["times"]]
        v = _verdict(a["times"], share)
        out.append({"kind": "series", "policy": p, "a": "serial",
                    "b": f"parallel/{width}", "verdict": _vdict(v),
                    "words": f"{p}: " + _words(v, f"parallel run time / {width}",
                                               "serial run time")})
    return out


def growth(times: Sequence[float]) -> dict:
    """How a serial series develops: last/first run, the mean of the last
    quarter over the first quarter, and ministat's verdict of the second
    half against the first (``grows``: proven slower)."""
    n = len(times)
    out: dict[str, Any] = {"last_over_first": times[-1] / times[0] if n and times[0] else None}
    q = max(1, n // 4)
    if n >= 2:
        out["last_quarter_over_first"] = statistics.fmean(times[-q:]) / statistics.fmean(
            times[:q])
    v = _verdict(times[:n // 2], times[n // 2:]) if n >= 4 else None
    out["halves"] = _vdict(v)
    out["grows"] = bool(v is not None and v.significant and v.diff > 0)
    return out


def _left(r: dict) -> dict:
    st = r["stat_after"]
    g, ix = st["garbage"], st.get("index") or {}
    return {"versions": g["versions"], "bytes": g["bytes"], "postings": g["postings"],
            "segment_files": g["segment_files"], "dead_postings": ix.get("dead_postings"),
            "segments": ix.get("segments")}


def conclusions(results: list[dict]) -> dict:
    """Firebird's three conclusions (docs/experiments.md §3), each judged
    from the numbers ("holds": True, False, or None when not measured),
    with the figures and the rule used; plus pydb's own targets (garbage
    left exactly 0 with collection; the last serial run within 20% of the
    first; none leaves exactly the garbage its script made)."""
    policies = list(dict.fromkeys(r["policy"] for r in results))
    collecting = [p for p in policies if p != "none"]
    out: dict[str, Any] = {}
    # (a) parallel run time differs little between policies
    base = _find(results, "none", "parallel")
    rows = []
    for p in collecting:
        r = _find(results, p, "parallel")
        if base is None or r is None:
            continue
        ratio = statistics.fmean(r["times"]) / statistics.fmean(base["times"])
        v = _verdict(base["times"], r["times"])
        little = abs(ratio - 1) <= LITTLE or (v is not None and not v.significant)
        rows.append({"policy": p, "ratio_to_none": ratio, "little": little})
    # Firebird's strategies all collected (its "no GC thread" still had its
    # readers collect, as pydb's cooperative): the same claim among pydb's
    # collecting policies, slowest mean against fastest
    means = {p: statistics.fmean(r["times"]) for p in collecting
             if (r := _find(results, p, "parallel")) is not None and r["times"]}
    among = None
    if len(means) >= 2:
        spread = max(means.values()) / min(means.values())
        among = {"policies": sorted(means), "slowest_over_fastest": spread,
                 "little": spread - 1 <= LITTLE}
    out["a"] = {"claim": "parallel run time differs little between policies",
                "rule": f"each policy's mean parallel run time within {LITTLE:.0%} of none's, "
                        f"or no difference proven at {CONFIDENCE:g}%",
                "rows": rows, "holds": all(x["little"] for x in rows) if rows else None,
                "among_collecting": among}
    # (b) the collector removes almost all garbage
    rows = []
    for p in collecting:
        for series in SERIES:
            r = _find(results, p, series)
            if r is None:
                continue
            left = _left(r)
            made = r["garbage_made"]
            removed = 1 - left["versions"] / made if made else None
            rows.append({"policy": p, "series": series, "made": made, "left": left,
                         "removed": removed,
                         "almost_all": removed is not None and removed >= 0.99,
                         "zero": left["versions"] == 0 and left["postings"] == 0
                         and left["segment_files"] == 0 and not left["dead_postings"]})
    out["b"] = {"claim": "the collector removes almost all garbage",
                "rule": "garbage versions left <= 1% of the back versions the script made",
                "rows": rows, "holds": all(x["almost_all"] for x in rows) if rows else None,
                "zero": all(x["zero"] for x in rows) if rows else None}
    # (c) with collection serial ~ parallel; under none serial runs grow
    rows = []
    for p in policies:
        a, b = _find(results, p, "serial"), _find(results, p, "parallel")
        row: dict[str, Any] = {"policy": p}
        if a is not None:
            row["serial_sum"] = sum(a["times"])
            row["growth"] = growth(a["times"])
        if a is not None and b is not None:
            row["parallel_wall"] = b["wall"]
            row["ratio"] = b["wall"] / row["serial_sum"] if row["serial_sum"] else None
            row["same"] = row["ratio"] is not None and abs(row["ratio"] - 1) <= LITTLE
        rows.append(row)
    same = [x["same"] for x in rows if x["policy"] != "none" and "same" in x]
    none_row = next((x for x in rows if x["policy"] == "none" and "growth" in x), None)
    grows = none_row["growth"]["grows"] if none_row else None
    holds = None
    if same and grows is not None:
        holds = all(same) and grows
    out["c"] = {"claim": "with collection serial and parallel take about the same time; "
                         "under none serial runs grow slower and slower",
                "rule": f"with collection: parallel series wall time within {LITTLE:.0%} of "
                        "the serial series' total; none: the second half of the serial runs "
                        f"proven slower than the first at {CONFIDENCE:g}%",
                "rows": rows, "same": all(same) if same else None, "none_grows": grows,
                "holds": holds}
    # pydb's targets
    exact = []
    for series in SERIES:
        r = _find(results, "none", series)
        if r is not None:
            got = r["stat_after"]["garbage"]["versions"] - \
                r["stat_before"]["garbage"]["versions"]
            exact.append({"series": series, "made": r["garbage_made"], "left_added": got,
                          "exact": got == r["garbage_made"]})
    flat = []
    for p in collecting:
        r = _find(results, p, "serial")
        if r is not None and r["times"]:
            last = r["times"][-1] / r["times"][0] if r["times"][0] else None
            flat.append({"policy": p, "last_over_first": last,
                         "within_20": last is not None and last <= 1.2})
    out["targets"] = {"none_exact": exact, "last_within_20pct": flat}
    return out


# ---------------------------------------------------------------- report

def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _stat_line(st: dict) -> str:
    g, ix, mf, v = st["garbage"], st.get("index") or {}, st["master_file"], st["versions"]
    return (f"master file {mf['size']:,} B (live {mf['live_bytes']:,}, fill "
            f"{mf['fill']:.2f}); back versions {v['back_versions']:,}, longest chain "
            f"{v['longest_chain']}; garbage {g['versions']:,} versions / {g['bytes']:,} B, "
            f"{g['postings']:,} postings, {g['segment_files']} segment files "
            f"(pinned {g['pinned_versions']}); index {_fmt(ix.get('segments'), ',')} "
            f"segments, {_fmt(ix.get('postings'), ',')} postings, "
            f"{_fmt(ix.get('dead_postings'), ',')} dead")


def _yes(x) -> str:
    return {True: "HOLDS", False: "DOES NOT HOLD", None: "not measured"}[x]


def format_report(out: dict) -> str:
    """The text report of :func:`run_gctest`'s result."""
    s = out["settings"]
    res = out["results"]
    policies = list(dict.fromkeys(r["policy"] for r in res))
    how = "processes, each with its own handle" if s["processes"] else \
        "threads sharing one handle"
    L = [f"gctest on {out['db']}: {out['records']:,} active records; {s['clients']} clients "
         f"({how}), {s['runs']} run(s) each per series, {s['iterations']} iterations per run "
         f"(update, read back, snapshot reads, 4 searches; commits without fsync)", ""]
    L.append("-- Firebird's table (docs/experiments.md §3); times in seconds; garbage left = "
             "back versions after quiescence and check")
    L.append(f"{'policy':<12} {'serial':>6} {'avg':>8} {'max':>8} {'sum':>9} {'garbage':>8}  "
             f"{'par.':>5} {'avg':>8} {'max':>8} {'sum':>9} {'wall':>8} {'garbage':>8}")
    L.append(f"{'':<12} {'runs':>6} {'':>8} {'':>8} {'':>9} {'left':>8}  "
             f"{'runs':>5} {'':>8} {'':>8} {'':>9} {'':>8} {'left':>8}")
    for p in policies:
        a, b = _find(res, p, "serial"), _find(res, p, "parallel")
        line = f"{p:<12}"
        for r, w in ((a, 6), (b, 5)):
            if r is None:
                line += f" {'-':>{w}}" + " " * 36
                continue
            t = r["times"]
            line += (f" {len(t):>{w}} {statistics.fmean(t):>8.3f} {max(t):>8.3f} "
                     f"{sum(t):>9.3f}")
            if r is b:
                line += f" {r['wall']:>8.3f}"
            line += f" {r['stat_after']['garbage']['versions']:>8,}" + (" " if r is a else "")
        L.append(line)
    L.append("")
    L.append("-- garbage in detail, after each series (made: back versions the script made)")
    L.append(f"{'policy':<12} {'series':<9} {'made':>7} {'versions':>9} {'bytes':>11} "
             f"{'dead post.':>10} {'segments':>8} {'seg files':>9} {'quiet s':>7} "
             f"{'check':<6}")
    for r in res:
        left = _left(r)
        q = r["quiescence"]
        quiet = sum(x["seconds"] for x in q)
        settled = all(x["settled"] for x in q)
        L.append(f"{r['policy']:<12} {r['series']:<9} {r['garbage_made']:>7,} "
                 f"{left['versions']:>9,} {left['bytes']:>11,} "
                 f"{_fmt(left['dead_postings'], ','):>10} {_fmt(left['segments'], ','):>8} "
                 f"{left['segment_files']:>9} {quiet:>6.1f}{'' if settled else '!'} "
                 f"{'ok' if r['check']['ok'] else 'ERRORS'}")
    if any(not x["settled"] for r in res for x in r["quiescence"]):
        L.append("  (! the garbage was still changing when the quiescence wait timed out)")
    L.append("")
    L.append("-- serial runs, one by one (seconds; clients in order)")
    cols = [(p, r) for p in policies if (r := _find(res, p, "serial")) is not None]
    if cols:
        L.append(f"{'run':>4} " + " ".join(f"{p:>12}" for p, _ in cols))
        n = max(len(r["times"]) for _, r in cols)
        for i in range(n):
            L.append(f"{i + 1:>4} " + " ".join(
                f"{r['times'][i]:>12.3f}" if i < len(r["times"]) else f"{'':>12}"
                for _, r in cols))
        L.append(f"{'last/first':>4} " + " ".join(
            f"{_fmt(growth(r['times'])['last_over_first'], '.2f'):>12}" for _, r in cols)[1:])
    L.append("")
    L.append(f"-- ministat at {CONFIDENCE:g}% confidence (run times)")
    for c in out["comparisons"]:
        L.append("  " + c["words"])
    L.append("")
    L.append("-- stat before (fresh copy) and after each series")
    if res:
        L.append("  before:             " + _stat_line(res[0]["stat_before"]))
    for r in res:
        L.append(f"  {r['policy'] + ' ' + r['series'] + ':':<19} " + _stat_line(r["stat_after"]))
    for r in res:
        if not r["check"]["ok"]:
            L.append(f"  check after {r['policy']} {r['series']}: {r['check']['summary']}")
            L += ["    " + p for p in r["check"]["problems"]]
    L.append("")
    con = out["conclusions"]
    L.append("-- Firebird's conclusions, judged from these numbers")
    a = con["a"]
    L.append(f"  (a) {a['claim']}: {_yes(a['holds'])}")
    L.append("      " + "; ".join(f"{x['policy']} {x['ratio_to_none']:.2f}x none"
                                  for x in a["rows"]) + f"  [rule: {a['rule']}]")
    am = a.get("among_collecting")
    if am:
        L.append(f"      among the collecting policies ({', '.join(am['policies'])}; "
                 f"Firebird's four all collected): slowest / fastest mean parallel run "
                 f"{am['slowest_over_fastest']:.2f}: "
                 f"{'differs little' if am['little'] else 'differs'} "
                 f"[rule: within {LITTLE:.0%}]")
    b = con["b"]
    L.append(f"  (b) {b['claim']}: {_yes(b['holds'])}"
             + ("" if b["zero"] is None else
                f"; garbage left exactly 0 everywhere (pydb's target): "
                f"{'yes' if b['zero'] else 'no'}"))
    L.append("      " + "; ".join(
        f"{x['policy']} {x['series']} {x['left']['versions']}/{x['made']} left"
        for x in b["rows"]) + f"  [rule: {b['rule']}]")
    c = con["c"]
    L.append(f"  (c) {c['claim']}: {_yes(c['holds'])}")
    for x in c["rows"]:
        g = x.get("growth") or {}
        L.append(f"      {x['policy']}: serial sum {_fmt(x.get('serial_sum'), '.2f')} s, "
                 f"parallel wall {_fmt(x.get('parallel_wall'), '.2f')} s "
                 f"(ratio {_fmt(x.get('ratio'), '.2f')}); serial last quarter / first "
                 f"quarter {_fmt(g.get('last_quarter_over_first'), '.2f')}, "
                 f"grows: {'yes' if g.get('grows') else 'no'}")
    L.append(f"      [rule: {c['rule']}]")
    t = con["targets"]
    for x in t["none_exact"]:
        L.append(f"  none {x['series']}: garbage added {x['left_added']:,}, script made "
                 f"{x['made']:,}: {'exact' if x['exact'] else 'NOT EXACT'}")
    for x in t["last_within_20pct"]:
        L.append(f"  {x['policy']}: last serial run / first = "
                 f"{_fmt(x['last_over_first'], '.2f')} (target <= 1.20: "
                 f"{'met' if x['within_20'] else 'missed'})")
    return "\n".join(L)


def plot(out: dict, path, title: str = "") -> None:
    """Draw the run time of each serial run per policy (left) and of each
    client's parallel run (right) into the PNG `path`.  Raises ImportError
    without matplotlib (``pip install 'pydb[plot]'``)."""
    # matplotlib is optional (pydb[plot]): imported only when a chart is drawn
    import matplotlib  # type: ignore[import-not-found, unused-ignore]
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    res = out["results"]
    policies = list(dict.fromkeys(r["policy"] for r in res))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), squeeze=False)
    for ax, series in zip(axes[0], SERIES, strict=True):
        for p in policies:
            r = _find(res, p, series)
            if r is None:
                continue
            xs = list(range(1, len(r["times"]) + 1))
            ax.plot(xs, r["times"], marker="o", markersize=3, label=p)
        ax.set_xlabel("serial run (clients one after another)" if series == "serial"
                      else "client (parallel runs, all at once)")
        ax.set_ylabel("run time (s)")
        ax.set_title(f"{series} runs")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend()
    s = out["settings"]
    fig.suptitle(title or f"gctest: {os.path.basename(out['db'])}, {s['clients']} clients "
                 f"({'processes' if s['processes'] else 'threads'}), {s['iterations']} "
                 "iterations per run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- command line

def _default_ready() -> bool:
    return (default_cache_dir() / f"unesb-v{GENERATOR_VERSION}-x1" / "complete").exists()


#: Exit statuses of ``pydb gctest`` (its --help shows them).
EXIT_STATUSES = (
    (0, "done: every series' check found no error and every client's answers were right"),
    (1, "a check found errors, a client got a wrong answer, or the test could not run "
        "(the reason on stderr)"),
    (2, "bad usage (unknown option, bad value)"),
    (130, "interrupted by Ctrl-C (SIGINT), after one line saying so"),
)


def parse_args(argv=None) -> tuple[argparse.Namespace, Settings]:
    """The command line of ``python -m pydb gctest`` as (arguments,
    Settings); the database stays None when not given.  Exits with
    status 2 on bad usage (argparse)."""
    ap = tool_parser("pydb gctest", __doc__.split("\n\n")[0], EXIT_STATUSES)
    ap.add_argument("db", nargs="?", help="database (default: the built-in synthetic unesb); "
                    "it is copied, never written")
    ap.add_argument("--clients", type=int, default=16, help="clients (default 16)")
    ap.add_argument("--policy", default=",".join(POLICIES),
                    help="collection policies, comma-separated (default "
                         f"{','.join(POLICIES)})")
    ap.add_argument("--runs", type=int, default=1,
                    help="runs of each client per series (default 1: as the original, "
                         "16 serial runs)")
    ap.add_argument("--iterations", type=int, default=None,
                    help=f"iterations of one run (default {ITERATIONS}, --quick "
                         f"{QUICK_ITERATIONS})")
    ap.add_argument("--processes", action="store_true",
                    help="clients are processes with their own handles (default: threads "
                         "sharing one handle)")
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_ITERATIONS} iterations per run and a shorter quiescence "
                         "wait (about a minute)")
    ap.add_argument("--json", metavar="FILE", help="write everything to FILE as JSON")
    ap.add_argument("--plot", metavar="FILE.png",
                    help="chart the run times per policy (needs matplotlib: "
                         "pip install 'pydb[plot]')")
    args = ap.parse_args(argv)
    policies = [p for p in args.policy.split(",") if p]
    for p in policies:
        if p not in POLICIES:
            ap.error(f"unknown policy {p!r} ({', '.join(POLICIES)})")
    if not policies or len(set(policies)) != len(policies):
        ap.error("--policy takes distinct policies separated by commas")
    iterations = args.iterations if args.iterations is not None else (
        QUICK_ITERATIONS if args.quick else ITERATIONS)
    if not 1 <= args.clients <= 1024:
        ap.error("--clients must be 1..1024")
    if not 1 <= args.runs <= 1000 or not 1 <= iterations <= 400_000:
        ap.error("--runs must be 1..1000 and --iterations 1..400000")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error("--plot needs matplotlib, which is not installed: "
                     "pip install 'pydb[plot]' (or pip install matplotlib)")
    s = Settings(db=args.db, clients=args.clients, policies=policies, runs=args.runs,
                 iterations=iterations, processes=args.processes,
                 settle=SETTLE / 2 if args.quick else SETTLE)
    return args, s


def main(argv=None) -> int:
    """``python -m pydb gctest [DB] [options]``: run every series, print
    the report, optionally write JSON and a chart.  Exit status 0; 1 when a
    check found errors, a client got a wrong answer, or the test could not
    run (a pydb error, an OS error, a database with too few records or
    already holding the script's words: the reason on stderr)."""
    args, s = parse_args(argv)
    if s.db is None:
        if not _default_ready():
            print("building the default database (synthetic unesb, 58,880 records) "
                  "on first use...", file=sys.stderr)
        s.db = os.fspath(default_database())

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        out = run_gctest(s, log=log)
    except WorkloadError as e:
        print(f"gctest: WRONG ANSWER: {e}", file=sys.stderr)
        return 1
    except (Error, OSError, ValueError, RuntimeError) as e:
        print(f"gctest: {e}", file=sys.stderr)
        return 1
    print(format_report(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.plot:
        plot(out, args.plot)
        print(f"\nplot written to {args.plot}")
    bad = [r for r in out["results"] if not r["check"]["ok"]]
    return 1 if bad else 0
