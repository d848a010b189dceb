"""pydb against the real CDS/ISIS databases in ../shared/data/isis.

Expected values come from outside pydb: the "Master files" tables of
SOURCES.md (measured with independent readers), the text dumps and
exchange files that ship beside the databases (pyisis ``cds.txt``, CISIS
``CDS.id``, isis2json ``*.json``, ISO 2709 ``*.iso``), and twin databases
that hold the same records in another leader layout.  Every test is skipped
when the data folder is absent (fixture ``isis_data``).
"""

from __future__ import annotations

import json
import os
import re
from collections import namedtuple

import pytest

import pydb

from conftest import (
    ABCD,
    BRUMA,
    CISIS,
    CPAN,
    DATA,
    FIXTURES,
    I2J,
    PYISIS,
    SAMPLE,
    all_master_files,
    data_path,
)

pytestmark = pytest.mark.usefixtures("isis_data")


ODDS = ABCD + "odds/data/odds.mst"
CDS_STD = CISIS + "tests/CDS.std.mst"      # no .xrf beside it
ODDS_BAD_MFN = 49                           # XRF points at another MFN's record


def opendb(rel, **kw):
    return pydb.open(data_path(rel), **kw)


def fields_of(rec):
    """(tag, raw bytes) of every field, in stored order."""
    return [(f.tag, f.raw) for f in rec.fields]


def by_tag(pairs):
    """{tag: [values in occurrence order]} (order across tags dropped)."""
    out = {}
    for tag, value in pairs:
        out.setdefault(tag, []).append(value)
    return out


# ---------------------------------------------------------------------------
# 1. The SOURCES.md "Master files" tables
# ---------------------------------------------------------------------------

Row = namedtuple("Row", "path size layout mstxl nxt act ldel pdel new upd")

# Copied from SOURCES.md (bytes, layout, sh, NXT, act/ldel/pdel, new/upd).
# layout None = "empty" in SOURCES (no record to detect a layout from).
SOURCES_TABLE = [
    Row(PYISIS + "db/cds.mst", 62976, "isis-packed", 0, 151, 150, 0, 0, 0, 0),
    Row(PYISIS + "pycisis/tests/xcds.mst", 65024, "isis-aligned", 0, 157, 156, 0, 0, 156, 0),
    Row(SAMPLE + "cds.mst", 63488, "isis-aligned", 0, 151, 150, 0, 0, 150, 0),
    Row(SAMPLE + "cdsffi.mst", 73216, "ffi-aligned", 3, 157, 156, 0, 0, 156, 0),
    Row(SAMPLE + "lilacs.mst", 3875840, "isis-aligned", 0, 3226, 3225, 0, 0, 3225, 0),
    Row(FIXTURES + "MAIL.mst", 135680, "isis-aligned", 0, 392, 391, 0, 0, 391, 0),
    Row(FIXTURES + "cds.mst", 63488, "isis-aligned", 0, 151, 150, 0, 0, 0, 0),
    Row(FIXTURES + "mixEncodings.mst", 512, "isis-aligned", 0, 4, 3, 0, 0, 3, 0),
    Row(FIXTURES + "test.mst", 512, "isis-aligned", 0, 5, 4, 0, 0, 4, 0),
    Row(FIXTURES + "testflag.mst", 1338, "isis-aligned", 0, 2, 1, 0, 0, 0, 0),
    Row(CISIS + "tests/CDS.mst", 67584, "isis-aligned", 6, 151, 150, 0, 0, 150, 0),
    Row(CISIS + "wxis_src/examples/cdsx/cds.mst", 73216, "ffi-aligned", 3, 154, 153, 0, 0, 153, 0),
    Row(I2J + "LILACS1.mst", 2560, "isis-packed", 0, 2, 1, 0, 0, 1, 0),
    Row(I2J + "cds/cds.mst", 62976, "isis-packed", 0, 151, 150, 0, 0, 150, 0),
    Row(I2J + "cds/winisis-cds.mst", 68608, "isis-packed", 0, 155, 150, 0, 4, 0, 0),
    Row(I2J + "field3/FIELD3.mst", 512, "isis-packed", 0, 2, 1, 0, 0, 1, 0),
    Row(I2J + "lilacs30/lilacs30.mst", 108032, "isis-packed", 0, 31, 30, 0, 0, 30, 0),
    Row(BRUMA + "EuTeAmo.mst", 7168, "isis-packed", 0, 2, 1, 0, 0, 1, 0),
    Row(BRUMA + "ILoveYou.mst", 4096, "isis-aligned", 0, 2, 1, 0, 0, 1, 0),
    Row(BRUMA + "mem.mst", 57344, "isis-packed", 0, 144, 143, 0, 0, 143, 0),
    Row(BRUMA + "utf-8.mst", 13312, "isis-aligned", 0, 4, 3, 0, 0, 3, 0),
    Row(ABCD + "dcdspace/data/dcdspace.mst", 512, None, 0, 1, 0, 0, 0, 0, 0),
    Row(ABCD + "dubcore/data/dubcore.mst", 6656, "ffi-packed", 3, 6, 5, 0, 0, 0, 0),
    Row(ABCD + "dubcore/data/htmlgizmo.mst", 8192, "ffi-packed", 3, 145, 144, 0, 0, 144, 0),
    Row(ABCD + "marc/data/marc.mst", 231936, "isis-packed", 0, 299, 298, 0, 0, 0, 0),
    Row(ABCD + "marcuni/data/gansutf8.mst", 13824, "isis-aligned", 0, 94, 93, 0, 0, 93, 0),
    Row(ABCD + "marcuni/data/marcuni.mst", 58368, "isis-packed", 0, 71, 70, 0, 0, 0, 0),
    # SOURCES: 86 active.  That is the number of *readable* records: the XRF
    # holds 87 positive entries, one of which (MFN 49) points at a record of
    # another MFN.  counts() reports XRF states, hence 87 (see test below).
    Row(ODDS, 79360, "isis-packed", 0, 88, 87, 0, 0, 0, 16),
    Row(ABCD + "rda/data/rda.mst", 1516544, "isis-packed", 0, 1149, 1148, 0, 0, 0, 1),
    Row(ABCD + "servers/data/servers.mst", 14848, "isis-packed", 0, 57, 50, 6, 0, 44, 4),
    Row(ABCD + "unicode/data/unicode.mst", 24064, "isis-packed", 0, 39, 38, 0, 0, 0, 0),
    Row(ABCD + "unimarc/data/unimarc.mst", 291328, "isis-packed", 0, 19, 18, 0, 0, 0, 4),
    Row(CPAN + "isismarc/BIBL.mst", 11264, "isis-packed", 0, 6, 5, 0, 0, 0, 0),
    Row(CPAN + "isismarc/isismarc/pft21.mst", 512, None, 0, 1, 0, 0, 0, 0, 0),
    Row(CPAN + "isismarc/isismarc/fdt21.mst", 13824, "isis-packed", 0, 52, 51, 0, 0, 51, 0),
    Row(CPAN + "isismarc/isismarc/fmt21.mst", 13824, "isis-packed", 0, 2, 1, 0, 0, 1, 0),
    Row(CPAN + "winisis/BIBL.mst", 4096, "isis-packed", 0, 6, 4, 1, 0, 0, 1),
]


