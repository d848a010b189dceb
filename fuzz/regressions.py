"""Regression inputs of the fuzz targets: every crash, hang or leak the fuzzers
found, rebuilt by a generator function (docs/fuzzing.md), never kept as a
binary file.

    python fuzz/regressions.py [--out DIR]      (default fuzz/build/regressions)

writes DIR/<target>/<case name>.  tests/test_fuzz.py replays each through
the target's standalone build with PYDB_FUZZ_VERBOSE=1 and checks the exact
outcome the fix gives: `expect` is text that must appear in the errors the
target prints, or "" for an input that must now give no error at all.
The same inputs are checked through the Python API in tests/test_fuzz.py.
"""
from __future__ import annotations

import argparse
import contextlib
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEP = b"#PYDB-FUZZ-FILE#"          # FUZZ_SEP of fuzz/fuzz.h

# The commit header (csrc/shm.h): the generation word, the latest commit
# and the state slots.
SHM_LATEST = 24
SHM_STATE = 64
SHM_STATE_SIZE = 128
SHM_STATE_FILE_GEN = 56
SHM_STATE_CRC = 120
SHM_FILE_GEN_WORD = 336
SHM_GARBAGE = 320        # u64 versions, u64 bytes: the writers' garbage count
#: the garbage counters of fuzz_shm's finding (compact.c: bytes * 4 overflowed)
SHM_GARBAGE_FOUND = (5931894172716892160, 5931894172722287186)


@dataclass(frozen=True)
class Case:
    name: str                      # file name of the input
    target: str                    # fuzz target (fuzz/fuzz_<target>.c)
    expect: str                    # text in the printed errors; "": no error
    make: Callable[[], bytes]      # builds the input
    found: str                     # what the fuzzer found, and the fix


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as csrc/util.c computes it."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def small_database(tmp: Path) -> tuple[bytes, bytes, bytes]:
    """.mst, .xrf and .shm of a 3-record database pydb wrote (one commit
    per record, so the header holds a published state)."""
    sys.path.insert(0, str(REPO))
    import pydb

    base = tmp / "db"
    with pydb.create(base, layout="isis-aligned") as db:
        for i in range(1, 4):
            db.append([(24, f"Record {i} on water"), (70, "Smith, J.")])
    return tuple(base.with_suffix(e).read_bytes()   # type: ignore[return-value]
                 for e in (".mst", ".xrf", ".shm"))


def shm_word_ahead() -> bytes:
    """The generation word of the commit header (offset 336) ahead of the
    latest state's master-file generation (the fuzzer's input had
    0xc3c3c3c3c3c3c3c3 there)."""
    with tempfile.TemporaryDirectory() as t:
        mst, xrf, shm = small_database(Path(t))
    b = bytearray(shm)
    struct.pack_into("<Q", b, SHM_FILE_GEN_WORD, 0xC3C3C3C3C3C3C3C3)
    return SEP.join([mst, xrf, b"", bytes(b)])


def shm_state_gen_huge() -> bytes:
    """The latest state itself (with a valid CRC) naming master-file
    generation 2^63 + 1, which no handle's files can be."""
    with tempfile.TemporaryDirectory() as t:
        mst, xrf, shm = small_database(Path(t))
    return SEP.join([mst, xrf, b"", bytes(set_state_gen(shm, (1 << 63) + 1))])


def set_state_gen(shm: bytes, gen: int) -> bytearray:
    """shm with the latest state's file_gen (and the word) set to gen and
    the state's CRC recomputed."""
    b = bytearray(shm)
    latest = struct.unpack_from("<Q", b, SHM_LATEST)[0]
    off = SHM_STATE + (latest % 2) * SHM_STATE_SIZE
    struct.pack_into("<Q", b, off + SHM_STATE_FILE_GEN, gen)
    struct.pack_into("<I", b, off + SHM_STATE_CRC, crc32c(bytes(b[off:off + SHM_STATE_CRC])))
    struct.pack_into("<Q", b, SHM_FILE_GEN_WORD, gen)
    return b


