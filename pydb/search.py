"""The CDS/ISIS search language (docs/isis-formats.md §6) over an inverted index.

Expressions combine terms with the operators of docs/isis-formats.md §6.2,
highest precedence first:

==============  ===========================================================
``A . B``       near: same MFN, TAG and OCC, ``|CNT(A) - CNT(B)| <= n``
``A $ B``       exact distance: the same with ``= n``; ``n`` is the number
                of ``.`` (or ``$``) written, each operator surrounded by
                blanks: ``A . . B`` (or ``A .. B``) means n = 2
``A (F) B``     same occurrence: same MFN, TAG and OCC (also ``WITH``)
``A (G) B``     same field: same MFN and TAG
``A * B``       AND (also ``AND``); ``A ^ B`` AND NOT (also ``AND NOT``)
``A + B``       OR (also ``OR``)
==============  ===========================================================

Parentheses group; ``"..."`` quotes a term containing blanks, operators or
parentheses; ``ROOT$`` (or ``"...$"``, ``"..."$``) is right truncation, the
OR of every key that starts with ROOT (no cap; a ``$`` that ends a quoted
term truncates it, as in CISIS, so a key that ends in ``$`` cannot be
searched whole); ``term/(t1,t2)`` keeps the postings of the term whose TAG
(FST line ID) is listed (only directly after a term).  The words AND, OR,
AND NOT, WITH are operators in any case (``and``, ``And``: CISIS's
cib71.c); a bare NOT is a term.

Each operator yields postings, not just MFNs, so positional operators
nest: ``A + B`` keeps both lists, ``A * B`` the postings of A and B in the
records they share, ``A ^ B`` those of A in records without B, ``(G)``,
``(F)`` and proximity the postings of each side that found a partner on
the other side -- ``(A . B) . C`` finds C near A or B where A and B are
near each other.  The answer is the sorted, distinct MFNs; csrc/search_eval.c
has the full definition.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, overload

from . import _pydb
from .errors import NotFoundError, TermEncodeError

if TYPE_CHECKING:  # pragma: no cover
    from .database import Database, Record
    from .snapshot import Snapshot

__all__ = ["SearchResult", "search", "fit_case"]


class SearchResult(Sequence):
    """The records an expression found: a sorted sequence of distinct MFNs
    (int, 1-based) supporting ``len()``, iteration, indexing and slicing
    (a slice is a list of MFNs) and ``mfn in result`` (binary search).

    The MFNs are kept as 32-bit C ints (``array('i')``, 4 bytes per hit,
    filled by one copy from the core's result): ``len()`` makes no Python
    object, and an ``int`` is made only for the MFNs that are indexed,
    iterated or sliced.

    Attributes: ``expr`` (str, the expression), ``mfns`` (tuple of int,
    made on first use), ``db`` (the Database -- or the Snapshot, for a
    search as of its commit -- the MFNs refer to, or None).
    """

    __slots__ = ("expr", "db", "_v", "_tuple")

    def __init__(self, expr: str, mfns, db: Database | Snapshot | None = None):
        """`mfns`: sorted distinct MFNs, as an iterable of int or as the
        core's packed bytes (4 native-endian bytes per MFN)."""
        self.expr = expr
        self.db = db
        self._tuple: tuple[int, ...] | None = None
        if isinstance(mfns, bytes):
            self._v = array("i")
            self._v.frombytes(mfns)
        else:
            self._v = array("i", mfns)

    @property
    def mfns(self) -> tuple[int, ...]:
        """The MFNs as a tuple of int (made once, on first use)."""
        if self._tuple is None:
            self._tuple = tuple(self._v)
        return self._tuple

    def __len__(self) -> int:
        return len(self._v)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._v[i].tolist()
        return self._v[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self._v)

    def __contains__(self, mfn) -> bool:
        if not isinstance(mfn, int):
            return False
        k = bisect_left(self._v, mfn)
        return k < len(self._v) and self._v[k] == mfn

    def __eq__(self, other):
        if isinstance(other, SearchResult):
            return self._v == other._v
        if isinstance(other, (list, tuple)):
            return self._v.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(map(str, self._v[:10]))
        more = ", ..." if len(self._v) > 10 else ""
        return f"<SearchResult {self.expr!r}: {len(self._v)} MFNs [{shown}{more}]>"

    def records(self, batch: int = 256) -> Iterator[Record]:
        """The records of the result in MFN order, read lazily: `batch`
        records (int >= 1) per GIL release (``db.read_many``) as the
        iterator advances.  A record deleted physically since the search is
        skipped; one deleted logically since is yielded with ``deleted``
        True.

        Raises:
            ValueError: the result has no database (``search(..., db=None)``)
                or `batch` < 1.
            ClosedError, CorruptionError, DiskError: from reading the
                master file.
        """
        if self.db is None:
            raise ValueError("this search result has no database to read "
                             "records from (search(..., db=None))")
        if batch < 1:
            raise ValueError("batch must be >= 1")
        return self._records(self.db, batch)

    def _records(self, db, batch: int) -> Iterator[Record]:
        for i in range(0, len(self._v), batch):
            chunk = self._v[i:i + batch].tolist()
            try:
                recs = db.read_many(chunk)
            except NotFoundError:      # one of them is gone: one at a time
                recs = []
                for mfn in chunk:
                    try:
                        recs.append(db[mfn])
                    except NotFoundError:
                        continue
            yield from recs


def fit_case(text: str, encoding: str) -> str:
    """`text` with each character that `encoding` cannot hold replaced by
    its lower-case form where that one fits (else kept as it is).  Keys
    fold case (docs/isis-formats.md §5.3), and code page 437, which DOS
    CDS/ISIS databases use, has ï, é, á and most other accented small
    letters but not their capitals: a search for ``NAÏVE`` then looks up
    the key ``naïve`` makes.  Used by the searches and the key lookups
    only after `text` failed to encode (the common case costs nothing)."""
    out = []
    for ch in text:
        try:
            ch.encode(encoding)
        except UnicodeEncodeError:
            low = ch.lower()
            try:
                low.encode(encoding)
                ch = low
            except UnicodeEncodeError:
                pass
        out.append(ch)
    return "".join(out)


def retry_fitted(run, expr: str, encoding: str):
    """run(expr); where `expr` does not encode, run(fit_case(expr,
    encoding)) if that differs; where that does not encode either,
    :class:`~pydb.errors.TermEncodeError` (`expr`, the first character
    that does not encode)."""
    try:
        return run(expr)
    except UnicodeEncodeError as e:
        fitted, first = fit_case(expr, encoding), e
    try:
        if fitted != expr:
            return run(fitted)
    except UnicodeEncodeError as e:
        first = e
    raise TermEncodeError(encoding, expr, first.start, first.end,
                          first.reason) from first


def search(index, expr: str, db: Database | None = None, *, encoding: str | None = None,
           errors: str | None = None) -> SearchResult:
    """Evaluate the search expression `expr` against `index`.

    Args:
        index: a ``pydb._pydb.Index`` (native, ISIS or in-memory index).
        expr: the expression (str), in the language of this module's
            docstring (docs/isis-formats.md §6).  It is encoded with `db`'s
            encoding and error handler when `db` is given, else with
            `encoding` and `errors` (default UTF-8, strict).  A whole term
            the index holds exactly as written is looked up as it is;
            other terms are brought into the index's key form
            (docs/isis-formats.md §5.3).
        encoding, errors: codec and error handler for `expr` without `db`
            (a :class:`pydb.index.Index` passes its own).
        db: the Database the index belongs to, or None.  With a database,
            MFNs whose records are not active (logically or physically
            deleted, never created) are left out, and
            :meth:`SearchResult.records` can read the records.

    Returns:
        A :class:`SearchResult` (sorted distinct MFNs).

    Raises:
        SearchSyntaxError: the expression does not parse (``reason``,
            ``position``: 0-based character offset of the fault); also for
            expressions over 65,536 bytes or parentheses nested deeper
            than 100.
        UnsupportedError: an operator the index cannot answer: (G), (F),
            proximity or a field qualifier on an index without TAG/OCC
            (ISIS LIND, docs/isis-formats.md §4.7).
        ClosedError: the index or the database is closed.
        CorruptionError, DiskError: reading the index or the XRF failed.
        TermEncodeError: `expr` cannot be encoded in `db`'s encoding,
            even with each character it lacks in lower case (fit_case);
            a UnicodeEncodeError.
        LookupError: `encoding` or `errors` is unknown.
        TypeError: `index` is not an Index, `db` not a Database.
    """
    enc = getattr(db, "encoding", None) or encoding or "utf-8"   # (a bad db: TypeError)
    return SearchResult(expr, retry_fitted(
        lambda e: _pydb._search(index, e, db, encoding, errors), expr, enc), db)
