"""Encoding detection (pydb.open(encoding="auto"), pydb.encoding) and the
decode errors that name their field (FieldDecodeError).

The expected encodings of the real databases come from
../shared/data/isis/SOURCES.md: its notes where they name the character
set, else its 8bit/u8 column (values with a byte >= 0x80 / of those,
valid UTF-8) for UTF-8 against 8-bit, and the stored bytes quoted below
for which 8-bit code page.
"""

from __future__ import annotations

import pickle
import warnings

import pytest

import pydb
from pydb import encoding as enc

from conftest import ABCD, BRUMA, CISIS, CPAN, DATA, FIXTURES, I2J, PYISIS, SAMPLE, data_path

# Every master file under the data folder that opens (CDS.std.mst has no
# .xrf), with the encoding SOURCES.md gives it and why.
EXPECTED = {
    # no data: NXTMFN 1 ("empty" in SOURCES)
    ABCD + "dcdspace/data/dcdspace.mst": "utf-8",
    CPAN + "isismarc/isismarc/pft21.mst": "utf-8",
    # 8bit 0: ASCII only
    ABCD + "dubcore/data/htmlgizmo.mst": "utf-8",
    I2J + "field3/FIELD3.mst": "utf-8",
    FIXTURES + "test.mst": "utf-8",
    FIXTURES + "testflag.mst": "utf-8",
    # 8bit = u8: every 8-bit value valid UTF-8; notes "UTF-8" (rda,
    # EuTeAmo, utf-8), "re-encoded to UTF-8" (isis2json cds)
    ABCD + "dubcore/data/dubcore.mst": "utf-8",
    ABCD + "marcuni/data/marcuni.mst": "utf-8",
    ABCD + "rda/data/rda.mst": "utf-8",
    I2J + "cds/cds.mst": "utf-8",
    BRUMA + "EuTeAmo.mst": "utf-8",
    BRUMA + "ILoveYou.mst": "utf-8",
    BRUMA + "utf-8.mst": "utf-8",
    # 51/48: UTF-8 with 3 broken values (warned, see below)
    ABCD + "unicode/data/unicode.mst": "utf-8",
    # u8 0, DOS bytes: the UNESCO CDS sample, cp850 ("Slav\xa1k",
    # "caract\x82ristiques"; tests/test_real_data.py reads the cds.txt dump
    # with it); LILACS1 ("utiliza\x87ao cl\xa1nica"); servers
    # ("P\xa3blica", "Qu\x82bec"); BIBL (note: "DOS code-page text (0x82 =
    # e-acute, CP437/850/852 family)"; é and ć/å tie between cp850 and
    # cp852, cp850 comes first)
    PYISIS + "db/cds.mst": "cp850",
    PYISIS + "pycisis/tests/xcds.mst": "cp850",
    SAMPLE + "cds.mst": "cp850",
    SAMPLE + "cdsffi.mst": "cp850",
    FIXTURES + "cds.mst": "cp850",
    CISIS + "tests/CDS.mst": "cp850",
    CISIS + "wxis_src/examples/cdsx/cds.mst": "cp850",
    I2J + "cds/winisis-cds.mst": "cp850",
    I2J + "LILACS1.mst": "cp850",
    ABCD + "servers/data/servers.mst": "cp850",
    CPAN + "winisis/BIBL.mst": "cp850",
    CPAN + "isismarc/BIBL.mst": "cp850",
    # u8 0, DOS Central European (Croatian IsisMarc): "odre\xd0en" =
    # određen, "Obja\xe7njenje" = Objašnjenje, "raspa\x9favanje"
    CPAN + "isismarc/isismarc/fdt21.mst": "cp852",
    CPAN + "isismarc/isismarc/fmt21.mst": "cp852",
    # u8 0, ISO-8859-1: notes "Latin-1" (lilacs, lilacs30), "cp850/latin-1"
    # (mem: "Popula\xe7\xe3o"); marc ("Funda\xe7\xe3o"), odds ("ma\xf1ana"),
    # unimarc ("d\xe9mocratie"), gansutf8 (its one 8-bit value "mai\xfasculo");
    # none holds a byte 0x80-0x9F, so windows-1252 would read them alike
    SAMPLE + "lilacs.mst": "latin-1",
    I2J + "lilacs30/lilacs30.mst": "latin-1",
    BRUMA + "mem.mst": "latin-1",
    ABCD + "marc/data/marc.mst": "latin-1",
    ABCD + "odds/data/odds.mst": "latin-1",
    ABCD + "unimarc/data/unimarc.mst": "latin-1",
    ABCD + "marcuni/data/gansutf8.mst": "latin-1",
    # u8 0, windows-1252: LILACS MAIL holds \x93 \x94 (quotes) and \x96 (dash)
    FIXTURES + "MAIL.mst": "cp1252",
    # note: "3 records mixing UTF-8 and Latin-1" (and CP850): 2 of the 3
    # values are not UTF-8, cp850 scores 17 letters, cp852 16, latin-1 13
    FIXTURES + "mixEncodings.mst": "cp850",
}
NO_XRF = {CISIS + "tests/CDS.std.mst"}
# The values that do not decode in the chosen encoding: (mfn, tag, occ).
UNICODE_BROKEN = [(30, 4, 1), (36, 6, 1), (37, 6, 1)]


