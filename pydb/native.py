"""Building pydb's native inverted index from a database and an FST.

The index lives beside the master file in the directory ``<base>.pdx``:
a ``MANIFEST`` (key rules, FST, stop words, live segments) and immutable
segment files (sorted term dictionary in prefix-compressed blocks,
delta/varint-compressed posting lists, tombstones); see csrc/nidx_seg.c and
docs/design.md §5.  Commits made through the write path update the index
in the same transaction (a Database opened for writing attaches its native
index when it opens, see :attr:`pydb.Database.index`): each adds a small
segment whose tombstones hide the superseded postings; past 8 segments a
commit also merges the segments after the bulk-built one.  Rebuilding with
:func:`build_index` replaces the whole index as a commit does (under the
writer lock, through the write-ahead log), so it may run beside writers
in other processes; handles opened before pick the new index up, with
its key rules and FST, at their next call.

Keys are normalised as docs/isis-formats.md §5.3 says (the database's
ISISUC.TAB/ISISAC.TAB when present, else the CDS/ISIS defaults for 8-bit
data, or Unicode case and accent folding for UTF-8); a posting is
(MFN, TAG, OCC, CNT) as in §4.5.  Reading the index: :func:`pydb.open_index`
and :class:`pydb.index.Index`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from . import _pydb
from .encoding import detect_encoding
from .errors import CorruptionError, FSTError
from .fst import fst_text, parse_fst, read_text
from .index import KEY_MODES, KEY_TABLES, Index, key_table
from .paths import PathArg, base_name, find_sidecar

__all__ = ["build_index", "stored_settings", "default_key_mode", "shipped_key_length"]


def check_max_key(max_key: Any) -> None:
    """Raise ValueError unless `max_key` (a key length, bytes) is an int
    >= 0 (0: no limit)."""
    if isinstance(max_key, bool) or not isinstance(max_key, int) or max_key < 0:
        raise ValueError(f"max_key must be an int >= 0 (0: no limit), not {max_key!r}")


def stored_settings(db_path: PathArg) -> dict[str, Any] | None:
    """The settings the native index of the database at `db_path` was
    built with (read from its MANIFEST), which a rebuild keeps unless told
    otherwise.

    Returns:
        None when the database has no native index, else a dict:
        ``utf8`` (bool), ``max_key`` (int, bytes; 0 = no limit), ``mode``
        (str, a name of :data:`pydb.index.KEY_MODES`), ``upper``
        and ``word`` (bytes of 256: the case table and the word characters
        keys were made with, docs/isis-formats.md §5.3), ``fst`` (bytes,
        FST text), ``stw`` (bytes, stop words; ``b""`` for none).

    Raises:
        CorruptionError: the MANIFEST is damaged (file, offset, reason).
        DiskError: it cannot be read.
    """
    return _pydb._native_index_stored(os.fspath(db_path))


def _stored_or_none(db_path: PathArg) -> dict[str, Any] | None:
    """stored_settings(); where the MANIFEST is damaged, those of its spare
    ``MANIFEST.pydb-next`` (the MANIFEST of an earlier commit, which
    commits swap in by renames), with a UserWarning that says so; None
    where that is damaged or missing too.  A rebuild is how a damaged
    index is repaired, so it goes on with what it finds: the FST of an
    index made with ``create(fst=...)`` lives nowhere else."""
    try:
        return stored_settings(db_path)
    except CorruptionError as e:
        damaged = e
    try:
        spare = _pydb._native_index_stored(os.fspath(db_path), True)
    except (CorruptionError, OSError):
        return None
    if spare is not None:
        warnings.warn(f"{damaged}; the settings stored with the index (FST, stop words, "
                      "key tables) are read from its spare MANIFEST.pydb-next (an earlier "
                      "commit's)", UserWarning, stacklevel=3)
    return spare


def shipped_key_length(db_path: PathArg) -> int | None:
    """The maximum key length (LE2, bytes) in the control file (.cnt) of
    the CDS/ISIS inverted file that came with the database at `db_path`
    (docs/isis-formats.md §4.2), or None when it has none or the file
    cannot be read."""
    if find_sidecar(db_path, "cnt") is None:
        return None
    try:
        with Index.open_isis(base_name(db_path)) as ix:
            le2 = ix.info.get("le2")
    except (OSError, CorruptionError):
        return None
    return int(le2) if le2 else None


def default_key_mode(db_path: PathArg) -> str:
    """The key mode a database gets when neither the caller nor an index
    being replaced says: ``"cisis"`` when it came with a CDS/ISIS inverted
    file (``<base>.cnt``) or an FST (``<base>.fst``), whose keys and
    searches assume CISIS's rules, else ``"unicode"``."""
    if find_sidecar(db_path, "cnt") or find_sidecar(db_path, "fst"):
        return "cisis"
    return "unicode"


