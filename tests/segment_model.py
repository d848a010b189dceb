"""A reference of the native index's segment layout (csrc/nidx_seg.h),
written apart from the C encoder: it reads a segment file into its terms'
posting lists and writes one back, byte for byte, in format version 5
(a dense list keeps each record's TAG mask), 4 (lists of more than 128
postings led by their form: a skip table, or dense: a bitmap of their
records), 3 (such lists led by a skip table) or 2 (no skip tables: what
pydb before skip tables wrote).  Tests compare the
files the core writes with it and forge old or damaged segments with
it."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from test_native_index import _checksum as crc32c

MAGIC = b"PYDBSEG1"
HEADER = 64
BLOCK_TERMS = 32   # dictionary terms per block
SKIP = 128         # postings per block of a skip table
FORM_SKIP, FORM_DENSE = 0, 1   # the forms of a version-4 list of > SKIP
VERSION = 5                    # what the core writes


def tag_bit(tag: int) -> int:
    """The bit of a TAG in a record's TAG mask (version 5): the top three
    bits of TAG * 0x9E3779B1 modulo 2**32."""
    return (tag * 0x9E3779B1 & 0xFFFFFFFF) >> 29


def tag_mask(postings) -> int:
    """A record's TAG mask: the bits of its postings' TAGs."""
    m = 0
    for p in postings:
        m |= 1 << tag_bit(p[1])
    return m


def varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def read_varint(b: bytes, i: int) -> tuple[int, int]:
    """(value, position after it) of the varint at b[i]."""
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7


def posting_bytes(postings) -> tuple[bytes, list[int]]:
    """The postings [(mfn, tag, occ, cnt)] (ascending) as varints, and
    the offset of each posting's first byte."""
    out, starts = bytearray(), []
    last = (0, 0, 0, 0)
    for p in postings:
        starts.append(len(out))
        m, t, o, c = p
        if m != last[0]:
            out += varint(m - last[0]) + varint(t) + varint(o) + varint(c)
        elif t != last[1]:
            out += varint(0) + varint(t - last[1]) + varint(o) + varint(c)
        elif o != last[2]:
            out += varint(0) + varint(0) + varint(o - last[2]) + varint(c)
        else:
            out += varint(0) * 3 + varint(c - last[3])
        last = p
    return bytes(out), starts


def skip_entries(postings) -> list[tuple[int, tuple]]:
    """[(offset of block k's first posting, posting 128k - 1)] for each
    block k >= 1 of a list of more than SKIP postings, else []."""
    if len(postings) <= SKIP:
        return []
    _, starts = posting_bytes(postings)
    return [(starts[i], tuple(postings[i - 1])) for i in range(SKIP, len(postings), SKIP)]


def same_record(last: tuple, a: int, b: int, c: int) -> tuple:
    """(TAG, OCC, CNT) of a posting after `last` of the same record, whose
    varints are a, b, c: a TAG delta, or an OCC delta, or a CNT delta."""
    t, o, cnt = last
    if a:
        return t + a, b, c
    if b:
        return t, o + b, c
    return t, o, cnt + c


def record_bytes(postings) -> bytes:
    """The postings of one record as a dense list holds them: the first's
    TAG, OCC, CNT, then each by the delta rule without the MFN."""
    (_, t0, o0, c0), out = postings[0], bytearray()
    out += varint(t0) + varint(o0) + varint(c0)
    for (_, pt, po, pc), (_, t, o, c) in zip(postings, postings[1:], strict=False):
        if t != pt:
            out += varint(t - pt) + varint(o) + varint(c)
        elif o != po:
            out += varint(0) + varint(o - po) + varint(c)
        else:
            out += varint(0) * 2 + varint(c - pc)
    return bytes(out)


def records(postings) -> list[tuple[int, list]]:
    """[(mfn, its postings)] in MFN order."""
    out: list[tuple[int, list]] = []
    for p in postings:
        if out and out[-1][0] == p[0]:
            out[-1][1].append(tuple(p))
        else:
            out.append((p[0], [tuple(p)]))
    return out


