"""Power loss, simulated (docs/reliability.md §2.2 a2): the crash tests'
writer runs on a LazyFS mount, and the power is cut under it.

LazyFS (github.com/dsrhaslab/lazyfs, built by ``tools/build-lazyfs``) is a
FUSE file system that keeps its own page cache: writes stay in it until
they are fsync'ed (or fdatasync'ed), and the command
``lazyfs::clear-cache`` on its fifo drops every byte not synced, as a
power cut drops the OS's page cache.  A kill -9 (tests/test_recovery.py)
leaves the page cache alone; this tier does not.

One cut: the writer (writer_model.writer_loop, forked from this process:
random transactions on a database with a native index, each commit
reported through a pipe -- outside the mount -- after ``commit()``
returned) runs for a random time; LazyFS may be told meanwhile to write
its whole cache to the disk below (``lazyfs::cache-checkpoint``: the OS
writing dirty pages back at a moment of its choosing, so later unsynced
writes of one file are lost while earlier ones of another are kept); the
writer is killed, the cache cleared, LazyFS unmounted and mounted again
(the kernel's own FUSE caches go too), and the database opened, checked
and compared with the acknowledged commits:

- ``sync=True``: no acknowledged commit lost, the commit in flight whole
  or absent, the native index equal to what its FST gives for the
  records, ``check()`` without errors, the ISIS files alone consistent;
- ``sync=False``: the database opens, ``check()`` has no errors and the
  index agrees with the records; the state is some whole prefix of the
  commits (recent ones may be missing: csrc/txn.c, "Commits without
  fsync").  The test counts the damaged cuts, keeps the files of the
  first three and prints why; it requires none.

Under writers of several processes (three forked appenders on one indexed
database, each reporting the MFNs of its acknowledged appends): one
process's fdatasync returns the others through the log's synced mark, and
every acknowledged record must survive every cut (PYDB_POWER_CUTS / 2
cuts).

Besides the random cuts, a cut at every write-side file operation of a
fixed script (writer_model.SCRIPT, ``sync=True``): the writer exits just
before its n-th operation (the crash points of §2.1), for every n, and
the cache is cleared -- so a cut falls just before and just after each
fsync of a commit (the log) and of its checkpoint (the log applied to
the .mst/.xrf, the native index's segments and MANIFEST, the log
emptied).

The tier runs only when selected (it mounts a file system):

    tools/build-lazyfs /path/to/lazyfs-source
    PYDB_TEST_DATA=... PYTHONPATH=. python -m pytest -m lazyfs tests/test_power_loss.py

Environment: ``PYDB_LAZYFS`` (the binary; default
~/.cache/pydb/lazyfs/bin/lazyfs), ``PYDB_POWER_CUTS`` (random cuts per
sync mode, default 100: about a minute each), ``PYDB_LAZYFS_LOG=true``
(LazyFS logs every file operation to its output).  Skipped without the
binary, /dev/fuse or fusermount3.

Limit: LazyFS passes creations, renames and unlinks straight to the file
system below, so they are durable at once; only file *contents* and
sizes are simulated.  A missing fsync of a directory is not found here.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import pydb

from writer_model import (
    SCRIPT,
    Oracle,
    check_files,
    create_indexed,
    decode_ops,
    index_agrees,
    open_db,
    read_reports,
    recovered_state,
    replay_reports,
    run_script,
    script_crashing_at,
    writer_loop,
)

pytestmark = pytest.mark.lazyfs

LAZYFS = Path(os.environ.get("PYDB_LAZYFS",
                             Path.home() / ".cache" / "pydb" / "lazyfs" / "bin" / "lazyfs"))
CUTS = int(os.environ.get("PYDB_POWER_CUTS", "100"))

CONFIG = """\
[faults]
fifo_path="{fifo}"
fifo_path_completed="{done}"
[cache]
apply_eviction=false
[cache.simple]
custom_size="{size}"
blocks_per_page=1
[filesystem]
log_all_operations={logops}
logfile="{log}"
"""


class LazyFS:
    """One LazyFS mount at ``work/mnt`` over the folder ``work/root``,
    controlled through its fifo.  Only this process writes to the fifo."""

    def __init__(self, binary: Path, work: Path, size: str = "256mb"):
        self.binary, self.work = binary, work
        self.mnt, self.root = work / "mnt", work / "root"
        self.fifo, self.done = work / "faults.fifo", work / "done.fifo"
        self.log = work / "lazyfs.log"
        self.config = work / "lazyfs.toml"
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        self.config.write_text(CONFIG.format(fifo=self.fifo, done=self.done, size=size,
                                             log=self.log,
                                             logops=os.environ.get("PYDB_LAZYFS_LOG", "false")))
        self.proc: subprocess.Popen | None = None
        self.done_fd: int | None = None
        self.root_snapshot = work / "after-cut"
        self.reports = b""
        self.mounts = 0

    def mount(self) -> None:
        out = open(self.work / "lazyfs.out", "ab")
        self.proc = subprocess.Popen(
            [str(self.binary), str(self.mnt), "--config-path", str(self.config),
             "-o", "modules=subdir", "-o", f"subdir={self.root}", "-f"],
            stdout=out, stderr=subprocess.STDOUT)
        out.close()
        deadline = time.monotonic() + 30
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"LazyFS did not mount {self.mnt}: {self.output()}")
            time.sleep(0.01)
        # LazyFS's fifo worker opens the completion fifo for writing, and
        # reads no command before a reader has it open: this one, kept
        # for as long as this mount
        self.done_fd = os.open(self.done, os.O_RDONLY | os.O_NONBLOCK)
        self.mounts += 1

    def output(self) -> str:
        """The end of LazyFS's output (all its runs)."""
        return (self.work / "lazyfs.out").read_text(errors="replace")[-3000:]

    def unmount(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], check=True)
        self.stop()

    def stop(self) -> None:
        if self.done_fd is not None:
            os.close(self.done_fd)
            self.done_fd = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def command(self, name: str) -> None:
        """Send ``lazyfs::<name>``.  LazyFS reads its fifo in chunks and
        takes a chunk for one command, so a command must be consumed
        before the next is sent: see checkpoint() and power_cut()."""
        fd = os.open(self.fifo, os.O_WRONLY)
        try:
            os.write(fd, b"lazyfs::%s\n" % name.encode())
        finally:
            os.close(fd)

    def checkpoint(self) -> None:
        """Write every unsynced byte to the file system below (without
        fsync: they survive the next clear-cache), as the OS writes dirty
        pages back; returns when LazyFS has logged that it is done."""
        self.wait_for(b"checkpoint is done.", lambda: self.command("cache-checkpoint"))

    def wait_for(self, line: bytes, send) -> None:
        """Call send(), then wait until LazyFS's output shows `line`."""
        with open(self.work / "lazyfs.out", "rb") as out:
            out.seek(0, os.SEEK_END)
            send()
            deadline, seen = time.monotonic() + 60, b""
            while line not in seen:
                assert time.monotonic() < deadline, f"no {line!r} from LazyFS: {self.output()}"
                chunk = out.read()
                if chunk:
                    seen = seen[-len(line):] + chunk
                else:
                    time.sleep(0.002)

    def power_cut(self) -> None:
        """Drop every unsynced byte, then unmount and mount again."""
        self.command("clear-cache")
        deadline, got = time.monotonic() + 60, b""
        while b"finished::clear-cache" not in got:
            assert time.monotonic() < deadline, \
                f"LazyFS did not confirm the clear-cache: {self.output()}"
            # EOF (b"") until LazyFS has opened its end
            ready, _, _ = select.select([self.done_fd], [], [], 1)
            chunk = os.read(self.done_fd, 100) if ready else b""
            if not chunk:
                time.sleep(0.002)
            got += chunk
        # what the cut left, before anything reads or recovers it
        if self.root_snapshot.exists():
            shutil.rmtree(self.root_snapshot)
        shutil.copytree(self.root, self.root_snapshot)
        self.unmount()
        self.mount()