# The native index's segment header (csrc/nidx_seg.h): u64 terms,
# dictionary and block index offsets, blocks, tombstone offset; the
# checksum is the last 8 bytes.
SEG_NTERMS = 16
SEG_DICT_OFF = 32
SEG_BIDX_OFF = 40
SEG_NBLOCKS = 48
SEG_TOMB_OFF = 56
FRUIT = ("Apple", "Banana", "Cherry")   # keys that share no prefix


@contextlib.contextmanager
def segment_files():
    """Every segment pydb writes meanwhile a file (small ones are inline in
    the MANIFEST otherwise: csrc/nidx_manifest.h), as the damage of the
    generators below is to segment files."""
    sys.path.insert(0, str(REPO))
    from pydb import _pydb

    old = _pydb._testing.set_inline_max(0)
    try:
        yield
    finally:
        _pydb._testing.set_inline_max(old)


def fruit_index(tmp: Path, commits: int = 1) -> Path:
    """A native index of three records titled FRUIT (FST "24 0 V24": one
    key per record), written by `commits` commits of pydb after the empty
    segment pydb.create writes: the first adds the records, each further
    one updates record 1 (a segment whose one tombstone is MFN 1); every
    segment a file.  Returns the database's base name."""
    sys.path.insert(0, str(REPO))
    import pydb

    base = tmp / "db"
    with segment_files(), pydb.create(base, fst="24 0 V24\n", gc="none") as db:
        with db.transaction() as t:
            for f in FRUIT:
                t.append([(24, f)])
        for i in range(1, commits):
            db.update(1, [(24, f"Apple {i}")])
    return base


def segments(base: Path) -> list[Path]:
    """The segment files of base's native index, in MANIFEST order."""
    pdx = base.with_suffix(".pdx")
    lines = (pdx / "MANIFEST").read_bytes().split(b"\n")
    return [pdx / ln.split(b" ", 1)[1].decode() for ln in lines
            if ln.startswith(b"segment seg-")]


def seal_segment(b: bytearray) -> bytes:
    """b with its checksum (the last 8 bytes) recomputed."""
    struct.pack_into("<Q", b, len(b) - 8, crc32c(bytes(b[:-8])))
    return bytes(b)


def nidx_input(base: Path) -> bytes:
    """The fuzz_nidx input for base's index: its MANIFEST, then its
    segment files in MANIFEST order."""
    pdx = base.with_suffix(".pdx")
    return SEP.join([(pdx / "MANIFEST").read_bytes(),
                     *(p.read_bytes() for p in segments(base))])


def first_entry(seg: bytes, key: bytes) -> int:
    """Offset of the dictionary entry (shared 0, suffix key) of the first
    term of the first block."""
    block = struct.unpack_from("<Q", seg, struct.unpack_from("<Q", seg, SEG_BIDX_OFF)[0])[0]
    assert seg[block + 8:block + 10 + len(key)] == bytes([0, len(key)]) + key
    return block + 8


def damaged_nidx(damage: Callable[[Path], None], commits: int = 1) -> Callable[[], bytes]:
    """A generator of the fuzz_nidx input of fruit_index(commits) after
    damage(base)."""
    def make() -> bytes:
        with tempfile.TemporaryDirectory() as t:
            base = fruit_index(Path(t), commits)
            damage(base)
            return nidx_input(base)
    return make


def keys_descending(base: Path) -> None:
    """Damage the segment of base's commit: its first key APPLE becomes
    ZPPLE, above BANANA, and the checksum is made valid again."""
    seg = segments(base)[-1]
    b = bytearray(seg.read_bytes())
    b[first_entry(bytes(b), b"APPLE") + 2] = ord("Z")
    seg.write_bytes(seal_segment(b))



def key_empty(base: Path) -> None:
    """Damage the segment of base's commit: its first key APPLE becomes
    the empty key (still below BANANA; the block index and tombstones
    move back, the header follows them, the checksum is made valid
    again)."""
    seg = segments(base)[-1]
    b = bytearray(seg.read_bytes())
    at = first_entry(bytes(b), b"APPLE")
    b[at + 1:at + 2 + len(b"APPLE")] = b"\0"
    for off in (SEG_BIDX_OFF, SEG_TOMB_OFF):
        struct.pack_into("<Q", b, off, struct.unpack_from("<Q", b, off)[0] - len(b"APPLE"))
    seg.write_bytes(seal_segment(b))


