"""Database and Record: the Python face of the C core (pydb._pydb)."""

from __future__ import annotations

import errno
import os
import threading
from typing import Iterator, Optional

from . import _pydb
from .errors import (ClosedError, CorruptionError, DatabaseExistsError,
                     DatabaseNotFoundError, NotFoundError, UnsupportedError)
from .index import Index, Posting, Term
from .subfields import Subfields, parse_subfields  # noqa: F401 (re-export)

__all__ = ["Database", "Record", "Field", "Transaction", "open", "create",
           "DEFAULT_IO", "LAYOUTS"]

#: Leader layouts a new database can have (isis-formats.md §2.2).
LAYOUTS = ("isis-packed", "isis-aligned", "ffi-packed", "ffi-aligned")

Transaction = _pydb.Transaction

_UNSET = object()   # Database._index before the first access

#: The default I/O mode, chosen by measurement (see benchmarks/).
DEFAULT_IO = "mmap"

Field = _pydb.Field


def _base_name(path) -> str:
    """`path` (str, bytes or os.PathLike) as a str without a trailing
    ``.mst``/``.xrf`` in any letter case: the base name of a database's
    files."""
    p = os.fsdecode(path)
    root, ext = os.path.splitext(p)
    return root if ext.lower() in (".mst", ".xrf") else p


def _existing_file(base: str) -> Optional[str]:
    """The first of ``base`` + .mst, .xrf, .MST, .XRF that exists, or None."""
    for ext in (".mst", ".xrf", ".MST", ".XRF"):
        if os.path.exists(base + ext):
            return base + ext
    return None


class Record(_pydb.Record):
    """One version of a record read from a master file.

    Attributes (read-only): ``mfn`` (int, 1-based), ``deleted`` (bool: the
    XRF pointer is negated, i.e. logically deleted), ``status`` (leader
    STATUS, 0 or 1), ``new`` / ``pending`` (XRF flags 0x400 / 0x200),
    ``locked`` (MFRL stored negative), ``offset`` / ``back_offset`` (bytes
    into the .mst), ``mfrl`` (bytes), ``fields`` (tuple of
    ``Field(tag, value)`` in stored order, each with ``.raw`` bytes),
    ``tags`` (tuple of int), ``encoding`` (str).

    ``rec[tag]`` is the list of that tag's values (str, occurrence order;
    empty if absent); ``rec.raw(tag)`` the same as bytes; ``rec.get(tag)``
    the first value or a default; ``tag in rec``; ``len(rec)`` the number
    of fields.  Values are decoded when accessed, with the database's
    encoding and error handler.
    """

    __slots__ = ()

    def subfields(self, tag: int) -> list[Subfields]:
        """Parsed subfields of every occurrence of `tag` (list of
        :class:`~pydb.subfields.Subfields`; see :func:`parse_subfields`)."""
        return [parse_subfields(v) for v in self[tag]]

    def to_dict(self) -> dict[int, list[str]]:
        """``{tag: [values...]}`` with tags in order of first appearance."""
        out: dict[int, list[str]] = {}
        for tag, value in self.fields:
            out.setdefault(tag, []).append(value)
        return out

    def __repr__(self) -> str:
        state = " deleted" if self.deleted else ""
        return f"<pydb.Record mfn={self.mfn}{state} fields={len(self)}>"

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return (self.mfn == other.mfn and self.deleted == other.deleted
                and [(f.tag, f.raw) for f in self.fields]
                == [(f.tag, f.raw) for f in other.fields])

    __hash__ = None  # type: ignore[assignment]


_pydb._set_record_class(Record)


