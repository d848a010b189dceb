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
#include <pthread.h>
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
    if (s->version < NIDX_SEG_VERSION_NO_SKIP ||
        s->version > NIDX_SEG_VERSION)
        return PYDB_CORRUPT(err, path, 8, "index segment format version %u, "
                            "this pydb reads versions %d to %d (rebuild "
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
    static atomic_uint_fast64_t serials;
    nidx_seg *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    atomic_init(&s->refs, 1);
    s->serial = (uint64_t)atomic_fetch_add(&serials, 1) + 1;
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
/* The thread's last seeks.  A search asks the index for one key several
 * times (its count, its bits, its TAG masks, its postings: each op of
 * index_int.h seeks it again in every segment), and a seek costs a
 * binary search of the block index and up to 32 prefix-decoded keys
 * (about 0.7 us in the default database's 58,000 keys: a sixth of `THE $
 * ALIC`).  A segment is immutable, so the same seek leaves the same
 * cursor: each thread keeps its last SEEK_MEMO seeks of keys of at most
 * SEEK_KEY bytes, by the segment's serial (never reused: a closed
 * segment's entries match nothing) and the target, with the cursor they
 * left (its key in the entry, its pointers into the segment, which is
 * open while a caller seeks in it). */
#define SEEK_MEMO 8
#define SEEK_KEY 64

typedef struct seek_memo {
    uint64_t serial;   /* 0: empty */
    size_t tlen;
    uint8_t target[SEEK_KEY], key[SEEK_KEY];
    nidx_cursor c;     /* its key, kcap and idx not used */
} seek_memo;

/* A thread's memo, on the heap (a pthread key frees it when the thread
 * ends): the library's thread-local storage is static (mapguard.c's
 * initial-exec variables make it so), and glibc leaves a library loaded
 * later little room there. */
typedef struct seek_memos {
    seek_memo e[SEEK_MEMO];
    unsigned next;   /* the entry to write next */
} seek_memos;

static pthread_key_t memo_key;
static pthread_once_t memo_once = PTHREAD_ONCE_INIT;
static int memo_keyed;

static void memo_key_make(void)
{
    memo_keyed = pthread_key_create(&memo_key, free) == 0;
}

/* The calling thread's memo; NULL without one (no key, no memory). */
static seek_memos *memos(void)
{
    seek_memos *m;
    pthread_once(&memo_once, memo_key_make);
    if (!memo_keyed) return NULL;
    m = pthread_getspecific(memo_key);
    if (!m && (m = calloc(1, sizeof *m)) &&
        pthread_setspecific(memo_key, m) != 0) {
        free(m);
        m = NULL;
    }
    return m;
}

/* The cursor of a remembered seek of t in c's segment into c; 0 if
 * there is none (or no memory for its key: then seek again). */
static int memo_recall(seek_memos *ms, nidx_cursor *c, const uint8_t *t,
                       size_t tl)
{
    for (unsigned i = 0; i < SEEK_MEMO; i++) {
        const seek_memo *m = &ms->e[i];
        uint8_t *key = c->key;
        size_t kcap = c->kcap, idx = c->idx;
        if (m->serial != c->s->serial || m->tlen != tl ||
            (tl && memcmp(m->target, t, tl) != 0))
            continue;
        if (!key || m->c.klen > kcap) {   /* (a key even when empty) */
            if (!(key = realloc(key, SEEK_KEY))) return 0;
            kcap = SEEK_KEY;
        }
        *c = m->c;
        c->key = key;
        c->kcap = kcap;
        c->idx = idx;
        if (c->klen) memcpy(c->key, m->key, c->klen);
        return 1;
    }
    return 0;
}

/* Remember the seek of t that left cursor c (a key of at most SEEK_KEY
 * bytes, or none), over the thread's oldest. */
static void memo_note(seek_memos *ms, const nidx_cursor *c,
                      const uint8_t *t, size_t tl)
{
    seek_memo *m = &ms->e[ms->next++ % SEEK_MEMO];
    m->serial = c->s->serial;
    m->tlen = tl;
    if (tl) memcpy(m->target, t, tl);   /* (t NULL for an empty key) */
    m->c = *c;
    m->c.key = NULL;
    if (!c->valid) m->c.klen = 0;   /* (no key: none past the last) */
    else if (c->klen) memcpy(m->key, c->key, c->klen);
}

int pydb__ncur_seek(nidx_cursor *c, const uint8_t *t, size_t tl,
                    pydb_error *err)
{
    const nidx_seg *s = c->s;
    seek_memos *ms = tl <= SEEK_KEY ? memos() : NULL;
    uint64_t lo = 0, hi = s->nblocks;
    int rc;
    if (ms && memo_recall(ms, c, t, tl)) return PYDB_OK;
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
        if (!c->valid || pydb__keycmp(c->key, c->klen, t, tl) >= 0) break;
    }
    if (ms && (!c->valid || c->klen <= SEEK_KEY)) memo_note(ms, c, t, tl);
    return PYDB_OK;
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

/* TAG, OCC and CNT of a posting after one of the same record, whose
 * varints are a, b, c (the delta rule, nidx_seg.h): a TAG delta, or an
 * OCC delta, or a CNT delta; the fields after the one that moves are
 * absolute. */
static inline __attribute__((always_inline)) void
same_record(uint64_t *tag, uint64_t *occ, uint64_t *cnt, uint64_t a,
            uint64_t b, uint64_t c)
{
    if (a) {
        *tag += a;
        *occ = b;
        *cnt = c;
    } else if (b) {
        *occ += b;
        *cnt = c;
    } else {
        *cnt += c;
    }
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
            } else {
                same_record(&tag, &occ, &cnt, a, b, c);
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

/* The postings of one record of a dense list (nidx_seg.h) at p[len],
 * MFN m: stored from ov (NULL: not stored), room of them at most (what
 * is left of the dictionary's count).  Returns how many; 0 when they
 * are damaged (none in len bytes, out of range, not ascending, not len
 * bytes, or more than room). */
static __attribute__((noinline)) uint64_t
dense_record(const uint8_t *p, uint64_t len, int32_t m, pydb_posting *ov,
             uint64_t room)
{
    const uint8_t *e = p + len;
    uint64_t tag = 0, occ = 0, cnt = 0, k = 0;
    while (p < e) {
        uint64_t a, b, c;
        if (e - p >= 3 && !((p[0] | p[1] | p[2]) & 0x80)) {
            a = p[0];   /* three one-byte varints: most postings */
            b = p[1];
            c = p[2];
            p += 3;
        } else if (rd_varint(&p, e, &a) || rd_varint(&p, e, &b) ||
                   rd_varint(&p, e, &c)) {
            return 0;
        }
        if (k == 0) {
            tag = a;
            occ = b;
            cnt = c;
        } else if (!(a | b | c)) {
            return 0;   /* a repeat */
        } else {
            same_record(&tag, &occ, &cnt, a, b, c);
        }
        if (tag > UINT32_MAX || occ > UINT32_MAX || cnt > UINT32_MAX ||
            k >= room)
            return 0;   /* (a sum that wraps comes back > 2^32 - 1 only
                           if a part is: each is checked) */
        if (ov) {
            ov[k].mfn = m;
            ov[k].tag = (uint32_t)tag;
            ov[k].occ = (uint32_t)occ;
            ov[k].cnt = (uint32_t)cnt;
        }
        k++;
    }
    return k;
}

/* Where record r of a dense list starts (*qo) and its length (*len),
 * walked from record qr at *qo through records of 255 bytes or more
 * (their length byte 255, their length a varint before their bytes);
 * records end by oe.  1 when they are damaged, else 0. */
static __attribute__((noinline)) int
dense_walk(const uint8_t *recs, uint64_t oe, const uint8_t *lens,
           uint64_t qr, uint64_t r, uint64_t *qo, uint64_t *len)
{
    uint64_t o = *qo;
    for (uint64_t i = qr; i <= r; i++) {
        uint64_t l = lens[i];
        if (o > oe) return 1;
        if (l == 255) {
            const uint8_t *p = recs + o;
            if (rd_varint(&p, recs + oe, &l) || l < 255) return 1;
            o = (uint64_t)(p - recs);
        }
        if (l > oe - o) return 1;
        if (i == r) *len = l;
        else o += l;
    }
    *qo = o;
    return 0;
}

/* The MFNs base + i of the bits i of x into om[n...], those dead()
 * (NULL: none) kills overwritten: the new n. */
static inline __attribute__((always_inline)) uint64_t
dense_mfns(int32_t *om, uint64_t n, uint64_t x, int64_t base,
           nidx_dead_fn dead, const void *dead_ctx)
{
    if (!dead) {
        for (; x; x &= x - 1)
            om[n++] = (int32_t)(base + __builtin_ctzll(x));
        return n;
    }
    for (; x; x &= x - 1) {
        const int32_t m = (int32_t)(base + __builtin_ctzll(x));
        om[n] = m;
        n += !dead(dead_ctx, m);
    }
    return n;
}

/* The sum of the n bytes at p, eight at a time; *big: 1 if one is 255
 * (a record's length of 255 bytes or more). */
static inline __attribute__((always_inline)) uint64_t
lens_sum(const uint8_t *p, uint64_t n, int *big)
{
    const uint64_t ones = 0x0101010101010101ull, lanes = 0x00ff00ff00ff00ffull;
    uint64_t sum = 0, ff = 0;
    for (; n >= 8; n -= 8, p += 8) {
        const uint64_t v = pydb__u64(p), nv = ~v;
        /* bytes 255: bytes of ~v that are 0 */
        ff |= (nv - ones) & v & (ones << 7);
        /* four 16-bit lanes of two bytes each, then their sum */
        sum += (((v & lanes) + ((v >> 8) & lanes)) *
                0x0001000100010001ull) >> 48;
    }
    for (; n > 0; n--, p++) {
        sum += *p;
        ff |= *p == 255;
    }
    *big = ff != 0;
    return sum;
}

/* The posting of MFN m that a record of three one-byte varints q[3]
 * (TAG, OCC, CNT) holds, into *v: the commonest record. */
static inline __attribute__((always_inline)) void
put_short(pydb_posting *v, int32_t m, const uint8_t *q)
{
    v->mfn = m;
    v->tag = q[0];
    v->occ = q[1];
    v->cnt = q[2];
}

/* The parts of a dense list (nidx_seg.h) that reading its records
 * needs. */
typedef struct dense_list {
    const uint8_t *lens, *recs;
    uint64_t nrec, count;    /* count: the dictionary's (room reserved) */
    pydb_posting *ov;        /* where postings go (NULL: counted only) */
    nidx_dead_fn dead;       /* NULL: none dead */
    const void *dead_ctx;
} dense_list;

/* Why dense_word failed */
enum { DW_OK, DW_RANGE, DW_POSTING };

/* The records of the bits of x (a subset of w, the word of MFNs base +
 * i; its records from rank rk at offset ob, ending by oe) read into
 * d->ov[*nlive...] (the live ones: dead() kills none), *nlive and *seen
 * (postings read) counted on; *end: where the last one read ends.  The
 * records before each, from the last one read, are passed by their
 * lengths.  DW_OK, or DW_RANGE / DW_POSTING with *bad the offset in
 * the records of the damaged record. */
static __attribute__((noinline)) PYDB_POPCNT_CLONES int
dense_word(const dense_list *d, uint64_t w, uint64_t x, int64_t base,
           uint64_t ob, uint64_t oe, uint64_t rk, uint64_t *nlive,
           uint64_t *seen, uint64_t *end, uint64_t *bad)
{
    const uint8_t *const lens = d->lens, *const recs = d->recs;
    pydb_posting *const ov = d->ov;
    uint64_t qo = ob, qr = rk, nl = *nlive, sn = *seen;
    unsigned qb = 0;   /* qo: the record of rank qr, bit qb of the word */
    int why = DW_OK;

    while (x) {
        const unsigned t = (unsigned)__builtin_ctzll(x);
        const int32_t m = (int32_t)(base + t);
        const int take = !d->dead || !d->dead(d->dead_ctx, m);
        const uint64_t o0 = qo;
        /* the records between, bits qb .. t - 1 (none in a whole
         * read): passed by their lengths (each under 255, or big) */
        const uint64_t skipped = w & (((uint64_t)1 << t) - 1) &
                                 ~(((uint64_t)1 << qb) - 1);
        uint64_t r = qr, len, between = 0;
        int big = 0;
        if (skipped) r += pydb__popcount64(skipped);
        *bad = o0;
        if (r >= d->nrec) {
            why = DW_RANGE;
            break;
        }
        if (skipped) between = lens_sum(lens + qr, r - qr, &big);
        len = lens[r];
        qo += between;
        if (big || len == 255) {
            uint64_t wo = o0, wl = 0;
            if (dense_walk(recs, oe, lens, qr, r, &wo, &wl)) {
                why = DW_RANGE;
                break;
            }
            qo = wo;
            len = wl;
        } else if (between > oe - o0 || len > oe - qo) {
            why = DW_RANGE;
            break;
        }
        if (sn >= d->count) {   /* more postings than the dictionary's */
            *bad = qo;
            why = DW_POSTING;
            break;
        }
        if (len == 3 && !((recs[qo] | recs[qo + 1] | recs[qo + 2]) & 0x80)) {
            /* one posting of three one-byte varints: most records */
            if (ov) put_short(&ov[nl], m, recs + qo);
            nl += (uint64_t)take;
            sn++;
        } else {
            const uint64_t got = dense_record(recs + qo, len, m,
                                              ov && take ? ov + nl : NULL,
                                              d->count - sn);
            if (!got) {
                *bad = qo;
                why = DW_POSTING;
                break;
            }
            nl += take ? got : 0;
            sn += got;
        }
        qo += len;
        qr = r + 1;
        qb = t + 1;
        x &= x - 1;
    }
    *nlive = nl;
    *seen = sn;
    *end = qo;
    return why;
}

/* A dense list's header and parts (nidx_seg.h). */
typedef struct dense_hdr {
    uint64_t lo, nwords, nrec, rlen;
    const uint8_t *words, *offs, *ranks, *lens, *recs;
    const uint8_t *masks;   /* the records' TAG masks; NULL: version 4 */
} dense_hdr;

/* Read and check the header of the dense list at p[plen] (after its form
 * byte; count postings, at off0 in path; `masks`: of a segment of version
 * 5, which keeps the records' TAG masks) into h. */
static int dense_header(dense_hdr *h, const uint8_t *p, uint64_t plen,
                        uint64_t count, int masks, const char *path,
                        int64_t off0, pydb_error *err)
{
    const uint8_t *start = p, *e = p + plen;
    const uint64_t per_rec = masks ? 2 : 1;   /* its length, its mask */
#define AT(q) (off0 < 0 ? -1 : off0 + (int64_t)((q) - start))
    if (rd_varint(&p, e, &h->lo) || rd_varint(&p, e, &h->nwords) ||
        rd_varint(&p, e, &h->nrec) || h->lo < 1 || h->lo > INT32_MAX ||
        h->nwords < 1 || h->nwords - 1 > ((uint64_t)INT32_MAX - h->lo) / 64 ||
        h->nwords > (uint64_t)(e - p) / 16 || h->nrec > 64 * h->nwords ||
        h->nrec > count ||
        h->nrec > ((uint64_t)(e - p) - 16 * h->nwords) / per_rec)
        return PYDB_CORRUPT(err, path, AT(start),
                            "dense list's MFN range out of range");
    h->words = p;
    h->offs = h->words + 8 * h->nwords;
    h->ranks = h->offs + 4 * (h->nwords + 1);
    h->lens = h->ranks + 4 * h->nwords;
    h->masks = masks ? h->lens + h->nrec : NULL;
    h->recs = h->lens + per_rec * h->nrec;
    if (h->recs > e)
        return PYDB_CORRUPT(err, path, AT(h->words),
                            "dense list's bitmap past its end");
    h->rlen = (uint64_t)(e - h->recs);
    {   /* no bit of the last word for an MFN past 2^31 - 1 */
        const uint64_t top = h->lo + 64 * (h->nwords - 1);
        if (top + 63 > INT32_MAX &&
            pydb__u64(h->words + 8 * (h->nwords - 1)) >>
                (unsigned)(INT32_MAX - top + 1))
            return PYDB_CORRUPT(err, path, AT(h->words),
                                "dense list's MFN range out of range");
    }
    if (!(pydb__u64(h->words) & 1) ||
        !pydb__u64(h->words + 8 * (h->nwords - 1)) ||
        pydb__u32(h->offs) != 0 ||
        pydb__u32(h->offs + 4 * h->nwords) != h->rlen ||
        pydb__u32(h->ranks) != 0 ||
        pydb__u32(h->ranks + 4 * (h->nwords - 1)) +
                (uint64_t)pydb__popcount64(
                    pydb__u64(h->words + 8 * (h->nwords - 1))) !=
            h->nrec)
        return PYDB_CORRUPT(err, path, AT(h->words),
                            "dense list's bitmap or directory disagrees "
                            "with its bounds");
    return PYDB_OK;
#undef AT
}

/* Why dense_whole failed, and where (*bad: a file offset's part within
 * the list's parts, as named) */
enum { DH_OK, DH_OFFS, DH_RANKS, DH_RANGE, DH_POSTING, DH_WORD_END,
       DH_COUNT };

/* A whole read of the dense list h (its records one after the other,
 * every one checked with the directory, the lengths and the bytes):
 * the live postings (dead() kills none) into ov[0...] (NULL: counted
 * only), *nlive of them, *seen postings read.  DH_OK, or why it failed
 * with *bad: the word (DH_OFFS, DH_RANKS), the records' offset
 * (DH_RANGE, DH_POSTING, DH_WORD_END). */
/* One record of a whole read that is not of the commonest form (see
 * dense_whole): its length from the lengths (a varint before it when
 * 255), checked against the word's end oe, its postings read (into ov
 * unless NULL; room of them at most).  Returns where the record ends and
 * how many postings it has (got 0: damaged, why and at say so). */
typedef struct whole_step {
    uint64_t qo, got, at;
    int why;
} whole_step;

static __attribute__((noinline)) whole_step
dense_whole_record(const dense_hdr *h, uint64_t r, uint64_t qo, uint64_t oe,
                   int32_t m, pydb_posting *ov, uint64_t room)
{
    whole_step st = {qo, 0, qo, DH_OK};
    uint64_t len = r < h->nrec ? h->lens[r] : UINT64_MAX;
    if (len == 255) {   /* a long one: its length as a varint */
        const uint8_t *p = h->recs + qo;
        if (rd_varint(&p, h->recs + oe, &len) || len < 255) len = UINT64_MAX;
        st.qo = qo = (uint64_t)(p - h->recs);
    }
    if (qo > oe || len > oe - qo) {
        st.why = DH_RANGE;
        return st;
    }
    if (!(st.got = dense_record(h->recs + qo, len, m, ov, room))) {
        st.at = qo;
        st.why = DH_POSTING;
        return st;
    }
    st.qo = qo + len;
    return st;
}

static __attribute__((noinline)) PYDB_POPCNT_CLONES int
dense_whole(const dense_hdr *h, uint64_t count, pydb_posting *ov,
            nidx_dead_fn dead, const void *dead_ctx, uint64_t *nlive,
            uint64_t *seen, uint64_t *bad)
{
    const uint8_t *const lens = h->lens, *const recs = h->recs;
    const uint64_t nrec = h->nrec;
    uint64_t qo = 0, r = 0, nl = 0, sn = 0, k, at = 0;
    int why = DH_OK;

    for (k = 0; k < h->nwords && why == DH_OK; k++) {
        const int64_t base = (int64_t)h->lo + 64 * (int64_t)k;
        const uint64_t oe = pydb__u32(h->offs + 4 * (k + 1));
        if (pydb__u32(h->offs + 4 * k) != qo) {
            why = DH_OFFS;
            break;
        }
        if (pydb__u32(h->ranks + 4 * k) != r) {
            why = DH_RANKS;
            break;
        }
        if (oe > h->rlen) {
            at = qo;
            why = DH_RANGE;
            break;
        }
        uint64_t w = pydb__u64(h->words + 8 * k);
        while (w) {
            int32_t m;
            int take;
            whole_step st;
            /* the commonest records, with none dead, in a loop of their
             * own (no call in it: its values stay in registers), while
             * the word's records fit the count and bytes left: one
             * posting each, three one-byte varints (TAG, OCC, CNT) */
            const uint64_t nb = pydb__popcount64(w);   /* records left */
            const int room = !dead && r + nb <= nrec && sn + nb <= count &&
                             qo <= oe && oe - qo >= 3 * nb;
            for (; w && room; w &= w - 1) {
                m = (int32_t)(base + __builtin_ctzll(w));
                if (lens[r] != 3 ||
                    ((recs[qo] | recs[qo + 1] | recs[qo + 2]) & 0x80))
                    break;
                if (ov) put_short(&ov[nl], m, recs + qo);
                nl++;
                sn++;
                qo += 3;
                r++;
            }
            if (!w) break;
            m = (int32_t)(base + __builtin_ctzll(w));
            take = !dead || !dead(dead_ctx, m);
            st = dense_whole_record(h, r, qo, oe, m,
                                    ov && take ? ov + nl : NULL, count - sn);
            if (!st.got) {
                at = st.at;
                why = st.why;
                break;
            }
            nl += take ? st.got : 0;
            sn += st.got;
            qo = st.qo;
            r++;
            w &= w - 1;
        }
        if (why != DH_OK) break;
        if (why == DH_OK && qo != oe) {
            at = qo;
            why = DH_WORD_END;
        }
    }
    if (why == DH_OK && r != nrec) why = DH_COUNT;
    *bad = why == DH_OFFS || why == DH_RANKS ? k : at;
    *nlive = nl;
    *seen = sn;
    return why;
}

/* A dense list (nidx_seg.h) at p[plen], after its form byte: into out
 * (its postings) or mout (its records' MFNs), as decode_list.  Without
 * keep, its postings are read whole (dense_whole, which checks that the
 * directory, the lengths and the records agree throughout), and must be
 * the dictionary's count.  With keep, the bitmap is read a word at a
 * time, ANDed with keep's bits, and the records of the bits left are
 * read and checked (dense_word).  mout: the records are not read (the
 * bitmap says which they are). */
static __attribute__((noinline)) PYDB_POPCNT_CLONES int
decode_dense(pydb_postings *out, pydb_mfns *mout, const char *path,
             const uint8_t *p, uint64_t plen, uint64_t count, int masks,
             int64_t off0, nidx_dead_fn dead, const void *dead_ctx,
             const pydb_mfn_bits *keep, uint64_t *live, pydb_error *err)
{
    const uint8_t *start = p, *words, *offs, *ranks;
    uint64_t lo, nwords, rlen, nlive = 0, seen = 0, k0 = 0, k1, read_to = 0;
    dense_list d = {NULL, NULL, 0, count, NULL, dead, dead_ctx};
    dense_hdr h;
    int32_t *om = NULL;
    int rc;
#define AT(q) (off0 < 0 ? -1 : off0 + (int64_t)((q) - start))
    *live = 0;
    if ((rc = dense_header(&h, p, plen, count, masks, path, off0, err)))
        return rc;
    lo = h.lo;
    nwords = h.nwords;
    rlen = h.rlen;
    words = h.words;
    offs = h.offs;
    ranks = h.ranks;
    d.lens = h.lens;
    d.recs = h.recs;
    d.nrec = h.nrec;
    if (out) {
        if ((rc = pydb__postings_reserve(out, out->n + (size_t)count, err)))
            return rc;
        d.ov = out->v + out->n;
    }
    if (mout) {
        if ((rc = pydb__mfns_reserve(mout, mout->n + (size_t)count, err)))
            return rc;
        om = mout->v + mout->n;
    }
    if (!keep && !om) {   /* a whole read */
        uint64_t bad;
        switch (dense_whole(&h, count, d.ov, dead, dead_ctx, &nlive, &seen,
                            &bad)) {
        case DH_OFFS:
            return PYDB_CORRUPT(err, path, AT(offs + 4 * bad),
                                "dense list's directory disagrees with "
                                "its records");
        case DH_RANKS:
            return PYDB_CORRUPT(err, path, AT(ranks + 4 * bad),
                                "dense list's directory disagrees with "
                                "its records");
        case DH_RANGE:
            return PYDB_CORRUPT(err, path, AT(d.recs + bad),
                                "dense list's record out of range");
        case DH_POSTING:
            return PYDB_CORRUPT(err, path, AT(d.recs + bad),
                                "posting out of range or not ascending");
        case DH_WORD_END:
            return PYDB_CORRUPT(err, path, AT(d.recs + bad),
                                "dense list's records disagree with its "
                                "directory");
        case DH_COUNT:
            return PYDB_CORRUPT(err, path, AT(start),
                                "dense list's bitmap holds another number "
                                "of records than it says");
        }
        if (seen != count)
            return PYDB_CORRUPT(err, path, AT(start),
                                "posting list holds %llu postings, "
                                "dictionary says %llu",
                                (unsigned long long)seen,
                                (unsigned long long)count);
        goto done;
    }
    k1 = nwords;
    if (keep) {   /* only the words that keep's range meets */
        int64_t a = (int64_t)keep->lo - (int64_t)lo;
        int64_t z = a + (int64_t)keep->nwords * 64 - 1;
        if (z < 0 || a > (int64_t)(64 * nwords - 1)) {
            k1 = 0;
        } else {
            k0 = a > 0 ? (uint64_t)a / 64 : 0;
            k1 = (uint64_t)z / 64 + 1 < nwords ? (uint64_t)z / 64 + 1
                                                : nwords;
        }
    }
    for (uint64_t k = k0; k < k1; k++) {
        const int64_t base = (int64_t)lo + 64 * (int64_t)k;
        const uint64_t want = keep ? pydb__mfn_bits_word(keep, base)
                                   : ~(uint64_t)0;
        uint64_t w, x, rk, rn, ob, oe, bad, end, after, len;
        int why;
        if (!want) {   /* no record wanted: on to the word of the next */
            const int64_t nx = pydb__mfn_bits_next(keep, base + 64);
            if (nx == INT64_MAX) break;
            k = (uint64_t)(nx - (int64_t)lo) / 64 - 1;   /* (k++ next) */
            continue;
        }
        w = pydb__u64(words + 8 * k);
        x = w & want;
        rk = pydb__u32(ranks + 4 * k);
        rn = k + 1 < nwords ? pydb__u32(ranks + 4 * (k + 1)) : d.nrec;
        /* the word's records are the ranks rk .. rn - 1: as many as its
         * bits, and after the last word read's (so the words read hold
         * no more records than nrec, nor MFNs than the dictionary's
         * count, words passed or not; and a bit lost or added shows in
         * every word where a record is wanted, wanted records or not) */
        if (rk + pydb__popcount64(w) != rn || rn > d.nrec || rk < read_to)
            return PYDB_CORRUPT(err, path, AT(ranks + 4 * k),
                                "dense list's directory disagrees with "
                                "its bitmap");
        read_to = rn;
        if (!x) continue;
        if (om) {   /* the records' MFNs: the bitmap says them */
            nlive = dense_mfns(om, nlive, x, base, dead, dead_ctx);
            continue;
        }
        ob = pydb__u32(offs + 4 * k);
        oe = pydb__u32(offs + 4 * (k + 1));
        if (ob > oe || oe > rlen)
            return PYDB_CORRUPT(err, path, AT(offs + 4 * k),
                                "dense list's directory out of range");
        why = dense_word(&d, w, x, base, ob, oe, rk, &nlive, &seen, &end,
                         &bad);
        if (why == DW_RANGE)
            return PYDB_CORRUPT(err, path, AT(d.recs + bad),
                                "dense list's record out of range");
        if (why == DW_POSTING)
            return PYDB_CORRUPT(err, path, AT(d.recs + bad),
                                "posting out of range or not ascending");
        /* the records after the last one read end where the word's do */
        after = rk + pydb__popcount64(w & (~(uint64_t)0 >>
                                     (unsigned)__builtin_clzll(x)));
        if (after < rn) {
            int big;
            const uint64_t rest = lens_sum(d.lens + after, rn - after, &big);
            if (!big) {
                end += rest;
            } else if (dense_walk(d.recs, oe, d.lens, after, rn - 1, &end,
                                  &len)) {
                return PYDB_CORRUPT(err, path, AT(d.recs + end),
                                    "dense list's record out of range");
            } else {
                end += len;
            }
        }
        if (end != oe)
            return PYDB_CORRUPT(err, path, AT(d.recs + end),
                                "dense list's records disagree with its "
                                "directory");
    }
done:
    *live = nlive;
    if (out) out->n += (size_t)nlive;
    if (mout) mout->n += (size_t)nlive;
    return PYDB_OK;
#undef AT
}

/* The word of the dense list h whose records by rank are not as many as
 * its bits (ranks[k] + its bits != ranks[k + 1], or nrec after the
 * last), or h->nwords if none: a bit lost or added, or a damaged rank. */
static __attribute__((noinline)) PYDB_POPCNT_CLONES uint64_t
dense_ranks_off(const dense_hdr *h)
{
    uint64_t k, rk = pydb__u32(h->ranks);
    for (k = 0; k < h->nwords; k++) {
        const uint64_t next = k + 1 < h->nwords
                                  ? pydb__u32(h->ranks + 4 * (k + 1))
                                  : h->nrec;
        if (rk + pydb__popcount64(pydb__u64(h->words + 8 * k)) != next) break;
        rk = next;
    }
    return k;
}

int pydb__nseg_dense_bits(const nidx_cursor *cur, int *dense, uint64_t *lo,
                          uint64_t *nwords, const uint8_t **words,
                          pydb_error *err)
{
    const nidx_seg *s = cur->s;
    const uint8_t *p = s->map + cur->pstart;
    dense_hdr h;
    uint64_t k;
    int rc;

    PYDB_ASSERT(cur->valid && cur->pstart <= s->dict_off - cur->plen);
    *dense = s->version >= NIDX_SEG_VERSION_DENSE &&
             cur->count > NIDX_SKIP && p[0] == NIDX_FORM_DENSE;
    if (!*dense) return PYDB_OK;
    if ((rc = dense_header(&h, p + 1, cur->plen - 1, cur->count,
                           s->version >= NIDX_SEG_VERSION, s->path,
                           (int64_t)cur->pstart + 1, err)))
        return rc;
    /* every word's bits and ranks agree (a bit lost or added shows) */
    k = dense_ranks_off(&h);
    if (k < h.nwords)
        return PYDB_CORRUPT(err, s->path,
                            (int64_t)cur->pstart + 1 +
                                (int64_t)(h.ranks + 4 * k - (p + 1)),
                            "dense list's directory disagrees with its "
                            "bitmap");
    *lo = h.lo;
    *nwords = h.nwords;
    *words = h.words;
    return PYDB_OK;
}

/* pydb__nseg_tag_masks for the dense list h: in's records in order from
 * its word j0 (rank[j0] of them before it), each looked up in h, each
 * word of h met checked with its rank and the next.  The word whose
 * ranks disagree with its bits, or h->nwords if none. */
static __attribute__((noinline)) PYDB_POPCNT_CLONES uint64_t
dense_tag_masks(const dense_hdr *h, const pydb_mfn_bits *in, size_t j0,
                const uint32_t *rank, uint8_t *m)
{
    const int64_t lo = (int64_t)h->lo, top = lo + 64 * (int64_t)h->nwords;
    uint64_t ir = rank[j0], kc = UINT64_MAX, lw = 0, rk = 0;
    for (size_t j = j0; j < in->nwords; j++) {
        const int64_t base = (int64_t)in->lo + 64 * (int64_t)j;
        if (base >= top) break;
        for (uint64_t v = in->w[j]; v; v &= v - 1, ir++) {
            const int64_t mfn = base + __builtin_ctzll(v);
            uint64_t d, k, b;
            if (mfn < lo) continue;
            if (mfn >= top) break;
            d = (uint64_t)(mfn - lo);
            k = d >> 6;
            b = d & 63;
            if (k != kc) {   /* a word of h met: its ranks checked */
                const uint64_t next = k + 1 < h->nwords
                                          ? pydb__u32(h->ranks + 4 * (k + 1))
                                          : h->nrec;
                lw = pydb__u64(h->words + 8 * k);
                rk = pydb__u32(h->ranks + 4 * k);
                if (rk + pydb__popcount64(lw) != next || next > h->nrec)
                    return k;
                kc = k;
            }
            if ((lw >> b) & 1)
                m[ir] |= h->masks[rk + pydb__popcount64(
                                           lw & (((uint64_t)1 << b) - 1))];
        }
    }
    return h->nwords;
}

int pydb__nseg_tag_masks(const nidx_cursor *cur, const pydb_mfn_bits *in,
                         const uint32_t *rank, uint8_t *m, int *known,
                         pydb_error *err)
{
    const nidx_seg *s = cur->s;
    const uint8_t *p = s->map + cur->pstart;
    const int64_t off0 = (int64_t)cur->pstart + 1;
    uint64_t k;
    size_t j0 = 0;
    dense_hdr h;
    int rc;

    PYDB_ASSERT(cur->valid && cur->pstart <= s->dict_off - cur->plen);
    *known = s->version >= NIDX_SEG_VERSION && cur->count > NIDX_SKIP &&
             p[0] == NIDX_FORM_DENSE;
    if (!*known) return PYDB_OK;
    if ((rc = dense_header(&h, p + 1, cur->plen - 1, cur->count, 1, s->path,
                           off0, err)))
        return rc;
    /* in's first word that may hold one of h's records */
    if ((int64_t)h.lo > (int64_t)in->lo + 63)
        j0 = (size_t)(((int64_t)h.lo - (int64_t)in->lo) >> 6);
    if (j0 >= in->nwords) return PYDB_OK;
    k = dense_tag_masks(&h, in, j0, rank, m);
    if (k < h.nwords)
        return PYDB_CORRUPT(err, s->path,
                            off0 + (int64_t)(h.ranks + 4 * k - (p + 1)),
                            "dense list's directory disagrees with its "
                            "bitmap");
    return PYDB_OK;
}

/* decode_list or decode_dense for the entry at the cursor, by the
 * segment's version and the list's form. */
static inline __attribute__((always_inline)) int
decode(pydb_postings *out, pydb_mfns *mout, const nidx_cursor *cur,
       nidx_dead_fn dead, const void *dead_ctx, const pydb_mfn_bits *keep,
       uint64_t *live, pydb_error *err)
{
    const nidx_seg *s = cur->s;
    const uint8_t *p = s->map + cur->pstart;
    uint64_t plen = cur->plen;
    int64_t off = (int64_t)cur->pstart;
    PYDB_ASSERT(cur->valid && cur->pstart >= NIDX_SEG_HDR &&
                cur->plen <= s->dict_off &&
                cur->pstart <= s->dict_off - cur->plen);
    if (s->version >= NIDX_SEG_VERSION_DENSE && cur->count > NIDX_SKIP) {
        /* (the cursor checked plen >= count > 0) */
        uint8_t form = p[0];
        if (form == NIDX_FORM_DENSE)
            return decode_dense(out, mout, s->path, p + 1, plen - 1,
                                cur->count, s->version >= NIDX_SEG_VERSION,
                                off + 1, dead, dead_ctx, keep, live, err);
        if (form != NIDX_FORM_SKIP)
            return PYDB_CORRUPT(err, s->path, off,
                                "posting list of unknown form %u",
                                (unsigned)form);
        p++;
        plen--;
        off++;
    }
    return decode_list(out, mout, s->path, p, plen, cur->count,
                       s->version >= NIDX_SEG_VERSION_SKIP, off, dead,
                       dead_ctx, keep, live, err);
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

/* The postings v[n] of one record of a dense list (nidx_seg.h) into
 * out: the first one's TAG, OCC, CNT, then each by the delta rule. */
static void put_record(pydb_buf *out, const pydb_posting *v, size_t n)
{
    pydb__nseg_put_varint(out, v[0].tag);
    pydb__nseg_put_varint(out, v[0].occ);
    pydb__nseg_put_varint(out, v[0].cnt);
    for (size_t i = 1; i < n; i++) {
        const pydb_posting *q = &v[i], *b = &v[i - 1];
        PYDB_ASSERT(q->mfn == b->mfn && pydb__posting_cmp(b, q) < 0);
        if (q->tag != b->tag) {
            pydb__nseg_put_varint(out, q->tag - b->tag);
            pydb__nseg_put_varint(out, q->occ);
            pydb__nseg_put_varint(out, q->cnt);
        } else if (q->occ != b->occ) {
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, q->occ - b->occ);
            pydb__nseg_put_varint(out, q->cnt);
        } else {
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, 0);
            pydb__nseg_put_varint(out, q->cnt - b->cnt);
        }
    }
}

/* v[n] (n > NIDX_SKIP) in the dense form, after its form byte, appended
 * to out, when its records are dense enough for it (bitmap words <=
 * records / 4) and their bytes fit the u32 directory: 1; else 0 with
 * nothing appended. */
static int put_dense(pydb_buf *out, const pydb_posting *v, size_t n)
{
    const size_t at = out->n;
    const int32_t lo = v[0].mfn;
    const uint64_t nwords = ((uint64_t)(v[n - 1].mfn - lo) >> 6) + 1;
    uint64_t nrec = 1, next = 0, r = 0;
    size_t words, offs, ranks, lens, masks, recs;
    pydb_buf rec = {0};

    for (size_t i = 1; i < n; i++) nrec += v[i].mfn != v[i - 1].mfn;
    if (nwords * 4 > nrec) return 0;
    pydb__nseg_put_varint(out, NIDX_FORM_DENSE);
    pydb__nseg_put_varint(out, (uint64_t)lo);
    pydb__nseg_put_varint(out, nwords);
    pydb__nseg_put_varint(out, nrec);
    words = out->n;
    offs = words + 8 * (size_t)nwords;
    ranks = offs + 4 * ((size_t)nwords + 1);
    lens = ranks + 4 * (size_t)nwords;
    masks = lens + (size_t)nrec;
    recs = masks + (size_t)nrec;
    if (!pydb__buf_grow(out, recs - words)) goto cleanup;   /* oom */
    memset(out->p + words, 0, recs - words);
    for (size_t i = 0, j; i < n; i = j, r++) {
        const uint64_t d = (uint64_t)(v[i].mfn - lo), k = d >> 6;
        uint8_t *w;
        for (j = i + 1; j < n && v[j].mfn == v[i].mfn; j++) {}
        if (out->n - recs > UINT32_MAX) break;   /* too long: not dense */
        for (; next <= k; next++) {   /* words up to this one start here */
            pydb__put32(out->p + offs + 4 * next, (uint32_t)(out->n - recs));
            pydb__put32(out->p + ranks + 4 * next, (uint32_t)r);
        }
        w = out->p + words + 8 * k;
        pydb__put64(w, pydb__u64(w) | (uint64_t)1 << (d & 63));
        rec.n = 0;
        put_record(&rec, v + i, j - i);
        if (rec.oom) goto cleanup;
        out->p[lens + r] = (uint8_t)(rec.n < 255 ? rec.n : 255);
        for (size_t x = i; x < j; x++)
            out->p[masks + r] |= (uint8_t)(1u << pydb__nseg_tag_bit(v[x].tag));
        if (rec.n >= 255) pydb__nseg_put_varint(out, rec.n);
        pydb__buf_put(out, rec.p, rec.n);
        if (out->oom) goto cleanup;
    }
    if (out->n - recs > UINT32_MAX) {
        out->n = at;
        free(rec.p);
        return 0;
    }
    pydb__put32(out->p + offs + 4 * nwords, (uint32_t)(out->n - recs));
cleanup:
    if (rec.oom) out->oom = 1;
    free(rec.p);
    return 1;
}

void pydb__nseg_put_postings(pydb_buf *out, const pydb_posting *v, size_t n)
{
    size_t at, plen, hl, boff = 0;
    uint8_t head[10];
    pydb_buf tab = {0};
    int32_t pm = 0;
    if (n <= NIDX_SKIP) {
        pydb__nseg_put_varints(out, v, n);
        return;
    }
    if (put_dense(out, v, n)) return;
    pydb__nseg_put_varint(out, NIDX_FORM_SKIP);
    at = out->n;
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
