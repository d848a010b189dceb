"""A bridge between pydb records and pymarc (https://pypi.org/project/pymarc/).

MARC records live in a CDS/ISIS database the way ABCD and IsisMarc keep
them (docs/isis-formats.md §7.3): one field per MARC field, the tag as an
int (``"001"`` is 1), control fields 001-009 as their data, other fields
as the two indicators followed by the subfields written ``^a...`` (the
MARC subfield delimiter 0x1F becomes ``^``), and the leader in the fields
``leader_tag + p`` for its positions p = 5-9 and 17-19 (3005 ... 3019 by
default, a blank as ``#``; :func:`pydb.iso2709.leader_fields`).  That is
what :func:`pydb.import_iso` makes of a MARC file, and what
:func:`pydb.export_iso` (``"marc"``) writes back.

* :func:`to_pymarc` turns a record (a :class:`pydb.Record`, also
  ``record.to_pymarc()``, an :class:`~pydb.iso2709.IsoRecord` or a list of
  ``(tag, value)``) into a ``pymarc.Record``.  It builds the record's MARC
  transmission form, the bytes :func:`pydb.export_iso` writes for it, and
  has pymarc decode them (``pymarc.Record(data=...)``), so the result is
  exactly what ``pymarc.MARCReader`` gives for the exported file, with
  pymarc's own rules for the character set (leader position 9 ``a``:
  UTF-8; else MARC-8, unless `force_utf8`).
* :func:`from_pymarc` turns a ``pymarc.Record`` into the list of
  ``(tag, bytes)`` fields to give :meth:`pydb.Database.append` (or
  ``Transaction.append``): ``db.append(pydb.from_pymarc(rec))``.

pymarc is optional: ``pip install 'pydb[marc]'``.  Without it
:func:`to_pymarc`, :func:`from_pymarc` and :func:`append_pymarc` (given a
record) raise :class:`ImportError`; the rest of pydb does not need it.
"""

from __future__ import annotations

import codecs
import importlib
from collections.abc import Iterable
from typing import Any

from .errors import IsoRecordError
from .iso2709 import (
    INDICATORS,
    LEADER_TAG,
    _encode_record,
    _fields_of,
    _marc_form,
    check_leader_tag,
    is_utf8,
    leader_fields,
)

__all__ = ["to_pymarc", "from_pymarc", "append_pymarc"]


def _pymarc() -> Any:
    try:
        return importlib.import_module("pymarc")
    except ImportError as e:
        raise ImportError("pydb's MARC bridge needs pymarc: pip install 'pydb[marc]' "
                          "(or pip install 'pymarc>=5')", name="pymarc") from e


def _error(mfn: int | None, reason: str) -> IsoRecordError:
    return IsoRecordError(None, None, -1, reason, mfn)


