"""Native index benchmarks (pytest-benchmark), side by side with SQLite
FTS5 (Python's sqlite3) on the same data: bulk index throughput on the
synthetic unesb and the LILACS sample, term enumeration (C and Python),
postings decoding (C and Python), and query latency for typical
expressions with pydb's search language against the nearest FTS5 query.

    python -m pytest benchmarks/bench_index.py \\
        --benchmark-only -p no:cacheprovider

Timed, the unesb benchmarks run on the crashtest's default database
(58,880 records); in the untimed plain run on the small database of
benchmarks/conftest.py.  Each benchmark stores its rate in ``extra_info``
(records/s, terms/s, postings/s, computed from the median round); the
numbers in the issue notes are those medians.  docs/design.md §9 targets: bulk
load + index >= 200,000 records/s on the synthetic unesb; term
enumeration >= 10 million terms/s (C); ahead of SQLite FTS5 on indexing
and search.

FTS5 equivalents: one row per record, one column per FST line (the FTS5
``unicode61`` tokenizer splits every column into words, where the FST
keeps authors, subjects and descriptors as whole keys); queries
(pydb -> FTS5): ``T`` -> ``t``; ``A * B`` -> ``a AND b``; ``A + B`` ->
``a OR b``; ``BA$`` -> ``ba*``; ``A $ B`` (adjacent, either order,
docs/isis-formats.md §6.2) -> ``NEAR(a b, 0)``; ``A . . . B`` (at most 2
words between) -> ``NEAR(a b, 2)``; ``T/(24)`` -> ``title : t``.  Both
return the sorted MFNs (rowids); ``extra_info["hits"]`` shows how closely
the two agree, and the untimed tests ``test_hits_*`` check it: the same
MFNs where both index the same words, pydb's hits within FTS5's (each
difference explained) where the FST keeps whole keys.  With tantivy-py
installed (extra ``tantivy``), the same
indexing and the nearest tantivy queries (``test_*_tantivy``) run too.
"""

import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import pydb  # noqa: E402
from pydb import _pydb, unesb  # noqa: E402

from .conftest import median_s  # noqa: E402
from conftest import DATA, copy_db  # noqa: E402  (tests/conftest.py)

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


def _cpu_rate(benchmark, fn, args, amount):
    """Records per CPU second of one extra run (the machines are shared:
    wall time includes waiting for a core and for fsync)."""
    if median_s(benchmark) is None:   # the untimed plain run
        return
    import resource
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    fn(*args)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    benchmark.extra_info["records_per_cpu_s"] = round(amount / cpu) if cpu else None


def _rate(benchmark, amount, unit):
    med = median_s(benchmark)
    if med is None:   # the untimed plain run
        return
    benchmark.extra_info[unit] = round(amount / med) if med else None
    benchmark.extra_info["amount"] = amount


@pytest.fixture(scope="module")
def unesb_copy(bench_db, tmp_path_factory):
    """A copy of the benchmark database (the default database when timed,
    a small one in the plain run), without index."""
    return str(copy_db(bench_db, tmp_path_factory.mktemp("unesb")))


@pytest.fixture(scope="module")
def unesb_records(unesb_copy):
    with pydb.open(unesb_copy) as db:
        return len(db)


@pytest.fixture(scope="module")
def unesb_index(unesb_copy):
    _pydb._index_build(unesb_copy, UNESB_FST)
    return _pydb._open_native_index(unesb_copy)


def test_bulk_index_unesb(benchmark, unesb_copy, unesb_records):
    n = benchmark.pedantic(_pydb._index_build, (unesb_copy, UNESB_FST),
                           rounds=5, iterations=1, warmup_rounds=1)
    assert n == unesb_records
    _rate(benchmark, n, "records_per_s")
    _cpu_rate(benchmark, _pydb._index_build, (unesb_copy, UNESB_FST), n)


