"""One fsync per durable commit, and checkpoints (csrc/wal.h, "Checkpoints").

A ``sync=True`` commit fdatasyncs its log frame and nothing else; the
frame stays in the log, and the commit header records the log's length
as applied.  A checkpoint (a long log, a collection step, closing a
writer) syncs the .mst/.xrf and empties the log.  Recovery replays the
whole log only when the header cannot vouch for it (a new boot: here
emulated by removing the .shm), writing each byte once with its last
value.  The tests fork writers that die without closing, put back files
as a power cut leaves them (writes never synced lost), and fail every
operation of a checkpoint and of a multi-commit replay in turn.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_native_index import _checksum as crc32c

import pydb
from pydb import _pydb

from conftest import DATA, REPO, SANITIZER, hypothesis_examples
from writer_model import (
    Oracle,
    check_files,
    content,
    create_indexed,
    index_agrees,
    open_db,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def _ops_of(fn) -> list[str]:
    """Names of the write-side operations (pwrite, fdatasync, fsync,
    ftruncate, rename, unlink, exchange) that the step of fn makes, in order.
    fn(n) sets ``fail_io(n, EIO)`` around its step and returns
    ``_fired(n)``: fn(-1) counts the operations, then fn(n) makes the
    n-th fail, for every n (the same operations every time up to the
    failing one)."""
    total = fn(-1)
    return [fn(n) for n in range(1, total + 1)]


def _fired(n):
    """After a step run with ``fail_io(n)``: the operation count (n = -1)
    or the name of the operation that failed; the fault is cleared."""
    try:
        if n == -1:
            return _pydb._testing.io_count()
        fired = _pydb._testing.io_fired()
        return fired.split()[0] if fired else ""
    finally:
        _pydb._testing.fail_io(0)


def _make(base, n=20) -> Oracle:
    with pydb.create(base, "isis-packed", sync=True, gc="none") as db:
        with db.transaction() as tx:
            for m in range(1, n + 1):
                tx.append(content(m, m, 40))
    return Oracle({m: (False, m, 40) for m in range(1, n + 1)})


def _wal(base) -> int:
    return os.path.getsize(f"{base}.wal")


def _frames(base) -> int:
    """The length of the log's frames (csrc/wal.h), from its start; only
    zeros (a grown tail) may follow them."""
    data = open(f"{base}.wal", "rb").read()
    pos = 0
    while data[pos:pos + 8] == b"PYDBWAL1":
        pos += 40 + struct.unpack_from("<Q", data, pos + 16)[0] + 16
    assert not data[pos:].strip(b"\0"), (pos, len(data))
    return pos


def test_a_durable_commit_fsyncs_only_its_log(tmp_path):
    """sync=True: the frame is written and fdatasync'ed, then the .mst/.xrf
    are written without an fsync; the frame stays.  The first commit of
    a log fdatasyncs its frame before it writes in place (the commit
    point); a later one whose blocks that synced frame holds writes in
    place first and fdatasyncs the log after the writer lock is let go
    (csrc/txn.c, "One fsync for many commits")."""
    base0 = tmp_path / "p"
    _make(base0)

    def one(first, n):
        d = tmp_path / f"c{first}{n}"
        d.mkdir()
        for ext in (".mst", ".xrf"):
            shutil.copy(f"{base0}{ext}", d / f"db{ext}")
        with open_db(d / "db", gc="none") as db:
            if not first:
                db.update(3, content(3, 99, 40))   # the log's first commit
            _pydb._testing.fail_io(n, errno.EIO)
            try:
                db.update(4, content(4, 99, 40))
            except pydb.Error:
                pass
            got = _fired(n)
            if n == -1:
                assert _wal(d / "db") > 0          # its frame, kept
        return got

    # the frame, the zeros the new log grows by, the commit point; then
    # the records, the XRF block, the control record
    names = _ops_of(lambda n: one(True, n))
    assert names == ["pwrite", "pwrite", "fdatasync"] + ["pwrite"] * 3, names
    names = _ops_of(lambda n: one(False, n))
    # the frame, records, XRF block, control record; then the fdatasync
    assert names == ["pwrite"] * 4 + ["fdatasync"], names


def test_the_log_keeps_commits_until_a_checkpoint(tmp_path):
    """Frames pile up, in a file grown by zeros to a multiple of 64 KiB
    (csrc/wal.h); another handle sees every commit at once; closing the
    writer checkpoints (the log is emptied); the commit that takes the
    log past 4 MiB checkpoints."""
    base = tmp_path / "db"
    _make(base)
    with open_db(base, gc="none") as db, pydb.open(base) as reader:
        sizes = []
        for v in range(5):
            db.update(1, content(1, 100 + v, 40))
            sizes.append(_frames(base))
            assert _wal(base) == 65536
            assert reader[1].raw(1) == [b"1:%d" % (100 + v)]
        assert sizes == sorted(sizes) and len(set(sizes)) == 5, sizes
    assert _wal(base) == 0
    with open_db(base, gc="none") as db:
        seen = []
        for _ in range(30):
            with db.transaction() as tx:          # about 210 KB a frame
                for _ in range(7):
                    tx.append([(2, b"x" * 30_000)])
            seen.append(_frames(base))
            assert _wal(base) % 65536 == 0 and _wal(base) - seen[-1] < 65536
        peak = max(seen)
        # the commit that took the log past 4 MiB checkpointed: empty
        assert peak < 4 << 20 <= peak + 220_000, seen
        assert seen[seen.index(peak) + 1] == 0, seen
    check_files(base)


def _commit(db, ops) -> None:
    """Make each transaction of `ops` (A, U, D as in writer_model.Oracle)."""
    for txn in ops:
        with db.transaction() as tx:
            for op in txn:
                if op[0] == "A":
                    tx.append(content(op[1], op[2], op[3]))
                elif op[0] == "U":
                    tx.update(op[1], content(op[1], op[2], op[3]))
                else:
                    tx.delete(op[1])


def _killed_writer(base, ops, between=None, more=()) -> None:
    """A forked writer makes each transaction of `ops` (sync=True), calls
    between() if given, makes those of `more`, and dies by SIGKILL
    without closing."""
    pid = os.fork()
    if pid == 0:
        try:
            db = open_db(base, gc="none")   # never closed: killed
            _commit(db, ops)
            if between:
                between()
            _commit(db, more)
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status), status


#: 30 transactions: updates of the same records (their XRF block and
#: control record are rewritten by every frame), appends crossing XRF
#: blocks, deletions
TXNS = [[("U", 1 + k % 5, 200 + k, 30 + k), ("A", 21 + 5 * k, 1, 60), ("A", 22 + 5 * k, 1, 9),
         ("A", 23 + 5 * k, 1, 700), ("A", 24 + 5 * k, 1, 1), ("A", 25 + 5 * k, 1, 3)]
        + ([("D", 6 + k)] if k % 3 == 0 else [])
        for k in range(30)]


def _expected(oracle: Oracle) -> Oracle:
    o = oracle.copy()
    for txn in TXNS:
        o.apply(txn)
    return o


def _files(base) -> dict[str, bytes]:
    """The .mst and .xrf of the database at `base`, by extension."""
    return {ext: open(f"{base}{ext}", "rb").read() for ext in (".mst", ".xrf")}


def _power_cut(base, saved: dict[str, bytes]) -> None:
    """What a power cut leaves: the files in `saved` (_files) as they were
    at the last checkpoint, and no commit header (a new boot)."""
    for ext, data in saved.items():
        open(f"{base}{ext}", "wb").write(data)
    os.unlink(f"{base}.shm")


@pytest.mark.parametrize("lost", ["none", "mst", "xrf", "both"])
def test_replay_of_many_commits_after_a_power_cut(tmp_path, lost):
    """A writer commits 30 transactions and is killed.  A power cut loses
    what was never synced: the .mst and/or .xrf as they were at the last
    checkpoint (put back from a copy), and the header (a new boot: the
    .shm removed).  The next open replays the 30 frames: every commit is
    there, the files check, the log is empty."""
    base = tmp_path / "db"
    want = _expected(_make(base))
    saved = _files(base)
    _killed_writer(base, TXNS)
    assert _wal(base) > 0
    _power_cut(base, {ext: saved[ext] for ext in {
        "none": (), "mst": (".mst",), "xrf": (".xrf",), "both": (".mst", ".xrf")}[lost]})
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0], want.matches(db)[1]
        assert db.check().ok
    assert _wal(base) == 0
    check_files(base)


#: XRF blocks hold 127 entries: MFNs 1, 128, 255 and 382 lie in blocks
#: 0..3.  The first transaction rewrites all four blocks (one log entry
#: of 2,048 bytes); later ones rewrite blocks inside that run, so that
#: the first entry's bytes survive only between them.
SPLIT_TXNS = [[("U", 1, 7001, 50), ("U", 128, 7001, 50), ("U", 255, 7001, 50),
               ("U", 382, 7001, 50)],
              [("U", 128, 7002, 60)],
              [("U", 382, 7003, 70)]]


def test_a_replay_keeps_an_earlier_entry_around_a_later_one(tmp_path):
    """A later frame that rewrites one XRF block in the middle of an
    earlier frame's run of blocks: after a power cut (the .xrf as the
    last checkpoint left it, a new boot) the replay writes the earlier
    frame's blocks before and after it too.  (Found by the LazyFS tier:
    replay cut the earlier entry at the later one's start, and an
    acknowledged update came back at its older version.)"""
    base = tmp_path / "db"
    want = _make(base, n=400)
    for txn in SPLIT_TXNS:
        want.apply(txn)
    saved = (tmp_path / "db.xrf").read_bytes()
    _killed_writer(base, SPLIT_TXNS)
    (tmp_path / "db.xrf").write_bytes(saved)
    os.unlink(f"{base}.shm")
    with open_db(base, gc="none") as db:
        assert [db[m].fields[0].raw for m in (1, 128, 255, 382)] == [
            b"1:7001", b"128:7002", b"255:7001", b"382:7003"]
        assert want.matches(db)[0], want.matches(db)[1]
        assert db.check().ok
    check_files(base)


def test_the_header_vouches_for_an_applied_log(tmp_path):
    """Killed writers leave their frames; within the boot the header says
    they are applied, so a read-only open and a writer's open replay
    nothing (no write at all before the writer's own work)."""
    base = tmp_path / "db"
    want = _expected(_make(base))
    _killed_writer(base, TXNS)
    size = _wal(base)
    assert size > 0
    _pydb._testing.fail_io(-1)
    with pydb.open(base) as ro:
        assert want.matches(ro)[0]
    db = open_db(base, gc="none")
    opened = _fired(-1)
    assert opened == 0 and _wal(base) == size
    db.close()                                            # the checkpoint
    assert _wal(base) == 0


def test_a_replay_writes_every_byte_once_with_its_last_value(tmp_path):
    """Replaying frames already applied (the header lost, the files
    whole) fails at each of its operations in turn: at no point do the
    .mst/.xrf differ from the applied state -- an older frame's XRF
    block, control record or block padding never comes back, so readers
    of other processes never see an older state.  Each failed open
    raises DiskError; the next open completes."""
    base = tmp_path / "db"
    want = _expected(_make(base))
    _killed_writer(base, TXNS)
    applied = {ext: (tmp_path / f"db{ext}").read_bytes() for ext in (".mst", ".xrf", ".wal")}

    def attempt(n):
        for ext, data in applied.items():
            (tmp_path / f"db{ext}").write_bytes(data)
        if os.path.exists(f"{base}.shm"):
            os.unlink(f"{base}.shm")
        _pydb._testing.fail_io(n, errno.EIO)
        try:
            open_db(base, gc="none").close()
        except pydb.DiskError:
            pass
        got = _fired(n)
        for ext in (".mst", ".xrf"):
            assert (tmp_path / f"db{ext}").read_bytes() == applied[ext], (n, got, ext)
        return got

    names = _ops_of(attempt)
    # the 30 frames rewrite the same XRF block and control record 30
    # times; replay writes each once
    assert names.count("pwrite") < 3 * len(TXNS), names
    assert "fdatasync" in names
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0]
    check_files(base)


