"""Which character encoding a CDS/ISIS database's text is in, from its data.

CDS/ISIS master files carry no mark of their character set
(docs/isis-formats.md §9): DOS CDS/ISIS wrote the DOS code page of the
machine (cp850, cp437, cp852...), WinISIS and the non-Unicode CISIS/ABCD
an 8-bit Windows/ISO code page (ISO-8859-1, windows-1252), ABCD in Unicode
mode and newer tools UTF-8.  :func:`detect_encoding` decides from a sample
of the records, and from ABCD's configuration files when they are beside
the database; ``pydb.open(path, encoding="auto")`` uses it and keeps the
answer in ``Database.encoding_detection``.

The rules, in order:

1. Sample: the records of MFN 1..256 and 256 more spread evenly over the
   rest of 1..max_mfn (current versions, logically deleted ones included;
   MFNs never created, physically deleted or damaged are skipped), so the
   time is bounded whatever the size of the database.
2. Every field value with a byte >= 0x80 is tried as UTF-8.  None: the
   text is ASCII, which every candidate reads alike: ``"utf-8"`` (or what
   the configuration says).  All valid: ``"utf-8"``.  None valid: an 8-bit
   code page (rule 3).  Both kinds (a database mixing encodings): the
   configuration decides if there is one, else the kind with more fields;
   a warning follows (rule 5).
3. The 8-bit code page: each candidate decodes the invalid-UTF-8 values
   (at most 256 of them, evenly chosen, and 4096 bytes >= 0x80 of each)
   and scores the bytes >= 0x80 that become a letter in a plausible place
   -- a lower-case letter after a letter or before a lower-case one, or
   an upper-case one not right after a lower-case letter (accented letters
   of real text are mostly inside words; windows-1252 quotes and dashes,
   which cp850 reads as letters, stand before capitals or between spaces)
   -- leaving out the letters no Latin-script text
   uses in practice (ª º µ ð Ð þ Þ ƒ ı: what cp850 makes of ISO bytes, or
   Latin-1 of DOS bytes).  Candidates, best score wins, ties in this
   order: ``latin-1`` (ISO-8859-1 and Windows; named ``"cp1252"`` when the
   sample holds bytes 0x80-0x9F, which are letters and punctuation there
   and control characters in ISO-8859-1; when it holds none both read
   alike and ``"latin-1"`` is named), ``cp850`` (DOS Western European: the
   accented letters at 0x80-0xA5, as CDS/ISIS for DOS and the UNESCO CDS
   sample store them; cp437 has the same ones there and is not tried
   separately), ``cp852`` (DOS Central European: ć č đ š ž, as the
   Croatian IsisMarc databases store them).
4. Configuration (ABCD, https://github.com/ABCD-DEVCOM/ABCD2 docs: "The
   $unicode setting is taken from either the system-wide 'abcd.def' or the
   database-specific 'dr_path.def'"): ``UNICODE=1`` in
   ``<bases>/<db>/dr_path.def`` (ABCD keeps the files in
   ``<bases>/<db>/data/``; the folder of the .mst is tried too), else in
   ``<bases>/abcd.def``, says UTF-8; ``UNICODE=0`` says ANSI, which ABCD
   serves as ISO-8859-1 (``"latin-1"``).  The data decide when they are
   clear (rule 2); the configuration decides ASCII-only and mixed data.
   Data that contradict the configuration are reported by a warning.
5. The evidence is kept (:class:`EncodingDetection`); ``problems`` lists
   the sampled fields that do not decode cleanly in the chosen encoding
   (invalid UTF-8 when UTF-8 was chosen; values that are valid UTF-8 with
   multi-byte sequences when an 8-bit code page was), and
   :func:`pydb.open` warns (:class:`~pydb.errors.EncodingDetectionWarning`)
   when there are any, or when the data contradict the configuration.

Not detected: WinISIS's ``syspar.par`` and CISIS ``.par`` files hold no
character-set setting, so only ABCD's files are read; code pages other
than the three above (Cyrillic, Greek, ...) are not candidates.
"""

