"""The native index's garbage and its collection (issue 11; csrc/nidx_gc.c).

Commits never merge segments: each adds one, whose tombstones hide the
changed records' postings in the older segments (dead postings).  The
commit hook's collect() merges the whole set in bounded steps outside the
writer lock and publishes the merged segment through a files-only
transaction; garbage() counts segments, terms, postings, dead postings,
tombstones and files.  Until ``Database.collect()``/``stat()`` drive them
these tests call the two callbacks through the test door
(``_pydb._testing.index_collect`` / ``index_garbage``).

Figures are exact on small databases: FST ``1 0 v1`` (one key per title)
and ``2 4 v2`` (one key per word), so a record version with a title and
two words makes three postings.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pydb
from pydb import _pydb

from conftest import manifest_segments

T = _pydb._testing
FST = "1 0 v1\n2 4 v2\n"
REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO))
COLORS = ["RED", "GREEN", "BLUE", "WHITE", "BLACK"]


def fields(m: int, v: int) -> list[tuple[int, str]]:
    """Record m at value v: a title and two words (three postings)."""
    return [(1, f"T{m}V{v}"), (2, f"{COLORS[v % 5].lower()} common")]


def garbage(db) -> dict:
    return T.index_garbage(db, db.index._h)


def collect(db, budget: int = 1000, limit: int = 10000) -> int:
    """Call collect() until it says no more; the number of calls."""
    for calls in range(1, limit):
        if not T.index_collect(db, db.index._h, budget):
            return calls
    raise AssertionError("collect() never finished")


def answers(db) -> dict:
    """Everything a search can see: the terms and each term's results."""
    terms = [(t.key, t.count) for t in db.terms()]
    return {"terms": terms,
            "search": {k: list(db.search(k)) for k, _ in terms},
            "postings": {k: db.postings(k) for k, _ in terms}}


def make(tmp_path, n: int = 6, name: str = "gc", sync: bool = True):
    base = tmp_path / name
    db = pydb.create(base, fst=FST, sync=sync, gc="none")
    with db.transaction() as tx:
        for m in range(1, n + 1):
            tx.append(fields(m, 0))
    return base, db


def test_commits_never_merge_and_collection_leaves_one_clean_segment(tmp_path):
    base, db = make(tmp_path)
    with db:
        g0 = garbage(db)
        assert (g0["dead_postings"], g0["unused_files"]) == (0, 0)
        # the build's segment is a file, the transaction's inline
        assert manifest_segments(f"{base}.pdx") == [("file", 1), ("inline", 2)]
        assert g0["postings"] == 6 * 3 and (g0["segments"], g0["files"]) == (2, 1)
        n = 12   # more than the 8 segments at which commits used to merge
        for v in range(1, n + 1):
            db.update(1, fields(1, v))
        g = garbage(db)
        # one segment per commit, none merged; the n old versions of MFN 1
        # each leave their three postings dead
        assert g["segments"] == g0["segments"] + n
        assert g["dead_postings"] == 3 * n
        assert g["postings"] == g0["postings"] + 3 * n
        assert g["tombstones"] == g0["tombstones"] + n
        assert (g["files"], g["unused_files"]) == (1, 0)   # all inline
        before = answers(db)
        assert list(db.search("COMMON")) == [1, 2, 3, 4, 5, 6]
        assert list(db.search(f"T1V{n}")) == [1] and list(db.search("T1V0")) == []
        calls = collect(db, budget=4)
        assert calls > 3   # resumed over several calls
        g = garbage(db)
        # one segment, small enough to be inline: no file left
        assert g["segments"] == 1 and g["files"] == 0
        assert [k for k, _ in manifest_segments(f"{base}.pdx")] == ["inline"]
        assert (g["dead_postings"], g["tombstones"], g["unused_files"]) == (0, 0, 0)
        assert g["postings"] == 6 * 3
        assert g["terms"] == len(before["terms"])
        assert answers(db) == before
        # nothing left: one more call does nothing
        assert not T.index_collect(db, db.index._h, 10)
        assert garbage(db) == g
    left = sorted(os.listdir(f"{base}.pdx"))   # and the MANIFEST's spare
    assert left == ["MANIFEST", "MANIFEST.pydb-next"], left
    with pydb.open(base) as ro:
        assert answers(ro) == before
        assert ro.check().ok


