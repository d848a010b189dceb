"""Arrow and Parquet (pydb.arrow): the schema row by row, exact round trips
of every real master file and of the synthetic unesb, DuckDB's SQL over
the exported files against pydb's own counts, full scans and searches,
batches and row groups, partitioned directories, the snapshot an export
reads, the import's rules (MFNs, deleted records, order, bad input), the
command line, and a Spark tier (``-m spark``, docs/parquet.md).

pyarrow and duckdb come with the ``test`` extra; without them the tests
skip (pytest.importorskip).

Term queries chosen so that SQL computes the same keys as the index
(docs/isis-formats.md §5): FST technique 0 lines, where every line of the
format's output is one key, upper-cased, cut to the index's key length
and stripped of trailing blanks:

* unesb (native index, no key limit): ``40 0 'LA=',v40`` -> key
  ``'LA=' || upper(value)`` of tag 40; ``26 0 'YR=',v26^c`` -> ``'YR='`` and
  subfield c of tag 26; ``70 0 mhu,(v70/)`` -> ``upper(value)`` of every
  tag 70 occurrence (the generator writes plain ASCII ``Surname, X.``, on
  which heading mode changes nothing).
* the UNESCO CDS sample (ISIS index made by CISIS, 30-byte keys):
  ``70 0 MHU,(V70/)`` -> ``rtrim(left(upper(value), 30))`` for the authors
  that are plain ASCII without ``<``, ``>``, ``^`` or ``"`` (heading mode
  rewrites those; the other 134 of 147 keys qualify).
"""

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

import pydb
from pydb import arrow, unesb
from pydb.__main__ import main as cli_main

from conftest import all_master_files, build_db, need

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CDS = "scieloorg__pyisis/pyisis/pyisis/sample/cds"


def duck():
    duckdb = pytest.importorskip("duckdb")
    return duckdb.connect()


def records_of(db, deleted=True):
    """(mfn, deleted, [(tag, bytes)]) of every record pydb can read."""
    out = []
    for mfn in db.mfns(deleted=deleted):
        try:
            r = db[mfn]
        except pydb.CorruptionError:   # odds.mst MFN 49: an XRF entry to tolerate
            continue
        out.append((r.mfn, r.deleted, [(f.tag, f.raw) for f in r.fields]))
    return out


