"""Shared by the crash and fault tests: a deterministic record content, an
oracle of what the database must hold, and checks of the files.

A transaction is described as a list of operations, each a tuple:
("A", mfn, ver, size) append, ("U", mfn, ver, size) update,
("D", mfn) delete, ("X", mfn) undelete.  The content of a record version
is a function of (mfn, ver, size), so the oracle stores only those.
"""

from __future__ import annotations

import os
import random
import struct

import pydb


def content(mfn: int, ver: int, size: int) -> list[tuple[int, bytes]]:
    return [(1, b"%d:%d" % (mfn, ver)), (2, bytes([65 + ver % 26]) * size), (3, b"end")]


class Oracle:
    """MFN -> (deleted, ver, size) for the acknowledged state."""

    def __init__(self, state=None):
        self.state: dict[int, tuple[bool, int, int]] = dict(state or {})

    def copy(self) -> Oracle:
        return Oracle(self.state)

    def apply(self, ops) -> None:
        for op in ops:
            kind, mfn = op[0], op[1]
            if kind == "A":
                assert mfn == len(self.state) + 1, (mfn, len(self.state))
                self.state[mfn] = (False, op[2], op[3])
            elif kind == "U":
                d = self.state[mfn][0]
                self.state[mfn] = (d, op[2], op[3])
            elif kind == "D":
                self.state[mfn] = (True,) + self.state[mfn][1:]
            elif kind == "X":
                self.state[mfn] = (False,) + self.state[mfn][1:]

    @property
    def max_mfn(self) -> int:
        return len(self.state)

    def matches(self, db) -> tuple[bool, str]:
        """(True, "") if `db` holds exactly this state."""
        if db.max_mfn != self.max_mfn:
            return False, f"max_mfn {db.max_mfn} != {self.max_mfn}"
        recs = db.read_many(range(1, self.max_mfn + 1)) if self.max_mfn else []
        for r in recs:
            d, ver, size = self.state[r.mfn]
            got = [(f.tag, f.raw) for f in r.fields]
            if r.deleted != d or got != content(r.mfn, ver, size):
                return False, f"MFN {r.mfn}: deleted={r.deleted} {got[:1]} != {d} {ver}"
        return True, ""


def encode_ops(ops) -> str:
    return ";".join(",".join(str(x) for x in op) for op in ops)


def decode_ops(text: str):
    out = []
    for part in text.split(";"):
        if not part:
            continue
        f = part.split(",")
        out.append((f[0],) + tuple(int(x) for x in f[1:]))
    return out


#: One random transaction in BULK_ODDS appends BULK_RECORDS records of
#: BULK_SIZE bytes (about 1.08 MB of records).
BULK_ODDS = 1 / 40
BULK_RECORDS = 36
BULK_SIZE = 30_000


def run_random_txn(db, rnd, ver: int, bulk: float = BULK_ODDS):
    """Build (but do not commit) a random transaction on open `db`; returns
    (tx, ops).  `bulk`: the odds of a bulk transaction."""
    tx = db.transaction()
    ops = []
    top = db.max_mfn
    if rnd.random() < bulk:
        # a bulk transaction: over 1 MiB of records, a direct commit
        # (csrc/wal.h, PYDB_WAL_DIRECT)
        for _ in range(BULK_RECORDS):
            mfn = tx.append(content(top + 1, ver, BULK_SIZE))
            top += 1
            ops.append(("A", mfn, ver, BULK_SIZE))
        return tx, ops
    for _ in range(rnd.randint(1, 5)):
        r = rnd.random()
        if r < 0.45 or top == 0:
            size = rnd.choice([0, 10, 300, 700, 3000])
            mfn = tx.append(content(top + 1, ver, size))
            assert mfn == top + 1
            top += 1
            ops.append(("A", mfn, ver, size))
        else:
            mfn = rnd.randint(1, top)
            if r < 0.8:
                size = rnd.choice([0, 10, 300, 700, 3000])
                tx.update(mfn, content(mfn, ver, size))
                ops.append(("U", mfn, ver, size))
            elif r < 0.9:
                tx.delete(mfn)
                ops.append(("D", mfn))
            else:
                tx.undelete(mfn)
                ops.append(("X", mfn))
    return tx, ops


