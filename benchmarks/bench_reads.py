"""Record reads, pydb against its peers on the same records in the same
run: one record by key, a batch of keys, a scan of every record (with
and without its fields decoded), and 8 threads reading batches at once
(see conftest.py for the engines).

Run: ``python -m pytest benchmarks/`` (timed, default database), compare
``min`` within each group (the machine is shared and noisy)."""

import pytest

from .conftest import SAMPLE, THREADS
from .peers import deserialize, run_threads, serialize


@pytest.mark.benchmark(group=f"read one record by key (x{SAMPLE})")
def test_read_single(benchmark, engine, sample):
    get = engine.get

    def run():
        for m in sample:
            get(m)
        return len(sample)

    assert benchmark(run) == len(sample)
    first = engine.get(sample[0])
    assert first is not None


@pytest.mark.benchmark(group=f"read a batch of {SAMPLE} keys")
def test_read_batch(benchmark, engine, sample):
    got = benchmark(engine.get_many, sample)
    assert len(got) == len(sample)


@pytest.mark.benchmark(group="scan every record")
def test_scan(benchmark, engine, records):
    assert benchmark(engine.scan) == len(records)


@pytest.mark.benchmark(group="scan every record, fields decoded")
def test_scan_fields(benchmark, engine, records):
    """pydb: ``rec.fields`` of each record (Field objects, values str);
    the peers: their stored bytes split and decoded the same way
    (peers.deserialize)."""
    assert benchmark(engine.scan_fields) == len(records)
    benchmark.extra_info["rows"] = len(records)   # (benchmarks/table.py)


@pytest.mark.benchmark(group=f"{THREADS} threads, batches of 256 keys")
def test_read_threads(benchmark, engine, sample):
    chunks = [sample[k:k + 256] for k in range(0, len(sample), 256)]
    readers = [engine.reader() for _ in range(THREADS)]
    got = benchmark(run_threads, readers, chunks)
    assert got == THREADS * len(sample)


def test_peers_hold_the_same_records(engine, sample, records):
    """The peers' stores give back exactly pydb's records."""
    by_mfn = dict(records)
    for m in sample[:50]:
        got = engine.get(m)
        assert (serialize(got) if engine.name == "pydb" else got) == by_mfn[m]


def test_peers_decode_what_pydb_decodes(bench_db, records):
    """What a peer's scan_fields() builds per record is what pydb's
    Record.fields holds."""
    import pydb
    with pydb.open(bench_db) as db:
        for mfn, data in records[:200]:
            assert deserialize(data) == [(f.tag, f.value, f.raw) for f in db[mfn].fields]
