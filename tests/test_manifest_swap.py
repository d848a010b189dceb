"""The native index's MANIFEST is replaced by swapping names with a spare.

A commit that is synced by a checkpoint (``sync=True`` with the commit
header) or never (``sync=False``) writes its new MANIFEST into the spare
``MANIFEST.pydb-next`` and swaps the two names (renameat2 with
RENAME_EXCHANGE: csrc/util.h, ``pydb__swap_file``), so it creates and
removes no file for it; the spare then holds the MANIFEST before the
commit.  Where the file system cannot swap names the spare is renamed
over the MANIFEST instead.  A reader of another process that opened the
MANIFEST just before a swap may read it while the next commit rewrites
it: the checksum tells, and the reader reads it again
(``pydb__nman_read``).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pydb
from pydb import _pydb

from conftest import manifest_segments
from writer_model import content, create_indexed, index_agrees, open_db

REPO = Path(__file__).resolve().parent.parent


def _names(base) -> tuple[Path, Path]:
    pdx = Path(f"{base}.pdx")
    return pdx / "MANIFEST", pdx / "MANIFEST.pydb-next"


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "nosync"])
def test_commits_swap_the_manifest_with_its_spare(tmp_path, sync):
    """Ten indexed commits: each makes the spare of the commit before the
    MANIFEST (same inode) and leaves the old MANIFEST's bytes in the
    spare; the folder gains no file and loses none (the commits' small
    segments are inline in the MANIFEST)."""
    base = tmp_path / "s"
    with create_indexed(base, "isis-packed", sync=sync, gc="none") as db:
        db.append(content(1, 1, 40))
        db.append(content(2, 1, 40))          # the spare exists from here on
        man, spare = _names(base)
        inodes = {man.stat().st_ino, spare.stat().st_ino}
        for v in range(2, 12):
            before = man.read_bytes()
            ino_spare = spare.stat().st_ino
            files = set(os.listdir(man.parent))
            db.update(1 + v % 2, content(1 + v % 2, v, 40))
            assert man.stat().st_ino == ino_spare, v
            assert spare.read_bytes() == before, v
            assert {man.stat().st_ino, spare.stat().st_ino} == inodes, v
            assert set(os.listdir(man.parent)) == files, v
        assert index_agrees(db) > 0
    with pydb.open(base) as ro:
        assert ro.check().ok
        assert index_agrees(ro) > 0


def _copy(src, dst: Path):
    dst.mkdir()
    for ext in (".mst", ".xrf"):
        shutil.copy(f"{src}{ext}", dst / f"db{ext}")
    shutil.copytree(f"{src}.pdx", dst / "db.pdx")
    return dst / "db"


def _exchange_op(tmp_path, base0) -> int:
    """The 1-based number of the exchange among the counted operations
    of one indexed update (the fault hook counts them: fail_io)."""
    n = 0
    while True:
        n += 1
        base = _copy(base0, tmp_path / f"op{n}")
        with open_db(base, gc="none") as db:
            _pydb._testing.fail_io(n, errno.EIO)
            try:
                db.update(1, content(1, 2, 40))
            except pydb.Error:
                pass
            fired = _pydb._testing.io_fired()
            _pydb._testing.fail_io(0)
        assert fired, "the update made no exchange"
        if fired.split()[0] == "exchange":
            return n


@pytest.fixture
def indexed(tmp_path):
    base0 = tmp_path / "p"
    with create_indexed(base0, "isis-packed", sync=True, gc="none") as db:
        db.append(content(1, 1, 40))
        db.append(content(2, 1, 40))
    return base0


@pytest.mark.parametrize("eno", [errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP])
def test_where_names_cannot_be_swapped_the_spare_is_renamed(tmp_path, indexed, eno):
    """The exchange fails as on a file system without RENAME_EXCHANGE:
    the commit succeeds with the spare renamed over the MANIFEST (no
    spare left), and the next commit makes a new spare."""
    k = _exchange_op(tmp_path, indexed)
    base = _copy(indexed, tmp_path / "db")
    man, spare = _names(base)
    with open_db(base, gc="none") as db:
        _pydb._testing.fail_io(k, eno)
        try:
            db.update(1, content(1, 2, 40))
        finally:
            assert (_pydb._testing.io_fired() or "").startswith("exchange")
            _pydb._testing.fail_io(0)
        assert not spare.exists()
        assert index_agrees(db) > 0
        db.update(2, content(2, 2, 40))
        assert spare.exists()
        assert index_agrees(db) > 0
    with pydb.open(base) as ro:
        assert ro.check().ok
        assert index_agrees(ro) > 0


def test_a_failed_exchange_after_the_commit_point(tmp_path, indexed):
    """The exchange fails with EIO: the log frame is durable, so the
    commit raises with ``committed`` True; the next transaction replays
    the log and the index agrees with the records, as after reopening."""
    k = _exchange_op(tmp_path, indexed)
    base = _copy(indexed, tmp_path / "db")
    with open_db(base, gc="none") as db:
        _pydb._testing.fail_io(k, errno.EIO)
        with pytest.raises(pydb.Error) as exc:
            db.update(1, content(1, 2, 40))
        _pydb._testing.fail_io(0)
        assert exc.value.committed is True
        db.update(2, content(2, 2, 40))
        assert index_agrees(db) > 0
    with pydb.open(base) as ro:
        assert ro.check().ok
        assert index_agrees(ro) > 0


WRITER = """
import sys, pydb
db = pydb.open(sys.argv[1], readonly=False, sync=False, gc="none")
i = 0
while True:
    i += 1
    db.update(1 + i % 50, [(1, "common w%d" % i)])
    if i % 200 == 0:
        print(i, flush=True)
