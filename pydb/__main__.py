"""Command line: ``pydb COMMAND ...`` (also ``python -m pydb COMMAND ...``).

The commands, their options and the exit statuses are in ``pydb --help``
and ``pydb COMMAND --help`` (built below, in :func:`main`).  Progress bars
(tqdm) go to stderr, only when stderr is a terminal unless ``--progress``
asks for one; ``--no-progress`` turns them off.  Ctrl-C ends a command
with one line saying what was done and exit status 130.
"""

from __future__ import annotations

import argparse
import codecs
import errno
import importlib
import json
import math
import os
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from . import crashtest, gctest, ministat
from ._cli import exit_table
from .arrow import COMPRESSIONS, export_parquet, import_parquet
from .check import CheckReport, Problem
from .database import LAYOUTS, isis_index_behind
from .database import open as open_db
from .encoding import check_record_codec, detect_encoding
from .errors import (
    CorruptionError,
    DatabaseNotFoundError,
    DiskError,
    Error,
    IsoRecordError,
    NotFoundError,
    SearchSyntaxError,
)
from .exchange import (
    _Checkpoint,
    _record_digest,
    export_iso,
    export_jsonl,
    import_iso,
    import_jsonl,
)
from .index import KEY_MODES
from .iso2709 import MIN_LINE
from .mkxrf import rebuild_xrf
from .native import _stored_or_none, build_index, fst_fault, index_command
from .paths import base_name, db_base, existing_file, find_sidecar, native_index_dir
from .unesb import generate

#: Exit statuses of every command (``pydb --help`` and README.rst show them).
EXIT_STATUSES = (
    (0, "done (check: no error found)"),
    (1, "failed, the reason on stderr (import/export: some records skipped and "
        "listed; check: errors found; stat: damaged records, counted; search: bad "
        "expression)"),
    (2, "bad usage (unknown option, missing argument, a value out of range or of the "
        "wrong kind: a negative count, an unknown encoding); check: the database cannot "
        "be opened"),
    (130, "interrupted by Ctrl-C (SIGINT), after one line saying what was done"),
)


def _show_progress(args, default: bool | None = None) -> bool:
    """Whether to draw a bar: ``--progress``/``--no-progress`` when given,
    else `default`, else whether stderr is a terminal."""
    given = getattr(args, "progress", None)
    if given is not None:
        return bool(given)
    return sys.stderr.isatty() if default is None else default


@contextmanager
def _progress(total, unit, desc, show: bool, absolute=False):
    """A tqdm progress bar on stderr when `show` (see :func:`_show_progress`).
    Yields a function that advances it, or None (no bar: `show` false, or
    tqdm missing).  The function takes the count just done, or with
    `absolute` the pair (done so far, total) that ``Database.check`` and
    ``build_index`` report."""
    if not show:
        yield None
        return
    try:
        from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]
    except ImportError:  # tqdm is a dependency, but reading must not need it
        yield None
        return
    bar = tqdm(total=total, unit=unit, desc=desc, disable=False, leave=False,
               unit_scale=unit == "B", dynamic_ncols=True, file=sys.stderr)

    def advance(done, total=None):
        if absolute:
            bar.total = total
            bar.update(done - bar.n)
        else:
            bar.update(done)
    try:
        yield advance
    finally:
        bar.close()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _format_of(path, given):
    if given:
        return given
    name = os.fsdecode(path).lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    return "jsonl" if name.endswith((".jsonl", ".json", ".ndjson")) else None


def _report(rep, what, verbose_errors=5):
    for e in rep.errors[:verbose_errors]:
        print(f"pydb: skipped: {e}", file=sys.stderr)
    if len(rep.errors) > verbose_errors:
        print(f"pydb: ... and {len(rep.errors) - verbose_errors} more skipped record(s)",
              file=sys.stderr)
    extra = f", {rep.repaired} repaired" if rep.repaired else ""
    print(f"{what} {rep.records} record(s){extra}, {len(rep.errors)} skipped", file=sys.stderr)
    return 1 if rep.errors else 0


def _write_record(out, rec, mark_deleted):
    """A record as text, as CISIS i2id writes it: "!ID MFN" (seven digits,
    zero-padded, plus " (deleted)" for a logically deleted record with
    `mark_deleted`), then one "!vTAG!value" line per field."""
    flag = " (deleted)" if mark_deleted and rec.deleted else ""
    out.write(f"!ID {rec.mfn:07d}{flag}\n")
    for f in rec.fields:
        out.write(f"!v{f.tag:03d}!{f.value}\n")


def _cmd_info(args) -> int:
    """The control record and XRF figures (db.info(), db.counts()), then
    how the database is read (encoding, I/O mode, commit sequence) and its
    inverted index: kind, key rules, keys, postings, FST."""
    with open_db(args.db, encoding=args.encoding) as db:
        info = db.info()
        counts = db.counts()
        with db.snapshot() as snap:
            commit = snap.commit
        try:
            index = db.index
            damaged = None
        except CorruptionError as e:    # info still shows the rest
            index, damaged = None, e
        rows: list[tuple[str, object]] = [(k, info[k]) for k in (
            "mst_path", "xrf_path", "layout", "mstxl", "next_mfn", "next_block", "next_pos",
            "mftype", "reccnt", "mst_size", "xrf_size")]
        rows += list(counts.items())
        det = db.encoding_detection
        rows += [("encoding", f"{db.encoding} (field values are decoded with it; "
                  "--encoding)" + (f"; auto: {det.summary()}" if det else "")),
                 ("io", f"{info['io']} (lock {info['lock']})"),
                 ("commit", f"{commit} (commit sequence; 0: never written by pydb)")]
        if damaged is not None:
            # the core's error, without the hint the native index's open adds
            cause = damaged.__cause__
            shown = cause if isinstance(cause, CorruptionError) else damaged
            rows.append(("index", f"unreadable ({shown}); pydb index {args.db} rebuilds "
                         "a native one"))
        elif index is None:
            rows.append(("index", _no_index_hint(args.db)))
        else:
            keys = postings = 0
            for term in index.terms():
                keys += 1
                postings += term.count
            stored = _stored_or_none(args.db) if index.kind == "native" else None
            where = (native_index_dir(db.info()["mst_path"]) if index.kind == "native"
                     else "CDS/ISIS inverted file")
            rows.append(("index", f"{index.kind} ({where})"))
            # the XRF flags: records this inverted file does not reflect
            # (pydb never updates a CDS/ISIS inverted file)
            changed = isis_index_behind(counts)
            if index.kind != "native" and changed:
                rows.append(("index behind by", f"{_plural(changed, 'record')} the XRF "
                             "flags new or changed since the inverted file took them in "
                             "(pydb's writes too): searches may miss or misplace them; "
                             "invert with the ISIS tools, or build a native index: "
                             f"{index_command(args.db)}"))
            if stored is not None:
                rules = ("UTF-8, Unicode case and accent folding" if stored["utf8"]
                         else "8-bit, ISIS upper-case tables")
                cut = f"cut to {stored['max_key']} bytes" if stored["max_key"] else "no limit"
                rows.append(("index keys", f"{rules}; {stored['mode']} key mode; "
                             f"key length {cut}"))
            else:
                le = index.info
                if "le1" in le:
                    rows.append(("index keys", f"short keys up to {le['le1']} bytes, "
                                 f"long keys up to {le['le2']} bytes"))
            rows += [("keys", keys), ("postings", f"{postings} (one per place a key "
                                      "occurs: MFN, tag, occurrence, word)")]
            sidecar = find_sidecar(args.db, "fst")
            if stored is not None:
                n = len([x for x in stored["fst"].splitlines() if x.strip()])
                rows.append(("fst", f"{_plural(n, 'line')}, stored in the index"))
            elif sidecar is not None:
                rows.append(("fst", sidecar))
            else:
                rows.append(("fst", "unknown (no .fst beside the database)"))
    for k, v in rows:
        print(f"{k:>20}: {v}")
    return 0


