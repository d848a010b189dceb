"""The posting buffers a thread keeps between its searches (csrc/index.c,
"posting buffers kept for the thread's next search"): a search's lists
of a frequent word take some hundreds of KiB, which malloc would give
back to the kernel at the search's end and fault in again at the next;
each thread keeps a few (4 MiB at most) and frees them when it ends."""

from __future__ import annotations

import os
import sys
import threading

import pytest

import pydb
from pydb import _pydb
from pydb.search import search

from conftest import build_db

RECORDS = 20_000


@pytest.fixture(scope="module")
def frequent(tmp_path_factory):
    """An index where COMMON and WORD are in every record, adjacent:
    each list 20,000 postings (320,000 bytes as postings)."""
    base = tmp_path_factory.mktemp("bufs") / "b"
    build_db(base, "isis-packed", [[(24, b"common word")]] * RECORDS)
    pydb.build_index(str(base), fst="24 4 v24", progress=False)
    ix = _pydb._open_native_index(str(base))
    yield ix
    ix.close()


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _in_new_thread(fn):
    """fn() in a thread of its own (no buffers kept yet); its value."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


@pytest.mark.sanitize_address
@pytest.mark.sanitize_thread
def test_a_list_gets_the_smallest_kept_buffer_with_room():
    """Each call reserves n postings in a new list, writes them all and
    gives the list back (the room it had is returned): a buffer kept
    from an earlier list is used when it has room for n (the smallest
    such), a small list (under 1,024 postings) and a buffer of more
    than 4 MiB are not kept, and a list grows from 64 postings by
    doubling when none fits.  Under ASan a buffer too small for n would
    also be an overflow, and a kept one is poisoned until it is used."""
    reserve = _pydb._testing.postings_reserve
    sizes = [2048, 100_000, 4096, 50_000, 100_000, 1024, 10, 300_000, 70_000, 2000]
    want = [2048,  # none kept yet: 64 doubled
            131_072,  # the 2048 kept is too small
            131_072, 131_072, 131_072,  # the smallest kept with room: 131,072
            2048,  # 1024: the 2,048 kept
            64,  # small: not from those kept
            524_288,  # 8 MiB: new, and not kept after
            131_072, 2048]
    assert _in_new_thread(lambda: [reserve(n) for n in sizes]) == want


@pytest.mark.sanitize_address
@pytest.mark.sanitize_thread
@pytest.mark.parametrize("n", [2**59, 2**62, 2**63 + 1, 2**64 - 1])
def test_a_list_too_large_to_address_is_refused(n):
    """Room for more postings than half the address space holds (16
    bytes each) is refused with MemoryError before any allocation: the
    doubling of the room from 64 would wrap (2**63 + 1 postings: past
    2**64, an endless loop) or its byte count would (2**62: 2**66 bytes,
    a small buffer the list then overruns)."""
    def refused_then_usable():
        with pytest.raises(MemoryError):
            _pydb._testing.postings_reserve(n)
        return _pydb._testing.postings_reserve(3000)
    # (a thread of its own: no buffer kept yet, so 3,000 gets 64 doubled)
    assert _in_new_thread(refused_then_usable) == 4096


@pytest.mark.sanitize_address
@pytest.mark.sanitize_thread
def test_searches_answer_alike_with_kept_buffers(frequent):
    """The same searches, one after the other in one thread (buffers
    kept) and each in a new thread (none kept yet): the same answers."""
    exprs = ["COMMON", "COMMON $ WORD", "WORD . COMMON", "COMMON * WORD", "COM$",
             "COMMON (F) WORD", "WORD $ COMMON"]
    want = {e: list(search(frequent, e)) for e in exprs}
    assert want["COMMON $ WORD"] == list(range(1, RECORDS + 1))
    assert want["WORD . COMMON"] == list(range(1, RECORDS + 1))
    assert want["WORD $ COMMON"] == list(range(1, RECORDS + 1))
    for _ in range(3):
        for e in exprs:
            assert list(search(frequent, e)) == want[e], e
    got = {}
    threads = [threading.Thread(target=lambda e=e: got.__setitem__(e, list(search(frequent, e))))
               for e in exprs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_thread_frees_its_kept_buffers_when_it_ends(frequent):
    """100 threads one after the other, each keeping about 1.5 MiB of
    buffers from its searches: were they not freed at the thread's end,
    the process would grow by about 150 MiB."""
    def run():
        for e in ("COMMON $ WORD", "COMMON * WORD", "COM$"):
            assert len(search(frequent, e)) == RECORDS

    for _ in range(5):   # the allocator's arenas made and warm first
        t = threading.Thread(target=run)
        t.start()
        t.join()
    before = _rss()
    for _ in range(100):
        t = threading.Thread(target=run)
        t.start()
        t.join()
    grown = _rss() - before
    assert grown < 40 << 20, f"grew by {grown} bytes"
