"""Run the marked tests against sanitizer builds.

The extension is rebuilt with ``PYDB_SANITIZE=address`` (ASan + UBSan, see
setup.py) from a copy of the sources in a temporary folder -- the checkout
is never touched -- and the tests marked ``sanitize_address`` (the
hostile-file and thread tests and those of the other C readers) run there
with ``pytest -m sanitize_address`` in a child Python with the ASan runtime
preloaded.  A ThreadSanitizer build (``PYDB_SANITIZE=thread``) runs the
tests marked ``sanitize_thread`` the same way.  To put a test into a run,
mark it (tests/conftest.py lists the markers); there is no list of names
here.  The child runs get PYDB_SANITIZER_INNER, so they neither recurse
into this file nor rerun the crash reproductions (marked ``crash_repro``,
which crash on purpose).

This module is marked ``sanitizers``: ``pytest -m "not sanitizers"`` leaves
it out.  Skipped when gcc or its sanitizer runtimes are missing.  No TSan
suppressions are needed: only pydb is instrumented (CPython is not), and
the runs report nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import DATA, REPO, SANITIZER

pytestmark = [
    pytest.mark.sanitizers,
    pytest.mark.skipif(bool(SANITIZER), reason="already inside a sanitizer run"),
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="sanitizer runs are set up for Linux/gcc"),
]

MARKER = {"address": "sanitize_address", "thread": "sanitize_thread"}
RUNTIME = {"address": "libasan.so", "thread": "libtsan.so"}
REPORT = {
    "address": ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"),
    "thread": ("WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer"),
}


def _runtime(kind: str) -> str:
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.skip("gcc not found")
    lib = subprocess.run([gcc, f"-print-file-name={RUNTIME[kind]}"], capture_output=True,
                         text=True).stdout.strip()
    if not os.path.isabs(lib) or not os.path.exists(lib):
        pytest.skip(f"{RUNTIME[kind]} not installed")
    return os.path.realpath(lib)


def _copy_sources(dst: Path):
    """The files setup.py needs, plus the tests (selected by marker there),
    the fuzz/ generators test_fuzz.py imports and the tools/ scripts
    test_key_modes.py imports."""
    ignore = shutil.ignore_patterns("*.so", "*.o", "*.a", "pydb-crashtest",
                                    "__pycache__", "*.egg-info")
    dst.mkdir(parents=True)
    for name in ("setup.py", "pyproject.toml", "README.rst", "MANIFEST.in"):
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, dst / name)
    shutil.copytree(REPO / "csrc", dst / "csrc", ignore=ignore)
    shutil.copytree(REPO / "pydb", dst / "pydb", ignore=ignore)
    shutil.copytree(REPO / "benchmarks", dst / "benchmarks", ignore=ignore)
    shutil.copytree(REPO / "tests", dst / "tests", ignore=ignore)
    # tests/test_fuzz.py imports its generators from fuzz/
    shutil.copytree(REPO / "fuzz", dst / "fuzz", ignore=ignore)
    # tests/test_key_modes.py imports tools/cisis_keys.py
    shutil.copytree(REPO / "tools", dst / "tools", ignore=ignore)


class Build:
    def __init__(self, kind: str, root: Path):
        self.kind = kind
        self.runtime = _runtime(kind)
        self.src = root / "src"
        _copy_sources(self.src)
        env = dict(os.environ, PYDB_SANITIZE=kind)
        env["PYDB_DEBUG"] = "1"   # PYDB_ASSERT checks run under the sanitizers
        p = subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--force",
             "-j", "2", "--build-temp", str(root / "build-temp"),
             "--build-lib", str(root / "build-lib")],
            cwd=self.src, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"{kind} build failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        sos = list((self.src / "pydb").glob("_pydb*.so"))
        assert len(sos) == 1, sos
        self.so = sos[0]

    def env(self, **extra) -> dict:
        env = dict(os.environ)
        for k in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "COV_CORE_SOURCE"):
            env.pop(k, None)
        env.update(
            LD_PRELOAD=self.runtime,
            PYTHONMALLOC="malloc",
            PYTHONPATH=str(self.src),
            PYTHONDONTWRITEBYTECODE="1",
            PYDB_SANITIZER_INNER=self.kind,
            PYDB_TEST_DATA=str(DATA),
            PYDB_HYPOTHESIS_EXAMPLES="60",
            ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1",
            UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
            TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1" + (
                f":suppressions={self.src / 'tests' / 'tsan.supp'}"
                if (self.src / "tests" / "tsan.supp").is_file() else ""),
        )
        env.update(extra)
        return env

    def python(self, code: str, timeout=120, **extra):
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=self.src,
                              env=self.env(**extra), capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture(scope="module")
def asan(tmp_path_factory) -> Build:
    return Build("address", tmp_path_factory.mktemp("asan"))


@pytest.fixture(scope="module")
def tsan(tmp_path_factory) -> Build:
    return Build("thread", tmp_path_factory.mktemp("tsan"))


def _links(so: Path, lib: str) -> bool:
    """Does the built module link the sanitizer runtime (ldd), or at least
    reference its entry points (nm)?"""
    if shutil.which("ldd"):
        out = subprocess.run(["ldd", str(so)], capture_output=True, text=True).stdout
        if lib in out:
            return True
    if shutil.which("nm"):
        out = subprocess.run(["nm", "-D", "--undefined-only", str(so)],
                             capture_output=True, text=True).stdout
        return ("__asan_init" if lib == "libasan" else "__tsan_init") in out
    return False


def _check_runtime_active(build: Build, lib: str):
    p = build.python(f"""
        import pydb, pydb._pydb as m
        maps = open("/proc/self/maps").read()
        print("MODULE", m.__file__)
        print("RUNTIME", {lib!r} in maps)
    """)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"MODULE {build.so}" in p.stdout, p.stdout     # the sanitizer build
    assert "RUNTIME True" in p.stdout, p.stdout


def _run_inner(build: Build, timeout=600):
    # The sanitizer writes its reports to files too: pytest captures the
    # output of tests that pass, so a report made during one would show
    # only as the exit status (TSan's 66) without them.
    logs = build.src / f"{build.kind}-reports"
    for old in build.src.glob(f"{build.kind}-reports*"):
        old.unlink()
    env = build.env()
    for key in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
        env[key] = f"{env[key]}:log_path={logs}"
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         "-m", MARKER[build.kind], "tests"],
        cwd=build.src, env=env, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    for f in sorted(build.src.glob(f"{build.kind}-reports*")):
        out += f"\n--- {f.name}\n" + f.read_text(errors="replace")
    reports = [line for line in out.splitlines()
               if any(r in line for r in REPORT[build.kind])]
    assert p.returncode == 0 and not reports, (
        f"{build.kind} run failed (rc {p.returncode}); reports: {reports[:5]}\n"
        f"{out[-12000:]}")
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary), summary
    return summary


# -------------------------------------------------------------- ASan/UBSan

def test_asan_build_is_instrumented(asan):
    assert _links(asan.so, "libasan"), f"{asan.so} does not link libasan"
    _check_runtime_active(asan, "libasan")
    # The preloaded runtime really checks memory in the child: a heap
    # overflow through libc's memmove (intercepted by ASan) is reported.
    p = asan.python("""
        import ctypes
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        p = libc.malloc(16)
        ctypes.memmove(p, b"x" * 64, 64)
    """)
    assert p.returncode != 0 and "heap-buffer-overflow" in p.stderr, p.stderr[-2000:]


def test_asan_hostile_and_threads(asan):
    _run_inner(asan)


# --------------------------------------------------------------------- TSan

def test_tsan_build_is_instrumented(tsan):
    assert _links(tsan.so, "libtsan"), f"{tsan.so} does not link libtsan"
    _check_runtime_active(tsan, "libtsan")


def test_tsan_threads(tsan):
    _run_inner(tsan)