def terms_wrap(base: Path) -> None:
    """Damage the segment of base's commit: its header says 2^64 - 1
    terms in 0 blocks (the block index gone: it starts where the
    tombstones do), and the checksum is made valid again."""
    seg = segments(base)[-1]
    b = bytearray(seg.read_bytes())
    struct.pack_into("<Q", b, SEG_NTERMS, 2 ** 64 - 1)
    struct.pack_into("<Q", b, SEG_NBLOCKS, 0)
    struct.pack_into("<Q", b, SEG_BIDX_OFF, struct.unpack_from("<Q", b, SEG_TOMB_OFF)[0])
    seg.write_bytes(seal_segment(b))


def tombstone_max_mfn(base: Path) -> None:
    """Damage base's newest segment: its tombstone (MFN 1) becomes MFN
    2^31 - 1, and the checksum is made valid again."""
    seg = segments(base)[-1]
    b = bytearray(seg.read_bytes())
    tomb = struct.unpack_from("<Q", b, SEG_TOMB_OFF)[0]
    assert struct.unpack_from("<Ii", b, tomb) == (1, 1)
    struct.pack_into("<i", b, tomb + 4, 0x7FFFFFFF)
    seg.write_bytes(seal_segment(b))



def posting_count_huge(base: Path, count: int = 10 ** 8) -> None:
    """Damage the segment of base's commit: the dictionary says the key APPLE has
    `count` postings (a longer varint: the block index and tombstones
    move, the header follows them), its posting list still holds one."""
    seg = segments(base)[-1]
    b = bytearray(seg.read_bytes())
    at = first_entry(bytes(b), b"APPLE") + 2 + len(b"APPLE")
    assert b[at] == 1
    v, enc = count, bytearray()
    while v >= 0x80:
        enc.append(v & 0x7F | 0x80)
        v >>= 7
    enc.append(v)
    b[at:at + 1] = enc
    grow = len(enc) - 1
    for off in (SEG_BIDX_OFF, SEG_TOMB_OFF):
        struct.pack_into("<Q", b, off, struct.unpack_from("<Q", b, off)[0] + grow)
    seg.write_bytes(seal_segment(b))



def block_offset_wrap(base: Path) -> None:
    """Damage the segment of base's commit: the block index's first (and
    only) entry becomes 2^64 - 1, and the checksum is made valid again."""
    seg = segments(base)[-1]
    b = bytearray(seg.read_bytes())
    bidx = struct.unpack_from("<Q", b, SEG_BIDX_OFF)[0]
    assert struct.unpack_from("<Q", b, SEG_NBLOCKS)[0] == 1
    struct.pack_into("<Q", b, bidx, 2 ** 64 - 1)
    seg.write_bytes(seal_segment(b))


def key_listed_before_its_block() -> bytes:
    """A two-segment index whose listing of keys stops part-way: the older
    segment holds K33 (MFN 1); the newer one K00, K02, ..., K64 (33 keys,
    MFNs 2..34: 32 in its first dictionary block, K64 alone in the
    second), and K64 is rewritten as K33 (the checksum made valid again).
    The merged listing gives K33 with the older segment's count (the newer
    one's K33 lies in a block the listing reaches only after K62, where it
    stops: keys not in ascending order), while a lookup of K33 seeks the
    newer segment's second block and finds a posting more."""
    def damage(base: Path) -> None:
        seg = segments(base)[-1]
        b = bytearray(seg.read_bytes())
        bidx = struct.unpack_from("<Q", b, SEG_BIDX_OFF)[0]
        assert struct.unpack_from("<Q", b, SEG_NBLOCKS)[0] == 2
        at = struct.unpack_from("<Q", b, bidx + 8)[0] + 8   # block 1's first entry
        assert b[at:at + 5] == b"\0\3K64"
        b[at + 2:at + 5] = b"K33"
        seg.write_bytes(seal_segment(b))

    sys.path.insert(0, str(REPO))
    import pydb

    with tempfile.TemporaryDirectory() as t:
        base = Path(t) / "db"
        with segment_files(), pydb.create(base, fst="24 0 V24\n", gc="none") as db:
            db.append([(24, "K33")])
            with db.transaction() as tx:
                for i in range(0, 65, 2):
                    tx.append([(24, f"K{i:02d}")])
        damage(base)
        return nidx_input(base)