@pytest.mark.skipif(not Path(f"{LILACS}.mst").exists(), reason="LILACS sample absent")
def test_bulk_index_lilacs(benchmark, tmp_path):
    base = str(copy_db(LILACS, tmp_path))
    n = benchmark.pedantic(_pydb._index_build, (base, LILACS_FST),
                           rounds=5, iterations=1, warmup_rounds=1)
    assert n == 3225
    _rate(benchmark, n, "records_per_s")
    _cpu_rate(benchmark, _pydb._index_build, (base, LILACS_FST), n)


@pytest.fixture(scope="module")
def unesb_terms(unesb_index):
    """Every (key, posting count) of the unesb index."""
    return unesb_index.terms(b"", None, 10_000_000)


def test_terms_enumeration_c(benchmark, unesb_index, unesb_terms):
    terms, _ = benchmark.pedantic(_pydb._testing.bench_scan, (unesb_index,), rounds=10,
                                  iterations=1, warmup_rounds=1)
    assert terms == len(unesb_terms)
    _rate(benchmark, terms, "terms_per_s")


def test_terms_prefix_c(benchmark, unesb_index, unesb_terms):
    terms, _ = benchmark.pedantic(_pydb._testing.bench_scan, (unesb_index, b"B"), rounds=20,
                                  iterations=1, warmup_rounds=1)
    assert terms == sum(1 for k, _ in unesb_terms if k.startswith(b"B")) > 0
    _rate(benchmark, terms, "terms_per_s")


def test_terms_prefix_python(benchmark, unesb_copy, unesb_index, unesb_terms):
    idx = pydb.open_index(unesb_copy)

    def run():
        return sum(1 for _ in idx.terms("B"))
    terms = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    assert terms == sum(1 for k, _ in unesb_terms if k.startswith(b"B"))
    _rate(benchmark, terms, "terms_per_s")
    idx.close()


def test_postings_decoding_c(benchmark, unesb_index, unesb_terms):
    # every key of the dictionary looked up and its postings decoded
    _, posts = benchmark.pedantic(_pydb._testing.bench_scan, (unesb_index, b"", True),
                                  rounds=3, iterations=1, warmup_rounds=1)
    assert posts == sum(c for _, c in unesb_terms)
    _rate(benchmark, posts, "postings_per_s")


def test_postings_frequent_key_python(benchmark, unesb_index, unesb_terms):
    key, count = max(unesb_terms, key=lambda t: t[1])
    posts = benchmark(unesb_index.postings, key)
    assert len(posts) == count
    _rate(benchmark, len(posts), "postings_per_s")


def test_postings_prefix_python(benchmark, unesb_index, unesb_terms):
    # the postings of every key starting with B, one call per key (Python
    # tuples built for each posting)
    keys = [k for k, _ in unesb_terms if k.startswith(b"B")]
    postings = unesb_index.postings

    def run():
        return sum(len(postings(k)) for k in keys)
    posts = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    assert posts == sum(c for k, c in unesb_terms if k.startswith(b"B"))
    _rate(benchmark, posts, "postings_per_s")


# ---- side by side: SQLite FTS5 indexing the same fields ----------------

def _fts5_available():
    import sqlite3
    try:
        sqlite3.connect(":memory:").execute("create virtual table t using fts5(a)")
        return True
    except sqlite3.Error:
        return False


needs_fts5 = pytest.mark.skipif(not _fts5_available(), reason="sqlite3 without FTS5")

#: FTS5 columns standing for the lines of UNESB_FST.
UNESB_COLUMNS = ("title", "notes", "series", "authors", "corporate", "subjects",
                 "imprint", "lang")


def _unesb_rows(base):
    with pydb.open(base, encoding="ascii") as db:
        return [(r.mfn, "\n".join(r[24]), "\n".join(r[50]), "\n".join(r[44]),
                 "\n".join(r[70]), "\n".join(r[71]), "".join(r[69]), "".join(r[26]),
                 "".join(r[40])) for r in db]


