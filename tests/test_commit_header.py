"""The commit header <base>.shm against writers that do not publish,
damage after open, and garbage in the reader table (docs/architecture.md,
"Committed state"; csrc/shm.h).

Each test builds the situation from files and processes, then asserts
what every reader must see: the files' committed state, and a reader
table that registers snapshots again.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import struct

import pytest

import pydb

from conftest import build_db

HEAD, SLOTS, SLOT = 4096, 960, 64
SHM_SIZE = HEAD + SLOTS * SLOT


def make(base, n=20):
    with pydb.create(base) as db:
        with db.transaction() as tx:
            for i in range(n):
                tx.append([(1, f"record {i + 1}")])
    return str(base) + ".shm"


def latest(shm: str) -> int:
    with open(shm, "rb") as f:
        f.seek(24)
        return struct.unpack("<Q", f.read(8))[0]


def _hold_transaction(base, ready, release):
    """A writer that holds the writer lock and never applies anything."""
    db = pydb.open(base, readonly=False)
    with db.transaction():
        ready.set()
        release.wait(60)
    db.close()


def test_commits_of_a_writer_that_did_not_publish_are_seen_while_another_holds_the_lock(
        tmp_path):
    """The header is left behind by a writer that does not publish (here:
    the header file restored to its state before 10 commits, as an older
    pydb or a writer that could not open it would leave it).  While
    another process holds the writer lock without applying anything, a
    reader must still see the files' 30 records, not the header's 20."""
    base = tmp_path / "db"
    shm = make(base)
    before = open(shm, "rb").read()
    with pydb.open(base, readonly=False) as db:
        for i in range(10):
            db.append([(1, f"later {i}")])
    open(shm, "r+b").write(before)          # the header says: 20 records
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold_transaction, args=(str(base), ready, release))
    p.start()
    try:
        assert ready.wait(60)
        with pydb.open(base) as db:
            assert db.max_mfn == 30 and len(db) == 30
            assert db[30].fields[0].value == "later 9"
            with db.snapshot() as snap:
                assert snap.max_mfn == 30 and len(snap) == 30
    finally:
        release.set()
        p.join(60)
    assert p.exitcode == 0
    # the next writer brings the header in line: readers use it again
    with pydb.open(base, readonly=False) as db:
        pass
    with pydb.open(base) as db, db.snapshot() as snap:
        assert snap.info()["registered"] and snap.max_mfn == 30
        assert snap.commit == latest(shm)


def _write_as_another_program(base, write):
    """write(w) done to the database at `base` as a program that does not
    know the header (WinISIS, CISIS) writes: the files changed in place,
    the header left as it was.  The bytes are those pydb writes for the
    same changes to a copy (w: a writer open on the copy)."""
    other = base.parent / (base.name + "-other")
    for ext in (".mst", ".xrf"):
        shutil.copy(str(base) + ext, str(other) + ext)
    with pydb.open(other, readonly=False) as w:
        write(w)
    for ext in (".mst", ".xrf"):
        with open(str(base) + ext, "r+b") as f:
            f.write(open(str(other) + ext, "rb").read())


def _append_as_another_program(base, n):
    """n records appended to the database at `base` by another program."""
    _write_as_another_program(
        base, lambda w: [w.append([(1, f"appended {i + 1}")]) for i in range(n)])


@pytest.mark.parametrize("header", [False, True], ids=["files", "header"])
def test_an_iteration_from_the_start_sees_what_another_program_appended(tmp_path, header):
    """A handle that read the database, then another program appends 10
    records: an iteration from MFN 1 re-reads the control record and
    yields all 30, with no header (files mode) and with a header the
    other program did not update (the control record says more, no pydb
    writer is applying a commit: the header is not trusted)."""
    base = tmp_path / "db"
    if header:
        make(base)
    else:
        build_db(base, "isis-packed", [[(1, f"record {i + 1}".encode())] for i in range(20)])
    assert os.path.exists(str(base) + ".shm") == header
    with pydb.open(base) as r:
        assert [rec.mfn for rec in r] == list(range(1, 21))
        _append_as_another_program(base, 10)
        assert [rec.mfn for rec in r] == list(range(1, 31))
        assert r[30].fields[0].value == "appended 10"


def test_an_iteration_without_a_header_ends_where_its_last_take_ended(tmp_path):
    """Without a header every snapshot an iteration takes re-reads the
    control record (system calls): the batch that reaches the end of the
    state its take saw is the last, so records another program appends
    after that batch was read are not yielded (the next iteration
    yields them).  With a header (a pydb writer) the next batch takes
    the latest commit, which costs no system call, and yields them."""
    base = tmp_path / "db"
    build_db(base, "isis-packed", [[(1, f"record {i + 1}".encode())] for i in range(20)])
    with pydb.open(base) as r:
        it = iter(r)
        assert next(it).mfn == 1                  # the batch: MFNs 1..20
        _append_as_another_program(base, 10)
        assert [rec.mfn for rec in it] == list(range(2, 21))
        assert [rec.mfn for rec in r] == list(range(1, 31))
    header = tmp_path / "header"
    make(header)
    with pydb.open(header) as r, pydb.open(header, readonly=False) as w:
        it = iter(r)
        assert next(it).mfn == 1
        for i in range(10):
            w.append([(1, f"later {i}")])
        assert [rec.mfn for rec in it] == list(range(2, 31))


def _update_as_another_program(base, values):
    """Records updated in the database at `base` by another program: each
    new version appended to the master file, its XRF entry pointed at it,
    NXTMFN as it was and NXTMFB/NXTMFP moved past it.  `values`: {MFN:
    value of field 1}."""
    _write_as_another_program(
        base, lambda w: [w.update(mfn, [(1, value)]) for mfn, value in values.items()])


@pytest.mark.parametrize("io", ["mmap", "pread", "direct"])
def test_an_iteration_sees_what_another_program_updated(tmp_path, io):
    """A handle that read the database (no header), then another program
    updates three records: the master file grows and the control
    record's end moves, NXTMFN does not.  An iteration from MFN 1 yields
    the new versions (the handle takes the files' sizes again because
    the control record announces more than it knew; had it kept the old
    end, it would follow each new version back to the old one).  In
    each of the three I/O modes."""
    base = tmp_path / "db"
    build_db(base, "isis-packed", [[(1, f"record {i + 1}".encode())] for i in range(20)])
    new = {2: "updated 2", 7: "updated 7, " + "a longer value " * 80, 20: "updated 20"}
    with pydb.open(base, io=io) as r:
        assert [rec.fields[0].value for rec in r] == [f"record {m}" for m in range(1, 21)]
        size = os.path.getsize(str(base) + ".mst")
        _update_as_another_program(base, new)
        assert os.path.getsize(str(base) + ".mst") > size
        assert [rec.fields[0].value for rec in r] == \
            [new.get(m, f"record {m}") for m in range(1, 21)]
        assert r.max_mfn == 20


def test_header_damaged_after_a_writer_opened_is_rebuilt_by_its_next_commit(tmp_path):
    base = tmp_path / "db"
    shm = make(base)
    with pydb.open(base, readonly=False) as w:
        with open(shm, "r+b") as f:
            f.write(b"GARBAGE!")                  # the magic, under the writer
        with pydb.open(base) as r:                # never trusted: files mode
            assert r.max_mfn == 20
            with r.snapshot() as snap:
                assert not snap.info()["registered"] and snap.commit == 0
        w.append([(1, "after the damage")])
        assert open(shm, "rb").read(8) == b"PYDBSHM1"
        with pydb.open(base) as r, r.snapshot() as snap:
            assert snap.info()["registered"] and snap.max_mfn == 21


def test_reader_opened_on_a_damaged_header_uses_it_once_rebuilt(tmp_path):
    base = tmp_path / "db"
    shm = make(base)
    with open(shm, "r+b") as f:
        f.write(b"GARBAGE!")
    with pydb.open(base) as r:
        with r.snapshot() as snap:
            assert not snap.info()["registered"]
        with pydb.open(base, readonly=False) as w:   # rebuilds it at open
            w.append([(1, "x")])
        assert len(r) == 21                          # a refresh point
        with r.snapshot() as snap:
            assert snap.info()["registered"] and snap.max_mfn == 21


def test_reader_table_full_of_garbage_is_swept_by_the_writer(tmp_path):
    """Every slot holds garbage no live process leaves for more than a few
    instructions: negative pids (a 'cleaner' that is this very test
    process, alive) and a live pid (1) without start time and with a
    commit never published.  Registration fails (the table is full);
    two writer sweeps (two transactions) free them all."""
    base = tmp_path / "db"
    shm = make(base)
    with open(shm, "r+b") as f:
        for i in range(SLOTS):
            f.seek(HEAD + i * SLOT)
            if i % 2:
                f.write(struct.pack("<iIQQ", -os.getpid(), 0, 0, 0))
            else:
                f.write(struct.pack("<iIQQ", 1, 0, 0, 10**9))
    with pydb.open(base) as r:
        with pytest.raises(pydb.LockTimeoutError, match="reader table is full"):
            r.snapshot()
    with pydb.open(base, readonly=False) as w:       # sweep 1 (at open)
        w.append([(1, "one")])                       # sweep 2: freed
    with pydb.open(base) as r, r.snapshot() as snap:
        assert snap.info()["registered"] and snap.max_mfn == 21
    with open(shm, "rb") as f:
        f.seek(HEAD)
        table = f.read(SLOTS * SLOT)
    assert table == bytes(SLOTS * SLOT)              # all free again, zeroed


def test_an_empty_header_a_reader_finds_is_laid_out_with_the_master_files_mode(tmp_path):
    """An empty header file (its creator stopped before laying it out) is
    laid out by the first handle that opens it, a reader too, and given
    the master file's mode, so that every process that may read the
    database can register in it."""
    base = tmp_path / "db"
    shm = make(base)
    os.chmod(str(base) + ".mst", 0o640)
    os.remove(shm)
    open(shm, "wb").close()
    os.chmod(shm, 0o600)
    with pydb.open(base) as r, r.snapshot() as snap:
        assert snap.max_mfn == 20
    assert os.stat(shm).st_mode & 0o777 == 0o640
    assert os.path.getsize(shm) == SHM_SIZE and open(shm, "rb").read(8) == b"PYDBSHM1"


def test_header_is_never_shortened_and_gets_the_master_files_mode(tmp_path):
    base = tmp_path / "db"
    old = os.umask(0o077)
    try:
        with pydb.create(base) as db:
            db.append([(1, "x")])
    finally:
        os.umask(old)
    shm = str(base) + ".shm"
    assert os.stat(shm).st_mode & 0o777 == os.stat(str(base) + ".mst").st_mode & 0o777
    # a longer file (a later version's) with a damaged head: rebuilt in
    # place, never cut to this version's size
    with open(shm, "r+b") as f:
        f.write(b"PYDBSHM9")
        f.truncate(SHM_SIZE + 8192)
    with pydb.open(base, readonly=False) as db:
        db.append([(1, "y")])
    assert os.path.getsize(shm) == SHM_SIZE + 8192
    assert open(shm, "rb").read(8) == b"PYDBSHM1"


def test_copy_of_a_database_without_its_header_reads_in_files_mode(tmp_path):
    base = tmp_path / "db"
    make(base)
    copy = tmp_path / "copy"
    for ext in ("mst", "xrf"):
        shutil.copy(f"{base}.{ext}", f"{copy}.{ext}")
    with pydb.open(copy) as db:
        assert not os.path.exists(f"{copy}.shm")      # readers create nothing
        assert db.max_mfn == 20
        with db.snapshot() as snap:
            assert snap.commit == 0 and not snap.info()["registered"]
            assert [r.mfn for r in snap] == list(range(1, 21))


_WRITE_AND_COMPACT = """
import sys, pydb
with pydb.open(sys.argv[1], readonly=False, gc="none") as db:
    db.update(7, [(1, "changed")])
    if sys.argv[2] == "collect":
        assert db.collect()["compactions"] == 1
    db.append([(1, "new")])