def test_every_operation_of_a_checkpoint_fails_in_turn(tmp_path):
    """The checkpoint of a closing writer (fdatasync .mst, .xrf, truncate
    and fdatasync the log) fails at each operation: close() stays quiet
    (best effort), every commit is there after reopening, the files
    check, and a writer's next close empties the log."""
    base0 = tmp_path / "p"
    oracle = _make(base0)
    ops = [("U", 2, 300, 50), ("A", 21, 1, 10), ("D", 3)]
    oracle.apply(ops)

    def attempt(n):
        d = tmp_path / f"c{n}"
        d.mkdir()
        for ext in (".mst", ".xrf"):
            shutil.copy(f"{base0}{ext}", d / f"db{ext}")
        db = open_db(d / "db", gc="none")
        db.update(2, content(2, 300, 50))
        db.append(content(21, 1, 10))
        db.delete(3)
        _pydb._testing.fail_io(n, errno.EIO)
        db.close()
        got = _fired(n)
        with pydb.open(d / "db") as ro:
            assert oracle.matches(ro)[0], (n, got)
        with open_db(d / "db", gc="none"):
            pass
        assert _wal(d / "db") == 0, (n, got)
        check_files(d / "db")
        return got

    names = _ops_of(attempt)
    assert names == ["fdatasync", "fdatasync", "ftruncate", "fdatasync"], names


@pytest.mark.parametrize("kind, lost", [("inline", None), ("file", "removed"),
                                        ("file", "emptied")])
