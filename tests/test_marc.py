"""MARC records through a database (docs/isis-formats.md §7.3): the leader
kept in fields 3005-3019 on import and written back on export (byte for
byte for pymarc's test files), the leader of CDS/ISIS records exported as
MARC, 80-column MARC, ABCD's MARC databases, and the pymarc bridge
(pydb/marc.py) against pymarc reading the same files."""

import io
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pydb
from pydb import iso2709
from pydb.__main__ import main

from conftest import data_path, hypothesis_examples

PYMARC = "edsu__pymarc/test/"
ABCD = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/"
# pymarc's well-formed test files (alphatag.dat has an alphanumeric tag,
# which has no ISIS tag; bad_records.mrc is broken on purpose)
SOUND = ("marc.dat", "test.dat", "one.dat", "diacritic.dat", "marc8.dat",
         "utf8_with_leader_flag.dat", "utf8_without_leader_flag.dat")
LEADER_TAGS = [3005, 3006, 3007, 3008, 3009, 3017, 3018, 3019]


def imported(tmp_path, name):
    """pymarc's test file `name` imported into a new database; its path."""
    base = tmp_path / name.replace(".", "_")
    rep = pydb.import_iso(data_path(PYMARC + name), base)
    assert rep.errors == [] and rep.repaired == 0
    return base


def leader_positions(leader):
    """The values the leader fields hold for a leader (bytes)."""
    return [(3000 + p, b"#" if leader[p:p + 1] == b" " else leader[p:p + 1])
            for p in (5, 6, 7, 8, 9, 17, 18, 19)]


# ---------------------------------------------------------------- the leader

def test_import_keeps_the_leader_in_fields(isis_data, tmp_path):
    base = imported(tmp_path, "marc.dat")
    src = list(iso2709.read(data_path(PYMARC + "marc.dat")))
    with pydb.open(base) as db:
        assert len(db) == 20
        first = db[1]
        assert [(f.tag, f.raw) for f in first.fields[:9]] == [
            (3005, b"c"), (3006, b"a"), (3007, b"m"), (3008, b"#"), (3009, b"#"),
            (3017, b"4"), (3018, b"a"), (3019, b"#"), (1, b"11778504")]
        assert src[0].leader == b"01060cam  22002894a 4500"
        for rec, iso in zip(db, src, strict=True):
            got = [(f.tag, f.raw) for f in rec.fields]
            assert got == leader_positions(iso.leader) + iso.fields


@pytest.mark.parametrize("name", SOUND)
def test_marc_file_exports_byte_identical(isis_data, tmp_path, name):
    """Import then export in the MARC flavour gives the file back."""
    base = imported(tmp_path, name)
    out = tmp_path / "out.mrc"
    rep = pydb.export_iso(base, out, "marc")
    assert rep.errors == []
    assert out.read_bytes() == data_path(PYMARC + name).read_bytes()


def test_import_into_existing_database_keeps_leaders(isis_data, tmp_path):
    """The append path (existing database, transactions) stores the leader
    fields too: two imports of a file export as the file twice."""
    base = imported(tmp_path, "test.dat")
    rep = pydb.import_iso(data_path(PYMARC + "test.dat"), base)
    assert rep.records == 10 and rep.max_mfn == 20 and rep.errors == []
    out = tmp_path / "twice.mrc"
    pydb.export_iso(base, out, "marc")
    assert out.read_bytes() == data_path(PYMARC + "test.dat").read_bytes() * 2


def test_mfn_tag_with_leader_fields(isis_data, tmp_path):
    """MFNs carried in a field and the leader in fields travel together."""
    base = imported(tmp_path, "test.dat")
    pydb.export_iso(base, tmp_path / "m.mrc", "marc", mfn_tag=999)
    rep = pydb.import_iso(tmp_path / "m.mrc", tmp_path / "again", mfn_tag=999)
    assert rep.records == 10 and rep.errors == []
    with pydb.open(base) as a, pydb.open(tmp_path / "again") as b:
        assert [r for r in a] == [r for r in b]


