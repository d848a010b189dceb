"""Apache Arrow and Parquet: records as columns, for engines past one machine.

:func:`to_arrow` streams the records of a database as Arrow record
batches; :func:`export_parquet` writes them to a Parquet file (or a
directory of Parquet files), which DuckDB, Spark, Polars or pandas read;
:func:`import_parquet` and :func:`from_arrow` bring such data back as a
CDS/ISIS database.  pyarrow is an optional dependency (``pip install
'pydb[arrow]'``); without it these functions raise ImportError and the rest
of pydb works as before.

Two layouts (``rows=``), described in full in docs/parquet.md:

``rows="fields"`` (default), one row per field occurrence, in MFN order
and, within a record, in stored (directory) order:

=========== ============== ==================================================
column      Arrow type     meaning
=========== ============== ==================================================
mfn         int32          the record's MFN (1-based), never null
tag         int32          the field's tag (1..65535)
occ         int32          occurrence number of the tag in the record,
                           1-based: the 2nd field 70 has occ 2, the value
                           ``rec[70][1]`` (not the OCC of index postings,
                           which numbers parts of an FST line's output,
                           docs/isis-formats.md §5.2)
value       string         the field's bytes decoded with the encoding
field_no    int32          position of the field in the record, 1-based
                           (stored order: the record is rebuilt by it)
deleted     bool           the record is logically deleted (exported only
                           with ``deleted=True``), never null
raw         binary         the exact bytes, only when they are not valid in
                           the encoding (``value`` then holds them decoded
                           with U+FFFD replacements); null otherwise
=========== ============== ==================================================

A record without fields is one row with ``tag``, ``occ``, ``value`` and
``field_no`` null, so that it survives the round trip.

``rows="records"``, one row per record: ``mfn`` (int32), ``deleted``
(bool) and ``fields``: list<struct<tag: int32, occ: int32, value: string,
raw: binary>> in stored order.

``subfields="list"`` adds to every field ``indicators`` (string: the two
MARC indicator characters before the first subfield, else null), ``text``
(string: what precedes the first subfield that is not an indicator pair)
and ``subfields``: list<struct<code: string, value: string>>, every
``^x`` subfield in stored order; ``subfields="map"`` makes ``subfields`` a
map<string, string> of the first occurrence of each code instead.  The
split is :func:`pydb.parse_subfields` (``^`` delimiter, codes
lower-cased, docs/isis-formats.md §7.2); it is derived data: imports
ignore it.

The schema carries the key ``pydb`` in its metadata: JSON with
``format`` (1), ``rows``, ``encoding``, ``commit`` (the snapshot's
commit number) and ``max_mfn``.

Exports read through a snapshot (:meth:`pydb.Database.snapshot`): the
output holds exactly the records of one commit while writers go on.
Memory is bounded by the batch: ``batch_records`` records are read (256
per GIL release, in the C core), turned into one Arrow record batch and,
for Parquet, written as one row group (pyarrow encodes and compresses
with the GIL released) before the next batch is read.

Imports (:func:`import_parquet`, :func:`from_arrow`) take either layout,
recognised by its columns, and group the rows of the fields layout into
records by MFN (they must come in MFN order, or be sorted with
``sort=True``).  A NEW database keeps the MFNs (those in between become
physically deleted XRF entries); an EXISTING one gets the records
appended with the MFNs after its highest (as :mod:`pydb.exchange` does for
ISO 2709 and JSON Lines).  ``deleted`` records are stored logically
deleted.

Sources: Apache Parquet format (https://parquet.apache.org/docs/file-format/),
Arrow columnar format (https://arrow.apache.org/docs/format/Columnar.html),
pyarrow's ``pyarrow.parquet.ParquetWriter`` and ``ParquetFile.iter_batches``.
"""

from __future__ import annotations

import importlib
import json
import operator
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .database import Database, Record
from .errors import IsoRecordError
from .exchange import (
    MAX_MFN_GAP,
    Incoming,
    _atomic_target,
    _check_max_gap,
    _db_records,
    _open_db,
    _refuse_own_file,
    _store,
)
from .iso2709 import Report, check_on_error
from .paths import PathArg
from .snapshot import Snapshot
from .subfields import parse_subfields

__all__ = ["to_arrow", "from_arrow", "export_parquet", "import_parquet", "schema",
           "ROWS", "COMPRESSIONS", "DEFAULT_BATCH_RECORDS", "FORMAT_VERSION"]

#: The two layouts: one row per field occurrence, or one row per record.
ROWS = ("fields", "records")
#: Records per Arrow record batch (and Parquet row group) by default.
DEFAULT_BATCH_RECORDS = 16384
#: The version of the layout, written in the schema metadata (key ``pydb``).
FORMAT_VERSION = 1

#: The Parquet codecs export_parquet accepts.
COMPRESSIONS = ("zstd", "snappy", "gzip", "lz4", "brotli", "none")

Progress = Callable[[int], object]