def open_auto(path, **kw):
    """pydb.open(path, encoding="auto"), returning (db, warnings raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = pydb.open(path, encoding="auto", **kw)
    return db, [w for w in caught if issubclass(w.category, pydb.EncodingDetectionWarning)]


def test_every_real_database_is_listed(isis_data):
    found = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.suffix.lower() == ".mst"}
    assert found == set(EXPECTED) | NO_XRF


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_real_database_encoding(isis_data, rel):
    db, warned = open_auto(data_path(rel), errors="strict")
    with db:
        det = db.encoding_detection
        assert db.encoding == det.encoding == EXPECTED[rel]
        assert det.summary().startswith(f"{EXPECTED[rel]}: {det.reason}")
        # every record, not only the sample, decodes in the chosen encoding
        # (errors="strict": nothing replaced; the text encodes back to the
        # stored bytes), but the known broken values
        bad = []
        for rec in db.records(deleted=True, skip_damaged=True):
            try:
                fields = rec.fields
            except pydb.FieldDecodeError as e:
                bad.append((e.mfn, e.tag, e.occurrence))
                continue
            assert all(f.value.encode(db.encoding) == f.raw for f in fields)
        if rel == ABCD + "unicode/data/unicode.mst":
            assert sorted(set(bad)) == UNICODE_BROKEN
            assert (det.utf8_valid, det.utf8_invalid, det.problem_count) == (48, 3, 3)
            assert [p[:3] for p in det.problems] == UNICODE_BROKEN
            assert len(warned) == 1
            assert "MFN 30 tag 4 occurrence 1 offset 0" in str(warned[0].message)
        elif rel == FIXTURES + "mixEncodings.mst":
            assert bad == []
            # the UTF-8 record reads as mojibake in cp850: warned, with where
            assert (det.utf8_valid, det.utf8_invalid) == (1, 2)
            assert det.scores == {"latin-1": 13, "cp850": 17, "cp852": 16}
            assert det.problems == ((3, 1, 1, 6),)
            assert len(warned) == 1
            assert "are valid UTF-8 with multi-byte sequences" in str(warned[0].message)
        else:
            assert bad == [] and warned == [] and det.problem_count == 0
        if rel == CPAN + "winisis/BIBL.mst":
            # a tie is told as one, not as "cp850 reads the most" (a review)
            assert det.scores == {"latin-1": 0, "cp850": 4, "cp852": 4}
            assert det.reason.endswith(
                "cp850 and cp852 read as many bytes >= 0x80 as letters in words (4); "
                "cp850, the first of latin-1, cp850, cp852, is taken (give the encoding "
                "to choose)")


def test_real_text_after_detection(isis_data):
    """What the chosen encodings read, against the text known from
    elsewhere (tests/test_real_data.py, the dumps beside the files)."""
    expect = [
        (PYISIS + "db/cds", 7, 70, ["Slavík, B.", "Catsky, J."]),
        (I2J + "lilacs30/lilacs30", 1, 12, None),
        (ABCD + "servers/data/servers", 4, 1, ["SPA-Biblioteca Pública de Zaragoza"]),
        (FIXTURES + "MAIL", 41, 815,
         ["Rua  Augusto Corrêa 1 – Campus Universitário - Guamá"]),
        (CPAN + "isismarc/isismarc/fdt21", 2, 15, ["^n#^tnije određen"]),
        (ABCD + "marc/data/marc", 1, 260,
         ["##^aBrasilia^bFundação Centro de Formação do Servidor Público - FUNCEP^c1987"]),
    ]
    for rel, mfn, tag, values in expect:
        db, warned = open_auto(data_path(rel), errors="strict")
        with db:
            assert warned == []
            got = db[mfn][tag]
            if values is None:
                assert got[1].startswith("Angiopatia amilóide cerebral não inflamatória")
            else:
                assert got == values


# ------------------------------------------------------------ synthetic

TEXT_FR = ["Problèmes scientifiques de la végétation", "Caractéristiques à Orléans",
           "Société française d'écologie, Hôpital Saint-Étienne"]
TEXT_ES = ["Biblioteca Pública de Zaragoza", "Año de publicación", "Niño español"]
TEXT_HR = ["nije određen", "Objašnjenje", "opća psihologija", "raspačavanje knjiga"]


def make(tmp_path, name, values, fields_per_record=1):
    """A new database `name` holding `values` (bytes), one per record."""
    with pydb.create(tmp_path / name) as db:
        for v in values:
            db.append([(24, b"ASCII title")] + [(70, v)] * fields_per_record)
    return tmp_path / name


@pytest.mark.parametrize("codec,texts,expected", [
    ("utf-8", TEXT_FR + TEXT_ES + TEXT_HR, "utf-8"),
    ("cp850", TEXT_FR + TEXT_ES, "cp850"),
    ("latin-1", TEXT_FR + TEXT_ES, "latin-1"),
    ("cp852", TEXT_HR, "cp852"),
])
def test_synthetic_databases(tmp_path, codec, texts, expected):
    base = make(tmp_path, "d", [t.encode(codec) for t in texts])
    db, warned = open_auto(base, errors="strict")
    with db:
        assert (db.encoding, warned) == (expected, [])
        assert [r[70][0] for r in db] == texts
        det = db.encoding_detection
        assert (det.records, det.fields, det.non_ascii) == (len(texts), 2 * len(texts),
                                                            len(texts))
        if expected == "utf-8":
            assert (det.utf8_valid, det.utf8_invalid, det.scores) == (len(texts), 0, {})
        else:
            assert (det.utf8_valid, det.utf8_invalid) == (0, len(texts))
            assert max(det.scores, key=lambda c: det.scores[c]) == expected
    with pydb.open(base) as db:
        assert pydb.detect_encoding(db) == det


def test_synthetic_cp1252(tmp_path):
    texts = ["“Cité” – l’été", "Œuvres complètes… de Molière"]
    base = make(tmp_path, "w", [t.encode("cp1252") for t in texts])
    db, warned = open_auto(base)
    with db:
        assert (db.encoding, warned) == ("cp1252", [])
        # “ ” – ’ Œ …: 6 bytes 0x80-0x9F, which cp850 reads as letters
        # (ô ö û Æ î à); cp850 scores 4 ("îuvres", "complÞtesà", and "ö",
        # "Ú" next to other misread bytes), latin-1 its 5 accents
        det = db.encoding_detection
        assert det.c1_bytes == 6
        assert det.scores == {"latin-1": 5, "cp850": 4, "cp852": 4}
        assert [r[70][0] for r in db] == texts


def test_ascii_only_is_utf8(tmp_path):
    base = make(tmp_path, "a", [b"plain", b"text"])
    db, warned = open_auto(base)
    with db:
        assert (db.encoding, warned) == ("utf-8", [])
        assert db.encoding_detection.reason.startswith("no byte >= 0x80 in the sample")


def test_sample_is_bounded_and_spread(tmp_path):
    assert enc._sample_mfns(3) == [1, 2, 3]
    assert enc._sample_mfns(300) == list(range(1, 301))
    mfns = enc._sample_mfns(100_000)
    assert len(mfns) == 512 and mfns[:256] == list(range(1, 257))
    assert mfns == sorted(set(mfns)) and mfns[256] == 257 and mfns[-1] > 99_000
    # 2000 ASCII records, then cp850 text only from MFN 1500 on: the spread
    # part of the sample reaches it
    base = tmp_path / "big"
    with pydb.create(base) as db, db.transaction() as tx:
        for i in range(1, 2001):
            tx.append([(24, "Caractéristiques".encode("cp850") if i >= 1500 else b"plain")])
    db, warned = open_auto(base)
    with db:
        det = db.encoding_detection
        assert (db.encoding, warned) == ("cp850", [])
        assert det.records == 512 and det.non_ascii == sum(1 for m in enc._sample_mfns(2000)
                                                           if m >= 1500)


def test_scoring_is_bounded(tmp_path):
    # 600 records with one cp850 é each: 512 sampled (256 first, 256
    # spread), and rule 3 scores every 2nd of those values (at most 256)
    base = tmp_path / "many"
    with pydb.create(base) as db, db.transaction() as tx:
        for _ in range(600):
            tx.append([(24, "Caractéristiques".encode("cp850"))])
    with pydb.open(base, encoding="auto") as db:
        det = db.encoding_detection
        assert (det.records, det.non_ascii, det.utf8_invalid) == (512, 512, 512)
        assert det.scores == {"latin-1": 0, "cp850": 256, "cp852": 256}
        assert det.encoding == "cp850"


def test_invalid_utf8_in_utf8_database_warns(tmp_path):
    values = [t.encode("utf-8") for t in TEXT_FR] + [b"M\xd4NICA"]
    base = make(tmp_path, "m", values, fields_per_record=2)
    db, warned = open_auto(base)
    with db:
        assert db.encoding == "utf-8"
        det = db.encoding_detection
        assert det.problems == ((4, 70, 1, 1), (4, 70, 2, 1)) and det.problem_count == 2
        (w,) = warned
        assert str(w.message) == (
            f"{base}.mst: encoding=\"auto\" chose utf-8 (the sample mixes valid (6) and "
            "invalid (2) UTF-8 values; the valid ones are more); 2 of the 12 sampled fields "
            "are not valid UTF-8: MFN 4 tag 70 occurrence 1 offset 1, MFN 4 tag 70 "
            "occurrence 2 offset 1")
        # surrogateescape (the default) keeps the bytes
        assert db[4][70] == ["M\udcd4NICA"] * 2


# -------------------------------------------------- configuration files

def abcd_layout(tmp_path, values, dr_path=None, abcd=None):
    """bases/<db>/data/<db>.mst as ABCD keeps it, with the .def files."""
    data = tmp_path / "bases" / "books" / "data"
    data.mkdir(parents=True)
    make(data, "books", values)
    if dr_path is not None:
        (tmp_path / "bases" / "books" / "dr_path.def").write_text(dr_path)
    if abcd is not None:
        (tmp_path / "bases" / "abcd.def").write_text(abcd)
    return data / "books"


def test_abcd_unicode_setting_decides_ascii_data(tmp_path):
    base = abcd_layout(tmp_path, [b"plain"], dr_path="CISIS_VERSION=16-60\nUNICODE=1\n",
                       abcd="UNICODE=0\n")
    db, warned = open_auto(base)
    with db:
        det = db.encoding_detection
        assert (db.encoding, warned) == ("utf-8", [])
        dr = str(tmp_path / "bases" / "books" / "dr_path.def")
        ab = str(tmp_path / "bases" / "abcd.def")
        assert det.config == {dr: "UNICODE=1", ab: "UNICODE=0"}
        assert det.reason == ("no byte >= 0x80 in the sample; utf-8 as dr_path.def "
                              "UNICODE=1, abcd.def UNICODE=0 says")


def test_abcd_def_alone(tmp_path):
    base = abcd_layout(tmp_path, [b"plain"], abcd="[x]\nunicode = 0\n")
    db, warned = open_auto(base)
    with db:
        assert (db.encoding, warned) == ("latin-1", [])
        assert db.encoding_detection.config_encoding == "latin-1"


def test_data_contradicting_the_configuration_warns(tmp_path):
    base = abcd_layout(tmp_path, [t.encode("cp850") for t in TEXT_FR], dr_path="UNICODE=1\n")
    db, warned = open_auto(base)
    with db:
        assert db.encoding == "cp850"
        (w,) = warned
        assert "the configuration says utf-8" in str(w.message)
        assert "the data cp850" in str(w.message)


def test_configuration_breaks_a_mixed_sample(tmp_path):
    values = [TEXT_FR[0].encode("utf-8"), TEXT_FR[1].encode("latin-1"),
              TEXT_FR[2].encode("latin-1")]
    base = abcd_layout(tmp_path, values, dr_path="UNICODE=1\n")
    db, warned = open_auto(base)
    with db:
        assert db.encoding == "utf-8"     # the data alone would say latin-1
        assert db.encoding_detection.problem_count == 2 and len(warned) == 1
    with pydb.open(make(tmp_path, "nocfg", values)) as db:
        assert pydb.detect_encoding(db).encoding == "latin-1"


# ------------------------------------------------------------ decode errors

@pytest.mark.sanitize_address
def test_strict_decode_error_names_the_field(tmp_path):
    base = tmp_path / "s"
    with pydb.create(base) as db:
        db.append([(24, b"ok"), (70, b"Smith"), (70, b"M\xd4NICA"), (90, b"x")])
    with pydb.open(base, errors="strict") as db:
        rec = db[1]
        for get in (lambda: rec.fields, lambda: rec[70], lambda: rec.to_dict()):
            with pytest.raises(pydb.FieldDecodeError) as info:
                get()
            e = info.value
            assert isinstance(e, pydb.Error) and isinstance(e, UnicodeDecodeError)
            assert str(e) == (f"{base}.mst: MFN 1, tag 70, occurrence 2: 'utf-8' cannot "
                              "decode byte 0xd4 at offset 1 of the value: invalid "
                              "continuation byte")
            assert (e.filename, e.mfn, e.tag, e.occurrence) == (f"{base}.mst", 1, 70, 2)
            assert (e.encoding, e.object, e.start, e.end) == ("utf-8", b"M\xd4NICA", 1, 2)
            assert isinstance(e.__cause__, UnicodeDecodeError)
            assert not isinstance(e.__cause__, pydb.Error)
        assert rec.get(24) == "ok" and rec[90] == ["x"]
        copy = pickle.loads(pickle.dumps(e))
        assert (type(copy), str(copy)) == (pydb.FieldDecodeError, str(e))
    with pydb.create(tmp_path / "c") as db:
        db.append([(5, b"\x81")])
    with pydb.open(tmp_path / "c", encoding="cp1252", errors="strict") as db2:
        with pytest.raises(pydb.FieldDecodeError) as info:
            db2[1].get(5)
        assert str(info.value) == (f"{tmp_path / 'c'}.mst: MFN 1, tag 5, occurrence 1: "
                                   "'cp1252' cannot decode byte 0x81 at offset 0 of the "
                                   "value: character maps to <undefined>")


# ------------------------------------------------------------ code pages

def test_charmap_decoding_takes_only_the_standard_code_pages():
    """The table the binding decodes code pages with is the ``encodings``
    module's own, and only a single-byte code page gets one."""
    import encodings.cp037
    import encodings.cp850
    table, ascii_same = enc.charmap_decoding("cp850")
    assert table is encodings.cp850.decoding_table and ascii_same is True
    assert enc.charmap_decoding("windows-1252")[1] is True
    table, ascii_same = enc.charmap_decoding("cp037")   # EBCDIC
    assert table is encodings.cp037.decoding_table and ascii_same is False
    for name in ("utf-8", "utf-16", "iso2022_jp", "gb18030", "no-such-codec"):
        assert enc.charmap_decoding(name) is None, name


