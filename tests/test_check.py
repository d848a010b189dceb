"""The validator: db.check(), pydb.check.CheckReport and ``python -m pydb check``.

* Every real database under ../shared/data/isis that SOURCES.md calls
  sound checks without errors, and the walk accounts for every physical
  version that SOURCES.md counted (current + back + orphan = phys); the
  damaged and non-canonical ones (ABCD ``odds``, the pyisis fixtures
  ``cds`` and ``testflag``, cisis ``CDS.std`` without XRF) report exactly
  the faults SOURCES.md describes, at their byte offsets.
* For each kind of fault, a database built with ``pydb._pydb._build`` (all
  four leader layouts) or a real one is damaged at one precise byte in a
  copy under tmp_path, and the check names exactly that fault: kind, MFN,
  file and offset (docs/isis-formats.md §2-3 give the byte layout).
* Hostile random damage (hypothesis) never crashes or hangs the check, and
  whenever a reader fails on the damaged files, the check reports an error.
* The command line (`pydb check`: exit status 0/1/2, text and JSON output)
  is tested in tests/test_cli.py.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import pydb
from pydb import _pydb
from pydb.check import KINDS, CheckReport, Problem

from conftest import (
    DATA,
    GEOM,
    LAYOUTS,
    REPO,
    SANITIZER,
    all_master_files,
    copy_db,
    data_path,
    hypothesis_examples,
    offset_of,
    read_at,
)
from conftest import build_varied as build
from conftest import patch_file as patch

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = pytest.mark.sanitize_address


N = 300   # records in a built database: 3 XRF blocks (127 entries each)


# ----------------------------------------------------------------- helpers

def sources_table() -> dict:
    """{relative .mst path: (act, ldel, pdel, phys)} from SOURCES.md."""
    out = {}
    text = (DATA / "SOURCES.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        m = re.match(r"\| `([^`]+\.mst)` \| (\d+) \| ([\w-]+) \| (\d+) \| (\d+) \| (\d+) \| "
                     r"([-\d]+)/([-\d]+)/([-\d]+) \|", line)
        if m:
            a, ld, p = (int(x) if x != "-" else 0 for x in m.group(7, 8, 9))
            out[m.group(1)] = (a, ld, p, int(m.group(6)))
    return out


def rel(p: Path) -> str:
    return p.relative_to(DATA).as_posix()


def run_check(base, **kw) -> CheckReport:
    with pydb.open(base) as db:
        return db.check(max_problems=100000, **kw)


def errors(rep: CheckReport):
    return [(p.kind, p.mfn, Path(p.file).name, p.offset) for p in rep if p.severity == "error"]


def warnings_(rep: CheckReport):
    return [(p.kind, p.mfn, Path(p.file).name, p.offset) for p in rep if p.severity == "warning"]


def committed_end(db) -> int:
    i = db.info()
    return (i["next_block"] - 1) * 512 + i["next_pos"] - 1


# ----------------------------------------------------------- real data

MASTERS = all_master_files()
DAMAGED = {
    "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds.mst",
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/cds.mst",
}
NO_XRF = {"bireme__cisis/tests/CDS.std.mst"}
# Non-canonical pyisis files whose SOURCES.md physical count leaves out a
# superseded version the scan does find (checked one by one below).
PHYS_EXCEPTIONS = {
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/cds.mst",
    "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/testflag.mst",
}


@pytest.mark.parametrize("mst", MASTERS, ids=lambda p: rel(p))
def test_real_database(mst, isis_data):
    """Sound databases: no error; the versions checked plus the orphans
    found inside the committed region are SOURCES.md's physical count,
    and the current versions are its active + logically deleted."""
    r = rel(mst)
    if r in NO_XRF:
        with pytest.raises(pydb.DatabaseNotFoundError):
            pydb.open(mst)
        return
    table = sources_table()
    with pydb.open(mst) as db:
        rep = db.check(max_problems=100000)
        end = committed_end(db)
        counts = db.counts()
        max_mfn = db.max_mfn
    assert set(rep.counts) <= set(KINDS)
    assert sum(rep.counts.values()) == rep.errors + rep.warnings == len(rep.problems)
    assert rep.stats["scanned"] is True
    assert rep.stats["mfns"] == max_mfn
    if r in DAMAGED:
        assert not rep.ok
    else:
        assert rep.ok, rep.summary() + "\n" + "\n".join(map(str, rep.problems[:20]))
    act, ldel, pdel, phys = table[r]
    if r != "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds.mst":
        assert rep.stats["versions"] == act + ldel == counts["active"] + counts["logically_deleted"]
    inside = [p for p in rep if p.kind == "orphan" and p.offset < end]
    assert rep.stats["orphans"] == sum(1 for p in rep if p.kind == "orphan")
    if r not in PHYS_EXCEPTIONS:
        assert rep.stats["versions"] + rep.stats["back_versions"] + len(inside) == phys


def test_odds_mfn_49(isis_data):
    """SOURCES.md: one XRF entry of ABCD odds points at a record with a
    different MFN.  It is MFN 49 (offset 28976, where text bytes give MFN
    2019440690); the 8 current versions with a negative MFRL are lock
    warnings; the rest of the 229 versions are reachable or orphans."""
    mst = data_path("ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds.mst")
    if not mst.is_file():
        pytest.skip("odds not present")
    rep = run_check(mst)
    assert errors(rep) == [("mfn-mismatch", 49, "odds.mst", 28976)]
    assert "carries MFN 2019440690" in \
        rep.problems[[p.kind for p in rep].index("mfn-mismatch")].message
    assert sorted(p.mfn for p in rep if p.kind == "locked") == [2, 9, 11, 40, 45, 51, 57, 58]
    assert rep.counts == {"mfn-mismatch": 1, "locked": 8, "orphan": 127}
    assert rep.stats["versions"] + rep.stats["back_versions"] + rep.stats["orphans"] == 229


def test_pyisis_fixture_cds(isis_data):
    """SOURCES.md: re-saved by pyisis, 69 records with odd MFRL (warnings).
    Its NXTMFB/NXTMFP (123/319: end 62782) also lag behind the file: MFN
    150 (offset 62558, MFRL 225) ends at 62783, and MFN 31's current
    version was written at 62784, past the committed end (XRF entry at
    byte 124); its superseded version at 11416 is an orphan."""
    mst = data_path("scieloorg__pyisis/pyisis/pyisis/tests/fixtures/cds.mst")
    if not mst.is_file():
        pytest.skip("fixture not present")
    rep = run_check(mst)
    assert errors(rep) == [("xrf-pointer", 31, "cds.xrf", 124),
                           ("mfrl", 150, "cds.mst", 62558 + 4)]
    assert rep.counts["mfrl-padding"] == 69
    assert [(p.mfn, p.offset) for p in rep if p.kind == "orphan"] == [(31, 11416)]


def test_pyisis_testflag(isis_data):
    """SOURCES.md: 1 record at an odd offset, file of 1338 bytes.  Readable
    without loss: warnings only.  The version at 64 (STATUS 1) is an
    orphan; the current one at 947 (STATUS 0, XRF 4531) is odd-placed,
    odd-sized, and ends one byte past NXTMFB/NXTMFP 3/314 (end 1337)."""
    mst = data_path("scieloorg__pyisis/pyisis/pyisis/tests/fixtures/testflag.mst")
    if not mst.is_file():
        pytest.skip("fixture not present")
    rep = run_check(mst)
    assert rep.ok
    assert sorted(warnings_(rep)) == sorted([
        ("file-size", 0, "testflag.mst", 1338),
        ("placement", 1, "testflag.mst", 947),
        ("mfrl-padding", 1, "testflag.mst", 951),
        ("control-end", 1, "testflag.mst", 8),
        ("orphan", 1, "testflag.mst", 64),
    ])


def test_winisis_bibl_chain(isis_data):
    """WinISIS BIBL: MFN 5's back pointer 4/242 (offset 1778) is walked,
    MFN 3 is logically deleted with STATUS 1: no fault but 2 orphans."""
    mst = data_path("cpan__Biblio-Isis-0.24/data/winisis/BIBL.mst")
    if not mst.is_file():
        pytest.skip("BIBL not present")
    rep = run_check(mst)
    assert rep.ok and rep.stats["back_versions"] == 1
    assert rep.counts == {"orphan": 2}


def test_winisis_bibl_damaged_back_version(isis_data, tmp_path):
    """The back version of MFN 5 at offset 1778 gets another MFN: the
    chain walk reports it there."""
    base = copy_db(data_path("cpan__Biblio-Isis-0.24/data/winisis/BIBL.mst"), tmp_path)
    patch(base.with_suffix(".mst"), 1778, struct.pack("<i", 4))
    rep = run_check(base)
    assert errors(rep) == [("mfn-mismatch", 5, "BIBL.mst", 1778)]
    assert "back version of MFN 5" in [p for p in rep if p.severity == "error"][0].message


def test_winisis_bibl_back_pointer_cycle(isis_data, tmp_path):
    """MFN 5's back pointer aimed at itself (block 7 offset 228 = 3300)."""
    base = copy_db(data_path("cpan__Biblio-Isis-0.24/data/winisis/BIBL.mst"), tmp_path)
    mst = base.with_suffix(".mst")
    patch(mst, 3300 + 6, struct.pack("<iH", 3300 // 512 + 1, 3300 % 512))
    rep = run_check(base)
    assert errors(rep) == [("back-pointer", 5, "BIBL.mst", 3306)]
    # the old version at 1778 is now reached by nothing
    assert (5, 1778) in [(p.mfn, p.offset) for p in rep if p.kind == "orphan"]


# -------------------------------------------------- built databases, per fault

@pytest.fixture(params=LAYOUTS)
def built(request, tmp_path):
    layout = request.param
    base = build(tmp_path, layout)
    return layout, GEOM[layout], base, base.with_suffix(".mst"), base.with_suffix(".xrf")


def test_built_is_clean(built):
    layout, g, base, mst, xrf = built
    rep = run_check(base)
    assert rep.problems == [] and rep.ok
    assert rep.stats["mfns"] == N and rep.stats["versions"] == N
    assert rep.stats["orphans"] == 0


def test_fault_leader_mfn(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 200)
    patch(mst, off, struct.pack("<i", 201))
    rep = run_check(base)
    assert errors(rep) == [("mfn-mismatch", 200, f"b-{layout}-0.mst", off)]
    # What lies there now looks like a version of MFN 201 that nothing reaches.
    assert warnings_(rep) == [("orphan", 201, mst.name, off)]


def test_fault_mfrl_past_file(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 17)
    patch(mst, off + g["mfrl"],
          struct.pack("<i", 1 << 29) if g["ffi"] else struct.pack("<h", 32000))
    rep = run_check(base)
    assert errors(rep) == [("mfrl", 17, mst.name, off + g["mfrl"])]


def test_fault_base(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 5)
    fmt = "<I" if g["ffi"] else "<H"
    old = struct.unpack(fmt, read_at(mst, off + g["base"], struct.calcsize(fmt)))[0]
    patch(mst, off + g["base"], struct.pack(fmt, old + 2))
    rep = run_check(base)
    assert errors(rep) == [("base", 5, mst.name, off + g["base"])]


def test_fault_directory_len(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 9)
    entry = off + g["leader"] + 1 * g["entry"]      # second field (tag 70)
    fmt = "<I" if g["ffi"] else "<H"
    patch(mst, entry + g["dlen"], struct.pack(fmt, 5000))
    rep = run_check(base)
    assert errors(rep) == [("directory", 9, mst.name, entry)]


def test_fault_directory_order(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 12)                       # 4 fields
    e0 = off + g["leader"]
    e1 = e0 + g["entry"]
    fmt = "<I" if g["ffi"] else "<H"
    sz = struct.calcsize(fmt)
    p1 = struct.unpack(fmt, read_at(mst, e1 + g["dpos"], sz))[0]
    patch(mst, e1 + g["dpos"], struct.pack(fmt, p1 - 1))   # overlaps field 1
    rep = run_check(base)
    assert rep.ok
    assert warnings_(rep) == [("directory-order", 12, mst.name, e1)]


def test_fault_status(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 33)
    patch(mst, off + g["status"], struct.pack("<H", 7))
    rep = run_check(base)
    assert errors(rep) == [("status", 33, mst.name, off + g["status"])]


def test_fault_status_mismatch(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 34)
    patch(mst, off + g["status"], struct.pack("<H", 1))
    rep = run_check(base)
    assert rep.ok
    assert warnings_(rep) == [("status-mismatch", 34, mst.name, off + g["status"])]


def test_fault_locked(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 35)
    fmt = "<i" if g["ffi"] else "<h"
    sz = struct.calcsize(fmt)
    m = struct.unpack(fmt, read_at(mst, off + g["mfrl"], sz))[0]
    patch(mst, off + g["mfrl"], struct.pack(fmt, -m))
    rep = run_check(base)
    assert rep.ok
    assert warnings_(rep) == [("locked", 35, mst.name, off + g["mfrl"])]
    with pydb.open(base) as db:      # and readers agree: readable, locked
        assert db[35].locked


def test_fault_xrfpos(built):
    layout, g, base, mst, xrf = built
    patch(xrf, 512, struct.pack("<i", 7))
    rep = run_check(base)
    assert errors(rep) == [("xrf-block", 0, xrf.name, 512)]
    with pytest.raises(pydb.CorruptionError):    # readers refuse the block
        pydb.open(base)[130]


def test_fault_xrfpos_sign(built):
    layout, g, base, mst, xrf = built
    patch(xrf, 1024, struct.pack("<i", 3))       # last block, positive
    rep = run_check(base)
    assert rep.ok and warnings_(rep) == [("xrfpos-sign", 0, xrf.name, 1024)]


def test_fault_xrf_past_file(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 100)
    size = mst.stat().st_size
    patch(xrf, 4 + 99 * 4, struct.pack("<i", (size // 512 + 5) * 2048))
    rep = run_check(base)
    assert errors(rep) == [("xrf-pointer", 100, xrf.name, 400)]
    # The record is still there, now reached by nothing.
    assert warnings_(rep) == [("orphan", 100, mst.name, off)]


def test_fault_xrf_into_control_record(built):
    layout, g, base, mst, xrf = built
    slot = 512 + 4 + (140 - 128) * 4          # MFN 140 in block 2
    patch(xrf, slot, struct.pack("<i", 2048 + 10))
    rep = run_check(base)
    assert ("xrf-pointer", 140, xrf.name, slot) in errors(rep)
    assert len(errors(rep)) == 1


def test_fault_xrf_into_block_zero(built):
    """A value naming block 0 (blocks count from 1) is said to be so, not
    an offset before the file's start: by check() and by a read."""
    layout, g, base, mst, xrf = built
    slot = 4 + (41 - 1) * 4                      # MFN 41 in block 1
    patch(xrf, slot, struct.pack("<i", 64))      # block 0, low bits 64
    rep = run_check(base)
    assert errors(rep) == [("xrf-pointer", 41, xrf.name, slot)]
    [p] = [p for p in rep if p.severity == "error"]
    assert p.message == ("XRF entry of MFN 41 (value 64) names block 0 (the "
                         "master file's blocks count from 1)")
    with pydb.open(base) as db, pytest.raises(pydb.CorruptionError) as e:
        db[41]
    assert (e.value.filename, e.value.offset) == (str(xrf), slot)
    assert "MFN 41 (value 64) names block 0 (the master file's blocks" in str(e.value)


def test_fault_xrf_beyond_next_mfn(built):
    layout, g, base, mst, xrf = built
    slot = 1024 + 4 + (N + 5 - 255) * 4        # MFN 305, block 3
    patch(xrf, slot, struct.pack("<i", 2048 + 64))
    rep = run_check(base)
    assert errors(rep) == [("xrf-beyond-end", N + 5, xrf.name, slot)]


def test_fault_hole_makes_orphan(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 77)
    patch(xrf, 4 + 76 * 4, b"\0\0\0\0")
    rep = run_check(base)
    assert rep.ok and warnings_(rep) == [("orphan", 77, mst.name, off)]


def test_fault_overlap(built):
    layout, g, base, mst, xrf = built
    off1, off2 = offset_of(base, 1), offset_of(base, 2)
    fmt = "<i" if g["ffi"] else "<h"
    patch(mst, off1 + g["mfrl"], struct.pack(fmt, off2 - off1 + 2))
    rep = run_check(base)
    assert errors(rep) == [("overlap", 2, mst.name, off2)]


def test_fault_back_pointer_forward(built):
    layout, g, base, mst, xrf = built
    off, later = offset_of(base, 50), offset_of(base, 60)
    patch(mst, off + g["mfbwb"], struct.pack("<i", later // 512 + 1))
    patch(mst, off + g["mfbwp"], struct.pack("<H", later % 512))
    rep = run_check(base)
    assert errors(rep) == [("back-pointer", 50, mst.name, off + g["mfbwb"])]


def test_fault_back_pointer_other_mfn(built):
    layout, g, base, mst, xrf = built
    off, earlier = offset_of(base, 50), offset_of(base, 40)
    patch(mst, off + g["mfbwb"], struct.pack("<i", earlier // 512 + 1))
    patch(mst, off + g["mfbwp"], struct.pack("<H", earlier % 512))
    rep = run_check(base)
    assert errors(rep) == [("back-pointer", 50, mst.name, off + g["mfbwb"])]
    assert "a version of MFN 40" in [p for p in rep if p.severity == "error"][0].message


def test_fault_back_pointer_malformed(built):
    layout, g, base, mst, xrf = built
    off = offset_of(base, 51)
    patch(mst, off + g["mfbwb"], struct.pack("<i", -3))
    rep = run_check(base)
    assert errors(rep) == [("back-pointer", 51, mst.name, off + g["mfbwb"])]


def test_fault_committed_end_short(built):
    """NXTMFB/NXTMFP moved back into the last record: the next append would
    overwrite it."""
    layout, g, base, mst, xrf = built
    last = offset_of(base, N)
    end = last + 2
    patch(mst, 8, struct.pack("<iH", end // 512 + 1, end % 512 + 1))
    rep = run_check(base)
    assert errors(rep) == [("mfrl", N, mst.name, last + g["mfrl"])]


def test_fault_control_end_before_records(built):
    """NXTMFB/NXTMFP 1/1 put the committed end at byte 0, inside the
    control record: a control error, and every XRF entry points past it."""
    layout, g, base, mst, xrf = built
    patch(mst, 8, struct.pack("<iH", 1, 1))
    rep = run_check(base)
    errs = errors(rep)
    assert errs[0] == ("control", 0, mst.name, 8)
    assert errs[1:] == [("xrf-pointer", m, xrf.name,
                         ((m - 1) // 127) * 512 + 4 + ((m - 1) % 127) * 4)
                        for m in range(1, N + 1)]


def test_fault_control_lock_words(built):
    layout, g, base, mst, xrf = built
    patch(mst, 28, struct.pack("<i", 1))
    rep = run_check(base)
    assert rep.ok and warnings_(rep) == [("control-flags", 0, mst.name, 28)]


def test_fault_mfrl_padding_mstxl(tmp_path):
    """With MSTXL 3 an MFRL that is even but not a multiple of 8."""
    base = build(tmp_path, "ffi-aligned", n=20, mstxl=3)
    mst = base.with_suffix(".mst")
    off = offset_of(base, 3)
    m = struct.unpack("<i", read_at(mst, off + 4, 4))[0]
    assert m % 8 == 0
    patch(mst, off + 4, struct.pack("<i", m - 2))
    rep = run_check(base)
    kinds = {(p.kind, p.mfn, p.offset) for p in rep}
    assert ("mfrl-padding", 3, off + 4) in kinds
    assert all(p.severity == "warning" or p.kind == "directory" for p in rep)


def test_many_problems_truncated(tmp_path):
    """Every record's STATUS damaged: all counted, max_problems kept."""
    base = build(tmp_path, "isis-packed")
    mst = base.with_suffix(".mst")
    for m in range(1, N + 1):
        patch(mst, offset_of(base, m) + 16, struct.pack("<H", 9))
    with pydb.open(base) as db:
        rep = db.check(max_problems=10)
    assert rep.counts == {"status": N} and rep.errors == N
    assert len(rep) == 10 and rep.truncated
    assert [p.mfn for p in rep] == list(range(1, 11))
    assert "status" in rep.summary() and "DAMAGED" in rep.summary()


def test_progress_and_threads(tmp_path):
    base = build(tmp_path, "isis-aligned", n=2000)
    calls = []
    with pydb.open(base) as db:
        rep = db.check(progress=lambda d, t: calls.append((d, t)))
        total = 2000 + db.info()["mst_size"] // 512
    assert rep.ok
    assert calls and calls[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:], strict=False))


def test_api_errors(tmp_path):
    base = build(tmp_path, "isis-packed", n=3)
    db = pydb.open(base)
    with pytest.raises(ValueError):
        db.check(max_problems=-1)
    run = _pydb.CheckRun(db)
    run.run()
    with pytest.raises(RuntimeError):
        run.run()
    db.close()
    with pytest.raises(pydb.ClosedError):
        db.check()
    assert KINDS["mfn-mismatch"] == "error" and KINDS["orphan"] == "warning"
    import pydb.check as check_module
    for kind, sev in KINDS.items():     # every kind is documented, with its severity
        assert re.search(rf"^{re.escape(kind)}\s+{sev}\s", check_module.__doc__, re.M), kind
    p = Problem("status", "error", 3, "x.mst", 10, "why")
    assert str(p) == "error: status MFN 3: x.mst at byte 10: why"


def test_check_runs_while_reading(tmp_path):
    """The check runs (GIL released) while other threads read the handle."""
    import threading
    base = build(tmp_path, "isis-packed", n=3000)
    with pydb.open(base) as db:
        stop = threading.Event()
        seen = []

        def reader():
            while not stop.is_set():
                seen.append(db[1500].mfn)

        t = threading.Thread(target=reader)
        t.start()
        try:
            rep = db.check()
        finally:
            stop.set()
            t.join()
    assert rep.ok and seen and set(seen) == {1500}


# ------------------------------------------------------- hostile damage

EXAMPLES = hypothesis_examples(200)


def _reads_fail(base) -> bool:
    """Does any reader call fail with CorruptionError on these files?"""
    try:
        db = pydb.open(base)
    except pydb.CorruptionError:
        return True
    with db:
        for m in range(1, db.max_mfn + 1):
            try:
                db.versions(m)
            except pydb.NotFoundError:
                pass
            except pydb.CorruptionError:
                return True
    return False


if given is not None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=bool(SANITIZER),
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(layout=st.sampled_from(LAYOUTS),
           damage=st.lists(st.tuples(st.booleans(), st.integers(0, 1 << 20),
                                     st.integers(1, 255)), min_size=1, max_size=8),
           truncate=st.one_of(st.none(), st.integers(0, 1 << 20)))
    def test_random_damage(tmp_path_factory, layout, damage, truncate):
        """Random bytes xor-ed into both files (and maybe a truncation):
        the check returns, every problem names a kind, a file and an
        offset inside that file, and if a reader fails, an error."""
        tmp = tmp_path_factory.mktemp("h")
        base = build(tmp, layout, n=140)
        mst, xrf = base.with_suffix(".mst"), base.with_suffix(".xrf")
        for in_xrf, pos, x in damage:
            f = xrf if in_xrf else mst
            size = f.stat().st_size
            b = read_at(f, pos % size, 1)
            patch(f, pos % size, bytes([b[0] ^ x]))
        if truncate is not None:
            with open(mst, "r+b") as f:
                f.truncate(truncate % (mst.stat().st_size + 1))
        try:
            db = pydb.open(base)
        except pydb.CorruptionError:
            return
        with db:
            rep = db.check(max_problems=100000)
            sizes = {str(mst): mst.stat().st_size, str(xrf): xrf.stat().st_size}
        for p in rep:
            assert p.kind in KINDS and p.severity == KINDS[p.kind]
            assert p.file in sizes and -1 <= p.offset <= sizes[p.file]
            assert 0 <= p.mfn
        if _reads_fail(base):
            assert rep.errors > 0, rep.summary()

    FIELDS = ["mfn", "base", "nvf", "xrfpos", "xrf"]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=bool(SANITIZER),
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(layout=st.sampled_from(LAYOUTS), mfn=st.integers(1, 140),
           field=st.sampled_from(FIELDS), byte=st.integers(0, 3), x=st.integers(1, 255))
    def test_damage_that_matters_is_reported(tmp_path_factory, layout, mfn, field, byte, x):
        """A byte changed in a field that every reader relies on (leader
        MFN, BASE, NVF, XRFPOS, the XRF pointer without its flag bits) is
        always reported."""
        g = GEOM[layout]
        tmp = tmp_path_factory.mktemp("m")
        base = build(tmp, layout, n=140)
        mst, xrf = base.with_suffix(".mst"), base.with_suffix(".xrf")
        off = offset_of(base, mfn)
        if field == "mfn":
            where, f = off + byte, mst
        elif field == "base":
            where, f = off + g["base"] + byte % (4 if g["ffi"] else 2), mst
        elif field == "nvf":
            where, f = off + g["nvf"] + byte % 2, mst
        elif field == "xrfpos":
            where, f = ((mfn - 1) // 127) * 512 + byte, xrf
        else:
            where, f = ((mfn - 1) // 127) * 512 + 4 + ((mfn - 1) % 127) * 4 + byte, xrf
            if byte == 1:
                x &= ~0x06         # bits 0x200/0x400 are flags, not position
                if not x:
                    x = 0x08
        b = read_at(f, where, 1)
        patch(f, where, bytes([b[0] ^ x]))
        try:
            db = pydb.open(base)
        except pydb.CorruptionError:
            return            # the open itself names the damage
        with db:
            rep = db.check()
        assert len(rep.problems) > 0
        assert rep.errors > 0 or {p.kind for p in rep} <= {"status-mismatch", "orphan",
                                                            "xrfpos-sign"}


# ------------------------------------------------------------- the C API

@pytest.fixture(scope="module")
def check_main(tmp_path_factory):
    """tests/c/check_main.c linked against the core sources (no Python)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not sys.platform.startswith("linux"):
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("c") / "check_main"
    srcs = sorted(str(p) for p in (REPO / "csrc").glob("*.c"))
    # Under tests/test_sanitizers.py's ASan run, the C program is checked too.
    san = (["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-g"]
           if SANITIZER == "address" else [])
    p = subprocess.run([cc, "-std=gnu11", "-O1", "-Wall", "-Werror", *san, "-I", str(REPO / "csrc"),
                        str(REPO / "tests" / "c" / "check_main.c"), *srcs, "-o", str(exe),
                        "-pthread"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return exe


def test_c_api_matches_python(check_main, tmp_path):
    base = build(tmp_path, "ffi-packed", n=50)
    mst = base.with_suffix(".mst")
    for m in (7, 8, 9):
        patch(mst, offset_of(base, m) + GEOM["ffi-packed"]["status"], struct.pack("<H", 4))
    patch(base.with_suffix(".xrf"), 4 + 4 * 19, b"\0\0\0\0")      # MFN 20: orphan
    p = subprocess.run([str(check_main), str(base)], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    rep = run_check(base)
    lines = p.stdout.splitlines()
    assert lines[:-1] == [f"{q.severity} {q.kind} {q.mfn} {q.offset} {q.file}" for q in rep]
    assert lines[-1] == "errors=3 warnings=1 versions=49 orphans=1 stopped=0"
    # The callback may stop the walk.
    p = subprocess.run([str(check_main), str(base), "2"], capture_output=True, text=True)
    assert p.stdout.splitlines()[-1] == "errors=2 warnings=0 versions=8 orphans=0 stopped=1"




# ------------------------------------ beside a writer (issue 10, defect 4)
#
# The check walks one committed state (a snapshot of the commit header):
# versions that later commits write while it runs are followed back to the
# versions of its state, so a sound database is never reported DAMAGED
# because another thread or process is committing.

WRITER = """
import os, sys, time, pydb
db = pydb.open(sys.argv[1], readonly=False, sync=False)
stop = sys.argv[2]
n = 0
while not os.path.exists(stop):
    with db.transaction() as tx:
        top = db.max_mfn
        for i in range(3):
            tx.append([(1, f"new {n} {i}"), (2, "x" * (n % 200 + 1))])
        for k in range(4):
            tx.update((n * 7 + k * 13) % top + 1, [(1, f"upd {n}"), (3, "y" * (n % 97 + 1))])
        if n % 5 == 0:
            tx.delete((n * 11) % top + 1)
        if n % 5 == 3:
            tx.undelete((n * 11) % top + 1)
    n += 1
    if n == 1:
        print("ready", flush=True)
    time.sleep(0.001)    # about 1,000 commits a second, not a full disk
print(n, flush=True)
"""


def _seeded(tmp_path, n=300):
    base = tmp_path / "w"
    with pydb.create(base, "isis-aligned") as db, db.transaction() as tx:
        for m in range(1, n + 1):
            tx.append([(1, f"record {m}"), (2, "z" * (m % 50 + 1))])
    return base


class _WriterProcess:
    """A process committing appends, updates, deletions and undeletions
    in a loop (WRITER) until stop() is called."""

    def __init__(self, base, tmp_path):
        self.stopfile = tmp_path / "stop-writer"
        self.p = subprocess.Popen([sys.executable, "-c", WRITER, str(base), str(self.stopfile)],
                                  cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "ready"

    def stop(self) -> int:
        self.stopfile.touch()
        out, _ = self.p.communicate(timeout=120)
        assert self.p.returncode == 0
        return int(out.split()[-1])


@pytest.mark.skipif(bool(SANITIZER), reason="20 interpreters under a sanitizer: too slow")
def test_cli_check_beside_a_writer_process(tmp_path):
    """`python -m pydb check DB` exits 0 twenty times while another process
    commits (it exited 1 with 35-57 xrf-pointer errors in 6 of 6 runs)."""
    base = _seeded(tmp_path)
    writer = _WriterProcess(base, tmp_path)
    results = []
    try:
        with pydb.open(base) as db:
            before = db.max_mfn
        for _ in range(20):
            p = subprocess.run([sys.executable, "-m", "pydb", "check", str(base)],
                               cwd=REPO, capture_output=True, text=True, timeout=120)
            results.append((p.returncode, p.stdout.strip().splitlines()[-1:], p.stderr))
        with pydb.open(base) as db:
            after = db.max_mfn
    finally:
        commits = writer.stop()
    assert results == [(0, ["OK"], "")] * 20
    assert after > before and commits >= 2    # the writer committed meanwhile
    assert run_check(base).problems == []


def test_check_of_a_handle_opened_before_commits(tmp_path):
    """db.check() on a handle opened before another handle's commits says
    OK, with the figures of a fresh handle (it reported every updated
    record)."""
    base = _seeded(tmp_path)
    old = pydb.open(base)
    assert old.max_mfn == 300
    # gc="none": the collector would compact the back versions counted below
    with pydb.open(base, readonly=False, gc="none") as w:
        for m in range(1, 301, 3):
            w.update(m, [(1, f"updated {m}"), (4, "u" * (m % 70 + 1))])
        for _ in range(40):
            w.append([(1, "later"), (2, "q" * 500)])
        w.delete(7)
    rep = old.check()
    old.close()
    fresh = run_check(base)
    assert rep.problems == [] and rep.ok
    assert rep.stats == fresh.stats
    assert rep.stats["mfns"] == 340 and rep.stats["versions"] == 340
    assert rep.stats["back_versions"] == 101            # 100 updates + 1 deletion
    assert fresh.problems == []


def test_check_of_a_handle_opened_before_another_process_commits(tmp_path):
    base = _seeded(tmp_path, n=200)
    with pydb.open(base) as old:
        writer = _WriterProcess(base, tmp_path)
        commits = writer.stop()
        rep = old.check()
    assert commits >= 1
    assert rep.problems == [] and rep.ok
    assert rep.stats == run_check(base).stats
    assert rep.stats["mfns"] == 200 + 3 * commits


@pytest.mark.sanitize_thread
def test_check_beside_a_writer_thread(tmp_path):
    """Checks on the writing handle and on another handle while a thread of
    the same process commits: each is OK, and each walked one committed
    state (its MFN count is one the writer's commits left: 300 + 3k)."""
    import threading
    base = _seeded(tmp_path)
    stop = threading.Event()
    started = threading.Event()
    commits = [0]
    failures = []
    with pydb.open(base, readonly=False, sync=False) as w, pydb.open(base) as r:
        def write():
            try:
                while not stop.is_set():
                    n = commits[0]
                    with w.transaction() as tx:
                        top = w.max_mfn
                        for i in range(3):
                            tx.append([(1, f"t {n} {i}")])
                        for k in range(4):
                            tx.update((n * 5 + k * 17) % top + 1, [(1, f"u {n}")])
                    commits[0] = n + 1
                    started.set()
            except BaseException as e:      # reported by the main thread
                failures.append(e)
                started.set()

        t = threading.Thread(target=write)
        t.start()
        reps = []
        try:
            assert started.wait(60)
            first = commits[0]
            # at least 10 rounds, and until the writer committed meanwhile
            while len(reps) < 20 or (commits[0] < first + 3 and len(reps) < 2000):
                reps += [w.check(), r.check()]
        finally:
            stop.set()
            t.join()
    assert failures == []
    assert commits[0] >= first + 3
    assert {(x.errors, x.warnings) for x in reps} == {(0, 0)}
    assert all((x.stats["mfns"] - 300) % 3 == 0 and x.stats["mfns"] > 300 for x in reps)


# ------------------------------------------------------------- on a snapshot

def test_check_of_a_snapshot(tmp_path):
    """snap.check() judges the commit the snapshot pins: the figures of
    that commit (a check of the database then), none of the versions
    committed after it (updates, a deletion, appends into its last XRF
    block and a new block after it), and the same report again after more
    commits."""
    base = _seeded(tmp_path)
    with pydb.open(base, readonly=False) as w:
        then = w.check()
        with w.snapshot() as snap:
            for m in range(1, 301, 2):
                w.update(m, [(1, f"after {m}"), (5, "s" * (m % 40 + 1))])
            for _ in range(100):        # past the 3 XRF blocks it had
                w.append([(1, "after")])
            w.delete(4)
            first = snap.check(max_problems=100)
            w.append([(1, "more")])
            again = snap.check()
            now = w.check()
    assert first.problems == [] and first.ok
    assert first.stats == then.stats == again.stats
    assert first.stats["mfns"] == 300 and first.stats["versions"] == 300
    assert first.stats["back_versions"] == 0
    assert now.problems == [] and now.stats["mfns"] == 401
    assert now.stats["back_versions"] == 151       # 150 updates + 1 deletion
    assert first.path == str(base)


def test_check_of_a_snapshot_beside_a_writer_process(tmp_path):
    base = _seeded(tmp_path, n=200)
    with pydb.open(base) as db:
        writer = _WriterProcess(base, tmp_path)
        try:
            with db.snapshot() as snap:
                reps = [snap.check() for _ in range(5)]
        finally:
            writer.stop()
    assert all(r.problems == [] for r in reps)
    assert all(r.stats == reps[0].stats for r in reps)
    assert reps[0].stats["mfns"] >= 200


def test_check_of_a_closed_snapshot(tmp_path):
    base = _seeded(tmp_path, n=5)
    with pydb.open(base) as db:
        snap = db.snapshot()
        run = _pydb.CheckRun(snap)
        snap.close()
        with pytest.raises(pydb.ClosedError):
            snap.check()
        with pytest.raises(pydb.ClosedError):
            run.run()
        snap = db.snapshot()
    with pytest.raises(pydb.ClosedError):       # closing the database closes it
        snap.check()
    with pytest.raises(TypeError):
        _pydb.CheckRun(object())


# --------------------------------------------------------- the native index

WORDS = ["red apple", "green pear", "red pear"]


def _indexed(tmp_path, name="ix", n=30):
    """A database of n records (field 1 cycling through WORDS) with a
    native index of its words (FST 1 4 v1: APPLE, GREEN, PEAR, RED)."""
    base = tmp_path / name
    with pydb.create(base, fst="1 4 v1\n", gc="none") as db, db.transaction() as tx:
        for m in range(n):
            tx.append([(1, WORDS[m % 3])])
    return base


def test_check_reads_the_native_index(tmp_path):
    """A sound index: every key and posting read (4 keys; 2 words in each
    of 30 records), no fault; a database without an index has none read."""
    rep = run_check(_indexed(tmp_path))
    assert rep.problems == [] and rep.ok
    assert (rep.stats["index_checked"], rep.stats["index_keys"],
            rep.stats["index_postings"]) == (True, 4, 60)
    assert rep.summary().splitlines()[-2:] == ["native index: 4 keys, 60 postings read", "OK"]
    rep = run_check(_seeded(tmp_path, n=5))
    assert rep.ok and (rep.stats["index_checked"], rep.stats["index_keys"]) == (False, 0)


def test_check_walks_an_index_of_many_segments_as_lookups_read_it(tmp_path):
    """gc none keeps a segment per commit: 300 commits of updates and
    deletions leave 302 segments with tombstones and dead postings.  The
    index step walks every segment once (pydb__nidx_view_walk; a lookup
    per key visited each segment: 1,001 segments of the default database
    took 61 s, now 0.15 s) and reads exactly the live keys and postings
    that per-key lookups give."""
    base = tmp_path / "many"
    with pydb.create(base, fst="1 4 v1\n", gc="none") as db:
        with db.transaction() as tx:
            for m in range(60):
                tx.append([(1, f"{WORDS[m % 3]} k{'abcdefg'[m % 7]}y common")])
        for k in range(300):
            m = 1 + (k * 13) % 60
            if k % 10 == 9:
                db.delete(m) if not db[m].deleted else db.undelete(m)
            else:
                db.update(m, [(1, f"{WORDS[k % 3]} z{'abcdefghijk'[k % 11]}q common")])
        segments = db.stat()["index"]["segments"]
        keys = [t.key for t in db.index.terms()]
        postings = sum(len(db.index.postings(k)) for k in keys)
        rep = db.check()
    assert segments == 302      # create()'s, the load's, one per commit
    assert rep.ok and rep.problems == []
    assert (rep.stats["index_keys"], rep.stats["index_postings"]) == (len(keys), postings)
    assert len(keys) == 16 and postings > 150     # 5 words, 11 of the updates


def _segment(base) -> Path:
    segs = sorted(Path(f"{base}.pdx").glob("seg-*.pds"))
    assert segs, "the index keeps its segments inline"
    return segs[-1]


def test_check_reports_a_damaged_or_missing_index_file(tmp_path):
    """A flipped byte in a segment file, the file removed, a MANIFEST cut
    short: each one `index` error naming the file (and the offset the
    reader gives), where the check said OK before; the records are
    still walked."""
    base = _indexed(tmp_path, n=3000)      # large enough for a segment file
    seg = _segment(base)
    good = seg.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x20
    seg.write_bytes(bytes(bad))
    rep = run_check(base)
    assert rep.counts == {"index": 1} and not rep.ok
    p = rep.problems[0]
    assert (p.kind, p.mfn, p.file) == ("index", 0, str(seg))
    assert p.offset >= 0 and "checksum" in p.message
    assert rep.stats["mfns"] == 3000 and not rep.stats["index_checked"]
    seg.unlink()
    rep = run_check(base)
    manifest = str(Path(f"{base}.pdx") / "MANIFEST")
    assert [(p.kind, p.file, p.message) for p in rep.problems] == [
        ("index", manifest, f"names the segment {seg}, which is missing")]
    seg.write_bytes(good)
    assert run_check(base).ok
    text = Path(manifest).read_bytes()
    Path(manifest).write_bytes(text[:-3])
    rep = run_check(base)
    assert [(p.kind, p.file) for p in rep.problems] == [("index", manifest)]
    p = subprocess.run([sys.executable, "-m", "pydb", "check", str(base)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "index" in p.stdout


def test_check_reports_postings_of_records_that_are_not_active(tmp_path):
    """Postings the records do not back: a record deleted by a program
    that does not keep the index (WinISIS, CISIS: the files changed, the
    index not), and the index folder of a larger database copied in
    without its commit header (MFNs past the last one)."""
    from test_commit_header import _write_as_another_program
    base = _indexed(tmp_path)
    _write_as_another_program(base, lambda w: w.delete(4))   # "red apple"
    rep = run_check(base)
    assert [(p.kind, p.mfn, p.file, p.message) for p in rep.problems] == [
        ("index-posting", 4, f"{base}.pdx", f'key "{key}": a posting of MFN 4, which '
         "has no active record in the commit checked (NXTMFN 31)")
        for key in ("APPLE", "RED")]
    assert rep.stats["index_checked"]
    small = _indexed(tmp_path, "small", n=10)
    large = _indexed(tmp_path, "large")
    with pydb.open(large, readonly=False, gc="none") as w:
        w.append([(1, WORDS[0])])           # one commit more: MFN 31
    shutil.rmtree(f"{small}.pdx")
    shutil.copytree(f"{large}.pdx", f"{small}.pdx")
    rep = run_check(small)
    # the commit header names another MANIFEST generation: the index is
    # not the latest commit's
    assert [(p.kind, p.file) for p in rep.problems] == [
        ("index", str(Path(f"{small}.pdx") / "MANIFEST"))]
    assert "not the index of the latest commit" in rep.problems[0].message
    Path(f"{small}.shm").unlink()           # files mode: no generation to match
    rep = run_check(small)
    assert rep.counts == {"index-posting": 42}   # MFNs 11..31, two words each
    assert sorted({p.mfn for p in rep.problems}) == list(range(11, 32))


def test_check_reports_records_another_program_wrote_past_the_index(tmp_path):
    """Records another program added or changed (WinISIS, CISIS: the
    master file written, pydb's index not): searches miss them, and the
    check compares each record's postings with the keys the index's FST
    gives of it, so it names each of them (it said OK).  A rebuild
    (`pydb index`) mends it."""
    from test_commit_header import _write_as_another_program
    base = _indexed(tmp_path)

    def write(w):
        w.update(2, [(1, "yellow plum")])       # was "green pear"
        w.update(5, [(1, "pear green")])        # same keys, other positions
        w.append([(1, "green apple")])          # MFN 31
        w.append([(1, "blue plum")])            # MFN 32
    _write_as_another_program(base, write)
    with pydb.open(base) as db:
        assert len(db.search("PLUM")) == 0 and len(db) == 32
    rep = run_check(base)
    fix = ("the record changed without the index (another program wrote the master "
           "file?), and searches go by its old keys; rebuild the index (python -m "
           "pydb index)")
    assert [(p.kind, p.mfn, p.file, p.message) for p in rep.problems] == [
        ("index-posting", 2, f"{base}.pdx", "MFN 2: the index holds 2 postings of it, its "
         f"record gives 2 keys by the index's FST (other keys): {fix}"),
        ("index-posting", 5, f"{base}.pdx", "MFN 5: the index holds 2 postings of it, its "
         f"record gives 2 keys by the index's FST (other keys): {fix}"),
        ("index-posting", 31, f"{base}.pdx", "MFN 31: the index holds 0 postings of it, "
         f"its record gives 2 keys by the index's FST: {fix}"),
        ("index-posting", 32, f"{base}.pdx", "MFN 32: the index holds 0 postings of it, "
         f"its record gives 2 keys by the index's FST: {fix}")]
    assert not rep.ok and rep.stats["index_checked"]
    p = subprocess.run([sys.executable, "-m", "pydb", "index", str(base)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rep = run_check(base)
    assert rep.ok and rep.problems == []
    with pydb.open(base) as db:
        assert sorted(db.search("PLUM")) == [2, 32]


def test_an_fst_that_posts_to_other_mfns_is_not_a_fault(tmp_path):
    """A technique of 1000 and up names the MFN its keys are posted to
    (`'/1/'`: every record's words go to MFN 1, docs/isis-formats.md
    §5.2): the comparison of records with their postings is left out
    there, the other checks run (it reported every record: found by a
    review); with the FST's other line alone it compares again and
    finds a record changed behind the index."""
    from test_commit_header import _write_as_another_program
    base = tmp_path / "other"
    with pydb.create(base, fst="1 1004 '/1/',v1\n2 4 v2\n", gc="none") as db:
        db.append([(1, "red apple"), (2, "x y")])
        db.append([(1, "green"), (2, "z")])
        assert db.search("GREEN") == [1]
    rep = run_check(base)
    assert rep.ok and rep.problems == [] and rep.stats["index_checked"]
    plain = tmp_path / "plain"
    with pydb.create(plain, fst="2 4 v2\n", gc="none") as db:
        db.append([(2, "x y")])
        db.append([(2, "z")])
    _write_as_another_program(plain, lambda w: w.update(2, [(2, "w")]))
    assert [(p.kind, p.mfn) for p in run_check(plain).problems] == [("index-posting", 2)]


def test_postings_for_a_record_that_does_not_exist_are_no_fault(tmp_path):
    """A line of technique 1000 and up may name an MFN no record has (yet)
    or a deleted one: CISIS posts there too, and a database pydb alone
    wrote checks clean (it reported an index-posting error: a review)."""
    base = tmp_path / "db"
    with pydb.create(base, fst="24 1000 '/'v1'/'v24/\n70 0 v70\n", gc="none") as db:
        db.append([(1, "1"), (24, "ALPHA")])
        db.append([(1, "5"), (24, "BETA")])    # MFN 5: no record
        db.append([(1, "1"), (24, "GAMMA")])
        assert db.search("BETA") == [5] and db.search("GAMMA") == [1]
        db.delete(2)
        rep = db.check()
        assert rep.ok and rep.problems == [], rep.summary()
    assert run_check(base).ok


def test_check_of_the_index_beside_a_writer_process(tmp_path):
    """Checks while another process commits appends, updates, deletions
    and undeletions, each with its postings: the index read as of one
    commit is sound every time."""
    base = _indexed(tmp_path, n=300)
    writer = _WriterProcess(base, tmp_path)
    try:
        with pydb.open(base) as db:
            # at least 10 checks, and on until the writer has committed 3
            # times meanwhile (a check takes milliseconds: 10 could all end
            # before a writer under a sanitizer committed twice)
            first = db.stat(index=False)["header"]["commit"]
            deadline = time.monotonic() + 60
            reps = []
            while len(reps) < 10 or (
                    db.stat(index=False)["header"]["commit"] - first < 3
                    and time.monotonic() < deadline):
                reps.append(db.check())
    finally:
        commits = writer.stop()
    assert commits >= 3
    assert [r.problems for r in reps] == [[]] * len(reps)
    assert sum(r.stats["index_checked"] for r in reps) >= 0.8 * len(reps)


def test_check_reports_a_missing_manifest(tmp_path):
    """The MANIFEST removed while the commit header names an index
    generation: an `index` error (it was "no index", OK)."""
    base = _indexed(tmp_path)
    manifest = Path(f"{base}.pdx") / "MANIFEST"
    manifest.unlink()
    rep = run_check(base)
    assert [(p.kind, p.file) for p in rep.problems] == [("index", str(manifest))]
    assert rep.problems[0].message.startswith("missing, while the latest commit")


INDEX_WRITER = """
import os, sys, pydb
db = pydb.open(sys.argv[1], readonly=False, gc="none")
print("ready", flush=True)
n = 0
while not os.path.exists(sys.argv[2]):
    m = db.append([(1, "blue sky")])
    db.delete(m - 1)
    n += 1
print(n, flush=True)
"""


def test_check_of_the_index_without_a_header_beside_a_writer(tmp_path):
    """Without a usable commit header (here a folder in its place) nothing
    ties the index to the control record, which a writer updates and
    syncs before it puts the index's MANIFEST in place: checks while
    another process appends and deletes report no fault (the first pass
    notes the postings of a commit in progress, the second does not find
    them again).  Reviewer's reproducer: 251 of 1,395 reports had
    index-posting errors before the second pass."""
    base = _indexed(tmp_path, n=300)
    Path(f"{base}.shm").unlink()
    Path(f"{base}.shm").mkdir()
    stop = tmp_path / "stop"
    p = subprocess.Popen([sys.executable, "-c", INDEX_WRITER, str(base), str(stop)],
                         cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        reps, t0 = [], time.monotonic()
        with pydb.open(base) as db:
            while time.monotonic() - t0 < 3:
                reps.append(db.check())
    finally:
        stop.touch()
        out, _ = p.communicate(timeout=120)
    assert p.returncode == 0 and int(out.split()[-1]) >= 2
    # (the walk of the records in files mode sees the files as they are,
    # as other CDS/ISIS tools do, and may report the writer's appends
    # past the control record it read: see pydb.check)
    assert [str(q) for r in reps for q in r.problems if q.kind.startswith("index")] == []
    assert any(r.stats["index_checked"] for r in reps)


class _commit_caught:
    """A commit of change(db) to the database at `base` (files mode)
    caught where a writer of another process may be for as long as an
    fsync takes: its records in the master file and the XRF, its frame in
    the log and the writer lock held (an OFD lock on the whole .wal, as
    csrc/wal.c takes it), the index's MANIFEST not yet in place.  The
    commit is made on the files, then its MANIFEST put back; the frame is
    bytes no replay would take (nobody replays while the lock is held).
    ``finish()`` ends it: the MANIFEST, the log emptied, the lock let go."""

    def __init__(self, base, change):
        self.pdx = Path(f"{base}.pdx")
        before = {p.name: p.read_bytes() for p in self.pdx.iterdir()}
        with pydb.open(base, readonly=False, gc="none") as db, db.transaction() as tx:
            change(tx)
        self.after = {p.name: p.read_bytes() for p in self.pdx.iterdir()}
        assert [n for n in before if before[n] != self.after.get(n, before[n])] == ["MANIFEST"]
        for name in set(before) - set(self.after):
            (self.pdx / name).write_bytes(before[name])
        (self.pdx / "MANIFEST").write_bytes(before["MANIFEST"])
        self.fd = os.open(f"{base}.wal", os.O_RDWR)
        lock = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, lock)
        os.write(self.fd, b"\0" * 512)
        self.finished = None

    def finish(self):
        if self.fd >= 0:
            (self.pdx / "MANIFEST.new").write_bytes(self.after["MANIFEST"])
            os.replace(self.pdx / "MANIFEST.new", self.pdx / "MANIFEST")
            # stamped before the log empties: a check sees the commit in
            # progress up to then (after it, a check could return before
            # the stamp: 28 us before it in a full run)
            self.finished = time.monotonic()
            os.ftruncate(self.fd, 0)
            os.close(self.fd)   # the lock goes with its description
            self.fd = -1

    def check_while_held(self, base, seconds):
        """db.check() of `base` while the commit stays in progress for
        `seconds`: (the report, time.monotonic() when check() returned)."""
        t = threading.Timer(seconds, self.finish)
        t.start()
        try:
            with pydb.open(base) as db:
                rep = db.check()
            return rep, time.monotonic()
        finally:
            t.join()
            self.finish()


def _index_faults(rep):
    return [(q.kind, q.mfn) for q in rep.problems if q.kind.startswith("index")]


def _files_mode(base):
    Path(f"{base}.shm").unlink()
    Path(f"{base}.shm").mkdir()


def test_check_without_a_header_waits_for_a_commit_in_progress(tmp_path):
    """A commit caught between its control record and its index's
    MANIFEST for longer than the first look again (50 ms: a slow fsync
    on a loaded machine): the check waits until the commit is done and
    the record's postings are there, and reports nothing.  It reported
    "MFN 387: the index holds 0 postings of it" (CI, also under ASan)."""
    base = _indexed(tmp_path, n=300)
    _files_mode(base)
    commit = _commit_caught(base, lambda tx: tx.append([(1, "blue sky")]))
    rep, returned = commit.check_while_held(base, 0.4)
    assert _index_faults(rep) == []
    assert rep.stats["index_checked"] and returned > commit.finished
    assert run_check(base).ok   # and the files are sound once it is done


def test_check_without_a_header_reports_a_fault_that_stays(tmp_path):
    """A record another program changed (a fault that stays) is reported
    while this handle holds a transaction open (the writer lock, but no
    commit in progress: the log is empty), and after a commit in
    progress of 4,200 faults of its own (more than the check notes one
    by one) is done; a review found it missed there.  While a commit
    stays in progress longer than the check looks (2 s) the index is
    left unchecked, with no fault made up."""
    from test_commit_header import _write_as_another_program
    base = _indexed(tmp_path, n=2500)
    _write_as_another_program(base, lambda w: w.update(2500, [(1, "yellow plum")]))
    _files_mode(base)
    want = [("index-posting", 2500)]
    with pydb.open(base, readonly=False) as db, db.transaction():
        assert _index_faults(db.check()) == want
    commit = _commit_caught(base, lambda tx: [tx.delete(m) for m in range(1, 2101)])
    rep, returned = commit.check_while_held(base, 0.2)
    assert _index_faults(rep) == want and returned > commit.finished
    commit = _commit_caught(base, lambda tx: tx.append([(1, "blue sky")]))
    rep, returned = commit.check_while_held(base, 3)
    assert _index_faults(rep) == [] and not rep.stats["index_checked"]
    assert returned < commit.finished
    assert _index_faults(run_check(base)) == want


@pytest.mark.parametrize("io", ["pread", "mmap"])
def test_a_master_file_cut_after_open_is_one_problem(tmp_path, io):
    """A master file another program truncated after the handle opened it:
    the check says so once and stops, the native index's comparison too.
    It reported an I/O error for each MFN past the cut and then one for
    each byte of the orphan scan (1.9 million on a 1 MB file); the index
    comparison then blamed the records the walk read as changed behind
    the index (314 errors); through a mapping, the zeros of the last page
    were MFN mismatches first (a review)."""
    base = tmp_path / "db"
    with pydb.create(base, fst="24 0 v24\n") as db, db.transaction() as tx:
        for i in range(400):
            tx.append([(24, f"record {i} " * 20)])
    with pydb.open(base, io=io) as db:
        os.truncate(f"{base}.mst", 20_000)
        rep = db.check()
        assert [p.kind for p in rep.problems] == ["io"] and rep.counts == {"io": 1}
        assert "the file is 20000 bytes now" in rep.problems[0].message
        assert "shrank after the database was opened" in rep.problems[0].message
        assert rep.errors == 1 and not rep.stats["scanned"]
        assert not rep.stats["index_checked"]
