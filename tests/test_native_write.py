"""The native index rides on the write path's transactions (issue 4,
item 2; docs/design.md §5-6): a writable Database attaches its native index,
every commit updates it in the same transaction, searches see a commit as
soon as it returns, and readers searching during commits always see one
committed state."""

from __future__ import annotations

import gc
import os
import random
import shutil
import threading
import time
from pathlib import Path

import pytest

import pydb
from pydb import ClosedError
from pydb.fst import FieldRule
from pydb.index import Posting

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = pytest.mark.sanitize_address


SAMPLE = "scieloorg__pyisis/pyisis/pyisis/sample/"

FST = "1 0 v1\n2 4 v2\n"


def mfns(result):
    return list(result)


def test_create_with_fst_commits_update_the_index(tmp_path):
    base = tmp_path / "books"
    with pydb.create(base, fst=FST) as db:
        assert db.index.kind == "native"
        assert os.path.isfile(f"{base}.pdx/MANIFEST")
        assert list(db.terms()) == []
        m1 = db.append([(1, "Alpha"), (2, "red green")])
        m2 = db.append([(1, "Beta"), (2, "green blue")])
        assert (m1, m2) == (1, 2)
        # visible as soon as the commit returns
        assert mfns(db.search("GREEN")) == [1, 2]
        assert db.postings("green") == [Posting(1, 2, 1, 2), Posting(2, 2, 1, 1)]
        assert list(db.terms()) == [("ALPHA", 1), ("BETA", 1), ("BLUE", 1), ("GREEN", 2),
                                    ("RED", 1)]
        # an update replaces the record's old postings
        db.update(1, [(1, "Gamma"), (2, "blue")])
        assert list(db.terms()) == [("BETA", 1), ("BLUE", 2), ("GAMMA", 1), ("GREEN", 1)]
        assert db.postings("RED") == [] and db.postings("ALPHA") == []
        assert mfns(db.search("BLUE")) == [1, 2]
        # a deletion drops the record from the index and the results
        db.delete(2)
        assert mfns(db.search("BLUE")) == [1]
        assert db.postings("BETA") == [] and db.postings("GREEN") == []
        assert list(db.terms()) == [("BLUE", 1), ("GAMMA", 1)]
        db.undelete(2)
        assert mfns(db.search("BLUE")) == [1, 2]
        assert db.postings("BETA") == [Posting(2, 1, 1, 1)]
        # one transaction, several changes (also twice the same MFN)
        with db.transaction() as tx:
            m3 = tx.append([(1, "Delta"), (2, "red")])
            tx.update(2, [(1, "Beta"), (2, "white")])
            tx.update(1, [(1, "Gamma"), (2, "red red")])
            tx.delete(1)
        assert m3 == 3
        assert mfns(db.search("RED")) == [3]
        assert mfns(db.search("WHITE")) == [2]
        assert db.postings("GAMMA") == [] and db.postings("BLUE") == []
    # the same state after reopening, read-only and writable
    with pydb.open(base) as db:
        assert db.index.kind == "native"
        assert list(db.terms()) == [("BETA", 1), ("DELTA", 1), ("RED", 1), ("WHITE", 1)]
    with pydb.open(base, readonly=False) as db:
        db.undelete(1)
        assert mfns(db.search("RED")) == [1, 3]
        assert db.postings("RED") == [Posting(1, 2, 1, 1), Posting(1, 2, 1, 2),
                                      Posting(3, 2, 1, 1)]