def _pyarrow() -> Any:
    """The pyarrow module (typed Any: mypy runs where pyarrow may be
    absent).  Raises ImportError saying how to install it."""
    try:
        return importlib.import_module("pyarrow")
    except ImportError as e:
        raise ImportError("pydb's Arrow and Parquet support needs pyarrow: "
                          "pip install 'pydb[arrow]'") from e


def _parquet() -> Any:
    _pyarrow()
    return importlib.import_module("pyarrow.parquet")


def _check_rows(rows: str, subfields: str | None) -> None:
    if rows not in ROWS:
        raise ValueError(f"rows must be 'fields' or 'records', not {rows!r}")
    if subfields not in (None, "list", "map"):
        raise ValueError(f"subfields must be None, 'list' or 'map', not {subfields!r}")


def _check_count(name: str, n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} must be an int >= 1, not {n!r}")
    return n


def _subfield_fields(pa: Any, subfields: str | None) -> list[Any]:
    if subfields is None:
        return []
    if subfields == "map":
        sf = pa.map_(pa.string(), pa.string())
    else:
        sf = pa.list_(pa.struct([pa.field("code", pa.string()),
                                 pa.field("value", pa.string())]))
    return [pa.field("indicators", pa.string()), pa.field("text", pa.string()),
            pa.field("subfields", sf)]


def schema(rows: str = "fields", subfields: str | None = None, *,
           metadata: dict[str, Any] | None = None) -> Any:
    """The Arrow schema of a layout (see the module docstring).

    Args:
        rows: ``"fields"`` (one row per field occurrence) or ``"records"``.
        subfields: None, ``"list"`` or ``"map"``.
        metadata: JSON-able dict stored under the schema metadata key
            ``pydb`` (None: no metadata).

    Returns:
        A ``pyarrow.Schema``.

    Raises:
        ImportError: pyarrow is not installed.
        ValueError: a bad `rows` or `subfields`.
    """
    _check_rows(rows, subfields)
    pa = _pyarrow()
    sub = _subfield_fields(pa, subfields)
    if rows == "fields":
        cols = [pa.field("mfn", pa.int32(), nullable=False),
                pa.field("tag", pa.int32()), pa.field("occ", pa.int32()),
                pa.field("value", pa.string()), pa.field("field_no", pa.int32()),
                pa.field("deleted", pa.bool_(), nullable=False),
                pa.field("raw", pa.binary()), *sub]
    else:
        item = pa.struct([pa.field("tag", pa.int32()), pa.field("occ", pa.int32()),
                          pa.field("value", pa.string()), pa.field("raw", pa.binary()),
                          *sub])
        cols = [pa.field("mfn", pa.int32(), nullable=False),
                pa.field("deleted", pa.bool_(), nullable=False),
                pa.field("fields", pa.list_(item))]
    md = None if metadata is None else {b"pydb": json.dumps(metadata).encode()}
    return pa.schema(cols, metadata=md)


# ----------------------------------------------------------------- export

def _decode(pa: Any, raws: list[bytes], encoding: str) -> tuple[Any, Any]:
    """(value array, raw array) of a batch's field bytes: `raws` decoded
    with `encoding`; a value that is not valid there is decoded with
    U+FFFD replacements and its bytes kept in the raw array (null
    elsewhere).  UTF-8 is validated by Arrow's cast, in C."""
    if encoding.replace("-", "").replace("_", "").lower() in ("utf8", "u8"):
        arr = pa.array(raws, pa.binary())
        try:
            return arr.cast(pa.string()), pa.nulls(len(raws), pa.binary())
        except pa.ArrowInvalid:
            pass
    try:
        return pa.array([r.decode(encoding) for r in raws], pa.string()), \
            pa.nulls(len(raws), pa.binary())
    except UnicodeDecodeError:
        pass
    values: list[str] = []
    kept: list[bytes | None] = []
    for r in raws:
        try:
            values.append(r.decode(encoding))
            kept.append(None)
        except UnicodeDecodeError:
            values.append(r.decode(encoding, "replace"))
            kept.append(r)
    return pa.array(values, pa.string()), pa.array(kept, pa.binary())


def _split(pa: Any, values: Any, subfields: str) -> list[Any]:
    """The indicators, text and subfields arrays of `values` (an Arrow
    string array, nulls for records without fields)."""
    ind: list[str | None] = []
    text: list[str | None] = []
    subs: list[Any] = []
    as_map = subfields == "map"
    for v in values.to_pylist():
        if v is None:
            ind.append(None)
            text.append(None)
            subs.append(None)
            continue
        s = parse_subfields(v)
        ind.append(s.indicators)
        text.append(s.text)
        if as_map:
            subs.append(list(s.items()))
        else:
            subs.append([{"code": c, "value": x} for c, x in s.items_])
    types = _subfield_fields(pa, subfields)
    return [pa.array(ind, pa.string()), pa.array(text, pa.string()),
            pa.array(subs, types[2].type)]


_RAW = operator.attrgetter("raw")
_ONES = [1] * 64


