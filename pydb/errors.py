"""The exceptions of pydb: one tree under :class:`Error`.

::

    Error
    ├── CorruptionError            a file violates the CDS/ISIS format
    ├── NotFoundError (KeyError)   no such record (MFN never created or
    │                              physically deleted)
    ├── DiskError (OSError)        an operating-system call failed
    │   ├── DatabaseNotFoundError (FileNotFoundError)
    │   └── DatabaseExistsError (FileExistsError)
    ├── UnsupportedError (OSError) valid but unsupported (big-endian files,
    │                              O_DIRECT refused by the file system, ...)
    ├── RecordTooLargeError (ValueError)
    ├── ClosedError (ValueError)   the database was closed
    ├── ReadOnlyError              write on a read-only handle
    ├── LockTimeoutError (TimeoutError)  another writer holds the lock
    ├── SearchSyntaxError (ValueError)   bad search expression
    ├── FSTError (ValueError)      bad field select table
    ├── IsoRecordError (ValueError)  a record of an exchange file (ISO 2709,
    │                              JSON Lines) that cannot be read or written
    └── FieldDecodeError (UnicodeDecodeError)  a field value that does not
                                   decode with the database's encoding

Warnings: PendingLogWarning, EncodingDetectionWarning.
"""

__all__ = [
    "Error", "CorruptionError", "NotFoundError", "DiskError",
    "DatabaseNotFoundError", "UnsupportedError", "RecordTooLargeError",
    "ClosedError", "ReadOnlyError", "LockTimeoutError", "SearchSyntaxError",
    "FSTError", "DatabaseExistsError", "IsoRecordError", "PendingLogWarning",
    "FieldDecodeError", "EncodingDetectionWarning",
]


class Error(Exception):
    """Root of every exception pydb raises on purpose.

    Attributes:
        committed: for an error raised by a commit (``Transaction.commit``,
            the end of a ``with db.transaction()`` block,
            ``Database.append/update/delete/undelete``), what the failure
            left: ``False`` -- nothing of the transaction is committed, a
            retry is safe; ``True`` -- the transaction IS committed (the
            write-ahead log was durable when applying it to the master
            file failed, e.g. ENOSPC on the ``.mst``; the handle's next
            transaction applies it first -- or, after a failed fsync, the
            next open, the handle being read-only until then): do not retry;
            ``None`` -- unknown (the log's own fsync failed): reopen and
            look.  ``False`` for errors of every other call.
    """

    committed: bool | None = False


class CorruptionError(Error):
    """A database file violates the format.

    Attributes: ``filename`` (str or None), ``offset`` (int, byte offset in
    that file where the fault was found, or -1), ``reason`` (str).
    """

    def __init__(self, filename, offset, reason):
        super().__init__(filename, offset, reason)
        self.filename = filename
        self.offset = offset
        self.reason = reason

    def __str__(self):
        where = f" at byte {self.offset}" if self.offset is not None and self.offset >= 0 else ""
        return f"{self.filename}{where}: {self.reason}"


class NotFoundError(Error, KeyError):
    """No record with that MFN: outside 1..max_mfn, never created, or
    physically deleted.  A :class:`KeyError`, so ``db.get()`` patterns work."""

    def __str__(self):
        return str(self.args[0]) if self.args else "record not found"


def _os_error_str(e: OSError) -> str:
    """str() of an OSError of pydb's: OSError's, but without "[Errno 0]"
    where no system call failed (errno 0)."""
    if e.errno != 0 or e.strerror is None:
        return OSError.__str__(e)
    return f"{e.filename}: {e.strerror}" if e.filename else e.strerror


class DiskError(Error, OSError):
    """An operating-system call failed (``errno``, ``strerror``,
    ``filename`` as for :class:`OSError`), or a read found its files
    replaced under it (a compaction: ``errno`` 0, and the message then has
    no ``[Errno 0]``)."""

    def __str__(self):
        return _os_error_str(self)


class DatabaseNotFoundError(DiskError, FileNotFoundError):
    """The master file or cross-reference file of a database is missing."""


class UnsupportedError(Error, OSError):
    """A valid request or file that pydb does not support, such as a
    big-endian master file or ``io="direct"`` on a file system that refuses
    O_DIRECT (``errno`` is then EINVAL; 0 where no system call failed, and
    the message then has no ``[Errno 0]``)."""

    def __str__(self):
        return _os_error_str(self)