def test_an_indexed_commit_fsyncs_only_its_log(tmp_path, request, kind, lost):
    """With a native index: a small segment goes inline into the MANIFEST
    (kind "inline"); a larger one (kind "file": every segment a file) is
    written unsynced and goes into the frame with the MANIFEST.  The
    frame's fdatasync is the commit's one fsync; the MANIFEST is written
    unsynced into its spare, whose name is swapped in (no file renamed
    over another or removed: creating and removing files is what ext4
    makes slow).  The closing checkpoint syncs the .mst, the .xrf, the
    segment file and the MANIFEST, their folder once, then empties the
    log.  A power cut after the commit (the files put back as of the last
    checkpoint, the MANIFEST with them, the new segment files gone or left
    empty, the header lost) loses nothing: recovery writes the MANIFEST
    and the segments from the log."""
    if kind == "file":
        request.getfixturevalue("segment_files")
    base0 = tmp_path / "p"
    with create_indexed(base0, "isis-packed", sync=True, gc="none") as db:
        db.append(content(1, 1, 40))
    pdx = tmp_path / "p.pdx"

    def copy(d):
        d.mkdir()
        for ext in (".mst", ".xrf"):
            shutil.copy(f"{base0}{ext}", d / f"db{ext}")
        shutil.copytree(pdx, d / "db.pdx")
        return d / "db"

    def commit(n):
        base = copy(tmp_path / f"c{n}")
        with open_db(base, gc="none") as db:
            db.append(content(2, 1, 40))            # the log is in use
            _pydb._testing.fail_io(n, errno.EIO)
            try:
                db.update(1, content(1, 2, 40))
            except pydb.Error:
                pass
            return _fired(n)

    names = _ops_of(commit)
    assert [x for x in names if "sync" in x] == ["fdatasync"], names
    assert names.count("exchange") == 1, names               # the MANIFEST
    assert "rename" not in names and "unlink" not in names, names
    base = copy(tmp_path / "files")
    with open_db(base, gc="none") as db:
        db.append(content(2, 1, 40))
        before = set(os.listdir(f"{base}.pdx"))
        db.update(1, content(1, 2, 40))
        new = set(os.listdir(f"{base}.pdx")) - before
    assert len(new) == (kind == "file") and all(f.startswith("seg-") for f in new), new

    def close(n):
        base = copy(tmp_path / f"k{n}")
        db = open_db(base, gc="none")
        db.update(1, content(1, 3, 40))
        _pydb._testing.fail_io(n, errno.EIO)
        db.close()
        return _fired(n)

    names = _ops_of(close)
    assert names == ["fdatasync", "fdatasync"] + ["fsync"] * (2 + (kind == "file")) + [
        "ftruncate", "fdatasync"], names

    # the cut: two commits, then the files as of the last checkpoint
    base = copy(tmp_path / "cut")
    saved = {p.relative_to(tmp_path / "cut"): p.read_bytes()
             for p in (tmp_path / "cut").rglob("*") if p.is_file()}
    _killed_writer(base, [[("A", 2, 5, 30)], [("U", 1, 6, 30), ("A", 3, 5, 10)]])
    for rel, data in saved.items():
        (tmp_path / "cut" / rel).write_bytes(data)
    new = [p for p in (tmp_path / "cut" / "db.pdx").iterdir()
           if p.relative_to(tmp_path / "cut") not in saved]
    # a segment file per commit, or none (inline)
    assert len(new) == (2 if kind == "file" else 0), new
    for p in new:
        if lost == "removed":
            p.unlink()
        else:
            p.write_bytes(b"")
    os.unlink(f"{base}.shm")
    want = Oracle({1: (False, 1, 40)})
    want.apply([("A", 2, 5, 30), ("U", 1, 6, 30), ("A", 3, 5, 10)])
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0], want.matches(db)[1]
        index_agrees(db)
        assert db.check().ok


def _indexed_cut(tmp_path, name):
    """A database with a native index (one record), then two indexed
    commits of a writer killed without closing -- their frames, with
    their segments, in the log -- and the commit header lost, as after a
    power cut that kept every file: the next open replays the log.
    Returns the base name."""
    base = tmp_path / name / "db"
    base.parent.mkdir()
    with create_indexed(base, "isis-packed", sync=True, gc="none") as db:
        db.append(content(1, 1, 40))
    _killed_writer(base, [[("A", 2, 5, 30)], [("U", 1, 6, 30)]])
    os.unlink(f"{base}.shm")
    return base


@pytest.mark.usefixtures("segment_files")
def test_a_replay_syncs_whole_files_as_a_checkpoint_does(tmp_path):
    """Replaying a log that holds indexed commits puts their segments and
    the MANIFEST in place unsynced, then fsyncs each file once and their
    folder once (not the file and its folder for each); every commit is
    there and the index agrees."""
    bases = iter(range(1 << 20))

    def reopen(n):
        base = _indexed_cut(tmp_path, f"r{next(bases)}")
        _pydb._testing.fail_io(n, errno.EIO)
        try:
            db = open_db(base, gc="none")
        except pydb.Error:
            return _fired(n)
        got = _fired(n)
        db.close()
        return got

    names = _ops_of(reopen)
    # the .mst and .xrf, the two segments and the MANIFEST, their folder,
    # the emptied log
    assert [x for x in names if "sync" in x] == [
        "fdatasync", "fdatasync", "fsync", "fsync", "fsync", "fsync",
        "fdatasync"], names
    base = _indexed_cut(tmp_path, "whole")
    want = Oracle({1: (False, 1, 40)})
    want.apply([("A", 2, 5, 30), ("U", 1, 6, 30)])
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0]
        index_agrees(db)


@pytest.mark.usefixtures("segment_files")
def test_logged_segments_bound_the_checkpoint(tmp_path):
    """A checkpoint fsyncs every segment the log holds, under the writer
    lock: the commit after which a handle's commits logged 256 of them
    (PYDB_WAL_CHECKPOINT_FILES) checkpoints, long before the log's 4 MiB,
    so that the commit making it waits for 256 fsyncs at most."""
    base = tmp_path / "db"
    with create_indexed(base, "isis-packed", sync=True, gc="none") as db:
        for m in range(1, 256):
            db.append(content(m, 1, 10))
        assert 0 < _wal(base) < (4 << 20)
        db.append(content(256, 1, 10))
        assert _wal(base) == 0
        db.append(content(257, 1, 10))
        assert _wal(base) > 0
        index_agrees(db)


@pytest.mark.usefixtures("segment_files")
def test_a_checkpoint_whose_fsync_fails_with_enoent_keeps_the_log(tmp_path):
    """A segment's fsync that fails with ENOENT (as a FUSE or network file
    system may say) is a failed fsync, not a file removed since: the
    closing checkpoint leaves the log as it was, and the next open
    replays it; nothing is lost."""
    base = tmp_path / "db"
    with create_indexed(base, "isis-packed", sync=True, gc="none") as db:
        db.append(content(1, 1, 40))
    db = open_db(base, gc="none")
    db.append(content(2, 1, 40))
    size = _wal(base)
    assert size > 0
    # the closing checkpoint: fdatasync .mst, fdatasync .xrf, fsync segment
    _pydb._testing.fail_io(3, errno.ENOENT)
    db.close()
    assert _fired(3) == "fsync"
    assert _wal(base) == size
    with open_db(base, gc="none") as db:
        assert Oracle({1: (False, 1, 40), 2: (False, 1, 40)}).matches(db)[0]
        index_agrees(db)
    assert _wal(base) == 0


