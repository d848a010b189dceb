"""The stores the benchmarks compare, behind one interface, and helpers.

Each engine holds the same records: pydb reads the CDS/ISIS master file;
the peers hold each record serialized by :func:`serialize` under its MFN
(sqlite3: INTEGER PRIMARY KEY, i.e. the rowid; py-lmdb: a 4-byte
big-endian key; tantivy-py: an indexed integer field).  pydb's reads build a
Record (directory parsed, fields addressable); the peers' return the bytes.
"""

from __future__ import annotations

import struct
import threading

import pydb


def serialize(rec) -> bytes:
    """A record as the peers store it: 'TAG<TAB>value<LF>' per field."""
    return b"".join(b"%d\t%s\n" % (f.tag, f.raw) for f in rec.fields)


def deserialize(data: bytes) -> list[tuple[int, str, bytes]]:
    """The fields of a serialized record as a peer's reader decodes them,
    doing what ``Record.fields`` does: (tag, value decoded as UTF-8 with
    surrogateescape, the default database's codec, raw bytes) per field."""
    out = []
    for line in data.split(b"\n")[:-1]:
        tag, _, raw = line.partition(b"\t")
        out.append((int(tag), raw.decode("utf-8", "surrogateescape"), raw))
    return out


class Engine:
    """One store's reads: get(mfn), get_many(mfns), scan() -> count,
    scan_fields() -> count (every record's fields decoded), and reader()
    giving a per-thread get_many (own connection/transaction).  A peer
    gives its stored bytes from rows(), in key order."""
    name = ""

    def rows(self):
        raise NotImplementedError

    def scan_fields(self):
        n = 0
        for data in self.rows():
            deserialize(data)
            n += 1
        return n

    def close(self):
        pass


class PydbEngine(Engine):
    name = "pydb"

    def __init__(self, base):
        self.db = pydb.open(base)

    def get(self, mfn):
        return self.db[mfn]

    def get_many(self, mfns):
        return self.db.read_many(mfns)

    def scan(self):
        n = 0
        for _ in self.db:
            n += 1
        return n

    def scan_fields(self):
        n = 0
        for rec in self.db:
            _ = rec.fields
            n += 1
        return n

    def reader(self):
        return self.db.read_many

    def close(self):
        self.db.close()


class SqliteEngine(Engine):
    name = "sqlite3"

    def __init__(self, path, records):
        import sqlite3
        self.path = path
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE IF NOT EXISTS rec (mfn INTEGER PRIMARY KEY, data BLOB)")
        con.executemany("INSERT OR REPLACE INTO rec VALUES (?, ?)", records)
        con.commit()
        con.close()
        self.con = self._connect()

    def _connect(self):
        import sqlite3
        return sqlite3.connect(self.path, check_same_thread=False)

    def get(self, mfn):
        return self.con.execute("SELECT data FROM rec WHERE mfn = ?", (mfn,)).fetchone()[0]

    def get_many(self, mfns, con=None):
        con = con or self.con
        out = []
        for k in range(0, len(mfns), 256):
            part = mfns[k:k + 256]
            q = "SELECT data FROM rec WHERE mfn IN ({})".format(",".join("?" * len(part)))
            out += [r[0] for r in con.execute(q, part)]
        return out

    def scan(self):
        n = 0
        for _ in self.con.execute("SELECT mfn, data FROM rec ORDER BY mfn"):
            n += 1
        return n

    def rows(self):
        for _, data in self.con.execute("SELECT mfn, data FROM rec ORDER BY mfn"):
            yield data

    def reader(self):
        con = self._connect()
        return lambda mfns: self.get_many(mfns, con)

    def close(self):
        self.con.close()


