#!/usr/bin/env python3
"""Compare pydb's native index, built in the CISIS key mode, with the
CDS/ISIS inverted file shipped beside a database (issue 13, item 4).

For every database under the data folder (PYDB_TEST_DATA, default
../shared/data/isis) that has both an FST and a shipped index (.cnt), this
copies the database files into a temporary folder, builds the native index
there with pydb's defaults (the CISIS key mode, the key table of the
database's encoding, the key length of the shipped .cnt, the database's
.stw), and compares key by key with the shipped index:

  identical   keys in both with the same posting list (MFN, TAG, OCC, CNT)
  different   keys in both with different lists, keys only in one of them

Every difference gets a reason (REASONS), decided from the two posting
lists, the key and the stop words; ``other`` is what no rule explains.
docs/isis-formats.md §5.6 gives the table and what each reason means.

    python tools/cisis_keys.py [DATA] [--key-mode cisis|unicode]

prints one table row per database and, with --examples, up to five keys of
each reason.  tests/test_keys.py asserts the exact counts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import unicodedata
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pydb  # noqa: E402
from pydb.index import Index  # noqa: E402

ABCD = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/"
#: ABCD databases whose fields are UTF-8 (SOURCES.md column "8bit/u8").
UTF8_DBS = ("rda", "unicode", "marcuni", "dubcore")

#: Why a key differs, in the order the rules are tried.
REASONS = {
    "duplicate postings": "the shipped list holds a posting twice (two FST lines "
                          "with one ID made the same key at the same place); pydb "
                          "keeps a posting once",
    "no posting detail": "the shipped postings carry MFNs only (TAG, OCC, CNT 0: "
                         "loaded without them); the MFNs agree",
    "stale key": "the shipped dictionary holds the key with no postings (left "
                 "by deleted or changed records)",
    "stale index": "the postings differ only in records the shipped index does "
                   "not cover (added or changed after it was built)",
    "stop word": "a word of the .stw the shipped index holds: it was built "
                 "without stop words (CISIS applies them only when given stw=@)",
    "cut inside a character": "CISIS cut the key to LE2 bytes inside a UTF-8 "
                              "sequence; pydb cuts before it",
    "case kept": "the shipped key keeps lower case and accents (ABCD's UTF-8 "
                 "CISIS did not upper-case these technique 0 lines); pydb's key "
                 "is upper case without accents",
    "occurrences joined": "a repeated field outside a group: CISIS wrote its "
                          "occurrences back to back, pydb separates them by '; '",
    "CNT shifted": "the same places but other CNTs: an earlier word of the line "
                   "was split differently",
    "word characters": "a non-Latin word split differently: ABCD's UTF-8 word "
                       "table lacks letters (Ethiopic U+134D, U+1320, ...; "
                       "all of Cyrillic) and splits words there",
    "FST line not in the shipped index": "every posting of the key comes from "
                                         "an FST line (its ID, the TAG) of which "
                                         "the shipped index holds no posting at "
                                         "all: it was built from an FST without "
                                         "that line, or before any record had the "
                                         "field; CISIS builds the key from the "
                                         "database's FST as pydb does (tests/"
                                         "test_cisis.py, mx-packed-xl)",
    "other": "no rule above",
}


def encoding_of(rel: str) -> str:
    """The encoding of the database at `rel` (relative to the data
    folder): UTF-8 or cp1252 for ABCD's, cp850 for the rest."""
    name = Path(rel).name.lower()
    if rel.startswith(ABCD):
        return "utf-8" if name in UTF8_DBS else "cp1252"
    return "cp850"


def databases(data: Path) -> list[str]:
    """Base paths (relative to `data`) of the databases with both a
    shipped index (.cnt) and an FST, sorted."""
    out = []
    for cnt in sorted(data.rglob("*")):
        if cnt.suffix.lower() != ".cnt":
            continue
        base = cnt.with_suffix("")
        if any(p.stem == base.name and p.suffix.lower() == ".fst"
               for p in base.parent.iterdir()):
            out.append(str(base.relative_to(data)))
    return out


Lists = dict[bytes, list[tuple[int, int, int, int]]]


