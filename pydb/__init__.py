"""pydb: an embedded record database for Python in the CDS/ISIS tradition.

pydb reads and writes CDS/ISIS master files (.mst) and cross-reference
files (.xrf) as WinISIS, CISIS and ABCD do, through a C core that releases
the GIL whenever it may touch the disk, with atomic, durable transactions
(a write-ahead log beside the files).  Start with :func:`pydb.open` or
:func:`pydb.create`.

Modules, bottom up (each imports only modules above it in this list):
:mod:`pydb.errors` (exceptions), :mod:`pydb.paths` (base names and the
files of a database), :mod:`pydb.mkxrf` (a new XRF from a scan of the
master file), :mod:`pydb.subfields`, :mod:`pydb.encoding`
(a database's character set: detecting it, refusing codecs that cannot
be one), :mod:`pydb.iso2709`, :mod:`pydb.jsonl` and :mod:`pydb.marc`
(exchange formats; MARC records to and from pymarc), :mod:`pydb.fst`
(field select tables), :mod:`pydb.search`
(search language), :mod:`pydb.index` (:class:`~pydb.index.Index`),
:mod:`pydb.native` (building the native index), :mod:`pydb.check`
(validator), :mod:`pydb.snapshot` (:class:`Snapshot`: one commit
pinned), :mod:`pydb.database` (:class:`Database`), :mod:`pydb.exchange`
(import/export between a database and ISO 2709 or JSON Lines files),
:mod:`pydb.arrow` (Arrow and Parquet, with the optional pyarrow), then
the tools (:mod:`pydb.unesb`, :mod:`pydb.ministat`, :mod:`pydb.crashtest`,
:mod:`pydb.gctest`) and the command line (:mod:`pydb.__main__`, with
``pydb._cli``, the help text its parsers and the tools' share).
"""

# First: a source checkout must run its own build of the C extension
# (pydb/_checkout.py raises an ImportError saying how to build it).
from . import _checkout  # noqa: F401  # isort: skip

from .arrow import export_parquet, from_arrow, import_parquet, to_arrow
from .database import DEFAULT_IO, LAYOUTS, Database, Field, Record, Transaction, create, open
from .errors import (
    ClosedError,
    CorruptionError,
    DatabaseExistsError,
    DatabaseNotFoundError,
    DiskError,
    Error,
    FSTError,
    ImportResumeError,
    IsoRecordError,
    LockTimeoutError,
    NotFoundError,
    PendingLogWarning,
    ReadOnlyError,
    RecordTooLargeError,
    SearchSyntaxError,
    StaleIndexWarning,
    UnsupportedError,
)
from .exchange import export_iso, export_jsonl, import_iso, import_jsonl
from .fst import FieldRule, FSTRule, parse_fst
from .index import open_index
from .marc import append_pymarc, from_pymarc, to_pymarc
from .mkxrf import rebuild_xrf
from .native import build_index
from .snapshot import Snapshot
from .subfields import Subfields, parse_subfields

# Encoding detection: pydb.open(path, encoding="auto").
from .encoding import EncodingDetection, detect_encoding  # isort: skip
from .errors import (EncodingDetectionWarning, FieldDecodeError,  # isort: skip
                     FieldEncodeError, TermEncodeError)

__version__ = "0.1.0"

__all__ = [
    "open", "create", "Database", "Record", "Field", "Transaction", "Snapshot",
    "LAYOUTS",
    "Subfields", "parse_subfields",
    "DEFAULT_IO", "Error", "CorruptionError", "NotFoundError", "DiskError",
    "DatabaseNotFoundError", "UnsupportedError", "RecordTooLargeError",
    "ClosedError", "ReadOnlyError", "LockTimeoutError", "SearchSyntaxError",
    "FSTError", "DatabaseExistsError", "IsoRecordError", "PendingLogWarning",
    "StaleIndexWarning",
    "ImportResumeError",
    "__version__",
    "FieldRule", "FSTRule", "parse_fst", "build_index", "open_index", "rebuild_xrf",
    "export_iso", "import_iso", "export_jsonl", "import_jsonl",
    "to_pymarc", "from_pymarc", "append_pymarc",
    "to_arrow", "from_arrow", "export_parquet", "import_parquet",
    "detect_encoding", "EncodingDetection", "EncodingDetectionWarning", "FieldDecodeError",
    "TermEncodeError", "FieldEncodeError",
]
