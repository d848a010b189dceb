"""Import and export between a database and exchange files.

:func:`export_iso` / :func:`import_iso` (ISO 2709, :mod:`pydb.iso2709`) and
:func:`export_jsonl` / :func:`import_jsonl` (JSON Lines, :mod:`pydb.jsonl`)
move records between a :class:`pydb.Database` and those files; the format
modules know nothing of databases, and the database knows nothing of them.

Exports read the records in MFN order, in batches of 256 per GIL release,
from a snapshot they take of the database (:meth:`pydb.Database.snapshot`):
the file holds exactly the records of one commit, while writers in this
and other processes go on committing.  They write through a temporary file
that replaces the target only when the export succeeds.  Logically deleted
records are exported only on request (``deleted=True``), with record
status ``d`` (ISO) or ``"deleted": true`` (JSON Lines).

Imports into a NEW database use the bulk builder (``pydb._pydb._build``):
records keep the MFNs the file carries (ISO with ``mfn_tag``; JSON Lines
``mfn``), the MFNs in between become physically deleted XRF entries, and
records without an MFN take the next one.  Imports into an EXISTING
database append through the transactional writer, :data:`APPEND_BATCH`
records per commit, with the MFNs after its highest one (MFNs carried by
the file are not kept); a native index attached to it is updated by every
commit.  Deleted records are stored logically deleted either way.

An import given a `checkpoint` file can be resumed after Ctrl-C or a kill
(:class:`_Checkpoint`, ``pydb import --resume``): before each commit it
writes down which source record the batch reaches and the highest MFN
the commit will leave; a resumed import finds the line whose MFN the
database has and skips the source records up to that line's.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import _pydb
from .database import LAYOUTS, Database, Record
from .database import open as open_db
from .encoding import detect_encoding
from .errors import (
    CorruptionError,
    DatabaseNotFoundError,
    ImportResumeError,
    IsoRecordError,
    NotFoundError,
    RecordTooLargeError,
)
from .iso2709 import (
    LEADER_POSITIONS,
    LEADER_TAG,
    Report,
    check_leader_tag,
    check_on_error,
    is_marc_leader,
    is_utf8,
    leader_fields,
    read,
    write,
)
from .jsonl import encode_line, read_jsonl
from .paths import (
    PathArg,
    Source,
    base_name,
    db_base,
    existing_file,
    is_path,
    opened,
    own_file,
    source_name,
)
from .snapshot import Snapshot

__all__ = ["export_iso", "import_iso", "export_jsonl", "import_jsonl",
           "APPEND_BATCH", "MAX_MFN_GAP", "MAX_MFN"]

#: A progress callback: called with the amount just done (records, or
#: bytes of the input for :func:`import_iso`).
Progress = Callable[[int], object]

#: One record on its way into a database: (MFN or None, deleted, fields as
#: (tag, bytes), where = (record number, byte offset) for error messages).
Incoming = tuple[int | None, bool, list[tuple[Any, bytes]], tuple[int, int]]


def _db_records(db: Snapshot, deleted: bool, on_error: str, report: Report,
                progress: Progress | None) -> Iterator[Record]:
    """Records of the snapshot `db` in MFN order; a record the core cannot
    read is reported (or raised) and left out."""
    mfns = db.mfns(deleted=deleted)
    for i in range(0, len(mfns), 256):
        batch = mfns[i:i + 256]
        try:
            recs: list[Any] = db.read_many(batch)
        except CorruptionError:
            recs = []
            for mfn in batch:
                try:
                    recs.append(db[mfn])
                except CorruptionError as e:
                    if on_error == "stop":
                        raise
                    report.errors.append(e)
                    if progress:
                        progress(1)
        for r in recs:
            if progress:
                progress(1)
            yield r


def _open_db(db: Database | PathArg, encoding: str = "utf-8") -> tuple[Database, bool]:
    """(`db` as an open Database, whether this call opened it and must
    close it): a path is opened read-only, with `encoding`."""
    if isinstance(db, Database):
        return db, False
    return open_db(db, encoding=encoding), True


def _refuse_own_file(handle: Database, target: str) -> None:
    """Raise ValueError where the export target `target` is one of the
    database's own files (:func:`~pydb.paths.own_file`, or its master
    file pair by another name: a link)."""
    info = handle.info()
    if own_file(target, info["mst_path"]) or any(
            os.path.exists(target) and os.path.samefile(target, own)
            for own in (info["mst_path"], info["xrf_path"])):
        raise ValueError(f"{target} is a file of the database being exported; "
                         "choose another target")


@contextlib.contextmanager
def _atomic_target(handle: Database, path: Source) -> Iterator[Source]:
    """Yield what to write to instead of `path`: for a path, a temporary
    file beside it that replaces `path` only when the export succeeds (a
    failed export leaves no partial file and an existing `path` intact);
    a file object is yielded as it is.  A path that is one of the
    database's own files is refused before anything is written
    (:func:`_refuse_own_file`)."""
    if not is_path(path):
        yield path
        return
    target = os.fsdecode(path)
    _refuse_own_file(handle, target)
    if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
        yield target   # a device, a FIFO: written as it is, never replaced
        return
    tmp = f"{target}.part{os.getpid()}"
    try:
        try:
            yield tmp
        except (IsoRecordError, OSError) as e:
            _name_target([e], tmp, target)
            raise
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _name_target(errors: Iterable[BaseException], tmp: str, target: str) -> None:
    """Errors that name the temporary file `tmp` of :func:`_atomic_target`
    name its `target` instead: the file the caller asked for (tmp is
    gone when the export ends)."""
    for e in errors:
        if getattr(e, "filename", None) == tmp:
            e.filename = target  # type: ignore[attr-defined]


def export_iso(db: Database | PathArg, path: Source, flavour: str = "isis", *,
               line_ending: str | None = None, line_width: int | None = None,
               deleted: bool = False, mfn_tag: int | None = None,
               encoding: str | None = None, on_error: str = "skip",
               progress: Progress | None = None, leader_tag: int | None = LEADER_TAG,
               indicators: str = "auto") -> Report:
    """Export the records of a database to an ISO 2709 file, in MFN order.

    Args:
        db: an open :class:`pydb.Database`, or the path of one (opened
            read-only and closed again).
        path: the ISO file to write (created or truncated), or a binary
            file object.
        flavour: ``"isis"`` (default) or ``"marc"`` (see
            :func:`pydb.iso2709.write`).
        line_ending: ``"\\n"`` or ``"\\r\\n"`` (see
            :func:`pydb.iso2709.write`).
        line_width: bytes per line (line ends not counted): default 80
            for ``"isis"``, none (one record after another) for
            ``"marc"``; 80 writes MARC as J-ISIS does, with ``"\\n"`` line
            ends unless `line_ending` says otherwise; 0: no lines; else at
            least 24 (:data:`pydb.iso2709.MIN_LINE`, the leader).
        deleted: also export logically deleted records (status ``d``).
        mfn_tag: carry each record's MFN in a first field of this tag, so
            that :func:`import_iso` with the same `mfn_tag` keeps MFNs.
        encoding: the database's character set; only recorded in the
            MARC leader (position 9 ``a`` for UTF-8) of records without a
            leader field for position 9, as :meth:`pydb.Record.to_pymarc`
            does.  Default: the encoding of `db` (a path is opened with
            ``encoding="auto"``: detected).  Field bytes are written
            unchanged either way.
        on_error: ``"skip"`` (default): a record that cannot be read
            (:class:`~pydb.CorruptionError`) or written
            (:class:`~pydb.IsoRecordError`) is left out and listed in the
            report's ``errors``; ``"stop"``: it is raised.
        progress: called with 1 per MFN done.
        leader_tag: ``"marc"``: records keep their MARC leader in fields
            ``leader_tag + p`` (default 3000: 3005 record status ... 3019,
            as :func:`import_iso` stores it and ABCD's MARC databases hold
            it); those fields are written as the leader, not as fields, and
            the record with indicator count 2.  A record imported from a
            well-formed MARC file is thus written back byte for byte.  None:
            no leader fields.  See :func:`pydb.iso2709.write`.
        indicators: ``"marc"``, records without leader fields (CDS/ISIS
            records): ``"auto"`` (default) writes indicator count 0, which
            is what their values have; ``"add"`` puts two blank indicators
            before every field but 001-009 and writes count 2 (for MARC
            readers that need indicators); ``"present"`` declares that the
            values already begin with indicators.

    Returns:
        A :class:`~pydb.iso2709.Report` (``records`` written, ``errors``).

    Raises:
        CorruptionError, IsoRecordError: with ``on_error="stop"`` (an
            IsoRecordError also for a leader field that occurs twice or
            does not hold one character).
        DatabaseNotFoundError: `db` is a path with no database.
        ClosedError: `db` is a closed Database.
        OSError: reading the database or writing the file failed.
        ValueError: `path` is one of the database's own files
            (:func:`pydb.paths.own_file`: its master file pair, log,
            header, native or ISIS index, FST...), or a bad
            `flavour`, `line_ending`, `line_width`, `leader_tag`,
            `indicators` or `on_error`.

    A path is written through a temporary file beside it that replaces it
    only when the export succeeds: a failed export leaves no partial file.
    The records are those of one commit: the export reads through a
    snapshot it takes (:meth:`pydb.Database.snapshot`), so commits made
    meanwhile by other threads or processes are not in it.
    """
    check_on_error(on_error)
    if encoding == "auto":
        encoding = None
    handle, close = _open_db(db, "auto" if encoding is None else encoding)
    try:
        report = Report()
        utf8 = is_utf8(handle.encoding if encoding is None else encoding)
        with handle.snapshot() as snap, _atomic_target(handle, path) as target:
            recs = _db_records(snap, deleted, on_error, report, progress)
            w = write(target, recs, flavour, line_ending=line_ending, line_width=line_width,
                      mfn_tag=mfn_tag, on_error=on_error, marc_utf8=utf8,
                      leader_tag=leader_tag, indicators=indicators)
            if isinstance(target, str):   # _atomic_target's file for a path
                _name_target(w.errors, target, os.fsdecode(path))  # type: ignore[arg-type]
        report.records = w.records
        report.deleted = w.deleted
        report.errors.extend(w.errors)
        return report
    finally:
        if close:
            handle.close()


# ------------------------------------------------------ database import

def _problem_sink(filename: str | None, on_error: str,
                  report: Report) -> Callable[..., None]:
    """The function that _append and _load call with a bad record's
    (number, offset), reason and MFN: raises the IsoRecordError with
    ``on_error="stop"``, else adds it to `report`."""
    def problem(where: tuple[int, int], reason: str, mfn: int | None = None) -> None:
        err = IsoRecordError(filename, where[0], where[1], reason, mfn)
        if on_error == "stop":
            raise err
        report.errors.append(err)
    return problem


class _Checkpoint:
    """The resume file of an import (``pydb import`` keeps it as
    ``<database>.resume``): text lines, written with fsync.

    ``pydb-import-checkpoint 1``, then ``source SIZE DIGEST NAME`` (the
    exchange file's size in bytes, the SHA-1 of its first and last 64 KiB,
    its name: a resume from another file is refused), then either ``new`` (a new database is
    being built: the bulk builder commits nothing until its end, so a kill
    leaves half-written files that a resume removes and builds again) or
    lines ``NUMBER MAX_MFN DIGEST``, one written before each commit of an
    append: after the commit, the source records 1..NUMBER are done, the
    database's highest MFN is MAX_MFN and its record has the fields whose
    digest is DIGEST (:func:`_fields_digest`; ``-`` when the import has
    appended none yet; older files have no DIGEST).  After a crash or kill
    the last line whose MAX_MFN the database has names the last commit
    that happened (a line written before a commit that did not happen has
    a higher MFN) -- if the record there is the one the import wrote:
    another writer's appends can bring the highest MFN to the same number
    (a service developer's trial: the resume then skipped a batch that
    never committed).  A last line without its newline (killed while
    writing it) is ignored.  The file is removed when the import
    completes."""

    MAGIC = "pydb-import-checkpoint 1"

    def __init__(self, path: PathArg, source: Source):
        self.path = os.fsdecode(path)
        size, digest = -1, "-"
        with contextlib.suppress(OSError, AttributeError, ValueError):
            if is_path(source):
                with open(source, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    head = f.read(65536)
                    f.seek(max(0, size - 65536))
                    digest = hashlib.sha1(head + f.read(65536)).hexdigest()[:16]
            else:
                size = os.fstat(source.fileno()).st_size  # type: ignore[union-attr]
        name = source_name(source) or "<stream>"
        self.source = f"source {size} {digest} {os.path.basename(name)}"
        self.skip = 0          # source records already committed (resume)

    def read(self) -> tuple[bool, list[tuple[int, int, str]]] | None:
        """(new, [(number, max_mfn, digest), ...]) from the file, None if
        absent (digest ``-`` where the line has none).
        Raises CorruptionError (a malformed file: its line) or
        ImportResumeError (a checkpoint of another source file)."""
        try:
            with open(self.path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        lines = text.split("\n")[:-1]         # a last line without \n is unfinished
        if len(lines) < 3 or lines[0] != self.MAGIC:
            raise CorruptionError(self.path, 0, "not a pydb import checkpoint "
                                  f"(expected {self.MAGIC!r} and a source line)")
        if lines[1] != self.source:
            raise ImportResumeError(self.path, f"it was written for another file "
                                    f"({lines[1][7:]!r}, this one is {self.source[7:]!r})")
        if lines[2] == "new":
            return True, []
        marks = []
        for no, line in enumerate(lines[2:], 3):
            parts = line.split()
            if len(parts) == 2:
                parts.append("-")
            if len(parts) != 3 or not all(p.isdigit() for p in parts[:2]):
                raise CorruptionError(self.path, sum(len(x) + 1 for x in lines[:no - 1]),
                                      f"line {no}: expected 'NUMBER MAX_MFN DIGEST', got "
                                      f"{line!r}")
            marks.append((int(parts[0]), int(parts[1]), parts[2]))
        return False, marks

    def start(self, new: bool, number: int = 0, max_mfn: int = 0,
              digest: str = "-") -> None:
        """A fresh file: a new database, or an append at `number` (source
        records done), `max_mfn` and its record's `digest`; written beside
        and renamed into place."""
        tmp = self.path + ".tmp"
        body = "new" if new else f"{number} {max_mfn} {digest}"
        folder = os.path.dirname(self.path) or "."
        if not os.path.isdir(folder):   # named as create() names it
            raise DatabaseNotFoundError(errno.ENOENT, "cannot create: no such folder",
                                        folder)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{self.MAGIC}\n{self.source}\n{body}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def mark(self, number: int, max_mfn: int, digest: str) -> None:
        """Before a commit: source records 1..`number` done, highest MFN
        `max_mfn`, whose record's fields have `digest` (``-``: unknown)."""
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{number} {max_mfn} {digest}\n")
            f.flush()
            os.fsync(f.fileno())

    def resume_point(self, marks: list[tuple[int, int, str]], max_mfn: int,
                     digest_of: Callable[[int], str | None]) -> int:
        """The source records the commits that happened have done:
        `digest_of(mfn)` gives the digest of the database's record `mfn`
        (None: none there)."""
        for number, mfn, digest in reversed(marks):
            if mfn != max_mfn:
                continue
            if digest != "-" and digest_of(mfn) != digest:
                raise ImportResumeError(
                    self.path, f"the database's highest MFN is {max_mfn}, as a commit of "
                    "the interrupted import would have left it, but its record is not the "
                    "one that commit wrote: another program appended since; cannot tell "
                    "which records are in it")
            return number
        raise ImportResumeError(self.path, f"the database's highest MFN is {max_mfn}, which "
                                "no commit of the interrupted import left: the database "
                                "changed since; cannot tell which records are in it")

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _fields_digest(fields: Iterable[tuple[Any, bytes]]) -> str:
    """A short digest (16 hex digits of SHA-1) of a record's fields as
    stored, (tag, value bytes) in order: what an import's checkpoint
    notes of the last record of each batch (_Checkpoint)."""
    h = hashlib.sha1()
    for tag, value in fields:
        # (a str as the appending handle stores it: UTF-8, _append's)
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        h.update(b"%d\x1e" % int(tag) + bytes(raw) + b"\x1d")
    return h.hexdigest()[:16]


