"""Shared fixtures, factories and tables of the test suite.

Real CDS/ISIS files live outside the project in ../shared/data/isis (see its
SOURCES.md); tests that need them use the `isis_data` fixture, which skips
cleanly when the folder is absent.  PYDB_TEST_DATA overrides the location.

Markers (registered in pyproject.toml [tool.pytest.ini_options]):
  sanitize_address  runs again under ASan+UBSan in tests/test_sanitizers.py
                    (`pytest -m sanitize_address tests` in the instrumented
                    build)
  sanitize_thread   runs again under TSan there (`-m sanitize_thread`)
  crash_repro       reproduces a crash of the interpreter on purpose (in a
                    child process); skipped inside a sanitizer run
  sanitizers        rebuilds the extension with sanitizers and reruns the
                    marked tests (slow; `-m "not sanitizers"` leaves it out)
  spark             reads pydb's Parquet with Spark in local mode; skipped
                    unless the run selects it (`-m spark`; needs pyspark, Java)
  cisis             compares with CISIS's own mx/ifupd/ifload (tests/test_cisis.py);
                    skipped unless PYDB_CISIS names the folder tools/build-cisis
                    made (`PYDB_CISIS=... python -m pytest -m cisis`)
  lazyfs            simulated power loss on a LazyFS mount
                    (tests/test_power_loss.py); skipped unless the run selects
                    it (`-m lazyfs`; needs tools/build-lazyfs, /dev/fuse)

Environment, read here only:
  PYDB_TEST_DATA            folder of the real CDS/ISIS files
  PYDB_CISIS                folder of the CISIS binaries (tools/build-cisis)
  PYDB_SANITIZER_INNER      set by tests/test_sanitizers.py in the runs it
                            starts ("address" or "thread"): SANITIZER below
  PYDB_HYPOTHESIS_EXAMPLES  max_examples of the property tests
                            (hypothesis_examples(); each file has a default)
  PYDB_CRASH_KILLS          kills of tests/test_recovery.py (default 200)
  PYDB_POWER_CUTS, PYDB_LAZYFS  read by tests/test_power_loss.py (its
                            docstring): random cuts per sync mode, the binary
"""

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PYDB_TEST_DATA", REPO.parent / "shared" / "data" / "isis"))
# "address" or "thread" inside a sanitizer run of tests/test_sanitizers.py, else "".
SANITIZER = os.environ.get("PYDB_SANITIZER_INNER", "")


def hypothesis_examples(default: int) -> int:
    """max_examples of a property test: PYDB_HYPOTHESIS_EXAMPLES, else `default`."""
    return int(os.environ.get("PYDB_HYPOTHESIS_EXAMPLES", str(default)))


# ------------------------------------------------------------------ layouts

# The four leader layouts of a master file, and their geometry written down
# here from the format description (docs/isis-formats.md §2.2), independently
# of the code: the tests patch bytes at these offsets and check what the
# writer wrote against them (tests/test_build.py), so a wrong offset in the
# C core or in the table shows up as a failure, not as an agreement.
#   leader  bytes of the leader          entry  bytes of a directory entry
#   ffi     FFI layout (32-bit MFRL, BASE, POS, LEN)
#   mfrl, mfbwb, mfbwp, base, nvf, status   offsets of the leader fields
#                                           (MFN is at 0, 4 bytes)
#   dpos, dlen   offsets of POS and LEN inside a directory entry (TAG at 0)
LAYOUTS = ["isis-packed", "isis-aligned", "ffi-packed", "ffi-aligned"]
GEOM = {
    "isis-packed": dict(leader=18, entry=6, ffi=False, mfrl=4, mfbwb=6,
                        mfbwp=10, base=12, nvf=14, status=16, dpos=2, dlen=4),
    "isis-aligned": dict(leader=20, entry=6, ffi=False, mfrl=4, mfbwb=8,
                         mfbwp=12, base=14, nvf=16, status=18, dpos=2, dlen=4),
    "ffi-packed": dict(leader=22, entry=10, ffi=True, mfrl=4, mfbwb=8,
                       mfbwp=12, base=14, nvf=18, status=20, dpos=2, dlen=6),
    "ffi-aligned": dict(leader=24, entry=12, ffi=True, mfrl=4, mfbwb=8,
                        mfbwp=12, base=16, nvf=20, status=22, dpos=4, dlen=8),
}