class RecordTooLargeError(Error, ValueError):
    """A record exceeds the limit of the chosen leader layout (ISIS: 32767
    bytes; the FFI layouts allow records up to 1 GiB)."""


class ClosedError(Error, ValueError):
    """An operation on a closed database."""


class DatabaseExistsError(DiskError, FileExistsError):
    """Creating a database whose master file or cross-reference file
    already exists."""


class ReadOnlyError(Error):
    """A write on a database opened read-only, or on a handle that turned
    read-only after a failed fsync (reopen it to write again: the data
    committed before the failure is intact)."""


class LockTimeoutError(Error, TimeoutError):
    """Another thread or process holds the database's writer lock and did
    not release it within the timeout (``errno`` EAGAIN, ``filename``)."""


class SearchSyntaxError(Error, ValueError):
    """A search expression that does not parse.

    Attributes: ``reason`` (str), ``position`` (int, 0-based character
    offset in the expression where the fault is).
    """

    def __init__(self, reason, position):
        super().__init__(reason, position)
        self.reason = reason
        self.position = position

    def __str__(self):
        return f"{self.reason} (at position {self.position})"


class FSTError(Error, ValueError):
    """A field select table that pydb cannot parse or evaluate.

    Attributes: ``filename`` (str or None), ``line`` (int, 1-based line
    number), ``reason`` (str, naming the construct).
    """

    def __init__(self, filename, line, reason):
        super().__init__(filename, line, reason)
        self.filename = filename
        self.line = line
        self.reason = reason

    def __str__(self):
        # the parser's reasons name the line (and column) themselves
        where = self.filename or "<fst>"
        if str(self.reason).startswith(f"FST line {self.line},"):
            return f"{where}: {self.reason}"
        return f"{where}, line {self.line}: {self.reason}"


class IsoRecordError(Error, ValueError):
    """A record of an exchange file that cannot be read or written: an ISO
    2709 record whose leader, directory or terminators are damaged beyond
    the tolerant rules of docs/isis-formats.md §7.4, a JSON Lines line that is
    not a record, or a record that the chosen format cannot represent.

    Attributes: ``filename`` (str or None), ``number`` (int, 1-based
    position of the record in the file, or None), ``offset`` (int, byte
    offset of the start of the record in the file, or -1), ``reason``
    (str), ``mfn`` (int or None: the MFN, when the record has one).
    """

    def __init__(self, filename, number, offset, reason, mfn=None):
        super().__init__(filename, number, offset, reason)
        self.filename = filename
        self.number = number
        self.offset = offset
        self.reason = reason
        self.mfn = mfn

    def __str__(self):
        where = []
        if self.number is not None:
            where.append(f"record {self.number}")
        if self.mfn is not None:
            where.append(f"MFN {self.mfn}")
        if self.offset is not None and self.offset >= 0:
            where.append(f"byte {self.offset}")
        return f"{self.filename or '<stream>'}: {', '.join(where) or 'record'}: {self.reason}"


class StaleIndexWarning(UserWarning):
    """A search of a CDS/ISIS inverted file (the ``.cnt``/``.n0x``/``.l0x``
    /``.ifp`` files that came with the database) that is behind its master
    file: records the XRF flags as new or changed since the file was
    inverted (by WinISIS, CISIS, or pydb, which never updates such a file)
    are missed, or found by their old keys.  Invert with the ISIS tools,
    or build a native index (``pydb index DB``), which commits keep up to
    date."""


class PendingLogWarning(UserWarning):
    """A read-only :func:`pydb.open` could not apply the write-ahead log
    (a committed transaction whose application to the master file failed,
    typically on a full disk, and a replay that fails the same way): the
    handle opened anyway and reads the database as it was before that
    transaction; ``Database.info()["log_pending"]`` says why.  Opening the
    database again once the disk has room applies it."""


class ImportResumeError(Error):
    """An import cannot resume from its checkpoint file: the file was
    written for another exchange file, or the database changed since the
    interrupted import (no commit of it left the database's highest MFN).

    Attributes: ``filename`` (str: the checkpoint file), ``reason`` (str).
    """

    def __init__(self, filename, reason):
        super().__init__(filename, reason)
        self.filename = filename
        self.reason = reason

    def __str__(self):
        return f"{self.filename}: cannot resume: {self.reason}"