def check_files(base) -> None:
    """The ISIS files alone are consistent (formats §2.1, §3.1): control
    record within the file, zero fill after NXTMFB/NXTMFP, XRFPOS."""
    mst = open(f"{base}.mst", "rb").read()
    xrf = open(f"{base}.xrf", "rb").read()
    ctlmfn, nxtmfn, nxtmfb, nxtmfp = struct.unpack_from("<iiiH", mst, 0)
    end = (nxtmfb - 1) * 512 + nxtmfp - 1
    assert ctlmfn == 0 and 64 <= end <= len(mst)
    assert mst[end:] == b"\0" * (len(mst) - end), "non-zero bytes after the committed end"
    n = len(xrf) // 512
    assert n >= max(1, -(-(nxtmfn - 1) // 127))
    for b in range(n):
        assert struct.unpack_from("<i", xrf, b * 512)[0] == (-(b + 1) if b == n - 1 else b + 1)


#: FST of the native index the crash tests keep beside the database: the
#: version stamp "mfn:ver" (technique 0), the filler run cut to 30 bytes
#: (technique 0) and the words of field 3 (technique 4).
INDEX_FST = "1 0 v1\n2 0 v2\n3 4 v3\n"
INDEX_MAX_KEY = 30


def create_indexed(base, *args, **kw):
    """pydb.create with the crash tests' native index attached."""
    return pydb.create(base, *args, fst=INDEX_FST, max_key=INDEX_MAX_KEY, **kw)


def index_agrees(db) -> int:
    """Assert that the native index of `db` holds exactly the keys and
    postings the FST gives for its active records (none of a logically
    deleted record or of a superseded version; term counts equal to the
    postings listed).  Returns the number of postings compared."""
    from pydb import _pydb
    expected: dict[bytes, list] = {}
    recs = db.read_many(range(1, db.max_mfn + 1)) if db.max_mfn else []
    for r in recs:
        if r.deleted:
            continue
        fields = [(f.tag, f.raw) for f in r.fields]
        for k, m, t, o, c in _pydb._testing.fst_keys(INDEX_FST, fields, mfn=r.mfn, utf8=True,
                                                     max_key=INDEX_MAX_KEY):
            expected.setdefault(k, []).append((m, t, o, c))
    for v in expected.values():
        v.sort()
    ix = db.index
    assert ix is not None and ix.kind == "native", ix
    got: dict[bytes, list] = {}
    for k, count in ix.raw_terms():
        got[k] = [tuple(p) for p in ix.postings(k)]
        assert len(got[k]) == count, (k, count, got[k])
    if got != expected:
        diff = sorted(set(got) ^ set(expected))[:5]
        wrong = [k for k in set(got) & set(expected) if got[k] != expected[k]][:3]
        raise AssertionError(f"index disagrees with the records: keys only on one side "
                             f"{diff}, different postings "
                             f"{[(k, got[k], expected[k]) for k in wrong]}")
    return sum(len(v) for v in got.values())


def open_db(base, **kw):
    """pydb.open for writing; UTF-8 named (the crash tests write bytes and
    values they read: no sampling of the records for the default's
    warning, which random bytes would draw)."""
    kw.setdefault("encoding", "utf-8")
    return pydb.open(base, readonly=False, **kw)


# ------------------------------------------------- the crash tests' writer
#
# A writer reports to the test, through a pipe (outside the database's
# file system), a line "P <ops>" before each commit and "C" after commit()
# returned: the "C" lines are the acknowledged commits (tests/test_recovery.py,
# tests/test_power_loss.py).

def writer_loop(base, wfd, seed, ver0, sync):
    """Child: random transactions on `base` until killed; reports "R" once
    open, then P (pending, before commit) and C (acknowledged, after
    commit) lines on the pipe `wfd`."""
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


#: The fixed transactions of the crash-point tests: ("A", size) appends,
#: ("U", mfn, size) updates, ("D", mfn) deletes, ("X", mfn) undeletes; the
#: third one (130 appends) spans a new XRF block.
SCRIPT = [[("A", 10), ("A", 700)], [("U", 1, 3000), ("D", 2), ("A", 5)],
          [("A", 20)] * 130, [("X", 2), ("U", 2, 1)], [("D", 1)]]


def run_script(db, report, script=SCRIPT, ver: int = 100) -> None:
    """Commit the transactions of `script` on open `db`, calling
    report(b"P <ops>\\n") before each commit and report(b"C\\n") after it."""
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


def script_crashing_at(base, n: int) -> tuple[bytes, int]:
    """Fork a child that opens `base` for writing and runs SCRIPT with its
    n-th write-side file operation made a crash point (_exit(137) instead
    of the operation); returns its reports (see run_script) and its exit
    code (0 when the script ended before operation n)."""
    from pydb import _pydb
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            db = open_db(base)
            _pydb._testing.fail_io(n, 0, crash=True)
            run_script(db, lambda b, w=wfd: os.write(w, b))
            os._exit(0)
        finally:
            os._exit(3)
    os.close(wfd)
    buf = read_reports(rfd)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), (n, status)
    return buf, os.WEXITSTATUS(status)


def read_reports(fd) -> bytes:
    """Everything left on the read end `fd` of a writer's pipe (until EOF);
    closes it."""
    buf = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    os.close(fd)
    return buf


def replay_reports(buf: bytes, oracle: Oracle):
    """Apply the acknowledged commits of a writer's reports `buf` to
    `oracle`; returns (acknowledged count, ops of the commit in flight or
    None)."""
    pending, acked = None, 0
    for line in buf.decode().splitlines():
        if line.startswith("P "):
            assert pending is None
            pending = decode_ops(line[2:])
        elif line == "C":
            oracle.apply(pending)
            acked += 1
            pending = None
    return acked, pending


def recovered_state(db, oracle: Oracle, pending, where: str):
    """Compare the reopened `db` with the acknowledged state: it must be
    `oracle`, or `oracle` plus the whole commit in flight `pending`.
    Returns (the oracle of what `db` holds, "old" or "new" or None when
    nothing was in flight); AssertionError naming `where` otherwise."""
    ok, why = oracle.matches(db)
    if ok:
        return oracle, ("old" if pending is not None else None)
    assert pending is not None, f"{where}: acknowledged state lost: {why}"
    new = oracle.copy()
    new.apply(pending)
    ok2, why2 = new.matches(db)
    assert ok2, f"{where}: neither old ({why}) nor new ({why2}) state"
    return new, "new"
