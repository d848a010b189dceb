"""The crashtest: the C program, its Python twin and the command line,
on small generated databases (speed is measured in benchmarks, not here)."""

import errno
import json
import os
import re
import subprocess
import sys

import pytest

import pydb
from pydb import crashtest, ministat, unesb
from pydb.index import Posting, Term
from pydb.unesb import generate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(crashtest.__file__)))


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
    assert out[0] == "500 records (from the XRF; no index phase)"
    assert out[1] == "500 rows max mfn 500"
    assert out[2].startswith("sequential read 500 rows in ")
    assert out[2].endswith(" rows per sec")
    assert out[3].startswith("2 threads  ") and out[4].startswith("1 threads  ")


def test_c_program_reads_a_given_list(small_db, tmp_path):
    lst = tmp_path / "mfns"
    lst.write_text("7\n3\n3\n500\n")
    binary = str(crashtest.crashtest_binary())
    r = subprocess.run([binary, "--list", str(lst), "--threads", "3", "--json", str(small_db)],
                       capture_output=True, text=True, check=True)
    rows = [json.loads(x)["rows"] for x in r.stdout.splitlines()]
    assert rows == [500, 12]            # sequential: every record; 3 threads x 4 MFNs
    lst.write_text("7\n501\n")
    r = subprocess.run([binary, "--list", str(lst), str(small_db)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "MFN 501 outside 1..500" in r.stderr
    lst.write_text("7\nseven\n")
    r = subprocess.run([binary, "--list", str(lst), str(small_db)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "not a list of MFNs" in r.stderr
    lst.write_text("")
    r = subprocess.run([binary, "--list", str(lst), str(small_db)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "lists no MFNs" in r.stderr


def test_c_program_help_is_not_an_error():
    """--help prints the usage on stdout with status 0; bad usage prints it
    on stderr with status 2."""
    binary = str(crashtest.crashtest_binary())
    r = subprocess.run([binary, "--help"], capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.startswith("usage: pydb-crashtest [--threads 8,2,1,4]")
    assert r.stdout.endswith("Exit status: 0 done; 2 bad usage, or a read or open failed "
                             "(the\nreason on stderr).\n")
    r = subprocess.run([binary, "--threads", "0", "db"], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (2, "") and r.stderr.startswith("usage: ")


def test_c_program_names_a_missing_database_as_the_system_does(tmp_path):
    """An open that fails for an errno says the system's word for it, not
    the core's "input/output error", and no offset of -1."""
    r = subprocess.run([str(crashtest.crashtest_binary()), str(tmp_path / "none")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    base = tmp_path / "none"
    assert r.stderr in (f"pydb-crashtest: open: {os.strerror(errno.ENOENT)}: no master file "
                        f"(.mst) for database {base} (file {base}.{ext})\n"
                        for ext in ("mst", "MST"))


def test_python_reads_per_record_and_in_batches_alike(small_db):
    for py_read in crashtest.PY_READS:
        s = settings(small_db, py_read=py_read, threads=[2], mfns=[5, 9, 9, 400] * 100)
        samples = crashtest.run_python(s)
        assert [(x["impl"], x["phase"], x["rows"]) for x in samples] == [
            (crashtest.impl_name(py_read), "seq", 500)] * 2 + [
            (crashtest.impl_name(py_read), "threads", 800)] * 2
    s = settings(small_db, threads=[2], mfns=[5, 9, 9, 400] * 100)
    assert [x["rows"] for x in crashtest.run_c(s)] == [500, 500, 800, 800]
    with pytest.raises(ValueError):
        crashtest.run_python(settings(small_db, py_read="bulk"))


def test_python_twin_under_another_interpreter(small_db):
    """run_python_with() runs the twin in a subprocess (here this same
    interpreter standing in for python3.13t): the same rows as run_python,
    the impl renamed python-ft*, the interpreter's version and GIL state."""
    s = settings(small_db, py_read="record", threads=[2], mfns=[5, 9, 9, 400] * 100)
    samples, version, gil = crashtest.run_python_with(sys.executable, s)
    assert [(x["impl"], x["phase"], x["rows"]) for x in samples] == [
        ("python-ft-record", "seq", 500)] * 2 + [("python-ft-record", "threads", 800)] * 2
    assert version == sys.version
    assert gil is getattr(sys, "_is_gil_enabled", lambda: True)()
    with pytest.raises(RuntimeError, match="failed"):
        crashtest.run_python_with(sys.executable, settings(small_db, py_read="bulk"))


def test_command_line_python_ft(small_db):
    r = subprocess.run([sys.executable, "-m", "pydb", "crashtest", str(small_db), "--quick",
                        "--cache", "warm", "--threads", "2,1", "--py-read", "record",
                        "--reps", "1", "--python-ft", sys.executable],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for impl in ("C", "Python record", "Python-FT record"):
        assert f"== {impl}, cache warm, lock none (median of 1)" in r.stdout
    assert f"(Python-FT: {sys.executable}, {sys.version.split()[0]}, GIL " in r.stderr


class DictIndex:
    """An in-memory index with the interface PrefixRows uses (terms by
    prefix in key order, postings by key), built here from tag 76 of the
    generated records: each <...> term under the key 'Z' + term."""

    def __init__(self, db):
        self.postings_of = {}
        for rec in db:
            for cnt, term in enumerate(re.findall(r"<([^>]*)>", "".join(rec[76])), 1):
                self.postings_of.setdefault("Z" + term.upper(), []).append(
                    Posting(rec.mfn, 76, 1, cnt))

    def terms(self, prefix):
        return [Term(k, len(v)) for k, v in sorted(self.postings_of.items())
                if k.startswith(prefix)]

    def postings(self, key, raw=False):
        return self.postings_of[key]


def test_prefix_row_source(tmp_path):
    base = generate(tmp_path, count=6000)
    with pydb.open(base) as db:
        index = DictIndex(db)
        header, mfns = crashtest.PrefixRows("Z", index).rows(db)
        terms, postings = unesb.z_counts(6000)
        assert header == [f"{terms} terms", f"{postings} postings max mfn 6000"]
        assert len(mfns) == postings
        assert mfns == [p.mfn for t in index.terms("Z") for p in index.postings(t.key)]
        assert crashtest.PrefixRows("ZZZZZZ", index).rows(db) == (
            ["0 terms", "0 postings max mfn 6000"], [])
        header, xrf = crashtest.XrfRows().rows(db)
        assert xrf == list(range(1, 6001))
    s = settings(base, threads=[4], reps=1, mfns=mfns)
    for samples in (crashtest.run_c(s), crashtest.run_python(s)):
        assert [x["rows"] for x in samples] == [6000, 4 * postings]


def test_comparison_verdicts():
    def mk(impl, threads, values, phase="threads"):
        return [{"impl": impl, "phase": phase, "threads": threads, "rows_per_sec": v,
                 "cache": "warm", "lock": "none", "rows": 1, "rep": i}
                for i, v in enumerate(values)]
    samples = (mk("c", 1, [100, 101, 99], "seq") + mk("python", 1, [50, 51, 49], "seq")
               + mk("c", 1, [100, 102, 98]) + mk("c", 2, [200, 202, 198])
               + mk("python", 1, [10, 11, 9]) + mk("python", 2, [10, 12, 8]))
    rows = crashtest.comparison(samples, [2, 1], ["c", "python"])
    assert [r["label"] for r in rows] == ["sequential", "2 threads", "1 thread"]
    seq, two, one = rows
    ratio, v = seq["vs_c"]["python"]
    assert ratio == 0.5 and v.significant and v.pct == pytest.approx(-50.0)
    assert v.diff_ci == pytest.approx(ministat.student_t_table(95, 4) * 1.0 * (2 / 3) ** 0.5)
    ratio, v = two["scaling"]["c"]
    assert ratio == 2.0 and v.significant and v.pct == pytest.approx(100.0)
    ratio, v = two["scaling"]["python"]
    assert ratio == 1.0 and not v.significant
    assert one["scaling"] == {}
    s = crashtest.Settings(db="x", threads=[2, 1], reps=3)
    text = crashtest.format_table(samples, s)
    assert "-50.0% +/- " in text and "+100.0% +/- " in text and "no difference proven" in text
    lines = text.splitlines()
    assert lines[1].split() == ["C", "rows/s", "Python", "batch", "rows/s", "Python", "batch",
                                "/", "C", "(ministat)"]
    assert lines[2].split()[:4] == ["sequential", "100", "50", "0.500"]
    assert lines[5] == ("   (X / C: X's median over C's; ministat: X's mean against C's, "
                        "3 runs each)")
    assert lines[7] == ("-- thread scaling: rows/s against the same implementation with 1 "
                        "thread, cache warm, lock none")
    assert lines[9].split() == ["2", "threads", "2.00x", "+100.0%", "+/-", "4.5%", "1.00x",
                                "no", "difference", "proven"]


def test_target_verdicts_met_missed_undecided():
    t2 = ministat.student_t_table(95, 2)          # 4.303, as ministat prints it
    # a figure against an absolute target: mean +/- t(n-1) s / sqrt(n)
    tv = crashtest.target_verdict([12e6, 12.2e6, 11.8e6], 10e6)
    assert tv.word == "met" and tv.value == 12e6 and tv.runs == 3
    assert tv.low == pytest.approx(12e6 - t2 * 0.2e6 / 3 ** 0.5)
    assert tv.high == pytest.approx(12e6 + t2 * 0.2e6 / 3 ** 0.5)
    assert crashtest.target_verdict([2.5e6, 2.4e6, 2.6e6], 10e6).word == "missed"
    tv = crashtest.target_verdict([9.6e6, 10.4e6, 10.6e6], 10e6)
    # mean 10.2e6 +/- t2 * 529150 / sqrt(3) holds 10e6; half/(mean-target) = 6.57
    assert tv.word == "undecided" and tv.runs_needed == 130
    tv = crashtest.target_verdict([12e6], 10e6)
    assert (tv.word, tv.low, tv.high, tv.runs_needed) == ("undecided", None, None, 3)
    # a ratio against a reference, through ministat
    tv = crashtest.target_verdict([200, 202, 198], 1.0, [100, 102, 98])
    v = ministat.compare([100, 102, 98], [200, 202, 198])
    assert tv.word == "met" and tv.value == 2.0 and tv.ministat == "+100.0% +/- 4.5%"
    assert tv.low == pytest.approx(2 - v.pct_ci / 100)
    assert crashtest.target_verdict([100, 101, 99], 3.5, [100, 102, 98]).word == "missed"
    # the case: 1.41x with 3 repetitions is not proven better than 1.0x
    tv = crashtest.target_verdict([141, 90, 192], 1.0, [100, 100, 100])
    # pooled s = sqrt(2 * 51^2 / 4); half-width t(95,4) * s * sqrt(2/3) = 81.74%
    assert tv.word == "undecided" and tv.value == pytest.approx(1.41)
    assert tv.high - 1.41 == pytest.approx(ministat.student_t_table(95, 4) * 51 / 2 ** 0.5
                                           * (2 / 3) ** 0.5 / 100)
    assert tv.runs_needed == 12          # 3 * (0.8174 / 0.41)^2 = 11.9
    assert crashtest.format_target("C, 8 threads vs 1 thread, O_DIRECT", tv) == (
        "UNDECIDED C, 8 threads vs 1 thread, O_DIRECT: 1.41x (target >= 1x); ministat: "
        "no difference proven (+41.0% +/- 81.7%), ratio of means 0.59x..2.23x; 3 runs; "
        "more runs would decide it (about --reps 12)")
    tv = crashtest.target_verdict([2.5e6, 2.4e6, 2.6e6], 10e6)
    assert crashtest.format_target("C sequential read, warm", tv, "rows/s") == (
        "MISSED    C sequential read, warm: 2,500,000 rows/s (target >= 10,000,000); "
        f"ministat: mean 2,500,000 +/- {t2 * 1e5 / 3 ** 0.5:,.0f} at 95%; 3 runs")
    assert crashtest.target_verdict([1, 2], 1.0, [1]).word == "undecided"
    assert crashtest.target_verdict([5], 1.0, [5]).ministat == "too few runs for ministat"
    with pytest.raises(ValueError):
        crashtest.target_verdict([], 1.0)


def test_blocks_count_passes():
    def mk(impl, phase, threads, rows, secs):
        return {"impl": impl, "phase": phase, "threads": threads, "rep": 0, "rows": rows,
                "seconds": secs, "rows_per_sec": rows / secs, "cache": "warm", "lock": "none"}
    samples = [mk("c", "seq", 1, 1500, 0.5), mk("c", "threads", 2, 1000, 0.25),
               mk("c", "threads", 1, 750, 2.0), mk("c", "threads", 4, 5000, 1.0)]
    s = crashtest.Settings(db="x", threads=[2, 1, 4], reps=1)    # max_time 2.0
    assert crashtest.format_block(samples, "c", s, ["500 records"], 500, 500).splitlines() == [
        "== C, cache warm, lock none (median of 1)", "500 records",
        "sequential read 1500 rows in 0.500 seconds 3000 rows per sec (3 passes over 500 rows)",
        "2 threads  4000 rows per sec, 1000 rows (1 pass over 1000 rows)",
        "1 thread  375 rows per sec, 750 rows (1.50 passes over 500 rows: cut at --max-time)",
        # part of a pass in 1.0 s of 2.0: the threads' passes ended apart, not cut
        "4 threads  5000 rows per sec, 5000 rows (2.50 passes over 2000 rows)"]


def test_summary_says_where_threads_pay_off():
    def mk(impl, cache, threads, values):
        return [{"impl": impl, "phase": "threads", "threads": threads, "rows_per_sec": v,
                 "cache": cache, "lock": "none", "rows": 1, "rep": i}
                for i, v in enumerate(values)]
    samples = (mk("c", "warm", 1, [100, 101, 99]) + mk("c", "warm", 8, [99, 103, 98])
               + mk("python", "warm", 1, [50, 51, 49]) + mk("python", "warm", 8, [30, 31, 29])
               + mk("c", "direct", 1, [10, 11, 9]) + mk("c", "direct", 8, [40, 41, 39])
               + mk("python", "direct", 1, [9, 10, 8]) + mk("python", "direct", 8, [36, 37, 35]))
    assert crashtest.summary(samples) == (
        "-- summary (lock none, ministat at 95% confidence)\n"
        "Does multithreading pay off? Cached (warm): 8 threads against 1 give C 0.99x\n"
        "(no gain proven), Python batch 0.60x (slower); Python batch reads at 0.50x of\n"
        "C's speed with 1 thread and 0.30x with 8. From the disk (O_DIRECT): 8 threads\n"
        "against 1 give C 4.00x (pays off), Python batch 4.00x (pays off); Python batch\n"
        "reads at 0.90x of C's speed with 1 thread and 0.90x with 8. \"No gain proven\"\n"
        "means the difference is within the noise of 3 repetitions per cell; more\n"
        "repetitions (--reps) narrow the interval.")
    assert crashtest.summary([]) == ""
    # cold: said to be no measure of disk overlap; busy: a share of the GIL
    cold = (mk("c", "cold", 1, [10, 11, 9]) + mk("c", "cold", 8, [90, 91, 89])
            + mk("python-busy", "cold", 1, [5, 6, 4]) + mk("python-busy", "cold", 8, [15, 16, 14]))
    text = " ".join(crashtest.summary(cold).split())
    assert ("After dropping the page cache (cold): 8 threads against 1 give C 9.00x (pays "
            "off), Python busy 3.00x (pays off); Python busy reads at 0.50x of C's speed "
            "with 1 thread and 0.17x with 8 (no measure of disk overlap: the page cache is "
            "dropped once a pass and the threads read the same records, so all but the "
            "first read of each find it cached; the O_DIRECT figures are). Python busy's "
            "gain is the readers' share of the GIL growing against the CPU-bound "
            "thread's, not more work done.") in text


def test_command_line(small_db, tmp_path, capsys):
    out_json = tmp_path / "samples.json"
    r = subprocess.run([sys.executable, "-m", "pydb", "crashtest", str(small_db), "--quick",
                        "--cache", "warm", "--threads", "2,1", "--py-read", "batch,record",
                        "--json", str(out_json), "--no-plot"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    for impl in ("C", "Python batch", "Python record"):
        assert f"== {impl}, cache warm, lock none (median of 3)" in text
    assert " ".join(text.split("\n\n")[0].split("\n", 1)[1].split()) == (
        "A pass reads every row once: 500 records for the sequential read, the list of 500 "
        "MFNs T times for T threads. Warm passes repeat until 0.05 s have passed "
        "(--min-time), so their rows are several passes; cold and direct passes read once; "
        "every pass stops at 0.25 s (--max-time), so a slow one reads part of a pass. "
        "Figures are medians of 3 repetitions (--reps); verdicts are ministat's at 95% "
        "confidence.")
    assert re.search(r"\nsequential read \d+ rows in [0-9.]+ seconds \d+ rows per sec "
                     r"\(\d+ pass(es)? over 500 rows\)\n2 threads  \d+ rows per sec, \d+ rows "
                     r"\((\d+ pass(es)?|[0-9.]+ passes) over 1000 rows(: cut at --max-time)?\)",
                     text)
    assert "500 records (from the XRF; no index phase)\n500 rows max mfn 500" in text
    table = text.split("-- C vs Python, cache warm, lock none")[1].splitlines()
    assert table[1].split()[:3] == ["C", "rows/s", "Python"]
    assert [line.split()[0] for line in table[2:5]] == ["sequential", "2", "1"]
    assert ("-- thread scaling: rows/s against the same implementation with 1 thread, "
            "cache warm, lock none") in text
    # the design targets are for the default database: on this one not judged
    # (they were, a 150-record sample "meeting" the 58,880-record target)
    assert ("\n-- docs/design.md §9 targets: not judged (they are for the default "
            "database, --io mmap and --prefix Z)\n") in text
    data = json.loads(out_json.read_text())
    crashtest._print_targets(data["samples"], ["c", "python", "python-record"])
    text = capsys.readouterr().out
    targets = text.split("-- docs/design.md §9 targets (lock none, 95% confidence): ")[1]
    targets = targets.split("\n\n")[0].splitlines()
    n = {w: int(re.search(rf"(\d+) {w}", targets[0]).group(1))
         for w in ("met", "missed", "undecided")}
    assert sum(n.values()) == len(targets) - 1 == 3     # C, Python batch, record: seq
    for w in ("met", "missed", "undecided"):
        assert sum(t.startswith(w.upper() + " ") for t in targets[1:]) == n[w]
    assert targets[1].split(": ")[0].split(None, 1)[1] == "C sequential read, warm"
    assert "(target >= 10,000,000); ministat: mean " in targets[1]
    assert "-- summary (lock none, ministat at 95% confidence)\nDoes multithreading pay " \
        "off? Cached (warm): 2 threads against 1 give C " in r.stdout
    assert {x["impl"] for x in data["samples"]} == {"c", "python", "python-record"}
    assert len(data["samples"]) == 3 * 3 * 3      # impls x phases x repetitions
    assert data["settings"]["reps"] == 3
    assert data["machine"]["cpus"] == os.cpu_count()
    assert "(running cache warm, lock none: C, then Python batch, Python record; 3 " \
        "repetitions" in r.stderr


def test_plot(small_db, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "ct.png"
    r = subprocess.run([sys.executable, "-m", "pydb", "crashtest", str(small_db), "--quick",
                        "--cache", "warm", "--threads", "2,1", "--plot", str(png)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_drawn_by_default(small_db, tmp_path):
    """With matplotlib installed the chart is drawn without --plot, into
    crashtest.png of the current folder; --no-plot draws none."""
    pytest.importorskip("matplotlib")
    args = [sys.executable, "-m", "pydb", "crashtest", str(small_db), "--quick",
            "--cache", "warm", "--threads", "1", "--py-read", "batch"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    (tmp_path / "a").mkdir()
    r = subprocess.run(args, capture_output=True, text=True, timeout=120,
                       cwd=tmp_path / "a", env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a" / "crashtest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot written to crashtest.png" in r.stdout
    (tmp_path / "b").mkdir()
    r = subprocess.run(args + ["--no-plot"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path / "b", env=env)
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "b").iterdir()) == [] and "plot written" not in r.stdout


def test_plot_without_matplotlib(small_db, tmp_path):
    # a directory named matplotlib that fails to import stands in for a missing one
    fake = tmp_path / "fake"
    (fake / "matplotlib").mkdir(parents=True)
    (fake / "matplotlib" / "__init__.py").write_text("raise ImportError('no')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), ROOT]))
    r = subprocess.run([sys.executable, "-m", "pydb", "crashtest", str(small_db),
                        "--plot", str(tmp_path / "x.png")], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 2 and "pip install 'pydb[plot]'" in r.stderr


def test_command_line_rejects_bad_options(small_db):
    for bad in (["--cache", "lukewarm"], ["--threads", "a,b"], ["--lock", "spin"],
                ["--py-read", "bulk"]):
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
    # an index this pydb cannot read (an older format): built again
    manifest = base.parent / "unesb.pdx" / "MANIFEST"
    manifest.write_bytes(manifest.read_bytes().replace(b"pydb-native-index 2",
                                                       b"pydb-native-index 1"))
    assert unesb.default_database() == base
    assert (base.parent / "unesb.mst").stat().st_mtime_ns != mtime
    with pydb.open(base) as db:
        assert next(iter(db.index.terms()), None) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == [base.parent.name]


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


def test_real_database_lilacs(isis_data):
    # LILACS sample: 3 225 active records, max MFN 3225 (SOURCES.md)
    base = isis_data / "scieloorg__pyisis/pyisis/pyisis/sample/lilacs"
    if not base.with_suffix(".mst").exists():
        pytest.skip("LILACS sample absent")
    with pydb.open(base) as db:
        header, mfns = crashtest.XrfRows().rows(db)
    assert header == ["3225 records (from the XRF; no index phase)",
                      "3225 rows max mfn 3225"]
    s = settings(base, threads=[2], reps=1)
    for py_read in crashtest.PY_READS:
        s.py_read = py_read
        assert [x["rows"] for x in crashtest.run_python(s)] == [3225, 6450]
    assert [x["rows"] for x in crashtest.run_c(s)] == [3225, 6450]


# ---------------------------------------------------------------- index phase

@pytest.fixture(scope="module")
def default_db(unesb_cache):
    """The crashtest's default database (58,880 records, native index)."""
    return unesb.default_database(cache_dir=unesb_cache)


def test_index_phase_of_the_default_database(default_db):
    # The original's figures (docs/experiments.md §1), from the real native index
    with pydb.open(default_db) as db:
        index = crashtest.open_row_index(db)
        assert index is db.index and index.kind == "native"
        header, mfns = crashtest.PrefixRows("Z").rows(db)
    assert header == ["409 terms", "4205 postings max mfn 58880"]
    assert len(mfns) == 4205 and len(set(mfns)) < 4205       # records named twice
    with pydb.open_index(default_db) as ix:
        assert mfns == [p.mfn for t in ix.terms("Z") for p in ix.postings(t.key)]


def test_c_program_index_phase(default_db):
    binary = str(crashtest.crashtest_binary())
    out = subprocess.run([binary, "--prefix", "Z", "--threads", "2,1", str(default_db)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[:2] == ["409 terms", "4205 postings max mfn 58880"]
    assert out[2].startswith("sequential read 58880 rows in ")
    assert out[3].startswith("2 threads  ") and out[4].startswith("1 threads  ")
    r = subprocess.run([binary, "--prefix", "z", "--threads", "3", "--json", str(default_db)],
                       capture_output=True, text=True, check=True)
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert {k: lines[0][k] for k in ("phase", "prefix", "terms", "postings", "max_mfn")} == {
        "phase": "index", "prefix": "z", "terms": 409, "postings": 4205, "max_mfn": 58880}
    assert [(x["phase"], x["rows"]) for x in lines[1:]] == [("seq", 58880), ("threads", 3 * 4205)]
    r = subprocess.run([binary, "--prefix", "ZZZZZZZZ", str(default_db)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout.splitlines() == ["0 terms", "0 postings max mfn 58880"]
    assert "no postings under the prefix ZZZZZZZZ" in r.stderr


def test_c_program_prefix_needs_an_index(small_db, tmp_path):
    binary = str(crashtest.crashtest_binary())
    r = subprocess.run([binary, "--prefix", "Z", str(small_db)], capture_output=True, text=True)
    assert r.returncode == 2 and "has no inverted index" in r.stderr
    lst = tmp_path / "mfns"
    lst.write_text("1\n")
    r = subprocess.run([binary, "--prefix", "Z", "--list", str(lst), str(small_db)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr


def test_c_and_python_index_phases_agree_on_an_isis_inverted_file(isis_data):
    # CDS sample: classic 10/30 inverted file, no native index (SOURCES.md)
    base = isis_data / "scieloorg__pyisis/pyisis/pyisis/sample/cds"
    if not base.with_suffix(".mst").exists():
        pytest.skip("CDS sample absent")
    with pydb.open(base) as db:
        index = crashtest.open_row_index(db)
        assert index.kind == "isis-classic"
        header, mfns = crashtest.PrefixRows("A").rows(db)
        n_terms = len(list(index.terms("A")))
    assert header == [f"{n_terms} terms", f"{len(mfns)} postings max mfn 150"]
    assert n_terms > 10 and len(mfns) > n_terms
    out = subprocess.run([str(crashtest.crashtest_binary()), "--prefix", "A", "--threads", "1",
                          str(base)], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[:2] == header
    s = settings(base, threads=[2], reps=1, prefix="A", mfns=mfns)
    assert [x["rows"] for x in crashtest.run_c(s)] == [150, 2 * len(mfns)]
    s.mfns = None
    assert [x["rows"] for x in crashtest.run_python(s)] == [150, 2 * len(mfns)]
    s.mfns = mfns[1:]
    with pytest.raises(RuntimeError, match=f"C program found {len(mfns)} postings"):
        crashtest.run_c(s)


def test_command_line_default_database(unesb_cache):
    # no database argument: the default one, from the cache, with the index phase
    env = dict(os.environ, PYDB_CACHE_DIR=str(unesb_cache))
    r = subprocess.run([sys.executable, "-m", "pydb", "crashtest", "--quick", "--cache", "warm",
                        "--threads", "2,1", "--no-plot"], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "building the default database" not in r.stderr
    text = r.stdout
    assert text.splitlines()[0].endswith("58880 active records, max MFN 58880; "
                                         "rows from the index, prefix 'Z'")
    for impl in ("C", "Python batch"):
        assert (f"== {impl}, cache warm, lock none (median of 3)\n"
                "409 terms\n4205 postings max mfn 58880\nsequential read ") in text


def test_busy_mode_has_only_its_own_target(capsys):
    """The busy mode (readers beside a CPU-bound thread) is judged by its
    share of per-record reads; the twins' targets (rows/s, scaling, against
    C on O_DIRECT) are not applied to it."""
    impls = ["c", "python", "python-record", "python-busy"]
    rows = {"c": 100.0, "python": 95.0, "python-record": 90.0, "python-busy": 3.0}
    samples = [{"impl": i, "phase": ph, "threads": t, "cache": cache, "lock": "none",
                "rows_per_sec": rows[i] * (1 + r / 100) * (40_000 if ph == "seq" else 1)}
               for i in impls for cache in ("warm", "direct") for ph, t in
               (("seq", 1), ("threads", 1), ("threads", 8)) for r in range(5)]
    crashtest._print_targets(samples, impls)
    text = capsys.readouterr().out
    whats = [line.split(":")[0].split(None, 1)[1] for line in text.splitlines()
             if line.split(" ")[0] in ("MET", "MISSED", "UNDECIDED")]
    assert whats == [
        "C sequential read, warm", "Python batch sequential read, warm",
        "Python batch, 8 threads vs 1 thread, warm", "Python record sequential read, warm",
        "Python record, 8 threads vs 1 thread, warm",
        "Python busy vs Python per-record, 1 thread, warm (0.5 is the GIL's share)",
        "C, 8 threads vs 1 thread, O_DIRECT", "Python batch vs C, 8 threads, O_DIRECT",
        "Python record vs C, 8 threads, O_DIRECT"]


def test_command_line_errors_and_explicit_options_under_quick(small_db, tmp_path):
    """A database that cannot be opened is one line on stderr and status
    1 (it was a traceback); an empty --cache, --min-time over --max-time
    and a --python-ft that is no executable are usage errors (2), said
    before anything runs; under --quick an option given is kept (--lock
    and the times were overridden without a word).  Found by a review."""
    def run(*args):
        return subprocess.run([sys.executable, "-m", "pydb", "crashtest", *map(str, args)],
                              capture_output=True, text=True, timeout=120)
    r = run(tmp_path / "missing")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("pydb crashtest: [Errno 2] no master file (.mst)")
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1
    for args, msg in ((["--cache", ","], "no cache mode given"),
                      (["--min-time", "2", "--max-time", "1"], "must not exceed --max-time"),
                      (["--python-ft", tmp_path / "nope"], "no such executable")):
        r = run(small_db, *args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    r = run(small_db, "--quick", "--cache", "warm", "--threads", "1", "--py-read", "batch",
            "--lock", "mutex", "--max-time", "0.5", "--reps", "1", "--no-plot")
    assert r.returncode == 0, r.stderr
    assert "(running cache warm, lock mutex: C, then Python batch; 1 repetitions...)" \
        in r.stderr
    assert "every pass stops at 0.5 s (--max-time)" in " ".join(r.stdout.split())