def test_table_covers_every_master_file():
    listed = {r.path for r in SOURCES_TABLE} | {CDS_STD}
    found = {p.relative_to(DATA).as_posix() for p in all_master_files()}
    assert found == listed
    assert len(found) == 38


@pytest.mark.parametrize("row", SOURCES_TABLE, ids=[r.path for r in SOURCES_TABLE])
def test_sources_table(row):
    with opendb(row.path) as db:
        info = db.info()
        if row.layout is not None:
            assert db.layout == row.layout
            assert info["layout"] == row.layout
        assert info["mstxl"] == row.mstxl
        assert info["next_mfn"] == row.nxt
        assert info["mst_size"] == row.size
        assert db.max_mfn == row.nxt - 1
        assert len(db) == row.act
        assert db.counts() == {
            "active": row.act, "logically_deleted": row.ldel,
            "physically_deleted": row.pdel,
            "unused": row.nxt - 1 - row.act - row.ldel - row.pdel,
            "new": row.new, "pending": row.upd,
        }


def test_cds_std_has_no_xrf():
    with pytest.raises(pydb.DatabaseNotFoundError) as exc:
        opendb(CDS_STD)
    assert isinstance(exc.value, FileNotFoundError)
    assert str(exc.value.filename).endswith("CDS.std.xrf")


@pytest.mark.parametrize(
    "path", all_master_files(),
    ids=lambda p: p.relative_to(DATA).as_posix())
def test_every_mfn_reads_or_is_not_found(path):
    rel = path.relative_to(DATA).as_posix()
    if rel == CDS_STD:
        with pytest.raises(pydb.DatabaseNotFoundError):
            pydb.open(path)
        return
    with pydb.open(path) as db:
        for mfn in range(1, db.max_mfn + 1):
            state = db.xrf_entry(mfn)["state"]
            if rel == ODDS and mfn == ODDS_BAD_MFN:
                with pytest.raises(pydb.CorruptionError):
                    db[mfn]
                continue
            if state in ("unused", "physically deleted"):
                with pytest.raises(pydb.NotFoundError):
                    db[mfn]
                assert mfn not in db
                assert db.get(mfn) is None
                continue
            rec = db[mfn]
            assert rec.mfn == mfn
            assert rec.deleted == (state == "logically deleted")
            assert rec.offset == db.xrf_entry(mfn)["offset"]
            assert rec.tags == tuple(f.tag for f in rec.fields)
            assert len(rec) == len(rec.fields)
        for bad in (0, db.max_mfn + 1):
            with pytest.raises(pydb.NotFoundError):
                db[bad]


def test_odds_damaged_entry():
    with opendb(ODDS) as db:
        entry = db.xrf_entry(ODDS_BAD_MFN)
        assert entry["state"] == "active"
        with pytest.raises(pydb.CorruptionError) as exc:
            db[ODDS_BAD_MFN]
        assert exc.value.offset == entry["offset"] == 28976
        assert exc.value.filename.endswith("odds.mst")
        good = [r.mfn for r in db.records(skip_damaged=True)]
        assert good == [m for m in range(1, 88) if m != ODDS_BAD_MFN]
        assert len(good) == 86                   # SOURCES' "86 active"
        with pytest.raises(pydb.CorruptionError):
            db.read_many([1, ODDS_BAD_MFN, 50])


