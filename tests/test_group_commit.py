"""Group commit (csrc/group.c): ``append``/``update``/``delete``/
``undelete`` calls of several threads on one Database that wait for the
writer lock meanwhile share one transaction, and so one fdatasync.

Each caller must still see what it would alone: its own MFN, its own
error, its own timeout, and its change durable when the call returns
(killed writer processes included).  The tests that need a known group
hold the writer lock with an explicit transaction, let a leader and its
followers queue (``_testing.group_state``), and then let the lock go; the
test commit hook (``_testing.commit_hook``) writes each transaction's
MFNs to a file and counts the transactions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import pydb
from pydb import _pydb

T = _pydb._testing


def _wait_for(what, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not what():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.005)


class _Call(threading.Thread):
    """fn() in a thread; .result or .error afterwards."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.result, self.error = fn, None, None

    def run(self):
        try:
            self.result = self.fn()
        except BaseException as e:  # handed to the test
            self.error = e


def _write(db, op: int, mfn, fields, timeout: float):
    """Database.append/update/... with a timeout of its own: the public
    methods take the handle's lock_timeout, and a test of per-caller
    timeouts needs callers with different ones on one handle."""
    return _pydb._write_one(db, op, mfn, fields, timeout)


def _queue_behind_a_held_lock(db, leader_fn, follower_fns):
    """Hold the writer lock; start leader_fn (it becomes the leader and
    waits for the lock), then follower_fns one by one (each queued before
    the next starts, so the queue's order is theirs).  Returns the open
    transaction and the started calls."""
    tx = db.transaction()
    leader = _Call(leader_fn)
    leader.start()
    _wait_for(lambda: T.group_state(db) == (0, 1))
    calls = []
    for i, fn in enumerate(follower_fns):
        c = _Call(fn)
        c.start()
        _wait_for(lambda n=i + 1: T.group_state(db)[0] == n)
        calls.append(c)
    return tx, leader, calls


def _commits(db) -> int:
    return db.stat()["header"]["commit"]


def test_threads_appending_get_every_record_once(tmp_path):
    """8 threads x 40 durable appends: MFNs 1..320 each handed out once,
    and each holds what its caller wrote (read back here and by a new
    handle)."""
    got: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()
    with pydb.create(tmp_path / "db", sync=True) as db:

        def writer(t):
            for i in range(40):
                mfn = db.append([(1, str(t)), (2, str(i)), (3, "x" * (t * 37 + i))])
                with lock:
                    assert mfn not in got
                    got[mfn] = (t, i)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sorted(got) == list(range(1, 321))
    with pydb.open(tmp_path / "db") as db:
        assert db.max_mfn == 320
        for mfn, (t, i) in got.items():
            assert db[mfn].raw(1) == [str(t).encode()]
            assert db[mfn].raw(2) == [str(i).encode()]
            assert db[mfn].raw(3) == [b"x" * (t * 37 + i)]
        assert db.check().ok


def test_waiting_writes_share_one_transaction(tmp_path):
    """A leader waiting for the lock commits alone; the six calls queued
    behind it then commit in one transaction, in queue order."""
    side = tmp_path / "side.txt"
    with pydb.create(tmp_path / "db", sync=True) as db:
        T.commit_hook(db, str(side))
        before = _commits(db)
        tx, leader, calls = _queue_behind_a_held_lock(
            db, lambda: db.append([(1, "leader")]),
            [lambda i=i: db.append([(1, f"f{i}")]) for i in range(6)])
        tx.abort()
        for c in [leader, *calls]:
            c.join(20)
            assert c.error is None, c.error
        assert leader.result == 1
        assert [c.result for c in calls] == [2, 3, 4, 5, 6, 7]
        assert [db[m].raw(1) for m in range(1, 8)] == [
            [b"leader"], *[[f"f{i}".encode()] for i in range(6)]]
        assert T.hook_counts()[0] == 2
        assert _commits(db) - before == 2
        # the second transaction's summary: all six appends
        assert side.read_text() == "".join(f"{m} -1 1 0\n" for m in range(2, 8))


