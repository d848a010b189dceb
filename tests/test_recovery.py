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
    decode_ops,
    encode_ops,
    index_agrees,
    open_db,
    run_random_txn,
)

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
                writer(base, w, 1000 + it, (it + 1) * 1_000_000, sync)
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
            stats["postings_checked"] += index_agrees(db)
            stats["index_states"] += 1
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

    from writer_model import content

    script = [[("A", 10), ("A", 700)], [("U", 1, 3000), ("D", 2), ("A", 5)],
              [("A", 20)] * 130, [("X", 2), ("U", 2, 1)], [("D", 1)]]

    def run(db, report):
        ver = 100
        for txn in script:
            ver += 1
            ops = []
            with db.transaction() as tx:
                for op in txn:
                    if op[0] == "A":
                        m = tx.append(content(db.max_mfn + 1 + sum(o[0] == "A" for o in ops),
                                              ver, op[1]))
                        ops.append(("A", m, ver, op[1]))
                    elif op[0] == "U":
                        tx.update(op[1], content(op[1], ver, op[2]))
                        ops.append(("U", op[1], ver, op[2]))
                    else:
                        getattr(tx, "delete" if op[0] == "D" else "undelete")(op[1])
                        ops.append(op)
                report(b"P %s\n" % encode_ops(ops).encode())
            report(b"C\n")

    base0 = tmp_path / "pristine"
    with create_indexed(base0, "ffi-aligned", 3, sync=True) as db:
        pass
    # count the operations of the whole script
    shutil_copy(base0, tmp_path / "count")
    with open_db(tmp_path / "count") as db:
        _pydb._testing.fail_io(-1)
        try:
            run(db, lambda b: None)
            total = _pydb._testing.io_count()
        finally:
            _pydb._testing.fail_io(0)
    assert total > 5 * 7
    states = 0
    for n in range(1, total + 2):
        base = tmp_path / f"n{n}"
        shutil_copy(base0, base)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                db = open_db(base)
                _pydb._testing.fail_io(n, 0, crash=True)
                run(db, lambda b, w=w: os.write(w, b))
                os._exit(0)
            finally:
                os._exit(3)
        os.close(w)
        buf = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            buf += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        code = os.WEXITSTATUS(status)
        assert code == (0 if n > total else 137), (n, status)
        oracle, pending = Oracle(), None
        for line in buf.decode().splitlines():
            if line.startswith("P "):
                pending = decode_ops(line[2:])
            elif line == "C":
                oracle.apply(pending)
                pending = None
        with pydb.open(base) as db:                     # recovery
            ok, why = oracle.matches(db)
            if not ok:
                new = oracle.copy()
                new.apply(pending or [])
                assert pending is not None and new.matches(db)[0], (n, why)
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