def test_commits_during_a_merge_stay_after_the_merged_segment(tmp_path):
    """A merge is resumed across calls; commits made meanwhile are not in
    its input: they stay after the merged segment and their tombstones
    still hide the merged segment's postings of the records they change."""
    base, db = make(tmp_path, n=10)
    with db:
        for v in range(1, 4):
            db.update(2, fields(2, v))
        assert T.index_collect(db, db.index._h, 1)   # one key merged
        # commits meanwhile, in an order that makes no tail to merge (the
        # update weighs more than twice the deletion after it)
        db.append(fields(11, 1))
        db.update(3, fields(3, 7))
        db.delete(4)
        want = answers(db)
        n0 = garbage(db)["segments"]
        assert n0 == 1 + 1 + 3 + 3
        for _ in range(100):   # until the merge is published
            assert T.index_collect(db, db.index._h, 2)
            if garbage(db)["segments"] != n0:
                break
        g = garbage(db)
        # the merged segment, then the three commits made during the merge
        assert g["segments"] == 4
        assert g["dead_postings"] == 3 + 3   # MFN 3's and MFN 4's old postings
        assert answers(db) == want
        collect(db)   # a second collection merges those too
        g = garbage(db)
        assert (g["segments"], g["dead_postings"], g["tombstones"]) == (1, 0, 0)
        assert answers(db) == want
        assert db.check().ok
    with pydb.open(base) as ro:
        assert answers(ro) == want


def busy_collect(db, budget: int = 1000) -> int:
    """collect() as while commits go on (idle False) until it says no
    more; the number of calls."""
    for calls in range(1, 10000):
        if not T.index_collect(db, db.index._h, budget, False):
            return calls
    raise AssertionError("collect() never finished")


def test_a_tail_merge_keeps_its_tombstones_for_the_base(tmp_path):
    """While commits go on only the tail is merged: five one-record
    commits (3 postings and 1 tombstone each) after a base of 200 records
    (600 postings) become one segment that still tombstones the five
    records' old postings in the base, which stays as it is until idle."""
    base, db = make(tmp_path, n=200)
    with db:
        collect(db)   # one clean base segment
        for m in range(1, 6):
            db.update(m, fields(m, 1))
        want = answers(db)
        g = garbage(db)
        assert (g["segments"], g["dead_postings"], g["tombstones"]) == (6, 15, 5)
        assert busy_collect(db) == 2   # the merge, then nothing more due
        g = garbage(db)
        assert (g["segments"], g["dead_postings"], g["tombstones"]) == (2, 15, 5)
        assert g["postings"] == 600 + 15 and g["unused_files"] == 0
        assert answers(db) == want
        assert list(db.search("T3V0")) == [] and list(db.search("T3V1")) == [3]
        collect(db)   # idle: the whole set
        g = garbage(db)
        assert (g["segments"], g["dead_postings"], g["tombstones"]) == (1, 0, 0)
        assert g["postings"] == 600
        assert answers(db) == want
    with pydb.open(base) as ro:
        assert answers(ro) == want
        assert ro.check().ok


def test_appends_do_not_make_the_base_due(tmp_path):
    """Commits that only append make nothing dead (their tombstones name
    new MFNs), and while commits go on the base (200 records, 600
    postings) is not merged however much they add (40 one-record
    commits: 120 postings, which would have made it due); the tail
    merges keep the number of segments small.  One update (3 dead
    postings) does not make it due either; ten do (30 dead postings:
    their segments weigh 1/16 of it) and it is merged with everything
    before the tail.  Before, appends counted as updates: the base of a
    database filled one record per commit was rewritten every few
    commits."""
    base, db = make(tmp_path, n=200)
    with db:
        collect(db)   # one clean base segment
        base_gen = manifest_segments(f"{base}.pdx")[0]
        for m in range(201, 241):
            db.append(fields(m, 0))
            busy_collect(db)
        g = garbage(db)
        # 40 tombstones (one per appended MFN) that hide nothing
        assert (g["postings"], g["dead_postings"], g["tombstones"]) == (720, 0, 40)
        assert manifest_segments(f"{base}.pdx")[0] == base_gen   # not merged
        assert g["segments"] <= 8
        db.update(1, fields(1, 1))
        busy_collect(db)
        assert manifest_segments(f"{base}.pdx")[0] == base_gen   # not yet
        for m in range(2, 11):
            db.update(m, fields(m, 1))
        g = garbage(db)
        assert (g["tombstones"], g["dead_postings"]) == (50, 30)
        want = answers(db)
        busy_collect(db)
        assert manifest_segments(f"{base}.pdx")[0] != base_gen   # merged
        assert garbage(db)["dead_postings"] == 0
        assert answers(db) == want and list(db.search("T3V1")) == [3]
        assert list(db.search("T3V0")) == [] and len(db.search("COMMON")) == 240
    with pydb.open(base) as ro:
        assert ro.check().ok


