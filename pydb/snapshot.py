"""Snapshots: one committed state of a database, pinned for many reads.

``db.snapshot()`` returns a :class:`Snapshot`: records, counts, listings,
versions, the inverted index and the validator all answer *as of its
commit* -- the latest commit that was published in the commit header
(``<base>.shm``, docs/design.md §6) when the snapshot was taken -- while
writers in this and other processes go on committing.  Plain reads on a
:class:`pydb.Database` (``db[mfn]``, ``len(db)``, iteration, ``search``)
each see the latest commit when they start instead.

Taking a snapshot reads no file when the commit header is usable: it
copies the header's state and claims a slot of its reader table, so that
nothing the snapshot may still read (a segment file of the native index)
is removed before it is released.  Release it with :meth:`Snapshot.close`
or a ``with`` block; one that is garbage-collected is released too, and
the slot of a process that dies is cleared by the next writer.

Without a usable header (no pydb writer has opened the database yet,
read-only media, a damaged file, files written by another program since)
a snapshot reads the committed state from the control record and holds
no slot (``info()["registered"]`` is False).  It still keeps its records
while other processes commit (their new versions go after its end of
records), but nothing stops a writer's compaction: once one has replaced
the files, its reads raise :class:`~pydb.DiskError` saying so (take a new
snapshot) rather than answer from the new files.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from . import _pydb
from .check import CheckReport
from .check import check as _check
from .errors import ClosedError, CorruptionError, NotFoundError, UnsupportedError
from .index import Index, KeyLike, Posting, Term
from .search import SearchResult, retry_fitted

if TYPE_CHECKING:  # pragma: no cover  (database imports this module)
    from .database import Database, Record

__all__ = ["Snapshot", "version_chain"]


#: Walks of a version chain begun again when a compaction moved the
#: handle to new files during one (version_chain).
CHAIN_TRIES = 8


def version_chain(db: _pydb.Database, read_current: Callable[[], Any]) -> list[Any]:
    """The version `read_current()` gives followed by its back versions
    (newest first), read from `db` by following MFBWB/MFBWP
    (docs/isis-formats.md §2.4), all from one master file: a walk during
    which a compaction moved the handle to new files (the back pointers
    read before name other bytes there: a review found a false
    CorruptionError, and a version of the same MFN could be taken for a
    back version) is begun again, and after :data:`CHAIN_TRIES` such
    walks only the current version is returned (its back versions are
    garbage a compaction may take).  Raises :class:`~pydb.CorruptionError`
    if a back pointer does not point strictly backwards in the file
    (which also rules out cycles) or a version is damaged, and what
    `read_current` raises."""
    for _ in range(CHAIN_TRIES):
        seq = db._files_sequence()
        current = read_current()
        out: list[Any] = [current]
        mfn = current.mfn
        try:
            while current.back_offset is not None:
                back = current.back_offset
                if back >= current.offset:
                    raise CorruptionError(
                        db.info()["mst_path"], current.offset,
                        f"record of MFN {mfn}: back pointer to offset {back} does "
                        f"not point before the version at {current.offset} (cycle?)")
                current = db._read_at(mfn, back)
                out.append(current)
        except CorruptionError:
            if db._files_sequence() == seq:
                raise
            continue
        if db._files_sequence() == seq:
            return out
    return [read_current()]


class Snapshot(_pydb.Snapshot):
    """A read-only view of a database as of one commit.

    Made by :meth:`pydb.Database.snapshot`; a context manager (the ``with``
    block closes it).  Everything it answers is *as of its commit*: the
    records that were active or logically deleted then, with the version
    that was current then (a record updated since is read by following
    its back pointers to that version; one appended since does not
    exist), the XRF states then, and the native index's segment list of
    that commit.  It does not change while writers in this or other
    processes commit, whatever they do.  Plain reads on the Database see
    the latest commit instead.

    ``len(snap)`` is the number of records active at the commit;
    ``snap[mfn]`` the version of record `mfn` (int, 1-based) current at
    the commit as a :class:`pydb.Record` (logically deleted ones too,
    flagged ``deleted``), raising :class:`~pydb.NotFoundError` (a
    KeyError) for an MFN outside 1..:attr:`max_mfn`, never created or
    physically deleted then; ``mfn in snap``; iterating yields the
    records active at the commit in MFN order (256 per GIL release).
    Also as of the commit: ``read_many(mfns)`` (list of Record, one GIL
    release), ``mfns(deleted=False, start=1)`` (ascending list of int),
    ``counts()`` (dict of int: active, logically_deleted,
    physically_deleted, unused, new, pending -- the two XRF flags are the
    latest entry's), ``xrf_entry(mfn)`` (dict: raw, state, offset in
    bytes, new, pending), :meth:`records`, :meth:`versions`,
    :meth:`terms`, :meth:`postings`, :meth:`search`, :meth:`check`; and
    ``info()``, what it pins (dict: commit, next_mfn, max_mfn, reccnt,
    mst_end / mst_size / xrf_size in bytes, index_gen, registered).

    Attributes (read-only): :attr:`commit` (int, the commit number of the
    commit header; 0 when the database has none), :attr:`max_mfn` (int,
    NXTMFN - 1 at the commit), ``closed`` (bool), ``database`` (the
    :class:`pydb.Database`), :attr:`path`.

    Any number of threads may read one snapshot at once.  Every method
    raises :class:`~pydb.ClosedError` once the snapshot or its database
    is closed (closing the database closes its snapshots).
    """

    __slots__ = ("_ix",)

    def __init__(self, db: Database, index: _pydb.Index | None = None) -> None:
        """Pin the latest published commit of `db`, and the view of its
        index handle `index` as of that commit (done by the low-level
        constructor; use :meth:`pydb.Database.snapshot`).

        Raises:
            ClosedError: the database is closed.
            LockTimeoutError: every slot of the reader table (960) is
                held by a live process.
            CorruptionError, DiskError: reading the control record of a
                database without a usable commit header.
        """
        self._ix: Index | None = None

    # -- records -------------------------------------------------------
    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<pydb.Snapshot closed>"
        return f"<pydb.Snapshot commit={self.commit} max_mfn={self.max_mfn}>"

    @property
    def path(self) -> str:
        """The path of the database, as given to :func:`pydb.open`."""
        return cast("str", self.database.path)

    def __contains__(self, mfn: object) -> bool:
        """True if `mfn` named an active or logically deleted record at
        the commit.  Raises :class:`~pydb.ClosedError`."""
        if not isinstance(mfn, int) or mfn < 1 or mfn > self.max_mfn:
            return False
        return self.xrf_entry(mfn)["state"] in ("active", "logically deleted")

    def get(self, mfn: int, default: Any = None) -> Any:
        """``snap[mfn]`` (a :class:`pydb.Record`), or `default` if there
        was no such record at the commit.  Raises as ``snap[mfn]``
        otherwise (CorruptionError, DiskError, ClosedError)."""
        try:
            return self[mfn]
        except NotFoundError:
            return default

    def records(self, *, start: int = 1, deleted: bool = False,
                skip_damaged: bool = False) -> _pydb.RecordIterator:
        """The records as of the commit from MFN `start` (1-based; below
        1 counts as 1, past the largest MFN nothing is found), in MFN
        order: the active ones, and the logically deleted ones too if
        `deleted`; 256 records per GIL release.  With `skip_damaged`,
        damaged records are left out instead of raising.

        Raises (while iterating): :class:`~pydb.CorruptionError` for a
        damaged record (after yielding those before it) unless
        `skip_damaged`; :class:`~pydb.DiskError`;
        :class:`~pydb.ClosedError` once the snapshot is closed.
        """
        return super().records(start=start, deleted=deleted,
                               skip_damaged=skip_damaged)

    def versions(self, mfn: int) -> list[Record]:
        """The version of `mfn` current at the commit followed by its back
        versions, newest first (MFBWB/MFBWP, docs/isis-formats.md §2.4);
        versions written after the commit are not included.  The back
        versions are history, not part of the commit: garbage the
        collector may take (docs/design.md §6) while the snapshot lives,
        so a later call may return fewer of them; the current one stays.

        Raises :class:`~pydb.NotFoundError` if there was no such record at
        the commit, :class:`~pydb.CorruptionError` if a back pointer does
        not point strictly backwards in the file, and
        :class:`~pydb.ClosedError`.
        """
        return version_chain(self.database, lambda: self[mfn])

    # -- the inverted index as of the commit ----------------------------
    def _index(self) -> Index:
        """The index as of the commit: the view taken with the snapshot.
        A view of an ISIS or in-memory index borrows the database's index
        handle: it is refused once that handle is closed."""
        ix = self._ix
        if ix is None:
            view = self._index_view()       # ClosedError, the view's error
            db = cast("Database", self.database)
            if view is None:
                db._require_index()         # UnsupportedError, CorruptionError
                raise UnsupportedError(errno.ENOENT, "the index could not be "
                                       "opened when the snapshot was taken", self.path)
            base = db.index
            ix = Index(view, encoding=base.encoding if base else db.encoding,
                       errors=base.errors if base else "surrogateescape",
                       keys_utf8=base._keys_utf8 if base else None)
            self._ix = ix
        if self.closed:
            self._index_view()              # raises ClosedError
        if ix.kind != "native":
            base = cast("Database", self.database).index
            if base is None or base.closed:
                raise ClosedError("the index of the database is closed")
        return ix

    def terms(self, prefix: KeyLike = "", start: KeyLike | None = None) -> Iterator[Term]:
        """The keys of the inverted index as of the commit that start with
        `prefix` and are >= `start`, in key order, as ``Term(key: str,
        count: int)``; see :meth:`pydb.Database.terms`.

        Raises:
            UnsupportedError: the database has no inverted index.
            CorruptionError: damaged index files (file, offset, reason).
            ClosedError: the snapshot is closed.
        """
        return self._index().terms(prefix, start)

    def postings(self, key: KeyLike, *, raw: bool = False) -> list[Posting]:
        """The postings of `key` as of the commit, as a list of
        ``Posting(mfn, tag, occ, cnt)`` (MFN, OCC, CNT 1-based) sorted
        ascending; ``[]`` if the key is absent.  See
        :meth:`pydb.Database.postings`.

        Raises:
            UnsupportedError: the database has no inverted index.
            CorruptionError: the posting list is damaged.
            ClosedError: the snapshot is closed.
        """
        return self._index().postings(key, raw=raw)

    def search(self, expr: str) -> SearchResult:
        """Search the inverted index as of the commit with a CDS/ISIS search
        expression (the language of :mod:`pydb.search`); records that were
        not active at the commit are left out.

        Returns:
            A :class:`pydb.search.SearchResult` (sorted distinct MFNs,
            1-based) whose ``.records()`` reads through this snapshot (the
            versions current at the commit).

        Raises:
            UnsupportedError: the database has no inverted index, the
                expression needs TAG/OCC the index lacks (ISIS LIND), or
                it has a term past ASCII in another encoding than the
                index's keys (:meth:`pydb.Database.search`).
            SearchSyntaxError: the expression does not parse (``reason``,
                ``position``: 0-based character offset).
            TermEncodeError: `expr` does not fit the database's encoding,
                even with each character it lacks in lower case
                (:func:`pydb.search.fit_case`); a UnicodeEncodeError.
            CorruptionError, DiskError: reading the index or the XRF.
            ClosedError: the snapshot is closed.
            TypeError: `expr` is not a str.
        """
        view = self._index()
        view._check_key_encoding(expr, self.database.encoding)
        return SearchResult(expr, retry_fitted(
            lambda e: self._search(view.handle, e), expr, self.database.encoding), self)

    # -- validation ----------------------------------------------------
    def check(self, *, max_problems: int = 1000,
              progress: Callable[[int, int], object] | None = None) -> CheckReport:
        """Validate the database as of the commit: the walk of
        :meth:`pydb.Database.check` over the control-record values, XRF
        entries and record versions of that commit (versions written by
        later commits are followed back, not reported), so a sound
        database is judged sound while writers commit.  The native index
        is not read (``db.check()`` reads it as of the latest commit).

        Args:
            max_problems: keep at most this many problems (>= 0).
            progress: optional ``progress(done, total)`` callable (units:
                XRF entries + 512-byte blocks of the master file).

        Returns:
            A :class:`pydb.check.CheckReport`.

        Raises:
            ClosedError: the snapshot is closed.
            ValueError: `max_problems` < 0.
            MemoryError: the work buffers cannot be allocated.
        """
        return _check(self, max_problems=max_problems, progress=progress)

    # -- life cycle ----------------------------------------------------
    def close(self) -> None:
        """Release the snapshot, its reader-table slot and its index view
        (idempotent).  Waits for reads in flight on it in other threads;
        later calls raise :class:`~pydb.ClosedError`."""
        super().close()