# ------------------------------------------ whole files named in the log

def test_a_log_replays_from_another_working_folder(tmp_path, monkeypatch):
    """A writer that opened the database by a path relative to its working
    folder logs the MANIFEST under its name relative to the database's
    folder: after a power cut (the header lost), a process in another
    working folder, with an absolute path, replays it into the right
    place and the index answers for every commit."""
    (tmp_path / "a" / "data").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    rel = "data/db"
    with create_indexed(rel, "isis-packed", sync=True, gc="none") as db:
        db.append(content(1, 1, 40))
    manifest = tmp_path / "a" / "data" / "db.pdx" / "MANIFEST"
    before = manifest.read_bytes()
    _killed_writer(rel, [[("A", 2, 5, 30)], [("U", 1, 6, 30)]])
    manifest.write_bytes(before)              # its rename lost with the power
    os.unlink("data/db.shm")
    monkeypatch.chdir(tmp_path / "b")
    want = Oracle({1: (False, 1, 40)})
    want.apply([("A", 2, 5, 30), ("U", 1, 6, 30)])
    with open_db(tmp_path / "a" / "data" / "db", gc="none") as db:
        assert want.matches(db)[0]
        index_agrees(db)
    assert manifest.read_bytes() != before
    assert not (tmp_path / "b" / "data").exists()


def _frame(entries, version=2) -> bytes:
    """A complete log frame (csrc/wal.h) of (kind, name, offset, data)."""
    body = b""
    for kind, name, off, data in entries:
        e = struct.pack("<IIQQ", kind, len(name), off, len(data)) + name + data
        body += e + b"\0" * (-len(e) % 8)
    head = b"PYDBWAL1" + struct.pack("<IIQQ", version, len(entries), len(body), 1)
    head += struct.pack("<II", crc32c(head), 0)
    return head + body + b"PYDBEND1" + struct.pack("<II", crc32c(head + body), 0)


#: a frame's .mst (1) or .xrf (2) entries: (kind, where, length); the
#: offset is 512 + where modulo what fits in the file
_ENTRIES = st.lists(st.tuples(st.sampled_from([1, 2]), st.integers(0, 1 << 20),
                              st.integers(1, 600)), min_size=1, max_size=4)


@settings(max_examples=hypothesis_examples(60), deadline=None,
          derandomize=bool(SANITIZER))
@given(frames=st.lists(_ENTRIES, min_size=1, max_size=6))
def test_a_replay_gives_every_byte_its_last_value(tmp_path_factory, frames):
    """Frames whose .mst and .xrf entries overlap in every way (inside,
    across either end, equal, touching) replay to the files that writing
    every entry in log order gives: each byte ends with the value of the
    last entry that writes it.  (The entries lie inside the files, past
    their first block; whether the damaged records still read does not
    matter here.)  The .mst entries end before the records' end: what
    lies past it is check_tail's (csrc/txn.c), not the replay's."""
    base = tmp_path_factory.mktemp("replay") / "db"
    _make(base, n=400)
    with pydb.open(base) as db:
        info = db.info()
    want = {k: bytearray(open(f"{base}{ext}", "rb").read())
            for k, ext in ((1, ".mst"), (2, ".xrf"))}
    # NXTMFB and NXTMFP (1-based): the records' end
    limit = {1: (info["next_block"] - 1) * 512 + info["next_pos"] - 1,
             2: len(want[2])}
    log, n = b"", 0
    for entries in frames:
        frame = []
        for kind, where, length in entries:
            f = want[kind]
            n += 1
            data = bytes((n * 7 + i) % 251 + 1 for i in range(length))
            at = 512 + where % (limit[kind] - 512 - length)
            f[at:at + length] = data
            frame.append((kind, b"", at, data))
        log += _frame(frame)
    with open(f"{base}.wal", "wb") as f:
        f.write(log)
    os.unlink(f"{base}.shm")
    try:
        open_db(base, gc="none").close()
    except pydb.CorruptionError:
        pass                 # the records it damaged: after the replay
    assert _wal(base) == 0
    for kind, ext in ((1, ".mst"), (2, ".xrf")):
        assert open(f"{base}{ext}", "rb").read() == bytes(want[kind]), ext


@pytest.mark.parametrize("name", [b"../outside.txt", b"sub/../../outside.txt",
                                  b"/tmp/pydb-outside.txt", b".."])
def test_a_log_cannot_name_a_file_outside_the_database(tmp_path, name):
    """A hostile log (checksums right) whose whole-file entry names a
    file outside the database's folder: opening for writing raises
    CorruptionError naming the log, and writes nothing -- not that file,
    not the records of the same log."""
    (tmp_path / "d").mkdir()
    base = tmp_path / "d" / "db"
    _make(base)
    saved = {ext: (tmp_path / "d" / f"db{ext}").read_bytes() for ext in (".mst", ".xrf")}
    ctl = bytearray(saved[".mst"][:64])
    (tmp_path / "d" / "db.wal").write_bytes(_frame([(1, b"", 0, bytes(ctl)),
                                                   (3, name, 0, b"pwned")]))
    os.unlink(f"{base}.shm")
    with pytest.raises(pydb.CorruptionError) as e:
        open_db(base, gc="none")
    assert e.value.filename.endswith("db.wal") and "outside" in str(e.value)
    assert not (tmp_path / "outside.txt").exists()
    assert not os.path.exists("/tmp/pydb-outside.txt")
    for ext, data in saved.items():
        assert (tmp_path / "d" / f"db{ext}").read_bytes() == data


def test_whole_files_must_be_in_the_database_folder(tmp_path):
    """pydb_txn_put_file (the commit hook's whole files) refuses a file
    outside the database's folder: the commit fails, nothing is
    committed, the handle goes on."""
    (tmp_path / "d").mkdir()
    base = tmp_path / "d" / "db"
    _make(base)
    with open_db(base, gc="none") as db:
        _pydb._testing.commit_hook(db, str(tmp_path / "side.txt"))
        with pytest.raises(ValueError) as e:
            db.append(content(21, 1, 5))
        assert "database's folder" in str(e.value)
        assert db.max_mfn == 20 and not (tmp_path / "side.txt").exists()
        _pydb._testing.commit_hook(db, str(tmp_path / "d" / "side.txt"))
        assert db.append(content(21, 1, 5)) == 21
        assert (tmp_path / "d" / "side.txt").read_text() == "21 -1 3 0\n"


# ------------------------------------ direct commits: bulk loads (wal.h)

#: a transaction of 40 records of about 30 KB: a 1.2 MB master-file
#: region, past PYDB_WAL_DIRECT (1 MiB)
BULK = [("A", 21 + k, 7, 30_000) for k in range(40)]


def _bulk(db) -> None:
    with db.transaction() as tx:
        for op in BULK:
            tx.append(content(op[1], op[2], op[3]))