def _past_damage(recs, damaged: list) -> Iterator:
    """The records of the iterator `recs`; a damaged one (CorruptionError:
    file, offset, reason) is told on stderr, added to `damaged` and left
    out, and the iteration goes on after it (Database.records())."""
    it = iter(recs)
    while True:
        try:
            rec = next(it)
        except StopIteration:
            return
        except CorruptionError as e:
            print(f"pydb dump: left out: {e}", file=sys.stderr)
            damaged.append(e)
            continue
        yield rec


def _listed(db, mfns: list[int], failed: list) -> Iterator:
    """The records of `mfns`, in the order given; one that does not read
    (outside the database, physically deleted, damaged) is told on stderr,
    added to `failed` and left out, and the others are still given (one
    bad MFN of a list printed none of them)."""
    for mfn in mfns:
        try:
            rec = db[mfn]
        except (CorruptionError, NotFoundError) as e:
            print(f"pydb dump: left out: {e}", file=sys.stderr)
            failed.append(e)
            continue
        yield rec


#: errno values of a file or folder that cannot be written (read-only
#: media, permissions): told as such by the commands that write beside a
#: database.
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def _cmd_dump(args) -> int:
    """Exit status: 0, or 1 when a damaged record or a listed MFN that
    does not read was left out (every other record is printed)."""
    out = sys.stdout
    damaged: list[CorruptionError | NotFoundError] = []
    with open_db(args.db, encoding=args.encoding) as db:
        recs = (_listed(db, args.mfn, damaged) if args.mfn
                else _past_damage(db.records(deleted=args.deleted), damaged))
        total = len(args.mfn) if args.mfn else len(db.mfns(deleted=args.deleted))
        # by default a bar only when the text goes elsewhere than the terminal
        with _progress(total, "rec", "dump", _show_progress(
                args, sys.stderr.isatty() and not out.isatty())) as tick:
            for rec in recs:
                _write_record(out, rec, True)
                if tick:
                    tick(1)
    if damaged and args.mfn:
        hint = (f" (pydb check {args.db} reports the damage)"
                if any(isinstance(e, CorruptionError) for e in damaged) else "")
        print(f"pydb dump: {_plural(len(damaged), 'listed MFN')} of {len(args.mfn)} "
              f"left out{hint}", file=sys.stderr)
        return 1
    if damaged:
        print(f"pydb dump: {_plural(len(damaged), 'damaged record')} left out "
              f"(pydb check {args.db} reports the damage)", file=sys.stderr)
        return 1
    return 0


def _open_with_index(args):
    """The database with its inverted index, or None (message printed)."""
    db = open_db(args.db, encoding=args.encoding)
    if db.index is None:
        db.close()
        parts = [os.path.basename(p) for p in
                 (find_sidecar(args.db, ext) for ext in ("n01", "l01", "ifp")) if p]
        why = (f"its CDS/ISIS inverted file ({', '.join(parts)}) has no control file "
               "(.cnt), without which it cannot be read" if parts and
               find_sidecar(args.db, "cnt") is None
               else "no native index, no CDS/ISIS inverted file")
        print(f"pydb {args.command}: {args.db}: the database has no inverted index to "
              f"search ({why}); build a native one with: {index_command(args.db)}",
              file=sys.stderr)
        return None
    return db


def _cmd_terms(args) -> int:
    """One key per line: KEY<TAB>COUNT, in key order.  Bytes of a key that
    are not valid in --encoding are written back as stored (stdout with
    errors="surrogateescape"): ISIS keys can be cut inside a multi-byte
    character (truncation to LE, docs/isis-formats.md §5.3)."""
    out = sys.stdout
    if hasattr(out, "reconfigure"):
        out.reconfigure(errors="surrogateescape")
    db = _open_with_index(args)
    if db is None:
        return 1
    with db:
        for n, term in enumerate(db.terms(args.prefix, args.start)):
            if args.limit is not None and n >= args.limit:
                break
            out.write(f"{term.key}\t{term.count}\n")
    return 0


def _cmd_postings(args) -> int:
    """One posting per line: MFN TAG OCC CNT (tab separated)."""
    out = sys.stdout
    db = _open_with_index(args)
    if db is None:
        return 1
    with db:
        postings = db.postings(args.key, raw=args.raw)
        for p in postings:
            out.write(f"{p.mfn}\t{p.tag}\t{p.occ}\t{p.cnt}\n")
        if not postings:
            form = args.key if args.raw else db.index.key(args.key).decode(
                db.encoding, "replace")
            print(f"pydb postings: no key {form!r} in the index (pydb terms {args.db} "
                  "PREFIX lists the keys)", file=sys.stderr)
    return 0


def _cmd_search(args) -> int:
    """Print "N records" then the matching MFNs, one per line (or, with
    --dump, the records as text).  Exit 1 on a syntax error."""
    db = _open_with_index(args)
    if db is None:
        return 1
    with db:
        try:
            result = db.search(args.expr)
        except SearchSyntaxError as e:
            print(f"pydb search: {e.reason}", file=sys.stderr)
            print(f"  {args.expr}\n  {' ' * e.position}^", file=sys.stderr)
            return 1
        out = sys.stdout
        out.write(f"{_plural(len(result), 'record')}\n")
        if args.dump:
            for rec in result.records():
                _write_record(out, rec, False)
        else:
            for mfn in result:
                out.write(f"{mfn}\n")
    return 0


#: Kinds of check problems that making the XRF again mends, and those a
#: rebuild of the native index mends.
_XRF_KINDS = {"xrf-block", "xrf-pointer", "xrf-beyond-end", "mfn-mismatch"}
_INDEX_KINDS = {"index", "index-posting"}


def _repair_hints(db: str, report: CheckReport) -> list[str]:
    """What mends the problems of `report` (check's), as lines to print."""
    out = []
    kinds = set(report.counts)
    past = any(p.kind == "xrf-pointer" and
               "(NXTMFB/NXTMFP): the next append overwrites" in p.message
               for p in report.problems)
    if past:
        # a damaged NXTMFB/NXTMFP: mkxrf without --mend-control scans up to
        # it and drops every version after it (an operator's trial)
        out.append(f"hint: XRF entries point at versions after the end of records the "
                   f"control record names (NXTMFB/NXTMFP); where that end is what is "
                   f"damaged, pydb mkxrf {db} --replace --mend-control takes them and "
                   f"sets the end after them, while --replace alone leaves them out "
                   f"(the old XRF is kept as .bak)")
    elif _XRF_KINDS & kinds:
        out.append(f"hint: the XRF can be made again from the master file, each MFN "
                   f"given its last whole version: pydb mkxrf {db} --replace (the old "
                   "XRF is kept as .bak)")
    if _INDEX_KINDS & kinds and past:   # (the index may be of the versions after it)
        out.append(f"hint: then pydb check {db} again; where it still reports faults of "
                   f"the index, pydb index {db} builds it anew")
    elif _INDEX_KINDS & kinds:
        out.append(f"hint: pydb index {db} builds the native index anew")
    return out


def _no_index_hint(db: str) -> str:
    """pydb info's index row for a database without a readable index:
    the command that builds one (no --fst where an FST lies beside the
    database, as pydb index takes it), and CDS/ISIS inverted-file parts
    that are there without the .cnt the reader needs (a new user's
    review: both went unsaid)."""
    fst = find_sidecar(db, "fst")
    how = (f"pydb index {db} builds one from {fst}" if fst and fst_fault(fst) is None
           else f"build one: {index_command(db)}")
    parts = [ext for ext in ("ifp", "n01", "l01") if find_sidecar(db, ext)]
    if parts and not find_sidecar(db, "cnt"):
        how += (f"; the CDS/ISIS inverted file beside it ({', '.join('.' + p for p in parts)}) "
                "has no .cnt and is not read")
    return f"none ({how})"


