"""Soak: one writer process and three reader processes on one database,
all killed (SIGKILL) and restarted at random, for a number of seconds
(docs/reliability.md §2.6).

    python tools/soak.py SECONDS [--encoding cp1252] [--folder DIR] [--index]

The writer opens the database with the background collector (merges and
compactions; sync=True or False at random per start) and updates random
records of 300, each update writing three fields that name the record
and the update.  Each reader, in a loop, reads every record either in a
snapshot or by plain iteration and checks each one whole: its three
fields of one update, the values Python's decoding gives, the raw bytes,
``rec[tag]`` and ``get()``; then ``stat()`` counts 300 active records.
With ``--index`` the database has a native index (field 24's value as
one key), which the writer's commits keep and its collector merges, and
each reader's snapshot pass also searches it in the snapshot
(check_search).
A reader that fails prints its traceback and the run stops with exit
status 1.  At the end the database is read and checked (``check()``)
once more.  Exit status 0: no failure.  Its output's last line counts
the kills and the errors ``check()`` found.

Runs beside a loaded machine find more: the failures it found came under
load (docs/reliability.md §2.6).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time

import pydb

N = 300
PAT = re.compile(r"MFN(\d+) V(\d+)$")


def fields(m: int, k: int, enc: str) -> list[tuple[int, bytes]]:
    v = f"MFN{m} V{k}"
    return [(24, v.encode(enc)), (70, (v + " caf\u00e9").encode(enc)),
            (26, b"x" * (k % 40))]


def writer(base: str, enc: str, seed: int) -> None:
    rnd = random.Random(seed)
    db = pydb.open(base, readonly=False, gc="background", sync=rnd.random() < .5,
                   encoding=enc)
    k = seed * 1_000_000
    while True:
        k += 1
        m = rnd.randint(1, N)
        db.update(m, fields(m, k, enc))


def check(rec, enc: str) -> None:
    f = rec.fields
    assert len(f) == 3, (rec.mfn, f)
    m = PAT.match(f[0].value)
    assert m and int(m.group(1)) == rec.mfn, (rec.mfn, f[0])
    k = int(m.group(2))
    assert f[1].value == f[0].value + " caf\u00e9" and f[1].raw == f[1].value.encode(enc), f[1]
    assert f[2].value == "x" * (k % 40) and f[0].raw == f[0].value.encode(enc)
    assert rec[24] == [f[0].value] and rec.get(70) == f[1].value


def check_search(s, recs: list, rnd: random.Random, old: dict[int, str]) -> None:
    """The snapshot's index agrees with its records: field 24's value is
    one key (FST technique 0), so ``MFN$`` is every record, a record's
    value and its ``"MFN<m> V"$`` find that record alone, and a value of
    an older version (`old`: MFN -> value seen in an earlier snapshot) is
    found nowhere.  `old` is then updated with this snapshot's values."""
    assert list(s.search("MFN$")) == list(range(1, N + 1))
    for rec in rnd.sample(recs, 20):
        value = rec[24][0]
        prefix = value.split()[0]
        for expr in (f'"{value}"', f'"{prefix} V"$', f'"{prefix} V"$ * "{value}"'):
            got = list(s.search(expr))
            # what a failure needs to be understood: the snapshot's
            # commit (0: files mode), the header, a compaction's files
            assert got == [rec.mfn], (expr, got, s.info(), s.database.stat()["header"],
                                      sorted(os.listdir(os.path.dirname(s.path))))
        if old.get(rec.mfn, value) != value:
            got = list(s.search(f'"{old[rec.mfn]}"'))
            assert got == [], (old[rec.mfn], "of an older version", got)
    old.update((rec.mfn, rec[24][0]) for rec in recs)


def reader(base: str, enc: str, seed: int, index: bool) -> None:
    rnd = random.Random(seed)
    db = pydb.open(base, encoding=enc)
    old: dict[int, str] = {}
    while True:
        if rnd.random() < .5:
            with db.snapshot() as s:
                recs = [s[m] for m in range(1, N + 1)]
                for rec in recs:
                    check(rec, enc)
                if index:
                    check_search(s, recs, rnd, old)
        else:
            for rec in db:
                check(rec, enc)
        st = db.stat()
        assert st["records"]["active"] == N, st["records"]


def spawn(fn, *args) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn(*args)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        os._exit(code)
    return pid


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("seconds", type=float)
    ap.add_argument("--encoding", default="utf-8")
    ap.add_argument("--index", action="store_true", help="a native index of field 24, "
                    "searched in each reader's snapshots")
    ap.add_argument("--folder", default=None, help="where the database goes "
                    "(default: a new temporary folder, removed after a run without failure)")
    args = ap.parse_args(argv)
    folder = args.folder or tempfile.mkdtemp(prefix="pydb-soak-")
    base = os.path.join(folder, "db")
    enc = args.encoding
    fst = "24 0 v24\n" if args.index else None
    with pydb.create(base, "isis-packed", encoding=enc, fst=fst) as db:
        for m in range(1, N + 1):
            db.append(fields(m, 0, enc))
    rnd = random.Random(7)
    t_end = time.time() + args.seconds
    kills = {"writer": 0, "reader": 0}
    seed = 1
    w = spawn(writer, base, enc, seed)
    readers = [spawn(reader, base, enc, 100 + i, args.index) for i in range(3)]
    failed = False
    try:
        while time.time() < t_end and not failed:
            time.sleep(rnd.uniform(0.2, 1.0))
            for r in readers + [w]:
                if os.waitpid(r, os.WNOHANG)[0]:
                    print(f"process {r} failed", file=sys.stderr)
                    failed = True
            if failed:
                break
            seed += 1
            if rnd.random() < .7:
                os.kill(w, signal.SIGKILL)
                os.waitpid(w, 0)
                kills["writer"] += 1
                w = spawn(writer, base, enc, seed)
            else:
                i = rnd.randrange(3)
                os.kill(readers[i], signal.SIGKILL)
                os.waitpid(readers[i], 0)
                kills["reader"] += 1
                readers[i] = spawn(reader, base, enc, 200 + seed + i, args.index)
    finally:
        for p in [w] + readers:
            try:
                os.kill(p, signal.SIGKILL)
                os.waitpid(p, 0)
            except ChildProcessError:
                pass
            except ProcessLookupError:
                pass
    if failed:
        print(f"failed; the database is left in {folder}", file=sys.stderr)
        return 1
    with pydb.open(base, encoding=enc) as db:
        for rec in db:
            check(rec, enc)
        if args.index:
            with db.snapshot() as s:
                check_search(s, [s[m] for m in range(1, N + 1)], rnd, {})
        errors = db.check().errors
    print(f"kills {kills}, check() errors {errors}")
    if errors:
        return 1
    if args.folder is None:
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
