"""The command line, ``python -m pydb`` (pydb/__main__.py), every
subcommand but the benchmark tools': exit status, text and JSON output,
errors as one line, the progress bar only on a terminal.

Sections: import/export (ISO 2709 both flavours, JSON Lines); dump and
info; check; terms and postings; index; search.  The tests call the entry
point in-process (``main([...])``) where output is enough, and run
``python -m pydb`` in a child where exit status, streams or a terminal
matter.  ``pydb crashtest`` and ``pydb ministat`` are tested with their
tools (tests/test_crashtest.py, tests/test_ministat.py).  Tests moved here
from the reader's module keep that module's sanitizer markers.
"""

import errno
import fcntl
import importlib
import importlib.util
import json
import os
import pty
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
from pathlib import Path

import pytest

import pydb
from pydb import _pydb
from pydb.__main__ import main
from pydb.__main__ import main as cli_main
from pydb.index import Index
from pydb.native import stored_settings

from conftest import REPO, all_terms, copy_db, data_path, need, offset_of
from conftest import build_varied as build
from conftest import patch_file as patch

CDS = "bireme__cisis/tests/CDS"
BAD = "edsu__pymarc/test/bad_records.mrc"
CDS_SAMPLE = "scieloorg__pyisis/pyisis/pyisis/sample/cds"   # classic 10/30 aligned, FST
BIBL = "cpan__Biblio-Isis-0.24/data/winisis/BIBL"
ODDS = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds"


def run(*args, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "pydb", *map(str, args)], cwd=REPO,
                          capture_output=True, env=env, timeout=120, **kw)


# ----------------------------------------------------------- import, export

def test_export_isis_matches_cisis(isis_data, tmp_path, capsys):
    assert main(["export", str(data_path(CDS)), str(tmp_path / "c.iso")]) == 0
    assert (tmp_path / "c.iso").read_bytes() == data_path(CDS + ".iso").read_bytes()
    assert "exported 150 record(s), 0 skipped" in capsys.readouterr().err


def test_export_crlf_marc_jsonl_and_import_back(isis_data, tmp_path, capsys):
    src = str(data_path(CDS))
    assert main(["export", src, str(tmp_path / "c.iso"), "--crlf"]) == 0
    text = (tmp_path / "c.iso").read_bytes()
    assert text.count(b"\r\n") == text.count(b"\n") > 150
    assert main(["export", src, str(tmp_path / "c.mrc"), "--flavour", "marc"]) == 0
    assert b"\n" not in (tmp_path / "c.mrc").read_bytes()[:2000]
    assert main(["export", src, str(tmp_path / "c.jsonl")]) == 0
    assert (tmp_path / "c.jsonl").read_bytes().count(b"\n") == 150
    with pydb.open(src) as db:
        want = [[(f.tag, f.raw) for f in r.fields] for r in db]
    for name, extra in (("c.iso", []), ("c.mrc", ["--flavour", "marc"]),
                        ("c.jsonl", []), ("c.iso", ["--layout", "ffi-aligned", "--mstxl", "3"])):
        out = tmp_path / (name + "-" + "-".join(extra) + "db")
        assert main(["import", str(tmp_path / name), str(out), *extra]) == 0
        with pydb.open(out) as db:
            assert [[(f.tag, f.raw) for f in r.fields] for r in db] == want
            if extra[:2] == ["--layout", "ffi-aligned"]:
                assert db.layout == "ffi-aligned" and db.info()["mstxl"] == 3
    assert "imported 150 record(s), 0 skipped" in capsys.readouterr().err


def test_export_says_when_the_values_look_to_be_in_another_encoding(isis_data, tmp_path,
                                                                    capsys):
    """CISIS's CDS sample is cp850: a JSON Lines or Parquet export without
    --encoding decodes as UTF-8 (a default import gives the same bytes
    back), writes its 56 accented values as base64, and says so, naming
    the encoding to give; with --encoding cp850 they are text and no note
    is printed; a UTF-8 database gets no note."""
    src = str(data_path(CDS))
    assert main(["export", src, str(tmp_path / "c.jsonl")]) == 0
    err = capsys.readouterr().err
    assert (f"pydb export: note: {src}'s values look cp850 (" in err
            and "written as base64. --encoding cp850 writes them as text" in err)
    assert (tmp_path / "c.jsonl").read_text().count('"base64"') == 56
    assert main(["export", src, str(tmp_path / "d.jsonl"), "--encoding", "cp850"]) == 0
    assert "note" not in capsys.readouterr().err
    assert '"base64"' not in (tmp_path / "d.jsonl").read_text(encoding="utf-8")
    if importlib.util.find_spec("pyarrow"):
        assert main(["export", src, str(tmp_path / "c.parquet")]) == 0
        assert "written as the raw column's bytes. --encoding cp850" in capsys.readouterr().err
    base = tmp_path / "u"
    with pydb.create(base) as db:
        db.append([(1, "Ação")])
    assert main(["export", str(base), str(tmp_path / "u.jsonl")]) == 0
    assert "note" not in capsys.readouterr().err


def test_export_into_a_directory_says_so(tmp_path, capsys):
    """An ISO or JSON Lines export whose target is a directory says so,
    with or without --force (it said "exists (use --force to replace
    it)", and with --force "[Errno 21] Is a directory")."""
    base = tmp_path / "db"
    with pydb.create(base) as db:
        db.append([(1, "a")])
    (tmp_path / "out").mkdir()
    for extra in ([], ["--force"], ["--flavour", "jsonl", "--force"]):
        assert main(["export", str(base), str(tmp_path / "out"), *extra]) == 1
        assert capsys.readouterr().err == (f"pydb: {tmp_path / 'out'} is a directory: "
                                           "name the file to write\n")
    assert list((tmp_path / "out").iterdir()) == []


def test_mfns_and_deleted_through_the_cli(isis_data, tmp_path):
    src = data_path("cpan__Biblio-Isis-0.24/data/winisis/BIBL")
    r = run("export", src, tmp_path / "b.iso", "--deleted", "--mfn-tag", "9000")
    assert r.returncode == 0, r.stderr
    r = run("import", tmp_path / "b.iso", tmp_path / "b", "--mfn-tag", "9000")
    assert r.returncode == 0, r.stderr
    with pydb.open(src) as a, pydb.open(tmp_path / "b") as b:
        assert [(x.mfn, x.deleted, x.fields) for x in a.records(deleted=True)] == \
            [(x.mfn, x.deleted, x.fields) for x in b.records(deleted=True)]
    r = run("dump", tmp_path / "b", "--deleted", "--encoding", "cp850")
    assert r.returncode == 0 and b"!ID 0000003 (deleted)" in r.stdout


def test_import_skip_reports_and_exits_1(isis_data, tmp_path):
    r = run("import", data_path(BAD), tmp_path / "bad")
    assert r.returncode == 1
    err = r.stderr.decode().splitlines()
    assert len(err) == 3
    assert err[0].startswith("pydb: skipped: ") and "record 4, byte 381: " in err[0]
    assert "record 5, byte 509: " in err[1]
    assert err[2] == "imported 6 record(s), 3 repaired, 2 skipped"
    with pydb.open(tmp_path / "bad") as db:
        assert len(db) == 6


def test_import_stop_one_line_no_database(isis_data, tmp_path):
    r = run("import", data_path(BAD), tmp_path / "bad", "--on-error", "stop")
    assert r.returncode == 1
    err = r.stderr.decode().splitlines()
    assert len(err) == 1 and err[0].startswith("pydb: ") and "record 4, byte 381" in err[0]
    assert "Traceback" not in r.stderr.decode()
    assert not (tmp_path / "bad.mst").exists() and not (tmp_path / "bad.xrf").exists()