def test_a_bulk_commit_writes_its_records_once(tmp_path):
    """A transaction of 1 MiB of records or more writes them straight into
    the .mst past the committed end and fdatasyncs it, then its frame --
    the first block of the records, the XRF blocks, the control record --
    and fdatasyncs that (the commit point), then the XRF blocks and the
    control record; the log grows by a few KB, not by the records."""
    base0 = tmp_path / "p"
    oracle = _make(base0)
    oracle.apply([("U", 3, 99, 40)] + BULK)

    def one(n):
        d = tmp_path / f"c{n}"
        d.mkdir()
        for ext in (".mst", ".xrf"):
            shutil.copy(f"{base0}{ext}", d / f"db{ext}")
        with open_db(d / "db", gc="none") as db, pydb.open(d / "db") as reader:
            db.update(3, content(3, 99, 40))    # a frame kept in the log
            before = _frames(d / "db")
            _pydb._testing.fail_io(n, errno.EIO)
            try:
                _bulk(db)
            except pydb.Error:
                pass
            got = _fired(n)
            if n == -1:
                assert 0 < _frames(d / "db") - before < 8192, (before, _frames(d / "db"))
                assert oracle.matches(reader)[0], oracle.matches(reader)[1]
        if n == -1:
            check_files(d / "db")
            with pydb.open(d / "db") as ro:
                assert oracle.matches(ro)[0] and ro.check().ok
        return got

    names = _ops_of(one)
    # the records and their fdatasync, the frame, the XRF blocks and the
    # control record (the frame before synced them: "One fsync for many
    # commits", csrc/txn.c), then the log's fdatasync
    assert names[:3] == ["pwrite", "fdatasync", "pwrite"], names
    assert set(names[3:-1]) == {"pwrite"} and names[-1] == "fdatasync", names


@pytest.mark.parametrize("mode", [(errno.EIO, False), (errno.ENOSPC, True)],
                         ids=["EIO", "short+ENOSPC"])
def test_every_operation_of_a_bulk_commit_fails_in_turn(tmp_path, mode):
    """Each operation of a direct commit fails in turn: the exception says
    whether the transaction committed, and after reopening it is there
    exactly when it said so (a failed fdatasync of the log: either); a
    failure before the commit point leaves no records after the committed
    end; a failed fdatasync makes the handle read-only; the files check
    and take new writes."""
    eno, short = mode
    base0 = tmp_path / "p"
    oracle0 = _make(base0)
    oracle0.apply([("U", 3, 99, 40)])
    def writer(d):
        d.mkdir()
        for ext in (".mst", ".xrf"):
            shutil.copy(f"{base0}{ext}", d / f"db{ext}")
        db = open_db(d / "db", gc="none")
        db.update(3, content(3, 99, 40))            # a frame kept in the log
        return db

    db = writer(tmp_path / "count")
    _pydb._testing.fail_io(-1)
    _bulk(db)
    total = _fired(-1)
    db.close()
    seen = {}
    for n in range(1, total + 1):
        d = tmp_path / f"c{n}"
        db = writer(d)
        _pydb._testing.fail_io(n, eno, short)
        raised = None
        try:
            _bulk(db)
        except pydb.Error as e:
            raised = e
        kind = _fired(n)
        if raised is None:
            # no space for the log's frame while the log held one: a
            # checkpoint emptied it and the frame was written again
            # (csrc/txn.c, log_cannot_grow); committed
            assert eno == errno.ENOSPC and kind.startswith("pwrite"), (n, kind)
            db.close()
            with pydb.open(d / "db") as ro:
                want = oracle0.copy()
                want.apply(BULK)
                assert want.matches(ro)[0] and ro.check().ok, (n, kind)
            check_files(d / "db")
            seen[(kind, "checkpointed")] = seen.get((kind, "checkpointed"), 0) + 1
            shutil.rmtree(d)
            continue
        assert isinstance(raised, pydb.DiskError) and raised.errno == eno, (n, kind, raised)
        assert raised.filename.startswith(str(d)), raised.filename
        if "sync" in kind:
            with pytest.raises(pydb.ReadOnlyError):
                db.append(content(61, 1, 3))
            if raised.committed is False:    # the records' own fdatasync
                assert "not committed" in str(raised) and "read-only" in str(raised)
        db.close()
        with pydb.open(d / "db") as ro:
            present = ro.max_mfn == 60
            want = oracle0.copy()
            if present:
                want.apply(BULK)
            assert want.matches(ro)[0], (n, kind, want.matches(ro)[1])
            assert ro.check().ok, (n, kind)
        if raised.committed is None:
            assert kind == "fdatasync", (n, kind)
        else:
            assert raised.committed is present, (n, kind, raised.committed)
        check_files(d / "db")            # nothing after the committed end
        with open_db(d / "db", gc="none") as db:
            db.append(content(want.max_mfn + 1, 1, 3))
        seen[(kind, raised.committed)] = seen.get((kind, raised.committed), 0) + 1
        shutil.rmtree(d)
    print(f"bulk commit fault sweep: {total} operations: {seen}")
    assert total >= 6
    assert seen.get(("pwrite", False)) and seen.get(("pwrite", True)), seen
    assert seen.get(("fdatasync", False)) and seen.get(("fdatasync", None)), seen
    assert bool(seen.get(("pwrite", "checkpointed"))) == (eno == errno.ENOSPC), seen


def test_a_bulk_commit_among_kept_frames_survives_a_power_cut(tmp_path):
    """Small commits keep their frames; a direct commit follows the one
    whose block padding covers its first records, then more small
    commits; the writer is killed.  A power cut keeps what was synced:
    the .mst as the direct commit's fdatasync left it (all commits up to
    it), the .xrf of the last checkpoint; the header is lost.  Replay
    writes the earlier frame's padding only up to where the direct
    commit's records start (its frame holds their first block): every
    commit is there."""
    base = tmp_path / "db"
    want = _make(base)
    saved_xrf = (tmp_path / "db.xrf").read_bytes()
    small1 = [[("U", 1 + k, 300 + k, 77 + k), ("A", 21 + k, 1, 51)] for k in range(3)]
    bulk = [[("A", 24 + k, 7, 30_000) for k in range(40)]]
    small2 = [[("U", 2, 400 + k, 33), ("A", 64 + k, 2, 45)] for k in range(3)]
    def synced():   # what the direct commit's fdatasync made durable
        (tmp_path / "synced.mst").write_bytes((tmp_path / "db.mst").read_bytes())

    _killed_writer(base, small1 + bulk, synced, small2)
    for txn in small1 + bulk + small2:
        want.apply(txn)
    end = struct.unpack_from("<iiiH", (tmp_path / "synced.mst").read_bytes(), 0)
    assert ((end[2] - 1) * 512 + end[3] - 1) % 512, "the bulk commit starts inside a block"
    (tmp_path / "db.mst").write_bytes((tmp_path / "synced.mst").read_bytes())
    (tmp_path / "db.xrf").write_bytes(saved_xrf)
    os.unlink(f"{base}.shm")
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0], want.matches(db)[1]
        assert db.check().ok
    check_files(base)


