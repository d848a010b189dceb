"""Command line: ``python -m pydb COMMAND ...`` (also installed as ``pydb``).

Commands:
  crashtest [DB]   C threads against Python threads (see pydb.crashtest)
  info DB          control record, layout and record counts
  dump DB [MFN..]  records as text (CISIS .id style: !ID / !vTTT!value)
  import SRC DB    ISO 2709 or JSON Lines file into a new database
  export DB DST    database to ISO 2709 (CDS/ISIS or MARC flavour) or JSON Lines
  gen-unesb DIR    write the synthetic unesb database into DIR
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager


@contextmanager
def _progress(total, unit, desc, enabled=True):
    """A tqdm progress bar on stderr when it is a terminal (``disable=None``),
    yielding a function that advances it, or None (no bar: not a terminal,
    `enabled` false, or tqdm missing)."""
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency, but reading must not need it
        tqdm = None
    if tqdm is None or not enabled:
        yield None
        return
    bar = tqdm(total=total, unit=unit, desc=desc, disable=None, leave=False,
               unit_scale=unit == "B", dynamic_ncols=True)
    try:
        yield bar.update if not bar.disable else None
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


def _cmd_info(args) -> int:
    from . import open as open_db
    with open_db(args.db, encoding=args.encoding) as db:
        info = db.info()
        counts = db.counts()
    for k in ("mst_path", "xrf_path", "layout", "mstxl", "next_mfn", "next_block",
              "next_pos", "mftype", "reccnt", "mst_size", "xrf_size"):
        print(f"{k:>20}: {info[k]}")
    for k, v in counts.items():
        print(f"{k:>20}: {v}")
    return 0


def _cmd_dump(args) -> int:
    from . import open as open_db
    out = sys.stdout
    with open_db(args.db, encoding=args.encoding) as db:
        recs = db.read_many(args.mfn) if args.mfn else db.records(deleted=args.deleted)
        total = len(args.mfn) if args.mfn else len(db.mfns(deleted=args.deleted))
        # a bar only when the text goes elsewhere than the terminal
        with _progress(total, "rec", "dump", enabled=not out.isatty()) as tick:
            for rec in recs:
                flag = " (deleted)" if rec.deleted else ""
                out.write(f"!ID {rec.mfn:06d}{flag}\n")
                for f in rec.fields:
                    out.write(f"!v{f.tag:03d}!{f.value}\n")
                if tick:
                    tick(1)
    return 0


def _cmd_import(args) -> int:
    from . import import_iso, import_jsonl
    fmt = "jsonl" if args.flavour == "jsonl" or (
        args.flavour is None and _format_of(args.src, None) == "jsonl") else "iso"
    size = os.path.getsize(args.src)
    if fmt == "jsonl":
        with _progress(None, "rec", "import") as tick:
            rep = import_jsonl(args.src, args.db, layout=args.layout, mstxl=args.mstxl,
                               encoding=args.encoding, on_error=args.on_error,
                               progress=tick)
    else:
        with _progress(size, "B", "import") as tick:
            rep = import_iso(args.src, args.db, flavour=args.flavour or "auto",
                             layout=args.layout, mstxl=args.mstxl, encoding=args.encoding,
                             db_encoding=args.db_encoding, on_error=args.on_error,
                             mfn_tag=args.mfn_tag, progress=tick)
    return _report(rep, "imported")


def _cmd_export(args) -> int:
    from . import export_iso, export_jsonl
    from . import open as open_db
    fmt = args.flavour or ("jsonl" if _format_of(args.dst, None) == "jsonl" else "isis")
    with open_db(args.db, encoding=args.encoding or "utf-8") as db:
        total = len(db.mfns(deleted=args.deleted))
        with _progress(total, "rec", "export") as tick:
            if fmt == "jsonl":
                rep = export_jsonl(db, args.dst, deleted=args.deleted,
                                   encoding=args.encoding or "utf-8",
                                   on_error=args.on_error, progress=tick)
            else:
                rep = export_iso(db, args.dst, fmt, line_ending=args.line_ending,
                                 deleted=args.deleted, mfn_tag=args.mfn_tag,
                                 encoding=args.encoding, on_error=args.on_error,
                                 progress=tick)
    return _report(rep, "exported")


def _cmd_gen_unesb(args) -> int:
    from .unesb import generate
    base = generate(args.dir, scale=args.scale, seed=args.seed)
    print(base)
    return 0


def main(argv=None) -> int:
    """Entry point of ``python -m pydb`` and the ``pydb`` script."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "crashtest":
        from .crashtest import main as crashtest_main
        return crashtest_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m pydb", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("crashtest", help="C vs Python threaded read benchmark (crashtest --help)")
    p = sub.add_parser("info", help="control record, layout and counts")
    p.add_argument("db")
    p.add_argument("--encoding", default="utf-8")
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("dump", help="records as text")
    p.add_argument("db")
    p.add_argument("mfn", nargs="*", type=int)
    p.add_argument("--encoding", default="utf-8")
    p.add_argument("--deleted", action="store_true", help="include logically deleted records")
    p.set_defaults(func=_cmd_dump)
    p = sub.add_parser("import", help="ISO 2709 or JSON Lines file into a new database")
    p.add_argument("src", help="ISO 2709 file, or JSON Lines (.jsonl, or --flavour jsonl)")
    p.add_argument("db", help="base name of the new database (.mst/.xrf are created)")
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
    p.add_argument("--encoding", default=None,
                   help="database character set: JSON Lines strings (default utf-8; "
                        "undecodable values are written as base64) and the MARC "
                        "leader (position 9 'a' only when utf-8 is given)")
    p.add_argument("--deleted", action="store_true",
                   help="also export logically deleted records (status d)")
    p.add_argument("--mfn-tag", type=int, default=None,
                   help="carry each MFN in a first field of this tag")
    p.add_argument("--on-error", choices=["skip", "stop"], default="skip")
    p.set_defaults(func=_cmd_export)
    p = sub.add_parser("gen-unesb", help="write the synthetic unesb database")
    p.add_argument("dir")
    p.add_argument("--scale", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_cmd_gen_unesb)
    args = ap.parse_args(argv)
    from .errors import Error
    try:
        return args.func(args)
    except (Error, OSError, ValueError, LookupError) as e:
        print(f"pydb: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
