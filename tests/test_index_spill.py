"""The bulk build of the native index in bounded memory (issue 14 item 2;
csrc/nidx_spill.c, csrc/nidx_build.c).

Past its memory budget the build sorts its keys and postings into a run
file (``build-PID-N.tmp`` in the index folder), merges runs sixteen at a
time per level while it reads, and at the end merges the runs, streaming,
into the one segment it publishes.  Checked here:

- the segment and MANIFEST are byte-identical to those of the in-memory
  build (a budget no database reaches) whatever the budget: one that
  spills a few runs, and one byte, a run per record with merges of merges;
- the runs are gone after the build, after a failed build, and, when the
  build was killed (``kill -9``), the next build or collection removes
  them while the previous index stays as it was and is read as before;
- a failed write at any write-side file operation of a spilled build
  (ENOSPC injected by ``_pydb._testing.fail_io``) leaves no run behind and
  either the previous index, byte for byte, with DiskError (errno ENOSPC,
  a file name), or the new index complete: when the failure came after
  the commit's log was durable (DiskError, recovery replays the commit)
  or after the commit (removing the old segment is best effort).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import segment_model

import pydb
from pydb import _pydb, unesb

RECORDS = 1500
QUERIES = ["LA=EN", "LA=FR", "YR=1955", "PARIS", "CENTRE"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A small default database, without index (its .fst beside it)."""
    return unesb.generate(tmp_path_factory.mktemp("spill"), count=RECORDS)