def tag_counts(db):
    c = Counter()
    for r in db:
        c.update(r.tags)
    return c


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A 3,000-record unesb with its FST and native index (0.3 s)."""
    return unesb.generate(tmp_path_factory.mktemp("unesb") / "u", count=3000, index=True)


@pytest.fixture(scope="module")
def small_parquet(small, tmp_path_factory):
    out = tmp_path_factory.mktemp("pq") / "u.parquet"
    rep = arrow.export_parquet(small, out, batch_records=500)
    assert rep.records == 3000 and rep.errors == []
    return out


# ------------------------------------------------------------ the schema

def odd_db(tmp_path):
    """MFN 1 plain, 2 a gap (physically deleted), 3 a record without
    fields, 4 a repeated tag and bytes that are not UTF-8, 5 logically
    deleted."""
    return build_db(tmp_path / "odd", records=[
        [(24, b"a")], None, [],
        [(70, b"x"), (70, b"y"), (24, b"\xff\xfe"), (26, b"^aParis^c1965")],
        [(24, b"d")]], deleted={5}, sync=True)


def test_fields_layout_row_by_row(tmp_path):
    base = odd_db(tmp_path)
    t = arrow.to_arrow(base, deleted=True).read_all()
    assert t.schema.names == ["mfn", "tag", "occ", "value", "field_no", "deleted", "raw"]
    assert [str(f.type) for f in t.schema] == ["int32", "int32", "int32", "string", "int32",
                                               "bool", "binary"]
    assert t.to_pylist() == [
        dict(mfn=1, tag=24, occ=1, value="a", field_no=1, deleted=False, raw=None),
        dict(mfn=3, tag=None, occ=None, value=None, field_no=None, deleted=False, raw=None),
        dict(mfn=4, tag=70, occ=1, value="x", field_no=1, deleted=False, raw=None),
        dict(mfn=4, tag=70, occ=2, value="y", field_no=2, deleted=False, raw=None),
        dict(mfn=4, tag=24, occ=1, value="\ufffd\ufffd", field_no=3, deleted=False,
             raw=b"\xff\xfe"),
        dict(mfn=4, tag=26, occ=1, value="^aParis^c1965", field_no=4, deleted=False,
             raw=None),
        dict(mfn=5, tag=24, occ=1, value="d", field_no=1, deleted=True, raw=None),
    ]
    md = json.loads(t.schema.metadata[b"pydb"])
    assert md == {"format": 1, "rows": "fields", "encoding": "utf-8", "commit": md["commit"],
                  "max_mfn": 5}
    # without deleted=True the logically deleted record is left out
    assert [r["mfn"] for r in arrow.to_arrow(base).read_all().to_pylist()] == [1, 3, 4, 4, 4, 4]


def test_records_layout_and_subfields(tmp_path):
    base = odd_db(tmp_path)
    t = arrow.to_arrow(base, rows="records", subfields="list", deleted=True).read_all()
    assert t.schema.names == ["mfn", "deleted", "fields"]
    rows = t.to_pylist()
    assert [(r["mfn"], r["deleted"], len(r["fields"])) for r in rows] == \
        [(1, False, 1), (3, False, 0), (4, False, 4), (5, True, 1)]
    assert rows[2]["fields"][3] == {
        "tag": 26, "occ": 1, "value": "^aParis^c1965", "raw": None, "indicators": None,
        "text": "", "subfields": [{"code": "a", "value": "Paris"},
                                  {"code": "c", "value": "1965"}]}
    assert rows[2]["fields"][1]["occ"] == 2
    m = arrow.to_arrow(base, subfields="map").read_all()
    assert str(m.schema.field("subfields").type) == "map<string, string>"
    assert m.column("subfields").to_pylist()[5] == [("a", "Paris"), ("c", "1965")]
    assert m.column("text").to_pylist()[:3] == ["a", None, "x"]


def test_subfields_of_a_real_record(isis_data):
    with pydb.open(need(CDS), encoding="cp850") as db:
        t = arrow.to_arrow(db, subfields="list").read_all()
    row = [r for r in t.slice(0, 20).to_pylist() if r["mfn"] == 1 and r["tag"] == 26][0]
    assert row["value"] == "^aParis^bUnesco^c-1965"
    assert row["subfields"] == [{"code": "a", "value": "Paris"},
                                {"code": "b", "value": "Unesco"},
                                {"code": "c", "value": "-1965"}]


def test_bad_arguments(tmp_path):
    base = odd_db(tmp_path)
    with pytest.raises(ValueError, match="rows must be"):
        arrow.to_arrow(base, rows="cells")
    with pytest.raises(ValueError, match="subfields must be"):
        arrow.export_parquet(base, tmp_path / "x.parquet", subfields="dict")
    with pytest.raises(ValueError, match="batch_records must be an int >= 1"):
        arrow.to_arrow(base, batch_records=0)
    with pytest.raises(LookupError):
        arrow.to_arrow(base, encoding="no-such-codec")
    with pytest.raises(ValueError, match="a file of the database"):
        arrow.export_parquet(base, Path(str(base) + ".mst"))
    with pytest.raises(ValueError, match="compression must be one of zstd, snappy"):
        arrow.export_parquet(base, tmp_path / "x.parquet", compression="bogus")
    assert not (tmp_path / "x.parquet").exists()


def test_without_pyarrow_says_how_to_install(tmp_path, monkeypatch, capsys):
    base = odd_db(tmp_path)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'pydb\[arrow\]'"):
        arrow.to_arrow(base)
    assert cli_main(["export", str(base), str(tmp_path / "x.parquet")]) == 1
    assert cli_main(["import", str(tmp_path), str(tmp_path / "db")]) == 1
    err = capsys.readouterr().err
    assert err.count("pydb: Parquet needs pyarrow: pip install 'pydb[arrow]'") == 2
    assert not (tmp_path / "x.parquet").exists()


# ----------------------------------------------------------- round trips

@pytest.mark.parametrize("rows", ["fields", "records"])
@pytest.mark.parametrize("mst", all_master_files(), ids=lambda p: p.parent.name + "/" + p.name)
def test_round_trip_of_every_real_master_file(tmp_path, mst, rows):
    """Export (deleted records too, UTF-8: 8-bit values go to ``raw``) and
    import into a new database: every record, MFN, deleted flag and field
    byte comes back, and the MFNs in between stay unused."""
    try:
        db = pydb.open(mst)
    except pydb.DatabaseNotFoundError:
        pytest.skip("master file without a cross-reference file (CDS.std.mst)")
    with db:
        want = records_of(db)
        rep = arrow.export_parquet(db, tmp_path / "x.parquet", rows=rows, deleted=True)
        unreadable = len(db.mfns(deleted=True)) - len(want)
    assert rep.records == len(want) and len(rep.errors) == unreadable
    rep2 = arrow.import_parquet(tmp_path / "x.parquet", tmp_path / "new")
    assert rep2.records == len(want) and rep2.errors == []
    with pydb.open(tmp_path / "new") as new:
        assert records_of(new) == want
        assert new.max_mfn == (want[-1][0] if want else 0)


def test_round_trip_keeps_gaps_empty_and_deleted_records(tmp_path):
    base = odd_db(tmp_path)
    for rows in ("fields", "records"):
        out = tmp_path / f"{rows}.parquet"
        arrow.export_parquet(base, out, rows=rows, deleted=True)
        rep = arrow.import_parquet(out, tmp_path / rows)
        assert (rep.records, rep.deleted, rep.max_mfn) == (4, 1, 5)
        with pydb.open(base) as a, pydb.open(tmp_path / rows) as b:
            assert records_of(b) == records_of(a)
            assert b.xrf_entry(2)["state"] == "physically deleted"
            assert b[5].deleted and len(b[3]) == 0
    # straight from the stream of one database into another
    rep = arrow.from_arrow(arrow.to_arrow(base, deleted=True, batch_records=2),
                           tmp_path / "direct")
    assert (rep.records, rep.deleted, rep.max_mfn) == (4, 1, 5)
    with pydb.open(base) as a, pydb.open(tmp_path / "direct") as b:
        assert records_of(b) == records_of(a)


def test_round_trip_through_arrow_and_8bit_encoding(tmp_path, isis_data):
    """The CDS sample decoded as CP850 (every byte is a character there:
    no raw column needed) comes back byte for byte, the encoding taken
    from the schema metadata."""
    with pydb.open(need(CDS), encoding="cp850") as db:
        want = records_of(db)
        t = arrow.to_arrow(db).read_all()
    assert t.column("raw").null_count == len(t)
    assert any("\u00e9" in v for v in t.column("value").to_pylist())   # é from 0x82
    rep = arrow.from_arrow(t, tmp_path / "new")
    assert rep.records == 150
    with pydb.open(tmp_path / "new") as new:
        assert records_of(new) == want


def test_round_trip_of_the_default_database(small, small_parquet, tmp_path):
    rep = arrow.import_parquet(small_parquet, tmp_path / "back")
    assert rep.records == 3000 and rep.errors == []
    with pydb.open(small) as a, pydb.open(tmp_path / "back") as b:
        assert records_of(b) == records_of(a)


# ------------------------------------------------------------- DuckDB

def test_duckdb_counts_per_tag_equal_pydb(small, small_parquet):
    con = duck()
    got = dict(con.execute("SELECT tag, count(*) FROM read_parquet(?) GROUP BY tag",
                           [str(small_parquet)]).fetchall())
    with pydb.open(small) as db:
        want = tag_counts(db)
        assert got == dict(want)
        assert con.execute("SELECT count(DISTINCT mfn), max(occ) FROM read_parquet(?)",
                           [str(small_parquet)]).fetchone() == (len(db), 4)


def test_duckdb_full_scan_equals_pydb_records(small, small_parquet):
    con = duck()
    rows = con.execute(
        "SELECT mfn, bool_or(deleted), list(tag ORDER BY field_no), "
        "list(value ORDER BY field_no) FROM read_parquet(?) GROUP BY mfn ORDER BY mfn",
        [str(small_parquet)]).fetchall()
    with pydb.open(small) as db:
        want = [(r.mfn, r.deleted, list(r.tags), [f.value for f in r.fields]) for r in db]
        assert [tuple(r) for r in rows] == want
        # occ numbers the fields of one tag: value is rec[tag][occ - 1]
        by_occ = con.execute("SELECT mfn, tag, occ, value FROM read_parquet(?) "
                             "WHERE occ > 1", [str(small_parquet)]).fetchall()
        assert len(by_occ) > 1000
        assert all(db[m][t][o - 1] == v for m, t, o, v in by_occ)


def test_duckdb_term_queries_equal_search(small, small_parquet):
    """Per key, the MFN set of DuckDB's SQL equals db.search(key) (the
    keys of the FST's technique-0 lines, see the module docstring)."""
    con = duck()
    src = str(small_parquet)
    sql = {
        "LA=": "SELECT 'LA=' || upper(value) AS k, mfn FROM read_parquet(?) WHERE tag = 40",
        "YR=": "SELECT 'YR=' || upper(regexp_extract(value, '\\^c([^^]*)', 1)) AS k, mfn "
               "FROM read_parquet(?) WHERE tag = 26",
        "AU": "SELECT upper(value) AS k, mfn FROM read_parquet(?) WHERE tag = 70",
    }
    checked = Counter()
    with pydb.open(small) as db:
        for kind, q in sql.items():
            groups = con.execute(f"SELECT k, list(DISTINCT mfn) FROM ({q}) GROUP BY k",
                                 [src]).fetchall()
            assert groups
            for key, mfns in groups:
                assert sorted(mfns) == list(db.search(f'"{key}"')), key
                checked[kind] += 1
    assert checked["LA="] == 8 and checked["YR="] == 60 and checked["AU"] > 2000
    # a boolean query, both ways
    got = con.execute("SELECT count(*) FROM (SELECT mfn FROM read_parquet(?) WHERE tag = 40 "
                      "AND value = 'fr' INTERSECT SELECT mfn FROM read_parquet(?) WHERE "
                      "tag = 26 AND value LIKE '%^c1965%')", [src, src]).fetchone()[0]
    with pydb.open(small) as db:
        assert got == len(db.search("LA=FR * YR=1965")) > 0