def test_truncation_over_many_segments_and_tombstones(tmp_path):
    """Truncated terms are read in one walk of the keys over every segment
    (csrc/nidx_handle.c, terms_in with a postings sink), with the
    tombstones of newer segments: the hits are exactly the live records
    with a word of that prefix, alone, qualified by tag and combined."""
    rnd = random.Random(11)
    words = ["".join(rnd.choice("abc") for _ in range(rnd.randint(1, 4)))
             for _ in range(60)]
    live: dict[int, tuple[list[str], list[str]]] = {}
    with pydb.create(tmp_path / "t", fst="1 4 v1\n2 4 v2\n", gc="none") as db:
        for _ in range(25):                 # one segment per commit
            with db.transaction() as t:
                for _ in range(rnd.randint(1, 8)):
                    f1 = rnd.sample(words, rnd.randint(0, 4))
                    f2 = rnd.sample(words, rnd.randint(0, 3))
                    fields = [(1, " ".join(f1)), (2, " ".join(f2))]
                    k = rnd.random()
                    if live and k < 0.3:
                        m = rnd.choice(sorted(live))
                        t.update(m, fields)
                        live[m] = (f1, f2)
                    elif live and k < 0.4:
                        m = rnd.choice(sorted(live))
                        t.delete(m)
                        del live[m]
                    else:
                        live[t.append(fields)] = (f1, f2)
        assert db.stat()["index"]["segments"] >= 20

        def has(m, prefix, tags=(1, 2)):
            return any(w.upper().startswith(prefix) for tag in tags
                       for w in live[m][tag - 1])

        for prefix in ["A", "AB", "B", "CA", "ABC", "C", "CCCC", "Z"]:
            want = [m for m in sorted(live) if has(m, prefix)]
            assert mfns(db.search(f"{prefix}$")) == want, prefix
            want = [m for m in sorted(live) if has(m, prefix, (2,))]
            assert mfns(db.search(f"{prefix}$/(2)")) == want, prefix
            want = [m for m in sorted(live) if has(m, prefix) and has(m, "B")]
            assert mfns(db.search(f"{prefix}$ * B$")) == want, prefix
        # the per-key postings agree with the walk
        keys = [k for k, _ in db.terms("A")]
        per_key = sorted({p.mfn for k in keys for p in db.postings(k)})
        assert mfns(db.search("A$")) == per_key


def test_aborted_transaction_leaves_no_index_change(tmp_path):
    base = tmp_path / "ab"
    # gc="none": no collection merging the segments meanwhile
    with pydb.create(base, fst=FST, gc="none") as db:
        db.append([(1, "Keep")])
        segs = sorted(os.listdir(f"{base}.pdx"))
        manifest = open(f"{base}.pdx/MANIFEST", "rb").read()
        with pytest.raises(RuntimeError):
            with db.transaction() as tx:
                tx.append([(1, "Lost")])
                tx.update(1, [(1, "Changed")])
                raise RuntimeError("abort")
        assert db.postings("LOST") == [] and db.postings("CHANGED") == []
        assert mfns(db.search("KEEP")) == [1]
        assert open(f"{base}.pdx/MANIFEST", "rb").read() == manifest
        assert sorted(os.listdir(f"{base}.pdx")) == segs


def test_create_with_field_rules_and_fst_errors(tmp_path):
    rules = [FieldRule(1, 0, [1]), FieldRule(2, 4, [2])]
    with pydb.create(tmp_path / "fr", fst=rules) as db:
        db.append([(2, "one two")])
        assert [t.key for t in db.terms()] == ["ONE", "TWO"]
    with pytest.raises(pydb.FSTError):
        pydb.create(tmp_path / "bad", fst="1 0 v1(\n")
    assert not os.path.exists(tmp_path / "bad.mst")


def test_a_failed_create_leaves_no_file(tmp_path, monkeypatch):
    """Bad arguments are found before any file is made; a failure after
    (writing the index) removes the files the create made, and nothing
    else: a retry is not refused as 'the database exists already'."""
    (tmp_path / "keep.txt").write_text("mine")
    (tmp_path / "x.notes").write_text("mine too")      # the base's name, made before
    bad = [(LookupError, dict(encoding="no-such-codec")),
           (LookupError, dict(encoding="rot13")),
           (ValueError, dict(io="bogus")),
           (ValueError, dict(lock_timeout=-1)),
           (FileNotFoundError, dict(fst="1 0 v1", stw="missing.stw")),
           (FileNotFoundError, dict(fst="missing.fst")),
           (ValueError, dict(fst="1 0 v1", max_key=-1))]
    for kind, kw in bad:
        with pytest.raises(kind):
            pydb.create(tmp_path / "x", **kw)
        assert sorted(os.listdir(tmp_path)) == ["keep.txt", "x.notes"], kw

    def fail(*args, **kw):
        # meanwhile another process makes a database whose name starts
        # like this one's: it is not this create's to remove (a review)
        with pydb.create(tmp_path / "x.v2", gc="none") as other:
            other.append([(1, "keep me")])
        raise pydb.DiskError(28, "No space left on device", "x.pdx")
    monkeypatch.setattr(pydb.database, "build_index", fail)
    with pytest.raises(pydb.DiskError):
        pydb.create(tmp_path / "x", fst="1 0 v1")
    assert sorted(os.listdir(tmp_path)) == [
        "keep.txt", "x.notes", "x.v2.mst", "x.v2.shm", "x.v2.wal", "x.v2.xrf"]
    with pydb.open(tmp_path / "x.v2") as other:
        assert other[1][1] == ["keep me"]
    monkeypatch.undo()
    with pydb.create(tmp_path / "x", fst="1 0 v1", stw=b"THE\n") as db:
        db.append([(1, "the one")])
        assert [t.key for t in db.terms()] == ["THE ONE"]