#: (the kept frame's update, the other process's update): its frame with
#: zeros where the stale length points; a frame whose 40-byte header is
#: the kept one's (same commit sequence, entry count and body length)
HIDDEN_FRAMES = {
    "zeros": (("U", 1, 100, 40), [(1, b"2:A"), (2, b"\0" * 3000), (3, b"end")]),
    "same-header": (("U", 1, 100, 468), content(2, 200, 40)),
}


@pytest.mark.parametrize("case", list(HIDDEN_FRAMES))
def test_a_writer_that_keeps_no_log_length_cannot_hide_its_frame(tmp_path, case):
    """A process whose commit header keeps no log length (it cannot tell
    the kernel's boot: set_boot_unknown; files mode behaves alike) empties
    the log after each commit and cannot change the header's applied
    length, which another process's kept frame set.  Killed after its
    commit point, it leaves its own frame at the log's start: with zeros
    where that stale length points, or with the same header as the kept
    frame had.  The next writer must still replay it: the header names
    the log by its first frame's id, the CRC of its header and body
    (csrc/wal.h).  (Two reviews found the commit lost: without the id,
    and with the header's CRC as the id.)"""
    kept, update = HIDDEN_FRAMES[case]
    base = tmp_path / "db"
    _make(base, n=5)
    _killed_writer(base, [[kept]])               # a kept frame: the length
    stale = _frames(base)
    head = open(f"{base}.wal", "rb").read(40)
    pid = os.fork()
    if pid == 0:
        try:
            _pydb._testing.set_boot_unknown(True)
            db = open_db(base, gc="none")          # replays, empties the log
            # the frame, its fdatasync (the commit point), then the .mst: die
            _pydb._testing.fail_io(3, crash=True)
            db.update(2, update)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 137, status
    log = open(f"{base}.wal", "rb").read()
    assert log[:8] == b"PYDBWAL1"
    if case == "zeros":
        assert _frames(base) > stale + 40
        assert log[stale:stale + 40] == bytes(40)     # what the stale length sees
    else:
        assert log[:40] == head and _frames(base) == stale
    with open_db(base, gc="none") as db:
        assert [f.raw for f in db[2].fields] == [v for _, v in update]
        assert db[1].raw(1) == [b"1:100"]
        assert db.check().ok
    check_files(base)


def _killed_at_each_operation(tmp_path, work, tail=b""):
    """Yield (n, folder, oracle) for each operation n of work(db): a
    forked writer on a copy of a 20-record database, after a first
    commit (MFN 3 updated: the log holds a frame), runs work(db) with
    fail_io(n, crash=True), so it exits before its n-th operation (137);
    a first pass counts them.  The folder is removed after each step.
    `tail`: bytes written past the committed end first, as another
    program leaves them."""
    base0 = tmp_path / "p"
    oracle0 = _make(base0)
    oracle0.apply([("U", 3, 99, 40)])
    if tail:
        with pydb.open(base0) as db:
            end = _records_end(db)
        with open(f"{base0}.mst", "r+b") as f:
            f.seek(end)
            f.write(tail)
    total = None
    n = 0
    while total is None or n < total:
        n += 1
        d = tmp_path / ("count" if total is None else f"c{n}")
        d.mkdir()
        for ext in (".mst", ".xrf"):
            shutil.copy(f"{base0}{ext}", d / f"db{ext}")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                db = open_db(d / "db", gc="none")
                db.update(3, content(3, 99, 40))
                _pydb._testing.fail_io(-1 if total is None else n, crash=True)
                work(db)
                os.write(w, b"%d" % _pydb._testing.io_count())
            finally:
                os._exit(0)
        os.close(w)
        got = os.read(r, 64)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if total is None:
            total, n = int(got), 0
            continue
        assert os.WEXITSTATUS(status) == 137, (n, status)
        yield n, d, oracle0.copy()
        shutil.rmtree(d)


def test_a_commit_killed_at_each_operation_in_a_grown_log(tmp_path):
    """A kept frame lands inside the file, in the zeros a commit before
    it grew the log by (csrc/wal.h): past the applied length, not at the
    file's end.  A writer killed before each operation of such a commit
    (fail_io with crash): a read-only open finds the frame in the zeros
    and replays it exactly when the kill came after its write (a kill
    keeps the page cache) -- the log is then emptied; without it nothing
    is written and the log keeps the first frame and its zeros.  Killed
    at its last operation, the fdatasync made after the writer lock is
    let go (csrc/txn.c, "One fsync for many commits"), the commit is
    applied and in the header: the log keeps both frames.  The commit is
    whole or absent, and the database checks."""
    cuts = 0
    last = None
    for n, d, want in _killed_at_each_operation(
            tmp_path, lambda db: db.update(4, content(4, 99, 40))):
        cuts += 1
        last = n
        assert _wal(d / "db") == 65536 and _frames(d / "db") > 0, n
        if n > 1:                       # op 1 writes the frame
            want.apply([("U", 4, 99, 40)])
        with pydb.open(d / "db") as ro:
            assert want.matches(ro)[0], (n, want.matches(ro)[1])
            assert ro.check().ok, n
        assert _wal(d / "db") == (0 if 1 < n < 5 else 65536), n
        with open_db(d / "db", gc="none") as db:
            assert want.matches(db)[0] and db.check().ok, n
        check_files(d / "db")
    assert cuts == last == 5


def test_a_bulk_commit_killed_at_each_operation(tmp_path):
    """A writer killed before each operation of a direct commit (fail_io
    with crash: _exit at that operation): after reopening the transaction
    is there whole exactly when the kill came after its commit point, and
    the database checks -- records written before the commit point lie
    past the committed end, where readers, check() and other ISIS
    programs do not look, until a writer's open (or the next
    transaction's begin) clears them: the direct-commit mark (shm.h)
    names them as pydb's."""
    cuts = 0
    for n, d, want in _killed_at_each_operation(tmp_path, _bulk):
        cuts += 1
        if n in (2, 3):   # the records written, the frame not: past the end
            assert os.path.getsize(d / "db.mst") > 1_200_000, n
        with open_db(d / "db", gc="none") as db:
            check_files(d / "db")      # the writer's open cleared them
            cut = n in (2, 3)
            _after_a_killed_bulk_commit(db, want, n)
        with pydb.open(d / "db") as ro:
            assert want.matches(ro)[0] and ro.check().ok, n
            # the sizes the commit published are the files' (a stale,
            # larger .mst size would put new readers in files mode)
            info = ro.snapshot().info()
            assert info["registered"] and info["commit"] > 0, (n, cut, info)
            assert info["mst_size"] == os.path.getsize(d / "db.mst"), (n, info)
        check_files(d / "db")
    assert cuts >= 6


def _after_a_killed_bulk_commit(db, want, n) -> None:
    """The writer's handle `db` after a bulk commit
    killed before its operation `n`: the records are the oracle's, with
    the bulk once its frame is written (a kill keeps the page cache), the
    database checks, a record appends."""
    if db.max_mfn == 60:
        want.apply(BULK)
    assert want.matches(db)[0], (n, want.matches(db)[1])
    assert db.check().ok, n
    assert (db.max_mfn == 60) == (n > 3), n
    db.append(content(want.max_mfn + 1, 1, 3))
    want.apply([("A", want.max_mfn + 1, 1, 3)])