#: FTS5 columns standing for the lines of LILACS_FST.
LILACS_COLUMNS = ("ident", "authors", "title", "title_en", "journal", "lang", "year",
                  "descriptors", "descriptors2", "words")


def _lilacs_rows(base):
    def sub_d(rec, tag):
        return "\n".join(s.get("d", "") for s in rec.subfields(tag))
    with pydb.open(base, encoding="latin-1") as db:
        return [(r.mfn, "".join(r[1]), "\n".join(r[10]), "\n".join(r[12]), "\n".join(r[13]),
                 "".join(r[30]), "\n".join(r[40]), "".join(r[65])[:4],
                 "\n".join(r[76]) + "\n" + sub_d(r, 87), sub_d(r, 88), "\n".join(r[83]))
                for r in db]


def _fts5_build(path, columns, rows):
    """An on-disk FTS5 table of `rows` (rowid first), one transaction,
    synchronous=FULL like the native build's fsync."""
    import sqlite3
    if path.exists():
        path.unlink()
    con = sqlite3.connect(path)
    con.execute("pragma synchronous=FULL")
    con.execute(f"create virtual table r using fts5({', '.join(columns)},"
                " tokenize='unicode61 remove_diacritics 2')")
    with con:
        con.executemany(f"insert into r(rowid, {', '.join(columns)}) values "
                        f"(?, {', '.join('?' * len(columns))})", rows)
    con.close()
    return len(rows)


@needs_fts5
def test_bulk_index_unesb_sqlite_fts5(benchmark, unesb_copy, unesb_records, tmp_path):
    """The nearest FTS5 equivalent of UNESB_FST (one column per FST line);
    rows read beforehand (only the indexing is timed)."""
    rows = _unesb_rows(unesb_copy)
    n = benchmark.pedantic(_fts5_build, (tmp_path / "fts.sqlite", UNESB_COLUMNS, rows),
                           rounds=3, iterations=1, warmup_rounds=0)
    assert n == unesb_records
    _rate(benchmark, n, "records_per_s")


@needs_fts5
@pytest.mark.skipif(not Path(f"{LILACS}.mst").exists(), reason="LILACS sample absent")
def test_bulk_index_lilacs_sqlite_fts5(benchmark, tmp_path):
    rows = _lilacs_rows(LILACS)
    n = benchmark.pedantic(_fts5_build, (tmp_path / "fts.sqlite", LILACS_COLUMNS, rows),
                           rounds=5, iterations=1, warmup_rounds=1)
    assert n == 3225
    _rate(benchmark, n, "records_per_s")


# ---- query latency: pydb's search language vs FTS5 ----------------------

#: (name, pydb expression, FTS5 MATCH expression); T1/T2: the two most
#: frequent title words, BA: a two-letter prefix.
QUERIES = [
    ("term", "{T1}", "{t1}"),
    ("and", "{T1} * {T2}", "{t1} AND {t2}"),
    ("or", "{T1} + {T2}", "{t1} OR {t2}"),
    ("truncation", "BA$", "ba*"),
    ("truncation_and", "BA$ * {T1}", "ba* AND {t1}"),
    ("adjacent", "{T1} $ {T2}", "NEAR({t1} {t2}, 0)"),
    ("proximity", "{T1} . . . {T2}", "NEAR({t1} {t2}, 2)"),
    ("adjacent_rare", "{T1} $ {R}", "NEAR({t1} {r}, 0)"),
    ("qualifier", "{T1}/(24)", "title : {t1}"),
]


