"""Dense posting lists of the native index (csrc/nidx_seg.h, segment
format 4): a list of more than 128 postings whose records are dense in its
MFN range (at most 16 MFNs of the range per record) is written as a bitmap
of its records, a directory per 64 MFNs, each record's length and the
records' postings.  A record-level search takes the MFNs from the bits
without reading the records; a search restricted to some records ANDs
the bitmap with them a word at a time and reads only their records.

The segment files are compared byte for byte with tests/segment_model.py,
written apart from the C encoder; the answers of searches with those of
an in-memory index of the same postings; damaged lists, forged with the
model, give a CorruptionError naming the segment, the offset and the
reason wherever a read meets the damage."""

from __future__ import annotations

import struct

import pytest
import segment_model as sm
from test_skip_tables import _answer, _corruption, _patched, _segment

import pydb
from pydb import _pydb
from pydb.search import search

from conftest import build_db, manifest_segments

# damaged and forged segments: again under ASan and UBSan
pytestmark = pytest.mark.sanitize_address

RECORDS = 2700
#: LONG's records with many postings: 120 and 90 of them, 360 and 270
#: bytes (a record of 255 bytes or more: length byte 255, then a varint)
LONG_MANY = {77: 120, 150: 90}


def _words(mfn: int) -> list[str]:
    """The words of record mfn's field 24, in order."""
    words = ["common"] * (1 + mfn % 3)          # dense: every record, 1-3 times
    if mfn % 2 == 0:
        words.append("half")                    # dense: every other record
    if mfn % 20 == 0:
        words.append("sparse")                  # 135 records over 2,680 MFNs
    if mfn <= 200:
        words += ["long"] * LONG_MANY.get(mfn, 1)
    if mfn in (5, 64, 65, 128, 129, 1000, 2699):
        words.insert(1, "rare")                 # right after COMMON
    return words


def _records():
    out = []
    for mfn in range(1, RECORDS + 1):
        fields = [(24, " ".join(_words(mfn)).encode())]
        if mfn % 7 == 0:                        # a second occurrence
            fields.append((24, b"half common"))
        out.append(fields)
    return out


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    base = tmp_path_factory.mktemp("dense") / "d"
    build_db(base, "isis-packed", _records())
    pydb.build_index(str(base), fst="24 4 v24", progress=False)
    ix = _pydb._open_native_index(str(base))
    yield base, ix
    ix.close()


def test_dense_lists_are_the_references_bytes(indexed):
    """The built segment is the reference's, byte for byte: COMMON, HALF
    and LONG (with its two long records) dense, SPARSE in the table
    form, the short lists as ever."""
    base, ix = indexed
    data = _segment(base).read_bytes()
    seg = sm.read_segment(data)
    assert seg.version == 5 and sm.write_segment(seg) == data
    forms = {}
    for k, c, b in seg.terms:
        postings = [tuple(p) for p in ix.postings(k)]
        assert len(postings) == c and b == sm.list_bytes(postings), k
        assert sm.decode_list(b, c, 5) == postings, k
        forms[k] = b[0] if c > 128 else None
    assert forms == {b"COMMON": sm.FORM_DENSE, b"HALF": sm.FORM_DENSE,
                     b"LONG": sm.FORM_DENSE, b"SPARSE": sm.FORM_SKIP, b"RARE": None}
    long_ = [tuple(p) for p in ix.postings(b"LONG")]
    assert len(long_) == 200 - 2 + 120 + 90
    assert [p for p in long_ if p[0] == 77] == [(77, 24, 1, n) for n in range(2 + 77 % 3,
                                                                             122 + 77 % 3)]
    lens = _layout(sm.list_bytes(long_))["lens"]
    assert lens[76] == lens[149] == 255 and set(lens) == {3, 255}


EXPRS = [f"{a} {op} {b}" for a, b in [("COMMON", "RARE"), ("HALF", "COMMON"),
                                       ("LONG", "COMMON"), ("SPARSE", "HALF"),
                                       ("LONG", "HALF"), ("COMMON", "LONG")]
         for op in ("*", "$", ".", ". .", "(G)", "(F)", "^", "+")] + [
    "COMMON", "HALF", "LONG", "SPARSE", "COMMON $ RARE $ HALF", "(COMMON + LONG) $ RARE",
    "COMMON * HALF * SPARSE", "LONG $ LONG", "HAL$ * SPARSE", "COMMON/(24) * RARE",
    "HALF (F) COMMON (F) SPARSE",
    # chains of '+' mixing terms (bits or MFNs) with other operands
    "COMMON + HAL$", "SPARSE + (RARE * HALF)", "RARE + SPARSE + LONG + COMMON",
    "COMMON/(24) + RARE", "(COMMON $ RARE) + SPARSE + RARE", "HALF * (SPARSE + RARE)"]