def test_duckdb_author_keys_of_the_cds_sample(isis_data, tmp_path):
    """The same over the UNESCO CDS sample and its CISIS-made ISIS index
    (30-byte keys): 134 author keys, every one with equal MFN sets."""
    out = tmp_path / "cds.parquet"
    con = duck()
    with pydb.open(need(CDS), encoding="cp850") as db:
        arrow.export_parquet(db, out)
        groups = con.execute(
            "SELECT rtrim(left(upper(value), 30)) AS k, list(DISTINCT mfn) "
            "FROM read_parquet(?) WHERE tag = 70 AND regexp_matches(value, "
            "'^[ -~]*$') AND NOT regexp_matches(value, '[<>^\"]') GROUP BY k",
            [str(out)]).fetchall()
        assert len(groups) == 134
        for key, mfns in groups:
            assert sorted(mfns) == list(db.search(f'"{key}"')), key


def test_duckdb_reads_the_records_layout(small, tmp_path):
    out = tmp_path / "r.parquet"
    arrow.export_parquet(small, out, rows="records")
    con = duck()
    got = dict(con.execute("SELECT f.tag, count(*) FROM (SELECT unnest(fields) AS f "
                           "FROM read_parquet(?)) GROUP BY f.tag", [str(out)]).fetchall())
    with pydb.open(small) as db:
        assert got == dict(tag_counts(db))