@pytest.fixture(scope="module")
def query_words(unesb_index, unesb_terms):
    """Among the 50 most frequent word keys, the two with the most title
    (FST line 24) postings (T1, T2); among the words of 10 to 50 postings
    (the first 2,000 in key order), the one most often adjacent to T1
    (R): a frequent word's list against a rare one's, where a search
    passes the blocks of the frequent list the rare word is not in."""
    import re

    from pydb.search import search
    counts = {k: c for k, c in unesb_terms if re.fullmatch(rb"[A-Z]{3,}", k)}
    top = sorted(counts, key=lambda k: (-counts[k], k))[:50]
    title = sorted(top, key=lambda k: (-sum(1 for p in unesb_index.postings(k) if p[1] == 24),
                                       k))
    t1, t2 = title[0].decode(), title[1].decode()
    rare = [k.decode() for k in sorted(counts) if 10 <= counts[k] <= 50][:2000]
    r = max(rare, key=lambda k: (len(search(unesb_index, f"{t1} $ {k}")), k))
    return {"T1": t1, "T2": t2, "t1": t1.lower(), "t2": t2.lower(), "R": r, "r": r.lower()}


@pytest.fixture(scope="module")
def unesb_fts5(unesb_copy, tmp_path_factory):
    import sqlite3
    path = tmp_path_factory.mktemp("fts5") / "fts.sqlite"
    _fts5_build(path, UNESB_COLUMNS, _unesb_rows(unesb_copy))
    con = sqlite3.connect(path, check_same_thread=False)
    yield con
    con.close()


@pytest.mark.parametrize("name,expr,_", QUERIES, ids=[q[0] for q in QUERIES])
def test_query_pydb(benchmark, unesb_index, query_words, name, expr, _):
    from pydb.search import search
    expr = expr.format(**query_words)
    result = benchmark(search, unesb_index, expr)
    benchmark.extra_info.update(expr=expr, hits=len(result))
    assert name.startswith(("adjacent", "proximity")) or len(result) > 0


@needs_fts5
@pytest.mark.parametrize("name,_,match", QUERIES, ids=[q[0] for q in QUERIES])
def test_query_sqlite_fts5(benchmark, unesb_fts5, query_words, name, _, match):
    match = match.format(**query_words)

    def run():
        return [m for (m,) in unesb_fts5.execute("select rowid from r where r match ?"
                                                 " order by rowid", (match,))]
    result = benchmark(run)
    benchmark.extra_info.update(expr=match, hits=len(result))
    assert name.startswith(("adjacent", "proximity")) or len(result) > 0




# ---- searches beside a CPU-bound Python thread ---------------------------
#
# A search that releases the GIL hands it to any runnable Python thread,
# which keeps it for a switch interval (5 ms).  pydb keeps it for searches
# of cached segments that read at most 65,536 postings
# (pydb_search_nowait); sqlite3 releases it for every statement.  The
# figure, ``fraction_of_solo``: median searches per second beside a busy
# thread / alone (0.5 is the GIL's limit for two runnable threads).

BUSY_SECONDS = 0.5   # searches per measurement: 100 switch intervals


def _searches_per_s(run, exprs, seconds):
    n = 0
    t0 = time.perf_counter()
    while True:
        for e in exprs:
            run(e)
        n += len(exprs)
        t = time.perf_counter() - t0
        if t >= seconds:
            return n / t


def _beside_busy(benchmark, run, exprs):
    """Searches of `exprs` for BUSY_SECONDS with a busy thread beside them
    (timed) and alone (alternating), as a fraction of the rate alone."""
    from pydb.crashtest import BusyThread
    for e in exprs:
        run(e)   # warm: pages cached and seen
    alone, beside = [], []

    def busy_round():
        with BusyThread():
            beside.append(_searches_per_s(run, exprs, BUSY_SECONDS))
        alone.append(_searches_per_s(run, exprs, BUSY_SECONDS))

    benchmark.pedantic(busy_round, rounds=5, iterations=1, warmup_rounds=0)
    fraction = statistics.median(beside) / statistics.median(alone)
    benchmark.extra_info.update(fraction_of_solo=round(fraction, 3),
                                solo_per_s=round(statistics.median(alone)),
                                beside_per_s=round(statistics.median(beside)))
    assert fraction > 0


