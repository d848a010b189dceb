"""One fsync for many commits (csrc/txn.c, "One fsync for many commits").

A ``sync=True`` commit whose blocks synced frames of the log already hold
writes its frame, applies and publishes it, lets the writer lock go, and
then returns once an fdatasync covers its frame: the commit header keeps
the log's synced mark, and a sync lock (an OFD lock on byte 1 of the
``.shm`` file) makes the commits that wait behind one fdatasync find
their frames covered.  So writers of several processes share fsyncs.

The tests fork writers: two commits of two processes that wait behind a
held sync lock return on one fdatasync, and are visible meanwhile; many
writers of several processes make at most one fsync per commit, and every
acknowledged commit is there.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import time

import pytest

import pydb
from pydb import _pydb

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

T = _pydb._testing


def _fork(fn, *args) -> int:
    """Run fn(*args) in a forked child that exits 0 on success, 1 on an
    exception (printed)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn(*args)
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _synced_append(db, fields) -> tuple[int, int]:
    """(MFN, fsyncs + fdatasyncs this thread made) of db.append(fields)."""
    T.fail_io(-1)
    try:
        mfn = db.append(fields)
        return mfn, T.io_syncs()
    finally:
        T.fail_io(0)


def _sync_lock(f, lock: bool) -> None:
    """Take or let go the sync lock of the open .shm file f: an OFD lock
    on byte 1, as csrc/shm.c takes it (struct flock: type, whence,
    start, length, pid)."""
    kind = fcntl.F_WRLCK if lock else fcntl.F_UNLCK
    fcntl.fcntl(f, fcntl.F_OFD_SETLKW, struct.pack("hhqqii", kind, os.SEEK_SET, 1, 1, 0, 0))