class _Columns:
    """The columns of one batch, filled a record at a time (the Record
    itself is not kept: each holds its raw bytes), then made into an Arrow
    record batch by :meth:`batch`."""

    def __init__(self, rows: str) -> None:
        self.per_field = rows == "fields"
        self.records = 0
        self.mfns: list[int] = []
        self.dels: list[bool] = []
        self.tags: list[int | None] = []
        self.occs: list[int | None] = []
        self.nos: list[int | None] = []
        self.raws: list[bytes] = []
        self.offsets = [0]
        self.empty: list[int] = []        # rows of records without fields

    def add(self, rec: Record) -> None:
        self.records += 1
        m, d = rec.mfn, rec.deleted
        fl = rec.fields
        k = len(fl)
        raws = self.raws
        if not k:
            self.mfns.append(m)
            self.dels.append(d)
            if self.per_field:
                self.empty.append(len(raws))
                self.tags.append(None)
                self.occs.append(None)
                self.nos.append(None)
                raws.append(b"")
            else:
                self.offsets.append(len(raws))
            return
        tg = rec.tags
        self.tags.extend(tg)
        raws.extend(map(_RAW, fl))
        self.nos.extend(range(1, k + 1))
        if len(set(tg)) == k:             # no repeated tag: every occ is 1
            self.occs.extend(_ONES[:k] if k <= len(_ONES) else [1] * k)
        else:
            seen: dict[int, int] = {}
            occs = self.occs
            for t in tg:
                o = seen[t] = seen.get(t, 0) + 1
                occs.append(o)
        if self.per_field:
            self.mfns.extend([m] * k)
            self.dels.extend([d] * k)
        else:
            self.mfns.append(m)
            self.dels.append(d)
            self.offsets.append(len(raws))

    def batch(self, pa: Any, sch: Any, subfields: str | None, encoding: str) -> Any:
        """The Arrow record batch of the records added, in the schema `sch`."""
        values, raw = _decode(pa, self.raws, encoding)
        if self.empty:
            mask = [False] * len(self.raws)
            for i in self.empty:
                mask[i] = True
            pc = importlib.import_module("pyarrow.compute")
            values = pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), values)
        sub = [] if subfields is None else _split(pa, values, subfields)
        int32 = pa.int32()
        if self.per_field:
            cols = [pa.array(self.mfns, int32), pa.array(self.tags, int32),
                    pa.array(self.occs, int32), values, pa.array(self.nos, int32),
                    pa.array(self.dels, pa.bool_()), raw, *sub]
            return pa.RecordBatch.from_arrays(cols, schema=sch)
        item_type = sch.field("fields").type.value_type
        items = pa.StructArray.from_arrays(
            [pa.array(self.tags, int32), pa.array(self.occs, int32), values, raw, *sub],
            fields=list(item_type))
        lists = pa.ListArray.from_arrays(pa.array(self.offsets, int32), items)
        return pa.RecordBatch.from_arrays(
            [pa.array(self.mfns, int32), pa.array(self.dels, pa.bool_()), lists], schema=sch)


def _batches(snap: Snapshot, sch: Any, rows: str, subfields: str | None,
             encoding: str, deleted: bool, batch_records: int, on_error: str,
             report: Report, progress: Progress | None,
             part_records: int | None = None) -> Iterator[tuple[Any, bool]]:
    """(record batch, ends a part) pairs of `snap`: `batch_records`
    records a batch; with `part_records`, a batch also ends after every
    `part_records` records, and the pair says so.  The records are read
    256 per GIL release (:func:`pydb.exchange._db_records`) and turned
    into columns as they come, so only the columns of one batch are held."""
    pa = _pyarrow()
    cols = _Columns(rows)
    in_part = 0
    for rec in _db_records(snap, deleted, on_error, report, progress):
        cols.add(rec)
        in_part += 1
        report.records += 1
        report.deleted += bool(rec.deleted)
        end = part_records is not None and in_part >= part_records
        if end or cols.records >= batch_records:
            yield cols.batch(pa, sch, subfields, encoding), end
            cols = _Columns(rows)
            if end:
                in_part = 0
    if cols.records:
        yield cols.batch(pa, sch, subfields, encoding), True


def _metadata(snap: Snapshot, rows: str, encoding: str) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, "rows": rows, "encoding": encoding,
            "commit": snap.commit, "max_mfn": snap.max_mfn}