def test_charmap_decoding_refuses_a_codec_that_is_not_its_table(monkeypatch):
    """A codec whose decoding disagrees with its module's table in one
    byte (here a lookup answering "cp850" with a codec that reads 0x80
    otherwise) gets no table: its values keep the codec's own path."""
    import codecs
    real = codecs.lookup("cp850")

    def decode(data, errors="strict"):
        text, n = real.decode(data, errors)
        return text.replace("\u00c7", "?"), n   # 0x80 is Ç in cp850

    fake = codecs.CodecInfo(real.encode, decode, name="cp850")
    monkeypatch.setattr(enc.codecs, "lookup", lambda name: fake)
    assert enc.charmap_decoding("cp850") is None
    monkeypatch.undo()
    assert enc.charmap_decoding("cp850") is not None


def test_records_take_the_decoder_of_their_database(tmp_path):
    """Each database resolves its codec once (_pydb_record.c,
    codec_resolve) and its Records take it: the code pages their table,
    ASCII copied where the table keeps ASCII; other codecs (UTF-16, one
    an application registered) the codec registry."""
    import codecs

    from pydb._pydb import _testing

    def rot13_encode(text, errors="strict"):
        return codecs.encode(text, "rot13").encode(), len(text)

    def rot13_decode(data, errors="strict"):
        return codecs.decode(bytes(data).decode(), "rot13"), len(data)

    def search(name):
        if name == "pydb_test_rot13":
            return codecs.CodecInfo(rot13_encode, rot13_decode, name="pydb_test_rot13")
        return None
    codecs.register(search)
    try:
        base = tmp_path / "k"
        with pydb.create(base) as db:
            db.append([(1, b"Uryyb!")])
        for name, want in [("utf-8", ("utf-8", True)), ("latin-1", ("latin-1", True)),
                           ("ascii", ("ascii", True)), ("cp850", ("charmap", True)),
                           ("windows-1252", ("charmap", True)), ("cp037", ("charmap", False)),
                           ("utf-16-le", ("other", False)),
                           ("pydb_test_rot13", ("other", False))]:
            with pydb.open(base, encoding=name) as db:
                rec = db[1]
                assert _testing.record_codec(rec) == want, name
                assert rec[1] == [b"Uryyb!".decode(name, "surrogateescape")], name
        with pydb.open(base, encoding="pydb_test_rot13") as db:
            assert db[1][1] == ["Hello!"]
    finally:
        codecs.unregister(search)


