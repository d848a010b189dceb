"""Benchmarks of the CDS/ISIS inverted-file reader (csrc/isis_open.c, csrc/isis_read.c).

Run (not part of the test suite; numbers are measured, never asserted):

    python -m pytest benchmarks/bench_isis_index.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds -p no:randomly

Data: the largest shipped inverted file, ABCD's ``rda`` (classic 16/60,
36 508 keys, 82 882 postings, B-tree depth 4; ../shared/data/isis, see
SOURCES.md); the LIND ``xcds`` for the LIND decoder.  Each benchmark
records its rate in ``extra_info`` (terms/s, postings/s, lookups/s from
the median round), which ``--benchmark-json`` writes out.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from pydb.index import Index  # noqa: E402

from .conftest import median_s  # noqa: E402
from conftest import DATA  # noqa: E402

RDA = DATA / "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/rda/data/rda"
XCDS = DATA / "scieloorg__pyisis/pycisis/tests/xcds"


def _open(base: Path) -> Index:
    if not base.parent.is_dir():
        pytest.skip(f"real CDS/ISIS data not found at {DATA}")
    return Index.open_isis(base)


def _rate(benchmark, what: str, n: int) -> None:
    assert n > 0
    med = median_s(benchmark)
    if med is None:   # the untimed plain run
        return
    benchmark.extra_info[what] = n
    benchmark.extra_info[f"{what}_per_s"] = round(n / med) if med else None


@pytest.fixture(scope="module")
def rda():
    ix = _open(RDA)
    yield ix
    ix.close()


@pytest.mark.parametrize("prefix", ["", "A", "S", "AU_"])
def test_prefix_enumeration(benchmark, rda, prefix):
    """Terms/s of Index.terms(prefix): B-tree descent, leaf chain, one
    IFP header read per key for its count, batches of 4096 keys per GIL
    release, Term objects built in Python."""
    n = benchmark(lambda: sum(1 for _ in rda.terms(prefix)))
    _rate(benchmark, "terms", n)


def test_prefix_enumeration_raw(benchmark, rda):
    """Terms/s without decoding keys to str (bytes tuples from the core)."""
    n = benchmark(lambda: sum(1 for _ in rda.raw_terms(b"")))
    _rate(benchmark, "terms", n)


def test_postings_decoding(benchmark, rda):
    """Postings/s of Index.postings over every key (descent + leaf scan +
    IFP segment decoding with the GIL released, Posting objects built)."""
    keys = [k for k, _ in rda.raw_terms()]

    def run():
        total = 0
        for k in keys:
            total += len(rda.postings(k))
        return total

    total = benchmark(run)
    _rate(benchmark, "postings", total)
    benchmark.extra_info["lookups"] = len(keys)


def test_postings_decoding_core(benchmark, rda):
    """The same through the low-level handle (tuples, no Posting objects):
    closer to the C decoder's own speed."""
    keys = [k for k, _ in rda.raw_terms()]
    h = rda._h
    total = benchmark(lambda: sum(len(h.postings(k)) for k in keys))
    _rate(benchmark, "postings", total)


def test_lind_postings_decoding(benchmark):
    """Postings/s of the LIND decoder (bit strings and MFN lists)."""
    with _open(XCDS) as ix:
        keys = [k for k, _ in ix.raw_terms()]
        total = benchmark(lambda: sum(len(ix.postings(k)) for k in keys))
        _rate(benchmark, "postings", total)


def test_open(benchmark):
    """Opening with validation (set choice, geometry, sampled lists)."""
    if not RDA.parent.is_dir():
        pytest.skip("no data")
    benchmark(lambda: Index.open_isis(RDA).close())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "--benchmark-only", *sys.argv[1:]]))