def test_a_change_that_fails_fails_alone(tmp_path):
    """In a group, an update of a missing MFN and a deletion past NXTMFN
    raise NotFoundError for their callers; the others commit together."""
    with pydb.create(tmp_path / "db", sync=True) as db:
        db.append([(1, "one")])
        T.commit_hook(db, str(tmp_path / "side.txt"))
        tx, leader, calls = _queue_behind_a_held_lock(
            db, lambda: db.update(1, [(1, "one, again")]),
            [lambda: db.append([(1, "a")]),
             lambda: db.update(5000, [(1, "nowhere")]),
             lambda: db.append([(1, "b")]),
             lambda: db.delete(6000),
             lambda: db.delete(1)])
        tx.abort()
        for c in [leader, *calls]:
            c.join(20)
        assert leader.error is None and calls[0].error is None
        assert isinstance(calls[1].error, pydb.NotFoundError)
        assert isinstance(calls[3].error, pydb.NotFoundError)
        assert calls[1].error.committed is False
        assert (calls[0].result, calls[2].result) == (2, 3)
        assert calls[4].error is None
        assert T.hook_counts()[0] == 2
        assert db.max_mfn == 3 and db[1].deleted and db[1].raw(1) == [b"one, again"]
        assert (db[2].raw(1), db[3].raw(1)) == ([b"a"], [b"b"])


def test_a_refused_commit_is_tried_again_for_each_change_alone(tmp_path):
    """The commit hook refuses one record of a group (before the commit
    point: nothing committed): each other change is committed alone, and
    only the refused one's caller gets the error."""
    with pydb.create(tmp_path / "db", sync=True) as db:
        T.commit_hook(db, str(tmp_path / "side.txt"))
        tx, leader, calls = _queue_behind_a_held_lock(
            db, lambda: db.append([(1, "leader")]),
            [lambda: db.append([(1, "a")]),
             lambda: db.append([(9999, "refused")]),
             lambda: db.append([(1, "b")])])
        tx.abort()
        for c in [leader, *calls]:
            c.join(20)
        assert leader.error is None and leader.result == 1
        assert isinstance(calls[1].error, pydb.RecordTooLargeError)
        assert "test hook refuses" in str(calls[1].error)
        assert calls[1].error.committed is False
        assert calls[0].error is None and calls[2].error is None
        # the leader, the refused group, then each of its members alone,
        # in queue order (the refused one refused again)
        assert (calls[0].result, calls[2].result) == (2, 3)
        assert T.hook_counts()[0] == 3
        assert db.max_mfn == 3
        assert (db[2].raw(1), db[3].raw(1)) == ([b"a"], [b"b"])


def _group_with_failing_io(db, n: int, errno: int, op: str):
    """A leader commits alone; then a group of appends a, b, c whose
    leader (a) makes the n-th file operation of its own thread fail (the
    group's I/O is its leader's), which must be `op`.  Returns (leader,
    [a, b, c]) joined."""
    def first():
        T.fail_io(n, errno)
        return db.append([(1, "a")])

    try:
        tx, leader, calls = _queue_behind_a_held_lock(
            db, lambda: db.append([(1, "leader")]),
            [first, lambda: db.append([(1, "b")]), lambda: db.append([(1, "c")])])
        tx.abort()
        for c in [leader, *calls]:
            c.join(20)
        assert T.io_fired() == op
    finally:
        T.fail_io(0)
    return leader, calls


@pytest.mark.parametrize("eno, commits", [(5, 4), (28, 2)], ids=["EIO", "ENOSPC"])
def test_a_group_whose_log_write_fails_is_committed_alone(tmp_path, eno, commits):
    """EIO on the group's log write (before the commit point, the handle
    still writes): each change is tried again alone, and all commit.
    ENOSPC there, while the log holds the leader's frame, is cured inside
    the commit by a checkpoint that empties the log (csrc/txn.c,
    log_cannot_grow): the group commits as one."""
    with pydb.create(tmp_path / "db", sync=True) as db:
        before = _commits(db)
        leader, calls = _group_with_failing_io(db, 1, eno, "pwrite")
        assert [c.error for c in [leader, *calls]] == [None] * 4
        assert [c.result for c in [leader, *calls]] == [1, 2, 3, 4]
        # the leader, then three alone (EIO), or the group (ENOSPC)
        assert _commits(db) - before == commits
        assert [db[m].raw(1) for m in range(1, 5)] == [[b"leader"], [b"a"], [b"b"], [b"c"]]