def _lists(ix: Index) -> Lists:
    return {k: [tuple(p) for p in ix.postings(k, raw=True)]  # type: ignore[misc]
            for k, _ in ix.raw_terms()}


def _stop_words(base: Path, encoding: str) -> set[str]:
    for p in base.parent.iterdir():
        if p.stem == base.name and p.suffix.lower() == ".stw":
            text = p.read_bytes().decode(encoding, "replace")
            return {w.strip().upper() for w in text.splitlines() if w.strip()}
    return set()


def _word(key: bytes, encoding: str) -> str:
    """The key without its prefix (``XX_``), decoded."""
    text = key.decode(encoding, "replace")
    head, sep, tail = text.partition("_")
    return tail if sep and 1 <= len(head) <= 3 else text


def _fold(text: str) -> str:
    """Upper case without accents: how the two sides of a "case kept"
    key are matched."""
    return "".join(c for c in unicodedata.normalize("NFKD", text)
                   if not unicodedata.combining(c)).upper()


def _non_latin(key: bytes, encoding: str) -> bool:
    """The key (valid in `encoding`) holds a character of a non-Latin
    script (or U+FFFD written in the record itself)."""
    try:
        return any(ord(c) >= 0x370 for c in key.decode(encoding))
    except UnicodeDecodeError:
        return False


def classify(theirs: Lists, mine: Lists, stop: set[str],
             encoding: str) -> Iterator[tuple[str, bytes]]:
    """(reason, key) for every key whose lists differ or that only one
    index holds."""
    covered = {p[0] for lst in theirs.values() for p in lst}
    # the FST line IDs the shipped postings name (TAG 0 everywhere: the
    # shipped postings carry MFNs only, and no line can be told apart)
    lines_t = {p[1] for lst in theirs.values() for p in lst} - {0}
    only_t = set(theirs) - set(mine)
    only_m = set(mine) - set(theirs)
    dec = {k: k.decode(encoding, "replace") for k in set(theirs) | set(mine)}
    # shipped postings by the folded form of their key (case kept)
    by_fold: dict[str, set[tuple[int, int, int, int]]] = {}
    for k, lst in theirs.items():
        by_fold.setdefault(_fold(dec[k]), set()).update(lst)
    # keys of the shipped index only that keep lower case, folded
    folds_t = {_fold(dec[k]) for k in only_t if dec[k] != dec[k].upper()}
    all_t = {_fold(dec[k]) for k in only_t}
    joined_m = [_fold(dec[k]).replace("; ", "") for k in only_m if "; " in dec[k]]

    def case_kept(text: str) -> bool:
        f = _fold(text)
        return f in folds_t or (len(f) >= 20 and any(
            len(t) >= 20 and (t.startswith(f) or f.startswith(t)) for t in folds_t))
    for key in sorted(set(theirs) | set(mine)):
        a, b = theirs.get(key), mine.get(key)
        if a == b:
            continue
        text = dec[key]
        if a is not None and b is not None:
            if sorted(set(a)) == sorted(b):
                yield "duplicate postings", key
            elif all(p[1:] == (0, 0, 0) for p in a) and {p[0] for p in a} == {p[0] for p in b}:
                yield "no posting detail", key
            elif {p for p in a if p[0] in covered} == {p for p in b if p[0] in covered}:
                yield "stale index", key
            elif set(a) <= set(b) and set(b) <= by_fold.get(_fold(text), set()):
                yield "case kept", key
            elif sorted(p[:3] for p in a) == sorted(p[:3] for p in b):
                yield "CNT shifted", key
            elif _non_latin(key, encoding):
                yield "word characters", key
            else:
                yield "other", key
        elif a is not None:
            if not a:
                yield "stale key", key
            elif _word(key, encoding).upper() in stop:
                yield "stop word", key
            elif encoding == "utf-8" and "\ufffd" in text:
                yield "cut inside a character", key
            elif any(_fold(text).startswith(m) for m in joined_m):
                yield "occurrences joined", key
            elif text != text.upper():
                yield "case kept", key
            elif _non_latin(key, encoding):
                yield "word characters", key
            else:
                yield "other", key
        else:
            assert b is not None
            if all(p[0] not in covered for p in b):
                yield "stale index", key
            elif lines_t and all(p[1] not in lines_t for p in b):
                yield "FST line not in the shipped index", key
            elif encoding == "utf-8" and any(
                    dec[t].rstrip("\ufffd") == text for t in only_t if dec[t].endswith("\ufffd")):
                yield "cut inside a character", key
            elif "; " in text and any(t.startswith(_fold(text).replace("; ", ""))
                                      for t in all_t):
                yield "occurrences joined", key
            elif case_kept(text):
                yield "case kept", key
            elif _non_latin(key, encoding):
                yield "word characters", key
            else:
                yield "other", key


