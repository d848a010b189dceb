/*
 * nidx_seg.c - the segment file of the native index (layout in
 * nidx_seg.h): open and validate, dictionary cursors, posting list
 * decoding, and the encoder that writes a segment.
 *
 * Depends on: util.h (codecs, buffer, CRC-32C), index_int.h (key order,
 * posting lists), the vfs.  Nothing here knows about other
 * segments, the MANIFEST or the index handle.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nidx_seg.h"

/* ------------------------------------------------------------ varints */

static inline int rd_varint(const uint8_t **pp, const uint8_t *end,
                            uint64_t *v)
{
    const uint8_t *p = *pp;
    uint64_t r = 0;
    int shift = 0;
    if (p < end && *p < 0x80) {   /* one byte: most posting fields */
        *v = *p;
        *pp = p + 1;
        return 0;
    }
    while (p < end) {
        uint8_t c = *p++;
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *pp = p;
            *v = r;
            return 0;
        }
        shift += 7;
        if (shift > 63) return -1;
    }
    return -1;
}

/* ------------------------------------------------------------ reading */

void pydb__nseg_unref(nidx_seg *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
    if (s->inl) free(s->map);
    else if (s->map) munmap(s->map, s->size);
    pydb__resident_free(&s->res);
    free(s);
}

int pydb__nseg_resident(const nidx_seg *s)
{
    if (s->inl) return 1;   /* in memory */
    return s->res.chunks && pydb__resident(&s->res, s->map, s->size, 0,
                                           s->size);
}

int pydb__nseg_has_tomb(const nidx_seg *s, int32_t mfn)
{
    uint32_t lo = 0, hi = s->ntomb;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int32_t v = pydb__nseg_tomb(s, mid);
        if (v == mfn) return 1;
        if (v < mfn) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

/* Check the bytes s->map[s->size] of a segment (path: messages) and
 * fill in the fields the header gives. */
static int seg_check(nidx_seg *s, const char *path, pydb_error *err)
{
    const uint8_t *m = s->map;

    if (s->size < NIDX_SEG_HDR + 4 + 8)
        return PYDB_CORRUPT(err, path, 0, "segment of %zu bytes is too short",
                            s->size);
    if (memcmp(m, NIDX_SEG_MAGIC, 8) != 0 ||
        pydb__u32(m + 12) != NIDX_BLOCK_TERMS)
        return PYDB_CORRUPT(err, path, 0, "not a pydb index segment (magic "
                            "or block size)");
    s->version = pydb__u32(m + 8);
    if (s->version != NIDX_SEG_VERSION &&
        s->version != NIDX_SEG_VERSION_NO_SKIP)
        return PYDB_CORRUPT(err, path, 8, "index segment format version %u, "
                            "this pydb reads versions %d and %d (rebuild "
                            "the index)", (unsigned)s->version,
                            NIDX_SEG_VERSION_NO_SKIP, NIDX_SEG_VERSION);
    if ((uint64_t)pydb__crc32c(0, m, s->size - 8) !=
        pydb__u64(m + s->size - 8))
        return PYDB_CORRUPT(err, path, (int64_t)(s->size - 8),
                            "segment checksum mismatch");
    s->nterms = pydb__u64(m + 16);
    s->nposts = pydb__u64(m + 24);
    s->dict_off = pydb__u64(m + 32);
    s->bidx_off = pydb__u64(m + 40);
    s->nblocks = pydb__u64(m + 48);
    s->tomb_off = pydb__u64(m + 56);
    if (s->dict_off < NIDX_SEG_HDR || s->dict_off > s->bidx_off ||
        s->bidx_off > s->tomb_off || s->tomb_off > s->size - 12 ||
        /* (not nterms + 31: a count near 2^64 would wrap to 0 blocks) */
        s->nterms > s->bidx_off - s->dict_off ||
        s->nblocks != s->nterms / NIDX_BLOCK_TERMS +
                          (s->nterms % NIDX_BLOCK_TERMS != 0) ||
        s->nblocks > (s->tomb_off - s->bidx_off) / 8 ||
        s->bidx_off + s->nblocks * 8 != s->tomb_off)
        return PYDB_CORRUPT(err, path, 16, "segment header offsets are "
                            "inconsistent with the file size");
    s->ntomb = pydb__u32(m + s->tomb_off);
    s->nupd = s->ntomb;   /* as far as the file tells (nidx_seg.h) */
    if ((uint64_t)s->ntomb * 4 != s->size - 8 - s->tomb_off - 4)
        return PYDB_CORRUPT(err, path, (int64_t)s->tomb_off,
                            "tombstone count does not match the file size");
    s->tomb = m + s->tomb_off + 4;
    for (uint32_t i = 1; i < s->ntomb; i++)
        if (pydb__nseg_tomb(s, i) <= pydb__nseg_tomb(s, i - 1))
            return PYDB_CORRUPT(err, path,
                                (int64_t)(s->tomb_off + 4 + 4 * i),
                                "tombstones not ascending");
    for (uint64_t b = 0; b < s->nblocks; b++) {
        uint64_t o = pydb__u64(m + s->bidx_off + 8 * b);
        uint64_t prev = b ? pydb__u64(m + s->bidx_off + 8 * (b - 1)) : 0;
        /* each block holds at least its 8-byte postings offset; no sum
         * that a hostile offset near 2^64 could wrap (bidx_off >=
         * dict_off >= NIDX_SEG_HDR > 8, and prev passed this check) */
        if (o < s->dict_off || o > s->bidx_off - 8 || (b && o < prev + 8))
            return PYDB_CORRUPT(err, path, (int64_t)(s->bidx_off + 8 * b),
                                "dictionary block offset out of range");
    }
    return PYDB_OK;
}

/* A segment with one reference, generation gen, named path; NULL
 * without memory. */
static nidx_seg *seg_new(const char *path, uint64_t gen)
{
    nidx_seg *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    atomic_init(&s->refs, 1);
    snprintf(s->path, sizeof s->path, "%s", path);
    s->gen = gen;
    return s;
}

int pydb__nseg_open(nidx_seg **out, const char *path, uint64_t gen,
                    pydb_error *err)
{
    struct stat st;
    nidx_seg *s = NULL;
    int fd = -1, rc = PYDB_OK;

    *out = NULL;
    fd = pydb__vfs->open(path, O_RDONLY, 0);
    if (fd < 0) return PYDB_OSERROR(err, errno, path, -1, "cannot open");
    if (fstat(fd, &st) != 0) {
        rc = PYDB_OSERROR(err, errno, path, -1, "cannot stat");
        goto cleanup;
    }
    if (!(s = seg_new(path, gen))) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "cannot allocate");
        goto cleanup;
    }
    s->size = (size_t)st.st_size;
    if (s->size < NIDX_SEG_HDR + 4 + 8) {   /* (nothing to map) */
        rc = seg_check(s, path, err);
        goto cleanup;
    }
    s->map = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        rc = PYDB_OSERROR(err, errno, path, -1, "cannot map");
        goto cleanup;
    }
    if ((rc = seg_check(s, path, err))) goto cleanup;
    /* without the table the segment counts as never resident */
    (void)pydb__resident_init(&s->res, s->size);