# ------------------------------------------- batches, row groups, parts

def test_batches_make_row_groups(small, small_parquet):
    meta = pq.ParquetFile(small_parquet).metadata
    assert meta.num_row_groups == 6                  # 3000 records / 500
    with pydb.open(small) as db:
        sizes = [sum(len(r) for r in db.read_many(range(i, i + 500)))
                 for i in range(1, 3001, 500)]
    assert [meta.row_group(i).num_rows for i in range(6)] == sizes
    reader = arrow.to_arrow(small, rows="records", batch_records=700)
    assert [b.num_rows for b in reader] == [700, 700, 700, 700, 200]


def test_streaming_holds_one_batch(small):
    """Arrow memory in use while streaming 100-record batches stays under a
    tenth of the whole table's (the stream holds one batch at a time)."""
    full = arrow.to_arrow(small).read_all()
    size = full.nbytes
    del full
    base = pa.total_allocated_bytes()
    peak, rows = 0, 0
    for b in arrow.to_arrow(small, batch_records=100):
        rows += b.num_rows
        peak = max(peak, pa.total_allocated_bytes() - base)
    assert rows > 20000 and 0 < peak < size / 10


def test_the_databases_own_files_are_refused(small):
    """Neither one file nor a partitioned directory goes over one of the
    database's files (a directory small.pdx would be its native index)."""
    files = [Path(f"{small}.pdx", "MANIFEST"), Path(f"{small}.wal"), Path(f"{small}.ifp")]

    def contents():
        return [p.read_bytes() if p.exists() else None for p in files]

    kept = contents()
    for target, kw in ((f"{small}.pdx", {"partition_records": 10}),
                       (f"{small}.wal", {}), (f"{small}.ifp", {"partition_records": 10})):
        with pytest.raises(ValueError, match="is a file of the database"):
            arrow.export_parquet(small, target, **kw)
    assert contents() == kept and kept[0] and kept[2] is None
    with pydb.open(small) as db:
        assert len(db.search("A$")) > 0


