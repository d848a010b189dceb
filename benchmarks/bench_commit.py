"""Durable single-record commits: pydb (``sync=True``) against SQLite in
WAL mode with ``synchronous=FULL`` and py-lmdb (its default, synced
commits), in the same run, on the same records (issue 12's row "durable
single-record commits").

Each round commits ``COMMITS`` records of the benchmark database (about
1 KB each), one per transaction, into a new store, and closes it; the
``-index`` / ``-fts5`` pair does the same with a word index kept by the
same commits (pydb's native index with the unesb FST, SQLite's FTS5
table of each record's text in the same transaction; pydb with its
default collection policy, `background`, whose thread merges the
commits' segments as FTS5's automerge does in its commits).  pydb's
close is a checkpoint (the .mst/.xrf fdatasync'ed, the log emptied;
csrc/wal.h), so its cost is in the figure.  Rate = COMMITS / time.

Run: ``python -m pytest benchmarks/bench_commit.py --benchmark-only``
(py-lmdb: ``pip install '.[lmdb]'``); compare the medians.  Or
``python -m benchmarks.bench_commit [ROUNDS]``: the stores take turns,
ROUNDS rounds each (default 15), and it prints each store's median
commits/s and ministat's verdict (95%) of pydb's round times against
its peer's (PAIRS).
"""

from __future__ import annotations

import os
import sqlite3
import sys

import pytest

import pydb
from pydb import unesb

from .peers import in_new_folders, serialize, take_turns

COMMITS = 200


@pytest.fixture(scope="module")
def recs(bench_db):
    """COMMITS records of the benchmark database: (fields, serialized)."""
    out = []
    with pydb.open(bench_db) as db:
        for r in db:
            out.append(([(f.tag, f.raw) for f in r.fields], serialize(r)))
            if len(out) == COMMITS:
                break
    return out


def commit_pydb(folder, recs, fst=None, gc="none") -> int:
    db = pydb.create(folder / "c", sync=True, gc=gc, fst=fst)
    try:
        for fields, _ in recs:
            db.append(fields)
        return db.max_mfn
    finally:
        db.close()


def commit_pydb_index(folder, recs) -> int:
    # the default collection policy: its thread merges the commits'
    # segments as FTS5's automerge does inside its commits
    return commit_pydb(folder, recs, fst=unesb.FST, gc="background")


def commit_sqlite(folder, recs, fts5=False) -> int:
    con = sqlite3.connect(os.fspath(folder / "c.sqlite"), isolation_level=None)
    try:
        con.execute("pragma journal_mode=wal")
        con.execute("pragma synchronous=full")
        con.execute("create table rec (mfn integer primary key, data blob)")
        if fts5:
            con.execute("create virtual table words using fts5(body)")
        for i, (_, data) in enumerate(recs, 1):
            con.execute("begin")
            con.execute("insert into rec values (?, ?)", (i, data))
            if fts5:
                con.execute("insert into words (rowid, body) values (?, ?)",
                            (i, data.decode("utf-8", "replace")))
            con.execute("commit")
        return con.execute("select count(*) from rec").fetchone()[0]
    finally:
        con.close()


def commit_sqlite_fts5(folder, recs) -> int:
    return commit_sqlite(folder, recs, fts5=True)


def commit_lmdb(folder, recs) -> int:
    import lmdb
    env = lmdb.open(os.fspath(folder), map_size=1 << 30, sync=True)
    try:
        for i, (_, data) in enumerate(recs, 1):
            with env.begin(write=True) as txn:
                txn.put(i.to_bytes(4, "big"), data)
        return env.stat()["entries"]
    finally:
        env.close()


STORES = {"pydb": commit_pydb, "sqlite3": commit_sqlite, "lmdb": commit_lmdb,
          "pydb-index": commit_pydb_index, "sqlite3-fts5": commit_sqlite_fts5}
#: (pydb's store, the peer it is compared with) in main()
PAIRS = [("pydb", "sqlite3"), ("pydb", "lmdb"), ("pydb-index", "sqlite3-fts5")]


@pytest.mark.parametrize("store", list(STORES))
def test_durable_commits(benchmark, tmp_path, recs, store):
    if store == "lmdb":
        pytest.importorskip("lmdb", reason="py-lmdb not installed (pip install 'pydb[lmdb]')")
    n = in_new_folders(benchmark, STORES[store], tmp_path, (recs,), 7)
    assert n == len(recs) == COMMITS


def main(argv: list[str]) -> int:
    """Alternate the stores ROUNDS times; print rates and verdicts."""
    rounds = int(argv[0]) if argv else 15
    stores = dict(STORES)
    try:
        import lmdb  # noqa: F401
    except ImportError:
        del stores["lmdb"]
    recs = []
    with pydb.open(unesb.default_database()) as db:
        for r in db:
            recs.append(([(f.tag, f.raw) for f in r.fields], serialize(r)))
            if len(recs) == COMMITS:
                break
    take_turns(stores, PAIRS, rounds, (recs,), COMMITS, "commits/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