cleanup:
    if (fd >= 0) pydb__vfs->close(fd);
    if (rc) {
        if (s && s->map) munmap(s->map, s->size);
        free(s);
        return rc;
    }
    *out = s;
    return PYDB_OK;
}

int pydb__nseg_open_inline(nidx_seg **out, const char *manifest,
                           uint64_t gen, const uint8_t *bytes, size_t len,
                           pydb_error *err)
{
    char name[1100];
    nidx_seg *s;
    int rc;

    *out = NULL;
    snprintf(name, sizeof name, "%.1000s (inline segment %08llu)", manifest,
             (unsigned long long)gen);
    if (!(s = seg_new(name, gen)) || !(s->map = malloc(len ? len : 1))) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, manifest, -1, "cannot allocate");
        goto cleanup;
    }
    memcpy(s->map, bytes, len);
    s->size = len;
    s->inl = 1;
    rc = seg_check(s, name, err);
cleanup:
    if (rc) {
        if (s) free(s->map);
        free(s);
        return rc;
    }
    *out = s;
    return PYDB_OK;
}

static int cur_corrupt(const nidx_cursor *c, const char *what,
                       pydb_error *err)
{
    return PYDB_CORRUPT(err, c->s->path,
                        c->p ? (int64_t)(c->p - c->s->map) : -1,
                        "dictionary: %s", what);
}

int pydb__ncur_block(nidx_cursor *c, uint64_t b, pydb_error *err)
{
    const nidx_seg *s = c->s;
    PYDB_ASSERT(b < s->nblocks);
    uint64_t o = pydb__u64(s->map + s->bidx_off + 8 * b);
    uint64_t e = b + 1 < s->nblocks
                     ? pydb__u64(s->map + s->bidx_off + 8 * (b + 1))
                     : s->bidx_off;
    /* pydb__nseg_open checked the block index: blocks lie in the
     * dictionary, in order */
    PYDB_ASSERT(o >= s->dict_off && o < e && e - o >= 8 && e <= s->bidx_off);
    c->blk = b;
    c->term = b * NIDX_BLOCK_TERMS;
    c->p = s->map + o + 8;
    c->end = s->map + e;
    c->poff = pydb__u64(s->map + o);
    c->klen = 0;
    if (c->poff < NIDX_SEG_HDR || c->poff > s->dict_off)
        return cur_corrupt(c, "block postings offset out of range", err);
    return PYDB_OK;
}