def offer_tail(db) -> None:
    """One busy collection step as the collector thread makes it: the
    tail merge is finished and offered to the next commit; nothing is
    committed (the header's commit number stays)."""
    before = (db.stat()["header"]["commit"], manifest_segments(f"{db.path}.pdx"))
    assert not T.index_collect(db, db.index._h, 1000, False, True)
    assert (db.stat()["header"]["commit"], manifest_segments(f"{db.path}.pdx")) == before


def test_a_finished_tail_merge_rides_on_the_next_commit(tmp_path):
    """The collector thread offers a finished merge of inline segments to
    the handle's next commit, which writes the merged segment in place of
    its run in the MANIFEST it writes anyway: no commit (no log write, no
    fsync) of the merge's own.  Five one-record updates after a clean base
    make a tail of five; the next commit (an update of MFN 2, in the run)
    publishes the merge and its own segment after it (three segments,
    generations rising), with exactly one commit; the merge's dead
    postings (MFN 1 updated twice: its first update's 3) are in the
    collector's next report."""
    base, db = make(tmp_path, n=20)
    with db:
        collect(db)   # one clean base segment
        db.update(1, fields(1, 1))
        for m in range(1, 5):
            db.update(m, fields(m, 2))
        assert garbage(db)["segments"] == 6
        offer_tail(db)
        commit0 = db.stat()["header"]["commit"]
        db.update(2, fields(2, 3))
        assert db.stat()["header"]["commit"] == commit0 + 1
        segs = manifest_segments(f"{base}.pdx")
        assert [k for k, _ in segs] == ["inline", "inline", "inline"]
        gens = [gen for _, gen in segs]
        assert gens == sorted(set(gens))
        g = garbage(db)
        assert (g["segments"], g["tombstones"]) == (3, 4 + 1)
        # in the base MFN 1-4's first postings, in the merged one MFN 2's
        assert g["dead_postings"] == 4 * 3 + 3
        want = answers(db)
        assert list(db.search("T1V2")) == [1] and list(db.search("T1V1")) == []
        assert list(db.search("T2V3")) == [2] and list(db.search("T2V2")) == []
        assert db.collect()["postings"] == 3 + g["dead_postings"]
        assert answers(db) == want
    with pydb.open(base) as ro:   # another handle reads the MANIFEST
        assert answers(ro) == want
        assert ro.check().ok


def test_an_offered_merge_without_a_commit_is_committed_by_the_collector(tmp_path):
    """An offer no commit takes stays until a step that does not offer (an
    idle pass, db.collect(), a reader's step) takes it back and commits it
    itself, or a step that finds two commits that did not take it (one of
    this handle may have been past its prepare when the merge was offered;
    more come from another handle, and this handle's next commit may be
    far off while no tail merge starts).  An offer whose run a rebuild replaced
    is dropped by the next commit, which publishes its own segment
    alone."""
    base, db = make(tmp_path, n=200)   # the base is not due after 5 updates
    with db:
        collect(db)
        for m in range(1, 6):
            db.update(m, fields(m, 1))
        offer_tail(db)
        commit0 = db.stat()["header"]["commit"]
        busy_collect(db)   # steps that do not offer
        assert db.stat()["header"]["commit"] == commit0 + 1   # its own commit
        assert garbage(db)["segments"] == 2
        # offered, then another handle commits
        for m in range(1, 6):
            db.update(m, fields(m, 2))
        offer_tail(db)
        with pydb.open(base, readonly=False, gc="none") as other:
            other.update(15, fields(15, 9))
            other.update(16, fields(16, 9))
        commit0 = db.stat()["header"]["commit"]
        T.index_collect(db, db.index._h, 1000, False, True)   # as the thread's
        assert db.stat()["header"]["commit"] == commit0 + 1   # committed it
        assert garbage(db)["segments"] == 4   # base, the merged tail, the other's two
        assert list(db.search("T15V9")) == [15] and list(db.search("T3V2")) == [3]
        # offered again, then a rebuild replaces the index under it
        for m in range(6, 11):
            db.update(m, fields(m, 1))
        offer_tail(db)
        pydb.native.build_index(base)
        db.update(12, fields(12, 5))
        assert [k for k, _ in manifest_segments(f"{base}.pdx")] == ["file", "inline"]
        want = answers(db)
        assert list(db.search("T12V5")) == [12] and list(db.search("T10V1")) == [10]
    with pydb.open(base) as ro:
        assert answers(ro) == want
        assert ro.check().ok