def _record_digest(db: Database, mfn: int) -> str | None:
    """_fields_digest of the database's record `mfn` (logically deleted
    too), or None when it has none."""
    try:
        rec = db[mfn]
    except (NotFoundError, CorruptionError):
        return None
    return _fields_digest((f.tag, f.raw) for f in rec.fields)


def _store(records: Iterator[Incoming], db_path: PathArg, layout: str, mstxl: int,
           sync: bool, on_error: str, report: Report, filename: str | None,
           max_gap: int, checkpoint: _Checkpoint | None = None,
           declared: str | None = None, iso: bool = True) -> Report:
    """Append the records to the database at `db_path` if it exists
    (:func:`_append`), else build it from them (:func:`_load`); with a
    `checkpoint`, resume where it says and keep it up to date."""
    base = db_base(db_path)
    state = checkpoint.read() if checkpoint else None
    if state is not None and state[0]:
        # an interrupted build of a new database: its files are half-written
        for ext in (".mst", ".xrf"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + ext)
    if existing_file(base) is not None:
        return _append(records, base, sync, on_error, report, filename,
                       checkpoint=checkpoint, marks=state[1] if state else None,
                       declared=declared, iso=iso)
    if checkpoint is None:
        return _load(records, db_path, layout, mstxl, sync, on_error, report, filename,
                     max_gap)
    checkpoint.start(True)
    try:
        return _load(records, db_path, layout, mstxl, sync, on_error, report, filename,
                     max_gap)
    finally:   # done, or failed and removed by the builder: nothing to resume
        checkpoint.remove()


