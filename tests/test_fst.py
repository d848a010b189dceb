"""FST parsing and key extraction (docs/isis-formats.md §5), key normalisation
(§5.3), stop words (§5.4), prefixes (§5.5)."""

import os

import pytest

import pydb
from pydb import _pydb
from pydb.fst import FieldRule, fst_text, parse_fst

from conftest import hypothesis_examples

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = pytest.mark.sanitize_address


# Rules per FST file under ../shared/data/isis (= its non-blank lines).
FST_RULES = {
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/dcdspace/data/dcdspace.fst": 19,
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/dubcore/data/dubcore.fst": 27,
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/marc/data/marc.fst": 83,
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/marcuni/data/marcuni.fst": 59,
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds.fst": 20,
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/rda/data/rda.fst": 55,
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/servers/data/servers.fst": 1,
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/unicode/data/unicode.fst": 6,
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/unimarc/data/unimarc.fst": 16,
    "bireme__cisis/tests/CDS.fst": 3,
    "bireme__cisis/wxis_src/examples/cdsx/cds.fst": 3,
    "bireme__isis2json/fixtures/field3/FIELD3.fst": 0,
    "cpan__Biblio-Isis-0.24/data/isismarc/isismarc/pft21.fst": 1,
    "heitorbarbieri__Bruma/utf-8.fst": 1,
    "scieloorg__pyisis/db/cds.fst": 3,
    "scieloorg__pyisis/pyisis/pyisis/sample/cds.fst": 3,
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/MAIL.fst": 1,
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/it_0-4.fst": 4,
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/it_1000-1008.fst": 7,
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/it_5-8.fst": 4,
}

# FSTs shipped with a line pydb refuses: {file: (line, reason)}.  ABCD's
# rda.fst line 2 is ``50 5 '/CL_/',"v50^a,|.|v50^b,`` (a conditional
# literal never closed); CISIS takes the rest of the line as the literal
# and indexes nothing for it (test_unterminated_literal_indexed_nothing).
FST_REFUSED = {
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/rda/data/rda.fst":
        (2, 'column 14: unterminated conditional literal "v50^a,|.|v50^b, '
            '(no closing " on the line)'),
}

FIX = "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/"
SAMPLE = "scieloorg__pyisis/pyisis/pyisis/sample/"

# MFN 1 of the pyisis sample cds, as stored.
REC1 = [
    (44, b"Methodology of plant eco-physiology: proceedings of the Montpellier Symposium"),
    (50, b"Incl. bibl."),
    (69, b"Paper on: <plant physiology><plant transpiration><measurement and instruments>"),
    (24, b"Techniques for the measurement of transpiration of individual plants"),
    (26, b"^aParis^bUnesco^c-1965"),
    (30, b"^ap. 211-224^billus."),
    (70, b"Magalhaes, A.C."),
    (70, b"Franco, C.M."),
]


def test_every_shipped_fst_parses(isis_data):
    found = {os.path.relpath(p, isis_data): p for p in isis_data.rglob("*")
             if p.suffix.lower() == ".fst"}
    assert sorted(found) == sorted(FST_RULES)
    for rel, path in found.items():
        if rel in FST_REFUSED:
            line, reason = FST_REFUSED[rel]
            with pytest.raises(pydb.FSTError) as ei:
                parse_fst(path)
            assert (ei.value.filename, ei.value.line) == (str(path), line)
            assert ei.value.reason == f"FST line {line}, {reason}"
            # the other lines parse
            lines = path.read_bytes().split(b"\n")
            rules = parse_fst(b"\n".join(lines[:line - 1] + lines[line:]))
            assert len(rules) == FST_RULES[rel] - 1, rel
            continue
        rules = parse_fst(path)
        assert len(rules) == FST_RULES[rel], rel
        for r in rules:
            assert 1 <= r.id <= 65535 and (r.technique <= 8 or 1000 <= r.technique <= 1008)