def test_partitioned_directory(small, tmp_path):
    out = tmp_path / "parts"
    rep = arrow.export_parquet(small, out, partition_records=1000, batch_records=300)
    assert rep.records == 3000
    files = sorted(p.name for p in out.iterdir())
    assert files == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    for i, name in enumerate(files):
        t = pq.read_table(out / name, columns=["mfn"])
        mfns = sorted(set(t.column("mfn").to_pylist()))
        assert mfns == list(range(1000 * i + 1, 1000 * i + 1001))
        assert pq.ParquetFile(out / name).metadata.num_row_groups == 4   # 300 300 300 100
    con = duck()
    assert con.execute("SELECT count(DISTINCT mfn) FROM read_parquet(?)",
                       [str(out / "*.parquet")]).fetchone() == (3000,)
    rep2 = arrow.import_parquet(out, tmp_path / "back")
    assert rep2.records == 3000
    with pydb.open(small) as a, pydb.open(tmp_path / "back") as b:
        assert records_of(b) == records_of(a)
    # an earlier export is replaced (a trailing separator is the same
    # directory); any other directory is refused
    arrow.export_parquet(small, f"{out}/", partition_records=2000, compression="SNAPPY")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("parts")] == ["parts"]
    assert len(list(out.iterdir())) == 2
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="not a directory of part"):
        arrow.export_parquet(small, tmp_path / "mine", partition_records=10)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_export_reads_one_commit(tmp_path):
    """Records appended and updated while the stream is being read are not
    in it: to_arrow holds the snapshot it took."""
    base = build_db(tmp_path / "w", records=[[(24, f"r{i}".encode())] for i in range(1, 11)],
                    sync=True)
    with pydb.open(base, readonly=False) as db:
        reader = arrow.to_arrow(db, rows="records", batch_records=2)
        first = reader.read_next_batch()
        db.update(9, [(24, b"changed")])
        db.append([(24, b"new")])
        rest = reader.read_all()
        assert len(db) == 11
    values = [f[0]["value"] for f in first.column("fields").to_pylist()
              + rest.column("fields").to_pylist()]
    assert values == [f"r{i}" for i in range(1, 11)]


# ----------------------------------------------------------- import rules

def write(tmp_path, table, name="in.parquet"):
    p = tmp_path / name
    pq.write_table(table, p)
    return p


def test_import_of_spark_style_data(tmp_path):
    """int64 columns, no field_no/deleted/raw/occ: rows in row order."""
    t = pa.table({"mfn": pa.array([2, 2, 7], pa.int64()), "tag": pa.array([70, 24, 24]),
                  "value": ["b", "a", "c"]})
    rep = arrow.import_parquet(write(tmp_path, t), tmp_path / "db")
    assert (rep.records, rep.max_mfn) == (2, 7)
    with pydb.open(tmp_path / "db") as db:
        assert records_of(db) == [(2, False, [(70, b"b"), (24, b"a")]),
                                  (7, False, [(24, b"c")])]


