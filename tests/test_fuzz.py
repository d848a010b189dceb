"""The fuzz targets of fuzz/ replayed as a plain test (docs/fuzzing.md).

Each target is built with gcc, AddressSanitizer and UndefinedBehaviorSanitizer
and fuzz/standalone.c as its main (fuzz/Makefile, `make standalone`), then
fed its seed corpus (fuzz/make_seeds.py: the real files under PYDB_TEST_DATA
when present, and the databases, exports and texts pydb makes) and the
regression inputs of fuzz/regressions.py, each a crash the fuzzers found,
made by a generator function rather than kept as a file.  The run must end
with exit 0 and no sanitizer report; every regression input must also give
exactly the error its generator names.

Skips without gcc and make (or off Linux).  No libFuzzer, no clang: the
fuzzing itself is `fuzz/run` (docs/fuzzing.md).
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import pydb

from conftest import DATA, REPO

sys.path.insert(0, str(REPO / "fuzz"))
import atheris_targets  # noqa: E402
import make_seeds  # noqa: E402
import regressions  # noqa: E402

TARGETS = make_seeds.TARGETS
REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
           "AddressSanitizer:DEADLYSIGNAL")


def sanitizer_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "PYDB_FUZZ_VERBOSE")}
    # allocations over 2 GiB are reports, as libFuzzer's -malloc_limit_mb
    # (= fuzz/run's -rss_limit_mb=2048) makes them: memory bounded by the
    # input (docs/fuzzing.md, resource bounds)
    env["ASAN_OPTIONS"] = ("detect_leaks=1:abort_on_error=0:exitcode=86:"
                           "max_allocation_size_mb=2048:allocator_may_return_null=0")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Path:
    """fuzz/Makefile's standalone builds, in a temporary folder."""
    gcc, make = shutil.which("gcc"), shutil.which("make")
    if not gcc or not make or not sys.platform.startswith("linux"):
        pytest.skip("needs gcc and make on Linux")
    build = tmp_path_factory.mktemp("fuzzbuild")
    p = subprocess.run([make, "-s", "-j2", "-C", str(REPO / "fuzz"), "standalone",
                        f"BUILD={build}", f"GCC={gcc}"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return build / "standalone"


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("seeds")
    assert make_seeds.main(["--data", str(DATA), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def regression_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("regressions")
    regressions.write(out)
    return out


def run(exe: Path, *paths: Path, verbose: bool = False) -> subprocess.CompletedProcess[str]:
    env = sanitizer_env()
    if verbose:
        env["PYDB_FUZZ_VERBOSE"] = "1"
    return subprocess.run([str(exe), *map(str, paths)], capture_output=True, text=True,
                          env=env, timeout=300)


def assert_clean(p: subprocess.CompletedProcess[str]) -> None:
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    for r in REPORTS:
        assert r not in out, out[-4000:]


@pytest.mark.parametrize("target", TARGETS)
def test_seeds_replay_clean(standalone, seeds, target):
    corpus = seeds / target
    n = len(list(corpus.iterdir()))
    assert n > 0, f"make_seeds.py made no seeds for {target}"
    p = run(standalone / f"fuzz_{target}", corpus)
    assert_clean(p)
    assert f"ran {n} inputs" in p.stdout


@pytest.mark.parametrize("lind", [False, True], ids=["classic", "lind"])
def test_isis_seed_writer_reads_back(tmp_path, lind):
    """make_seeds.isis_inverted (the isis_index seeds without the real
    data) writes ISIS inverted files that pydb's reader opens as such and
    reads back exactly: the keys and postings of the native index they
    were made from (LIND lists keep MFN and CNT, docs/isis-formats.md
    §4.7), through trees of two levels in tree 1 and one in tree 2."""
    records = [[(24, "The survey of water"), (30, f"KEY{i:04d}"),
                (26, f"A publisher name longer than ten {i % 3}")] for i in range(1, 131)]
    fst = "24 4 V24\n26 0 V26\n30 0 V30\n"
    with pydb.create(tmp_path / "native", fst=fst, max_key=30) as db:
        for r in records:
            db.append(r)
        terms = make_seeds.index_terms(db)
    parts = make_seeds.isis_inverted(terms, lind).split(make_seeds.SEP)
    with pydb.create(tmp_path / "db") as db:
        for r in records:
            db.append(r)
    # (the classic set's trailing LIND parts are dropped: not strict)
    for ext, blob in zip(make_seeds.ISIS_INDEX_EXTS, parts, strict=False):
        if blob:
            (tmp_path / f"db.{ext}").write_bytes(blob)
    with pydb.open(tmp_path / "db") as db:
        info = db.index.info
        assert (db.index.kind, info["le1"], info["le2"]) == (
            ("isis-lind", 16, 60) if lind else ("isis-classic", 10, 30))
        assert [(t["liv"], t["leaves"]) for t in info["trees"]] == [(1, 14), (0, 1)]
        got = make_seeds.index_terms(db)
    assert len(terms) == 135 and sum(len(p) for _, p in terms) == 130 * 6
    if lind:
        terms = [(k, [(m, 0, 0, c) for m, _t, _o, c in p]) for k, p in terms]
    assert got == terms


@pytest.mark.parametrize("target", sorted(atheris_targets.TARGETS))
def test_python_targets_replay_seeds(seeds, target):
    """The atheris targets' checks (fuzz/atheris_targets.py) hold on their
    seeds, without atheris: the tolerant ISO 2709 reader and the JSON Lines
    reader."""
    files = sorted((seeds / target).iterdir())
    assert files
    for f in files:
        atheris_targets.TARGETS[target](f.read_bytes())


def test_real_seeds_present(seeds):
    """With the real data, every target but search, shm and wal gets
    seeds from it."""
    if not DATA.is_dir():
        pytest.skip(f"no real CDS/ISIS data at {DATA}")
    assert len(list((seeds / "mst").iterdir())) > 20
    assert len(list((seeds / "isis_index").iterdir())) > 5
    assert len(list((seeds / "iso2709").iterdir())) > 5
    # native indexes of the real databases with an FST (besides pydb's own)
    assert len(list((seeds / "nidx").iterdir())) > 10


@pytest.mark.parametrize("case", regressions.CASES, ids=lambda c: c.name)
def test_regression_input(standalone, regression_dir, case):
    """A crash input the fuzzers found: now the exact error, no report."""
    p = run(standalone / f"fuzz_{case.target}",
            regression_dir / case.target / case.name, verbose=True)
    assert_clean(p)
    assert case.expect in p.stderr, p.stderr[-4000:]


def test_driver_reads_files_and_folders(standalone, tmp_path):
    """The driver takes files and (nested) folders, in name order."""
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "a").write_bytes(b"WATER")
    (tmp_path / "d" / "e" / "b").write_bytes(b"(")
    (tmp_path / "f").write_bytes(b"")
    p = run(standalone / "fuzz_search", tmp_path / "d", tmp_path / "f", verbose=True)
    assert_clean(p)
    assert "ran 3 inputs" in p.stdout
    assert "search expression syntax error" in p.stderr
    p = run(standalone / "fuzz_search", tmp_path / "missing")
    assert p.returncode == 2


# ------------------------------------------- the same findings, through the API

def _three_records(base: Path) -> None:
    with pydb.create(base, layout="isis-aligned") as db:
        for i in range(1, 4):
            db.append([(24, f"Record {i} on water"), (70, "Smith, J.")])


def _read_everything(base: Path) -> list:
    """Every way a reader walks the database; a subprocess, so that a hang
    fails the test (timeout) instead of stopping the suite."""
    code = (
        "import sys, json, pydb\n"
        "db = pydb.open(sys.argv[1])\n"
        "out = [db[m][24] for m in (1, 2, 3)]\n"
        "out.append([db.xrf_entry(m)['state'] for m in (1, 2, 3)])\n"
        "out.append(db.counts()['active'])\n"
        "out.append([r.mfn for r in db])\n"
        "out.append(db.check().errors)\n"
        "print(json.dumps(out))\n")
    p = subprocess.run([sys.executable, "-c", code, str(base)], capture_output=True,
                       text=True, timeout=60, cwd=REPO)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


EXPECTED_THREE = [["Record 1 on water"], ["Record 2 on water"], ["Record 3 on water"],
                  ["active"] * 3, 3, [1, 2, 3], 0]


def test_shm_generation_word_ahead_of_state(tmp_path):
    """fuzz_mst found: a commit header whose generation word (offset 336)
    leads its latest state made every read switch files forever.  The
    state decides now: every read works."""
    base = tmp_path / "db"
    _three_records(base)
    shm = base.with_suffix(".shm")
    b = bytearray(shm.read_bytes())
    struct.pack_into("<Q", b, regressions.SHM_FILE_GEN_WORD, 0xC3C3C3C3C3C3C3C3)
    shm.write_bytes(bytes(b))
    assert _read_everything(base) == EXPECTED_THREE


def test_shm_state_generation_out_of_range(tmp_path):
    """A CRC-valid state naming master-file generation 2^63 + 1 (no
    compaction count reaches it) hung the same way; it is a damaged slot
    now, and reads use the files."""
    base = tmp_path / "db"
    _three_records(base)
    shm = base.with_suffix(".shm")
    shm.write_bytes(bytes(regressions.set_state_gen(shm.read_bytes(), (1 << 63) + 1)))
    assert _read_everything(base) == EXPECTED_THREE


@pytest.mark.sanitize_address
def test_shm_garbage_counters_huge(tmp_path):
    """fuzz_shm found (UBSan): the commit header's garbage counters
    (offset 320: versions, bytes; outside the checksummed states) of a
    damaged header overflowed compact.c's test of whether a compaction is
    due (bytes * 4).  They are read as at most 2^57 now, and the test
    cannot overflow: a cooperative read that meets the back version
    starts the compaction, which leaves the records as they were."""
    base = tmp_path / "g"
    with pydb.create(base, gc="none") as db:
        for i in range(1, 4):
            db.append([(24, f"Record {i}")])
        db.update(2, [(24, "Record 2, again")])
    shm = base.with_suffix(".shm")
    b = bytearray(shm.read_bytes())
    assert struct.unpack_from("<QQ", b, regressions.SHM_GARBAGE) == (1, 32)
    struct.pack_into("<QQ", b, regressions.SHM_GARBAGE, *regressions.SHM_GARBAGE_FOUND)
    shm.write_bytes(bytes(b))
    with pydb.open(base, readonly=False, gc="cooperative") as db:
        db.append([(24, "Record 4")])   # a commit just now: not idle
        assert db[2][24] == ["Record 2, again"]   # meets the back version
        assert db.stat()["header"]["file_generation"] == 1   # compacted
        assert [db[m][24] for m in range(1, 5)] == [
            ["Record 1"], ["Record 2, again"], ["Record 3"], ["Record 4"]]
        assert db.check().ok
        assert db.stat()["garbage"]["versions"] == 0


def test_stop_words_ended_by_cr(tmp_path):
    """fuzz_keys found: stop words were counted by LF but split at CR and
    0x1A too (heap-buffer-overflow in pydb__stopwords_parse).  Every word
    so ended is a stop word now."""
    stw = b"THE\rOF\rA\rWORLD\x1aON"
    with pydb.create(tmp_path / "db", fst="24 4 V24", stw=stw) as db:
        db.append([(24, "The world of water on a hill")])
        assert [t.key for t in db.terms()] == ["HILL", "WATER"]


@pytest.mark.sanitize_address
def test_fst_number_of_a_format_that_wrote_nothing(tmp_path):
    """fuzz_fst found (fuzz/ci): f() and val() of a format that writes
    nothing, before the record's output was allocated, copied from a NULL
    pointer (undefined behaviour).  The number is 0."""
    with pydb.create(tmp_path / "db", fst=regressions.FST_NUMBER_OF_NOTHING) as db:
        db.append([(24, "abc")])
        assert [(t.key, list(db.postings(t.key))) for t in db.terms()] == [
            ("0", [(1, 1, 1, 1)]),
            ("ZERO", [(1, 2, 1, 1)])]


def test_isis_posting_list_at_block_int32_min(tmp_path):
    """fuzz_isis_index found (fuzz/ci): a leaf entry naming IFP block
    -2^31 overflowed `block - 1` (undefined behaviour) before the address
    was checked.  Opening the index now names the leaf file that holds
    the address (the .ifp, where it would point past the end, before)
    and the address."""
    with pydb.create(tmp_path / "db") as db:
        db.append([(24, "Apple")])
        db.append([(24, "Banana")])
    parts = regressions.isis_block_int32_min().split(regressions.SEP)
    for ext, blob in zip(make_seeds.ISIS_INDEX_EXTS, parts, strict=False):
        if blob:
            (tmp_path / f"db.{ext}").write_bytes(blob)
    with pydb.open(tmp_path / "db") as db:
        with pytest.raises(pydb.CorruptionError) as ei:
            _ = db.index
    e = ei.value
    assert e.filename == str(tmp_path / "db.l01")
    assert e.reason == "posting list address -2147483648/2 outside the IFP (1 blocks)"
    leaf = (tmp_path / "db.l01").read_bytes()
    assert struct.unpack_from("<ii", leaf, e.offset) == (-2 ** 31, 2)   # where it is


def test_native_keys_out_of_order(tmp_path):
    """fuzz_nidx found: a segment whose dictionary keys do not ascend (a
    damaged one with a valid checksum) was enumerated as stored.  Reading
    it now stops at the first key out of order, naming the segment."""
    base = regressions.fruit_index(tmp_path)
    regressions.keys_descending(base)
    seg = regressions.segments(base)[-1]
    with pydb.open_index(base) as ix:
        with pytest.raises(pydb.CorruptionError) as ei:
            list(ix.terms())
    e = ei.value
    assert e.filename == str(seg)
    assert e.reason == "dictionary: keys not in ascending order"
    # the entry after ZPPLE: shared 0, length 6, BANANA
    zpple = regressions.first_entry(seg.read_bytes(), b"ZPPLE")
    assert e.offset == zpple + 2 + 5 + 2 + 2


def test_native_tombstone_of_highest_mfn(tmp_path):
    """fuzz_nidx found: a tombstone naming MFN 2^31 - 1 made every open of
    the index allocate an 8 GiB table.  The table is bounded by the
    segments' bytes now (nidx_handle.h); the tombstones are searched
    instead, and the index reads as its files say (the update's tombstone
    of MFN 1 being gone, MFN 1's first title is live again)."""
    base = regressions.fruit_index(tmp_path, commits=2)
    regressions.tombstone_max_mfn(base)
    with pydb.open_index(base) as ix:
        assert [(t.key, t.count) for t in ix.terms()] == [
            ("APPLE", 1), ("APPLE 1", 1), ("BANANA", 1), ("CHERRY", 1)]
        assert [tuple(p) for p in ix.postings("APPLE")] == [(1, 24, 1, 1)]