def to_pymarc(record: Any, *, leader_tag: int | None = LEADER_TAG, indicators: str = "auto",
              utf8: bool | None = None, to_unicode: bool = True, force_utf8: bool = False,
              utf8_handling: str = "strict", file_encoding: str = "iso8859-1") -> Any:
    """The MARC record that a database record holds, as a ``pymarc.Record``.

    Args:
        record: a :class:`pydb.Record`, an :class:`~pydb.iso2709.IsoRecord`
            (its own leader is used) or a sequence of ``(tag, value)``
            (tags int; values bytes, or str encoded as UTF-8).
        leader_tag: base of the leader fields (default 3000: position p
            of the leader in field 3000 + p); they become the leader and
            are not fields of the result.  None: the record has none.
        indicators: for a record without leader fields, whose values
            therefore have no indicators: ``"auto"`` (default) and
            ``"add"`` give every field but 001-009 two blank indicators
            (pymarc's fields always have two); ``"present"`` takes the
            first two characters of each value as its indicators (ABCD or
            IsisMarc data without leader fields).  A record with leader
            fields always has them.
        utf8: leader position 9 (``a``: UTF-8) for a record without a
            leader field for it; None (default): whether the encoding of
            the :class:`pydb.Record`'s database is UTF-8 (True for other
            records).
        to_unicode, force_utf8, utf8_handling, file_encoding: passed to
            ``pymarc.Record`` (how pymarc decodes the bytes; see pymarc's
            ``MARCReader``).

    Returns:
        A ``pymarc.Record``: its leader is the 24 characters
        :func:`pydb.export_iso` writes (lengths and base address
        computed), its fields those of the record in stored order, control
        fields for tags 1-9, data fields with indicators and subfields
        (``^x`` is subfield x, codes as stored) for the others.

    Raises:
        IsoRecordError: the record cannot be a MARC record: a tag above
            999 (other than the leader fields) or below 1, a value holding
            one of the bytes 0x1D-0x1F, a record over 99999 bytes, a leader
            field that occurs twice or is not one character, or bytes that
            pymarc cannot decode (``utf8_handling="strict"``).  ``mfn``
            names the record.
        ImportError: pymarc is not installed.
        ValueError: a bad `indicators` or `leader_tag`.
    """
    pymarc = _pymarc()
    if indicators not in INDICATORS:
        raise ValueError(f"indicators must be 'auto', 'add' or 'present', not {indicators!r}")
    check_leader_tag(leader_tag)
    fields, mfn, deleted, leader = _fields_of(record)
    if utf8 is None:
        utf8 = is_utf8(getattr(record, "encoding", "utf-8"))
    try:
        fields, leader = _marc_form(fields, leader, deleted, leader_tag,
                                    "present" if indicators == "present" else "add", utf8)
        for tag, _ in fields:
            if isinstance(tag, int) and not 1 <= tag <= 999:
                raise ValueError(f"tag {tag} is not a MARC tag (001-999)")
        data = _encode_record(fields, "marc", mfn, deleted, leader, "utf-8", "isis", utf8)
    except (ValueError, UnicodeError) as e:
        raise _error(mfn, str(e)) from None
    if not fields:
        # pymarc refuses to decode a record without fields (NoFieldsFound)
        rec = pymarc.Record(to_unicode=to_unicode, force_utf8=force_utf8)
        rec.leader = pymarc.Leader(data[:24].decode("ascii"))
        return rec
    try:
        return pymarc.Record(data=data, to_unicode=to_unicode, force_utf8=force_utf8,
                             utf8_handling=utf8_handling, file_encoding=file_encoding)
    except (UnicodeError, pymarc.exceptions.PymarcException) as e:
        raise _error(mfn, f"pymarc cannot decode the record: {e}") from None