def test_alphanumeric_tag_is_a_record_error(isis_data, tmp_path):
    rep = pydb.import_iso(data_path(PYMARC + "alphatag.dat"), tmp_path / "a")
    assert rep.records == 0
    assert [(e.number, e.reason) for e in rep.errors] == [
        (1, "tag 'CAT' is not an ISIS tag (1..65535)")]


def test_leader_tag_none_and_own_fields(isis_data, tmp_path):
    src = data_path(PYMARC + "one.dat")
    pydb.import_iso(src, tmp_path / "n", leader_tag=None)
    with pydb.open(tmp_path / "n") as db:
        assert not set(db[1].tags) & set(LEADER_TAGS)
        assert db[1].tags[0] == 1
    # exported without leader fields, the record gets the default leader
    # (position 9 "a": the database, all ASCII, reads as UTF-8); its
    # values do begin with indicators, which "present" declares
    out = io.BytesIO()
    pydb.export_iso(tmp_path / "n", out, "marc", indicators="present")
    assert out.getvalue()[5:24] == b"n   a2200241   4500"
    assert out.getvalue()[24:] == src.read_bytes()[24:]
    # another base: fields 1005..1019
    pydb.import_iso(src, tmp_path / "k", leader_tag=1000)
    with pydb.open(tmp_path / "k") as db:
        assert [(f.tag, f.raw) for f in db[1].fields[:8]] == [
            (1005, b"c"), (1006, b"a"), (1007, b"m"), (1008, b"#"), (1009, b"#"),
            (1017, b"4"), (1018, b"a"), (1019, b"#")]
    out = io.BytesIO()
    pydb.export_iso(tmp_path / "k", out, "marc", leader_tag=1000)
    assert out.getvalue() == src.read_bytes()


def test_record_with_leader_fields_keeps_its_own(isis_data, tmp_path):
    """A MARC record whose directory already names a leader field (pydb
    writes tags > 999 with the implementation-defined part) keeps it."""
    buf = io.BytesIO()
    iso2709.write(buf, [[(3005, b"p"), (245, b"10^aTitle")]], "marc", leader_tag=None,
                  indicators="present")
    assert buf.getvalue()[10:12] == b"22"
    pydb.import_iso(io.BytesIO(buf.getvalue()), tmp_path / "own")
    with pydb.open(tmp_path / "own") as db:
        assert [(f.tag, f.raw) for f in db[1].fields] == [(3005, b"p"), (245, b"10^aTitle")]


def test_leader_field_errors(tmp_path):
    recs = [[(3005, b"c"), (3005, b"n"), (245, b"10^aA")],
            [(3008, b"0741s1987"), (245, b"10^aB")],
            [(3006, b""), (245, b"10^aC")],
            [(3007, "\u00e9"), (245, b"10^aD")],
            [(3005, b"#"), (3009, b"a"), (245, b"10^aE")],
            [(3017, "\u20ac"), (245, b"10^aF")]]
    buf = io.BytesIO()
    rep = iso2709.write(buf, recs, "marc", on_error="skip")
    assert rep.records == 1
    assert [(e.number, e.reason) for e in rep.errors] == [
        (1, "leader field 3005 occurs more than once (it holds leader position 5)"),
        (2, "leader field 3008 holds '0741s1987', not the one ASCII character of leader "
            "position 8"),
        (3, "leader field 3006 holds '', not the one ASCII character of leader position 6"),
        (4, "leader field 3007 holds '\u00c3\u00a9', not the one ASCII character of leader "
            "position 7"),
        (6, "leader field 3017 holds '\u00e2\\x82\u00ac', not the one ASCII character of "
            "leader position 17")]
    (rec,) = iso2709.read(io.BytesIO(buf.getvalue()))
    assert rec.leader == b"00044    a2200037   4500" and rec.fields == [(245, b"10^aE")]
    with pytest.raises(pydb.IsoRecordError, match="record 1: leader field 3008"):
        iso2709.write(io.BytesIO(), recs[1:], "marc")
    for bad in (0, True, 65517, "3000"):
        with pytest.raises(ValueError, match="leader_tag must be None or an int"):
            iso2709.write(io.BytesIO(), [], "marc", leader_tag=bad)
        with pytest.raises(ValueError, match="leader_tag must be None or an int"):
            pydb.import_iso(io.BytesIO(b""), tmp_path / "x", leader_tag=bad)
    with pytest.raises(ValueError, match="indicators must be"):
        iso2709.write(io.BytesIO(), [], "marc", indicators="yes")