class LmdbEngine(Engine):
    name = "lmdb"

    def __init__(self, path, records):
        import lmdb
        self.env = lmdb.open(path, map_size=1 << 30, max_readers=64, lock=True)
        with self.env.begin(write=True) as txn:
            for mfn, data in records:
                txn.put(struct.pack(">I", mfn), data)
        self.txn = self.env.begin(buffers=False)

    def get(self, mfn):
        return self.txn.get(struct.pack(">I", mfn))

    def get_many(self, mfns, txn=None):
        get = (txn or self.txn).get
        return [get(struct.pack(">I", m)) for m in mfns]

    def scan(self):
        n = 0
        for _ in self.txn.cursor():
            n += 1
        return n

    def rows(self):
        for _, data in self.txn.cursor():
            yield data

    def reader(self):
        txn = self.env.begin(buffers=False)
        return lambda mfns: self.get_many(mfns, txn)

    def close(self):
        self.txn.abort()
        self.env.close()


class TantivyEngine(Engine):
    name = "tantivy"

    def __init__(self, path, records):
        import tantivy
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("mfn", stored=True, indexed=True, fast=True)
        sb.add_bytes_field("data", stored=True)
        self.schema = sb.build()
        self.index = tantivy.Index(self.schema, path=path)
        w = self.index.writer()
        for mfn, data in records:
            w.add_document(tantivy.Document(mfn=mfn, data=data))
        w.commit()
        w.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()
        self.tantivy = tantivy

    def get(self, mfn, searcher=None):
        s = searcher or self.searcher
        q = self.tantivy.Query.term_query(self.schema, "mfn", mfn)
        (_, addr), = s.search(q, 1).hits
        return s.doc(addr)["data"][0]

    def get_many(self, mfns):
        return [self.get(m) for m in mfns]

    def scan(self):
        s = self.searcher
        n = 0
        for _, addr in s.search(self.tantivy.Query.all_query(), s.num_docs).hits:
            s.doc(addr)
            n += 1
        return n

    def rows(self):
        s = self.searcher
        for _, addr in s.search(self.tantivy.Query.all_query(), s.num_docs).hits:
            yield s.doc(addr)["data"][0]

    def reader(self):
        s = self.index.searcher()
        return lambda mfns: [self.get(m, s) for m in mfns]


def run_threads(readers, chunks):
    """Each reader function reads every chunk, starting at a different
    one; returns the number of records read."""
    n = len(chunks)
    counts = [0] * len(readers)
    barrier = threading.Barrier(len(readers))

    def work(i):
        read = readers[i]
        barrier.wait()
        got = 0
        for k in range(n):
            got += len(read(chunks[(k + i * n // len(readers)) % n]))
        counts[i] = got

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(readers))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def take_turns(stores, pairs, rounds, args, count, unit, folder=None) -> None:
    """Run each store of `stores` (name -> fn(folder, *args) returning
    `count`) once per round, taking turns, each in a new folder; print
    each store's median rate (`count` / seconds, in `unit`) and
    ministat's verdict (95%) of each (mine, peer) pair's times, for pairs
    whose stores both ran.  `folder`: where the temporary folders go."""
    import tempfile
    import time
    from pathlib import Path

    from pydb import ministat
    times: dict[str, list[float]] = {name: [] for name in stores}
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        for k in range(rounds):
            for name, fn in stores.items():
                d = Path(tmp) / f"{name}{k}"
                d.mkdir()
                t0 = time.perf_counter()
                assert fn(d, *args) == count
                times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        med = sorted(ts)[len(ts) // 2]
        print(f"{name:12} {count / med:10,.0f} {unit} (median of {rounds} rounds "
              f"of {count})")
    for mine, peer in pairs:
        if mine in times and peer in times:
            v = ministat.compare(times[peer], times[mine])
            what = (f"{mine}'s time {v.pct:+.1f}% +/- {v.pct_ci:.1f}% of {peer}'s"
                    if v.significant else "no difference proven")
            print(f"{mine} vs {peer}: {what} (95%)")


def in_new_folders(benchmark, fn, tmp_path, args, rounds):
    """Time fn(folder, *args) with pytest-benchmark's pedantic mode,
    `rounds` rounds of one call, each in a new folder under tmp_path;
    returns fn's result."""
    made = iter(range(1 << 30))

    def fresh():
        d = tmp_path / f"r{next(made)}"
        d.mkdir()
        return (d, *args), {}

    return benchmark.pedantic(fn, setup=fresh, rounds=rounds, iterations=1)