def is_dense(postings) -> bool:
    """Whether a list of more than SKIP postings takes the dense form:
    bitmap words at most a quarter of its records."""
    nwords = ((postings[-1][0] - postings[0][0]) >> 6) + 1
    return nwords * 4 <= len(records(postings))


def dense_bytes(postings, version: int = VERSION) -> bytes:
    """The dense form after its form byte: lo, words, records; the words,
    the byte offset and the rank of each word's first record, each
    record's length (255: 255 or more, given again as a varint before its
    bytes), from version 5 each record's TAG mask, the records."""
    lo = postings[0][0]
    nwords = ((postings[-1][0] - lo) >> 6) + 1
    words, offs, ranks = [0] * nwords, [], []
    lens, masks, body = bytearray(), bytearray(), bytearray()
    for r, (m, ps) in enumerate(records(postings)):
        k = (m - lo) >> 6
        while len(offs) <= k:
            offs.append(len(body))
            ranks.append(r)
        words[k] |= 1 << ((m - lo) & 63)
        rb = record_bytes(ps)
        lens.append(min(len(rb), 255))
        masks.append(tag_mask(ps))
        body += (varint(len(rb)) if len(rb) >= 255 else b"") + rb
    offs.append(len(body))
    return (varint(lo) + varint(nwords) + varint(len(lens))
            + struct.pack(f"<{nwords}Q", *words) + struct.pack(f"<{nwords + 1}I", *offs)
            + struct.pack(f"<{nwords}I", *ranks) + bytes(lens)
            + (bytes(masks) if version >= 5 else b"") + bytes(body))


def list_bytes(postings, version: int = VERSION, form: int | None = None) -> bytes:
    """A posting list as a segment of `version` holds it; a list of more
    than SKIP postings of version 4 or later in `form` (None: the one the
    writer picks)."""
    if version >= 4 and len(postings) > SKIP:
        if form is None:
            form = FORM_DENSE if is_dense(postings) else FORM_SKIP
        if form == FORM_DENSE:
            return bytes([FORM_DENSE]) + dense_bytes(postings, version)
        return bytes([FORM_SKIP]) + list_bytes(postings, 3)
    body, _ = posting_bytes(postings)
    entries = skip_entries(postings) if version >= 3 else []
    if not entries:
        return body
    table, prev_off, prev_mfn = bytearray(), 0, 0
    for off, (m, t, o, c) in entries:
        table += varint(off - prev_off) + varint(m - prev_mfn) + varint(t) + varint(o) + varint(c)
        prev_off, prev_mfn = off, m
    return varint(len(table)) + bytes(table) + body


def decode_dense(b: bytes, version: int = VERSION) -> list[tuple]:
    """The postings of a dense list's bytes after its form byte (the TAG
    masks of version 5 passed)."""
    lo, i = read_varint(b, 0)
    nwords, i = read_varint(b, i)
    nrec, i = read_varint(b, i)
    words = struct.unpack_from(f"<{nwords}Q", b, i)
    i += 8 * nwords + 4 * (nwords + 1) + 4 * nwords
    lens, i = b[i:i + nrec], i + nrec
    if version >= 5:
        i += nrec
    mfns = [lo + 64 * k + bit for k, w in enumerate(words) for bit in range(64) if w >> bit & 1]
    out = []
    for m, n in zip(mfns, lens, strict=True):
        if n == 255:
            n, i = read_varint(b, i)
        end, first = i + n, True
        t = o = c = 0
        while i < end:
            a, i = read_varint(b, i)
            bb, i = read_varint(b, i)
            cc, i = read_varint(b, i)
            t, o, c = (a, bb, cc) if first else same_record((t, o, c), a, bb, cc)
            first = False
            out.append((m, t, o, c))
    return out