def test_import_of_other_string_types(tmp_path):
    """large, view and dictionary-encoded strings, binary values."""
    t = pa.table({"mfn": pa.array([1, 1, 2, 3], pa.int16()),
                  "tag": pa.array([24, 70, 24, 24], pa.uint16()),
                  "value": pa.array(["a", "b", "c", "d"], pa.large_string())})
    kinds = [t, t.set_column(2, "value", pa.array(["a", "b", "c", "d"]).dictionary_encode()),
             t.set_column(2, "value", pa.array([b"a", b"b", b"c", b"d"], pa.binary()))]
    if hasattr(pa, "string_view"):
        kinds.append(t.set_column(2, "value", pa.array(["a", "b", "c", "d"], pa.string_view())))
    for i, table in enumerate(kinds):
        rep = arrow.from_arrow(table, tmp_path / f"db{i}")
        assert (rep.records, rep.errors) == (3, []), table.schema
        with pydb.open(tmp_path / f"db{i}") as db:
            assert records_of(db) == [(1, False, [(24, b"a"), (70, b"b")]),
                                      (2, False, [(24, b"c")]), (3, False, [(24, b"d")])]


def test_import_needs_mfn_order_or_sort(tmp_path):
    t = pa.table({"mfn": [2, 2, 1], "tag": [24, 70, 24], "value": ["x", "y", "z"],
                  "field_no": [2, 1, 1]})
    p = write(tmp_path, t)
    with pytest.raises(pydb.IsoRecordError, match=r"row 3: MFN 1 after MFN 2.*sort=True") as e:
        arrow.import_parquet(p, tmp_path / "a")
    assert (e.value.filename, e.value.number, e.value.mfn) == (str(p), 3, 1)
    assert not (tmp_path / "a.mst").exists()
    rep = arrow.import_parquet(p, tmp_path / "b", sort=True)
    assert rep.records == 2
    with pydb.open(tmp_path / "b") as db:
        assert records_of(db) == [(1, False, [(24, b"z")]),
                                  (2, False, [(70, b"y"), (24, b"x")])]


def test_import_into_an_existing_database_appends(tmp_path, small):
    base = build_db(tmp_path / "e", records=[[(24, b"one")], [(24, b"two")]], sync=True)
    t = arrow.to_arrow(small, rows="records").read_all().slice(0, 5)
    rep = arrow.from_arrow(t, base)
    assert (rep.records, rep.max_mfn) == (5, 7)
    with pydb.open(base) as db, pydb.open(small) as src:
        assert [f for _, _, f in records_of(db)[2:]] == [f for _, _, f in records_of(src)[:5]]


def test_bad_records_are_reported_or_raised(tmp_path):
    t = pa.table({"mfn": [1, 2, 3, 3, None], "tag": [24, 70000, 24, 30, 24],
                  "value": ["ok", "big tag", "fine", None, "orphan"]})
    p = write(tmp_path, t)
    rep = arrow.import_parquet(p, tmp_path / "a")
    assert rep.records == 1
    reasons = sorted(str(e) for e in rep.errors)
    assert len(reasons) == 3
    assert any("row 5: the MFN is null" in r for r in reasons)
    assert any("MFN 3: row 4, tag 30: the value is null" in r for r in reasons)
    assert any("tag 70000 is not an ISIS tag" in r for r in reasons)
    with pytest.raises(pydb.IsoRecordError, match="tag 70000"):
        arrow.import_parquet(p, tmp_path / "b", on_error="stop")
    t = pa.table({"mfn": [1], "tag": [24], "value": ["\u20ac"]})
    rep = arrow.import_parquet(write(tmp_path, t, "e.parquet"), tmp_path / "c",
                               encoding="latin-1")
    assert rep.records == 0 and "codec can't encode" in str(rep.errors[0])