def test_create_without_fst_has_no_index(tmp_path):
    with pydb.create(tmp_path / "plain") as db:
        db.append([(1, "x")])
        assert db.index is None
        with pytest.raises(pydb.UnsupportedError):
            db.search("X")


def test_index_closed_before_the_database(tmp_path):
    base = tmp_path / "co"
    db = pydb.create(base, fst=FST)
    db.append([(1, "One")])
    ix = db.index
    ix.close()
    assert ix.closed
    with pytest.raises(ClosedError):
        db.search("ONE")
    # commits go on updating the index files
    db.append([(1, "Two")])
    db.close()
    with pytest.raises(ClosedError):
        ix.postings("ONE")
    with pydb.open(base) as db2:
        assert mfns(db2.search("ONE + TWO")) == [1, 2]


def test_database_closed_while_index_referenced(tmp_path):
    base = tmp_path / "cl"
    db = pydb.create(base, fst=FST)
    db.append([(1, "One")])
    ix = db.index
    terms = ix.terms()
    db.close()
    for call in (lambda: ix.postings("ONE"), lambda: list(terms), lambda: ix.search("ONE")):
        with pytest.raises(ClosedError):
            call()
    with pytest.raises(ClosedError):
        _ = db.index
    del db
    gc.collect()
    with pytest.raises(ClosedError):
        ix.postings("ONE")
    ix.close()   # idempotent


def test_build_index_then_open_writable(isis_data, tmp_path):
    """The CDS sample with its shipped ISIS inverted file: before a native
    index is built db.index is the ISIS file; after pydb.build_index the
    native one takes precedence (same results from the same FST), and a
    writable handle keeps it up to date."""
    src = isis_data / SAMPLE / "cds"
    for ext in ("mst", "xrf", "fst", "stw", "cnt", "n01", "n02", "l01", "l02", "ifp"):
        shutil.copy(f"{src}.{ext}", tmp_path / f"cds.{ext}")
    base = tmp_path / "cds"
    with pydb.open(base) as db:
        assert db.index.kind == "isis-classic"
        water = mfns(db.search("WATER"))
        plants = mfns(db.search("PLANTS"))
    assert water == [4, 5, 10, 11, 12, 13, 14, 16, 22, 23, 24, 42, 51, 56]
    pydb.build_index(base, progress=False, max_key=30)
    with pydb.open(base, readonly=False, encoding="cp850") as db:
        assert db.index.kind == "native"
        assert mfns(db.search("WATER")) == water
        assert mfns(db.search("PLANTS")) == plants
        rec = db[1].to_dict()
        db.update(1, [(24, "Water for plants"), (70, "Magalhaes, A.C.")])
        db.delete(4)
        mfn = db.append([(24, "Water pumps"), (70, "Someone, X.")])
        assert mfn == 151
        assert mfns(db.search("WATER")) == sorted(set(water) - {4} | {1, 151})
        assert mfns(db.search("PLANTS")) == sorted(set(plants) - {4} | {1})
        # the old version's keys are gone (its title words, field 69)
        assert "TRANSPIRATION" in rec[24][0].upper()
        assert 1 not in [p.mfn for p in db.postings("TRANSPIRATION")]
        assert db.postings("SOMEONE, X.") == [Posting(151, 70, 1, 1)]
    with pydb.open(base) as db:      # a read-only handle opened afterwards
        assert mfns(db.search("WATER")) == sorted(set(water) - {4} | {1, 151})


# ---- readers during commits ----------------------------------------------

WORDS = ["RED", "GREEN", "BLUE", "WHITE"]
QUERIES = ["RED", "GREEN", "BLUE * RED", "WHITE + GREEN", "RED ^ BLUE", "N$"]