def _table_of(stored: dict[str, Any]) -> str:
    """The built-in key table a stored index was made with, told by its
    case table: UTF-8 keys are ``"unicode"``; é (cp1252 0xE9) folded to E
    is ``"ansi"``, é (cp850 0x82) folded to E ``"dos"``, neither
    ``"ascii"`` (a table from an ISISUC.TAB counts as the one it is
    nearest to)."""
    if stored["utf8"]:
        return "unicode"
    upper = stored["upper"]
    if upper[0xE9] == ord("E"):
        return "ansi"
    return "dos" if upper[0x82] == ord("E") else "ascii"


def _sniff_keys(db_path: PathArg) -> str:
    """The key table for a database whose index says nothing: the one
    :func:`pydb.index.key_table` gives for the encoding that
    ``pydb.open(path, encoding="auto")`` detects
    (:func:`pydb.encoding.detect_encoding`: with no byte >= 0x80, ABCD's
    .def files, else UTF-8, as pydb writes str values): ``"unicode"`` for
    UTF-8, ``"ansi"`` for Latin-1/cp1252 (WinISIS and ABCD for Windows),
    else ``"dos"``."""
    db = _pydb.Database(os.fspath(db_path))     # read-only, no lock
    try:
        return key_table(detect_encoding(db).encoding)
    finally:
        db.close()