def test_parse_fst_rules_and_lines(isis_data):
    rules = parse_fst(isis_data / SAMPLE / "cds.fst")
    assert rules == [pydb.FSTRule(70, 0, "MHU,(V70/)", 1), pydb.FSTRule(24, 4, "MHU,V24", 2),
                     pydb.FSTRule(69, 2, "V69", 3)]
    # blank lines are skipped but counted for line numbers
    assert [r.line for r in parse_fst("\n24 4 v24\n\n70 0 v70\n")] == [2, 4]


def test_record1_matches_the_sample(isis_data):
    with pydb.open(isis_data / SAMPLE / "cds") as db:
        assert [(f.tag, f.raw) for f in db[1].fields] == REC1


def keys(fst, fields, **kw):
    return [(k, m, t, o, c) for k, m, t, o, c in _pydb._testing.fst_keys(fst, fields, **kw)]


def test_techniques_0_to_4_hand_checked(isis_data):
    fst = (isis_data / FIX / "it_0-4.fst").read_bytes()
    got = keys(fst, REC1, mfn=1)
    assert got == [
        # 70 0 mhu,(V70/): one key per line, OCC 1, CNT per key
        (b"MAGALHAES, A.C.", 1, 70, 1, 1), (b"FRANCO, C.M.", 1, 70, 1, 2),
        # 26 1 v26: each subfield is an item
        (b"PARIS", 1, 26, 1, 1), (b"UNESCO", 1, 26, 1, 2), (b"-1965", 1, 26, 1, 3),
        # 69 2 v69: each <term>
        (b"PLANT PHYSIOLOGY", 1, 69, 1, 1), (b"PLANT TRANSPIRATION", 1, 69, 1, 2),
        (b"MEASUREMENT AND INSTRUMENTS", 1, 69, 1, 3),
        # 24 4 mhu,v24: each word, CNT = word number
        (b"TECHNIQUES", 1, 24, 1, 1), (b"FOR", 1, 24, 1, 2), (b"THE", 1, 24, 1, 3),
        (b"MEASUREMENT", 1, 24, 1, 4), (b"OF", 1, 24, 1, 5), (b"TRANSPIRATION", 1, 24, 1, 6),
        (b"OF", 1, 24, 1, 7), (b"INDIVIDUAL", 1, 24, 1, 8), (b"PLANTS", 1, 24, 1, 9),
    ]


def test_stop_words_are_skipped_but_counted(isis_data):
    stw = (isis_data / SAMPLE / "cds.stw").read_bytes()
    got = keys(b"24 4 mhu,v24", REC1, stw=stw)
    assert got == [(b"TECHNIQUES", 1, 24, 1, 1), (b"MEASUREMENT", 1, 24, 1, 4),
                   (b"TRANSPIRATION", 1, 24, 1, 6), (b"INDIVIDUAL", 1, 24, 1, 8),
                   (b"PLANTS", 1, 24, 1, 9)]
    # stop words apply to techniques 4/8 only
    assert keys(b"24 0 v24", [(24, b"The")], stw=stw) == [(b"THE", 1, 24, 1, 1)]


def test_techniques_5_to_8_prefixes(isis_data):
    fst = (isis_data / FIX / "it_5-8.fst").read_bytes()
    got = keys(fst, REC1, mfn=1)
    assert got[:2] == [(b"AU_MAGALHAES, A.C.", 1, 70, 1, 1), (b"AU_FRANCO, C.M.", 1, 70, 1, 2)]
    assert got[2:5] == [(b"TECHNIQUE TEST 5: PARIS", 1, 26, 1, 1),
                        (b"TECHNIQUE TEST 5: UNESCO", 1, 26, 1, 2),
                        (b"TECHNIQUE TEST 5: -1965", 1, 26, 1, 3)]
    assert got[5:8] == [(b"TECHNIQUE TEST 6: PLANT PHYSIOLOGY", 1, 69, 1, 1),
                        (b"TECHNIQUE TEST 6: PLANT TRANSPIRATION", 1, 69, 1, 2),
                        (b"TECHNIQUE TEST 6: MEASUREMENT AND INSTRUMENTS", 1, 69, 1, 3)]
    assert got[8:] == [(b"TECHNIQUE TEST 8: " + w, 1, 24, 1, i + 1) for i, w in enumerate(
        b"TECHNIQUES FOR THE MEASUREMENT OF TRANSPIRATION OF INDIVIDUAL PLANTS".split())]