def _script(n_commits, seed):
    """Deterministic transactions and the expected result of every query
    after each commit (state 0: the empty database)."""
    rnd = random.Random(seed)
    recs: dict[int, tuple[bool, set]] = {}
    txns, states = [], []

    def expect():
        active = {m: w for m, (d, w) in recs.items() if not d}

        def has(word):
            return {m for m, w in active.items() if word in w}
        return {"RED": sorted(has("RED")), "GREEN": sorted(has("GREEN")),
                "BLUE * RED": sorted(has("BLUE") & has("RED")),
                "WHITE + GREEN": sorted(has("WHITE") | has("GREEN")),
                "RED ^ BLUE": sorted(has("RED") - has("BLUE")),
                "N$": sorted(active)}

    states.append(expect())
    for _k in range(1, n_commits + 1):
        ops = []
        for _ in range(rnd.randint(1, 4)):
            r = rnd.random()
            words = set(rnd.sample(WORDS, rnd.randint(0, 3)))
            if r < 0.4 or not recs:
                mfn = len(recs) + 1
                recs[mfn] = (False, words)
                ops.append(("A", mfn, words))
            elif r < 0.75:
                mfn = rnd.randint(1, len(recs))
                recs[mfn] = (recs[mfn][0], words)
                ops.append(("U", mfn, words))
            elif r < 0.9:
                mfn = rnd.randint(1, len(recs))
                recs[mfn] = (True, recs[mfn][1])
                ops.append(("D", mfn))
            else:
                mfn = rnd.randint(1, len(recs))
                recs[mfn] = (False, recs[mfn][1])
                ops.append(("X", mfn))
        txns.append(ops)
        states.append(expect())
    return txns, states


def _writer_and_searching_readers(db, searched, n_commits, seed, min_searches=0):
    """Run the transactions of _script(n_commits, seed) through `db` in one
    thread while 8 reader threads search `searched` (the same handle or
    another one).  Every result must equal the expected result of one
    committed state, no older than the last commit that had returned when
    the search began and no newer than the one in flight when it ended (a
    commit is published just before it returns); the states a reader sees
    never go backwards, and its last searches see the last commit.
    Returns the number of searches."""
    txns, states = _script(n_commits, seed)
    done = [0]
    stop = threading.Event()
    errors: list = []
    seen = [0] * 8
    searches = [0] * 8

    def writer():
        try:
            for k, ops in enumerate(txns, 1):
                with db.transaction() as tx:
                    for op in ops:
                        if op[0] == "A":
                            got = tx.append([(1, "n"), (2, " ".join(sorted(op[2])))])
                            assert got == op[1]
                        elif op[0] == "U":
                            tx.update(op[1], [(1, "n"), (2, " ".join(sorted(op[2])))])
                        elif op[0] == "D":
                            tx.delete(op[1])
                        else:
                            tx.undelete(op[1])
                done[0] = k
        except BaseException as e:   # pragma: no cover - reported below
            errors.append(("writer", repr(e)))
        finally:
            stop.set()

    def reader(i):
        rnd = random.Random(i)
        lo = 0
        try:
            while True:
                last = stop.is_set()   # this search starts after the last commit
                q = rnd.choice(QUERIES)
                before = done[0]
                res = list(searched.search(q))
                after = done[0]
                searches[i] += 1
                first = max(lo, before)
                for j in range(first, min(after + 1, n_commits) + 1):
                    if states[j][q] == res:
                        lo = j
                        break
                else:
                    errors.append((i, q, res, first, after))
                    return
                if last and searches[i] >= min_searches:
                    break
                time.sleep(0.0002)   # leave the writer some CPU
            seen[i] = lo
        except BaseException as e:   # pragma: no cover - reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    w = threading.Thread(target=writer)
    w.start()
    w.join()
    for t in threads:
        t.join()
    assert errors == []
    assert done[0] == n_commits
    assert all(x == n_commits for x in seen), seen   # the last searches see the end
    for q in QUERIES:
        assert list(searched.search(q)) == states[-1][q]
    return sum(searches)


_BUILDER = """
import sys, pydb
pydb.build_index(sys.argv[1], fst="1 4 v1\\n", progress=False)
"""


@pytest.mark.parametrize("builder", ["handle", "process"])
def test_a_writer_opened_before_a_build_keeps_the_new_index(tmp_path, builder):
    """A writable handle opened when the database had no index, then a
    build by another handle or process: the handle's next commits (one
    record at a time, and a transaction) update the new index in the same
    transaction -- before, they left it behind the records (a deleted
    record still found, new ones not), and check() reported it."""
    base = tmp_path / "late"
    with pydb.create(base, gc="none") as db, db.transaction() as tx:
        for i in range(10):
            tx.append([(1, f"common word{i}")])
    with pydb.open(base, readonly=False, gc="none") as w:
        assert w.index is None or w.index.kind != "native"
        if builder == "handle":
            pydb.build_index(base, fst="1 4 v1\n", progress=False)
        else:
            import subprocess
            import sys
            subprocess.run([sys.executable, "-c", _BUILDER, str(base)], check=True,
                           env=dict(os.environ, PYTHONPATH=str(Path(pydb.__file__).parents[1])))
        assert w.append([(1, "common fresh")]) == 11
        w.delete(3)
        with w.transaction() as tx:
            tx.update(5, [(1, "common renamed")])
        assert w.index.kind == "native"
        assert mfns(w.search("FRESH")) == [11]
        assert mfns(w.search("RENAMED")) == [5]
        assert mfns(w.search("COMMON")) == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11]
        assert w.check().ok
    with pydb.open(base) as r:
        assert mfns(r.search("COMMON")) == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11]


