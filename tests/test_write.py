"""The write path (csrc/txn.c, csrc/wal.c): transactions with the ISIS update
technique (docs/isis-formats.md §2.3, §2.4, §3.2, §10), every layout and MSTXL,
the write-ahead log and recovery, locks, and every real master file under
../shared/data/isis copied, updated and re-read."""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

import pydb

from conftest import DATA, LAYOUTS, all_master_files

LEADER = {"isis-packed": 18, "isis-aligned": 20, "ffi-packed": 22, "ffi-aligned": 24}


def sample(i: int) -> list[tuple[int, bytes]]:
    rec = [(24, f"Title {i} ".encode() * (i % 7 + 1)), (70, b"Smith, J."),
           (26, b"^aParis^bUnesco^c19%02d" % (i % 100))]
    if i % 3 == 0:
        rec.append((70, "Andr\u00e9, \u00c9.".encode("utf-8")))
    if i % 5 == 0:
        rec.append((900, b""))           # zero-length field is kept
    if i % 11 == 0:
        rec.append((65535, b"x" * (i % 300)))
    return rec


def raw_fields(rec) -> list[tuple[int, bytes]]:
    return [(f.tag, f.raw) for f in rec.fields]


def read_ctl(base):
    mst = open(f"{base}.mst", "rb").read()
    ctlmfn, nxtmfn, nxtmfb, nxtmfp, mftype, mstxl = struct.unpack_from("<iiiHBB", mst, 0)
    return mst, ctlmfn, nxtmfn, nxtmfb, nxtmfp, mstxl