def test_techniques_3_and_7_slashes():
    rec = [(10, b"see /alpha/ and /beta gamma/ not/"), (10, b"/delta/")]
    assert keys(b"10 3 (v10/)", rec, mfn=7) == [
        (b"ALPHA", 7, 10, 1, 1), (b"BETA GAMMA", 7, 10, 1, 2), (b"DELTA", 7, 10, 1, 3)]
    assert keys(b"10 7 '#K=#',(v10|%|/)", rec, mfn=7) == [
        (b"K=ALPHA", 7, 10, 1, 1), (b"K=BETA GAMMA", 7, 10, 1, 2), (b"K=DELTA", 7, 10, 2, 1)]


def test_percent_makes_occurrences():
    rec = [(70, b"Smith, J."), (70, b"Jones, A. B.")]
    assert keys(b"70 0 (v70|%|/)", rec) == [(b"SMITH, J.", 1, 70, 1, 1),
                                            (b"JONES, A. B.", 1, 70, 2, 1)]
    assert keys(b"70 4 (v70|%|/)", rec) == [
        (b"SMITH", 1, 70, 1, 1), (b"J", 1, 70, 1, 2),
        (b"JONES", 1, 70, 2, 1), (b"A", 1, 70, 2, 2), (b"B", 1, 70, 2, 3)]


def test_technique_1000_names_the_mfn(isis_data):
    fst = (isis_data / FIX / "it_1000-1008.fst").read_bytes()
    got = keys(fst, REC1, mfn=1)
    # '/',f(size(v30),0,0),'/': v30 is 20 bytes long, so MFN 20
    assert got[0] == (b"MAGALHAES, A.C.", 20, 70, 1, 1)
    assert {m for _, m, *_ in got} == {20}
    assert _pydb._testing.fst_format(fst, 0, REC1) == b"/20/Magalhaes, A.C.\nFranco, C.M.\n"
    assert _pydb._testing.fst_format(fst, 0, [(70, b"X")]) == b"/111/X\n"


def test_format_language_subset():
    fmt = _pydb._testing.fst_format
    rec = [(100, b"^aSmith^bJohn^c1950"), (245, b"^aTitle^bsub"), (8, b"abcdefghijk"),
           (96, b"text"), (1, b"<Mc=Mac>Quail")]
    assert fmt(b'1 0 "CN_"v100^a', 0, rec) == b"CN_Smith"
    assert fmt(b'1 0 "CN_"v999^a', 0, rec) == b""
    assert fmt(b"1 0 v8*7.4", 0, rec) == b"hijk"
    assert fmt(b"1 0 v100^*", 0, rec) == b"Smith"
    assert fmt(b"1 0 mhu,v100", 0, rec) == b"Smith, John, 1950"
    assert fmt(b"1 0 mpl,v100", 0, rec) == b"^aSmith^bJohn^c1950"
    assert fmt(b"1 0 mhl,v1", 0, rec) == b"McQuail"
    assert fmt(b"1 0 if v96='text' then 'DC_TX' else 'NO' fi", 0, rec) == b"DC_TX"
    assert fmt(b"1 0 if p(v245^b) and a(v999) then 'yes' fi", 0, rec) == b"yes"
    assert fmt(b"1 0 replace(v245^a,'it', 'IT')", 0, rec) == b"TITle"
    assert fmt(b"1 0 f(mfn,1,0),'/',mfn", 0, rec, mfn=42) == b"42/000042"
    assert fmt(b'1 0 "CN_"mfn', 0, rec, mfn=1) == b"000001"   # [E] ABCD dubcore.fst
    assert fmt(b"1 0 v100^a /* a comment ) */ v245^a", 0, rec) == b"SmithTitle"
    rep = [(7, b"a"), (7, b"b"), (7, b"c")]
    assert fmt(b"1 0 (|<|v7|>|)", 0, rep) == b"<a><b><c>"
    assert fmt(b"1 0 v7", 0, rep) == b"a; b; c"
    assert fmt(b"1 0 (if iocc<3 then v7/ else break fi)", 0, rep) == b"a\nb\n"
    assert fmt(b'1 0 ("x"v7"y")', 0, rep) == b"xayxbyxcy"  # once per group repetition


