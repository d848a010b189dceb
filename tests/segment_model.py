"""A reference of the native index's segment layout (csrc/nidx_seg.h),
written apart from the C encoder: it reads a segment file into its terms'
posting lists and writes one back, byte for byte, in format version 3
(lists of more than 128 postings led by a skip table) or 2 (no skip
tables: what pydb before skip tables wrote).  Tests compare the files the
core writes with it and forge old or damaged segments with it."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from test_native_index import _checksum as crc32c

MAGIC = b"PYDBSEG1"
HEADER = 64
BLOCK_TERMS = 32   # dictionary terms per block
SKIP = 128         # postings per block of a skip table


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


def list_bytes(postings, version: int = 3) -> bytes:
    """A posting list as a segment of `version` holds it."""
    body, _ = posting_bytes(postings)
    entries = skip_entries(postings) if version >= 3 else []
    if not entries:
        return body
    table, prev_off, prev_mfn = bytearray(), 0, 0
    for off, (m, t, o, c) in entries:
        table += varint(off - prev_off) + varint(m - prev_mfn) + varint(t) + varint(o) + varint(c)
        prev_off, prev_mfn = off, m
    return varint(len(table)) + bytes(table) + body


def decode_list(b: bytes, count: int, version: int) -> list[tuple]:
    """The postings of list bytes b (the skip table, if any, passed)."""
    i = 0
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
        elif a:
            t, o, c = t + a, bb, cc
        elif bb:
            o, c = o + bb, cc
        else:
            c += cc
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
    """The segment file `data` rewritten in `version` (2: skip tables
    left out)."""
    seg = read_segment(data)
    terms = [(k, c, list_bytes(decode_list(lst, c, seg.version), version))
             for k, c, lst in seg.terms]
    return write_segment(Segment(version, terms, seg.tombstones))
