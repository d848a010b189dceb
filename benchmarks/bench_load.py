"""Bulk load: every record of the benchmark database (58,880 records of
about 1 KB) written in one transaction into a new store and made durable
-- pydb (``sync=True``) against py-lmdb (synced commit) and SQLite (WAL
mode, ``synchronous=FULL``), in the same run (issue 12's row "bulk load,
one transaction").

Every store starts from the records as an application holds them, a list
of (tag, bytes) fields per record: pydb encodes them as CDS/ISIS master
file records; the peers serialize them as ``peers.serialize`` does
('TAG<TAB>value<LF>' per field) and store the bytes under the MFN.
``lmdb-bytes`` is py-lmdb given the serialized bytes ready-made (no
encoding at all: the bound of a key-value store).  Each round creates
the store, loads, and closes it; pydb's close is a checkpoint, so its
syncs are in the figure.  Rate = records / time.

A transaction whose records take 1 MiB or more writes them straight into
the master file and fdatasyncs it before its log frame (csrc/wal.h,
PYDB_WAL_DIRECT); smaller ones go through the log.

Run: ``python -m pytest benchmarks/bench_load.py --benchmark-only``
(py-lmdb: ``pip install '.[lmdb]'``), or ``python -m benchmarks.bench_load
[ROUNDS]``: the stores take turns, ROUNDS rounds each (default 11), and
it prints each store's median rows/s and ministat's verdict (95%) of
pydb's round times against each peer's (PAIRS).
"""

from __future__ import annotations

import os
import sqlite3
import sys

import pytest

import pydb
from pydb import unesb

from .peers import in_new_folders, take_turns


def _serialize(fields) -> bytes:
    return b"".join(b"%d\t%s\n" % (tag, raw) for tag, raw in fields)


def load_pydb(folder, recs) -> int:
    db = pydb.create(folder / "c", sync=True, gc="none")
    try:
        with db.transaction() as tx:
            for fields in recs:
                tx.append(fields)
        return db.max_mfn
    finally:
        db.close()


def load_sqlite(folder, recs) -> int:
    con = sqlite3.connect(os.fspath(folder / "c.sqlite"), isolation_level=None)
    try:
        con.execute("pragma journal_mode=wal")
        con.execute("pragma synchronous=full")
        con.execute("create table rec (mfn integer primary key, data blob)")
        con.execute("begin")
        con.executemany("insert into rec values (?, ?)",
                        ((i, _serialize(f)) for i, f in enumerate(recs, 1)))
        con.execute("commit")
        return con.execute("select count(*) from rec").fetchone()[0]
    finally:
        con.close()


def _lmdb(folder, items) -> int:
    import lmdb
    env = lmdb.open(os.fspath(folder), map_size=1 << 31, sync=True)
    try:
        with env.begin(write=True) as txn:
            for i, data in items:
                txn.put(i.to_bytes(4, "big"), data)
        return env.stat()["entries"]
    finally:
        env.close()


def load_lmdb(folder, recs) -> int:
    return _lmdb(folder, ((i, _serialize(f)) for i, f in enumerate(recs, 1)))


#: the records serialized once, outside the timing: id(recs) -> bytes
_SERIALIZED: dict[int, list[bytes]] = {}


def load_lmdb_bytes(folder, recs) -> int:
    if id(recs) not in _SERIALIZED:
        _SERIALIZED.clear()
        _SERIALIZED[id(recs)] = [_serialize(f) for f in recs]
    return _lmdb(folder, enumerate(_SERIALIZED[id(recs)], 1))


STORES = {"pydb": load_pydb, "lmdb": load_lmdb, "sqlite3": load_sqlite,
          "lmdb-bytes": load_lmdb_bytes}
#: (pydb's store, the peer it is compared with) in main()
PAIRS = [("pydb", "lmdb"), ("pydb", "sqlite3"), ("pydb", "lmdb-bytes")]


def _records(base) -> list:
    with pydb.open(base) as db:
        return [[(f.tag, f.raw) for f in r.fields] for r in db]


@pytest.fixture(scope="module")
def recs(bench_db):
    """Every record of the benchmark database, as (tag, bytes) fields."""
    return _records(bench_db)


@pytest.mark.parametrize("store", list(STORES))
def test_bulk_load(benchmark, tmp_path, recs, store):
    if store.startswith("lmdb"):
        pytest.importorskip("lmdb", reason="py-lmdb not installed (pip install 'pydb[lmdb]')")
    n = in_new_folders(benchmark, STORES[store], tmp_path, (recs,), 5)
    assert n == len(recs)


def test_pydb_load_reads_back(tmp_path, recs):
    """The loaded database holds exactly the records given, and checks."""
    load_pydb(tmp_path, recs)
    with pydb.open(tmp_path / "c") as db:
        assert db.max_mfn == len(recs)
        assert [[(f.tag, f.raw) for f in r.fields] for r in db] == recs
        assert db.check().ok


def main(argv: list[str]) -> int:
    """Alternate the stores ROUNDS times; print rates and verdicts."""
    rounds = int(argv[0]) if argv else 11
    stores = dict(STORES)
    try:
        import lmdb  # noqa: F401
    except ImportError:
        del stores["lmdb"], stores["lmdb-bytes"]
    recs = _records(unesb.default_database())
    take_turns(stores, PAIRS, rounds, (recs,), len(recs), "rows/s",
               os.environ.get("PYDB_BENCH_DIR"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