def build_db(base, layout: str = "isis-packed", records=(), mstxl: int = 0,
             sync: bool = False, deleted=None) -> Path:
    """Write a new database at `base` with the bulk builder (one record per
    item of `records`, each a list of (tag, bytes); None leaves a gap) and
    return `base` as a Path.  The one place the tests call the builder
    through the factory; `deleted` (MFNs written as logically deleted) is
    passed only when given."""
    from pydb import _pydb
    args = [str(base), layout, mstxl, list(records), sync]
    if deleted is not None:
        args.append(deleted)
    _pydb._build(*args)
    return Path(base)


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    """A two-record isis-aligned database with subfields, 8-bit and UTF-8
    data (the API and command-line tests), built once per module."""
    base = tmp_path_factory.mktemp("api") / "t"
    recs = [[(24, b"A title"), (70, b"Smith, J."), (70, b"Doe, A."),
             (26, b"^aParis^bUnesco^c1965"), (245, b"10^aMain title^bsub^aagain")],
            [(24, b"caf\xc3\xa9"), (99, b"\xff\xfe")]]
    return build_db(base, "isis-aligned", recs, sync=True)


def varied_records(n: int):
    """n records with 1-4 fields; odd and even data lengths."""
    out = []
    for i in range(1, n + 1):
        fields = [(24, f"Title {i} ".encode() * (1 + i % 5)), (70, f"Author {i}".encode())]
        if i % 3 == 0:
            fields.append((300, b"x" * (i % 7)))
        if i % 4 == 0:
            fields.append((90, b""))
        out.append(fields)
    return out


def build_varied(tmp: Path, layout: str, n: int = 300, mstxl: int = 0) -> Path:
    """A database of varied_records(n) (300: three XRF blocks of 127
    entries) in the folder `tmp`, named after layout and MSTXL."""
    return build_db(tmp / f"b-{layout}-{mstxl}", layout, varied_records(n), mstxl)


# ------------------------------------------------------------ byte surgery

def offset_of(base: Path, mfn: int) -> int:
    """Byte offset of the record of `mfn` in the master file (from its XRF)."""
    import pydb
    with pydb.open(base) as db:
        return db.xrf_entry(mfn)["offset"]


def patch_file(path: Path, off: int, data: bytes):
    """Overwrite `data` at byte `off` of the file `path`."""
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(data)


