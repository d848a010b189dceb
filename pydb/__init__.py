"""pydb: an embedded record database for Python in the CDS/ISIS tradition.

pydb reads and writes CDS/ISIS master files (.mst) and cross-reference
files (.xrf) as WinISIS, CISIS and ABCD do, through a C core that releases
the GIL whenever it may touch the disk, with atomic, durable transactions
(a write-ahead log beside the files).  Start with :func:`pydb.open` or
:func:`pydb.create`.
"""

import glob as _glob
import os as _os
import sys as _sys


def _find_installed_copy():
    """When this package is imported from a source checkout that has no
    built extension (``pip install .`` puts the build in site-packages, but
    ``python -m pydb`` run in the checkout finds ./pydb first), return the
    folder of an installed pydb that has one, else None."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _glob.glob(_os.path.join(here, "_pydb*.so")) or _glob.glob(_os.path.join(here, "_pydb*.pyd")):
        return None
    for entry in _sys.path:
        cand = _os.path.join(_os.path.abspath(entry or _os.curdir), "pydb")
        if cand != here and _glob.glob(_os.path.join(cand, "_pydb*.so")):
            return cand
    return None


_installed = _find_installed_copy()
if _installed:
    __path__[:] = [_installed]  # load every submodule from the installed build
del _installed

from .errors import (ClosedError, CorruptionError, DatabaseExistsError,
                     DatabaseNotFoundError, DiskError, Error, FSTError,
                     IsoRecordError, LockTimeoutError, NotFoundError, ReadOnlyError,
                     RecordTooLargeError, SearchSyntaxError, UnsupportedError)
from .database import (DEFAULT_IO, LAYOUTS, Database, Field, Record,
                       Transaction, create, open)
from .subfields import Subfields, parse_subfields
from .iso2709 import export_iso, export_jsonl, import_iso, import_jsonl
from .fst import FieldRule, FSTRule, parse_fst
from .native import build_index, open_index

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