CODE_PAGES = ["cp850", "cp437", "cp852", "cp1252", "koi8-r", "mac-roman", "cp037"]


@pytest.mark.sanitize_address
@pytest.mark.parametrize("errors", ["surrogateescape", "replace", "strict"])
def test_code_page_values_decode_as_python_decodes_them(tmp_path, errors):
    """Values of every byte, alone, inside ASCII text and in runs, decode
    under each code page (their tables read directly: _pydb_record.c,
    charmap_of; ASCII values copied where the table maps ASCII to itself)
    exactly as Python's codec decodes them; a byte the code page leaves
    undefined raises FieldDecodeError naming the code page under
    "strict"."""
    stored = [bytes([b]) for b in range(256)]
    stored += [b"plain text " + bytes([b]) + b" and more" for b in range(256)]
    stored += [bytes(range(k, k + 16)) for k in range(0, 256, 16)]
    stored += [b"", b"ab", b"only ASCII, longer than eight bytes"]
    base = tmp_path / "cp"
    with pydb.create(base, "isis-packed") as db:
        for i in range(0, len(stored), 64):
            db.append([(1, v) for v in stored[i:i + 64]])
    def decodes(raw, codec):
        try:
            return raw.decode(codec, errors)
        except UnicodeDecodeError:
            return None

    for page in CODE_PAGES:
        got, want, failed, skipped = [], [], 0, 0
        with pydb.open(base, encoding=page, errors=errors) as db:
            for rec in db:
                values = [decodes(raw, page) for raw in rec.raw(1)]
                if None in values:   # only under "strict"
                    bad = values.index(None)
                    with pytest.raises(pydb.FieldDecodeError) as info:
                        _ = rec.fields
                    e = info.value
                    assert (e.encoding, e.occurrence) == (page, bad + 1)
                    assert e.object[e.start:e.end].decode(page, "replace") == "\ufffd"
                    failed += 1
                    skipped += len(values)
                    continue
                assert rec[1] == values
                got += [(f.value, f.raw) for f in rec.fields]
                want += list(zip(values, rec.raw(1), strict=True))
        assert got == want and len(got) + skipped == len(stored), page
        # cp1252 leaves 0x81 0x8D 0x8F 0x90 0x9D undefined: in the records of
        # single bytes 0x80-0xBF, of the texts 128-191, and the 16-byte runs
        assert failed == (3 if (page, errors) == ("cp1252", "strict") else 0), page