#: Records appended per transaction when importing into an existing database.
APPEND_BATCH = 1000


class _EncodingGuard:
    """What :func:`_append` checks of the values an import brings to an
    existing database: whether they are in its encoding.  The database's
    is what :func:`pydb.encoding.detect_encoding` finds in its sample:
    UTF-8, or an 8-bit code page.  A value past ASCII agrees when it is
    valid UTF-8 in a UTF-8 database, not valid UTF-8 in an 8-bit one.
    Where more of the import's values past ASCII disagree than agree, or
    of a batch's, :data:`_BATCH_DISAGREE` or more (the file, or a part
    of it, read with another encoding than its own: cp850 bytes appended
    to a UTF-8 database read garbled, and made the next ``auto`` open
    take cp850 for all of it, a librarian's trial found), :meth:`verdict`
    says why and the import stops before the batch commits; a few odd
    values among agreeing ones (a character cut by a length limit) go in
    as they are.  Nothing is
    checked where the sample has no value past ASCII, nor where the
    database is 8-bit and the caller declared a single-byte `declared`
    encoding for the values (an 8-bit value may be valid UTF-8 by
    chance: "\u00d3\u00bb" in cp1252, a review found).  `iso`: the
    values come as an ISO file's bytes (transcoded by ``db_encoding``),
    else as text encoded with ``encoding`` (JSON Lines, Parquet): the
    advice differs."""

    def __init__(self, db: Database, declared: str | None, iso: bool):
        det = detect_encoding(db)
        self.utf8_db = det.encoding == "utf-8"
        self.active = bool(det.non_ascii) and (
            self.utf8_db or declared is None or not _single_byte(declared))
        self.agree = self.disagree = 0            # the import's
        self.batch_agree = self.batch_disagree = 0
        # the batch's first disagreeing value: (where, mfn, tag, valid)
        self.first: tuple[tuple[int, int], int | None, Any, bool] | None = None
        self.seen = (f"the database's values are {det.encoding} ({det.utf8_valid} of the "
                     f"{det.non_ascii} sampled values past ASCII are valid UTF-8)")
        if iso:
            self.fix = (f"give the file's encoding and db_encoding='{det.encoding}' to "
                        f"transcode (pydb import: --encoding "
                        f"{'CODEC' if self.utf8_db else 'utf-8'} --db-encoding {det.encoding})")
        else:
            self.fix = (f"give encoding='{det.encoding}', in which the values are then "
                        f"stored (pydb import: --encoding {det.encoding})")

    def see(self, fields: list[tuple[Any, bytes]], where: tuple[int, int],
            mfn: int | None) -> None:
        """Count the record's values past ASCII, agreeing or not."""
        if not self.active:
            return
        for tag, value in fields:
            if not isinstance(value, bytes | bytearray) or value.isascii():
                continue
            try:
                value.decode("utf-8")
                valid = True
            except UnicodeDecodeError:
                valid = False
            if valid == self.utf8_db:
                self.agree += 1
                self.batch_agree += 1
                continue
            self.disagree += 1
            self.batch_disagree += 1
            if self.first is None:
                self.first = (where, mfn, tag, valid)

    def verdict(self) -> tuple[tuple[int, int], int | None, str] | None:
        """At a batch's end: None while the values agree (by majority of
        the import's, and of the batch's where it has many that do not),
        the next batch counted anew; else the batch's first disagreeing
        record's (number, offset), its MFN and the reason."""
        first, self.first = self.first, None
        bd, ba = self.batch_disagree, self.batch_agree
        self.batch_agree = self.batch_disagree = 0
        if first is None:
            return None
        if self.disagree > self.agree:
            share = (f"{self.disagree} of the {self.agree + self.disagree} values past "
                     "ASCII this import brought")
        elif bd >= _BATCH_DISAGREE and bd > ba:
            share = f"{bd} of the {ba + bd} values past ASCII of this batch of records"
        else:
            return None
        where, mfn, tag, valid = first
        what = "valid UTF-8" if valid else "not valid UTF-8"
        return where, mfn, (
            f"field {tag}: its bytes are {what}, as are {share}, while {self.seen}: "
            f"stored as they are, they would read garbled; {self.fix}")