class Database(_pydb.Database):
    """An open CDS/ISIS database (master file + cross-reference file).

    Create with :func:`pydb.open`.  ``len(db)`` is the number of active
    records (XRF entries with a positive pointer); ``db.max_mfn`` the
    highest MFN ever assigned; ``db[mfn]`` the current version of a record
    (logically deleted records too, flagged ``deleted``), raising
    :class:`~pydb.NotFoundError` (a KeyError) for an MFN outside
    1..max_mfn, never created, or physically deleted.  Iterating yields the
    active records in MFN order, reading 256 records per GIL release.
    Thread-safe: any number of threads may read one Database at once, also
    while one of them writes.

    Writing (a Database opened with ``readonly=False`` or made by
    :func:`pydb.create`): ``with db.transaction() as tx:`` groups appends,
    updates, deletions and undeletions into one atomic commit;
    :meth:`append`, :meth:`update`, :meth:`delete` and :meth:`undelete`
    commit one change each.  What readers see while a commit is applied:
    every record whole, either before or after the commit; a read of one
    record (or one batch of an iteration) never mixes the two, but records
    read one after the other during the commit may come from either side
    of it (there are no snapshots yet; a search of the attached native
    index sees one committed state, see :attr:`index`).  Another Database
    (another process) on the same files sees a commit when it next re-reads
    the control record: when asked for an MFN above the highest it knows, by ``len()``
    and ``counts()``, and when an iteration starts.
    """

    def __init__(self, path, *, readonly: bool = True, encoding: str = "utf-8",
                 errors: str = "surrogateescape", io: str = DEFAULT_IO,
                 lock: str = "none", sync: bool = True,
                 lock_timeout: float = 10.0, _flags: int = 0):
        flags = _flags
        if not readonly:
            flags |= _pydb.OPEN_WRITE
            if not sync:
                flags |= _pydb.OPEN_NOSYNC
        if lock_timeout is None or not lock_timeout >= 0:
            raise ValueError("lock_timeout must be a number of seconds >= 0")
        super().__init__(path, encoding=encoding, errors=errors, io=io, lock=lock,
                         flags=flags)
        self._readonly = not (flags & _pydb.OPEN_WRITE)
        self._sync = not (flags & _pydb.OPEN_NOSYNC)
        self._lock_timeout = float(lock_timeout)
        self._errors = errors
        self._index_lock = threading.Lock()
        self._index = _UNSET
        if not self._readonly:
            # A writable handle attaches the native index now, so that
            # every commit (also before the first use of .index) updates
            # it in the same transaction.
            try:
                ix = self._open_native_index()
                if ix is not None:
                    _pydb._attach_native_index(self, ix._h)
            except BaseException:
                super().close()
                raise
            if ix is not None:
                self._index = ix

    # -- inverted index (isis-formats.md §4-6) -------------------------
    def _native_base(self) -> Optional[str]:
        """The base name whose ``<base>.pdx`` directory holds the native
        index (tried: the path as given, then the .mst's own name), or
        None."""
        bases = [_base_name(self.path),
                 os.path.splitext(os.fsdecode(self.info()["mst_path"]))[0]]
        for base in bases:
            if os.path.isfile(os.path.join(base + ".pdx", "MANIFEST")):
                return base
        return None

    def _open_native_index(self) -> Optional[Index]:
        """The native pydb index of this database (``<base>.pdx``, built
        by :func:`pydb.build_index` or :func:`create` with an FST), or
        None.  Raises CorruptionError for a damaged manifest or segment."""
        base = self._native_base()
        if base is None:
            return None
        return Index(_pydb._open_native_index(base), encoding=self.encoding,
                     errors=self._errors)

    def _open_isis_index(self) -> Optional[Index]:
        """The CDS/ISIS inverted file shipped with the database (.cnt +
        classic or LIND files, isis-formats.md §4), or None without one."""
        try:
            return Index.open_isis(self.info()["mst_path"],
                                   encoding=self.encoding,
                                   errors=self._errors)
        except DatabaseNotFoundError:
            return None

    @property
    def index(self) -> Optional[Index]:
        """The inverted index of this database (an :class:`~pydb.index.Index`),
        opened on first use and kept until :meth:`close`; None if the
        database has none.

        Precedence: the native pydb index (the directory ``<base>.pdx``,
        made by :func:`pydb.build_index` or ``pydb.create(..., fst=...)``),
        else the CDS/ISIS inverted file that came with the database
        (classic or LIND, isis-formats.md §4; see ``db.index.info``).

        A writable Database attaches its native index when it is opened:
        every commit (:meth:`transaction`, :meth:`append`, :meth:`update`,
        :meth:`delete`, :meth:`undelete`) writes the index change in the
        same transaction (a new segment whose tombstones hide the
        record's old postings, the new MANIFEST logged in the write-ahead
        log), so once a commit returns :meth:`search`, :meth:`terms` and
        :meth:`postings` see it, and after a crash recovery leaves records
        and index in agreement.  Readers never wait for the writer: each
        call reads the segment list current when it starts.  Any handle
        (read-only too, in this or another process) picks up commits made
        through another handle at its next call: the index MANIFEST is
        checked (one stat) on each terms/postings/search call.  The ISIS inverted
        file is never updated by commits.

        Closing this Index while the Database is open makes it raise
        ClosedError; a writable Database keeps updating the index files
        and releases them when it is closed.

        Raises:
            CorruptionError: the index files exist but no file set
                validates (file, byte offset, reason).  Not cached: the
                next access tries again.
            ClosedError: the database is closed.
        """
        ix = self._index
        if ix is not _UNSET:
            if self.closed:
                raise ClosedError("the database is closed")
            return ix
        with self._index_lock:
            if self.closed:
                raise ClosedError("the database is closed")
            if self._index is _UNSET:
                ix = self._open_native_index()
                if ix is None:
                    ix = self._open_isis_index()
                self._index = ix
            return self._index

    def _require_index(self) -> Index:
        ix = self.index
        if ix is None:
            raise UnsupportedError(errno.ENOENT, "the database has no inverted index "
                                      "(no .cnt/.n0x files)", self.path)
        return ix

    def terms(self, prefix="", start=None) -> Iterator[Term]:
        """Iterate over the keys of the inverted index that start with
        `prefix` and are >= `start`, in key order, as ``Term(key, count)``.

        An uncapped range scan: ``db.terms("Z")`` sees every key that
        starts with Z.  A str prefix/start is brought into key form first
        (upper-cased, isis-formats.md §5.3); bytes are used as they are.
        See :meth:`pydb.index.Index.terms`.

        Raises:
            UnsupportedError: the database has no inverted index.
            CorruptionError: damaged index files (file, offset, reason).
            ClosedError: the database is closed.
        """
        return self._require_index().terms(prefix, start)

    def postings(self, key, *, raw: bool = False) -> list[Posting]:
        """The postings of `key` as a list of ``Posting(mfn, tag, occ,
        cnt)`` sorted ascending (``[]`` if the key is absent).

        A str key is brought into key form first (``db.postings("london")``
        looks up ``LONDON``); bytes, or ``raw=True``, are looked up as
        given.  LIND indexes carry no TAG/OCC (0), see ``db.index.caps``.
        See :meth:`pydb.index.Index.postings`.

        Raises:
            UnsupportedError: the database has no inverted index.
            CorruptionError: the posting list is damaged.
            ClosedError: the database is closed.
        """
        return self._require_index().postings(key, raw=raw)

    def search(self, expr: str):
        """Search the inverted index with a CDS/ISIS search expression
        (isis-formats.md §6): ``+`` OR, ``*`` AND, ``^`` AND NOT, ``(G)``
        same field, ``(F)`` same occurrence, ``.``/``$`` proximity, ``$``
        right truncation, ``/(tag,...)`` qualifier, parentheses, quoted
        terms.  See :mod:`pydb.search` for the exact semantics.

        Returns:
            A :class:`pydb.search.SearchResult`: the sorted MFNs (1-based)
            of the active records that match; ``.records()`` reads them
            lazily.

        Raises:
            UnsupportedError: the database has no inverted index, or the
                expression uses (G)/(F)/proximity/qualifiers on an index
                without TAG/OCC (ISIS LIND).
            SearchSyntaxError: the expression does not parse (``reason``,
                ``position``: 0-based character offset).
            UnicodeEncodeError: `expr` has characters the database's
                encoding cannot represent (such a term cannot be a key).
            CorruptionError: damaged index files.
            ClosedError: the database is closed.
        """
        return self._require_index().search(expr, self)

    def close(self) -> None:
        """Close the database and its inverted index (idempotent)."""
        lock = self.__dict__.get("_index_lock")
        if lock is not None:
            with lock:
                ix = self._index
                if ix is not _UNSET and ix is not None:
                    ix.close()
        super().close()

    # -- writing -------------------------------------------------------
    @property
    def readonly(self) -> bool:
        """True if the database was opened read-only (writes raise
        :class:`~pydb.ReadOnlyError`).  A handle opened for writing whose
        fsync failed also refuses writes, but still reports False here."""
        return self._readonly

    @property
    def sync(self) -> bool:
        """True if commits are fsync'ed (the default; see :func:`open`)."""
        return self._sync

    def transaction(self, timeout: float | None = None) -> "Transaction":
        """Begin a write transaction; use it as a context manager::

            with db.transaction() as tx:
                mfn = tx.append([(70, "Smith, J."), (24, "A title")])
                tx.update(5, [(24, "New title")])
                tx.delete(7)

        The block commits on normal exit (atomically: after a crash either
        every change is there or none) and aborts on an exception.
        ``tx.commit()`` / ``tx.abort()`` may also be called directly.  One
        transaction at a time per database, across threads and processes.

        Args:
            timeout: seconds to wait for the writer lock (float; default:
                the ``lock_timeout`` given to :func:`open`).

        Returns:
            A :class:`Transaction` (methods ``append(fields) -> MFN``,
            ``update(mfn, fields)``, ``delete(mfn)``, ``undelete(mfn)``,
            ``commit()``, ``abort()``).

        Raises:
            ReadOnlyError: opened read-only, or read-only after a failed
                fsync (reopen the database; recovery restores every
                committed transaction).
            LockTimeoutError: another thread or process kept the writer
                lock for `timeout` seconds (or this Database already has an
                open transaction).
            DiskError: recovery of a crashed writer's log failed.
            ClosedError: the database is closed.
        """
        return _pydb._txn_begin(self, self._lock_timeout if timeout is None
                                else timeout)

    def append(self, fields) -> int:
        """Add one record and commit: ``tx.append`` in its own transaction.

        Args:
            fields: iterable of ``(tag, value)`` pairs (tag: int 1..65535;
                value: str, encoded with the database's encoding, or bytes),
                or a :class:`Record` (its fields are copied as stored).

        Returns:
            The new record's MFN (int, 1-based).

        Raises:
            RecordTooLargeError: above the layout's limit (ISIS: 32767
                bytes per record; the FFI layouts allow more).
            ReadOnlyError, LockTimeoutError, DiskError: as for
                :meth:`transaction` and ``Transaction.commit``.
        """
        with self.transaction() as tx:
            return tx.append(fields)

    def update(self, mfn: int, fields) -> None:
        """Write a new version of record `mfn` (1-based) and commit.  The
        previous version stays in the master file, linked by MFBWB/MFBWP
        (isis-formats.md §2.4; see :meth:`versions`).  Raises
        :class:`~pydb.NotFoundError` if there is no such record, and as
        :meth:`append`."""
        with self.transaction() as tx:
            tx.update(mfn, fields)

    def delete(self, mfn: int) -> None:
        """Logically delete record `mfn` and commit (isis-formats.md §2.4,
        §3.2: a new version with STATUS 1, negated XRF pointer; the record
        stays readable with ``deleted`` True).  Raises NotFoundError."""
        with self.transaction() as tx:
            tx.delete(mfn)

    def undelete(self, mfn: int) -> None:
        """Undo the logical deletion of record `mfn` and commit.  Raises
        NotFoundError."""
        with self.transaction() as tx:
            tx.undelete(mfn)

    # -- conveniences --------------------------------------------------
    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<pydb.Database {self.path!r} closed>"
        return f"<pydb.Database {self.path!r} max_mfn={self.max_mfn}>"

    def __contains__(self, mfn) -> bool:
        """True if `mfn` names an active or logically deleted record."""
        if not isinstance(mfn, int) or mfn < 1 or mfn > self.max_mfn:
            return False
        return self.xrf_entry(mfn)["state"] in ("active", "logically deleted")

    def get(self, mfn: int, default=None):
        """``db[mfn]``, or `default` if there is no such record."""
        try:
            return self[mfn]
        except NotFoundError:
            return default

    @property
    def layout(self) -> str:
        """Leader layout detected from the files: ``"isis-packed"``,
        ``"isis-aligned"``, ``"ffi-packed"`` or ``"ffi-aligned"``
        (isis-formats.md §2.2, §2.5)."""
        return self.info()["layout"]

    def versions(self, mfn: int) -> list[Record]:
        """The current version of `mfn` followed by its back versions
        (newest first), following MFBWB/MFBWP (isis-formats.md §2.4).

        Raises :class:`~pydb.NotFoundError` if there is no such record and
        :class:`~pydb.CorruptionError` if a back pointer does not point
        strictly backwards in the file (which also rules out cycles).
        """
        current = self[mfn]
        out = [current]
        info = self.info()
        while current.back_offset is not None:
            back = current.back_offset
            if back >= current.offset:
                raise CorruptionError(
                    info["mst_path"], current.offset,
                    f"record of MFN {mfn}: back pointer to offset {back} does "
                    f"not point before the version at {current.offset} (cycle?)")
            current = self._read_at(mfn, back)
            out.append(current)
        return out

    def check(self, *, max_problems: int = 1000, progress=None):
        """Validate the database: walk the control record, every XRF entry,
        every reachable record version and back-pointer chain, and scan the
        master file for unreachable versions (isis-formats.md §2-3;
        reliability.md §2.1).  Faults in the files are reported, never
        raised.

        Args:
            max_problems: keep at most this many problems (every fault is
                still counted in ``counts``).
            progress: optional ``progress(done, total)`` callable, called
                from this thread while the walk runs (GIL released) in a
                helper thread.

        Returns:
            A :class:`pydb.check.CheckReport`: ``.ok`` (no error),
            ``.problems`` (list of ``Problem(kind, severity, mfn, file,
            offset, message)``; offset in bytes, MFN 1-based or 0),
            ``.counts`` (dict kind -> count), ``.summary()`` (text);
            iterable over the problems.  The kinds and their severities
            are listed in :mod:`pydb.check`.

        Raises:
            ClosedError: the database is closed.
            ValueError: `max_problems` < 0.
            MemoryError: the work buffers cannot be allocated.
        """
        from .check import check
        return check(self, max_problems=max_problems, progress=progress)


