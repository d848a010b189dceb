"""Skip tables of the native index's long posting lists (csrc/nidx_seg.h):
a list of more than 128 postings whose records are sparse in its MFN
range is led by a table that says where each block of 128 postings
starts and which posting ends the block before, so that a search wanting
the postings of a few records passes the blocks that cannot hold them
(search_eval.c restricts each operand of '*', (G), (F) and the proximity
operators to the records of the rarer ones).  Segment format 4 writes
such a list after a form byte, and a dense one as a bitmap
(tests/test_dense_lists.py); format 3, which this pydb reads, wrote
every long list with a table.  The records here are dense, so the tests
of the tables read the segment rewritten in format 3, and a format-4
segment forged with its lists in the table form.

The segment files are compared byte for byte with tests/segment_model.py,
written apart from the C encoder; the answers of searches that pass
blocks with those of an in-memory index of the same postings, which has
no blocks to pass."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import segment_model as sm

import pydb
from pydb import _pydb
from pydb.search import search

from conftest import build_db, manifest_segments

# damaged and forged segments: again under ASan and UBSan
pytestmark = pytest.mark.sanitize_address

RECORDS = 700
#: rare words and the records that hold them, each right after COMMON
#: (adjacent) in the record's first field 24: at the start, around the
#: 128-posting block boundaries of COMMON, in the middle, at the end
RARE = {"alpha": [1, 2], "beta": [64, 65, 66], "gamma": [700], "delta": [350],
        "epsilon": [129, 500]}
#: a record inside block 3 of COMMON (postings 384-511)
ZETA = [200]
#: words in records 1..n, once each: lists of n postings, around the
#: sizes where a list gets a table and a second or third block
SIZES = {"sizea": 128, "sizeb": 129, "sizec": 256, "sized": 257}


def _records():
    out = []
    for mfn in range(1, RECORDS + 1):
        words = ["common"] * (1 + mfn % 3)   # 1-3 postings per record
        words[1:1] = [w for w, mfns in {**RARE, "zeta": ZETA}.items() if mfn in mfns]
        words += [w for w, n in SIZES.items() if mfn <= n]
        fields = [(24, " ".join(words).encode())]
        if mfn % 5 == 0:                     # a second occurrence
            fields.append((24, b"other common"))
        out.append(fields)
    return out


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    base = tmp_path_factory.mktemp("skip") / "s"
    build_db(base, "isis-packed", _records())
    pydb.build_index(str(base), fst="24 4 v24", progress=False)
    ix = _pydb._open_native_index(str(base))
    yield base, ix
    ix.close()


def _segment(base) -> Path:
    (seg,) = Path(f"{base}.pdx").glob("seg-*.pds")
    return seg


def test_long_lists_lead_with_their_skip_tables(indexed):
    """Every list of the built segment (format 4) is what the reference
    writes for its postings, the whole file byte for byte; these long
    lists are dense.  Rewritten in format 3: COMMON's 1,540 postings
    behind a table of 12 entries, some blocks starting inside a record's
    postings; the rare words' lists without one."""
    base, ix = indexed
    built = _segment(base).read_bytes()
    assert sm.read_segment(built).version == 5
    assert sm.write_segment(sm.read_segment(built)) == built
    for k, c, b in sm.read_segment(built).terms:
        assert b == sm.list_bytes([tuple(p) for p in ix.postings(k)]), k
        assert c <= 128 or b[0] == sm.FORM_DENSE, k
    data = sm.as_version(built, 3)
    seg = sm.read_segment(data)
    assert seg.version == 3
    assert sm.write_segment(seg) == data
    terms = {k: (c, b) for k, c, b in seg.terms}
    common = [tuple(p) for p in ix.postings(b"COMMON")]
    assert len(common) == terms[b"COMMON"][0] == 1540
    assert terms[b"COMMON"][1] == sm.list_bytes(common, 3)
    entries = sm.skip_entries(common)
    assert len(entries) == (1540 - 1) // 128 == 12
    assert [e[1] for e in entries] == [common[128 * k - 1] for k in range(1, 13)]
    # a block that begins with a posting of the record the one before is in
    assert any(common[128 * k][0] == common[128 * k - 1][0] for k in range(1, 13))
    for k, c, b in seg.terms:
        postings = [tuple(p) for p in ix.postings(k)]
        assert b == sm.list_bytes(postings, 3), k
        if c <= 128:   # a short list: its postings alone
            assert b == sm.posting_bytes(postings)[0], k
    assert terms[b"ALPHA"][1] == sm.list_bytes([(1, 24, 1, 2), (2, 24, 1, 2)], 3)
    for w, n in SIZES.items():   # tables of 0, 1, 1 and 2 entries
        assert terms[w.upper().encode()][0] == n
        entries = sm.skip_entries([tuple(p) for p in ix.postings(w.upper().encode())])
        assert len(entries) == ((n - 1) // 128 if n > 128 else 0)


EXPRS = [f"COMMON {op} {w.upper()}" for w in RARE
         for op in ("*", "$", ".", "(G)", "(F)", "^")] + [
    "ALPHA + GAMMA * COMMON", "(BETA + EPSILON) $ COMMON", "COMMON $ OTHER",
    "COMMON * OTHER * DELTA", "OTHER (F) COMMON", "COMMON $ $ DELTA"] + [
    f"{w.upper()} {op} {r}" for w in SIZES for op in ("*", "$")
    for r in ("ALPHA", "BETA", "EPSILON", "SIZEA", "COMMON")]


def test_searches_that_pass_blocks_answer_as_the_whole_lists_do(indexed):
    """Each expression gives the records an in-memory index of the same
    postings gives (it reads whole lists): the blocks a restricted read
    passes hold none of the records it wants."""
    base, ix = indexed
    table = {k: [tuple(p) for p in ix.postings(k)] for k, _ in ix.terms(b"")}
    mem = _pydb._memory_index(table)
    for expr in EXPRS:
        assert list(search(ix, expr)) == list(search(mem, expr)), expr
    assert list(search(ix, "COMMON $ GAMMA")) == [700]
    assert list(search(ix, "COMMON $ BETA")) == [64, 65, 66]
    assert list(search(ix, "COMMON * EPSILON")) == [129, 500]
    # DELTA's record begins in COMMON's block 5 and goes on into block 6,
    # whose COMMON is the only one a word from DELTA
    assert [p[0] for p in ix.postings(b"COMMON")[767:769]] == [350, 350]
    assert list(search(ix, "COMMON $ $ DELTA")) == [350]
    assert list(search(ix, "SIZEC * EPSILON")) == [129]


def test_searches_over_several_segments_pass_blocks_too(copy):
    """Records changed after the build (a segment per commit whose
    tombstones kill their postings in the base): searches that pass blocks
    of the base's long lists answer as an in-memory index of the live
    postings does."""
    base = copy[0]
    with pydb.open(base, readonly=False) as db:
        for mfn, value in [(200, b"common zeta"), (64, b"beta"), (350, b"delta common"),
                           (129, b"nothing"), (256, b"sizec common sizea")]:
            with db.transaction() as tx:
                tx.update(mfn, [(24, value)])
    ix = _pydb._open_native_index(str(base))
    try:
        assert len(manifest_segments(f"{base}.pdx")) > 1
        table = {k: [tuple(p) for p in ix.postings(k)] for k, _ in ix.terms(b"")}
        mem = _pydb._memory_index(table)
        for expr in EXPRS:
            assert list(search(ix, expr)) == list(search(mem, expr)), expr
        assert list(search(ix, "COMMON $ DELTA")) == [350]
        assert list(search(ix, "COMMON $ BETA")) == [65, 66]
    finally:
        ix.close()


def _patched(data: bytes, at: int, new: bytes) -> bytes:
    """data with bytes at `at` replaced and the checksum made right."""
    b = bytearray(data)
    b[at:at + len(new)] = new
    struct.pack_into("<Q", b, len(b) - 8, sm.crc32c(bytes(b[:-8])))
    return bytes(b)


@pytest.fixture
def copy(tmp_path):
    """A fresh database like `indexed`'s, its segment file rewritten in
    format 3 (every long list led by its skip table), its bytes, the file
    offset of COMMON's list and COMMON's postings."""
    base = build_db(tmp_path / "c", "isis-packed", _records())
    pydb.build_index(str(base), fst="24 4 v24", progress=False)
    seg = _segment(base)
    data = sm.as_version(seg.read_bytes(), 3)
    seg.write_bytes(data)
    at = sm.HEADER
    for key, count, lst in sm.read_segment(data).terms:
        if key == b"COMMON":
            return base, seg, data, at, sm.decode_list(lst, count, 3)
        at += len(lst)
    raise AssertionError("no COMMON")


def _corruption(base, expr):
    ix = _pydb._open_native_index(str(base))
    try:
        with pytest.raises(pydb.CorruptionError) as ei:
            search(ix, expr) if expr else ix.postings(b"COMMON")
        return ei.value
    finally:
        ix.close()


def _answer(base, expr):
    ix = _pydb._open_native_index(str(base))
    try:
        return list(search(ix, expr))
    finally:
        ix.close()


@pytest.mark.parametrize("block,inside", [(3, "ZETA"), (12, "GAMMA")])
def test_a_passed_block_is_not_read_and_a_read_one_is_checked(copy, block, inside):
    """The first posting of one of COMMON's blocks made a repeat of the
    one before it: searches for the records of the rare words outside the
    block pass it and answer (block 12, the last, which no entry ends, is
    passed once no record after block 11 is wanted); one for a word whose
    record is inside it (by '$', and by '*', which reads the MFNs alone),
    COMMON alone, and reading the whole list, are a CorruptionError naming
    the segment and the posting's offset."""
    base, seg, data, at, common = copy
    lst = sm.list_bytes(common, 3)
    table_len, body = sm.read_varint(lst, 0)
    first = at + body + table_len + sm.skip_entries(common)[block - 1][0]
    held = {p[0] for p in common[128 * block:128 * (block + 1)]}
    words = {**RARE, "zeta": ZETA}
    assert set(words[inside.lower()]) <= held
    assert all(c < 0x80 for c in data[first:first + 4])   # one byte each
    seg.write_bytes(_patched(data, first, b"\0\0\0\0"))
    for w, mfns in words.items():
        if not set(mfns) & held:   # by positions, and by records alone
            assert _answer(base, f"COMMON $ {w.upper()}") == mfns, w
            assert _answer(base, f"COMMON * {w.upper()}") == mfns, w
    # positional, record-level (the decoder's MFNs alone), the whole list
    for expr in (f"COMMON $ {inside}", f"COMMON * {inside}", "COMMON", None):
        e = _corruption(base, expr)
        assert e.filename == str(seg) and e.offset == first + 4
        assert e.reason == "posting out of range or not ascending"


@pytest.mark.parametrize("entry,field,value,reason,word", [
    (3, 0, 0, "skip table entry out of range", "ZETA"),           # offset: 0 bytes
    (3, 1, 0, "skip table entry out of range", "ZETA"),           # MFN: the one before's
    (3, 3, 9, "skip table disagrees with the postings", "ZETA"),  # OCC
    (11, 0, 10**6, "skip table entry out of range", "GAMMA"),     # past the list
])
def test_a_damaged_skip_table_is_corruption(copy, entry, field, value, reason, word):
    """One field of one entry of COMMON's skip table changed (the table
    written again by the reference, the checksum made right): reading the
    list, and a search that reads the block the entry ends, are a
    CorruptionError naming the segment and an offset within the list."""
    base, seg, data, at, common = copy
    entries = sm.skip_entries(common)
    table = bytearray()
    prev_off = prev_mfn = 0
    for k, (off, (m, t, o, c)) in enumerate(entries):
        vals = [off - prev_off, m - prev_mfn, t, o, c]
        if k == entry:
            vals[field] = value
        table += b"".join(sm.varint(v) for v in vals)
        prev_off, prev_mfn = off, m
    old = sm.list_bytes(common, 3)
    new = sm.varint(len(table)) + bytes(table) + sm.posting_bytes(common)[0]
    seg_ = sm.read_segment(data)
    seg_.terms = [(k, c, new if k == b"COMMON" else b) for k, c, b in seg_.terms]
    seg.write_bytes(sm.write_segment(seg_))
    assert len(new) != len(old) or new != old
    # the table is read entry by entry as the blocks go, up to the last
    # block read; an entry's posting is compared with the one the block
    # before it ends with where that block is read: ZETA's record is in
    # block 3, which entry 3 (the table's fourth: block 4's start) ends;
    # GAMMA's in the last block, after entry 11
    for expr in (None, f"COMMON $ {word}"):
        e = _corruption(base, expr)
        assert e.filename == str(seg) and e.reason == reason
        assert at <= e.offset < at + len(new)


def test_a_segment_of_version_2_is_read_and_one_of_version_6_refused(copy):
    """The segment written again without skip tables, as pydb before them
    wrote it (version 2), gives every list and answer as before; version
    6 is refused, naming the versions this pydb reads."""
    base, seg, data, at, common = copy
    before = {expr: _answer(base, expr) for expr in EXPRS}
    old = sm.as_version(data, 2)
    assert len(old) < len(data) and sm.read_segment(old).version == 2
    seg.write_bytes(old)
    ix = _pydb._open_native_index(str(base))
    try:
        assert [tuple(p) for p in ix.postings(b"COMMON")] == common
    finally:
        ix.close()
    assert {expr: _answer(base, expr) for expr in EXPRS} == before
    seg.write_bytes(_patched(data, 8, struct.pack("<I", 6)))
    with pytest.raises(pydb.CorruptionError) as ei:
        _pydb._open_native_index(str(base))
    assert ei.value.filename == str(seg) and ei.value.offset == 8
    assert ei.value.reason == ("index segment format version 6, this pydb reads versions "
                               "2 to 5 (rebuild the index)")


def test_a_version_4_list_in_the_table_form_is_read(copy):
    """A format-4 segment whose long lists are all in the table form (a
    form byte, then the list as format 3 has it: what the writer gives a
    list whose records are sparse) gives every list and answer as the
    format-3 one."""
    base, seg, data, _, common = copy
    before = {expr: _answer(base, expr) for expr in EXPRS}
    s = sm.read_segment(data)
    s.version = 4
    s.terms = [(k, c, sm.list_bytes(sm.decode_list(b, c, 3), 4, sm.FORM_SKIP))
               for k, c, b in s.terms]
    forged = sm.write_segment(s)
    assert [b[0] for k, c, b in sm.read_segment(forged).terms if c > 128] == \
        [sm.FORM_SKIP] * 5   # COMMON, OTHER, SIZEB, SIZEC, SIZED
    seg.write_bytes(forged)
    ix = _pydb._open_native_index(str(base))
    try:
        assert [tuple(p) for p in ix.postings(b"COMMON")] == common
    finally:
        ix.close()
    assert {expr: _answer(base, expr) for expr in EXPRS} == before


def test_a_delta_that_wraps_past_2_64_is_corruption(copy):
    """A posting whose MFN delta (or TAG delta) is a 10-byte varint that
    wraps the sum back into range (5 + 2^64 - 2 = 3) is a CorruptionError,
    not a posting that goes back (what the decoder made of it before)."""
    base, seg, data, _, _ = copy
    v = sm.varint
    for bad in (v(5) + v(24) + v(1) + v(2) + v(2**64 - 2) + v(24) + v(1) + v(2),
                v(5) + v(24) + v(1) + v(2) + v(0) + v(2**64 - 21) + v(1) + v(1)):
        e, _ = _alpha_two_postings_corruption(base, seg, data, bad)
        assert e.reason == "posting out of range or not ascending"


def _alpha_two_postings_corruption(base, seg, data, bad):
    """ALPHA's list replaced by `bad`, two postings: the CorruptionError
    reading it raises (naming the segment), and the segment's bytes."""
    s = sm.read_segment(data)
    s.terms = [(k, 2 if k == b"ALPHA" else c, bad if k == b"ALPHA" else b)
               for k, c, b in s.terms]
    written = sm.write_segment(s)
    seg.write_bytes(written)
    ix = _pydb._open_native_index(str(base))
    try:
        with pytest.raises(pydb.CorruptionError) as ei:
            ix.postings(b"ALPHA")
    finally:
        ix.close()
    assert ei.value.filename == str(seg)
    return ei.value, written


def test_a_one_byte_delta_past_the_largest_mfn_is_corruption(copy):
    """A posting of four one-byte varints (the decoder's fast case) whose
    MFN delta takes the MFN past 2^31 - 1 (2^31 - 10 + 20) is a
    CorruptionError at the end of that posting, not a negative MFN."""
    base, seg, data, _, _ = copy
    v = sm.varint
    bad = v(2**31 - 10) + v(24) + v(1) + v(2) + bytes([20, 24, 1, 2])
    e, written = _alpha_two_postings_corruption(base, seg, data, bad)
    assert e.offset == written.index(bad) + len(bad)
    assert e.reason == "posting out of range or not ascending"