#: the queries of QUERIES that read few postings (term, and, adjacency, a
#: qualifier): what a web handler searches
BUSY_QUERIES = ("term", "and", "adjacent", "qualifier")


@pytest.mark.benchmark(group="searches beside a CPU-bound Python thread")
def test_queries_beside_busy_thread_pydb(benchmark, unesb_index, query_words):
    from pydb.search import search
    exprs = [q[1].format(**query_words) for q in QUERIES if q[0] in BUSY_QUERIES]
    _beside_busy(benchmark, lambda e: search(unesb_index, e), exprs)


@needs_fts5
@pytest.mark.benchmark(group="searches beside a CPU-bound Python thread")
def test_queries_beside_busy_thread_sqlite_fts5(benchmark, unesb_fts5, query_words):
    matches = [q[2].format(**query_words) for q in QUERIES if q[0] in BUSY_QUERIES]

    def run(match):
        return [m for (m,) in unesb_fts5.execute("select rowid from r where r match ?"
                                                 " order by rowid", (match,))]
    _beside_busy(benchmark, run, matches)

# ---- the same hits: pydb's search against FTS5 --------------------------
#
# Not timed: a plain test (no benchmark fixture), run once in the normal
# suite on the small database (skipped under --benchmark-only).
#
# Where both sides cut the same text into the same words, the hits must be
# the same MFNs: the words of titles, notes and series (FST technique 4 on
# tags 24, 50, 44: runs of letters, upper-cased) against the FTS5 columns
# title, notes, series (unicode61: runs of letters and digits, lower-cased;
# the synthetic text has no digits inside words).  pydb qualifies by tag
# (``/(24,50,44)``), FTS5 by column filter (``{title notes series} :``).
#
# Unqualified, the two index different keys for the other fields: the FST
# keeps an author (70), a corporate author (71), a <subject> (69) and an
# imprint subfield (26) as one whole key, where FTS5 splits each into words
# (and glues the subfield code to the first word: "^aCairo" is the token
# "acairo").  So a word found only inside such a value is an FTS5 hit and
# not a pydb hit: pydb's hits are a subset of FTS5's, and every FTS5-only
# hit has the word in one of those columns and in none of the word columns.

WORD_COLUMNS = "{{title notes series}}"   # braces doubled: the queries go through str.format
WHOLE_KEY_COLUMNS = ("authors", "corporate", "subjects", "imprint")

#: (name, pydb expression, FTS5 MATCH expression) over the same words;
#: A/B and TA/TB from same_words (upper case for pydb, lower for FTS5).
SAME_HITS = [
    ("term", "{A}/(24,50,44)", WORD_COLUMNS + " : {a}"),
    ("and", "{A}/(24,50,44) * {B}/(24,50,44)", WORD_COLUMNS + " : ({a} AND {b})"),
    ("or", "{A}/(24,50,44) + {B}/(24,50,44)", WORD_COLUMNS + " : ({a} OR {b})"),
    ("and_not", "{A}/(24,50,44) ^ {B}/(24,50,44)", WORD_COLUMNS + " : ({a} NOT {b})"),
    ("title_and", "{TA}/(24) * {TB}/(24)", "title : ({ta} AND {tb})"),
    ("truncation", "BA$/(24)", "title : ba*"),
]


@pytest.fixture(scope="module")
def same_words(unesb_index, unesb_terms):
    """Words for SAME_HITS chosen so that no query is empty on this
    database: A, the most frequent word key of the word fields (tags 24, 50,
    44), and B, the word that shares the most records with A there while
    also occurring without it (so AND, OR and AND NOT all have hits); TA
    and TB the same within titles (tag 24)."""
    import re
    words = [k for k, _ in sorted(unesb_terms, key=lambda t: (-t[1], t[0]))
             if re.fullmatch(rb"[A-Z]{3,}", k)][:200]

    def records(tags):
        return {k: {p[0] for p in unesb_index.postings(k) if p[1] in tags} for k in words}

    def pair(sets):
        a = max(sets, key=lambda k: (len(sets[k]), k))
        b = max((k for k in sets if k != a and sets[k] - sets[a]),
                key=lambda k: (len(sets[k] & sets[a]), k))
        assert sets[a] & sets[b], "no two words share a record"
        return a.decode(), b.decode()

    a, b = pair(records({24, 50, 44}))
    ta, tb = pair(records({24}))
    return {"A": a, "B": b, "a": a.lower(), "b": b.lower(),
            "TA": ta, "TB": tb, "ta": ta.lower(), "tb": tb.lower()}


