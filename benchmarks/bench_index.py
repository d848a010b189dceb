"""Native index benchmarks (pytest-benchmark): bulk index throughput,
term enumeration, postings decoding.

    PYDB_SKIP_SANITIZERS=1 python -m pytest benchmarks/bench_index.py \\
        --benchmark-only -p no:cacheprovider

Each benchmark stores its rate in ``extra_info`` (records/s, terms/s,
postings/s, computed from the median round); the numbers in the issue
notes are those medians.  DESIGN.md §9 targets: bulk load + index >=
200,000 records/s on the synthetic unesb; term enumeration >= 10 million
terms/s (C).
"""

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import pydb  # noqa: E402
from pydb import _pydb, unesb  # noqa: E402

DATA = Path(os.environ.get("PYDB_TEST_DATA", REPO.parent / "shared" / "data" / "isis"))
LILACS = DATA / "scieloorg__pyisis/pyisis/pyisis/sample/lilacs"

# LILACS ships no FST: authors, journal, descriptors as whole keys; title
# and abstract words; language and year.
LILACS_FST = b"""\
1 0 v1
10 0 mhu,(v10|%|/)
12 4 mhu,(v12|%|/)
13 4 mhu,(v13|%|/)
30 0 mhu,v30
40 0 (v40|%|/)
65 0 v65*0.4
76 0 mhu,(v76|%|/)
87 0 mhu,(v87^d|%|/)
88 0 mhu,(v88^d|%|/)
83 4 mhu,(v83|%|/)
"""

# The synthetic unesb (pydb/unesb.py): title and notes words, authors,
# corporate authors, <subject> terms, imprint subfields, language.
UNESB_FST = b"""\
24 4 mhu,v24
70 0 mhu,(v70/)
71 0 mhu,(v71/)
69 2 mpl,v69
26 1 mpl,v26
40 0 v40
50 4 mhu,v50
44 4 mhu,v44
"""


def _copy(base: Path, dst: Path) -> str:
    dst.mkdir(parents=True, exist_ok=True)
    for ext in ("mst", "xrf"):
        shutil.copy(f"{base}.{ext}", dst / f"{base.name}.{ext}")
    return str(dst / base.name)


def _cpu_rate(benchmark, fn, args, amount):
    """Records per CPU second of one extra run (the machines are shared:
    wall time includes waiting for a core and for fsync)."""
    if benchmark.stats is None:   # --benchmark-disable: the untimed plain run
        return
    import resource
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    fn(*args)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    benchmark.extra_info["records_per_cpu_s"] = round(amount / cpu) if cpu else None


def _rate(benchmark, amount, unit):
    if benchmark.stats is None:   # --benchmark-disable: the untimed plain run
        return
    med = benchmark.stats.stats.median
    benchmark.extra_info[unit] = round(amount / med) if med else None
    benchmark.extra_info["amount"] = amount


@pytest.fixture(scope="module")
def unesb_copy(tmp_path_factory):
    return _copy(Path(unesb.default_database()), tmp_path_factory.mktemp("unesb"))


@pytest.fixture(scope="module")
def unesb_index(unesb_copy):
    _pydb._index_build(unesb_copy, UNESB_FST)
    return _pydb._open_native_index(unesb_copy)


def test_bulk_index_unesb(benchmark, unesb_copy):
    n = benchmark.pedantic(_pydb._index_build, (unesb_copy, UNESB_FST),
                           rounds=5, iterations=1, warmup_rounds=1)
    assert n == 58_880
    _rate(benchmark, n, "records_per_s")
    _cpu_rate(benchmark, _pydb._index_build, (unesb_copy, UNESB_FST), n)


@pytest.mark.skipif(not Path(f"{LILACS}.mst").exists(), reason="LILACS sample absent")
def test_bulk_index_lilacs(benchmark, tmp_path):
    base = _copy(LILACS, tmp_path)
    n = benchmark.pedantic(_pydb._index_build, (base, LILACS_FST),
                           rounds=5, iterations=1, warmup_rounds=1)
    assert n == 3225
    _rate(benchmark, n, "records_per_s")
    _cpu_rate(benchmark, _pydb._index_build, (base, LILACS_FST), n)