@pytest.mark.parametrize("text,line,construct", [
    (b"24 4 v24\n\n70 0 v70 + x\n", 3, "'+'"),
    (b"1 9 v1\n", 1, "technique 9"),
    (b"24 4 v24\nabc\n", 2, "numeric ID"),
    (b"24 4 (v24\n", 1, "')' expected"),
    (b"24 4 if p(v24) then v24\n", 1, "'fi' expected"),
    (b"24 4 ref(['x']v1,v2)\n", 1, "'ref'"),
    (b"70000 0 v1\n", 1, "1..65535"),
    (b"1 0\n", 1, "format expected"),
    (b"1 0 v\n", 1, "'v'"),
    (b"1 0 s(v1)\n", 1, "'s'"),
    (b"1 0 v1\n2 0 v999999\n", 2, "tag above 65535"),
    (b"1 0 v1\n2 0 ((v1))\n", 2, "cannot be nested"),
    (b"1 0 " + b"if p(v1) then " * 40 + b"v1" + b" fi" * 40, 1, "nested too deeply"),
    (b"1 0 if " + b"not " * 100 + b"p(v1) then v1 fi", 1, "nested too deeply"),
    (b"1 0 if " + b"(" * 10000 + b"p(v1)" + b")" * 10000 + b" then v1 fi", 1, "nested too deeply"),
])
def test_hostile_fsts_name_the_line(text, line, construct):
    with pytest.raises(pydb.FSTError) as ei:
        parse_fst(text)
    assert ei.value.line == line
    assert construct in ei.value.reason


@pytest.mark.parametrize("text,line,column,reason", [
    # unconditional literal '...' (and `...`, an alternative delimiter)
    (b"24 4 'abc v24\n", 1, 6, "unterminated unconditional literal 'abc v24 "
                                 "(no closing ' on the line)"),
    (b"24 4 v24\n1 0 `ab,v1\n", 2, 5, "unterminated unconditional literal `ab,v1 "
                                      "(no closing ` on the line)"),
    # conditional literal "..."
    (b'1 0 v1\n\n70 0 "AU=v70\n', 3, 6, 'unterminated conditional literal "AU=v70 '
                                      '(no closing " on the line)'),
    (b'1 0 v1"x\n', 1, 7, 'unterminated conditional literal "x (no closing " on the line)'),
    # repeatable literal |...|, before and after a selector, in a group
    (b"1 0 (|x v7)\n", 1, 6, "unterminated repeatable literal |x v7) "
                             "(no closing | on the line)"),
    (b"1 0 (v7|; )\n", 1, 8, "unterminated repeatable literal |; ) (no closing | on the line)"),
    # in a condition and in replace()
    (b"1 0 if v1='x then v1 fi\n", 1, 11, "unterminated unconditional literal 'x then v1 fi "
                                          "(no closing ' on the line)"),
    (b"1 0 if v1:\"x then v1 fi\n", 1, 11, 'unterminated conditional literal "x then v1 fi '
                                            '(no closing " on the line)'),
    (b"1 0 replace(v24,'a','b)\n", 1, 21, "unterminated unconditional literal 'b) "
                                          "(no closing ' on the line)"),
    # a closing quote on the next line does not count; bytes outside ASCII are
    # shown escaped and long literals cut
    (b"1 0 'abc\n2 0 v1'\n", 1, 5, "unterminated unconditional literal 'abc "
                                  "(no closing ' on the line)"),
    (b"1 0 '\xe9t\xe9 " + b"x" * 60 + b"\n", 1, 5,
     "unterminated unconditional literal '\\xe9t\\xe9 " + "x" * 35 + "... "
     "(no closing ' on the line)"),
])
def test_unterminated_literal_names_line_and_column(text, line, column, reason):
    # A literal that does not close on its line used to run to the end of
    # the line, swallowing the selectors after it: the rule indexed nothing.
    with pytest.raises(pydb.FSTError) as ei:
        parse_fst(text)
    assert ei.value.line == line
    assert ei.value.reason == f"FST line {line}, column {column}: {reason}"
    # the line named once (it was "<fst>, line 2: FST line 2, column ...")
    assert str(ei.value) == f"<fst>: FST line {line}, column {column}: {reason}"
    assert str(pydb.FSTError("a.fst", 3, "no such function")) == \
        "a.fst, line 3: no such function"
    with pytest.raises(pydb.FSTError):           # the same through the key extractor
        _pydb._testing.fst_keys(text, REC1)


