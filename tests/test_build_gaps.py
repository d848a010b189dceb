"""The bulk builder's MFN gaps (None -> physically deleted XRF entry) and
logically deleted records (STATUS 1, negated XRF pointer), used by ISO and
JSON Lines import to keep MFNs (docs/isis-formats.md §2.4, §3.2)."""

import struct

import pytest

import pydb
from pydb import _pydb

from conftest import GEOM, LAYOUTS

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = pytest.mark.sanitize_address


STATUS_OFF = {layout: g["status"] for layout, g in GEOM.items()}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mstxl", [0, 3, 6])
def test_gaps_and_deleted(tmp_path, layout, mstxl):
    recs = [[(1, b"one")], None, None, [(2, b"four" * 50)], [(3, b"five")], None,
            [(4, b"seven")]]
    n = _pydb._build(str(tmp_path / "g"), layout, mstxl, recs, True, {4, 7})
    assert n == 7
    xrf = (tmp_path / "g.xrf").read_bytes()
    raw = struct.unpack_from("<7i", xrf, 4)
    assert raw[1] == raw[2] == raw[5] == -2048 >> mstxl      # offset 0, negated
    assert raw[0] > 0 and raw[4] > 0 and raw[3] < 0 and raw[6] < 0
    mst = (tmp_path / "g.mst").read_bytes()
    with pydb.open(tmp_path / "g", io="pread") as db:
        assert db.max_mfn == 7 and db.mfns() == [1, 5]
        assert db.mfns(deleted=True) == [1, 4, 5, 7]
        assert db.counts() == {"active": 2, "logically_deleted": 2, "physically_deleted": 3,
                               "unused": 0, "new": 4, "pending": 0}
        for mfn in (4, 7):
            r = db[mfn]
            assert r.deleted and r.status == 1
            assert struct.unpack_from("<H", mst, r.offset + STATUS_OFF[layout])[0] == 1
        assert db[4].raw(2) == [b"four" * 50] and db[7].raw(4) == [b"seven"]
        assert db[1].status == 0 and not db[1].deleted
        for mfn in (2, 3, 6):
            assert db.xrf_entry(mfn)["state"] == "physically deleted"
            with pytest.raises(pydb.NotFoundError):
                db[mfn]


def test_deleted_container_errors(tmp_path):
    class Bad:
        def __contains__(self, x):
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        _pydb._build(str(tmp_path / "b"), "isis-packed", 0, [[(1, b"a")]], True, Bad())
    assert not (tmp_path / "b.mst").exists() and not (tmp_path / "b.xrf").exists()
    # None for `deleted` is the same as no argument
    assert _pydb._build(str(tmp_path / "c"), "isis-packed", 0, [None, [(1, b"a")]], True,
                        None) == 2
    with pydb.open(tmp_path / "c") as db:
        assert db.mfns() == [2] and db.counts()["physically_deleted"] == 1
