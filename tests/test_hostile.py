"""Hostile files: damaged databases must raise pydb.CorruptionError (naming
the damaged file, a byte offset and a reason) -- never crash, hang, read
out of bounds or raise anything that is not a pydb.Error.

Every case starts from a good database -- one built with
``pydb._pydb._build`` for each of the four leader layouts, plus real
CDS/ISIS files copied from the shared data folder when it is present --
damages a copy in ``tmp_path`` (docs/isis-formats.md §2-3 give the byte layout),
and then opens it, reads every MFN, follows back pointers, lists and
iterates, in each of the three I/O modes (io="direct" reads only the MFNs
around the damage, since each of its reads goes to the disk, and is
skipped where the file system refuses O_DIRECT).  Errors are checked for
the file they name, the byte offset (where the damage is) and a reason;
the records that were not damaged must still read back unchanged.

A random-damage property test (hypothesis) flips and overwrites bytes of
both files of a small database and checks that only pydb.Error subclasses
ever come out.

Environment:
  PYDB_SANITIZER_INNER      set by tests/test_sanitizers.py in the run it
                            starts under ASan/TSan (crash reproductions are
                            not rerun there; hypothesis is derandomized).
  PYDB_HYPOTHESIS_EXAMPLES  max_examples of the property test (default 200).
"""

from __future__ import annotations

import errno
import faulthandler
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pydb
from pydb import _pydb

from conftest import GEOM, LAYOUTS, SANITIZER, build_db, data_path, hypothesis_examples

try:
    from hypothesis import HealthCheck, event, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    given = None

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = pytest.mark.sanitize_address


IOS = ["mmap", "pread", "direct"]


# Real databases (copied into tmp_path at test time, never into the repo).
REAL = {
    "real-cds": "scieloorg__pyisis/pyisis/pyisis/sample/cds",
    "real-cdsffi": "scieloorg__pyisis/pyisis/pyisis/sample/cdsffi",
    "real-cds-packed": "scieloorg__pyisis/db/cds",
}