def compare(data: Path, rel: str, key_mode: str | None = None) -> dict[str, Any]:
    """Build the native index of the database `rel` (under `data`) in a
    temporary copy and compare it with the shipped one.

    Returns:
        A dict: ``encoding``, ``mode`` and ``max_key`` the build used,
        ``shipped`` and ``native`` (numbers of keys), ``identical`` (keys
        with the same posting list), ``different`` (keys in both, lists
        differ), ``only_shipped``, ``only_native``, ``reasons`` (Counter
        of REASONS over the differing keys), ``examples`` (reason -> up to
        five keys, decoded), or ``error`` (str) when the build fails.
    """
    base = data / rel
    enc = encoding_of(rel)
    with Index.open_isis(base, encoding=enc) as ix:
        theirs = _lists(ix)
    row: dict[str, Any] = {"encoding": enc, "shipped": len(theirs)}
    with tempfile.TemporaryDirectory() as td:
        for p in base.parent.iterdir():
            if p.stem == base.name and p.is_file():
                shutil.copy(p, Path(td) / p.name)
        copy = Path(td) / base.name
        try:
            pydb.build_index(copy, progress=False, encoding=enc, key_mode=key_mode)
        except pydb.errors.Error as e:
            row["error"] = str(e).replace(td, "<copy>")
            return row
        st = pydb.native.stored_settings(copy)
        assert st is not None
        with pydb.open_index(copy, encoding=enc) as ix:
            mine = _lists(ix)
    both = set(theirs) & set(mine)
    reasons: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    for reason, key in classify(theirs, mine, _stop_words(base, enc), enc):
        reasons[reason] += 1
        if len(examples.setdefault(reason, [])) < 5:
            examples[reason].append(key.decode(enc, "replace"))
    row.update(mode=st["mode"], max_key=st["max_key"], native=len(mine),
               identical=sum(1 for k in both if theirs[k] == mine[k]),
               different=sum(1 for k in both if theirs[k] != mine[k]),
               only_shipped=len(set(theirs) - set(mine)),
               only_native=len(set(mine) - set(theirs)), reasons=reasons,
               examples=examples)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=os.environ.get(
        "PYDB_TEST_DATA", str(REPO.parent / "shared" / "data" / "isis")))
    ap.add_argument("--key-mode", choices=["cisis", "unicode"], default=None)
    ap.add_argument("--examples", action="store_true")
    args = ap.parse_args(argv)
    data = Path(args.data)
    print("| database | enc | mode | LE2 | shipped | native | identical | different "
          "| only shipped | only native | reasons |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rel in databases(data):
        r = compare(data, rel, args.key_mode)
        name = rel.split("/")[-3] if rel.startswith(ABCD) else rel
        if "error" in r:
            why = r["error"].replace("|", "\\|")
            print(f"| {name} | {r['encoding']} | | | {r['shipped']} | build fails: "
                  f"{why} | | | | | |")
            continue
        why = ", ".join(f"{k} {v}" for k, v in sorted(r["reasons"].items()))
        print(f"| {name} | {r['encoding']} | {r['mode']} | {r['max_key']} | {r['shipped']} "
              f"| {r['native']} | {r['identical']} | {r['different']} | {r['only_shipped']} "
              f"| {r['only_native']} | {why} |")
        if args.examples:
            for reason, keys in r["examples"].items():
                print(f"    {reason}: {keys}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
