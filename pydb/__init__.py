"""pydb: an embedded record database for Python in the CDS/ISIS tradition.

pydb reads CDS/ISIS master files (.mst) and cross-reference files (.xrf)
written by WinISIS, CISIS and ABCD, through a C core that releases the GIL
whenever it may touch the disk.  Start with :func:`pydb.open`.
"""

from .errors import (ClosedError, CorruptionError, DatabaseNotFoundError,
                     DiskError, Error, NotFoundError, RecordTooLargeError,
                     UnsupportedError)
from .database import DEFAULT_IO, Database, Field, Record, open
from .subfields import Subfields, parse_subfields

__version__ = "0.1.0"

__all__ = [
    "open", "Database", "Record", "Field", "Subfields", "parse_subfields",
    "DEFAULT_IO", "Error", "CorruptionError", "NotFoundError", "DiskError",
    "DatabaseNotFoundError", "UnsupportedError", "RecordTooLargeError",
    "ClosedError", "__version__",
]