#: Values past ASCII of one batch in another encoding than the database's
#: that stop an import where they are the batch's majority, though the
#: import's agree by majority (_EncodingGuard).
_BATCH_DISAGREE = 10


def _single_byte(codec: str) -> bool:
    """Whether `codec` reads each byte as one character (a code page:
    cp850, cp1252, cp1251, koi8-r, ...; not UTF-8, UTF-16 or a CJK
    multi-byte one), judged by how it reads every byte and the two bytes
    of UTF-8's "\u00e9" (a review found cp1251 taken for multi-byte when
    this asked how it writes "\u00e9", which it cannot)."""
    try:
        return (len(bytes(range(256)).decode(codec, "replace")) == 256 and
                len(b"\xc3\xa9".decode(codec, "replace")) == 2)
    except (UnicodeError, LookupError):
        return False


def _append(records: Iterator[Incoming], base: str, sync: bool, on_error: str,
            report: Report, filename: str | None, batch: int | None = None,
            checkpoint: _Checkpoint | None = None,
            marks: list[tuple[int, int, str]] | None = None,
            declared: str | None = None, iso: bool = True) -> Report:
    """Append (mfn, deleted, fields, where) tuples to the existing database
    `base` through the transactional writer, `batch` records per
    transaction: the records take the MFNs after the database's highest
    (MFNs carried by the file are not kept), deleted ones are appended and
    logically deleted in the same transaction.  A native index attached to
    the database is updated by every commit.  With a `checkpoint`, each
    commit is marked in it first; `marks` (its lines, when resuming) say
    how many source records to skip; it is removed when all are in.
    `declared`, `iso`: the values' encoding as the caller gave it (None:
    unknown) and their kind, for the check of _EncodingGuard, which stops
    the import before a commit whose batch makes most of the import's
    values past ASCII disagree with the database's encoding (the batch
    rolled back, the message saying what was committed before)."""
    batch = batch or APPEND_BATCH

    problem = _problem_sink(filename, on_error, report)

    # (the records are written as bytes: the handle's codec is not used,
    # named so that the open does not sample the records for its warning)
    with open_db(base, readonly=False, sync=sync, encoding="utf-8") as db:
        last_mfn = db.max_mfn
        first_mfn = last_mfn + 1
        guard = _EncodingGuard(db, declared, iso)
        if checkpoint is not None:
            if marks is not None:
                checkpoint.skip = checkpoint.resume_point(
                    marks, last_mfn, lambda m: _record_digest(db, m))
            last_digest = _record_digest(db, last_mfn) or "-"
            checkpoint.start(False, checkpoint.skip, last_mfn, last_digest)
        number = skip = checkpoint.skip if checkpoint is not None else 0
        last_fields = None   # the batch's last record appended (its digest: the mark's)
        it = iter(records)
        more = True
        while more:
            more = False
            with db.transaction() as tx:
                n = 0
                for mfn, deleted, fields, where in it:
                    if where[0] <= skip:
                        continue
                    number = where[0]
                    try:
                        last_mfn = tx.append(fields)
                    except (ValueError, TypeError, RecordTooLargeError) as e:
                        problem(where, str(e), mfn)
                        continue
                    guard.see(fields, where, mfn)
                    last_fields = fields
                    if deleted:
                        tx.delete(last_mfn)
                        report.deleted += 1
                    report.records += 1
                    n += 1
                    if n >= batch:
                        more = True
                        break
                stop = guard.verdict()
                if stop is not None:
                    # the file's encoding, not a record's: the import stops
                    # before this batch commits
                    done = report.records - n
                    kept = (f"{done} record(s) of this import committed before, MFNs "
                            f"{first_mfn}..{first_mfn + done - 1}" if done else
                            "no record of this import committed")
                    raise IsoRecordError(filename, stop[0][0], stop[0][1],
                                         f"{stop[2]} (the import stops: {kept})", stop[1])
                if checkpoint is not None:
                    if last_fields is not None:   # one digest a batch, not a record
                        last_digest = _fields_digest(last_fields)
                        last_fields = None
                    checkpoint.mark(number, last_mfn, last_digest)
        report.max_mfn = db.max_mfn
    if checkpoint is not None:
        checkpoint.remove()
    return report