def _cmd_check(args) -> int:
    """Exit status: 0 no error (warnings allowed unless --strict), 1 any
    error (or any warning with --strict), 2 the database cannot be opened
    (missing file, I/O error, unsupported) or bad usage.  The text report
    ends with what mends the damage found, where pydb has a tool for it
    (pydb mkxrf, pydb index)."""
    hints: list[str] = []
    try:
        db = open_db(args.db)
    except DatabaseNotFoundError as e:
        print(f"pydb check: cannot open {args.db}: {e}", file=sys.stderr)
        if existing_file(base_name(args.db)) and find_sidecar(args.db, "xrf") is None:
            print(f"hint: the master file has no XRF; pydb mkxrf {args.db} makes one "
                  "from it", file=sys.stderr)
        return 2
    except CorruptionError as e:
        # Damage that stops the open is a finding, not a usage error.
        prob = Problem("open", "error", 0, e.filename or args.db,
                       e.offset if e.offset is not None else -1, e.reason)
        report = CheckReport(args.db, [prob], {"open": 1},
                             {"errors": 1, "warnings": 0, "truncated": False})
        bak = (find_sidecar(args.db, "xrf") or "") + ".bak"
        first = f"move {bak} away, then " if os.path.lexists(bak) else ""
        if "say the records end at byte" in (e.reason or ""):   # handle.c: cut short
            hints.append(f"hint: the master file is shorter than its control record "
                         f"says: {first}pydb mkxrf {args.db} --replace --mend-control "
                         "makes the records up to the cut readable again")
        elif "NXTMFN" in (e.reason or "") and (e.filename or "").lower().endswith(".xrf"):
            hints.append(f"hint: the XRF is cut short: {first}pydb mkxrf {args.db} "
                         "--replace makes it again from the master file")
    except (Error, OSError) as e:
        print(f"pydb check: cannot open {args.db}: {e}", file=sys.stderr)
        return 2
    else:
        with db:
            show = _show_progress(args)
            total = db.max_mfn + db.info()["mst_size"] // 512 if show else 0
            with _progress(total, "step", "check", show and (total >= 2048 or bool(
                    args.progress)), absolute=True) as progress:
                report = db.check(max_problems=args.max_problems, progress=progress)
    failed = report.errors > 0 or (args.strict and report.warnings > 0)
    if args.json:
        d = report.to_dict()
        d["exit_status"] = 1 if failed else 0
        print(json.dumps(d, indent=1))
    else:
        out = sys.stdout
        for p in report.problems:
            if args.errors_only and p.severity != "error":
                continue
            out.write(f"{p}\n")
        if report.truncated:
            out.write(f"... {report.errors + report.warnings - len(report.problems)} "
                      f"more (raise --max-problems)\n")
        out.write(report.summary() + "\n")
        for line in _repair_hints(args.db, report) + hints:
            out.write(line + "\n")
    return 1 if failed else 0


def _max_mfn_or_none(db: str) -> int | None:
    """The highest MFN of the database `db`, None if there is none (or it
    cannot be opened: the import then reports why)."""
    if existing_file(base_name(db)) is None:
        return None
    try:
        with open_db(db) as handle:
            return handle.max_mfn
    except (Error, OSError):
        return None


def _layout_kept(args) -> tuple[str, int]:
    """The layout and MSTXL a new database gets from `args` (defaults:
    isis-packed, 0).  Where `args.db` exists, a --layout or --mstxl that
    differs from its own is told on stderr: the records are appended in
    the database's layout."""
    layout = args.layout or "isis-packed"
    mstxl = 0 if args.mstxl is None else args.mstxl
    if (args.layout is None and args.mstxl is None) or existing_file(base_name(args.db)) is None:
        return layout, mstxl
    try:
        with open_db(args.db) as handle:
            have = (handle.layout, handle.info()["mstxl"])
    except (Error, OSError):
        return layout, mstxl      # the import reports why it cannot open it
    asked = (args.layout or have[0], have[1] if args.mstxl is None else args.mstxl)
    if asked != have:
        print(f"pydb: warning: {args.db} exists with layout {have[0]}, MSTXL {have[1]}: "
              "the records are appended in that layout (--layout and --mstxl are for "
              "a new database)", file=sys.stderr)
    return layout, mstxl


def _resume_point(checkpoint: str, src: str, db: str, max_mfn: int | None) -> str:
    """What a resumed import will skip, in words.  Raises what the import
    would (ImportResumeError, CorruptionError) before anything is done."""
    cp = _Checkpoint(checkpoint, src)
    state = cp.read()
    if state is None or state[0] or max_mfn is None:
        return "from the first record (the new database is built again)"
    with open_db(db) as handle:
        done = cp.resume_point(state[1], max_mfn, lambda m: _record_digest(handle, m))
    return f"after source record {done} (the records up to it are in the database)"