def _same_answers(ix, exprs=EXPRS):
    table = {k: [tuple(p) for p in ix.postings(k)] for k, _ in ix.terms(b"")}
    mem = _pydb._memory_index(table)
    for expr in exprs:
        assert list(search(ix, expr)) == list(search(mem, expr)), expr


def test_searches_over_dense_lists_answer_as_the_whole_lists_do(indexed):
    """Each expression gives the records an in-memory index of the same
    postings gives; some answers spelled out."""
    base, ix = indexed
    _same_answers(ix)
    assert list(search(ix, "COMMON $ RARE")) == [5, 64, 65, 128, 129, 1000, 2699]
    assert list(search(ix, "LONG $ RARE")) == [129]   # the others: COMMON between
    assert list(search(ix, "SPARSE * HALF")) == list(range(20, RECORDS + 1, 20))
    assert len(search(ix, "HALF")) == RECORDS // 2 + len([m for m in range(1, RECORDS + 1)
                                                         if m % 7 == 0 and m % 2])


def test_dense_lists_under_newer_segments(tmp_path):
    """Records changed after the build (a segment per commit, whose
    tombstones kill their postings in the base's dense lists, also inside
    a long record): searches answer as an in-memory index of the live
    postings does."""
    base = build_db(tmp_path / "d", "isis-packed", _records())
    pydb.build_index(str(base), fst="24 4 v24", progress=False)
    with pydb.open(base, readonly=False) as db:
        for mfn, value in [(77, b"rare common"), (64, b"half"), (1000, b"long common rare"),
                           (150, b"nothing"), (2, b"sparse half common")]:
            with db.transaction() as tx:
                tx.update(mfn, [(24, value)])
    ix = _pydb._open_native_index(str(base))
    try:
        assert len(manifest_segments(f"{base}.pdx")) > 1
        _same_answers(ix)
        assert list(search(ix, "COMMON $ RARE")) == [5, 65, 77, 128, 129, 1000, 2699]
        assert 77 not in list(search(ix, "LONG")) and 1000 in list(search(ix, "LONG"))
    finally:
        ix.close()


def test_an_or_over_a_range_too_wide_for_one_bitmap(tmp_path):
    """A word of one record 70,000 MFNs on beside dense lists: a chain of
    '+' whose union would be a bitmap too sparse takes the dense lists'
    records as MFNs instead (search_eval.c, mset_or), and a '*' chain's
    rarest operand too sparse for bits combines as MFNs (mset_eval)."""
    far = 70_000
    records = _records() + [None] * (far - RECORDS - 1) + [[(24, b"far rare common")]]
    base = build_db(tmp_path / "w", "isis-packed", records)
    pydb.build_index(str(base), fst="24 4 v24", progress=False)
    ix = _pydb._open_native_index(str(base))
    try:
        _same_answers(ix, ["COMMON + FAR", "FAR + HALF + SPARSE", "RARE + FAR",
                           "(COMMON * FAR) + HALF", "FAR * COMMON", "RARE * COMMON"])
        assert list(search(ix, "FAR + SPARSE"))[-2:] == [RECORDS, far]
        assert len(search(ix, "FAR + COMMON")) == RECORDS + 1
        assert list(search(ix, "RARE * COMMON")) == [5, 64, 65, 128, 129, 1000, 2699, far]
    finally:
        ix.close()


# ---- TAG masks (format 5) ----------------------------------------------

TAGGED = 2000
TAG_FST = "24 4 v24\n26 4 v26\n70 4 v70"


