"""I/O error injection (docs/reliability.md §2.3 b1): a fixed write script runs
once per write-side file operation it performs (pwrite, fdatasync/fsync,
ftruncate, rename, unlink, exchange: counted through the core's vfs table),
and the n-th operation is made to fail, for every n, with ENOSPC and with EIO, and
as a short write followed by ENOSPC.  After each run:

- the failure surfaced as pydb.DiskError (an OSError) with that errno and a
  file name -- except a failure to empty the log after a commit was
  applied, which is not an error (the commit is durable; the stale log is
  replayed harmlessly and emptied by the next transaction);
- after a failed fsync the handle refuses writes (ReadOnlyError);
- reopened (recovery), the database holds every transaction acknowledged
  before the failure, exactly, and the failed one entirely or not at all;
  the ISIS files alone are consistent; it accepts new writes.
"""

from __future__ import annotations

import errno
import os
import shutil
import warnings

import pytest

import pydb
from pydb import _pydb

from writer_model import Oracle, check_files, content, open_db

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = pytest.mark.sanitize_address


SCRIPT = [
    [("A", 3000, 5)], [("A", 3001, 700)],
    [("A", 3002, 10), ("U", 1, 3002, 300), ("D", 2)],
    [("U", 3, 3003, 3000)],
    [("X", 2), ("D", 4)],
    [("A", 3005, 40)] * 40,            # crosses an XRF block boundary
    [("U", 5, 3006, 0), ("U", 5, 3007, 20)],
]


def run_script(db, oracle, results):
    """Run SCRIPT; `oracle` gets each acknowledged transaction."""
    for txn in SCRIPT:
        with db.transaction() as tx:
            ops = []
            for op in txn:
                if op[0] == "A":
                    m = tx.append(content(oracle.max_mfn + 1 + len(ops), op[1], op[2]))
                    ops.append(("A", m, op[1], op[2]))
                elif op[0] == "U":
                    tx.update(op[1], content(op[1], op[2], op[3]))
                    ops.append(op)
                elif op[0] == "D":
                    tx.delete(op[1])
                    ops.append(op)
                else:
                    tx.undelete(op[1])
                    ops.append(op)
            results["pending"] = ops
        oracle.apply(ops)
        results["pending"] = None


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    base = d / "db"
    with pydb.create(base, "isis-aligned", sync=False) as db:
        with db.transaction() as tx:
            for m in range(1, 121):
                tx.append(content(m, m, m * 7 % 500))
    oracle = Oracle({m: (False, m, m * 7 % 500) for m in range(1, 121)})
    return base, oracle


def count_ops(tmp_path, pristine):
    base0, oracle0 = pristine
    for ext in (".mst", ".xrf", ".wal"):
        shutil.copy(f"{base0}{ext}", f"{tmp_path}/c{ext}")
    with open_db(tmp_path / "c") as db:
        _pydb._testing.fail_io(-1)
        try:
            run_script(db, oracle0.copy(), {})
            n = _pydb._testing.io_count()
        finally:
            _pydb._testing.fail_io(0)
    return n


MODES = [("ENOSPC", errno.ENOSPC, False), ("EIO", errno.EIO, False),
         ("short+ENOSPC", errno.ENOSPC, True)]


