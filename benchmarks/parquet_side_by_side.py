"""pydb, DuckDB and Spark side by side on the same catalogue (docs/parquet.md).

    python benchmarks/parquet_side_by_side.py [--scale N] [--spark] [--out DIR]

Exports the built-in default database (pydb.unesb, scale N, in its cache
folder) to Parquet with pydb.export_parquet, reporting rows/s and the
process's peak RSS, then answers the same term queries with pydb's
inverted index (db.search), DuckDB SQL over the Parquet file and, with
--spark (needs pyspark and Java), Spark SQL in local mode, and prints one
Markdown table.  The SQL reproduces the keys of the FST's technique-0
lines (unesb.FST): ``LA=`` + upper(v40), ``YR=`` + subfield c of v26.
Needs the ``test`` extra (pyarrow, duckdb).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import duckdb

import pydb
from pydb import arrow, unesb

LA = "tag = 40 AND upper(value) = '{}'"
YR = "tag = 26 AND regexp_extract(value, '\\^c([^^]*)', 1) = '{}'"

#: (search expression, SQL over the table t giving the matching MFNs)
QUERIES = [
    ("LA=FR", f"SELECT DISTINCT mfn FROM t WHERE {LA.format('FR')}"),
    ("YR=1965", f"SELECT DISTINCT mfn FROM t WHERE {YR.format('1965')}"),
    ("LA=FR * YR=1965", f"SELECT mfn FROM t WHERE {LA.format('FR')} INTERSECT "
                        f"SELECT mfn FROM t WHERE {YR.format('1965')}"),
    ("LA=AR + LA=ZH", f"SELECT DISTINCT mfn FROM t WHERE {LA.format('AR')} OR "
                      f"{LA.format('ZH')}"),
    ("LA=EN ^ YR=2000", f"SELECT mfn FROM t WHERE {LA.format('EN')} EXCEPT "
                        f"SELECT mfn FROM t WHERE {YR.format('2000')}"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=1, help="default database scale (default 1)")
    ap.add_argument("--spark", action="store_true", help="also run the queries in Spark")
    ap.add_argument("--out", default=None, help="folder for the Parquet file (default: temp)")
    args = ap.parse_args()
    base = unesb.default_database(scale=args.scale)
    out = Path(args.out or tempfile.mkdtemp()) / "unesb.parquet"
    t0 = time.perf_counter()
    rep = arrow.export_parquet(base, out)
    dt = time.perf_counter() - t0
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{out}')")
    rows = con.execute("SELECT count(*) FROM t").fetchone()[0]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"export: {rep.records} records, {rows} rows in {dt:.2f} s = {rows / dt:,.0f} "
          f"rows/s, peak RSS {rss} MiB, {out.stat().st_size / 2**20:.1f} MiB file")
    spark = None
    if args.spark:
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[2]").appName("pydb")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.read.parquet(str(out)).createOrReplaceTempView("t")
    print("\n| query | pydb db.search | DuckDB | " + ("Spark |" if spark else ""))
    print("|---|---|---|" + ("---|" if spark else ""))
    with pydb.open(base) as db:
        for expr, sql in QUERIES:
            mine = list(db.search(expr))
            duck = sorted(m for (m,) in con.execute(sql).fetchall())
            cells = [f"`{expr}`", str(len(mine)), str(len(duck)) + (" =" if duck == mine
                                                                       else " DIFFERENT")]
            if spark:
                sp = sorted(r[0] for r in spark.sql(sql.replace("\\", "\\\\")).collect())
                cells.append(str(len(sp)) + (" =" if sp == mine else " DIFFERENT"))
            print("| " + " | ".join(cells) + " |")
    if spark:
        spark.stop()


if __name__ == "__main__":
    main()