def test_terms_enumeration_c(benchmark, unesb_index):
    terms, _ = benchmark.pedantic(_pydb._bench_scan, (unesb_index,), rounds=10,
                                  iterations=1, warmup_rounds=1)
    assert terms > 400_000
    _rate(benchmark, terms, "terms_per_s")


def test_terms_prefix_c(benchmark, unesb_index):
    terms, _ = benchmark.pedantic(_pydb._bench_scan, (unesb_index, b"B"), rounds=20,
                                  iterations=1, warmup_rounds=1)
    assert terms > 10_000
    _rate(benchmark, terms, "terms_per_s")


def test_terms_prefix_python(benchmark, unesb_copy, unesb_index):
    idx = pydb.open_index(unesb_copy)

    def run():
        return sum(1 for _ in idx.terms("B"))
    terms = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    _rate(benchmark, terms, "terms_per_s")


def test_postings_decoding_c(benchmark, unesb_index):
    # every key of the dictionary looked up and its postings decoded
    _, posts = benchmark.pedantic(_pydb._bench_scan, (unesb_index, b"", True),
                                  rounds=3, iterations=1, warmup_rounds=1)
    assert posts > 1_000_000
    _rate(benchmark, posts, "postings_per_s")


def test_postings_frequent_key_python(benchmark, unesb_index):
    key = max(unesb_index.terms(b"", None, 1_000_000), key=lambda t: t[1])[0]
    posts = benchmark(unesb_index.postings, key)
    _rate(benchmark, len(posts), "postings_per_s")


# ---- side by side: SQLite FTS5 indexing the same fields ----------------

def _fts5_available():
    import sqlite3
    try:
        sqlite3.connect(":memory:").execute("create virtual table t using fts5(a)")
        return True
    except sqlite3.Error:
        return False


@pytest.mark.skipif(not _fts5_available(), reason="sqlite3 without FTS5")
def test_bulk_index_unesb_sqlite_fts5(benchmark, unesb_copy, tmp_path):
    """The nearest FTS5 equivalent of UNESB_FST: one row per record with
    title+notes (words), authors, subjects, imprint, language columns;
    rows read beforehand (only the indexing is timed), one transaction,
    on-disk database with synchronous=FULL like the native build's fsync."""
    import sqlite3
    with pydb.open(unesb_copy, encoding="ascii") as db:
        rows = [(r.mfn, " ".join(r[24] + r[50] + r[44]), "; ".join(r[70] + r[71]),
                 "".join(r[69]), "".join(r[26]), "".join(r[40])) for r in db]
    path = tmp_path / "fts.sqlite"

    def build():
        if path.exists():
            path.unlink()
        con = sqlite3.connect(path)
        con.execute("pragma synchronous=FULL")
        con.execute("create virtual table r using fts5(words, authors, subjects, imprint,"
                    " lang, tokenize='unicode61 remove_diacritics 2')")
        with con:
            con.executemany("insert into r(rowid, words, authors, subjects, imprint, lang)"
                            " values (?, ?, ?, ?, ?, ?)", rows)
        con.close()
        return len(rows)
    n = benchmark.pedantic(build, rounds=3, iterations=1, warmup_rounds=0)
    assert n == 58_880
    _rate(benchmark, n, "records_per_s")


@pytest.fixture(scope="module")
def unesb_index_after_commits(tmp_path_factory):
    """The unesb index after 7 commits of 50 updated records each (8
    segments with tombstones), through the commit hook's test driver."""
    base = _copy(Path(unesb.default_database()), tmp_path_factory.mktemp("unesb8"))
    _pydb._index_build(base, UNESB_FST)
    ix = _pydb._open_native_index(base)
    for k in range(7):
        _pydb._native_hook(ix, "prepare", [(100 + 50 * k + j, [(24, b"new title %d" % j)], False)
                                          for j in range(50)])
        _pydb._native_hook(ix, "commit")
    return ix


def test_terms_enumeration_c_8_segments(benchmark, unesb_index_after_commits):
    terms, _ = benchmark.pedantic(_pydb._bench_scan, (unesb_index_after_commits,),
                                  rounds=10, iterations=1, warmup_rounds=1)
    assert terms > 400_000
    _rate(benchmark, terms, "terms_per_s")