@pytest.mark.parametrize("mode", MODES, ids=[m[0] for m in MODES])
def test_fail_every_operation(tmp_path, pristine, mode):
    name, eno, short = mode
    base0, oracle0 = pristine
    total = count_ops(tmp_path, pristine)
    assert total >= 4 * 8       # per commit: the log, its fdatasync, .mst, .xrf, control
    outcomes = {}
    outcomes_committed: dict[bool | None, int] = {}
    for n in range(1, total + 1):
        d = tmp_path / f"n{n}"
        d.mkdir()
        for ext in (".mst", ".xrf", ".wal"):
            shutil.copy(f"{base0}{ext}", d / f"db{ext}")
        base = d / "db"
        oracle = oracle0.copy()
        results = {"pending": None}
        db = open_db(base)
        raised = None
        _pydb._testing.fail_io(n, eno, short)
        try:
            run_script(db, oracle, results)
        except pydb.Error as e:
            raised = e
        finally:
            fired = _pydb._testing.io_fired()
            _pydb._testing.fail_io(0)
        assert fired, f"n={n}: the fault was not reached"
        kind = fired.split()[0]
        if raised is None:
            # only emptying the log after an applied commit, and the zeros
            # a kept frame grows the log by (csrc/wal.h: best effort), may
            # fail silently; the oracle below checks the commit went in
            assert kind in ("ftruncate", "pwrite"), (n, fired)
            key = f"{kind} (ignored)"
            outcomes[key] = outcomes.get(key, 0) + 1
        else:
            assert isinstance(raised, pydb.DiskError) and isinstance(raised, OSError), \
                (n, fired, repr(raised))
            assert raised.errno == eno, (n, fired, raised)
            assert raised.filename and raised.filename.startswith(str(d)), raised.filename
            assert results["pending"] is not None        # it failed inside a commit
            if kind in ("fsync", "fdatasync"):
                with pytest.raises(pydb.ReadOnlyError):
                    db.append([(1, b"refused")])
            outcomes[kind] = outcomes.get(kind, 0) + 1
        db.close()
        # reopen: recovery; acknowledged data intact; failed txn all or nothing
        present = False
        with pydb.open(base) as ro:
            ok, why = oracle.matches(ro)
            if not ok:
                assert results["pending"] is not None, (n, fired, why)
                new = oracle.copy()
                new.apply(results["pending"])
                ok2, why2 = new.matches(ro)
                assert ok2, (n, fired, why, why2)
                oracle = new
                present = True
        if raised is not None:
            # the exception told the truth about the failed transaction:
            # True = it is there after reopening, False = it is not, None
            # only when the log's own fsync failed (it may be either)
            if raised.committed is None:
                assert kind in ("fsync", "fdatasync"), (n, fired, present)
            else:
                assert raised.committed is present, (n, fired, raised.committed, present)
            if raised.committed:
                assert "IS committed" in str(raised), str(raised)
            elif raised.committed is None:
                assert "may or may not be committed" in str(raised), str(raised)
            outcomes_committed[raised.committed] = outcomes_committed.get(raised.committed,
                                                                          0) + 1
        check_files(base)
        with open_db(base) as db:                 # usable again
            m = db.append(content(oracle.max_mfn + 1, 9999, 3))
            oracle.apply([("A", m, 9999, 3)])
        with pydb.open(base) as ro:
            assert oracle.matches(ro)[0]
        shutil.rmtree(d)
    print(f"fault sweep {name}: {total} operations failed one by one: {outcomes}; "
          f"the exceptions' committed: {outcomes_committed}")
    assert sum(outcomes.values()) == total
    # both outcomes occur: failures before the log was durable and after
    assert outcomes_committed.get(True) and outcomes_committed.get(False), outcomes_committed


@pytest.mark.parametrize("eno", [errno.EIO, errno.ENOSPC])
def test_fail_every_operation_of_recovery(tmp_path, pristine, eno):
    """A complete log left behind (the .mst write failed after the log was
    durable); each write/fsync/truncate of the recovery that replays it is
    failed in turn: opening raises DiskError with the errno, and a later
    open still recovers everything."""
    base0, oracle0 = pristine
    d = tmp_path / "left"
    d.mkdir()
    for ext in (".mst", ".xrf", ".wal"):
        shutil.copy(f"{base0}{ext}", d / f"db{ext}")
    oracle = oracle0.copy()
    with open_db(d / "db") as db:
        _pydb._testing.fail_io(3, errno.EIO)      # log pwrite, log fdatasync, .mst pwrite
        try:
            with pytest.raises(pydb.DiskError):
                with db.transaction() as tx:
                    for k in range(130):         # crosses an XRF block boundary
                        tx.append(content(121 + k, 777, k))
                    tx.update(1, content(1, 778, 50))
                    tx.delete(2)
        finally:
            _pydb._testing.fail_io(0)
    oracle.apply([("A", 121 + k, 777, k) for k in range(130)] +
                 [("U", 1, 778, 50), ("D", 2)])
    saved = {ext: (d / f"db{ext}").read_bytes() for ext in (".mst", ".xrf", ".wal")}
    assert saved[".wal"][:8] == b"PYDBWAL1"
    # count the operations of one recovery
    _pydb._testing.fail_io(-1)
    try:
        open_db(d / "db").close()
        total = _pydb._testing.io_count()
    finally:
        _pydb._testing.fail_io(0)
    assert total >= 5                              # writes, 2 fdatasync, truncate, fdatasync
    for n in range(1, total + 1):
        for ext, data in saved.items():
            (d / f"db{ext}").write_bytes(data)
        _pydb._testing.fail_io(n, eno)
        try:
            with pytest.raises(pydb.DiskError) as e:
                open_db(d / "db").close()
        finally:
            _pydb._testing.fail_io(0)
        assert e.value.errno == eno and e.value.filename.startswith(str(d))
        with pydb.open(d / "db", readonly=False) as db:   # recovers now
            assert oracle.matches(db)[0]
        check_files(d / "db")


