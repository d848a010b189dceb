"""Database paths: base names, extensions and the files beside a database.

A CDS/ISIS database is a set of files that share a base name
(docs/isis-formats.md §1): ``<base>.mst`` (master file), ``<base>.xrf``
(cross-reference file), optionally ``<base>.fst``/``<base>.stw`` (field
select table, stop words), the ISIS inverted file (``.cnt``, ``.n0x``,
...) and pydb's own ``<base>.wal`` (write-ahead log) and ``<base>.pdx``
(native index directory).  Every function here takes a path as str, bytes
or os.PathLike and works on str; none of them opens a database.

This is the only Python module that knows these rules; the C core has its
own copy for the files it opens (csrc, ``pydb__strip_ext`` and
``pydb__find_file``), with the same case rules.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any, Union

if TYPE_CHECKING:  # typing.TypeIs is 3.13+; only mypy reads it here
    from typing_extensions import TypeIs

__all__ = ["PathArg", "Source", "DB_EXTENSIONS", "OWN_EXTENSIONS", "own_file",
           "is_path", "base_name", "db_base",
           "existing_file", "new_base_name", "find_sidecar", "has_native_index",
           "native_index_dir",
           "source_name", "opened"]

#: A path as pydb accepts it.
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: A path, or a binary file object (exchange files: ISO 2709, JSON Lines).
Source = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]", IO[bytes]]

#: The extensions of the two files that make a database (lower case; any
#: letter case matches).
DB_EXTENSIONS = (".mst", ".xrf")


#: What follows ``<base>.`` in the names of a database's own files (any
#: letter case): the master file pair, pydb's log, commit header, native
#: index (``.pdx``, a folder), the resume file of ``pydb import`` and the
#: files compaction and mkxrf make beside the pair, the ISIS inverted file
#: (classic and LIND, docs/isis-formats.md §4) with its link files, and the
#: definitions beside it.
OWN_EXTENSIONS = frozenset((
    "mst", "xrf", "wal", "shm", "pdx", "resume",
    "mst-compact", "xrf-compact", "mst-swap", "xrf.bak",
    "cnt", "ifp", "n01", "n02", "l01", "l02", "iyp", "iy0", "ly1", "ly2",
    "ln1", "ln2", "lk1", "lk2",
    "fst", "stw", "fdt", "pft", "fmt", "par", "any"))


def own_file(target: PathArg, mst_path: str) -> bool:
    """Whether `target` names (whether it exists or not) one of the files
    of the database whose master file is `mst_path`: a file beside it
    named ``<base>.<ext>`` with an ext of :data:`OWN_EXTENSIONS`, or
    anything inside its ``<base>.pdx`` folder.
    Letter case is not told apart (ISIS files from DOS and Windows are
    found in any case).  An export written there would destroy the
    database or be taken for part of it."""
    folder, mst_name = os.path.split(os.path.abspath(mst_path))
    base = os.path.splitext(mst_name)[0].lower()
    path = os.path.abspath(os.fsdecode(target))
    while True:
        parent, name = os.path.split(path)
        if parent == path:
            return False
        same = (parent == folder or (os.path.isdir(parent) and os.path.isdir(folder)
                                     and os.path.samefile(parent, folder)))
        low = name.lower()
        if same and low.startswith(base + ".") and low[len(base) + 1:] in OWN_EXTENSIONS:
            return True
        path = parent


def is_path(obj: object) -> TypeIs[PathArg]:
    """True if `obj` is a path (str, bytes or os.PathLike), False for
    anything else (such as an open file object)."""
    return isinstance(obj, (str, bytes, os.PathLike))


def base_name(path: PathArg) -> str:
    """`path` as a str without a trailing ``.mst``/``.xrf`` in any letter
    case: the base name of a database's files (``"data/CDS.MST"`` ->
    ``"data/CDS"``, ``"data/cds"`` unchanged).

    Raises TypeError if `path` is not str, bytes or os.PathLike.
    """
    p = os.fsdecode(path)
    root, ext = os.path.splitext(p)
    return root if ext.lower() in DB_EXTENSIONS else p


def _any_case(base: str, ext: str) -> list[str]:
    """The paths in the folder of `base` named ``<name of base>.<ext>`` in
    any letter case, in directory order (as the core's readdir sees
    them); [] where the folder cannot be read."""
    folder, name = os.path.split(base)
    want = f"{name}.{ext}".lower()
    try:
        entries = os.listdir(folder or ".")
    except OSError:
        return []
    return [os.path.join(folder, e) for e in entries if e.lower() == want]


def db_base(path: PathArg) -> str:
    """The base name of the database at `path` as its master file names
    it: :func:`base_name`, its last component spelled as the ``.mst``
    found in any letter case (``"data/CDS"`` -> ``"data/cds"`` for
    ``data/cds.mst``), as the core does (csrc/path.c,
    ``pydb__db_base``); the base as given where no master file is found.
    Names made from it (an import's resume file) are then the same for
    every spelling of the database.

    Raises TypeError if `path` is not str, bytes or os.PathLike."""
    base = base_name(path)
    if any(os.path.isfile(base + ext) for ext in (".mst", ".MST")):
        return base
    masters = [p for p in _any_case(base, "mst") if os.path.isfile(p)]
    return masters[0][:-4] if masters else base


def existing_file(base: str) -> str | None:
    """A master or cross-reference file of `base` that exists (any kind of
    file), or None: does a database exist at `base`?  ``.mst``, ``.xrf``,
    ``.MST`` and ``.XRF`` are tried first, then the directory is searched
    without regard to case (``Cds.Mst``), as the core finds files
    (csrc/path.c)."""
    for ext in (".mst", ".xrf", ".MST", ".XRF"):
        if os.path.exists(base + ext):
            return base + ext
    folder, name = os.path.split(base)
    try:
        entries = sorted(os.listdir(folder or "."))
    except OSError:
        return None
    wanted = {(name + ext).lower() for ext in DB_EXTENSIONS}
    for entry in entries:
        if entry.lower() in wanted:
            return os.path.join(folder, entry)
    return None


def new_base_name(path: PathArg) -> str:
    """`path` as the str base name of a database to be created.

    Unlike :func:`base_name` no extension is stripped (``create("x.mst")``
    makes ``x.mst.mst``, as it always did).

    Raises:
        ValueError: `path` names a directory (it ends in a separator, or
            in ``.``/``..``), not the base name of the files.
        TypeError: `path` is not str, bytes or os.PathLike.
    """
    p = os.fsdecode(path)
    if os.path.basename(p) in ("", ".", ".."):
        raise ValueError(f"path {p!r} names a directory, not the base name "
                         "of the files (e.g. 'out/books')")
    return p


def find_sidecar(db_path: PathArg, ext: str) -> str | None:
    """The file ``<base>.<ext>`` of a database in any letter case (e.g.
    its ``.fst`` or ``.stw``; `ext` without the dot), or None.  `db_path`
    is the base name or a ``.mst``/``.xrf`` file of the database."""
    base = base_name(db_path)
    folder, name = os.path.split(base)
    want = (name + "." + ext).lower()
    for cand in glob.glob(os.path.join(glob.escape(folder or "."), "*")):
        if os.path.basename(cand).lower() == want:
            return cand
    return None


def native_index_dir(db_path: PathArg) -> str:
    """The folder of the native index of the database at `db_path` (its
    base name or a ``.mst``/``.xrf`` file), found as the core finds it
    (csrc/path.c, ``pydb__find_own``): ``<base>.pdx``, ``<base>.PDX``,
    then the name in any letter case where only one master file in the
    folder answers to it; else ``<base>.pdx``.

    Raises TypeError if `db_path` is not str, bytes or os.PathLike."""
    base = base_name(db_path)
    for pdx in (base + ".pdx", base + ".PDX"):
        if os.path.isdir(pdx):
            return pdx
    # a folder in another case is this database's only where no other
    # master file answers to its name ("cds.mst" beside "CDS.MST": two)
    if len(_any_case(base, "mst")) == 1:
        for pdx in _any_case(base, "pdx"):
            if os.path.isdir(pdx):
                return pdx
    return base + ".pdx"


def has_native_index(base: str) -> bool:
    """True if the database with base name `base` has a native pydb index:
    a ``MANIFEST`` in its :func:`native_index_dir`."""
    return os.path.isfile(os.path.join(native_index_dir(base), "MANIFEST"))


def source_name(source: Any) -> str | None:
    """The file name to show in messages about `source`: the path as str,
    the ``name`` of a file object when that is a str, else None."""
    if is_path(source):
        return os.fsdecode(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else None


@contextlib.contextmanager
def opened(source: Source, mode: str) -> Iterator[IO[bytes]]:
    """`source` as a binary file: a path is opened in `mode` (``"rb"`` or
    ``"wb"``) and closed when the block ends; a file object is yielded as
    it is and left open.  Raises OSError when the path cannot be opened."""
    if is_path(source):
        with open(source, mode) as f:
            yield f   # type: ignore[misc]  # open() in a binary mode: IO[bytes]
    else:
        yield source