def test_the_collector_thread_merges_ride_on_commits(tmp_path):
    """With policy background the collector thread's tail merges ride on
    the commits of its handle: 300 one-record commits (appends: nothing
    dead, no merge of the base due) are followed by few commits of the
    collector's own -- merges whose output is a file, and the idle
    pass's -- not one per tail merge (which made 60 to 75 here; a count,
    not a time: a slower thread merges less and commits less).  Once
    quiet the index is one segment that agrees with the records."""
    base, db = make(tmp_path, n=200)
    db.close()
    with pydb.open(base, readonly=False, sync=False, gc="background") as db:
        commit0 = db.stat()["header"]["commit"]
        for m in range(201, 501):
            db.append(fields(m, 1))
        for _ in range(600):   # until the idle pass has run (30 s at most)
            if db.stat()["header"]["pending"] is False:
                break
            time.sleep(0.05)
        own = db.stat()["header"]["commit"] - commit0 - 300
        assert 0 < own < 30
        g = garbage(db)
        assert (g["segments"], g["dead_postings"], g["tombstones"]) == (1, 0, 0)
        want = answers(db)
    with pydb.open(base) as ro:
        assert answers(ro) == want
        assert ro.check().ok


def test_the_busy_thread_leaves_unnamed_files_for_later(tmp_path, segment_files):
    """Removing unnamed segment files takes a checkpoint (four fsyncs):
    while commits go on the collector thread leaves them for its idle
    pass until they weigh 1 MiB and a quarter of the index.  Its busy
    steps merge (files: every segment is one here) and leave the files
    they unnamed; a step that does not offer (idle, collect()) removes
    them, after the checkpoint (the log emptied)."""
    base, db = make(tmp_path, n=20)
    with db:
        collect(db)
        for m in range(1, 6):
            db.update(m, fields(m, 1))
        assert garbage(db)["files"] == 6
        while T.index_collect(db, db.index._h, 1000, False, True):
            pass
        g = garbage(db)
        # merged into one segment; two files unnamed by those merges wait
        assert (g["segments"], g["files"], g["unused_files"]) == (1, 3, 2)
        assert os.path.getsize(f"{base}.wal") > 0   # no checkpoint
        busy_collect(db)   # steps that do not offer
        g = garbage(db)
        assert (g["unused_files"], g["files"]) == (0, 1)
        assert os.path.getsize(f"{base}.wal") == 0
        assert list(db.search("T3V1")) == [3]
    with pydb.open(base) as ro:
        assert ro.check().ok


def test_a_mostly_dead_tail_segment_is_merged_though_heavy(tmp_path):
    """A commit writes 40 records with 21 postings each; three later
    commits rewrite 24 of them with 2 postings each.  By weight alone the
    big segment would wait (it weighs more than twice the three small
    ones, which are too few to merge by themselves); most of its records
    are written again, so its postings are mostly dead: the busy
    collection merges all four (the base, 6,000 records, is not due:
    the rest weighs less than 1/16 of it)."""
    base, db = make(tmp_path, n=6000)
    with db:
        collect(db)
        words = " ".join(f"x{chr(97 + k)}" for k in range(20))   # XA..XT
        with db.transaction() as tx:
            for m in range(1, 41):
                tx.update(m, [(1, f"T{m}V1"), (2, words)])
        for lo in (1, 9, 17):
            with db.transaction() as tx:
                for m in range(lo, lo + 8):
                    tx.update(m, [(1, f"T{m}V2"), (2, "short")])
        want = answers(db)
        g = garbage(db)
        assert g["segments"] == 5
        # the base's postings of records 1-40, the big segment's of 1-24
        assert g["dead_postings"] == 40 * 3 + 24 * 21
        busy_collect(db)
        g = garbage(db)
        assert (g["segments"], g["dead_postings"]) == (2, 40 * 3)
        assert g["tombstones"] == 40   # kept for the base
        assert answers(db) == want
        assert list(db.search("XH")) == list(range(25, 41))
        assert list(db.search("SHORT")) == list(range(1, 25))