def test_terminated_literals_still_parse():
    fmt = _pydb._testing.fst_format
    assert fmt(b"1 0 'a|b\"c',v70", 0, REC1) == b'a|b"cMagalhaes, A.C.; Franco, C.M.'
    assert fmt(b'1 0 "x\'y"v24*0.3', 0, REC1) == b"x'yTec"
    assert fmt(b"1 0 (|'|v70|'|)", 0, REC1) == b"'Magalhaes, A.C.''Franco, C.M.'"
    assert fmt(b"1 0 `ab`", 0, REC1) == b"ab"
    assert fmt(b"1 0 ''v24*0.3", 0, REC1) == b"Tec"


def test_unterminated_literal_indexed_nothing(isis_data):
    # ABCD's rda.fst line 2, 50 5 '/CL_/',"v50^a,|.|v50^b, would index
    # field 50 (present in 772 records) under CL_ keys; the index ABCD
    # shipped beside it (built by CISIS, whose format compiler lets a
    # literal run to the end of the format) has CL_ keys from rule 82 only.
    from pydb.index import Index
    base = isis_data / "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/rda/data/rda"
    with Index.open_isis(base) as ix:
        tags = {p.tag for k, _ in ix.raw_terms(b"CL_") for p in ix.postings(k)}
    assert tags == {82}
    with pydb.open(base) as db:
        assert any(f.tag == 50 for f in db[1].fields)


def test_field_rules_compile_to_the_same_keys():
    rules = [FieldRule(70, 0, [70]), FieldRule(24, 4, [24]),
             FieldRule(26, 5, [26], subfields="ab", prefix="PUB="),
             FieldRule(71, 0, [70], prefix="AU=")]
    text = fst_text(rules)
    assert text == (b"70 0 mhu,(v70|%|/)\n24 4 mhu,(v24|%|/)\n"
                    b"26 5 '/PUB=/',mhu,(v26^a|%|/),(v26^b|%|/)\n71 0 mhu,(|AU=|v70|%|/)")
    got = keys(text, REC1)
    assert got == [
        (b"MAGALHAES, A.C.", 1, 70, 1, 1), (b"FRANCO, C.M.", 1, 70, 2, 1),
        *[(w, 1, 24, 1, i + 1) for i, w in enumerate(
            b"TECHNIQUES FOR THE MEASUREMENT OF TRANSPIRATION OF INDIVIDUAL PLANTS".split())],
        (b"PUB=PARIS", 1, 26, 1, 1), (b"PUB=UNESCO", 1, 26, 2, 1),
        (b"AU=MAGALHAES, A.C.", 1, 71, 1, 1), (b"AU=FRANCO, C.M.", 1, 71, 2, 1)]
    with pytest.raises(ValueError):
        FieldRule(24, 4, [24], prefix="TI=")
    with pytest.raises(ValueError):
        FieldRule(24, 8, [24])
    with pytest.raises(ValueError):
        FieldRule(24, 9, [24])