from __future__ import annotations

import codecs
import importlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import CorruptionError, NotFoundError

__all__ = ["EncodingDetection", "detect_encoding", "charmap_decoding", "check_record_codec",
           "SAMPLE_FIRST", "SAMPLE_SPREAD"]

#: Records sampled from the start (MFN 1..SAMPLE_FIRST) ...
SAMPLE_FIRST = 256
#: ... and spread evenly over the rest of the database.
SAMPLE_SPREAD = 256
# Values rule 3 scores at most (evenly chosen among the invalid-UTF-8
# ones), and bytes >= 0x80 per value: they bound its time.
_SCORE_VALUES = 256
_SCORE_BYTES = 4096
_C1 = re.compile(rb"[\x80-\x9f]")
# Candidates of rule 3, in the order that breaks ties.
_CANDIDATES = ("latin-1", "cp850", "cp852")
# Letters that no Latin-script text uses in practice (rule 3).
_IMPLAUSIBLE = frozenset("ªºµðÐþÞƒı")
# Problems kept in EncodingDetection.problems (all are counted).
_MAX_PROBLEMS = 20


def check_record_codec(encoding: str, errors: str = "strict", *,
                       ascii_structure: bool = False) -> None:
    """Refuse a codec that cannot be a database's or an exchange file's
    character set: one Python does not know, one that is not a text
    encoding (``rot13``, ``hex``, ``base64``), one that cannot encode
    ``A`` and decode it back under `errors` (``idna`` and ``punycode``
    refuse ``surrogateescape``); with `ascii_structure` (ISO 2709, whose
    leader and directory are ASCII digits) also one that does not read
    ASCII as itself (UTF-16, EBCDIC).

    Raises LookupError naming the codec (what an unknown one raises
    anyway) or the error handler `errors` Python does not know (which
    would otherwise fail only at the first value that needs it), before
    anything is opened."""
    codecs.lookup_error(errors)
    try:
        ok = "A".encode(encoding, errors).decode(encoding, errors) == "A"
        if ascii_structure:
            ok = ok and b"0123456789 #".decode(encoding, errors) == "0123456789 #"
    except (UnicodeError, ValueError) as e:
        raise LookupError(f"{encoding} cannot be the character set of records "
                          f"(with errors={errors!r}: {e})") from None
    if not ok and ascii_structure:
        raise LookupError(f"{encoding} does not read ASCII as itself: ISO 2709's leader "
                          "and directory are ASCII digits")
    if not ok:
        raise LookupError(f"{encoding} does not decode what it encodes: it cannot be the "
                          "character set of records")


def charmap_decoding(encoding: str) -> tuple[str, bool] | None:
    """The decoding table of `encoding` when it is one of the standard
    library's single-byte code pages, for records to decode their values
    with ``PyUnicode_DecodeCharmap`` directly, without the codec registry
    and a Python call per value.

    The code pages of ISIS databases (cp850, cp437, cp852, cp1252...) are
    charmap codecs: each module of the ``encodings`` package decodes by
    ``codecs.charmap_decode(input, errors, decoding_table)``, a table of
    256 characters in which U+FFFE marks an undefined byte.  The table is
    taken only where the codec's own decoding of each of the 256 bytes
    (error handler ``"strict"``) gives exactly the table's character, or
    fails where the table says undefined; any other codec (UTF-16, the
    ISO-2022 family, a codec registered by an application) gets None and
    keeps the codec registry's path.

    Args:
        encoding: a codec name as ``pydb.open`` accepts it (str).

    Returns:
        ``(table, ascii)``: the 256-character str and whether bytes
        0x00-0x7F decode to themselves (ASCII values then need no
        table); or None: not such a code page, no codec of that name
        (decoding then raises the codec registry's LookupError), or a
        codec whose module or decoding fails here in any other way (the
        registry's path then meets the same failure where it decodes).

    Raises nothing.
    """
    try:
        info = codecs.lookup(encoding)
        module = importlib.import_module("encodings." + info.name.replace("-", "_"))
    except Exception:
        return None
    table = getattr(module, "decoding_table", None)
    if not isinstance(table, str) or len(table) != 256:
        return None
    for b in range(256):
        try:
            got = info.decode(bytes((b,)))[0]
        except UnicodeDecodeError:
            got = "\ufffe"
        except Exception:
            return None
        if got != table[b]:
            return None
    return table, table[:128] == "".join(map(chr, range(128)))