def test_odds_iteration_yields_records_before_the_damage():
    with opendb(ODDS) as db:
        it = iter(db)
        seen = []
        with pytest.raises(pydb.CorruptionError):
            for rec in it:
                seen.append(rec.mfn)
        assert seen == list(range(1, ODDS_BAD_MFN))


# ---------------------------------------------------------------------------
# 2. Exact content from the dumps beside the databases
# ---------------------------------------------------------------------------

def parse_pyisis_txt(path):
    """pyisis ``cds.txt``: ``mfn=     1 `` then `` TAG  \\xaeVALUE\\xaf``, CRLF."""
    recs, cur = {}, None
    for line in path.read_bytes().split(b"\r\n"):
        if not line:
            continue
        m = re.fullmatch(rb"mfn= *(\d+) ", line)
        if m:
            cur = recs.setdefault(int(m.group(1)), [])
            continue
        m = re.fullmatch(rb" *(\d+)  \xae(.*)\xaf", line, re.S)
        assert m, line
        cur.append((int(m.group(1)), m.group(2)))
    return recs


def parse_cisis_id(path):
    """CISIS ``.id`` dump (docs/isis-formats.md §8): ``!ID nnnnnn``, ``!vTTT!value``."""
    recs, cur = {}, None
    for line in path.read_bytes().split(b"\n"):
        if not line:
            continue
        m = re.fullmatch(rb"!ID (\d+)", line)
        if m:
            cur = recs.setdefault(int(m.group(1)), [])
            continue
        m = re.fullmatch(rb"!v(\d{3})!(.*)", line, re.S)
        assert m, line
        cur.append((int(m.group(1)), m.group(2)))
    return recs


def test_pyisis_cds_txt_dump():
    expected = parse_pyisis_txt(data_path(PYISIS + "db/cds.txt"))
    assert sorted(expected) == list(range(1, 151))
    assert sum(len(v) for v in expected.values()) == 1048
    with opendb(PYISIS + "db/cds.mst", encoding="cp850") as db:
        assert db.layout == "isis-packed"
        got = {r.mfn: fields_of(r) for r in db}
        assert got == expected
        # cp850 text, e.g. 0xA1 = i-acute, 0x82 = e-acute
        assert db[7][70] == ["Slavík, B.", "Catsky, J."]
        assert db[29][24] == ["Apercu sur la végétation occupant les alluvions récentes"]
        eight_bit = sum(1 for r in db for f in r.fields if max(f.raw, default=0) > 127)
        assert eight_bit == 56                       # SOURCES 8bit column


def test_cisis_cds_id_dump():
    expected = parse_cisis_id(data_path(CISIS + "tests/CDS.id"))
    assert sorted(expected) == list(range(1, 151))
    with opendb(CISIS + "tests/CDS.mst") as db:
        assert (db.layout, db.info()["mstxl"]) == ("isis-aligned", 6)
        got = {r.mfn: fields_of(r) for r in db}
        assert got == expected
        # MSTXL 6: records start on 64-byte boundaries and MFRL is padded
        # to a multiple of 64 (docs/isis-formats.md §2.2, §2.3)
        assert all(r.offset % 64 == 0 and r.mfrl % 64 == 0 for r in db)
        assert db[1].fields[0] == (44, "Methodology of plant eco-physiology: "
                                       "proceedings of the Montpellier Symposium")


def load_isis2json(path):
    """isis2json output: list of {"mfn": n, "TAG": [values...]}."""
    out = {}
    for rec in json.loads(path.read_text(encoding="utf-8")):
        rec = dict(rec)
        mfn = rec.pop("mfn")
        out[mfn] = {int(tag): values for tag, values in rec.items()}
    return out


def test_isis2json_cds_json():
    # cds.mst holds the CP850 CDS bytes re-encoded as if they were Latin-1
    # (0xA1 -> C2 A1).  isis2json read that UTF-8 file as ISO-8859-1, so the
    # JSON holds mojibake ("SlavÂ¡k"): every JSON value is exactly the raw
    # bytes decoded as Latin-1, which is what this test compares.
    expected = load_isis2json(data_path(I2J + "cds/cds.json"))
    assert sorted(expected) == list(range(1, 151))
    with opendb(I2J + "cds/cds.mst", encoding="latin-1", errors="strict") as db:
        got = {r.mfn: r.to_dict() for r in db}
        assert got == expected
        assert db[7][70] == ["SlavÂ¡k, B.", "Catsky, J."]
    with opendb(I2J + "cds/cds.mst", encoding="utf-8", errors="strict") as db:
        assert db[7][70] == ["Slav¡k, B.", "Catsky, J."]
        # the 56 8-bit fields are valid UTF-8 (SOURCES 8bit/u8 = 56/56) and
        # are exactly the fields where the JSON (Latin-1 view) differs
        differ = [(r.mfn, f.tag) for r in db for f in r.fields
                  if f.value != f.raw.decode("latin-1")]
        assert len(differ) == 56