@pytest.fixture(autouse=True)
def _hang_guard():
    """A hang is a failure: dump all stacks and exit if one test takes
    more than two minutes (the whole file runs in a few seconds)."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# ---------------------------------------------------------------- sources

@dataclass
class RecInfo:
    offset: int
    mfrl: int
    nvf: int
    back_offset: int | None


@dataclass
class Source:
    """A good database, held in memory, with what a correct read gives."""
    name: str
    mst: bytes
    xrf: bytes
    layout: str
    mstxl: int
    max_mfn: int
    recs: dict[int, RecInfo]
    content: dict[int, tuple]          # mfn -> ((tag, raw), ...)
    geom: dict = field(default_factory=dict)

    def write(self, dirpath: Path, mst=None, xrf=None, name="db") -> Path:
        base = dirpath / name
        (dirpath / f"{name}.mst").write_bytes(self.mst if mst is None else bytes(mst))
        (dirpath / f"{name}.xrf").write_bytes(self.xrf if xrf is None else bytes(xrf))
        return base

    # Handy picks: a record in the middle (past the 16 records that layout
    # detection looks at, and in the second XRF block when there is one),
    # and the physically last record of the file.
    @property
    def mid(self) -> int:
        return max(20, min(self.max_mfn - 5, 130))

    @property
    def last(self) -> int:
        return max(self.recs, key=lambda m: self.recs[m].offset)


def _records_for_build(n: int):
    """Deterministic, varied records: 1..6 fields, lengths 0..700 bytes,
    repeated tags, 8-bit bytes; some records span block boundaries."""
    out = []
    for i in range(1, n + 1):
        fields = [(10, b"record %d" % i)]
        for j in range((i % 5) + 1):
            ln = (i * 37 + j * 101) % 700 if (i + j) % 7 else 0
            fields.append((20 + (j % 3), bytes((i + k * j) % 256 for k in range(ln))))
        out.append(fields)
    return out


def _load_source(name: str, base: Path) -> Source:
    mst = base.with_suffix(".mst").read_bytes()
    xrf = base.with_suffix(".xrf").read_bytes()
    with pydb.open(base, io="pread", encoding="latin-1") as db:
        info = db.info()
        recs, content = {}, {}
        for m in db.mfns():
            r = db[m]
            recs[m] = RecInfo(r.offset, r.mfrl, len(r), r.back_offset)
            content[m] = tuple((f.tag, f.raw) for f in r.fields)
        return Source(name, mst, xrf, info["layout"], info["mstxl"],
                      db.max_mfn, recs, content, GEOM[info["layout"]])


@pytest.fixture(scope="session")
def source_cache(tmp_path_factory):
    return {"dir": tmp_path_factory.mktemp("hostile-sources")}


def get_source(cache, name: str) -> Source:
    if name in cache:
        return cache[name]
    if name not in GEOM:
        real = data_path(REAL[name])
        if not real.with_suffix(".mst").is_file():
            pytest.skip(f"real database {REAL[name]} not available")
    d = cache["dir"] / name
    d.mkdir()
    if name in GEOM:
        build_db(d / "db", name, _records_for_build(150))
        src = _load_source(name, d / "db")
    else:
        for ext in (".mst", ".xrf"):
            shutil.copyfile(real.with_suffix(ext), d / ("db" + ext))
        src = _load_source(name, d / "db")
    assert src.max_mfn >= 140, "sources need a second XRF block"
    cache[name] = src
    return src


SOURCES = LAYOUTS + list(REAL)


@pytest.fixture(params=SOURCES)
def src(request, source_cache) -> Source:
    return get_source(source_cache, request.param)


# ------------------------------------------------------------- exercising

class DirectRefused(Exception):
    pass


@dataclass
class Outcome:
    open_error: Exception | None = None
    reads: dict = field(default_factory=dict)      # mfn -> tuple | exception
    versions: dict = field(default_factory=dict)   # mfn -> int | exception
    bulk: dict = field(default_factory=dict)       # op -> value | exception
    iter_start: int = 1

    def errors(self):
        errs = [] if self.open_error is None else [self.open_error]
        for d in (self.reads, self.versions, self.bulk):
            errs += [v for v in d.values() if isinstance(v, BaseException)]
        return errs


def _call(fn):
    """fn() or the pydb.Error it raised; anything else propagates."""
    try:
        return fn()
    except pydb.Error as e:
        return e


def exercise(base: Path, io: str, ref_max: int, focus=None) -> Outcome:
    """Open, read every MFN (bounded by what the good database had, so a
    damaged NXTMFN cannot make the loop run for ever), follow back
    pointers, list and iterate.  Only pydb.Error may come out.

    With `focus` (a set of MFNs; used for io="direct", where every read
    goes to the disk and costs a fraction of a millisecond), only those
    MFNs and the edges are read, and iteration starts at the lowest one.
    """
    out = Outcome()
    try:
        db = pydb.open(base, io=io, encoding="latin-1")
    except pydb.UnsupportedError as e:
        if io == "direct" and e.errno == errno.EINVAL:
            raise DirectRefused() from e
        out.open_error = e
        return out
    except pydb.Error as e:
        out.open_error = e
        return out
    with db:
        top = min(db.max_mfn, ref_max + 3)
        if focus is None:
            probe = set(range(0, top + 2))
            out.iter_start = 1
        else:
            probe = {0, 1, 2, top, top + 1} | {m for m in focus if 0 <= m <= top + 1}
            out.iter_start = max(1, min(focus))
        probe = sorted(probe | {db.max_mfn, db.max_mfn + 1})
        for m in probe:
            out.reads[m] = _call(lambda m=m: tuple((f.tag, f.raw) for f in db[m].fields))
        for m in probe:
            if isinstance(out.reads.get(m), tuple):
                out.versions[m] = _call(lambda m=m: len(db.versions(m)))
        out.bulk["len"] = _call(lambda: len(db))
        out.bulk["counts"] = _call(db.counts)
        out.bulk["mfns"] = _call(db.mfns)
        out.bulk["iter"] = _call(lambda: [(r.mfn, tuple((f.tag, f.raw) for f in r.fields))
                                          for r in db.records(start=out.iter_start)])
        out.bulk["iter_skip"] = _call(
            lambda: [r.mfn for r in db.records(start=out.iter_start, skip_damaged=True)])
        out.bulk["read_many"] = _call(
            lambda: len(db.read_many([m for m in probe if 1 <= m <= top])))
    return out


def exercise_all(base: Path, ref_max: int, focus=()):
    """exercise() in every I/O mode; returns {io: Outcome}.  io="direct"
    reads only `focus` (plus the edges)."""
    res = {}
    for io in IOS:
        try:
            res[io] = exercise(base, io, ref_max,
                               set(focus) if io == "direct" else None)
        except DirectRefused:
            continue
    assert "mmap" in res and "pread" in res
    return res


def check_error(e: BaseException, files: tuple[str, ...], sizes: dict[str, int]):
    """e is a well-formed CorruptionError about one of `files` (suffixes)."""
    assert isinstance(e, pydb.CorruptionError), repr(e)
    assert isinstance(e.filename, str), repr(e)
    suffix = Path(e.filename).suffix.lower()
    assert suffix in files, f"{e!r} should name a {' or '.join(files)} file"
    assert isinstance(e.offset, int) and e.offset >= 0, f"no byte offset: {e!r}"
    if suffix in sizes:
        assert e.offset <= sizes[suffix], f"offset past the end of the file: {e!r}"
    assert isinstance(e.reason, str) and len(e.reason) > 10, repr(e)
    assert str(e)  # formats without error


# ---------------------------------------------------------------- helpers

def u16(b, off, v):
    struct.pack_into("<H", b, off, v & 0xFFFF)


def i32(b, off, v):
    struct.pack_into("<i", b, off, v)


def u32(b, off, v):
    struct.pack_into("<I", b, off, v & 0xFFFFFFFF)


def xrf_slot(mfn: int) -> int:
    """Byte offset of MFN's entry in the XRF (docs/isis-formats.md §3.1)."""
    return ((mfn - 1) // 127) * 512 + 4 + ((mfn - 1) % 127) * 4


def xrf_encode(offset: int, mstxl: int, flags: int = 0) -> int:
    """docs/isis-formats.md §3.2."""
    block = offset // 512 + 1
    low = (offset % 512) | flags
    return block * (2048 >> mstxl) + (low >> mstxl)


def set_mfrl(src: Source, b, off, v):
    """MFRL is a signed 16-bit (ISIS) or 32-bit (FFI) integer."""
    struct.pack_into("<i" if src.geom["ffi"] else "<h", b, off + src.geom["mfrl"], v)


def set_base(src: Source, b, off, v):
    (u32 if src.geom["ffi"] else u16)(b, off + src.geom["base"], v)


def set_back(src: Source, b, off, target: int):
    """Point the MFBWB/MFBWP back pointer of the record at `off` to byte
    `target` of the .mst."""
    g = src.geom
    i32(b, off + g["mfbwb"], target // 512 + 1)
    u16(b, off + g["mfbwp"], target % 512)


def dir_entry(src: Source, off: int, i: int) -> int:
    return off + src.geom["leader"] + i * src.geom["entry"]


def control_end(b) -> int:
    nxtmfb, nxtmfp = struct.unpack_from("<iH", b, 8)
    return (nxtmfb - 1) * 512 + nxtmfp - 1


def set_control_end(b, end: int):
    i32(b, 8, end // 512 + 1)
    u16(b, 12, end % 512 + 1)


# ------------------------------------------------- record-level damage

@dataclass
class Damage:
    mst: bytearray
    xrf: bytearray
    mfn: int                      # the one MFN whose read must fail
    files: tuple                  # suffixes its error may name
    offsets: range                # acceptable byte offsets in that error
    also_bad: frozenset = frozenset()   # other MFNs that fail the same way


def _rec_range(src: Source, m: int) -> range:
    r = src.recs[m]
    return range(r.offset, r.offset + r.mfrl)


def _slot_range(m: int) -> range:
    s = xrf_slot(m)
    return range(s - ((m - 1) % 127) * 4 - 4, s + 4)   # the slot or its block


def dmg_mfrl_zero(src):
    mst, m = bytearray(src.mst), src.mid
    set_mfrl(src, mst, src.recs[m].offset, 0)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_mfrl_negative_huge(src):
    mst, m = bytearray(src.mst), src.last
    set_mfrl(src, mst, src.recs[m].offset, -(2**31) if src.geom["ffi"] else -32768)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_mfrl_past_file(src):
    mst, m = bytearray(src.mst), src.last
    big = 32766 if not src.geom["ffi"] else len(src.mst) * 2
    set_mfrl(src, mst, src.recs[m].offset, big)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_mfrl_above_cap(src):
    mst, m = bytearray(src.mst), src.last
    set_mfrl(src, mst, src.recs[m].offset, 2**31 - 2 if src.geom["ffi"] else 32767)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_mfrl_below_base(src):
    mst, m = bytearray(src.mst), src.mid
    set_mfrl(src, mst, src.recs[m].offset, src.geom["leader"])
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_base_zero(src):
    mst, m = bytearray(src.mst), src.mid
    set_base(src, mst, src.recs[m].offset, 0)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_base_huge(src):
    mst, m = bytearray(src.mst), src.mid
    set_base(src, mst, src.recs[m].offset, 0xFFFFFFFF if src.geom["ffi"] else 0xFFFF)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_nvf_huge(src):
    mst, m = bytearray(src.mst), src.mid
    u16(mst, src.recs[m].offset + src.geom["nvf"], 0xFFFF)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_nvf_base_consistent_past_mfrl(src):
    """BASE = leader + NVF*entry holds, but BASE lies beyond MFRL."""
    mst, m, g = bytearray(src.mst), src.mid, src.geom
    off = src.recs[m].offset
    nvf = 2000
    u16(mst, off + g["nvf"], nvf)
    set_base(src, mst, off, g["leader"] + nvf * g["entry"])
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def _pick_with_fields(src, at_least=2):
    for m in sorted(src.recs, key=lambda k: abs(k - src.mid)):
        if src.recs[m].nvf >= at_least:
            return m
    raise AssertionError("no record with fields")


def _set_pos_len(src, mst, ent, pos, ln):
    g = src.geom
    w = u32 if g["ffi"] else u16
    w(mst, ent + g["dpos"], pos)
    w(mst, ent + g["dlen"], ln)


def dmg_dir_len_huge(src):
    mst, m = bytearray(src.mst), _pick_with_fields(src)
    r = src.recs[m]
    ent = dir_entry(src, r.offset, r.nvf - 1)
    _set_pos_len(src, mst, ent, 0, 0xFFFFFFFF if src.geom["ffi"] else 0xFFFF)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), range(ent, ent + src.geom["entry"]))


def dmg_dir_pos_huge(src):
    mst, m = bytearray(src.mst), _pick_with_fields(src)
    r = src.recs[m]
    ent = dir_entry(src, r.offset, 0)
    _set_pos_len(src, mst, ent, 0xFFFFFFFF if src.geom["ffi"] else 0xFFFF, 1)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), range(ent, ent + src.geom["entry"]))