def _cmd_import(args) -> int:
    """Import with a resume file ``<DB>.resume`` (exchange._Checkpoint):
    an import interrupted by Ctrl-C or a kill leaves it, and only
    ``--resume`` goes on from it (ISO 2709 and JSON Lines)."""
    if args.flavour == "parquet" or (args.flavour is None and (
            _format_of(args.src, None) == "parquet" or os.path.isdir(args.src))):
        return _import_parquet(args)
    fmt = "jsonl" if args.flavour == "jsonl" or (
        args.flavour is None and _format_of(args.src, None) == "jsonl") else "iso"
    size = os.path.getsize(args.src)
    checkpoint = db_base(args.db) + ".resume"   # one for every spelling
    if os.path.exists(checkpoint) and not args.resume:
        print(f"pydb import: {checkpoint} exists: an earlier import into {args.db} did not "
              f"finish (interrupted, killed, or stopped at an error); run again with --resume "
              f"to import only what it did not commit, or delete {checkpoint} to import "
              "every record again", file=sys.stderr)
        return 1
    if args.resume and not os.path.exists(checkpoint):
        print(f"pydb import: --resume: no interrupted import to resume ({checkpoint} "
              "does not exist)", file=sys.stderr)
        return 1
    before = _max_mfn_or_none(args.db)
    if args.resume:
        print(f"pydb import: resuming {_resume_point(checkpoint, args.src, args.db, before)}",
              file=sys.stderr)
    elif before:
        print(f"pydb import: {args.db} exists (MFNs up to {before}): appending the "
              "records after them", file=sys.stderr)
    layout, mstxl = _layout_kept(args)
    show = _show_progress(args)
    try:
        if fmt == "jsonl":
            with _progress(None, "rec", "import", show) as tick:
                rep = import_jsonl(args.src, args.db, layout=layout, mstxl=mstxl,
                                   encoding=args.encoding or "utf-8", on_error=args.on_error,
                                   progress=tick, max_gap=args.max_gap,
                                   checkpoint=checkpoint)
        else:
            with _progress(size, "B", "import", show) as tick:
                rep = import_iso(args.src, args.db, flavour=args.flavour or "auto",
                                 layout=layout, mstxl=mstxl,
                                 encoding=args.encoding or "utf-8",
                                 db_encoding=args.db_encoding,
                                 on_error=args.on_error, mfn_tag=args.mfn_tag,
                                 progress=tick, max_gap=args.max_gap,
                                 checkpoint=checkpoint)
    except KeyboardInterrupt:
        after = _max_mfn_or_none(args.db)
        if after is None or before is None and not os.path.exists(checkpoint):
            what = ("nothing committed (a new database is written in one go; its "
                    "partial files were removed)")
        else:
            n = after - (before or 0)
            what = (f"{_plural(n, 'record')} committed to {args.db} in this run "
                    f"(MFNs {(before or 0) + 1}..{after}); run the same command with "
                    "--resume to import the rest" if n else
                    f"nothing committed in this run; --resume goes on from {checkpoint}")
        print(f"pydb import: interrupted; {what}", file=sys.stderr)
        return 130
    except IsoRecordError as e:
        if not os.path.exists(checkpoint):
            raise
        print(f"pydb import: {e}\n(run it again with --resume and the options that mend "
              f"it to import the rest: {checkpoint} says where it stopped)", file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno not in _NOT_WRITABLE:
            raise
        print(f"pydb import: cannot write {args.db}: the import writes the database and "
              f"its resume file {checkpoint} in that folder ({e})", file=sys.stderr)
        return 1
    if rep.records == 0 and not rep.errors and not args.resume:
        kind = "JSON Lines" if fmt == "jsonl" else "ISO 2709"
        print(f"pydb import: no record found in {args.src} " +
              ("(an empty file)" if size == 0 else f"({size} bytes): not {kind}?"),
              file=sys.stderr)
        if before is None:
            _remove_empty_db(args.db)
        return 1
    status = _report(rep, "imported")
    if before is None and rep.records == 0 and rep.errors and not args.resume:
        _remove_empty_db(args.db)
    return status


def _remove_empty_db(db: str) -> None:
    """Remove the database an import made and put no record into (every
    record of the file failed, or the file held none): no empty .mst/.xrf
    is left behind, for the next import to append to."""
    base = base_name(db)
    if _max_mfn_or_none(db) != 0:
        return
    for ext in ("mst", "xrf", "wal", "shm"):
        path = find_sidecar(base, ext)
        if path is not None:
            os.remove(path)
    print(f"pydb import: nothing imported: {db} was not created", file=sys.stderr)


def _no_pyarrow() -> bool:
    """True (after saying what to install) when pyarrow is missing."""
    try:
        importlib.import_module("pyarrow")
    except ImportError:
        print("pydb: Parquet needs pyarrow: pip install 'pydb[arrow]'", file=sys.stderr)
        return True
    return False


def _import_parquet(args) -> int:
    if args.resume:
        print("pydb import: --resume works for ISO 2709 and JSON Lines imports, not Parquet",
              file=sys.stderr)
        return 1
    if _no_pyarrow():
        return 1
    layout, mstxl = _layout_kept(args)
    with _progress(None, "rec", "import", _show_progress(args)) as tick:
        rep = import_parquet(args.src, args.db, layout=layout, mstxl=mstxl,
                             encoding=args.encoding, on_error=args.on_error,
                             progress=tick, max_gap=args.max_gap, sort=args.sort)
    return _report(rep, "imported")


def _note_other_encoding(args, db) -> None:
    """Without --encoding, JSON Lines and Parquet decode values as UTF-8
    (a default import gives the same bytes back); where the database's
    values look to be in another encoding, say on stderr what became of
    them and how to have them as text (a new user's review: a WinISIS
    catalogue's accented values came out as base64, silently)."""
    if args.encoding is not None:
        return
    det = detect_encoding(db)
    if not det.not_utf8():
        return
    kept = "base64" if _export_format(args) == "jsonl" else "the raw column's bytes"
    print(f"pydb export: note: {args.db}'s values look {det.encoding} ({det.reason}); "
          f"those not valid UTF-8 are written as {kept}. --encoding {det.encoding} "
          "writes them as text (import that file with the same --encoding to get the "
          "same bytes back)", file=sys.stderr)


def _export_format(args) -> str:
    """The format `pydb export` writes: jsonl, parquet or iso."""
    if args.flavour == "parquet" or (args.flavour is None and (
            _format_of(args.dst, None) == "parquet" or args.partition_records)):
        return "parquet"
    return "jsonl" if (args.flavour or _format_of(args.dst, None)) == "jsonl" else "iso"


def _export_parquet(args) -> int:
    if _no_pyarrow():
        return 1
    with open_db(args.db, encoding=args.encoding or "utf-8") as db:
        _note_other_encoding(args, db)
        total = len(db.mfns(deleted=args.deleted))
        t0 = time.perf_counter()
        with _progress(total, "rec", "export", _show_progress(args)) as tick:
            rep = export_parquet(db, args.dst, rows=args.rows, subfields=args.subfields,
                                 deleted=args.deleted, batch_records=args.batch_records,
                                 partition_records=args.partition_records,
                                 compression=args.compression, on_error=args.on_error,
                                 progress=tick)
        dt = time.perf_counter() - t0
    print(f"{rep.records} record(s) in {dt:.2f} s "
          f"({rep.records / dt if dt else 0:,.0f} records/s)", file=sys.stderr)
    return _report(rep, "exported")


def _cmd_export(args) -> int:
    fmt = _export_format(args)
    if fmt != "parquet" and os.path.isdir(args.dst):
        # (--force cannot replace it: "Is a directory", a new user's review)
        print(f"pydb: {args.dst} is a directory: name the file to write", file=sys.stderr)
        return 1
    if os.path.exists(args.dst) and not args.force:
        print(f"pydb: {args.dst} exists (use --force to replace it)", file=sys.stderr)
        return 1
    if fmt == "parquet":
        return _export_parquet(args)
    # ISO: the leader's UTF-8 flag follows the encoding, detected unless
    # given (export_iso); JSON Lines decodes by --encoding, else UTF-8
    enc = args.encoding or ("utf-8" if fmt == "jsonl" else "auto")
    with open_db(args.db, encoding=enc) as db:
        total = len(db.mfns(deleted=args.deleted))
        if fmt == "jsonl":
            _note_other_encoding(args, db)   # before the progress bar
        with _progress(total, "rec", "export", _show_progress(args)) as tick:
            if fmt == "jsonl":
                rep = export_jsonl(db, args.dst, deleted=args.deleted,
                                   encoding=args.encoding or "utf-8",
                                   on_error=args.on_error, progress=tick)
            else:
                rep = export_iso(db, args.dst, args.flavour or "isis",
                                 line_ending=args.line_ending,
                                 line_width=args.line_width,
                                 deleted=args.deleted, mfn_tag=args.mfn_tag,
                                 encoding=args.encoding, on_error=args.on_error,
                                 progress=tick)
    return _report(rep, "exported")


def _cmd_gen_unesb(args) -> int:
    base = generate(args.dir, scale=args.scale, seed=args.seed, count=args.count,
                    index=not args.no_index,
                    progress=not args.no_index and _show_progress(args))
    print(base)
    return 0


def _cmd_index(args) -> int:
    """Build the index; report the records read, the time and the rate of
    the reading phase (first to last progress report), apart from the
    time taken to write and commit the index."""
    if existing_file(base_name(args.db)) is None:
        print(f"pydb index: {args.db}: no database there (no .mst or .xrf file)",
              file=sys.stderr)
        return 1
    with warnings.catch_warnings():   # (build_index says it, once)
        warnings.simplefilter("ignore")
        stored = _stored_or_none(args.db)
    if (args.fst is None and find_sidecar(args.db, "fst") is None
            and (stored is None or not stored["fst"])):
        print(f"pydb index: {args.db}: the database has no .fst file and no index to take "
              "the FST from; give one with --fst FILE", file=sys.stderr)
        return 1
    if args.quiet:
        args.progress = False
    marks: list[tuple[float, int]] = []
    with _progress(0, "rec", "index", _show_progress(args), absolute=True) as tick:
        def progress(done: int, total: int) -> None:
            marks.append((time.perf_counter(), done))
            if tick:
                tick(done, total)
        left_out: list[tuple[int, CorruptionError]] = []
        t0 = time.perf_counter()
        try:
            n = build_index(args.db, fst=args.fst, stw=args.stw, progress=progress,
                            encoding=args.encoding, max_key=args.max_key,
                            key_mode=args.key_mode,
                            on_damaged=(lambda mfn, e: left_out.append((mfn, e)))
                            if args.skip_damaged else None)
        except CorruptionError as e:
            print(f"pydb index: {e}\n(the old index stays; --skip-damaged leaves damaged "
                  "records out of the index)", file=sys.stderr)
            return 1
        except OSError as e:
            if e.errno not in _NOT_WRITABLE:
                raise
            print(f"pydb index: cannot build the index of {args.db}: the build writes "
                  f"{native_index_dir(args.db)} beside the database and takes its writer "
                  f"lock, which opens the master file for writing ({e})", file=sys.stderr)
            return 1
        dt = time.perf_counter() - t0
    for mfn, damage in left_out:
        print(f"pydb index: MFN {mfn} left out of the index: {damage}", file=sys.stderr)
    read_s = (marks[-1][0] - t0) if marks else dt
    rate = f", {n / read_s:,.0f} MFNs/s" if read_s > 0 else ""
    print(f"indexed {n} MFNs in {dt:.2f} s (reading records and making keys "
          f"{read_s:.2f} s{rate}; writing and committing the index {dt - read_s:.2f} s)")
    if left_out:
        print(f"{len(left_out)} damaged record{'s' if len(left_out) > 1 else ''} left out "
              f"of the index (pydb check {args.db} reports the damage)")
    return 0


def _stat_text(path: str, s: dict, index_note: str = "no") -> str:
    """The report of ``pydb stat`` (gstat-like sections) from db.stat() of
    the read-only handle it opens: the database's figures, not that
    handle's own (its policy, collections and pending flag say nothing
    of the writers: --json has them); `index_note`: what "Present" says
    when it has no index figures."""
    h, r, v, g, m, ix = (s["header"], s["records"], s["versions"], s["garbage"],
                         s["master_file"], s["index"])
    oldest = "-" if h["oldest_reader_commit"] is None else h["oldest_reader_commit"]
    rows: list[tuple[str, list[tuple[str, object]]]] = [
        ("Database header", [
            ("Commit", h["commit"]),
            ("Oldest reader commit", oldest),
            ("Behind (commits)", h["behind"]),
            ("Registered readers", h["readers"]),
            ("Master file generation", h["file_generation"]),
            ("Collecting process", h["collector_pid"] or "-")]),
        ("Records", [
            ("Active", r["active"]), ("Logically deleted", r["deleted"]),
            ("Next MFN", r["next_mfn"]), ("Damaged", r["damaged"])]),
        ("Versions", [
            ("Versions", v["versions"]), ("Back versions", v["back_versions"]),
            ("Longest chain", v["longest_chain"]),
            ("Average version size", f"{v['average_size']:.2f} bytes")]),
        ("Garbage", [
            ("Versions", g["versions"]), ("Bytes", g["bytes"]),
            ("Dead postings", g["postings"]), ("Unused segment files", g["segment_files"]),
            ("Pinned versions", g["pinned_versions"]), ("Pinned bytes", g["pinned_bytes"]),
            ("Collectable versions", g["collectable_versions"]),
            ("Collectable bytes", g["collectable_bytes"])]),
        ("Master file", [
            ("Size", f"{m['size']} bytes"), ("Live bytes", m["live_bytes"]),
            ("Fill", f"{100 * m['fill']:.1f}%")]),
    ]
    if ix is None:
        rows.append(("Native index", [("Present", index_note)]))
    else:
        rows.append(("Native index", [
            ("Segments", ix["segments"]), ("Terms", ix["terms"]),
            ("Postings", ix["postings"]), ("Dead postings", ix["dead_postings"]),
            ("Tombstones", ix["tombstones"]), ("Bytes", ix["bytes"]),
            ("Files", ix["files"]), ("Unused files", ix["unused_files"]),
            ("Unused bytes", ix["unused_bytes"])]))
    out = [f"Database \"{path}\""]
    for title, items in rows:
        out.append(title)
        out.extend(f"    {k:<24}{val}" for k, val in items)
    return "\n".join(out) + "\n"


def _cmd_collect(args) -> int:
    """Database.collect() on a writable handle (no collector thread of its
    own), and what it collected in words (or --json)."""
    # the values are not read: named so that the open samples none
    with open_db(args.db, readonly=False, gc="none", encoding="utf-8") as db:
        rep = db.collect(timeout=args.timeout)
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"collected {_plural(rep['versions'], 'back version')} and {rep['bytes']} bytes "
          f"of the master file ({_plural(rep['compactions'], 'compaction')}), "
          f"{_plural(rep['postings'], 'dead posting')} and "
          f"{_plural(rep['segments'], 'segment file')} of the native index")
    if rep["pinned"]:
        print(f"{_plural(rep['pinned'], 'garbage version')} left: a snapshot of another "
              "process still reads an older commit (pydb stat names the oldest)")
    return 0