def _unindexed(base, n=10):
    with pydb.create(base, gc="none") as db, db.transaction() as tx:
        for i in range(n):
            tx.append([(1, f"common word{i}")])


def test_a_writer_that_searched_after_a_build_attaches_that_index(tmp_path):
    """The build, then a search on the writer (its .index opens the
    native index without attaching it), then writes: the index that
    search opened is attached and updated; a cached index closed by the
    caller is replaced, and writes go on (they raised ClosedError)."""
    base = tmp_path / "s"
    _unindexed(base)
    with pydb.open(base, readonly=False, gc="none") as w:
        pydb.build_index(base, fst="1 4 v1\n", progress=False)
        assert mfns(w.search("COMMON")) == list(range(1, 11))
        cached = w.index
        assert w.append([(1, "common fresh")]) == 11
        assert w.index is cached and mfns(w.search("FRESH")) == [11]
    other = tmp_path / "c"
    _unindexed(other)
    with pydb.open(other, readonly=False, gc="none") as w:
        pydb.build_index(other, fst="1 4 v1\n", progress=False)
        w.index.close()
        w.delete(2)
        assert not w.index.closed and mfns(w.search("COMMON")) == [1] + list(range(3, 11))


def test_a_collection_step_is_not_held_up_by_a_new_index(tmp_path):
    """A collection with no time to wait (timeout 0) on a writer that has
    not attached an index built meanwhile: the collector's step is no
    commit of records and goes on (it raised pydb error -30712)."""
    base = tmp_path / "g"
    _unindexed(base)
    with pydb.open(base, readonly=False, gc="none") as w:
        w.update(1, [(1, "common again")])
        pydb.build_index(base, fst="1 4 v1\n", progress=False)
        w.collect(timeout=0)
        assert w.append([(1, "common later")]) == 11
        assert mfns(w.search("LATER")) == [11]


