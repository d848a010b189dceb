"""The validator: ``db.check()``, ``snapshot.check()`` and ``python -m pydb check DB``.

In the spirit of Firebird's ``gfix -v -f``: the C core (csrc/check.c)
walks the control record, every XRF block and entry, every record version
reachable from the XRF and every back-pointer chain, then scans the master
file sequentially for versions nothing reaches; it reports *every* fault
with its location instead of stopping at the first.  ``db.check()`` then
reads the native index, where the database has one, as of the latest
commit: every key and its postings through the index's reader (which
checks each file's checksum and the order of the keys), each key's
postings strictly ascending and of records active in that commit.
Without a commit header (files mode) no generation ties the index to the
control record, so a fault of the postings is reported only when later
walks find it again, one of them with no writer's commit in progress
before, during or after it (a commit is in progress from its records
to its index's MANIFEST); such a check takes up to 2 seconds and two
walks longer.  Where commits keep coming for 2 seconds, the index is
left unchecked (``stats["index_checked"]`` false).  Then each active
record's postings are compared with the keys the index's FST gives of
it (their number and a sum of their hashes): a record another program added or changed (WinISIS and
CISIS do not know pydb's index) is an ``index-posting`` error, which
``pydb index DB`` mends by building the index anew.
``snapshot.check()`` checks the records only.  It checks one
committed state: ``db.check()`` the latest commit when it starts (a
snapshot it takes itself), ``snapshot.check()`` the commit of that
snapshot; versions that writers in this or other processes commit
meanwhile are followed back to the versions of that state, never reported,
so a sound database is judged sound while it is written.  Formats:
docs/isis-formats.md §2 (master file) and §3 (XRF); the list of checks follows
docs/reliability.md §2.1 ("A validator").

Kinds of fault (``KINDS`` maps each to its severity).  An **error** is
something a reader fails on or that loses data; a **warning** is
non-canonical or wasteful but reads back without loss.

=================  ========  ==============================================
kind               severity  meaning
=================  ========  ==============================================
control            error     NXTMFB/NXTMFP outside the master file
xrf-block          error     XRFPOS is not the block number (readers refuse
                             the block), or the XRF is shorter than NXTMFN
                             needs
xrf-pointer        error     an XRF entry points into the control record,
                             past the end of the file, or past the committed
                             end (NXTMFB/NXTMFP: the next append overwrites
                             the record)
xrf-beyond-end     error     a non-zero XRF entry for an MFN >= NXTMFN
mfn-mismatch       error     the leader at the position holds another MFN
                             (e.g. ABCD ``odds``, MFN 49)
mfrl               error     MFRL impossible, past the end of the file, or
                             the record reaches past the next append
base               error     BASE != leader + NVF * entry size, or > MFRL
directory          error     a directory entry passes the end of the record
status             error     leader STATUS neither 0 nor 1
back-pointer       error     MFBWB/MFBWP malformed, not strictly earlier in
                             the file (a cycle), or into another MFN's chain
overlap            error     two reachable versions share bytes
io                 error     a read failed (the message has the reason)
index              error     the native index cannot be read: a damaged or
                             missing file (its path, the byte offset and
                             the reason), or a MANIFEST of another
                             generation than the latest commit names
index-posting      error     a key's postings out of order or repeated,
                             more of them than the key's count, or of an
                             MFN that has no active record in the commit
                             checked; or a record's postings not the keys
                             the index's FST gives of it (a record another
                             program wrote) (file: the index folder
                             ``.pdx``)
mfrl-padding       warning   MFRL odd, or not a multiple of 2^MSTXL
                             (pyisis-written files)
placement          warning   record not on the 2-byte (2^MSTXL) boundary, or
                             its leader splits a 512-byte block (never-split
                             rule, §2.3)
status-mismatch    warning   STATUS disagrees with the XRF pointer's sign
locked             warning   the current version's MFRL is negative: a
                             record lock left set (§2.2)
directory-order    warning   fields not stored back to back in directory
                             order
xrfpos-sign        warning   XRFPOS negative on a block that is not the last,
                             or positive on the last (reported once each)
file-size          warning   .mst/.xrf size not a multiple of 512 bytes
control-end        warning   a record ends past NXTMFB/NXTMFP but before the
                             next aligned append (writer off by one)
control-flags      warning   MFTYPE not 0/1, or the CISIS lock words set
orphan             warning   a version reached neither from the XRF nor by a
                             back pointer: garbage that the ISIS update
                             technique leaves behind (§2.4), or past the
                             committed end an append that never committed
                             or a version another program left there
limit              warning   more than 4 Mi versions: overlap and orphan
                             checks skipped
=================  ========  ==============================================

``python -m pydb check`` additionally reports a database that cannot be
opened because of corruption as one error of kind ``open``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from . import _pydb

__all__ = ["Problem", "CheckReport", "check", "KINDS"]

#: {kind: "error" | "warning"} for every kind the validator reports.
KINDS: dict = _pydb._check_kinds()


@dataclass(frozen=True)
class Problem:
    """One fault found by the validator.

    Attributes:
        kind: kind name (a key of :data:`KINDS`, or ``"open"``).
        severity: ``"error"`` or ``"warning"``.
        mfn: 1-based MFN concerned, or 0 when the fault is not a record's.
        file: path of the file where the fault is (the .mst, the .xrf, a
            file of the native index or its folder).
        offset: byte offset of the fault in `file`, or -1.
        message: human-readable reason, with the values found.
    """

    kind: str
    severity: str
    mfn: int
    file: str
    offset: int
    message: str

    def __str__(self) -> str:
        where = f"{self.file}"
        if self.offset >= 0:
            where += f" at byte {self.offset}"
        mfn = f" MFN {self.mfn}" if self.mfn else ""
        return f"{self.severity}: {self.kind}{mfn}: {where}: {self.message}"


class CheckReport:
    """What :func:`check` found.

    Attributes:
        ok: True when no error was found (warnings allowed).
        problems: list of :class:`Problem`, in the order found (control
            record, then XRF order with each record's back chain, then the
            sequential scan); at most `max_problems` of them.
        counts: ``{kind: number}`` of every fault found, including those
            beyond `max_problems`.
        errors, warnings: totals (int).
        truncated: True when `problems` holds fewer than all the faults.
        stats: dict of walk totals: ``mfns`` (XRF entries walked),
            ``versions`` (current versions checked), ``back_versions``,
            ``orphans`` and ``orphan_bytes`` (bytes), ``scanned`` (the
            sequential scan ran to the end), ``index_checked`` (a native
            index was read to its end: False without one, after a fault
            that stopped its walk, or when commits kept moving it for
            200 ms, without a commit header for 2 s), ``index_keys``
            and ``index_postings`` (read).
        path: the database checked.

    Iterating yields the problems; ``len(report)`` is their number.
    """

    def __init__(self, path: str, problems: list, counts: dict, stats: dict):
        self.path = path
        self.problems = problems
        self.counts = counts
        self.errors = stats.pop("errors")
        self.warnings = stats.pop("warnings")
        self.truncated = stats.pop("truncated")
        stats.pop("stopped", None)
        self.stats = stats

    @property
    def ok(self) -> bool:
        """True when no error was found (warnings allowed)."""
        return self.errors == 0

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.problems)

    def __len__(self) -> int:
        return len(self.problems)

    def __bool__(self) -> bool:   # a report is a report, even when empty
        return True

    def __repr__(self) -> str:
        return (f"<pydb.CheckReport {self.path!r} ok={self.ok} "
                f"errors={self.errors} warnings={self.warnings}>")

    def summary(self) -> str:
        """Multi-line text: one line per kind found (count, severity), then
        the totals and the walk figures."""
        lines = []
        for kind in sorted(self.counts, key=lambda k: (KINDS.get(k, "error") != "error", k)):
            sev = KINDS.get(kind, "error")
            lines.append(f"{self.counts[kind]:>8}  {sev:<7}  {kind}")
        s = self.stats
        lines.append(f"{self.errors} error(s), {self.warnings} warning(s) in "
                     f"{s.get('mfns', 0)} MFNs, {s.get('versions', 0)} current and "
                     f"{s.get('back_versions', 0)} back versions, "
                     f"{s.get('orphans', 0)} orphan versions "
                     f"({s.get('orphan_bytes', 0)} bytes)")
        if s.get("index_keys") or s.get("index_checked"):
            lines.append(f"native index: {s['index_keys']} keys, "
                         f"{s['index_postings']} postings read"
                         + ("" if s["index_checked"] else
                            " (not checked to its end: a fault stopped it, "
                            "or commits kept coming)"))
        lines.append("OK" if self.ok else "DAMAGED")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready dict: path, ok, errors, warnings, truncated, counts,
        stats, problems (list of dicts)."""
        return {"path": self.path, "ok": self.ok, "errors": self.errors,
                "warnings": self.warnings, "truncated": self.truncated,
                "counts": dict(self.counts), "stats": dict(self.stats),
                "problems": [asdict(p) for p in self.problems]}

    def to_json(self, **kw: Any) -> str:
        """:meth:`to_dict` as a JSON document; `kw` go to :func:`json.dumps`
        (e.g. ``indent=1``)."""
        return json.dumps(self.to_dict(), **kw)