@pytest.mark.sanitize_address
def test_strict_decode_error_real_data(isis_data):
    with pydb.open(data_path(FIXTURES + "mixEncodings"), errors="strict") as db:
        for read in (db.__getitem__, lambda m: db.read_many([m])[0],
                     lambda m: next(iter(db.records(start=m)))):
            with pytest.raises(pydb.FieldDecodeError) as info:
                _ = read(2).fields
            e = info.value
            assert (e.mfn, e.tag, e.occurrence, e.start) == (2, 1, 1, 10)
            assert e.filename == str(data_path(FIXTURES + "mixEncodings.mst"))
        with db.snapshot() as snap:
            with pytest.raises(pydb.FieldDecodeError):
                _ = snap[2].fields


def test_create_refuses_auto(tmp_path):
    with pytest.raises(ValueError, match="needs data"):
        pydb.create(tmp_path / "x", encoding="auto")
    assert not (tmp_path / "x.mst").exists()


def test_writable_auto(tmp_path):
    base = make(tmp_path, "w", [t.encode("cp850") for t in TEXT_ES])
    db, warned = open_auto(base, readonly=False)
    with db:
        assert (db.encoding, warned) == ("cp850", [])
        mfn = db.append([(70, "Añadido")])
        assert db[mfn].raw(70) == ["Añadido".encode("cp850")]