def _records_end(db) -> int:
    """The committed end of records (NXTMFB/NXTMFP), in bytes."""
    info = db.info()
    return (info["next_block"] - 1) * 512 + info["next_pos"] - 1


def test_a_bulk_commit_killed_past_another_programs_bytes(tmp_path):
    """Bytes another program left past the committed end (no pydb commit
    marked them: shm.h, the direct-commit mark) are never written over: a
    direct commit starts after the end of the file, and one killed before
    each of its operations leaves, after the next writer's open, those
    bytes exactly as they were and the file cut where its own records
    began (before the mark, the writer's open cleared them: a WinISIS
    master file lost the only copies of four records)."""
    tail = bytes(range(1, 256)) * 20          # 5,100 bytes, no record
    cuts = 0
    at = None
    for n, d, want in _killed_at_each_operation(tmp_path, _bulk, tail):
        cuts += 1
        if n in (2, 3):   # the records written, the frame not: past the end
            assert os.path.getsize(d / "db.mst") > 1_200_000, n
        with open_db(d / "db", gc="none") as db:
            mst = (d / "db.mst").read_bytes()
            # where the bytes were put (the end of the 20 records), as
            # they were put: the writer's first commit (MFN 3) went after
            at = mst.find(tail) if at is None else at
            assert at > 0 and mst[at:at + len(tail)] == tail, n
            if db.max_mfn != 60:      # not committed: its records cut
                assert len(mst) < _records_end(db) + 512, n
            _after_a_killed_bulk_commit(db, want, n)
        with pydb.open(d / "db") as ro:
            assert want.matches(ro)[0] and ro.check().ok, n
        check_files(d / "db")          # the bytes now lie before the end
    assert cuts >= 6


def test_an_open_during_a_dying_bulk_commit_keeps_it(tmp_path):
    """A writer holds the lock while another handle opens (so the open
    cannot recover), then dies after its direct commit's commit point,
    before its XRF blocks and control record: its records lie past the
    old end.  The opening handle takes the lock before it clears bytes
    past the end, and recovers first -- the commit is kept, not cut
    (the records are past the end only until the replay).  Before the
    fix the open cut them and the next open found the control record
    pointing past the end of the file."""
    base = tmp_path / "db"
    want = _make(base)
    want.apply([("U", 3, 99, 40)] + BULK)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            db = open_db(base, gc="none")
            db.update(3, content(3, 99, 40))
            tx = db.transaction()
            for op in BULK:
                tx.append(content(op[1], op[2], op[3]))
            os.write(w, b"L")                 # the writer lock is held
            time.sleep(0.05)
            # die before the first XRF write: the records, their fdatasync,
            # the frame and its fdatasync are done
            _pydb._testing.fail_io(5, crash=True)
            tx.commit()
        finally:
            os._exit(3)
    os.close(w)
    assert os.read(r, 1) == b"L"
    _pydb._testing.set_read_delay(60_000)     # 60 ms per pread: a slow open
    try:
        open_db(base, gc="none", io="pread").close()
    finally:
        _pydb._testing.set_read_delay(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 137, status
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0], want.matches(db)[1]
        assert db.check().ok
    check_files(base)


def _frame_spans(base) -> list[tuple[int, int, int]]:
    """(offset, end, synced length) of each complete frame of the log
    (csrc/wal.h: the synced length is the header's u32 at byte 36)."""
    data = open(f"{base}.wal", "rb").read()
    spans, pos = [], 0
    while data[pos:pos + 8] == b"PYDBWAL1":
        end = pos + 40 + struct.unpack_from("<Q", data, pos + 16)[0] + 16
        spans.append((pos, end, struct.unpack_from("<I", data, pos + 36)[0]))
        pos = end
    return spans


def _power_cut_after_killed_writer(tmp_path):
    """_make's database, a writer that commits TXNS (sync=True, one frame
    each) and is killed, then a power cut: the .mst and .xrf as at the
    last checkpoint, no header.  The log's frame spans."""
    base = tmp_path / "db"
    _make(base)
    saved = _files(base)
    _killed_writer(base, TXNS)
    _power_cut(base, saved)
    return base, _frame_spans(base)


@pytest.mark.parametrize("first_open", ["read-only", "writer"])
@pytest.mark.parametrize("cut", ["first frame", "frame boundary", "mid-frame", "last bytes"])
def test_a_log_cut_short_in_the_boot_undoes_no_commit(tmp_path, cut, first_open):
    """A writer commits TXNS and is killed; its log is then cut short
    (damage, or a program that truncated it) while the header still says,
    for this boot, that a longer log was applied.  Every frame left was
    applied and the files hold the lost ones too: no open replays the
    rest over them (which undid acknowledged commits and left XRF entries
    pointing past the control record's end).  A read-only open that can
    write the files, as a writer's, syncs them and empties the log (a
    power cut before a writer came would otherwise leave those commits
    to a replay of the frames before the cut), so the next frame starts
    the log and a new boot replays that frame."""
    base = tmp_path / "db"
    want = _expected(_make(base))
    _killed_writer(base, TXNS)
    spans = _frame_spans(base)
    assert len(spans) == len(TXNS)
    at = {"first frame": spans[0][1], "frame boundary": spans[10][1],
          "mid-frame": (spans[14][0] + spans[14][1]) // 2,
          "last bytes": spans[-1][1] - 5}[cut]
    os.truncate(f"{base}.wal", at)
    if first_open == "read-only":
        with pydb.open(base) as ro:
            assert want.matches(ro)[0], want.matches(ro)[1]
            assert ro.check().ok
        assert _wal(base) == 0
    more = [[("A", want.max_mfn + 1, 1, 5)]]
    _killed_writer(base, [], more=more)             # (a writer: its open)
    want.apply(more[0])
    assert [(o, e) for o, e, _ in _frame_spans(base)] == [(0, _frames(base))]
    os.unlink(f"{base}.shm")                       # a new boot: replayed
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0], want.matches(db)[1]
        assert db.check().ok
    check_files(base)


def test_each_durable_frame_names_the_log_synced_before_it(tmp_path):
    """One writer, sync=True: each commit's fdatasync covers its frame
    before the next commit builds its own, so every frame but the first
    says the log was synced up to where it starts (csrc/wal.h, byte 36)."""
    _, spans = _power_cut_after_killed_writer(tmp_path)
    assert len(spans) == len(TXNS)
    assert [s for _, _, s in spans] == [0] + [end for _, end, _ in spans[:-1]]