def _tagged_records():
    """ALPHA in every title (24) and in field 26 of every seventh record;
    BETA after ALPHA in every fifth title and in field 70 of every even
    record; DELTA in every field 70, GAMMA in the other titles.  So
    ALPHA and BETA share most records but a TAG only in every fifth."""
    out = []
    for m in range(1, TAGGED + 1):
        fields = [(24, b"alpha beta" if m % 5 == 0 else b"alpha gamma")]
        if m % 7 == 0:
            fields.append((26, b"alpha"))
        fields.append((70, b"beta delta" if m % 2 == 0 else b"delta"))
        out.append(fields)
    return out


TAG_EXPRS = ["ALPHA $ BETA", "ALPHA . BETA", "ALPHA (G) BETA", "ALPHA (F) BETA",
             "ALPHA (G) DELTA", "BETA (G) DELTA", "BETA $ DELTA", "ALPHA $ BETA $ GAMMA",
             "ALPHA (G) BETA (G) DELTA", "ALPHA/(24) $ BETA", "ALPHA/(26) (G) BETA",
             "ALPHA . . BETA . DELTA", "(ALPHA + DELTA) $ BETA", "ALPHA * BETA",
             "GAMMA (G) ALPHA (G) BETA"]


@pytest.fixture
def tagged(tmp_path):
    base = build_db(tmp_path / "t", "isis-packed", _tagged_records())
    pydb.build_index(str(base), fst=TAG_FST, progress=False)
    return base


def test_tag_masks_are_the_references_bytes_and_answer_as_the_lists_do(tagged):
    """The built segment (format 5) is the reference's byte for byte, a
    dense list's TAG masks included; chains of (G), (F) and proximity,
    which pass the records whose terms' masks share no bit, answer as an
    in-memory index of the same postings."""
    data = _segment(tagged).read_bytes()
    seg = sm.read_segment(data)
    assert seg.version == 5 and sm.write_segment(seg) == data
    terms = {k: (c, b) for k, c, b in seg.terms}
    assert {k for k, (c, b) in terms.items() if c > 128 and b[0] == sm.FORM_DENSE} == \
        {b"ALPHA", b"BETA", b"DELTA", b"GAMMA"}
    lay = _layout(terms[b"ALPHA"][1])
    masks = terms[b"ALPHA"][1][lay["masks"]:lay["recs"]]
    assert masks[6] == 1 << sm.tag_bit(24) | 1 << sm.tag_bit(26)   # MFN 7
    assert masks[0] == 1 << sm.tag_bit(24) == 0x40
    ix = _pydb._open_native_index(str(tagged))
    try:
        _same_answers(ix, TAG_EXPRS)
        assert list(search(ix, "ALPHA $ BETA")) == list(range(5, TAGGED + 1, 5))
        assert list(search(ix, "ALPHA (G) DELTA")) == []
        assert len(search(ix, "ALPHA * BETA")) == TAGGED // 2 + TAGGED // 10
    finally:
        ix.close()


def test_tag_masks_under_newer_segments_and_in_format_4(tagged):
    """Records changed after the build (newer segments, their tombstones
    killing the base's postings) and the base rewritten in format 4 (no
    masks: nothing passed by them) answer as the lists do."""
    with pydb.open(tagged, readonly=False) as db:
        for mfn, fields in [(3, [(24, b"alpha beta")]), (10, [(70, b"delta")]),
                            (14, [(24, b"gamma"), (70, b"alpha beta")])]:
            with db.transaction() as tx:
                tx.update(mfn, fields)
    ix = _pydb._open_native_index(str(tagged))
    try:
        assert len(manifest_segments(f"{tagged}.pdx")) > 1
        _same_answers(ix, TAG_EXPRS)
        got = list(search(ix, "ALPHA $ BETA"))
        assert got[:4] == [3, 5, 14, 15] and 10 not in got
    finally:
        ix.close()
    base = build_db(tagged.parent / "v4", "isis-packed", _tagged_records())
    pydb.build_index(str(base), fst=TAG_FST, progress=False)
    seg = _segment(base)
    seg.write_bytes(sm.as_version(seg.read_bytes(), 4))
    ix = _pydb._open_native_index(str(base))
    try:
        _same_answers(ix, TAG_EXPRS)
    finally:
        ix.close()


def _alpha(base):
    """The segment of base, its bytes, the file offset of ALPHA's list
    and the list's bytes."""
    seg = _segment(base)
    data = seg.read_bytes()
    at = sm.HEADER
    for key, _, lst in sm.read_segment(data).terms:
        if key == b"ALPHA":
            return seg, data, at, lst
        at += len(lst)
    raise AssertionError("no ALPHA")