def _wait_for(cond, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_two_processes_waiting_behind_the_sync_lock_share_one_fsync(tmp_path):
    """Each of two writer processes commits once (its frame synced with
    the writer lock held: the blocks are new to it), then, while this
    test holds the sync lock, once more: both second commits write their
    frames, are visible to a reader at once, and wait.  Released, one of
    them fdatasyncs the log up to both frames and the other finds its
    frame covered: two commits, one fsync."""
    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()
    go = [os.pipe() for _ in range(2)]
    close = [os.pipe() for _ in range(2)]
    out = [tmp_path / f"w{i}.json" for i in range(2)]

    def writer(i):
        with pydb.open(base, readonly=False, sync=True, gc="none") as db:
            first = _synced_append(db, [(1, f"first {i}")])
            (tmp_path / f"ready{i}").touch()
            os.read(go[i][0], 1)
            second = _synced_append(db, [(1, f"second {i}")])
            out[i].write_text(json.dumps([first, second]))
            # closing checkpoints, which empties the log and drops the
            # mark: not before the other writer has returned too
            os.read(close[i][0], 1)

    pids = [_fork(writer, i) for i in range(2)]
    _wait_for(lambda: all((tmp_path / f"ready{i}").exists() for i in range(2)),
              "the first commits")
    with open(f"{base}.shm", "r+b") as shm, pydb.open(base) as reader:
        _sync_lock(shm, True)
        try:
            for i in range(2):
                os.write(go[i][1], b"g")
            # published before they are durable: a reader sees both
            _wait_for(lambda: reader.max_mfn == 4, "the second commits")
            time.sleep(0.2)
            assert not any(p.exists() for p in out)   # both still wait
        finally:
            _sync_lock(shm, False)
    _wait_for(lambda: all(p.exists() for p in out), "the second commits to return")
    for i in range(2):
        os.write(close[i][1], b"c")
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0
    got = [json.loads(p.read_text()) for p in out]
    assert sorted(g[0][0] for g in got) == [1, 2]
    assert [g[0][1] for g in got] == [1, 1]      # each synced its first
    assert sorted(g[1][0] for g in got) == [3, 4]
    assert sorted(g[1][1] for g in got) == [0, 1], got   # one fsync for two
    with pydb.open(base) as db:
        assert sorted(db[m].raw(1)[0] for m in range(1, 5)) == [
            b"first 0", b"first 1", b"second 0", b"second 1"]
        assert db.check().ok


def test_writers_of_several_processes_commit_with_at_most_one_fsync_each(tmp_path):
    """Four processes append 60 records each, durably, at once: every
    acknowledged MFN holds its record, no MFN twice, each append made at
    most one fsync (its frame's, with the lock or after it; fewer when
    another's covered it), and the database checks."""
    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()
    procs, each = 4, 60

    def writer(i):
        got = []
        with pydb.open(base, readonly=False, sync=True, gc="none") as db:
            for k in range(each):
                got.append(_synced_append(db, [(1, f"{i}.{k}"), (2, "x" * (k * 7 + 1))]))
        (tmp_path / f"w{i}.json").write_text(json.dumps(got))

    pids = [_fork(writer, i) for i in range(procs)]
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0
    acked = {}
    syncs = []
    for i in range(procs):
        for k, (mfn, n) in enumerate(json.loads((tmp_path / f"w{i}.json").read_text())):
            assert mfn not in acked
            acked[mfn] = (f"{i}.{k}".encode(), b"x" * (k * 7 + 1))
            syncs.append(n)
    assert sorted(acked) == list(range(1, procs * each + 1))
    assert max(syncs) == 1 and 4 <= sum(syncs) <= procs * each, syncs
    with pydb.open(base) as db:
        for mfn, (a, b) in acked.items():
            assert db[mfn].raw(1) == [a] and db[mfn].raw(2) == [b]
        assert db.check().ok


@pytest.mark.sanitize_thread
@pytest.mark.sanitize_address
def test_handles_in_threads_share_fsyncs(tmp_path):
    """Three handles on one database in one process, each appended to by
    two threads at once: group commits within a handle, fsyncs made after
    the writer lock across handles (and the synced mark read and raised
    by several threads; rerun under TSan and ASan).  Every MFN is given
    once, every record is there, and the database checks."""
    import threading

    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()
    dbs = [pydb.open(base, readonly=False, sync=True, gc="none") for _ in range(3)]
    got: dict[int, bytes] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(db, name):
        try:
            for k in range(40):
                value = f"{name}.{k}"
                mfn = db.append([(1, value)])
                with lock:
                    assert mfn not in got
                    got[mfn] = value.encode()
        except BaseException as e:  # raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(db, f"h{h}t{t}"))
               for h, db in enumerate(dbs) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for db in dbs:
        db.close()
    assert not errors, errors[0]
    assert sorted(got) == list(range(1, 3 * 2 * 40 + 1))
    with pydb.open(base) as db:
        for mfn, value in got.items():
            assert db[mfn].raw(1) == [value]
        assert db.check().ok


def _frames_at(path) -> list[tuple[int, int]]:
    """(offset, length) of each frame of the log at `path` (csrc/wal.h)."""
    data = open(path, "rb").read()
    pos, out = 0, []
    while data[pos:pos + 8] == b"PYDBWAL1":
        n = 40 + struct.unpack_from("<Q", data, pos + 16)[0] + 16
        out.append((pos, n))
        pos += n
    return out


def test_a_failed_deferred_fsync_makes_the_reopen_replay_the_log(tmp_path):
    """The deferred fdatasync of a published commit fails (EIO): unknown
    outcome, and the header stops vouching for the log, so the reopen the
    error asks for replays it (and empties it) instead of appending
    behind a frame the disk may lack.  A power cut after a later
    acknowledged commit -- the failed frame's bytes lost, the .mst/.xrf as
    last synced, no header -- keeps that commit."""
    import errno

    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()
    db = pydb.open(base, readonly=False, sync=True, gc="none")
    db.append([(1, "a")])                  # synced with the lock held
    T.fail_io(5, errno.EIO)                # the frame, records, XRF, control record, then
    try:
        with pytest.raises(pydb.DiskError) as e:
            db.append([(1, "b")])
        assert T.io_fired() == "fdatasync" and e.value.committed is None
    finally:
        T.fail_io(0)
    failed = _frames_at(f"{base}.wal")[1]
    db.close()
    db = pydb.open(base, readonly=False, sync=True, gc="none")
    assert _frames_at(f"{base}.wal") == []     # replayed, the files synced
    disk = {ext: open(f"{base}{ext}", "rb").read() for ext in (".mst", ".xrf")}
    assert db.append([(1, "c")]) == 3
    wal = bytearray(open(f"{base}.wal", "rb").read())
    assert _frames_at(f"{base}.wal")[0][0] == 0 and failed[0] > 0
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "db.wal").write_bytes(bytes(wal))
    for ext, data in disk.items():
        (cut / f"db{ext}").write_bytes(data)
    db.close()
    with pydb.open(cut / "db") as r:
        assert [r[m].raw(1) for m in range(1, r.max_mfn + 1)] == [[b"a"], [b"b"], [b"c"]]
        assert r.check().ok


