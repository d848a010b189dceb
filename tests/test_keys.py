"""Keys and encodings (issue 13, items 1-3): every key an index holds is
reachable from a str, and search terms are brought into the key form the
index was built with (docs/isis-formats.md §5.3).

The shipped indexes are the CDS/ISIS inverted files under
../shared/data/isis (SOURCES.md); each is opened with the encoding of its
records: the ABCD databases whose fields are UTF-8 (SOURCES.md column
"8bit/u8") as UTF-8, the other ABCD ones as cp1252 (Windows), the rest
(CDS/ISIS for DOS, CISIS samples) as cp850.  The tests skip when the
folder is absent.  The small tests that drive the C key, lookup and
lexer code are rerun under ASan+UBSan (marker sanitize_address).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


@pytest.mark.sanitize_address
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
    """UTF-8 ABCD indexes keep the letters of scripts without case as
    stored: a term differing from a key only in ASCII case is brought to
    it, and terms(prefix) finds the keys; the DOS table (the old default)
    rewrote UTF-8 continuation bytes and reached almost none of them."""
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


@pytest.mark.sanitize_address
def test_utf8_index_folds_latin_accents():
    """ABCD's UTF-8 CISIS folded Latin accents (marcuni, FST line
    "110 5 mpu,...'/AI_/'..."): a term as written in the record finds the
    folded key; the "ascii" table, which keeps UTF-8 bytes, does not."""
    key = "AI_ASOCIACION LATINOAMERICANA DE MEDICINA SOCIAL."
    term = "ai_Asociación Latinoamericana de Medicina Social."
    with Index.open_isis(need(MARCUNI), encoding="utf-8") as ix:
        want = ix.postings(key)
        assert len(want) == 1 and ix.key(term) == key.encode()
        assert ix.postings(term) == want
        assert list(ix.search(quoted(term))) == [want[0].mfn]
        assert [t.key for t in ix.terms("ai_asociación")] == [key]
    with Index.open_isis(need(MARCUNI), encoding="utf-8", keys="ascii") as ix:
        assert ix.key(term) == b"AI_ASOCIACI\xc3\xb3N LATINOAMERICANA DE MEDICINA SOCIAL."
        assert ix.postings(term) == []


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


@pytest.mark.sanitize_address
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


@pytest.mark.sanitize_address
def test_tab_files_beside_the_database_win(tmp_path):
    """ISISUC.TAB beside the .cnt replaces the built-in table whatever the
    encoding: servers (ABCD's ANSI table) keeps byte 0xA4, which the DOS
    table folds to N."""
    with Index.open_isis(need(SERVERS), encoding="cp850") as ix:
        assert ix.key(b"espa\xa4a") == b"ESPA\xa4A"
        assert ix.key(b"\xd1") == b"N"
        assert (ix.info["keys"], ix.info["tables"]) == ("dos", ("ISISUC.TAB", "ISISAC.TAB"))
    base = _copy_index(need(SERVERS), tmp_path, tabs=False)
    with Index.open_isis(base, encoding="cp850") as ix:
        assert ix.key(b"espa\xa4a") == b"ESPANA"
        assert ix.key(b"\xd1") == b"\xd1"
        assert (ix.info["keys"], ix.info["tables"]) == ("dos", ())
    with Index.open_isis(base, encoding="utf-8") as ix:
        assert ix.info["keys"] == "unicode"


@pytest.mark.sanitize_address
def test_damaged_tab_file_is_named(tmp_path):
    base = _copy_index(need(SERVERS), tmp_path, tabs=True)
    (tmp_path / "isisuc.tab").write_text("65 66 x\n")
    with pytest.raises(pydb.CorruptionError) as ei:
        Index.open_isis(base)
    assert ei.value.filename.endswith("isisuc.tab") and ei.value.offset == 6


def test_key_table_choice():
    assert key_table("utf-8") == key_table("UTF8") == "unicode"
    assert key_table("latin-1") == key_table("cp1252") == "ansi"
    assert key_table("iso-8859-15") == "ansi"
    assert key_table("cp850") == key_table("cp437") == "dos"
    with pytest.raises(LookupError):
        key_table("no-such-codec")
    assert set(KEY_TABLES) == {"dos", "ansi", "ascii", "unicode"}


@pytest.mark.sanitize_address
def test_open_isis_refuses_unknown_table():
    with pytest.raises(ValueError, match="keys must be one of"):
        Index.open_isis(need(SERVERS), keys="ebcdic")
    with pytest.raises(ValueError, match="unknown key table 9"):
        _pydb._open_isis_index(need(SERVERS), 9)


@pytest.mark.sanitize_address
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


# ------------------------------------------------- native index: key tables

REPO = Path(__file__).resolve().parent.parent
FST = "1 4 v1\n"


def _cli_index(base, *extra):
    """Run `python -m pydb index BASE --quiet EXTRA...`; it must succeed."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run(
        [sys.executable, "-m", "pydb", "index", str(base), "--quiet", *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")


def _dos_upper() -> bytes:
    """The DOS case table (the core's default 8-bit rules)."""
    return bytes(_pydb._testing.keyrules()[0])


def test_index_command_on_a_utf8_database_without_index(tmp_path):
    """`python -m pydb index` on a UTF-8 database (create()'s default) with
    no index yet reads the records: UTF-8 text gets Unicode folding, not
    the DOS table that shredded it (Ärger -> C, NRGER; Cyrillic and Greek
    gone)."""
    base = tmp_path / "plain"
    with pydb.create(base) as db:
        db.append([(1, "Ärger im Зоопарк ελληνικά")])
    (tmp_path / "plain.fst").write_text(FST)
    _cli_index(base)
    assert _pydb._native_index_stored(str(base))["utf8"] is True
    with pydb.open(base) as db:
        assert [(t.key, t.count) for t in db.terms()] == [
            ("ARGER", 1), ("IM", 1), ("ΕΛΛΗΝΙΚΑ", 1), ("ЗООПАРК", 1)]
        assert list(db.search("ärger * зоопарк")) == [1]


def test_index_command_on_an_8bit_database(tmp_path):
    """A database whose records are not UTF-8 (the CDS sample, cp850) gets
    the DOS table when nothing says otherwise."""
    src = need("scieloorg__pyisis/pyisis/pyisis/sample/cds")
    for ext in ("mst", "xrf"):
        shutil.copy(f"{src}.{ext}", tmp_path / f"cds.{ext}")
    (tmp_path / "cds.fst").write_text(FST)
    _cli_index(tmp_path / "cds")
    stored = _pydb._native_index_stored(str(tmp_path / "cds"))
    assert stored["utf8"] is False and stored["upper"] == _dos_upper()


def test_latin1_database_gets_the_ansi_table_and_keeps_it(tmp_path):
    """create(encoding="latin-1", fst=...) makes keys by the ANSI table:
    "Jurisdicción" is one word (it was JURISDICCI + N, and every later
    position shifted); a rebuild without --encoding keeps the table, one
    with --encoding cp850 switches to DOS."""
    base = tmp_path / "lat"
    with pydb.create(base, encoding="latin-1", fst=FST, max_key=20) as db:
        db.append([(1, "Jurisdicción y ñandú")])
        assert [(t.key, t.count) for t in db.terms()] == [
            ("JURISDICCION", 1), ("NANDU", 1), ("Y", 1)]
        assert db.postings("ñandú") == [(1, 1, 1, 3)]          # CNT 3, not 4
        assert list(db.search("jurisdicción")) == [1]
    ansi = _pydb._native_index_stored(str(base))
    assert ansi["utf8"] is False and ansi["upper"][0xF3] == ord("O")
    assert ansi["word"][0xF3] == 1 and ansi["word"][0xD7] == 0     # ó a letter, × not
    _cli_index(base)                                                # kept
    assert _pydb._native_index_stored(str(base)) == ansi
    with pydb.open(base, encoding="latin-1") as db:
        assert db.postings("ñandú") == [(1, 1, 1, 3)]
    _cli_index(base, "--encoding", "cp850")                         # told otherwise
    assert _pydb._native_index_stored(str(base))["upper"] == _dos_upper()
    with pydb.open(base, encoding="latin-1") as db:
        # ñ ú are no DOS letters: ñandú -> AND (and Jurisdicción -> JURISDICCI, N)
        assert [t.key for t in db.terms()] == ["AND", "JURISDICCI", "N", "Y"]


def test_build_index_refuses_unknown_table(tmp_path):
    base = tmp_path / "x"
    pydb.create(base).close()
    with pytest.raises(ValueError, match="keys must be one of"):
        pydb.build_index(base, FST, progress=False, keys="ebcdic")
    with pytest.raises(ValueError, match="256"):
        _pydb._index_build(str(base), FST, upper=b"x" * 255)


#: (database, LE2 of its shipped index, (key, count) pairs a native build
#: shares with the shipped index with the table of its encoding, and with
#: the DOS table; both in the CISIS key mode, the default for these
#: databases: they come with an .fst; dubcore's `RT_TEXT_C` needs its
#: '_' as a word character).  The rest are FST-engine differences, not key-table
#: ones: CISIS keeps the case of technique 0 lines without mpu
#: (marcuni's 134 mixed-case keys), keys longer than LE2 and the
#: unicode database's Cyrillic and Hebrew words, which the shipped index
#: does not hold.
ABCD_UTF8 = [("unicode", 60, 626, 220), ("dubcore", 256, 68, 61),
             ("marcuni", 60, 2033, 1757)]


@pytest.mark.parametrize("name,le2,shared,shared_dos", ABCD_UTF8)
def test_utf8_native_index_built_as_abcd_does(tmp_path, name, le2, shared, shared_dos):
    """A native index of an ABCD UTF-8 database, built with the table its
    records imply (Unicode folding: most fields with 8-bit bytes are
    UTF-8; keys cut to the shipped LE2): every key
    is found by postings() and a quoted search with its exact posting
    list, and it shares more keys with ABCD's own index than a DOS-table
    build does."""
    src = need(f"{ABCD}{name}/data/{name}")
    for ext in ("mst", "xrf", "fst", "stw"):
        if Path(f"{src}.{ext}").exists():
            shutil.copy(f"{src}.{ext}", tmp_path / f"{name}.{ext}")
    base = tmp_path / name
    with Index.open_isis(src, encoding="utf-8") as ix:
        theirs = dict(ix.raw_terms())
    got = []
    for keys in (None, "dos"):
        pydb.build_index(base, progress=False, max_key=le2, keys=keys)
        with pydb.open(base) as db:
            ix = db.index
            assert ix is not None and ix.kind == "native"
            mine = dict(ix.raw_terms())
            got.append(sum(1 for k, c in mine.items() if theirs.get(k) == c))
            if keys is None:
                assert _pydb._native_index_stored(str(base))["utf8"] is True
                for term in ix.terms():
                    p = ix.postings(term.key)
                    assert len(p) == term.count, term
                    assert list(ix.search(quoted(term.key))) == sorted(
                        {x.mfn for x in p}), term
    assert got == [shared, shared_dos]


#: ABCD Windows databases (cp1252): (database, (key, count) pairs of its
#: shipped index that a native build with the ANSI table reproduces, and
#: with the DOS table), in the CISIS key mode (the default: an .fst comes
#: with them), whose ANSI word characters include the digits as ABCD's
#: isisac.tab does (marc: 9,858 before).  The rest: tools/cisis_keys.py.
ABCD_ANSI = [("unimarc", 181, 156, 117), ("marc", 10130, 9955, 9729)]


@pytest.mark.parametrize("name,total,shared,shared_dos", ABCD_ANSI)
def test_ansi_native_index_matches_abcd(tmp_path, name, total, shared, shared_dos):
    """Issue 13 item 3: a Windows ABCD database indexed with the ANSI
    table (its encoding's, without .tab files) gives the keys ABCD's own
    index holds far more often than with the DOS table."""
    src = need(f"{ABCD}{name}/data/{name}")
    for ext in ("mst", "xrf", "fst", "stw"):
        if Path(f"{src}.{ext}").exists():
            shutil.copy(f"{src}.{ext}", tmp_path / f"{name}.{ext}")
    with Index.open_isis(src, encoding="cp1252") as ix:
        theirs = dict(ix.raw_terms())
        le2 = ix.info["le2"]
    assert len(theirs) == total
    got = []
    for encoding in ("cp1252", "cp850"):
        pydb.build_index(tmp_path / name, progress=False, max_key=le2, encoding=encoding)
        with pydb.open(tmp_path / name, encoding=encoding) as db:
            ix = db.index
            assert ix is not None
            got.append(sum(1 for k, c in ix.raw_terms() if theirs.get(k) == c))
    assert got == [shared, shared_dos]