#: Default of `max_gap` (import_iso, import_jsonl): the largest step from
#: one record's MFN to the next (or from 0 to the first) a file may make
#: when importing into a new database.  The MFNs skipped become physically
#: deleted XRF entries (4 bytes each, docs/isis-formats.md §3.1), so a file
#: naming MFN 1000000000 would otherwise make a 4 GB XRF.
MAX_MFN_GAP = 1_000_000

#: The highest MFN the XRF can address (a signed 32-bit pointer).
MAX_MFN = 2**31 - 1


def _check_max_gap(max_gap: object) -> int:
    if isinstance(max_gap, bool) or not isinstance(max_gap, int) or max_gap < 1:
        raise ValueError(f"max_gap must be an int >= 1, not {max_gap!r}")
    return max_gap


def _load(records: Iterator[Incoming], db_path: PathArg, layout: str, mstxl: int,
          sync: bool, on_error: str, report: Report, filename: str | None,
          max_gap: int = MAX_MFN_GAP) -> Report:
    """Build a new database from (mfn or None, deleted, fields, where)
    tuples; `where` is (number, offset) for error messages.  A record whose
    MFN is not 1..MAX_MFN, does not increase, or lies more than `max_gap`
    beyond the previous one is a record error, as is a tag outside
    1..65535 (as for :meth:`pydb.Database.append`)."""
    max_gap = _check_max_gap(max_gap)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (isis-packed, isis-aligned, "
                         "ffi-packed, ffi-aligned)")
    base = base_name(db_path)
    deleted_mfns: set[int] = set()

    problem = _problem_sink(filename, on_error, report)

    def gen() -> Iterator[list[tuple[int, bytes]] | None]:
        last = 0
        for mfn, deleted, fields, where in records:
            if mfn is not None and (isinstance(mfn, bool) or not isinstance(mfn, int)
                                    or not 1 <= mfn <= MAX_MFN):
                problem(where, f"MFN {mfn!r} is invalid (MFNs are 1..{MAX_MFN})",
                        mfn if isinstance(mfn, int) else None)
                continue
            if mfn is not None and mfn <= last:
                problem(where, f"MFN {mfn} does not follow MFN {last} (MFNs must "
                        "increase)", mfn)
                continue
            if mfn is not None and mfn - last > max_gap:
                problem(where, f"MFN {mfn} is {mfn - last} beyond "
                        f"{'MFN ' + str(last) if last else 'the start'}: more than "
                        f"max_gap={max_gap} (the skipped MFNs would each take an "
                        "XRF entry)", mfn)
                continue
            out = []
            bad = None
            for tag, value in fields:
                if isinstance(tag, bool) or not isinstance(tag, int) \
                        or not 1 <= tag <= 65535:
                    bad = f"tag {tag!r} is not an ISIS tag (1..65535)"
                    break
                out.append((tag, value))
            if bad is None:
                # the size rule of the core (record.c), before the batch
                try:
                    _pydb._record_size(layout, mstxl, out, mfn if mfn is not None else last + 1)
                except RecordTooLargeError as e:
                    bad = str(e)
            if bad is not None:
                problem(where, bad, mfn)
                continue
            target = last + 1 if mfn is None else mfn
            while last + 1 < target:
                last += 1
                yield None
            last = target
            if deleted:
                deleted_mfns.add(target)
            report.records += 1
            yield out
        report.max_mfn = last

    _pydb._build(base, layout, mstxl, gen(), sync, deleted_mfns)
    report.deleted = len(deleted_mfns)
    return report


