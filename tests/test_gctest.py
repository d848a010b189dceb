"""python -m pydb gctest (pydb.gctest): the client script, the series, the
table, JSON and plot, on a tiny generated database (speed is what the
command itself measures; here only shapes, exact garbage counts and
wrong answers).

Tests that need the collection jobs of the garbage collector (csrc/gc.c,
compact.c, the index's collect callback): test_collection_leaves_no_garbage
and the background half of test_processes."""

import json
import math
import os
import sys
import time

import pytest

import pydb
from pydb import gctest, unesb
from pydb.gctest import HOT_WORD, Client, Settings, WorkloadError

CLIENTS, RUNS, ITERATIONS = 2, 2, 5
COLLECTING = ("background", "cooperative", "combined")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 300-record synthetic unesb with its FST (no index: gctest builds one)."""
    return unesb.generate(tmp_path_factory.mktemp("gcsrc"), count=300)


@pytest.fixture(scope="module")
def template(tiny, tmp_path_factory):
    return gctest.prepare_template(tiny, tmp_path_factory.mktemp("gctpl"))


def settings(db, **kw):
    base = dict(db=os.fspath(db), clients=CLIENTS, runs=RUNS, iterations=ITERATIONS,
                settle=0.3, long_settle=1.5, quiesce_timeout=10.0)
    base.update(kw)
    return Settings(**base)


@pytest.fixture(scope="module")
def result(tiny, tmp_path_factory):
    """Every policy, serial and parallel, clients as threads."""
    return gctest.run_gctest(settings(tiny), workdir=tmp_path_factory.mktemp("gcrun"))


# ---------------------------------------------------------------- command line

def test_cli_defaults_and_quick():
    args, s = gctest.parse_args([])
    assert s.db is None and s.clients == 16 and s.runs == 1 and not s.processes
    assert s.policies == ["none", "background", "cooperative", "combined"]
    assert s.iterations == gctest.ITERATIONS and args.json is None and args.plot is None
    _, q = gctest.parse_args(["db", "--quick", "--policy", "none,combined", "--clients", "4",
                              "--runs", "3", "--processes"])
    assert (q.db, q.iterations, q.policies, q.clients, q.runs, q.processes) == \
        ("db", gctest.QUICK_ITERATIONS, ["none", "combined"], 4, 3, True)
    assert q.settle < gctest.SETTLE
    _, i = gctest.parse_args(["--quick", "--iterations", "7"])
    assert i.iterations == 7


@pytest.mark.parametrize("argv", [["--policy", "fast"], ["--policy", "none,none"],
                                  ["--policy", ","], ["--clients", "0"], ["--runs", "0"],
                                  ["--iterations", "0"], ["--clients", "x"]])
def test_cli_refuses(argv, capsys):
    with pytest.raises(SystemExit) as e:
        gctest.parse_args(argv)
    assert e.value.code == 2
    assert "gctest" in capsys.readouterr().err


def test_cli_plot_without_matplotlib(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)    # import raises ImportError
    with pytest.raises(SystemExit) as e:
        gctest.parse_args(["--plot", "x.png"])
    assert e.value.code == 2
    assert "matplotlib" in capsys.readouterr().err


def test_main_reports_a_database_it_cannot_use(tmp_path, capsys):
    small = unesb.generate(tmp_path / "s", count=20)       # 16 clients x 4 need 64 records
    assert gctest.main([os.fspath(small), "--policy", "none", "--iterations", "1"]) == 1
    assert "need 64 active records" in capsys.readouterr().err
    assert gctest.main([os.fspath(tmp_path / "missing"), "--policy", "none"]) == 1
    assert "\ngctest: " in capsys.readouterr().err


def test_subcommand_is_wired(capsys):
    from pydb.__main__ import main
    with pytest.raises(SystemExit) as e:
        main(["gctest", "--help"])
    assert e.value.code == 0
    assert "--processes" in capsys.readouterr().out


# ---------------------------------------------------------------- the script

def test_words_are_letters_and_unique():
    words = {gctest.unique_word(c, r, i) for c in range(3) for r in range(3) for i in range(30)}
    assert len(words) == 270
    assert all(w.isalpha() and w.isupper() and w.startswith(gctest.WORD_PREFIX) for w in words)
    assert gctest.letters(0, 3) == "AAA" and gctest.letters(27, 2) == "BB"
    with pytest.raises(ValueError):
        gctest.letters(26 ** 2, 2)


def test_template_has_an_index_with_the_work_field(template):
    with pydb.open(template) as db:
        assert db.index is not None and len(db) == 300
        assert len(db.search(gctest.WORD_PREFIX + "$")) == 0
        assert len(db.search("LA=EN")) > 0          # the database's own FST is kept
    assert gctest.WORK_FST in template.with_suffix(".fst").read_bytes()


def test_a_damaged_source_is_named_not_its_copy(tiny, tmp_path, capsys):
    """A damaged database is refused before it is copied, naming its own
    file (an error met in the copy would name a temporary file, gone
    when the command ends); the source is not written."""
    bad = tmp_path / "bad"
    for ext in (".mst", ".xrf", ".fst"):
        (tmp_path / f"bad{ext}").write_bytes(tiny.with_suffix(ext).read_bytes())
    with pydb.open(bad) as db:
        off = db[15].offset
    with open(bad.with_suffix(".mst"), "r+b") as f:
        f.seek(off)
        f.write(b"\xff" * 4)                         # the leader's MFN: -1
    before = sorted(p.name for p in tmp_path.iterdir())
    assert gctest.main([str(bad), "--quick"]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (f"gctest: {bad} is damaged, and gctest needs a sound database: error: "
                   f"mfn-mismatch MFN 15: {bad}.mst at byte {off}: the record of MFN 15 at "
                   f"offset {off} carries MFN -1 in its leader (pydb check {bad} lists every "
                   "problem)")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_hot_records(template):
    with pydb.open(template) as db:
        hot = gctest.hot_records(db, 3, 4)
        assert [len(h) for h in hot] == [4, 4, 4]
        assert len({m for h in hot for m in h}) == 12
        with pytest.raises(ValueError, match="need 400 active records"):
            gctest.hot_records(db, 100, 4)


def _clients(db, n=2, per=3):
    hot = gctest.hot_records(db, n, per)
    all_hot = [m for h in hot for m in h]
    return [Client(c, hot[c], all_hot, snapshot_span=3) for c in range(n)]


def test_client_script_without_collection(template, tmp_path):
    """One back version per update, answers checked, the snapshot sees
    its commit; no collection API needed (a plain writable handle)."""
    base = gctest.fresh_copy(template, tmp_path / "c")
    with pydb.open(base, readonly=False, sync=False) as db:
        cl = _clients(db)
        before = {m: len(db.versions(m)) for c in cl for m in c.hot}
        done = cl[0].run(db, 0, 7, others_touched=[])
        assert done["updates"] == 7 and done["seconds"] > 0 and done["end"] >= done["start"]
        done = cl[1].run(db, 0, 4, others_touched=cl[0].touched)
        assert len(db.search(HOT_WORD)) == len(db.search(gctest.UNIQUE_PREFIX)) == 3 + 3
        after = {m: len(db.versions(m)) for c in cl for m in c.hot}
        assert sum(after.values()) - sum(before.values()) == 7 + 4
        m = cl[0].hot[0]                         # updated at iterations 1, 4, 7
        assert after[m] - before[m] == 3
        assert db[m][gctest.WORK_TAG] == [f"{gctest.unique_word(0, 0, 6)} "
                                          f"{gctest.client_word(0)} {HOT_WORD}"]


def test_wrong_answer_fails_loudly(template, tmp_path):
    base = gctest.fresh_copy(template, tmp_path / "w")

    class Lying:
        """The database, except that a search forgets the record just written."""

        def __init__(self, db):
            self.db = db

        def __getattr__(self, name):
            return getattr(self.db, name)

        def __getitem__(self, mfn):
            return self.db[mfn]

        def search(self, expr):
            if expr.startswith(gctest.WORD_PREFIX + "U"):
                return []
            return self.db.search(expr)

    with pydb.open(base, readonly=False, sync=False) as db:
        c = _clients(db)[0]
        with pytest.raises(WorkloadError, match=r"client 1, run 1, iteration 1: search "):
            c.run(Lying(db), 0, 3)
        c2 = _clients(db)[1]
        c2.load(db)
        c2.content[c2.hot[0]] = [(24, "not what the record holds")]
        c2.snapshot_span = 1
        with pytest.raises(WorkloadError, match="through a snapshot"):
            c2.run(db, 0, 2)


class _Stats:
    """A stand-in handle whose stat() walks through given garbage figures."""

    def __init__(self, steps):
        self.steps, self.calls = list(steps), 0

    def stat(self):
        postings, collections = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        st = _stat(postings=postings)
        st["garbage"]["collectable_versions"] = 0
        st["header"] = {"collections": collections}
        return st


def test_quiescence_rules():
    # nothing collectable: done at once
    q = gctest.wait_quiescent(_Stats([(0, 0)]), timeout=5, settle=0.2)
    assert q["settled"] and q["polls"] == 1
    # collected down to 0 by the collector
    q = gctest.wait_quiescent(_Stats([(9, 0), (5, 0), (0, 1)]), timeout=5, settle=0.2)
    assert q["settled"] and q["stat"]["garbage"]["postings"] == 0 and q["polls"] == 3
    # stuck at 5, also after a finished collection: unchanged for `settle`
    q = gctest.wait_quiescent(_Stats([(9, 0), (5, 1)]), timeout=5, settle=0.6)
    assert q["settled"] and 0.6 <= q["seconds"] < 3.0 and q["stat"]["garbage"]["postings"] == 5
    # the collector says it is done
    st = _Stats([(9, 0)])
    first = st.stat
    st.stat = lambda: {**first(), "header": {"collections": 0, "pending": False}}
    q = gctest.wait_quiescent(st, timeout=5, settle=3.0)
    assert q["settled"] and q["polls"] == 1
    # still changing at the timeout
    q = gctest.wait_quiescent(_Stats([(100 - k, 0) for k in range(100)]), timeout=0.5,
                              settle=0.3)
    assert not q["settled"]
    assert gctest.settle_time("background", 1.0, 5.0) == 5.0 == gctest.settle_time("combined")
    assert gctest.settle_time("none", 1.0) == 1.0 == gctest.settle_time("cooperative", 1.0)


# ---------------------------------------------------------------- analysis (synthetic)

def _stat(versions=0, postings=0, seg_files=0, segments=1, dead=0):
    return {"header": {}, "records": {}, "versions": {"back_versions": versions,
                                                      "longest_chain": 2},
            "garbage": {"versions": versions, "bytes": 100 * versions, "postings": postings,
                        "segment_files": seg_files, "pinned_versions": 0},
            "master_file": {"size": 1000, "live_bytes": 900, "fill": 0.9},
            "index": {"segments": segments, "postings": 10, "dead_postings": dead}}


def _series(policy, series, times, left, made=64):
    runs = [{"client": k % 16 + 1, "round": k // 16 + 1, "start": 0.0, "end": t,
             "seconds": t, "updates": 4} for k, t in enumerate(times)]
    return {"policy": policy, "series": series, "runs": runs, "times": list(times),
            "wall": max(times) * 1.02, "updates": made, "garbage_made": made,
            "quiescence": [{"seconds": 0.1, "polls": 2, "settled": True}] * 2,
            "check": {"ok": True, "errors": 0, "warnings": 0, "summary": "ok", "problems": []},
            "stat_before": _stat(), "stat_after": left}


def _synthetic(zero=True):
    growing = [0.1 * (1 + k) for k in range(16)]               # 0.1 .. 1.6 s
    flat = [0.1 + 0.001 * (k % 3) for k in range(16)]
    par = [1.6 + 0.01 * (k % 4) for k in range(16)]
    left = _stat() if zero else _stat(versions=9, postings=3)
    res = [_series("none", "serial", growing, _stat(64, 50, 0, 65, 50)),
           _series("none", "parallel", [13.0 + 0.1 * (k % 4) for k in range(16)],
                   _stat(64, 50, 0, 65, 50))]
    for p in COLLECTING:
        res += [_series(p, "serial", flat, left), _series(p, "parallel", par, left)]
    out = {"db": "/x/unesb", "records": 300, "max_mfn": 300,
           "settings": {"clients": 16, "runs": 1, "iterations": 4, "processes": False},
           "machine": {}, "results": res}
    out["comparisons"] = gctest.comparisons(res)
    out["conclusions"] = gctest.conclusions(res)
    return out


def test_conclusions_from_numbers():
    out = _synthetic()
    con = out["conclusions"]
    # (a): none's parallel runs are 8x the others': does not hold; among
    # the collecting policies (the same numbers each) it does
    assert con["a"]["holds"] is False
    am = con["a"]["among_collecting"]
    assert am["policies"] == sorted(COLLECTING)
    assert am["slowest_over_fastest"] == pytest.approx(1.0) and am["little"] is True
    assert con["b"]["holds"] is True and con["b"]["zero"] is True
    c = {x["policy"]: x for x in con["c"]["rows"]}
    assert c["none"]["growth"]["grows"] is True and con["c"]["none_grows"] is True
    assert c["background"]["growth"]["grows"] is False
    assert con["c"]["same"] is True and con["c"]["holds"] is True   # 1.6 s wall vs 1.6 s sum
    assert all(x["exact"] for x in con["targets"]["none_exact"])
    assert all(x["within_20"] for x in con["targets"]["last_within_20pct"])
    words = [c["words"] for c in out["comparisons"]]
    assert len(words) == 3 * 2 + 4
    assert any(w.startswith("serial: background is") and "faster than none" in w
               for w in words)
    bad = _synthetic(zero=False)["conclusions"]
    assert bad["b"]["holds"] is False and bad["b"]["zero"] is False


def test_report_text_of_synthetic_numbers():
    text = gctest.format_report(_synthetic())
    assert "Firebird's table" in text
    for p in ("none", "background", "cooperative", "combined"):
        assert f"\n{p:<12} " in text
    assert "(a) parallel run time differs little between policies: DOES NOT HOLD" in text
    assert "(b) the collector removes almost all garbage: HOLDS" in text
    assert "  16 " in text and "last/first" in text


def test_plot_is_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed")
    png = tmp_path / "gc.png"
    gctest.plot(_synthetic(), png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- real series (gc API)

def test_result_shape(result):
    res = result["results"]
    assert [(r["policy"], r["series"]) for r in res] == [
        (p, s) for p in gctest.POLICIES for s in gctest.SERIES]
    for r in res:
        assert len(r["times"]) == CLIENTS * RUNS and all(t > 0 for t in r["times"])
        assert r["updates"] == CLIENTS * RUNS * ITERATIONS
        assert sorted((x["round"], x["client"]) for x in r["runs"]) == [
            (n, c) for n in range(1, RUNS + 1) for c in range(1, CLIENTS + 1)]
        assert r["wall"] > 0 and r["check"]["ok"], r["check"]
        assert r["stat_after"]["header"]["gc_policy"] == r["policy"]
        assert set(r["stat_after"]) >= {"header", "records", "versions", "garbage",
                                        "master_file", "index"}
    serial = gctest._find(res, "none", "serial")
    assert [x["client"] for x in serial["runs"]] == [1, 2, 1, 2]
    assert len(result["comparisons"]) == 3 * 2 + 4
    assert set(result["conclusions"]) == {"a", "b", "c", "targets"}
    back = json.loads(json.dumps(result))
    assert back["settings"]["clients"] == CLIENTS
    text = gctest.format_report(result)
    assert "Firebird's table" in text and "ministat at 95% confidence" in text


def test_none_leaves_exactly_the_garbage_made(result):
    for series in gctest.SERIES:
        r = gctest._find(result["results"], "none", series)
        made = CLIENTS * RUNS * ITERATIONS
        assert r["garbage_made"] == made
        assert r["stat_after"]["garbage"]["versions"] - \
            r["stat_before"]["garbage"]["versions"] == made
        assert r["stat_after"]["versions"]["back_versions"] - \
            r["stat_before"]["versions"]["back_versions"] == made
        # one segment per commit, none merged; a serial series commits
        # each update alone, a parallel one's threads may share commits
        # (group commit)
        commits = r["stat_after"]["header"]["commit"] - r["stat_before"]["header"]["commit"]
        assert r["stat_after"]["index"]["segments"] == \
            r["stat_before"]["index"]["segments"] + commits
        if series == "serial":
            assert commits == made
        else:
            assert 0 < commits <= made


def test_collection_leaves_no_garbage(result):
    """Needs the collection jobs (gc.c, compact.c, the index's collect)."""
    for p in COLLECTING:
        for series in gctest.SERIES:
            r = gctest._find(result["results"], p, series)
            g, ix = r["stat_after"]["garbage"], r["stat_after"]["index"]
            assert (g["versions"], g["postings"], g["segment_files"], ix["dead_postings"]) \
                == (0, 0, 0, 0), (p, series, g, ix)
            assert all(q["settled"] for q in r["quiescence"]), (p, series)


def test_processes(tiny, tmp_path):
    """Clients as spawned processes with their own handles; the background
    half needs the collection jobs."""
    out = gctest.run_gctest(settings(tiny, processes=True, runs=1,
                                     policies=["none", "background"]), workdir=tmp_path)
    res = out["results"]
    assert len(res) == 4
    for r in res:
        assert len(r["times"]) == CLIENTS and r["check"]["ok"]
    none = gctest._find(res, "none", "parallel")
    assert none["stat_after"]["garbage"]["versions"] == CLIENTS * ITERATIONS
    bg = gctest._find(res, "background", "parallel")
    assert bg["stat_after"]["garbage"]["versions"] == 0


def _spawned_children(pid: int) -> bool:
    """Whether process `pid` has a child started by multiprocessing's
    spawn (Linux /proc)."""
    import glob
    for f in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            kids = open(f).read().split()
        except OSError:
            continue
        for kid in kids:
            try:
                if b"spawn_main" in open(f"/proc/{kid}/cmdline", "rb").read():
                    return True
            except OSError:
                pass
    return False


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("when", ["running none, serial", "serial run 1"])
def test_ctrl_c_with_client_processes_is_one_line(tiny, tmp_path, when):
    """Ctrl-C (SIGINT to the whole process group) while the client
    processes start or run: exit 130 after the one line, no traceback of
    a client, no temporary folder left.  Before, each client printed its
    KeyboardInterrupt's traceback, and the parent waited for the clients
    to end their runs (a review); a client still starting printed it
    until they were started with Ctrl-C ignored (the code review)."""
    import signal
    import subprocess
    tmp = tmp_path / "t"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=os.fspath(tmp))
    p = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys; "
         "signal.signal(signal.SIGINT, signal.default_int_handler); "
         "from pydb.__main__ import main; sys.exit(main())",
         "gctest", os.fspath(tiny), "--clients", "3", "--runs", "3", "--iterations", "200",
         "--policy", "none", "--processes"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        lines = []
        for line in p.stderr:                      # the clients are at work
            lines.append(line)
            if when in line:
                break
        if when.startswith("running"):             # a client in its start-up
            deadline = time.monotonic() + 30
            while not _spawned_children(p.pid) and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.1)                        # its interpreter importing
        os.killpg(p.pid, signal.SIGINT)
        # bounded: a parent that hung at exit hung this test (3.13t)
        err = "".join(lines) + p.communicate(timeout=60)[1]
        assert p.wait(60) == 130, err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "pydb gctest: interrupted"
    assert list(tmp.iterdir()) == []


def test_main_writes_json_and_plot(tiny, tmp_path, capsys):
    js, png = tmp_path / "gc.json", tmp_path / "gc.png"
    argv = [os.fspath(tiny), "--clients", "2", "--runs", "2", "--iterations", "3",
            "--policy", "none", "--json", os.fspath(js)]
    try:
        import matplotlib  # noqa: F401
        argv += ["--plot", os.fspath(png)]
    except ImportError:
        png = None
    assert gctest.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("gctest on ") and "\nnone " in out
    data = json.loads(js.read_text())
    assert [r["series"] for r in data["results"]] == ["serial", "parallel"]
    assert not any(isinstance(v, float) and math.isnan(v) for v in data["results"][0]["times"])
    if png is not None:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