def _encode(value: Any, encoding: str, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if not isinstance(value, str):
        raise ValueError(f"{what}: value must be str or bytes, not {type(value).__name__}")
    try:
        return value.encode(encoding)
    except UnicodeEncodeError as e:
        raise ValueError(f"{what}: {encoding} cannot encode {value[e.start:e.end]!r}") from None


def from_pymarc(record: Any, *, leader_tag: int | None = LEADER_TAG,
                encoding: str = "utf-8") -> list[tuple[int, bytes]]:
    """The fields that store a ``pymarc.Record`` in a database.

    Args:
        record: a ``pymarc.Record`` (fields with str values, or pymarc's
            ``RawField`` with bytes, which are stored unchanged).
        leader_tag: where the leader goes: fields ``leader_tag + p`` for
            its positions 5-9 and 17-19 (default 3000, ABCD's tags; see
            :func:`pydb.iso2709.leader_fields`), first in the list; None:
            the leader is not stored.
        encoding: codec for str values (default UTF-8).  When the record
            has str values, leader position 9 is stored as what the bytes
            now are: ``a`` when `encoding` is UTF-8 (as pymarc's own
            ``as_marc`` does), else blank.

    Returns:
        A list of ``(tag, bytes)``: the leader fields, then one field per
        MARC field in order, the tag as an int; a control field (001-009)
        its data, a data field its two indicators and ``^`` + code + value
        for each subfield.  Give it to :meth:`pydb.Database.append`.

    Raises:
        IsoRecordError: the record cannot be stored in CDS/ISIS form: a tag
            that is not 001-999 (alphanumeric tags such as ``FMT`` have no
            ISIS tag), a subfield code that is not one character or a value
            holding ``^`` (the CDS/ISIS subfield delimiter), a leader that
            is not 24 ASCII characters, or a value that `encoding` cannot
            encode.
        ImportError: pymarc is not installed.
        LookupError: unknown `encoding`.
        ValueError: a bad `leader_tag`.
        TypeError: `record` is not a ``pymarc.Record`` (e.g. the None that
            ``pymarc.MARCReader`` yields for a record it cannot read).
    """
    pymarc = _pymarc()
    "".encode(encoding)
    check_leader_tag(leader_tag)
    if not isinstance(record, pymarc.Record):
        raise TypeError(f"from_pymarc needs a pymarc.Record, not {type(record).__name__} "
                        "(pymarc's MARCReader yields None for a record it cannot read; "
                        "its current_exception says why)")
    out: list[tuple[int, bytes]] = []
    try:
        text = False
        for field in record.fields:
            tag = field.tag
            if not (isinstance(tag, str) and tag.isascii() and tag.isdigit()
                    and 1 <= int(tag) <= 999):
                raise ValueError(f"tag {tag!r} has no CDS/ISIS tag (MARC tags 001-999 only)")
            if field.is_control_field():
                text = text or isinstance(field.data, str)
                out.append((int(tag), _encode(field.data, encoding, f"field {tag}")))
                continue
            ind = "".join(field.indicators or ())
            if len(ind) != 2:
                raise ValueError(f"field {tag} has indicators {ind!r}, not two characters")
            parts = [_encode(ind, "ascii", f"field {tag} indicators")]
            for sub in field.subfields:
                code, value = sub.code, sub.value
                text = text or isinstance(value, str)
                what = f"field {tag} subfield {code!r}"
                if len(code) != 1 or code == "^":
                    raise ValueError(f"{what}: a subfield code is one character other than '^'")
                raw = _encode(value, encoding, what)
                if b"^" in raw:
                    raise ValueError(f"{what} holds '^', the CDS/ISIS subfield delimiter")
                parts.append(b"^" + _encode(code, "ascii", what) + raw)
            out.append((int(tag), b"".join(parts)))
        if leader_tag is not None:
            lead = str(record.leader).encode("ascii")
            if len(lead) != 24:
                raise ValueError(f"the leader has {len(lead)} characters, not 24")
            if text:
                utf8 = codecs.lookup(encoding).name == "utf-8"
                lead = lead[:9] + (b"a" if utf8 else b" ") + lead[10:]
            out[:0] = leader_fields(lead, leader_tag)
    except (ValueError, UnicodeError) as e:
        raise _error(None, str(e)) from None
    return out


def append_pymarc(db: Any, records: Iterable[Any], *, leader_tag: int | None = LEADER_TAG,
                  encoding: str = "utf-8") -> list[int]:
    """Append pymarc records to a database in one transaction.

    Args:
        db: an open, writable :class:`pydb.Database`.
        records: an iterable of ``pymarc.Record`` (a ``pymarc.MARCReader``).
        leader_tag, encoding: as for :func:`from_pymarc`.

    Returns:
        The new MFNs (list of int), in the order of `records`.

    Raises:
        What :func:`from_pymarc` raises (IsoRecordError, TypeError for the
        None of a record pymarc could not read, ImportError, LookupError)
        and what :meth:`pydb.Database.transaction` and
        ``Transaction.append`` raise (ReadOnlyError, LockTimeoutError,
        RecordTooLargeError, DiskError).  On any error the transaction is
        rolled back: nothing is appended.
    """
    with db.transaction() as tx:
        return [tx.append(from_pymarc(r, leader_tag=leader_tag, encoding=encoding))
                for r in records]
