"""Database.stat() and ``python -m pydb stat`` (csrc/stat.c): exact figures.

Every figure is checked against an independent count: a small pure-Python
reader of the XRF and the master file below (py_stat), written from
docs/isis-formats.md §2-3 and the leader table in conftest.GEOM, not from
the C code; plus the numbers the scripts of the tests make by
construction (N updates make N back versions...).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pydb

from conftest import GEOM, copy_db

BLOCK = 512


def i32(b: bytes, off: int) -> int:
    return int.from_bytes(b[off:off + 4], "little", signed=True)


def u16(b: bytes, off: int) -> int:
    return int.from_bytes(b[off:off + 2], "little")


def i16(b: bytes, off: int) -> int:
    return int.from_bytes(b[off:off + 2], "little", signed=True)


def xrf_offset(raw: int, mstxl: int) -> int | None:
    """The byte offset an XRF value names (docs/isis-formats.md §3.2), or
    None for an unused or physically deleted entry."""
    if raw == 0:
        return None
    v = -raw if raw < 0 else raw
    block = v >> (11 - mstxl)
    low = v & ((1 << (11 - mstxl)) - 1)
    off = (block - 1) * BLOCK + ((low & (0x1FF >> mstxl)) << mstxl)
    if raw < 0 and (off == 0 or raw == -2048):
        return None
    return off


def py_stat(base: Path, layout: str, pinned_from: int | None = None) -> dict:
    """What stat() must say about the files at `base`, counted in Python:
    records active/deleted, versions, back versions, longest chain, the
    bytes (MFRL) of all versions, of the garbage (the back versions, but
    the first of the chain of an "update pending" record: the version an
    ISIS inverted file reflects) and of the current ones; with
    `pinned_from` (the oldest reader's end of records) the garbage
    versions whose next-newer version lies at or after it."""
    mst = Path(f"{base}.mst").read_bytes()
    xrf = Path(f"{base}.xrf").read_bytes()
    g = GEOM[layout]
    next_mfn = i32(mst, 4)
    mstxl = u16(mst, 14) >> 8
    out = dict(active=0, deleted=0, next_mfn=next_mfn, versions=0, back=0,
               longest=0, version_bytes=0, garbage=0, garbage_bytes=0, live_bytes=0,
               pinned=0, pinned_bytes=0, size=len(mst))

    def leader(off: int, mfn: int) -> tuple[int, int]:
        assert i32(mst, off) == mfn
        mfrl = i32(mst, off + g["mfrl"]) if g["ffi"] else i16(mst, off + g["mfrl"])
        mfbwb = i32(mst, off + g["mfbwb"])
        mfbwp = u16(mst, off + g["mfbwp"])
        back = (mfbwb - 1) * BLOCK + mfbwp if mfbwb > 0 else -1
        return abs(mfrl), back

    for mfn in range(1, next_mfn):
        b, slot = divmod(mfn - 1, 127)
        raw = i32(xrf, b * BLOCK + 4 + 4 * slot)
        off = xrf_offset(raw, mstxl)
        if off is None:
            continue
        out["deleted" if raw < 0 else "active"] += 1
        pending = abs(raw) & (0x200 >> mstxl)
        chain, newer = 0, None
        while True:
            mfrl, back = leader(off, mfn)
            chain += 1
            out["versions"] += 1
            out["version_bytes"] += mfrl
            if newer is None:
                out["live_bytes"] += mfrl
            elif back < 0 and pending:
                out["back"] += 1        # kept for the ISIS inverted file
            else:
                out["back"] += 1
                out["garbage"] += 1
                out["garbage_bytes"] += mfrl
                if pinned_from is not None and newer >= pinned_from:
                    out["pinned"] += 1
                    out["pinned_bytes"] += mfrl
            if back < 0:
                break
            assert back < off
            newer, off = off, back
        out["longest"] = max(out["longest"], chain)
    return out


def assert_matches(s: dict, p: dict) -> None:
    """stat() figures against py_stat()'s."""
    assert s["records"] == {"active": p["active"], "deleted": p["deleted"],
                            "next_mfn": p["next_mfn"], "damaged": 0, "first_damage": None}
    v = s["versions"]
    assert v["versions"] == p["versions"]
    assert v["back_versions"] == p["back"]
    assert v["longest_chain"] == p["longest"]
    if p["versions"]:
        assert v["average_size"] == pytest.approx(p["version_bytes"] / p["versions"])
    g = s["garbage"]
    assert g["versions"] == p["garbage"]
    assert g["bytes"] == p["garbage_bytes"]
    assert g["pinned_versions"] == p["pinned"]
    assert g["pinned_bytes"] == p["pinned_bytes"]
    assert g["collectable_versions"] == p["garbage"] - p["pinned"]
    assert g["collectable_bytes"] == p["garbage_bytes"] - p["pinned_bytes"]
    m = s["master_file"]
    assert m["live_bytes"] == p["live_bytes"]
    assert m["size"] == p["size"]
    assert m["fill"] == pytest.approx(p["live_bytes"] / p["size"])


SHAPE = {
    "header": {"commit", "oldest_reader_commit", "behind", "readers", "gc_policy",
               "file_generation", "collections", "last_collection", "last",
               "last_error", "pending", "collector_pid"},
    "records": {"active", "deleted", "next_mfn", "damaged", "first_damage"},
    "versions": {"versions", "back_versions", "longest_chain", "average_size"},
    "garbage": {"versions", "bytes", "postings", "segment_files", "pinned_versions",
                "pinned_bytes", "collectable_versions", "collectable_bytes"},
    "master_file": {"size", "live_bytes", "fill"},
}
INDEX_KEYS = {"segments", "terms", "postings", "dead_postings", "tombstones", "bytes",
              "files", "unused_files", "unused_bytes"}


def fields(i: int, n: int = 20) -> list[tuple[int, str]]:
    return [(10, f"record {i} " + "x" * n), (20, "second field")]


# --------------------------------------------------------------- small dbs


def test_shape_of_an_empty_database(tmp_path):
    with pydb.create(str(tmp_path / "e"), gc="none") as db:
        s = db.stat()
    assert set(s) == set(SHAPE) | {"index"}
    for k, keys in SHAPE.items():
        assert set(s[k]) == keys, k
    assert s["index"] is None
    assert s["records"] == {"active": 0, "deleted": 0, "next_mfn": 1, "damaged": 0,
                            "first_damage": None}
    assert s["versions"] == {"versions": 0, "back_versions": 0, "longest_chain": 0,
                             "average_size": 0.0}
    h = s["header"]
    assert h["oldest_reader_commit"] is None and h["behind"] == 0 and h["readers"] == 0
    assert h["gc_policy"] == "none" and h["file_generation"] == 0
    assert h["collections"] == 0 and h["last_collection"] is None
    assert h["last_error"] is None and h["collector_pid"] is None
    assert set(h["last"]) == {"versions", "bytes", "postings", "segments",
                              "compactions", "pinned"}


@pytest.mark.parametrize("layout", list(GEOM))
def test_exact_figures_after_updates_and_deletes(tmp_path, layout):
    base = tmp_path / "s"
    with pydb.create(str(base), layout=layout, gc="none", sync=False) as db:
        for i in range(1, 11):
            db.append(fields(i))
        for k in range(4):                 # record 1: 4 updates
            db.update(1, fields(100 + k, 10 * k))
        for k in range(2):                 # record 2: 2 updates
            db.update(2, fields(200 + k))
        db.delete(3)                       # logically deleted
        db.delete(4)
        db.undelete(4)
        s = db.stat()
        p = py_stat(base, layout)
        assert_matches(s, p)
        # by construction
        assert s["records"] == {"active": 9, "deleted": 1, "next_mfn": 11, "damaged": 0,
                                "first_damage": None}
        assert s["versions"]["longest_chain"] == 5
        assert s["garbage"]["pinned_versions"] == 0
        assert s["header"]["readers"] == 0
        assert s["header"]["commit"] >= 18


def test_garbage_bytes_are_the_back_versions_mfrl(tmp_path):
    """Garbage bytes = the sum of the MFRL of the back versions, read here
    from each version's leader (Database.versions gives every version)."""
    base = tmp_path / "b"
    with pydb.create(str(base), gc="none", sync=False) as db:
        db.append(fields(1))
        db.append(fields(2))
        for k in range(6):
            db.update(1, fields(1, 5 * k))
        s = db.stat()
        chain = db.versions(1)
        assert len(chain) == 7
        mst = Path(f"{base}.mst").read_bytes()
        offs = [r.offset for r in chain]
        mfrls = [abs(i16(mst, o + GEOM["isis-packed"]["mfrl"])) for o in offs]
        assert s["garbage"]["versions"] == 6
        assert s["garbage"]["bytes"] == sum(mfrls[1:])
        assert s["master_file"]["live_bytes"] == mfrls[0] + abs(
            i16(mst, db.xrf_entry(2)["offset"] + GEOM["isis-packed"]["mfrl"]))
        assert s["versions"]["versions"] == 8


def test_pinned_by_a_snapshot_in_this_process(tmp_path):
    base = tmp_path / "p"
    with pydb.create(str(base), gc="none", sync=False) as db:
        for i in range(1, 6):
            db.append(fields(i))
        db.update(5, fields(55))   # one back version before the snapshot
        snap = db.snapshot()
        end = snap.info()["mst_end"]
        commit = snap.commit
        n = 7
        for k in range(n):
            db.update(1, fields(1, k))
        db.update(2, fields(2, 3))
        s = db.stat()
        h = s["header"]
        assert h["readers"] == 1
        assert h["oldest_reader_commit"] == commit
        assert h["behind"] == h["commit"] - commit == n + 1
        # every back version superseded after the snapshot's end is pinned
        # (record 1: n, record 2: 1); record 5's is not
        assert s["garbage"]["versions"] == n + 2
        assert s["garbage"]["pinned_versions"] == n + 1
        assert s["garbage"]["collectable_versions"] == 1
        assert_matches(s, py_stat(base, "isis-packed", pinned_from=end))
        # the snapshot still reads its versions
        assert snap[1][10][0] == fields(1)[0][1]
        snap.close()
        s = db.stat()
        assert s["header"]["readers"] == 0
        assert s["header"]["oldest_reader_commit"] is None
        assert s["header"]["behind"] == 0
        assert s["garbage"]["pinned_versions"] == 0
        assert s["garbage"]["pinned_bytes"] == 0
        assert s["garbage"]["collectable_versions"] == n + 2


HOLDER = r"""
import sys, pydb
db = pydb.open(sys.argv[1])
snap = db.snapshot()
print(snap.commit, snap.info()["mst_end"], flush=True)
sys.stdin.readline()
snap.close()
db.close()
print("released", flush=True)
"""


def test_pinned_by_a_snapshot_in_another_process(tmp_path):
    base = tmp_path / "q"
    db = pydb.create(str(base), gc="none", sync=False)
    for i in range(1, 4):
        db.append(fields(i))
    env = dict(os.environ, PYTHONPATH=str(Path(pydb.__file__).parents[1]))
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(base)], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        commit, end = map(int, child.stdout.readline().split())
        for k in range(4):
            db.update(2, fields(2, k))
        s = db.stat()
        assert s["header"]["readers"] == 1
        assert s["header"]["oldest_reader_commit"] == commit
        assert s["header"]["behind"] == 4
        assert s["garbage"]["pinned_versions"] == 4
        assert_matches(s, py_stat(base, "isis-packed", pinned_from=end))
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "released"
        assert child.wait(timeout=30) == 0
        s = db.stat()
        assert s["header"]["readers"] == 0
        assert s["garbage"]["pinned_versions"] == 0
        assert s["garbage"]["collectable_versions"] == 4
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        db.close()