def _cmd_mkxrf(args) -> int:
    """A new XRF from a scan of the master file (pydb.rebuild_xrf), and
    what the scan found."""
    rep = rebuild_xrf(args.db, layout=args.layout, replace=args.replace, force=args.force,
                      mend_control=args.mend_control)
    kept = f" (a copy of the old one: {rep['backup']})" if rep["backup"] else ""
    print(f"wrote {rep['xrf']}{kept}")
    print(f"layout {rep['layout']}, MSTXL {rep['mstxl']}, NXTMFN {rep['next_mfn']}: "
          f"{rep['versions']} record versions ({rep['version_bytes']} bytes) in the "
          f"{rep['end']} bytes up to the end of records")
    print(f"MFNs: {rep['active']} active, {rep['deleted']} logically deleted, "
          f"{rep['missing']} physically deleted (no version found); "
          f"{rep['pending']} flagged update pending")
    if rep["mended_end"] and rep["past_end_taken"]:
        print(f"pydb: warning: the control record said the records end at byte "
              f"{rep['ctl_end']}, and the XRF pointed at {rep['past_end_taken']} record "
              f"version(s) after it: taken; the control record now says the records end "
              f"at byte {rep['mended_end']}, after the last of them", file=sys.stderr)
    elif rep["mended_end"]:
        print(f"pydb: warning: the master file has {rep['end']} bytes, its control record "
              f"said the records end at byte {rep['ctl_end']}: the records after the cut "
              f"are lost; the control record now says they end at byte "
              f"{rep['mended_end']}, after the last whole version", file=sys.stderr)
    elif rep["end"] < rep["ctl_end"]:
        first = f"move {rep['backup']} away, then " if rep["backup"] else ""
        print(f"pydb: warning: the master file has {rep['end']} bytes, its control record "
              f"says the records end at byte {rep['ctl_end']}: the records after the cut "
              "are lost, and pydb will not open the database until the control record "
              f"is mended ({first}pydb mkxrf {args.db} --replace --mend-control)",
              file=sys.stderr)
    if rep["past_end"]:
        more = ("" if args.mend_control else
                "; where that end is what is damaged (pydb check reports XRF entries "
                f"past it), pydb mkxrf {args.db} --replace --mend-control takes those the "
                "old XRF points at")
        print(f"pydb: warning: {rep['past_end']} record version(s) lie after the end of "
              "records the control record names (an append never committed, or a "
              f"program that did not update the control record): not taken{more}",
              file=sys.stderr)
    return 0


def _cmd_stat(args) -> int:
    """A read-only handle: a report starts no collection and no
    transaction (the open still finishes a commit a writer left in the
    log, as every open does).  A native index whose files cannot be read
    (damaged, or unreadable: EACCES, EIO) is named, with why, and the
    other figures are shown.  Damaged records are counted, the first
    named on stderr: exit status 1."""
    with open_db(args.db) as db:
        try:
            s = db.stat()
            note = "yes" if s["index"] is not None else "no"
        except (CorruptionError, DiskError) as e:
            pdx = os.path.join(native_index_dir(db.info()["mst_path"]), "")
            if not (e.filename or "").startswith(pdx):
                raise
            s = db.stat(index=False)
            note = f"yes, unreadable ({e}); pydb index {args.db} rebuilds it"
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        sys.stdout.write(_stat_text(args.db, s, note))
    damaged = s["records"]["damaged"]
    if damaged:
        print(f"pydb stat: {damaged} damaged record(s), not counted from the damage on; "
              f"the first: {s['records']['first_damage']} (pydb check {args.db} lists "
              "them)", file=sys.stderr)
    return 1 if damaged else 0