def _append_b_failing_its_sync(db, res: dict, pause: float = 0.0) -> None:
    """db.append([(1, "b")]) with its fifth write-side operation, the
    deferred fdatasync, failing with EIO after `pause` seconds (fail_io
    counts this thread's operations); res["b"]: "acknowledged", or
    (DiskError.committed, the operation that failed)."""
    import errno

    T.fail_io(5, errno.EIO, pause=int(pause * 1e6))
    try:
        db.append([(1, "b")])
        res["b"] = "acknowledged"
    except pydb.DiskError as e:
        res["b"] = (e.committed, T.io_fired())
    finally:
        T.fail_io(0)


def _fail_deferred_sync_beside(a, f) -> tuple:
    """Handle `a` appends "b" with its deferred fdatasync (its fifth
    operation) failing with EIO, in a thread, while this test holds the
    sync lock; once "b" is published, handle `f` (`a` itself, or another)
    begins a transaction and appends "c"; then the lock is let go, and
    the transaction is committed, which must fail.  Returns (a's
    (committed, failed operation), the DiskError of f's commit)."""
    import threading

    res = {}
    with open(a.path + ".shm", "r+b") as shm:
        _sync_lock(shm, True)
        th = threading.Thread(target=_append_b_failing_its_sync, args=(a, res))
        try:
            th.start()
            _wait_for(lambda: a.max_mfn == 2, "the commit of b published")
            tx = f.transaction()
            tx.append([(1, "c")])
        finally:
            _sync_lock(shm, False)
            th.join()
    with pytest.raises(pydb.DiskError) as e:
        tx.commit()
    return res["b"], e.value


def test_a_failed_deferred_fsync_fails_a_commit_of_another_thread(tmp_path):
    """While thread 1's commit waits (published) for its deferred
    fdatasync -- this test holds the sync lock -- the main thread begins a
    transaction on the same handle; thread 1's fdatasync then fails.  The
    main thread's commit must not be acknowledged (Linux tells a writeback
    error to one fsync of an open file description only: its own
    fdatasync would succeed behind a lost frame): DiskError, outcome
    unknown; the handle is read-only."""
    base = tmp_path / "db"
    db = pydb.create(base, sync=True, gc="none")
    db.append([(1, "a")])
    failed, error = _fail_deferred_sync_beside(db, db)
    assert failed == (None, "fdatasync")
    assert error.committed is None and "earlier fsync" in str(error)
    with pytest.raises(pydb.ReadOnlyError):
        db.append([(1, "d")])
    db.close()


def test_a_sync_lock_left_by_a_dead_writer_does_not_stall_commits(tmp_path):
    """A writer is killed inside its deferred fdatasync while a child it
    forked keeps the .shm file open, and with it the sync lock (an OFD
    lock belongs to the open file description): another process's
    deferred commits see the holder gone and sync alone, at once."""
    import signal

    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            db = pydb.open(base, readonly=False, sync=True, gc="none")
            db.append([(1, "a")])
            child = os.fork()
            if child == 0:                  # an idle child
                time.sleep(60)
                os._exit(0)
            os.write(w, b"%16d" % child)
            T.fail_io(5, crash=True)        # dies at its deferred fdatasync
            db.append([(1, "b")])
        finally:
            os._exit(3)
    child = int(os.read(r, 16))
    assert os.WEXITSTATUS(os.waitpid(pid, 0)[1]) == 137   # (fail_io's crash)
    try:
        with pydb.open(base, readonly=False, sync=True, gc="none") as db:
            db.append([(1, "c")])             # synced with the writer lock
            t0 = time.monotonic()
            for k in range(5):                # deferred: past the sync lock
                db.append([(1, f"d{k}")])
            assert time.monotonic() - t0 < 0.5
            assert db.max_mfn == 8
    finally:
        os.kill(child, signal.SIGKILL)    # (not ours to reap: the writer's)


