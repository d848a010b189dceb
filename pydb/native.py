"""pydb's native inverted index: build it from a database and an FST,
open it, enumerate terms and read postings.

The index lives beside the master file in the directory ``<base>.pdx``:
a ``MANIFEST`` (key rules, FST, stop words, live segments) and immutable
segment files (sorted term dictionary in prefix-compressed blocks,
delta/varint-compressed posting lists, tombstones); see csrc/nidx.c.
Commits made through the write path update the index in the same
transaction (csrc/nidx.c, pydb_native_index_attach; a Database opened for
writing attaches its native index when it opens, see
:attr:`pydb.Database.index`): each adds a small
segment whose tombstones hide the superseded postings; past 8 segments a
commit also merges the segments after the bulk-built one.  Rebuilding with
:func:`build_index` replaces the whole index: reopen handles afterwards.

Keys are normalised as isis-formats.md §5.3 says (the database's
ISISUC.TAB/ISISAC.TAB when present, else the CDS/ISIS defaults for 8-bit
data, or Unicode case and accent folding for UTF-8); a posting is
(MFN, TAG, OCC, CNT) as in §4.5.
"""

from __future__ import annotations

import glob
import os
from typing import Callable, Iterator, Optional, Union

from . import _pydb
from .database import _base_name
from .fst import fst_text, read_text
from .index import Posting, Term

__all__ = ["build_index", "open_index", "NativeIndex", "find_sidecar"]


def find_sidecar(db_path, ext: str) -> Optional[str]:
    """The file ``<base>.<ext>`` of a database in any letter case (e.g.
    its ``.fst`` or ``.stw``), or None."""
    base = _base_name(db_path)
    folder, name = os.path.split(base)
    want = (name + "." + ext).lower()
    for cand in glob.glob(os.path.join(glob.escape(folder or "."), "*")):
        if os.path.basename(cand).lower() == want:
            return cand
    return None


def build_index(db_path, fst=None, progress=True, *, stw=None,
                utf8: Optional[bool] = None, encoding: Optional[str] = None,
                max_key: int = 0, tables: bool = True) -> int:
    """Build (or rebuild) the native index of the database at `db_path`.

    Args:
        db_path: base name or any file of the database (str or PathLike).
        fst: FST text, a path to an FST file, or an iterable of
            :class:`pydb.fst.FieldRule`; None uses the database's own
            ``<base>.fst`` (FileNotFoundError if there is none).
        progress: True shows a tqdm progress bar (records), a callable is
            called as ``progress(done, total)`` between batches, False shows
            nothing.
        stw: stop words (text, bytes or a path); None uses ``<base>.stw``
            when present (isis-formats.md §5.4).
        utf8 / encoding: keys are UTF-8 (Unicode case and accent folding)
            when utf8 is True or encoding names UTF-8; else 8-bit ISIS
            tables.
        max_key: keys are cut to this many bytes (0: no limit; 30 gives
            the classic ISIS key length, never inside a UTF-8 sequence).
        tables: load ISISUC.TAB/ISISAC.TAB from the database's folder when
            present (isis-formats.md §5.3).

    Returns the number of MFNs read.  The new index replaces the old one
    atomically.  Raises :class:`~pydb.FSTError`, :class:`~pydb.CorruptionError`,
    :class:`~pydb.DatabaseNotFoundError`, :class:`~pydb.DiskError`.
    """
    if fst is None:
        path = find_sidecar(db_path, "fst")
        if path is None:
            raise FileNotFoundError(f"{_base_name(db_path)}.fst: the database has no FST; "
                                    "pass fst=")
        fst = path
    text = fst_text(fst)
    if stw is None:
        path = find_sidecar(db_path, "stw")
        stw_bytes = read_text(path) if path else None
    else:
        stw_bytes = read_text(stw)
    if utf8 is None:
        utf8 = bool(encoding) and encoding.lower().replace("_", "-") in ("utf-8", "utf8")
    bar = None
    callback: Optional[Callable[[int, int], None]] = None
    if progress is True:
        from tqdm import tqdm
        bar = tqdm(total=0, unit="rec", desc="index", leave=False)

        def callback(done, total):
            bar.total = total
            bar.n = done
            bar.refresh()
    elif callable(progress):
        callback = progress
    try:
        return _pydb._index_build(os.fspath(db_path), text, callback, utf8=bool(utf8),
                                  max_key=max_key, stw=stw_bytes, tables=tables)
    finally:
        if bar is not None:
            bar.close()


class NativeIndex:
    """An open native index (see :func:`open_index`).  Thread-safe; readers
    never wait for a writer."""

    def __init__(self, handle, encoding: str = "utf-8", errors: str = "surrogateescape"):
        self._h = handle
        self.encoding = encoding
        self.errors = errors

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def handle(self):
        """The low-level :class:`pydb._pydb.Index` handle."""
        return self._h

    def close(self) -> None:
        """Release the segment files (idempotent)."""
        self._h.close()

    def key(self, term: Union[str, bytes]) -> bytes:
        """`term` in key form (isis-formats.md §5.3), as bytes."""
        if isinstance(term, str):
            term = term.encode(self.encoding, self.errors)
        return self._h.key(term)

    def terms(self, prefix: Union[str, bytes] = "", start: Union[str, bytes, None] = None,
              batch: int = 4096) -> Iterator[Term]:
        """Keys that start with `prefix` (brought into key form) and are
        >= `start`, in ascending byte order, with their posting counts: a
        range scan without cap, fetched `batch` keys per GIL release."""
        p = self.key(prefix) if prefix else b""
        s = self.key(start) if start else None
        cur = s
        excl = False
        while True:
            chunk = self._h.terms(p, (cur, True) if excl else cur, batch)
            if not chunk:
                return
            for k, c in chunk:
                yield Term(k.decode(self.encoding, self.errors), c)
            cur, excl = chunk[-1][0], True

    def postings(self, key: Union[str, bytes]) -> list[Posting]:
        """The postings of exactly `key` (brought into key form) as a list
        of :class:`~pydb.index.Posting` (mfn, tag, occ, cnt), sorted;
        decoded with the GIL released."""
        return [Posting(*p) for p in self._h.postings(self.key(key))]


def open_index(db_path, encoding: str = "utf-8") -> NativeIndex:
    """Open the native index of the database at `db_path`.

    Raises :class:`~pydb.DatabaseNotFoundError` when the database has no
    native index (build one with :func:`build_index`) and
    :class:`~pydb.CorruptionError` for a damaged manifest or segment.
    """
    return NativeIndex(_pydb._open_native_index(os.fspath(db_path)), encoding)