def dmg_dir_one_past_end(src):
    """pos + len = (MFRL - BASE) + 1: the smallest overrun."""
    mst, m, g = bytearray(src.mst), _pick_with_fields(src), src.geom
    r = src.recs[m]
    base = g["leader"] + r.nvf * g["entry"]
    ent = dir_entry(src, r.offset, r.nvf - 1)
    _set_pos_len(src, mst, ent, 1, r.mfrl - base)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), range(ent, ent + g["entry"]))


def dmg_mfn_mismatch(src):
    mst, m = bytearray(src.mst), src.mid
    i32(mst, src.recs[m].offset, m + 1)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_mfn_negative(src):
    mst, m = bytearray(src.mst), src.mid
    i32(mst, src.recs[m].offset, -m)
    return Damage(mst, bytearray(src.xrf), m, (".mst",), _rec_range(src, m))


def dmg_xrf_other_record(src):
    """The XRF entry of MFN m points at the record of MFN m+1."""
    xrf, m = bytearray(src.xrf), src.mid
    i32(xrf, xrf_slot(m), xrf_encode(src.recs[m + 1].offset, src.mstxl))
    return Damage(bytearray(src.mst), xrf, m, (".mst",), _rec_range(src, m + 1))


def dmg_xrf_mid_record(src):
    xrf, m = bytearray(src.xrf), src.mid
    target = src.recs[m].offset + 2 * (1 << src.mstxl) + 8
    i32(xrf, xrf_slot(m), xrf_encode(target, src.mstxl))
    return Damage(bytearray(src.mst), xrf, m, (".mst",), range(target, target + 25))


def dmg_xrf_past_end(src):
    xrf, m = bytearray(src.xrf), src.mid
    i32(xrf, xrf_slot(m), xrf_encode(len(src.mst) + 4096, src.mstxl))
    return Damage(bytearray(src.mst), xrf, m, (".xrf",), _slot_range(m))


def dmg_xrf_at_end(src):
    """Points at the very end of the file: no room for a leader."""
    xrf, m = bytearray(src.xrf), src.mid
    i32(xrf, xrf_slot(m), xrf_encode(len(src.mst) - 8, src.mstxl))
    return Damage(bytearray(src.mst), xrf, m, (".mst",),
                  range(len(src.mst) - 8, len(src.mst)))


def dmg_xrf_max_value(src):
    xrf, m = bytearray(src.xrf), src.mid
    i32(xrf, xrf_slot(m), 2**31 - 1)
    return Damage(bytearray(src.mst), xrf, m, (".xrf",), _slot_range(m))


