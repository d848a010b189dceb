"""Database and Record: the Python face of the C core (pydb._pydb).

:func:`open` and :func:`create` make a :class:`Database` (reads, writes,
transactions, versions, snapshots, validation); its :attr:`Database.index`
is a :class:`pydb.index.Index`, its :meth:`Database.snapshot` a
:class:`pydb.snapshot.Snapshot`.  Paths follow :mod:`pydb.paths`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import _pydb
from .check import CheckReport
from .check import check as _check
from .encoding import EncodingDetection, check_record_codec, conflict, detect_encoding
from .errors import (
    ClosedError,
    CorruptionError,
    DatabaseExistsError,
    DatabaseNotFoundError,
    DiskError,
    EncodingDetectionWarning,
    LockTimeoutError,
    NotFoundError,
    PendingLogWarning,
    StaleIndexWarning,
    UnsupportedError,
)
from .fst import fst_text, read_text
from .index import KEY_MODES, Index, KeyLike, Posting, Term, open_index
from .marc import to_pymarc as _to_pymarc
from .native import build_index, check_max_key, index_command
from .paths import PathArg, base_name, existing_file, has_native_index, new_base_name
from .search import SearchResult
from .snapshot import Snapshot, version_chain
from .subfields import Subfields, parse_subfields

__all__ = ["Database", "Record", "Field", "Transaction", "open", "create",
           "DEFAULT_IO", "LAYOUTS"]

#: Leader layouts a new database can have (docs/isis-formats.md §2.2).
LAYOUTS = ("isis-packed", "isis-aligned", "ffi-packed", "ffi-aligned")
GC_POLICIES = ("none", "background", "cooperative", "combined")
# The binding's get/set descriptor, wrapped by Database.gc_policy below.
_GC_POLICY: Any = _pydb.Database.__dict__["gc_policy"]

Transaction = _pydb.Transaction

#: The default I/O mode, chosen by measurement (see benchmarks/).
DEFAULT_IO = "mmap"

# The open handles of this process, for _after_fork_in_child.
_HANDLES: weakref.WeakSet[Database] = weakref.WeakSet()


IO_MODES = ("pread", "mmap", "direct")
LOCK_MODES = ("none", "mutex")

#: Seconds a handle trusts its finding that the database has no inverted
#: index before it looks again (:attr:`Database.index`): an index another
#: process builds is found within this time, and a loop that asks costs
#: at most one look at the folder per interval.
NO_INDEX_RECHECK = 1.0


def _check_handle_args(encoding: str, errors: str, io: str, lock: str,
                       lock_timeout: float, gc: str) -> None:
    """The arguments :func:`open` and :func:`create` share, checked before
    anything is opened or made (`encoding` "auto" is :func:`open`'s).

    Raises ValueError (a bad `io`, `lock`, `gc` or `lock_timeout`) or
    LookupError (:func:`pydb.encoding.check_record_codec`)."""
    if io not in IO_MODES:
        raise ValueError(f"io must be 'pread', 'mmap' or 'direct', not {io!r}")
    if lock not in LOCK_MODES:
        raise ValueError(f"lock must be 'none' or 'mutex', not {lock!r}")
    if gc not in GC_POLICIES:
        raise ValueError(f"gc must be one of {', '.join(GC_POLICIES)}, not {gc!r}")
    if lock_timeout is None or not 0 <= lock_timeout <= MAX_LOCK_TIMEOUT:
        raise ValueError(f"lock_timeout must be a number of seconds from 0 to "
                         f"{MAX_LOCK_TIMEOUT:.0f} (24 days), not {lock_timeout!r}")
    if encoding != "auto":
        check_record_codec(encoding, errors)


def _after_fork_in_child() -> None:
    """A fork()ed child makes each handle's ``_index_lock`` anew: another
    thread of the parent may have held it at the fork (taking a snapshot,
    opening the index), and no thread of the child would ever release it
    (``snapshot()``, ``.index`` and ``close()`` hung; the core's own locks
    are made anew by its pthread_atfork handlers).  Its one thread is the
    main thread now, whose waits for the writer lock the binding slices
    (signal handlers run between slices).  A transaction another thread
    of the parent had open on a handle is forgotten there: the child can
    begin its own."""
    handles = list(_HANDLES)
    _pydb._forked(handles)
    for db in handles:
        db._index_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)

#: The longest wait for the writer lock, seconds (24 days: the core waits
#: in milliseconds, an int): ``lock_timeout`` and ``timeout`` arguments.
MAX_LOCK_TIMEOUT = 86400.0 * 24

Field = _pydb.Field

#: What Database.append/update and Transaction methods take as a record.
_Value = str | bytes
Fields = (Iterable[tuple[int, _Value]]
          | dict[int, _Value | list[_Value] | tuple[_Value, ...]]
          | _pydb.Record)


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
    encoding and error handler.  Records of one handle may share the same
    ``Field`` object for an equal short value (16 bytes or less; a Field
    is immutable).

    A record pickles (``pickle``, ``copy``; a worker process of
    ``multiprocessing`` gets it as an argument or returns it) with its
    header and its stored bytes, and comes back as it was read, decoded
    with the same encoding and error handler.
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

    def to_pymarc(self, **options: Any) -> Any:
        """This record as a ``pymarc.Record``: :func:`pydb.marc.to_pymarc`
        (same keyword options, returns and raises; needs pymarc,
        ``pip install 'pydb[marc]'``)."""
        return _to_pymarc(self, **options)

    def __repr__(self) -> str:
        state = " deleted" if self.deleted else ""
        return f"<pydb.Record mfn={self.mfn}{state} fields={len(self)}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self.mfn == other.mfn and self.deleted == other.deleted
                and [(f.tag, f.raw) for f in self.fields]
                == [(f.tag, f.raw) for f in other.fields])

    __hash__ = None  # type: ignore[assignment]


# Records are not tracked by the cycle collector: Record adds no __dict__
# and no slot, and the class lives as long as the module.
_pydb._set_record_class(Record, True)


def isis_index_behind(counts: dict[str, int]) -> int:
    """How many records a CDS/ISIS inverted file does not reflect, from
    :meth:`Database.counts` (the XRF flags, docs/isis-formats.md §3.2):
    those pending an update of the inverted file, and those flagged new
    -- unless every record is, which is what a CISIS load leaves whether
    it was inverted or not."""
    new = counts.get("new", 0)
    return counts.get("pending", 0) + (
        new if new < counts["active"] + counts["logically_deleted"] else 0)


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
    commit one change each.

    What readers see (docs/design.md §6): writers publish each commit in
    the commit header ``<base>.shm`` once it is applied, and every read
    -- a record, one batch of an iteration, ``len()``, :meth:`counts`,
    :meth:`terms`, :meth:`postings`, :meth:`search`, :meth:`check`, an
    export -- answers from one published commit: the latest one when the
    call (or batch) starts, in this process or any other.  A commit is
    never seen half applied, but two reads one after the other may see
    two different commits.  For many reads of one commit take a
    :meth:`snapshot`.  A database without a usable header (read-only
    media, another program's files) is read from its control record, as
    other CDS/ISIS programs do.
    """

    def __init__(self, path: PathArg, *, readonly: bool = True, encoding: str | None = None,
                 errors: str = "surrogateescape", io: str = DEFAULT_IO,
                 lock: str = "none", sync: bool = True,
                 lock_timeout: float = 10.0, gc: str = "background",
                 _flags: int = 0) -> None:
        """Open the database at `path`; see :func:`open` for the arguments
        and the exceptions (`_flags`: internal, the flags :func:`create`
        got from the C core)."""
        flags = _flags
        if not readonly:
            flags |= _pydb.OPEN_WRITE
            if not sync:
                flags |= _pydb.OPEN_NOSYNC
        defaulted = encoding is None
        if encoding is None:
            encoding = "utf-8"
        _check_handle_args(encoding, errors, io, lock, lock_timeout, gc)
        auto = encoding == "auto"
        super().__init__(path, encoding="utf-8" if auto else encoding, errors=errors,
                         io=io, lock=lock, flags=flags, gc=gc)
        self._encoding_detection: EncodingDetection | None = None
        self._readonly = not (flags & _pydb.OPEN_WRITE)
        self._sync = not (flags & _pydb.OPEN_NOSYNC)
        try:
            if auto:
                self._detect_encoding(path, errors)
            elif defaulted and not self._readonly:
                self._warn_if_not_utf8(path)
        except BaseException:   # (a warning made an error too)
            super().close()
            raise
        pending = self.info()["log_pending"]
        if pending:
            warnings.warn(
                f"{os.fsdecode(path)}: the write-ahead log holds a committed "
                f"transaction that could not be applied now ({pending}); the "
                "reads show the database as it was before it. Free space and "
                "open the database again to apply it.", PendingLogWarning,
                stacklevel=3)
        self._lock_timeout = float(lock_timeout)
        self._errors = errors
        self._index_lock = threading.Lock()
        _HANDLES.add(self)
        self._index: Index | None = None
        self._index_known = False   # _index is the answer (an Index)
        # when the answer "no index" was last found (time.monotonic()):
        # trusted for NO_INDEX_RECHECK seconds, then looked for again
        self._no_index_at: float | None = None
        # the XRF's (mtime_ns, size) and the end of records when a search
        # last counted how far a CDS/ISIS inverted file is behind
        # (_warn_if_stale)
        self._stale_checked: tuple[int, ...] | None = None
        self._index_attached = False   # commits update a native index
        self._retired: list[Index] = []   # indexes _index served before
        # The pydb.Snapshot objects taken of this handle, so that close()
        # closes their index views before the index (the C handle
        # releases the snapshots themselves).
        self._snapshots: weakref.WeakSet[Snapshot] = weakref.WeakSet()
        if not self._readonly:
            # A writable handle attaches the native index now, so that
            # every commit (also before the first use of .index) updates
            # it in the same transaction; one built later by another
            # handle or process is attached by _attach_built_index.
            try:
                self._attach_built_index()
            except BaseException:
                super().close()
                raise

    def _attach_built_index(self) -> None:
        """Attach the native index of this writable handle's database, if
        there is one and none is attached, and tell the C core as of which
        index generation it looked (the generation read first, so that an
        index built meanwhile is looked for again): a transaction's begin
        calls this again, before anything is written, when a later commit
        names a newer generation (pydb_index_gen_seen, csrc/pydb.h), so
        that an index built by another handle or process after this one
        opened is kept up to date by its commits too.  The native Index
        :attr:`index` opened meanwhile (not attached) is the one attached;
        an index it served before (the ISIS file) is closed with the
        handle.  Another thread of this handle inside a transaction's
        begin makes the attach wait (up to ``lock_timeout``).

        Raises CorruptionError (the index is damaged), LockTimeoutError."""
        with self._index_lock:
            gen = _pydb._index_gen(self)
            if not self._index_attached:
                cached = self._index
                ix = (cached if cached is not None and not cached.closed
                      and cached.kind == "native" else self._open_native_index())
                if ix is not None:
                    self._attach_waiting(ix)
                    if ix is not cached:
                        if cached is not None:
                            self._retired.append(cached)
                        self._index, self._index_known = ix, True
                    self._index_attached = True
            _pydb._index_gen_seen(self, gen)

    def _attach_waiting(self, ix: Index) -> None:
        """_pydb._attach_native_index, tried again while another thread of
        this handle is inside a transaction (the core refuses to change the
        commit hook then), for up to ``lock_timeout`` seconds."""
        deadline = time.monotonic() + self._lock_timeout
        while True:
            try:
                _pydb._attach_native_index(self, ix._h)
                return
            except ValueError as e:
                if "transaction" not in str(e):
                    raise
                if self.__dict__.get("_closing"):
                    raise ClosedError("the database is being closed") from e
                if time.monotonic() >= deadline:
                    raise LockTimeoutError(errno.EAGAIN, "a native index was built "
                                           "meanwhile and another thread's transaction "
                                           f"kept it from being attached: {e}",
                                           str(self.path)) from e
            time.sleep(0.001)

    # -- encoding detection (pydb/encoding.py) ------------------------------
    def _warn_if_not_utf8(self, path: PathArg) -> None:
        """A writable handle of the default encoding (UTF-8): warn
        (EncodingDetectionWarning) when the database's values look to be
        in another, as a str written through it would then be UTF-8
        among them (a new user's review: "Müller" appended to a cp850
        catalogue read back as "M├╝ller", and check() said OK)."""
        det = detect_encoding(self)
        if not det.not_utf8():
            return
        warnings.warn(
            f"{os.fsdecode(path)}: the values look {det.encoding} ({det.reason}), "
            f"but this handle encodes str values as UTF-8, the default: a str "
            f"written through it would be UTF-8 among them. Open with "
            f"encoding='auto' or encoding={det.encoding!r} (bytes are written as "
            f"given either way).", EncodingDetectionWarning, stacklevel=4)

    def _detect_encoding(self, path: PathArg, errors: str) -> None:
        """encoding="auto": detect, set the codec, warn (rule 5 of
        pydb.encoding) when sampled values do not decode cleanly or the
        data contradict the configuration files."""
        det = detect_encoding(self)
        self._set_codec(det.encoding, errors)
        self._encoding_detection = det
        notes = []
        if det.problem_count:
            where = ", ".join(f"MFN {m} tag {t} occurrence {o} offset {off}"
                              for m, t, o, off in det.problems[:3])
            what = ("are not valid UTF-8" if det.encoding == "utf-8"
                    else "are valid UTF-8 with multi-byte sequences (mixed encodings?)")
            notes.append(f"{det.problem_count} of the {det.fields} sampled fields {what}: "
                         f"{where}{', ...' if det.problem_count > 3 else ''}")
        contradiction = conflict(det)
        if contradiction:
            notes.append(contradiction)
        if notes:
            warnings.warn(f"{os.fsdecode(self.info()['mst_path'])}: encoding=\"auto\" chose "
                          f"{det.encoding} ({det.reason}); " + "; ".join(notes),
                          EncodingDetectionWarning, stacklevel=4)

    @property
    def encoding_detection(self) -> EncodingDetection | None:
        """How ``encoding="auto"`` chose :attr:`encoding`: a
        :class:`pydb.encoding.EncodingDetection` (``.encoding``,
        ``.reason``, the sample counts, ``.problems``, ``.summary()``), or
        None when the encoding was given."""
        return self._encoding_detection

    # -- inverted index (docs/isis-formats.md §4-6) -------------------------
    def _native_base(self) -> str | None:
        """The base name whose ``<base>.pdx`` directory holds the native
        index (tried: the path as given, then the .mst's own name), or
        None."""
        bases = [base_name(self.path),
                 base_name(self.info()["mst_path"])]
        for base in bases:
            if has_native_index(base):
                return base
        return None

    def _open_native_index(self) -> Index | None:
        """The native pydb index of this database (``<base>.pdx``, built
        by :func:`pydb.build_index` or :func:`create` with an FST), or
        None.  Raises CorruptionError for a damaged manifest or segment,
        its reason ending with how to build the index anew."""
        base = self._native_base()
        if base is None:
            return None
        try:
            return open_index(base, self.encoding, errors=self._errors)
        except CorruptionError as e:
            raise CorruptionError(e.filename, e.offset,
                                  f"{e.reason} (the native index can be built anew from the "
                                  f"records: python -m pydb index {base})") from e

    def _open_isis_index(self) -> Index | None:
        """The CDS/ISIS inverted file shipped with the database (.cnt +
        classic or LIND files, docs/isis-formats.md §4), or None without one."""
        try:
            return Index.open_isis(self.info()["mst_path"],
                                   encoding=self.encoding,
                                   errors=self._errors)
        except DatabaseNotFoundError:
            return None

    @property
    def index(self) -> Index | None:
        """The inverted index of this database (an :class:`~pydb.index.Index`),
        opened on first use and kept until :meth:`close`; None if the
        database has none.  That answer stands for :data:`NO_INDEX_RECHECK`
        seconds (1.0): a handle asked before another handle or process
        built an index (``pydb index``, :func:`pydb.build_index`) finds it
        at its first call after them (it answered None until closed).

        Precedence: the native pydb index (the directory ``<base>.pdx``,
        made by :func:`pydb.build_index` or ``pydb.create(..., fst=...)``),
        else the CDS/ISIS inverted file that came with the database
        (classic or LIND, docs/isis-formats.md §4; see ``db.index.info``).

        A writable Database attaches its native index when it is opened
        (one built later by another handle or process, at its next
        commit):
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
        if self._index_known:
            if self.closed:
                raise ClosedError("the database is closed")
            return self._index
        with self._index_lock:
            if self.closed:
                raise ClosedError("the database is closed")
            if self._index_known:
                return self._index
            now = time.monotonic()
            if self._no_index_at is not None and now - self._no_index_at < NO_INDEX_RECHECK:
                return None
            ix = self._open_native_index()
            if ix is None:
                ix = self._open_isis_index()
            if ix is None:
                self._no_index_at = now
                return None
            self._index, self._index_known = ix, True
            return ix

    def _require_index(self) -> Index:
        ix = self.index
        if ix is None:
            raise UnsupportedError(errno.ENOENT, "the database has no inverted index "
                                      "(no .cnt/.n0x files)", self.path)
        return ix

    def terms(self, prefix: KeyLike = "", start: KeyLike | None = None) -> Iterator[Term]:
        """Iterate over the keys of the inverted index that start with
        `prefix` and are >= `start`, in key order, as ``Term(key, count)``.

        An uncapped range scan: ``db.terms("Z")`` sees every key that
        starts with Z.  A str prefix/start is brought into key form first
        (upper-cased, docs/isis-formats.md §5.3); bytes are used as they are.
        See :meth:`pydb.index.Index.terms`.

        Raises:
            UnsupportedError: the database has no inverted index.
            CorruptionError: damaged index files (file, offset, reason).
            ClosedError: the database is closed.
        """
        return self._require_index().terms(prefix, start)

    def postings(self, key: KeyLike, *, raw: bool = False) -> list[Posting]:
        """The postings of `key` as a list of ``Posting(mfn, tag, occ,
        cnt)`` sorted ascending (``[]`` if the key is absent).

        A str key the index holds exactly as given is looked up as it is
        (so every key :meth:`terms` yields is found); any other str is
        brought into key form first (``db.postings("london")`` looks up
        ``LONDON``, by the key table of the database's encoding,
        docs/isis-formats.md §5.3); bytes, or ``raw=True``, are looked up
        only as given.  LIND indexes carry no TAG/OCC (0), see ``db.index.caps``.
        See :meth:`pydb.index.Index.postings`.

        Raises:
            UnsupportedError: the database has no inverted index.
            CorruptionError: the posting list is damaged.
            ClosedError: the database is closed.
        """
        return self._require_index().postings(key, raw=raw)

    def search(self, expr: str) -> SearchResult:
        """Search the inverted index with a CDS/ISIS search expression
        (docs/isis-formats.md §6): ``+`` OR, ``*`` AND, ``^`` AND NOT, ``(G)``
        same field, ``(F)`` same occurrence, ``.``/``$`` proximity, ``$``
        right truncation, ``/(tag,...)`` qualifier, parentheses, quoted
        terms (``"A + B"`` is one term; a ``"`` inside one is written
        twice: ``'"5"" FLOPPY"'`` finds the key ``5" FLOPPY``).  See
        :mod:`pydb.search` for the exact semantics.

        Returns:
            A :class:`pydb.search.SearchResult`: the sorted MFNs (1-based)
            of the active records that match; ``.records()`` reads them
            lazily.

        Warns:
            StaleIndexWarning: the index is the CDS/ISIS inverted file that
                came with the database, and the XRF flags records as new or
                changed since it was inverted (pydb never updates it): the
                result misses them or finds them by their old keys.  Once
                per change of the database (its end of records or its XRF
                file), the count in the message.

        Raises:
            UnsupportedError: the database has no inverted index, the
                expression uses (G)/(F)/proximity/qualifiers on an index
                without TAG/OCC (ISIS LIND), or it has a term past ASCII
                and the native index's keys are UTF-8 while this handle's
                encoding is single-byte, or the other way round (the
                database opened with another encoding than the index was
                built with: such a term could match no key).
            SearchSyntaxError: the expression does not parse (``reason``,
                ``position``: 0-based character offset).
            TermEncodeError: `expr` has characters the database's
                encoding cannot represent, even in lower case (such a term
                cannot be a key); a UnicodeEncodeError.
            CorruptionError: damaged index files.
            ClosedError: the database is closed.
            TypeError: `expr` is not a str.
        """
        ix = self._require_index()
        if ix.kind != "native":
            self._warn_if_stale()
        return ix.search(expr, self)

    def _warn_if_stale(self) -> None:
        """Warn (StaleIndexWarning, naming the database and the count) when
        records were added or changed since its CDS/ISIS inverted file was
        made (isis_index_behind); counted again only when the control
        record's end of records or the XRF file changed since the last
        count (a commit, or another program's write or inversion: one stat
        a search)."""
        info = self.info()
        try:
            st = os.stat(info["xrf_path"])
        except OSError:
            return
        stamp = (st.st_mtime_ns, st.st_size, info["next_mfn"], info["next_block"],
                 info["next_pos"])
        if stamp == self._stale_checked:
            return
        self._stale_checked = stamp
        behind = isis_index_behind(self.counts())
        if behind:
            base = os.fsdecode(self.path)
            warnings.warn(
                f"{base}: its CDS/ISIS inverted file is behind the master file: "
                f"{behind} record(s) the XRF flags new or changed since it was inverted "
                "(pydb's writes too) are missed or found by their old keys; invert with "
                f"the ISIS tools, or build a native index: {index_command(base)}",
                StaleIndexWarning, stacklevel=3)

    def snapshot(self) -> Snapshot:
        """Pin the latest published commit for many reads: a
        :class:`pydb.Snapshot` whose records, counts, versions, index
        (terms, postings, search) and validation answer as of that commit
        while writers in this and other processes go on committing.

        Taking one costs a copy of the commit header, a slot of its
        reader table and a view of the index's segment list (no file I/O
        when the header is usable and the index handle is up to date; the
        index is opened first if it was not yet, see :attr:`index`).  Use it as a
        context manager or call ``close()``; it is also released when
        garbage-collected and when this Database is closed::

            with db.snapshot() as snap:
                total = len(snap)
                titles = [rec[24] for rec in snap]

        Raises:
            ClosedError: the database is closed.
            LockTimeoutError: every slot of the reader table (960) is held
                by a live process.
            CorruptionError, DiskError: reading the control record of a
                database without a usable commit header.
        """
        try:
            ix = self.index      # its view is taken with the snapshot
        except (CorruptionError, DiskError):
            ix = None            # raised again by the snapshot's index calls
        # Taken under the lock close() holds while it closes the snapshots
        # it knows and then the index: a snapshot (and its view, which may
        # borrow the index's handle) is never left behind by a close().
        with self._index_lock:
            snap = Snapshot(self, None if ix is None else ix.handle)
            self._snapshots.add(snap)
        return snap

    def close(self) -> None:
        """Close the database, its snapshots and its inverted index
        (idempotent).  Waits for reads in flight in other threads, and a
        close() while another thread's runs returns when that one has
        closed the files; later calls raise :class:`~pydb.ClosedError`."""
        self._closing = True   # an attach spinning under the lock gives up
        lock = self.__dict__.get("_index_lock")
        if lock is not None:
            with lock:
                for snap in list(self._snapshots):
                    snap.close()
                ix = self._index
                if ix is not None:
                    ix.close()
                for old in self._retired:
                    old.close()
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

    def transaction(self, timeout: float | None = None) -> _pydb.Transaction:
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
                the ``lock_timeout`` given to :func:`open`; 0: one try;
                a step of this handle's collector is waited for anyway).

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
            CorruptionError: a native index built by another handle or
                process since this one opened is damaged (file, offset,
                reason); this handle's commits would leave it behind.
            ClosedError: the database is closed.
        """
        return _pydb._txn_begin(self, self._lock_timeout if timeout is None
                                else timeout)

    def append(self, fields: Fields) -> int:
        """Add one record and commit: ``tx.append`` in its own transaction.

        Calls of other threads on this Database that wait meanwhile share
        that transaction and its fsync (group commit, docs/architecture.md
        "Group commit"); each caller still gets its own MFN, its own
        error and its own timeout, and its record is durable (sync=True)
        when the call returns.  The same holds for :meth:`update`,
        :meth:`delete` and :meth:`undelete`.

        Args:
            fields: iterable of ``(tag, value)`` pairs (tag: int 1..65535;
                value: str, encoded with the database's encoding, or bytes),
                a dict ``{tag: value or list of values}`` (the shape of
                :meth:`Record.to_dict`; tags in the dict's order, each
                tag's values in theirs), or a :class:`Record` (its fields
                are copied as stored).

        Returns:
            The new record's MFN (int, 1-based).

        Raises:
            RecordTooLargeError: above the layout's limit (ISIS: 32767
                bytes per record; the FFI layouts allow more).
            TypeError, ValueError: a field that is not a (tag, value)
                pair, a tag that is not an int (a bool is refused) or not
                in 1..65535, a value of another type; the message names
                the field (1-based).  Nothing is written.
            FieldEncodeError: a str value has a character the database's
                encoding cannot hold (field, tag, position; a
                UnicodeEncodeError).  Nothing is written.  (The same for
                :meth:`update` and a transaction's ``append`` and
                ``update``.)
            ReadOnlyError, LockTimeoutError, DiskError: as for
                :meth:`transaction` and ``Transaction.commit``; the
                exception's ``committed`` (:class:`Error`) says whether the
                record was committed anyway (True: do not append it again).
                LockTimeoutError at once when this thread holds an open
                transaction of this Database (the call would wait for it).
        """
        return _pydb._write_one(self, 0, None, fields, self._lock_timeout)

    def update(self, mfn: int, fields: Fields) -> None:
        """Write a new version of record `mfn` (1-based) and commit.  The
        previous version stays in the master file, linked by MFBWB/MFBWP
        (docs/isis-formats.md §2.4; see :meth:`versions`).  Raises
        :class:`~pydb.NotFoundError` if there is no such record, and as
        :meth:`append`."""
        _pydb._write_one(self, 1, mfn, fields, self._lock_timeout)

    def delete(self, mfn: int) -> None:
        """Logically delete record `mfn` and commit (docs/isis-formats.md §2.4,
        §3.2: a new version with STATUS 1, negated XRF pointer; the record
        stays readable with ``deleted`` True).  Raises NotFoundError."""
        _pydb._write_one(self, 2, mfn, None, self._lock_timeout)

    def undelete(self, mfn: int) -> None:
        """Undo the logical deletion of record `mfn` and commit.  Raises
        NotFoundError."""
        _pydb._write_one(self, 3, mfn, None, self._lock_timeout)

    # -- conveniences --------------------------------------------------
    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<pydb.Database {self.path!r} closed>"
        return f"<pydb.Database {self.path!r} max_mfn={self.max_mfn}>"

    def __contains__(self, mfn: object) -> bool:
        """True if `mfn` names an active or logically deleted record."""
        if not isinstance(mfn, int) or mfn < 1 or mfn > self.max_mfn:
            return False
        return self.xrf_entry(mfn)["state"] in ("active", "logically deleted")

    def get(self, mfn: int, default: Any = None) -> Any:
        """``db[mfn]`` (a :class:`Record`), or `default` if there is no such
        record (see :class:`~pydb.NotFoundError`).  Raises as ``db[mfn]``
        otherwise (CorruptionError, ClosedError, DiskError)."""
        try:
            return self[mfn]
        except NotFoundError:
            return default

    @property
    def layout(self) -> str:
        """Leader layout detected from the files: ``"isis-packed"``,
        ``"isis-aligned"``, ``"ffi-packed"`` or ``"ffi-aligned"``
        (docs/isis-formats.md §2.2, §2.5).  Raises
        :class:`~pydb.ClosedError` once closed."""
        return self.info()["layout"]

    def versions(self, mfn: int) -> list[Record]:
        """The current version of `mfn` followed by its back versions
        (newest first), following MFBWB/MFBWP (docs/isis-formats.md §2.4).

        The versions are one master file's: a walk during which a
        compaction replaced the files is begun again (the back versions
        are garbage it may have taken: a later call may return fewer).

        Raises :class:`~pydb.NotFoundError` if there is no such record and
        :class:`~pydb.CorruptionError` if a back pointer does not point
        strictly backwards in the file (which also rules out cycles).
        """
        return version_chain(self, lambda: self[mfn])

    # -- garbage (docs/architecture.md, "Garbage") ---------------------
    @property
    def gc_policy(self) -> str:
        """The garbage collection policy of this handle (str), settable.

        Garbage is what no snapshot or registered reader of any process
        can see any more: back versions of records superseded by a later
        commit, the index postings of such versions, segment files no set
        names.  Policies (Firebird's names):

        - ``"none"``: nothing is collected (not even the index merges
          commits used to do);
        - ``"background"`` (the default): a thread of the handle (plain C,
          never Python) collects in bounded steps, woken by each commit
          and every 200 ms (commits of other processes, idleness: after
          0.5 s without a commit it collects everything collectable);
        - ``"cooperative"``: a reader (a read, an iteration, a search)
          that meets garbage does one small step itself (256 units, about
          a millisecond or less) when no
          other step runs; it never waits;
        - ``"combined"``: both; a reader that finds a step running wakes
          the thread.

        Only a writable handle collects; a read-only one keeps the name.
        Setting a policy starts or stops the thread (stopping joins it:
        it may first finish its step).

        Raises:
            ValueError: an unknown policy name.
            TypeError: not a str.
            MemoryError: the collector thread could not be started (the
                policy is left as it was).
            ClosedError: the database is closed.
        """
        policy: str = _GC_POLICY.__get__(self)
        return policy

    @gc_policy.setter
    def gc_policy(self, policy: str) -> None:
        _GC_POLICY.__set__(self, policy)

    def collect(self, timeout: float = 10.0) -> dict[str, int]:
        """Collect all garbage that is collectable now, on the calling
        thread (the GIL released), whatever the policy; the collector
        thread, if any, goes on and the two never work at the same time.
        While a registered reader (a snapshot, in any process) reads a
        commit behind the latest, the master file's garbage stays and is
        reported as ``pinned``: a reader that registered a second or more
        ago pins it; for younger ones the last step, holding the writer
        lock, waits a bounded time (a second at most, within `timeout`)
        for them to finish (docs/compaction.md).  "Now" is the latest
        commit when the call begins: garbage that other threads or
        processes commit meanwhile is left to the next collection (a
        compaction that replaces a commit at least as new has collected
        the master file's; the index merges only what is due once a
        commit came), so that writers going on do not keep it going.
        Where pydb's writers counted no garbage, the call walks the
        master file (every current version's leader) for dead space that
        other programs left -- WinISIS and CISIS append each update and
        leave the old version, which no XRF entry may reach any more --
        and compacts when it is a fifth of the records' bytes or more
        (padding the compaction would write again not counted), keeping
        the version a CDS/ISIS inverted file reflects of a record
        "update pending" (docs/compaction.md, "When").

        Args:
            timeout: seconds (float >= 0, default 10) the collection may
                take, waits for the writer lock included; looked at
                between steps, so the step under way at the deadline
                ends first (a step is bounded in work, not in time: a
                review measured 0.63 s for 0.5).  In the main thread a
                signal handler (Ctrl-C's KeyboardInterrupt) runs between
                steps, within about 0.5 s of its signal, and its
                exception ends the collection: the steps done stay done.

        Returns:
            What was collected, a dict of ints: ``versions`` (back
            versions removed from the master file), ``bytes`` (master-file
            bytes reclaimed), ``postings`` (dead postings dropped from the
            native index), ``segments`` (segment files removed),
            ``compactions`` (master files replaced), ``pinned`` (garbage
            versions left because a registered reader, in any process,
            was behind the latest commit: the master file is replaced
            whole, so such a reader holds back all of it, where
            :meth:`stat` counts, version by version, what a reader can
            still see).

        Raises:
            ReadOnlyError: the handle was opened read-only.
            LockTimeoutError: the writer lock stayed busy, or the
                collection did not finish, within `timeout` (the message
                says "(waited N ms)"); the steps done stay done.
            DiskError: a collection step failed (ENOSPC during a merge or
                a compaction: the database is left as it was before that
                step, the garbage stays counted, and the message is kept
                as ``stat()["header"]["last_error"]``).
            ValueError: a negative `timeout`.
            ClosedError: the database is closed.
        """
        report: dict[str, int] = super().collect(timeout)
        return report

    def stat(self, *, index: bool = True) -> dict[str, Any]:
        """Statistics of the latest commit, in the spirit of Firebird's
        gstat (``python -m pydb stat DB`` prints them).  Exact: one pass
        over the XRF, the leaders of every version reachable through the
        back pointers, and the native index's segments, as of a snapshot
        of the latest commit (writers go on meanwhile; the GIL is
        released).  The index figures are those of the index attached to
        this handle, else of the database's native index read for them
        (a read-only handle's too).

        Args:
            index: False leaves the native index out (``index`` None, its
                files not read): the figures of a database whose index
                is damaged.

        Returns:
            A dict of dicts (sizes in bytes, versions as counts)::

                header: commit (latest commit number; 0 without a commit
                    header), oldest_reader_commit (the oldest commit a
                    registered reader of any process reads; None: no
                    reader), behind (commits between the two), readers
                    (registered readers now: snapshots of every process),
                    gc_policy (this handle's), file_generation (master
                    files replaced by compaction so far), collections
                    (completed by this handle), last_collection (Unix time
                    of the last, or None), last (what it collected: the
                    dict of collect()), last_error (the last failed
                    collection step's message, or None), pending (bool:
                    this handle's collector may still have work -- a
                    commit since its last idle collection that found
                    nothing, a job in progress, garbage a reader pins;
                    False once quiescent; a read-only handle or the
                    policy none never settles), collector_pid (the process
                    whose collector holds the database's lease -- one
                    process collects at a time -- or None)
                records: active, deleted (logically deleted), next_mfn,
                    damaged (records whose version chain cannot be
                    walked: a damaged leader or back pointer; their
                    versions from the damaged one on are not counted),
                    first_damage (the first one's error as text, or None)
                versions: versions (stored versions reachable from the
                    XRF), back_versions, longest_chain (versions of the
                    record with the most), average_size (bytes, float)
                garbage: versions, bytes (the back versions: superseded
                    by a later commit), postings (dead postings of the
                    native index), segment_files (files no segment set
                    names), pinned_versions, pinned_bytes (garbage a
                    registered reader still sees), collectable_versions,
                    collectable_bytes (the rest)
                master_file: size (bytes of the .mst as of the commit),
                    live_bytes (bytes of the records' current versions),
                    fill (live_bytes / size, float 0..1)
                index: None without a native index (or with
                    ``index=False``), else segments (a
                    file each, or inline in the MANIFEST: small ones),
                    terms, postings (stored, live and dead), dead_postings,
                    tombstones, bytes (of the live segments), files
                    (segment files in the folder), unused_files,
                    unused_bytes

        Raises:
            CorruptionError: a damaged XRF entry, leader or back pointer,
                or a damaged file of the native index (file, byte offset,
                reason).
            DiskError: an I/O error.
            LockTimeoutError: every reader-table slot is held by a live
                process (no snapshot could be taken).
            ClosedError: the database is closed.
        """
        figures: dict[str, Any] = super().stat(index=index)
        return figures

    def check(self, *, max_problems: int = 1000,
              progress: Callable[[int, int], object] | None = None) -> CheckReport:
        """Validate the database: walk the control record, every XRF entry,
        every reachable record version and back-pointer chain, and scan the
        master file for unreachable versions (docs/isis-formats.md §2-3;
        docs/reliability.md §2.1); then read the native index, if there is
        one, as of the latest commit (every key and posting: checksums,
        order, postings only of active records).  Faults in the files are
        reported, never raised.  The walk reads one committed state, the
        latest when it starts (the C core takes a snapshot for it): commits
        made meanwhile by other handles or processes are followed back, not
        reported, so a sound database is judged sound while they write.
        :meth:`pydb.Snapshot.check` validates a given snapshot's commit.

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
            LockTimeoutError: the commit header's reader table is full
                (the check pins the commit it reads, as a snapshot does;
                every process's live snapshots count).
            MemoryError: the work buffers cannot be allocated.
        """
        return _check(self, max_problems=max_problems, progress=progress)


def open(path: PathArg, *, readonly: bool = True, encoding: str | None = None,
         errors: str = "surrogateescape", io: str = DEFAULT_IO,
         lock: str = "none", sync: bool = True,
         lock_timeout: float = 10.0, gc: str = "background") -> Database:
    """Open a CDS/ISIS database.

    Args:
        path: base name (``"data/cds"``) or any file of the database
            (``"data/cds.mst"``, ``"data/CDS.XRF"``); extensions match in
            any case.  str, bytes or os.PathLike.
        readonly: False opens for writing: a write-ahead log ``<base>.wal``
            is created beside the files if missing, and recovery runs if a
            writer crashed in the middle of a commit (it replays a complete
            log, drops a torn one).  Read-only opens also run that recovery
            when they can write the files and no writer is active; one
            that cannot apply the log (a full disk) still opens, shows the
            last applied commit, and warns (:class:`PendingLogWarning`;
            ``info()["log_pending"]`` says why).
        encoding: codec for field values as str (any Python codec name;
            CDS/ISIS files carry no marker, docs/isis-formats.md §9: DOS databases
            are usually ``"cp850"``, WinISIS ``"cp1252"``, ABCD ``"utf-8"``),
            or ``"auto"``: decided from a bounded sample of the records and
            ABCD's configuration files (:func:`pydb.encoding.detect_encoding`:
            ``"utf-8"``, ``"latin-1"``, ``"cp1252"``, ``"cp850"`` or
            ``"cp852"``), kept in :attr:`Database.encoding` with the
            evidence in :attr:`Database.encoding_detection`, and warned
            about (:class:`EncodingDetectionWarning`) when sampled values
            do not decode cleanly in it.  The default (None) is
            ``"utf-8"``, not ``"auto"`` (the command line's default), and
            a handle opened for writing with it samples the records as
            ``"auto"`` does and warns (:class:`EncodingDetectionWarning`)
            when they look to be in another encoding, since a str it
            writes would be UTF-8 among them: code written
            for earlier versions relies on it -- a str written by
            ``append``/``update`` is encoded with the database's codec,
            and surrogateescape'd values re-encode to the stored bytes
            only with the same codec -- and detection reads up to 512
            records at every open.  Bytes are always available through
            ``Field.raw``/``Record.raw``.
        errors: codec error handler; the default ``"surrogateescape"`` never
            fails and re-encodes to the stored bytes.  With ``"strict"`` a
            value that does not decode raises :class:`FieldDecodeError`
            (also a UnicodeDecodeError) naming the master file, the MFN,
            the tag, the occurrence and the byte offset in the value, when
            the value is decoded (``rec.fields``, ``rec[tag]``...).
        io: ``"pread"``, ``"mmap"`` or ``"direct"`` (O_DIRECT: every read
            goes to the disk, bypassing the page cache).
        lock: ``"none"`` or ``"mutex"`` (one mutex serialises every record
            read; for the crashtest's "with mutex" runs).
        sync: with True (default) a commit returns only once it is on the
            disk (its frame of the write-ahead log is fdatasync'ed: one
            fsync per commit; the .mst/.xrf are synced at checkpoints --
            the log past 4 MiB, a collection step, the writer's close --
            and recovery replays the log since the last one): it
            survives kill -9, an OS crash and power loss.  With False
            (as SQLite's ``synchronous=NORMAL`` in WAL mode) a commit
            fsyncs its frame only when it is the first since a checkpoint
            or writes an XRF block (127 MFNs) or index MANIFEST that no
            synced frame of the log holds -- about one commit in 127 of a
            run of appends: a commit that returned survives the process
            being killed (kill -9, a crash of Python), and an OS crash or
            power loss may lose the commits since the last fsync, never
            more, and never leaves a damaged database: recovery replays
            the log's synced frames, which hold every XRF block, control
            record and MANIFEST written in place since the last
            checkpoint (csrc/txn.c, "Commits without fsync").  Where the
            commit header cannot be used (read-only folder, no /proc)
            every commit syncs as with True.
        lock_timeout: seconds a write waits for the writer lock held by
            another thread or process (float, default 10; 0: one try; at
            most :data:`MAX_LOCK_TIMEOUT`, 24 days).  In the main thread
            a signal handler (Ctrl-C's KeyboardInterrupt) runs within
            0.5 s of its signal and its exception ends the wait;
            :meth:`Database.close` ends every wait with ClosedError.
            A step of the handle's own garbage collector, which holds
            the lock briefly (a bounded step), is waited for whatever
            the timeout.
        gc: the garbage collection policy (see :attr:`Database.gc_policy`):
            ``"background"`` (default: a collector thread of the handle,
            woken by commits), ``"cooperative"`` (readers that meet
            garbage collect a little themselves), ``"combined"`` (both) or
            ``"none"`` (nothing is collected).  Only a writable handle
            collects; a read-only one keeps the name and counts.

    Returns:
        A :class:`Database` (also a context manager).

    Raises:
        DatabaseNotFoundError: the .mst or .xrf file is missing.
        CorruptionError: the control record or XRF is damaged (with file,
            byte offset and reason).
        UnsupportedError: big-endian files; ``io="direct"`` where the file
            system refuses O_DIRECT.
        DiskError: another operating-system error (e.g. the folder is not
            writable with ``readonly=False``, or recovery failed), or the
            .mst or .xrf is a directory (errno EISDIR) or another file
            that is not a regular file (EINVAL).
        ValueError, LookupError: a bad `io`/`lock`/`gc`/`lock_timeout`,
            or an `encoding` Python does not know or that cannot be the
            records' (not a text encoding, or refusing `errors`:
            :func:`pydb.encoding.check_record_codec`).
        MemoryError: the collector thread could not be started.

    Warns:
        EncodingDetectionWarning: ``encoding="auto"`` found sampled values
            that do not decode cleanly in the encoding it chose, or data
            that contradict the configuration files.
    """
    return Database(path, readonly=readonly, encoding=encoding, errors=errors,
                    io=io, lock=lock, sync=sync, lock_timeout=lock_timeout, gc=gc)


def create(path: PathArg, layout: str = "isis-packed", mstxl: int = 0, *,
           encoding: str = "utf-8", errors: str = "surrogateescape",
           io: str = DEFAULT_IO, sync: bool = True,
           lock_timeout: float = 10.0, gc: str = "background",
           fst: str | bytes | os.PathLike[str] | Iterable[Any] | None = None,
           stw: str | bytes | os.PathLike[str] | None = None,
           max_key: int = 0, key_mode: str = "unicode") -> Database:
    """Create a new, empty CDS/ISIS database and open it for writing.

    Writes ``path.mst`` (control record: NXTMFN 1, NXTMFB 1, NXTMFP 65,
    the MSTXL byte; zero-filled to 512 bytes) and ``path.xrf`` (one block,
    XRFPOS -1), as WinISIS/CISIS do (docs/isis-formats.md §2.1, §3.1).

    Args:
        path: base name of the files (str, bytes or os.PathLike), e.g.
            ``"out/books"``; a path ending in a separator (``"out/"``) is
            refused.
        layout: leader layout (docs/isis-formats.md §2.2): ``"isis-packed"``
            (default: WinISIS / CISIS for Windows; records up to 32767
            bytes), ``"isis-aligned"`` (CISIS for Linux), ``"ffi-packed"``
            or ``"ffi-aligned"`` (CISIS FFI "big records": up to 1 GiB).
        mstxl: MSTXL shift 0..6 (docs/isis-formats.md §2.1, §3.2): records start
            on 2^mstxl-byte boundaries and the master file may grow to
            512 MiB x 2^mstxl (0: 512 MiB; CISIS uses 3 or 6 with FFI).
        encoding, errors, io, sync, lock_timeout, gc: as for :func:`open`
            (except ``encoding="auto"``: a new database has no data to
            detect an encoding from).
        fst: None (no inverted index), or FST text, a path to an FST file
            or an iterable of :class:`pydb.fst.FieldRule`, as
            :func:`pydb.build_index` accepts: an empty native index
            (``path.pdx``) is created with these rules and attached, so
            every commit updates it (see :attr:`Database.index`).  Keys
            are made by the table `encoding` implies
            (:func:`pydb.index.key_table`: UTF-8 -> Unicode folding,
            Latin-1/cp1252 -> the ANSI table, else the DOS 437/850 one;
            docs/isis-formats.md §5.3), stored with the index and kept,
            with the FST, stop words and `max_key`, when ``python -m pydb
            index`` or :func:`pydb.build_index` rebuilds it.
        stw, max_key: stop words and key length limit of that index, as
            for :func:`pydb.build_index`.
        key_mode: the key mode of that index, a name of
            :data:`pydb.index.KEY_MODES` (docs/isis-formats.md §5.3):
            ``"unicode"`` (default, pydb's rules) or ``"cisis"`` (the keys
            CISIS makes); stored and kept on rebuild as the table is.

    Returns:
        A writable :class:`Database`.  An empty database carries no mark of
        its layout: reopen it with the same layout by writing a record
        first, or it is read as ``"isis-packed"`` until then.

    Raises:
        DatabaseExistsError: ``path.mst`` or ``path.xrf`` exists already
            (nothing is overwritten).
        ValueError: unknown layout, mstxl outside 0..6 (one message per
            bad argument), ``encoding="auto"``, an unknown `key_mode`, a
            `max_key` that is not an int >= 0, or a path whose base name
            is empty.
        TypeError: mstxl is not an int.
        DiskError: the files cannot be written.
        FSTError: `fst` does not parse.
        OSError: an `fst` or `stw` path cannot be read.
        LookupError: `encoding` is not a codec Python knows.

        A create that fails leaves no file behind: its arguments are
        checked before the files are made, and a later failure (writing
        the index) removes the files it made.
    """
    if encoding == "auto":
        raise ValueError('encoding="auto" needs data: give a new database its encoding')
    _check_handle_args(encoding, errors, io, "none", lock_timeout, gc)
    if key_mode not in KEY_MODES:
        raise ValueError(f"key_mode must be one of {', '.join(KEY_MODES)}, not {key_mode!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if isinstance(mstxl, bool) or not isinstance(mstxl, int):
        raise TypeError(f"mstxl must be an int, not {type(mstxl).__name__}")
    if not 0 <= mstxl <= 6:
        raise ValueError(f"mstxl must be 0..6, not {mstxl}")
    p = new_base_name(path)    # str, bytes or os.PathLike, as open() takes
    existing = existing_file(p)
    if existing is not None:
        raise DatabaseExistsError(errno.EEXIST, "the database exists already", existing)
    check_max_key(max_key)
    text = None if fst is None else fst_text(fst)   # FSTError, OSError
    stw_text = None if stw is None else read_text(stw)
    folder = os.path.dirname(p) or "."
    before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    flags = _pydb._create(p, layout, mstxl, sync)
    try:
        if text is not None:
            build_index(p, text, progress=False, stw=stw_text, encoding=encoding,
                        max_key=max_key, key_mode=key_mode)
        return Database(p, readonly=False, encoding=encoding, errors=errors, io=io,
                        sync=sync, lock_timeout=lock_timeout, gc=gc, _flags=flags)
    except BaseException:
        _remove_created(p, before)
        raise


#: What :func:`create` makes beside `base`: master file, XRF, log, commit
#: header, native index folder.
_CREATED = (".mst", ".xrf", ".wal", ".shm", ".pdx")


def _remove_created(base: str, before: set[str]) -> None:
    """Undo a :func:`create` that failed after it made the files: remove
    those of :data:`_CREATED` that its folder did not hold before
    (`before`: the folder's names then) -- never another name, which may
    be another database's (``x.v2.mst`` beside ``x``).  Best effort: what
    cannot be removed stays."""
    folder, name = os.path.split(base)
    for entry in (name + ext for ext in _CREATED):
        path = os.path.join(folder, entry)
        if entry in before or not os.path.lexists(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
