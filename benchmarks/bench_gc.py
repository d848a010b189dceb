"""What uncollected garbage costs a reader (issue 11): a search and a
snapshot read on a database carrying GARBAGE_SEGMENTS uncollected index
segments (one per commit, each with a tombstone that makes older postings
dead) and as many back versions, against the same database after
``db.collect()``.

The database is the benchmark database prepared as ``python -m pydb
gctest`` prepares its copies (pydb.gctest.prepare_template: its FST plus
the gctest work field, native index), updated by one gctest client
(pydb.gctest.Client: hot records rewritten with indexed words) under the
policy ``none`` so that nothing is collected while the garbage is made;
the "collected" copy is then collected explicitly.

Run (a benchmark, not a test; nothing is asserted about time):

    python -m pytest benchmarks/bench_gc.py --benchmark-enable \\
        --benchmark-columns=min,median,mean,rounds

and compare ``garbage`` with ``collected`` in each group; extra_info
records the index segments, dead postings and garbage versions of each
database (from ``db.stat()``).  Untimed in the normal test run (see
conftest.py), on the small database with fewer segments.
"""

from __future__ import annotations

import pytest

import pydb
from pydb import gctest

from .conftest import timed

#: Uncollected segments (= commits) of the timed run, and of the untimed one.
GARBAGE_SEGMENTS = 1000
UNTIMED_SEGMENTS = 40


def _figures(db) -> dict:
    st = db.stat()
    ix = st.get("index") or {}
    return {"segments": ix.get("segments"), "dead_postings": ix.get("dead_postings"),
            "garbage_versions": st["garbage"]["versions"],
            "master_file_bytes": st["master_file"]["size"]}


@pytest.fixture(scope="module")
def template(request, bench_db, tmp_path_factory):
    return gctest.prepare_template(bench_db, tmp_path_factory.mktemp("gc-template"))


@pytest.fixture(scope="module", params=["garbage", "collected"])
def gc_db(request, template, tmp_path_factory):
    """(state, open Database, the client's hot records, its last word):
    the prepared copy after the updates, uncollected or collected."""
    n = GARBAGE_SEGMENTS if timed(request.config) else UNTIMED_SEGMENTS
    base = gctest.fresh_copy(template, tmp_path_factory.mktemp(f"gc-{request.param}"))
    db = pydb.open(base, readonly=False, sync=False, gc="none")
    try:
        hot = gctest.hot_records(db, 1, 8)[0]
        client = gctest.Client(0, hot, hot)
        client.run(db, 0, n)
        if request.param == "collected":
            db.collect(timeout=600.0)
        last = client.word[client.hot[(n - 1) % len(client.hot)]]
        yield request.param, db, client.hot, last
    finally:
        db.close()


@pytest.mark.benchmark(group="gc-search")
def test_search(benchmark, gc_db):
    """The frequent word of the hot records (one live posting per hot
    record, a dead one per older update) and the word written last."""
    state, db, hot, last = gc_db
    benchmark.extra_info.update(_figures(db), state=state)

    def run():
        return len(db.search(gctest.HOT_WORD)) + len(db.search(last))

    assert benchmark(run) == len(hot) + 1


@pytest.mark.benchmark(group="gc-snapshot")
def test_snapshot_read(benchmark, gc_db):
    """Take a snapshot (a view of the index's segment list), read the hot
    records through it, search the frequent word in it, release it."""
    state, db, hot, _ = gc_db
    benchmark.extra_info.update(_figures(db), state=state)

    def run():
        with db.snapshot() as snap:
            n = sum(len(snap[m].fields) for m in hot)
            return n + len(snap.search(gctest.HOT_WORD))

    assert benchmark(run) > len(hot)