/* Decode the next entry into the cursor (valid = 0 at the end). */
int pydb__ncur_next(nidx_cursor *c, pydb_error *err)
{
    const nidx_seg *s = c->s;
    uint64_t shared, slen;
    /* the key before this one (its bytes stay in c->key when a new block
     * starts), if the cursor has one */
    int have_prev = c->valid;
    size_t prev_len = c->klen;
    if (c->term >= s->nterms) {
        c->valid = 0;
        return PYDB_OK;
    }
    if (c->term > 0 && c->term % NIDX_BLOCK_TERMS == 0 &&
        c->term / NIDX_BLOCK_TERMS != c->blk) {
        int rc = pydb__ncur_block(c, c->term / NIDX_BLOCK_TERMS, err);
        if (rc) return rc;
    }
    if (rd_varint(&c->p, c->end, &shared) || rd_varint(&c->p, c->end, &slen))
        return cur_corrupt(c, "truncated entry", err);
    if (shared > c->klen || slen > (uint64_t)(c->end - c->p) ||
        (c->term % NIDX_BLOCK_TERMS == 0 && shared != 0))
        return cur_corrupt(c, "key length out of range", err);
    /* keys ascend, also from one block to the next: readers merge and
     * search on that order (pydb_index_terms promises it) */
    if (have_prev &&
        pydb__keycmp(c->p, (size_t)slen, c->key ? c->key + shared : NULL,
                     prev_len - (size_t)shared) <= 0)
        return cur_corrupt(c, "keys not in ascending order", err);
    /* also for an empty first key: a valid cursor's key is never NULL
     * (callers copy it: memcpy from NULL is undefined even for 0 bytes) */
    if (shared + slen > c->kcap || !c->key) {
        size_t cap = (size_t)(shared + slen) * 2 + 32;
        uint8_t *nv = realloc(c->key, cap);
        if (!nv)
            return PYDB_ERROR(err, PYDB_ENOMEM, s->path, -1,
                              "cannot allocate a key");
        c->key = nv;
        c->kcap = cap;
    }
    if (slen) memcpy(c->key + shared, c->p, (size_t)slen);
    c->p += slen;
    c->klen = (size_t)(shared + slen);
    if (rd_varint(&c->p, c->end, &c->count) ||
        rd_varint(&c->p, c->end, &c->plen))
        return cur_corrupt(c, "truncated entry", err);
    c->pstart = c->poff;
    if (c->plen > s->dict_off - c->pstart || c->count == 0 ||
        c->count > c->plen)
        return cur_corrupt(c, "posting list out of range", err);
    c->poff += c->plen;
    c->term++;
    c->valid = 1;
    PYDB_ASSERT(c->p <= c->end && c->poff <= s->dict_off);
    return PYDB_OK;
}

/* Position at the first key >= target. */
int pydb__ncur_seek(nidx_cursor *c, const uint8_t *t, size_t tl,
                    pydb_error *err)
{
    const nidx_seg *s = c->s;
    uint64_t lo = 0, hi = s->nblocks;
    int rc;
    c->valid = 0;
    if (s->nterms == 0) return PYDB_OK;
    /* last block whose first key <= target */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        const uint8_t *p =
            s->map + pydb__u64(s->map + s->bidx_off + 8 * mid) + 8;
        const uint8_t *e = s->map + s->bidx_off;
        uint64_t sh, l;
        if (rd_varint(&p, e, &sh) || rd_varint(&p, e, &l) || sh != 0 ||
            l > (uint64_t)(e - p))
            return PYDB_CORRUPT(err, s->path, (int64_t)(p - s->map),
                                "dictionary: bad first key of block %llu",
                                (unsigned long long)mid);
        if (pydb__keycmp(p, (size_t)l, t, tl) <= 0) lo = mid;
        else hi = mid;
    }
    if ((rc = pydb__ncur_block(c, lo, err))) return rc;
    for (;;) {
        if ((rc = pydb__ncur_next(c, err))) return rc;
        if (!c->valid || pydb__keycmp(c->key, c->klen, t, tl) >= 0)
            return PYDB_OK;
    }
}

