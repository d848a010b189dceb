"""Inverted index: terms, postings and search (isis-formats.md §4-6).

A posting says where a key occurs: in record ``mfn`` (1-based), under
the FST line ``tag`` (the FST ID, not necessarily a field tag), in the
``occ``-th output line (1-based) of that FST line, at term position
``cnt`` (1-based).  Keys are byte strings in the database's encoding,
normalised as isis-formats.md §5.3 says; they are shown as ``str``
decoded with the database's encoding.

:class:`Index` wraps any low-level index handle of the C core (the native
pydb index, the CDS/ISIS inverted files that come with a database, an
in-memory index).  :meth:`Index.open_isis` opens the ISIS files as they
are (classic ``.l01/.l02/.ifp`` with LE 10/30, 16/60, 16/256 or 16/512,
packed or aligned; CISIS LIND ``.ly1/.ly2/.iyp``), without rebuilding.
"""

from __future__ import annotations

import os
from typing import Iterator, NamedTuple, Optional, Union

from . import _pydb

__all__ = ["Term", "Posting", "Index", "TERM_BATCH"]

#: Keys fetched per call into the C core (one GIL release per batch).
TERM_BATCH = 4096

KeyLike = Union[str, bytes, bytearray, memoryview]


class Term(NamedTuple):
    """A key of the dictionary and how many postings it has."""
    key: str
    count: int