def _copy_db(src, dst):
    """The files of database `src` (and its native index) as `dst`."""
    for ext in (".mst", ".xrf", ".wal"):
        shutil.copy(f"{src}{ext}", f"{dst}{ext}")
    if os.path.isdir(f"{src}.pdx"):
        shutil.copytree(f"{src}.pdx", f"{dst}.pdx")


def _append_operations(base0, scratch, fields) -> int:
    """Write-side operations of one append of `fields` to a copy of base0."""
    _copy_db(base0, scratch)
    with open_db(scratch) as db:
        _pydb._testing.fail_io(-1)
        try:
            db.append(fields)
            return _pydb._testing.io_count()
        finally:
            _pydb._testing.fail_io(0)


@pytest.mark.parametrize("sticky", [False, True], ids=["once", "sticky"])
@pytest.mark.parametrize("eno", [errno.ENOSPC, errno.EIO])
def test_append_failure_says_whether_committed(tmp_path, eno, sticky):
    """Issue 14, defect 3: ``Database.append`` raised DiskError (ENOSPC on
    the .mst after the log was durable) and the record was there after
    reopening, so a retrying application made a duplicate.  For every
    operation of one append: the exception's ``committed`` is True exactly
    when the record is there after reopening (None only for the log's
    fsync), and a retry made only when it is False leaves one copy.
    Sticky: every operation from the n-th on fails too (a disk that
    stays full), the clean-up after a failed write included.  The
    append's second operation writes the zeros its frame grows the empty
    log by (csrc/wal.h), which may fail silently: the commit stands.
    (A review found the commit reported failed and replayed later when
    the zeros and the truncation after them failed.)"""
    base0 = tmp_path / "p"
    with pydb.create(base0, "isis-aligned") as db:
        db.append([(1, b"first")])
    total = _append_operations(base0, tmp_path / "c", [(1, b"second")])
    seen = {}
    for n in range(1, total + 1):
        d = tmp_path / f"n{n}"
        d.mkdir()
        base = d / "db"
        _copy_db(base0, base)
        raised = None
        with open_db(base) as db:
            assert len(db) == 1
            _pydb._testing.fail_io(n, eno, False, sticky=sticky)
            try:
                db.append([(1, b"second")])
            except pydb.DiskError as e:
                raised = e
            finally:
                kind = (_pydb._testing.io_fired() or "").split(" ")[0]
                _pydb._testing.fail_io(0)
        with open_db(base) as db:
            present = len(db) == 2
            if raised is None:
                assert present and (kind == "ftruncate" or (kind, n) == ("pwrite", 2)), (n, kind)
                seen[kind] = seen.get(kind, 0) + 1
                continue
            if raised.committed is None:
                # (sticky: the zeros fail first, then the log's fdatasync)
                assert kind in ("fsync", "fdatasync") or (sticky and n == 2), (n, kind)
            else:
                assert raised.committed is present, (n, kind, raised)
            if raised.committed is False:
                db.append([(1, b"second")])          # the application's retry
            values = sorted(r.fields[0][1] for r in db)
            if raised.committed is not None:
                assert values == ["first", "second"], (n, kind, values)
        seen[raised.committed] = seen.get(raised.committed, 0) + 1
        shutil.rmtree(d)
    # the case (after the log) and the safe-to-retry case both
    # occur, and the zeros' failure, which changes nothing (sticky: the
    # log's fdatasync after it fails, and says so)
    assert seen.get(True) and seen.get(False), seen
    assert seen.get("pwrite") == (None if sticky else 1), seen


