"""Memory bounded by the input (issue 14, Build 4; docs/fuzzing.md §5):
a file that claims huge counts -- 100 M postings in a native segment or an
ISIS .ifp, 65535 fields or a 2 GiB record in a master file, a 99999-byte
directory in an ISO 2709 record, tens of thousands of keys from one record
-- must give the clear error (CorruptionError / IsoRecordError with file,
offset and reason) or its result, with memory in proportion to the bytes
actually present, never to the count claimed.

Each case runs in a fresh interpreter that reports the growth of its peak
resident set (resource.getrusage ru_maxrss) across the operation, so that
the peak of one case does not hide another's; the bound (GROWTH_LIMIT) is
far below what the claimed counts would take (100 M postings of 16 bytes
are 1.6 GB).  Real ISIS files come from PYDB_TEST_DATA (skipped without).
"""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import pydb

from conftest import GEOM, REPO, data_path, offset_of, patch_file

sys.path.insert(0, str(REPO / "fuzz"))
import regressions  # noqa: E402

GROWTH_LIMIT_KIB = 64 * 1024

# Run by the child: SETUP prepares, then the peak RSS is read, OP runs
# (its value or the pydb.Error it raises is the result), and the peak is
# read again.
CHILD = """
import json, resource, sys
import pydb
args = json.loads(sys.argv[1])
{setup}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    out = {{"value": (lambda: {op})()}}
except pydb.Error as e:
    out = {{"error": type(e).__name__, "filename": getattr(e, "filename", None),
            "offset": getattr(e, "offset", None), "reason": getattr(e, "reason", None)}}
out["grew_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps(out))
"""


def bounded(op: str, setup: str = "", **args) -> dict:
    """Run `op` (an expression) after `setup` in a fresh interpreter with
    `args` as the dict `args`; its outcome and peak RSS growth (KiB), and
    assert the growth is within GROWTH_LIMIT_KIB."""
    code = CHILD.format(setup=setup, op=op)
    p = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True,
                       text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["grew_kib"] < GROWTH_LIMIT_KIB, out
    return out


def test_native_posting_count_huge(tmp_path):
    """A segment's dictionary says APPLE has 100 M postings; its list holds
    one (4 bytes).  Refused before anything is allocated for the list:
    pydb__ncur_next checks count <= posting bytes."""
    base = regressions.fruit_index(tmp_path)
    regressions.posting_count_huge(base, 10 ** 8)
    seg = regressions.segments(base)[-1]
    for op in ("ix.postings('APPLE')", "list(ix.terms())", "len(ix.search('APPLE'))"):
        out = bounded(op, "ix = pydb.open_index(args['base'])", base=str(base))
        assert out["error"] == "CorruptionError", out
        assert out["filename"] == str(seg)
        assert out["reason"] == "dictionary: posting list out of range"
        # the entry's end: after shared, length, APPLE, the 4-byte count
        # and the posting-bytes varint
        assert out["offset"] == regressions.first_entry(seg.read_bytes(), b"APPLE") + 2 + 5 + 4 + 1


def test_native_tombstone_mfn_huge(tmp_path):
    """A tombstone of MFN 2^31 - 1: no table of 2^31 entries (8 GiB), the
    index reads on (nidx_handle.h, NIDX_NEWEST_SLACK)."""
    base = regressions.fruit_index(tmp_path, commits=2)
    regressions.tombstone_max_mfn(base)
    out = bounded("[tuple(p) for p in ix.postings('APPLE')]",
                  "ix = pydb.open_index(args['base'])", base=str(base))
    assert out["value"] == [[1, 24, 1, 1]]


ISIS_SAMPLE = "scieloorg__pyisis/pyisis/pyisis/sample/cds"   # classic, aligned