def test_a_chain_passes_records_by_their_masks(tagged):
    """The masks are consulted: record 5's ALPHA mask cleared (the
    checksum made right, as a forger would) drops it from ALPHA $ BETA
    unread, and masks with every bit set change no answer.  (A mask is
    data, as a posting's TAG is: only the checksum can tell it is
    wrong.)"""
    seg, data, at, lst = _alpha(tagged)
    lay = _layout(lst)
    before = {e: _answer(tagged, e) for e in TAG_EXPRS}
    seg.write_bytes(_patched(data, at + lay["masks"] + 4, b"\0"))
    assert _answer(tagged, "ALPHA $ BETA")[:2] == [10, 15]
    seg.write_bytes(_patched(data, at + lay["masks"], b"\xff" * (lay["recs"] - lay["masks"])))
    assert {e: _answer(tagged, e) for e in TAG_EXPRS} == before


def test_a_lost_bit_under_tag_masks(tagged):
    """MFN 1000's bit of ALPHA cleared: a chain that reads ALPHA's bits
    and masks meets the word and raises, as every read of it does."""
    seg, data, at, lst = _alpha(tagged)
    lay = _layout(lst)
    d = 1000 - lay["lo"]
    off = lay["words"] + 8 * (d >> 6)
    (w,) = struct.unpack_from("<Q", lst, off)
    seg.write_bytes(_patched(data, at + off, struct.pack("<Q", w & ~(1 << (d & 63)))))
    for expr in ("ALPHA $ BETA", "ALPHA (G) DELTA", "BETA . ALPHA"):
        e = _corruption(tagged, expr)
        assert (e.filename, e.reason) == (str(seg),
                                          "dense list's directory disagrees with its bitmap")
        assert e.offset == at + lay["ranks"] + 4 * (d >> 6)


def test_remembered_seeks_are_the_segments_own(tmp_path):
    """A thread remembers its last seeks by segment (nidx_seg.c: a serial
    no other open segment has): the same keys sought in newer segments,
    and in an index built again at the same path after the first was
    closed (its segments' memory likely reused), answer from their own
    dictionaries."""
    base = tmp_path / "s"
    for shift in range(3):
        records = [[(24, b"alpha beta" if (m + shift) % 3 == 0 else b"alpha delta beta")]
                   for m in range(1, 301)]
        build_db(base, "isis-packed", records)
        pydb.build_index(str(base), fst="24 4 v24", progress=False)
        with pydb.open(base, readonly=False) as db:
            with db.transaction() as tx:
                tx.update(1, [(24, b"alpha beta gamma")])
        ix = _pydb._open_native_index(str(base))
        try:
            want = [m for m in range(1, 301) if m == 1 or (m + shift) % 3 == 0]
            for _ in range(2):
                assert list(search(ix, "ALPHA $ BETA")) == want
                assert list(search(ix, "ALPHA $ $ BETA")) == sorted(set(range(1, 301)) -
                                                                    set(want))
                assert list(search(ix, "GAMMA")) == [1]
            _same_answers(ix, ["ALPHA $ BETA", "ALPHA . BETA", "ALPHA * GAMMA", "DELTA"])
        finally:
            ix.close()
        for f in tmp_path.iterdir():
            if f.is_dir():
                for g in f.iterdir():
                    g.unlink()
                f.rmdir()
            else:
                f.unlink()


# ---- damage -------------------------------------------------------------

def _layout(lst: bytes) -> dict:
    """Offsets (within the list, its form byte at 0) of a dense list's
    parts (format 5), and its records' lengths and starts."""
    lo, i = sm.read_varint(lst, 1)
    nwords, i = sm.read_varint(lst, i)
    nrec, i = sm.read_varint(lst, i)
    words = i
    offs = words + 8 * nwords
    ranks = offs + 4 * (nwords + 1)
    lens = ranks + 4 * nwords
    masks = lens + nrec
    recs = masks + nrec
    starts, at = [], recs
    for n in lst[lens:masks]:
        if n == 255:
            n, after = sm.read_varint(lst, at)
            starts.append(at)
            at = after + n
        else:
            starts.append(at)
            at += n
    return {"lo": lo, "nwords": nwords, "words": words, "offs": offs, "ranks": ranks,
            "lens": list(lst[lens:masks]), "masks": masks, "recs": recs, "starts": starts}


