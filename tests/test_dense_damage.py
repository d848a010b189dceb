"""Hostile and damaged dense posting lists (csrc/nidx_seg.h, segment
format 4), their checksums made right, as a review of the reader found
them (each broke the reader before it was mended): a bitmap with more
records than the dictionary's count (the MFN path wrote past its
buffer), records with more postings than it (so did the posting reads),
bits for MFNs past 2^31 - 1 (they came back negative), and a directory
entry or a bitmap bit changed where a read restricted to some records
meets it (it answered wrongly, without an error).  Each is now a
CorruptionError naming the segment, an offset and the reason."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import segment_model as sm
from test_dense_lists import _answer, _corruption, _layout, _patched, copy  # noqa: F401

import pydb
from pydb import _pydb
from pydb.search import search

from conftest import build_db

# damaged and forged segments: again under ASan and UBSan
pytestmark = pytest.mark.sanitize_address

TOP = 2**31 - 1
ONES = (1 << 64) - 1


def _forged(tmp_path, terms):
    """A native index whose one segment, of format 4 (dense lists without
    TAG masks, as _dense writes them), holds `terms` [(key, count, list
    bytes)], and the segment's path."""
    base = build_db(tmp_path / "f", "isis-packed", [[(24, b"common")] for _ in range(200)])
    pydb.build_index(str(base), fst="24 4 v24", progress=False)
    (seg,) = Path(f"{base}.pdx").glob("seg-*.pds")
    seg.write_bytes(sm.write_segment(sm.Segment(4, sorted(terms), [])))
    return _pydb._open_native_index(str(base)), seg


def _dense(lo, words, offs, ranks, lens, body) -> bytes:
    """A dense list's bytes (form byte first) from its parts as given."""
    n = len(words)
    return (bytes([sm.FORM_DENSE]) + sm.varint(lo) + sm.varint(n) + sm.varint(len(lens))
            + struct.pack(f"<{n}Q", *words) + struct.pack(f"<{n + 1}I", *offs)
            + struct.pack(f"<{n}I", *ranks) + bytes(lens) + bytes(body))


#: a short list, for chains with a second operand
OTHER = (b"OTHER", 20, sm.list_bytes([(m, 24, 1, 1) for m in range(1, 60, 3)], 4))


def _raises(ix, seg, read):
    with pytest.raises(pydb.CorruptionError) as ei:
        read()
    assert ei.value.filename == str(seg)
    return ei.value


def test_a_bitmap_with_more_records_than_its_count(tmp_path):
    """129 postings, but nine all-ones words (577 bits) before the last:
    a record-level search (MFNs from the bits) and a chain are a
    CorruptionError at the first word whose rank disagrees."""
    body = bytes([24, 1, 1]) * 129
    lst = _dense(1, [ONES] * 9 + [1], [0] * 10 + [len(body)], [0] * 9 + [128], [3] * 129,
                 body)
    ix, seg = _forged(tmp_path, [(b"X", 129, lst), OTHER])
    try:
        for read in (lambda: search(ix, "X"), lambda: search(ix, "X * OTHER"),
                     lambda: search(ix, "OTHER $ X")):
            e = _raises(ix, seg, read)
            assert e.reason == "dense list's directory disagrees with its bitmap"
        e = _raises(ix, seg, lambda: ix.postings(b"X"))
        assert e.reason == "dense list's record out of range"
    finally:
        ix.close()


def test_records_with_more_postings_than_the_count(tmp_path):
    """129 records of 100 postings each (12,900) under a count of 129: the
    whole read and a restricted one stop at the 130th posting."""
    rec = sm.record_bytes([(0, 24, 1, c) for c in range(1, 101)])
    one = sm.varint(len(rec)) + rec
    body = one * 129
    lst = _dense(1, [ONES, ONES, 1], [0, 64 * len(one), 128 * len(one), len(body)],
                 [0, 64, 128], [255] * 129, body)
    ix, seg = _forged(tmp_path, [(b"X", 129, lst), OTHER])
    try:
        for read in (lambda: ix.postings(b"X"), lambda: search(ix, "OTHER $ X")):
            e = _raises(ix, seg, read)
            assert e.reason == "posting out of range or not ascending"
    finally:
        ix.close()