def fresh_copy(source: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for ext in (".mst", ".xrf", ".fst"):
        shutil.copy(f"{source}{ext}", dst / f"unesb{ext}")
    return dst / "unesb"


def build(base: Path, memory: int) -> set[str]:
    """Build the index of `base` with a `memory` budget; the names of the
    run files seen in the index folder between batches of 50 records."""
    pdx = Path(f"{base}.pdx")
    seen: set[str] = set()

    def progress(done: int, total: int) -> None:
        if pdx.is_dir():
            seen.update(n for n in os.listdir(pdx) if n.startswith("build-"))

    fst = Path(f"{base}.fst").read_bytes()
    assert _pydb._index_build(str(base), fst, progress, memory=memory, batch=50) == RECORDS
    return seen


def files(base: Path) -> dict[str, bytes]:
    pdx = Path(f"{base}.pdx")
    return {n: (pdx / n).read_bytes() for n in sorted(os.listdir(pdx))}


def answers(base: Path) -> dict[str, list[int]]:
    with pydb.open(base) as db:
        return {q: list(db.search(q)) for q in QUERIES}


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    """Files and search answers of the in-memory build (no run)."""
    base = fresh_copy(source, tmp_path_factory.mktemp("ref"))
    assert build(base, 1 << 40) == set()
    got = files(base)
    assert sorted(got) == ["MANIFEST", "seg-00000001.pds"]
    # lists long enough for skip tables, which the spilled merge writes
    # from the postings it gathers (csrc/nidx_spill.h)
    seg = segment_model.read_segment(got["seg-00000001.pds"])
    assert sum(1 for _, count, _ in seg.terms if count > segment_model.SKIP) >= 5
    return got, answers(base)


@pytest.mark.parametrize("memory, min_runs", [(1 << 19, 3), (1, 100)],
                         ids=["512KiB", "1byte"])
def test_spilled_build_writes_the_in_memory_segment(source, reference, tmp_path,
                                                    memory, min_runs):
    ref_files, ref_answers = reference
    base = fresh_copy(source, tmp_path)
    seen = build(base, memory)
    assert len(seen) >= min_runs
    assert files(base) == ref_files          # byte for byte, no run left
    got = answers(base)
    assert got == ref_answers
    assert all(got[q] for q in ("LA=EN", "LA=FR"))
    with pydb.open(base) as db:
        english = [r.mfn for r in db
                   if any(f.tag == 40 and f.value.upper() == "EN" for f in r.fields)]
    assert got["LA=EN"] == english


def test_memory_budget_is_checked(source, tmp_path):
    base = fresh_copy(source, tmp_path)
    with pytest.raises(ValueError, match="memory"):
        pydb.build_index(base, progress=False, memory=-1)
    with pytest.raises(ValueError, match="memory"):
        _pydb._index_build(str(base), b"40 0 v40\n", memory=-1)
    assert not Path(f"{base}.pdx").exists()
    assert pydb.build_index(base, progress=False, memory=1 << 20) == RECORDS


CHILD = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from pydb import _pydb
base = {base!r}
pdx = Path(base + ".pdx")

def progress(done, total):
    if len([n for n in os.listdir(pdx) if n.startswith("build-")]) >= 2:
        os.kill(os.getpid(), signal.SIGKILL)

_pydb._index_build(base, Path(base + ".fst").read_bytes(), progress,
                   memory=1 << 20, batch=50)
sys.exit(3)   # the build finished: the test would prove nothing
"""


def kill_mid_build(base: Path) -> list[str]:
    """A child process builds the index of `base` with a small budget and
    is killed (SIGKILL) once two runs exist; the run files it left."""
    repo = str(Path(__file__).resolve().parents[1])
    child = subprocess.run([sys.executable, "-c", CHILD.format(repo=repo, base=str(base))],
                           timeout=120)
    assert child.returncode == -signal.SIGKILL
    return sorted(n for n in os.listdir(f"{base}.pdx") if n.startswith("build-"))


@pytest.fixture
def killed(source, reference, tmp_path):
    """A database with an index built by a one-rule FST, then a rebuild
    killed mid-way: (base, its files before the kill, its answers, the
    run files left)."""
    base = fresh_copy(source, tmp_path)
    pydb.build_index(base, fst="40 0 'LA=',v40\n", progress=False)
    before = files(base)
    before_answers = answers(base)
    assert before_answers["LA=EN"] and not before_answers["PARIS"]
    left = kill_mid_build(base)
    assert len(left) >= 2
    return base, before, before_answers, left


def test_kill_leaves_previous_index_and_next_build_removes_runs(killed, reference):
    base, before, before_answers, left = killed
    now = files(base)
    assert {n: b for n, b in now.items() if not n.startswith("build-")} == before
    assert answers(base) == before_answers      # the runs are never read
    build(base, 1 << 20)
    ref_files, ref_answers = reference
    after = files(base)
    assert not any(n.startswith("build-") for n in after)
    assert after["MANIFEST"] != before["MANIFEST"]
    assert answers(base) == ref_answers


def test_kill_leaves_runs_that_collection_removes(killed):
    base, before, before_answers, left = killed
    with pydb.open(base, readonly=False, sync=False, gc="none") as db:
        db.collect()
    now = files(base)
    assert not any(n.startswith("build-") for n in now)
    assert now == before
    assert answers(base) == before_answers


def test_enospc_at_every_write_of_a_spilled_build(source, reference, tmp_path):
    ref_files, ref_answers = reference
    base = fresh_copy(source, tmp_path / "db")
    pydb.build_index(base, fst="40 0 'LA=',v40\n", progress=False)
    pristine = tmp_path / "pristine"
    shutil.copytree(tmp_path / "db", pristine)
    before = files(base)
    before_answers = answers(base)

    def restore() -> None:
        shutil.rmtree(tmp_path / "db")
        shutil.copytree(pristine, tmp_path / "db")

    memory = 1 << 20
    _pydb._testing.fail_io(-1)
    try:
        build(base, memory)
        total = _pydb._testing.io_count()
    finally:
        _pydb._testing.fail_io(0)
    after = files(base)
    assert after[max(k for k in after if k.startswith("seg-"))] == ref_files["seg-00000001.pds"]
    assert not any(name.startswith("build-") for name in after)
    assert total > 20
    failed = recovered = 0
    for n in range(1, total + 1):
        restore()
        _pydb._testing.fail_io(n, errno.ENOSPC)
        try:
            build(base, memory)
        except pydb.DiskError as e:
            assert e.errno == errno.ENOSPC, (n, _pydb._testing.io_fired())
            assert e.filename
            failed += 1
            ok = False
        else:
            ok = True
        finally:
            fired = _pydb._testing.io_fired()
            _pydb._testing.fail_io(0)
        assert fired is not None, n
        got = answers(base)       # opening replays a durable commit
        now = files(base)
        assert not any(name.startswith("build-") for name in now), (n, fired)
        newest = max(k for k in now if k.startswith("seg-"))
        if ok or got != before_answers:
            # the failed operation came after the commit point: the new
            # index, complete
            assert got == ref_answers, (n, fired)
            assert now[newest] == ref_files["seg-00000001.pds"], (n, fired)
            recovered += not ok
        else:
            assert now["MANIFEST"] == before["MANIFEST"], (n, fired)
            assert now["seg-00000001.pds"] == before["seg-00000001.pds"], (n, fired)
    print(f"{total} operations: {failed} failed the build, {recovered} of them after "
          "the commit point")
    assert failed > total // 2


DUP_FST = b"24 4 mhu,v24\n24 4 mhu,v24\n40 0 v40\n69 2 mpl,v69\n"


def test_spilled_build_drops_duplicates_as_in_memory(source, tmp_path):
    """Two rules with one ID make every posting twice: each run drops the
    duplicates of its records, as the in-memory build does."""
    got = {}
    for memory in (1 << 40, 64 << 10, 1):
        base = fresh_copy(source, tmp_path / str(memory))
        _pydb._index_build(str(base), DUP_FST, memory=memory)
        got[memory] = files(base)
    assert got[64 << 10] == got[1 << 40]
    assert got[1] == got[1 << 40]
    ix = _pydb._open_native_index(str(tmp_path / str(1) / "unesb"))
    try:
        postings = ix.postings(b"EN")
    finally:
        ix.close()
    assert len(postings) == len(set(postings)) > 0
