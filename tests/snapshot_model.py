"""Shared by tests/test_snapshots.py and tests/test_multiprocess.py: the
commit header's reader table as the file says it (csrc/shm.h, read here
from the documented layout, independently of the code), a writer that
logs what each of its commits changed, and the replay that checks a
snapshot against the acknowledged commits.

The writer's log has one line per commit, ``<commit>\\t<ops>``, written
after the commit returned: <commit> is the commit number of the header
(``snap.commit`` of a snapshot taken right after: the writer is the only
one, and it opens with gc="none", so the latest published commit is its
own), <ops> the changes in
writer_model's encoding.  The first line, ``<commit>\\t``, names the
commit the writer started from.

Run as a script it is that writer (tests/test_multiprocess.py starts it):

    python snapshot_model.py writer BASE LOG COMMITS SEED [READY_FILE [STOP_FILE]]

(at least COMMITS commits, and on until STOP_FILE exists if given; READY_FILE
is created once the first line of the log is written).
"""

from __future__ import annotations

import os
import random
import struct
import sys
from pathlib import Path

import pydb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from writer_model import Oracle, content, decode_ops, encode_ops, run_random_txn  # noqa: E402

# csrc/shm.h: the header's geometry.
SHM_MAGIC = b"PYDBSHM1"
SHM_HEAD = 4096
SHM_READERS = 960
SHM_SLOT = 64
SHM_SIZE = SHM_HEAD + SHM_READERS * SHM_SLOT


def shm_path(base) -> Path:
    """The commit header of the database `base` (lower-case files)."""
    return Path(f"{base}.shm")


def reader_slots(base) -> list[tuple[int, int]]:
    """(pid, commit) of every taken slot of the reader table, as the file
    holds them now (no process is checked for being alive; a slot stores
    the commit plus 1, 0 while its reader registers: -1 here)."""
    data = shm_path(base).read_bytes()
    assert data[:8] == SHM_MAGIC, data[:8]
    head, n, size = struct.unpack_from("=III", data, 12)
    assert (head, n, size) == (SHM_HEAD, SHM_READERS, SHM_SLOT)
    out = []
    for i in range(n):
        pid, _, _start, commit = struct.unpack_from("=iIQQ", data, head + i * size)
        if pid:
            out.append((pid, commit - 1))
    return out


def header_latest(base) -> int:
    """The header's latest published commit number."""
    return struct.unpack_from("=Q", shm_path(base).read_bytes(), 24)[0]


def latest_commit(db) -> int:
    """The latest published commit, as a snapshot of `db` pins it."""
    with db.snapshot() as s:
        return s.commit


def seed(base, n: int = 40) -> Oracle:
    """A new database at `base` with n records of writer_model.content,
    appended in one transaction; returns its oracle."""
    oracle = Oracle()
    with pydb.create(base, sync=False) as db, db.transaction() as tx:
        for mfn in range(1, n + 1):
            size = (mfn * 37) % 400
            assert tx.append(content(mfn, 0, size)) == mfn
            oracle.state[mfn] = (False, 0, size)
    return oracle


def state_of(snap) -> dict[int, tuple[bool, int, int]]:
    """MFN -> (deleted, ver, size) of everything `snap` holds, checking
    each record's fields against writer_model.content on the way; also
    checks len(), counts() and max_mfn against the records."""
    out = {}
    for r in snap.records(deleted=True):
        stamp = r[1][0]
        m, ver = (int(x) for x in stamp.split(":"))
        size = len(r.raw(2)[0])
        assert m == r.mfn, (m, r.mfn)
        assert [(f.tag, f.raw) for f in r.fields] == content(m, ver, size), r.mfn
        out[r.mfn] = (r.deleted, ver, size)
    active = sum(1 for d, _, _ in out.values() if not d)
    counts = snap.counts()
    assert len(snap) == active == counts["active"], (len(snap), active, counts)
    assert counts["logically_deleted"] == len(out) - active
    assert sorted(out) == list(range(1, snap.max_mfn + 1))
    return out