def test_isis2json_lilacs30_json():
    # lilacs30.mst is Latin-1 (SOURCES: 162 8-bit fields, none valid UTF-8)
    # and isis2json decoded it as ISO-8859-1: every JSON value is exact.
    # The "?" (e.g. "Abstract ? A 77", "amyloid-? peptide") and the "&amp;"
    # in some values are stored that way in the master file itself, not
    # artefacts of the JSON export.
    expected = load_isis2json(data_path(I2J + "lilacs30/lilacs30.json"))
    assert sorted(expected) == list(range(1, 31))
    with opendb(I2J + "lilacs30/lilacs30.mst", encoding="latin-1",
                errors="strict") as db:
        got = {r.mfn: r.to_dict() for r in db}
        assert got == expected
        rec = db[1]
        assert b"aid2=193&amp;nome_en" in rec.raw(8)[0]
        assert rec.raw(83)[0].startswith(b"Abstract ? A 77 year-old men")
        assert rec[12][1] == ("Angiopatia amilóide cerebral não inflamatória como "
                              "causa de demência rapidamente progressiva: estudo "
                              "de caso")
        eight_bit = sum(1 for r in db for f in r.fields if max(f.raw, default=0) > 127)
        assert eight_bit == 162


def read_iso(path):
    """ISO 2709 records (docs/isis-formats.md §7) as lists of (tag, raw value).

    Wrapped files: line ends (LF or CRLF) are not part of the data, so they
    are dropped before the records are cut by their leader lengths.  Checks
    every field terminator and record terminator.
    """
    data = path.read_bytes()
    stream = b"".join(ln[:-1] if ln.endswith(b"\r") else ln for ln in data.split(b"\n"))
    recs, p = [], 0
    while p < len(stream):
        n = int(stream[p:p + 5])
        rec = stream[p:p + n]
        p += n
        base = int(rec[12:17])
        directory = rec[24:base - 1]
        ft = rec[base - 1:base]
        assert len(directory) % 12 == 0
        assert rec[-1:] in (b"#", b"\x1d")
        fields = []
        for i in range(0, len(directory), 12):
            tag = int(directory[i:i + 3])
            length = int(directory[i + 3:i + 7])
            start = int(directory[i + 7:i + 12])
            value = rec[base + start:base + start + length]
            assert value[-1:] == ft
            fields.append((tag, value[:-1]))
        recs.append(fields)
    return recs


# (iso file, database, layout, first MFN the ISO starts at)
ISO_TWINS = [
    (PYISIS + "db/cds.iso", PYISIS + "db/cds", "isis-packed", 1),           # '#', CRLF
    (I2J + "cds/cds.iso", PYISIS + "db/cds", "isis-packed", 1),             # 0x1E/0x1D, CRLF
    (I2J + "cds/cds-var.iso", PYISIS + "db/cds", "isis-packed", 1),         # not wrapped
    (SAMPLE + "cds.iso", SAMPLE + "cdsffi", "ffi-aligned", 1),
    (SAMPLE + "cds.iso", PYISIS + "pycisis/tests/xcds", "isis-aligned", 1),
    (CISIS + "tests/CDS.iso", CISIS + "tests/CDS", "isis-aligned", 1),
    (ABCD + "dubcore/data/htmlgizmo.iso", ABCD + "dubcore/data/htmlgizmo", "ffi-packed", 1),
    (I2J + "LILACS1.iso", I2J + "LILACS1", "isis-packed", 1),
    (I2J + "field3/field3.iso", I2J + "field3/FIELD3", "isis-packed", 1),
    (I2J + "lilacs30/lilacs30.iso", I2J + "lilacs30/lilacs30", "isis-packed", 1),
    (ABCD + "unicode/data/unicode2.iso", ABCD + "unicode/data/unicode", "isis-packed", 1),
    (ABCD + "marcuni/data/1-37.iso", ABCD + "marcuni/data/marcuni", "isis-packed", 1),
]


ISO_IDS = ["pyisis-db-cds.iso", "isis2json-cds.iso->pyisis-db-cds",
           "isis2json-cds-var.iso->pyisis-db-cds", "pyisis-sample-cds.iso->cdsffi",
           "pyisis-sample-cds.iso->xcds", "cisis-CDS.iso", "abcd-htmlgizmo.iso",
           "isis2json-LILACS1.iso", "isis2json-field3.iso", "isis2json-lilacs30.iso",
           "abcd-unicode2.iso->unicode", "abcd-marcuni-1-37.iso->marcuni"]


@pytest.mark.parametrize("iso,base,layout,first", ISO_TWINS, ids=ISO_IDS)
def test_iso_export_matches(iso, base, layout, first):
    expected = read_iso(data_path(iso))
    with opendb(base) as db:
        assert db.layout == layout
        mfns = list(range(first, first + len(expected)))
        got = [fields_of(r) for r in db.read_many(mfns)]
        assert got == expected


