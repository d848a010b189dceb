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

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

import pydb
from pydb import _pydb
from pydb.__main__ import main
from pydb.__main__ import main as cli_main
from pydb.index import Index

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
    assert r.returncode == 0 and b"!ID 000003 (deleted)" in r.stdout


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


@pytest.mark.parametrize("args", [
    ["import", "{missing}", "{tmp}/x"],
    ["export", "{tmp}/nodb", "{tmp}/out.iso"],
    ["import", "{iso}", "{tmp}/y", "--encoding", "no-such-codec"],
    ["import", "{iso}", "{tmp}/z", "--mstxl", "9"],
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


def test_import_appends_to_an_existing_database(tmp_path):
    (tmp_path / "a.iso").write_bytes(b"000330000000000290004500001000200000#x##\n")
    assert run("import", tmp_path / "a.iso", tmp_path / "d").returncode == 0
    r = run("import", tmp_path / "a.iso", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    with pydb.open(tmp_path / "d") as db:
        assert db.max_mfn == 2 and db[1].raw(1) == db[2].raw(1) == [b"x"]


def test_no_progress_bar_off_a_terminal(isis_data, tmp_path):
    r = run("export", data_path(CDS), tmp_path / "c.iso")
    assert r.returncode == 0 and r.stderr == b"exported 150 record(s), 0 skipped\n"
    r = run("dump", data_path(CDS))
    assert r.returncode == 0 and r.stderr == b""
    assert r.stdout.count(b"!ID ") == 150 and r.stdout.startswith(b"!ID 000001\n!v044!")


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


@pytest.mark.parametrize("own", [".mst", ".xrf"])
def test_export_refuses_the_databases_own_files(tmp_path, capsys, own):
    base = _small_db(tmp_path)
    before = open(base + own, "rb").read()
    for extra in ([], ["--force"]):
        assert main(["export", base, base + own, *extra]) == 1
        assert open(base + own, "rb").read() == before
    err = capsys.readouterr().err
    assert "exists (use --force" in err and "is a file of the database" in err
    with pydb.open(base) as db:
        assert [r[24] for r in db] == [["A title"], ["Another"]]


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
    src = tmp_path / "nul.iso"
    src.write_bytes(b"\0\0\0")
    assert main(["import", str(src), str(tmp_path / "x")]) == 1
    assert "no record found in" in capsys.readouterr().err


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
    assert r.stdout.splitlines()[:3] == ["!ID 000001", "!v024!A title", "!v070!Smith, J."]
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
    assert cli_main(["check", str(base), "--max-problems", "-1"]) == 2
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
    assert r.returncode == 1 and "pydb:" in r.stderr


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