@dataclass(frozen=True)
class EncodingDetection:
    """What :func:`detect_encoding` decided and why.

    Attributes:
        encoding: the chosen Python codec name: ``"utf-8"``,
            ``"latin-1"``, ``"cp1252"``, ``"cp850"`` or ``"cp852"``.
        reason: one sentence saying which rule decided (str).
        records: records sampled (int).
        fields: field values sampled (int).
        non_ascii: sampled values with a byte >= 0x80 (int).
        utf8_valid: of those, values that are valid UTF-8 (int).
        utf8_invalid: of those, values that are not (int).
        scores: rule 3's score of each candidate, ``{codec: letters}``
            (empty when no 8-bit code page was considered).
        c1_bytes: sampled bytes 0x80-0x9F in invalid-UTF-8 values (int).
        config: the configuration evidence, ``{file path: "UNICODE=n"}``
            of the files read (empty when none).
        config_encoding: what the configuration says (``"utf-8"``,
            ``"latin-1"``) or None.
        problems: up to 20 ``(mfn, tag, occurrence, offset)`` of sampled
            values that do not decode cleanly in `encoding` (offset: the
            first bad byte in the value, 0-based), rule 5.
        problem_count: how many sampled values do not (int).
    """

    encoding: str
    reason: str
    records: int = 0
    fields: int = 0
    non_ascii: int = 0
    utf8_valid: int = 0
    utf8_invalid: int = 0
    scores: dict[str, int] = field(default_factory=dict)
    c1_bytes: int = 0
    config: dict[str, str] = field(default_factory=dict)
    config_encoding: str | None = None
    problems: tuple[tuple[int, int, int, int], ...] = ()
    problem_count: int = 0

    def not_utf8(self) -> bool:
        """True when the records look to be in another encoding than
        UTF-8: one was chosen and some sampled values are not valid
        UTF-8 (what a str written as UTF-8 would then be mixed with)."""
        return self.encoding != "utf-8" and self.utf8_invalid > 0

    def summary(self) -> str:
        """One line: the encoding, the reason and the counts (str)."""
        parts = [f"{self.encoding}: {self.reason}",
                 f"sampled {self.records} records, {self.fields} fields, "
                 f"{self.non_ascii} with bytes >= 0x80 ({self.utf8_valid} valid "
                 f"UTF-8, {self.utf8_invalid} not)"]
        if self.scores:
            parts.append("letters " + ", ".join(f"{k} {v}" for k, v in self.scores.items()))
        if self.config:
            parts.append("config " + ", ".join(f"{os.path.basename(k)} {v}"
                                               for k, v in self.config.items()))
        if self.problem_count:
            parts.append(f"{self.problem_count} fields do not decode cleanly")
        return "; ".join(parts)


def _sample_mfns(max_mfn: int) -> list[int]:
    """MFN 1..SAMPLE_FIRST, then SAMPLE_SPREAD MFNs spread evenly over the rest."""
    first = list(range(1, min(max_mfn, SAMPLE_FIRST) + 1))
    rest = max_mfn - SAMPLE_FIRST
    if rest <= 0:
        return first
    if rest <= SAMPLE_SPREAD:
        return first + list(range(SAMPLE_FIRST + 1, max_mfn + 1))
    step = rest / SAMPLE_SPREAD
    return first + sorted({SAMPLE_FIRST + 1 + int(i * step) for i in range(SAMPLE_SPREAD)})