def import_iso(source: Source, db_path: PathArg, *, flavour: str = "auto",
               layout: str = "isis-packed", mstxl: int = 0, encoding: str = "utf-8",
               db_encoding: str | None = None,
               on_error: str = "skip", mfn_tag: int | None = None,
               sync: bool = True, progress: Progress | None = None,
               max_gap: int = MAX_MFN_GAP, leader_tag: int | None = LEADER_TAG,
               checkpoint: PathArg | None = None) -> Report:
    """Import an ISO 2709 file into a new or an existing database.

    A NEW database is written by the bulk builder: records get MFN 1, 2,
    ... in file order, unless the file carries MFNs (`mfn_tag`, as written
    by :func:`export_iso`): then they are kept and the MFNs in between
    become physically deleted XRF entries.  Into an EXISTING database the
    records are appended through the transactional writer
    (``db.transaction()``, :data:`APPEND_BATCH` records per commit): they
    take the MFNs after its highest one in file order (MFNs carried by
    the file are not kept), `layout` and `mstxl` are those of the
    database, and a native index attached to it is updated by each commit.
    Records with status ``d`` are stored logically deleted.  Values are
    stored as the file's bytes (MARC subfield delimiters as ``^``, §7.3).
    The leader of a MARC record (indicator count 2) is kept in fields
    `leader_tag` + p for its positions 5-9 and 17-19 (3005 ... 3019 by
    default, ABCD's convention; a blank as ``#``), placed before its other
    fields, so that :func:`export_iso` with ``"marc"`` writes it back.

    Args:
        source: ISO file path or binary file object.
        db_path: base name of the database (``.mst``/``.xrf`` added).
        flavour, encoding, mfn_tag: as for :func:`pydb.iso2709.read`.
        db_encoding: when given and different from `encoding`, every value
            is transcoded from `encoding` to `db_encoding` (e.g. a CP850
            DOS export into a UTF-8 database, docs/isis-formats.md §9); a value
            that does not decode or encode makes its record an error.
            None (default): the file's bytes are stored unchanged.
        layout: leader layout of a new master file (``"isis-packed"``,
            the default, as WinISIS writes; ``"isis-aligned"``,
            ``"ffi-packed"``, ``"ffi-aligned"``); ignored for an existing
            database.
        mstxl: MSTXL shift 0..6 (record alignment 2**mstxl) of a new
            database.
        on_error: ``"skip"`` (default): bad records (unreadable, tags that
            ISIS cannot store -- outside 1..65535, as for
            :meth:`pydb.Database.append` --, records over the layout's
            limit, MFNs out of order, outside 1..2147483647 or more than
            `max_gap` beyond the previous record's) are left out and listed
            in the report's ``errors``;
            ``"stop"``: the first one is raised; a new database is then
            not left behind, an existing one keeps the batches committed
            before (the batch in progress is rolled back).
        sync: fsync the new files before returning (existing database:
            each commit is fsync'ed, see :func:`pydb.open`).
        progress: called with the number of bytes of the ISO file consumed
            since the last call.
        max_gap: new database with MFNs from the file: the largest step
            from one record's MFN to the next (from 0 for the first), default
            :data:`MAX_MFN_GAP` (1,000,000); the MFNs in between become
            XRF entries (4 bytes each), so a larger step is a record error.
        leader_tag: base of the leader fields (default
            :data:`~pydb.iso2709.LEADER_TAG`, 3000); None: MARC leaders are
            not kept.  A record that already has a field of one of these
            tags (a file written from ABCD with them as fields) keeps its
            fields and does not get the leader's.
        checkpoint: path of a resume file (``pydb import`` uses
            ``<database>.resume``; format in :class:`_Checkpoint`).  Before
            each commit of an append the import writes into it the source
            record number reached and the MFN the commit leaves; it is
            removed when the import completes.  When it exists at the
            start (an import interrupted by Ctrl-C, a kill or a crash), the
            import resumes: the source records that committed batches hold
            are skipped (the report counts only the records stored now), and
            a new database left half-built by a killed import is built
            again.  None (default): no file, no resume.

    Returns:
        A :class:`~pydb.iso2709.Report` (``records`` stored, ``errors``,
        ``repaired``, ``max_mfn``, ``deleted``).

    Raises:
        IsoRecordError: with ``on_error="stop"``; and, whatever
            `on_error`, appending to an existing database, where most of
            the values past ASCII the import brought so far are in
            another encoding than the database's: not valid UTF-8 where
            the values past ASCII of the database's sample are UTF-8, or
            valid UTF-8 where they are an 8-bit code page
            (:func:`pydb.encoding.detect_encoding`; not checked where the
            database is 8-bit and `db_encoding`, else `encoding`, is a
            single-byte code page) -- the wrong `encoding`/`db_encoding`
            for the file, not a fault of a record; a few odd values among
            agreeing ones go in as they are.  The error names the first
            such record; the batch in progress is rolled back, and the
            message says which records of the import were committed
            before (with a `checkpoint`, a resume goes on from there).
        DiskError: creating or writing the database failed (partial files
            of a new database are removed).
        ReadOnlyError, LockTimeoutError, CorruptionError: appending to an
            existing database (as for :meth:`pydb.Database.transaction`).
        OSError: the ISO file cannot be opened.
        ValueError, LookupError: a bad argument or unknown encoding.
        ImportResumeError: the `checkpoint` belongs to another source file,
            or the database changed since the interrupted import.
        CorruptionError: the `checkpoint` file is not one (its line).
    """
    check_on_error(on_error)
    _check_max_gap(max_gap)
    check_leader_tag(leader_tag)
    lbase = leader_tag or 0
    ltags = {lbase + p for p in LEADER_POSITIONS} if lbase else set()
    reader = read(source, flavour, encoding=encoding, on_error=on_error, mfn_tag=mfn_tag)
    report = Report()
    target = encoding if db_encoding is None else db_encoding
    recode = codecs.lookup(target).name != codecs.lookup(encoding).name

    def records() -> Iterator[Incoming]:
        done = 0
        with reader:
            for rec in reader:
                if progress:
                    progress(reader.position - done)
                    done = reader.position
                if cp is not None and rec.number <= cp.skip:
                    continue        # resumed: committed by the interrupted import
                fields = rec.fields
                if recode:
                    try:
                        fields = [(t, v.decode(encoding).encode(target))
                                  for t, v in fields]
                    except UnicodeError as e:
                        err = IsoRecordError(reader.filename, rec.number, rec.offset,
                                             f"cannot transcode from {encoding} to "
                                             f"{db_encoding}: {e}", rec.mfn)
                        if on_error == "stop":
                            raise err from None
                        report.errors.append(err)
                        continue
                if ltags and is_marc_leader(rec.leader) and not any(
                        t in ltags for t, _ in fields):
                    fields = leader_fields(rec.leader, lbase) + fields
                yield rec.mfn, rec.deleted, fields, (rec.number, rec.offset)
            if progress and reader.position > done:
                progress(reader.position - done)

    cp = _Checkpoint(checkpoint, source) if checkpoint is not None else None
    try:
        _store(records(), db_path, layout, mstxl, sync, on_error, report,
               reader.filename, max_gap, cp, declared=target, iso=True)
    finally:
        reader.close()
    report.errors[:0] = [e for e in reader.errors if cp is None or (e.number or 0) > cp.skip]
    report.errors.sort(key=lambda e: getattr(e, "number", None) or 0)
    report.repaired = reader.repaired
    return report