def test_deleted_record_status(tmp_path):
    with pydb.create(tmp_path / "d") as db:
        pass
    with pydb.open(tmp_path / "d", readonly=False) as db:
        m = db.append([(3005, b"c"), (3006, b"a"), (245, b"10^aGone")])
        db.delete(m)
    out = io.BytesIO()
    pydb.export_iso(tmp_path / "d", out, "marc", deleted=True, encoding="utf-8")
    assert out.getvalue()[:24] == b"00047da  a2200037   4500"


# ------------------------------------------------ CDS/ISIS records as MARC

def test_isis_records_as_marc_tell_the_truth(isis_data, tmp_path):
    src = data_path("bireme__isis2json/fixtures/cds/cds")
    with pydb.open(src) as db:
        first = [(f.tag, f.raw) for f in db[1].fields]
    for mode, count in (("auto", b"0"), ("add", b"2"), ("present", b"2")):
        out = tmp_path / f"{mode}.mrc"
        rep = pydb.export_iso(src, out, "marc", indicators=mode)
        assert rep.records == 150 and rep.errors == []
        recs = list(iso2709.read(out))
        # the fixture's values are UTF-8 (detected): position 9 "a"
        assert {r.leader[5:12] for r in recs} == {b"n   a" + count + b"2"}
        want = first if mode != "add" else [
            (t, v if t < 10 else b"  " + v) for t, v in first]
        assert recs[0].fields == want


def test_isis_records_read_by_pymarc(isis_data, tmp_path):
    """With indicators="add", pymarc reads every ISIS subfield with blank
    indicators; the values are the ISIS values with ^x split off.  Text
    before a field's first subfield has no place in MARC: pymarc drops it,
    and refuses a record where it is not ASCII."""
    pymarc = pytest.importorskip("pymarc")
    src = data_path("bireme__isis2json/fixtures/cds/cds")
    out = tmp_path / "add.mrc"
    pydb.export_iso(src, out, "marc", indicators="add", encoding="utf-8")
    with open(out, "rb") as f, pydb.open(src) as db:
        got = list(pymarc.MARCReader(f))
        assert len(got) == len(db) == 150
        lead_8bit = [not all(v.split(b"^")[0].isascii() for _, v in
                             ((f.tag, f.raw) for f in rec.fields)) for rec in db]
        assert [p is None for p in got] == lead_8bit and sum(lead_8bit) == 35
        for prec, rec in zip(got, db, strict=True):
            if prec is None:
                continue
            assert [f.tag for f in prec.fields] == [f"{t:03d}" for t in rec.tags]
            for pf, value in zip(prec.fields, (f.raw for f in rec.fields), strict=True):
                assert tuple(pf.indicators) == (" ", " ")
                parts = value.decode("utf-8").split("^")
                assert [(s.code, s.value) for s in pf.subfields] == [
                    (p[0], p[1:]) for p in parts[1:] if p]


# ------------------------------------------------------------- line width

