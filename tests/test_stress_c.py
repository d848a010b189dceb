"""The pure-C stress programs: snapshots (tests/c/stress_snapshot.c) and
group commit (tests/c/group_commit.c).

One writer commits a known schedule of appends, updates, deletions and
undeletions while plain readers and snapshot readers check every record
they read against the state of the commit they must see, and the
validator runs on snapshots (pydb_snapshot_check: no fault, the figures
of the snapshot's commit); the program's header comment gives the
schedule and the checks.  The program is built
with csrc/Makefile (target ``stress-snapshot``) in a temporary copy of the
sources, so the checkout is never touched:

* a plain build, run with the writer in a thread and in a forked process;
* a ThreadSanitizer build (``PYDB_SANITIZE=thread``), run the same way:
  exit status 0 and not one ThreadSanitizer report.  Marked
  ``sanitizers``; skipped without gcc or libtsan.

The garbage collector runs in every run (``--gc``, default ``combined``:
the writing handle's collector thread and the readers' cooperative
steps); in the thread variant a "gc driver" thread also takes statistics,
collects and switches the policy off and on (the thread stopped, joined
and started again) while the others work.

The group commit program (tests/c/group_commit.c, target
``group-commit``) runs the same two ways: threads that commit single
changes through pydb_write_one() on one handle, so that their calls share
transactions, each change read back and checked.

The runs last a few seconds each: they show correctness under
concurrency, not speed (benchmarks/ measure that).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SANITIZER

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="built with csrc/Makefile on Linux")

TSAN_REPORT = ("WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer")


def _build(root: Path, sanitize: str = "", target: str = "stress-snapshot") -> Path:
    """csrc/ and the programs copied under root, `target` built with make."""
    make = shutil.which("make")
    cc = shutil.which("gcc") if sanitize else (shutil.which("cc") or shutil.which("gcc"))
    if not make or not cc:
        pytest.skip("make or a C compiler not found")
    ignore = shutil.ignore_patterns("*.o", "*.a", "*.d", "pydb-crashtest", "stress-snapshot",
                                    "group-commit")
    shutil.copytree(REPO / "csrc", root / "csrc", ignore=ignore)
    (root / "tests" / "c").mkdir(parents=True)
    for name in ("stress_snapshot.c", "group_commit.c"):
        shutil.copy2(REPO / "tests" / "c" / name, root / "tests" / "c")
    env = dict(os.environ, CC=cc)
    env.pop("PYDB_SANITIZE", None)
    env.pop("PYDB_DEBUG", None)
    args = [make, "-s", "-j2", "-C", str(root / "csrc"), target]
    if sanitize:
        args += [f"PYDB_SANITIZE={sanitize}", "PYDB_DEBUG=1"]
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"build failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return root / "csrc" / target


def _run(exe: Path, work: Path, *args: str, env: dict | None = None):
    work.mkdir()
    p = subprocess.run([str(exe), *args, str(work)], capture_output=True, text=True,
                       timeout=300, env=env)
    return p, p.stdout + p.stderr


def _assert_clean(p, out: str):
    assert p.returncode == 0, out[-4000:]
    last = out.strip().splitlines()
    ok = [line for line in last if line.startswith("ok ")]
    assert ok, out[-4000:]
    m = re.match(r"ok plain_reads=(\d+) snapshots=(\d+) snapshot_reads=(\d+) checks=(\d+)$",
                 ok[-1])
    assert m, ok[-1]
    # every reader did work (the validator ran too), and the writer
    # committed beside it
    assert all(int(x) > 0 for x in m.groups()), ok[-1]
    commits = re.search(r"writer commits=(\d+)", out)
    assert commits and int(commits.group(1)) > 0, out[-4000:]
    assert "MISMATCH" not in out
    gc = re.search(r"gc stats=(\d+) collects=(\d+) switches=(\d+)", out)
    if "--fork" not in p.args:
        # the gc driver took statistics, collected and switched policies
        assert gc and all(int(x) > 0 for x in gc.groups()), out[-4000:]


# ------------------------------------------------------------------ plain

@pytest.fixture(scope="module")
def plain_exe(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("stress"))


@pytest.mark.parametrize("io", ["pread", "mmap"])
def test_stress_threads(plain_exe, tmp_path, io):
    p, out = _run(plain_exe, tmp_path / "db", "--seconds", "2", "--io", io)
    _assert_clean(p, out)


@pytest.mark.parametrize("gc", ["none", "background", "cooperative"])
def test_stress_threads_gc_policies(plain_exe, tmp_path, gc):
    p, out = _run(plain_exe, tmp_path / "db", "--seconds", "1", "--gc", gc)
    _assert_clean(p, out)


def test_stress_writer_process(plain_exe, tmp_path):
    p, out = _run(plain_exe, tmp_path / "db", "--seconds", "2", "--fork")
    _assert_clean(p, out)


def test_stress_usage(plain_exe, tmp_path):
    p = subprocess.run([str(plain_exe), "--seconds"], capture_output=True, text=True)
    assert p.returncode == 2 and "usage: stress_snapshot" in p.stderr


# ------------------------------------------------------ group commit

@pytest.fixture(scope="module")
def group_exe(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("group"), target="group-commit")


def _assert_group_clean(p, out: str, records: int):
    assert p.returncode == 0, out[-4000:]
    assert "MISMATCH" not in out
    assert out.strip().splitlines()[-1] == f"ok records={records}", out[-4000:]
    if "--holder" in p.args:
        # groups timed out, and their members went back to the queue
        timeouts = re.search(r"^timeouts=(\d+)$", out, re.M)
        assert timeouts and int(timeouts.group(1)) > 0, out[-4000:]


@pytest.mark.parametrize("args", [(), ("--sync",), ("--holder",)],
                         ids=["nosync", "sync", "holder"])
def test_group_commit_threads(group_exe, tmp_path, args):
    """tests/c/group_commit.c: 8 threads commit appends, updates,
    deletions, undeletions, a failing update and a record the commit hook
    refuses through pydb_write_one on one handle, each checked when read
    back and at the end; with --holder, beside a thread that keeps taking
    the writer lock, with calls that time out and are made again."""
    p, out = _run(group_exe, tmp_path / "db", "--threads", "8", "--each", "150", *args)
    _assert_group_clean(p, out, 1200)


# ------------------------------------------------------------------- TSan

def _tsan_runtime():
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.skip("gcc not found")
    lib = subprocess.run([gcc, "-print-file-name=libtsan.so"], capture_output=True,
                         text=True).stdout.strip()
    if not os.path.isabs(lib) or not os.path.exists(lib):
        pytest.skip("libtsan.so not installed")


@pytest.fixture(scope="module")
def tsan_exe(tmp_path_factory) -> Path:
    if SANITIZER:
        pytest.skip("already inside a sanitizer run")
    _tsan_runtime()
    return _build(tmp_path_factory.mktemp("stress-tsan"), "thread")


@pytest.fixture(scope="module")
def tsan_group_exe(tmp_path_factory) -> Path:
    if SANITIZER:
        pytest.skip("already inside a sanitizer run")
    _tsan_runtime()
    return _build(tmp_path_factory.mktemp("group-tsan"), "thread", "group-commit")


@pytest.mark.sanitizers
@pytest.mark.parametrize("variant", [(), ("--holder",)], ids=["plain", "holder"])
def test_group_commit_tsan(tsan_group_exe, tmp_path, variant):
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1")
    p, out = _run(tsan_group_exe, tmp_path / "db", "--threads", "8", "--each", "60",
                  *variant, env=env)
    reports = [line for line in out.splitlines() if any(r in line for r in TSAN_REPORT)]
    assert not reports, out[-6000:]
    _assert_group_clean(p, out, 480)


@pytest.mark.sanitizers
@pytest.mark.parametrize("variant", [(), ("--fork",)], ids=["writer-thread", "writer-process"])
def test_stress_tsan(tsan_exe, tmp_path, variant):
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1")
    p, out = _run(tsan_exe, tmp_path / "db", "--seconds", "3", *variant, env=env)
    reports = [line for line in out.splitlines() if any(r in line for r in TSAN_REPORT)]
    assert not reports, out[-6000:]
    _assert_clean(p, out)
