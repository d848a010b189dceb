"""The crashtest: the C program, its Python twin and the command line,
on small generated databases (speed is measured in benchmarks, not here)."""

import json
import os
import subprocess
import sys

import pytest

import pydb
from pydb import crashtest
from pydb.unesb import generate


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("ct"), count=500)


def settings(db, **kw):
    base = dict(db=str(db), threads=[3, 1], reps=2, min_time=0.0, max_time=30.0)
    base.update(kw)
    return crashtest.Settings(**base)


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("lock", ["none", "mutex"])
def test_c_and_python_read_the_same_rows(small_db, cache, lock):
    s = settings(small_db, cache=cache, lock=lock)
    for impl, samples in (("c", crashtest.run_c(s)), ("python", crashtest.run_python(s))):
        # one full pass each: the sequential read sees every record once,
        # T threads read the list T times in all
        key = [(x["phase"], x["threads"], x["rep"], x["rows"]) for x in samples]
        assert key == [("seq", 1, 0, 500), ("seq", 1, 1, 500),
                       ("threads", 3, 0, 1500), ("threads", 3, 1, 1500),
                       ("threads", 1, 0, 500), ("threads", 1, 1, 500)], impl
        assert all(x["impl"] == impl and x["cache"] == cache and x["lock"] == lock
                   and x["seconds"] > 0 and x["rows_per_sec"] > 0 for x in samples)


def test_direct(small_db):
    s = settings(small_db, cache="direct", threads=[2])
    try:
        samples = crashtest.run_c(s) + crashtest.run_python(s)
    except (RuntimeError, pydb.UnsupportedError) as e:
        pytest.skip(f"O_DIRECT refused here: {e}")
    assert sorted(x["rows"] for x in samples) == [500, 500, 500, 500, 1000, 1000, 1000, 1000]


def test_min_and_max_time(small_db):
    s = settings(small_db, threads=[2], reps=1, min_time=0.3, max_time=5.0)
    for samples in (crashtest.run_c(s), crashtest.run_python(s)):
        for x in samples:
            assert x["seconds"] >= 0.3
            assert x["rows"] % 500 == 0 and x["rows"] >= 500   # whole passes only
    s = settings(small_db, threads=[1], reps=1, max_time=1e-9)
    for samples in (crashtest.run_c(s), crashtest.run_python(s)):
        assert all(x["rows"] == 256 for x in samples)   # cut off at the first check


def test_c_program_text_output(small_db):
    out = subprocess.run([str(crashtest.crashtest_binary()), "--threads", "2,1", str(small_db)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("500 records")
    assert out[1] == "500 postings max mfn 500"
    assert out[2].startswith("sequential read 500 rows in ")
    assert out[2].endswith(" rows per sec")
    assert out[3].startswith("2 threads  ") and out[4].startswith("1 threads  ")


def test_c_program_errors(tmp_path):
    binary = str(crashtest.crashtest_binary())
    r = subprocess.run([binary, str(tmp_path / "missing")], capture_output=True, text=True)
    assert r.returncode == 2 and "no master file" in r.stderr
    r = subprocess.run([binary, "--threads", "0", "x"], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr


def test_command_line(small_db, tmp_path):
    out_json = tmp_path / "samples.json"
    r = subprocess.run([sys.executable, "-m", "pydb", "crashtest", str(small_db), "--quick",
                        "--cache", "warm", "--threads", "2,1", "--json", str(out_json)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "== c, cache warm, lock none" in text and "== python, cache warm, lock none" in text
    assert "-- C vs Python, cache warm, lock none" in text
    table = text.split("-- C vs Python, cache warm, lock none")[1].splitlines()
    assert [line.split()[0] for line in table[2:5]] == ["sequential", "2", "1"]
    data = json.loads(out_json.read_text())
    assert {x["impl"] for x in data["samples"]} == {"c", "python"}
    assert len(data["samples"]) == 2 * 3


def test_command_line_rejects_bad_options(small_db):
    for bad in (["--cache", "lukewarm"], ["--threads", "a,b"], ["--lock", "spin"]):
        r = subprocess.run([sys.executable, "-m", "pydb", "crashtest", str(small_db)] + bad,
                           capture_output=True, text=True)
        assert r.returncode == 2 and "error" in r.stderr


def test_default_database_is_built_once(tmp_path, monkeypatch):
    from pydb import unesb
    monkeypatch.setenv("PYDB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(unesb, "RECORDS_PER_SCALE", 300)
    base = unesb.default_database()
    assert base.parent.name == f"unesb-v{unesb.GENERATOR_VERSION}-x1"
    mtime = (base.parent / "unesb.mst").stat().st_mtime_ns
    assert unesb.default_database() == base
    assert (base.parent / "unesb.mst").stat().st_mtime_ns == mtime
    with pydb.open(base) as db:
        assert len(db) == 300


def test_unesb_is_deterministic(tmp_path):
    a = generate(tmp_path / "a", count=400, seed=7)
    b = generate(tmp_path / "b", count=400, seed=7)
    c = generate(tmp_path / "c", count=400, seed=8)
    for ext in (".mst", ".xrf"):
        assert a.with_suffix(ext).read_bytes() == b.with_suffix(ext).read_bytes()
    assert a.with_suffix(".mst").read_bytes() != c.with_suffix(".mst").read_bytes()
    with pydb.open(a) as db:
        tags = {t for r in db for t in r.tags}
        assert {24, 26, 30, 40, 69} <= tags <= {24, 26, 30, 40, 44, 50, 69, 70, 71, 76}
        assert all(r.get(26).startswith("^a") for r in db)
