"""Command line: ``python -m pydb COMMAND ...`` (also installed as ``pydb``).

Commands:
  crashtest [DB]   C threads against Python threads (see pydb.crashtest)
  info DB          control record, layout and record counts
  dump DB [MFN..]  records as text (CISIS .id style: !ID / !vTTT!value)
  gen-unesb DIR    write the synthetic unesb database into DIR
  index DB         build the native inverted index (FST: the database's own
                   .fst or --fst FILE), with a progress bar
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


def _cmd_gen_unesb(args) -> int:
    from .unesb import generate
    base = generate(args.dir, scale=args.scale, seed=args.seed)
    print(base)
    return 0


def _cmd_index(args) -> int:
    import time
    from .native import build_index
    t0 = time.perf_counter()
    n = build_index(args.db, fst=args.fst, stw=args.stw, progress=not args.quiet,
                    encoding=args.encoding, max_key=args.max_key)
    dt = time.perf_counter() - t0
    print(f"indexed {n} MFNs in {dt:.2f} s ({n / dt if dt else 0:,.0f} records/s)")
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
    p = sub.add_parser("gen-unesb", help="write the synthetic unesb database")
    p.add_argument("dir")
    p.add_argument("--scale", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=_cmd_gen_unesb)
    p = sub.add_parser("index", help="build the native inverted index")
    p.add_argument("db")
    p.add_argument("--fst", help="FST file (default: the database's .fst)")
    p.add_argument("--stw", help="stop-word file (default: the database's .stw)")
    p.add_argument("--encoding", default="latin-1",
                   help="utf-8 folds keys by Unicode rules; else 8-bit ISIS tables")
    p.add_argument("--max-key", type=int, default=0,
                   help="cut keys to this many bytes (30: classic ISIS); 0 = no limit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_index)
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