/* decode_list's step for each posting parsed, (m, tag, occ, cnt), the
 * first of its MFN when `first`: it goes to ov[*nlive] when ov (room for
 * the list reserved), or only its MFN to om[*nlive], once per MFN, when
 * om; and it counts live when its MFN is wanted (kept) and not dead. */
static inline __attribute__((always_inline)) void
put_posting(pydb_posting *ov, int32_t *om, uint64_t *nlive, int kept,
            int first, nidx_dead_fn dead, const void *dead_ctx, uint64_t m,
            uint64_t tag, uint64_t occ, uint64_t cnt)
{
    int take = kept;
    if (om && !first) return;
    if (dead) take &= !dead(dead_ctx, (int32_t)m);
    if (om) om[*nlive] = (int32_t)m;
    if (ov) {
        pydb_posting *v = &ov[*nlive];
        v->mfn = (int32_t)m;
        v->tag = (uint32_t)tag;
        v->occ = (uint32_t)occ;
        v->cnt = (uint32_t)cnt;
    }
    *nlive += (uint64_t)take;
}

/* The decoder of pydb__nseg_decode, _decode_in, _mfns_in and
 * _get_varints: the list of count postings at p[plen], led by its skip
 * table when `skips` (nidx_seg.h), into out, or only their MFNs into
 * mout (one of the two, or neither: count them); damage is
 * PYDB_ECORRUPT naming path and off0 + its offset in p (off0 < 0: -1).
 * keep (NULL: every MFN) is the set of MFNs whose postings are wanted: a
 * block of the skip table whose MFNs lie outside it is passed unread,
 * and so is the rest of the list once no MFN it may hold is wanted; the
 * postings of the blocks read are parsed and checked, those of unwanted
 * MFNs not counted live nor kept (they are written past out->n, then
 * overwritten: no branch on wanted or not).  A block read must end where
 * the table says, at the posting it says.  Inlined into each caller, so
 * that the plain decoder tests no set. */