def check_files(base, layout, mstxl, n_mfn):
    """File-level invariants of formats §2.1, §2.3, §3.1, §10."""
    mst, ctlmfn, nxtmfn, nxtmfb, nxtmfp, shift = read_ctl(base)
    xrf = open(f"{base}.xrf", "rb").read()
    assert (ctlmfn, nxtmfn, shift) == (0, n_mfn + 1, mstxl)
    end = (nxtmfb - 1) * 512 + nxtmfp - 1
    assert len(mst) % 512 == 0 and end <= len(mst)
    assert mst[end:] == b"\0" * (len(mst) - end)        # zero-filled tail
    nblocks = len(xrf) // 512
    assert len(xrf) % 512 == 0 and nblocks == max(1, -(-n_mfn // 127))
    for b in range(nblocks):
        pos = struct.unpack_from("<i", xrf, b * 512)[0]
        assert pos == (-(b + 1) if b == nblocks - 1 else b + 1)
    return mst, xrf


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mstxl", [0, 3, 6])
@pytest.mark.sanitize_address
def test_write_then_read_every_layout(tmp_path, layout, mstxl):
    base = tmp_path / "db"
    expected: dict[int, list] = {}
    with pydb.create(base, layout, mstxl, sync=False) as db:
        assert db.layout == layout and db.max_mfn == 0 and len(db) == 0
        for i in range(1, 201):                         # autocommit appends
            if i <= 20:
                assert db.append(sample(i)) == i
            else:
                break
        with db.transaction() as tx:                    # one batch of 280
            for i in range(21, 301):
                assert tx.append(sample(i)) == i
        expected = {i: sample(i) for i in range(1, 301)}
        db.update(7, [(1, b"seven"), (2, "\u00e9t\u00e9")])
        expected[7] = [(1, b"seven"), (2, "\u00e9t\u00e9".encode())]
        with db.transaction() as tx:
            tx.update(8, [(1, b"eight v2")])
            tx.update(8, [(1, b"eight v3")])            # twice in one transaction
            tx.delete(9)
            tx.delete(10)
            tx.undelete(10)                             # net: active again
            new = tx.append([(5, b"appended last")])
        expected[8] = [(1, b"eight v3")]
        expected[new] = [(5, b"appended last")]
        assert new == 301

        def verify(db):
            assert db.layout == layout and db.max_mfn == 301
            assert db.counts() == {"active": 300, "logically_deleted": 1,
                                   "physically_deleted": 0, "unused": 0,
                                   "new": 301, "pending": 0}
            for mfn, fields in expected.items():
                r = db[mfn]
                assert raw_fields(r) == fields, mfn
                assert r.deleted == (mfn == 9) and r.status == (mfn == 9)
                assert r.new and not r.pending           # never inverted
                assert r.offset % (2 ** mstxl if mstxl else 2) == 0
                assert r.offset % 512 <= 512 - (LEADER[layout] - 4)  # never-split
                assert r.mfrl % 2 == 0 and r.mfrl % (2 ** mstxl) == 0
                assert not r.locked
            # version chains: newest first, back pointers strictly backwards
            v8 = db.versions(8)
            assert [raw_fields(v) for v in v8] == [[(1, b"eight v3")], [(1, b"eight v2")],
                                                   sample(8)]
            v10 = db.versions(10)
            assert [v.status for v in v10] == [0, 1, 0]
            assert all(raw_fields(v) == sample(10) for v in v10)
            assert db.versions(1)[0].back_offset is None and len(db.versions(1)) == 1
            assert [r.mfn for r in db] == [m for m in range(1, 302) if m != 9]
            assert db.mfns(deleted=True) == list(range(1, 302))

        verify(db)
    mst, _ = check_files(base, layout, mstxl, 301)
    # blank padding inside MFRL (formats §2.2)
    with pydb.open(base) as db:
        verify(db)
        r = db[1]
        g = {"isis-packed": 6, "isis-aligned": 6, "ffi-packed": 10, "ffi-aligned": 12}[layout]
        content = LEADER[layout] + g * len(r) + sum(len(f.raw) for f in r.fields)
        assert mst[r.offset + content:r.offset + r.mfrl] == b" " * (r.mfrl - content)
    assert os.path.getsize(f"{base}.wal") == 0          # log empty between commits


def test_flags_pending_on_inverted_records(tmp_path):
    """A record without the "new" flag (as after an inversion) gets "update
    pending" (0x200) when changed, and its XRF pointer is negated on delete
    (formats §2.4, §3.2)."""
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        db.append([(1, b"a")])
        db.append([(1, b"b")])
    # clear the "new" flag of MFN 1 as an inversion would
    xrf = bytearray(open(f"{base}.xrf", "rb").read())
    v = struct.unpack_from("<i", xrf, 4)[0]
    struct.pack_into("<i", xrf, 4, v & ~0x400)
    open(f"{base}.xrf", "wb").write(bytes(xrf))
    # gc="none": the collector would compact away the back version whose
    # offset is checked below (one garbage version in a tiny file is a
    # quarter of its live bytes: the collector thread won the race in 7 to
    # 8 of 300 tries, on 3.11 as on python3.13t)
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        assert not db[1].new and not db[1].pending
        old = db[1].offset
        db.update(1, [(1, b"a2")])
        r = db[1]
        assert r.pending and not r.new and r.back_offset == old
        db.delete(1)
        e = db.xrf_entry(1)
        assert e["state"] == "logically deleted" and e["raw"] < 0 and e["pending"]
        assert e["offset"] == db[1].offset and db[1].status == 1
        db.update(2, [(1, b"b2")])
        assert db[2].new and not db[2].pending      # still never inverted


def test_control_record_fields_kept(tmp_path):
    base = tmp_path / "db"
    with pydb.create(base, "isis-aligned", 0, sync=False) as db:
        pass
    mst = bytearray(open(f"{base}.mst", "rb").read())
    struct.pack_into("<i", mst, 16, 151)             # RECCNT as WinISIS writes it
    struct.pack_into("<iii", mst, 20, 7, 8, 0)
    open(f"{base}.mst", "wb").write(bytes(mst))
    with pydb.open(base, readonly=False, sync=False) as db:
        db.append([(1, b"x" * 600)])                 # spans a block boundary
        info = db.info()
        assert (info["reccnt"], info["next_mfn"]) == (151, 2)
    mst = open(f"{base}.mst", "rb").read()
    assert struct.unpack_from("<iiii", mst, 16) == (151, 7, 8, 0)
    # NXTMFB/NXTMFP point just past the record (formats §2.1 notes)
    _, _, nxtmfn, nxtmfb, nxtmfp, _ = read_ctl(base)
    with pydb.open(base) as db:
        r = db[1]
        assert r.offset == 64 and (nxtmfb - 1) * 512 + nxtmfp - 1 == 64 + r.mfrl


def test_too_large_names_limit_and_ffi(tmp_path):
    with pydb.create(tmp_path / "a", sync=False) as db:
        with pytest.raises(pydb.RecordTooLargeError, match="32767.*FFI"):
            db.append([(10, b"x" * 40000)])
        assert db.max_mfn == 0                       # nothing written
        db.append([(10, b"x" * 32700)])               # fits (18+6+32700 -> 32724)
        with pytest.raises(pydb.RecordTooLargeError, match="32767"):
            db.update(1, [(10, b"y" * 32760)])
        assert db[1].raw(10) == [b"x" * 32700]
    with pydb.create(tmp_path / "b", "ffi-packed", sync=False) as db:
        db.append([(10, b"x" * 400000)])
        assert db[1].raw(10) == [b"x" * 400000]


def test_create_refuses_existing(tmp_path):
    with pydb.create(tmp_path / "db", sync=False) as db:
        db.append([(1, b"keep")])
    before = open(tmp_path / "db.mst", "rb").read()
    with pytest.raises(pydb.DatabaseExistsError):
        pydb.create(tmp_path / "db")
    (tmp_path / "x.xrf").write_bytes(b"")
    with pytest.raises(pydb.DatabaseExistsError):
        pydb.create(tmp_path / "x")
    assert open(tmp_path / "db.mst", "rb").read() == before
    with pytest.raises(ValueError):
        pydb.create(tmp_path / "y", layout="isis-wide")
    with pytest.raises(ValueError):
        pydb.create(tmp_path / "z", mstxl=7)


def test_create_argument_errors_and_path_types(tmp_path):
    """One message per bad argument; bytes and PathLike paths as open()
    takes them; a path with an empty base name is refused before any file
    is made."""
    with pytest.raises(ValueError, match=r"^mstxl must be 0\.\.6, not 7$"):
        pydb.create(tmp_path / "a", "isis-packed", mstxl=7)
    with pytest.raises(ValueError, match=r"layout must be .*not 'isis-wide'$") as ei:
        pydb.create(tmp_path / "a", "isis-wide", mstxl=0)
    assert "mstxl" not in str(ei.value)
    with pytest.raises(TypeError, match="mstxl must be an int"):
        pydb.create(tmp_path / "a", mstxl="3")
    with pytest.raises(ValueError, match="mstxl must be 0..6, not -1"):
        pydb._pydb._create(str(tmp_path / "a"), "isis-packed", -1, False)
    with pytest.raises(ValueError, match="not 'x'$"):
        pydb._pydb._create(str(tmp_path / "a"), "x", 3, False)
    assert sorted(os.listdir(tmp_path)) == []
    with pydb.create(os.fsencode(tmp_path / "b"), mstxl=3, sync=False) as db:
        db.append([(1, b"x")])
    assert os.path.isfile(tmp_path / "b.mst") and os.path.isfile(tmp_path / "b.xrf")
    with pydb.open(os.fsencode(tmp_path / "b")) as db:
        assert db[1].raw(1) == [b"x"]
    (tmp_path / "d").mkdir()
    for bad in (str(tmp_path / "d") + os.sep, os.fsencode(tmp_path / "d") + b"/",
                str(tmp_path / "d") + "/."):
        with pytest.raises(ValueError, match="base name"):
            pydb.create(bad, sync=False)
    assert os.listdir(tmp_path / "d") == []
    # the core refuses it too (C callers)
    with pytest.raises(ValueError, match="base name"):
        pydb._pydb._create(str(tmp_path / "d") + "/", "isis-packed", 0, False)
    assert os.listdir(tmp_path / "d") == []


def test_fields_arguments(tmp_path):
    with pydb.create(tmp_path / "db", encoding="cp850", sync=False) as db:
        m = db.append([(1, "Andr\u00e9"), [2, b"\x82"], (3, bytearray(b"ba")),
                       (4, memoryview(b"mv"))])
        assert db[m].raw(1) == [b"Andr\x82"] and db[m][2] == ["\u00e9"]
        assert db[m].raw(3) == [b"ba"] and db[m].raw(4) == [b"mv"]
        copy = db.append(db[m])                     # a Record: stored bytes
        assert raw_fields(db[copy]) == raw_fields(db[m])
        db.update(copy, list(db[m].fields)[:2])
        assert raw_fields(db[copy]) == [(1, b"Andr\x82"), (2, b"\x82")]
        assert db.append([]) == 3 and len(db[3]) == 0
        for bad, exc in [([(0, b"x")], ValueError), ([(65536, b"x")], ValueError),
                         ([("1", b"x")], TypeError), ([(1, 5)], TypeError),
                         ([(1, b"x", 2)], ValueError), ("abc", TypeError),
                         ([5], TypeError), (5, TypeError), ([(True, b"x")], TypeError)]:
            with pytest.raises(exc):
                db.append(bad)
        # a character cp850 lacks: FieldEncodeError naming field and tag,
        # a pydb.Error and UnicodeEncodeError; nothing written
        n = db.max_mfn
        for call in (lambda: db.append([(1, "ok"), (24, "snow \u2603 man")]),
                     lambda: db.update(1, [(1, "ok"), (24, "snow \u2603 man")])):
            with pytest.raises(pydb.FieldEncodeError) as ei:
                call()
            e = ei.value
            assert isinstance(e, UnicodeEncodeError) and isinstance(e, pydb.Error)
            assert (e.field, e.tag, e.encoding, e.object, e.start, e.end) == (
                2, 24, "cp850", "snow \u2603 man", 5, 6)
            assert str(e) == ("field 2 (tag 24): '\u2603' (character 5 of the value) "
                              "cannot be written in the database's encoding 'cp850': "
                              "character maps to <undefined>")
        assert db[1].raw(1) == [b"Andr\x82"] and db.max_mfn == n
        with pytest.raises(pydb.NotFoundError):
            db.update(99, [(1, b"x")])
        with pytest.raises(pydb.NotFoundError):
            db.delete(0)
        assert db.max_mfn == 3


def test_fields_as_a_dict_of_tag_to_values(tmp_path):
    """A dict {tag: value or list/tuple of values}, the shape of
    Record.to_dict(), is a record: tags in the dict's order, each tag's
    values in theirs; Record.to_dict() of what was read writes it again."""
    with pydb.create(tmp_path / "db", encoding="cp850", sync=False) as db:
        m = db.append({24: "Andr\u00e9", 70: ["Smith, J.", b"Doe, A."], 10: ("a", "b")})
        assert raw_fields(db[m]) == [(24, b"Andr\x82"), (70, b"Smith, J."),
                                     (70, b"Doe, A."), (10, b"a"), (10, b"b")]
        copy = db.append(db[m].to_dict())
        assert raw_fields(db[copy]) == raw_fields(db[m])
        with db.transaction() as tx:
            tx.update(copy, {5: ["x"], 6: []})
            third = tx.append({})
        assert raw_fields(db[copy]) == [(5, b"x")] and len(db[third]) == 0
        n = db.max_mfn
        for bad, exc, msg in [({0: "x"}, ValueError, "field 1: tag 0 is outside"),
                              ({"1": "x"}, TypeError, "field 1: a tag is an int"),
                              ({1: ["x", None]}, TypeError, "field 2: a field value"),
                              ({1: "ok", 24: "\u2603"}, pydb.FieldEncodeError,
                               "field 2 (tag 24)")]:
            with pytest.raises(exc, match=re.escape(msg)):
                db.append(bad)
        assert db.max_mfn == n


@pytest.mark.sanitize_address
def test_transaction_abort_and_states(tmp_path):
    with pydb.create(tmp_path / "db", sync=False) as db:
        db.append([(1, b"one")])
        with pytest.raises(RuntimeError):
            with db.transaction() as tx:
                tx.append([(1, b"two")])
                tx.update(1, [(1, b"changed")])
                raise RuntimeError("boom")
        assert not tx.active
        assert db.max_mfn == 1 and db[1].raw(1) == [b"one"]
        with pytest.raises(pydb.ClosedError):
            tx.append([(1, b"x")])
        tx = db.transaction()
        assert tx.active
        with pytest.raises(pydb.LockTimeoutError):
            db.transaction(timeout=0)                # one per handle
        assert tx.append([(1, b"two")]) == 2
        assert db.max_mfn == 1                       # not visible before commit
        with pytest.raises(pydb.NotFoundError):
            db[2]
        tx.commit()
        assert db[2].raw(1) == [b"two"]
        with pytest.raises(pydb.ClosedError):
            tx.commit()
        tx.abort()                                    # idempotent
        tx = db.transaction()
        tx.append([(1, b"three")])
    # close() aborted the open transaction
    with pydb.open(tmp_path / "db") as db:
        assert db.max_mfn == 2
    with pytest.raises(pydb.ClosedError):
        tx.append([(1, b"x")])


@pytest.mark.sanitize_thread
def test_readonly_and_lock_timeout_across_handles(tmp_path):
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        db.append([(1, b"a")])
    with pydb.open(base) as ro:
        with pytest.raises(pydb.ReadOnlyError):
            ro.transaction()
        with pytest.raises(pydb.ReadOnlyError):
            ro.delete(1)
    w1 = pydb.open(base, readonly=False, lock_timeout=0.2)
    w2 = pydb.open(base, readonly=False, lock_timeout=0.2)
    tx = w1.transaction()
    t0 = time.monotonic()
    with pytest.raises(pydb.LockTimeoutError) as e:
        w2.append([(1, b"b")])
    assert 0.15 < time.monotonic() - t0 < 5 and e.value.filename.endswith(".wal")
    tx.append([(1, b"from w1")])
    tx.commit()
    assert w2.append([(1, b"from w2")]) == 3        # sees w1's commit first
    assert w1[3].raw(1) == [b"from w2"]             # w1 picks up w2's commit
    w1.close()
    w2.close()


def test_open_refuses_a_lock_timeout_no_write_takes(tmp_path):
    """lock_timeout is checked at open against what a write takes (0 to
    24 days): infinity opened, then every write raised ValueError."""
    base = tmp_path / "db"
    pydb.create(base).close()
    for bad in (float("inf"), float("nan"), -1.0, pydb.database.MAX_LOCK_TIMEOUT + 1):
        with pytest.raises(ValueError, match="lock_timeout must be a number of seconds"):
            pydb.open(base, readonly=False, lock_timeout=bad)
    with pydb.open(base, readonly=False, lock_timeout=pydb.database.MAX_LOCK_TIMEOUT) as db:
        assert db.append(sample(1)) == 1


def test_lock_across_processes(tmp_path):
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        db.append([(1, b"a")])
    code = ("import pydb,sys,time\n"
            "db=pydb.open(sys.argv[1],readonly=False)\n"
            "tx=db.transaction(); tx.append([(1,b'child')]); print('locked',flush=True)\n"
            "time.sleep(1.0); tx.commit(); print('done',flush=True)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(base)], stdout=subprocess.PIPE,
                         text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert p.stdout.readline().strip() == "locked"
    with pydb.open(base, readonly=False, lock_timeout=0.1) as db:
        with pytest.raises(pydb.LockTimeoutError):
            db.append([(1, b"parent")])
        t0 = time.monotonic()
        m = db.transaction(timeout=20)
        assert time.monotonic() - t0 > 0.3            # waited for the child
        mfn = m.append([(1, b"parent")])
        m.commit()
        assert mfn == 3 and db[2].raw(1) == [b"child"]
    assert p.stdout.readline().strip() == "done" and p.wait() == 0


def _lock_holder(base, append: bytes | None) -> subprocess.Popen:
    """A process holding the writer lock of `base`: an open transaction
    (appending `append` if not None), committed when a line is written to
    its stdin.  It collects no garbage (gc="none"): what the test made
    stays for the test's own collect()."""
    code = ("import pydb,sys\n"
            "db=pydb.open(sys.argv[1],readonly=False,gc='none')\n"
            "tx=db.transaction()\n"
            f"{'' if append is None else f'tx.append([(1,{append!r})])'}\n"
            "print('locked',flush=True); sys.stdin.readline(); tx.commit()\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(base)], stdout=subprocess.PIPE,
                         stdin=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert p.stdout.readline().strip() == "locked"
    return p


@pytest.mark.sanitize_thread
@pytest.mark.parametrize("holder", ["thread", "process"])
@pytest.mark.parametrize("write", ["append", "transaction"])
def test_close_ends_the_writes_waiting_for_the_lock(tmp_path, holder, write):
    """close() while a thread waits for the writer lock -- held by an open
    transaction of this handle (`thread`) or by another process -- ends
    that wait with ClosedError at once, and the close returns: it waited
    for lock_timeout (forever with a long one) before (found by a review)."""
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        db.append([(1, b"a")])
    p = _lock_holder(base, b"child") if holder == "process" else None
    db = pydb.open(base, readonly=False, lock_timeout=600)
    if holder == "thread":
        tx = db.transaction()
        tx.append([(1, b"open")])
    got: list[BaseException] = []

    def waiter():
        try:
            if write == "append":
                db.append([(1, b"waits")])
            else:
                db.transaction().abort()
        except BaseException as e:    # noqa: BLE001 -- the test looks at it
            got.append(e)
    t = threading.Thread(target=waiter)
    t.start()
    if write == "append":    # the group's leader waits for the lock
        deadline = time.monotonic() + 10
        while pydb._pydb._testing.group_state(db) != (0, 1):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    else:                    # (no hook says so: 0.3 s is ample)
        time.sleep(0.3)
    t0 = time.monotonic()
    db.close()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 5
    assert len(got) == 1 and isinstance(got[0], pydb.ClosedError), got
    assert "the database is being closed" in str(got[0]) or write == "transaction"
    if p is not None:
        p.stdin.write("\n")
        p.stdin.close()
        assert p.wait(10) == 0
    with pydb.open(base) as db:                       # nothing of this handle's
        assert [r.raw(1) for r in db] == [[b"a"]] + ([[b"child"]] if p else [])


class _Signalled(Exception):
    pass


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("write", ["append", "transaction", "collect"])
def test_a_signal_ends_a_wait_for_the_writer_lock(tmp_path, write):
    """A signal's Python handler runs while a write or a collection waits
    for the lock another process holds -- the wait is made in slices of
    0.5 s (lock_wait, _pydb_module.c) -- and its exception ends the wait:
    before, the handler (Ctrl-C's KeyboardInterrupt, a service's SIGTERM)
    ran only when the whole lock_timeout (a collection: its timeout) had
    passed (found by a review)."""
    base = tmp_path / "db"
    with pydb.create(base, gc="none") as db:        # no collector of its own
        db.append([(1, b"a")])
        db.update(1, [(1, b"b")])                    # garbage: a back version
    p = _lock_holder(base, None)

    def handler(signum, frame):
        raise _Signalled()
    old = signal.signal(signal.SIGUSR1, handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        with pydb.open(base, readonly=False, lock_timeout=30) as db:
            t0 = time.monotonic()
            timer.start()
            with pytest.raises(_Signalled):
                if write == "append":
                    db.append([(1, b"x")])
                elif write == "transaction":
                    db.transaction()
                else:
                    db.collect(timeout=30)
            assert time.monotonic() - t0 < 3
            with pytest.raises(pydb.LockTimeoutError) as e:   # the lock is still held
                if write == "collect":
                    db.collect(timeout=0.6)
                else:
                    db.transaction(timeout=0.6)
            assert ("the collection did not finish in the time given (waited 600 ms)"
                    if write == "collect" else
                    "holds the writer lock of this database (waited 600 ms)") in str(e.value)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, old)
        p.stdin.write("\n")
        p.stdin.close()
        p.wait(10)


@pytest.mark.sanitize_thread
def test_other_handle_sees_later_commits(tmp_path):
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        db.append([(1, b"a")])
    for io in ("mmap", "pread", "direct"):
        try:
            reader = pydb.open(base, io=io)
        except pydb.UnsupportedError:
            continue                                   # O_DIRECT refused here
        with pydb.open(base, readonly=False, sync=False) as w:
            big = [(2, b"z" * 5000)] * 3              # grow the files under the mapping
            mfns = [w.append(big) for _ in range(300)]
            w.update(1, [(1, b"a2")])
        assert reader[mfns[-1]].raw(2) == [b"z" * 5000] * 3
        assert reader[1].raw(1) == [b"a2"]
        assert len(reader) == reader.max_mfn == mfns[-1]
        assert sum(1 for _ in reader) == mfns[-1]
        reader.close()


@pytest.mark.sanitize_address
def test_recovery_replays_complete_log_and_drops_torn(tmp_path):
    """A log left by a writer that died after the commit point is replayed
    on open; a torn one is dropped; either way the ISIS files alone are
    then consistent (no .wal needed by WinISIS/CISIS)."""
    base = tmp_path / "db"
    with pydb.create(base, sync=False) as db:
        for i in range(1, 51):
            db.append(sample(i))
    good_mst = open(f"{base}.mst", "rb").read()
    good_xrf = open(f"{base}.xrf", "rb").read()
    # Capture a complete log: fail the first write to the .mst after it.
    with pydb.open(base, readonly=False) as db:
        # the frame, zeros after it to 64 KiB (csrc/wal.h), the log's
        # fdatasync, then the .mst's pwrite fails
        pydb._pydb._testing.fail_io(4, 5)
        try:
            with pytest.raises(pydb.DiskError):
                with db.transaction() as tx:
                    tx.update(3, [(1, b"recovered")])
                    tx.append([(1, b"new one")])
            assert pydb._pydb._testing.io_fired() == "pwrite"
        finally:
            pydb._pydb._testing.fail_io(0)
        # closed before its next transaction, which would replay the log
    grown = open(f"{base}.wal", "rb").read()
    wal = grown[:40 + struct.unpack_from("<Q", grown, 16)[0] + 16]   # the frame
    assert wal[:8] == b"PYDBWAL1" and len(wal) > 100
    assert len(grown) == 65536 and not grown[len(wal):].strip(b"\0")
    assert open(f"{base}.mst", "rb").read() == good_mst  # nothing applied
    with pydb.open(base) as db:                          # read-only open recovers
        assert db[3].raw(1) == [b"recovered"] and db[51].raw(1) == [b"new one"]
    assert os.path.getsize(f"{base}.wal") == 0
    check_files(base, "isis-packed", 0, 51)
    recovered = open(f"{base}.mst", "rb").read(), open(f"{base}.xrf", "rb").read()
    # A torn log (every proper prefix, at the file's end or followed by
    # a grown log's zeros) is dropped and changes nothing.
    for cut in sorted({1, 8, 39, 40, 100, len(wal) // 2, len(wal) - 17, len(wal) - 1}):
        open(f"{base}.wal", "wb").write(wal[:cut] + bytes(cut % 2 * (65536 - cut)))
        with pydb.open(base, readonly=False) as db:
            assert db[3].raw(1) == [b"recovered"]
        assert (open(f"{base}.mst", "rb").read(), open(f"{base}.xrf", "rb").read()) == recovered
        assert os.path.getsize(f"{base}.wal") == 0
    # A flipped byte in the body fails the checksum: dropped.
    bad = bytearray(wal)
    bad[len(bad) // 2] ^= 0xFF
    open(f"{base}.mst", "wb").write(good_mst)
    open(f"{base}.xrf", "wb").write(good_xrf)
    open(f"{base}.wal", "wb").write(bytes(bad))
    with pydb.open(base, readonly=False) as db:
        assert db.max_mfn == 50 and raw_fields(db[3]) == sample(3)


def test_sync_commit_leaves_only_the_isis_files_an_empty_log_and_the_header(tmp_path):
    base = tmp_path / "db"
    with pydb.create(base, sync=True) as db:
        assert db.sync and not db.readonly
        db.append([(1, b"x")])
        db.update(1, [(1, b"y")])
    # the commit header <base>.shm: a fixed-size mapped file (csrc/shm.h)
    assert sorted(os.listdir(tmp_path)) == ["db.mst", "db.shm", "db.wal", "db.xrf"]
    assert os.path.getsize(base.with_suffix(".wal")) == 0
    assert os.path.getsize(base.with_suffix(".shm")) == 4096 + 960 * 64


# ---------------------------------------------------------------- real data

def _sources_counts():
    """act/ldel/pdel and layout per master file, from SOURCES.md."""
    out = {}
    src = DATA / "SOURCES.md"
    if not src.is_file():
        return out
    for line in src.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `([^`]+\.mst)` \| (\d+) \| ([a-z-]+) \| (\d+) \| (\d+) \| (\d+) \| "
                     r"(\d+)/(\d+)/(\d+) \|", line, re.I)
        if m:
            out[m.group(1)] = dict(layout=m.group(3), mstxl=int(m.group(4)),
                                   nxt=int(m.group(5)), act=int(m.group(7)),
                                   ldel=int(m.group(8)), pdel=int(m.group(9)))
    return out


SOURCES = _sources_counts()
REAL = all_master_files()


@pytest.mark.parametrize("mst", REAL, ids=[str(p.relative_to(DATA)) for p in REAL])
def test_every_real_database_updated(tmp_path, isis_data, mst):
    rel = str(mst.relative_to(DATA))
    facts = SOURCES.get(rel)
    xrf = [p for p in mst.parent.iterdir() if p.stem == mst.stem and p.suffix.lower() == ".xrf"]
    # copy the pair (keeping the case of the names) into tmp; CISIS's
    # CDS.std.mst has no XRF: made again from the master file
    shutil.copy2(mst, tmp_path / mst.name)
    if xrf:
        shutil.copy2(xrf[0], tmp_path / xrf[0].name)
    else:
        pydb.rebuild_xrf(tmp_path / mst.name)
    base = tmp_path / mst.stem
    try:
        with pydb.open(base) as db:
            before = {m: db[m] for m in db.mfns(deleted=True)}
    except pydb.CorruptionError:
        pytest.skip("damaged sample (SOURCES.md lists its faults); not written to")
    if facts is None:   # SOURCES.md gives no counts: take them from the reader
        with pydb.open(base) as db:
            c = db.counts()
            facts = dict(layout=db.layout, mstxl=db.info()["mstxl"], nxt=db.max_mfn + 1,
                         act=c["active"], ldel=c["logically_deleted"],
                         pdel=c["physically_deleted"])
    if not before:   # an empty database (SOURCES.md: layout "empty")
        assert facts["nxt"] == 1
        with pydb.open(base, readonly=False, sync=False, encoding="latin-1") as db:
            assert db.append([(1, b"first")]) == 1
            with db.transaction() as tx:
                assert tx.append([(1, b"second")]) == 2
                tx.update(1, [(1, b"first v2")])
                tx.delete(2)
        with pydb.open(base) as db:
            assert db.layout == "isis-packed" and db.max_mfn == 2
            assert [(r.mfn, r.deleted, raw_fields(r)) for r in db.records(deleted=True)] == \
                [(1, False, [(1, b"first v2")]), (2, True, [(1, b"second")])]
        return
    with pydb.open(base) as db:
        assert db.layout == facts["layout"] and db.info()["mstxl"] == facts["mstxl"]
        assert db.max_mfn == facts["nxt"] - 1
        c = db.counts()
        assert (c["active"], c["logically_deleted"], c["physically_deleted"]) == \
            (facts["act"], facts["ldel"], facts["pdel"])
    expected = {m: (r.deleted, raw_fields(r)) for m, r in before.items()}
    active = [m for m, (d, _) in expected.items() if not d]
    deleted = [m for m, (d, _) in expected.items() if d]
    appended = [(1, b"appended"), (2, "\u00fcber".encode("utf-8"))]
    a = active[0]
    b = active[len(active) // 2] if len(active) > 1 else facts["nxt"]  # else: the new one
    changed = expected[a][1] + [(999, b"changed by pydb \xe9")]
    # gc="none": the collector would compact away the version chain read
    # below; bytes are written, so any codec (named: no sampling, no warning)
    with pydb.open(base, readonly=False, sync=False, gc="none", encoding="latin-1") as db:
        with db.transaction() as tx:
            new = tx.append(appended)
            tx.update(a, changed)
            tx.delete(b)
        assert new == facts["nxt"]
        db.undelete(b)
        db.delete(a)
        if deleted:
            db.undelete(deleted[0])
    expected[a] = (True, changed)
    expected[new] = (False, appended)
    orig_b = (raw_fields(before[b]), before[b].status) if b in before else (appended, 0)
    if deleted:
        expected[deleted[0]] = (False, expected[deleted[0]][1])
    for _attempt in range(2):                        # reopened twice: stable
        with pydb.open(base) as db:
            assert db.layout == facts["layout"]
            assert db.max_mfn == facts["nxt"]
            c = db.counts()
            undel = 1 if deleted else 0
            assert (c["active"], c["logically_deleted"], c["physically_deleted"]) == \
                (facts["act"] - 1 + 1 + undel, facts["ldel"] + 1 - undel, facts["pdel"])
            for m, (d, fields) in expected.items():
                r = db[m]
                assert (r.deleted, raw_fields(r)) == (d, fields), m
            vs = chain(db, a, 3)
            assert [raw_fields(v) for v in vs] == [changed, changed, raw_fields(before[a])]
            assert [v.status for v in vs] == [1, 0, before[a].status]
            assert vs[2].offset == before[a].offset
            vs = chain(db, b, 3)
            assert [raw_fields(v) for v in vs] == [orig_b[0]] * 3
            assert [v.status for v in vs] == [0, 1, orig_b[1]]
    assert os.path.getsize(tmp_path / f"{mst.stem}.{'WAL' if mst.suffix == '.MST' else 'wal'}") == 0


def chain(db, mfn, n):
    """The current version of `mfn` and up to n-1 back versions."""
    out = [db[mfn]]
    while len(out) < n and out[-1].back_offset is not None:
        assert out[-1].back_offset < out[-1].offset
        out.append(db._read_at(mfn, out[-1].back_offset))
    return out


# ------------------------------------------------------------------ threads

@pytest.mark.sanitize_address
@pytest.mark.sanitize_thread
def test_readers_see_whole_records_while_writer_commits(tmp_path):
    """8 reader threads read while a writer commits (updates that change a
    record's size and contents, appends): every record read is complete and
    self-consistent, and never older than a commit that returned."""
    base = tmp_path / "db"

    def rec(mfn, gen):
        body = f"{mfn}:{gen}:".encode()
        return [(1, body * (1 + (mfn * 7 + gen) % 40)), (2, b"%d" % gen), (3, body)]

    def valid(r):
        gen = int(r.raw(2)[0])
        return raw_fields(r) == rec(r.mfn, gen), gen

    with pydb.create(base, sync=False) as db:
        with db.transaction() as tx:
            for m in range(1, 301):
                tx.append(rec(m, 0))
    stop = threading.Event()
    errors: list = []
    committed = {"gen": 0, "max": 300}
    counts = [0] * 8
    with pydb.open(base, readonly=False, sync=False) as db:
        def reader(k):
            import random
            rnd = random.Random(k)
            try:
                while not stop.is_set():
                    floor = committed["gen"]
                    top = committed["max"]
                    m = rnd.randint(1, top)
                    r = db[m]
                    ok, gen = valid(r)
                    if not ok or (m <= 300 and gen < floor):
                        errors.append((m, gen, floor))
                    if rnd.random() < 0.05:
                        batch = db.read_many(range(1, 31))
                        if not all(valid(x)[0] for x in batch):
                            errors.append("batch")
                    counts[k] += 1
            except Exception as e:                   # pragma: no cover
                errors.append(repr(e))

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for gen in range(1, 41):
            with db.transaction() as tx:
                for m in range(1, 301):
                    tx.update(m, rec(m, gen))
                for j in range(3):
                    assert tx.append(rec(db.max_mfn + 1 + j, gen)) == db.max_mfn + 1 + j
            committed["gen"] = gen
            committed["max"] = db.max_mfn
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert all(c > 0 for c in counts)


# ------------------------------------------------- commit hook and whole files

@pytest.mark.sanitize_address
def test_commit_hook_and_whole_file_in_the_log(tmp_path):
    """pydb_set_commit_hook / pydb_txn_put_file through a test hook: the
    hook sees each change, its file is replaced atomically with the commit,
    an aborted commit leaves nothing, and a commit that died after its log
    was durable gets its file from recovery."""
    base = tmp_path / "db"
    side = tmp_path / "side.txt"
    # the default collector runs meanwhile: its compaction step, waiting
    # for the writer lock while the commit below failed, may take the
    # lock afterwards and replay the log (as the handle's next
    # transaction would: the failure was a write, not an fsync), so the
    # file may be written before the reopen
    with pydb.create(base, sync=True) as db:
        pydb._pydb._testing.commit_hook(db, str(side))
        with db.transaction() as tx:
            tx.append([(1, b"a"), (2, b"b")])
            tx.append([(1, b"c")])
            tx.update(1, [(1, b"a2")])
            tx.delete(2)
        assert side.read_text() == "1 -1 2 0\n2 -1 1 0\n1 2 1 0\n2 1 -1 1\n"
        assert pydb._pydb._testing.hook_counts() == (1, 1, 0)
        # a failed log write (EIO: ENOSPC there is cured by a checkpoint,
        # csrc/txn.c log_cannot_grow): hook aborted, file unchanged
        pydb._pydb._testing.fail_io(1, 5)
        try:
            with pytest.raises(pydb.DiskError):
                db.update(1, [(1, b"never")])
        finally:
            pydb._pydb._testing.fail_io(0)
        assert pydb._pydb._testing.hook_counts() == (2, 1, 1)
        assert side.read_text().startswith("1 -1 2 0\n") and db[1].raw(1) == [b"a2"]
        # log durable, then the .mst write fails: recovery writes the file
        pydb._pydb._testing.fail_io(3, 5)
        try:
            with pytest.raises(pydb.DiskError):
                db.undelete(2)
        finally:
            pydb._pydb._testing.fail_io(0)
    assert side.read_text().startswith("1 -1 2 0\n") or side.read_text() == "2 1 1 0\n"
    with pydb.open(base, readonly=False) as db:
        assert not db[2].deleted
    assert side.read_text() == "2 1 1 0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "db.mst", "db.shm", "db.wal", "db.xrf", "side.txt"]


def test_writer_threads_take_turns(tmp_path):
    """Several threads writing through one Database wait for each other
    (the per-handle writer mutex); a thread that opens a second
    transaction while it holds one fails at once instead of waiting."""
    with pydb.create(tmp_path / "db", sync=False, lock_timeout=30) as db:
        errors = []
        holding = threading.Event()

        def holder():
            with db.transaction() as tx:
                holding.set()
                tx.append([(1, b"holder")])
                with pytest.raises(pydb.LockTimeoutError, match="this thread"):
                    db.transaction()
                time.sleep(0.3)

        def appender(k):
            try:
                holding.wait()
                for i in range(50):
                    db.append([(1, b"t%d-%d" % (k, i))])
            except Exception as e:                    # pragma: no cover
                errors.append(repr(e))

        threads = [threading.Thread(target=holder)] + \
                  [threading.Thread(target=appender, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert db.max_mfn == 201 and db[1].raw(1) == [b"holder"]
        values = sorted(db[m].raw(1)[0] for m in range(2, 202))
        assert values == sorted(b"t%d-%d" % (k, i) for k in range(4) for i in range(50))


# ------------------------------------- bytes past the committed end (check_tail)

def _set_end(base, end: int) -> None:
    """Store `end` as the control record's NXTMFB/NXTMFP."""
    with open(f"{base}.mst", "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<iH", end // 512 + 1, end % 512 + 1))


def _shm_gone(base) -> None:
    if os.path.exists(f"{base}.shm"):
        os.unlink(f"{base}.shm")


def test_an_end_inside_the_last_record_is_never_written_over(tmp_path):
    """A master file whose stored end falls inside its last record (as
    pyisis writes some): the next transaction starts after the end of the
    file, and the record keeps its bytes."""
    base = tmp_path / "db"
    with pydb.create(base, "isis-aligned", sync=False) as db:
        for i in range(1, 4):
            db.append(sample(i))
        last = db.versions(3)[0]
    mst, _, _, nxtmfb, nxtmfp, _ = read_ctl(base)
    end = (nxtmfb - 1) * 512 + nxtmfp - 1
    _set_end(base, end - 10)                       # inside record 3
    _shm_gone(base)
    size = len(mst)
    with pydb.open(base, readonly=False) as db:
        assert db.append(sample(4)) == 4
        assert raw_fields(db[3]) == raw_fields(last) == sample(3)
        assert raw_fields(db[4]) == sample(4)
    assert os.path.getsize(f"{base}.mst") > size    # appended after the file's end


@pytest.mark.parametrize("end", ["lags", "kept"])
@pytest.mark.parametrize("write", ["append", "transaction", "update"])
def test_a_control_record_that_lags_the_xrf_stops_writes(tmp_path, end, write):
    """Another program's writer died after it wrote MFNs 10..20 and their
    XRF entries, before it rewrote the control record (NXTMFN 10; the end
    NXTMFB/NXTMFP at MFN 10's start, or kept at the true end).  A write
    that would take a new MFN or write past the cut end is refused with
    CorruptionError naming the first such entry, and nothing is written
    (an update where the end is kept goes after the true end).  Before,
    the bytes past the end were cut off (the records of MFNs 10..20
    lost) and each append took over the next entry (found by a review)."""
    base = tmp_path / "db"
    with pydb.create(base, "isis-aligned", sync=False) as db:
        with db.transaction() as t:
            for i in range(1, 21):
                t.append(sample(i))
        off10 = db[10].offset
    with open(f"{base}.mst", "r+b") as f:
        f.seek(4)
        f.write(struct.pack("<i", 10))
    if end == "lags":
        _set_end(base, off10)
    _shm_gone(base)
    mst, xrf = open(f"{base}.mst", "rb").read(), open(f"{base}.xrf", "rb").read()
    if (write, end) == ("update", "kept"):
        # no new MFN and nothing past the end to cut: the update is
        # written after the true end, and MFNs 10..20 keep everything
        with pydb.open(base, readonly=False) as db:
            db.update(3, sample(21))
        with open(f"{base}.mst", "r+b") as f:
            f.seek(4)
            f.write(struct.pack("<i", 21))
        _shm_gone(base)
        with pydb.open(base) as db:
            assert raw_fields(db[3]) == sample(21)
            assert [raw_fields(db[m]) for m in range(10, 21)] == [
                sample(m) for m in range(10, 21)]
        return
    with pydb.open(base, readonly=False) as db:
        assert len(db) == 9 and raw_fields(db[9]) == sample(9)   # reads go on
        with pytest.raises(pydb.CorruptionError) as e:
            if write == "append":
                db.append(sample(21))
            elif write == "update":
                db.update(3, sample(21))
            else:
                with db.transaction() as t:
                    t.append(sample(21))
        assert (e.value.filename, e.value.offset) == (f"{base}.xrf", 4 + 9 * 4)
        assert "the XRF has an entry for MFN 10 (value " in str(e.value)
        assert "at or past the control record's NXTMFN 10: the control record lags" in str(e.value)
    assert open(f"{base}.mst", "rb").read() == mst
    assert open(f"{base}.xrf", "rb").read() == xrf


@pytest.mark.parametrize("junk", [300, 3 << 20])
@pytest.mark.parametrize("when", ["open", "begin"])
def test_bytes_another_program_left_past_the_end_are_never_written_over(
        tmp_path, junk, when):
    """Bytes past the committed end that no pydb commit marked as its own
    (shm.h, the direct-commit mark) -- another program's, as WinISIS
    leaves older versions there -- are left as they are: a writer's open
    changes no byte of the master file, and a transaction (also one that
    begins after the bytes appeared while the writer was open) writes
    after the end of the file.  Each later transaction writes at the new
    end: the file grows by the records only.  (Before, such bytes were
    cleared: taken for a pydb commit killed before its commit point.)"""
    base = tmp_path / "db"
    with pydb.create(base, "isis-aligned", sync=False) as db:
        for i in range(1, 4):
            db.append(sample(i))
    mst, _, _, nxtmfb, nxtmfp, _ = read_ctl(base)
    end = (nxtmfb - 1) * 512 + nxtmfp - 1
    spoilt = bytes(range(1, 256)) * (junk // 255 + 1)

    def spoil():
        with open(f"{base}.mst", "r+b") as f:
            f.seek(end)
            f.write(spoilt)

    if when == "open":
        spoil()
        before = open(f"{base}.mst", "rb").read()
    with pydb.open(base, readonly=False) as db:
        if when == "open":
            assert open(f"{base}.mst", "rb").read() == before
        else:
            spoil()
        size = os.path.getsize(f"{base}.mst")
        assert db.append(sample(4)) == 4
        assert db.append(sample(5)) == 5
        assert [raw_fields(r) for r in db] == [sample(i) for i in range(1, 6)]
        assert size <= db.versions(4)[0].offset < size + 512   # after the file, placed
        assert db.check().ok
    mst = open(f"{base}.mst", "rb").read()
    assert mst[end:end + len(spoilt)] == spoilt
    check_files(base, "isis-aligned", 0, 5)
    _, _, _, nxtmfb, nxtmfp, _ = read_ctl(base)
    assert len(mst) == -(-((nxtmfb - 1) * 512 + nxtmfp - 1) // 512) * 512


def test_a_stale_direct_commit_mark_cuts_no_bytes_of_another_program(isis_data, tmp_path):
    """The commit header's direct-commit mark (csrc/shm.h, offset 520)
    names where a killed direct commit's records start and the state it
    started from (end of records, NXTMFN, master file generation).  A
    mark left from another state -- here one naming byte 64,562, inside
    the WinISIS sample's 5,600 bytes past its end, for another end and
    NXTMFN -- is stale: a writer's open and an append cut none of those
    bytes, and the mark is cleared.  (A review: the mark named only the
    byte and the generation; a mark left by a logged commit cut 4,046
    bytes of WinISIS versions from files copied over the database.)"""
    src = isis_data / "bireme__isis2json" / "fixtures" / "cds" / "winisis-cds"
    for ext in ("mst", "xrf"):
        shutil.copy(f"{src}.{ext}", tmp_path / f"cds.{ext}")
    base = tmp_path / "cds"
    mst = (tmp_path / "cds.mst").read_bytes()
    pydb.open(base, readonly=False, encoding="cp850").close()     # makes the header
    with open(f"{base}.shm", "r+b") as f:
        f.seek(520)
        f.write(struct.pack("<qQqi", 64562 + 1, 0, 64562, 200))
    pydb.open(base, readonly=False, encoding="cp850").close()
    assert (tmp_path / "cds.mst").read_bytes() == mst
    with open(f"{base}.shm", "rb") as f:
        f.seek(520)
        assert f.read(8) == bytes(8)                              # cleared
    with pydb.open(base, readonly=False, encoding="cp850", gc="none") as db:
        db.append(sample(1))
    assert (tmp_path / "cds.mst").read_bytes()[64:68608] == mst[64:]


def test_a_winisis_master_file_opened_for_writing_keeps_its_bytes(isis_data, tmp_path):
    """isis2json's WinISIS cds sample holds 18 versions (5,600 bytes)
    past its control record's end, among them the only copies of MFN 23's
    older versions and of the physically deleted MFNs 152-154: a writer's
    open, with or without the collector, changes no byte of the master
    file or the XRF, and an append goes after the end of the file, the
    150 records reading as before."""
    src = isis_data / "bireme__isis2json" / "fixtures" / "cds" / "winisis-cds"
    for ext in ("mst", "xrf"):
        shutil.copy(f"{src}.{ext}", tmp_path / f"cds.{ext}")
    base = tmp_path / "cds"
    files = {ext: (tmp_path / f"cds.{ext}").read_bytes() for ext in ("mst", "xrf")}
    assert len(files["mst"]) == 68608
    with pydb.open(base) as db:
        want = [(r.mfn, raw_fields(r)) for r in db]
    for gc in ("none", "combined"):
        pydb.open(base, readonly=False, gc=gc, encoding="cp850").close()
        for ext in ("mst", "xrf"):
            assert (tmp_path / f"cds.{ext}").read_bytes() == files[ext], (gc, ext)
    with pydb.open(base, readonly=False, gc="none", encoding="cp850") as db:
        mfn = db.append(sample(1))
        assert 68608 <= db.versions(mfn)[0].offset < 68608 + 512
        assert [(r.mfn, raw_fields(r)) for r in db if r.mfn != mfn] == want
    mst = (tmp_path / "cds.mst").read_bytes()
    assert mst[:68608][64:] == files["mst"][64:]     # all but the control record