def dmg_xrf_control_record(src):
    xrf, m = bytearray(src.xrf), src.mid
    i32(xrf, xrf_slot(m), xrf_encode(16, src.mstxl))
    return Damage(bytearray(src.mst), xrf, m, (".xrf",), _slot_range(m))


def dmg_xrf_block_zero(src):
    """Block field 0 (offset -512 + x): before the file start."""
    xrf, m = bytearray(src.xrf), src.mid
    i32(xrf, xrf_slot(m), (100 >> src.mstxl) or 1)
    return Damage(bytearray(src.mst), xrf, m, (".xrf",), _slot_range(m))


def dmg_xrf_deleted_into_control(src):
    """A negated (logically deleted) pointer into the control record."""
    xrf, m = bytearray(src.xrf), src.mid
    i32(xrf, xrf_slot(m), -xrf_encode(32, src.mstxl))
    return Damage(bytearray(src.mst), xrf, m, (".xrf",), _slot_range(m))


def _xrfpos(src, value):
    """Block 2 of the XRF carries XRFPOS `value`: all of its MFNs fail."""
    xrf, m = bytearray(src.xrf), src.mid
    assert 127 < m <= 254
    i32(xrf, 512, value)
    block2 = frozenset(k for k in src.content if 128 <= k <= 254) - {m}
    return Damage(bytearray(src.mst), xrf, m, (".xrf",), range(512, 513), block2)


def dmg_xrfpos_cycle(src):
    """The second XRF block claims to be block 1 (a cycle)."""
    return _xrfpos(src, 1)


def dmg_xrfpos_misnumbered(src):
    return _xrfpos(src, 7)


def dmg_xrfpos_zero(src):
    return _xrfpos(src, 0)


RECORD_DAMAGE = [v for k, v in list(globals().items()) if k.startswith("dmg_")]


@pytest.mark.parametrize("damage", RECORD_DAMAGE, ids=lambda f: f.__name__[4:])
def test_record_damage(src: Source, damage, tmp_path):
    d = damage(src)
    base = src.write(tmp_path, d.mst, d.xrf)
    sizes = {".mst": len(d.mst), ".xrf": len(d.xrf)}
    xrf_damage = d.files == (".xrf",)
    focus = {d.mfn - 1, d.mfn, d.mfn + 1, src.last} | set(sorted(d.also_bad)[:2])
    for io, out in exercise_all(base, src.max_mfn, focus).items():
        ctx = f"[io={io}]"
        assert out.open_error is None, f"{ctx} open failed: {out.open_error!r}"
        # The damaged MFN: a CorruptionError naming the file and the place.
        e = out.reads[d.mfn]
        assert isinstance(e, pydb.CorruptionError), f"{ctx} db[{d.mfn}] gave {e!r}"
        check_error(e, d.files, sizes)
        assert e.offset in d.offsets, f"{ctx} {e!r}: offset not in {d.offsets}"
        # Every other record reads back exactly as before.
        for m, want in src.content.items():
            if m not in out.reads:
                continue
            if m in d.also_bad:
                v = out.reads[m]
                assert isinstance(v, pydb.CorruptionError), f"{ctx} db[{m}] gave {v!r}"
                check_error(v, d.files, sizes)
                assert v.offset in d.offsets, f"{ctx} {v!r}: offset not in {d.offsets}"
            elif m != d.mfn:
                assert out.reads[m] == want, f"{ctx} MFN {m}: {out.reads[m]!r}"
        for m in (0, src.max_mfn + 1):
            assert isinstance(out.reads[m], pydb.NotFoundError), f"{ctx} {out.reads[m]!r}"
        # Whole-database operations: a CorruptionError or a correct answer.
        for op in ("iter", "read_many"):
            e = out.bulk[op]
            assert isinstance(e, pydb.CorruptionError), f"{ctx} {op}: {e!r}"
            check_error(e, d.files, sizes)
        for op in ("len", "counts", "mfns", "iter_skip"):
            v = out.bulk[op]
            if isinstance(v, BaseException):
                assert xrf_damage, f"{ctx} {op} raised for .mst damage: {v!r}"
                check_error(v, d.files, sizes)
        if not xrf_damage:
            assert out.bulk["iter_skip"] == [m for m in src.content
                                             if m != d.mfn and m >= out.iter_start], ctx
            assert out.bulk["len"] == len(src.content)
        for m, v in out.versions.items():
            if isinstance(v, BaseException):
                check_error(v, (".mst",), sizes)
            else:
                assert v == 1, f"{ctx} MFN {m} has {v} versions"


# ------------------------------------------------------- back pointers

def _versions_error(src, base, m, files=(".mst",), broken=(), target=None):
    """versions(m) raises a CorruptionError about the .mst, at the current
    version or at the place its back pointer names (`target`)."""
    sizes = {}
    for io in IOS:
        try:
            db = pydb.open(base, io=io, encoding="latin-1")
        except pydb.UnsupportedError as e:
            if io == "direct" and e.errno == errno.EINVAL:
                continue
            raise
        with db:
            r = db[m]                                # the record itself is fine
            assert tuple((f.tag, f.raw) for f in r.fields) == src.content[m]
            with pytest.raises(pydb.CorruptionError) as ei:
                db.versions(m)
            check_error(ei.value, files, sizes)
            r = src.recs[m]
            assert ei.value.offset in range(r.offset, r.offset + r.mfrl) or \
                (target is not None and target <= ei.value.offset < target + 64), ei.value
            # Other records keep their (single) version.
            assert len(db.versions(m - 3)) == 1
            start = 1 if io != "direct" else m - 2
            assert [x.mfn for x in db.records(start=start, skip_damaged=True)] == \
                [k for k in src.content if k >= start and k not in broken]