static inline __attribute__((always_inline)) int
decode_list(pydb_postings *out, pydb_mfns *mout, const char *path,
            const uint8_t *p, uint64_t plen, uint64_t count, int skips,
            int64_t off0, nidx_dead_fn dead, const void *dead_ctx,
            const pydb_mfn_bits *keep, uint64_t *live, pydb_error *err)
{
    const uint8_t *start = p, *e = p + plen, *sp = NULL, *se = NULL, *p0;
    uint64_t m = 0, tag = 0, occ = 0, cnt = 0, n = 0, nlive = 0;
    uint64_t nblk = 1, tl;
    /* the table's entry for the next block: its start (from p0) and the
     * posting before it, the last of this block */
    uint64_t noff = 0, nm = 0, nt = 0, no = 0, nc = 0;
    pydb_posting *ov = NULL;   /* out->v + out->n: where the next one goes */
    int32_t *om = NULL;        /* mout->v + mout->n: where the next MFN goes */
    int kept = 1;              /* whether MFN m is wanted */
    int rest_passed = 0;       /* the blocks after the last read: passed */
    pydb_mfn_bits kb;          /* *keep, where the postings written cannot
                                  alias it (its int32_t lo would reload
                                  after each posting's store) */
#define AT(q) (off0 < 0 ? -1 : off0 + (int64_t)((q) - start))
    *live = 0;
    if (keep) {
        kb = *keep;
        keep = &kb;
    }
    /* a posting takes 4 varints, at least 4 bytes: room for all of them
     * at once (the count is checked against the bytes first) */
    if (count > plen / 4)
        return PYDB_CORRUPT(err, path, AT(start),
                            "dictionary says %llu postings in %llu bytes",
                            (unsigned long long)count,
                            (unsigned long long)plen);
    if (skips && count > NIDX_SKIP) {
        if (rd_varint(&p, e, &tl) || tl > (uint64_t)(e - p))
            return PYDB_CORRUPT(err, path, AT(start),
                                "skip table out of range");
        sp = p;
        se = p += tl;
        nblk = (count - 1) / NIDX_SKIP + 1;
    }
    p0 = p;
    if (out) {
        int rc = pydb__postings_reserve(out, out->n + (size_t)count, err);
        if (rc) return rc;
        ov = out->v + out->n;
    }
    if (mout) {
        int rc = pydb__mfns_reserve(mout, mout->n + (size_t)count, err);
        if (rc) return rc;
        om = mout->v + mout->n;
    }
    for (uint64_t k = 0; k < nblk; k++) {
        const uint64_t bend = k + 1 < nblk ? (k + 1) * NIDX_SKIP : count;
        /* none wanted from here on: the rest passed (not checked) */
        if (k > 0 && keep &&
            !pydb__mfn_bits_any(keep, (int64_t)m, INT32_MAX)) {
            rest_passed = 1;
            break;
        }
        if (k + 1 < nblk) {   /* entry k + 1: where this block ends */
            uint64_t doff, dm, t, o, c;
            if (rd_varint(&sp, se, &doff) || rd_varint(&sp, se, &dm) ||
                rd_varint(&sp, se, &t) || rd_varint(&sp, se, &o) ||
                rd_varint(&sp, se, &c))
                return PYDB_CORRUPT(err, path, AT(sp), "skip table truncated");
            /* a block of NIDX_SKIP postings takes 4 bytes each at least;
             * the entries ascend (each block holds a posting) */
            if (doff < 4 * NIDX_SKIP || doff > (uint64_t)(e - p0) - noff ||
                dm > INT32_MAX - nm || nm + dm < 1 || t > UINT32_MAX ||
                o > UINT32_MAX || c > UINT32_MAX ||
                (dm == 0 && (t < nt || (t == nt && (o < no ||
                                                    (o == no && c <= nc))))))
                return PYDB_CORRUPT(err, path, AT(sp),
                                    "skip table entry out of range");
            noff += doff;
            nm += dm;
            nt = t;
            no = o;
            nc = c;
            /* none of its MFNs, [m, nm], wanted: passed */
            if (keep && !pydb__mfn_bits_any(keep, (int64_t)m, (int64_t)nm)) {
                p = p0 + noff;
                m = nm;
                tag = nt;
                occ = no;
                cnt = nc;
                n = bend;
                kept = 0;
                continue;
            }
        }
        while (n < bend) {
            uint64_t dm, a, b, c;
            /* The commonest posting first, in a loop of its own: four
             * one-byte varints whose MFN delta is not 0, so TAG, OCC and
             * CNT are absolute, under 128, and the posting is above the
             * one before; only the MFN's bound is left to check (one out
             * of it goes to the general path below, which says so). */
            const uint64_t room = (uint64_t)(e - p) / 4;
            const uint8_t *const run = p, *const stop =
                p + 4 * (bend - n < room ? bend - n : room);
            while (p < stop) {
                const uint32_t u = pydb__u32(p);
                if ((u & 0x80808080u) || !(u & 0xffu) ||
                    m + (u & 0xffu) > INT32_MAX)
                    break;
                m += u & 0xffu;
                tag = (u >> 8) & 0xffu;
                occ = (u >> 16) & 0xffu;
                cnt = u >> 24;
                p += 4;
                if (keep) kept = pydb__mfn_bits_has(keep, (int32_t)m);
                put_posting(ov, om, &nlive, kept, 1, dead, dead_ctx, m, tag,
                            occ, cnt);
            }
            n += (uint64_t)(p - run) / 4;
            if (n == bend) break;
            if (e - p >= 4 && !(pydb__u32(p) & 0x80808080u)) {
                dm = p[0];   /* four one-byte varints: most postings */
                a = p[1];
                b = p[2];
                c = p[3];
                p += 4;
            } else if (p == e) {
                return PYDB_CORRUPT(err, path, AT(start),
                                    "posting list holds %llu postings, "
                                    "dictionary says %llu",
                                    (unsigned long long)n,
                                    (unsigned long long)count);
            } else if (rd_varint(&p, e, &dm) || rd_varint(&p, e, &a) ||
                       rd_varint(&p, e, &b) || rd_varint(&p, e, &c)) {
                return PYDB_CORRUPT(err, path, AT(p),
                                    "posting list truncated");
            } else if (dm > INT32_MAX || a > UINT32_MAX || b > UINT32_MAX ||
                       c > UINT32_MAX) {
                /* (a sum that wraps past 2^64 would come back in range) */
                return PYDB_CORRUPT(err, path, AT(p),
                                    "posting out of range or not ascending");
            }
            if (dm) {
                m += dm;
                if (keep) kept = pydb__mfn_bits_has(keep, (int32_t)m);
                tag = a;
                occ = b;
                cnt = c;
            } else if (a) {
                tag += a;
                occ = b;
                cnt = c;
            } else if (b) {
                occ += b;
                cnt = c;
            } else {
                cnt += c;
            }
            if (m < 1 || m > INT32_MAX || tag > UINT32_MAX ||
                occ > UINT32_MAX || cnt > UINT32_MAX ||
                (n > 0 && dm == 0 && a == 0 && b == 0 && c == 0))
                return PYDB_CORRUPT(err, path, AT(p),
                                    "posting out of range or not ascending");
            n++;
            put_posting(ov, om, &nlive, kept, dm != 0, dead, dead_ctx, m,
                        tag, occ, cnt);
        }
        if (k + 1 < nblk && (p != p0 + noff || m != nm || tag != nt ||
                             occ != no || cnt != nc))
            return PYDB_CORRUPT(err, path, AT(p),
                                "skip table disagrees with the postings");
    }
    if (!rest_passed && sp != se)
        return PYDB_CORRUPT(err, path, AT(sp),
                            "skip table longer than its entries");
    if (!rest_passed && p != e)
        return PYDB_CORRUPT(err, path, AT(start),
                            "posting list holds more postings than the "
                            "dictionary's %llu", (unsigned long long)count);
    *live = nlive;
    if (out) out->n += (size_t)nlive;
    if (mout) mout->n += (size_t)nlive;
    return PYDB_OK;
#undef AT
}