# ------------------------------------------------------------ command line

def test_cli_defaults_to_auto(isis_data, capsys):
    from pydb.__main__ import main
    base = str(data_path(PYISIS + "db/cds"))
    assert main(["info", base]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("encoding:"))
    with pydb.open(base, encoding="auto") as db:
        summary = db.encoding_detection.summary()
    assert line == (f"{'encoding':>20}: cp850 (field values are decoded with it; "
                    f"--encoding); auto: {summary}")
    assert main(["info", base, "--encoding", "latin-1"]) == 0
    assert (f"{'encoding':>20}: latin-1 (field values are decoded with it; --encoding)\n"
            in capsys.readouterr().out)
    assert main(["dump", base, "7"]) == 0
    assert "!v070!Slavík, B.\n" in capsys.readouterr().out
    # a database with broken values opens with a warning (on stderr)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["info", str(data_path(ABCD + "unicode/data/unicode"))]) == 0
    assert [w.category for w in caught] == [pydb.EncodingDetectionWarning]
    assert f"{'encoding':>20}: utf-8 (field values are decoded with it; --encoding); auto: " \
        in capsys.readouterr().out


def test_a_codec_that_cannot_be_the_records_is_refused_at_open(tmp_path):
    """A codec that is not a text encoding (rot13, hex), or refuses the
    error handler (idna under surrogateescape), is a LookupError at
    open(), not at the first read (a review found raw LookupError and
    UnicodeError there); one that reads ASCII otherwise (UTF-16, EBCDIC)
    is fine for a database but not for an ISO 2709 file, whose leader and
    directory are ASCII digits (UnicodeDecodeError during the read)."""
    base = tmp_path / "db"
    with pydb.create(base) as db:
        db.append([(1, b"A\x00")])
    for name, says in [("rot13", "'rot13' is not a text encoding"),
                       ("hex", "'hex' is not a text encoding"),
                       ("idna", "idna cannot be the character set of records (with "
                                "errors='surrogateescape'"),
                       ("no-such-codec", "unknown encoding: no-such-codec")]:
        with pytest.raises(LookupError) as e:
            pydb.open(base, encoding=name)
        assert says in str(e.value), name
    with pydb.open(base, encoding="utf-16-le") as db:
        assert db[1][1] == ["A"]
    # an error handler Python does not know: refused at open (it was
    # accepted, then every value past the codec failed with it)
    with pytest.raises(LookupError, match="unknown error handler name 'no-such-handler'"):
        pydb.open(base, errors="no-such-handler")
    iso = tmp_path / "a.iso"
    iso.write_bytes(b"000330000000000290004500001000200000#x##\n")
    for name in ("utf-16", "cp037"):
        with pytest.raises(LookupError, match=f"{name} (does not read ASCII|cannot be)"):
            pydb.iso2709.read(iso, encoding=name)
    assert [r.fields for r in pydb.iso2709.read(iso, encoding="cp850")] == [[(1, b"x")]]
    for bad in (-1, "1", 1.5, True, 100_000):
        with pytest.raises(ValueError, match="mfn_tag must be None or a tag 0..99999"):
            pydb.iso2709.read(iso, mfn_tag=bad)


