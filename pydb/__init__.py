"""pydb: an embedded record database for Python in the CDS/ISIS tradition.

pydb reads and writes CDS/ISIS master files (.mst) and cross-reference
files (.xrf) as WinISIS, CISIS and ABCD do, through a C core that releases
the GIL whenever it may touch the disk, with atomic, durable transactions
(a write-ahead log beside the files).  Start with :func:`pydb.open` or
:func:`pydb.create`.

Modules, bottom up (each imports only modules above it in this list):
:mod:`pydb.errors` (exceptions), :mod:`pydb.paths` (base names and the
files of a database), :mod:`pydb.subfields`, :mod:`pydb.iso2709` and
:mod:`pydb.jsonl` (exchange formats), :mod:`pydb.fst` (field select
tables), :mod:`pydb.search` (search language), :mod:`pydb.index`
(:class:`~pydb.index.Index`), :mod:`pydb.native` (building the native
index), :mod:`pydb.check` (validator), :mod:`pydb.database`
(:class:`Database`), :mod:`pydb.exchange` (import/export between a
database and ISO 2709 or JSON Lines files), then the tools
(:mod:`pydb.unesb`, :mod:`pydb.ministat`, :mod:`pydb.crashtest`) and the
command line (:mod:`pydb.__main__`).
"""

try:
    from . import _pydb  # noqa: F401  (the C core; every module below needs it)
except ImportError as _e:
    # A source checkout (setup.py beside this folder) without a build of
    # the extension for this interpreter: say what to do.  Anything else
    # (an installed package, a build that fails to load) keeps its error.
    import importlib.machinery as _machinery
    import os as _os

    _here = _os.path.dirname(_os.path.abspath(__file__))
    _root = _os.path.dirname(_here)
    _built = [n for n in _os.listdir(_here) if n.startswith("_pydb.")
              and n.endswith(tuple(_machinery.EXTENSION_SUFFIXES))]
    if not _os.path.isfile(_os.path.join(_root, "setup.py")) or _built:
        raise
    raise ImportError(
        f"pydb is imported from the source checkout {_root}, where the C "
        "extension pydb._pydb is not built for this Python.  Build it there "
        "with `pip install -e .` (editable install) or `python setup.py "
        "build_ext --inplace`, or run from another directory to use an "
        "installed pydb.", name="pydb._pydb") from _e

from .database import DEFAULT_IO, LAYOUTS, Database, Field, Record, Transaction, create, open
from .errors import (
    ClosedError,
    CorruptionError,
    DatabaseExistsError,
    DatabaseNotFoundError,
    DiskError,
    Error,
    FSTError,
    IsoRecordError,
    LockTimeoutError,
    NotFoundError,
    ReadOnlyError,
    RecordTooLargeError,
    SearchSyntaxError,
    UnsupportedError,
)
from .exchange import export_iso, export_jsonl, import_iso, import_jsonl
from .fst import FieldRule, FSTRule, parse_fst
from .index import open_index
from .native import build_index
from .subfields import Subfields, parse_subfields

__version__ = "0.1.0"

__all__ = [
    "open", "create", "Database", "Record", "Field", "Transaction", "LAYOUTS",
    "Subfields", "parse_subfields",
    "DEFAULT_IO", "Error", "CorruptionError", "NotFoundError", "DiskError",
    "DatabaseNotFoundError", "UnsupportedError", "RecordTooLargeError",
    "ClosedError", "ReadOnlyError", "LockTimeoutError", "SearchSyntaxError",
    "FSTError", "DatabaseExistsError", "IsoRecordError", "__version__",
    "FieldRule", "FSTRule", "parse_fst", "build_index", "open_index",
    "export_iso", "import_iso", "export_jsonl", "import_jsonl",
]