class Posting(NamedTuple):
    """One occurrence of a key: (MFN, TAG, OCC, CNT), isis-formats.md §4.5.

    Fields an index does not record are 0: a LIND index (isis-formats.md
    §4.7) has no TAG and OCC, and CNT only in its (MFN, CNT) lists; see
    :attr:`Index.caps`.
    """
    mfn: int
    tag: int
    occ: int
    cnt: int


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
    ``encoding`` (str), ``closed`` (bool), :attr:`info`.
    """

    def __init__(self, handle, *, encoding: str = "utf-8",
                 errors: str = "surrogateescape"):
        """Wrap a low-level handle (``pydb._pydb.Index``); normally made by
        :meth:`open_isis` or :attr:`pydb.Database.index`."""
        self._h = handle
        self.encoding = encoding
        self.errors = errors

    @classmethod
    def open_isis(cls, path, *, encoding: str = "utf-8",
                  errors: str = "surrogateescape") -> "Index":
        """Open the CDS/ISIS inverted file of a database, as it is.

        Args:
            path: base name of the database (``"data/cds"``) or any of its
                files (``"data/CDS.CNT"``); extensions match in any case.
                str, bytes or os.PathLike.
            encoding: codec of the keys (the database's encoding).
            errors: codec error handler for keys; the default never fails.

        Returns:
            An :class:`Index` of kind ``"isis-classic"`` or ``"isis-lind"``.
            Where a directory holds both a classic and a LIND file set, the
            one that validates against the ``.cnt``/``.n0x`` files is used
            (isis-formats.md §4.8); :attr:`info` says which and why.

        Raises:
            DatabaseNotFoundError: there is no ``.cnt`` file (the database
                has no inverted file).
            CorruptionError: no file set validates, with the file, the byte
                offset and the reason.
            DiskError: another operating-system error.
        """
        return cls(_pydb._open_isis_index(os.fspath(path)), encoding=encoding,
                   errors=errors)

    # -- attributes ----------------------------------------------------
    @property
    def kind(self) -> str:
        return self._h.kind

    @property
    def caps(self) -> dict:
        return self._h.caps

    @property
    def closed(self) -> bool:
        return self._h.closed

    @property
    def info(self) -> dict:
        """What was detected when the index was opened (no I/O).

        For ISIS inverted files: ``kind``, ``le1``/``le2`` (key lengths of
        trees 1 and 2, bytes), ``layout`` (``"packed"`` or ``"aligned"``:
        ``.cnt`` records of 26 or 28 bytes, isis-formats.md §4.2),
        ``key_pad`` (bytes after a 10/30 key in aligned files),
        ``infx``/``infx_align`` (LIND INFO1/INFO3 size and alignment in
        bytes, 0 for classic, §4.7), ``mfn_bytes`` (3, or 4 for LIND4),
        ``cnt`` and ``postings`` (paths), ``trees`` (two dicts: ``empty``,
        ``liv``, ``root``, ``nodes``, ``leaves``, ``node_size``,
        ``leaf_size`` in bytes, ``node_file``, ``leaf_file``) and ``note``
        (the file set used and why).  Other kinds: ``{"kind": ...}``.

        Raises :class:`~pydb.ClosedError` once closed.
        """
        if self._h.closed:
            self._h.kind  # raises ClosedError
        if self._h.kind.startswith("isis-"):
            return _pydb._isis_index_info(self._h)
        return {"kind": self._h.kind}

    # -- keys ----------------------------------------------------------
    def _bytes(self, value: KeyLike) -> bytes:
        if isinstance(value, str):
            return value.encode(self.encoding, self.errors)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise TypeError(f"a key is str or bytes, not {type(value).__name__}")

    def key(self, term: KeyLike) -> bytes:
        """`term` in this index's key form (bytes): the case table of
        isis-formats.md §5.3 (ISIS upper-case table; Unicode folding for
        the native index of a UTF-8 database), blanks trimmed, truncated
        to the longest key the index stores (LE2 bytes for ISIS files).

        Raises :class:`~pydb.ClosedError` once closed.
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
    def terms(self, prefix: KeyLike = "", start: Optional[KeyLike] = None,
              ) -> Iterator[Term]:
        """Iterate over the keys that start with `prefix` and are >=
        `start`, in ascending key order, as :class:`Term` (key, count).

        A range scan over the B-trees (isis-formats.md §4.3-4.4, tree 1
        and tree 2 merged in key order): no cap on the number of keys.
        Keys are fetched :data:`TERM_BATCH` at a time with the GIL
        released; iteration continues after the last key seen, so it is
        never repeated.

        Args:
            prefix: str (brought into key form: upper-cased and trimmed,
                see :meth:`key`) or bytes (used as they are).  ``""``: all.
            start: the smallest key wanted (inclusive), str (key form) or
                bytes; None to start at the prefix.  Keys compare as
                blank-padded byte strings, the order of the ISIS trees.

        Yields:
            Term(key: str, count: int), count = postings of the key.

        Raises:
            CorruptionError: a damaged node, leaf or posting header (file,
                byte offset, reason); keys yielded before stay valid.
            ClosedError: the index was closed.
        """
        p = self._prepare(prefix)
        arg = None if start is None else self._prepare(start)
        h = self._h
        decode = self._decode
        while True:
            batch = h.terms(p, arg, TERM_BATCH)
            if not batch:
                return
            for key, count in batch:
                yield Term(decode(key), count)
            if len(batch) < TERM_BATCH:
                return
            arg = (batch[-1][0], True)

    def raw_terms(self, prefix: bytes = b"", start: Optional[bytes] = None,
                  ) -> Iterator[tuple]:
        """As :meth:`terms`, with keys as stored bytes: (key: bytes,
        count: int) tuples; prefix and start are bytes used as they are."""
        arg = None if start is None else bytes(start)
        while True:
            batch = self._h.terms(bytes(prefix), arg, TERM_BATCH)
            yield from batch
            if len(batch) < TERM_BATCH:
                return
            arg = (batch[-1][0], True)

    # -- postings ------------------------------------------------------
    def postings(self, key: KeyLike, *, raw: bool = False) -> list[Posting]:
        """The postings of exactly one key, sorted by (MFN, TAG, OCC, CNT).

        Args:
            key: a str is first brought into key form (:meth:`key`: e.g.
                ``"psychology"`` looks up ``PSYCHOLOGY``); bytes, or
                ``raw=True``, skip that and look the key up as given.
            raw: True to skip key normalisation for a str too.

        Returns:
            list of :class:`Posting` (MFN 1-based; fields the index does
            not record are 0, see :attr:`caps`); ``[]`` if the key is
            absent.  Decoded with the GIL released (isis-formats.md §4.5
            classic segments, §4.7 LIND bit strings / MFN lists / (MFN,
            CNT) pairs).

        Raises:
            CorruptionError: the key's posting list is damaged (file, byte
                offset, reason).
            ClosedError: the index was closed.
        """
        if raw or not isinstance(key, str):
            k = self._bytes(key)
        else:
            k = self.key(key)
        make = Posting._make
        return [make(t) for t in self._h.postings(k)]

    # -- life cycle ----------------------------------------------------
    def search(self, expr: str, db=None):
        """Evaluate the CDS/ISIS search expression `expr` (isis-formats.md
        §6) against this index; see :func:`pydb.search.search`.

        Returns:
            A :class:`pydb.search.SearchResult`: sorted distinct MFNs
            (1-based), logically deleted records left out when `db` (the
            :class:`pydb.Database` this index belongs to) is given.

        Raises:
            SearchSyntaxError: the expression does not parse (``position``).
            UnsupportedError: (G), (F), proximity or a qualifier on an index
                whose postings carry no TAG/OCC (ISIS LIND).
            ClosedError, CorruptionError, DiskError: as for :meth:`postings`.
        """
        from .search import search
        return search(self._h, expr, db)

    def close(self) -> None:
        """Release the index files (idempotent; waits for calls in
        flight in other threads)."""
        self._h.close()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<pydb.Index closed>"
        return f"<pydb.Index {self.kind}>"