"""


def test_readers_of_other_processes_never_see_a_rewritten_manifest(tmp_path):
    """A process commits as fast as it can (``sync=False``: a swap every
    few hundred microseconds) while this one searches for a few seconds
    (a search after another process's commit reads the MANIFEST whole),
    and opens the index again now and then: nothing fails, every search
    finds the index's word in every record."""
    base = tmp_path / "r"
    with pydb.create(base, "isis-packed", fst="1 4 v1", gc="none") as db:
        with db.transaction() as t:
            for m in range(1, 51):
                t.append([(1, f"common w{m}")])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    w = subprocess.Popen([sys.executable, "-c", WRITER, str(base)], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, text=True)
    failures, searches = [], 0
    try:
        assert w.stdout.readline()          # it commits
        end = time.monotonic() + 4
        while time.monotonic() < end:
            try:
                with pydb.open(base) as db:
                    for _ in range(200):
                        assert len(db.search("COMMON")) == 50
                        searches += 1
            except pydb.Error as e:
                failures.append(str(e))
        assert w.poll() is None
    finally:
        w.kill()
        w.wait()
        w.stdout.close()
    assert failures == []
    assert searches > 1000


def test_inline_segments_stay_within_their_budget(tmp_path):
    """Under policy none (no merges) the commits' segments go inline until
    the inline ones weigh 32 KiB together (NIDX_INLINE_TOTAL); the next
    ones are files.  Nothing is lost either way: a new handle reads every
    segment, and the index agrees with the records."""
    base = tmp_path / "b"
    with create_indexed(base, "isis-packed", sync=True, gc="none") as db:
        for m in range(1, 301):
            db.append(content(m, 1, 30))
        kinds = manifest_segments(f"{base}.pdx")
        inline = [g for k, g in kinds if k == "inline"]
        files = [g for k, g in kinds if k == "file"]
        assert len(kinds) == 301                      # the build's, one per commit
        assert 50 < len(inline) < 300 and len(files) > 1
        held = sum(n for _, _, n in manifest_segments(f"{base}.pdx", sizes=True))
        assert 32768 - 4096 < held <= 32768
        # the files are the newest: once the budget is spent, no inline
        assert max(inline) < min(g for g in files if g > 1)
        assert index_agrees(db) > 0
        db.collect()
        assert len(manifest_segments(f"{base}.pdx")) < 301
    with pydb.open(base) as ro:
        assert index_agrees(ro) > 0
        assert ro.check().ok