def test_isis_ifp_posting_count_huge(tmp_path):
    """The first posting list of a real .ifp claims IFPTOTP = 100 M (the
    file holds 8 bytes per posting, a few KiB in all): CorruptionError at
    the list's header, nothing allocated for 100 M postings."""
    src = data_path(ISIS_SAMPLE)
    if not src.parent.is_dir():
        pytest.skip(f"real CDS/ISIS data not found at {src.parent}")
    for p in src.parent.iterdir():
        if p.stem.lower() == "cds" and p.suffix.lower()[1:] in {"cnt", "n01", "n02", "l01",
                                                                 "l02", "ifp"}:
            (tmp_path / f"cds{p.suffix.lower()}").write_bytes(p.read_bytes())
    ifp = tmp_path / "cds.ifp"
    # docs/isis-formats.md §4.5: the first list at block 1 word 2, its
    # header NXTB NXTP TOTP SEGP SEGC: TOTP at word 4
    patch_file(ifp, 4 + 4 * 4, struct.pack("<i", 10 ** 8))
    setup = ("from pydb.index import Index\n"
             "def run():\n"
             "    with Index.open_isis(args['base']) as ix:\n"
             "        return [len(ix.postings(t.key)) for t in ix.terms()]\n")
    out = bounded("run()", setup, base=str(tmp_path / "cds"))
    assert out["error"] == "CorruptionError", out
    assert out["filename"] == str(ifp)
    assert out["offset"] == 4 + 4 * 2
    assert "TOTP 100000000" in out["reason"] and "beyond the file" in out["reason"]


def two_records(tmp_path: Path, layout: str) -> tuple[Path, int, dict]:
    """A database of two records; the offset of the second (the one to
    damage: the first tells the layout) and the layout's geometry."""
    base = tmp_path / layout
    with pydb.create(base, layout=layout) as db:
        for i in (1, 2):
            db.append([(24, f"Title {i}"), (70, "Smith, J.")])
    return base, offset_of(base, 2), GEOM[layout]


@pytest.mark.parametrize("layout", ["isis-aligned", "ffi-aligned"])
def test_master_record_field_count_huge(tmp_path, layout):
    """A leader claiming NVF = 65535 fields (the largest the 16-bit field
    holds): its directory would pass the record's end; refused by the
    leader check, before the record is read."""
    base, off, g = two_records(tmp_path, layout)
    patch_file(base.with_suffix(".mst"), off + g["nvf"], struct.pack("<H", 0xFFFF))
    out = bounded("pydb.open(args['base'])[2]", base=str(base))
    assert out["error"] == "CorruptionError", out
    assert out["filename"] == str(base.with_suffix(".mst"))
    assert out["offset"] == off + g["base"]   # the field that disagrees
    assert "BASE" in out["reason"]


def test_master_record_length_huge(tmp_path):
    """An FFI leader claiming MFRL = 2^31 - 16 bytes in a file of a few
    hundred: refused by the leader check before any buffer of that size."""
    base, off, g = two_records(tmp_path, "ffi-aligned")
    patch_file(base.with_suffix(".mst"), off + g["mfrl"], struct.pack("<i", 0x7FFFFFF0))
    out = bounded("pydb.open(args['base'])[2]", base=str(base))
    assert out["error"] == "CorruptionError", out
    assert out["filename"] == str(base.with_suffix(".mst"))
    assert out["offset"] == off + g["mfrl"]
    assert "MFRL" in out["reason"]


def test_iso_directory_huge(tmp_path):
    """An ISO 2709 record whose leader claims 99999 bytes with the data
    starting at 99990 (a directory of 8000 entries) over 64 bytes present:
    IsoRecordError for record 1 at offset 0; nothing in proportion to the
    claim (which is itself at most 99999 bytes: the 5-digit length)."""
    iso = tmp_path / "huge.iso"
    iso.write_bytes(b"99999nam  2299990   4500" + b"0240010000000#" + b"x" * 26 + b"##")
    out = bounded("[r.fields for r in pydb.iso2709.read(args['iso'], on_error='stop')]",
                  "import pydb.iso2709", iso=str(iso))
    assert out["error"] == "IsoRecordError", out
    assert out["filename"] == str(iso)
    assert out["offset"] == 0
    assert out["reason"]


def test_keys_of_one_huge_record(tmp_path):
    """One record with the most a master-file record can hold as one field
    (ISIS layout: 32767 bytes) of one-letter words, indexed word by word
    (technique 4) by three rules: 48,000 keys from one commit.  The
    commit's memory is a function of the record's bytes and the FST
    (keys <= rules x bytes), here a few MiB."""
    base = tmp_path / "big"
    words = ("a b c d e f g h " * 4000)[:32000]
    setup = ("db = pydb.create(args['base'], layout='isis-aligned', fst='1 4 V1\\n2 4 V1\\n"
             "3 4 V1\\n', gc='none')\n")
    out = bounded("db.append([(1, args['words'])])", setup, base=str(base), words=words)
    assert out["value"] == 1
    with pydb.open_index(base) as ix:
        terms = {t.key: t.count for t in ix.terms()}
    assert terms == {w: 3 * 2000 for w in "ABCDEFGH"}
