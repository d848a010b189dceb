"""The bulk writer (csrc/build.c) against the reader and the format rules of
docs/isis-formats.md §2.3 / §10, for all four layouts."""

import errno
import struct

import pytest

import pydb
from pydb import _pydb

from conftest import GEOM, LAYOUTS, build_db

LEADER = {layout: g["leader"] for layout, g in GEOM.items()}


def sample_records(n):
    out = []
    for i in range(1, n + 1):
        rec = [(24, f"Title {i} ".encode() * (i % 7 + 1)), (70, b"Smith, J."),
               (26, b"^aParis^bUnesco^c19%02d" % (i % 100))]
        if i % 3 == 0:
            rec.append((70, "Andr\u00e9, \u00c9.".encode("utf-8")))
        if i % 5 == 0:
            rec.append((900, b""))  # zero-length field is kept
        out.append(rec)
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mstxl", [0, 3, 6])
def test_roundtrip(tmp_path, layout, mstxl):
    recs = sample_records(300)
    assert _pydb._build(str(tmp_path / "db"), layout, mstxl, recs, True) == 300
    with pydb.open(tmp_path / "db", io="pread") as db:
        assert db.layout == layout
        assert db.info()["mstxl"] == mstxl
        assert len(db) == 300 and db.max_mfn == 300
        assert db.counts() == {"active": 300, "logically_deleted": 0, "physically_deleted": 0,
                               "unused": 0, "new": 300, "pending": 0}
        got = [[(f.tag, f.raw) for f in r.fields] for r in db]
        assert got == recs
        for r in db:
            assert r.offset % (2 ** mstxl if mstxl else 2) == 0
            assert r.offset % 512 <= 512 - (LEADER[layout] - 4)   # never-split rule
            assert r.mfrl % 2 == 0 and (mstxl == 0 or r.mfrl % 2 ** mstxl == 0)
            assert r.back_offset is None and not r.deleted and r.new


@pytest.mark.parametrize("layout", LAYOUTS)
def test_leader_geometry_matches_the_table(tmp_path, layout):
    """What the writer puts on disk, read at the offsets of the test's own
    geometry table (conftest.GEOM, written from the format description):
    MFN, MFRL, BASE, NVF, STATUS and the directory (TAG, POS, LEN) of
    every record, and the field data at BASE + POS."""
    g = GEOM[layout]
    wide, narrow = ("<i", "<h") if g["ffi"] else ("<h", "<h")
    recs = sample_records(40)
    base = build_db(tmp_path / "db", layout, recs)
    mst = base.with_suffix(".mst").read_bytes()
    with pydb.open(base, io="pread") as db:
        offsets = {r.mfn: (r.offset, r.mfrl) for r in db}
    for mfn, fields in enumerate(recs, 1):
        off, mfrl = offsets[mfn]
        assert struct.unpack_from("<i", mst, off)[0] == mfn
        assert struct.unpack_from(wide, mst, off + g["mfrl"])[0] == mfrl
        assert struct.unpack_from("<i", mst, off + g["mfbwb"])[0] == 0     # no back pointer
        assert struct.unpack_from(narrow, mst, off + g["mfbwp"])[0] == 0
        nvf = struct.unpack_from(narrow, mst, off + g["nvf"])[0]
        assert nvf == len(fields)
        base_ = struct.unpack_from(wide, mst, off + g["base"])[0]
        assert base_ == g["leader"] + nvf * g["entry"]
        assert struct.unpack_from(narrow, mst, off + g["status"])[0] == 0
        for i, (tag, data) in enumerate(fields):
            e = off + g["leader"] + i * g["entry"]
            assert struct.unpack_from("<H", mst, e)[0] == tag
            pos = struct.unpack_from(wide, mst, e + g["dpos"])[0]
            ln = struct.unpack_from(wide, mst, e + g["dlen"])[0]
            assert ln == len(data)
            assert mst[off + base_ + pos:off + base_ + pos + ln] == data
            assert base_ + pos + ln <= mfrl