/* decode_list for the entry at the cursor. */
static inline __attribute__((always_inline)) int
decode(pydb_postings *out, pydb_mfns *mout, const nidx_cursor *cur,
       nidx_dead_fn dead, const void *dead_ctx, const pydb_mfn_bits *keep,
       uint64_t *live, pydb_error *err)
{
    const nidx_seg *s = cur->s;
    PYDB_ASSERT(cur->valid && cur->pstart >= NIDX_SEG_HDR &&
                cur->plen <= s->dict_off &&
                cur->pstart <= s->dict_off - cur->plen);
    return decode_list(out, mout, s->path, s->map + cur->pstart, cur->plen,
                       cur->count, s->version >= NIDX_SEG_VERSION,
                       (int64_t)cur->pstart, dead, dead_ctx, keep, live, err);
}

int pydb__nseg_get_varints(pydb_postings *out, const uint8_t *p, size_t len,
                           uint64_t count, const char *path, int64_t off,
                           pydb_error *err)
{
    uint64_t live;
    return decode_list(out, NULL, path, p, len, count, 0, off, NULL, NULL,
                       NULL, &live, err);
}

/* decode for the entry at the cursor, each case inlined apart: with no
 * set to test and no dead() to ask (one segment, or none newer), its
 * loop holds fewer values; out or mout (the other NULL) a constant in
 * each caller. */
static inline __attribute__((always_inline)) int
decode_cases(pydb_postings *out, pydb_mfns *mout, const nidx_cursor *cur,
             nidx_dead_fn dead, const void *dead_ctx,
             const pydb_mfn_bits *keep, uint64_t *live, pydb_error *err)
{
    if (keep && dead)
        return decode(out, mout, cur, dead, dead_ctx, keep, live, err);
    if (keep) return decode(out, mout, cur, NULL, NULL, keep, live, err);
    if (dead) return decode(out, mout, cur, dead, dead_ctx, NULL, live, err);
    return decode(out, mout, cur, NULL, NULL, NULL, live, err);
}

/* Decode the posting list at the cursor's entry, keeping the postings
 * of the MFNs in keep when given (nidx_seg.h). */
int pydb__nseg_decode_in(pydb_postings *out, const nidx_cursor *cur,
                         nidx_dead_fn dead, const void *dead_ctx,
                         const pydb_mfn_bits *keep, uint64_t *live,
                         pydb_error *err)
{
    return decode_cases(out, NULL, cur, dead, dead_ctx, keep, live, err);
}

/* The same for the MFNs of the list alone (nidx_seg.h). */
int pydb__nseg_mfns_in(pydb_mfns *out, const nidx_cursor *cur,
                       nidx_dead_fn dead, const void *dead_ctx,
                       const pydb_mfn_bits *keep, uint64_t *live,
                       pydb_error *err)
{
    return decode_cases(NULL, out, cur, dead, dead_ctx, keep, live, err);
}

int pydb__nseg_decode(pydb_postings *out, const nidx_cursor *cur,
                      nidx_dead_fn dead, const void *dead_ctx,
                      uint64_t *live, pydb_error *err)
{
    return pydb__nseg_decode_in(out, cur, dead, dead_ctx, NULL, live, err);
}

void pydb__nseg_path(char *out, size_t cap, const char *dir, uint64_t gen)
{
    snprintf(out, cap, "%s/seg-%08llu.pds", dir, (unsigned long long)gen);
}

size_t pydb__nseg_gen_digits(const uint8_t *p, size_t n, uint64_t *gen)
{
    uint64_t v = 0;
    size_t i;
    for (i = 0; i < n && i < 20 && p[i] >= '0' && p[i] <= '9'; i++) {
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;   /* past 2^64 - 1 */
        v = v * 10 + d;
    }
    if (i < 8 || (i < n && p[i] >= '0' && p[i] <= '9')) return 0;
    *gen = v;
    return i;
}