# ------------------------------------------------------------ JSON Lines

def export_jsonl(db: Database | PathArg, path: Source, *, deleted: bool = False,
                 encoding: str = "utf-8", on_error: str = "skip",
                 progress: Progress | None = None) -> Report:
    """Export a database as JSON Lines (:mod:`pydb.jsonl`, docs/design.md
    §8): one object per line,
    ``{"mfn": int, "deleted": bool, "fields": [[tag, value], ...]}`` in MFN
    order, fields in stored order.

    A value is a JSON string holding the field's bytes decoded with
    `encoding` (default UTF-8); when the bytes are not valid in that
    encoding the value is ``{"base64": "..."}`` with the exact bytes, so
    the export is lossless for any content.  Import with the same
    `encoding`.

    Args:
        db: an open :class:`pydb.Database` or the path of one.
        path: the file to write (created or truncated) or a binary file.
        deleted: also export logically deleted records.
        encoding: codec between field bytes and JSON strings.
        on_error: ``"skip"`` (default) or ``"stop"`` for records the core
            cannot read (:class:`~pydb.CorruptionError`).
        progress: called with 1 per MFN done.

    Returns:
        A :class:`~pydb.iso2709.Report` (``records`` written, ``deleted``
        among them, ``errors``).

    Raises:
        CorruptionError: with ``on_error="stop"``.
        DatabaseNotFoundError: `db` is a path with no database.
        ClosedError: `db` is a closed Database.
        OSError: reading or writing failed.
        ValueError: `path` is one of the database's own files
            (:func:`pydb.paths.own_file`: its master file pair, log,
            header, native or ISIS index, FST...), or a bad
            `on_error`.
        LookupError: unknown `encoding`.

    A path is written through a temporary file beside it that replaces it
    only when the export succeeds.  The records are those of one commit
    (read through a snapshot the export takes).
    """
    check_on_error(on_error)
    "".encode(encoding)
    handle, close = _open_db(db)
    try:
        report = Report()
        with (handle.snapshot() as snap, _atomic_target(handle, path) as target,
              opened(target, "wb") as f):
            for r in _db_records(snap, deleted, on_error, report, progress):
                f.write(encode_line(r.mfn, r.deleted, [(fl.tag, fl.raw) for fl in r.fields],
                                    encoding))
                report.records += 1
                report.deleted += bool(r.deleted)
        return report
    finally:
        if close:
            handle.close()