def test_a_writable_handle_of_the_default_encoding_warns_where_values_are_not_utf8(
        isis_data, tmp_path):
    """A database opened for writing with the default encoding (UTF-8)
    whose values look to be in another (isis2json's WinISIS cds sample,
    cp850) warns that a str written through it would be UTF-8 among them,
    naming the encoding to give; an explicit encoding, a read-only open
    and a UTF-8 database do not (a new user's review: "Müller" appended
    to a cp850 catalogue read back as "M├╝ller", check() said OK)."""
    import shutil
    for ext in ("mst", "xrf"):
        shutil.copy(data_path(I2J + f"cds/winisis-cds.{ext}"), tmp_path / f"c.{ext}")
    base = tmp_path / "c"
    with pytest.warns(pydb.EncodingDetectionWarning) as caught:
        pydb.open(base, readonly=False).close()
    message = str(caught[0].message)
    assert message.startswith(f"{base}: the values look cp850 (")
    assert "a str written through it would be UTF-8 among them. Open with " \
           "encoding='auto' or encoding='cp850'" in message
    assert caught[0].filename == __file__
    utf8 = tmp_path / "u"
    pydb.create(utf8).close()
    with pydb.open(utf8, readonly=False) as db:
        db.append([(1, "Müller")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kw in ({"readonly": False, "encoding": "cp850"},
                   {"readonly": False, "encoding": "utf-8"}, {}):
            pydb.open(base, **kw).close()
        pydb.open(utf8, readonly=False).close()