def test_cdsx_iso_export():
    # The ffi-aligned CISIS example: 136 of 153 records equal the ISO export
    # exactly; in the other 17 one field value is garbled *in the .mst
    # itself* (e.g. MFN 16 tag 69 "<droughtiololow and iololow ...", bytes
    # found at offset 6762 of cds.mst), while the ISO has the clean text.
    expected = read_iso(data_path(CISIS + "wxis_src/examples/cdsx/cds.iso"))
    garbled = {16: 69, 19: 69, 37: 69, 45: 69, 46: 69, 50: 69, 57: 69, 58: 69,
               70: 69, 78: 24, 84: 71, 92: 76, 101: 76, 109: 69, 122: 69,
               129: 50, 130: 76}
    with opendb(CISIS + "wxis_src/examples/cdsx/cds") as db:
        assert (db.layout, db.info()["mstxl"]) == ("ffi-aligned", 3)
        assert len(expected) == len(db) == 153
        for rec, exp in zip(db, expected, strict=True):
            got = fields_of(rec)
            assert [t for t, _ in got] == [t for t, _ in exp]
            diff = [t for (t, v), (_, w) in zip(got, exp, strict=True) if v != w]
            assert diff == ([garbled[rec.mfn]] if rec.mfn in garbled else [])
        assert db[16].raw(69) == [b"<droughtiololow and iololow and instlow and "
                                  b"instrumeand instruments>"]


# ---------------------------------------------------------------------------
# 3. Twin databases in different layouts
# ---------------------------------------------------------------------------

CDS_PACKED = PYISIS + "db/cds"                 # isis-packed, CP850


def test_cds_packed_vs_aligned_identical():
    with opendb(CDS_PACKED) as a, opendb(SAMPLE + "cds") as b:
        assert (a.layout, b.layout) == ("isis-packed", "isis-aligned")
        assert a.mfns() == b.mfns() == list(range(1, 151))
        for ra, rb in zip(a, b, strict=True):
            assert fields_of(ra) == fields_of(rb)
            assert ra == rb


def test_cds_isis2json_is_utf8_reencoding():
    # Same records, same stored order; isis2json's copy re-encoded every
    # byte >= 0x80 as if it were Latin-1.  Decoded text is identical.
    with opendb(CDS_PACKED, encoding="latin-1") as a, \
            opendb(I2J + "cds/cds", encoding="utf-8", errors="strict") as b:
        assert a.mfns() == b.mfns() == list(range(1, 151))
        for ra, rb in zip(a, b, strict=True):
            assert [(f.tag, f.value) for f in ra.fields] == \
                   [(f.tag, f.value) for f in rb.fields]
        assert a[28].raw(24) != b[28].raw(24)
    # and the real text is CP850: undo the re-encoding
    with opendb(CDS_PACKED, encoding="cp850") as a, opendb(I2J + "cds/cds") as b:
        for ra, rb in zip(a, b, strict=True):
            assert [f.value for f in ra.fields] == \
                   [f.raw.decode("utf-8").encode("latin-1").decode("cp850")
                    for f in rb.fields]


@pytest.mark.parametrize("other,layout,mstxl,order_differs", [
    (CISIS + "tests/CDS", "isis-aligned", 6, [1, 2, 3, 4, 5, 6, 7, 8, 10]),
    (FIXTURES + "cds", "isis-aligned", 0, None),
], ids=["cisis-CDS-mstxl6", "pyisis-fixtures-cds"])
def test_cds_twins_same_fields_per_tag(other, layout, mstxl, order_differs):
    # These copies were re-saved by other programs that changed the order of
    # fields across tags; per tag, the occurrences are identical.
    with opendb(CDS_PACKED) as a, opendb(other) as b:
        assert (b.layout, b.info()["mstxl"]) == (layout, mstxl)
        assert a.mfns() == b.mfns()
        differs = []
        for ra, rb in zip(a, b, strict=True):
            assert ra.mfn == rb.mfn
            assert by_tag(fields_of(ra)) == by_tag(fields_of(rb))
            assert sorted(fields_of(ra)) == sorted(fields_of(rb))
            if fields_of(ra) != fields_of(rb):
                differs.append(ra.mfn)
        if order_differs is not None:
            assert differs == order_differs
        else:
            # pyisis re-save: all but 3 records reordered; 69 odd MFRLs
            assert [m for m in a.mfns() if m not in differs] == [29, 77, 126]
            assert sum(r.mfrl % 2 for r in b) == 69


def test_cds_winisis_copy_is_renumbered():
    # WinISIS copy: MFN 23 physically deleted and records 23..150 of the
    # original moved to MFN 24..151 (byte-identical, same stored order).
    with opendb(CDS_PACKED) as a, opendb(I2J + "cds/winisis-cds") as w:
        assert w.mfns() == [m for m in range(1, 152) if m != 23]
        assert w.info()["reccnt"] == 151
        for rw in w:
            src = rw.mfn if rw.mfn < 23 else rw.mfn - 1
            assert fields_of(rw) == fields_of(a[src])


def test_cdsffi_and_xcds_are_twins():
    with opendb(SAMPLE + "cdsffi") as f, opendb(PYISIS + "pycisis/tests/xcds") as x:
        assert (f.layout, f.info()["mstxl"]) == ("ffi-aligned", 3)
        assert (x.layout, x.info()["mstxl"]) == ("isis-aligned", 0)
        assert f.mfns() == x.mfns() == list(range(1, 157))
        for rf, rx in zip(f, x, strict=True):
            assert fields_of(rf) == fields_of(rx)
        assert f[151].fields == ((1, "Registro novo"),)
        assert f[2].raw(100) == [b"1001"]