def test_back_pointer_to_itself(src, tmp_path):
    mst, m = bytearray(src.mst), src.mid
    off = src.recs[m].offset
    set_back(src, mst, off, off)
    _versions_error(src, src.write(tmp_path, mst), m)


def test_back_pointer_forward(src, tmp_path):
    mst, m = bytearray(src.mst), src.mid
    set_back(src, mst, src.recs[m].offset, src.recs[m + 1].offset)
    _versions_error(src, src.write(tmp_path, mst), m)


def test_back_pointer_far_past_end(src, tmp_path):
    mst, m, g = bytearray(src.mst), src.mid, src.geom
    i32(mst, src.recs[m].offset + g["mfbwb"], 2**31 - 1)
    u16(mst, src.recs[m].offset + g["mfbwp"], 0xFFFF)
    _versions_error(src, src.write(tmp_path, mst), m)


def test_back_pointer_cycle_of_two(src, tmp_path):
    """MFN m's back pointer names an older version (the record of m-1,
    relabelled as m) whose own back pointer points forward to m again."""
    mst, m = bytearray(src.mst), src.mid
    off_m, off_a = src.recs[m].offset, src.recs[m - 1].offset
    i32(mst, off_a, m)
    set_back(src, mst, off_m, off_a)
    set_back(src, mst, off_a, off_m)
    _versions_error(src, src.write(tmp_path, mst), m, broken={m - 1}, target=off_a)


def test_back_pointer_into_control_record(src, tmp_path):
    mst, m = bytearray(src.mst), src.mid
    set_back(src, mst, src.recs[m].offset, 0)
    _versions_error(src, src.write(tmp_path, mst), m, target=0)


def test_back_pointer_to_other_mfn(src, tmp_path):
    mst, m = bytearray(src.mst), src.mid
    set_back(src, mst, src.recs[m].offset, src.recs[m - 2].offset)
    _versions_error(src, src.write(tmp_path, mst), m, target=src.recs[m - 2].offset)


def test_back_pointer_mid_record(src, tmp_path):
    mst, m = bytearray(src.mst), src.mid
    set_back(src, mst, src.recs[m].offset, src.recs[m - 1].offset + 6)
    _versions_error(src, src.write(tmp_path, mst), m, target=src.recs[m - 1].offset + 6)


# ------------------------------------------------ damage found at open

def _expect_open_error(src, base, files, offsets=None, unsupported_ok=False):
    """Opening must fail with a CorruptionError (or, if allowed, an
    UnsupportedError) in every I/O mode."""
    seen = 0
    for io in IOS:
        try:
            db = pydb.open(base, io=io, encoding="latin-1")
        except pydb.UnsupportedError as e:
            if io == "direct" and e.errno == errno.EINVAL:
                continue
            assert unsupported_ok, f"[io={io}] {e!r}"
            assert e.filename and Path(e.filename).suffix.lower() == ".mst", repr(e)
            assert e.strerror, repr(e)
            seen += 1
            continue
        except pydb.CorruptionError as e:
            check_error(e, files, {})
            if offsets is not None:
                assert e.offset in offsets, f"[io={io}] {e!r}: offset not in {offsets}"
            seen += 1
            continue
        db.close()
        pytest.fail(f"[io={io}] opened a damaged database")
    assert seen >= 2


def _mst_cut_points(src):
    """Cut points in the master file: inside the control record and its
    filler, inside a leader, inside a record, and one byte short."""
    end = control_end(src.mst)
    mid, last = src.recs[src.mid], src.recs[src.last]
    return {
        "zero-length": 0, "ctl-4": 4, "ctl-31": 31, "ctl-32": 32,
        "filler-50": 50, "ctl-only": 64, "first-leader": 64 + 5,
        "mid-leader": mid.offset + 7, "mid-record": mid.offset + mid.mfrl // 2,
        "last-leader": last.offset + 3, "last-record": last.offset + last.mfrl // 2,
        "one-short": end - 1,
    }


CUTS = ["zero-length", "ctl-4", "ctl-31", "ctl-32", "filler-50", "ctl-only",
        "first-leader", "mid-leader", "mid-record", "last-leader",
        "last-record", "one-short"]


@pytest.mark.parametrize("cut", CUTS)
def test_truncated_mst(src, cut, tmp_path):
    n = _mst_cut_points(src)[cut]
    base = src.write(tmp_path, src.mst[:n])
    offsets = range(0, 1) if n < 32 else range(0, 16)
    _expect_open_error(src, base, (".mst",), offsets)


@pytest.mark.parametrize("cut", ["mid-leader", "mid-record", "last-leader", "last-record"])
def test_truncated_mst_consistent_control(src, cut, tmp_path):
    """Truncated, and NXTMFB/NXTMFP rewritten to match: the open succeeds;
    the records that were cut (and those after them) raise, those before
    read as before."""
    n = _mst_cut_points(src)[cut]
    mst = bytearray(src.mst[:n])
    set_control_end(mst, n)
    base = src.write(tmp_path, mst)
    sizes = {".mst": n, ".xrf": len(src.xrf)}
    cut_mfn = next(m for m, i in src.recs.items() if i.offset < n < i.offset + i.mfrl)
    focus = {cut_mfn - 1, cut_mfn, cut_mfn + 1, src.max_mfn}
    for io, out in exercise_all(base, src.max_mfn, focus).items():
        assert out.open_error is None, out.open_error
        for m, info in src.recs.items():
            if m not in out.reads:
                continue
            v = out.reads[m]
            if info.offset + info.mfrl <= n:
                assert v == src.content[m], f"[io={io}] MFN {m}: {v!r}"
            else:
                assert isinstance(v, pydb.CorruptionError), f"[io={io}] MFN {m}: {v!r}"
                check_error(v, (".mst", ".xrf"), sizes)
                if info.offset < n:       # the cut record itself: the .mst
                    assert v.filename.endswith(".mst"), v
                    assert info.offset <= v.offset < n, v
                else:                     # past the end: the XRF entry
                    assert v.filename.endswith(".xrf"), v
                    assert v.offset == xrf_slot(m), v
        assert isinstance(out.bulk["iter"], pydb.CorruptionError)
        assert out.bulk["iter_skip"] == [m for m, i in src.recs.items()
                                         if i.offset + i.mfrl <= n and
                                         m >= out.iter_start] or \
            isinstance(out.bulk["iter_skip"], pydb.CorruptionError)


