"""MARC 21 (ISO 2709) parsing: pydb against pymarc, in the same run, on
the same file (issue 12's row "MARC ISO 2709 parsing").

The file is the benchmark database (the default unesb database when
timing, a small generated one otherwise) exported with
``pydb.export_iso(..., "marc", indicators="add")``: two blank indicators
before every data field and indicator count 2 in the leader, so that
pymarc reads every record without a warning.  Both sides do the same
work per record: every field's value as ``str`` (UTF-8), the tag, and
for pymarc the subfield split it always makes (``Field.value()`` joins
the subfield values; pydb hands the field with its ``^x`` markers, as
CDS/ISIS stores it).  ``test_marc_both_read_the_same`` checks that the
two readers see the same records, tags and subfield values.

Run: ``python -m pytest benchmarks/bench_marc.py --benchmark-only``;
compare the ``min``/``median`` of ``pydb`` and ``pymarc`` (rows/s =
records / time).
"""

from __future__ import annotations

import io

import pytest

import pydb
from pydb import iso2709

pymarc = pytest.importorskip("pymarc")


@pytest.fixture(scope="module")
def marc_file(bench_db, tmp_path_factory) -> bytes:
    """The bytes of the benchmark database exported as MARC 21."""
    path = tmp_path_factory.mktemp("marc") / "bench.mrc"
    with pydb.open(bench_db) as db:
        report = pydb.export_iso(db, path, "marc", indicators="add")
    assert not report.errors
    return path.read_bytes()


def parse_pydb(data: bytes) -> int:
    """Records read, every field value decoded."""
    n = 0
    for rec in iso2709.read(io.BytesIO(data), flavour="marc"):
        for _tag, value in rec.fields:
            value.decode("utf-8")
        n += 1
    return n


def parse_pymarc(data: bytes) -> int:
    """Records read by pymarc.MARCReader (UTF-8), every field's value."""
    n = 0
    for rec in pymarc.MARCReader(io.BytesIO(data), to_unicode=True, force_utf8=True):
        for field in rec.fields:
            field.value()
        n += 1
    return n


@pytest.mark.parametrize("reader", ["pydb", "pymarc"])
def test_marc_parse(benchmark, marc_file, reader):
    fn = parse_pydb if reader == "pydb" else parse_pymarc
    n = benchmark(fn, marc_file)
    assert n == marc_file.count(b"\x1d")


def test_marc_both_read_the_same(marc_file):
    """Record for record, the same tags and, per field, the same subfield
    codes and values (pydb's ``^x`` markers are MARC's 0x1F, converted on
    import) -- so the two benchmarks above parse the same content."""
    mine = list(iso2709.read(io.BytesIO(marc_file), flavour="marc"))
    theirs = list(pymarc.MARCReader(io.BytesIO(marc_file), to_unicode=True,
                                    force_utf8=True))
    assert len(mine) == len(theirs) > 0
    for a, b in zip(mine, theirs, strict=True):
        assert b is not None
        got = []
        for tag, value in a.fields:
            text = value.decode("utf-8")
            if isinstance(tag, int) and tag < 10:
                got.append((f"{tag:03d}", text))
            else:
                parts = text.split("^")[1:]   # after the two indicators
                got.append((f"{tag:03d}", [(p[:1], p[1:]) for p in parts]))
        want = []
        for f in b.fields:
            if f.is_control_field():
                want.append((f.tag, f.data))
            else:
                want.append((f.tag, [(s.code, s.value) for s in f.subfields]))
        assert got == want