def _read_unicode_setting(path: str) -> str | None:
    """The value of ``UNICODE=`` in an ABCD .def file (INI-like lines,
    key in any case), or None when the file or the key is absent."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 16)
    except OSError:
        return None
    for line in data.decode("latin-1").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().upper() == "UNICODE":
            return value.strip().strip('"').strip()
    return None


def _config(mst_path: str) -> tuple[dict[str, str], str | None]:
    """Rule 4: ({file: "UNICODE=n"} of the files read, the encoding they
    say or None).  dr_path.def (the .mst's folder, then its parent)
    overrides abcd.def (the parent's parent, then the parent)."""
    folder = os.path.dirname(os.path.abspath(mst_path))
    parent = os.path.dirname(folder)
    found: dict[str, str] = {}
    chosen: str | None = None
    for path in (os.path.join(folder, "dr_path.def"), os.path.join(parent, "dr_path.def"),
                 os.path.join(os.path.dirname(parent), "abcd.def"),
                 os.path.join(parent, "abcd.def")):
        value = _read_unicode_setting(path)
        if value is None:
            continue
        found[path] = f"UNICODE={value}"
        if chosen is None:
            try:
                chosen = "utf-8" if int(value) != 0 else "latin-1"
            except ValueError:
                continue      # not a number: ABCD reads it as 0; keep looking
    return found, chosen


def _letters(text: str, raw: bytes) -> int:
    """Rule 3's score of `text` (`raw` decoded byte for byte by an 8-bit
    codec): bytes >= 0x80 that became a letter in a plausible place."""
    score = 0
    seen = 0
    n = len(text)
    for i, b in enumerate(raw):
        if b < 0x80:
            continue
        seen += 1
        if seen > _SCORE_BYTES:
            break
        c = text[i]
        if not c.isalpha() or c in _IMPLAUSIBLE:
            continue
        prev = text[i - 1] if i else " "
        nxt = text[i + 1] if i + 1 < n else " "
        if c.islower():
            if prev.isalpha() or nxt.islower():
                score += 1
        elif not prev.islower():
            score += 1
    return score


def _raw_fields(rec: Any) -> list[tuple[int, int, bytes]]:
    """(tag, 1-based occurrence, stored bytes) of every field of `rec`, in
    stored order, without decoding anything (the database's own codec and
    error handler play no part)."""
    values: dict[int, list[bytes]] = {}
    seen: dict[int, int] = {}
    out = []
    for tag in rec.tags:
        if tag not in values:
            values[tag] = rec.raw(tag)
        occ = seen[tag] = seen.get(tag, 0) + 1
        out.append((tag, occ, values[tag][occ - 1]))
    return out


def _bad_utf8_offset(raw: bytes) -> int:
    """Byte offset of the first invalid UTF-8 sequence of `raw`."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return -1


def detect_encoding(db: Any) -> EncodingDetection:
    """Decide the character encoding of a database's field values (rules
    in the module docstring).

    Args:
        db: an open :class:`pydb.Database`; its stored bytes are read (its
            own encoding and error handler play no part).  To detect while
            opening, use ``pydb.open(path, encoding="auto")``.

    Returns:
        An :class:`EncodingDetection` (``.encoding`` the codec name,
        ``.reason``, the counts, ``.problems``).

    Raises:
        ClosedError: the database is closed.  Damaged records are skipped,
        not raised.
    """
    config, config_enc = _config(db.info()["mst_path"])
    records = fields = non_ascii = 0
    valid: list[tuple[int, int, int, bytes]] = []     # (mfn, tag, occ, raw)
    invalid: list[tuple[int, int, int, bytes]] = []
    for mfn in _sample_mfns(db.max_mfn):
        try:
            rec = db[mfn]
        except (NotFoundError, CorruptionError):
            continue
        records += 1
        for tag, occ, raw in _raw_fields(rec):
            fields += 1
            if raw.isascii():
                continue
            non_ascii += 1
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                invalid.append((mfn, tag, occ, raw))
            else:
                valid.append((mfn, tag, occ, raw))

    counts: dict[str, Any] = dict(records=records, fields=fields, non_ascii=non_ascii,
                  utf8_valid=len(valid), utf8_invalid=len(invalid), config=config,
                  config_encoding=config_enc)
    cfg = f" as {', '.join(os.path.basename(k) + ' ' + v for k, v in config.items())} says"
    if not non_ascii:
        if config_enc is not None:
            return EncodingDetection(config_enc, "no byte >= 0x80 in the sample; "
                                     f"{config_enc}{cfg}", **counts)
        return EncodingDetection("utf-8", "no byte >= 0x80 in the sample (ASCII, which "
                                 "every code page reads alike)", **counts)
    if not invalid:
        utf8, reason = True, "every sampled value with bytes >= 0x80 is valid UTF-8"
    elif not valid:
        utf8, reason = False, "no sampled value with bytes >= 0x80 is valid UTF-8"
    elif config_enc is not None:
        utf8 = config_enc == "utf-8"
        reason = f"the sample mixes valid and invalid UTF-8; {config_enc}{cfg}"
    else:
        utf8 = len(valid) > len(invalid)
        reason = (f"the sample mixes valid ({len(valid)}) and invalid ({len(invalid)}) "
                  f"UTF-8 values; the {'valid' if utf8 else 'invalid'} ones are more")
    if utf8:
        problems = [(m, t, o, _bad_utf8_offset(r)) for m, t, o, r in invalid]
        return EncodingDetection("utf-8", reason, problems=tuple(problems[:_MAX_PROBLEMS]),
                                 problem_count=len(problems), **counts)

    scores = {c: 0 for c in _CANDIDATES}
    c1 = sum(len(_C1.findall(raw)) for _m, _t, _o, raw in invalid)
    step = max(1, -(-len(invalid) // _SCORE_VALUES))     # ceil
    for _m, _t, _o, raw in invalid[::step]:
        for codec in _CANDIDATES:
            scores[codec] += _letters(raw.decode(codec), raw)
    best = max(_CANDIDATES, key=lambda c: scores[c])  # first of the ties
    name = best
    if best == "latin-1":
        defined = all(_cp1252_defined(raw) for _m, _t, _o, raw in invalid)
        if c1 and defined:
            name = "cp1252"
    tied = [c for c in _CANDIDATES if scores[c] == scores[best]]
    if len(tied) > 1:
        reason += (f"; an 8-bit code page: {' and '.join(tied)} read as many bytes "
                   f">= 0x80 as letters in words ({scores[best]}); {best}, the first of "
                   f"{', '.join(_CANDIDATES)}, is taken (give the encoding to choose)")
    else:
        reason += (f"; an 8-bit code page: {best} reads the most bytes >= 0x80 as "
                   "letters in words")
    if name == "cp1252":
        reason += f" ({c1} bytes 0x80-0x9F: windows-1252 punctuation or letters)"
    elif best == "latin-1":
        reason += " (no byte 0x80-0x9F: ISO-8859-1 and windows-1252 read alike)" if not c1 \
            else " (bytes undefined in windows-1252: ISO-8859-1)"
    # A value that is valid UTF-8 with multi-byte sequences reads as
    # mojibake in any 8-bit code page: that is the problem to report.
    problems = [(m, t, o, next(i for i, b in enumerate(r) if b >= 0x80))
                for m, t, o, r in valid]
    return EncodingDetection(name, reason, scores=scores, c1_bytes=c1,
                             problems=tuple(problems[:_MAX_PROBLEMS]),
                             problem_count=len(problems), **counts)


def _cp1252_defined(raw: bytes) -> bool:
    """Whether every byte of `raw` is defined in windows-1252 (0x81, 0x8D,
    0x8F, 0x90 and 0x9D are not)."""
    try:
        raw.decode("cp1252")
    except UnicodeDecodeError:
        return False
    return True


def conflict(det: EncodingDetection) -> str | None:
    """A sentence when the data contradict the configuration (rule 4), else None."""
    if det.config_encoding is None or det.config_encoding == det.encoding:
        return None
    if det.config_encoding == "latin-1" and det.encoding == "cp1252":
        return None
    return (f"the configuration says {det.config_encoding} "
            f"({', '.join(f'{k}: {v}' for k, v in det.config.items())}), the data {det.encoding}")