# ---- key normalisation, docs/isis-formats.md §5.3 ----

def norm(term, **kw):
    return _pydb._testing.key_normalize(term, **kw)


def test_default_8bit_table():
    assert norm(b"Conf\x82rence") == b"CONFERENCE"      # CP850 é
    assert norm(b"\x80a\xa4o") == b"CANO"                # Ç, ñ
    assert norm(b"Andr\x82 \x9a") == b"ANDRE U"          # é, Ü
    assert norm(b"\x9c") == b"\x9c"                       # £ is kept
    assert norm(b"  two  words  ") == b"TWO  WORDS"       # blanks trimmed
    upper, word = _pydb._testing.keyrules()
    assert upper[ord("a")] == ord("A") and upper[0xE9] == 0xE9
    assert [c for c in range(256) if word[c]] == (
        list(range(65, 91)) + list(range(97, 123)) + list(range(128, 155)) + list(range(160, 166)))


def test_digits_split_words():
    assert keys(b"1 4 v1", [(1, b"CO2 levels A1B")]) == [
        (b"CO", 1, 1, 1, 1), (b"LEVELS", 1, 1, 1, 2), (b"A", 1, 1, 1, 3), (b"B", 1, 1, 1, 4)]


def test_tables_from_the_database_folder(isis_data):
    folder = isis_data / "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/servers/data"
    uc = [int(x) for x in (folder / "isisuc.tab").read_text().split()]
    ac = {int(x) for x in (folder / "isisac.tab").read_text().split()}
    assert len(uc) == 256
    upper, word = _pydb._testing.keyrules(tables_dir=str(folder))
    assert list(upper) == uc
    assert {c for c in range(256) if word[c]} == ac
    # this table folds Latin-1: é (0xE9) -> E, ÿ (0xFF) -> Y
    assert norm(b"caf\xe9 \xff", tables_dir=str(folder)) == b"CAFE Y"


def test_unicode_folding():
    def u(s, **kw):
        return norm(s.encode(), utf8=True, **kw).decode()
    assert u("Crème brûlée") == "CREME BRULEE"
    assert u("Straße Þór") == "STRASSE THOR"
    assert u("Łódź Œuvre") == "LODZ OEUVRE"
    assert u("Ελληνικά άλφα ς") == "ΕΛΛΗΝΙΚΑ ΑΛΦΑ Σ"
    assert u("ёлка Москва") == "ЕЛКА МОСКВА"
    assert u("e\u0301te\u0301") == "ETE"
    assert u("日本語") == "日本語"
    # truncation never cuts a UTF-8 sequence: ΑΒΓ is 6 bytes
    assert u("αβγ", max_key=5) == "ΑΒ"
    assert u("abcdef", max_key=3) == "ABC"
    assert norm(b"abc\xffdef", utf8=True) == b"ABC\xffDEF"   # invalid byte kept
    assert keys(b"1 4 v1", [(1, "Ça coûte 5€, señor".encode())], utf8=True) == [
        (b"CA", 1, 1, 1, 1), (b"COUTE", 1, 1, 1, 2),
        (b"SENOR", 1, 1, 1, 3)]


