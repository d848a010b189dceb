"""Command line: ``python -m pydb COMMAND ...`` (also installed as ``pydb``).

Commands:
  crashtest [DB]   C threads against Python threads (see pydb.crashtest)
  info DB          control record, layout and record counts
  dump DB [MFN..]  records as text (CISIS .id style: !ID / !vTTT!value)
  terms DB [PREFIX] keys of the inverted index with posting counts
  postings DB KEY  postings (MFN, TAG, OCC, CNT) of one key
  gen-unesb DIR    write the synthetic unesb database into DIR
"""

from __future__ import annotations

import argparse
import sys


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
        for rec in recs:
            flag = " (deleted)" if rec.deleted else ""
            out.write(f"!ID {rec.mfn:06d}{flag}\n")
            for f in rec.fields:
                out.write(f"!v{f.tag:03d}!{f.value}\n")
    return 0


def _open_with_index(args):
    """The database with its inverted index, or None (message printed)."""
    from . import open as open_db
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
    character (truncation to LE, isis-formats.md §5.3)."""
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
    p = sub.add_parser("terms", help="keys of the inverted index, in order, with posting counts")
    p.add_argument("db")
    p.add_argument("prefix", nargs="?", default="",
                   help="only keys starting with this (brought into key form)")
    p.add_argument("--start", default=None, help="first key (inclusive)")
    p.add_argument("--limit", type=int, default=None, help="at most N keys")
    p.add_argument("--encoding", default="utf-8")
    p.set_defaults(func=_cmd_terms)
    p = sub.add_parser("postings", help="postings (MFN TAG OCC CNT) of one key")
    p.add_argument("db")
    p.add_argument("key")
    p.add_argument("--raw", action="store_true",
                   help="look the key up as given (no upper-casing)")
    p.add_argument("--encoding", default="utf-8")
    p.set_defaults(func=_cmd_postings)
    p = sub.add_parser("gen-unesb", help="write the synthetic unesb database")
    p.add_argument("dir")
    p.add_argument("--scale", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_cmd_gen_unesb)
    args = ap.parse_args(argv)
    from .errors import Error
    try:
        return args.func(args)
    except (Error, OSError) as e:
        print(f"pydb: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