def test_busy_collection_keeps_the_segments_few(tmp_path):
    """300 one-record commits, each followed by a busy collection: the
    set never holds more than a dozen segments (tiered merging: the tail
    as a binary counter, the base once the segments after it weigh 1/16
    of it), every search answers as before each collection, and the idle
    collection at the end leaves one clean segment."""
    base, db = make(tmp_path, n=100, sync=False)
    rnd = random.Random(11)
    most = 0
    with db:
        for v in range(1, 301):
            m = rnd.randint(1, 100)
            db.update(m, fields(m, v))
            if v % 50 == 0:
                want = answers(db)
            busy_collect(db, budget=rnd.randint(1, 50))
            most = max(most, garbage(db)["segments"])
            if v % 50 == 0:
                assert answers(db) == want
        assert most <= 12
        g = garbage(db)
        assert g["unused_files"] == 0
        want = answers(db)
        collect(db)
        g = garbage(db)
        assert (g["segments"], g["dead_postings"], g["tombstones"]) == (1, 0, 0)
        assert g["postings"] == 100 * 3
        assert answers(db) == want
        assert db.check().ok


def test_a_snapshot_keeps_its_commit_and_pins_the_files(tmp_path):
    base, db = make(tmp_path)
    with db:
        for v in range(1, 5):
            db.update(1, fields(1, v))
        old = {k: list(db.search(k)) for k in ("T1V0", "T1V4", "COMMON", "GREEN")}
        snap = db.snapshot()
        db.update(2, fields(2, 3))
        collect(db)
        g = garbage(db)
        assert g["segments"] == 1 and g["dead_postings"] == 0
        # the snapshot (a registered reader of an older commit) pins the
        # files merged away: the build's segment (the commits' were inline
        # in the MANIFEST, whose old text the snapshot holds in memory)
        assert g["unused_files"] == 1 and g["unused_bytes"] > 0
        for k, v in old.items():
            assert list(snap.search(k)) == v
        assert list(db.search("T2V3")) == [2] and list(snap.search("T2V3")) == []
        snap.close()
        collect(db)
        g = garbage(db)
        assert (g["unused_files"], g["unused_bytes"], g["files"]) == (0, 0, 0)
        assert list(db.search("WHITE")) == [2]


READER = r"""
import sys, pydb
base, stop = sys.argv[1], sys.argv[2]
import os
n = bad = 0
with pydb.open(base) as db:
    while not os.path.exists(stop) or n < 20:
        got = list(db.search("COMMON"))
        if got != list(range(1, 9)):
            bad += 1
            print("bad", got, flush=True)
        for m in (1, 2):
            hits = [t.key for t in db.terms(f"T{m}V")]
            if len(hits) != 1:
                bad += 1
                print("bad terms", m, hits, flush=True)
        n += 1
print("done", n, bad, flush=True)
"""