def test_readonly_handle_and_files_mode(tmp_path):
    base = tmp_path / "r"
    with pydb.create(str(base), gc="none", sync=False) as db:
        for i in range(1, 4):
            db.append(fields(i))
        db.update(3, fields(33))
    with pydb.open(str(base)) as db:
        s = db.stat()
        assert_matches(s, py_stat(base, "isis-packed"))
        assert s["header"]["gc_policy"] == "background"
    # without the commit header: the state comes from the control record
    os.remove(f"{base}.shm")
    with pydb.open(str(base)) as db:
        s = db.stat()
        assert s["header"]["commit"] == 0
        assert_matches(s, py_stat(base, "isis-packed"))


def test_stat_while_a_writer_commits(tmp_path):
    """stat() takes a snapshot: its figures are one commit's, whole, while
    another thread commits (each record's chain is complete)."""
    import threading
    base = tmp_path / "w"
    db = pydb.create(str(base), gc="none", sync=False)
    for i in range(1, 21):
        db.append(fields(i))
    stop = threading.Event()

    def writer():
        k = 0
        while not stop.is_set():
            db.update(1 + k % 20, fields(k))
            k += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            s = db.stat()
            assert s["records"]["active"] == 20
            assert s["versions"]["versions"] == 20 + s["versions"]["back_versions"]
            assert s["garbage"]["versions"] == s["versions"]["back_versions"]
    finally:
        stop.set()
        t.join()
    assert_matches(db.stat(), py_stat(base, "isis-packed"))
    db.close()


