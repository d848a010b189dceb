/*
 * nidx_seg.h - the segment file of the native index: its layout, opening
 * and validating a segment, cursors over its dictionary, decoding and
 * encoding posting lists (nidx_seg.c).
 *
 * A segment (seg-GGGGGGGG.pds, or inline in the MANIFEST: the same bytes;
 * immutable once written; little-endian):
 *   0   header, 64 bytes: "PYDBSEG1", u32 format version
 *       (NIDX_SEG_VERSION), u32 terms per block (32), u64 terms, u64
 *       postings, u64 dictionary offset, u64 block index offset, u64
 *       blocks, u64 tombstone offset
 *   64  posting lists, one per term in key order, postings ascending by
 *       (MFN, TAG, OCC, CNT) and distinct, each posting four LEB128
 *       varints: MFN delta from the posting before (the first: from 0);
 *       TAG (delta if same MFN); OCC (delta if same MFN and TAG); CNT
 *       (delta if same MFN, TAG, OCC).  A list of more than NIDX_SKIP
 *       (128) postings is led by a skip table, so that a reader that
 *       wants the postings of a few MFNs passes the blocks of 128
 *       postings that cannot hold them (Lucene's skip lists do the same:
 *       org.apache.lucene.codecs.MultiLevelSkipListWriter): varint the
 *       table's length in bytes, then for each block k >= 1 (postings
 *       128k...) five varints: the offset of its first posting from
 *       block k - 1's (block 0 starts right after the table), and the
 *       posting before it, 128k - 1: MFN (delta from the previous
 *       entry's; the first: from 0), TAG, OCC, CNT.  The postings are
 *       the same bytes as without the table.  A segment of version 2
 *       (before skip tables) has no table; it is read as ever.
 *       Version 4: a list of more than NIDX_SKIP postings starts with a
 *       form byte: NIDX_FORM_SKIP, then the list as version 3 has it
 *       (table and postings), or NIDX_FORM_DENSE, for a list whose
 *       records are dense in its MFN range (bitmap words <= records /
 *       4: at most 16 MFNs of the range per record), then:
 *         varints lo (the first MFN), nwords (>= 1; the range is lo ..
 *         lo + 64 * nwords - 1, within 1 .. 2^31 - 1), nrec (records);
 *         nwords u64 words: bit i of word k set for each record lo +
 *         64k + i (bit 0 of word 0 set: lo is a record; the last word
 *         not 0);
 *         nwords + 1 u32 offsets: where, in the records below, word k's
 *         first record starts (the next record's start for a word with
 *         none; the last entry: the records' length);
 *         nwords u32 ranks: the records before word k's first;
 *         nrec bytes: each record's length in bytes, or 255 for 255 or
 *         more (its length then a varint before its bytes);
 *         version 5: nrec bytes, each record's TAG mask: bit
 *         pydb__nseg_tag_bit(TAG) set for the TAG of each of its
 *         postings;
 *         the records in MFN order: its postings (at least one,
 *         ascending by TAG, OCC, CNT), the first as three varints TAG,
 *         OCC, CNT, each next as three varints by the delta rule above
 *         without the MFN (TAG delta, OCC, CNT; or 0, OCC delta, CNT; or
 *         0, 0, CNT delta).
 *       A search reads such a list a word at a time: the words ANDed
 *       with the records it wants, the MFNs of a record-level search
 *       from the bits alone, the postings of a record found from its
 *       word's entries and the lengths before it (Roaring bitmaps keep
 *       dense sets so: Lemire et al., "Better bitmap performance with
 *       Roaring bitmaps", 2016).  A chain of (G), (F) and proximity
 *       holds a record only where its terms share a TAG, so it passes
 *       the records whose TAG masks share no bit without reading them
 *       (pydb__nseg_tag_masks).  A mask is data, as a posting's TAG is:
 *       the checksum guards it; a reader checks only where it lies.
 *   dictionary: blocks of 32 terms; a block starts with the u64 offset of
 *       its first term's postings, then per term: varint shared prefix
 *       length with the previous key of the block (0 for the first),
 *       varint suffix length, suffix bytes, varint posting count, varint
 *       posting bytes
 *   block index: u64 file offset of each block
 *   tombstones: u32 n, then n ascending i32 MFNs: records this segment
 *       supersedes — their postings in every older segment are dead
 *   u64 checksum: CRC-32C of all bytes before it (high 32 bits zero)
 * Every offset and length is checked against the file before use; a
 * damaged segment is PYDB_ECORRUPT (file, offset, reason).
 *
 * This layer knows one segment at a time; which segments are live, and
 * which postings a newer segment's tombstones kill, is the segment set's
 * business (nidx_handle.h), passed in here as a callback.
 *
 * Depends on: util.h (codecs, buffer, CRC-32C), index_int.h (postings,
 * key order).
 */
