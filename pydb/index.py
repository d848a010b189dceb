"""Inverted index: terms, postings and search (isis-formats.md §4-6).

A posting says where a key occurs: in record ``mfn`` (1-based), under
the FST line ``tag`` (the FST ID, not necessarily a field tag), in the
``occ``-th output line (1-based) of that FST line, at term position
``cnt`` (1-based).  Keys are byte strings in the database's encoding,
normalised as isis-formats.md §5.3 says; they are shown as ``str``
decoded with the database's encoding.
"""

from typing import NamedTuple

__all__ = ["Term", "Posting"]


class Term(NamedTuple):
    """A key of the dictionary and how many postings it has."""
    key: str
    count: int


class Posting(NamedTuple):
    """One occurrence of a key: (MFN, TAG, OCC, CNT), isis-formats.md §4.5."""
    mfn: int
    tag: int
    occ: int
    cnt: int