@pytest.fixture
def copy(tmp_path):
    """A fresh database like `indexed`'s, its segment file and bytes, the
    file offset of COMMON's list, its bytes and COMMON's postings."""
    base = build_db(tmp_path / "c", "isis-packed", _records())
    pydb.build_index(str(base), fst="24 4 v24", progress=False)
    seg = _segment(base)
    data = seg.read_bytes()
    at = sm.HEADER
    for key, count, lst in sm.read_segment(data).terms:
        if key == b"COMMON":
            return base, seg, data, at, lst, sm.decode_list(lst, count, 5)
        at += len(lst)
    raise AssertionError("no COMMON")


def test_a_damaged_record_is_found_where_it_is_read(copy):
    """Record 128's second COMMON posting made a repeat of its first:
    reading COMMON whole, and a positional search that reads that record
    (COMMON $ RARE: RARE is in it), are a CorruptionError at the record;
    one that reads other records only (COMMON $ SPARSE) and record-level
    searches (the MFNs come from the bitmap) answer as before."""
    base, seg, data, at, lst, common = copy
    before = {e: _answer(base, e) for e in ("COMMON $ SPARSE", "COMMON * RARE", "COMMON")}
    lay = _layout(lst)
    r = 128 - lay["lo"]                         # records 1..2700: rank = MFN - 1
    start = lay["starts"][r]
    assert [p for p in common if p[0] == 128][:2] == [(128, 24, 1, 1), (128, 24, 1, 3)]
    assert lst[start:start + 6] == bytes([24, 1, 1, 0, 0, 2])
    seg.write_bytes(_patched(data, at + start + 3, bytes([0, 0, 0])))
    for expr in ("COMMON $ RARE", None):
        e = _corruption(base, expr)
        assert e.filename == str(seg) and e.offset == at + start
        assert e.reason == "posting out of range or not ascending"
    assert {e: _answer(base, e) for e in before} == before


@pytest.mark.parametrize("part,delta,reason,expr", [
    # bit 0 of word 0 cleared: the first MFN is no longer a record
    ("words", -1, "dense list's bitmap or directory disagrees with its bounds", "COMMON"),
    # word 1's first record said to start a byte later: word 0's records
    # end before it
    ("offs+4", 1, "dense list's records disagree with its directory", None),
    # word 1's first record's rank one less
    ("ranks+4", -1, "dense list's directory disagrees with its records", None),
])
def test_a_damaged_bitmap_or_directory_is_corruption(copy, part, delta, reason, expr):
    """One u64 word or u32 entry of COMMON's dense list changed (the
    checksum made right): the reads that meet it are a CorruptionError
    naming the segment and an offset: the list's first word (its bounds),
    the end of word 0's records (where word 1's should start), the rank
    entry."""
    base, seg, data, at, lst, _ = copy
    lay = _layout(lst)
    name, _, extra = part.partition("+")
    off = lay[name] + int(extra or 0)
    fmt = "<Q" if name == "words" else "<I"
    (value,) = struct.unpack_from(fmt, lst, off)
    seg.write_bytes(_patched(data, at + off, struct.pack(fmt, value + delta)))
    e = _corruption(base, expr)
    assert e.filename == str(seg) and e.reason == reason
    where = {"words": lay["words"], "offs": lay["recs"] + value, "ranks": off}[name]
    assert e.offset == at + where


def test_an_unknown_form_and_an_impossible_range_are_corruption(copy):
    """A long list whose form byte is 2, and a dense list whose range of
    MFNs would pass 2^31 - 1, are a CorruptionError at the list."""
    base, seg, data, at, lst, _ = copy
    seg.write_bytes(_patched(data, at, b"\x02"))
    e = _corruption(base, "COMMON")
    assert (e.filename, e.offset, e.reason) == (str(seg), at, "posting list of unknown form 2")
    assert lst[1:3] == b"\x01\x2b"   # lo 1, nwords 43
    seg.write_bytes(_patched(data, at + 2, b"\xff\xff"))
    e = _corruption(base, "COMMON")
    assert (e.filename, e.offset) == (str(seg), at + 1)
    assert e.reason == "dense list's MFN range out of range"