SEARCH_HELP = """\
The CDS/ISIS search language (docs/isis-formats.md section 6), operators from
the loosest binding to the strongest:
  A + B       OR: records with A or B                 (also: A OR B)
  A * B       AND: records with both                  (also: A AND B)
  A ^ B       AND NOT: records with A and without B   (also: A AND NOT B)
  A (G) B     both in the same field (same tag)
  A (F) B     both in the same occurrence of a field  (also: A WITH B)
  A . B       near: same occurrence, at most n words apart (n = number of
              dots, written between blanks: A . . B)
  A $ B       same occurrence, exactly n words apart (n = number of $)
  TERM$       right truncation: every key that starts with TERM
              (quoted: "TWO WO$" or "TWO WO"$)
  TERM/(24,70)  only postings from fields with these tags
  "TWO WORDS" a quoted term (blanks, operators or a leading # inside)
  ( ... )     grouping
Terms are brought into key form (upper case, the index's rules); the
operator words AND, OR, AND NOT, WITH in any case (and, or), as in CISIS.

Output: a line "N records" (records, not postings), then the MFNs one per
line, or with --dump the records as text.

Examples:
  pydb search cds "WATER"
  pydb search cds "PLANT$ * WATER/(24)"
  pydb search cds "(SOIL + WATER) ^ POLLUTION"
  pydb search cds "PLANT . CHAMBER" --dump
"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; every option's help ends with
    its default unless it names it already (or the default is None/False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" not in text and action.default not in (None, False, argparse.SUPPRESS)
                and action.option_strings):
            text += " (default: %(default)s)"
        return text


def _fill(text: str) -> str:
    """`text` wrapped to 79 columns, unless it is laid out already (has a newline)."""
    return text if "\n" in text else textwrap.fill(text, 79)


def _line_width(text: str) -> int:
    """An argparse type: 0 or an int of at least iso2709.MIN_LINE."""
    value = _int_from(0)(text)
    if 0 < value < MIN_LINE:
        raise argparse.ArgumentTypeError(
            f"{value} is neither 0 nor at least {MIN_LINE} (a line holds the leader)")
    return value


def _int_from(lowest: int, highest: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int from `lowest` (to `highest`); anything else
    is bad usage (exit status 2), as an unknown option is."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < lowest or (highest is not None and value > highest):
            raise argparse.ArgumentTypeError(
                f"{value} is not in {lowest}..{highest}" if highest is not None
                else f"{value} is less than {lowest}")
        return value
    return parse


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0; anything else is
    bad usage (exit status 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds >= 0")
    return value


def _codec(text: str) -> str:
    """An argparse type: a Python codec name that can be records'
    (:func:`pydb.encoding.check_record_codec`: not rot13, hex, ...)."""
    try:
        check_record_codec(text, "surrogateescape")
    except LookupError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _codec_or_auto(text: str) -> str:
    """An argparse type: a Python codec name or ``auto`` (detected when the
    database is opened, :func:`pydb.open`)."""
    return text if text == "auto" else _codec(text)


ENCODING_HELP = ("character set of the database's field values, a Python codec name "
                 "(utf-8, cp850, cp1252, latin-1, ...; default utf-8)")
KEYS_TOO = "; keys and search expressions are read in it too"
# the commands that read a database detect its encoding by default
READ_ENCODING_HELP = ("character set of the database's field values, a Python codec name "
                      "(utf-8, cp850, cp1252, latin-1, ...) or auto; default: auto, "
                      "detected from the records and ABCD's configuration files (info "
                      "shows the choice and its evidence)")


def _db_arg(p, what="the database: its base name or its .mst/.xrf file"):
    p.add_argument("db", metavar="DB", help=what)


def _encoding_arg(p, text=ENCODING_HELP, default="utf-8", auto=True):
    p.add_argument("--encoding", default=default, metavar="NAME",
                   type=_codec_or_auto if auto else _codec, help=text)


def _progress_args(p):
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="draw a progress bar on stderr (default: only when stderr is a "
                        "terminal)")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="never draw a progress bar")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pydb`` and the ``pydb`` script: run the
    command in `argv` (default ``sys.argv[1:]``) and return the exit status
    (:data:`EXIT_STATUSES`: 0 done; 1 failed, with the reason on stderr;
    2 bad usage; 130 interrupted by Ctrl-C, with one line saying what was
    done; ``check`` documents its own).  pydb errors, OSError, ValueError
    and LookupError become a one-line message and status 1, a closed
    stdout (BrokenPipeError) status 0.  Raises SystemExit (status 2) for
    bad usage, from argparse."""
    argv = sys.argv[1:] if argv is None else argv
    tools = {"crashtest": crashtest.main, "ministat": ministat.main, "gctest": gctest.main}
    if argv and argv[0] in tools:
        # a tool's RuntimeError is its C program failing (crashtest)
        return _run(argv[0], f"pydb {argv[0]}", lambda: tools[argv[0]](argv[1:]),
                    RuntimeError)
    args = parser().parse_args(argv)
    _ascii_locale_to_utf8()
    with _warnings_as_lines():
        return _run(args.command, "pydb", lambda: args.func(args))


@contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Warnings (EncodingDetectionWarning, ...) shown as one line each,
    ``pydb: warning: MESSAGE``, not with the file and source line of
    pydb's code that warned."""
    saved = warnings.formatwarning

    def one_line(message, category, filename, lineno, line=None):
        return f"pydb: warning: {message}\n"

    warnings.formatwarning = one_line   # type: ignore[assignment]
    try:
        yield
    finally:
        warnings.formatwarning = saved


def _run(command: str, prefix: str, call: Callable[[], int],
         *more: type[BaseException]) -> int:
    """call() as `command` of main(): its status; a closed stdout
    (`pydb dump DB | head`: the reader had enough) 0, Ctrl-C 130 with a
    line, a pydb error, OSError, ValueError or LookupError (or one of
    `more`) one line after `prefix` and 1."""
    failures: tuple[type[BaseException], ...] = (Error, OSError, ValueError, LookupError,
                                                 *more)
    try:
        return call()
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(f"pydb {command}: interrupted", file=sys.stderr)
        return 130
    except failures as e:
        print(f"{prefix}: {e}", file=sys.stderr)
        return 1


class _CommandParser(argparse.ArgumentParser):
    """A command's parser: options may stand among its positional
    arguments (``pydb dump DB --deleted 3``, ``pydb terms DB --limit 2
    WAT``), as argparse's intermixed parsing allows; a plain parse would
    take the optional MFNs or prefix as given empty at the first option
    and refuse what follows it."""

    _intermixed = False

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixed:   # (parse_known_intermixed_args calls this)
            return super().parse_known_args(args, namespace)
        self._intermixed = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixed = False