def to_arrow(db: Database | PathArg, *, rows: str = "fields", subfields: str | None = None,
             deleted: bool = False, encoding: str | None = None,
             batch_records: int = DEFAULT_BATCH_RECORDS, on_error: str = "skip",
             progress: Progress | None = None) -> Any:
    """The records of a database as a stream of Arrow record batches.

    Args:
        db: an open :class:`pydb.Database`, or the path of one (opened
            read-only, closed when the stream ends or is closed).
        rows: ``"fields"`` (default: one row per field occurrence) or
            ``"records"`` (one row per record); schemas in the module
            docstring and docs/parquet.md.
        subfields: None (default), ``"list"`` or ``"map"``: add the
            subfield split of every value (:func:`pydb.parse_subfields`).
        deleted: also include logically deleted records (``deleted``
            true).
        encoding: the character set the field bytes are decoded with
            (default: the Database's ``encoding``; ``"utf-8"`` for a
            path).  Bytes not valid in it go to the ``raw`` column, so the
            stream is lossless for any content.
        batch_records: records per record batch (default 16384): what
            bounds the memory the stream holds.
        on_error: ``"skip"`` (default): a record the core cannot read
            (:class:`~pydb.CorruptionError`) is left out; ``"stop"``: it
            is raised while iterating.
        progress: called with 1 per MFN read.

    Returns:
        A ``pyarrow.RecordBatchReader`` (``.read_all()`` gives a Table;
        DuckDB and Polars query it directly).  The records are those of
        one commit: the reader holds a snapshot taken by this call until
        it is exhausted or closed.

    Raises:
        ImportError: pyarrow is not installed.
        ValueError: a bad `rows`, `subfields`, `batch_records` or
            `on_error`.
        LookupError: unknown `encoding`.
        DatabaseNotFoundError: `db` is a path with no database.
        ClosedError: `db` is closed.
        CorruptionError: with ``on_error="stop"``, while reading.
    """
    _check_rows(rows, subfields)
    _check_count("batch_records", batch_records)
    check_on_error(on_error)
    pa = _pyarrow()
    handle, close = _open_db(db)
    enc = encoding or handle.encoding
    try:
        "".encode(enc)
        snap = handle.snapshot()
    except BaseException:
        if close:
            handle.close()
        raise
    sch = schema(rows, subfields, metadata=_metadata(snap, rows, enc))

    def gen() -> Iterator[Any]:
        try:
            for b, _ in _batches(snap, sch, rows, subfields, enc, deleted, batch_records,
                                 on_error, Report(), progress):
                yield b
        finally:
            snap.close()
            if close:
                handle.close()

    return pa.RecordBatchReader.from_batches(sch, gen())