def test_bits_for_mfns_past_the_largest_are_corruption(tmp_path):
    """A last word with bits for MFNs past 2^31 - 1 (its range may pass it
    by up to 63): a CorruptionError on any read, not negative MFNs."""
    rec = bytes([24, 1, 1, 0, 0, 1, 0, 0, 1])   # 3 postings
    lst = _dense(TOP - 10, [ONES], [0, 64 * len(rec)], [0], [len(rec)] * 64, rec * 64)
    ix, seg = _forged(tmp_path, [(b"X", 192, lst)])
    try:
        for read in (lambda: ix.postings(b"X"), lambda: search(ix, "X")):
            e = _raises(ix, seg, read)
            assert e.reason == "dense list's MFN range out of range"
    finally:
        ix.close()


def test_a_list_at_the_top_of_the_mfn_range_is_read(tmp_path):
    """Records up to 2^31 - 1 itself, written by the reference: read whole
    and searched as they are."""
    postings = [(m, 24, 1, 1) for m in range(TOP - 199, TOP + 1)]
    ix, seg = _forged(tmp_path, [(b"X", 200, sm.list_bytes(postings, 4))])
    try:
        assert sm.list_bytes(postings, 4)[0] == sm.FORM_DENSE
        assert [tuple(p) for p in ix.postings(b"X")] == postings
        assert list(search(ix, "X")) == [p[0] for p in postings]
    finally:
        ix.close()


@pytest.mark.parametrize("part,k,delta,expr,reason,where", [
    # word 2's records said to start a byte later: word 1's end there
    ("offs", 2, +1, "COMMON $ RARE", "dense list's records disagree with its directory",
     "end of word 1"),
    # word 2's rank one more: word 1's records one more than its bits
    ("ranks", 2, +1, "COMMON . SPARSE", "dense list's directory disagrees with its bitmap",
     "ranks 1"),
    ("ranks", 35, -1, "SPARSE $ COMMON", "dense list's directory disagrees with its bitmap",
     "ranks 34"),
])
def test_directory_damage_in_a_restricted_read(copy, part, k, delta, expr, reason,  # noqa: F811
                                               where):
    """A directory entry of COMMON changed: a read restricted to some
    records that meets the word is a CorruptionError (before the review,
    wrong answers)."""
    base, seg, data, at, lst, _ = copy
    lay = _layout(lst)
    off = lay[part] + 4 * k
    (v,) = struct.unpack_from("<I", lst, off)
    seg.write_bytes(_patched(data, at + off, struct.pack("<I", v + delta)))
    e = _corruption(base, expr)
    assert e.filename == str(seg) and e.reason == reason
    if where == "end of word 1":
        assert e.offset == at + lay["recs"] + v
    else:
        assert e.offset == at + lay["ranks"] + 4 * int(where.split()[1])


@pytest.mark.parametrize("expr", ["COMMON * RARE", "COMMON $ RARE"])
def test_a_lost_bit_of_a_middle_word(copy, expr):  # noqa: F811
    """MFN 1000's bit of COMMON cleared (word 15): its word's rank no
    longer follows, which every read of the word compares, wanted records
    or not."""
    base, seg, data, at, lst, _ = copy
    lay = _layout(lst)
    assert 1000 in _answer(base, expr)
    d = 1000 - lay["lo"]
    off = lay["words"] + 8 * (d >> 6)
    (w,) = struct.unpack_from("<Q", lst, off)
    seg.write_bytes(_patched(data, at + off, struct.pack("<Q", w & ~(1 << (d & 63)))))
    e = _corruption(base, expr)
    assert (e.filename, e.reason) == (str(seg), "dense list's directory disagrees with its bitmap")
    assert e.offset == at + lay["ranks"] + 4 * (d >> 6)


def test_words_passed_by_a_restricted_read_hide_no_records(tmp_path):
    """A restricted read passes the words where no record is wanted; the
    ranks of the words it reads must still rise, so that their bits hold
    no more records than the list (review of 083ad7b: a directory of
    ranks 0, 64, 0, 64, ... let BIG's words, read every other one, give
    more MFNs than the dictionary's count, written past their buffer)."""
    a = [(m, 24, 1, 1) for m in range(1, 641) if ((m - 1) >> 6) % 2 == 0]
    big = _dense(1, [ONES] * 10, [0] * 11, [0, 64] * 5, [3] * 128, b"")
    ix, seg = _forged(tmp_path, [(b"A", len(a), sm.list_bytes(a, 4)), (b"BIG", 129, big)])
    try:
        e = _raises(ix, seg, lambda: search(ix, "A ^ BIG"))
        assert e.reason == "dense list's directory disagrees with its bitmap"
    finally:
        ix.close()