def test_native_index_figures(tmp_path):
    """With a native index attached (a writable handle made with an FST)
    stat() reports the index section: one segment per commit until a
    collection; the postings of replaced versions are dead; after
    collect() one segment, no dead posting, no tombstone.  A read-only
    handle, which has no commit hook, reads the index for the figures
    (it said None, as if there were no index: found by a review); with
    index=False none are read."""
    base = tmp_path / "n"
    with pydb.create(str(base), fst="1 4 v10", gc="none", sync=False) as db:
        for i in range(1, 6):
            db.append([(10, f"alpha beta{i}")])
        db.update(2, [(10, "gamma")])
        ix = db.stat()["index"]
        assert set(ix) == INDEX_KEYS
        # the empty segment of create() and one per commit, the commits'
        # inline in the MANIFEST: one file
        assert ix["segments"] == 7 and ix["files"] == 1
        # ALPHA x5 + BETA x5 + GAMMA; MFN 2's ALPHA and BETA are dead
        assert ix["postings"] == 11
        assert ix["dead_postings"] == 2
        assert ix["tombstones"] == 6   # one per changed MFN per commit
        assert ix["terms"] == 3
        s = db.stat()
        assert s["garbage"]["postings"] == 2
        db.collect(timeout=30)
        ix = db.stat()["index"]
        assert ix["segments"] == 1 and ix["dead_postings"] == 0
        assert ix["tombstones"] == 0 and ix["postings"] == 9
        assert ix["files"] == 0 and ix["unused_files"] == 0   # inline
        db.update(3, [(10, "delta")])
        writer = db.stat()
    with pydb.open(str(base)) as db:
        s = db.stat()
        assert s["index"] == writer["index"] and s["index"]["dead_postings"] == 2
        assert s["garbage"]["postings"] == 2
        assert db.stat(index=False)["index"] is None