#: Unqualified: pydb's hits are a subset of FTS5's (see above).
SUBSET_HITS = [
    ("term", "{T1}", "{t1}", ["{t1}"]),
    ("and", "{T1} * {T2}", "{t1} AND {t2}", ["{t1}", "{t2}"]),
    ("or", "{T1} + {T2}", "{t1} OR {t2}", ["{t1}", "{t2}"]),
]


def _fts5_mfns(con, match):
    return [m for (m,) in con.execute("select rowid from r where r match ? order by rowid",
                                      (match,))]


@needs_fts5
@pytest.mark.parametrize("name,expr,match", SAME_HITS, ids=[q[0] for q in SAME_HITS])
def test_hits_same_as_fts5(unesb_index, unesb_fts5, same_words, name, expr, match):
    from pydb.search import search
    expr, match = expr.format(**same_words), match.format(**same_words)
    got = sorted(search(unesb_index, expr))
    want = _fts5_mfns(unesb_fts5, match)
    assert got == want, (expr, match, sorted(set(got) ^ set(want))[:20])
    assert got, f"{expr}: no hits, nothing compared"


@needs_fts5
@pytest.mark.parametrize("name,expr,match,words", SUBSET_HITS, ids=[q[0] for q in SUBSET_HITS])
def test_hits_unqualified_within_fts5(unesb_index, unesb_fts5, query_words, name, expr, match,
                                      words):
    from pydb.search import search
    expr, match = expr.format(**query_words), match.format(**query_words)
    words = [w.format(**query_words) for w in words]
    got = set(search(unesb_index, expr))
    want = set(_fts5_mfns(unesb_fts5, match))
    assert got and got <= want, (expr, match, sorted(got - want)[:20])
    # Each FTS5-only hit is explained by a word inside a whole-key field.
    inside = " OR ".join(f"{{{' '.join(WHOLE_KEY_COLUMNS)}}} : {w}" for w in words)
    explained = set(_fts5_mfns(unesb_fts5, inside))
    assert want - got <= explained, (expr, sorted(want - got - explained)[:20])


@pytest.fixture(scope="module")
def unesb_index_after_commits(tmp_path_factory):
    """The unesb index after 7 commits of 50 updated records each (8
    segments with tombstones), through the commit hook's test driver."""
    base = str(copy_db(unesb.default_database(), tmp_path_factory.mktemp("unesb8")))
    _pydb._index_build(base, UNESB_FST)
    ix = _pydb._open_native_index(base)
    for k in range(7):
        _pydb._testing.native_hook(ix, "prepare",
                                   [(100 + 50 * k + j, [(24, b"new title %d" % j)], False)
                                    for j in range(50)])
        _pydb._testing.native_hook(ix, "commit")
    return ix


def test_terms_enumeration_c_8_segments(benchmark, unesb_index_after_commits):
    terms, _ = benchmark.pedantic(_pydb._testing.bench_scan, (unesb_index_after_commits,),
                                  rounds=10, iterations=1, warmup_rounds=1)
    assert terms > 400_000
    _rate(benchmark, terms, "terms_per_s")


# ---- the same with tantivy-py (extra "tantivy"), when it is installed ---

