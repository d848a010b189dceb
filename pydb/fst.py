"""Field select tables (FST): which keys of a record go into the index.

An FST is a list of rules, one per line of CDS/ISIS FST text
(docs/isis-formats.md §5.1)::

    ID  TECHNIQUE  FORMAT
    70  0          MHU,(V70/)          # each author (field 70) is one key
    24  4          MHU,V24             # each word of the title (field 24)
    69  2          V69                 # each <term> of field 69

* ``ID`` (1..65535) is stored as the TAG of every posting the rule makes;
  it need not be a real field tag.
* ``TECHNIQUE`` (docs/isis-formats.md §5.2): 0 the whole line, 1 each
  subfield, 2 each ``<term>``, 3 each ``/term/``, 4 each word (letters
  only: digits split words; stop words skipped but counted); 5-8 as 1-4
  with a prefix put before every key (§5.5: the format starts with a
  literal such as ``'/TI_/'``).  CISIS's 1000-1008 (the line starts with
  ``/MFN/``) are accepted too.
* ``FORMAT`` is CDS/ISIS formatting language; pydb evaluates the subset
  real FSTs use (field and subfield selectors, ``*off.len``, repeatable
  groups, ``/ # %``, modes ``mpl/mpu/mhl/mhu/mdl/mdu``, literals ``'..'``
  ``".."`` ``|..|``, ``if/then/else/fi``, ``p() a() size() f() mfn``,
  ``replace()``, ``iocc``, ``break``); anything else raises
  :class:`~pydb.FSTError` naming the line and the construct, and so does
  a literal that does not close on its line (naming its column and text).

Posting numbers (docs/isis-formats.md §4.5, §5.2, checked against the shipped
index of the pyisis ``cds`` sample): OCC counts the occurrences of the
rule's output separated by ``%`` (1 when there is no ``%``); CNT counts
the keys (technique 0), items (1-3) or words (4, stop words included)
within one occurrence, across its lines.

The same rules can be written as Python objects with :class:`FieldRule`;
they are compiled to FST text and from there to the same C form.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from . import _pydb

__all__ = ["FSTRule", "FieldRule", "parse_fst", "fst_text", "read_text"]

_DELIMS = "/|#!~@$&"


class FSTRule(NamedTuple):
    """One line of a parsed FST: ``id`` (the posting TAG), ``technique``
    (0-8, 1000-1008), ``format`` (str, the formatting-language text) and
    ``line`` (1-based line number in the source)."""
    id: int
    technique: int
    format: str
    line: int

    def to_line(self) -> str:
        """The rule as one FST text line."""
        return f"{self.id} {self.technique} {self.format}"


@dataclass
class FieldRule:
    """An FST rule written as Python data instead of formatting language.

    Args:
        id: posting TAG, 1..65535.
        technique: 0-8 (docs/isis-formats.md §5.2).
        tags: field tags whose occurrences are indexed (each occurrence is a
            new OCC).
        subfields: subfield codes to take (e.g. ``"a"`` or ``"ab"``); None
            takes the whole field.
        prefix: text put before every key (docs/isis-formats.md §5.5).  With
            technique 0 it becomes a repeatable literal; techniques 1-4 with a
            prefix are the prefix techniques 5-8, so pass those.
        mode: formatting mode, ``"mhu"`` (heading: subfield delimiters and
            ``<...>`` markup removed) by default, or ``"mpl"``/``"mpu"`` (proof:
            as stored; needed by techniques 1/5 to see subfields).

    ``FieldRule(24, 4, [24])`` is the FST line ``24 4 mhu,(v24|%|/)``.
    """
    id: int
    technique: int
    tags: Sequence[int] = field(default_factory=list)
    subfields: str | None = None
    prefix: str | None = None
    mode: str = "mhu"

    def __post_init__(self):
        if not 1 <= int(self.id) <= 65535:
            raise ValueError(f"FST ID {self.id} outside 1..65535")
        if self.technique not in range(9):
            raise ValueError(f"technique {self.technique} not in 0..8")
        if not self.tags:
            raise ValueError("a FieldRule needs at least one tag")
        if self.mode.lower() not in ("mpl", "mpu", "mhl", "mhu", "mdl", "mdu"):
            raise ValueError(f"unknown mode {self.mode!r}")
        if self.prefix and 1 <= self.technique <= 4:
            raise ValueError("a prefix needs technique 0 or 5-8 "
                             "(docs/isis-formats.md §5.5)")
        if self.technique >= 5 and not self.prefix:
            raise ValueError(f"technique {self.technique} needs a prefix")

    @property
    def format(self) -> str:
        """The rule's format in CDS/ISIS formatting language."""
        parts = []
        if self.technique >= 5:
            prefix = self.prefix or ""
            delim = next((d for d in _DELIMS if d not in prefix), None)
            if delim is None:
                raise ValueError(f"no delimiter free for prefix {self.prefix!r}")
            parts.append(f"'{delim}{self.prefix}{delim}'")
        parts.append(self.mode.lower())
        pre = ""
        if self.prefix and self.technique == 0:
            if "|" in self.prefix:
                raise ValueError("a technique-0 prefix cannot contain '|'")
            pre = f"|{self.prefix}|"
        for tag in self.tags:
            for code in (self.subfields or [None]):
                sel = f"v{int(tag)}" + (f"^{code}" if code else "")
                parts.append(f"({pre}{sel}|%|/)")
        return ",".join(parts)

    def to_line(self) -> str:
        """The rule as one FST text line."""
        return f"{self.id} {self.technique} {self.format}"


