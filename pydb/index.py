"""Inverted index: terms, postings and search (docs/isis-formats.md §4-6).

A posting says where a key occurs: in record ``mfn`` (1-based), under
the FST line ``tag`` (the FST ID, not necessarily a field tag), in the
``occ``-th output line (1-based) of that FST line, at term position
``cnt`` (1-based).  Keys are byte strings in the database's encoding,
normalised as docs/isis-formats.md §5.3 says; they are shown as ``str``
decoded with the database's encoding.

:class:`Index` is the one Python class over every low-level index handle
of the C core (the native pydb index, the CDS/ISIS inverted files that
come with a database, an in-memory index).  :func:`open_index` opens the
native index (``<base>.pdx``, built by :func:`pydb.build_index`);
:meth:`Index.open_isis` opens the ISIS files as they are (classic
``.l01/.l02/.ifp`` with LE 10/30, 16/60, 16/256 or 16/512, packed or
aligned; CISIS LIND ``.ly1/.ly2/.iyp``), without rebuilding;
:attr:`pydb.Database.index` picks whichever a database has.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _pydb
from .errors import UnsupportedError
from .paths import PathArg
from .search import SearchResult, retry_fitted, search

if TYPE_CHECKING:  # for annotations only; database imports this module
    from .database import Database

__all__ = ["Term", "Posting", "Index", "TERM_BATCH", "KEY_TABLES", "KEY_MODES", "key_table",
           "open_index"]

#: Keys fetched per call into the C core (one GIL release per batch), when
#: :meth:`Index.terms` is not given a batch size.
TERM_BATCH = 4096

KeyLike = str | bytes | bytearray | memoryview

#: The built-in key tables (docs/isis-formats.md §5.3), by name, with their
#: numbers in the C core (``enum pydb_keys``): ``"dos"`` (CDS/ISIS for DOS,
#: code pages 437/850), ``"ansi"`` (WinISIS and ABCD for Windows,
#: Latin-1/cp1252), ``"ascii"`` (only a-z upper-cased, bytes 128..255 kept
#: as stored), ``"unicode"`` (UTF-8 with Unicode case and accent folding, as
#: the keys of ABCD's UTF-8 CISIS indexes show: ASOCIACIÓN -> ASOCIACION,
#: Ethiopic kept, words split at Ethiopic and Devanagari punctuation).
KEY_TABLES = {"dos": 0, "ansi": 1, "ascii": 2, "unicode": 3}

#: The key modes of a native index (docs/isis-formats.md §5.3), by name,
#: with their numbers in the C core (``enum pydb_keymode``): ``"cisis"``
#: makes the keys CISIS makes (the word characters of the CISIS
#: installation the key table stands for: digits and ``_`` inside words
#: with the ``ansi`` table, as ABCD for Windows, ``_`` with ``unicode``;
#: the key length of the shipped index), ``"unicode"`` is pydb's own
#: (digits and ``_`` split words; no length limit unless asked).
KEY_MODES = {"unicode": 0, "cisis": 1}

_ANSI_CODECS = frozenset({"iso8859-1", "cp1252", "iso8859-15"})


def key_table(encoding: str) -> str:
    """The built-in key table (a name of :data:`KEY_TABLES`) that a
    database's `encoding` implies: UTF-8 -> ``"unicode"``; Latin-1, cp1252
    and ISO 8859-15 -> ``"ansi"``; any other codec (cp437, cp850, ...) ->
    ``"dos"``.

    Raises:
        LookupError: `encoding` is not a codec Python knows.
    """
    name = codecs.lookup(encoding).name
    if name in ("utf-8", "utf-8-sig"):
        return "unicode"
    return "ansi" if name in _ANSI_CODECS else "dos"


class Term(NamedTuple):
    """A key of the dictionary (str, decoded with the index's encoding)
    and how many postings it has (int)."""
    key: str
    count: int  # type: ignore[assignment]  # shadows tuple.count, on purpose


class Posting(NamedTuple):
    """One occurrence of a key: (MFN, TAG, OCC, CNT), docs/isis-formats.md
    §4.5; MFN, OCC and CNT are 1-based.

    Fields an index does not record are 0: a LIND index
    (docs/isis-formats.md §4.7) has no TAG and OCC, and CNT only in its
    (MFN, CNT) lists; see :attr:`Index.caps`.
    """
    mfn: int
    tag: int
    occ: int
    cnt: int


#: the stored bytes 0x80..0xFF of a value read under surrogateescape
_SURROGATES = re.compile("[\udc80-\udcff]")


class Index:
    """An open inverted index: ordered keys with posting counts, and the
    postings of a key.

    Keys are given and returned as ``str`` in the database's `encoding`
    (bytes are accepted too and used as they are).  The methods release
    the GIL while the C core reads the files, and any number of threads
    may use one Index at once.  Close it with :meth:`close` or a ``with``
    block; a closed Index raises :class:`~pydb.ClosedError`.

    Attributes (read-only): ``kind`` (``"native"``, ``"isis-classic"``,
    ``"isis-lind"`` or ``"memory"``), ``caps`` (dict: which posting fields
    are meaningful, ``{"tag": bool, "occ": bool, "cnt": bool}``),
    ``encoding`` (str), ``errors`` (str, codec error handler),
    ``closed`` (bool), :attr:`info`, :attr:`handle`.
    """

    def __init__(self, handle: _pydb.Index, *, encoding: str = "utf-8",
                 errors: str = "surrogateescape", keys_utf8: bool | None = None) -> None:
        """Wrap a low-level handle (``pydb._pydb.Index``); normally made by
        :func:`open_index`, :meth:`open_isis` or :attr:`pydb.Database.index`.
        The Index owns the handle: :meth:`close` closes it.  `keys_utf8`:
        whether its keys are UTF-8 (True) or single-byte (False), as a
        native index's MANIFEST says; None: not known."""
        self._h = handle
        self.encoding = encoding
        self.errors = errors
        self._keys_utf8 = keys_utf8

    @classmethod
    def open_isis(cls, path: PathArg, *, encoding: str = "utf-8",
                  errors: str = "surrogateescape", keys: str | None = None) -> Index:
        """Open the CDS/ISIS inverted file of a database, as it is.

        Search terms given as str are brought into the key form the index
        was built with (docs/isis-formats.md §5.3): by the database's own
        ``ISISUC.TAB``/``ISISAC.TAB`` when they are beside the ``.cnt``,
        else by the built-in table `keys`; keys are cut to LE2 bytes.  A
        whole term that the index holds exactly as given is looked up as
        it is (see :meth:`postings`).

        Args:
            path: base name of the database (``"data/cds"``) or any of its
                files (``"data/CDS.CNT"``); extensions match in any case.
                str, bytes or os.PathLike.
            encoding: codec of the keys (the database's encoding).
            errors: codec error handler for keys; the default never fails.
            keys: a built-in key table, one of :data:`KEY_TABLES`; None:
                the one `encoding` implies (:func:`key_table`: UTF-8 ->
                ``"unicode"``, Latin-1/cp1252 -> ``"ansi"``, else
                ``"dos"``).

        Returns:
            An :class:`Index` of kind ``"isis-classic"`` or ``"isis-lind"``.
            Where a directory holds both a classic and a LIND file set, the
            one that validates against the ``.cnt``/``.n0x`` files is used
            (docs/isis-formats.md §4.8); :attr:`info` says which and why.

        Raises:
            DatabaseNotFoundError: there is no ``.cnt`` file (the database
                has no inverted file).
            CorruptionError: no file set validates, or an ``ISISUC.TAB`` /
                ``ISISAC.TAB`` is not a table (the file, the byte offset
                and the reason).
            ValueError: `keys` is not a name of :data:`KEY_TABLES`.
            LookupError: `keys` is None and `encoding` is no known codec.
            DiskError: another operating-system error.
        """
        table = key_table(encoding) if keys is None else keys
        if table not in KEY_TABLES:
            raise ValueError(f"keys must be one of {', '.join(KEY_TABLES)}, not {table!r}")
        return cls(_pydb._open_isis_index(os.fspath(path), KEY_TABLES[table]),
                   encoding=encoding, errors=errors)

    # -- attributes ----------------------------------------------------
    @property
    def handle(self) -> _pydb.Index:
        """The low-level :class:`pydb._pydb.Index` handle (for the C-level
        calls of benchmarks and tests)."""
        return self._h

    @property
    def kind(self) -> str:
        """``"native"``, ``"isis-classic"``, ``"isis-lind"`` or ``"memory"``.
        Raises :class:`~pydb.ClosedError` once closed."""
        return self._h.kind

    @property
    def caps(self) -> dict[str, bool]:
        """Which posting fields the index records: ``{"tag": bool, "occ":
        bool, "cnt": bool}`` (a field it does not record is 0 in every
        :class:`Posting`).  Raises :class:`~pydb.ClosedError` once closed."""
        return self._h.caps

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (on this Index or, for an
        attached native index, when its Database closed)."""
        return self._h.closed

    @property
    def info(self) -> dict[str, Any]:
        """What was detected when the index was opened (no I/O).

        For ISIS inverted files: ``kind``, ``le1``/``le2`` (key lengths of
        trees 1 and 2, bytes), ``layout`` (``"packed"`` or ``"aligned"``:
        ``.cnt`` records of 26 or 28 bytes, docs/isis-formats.md §4.2),
        ``key_pad`` (bytes after a 10/30 key in aligned files),
        ``infx``/``infx_align`` (LIND INFO1/INFO3 size and alignment in
        bytes, 0 for classic, §4.7), ``mfn_bytes`` (3, or 4 for LIND4),
        ``cnt`` and ``postings`` (paths), ``trees`` (two dicts: ``empty``,
        ``liv``, ``root``, ``nodes``, ``leaves``, ``node_size``,
        ``leaf_size`` in bytes, ``node_file``, ``leaf_file``), ``note``
        (the file set used and why), ``keys`` (the built-in key table, a
        name of :data:`KEY_TABLES`) and ``tables`` (tuple of the
        ``"ISISUC.TAB"``/``"ISISAC.TAB"`` found beside the ``.cnt`` that
        replace its case map and word characters, docs/isis-formats.md
        §5.3).  Other kinds: ``{"kind": ...}``.

        Raises :class:`~pydb.ClosedError` once closed.
        """
        if self._h.closed:
            _ = self._h.kind  # raises ClosedError
        if self._h.kind.startswith("isis-"):
            info = _pydb._isis_index_info(self._h)
            info["keys"] = next(k for k, v in KEY_TABLES.items() if v == info["keys"])
            info["tables"] = tuple(name for bit, name in ((1, "ISISUC.TAB"), (2, "ISISAC.TAB"))
                                   if info["tables"] & bit)
            return info
        return {"kind": self._h.kind}

    # -- keys ----------------------------------------------------------
    def _bytes(self, value: KeyLike) -> bytes:
        if isinstance(value, str):
            return retry_fitted(lambda v: v.encode(self.encoding, self.errors),
                                value, self.encoding)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise TypeError(f"a key is str or bytes, not {type(value).__name__}")

    def key(self, term: KeyLike) -> bytes:
        """`term` in this index's key form (bytes): the case table of
        docs/isis-formats.md §5.3 (ISIS files: the database's ISISUC.TAB,
        else the built-in table of its encoding, see :meth:`open_isis`;
        native index: the table stored with it, Unicode folding for a
        UTF-8 database), blanks trimmed, truncated to the longest key the
        index stores (LE2 bytes for ISIS files).  Pure computation: it does
        not look at the keys the index holds (:meth:`postings` does).

        Raises :class:`~pydb.ClosedError` once closed, TypeError when
        `term` is neither str nor bytes, :class:`~pydb.TermEncodeError` (a
        UnicodeEncodeError) when a str does not encode with the index's
        encoding and error handler, even with each character the encoding
        lacks in lower case (:func:`pydb.search.fit_case`).
        """
        return self._h.key(self._bytes(term))

    def _prepare(self, value: KeyLike) -> bytes:
        """A str is brought into key form; bytes are taken as they are."""
        if isinstance(value, str):
            return self.key(value)
        return self._bytes(value)

    def _decode(self, key: bytes) -> str:
        return key.decode(self.encoding, self.errors)

    # -- terms ---------------------------------------------------------
    def _pages(self, prefix: bytes, start: bytes | None,
               batch: int | None) -> Iterator[list[tuple[bytes, int]]]:
        """The keys from `start` (inclusive; None: from the prefix) that
        start with `prefix`, as lists of up to `batch` (key, count) pairs
        (default :data:`TERM_BATCH`), one call into the C core each.  A
        short list is the last; each next call starts after the last key
        seen."""
        size = TERM_BATCH if batch is None else batch
        if size < 1:
            raise ValueError(f"batch must be >= 1, not {size}")
        h = self._h
        arg: bytes | tuple[bytes, bool] | None = start
        while True:
            page = h.terms(prefix, arg, size)
            if page:
                yield page
            if len(page) < size:
                return
            arg = (page[-1][0], True)

    def terms(self, prefix: KeyLike = "", start: KeyLike | None = None,
              batch: int | None = None) -> Iterator[Term]:
        """Iterate over the keys that start with `prefix` and are >=
        `start`, in ascending key order, as :class:`Term` (key, count).

        A range scan without cap on the number of keys (ISIS files: the
        B-trees of docs/isis-formats.md §4.3-4.4, tree 1 and tree 2 merged
        in key order; native index: the segments merged, deleted postings
        left out).  Keys are fetched `batch` at a time with the GIL
        released; iteration continues after the last key seen, so a key is
        never repeated, and a commit between two batches is seen from the
        next batch on.

        Args:
            prefix: str (brought into key form: upper-cased and trimmed,
                see :meth:`key`) or bytes (used as they are).  ``""``: all.
            start: the smallest key wanted (inclusive), str (key form) or
                bytes; None (or ``""``) to start at the prefix.  Keys
                compare as byte strings (ISIS trees: blank-padded).
            batch: keys per call into the C core (int >= 1); None:
                :data:`TERM_BATCH` (4096).

        Yields:
            Term(key: str, count: int), count = postings of the key.

        Raises:
            ValueError: `batch` < 1.
            TypeError: `prefix` or `start` is neither str nor bytes.
            CorruptionError: a damaged node, leaf, segment or posting
                header (file, byte offset, reason); keys yielded before
                stay valid.
            ClosedError: the index was closed.
        """
        p = self._prepare(prefix)
        s = None if start is None else self._prepare(start)
        decode = self._decode
        for page in self._pages(p, s, batch):
            for key, count in page:
                yield Term(decode(key), count)

    def raw_terms(self, prefix: bytes = b"", start: bytes | None = None,
                  batch: int | None = None) -> Iterator[tuple[bytes, int]]:
        """As :meth:`terms`, with keys as stored bytes: ``(key: bytes,
        count: int)`` tuples; `prefix` and `start` are bytes used as they
        are.  Raises as :meth:`terms`."""
        s = None if start is None else bytes(start)
        for page in self._pages(bytes(prefix), s, batch):
            yield from page

    # -- postings ------------------------------------------------------
    def postings(self, key: KeyLike, *, raw: bool = False) -> list[Posting]:
        """The postings of exactly one key, sorted by (MFN, TAG, OCC, CNT).

        Args:
            key: a str is looked up as given (encoded, trailing blanks
                trimmed) when the index holds exactly that key -- so every
                key :meth:`terms` yields is found, also one stored in mixed
                case (FST technique 0 without ``mpu``) or by another table
                --, else in key form (:meth:`key`: e.g. ``"psychology"``
                looks up ``PSYCHOLOGY``); bytes, or ``raw=True``, are
                looked up only as given.
            raw: True to skip key normalisation for a str too.

        Returns:
            list of :class:`Posting` (MFN 1-based; fields the index does
            not record are 0, see :attr:`caps`); ``[]`` if the key is
            absent.  Decoded with the GIL released (docs/isis-formats.md §4.5
            classic segments, §4.7 LIND bit strings / MFN lists / (MFN,
            CNT) pairs).

        Raises:
            CorruptionError: the key's posting list is damaged (file, byte
                offset, reason).
            TypeError: `key` is neither str nor bytes.
            ClosedError: the index was closed.
        """
        if raw or not isinstance(key, str):
            k = self._bytes(key)
        else:
            k = self._h.lookup_key(self._bytes(key))
        make = Posting._make
        return [make(t) for t in self._h.postings(k)]

    # -- search --------------------------------------------------------
    def search(self, expr: str, db: Database | None = None) -> SearchResult:
        """Evaluate the CDS/ISIS search expression `expr`
        (docs/isis-formats.md §6) against this index; see
        :func:`pydb.search.search`.  Without `db`, `expr` is encoded with
        this Index's `encoding` and `errors`, so ``'"' + t.key + '"'`` for
        a key from :meth:`terms` (a '"' inside doubled) finds that key.

        Returns:
            A :class:`pydb.search.SearchResult`: sorted distinct MFNs
            (1-based), logically deleted records left out when `db` (the
            :class:`pydb.Database` this index belongs to) is given.

        Raises:
            SearchSyntaxError: the expression does not parse (``position``).
            UnsupportedError: (G), (F), proximity or a qualifier on an index
                whose postings carry no TAG/OCC (ISIS LIND).
            UnsupportedError: a term with a character past ASCII, for a
                native index whose keys are UTF-8 searched with a
                single-byte encoding, or the other way round (such a term
                can match no key: the database was opened with another
                encoding than the index was built with).
            ClosedError, CorruptionError, DiskError: as for :meth:`postings`.
            TypeError: `expr` is not a str.
        """
        self._check_key_encoding(expr, getattr(db, "encoding", None) or self.encoding)
        return search(self._h, expr, db, encoding=self.encoding, errors=self.errors)

    def _check_key_encoding(self, expr: str, encoding: str) -> None:
        """UnsupportedError where `expr`, encoded with `encoding`, cannot
        match a key of this index: it has a character past ASCII, and the
        index's keys are UTF-8 while `encoding` is not, or the other way
        round.  Such a search found nothing, silently (a review: lilacs,
        a Latin-1 database, opened with the default encoding).  Lone
        surrogates U+DC80..U+DCFF do not count: under surrogateescape, the
        handlers' default, they are stored bytes as read (a value of the
        database searched as it was read matches).  The key kind is the
        one the index had when it was opened: after a rebuild in another
        encoding, open the database again.  TypeError where `expr` is not
        a str (every search's first check)."""
        if not isinstance(expr, str):
            raise TypeError(f"a search expression is a str, not {type(expr).__name__}")
        if (self._keys_utf8 is None or expr.isascii()
                or _SURROGATES.sub("", expr).isascii()):
            return
        utf8 = codecs.lookup(encoding).name == "utf-8"
        if utf8 == self._keys_utf8:
            return
        raise UnsupportedError(
            errno.EINVAL,
            f"the index's keys are {'UTF-8' if self._keys_utf8 else 'single-byte'} but the "
            f"search expression is encoded with {encoding}: a term past ASCII could match "
            f"no key (open the database with encoding='auto' or the encoding the index was "
            f"built with)")

    # -- life cycle ----------------------------------------------------
    def close(self) -> None:
        """Release the index files (idempotent; waits for calls in
        flight in other threads)."""
        self._h.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<pydb.Index closed>"
        return f"<pydb.Index {self.kind}>"


def open_index(db_path: PathArg, encoding: str = "utf-8", *,
               errors: str = "surrogateescape") -> Index:
    """Open the native index of the database at `db_path` (the directory
    ``<base>.pdx`` that :func:`pydb.build_index` writes), read-only.

    Args:
        db_path: base name or ``.mst``/``.xrf`` file of the database (str,
            bytes or os.PathLike).
        encoding, errors: codec of the keys, as for :class:`Index`.

    Returns:
        An :class:`Index` of kind ``"native"``; close it when done.  It
        sees commits made through any other handle from its next call on.

    Raises:
        DatabaseNotFoundError: the database has no native index (build one
            with :func:`pydb.build_index`).
        CorruptionError: a damaged MANIFEST or segment (file, byte offset,
            reason).
        DiskError: another operating-system error.
    """
    handle = _pydb._open_native_index(os.fsdecode(db_path))
    try:
        stored = _pydb._native_index_stored(os.fsdecode(db_path))
    except BaseException:
        handle.close()
        raise
    return Index(handle, encoding=encoding, errors=errors,
                 keys_utf8=None if stored is None else stored["utf8"])