def parser() -> argparse.ArgumentParser:
    """The argument parser of every command but crashtest, ministat and
    gctest (which parse their own arguments)."""
    ap = argparse.ArgumentParser(
        prog="pydb", formatter_class=_HelpFormatter,
        description=_fill("pydb: an embedded record database in the CDS/ISIS tradition "
                    "(master files .mst/.xrf, inverted index, ISO 2709).  Also run as "
                    "python -m pydb.  Progress bars go to stderr, only when it is a "
                    "terminal (--progress / --no-progress where a command has one)."),
        epilog=exit_table(EXIT_STATUSES) + "\nEach command has its own help: pydb COMMAND --help")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND",
                            parser_class=_CommandParser)

    def command(name, help, description=None, epilog=None):
        return sub.add_parser(name, help=help, description=_fill(description or help),
                              epilog=((_fill(epilog) + "\n\n" if epilog else "")
                                      + exit_table(EXIT_STATUSES)),
                              formatter_class=_HelpFormatter)

    sub.add_parser("crashtest", help="C vs Python threaded read benchmark (crashtest --help)")
    sub.add_parser("ministat", help="statistics of repeated measurements (ministat --help)")
    sub.add_parser("gctest", help="garbage-collection experiment, per policy (gctest --help)")
    p = command("info", "control record, layout, record counts, encoding, I/O mode, commit "
                "sequence and the inverted index (kind, key rules, keys, postings, FST)")
    _db_arg(p)
    _encoding_arg(p, READ_ENCODING_HELP, default="auto")
    p.set_defaults(func=_cmd_info)
    p = command("dump", "records as text (CISIS .id style: !ID MFN, then !vTAG!value)",
                epilog="Under an ASCII locale (LC_ALL=C or POSIX) the text is written as "
                       "UTF-8.")
    _db_arg(p)
    p.add_argument("mfn", metavar="MFN", nargs="*", type=_int_from(1, 2**31 - 1),
                   help="MFNs of the records to print (default: every active record)")
    _encoding_arg(p, READ_ENCODING_HELP, default="auto")
    p.add_argument("--deleted", action="store_true", help="include logically deleted records")
    _progress_args(p)
    p.set_defaults(func=_cmd_dump)
    p = command("terms", "keys of the inverted index, in key order, with their posting counts",
                epilog="Output: KEY<TAB>POSTINGS per line.  POSTINGS counts postings: one per "
                       "field occurrence (and word) the key came from, so a record can be "
                       "counted several times; search counts records.")
    _db_arg(p)
    p.add_argument("prefix", metavar="PREFIX", nargs="?", default="",
                   help="only keys starting with this (brought into key form; default: "
                        "every key)")
    p.add_argument("--start", default=None, metavar="KEY",
                   help="first key, inclusive (default: the first key)")
    p.add_argument("--limit", type=_int_from(0), default=None, metavar="N",
                   help="at most N keys (default: no limit)")
    _encoding_arg(p, READ_ENCODING_HELP + KEYS_TOO, default="auto")
    p.set_defaults(func=_cmd_terms)
    p = command("postings", "postings of one key: MFN TAG OCC CNT, tab separated",
                epilog="MFN: record; TAG: field; OCC: occurrence of the field (from 1); "
                       "CNT: word position in the occurrence (from 1).  A key the index "
                       "lacks prints nothing, a note on stderr, and exits 0.")
    _db_arg(p)
    p.add_argument("key", metavar="KEY", help="the key (upper-cased to key form unless --raw)")
    p.add_argument("--raw", action="store_true",
                   help="look the key up as given (no upper-casing)")
    _encoding_arg(p, READ_ENCODING_HELP + KEYS_TOO, default="auto")
    p.set_defaults(func=_cmd_postings)
    p = command("search", "records matching a CDS/ISIS search expression",
                epilog=SEARCH_HELP)
    _db_arg(p)
    p.add_argument("expr", metavar="EXPR",
                   help='the search expression, quoted for the shell, e.g. '
                        '"PLANT$ * WATER/(24)" (operators below)')
    p.add_argument("--dump", action="store_true",
                   help="print the records as text, not just their MFNs")
    _encoding_arg(p, READ_ENCODING_HELP + KEYS_TOO, default="auto")
    p.set_defaults(func=_cmd_search)
    p = command("check", "validate a database (exit 0 sound, 1 damaged, 2 cannot open)",
                description="Walk the control record, every XRF entry, every record "
                "version and back-pointer chain, and scan the master file for "
                "unreachable versions; print each fault with its location, then a "
                "count per kind.  Exit status: 0 no error (warnings allowed unless "
                "--strict), 1 errors found, 2 cannot open the database or bad usage.")
    _db_arg(p)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--max-problems", type=_int_from(0), default=1000, metavar="N",
                   help="print at most N problems (all are counted; default 1000)")
    p.add_argument("--strict", action="store_true", help="warnings also make the exit status 1")
    p.add_argument("--errors-only", action="store_true", help="print only errors (text output)")
    _progress_args(p)
    p.set_defaults(func=_cmd_check)
    p = command("import", "ISO 2709, JSON Lines or Parquet file into a new database (or "
                "appended to an existing one)",
                epilog="An import into an existing database commits 1000 records at a time "
                       "and keeps DB.resume while it runs.  Interrupted (Ctrl-C, exit "
                       "status 130) or killed, it leaves the committed records and that "
                       "file: run the same command with --resume to import only the rest.  "
                       "A new database is written in one go: interrupted, nothing is kept.  "
                       "(Parquet imports have no --resume.)")
    p.add_argument("src", metavar="SRC",
                   help="ISO 2709 file, JSON Lines (.jsonl, or --flavour jsonl), or Parquet "
                        "(.parquet, a directory of part files, or --flavour parquet)")
    p.add_argument("db", metavar="DB", help="base name of the database (.mst/.xrf are created "
                   "if missing; an existing database gets the records appended)")
    p.add_argument("--flavour", choices=["auto", "isis", "marc", "jsonl", "parquet"],
                   default=None, help="input format (default: auto-detected ISO 2709; .jsonl "
                   "files: JSON Lines; .parquet files and directories: Parquet)")
    p.add_argument("--layout", default=None, choices=LAYOUTS,
                   help="record leader layout of a new database (default isis-packed, as "
                        "WinISIS writes; an existing database keeps its own)")
    p.add_argument("--mstxl", type=_int_from(0, 6), default=None, metavar="N",
                   help="MSTXL alignment shift 0..6 of a new database (records start on "
                        "2**N bytes; default 0)")
    _encoding_arg(p, "character set of the input file, a Python codec name (default utf-8; "
                  "Parquet: the one its export recorded): ISO lengths counted in "
                  "characters; JSON Lines strings turned back into bytes with it",
                  default=None, auto=False)
    p.add_argument("--db-encoding", default=None, metavar="NAME", type=_codec,
                   help="ISO input: transcode values from --encoding to this "
                        "character set (default: store the file's bytes)")
    p.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                   help="skip bad records and report them (exit status 1), or stop at "
                        "the first")
    p.add_argument("--mfn-tag", type=_int_from(0, 99999), default=None, metavar="TAG",
                   help="tag of the field that carries each record's MFN (export --mfn-tag; "
                        "default: none, records are numbered in file order)")
    p.add_argument("--max-gap", type=_int_from(0), default=1_000_000, metavar="N",
                   help="new database: a record whose MFN lies more than this beyond "
                        "the previous one is an error (default 1000000)")
    # Parquet (pydb.arrow; docs/parquet.md)
    p.add_argument("--sort", action="store_true",
                   help="Parquet: sort the rows by MFN in memory first (default: no; "
                        "the rows must then come grouped in MFN order)")
    p.add_argument("--resume", action="store_true",
                   help="go on with an interrupted import (DB.resume): skip the source "
                        "records it committed")
    _progress_args(p)
    p.set_defaults(func=_cmd_import)
    p = command("export", "database to ISO 2709, JSON Lines or Parquet")
    _db_arg(p)
    p.add_argument("dst", metavar="DST",
                   help="file to write (.jsonl: JSON Lines; .parquet: Parquet); replaced "
                        "only with --force")
    p.add_argument("--flavour", choices=["isis", "marc", "jsonl", "parquet"], default=None,
                   help="isis (default; '#' terminators, 80-column lines), marc, "
                        "jsonl (default when DST ends in .jsonl) or parquet (default when "
                        "DST ends in .parquet, or with --partition-records)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--crlf", dest="line_ending", action="store_const", const="\r\n",
                   help="CRLF line ends (WinISIS)")
    g.add_argument("--lf", dest="line_ending", action="store_const", const="\n",
                   help="LF line ends (default for the isis flavour)")
    p.add_argument("--line-width", type=_line_width, default=None, metavar="N",
                   help="bytes per line, line ends not counted, 0 or at least 24 (the "
                        "leader) (default 80 for isis, none for marc; 80 writes MARC as "
                        "J-ISIS does; 0: no lines)")
    _encoding_arg(p, "character set of the database's field values, a Python codec name "
                  "(utf-8, cp850, cp1252, latin-1, ...). JSON Lines and Parquet: values "
                  "are decoded with it (default utf-8, so that a default import gives the "
                  "same bytes back; a note says when the values look to be in another), "
                  "and those that do not decode are written as base64 (JSON Lines) or in "
                  "the raw column (Parquet); ISO: default auto (detected), and for MARC "
                  "leader position 9 says UTF-8 ('a') when it is utf-8",
                  default=None)
    p.add_argument("--deleted", action="store_true",
                   help="also export logically deleted records (status d)")
    p.add_argument("--mfn-tag", type=_int_from(0, 99999), default=None, metavar="TAG",
                   help="carry each MFN in a first field of this tag (default: none)")
    p.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                   help="a record that cannot be read or written: skip (leave it out, "
                        "list it and go on) or stop (fail at the first one)")
    p.add_argument("--force", action="store_true",
                   help="replace DST if it exists (never one of the database's files)")
    # Parquet (pydb.arrow; docs/parquet.md)
    p.add_argument("--rows", choices=["fields", "records"], default="fields",
                   help="Parquet: one row per field occurrence (fields) or per record "
                        "(records)")
    p.add_argument("--subfields", choices=["list", "map"], default=None,
                   help="Parquet: add the ^x subfield split of each value as a list of "
                        "(code, value) or a map of first occurrences (default: none)")
    p.add_argument("--batch-records", type=_int_from(1), default=16384, metavar="N",
                   help="Parquet: records per row group and in memory (default 16384)")
    p.add_argument("--partition-records", type=_int_from(1), default=None, metavar="N",
                   help="Parquet: DST is a directory of part-NNNNN.parquet files of N "
                        "records each (default: one file)")
    p.add_argument("--compression", default="zstd", type=str.lower, choices=COMPRESSIONS,
                   help="Parquet codec: zstd, snappy, gzip, lz4, brotli or none")
    _progress_args(p)
    p.set_defaults(func=_cmd_export)
    p = command("gen-unesb", "write the synthetic unesb database, its FST and its native "
                "index")
    p.add_argument("dir", metavar="DIR", help="folder to write DIR/unesb.mst, .xrf, .fst and "
                   ".pdx into (created if missing; the files must not exist)")
    p.add_argument("--scale", type=_int_from(1), default=1, metavar="N",
                   help="size factor: 58,880 x N records")
    p.add_argument("--seed", type=int, default=1, metavar="S",
                   help="random seed; the same scale and seed give identical files")
    p.add_argument("--count", type=_int_from(1), default=None, metavar="N",
                   help="number of records, overriding 58,880 x scale")
    p.add_argument("--no-index", action="store_true",
                   help="skip the native index (build it later: pydb index DIR/unesb)")
    _progress_args(p)
    p.set_defaults(func=_cmd_gen_unesb)
    p = command("stat", "statistics: header, records, versions, garbage, master file, "
                "index (gstat)")
    _db_arg(p)
    p.add_argument("--json", action="store_true", help="the dict of Database.stat() as JSON")
    p.set_defaults(func=_cmd_stat)
    p = command("collect", "collect the garbage collectable now: back versions (the master "
                "file compacted), dead postings and unused files of the native index "
                "(Database.collect; gfix -sweep)",
                epilog="Beside readers and writers of other processes.  Garbage that a "
                "snapshot of another process still sees stays, counted as pinned.  The "
                "dead space that other programs' updates left (WinISIS, CISIS: versions no "
                "XRF entry reaches), which no pydb writer counted, is found by a walk of "
                "the master file and compacted when it is a fifth of it or more; a "
                "record's version that a CDS/ISIS inverted file still reflects is kept.")
    _db_arg(p)
    p.add_argument("--timeout", type=_seconds, default=60.0, metavar="SECONDS",
                   help="the longest the collection may take, waits for the writer lock "
                        "included")
    p.add_argument("--json", action="store_true", help="the dict of Database.collect() as "
                   "JSON")
    p.set_defaults(func=_cmd_collect)
    p = command("mkxrf", "write the cross-reference file (.xrf) anew from a scan of the "
                "master file, as CISIS mkxrf does (a lost or damaged XRF)",
                epilog="Run it on a database no program has open.  Each MFN gets its last "
                "version in the master file; versions past the end of records the control "
                "record names are not taken.")
    _db_arg(p)
    p.add_argument("--layout", default=None, choices=LAYOUTS,
                   help="record leader layout (default: the one the master file's "
                   "records fit)")
    p.add_argument("--replace", action="store_true",
                   help="where an XRF exists, keep a copy as <xrf>.bak and write the new "
                   "one over it (default: refuse)")
    p.add_argument("--force", action="store_true",
                   help="go on where pydb cannot tell whether the database is open "
                   "(another owner's files, a network file system): you make sure "
                   "no program has it open (default: refuse)")
    p.add_argument("--mend-control", action="store_true",
                   help="set the end of records in the control record to the end of the "
                   "last whole version: where the master file is shorter than its control "
                   "record says (cut short; default: leave it, and pydb does not open the "
                   "database), or where versions lie after that end (a damaged "
                   "NXTMFB/NXTMFP: they are taken; default: not taken)")
    p.set_defaults(func=_cmd_mkxrf)
    p = command("index", "build (or rebuild) the native inverted index, beside writers too",
                epilog="Ends with the MFNs read, the time spent reading records and making "
                       "keys (and that phase's rate), and the time spent writing and "
                       "committing the index.")
    _db_arg(p)
    p.add_argument("--fst", metavar="FILE", type=Path,
                   help="FST file (default: the database's .fst, "
                   "else the FST of the index being rebuilt)")
    p.add_argument("--stw", metavar="FILE", type=Path,
                   help="stop-word file (default: the database's "
                   ".stw, else the stop words of the index being rebuilt)")
    p.add_argument("--encoding", default=None, metavar="NAME", type=_codec,
                   help="the database's codec, which picks the key table: utf-8 folds "
                   "keys by Unicode rules, latin-1/cp1252 by the ANSI table, others by "
                   "the DOS table (default: as the index being rebuilt, else the "
                   "encoding detected from the records, as 'pydb info' shows it)")
    p.add_argument("--max-key", type=_int_from(0), default=None, metavar="N",
                   help="cut keys to this many bytes (30: classic ISIS); 0 = no limit "
                   "(default: as the index being rebuilt; else in the cisis mode the "
                   "key length of the shipped .cnt, 0 otherwise)")
    p.add_argument("--key-mode", choices=list(KEY_MODES), default=None,
                   help="cisis: the keys CISIS makes (digits in words as ABCD for "
                   "Windows, key length of the shipped .cnt); unicode: pydb's rules "
                   "(default: as the index being rebuilt; cisis for a database with a "
                   "shipped .cnt or an .fst, else unicode)")
    p.add_argument("--skip-damaged", action="store_true",
                   help="leave records that cannot be read out of the index, each named "
                   "on stderr (default: the first one fails the build and the old index "
                   "stays)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (as --no-progress)")
    _progress_args(p)
    p.set_defaults(func=_cmd_index)
    return ap


def _ascii_locale_to_utf8() -> None:
    """Under the C/POSIX locale stdout's encoding is ASCII: text is written
    as UTF-8 instead (bytes that did not decode, as stored), rather than
    stopping at the first non-ASCII character."""
    out: Any = sys.stdout
    enc = getattr(out, "encoding", None)
    if isinstance(enc, str) and hasattr(out, "reconfigure"):
        with suppress(LookupError):
            if codecs.lookup(enc).name == "ascii":
                out.reconfigure(encoding="utf-8", errors="surrogateescape")


if __name__ == "__main__":
    sys.exit(main())
