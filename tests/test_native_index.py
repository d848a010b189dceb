"""The native inverted index (csrc/nidx_*.c): bulk build, terms, postings,
comparison with the index shipped with the pyisis cds sample, damaged
files, and the commit hook driven without a writer."""

import os
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_search import ref_eval, render, tree_strategy

import pydb
from pydb import _pydb
from pydb.index import Posting, Term
from pydb.search import search

from conftest import all_terms, copy_db, hypothesis_examples, manifest_segments

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = pytest.mark.sanitize_address


SAMPLE = "scieloorg__pyisis/pyisis/pyisis/sample/"


# ---- a small independent reader of classic ISIS inverted files ----------
# docs/isis-formats.md §4.4 (leaves) and §4.5 (.IFP), written for this test only.

def read_classic(base, le=(10, 30), aligned=True):
    """{key: [(mfn, tag, occ, cnt), ...]} for both trees, and the keys per
    tree."""
    ifp = open(f"{base}.ifp", "rb").read()
    out, per_tree = {}, {}
    for tree, width in ((1, le[0]), (2, le[1])):
        data = open(f"{base}.l0{tree}", "rb").read()
        pad = (4 - width % 4) % 4 if aligned else 0
        esz = width + pad + 8
        rsz = 12 + 10 * esz
        assert len(data) % rsz == 0
        per_tree[tree] = 0
        for r in range(len(data) // rsz):
            rec = data[r * rsz:(r + 1) * rsz]
            _pos, ock, _it, _ps = struct.unpack_from("<iHHi", rec, 0)
            for j in range(ock):
                o = 12 + j * esz
                key = rec[o:o + width].rstrip(b" ")
                block, word = struct.unpack_from("<ii", rec, o + width + pad)
                p = (block - 1) * 512 + 4 + 4 * word
                nxtb, _nxtp, totp, segp, _segc = struct.unpack_from("<5i", ifp, p)
                assert nxtb == 0 and totp == segp   # sequentially loaded
                p += 20
                posts = []
                for _ in range(segp):
                    off = p % 512
                    if off == 0:                  # skip the next IFPBLK
                        p += 4
                    elif 512 - off < 8:           # a posting never straddles
                        p += 512 - off + 4
                    m2, m1, m0, t1, t0, oc, c1, c0 = ifp[p:p + 8]
                    posts.append(((m2 << 16) | (m1 << 8) | m0, (t1 << 8) | t0, oc,
                                  (c1 << 8) | c0))
                    p += 8
                out[key] = posts
                per_tree[tree] += 1
    return out, per_tree


@pytest.fixture
def cds(isis_data, tmp_path):
    """A copy of the pyisis sample cds (with its .fst and .stw) and its
    native index built like the shipped one (keys cut to 30 bytes)."""
    base = str(copy_db(isis_data / SAMPLE / "cds", tmp_path, ("fst", "stw")))
    pydb.build_index(base, progress=False, max_key=30)
    return base


def test_native_equals_shipped_index_of_the_cds_sample(isis_data, cds):
    shipped, per_tree = read_classic(str(isis_data / SAMPLE / "cds"))
    # SOURCES.md: 1:classic LE10 keys=679 posts=1309; 2:classic LE30 keys=630 posts=1040
    assert per_tree == {1: 679, 2: 630}
    assert sum(len(v) for k, v in shipped.items() if len(k) <= 10) == 1309
    assert sum(len(v) for k, v in shipped.items() if len(k) > 10) == 1040
    ix = _pydb._open_native_index(cds)
    native = {k: [tuple(p) for p in ix.postings(k)] for k, _ in all_terms(ix)}
    # Documented differences (docs/isis-formats.md §4.5/§5.3): none remain for
    # this sample — accents fold through the default table, <a=b> keeps a.
    assert native == shipped
    assert len(native) == 1309
    assert sum(map(len, native.values())) == 2349


def test_native_equals_shipped_packed_index_without_stop_words(isis_data, tmp_path):
    # pyisis db/cds: packed classic index, the folder has no .stw, so the
    # shipped index holds THE, OF, ... too.
    src = isis_data / "scieloorg__pyisis/db/cds"
    base = str(copy_db(src, tmp_path, ("fst",)))
    assert pydb.build_index(base, progress=False, max_key=30) == 150
    shipped, _ = read_classic(str(src), aligned=False)
    ix = _pydb._open_native_index(base)
    native = {k: [tuple(p) for p in ix.postings(k)] for k, _ in all_terms(ix)}
    assert native == shipped
    assert len(native) == 1324 and sum(map(len, native.values())) == 2772


def test_native_equals_shipped_cisis_tests_index(isis_data, tmp_path):
    # bireme cisis tests/CDS: its FST wraps every rule in if p(..) then ..
    # fi and ends rule 69 with '/'.  The classic .l0x/.ifp set (formats
    # §4.8: .n0x/.cnt there belong to the LIND4 set) was loaded without the
    # folder's CDS.stw: THE, OF, ... are keys.
    src = isis_data / "bireme__cisis/tests/CDS"
    base = str(copy_db(src, tmp_path))
    _pydb._index_build(base, (isis_data / "bireme__cisis/tests/CDS.fst").read_bytes(),
                       max_key=30)
    shipped, per_tree = read_classic(str(src))
    assert per_tree == {1: 694, 2: 630}    # SOURCES.md: keys=694 / keys=630
    ix = _pydb._open_native_index(base)
    native = {k: [tuple(p) for p in ix.postings(k)] for k, _ in all_terms(ix)}
    assert native == shipped
    assert sum(map(len, native.values())) == 1732 + 1040


def test_native_equals_shipped_abcd_marc_index(isis_data, tmp_path):
    """ABCD marc (83 FST rules: prefixes, |..|%|, mpu/mdu, if/fi, *off.len,
    classic packed 16/60 index).  Documented differences:
    * the case and word tables used to build it are not in its folder
      (docs/isis-formats.md §5.3: ABCD keeps them with the installation): the
      Latin-1 ISISUC.TAB of ABCD's servers base folds its accents, and its
      ISISAC.TAB plus the digits 0-9 (the index holds words such as 1850)
      reproduce every key;
    * the shipped lists repeat identical postings where two rules with one
      ID (650 1 and 650 4, ...) make the same key at the same place; pydb
      keeps one copy (docs/isis-formats.md §4.5 calls lists strictly ascending).
    * the ABCD indexes were built without their .stw files (unimarc.stw
      lists DE, LA, LES, which its index holds; marc's holds THE, AN): the
      build here uses none either."""
    abcd = isis_data / "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows"
    src = abcd / "marc/data/marc"
    base = str(copy_db(src, tmp_path))
    shutil.copy(abcd / "servers/data/isisuc.tab", tmp_path / "isisuc.tab")
    ac = (abcd / "servers/data/isisac.tab").read_text()
    (tmp_path / "isisac.tab").write_text(ac + " " + " ".join(map(str, range(48, 58))))
    _pydb._index_build(base, (abcd / "marc/data/marc.fst").read_bytes(), max_key=60)
    shipped, per_tree = read_classic(str(src), le=(16, 60), aligned=False)
    # SOURCES.md: 1:classic LE16 keys=7394 posts=20568; 2:classic LE60 keys=2736 posts=3688
    assert per_tree == {1: 7394, 2: 2736}
    assert sum(map(len, shipped.values())) == 20568 + 3688
    ix = _pydb._open_native_index(base)
    native = {k: [tuple(p) for p in ix.postings(k)] for k, _ in all_terms(ix)}
    assert native == {k: sorted(set(v)) for k, v in shipped.items()}
    duplicates = sum(len(v) - len(set(v)) for v in shipped.values())
    assert duplicates == 822
    assert sum(map(len, native.values())) == 20568 + 3688 - 822
    assert b"1850" in native and b"THE" in native


def test_terms_prefix_start_and_counts(isis_data, cds):
    shipped, _ = read_classic(str(isis_data / SAMPLE / "cds"))
    idx = pydb.open_index(cds)
    want = sorted((k.decode("latin-1"), len(v)) for k, v in shipped.items()
                  if k.startswith(b"WAT"))
    got = [tuple(t) for t in idx.terms("wat")]
    assert got == want and ("WATER", 15) in got
    # start, inclusive; the handle also takes (start, True) as exclusive
    assert [t.key for t in idx.terms("WAT", start="WATER B")][0] == "WATER BALANCE"
    assert idx.handle.terms(b"WAT", (b"WATER", True), 1) == [(b"WATER BALANCE", 6)]
    assert all(isinstance(t, Term) for t in idx.terms("Z"))
    # uncapped: a batch of 7 still sees every key
    assert len(list(idx.terms("", batch=7))) == 1309
    assert idx.postings("water")[:2] == [Posting(4, 24, 1, 7), Posting(5, 24, 1, 14)]
    assert idx.postings("no such key") == []
    assert idx.handle.kind == "native"
    assert idx.handle.caps == {"tag": True, "occ": True, "cnt": True}
    assert idx.key(b"caf\x82") == b"CAFE"          # CP850 é, default table
    idx.close()


def test_progress_callback_and_record_count(isis_data, tmp_path):
    base = str(copy_db(isis_data / SAMPLE / "cds", tmp_path, ("fst",)))
    seen = []
    n = _pydb._index_build(base, b"24 4 v24", lambda d, t: seen.append((d, t)), batch=64)
    assert n == 150
    assert seen == [(64, 150), (128, 150), (150, 150)]


def test_field_rules_build_the_same_index(isis_data, tmp_path):
    a = str(copy_db(isis_data / SAMPLE / "cds", tmp_path / "a"))
    b = str(copy_db(isis_data / SAMPLE / "cds", tmp_path / "b"))
    pydb.build_index(a, fst=[pydb.FieldRule(24, 4, [24]), pydb.FieldRule(70, 0, [70])],
                     progress=False)
    pydb.build_index(b, fst="24 4 mhu,(v24|%|/)\n70 0 mhu,(v70|%|/)\n", progress=False)
    ia, ib = _pydb._open_native_index(a), _pydb._open_native_index(b)
    ta, tb = all_terms(ia), all_terms(ib)
    assert ta == tb and len(ta) == 811
    assert all(ia.postings(k) == ib.postings(k) for k, _ in ta)


def test_missing_and_damaged_files(isis_data, cds, tmp_path):
    with pytest.raises(pydb.DatabaseNotFoundError):
        pydb.open_index(str(tmp_path / "nothing"))
    seg = [f for f in os.listdir(cds + ".pdx") if f.endswith(".pds")]
    assert len(seg) == 1
    seg = os.path.join(cds + ".pdx", seg[0])
    data = bytearray(open(seg, "rb").read())
    # one flipped byte in a posting list
    bad = bytearray(data)
    bad[100] ^= 0x40
    open(seg, "wb").write(bad)
    with pytest.raises(pydb.CorruptionError) as ei:
        pydb.open_index(cds)
    assert ei.value.filename == seg and "checksum" in ei.value.reason
    # truncated segment
    open(seg, "wb").write(data[:len(data) // 2])
    with pytest.raises(pydb.CorruptionError):
        pydb.open_index(cds)
    open(seg, "wb").write(data[:40])
    with pytest.raises(pydb.CorruptionError):
        pydb.open_index(cds)
    # a segment the MANIFEST names, missing: damage, not a missing database
    os.unlink(seg)
    with pytest.raises(pydb.CorruptionError) as ei:
        pydb.open_index(cds)
    assert ei.value.filename == os.path.join(cds + ".pdx", "MANIFEST")
    assert ei.value.reason == f"names the segment {seg}, which is missing"
    open(seg, "wb").write(data)
    pydb.open_index(cds).close()
    # damaged manifest
    man = os.path.join(cds + ".pdx", "MANIFEST")
    text = open(man, "rb").read()
    open(man, "wb").write(text.replace(b"max_key 30", b"max_key 31"))
    with pytest.raises(pydb.CorruptionError) as ei:
        pydb.open_index(cds)
    assert "manifest" in ei.value.reason
    open(man, "wb").write(text[:-5])
    with pytest.raises(pydb.CorruptionError):
        pydb.open_index(cds)


def test_damaged_segment_with_valid_checksum(cds):
    """A segment whose checksum was recomputed over garbage still fails
    cleanly (bounds checks, not only the checksum)."""
    from pydb import _pydb as m
    seg = [os.path.join(cds + ".pdx", f) for f in os.listdir(cds + ".pdx")
           if f.endswith(".pds")][0]
    data = bytearray(open(seg, "rb").read())
    dict_off = struct.unpack_from("<Q", data, 32)[0]
    # the forging helper computes what the writer wrote
    assert _checksum(bytes(data[:-8])) == struct.unpack_from("<Q", data, len(data) - 8)[0]
    for pos in (dict_off + 8, dict_off + 9, 70, 64):
        bad = bytearray(data)
        bad[pos] = 0xFF
        struct.pack_into("<Q", bad, len(bad) - 8, _checksum(bytes(bad[:-8])))
        open(seg, "wb").write(bad)
        try:
            ix = m._open_native_index(cds)
        except pydb.CorruptionError:
            continue
        with pytest.raises(pydb.CorruptionError):
            for k, _ in all_terms(ix):
                ix.postings(k)
    open(seg, "wb").write(data)


def _crc32c_table():
    t = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


_CRC32C = _crc32c_table()


def _checksum(b):
    """The segment checksum (CRC-32C, csrc/util.c pydb__crc32c; format
    version 2), for forging damaged files."""
    c = 0xFFFFFFFF
    for x in b:
        c = _CRC32C[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _reseal(text: bytes) -> bytes:
    """A MANIFEST's text with its end line's CRC-32C made right again."""
    body = text[:-13]
    return body + b"end %08x\n" % _checksum(body)


def test_a_manifest_of_format_2_is_read_and_cannot_hold_inline_segments(cds):
    """A MANIFEST without inline segments is written in format 2, as
    before inline segments (so older pydb reads it) and opens; an
    "inline" line in one is damage; one of format 3 holds inline segments
    beside files, and a damaged inline segment (its checksum forged) is a
    CorruptionError naming the MANIFEST and the segment."""
    man = Path(cds + ".pdx", "MANIFEST")
    assert man.read_bytes().startswith(b"pydb-native-index 2\n")   # files only
    ix = pydb.open_index(cds)
    assert len(ix.search("WATER")) > 0
    ix.close()
    # a commit makes it format 3 with an inline segment
    ix = _pydb._open_native_index(cds)
    _pydb._testing.native_hook(ix, "prepare", [(4, [(24, b"zebra crossing")], False)])
    _pydb._testing.native_hook(ix, "commit")
    text = man.read_bytes()
    assert text.startswith(b"pydb-native-index 3\n")
    assert [k for k, _ in manifest_segments(man.parent)] == ["file", "inline"]
    assert [p[0] for p in pydb.open_index(cds).postings("ZEBRA")] == [4]
    man.write_bytes(_reseal(text.replace(b"pydb-native-index 3", b"pydb-native-index 2", 1)))
    with pytest.raises(pydb.CorruptionError) as ei:
        pydb.open_index(cds)
    assert ei.value.filename == str(man) and "bad segment line" in ei.value.reason
    # the inline segment's last byte of postings flipped, both checksums
    # made right: the segment's own checks find it
    at = text.index(b"\ninline ") + 1
    line_end = text.index(b"\n", at)
    n = int(text[at:line_end].split()[2])
    seg = bytearray(text[line_end + 1:line_end + 1 + n])
    seg[16:24] = (1 << 40).to_bytes(8, "little")           # terms: absurd
    struct.pack_into("<Q", seg, len(seg) - 8, _checksum(bytes(seg[:-8])))
    man.write_bytes(_reseal(text[:line_end + 1] + bytes(seg) + text[line_end + 1 + n:]))
    with pytest.raises(pydb.CorruptionError) as ei:
        pydb.open_index(cds)
    assert ei.value.filename.startswith(str(man)) and "inline segment" in ei.value.filename
    assert "segment header" in ei.value.reason


@pytest.mark.sanitize_address
@pytest.mark.parametrize("cut", [False, True])
@pytest.mark.parametrize("extra", [0, 1, 14, 10**11])
def test_a_manifest_text_length_past_its_end_is_corruption(cds, cut, extra):
    """A stop-word length that reaches the end line or passes it, with
    the checksum forged right, is "text passes the end" -- also where the
    MANIFEST ends right after the "stw N" line (`cut`: no text, no
    segment), which read past the buffer (a crash under a large length,
    found by a review) -- for a search and a check; a rebuild repairs it."""
    man = Path(cds + ".pdx", "MANIFEST")
    text = man.read_bytes()
    at = text.index(b"\nstw ") + 5
    line_end = text.index(b"\n", at)
    if cut:
        forged = text[:at] + b"%d\n" % extra + text[-13:]
    else:
        left = len(text) - 13 - (line_end + 1)          # bytes after "stw N\n"
        forged = text[:at] + b"%d" % (left + extra) + text[line_end:]
    man.write_bytes(_reseal(forged))
    with pytest.raises(pydb.CorruptionError) as ei:
        pydb.open_index(cds)
    assert ei.value.filename == str(man) and ei.value.reason == "manifest: text passes the end"
    with pydb.open(cds) as db:
        assert not db.check().ok
    pydb.build_index(cds, progress=False, max_key=30)    # the repair
    assert len(pydb.open_index(cds).search("WATER")) > 0


def test_the_core_checksum_is_crc32c_at_every_length_and_alignment():
    """The core's CRC-32C (the CPU's CRC32 instruction where it has one,
    else a table) equals the reference above and its own table form, for
    every length 0..80 at each of 8 alignments and for a 1 MiB buffer,
    continued over a split too; and the standard check value: CRC-32C("123456789") = 0xE3069283
    (RFC 3720, B.4)."""
    from pydb._pydb import _testing
    data = bytes((i * 131 + 7) & 0xFF for i in range(96))
    for off in range(8):
        for n in range(81):
            want = _checksum(data[off:off + n])
            got = _testing.crc32c(data[:off + n], off)
            assert got == want, (off, n)
            assert _testing.crc32c(data[:off + n], off, True) == want, (off, n)
    big = os.urandom(1 << 20)
    assert _testing.crc32c(big, 3) == _testing.crc32c(big, 3, True)
    assert _testing.crc32c(b"123456789") == 0xE3069283
    # continued over a split (as a spilled run's checksum is: nidx_spill.c)
    for cut in (0, 1, 7, 8, 13, 4096):
        for portable in (False, True):
            head = _testing.crc32c(big[:cut], 0, portable)
            assert _testing.crc32c(big, cut, portable, head) == \
                _testing.crc32c(big), (cut, portable)


# ---- the commit hook, driven directly (no writer on this branch) --------

def test_hook_prepare_publish(cds):
    ix = _pydb._open_native_index(cds)
    before = dict(all_terms(ix))
    assert ix.postings(b"TECHNIQUES")[0] == (1, 24, 1, 1)
    _pydb._testing.native_hook(ix, "prepare", [
        (1, [(24, b"Zebra crossing techniques"), (70, b"Doe, J.")], False),
        (2, None, True),                                     # deleted
        (151, [(24, b"A zebra")], False),                    # new record
    ])
    # prepared, not committed: nothing visible, in memory or on disk
    assert ix.postings(b"ZEBRA") == []
    assert dict(all_terms(ix)) == before
    assert dict(all_terms(_pydb._open_native_index(cds))) == before
    _pydb._testing.native_hook(ix, "commit")
    assert ix.postings(b"ZEBRA") == [(1, 24, 1, 1), (151, 24, 1, 2)]
    # MFN 1's old postings are gone, its new ones in
    techniques = ix.postings(b"TECHNIQUES")
    assert (1, 24, 1, 1) not in techniques and (1, 24, 1, 3) in techniques
    assert ix.postings(b"MAGALHAES, A.C.") == []
    assert ix.postings(b"DOE, J.") == [(1, 70, 1, 1)]
    # MFN 2 (deleted): none of its postings remain anywhere
    after = dict(all_terms(ix))
    for k in after:
        assert all(p[0] != 2 for p in ix.postings(k))
    assert after[b"TECHNIQUES"] == len(techniques)
    assert b"BOSIAN, G." in before and after[b"BOSIAN, G."] == before[b"BOSIAN, G."] - 1
    # a fresh open reads the committed manifest: the same state
    again = _pydb._open_native_index(cds)
    assert dict(all_terms(again)) == after
    assert again.postings(b"ZEBRA") == ix.postings(b"ZEBRA")
    # a second commit on top, touching MFN 1 again
    _pydb._testing.native_hook(ix, "prepare", [(1, [(24, b"zebra")], False)])
    _pydb._testing.native_hook(ix, "commit")
    assert ix.postings(b"ZEBRA") == [(1, 24, 1, 1), (151, 24, 1, 2)]
    assert ix.postings(b"DOE, J.") == [] and ix.postings(b"CROSSING") == []
    # the build's segment is a file, each commit's small one inline in
    # the MANIFEST
    assert len([f for f in os.listdir(cds + ".pdx") if f.endswith(".pds")]) == 1
    assert [k for k, _ in manifest_segments(cds + ".pdx")] == ["file", "inline", "inline"]


def test_hook_abort_leaves_nothing(cds):
    ix = _pydb._open_native_index(cds)
    files = sorted(os.listdir(cds + ".pdx"))
    manifest = open(os.path.join(cds + ".pdx", "MANIFEST"), "rb").read()
    # a small change: its segment would be inline, no file is written
    _pydb._testing.native_hook(ix, "prepare", [(3, [(24, b"yak")], False)])
    assert sorted(os.listdir(cds + ".pdx")) == files
    _pydb._testing.native_hook(ix, "abort")
    assert sorted(os.listdir(cds + ".pdx")) == files
    assert open(os.path.join(cds + ".pdx", "MANIFEST"), "rb").read() == manifest
    assert ix.postings(b"YAK") == []
    # a large one (a segment over 4 KiB) is written as a file; the abort
    # removes it
    words = b" ".join(b"yak" + bytes([97 + i // 26, 97 + i % 26]) for i in range(600))
    _pydb._testing.native_hook(ix, "prepare", [(3, [(24, words)], False)])
    assert len(os.listdir(cds + ".pdx")) == len(files) + 1   # written, unreferenced
    _pydb._testing.native_hook(ix, "abort")
    assert sorted(os.listdir(cds + ".pdx")) == files
    assert open(os.path.join(cds + ".pdx", "MANIFEST"), "rb").read() == manifest
    assert ix.postings(b"YAKAB") == []
    # publish without a prepared change does nothing
    _pydb._testing.native_hook(ix, "publish")
    assert ix.postings(b"YAK") == []


@pytest.mark.sanitize_thread
def test_readers_see_one_committed_state(cds):
    """Readers enumerate while commits are published: every enumeration
    sees the keys QQZEBRAA..QQZEBRA<k> for one k (a committed state)."""
    ix = _pydb._open_native_index(cds)
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            keys = [k for k, _ in ix.terms(b"QQZEBRA", None, 10000)]
            want = [b"QQZEBRA" + bytes([65 + i]) for i in range(len(keys))]
            if sorted(keys) != sorted(want):
                errors.append(keys)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(20):
        _pydb._testing.native_hook(ix, "prepare",
                                   [(200 + i, [(24, b"qqzebra" + bytes([97 + i]))], False)])
        _pydb._testing.native_hook(ix, "commit")
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert len(ix.terms(b"QQZEBRA", None, 100)) == 20


def test_every_database_with_an_fst_indexes(isis_data, tmp_path):
    """Every shipped database that comes with an FST indexes every record
    through its own FST; the one with a damaged record (ABCD odds: an XRF
    entry points at another MFN's record, SOURCES.md) fails the build with
    CorruptionError instead of giving a partial index, and the one whose
    FST has a literal never closed (ABCD rda.fst line 2, test_fst.py) fails
    it with FSTError instead of an index without that rule's keys."""
    done = 0
    for fst in sorted(isis_data.rglob("*")):
        if fst.suffix.lower() != ".fst":
            continue
        stem = fst.with_suffix("")
        mst = [p for p in fst.parent.iterdir()
               if p.stem == stem.name and p.suffix.lower() == ".mst"]
        if not mst:
            continue
        exts = [p.suffix[1:] for p in fst.parent.iterdir() if p.stem == stem.name
                and p.suffix.lower() in (".mst", ".xrf")]
        dst = tmp_path / str(done)
        dst.mkdir()
        for e in exts:
            shutil.copy(f"{stem}.{e}", dst / f"{stem.name}.{e}")
        utf8 = "unicode" in str(fst) or "utf-8" in str(fst) or "rda" in str(fst)
        with pydb.open(dst / stem.name) as db:
            max_mfn = db.max_mfn
        if stem.name == "odds":
            with pytest.raises(pydb.CorruptionError) as ei:
                _pydb._index_build(str(dst / stem.name), fst.read_bytes())
            assert ei.value.offset == 28976
            done += 1
            continue
        if stem.name == "rda":
            with pytest.raises(pydb.FSTError) as ei:
                _pydb._index_build(str(dst / stem.name), fst.read_bytes(), utf8=utf8)
            assert ei.value.line == 2 and "unterminated conditional literal" in ei.value.reason
            lines = fst.read_bytes().split(b"\n")
            n = _pydb._index_build(str(dst / stem.name), b"\n".join(lines[:1] + lines[2:]),
                                   utf8=utf8)
            assert n == max_mfn
            done += 1
            continue
        n = _pydb._index_build(str(dst / stem.name), fst.read_bytes(), utf8=utf8)
        assert n == max_mfn, fst
        ix = _pydb._open_native_index(str(dst / stem.name))
        if max_mfn and fst.stat().st_size > 0 and "dcdspace" not in str(fst):
            assert all_terms(ix), fst
        done += 1
    assert done == 17


def test_a_build_that_skips_damaged_records_names_them(isis_data, tmp_path):
    """ABCD odds: MFN 49's XRF entry points at another MFN's record.  With
    on_damaged the build leaves that record out, tells it (MFN, file,
    offset, reason) after the new index is in place and indexes the other
    records as the build over the undamaged ones does; `pydb index
    --skip-damaged` names it on stderr and exits 0.  Without, the build
    fails, the CLI says how to skip, and the old index stays."""
    src = isis_data / "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds"
    if not Path(f"{src}.mst").exists():
        pytest.skip("odds not present")
    base = str(copy_db(src, tmp_path / "a", ("fst",)))
    with pytest.raises(pydb.CorruptionError):
        pydb.build_index(base)
    assert not os.path.exists(base + ".pdx/MANIFEST")
    told = []
    n = pydb.build_index(base, on_damaged=lambda mfn, e: told.append((mfn, e)))
    assert n == 87
    [(mfn, e)] = told
    assert (mfn, os.path.basename(e.filename), e.offset) == (49, "odds.mst", 28976)
    assert "has MFN 2019440690, but the XRF entry of MFN 49 points there" in e.reason
    with pydb.open(base) as db:
        mfns = {p.mfn for t in db.index.terms() for p in db.index.postings(t.key)}
        report = db.check()
    assert 49 not in mfns and {48, 50, 87} <= mfns
    assert (report.stats["index_keys"], report.stats["index_postings"]) == (428, 1763)
    assert [p.kind for p in report.problems if p.kind.startswith("index")] == []
    rc = subprocess.run([sys.executable, "-m", "pydb", "index", "--no-progress",
                         "--skip-damaged", base], capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    assert "pydb index: MFN 49 left out of the index: " in rc.stderr
    assert "1 damaged record left out of the index" in rc.stdout
    rc = subprocess.run([sys.executable, "-m", "pydb", "index", "--no-progress", base],
                        capture_output=True, text=True)
    assert rc.returncode == 1
    assert "--skip-damaged leaves damaged records out" in rc.stderr


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    given = None

EXAMPLES = hypothesis_examples(200)

if given is not None:
    @pytest.fixture(scope="module")
    def small_index(tmp_path_factory, isis_data):
        d = tmp_path_factory.mktemp("fuzz")
        base = str(copy_db(isis_data / SAMPLE / "cds", d))
        _pydb._index_build(base, b"24 4 v24\n70 0 (v70/)\n")
        seg = [os.path.join(base + ".pdx", f) for f in os.listdir(base + ".pdx")
               if f.endswith(".pds")][0]
        return base, seg, open(seg, "rb").read()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)),
                    min_size=1, max_size=4))
    def test_random_segment_damage_is_corruption(small_index, edits):
        """Bytes overwritten anywhere (checksum forged to match): the index
        opens and reads, or raises CorruptionError; never a crash."""
        base, seg, data = small_index
        bad = bytearray(data)
        for pos, val in edits:
            bad[pos % (len(bad) - 8)] = val
        struct.pack_into("<Q", bad, len(bad) - 8, _checksum(bytes(bad[:-8])))
        open(seg, "wb").write(bad)
        try:
            ix = _pydb._open_native_index(base)
            for k, _ in all_terms(ix):
                ix.postings(k)
            _pydb._testing.bench_scan(ix, b"", True)
        except pydb.CorruptionError:
            pass
        finally:
            open(seg, "wb").write(data)


def test_commits_never_merge_segments(cds):
    """Each commit adds one segment and merges nothing (merging is garbage
    collection: tests/test_index_gc.py); the tombstones of the newer
    segments hide the replaced postings, and every file is named."""
    ix = _pydb._open_native_index(cds)
    pdx = cds + ".pdx"
    base_water = ix.postings(b"WATER")

    def named():
        return manifest_segments(pdx)

    n0 = len(named())
    for i in range(20):
        # MFN 4 (a WATER record) rewritten each time; MFN 300+i appended
        _pydb._testing.native_hook(ix, "prepare", [
            (4, [(24, b"water round %s" % bytes([97 + i]))], False),
            (300 + i, [(24, b"water")], False)])
        _pydb._testing.native_hook(ix, "commit")
        assert len(named()) == n0 + i + 1
    files = [f"seg-{g:08d}.pds" for k, g in named() if k == "file"]
    assert sorted(f for f in os.listdir(pdx) if f.endswith(".pds")) == sorted(files)
    assert len(files) < len(named())      # small segments are inline
    want = sorted([p for p in base_water if p[0] != 4] + [(4, 24, 1, 1)] +
                  [(300 + i, 24, 1, 1) for i in range(20)])
    assert ix.postings(b"WATER") == want
    assert [k for k, _ in ix.terms(b"ROUND", None, 10)] == [b"ROUND"]
    assert ix.postings(b"ROUND") == [(4, 24, 1, 2)]
    assert ix.terms(b"T", None, 100000) == _pydb._open_native_index(cds).terms(b"T", None, 100000)
    assert _pydb._open_native_index(cds).postings(b"WATER") == want


def test_two_handles_commit_in_turn(cds):
    """Two handles (as two processes would) commit in turn: each adopts
    the other's newer MANIFEST before preparing, so no commit is lost and
    no live segment file is reused or removed."""
    a = _pydb._open_native_index(cds)
    b = _pydb._open_native_index(cds)
    _pydb._testing.native_hook(a, "prepare", [(1, [(24, b"aardvark")], False)])
    _pydb._testing.native_hook(a, "commit")
    _pydb._testing.native_hook(b, "prepare", [(2, [(24, b"bison")], False)])
    _pydb._testing.native_hook(b, "commit")
    fresh = _pydb._open_native_index(cds)
    for ix in (b, fresh):
        assert ix.postings(b"AARDVARK") == [(1, 24, 1, 1)]
        assert ix.postings(b"BISON") == [(2, 24, 1, 1)]
        assert ix.postings(b"TECHNIQUES")[0][0] != 1    # MFN 1 replaced
    # `a` reads follow b's commit (the MANIFEST is checked on each call),
    # and its own next commit builds on it
    assert a.postings(b"BISON") == [(2, 24, 1, 1)]
    _pydb._testing.native_hook(a, "prepare", [(3, [(24, b"camel")], False)])
    _pydb._testing.native_hook(a, "commit")
    assert a.postings(b"BISON") == [(2, 24, 1, 1)]
    assert _pydb._open_native_index(cds).postings(b"CAMEL") == [(3, 24, 1, 1)]


# ---- searches over several segments against a brute-force model ---------
# search_eval.c section 7: the right operand of *, ^, (G), (F) and
# proximity is read only at the MFNs of the left one (the segments'
# postings elsewhere read past, pydb__nseg_decode_in); here over random
# commits (updates, deletions, appends far above the others, so that a
# left side can be too sparse for a bitmap), compared with a model that
# evaluates the expression on the index's whole posting lists.

WORDS = ["ALPHA", "BETA", "GAMMA", "AL", "THE", "WATER"]
_record = st.one_of(
    st.none(),   # deleted
    st.builds(lambda words, subjects: ([(24, " ".join(words))] if words else [])
              + [(70, s) for s in subjects],
              st.lists(st.sampled_from(WORDS + WORDS[:3]), max_size=12),
              st.lists(st.sampled_from(WORDS[:4]), max_size=3)))
_commits = st.lists(st.dictionaries(st.sampled_from([1, 2, 3, 4, 5, 150, 151, 152, 90_000]),
                                    _record, min_size=1, max_size=9),
                    min_size=1, max_size=4)
_terms = st.builds(lambda t, trunc, tags: ("term", t, trunc, tags),
                   st.sampled_from(WORDS + ["GAMMA"]), st.booleans(),
                   st.one_of(st.just(()), st.sampled_from([(24,), (70,), (24, 70)])))
_trees = tree_strategy(_terms, 3, 5)
# one level's chain without parentheses, "a $ b . c": the parser makes it
# one node of several operands (csrc/search_parse.c), which search_eval.c
# evaluates rarest first; the model nests it to the left.  Mostly plain
# words and proximity, where the order of the operators matters.
_operands = st.one_of(*[st.builds(lambda t: ("term", t, False, ()),
                                  st.sampled_from(WORDS[:3]))] * 3, _trees)
_chains = st.sampled_from([["*"], ["(G)"], ["(F)"], [".", "$"], [".", "$"]]).flatmap(
    lambda ops: st.tuples(st.lists(_operands, min_size=3, max_size=5),
                          st.lists(st.tuples(st.sampled_from(ops), st.integers(1, 2)),
                                   min_size=5, max_size=5)))


def _chain(operands, ops):
    """(expression, model tree) of a chain."""
    text, tree = render(operands[0]), operands[0]
    for operand, (op, n) in zip(operands[1:], ops[:len(operands) - 1], strict=True):
        text += f" {' '.join(op * n) if op in '.$' else op} {render(operand)}"
        tree = ("op", op, n, tree, operand)
    return text, tree


@pytest.fixture(scope="module")
def cds_built(isis_data, tmp_path_factory):
    base = copy_db(isis_data / SAMPLE / "cds", tmp_path_factory.mktemp("cds"), ("fst", "stw"))
    pydb.build_index(str(base), progress=False, max_key=30)
    return base


@settings(max_examples=hypothesis_examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commits=_commits, trees=st.lists(_trees, min_size=1, max_size=6),
       chains=st.lists(_chains, max_size=3))
def test_positional_searches_over_segments_match_model(cds_built, tmp_path_factory, commits,
                                                       trees, chains):
    work = tmp_path_factory.mktemp("segs")
    for f in cds_built.parent.iterdir():
        (shutil.copytree if f.is_dir() else shutil.copy)(f, work / f.name)
    ix = _pydb._open_native_index(str(work / cds_built.name))
    for changes in commits:
        _pydb._testing.native_hook(ix, "prepare", [
            (mfn, None if rec is None else [(t, v.encode()) for t, v in rec], rec is None)
            for mfn, rec in sorted(changes.items())])
        _pydb._testing.native_hook(ix, "commit")
    table = {k: ix.postings(k) for k, _ in ix.terms(b"", None, 10**6)}
    for expr, tree in [(render(t), t) for t in trees] + [_chain(*c) for c in chains]:
        want = sorted({p[0] for p in ref_eval(tree, table)})
        assert list(search(ix, expr)) == want, expr
    ix.close()


def test_chain_of_operators_keeps_its_order(cds):
    """A chain of one level is evaluated rarest first but combined in its
    own order: ((A . B) $ $ $ C) is not ((A $ $ $ B) . C)."""
    ix = _pydb._open_native_index(cds)
    _pydb._testing.native_hook(ix, "prepare", [(1, [(24, b"alpha beta gamma")], False),
                                               (2, [(24, b"gamma alpha beta")], False)])
    _pydb._testing.native_hook(ix, "commit")
    for expr, want in [("ALPHA . BETA $ $ $ GAMMA", []), ("ALPHA . BETA $ $ GAMMA", [1, 2]),
                       ("ALPHA $ $ GAMMA . BETA", [1]), ("GAMMA . ALPHA $ BETA", [2]),
                       ("GAMMA $ $ ALPHA . BETA", [1]), ("BETA * ALPHA * GAMMA * WATER", []),
                       ("BETA (F) ALPHA (F) GAMMA", [1, 2])]:
        assert list(search(ix, expr)) == want, expr


def test_a_damaged_manifest_says_how_to_build_the_index_anew(tmp_path):
    """The open of a writable handle and a search meet a damaged MANIFEST:
    the error names the file and offset, and ends with the command that
    builds the index anew (only the validator said it)."""
    base = tmp_path / "d"
    with pydb.create(base, fst="24 4 v24\n") as db:
        db.append([(24, "hello world")])
    with open(base.with_suffix(".pdx") / "MANIFEST", "r+b") as f:
        f.write(b"XXXX")
    hint = f"(the native index can be built anew from the records: python -m pydb index {base})"
    with pytest.raises(pydb.CorruptionError) as e:
        pydb.open(base, readonly=False)
    assert e.value.filename == str(base.with_suffix(".pdx") / "MANIFEST")
    assert e.value.offset == 0 and e.value.reason.endswith(hint)
    with pydb.open(base) as db, pytest.raises(pydb.CorruptionError) as e:
        db.search("HELLO")
    assert e.value.reason == "manifest: bad magic line " + hint


def test_an_index_built_by_another_process_is_found_by_an_open_handle(tmp_path, monkeypatch):
    """A read-only handle that found no index finds the one another
    process builds later, once pydb.database.NO_INDEX_RECHECK seconds
    have passed since it looked (it kept answering "no inverted index"
    until closed: a service developer's trial); within that time the
    answer stands (no look at the folder per call)."""
    from pydb import database
    base = tmp_path / "x"
    with pydb.create(base) as db:
        db.append([(24, "later found")])
    (tmp_path / "x.fst").write_text("24 4 v24\n")
    monkeypatch.setattr(database, "NO_INDEX_RECHECK", 3600.0)
    with pydb.open(base) as db:
        assert db.index is None
        with pytest.raises(pydb.UnsupportedError, match="no inverted index"):
            db.search("LATER")
        env = dict(os.environ, PYTHONPATH=str(Path(pydb.__file__).parents[1]))
        subprocess.run([sys.executable, "-m", "pydb", "index", str(base)],
                       env=env, check=True, capture_output=True, timeout=120)
        assert db.index is None           # within the interval: the answer stands
        monkeypatch.setattr(database, "NO_INDEX_RECHECK", 0.0)
        assert db.index is not None and list(db.search("LATER")) == [1]
        monkeypatch.setattr(database, "NO_INDEX_RECHECK", 3600.0)
        assert list(db.search("LATER")) == [1]   # an index found is kept