def test_line_width_80_reads_back(isis_data, tmp_path):
    src = data_path(PYMARC + "marc.dat")
    base = imported(tmp_path, "marc.dat")
    out = tmp_path / "w.mrc"
    pydb.export_iso(base, out, "marc", line_width=80)
    data = out.read_bytes()
    lines = data.split(b"\n")
    assert lines[-1] == b"" and all(len(x) <= 80 for x in lines)
    assert data.replace(b"\n", b"") == src.read_bytes()
    r = iso2709.read(out, subfields="raw")
    got = [(x.leader, x.fields) for x in r]
    assert got == [(x.leader, x.fields) for x in iso2709.read(src, subfields="raw")]
    assert r.repaired == 0 and r.errors == []
    # and through a database again
    pydb.import_iso(out, tmp_path / "again")
    pydb.export_iso(tmp_path / "again", tmp_path / "flat.mrc", "marc")
    assert (tmp_path / "flat.mrc").read_bytes() == src.read_bytes()
    crlf = io.BytesIO()
    pydb.export_iso(base, crlf, "marc", line_width=80, line_ending="\r\n")
    assert crlf.getvalue() == data.replace(b"\n", b"\r\n")
    for bad in (-1, 1.5, True, 1, 23):
        with pytest.raises(ValueError, match="line_width must be"):
            pydb.export_iso(base, io.BytesIO(), "marc", line_width=bad)


def test_cli_line_width(isis_data, tmp_path):
    base = imported(tmp_path, "one.dat")
    out = tmp_path / "one.mrc"
    assert main(["export", str(base), str(out), "--flavour", "marc",
                 "--line-width", "80"]) == 0
    src = data_path(PYMARC + "one.dat").read_bytes()
    want = b"\n".join(src[i:i + 80] for i in range(0, len(src), 80)) + b"\n"
    assert out.read_bytes() == want


# -------------------------------------------------- ABCD's MARC databases

@pytest.mark.parametrize("name", ["rda/data/rda", "unimarc/data/unimarc"])
def test_abcd_leader_fields_exported(isis_data, name):
    """ABCD keeps the leader in 3005-3019; every exported leader says what
    the record's fields say (a missing position blank, but position 9 "a"
    in a UTF-8 database)."""
    src = data_path(ABCD + name)
    out = io.BytesIO()
    rep = pydb.export_iso(src, out, "marc")
    recs = list(iso2709.read(io.BytesIO(out.getvalue()), subfields="raw"))
    with pydb.open(src, encoding="auto") as db:
        assert rep.errors == [] and len(recs) == len(db)
        for rec, iso in zip(db, recs, strict=True):
            for p in (5, 6, 7, 8, 9, 17, 18, 19):
                v = rec.raw(3000 + p)
                blank = b"a" if p == 9 and db.encoding == "utf-8" else b" "
                want = blank if not v or v[0] == b"#" else v[0]
                assert iso.leader[p:p + 1] == want
            assert iso.leader[10:12] == b"22"
            assert iso.fields == [(f.tag, f.raw.replace(b"^", b"\x1f")) for f in rec.fields
                                  if f.tag not in LEADER_TAGS]
    if name.startswith("rda"):
        assert recs[0].leader == b"01146nam0a22003137 04500"


def test_abcd_marc_database_bad_leader_fields(isis_data):
    """ABCD's sample `marc` database holds a 38-character 3008 (a
    misplaced 008) in each record: no record has a leader to write."""
    src = data_path(ABCD + "marc/data/marc")
    rep = pydb.export_iso(src, io.BytesIO(), "marc")
    assert rep.records == 0 and len(rep.errors) == 298
    assert str(rep.errors[0]).endswith(
        "record 1, MFN 1: leader field 3008 holds '0741s1987###########'... (38 "
        "characters), not the one "
        "ASCII character of leader position 8")
    rep = pydb.export_iso(src, io.BytesIO(), "marc", leader_tag=None, indicators="present")
    assert rep.records == 298 and rep.errors == []


# ----------------------------------------------------------------- pymarc

def pymarc_records(pymarc, name):
    with open(data_path(PYMARC + name), "rb") as f:
        return list(pymarc.MARCReader(f))


def same(a, b):
    """Leader, control fields, indicators, subfield codes and values."""
    return str(a.leader) == str(b.leader) and a.as_dict() == b.as_dict()


