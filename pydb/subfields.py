"""Subfield parsing for CDS/ISIS field values.

CDS/ISIS stores subfields inside a field value as ``^a...^b...``
(docs/isis-formats.md §7.2): a delimiter ``^`` followed by a one-character code.
Codes are case-insensitive (``^A`` is ``^a``).  MARC-style databases put two
indicator characters before the first subfield (``10^aTitle``); they are
kept out of subfield ``a`` and returned as :attr:`Subfields.indicators`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

__all__ = ["Subfields", "parse_subfields"]

_INDICATOR_CHARS = frozenset("0123456789# _")


class Subfields(Mapping[str, str]):
    """The subfields of one value: a read-only mapping from code (lower-case
    str of length 1) to the first occurrence's text.

    Attributes:
        indicators: the two MARC indicator characters before the first
            subfield (str), or ``None``.
        text: text before the first subfield that is not an indicator pair
            (str; ``""`` if none).  A value without ``^`` is all text.
        items_: every (code, text) pair in stored order (list).
    """

    __slots__ = ("indicators", "text", "items_", "_first")

    def __init__(self, indicators: str | None, text: str,
                 items: list[tuple[str, str]]) -> None:
        self.indicators = indicators
        self.text = text
        self.items_ = items
        first: dict[str, str] = {}
        for code, value in items:
            first.setdefault(code, value)
        self._first = first

    def __getitem__(self, code: str) -> str:
        return self._first[code.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def getall(self, code: str) -> list[str]:
        """Every occurrence of subfield `code`, in stored order (list of str)."""
        code = code.lower()
        return [v for c, v in self.items_ if c == code]

    def __repr__(self) -> str:
        return (f"Subfields(indicators={self.indicators!r}, text={self.text!r}, "
                f"items={self.items_!r})")


def parse_subfields(value: str, delimiter: str = "^") -> Subfields:
    """Split a field value into subfields.

    Args:
        value: the field value (str).
        delimiter: the subfield delimiter (``"^"`` in CDS/ISIS; ``"\\x1f"``
            in MARC exchange records).

    Returns:
        A :class:`Subfields`.  ``parse_subfields("10^aTitle^bSub")`` gives
        indicators ``"10"``, ``["a"] == "Title"``, ``["b"] == "Sub"``.
        A trailing lone delimiter is ignored.
    """
    parts = value.split(delimiter)
    lead = parts[0]
    indicators = None
    text = lead
    if len(parts) > 1 and len(lead) == 2 and all(c in _INDICATOR_CHARS for c in lead):
        indicators, text = lead, ""
    items = [(p[0].lower(), p[1:]) for p in parts[1:] if p]
    return Subfields(indicators, text, items)