def read_at(path: Path, off: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(n)


# --------------------------------------------------------------- real data

def need(rel: str) -> str:
    """Base path of a shared database, skipping when the data is absent."""
    p = data_path(rel)
    if not p.parent.is_dir():
        pytest.skip(f"real CDS/ISIS data not found at {DATA}")
    return str(p)


@pytest.fixture
def segment_files():
    """Every native index segment a file, none inline in the MANIFEST (as
    a commit's or a merge's segment over 4 KiB is): for tests of what
    happens to segment files."""
    from pydb import _pydb

    old = _pydb._testing.set_inline_max(0)
    yield
    _pydb._testing.set_inline_max(old)


def manifest_segments(pdx, sizes: bool = False) -> list[tuple]:
    """The segments the MANIFEST in folder `pdx` names, oldest first:
    ("file", generation) for a line "segment seg-G.pds", ("inline", G)
    for "inline G LEN" and the LEN bytes after it (csrc/nidx_manifest.h);
    with `sizes`, (kind, G, LEN), LEN 0 for a file."""
    data = Path(pdx, "MANIFEST").read_bytes()
    out, pos = [], 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        line = data[pos:end]
        pos = end + 1
        if line.startswith(b"segment seg-"):
            out.append(("file", int(line[12:20]), 0))
        elif line.startswith(b"inline "):
            _, gen, n = line.split()
            out.append(("inline", int(gen), int(n)))
            pos += int(n) + 1
        elif line.startswith((b"fst ", b"stw ")):
            pos += int(line.split()[1]) + 1
    return out if sizes else [s[:2] for s in out]


def all_terms(ix, prefix=b"", batch=100000):
    """Every (key, count) of a raw _pydb.Index from `prefix` on, paging by `batch`."""
    out, start = [], None
    while True:
        chunk = ix.terms(prefix, (start, True) if start is not None else None, batch)
        if not chunk:
            return out
        out += chunk
        start = chunk[-1][0]


# -------------------------------------------------------------------- hooks

#: Markers of the tiers that run only when the run selects them with -m.
OPT_IN_TIERS = ("spark", "lazyfs")


def pytest_collection_modifyitems(config, items):
    """Inside a sanitizer run, the crash reproductions are skipped: they
    kill a child interpreter on purpose, which a sanitizer reports.  The
    tiers of OPT_IN_TIERS run only when selected (``-m spark``,
    docs/parquet.md; ``-m lazyfs``, docs/reliability.md §2.2 a2); the CISIS
    tier only with its binaries (PYDB_CISIS, docs/isis-formats.md §10.1)."""
    markexpr = config.getoption("markexpr", "") or ""
    for tier in OPT_IN_TIERS:
        if tier in markexpr:
            continue
        later = pytest.mark.skip(reason=f"the {tier} tier: python -m pytest -m {tier}")
        for item in items:
            if item.get_closest_marker(tier):
                item.add_marker(later)
    cisis = os.environ.get("PYDB_CISIS", "")
    if not (cisis and (Path(cisis) / "mx").is_file()):
        later = pytest.mark.skip(reason="the CISIS tier: tools/build-cisis CISIS_SRC, "
                                 "then PYDB_CISIS=<its folder> python -m pytest -m cisis")
        for item in items:
            if item.get_closest_marker("cisis"):
                item.add_marker(later)
    if not SANITIZER:
        return
    skip = pytest.mark.skip(reason=f"crash reproduction; not rerun under {SANITIZER} sanitizer")
    for item in items:
        if item.get_closest_marker("crash_repro"):
            item.add_marker(skip)


# Folders of the shared data (paths relative to DATA; SOURCES.md there).
ABCD = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/"
PYISIS = "scieloorg__pyisis/"
SAMPLE = "scieloorg__pyisis/pyisis/pyisis/sample/"
FIXTURES = "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/"
CISIS = "bireme__cisis/"
I2J = "bireme__isis2json/fixtures/"
BRUMA = "heitorbarbieri__Bruma/"
CPAN = "cpan__Biblio-Isis-0.24/data/"


def data_path(rel: str) -> Path:
    """Path of a file under the shared data folder (may not exist)."""
    return DATA / rel


@pytest.fixture(scope="session")
def isis_data() -> Path:
    """The folder of real CDS/ISIS files; skips the test if absent."""
    if not DATA.is_dir():
        pytest.skip(f"real CDS/ISIS data not found at {DATA}")
    return DATA


def copy_db(src, dst, extra=()) -> Path:
    """Copy a database's .mst and .xrf, plus the files of the `extra`
    extensions (e.g. ("fst", "stw")), into the folder `dst` (created).
    `src` is the base path or the .mst path; the files are found in any
    letter case of their extension and copied under lower-case ones.
    Returns the base path of the copy.  Raises FileNotFoundError when one
    of the files is missing."""
    src, dst = Path(src), Path(dst)
    if src.suffix.lower() == ".mst":
        src = src.with_suffix("")
    want = ("mst", "xrf") + tuple(extra)
    found = {f.suffix[1:].lower(): f for f in src.parent.iterdir()
             if f.stem == src.name and f.suffix[1:].lower() in want}
    dst.mkdir(parents=True, exist_ok=True)
    for ext in want:
        if ext not in found:
            raise FileNotFoundError(f"{src}.{ext}: no such file (in any letter case)")
        shutil.copy2(found[ext], dst / f"{src.name}.{ext}")
    return dst / src.name


def all_master_files():
    """Every .mst under the data folder (empty list when absent)."""
    if not DATA.is_dir():
        return []
    return sorted(p for p in DATA.rglob("*") if p.suffix.lower() == ".mst")


@pytest.fixture(scope="session")
def unesb_cache(tmp_path_factory) -> Path:
    """A cache folder holding the crashtest's default database (synthetic
    unesb, 58,880 records, with its FST and native index), built once per
    session by pydb.unesb.default_database (pass it as PYDB_CACHE_DIR)."""
    from pydb import unesb
    cache = tmp_path_factory.mktemp("pydb-cache")
    unesb.default_database(cache_dir=cache)
    return cache