#ifndef PYDB_NIDX_SEG_H
#define PYDB_NIDX_SEG_H

#include <stdatomic.h>
#include "index_int.h"

/* Format version of the segments.  5: a dense list keeps each record's
 * TAG mask; 4: lists of more than NIDX_SKIP postings lead with their
 * form (a skip table, or dense; read, not written); 3: such lists lead
 * with a skip table (read, not written); 2: none has one (read, not
 * written); 1 (an ad-hoc 64-bit checksum, not CRC-32C) and any other are
 * PYDB_ECORRUPT saying so: rebuild the index. */
#define NIDX_SEG_VERSION 5
#define NIDX_SEG_VERSION_DENSE 4
#define NIDX_SEG_VERSION_SKIP 3
#define NIDX_SEG_VERSION_NO_SKIP 2
/* The bit of a TAG in a record's TAG mask (segment format 5): the top
 * three bits of the TAG times 2^32 / phi (Knuth's multiplicative hash),
 * so that the tags of one database, often a few apart, spread over the
 * eight bits. */
static inline unsigned pydb__nseg_tag_bit(uint32_t tag)
{
    return (unsigned)((tag * 0x9E3779B1u) >> 29);
}

/* The forms of a list of more than NIDX_SKIP postings (version >= 4) */
#define NIDX_FORM_SKIP 0
#define NIDX_FORM_DENSE 1
/* Postings per block of a skip table */
#define NIDX_SKIP 128
#define NIDX_SEG_MAGIC "PYDBSEG1"
#define NIDX_SEG_HDR 64
#define NIDX_BLOCK_TERMS 32

/* An open (mapped) segment, shared by reference count between segment
 * sets; immutable after pydb__nseg_open. */
typedef struct nidx_seg {
    atomic_int refs;
    char path[1100];         /* a file; an inline one: "MANIFEST (...)"  */
    uint8_t *map;            /* the bytes: mapped, or malloc'ed (inl)    */
    size_t size;
    int inl;                 /* inline: its bytes live in the MANIFEST   */
    uint32_t version;        /* NIDX_SEG_VERSION or _NO_SKIP            */
    uint64_t nterms, nposts, nblocks, dict_off, bidx_off, tomb_off;
    uint32_t ntomb;
    uint32_t nupd;           /* of the tombstones, those of records updated
                                or deleted (the rest: MFNs its commit
                                appended, which hide nothing), as far as
                                this process knows: the commit that made
                                it, or the merge (nidx_gc.c); ntomb for
                                one read from a file or a MANIFEST      */
    const uint8_t *tomb;     /* ntomb i32, little-endian */
    uint64_t gen;
    uint64_t serial;         /* this open segment's, unique in the process
                                (pydb__ncur_seek's memo) */
    pydb_residency res;      /* which pages of map are in the page cache */
} nidx_seg;

/* Map and validate the segment at path (generation gen); *out holds one
 * reference.  PYDB_ECORRUPT (path, offset, reason) for a damaged or
 * foreign file, or one of another format version. */
int pydb__nseg_open(nidx_seg **out, const char *path, uint64_t gen,
                    pydb_error *err);
/* The same for the bytes of an inline segment (a copy is kept), which
 * the MANIFEST at path `manifest` holds (nidx_manifest.h); messages name
 * it "<manifest> (inline segment G)", offsets within the segment. */
int pydb__nseg_open_inline(nidx_seg **out, const char *manifest,
                           uint64_t gen, const uint8_t *bytes, size_t len,
                           pydb_error *err);
/* Drop one reference (NULL is ignored); the last one unmaps (frees). */
void pydb__nseg_unref(nidx_seg *s);
/* 1 if every page of the segment is known to be in the page cache
 * (resident.c: a mincore(2) at most PYDB_RES_TTL_MS ago), so that reading
 * it cannot wait for the disk. */