def test_an_import_that_imports_nothing_leaves_no_database(isis_data, tmp_path):
    """Every record of the file failed (an FST given as an ISO file): the
    new database it made is removed, not left empty (review of real
    data); an existing database it appended to stays."""
    fst = need(CDS_SAMPLE) + ".fst"
    r = run("import", fst, tmp_path / "x2", text=True)
    assert r.returncode == 1
    assert r.stderr.splitlines()[-2:] == [
        "imported 0 record(s), 1 skipped",
        f"pydb import: nothing imported: {tmp_path / 'x2'} was not created"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    pydb.create(tmp_path / "kept").close()
    r = run("import", fst, tmp_path / "kept", text=True)
    assert r.returncode == 1 and "was not created" not in r.stderr
    assert (tmp_path / "kept.mst").exists() and (tmp_path / "kept.xrf").exists()


@pytest.mark.parametrize("args", [
    ["import", "{missing}", "{tmp}/x"],
    ["export", "{tmp}/nodb", "{tmp}/out.iso"],
])
def test_errors_are_one_line(tmp_path, args):
    (tmp_path / "a.iso").write_bytes(
        b"000330000000000290004500001000200000#x##\n")
    assert main(["import", str(tmp_path / "a.iso"), str(tmp_path / "exists")]) == 0
    fmt = dict(missing=tmp_path / "nothing.iso", tmp=tmp_path, iso=tmp_path / "a.iso")
    r = run(*[a.format(**fmt) for a in args])
    err = r.stderr.decode().splitlines()
    assert r.returncode == 1 and len(err) == 1 and err[0].startswith("pydb: "), r.stderr
    assert not (tmp_path / "z.mst").exists()


@pytest.mark.parametrize("args,says", [
    (["import", "{iso}", "{tmp}/y", "--encoding", "no-such-codec"],
     "argument --encoding: unknown encoding: no-such-codec"),
    (["import", "{iso}", "{tmp}/y", "--encoding", "auto"], "unknown encoding: auto"),
    (["import", "{iso}", "{tmp}/z", "--mstxl", "9"], "argument --mstxl: 9 is not in 0..6"),
    (["import", "{iso}", "{tmp}/z", "--max-gap", "-1"], "argument --max-gap: -1 is less than 0"),
    (["import", "{iso}", "{tmp}/z", "--mfn-tag", "x"],
     "argument --mfn-tag: not a whole number: 'x'"),
    (["export", "{tmp}/exists", "{tmp}/o.parquet", "--compression", "foo"],
     "argument --compression: invalid choice: 'foo'"),
    (["export", "{tmp}/exists", "{tmp}/o.parquet", "--batch-records", "0"], "0 is less than 1"),
    (["export", "{tmp}/exists", "{tmp}/o.iso", "--line-width", "-3"], "-3 is less than 0"),
    (["export", "{tmp}/exists", "{tmp}/o.iso", "--line-width", "23"],
     "23 is neither 0 nor at least 24"),
    (["export", "{tmp}/exists", "{tmp}/o.iso", "--mfn-tag", "-1"], "-1 is not in 0..99999"),
    (["gen-unesb", "{tmp}/g", "--scale", "0"], "argument --scale: 0 is less than 1"),
    (["gen-unesb", "{tmp}/g", "--count", "-5"], "argument --count: -5 is less than 1"),
    (["info", "{tmp}/exists", "--encoding", "nope"], "unknown encoding: nope"),
    (["info", "{tmp}/exists", "--encoding", "rot13"], "'rot13' is not a text encoding"),
    (["terms", "{tmp}/exists", "--limit", "-1"], "argument --limit: -1 is less than 0"),
    (["index", "{tmp}/exists", "--max-key", "-1"], "argument --max-key: -1 is less than 0"),
    (["check", "{tmp}/exists", "--max-problems", "-2"], "-2 is less than 0"),
    (["dump", "{tmp}/exists", "1", "0"], "argument MFN: 0 is not in 1..2147483647"),
])
def test_a_bad_value_is_bad_usage(tmp_path, args, says):
    """Exit status 2, as for an unknown option (pydb --help's table), and
    nothing written: a value out of range or of the wrong kind."""
    (tmp_path / "a.iso").write_bytes(
        b"000330000000000290004500001000200000#x##\n")
    assert main(["import", str(tmp_path / "a.iso"), str(tmp_path / "exists")]) == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    fmt = dict(tmp=tmp_path, iso=tmp_path / "a.iso")
    r = run(*[a.format(**fmt) for a in args])
    err = r.stderr.decode()
    assert r.returncode == 2 and f"pydb {args[0]}: error: " in err and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_export_names_its_target_and_writes_a_fifo_in_place(tmp_path, capsys):
    """A record the format cannot hold is named in the target the user
    gave, not in the temporary file the export writes first; a target
    that is not a regular file (a FIFO, a device) is written as it is,
    never replaced by a regular file (as root, --force turned /dev/full
    into one: a review)."""
    base = tmp_path / "big"
    with pydb.create(base, "ffi-packed") as db:
        db.append([(10, "ok")])
        db.append([(10, "x" * 100_000)])               # past ISO's 99,999 bytes
    out = tmp_path / "o.iso"
    assert main(["export", str(base), str(out)]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"pydb: skipped: {out}: record 2, MFN 2: record needs 100042 bytes; ISO 2709 "
        "record lengths have 5 digits (at most 99999)")
    assert main(["export", str(base), str(out), "--force", "--on-error", "stop"]) == 1
    assert capsys.readouterr().err.startswith(f"pydb: {out}: record 2, MFN 2: ")
    assert sorted(p.name for p in tmp_path.iterdir() if "part" in p.name) == []
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(["export", str(base), str(fifo), "--force"]) == 1
    reader.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got and got[0].endswith(b"##\n") and b"ok" in got[0]


def test_import_of_bad_json_lines_and_into_a_missing_folder(tmp_path, capsys):
    """JSON nested too deeply is a bad line, not a RecursionError's
    traceback; "deleted" must be true, false or null ("false", a
    non-empty string, was taken as true); a missing folder is named."""
    src = tmp_path / "in.jsonl"
    src.write_text("[" * 100_000 + "\n"
                   '{"mfn":1,"deleted":"false","fields":[[10,"a"]]}\n'
                   '{"mfn":2,"deleted":false,"fields":[[10,"b"]]}\n'
                   '{"mfn":3,"deleted":1,"fields":[[10,"c"]]}\n'
                   '{"mfn":4,"deleted":null,"fields":[[10,"d"]]}\n'
                   '{"mfn":5,"deleted":1.0,"fields":[[10,"e"]]}\n')
    assert main(["import", str(src), str(tmp_path / "nofolder" / "db")]) == 1
    assert capsys.readouterr().err == (f"pydb: [Errno 2] cannot create: no such folder: "
                                       f"'{tmp_path / 'nofolder'}'\n")
    assert main(["import", str(src), str(tmp_path / "db")]) == 1
    assert capsys.readouterr().err.splitlines()[:4] == [
        f"pydb: skipped: {src}: record 1, byte 0: line 1: JSON nested too deeply to be a "
        "record",
        f"pydb: skipped: {src}: record 2, byte 100001: line 2: deleted 'false' is not true, "
        "false or null",
        f"pydb: skipped: {src}: record 4, byte 100095: line 4: deleted 1 is not true, false "
        "or null",
        f"pydb: skipped: {src}: record 6, byte 100182: line 6: deleted 1.0 is not true, "
        "false or null"]
    with pydb.open(tmp_path / "db") as db:
        assert [(r.mfn, r.deleted, r[10]) for r in db.records(deleted=True)] == [
            (2, False, ["b"]), (4, False, ["d"])]


def test_import_appends_to_an_existing_database(tmp_path):
    (tmp_path / "a.iso").write_bytes(b"000330000000000290004500001000200000#x##\n")
    assert run("import", tmp_path / "a.iso", tmp_path / "d").returncode == 0
    r = run("import", tmp_path / "a.iso", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    with pydb.open(tmp_path / "d") as db:
        assert db.max_mfn == 2 and db[1].raw(1) == db[2].raw(1) == [b"x"]
    # --layout/--mstxl make a new database; an existing one keeps its own,
    # and a request for another one is told (it was ignored silently)
    r = run("import", tmp_path / "a.iso", tmp_path / "d", "--layout", "isis-packed")
    assert r.returncode == 0 and b"warning" not in r.stderr
    r = run("import", tmp_path / "a.iso", tmp_path / "d", "--layout", "ffi-aligned",
            "--mstxl", "2")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines() == [
        f"pydb import: {tmp_path / 'd'} exists (MFNs up to 3): appending the records "
        "after them",
        f"pydb: warning: {tmp_path / 'd'} exists with layout isis-packed, MSTXL 0: the "
        "records are appended in that layout (--layout and --mstxl are for a new database)",
        "imported 1 record(s), 1 repaired, 0 skipped"]
    with pydb.open(tmp_path / "d") as db:
        assert db.max_mfn == 4 and db.layout == "isis-packed"
    r = run("import", tmp_path / "a.iso", tmp_path / "n", "--layout", "ffi-aligned",
            "--mstxl", "2")
    assert r.returncode == 0, r.stderr
    with pydb.open(tmp_path / "n") as db:
        assert (db.layout, db.info()["mstxl"], db[1].raw(1)) == ("ffi-aligned", 2, [b"x"])


# ------------------------------------------- interrupted imports, --resume

def test_import_that_would_mix_encodings_stops_and_resumes_with_the_right_options(
        isis_data, tmp_path, capsys):
    """An append whose values are in another encoding than the database's
    stops at the first such record, says why and how to go on; --resume
    with the file's encoding and --db-encoding imports the rest."""
    iso, db = str(data_path(CDS + ".iso")), str(tmp_path / "u")
    assert main(["import", iso, db, "--encoding", "cp850", "--db-encoding", "utf-8",
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["import", iso, db, "--no-progress"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1].startswith(f"pydb import: {iso}: record 7, byte 2675: field 70: its bytes "
                             "are not valid UTF-8, as are 56 of the 56 values past ASCII "
                             "this import brought, while the database's values are utf-8")
    assert err[1].endswith("(the import stops: no record of this import committed)")
    assert err[2] == (f"(run it again with --resume and the options that mend it to import "
                      f"the rest: {db}.resume says where it stopped)")
    assert main(["import", iso, db, "--no-progress", "--resume", "--encoding", "cp850",
                 "--db-encoding", "utf-8"]) == 0
    assert "imported 150 record(s), 0 skipped" in capsys.readouterr().err
    with pydb.open(db, encoding="auto") as d:
        assert d.encoding == "utf-8" and d.max_mfn == 300
        assert d[157].get(70) == "Slav\u00edk, B."


#: A child that runs the command line with APPEND_BATCH records per commit
#: and, at the K-th checkpoint mark (written before each commit), sends
#: itself SIGNAL: before writing the mark (WHEN "before": the batch before
#: is committed, this one not begun on disk) or after it (WHEN "after":
#: the mark is on disk, the commit has not happened).  With K 0 the
#: signal comes while a NEW database is built, after 20 records.  WHEN
#: "slow": no signal of its own, half a second before each mark.
CHILD = """
import os, signal, sys
# Ctrl-C raises KeyboardInterrupt even when this test runs in a background
# job of a non-interactive shell, whose children inherit SIGINT ignored
# (Python then leaves it ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
from pydb import exchange
from pydb.__main__ import main
K, SIG, WHEN = int(sys.argv[1]), getattr(signal, sys.argv[2]), sys.argv[3]
exchange.APPEND_BATCH = 10
mark, load, calls = exchange._Checkpoint.mark, exchange._load, []

def marked(self, number, max_mfn, digest):
    calls.append(number)
    if WHEN == "slow":
        import time
        time.sleep(0.5)
    if len(calls) == K and WHEN == "before":
        os.kill(os.getpid(), SIG)
    mark(self, number, max_mfn, digest)
    if len(calls) == K and WHEN == "after":
        os.kill(os.getpid(), SIG)

def loaded(records, *a, **k):
    def slow():
        for i, r in enumerate(records):
            if i == 20 and K == 0:
                os.kill(os.getpid(), SIG)
            yield r
    return load(slow(), *a, **k)

exchange._Checkpoint.mark, exchange._load = marked, loaded
sys.exit(main(sys.argv[4:]))
"""


def _source(tmp_path, n=35):
    """An ISO file of `n` records (tag 1 "record I", tag 2 non-ASCII text)
    and the fields a database must hold after importing it."""
    want = [[(1, f"record {i}".encode()), (2, f"caf\u00e9 {i}".encode())]
            for i in range(1, n + 1)]
    with pydb.create(tmp_path / "src") as db:
        for fields in want:
            db.append(fields)
    assert main(["export", str(tmp_path / "src"), str(tmp_path / "src.iso")]) == 0
    return tmp_path / "src.iso", want


def _interrupted(tmp_path, k, sig, when, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", CHILD, str(k), sig, when, "import", *args],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=120)


def _fields(base):
    with pydb.open(base) as db:
        return [[(f.tag, f.raw) for f in r.fields] for r in db]


@pytest.mark.parametrize("fmt", ["iso", "jsonl"])
def test_ctrl_c_during_import_says_what_was_committed_and_resume_adds_the_rest(tmp_path, fmt):
    src, want = _source(tmp_path)
    if fmt == "jsonl":
        assert main(["export", str(tmp_path / "src"), str(tmp_path / "src.jsonl")]) == 0
        src = tmp_path / "src.jsonl"
    db = tmp_path / "d"
    with pydb.create(db) as h:
        h.append([(1, b"old 1")])
        h.append([(1, b"old 2")])
    old = [[(1, b"old 1")], [(1, b"old 2")]]
    r = _interrupted(tmp_path, 3, "SIGINT", "after", str(src), str(db))
    # batches 1 and 2 (10 records each) committed; the third was rolled back
    assert r.returncode == 130
    assert r.stderr.splitlines() == [
        f"pydb import: {db} exists (MFNs up to 2): appending the records after them",
        f"pydb import: interrupted; 20 records committed to {db} in this run (MFNs "
        "3..22); run the same command with --resume to import the rest"]
    assert _fields(db) == old + want[:20]
    # the same command again refuses to import everything a second time
    r = run("import", src, db)
    assert r.returncode == 1 and r.stderr.decode().splitlines() == [
        f"pydb import: {db}.resume exists: an earlier import into {db} did not finish "
        "(interrupted, killed, or stopped at an error); run again with --resume to import "
        f"only what it did not commit, or delete {db}.resume to import every record again"]
    r = run("import", src, db, "--resume")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines() == [
        "pydb import: resuming after source record 20 (the records up to it are in the "
        "database)", "imported 15 record(s), 0 skipped"]
    assert _fields(db) == old + want
    assert not (tmp_path / "d.resume").exists()
    r = run("import", src, db, "--resume")
    assert r.returncode == 1 and b"no interrupted import to resume" in r.stderr


def test_ctrl_c_from_outside_at_any_moment(tmp_path):
    """A Ctrl-C sent by another process while the import runs: the line
    names exactly the records in the database, and --resume completes it."""
    src, want = _source(tmp_path)
    db = tmp_path / "d"
    pydb.create(db).close()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, "-1", "SIGINT", "slow", "import",
                             str(src), str(db)], cwd=REPO, stderr=subprocess.PIPE,
                            text=True, env=env)
    resume = tmp_path / "d.resume"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:          # wait for the second commit's mark
        if resume.exists() and len(resume.read_text().splitlines()) >= 5:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err
    m = re.fullmatch(rf"pydb import: interrupted; (\d+) records committed to {re.escape(str(db))}"
                     rf" in this run \(MFNs 1\.\.(\d+)\); run the same command with --resume "
                     r"to import the rest\n", err)
    assert m and m.group(1) == m.group(2), err
    n = int(m.group(1))
    assert n in (10, 20, 30) and _fields(db) == want[:n]
    r = run("import", src, db, "--resume")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines()[-1] == f"imported {35 - n} record(s), 0 skipped"
    assert _fields(db) == want


@pytest.mark.parametrize("k, when, committed", [
    (1, "before", 0),     # killed before the first mark: nothing committed
    (2, "before", 10),    # after commit 1, before mark 2
    (2, "after", 10),     # mark 2 on disk, commit 2 not done
    (4, "after", 30),     # the last batch's mark on disk, its commit not done
])
def test_resume_after_a_kill(tmp_path, k, when, committed):
    src, want = _source(tmp_path)
    db = tmp_path / "d"
    pydb.create(db).close()
    r = _interrupted(tmp_path, k, "SIGKILL", when, str(src), str(db))
    assert r.returncode == -9
    assert _fields(db) == want[:committed]
    assert (tmp_path / "d.resume").exists()
    r = run("import", src, db, "--resume")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines() == [
        f"pydb import: resuming after source record {committed} (the records up to it are "
        "in the database)", f"imported {35 - committed} record(s), 0 skipped"]
    assert _fields(db) == want


def test_resume_under_another_spelling_of_the_database(tmp_path):
    """The resume file is named after the database as its master file
    names it (paths.db_base): an import into "d" killed after its second
    commit is resumed as "D" (and refused there without --resume), and
    the import into "D" did not append every record again beside the
    ones committed (a review: 72,000 records twice)."""
    src, want = _source(tmp_path)
    db = tmp_path / "d"
    pydb.create(db).close()
    r = _interrupted(tmp_path, 2, "SIGKILL", "after", str(src), str(db))
    assert r.returncode == -9 and _fields(db) == want[:10]
    r = run("import", src, tmp_path / "D")
    assert r.returncode == 1 and f"{db}.resume exists".encode() in r.stderr
    r = run("import", src, tmp_path / "D.MST", "--resume")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines()[-1] == "imported 25 record(s), 0 skipped"
    assert _fields(db) == want and not (tmp_path / "d.resume").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.lower().startswith("d.")) == [
        "d.mst", "d.shm", "d.wal", "d.xrf"]


def test_interrupted_new_database(tmp_path):
    src, want = _source(tmp_path)
    # Ctrl-C: the bulk builder removes its files, nothing to resume
    r = _interrupted(tmp_path, 0, "SIGINT", "-", str(src), str(tmp_path / "n"))
    assert r.returncode == 130
    assert r.stderr.splitlines() == ["pydb import: interrupted; nothing committed (a new "
                                     "database is written in one go; its partial files "
                                     "were removed)"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("n")) == []
    # killed: half-written files and the checkpoint stay; --resume builds again
    r = _interrupted(tmp_path, 0, "SIGKILL", "-", str(src), str(tmp_path / "n"))
    assert r.returncode == -9
    assert (tmp_path / "n.mst").exists() and (tmp_path / "n.resume").read_text().endswith(
        "\nnew\n")
    r = run("import", src, tmp_path / "n")
    assert r.returncode == 1 and b"n.resume exists" in r.stderr
    r = run("import", src, tmp_path / "n", "--resume")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines() == [
        "pydb import: resuming from the first record (the new database is built again)",
        "imported 35 record(s), 0 skipped"]
    assert _fields(tmp_path / "n") == want
    assert not (tmp_path / "n.resume").exists()


def test_resume_refuses_another_source_or_a_changed_database(tmp_path):
    src, want = _source(tmp_path)
    db = tmp_path / "d"
    pydb.create(db).close()
    r = _interrupted(tmp_path, 2, "SIGKILL", "after", str(src), str(db))
    assert r.returncode == -9 and len(_fields(db)) == 10
    other = tmp_path / "other.iso"
    other.write_bytes(src.read_bytes()[:-100])
    with pytest.raises(pydb.ImportResumeError, match="written for another file"):
        pydb.import_iso(other, db, checkpoint=tmp_path / "d.resume")
    same_size = tmp_path / "same" / "src.iso"        # same name and size, other bytes
    same_size.parent.mkdir()
    same_size.write_bytes(src.read_bytes().replace(b"record 1", b"record X", 1))
    with pytest.raises(pydb.ImportResumeError, match="written for another file"):
        pydb.import_iso(same_size, db, checkpoint=tmp_path / "d.resume")
    with pydb.open(db, readonly=False) as h:
        h.append([(1, b"someone else")])
    r = run("import", src, db, "--resume")
    assert r.returncode == 1 and r.stderr.decode().splitlines() == [
        f"pydb: {tmp_path / 'd.resume'}: cannot resume: the database's highest MFN is 11, "
        "which no commit of the interrupted import left: the database changed since; "
        "cannot tell which records are in it"]
    (tmp_path / "d.resume").write_text("pydb-import-checkpoint 1\nsource 1 x\n")
    with pytest.raises(pydb.CorruptionError, match="not a pydb import checkpoint"):
        pydb.import_iso(src, db, checkpoint=tmp_path / "d.resume")
    assert len(_fields(db)) == 11


def test_resume_refused_where_another_writer_reached_a_marked_mfn(tmp_path):
    """Killed after the last batch's mark (MFN 35) and before its commit,
    then another program appends 5 records: the highest MFN is 35 as that
    commit would have left it.  The resume took it for that commit and
    skipped records 31..35, exit 0 (a service developer's trial); the
    record at MFN 35 is not the one the import wrote, so it is refused."""
    src, want = _source(tmp_path)
    db = tmp_path / "d"
    pydb.create(db).close()
    r = _interrupted(tmp_path, 4, "SIGKILL", "after", str(src), str(db))
    assert r.returncode == -9 and _fields(db) == want[:30]
    with pydb.open(db, readonly=False) as h:
        for i in range(5):
            h.append([(1, f"web {i}".encode())])
    r = run("import", src, db, "--resume")
    assert r.returncode == 1 and r.stderr.decode().splitlines() == [
        f"pydb: {tmp_path / 'd.resume'}: cannot resume: the database's highest MFN is 35, "
        "as a commit of the interrupted import would have left it, but its record is not "
        "the one that commit wrote: another program appended since; cannot tell which "
        "records are in it"]
    assert _fields(db) == want[:30] + [[(1, f"web {i}".encode())] for i in range(5)]
    assert (tmp_path / "d.resume").exists()


def test_collect_reclaims_garbage_and_names_what_a_snapshot_pins(tmp_path, capsys):
    """pydb collect: the back versions of 3 x 50 updates and the index's
    dead postings go; garbage an older snapshot reads stays, said so."""
    base = str(tmp_path / "db")
    with pydb.create(base, fst="1 4 v1\n", gc="none") as db:
        for i in range(1, 51):
            db.append([(1, f"word{i} common")])
        for k in range(3):
            for m in range(1, 51):
                db.update(m, [(1, f"word{m} other{k}")])
    assert main(["collect", base]) == 0
    assert capsys.readouterr().out == (
        "collected 150 back versions and 5632 bytes of the master file (1 compaction), "
        "300 dead postings and 1 segment file of the native index\n")
    with pydb.open(base) as db:
        g = db.stat()["garbage"]
        assert (g["versions"], g["postings"]) == (0, 0)
        assert list(db.search("OTHER")) == list(range(1, 51))
    assert main(["collect", base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "versions": 0, "bytes": 0, "postings": 0, "segments": 0, "compactions": 0,
        "pinned": 0}
    with pydb.open(base, readonly=False, gc="none") as db, db.snapshot() as snap:
        time.sleep(1.1)                      # an old reader: it pins
        db.update(1, [(1, "word1 again")])
        assert main(["collect", base]) == 0
        out = capsys.readouterr().out.splitlines()
        # (the index's merge leaves the snapshot's segments in place)
        assert out == ["collected 0 back versions and 0 bytes of the master file (0 "
                       "compactions), 2 dead postings and 0 segment files of the native "
                       "index", "1 garbage version left: a snapshot of another process "
                       "still reads an older commit (pydb stat names the oldest)"]
        assert snap[1].raw(1) == [b"word1 other2"]
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(SystemExit) as exc:
            main(["collect", base, "--timeout", bad])
        assert exc.value.code == 2 and "--timeout" in capsys.readouterr().err


def test_no_progress_bar_off_a_terminal(isis_data, tmp_path):
    r = run("export", data_path(CDS), tmp_path / "c.iso")
    assert r.returncode == 0 and r.stderr == b"exported 150 record(s), 0 skipped\n"
    r = run("dump", data_path(CDS))
    assert r.returncode == 0 and r.stderr == b""
    assert r.stdout.count(b"!ID ") == 150 and r.stdout.startswith(b"!ID 0000001\n!v044!")


def test_progress_bar_on_a_terminal(isis_data, tmp_path):
    """With stderr on a terminal tqdm draws its bar (``disable=None``)."""
    pytest.importorskip("tqdm")
    master, slave = pty.openpty()
    # a terminal of 100 columns (a new pty has 0: tqdm would draw nothing)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        p = subprocess.run([sys.executable, "-m", "pydb", "import",
                            str(data_path(CDS + ".iso")), str(tmp_path / "t")],
                           cwd=REPO, stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    out = b"".join(chunks)
    assert p.returncode == 0
    assert b"import" in out and b"%|" in out and b"imported 150 record(s)" in out


def test_import_db_encoding(isis_data, tmp_path):
    src = data_path("cpan__Biblio-Isis-0.24/data/winisis/BIBL")
    assert run("export", src, tmp_path / "b.iso", "--crlf").returncode == 0
    r = run("import", tmp_path / "b.iso", tmp_path / "u", "--encoding", "cp850",
            "--db-encoding", "utf-8")
    assert r.returncode == 0, r.stderr
    with pydb.open(src, encoding="cp850") as a, pydb.open(tmp_path / "u") as b:
        assert [r.to_dict() for r in a] == [r.to_dict() for r in b]


def _small_db(tmp_path):
    base = str(tmp_path / "small")
    with pydb.create(base) as db:
        db.append([(24, "A title")])
        db.append([(24, "Another")])
    return base


@pytest.mark.parametrize("own", [".mst", ".xrf", ".shm", ".wal", ".pdx/MANIFEST", ".pdx",
                                 ".CNT", ".ifp", ".n01", ".fst", ".stw", ".xrf.bak",
                                 ".mst-compact", ".iyp", ".LY1", ".ln2", ".resume"])
def test_export_refuses_the_databases_own_files(tmp_path, capsys, own):
    """Every file of the database is refused, --force or not, existing
    or not (a new <base>.wal would be taken for a damaged log): the master
    file pair, pydb's log, header and native index, the ISIS inverted
    file and definitions, mkxrf's and compaction's files."""
    base = _small_db(tmp_path)
    target = base + own

    def content():
        return open(target, "rb").read() if os.path.isfile(target) else os.path.exists(target)

    before = content()
    for extra in ([], ["--force"]):
        assert main(["export", base, target, *extra]) == 1
        assert content() == before
    assert "is a file of the database" in capsys.readouterr().err
    with pydb.open(base) as db:
        assert [r[24] for r in db] == [["A title"], ["Another"]]
        with pytest.raises(ValueError, match="is a file of the database"):
            pydb.export_iso(db, target)
    assert content() == before


def test_export_beside_the_database_under_its_base_name(tmp_path):
    """What is not one of its files may share the base name: small.iso,
    small.jsonl, small.mst.iso, small.pdx.iso in another folder."""
    base = _small_db(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    for target in (base + ".iso", base + ".mst.iso", base + ".jsonl", base + ".mst-2024.iso",
                   base + ".fst-notes.jsonl", str(other / "small.pdx"),
                   str(other / "small.mst")):
        assert main(["export", base, target]) == 0
        assert os.path.getsize(target) > 0


def test_export_replaces_only_with_force_and_never_leaves_partial_files(tmp_path, capsys):
    base = _small_db(tmp_path)
    out = tmp_path / "out.iso"
    out.write_bytes(b"keep me")
    assert main(["export", base, str(out)]) == 1
    assert out.read_bytes() == b"keep me"
    assert main(["export", base, str(out), "--force"]) == 0
    assert out.read_bytes().count(b"##") == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == ["out.iso"]


def test_import_of_a_file_without_records_fails(tmp_path, capsys):
    """A file with no record in it fails, and leaves no new database
    behind (it left an empty .mst/.xrf, which the next import appended
    to: a librarian's trial); an existing one is left as it was."""
    for i, data in enumerate([b"\0\0\0", b"\n\n\n", b"\0" * 5000, b""]):
        src = tmp_path / f"nul{i}.iso"
        src.write_bytes(data)
        assert main(["import", str(src), str(tmp_path / f"x{i}")]) == 1
        err = capsys.readouterr().err
        assert "no record found in" in err
        assert f"nothing imported: {tmp_path / f'x{i}'} was not created" in err
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(f"x{i}.")]
    base = _small_db(tmp_path)
    def files():   # the records' files (the commit header's counters move)
        return {p.name: p.read_bytes() for p in tmp_path.glob("small.*")
                if p.suffix in (".mst", ".xrf")}
    before = files()
    assert main(["import", str(tmp_path / "nul1.iso"), base]) == 1
    assert "no record found in" in capsys.readouterr().err
    assert files() == before and len(before) == 2


def test_import_refuses_huge_mfn_gap_and_tag_0(tmp_path):
    """A JSON Lines record naming MFN 1000000000 is a record error at once
    (more than --max-gap beyond the previous MFN), not a 4 GB XRF; tag 0
    is refused as db.append refuses it; the other records are imported."""
    src = tmp_path / "m3.jsonl"
    src.write_text('{"mfn": 1, "fields": [[1, "a"]]}\n'
                   '{"mfn": 1000000000, "fields": [[1, "x"]]}\n'
                   '{"fields": [[0, "x"]]}\n'
                   '{"mfn": 3, "fields": [[2, "b"]]}\n')
    r = run("import", src, tmp_path / "m3")
    err = r.stderr.decode().splitlines()
    assert r.returncode == 1, r.stderr
    assert len(err) == 3, err
    assert "record 2, MFN 1000000000, byte 33: MFN 1000000000 is 999999999 beyond " \
        "MFN 1: more than max_gap=1000000" in err[0]
    assert "record 3, byte 75: tag 0 is not an ISIS tag (1..65535)" in err[1]
    assert err[2] == "imported 2 record(s), 2 skipped"
    with pydb.open(tmp_path / "m3") as db:
        assert db.max_mfn == 3 and db[3].raw(2) == [b"b"]
        assert os.path.getsize(db.info()["xrf_path"]) == 512
    # --max-gap overrides the limit
    src.write_text('{"mfn": 1, "fields": [[1, "a"]]}\n{"mfn": 12, "fields": [[1, "x"]]}\n')
    r = run("import", src, tmp_path / "g10", "--max-gap", "10")
    assert r.returncode == 1 and b"MFN 12 is 11 beyond MFN 1" in r.stderr
    r = run("import", src, tmp_path / "g11", "--max-gap", "11", "--on-error", "stop")
    assert r.returncode == 0, r.stderr
    with pydb.open(tmp_path / "g11") as db:
        assert db.max_mfn == 12 and len(db) == 2


# --------------------------------------------------------------- dump, info

def test_cli(db_path):
    def run(*a):
        return subprocess.run([sys.executable, "-m", "pydb", *a], capture_output=True,
                              text=True)

    r = run("dump", str(db_path), "1")
    assert r.returncode == 0
    assert r.stdout.splitlines()[:3] == ["!ID 0000001", "!v024!A title", "!v070!Smith, J."]
    r = run("info", str(db_path))
    assert r.returncode == 0 and "isis-aligned" in r.stdout and "active: 2" in r.stdout
    r = run("info", str(db_path) + "-missing")
    assert r.returncode == 1 and "no master file" in r.stderr


def test_cli_closed_pipe_is_not_an_error(isis_data, monkeypatch, capsys):
    """`python -m pydb dump DB | head`: when the reader closes the pipe,
    the command stops quietly with status 0."""
    from pydb.__main__ import main

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def isatty(self):
            return False

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    base = isis_data / "scieloorg__pyisis/pyisis/pyisis/sample/cds"
    assert main(["dump", str(base)]) == 0
    assert capsys.readouterr().err == ""


# -------------------------------------------------------------------- check

def cli(*args):
    return subprocess.run([sys.executable, "-m", "pydb", "check", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.sanitize_address
def test_cli_sound(tmp_path):
    base = build(tmp_path, "isis-packed", n=10)
    p = cli(base)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "OK"
    assert "0 error(s), 0 warning(s) in 10 MFNs" in p.stdout


@pytest.mark.sanitize_address
def test_cli_damaged_text_and_json(tmp_path, capsys):
    base = build(tmp_path, "isis-aligned", n=10)
    mst = base.with_suffix(".mst")
    off = offset_of(base, 4)
    patch(mst, off, struct.pack("<i", 99))
    p = cli(base)
    assert p.returncode == 1
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("error:")]
    assert line == [f"error: mfn-mismatch MFN 4: {mst} at byte {off}: the record of MFN 4 "
                    f"at offset {off} carries MFN 99 in its leader"]
    assert re.search(r"^\s+1\s+error\s+mfn-mismatch$", p.stdout, re.M)
    assert "DAMAGED" in p.stdout
    assert cli_main(["check", str(base), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is False and d["exit_status"] == 1 and d["counts"] == {"mfn-mismatch": 1}
    assert d["problems"][0] == {"kind": "mfn-mismatch", "severity": "error", "mfn": 4,
                                "file": str(mst), "offset": off,
                                "message": f"the record of MFN 4 at offset {off} "
                                           "carries MFN 99 in its leader"}


@pytest.mark.sanitize_address
def test_cli_warnings_and_strict(tmp_path, capsys):
    base = build(tmp_path, "isis-packed", n=10)
    patch(base.with_suffix(".xrf"), 4 + 4 * 4, b"\0\0\0\0")    # MFN 5 -> orphan
    assert cli_main(["check", str(base)]) == 0
    out = capsys.readouterr().out
    assert "warning: orphan MFN 5" in out and out.rstrip().endswith("OK")
    assert cli_main(["check", str(base), "--strict"]) == 1
    capsys.readouterr()
    assert cli_main(["check", str(base), "--errors-only"]) == 0
    assert "warning:" not in capsys.readouterr().out


@pytest.mark.sanitize_address
def test_cli_max_problems(tmp_path, capsys):
    base = build(tmp_path, "isis-packed", n=20)
    mst = base.with_suffix(".mst")
    for m in range(1, 21):
        patch(mst, offset_of(base, m) + 16, struct.pack("<H", 9))
    assert cli_main(["check", str(base), "--max-problems", "3"]) == 1
    out = capsys.readouterr().out
    assert out.count("error: status") == 3
    assert "... 17 more (raise --max-problems)" in out
    assert re.search(r"^\s+20\s+error\s+status$", out, re.M)


@pytest.mark.sanitize_address
def test_cli_cannot_open_and_usage(tmp_path, capsys):
    assert cli_main(["check", str(tmp_path / "nothing")]) == 2
    assert "cannot open" in capsys.readouterr().err
    base = build(tmp_path, "isis-packed", n=3)
    with pytest.raises(SystemExit) as e:         # argparse: a bad value
        cli_main(["check", str(base), "--max-problems", "-1"])
    assert e.value.code == 2
    p = cli()          # argparse: missing DB
    assert p.returncode == 2


@pytest.mark.sanitize_address
def test_cli_corrupt_at_open(tmp_path, capsys):
    """Damage that stops the open (CTLMFN != 0) is one 'open' error, exit 1."""
    base = build(tmp_path, "isis-packed", n=3)
    patch(base.with_suffix(".mst"), 0, struct.pack("<i", 5))
    assert cli_main(["check", str(base)]) == 1
    out = capsys.readouterr().out
    assert f"error: open: {base.with_suffix('.mst')} at byte 0: control record: CTLMFN is 5" in out


@pytest.mark.sanitize_address
def test_cli_real_damaged_and_missing_xrf(isis_data):
    odds = data_path("ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds")
    p = cli(odds, "--errors-only")
    assert p.returncode == 1
    assert "error: mfn-mismatch MFN 49:" in p.stdout and "at byte 28976" in p.stdout
    p = cli(data_path("bireme__cisis/tests/CDS.std"))
    assert p.returncode == 2 and "no cross-reference file" in p.stderr


@pytest.mark.sanitize_address
def test_cli_progress_bar(tmp_path):
    pytest.importorskip("tqdm", reason="tqdm not installed (pip install 'pydb[test]')")
    base = build(tmp_path, "isis-packed", n=3000)
    p = cli(base, "--progress")
    assert p.returncode == 0
    assert "check:" in p.stderr and "step" in p.stderr     # tqdm on stderr
    assert p.stdout.strip().endswith("OK")


# ---------------------------------------------------------- terms, postings

@pytest.mark.sanitize_address
def test_cli_terms_and_postings(capsys):
    base = need(CDS_SAMPLE)
    assert cli_main(["terms", base, "wat", "--limit", "2", "--encoding", "cp850"]) == 0
    assert capsys.readouterr().out == "WATER\t15\nWATER BALANCE\t6\n"
    assert cli_main(["terms", base, "--start", "WATER Y", "--limit", "1"]) == 0
    assert capsys.readouterr().out == "WATER YIELD\t1\n"
    assert cli_main(["postings", need(BIBL), "7875"]) == 0
    assert capsys.readouterr().out == "5\t991\t1\t3\n"
    assert cli_main(["postings", base, "waterz"]) == 0      # no such key: a note
    got = capsys.readouterr()
    assert got.out == "" and got.err == (
        f"pydb postings: no key 'WATERZ' in the index (pydb terms {base} PREFIX lists "
        "the keys)\n")
    assert cli_main(["terms", need("bireme__isis2json/fixtures/cds/cds")]) == 1
    assert "no inverted index" in capsys.readouterr().err


@pytest.mark.sanitize_address
def test_cli_terms_writes_stored_bytes():
    """A key that is not valid UTF-8 (odds: TW_ESPA\\xd1OLA, Latin-1 data)
    is printed as stored under --encoding utf-8; the default --encoding
    auto detects latin-1 and prints the text (here as UTF-8)."""
    import subprocess
    import sys
    base = need(ODDS)
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    with Index.open_isis(base) as ix:
        n = len(ix.postings(b"TW_ESPA\xd1OLA"))
    for extra, key in ((["--encoding", "utf-8"], b"TW_ESPA\xd1OLA"),
                       ([], "TW_ESPAÑOLA".encode())):
        p = subprocess.run([sys.executable, "-m", "pydb", "terms", base, "TW_ESP", *extra],
                           capture_output=True, env=env, timeout=60,
                           cwd=Path(__file__).resolve().parents[1])
        assert p.returncode == 0, p.stderr
        assert p.stdout == key + b"\t%d\n" % n and n > 0


# -------------------------------------------------------------------- index

@pytest.mark.sanitize_address
def test_cli_index(isis_data, tmp_path):
    base = str(copy_db(isis_data / CDS_SAMPLE, tmp_path, ("fst", "stw")))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "pydb", "index", base, "--quiet",
                        "--max-key", "30"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("indexed 151 MFNs") or r.stdout.startswith("indexed 150 MFNs")
    assert len(all_terms(_pydb._open_native_index(base))) == 1309
    r = subprocess.run([sys.executable, "-m", "pydb", "index", str(tmp_path / "none"),
                        "--quiet", "--fst", os.path.join(str(tmp_path), "cds.fst")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 1
    assert r.stderr == (f"pydb index: {tmp_path / 'none'}: no database there "
                        "(no .mst or .xrf file)\n")
    r = subprocess.run([sys.executable, "-m", "pydb", "index", str(tmp_path / "none"),
                        "--quiet"], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "no database there" in r.stderr   # not "no .fst file"


def test_index_leaves_the_master_file_as_it_was(isis_data, tmp_path):
    """`pydb index` on a CDS/ISIS database, then a rebuild and a
    collection that merges the index: commits of the index alone, which
    change no record, write no byte of the .mst or .xrf (they rewrote the
    control record and the zero fill past the last record: same bytes, a
    new mtime, which backup tools copy again)."""
    base = str(copy_db(isis_data / CDS_SAMPLE, tmp_path, ("fst", "stw")))
    files = [base + ".mst", base + ".xrf"]
    before = [Path(f).read_bytes() for f in files]
    for f in files:
        os.utime(f, ns=(10**18, 10**18))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for _ in range(2):
        r = subprocess.run([sys.executable, "-m", "pydb", "index", base, "--quiet"],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
    with pydb.open(base, readonly=False, encoding="cp850") as db:
        assert len(db.search("WATER")) > 0
        db.collect()
    assert [os.stat(f).st_mtime_ns for f in files] == [10**18, 10**18]
    assert [Path(f).read_bytes() for f in files] == before


def test_index_refuses_a_missing_fst_or_stw_file(isis_data, tmp_path, capsys):
    """--fst/--stw FILE are files: a mistyped name fails and names the
    file; the index and its stored stop words stay (a missing name was
    taken for one stop word, "nofile.stw", before)."""
    base = str(copy_db(isis_data / CDS_SAMPLE, tmp_path, ("fst", "stw")))
    assert cli_main(["index", base, "--quiet"]) == 0
    capsys.readouterr()
    stw = stored_settings(base)["stw"]
    for opt in ("--stw", "--fst"):
        assert cli_main(["index", base, "--quiet", opt, "nofile" + opt[1:].replace("-", ".")]) == 1
        assert capsys.readouterr().err == (f"pydb: [Errno {errno.ENOENT}] No such file or "
                                           f"directory: 'nofile.{opt[2:]}'\n")
    assert stored_settings(base)["stw"] == stw and b"THE" in stw
    assert len(all_terms(_pydb._open_native_index(base))) == 1309


# ------------------------------------------------------------------- search

@pytest.mark.sanitize_address
@pytest.mark.sanitize_thread
def test_cli_search(isis_data, capsys):
    from pydb.__main__ import main as cli_main
    base = str(isis_data / "scieloorg__pyisis/pyisis/pyisis/sample/cds")
    assert cli_main(["search", base, "PLANT . CHAMBER", "--encoding", "cp850"]) == 0
    assert capsys.readouterr().out == "2 records\n2\n3\n"
    assert cli_main(["search", base, "BOSIAN$", "--dump", "--encoding", "cp850"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 records\n!ID 0000002\n")
    assert "!v070!Bosian, G.\n" in out
    assert cli_main(["search", base, "PLANT . ("]) == 1
    err = capsys.readouterr().err
    assert "expected a term" in err and err.endswith("  PLANT . (\n           ^\n")


# ------------------------------------------------------ help and messages

def _subparsers():
    from pydb.__main__ import parser
    ap = parser()
    sub = next(a for a in ap._actions if a.dest == "command")
    return ap, sub.choices


def test_ctrl_c_in_any_command_is_one_line(isis_data, monkeypatch, capsys):
    import pydb.__main__ as cli

    def interrupt(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_write_record", interrupt)
    assert main(["dump", str(data_path(CDS))]) == 130
    assert capsys.readouterr().err == "pydb dump: interrupted\n"
    monkeypatch.setattr(pydb.ministat, "main", interrupt)
    assert main(["ministat", "x"]) == 130
    assert capsys.readouterr().err == "pydb ministat: interrupted\n"


def test_every_argument_has_help_naming_its_default():
    ap, commands = _subparsers()
    own = {"crashtest", "ministat", "gctest"}        # parse their own arguments
    assert sorted(commands) == sorted(own | {
        "info", "dump", "terms", "postings", "search", "check", "import", "export",
        "gen-unesb", "stat", "collect", "index", "mkxrf"})
    for name, p in commands.items():
        if name in own:
            continue
        text = " ".join(p.format_help().split())     # words, not line breaks
        assert "exit status:" in text and "130 interrupted by Ctrl-C" in text, name
        assert "default: True" not in text and "default: None" not in text, name
        for action in p._actions:
            assert action.help, (name, action.dest)
            if action.option_strings and action.default not in (None, False, "==SUPPRESS=="):
                assert f"default: {action.default}" in text or \
                    f"default {action.default}" in text, (name, action.dest, action.default)
    enc = {name: next(a for a in p._actions if a.dest == "encoding")
           for name, p in commands.items() if name in (
               "info", "dump", "terms", "postings", "search")}
    assert {a.default for a in enc.values()} == {"auto"}
    assert {a.help.split(" (info")[0] for a in enc.values()} == {
        "character set of the database's field values, a Python codec name (utf-8, cp850, "
        "cp1252, latin-1, ...) or auto; default: auto, detected from the records and ABCD's "
        "configuration files"}


@pytest.mark.parametrize("tool", ["crashtest", "ministat", "gctest"])
def test_each_tool_help_ends_with_its_exit_statuses(tool):
    """The tools parse their own arguments; their help ends with their own
    table (ministat's 1 is a file that cannot be opened, as FreeBSD's)."""
    r = run(tool, "--help")
    text = r.stdout.decode()
    statuses = importlib.import_module(f"pydb.{tool}").EXIT_STATUSES
    assert r.returncode == 0 and [c for c, _ in statuses] == [0, 1, 2, 130]
    assert text.endswith("\n\nexit status:\n" + "".join(
        textwrap.fill(what, 79, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        + "\n" for code, what in statuses))
    assert max(len(line) for line in text.splitlines()) <= 79


def test_top_level_help():
    r = run("--help")
    text = r.stdout.decode()
    assert r.returncode == 0 and text.startswith("usage: pydb [-h] COMMAND ...\n")
    assert "``" not in text and "python -m pydb" in text
    assert "exit status:\n  0    done" in text
    assert "  2    bad usage" in text and "  130  interrupted by Ctrl-C (SIGINT)" in text


def test_search_help_lists_the_operators():
    r = run("search", "--help")
    text = r.stdout.decode()
    for op in ("A + B       OR", "A * B       AND", "A ^ B       AND NOT", "A (G) B",
               "A (F) B", "A . B       near", "A $ B", "TERM$", "TERM/(24,70)",
               '"TWO WORDS"', 'pydb search cds "PLANT$ * WATER/(24)"'):
        assert op in text, op
    assert 'a line "N records" (records, not postings)' in text


def test_one_record_and_the_missing_index_hint(isis_data, capsys):
    base = need(BIBL)
    assert cli_main(["search", base, "HAYNAL"]) == 0
    assert capsys.readouterr().out == "1 record\n1\n"
    plain = need("bireme__isis2json/fixtures/cds/cds")
    assert cli_main(["search", plain, "X"]) == 1
    assert capsys.readouterr().err == (
        f"pydb search: {plain}: the database has no inverted index to search (no native "
        f"index, no CDS/ISIS inverted file); build a native one with: pydb index {plain} "
        "--fst FILE\n")
    # pyisis db/cds: .n01/.l01/.ifp without the .cnt, and an .fst
    nocnt = need("scieloorg__pyisis/db/cds")
    assert cli_main(["search", nocnt, "WATER"]) == 1
    assert capsys.readouterr().err == (
        f"pydb search: {nocnt}: the database has no inverted index to search (its "
        "CDS/ISIS inverted file (cds.n01, cds.l01, cds.ifp) has no control file (.cnt), "
        "without which it cannot be read); build a native one with: pydb index "
        f"{nocnt}\n")


def test_index_names_the_fst_option(tmp_path, capsys):
    base = _small_db(tmp_path)
    assert cli_main(["index", base]) == 1
    assert capsys.readouterr().err == (
        f"pydb index: {base}: the database has no .fst file and no index to take the "
        "FST from; give one with --fst FILE\n")


def test_info_shows_encoding_io_commit_and_index(isis_data, tmp_path, capsys):
    assert cli_main(["info", need(CDS_SAMPLE), "--encoding", "cp850"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-8:] == [
        "            encoding: cp850 (field values are decoded with it; --encoding)",
        "                  io: mmap (lock none)",
        "              commit: 0 (commit sequence; 0: never written by pydb)",
        "               index: isis-classic (CDS/ISIS inverted file)",
        "          index keys: short keys up to 10 bytes, long keys up to 30 bytes",
        "                keys: 1309",
        "            postings: 2349 (one per place a key occurs: MFN, tag, occurrence, "
        "word)",
        f"                 fst: {need(CDS_SAMPLE)}.fst"]
    # a native index: its own figures (Database.stat) and the FST it stores
    r = run("gen-unesb", tmp_path, "--count", "300")
    assert r.returncode == 0, r.stderr
    base = tmp_path / "unesb"
    with pydb.open(base, readonly=False) as db:
        db.append([(24, "one more")])
    with pydb.open(base, readonly=False, gc="none") as db:
        ix = db.stat()["index"]
    assert cli_main(["info", str(base), "--encoding", "utf-8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-8:] == [
        "            encoding: utf-8 (field values are decoded with it; --encoding)",
        "                  io: mmap (lock none)",
        "              commit: 3 (commit sequence; 0: never written by pydb)",
        f"               index: native ({base}.pdx)",
        "          index keys: UTF-8, Unicode case and accent folding; cisis key mode; "
        "key length no limit",
        f"                keys: {ix['terms']}",
        f"            postings: {ix['postings']} (one per place a key occurs: MFN, tag, "
        "occurrence, word)",
        "                 fst: 7 lines, stored in the index"]
    assert lines[0] == f"            mst_path: {base}.mst"
    # a damaged index: said, and the rest shown
    (tmp_path / "unesb.pdx" / "MANIFEST").write_bytes(b"garbage\n")
    assert cli_main(["info", str(base)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"               index: unreadable ({base}.pdx/MANIFEST at byte 0: manifest: bad "
        f"magic line); pydb index {base} rebuilds a native one")
    # no index: how to make one
    plain = _small_db(tmp_path)
    assert cli_main(["info", plain]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"               index: none (build one: pydb index {plain} --fst FILE)")
    # an FST beside it (pydb index takes it), inverted-file parts without
    # their .cnt: both said
    for ext in ("fst", "ifp", "n01"):
        Path(f"{plain}.{ext}").write_bytes(b"24 0 v24\n" if ext == "fst" else b"")
    assert cli_main(["info", plain]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"               index: none (pydb index {plain} builds one from {plain}.fst; the "
        "CDS/ISIS inverted file beside it (.ifp, .n01) has no .cnt and is not read)")
    # an FST beside it that does not parse (ABCD's rda: line 2 opens a
    # conditional literal it never closes): the command names --fst and
    # why, in info and search (both suggested a command that failed)
    rda = need("ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/rda/data/rda")
    for ext in ("mst", "xrf", "fst"):
        shutil.copy(f"{rda}.{ext}", tmp_path / f"rda.{ext}")
    copy = str(tmp_path / "rda")
    why = (f"pydb index {copy} --fst FILE ({copy}.fst beside it does not parse: {copy}.fst: "
           "FST line 2, column 14: unterminated conditional literal \"v50^a,|.|v50^b, (no "
           "closing \" on the line))")
    assert cli_main(["info", copy]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        f"               index: none (build one: {why})"
    assert cli_main(["search", copy, "X"]) == 1
    assert capsys.readouterr().err == (
        f"pydb search: {copy}: the database has no inverted index to search (no native index, "
        f"no CDS/ISIS inverted file); build a native one with: {why}\n")


def test_no_carriage_returns_off_a_terminal(tmp_path, capfd):
    """Bars only when stderr is a terminal: gen-unesb and index, with
    stderr going to a pipe, write no bar; --progress asks for one; the
    library's build_index is silent unless asked."""
    pytest.importorskip("tqdm")
    r = run("gen-unesb", tmp_path / "g", "--count", "3000")
    assert r.returncode == 0 and r.stderr == b"" and r.stdout == f"{tmp_path}/g/unesb\n".encode()
    r = run("index", tmp_path / "g" / "unesb")
    assert r.returncode == 0 and r.stderr == b""
    assert re.fullmatch(rb"indexed 3000 MFNs in [0-9.]+ s \(reading records and making keys "
                        rb"[0-9.]+ s, [0-9,]+ MFNs/s; writing and committing the index "
                        rb"[0-9.]+ s\)\n", r.stdout), r.stdout
    r = run("index", tmp_path / "g" / "unesb", "--progress")
    assert r.returncode == 0 and b"\r" in r.stderr and b"index" in r.stderr
    r = run("export", tmp_path / "g" / "unesb", tmp_path / "g.iso", "--progress")
    assert r.returncode == 0 and b"\r" in r.stderr and b"export" in r.stderr
    pydb.build_index(tmp_path / "g" / "unesb")
    assert capfd.readouterr() == ("", "")


def test_options_among_the_positional_arguments(isis_data, capsys):
    """An option between the database and the MFNs or the prefix (a
    librarian's trial: "unrecognized arguments: 3", exit 2) is taken as
    where it is written last."""
    db = str(data_path(CDS_SAMPLE))
    for args in (["dump", db, "--encoding", "cp850", "3"],
                 ["dump", db, "--no-progress", "3"], ["dump", db, "3", "--deleted"]):
        assert main(args) == 0, args
        out = capsys.readouterr().out
        assert out.splitlines()[0] == "!ID 0000003", args
    assert main(["terms", db, "--limit", "2", "WAT"]) == 0
    assert capsys.readouterr().out == "WATER\t15\nWATER BALANCE\t6\n"
    assert main(["search", db, "--dump", "WATER"]) == 0
    assert capsys.readouterr().out.startswith("14 records\n!ID 0000004\n")


def test_dump_and_search_under_the_posix_locale(isis_data):
    """LC_ALL=POSIX without UTF-8 mode: stdout is ASCII; non-ASCII text is
    written as UTF-8 instead of stopping at an 'ascii' codec error."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG")}
    env.update(LC_ALL="POSIX", PYTHONUTF8="0", PYTHONPATH=str(REPO))
    for args in (["dump", need(BIBL), "1", "--encoding", "cp850"],
                 ["search", need(BIBL), "HAYNAL", "--dump", "--encoding", "cp850"]):
        r = subprocess.run([sys.executable, "-m", "pydb", *args], cwd=REPO,
                           capture_output=True, env=env, timeout=60)
        # the sample's inverted file misses MFN 5 (StaleIndexWarning)
        said = [] if args[0] == "dump" else [
            f"pydb: warning: {need(BIBL)}: its CDS/ISIS inverted file is behind the master "
            "file: 1 record(s) the XRF flags new or changed since it was inverted"]
        assert r.returncode == 0, r.stderr
        lines = r.stderr.decode().splitlines()
        assert len(lines) == len(said), r.stderr
        assert [line[:len(s)] for line, s in zip(lines, said, strict=True)] == said
        assert "^fby André E. Haynal^g".encode() in r.stdout
        assert "!v700!^aHaynal^bAndré\n".encode() in r.stdout


def test_dump_goes_on_past_a_damaged_record(isis_data):
    """`dump` prints every record it can read: ABCD's odds sample has a
    damaged MFN 49 (SOURCES.md), which is left out and named on stderr
    (file, offset, reason), and the exit status is 1.  Before, the dump
    stopped there and MFNs 50-87 were never printed (review of real
    data)."""
    base = need(ODDS)
    p = run("dump", base, text=True)
    ids = [int(line[4:]) for line in p.stdout.splitlines() if line.startswith("!ID ")]
    assert p.returncode == 1
    assert ids == [m for m in range(1, 88) if m != 49]
    assert p.stderr.splitlines() == [
        f"pydb dump: left out: {base}.mst at byte 28976: the record at offset 28976 has "
        "MFN 2019440690, but the XRF entry of MFN 49 points there",
        f"pydb dump: 1 damaged record left out (pydb check {base} reports the damage)"]


def test_index_rebuilds_a_damaged_manifest_with_the_fst_of_its_spare(tmp_path):
    """An index made with create(fst=...) keeps its FST in its MANIFEST
    only; with the MANIFEST damaged, `pydb index` (which the search's
    error names as the repair) takes the FST and settings from the spare
    MANIFEST.pydb-next and says so; it stopped with "no .fst file and no
    index to take the FST from", and writes stayed refused (an
    operator's trial).  With the spare damaged too, it asks for --fst."""
    base = tmp_path / "db"
    with pydb.create(base, fst="24 4 v24\n") as db:
        for i in range(3):
            db.append([(24, f"water pump {i}")])
    pdx = Path(f"{base}.pdx")
    assert (pdx / "MANIFEST.pydb-next").exists()
    (pdx / "MANIFEST").write_bytes(b"")
    p = run("search", base, "PUMP", text=True)
    assert p.returncode == 1 and "python -m pydb index" in p.stderr
    p = run("index", base, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stderr == (f"pydb: warning: {pdx}/MANIFEST at byte 0: manifest: bad magic line; the "
                        "settings stored with the index (FST, stop words, key tables) are "
                        "read from its spare MANIFEST.pydb-next (an earlier commit's)\n")
    with pydb.open(base, readonly=False) as db:
        assert list(db.search("PUMP")) == [1, 2, 3]
        assert pydb.native.stored_settings(base)["fst"] == b"24 4 v24\n"
        db.append([(24, "blue pump")])
        assert db.check().ok
    for name in ("MANIFEST", "MANIFEST.pydb-next"):
        (pdx / name).write_bytes(b"")
    p = run("index", base, text=True)
    assert p.returncode == 1
    want = (f"pydb index: {base}: the database has no .fst file and no index to take the "
            "FST from; give one with --fst FILE\n")
    assert p.stderr == want
    # a rebuild with another FST removes the spare, which held the index
    # it replaced: damaged right after, the old FST is not taken back
    # (a review: `BETA0` found nothing, `ALPHA0` again)
    (tmp_path / "other.fst").write_text("24 0 v24\n")
    assert run("index", base, "--fst", tmp_path / "other.fst").returncode == 0
    assert not (pdx / "MANIFEST.pydb-next").exists()
    (pdx / "MANIFEST").write_bytes(b"")
    p = run("index", base, text=True)
    assert (p.returncode, p.stderr) == (1, want)


def test_an_xrf_entry_past_the_end_stops_no_listing(tmp_path):
    """One XRF entry pointing past the end of the master file (MFN 5 of
    6 here) is one damaged record: `export` writes the 5 others and
    names it (exit 1, as for any record skipped), `dump` leaves it out,
    `stat` counts it, iteration yields the records before it and then
    raises.  Before, listing the MFNs raised at it and `export`, `dump`
    and `stat` printed nothing but the error (an operator's trial)."""
    base = tmp_path / "db"
    with pydb.create(base) as db:
        for i in range(6):
            db.append([(24, f"title {i + 1}")])
    with open(f"{base}.xrf", "r+b") as f:
        f.seek(4 + 4 * 4)
        f.write(struct.pack("<i", 0x7FFFFFFF))
    why = (f"{base}.xrf at byte 20: XRF entry of MFN 5 (value 2147483647) points at "
           f"offset 536870399, past the end of {base}.mst")
    p = run("export", base, tmp_path / "out.iso", text=True)
    assert p.returncode == 1
    assert p.stderr.splitlines()[0].startswith(f"pydb: skipped: {why}")
    assert p.stderr.splitlines()[-1] == "exported 5 record(s), 1 skipped"
    assert [r.fields for r in pydb.iso2709.read(tmp_path / "out.iso")] == [
        [(24, f"title {m}".encode())] for m in (1, 2, 3, 4, 6)]
    p = run("dump", base, text=True)
    ids = [int(line[4:]) for line in p.stdout.splitlines() if line.startswith("!ID ")]
    assert (p.returncode, ids) == (1, [1, 2, 3, 4, 6])
    assert p.stderr.splitlines()[0].startswith(f"pydb dump: left out: {why}")
    p = run("stat", base, text=True)
    assert "1 damaged record(s)" in p.stderr
    with pydb.open(base) as db:
        assert list(db.mfns()) == [1, 2, 3, 4, 5, 6]
        got = []
        with pytest.raises(pydb.CorruptionError, match="XRF entry of MFN 5"):
            for rec in db:
                got.append(rec.mfn)
        assert got == [1, 2, 3, 4]


def test_dump_of_listed_mfns_goes_on_past_one_that_does_not_read(isis_data):
    """`dump DB MFN...` prints every listed record that reads, in the
    order given, and names each that does not (damaged, physically
    deleted, outside the database) on stderr, exit status 1: one bad
    MFN printed none of them before (a librarian's trial)."""
    base = need(ODDS)
    p = run("dump", base, 50, 49, 48, 999, text=True)
    ids = [int(line[4:]) for line in p.stdout.splitlines() if line.startswith("!ID ")]
    assert (p.returncode, ids) == (1, [50, 48])
    assert p.stderr.splitlines() == [
        f"pydb dump: left out: {base}.mst at byte 28976: the record at offset 28976 has "
        "MFN 2019440690, but the XRF entry of MFN 49 points there",
        "pydb dump: left out: MFN 999 is outside 1..87",
        f"pydb dump: 2 listed MFNs of 4 left out (pydb check {base} reports the damage)"]
    p = run("dump", need("bireme__isis2json/fixtures/cds/winisis-cds"), 22, 23, 24, text=True)
    ids = [int(line[4:]) for line in p.stdout.splitlines() if line.startswith("!ID ")]
    assert (p.returncode, ids) == (1, [22, 24])
    assert p.stderr.splitlines() == ["pydb dump: left out: MFN 23 is physically deleted",
                                     "pydb dump: 1 listed MFN of 3 left out"]
    p = run("dump", base, 48, 50, text=True)
    assert (p.returncode, p.stderr, p.stdout.count("!ID ")) == (0, "", 2)


def test_a_warning_is_one_line(isis_data):
    """A warning of the library (here EncodingDetectionWarning: pyisis's
    mixEncodings fixture mixes UTF-8 and cp850 values) is one line on
    stderr, not the file and source line of pydb's code that warned."""
    base = need("scieloorg__pyisis/pyisis/pyisis/tests/fixtures/mixEncodings")
    p = run("info", base, text=True)
    assert p.returncode == 0
    assert p.stderr.startswith(f"pydb: warning: {base}.mst: encoding=\"auto\" chose cp850")
    assert len(p.stderr.splitlines()) == 1 and "__main__.py" not in p.stderr


def test_info_says_a_classic_index_is_behind(isis_data, tmp_path):
    """`info` tells when the XRF flags records the CDS/ISIS inverted file
    has not taken in (pydb never updates one): the WinISIS sample BIBL
    has one pending record, and a record pydb changes adds one."""
    src = need("cpan__Biblio-Isis-0.24/data/winisis/BIBL")
    base = copy_db(src, tmp_path / "BIBL", ("cnt", "n01", "n02", "l01", "l02", "ifp"))
    p = run("info", base, "--encoding", "cp850", text=True)
    assert "index behind by: 1 record the XRF flags new or changed" in p.stdout
    with pydb.open(base, readonly=False, encoding="cp850", gc="none") as db:
        db.update(2, [(24, "changed")])
    p = run("info", base, "--encoding", "cp850", text=True)
    assert "index behind by: 2 records the XRF flags new or changed" in p.stdout


def test_import_of_a_directory_says_it_is_read_as_parquet(tmp_path, capsys):
    """A directory is a Parquet dataset to `pydb import`: one named like an
    ISO file holds no *.parquet file, and the message says why it was read
    so."""
    pytest.importorskip("pyarrow")
    src = tmp_path / "d.iso"
    src.mkdir()
    assert main(["import", str(src), str(tmp_path / "db")]) == 1
    err = capsys.readouterr().err
    assert "no *.parquet file in the directory (a directory is read as a Parquet " \
           "dataset; ISO 2709 and JSON Lines sources are files)" in err
    assert not (tmp_path / "db.mst").exists()


def test_index_and_import_on_read_only_media_say_what_they_write(tmp_path, capsys,
                                                                monkeypatch):
    """On read-only media `pydb index` and `pydb import` say what they
    write beside the database (a librarian's trial: "cannot open:
    Read-only file system: 'cds.mst'" for an index build, and a
    '.resume.tmp' the help says a new database does not have).  The
    media are simulated: the calls raise what the kernel's EROFS gives
    (root ignores permission bits, and a test cannot mount)."""
    import errno as errno_

    import pydb.__main__ as cli
    base = _small_db(tmp_path)

    def read_only(path, *a, **k):
        raise OSError(errno_.EROFS, "Read-only file system", f"{path}.mst")
    monkeypatch.setattr(cli, "build_index", read_only)
    monkeypatch.setattr(cli, "import_iso", read_only)
    (tmp_path / "x.fst").write_text("24 4 v24\n")
    assert main(["index", base, "--fst", str(tmp_path / "x.fst")]) == 1
    err = capsys.readouterr().err
    assert f"pydb index: cannot build the index of {base}: the build writes {base}.pdx " \
           "beside the database and takes its writer lock, which opens the master file " \
           "for writing ([Errno 30] Read-only file system" in err
    iso = tmp_path / "a.iso"
    pydb.iso2709.write(iso, [[(1, b"x")]])
    assert main(["import", str(iso), str(tmp_path / "new")]) == 1
    assert f"pydb import: cannot write {tmp_path / 'new'}: the import writes the database " \
           f"and its resume file {tmp_path / 'new'}.resume in that folder" in \
           capsys.readouterr().err
    # another errno is not dressed up as read-only media
    monkeypatch.setattr(cli, "import_iso", lambda *a, **k: (_ for _ in ()).throw(
        OSError(errno_.ENOSPC, "No space left on device")))
    assert main(["import", str(iso), str(tmp_path / "new2")]) == 1
    assert capsys.readouterr().err.strip() == "pydb: [Errno 28] No space left on device"