def test_file_shape(tmp_path):
    _pydb._build(str(tmp_path / "db"), "isis-packed", 0, sample_records(130), True)
    mst = (tmp_path / "db.mst").read_bytes()
    xrf = (tmp_path / "db.xrf").read_bytes()
    assert len(mst) % 512 == 0 and len(xrf) == 1024
    ctlmfn, nxtmfn, nxtmfb, nxtmfp = struct.unpack_from("<iiiH", mst, 0)
    assert (ctlmfn, nxtmfn) == (0, 131)
    end = (nxtmfb - 1) * 512 + nxtmfp - 1
    assert mst[end:] == b"\0" * (len(mst) - end)          # zero-filled tail
    assert struct.unpack_from("<i", xrf, 0)[0] == 1       # XRFPOS, block 1
    assert struct.unpack_from("<i", xrf, 512)[0] == -2    # last block negated
    # padding inside MFRL is blanks: record 1 has odd content length?
    with pydb.open(tmp_path / "db") as db:
        r = db[1]
        content = LEADER["isis-packed"] + 6 * len(r) + sum(len(f.raw) for f in r.fields)
        assert mst[r.offset + content:r.offset + r.mfrl] == b" " * (r.mfrl - content)


def test_too_large_for_isis(tmp_path):
    big = [[(10, b"x" * 40000)]]
    with pytest.raises(pydb.RecordTooLargeError, match="32767.*FFI"):
        _pydb._build(str(tmp_path / "a"), "isis-packed", 0, big, True)
    assert not (tmp_path / "a.mst").exists()   # partial files removed
    assert _pydb._build(str(tmp_path / "b"), "ffi-packed", 0, big, True) == 1
    with pydb.open(tmp_path / "b") as db:
        assert db[1].raw(10) == [b"x" * 40000]


def test_existing_files_are_not_overwritten(tmp_path):
    _pydb._build(str(tmp_path / "db"), "isis-packed", 0, [[(1, b"a")]], True)
    before = (tmp_path / "db.mst").read_bytes()
    with pytest.raises(pydb.DiskError) as exc:
        _pydb._build(str(tmp_path / "db"), "isis-packed", 0, [[(1, b"b")]], True)
    assert exc.value.errno == errno.EEXIST and exc.value.filename.endswith("db.mst")
    assert (tmp_path / "db.mst").read_bytes() == before


def test_empty_database(tmp_path):
    _pydb._build(str(tmp_path / "e"), "isis-aligned", 0, [], True)
    with pydb.open(tmp_path / "e") as db:
        assert len(db) == 0 and db.max_mfn == 0 and list(db) == []
        with pytest.raises(pydb.NotFoundError):
            db[1]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown layout"):
        _pydb._build(str(tmp_path / "x"), "isis-wide", 0, [], True)
    with pytest.raises(TypeError):
        _pydb._build(str(tmp_path / "y"), "isis-packed", 0, [[(1, "not bytes")]], True)
    assert not (tmp_path / "y.mst").exists()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mstxl", [0, 3])
def test_record_size_is_what_the_builder_writes(tmp_path, layout, mstxl):
    """_pydb._record_size (the check ISO/JSON Lines import makes before a
    batch) gives the MFRL the builder writes, and the GEOM table's rule
    (leader + entries + data, rounded up to 2 or 2^MSTXL)."""
    records = [[(1, b"x")], [(24, b"A title"), (70, b"Smith, J.")] * 3, []]
    base = build_db(tmp_path / "db", layout, records, mstxl=mstxl)
    align = 2 ** mstxl if mstxl else 2
    with pydb.open(base) as db:
        for mfn, fields in enumerate(records, 1):
            size = _pydb._record_size(layout, mstxl, fields, mfn)
            assert db[mfn].mfrl == size
            raw = GEOM[layout]["leader"] + GEOM[layout]["entry"] * len(fields) \
                + sum(len(v) for _, v in fields)
            assert size == -(-raw // align) * align


def test_record_size_refuses_what_the_layout_cannot_hold():
    big = [(1, b"x" * 32760)]
    with pytest.raises(pydb.RecordTooLargeError, match="MFN 9 needs 32784 bytes"):
        _pydb._record_size("isis-packed", 0, big, 9)
    assert _pydb._record_size("ffi-packed", 0, big) == 22 + 10 + 32760
    with pytest.raises(ValueError):
        _pydb._record_size("isis-packed", 7, big)
    with pytest.raises(ValueError):
        _pydb._record_size("nope", 0, big)