class FieldDecodeError(Error, UnicodeDecodeError):
    """A field value that does not decode with the database's encoding and
    error handler (``errors="strict"``), raised where the value is decoded
    (``Record.fields``, ``rec[tag]``, ``rec.get``, ``to_dict``...).  Also a
    :class:`UnicodeDecodeError`, so code that caught the codec's error
    still does; the codec's error is its ``__cause__``.

    Attributes: ``filename`` (str, the master file), ``mfn`` (int),
    ``tag`` (int), ``occurrence`` (int, 1-based among the fields of that
    tag in the record), and those of UnicodeDecodeError: ``encoding``,
    ``object`` (the field's stored bytes), ``start`` / ``end`` (byte
    offsets of the bad bytes in the value), ``reason``.
    """

    def __init__(self, encoding, object, start, end, reason, filename, mfn, tag,
                 occurrence):
        UnicodeDecodeError.__init__(self, encoding, object, start, end, reason)
        self.filename = filename
        self.mfn = mfn
        self.tag = tag
        self.occurrence = occurrence

    def __reduce__(self):
        return (type(self), (self.encoding, self.object, self.start, self.end,
                             self.reason, self.filename, self.mfn, self.tag,
                             self.occurrence))

    def __str__(self):
        bad = self.object[self.start:self.end]
        what = (f"byte 0x{bad[0]:02x}" if len(bad) == 1
                else f"bytes {bad.hex(' ')}")
        return (f"{self.filename}: MFN {self.mfn}, tag {self.tag}, occurrence "
                f"{self.occurrence}: {self.encoding!r} cannot decode {what} at "
                f"offset {self.start} of the value: {self.reason}")


class FieldEncodeError(Error, UnicodeEncodeError):
    """A str field value with a character the database's encoding cannot
    hold under its error handler (``"surrogateescape"``, the default,
    and ``"strict"`` alike: a character outside the code page is not a
    surrogate), raised where records are written (``append``,
    ``update``, a transaction's).
    Also a :class:`UnicodeEncodeError`, so code that caught the codec's
    error still does; that error is its ``__cause__``.  Nothing of the
    record is written.

    Attributes: ``field`` (int, the 1-based position of the field in the
    record's fields), ``tag`` (int), and those of UnicodeEncodeError:
    ``encoding`` (the database's), ``object`` (the value), ``start`` /
    ``end`` (0-based character offsets of what does not encode),
    ``reason``.
    """

    def __init__(self, encoding, object, start, end, reason, field, tag):
        UnicodeEncodeError.__init__(self, encoding, object, start, end, reason)
        self.field = field
        self.tag = tag

    def __reduce__(self):
        return (type(self), (self.encoding, self.object, self.start, self.end,
                             self.reason, self.field, self.tag))

    def __str__(self):
        bad = self.object[self.start:self.end]
        return (f"field {self.field} (tag {self.tag}): {bad!r} (character {self.start} "
                f"of the value) cannot be written in the database's encoding "
                f"{self.encoding!r}: {self.reason}")


class TermEncodeError(Error, UnicodeEncodeError):
    """A search expression or a key (str) with a character that the
    database's encoding cannot hold, even in lower case
    (:func:`pydb.search.fit_case`): no key of its index can contain it,
    and either the text is mistyped or the database was opened with
    another encoding than its records use (``pydb.open(path,
    encoding="auto")`` detects it).  Also a :class:`UnicodeEncodeError`,
    so code that caught the codec's error still does; that error is its
    ``__cause__``.

    Attributes: those of UnicodeEncodeError: ``encoding``, ``object``
    (the expression or key as given), ``start`` / ``end`` (0-based
    character offsets of what does not encode), ``reason``.
    """

    def __reduce__(self):
        return (type(self), (self.encoding, self.object, self.start, self.end,
                             self.reason))

    def __str__(self):
        bad = self.object[self.start:self.end]
        return (f"{self.object!r}: {bad!r} (character {self.start}) cannot be written "
                f"in the database's encoding {self.encoding!r}, so no key holds it; "
                "if the records use another encoding, open the database with it "
                "(encoding='auto' detects it)")


class EncodingDetectionWarning(UserWarning):
    """``pydb.open(..., encoding="auto")`` chose an encoding, but some of
    the sampled field values do not decode cleanly in it (a UTF-8 database
    with invalid bytes, an 8-bit one that also holds UTF-8 sequences, a
    database mixing encodings), or the data contradicts the database's
    configuration files.  The message names the encoding, the counts and
    the first fields concerned (MFN, tag, occurrence);
    ``Database.encoding_detection`` holds the whole evidence."""