def test_bruma_eu_te_amo_packed_vs_aligned():
    with opendb(BRUMA + "EuTeAmo", errors="strict") as p, \
            opendb(BRUMA + "ILoveYou", errors="strict") as a:
        assert (p.layout, a.layout) == ("isis-packed", "isis-aligned")
        rp, ra = p[1], a[1]
        assert fields_of(rp) == fields_of(ra)
        assert rp.tags == (1,) * 14
        assert (rp.mfrl, ra.mfrl) == (3552, 3554)
        assert rp[1][0] == "Português             Eu te amo\n  "
        assert rp[1][10].startswith("Russian  я тебя люблю")
        assert rp[1][13] == "Yorùbá  Mo nifẹẹ rẹ\n  "


# ---------------------------------------------------------------------------
# 4. Logical deletion, pending updates, physical deletion
# ---------------------------------------------------------------------------

BIBL = CPAN + "winisis/BIBL"


def test_winisis_bibl_logically_deleted_mfn3():
    with opendb(BIBL, encoding="cp850") as db:
        rec = db[3]
        assert (rec.deleted, rec.status, rec.pending, rec.new) == (True, 1, False, False)
        assert rec.offset == 2882
        assert db.xrf_entry(3) == {"raw": -12610, "state": "logically deleted",
                                   "offset": 2882, "new": False, "pending": False}
        assert rec[1] == ["00000000000003"]
        assert 3 in db
        assert [r.mfn for r in db] == [1, 2, 4, 5]
        assert db.mfns() == [1, 2, 4, 5]
        assert [r.mfn for r in db.records(deleted=True)] == [1, 2, 3, 4, 5]
        assert db.mfns(True) == [1, 2, 3, 4, 5]
        assert [r.deleted for r in db.records(deleted=True)] == \
               [False, False, True, False, False]
        assert len(db) == 4


def test_winisis_bibl_update_pending_mfn5():
    with opendb(BIBL, encoding="cp850") as db:
        rec = db[5]
        assert (rec.deleted, rec.status, rec.pending, rec.new) == (False, 0, True, False)
        assert (rec.offset, rec.back_offset, rec.mfrl, rec.locked) == (3300, 1778, 546, False)
        versions = db.versions(5)
        assert len(versions) == 2
        cur, old = versions
        assert cur == rec
        assert (old.mfn, old.offset, old.back_offset, old.mfrl) == (5, 1778, None, 514)
        assert old.locked is True             # superseded version, negative MFRL
        assert old.status == 0 and old.deleted is False
        # the update moved field 225 to the end and filled it in
        assert old.raw(225) == [b"^a"]
        assert cur.raw(225) == [b"^aMcGraw-Hill series in Psychology"]
        assert [f for f in old.fields if f.tag != 225] == \
               [f for f in cur.fields if f.tag != 225]
        assert cur[200] == ["^aPsychology^fCamille B. Wortman, Elizabeth F. "
                            "Loftus, Mary E. Marshal"]
        for mfn in (1, 2, 3, 4):
            assert len(db.versions(mfn)) == 1
            assert db[mfn].back_offset is None
        assert db[1].get(200).endswith("^fby André E. Haynal^gtranslated by Elizabeth "
                                       "Holder on the basisi of a first draft by Archie "
                                       "Hooton ; with a preface by Daniel N. Stern")


def test_abcd_servers_logically_deleted():
    with opendb(ABCD + "servers/data/servers") as db:
        for mfn in range(46, 52):
            rec = db[mfn]
            assert (rec.deleted, rec.status) == (True, 1)
            x = db.xrf_entry(mfn)
            assert x["state"] == "logically deleted" and x["raw"] < 0
            assert x["offset"] == rec.offset
        assert db[46].fields == ((1, "name of destini"),)
        assert [db[m].offset for m in range(46, 52)] == \
               [13572, 12212, 12268, 7874, 12380, 12780]
        active = [m for m in range(1, 57) if not 46 <= m <= 51]
        assert db.mfns() == active == [r.mfn for r in db]
        assert db.mfns(True) == list(range(1, 57))
        assert [r.mfn for r in db.records(deleted=True) if r.deleted] == list(range(46, 52))
        assert (db[45].pending, db[45].back_offset) == (True, 12436)
        assert [v.offset for v in db.versions(45)] == [12580, 12436]


def test_winisis_cds_physically_deleted():
    with opendb(I2J + "cds/winisis-cds") as db:
        for mfn in (23, 152, 153, 154):
            assert db.xrf_entry(mfn) == {"raw": -2048, "state": "physically deleted",
                                         "offset": -1, "new": False, "pending": False}
            with pytest.raises(pydb.NotFoundError) as exc:
                db[mfn]
            assert isinstance(exc.value, KeyError)
            assert mfn not in db
            assert db.get(mfn, "gone") == "gone"
        rec = db[151]
        assert (rec.mfn, rec.deleted, rec.offset) == (151, False, 62252)
        assert rec[24] == ["Manuel pratique des assurances sociales"]
        assert db.max_mfn == 154
        with pytest.raises(pydb.NotFoundError):
            db[155]
        with pytest.raises(pydb.NotFoundError):
            db.read_many([1, 23])