def open(path, *, readonly: bool = True, encoding: str = "utf-8",
         errors: str = "surrogateescape", io: str = DEFAULT_IO,
         lock: str = "none", sync: bool = True,
         lock_timeout: float = 10.0) -> Database:
    """Open a CDS/ISIS database.

    Args:
        path: base name (``"data/cds"``) or any file of the database
            (``"data/cds.mst"``, ``"data/CDS.XRF"``); extensions match in
            any case.  str, bytes or os.PathLike.
        readonly: False opens for writing: a write-ahead log ``<base>.wal``
            is created beside the files if missing, and recovery runs if a
            writer crashed in the middle of a commit (it replays a complete
            log, drops a torn one).  Read-only opens also run that recovery
            when they can write the files and no writer is active.
        encoding: codec for field values as str (any Python codec name;
            CDS/ISIS files carry no marker, isis-formats.md §9: DOS databases
            are usually ``"cp850"``, WinISIS ``"cp1252"``, ABCD ``"utf-8"``).
            Bytes are always available through ``Field.raw``/``Record.raw``.
        errors: codec error handler; the default ``"surrogateescape"`` never
            fails and re-encodes to the stored bytes.
        io: ``"pread"``, ``"mmap"`` or ``"direct"`` (O_DIRECT: every read
            goes to the disk, bypassing the page cache).
        lock: ``"none"`` or ``"mutex"`` (one mutex serialises every record
            read; for the crashtest's "with mutex" runs).
        sync: with True (default) a commit returns only once it is on the
            disk (the log, then the .mst/.xrf, are fdatasync'ed): it
            survives kill -9, an OS crash and power loss.  With False no
            fsync is done: a commit that returned survives the process
            being killed (kill -9, a crash of Python), because the
            operating system already holds the writes, but an OS crash or
            power loss may lose any commit of the last few seconds (the
            kernel's writeback delay, ``vm.dirty_expire_centisecs``) and
            may leave the .mst/.xrf inconsistent (records or XRF blocks
            written partly), which recovery cannot repair.
        lock_timeout: seconds a write waits for the writer lock held by
            another thread or process (float, default 10).

    Returns:
        A :class:`Database` (also a context manager).

    Raises:
        DatabaseNotFoundError: the .mst or .xrf file is missing.
        CorruptionError: the control record or XRF is damaged (with file,
            byte offset and reason).
        UnsupportedError: big-endian files; ``io="direct"`` where the file
            system refuses O_DIRECT.
        DiskError: another operating-system error (e.g. the folder is not
            writable with ``readonly=False``, or recovery failed).
        ValueError, LookupError: a bad `io`/`lock` or unknown `encoding`.
    """
    return Database(path, readonly=readonly, encoding=encoding, errors=errors,
                    io=io, lock=lock, sync=sync, lock_timeout=lock_timeout)