def test_threads_writing_through_a_build_keep_the_index(tmp_path):
    """Four threads append through one writable handle while another
    process builds the index: every record appended after the build is
    found (the threads that meet the new index attach it in turn, one of
    them waiting while another is inside a begin)."""
    import subprocess
    import sys
    base = tmp_path / "t"
    _unindexed(base)
    stop = threading.Event()
    errors: list[BaseException] = []
    with pydb.open(base, readonly=False, gc="none", sync=False) as w:
        def write(k):
            try:
                while not stop.is_set():
                    w.append([(1, f"common thread{'abcd'[k]}")])
            except BaseException as e:      # reported below
                errors.append(e)
        ts = [threading.Thread(target=write, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        try:
            subprocess.run([sys.executable, "-c", _BUILDER, str(base)], check=True,
                           env=dict(os.environ, PYTHONPATH=str(Path(pydb.__file__).parents[1])))
            time.sleep(0.2)
        finally:
            stop.set()
            for t in ts:
                t.join()
        assert errors == []
        assert w.check().ok
        assert mfns(w.search("COMMON")) == list(range(1, w.max_mfn + 1))


def test_an_index_removed_after_a_build_stops_no_commit(tmp_path):
    """The index folder removed after a build (the latest commit still
    names its generation): a writer opened then commits without an index,
    as before; a new build is attached from its next commit."""
    base = tmp_path / "gone"
    with pydb.create(base, fst="1 4 v1\n", gc="none") as db:
        db.append([(1, "first")])
    shutil.rmtree(f"{base}.pdx")
    with pydb.open(base, readonly=False, gc="none") as w:
        assert w.append([(1, "second")]) == 2
        pydb.build_index(base, fst="1 4 v1\n", progress=False)
        assert w.append([(1, "third")]) == 3
        assert mfns(w.search("THIRD")) == [3] and mfns(w.search("FIRST")) == [1]


@pytest.mark.sanitize_thread
def test_readers_search_during_commits_see_committed_states(tmp_path):
    """A writer commits appends/updates/deletes/undeletes while 8 reader
    threads search the same handle (see _writer_and_searching_readers)."""
    with pydb.create(tmp_path / "rw", sync=False, fst="1 0 v1\n2 4 v2\n") as db:
        n = _writer_and_searching_readers(db, db, 150, 7, min_searches=20)
        print(f"readers: {n} searches during 150 commits")


@pytest.mark.parametrize("kind", ["inline", "file"])
def test_fault_at_every_operation_of_an_indexed_commit(tmp_path, request, kind):
    """Each write-side operation of one commit (index segment file, log,
    master file, XRF, index MANIFEST, the swap of its name...) fails in
    turn with EIO: a failure before the log is durable leaves neither
    records nor index changes, and no file of the failed commit; a
    failure after it leaves the handle read-only and reopening replays
    records and index together.  Either way the index agrees with the
    records.  Kind "inline": the commit's segment inside the MANIFEST;
    "file": every segment a file."""
    import errno
    if kind == "file":
        request.getfixturevalue("segment_files")

    from pydb import _pydb
    base0 = tmp_path / "p"
    with pydb.create(base0, fst=FST, gc="none") as db:   # no merged leftovers
        db.append([(1, "One"), (2, "old words")])
    _pydb._testing.fail_io(-1)
    shutil.copytree(f"{base0}.pdx", tmp_path / "c.pdx")
    for ext in (".mst", ".xrf", ".wal"):
        shutil.copy(f"{base0}{ext}", tmp_path / f"c{ext}")
    with pydb.open(tmp_path / "c", readonly=False) as db:
        _pydb._testing.fail_io(-1)
        try:
            with db.transaction() as tx:
                tx.append([(1, "Two"), (2, "new words")])
                tx.update(1, [(1, "One"), (2, "changed")])
            total = _pydb._testing.io_count()
        finally:
            _pydb._testing.fail_io(0)
    # log, fdatasync, .mst, .xrf, control record, MANIFEST, exchange
    # (and the segment file's write)
    assert total >= 7 + (kind == "file")
    kinds = {}
    for n in range(1, total + 1):
        base = tmp_path / f"n{n}"
        shutil.copytree(f"{base0}.pdx", f"{base}.pdx")
        for ext in (".mst", ".xrf", ".wal"):
            shutil.copy(f"{base0}{ext}", f"{base}{ext}")
        files0 = sorted(os.listdir(f"{base}.pdx"))
        db = pydb.open(base, readonly=False, gc="none")   # files unmerged
        _pydb._testing.fail_io(n, errno.EIO)
        raised = None
        try:
            with db.transaction() as tx:
                tx.append([(1, "Two"), (2, "new words")])
                tx.update(1, [(1, "One"), (2, "changed")])
        except pydb.DiskError as e:
            raised = e
        finally:
            fired = _pydb._testing.io_fired()
            _pydb._testing.fail_io(0)
        kinds[fired.split()[0]] = kinds.get(fired.split()[0], 0) + 1
        if raised is None:
            # emptying the log after the commit, or the zeros its frame
            # grows the log by (csrc/wal.h: best effort): ignored
            assert fired.split()[0] in ("ftruncate", "pwrite") and db.max_mfn == 2, (n, fired)
        durable = db.max_mfn == 2 or db.readonly or _is_readonly(db) or (
            raised is not None and raised.committed is not False)
        db.close()
        if not durable:
            assert sorted(os.listdir(f"{base}.pdx")) == files0, (n, fired)
        with pydb.open(base, readonly=False) as db:      # recovery
            if raised is not None and raised.committed is not None:
                assert raised.committed is (db.max_mfn == 2), (n, fired, raised)
            if db.max_mfn == 2:
                assert mfns(db.search("CHANGED")) == [1] and mfns(db.search("NEW")) == [2]
                assert db.postings("OLD") == []
            else:
                assert not durable, (n, fired)
                assert mfns(db.search("OLD")) == [1] and db.postings("TWO") == []
            db.append([(1, "Four")])
            assert mfns(db.search("FOUR")) == [db.max_mfn]
    assert kinds.get("exchange") == 1, kinds
    print(f"index faults: {total} operations, {kinds}")


def _operations(tmp_path, prepare, work) -> list[str]:
    """The write-side operations of the core (pwrite, fsync, fdatasync,
    ftruncate, rename, unlink, exchange) that `work(db)` makes, in order, on a
    database opened with ``sync=False`` after `prepare(db)`: the n-th is
    named by making it fail, on a fresh database each time (the
    operations before it are the same every time)."""
    from pydb import _pydb

    def fresh(n):
        db = pydb.create(tmp_path / f"s{n}", fst=FST, gc="none", sync=False)
        prepare(db)
        return db

    with fresh(0) as db:
        _pydb._testing.fail_io(-1)
        try:
            work(db)
            total = _pydb._testing.io_count()
        finally:
            _pydb._testing.fail_io(0)
    names = []
    for n in range(1, total + 1):
        with fresh(n) as db:
            _pydb._testing.fail_io(n)
            try:
                work(db)
            except pydb.Error:
                pass
            finally:
                names.append(_pydb._testing.io_fired().split()[0])
                _pydb._testing.fail_io(0)
    return names


@pytest.mark.parametrize("kind", ["file", "inline"])
def test_sync_false_commits_fsync_nothing_collections_checkpoint(tmp_path, request, kind):
    """With ``sync=False`` a commit whose units a synced frame of the log
    holds already fsyncs nothing (csrc/txn.c, "Commits without fsync"):
    not the records, the log, the native index's new segment or its
    directory; its MANIFEST is written into the spare and swapped in, as
    with sync=True.  A merge writes its segment file and syncs it and
    its folder before the commit that names it (a later synced frame
    could make that commit durable before the file); the merge's commit
    syncs nothing -- it would sync the log before it removed a segment
    file the MANIFEST no longer names (another handle's unsynced frame
    may have unnamed it), and there is none here.  The
    removal of merged segments follows a checkpoint:
    the .mst, the .xrf, the MANIFEST, the segments the log names, the
    folder, then the emptied log.  A compaction fsyncs its new files,
    the swap marker and the folder around its renames and makes the
    emptied log durable before them.  Kind "file": every segment a file;
    "inline": the small segments of these commits and merges are inline
    in the MANIFEST, and the checkpoint has no segment file to sync."""
    if kind == "file":
        request.getfixturevalue("segment_files")
    def prepare(db):
        for i in range(4):
            db.append([(1, f"Word{i}"), (2, "shared words")])

    def garbage(db):
        prepare(db)
        for i in range(4):
            db.update(1, [(1, f"Changed{i}"), (2, "other words")])

    def commit(db):
        db.update(1, [(1, "Changed"), (2, "other words")])

    def collect(db):
        db.collect()

    # the .mst and .xrf, the MANIFEST, the 4 commits' segment files (kind
    # "file"), the folder; the emptied log
    files = 4 if kind == "file" else 0
    checkpoint = ["fdatasync"] * 2 + ["fsync"] * (2 + files) + ["ftruncate", "fdatasync"]
    (tmp_path / "commit").mkdir()
    names = _operations(tmp_path / "commit", prepare, commit)
    assert not {"fsync", "fdatasync", "rename"} & set(names), names
    assert names[-1] == "exchange" and set(names[:-1]) == {"pwrite", "ftruncate"}, names
    # one merge of the 4 segments (a file synced first, kind "file"), its
    # commit (no segment file unnamed yet: no sync of the log), the
    # checkpoint before the removal
    (tmp_path / "merge").mkdir()
    names = _operations(tmp_path / "merge", prepare, collect)
    k = names.index("exchange") + 1
    merged = ["pwrite", "fsync", "rename", "fsync"] if kind == "file" else []
    assert names[:len(merged)] == merged, names
    assert set(names[len(merged):k]) == {"pwrite", "ftruncate", "exchange"}, names
    assert names[k:] == checkpoint, names
    # the same, and a compaction of the master file after them
    (tmp_path / "compact").mkdir()
    names = _operations(tmp_path / "compact", garbage, collect)
    swap = next(i for i in range(len(names)) if names[i:i + 2] == ["rename", "rename"])
    assert names[swap - 5:swap + 4] == ["fsync", "fsync", "pwrite", "fsync", "fsync",
                                        "rename", "rename", "fsync", "unlink"], names
    k = names.index("exchange") + 1
    assert names[k:k + 2] == ["ftruncate", "ftruncate"], names   # the compaction's files
    # (the checkpoint syncs the 8 commits' segment files, kind "file")
    checkpoint = ["fdatasync"] * 2 + ["fsync"] * (2 + 2 * files) + ["ftruncate", "fdatasync"]
    cp = next(i for i in range(k, swap) if names[i:i + len(checkpoint)] == checkpoint)
    assert "fdatasync" not in names[:cp], names
    assert names[swap + 4:] == ["fdatasync"], names       # the emptied log, again


def _is_readonly(db) -> bool:
    """True once a failed commit has made the handle refuse writes."""
    try:
        with db.transaction():
            pass
    except pydb.ReadOnlyError:
        return True
    return False


_OTHER_WRITER = r"""
import sys, pydb
base, op = sys.argv[1], sys.argv[2]
with pydb.open(base, readonly=False) as db:
    if op == "append":
        print(db.append([(1, "Gamma"), (2, "red white")]))
    elif op == "update":
        db.update(1, [(1, "Alpha"), (2, "blue")])
    else:
        db.delete(2)
"""



def _commit_in_other_process(base, op):
    import subprocess
    import sys
    subprocess.run([sys.executable, "-c", _OTHER_WRITER, str(base), op],
                   check=True, capture_output=True, text=True, timeout=120)


def test_read_only_handle_sees_commits_of_another_process(tmp_path):
    """A read-only handle that has used the native index sees, at its
    next call, the commits another process made since (the MANIFEST is
    checked on every terms/postings/search call)."""
    base = tmp_path / "books"
    with pydb.create(base, fst=FST) as db:
        db.append([(1, "Alpha"), (2, "red green")])
    with pydb.open(base) as ro:
        assert mfns(ro.search("RED")) == [1]
        assert list(ro.terms()) == [("ALPHA", 1), ("GREEN", 1), ("RED", 1)]
        _commit_in_other_process(base, "append")
        assert mfns(ro.search("RED")) == [1, 2]
        assert mfns(ro.search("WHITE")) == [2]
        assert ro.postings("RED") == [Posting(1, 2, 1, 1), Posting(2, 2, 1, 1)]
        _commit_in_other_process(base, "update")
        assert list(ro.terms()) == [("ALPHA", 1), ("BLUE", 1), ("GAMMA", 1),
                                    ("RED", 1), ("WHITE", 1)]
        assert mfns(ro.search("RED")) == [2]
        _commit_in_other_process(base, "delete")
        assert mfns(ro.search("RED + BLUE")) == [1]
        assert ro.postings("WHITE") == []


def test_read_only_handle_sees_commits_of_another_handle(tmp_path):
    """The same within one process: a read-only and a writable Database
    on the same files; the reader follows every commit, also merges
    (more commits than MERGE_AT), and an Index taken before keeps
    working."""
    base = tmp_path / "books"
    pydb.create(base, fst=FST).close()
    with pydb.open(base) as ro, pydb.open(base, readonly=False) as rw:
        assert mfns(ro.search("N$")) == []
        ix = ro.index
        for k in range(1, 40):
            rw.append([(1, f"n{k}"), (2, "red" if k % 2 else "blue")])
            assert mfns(ro.search("RED")) == list(range(1, k + 1, 2))
            assert len(ix.postings("BLUE")) == k // 2
        rw.delete(1)
        assert mfns(ro.search("RED"))[:2] == [3, 5]


@pytest.mark.sanitize_thread
def test_readers_on_another_handle_follow_concurrent_commits(tmp_path):
    """8 reader threads search through a read-only handle while a writer
    commits through another handle (see _writer_and_searching_readers):
    the read-only handle refreshes its segment list concurrently with the
    searches and with other refreshes."""
    base = tmp_path / "rw"
    with pydb.create(base, sync=False, fst="1 0 v1\n2 4 v2\n") as db, \
            pydb.open(base) as ro:
        _writer_and_searching_readers(db, ro, 120, 11)


def test_read_only_handle_follows_every_commit_of_another_handle(tmp_path):
    """After each of 200 commits (appends, updates, deletions, undeletions,
    merges) through a writable handle, a read-only handle's searches give
    exactly the committed state.  Successive MANIFESTs often have the
    same size, inode (reused by the write-temp + rename) and coarse
    mtime, so the check must not rely on stat() alone."""
    n_commits = 200
    txns, states = _script(n_commits, 11)
    base = tmp_path / "rw"
    with pydb.create(base, sync=False, fst="1 0 v1\n2 4 v2\n") as db, \
            pydb.open(base) as ro:
        for k, ops in enumerate(txns, 1):
            with db.transaction() as tx:
                for op in ops:
                    if op[0] == "A":
                        tx.append([(1, "n"), (2, " ".join(sorted(op[2])))])
                    elif op[0] == "U":
                        tx.update(op[1], [(1, "n"), (2, " ".join(sorted(op[2])))])
                    elif op[0] == "D":
                        tx.delete(op[1])
                    else:
                        tx.undelete(op[1])
            got = {q: list(ro.search(q)) for q in QUERIES}
            assert got == states[k], k