@pytest.mark.parametrize("path", [r.path for r in SOURCES_TABLE if r.nxt > 1],
                         ids=[r.path for r in SOURCES_TABLE if r.nxt > 1])
def test_back_pointer_iff_update_pending(path):
    # docs/isis-formats.md §2.4: an update appends a new version with a back
    # pointer and sets "update pending"; inversion clears both.
    with opendb(path) as db:
        pending = []
        for rec in db.records(deleted=True, skip_damaged=True):
            assert (rec.back_offset is not None) == rec.pending
            if rec.pending:
                pending.append(rec.mfn)
                versions = db.versions(rec.mfn)
                assert len(versions) == 2
                assert versions[1].mfn == rec.mfn
                assert versions[1].offset == rec.back_offset < rec.offset
        # (odds: the damaged MFN 49 is not flagged pending, so all 16 count)
        assert len(pending) == db.counts()["pending"]


def test_unimarc_history_versions():
    with opendb(ABCD + "unimarc/data/unimarc") as db:
        got = {m: [(v.offset, v.locked, v.mfrl) for v in db.versions(m)]
               for m in db.mfns() if db[m].pending}
        assert got == {
            1: [(290412, False, 416), (279362, True, 416)],
            12: [(284790, False, 1364), (250174, True, 1364)],
            14: [(283470, True, 806), (249344, True, 768)],
            18: [(284276, True, 514), (278394, True, 476)],
        }


# ---------------------------------------------------------------------------
# 5. Iteration, read_many, I/O modes, opening, subfields
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", [r.path for r in SOURCES_TABLE if r.path != ODDS],
                         ids=[r.path for r in SOURCES_TABLE if r.path != ODDS])
