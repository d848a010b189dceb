"""Key modes of the native index (issue 13, item 4; docs/isis-formats.md
§5.3 and §5.6): ``cisis`` makes the keys CISIS makes (the word characters
of the CISIS installation the key table stands for, the key length of the
shipped inverted file) and is the default for a database that comes with
a shipped index or an FST; ``unicode`` is pydb's own.  The mode is stored
in the MANIFEST and kept on rebuild.

The per-database comparison with the shipped indexes under
../shared/data/isis is tools/cisis_keys.py; its exact numbers are asserted
here.  The tests that read the data folder skip without it.  The small
tests that drive the C key code are rerun under ASan+UBSan (marker
sanitize_address).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pydb
from pydb.index import KEY_MODES

from conftest import DATA, REPO, need

sys.path.insert(0, str(REPO / "tools"))
import cisis_keys  # noqa: E402

ABCD = cisis_keys.ABCD
MARC = ABCD + "marc/data/marc"

#: tools/cisis_keys.py in the CISIS mode, per database: (identical,
#: different, only shipped, only native, reasons).  Before key modes
#: (digits split words, no '_' in words) marc had 9,740 identical keys,
#: dubcore 66: see docs/isis-formats.md §5.6 for the reasons.
CISIS_TABLE = {
    "dcdspace": (0, 0, 0, 0, {}),
    "dubcore": (68, 0, 8, 0, {"stop word": 8}),
    "marc": (9955, 162, 13, 0, {"duplicate postings": 162, "stop word": 13}),
    "marcuni": (1968, 132, 233, 261, {
        "CNT shifted": 65, "case kept": 254, "cut inside a character": 29,
        "duplicate postings": 64, "occurrences joined": 37, "word characters": 177}),
    "servers": (6, 0, 2, 41, {"stale index": 41, "stale key": 2}),
    "unicode": (293, 349, 340, 550, {"CNT shifted": 333, "word characters": 906}),
    "unimarc": (156, 0, 25, 10, {"FST line not in the shipped index": 10,
                                 "stale key": 1, "stop word": 24}),
    "bireme__cisis/tests/CDS": (0, 1309, 15, 0, {"no posting detail": 1309,
                                                 "stop word": 15}),
    "bireme__cisis/wxis_src/examples/cdsx/cds": (0, 1347, 0, 0,
                                                 {"no posting detail": 1347}),
    "bireme__isis2json/fixtures/field3/FIELD3": (0, 0, 0, 0, {}),
    "scieloorg__pyisis/pyisis/pyisis/sample/cds": (1309, 0, 0, 0, {}),
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/MAIL": (0, 391, 0, 0,
                                                            {"no posting detail": 391}),
}
#: Databases whose build fails, and why (their own files, not the keys).
BUILD_FAILS = {"odds": "has MFN 2019440690, but the XRF entry of MFN 49",
               "rda": "unterminated conditional literal"}


def short(rel: str) -> str:
    return rel.split("/")[-3] if rel.startswith(ABCD) else rel


def test_every_database_with_fst_and_index_is_compared():
    if not DATA.is_dir():
        pytest.skip("no data folder")
    assert sorted(short(r) for r in cisis_keys.databases(DATA)) == sorted(
        list(CISIS_TABLE) + list(BUILD_FAILS))


@pytest.mark.parametrize("name", sorted(CISIS_TABLE))
def test_cisis_mode_against_the_shipped_index(name):
    """Keys and postings of the native index built in the CISIS mode
    against the shipped index, with every difference classified."""
    rel = next((r for r in cisis_keys.databases(DATA) if short(r) == name), None) \
        if DATA.is_dir() else None
    if rel is None:
        pytest.skip("no data folder")
    r = cisis_keys.compare(DATA, rel)
    assert r["mode"] == "cisis"
    assert (r["identical"], r["different"], r["only_shipped"], r["only_native"],
            dict(r["reasons"])) == CISIS_TABLE[name]


@pytest.mark.parametrize("name", sorted(BUILD_FAILS))
def test_databases_whose_build_fails(name):
    rel = next((r for r in cisis_keys.databases(DATA) if short(r) == name), None) \
        if DATA.is_dir() else None
    if rel is None:
        pytest.skip("no data folder")
    assert BUILD_FAILS[name] in cisis_keys.compare(DATA, rel)["error"]


def test_unicode_mode_on_marc_splits_digits():
    """The unicode mode (pydb's rules) on marc: digits split words, no
    key length from the .cnt; fewer keys equal ABCD's."""
    need(MARC)
    r = cisis_keys.compare(DATA, MARC, "unicode")
    assert (r["mode"], r["max_key"], r["identical"], r["only_shipped"]) == (
        "unicode", 0, 9603, 240)


def copy_db(src: str, dst: Path, exts=("mst", "xrf", "fst", "stw")) -> Path:
    for p in Path(src).parent.iterdir():
        if p.stem == Path(src).name and p.suffix.lower().lstrip(".") in exts:
            shutil.copy(p, dst / p.name)
    return dst / Path(src).name


def test_marc_defaults_stored_and_kept(tmp_path):
    """marc comes with a shipped index: the CISIS mode and the .cnt's LE2
    (60) by default; digits stay in words (`TW_2007`); stored in the
    MANIFEST and kept on rebuild; key_mode= switches, and the switch is
    kept in turn."""
    src = need(MARC)
    base = copy_db(src, tmp_path, ("mst", "xrf", "fst", "stw", "cnt", "n01", "n02",
                                   "l01", "l02", "ifp"))
    pydb.build_index(base, progress=False, encoding="cp1252")
    st = pydb.native.stored_settings(base)
    assert (st["mode"], st["max_key"]) == ("cisis", 60)
    assert "mode cisis\n" in (tmp_path / "marc.pdx" / "MANIFEST").read_text("latin-1")
    with pydb.open_index(base, encoding="cp1252") as ix:
        # as in ABCD's own index
        assert ix.postings(b"TW_2007", raw=True) == [(294, 245, 1, 5), (294, 998, 1, 5)]
        assert ix.postings(b"2007", raw=True) == [(246, 960, 1, 1), (294, 245, 1, 5)]
        assert ix.postings(b"AB_2007", raw=True) == [(246, 500, 1, 20), (267, 500, 1, 10)]
    pydb.build_index(base, progress=False)              # kept
    assert pydb.native.stored_settings(base)["mode"] == "cisis"
    ansi_upper = st["upper"]
    pydb.build_index(base, progress=False, key_mode="unicode")
    st = pydb.native.stored_settings(base)
    assert (st["mode"], st["max_key"]) == ("unicode", 60)
    # the ANSI case table is kept, its word characters are the unicode mode's
    assert st["upper"] == ansi_upper and st["word"][ord("0")] == 0
    assert st["word"][0xE9] == 1
    assert "mode " not in (tmp_path / "marc.pdx" / "MANIFEST").read_text("latin-1")
    with pydb.open_index(base, encoding="cp1252") as ix:
        assert ix.postings(b"TW_2007", raw=True) == []
    pydb.build_index(base, progress=False)
    assert pydb.native.stored_settings(base)["mode"] == "unicode"


def test_a_latin1_catalogue_rebuilt_without_settings_folds_its_accents(tmp_path):
    """No encoding given and no native index to take the tables from: the
    table of the detected encoding (Latin-1 for ABCD's Windows marc, as
    `pydb info` says), so an accented heading is upper-cased and folded
    as in ABCD's shipped index and found spelt either way.  (The DOS
    table left `JUçARA` and `POSSíVEL`: 160 keys with lower-case accented
    letters, found by no search.)"""
    src = need(MARC)
    base = copy_db(src, tmp_path, ("mst", "xrf", "fst", "stw", "cnt", "n01", "n02",
                                   "l01", "l02", "ifp"))
    with pydb.open(src) as db:
        shipped = {s: list(db.search(f'"{s}"')) for s in
                   ("AU_GRACIO, JUCARA DA COSTA", "POSSIVEL")}
    assert shipped == {"AU_GRACIO, JUCARA DA COSTA": [230], "POSSIVEL": [2]}
    pydb.build_index(base, progress=False)
    st = pydb.native.stored_settings(base)
    assert st["upper"][0xE7] == ord("C") and st["upper"][0xED] == ord("I")
    with pydb.open(base, encoding="latin-1") as db:
        assert list(db.search('"AU_GRACIO, JUÇARA DA COSTA"')) == [230]
        assert list(db.search('"AU_GRACIO, JUCARA DA COSTA"')) == [230]
        assert list(db.search("POSSÍVEL")) == [2]
        assert list(db.search("POSSIVEL")) == [2]
        lower_accented = [t.key for t in db.index.terms()
                          if any(0xE0 <= b <= 0xFE for b in t.key.encode("latin-1"))]
    assert lower_accented == []


def test_cisis_key_length_comes_from_the_cnt(tmp_path):
    """Without the shipped .cnt there is no key length to take: 0."""
    src = need(MARC)
    base = copy_db(src, tmp_path)
    pydb.build_index(base, progress=False, encoding="cp1252")
    st = pydb.native.stored_settings(base)
    assert (st["mode"], st["max_key"]) == ("cisis", 0)
    assert pydb.native.shipped_key_length(base) is None
    assert pydb.native.shipped_key_length(src) == 60


#: One field, both modes (docs/isis-formats.md §5.3, the examples table).
TEXT = "CO2 2007 Ærø text_c ﬁnance"


@pytest.mark.sanitize_address
@pytest.mark.parametrize("encoding,mode,words", [
    ("utf-8", "unicode", ["AERO", "C", "CO", "FINANCE", "TEXT"]),
    ("utf-8", "cisis", ["AERO", "CO", "TEXT_C", "ﬁNANCE"]),
    ("latin-1", "unicode", ["C", "CO", "ER", "TEXT"]),
    ("latin-1", "cisis", ["2007", "CO2", "Rø", "TEXT_C"]),
])
def test_modes_on_a_new_database(tmp_path, encoding, mode, words):
    """create(fst=..., key_mode=...) on a new database: technique 4 words
    of one field by mode and encoding.  Latin-1: ABCD's isisac.tab has ø
    and not Æ, pydb's ANSI table the other way round; the ligature is not
    encodable there.  UTF-8: the CISIS mode keeps the ligature as stored,
    the unicode mode folds it (NFKC)."""
    text = TEXT if encoding == "utf-8" else TEXT.replace(" ﬁnance", "")
    with pydb.create(tmp_path / "d", encoding=encoding, fst="1 4 v1", key_mode=mode) as db:
        db.append([(1, text)])
    assert pydb.native.stored_settings(tmp_path / "d")["mode"] == mode
    with pydb.open_index(tmp_path / "d", encoding=encoding) as ix:
        assert sorted(t.key for t in ix.terms()) == words


def test_default_mode_of_a_new_database(tmp_path):
    """pydb's own databases get the unicode mode; one with an .fst beside
    it the CISIS mode (default_key_mode)."""
    with pydb.create(tmp_path / "d", fst="1 4 v1"):
        pass
    assert pydb.native.stored_settings(tmp_path / "d")["mode"] == "unicode"
    assert pydb.native.default_key_mode(tmp_path / "d") == "unicode"
    (tmp_path / "d.fst").write_text("1 4 v1\n")
    assert pydb.native.default_key_mode(tmp_path / "d") == "cisis"


def test_unknown_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="key_mode must be one of unicode, cisis"):
        pydb.create(tmp_path / "d", fst="1 4 v1", key_mode="winisis")
    assert not (tmp_path / "d.mst").exists()
    with pydb.create(tmp_path / "e"):
        pass
    with pytest.raises(ValueError, match="key_mode must be one of"):
        pydb.build_index(tmp_path / "e", "1 4 v1", key_mode="x")
    assert list(KEY_MODES) == ["unicode", "cisis"]