def build_index(db_path: PathArg, fst: str | bytes | os.PathLike[str] | Iterable[Any] | None = None,
                progress: bool | Callable[[int, int], object] = False, *,
                stw: str | bytes | os.PathLike[str] | None = None,
                utf8: bool | None = None, encoding: str | None = None,
                max_key: int | None = None, tables: bool = True,
                keys: str | None = None, memory: int | None = None,
                key_mode: str | None = None,
                on_damaged: Callable[[int, CorruptionError], object] | None = None) -> int:
    """Build (or rebuild) the native index of the database at `db_path`.

    Args:
        db_path: base name or ``.mst``/``.xrf`` file of the database (str,
            bytes or os.PathLike).
        fst: FST text, a path to an FST file (os.PathLike, or a str that
            names a file or ends with ``.fst``: a missing one is
            FileNotFoundError, :func:`pydb.fst.read_text`), or an iterable of
            :class:`pydb.fst.FieldRule`; None uses the database's own
            ``<base>.fst``, else the FST of the index being replaced
            (FileNotFoundError if there is neither).
        progress: False (default) shows nothing; True shows a tqdm progress
            bar (records) on stderr, wherever stderr goes; a callable is
            called as ``progress(done, total)`` between batches.
        stw: stop words (text, bytes or a path, as for `fst`: a str ending
            with ``.stw`` is a path); None uses ``<base>.stw``
            when present (docs/isis-formats.md §5.4), else those of the
            index being replaced.  (An index whose MANIFEST is damaged
            has no settings to keep: the rebuild repairs it.)
        keys: the key table, a name of :data:`pydb.index.KEY_TABLES`
            (docs/isis-formats.md §5.3): ``"unicode"`` (UTF-8, Unicode case
            and accent folding), ``"dos"`` (code pages 437/850),
            ``"ansi"`` (Latin-1/cp1252, as WinISIS/ABCD for Windows),
            ``"ascii"`` (a-z only, other bytes kept as stored).  None:
            from `utf8` or `encoding`, else as below.
        utf8 / encoding: utf8 True is ``keys="unicode"``, False
            ``"dos"``; `encoding` is the database's codec and picks the
            table it implies (:func:`pydb.index.key_table`: UTF-8 ->
            ``"unicode"``, Latin-1/cp1252 -> ``"ansi"``, else ``"dos"``).
            All three None: the tables of the index being replaced, kept
            byte for byte; without one, the table of the encoding that
            ``pydb.open(path, encoding="auto")`` detects
            (:func:`pydb.encoding.detect_encoding`: a sample of the
            records and ABCD's .def files, which decide where no byte is
            >= 0x80, else UTF-8): UTF-8 ``"unicode"``, Latin-1/cp1252
            ``"ansi"``, a DOS code page ``"dos"``.
        key_mode: a name of :data:`pydb.index.KEY_MODES`
            (docs/isis-formats.md §5.3): ``"cisis"`` (the keys CISIS
            makes) or ``"unicode"`` (pydb's rules); None: as the index
            being replaced, else :func:`default_key_mode` (``"cisis"`` for
            a database with a shipped ``.cnt`` or an ``.fst``).
        max_key: keys are cut to this many bytes (0: no limit; 30 gives
            the classic ISIS key length, never inside a UTF-8 sequence);
            None: as the index being replaced; without one, in the
            ``"cisis"`` mode the LE2 of the shipped inverted file's
            control file (:func:`shipped_key_length`), else 0.
        tables: load ISISUC.TAB/ISISAC.TAB from the database's folder when
            present (docs/isis-formats.md §5.3).
        memory: bytes of keys and postings the build holds before it
            sorts them into a run file in the index folder (an external
            sort: the runs are merged into the one segment at the end, the
            same bytes for any budget); None or 0: 64 MiB
            (``PYDB_NIDX_MEMORY_DEFAULT`` of pydb.h).  The build's peak
            memory is about this plus 64 KiB per run merged at the end,
            whatever the size of the database.
        on_damaged: None (default): a record that cannot be read fails
            the build, and the old index stays.  A callable: such a
            record is left out of the index instead, and once the new
            index is in place ``on_damaged(mfn, error)`` is called for
            each (ascending 1-based MFN, the
            :class:`~pydb.CorruptionError` its read raised, naming file,
            byte offset and reason); `db.check()` tells what is damaged.
            At most 10,000 records are left out (PYDB_NIDX_DAMAGED_MAX):
            past that the build fails as without.

    Returns:
        The number of MFNs read (int).  The new index replaces the old one
        atomically, as a commit: under the writer lock, through the
        write-ahead log, with the records other processes committed while
        the build read them included.  Handles opened before see it, and
        make keys by its rules and FST, from their next call (a writable
        Database with the index attached from its next commit).

    Raises:
        FileNotFoundError: `fst` is None and the database has no ``.fst``.
        FSTError: the FST does not parse (``line``, ``reason``).
        DatabaseNotFoundError: the database's .mst or .xrf is missing.
        CorruptionError: a record cannot be read (file, byte offset,
            reason), and `on_damaged` is None.
        DiskError: writing the index failed (the old index stays).
        LockTimeoutError: another writer held the lock for 10 s.
        ReadOnlyError: the database cannot be opened for writing.
        OSError: an `fst` or `stw` path cannot be read.
        ValueError: `keys` is not a name of :data:`~pydb.index.KEY_TABLES`,
            `key_mode` not one of :data:`~pydb.index.KEY_MODES`, or
            `max_key` not an int >= 0.
        LookupError: `encoding` is not a codec Python knows.
        ImportError: ``progress=True`` and tqdm is not installed.
        ValueError: `memory` is negative.

    Warns:
        UserWarning: the index's MANIFEST is damaged and the settings
            stored with it are read from its spare ``MANIFEST.pydb-next``.
    """
    if memory is not None and memory < 0:
        raise ValueError(f"memory must be >= 0 bytes, not {memory}")
    stored = _stored_or_none(db_path)
    if fst is None:
        fst = find_sidecar(db_path, "fst")
        if fst is None and stored is not None:
            fst = stored["fst"]
        if fst is None:
            raise FileNotFoundError(f"{base_name(db_path)}.fst: the database has no FST "
                                    "and no index to take one from; pass fst=")
    text = fst_text(fst)
    stw_bytes: bytes | None
    if stw is None:
        path = find_sidecar(db_path, "stw")
        stw_bytes = read_text(path) if path else None
        if path is None and stored is not None:
            stw_bytes = stored["stw"] or None
    else:
        stw_bytes = read_text(stw)
    upper: bytes | None = None
    word: bytes | None = None
    if key_mode is None:
        key_mode = stored["mode"] if stored is not None else default_key_mode(db_path)
    if key_mode not in KEY_MODES:
        raise ValueError(f"key_mode must be one of {', '.join(KEY_MODES)}, not {key_mode!r}")
    if keys is None:
        if utf8 is not None:
            keys = "unicode" if utf8 else "dos"
        elif encoding is not None:
            keys = key_table(encoding)
        elif stored is not None:      # as built: the stored tables
            keys = _table_of(stored)
            upper = stored["upper"]
            if stored["mode"] == key_mode:    # a new mode: its own word characters
                word = stored["word"]
        else:
            keys = _sniff_keys(db_path)
    if keys not in KEY_TABLES:
        raise ValueError(f"keys must be one of {', '.join(KEY_TABLES)}, not {keys!r}")
    if max_key is not None:
        check_max_key(max_key)
    if max_key is None:
        if stored is not None:
            max_key = stored["max_key"]
        elif key_mode == "cisis":
            max_key = shipped_key_length(db_path) or 0
        else:
            max_key = 0
    bar: Any = None
    callback: Callable[[int, int], object] | None = None
    if progress is True:
        # tqdm is a dependency, imported only when a bar is asked for
        from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]
        bar = tqdm(total=0, unit="rec", desc="index", leave=False)

        def show(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()
        callback = show
    elif callable(progress):
        callback = progress
    try:
        got = _pydb._index_build(os.fspath(db_path), text, callback,
                                 utf8=keys == "unicode", max_key=max_key, stw=stw_bytes,
                                 tables=tables, keys=KEY_TABLES[keys], upper=upper,
                                 word=word, memory=memory or 0,
                                 mode=KEY_MODES[key_mode],
                                 skip_damaged=on_damaged is not None)
    finally:
        if bar is not None:
            bar.close()
    if on_damaged is None:
        return int(got)
    n, damaged = got
    for mfn, error in damaged:
        on_damaged(mfn, error)
    return int(n)


def fst_fault(fst: str) -> str | None:
    """Why the FST file `fst` cannot build an index (its FSTError or
    OSError as text), or None when it parses."""
    try:
        parse_fst(fst)
    except (FSTError, OSError) as e:
        return str(e)
    return None


def index_command(db: str) -> str:
    """The pydb index command that builds a native index of `db`: with
    --fst FILE unless an FST beside the database parses (one that does
    not is named, with why: the command without --fst would fail on it,
    as on ABCD's rda sample, a librarian's trial found)."""
    fst = find_sidecar(db, "fst")
    fault = fst_fault(fst) if fst else None
    if fst and fault is None:
        return f"pydb index {db}"
    why = f" ({fst} beside it does not parse: {fault})" if fst else ""
    return f"pydb index {db} --fst FILE{why}"