def test_iteration_order_and_counts(path):
    with opendb(path) as db:
        mfns = [r.mfn for r in db]
        c = db.counts()
        assert mfns == db.mfns() == sorted(set(mfns))
        assert len(mfns) == len(db) == c["active"]
        deleted = [r.mfn for r in db.records(deleted=True)]
        assert deleted == db.mfns(True)
        assert len(deleted) == c["active"] + c["logically_deleted"]
        if mfns:
            mid = mfns[len(mfns) // 2]
            assert [r.mfn for r in db.records(start=mid)] == [m for m in mfns if m >= mid]
        assert list(db.records(start=db.max_mfn + 1)) == []


def test_empty_databases():
    for rel in (ABCD + "dcdspace/data/dcdspace", CPAN + "isismarc/isismarc/pft21"):
        with opendb(rel) as db:
            assert db.max_mfn == 0 and len(db) == 0
            assert list(db) == [] and db.mfns() == [] and db.read_many([]) == []
            with pytest.raises(pydb.NotFoundError):
                db[1]


def test_read_many_equals_single_reads():
    with opendb(SAMPLE + "lilacs", encoding="latin-1") as db:
        mfns = db.mfns()
        assert len(mfns) == 3225
        many = db.read_many(mfns)
        assert [r.mfn for r in many] == mfns
        for rec in many:
            single = db[rec.mfn]
            assert fields_of(rec) == fields_of(single)
            assert (rec.offset, rec.mfrl, rec.new) == (single.offset, single.mfrl, single.new)
        assert many == list(db)
        order = [3225, 1, 1, 1700, 2]
        assert [r.mfn for r in db.read_many(order)] == order
        assert db.read_many(iter([5, 6])) == [db[5], db[6]]
    with opendb(BIBL) as db:
        recs = db.read_many([5, 3, 1])
        assert [(r.mfn, r.deleted, r.pending) for r in recs] == \
               [(5, False, True), (3, True, False), (1, False, False)]


IO_MODES = [("pread", "none"), ("mmap", "none"), ("direct", "none"), ("mmap", "mutex")]
IO_DATABASES = [PYISIS + "db/cds", CISIS + "tests/CDS", SAMPLE + "cdsffi",
                ABCD + "dubcore/data/htmlgizmo", BIBL, ABCD + "servers/data/servers",
                SAMPLE + "lilacs"]


def snapshot(db):
    out = []
    for rec in db.records(deleted=True, skip_damaged=True):
        out.append((rec.mfn, rec.deleted, rec.status, rec.new, rec.pending,
                    rec.locked, rec.offset, rec.back_offset, rec.mfrl,
                    fields_of(rec),
                    [(v.offset, v.locked, fields_of(v)) for v in db.versions(rec.mfn)]))
    return db.info()["layout"], db.counts(), out


@pytest.mark.parametrize("path", IO_DATABASES, ids=IO_DATABASES)
def test_io_modes_identical(path):
    with opendb(path, io="pread") as db:
        reference = snapshot(db)
    assert reference[2]
    for io, lock in IO_MODES:
        try:
            db = opendb(path, io=io, lock=lock)
        except pydb.UnsupportedError:
            assert io == "direct"
            continue
        with db:
            assert (db.info()["io"], db.info()["lock"]) == (io, lock)
            assert snapshot(db) == reference, (io, lock)


def test_open_by_any_name():
    base = data_path(PYISIS + "db/cds")
    # the files on disk are cds.mst / cds.xrf; extensions match in any case,
    # and any known database-file extension names the database
    names = [base, str(base) + ".mst", str(base) + ".MST", str(base) + ".xrf",
             str(base) + ".XRF", str(base) + ".ifp", base.with_suffix(".l01")]
    for name in names:
        with pydb.open(name) as db:
            assert db.info()["mst_path"].endswith("db/cds.mst")
            assert db.info()["xrf_path"].endswith("db/cds.xrf")
            assert db.path == os.fspath(name)
            assert len(db) == 150
    with pydb.open(bytes(str(base) + ".mst", "utf-8")) as db:
        assert db.max_mfn == 150
    # WinISIS names its files BIBL.mst + BIBL.XRF
    for name in ("BIBL.XRF", "BIBL.xrf", "BIBL.mst", "BIBL.MST", "BIBL"):
        with pydb.open(data_path(CPAN + "winisis/" + name)) as db:
            assert db.info()["mst_path"].endswith("winisis/BIBL.mst")
            assert db.info()["xrf_path"].endswith("winisis/BIBL.XRF")
            assert db.max_mfn == 5
    with pytest.raises(pydb.DatabaseNotFoundError):
        opendb(PYISIS + "db/nosuchdb")


def test_subfields_on_real_values():
    with opendb(PYISIS + "db/cds", encoding="cp850") as db:
        (sf,) = db[1].subfields(26)
        assert db[1][26] == ["^aParis^bUnesco^c-1965"]
        assert dict(sf) == {"a": "Paris", "b": "Unesco", "c": "-1965"}
        assert (sf.indicators, sf.text) == (None, "")
        assert pydb.parse_subfields(db[1].get(30)).items_ == [("a", "p. 211-224"),
                                                              ("b", "illus.")]
        sf = pydb.parse_subfields(db[85].get(26))
        assert db[85].get(26) == "^aParis^bUnesco Press^bIIEP^aLusaka^bUniversity of Zambia"
        assert sf["a"] == "Paris" and sf["A"] == "Paris"
        assert sf.getall("a") == ["Paris", "Lusaka"]
        assert sf.getall("b") == ["Unesco Press", "IIEP", "University of Zambia"]
        assert sf.getall("c") == []
        sf = pydb.parse_subfields(db[1].get(44))
        assert (sf.text, len(sf)) == ("Methodology of plant eco-physiology: proceedings "
                                      "of the Montpellier Symposium", 0)


def test_marc_indicators():
    with opendb(ABCD + "marc/data/marc", encoding="cp1252") as db:
        rec = db[1]
        (sf,) = rec.subfields(245)
        assert rec[245] == ["10^aPresidencialismo - Parlamentarismo^cSeminario Internacional"]
        assert sf.indicators == "10" and sf.text == ""
        assert sf["a"] == "Presidencialismo - Parlamentarismo"
        assert sf["c"] == "Seminario Internacional"
        (sf,) = rec.subfields(20)
        assert (sf.indicators, sf["a"], sf["c"]) == ("##", "8525600199", "0,01")
        assert rec.subfields(260)[0]["b"] == \
            "Fundação Centro de Formação do Servidor Público - FUNCEP"
    with opendb(ABCD + "marcuni/data/marcuni", errors="strict") as db:
        rec = db[1]
        assert rec.subfields(10)[0].indicators == "  "
        assert rec.subfields(10)[0]["a"] == "   90743819 "
        first650 = rec.subfields(650)[0]       # one character only: no indicators
        assert (first650.indicators, first650.text) == (None, "0")
        assert first650.getall("z") == ["Brazil", "Rio Grande do Sul."]
        assert rec.subfields(245)[0]["c"] == "Cláudia Maria Oliveira Simões ... [et al.]."
    with opendb(CPAN + "isismarc/BIBL", encoding="cp850") as db:
        (sf,) = db[5].subfields(200)
        assert (sf.indicators, sf["a"]) == ("1#", "Psychology")


def test_mixed_encodings_and_surrogateescape():
    # pyisis mixEncodings: the same text in CP850, Latin-1 and UTF-8
    text = "áéíóúãõêêëàÀ"
    with opendb(FIXTURES + "mixEncodings") as db:
        r1, r2, r3 = db.read_many([1, 2, 3])
        assert r3[1] == ["UTF-8=" + text]
        for rec in (r1, r2):
            value = rec.get(1)
            assert value.encode("utf-8", "surrogateescape") == rec.raw(1)[0]
        assert r1.raw(1)[0].decode("cp850") == "IBM-850=" + text
        assert r2.raw(1)[0].decode("latin-1") == "ISO8859-1=" + text
    with opendb(FIXTURES + "mixEncodings", encoding="cp850") as db:
        assert db[1][1] == ["IBM-850=" + text]
    with opendb(FIXTURES + "mixEncodings", encoding="utf-8", errors="strict") as db:
        rec = db[2]
        assert rec.raw(1) == [b"ISO8859-1=\xe1\xe9\xed\xf3\xfa\xe3\xf5\xea\xea\xeb\xe0\xc0"]
        with pytest.raises(UnicodeDecodeError):
            _ = rec.fields