def stopwords_lone_cr() -> bytes:
    """Stop words ended by CR alone (and a DOS end-of-file mark): more words
    than lines ending in LF (the fuzzer's input mixed CR LF and lone CR)."""
    words = b"\r".join(b"W%d" % i for i in range(40)) + b"\x1aLAST"
    return SEP.join([b"", b"", words])


# A number taken from a format that wrote nothing, before any output
# (the record has no field 99): f() and val() of it (fuzz_fst's input was
# "1024 1000 v24f(v24.103,0,0)" over a record without field 24).
FST_NUMBER_OF_NOTHING = "1 0 f(v99,0,0)\n2 0 if val(v99)=0 then 'ZERO' fi\n"


def fst_number_of_nothing() -> bytes:
    """FST_NUMBER_OF_NOTHING over a record with only field 24."""
    return SEP.join([FST_NUMBER_OF_NOTHING.encode(), b"24 abc\n"])


# A comparison of two strings of which neither wrote anything, before any
# output (fuzz_fst's input was "1 0if(v6)<>(v29)then v2 fi" over a record
# without fields 6 and 29).
FST_COMPARE_NOTHING = "1 0 if (v6)<>(v29) then v2 fi\n2 0 if v6:v29 then 'IN' fi\n"


def fst_compare_nothing() -> bytes:
    """FST_COMPARE_NOTHING over a record with only field 2."""
    return SEP.join([FST_COMPARE_NOTHING.encode(), b"2 abc\n"])


# Two keys in a classic ISIS inverted file (fuzz/make_seeds.py
# isis_inverted), tree 1 only.
ISIS_TERMS = [(b"APPLE", [(1, 24, 1, 1)]), (b"BANANA", [(2, 24, 1, 1)])]
ISIS_LEAF_INFO1 = 12 + 10   # the first entry's INFO1 in a classic LE 10 leaf


def isis_block_int32_min() -> bytes:
    """ISIS_TERMS with the first key's posting list at block -2^31 (INFO1
    of the first leaf entry; the fuzzer's input had 0x80000000 there)."""
    import make_seeds

    parts = make_seeds.isis_inverted(ISIS_TERMS).split(SEP)
    leaves = bytearray(parts[3])   # .l01
    struct.pack_into("<i", leaves, ISIS_LEAF_INFO1, -2**31)
    parts[3] = bytes(leaves)
    return SEP.join(parts)


def ctl_next_block_int32_min() -> bytes:
    """The small database with NXTMFB (the control record's bytes 8-11)
    set to -2^31, and no commit header (the fuzzer's input, for fuzz_wal,
    had a log whose control-record entry wrote 0x80000000 there)."""
    with tempfile.TemporaryDirectory() as t:
        mst, xrf, _ = small_database(Path(t))
    b = bytearray(mst)
    struct.pack_into("<i", b, 8, -2**31)
    return SEP.join([bytes(b), xrf])


def wal_frame(entries) -> bytes:
    """A complete log frame (csrc/wal.h, version 2) of (kind, offset,
    data) entries of the .mst (1) and .xrf (2)."""
    body = b""
    for kind, off, data in entries:
        e = struct.pack("<IIQQ", kind, 0, off, len(data)) + data
        body += e + b"\0" * (-len(e) % 8)
    head = b"PYDBWAL1" + struct.pack("<IIQQ", 2, len(entries), len(body), 1)
    head += struct.pack("<II", crc32c(head), 0)
    return head + body + b"PYDBEND1" + struct.pack("<II", crc32c(head + body), 0)


def wal_sparse_xrf() -> bytes:
    """A log (the input of fuzz_wal, beside its 3-record template) that
    writes an XRF block at 2^39 (a sparse XRF of 512 GiB) and bytes past
    the master file's committed end (the tail check's case); the
    fuzzer's input had an XRF block at 599,302,377,472."""
    with tempfile.TemporaryDirectory() as t:
        mst, _, _ = small_database(Path(t))
    ctl = struct.unpack_from("<iiiH", mst, 0)
    end = (ctl[2] - 1) * 512 + ctl[3] - 1
    # 2^34: below the end no log entry may pass (wal.h PYDB_WAL_MAX_END,
    # 2^35), so that the replay writes it and the tail check meets it
    return wal_frame([(2, 1 << 34, b"\1" * 512), (1, end, b"junk" * 64)])