def test_a_failed_group_fsync_is_every_members_outcome(tmp_path):
    """EIO on the group's log fdatasync (its fifth operation, after the
    frame, the records, the XRF block and the control record: the
    leader's commit synced the blocks, so the group's syncs after the
    writer lock, csrc/txn.c "One fsync for many commits"): whether it is
    committed is unknown, for every member alike, and the handle turns
    read-only; after reopening, the group is there whole or not at
    all."""
    base = tmp_path / "db"
    with pydb.create(base, sync=True) as db:
        leader, calls = _group_with_failing_io(db, 5, 5, "fdatasync")
        assert leader.error is None and leader.result == 1
        for c in calls:
            assert isinstance(c.error, pydb.DiskError), c.error
            assert c.error.committed is None
        with pytest.raises(pydb.ReadOnlyError):
            db.append([(1, "after")])
    with pydb.open(base, readonly=False) as db:
        assert db.max_mfn in (1, 4)
        assert [db[m].raw(1) for m in range(2, db.max_mfn + 1)] in ([], [[b"a"], [b"b"], [b"c"]])


def _timed(fn):
    """fn, and how long it took (seconds) in .elapsed of the call."""
    def call():
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            c.elapsed = time.monotonic() - t0
    c = _Call(call)
    return c


def test_a_queued_call_keeps_its_own_timeout(tmp_path):
    """A call queued behind a leader that waits for the lock gives up
    after its own timeout (not before), and writes nothing."""
    with pydb.create(tmp_path / "db", sync=True) as db:
        tx, leader, _ = _queue_behind_a_held_lock(
            db, lambda: _write(db, 0, None, [(1, "leader")], 60.0), [])
        impatient = _timed(lambda: _write(db, 0, None, [(1, "impatient")], 0.5))
        impatient.start()
        impatient.join(30)
        assert isinstance(impatient.error, pydb.LockTimeoutError)
        assert "(waited 500 ms)" in str(impatient.error), impatient.error
        assert impatient.error.committed is False
        assert 0.45 <= impatient.elapsed < 15
        assert T.group_state(db) == (0, 1)
        tx.abort()
        leader.join(20)
        assert leader.result == 1 and db.max_mfn == 1


def test_a_group_waits_no_longer_than_its_most_pressed_member(tmp_path):
    """The leader alone times out after 2 s.  The next group is a 60 s
    caller (its leader) and a 3.5 s one: it waits for the lock until the
    earlier deadline, fails that caller alone, and puts the other back,
    who commits once the lock is free."""
    with pydb.create(tmp_path / "db", sync=True) as db:
        short = _timed(lambda: _write(db, 0, None, [(1, "short")], 3.5))
        tx, leader, calls = _queue_behind_a_held_lock(
            db, lambda: _write(db, 0, None, [(1, "leader")], 2.0),
            [lambda: _write(db, 0, None, [(1, "long")], 60.0), short.run])
        leader.join(30)
        assert isinstance(leader.error, pydb.LockTimeoutError)
        calls[1].join(30)
        assert isinstance(short.error, pydb.LockTimeoutError), short.error
        assert "(waited 3500 ms)" in str(short.error), short.error
        assert 3.4 <= short.elapsed < 15
        assert calls[0].is_alive()
        tx.abort()
        calls[0].join(30)
        assert calls[0].error is None and calls[0].result == 1
        assert db.max_mfn == 1 and db[1].raw(1) == [b"long"]


def test_a_thread_in_its_own_transaction_is_refused_at_once(tmp_path):
    """db.append from the thread that holds db's transaction would wait
    for itself: it fails at once, and the transaction goes on."""
    with pydb.create(tmp_path / "db", sync=False, lock_timeout=30) as db:
        t0 = time.monotonic()
        with db.transaction() as tx:
            with pytest.raises(pydb.LockTimeoutError, match="this thread"):
                db.append([(1, "inner")])
            tx.append([(1, "outer")])
        assert time.monotonic() - t0 < 10
        assert db.max_mfn == 1 and db[1].raw(1) == [b"outer"]
        assert T.group_state(db) == (0, 0)