#: A str ending so names a file, which must exist (no FST line or stop
#: word ends so): a mistyped path is not taken for one line of text.
FILE_SUFFIXES = (".fst", ".stw")


def _names_file(source: str | bytes | os.PathLike) -> bool:
    """Whether `source` is a path (see :func:`read_text`)."""
    if isinstance(source, os.PathLike):
        return True
    return isinstance(source, str) and "\n" not in source and (
        os.path.isfile(source) or source.lower().endswith(FILE_SUFFIXES))


def read_text(source: str | bytes | os.PathLike) -> bytes:
    """FST (or stop-word) text as bytes: read from the file at `source` if
    it is os.PathLike, or a str without a newline that names a file or
    ends with ``.fst`` or ``.stw`` (:data:`FILE_SUFFIXES`, any case); else
    `source` itself (bytes as given, a str encoded as UTF-8).  A UTF-8
    byte-order mark at the start (Notepad's "save as UTF-8") is dropped:
    it belongs to no rule, and the first line did not parse with it.

    Raises OSError (FileNotFoundError for a missing file) when that file
    cannot be read."""
    if isinstance(source, bytes):
        text = source
    elif _names_file(source):
        with open(source, "rb") as f:
            text = f.read()
    else:
        text = str(source).encode("utf-8")
    return text[3:] if text.startswith(b"\xef\xbb\xbf") else text


def fst_text(rules: str | bytes | os.PathLike[str] | Iterable[FieldRule | FSTRule]) -> bytes:
    """FST text (bytes) for `rules`: FST text/bytes/path as given (see
    :func:`read_text`), or an iterable of :class:`FieldRule` /
    :class:`FSTRule` joined into lines.

    Raises:
        FSTError: pydb cannot evaluate a rule (``filename``, ``line``:
            1-based, ``reason``).
        ValueError: a :class:`FieldRule` that cannot be written as FST.
        OSError: a path that cannot be read.
    """
    if isinstance(rules, (str, bytes, os.PathLike)):
        text = read_text(rules)
        name = (os.fspath(rules) if not isinstance(rules, bytes) and _names_file(rules)
                else None)
    else:
        text = "\n".join(r.to_line() for r in rules).encode("utf-8")
        name = None
    _pydb._fst_parse(text, name)
    return text


def parse_fst(source: str | bytes | os.PathLike,
              encoding: str = "latin-1") -> list[FSTRule]:
    """Parse FST text (or the file at path `source`) into its rules.

    Blank lines are skipped; every other line must be ``ID TECHNIQUE
    FORMAT`` (docs/isis-formats.md §5.1).  Returns a list of :class:`FSTRule`
    (formats decoded with `encoding`).  Raises :class:`~pydb.FSTError`
    (``filename``, ``line``: 1-based, ``reason``: the column and the
    construct) for a rule pydb cannot evaluate or a literal (``'..``,
    ``"..``, ``|..``) that does not close on its line, and OSError if the
    file cannot be read.
    """
    name = None
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                           and os.path.isfile(source)):
        name = os.fspath(source)
    text = read_text(source)
    return [FSTRule(i, t, f.decode(encoding), line)
            for i, t, f, line in _pydb._fst_parse(text, name)]