@pytest.mark.parametrize("cut", [0, 4, 511, 512, 700])
def test_truncated_xrf(src, cut, tmp_path):
    base = src.write(tmp_path, xrf=src.xrf[:cut])
    _expect_open_error(src, base, (".xrf",))


def test_zero_length_both(src, tmp_path):
    base = src.write(tmp_path, b"", b"")
    _expect_open_error(src, base, (".mst",), range(0, 1))


def test_xrfpos_first_block(src, tmp_path):
    """Block 1 misnumbered: found while detecting the layout at open."""
    xrf = bytearray(src.xrf)
    i32(xrf, 0, 3)
    _expect_open_error(src, src.write(tmp_path, xrf=xrf), (".xrf",), range(0, 1))


def test_xrf_entry_one_past_end_among_the_first_records(src, tmp_path):
    """XRF damage inside the records that layout detection reads (MFN 3
    past the end of the master file): the layout comes from the others,
    the database opens, db[3] is a CorruptionError naming the entry, and
    every other record reads as before, as for the same damage further
    on (test_record_damage).  The open failed: one damaged entry made
    every record unreadable."""
    xrf = bytearray(src.xrf)
    i32(xrf, xrf_slot(3), xrf_encode(len(src.mst) + 512, src.mstxl))
    base = src.write(tmp_path, xrf=xrf)
    sizes = {".mst": len(src.mst), ".xrf": len(xrf)}
    for io, out in exercise_all(base, src.max_mfn, {2, 3, 4, src.last}).items():
        assert out.open_error is None, f"[io={io}] open failed: {out.open_error!r}"
        check_error(out.reads[3], (".xrf",), sizes)
        assert out.reads[3].offset in _slot_range(3), repr(out.reads[3])
        for m, want in src.content.items():
            if m in out.reads and m != 3:
                assert out.reads[m] == want, f"[io={io}] MFN {m}: {out.reads[m]!r}"


# Control record (docs/isis-formats.md §2.1).
NXTMFN_SAFE = [0, -1, -(2**31), 10**6, 2**31 - 2**20]
# NXTMFN values within 126 of INT32_MAX overflow `next_mfn - 1 + 126` (int32)
# in read_control(): the XRF size check wraps negative and is skipped, and
# the error comes later (still a CorruptionError about the .xrf).  The
# extension is built with CPython's -fwrapv, so this is defined there.
NXTMFN_OVERFLOW = [2**31 - 1, 2**31 - 100]


@pytest.mark.parametrize("value", NXTMFN_SAFE + NXTMFN_OVERFLOW)
def test_control_nxtmfn(src, value, tmp_path):
    mst = bytearray(src.mst)
    i32(mst, 4, value)
    _expect_open_error(src, src.write(tmp_path, mst), (".mst", ".xrf"))


@pytest.mark.parametrize("field_off,value", [
    (0, 1), (0, -1),                      # CTLMFN must be 0
    (8, 0), (8, -5), (8, 2**31 - 1),      # NXTMFB
    (12, 0), (12, 514), (12, 0xFFFF),     # NXTMFP
])
def test_control_fields(src, field_off, value, tmp_path):
    mst = bytearray(src.mst)
    (u16 if field_off == 12 else i32)(mst, field_off, value)
    _expect_open_error(src, src.write(tmp_path, mst), (".mst",), range(0, 16))


@pytest.mark.parametrize("mstxl", [7, 9, 0x80, 0xFF])
def test_control_mstxl(src, mstxl, tmp_path):
    mst = bytearray(src.mst)
    mst[15] = mstxl
    _expect_open_error(src, src.write(tmp_path, mst), (".mst",), range(15, 16))


def test_control_wrong_mstxl_shift(src, tmp_path):
    """A plausible but wrong MSTXL: every XRF pointer decodes elsewhere."""
    mst = bytearray(src.mst)
    mst[15] = 6 if src.mstxl != 6 else 0
    base = src.write(tmp_path, mst)
    for _io, out in exercise_all(base, src.max_mfn, {1, 2, src.mid}).items():
        for e in out.errors():
            if isinstance(e, pydb.NotFoundError):
                continue
            check_error(e, (".mst", ".xrf"), {})


def _byteswap_control(mst: bytes) -> bytearray:
    b = bytearray(mst)
    for off in (0, 4, 8, 16, 20, 24, 28):
        b[off:off + 4] = b[off:off + 4][::-1]
    b[12:14] = b[12:14][::-1]
    b[14:16] = b[14:16][::-1]
    return b


def test_big_endian_control_record(src, tmp_path):
    """A control record with every integer byte-swapped (what a big-endian
    writer produces): UnsupportedError if detected, else CorruptionError."""
    base = src.write(tmp_path, _byteswap_control(src.mst))
    _expect_open_error(src, base, (".mst",), unsupported_ok=True)


@pytest.mark.parametrize("nxtmfn", [5, 151, 300, 0x7F0000])
def test_big_endian_synthetic(src, nxtmfn, tmp_path):
    """A big-endian control record with chosen NXTMFN (NXTMFN's low byte
    >= 0x80 makes the little-endian reading negative)."""
    mst = bytearray(src.mst)
    struct.pack_into(">iiiHH", mst, 0, 0, nxtmfn, 3, 100, 0)
    base = src.write(tmp_path, mst)
    _expect_open_error(src, base, (".mst", ".xrf"), unsupported_ok=True)