def create(path, layout: str = "isis-packed", mstxl: int = 0, *,
           encoding: str = "utf-8", errors: str = "surrogateescape",
           io: str = DEFAULT_IO, sync: bool = True,
           lock_timeout: float = 10.0, fst=None, stw=None,
           max_key: int = 0) -> Database:
    """Create a new, empty CDS/ISIS database and open it for writing.

    Writes ``path.mst`` (control record: NXTMFN 1, NXTMFB 1, NXTMFP 65,
    the MSTXL byte; zero-filled to 512 bytes) and ``path.xrf`` (one block,
    XRFPOS -1), as WinISIS/CISIS do (isis-formats.md §2.1, §3.1).

    Args:
        path: base name of the files (str, bytes or os.PathLike), e.g.
            ``"out/books"``; a path ending in a separator (``"out/"``) is
            refused.
        layout: leader layout (isis-formats.md §2.2): ``"isis-packed"``
            (default: WinISIS / CISIS for Windows; records up to 32767
            bytes), ``"isis-aligned"`` (CISIS for Linux), ``"ffi-packed"``
            or ``"ffi-aligned"`` (CISIS FFI "big records": up to 1 GiB).
        mstxl: MSTXL shift 0..6 (isis-formats.md §2.1, §3.2): records start
            on 2^mstxl-byte boundaries and the master file may grow to
            512 MiB x 2^mstxl (0: 512 MiB; CISIS uses 3 or 6 with FFI).
        encoding, errors, io, sync, lock_timeout: as for :func:`open`.
        fst: None (no inverted index), or FST text, a path to an FST file
            or an iterable of :class:`pydb.fst.FieldRule`, as
            :func:`pydb.build_index` accepts: an empty native index
            (``path.pdx``) is created with these rules and attached, so
            every commit updates it (see :attr:`Database.index`).  Keys
            are UTF-8 (Unicode folding) when `encoding` is UTF-8, else
            8-bit ISIS tables.
        stw, max_key: stop words and key length limit of that index, as
            for :func:`pydb.build_index`.

    Returns:
        A writable :class:`Database`.  An empty database carries no mark of
        its layout: reopen it with the same layout by writing a record
        first, or it is read as ``"isis-packed"`` until then.

    Raises:
        DatabaseExistsError: ``path.mst`` or ``path.xrf`` exists already
            (nothing is overwritten).
        ValueError: unknown layout, mstxl outside 0..6 (one message per
            bad argument), or a path whose base name is empty.
        TypeError: mstxl is not an int.
        DiskError: the files cannot be written.
        FSTError: `fst` does not parse (the database files are created
            but no index is).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if isinstance(mstxl, bool) or not isinstance(mstxl, int):
        raise TypeError(f"mstxl must be an int, not {type(mstxl).__name__}")
    if not 0 <= mstxl <= 6:
        raise ValueError(f"mstxl must be 0..6, not {mstxl}")
    p = os.fsdecode(path)      # str, bytes or os.PathLike, as open() takes
    if os.path.basename(p) in ("", ".", ".."):
        raise ValueError(f"path {p!r} names a directory, not the base name "
                         "of the files (e.g. 'out/books')")
    existing = _existing_file(p)
    if existing is not None:
        raise DatabaseExistsError(17, "the database exists already", existing)
    if fst is not None:
        from .fst import fst_text
        fst = fst_text(fst)            # FSTError before any file is made
    flags = _pydb._create(p, layout, mstxl, sync)
    if fst is not None:
        from .native import build_index
        build_index(p, fst, progress=False, stw=stw, encoding=encoding,
                    max_key=max_key)
    return Database(p, readonly=False, encoding=encoding, errors=errors, io=io,
                    sync=sync, lock_timeout=lock_timeout, _flags=flags)