def test_truncation_8bit_and_stop_word_lookup():
    assert norm(b"x" * 40, max_key=30) == b"X" * 30
    assert norm(b"abc" + b" " * 30 + b"d", max_key=30) == b"ABC"   # trailing blank trimmed
    # stop words go through the key rules too (formats §5.4)
    assert keys(b"1 4 v1", [(1, b"Of mice and men")], stw=b" OF \r\nand\n") == [
        (b"MICE", 1, 1, 1, 2), (b"MEN", 1, 1, 1, 4)]


# ---- hostile input: random FST text never crashes the parser/evaluator ----

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    given = None

EXAMPLES = hypothesis_examples(200)
PIECES = ["v24", "v70", "^a", "^*", "*3", ".2", "(", ")", "'x'", '"y"', "|z|", "/", "#",
          "%", ",", " ", "mhu", "mpl", "if ", " then ", " else ", " fi", "p(v70)",
          "a(v26)", "=", "<", "'T'", "iocc", "break", "f(mfn,3,1)", "mfn", "size(v24)",
          "replace(v24,'a','bb')", "/*", "*/", " and ", " or ", " not ", "1", "\n", "0 ", "4 "]


if given is not None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(PIECES), max_size=30), st.integers(0, 8),
           st.binary(max_size=40))
    def test_random_formats_never_crash(pieces, tech, noise):
        text = f"24 {tech} ".encode() + "".join(pieces).encode() + noise
        try:
            rules = _pydb._fst_parse(text)
        except pydb.FSTError as e:
            assert e.line >= 1
            return
        for i in range(len(rules)):
            _pydb._testing.fst_format(text, i, REC1)
        _pydb._testing.fst_keys(text, REC1, max_key=7, utf8=bool(tech % 2))


def test_runaway_format_output_is_capped():
    # each replace() multiplies the text by 10: 10**9 bytes if unchecked
    fst = b"1 0 " + b"replace(" * 9 + b"v1" + b",'a','aaaaaaaaaa')" * 9
    with pytest.raises(pydb.RecordTooLargeError) as ei:
        _pydb._testing.fst_keys(fst, [(1, b"a")], mfn=3)
    assert "record 3" in str(ei.value)


def test_a_missing_fst_or_stw_file_is_not_taken_for_text(tmp_path):
    """A str naming a .fst or .stw file (any case) is a path even where the
    file is missing: FileNotFoundError, not one line of FST text (an
    FSTError about the first column) or one stop word."""
    for name in ("nofile.fst", "NOFILE.STW", str(tmp_path / "x.Fst")):
        with pytest.raises(FileNotFoundError):
            pydb.fst.read_text(name)
    with pytest.raises(FileNotFoundError):
        pydb.parse_fst("nofile.fst")
    (tmp_path / "a.fst").write_bytes(b"24 0 v24\n")
    assert pydb.fst.read_text(str(tmp_path / "a.fst")) == b"24 0 v24\n"
    assert pydb.fst.read_text("24 0 v24") == b"24 0 v24"
    assert pydb.fst.read_text("THE\nAND.fst") == b"THE\nAND.fst"   # text: has a newline


def test_a_utf8_byte_order_mark_before_the_fst_is_dropped(tmp_path):
    """An FST saved "as UTF-8" by Notepad starts with a byte-order mark,
    which belongs to no rule: read from a file, as bytes or as a str, it
    parses as without it (it was "FST line 1, column 1: rule must start
    with a numeric ID", the mark never named: a librarian's trial)."""
    text = b"24 4 v24\n70 0 (v70/)\n"
    want = parse_fst(text)
    path = tmp_path / "bom.fst"
    path.write_bytes(b"\xef\xbb\xbf" + text)
    assert parse_fst(path) == parse_fst(str(path)) == want
    assert parse_fst(b"\xef\xbb\xbf" + text) == want
    assert parse_fst("\ufeff" + text.decode()) == want
    assert fst_text(path) == text
    # the mark is dropped once, at the start only
    with pytest.raises(pydb.FSTError, match="FST line 2, column 1"):
        parse_fst(b"24 4 v24\n\xef\xbb\xbf70 0 v70\n")
