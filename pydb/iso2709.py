"""ISO 2709 exchange files: reading and writing the format.

ISO 2709 (ANSI Z39.2) is how CDS/ISIS databases travel between systems
(docs/isis-formats.md §7).  Two flavours exist:

* **CDS/ISIS** (``"isis"``, CISIS ``mx iso=``, WinISIS export, §7.2): field
  and record terminator ``#``; the byte stream of each record is cut into
  80-byte lines (LF or CRLF, not counted in any length); subfields stay
  inline as ``^a...``; indicator count and subfield-identifier length
  ``0``; entry map ``4500``.
* **MARC** (``"marc"``, §7.3): field terminator 0x1E, record terminator
  0x1D, subfield delimiter 0x1F, indicator count and identifier length 2,
  no line breaks.  Converting to ISIS storage, 0x1F becomes ``^`` and the
  indicators stay the first two characters of the value (IsisMarc / ABCD
  practice); writing does the reverse, except in control fields (tags
  1-9), which have no subfields: their ``^`` is written as it is.  Export
  then import is therefore lossless in both flavours for any field value,
  except that the MARC flavour cannot carry the bytes 0x1D-0x1F inside a
  value (such a record is reported, not written).  A MARC file read and
  written again keeps its bytes unless a data field holds a literal
  ``^``, which comes back as 0x1F (``subfields="raw"`` keeps it).  A
  MARC record's leader travels in fields 3005-3009 and 3017-3019 (ABCD's
  convention, :func:`leader_fields`; ``leader_tag`` of :func:`write`);
  records without them (CDS/ISIS data) are written with indicator count 0
  unless ``indicators`` says otherwise.

Reading is tolerant (§7.4): line breaks between records are skipped,
wrapping is detected per record, a record whose byte at the computed end is
not the record terminator is tried again with lengths counted in
characters (files written by tools that count characters, e.g. Bruma
``EuTeAmo.iso``), then recovered by scanning for the terminators with line
breaks dropped (files transcoded after writing, e.g. ABCD Windows
``marcuni.iso``); a base address that disagrees with the directory is
replaced by the directory's end (pymarc ``bad_records.mrc``).  Every such
repair is listed in :attr:`IsoRecord.repairs`.  A record that cannot be
recovered raises or is reported as :class:`~pydb.IsoRecordError` naming
the file, the record number, its byte offset and the reason; reading goes
on with the next record (``on_error="skip"``) or stops (``"stop"``).

The format stores no MFN (§7.2).  pydb can carry MFNs through a file with
``mfn_tag``: :func:`write` puts a first field of that tag holding the MFN in
decimal before each record that has one, and :func:`read` removes that
field again and puts its value in :attr:`IsoRecord.mfn`.  A record status
``d`` in the leader (the MARC code for a deleted record) marks a logically
deleted record (:attr:`IsoRecord.deleted`).  What an import into a database
does with MFNs and deleted records is :mod:`pydb.exchange`'s business.

Tags above 999 do not fit the 3-character tag of the directory.  pydb then
writes the leading digits in the directory's implementation-defined part
(leader position 22 gives its length, §7.1 entry map), so tag 3018 is
stored as tag ``018`` with implementation part ``3``; readers that honour
the entry map skip it, and pydb's reader joins it back.  Likewise a field
longer than 9999 bytes widens the length-of-field part (position 20).

This module knows nothing of databases: :mod:`pydb.exchange` moves records
between a :class:`pydb.Database` and these files (and JSON Lines,
:mod:`pydb.jsonl`).
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from . import _pydb
from .encoding import check_record_codec
from .errors import CorruptionError, IsoRecordError
from .paths import Source, is_path, opened, source_name

__all__ = ["read", "write", "IsoRecord", "IsoReader", "Report", "FLAVOURS",
           "check_on_error", "is_utf8", "LEADER_POSITIONS", "LEADER_TAG", "INDICATORS",
           "is_marc_leader", "leader_fields", "check_leader_tag", "MIN_LINE"]

#: Flavours understood by :func:`read` and :func:`write`.
FLAVOURS = ("isis", "marc")
_FT = {"isis": 0x23, "marc": 0x1E}
_RT = {"isis": 0x23, "marc": 0x1D}
_EOL = b"\r\n"
UTF8_BOM = b"\xef\xbb\xbf"   # skipped at the start of a file
_SEP = b"\r\n\x1a\x00"          # skipped between records (CR, LF, DOS EOF, NUL)
_LINE = 80
#: The narrowest line :func:`write` writes: the 24-byte leader, which a
#: reader (pydb's, CISIS's) takes from the start of a record's first line.
MIN_LINE = 24
_MIN_RECORD = 26                  # leader 24 + FT + RT (a record with no field)
# A plausible start of the next record, for resynchronisation after a bad
# one: 5 digits, 15 printable characters, the 4-digit entry map.
_LEADER_RE = re.compile(rb"(?=\d{5}[\x20-\x7e]{15}\d{4})")
_TERM_RE = re.compile(rb"[#\x1d\x1e]")
_HIGH_RE = re.compile(rb"[\x80-\xff]")
# "##" with line breaks allowed between: the end of an ISIS-flavour record
_ISIS_END_RE = re.compile(rb"#[\r\n]*#")


def _max_span(length: int) -> int:
    """Most bytes a record of leader length `length` may take in the file
    when the leader is wrong (8-bit text transcoded to UTF-8 after writing
    doubles it at most), line breaks included."""
    return 2 * length + 2 * (2 * length // 80 + 1) + 16


def _unwrap(seq, pos: int, length: int, crlf, lf, empty):
    """The `length` units (bytes of a buffer, or characters of a str) of
    a record stored from `pos` in lines of _LINE units, each full line but
    the last followed by a line break (`crlf` or `lf`): (the units joined
    with `empty`, offset just after them), or None when `seq` ends first
    or a line break is missing."""
    n = len(seq)
    parts, left = [], length
    while left > 0:
        k = min(_LINE, left)
        if pos + k > n:
            return None
        parts.append(seq[pos:pos + k])
        pos += k
        left -= k
        if left > 0:
            if seq[pos:pos + 2] == crlf:
                pos += 2
            elif seq[pos:pos + 1] == lf:
                pos += 1
            else:
                return None
    return empty.join(parts), pos


def _last_byte_at(buf, start: int, length: int, wrapped: bool):
    """Offset of the last byte of a record of `length` bytes at `start`
    (80-byte lines when `wrapped`, with the line break found after the
    first line), or None when it lies past the end of `buf`."""
    if not wrapped:
        last = start + length - 1
    else:
        eol = 2 if buf[start + 80:start + 82] == b"\r\n" else 1
        last = start + length - 1 + (length - 1) // 80 * eol
    return last if last < len(buf) else None


Tag = int | str


class IsoRecord:
    """One record read from an ISO 2709 file.

    Attributes:
        number: 1-based position of the record in the file (bad records
            count too, so numbers match what other tools report).
        offset: byte offset of the record's first byte in the file.
        leader: the 24-byte leader as stored (bytes; lengths in it may be
            wrong when the record was repaired).
        fields: list of ``(tag, value)``: `tag` an int for numeric tags (the
            usual case; ``"001"`` is 1), a str for alphanumeric MARC tags;
            `value` bytes, converted to ISIS storage (0x1F -> ``^``) in
            MARC-terminated records unless read with ``subfields="raw"``.
        mfn: the MFN carried by the file (``mfn_tag``), else None.
        deleted: True when the leader's record status is ``d``.
        repairs: tuple of str, one per tolerated defect (§7.4); empty for a
            sound record.
        flavour: ``"isis"`` or ``"marc"``: the terminators found.
    """

    __slots__ = ("number", "offset", "leader", "fields", "mfn", "deleted",
                 "repairs", "flavour")

    def __init__(self, number, offset, leader, fields, mfn=None, deleted=False,
                 repairs=(), flavour="isis"):
        self.number = number
        self.offset = offset
        self.leader = leader
        self.fields = fields
        self.mfn = mfn
        self.deleted = deleted
        self.repairs = tuple(repairs)
        self.flavour = flavour

    def __repr__(self):
        extra = f" repaired={len(self.repairs)}" if self.repairs else ""
        mfn = f" mfn={self.mfn}" if self.mfn is not None else ""
        return (f"<IsoRecord #{self.number} at {self.offset}{mfn} "
                f"fields={len(self.fields)}{extra}>")

    def __eq__(self, other):
        if not isinstance(other, IsoRecord):
            return NotImplemented
        return (self.fields, self.mfn, self.deleted) == (other.fields, other.mfn, other.deleted)

    __hash__ = None  # type: ignore[assignment]


class _Bad(Exception):
    """Internal: why one parse attempt of a record failed."""


def check_on_error(on_error: str) -> None:
    """Raise ValueError unless `on_error` is ``"skip"`` or ``"stop"`` (the
    two ways every reader, writer, import and export of pydb treats a bad
    record)."""
    if on_error not in ("skip", "stop"):
        raise ValueError(f"on_error must be 'skip' or 'stop', not {on_error!r}")


def _int_tag(tag: Tag) -> Tag:
    return int(tag) if isinstance(tag, str) and tag.isascii() and tag.isdigit() else tag


# ---------------------------------------------------------------- reading

class IsoReader:
    """Iterator over the records of an ISO 2709 file; made by :func:`read`.

    Iterating yields :class:`IsoRecord` objects.  After (or during) the
    iteration: ``errors`` is the list of :class:`~pydb.IsoRecordError` for
    the records skipped; ``count`` the records yielded; ``repaired`` how
    many of them needed a repair; ``position`` the byte offset reached;
    ``size`` the size of the input in bytes.  Use as a context manager (or
    call :meth:`close`) to release the file when the iteration is left
    early.
    """

    def __init__(self, source: Source, flavour: str = "auto", encoding: str = "utf-8",
                 on_error: str = "skip", subfields: str = "isis",
                 mfn_tag: int | None = None):
        if flavour not in ("auto",) + FLAVOURS:
            raise ValueError(f"flavour must be 'auto', 'isis' or 'marc', not {flavour!r}")
        if subfields not in ("isis", "raw"):
            raise ValueError(f"subfields must be 'isis' or 'raw', not {subfields!r}")
        check_on_error(on_error)
        check_record_codec(encoding, ascii_structure=True)   # LookupError now
        if mfn_tag is not None and (isinstance(mfn_tag, bool) or not isinstance(mfn_tag, int)
                                    or not 0 <= mfn_tag <= 99999):
            raise ValueError(f"mfn_tag must be None or a tag 0..99999, not {mfn_tag!r}")
        self.flavour = flavour
        self.encoding = encoding
        self.on_error = on_error
        self.subfields = subfields
        self.mfn_tag = mfn_tag
        self.errors: list[IsoRecordError] = []
        self.count = 0
        self.repaired = 0
        self.position = 0
        self._close: Callable[[], None] | None = None
        self.filename: str | None = source_name(source)
        self._buf: mmap.mmap | bytes | bytearray
        if is_path(source):
            with open(source, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size:
                    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    self._buf, self._close = m, m.close
                else:
                    self._buf = b""
        else:
            data = source.read()
            if not isinstance(data, (bytes, bytearray)):
                raise TypeError("read() needs a file opened in binary mode")
            self._buf = data
        self.size = len(self._buf)
        self._rts = (0x23, 0x1D) if flavour == "auto" else (_RT[flavour],)
        self._flavours = {"auto": 3, "isis": 1, "marc": 2}[flavour]   # _iso_strict
        self._memo: dict[str, tuple[int, int, int | None]] = {}
        self._it: Generator[IsoRecord, None, None] = self._records()

    def __iter__(self) -> Iterator[IsoRecord]:
        return self

    def __next__(self) -> IsoRecord:
        return next(self._it)

    def __enter__(self) -> IsoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the input file (records already yielded stay valid);
        iteration ends.  Idempotent."""
        self._it.close()
        if self._close:
            self._close()
            self._close = None

    # -- the walk over the file ------------------------------------------
    def _records(self) -> Generator[IsoRecord, None, None]:
        buf, n = self._buf, len(self._buf)
        # a UTF-8 byte-order mark (an editor's "save as UTF-8") is not part
        # of the first record: skipped, and named among its repairs
        bom = buf[:3] == UTF8_BOM
        pos, number = (3 if bom else 0), 0
        try:
            while True:
                while pos < n and buf[pos] in _SEP:
                    pos += 1
                self.position = pos
                if pos >= n:
                    return
                number += 1
                try:
                    rec, end = self._parse(buf, pos, number)
                except IsoRecordError as e:
                    if self.on_error == "stop":
                        raise
                    self.errors.append(e)
                    pos = self._resync(buf, pos)
                    continue
                pos = end
                if bom and number == 1:
                    rec.repairs = ("a UTF-8 byte-order mark before it skipped",
                                   *rec.repairs)
                if self.mfn_tag is not None:
                    try:
                        self._take_mfn(rec)
                    except IsoRecordError as e:
                        if self.on_error == "stop":
                            raise
                        self.errors.append(e)
                        continue
                self.position = pos
                self.count += 1
                if rec.repairs:
                    self.repaired += 1
                yield rec
        finally:
            self.position = min(max(self.position, pos), n)
            if self._close:
                self._close()
                self._close = None

    def _error(self, number, offset, reason, mfn=None):
        return IsoRecordError(self.filename, number, offset, reason, mfn)

    def _take_mfn(self, rec: IsoRecord) -> None:
        for i, (tag, value) in enumerate(rec.fields):
            if tag == self.mfn_tag:
                if not (value.isascii() and value.isdigit()) or not 0 < int(value) < 2**31:
                    raise self._error(rec.number, rec.offset,
                                      f"MFN field {self.mfn_tag} holds {_show(value, 20)}, "
                                      "not an MFN (1..2147483647)")
                rec.mfn = int(value)
                del rec.fields[i]
                return
        raise self._error(rec.number, rec.offset, f"no MFN field (tag {self.mfn_tag})")

    def _resync(self, buf, start: int) -> int:
        """Start of the next plausible record after a bad one at `start`: a
        leader that follows a record terminator, or that starts a line and
        reads as a record."""
        n = len(buf)
        rts = [_RT[self.flavour]] if self.flavour != "auto" else [0x1D, 0x23]
        pos = start + 1
        while pos < n:
            m = _LEADER_RE.search(buf, pos)
            if not m:
                return n
            cand = m.start()
            q = cand - 1
            while q > start and buf[q] in _SEP:
                q -= 1
            if q > start and buf[q] in rts:
                return cand
            if buf[cand - 1] in _SEP and self._sound_at(buf, cand):
                return cand
            pos = cand + 1
        return n

    def _parse(self, buf, start: int, number: int) -> tuple[IsoRecord, int]:
        # A sound record, in C (csrc/iso2709.c: the same rules as the first
        # step below, without repairs); anything else is parsed here.
        got = _pydb._iso_strict(buf, start, self._flavours, self.subfields == "isis")
        if got is not None:
            leader, fields, flav, end = got
            return IsoRecord(number, start, leader, fields, None, leader[5:6] == b"d",
                             (), flav), end
        n = len(buf)
        head = bytes(buf[start:start + 24])
        if len(head) < 5 or not (head[:5].isascii() and head[:5].isdigit()):
            if n - start < 24:
                raise self._error(number, start, f"truncated: {n - start} byte(s) at the "
                                  "end of the file are not a record")
            raise self._error(number, start,
                              f"record length {head[:5]!r} is not 5 digits")
        length = int(head[:5])
        if length < _MIN_RECORD:
            raise self._error(number, start, f"record length {length} is below the "
                              f"minimum of {_MIN_RECORD} (leader, field and record terminators)")
        if len(head) < 24:
            raise self._error(number, start, f"truncated: the file ends {n - start} "
                              "byte(s) into the leader")
        reasons = []
        # 1. lengths in bytes, wrapped at 80 bytes or not (wrapping guessed
        #    from the byte after the first 80, the other way tried next).
        wrapped_first = length > _LINE and start + _LINE < n and buf[start + _LINE] in _EOL
        for wrapped in ((True, False) if wrapped_first else (False, True)):
            last = _last_byte_at(buf, start, length, wrapped)
            if last is None:
                continue
            if buf[last] not in self._rts:
                reasons.append(f"the byte before the computed end is "
                               f"{_show(buf[last:last + 1])}, not a record terminator")
                continue
            got = self._collect_bytes(buf, start, length, wrapped)
            if got is None:
                continue
            logical, end = got
            try:
                return self._strict(logical, start, number, end, [], None)
            except _Bad as e:
                reasons.append(str(e))
        if not reasons:
            reasons.append(f"record length {length} runs past the end of the file "
                           f"({n - start} byte(s) left)")
        # 2. lengths counted in characters of `encoding` (§7.4, EuTeAmo.iso),
        #    only worth trying when the record has 8-bit bytes
        if _multibyte(self.encoding) and self._memo_search(
                "high", start, start + 4 * length, lambda p, lim: _start_or_none(
                    _HIGH_RE.search(buf, p, lim))) is not None:
            got = self._collect_chars(buf, start, length)
            if got is not None:
                logical, end = got
                try:
                    return self._strict(logical, start, number, end,
                                        ["lengths count characters, not bytes"], self.encoding)
                except _Bad:
                    pass
        # 3. scan for the terminators, line breaks dropped (§7.4, marcuni.iso)
        try:
            return self._scan(buf, start, number, length)
        except _Bad as e:
            reasons.append(str(e))
        raise self._error(number, start, reasons[0] if len(reasons) == 1 or
                          reasons[0] == reasons[-1] else f"{reasons[0]}; {reasons[-1]}")

    @staticmethod
    def _collect_bytes(buf, start, length, wrapped):
        if not wrapped:
            if start + length > len(buf):
                return None
            return bytes(buf[start:start + length]), start + length
        return _unwrap(buf, start, length, b"\r\n", b"\n", b"")

    def _collect_chars(self, buf, start, length):
        # at most 4 bytes a character and 2 bytes of line break per line
        limit = min(len(buf), start + 4 * length + 2 * (length // _LINE + 2))
        text = bytes(buf[start:limit]).decode(self.encoding, "surrogateescape")
        for wrapped in (True, False):
            if not wrapped:
                if len(text) < length:
                    return None
                logical, used = text[:length], length
            else:
                got = _unwrap(text, 0, length, "\r\n", "\n", "")
                if got is None:
                    continue
                logical, used = got
            if logical and logical[-1] in "#\x1d":
                end = start + len(text[:used].encode(self.encoding, "surrogateescape"))
                return logical, end
        return None

    def _terminators(self, ft_byte):
        """(flavour, FT, RT) for a record whose directory ends with
        `ft_byte`, or None when that is not a field terminator."""
        if self.flavour != "auto":
            return (self.flavour, _FT[self.flavour], _RT[self.flavour]) \
                if ft_byte == _FT[self.flavour] else None
        if ft_byte == 0x23:
            return "isis", 0x23, 0x23
        if ft_byte == 0x1E:
            return "marc", 0x1E, 0x1D
        return None

    def _entry_map(self, leader, repairs):
        em = leader[20:23]
        ok = all(c in "0123456789" for c in _chars(em)) and _chars(em)[0] != "0" \
            and _chars(em)[1] != "0"
        if not ok:
            repairs.append(f"entry map {_show(leader[20:24])} replaced by 4500")
            return 4, 5, 0
        return int(_chars(em)[0]), int(_chars(em)[1]), int(_chars(em)[2])

    def _strict(self, seq, start, number, end, repairs, enc):
        """Parse one record whose logical content `seq` (bytes, or str when
        lengths count characters) is known; raise _Bad when it is not a
        sound ISO 2709 record."""
        is_str = isinstance(seq, str)
        L = len(seq)
        last = ord(seq[-1]) if is_str else seq[-1]
        leader = seq[:24]
        ll, ls, li = self._entry_map(leader, repairs)
        esize = 3 + ll + ls + li
        # the directory ends at the first field terminator, at an entry
        # boundary
        ends = [i for i in (seq.find("#" if is_str else b"#", 24),
                            seq.find("\x1e" if is_str else b"\x1e", 24)) if i >= 0]
        dir_end = min(ends) if ends else -1
        if dir_end < 0 or (dir_end - 24) % esize or self._terminators(
                ord(seq[dir_end]) if is_str else seq[dir_end]) is None:
            raise _Bad("no field terminator after the directory (bad directory "
                       f"of {(dir_end if dir_end >= 0 else L) - 24} bytes, entries "
                       f"of {esize})")
        flav, ft, rt = self._terminators(ord(seq[dir_end]) if is_str else seq[dir_end])
        if last != rt:
            raise _Bad(f"the byte before the computed end is {_show(seq[-1:])}, "
                       f"not the record terminator {_show(bytes([rt]))}")
        base = dir_end + 1
        lb = leader[12:17]
        if not (_chars(lb).isascii() and _chars(lb).isdigit()) or int(lb) != base:
            repairs.append(f"base address {_show(lb)} in the leader; the directory "
                           f"ends at {base}")
        fields = []
        directory = _chars(seq[24:dir_end])
        conv = flav == "marc" and self.subfields == "isis"
        e1, e2 = 3 + ll, 3 + ll + ls
        for i in range(0, dir_end - 24, esize):
            ent = directory[i:i + esize]
            tag, ln, st = ent[:3], ent[3:e1], ent[e1:e2]
            if not (ln.isdigit() and st.isdigit() and ln.isascii() and st.isascii()):
                raise _Bad(f"directory entry {i // esize + 1} {ent!r} has a length or "
                           "start that is not digits")
            flen, fst = int(ln), int(st)
            a, b = base + fst, base + fst + flen
            if flen < 1 or b > L - 1:
                raise _Bad(f"field {tag} (directory entry {i // esize + 1}): start "
                           f"{fst} + length {flen} runs past the data area "
                           f"({L - 1 - base} bytes)")
            if (ord(seq[b - 1]) if is_str else seq[b - 1]) != ft:
                raise _Bad(f"field {tag} (directory entry {i // esize + 1}) does "
                           f"not end with the field terminator")
            value = seq[a:b - 1]
            if is_str:
                value = value.encode(enc, "surrogateescape")
            elif conv and 0x1F in value:
                value = value.replace(b"\x1f", b"^")
            if tag.isdigit() and tag.isascii():
                impl = ent[e2:]
                tag = int(impl + tag) if impl and impl.isdigit() and impl.isascii() \
                    else int(tag)
            elif not tag.isprintable():
                raise _Bad(f"directory entry {i // esize + 1} has tag {tag!r}")
            fields.append((tag, value))
        if is_str and conv:
            fields = [(t, self._value(v, flav)) for t, v in fields]
        leader_b = leader.encode(enc, "surrogateescape") if is_str else bytes(leader)
        return IsoRecord(number, start, leader_b, fields, None,
                         leader_b[5:6] == b"d", repairs, flav), end

    def _value(self, value: bytes, flav: str) -> bytes:
        if flav == "marc" and self.subfields == "isis" and b"\x1f" in value:
            return value.replace(b"\x1f", b"^")
        return value

    def _scan(self, buf, start, number, length):
        """§7.4 fallback: the directory up to its field terminator, then as
        many terminated fields as it has entries, then the record
        terminator; line breaks are dropped and lengths ignored."""
        n = len(buf)
        repairs = [f"record length {length} in the leader does not match the "
                   "record; read by scanning for the terminators"]
        leader = bytes(buf[start:start + 24])
        ll, ls, li = self._entry_map(leader, repairs)
        esize = 3 + ll + ls + li
        pos = start + 24
        limit = min(n, start + _max_span(length))
        # directory: entries up to the first terminator (line breaks dropped)
        def finder(p, lim):
            m = _TERM_RE.search(buf, p, lim)
            return m.start() if m else None
        t = self._memo_search("term", pos, limit, finder)
        if t is None:
            raise _Bad("no terminator after the directory" +
                       (" (truncated)" if limit >= n else ""))
        dbytes = bytes(buf[pos:t]).replace(b"\r", b"").replace(b"\n", b"")
        pos = t
        c = buf[pos]
        if len(dbytes) % esize or self._terminators(c) is None:
            raise _Bad(f"bad directory: terminator {_show(bytes([c]))} after "
                       f"{len(dbytes)} bytes, not a multiple of the entry size {esize}")
        flav, ft, rt = self._terminators(c)
        pos += 1
        entries = []
        for k in range(0, len(dbytes), esize):
            ent = bytes(dbytes[k:k + esize])
            tag = ent[:3].decode("latin-1")
            if not ent[3:3 + ll + ls].isdigit() or not tag.isprintable():
                raise _Bad(f"directory entry {k // esize + 1} {_show(ent)} is not "
                           "a tag followed by digits")
            impl = ent[3 + ll + ls:].decode("latin-1")
            if impl and impl.isdigit() and tag.isdigit():
                tag = impl + tag
            entries.append((_int_tag(tag), int(ent[3:3 + ll]), int(ent[3 + ll:3 + ll + ls])))
        end = self._find_end(buf, pos, limit, bool(entries), rt)
        if end < 0:
            raise _Bad("no record terminator found after the directory"
                       + (" (truncated)" if limit >= n else ""))
        cand = self._next_sound(buf, pos, end)
        if cand is not None:
            raise _Bad(f"truncated: a sound record starts at byte {cand}, "
                       "inside this one")
        data = bytes(buf[pos:end]).replace(b"\r", b"").replace(b"\n", b"")
        pieces = data.split(bytes([ft]))
        span = end + 1 - start
        if len(pieces) == len(entries) + 1 and pieces[-1] == b"":
            # at most twice the length in the leader (8-bit text transcoded
            # to UTF-8 after writing), plus line breaks
            if span > 2 * length + 2 * (2 * length // _LINE + 1) + 16:
                raise _Bad(f"the terminators found span {span} bytes, too far from "
                           f"the record length {length}")
            values = pieces[:-1]
        elif not entries:
            raise _Bad("data after a directory with no entry")
        elif span > length + 2 * (length // _LINE + 1) + 16:
            raise _Bad(f"{len(pieces) - 1} field terminators for {len(entries)} "
                       f"directory entries, and the record terminator found "
                       f"{span} bytes on is past the record length {length}")
        else:
            repairs.append(f"{len(pieces) - 1} field terminators for {len(entries)} "
                           "directory entries; fields cut by the directory's start "
                           "and length")
            values = []
            for _tag, flen, fst in entries:
                v = data[fst:fst + flen]
                values.append(v[:-1] if v.endswith(bytes([ft])) else v)
        fields = [(tag, self._value(v, flav)) for (tag, _, _), v in zip(entries, values,
                                                                           strict=True)]
        return IsoRecord(number, start, leader, fields, None, leader[5:6] == b"d",
                         repairs, flav), end + 1

    def _memo_search(self, key, pos, limit, finder):
        """``finder(p, limit)`` (first match in [p, limit) or None),
        remembering the last answer per `key`: a damaged file makes the
        reader probe many nearby starts, and this keeps the searches at
        O(file size) in all."""
        p0, reached, found = self._memo.get(key, (-1, -1, None))
        if p0 <= pos <= reached:
            if found is not None:
                return found if found < limit else None
            if limit <= reached:
                return None
            begin = reached
        else:
            p0 = begin = pos
        res = finder(begin, limit)
        self._memo[key] = (p0, limit, None) if res is None else (p0, res, res)
        return res

    def _next_sound(self, buf, pos, end):
        """The first offset in [pos, end) that starts a line and a sound
        record (see _sound_at), or None."""
        def finder(p, limit):
            while True:
                m = _LEADER_RE.search(buf, p, limit)
                if not m:
                    return None
                cand = m.start()
                if cand > 0 and buf[cand - 1] in _EOL and self._sound_at(buf, cand):
                    return cand
                p = cand + 1
        return self._memo_search("sound", pos, end, finder)

    def _sound_at(self, buf, start) -> bool:
        """True when a record that needs no repair of its lengths starts at
        `start` (wrapped or not)."""
        length = int(buf[start:start + 5])
        for wrapped in (False, True):
            last = _last_byte_at(buf, start, length, wrapped)
            if last is None or buf[last] not in self._rts:
                continue
            got = self._collect_bytes(buf, start, length, wrapped)
            if got is not None and length >= _MIN_RECORD:
                try:
                    self._strict(got[0], start, 0, got[1], [], None)
                    return True
                except _Bad:
                    pass
        return False

    def _find_end(self, buf, pos, limit, has_fields, rt):
        """Index of the record terminator of a record whose data area
        starts at `pos`, or -1.  For ``#`` (FT = RT) it is the second
        ``#`` of a ``##`` (line breaks allowed between) that is followed by
        the end of the file or a leader; for 0x1D the first 0x1D."""
        n = len(buf)

        def skip(j):
            while j < n and buf[j] in _EOL:
                j += 1
            return j

        if rt != 0x23:
            def finder(p, lim):
                i = buf.find(bytes([rt]), p, lim)
                return i if i >= 0 else None
            res = self._memo_search("rt", pos, limit, finder)
            return -1 if res is None else res
        if not has_fields:
            j = skip(pos)
            return j if j < n and buf[j] == rt else -1

        def finder(p, lim):
            m = _ISIS_END_RE.search(buf, p, lim)
            while m:
                j = m.end() - 1
                k = skip(j + 1)
                if k >= n or _LEADER_RE.match(buf, k):
                    return j
                m = _ISIS_END_RE.search(buf, m.start() + 1, lim)
            return None
        # the memo keys on the first '#' of the pair; report its second
        res = self._memo_search("isis-end", pos, limit, lambda p, lim: _first_hash(
            finder(p, lim), buf))
        if res is None:
            return -1
        return skip(res + 1)


def _start_or_none(m):
    return m.start() if m else None


def _first_hash(j, buf):
    """The first '#' of the '##' pair whose second '#' is at `j`."""
    if j is None:
        return None
    i = j - 1
    while buf[i] in _EOL:
        i -= 1
    return i


def _chars(x) -> str:
    return x if isinstance(x, str) else bytes(x).decode("latin-1")


def _show(x, limit: int | None = None) -> str:
    """`x` (str or bytes, bytes as Latin-1) as a quoted text for a message;
    past `limit` characters cut, with "..." and its whole length."""
    text = x if isinstance(x, str) else bytes(x).decode("latin-1")
    if limit is not None and len(text) > limit:
        return f"{text[:limit]!r}... ({len(text)} characters)"
    return repr(text)


def _multibyte(encoding: str) -> bool:
    try:
        return len("\u00e9".encode(encoding)) > 1
    except (UnicodeError, LookupError):
        return True


def read(source: Source, flavour: str = "auto", *, encoding: str = "utf-8",
         on_error: str = "skip", subfields: str = "isis",
         mfn_tag: int | None = None) -> IsoReader:
    """Read the records of an ISO 2709 file (docs/isis-formats.md §7).

    Args:
        source: a path (str, bytes, os.PathLike) or a binary file object
            (read to its end).
        flavour: ``"auto"`` (default: the terminators of each record decide:
            ``#`` CDS/ISIS, 0x1E/0x1D MARC), ``"isis"`` or ``"marc"``.
        encoding: character set of the file, used only to count lengths in
            characters when a file was written that way (§7.4); values are
            always returned as the file's bytes.
        on_error: ``"skip"`` (default): a record that cannot be recovered is
            left out and its :class:`~pydb.IsoRecordError` appended to the
            reader's ``errors``; ``"stop"``: that error is raised.
        subfields: ``"isis"`` (default): in MARC records the subfield
            delimiter 0x1F becomes ``^`` (ISIS storage, §7.3); ``"raw"``:
            values as stored.
        mfn_tag: tag of the field that carries the MFN (see the module
            documentation); it is removed from the fields and its value put
            in :attr:`IsoRecord.mfn`.  A record without it is an error.

    Returns:
        An :class:`IsoReader`: iterate it for :class:`IsoRecord` objects; its
        ``errors``, ``count`` and ``repaired`` tell what happened.  The
        input never makes it hang or read out of bounds: every record
        advances the position by at least one byte.

    Raises:
        OSError: the file cannot be opened.
        IsoRecordError: with ``on_error="stop"``, the first bad record
            (during iteration).
        ValueError, LookupError: a bad argument (`mfn_tag` not None or
            0..99999), an unknown encoding, or one that does not read
            ASCII as itself (UTF-16, EBCDIC: the leader and directory are
            ASCII digits).
    """
    return IsoReader(source, flavour, encoding, on_error, subfields, mfn_tag)


# ---------------------------------------------------------------- writing

def _fields_of(rec) -> tuple[list, int | None, bool, bytes | None]:
    """(fields, mfn, deleted, leader) of a record given to write()."""
    if isinstance(rec, IsoRecord):
        return list(rec.fields), rec.mfn, rec.deleted, rec.leader
    fields = getattr(rec, "fields", None)
    if fields is not None and not isinstance(rec, (list, tuple)):
        out = [(f[0], f.raw if hasattr(f, "raw") else f[1]) for f in fields]
        return out, getattr(rec, "mfn", None), bool(getattr(rec, "deleted", False)), None
    return list(rec), None, False, None


def is_utf8(encoding: str | None) -> bool:
    """True if the codec name `encoding` spells UTF-8 (``"utf-8"``,
    ``"UTF8"``, ``"utf_8"``): what the MARC leader's position 9 says.
    False for None, ``""`` and anything else."""
    return encoding is not None and encoding.lower().replace("_", "-") in ("utf-8", "utf8")


# ------------------------------------------------------------ the MARC leader

#: The positions of a MARC leader that say something about the record
#: (record status, type of record, bibliographic level, type of control,
#: character coding scheme, encoding level, descriptive cataloguing form,
#: multipart resource record level; MARC 21 Bibliographic, "Leader").  The
#: others are lengths, the base address, the indicator count, the subfield
#: code length and the entry map, which the writer computes.
LEADER_POSITIONS = (5, 6, 7, 8, 9, 17, 18, 19)

#: Default base of the leader tags: position p of a MARC leader is kept in
#: field ``3000 + p`` (3005 record status ... 3019), as ABCD's MARC
#: databases do and as CISIS ``mx`` reads and writes with ``isotag1=3000``
#: / ``outisotag1=3000`` (docs/isis-formats.md §7.3).
LEADER_TAG = 3000

#: Values of `indicators` (:func:`write`, :func:`pydb.export_iso`).
INDICATORS = ("auto", "add", "present")


def is_marc_leader(leader: bytes | None) -> bool:
    """True when a leader read from a file is that of a MARC record: 24
    bytes with indicator count ``2`` at position 10 (MARC 21, UNIMARC).
    CDS/ISIS records have ``0`` there, even when written with the MARC
    terminators (docs/isis-formats.md §7.2)."""
    return leader is not None and len(leader) == 24 and leader[10:11] == b"2"


def leader_fields(leader: bytes, leader_tag: int = LEADER_TAG) -> list[tuple[int, bytes]]:
    """The fields that keep a MARC leader in a database (ABCD's convention).

    Args:
        leader: the 24-byte leader of a MARC record (bytes).
        leader_tag: base of the tags (default :data:`LEADER_TAG`, 3000).

    Returns:
        One ``(leader_tag + p, byte)`` field for each position p of
        :data:`LEADER_POSITIONS`, in that order; a blank is stored as
        ``#`` (ABCD's worksheets, and MARC 21's documentation, write a blank
        so).  :func:`write` in the MARC flavour turns the fields back into
        the leader, ``#`` into a blank.

    Raises:
        ValueError: `leader` is not 24 bytes.
    """
    leader = bytes(leader)
    if len(leader) != 24:
        raise ValueError(f"a leader has 24 bytes, not {len(leader)}")
    out = []
    for p in LEADER_POSITIONS:
        b = leader[p:p + 1]
        out.append((leader_tag + p, b"#" if b == b" " else b))
    return out


def check_leader_tag(leader_tag: object) -> None:
    """Raise ValueError unless `leader_tag` is None or an int 1..65516 (so
    that every leader field ``leader_tag + p`` is an ISIS tag)."""
    if leader_tag is not None and (isinstance(leader_tag, bool) or not isinstance(leader_tag, int)
                                   or not 1 <= leader_tag <= 65535 - 19):
        raise ValueError(f"leader_tag must be None or an int 1..65516, not {leader_tag!r}")


def _is_control(tag: Tag) -> bool:
    """MARC control field (001-009): no indicators, no subfields."""
    if isinstance(tag, str):
        return tag.isascii() and tag.isdigit() and int(tag) < 10
    return int(tag) < 10


def _take_leader(fields, leader_tag: int) -> tuple[dict[int, bytes], list]:
    """({leader position: byte}, the other fields) of a record whose leader
    is kept in fields `leader_tag` + p; ValueError for a leader field that
    occurs twice or does not hold one ASCII character."""
    where: dict[Tag, int] = {leader_tag + p: p for p in LEADER_POSITIONS}
    got: dict[int, bytes] = {}
    rest = []
    for tag, value in fields:
        p = where.get(_int_tag(tag)) if isinstance(tag, (int, str)) else None
        if p is None:
            rest.append((tag, value))
            continue
        v = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)
        if p in got:
            raise ValueError(f"leader field {leader_tag + p} occurs more than once (it "
                             f"holds leader position {p})")
        if len(v) != 1 or not 0x20 <= v[0] <= 0x7E:
            raise ValueError(f"leader field {leader_tag + p} holds {_show(v, 20)}, not the "
                             f"one ASCII character of leader position {p}")
        got[p] = b" " if v == b"#" else v
    return got, rest


def _marc_leader(pos: dict[int, bytes], deleted: bool, utf8: bool, indicators: bool) -> bytes:
    """A MARC leader (lengths and base address left as zeros for
    _encode_record): positions from `pos`, the rest blank except status
    ``n`` (``d`` when `deleted`), coding ``a`` when `utf8` and no position
    9 is given, indicator count 2 or 0, subfield code length 2."""
    lead = bytearray(b"00000n    " + (b"2" if indicators else b"0") + b"200000   4500")
    if utf8:
        lead[9] = 0x61
    for p, v in pos.items():
        lead[p] = v[0]
    if deleted:
        lead[5] = 0x64
    return bytes(lead)


def _marc_form(fields: list, leader: bytes | None, deleted: bool, leader_tag: int | None,
               indicators: str, utf8: bool) -> tuple[list, bytes]:
    """(fields, leader) of a record written in the MARC flavour: the leader
    of an IsoRecord as read, else built from the leader fields (which are
    taken out); indicators added when asked and the values have none."""
    if leader is not None and len(leader) == 24:
        has = leader[10:11] == b"2"
    else:
        pos: dict[int, bytes] = {}
        if leader_tag is not None:
            pos, fields = _take_leader(fields, leader_tag)
        has = bool(pos) or indicators == "present"
        leader = _marc_leader(pos, deleted, utf8, has)
    if not has and indicators == "add":
        fields = [(t, v if _is_control(t) else
                   ("  " + v if isinstance(v, str) else b"  " + bytes(v))) for t, v in fields]
        leader = bytes(leader[:10]) + b"2" + bytes(leader[11:])
    return fields, leader


def _encode_record(fields, flavour, mfn, deleted, leader, encoding,
                   subfields="isis", utf8=None) -> bytes:
    """One record in ISO 2709 form (no line breaks), encoded in C
    (csrc/iso2709.c, ``pydb_iso_encode``); raises ValueError with the
    reason when the record cannot be represented.  `leader`'s positions
    5-11 and 17-19 are kept (status ``d`` when `deleted`); without one,
    the MARC flavour writes a leader without indicators and the CDS/ISIS
    flavour zeros."""
    if leader is not None and len(leader) == 24:
        mid = bytes(leader[5:12])
        tail = bytes(leader[17:20])
        if deleted and mid[:1] != b"d":
            mid = b"d" + mid[1:]
    elif flavour == "marc":
        # no leader given (write() always gives one): values without
        # indicators, indicator count 0
        lead = _marc_leader({}, deleted, is_utf8(encoding) if utf8 is None else utf8, False)
        mid, tail = lead[5:12], lead[17:20]
    else:
        mid = (b"d" if deleted else b"0") + b"000000"
        tail = b"000"
    return _pydb._iso_encode(fields, flavour == "marc", subfields == "isis", encoding,
                             mid, tail)


def _wrap(rec: bytes, width: int | None, eol: bytes) -> bytes:
    if not width:
        return rec + eol
    return eol.join(rec[i:i + width] for i in range(0, len(rec), width)) + eol


def write(target: Source, records: Iterable[Any], flavour: str = "isis", *,
          line_ending: str | None = None, line_width: int | None = None,
          encoding: str = "utf-8", mfn_tag: int | None = None,
          subfields: str = "isis", on_error: str = "stop",
          progress: Callable[[int], None] | None = None, marc_utf8: bool | None = None,
          leader_tag: int | None = LEADER_TAG, indicators: str = "auto") -> Report:
    """Write records to an ISO 2709 file (docs/isis-formats.md §7).

    Args:
        target: a path (created or truncated) or a binary file object.
        records: an iterable of records, each a :class:`pydb.Record`
            (``Field.raw`` bytes are written), an :class:`IsoRecord` (its
            leader's positions 5-11 and 17-19 are kept), or a
            sequence of ``(tag, value)`` pairs (value bytes, or str encoded
            with `encoding`).  Tags are ints 0..99999 (above 999 see the
            module documentation) or 3-character alphanumeric strings.
        flavour: ``"isis"`` (default; FT = RT = ``#``, 80-byte lines) or
            ``"marc"`` (0x1E/0x1D, ``^`` written as 0x1F, one record after
            another with no line breaks).
        line_ending: ``"\\n"`` (default for ``isis``, and for ``marc`` with a
            `line_width`) or ``"\\r\\n"`` (WinISIS); ``""`` for none (default
            for ``marc``).
        line_width: bytes per line, line ends not counted, at least
            :data:`MIN_LINE` (24, the leader) (default 80 for ``isis``;
            None or 0: a record is one line, the default for ``marc``).
            J-ISIS and other CDS/ISIS tools write MARC in lines of 80;
            :func:`read` recognises lines of 80 bytes (other widths are
            read by its terminator scan, listed as a repair).
        encoding: codec for str values.
        mfn_tag: when set, each record that has an MFN gets a first field
            of this tag holding the MFN in decimal (see :func:`read`).
        subfields: MARC flavour only: ``"isis"`` (default) writes ``^`` as
            the subfield delimiter 0x1F (§7.3); ``"raw"`` writes values as
            they are (for records read with ``subfields="raw"``).
        on_error: ``"stop"`` (default): a record that cannot be written
            raises :class:`~pydb.IsoRecordError`; ``"skip"``: it is left out
            and reported in the result's ``errors``.
        progress: called with 1 after each record (for a progress bar).
        marc_utf8: MARC flavour: whether leader position 9 says UTF-8
            (``a``) or not (blank) for records without a position 9 of
            their own (an IsoRecord's leader, or the leader field
            `leader_tag` + 9); None (default): UTF-8 when `encoding` is.
        leader_tag: MARC flavour: the fields ``leader_tag + p`` for p in
            :data:`LEADER_POSITIONS` (default 3000 + p: 3005 ... 3019, as
            :func:`pydb.import_iso` and ABCD store a MARC leader) are taken
            out of the record and written as its leader's position p
            (``#`` as a blank; a position without its field is blank, status
            ``n``); each must occur at most once and hold one ASCII
            character, else the record is an error.  None: no such fields.
            A record with leader fields (or an IsoRecord with indicator
            count 2) is written with indicator count 2: its values begin
            with their two indicators (docs/isis-formats.md §7.3).  The CDS/ISIS
            flavour writes such fields as any other field.
        indicators: MARC flavour, for records without leader fields (and
            IsoRecords with indicator count 0), whose values have no
            indicators: ``"auto"`` (default) writes them unchanged with
            indicator count 0 in the leader, which is what they are;
            ``"add"`` puts two blank indicators before the value of every
            field but 001-009 and writes indicator count 2 (what MARC
            readers such as pymarc expect; text before a value's first
            ``^`` stays where it is, outside any subfield, where MARC has no
            place for it and pymarc drops it); ``"present"`` declares that the
            values already begin with two indicators (ABCD/IsisMarc
            databases without leader fields) and writes count 2.

    Returns:
        A :class:`Report` (``records`` written, ``errors``).

    Raises:
        IsoRecordError: a record that cannot be represented (tag out of
            range, record over 99999 bytes, MARC delimiters inside a value,
            a leader field that occurs twice or is not one character) with
            ``on_error="stop"``.
        OSError: writing failed.
        ValueError: a bad argument.
    """
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be 'isis' or 'marc', not {flavour!r}")
    if subfields not in ("isis", "raw"):
        raise ValueError(f"subfields must be 'isis' or 'raw', not {subfields!r}")
    check_on_error(on_error)
    if indicators not in INDICATORS:
        raise ValueError(f"indicators must be 'auto', 'add' or 'present', not {indicators!r}")
    check_leader_tag(leader_tag)
    if line_width is not None and (isinstance(line_width, bool) or not isinstance(line_width, int)
                                   or line_width < 0 or 0 < line_width < MIN_LINE):
        raise ValueError(f"line_width must be None, 0 or an int >= {MIN_LINE} (a line holds "
                         f"the {MIN_LINE}-byte leader, where a reader finds the record's "
                         f"length), not {line_width!r}")
    utf8 = is_utf8(encoding) if marc_utf8 is None else marc_utf8
    if line_ending is None:
        line_ending = "\n" if flavour == "isis" or line_width else ""
    if line_ending not in ("\n", "\r\n", ""):
        raise ValueError(f"line_ending must be '\\n', '\\r\\n' or '', not {line_ending!r}")
    if line_width is None:
        line_width = _LINE if flavour == "isis" and line_ending else 0
    if line_width and not line_ending:
        raise ValueError("line_width needs a line_ending")
    eol = line_ending.encode("ascii")
    report = Report()
    name = source_name(target)
    with opened(target, "wb") as out:
        for number, rec in enumerate(records, 1):
            fields, mfn, deleted, leader = _fields_of(rec)
            try:
                if flavour == "marc":
                    fields, leader = _marc_form(fields, leader, deleted, leader_tag,
                                                indicators, utf8)
                if mfn_tag is not None and mfn is not None:
                    fields = [(mfn_tag, str(mfn).encode("ascii"))] + fields
                data = _encode_record(fields, flavour, mfn, deleted, leader, encoding,
                                      subfields, utf8)
            except (ValueError, UnicodeError) as e:
                err = IsoRecordError(name, number, -1, str(e), mfn)
                if on_error == "stop":
                    raise err from None
                report.errors.append(err)
                continue
            out.write(_wrap(data, line_width, eol))
            report.records += 1
            report.deleted += bool(deleted)
            if progress:
                progress(1)
    return report


class Report:
    """What an import, export or write did.

    Attributes: ``records`` (int, records written), ``errors`` (list of
    :class:`~pydb.IsoRecordError` or :class:`~pydb.CorruptionError`, one per
    record left out), ``repaired`` (int, records read with a tolerated
    defect), ``max_mfn`` (int, highest MFN of the database imported into;
    None for an export or a write, which make no database), ``deleted``
    (int, records stored or written logically deleted).
    """

    def __init__(self) -> None:
        self.records = 0
        self.errors: list[IsoRecordError | CorruptionError] = []
        self.repaired = 0
        self.max_mfn: int | None = None
        self.deleted = 0

    def __repr__(self):
        mfn = "" if self.max_mfn is None else f" max_mfn={self.max_mfn}"
        return (f"<Report records={self.records} errors={len(self.errors)} "
                f"repaired={self.repaired} deleted={self.deleted}{mfn}>")