def test_readonly_open_on_a_full_disk(tmp_path):
    """Issue 14, defect 5: after a commit failed with ENOSPC once its log
    was durable, a read-only open replays the log, meets ENOSPC again, and
    failed.  Now it opens, reads the last applied commit, warns with
    PendingLogWarning, and says why in info(); with room again, the next
    open applies the logged transaction."""
    base = tmp_path / "db"
    with pydb.create(base, "isis-aligned") as db:
        db.append([(1, "first")])
    # the failure: the n-th operation of an append fails such that
    # the transaction is committed (durable in the log), not applied
    for n in range(1, 40):
        for ext in (".mst", ".xrf", ".wal"):
            shutil.copy(f"{base}{ext}", tmp_path / f"try{ext}")   # over the last try
        with open_db(tmp_path / "try") as db:
            _pydb._testing.fail_io(n, errno.ENOSPC, False)
            try:
                db.append([(1, "second")])
            except pydb.DiskError as e:
                committed = e.committed
            else:
                committed = False
            finally:
                _pydb._testing.fail_io(0)
        if committed is True:
            break
    assert committed is True, "no operation of an append failed after the log"
    full = tmp_path / "try"
    _pydb._testing.fail_io(1, errno.ENOSPC, False)      # the disk is still full
    try:
        with pytest.warns(pydb.PendingLogWarning, match="could not be applied") as w:
            ro = pydb.open(full)
    finally:
        _pydb._testing.fail_io(0)
    assert "No space left on device" in str(w[0].message)
    with ro:
        assert "No space left on device" in ro.info()["log_pending"]
        assert len(ro) == 1 and ro[1].fields[0][1] == "first"
        assert ro.check().ok
    # room again: a plain read-only open applies the log, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pydb.open(full) as ro:
            assert ro.info()["log_pending"] is None
            assert [r.fields[0][1] for r in ro] == ["first", "second"]


@pytest.mark.parametrize("indexed", [False, True], ids=["plain", "native-index"])
def test_handle_writes_again_once_the_disk_has_room(tmp_path, indexed):
    """Issue 14, defect 4: after ENOSPC on the master file (the commit
    durable in the log, not applied) the handle refused every write until
    it was reopened, even once space was freed.  Now its next transaction
    replays the log first: while the disk stays full that fails with the
    same DiskError (and reads show the last applied commit); once there is
    room the logged record appears and the handle writes on.  A failed
    fsync still makes it read-only until reopened."""
    base0 = tmp_path / "p"
    kw = {"fst": "1 0 v1"} if indexed else {}
    with pydb.create(base0, "isis-aligned", **kw) as db:
        db.append([(1, "FIRST")])
    total = _append_operations(base0, tmp_path / "c", [(1, "SECOND")])
    cases = {}
    for n in range(1, total + 1):
        d = tmp_path / f"n{n}"
        d.mkdir()
        _copy_db(base0, d / "db")
        with open_db(d / "db") as db:
            _pydb._testing.fail_io(n, errno.ENOSPC, False)
            try:
                db.append([(1, "SECOND")])
                raised = None
            except pydb.DiskError as e:
                raised = e
            finally:
                kind = (_pydb._testing.io_fired() or "").split(" ")[0]
                _pydb._testing.fail_io(0)
            if raised is None or raised.committed is not True:
                continue
            if kind in ("fsync", "fdatasync"):
                with pytest.raises(pydb.ReadOnlyError):
                    db.append([(1, "THIRD")])
                cases["read-only"] = cases.get("read-only", 0) + 1
                continue
            # the disk is still full: the replay fails the same way, and
            # reads show the last applied commit
            _pydb._testing.fail_io(1, errno.ENOSPC, False)
            try:
                with pytest.raises(pydb.DiskError) as ei:
                    db.append([(1, "THIRD")])
            finally:
                _pydb._testing.fail_io(0)
            assert ei.value.errno == errno.ENOSPC and ei.value.committed is False
            # (the master file part of the failed apply may be complete:
            # with a native index the MANIFEST is replaced after it)
            seen = [r.fields[0][1] for r in db]
            assert seen == ["FIRST"] or (indexed and seen == ["FIRST", "SECOND"]), \
                (n, kind, seen)
            # room again: the logged record, then the new one
            assert db.append([(1, "THIRD")]) == 3
            assert [r.fields[0][1] for r in db] == ["FIRST", "SECOND", "THIRD"]
            if indexed:
                assert list(db.search("SECOND")) == [2]
                assert list(db.search("THIRD")) == [3]
            cases["recovered"] = cases.get("recovered", 0) + 1
        with pydb.open(d / "db") as ro:
            assert [r.fields[0][1] for r in ro] == ["FIRST", "SECOND", "THIRD"]
            assert ro.check().ok
            if indexed:
                assert list(ro.search("SECOND")) == [2]
    assert cases.get("recovered"), cases