@pytest.mark.parametrize("name", SOUND)
def test_to_pymarc_equals_pymarc_reading_the_file(isis_data, tmp_path, name):
    pymarc = pytest.importorskip("pymarc")
    want = pymarc_records(pymarc, name)
    base = imported(tmp_path, name)
    with pydb.open(base) as db:
        got = [r.to_pymarc() for r in db]
        assert [pydb.to_pymarc(r).as_dict() for r in db] == [r.as_dict() for r in got]
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert str(a.leader) == str(b.leader)
        assert [(f.tag, f.data) for f in a.fields if f.is_control_field()] == \
            [(f.tag, f.data) for f in b.fields if f.is_control_field()]
        assert [(f.tag, tuple(f.indicators), [(s.code, s.value) for s in f.subfields])
                for f in a.fields if not f.is_control_field()] == \
            [(f.tag, tuple(f.indicators), [(s.code, s.value) for s in f.subfields])
             for f in b.fields if not f.is_control_field()]
        assert same(a, b)


def test_to_pymarc_of_iso_records(isis_data):
    pymarc = pytest.importorskip("pymarc")
    want = pymarc_records(pymarc, "test.dat")
    got = [pydb.to_pymarc(r) for r in iso2709.read(data_path(PYMARC + "test.dat"))]
    assert all(same(a, b) for a, b in zip(got, want, strict=True)) and len(got) == 10


@pytest.mark.parametrize("name", SOUND)
def test_from_pymarc_round_trip(isis_data, tmp_path, name):
    """pymarc records appended to a database come back from to_pymarc with
    the same fields; the leader differs only in its length (0-4, values
    now UTF-8) and position 9, which says UTF-8 now."""
    pymarc = pytest.importorskip("pymarc")
    want = pymarc_records(pymarc, name)
    with pydb.create(tmp_path / "p"):
        pass
    with pydb.open(tmp_path / "p", readonly=False) as db:
        mfns = pydb.append_pymarc(db, want)
        assert mfns == list(range(1, len(want) + 1))
        got = [db[m].to_pymarc() for m in mfns]
    for a, b in zip(got, want, strict=True):
        la, lb = str(a.leader), str(b.leader)
        assert la[5:9] + la[10:] == lb[5:9] + lb[10:] and la[9] == "a"
        assert a.as_dict()["fields"] == b.as_dict()["fields"]
    if name in ("utf8_with_leader_flag.dat", "marc.dat", "one.dat"):
        # UTF-8 (or ASCII) files: the database holds the file's bytes
        with pydb.open(tmp_path / "p") as db, pydb.open(imported(tmp_path, name)) as ref:
            for x, y in zip(db, ref, strict=True):
                fx = [(f.tag, f.raw) for f in x.fields if f.tag not in LEADER_TAGS]
                fy = [(f.tag, f.raw) for f in y.fields if f.tag not in LEADER_TAGS]
                assert fx == fy


def test_from_pymarc_fields(isis_data):
    pymarc = pytest.importorskip("pymarc")
    (rec,) = pymarc_records(pymarc, "one.dat")
    fields = pydb.from_pymarc(rec)
    assert fields[:9] == [(3005, b"c"), (3006, b"a"), (3007, b"m"), (3008, b"#"),
                          (3009, b"a"), (3017, b"4"), (3018, b"a"), (3019, b"#"),
                          (1, b"fol05731351 ")]
    assert fields[9:13] == [(3, b"IMchF"), (5, b"20000613133448.0"),
                            (8, b"000107s2000    nyua          001 0 eng  "),
                            (10, b"  ^a   00020737 ")]
    assert (245, b"10^aActivePerl with ASP and ADO /^cTobias Martinsson.") in fields
    assert pydb.from_pymarc(rec, leader_tag=None) == fields[8:]
    assert pydb.from_pymarc(rec, encoding="latin-1")[4] == (3009, b"#")