def test_a_failed_deferred_fsync_fails_another_handles_commit_and_forces_a_replay(tmp_path):
    """Handle A's deferred fdatasync fails while handle F, which holds the
    writer lock (its transaction began while A's commit waited, this test
    holding the sync lock), commits next: F's own fdatasync succeeds (the
    failure was A's), but the header names the log suspect at A's
    failure, so F's commit is not acknowledged (DiskError, outcome
    unknown).  A handle opened afterwards replays the log (the disk may
    lack A's frame), and a power cut after its next commit keeps it."""
    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()
    a = pydb.open(base, readonly=False, sync=True, gc="none")
    f = pydb.open(base, readonly=False, sync=True, gc="none")
    a.append([(1, "a")])
    failed, error = _fail_deferred_sync_beside(a, f)
    assert failed == (None, "fdatasync")
    assert error.committed is None and "another handle or process" in str(error)
    f.close()
    a.close()
    with pydb.open(base, readonly=False, sync=True, gc="none") as db:
        assert _frames_at(f"{base}.wal") == []   # replayed, the files synced
        disk = {ext: open(f"{base}{ext}", "rb").read() for ext in (".mst", ".xrf")}
        mfn = db.append([(1, "c")])
        cut = tmp_path / "cut"
        cut.mkdir()
        (cut / "db.wal").write_bytes(open(f"{base}.wal", "rb").read())
        for ext, data in disk.items():
            (cut / f"db{ext}").write_bytes(data)
    with pydb.open(cut / "db") as r:
        assert r.max_mfn == mfn and r[mfn].raw(1) == [b"c"]
        assert r.check().ok


def test_a_stale_sync_lock_holder_is_waited_for_once(tmp_path):
    """The sync lock held by a holder that never lets it go while its pid
    lives (a stopped process; here this test, the pid in the header set to
    1): the first deferred commit polls about a second, then syncs alone
    and marks the holder stale; later ones do not wait.  A holder whose
    pid is gone is not waited for at all."""
    import mmap

    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()
    with pydb.open(base, readonly=False, sync=True, gc="none") as db:
        db.append([(1, "a")])                    # synced with the writer lock
        with open(f"{base}.shm", "r+b") as shm:
            _sync_lock(shm, True)
            m = mmap.mmap(shm.fileno(), 4096)
            try:
                struct.pack_into("<iIQ", m, 496, 1, 0, 0)   # holder: pid 1, start unknown
                times = []
                for k in range(3):
                    t0 = time.monotonic()
                    db.append([(1, f"d{k}")])
                    times.append(time.monotonic() - t0)
                assert times[0] > 0.9 and max(times[1:]) < 0.5, times
                struct.pack_into("<i", m, 496, 2 ** 31 - 1)  # a pid that is gone
                t0 = time.monotonic()
                db.append([(1, "e")])
                assert time.monotonic() - t0 < 0.5
            finally:
                m.close()
                _sync_lock(shm, False)
        assert db.max_mfn == 5


def _fence(f, kind: int) -> None:
    """Take (fcntl.F_RDLCK / F_WRLCK) or let go (F_UNLCK) the sync fence
    of the open .shm file f: an OFD lock on byte 2 (csrc/wal.c, "sync
    fence")."""
    fcntl.fcntl(f, fcntl.F_OFD_SETLKW, struct.pack("hhqqii", kind, os.SEEK_SET, 2, 1, 0, 0))


def _writer_on_cue(base, cue, report) -> None:
    """A forked writer: waits for a byte on the pipe `cue`, then opens the
    database, appends "c" durably and writes (seconds from the cue to the
    open's return, to the acknowledgement, the MFN) as JSON to `report`."""
    os.read(cue, 1)
    t0 = time.monotonic()
    with pydb.open(base, readonly=False, sync=True, gc="none") as db:
        opened = time.monotonic() - t0
        mfn = db.append([(1, "c")])
        acked = time.monotonic() - t0
    os.write(report, json.dumps([opened, acked, mfn]).encode())


def test_a_writer_opening_during_a_failing_fsync_waits_for_the_failure(tmp_path):
    """Linux reports a writeback error to a description of the log opened
    after it only while no fdatasync has reported it yet.  So a process
    that opens the log just after another's fdatasync failed, before that
    one named the log suspect in the header, would see its own fdatasync
    succeed behind the lost frame.  Here this test's deferred fdatasync
    fails and takes 0.5 s to say so (between the two, as far as another
    process can tell, the failure is seen and not named); a writer
    process opens the database meanwhile and commits: the sync fence holds
    its open until the failure is named (then its recovery replays the
    suspect log), so its commit is acknowledged only after that.  Without
    the fence it is acknowledged within the 0.5 s."""
    import threading

    base = tmp_path / "db"
    pause = 0.5
    db = pydb.create(base, sync=True, gc="none")
    db.append([(1, "a")])                        # synced with the writer lock
    cue, cue_w = os.pipe()
    report_r, report = os.pipe()
    pid = _fork(_writer_on_cue, base, cue, report)
    res = {}
    th = threading.Thread(target=_append_b_failing_its_sync, args=(db, res, pause))
    th.start()
    try:
        _wait_for(lambda: T.io_fired() == "fdatasync", "the failing fdatasync")
        os.write(cue_w, b"g")
    finally:
        th.join()
        _, status = os.waitpid(pid, 0)
    assert status == 0
    opened, acked, mfn = json.loads(os.read(report_r, 200))
    assert res["b"] == (None, "fdatasync")
    assert opened > pause / 2 and acked > pause / 2, (opened, acked)
    db.close()
    with pydb.open(base) as r:    # the fdatasync failed only in this test
        assert [r[m].raw(1) for m in (1, 2, mfn)] == [[b"a"], [b"b"], [b"c"]]
        assert r.check().ok


