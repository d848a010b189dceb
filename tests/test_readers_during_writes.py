"""Readers on other handles and in other processes while a writer commits
(docs/design.md §4, §6): a read-only handle opened before the commits sees
updated records (not a pointer "past the end of the file"), sees new MFNs
through ``max_mfn``, and databases opened while another process commits
open cleanly."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import pydb


@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_readonly_handle_sees_updates_of_another_handle(tmp_path, io):
    base = str(tmp_path / "st")
    w = pydb.create(base, "isis-aligned")
    w.append([(1, "seed")])
    r = pydb.open(base, io=io)
    for _ in range(50):                  # grow the master file well past
        w.append([(1, "x" * 3000)])      # the size r saw at open
    w.update(1, [(1, "changed")])
    assert [(f.tag, f.value) for f in r[1].fields] == [(1, "changed")]
    assert r.max_mfn == 51
    assert r[51][1] == ["x" * 3000]
    w.delete(2)
    assert r[2].deleted
    w.close()
    r.close()


WRITER = textwrap.dedent("""
    import random, sys, time, pydb
    db = pydb.open(sys.argv[1], readonly=False, sync=False)
    random.seed(1)
    end = time.time() + float(sys.argv[2])
    n = 0
    while time.time() < end:
        with db.transaction() as tx:
            for _ in range(5):
                tx.append([(1, "v" * random.randrange(1, 300))])
            tx.update(random.randrange(1, db.max_mfn + 1), [(2, "upd")])
        n += 1
    print(n)
""")


def test_opens_and_reads_while_another_process_commits(tmp_path):
    base = str(tmp_path / "cw")
    with pydb.create(base) as db:
        db.append([(1, "x")])
    writer = subprocess.Popen([sys.executable, "-c", WRITER, base, "3"],
                              stdout=subprocess.PIPE, text=True)
    opens = reads = 0
    long_lived = pydb.open(base)
    try:
        while writer.poll() is None:
            for io in ("mmap", "pread"):
                with pydb.open(base, io=io) as db:
                    m = db.max_mfn
                    assert db[m].mfn == m
                    assert db[1].mfn == 1
                    opens += 1
            m = long_lived.max_mfn
            for mfn in (1, m // 2 or 1, m):
                assert long_lived[mfn].mfn == mfn
                reads += 1
    finally:
        long_lived.close()
        commits = int(writer.communicate()[0])
    assert writer.returncode == 0
    assert commits > 0 and opens > 0 and reads > 0