def test_from_pymarc_refuses_what_isis_cannot_store(isis_data, tmp_path):
    pymarc = pytest.importorskip("pymarc")
    (alpha,) = pymarc_records(pymarc, "alphatag.dat")
    with pytest.raises(pydb.IsoRecordError) as e:
        pydb.from_pymarc(alpha)
    assert e.value.reason == ("field 035 subfield 'a' holds '^', the CDS/ISIS subfield "
                              "delimiter")
    # append_pymarc: one transaction, rolled back at the bad record
    with pydb.create(tmp_path / "r"):
        pass
    with pydb.open(tmp_path / "r", readonly=False) as db:
        with pytest.raises(pydb.IsoRecordError, match="field 035"):
            pydb.append_pymarc(db, pymarc_records(pymarc, "one.dat") + [alpha])
        assert len(db) == 0 and db.max_mfn == 0
    alpha.remove_fields("035")
    with pytest.raises(pydb.IsoRecordError) as e:
        pydb.from_pymarc(alpha)
    assert e.value.reason == "tag 'CAT' has no CDS/ISIS tag (MARC tags 001-999 only)"
    with pytest.raises(TypeError, match="needs a pymarc.Record, not NoneType"):
        pydb.from_pymarc(None)
    rec = pymarc.Record()
    rec.add_field(pymarc.Field(tag="245", indicators=pymarc.Indicators("1", "0"),
                               subfields=[pymarc.Subfield("a", "x^y")]))
    with pytest.raises(pydb.IsoRecordError) as e:
        pydb.from_pymarc(rec)
    assert e.value.reason == "field 245 subfield 'a' holds '^', the CDS/ISIS subfield delimiter"
    rec.leader = "00000nam"
    rec.fields[0].subfields[0] = pymarc.Subfield("a", "x")
    with pytest.raises(pydb.IsoRecordError, match="the leader has 8 characters, not 24"):
        pydb.from_pymarc(rec)
    rec.leader = pymarc.Leader("00000nam a2200000   4500")
    rec.fields[0].subfields[0] = pymarc.Subfield("a", "x \u20ac")
    with pytest.raises(pydb.IsoRecordError) as e:
        pydb.from_pymarc(rec, encoding="latin-1")
    assert e.value.reason == "field 245 subfield 'a': latin-1 cannot encode '\u20ac'"


def test_to_pymarc_records_without_leader(tmp_path):
    pymarc = pytest.importorskip("pymarc")
    isis = [(1, b"42"), (24, b"^aTitle^bmore"), (70, b"Author")]
    rec = pydb.to_pymarc(isis)
    assert str(rec.leader) == "00090n   a2200061   4500"
    assert [(f.tag, f.data if f.is_control_field() else
             (tuple(f.indicators), [(s.code, s.value) for s in f.subfields]))
            for f in rec.fields] == [
        ("001", "42"), ("024", ((" ", " "), [("a", "Title"), ("b", "more")])),
        ("070", ((" ", " "), []))]
    rec = pydb.to_pymarc([(245, b"10^aTitle")], indicators="present", utf8=False)
    assert str(rec.leader)[5:12] == "n    22"
    assert tuple(rec.fields[0].indicators) == ("1", "0")
    with pytest.raises(pydb.IsoRecordError, match="tag 1000 is not a MARC tag"):
        pydb.to_pymarc([(1000, b"x")])
    with pytest.raises(pydb.IsoRecordError, match="leader field 3005 occurs more than once"):
        pydb.to_pymarc([(3005, b"n"), (3005, b"c"), (245, b"10^aT")])
    with pytest.raises(pydb.IsoRecordError, match="pymarc cannot decode the record"):
        pydb.to_pymarc([(3009, b"a"), (245, b"10^a\xff")])
    rec = pydb.to_pymarc([(3005, b"n"), (3006, b"a")])
    assert str(rec.leader) == "00026na  a2200025   4500" and rec.fields == []
    with pytest.raises(ValueError, match="indicators must be"):
        pydb.to_pymarc([], indicators="no")
    with pytest.raises(ValueError, match="leader_tag must be None or an int"):
        pydb.to_pymarc([], leader_tag=70000)
    with pytest.raises(ValueError, match="leader_tag must be None or an int"):
        pydb.from_pymarc(pymarc.Record(), leader_tag=-1)