def test_a_fence_held_without_end_delays_an_open_by_a_second_at_most(tmp_path):
    """A process stopped inside an fdatasync holds the fence as long as
    it is stopped: a writer's open waits for it about a second, then goes
    on (the fence is best effort), and a reader's open does not wait.  One
    stopped inside its pass (the exclusive lock, held for two system calls)
    costs a commit's fdatasync at most 2 ms."""
    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()
    with open(f"{base}.shm", "r+b") as shm:
        _fence(shm, fcntl.F_RDLCK)
        try:
            t0 = time.monotonic()
            with pydb.open(base, readonly=False, sync=True, gc="none") as db:
                waited = time.monotonic() - t0
                db.append([(1, "a")])        # its own fdatasync shares the fence
            t0 = time.monotonic()
            with pydb.open(base) as r:
                assert r.max_mfn == 1
                read_wait = time.monotonic() - t0
        finally:
            _fence(shm, fcntl.F_UNLCK)
        with pydb.open(base, readonly=False, sync=True, gc="none") as db:
            _fence(shm, fcntl.F_WRLCK)
            try:
                t0 = time.monotonic()
                for k in range(5):
                    db.append([(1, f"b{k}")])
                commits = time.monotonic() - t0
            finally:
                _fence(shm, fcntl.F_UNLCK)
    assert 0.9 < waited < 5 and read_wait < 0.5, (waited, read_wait)
    assert commits < 0.5, commits


def _killed_with_a_child(base, hold) -> None:
    """Fork a writer process that opens the database, appends, forks a
    child that only sleeps, and then `hold(db)`s something while this
    test kills it with SIGKILL (what hold() returns is kept till then);
    the child lives on.  Returns the child's
    pid (the caller kills it; not this process's child)."""
    import signal

    ready_r, ready_w = os.pipe()

    def writer():
        db = pydb.open(base, readonly=False, sync=True, gc="none")
        db.append([(1, "a")])
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        os.write(ready_w, json.dumps(child).encode() + b"\n")
        held = hold(db)   # noqa: F841 (kept until the kill)
        time.sleep(60)

    pid = _fork(writer)
    child = json.loads(os.read(ready_r, 100))
    time.sleep(0.2)                      # the writer is inside hold()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return child


def _open_and_append(base) -> float:
    t0 = time.monotonic()
    with pydb.open(base, readonly=False, sync=True, gc="none", lock_timeout=5) as db:
        db.append([(1, "c")])
    return time.monotonic() - t0


def test_a_forked_child_keeps_no_lock_of_its_killed_parent(tmp_path):
    """The writer lock and the sync fence are OFD locks, which belong to
    an open file description, and a fork()ed child shares its parent's:
    a writer killed with a transaction open (the writer lock held), or
    inside an fdatasync (the fence held), while a child it forked lives
    on, left the lock held by the child, and every other writer waited
    (10 s for the lock, a second per open for the fence).  A child takes
    descriptions of its own at the fork (csrc/wal.c, pydb__wal_forked)."""
    import errno
    import signal

    base = tmp_path / "db"
    pydb.create(base, sync=True, gc="none").close()

    def in_transaction(db):
        tx = db.transaction()
        tx.append([(1, "b")])
        return tx

    def in_fsync(db):
        T.fail_io(5, errno.EIO, pause=30_000_000)   # the deferred fdatasync
        db.append([(1, "b")])

    for hold in (in_transaction, in_fsync):
        child = _killed_with_a_child(base, hold)
        try:
            took = _open_and_append(base)
        finally:
            os.kill(child, signal.SIGKILL)      # a grandchild: init reaps it
        assert took < 0.5, (hold.__name__, took)
