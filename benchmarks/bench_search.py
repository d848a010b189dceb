"""Query latency of the search language (csrc/search_parse.c, search_eval.c) on a large
in-memory index: every word of every field of the synthetic unesb
database (58,880 records, pydb.unesb), indexed like FST technique 4
(docs/isis-formats.md §5.2: TAG = field tag, OCC = occurrence of the field in
the record, CNT = word number; words = runs of ASCII letters, upper-cased).

Run (a benchmark, not a test; nothing is asserted about time):

    python -m pytest benchmarks/bench_search.py --benchmark-only \\
        --benchmark-columns=min,median,mean,rounds

The expressions use the most frequent word (W1), the most frequent words
with at most 2,000 (W2) and 200 (W3) postings, the two most frequent
words of titles (T1, T2; tag 24) for the positional operators, and one- and two-letter
prefixes for truncation, and an OR of the 100 most frequent words
(OR100); extra_info records the words, their posting
counts and the number of hits.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

import pydb
from pydb import _pydb
from pydb.search import search

WORD = re.compile(rb"[A-Za-z]+")
SUBFIELD = re.compile(rb"\^.")   # heading mode: delimiters become blanks


@pytest.fixture(scope="module")
def corpus(bench_db):
    # the default database when timed, the small one in the plain run
    base = bench_db
    table = defaultdict(list)
    with pydb.open(base) as db:
        records = db.max_mfn
        for rec in db:
            occ = defaultdict(int)
            for f in rec.fields:
                occ[f.tag] += 1
                text = SUBFIELD.sub(b" ", f.raw)
                for cnt, m in enumerate(WORD.finditer(text), 1):
                    table[m.group().upper()].append((rec.mfn, f.tag, occ[f.tag], cnt))
    ix = _pydb._memory_index(dict(table))
    by_count = sorted(table, key=lambda k: (-len(table[k]), k))
    def near(n):   # the most frequent word with at most n postings
        return next(k for k in by_count if len(table[k]) <= n).decode()
    title = defaultdict(int)
    for k, v in table.items():
        title[k] += sum(1 for p in v if p[1] == 24)
    t = sorted(title, key=lambda k: (-title[k], k))
    words = {"W1": by_count[0].decode(), "W2": near(2000), "W3": near(200),
             "T1": t[0].decode(), "T2": t[1].decode(),
             "OR100": " + ".join(k.decode() for k in by_count[:100])}
    counts = {f"{w}_postings": len(table[words[w].encode()])
              for w in words if w != "OR100"}
    info = {"keys": len(table), "postings": sum(map(len, table.values())),
            "records": records, **words, **counts}
    return ix, base, words, info


EXPRS = [
    "{W1}",
    "{W2}",
    "{W1} * {W2}",
    "{W1} + {W2} + {W3}",
    "{W1} ^ {W2}",
    "BA$",
    "B$",
    "BA$ * {W2}",
    "{T1} * {T2}",
    "{T1} (G) {T2}",
    "{T1} (F) {T2}",
    "{T1} . {T2}",
    "{T1} . . . {T2}",
    "{T1} $ $ {T2}",
    "{W1}/(24)",
    "{T1}/(24)",
    "BA$/(24) * ({W2} + {W3})",
    "(BA$ . . BE$) (F) BI$",
    "{OR100}",
]


@pytest.mark.parametrize("template", EXPRS)
def test_query(benchmark, corpus, template):
    ix, base, words, info = corpus
    expr = template.format(**words)
    benchmark.extra_info.update(info, expr=expr)
    result = benchmark(search, ix, expr)
    benchmark.extra_info["hits"] = len(result)


@pytest.mark.parametrize("template", ["{W1}", "B$", "{W2}"])
def test_query_with_deletion_check(benchmark, corpus, template):
    """The same with the database given: each hit's XRF entry is checked."""
    ix, base, words, info = corpus
    expr = template.format(**words)
    with pydb.open(base) as db:
        benchmark.extra_info.update(info, expr=expr)
        result = benchmark(search, ix, expr, db)
        benchmark.extra_info["hits"] = len(result)
