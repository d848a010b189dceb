"""Command line: ``python -m pydb COMMAND ...`` (also installed as ``pydb``).

Commands:
  crashtest [DB]   C threads against Python threads (see pydb.crashtest)
  gctest [DB]      Firebird's garbage-collector experiment: N clients, serial
                   and parallel, per collection policy (see pydb.gctest)
  info DB          control record, layout and record counts
  dump DB [MFN..]  records as text (CISIS .id style: !ID / !vTTT!value)
  terms DB [PREFIX] keys of the inverted index with posting counts
  postings DB KEY  postings (MFN, TAG, OCC, CNT) of one key
  search DB EXPR   MFNs matching a CDS/ISIS search expression
  check DB         validate everything; exit 0 sound, 1 damaged, 2 cannot
                   open / usage (see pydb.check)
  import SRC DB    ISO 2709 or JSON Lines file into a new database, or
                   appended to an existing one
  export DB DST    database to ISO 2709 (CDS/ISIS or MARC flavour) or JSON Lines
  gen-unesb DIR    write the synthetic unesb database, its FST and its native
                   index into DIR (--no-index: without the index)
  ministat FILE..  statistics and Student's t comparison (FreeBSD ministat)
  stat DB          gstat: commit header, records, versions, garbage (pinned
                   and collectable), master file, native index (--json)
  index DB         build (or rebuild) the native inverted index, beside writers
                   too (FST: --fst FILE, else the database's own .fst, else
                   the index's; encoding and key length as the index's
                   unless --encoding/--max-key), with a progress bar
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager

from . import crashtest, gctest, ministat
from .check import CheckReport, Problem
from .database import open as open_db
from .errors import CorruptionError, Error, SearchSyntaxError
from .exchange import export_iso, export_jsonl, import_iso, import_jsonl
from .native import _stored_or_none, build_index
from .paths import find_sidecar
from .unesb import generate

# The --encoding of the commands that read a database (info, dump, terms,
# postings, search).
_ENCODING_HELP = ("codec of the field values (any Python codec name); default auto: "
                  "detected from the records and ABCD's configuration files (info "
                  "shows the choice and the evidence)")


@contextmanager
def _progress(total, unit, desc, enabled=True, force=False, absolute=False):
    """A tqdm progress bar on stderr when it is a terminal (``disable=None``),
    or always with `force`.  Yields a function that advances it, or None
    (no bar: not a terminal, `enabled` false, or tqdm missing).  The
    function takes the count just done, or with `absolute` the pair
    (done so far, total) that ``Database.check`` reports."""
    try:
        from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]
    except ImportError:  # tqdm is a dependency, but reading must not need it
        tqdm = None
    if tqdm is None or not enabled:
        yield None
        return
    bar = tqdm(total=total, unit=unit, desc=desc, disable=False if force else None,
               leave=False, unit_scale=unit == "B", dynamic_ncols=True, file=sys.stderr)
    if bar.disable:
        tick = None
    elif absolute:
        def tick(done, total):
            bar.total = total
            bar.update(done - bar.n)
    else:
        tick = bar.update
    try:
        yield tick
    finally:
        bar.close()


def _format_of(path, given):
    if given:
        return given
    return "jsonl" if os.fsdecode(path).lower().endswith((".jsonl", ".json", ".ndjson")) else None


def _report(rep, what, verbose_errors=5):
    for e in rep.errors[:verbose_errors]:
        print(f"pydb: skipped: {e}", file=sys.stderr)
    if len(rep.errors) > verbose_errors:
        print(f"pydb: ... and {len(rep.errors) - verbose_errors} more skipped record(s)",
              file=sys.stderr)
    extra = f", {rep.repaired} repaired" if rep.repaired else ""
    print(f"{what} {rep.records} record(s){extra}, {len(rep.errors)} skipped", file=sys.stderr)
    return 1 if rep.errors else 0


def _write_record(out, rec, mfn_digits, mark_deleted):
    """A record as text: "!ID MFN" (zero-padded to `mfn_digits`, plus
    " (deleted)" for a logically deleted record with `mark_deleted`), then
    one "!vTAG!value" line per field."""
    flag = " (deleted)" if mark_deleted and rec.deleted else ""
    out.write(f"!ID {rec.mfn:0{mfn_digits}d}{flag}\n")
    for f in rec.fields:
        out.write(f"!v{f.tag:03d}!{f.value}\n")


def _cmd_info(args) -> int:
    with open_db(args.db, encoding=args.encoding) as db:
        info = db.info()
        counts = db.counts()
    for k in ("mst_path", "xrf_path", "layout", "mstxl", "next_mfn", "next_block",
              "next_pos", "mftype", "reccnt", "mst_size", "xrf_size"):
        print(f"{k:>20}: {info[k]}")
    for k, v in counts.items():
        print(f"{k:>20}: {v}")
    det = db.encoding_detection
    print(f"{'encoding':>20}: {db.encoding}" + (f" (auto: {det.summary()})" if det else ""))
    return 0


def _cmd_dump(args) -> int:
    out = sys.stdout
    with open_db(args.db, encoding=args.encoding) as db:
        recs = db.read_many(args.mfn) if args.mfn else db.records(deleted=args.deleted)
        total = len(args.mfn) if args.mfn else len(db.mfns(deleted=args.deleted))
        # a bar only when the text goes elsewhere than the terminal
        with _progress(total, "rec", "dump", enabled=not out.isatty()) as tick:
            for rec in recs:
                _write_record(out, rec, 6, True)
                if tick:
                    tick(1)
    return 0


def _open_with_index(args):
    """The database with its inverted index, or None (message printed)."""
    db = open_db(args.db, encoding=args.encoding)
    if db.index is None:
        db.close()
        print(f"pydb: {args.db}: the database has no inverted index", file=sys.stderr)
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
        for p in db.postings(args.key, raw=args.raw):
            out.write(f"{p.mfn}\t{p.tag}\t{p.occ}\t{p.cnt}\n")
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
        out.write(f"{len(result)} records\n")
        if args.dump:
            for rec in result.records():
                _write_record(out, rec, 7, False)
        else:
            for mfn in result:
                out.write(f"{mfn}\n")
    return 0


def _cmd_check(args) -> int:
    """Exit status: 0 no error (warnings allowed unless --strict), 1 any
    error (or any warning with --strict), 2 the database cannot be opened
    (missing file, I/O error, unsupported) or bad usage."""
    if args.max_problems < 0:
        print("pydb check: --max-problems must be >= 0", file=sys.stderr)
        return 2
    try:
        db = open_db(args.db)
    except CorruptionError as e:
        # Damage that stops the open is a finding, not a usage error.
        prob = Problem("open", "error", 0, e.filename or args.db,
                       e.offset if e.offset is not None else -1, e.reason)
        report = CheckReport(args.db, [prob], {"open": 1},
                             {"errors": 1, "warnings": 0, "truncated": False})
    except (Error, OSError) as e:
        print(f"pydb check: cannot open {args.db}: {e}", file=sys.stderr)
        return 2
    else:
        with db:
            show = args.progress if args.progress is not None else sys.stderr.isatty()
            total = db.max_mfn + db.info()["mst_size"] // 512 if show else 0
            with _progress(total, "step", "check", enabled=show and (
                    total >= 2048 or args.progress), force=bool(args.progress),
                    absolute=True) as progress:
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
    return 1 if failed else 0
def _cmd_import(args) -> int:
    fmt = "jsonl" if args.flavour == "jsonl" or (
        args.flavour is None and _format_of(args.src, None) == "jsonl") else "iso"
    size = os.path.getsize(args.src)
    if fmt == "jsonl":
        with _progress(None, "rec", "import") as tick:
            rep = import_jsonl(args.src, args.db, layout=args.layout, mstxl=args.mstxl,
                               encoding=args.encoding, on_error=args.on_error,
                               progress=tick, max_gap=args.max_gap)
    else:
        with _progress(size, "B", "import") as tick:
            rep = import_iso(args.src, args.db, flavour=args.flavour or "auto",
                             layout=args.layout, mstxl=args.mstxl, encoding=args.encoding,
                             db_encoding=args.db_encoding, on_error=args.on_error,
                             mfn_tag=args.mfn_tag, progress=tick,
                             max_gap=args.max_gap)
    if rep.records == 0 and not rep.errors and size > 0:
        print(f"pydb: no record found in {args.src} ({size} bytes): not "
              f"{'JSON Lines' if fmt == 'jsonl' else 'ISO 2709'}?", file=sys.stderr)
        return 1
    return _report(rep, "imported")


def _cmd_export(args) -> int:
    fmt = args.flavour or ("jsonl" if _format_of(args.dst, None) == "jsonl" else "isis")
    if os.path.exists(args.dst) and not args.force:
        print(f"pydb: {args.dst} exists (use --force to replace it)", file=sys.stderr)
        return 1
    with open_db(args.db, encoding=args.encoding or "utf-8") as db:
        total = len(db.mfns(deleted=args.deleted))
        with _progress(total, "rec", "export") as tick:
            if fmt == "jsonl":
                rep = export_jsonl(db, args.dst, deleted=args.deleted,
                                   encoding=args.encoding or "utf-8",
                                   on_error=args.on_error, progress=tick)
            else:
                rep = export_iso(db, args.dst, fmt, line_ending=args.line_ending,
                                 line_width=args.line_width,
                                 deleted=args.deleted, mfn_tag=args.mfn_tag,
                                 encoding=args.encoding, on_error=args.on_error,
                                 progress=tick)
    return _report(rep, "exported")


def _cmd_gen_unesb(args) -> int:
    base = generate(args.dir, scale=args.scale, seed=args.seed, count=args.count,
                    index=not args.no_index,
                    progress=not args.no_index)
    print(base)
    return 0


def _cmd_index(args) -> int:
    if (args.fst is None and find_sidecar(args.db, "fst") is None
            and _stored_or_none(args.db) is None):
        print(f"pydb: {args.db}: the database has no .fst file and no index to take the FST "
              "from; give one with --fst FILE", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    n = build_index(args.db, fst=args.fst, stw=args.stw, progress=not args.quiet,
                    encoding=args.encoding, max_key=args.max_key)
    dt = time.perf_counter() - t0
    print(f"indexed {n} MFNs in {dt:.2f} s ({n / dt if dt else 0:,.0f} records/s)")
    return 0


def _stat_text(path: str, s: dict) -> str:
    """The report of ``pydb stat`` (gstat-like sections) from db.stat()."""
    h, r, v, g, m, ix = (s["header"], s["records"], s["versions"], s["garbage"],
                         s["master_file"], s["index"])
    last = h["last_collection"]
    when = "never" if last is None else time.strftime(
        "%Y-%m-%d %H:%M:%S", time.localtime(last))
    oldest = "-" if h["oldest_reader_commit"] is None else h["oldest_reader_commit"]
    rows: list[tuple[str, list[tuple[str, object]]]] = [
        ("Database header", [
            ("Commit", h["commit"]),
            ("Oldest reader commit", oldest),
            ("Behind (commits)", h["behind"]),
            ("Registered readers", h["readers"]),
            ("GC policy", h["gc_policy"]),
            ("Master file generation", h["file_generation"]),
            ("Collections", h["collections"]),
            ("Last collection", when),
            ("Last collected", ", ".join(f"{k} {n}" for k, n in h["last"].items())),
            ("Last error", h["last_error"] or "-"),
            ("Collector pending", "yes" if h["pending"] else "no"),
            ("Collecting process", h["collector_pid"] or "-")]),
        ("Records", [
            ("Active", r["active"]), ("Logically deleted", r["deleted"]),
            ("Next MFN", r["next_mfn"])]),
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
        rows.append(("Native index", [("Present", "no")]))
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


def _cmd_stat(args) -> int:
    """A writable handle with the policy none when the files allow it (the
    native index reports its figures only to a writer; nothing is
    collected), else a read-only one (no index figures)."""
    try:
        db = open_db(args.db, readonly=False, gc="none")
    except (PermissionError, Error):
        db = open_db(args.db)
    with db:
        s = db.stat()
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        sys.stdout.write(_stat_text(args.db, s))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pydb`` and the ``pydb`` script: run the
    command in `argv` (default ``sys.argv[1:]``) and return the exit status
    (0 done; 1 failed, with the reason on stderr; ``check`` documents its
    own).  pydb errors, OSError, ValueError and LookupError become a
    message and status 1, a closed stdout (BrokenPipeError) status 0.
    Raises SystemExit (status 2) for bad usage, from argparse."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "crashtest":
        return crashtest.main(argv[1:])
    if argv and argv[0] == "ministat":
        return ministat.main(argv[1:])
    if argv and argv[0] == "gctest":
        return gctest.main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m pydb", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("crashtest", help="C vs Python threaded read benchmark (crashtest --help)")
    sub.add_parser("ministat", help="statistics of repeated measurements (ministat --help)")
    sub.add_parser("gctest", help="garbage-collection experiment, per policy (gctest --help)")
    p = sub.add_parser("info", help="control record, layout and counts")
    p.add_argument("db")
    p.add_argument("--encoding", default="auto", help=_ENCODING_HELP)
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("dump", help="records as text")
    p.add_argument("db")
    p.add_argument("mfn", nargs="*", type=int)
    p.add_argument("--encoding", default="auto", help=_ENCODING_HELP)
    p.add_argument("--deleted", action="store_true", help="include logically deleted records")
    p.set_defaults(func=_cmd_dump)
    p = sub.add_parser("terms", help="keys of the inverted index, in order, with posting counts")
    p.add_argument("db")
    p.add_argument("prefix", nargs="?", default="",
                   help="only keys starting with this (brought into key form)")
    p.add_argument("--start", default=None, help="first key (inclusive)")
    p.add_argument("--limit", type=int, default=None, help="at most N keys")
    p.add_argument("--encoding", default="auto", help=_ENCODING_HELP)
    p.set_defaults(func=_cmd_terms)
    p = sub.add_parser("postings", help="postings (MFN TAG OCC CNT) of one key")
    p.add_argument("db")
    p.add_argument("key")
    p.add_argument("--raw", action="store_true",
                   help="look the key up as given (no upper-casing)")
    p.add_argument("--encoding", default="auto", help=_ENCODING_HELP)
    p.set_defaults(func=_cmd_postings)
    p = sub.add_parser("search", help="MFNs matching a CDS/ISIS search expression")
    p.add_argument("db")
    p.add_argument("expr", help='e.g. "PLANT$ * WATER/(24)"')
    p.add_argument("--dump", action="store_true", help="print the records, not just MFNs")
    p.add_argument("--encoding", default="auto", help=_ENCODING_HELP)
    p.set_defaults(func=_cmd_search)
    p = sub.add_parser("check", help="validate a database (exit 0 sound, 1 damaged, 2 cannot open)",
                       description="Walk the control record, every XRF entry, every record "
                       "version and back-pointer chain, and scan the master file for "
                       "unreachable versions; print each fault with its location, then a "
                       "count per kind.  Exit status: 0 no error (warnings allowed unless "
                       "--strict), 1 errors found, 2 cannot open the database or bad usage.")
    p.add_argument("db")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--max-problems", type=int, default=1000, metavar="N",
                   help="print at most N problems (all are counted; default 1000)")
    p.add_argument("--strict", action="store_true", help="warnings also make the exit status 1")
    p.add_argument("--errors-only", action="store_true", help="print only errors (text output)")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="progress bar on stderr (default: on a terminal, for large databases)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("import", help="ISO 2709 or JSON Lines file into a new database "
                       "(or appended to an existing one)")
    p.add_argument("src", help="ISO 2709 file, or JSON Lines (.jsonl, or --flavour jsonl)")
    p.add_argument("db", help="base name of the database (.mst/.xrf are created if "
                   "missing; an existing database gets the records appended)")
    p.add_argument("--flavour", choices=["auto", "isis", "marc", "jsonl"], default=None,
                   help="input format (default: auto-detected ISO 2709; .jsonl files: JSON Lines)")
    p.add_argument("--layout", default="isis-packed",
                   choices=["isis-packed", "isis-aligned", "ffi-packed", "ffi-aligned"])
    p.add_argument("--mstxl", type=int, default=0, help="MSTXL alignment shift 0..6")
    p.add_argument("--encoding", default="utf-8",
                   help="character set of the input (ISO: for lengths counted in "
                        "characters; JSON Lines: to turn strings back into bytes)")
    p.add_argument("--db-encoding", default=None,
                   help="ISO input: transcode values from --encoding to this "
                        "character set (default: store the file's bytes)")
    p.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                   help="skip bad records and report them (exit status 1), or stop")
    p.add_argument("--mfn-tag", type=int, default=None,
                   help="tag of the field that carries each record's MFN (export --mfn-tag)")
    p.add_argument("--max-gap", type=int, default=1_000_000,
                   help="new database: a record whose MFN lies more than this beyond "
                        "the previous one is an error (default 1000000)")
    p.set_defaults(func=_cmd_import)
    p = sub.add_parser("export", help="database to ISO 2709 or JSON Lines")
    p.add_argument("db")
    p.add_argument("dst")
    p.add_argument("--flavour", choices=["isis", "marc", "jsonl"], default=None,
                   help="isis (default; '#' terminators, 80-column lines), marc, or "
                        "jsonl (default when DST ends in .jsonl)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--crlf", dest="line_ending", action="store_const", const="\r\n",
                   help="CRLF line ends (WinISIS)")
    g.add_argument("--lf", dest="line_ending", action="store_const", const="\n",
                   help="LF line ends (default for the isis flavour)")
    p.add_argument("--line-width", type=int, default=None, metavar="N",
                   help="bytes per line, line ends not counted (default 80 for isis, "
                        "none for marc; 80 writes MARC as J-ISIS does; 0: no lines)")
    p.add_argument("--encoding", default=None,
                   help="database character set: JSON Lines strings (default utf-8; "
                        "undecodable values are written as base64) and the MARC "
                        "leader (position 9 'a' only when utf-8 is given)")
    p.add_argument("--deleted", action="store_true",
                   help="also export logically deleted records (status d)")
    p.add_argument("--mfn-tag", type=int, default=None,
                   help="carry each MFN in a first field of this tag")
    p.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                   help="skip: leave out (and list) records that cannot be read or "
                        "written and go on (default); stop: fail at the first one")
    p.add_argument("--force", action="store_true",
                   help="replace DST if it exists (never one of the database's files)")
    p.set_defaults(func=_cmd_export)
    p = sub.add_parser("gen-unesb", help="write the synthetic unesb database, its FST "
                       "and its native index")
    p.add_argument("dir")
    p.add_argument("--scale", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count", type=int, default=None,
                   help="number of records, overriding 58,880 x scale")
    p.add_argument("--no-index", action="store_true",
                   help="skip the native index (build it later: python -m pydb index DIR/unesb)")
    p.set_defaults(func=_cmd_gen_unesb)
    p = sub.add_parser("stat", help="statistics: header, records, versions, garbage, "
                       "master file, index (gstat)")
    p.add_argument("db")
    p.add_argument("--json", action="store_true", help="the dict of Database.stat() as JSON")
    p.set_defaults(func=_cmd_stat)
    p = sub.add_parser("index", help="build the native inverted index")
    p.add_argument("db")
    p.add_argument("--fst", help="FST file (default: the database's .fst, else the FST "
                   "of the index being rebuilt)")
    p.add_argument("--stw", help="stop-word file (default: the database's .stw, else the "
                   "stop words of the index being rebuilt)")
    p.add_argument("--encoding", default=None,
                   help="utf-8 folds keys by Unicode rules; else 8-bit ISIS tables "
                   "(default: as the index being rebuilt; 8-bit for a new one)")
    p.add_argument("--max-key", type=int, default=None,
                   help="cut keys to this many bytes (30: classic ISIS); 0 = no limit "
                   "(default: as the index being rebuilt; 0 for a new one)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_index)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:     # `pydb dump DB | head`: the reader had enough
        return 0
    except (Error, OSError, ValueError, LookupError) as e:
        print(f"pydb: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
