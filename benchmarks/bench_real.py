"""Real CDS/ISIS master files read whole, fields decoded: pydb against a
pure-Python reader built on ``struct`` and ``mmap`` (the fastest reading
of the format plain Python allows), in the same run.

Each file is one group; compare ``min`` of ``pydb`` and ``struct`` within
it.  The files come from the folder of real data the tests use
(``PYDB_TEST_DATA``, else ``../shared/data/isis``; see its SOURCES.md);
without it the benchmarks skip.

Run: ``python -m pytest benchmarks/bench_real.py --benchmark-only``.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import pytest

import pydb

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PYDB_TEST_DATA", REPO.parent / "shared" / "data" / "isis"))

# The largest master files of the data folder, several producers and all
# of its layouts seen (relative to DATA, without .mst).
FILES = [
    "scieloorg__pyisis/pyisis/pyisis/sample/lilacs",
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/rda/data/rda",
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/unimarc/data/unimarc",
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/marc/data/marc",
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/MAIL",
    "bireme__isis2json/fixtures/lilacs30/lilacs30",
    "scieloorg__pyisis/pyisis/pyisis/sample/cdsffi",
]

# Leaders and directory entries of the four layouts (docs/isis-formats.md
# §2.2), little-endian: the leader gives (MFN, MFRL, MFBWB, MFBWP, BASE,
# NVF, STATUS), an entry (TAG, POS, LEN).
LEADER = {
    "isis-packed": struct.Struct("<ihiHHHH"),
    "isis-aligned": struct.Struct("<ih2xiHHHH"),
    "ffi-packed": struct.Struct("<iiiHiHH"),
    "ffi-aligned": struct.Struct("<iiiH2xiHH"),
}
ENTRY = {
    "isis-packed": struct.Struct("<HHH"),
    "isis-aligned": struct.Struct("<HHH"),
    "ffi-packed": struct.Struct("<HII"),
    "ffi-aligned": struct.Struct("<H2xII"),
}
BLOCK = 512
XRF_SLOTS = 127


def struct_scan(base: str, layout: str, mstxl: int, encoding: str,
                errors: str) -> list[list[tuple[int, str, bytes]]]:
    """Every active record of the master file at `base` (the XRF's
    positive entries, MFN order) as [(tag, value str, raw bytes)]: the
    XRF pointer (docs/isis-formats.md §3.2), the leader, the directory,
    each value sliced and decoded."""
    leader, entry = LEADER[layout], ENTRY[layout]
    lsize, esize = leader.size, entry.size
    shift = 11 - mstxl
    low_mask, off_mask = (1 << shift) - 1, 0x1FF >> mstxl
    out = []
    with open(f"{base}.xrf", "rb") as fx, open(f"{base}.mst", "rb") as fm:
        xrf = fx.read()
        mst = mmap.mmap(fm.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            next_mfn = struct.unpack_from("<i", mst, 4)[0]
            for mfn in range(1, next_mfn):
                blk, slot = divmod(mfn - 1, XRF_SLOTS)
                if (blk + 1) * BLOCK > len(xrf):
                    break
                ptr = struct.unpack_from("<i", xrf, blk * BLOCK + 4 + 4 * slot)[0]
                if ptr <= 0:
                    continue
                off = ((ptr >> shift) - 1) * BLOCK + (((ptr & low_mask) & off_mask) << mstxl)
                _, _, _, _, base_, nvf, _ = leader.unpack_from(mst, off)
                data = off + base_
                fields = []
                for i in range(nvf):
                    tag, pos, n = entry.unpack_from(mst, off + lsize + i * esize)
                    raw = mst[data + pos:data + pos + n]
                    fields.append((tag, raw.decode(encoding, errors), raw))
                out.append(fields)
        finally:
            mst.close()
    return out


def pydb_scan(db) -> list[tuple]:
    """Every active record's ``fields`` (tuples of Field)."""
    return [rec.fields for rec in db]


@pytest.fixture(params=FILES, ids=lambda f: Path(f).name)
def real_db(request):
    base = DATA / request.param
    if not Path(f"{base}.mst").exists():
        pytest.skip(f"real data not found: {base}.mst (set PYDB_TEST_DATA)")
    with pydb.open(base, encoding="auto") as db:
        yield db


def _struct_args(db):
    return (str(db.path), db.layout, db.info()["mstxl"], db.encoding, db._errors)


@pytest.mark.parametrize("reader", ["pydb", "struct"])
def test_real_fields(benchmark, real_db, reader):
    benchmark.group = f"real master file {Path(str(real_db.path)).name}: fields decoded"
    if reader == "pydb":
        got = benchmark(pydb_scan, real_db)
    else:
        got = benchmark(struct_scan, *_struct_args(real_db))
    assert len(got) == len(real_db)


def test_struct_reader_reads_what_pydb_reads(real_db):
    """The pure-Python reader decodes exactly pydb's fields."""
    want = [[(f.tag, f.value, f.raw) for f in fields] for fields in pydb_scan(real_db)]
    assert struct_scan(*_struct_args(real_db)) == want