# ------------------------------------------------------------ the CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(Path(pydb.__file__).parents[1]))
    return subprocess.run([sys.executable, "-m", "pydb", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_stat_text_and_json(tmp_path):
    base = tmp_path / "c"
    with pydb.create(str(base), gc="none", sync=False) as db:
        for i in range(1, 4):
            db.append(fields(i))
        db.update(1, fields(11))
        db.delete(2)
        expect = db.stat()
    p = run_cli("stat", str(base), "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    for k in ("records", "versions", "garbage", "master_file"):
        assert s[k] == expect[k], k
    p = run_cli("stat", str(base))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for title in ("Database header", "Records", "Versions", "Garbage", "Master file",
                  "Native index"):
        assert f"\n{title}\n" in out
    assert "    Logically deleted       1\n" in out
    assert "    Back versions           2\n" in out
    p = run_cli("stat", str(tmp_path / "missing"))
    assert p.returncode == 1 and "pydb:" in p.stderr
    assert "    Present                 no\n" in out


def test_stat_counts_a_damaged_record_and_goes_on(tmp_path, capsys):
    """A record whose leader is damaged (its MFN overwritten) is counted as
    damaged, the first one's error kept, and the walk goes on: the other
    records' versions are counted (one damaged record made stat() fail as
    a whole: a review).  pydb stat shows the figures and exits 1 naming
    it."""
    from pydb.__main__ import main
    base = tmp_path / "d"
    with pydb.create(str(base), gc="none", sync=False) as db:
        for i in range(1, 6):
            db.append(fields(i))
        db.update(4, fields(14))
        whole = db.stat()
        off = db[3].offset
    with open(f"{base}.mst", "r+b") as f:
        f.seek(off)
        f.write(b"\xff\xff\xff\x7f")                  # MFN 2147483647
    with pydb.open(str(base)) as db:
        r = db.stat()
    assert r["records"]["damaged"] == 1 and whole["records"]["damaged"] == 0
    assert whole["records"]["first_damage"] is None
    assert r["records"]["first_damage"] == (
        f"{base}.mst at byte {off}: the record at offset {off} has MFN 2147483647, but "
        "the XRF entry of MFN 3 points there")
    assert r["versions"]["versions"] == whole["versions"]["versions"] - 1
    assert r["versions"]["back_versions"] == whole["versions"]["back_versions"] == 1
    assert main(["stat", str(base)]) == 1
    out, err = capsys.readouterr()
    assert "    Damaged                 1\n" in out and "    Back versions           1\n" in out
    assert err == (f"pydb stat: 1 damaged record(s), not counted from the damage on; the "
                   f"first: {r['records']['first_damage']} (pydb check {base} lists them)\n")


def test_cli_stat_names_an_index_it_cannot_read(tmp_path):
    """A native index whose MANIFEST names a segment file that is gone:
    the figures of the index cannot be read, the others are shown (a
    read-only handle: pydb stat changes no file), and "Present" says the
    index is there but unreadable, and why (it said "no")."""
    base = tmp_path / "x"
    with pydb.create(str(base), fst="1 4 v1\n", gc="none") as db, db.transaction() as tx:
        for i in range(3000):
            tx.append([(1, f"word{i % 7} text")])
    seg = sorted(Path(f"{base}.pdx").glob("seg-*.pds"))[-1]
    seg.unlink()
    p = run_cli("stat", str(base))
    assert p.returncode == 0, p.stderr
    manifest = Path(f"{base}.pdx") / "MANIFEST"
    assert (f"    Present                 yes, unreadable ({manifest}: names the "
            f"segment {seg}, which is missing); pydb index {base} rebuilds it\n") in p.stdout
    # a MANIFEST that cannot be read at all (a DiskError, as EACCES or EIO
    # would be): named too, the other figures shown
    manifest.unlink()
    manifest.mkdir()
    p = run_cli("stat", str(base))
    assert p.returncode == 0, p.stderr
    assert "    Active                  3000\n" in p.stdout
    assert "    Present                 yes, unreadable ([Errno 21] " in p.stdout


# ------------------------------------------------------------ real data


REAL = [
    # (base path under the data folder, back versions, deleted records);
    # every back version of these is the one version an ISIS inverted
    # file reflects of an "update pending" record: no garbage
    ("ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/unimarc/data/unimarc", 4, 0),
    ("ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/servers/data/servers", 4, 6),
    ("cpan__Biblio-Isis-0.24/data/winisis/BIBL", 1, 1),
    ("bireme__isis2json/fixtures/cds/cds", 0, 0),
]


@pytest.mark.parametrize("rel,back,deleted", REAL, ids=[r[0].split("/")[-1] for r in REAL])
def test_real_databases(tmp_path, isis_data, rel, back, deleted):
    src = isis_data / rel
    if not any(src.parent.glob(src.name + ".*")):
        pytest.skip(f"{rel} not in the data folder")
    base = copy_db(src, tmp_path / "db")
    with pydb.open(str(base)) as db:
        layout = db.layout
        s = db.stat()
    p = py_stat(base, layout)
    assert_matches(s, p)
    assert s["versions"]["back_versions"] == back
    assert s["garbage"]["versions"] == 0
    assert s["records"]["deleted"] == deleted
    assert s["garbage"]["pinned_versions"] == 0


def test_stat_while_compactions_replace_the_files(tmp_path):
    """stat() on the compacting handle and on a second, read-only handle
    while another thread updates records and collects (each collection a
    compaction that replaces the .mst/.xrf pair): every answer is one
    commit's figures, whole (no error, the chains add up), and the file
    generation only grows."""
    import threading
    base = tmp_path / "k"
    db = pydb.create(str(base), gc="none", sync=False)
    for i in range(1, 41):
        db.append(fields(i))
    ro = pydb.open(str(base))
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn():
        k = 0
        try:
            while not stop.is_set():
                # a compaction per 100 updates: a stat() that a compaction
                # interrupts starts again, up to 50 times (stat.c), which
                # a compaction per 20 updates could exhaust on a loaded
                # machine
                for _ in range(100):
                    db.update(1 + k % 40, fields(k))
                    k += 1
                db.collect(timeout=10)
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=churn)
    t.start()
    gens = []
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for h in (db, ro):
                s = h.stat()
                assert s["records"]["active"] == 40
                v = s["versions"]
                assert v["versions"] == 40 + v["back_versions"]
                assert s["garbage"]["versions"] == v["back_versions"]
                gens.append(s["header"]["file_generation"])
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert max(gens) >= 1                 # compactions happened meanwhile
    db.collect(timeout=10)
    assert_matches(db.stat(), py_stat(base, "isis-packed"))
    ro.close()
    db.close()