@pytest.mark.parametrize("which", [0, 11, 28])
def test_a_damaged_durable_frame_is_corruption_not_a_torn_tail(tmp_path, which):
    """One flipped bit in a frame that later frames say was durable (found
    by a review: recovery took it for a torn tail and dropped it and
    every commit after it, and the database opened without them).  The
    open now raises CorruptionError naming the log and the frame's
    offset, and leaves the log as it is; with the frame put back, the
    same open replays every commit."""
    base, spans = _power_cut_after_killed_writer(tmp_path)
    wal = f"{base}.wal"
    good = open(wal, "rb").read()
    at = spans[which][0] + 60                  # inside the frame's body
    bad = bytearray(good)
    bad[at] ^= 0x10
    open(wal, "wb").write(bytes(bad))
    with pytest.raises(pydb.CorruptionError) as e:
        open_db(base, gc="none")
    assert e.value.filename == wal
    assert e.value.offset == spans[which][0]
    assert f"offset {spans[which + 1][0]}" in e.value.reason
    assert open(wal, "rb").read() == bytes(bad)
    open(wal, "wb").write(good)
    want = _expected(Oracle({m: (False, m, 40) for m in range(1, 21)}))
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0], want.matches(db)[1]
        assert db.check().ok


def test_a_torn_frame_after_durable_ones_is_still_dropped(tmp_path):
    """The last frame torn (its second half never written: zeros), after
    29 durable ones: a crash before that commit point, not damage (no
    frame after it says it was durable).  The open drops it and keeps the
    29 commits before it."""
    base, spans = _power_cut_after_killed_writer(tmp_path)
    start, end, _ = spans[-1]
    data = bytearray(open(f"{base}.wal", "rb").read())
    half = (start + end) // 2
    data[half:end] = bytes(end - half)
    open(f"{base}.wal", "wb").write(bytes(data))
    want = Oracle({m: (False, m, 40) for m in range(1, 21)})
    for txn in TXNS[:-1]:
        want.apply(txn)
    with open_db(base, gc="none") as db:
        assert want.matches(db)[0], want.matches(db)[1]
        assert db.check().ok


def _frame_image(synced: int) -> bytes:
    """A complete, empty log frame whose header says the log was synced up
    to `synced` (csrc/wal.h)."""
    head = bytearray(b"PYDBWAL1" + struct.pack("<IIQQ", 2, 0, 0, 1) + bytes(8))
    struct.pack_into("<II", head, 32, crc32c(bytes(head[:32])), synced)
    return bytes(head) + b"PYDBEND1" + struct.pack("<II", crc32c(bytes(head)), 0)


def test_a_torn_frame_whose_record_holds_frame_images_is_still_dropped(tmp_path):
    """A record whose field holds images of complete log frames (a copy of
    a .wal file, say), at every offset modulo 8, and its commit's frame
    torn by a power cut (its last 2 KiB zeros).  Recovery looked for
    later frames at every 8 bytes past the torn one, found an image in
    the record's bytes, believed its synced length and refused to open
    the database (found by a review).  It now looks only where the torn
    frame's header says it ends: the frame is dropped, the database opens
    with the record before it."""
    base = tmp_path / "db"
    with pydb.create(base, "isis-packed", sync=True, gc="none") as db:
        db.append([(1, b"seed")])
    saved = _files(base)
    assert _wal(base) == 0
    blob = b"".join(b"x" + _frame_image(8) for _ in range(8)) + b"y" * 3000
    pid = os.fork()                            # its commit, then killed
    if pid == 0:
        try:
            db = open_db(base, gc="none")
            db.append([(1, b"doc"), (2, blob)])
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(3)
    os.waitpid(pid, 0)
    (_, end, _), = _frame_spans(base)
    data = bytearray(open(f"{base}.wal", "rb").read())
    data[end - 2048:end] = bytes(2048)
    open(f"{base}.wal", "wb").write(bytes(data))
    _power_cut(base, saved)
    with open_db(base, gc="none") as db:
        assert db.max_mfn == 1
        assert db[1].fields[0].raw == b"seed"
        assert db.check().ok


LOG_CANNOT_GROW = r"""
import os, resource, signal, sys
import pydb
base = sys.argv[1]
db = pydb.create(base)                       # sync=True, a collector thread
for i in range(50):
    db.append([(24, "x" * 1000)])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
# no file may grow past 400,000 bytes: the .mst (52 KB now) has room for
# the 200 records to come (350 KB), a log that is never emptied has not
resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, resource.RLIM_INFINITY))
failed = []
for i in range(200):
    try:
        db.append([(24, f"{i:04d}" + "y" * 1500)])
    except pydb.DiskError as e:
        failed.append(f"{i}: {e}")
print(len(failed), failed[:1])
print(db.max_mfn, db.check().ok, db[250][24] == ["0199" + "y" * 1500])
db.close()
"""


def test_a_log_that_cannot_grow_is_emptied_by_a_checkpoint(tmp_path):
    """A log that cannot grow (a full disk; here the file size limit,
    RLIMIT_FSIZE) while it holds commits since the last checkpoint: the
    commit checkpoints (syncs the files, empties the log) and writes its
    frame again, once.  Before, every commit failed with DiskError EFBIG
    ("writing the write-ahead log failed") until a collection or a reopen
    checkpointed, though the .mst had room: 73 of 200 in the reviewer's
    run (csrc/txn.c, log_cannot_grow)."""
    r = subprocess.run([sys.executable, "-c", LOG_CANNOT_GROW, str(tmp_path / "db")],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0 []", "250 True True"]


def test_the_c_api_without_error_detail(tmp_path):
    """tests/c/null_err_main.c (the core alone, no Python): a commit
    passed err NULL whose log cannot grow checkpoints and commits (all
    200 under RLIMIT_FSIZE), and a build with skip_damaged and err NULL
    leaves ABCD odds' damaged record out; both read their own errors and
    crashed on the NULL (found by a review)."""
    import shutil as sh
    cc = sh.which("cc") or sh.which("gcc")
    if not cc or not sys.platform.startswith("linux"):
        pytest.skip("no C compiler")
    exe = tmp_path / "null_err_main"
    srcs = sorted(str(p) for p in (REPO / "csrc").glob("*.c"))
    san = (["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-g"]
           if SANITIZER == "address" else [])
    p = subprocess.run([cc, "-std=gnu11", "-O1", "-Wall", "-Werror", *san, "-I",
                        str(REPO / "csrc"), str(REPO / "tests" / "c" / "null_err_main.c"),
                        *srcs, "-o", str(exe), "-pthread"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    r = subprocess.run([str(exe), "commit", str(tmp_path / "db")], capture_output=True,
                       text=True, timeout=300)
    assert (r.returncode, r.stdout) == (0, "committed 200 of 200\n"), r.stderr
    odds = DATA / "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data"
    if not (odds / "odds.mst").exists():
        pytest.skip(f"ABCD odds not found under {DATA} (the commit half passed)")
    for ext in ("mst", "xrf", "fst"):
        shutil.copy(odds / f"odds.{ext}", tmp_path / f"odds.{ext}")
    r = subprocess.run([str(exe), "build", str(tmp_path / "odds"), str(tmp_path / "odds.fst")],
                       capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout) == (0, "build rc 0\n"), r.stderr
    with pydb.open(tmp_path / "odds") as db:
        assert 49 not in {p.mfn for t in db.index.terms() for p in db.index.postings(t.key)}