def _replaceable_dir(path: str) -> bool:
    """True if `path` is a directory holding nothing but part files of an
    earlier partitioned export (``part-NNNNN.parquet``)."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return all(n.startswith("part-") and n.endswith(".parquet") for n in names)


def export_parquet(db: Database | PathArg, path: PathArg, *, rows: str = "fields",
                   subfields: str | None = None, deleted: bool = False,
                   encoding: str | None = None, batch_records: int = DEFAULT_BATCH_RECORDS,
                   partition_records: int | None = None, compression: str = "zstd",
                   on_error: str = "skip", progress: Progress | None = None) -> Report:
    """Export the records of a database to Parquet, in MFN order.

    Args:
        db: an open :class:`pydb.Database`, or the path of one.
        path: the Parquet file to write (replaced if it exists); with
            `partition_records`, the directory to write (created; an
            existing one is replaced only if it holds nothing but
            ``part-*.parquet`` files).
        rows, subfields, deleted, encoding, on_error, progress: as for
            :func:`to_arrow`.
        batch_records: records per row group (default 16384); also the
            number of records held in memory at once.
        partition_records: None (default): one file.  Else a directory of
            files ``part-00000.parquet``, ``part-00001.parquet``, ...,
            each holding this many records (the last fewer) in MFN order,
            so the parts can be read in parallel (DuckDB
            ``read_parquet('DIR/*.parquet')``, Spark
            ``spark.read.parquet('DIR')``).
        compression: Parquet codec (``"zstd"`` default, ``"snappy"``,
            ``"gzip"``, ``"lz4"``, ``"brotli"``, ``"none"``).

    Returns:
        A :class:`~pydb.iso2709.Report` (``records`` written, ``deleted``
        among them, ``errors``: records the core could not read).

    Raises:
        ImportError: pyarrow is not installed.
        CorruptionError: with ``on_error="stop"``.
        DatabaseNotFoundError: `db` is a path with no database.
        ClosedError: `db` is a closed Database.
        OSError: writing failed.
        ValueError: `path` is one of the database's own files
            (:func:`pydb.paths.own_file`), an existing
            directory that is not an earlier partitioned export, or a bad
            argument (`rows`, `subfields`, counts, `on_error`,
            `compression`).
        LookupError: unknown `encoding`.

    The file (or directory) is written beside the target under a temporary
    name and renamed into place only when the export succeeds.  The
    records are those of one commit (read through a snapshot).
    """
    _check_rows(rows, subfields)
    _check_count("batch_records", batch_records)
    if partition_records is not None:
        _check_count("partition_records", partition_records)
    if not isinstance(compression, str) or compression.lower() not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}, "
                         f"not {compression!r}")
    check_on_error(on_error)
    pq = _parquet()
    handle, close = _open_db(db)
    try:
        enc = encoding or handle.encoding
        "".encode(enc)
        report = Report()
        with handle.snapshot() as snap:
            sch = schema(rows, subfields, metadata=_metadata(snap, rows, enc))
            kw = {"compression": compression.lower()}
            if partition_records is None:
                with _atomic_target(handle, path) as target:
                    with pq.ParquetWriter(target, sch, **kw) as w:
                        for b, _ in _batches(snap, sch, rows, subfields, enc, deleted,
                                             batch_records, on_error, report, progress):
                            w.write_batch(b, row_group_size=b.num_rows)
                return report
            _refuse_own_file(handle, os.fsdecode(path))
            _write_parts(pq, snap, sch, os.path.normpath(os.fsdecode(path)), kw, rows,
                         subfields, enc, deleted, batch_records, partition_records,
                         on_error, report, progress)
            return report
    finally:
        if close:
            handle.close()


def _write_parts(pq: Any, snap: Snapshot, sch: Any, target: str, kw: dict[str, Any],
                 rows: str, subfields: str | None, enc: str, deleted: bool,
                 batch_records: int, partition_records: int, on_error: str,
                 report: Report, progress: Progress | None) -> None:
    """A partitioned export: `target`/part-NNNNN.parquet, written in a
    temporary directory beside `target` and renamed into place."""
    if os.path.exists(target) and not (os.path.isdir(target) and _replaceable_dir(target)):
        raise ValueError(f"{target} exists and is not a directory of part-*.parquet "
                         "files; choose another target")
    tmp = f"{target}.part{os.getpid()}"
    old = f"{target}.old{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        batches = _batches(snap, sch, rows, subfields, enc, deleted, batch_records,
                           on_error, report, progress, partition_records)
        part, writer = 0, None
        try:
            for b, end in batches:
                if writer is None:
                    writer = pq.ParquetWriter(os.path.join(tmp, f"part-{part:05d}.parquet"),
                                              sch, **kw)
                writer.write_batch(b, row_group_size=b.num_rows)
                if end:
                    writer.close()
                    writer, part = None, part + 1
            if part == 0 and writer is None:      # no record: one empty part
                writer = pq.ParquetWriter(os.path.join(tmp, "part-00000.parquet"), sch, **kw)
        finally:
            if writer is not None:
                writer.close()
        if os.path.exists(target):
            os.rename(target, old)
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------- import

def _parquet_files(path: str) -> list[str]:
    """The Parquet files of `path`: itself if a file, else every
    ``*.parquet`` file under the directory in path order, leaving out
    names that start with ``_`` or ``.`` (Spark's and Hive's markers)."""
    if not os.path.isdir(path):
        return [path]
    out = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        out += [os.path.join(root, f) for f in sorted(files)
                if f.endswith(".parquet") and not f.startswith(("_", "."))]
    return sorted(out)


def _is_int(pa: Any, t: Any) -> bool:
    return bool(pa.types.is_integer(t))


def _is_text(pa: Any, t: Any) -> bool:
    """A string or binary type of any kind (large, view, dictionary-encoded:
    what Polars, pandas or Spark may hand over)."""
    types = pa.types
    if types.is_dictionary(t):
        t = t.value_type
    views = [getattr(types, n, None) for n in ("is_string_view", "is_binary_view")]
    return bool(types.is_string(t) or types.is_large_string(t) or types.is_binary(t)
                or types.is_large_binary(t) or types.is_fixed_size_binary(t)
                or any(v is not None and v(t) for v in views))


def _layout_of(pa: Any, sch: Any, name: str) -> str:
    """``"fields"`` or ``"records"`` from a schema, checking the column
    types; IsoRecordError naming `name` for a schema pydb cannot import."""
    def bad(reason: str) -> IsoRecordError:
        return IsoRecordError(name, None, -1, f"not a pydb Parquet layout: {reason}")

    names = set(sch.names)
    if "mfn" not in names:
        raise bad("no column 'mfn'")
    if not _is_int(pa, sch.field("mfn").type):
        raise bad(f"column 'mfn' is {sch.field('mfn').type}, not an integer")
    if "deleted" in names and not pa.types.is_boolean(sch.field("deleted").type):
        raise bad(f"column 'deleted' is {sch.field('deleted').type}, not bool")
    if "fields" in names:
        t = sch.field("fields").type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)) \
                or not pa.types.is_struct(t.value_type):
            raise bad(f"column 'fields' is {t}, not a list of structs")
        item = t.value_type
        cols = {item.field(i).name: item.field(i).type for i in range(item.num_fields)}
        _check_field_columns(pa, cols, bad, "fields.")
        return "records"
    cols = {f.name: f.type for f in sch}
    _check_field_columns(pa, cols, bad, "")
    return "fields"


def _check_field_columns(pa: Any, cols: dict[str, Any],
                         bad: Callable[[str], IsoRecordError], where: str) -> None:
    for need in ("tag", "value"):
        if need not in cols:
            raise bad(f"no column '{where}{need}'")
    if not _is_int(pa, cols["tag"]):
        raise bad(f"column '{where}tag' is {cols['tag']}, not an integer")
    if not _is_text(pa, cols["value"]):
        raise bad(f"column '{where}value' is {cols['value']}, not string or binary")
    if "raw" in cols and not _is_text(pa, cols["raw"]):
        raise bad(f"column '{where}raw' is {cols['raw']}, not binary")
    if "field_no" in cols and not _is_int(pa, cols["field_no"]):
        raise bad(f"column '{where}field_no' is {cols['field_no']}, not an integer")


def _encoding_of(sch: Any) -> str | None:
    md = sch.metadata or {}
    try:
        enc = json.loads(md[b"pydb"]).get("encoding")
    except (KeyError, ValueError, AttributeError):
        return None
    return enc if isinstance(enc, str) else None


def _value_bytes(value: Any, raw: Any, encoding: str) -> bytes:
    """A field's bytes: `raw` when given, else `value` (str encoded with
    `encoding`, or bytes as they are).  ValueError for a null value."""
    if raw is not None:
        return bytes(raw)
    if value is None:
        raise ValueError("the value is null")
    if isinstance(value, str):
        return value.encode(encoding)
    return bytes(value)


def _schema_of(reader: Any) -> Any:
    """The Arrow schema of a ParquetFile or of Arrow data."""
    return reader.schema_arrow if hasattr(reader, "schema_arrow") else reader.schema


def _parts(pa: Any, data: Any, name: str) -> list[tuple[str, Any]]:
    """(name, reader) of each part of the source: the Parquet files of a
    path (each a ``pyarrow.parquet.ParquetFile``; IsoRecordError for one
    that is not Parquet), or the Arrow data itself."""
    if not isinstance(data, str):
        return [(name, data)]
    pq = _parquet()
    files = _parquet_files(data)
    if not files:
        raise IsoRecordError(name, None, -1, "no *.parquet file in the directory (a "
                             "directory is read as a Parquet dataset; ISO 2709 and JSON "
                             "Lines sources are files)")
    out = []
    for f in files:
        try:
            out.append((f, pq.ParquetFile(f)))
        except pa.ArrowException as e:
            raise IsoRecordError(f, None, -1, f"not a readable Parquet file: {e}") from None
    return out


def _open_source(source: Any, pa: Any) -> tuple[Any, str]:
    """(data, name): a path (str) or Arrow data, and the name for messages."""
    if isinstance(source, (str, bytes, os.PathLike)):
        p = os.fsdecode(source)
        if not os.path.exists(p):
            raise FileNotFoundError(2, "No such file or directory", p)
        return p, p
    if isinstance(source, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return source, "<arrow>"
    raise TypeError("expected a path, a pyarrow Table, RecordBatch or "
                    f"RecordBatchReader, not {type(source).__name__}")


def _iter_batches(pa: Any, name: str, reader: Any, batch_rows: int) -> Iterator[Any]:
    """The record batches of one part (a ParquetFile or Arrow data)."""
    try:
        if hasattr(reader, "iter_batches"):
            yield from reader.iter_batches(batch_size=batch_rows)
        elif isinstance(reader, pa.Table):
            yield from reader.to_batches(max_chunksize=batch_rows)
        elif isinstance(reader, pa.RecordBatch):
            yield reader
        else:
            yield from reader
    except pa.ArrowException as e:
        raise IsoRecordError(name, None, -1, f"cannot read: {e}") from None


def _sorted_table(pa: Any, parts: list[tuple[str, Any]], layout: str) -> Any:
    """Every row of `parts` in one Table sorted by MFN (and field_no),
    stably (Arrow's sort_indices is a stable sort)."""
    tables = []
    for name, reader in parts:
        try:
            if isinstance(reader, pa.Table):
                tables.append(reader)
            elif isinstance(reader, pa.RecordBatch):
                tables.append(pa.Table.from_batches([reader]))
            elif hasattr(reader, "read_all"):
                tables.append(reader.read_all())
            else:
                tables.append(reader.read())
        except pa.ArrowException as e:
            raise IsoRecordError(name, None, -1, f"cannot read: {e}") from None
    table = pa.concat_tables(tables, promote_options="permissive")
    keys = [("mfn", "ascending")]
    if layout == "fields" and "field_no" in table.schema.names:
        keys.append(("field_no", "ascending"))
    return table.sort_by(keys)


def _rows(pa: Any, data: Any, name: str, encoding: str | None, sort: bool,
          batch_rows: int, on_error: str, report: Report) -> Iterator[Incoming]:
    """The records of the source as (mfn, deleted, fields, (row, -1)).
    Every part's schema is checked before the first record is stored."""
    parts = _parts(pa, data, name)
    layout: str | None = None
    enc = "utf-8"
    for part, reader in parts:
        sch = _schema_of(reader)
        lay = _layout_of(pa, sch, part)
        if layout is None:
            layout = lay
            enc = encoding or _encoding_of(sch) or "utf-8"
            "".encode(enc)
        elif lay != layout:
            raise IsoRecordError(part, None, -1, f"the {lay} layout differs from the "
                                 f"{layout} layout of the files before it")
    if sort:
        table = _sorted_table(pa, parts, layout or "fields")
        batches: Iterable[tuple[str, Any]] = (
            (name, b) for b in table.to_batches(max_chunksize=batch_rows))
    else:
        batches = ((part, b) for part, reader in parts
                   for b in _iter_batches(pa, part, reader, batch_rows))
    if layout == "records":
        yield from _record_rows(batches, enc, on_error, report)
    else:
        yield from _field_rows(batches, enc, on_error, report)


def _problem(name: str, row: int, reason: str, mfn: int | None, on_error: str,
             report: Report) -> None:
    err = IsoRecordError(name, row, -1, f"row {row}: {reason}", mfn)
    if on_error == "stop":
        raise err
    report.errors.append(err)


def _column(batch: Any, name: str) -> list[Any] | None:
    i = batch.schema.get_field_index(name)
    return None if i < 0 else batch.column(i).to_pylist()


def _record_rows(batches: Iterable[tuple[str, Any]], enc: str, on_error: str,
                 report: Report) -> Iterator[Incoming]:
    """Records from rows of the records layout (one row, one record)."""
    row, part = 0, None
    for name, b in batches:
        if name != part:
            row, part = 0, name
        mfns = _column(b, "mfn") or []
        n = len(mfns)
        dels = _column(b, "deleted") or [False] * n
        fields = _column(b, "fields") or [None] * n
        for mfn, d, fl in zip(mfns, dels, fields, strict=True):
            row += 1
            if mfn is None:
                _problem(name, row, "the MFN is null", None, on_error, report)
                continue
            out = []
            try:
                for item in fl or ():
                    tag = item.get("tag")
                    if tag is None:
                        raise ValueError("a field has a null tag")
                    out.append((tag, _value_bytes(item.get("value"), item.get("raw"), enc)))
            except (ValueError, UnicodeError) as e:
                _problem(name, row, f"MFN {mfn}: {e}", mfn, on_error, report)
                continue
            yield mfn, bool(d), out, (row, -1)


def _field_rows(batches: Iterable[tuple[str, Any]], enc: str, on_error: str,
                report: Report) -> Iterator[Incoming]:
    """Records from rows of the fields layout: consecutive rows with one
    MFN make a record (also across files), its fields ordered by field_no
    when the column is there; IsoRecordError when an MFN is lower than
    the one before (the rows are not grouped in MFN order)."""
    row, part = 0, None
    cur: int | None = None
    start, start_part = 0, ""
    deleted = False
    bad: str | None = None
    fields: list[tuple[int | None, int, bytes]] = []

    def record() -> Iterator[Incoming]:
        if cur is None:
            return
        if bad is not None:
            _problem(start_part, start, f"MFN {cur}: {bad}", cur, on_error, report)
            return
        if any(no is not None for no, _, _ in fields):
            fields.sort(key=lambda f: (f[0] is None, f[0] or 0))
        yield cur, deleted, [(t, v) for _, t, v in fields], (start, -1)

    for name, b in batches:
        if name != part:
            row, part = 0, name
        mfns = _column(b, "mfn") or []
        n = len(mfns)
        tags = _column(b, "tag") or [None] * n
        values = _column(b, "value") or [None] * n
        raws = _column(b, "raw") or [None] * n
        nos = _column(b, "field_no") or [None] * n
        dels = _column(b, "deleted") or [False] * n
        for i in range(n):
            row += 1
            mfn = mfns[i]
            if mfn is None:
                _problem(name, row, "the MFN is null", None, on_error, report)
                continue
            if mfn != cur:
                if cur is not None and mfn < cur:
                    raise IsoRecordError(
                        name, row, -1, f"row {row}: MFN {mfn} after MFN {cur}: the rows "
                        "must come grouped by MFN in ascending order (sort them, e.g. "
                        "Spark orderBy('mfn', 'field_no'), or import with sort=True)", mfn)
                yield from record()
                cur, start, start_part = mfn, row, name
                deleted, bad, fields = bool(dels[i]), None, []
            tag = tags[i]
            if tag is None:
                if values[i] is None and raws[i] is None:
                    continue               # the row of a record without fields
                bad = bad or f"row {row}: a field has a null tag"
                continue
            try:
                fields.append((nos[i], tag, _value_bytes(values[i], raws[i], enc)))
            except (ValueError, UnicodeError) as e:
                bad = bad or f"row {row}, tag {tag}: {e}"
    yield from record()


def from_arrow(data: Any, db_path: PathArg, *, layout: str = "isis-packed", mstxl: int = 0,
               encoding: str | None = None, on_error: str = "skip", sync: bool = True,
               progress: Progress | None = None, max_gap: int = MAX_MFN_GAP,
               sort: bool = False, batch_rows: int = 65536) -> Report:
    """Store Arrow data in either layout (see the module docstring) in a new
    or an existing database: what :func:`import_parquet` does for a
    ``pyarrow.Table``, ``RecordBatch`` or ``RecordBatchReader`` (such as
    :func:`to_arrow` returns).  Arguments, returns and errors as for
    :func:`import_parquet`; TypeError for another kind of `data`."""
    return _import(data, db_path, layout=layout, mstxl=mstxl, encoding=encoding,
                   on_error=on_error, sync=sync, progress=progress, max_gap=max_gap,
                   sort=sort, batch_rows=batch_rows)


def import_parquet(source: PathArg, db_path: PathArg, *, layout: str = "isis-packed",
                   mstxl: int = 0, encoding: str | None = None, on_error: str = "skip",
                   sync: bool = True, progress: Progress | None = None,
                   max_gap: int = MAX_MFN_GAP, sort: bool = False,
                   batch_rows: int = 65536) -> Report:
    """Import a Parquet file, or a directory of them, into a new or an
    existing database.

    The layout is recognised from the columns: a list column ``fields``
    makes the records layout, else the fields layout, which needs ``mfn``,
    ``tag`` and ``value`` (string, or binary holding the bytes) and uses
    ``field_no``, ``deleted`` and ``raw`` when present (``occ`` and the
    subfield columns are derived data and ignored).  Integer columns of
    any width are accepted.  A directory is read file by file, every
    ``*.parquet`` under it in path order (names starting with ``_`` or
    ``.`` are left out, as Spark writes them).

    In the fields layout the rows of a record must be consecutive and the
    records in ascending MFN order -- as :func:`export_parquet` writes
    them, and as Spark does after ``orderBy("mfn", "field_no")`` -- so
    that the import streams with memory bounded by `batch_rows`;
    otherwise pass `sort` (the whole source is then read and sorted in
    memory).  A record's fields are stored in ``field_no`` order when that
    column is there, else in row order; its ``deleted`` is its first
    row's.

    MFNs: a NEW database keeps the MFNs of the source (the MFNs in between
    become physically deleted XRF entries; a step of more than `max_gap`,
    an MFN outside 1..2147483647 or not above the previous record's is a
    record error).  Into an EXISTING database the records are appended
    through the transactional writer (1000 per commit) and take the MFNs
    after its highest one, in source order: MFNs of the source are not
    kept there.  Deleted records are stored logically deleted either way.

    Args:
        source: a Parquet file or a directory (str, bytes, os.PathLike).
        db_path: base name of the database (``.mst``/``.xrf`` added).
        layout, mstxl, sync, max_gap: as for :func:`pydb.import_iso` (the
            leader layout and MSTXL of a NEW database).
        encoding: turns string values into field bytes (default: the
            encoding the export recorded in the schema metadata, else
            UTF-8).  Binary values and ``raw`` are stored as they are.
        on_error: ``"skip"`` (default): a bad record (null MFN, null tag
            or value, a value the encoding cannot represent, a tag outside
            1..65535, a record over the layout's limit, a bad MFN) is left
            out and listed in the report's ``errors``; ``"stop"``: the first
            one is raised.
        progress: called with 1 per record.
        sort: read the whole source and sort it by MFN (and ``field_no``)
            before storing: memory grows with the source.
        batch_rows: rows read per batch (default 65536).

    Returns:
        A :class:`~pydb.iso2709.Report` (``records`` stored, ``errors``,
        ``max_mfn``, ``deleted``).  An error's ``number`` is the 1-based
        row, within its file, of the record's first row.

    Raises:
        ImportError: pyarrow is not installed.
        IsoRecordError: with ``on_error="stop"``; and always for a source
            pydb cannot import: a file that is not Parquet, a schema
            without the needed columns or with wrong types, files of two
            layouts, rows out of MFN order without `sort` (each names the
            file and, for rows, the row); and a value that would mix
            encodings with an existing database's, as for
            :func:`pydb.import_iso`.
        FileNotFoundError: `source` does not exist.
        OSError: a file cannot be read.
        DiskError: creating or writing the database failed (a new
            database is not left behind).
        ReadOnlyError, LockTimeoutError, CorruptionError: appending to an
            existing database.
        ValueError, LookupError: a bad argument or unknown encoding.
    """
    return _import(source, db_path, layout=layout, mstxl=mstxl, encoding=encoding,
                   on_error=on_error, sync=sync, progress=progress, max_gap=max_gap,
                   sort=sort, batch_rows=batch_rows)


def _import(data: Any, db_path: PathArg, *, layout: str, mstxl: int,
            encoding: str | None, on_error: str, sync: bool, progress: Progress | None,
            max_gap: int, sort: bool, batch_rows: int) -> Report:
    check_on_error(on_error)
    _check_max_gap(max_gap)
    _check_count("batch_rows", batch_rows)
    if encoding is not None:
        "".encode(encoding)
    pa = _pyarrow()
    src, name = _open_source(data, pa)
    report = Report()

    def records() -> Iterator[Incoming]:
        for rec in _rows(pa, src, name, encoding, sort, batch_rows, on_error, report):
            if progress:
                progress(1)
            yield rec

    _store(records(), db_path, layout, mstxl, sync, on_error, report, name, max_gap,
           declared=encoding, iso=False)
    report.errors.sort(key=lambda e: (getattr(e, "filename", "") or "",
                                      getattr(e, "number", None) or 0))
    return report