def test_cli_key_mode(tmp_path):
    with pydb.create(tmp_path / "d", fst="1 4 v1") as db:
        db.append([(1, "text_c")])
    run = [sys.executable, "-m", "pydb", "index", str(tmp_path / "d"), "--quiet"]
    p = subprocess.run(run + ["--key-mode", "cisis"], capture_output=True, text=True,
                       cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert pydb.native.stored_settings(tmp_path / "d")["mode"] == "cisis"
    p = subprocess.run(run, capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert pydb.native.stored_settings(tmp_path / "d")["mode"] == "cisis"
    p = subprocess.run(run + ["--key-mode", "bad"], capture_output=True, text=True,
                       cwd=REPO)
    assert p.returncode == 2 and "invalid choice: 'bad'" in p.stderr
    p = subprocess.run([sys.executable, "-m", "pydb", "info", str(tmp_path / "d")],
                       capture_output=True, text=True, cwd=REPO)
    assert "cisis key mode" in p.stdout


@pytest.mark.sanitize_address
def test_nfkc_growth_on_a_prefixed_line(tmp_path):
    """NFKC may make a key 2.5 times its field's bytes (½ -> 1⁄2): a
    prefixed technique 5 line of 40 of them is one key, not a build
    error."""
    with pydb.create(tmp_path / "d", fst="1 5 '/TI_/',v1", key_mode="unicode") as db:
        db.append([(1, "½" * 40)])
    with pydb.open_index(tmp_path / "d") as ix:
        assert [t.key for t in ix.terms()] == ["TI_" + "1⁄2" * 40]


def test_shipped_index_terms_take_the_cisis_mode():
    """Search terms for a shipped CISIS index are made as CISIS makes keys:
    no NFKC (the ligature stays), Latin accents folded."""
    from pydb.index import Index
    src = need(ABCD + "unicode/data/unicode")
    with Index.open_isis(src, encoding="utf-8") as ix:
        assert ix.key("ﬁnance Ａｂｃ Ærø") == "ﬁNANCE Ａｂｃ AERO".encode()


def test_unicode_tables_are_what_their_generator_writes():
    """csrc/unicode_keys.h is generated (tools/gen_unicode_keys.py) and
    committed with its Unicode version pinned: keys stored in indexes must
    not change with the interpreter that builds pydb.  With a Python of
    that Unicode version, the generator gives the committed file byte for
    byte."""
    import unicodedata
    header = (REPO / "csrc" / "unicode_keys.h").read_text()
    if f"(Unicode {unicodedata.unidata_version})" not in header:
        pytest.skip(f"this Python has Unicode {unicodedata.unidata_version}; "
                    "the tables pin another version")
    out = subprocess.run([sys.executable, str(REPO / "tools" / "gen_unicode_keys.py")],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert out == header
