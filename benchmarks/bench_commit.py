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

The ``-threads`` stores commit THREAD_COMMITS records from THREADS
threads of one process, one record per transaction, durably: pydb's
threads share one Database, whose waiting ``append`` calls share a
transaction and its fsync (group commit, csrc/group.c); SQLite's share one
connection (WAL, ``synchronous=FULL``) under a lock, the way a threaded
service serialises its writers on one connection (a connection per
thread fares worse: the loser of the write lock sleeps in SQLite's busy
handler); py-lmdb's share one environment (its writer mutex).

The ``-procs`` stores commit the same THREAD_COMMITS records from PROCS
processes (forked; each opens the store itself), one record per durable
transaction: pydb's handles of several processes share fsyncs through the
log's synced mark (csrc/txn.c, "One fsync for many commits"); SQLite's
connections (WAL, ``synchronous=FULL``, a busy timeout) and py-lmdb's
environments wait for the writer lock, one fsync each.

The ``-normal`` pair commits the same records with the guarantee of
SQLite's WAL mode with ``synchronous=NORMAL``: a power cut may lose
recent commits and never damages the database (pydb ``sync=False``,
which fsyncs a commit's frame only when it writes a block in place that
no synced frame holds: csrc/txn.c, "Commits without fsync").

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
import threading

import pytest

import pydb
from pydb import unesb

from .peers import in_new_folders, serialize, take_turns

COMMITS = 200
THREADS = 8
THREAD_COMMITS = 800   # THREADS x 100: record j is recs[j % COMMITS]
PROCS = 4


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


def commit_pydb(folder, recs, fst=None, gc="none", sync=True) -> int:
    db = pydb.create(folder / "c", sync=sync, gc=gc, fst=fst)
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


def commit_pydb_normal(folder, recs) -> int:
    # sync=False: fsyncs only to keep a power cut harmless (csrc/txn.c,
    # "Commits without fsync"), as SQLite's synchronous=NORMAL
    return commit_pydb(folder, recs, sync=False)


def commit_sqlite(folder, recs, fts5=False, synchronous="full") -> int:
    con = sqlite3.connect(os.fspath(folder / "c.sqlite"), isolation_level=None)
    try:
        con.execute("pragma journal_mode=wal")
        con.execute(f"pragma synchronous={synchronous}")
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


def commit_sqlite_normal(folder, recs) -> int:
    return commit_sqlite(folder, recs, synchronous="normal")


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


def in_threads(commit_one, recs) -> None:
    """THREADS threads; thread t calls commit_one(j, fields, data) for
    every j < THREAD_COMMITS with j % THREADS == t (record j is recs[j %
    COMMITS]); the first exception is raised here."""
    errors: list[BaseException] = []

    def work(t):
        try:
            for j in range(t, THREAD_COMMITS, THREADS):
                fields, data = recs[j % len(recs)]
                commit_one(j, fields, data)
        except BaseException as e:  # raised again below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def commit_pydb_threads(folder, recs) -> int:
    db = pydb.create(folder / "c", sync=True, gc="none")
    try:
        in_threads(lambda j, fields, data: db.append(fields), recs)
        return db.max_mfn
    finally:
        db.close()


def commit_sqlite_threads(folder, recs) -> int:
    con = sqlite3.connect(os.fspath(folder / "c.sqlite"), isolation_level=None,
                          check_same_thread=False)
    lock = threading.Lock()
    try:
        con.execute("pragma journal_mode=wal")
        con.execute("pragma synchronous=full")
        con.execute("create table rec (mfn integer primary key, data blob)")

        def one(j, fields, data):
            with lock:
                con.execute("begin")
                con.execute("insert into rec values (?, ?)", (j + 1, data))
                con.execute("commit")

        in_threads(one, recs)
        return con.execute("select count(*) from rec").fetchone()[0]
    finally:
        con.close()


def commit_lmdb_threads(folder, recs) -> int:
    import lmdb
    env = lmdb.open(os.fspath(folder), map_size=1 << 30, sync=True)
    try:
        def one(j, fields, data):
            with env.begin(write=True) as txn:
                txn.put((j + 1).to_bytes(4, "big"), data)

        in_threads(one, recs)
        return env.stat()["entries"]
    finally:
        env.close()


def in_processes(work) -> None:
    """PROCS forked processes; process p calls work(p, js), js the
    record numbers j < THREAD_COMMITS with j % PROCS == p; an exception
    or a child that does not exit 0 raises RuntimeError here."""
    pids = []
    for p in range(PROCS):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                work(p, range(p, THREAD_COMMITS, PROCS))
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    bad = [st for st in (os.waitpid(pid, 0)[1] for pid in pids) if st != 0]
    if bad:
        raise RuntimeError(f"{len(bad)} of {PROCS} writer processes failed: {bad}")