int pydb__nseg_resident(const nidx_seg *s);
/* Tombstone i (< s->ntomb), ascending in i. */
static inline int32_t pydb__nseg_tomb(const nidx_seg *s, uint32_t i)
{
    return (int32_t)pydb__u32(s->tomb + 4 * (size_t)i);
}
/* 1 if the segment tombstones mfn. */
int pydb__nseg_has_tomb(const nidx_seg *s, int32_t mfn);
/* <dir>/seg-GGGGGGGG.pds (8 digits at least: more past 99,999,999) */
void pydb__nseg_path(char *out, size_t cap, const char *dir, uint64_t gen);
/* The generation written at p[0..n) as a segment's name has it (8 to 20
 * decimal digits, no more after them, at most 2^64 - 1) into *gen: the
 * digits read, or 0 when it is not one. */
size_t pydb__nseg_gen_digits(const uint8_t *p, size_t n, uint64_t *gen);
/* 1 if the file name `name` is a segment's, seg-G.pds (*gen = G). */
int pydb__nseg_name_gen(const char *name, uint64_t *gen);

/* A cursor over the dictionary of one segment. */
typedef struct nidx_cursor {
    const nidx_seg *s;
    size_t idx;              /* position in the segment list (caller's) */
    uint64_t blk, term;      /* current block; global term number */
    const uint8_t *p, *end;  /* next entry; end of the block */
    uint64_t poff;           /* postings offset of the next entry */
    uint8_t *key;            /* malloc'ed; the caller frees it */
    size_t klen, kcap;
    uint64_t count, pstart, plen;
    int valid;
} nidx_cursor;

/* Position before the first entry of block b (< s->nblocks). */
int pydb__ncur_block(nidx_cursor *c, uint64_t b, pydb_error *err);
/* Decode the next entry into the cursor (valid = 0 at the end). */
int pydb__ncur_next(nidx_cursor *c, pydb_error *err);
/* Position at the first key >= target (valid = 0: none).  The thread's
 * last seeks are remembered, and the same seek in the same segment again
 * costs a copy of the cursor. */
int pydb__ncur_seek(nidx_cursor *c, const uint8_t *t, size_t tl,
                    pydb_error *err);

/* 1 if the postings of mfn are dead (tombstoned by a newer segment). */
typedef int (*nidx_dead_fn)(const void *ctx, int32_t mfn);

/* Decode the posting list at the cursor's current entry: *live gets the
 * number of postings dead() (NULL: none dead) does not kill, and those
 * are appended to out (NULL: only counted). */
int pydb__nseg_decode(pydb_postings *out, const nidx_cursor *c,
                      nidx_dead_fn dead, const void *dead_ctx,
                      uint64_t *live, pydb_error *err);
/* The same, but when keep is given only the postings whose MFN is in
 * *keep count as live and are appended: the others are read past
 * (checked as ever) without being stored, and a block of the list's skip
 * table whose MFNs hold none of keep is passed unread. */
int pydb__nseg_decode_in(pydb_postings *out, const nidx_cursor *cur,
                         nidx_dead_fn dead, const void *dead_ctx,
                         const pydb_mfn_bits *keep, uint64_t *live,
                         pydb_error *err);
/* The same for the records alone: the MFN of each record the list has
 * live postings of (in *keep when given) appended to out once,
 * ascending, and *live their number; the postings are parsed and checked
 * as pydb__nseg_decode_in checks them, but not stored (a dense list's
 * records are not read: its bitmap says which they are). */
int pydb__nseg_mfns_in(pydb_mfns *out, const nidx_cursor *cur,
                       nidx_dead_fn dead, const void *dead_ctx,
                       const pydb_mfn_bits *keep, uint64_t *live,
                       pydb_error *err);

/* The records of the list at the cursor as bits, where the list is
 * dense: *dense 1, its MFNs lo .. lo + 64 * nwords - 1 in *lo and
 * *nwords, and *words its bitmap in the segment (nwords 64-bit
 * little-endian words: pydb__u64), its header checked (PYDB_ECORRUPT);
 * *dense 0 and nothing else set for a list of another form.  No record
 * is read; dead postings are the caller's business. */
