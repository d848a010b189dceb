"""Keys and encodings (issue 13, items 1-3): every key an index holds is
reachable from a str, and search terms are brought into the key form the
index was built with (docs/isis-formats.md §5.3).

The shipped indexes are the CDS/ISIS inverted files under
../shared/data/isis (SOURCES.md); each is opened with the encoding of its
records: the ABCD databases whose fields are UTF-8 (SOURCES.md column
"8bit/u8") as UTF-8, the other ABCD ones as cp1252 (Windows), the rest
(CDS/ISIS for DOS, CISIS samples) as cp850.  The tests skip when the
folder is absent.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import pydb
from pydb import _pydb
from pydb.index import KEY_TABLES, Index, key_table

from conftest import DATA, need

ABCD = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/"
#: ABCD databases whose fields are UTF-8 (SOURCES.md "8bit/u8").
UTF8_DBS = ("rda", "unicode", "marcuni", "dubcore")
SERVERS = ABCD + "servers/data/servers"      # ISISUC/ISISAC.TAB beside it
UNICODE = ABCD + "unicode/data/unicode"
MARCUNI = ABCD + "marcuni/data/marcuni"


def shipped_indexes() -> list[str]:
    """Base paths (relative to DATA) of every .cnt under the data folder."""
    if not DATA.is_dir():
        return []
    return sorted(str(p.relative_to(DATA))[:-4] for p in DATA.rglob("*")
                  if p.suffix.lower() == ".cnt")


def encoding_of(rel: str) -> str:
    name = Path(rel).name.lower()
    if rel.startswith(ABCD):
        return "utf-8" if name in UTF8_DBS else "cp1252"
    return "cp850"


def quoted(key: str) -> str:
    """A quoted search term for `key` ('"' doubled inside)."""
    return '"' + key.replace('"', '""') + '"'


@pytest.mark.parametrize("rel", shipped_indexes() or ["-"])
def test_every_key_found_by_postings_and_search(rel):
    """Every key terms() yields is found by postings(key) with exactly its
    posting count, by postings(key_bytes, raw=True) with the same list,
    and by a quoted search with exactly the MFNs of that list."""
    if rel == "-":
        pytest.skip(f"real CDS/ISIS data not found at {DATA}")
    with Index.open_isis(need(rel), encoding=encoding_of(rel)) as ix:
        n = 0
        for term in ix.terms():
            raw = term.key.encode(ix.encoding, ix.errors)
            got = ix.postings(term.key)
            assert got == ix.postings(raw, raw=True), term
            assert len(got) == term.count, term
            mfns = list(ix.search(quoted(term.key)))
            assert mfns == sorted({p.mfn for p in got}), term
            n += 1
        assert n == sum(1 for _ in ix.raw_terms())


def test_counts_on_the_encoded_databases():
    """Mixed-case keys (marcuni: technique 0 lines without mpu), reachable
    only as bytes before, are found from a str as stored; a term the index
    does not hold as given is looked up in key form.  Numbers from the
    shipped files."""
    with Index.open_isis(need(MARCUNI), encoding="utf-8") as ix:
        mixed = [t for t in ix.terms() if any("a" <= c <= "z" for c in t.key)]
        assert len(mixed) == 134
        # FST line "945 0 v245^a": MFN 48 has 245 "^aAbcd :^bune collection..."
        assert ix.postings("Abcd :") == [(48, 945, 1, 1)]
        assert ix.key("Abcd :") == b"ABCD :"    # another key, of MFN 44
        assert ix.postings(b"ABCD :") == [(44, 945, 1, 1)]
        assert list(ix.search('"Abcd :"')) == [48]
        assert list(ix.search('"abcd :"')) == [44]   # not held as given
        assert list(ix.search('abcd$')) == [43, 44, 46]  # truncation: key form


def test_utf8_index_follows_the_encoding():
    """UTF-8 ABCD indexes keep non-ASCII letters as stored (ABCD's UTF-8
    CISIS): a term differing from a key only in ASCII case is brought to
    it, and terms(prefix) finds the keys; the DOS table (the old default)
    rewrote UTF-8 continuation bytes and reached none of them."""
    checked = shredded = 0
    for rel in (UNICODE, MARCUNI, ABCD + "dubcore/data/dubcore"):
        with Index.open_isis(need(rel), encoding="utf-8") as ix, \
                Index.open_isis(need(rel), encoding="utf-8", keys="dos") as dos:
            assert ix.key("ሰላም") == "ሰላም".encode()
            for key, count in ix.raw_terms():
                if (not any(b >= 0x80 for b in key) or key.lower() == key
                        or key.upper() != key):    # no ASCII capital, or mixed case
                    continue
                try:
                    text = key.decode("utf-8")
                except UnicodeDecodeError:
                    continue            # cut inside a sequence at LE2
                low = "".join(c.lower() if c < "\x80" else c for c in text)
                assert ix.key(low) == key
                assert len(ix.postings(low)) == count
                assert text in [t.key for t in ix.terms(low[:8])]
                assert list(ix.search(quoted(low))) == sorted(
                    {p.mfn for p in ix.postings(key)})
                shredded += dos.key(low) != key
                checked += 1
    assert (checked, shredded) == (955, 949)


def _copy_index(src: str, dst: Path, tabs: bool) -> str:
    """Copy the index files (and .tab files when `tabs`) of `src` to dst."""
    s = Path(src)
    for p in s.parent.iterdir():
        ext = p.suffix.lower()[1:]
        if (p.stem.lower() == s.name.lower() and ext in
                ("cnt", "n01", "n02", "l01", "l02", "ifp", "mst", "xrf")):
            shutil.copy(p, dst / f"{s.name}.{ext}")
        elif tabs and ext == "tab":
            shutil.copy(p, dst / p.name)
    return str(dst / s.name)


def _read_tab(path: Path) -> list[int]:
    return [int(v) for v in path.read_text().split()]


def test_ansi_table_is_abcds(tmp_path):
    """The built-in ANSI table equals the ISISUC.TAB ABCD ships for
    Windows (servers/data/isisuc.tab) byte for byte: key() of every byte
    on an index opened without the .tab files."""
    upper = _read_tab(Path(need(SERVERS)).parent / "isisuc.tab")
    assert len(upper) == 256
    base = _copy_index(need(SERVERS), tmp_path, tabs=False)
    with Index.open_isis(base, keys="ansi") as ix:
        for c in range(33, 256):
            assert ix.key(bytes([c])) == bytes([upper[c]]), c
        assert ix.key("Jurisdicción".encode("cp1252")) == b"JURISDICCION"
    with Index.open_isis(base, encoding="latin-1") as ix:
        assert ix.key("ÀÉÎÕÜÑÇàéîõüñçÿ") == b"AEIOUNCAEIOUNCY"
    with Index.open_isis(base, encoding="cp850") as ix:     # DOS
        assert ix.key("Jurisdicción") == b"JURISDICCION"
        assert ix.key("Jurisdicción".encode("cp1252")) == b"JURISDICCI\xf3N"


def test_tab_files_beside_the_database_win(tmp_path):
    """ISISUC.TAB beside the .cnt replaces the built-in table whatever the
    encoding: servers (ABCD's ANSI table) keeps byte 0xA4, which the DOS
    table folds to N."""
    with Index.open_isis(need(SERVERS), encoding="cp850") as ix:
        assert ix.key(b"espa\xa4a") == b"ESPA\xa4A"
        assert ix.key(b"\xd1") == b"N"
    base = _copy_index(need(SERVERS), tmp_path, tabs=False)
    with Index.open_isis(base, encoding="cp850") as ix:
        assert ix.key(b"espa\xa4a") == b"ESPANA"
        assert ix.key(b"\xd1") == b"\xd1"


def test_damaged_tab_file_is_named(tmp_path):
    base = _copy_index(need(SERVERS), tmp_path, tabs=True)
    (tmp_path / "isisuc.tab").write_text("65 66 x\n")
    with pytest.raises(pydb.CorruptionError) as ei:
        Index.open_isis(base)
    assert ei.value.filename.endswith("isisuc.tab") and ei.value.offset == 6


def test_key_table_choice():
    assert key_table("utf-8") == "cisis-utf8"
    assert key_table("UTF8", native=True) == "unicode"
    assert key_table("latin-1") == key_table("cp1252") == "ansi"
    assert key_table("iso-8859-15") == "ansi"
    assert key_table("cp850") == key_table("cp437") == "dos"
    with pytest.raises(LookupError):
        key_table("no-such-codec")
    assert set(KEY_TABLES) == {"dos", "ansi", "cisis-utf8", "unicode"}


def test_open_isis_refuses_unknown_table():
    with pytest.raises(ValueError, match="keys must be one of"):
        Index.open_isis(need(SERVERS), keys="ebcdic")
    with pytest.raises(ValueError, match="unknown key table 9"):
        _pydb._open_isis_index(need(SERVERS), 9)


def test_quote_inside_a_quoted_term():
    """'""' inside a quoted term is one '"' of the key; '""' alone is
    still an empty term."""
    ix = Index(_pydb._memory_index({b'"A" B': [(1, 1, 1, 1)], b'"': [(2, 1, 1, 1)],
                                    b"A": [(3, 1, 1, 1)]}))
    assert list(ix.search('"""A"" B"')) == [1]
    assert list(ix.search('""""')) == [2]
    assert list(ix.search('"""A"" B" + a')) == [1, 3]
    with pytest.raises(pydb.SearchSyntaxError, match="empty quoted term"):
        ix.search('""')
    with pytest.raises(pydb.SearchSyntaxError, match="unterminated"):
        ix.search('"""')