def import_jsonl(source: Source, db_path: PathArg, *, layout: str = "isis-packed",
                 mstxl: int = 0, encoding: str = "utf-8", on_error: str = "skip",
                 sync: bool = True, progress: Progress | None = None,
                 max_gap: int = MAX_MFN_GAP, checkpoint: PathArg | None = None) -> Report:
    """Import a JSON Lines file (:func:`export_jsonl`) into a database.

    A NEW database keeps the MFNs the file carries (gaps become physically
    deleted XRF entries; records without ``mfn`` take the next one) and
    the deleted state.  Into an EXISTING database the records are appended
    in file order through ``db.transaction()`` with the MFNs after its
    highest one, as :func:`import_iso` does.

    Args: as for :func:`import_iso` (also `max_gap` and `checkpoint`, and
    the same record errors: MFN outside 1..2147483647 or more than `max_gap` beyond the
    previous one, tag outside 1..65535); `encoding` turns JSON strings
    back into bytes; `progress` gets 1 per line.

    Returns:
        A :class:`~pydb.iso2709.Report` (``records`` stored, ``errors``,
        ``max_mfn``, ``deleted``).

    Raises:
        IsoRecordError: with ``on_error="stop"``; and values that would
            mix encodings with an existing database's, as for
            :func:`import_iso` (with `encoding` in the place of
            `db_encoding`).
        DiskError: creating or writing the database failed.
        ReadOnlyError, LockTimeoutError: appending to an existing database.
        OSError: the JSON Lines file cannot be read.
        ValueError: a bad argument.
        ImportResumeError, CorruptionError: as for :func:`import_iso`.
    """
    check_on_error(on_error)
    _check_max_gap(max_gap)
    errs: list[IsoRecordError] = []
    report = Report()
    name = source_name(source)

    def records() -> Iterator[Incoming]:
        for rec in read_jsonl(source, encoding=encoding, on_error=on_error, errors=errs):
            if progress:
                progress(1)
            yield rec.mfn, rec.deleted, rec.fields, (rec.number, rec.offset)

    cp = _Checkpoint(checkpoint, source) if checkpoint is not None else None
    _store(records(), db_path, layout, mstxl, sync, on_error, report, name, max_gap, cp,
           declared=encoding, iso=False)
    report.errors[:0] = [e for e in errs if cp is None or (e.number or 0) > cp.skip]
    report.errors.sort(key=lambda e: getattr(e, "number", None) or 0)
    return report