int pydb__nseg_dense_bits(const nidx_cursor *cur, int *dense, uint64_t *lo,
                          uint64_t *nwords, const uint8_t **words,
                          pydb_error *err);

/* The TAG masks of the list at the cursor for the records in *in, where
 * the list is dense and keeps them (segment format 5): *known 1, and
 * for each record of both, in's i-th (rank[k]: the records of in before
 * its word k), m[i] |= its mask; *known 0 and nothing done for a list of
 * another form or version.  The directory's ranks of every word met are
 * checked (PYDB_ECORRUPT); no record is read. */
int pydb__nseg_tag_masks(const nidx_cursor *cur, const pydb_mfn_bits *in,
                         const uint32_t *rank, uint8_t *m, int *known,
                         pydb_error *err);

/* Writing a segment: begin with the number of terms, one call per term
 * in key order, finish with the tombstones. */
typedef struct nidx_seg_enc {
    pydb_buf *out;
    pydb_buf dict;
    uint64_t *blocks;        /* dictionary offset of each block */
    uint64_t nblocks, nterms, want_terms, nposts;
    const uint8_t *prev;     /* previous key of the block */
    size_t prev_len;
} nidx_seg_enc;

/* Start a segment of at most nterms terms in out (empty); a merge that
 * drops dead keys adds fewer. */
int pydb__nseg_enc_begin(nidx_seg_enc *e, pydb_buf *out, uint64_t nterms,
                         pydb_error *err);
/* Add a term: key (greater than the previous one, alive until the next
 * call) and its postings v[n] (n >= 1, ascending, no duplicates). */
void pydb__nseg_enc_term(nidx_seg_enc *e, const uint8_t *key, size_t len,
                         const pydb_posting *v, size_t n);
/* Add the tombstones (ascending), the header and the checksum. */
int pydb__nseg_enc_finish(nidx_seg_enc *e, const int32_t *tombs,
                          size_t ntombs, pydb_error *err);
void pydb__nseg_enc_free(nidx_seg_enc *e);

/* The parts of the encoder, for writers that stream a segment to a file
 * (nidx_spill.c) and must write the same bytes:
 * the posting list v[n] (ascending, no duplicates) as a segment holds
 * it, its skip table first when it has one, appended to out; */
void pydb__nseg_put_postings(pydb_buf *out, const pydb_posting *v, size_t n);
/* the postings alone, without a skip table (the first MFN delta is its
 * MFN): a list of at most NIDX_SKIP postings as a segment holds it, and
 * the form the bulk build's runs concatenate (nidx_spill.h); */
void pydb__nseg_put_varints(pydb_buf *out, const pydb_posting *v, size_t n);
/* the count postings such bytes p[len] hold appended to out:
 * PYDB_ECORRUPT naming path and off + the offset in p (off < 0: -1)
 * when they are damaged or not count; */
int pydb__nseg_get_varints(pydb_postings *out, const uint8_t *p, size_t len,
                           uint64_t count, const char *path, int64_t off,
                           pydb_error *err);
/* the LEB128 varint of v into o[10]: its length in bytes; */
static inline size_t pydb__nseg_varint_bytes(uint8_t *o, uint64_t v)
{
    size_t k = 0;
    while (v >= 0x80) {
        o[k++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    o[k++] = (uint8_t)v;
    return k;
}
/* one LEB128 varint appended to out; */
static inline void pydb__nseg_put_varint(pydb_buf *out, uint64_t v)
{
    if (out->cap - out->n < 10 && pydb__buf_reserve(out, 10) < 0) return;
    out->n += pydb__nseg_varint_bytes(out->p + out->n, v);
}
/* the dictionary entry of term number `term` (a block's first entry is
 * led by pbeg, the file offset of its postings): prev[prev_len] is the
 * previous key of the block, count and plen the term's postings and
 * their bytes; */
void pydb__nseg_dict_entry(pydb_buf *dict, uint64_t term, uint64_t pbeg,
                           const uint8_t *prev, size_t prev_len,
                           const uint8_t *key, size_t len, uint64_t count,
                           uint64_t plen);
/* the 64-byte header. */
void pydb__nseg_header(uint8_t hdr[NIDX_SEG_HDR], uint64_t nterms,
                       uint64_t nposts, uint64_t dict_off, uint64_t bidx_off,
                       uint64_t tomb_off);

#endif