@pytest.mark.parametrize("table, reason", [
    ({"tag": [1], "value": ["x"]}, "no column 'mfn'"),
    ({"mfn": [1], "tag": [24]}, "no column 'value'"),
    ({"mfn": [1], "tag": ["24"], "value": ["x"]}, "column 'tag' is string, not an integer"),
    ({"mfn": ["1"], "tag": [24], "value": ["x"]}, "column 'mfn' is string, not an integer"),
    ({"mfn": [1], "tag": [24], "value": [1.5]}, "column 'value' is double"),
    ({"mfn": [1], "tag": [24], "value": ["x"], "deleted": [1]}, "'deleted' is int64"),
    ({"mfn": [1], "fields": [[1, 2]]}, "int64>, not a list of structs"),
])
def test_schemas_that_cannot_be_imported(tmp_path, table, reason):
    p = write(tmp_path, pa.table(table))
    with pytest.raises(pydb.IsoRecordError, match=re.escape(reason)) as e:
        arrow.import_parquet(p, tmp_path / "db")
    assert e.value.filename == str(p)
    assert not (tmp_path / "db.mst").exists()


def test_files_that_are_not_parquet(tmp_path):
    p = tmp_path / "x.parquet"
    p.write_bytes(b"PAR1 not really")
    with pytest.raises(pydb.IsoRecordError, match="not a readable Parquet file") as e:
        arrow.import_parquet(p, tmp_path / "db")
    assert e.value.filename == str(p)
    with pytest.raises(FileNotFoundError):
        arrow.import_parquet(tmp_path / "missing.parquet", tmp_path / "db")
    (tmp_path / "empty").mkdir()
    with pytest.raises(pydb.IsoRecordError, match=r"no \*\.parquet file"):
        arrow.import_parquet(tmp_path / "empty", tmp_path / "db")
    with pytest.raises(TypeError, match="expected a path, a pyarrow Table"):
        arrow.from_arrow([1, 2], tmp_path / "db")


# ------------------------------------------------------------ command line

def test_cli_export_and_import(tmp_path, isis_data, capsys):
    src = need(CDS)
    out = tmp_path / "cds.parquet"
    assert cli_main(["export", src, str(out), "--encoding", "cp850",
                     "--batch-records", "50"]) == 0
    assert "exported 150 record(s), 0 skipped" in capsys.readouterr().err
    assert pq.ParquetFile(out).metadata.num_row_groups == 3
    assert cli_main(["import", str(out), str(tmp_path / "new")]) == 0
    with pydb.open(src) as a, pydb.open(tmp_path / "new") as b:
        assert records_of(b) == records_of(a)
    parts = tmp_path / "parts"
    assert cli_main(["export", src, str(parts), "--partition-records", "100",
                     "--rows", "records", "--compression", "snappy"]) == 0
    assert sorted(p.name for p in parts.iterdir()) == ["part-00000.parquet",
                                                       "part-00001.parquet"]
    assert cli_main(["import", str(parts), str(tmp_path / "new2")]) == 0
    with pydb.open(src) as a, pydb.open(tmp_path / "new2") as b:
        assert records_of(b) == records_of(a)
    assert cli_main(["export", src, str(out)]) == 1       # exists, no --force
    assert "exists" in capsys.readouterr().err


# ------------------------------------------------------------------ Spark

@pytest.mark.spark
def test_spark_reads_the_same_catalogue(small, small_parquet, tmp_path):
    """Spark in local mode (one documented command, docs/parquet.md):
    counts per tag and term queries equal pydb's; a catalogue processed in
    Spark (sorted, written by Spark) comes back as the same database."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    spark = (SparkSession.builder.master("local[2]").appName("pydb-test")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        df = spark.read.parquet(str(small_parquet))
        got = {r["tag"]: r["count"] for r in df.groupBy("tag").count().collect()}
        with pydb.open(small) as db:
            assert got == dict(tag_counts(db))
            la = (df.where(F.col("tag") == 40)
                  .select(F.concat(F.lit("LA="), F.upper("value")).alias("k"), "mfn")
                  .groupBy("k").agg(F.collect_set("mfn").alias("m")).collect())
            assert len(la) == 8
            for r in la:
                assert sorted(r["m"]) == list(db.search(r["k"]))
        out = tmp_path / "spark_out"
        df.orderBy("mfn", "field_no").write.parquet(str(out))
    finally:
        spark.stop()
    rep = arrow.import_parquet(out, tmp_path / "back")
    assert rep.records == 3000
    with pydb.open(small) as a, pydb.open(tmp_path / "back") as b:
        assert records_of(b) == records_of(a)