def sample_of(snap, mfns) -> tuple[int, int, int, dict]:
    """A cheap look at `snap`: (max_mfn, active, logically deleted,
    {mfn: (deleted, ver, size)} of the `mfns` up to max_mfn), each record
    checked against writer_model.content as in state_of."""
    top = snap.max_mfn
    got = {}
    for r in snap.read_many([m for m in mfns if m <= top]):
        m, ver = (int(x) for x in r[1][0].split(":"))
        size = len(r.raw(2)[0])
        assert m == r.mfn and [(f.tag, f.raw) for f in r.fields] == content(m, ver, size)
        got[r.mfn] = (r.deleted, ver, size)
    counts = snap.counts()
    assert len(snap) == counts["active"]
    return top, counts["active"], counts["logically_deleted"], got


def _sample_matches(got: tuple, state: dict) -> bool:
    top, active, deleted, recs = got
    return (top == len(state)
            and active == sum(1 for d, _, _ in state.values() if not d)
            and deleted == len(state) - active
            and all(state.get(m) == v for m, v in recs.items()))


def read_log(path) -> list[tuple[int, list]]:
    """[(commit, ops)] of a writer's log, first line included."""
    out = []
    for line in Path(path).read_text().splitlines():
        commit, _, ops = line.partition("\t")
        out.append((int(commit), decode_ops(ops)))
    return out


def replay(oracle: Oracle, log, wanted: dict[int, list]) -> int:
    """Apply the logged commits to `oracle` in order and compare, at every
    commit number in `wanted`, the state with each state recorded there
    (a list of dicts from state_of, or tuples from sample_of).  Asserts that the commit numbers are
    consecutive (a line may repeat the number before it only when its
    changes changed nothing) and that every wanted commit was met;
    returns the number of states compared."""
    compared = 0
    prev = None
    for commit, ops in log:
        if commit == prev:
            # A transaction that changed nothing (deleting a deleted
            # record, undeleting an active one) writes and publishes
            # nothing: its line repeats the commit number.
            before = dict(oracle.state)
            oracle.apply(ops)
            assert oracle.state == before, f"commit {commit}: changes without a commit"
            continue
        if prev is not None:
            assert commit == prev + 1, f"commit {commit} after {prev}"
        prev = commit
        oracle.apply(ops)
        for got in wanted.get(commit, ()):
            if isinstance(got, tuple):
                assert _sample_matches(got, oracle.state), f"sample of commit {commit}: {got}"
            elif got != oracle.state:
                diff = sorted(m for m in set(got) | set(oracle.state)
                              if got.get(m) != oracle.state.get(m))[:5]
                raise AssertionError(
                    f"snapshot of commit {commit} differs from the replay at MFNs "
                    f"{diff}: {[(m, got.get(m), oracle.state.get(m)) for m in diff]}")
            compared += 1
    missing = sorted(set(wanted) - {c for c, _ in log})
    assert not missing, f"snapshots of commits the writer never logged: {missing[:5]}"
    return compared


def write_commits(db, log_path, commits: int, rnd: random.Random, ver0: int = 1,
                  ready=None, until=None) -> int:
    """Commit `commits` random transactions (writer_model.run_random_txn)
    on the writable `db`, logging each (see the module docstring), and
    more until `until()` (a callable) is true, if given; `ready` (a
    callable) is called once the first line is written.  Returns the
    number of commits."""
    i = 0
    with open(log_path, "w") as log:
        log.write(f"{latest_commit(db)}\t\n")
        log.flush()
        if ready:
            ready()
        while i < commits or (until is not None and not until()):
            tx, ops = run_random_txn(db, rnd, ver0 + i, bulk=0)   # thousands of commits
            tx.commit()
            log.write(f"{latest_commit(db)}\t{encode_ops(ops)}\n")
            log.flush()
            i += 1
    return i


def _writer_main(argv: list[str]) -> None:
    base, log_path, commits, seed_ = argv[:4]
    ready_file = argv[4] if len(argv) > 4 else None
    stop_file = argv[5] if len(argv) > 5 else None

    def ready():
        if ready_file:
            Path(ready_file).touch()

    # gc="none": the collector's own commits (an index merge, a
    # compaction) would take commit numbers between the writer's, and the
    # log's "latest commit after mine" would then name the collector's
    # (readers during collections: tests/test_compaction.py,
    # tests/test_index_gc.py).
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        n = write_commits(db, log_path, int(commits), random.Random(int(seed_)),
                          ready=ready,
                          until=(lambda: os.path.exists(stop_file)) if stop_file else None)
    print(n)


if __name__ == "__main__":
    if sys.argv[1:2] == ["writer"]:
        _writer_main(sys.argv[2:])
    else:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} writer BASE LOG COMMITS SEED "
                 "[READY [STOP]]")
