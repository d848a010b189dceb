"""The native index's MANIFEST is replaced by swapping names with a spare.

A commit that is synced by a checkpoint (with the commit header, in both
sync modes: the log keeps its frame) writes its new MANIFEST into the
spare ``MANIFEST.pydb-next`` and swaps the two names (renameat2 with
RENAME_EXCHANGE: csrc/util.h, ``pydb__swap_file``), so it creates and
removes no file for it; the spare then holds the MANIFEST before the
commit.  Without the header (files mode) the new MANIFEST is renamed in.
Where the file system cannot swap names the spare is renamed over the
MANIFEST instead.  A reader of another process that opened the
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


@pytest.mark.parametrize("sync", [True, False])
def test_commits_swap_the_manifest_with_its_spare(tmp_path, sync):
    """Ten indexed commits: each makes the spare of the commit before the
    MANIFEST (same inode) and leaves the old MANIFEST's bytes in the
    spare; the folder gains no file and loses none (the commits' small
    segments are inline in the MANIFEST).  sync=False commits keep their
    frames too (csrc/txn.c, "Commits without fsync"): the same."""
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
db = pydb.open(sys.argv[1], readonly=False, sync=True, gc="none")
i = 0
while True:
    i += 1
    db.update(1 + i % 50, [(1, "common w%d" % i)])
    if i % 200 == 0:
        print(i, flush=True)
"""


def test_readers_of_other_processes_never_see_a_rewritten_manifest(tmp_path):
    """A process commits as fast as it can (a swap at each commit, about
    a millisecond apart) while this one searches for a few seconds
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


def _generation(pdx) -> int:
    head = Path(pdx, "MANIFEST").read_bytes().split(b"\n", 2)[1]
    assert head.startswith(b"generation ")
    return int(head.split()[1])


def _reseal(text: bytes) -> bytes:
    body = text[:-13]
    return body + b"end %08x\n" % _pydb._testing.crc32c(body)


WORDS = [f"w{chr(97 + m // 26)}{chr(97 + m % 26)}" for m in range(40)]


def test_a_rebuild_after_damage_goes_above_every_generation(tmp_path):
    """Commits whose segments are inline leave files for few generations.
    The MANIFEST damaged, a rebuild must still take a generation above
    the one in use (the MANIFEST's head, the committed state's), or a
    writer opened before it would take the rebuilt index for an older
    one, keep its own set and name files the rebuild removed."""
    base = tmp_path / "d"
    w = pydb.create(base, "isis-packed", fst="1 4 v1", gc="none")
    try:
        for m in range(30):
            w.append([(1, f"{WORDS[m]} common")])
        pdx = f"{base}.pdx"
        g = _generation(pdx)
        man = Path(pdx, "MANIFEST")
        text = bytearray(man.read_bytes())
        text[len(text) // 2] ^= 0x20                  # the checksum fails
        man.write_bytes(bytes(text))
        with pytest.warns(UserWarning, match="read from its spare MANIFEST.pydb-next"):
            pydb.build_index(base, fst="1 4 v1", progress=False)
        assert _generation(pdx) > g
        w.append([(1, f"{WORDS[30]} common")])        # the writer adopts it
        assert list(w.search("COMMON")) == list(range(1, 32))
        assert [list(w.search(x.upper())) for x in WORDS[:31]] == [[m] for m in range(1, 32)]
    finally:
        w.close()
    with pydb.open(base) as ro:
        assert [list(ro.search(x.upper())) for x in WORDS[:31]] == [[m] for m in range(1, 32)]
        assert ro.check().ok


def test_generations_past_eight_digits(tmp_path, segment_files):
    """Generations are names of at least 8 digits: past 99,999,999 they
    take more, in the MANIFEST's lines and in segment files' names, which
    the collector still recognises (it removes the merged ones)."""
    base = tmp_path / "g"
    with pydb.create(base, "isis-packed", fst="1 4 v1", gc="none") as db:
        db.append([(1, "alpha common")])
    man = Path(f"{base}.pdx", "MANIFEST")
    text = man.read_bytes()
    g = _generation(f"{base}.pdx")
    man.write_bytes(_reseal(text.replace(b"generation %d\n" % g, b"generation 99999998\n", 1)))
    with pydb.open(base, readonly=False, gc="none") as db:
        for m in range(4):                            # 99999999, 100000000, ...
            db.append([(1, f"{WORDS[m]} common")])
        assert _generation(f"{base}.pdx") == 100000002
        files = sorted(os.listdir(man.parent))
        assert "seg-100000002.pds" in files and "seg-99999999.pds" in files, files
        assert list(db.search("COMMON")) == [1, 2, 3, 4, 5]
        db.collect()
        files = [f for f in os.listdir(man.parent) if f.startswith("seg-")]
        assert len(files) == 1 and int(files[0][4:-4]) > 100000002, files
        assert [list(db.search(x.upper())) for x in WORDS[:4]] == [[2], [3], [4], [5]]
    with pydb.open(base) as ro:
        assert list(ro.search("COMMON")) == [1, 2, 3, 4, 5]
        assert ro.check().ok