def test_a_reader_in_another_process_during_collections(tmp_path):
    base, db = make(tmp_path, n=8, sync=False)
    stop = tmp_path / "stop"
    with db:
        r = subprocess.Popen([sys.executable, "-c", READER, str(base), str(stop)],
                             env=ENV, stdout=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 2.0
            v = 0
            while time.monotonic() < end:
                for _ in range(3):
                    v += 1
                    db.update(1 + v % 2, fields(1 + v % 2, v))
                collect(db, budget=3)
            stop.touch()
            out, _ = r.communicate(timeout=60)
        finally:
            if r.poll() is None:
                r.kill()
                r.wait()
        last = out.splitlines()[-1].split()
        assert last[0] == "done" and int(last[2]) == 0, out[-2000:]
        assert int(last[1]) >= 20
        collect(db)
        g = garbage(db)
        assert (g["segments"], g["dead_postings"], g["unused_files"]) == (1, 0, 0)


# ------------------------------------------------------------ kill -9

WORKER = r"""
import os, random, sys, time
import pydb
from pydb import _pydb
T = _pydb._testing
base, seed, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rnd = random.Random(seed)
COLORS = ["RED", "GREEN", "BLUE", "WHITE", "BLACK"]
db = pydb.open(base, readonly=False, sync=False, gc="none")
if mode == "crash":   # exit at the n-th write-side file operation from here on
    T.fail_io(rnd.randint(1, 40), crash=True)
print("ready", flush=True)
while True:
    for _ in range(2):
        m, v = rnd.randint(1, 8), rnd.randint(0, 99)
        print("begin", m, v, flush=True)
        db.update(m, [(1, f"T{m}V{v}"), (2, f"{COLORS[v % 5].lower()} common")])
        print("done", m, v, flush=True)
    idle = rnd.random() < 0.5   # busy: tail merges (tombstones kept)
    while T.index_collect(db, db.index._h, rnd.randint(1, 6), idle):
        pass
"""


def test_kill_during_collection(tmp_path):
    """A process updating and collecting in small steps is killed, at a
    random time (SIGKILL) or just before a random write-side file
    operation (a crash point), at least 50 times; after each kill the
    reopened database searches as the model of acknowledged updates says
    (the one in flight either way) and check() passes."""
    base, db = make(tmp_path, n=8, sync=False)
    db.close()
    model = {m: 0 for m in range(1, 9)}
    rnd = random.Random(11)
    kills = 0
    t0 = time.monotonic()
    while kills < 60 and (kills < 50 or time.monotonic() - t0 < 40):
        mode = "crash" if kills % 2 else "kill"
        p = subprocess.Popen([sys.executable, "-c", WORKER, str(base), str(rnd.randrange(10**9)),
                              mode], env=ENV, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        if mode == "kill":
            time.sleep(rnd.uniform(0.0, 0.08))
            p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        out = p.stdout.read()   # not communicate(): it would skip what
        p.stdout.close()        # readline() has buffered already
        assert p.returncode in (-signal.SIGKILL, 137), out
        kills += 1
        pending = None
        for line in out.splitlines():
            w = line.split()
            if len(w) != 3:   # a line the kill cut (the update not begun,
                continue      # or its "done" not written)
            if w[0] == "begin":
                pending = (int(w[1]), int(w[2]))
            elif w[0] == "done":
                model[int(w[1])] = int(w[2])
                pending = None
        with pydb.open(base, readonly=False, sync=False, gc="none") as db:
            assert db.check().ok
            if pending is not None:
                m, v = pending
                got = [t.key for t in db.terms(f"T{m}V")]
                assert got in ([f"T{m}V{v}"], [f"T{m}V{model[m]}"]), (got, pending, model[m])
                model[m] = int(got[0].split("V")[1])
            for m, v in model.items():
                assert list(db.search(f"T{m}V{v}")) == [m], (
                    m, v, [t.key for t in db.terms(f"T{m}V")], db[m].fields, mode, out[-300:],
                    garbage(db), sorted(os.listdir(f"{base}.pdx")),
                    open(f"{base}.pdx/MANIFEST", "rb").read()[-200:])
                assert [t.key for t in db.terms(f"T{m}V")] == [f"T{m}V{v}"]
            assert list(db.search("COMMON")) == list(range(1, 9))
            for i, c in enumerate(COLORS):
                assert list(db.search(c)) == sorted(m for m, v in model.items() if v % 5 == i)
            g = garbage(db)
            assert g["postings"] - g["dead_postings"] == 8 * 3
    assert time.monotonic() - t0 < 120
    with pydb.open(base, readonly=False, gc="none") as db:
        collect(db)
        g = garbage(db)
        assert (g["segments"], g["dead_postings"], g["tombstones"]) == (1, 0, 0)
        # leftovers removed; the one segment left is small: inline
        assert (g["unused_files"], g["files"]) == (0, 0)
        assert os.listdir(f"{base}.pdx") == ["MANIFEST"] or \
            sorted(os.listdir(f"{base}.pdx")) == ["MANIFEST", "MANIFEST.pydb-next"]
        assert sorted(os.listdir(f"{base}.pdx"))[0] == "MANIFEST"


def copy_with_header(base0: Path, base: Path) -> Path:
    """A copy of the database at base0 as base: its files, its index and
    its commit header (.shm), so that the copy's header holds the state a
    test then crashes a writer against."""
    for ext in (".mst", ".xrf", ".wal", ".shm"):
        shutil.copy(f"{base0}{ext}", f"{base}{ext}")
    shutil.copytree(f"{base0}.pdx", f"{base}.pdx")
    return base


MERGER = r"""
import sys
import pydb
from pydb import _pydb
T = _pydb._testing
base, n, sync = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
db = pydb.open(base, readonly=False, sync=sync, gc="none")
T.fail_io(n, crash=True)   # n > 0: exit just before the n-th file operation
while T.index_collect(db, db.index._h, 1000, True):
    pass
print(T.io_count(), flush=True)
"""


def snapshot_searches(db, n: int) -> None:
    """In a snapshot, each record's title finds it alone and COMMON every
    record: the snapshot's index is the one of its commit."""
    with db.snapshot() as s:
        for m in range(1, n + 1):
            title = s[m][1][0]
            assert list(s.search(title)) == [m], (m, title)
        assert list(s.search("COMMON")) == list(range(1, n + 1))


@pytest.mark.parametrize("sync,recovery", [(True, "open"), (False, "open"),
                                           (True, "transaction")])
def test_snapshot_search_after_a_crash_in_a_merge_commit(tmp_path, sync, recovery):
    """The collector's merge commit changes the MANIFEST and no record, so
    after a crash between its MANIFEST and its published state (the
    recovery replays the MANIFEST from the log) the control record still
    agrees with the commit header: the header must still stop naming the
    index generation before the merge.  A crash just before each
    write-side file operation of the collection, every one; after each, a
    read-only handle (the dead writer's log replayed by it) and then a
    writer's take a snapshot and search it.  The replay is done by the
    read-only open (recovery "open"), or by the next transaction of a
    writer handle opened before the crash ("transaction"; a reader handle
    opened before it too).  Before the fix the snapshot searches raised
    LockTimeoutError ("the index kept moving past new snapshots") after
    the crash points past the merge's log frame, until the next commit."""
    n = 5
    base0, db = make(tmp_path, n=n, name="pristine", sync=sync)
    with db:
        for v in range(1, 4):
            db.update(1 + v % n, fields(1 + v % n, v))

    count = copy_with_header(base0, tmp_path / "count")
    total = int(subprocess.run([sys.executable, "-c", MERGER, str(count), "-1", str(int(sync))],
                               env=ENV, capture_output=True, text=True, check=True).stdout)
    assert total > 5
    for k in range(1, total + 1):
        base = copy_with_header(base0, tmp_path / f"c{k}")
        before = []
        if recovery == "transaction":
            before = [pydb.open(base, readonly=False, sync=sync, gc="none"),
                      pydb.open(base, gc="none")]
        p = subprocess.run([sys.executable, "-c", MERGER, str(base), str(k), str(int(sync))],
                           env=ENV, capture_output=True, text=True)
        assert p.returncode == 137, (k, p.stdout, p.stderr[-2000:])
        if before:
            writer, reader = before
            with writer.transaction():         # its begin replays the log;
                pass                           # no commit publishes after it
            snapshot_searches(reader, n)
            snapshot_searches(writer, n)
            writer.close()
            reader.close()
        with pydb.open(base) as db:            # read-only: replays the log
            snapshot_searches(db, n)
        with pydb.open(base, readonly=False, gc="none") as db:
            snapshot_searches(db, n)
            assert db.check().ok


CRASHING_UPDATE = r"""
import errno, sys
import pydb
from pydb import _pydb
T = _pydb._testing
base, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
db = pydb.open(base, readonly=False, gc="none")
# n > 0: just before the n-th write-side file operation, exit (crash), or
# let it fail with ENOSPC and stay alive until stdin closes
T.fail_io(n, errno.ENOSPC, crash=mode == "crash")
try:
    db.update(1, [(1, "T1V9"), (2, "white common")])
except pydb.DiskError:
    pass
print(T.io_count(), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("mode", ["crash", "enospc"])
def test_a_reader_keeps_the_published_state_while_a_dead_writer_s_commit_waits(tmp_path, mode):
    """A writer killed while it applies a commit (a crash just before each
    write-side file operation of one update, every one), or one whose
    apply fails there (ENOSPC; it stays alive, read-only), leaves the
    control record ahead of the commit header with its applying marker
    set: a reader opened before, at its next refresh point, goes on
    reading the header's latest state -- a registered snapshot of the
    published commit whose index agrees with its records -- instead of
    the files half-applied (the record's new version without its index
    files: the index soak, tools/soak.py --index, found searches missing
    records that way)."""
    n = 3
    base0, db = make(tmp_path, n=n, name="pristine")
    db.close()
    count = copy_with_header(base0, tmp_path / "count")
    total = int(subprocess.run([sys.executable, "-c", CRASHING_UPDATE, str(count), "-1", mode],
                               env=ENV, capture_output=True, text=True, input="",
                               check=True).stdout)
    assert total > 3
    for k in range(1, total + 1):
        base = copy_with_header(base0, tmp_path / f"c{k}")
        with pydb.open(base, gc="none") as reader:
            assert len(reader) == n
            p = subprocess.Popen([sys.executable, "-c", CRASHING_UPDATE, str(base), str(k), mode],
                                 env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            assert p.stdout is not None and p.stdin is not None
            if mode == "crash":
                assert p.wait(timeout=60) == 137, (k, p.communicate())
            else:   # failed, alive: the line it prints after the update
                assert p.stdout.readline(), (k, p.communicate())
            assert len(reader) == n   # a refresh point: the header is judged again
            with reader.snapshot() as s:
                info = s.info()
                assert info["registered"] and info["commit"] > 0, (k, info)
                # the published commit: the update's if it got that far
                title = s[1][1][0]
                other = {"T1V0": "T1V9", "T1V9": "T1V0"}[title]
                assert list(s.search(title)) == [1] and list(s.search(other)) == []
                assert list(s.search("COMMON")) == list(range(1, n + 1))
            p.communicate()   # closes its stdin: it exits


# ------------------------------------------------------------ ENOSPC / EIO

@pytest.mark.parametrize("eno", [errno.ENOSPC, errno.EIO])
def test_a_failed_file_operation_during_collection(tmp_path, eno):
    """The n-th write-side file operation of a collection fails, for every
    n: collect() raises DiskError with the errno; before the commit point
    the index is as it was (same answers, the garbage still counted, no
    file left behind) and a later collection succeeds; after it, reopening
    gives the collected index.  Searches never change."""
    base0, db = make(tmp_path, n=5, name="pristine", sync=True)
    with db:
        for v in range(1, 4):
            db.update(1, fields(1, v))
        want = answers(db)
        g_before = garbage(db)
    # how many operations a whole collection does
    work = tmp_path / "work"

    def fresh():
        if work.exists():
            shutil.rmtree(work)
        work.mkdir()
        for f in base0.parent.iterdir():
            if f.name.startswith("pristine"):
                dst = work / f.name
                (shutil.copytree if f.is_dir() else shutil.copy)(f, dst)
        return pydb.open(work / "pristine", readonly=False, gc="none")

    db = fresh()
    T.fail_io(-1)
    try:
        collect(db)
        total = T.io_count()
    finally:
        T.fail_io(0)
    db.close()
    assert total >= 4
    failed_before_commit = silent = 0
    for n in range(1, total + 1):
        db = fresh()
        T.fail_io(n, eno)
        try:
            collect(db)
            raised = None
        except pydb.DiskError as e:
            raised = e
        finally:
            fired = T.io_fired()
            T.fail_io(0)
        # (an ftruncate too: the log is emptied by the checkpoint before
        # the removal, whose failure fails the step; sync=True commits
        # leave their frames in the log, csrc/wal.h).  Only the zeros the
        # step's frame grows the log by may fail silently (best effort).
        if raised is None:
            assert fired == "pwrite", (n, fired)
            silent += 1
        else:
            assert raised.errno == eno, (n, fired)
        assert answers(db) == want
        g = garbage(db)
        if g["segments"] == g_before["segments"]:
            failed_before_commit += 1
            assert g["dead_postings"] == g_before["dead_postings"]
            assert not [f for f in os.listdir(work / "pristine.pdx") if f.startswith("merge-")]
            try:
                collect(db)   # the handle may have turned read-only (fsync)
            except pydb.ReadOnlyError:
                pass
        db.close()
        with pydb.open(work / "pristine", readonly=False, gc="none") as db:
            assert answers(db) == want
            assert db.check().ok
            collect(db)
            g = garbage(db)
            assert (g["segments"], g["dead_postings"], g["unused_files"]) == (1, 0, 0)
            assert answers(db) == want
    assert failed_before_commit >= 2 and silent == 1, (failed_before_commit, silent)