def lazyfs_missing() -> str:
    """Why this machine cannot run the tier, or ""."""
    if not LAZYFS.is_file():
        return f"no LazyFS binary at {LAZYFS} (tools/build-lazyfs SOURCE; PYDB_LAZYFS)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian's fuse3)"
    return ""


@pytest.fixture
def lazyfs():
    why = lazyfs_missing()
    if why:
        pytest.skip(why)
    # LazyFS takes the argument after --config-path for an option when it
    # contains "-o" anywhere (strcasestr in its main.cpp), as pytest's
    # /tmp/pytest-of-root/... does: its own folder has no "-" in its name
    work = Path(tempfile.mkdtemp(prefix="pydb_lazyfs_"))
    fs = LazyFS(LAZYFS, work)
    try:
        fs.mount()
        yield fs
    finally:
        if fs.proc is not None:
            subprocess.run(["fusermount3", "-u", str(fs.mnt)], check=False)
            fs.stop()
        shutil.rmtree(work, ignore_errors=True)


def assert_sound(db, where: str) -> int:
    """check() finds no error and the native index agrees with the records;
    returns the postings compared."""
    rep = db.check()
    assert rep.ok, f"{where}: check() failed:\n{rep.summary()}"
    return index_agrees(db)


def fork_writer(base: Path, seed: int, ver0: int, sync: bool):
    """Fork writer_model.writer_loop on `base`; returns (pid, read end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            writer_loop(base, w, seed, ver0, sync)
        finally:
            os._exit(3)
    os.close(w)
    return pid, r


def read_for(fd: int, seconds: float) -> bytes:
    """What arrives on `fd` within `seconds`."""
    buf = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    return buf


def random_cuts(lazyfs, sync: bool, cuts: int, seed: int) -> dict:
    """`cuts` power cuts at random moments under writer_model.writer_loop
    (see the module docstring).  With sync=True every cut must keep every
    acknowledged commit and leave a sound database (AssertionError at the
    first that does not).  With sync=False a cut whose database does not
    open, fails check() or holds no prefix of the commits is counted in
    ``damaged`` with its reason (``reasons``) and the database is made
    again, so that the run goes on.  Returns the figures."""
    base = lazyfs.mnt / "cut"

    def fresh():
        remove_db(base)
        with create_indexed(base, "isis-packed", sync=True):
            pass
        lazyfs.power_cut()              # a cut right after the creation
        return Oracle()

    oracle = fresh()
    rnd = random.Random(seed)
    stats: dict = dict(cuts=0, acked=0, lost=0, checkpoints=0, pending_old=0, pending_new=0,
                       damaged=0, records_checked=0, postings_checked=0, reasons=[])
    t0 = time.monotonic()
    for it in range(cuts):
        pid, r = fork_writer(base, seed * 100_000 + it, (it + 1) * 1_000_000, sync)
        buf = b""
        ready, _, _ = select.select([r], [], [], 30.0)   # opened ("R")
        if ready:
            buf += os.read(r, 65536)
        run_for = rnd.uniform(0.005, 0.3)
        if rnd.random() < 0.5:          # the OS writes dirty pages back
            buf += read_for(r, rnd.uniform(0, run_for))
            lazyfs.checkpoint()
            stats["checkpoints"] += 1
        buf += read_for(r, run_for)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"cut {it}: the writer exited by itself: {status}"
        buf += read_reports(r)
        lazyfs.power_cut()
        lazyfs.reports = buf
        stats["cuts"] += 1
        before = oracle.copy()
        acked, pending = replay_reports(buf, oracle)
        stats["acked"] += acked
        where = f"cut {it} (sync={sync})"
        try:
            with pydb.open(base, readonly=False) as db:
                if sync:
                    oracle, inflight = recovered_state(db, oracle, pending, where)
                    if inflight:
                        stats[f"pending_{inflight}"] += 1
                else:
                    # some whole prefix of the commits since the last cut
                    oracle, kept = prefix_state(db, before, buf, where)
                    stats["lost"] += acked - min(kept, acked)
                stats["records_checked"] += db.max_mfn
                stats["postings_checked"] += assert_sound(db, where)
            check_files(base)
        except (pydb.Error, AssertionError) as e:
            if sync:
                kept = keep_evidence(lazyfs, it)
                raise AssertionError(f"{where}: {e} (the files after the cut and the "
                                     f"writer's reports: {kept})") from e
            stats["damaged"] += 1
            kept = keep_evidence(lazyfs, it) if stats["damaged"] <= 3 else "not kept"
            stats["reasons"].append(f"{where}: {str(e).splitlines()[0][:300]} ({kept})")
            oracle = fresh()
    stats["seconds"] = round(time.monotonic() - t0, 1)
    return stats


def keep_evidence(lazyfs, it: int) -> Path:
    """Copy the files below the mount (as the cut left them, before any
    recovery: copied from the lower folder) and the last writer's reports
    to a folder that outlives the test; returns it."""
    keep = Path(tempfile.mkdtemp(prefix=f"pydb_power_cut_{it}_"))
    shutil.copytree(lazyfs.root_snapshot, keep / "files")
    (keep / "reports.txt").write_bytes(lazyfs.reports)
    shutil.copy(lazyfs.work / "lazyfs.out", keep / "lazyfs.out")
    return keep


def test_power_cut_at_random_moments_sync(lazyfs):
    """sync=True: PYDB_POWER_CUTS cuts, no acknowledged commit lost, no
    database damaged."""
    stats = random_cuts(lazyfs, True, CUTS, 2026)
    print("power cuts (sync=True):", stats)
    assert stats["cuts"] == CUTS and stats["acked"] > 0
    assert stats["lost"] == 0 and stats["damaged"] == 0


def test_power_cut_at_random_moments_nosync(lazyfs):
    """sync=False: the database opens, check() passes and it holds a whole
    prefix of the commits after each of PYDB_POWER_CUTS cuts."""
    stats = random_cuts(lazyfs, False, CUTS, 2027)
    print("power cuts (sync=False):", {k: v for k, v in stats.items() if k != "reasons"})
    for why in stats["reasons"]:
        print("  ", why)
    assert stats["cuts"] == CUTS and stats["acked"] > 0
    assert stats["damaged"] == 0, stats["reasons"][:5]


def append_writer(base: Path, w: int, it: int, i: int) -> None:
    """Writer i of cut `it` (a forked process): appends records ("c<it>.w<i>.<k>"
    in field 1) durably, one per commit, and reports "i k mfn" on `w`
    once each append returned."""
    db = pydb.open(base, readonly=False, sync=True)
    os.write(w, b"R\n")
    k = 0
    while True:
        mfn = db.append([(1, f"c{it}.w{i}.{k}"), (2, "x" * (k % 300 + 1))])
        os.write(w, b"%d %d %d\n" % (i, k, mfn))
        k += 1


def test_power_cut_under_writers_of_several_processes(lazyfs):
    """Three writer processes append to one indexed database at once, so
    that one process's fdatasync covers another's frames and returns it
    through the log's synced mark (docs/architecture.md, "One fsync for
    many commits"); the power is cut under them PYDB_POWER_CUTS / 2
    times.  After each cut every record any of them had acknowledged, in
    every cut so far, is there with its content, and the database and its
    index are sound."""
    base = lazyfs.mnt / "multi"
    remove_db(base)
    with create_indexed(base, "isis-packed", sync=True):
        pass
    lazyfs.power_cut()
    rnd = random.Random(2028)
    acked: dict[int, bytes] = {}
    t0 = time.monotonic()
    for it in range(max(CUTS // 2, 1)):
        writers = []
        for i in range(3):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(r)
                    append_writer(base, w, it, i)
                finally:
                    os._exit(3)
            os.close(w)
            writers.append((pid, r))
        for _, r in writers:                # each has opened ("R")
            assert select.select([r], [], [], 30.0)[0], "a writer did not open"
        time.sleep(rnd.uniform(0.05, 0.4))  # (a pipe holds their reports)
        for pid, _ in writers:
            os.kill(pid, signal.SIGKILL)
        bufs = []
        for pid, r in writers:
            os.waitpid(pid, 0)
            bufs.append(read_reports(r))
        lazyfs.power_cut()
        lazyfs.reports = b"".join(bufs)
        for line in lazyfs.reports.split(b"\n"):
            if line.count(b" ") == 2:
                i, k, mfn = map(int, line.split())
                acked[mfn] = b"c%d.w%d.%d" % (it, i, k)
        where = f"cut {it} (3 writers)"
        try:
            with pydb.open(base, readonly=False) as db:
                for mfn, want in acked.items():
                    assert db.max_mfn >= mfn and db[mfn].raw(1) == [want], (
                        f"{where}: acknowledged MFN {mfn} ({want!r}) lost: "
                        f"max_mfn {db.max_mfn}")
                assert_sound(db, where)
            check_files(base)
        except (pydb.Error, AssertionError) as e:
            kept = keep_evidence(lazyfs, it)
            raise AssertionError(f"{e} (the files after the cut and the writers' "
                                 f"reports: {kept})") from e
    print(f"power cuts under 3 writers: {max(CUTS // 2, 1)} cuts, {len(acked)} acknowledged "
          f"records kept, {time.monotonic() - t0:.1f} s")
    assert len(acked) > 0


def prefix_state(db, before: Oracle, buf: bytes, where: str):
    """With sync=False: the reopened `db` must hold the state after some
    whole prefix of the commits reported in `buf` (acknowledged or in
    flight), applied to `before`.  Returns (that state, how many of the
    commits it holds)."""
    txns, pending = [], None
    for line in buf.decode().splitlines():
        if line.startswith("P "):
            pending = line[2:]
        elif line == "C":
            txns.append(pending)
            pending = None
    if pending is not None:
        txns.append(pending)
    state = before.copy()
    tried = [state.matches(db)]
    if tried[-1][0]:
        return state, 0
    for k, ops in enumerate(txns, 1):
        state.apply(decode_ops(ops))
        tried.append(state.matches(db))
        if tried[-1][0]:
            return state, k
    raise AssertionError(f"{where}: the database is no prefix of the commits: "
                         f"{[why for _, why in tried[:3]]} ... {tried[-1][1]}")


def test_power_cut_at_every_operation(lazyfs):
    """A cut just before each write-side file operation of writer_model.SCRIPT
    (sync=True), for n = 1, 2, ... until the script completes: the
    acknowledged transactions are there, the one in flight whole or
    absent, the files sound."""
    from pydb import _pydb

    pristine = lazyfs.mnt / "pristine"
    with create_indexed(pristine, "ffi-aligned", 3, sync=True):
        pass
    sync_db(pristine)
    # which operation the n-th is: a run that fails its n-th operation
    # says its name (the sequence is that of the cuts below, on the mount)
    kinds: list[str] = []
    while True:
        scratch = lazyfs.mnt / "scratch"
        copy_db(pristine, scratch)
        with open_db(scratch) as db:
            _pydb._testing.fail_io(len(kinds) + 1, 5)
            try:
                run_script(db, lambda b: None)
            except pydb.Error:
                pass
            finally:
                fired = _pydb._testing.io_fired()
                _pydb._testing.fail_io(0)
        remove_db(scratch)
        if fired is None:
            break
        kinds.append(fired)
    syncs = [i + 1 for i, k in enumerate(kinds) if k in ("fsync", "fdatasync")]
    assert len(kinds) > 5 * 7 and len(syncs) >= 5
    stats = dict(cuts=0, before_sync=0, after_sync=0, acked=0, pending_old=0, pending_new=0)
    n = 0
    while True:
        n += 1
        base = lazyfs.mnt / f"n{n}"
        copy_db(pristine, base)
        sync_db(base)
        buf, code = script_crashing_at(base, n)
        assert code in (0, 137), (n, code)
        lazyfs.power_cut()
        stats["cuts"] += 1
        stats["before_sync"] += n in syncs
        stats["after_sync"] += n - 1 in syncs
        oracle = Oracle()
        acked, pending = replay_reports(buf, oracle)
        stats["acked"] += acked
        kind = kinds[n - 1] if n <= len(kinds) else "?"
        where = f"cut before operation {n} ({kind if code else 'none: the script completed'})"
        with pydb.open(base, readonly=False) as db:
            _, inflight = recovered_state(db, oracle, pending, where)
            if inflight:
                stats[f"pending_{inflight}"] += 1
            assert_sound(db, where)
        check_files(base)
        remove_db(base)
        if code == 0:               # the script ran to its end: every cut done
            break
    assert acked == len(SCRIPT) and n > len(kinds)
    print(f"power cut at every operation ({len(kinds)} operations, fsyncs at {syncs}):",
          stats)


def copy_db(src: Path, dst: Path) -> None:
    for ext in (".mst", ".xrf", ".wal"):
        shutil.copy(f"{src}{ext}", f"{dst}{ext}")
    if os.path.isdir(f"{src}.pdx"):
        shutil.copytree(f"{src}.pdx", f"{dst}.pdx")


def sync_db(base: Path) -> None:
    """fsync every file of the database at `base` and its folders."""
    paths = [Path(f"{base}{ext}") for ext in (".mst", ".xrf", ".wal")]
    pdx = Path(f"{base}.pdx")
    if pdx.is_dir():
        paths += sorted(pdx.iterdir()) + [pdx]
    paths.append(base.parent)
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_db(base: Path) -> None:
    for p in base.parent.glob(base.name + ".*"):
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
