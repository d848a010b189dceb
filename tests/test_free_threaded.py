"""pydb on a free-threaded CPython (PEP 703; docs/free-threaded.md).

Run by tools/ci-free-threaded on python3.13t; skipped on an interpreter
with a GIL.  The module declares Py_mod_gil = Py_MOD_GIL_NOT_USED, so
importing it leaves the GIL disabled; readers in threads then run in
parallel and read exactly what one thread reads.  The thread tests
themselves (tests/test_threads.py: close() racing with reads, snapshots,
iterators shared between threads) run there too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest

import pydb
from pydb import _pydb

pytestmark = pytest.mark.skipif(not sysconfig.get_config_var("Py_GIL_DISABLED"),
                                reason="not a free-threaded interpreter")


def _child(code: str, **env_extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    env["PYTHONPATH"] = str(Path(pydb.__file__).resolve().parents[1])
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_import_keeps_the_gil_disabled():
    """Without PYTHON_GIL, importing pydb (and every submodule the package
    imports) leaves the GIL off, and says nothing about it."""
    p = _child("import sys, pydb, pydb._pydb; print(sys._is_gil_enabled())")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
    assert "GIL" not in p.stderr


def test_gil_forced_on_still_works(tmp_path):
    """PYTHON_GIL=1 turns the GIL back on; pydb works as on any CPython."""
    p = _child("import sys, pydb\n"
               "from pydb import _pydb\n"
               f"_pydb._build({str(tmp_path / 'g')!r}, 'ffi-aligned', 3, "
               "[[(1, b'x%d' % i)] for i in range(50)], False)\n"
               f"db = pydb.open({str(tmp_path / 'g')!r})\n"
               "print(sys._is_gil_enabled(), len(db), db[50][1][0])", PYTHON_GIL="1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "50", "x49"]


def test_parallel_readers_agree_without_the_gil(tmp_path):
    """8 threads reading every record of a database in different orders,
    with the GIL off, get exactly what one thread gets."""
    records = [[(1, b"mfn %d" % i), (2, bytes(range(i % 256)) * 3)] for i in range(1, 3001)]
    _pydb._build(str(tmp_path / "p"), "ffi-aligned", 3, records, False)
    assert not sys._is_gil_enabled()
    with pydb.open(tmp_path / "p") as db:
        want = {r.mfn: [(f.tag, f.raw) for f in r.fields] for r in db}
        assert len(want) == 3000
        got: list[dict] = [{} for _ in range(8)]
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)

        def read(i):
            try:
                barrier.wait()
                for k in range(3000):
                    m = (k * 7 + i * 375) % 3000 + 1
                    got[i][m] = [(f.tag, f.raw) for f in db[m].fields]
            except BaseException as e:  # noqa: BLE001 - checked below
                errors.append(e)

        threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert all(g == want for g in got)
