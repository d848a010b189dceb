"""Crash consistency (reliability.md §2.2 a1): a writer process doing
random transactions is killed with SIGKILL at random points, again and
again.  After each kill the database is reopened (which runs recovery),
every record is read and compared with an oracle of the commits the
writer acknowledged (it reports each one through a pipe after commit()
returned): zero acknowledged commits lost, zero torn records, and the
transaction that was in flight is there entirely or not at all.

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
from writer_model import Oracle, check_files, decode_ops, encode_ops, open_db, run_random_txn

KILLS = int(os.environ.get("PYDB_CRASH_KILLS", "200"))


def writer(base, wfd, seed, ver0, sync):
    """Child: random transactions until killed; reports P (pending, before
    commit) and C (acknowledged, after commit) lines."""
    rnd = random.Random(seed)
    db = open_db(base, sync=sync)
    os.write(wfd, b"R\n")
    ver = ver0
    while True:
        ver += 1
        tx, ops = run_random_txn(db, rnd, ver)
        os.write(wfd, b"P %s\n" % encode_ops(ops).encode())
        tx.commit()
        os.write(wfd, b"C\n")


def test_kill9_loop(tmp_path):
    base = tmp_path / "crash"
    with pydb.create(base, "isis-packed", sync=False) as db:
        pass
    oracle = Oracle()
    rnd = random.Random(12345)
    stats = dict(kills=0, acked=0, pending_old=0, pending_new=0, records_checked=0,
                 recovered_logs=0)
    t0 = time.monotonic()
    for it in range(KILLS):
        r, w = os.pipe()
        sync = it % 4 == 0
        pid = os.fork()
        if pid == 0:                                   # the writer
            try:
                os.close(r)
                writer(base, w, 1000 + it, (it + 1) * 1_000_000, sync)
            finally:
                os._exit(3)
        os.close(w)
        # let it start and write for a random time, then kill it
        buf = b""
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
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            buf += chunk
        os.close(r)
        stats["kills"] += 1
        # replay the writer's reports into the oracle
        pending = None
        for line in buf.decode().splitlines():
            if line.startswith("P "):
                assert pending is None
                pending = decode_ops(line[2:])
            elif line == "C":
                oracle.apply(pending)
                stats["acked"] += 1
                pending = None
        wal = base.with_suffix(".wal")
        if wal.exists() and wal.stat().st_size > 0:
            stats["recovered_logs"] += 1
        # reopen: recovery; then compare with the oracle
        with pydb.open(base) as db:
            ok, why = oracle.matches(db)
            if not ok:
                assert pending is not None, f"kill {it}: acknowledged state lost: {why}"
                new = oracle.copy()
                new.apply(pending)
                ok2, why2 = new.matches(db)
                assert ok2, f"kill {it}: neither old ({why}) nor new ({why2}) state"
                oracle = new
                stats["pending_new"] += 1
            elif pending is not None:
                stats["pending_old"] += 1
            stats["records_checked"] += db.max_mfn
        assert wal.stat().st_size == 0                 # recovery emptied the log
        check_files(base)
    # the database is still writable and sound after all that
    with open_db(base) as db:
        for i in range(100):
            db.append([(1, b"after %d" % i)])
        n = db.max_mfn
    with pydb.open(base) as db:
        assert db.max_mfn == n and db[n].raw(1) == [b"after 99"]
        assert oracle.matches(db)[1].startswith("max_mfn")  # only the 100 new ones differ
    check_files(base)
    stats["seconds"] = round(time.monotonic() - t0, 1)
    print("crash loop:", stats)
    assert stats["kills"] == KILLS and stats["acked"] > KILLS
