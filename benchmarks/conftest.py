"""pytest-benchmark suites: pydb's reads against its peers on the same data,
in the same run (docs/design.md §9).

``python -m pytest benchmarks/`` times them on the crashtest's default
database (synthetic unesb, 58,880 records, built once into ~/.cache/pydb).
The normal test run (``python -m pytest``, testpaths tests and benchmarks)
runs each benchmark once as a plain test, without timing
(``--benchmark-disable``, set here) and on a small database, so that they
never rot; ``--benchmark-enable`` times them there too.  Without
pytest-benchmark installed, a stand-in ``benchmark`` fixture calls each
function once.

Peers, each skipped when its package is missing: Python's sqlite3 (records
by rowid; standard library), py-lmdb (records by key; extra ``lmdb``),
tantivy-py (records by a stored MFN field; extra ``tantivy``).
"""

from __future__ import annotations

import os

import pytest

try:
    import pytest_benchmark  # noqa: F401
    HAVE_PLUGIN = True
except ImportError:
    HAVE_PLUGIN = False

import pydb
from pydb import unesb

from .peers import LmdbEngine, PydbEngine, SqliteEngine, TantivyEngine, serialize

SMALL = 3000          # records of the database of untimed runs
SAMPLE = 1000         # MFNs read per round by the by-key benchmarks
THREADS = 8


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.addinivalue_line("markers", "benchmark(group): pytest-benchmark options")
    if not HAVE_PLUGIN:
        return
    source = getattr(config, "args_source", None)
    testpaths = getattr(type(config), "ArgsSource", None)
    ran_by_testpaths = (source == testpaths.TESTPATHS if testpaths is not None
                        else not config.invocation_params.args)
    if ran_by_testpaths and not config.getoption("benchmark_enable", False) \
            and not config.getoption("benchmark_only", False):
        config.option.benchmark_disable = True


def timed(config) -> bool:
    return HAVE_PLUGIN and not config.getoption("benchmark_disable", False)


if not HAVE_PLUGIN:
    class _Once:
        """Stand-in for pytest-benchmark's fixture: calls the function once
        (``extra_info`` and ``group`` are kept and go nowhere)."""

        def __init__(self) -> None:
            self.extra_info: dict = {}
            self.group: str | None = None

        def __call__(self, fn, *args, **kwargs):
            return fn(*args, **kwargs)

        def pedantic(self, fn, args=(), kwargs=None, setup=None, **_):
            if setup is not None:
                got = setup()
                if got is not None:
                    args, kwargs = got
            return fn(*args, **(kwargs or {}))

    @pytest.fixture
    def benchmark():
        return _Once()


def median_s(benchmark):
    """Median seconds of a benchmark's timed rounds, or None in an untimed
    run (``--benchmark-disable``, or the stand-in fixture without
    pytest-benchmark), where there is no rate to record."""
    stats = getattr(benchmark, "stats", None)
    return stats.stats.median if stats is not None else None


# ---------------------------------------------------------------- data

@pytest.fixture(scope="session")
def bench_db(request, tmp_path_factory):
    """Base path of the benchmark database: the default database (58,880
    records) when timing, a small generated one otherwise."""
    if timed(request.config):
        return unesb.default_database()
    return unesb.generate(tmp_path_factory.mktemp("bench"), count=SMALL)


@pytest.fixture(scope="session")
def sample(bench_db):
    """SAMPLE MFNs spread over the database, in a fixed shuffled order."""
    import random
    with pydb.open(bench_db) as db:
        mfns = db.mfns()
    return random.Random(5).sample(mfns, min(SAMPLE, len(mfns)))


@pytest.fixture(scope="session")
def records(bench_db):
    """[(mfn, serialized record)] of every active record."""
    with pydb.open(bench_db) as db:
        return [(r.mfn, serialize(r)) for r in db]


ENGINES = ["pydb", "sqlite3", "lmdb", "tantivy"]


@pytest.fixture(scope="session", params=ENGINES)
def engine(request, bench_db, tmp_path_factory):
    name = request.param
    if name == "pydb":
        e = PydbEngine(bench_db)
    else:
        records = request.getfixturevalue("records")
        folder = tmp_path_factory.mktemp(name)
        if name == "sqlite3":
            e = SqliteEngine(os.fspath(folder / "rec.sqlite"), records)
        elif name == "lmdb":
            pytest.importorskip("lmdb", reason="py-lmdb not installed (pip install 'pydb[lmdb]')")
            e = LmdbEngine(os.fspath(folder), records)
        else:
            pytest.importorskip("tantivy",
                                reason="tantivy-py not installed (pip install 'pydb[tantivy]')")
            e = TantivyEngine(os.fspath(folder), records)
    yield e
    e.close()