def decode_list(b: bytes, count: int, version: int) -> list[tuple]:
    """The postings of list bytes b (the skip table, if any, passed)."""
    i = 0
    if version >= 4 and count > SKIP:
        if b[0] == FORM_DENSE:
            out = decode_dense(b[1:], version)
            assert len(out) == count
            return out
        return decode_list(b[1:], count, 3)
    if version >= 3 and count > SKIP:
        n, i = read_varint(b, 0)
        i += n
    out, m, t, o, c = [], 0, 0, 0, 0
    while i < len(b):
        dm, i = read_varint(b, i)
        a, i = read_varint(b, i)
        bb, i = read_varint(b, i)
        cc, i = read_varint(b, i)
        if dm:
            m, t, o, c = m + dm, a, bb, cc
        else:
            t, o, c = same_record((t, o, c), a, bb, cc)
        out.append((m, t, o, c))
    assert len(out) == count
    return out


@dataclass
class Segment:
    version: int
    terms: list = field(default_factory=list)   # [(key, count, list bytes)]
    tombstones: list = field(default_factory=list)


def read_segment(data: bytes) -> Segment:
    assert data[:8] == MAGIC
    version, per_block = struct.unpack_from("<II", data, 8)
    nterms, _nposts, dict_off, bidx_off, nblocks, tomb_off = struct.unpack_from("<6Q", data, 16)
    assert per_block == BLOCK_TERMS
    seg = Segment(version)
    for b in range(nblocks):
        start = struct.unpack_from("<Q", data, bidx_off + 8 * b)[0]
        end = struct.unpack_from("<Q", data, bidx_off + 8 * (b + 1))[0] if b + 1 < nblocks \
            else bidx_off
        poff = struct.unpack_from("<Q", data, start)[0]
        i, key = start + 8, b""
        while i < end:
            shared, i = read_varint(data, i)
            slen, i = read_varint(data, i)
            key = key[:shared] + data[i:i + slen]
            i += slen
            count, i = read_varint(data, i)
            plen, i = read_varint(data, i)
            seg.terms.append((key, count, data[poff:poff + plen]))
            poff += plen
    assert len(seg.terms) == nterms
    (ntomb,) = struct.unpack_from("<I", data, tomb_off)
    seg.tombstones = list(struct.unpack_from(f"<{ntomb}i", data, tomb_off + 4))
    return seg


def write_segment(seg: Segment) -> bytes:
    """The file of seg (its list bytes as they are; version in the header)."""
    body = bytearray(HEADER)
    dictionary, blocks = bytearray(), []
    nposts, prev = 0, b""
    for n, (key, count, lst) in enumerate(seg.terms):
        if n % BLOCK_TERMS == 0:
            blocks.append(len(dictionary))
            dictionary += struct.pack("<Q", len(body))
            prev = b""
        shared = 0
        while shared < min(len(prev), len(key)) and prev[shared] == key[shared]:
            shared += 1
        dictionary += varint(shared) + varint(len(key) - shared) + key[shared:]
        dictionary += varint(count) + varint(len(lst))
        body += lst
        nposts += count
        prev = key
    dict_off = len(body)
    body += dictionary
    bidx_off = len(body)
    for b in blocks:
        body += struct.pack("<Q", dict_off + b)
    tomb_off = len(body)
    body += struct.pack("<I", len(seg.tombstones))
    body += b"".join(struct.pack("<i", t) for t in seg.tombstones)
    struct.pack_into("<8sII6Q", body, 0, MAGIC, seg.version, BLOCK_TERMS, len(seg.terms),
                     nposts, dict_off, bidx_off, len(blocks), tomb_off)
    return bytes(body) + struct.pack("<Q", crc32c(bytes(body)))


def as_version(data: bytes, version: int) -> bytes:
    """The segment file `data` rewritten in `version` (4: dense lists
    without TAG masks; 3: no dense lists; 2: no skip tables either)."""
    seg = read_segment(data)
    terms = [(k, c, list_bytes(decode_list(lst, c, seg.version), version))
             for k, c, lst in seg.terms]
    return write_segment(Segment(version, terms, seg.tombstones))