def commit_pydb_procs(folder, recs) -> int:
    pydb.create(folder / "c", sync=True, gc="none").close()

    def work(p, js):
        with pydb.open(folder / "c", readonly=False, sync=True, gc="none") as db:
            for j in js:
                db.append(recs[j % len(recs)][0])

    in_processes(work)
    with pydb.open(folder / "c") as db:
        return db.max_mfn


def commit_sqlite_procs(folder, recs) -> int:
    path = os.fspath(folder / "c.sqlite")
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("pragma journal_mode=wal")
    con.execute("create table rec (mfn integer primary key, data blob)")
    con.close()

    def work(p, js):
        con = sqlite3.connect(path, isolation_level=None, timeout=60)
        try:
            con.execute("pragma synchronous=full")
            for j in js:
                con.execute("begin immediate")
                con.execute("insert into rec values (?, ?)", (j + 1, recs[j % len(recs)][1]))
                con.execute("commit")
        finally:
            con.close()

    in_processes(work)
    con = sqlite3.connect(path)
    try:
        return con.execute("select count(*) from rec").fetchone()[0]
    finally:
        con.close()


def commit_lmdb_procs(folder, recs) -> int:
    import lmdb

    def work(p, js):
        env = lmdb.open(os.fspath(folder), map_size=1 << 30, sync=True)
        try:
            for j in js:
                with env.begin(write=True) as txn:
                    txn.put((j + 1).to_bytes(4, "big"), recs[j % len(recs)][1])
        finally:
            env.close()

    lmdb.open(os.fspath(folder), map_size=1 << 30).close()
    in_processes(work)
    env = lmdb.open(os.fspath(folder), map_size=1 << 30)
    try:
        return env.stat()["entries"]
    finally:
        env.close()


STORES = {"pydb": commit_pydb, "sqlite3": commit_sqlite, "lmdb": commit_lmdb,
          "pydb-index": commit_pydb_index, "sqlite3-fts5": commit_sqlite_fts5,
          "pydb-normal": commit_pydb_normal, "sqlite3-normal": commit_sqlite_normal}
THREAD_STORES = {"pydb-threads": commit_pydb_threads,
                 "sqlite3-threads": commit_sqlite_threads,
                 "lmdb-threads": commit_lmdb_threads,
                 "pydb-procs": commit_pydb_procs,
                 "sqlite3-procs": commit_sqlite_procs,
                 "lmdb-procs": commit_lmdb_procs}
#: (pydb's store, the peer it is compared with) in main()
PAIRS = [("pydb", "sqlite3"), ("pydb", "lmdb"), ("pydb-index", "sqlite3-fts5"),
         ("pydb-normal", "sqlite3-normal")]
THREAD_PAIRS = [("pydb-threads", "sqlite3-threads"), ("pydb-threads", "lmdb-threads"),
                ("pydb-procs", "sqlite3-procs"), ("pydb-procs", "lmdb-procs")]


@pytest.mark.parametrize("store", list(STORES))
def test_durable_commits(benchmark, tmp_path, recs, store):
    if store == "lmdb":
        pytest.importorskip("lmdb", reason="py-lmdb not installed (pip install 'pydb[lmdb]')")
    n = in_new_folders(benchmark, STORES[store], tmp_path, (recs,), 7)
    assert n == len(recs) == COMMITS


@pytest.mark.parametrize("store", list(THREAD_STORES))
def test_durable_commits_threads(benchmark, tmp_path, recs, store):
    if store.startswith("lmdb"):
        pytest.importorskip("lmdb", reason="py-lmdb not installed (pip install 'pydb[lmdb]')")
    n = in_new_folders(benchmark, THREAD_STORES[store], tmp_path, (recs,), 7)
    assert n == THREAD_COMMITS


def main(argv: list[str]) -> int:
    """Alternate the stores ROUNDS times; print rates and verdicts."""
    rounds = int(argv[0]) if argv else 15
    stores, thread_stores = dict(STORES), dict(THREAD_STORES)
    try:
        import lmdb  # noqa: F401
    except ImportError:
        del stores["lmdb"], thread_stores["lmdb-threads"], thread_stores["lmdb-procs"]
    recs = []
    with pydb.open(unesb.default_database()) as db:
        for r in db:
            recs.append(([(f.tag, f.raw) for f in r.fields], serialize(r)))
            if len(recs) == COMMITS:
                break
    take_turns(stores, PAIRS, rounds, (recs,), COMMITS, "commits/s")
    take_turns(thread_stores, THREAD_PAIRS, rounds, (recs,), THREAD_COMMITS, "commits/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