def wal_mst_at_2e63() -> bytes:
    """A log whose .mst entry ends at 2^63 - 1, as fuzz_wal's input did
    (a sparse master file that large on tmpfs; the writer's next append
    placed its record past it and overflowed)."""
    return wal_frame([(1, (1 << 63) - 1 - 64, b"junk" * 16)])


CASES = [
    Case("shm-word-ahead", "mst", "", shm_word_ahead,
         "hang: every read switched files forever (read.c pydb__header_gen "
         "took the word over the state); now the state decides"),
    Case("shm-state-gen-2e63", "mst", "", shm_state_gen_huge,
         "hang (the same loop, found reading the code of the case above: a "
         "generation the handle's fseq cannot hold); "
         "now shm.c takes a generation >= 2^62 for a damaged slot and reads "
         "use the files (files mode), as for a slot with a bad CRC"),
    Case("nidx-keys-descending", "nidx", "dictionary: keys not in ascending order",
         damaged_nidx(keys_descending),
         "abort in fuzz_nidx (pydb_index_terms gave keys out of order): a "
         "segment's dictionary was read in stored order unchecked, so "
         "enumeration, the k-way merge and seeks went wrong on a damaged "
         "one; nidx_seg.c pydb__ncur_next now checks every key against "
         "the one before it"),
    Case("nidx-key-empty", "nidx", "", damaged_nidx(key_empty),
         "undefined behaviour (UBSan: memcpy from a null pointer) in "
         "fuzz_nidx's pydb_index_terms callback: a segment whose first "
         "key is empty left the cursor's key NULL (nidx_seg.c "
         "pydb__ncur_next allocated it only for a longer key); a valid "
         "cursor's key is now never NULL (found by fuzz/run, 420 s)"),
    Case("nidx-terms-wrap", "nidx",
         "segment header offsets are inconsistent with the file size",
         damaged_nidx(terms_wrap),
         "SEGV (ASan: a read at a wild address in nidx_seg.c "
         "pydb__ncur_block, from pydb__ncur_seek): a header claiming 2^64 - 1 "
         "terms in 0 blocks passed pydb__nseg_open, whose check computed "
         "(nterms + 31) / 32 and wrapped to 0; the seek then read block 0 of "
         "an empty block index.  The count of blocks is now computed without "
         "overflow and the terms are bounded by the dictionary's bytes "
         "(found by the short CI tier, fuzz/ci, in a fresh-check run)"),
    Case("nidx-tombstone-mfn-2e31", "nidx", "", damaged_nidx(tombstone_max_mfn, 2),
         "an 8 GiB calloc for a segment set whose segment tombstones MFN "
         "2^31 - 1 (the newest-tombstone table, 4 bytes per MFN up to the "
         "highest, nidx_handle.c pydb__nsegset_finish); the table is now "
         "made only below NIDX_NEWEST_SLACK plus the segments' bytes, else "
         "the tombstones are searched: the postings read as before"),
    Case("nidx-posting-count-1e8", "nidx",
         "dictionary: posting list out of range", damaged_nidx(posting_count_huge),
         "resource bound (issue 14, Build 4), no finding: a dictionary "
         "entry claiming 100 M postings over a one-posting list is refused "
         "before anything is allocated for it (nidx_seg.c pydb__ncur_next: "
         "count <= posting bytes)"),
    Case("nidx-block-offset-wrap", "nidx",
         "dictionary block offset out of range", damaged_nidx(block_offset_wrap),
         "UBSan: pointer overflow in nidx_seg.c pydb__ncur_block (map + "
         "offset + 8 wrapped below the mapping), then a SEGV reading the "
         "block's postings offset from the byte before the mapping (the "
         "standalone ASan build of the old code): a block index entry "
         "near 2^64 passed pydb__nseg_open, whose check `o + 8 > bidx_off` "
         "wrapped.  The check is now made without a sum that can wrap, and "
         "a block must hold its 8-byte postings offset (found by fuzz/run "
         "nidx, 600 s into an hour)"),
    Case("nidx-key-listed-before-its-block", "nidx",
         "dictionary: keys not in ascending order", key_listed_before_its_block,
         "a false alarm of the target, no defect of the core: fuzz_nidx "
         "aborted when a key's postings outnumbered the count the listing "
         "of keys gave it, but a listing stopped by a damaged dictionary can "
         "have given a key before reaching a segment's copy of it; the "
         "target now compares only after a listing that succeeded (found by "
         "the short CI tier, fuzz/ci, in a fresh-check run)"),
    Case("fst-number-of-nothing", "fst", "", fst_number_of_nothing,
         "undefined behaviour in fst_format.c eval_num (UBSan: zero offset "
         "applied to a null pointer, memcpy from NULL): the number of a "
         "format that wrote nothing into an output not yet allocated; "
         "take_number now copies only what was written (found by the "
         "short CI tier, fuzz/ci, without the real data)"),
    Case("fst-compare-nothing", "fst", "", fst_compare_nothing,
         "undefined behaviour in fst_format.c eval_cond (UBSan: zero offset "
         "applied to a null pointer): two empty strings compared before "
         "the output was allocated; the comparison now reads an empty "
         "array then (found by the short CI tier, fuzz/ci)"),
    Case("isis-ifp-block-int32-min", "isis_index",
         "posting list address -2147483648/2 outside the IFP", isis_block_int32_min,
         "undefined behaviour in isis_read.c ifp_addr (UBSan: signed "
         "overflow in block - 1, computed before the address was checked) "
         "for a leaf entry naming IFP block -2^31; the offsets of IFP blocks "
         "and of B-tree records (isis_int.h node_off, leaf_off) are now "
         "computed in 64 bits (found by the short CI tier, fuzz/ci, from "
         "the ISIS seeds make_seeds.py writes)"),
    Case("mst-next-block-int32-min", "mst",
         "control record: impossible NXTMFN 4 / NXTMFB -2147483648",
         ctl_next_block_int32_min,
         "undefined behaviour in record.h pydb__ctl_end (UBSan: signed "
         "overflow in next_block - 1), called by handle.c read_control "
         "before the control record's sanity check; the end offset is now "
         "computed in 64 bits, and the check refuses the record (found by "
         "fuzz/run wal, 300 s, the target's first run)"),
    Case("wal-sparse-xrf-2e39", "wal", "", wal_sparse_xrf,
         "hang (about 10^9 preads) in txn.c xrf_reaches, new this session: "
         "a writer's open looked at the bytes past the committed end and "
         "read every block of an XRF a replayed log had made 512 GiB "
         "(sparse); the scan now stops at NXTMFN's block and at 64 MiB "
         "(found by the standalone replay of the wal corpus; the input "
         "now puts the block at 2^34, below the end a log entry may reach)"),
    Case("wal-mst-entry-2e63", "wal", "log entry 1 has impossible lengths or kind",
         wal_mst_at_2e63,
         "undefined behaviour in record.c pydb__place (UBSan: signed overflow "
         "in pos + align - 1): a replayed log made the .mst 2^63 - 1 bytes "
         "(sparse, on tmpfs), and the next append placed its record at that "
         "end; a log entry may no longer end past 2^35 (the largest master "
         "file), and an append to a master file past its capacity raises "
         "the capacity error without placing (fuzz/run wal, 1,200 s, after "
         "the replay's rewrite c7660ec)"),
    Case("stw-lone-cr", "keys", "", stopwords_lone_cr,
         "heap-buffer-overflow in pydb__stopwords_parse (keys.c): words "
         "counted by LF, split at CR and 0x1A too; now counted alike"),
]


def write(out: Path) -> list[Path]:
    paths = []
    for c in CASES:
        d = out / c.target
        d.mkdir(parents=True, exist_ok=True)
        p = d / c.name
        p.write_bytes(c.make())
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "fuzz" / "build" / "regressions")
    args = ap.parse_args(argv)
    for p in write(args.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