"""


@pytest.mark.parametrize("collect", ["collect", "no"])
def test_a_snapshot_without_a_header_is_never_read_in_files_it_was_not_taken_of(tmp_path, collect):
    """A snapshot taken where no header exists yet (a database only
    other programs wrote) holds no slot, so a writer of another process
    that creates the header may compact the files under it.  Its reads
    then raise, naming why, instead of answering from the new files
    (they answered the changed record's new value).  Without a
    compaction the snapshot keeps its records (back pointers)."""
    import subprocess
    import sys
    base = tmp_path / "db"
    make(base)
    for ext in ("shm", "wal"):
        if os.path.exists(f"{base}.{ext}"):
            os.remove(f"{base}.{ext}")
    with pydb.open(base) as db, db.snapshot() as snap:
        assert snap.commit == 0 and not snap.info()["registered"]
        assert snap[7][1] == ["record 7"]
        subprocess.run([sys.executable, "-c", _WRITE_AND_COMPACT, str(base), collect],
                       check=True, timeout=120)
        assert os.path.exists(f"{base}.shm")
        if collect == "no":
            assert snap[7][1] == ["record 7"] and len(snap) == 20
            assert [r[1] for r in snap] == [[f"record {i}"] for i in range(1, 21)]
        else:
            for read in (lambda: snap[7], lambda: list(snap), lambda: snap.mfns(),
                         lambda: len(snap), lambda: snap.check(), lambda: snap.versions(7)):
                with pytest.raises(pydb.DiskError, match="replaced by a compaction.*"
                                   "without a usable commit header.*take a new snapshot") as e:
                    read()
                # no system call failed: errno 0, and no "[Errno 0]" before the message
                assert e.value.errno == 0 and str(e.value).startswith(f"{base}.mst: ")
        assert db[7][1] == ["changed"] and db.max_mfn == 21
        with db.snapshot() as again:
            assert again[7][1] == ["changed"] and len(again) == 21