int pydb__nseg_name_gen(const char *name, uint64_t *gen)
{
    size_t n = strlen(name), k;
    if (n < 4 + 8 + 4 || memcmp(name, "seg-", 4) != 0 ||
        memcmp(name + n - 4, ".pds", 4) != 0)
        return 0;
    k = pydb__nseg_gen_digits((const uint8_t *)name + 4, n - 8, gen);
    return k == n - 8;
}


/* ------------------------------------------------------------ writing */

int pydb__nseg_enc_begin(nidx_seg_enc *e, pydb_buf *out, uint64_t nterms,
                         pydb_error *err)
{
    uint8_t hdr[NIDX_SEG_HDR];
    memset(e, 0, sizeof *e);
    e->out = out;
    e->want_terms = nterms;
    e->nblocks = (nterms + NIDX_BLOCK_TERMS - 1) / NIDX_BLOCK_TERMS;
    e->blocks = malloc((e->nblocks ? e->nblocks : 1) * sizeof *e->blocks);
    if (!e->blocks)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "cannot build a segment");
    memset(hdr, 0, sizeof hdr);
    pydb__buf_put(out, hdr, NIDX_SEG_HDR);
    return PYDB_OK;
}

/* The postings v[n] as varints, the first one's deltas taken from *prev
 * (NULL: from zero, so that its MFN delta is its MFN). */
static void put_varints_after(pydb_buf *out, const pydb_posting *v, size_t n,
                              const pydb_posting *prev)
{
    pydb_posting last = {0, 0, 0, 0};
    if (prev) last = *prev;
    for (size_t i = 0; i < n; i++) {
        const pydb_posting *q = &v[i];
        PYDB_ASSERT(pydb__posting_cmp(&last, q) < 0);
        if (q->mfn != last.mfn) {   /* (always for the first from zero) */
            pydb__nseg_put_varint(out, (uint64_t)(q->mfn - last.mfn));
            pydb__nseg_put_varint(out, q->tag);
            pydb__nseg_put_varint(out, q->occ);
            pydb__nseg_put_varint(out, q->cnt);
        } else if (q->tag != last.tag) {
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, q->tag - last.tag);
            pydb__nseg_put_varint(out, q->occ);
            pydb__nseg_put_varint(out, q->cnt);
        } else if (q->occ != last.occ) {
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, q->occ - last.occ);
            pydb__nseg_put_varint(out, q->cnt);
        } else {
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, q->cnt - last.cnt);
        }
        last = *q;
    }
}

void pydb__nseg_put_varints(pydb_buf *out, const pydb_posting *v, size_t n)
{
    put_varints_after(out, v, n, NULL);
}

void pydb__nseg_put_postings(pydb_buf *out, const pydb_posting *v, size_t n)
{
    size_t at = out->n, plen, hl, boff = 0;
    uint8_t head[10];
    pydb_buf tab = {0};
    int32_t pm = 0;
    if (n <= NIDX_SKIP) {
        pydb__nseg_put_varints(out, v, n);
        return;
    }
    /* block by block, each block's entry as it starts: where, and the
     * posting before it */
    for (size_t i = 0; i < n; i += NIDX_SKIP) {
        size_t k = n - i < NIDX_SKIP ? n - i : NIDX_SKIP;
        if (i > 0) {
            const pydb_posting *b = &v[i - 1];
            pydb__nseg_put_varint(&tab, out->n - at - boff);
            pydb__nseg_put_varint(&tab, (uint64_t)(b->mfn - pm));
            pydb__nseg_put_varint(&tab, b->tag);
            pydb__nseg_put_varint(&tab, b->occ);
            pydb__nseg_put_varint(&tab, b->cnt);
            boff = out->n - at;
            pm = b->mfn;
        }
        put_varints_after(out, v + i, k, i > 0 ? &v[i - 1] : NULL);
    }
    if (out->oom) goto cleanup;
    if (tab.oom) {
        out->oom = 1;
        goto cleanup;
    }
    /* the table goes before the postings: moved up to make room */
    plen = out->n - at;
    hl = pydb__nseg_varint_bytes(head, tab.n);
    if (pydb__buf_reserve(out, hl + tab.n) < 0) goto cleanup;   /* oom */
    memmove(out->p + at + hl + tab.n, out->p + at, plen);
    memcpy(out->p + at, head, hl);
    memcpy(out->p + at + hl, tab.p, tab.n);
    out->n = at + hl + tab.n + plen;
cleanup:
    free(tab.p);
}