def check(db, *, max_problems: int = 1000,
          progress: Callable[[int, int], object] | None = None,
          interval: float = 0.1) -> CheckReport:
    """Validate an open database, or the commit a snapshot pins; see the
    module docstring for the kinds.

    Args:
        db: an open :class:`pydb.Database` (its latest commit when the
            walk starts) or :class:`pydb.Snapshot` (its commit).
        max_problems: keep at most this many :class:`Problem` objects
            (>= 0); every fault is still counted in ``counts``.
        progress: optional ``progress(done, total)`` callable, called from
            the calling thread about every `interval` seconds while the
            walk runs in a helper thread (units: XRF entries + 512-byte
            blocks of the master file).
        interval: seconds between progress calls.

    Returns:
        A :class:`CheckReport`.  Faults in the files never raise: they are
        reported.

    Raises:
        ClosedError: the database (or the snapshot) is closed.
        ValueError: `max_problems` < 0.
        MemoryError: the work buffers cannot be allocated.
    """
    run = _pydb.CheckRun(db, max_problems)
    if progress is None:
        run.run()
    else:
        failure = []

        def work():
            try:
                run.run()
            except BaseException as e:  # re-raised in the calling thread
                failure.append(e)

        t = threading.Thread(target=work, name="pydb-check", daemon=True)
        t.start()
        while t.is_alive():
            t.join(interval)
            progress(*run.progress)
        if failure:
            raise failure[0]
        progress(*run.progress)
    raw, counts, stats = run.result()
    problems = [Problem(*p) for p in raw]
    return CheckReport(str(db.path), problems, counts, stats)