def test_big_endian_detected(tmp_path):
    """The common case (NXTMFN < 2**24, low byte < 0x80) is recognised."""
    _pydb._build(str(tmp_path / "db"), "isis-packed", 0,
                 [[(1, b"x")] for _ in range(5)], False)
    mst = _byteswap_control((tmp_path / "db.mst").read_bytes())
    (tmp_path / "db.mst").write_bytes(mst)
    with pytest.raises(pydb.UnsupportedError) as ei:
        pydb.open(tmp_path / "db")
    assert "big-endian" in str(ei.value)


# --------------------------------------------------- tiny databases

def _tiny(tmp_path, layout="isis-packed", n=1):
    _pydb._build(str(tmp_path / "db"), layout, 0,
                 [[(1, b"only record"), (2, b"x" * 30)]] * n, False)
    return bytearray((tmp_path / "db.mst").read_bytes()), \
        bytearray((tmp_path / "db.xrf").read_bytes())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_single_record_all_damage_detected(layout, tmp_path):
    """When every record named by the XRF is damaged, layout detection has
    nothing to go on: still a CorruptionError about the .mst."""
    mst, xrf = _tiny(tmp_path, layout)
    i32(mst, 64, 99)                          # MFN mismatch
    base = tmp_path / "bad"
    (tmp_path / "bad.mst").write_bytes(mst)
    (tmp_path / "bad.xrf").write_bytes(xrf)
    for io in IOS:
        try:
            db = pydb.open(base, io=io)
        except pydb.CorruptionError as e:
            assert e.filename.endswith(".mst") and e.reason, e
            continue
        except pydb.UnsupportedError:
            assert io == "direct"
            continue
        with db:
            with pytest.raises(pydb.CorruptionError) as ei:
                db[1]
            check_error(ei.value, (".mst",), {})


def test_single_record_layout_failure_names_offset(tmp_path):
    """Layout detection failing names the offset of the first record tried."""
    mst, xrf = _tiny(tmp_path)
    i32(mst, 64, 99)
    (tmp_path / "bad.mst").write_bytes(mst)
    (tmp_path / "bad.xrf").write_bytes(xrf)
    with pytest.raises(pydb.CorruptionError) as ei:
        pydb.open(tmp_path / "bad", io="pread")
    assert ei.value.offset == 64, ei.value


def test_empty_database_zero_length_xrf(tmp_path):
    """NXTMFN 1 needs no XRF block: a zero-length .xrf is then valid."""
    _pydb._build(str(tmp_path / "db"), "isis-packed", 0, [], False)
    (tmp_path / "db.xrf").write_bytes(b"")
    for io in ("mmap", "pread"):
        with pydb.open(tmp_path / "db", io=io) as db:
            assert db.max_mfn == 0 and len(db) == 0 and list(db) == []
            with pytest.raises(pydb.NotFoundError):
                db[1]


# ------------------------------------------------ files that shrink later

@pytest.mark.parametrize("io", ["pread", "direct", "mmap"])
@pytest.mark.parametrize("which", [".mst", ".xrf"])
def test_file_shrinks_after_open(io, which, tmp_path, source_cache):
    """Another program cuts a file short under an open handle: every I/O
    mode reports corruption; with mmap the copy out of the mapping is
    guarded against SIGBUS (csrc/mapguard.c)."""
    src = get_source(source_cache, "isis-packed")
    base = src.write(tmp_path)
    try:
        db = pydb.open(base, io=io)
    except pydb.UnsupportedError:
        pytest.skip("O_DIRECT refused here")
    with db:
        os.truncate(str(base) + which, 100)
        with pytest.raises(pydb.CorruptionError) as ei:
            db[src.mid]
        check_error(ei.value, (which,), {})
        with pytest.raises(pydb.CorruptionError):
            list(db)


# A database of 200 records of 3,000 bytes (one per page or so), opened with
# io="mmap" in a child interpreter; a second process's truncate() is played
# by the child itself.  Each case prints what it saw; a SIGBUS that reached
# the interpreter shows as returncode -7.
_SHRINK_CHILD = """
import faulthandler, os, signal, sys, pydb
base, case = sys.argv[1], sys.argv[2]
if case.startswith("faulthandler-first"):
    faulthandler.enable()
db = pydb.open(base, io="mmap")
first = db[1].fields[0][1]
assert first == "x" * 3000 + "1", first[-5:]
size = os.path.getsize(base + ".mst")
cut = size // 2
os.truncate(base + ".mst", cut)
for mfn in (1, 2, 3):
    assert db[mfn].fields[0][1] == "x" * 3000 + str(mfn)   # below the cut
try:
    db[200]
except pydb.CorruptionError as e:
    print("error", os.path.basename(e.filename), e.offset, e.reason)
print("size", size, "cut", cut, flush=True)
if case.endswith("foreign"):
    os.kill(os.getpid(), signal.SIGBUS)   # not a copy of ours: must still kill
print("survived", flush=True)
"""


@pytest.mark.crash_repro          # the foreign-SIGBUS cases crash on purpose
@pytest.mark.parametrize("case", ["plain", "faulthandler-first", "plain-foreign",
                                  "faulthandler-first-foreign"])
def test_mmap_truncated_under_reader(tmp_path, case):
    base = str(tmp_path / "t")
    with pydb.create(base) as db:
        for i in range(1, 201):
            db.append([(10, "x" * 3000 + str(i))])
    p = subprocess.run([sys.executable, "-c", _SHRINK_CHILD, base, case],
                       capture_output=True, text=True, timeout=60)
    lines = p.stdout.splitlines()
    err = [line.split(" ", 3) for line in lines if line.startswith("error ")]
    sizes = [line.split() for line in lines if line.startswith("size ")]
    assert err and sizes, (p.returncode, p.stdout, p.stderr[-2000:])
    name, offset, reason = err[0][1], int(err[0][2]), err[0][3]
    cut = int(sizes[0][3])
    # the record of MFN 200 lies past the cut; the error names the master
    # file, the record's offset and the file's size now
    assert name == "t.mst" and offset >= cut, err
    assert f"past the end of the file ({cut} bytes now)" in reason, reason
    if case.endswith("foreign"):
        assert p.returncode == -7, (p.returncode, p.stderr[-2000:])
        assert "survived" not in p.stdout
        if case.startswith("faulthandler"):
            assert "Fatal Python error: Bus error" in p.stderr, p.stderr[-2000:]
    else:
        assert p.returncode == 0 and "survived" in p.stdout, (p.returncode, p.stderr[-2000:])