void pydb__nseg_dict_entry(pydb_buf *dict, uint64_t term, uint64_t pbeg,
                           const uint8_t *prev, size_t prev_len,
                           const uint8_t *key, size_t len, uint64_t count,
                           uint64_t plen)
{
    size_t sh = 0;
    if (term % NIDX_BLOCK_TERMS == 0) {
        uint8_t b8[8];
        pydb__put64(b8, pbeg);
        pydb__buf_put(dict, b8, 8);
        prev_len = 0;
    }
    while (sh < prev_len && sh < len && prev[sh] == key[sh]) sh++;
    pydb__nseg_put_varint(dict, sh);
    pydb__nseg_put_varint(dict, len - sh);
    pydb__buf_put(dict, key + sh, len - sh);
    pydb__nseg_put_varint(dict, count);
    pydb__nseg_put_varint(dict, plen);
}

void pydb__nseg_header(uint8_t hdr[NIDX_SEG_HDR], uint64_t nterms,
                       uint64_t nposts, uint64_t dict_off, uint64_t bidx_off,
                       uint64_t tomb_off)
{
    memcpy(hdr, NIDX_SEG_MAGIC, 8);
    pydb__put32(hdr + 8, NIDX_SEG_VERSION);
    pydb__put32(hdr + 12, NIDX_BLOCK_TERMS);
    pydb__put64(hdr + 16, nterms);
    pydb__put64(hdr + 24, nposts);
    pydb__put64(hdr + 32, dict_off);
    pydb__put64(hdr + 40, bidx_off);
    pydb__put64(hdr + 48, (nterms + NIDX_BLOCK_TERMS - 1) / NIDX_BLOCK_TERMS);
    pydb__put64(hdr + 56, tomb_off);
}

void pydb__nseg_enc_term(nidx_seg_enc *e, const uint8_t *key, size_t len,
                         const pydb_posting *v, size_t n)
{
    pydb_buf *out = e->out;
    size_t pbeg = out->n;

    PYDB_ASSERT(e->nterms < e->want_terms && n >= 1);
    PYDB_ASSERT(e->nterms % NIDX_BLOCK_TERMS == 0 ||
                pydb__keycmp(e->prev, e->prev_len, key, len) < 0);
    pydb__nseg_put_postings(out, v, n);
    if (e->nterms % NIDX_BLOCK_TERMS == 0) {
        e->blocks[e->nterms / NIDX_BLOCK_TERMS] = e->dict.n;
        e->prev_len = 0;
    }
    pydb__nseg_dict_entry(&e->dict, e->nterms, pbeg, e->prev, e->prev_len,
                          key, len, n, out->n - pbeg);
    e->prev = key;
    e->prev_len = len;
    e->nterms++;
    e->nposts += n;
}

int pydb__nseg_enc_finish(nidx_seg_enc *e, const int32_t *tombs,
                          size_t ntombs, pydb_error *err)
{
    pydb_buf *out = e->out;
    uint8_t b8[8], b4[4];

    PYDB_ASSERT(e->nterms <= e->want_terms);
    e->nblocks = (e->nterms + NIDX_BLOCK_TERMS - 1) / NIDX_BLOCK_TERMS;
    uint64_t dict_off = out->n;
    pydb__buf_put(out, e->dict.p, e->dict.n);
    uint64_t bidx_off = out->n;
    for (uint64_t b = 0; b < e->nblocks; b++) {
        pydb__put64(b8, dict_off + e->blocks[b]);
        pydb__buf_put(out, b8, 8);
    }
    uint64_t tomb_off = out->n;
    pydb__put32(b4, (uint32_t)ntombs);
    pydb__buf_put(out, b4, 4);
    for (size_t i = 0; i < ntombs; i++) {
        PYDB_ASSERT(i == 0 || tombs[i - 1] < tombs[i]);
        pydb__put32(b4, (uint32_t)tombs[i]);
        pydb__buf_put(out, b4, 4);
    }
    if (out->oom || e->dict.oom) goto oom;
    pydb__nseg_header(out->p, e->nterms, e->nposts, dict_off, bidx_off,
                      tomb_off);
    pydb__put64(b8, pydb__crc32c(0, out->p, out->n));
    pydb__buf_put(out, b8, 8);
    if (out->oom) goto oom;
    return PYDB_OK;
oom:
    return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "cannot build a segment");
}

void pydb__nseg_enc_free(nidx_seg_enc *e)
{
    free(e->dict.p);
    free(e->blocks);
    e->dict.p = NULL;
    e->blocks = NULL;
}