_FORKING = r"""
import os, sys, threading, time, pydb
db = pydb.open(sys.argv[1], readonly=False, sync=False, lock_timeout=10)
stop = False
def writer(t):
    while not stop:
        db.append([(1, str(t))])
threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
for th in threads:
    th.start()
time.sleep(0.1)
for k in range(10):
    pid = os.fork()
    if pid == 0:
        db.append([(1, "child"), (2, str(k))])
        os._exit(0)
    end = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, k
            break
        if time.monotonic() > end:
            os.kill(pid, 9)
            print(f"child {k} hung", flush=True)
            os._exit(3)
        time.sleep(0.01)
stop = True
for th in threads:
    th.join()
db.close()
print("ok", flush=True)
"""


def test_a_child_forked_while_threads_write_can_write(tmp_path):
    """fork() while 6 threads of the parent append through one handle:
    each child appends through the handle it inherited, at once (the
    writer locks and the group queue are made anew in the child: a lock
    or a waiter of a vanished thread would make it hang)."""
    base = tmp_path / "db"
    pydb.create(base).close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", _FORKING, str(base)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert p.returncode == 0 and p.stdout.split() == ["ok"], p.stdout + p.stderr
    with pydb.open(base) as db:
        children = sorted(int(r.raw(2)[0]) for r in db if r.raw(1) == [b"child"])
        assert children == list(range(10))


_KILLED_WRITER = r"""
import sys, threading, pydb
db = pydb.open(sys.argv[1], readonly=False, sync=True)
out = threading.Lock()
def writer(t):
    for i in range(100000):
        mfn = db.append([(1, str(t)), (2, str(i))])
        with out:
            sys.stdout.write(f"{mfn} {t} {i}\n")
            sys.stdout.flush()
for t in range(8):
    threading.Thread(target=writer, args=(t,), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.parametrize("acked", [50, 400])
def test_killed_group_writers_lose_no_acknowledged_record(tmp_path, acked):
    """8 threads of another process append durably until it is killed
    (SIGKILL) after `acked` acknowledgements: every acknowledged record is
    there with its content after recovery, and MFNs are gapless."""
    base = tmp_path / "db"
    pydb.create(base, sync=True).close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(base)],
                         stdout=subprocess.PIPE, text=True, env=env)
    seen = {}
    try:
        for line in p.stdout:
            mfn, t, i = map(int, line.split())
            seen[mfn] = (t, i)
            if len(seen) >= acked:
                break
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
    assert len(seen) >= acked
    with pydb.open(base, readonly=False) as db:
        assert db.max_mfn >= max(seen)
        for mfn, (t, i) in seen.items():
            assert db[mfn].raw(1) == [str(t).encode()]
            assert db[mfn].raw(2) == [str(i).encode()]
        for mfn in range(1, db.max_mfn + 1):
            assert not db[mfn].deleted
        assert db.check().ok


_FORK_WITH_OPEN_TXN = r"""
import os, sys, threading, pydb
db = pydb.open(sys.argv[1], readonly=False, sync=False)
opened, done = threading.Event(), threading.Event()
def holder():
    with db.transaction() as tx:
        tx.append([(1, "parent")])
        opened.set()
        done.wait()
t = threading.Thread(target=holder)
t.start()
opened.wait()
pid = os.fork()
if pid == 0:
    try:
        # the parent's transaction belongs to a thread the child lacks
        import time
        time.sleep(0.3)                 # the parent commits meanwhile
        with db.transaction(timeout=5) as tx:
            tx.append([(1, "child tx")])
        db.append([(1, "child")])
        db.close()
        os._exit(0)
    except BaseException as e:
        print("child:", repr(e), flush=True)
        os._exit(1)
done.set()
t.join()
_, status = os.waitpid(pid, 0)
print("ok" if status == 0 else f"child status {status}")
"""


def test_a_child_forked_while_a_thread_holds_a_transaction_begins_its_own(tmp_path):
    """fork() while another thread of the parent holds a transaction open:
    the child's transaction() works (before, every one raised "this
    Database already has an open transaction": the child's handle still
    pointed at the parent's, found by a review), and the parent's commit
    is not disturbed."""
    base = tmp_path / "db"
    pydb.create(base).close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", _FORK_WITH_OPEN_TXN, str(base)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == ["ok"], p.stdout + p.stderr
    with pydb.open(base) as db:
        assert sorted(r.raw(1)[0] for r in db) == [b"child", b"child tx", b"parent"]
        assert db.check().ok