# ------------------------------------------------- random damage (property)

if given is not None:
    EXAMPLES = hypothesis_examples(200)
    INTERESTING = [0, 1, -1, 2, 64, 511, 512, 2047, 2048, -2048, 0x7FFF, 0x8000,
                   0xFFFF, 0x10000, 2**31 - 1, -(2**31), 2**30]

    mutation = st.one_of(
        # flip one bit anywhere
        st.tuples(st.just("flip"), st.sampled_from([".mst", ".xrf"]),
                  st.floats(0, 1, exclude_max=True), st.integers(0, 7)),
        # overwrite one byte anywhere
        st.tuples(st.just("byte"), st.sampled_from([".mst", ".xrf"]),
                  st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
        # overwrite an aligned 16/32-bit word with an interesting value
        st.tuples(st.sampled_from(["u16", "i32"]), st.sampled_from([".mst", ".xrf"]),
                  st.floats(0, 1, exclude_max=True), st.sampled_from(INTERESTING)),
        # damage the control record or the leader of the first records
        st.tuples(st.sampled_from(["byte", "u16", "i32"]), st.just(".mst"),
                  st.integers(0, 400).map(lambda x: x / 4096),
                  st.sampled_from(INTERESTING + list(range(0, 256, 17)))),
        # cut a file short
        st.tuples(st.just("cut"), st.sampled_from([".mst", ".xrf"]),
                  st.floats(0, 1, exclude_max=True), st.just(0)),
    )

    def _apply(files: dict, mut):
        kind, which, where, value = mut
        b = files[which]
        if not b:
            return
        pos = min(int(where * len(b)), len(b) - 1)
        if kind == "flip":
            b[pos] ^= 1 << value
        elif kind == "byte":
            b[pos] = value & 0xFF
        elif kind == "u16":
            pos &= ~1
            if pos + 2 <= len(b):
                struct.pack_into("<H", b, pos, value & 0xFFFF)
        elif kind == "i32":
            pos &= ~3
            if pos + 4 <= len(b):
                struct.pack_into("<I", b, pos, value & 0xFFFFFFFF)
        elif kind == "cut":
            del b[pos:]

    @pytest.fixture(scope="module")
    def small_sources(tmp_path_factory):
        d = tmp_path_factory.mktemp("hostile-small")
        out = {}
        for lay in ("isis-packed", "ffi-aligned"):
            for mstxl in (0, 3):
                name = f"{lay}-{mstxl}"
                _pydb._build(str(d / name), lay, mstxl, _records_for_build(40), False)
                out[name] = ((d / f"{name}.mst").read_bytes(),
                             (d / f"{name}.xrf").read_bytes())
        return out, tmp_path_factory.mktemp("hostile-random")

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              derandomize=bool(SANITIZER),
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(which=st.sampled_from(["isis-packed-0", "isis-packed-3",
                                  "ffi-aligned-0", "ffi-aligned-3"]),
           muts=st.lists(mutation, min_size=1, max_size=6))
    def test_random_damage(small_sources, which, muts):
        sources, d = small_sources
        mst, xrf = sources[which]
        files = {".mst": bytearray(mst), ".xrf": bytearray(xrf)}
        for mut in muts:
            _apply(files, mut)
        (d / "r.mst").write_bytes(files[".mst"])
        (d / "r.xrf").write_bytes(files[".xrf"])
        for io in IOS:
            try:
                out = exercise(d / "r", io, 40)
            except DirectRefused:
                continue
            if io == "pread":
                event("open failed" if out.open_error is not None else
                      "some read failed" if out.errors() else "no error")
            for e in out.errors():
                assert isinstance(e, pydb.Error), repr(e)
                if isinstance(e, pydb.CorruptionError):
                    assert Path(e.filename).suffix in (".mst", ".xrf"), repr(e)
                    assert isinstance(e.offset, int) and e.offset >= -1, repr(e)
                    assert isinstance(e.reason, str) and e.reason, repr(e)
                else:
                    assert isinstance(e, (pydb.NotFoundError, pydb.UnsupportedError)), repr(e)
            # Reads that succeeded agree with each other across the calls.
            if out.open_error is None and isinstance(out.bulk["iter"], list):
                for m, fields in out.bulk["iter"]:
                    assert out.reads.get(m, fields) == fields


def test_mmap_reads_a_cut_inside_the_last_page_as_a_cut(tmp_path):
    """A master file cut inside a page while mapped: the mapping reads the
    rest of that page as zeros, not SIGBUS, so the first record past the
    cut showed a leader of MFN 0 ("has MFN 0, but the XRF entry of MFN
    N points there"); it is told as the cut it is (a review)."""
    base = tmp_path / "db"
    with pydb.create(base) as db, db.transaction() as tx:
        for i in range(400):
            tx.append([(24, f"record {i} " * 20)])
    with pydb.open(base, io="mmap") as db:
        offsets = {m: db.xrf_entry(m)["offset"] for m in db.mfns()}
        os.truncate(f"{base}.mst", 17_500)   # inside the page 16,384-20,479
        first = min(m for m, off in offsets.items() if off >= 17_500)
        assert offsets[first] + 512 <= 20_480   # its head (a 512-byte copy) too
        with pytest.raises(pydb.CorruptionError) as e:
            [r.mfn for r in db]
        assert e.value.offset == offsets[first]
        assert "past the end of the file (17500 bytes now)" in e.value.reason
        assert db[first - 2].mfn == first - 2
