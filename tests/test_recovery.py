"""Crash consistency (docs/reliability.md §2.2 a1): a writer process doing
random transactions is killed with SIGKILL at random points, again and
again.  After each kill the database is reopened (which runs recovery),
every record is read and compared with an oracle of the commits the
writer acknowledged (it reports each one through a pipe after commit()
returned): zero acknowledged commits lost, zero torn records, and the
transaction that was in flight is there entirely or not at all.

The database carries a native index (writer_model.INDEX_FST), which every
commit updates in the same transaction: at every reopen the index must
agree with the records recovered (keys and postings of the active
records, nothing of a deleted record or a superseded version), so a torn
commit leaves neither records nor index changes.

Default: 200 kills (PYDB_CRASH_KILLS=N for more).  The writer is forked
from this process (pydb already imported), so a kill costs milliseconds;
one writer in four runs with sync=True, the others with sync=False
(kill -9 does not lose the page cache, so both must pass).
"""

from __future__ import annotations

import os
import random
import select
import signal
import time

import pydb

from writer_model import (
    Oracle,
    check_files,
    create_indexed,
    index_agrees,
    open_db,
    read_reports,
    recovered_state,
    replay_reports,
    run_script,
    script_crashing_at,
    writer_loop,
)

KILLS = int(os.environ.get("PYDB_CRASH_KILLS", "200"))


def test_kill9_loop(tmp_path):
    base = tmp_path / "crash"
    with create_indexed(base, "isis-packed", sync=False) as db:
        pass
    oracle = Oracle()
    rnd = random.Random(12345)
    stats = dict(kills=0, acked=0, pending_old=0, pending_new=0, records_checked=0,
                 recovered_logs=0, index_states=0, postings_checked=0)
    t0 = time.monotonic()
    for it in range(KILLS):
        r, w = os.pipe()
        sync = it % 4 == 0
        pid = os.fork()
        if pid == 0:                                   # the writer
            try:
                os.close(r)
                writer_loop(base, w, 1000 + it, (it + 1) * 1_000_000, sync)
            finally:
                os._exit(3)
        os.close(w)
        # let it start (its first report: opening takes longer on a busy
        # machine), write for a random time, then kill it
        buf = b""
        ready, _, _ = select.select([r], [], [], 10.0)
        if ready:
            buf += os.read(r, 65536)
        deadline = time.monotonic() + rnd.uniform(0.002, 0.04)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                buf += chunk
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"writer exited by itself: {status}"
        buf += read_reports(r)
        stats["kills"] += 1
        acked, pending = replay_reports(buf, oracle)
        stats["acked"] += acked
        wal = base.with_suffix(".wal")
        if wal.exists() and wal.stat().st_size > 0:
            stats["recovered_logs"] += 1
        # reopen: recovery; then compare with the oracle
        with pydb.open(base) as db:
            oracle, inflight = recovered_state(db, oracle, pending, f"kill {it}")
            if inflight:
                stats[f"pending_{inflight}"] += 1
            stats["records_checked"] += db.max_mfn
            stats["postings_checked"] += index_agrees(db)
            stats["index_states"] += 1
        # a writer's open replays what the log may hold beyond the files
        # (after a kill: nothing, the page cache has every applied
        # commit), and its close checkpoints: the log is empty
        with open_db(base):
            pass
        assert wal.stat().st_size == 0
        check_files(base)
    # the database is still writable and sound after all that
    with open_db(base) as db:
        for i in range(100):
            db.append([(1, b"after %d" % i)])
        n = db.max_mfn
    with pydb.open(base) as db:
        assert db.max_mfn == n and db[n].raw(1) == [b"after 99"]
        assert oracle.matches(db)[1].startswith("max_mfn")  # only the 100 new ones differ
        index_agrees(db)
        assert list(db.search('"AFTER 99"')) == [n]
    check_files(base)
    stats["seconds"] = round(time.monotonic() - t0, 1)
    print("crash loop:", stats)
    # the writers did commit between the kills (about one per kill on a
    # loaded 2-core machine, several on an idle one)
    assert stats["kills"] == KILLS and stats["acked"] > KILLS // 2


def test_crash_at_every_operation(tmp_path):
    """Deterministic crash points (docs/reliability.md §2.1): a forked writer
    runs a fixed script of transactions and exits (_exit, as a crash)
    just before its n-th write-side file operation, for every n; after
    each, recovery gives exactly the acknowledged transactions plus the
    one in flight entirely or not at all."""
    from pydb import _pydb

    base0 = tmp_path / "pristine"
    with create_indexed(base0, "ffi-aligned", 3, sync=True) as db:
        pass
    # count the operations of the whole script
    shutil_copy(base0, tmp_path / "count")
    with open_db(tmp_path / "count") as db:
        _pydb._testing.fail_io(-1)
        try:
            run_script(db, lambda b: None)
            total = _pydb._testing.io_count()
        finally:
            _pydb._testing.fail_io(0)
    assert total > 5 * 7
    states = 0
    for n in range(1, total + 2):
        base = tmp_path / f"n{n}"
        shutil_copy(base0, base)
        buf, code = script_crashing_at(base, n)
        assert code == (0 if n > total else 137), (n, code)
        oracle = Oracle()
        _, pending = replay_reports(buf, oracle)
        with pydb.open(base) as db:                     # recovery
            recovered_state(db, oracle, pending, f"crash point {n}")
            index_agrees(db)
        check_files(base)
        states += 1
    print(f"crash points: {states} states checked ({total} operations)")


def shutil_copy(src, dst):
    import shutil
    for ext in (".mst", ".xrf", ".wal"):
        shutil.copy(f"{src}{ext}", f"{dst}{ext}")
    if os.path.isdir(f"{src}.pdx"):
        shutil.copytree(f"{src}.pdx", f"{dst}.pdx")