def test_bridge_without_pymarc(monkeypatch):
    """Without pymarc the bridge says how to get it; pydb imports fine."""
    monkeypatch.setitem(sys.modules, "pymarc", None)
    for call in (lambda: pydb.to_pymarc([(245, b"10^aT")]), lambda: pydb.from_pymarc(None)):
        with pytest.raises(ImportError, match=r"pip install 'pydb\[marc\]'"):
            call()


LEADER_CHARS = st.sampled_from([chr(c) for c in range(0x20, 0x7F) if chr(c) != "#"])
marc_value = st.binary(max_size=60).filter(lambda v: not any(c in v for c in b"\x1d\x1e\x1f^"))


@settings(max_examples=hypothesis_examples(100), deadline=None)
@given(st.lists(LEADER_CHARS, min_size=8, max_size=8),
       st.lists(st.tuples(st.integers(1, 999), marc_value), max_size=8))
def test_random_leaders_travel_in_fields(chars, fields):
    """Any leader whose chosen positions are printable ASCII (not '#')
    comes back from its fields: the leader positions, indicator count 2
    and the fields themselves."""
    leader = bytearray(b"00000" + b"x" * 19)
    for p, c in zip((5, 6, 7, 8, 9, 17, 18, 19), chars, strict=True):
        leader[p] = ord(c)
    leader[10:12] = b"22"
    stored = iso2709.leader_fields(bytes(leader)) + fields
    assert [t for t, _ in stored[:8]] == LEADER_TAGS
    buf = io.BytesIO()
    iso2709.write(buf, [stored], "marc")
    (rec,) = iso2709.read(io.BytesIO(buf.getvalue()))
    assert rec.fields == fields and rec.leader[10:12] == b"22"
    for p in (5, 6, 7, 8, 9, 17, 18, 19):
        assert rec.leader[p] == leader[p]
    assert iso2709.leader_fields(rec.leader) == stored[:8]


def test_export_marc_leader_says_utf8_for_a_utf8_database(isis_data, tmp_path, capsys):
    """Leader position 9 of a MARC export follows the database's encoding
    (detected when not given), as Record.to_pymarc() does: ABCD's rda
    sample is UTF-8 and has no leader field for position 9 ("Nicolò",
    "E♭ major" were read as MARC-8 before); a cp850 database gets a blank."""
    rda = data_path(ABCD + "rda/data/rda")
    out = tmp_path / "rda.mrc"
    assert main(["export", "--flavour", "marc", "--no-progress", str(rda), str(out)]) == 0
    records = list(iso2709.read(out))
    assert len(records) == 1148 and {r.leader[9:10] for r in records} == {b"a"}
    with pydb.open(rda, encoding="auto") as db:
        assert db.encoding == "utf-8"
        pydb.export_iso(db, tmp_path / "api.mrc", "marc")
        assert (tmp_path / "api.mrc").read_bytes() == out.read_bytes()
        assert {r.to_pymarc().leader[9] for r in db} == {"a"}
    pydb.export_iso(rda, tmp_path / "path.mrc", "marc")    # a path: detected
    assert (tmp_path / "path.mrc").read_bytes() == out.read_bytes()
    with pydb.create(tmp_path / "dos", encoding="cp850") as db:
        db.append([(245, "^aCaf\u00e9")])
        pydb.export_iso(db, tmp_path / "dos.mrc", "marc")
        pydb.export_iso(db, tmp_path / "said.mrc", "marc", encoding="utf-8")
    assert [r.leader[9:10] for r in iso2709.read(tmp_path / "dos.mrc")] == [b" "]
    assert [r.leader[9:10] for r in iso2709.read(tmp_path / "said.mrc")] == [b"a"]
