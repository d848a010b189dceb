"""Commits without fsync (``sync=False``; csrc/txn.c, "Commits without fsync").

With ``sync=False`` a commit's frame stays in the log as with ``sync=True``
but is fdatasync'ed only when the commit writes in place a unit -- the
control record, an XRF block, a whole file such as the native index's
MANIFEST -- of which no frame this handle synced in the same log holds a
copy.  A power cut then loses recent commits but never leaves a damaged
database: the replay of the log's complete frames (at least those up to
the last fdatasync) writes every unit written in place since the last
checkpoint.

The tests count the fsyncs (``_testing.io_syncs``), and emulate power cuts
exactly: a forked writer commits and dies; the test knows from its reports
which frames were synced, and builds the disk a cut may leave -- the log
cut at any frame from the last synced one on, the units written in place
either kept or lost, the records of the commits since the checkpoint lost,
the header gone (a new boot) -- then opens it and asserts the state after
exactly the commits the cut log holds.  LazyFS cuts the power under a
running writer in tests/test_power_loss.py (``-m lazyfs``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal

import pytest
from test_checkpoint import _commit, _frames, _make, _wal

import pydb
from pydb import _pydb

from writer_model import check_files, content, create_indexed, index_agrees, open_db

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

T = _pydb._testing


def _synced(fn) -> int:
    """fsyncs + fdatasyncs made by fn() on this thread."""
    T.fail_io(-1)
    try:
        fn()
        return T.io_syncs()
    finally:
        T.fail_io(0)


def test_appends_sync_once_per_xrf_block(tmp_path):
    """The first commit after a checkpoint syncs its frame (the control
    record); then an append syncs only when it writes an XRF block no
    synced frame holds: MFN 128 and 255 start blocks 1 and 2 (127 entries
    each).  Updates of blocks held sync nothing; closing checkpoints (the
    .mst, the .xrf, the log emptied: three syncs)."""
    base = tmp_path / "db"
    with pydb.create(base, "isis-packed", sync=False, gc="none") as db:
        syncs = [_synced(lambda i=i: db.append([(1, b"x%d" % i)])) for i in range(300)]
        assert [m for m, n in enumerate(syncs, 1) if n] == [1, 128, 255]
        assert set(syncs) == {0, 1}
        assert _wal(base) > 0                   # the frames stay
        held = [_synced(lambda m=m: db.update(m, [(1, b"u")])) for m in (1, 200, 130, 300)]
        assert held == [0] * 4, held
        assert _synced(db.close) == 3
    assert _wal(base) == 0
    with open_db(base, sync=False, gc="none") as db:
        # a new log: the control record and each block once again
        got = [_synced(lambda m=m: db.update(m, [(1, b"v")])) for m in (200, 5, 6, 201, 260, 5)]
        assert got == [1, 1, 0, 0, 1, 0], got
        assert db.check().ok
    check_files(base)


def test_a_native_index_manifest_is_synced_once_per_log(tmp_path):
    """An indexed commit writes the MANIFEST in place: the first commit of
    a log syncs it with the control record, the next ones do not."""
    base = tmp_path / "db"
    with create_indexed(base, "isis-packed", sync=False, gc="none") as db:
        syncs = [_synced(lambda v=v: db.append(content(v, v, 10))) for v in range(1, 41)]
        assert syncs == [1] + [0] * 39, syncs
        assert len(db.search("END")) == 40
        index_agrees(db)
    with open_db(base, gc="none") as db:
        assert db.check().ok
        index_agrees(db)


def test_another_process_commits_keep_or_end_what_a_handle_knows(tmp_path):
    """A handle's memory of synced frames holds while other processes add
    frames to the same log (their first frame is the same), and ends when
    one of them empties the log (a checkpoint at its close)."""
    base = tmp_path / "db"
    _make(base, n=300)

    def other(close: bool) -> None:
        pid = os.fork()
        if pid == 0:
            try:
                db = open_db(base, sync=False, gc="none")
                db.update(250, [(1, b"other")])
                if close:
                    db.close()
                else:
                    os.kill(os.getpid(), signal.SIGKILL)
            finally:
                os._exit(3)
        os.waitpid(pid, 0)

    with open_db(base, sync=False, gc="none") as db:
        assert _synced(lambda: db.update(1, [(1, b"a")])) == 1
        assert _synced(lambda: db.update(2, [(1, b"b")])) == 0
        other(close=False)                   # its frame follows ours
        assert _wal(base) > 0
        assert _synced(lambda: db.update(3, [(1, b"c")])) == 0
        other(close=True)                    # it empties the log
        assert _wal(base) == 0
        assert _synced(lambda: db.update(4, [(1, b"d")])) == 1
        assert db[250].fields[0].raw == b"other"


def _txns(seed: int, n0: int) -> list:
    """40 random transactions of 1 to 3 changes over MFNs 1..n0 (XRF blocks
    0..3 of a 400-record database) and appends, as writer_model.Oracle
    takes them."""
    rnd = random.Random(seed)
    nxt, out = n0 + 1, []
    for k in range(40):
        txn = []
        for _ in range(rnd.randint(1, 3)):
            r = rnd.random()
            if r < 0.4:
                txn.append(("A", nxt, 100 + k, rnd.randint(1, 300)))
                nxt += 1
            elif r < 0.9:
                txn.append(("U", rnd.randint(1, n0), 100 + k, rnd.randint(1, 300)))
            else:
                txn.append(("D", rnd.randint(1, n0)))
        out.append(txn)
    return out


def _writer(base, txns, report) -> None:
    """A forked sync=False writer makes each transaction, writes for each
    (the log's frames' length after it, whether it synced) to `report`,
    and dies by SIGKILL without closing."""
    pid = os.fork()
    if pid == 0:
        try:
            db = open_db(base, sync=False, gc="none")
            out = []
            for txn in txns:
                synced = _synced(lambda txn=txn: _commit(db, [txn]))
                out.append((_frames(base), synced))
            with open(report, "w") as f:
                json.dump(out, f)
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status), status


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("in_place", ["kept", "lost"])
def test_a_power_cut_leaves_a_whole_prefix(tmp_path, seed, in_place):
    """For each cut of the log at a frame boundary from the last synced
    frame on (plus the torn start of the next frame): the .xrf and the
    control record as the writer left them ("kept": written in place,
    reached the disk) or as the last checkpoint left them ("lost"), the
    commits' records past the checkpoint's end lost (zeros), no header.
    The open replays the cut log: exactly the commits it holds, checked.
    Without the syncs (a frame unsynced while it writes a block in place
    for the first time) a cut finds XRF entries pointing at zeros."""
    src = tmp_path / "w"
    src.mkdir()
    base = src / "db"
    oracle = _make(base, n=400)
    saved = {ext: (src / f"db{ext}").read_bytes() for ext in (".mst", ".xrf")}
    txns = _txns(seed, 400)
    _writer(base, txns, tmp_path / "report.json")
    reports = json.loads((tmp_path / "report.json").read_text())
    assert len(reports) == len(txns) and reports[0][1] == 1
    last_synced = max(i for i, (_, s) in enumerate(reports, 1) if s)
    assert last_synced < len(txns), "every commit synced: nothing to cut"
    log = (src / "db.wal").read_bytes()
    mst, xrf = (src / "db.mst").read_bytes(), (src / "db.xrf").read_bytes()
    states = [oracle]
    for txn in txns:
        states.append(states[-1].copy())
        states[-1].apply(txn)
    cuts = 0
    for k in range(last_synced, len(txns) + 1):
        end = reports[k - 1][0]
        d = tmp_path / f"cut{k}"
        d.mkdir()
        if in_place == "kept":
            old = saved[".mst"]
            (d / "db.mst").write_bytes(mst[:64] + old[64:] + b"\0" * (len(mst) - len(old)))
            (d / "db.xrf").write_bytes(xrf)
        else:
            (d / "db.mst").write_bytes(saved[".mst"])
            (d / "db.xrf").write_bytes(saved[".xrf"])
        (d / "db.wal").write_bytes(log[:end] + log[end:end + 100])   # a torn next frame
        with open_db(d / "db", gc="none") as db:
            ok, why = states[k].matches(db)
            assert ok, f"cut after commit {k} (last synced {last_synced}): {why}"
            assert db.check().ok, db.check()
        check_files(d / "db")
        shutil.rmtree(d)
        cuts += 1
    assert cuts >= 2


def test_a_new_log_of_another_process_makes_a_handle_sync_again(tmp_path):
    """The handle remembers block 2 from a log that another process
    emptied (a checkpoint at its close) and began again with a frame of
    its own: the log's first frame has another id, and the handle's next
    write of block 2 syncs."""
    base = tmp_path / "db"
    _make(base, n=300)
    with open_db(base, sync=False, gc="none") as db:
        assert _synced(lambda: db.update(1, [(1, b"a")])) == 1      # control record, block 0
        assert _synced(lambda: db.update(300, [(1, b"a")])) == 1    # block 2
        assert _synced(lambda: db.update(299, [(1, b"a")])) == 0
        pid = os.fork()
        if pid == 0:
            try:
                other = open_db(base, sync=False, gc="none")
                other.close()                        # the log emptied
                other = open_db(base, sync=False, gc="none")
                other.update(2, [(1, b"other")])     # a new log's first frame
                os.kill(os.getpid(), signal.SIGKILL)
            finally:
                os._exit(3)
        os.waitpid(pid, 0)
        assert _wal(base) > 0
        assert _synced(lambda: db.update(298, [(1, b"b")])) == 1
        assert db.check().ok


def test_a_log_emptied_without_the_header_makes_a_handle_sync_again(tmp_path):
    """A process that keeps no log length in the header (it cannot tell
    the boot; files mode alike) commits and empties the log durably,
    leaving the header's length and first frame as they were.  The next
    transaction sees the empty log and clears them: the handle's next
    commit syncs, and a power cut after it (the control record and the
    XRF block written in place, the record lost, the log as that process
    left it) leaves a sound database."""
    base = tmp_path / "db"
    _make(base, n=300)
    db = open_db(base, sync=False, gc="none")
    assert _synced(lambda: db.update(1, [(1, b"a")])) == 1
    assert _synced(lambda: db.update(2, [(1, b"b")])) == 0
    pid = os.fork()
    if pid == 0:
        try:
            T.set_boot_unknown(True)
            with open_db(base, sync=True, gc="none") as other:
                other.update(250, [(1, b"other")])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert _wal(base) == 0
    saved = (tmp_path / "db.mst").read_bytes()
    assert _synced(lambda: db.update(3, [(1, b"c" * 200)])) == 1
    mst, xrf = (tmp_path / "db.mst").read_bytes(), (tmp_path / "db.xrf").read_bytes()
    log = (tmp_path / "db.wal").read_bytes()
    db.close()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "db.mst").write_bytes(mst[:64] + saved[64:] + b"\0" * (len(mst) - len(saved)))
    (cut / "db.xrf").write_bytes(xrf)
    (cut / "db.wal").write_bytes(log)             # synced: all of it
    with open_db(cut / "db", gc="none") as c:
        assert c.check().ok
        assert c[3].fields[0].raw == b"c" * 200 and c[250].fields[0].raw == b"other"


def test_a_new_whole_file_syncs(tmp_path):
    """A commit hook's file (pydb_txn_put_file) is a unit of its own: the
    first commit that writes it syncs, though the control record and the
    XRF block are held already."""
    base = tmp_path / "db"
    with pydb.create(base, "isis-packed", sync=False, gc="none") as db:
        assert [_synced(lambda: db.append([(1, b"x")])) for _ in range(2)] == [1, 0]
        T.commit_hook(db, str(tmp_path / "side.txt"))
        assert [_synced(lambda: db.append([(1, b"y")])) for _ in range(3)] == [1, 0, 0]
        assert (tmp_path / "side.txt").exists()


def _segments(root) -> set[str]:
    return {p.name for p in root.rglob("seg-*")}


def test_a_merge_syncs_the_log_before_it_removes_segments(tmp_path, segment_files):
    """Handle B (sync=False) merges the index's segments; its merge's
    commit is not synced (the MANIFEST is held), nor are its appends.
    Handle A (sync=True) then merges: its commit removes the segments the
    MANIFEST no longer names -- only after an fdatasync of the log, which
    makes B's frames durable.  A killed just before that fdatasync has
    removed nothing; a power cut there (the log cut where B last synced,
    no header) leaves a database that opens and whose index agrees."""
    def setup(root):
        root.mkdir()
        base = root / "db"
        with create_indexed(base, "isis-packed", sync=True, gc="none") as db:
            for m in range(1, 6):
                db.append(content(m, 1, 40))
        b = open_db(base, sync=False, gc="none")
        b.update(1, content(1, 2, 40))               # synced: the log's first frame
        synced_len = _frames(base)
        T.index_collect(b, b.index._h, 100)          # B's merge; its commit unsynced
        for m in range(6, 11):
            b.append(content(m, 1, 40))
        return base, open_db(base, sync=True, gc="none"), b, synced_len

    def a_step(a, n) -> str:
        """A's merge step in a child, its n-th operation failing (crash:
        exiting just before it); the operation's name."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                T.fail_io(n, crash=crash)
                try:
                    T.index_collect(a, a.index._h, 100, False, True)
                except pydb.Error:
                    pass
                os.write(w, (T.io_fired() or "-").split()[0].encode())
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        got = os.read(r, 100).decode()
        os.close(r)
        return got

    crash = False
    for n in range(1, 40):
        base, a, b, _ = setup(tmp_path / f"n{n}")
        if a_step(a, n) in ("fdatasync", "-"):
            break
    else:
        raise AssertionError("A's step made no fdatasync")
    crash = True
    root = tmp_path / "cut"
    base, a, b, synced_len = setup(root)
    before = _segments(root)
    a_step(a, n)                                     # dies just before it
    assert _segments(root) == before
    shutil.copytree(root, tmp_path / "after", ignore=shutil.ignore_patterns("*.shm"))
    with open(tmp_path / "after" / "db.wal", "r+b") as f:
        f.truncate(synced_len)
    with open_db(tmp_path / "after" / "db", gc="none") as db:
        assert db.check().ok
        index_agrees(db)