def _tantivy_build(path, columns, rows):
    """A tantivy index of `rows` (MFN first, as an indexed fast integer
    field) with one text field per column (tokenizer "default": words,
    lower-cased), committed and merged on disk."""
    import tantivy
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("mfn", stored=True, indexed=True, fast=True)
    for c in columns:
        sb.add_text_field(c, stored=False)
    schema = sb.build()
    index = tantivy.Index(schema, path=os.fspath(path))
    w = index.writer()
    for row in rows:
        w.add_document(tantivy.Document(mfn=row[0], **dict(zip(columns, row[1:], strict=True))))
    w.commit()
    w.wait_merging_threads()
    return len(rows)


def test_bulk_index_unesb_tantivy(benchmark, unesb_copy, unesb_records, tmp_path):
    pytest.importorskip("tantivy", reason="tantivy-py not installed (pip install 'pydb[tantivy]')")
    rows = _unesb_rows(unesb_copy)
    n = benchmark.pedantic(_tantivy_build, (tmp_path / "tv", UNESB_COLUMNS, rows),
                           rounds=3, iterations=1, warmup_rounds=0)
    assert n == unesb_records
    _rate(benchmark, n, "records_per_s")


@pytest.mark.skipif(not Path(f"{LILACS}.mst").exists(), reason="LILACS sample absent")
def test_bulk_index_lilacs_tantivy(benchmark, tmp_path):
    pytest.importorskip("tantivy", reason="tantivy-py not installed (pip install 'pydb[tantivy]')")
    rows = _lilacs_rows(LILACS)
    n = benchmark.pedantic(_tantivy_build, (tmp_path / "tv", LILACS_COLUMNS, rows),
                           rounds=5, iterations=1, warmup_rounds=1)
    assert n == 3225
    _rate(benchmark, n, "records_per_s")


@pytest.fixture(scope="module")
def unesb_tantivy(unesb_copy, tmp_path_factory):
    tantivy = pytest.importorskip("tantivy",
                                  reason="tantivy-py not installed (pip install 'pydb[tantivy]')")
    path = tmp_path_factory.mktemp("tantivy") / "tv"
    _tantivy_build(path, UNESB_COLUMNS, _unesb_rows(unesb_copy))
    index = tantivy.Index.open(os.fspath(path))
    index.reload()
    return tantivy, index


#: The nearest tantivy query per QUERIES name (query parser over every
#: text field; phrases are ordered, ``~2`` allows two words between;
#: truncation is a regex query per field).
TANTIVY_QUERIES = {
    "term": "{t1}", "and": "{t1} AND {t2}", "or": "{t1} OR {t2}",
    "truncation": None, "truncation_and": "{t1}",
    "adjacent": '"{t1} {t2}"', "proximity": '"{t1} {t2}"~2', "qualifier": "title:{t1}",
    "adjacent_rare": '"{t1} {r}"',
}


@pytest.mark.parametrize("name", list(TANTIVY_QUERIES))
def test_query_tantivy(benchmark, unesb_tantivy, query_words, name):
    tantivy, index = unesb_tantivy
    Q, Occ = tantivy.Query, tantivy.Occur
    schema = index.schema
    searcher = index.searcher()
    n = searcher.num_docs
    text = TANTIVY_QUERIES[name]

    def prefix_query():
        return Q.boolean_query([(Occ.Should, Q.regex_query(schema, c, "ba.*"))
                                for c in UNESB_COLUMNS])

    def run():
        if name == "truncation":
            q = prefix_query()
        else:
            q = index.parse_query(text.format(**query_words), list(UNESB_COLUMNS))
            if name == "truncation_and":
                q = Q.boolean_query([(Occ.Must, prefix_query()), (Occ.Must, q)])
        return sorted(v for v, _ in searcher.search(q, n, order_by_field="mfn").hits)
    result = benchmark(run)
    benchmark.extra_info.update(expr=name if text is None else text.format(**query_words),
                                hits=len(result))
    assert name.startswith(("adjacent", "proximity")) or len(result) > 0
