/*
 * nidx.c - pydb's native inverted index (DESIGN.md §5-6).
 *
 * Files, in the directory <base>.pdx beside <base>.mst:
 *   MANIFEST         text: format version, generation, key rules (utf8,
 *                    max_key, case and word tables), the FST and stop-word
 *                    texts, the live segments (oldest first), and a
 *                    checksum line.  Replaced atomically: by a bulk build
 *                    (write MANIFEST.tmp, fsync, rename, fsync directory),
 *                    or by a commit through pydb_txn_put_file() (written
 *                    with the records' write-ahead log, replayed by
 *                    recovery), so the index flips with the records.
 *   seg-GGGGGGGG.pds immutable segments, one per bulk build or commit.
 *
 * Segment layout (little-endian):
 *   0   header, 64 bytes: "PYDBSEG1", u32 version 1, u32 terms per block
 *       (32), u64 terms, u64 postings, u64 dictionary offset, u64 block
 *       index offset, u64 blocks, u64 tombstone offset
 *   64  posting lists, one per term in key order: per posting four
 *       LEB128 varints — MFN delta; TAG (delta if same MFN); OCC (delta
 *       if same MFN and TAG); CNT (delta if same MFN, TAG, OCC)
 *   dictionary: blocks of 32 terms; a block starts with the u64 offset of
 *       its first term's postings, then per term: varint shared prefix
 *       length with the previous key of the block (0 for the first),
 *       varint suffix length, suffix bytes, varint posting count, varint
 *       posting bytes
 *   block index: u64 file offset of each block
 *   tombstones: u32 n, then n ascending i32 MFNs: records this segment
 *       supersedes — their postings in every older segment are dead
 *   u64 checksum of all bytes before it
 * Every offset and length is checked against the file before use; a
 * damaged segment is PYDB_ECORRUPT (file, offset, reason).
 *
 * Readers take a reference to the current segment list (a mutex held
 * only for the pointer copy) and never wait for the writer; a commit
 * publishes a new list (the old one is freed by its last reader).
 * Commits made through another handle or process are picked up on the
 * next terms/postings/pin call: the MANIFEST's generation line is read
 * (open, one pread of its first bytes, close -- a stat() would miss a
 * replacement that reuses the inode, size and coarse mtime); when it is
 * newer, the whole MANIFEST is read and its segment list built outside
 * the lock (segments already open are shared) and swapped in under it.
 * Each commit adds one small segment; when there would be more than
 * MERGE_AT, the commit's segment also takes in all segments after the
 * bulk-built base (dropping their dead postings).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nidx_int.h"

#define SEG_MAGIC "PYDBSEG1"
#define SEG_HDR 64
#define BLOCK_TERMS 32
#define MERGE_AT 8            /* segments before a commit merges the tail */
#define MANIFEST_MAGIC "pydb-native-index 1\n"

/* ------------------------------------------------------------ helpers */

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)pydb__u32(p) | ((uint64_t)pydb__u32(p + 4) << 32);
}
static void wr64(uint8_t *p, uint64_t v)
{
    pydb__put32(p, (uint32_t)v);
    pydb__put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t checksum(const uint8_t *p, size_t n)
{
    uint64_t h = 0x243F6A8885A308D3ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = rd64(p + i);
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) {
        h = (h ^ p[i]) * 0x100000001B3ull;
    }
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} buf;

static int buf_reserve(buf *b, size_t more)
{
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    uint8_t *nv = realloc(b->p, cap);
    if (!nv) {
        b->oom = 1;
        return -1;
    }
    b->p = nv;
    b->cap = cap;
    return 0;
}

static void buf_put(buf *b, const void *p, size_t n)
{
    if (n == 0 || buf_reserve(b, n) < 0) return;
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void buf_varint(buf *b, uint64_t v)
{
    if (buf_reserve(b, 10) < 0) return;
    uint8_t *o = b->p + b->n;
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    b->n = (size_t)(o - b->p);
}

static inline int rd_varint(const uint8_t **pp, const uint8_t *end,
                            uint64_t *v)
{
    const uint8_t *p = *pp;
    uint64_t r = 0;
    int shift = 0;
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

static int write_file(const char *path, const void *data, size_t len,
                      int excl, pydb_error *err)
{
    int fd = pydb__vfs->open(path, O_WRONLY | O_CREAT |
                                       (excl ? O_EXCL : O_TRUNC), 0644);
    size_t done = 0;
    if (fd < 0) return PYDB_OSERROR(err, errno, path, -1, "cannot create");
    while (done < len) {
        ssize_t r = pydb__vfs->pwrite(fd, (const uint8_t *)data + done,
                                      len - done, (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            pydb__vfs->close(fd);
            return PYDB_OSERROR(err, e, path, (int64_t)done, "cannot write");
        }
        done += (size_t)r;
    }
    if (pydb__vfs->fsync(fd) != 0) {
        int e = errno;
        pydb__vfs->close(fd);
        return PYDB_OSERROR(err, e, path, -1, "cannot fsync");
    }
    if (pydb__vfs->close(fd) != 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot close");
    return PYDB_OK;
}

static int fsync_dir(const char *dir, pydb_error *err)
{
    int fd = pydb__vfs->open(dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) return PYDB_OSERROR(err, errno, dir, -1, "cannot open");
    if (pydb__vfs->fsync(fd) != 0) {
        int e = errno;
        pydb__vfs->close(fd);
        return PYDB_OSERROR(err, e, dir, -1, "cannot fsync the directory");
    }
    pydb__vfs->close(fd);
    return PYDB_OK;
}

/* <base>.pdx for a database path ("x/cds", "x/cds.mst", "x/CDS.XRF"). */
static int index_dir(char *out, size_t cap, const char *db_path,
                     pydb_error *err)
{
    size_t l = strlen(db_path);
    if (l >= 4 && db_path[l - 4] == '.' &&
        (strcasecmp(db_path + l - 3, "mst") == 0 ||
         strcasecmp(db_path + l - 3, "xrf") == 0))
        l -= 4;
    if (l == 0 || l + 5 >= cap)
        return PYDB_ERROR(err, PYDB_EINVAL, db_path, -1,
                          "database path too long or empty");
    memcpy(out, db_path, l);
    memcpy(out + l, ".pdx", 5);
    return PYDB_OK;
}

/* ------------------------------------------------------------ segments */

typedef struct seg {
    atomic_int refs;
    char path[1100];
    uint8_t *map;
    size_t size;
    uint64_t nterms, nposts, nblocks, dict_off, bidx_off, tomb_off;
    uint32_t ntomb;
    const uint8_t *tomb;     /* ntomb i32, little-endian */
    uint64_t gen;
} seg;

typedef struct segset {
    atomic_int refs;
    size_t n;
    seg **v;                 /* oldest first */
    uint8_t *newer_tombs;    /* [i]: some segment after i has tombstones */
    uint8_t **dead;          /* [i]: bitmap of the MFNs tombstoned after i
                                (MFN < dead_bits[i]), or NULL            */
    uint32_t *dead_bits;
} segset;

static void seg_unref(seg *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
    if (s->map) munmap(s->map, s->size);
    free(s);
}

static void segset_unref(segset *ss)
{
    if (!ss || atomic_fetch_sub(&ss->refs, 1) != 1) return;
    for (size_t i = 0; i < ss->n; i++) {
        seg_unref(ss->v[i]);
        if (ss->dead) free(ss->dead[i]);
    }
    free(ss->v);
    free(ss->newer_tombs);
    free(ss->dead);
    free(ss->dead_bits);
    free(ss);
}

static segset *segset_new(size_t n)
{
    segset *ss = calloc(1, sizeof *ss);
    if (!ss) return NULL;
    ss->v = calloc(n ? n : 1, sizeof *ss->v);
    ss->newer_tombs = calloc(n ? n : 1, 1);
    if (!ss->v || !ss->newer_tombs) {
        free(ss->v);
        free(ss->newer_tombs);
        free(ss);
        return NULL;
    }
    atomic_init(&ss->refs, 1);
    ss->n = n;
    return ss;
}

static int32_t seg_tomb(const seg *s, uint32_t i)
{
    return (int32_t)pydb__u32(s->tomb + 4 * (size_t)i);
}

/* Flags and dead-MFN bitmaps for the list.  A bitmap that cannot be
 * allocated is left NULL (is_dead then searches the tombstones). */
static void segset_finish(segset *ss)
{
    int any = 0;
    int32_t maxm = 0;
    for (size_t i = ss->n; i-- > 0;) {
        ss->newer_tombs[i] = (uint8_t)any;
        if (ss->v[i]->ntomb) {
            any = 1;
            int32_t m = seg_tomb(ss->v[i], ss->v[i]->ntomb - 1);
            if (m > maxm) maxm = m;
        }
    }
    if (!any || ss->n < 2) return;
    ss->dead = calloc(ss->n, sizeof *ss->dead);
    ss->dead_bits = calloc(ss->n, sizeof *ss->dead_bits);
    if (!ss->dead || !ss->dead_bits) {
        free(ss->dead);
        free(ss->dead_bits);
        ss->dead = NULL;
        ss->dead_bits = NULL;
        return;
    }
    size_t bytes = (size_t)maxm / 8 + 1;
    uint8_t *acc = NULL;      /* union of the tombstones after i */
    for (size_t i = ss->n - 1; i-- > 0;) {
        const seg *nx = ss->v[i + 1];
        if (nx->ntomb) {
            uint8_t *b = malloc(bytes);
            if (!b) break;
            if (acc) memcpy(b, acc, bytes);
            else memset(b, 0, bytes);
            for (uint32_t k = 0; k < nx->ntomb; k++) {
                int32_t m = seg_tomb(nx, k);
                if (m >= 0) b[m >> 3] |= (uint8_t)(1u << (m & 7));
            }
            acc = b;
        } else if (acc) {
            uint8_t *b = malloc(bytes);
            if (!b) break;
            memcpy(b, acc, bytes);
            acc = b;
        }
        ss->dead[i] = acc;
        ss->dead_bits[i] = acc ? (uint32_t)bytes * 8 : 0;
    }
}

static int seg_has_tomb(const seg *s, int32_t mfn)
{
    uint32_t lo = 0, hi = s->ntomb;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int32_t v = seg_tomb(s, mid);
        if (v == mfn) return 1;
        if (v < mfn) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

static int is_dead(const segset *ss, size_t i, int32_t mfn)
{
    if (!ss->newer_tombs[i]) return 0;
    if (ss->dead && ss->dead[i])
        return mfn >= 0 && (uint32_t)mfn < ss->dead_bits[i] &&
               (ss->dead[i][mfn >> 3] >> (mfn & 7)) & 1;
    for (size_t j = i + 1; j < ss->n; j++)
        if (ss->v[j]->ntomb && seg_has_tomb(ss->v[j], mfn)) return 1;
    return 0;
}

static int seg_open(seg **out, const char *path, uint64_t gen,
                    pydb_error *err)
{
    struct stat st;
    seg *s = NULL;
    int fd = -1, rc = PYDB_OK;
    const uint8_t *m;

    *out = NULL;
    fd = pydb__vfs->open(path, O_RDONLY, 0);
    if (fd < 0) return PYDB_OSERROR(err, errno, path, -1, "cannot open");
    if (fstat(fd, &st) != 0) {
        rc = PYDB_OSERROR(err, errno, path, -1, "cannot stat");
        goto cleanup;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "cannot allocate");
        goto cleanup;
    }
    atomic_init(&s->refs, 1);
    snprintf(s->path, sizeof s->path, "%s", path);
    s->gen = gen;
    s->size = (size_t)st.st_size;
    if (s->size < SEG_HDR + 4 + 8) {
        rc = PYDB_CORRUPT(err, path, 0, "segment of %zu bytes is too short",
                          s->size);
        goto cleanup;
    }
    s->map = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        rc = PYDB_OSERROR(err, errno, path, -1, "cannot map");
        goto cleanup;
    }
    m = s->map;
    if (memcmp(m, SEG_MAGIC, 8) != 0 || pydb__u32(m + 8) != 1 ||
        pydb__u32(m + 12) != BLOCK_TERMS) {
        rc = PYDB_CORRUPT(err, path, 0, "not a pydb index segment (magic, "
                          "version or block size)");
        goto cleanup;
    }
    if (checksum(m, s->size - 8) != rd64(m + s->size - 8)) {
        rc = PYDB_CORRUPT(err, path, (int64_t)(s->size - 8),
                          "segment checksum mismatch");
        goto cleanup;
    }
    s->nterms = rd64(m + 16);
    s->nposts = rd64(m + 24);
    s->dict_off = rd64(m + 32);
    s->bidx_off = rd64(m + 40);
    s->nblocks = rd64(m + 48);
    s->tomb_off = rd64(m + 56);
    if (s->dict_off < SEG_HDR || s->dict_off > s->bidx_off ||
        s->bidx_off > s->tomb_off || s->tomb_off > s->size - 12 ||
        s->nblocks != (s->nterms + BLOCK_TERMS - 1) / BLOCK_TERMS ||
        s->nblocks > (s->tomb_off - s->bidx_off) / 8 ||
        s->bidx_off + s->nblocks * 8 != s->tomb_off) {
        rc = PYDB_CORRUPT(err, path, 16, "segment header offsets are "
                          "inconsistent with the file size");
        goto cleanup;
    }
    s->ntomb = pydb__u32(m + s->tomb_off);
    if ((uint64_t)s->ntomb * 4 != s->size - 8 - s->tomb_off - 4) {
        rc = PYDB_CORRUPT(err, path, (int64_t)s->tomb_off,
                          "tombstone count does not match the file size");
        goto cleanup;
    }
    s->tomb = m + s->tomb_off + 4;
    for (uint32_t i = 1; i < s->ntomb; i++)
        if (seg_tomb(s, i) <= seg_tomb(s, i - 1)) {
            rc = PYDB_CORRUPT(err, path, (int64_t)(s->tomb_off + 4 + 4 * i),
                              "tombstones not ascending");
            goto cleanup;
        }
    for (uint64_t b = 0; b < s->nblocks; b++) {
        uint64_t o = rd64(m + s->bidx_off + 8 * b);
        uint64_t prev = b ? rd64(m + s->bidx_off + 8 * (b - 1)) : 0;
        if (o < s->dict_off || o + 8 > s->bidx_off || (b && o <= prev)) {
            rc = PYDB_CORRUPT(err, path, (int64_t)(s->bidx_off + 8 * b),
                              "dictionary block offset out of range");
            goto cleanup;
        }
    }
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

/* A cursor over the dictionary of one segment. */
typedef struct cursor {
    const seg *s;
    size_t idx;              /* position in the segment list */
    uint64_t blk, term;      /* current block; global term number */
    const uint8_t *p, *end;  /* next entry; end of the block */
    uint64_t poff;           /* postings offset of the next entry */
    uint8_t *key;
    size_t klen, kcap;
    uint64_t count, pstart, plen;
    int valid;
} cursor;

static int cur_corrupt(const cursor *c, const char *what, pydb_error *err)
{
    return PYDB_CORRUPT(err, c->s->path,
                        c->p ? (int64_t)(c->p - c->s->map) : -1,
                        "dictionary: %s", what);
}

static int cur_block(cursor *c, uint64_t b, pydb_error *err)
{
    const seg *s = c->s;
    uint64_t o = rd64(s->map + s->bidx_off + 8 * b);
    uint64_t e = b + 1 < s->nblocks ? rd64(s->map + s->bidx_off + 8 * (b + 1))
                                    : s->bidx_off;
    c->blk = b;
    c->term = b * BLOCK_TERMS;
    c->p = s->map + o + 8;
    c->end = s->map + e;
    c->poff = rd64(s->map + o);
    c->klen = 0;
    if (c->poff < SEG_HDR || c->poff > s->dict_off)
        return cur_corrupt(c, "block postings offset out of range", err);
    return PYDB_OK;
}

/* Decode the next entry into the cursor (valid = 0 at the end). */
static int cur_next(cursor *c, pydb_error *err)
{
    const seg *s = c->s;
    uint64_t shared, slen;
    if (c->term >= s->nterms) {
        c->valid = 0;
        return PYDB_OK;
    }
    if (c->term > 0 && c->term % BLOCK_TERMS == 0 &&
        c->term / BLOCK_TERMS != c->blk) {
        int rc = cur_block(c, c->term / BLOCK_TERMS, err);
        if (rc) return rc;
    }
    if (rd_varint(&c->p, c->end, &shared) || rd_varint(&c->p, c->end, &slen))
        return cur_corrupt(c, "truncated entry", err);
    if (shared > c->klen || slen > (uint64_t)(c->end - c->p) ||
        (c->term % BLOCK_TERMS == 0 && shared != 0))
        return cur_corrupt(c, "key length out of range", err);
    if (shared + slen > c->kcap) {
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
    return PYDB_OK;
}

/* Position at the first key >= target. */
static int cur_seek(cursor *c, const uint8_t *t, size_t tl, pydb_error *err)
{
    const seg *s = c->s;
    uint64_t lo = 0, hi = s->nblocks;
    int rc;
    c->valid = 0;
    if (s->nterms == 0) return PYDB_OK;
    /* last block whose first key <= target */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        const uint8_t *p = s->map + rd64(s->map + s->bidx_off + 8 * mid) + 8;
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
    if ((rc = cur_block(c, lo, err))) return rc;
    for (;;) {
        if ((rc = cur_next(c, err))) return rc;
        if (!c->valid || pydb__keycmp(c->key, c->klen, t, tl) >= 0)
            return PYDB_OK;
    }
}

/* Decode the posting list at the cursor, appending live postings. */
static int decode_postings(pydb_postings *out, const segset *ss, size_t i,
                           const seg *s, uint64_t start, uint64_t plen,
                           uint64_t count, uint64_t *live, pydb_error *err)
{
    const uint8_t *p = s->map + start, *e = p + plen;
    uint64_t m = 0, tag = 0, occ = 0, cnt = 0, n = 0;
    int check = ss && ss->newer_tombs[i];
    *live = 0;
    while (p < e) {
        uint64_t dm, a, b, c;
        if (rd_varint(&p, e, &dm) || rd_varint(&p, e, &a) ||
            rd_varint(&p, e, &b) || rd_varint(&p, e, &c))
            return PYDB_CORRUPT(err, s->path, (int64_t)(p - s->map),
                                "posting list truncated");
        if (dm) {
            m += dm;
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
        if (m < 1 || m > INT32_MAX || tag > UINT32_MAX || occ > UINT32_MAX ||
            cnt > UINT32_MAX || (n > 0 && dm == 0 && a == 0 && b == 0 &&
                                 c == 0))
            return PYDB_CORRUPT(err, s->path, (int64_t)(p - s->map),
                                "posting out of range or not ascending");
        n++;
        if (check && is_dead(ss, i, (int32_t)m)) continue;
        (*live)++;
        if (out) {
            pydb_posting v = {(int32_t)m, (uint32_t)tag, (uint32_t)occ,
                              (uint32_t)cnt};
            int rc = pydb__postings_push(out, &v, err);
            if (rc) return rc;
        }
    }
    if (n != count)
        return PYDB_CORRUPT(err, s->path, (int64_t)start,
                            "posting list holds %llu postings, dictionary "
                            "says %llu", (unsigned long long)n,
                            (unsigned long long)count);
    return PYDB_OK;
}

/* ------------------------------------------------------------ the index */

typedef struct nidx {
    pydb_index base;
    char dir[1024], manifest[1100];
    pydb_keyrules rules;
    pydb_stopwords sw;
    pydb_fst *fst;
    char *fst_text;
    size_t fst_len;
    uint8_t *stw_text;
    size_t stw_len;
    pthread_mutex_t mu;
    segset *cur;
    uint64_t gen;
    /* commit hook */
    pydb_put_file_fn put_file;
    void *put_ctx;
    seg *pending;
    uint64_t pending_gen;
    int pending_merge;         /* the pending segment replaces the tail */
    pydb_fst_scratch scratch;
    /* test double of pydb_txn_put_file (pydb__nidx_use_test_put) */
    char test_path[1100];
    uint8_t *test_data;
    size_t test_len;
} nidx;

static segset *acquire(nidx *x)
{
    segset *ss;
    pthread_mutex_lock(&x->mu);
    ss = x->cur;
    atomic_fetch_add(&ss->refs, 1);
    pthread_mutex_unlock(&x->mu);
    return ss;
}

static int terms_in(nidx *x, segset *ss, const uint8_t *prefix,
                    size_t prefix_len, const uint8_t *start,
                    size_t start_len, pydb_term_fn fn, void *ctx,
                    pydb_error *err)
{
    cursor *cs = calloc(ss->n ? ss->n : 1, sizeof *cs);
    const uint8_t *from = prefix;
    size_t from_len = prefix_len, nord = 0;
    cursor **ord = NULL;
    int rc = PYDB_OK;

    if (!cs) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "cannot allocate");
        goto cleanup;
    }
    if (start && pydb__keycmp(start, start_len, prefix, prefix_len) > 0) {
        from = start;
        from_len = start_len;
    }
    for (size_t i = 0; i < ss->n; i++) {
        cs[i].s = ss->v[i];
        cs[i].idx = i;
        if ((rc = cur_seek(&cs[i], from, from_len, err))) goto cleanup;
    }
    if (ss->n == 1 && !ss->newer_tombs[0]) {   /* one segment: no merge */
        cursor *c = &cs[0];
        while (c->valid) {
            if (c->klen < prefix_len ||
                (prefix_len && memcmp(c->key, prefix, prefix_len) != 0))
                break;
            if (fn(ctx, c->key, c->klen, c->count)) break;
            if ((rc = cur_next(c, err))) goto cleanup;
        }
        goto cleanup;
    }
    /* k-way merge: the valid cursors kept sorted by their current key, so
     * each key costs about one comparison per cursor that shares it */
    ord = malloc(ss->n * sizeof *ord);
    if (!ord) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "cannot allocate");
        goto cleanup;
    }
    for (size_t i = 0; i < ss->n; i++) {
        if (!cs[i].valid) continue;
        size_t p = nord;
        while (p > 0 && pydb__keycmp(cs[i].key, cs[i].klen, ord[p - 1]->key,
                                     ord[p - 1]->klen) < 0) {
            ord[p] = ord[p - 1];
            p--;
        }
        ord[p] = &cs[i];
        nord++;
    }
    while (nord > 0) {
        cursor *min = ord[0];
        uint64_t total = 0;
        size_t k = 1;
        if (min->klen < prefix_len ||
            (prefix_len && memcmp(min->key, prefix, prefix_len) != 0))
            break;
        while (k < nord && pydb__keycmp(ord[k]->key, ord[k]->klen, min->key,
                                        min->klen) == 0)
            k++;
        for (size_t j = 0; j < k; j++) {
            cursor *c = ord[j];
            if (ss->newer_tombs[c->idx]) {
                uint64_t live;
                if ((rc = decode_postings(NULL, ss, c->idx, c->s, c->pstart,
                                          c->plen, c->count, &live, err)))
                    goto cleanup;
                total += live;
            } else {
                total += c->count;
            }
        }
        if (total > 0 && fn(ctx, min->key, min->klen, total)) break;
        /* advance the k cursors on this key and put them back in order */
        cursor *moved[k];
        size_t nm = 0;
        for (size_t j = 0; j < k; j++) {
            if ((rc = cur_next(ord[j], err))) goto cleanup;
            if (ord[j]->valid) moved[nm++] = ord[j];
        }
        memmove(ord, ord + k, (nord - k) * sizeof *ord);
        nord -= k;
        for (size_t j = 0; j < nm; j++) {
            cursor *c = moved[j];
            size_t p = 0;
            while (p < nord && pydb__keycmp(ord[p]->key, ord[p]->klen,
                                            c->key, c->klen) < 0)
                p++;
            memmove(ord + p + 1, ord + p, (nord - p) * sizeof *ord);
            ord[p] = c;
            nord++;
        }
    }
cleanup:
    if (cs)
        for (size_t i = 0; i < ss->n; i++) free(cs[i].key);
    free(cs);
    free(ord);
    return rc;
}

static int refresh(nidx *x, int force, pydb_error *err);

static int nidx_terms(pydb_index *ix, const uint8_t *prefix,
                      size_t prefix_len, const uint8_t *start,
                      size_t start_len, pydb_term_fn fn, void *ctx,
                      pydb_error *err)
{
    nidx *x = (nidx *)ix;
    int rc = refresh(x, 0, err);
    if (rc) return rc;
    segset *ss = acquire(x);
    rc = terms_in(x, ss, prefix, prefix_len, start, start_len, fn, ctx, err);
    segset_unref(ss);
    return rc;
}

static int postings_in(pydb_postings *out, segset *ss, const uint8_t *key,
                       size_t len, pydb_error *err)
{
    size_t first = out->n;
    int rc = PYDB_OK, parts = 0;
    cursor c;

    memset(&c, 0, sizeof c);
    for (size_t i = 0; i < ss->n; i++) {
        uint64_t live;
        c.s = ss->v[i];
        if ((rc = cur_seek(&c, key, len, err))) goto cleanup;
        if (!c.valid || pydb__keycmp(c.key, c.klen, key, len) != 0) continue;
        if ((rc = decode_postings(out, ss, i, c.s, c.pstart, c.plen, c.count,
                                  &live, err)))
            goto cleanup;
        parts += live > 0;
    }
    if (parts > 1)
        qsort(out->v + first, out->n - first, sizeof *out->v,
              pydb__posting_cmp);
cleanup:
    free(c.key);
    return rc;
}

static int nidx_postings(pydb_postings *out, pydb_index *ix,
                         const uint8_t *key, size_t len, pydb_error *err)
{
    int rc = refresh((nidx *)ix, 0, err);
    if (rc) return rc;
    segset *ss = acquire((nidx *)ix);
    rc = postings_in(out, ss, key, len, err);
    segset_unref(ss);
    return rc;
}

static int nidx_key(pydb_index *ix, const uint8_t *term, size_t len,
                    uint8_t *out, size_t cap, size_t *out_len,
                    pydb_error *err)
{
    return pydb__key_normalize(&((nidx *)ix)->rules, term, len, out, cap,
                               out_len, err);
}

static void nidx_close(pydb_index *ix)
{
    nidx *x = (nidx *)ix;
    /* A pending segment here belongs to a commit that failed once its log
     * may have been durable (pydb.h, pydb_commit_hook): recovery may name
     * it, so it stays; if it does not, a later prepare collects it. */
    if (x->pending) seg_unref(x->pending);
    segset_unref(x->cur);
    pydb_fst_free(x->fst);
    pydb__stopwords_free(&x->sw);
    pydb__fst_scratch_free(&x->scratch);
    free(x->fst_text);
    free(x->stw_text);
    free(x->test_data);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

/* A pinned view: the segment list current when it was made.  It borrows
 * the key rules of its index, which must outlive it. */
typedef struct nidx_view {
    pydb_index base;
    nidx *x;
    segset *ss;
} nidx_view;

static int view_terms(pydb_index *ix, const uint8_t *prefix,
                      size_t prefix_len, const uint8_t *start,
                      size_t start_len, pydb_term_fn fn, void *ctx,
                      pydb_error *err)
{
    nidx_view *v = (nidx_view *)ix;
    return terms_in(v->x, v->ss, prefix, prefix_len, start, start_len, fn,
                    ctx, err);
}

static int view_postings(pydb_postings *out, pydb_index *ix,
                         const uint8_t *key, size_t len, pydb_error *err)
{
    return postings_in(out, ((nidx_view *)ix)->ss, key, len, err);
}

static int view_key(pydb_index *ix, const uint8_t *term, size_t len,
                    uint8_t *out, size_t cap, size_t *out_len,
                    pydb_error *err)
{
    return pydb__key_normalize(&((nidx_view *)ix)->x->rules, term, len, out,
                               cap, out_len, err);
}

static void view_close(pydb_index *ix)
{
    nidx_view *v = (nidx_view *)ix;
    segset_unref(v->ss);
    free(v);
}

static const pydb_index_ops view_ops = {"native", view_terms, view_postings,
                                        view_key, view_close, NULL};

static int nidx_pin(pydb_index *ix, pydb_index **out, pydb_error *err)
{
    nidx *x = (nidx *)ix;
    int rc = refresh(x, 0, err);
    if (rc) return rc;
    nidx_view *v = calloc(1, sizeof *v);
    if (!v) return PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
    v->base = x->base;
    v->base.ops = &view_ops;
    v->x = x;
    v->ss = acquire(x);
    *out = &v->base;
    return PYDB_OK;
}

static const pydb_index_ops nidx_ops = {"native", nidx_terms, nidx_postings,
                                        nidx_key, nidx_close, nidx_pin};

/* ------------------------------------------------------------ manifest */

static void hex_put(buf *b, const uint8_t *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    if (buf_reserve(b, n * 2) < 0) return;
    for (size_t i = 0; i < n; i++) {
        b->p[b->n++] = (uint8_t)hx[p[i] >> 4];
        b->p[b->n++] = (uint8_t)hx[p[i] & 15];
    }
}

/* Manifest bytes for rules + a list of (generation) segments. */
static int manifest_bytes(buf *b, uint64_t gen, const pydb_keyrules *r,
                          const char *fst, size_t fst_len, const uint8_t *stw,
                          size_t stw_len, const uint64_t *gens, size_t ngens,
                          pydb_error *err)
{
    char line[128];
    int l;
    buf_put(b, MANIFEST_MAGIC, strlen(MANIFEST_MAGIC));
    l = snprintf(line, sizeof line, "generation %llu\nutf8 %d\nmax_key %zu\n",
                 (unsigned long long)gen, r->utf8, r->max_key);
    buf_put(b, line, (size_t)l);
    buf_put(b, "upper ", 6);
    hex_put(b, r->upper, 256);
    buf_put(b, "\nword ", 6);
    hex_put(b, r->word, 256);
    l = snprintf(line, sizeof line, "\nfst %zu\n", fst_len);
    buf_put(b, line, (size_t)l);
    buf_put(b, fst, fst_len);
    l = snprintf(line, sizeof line, "\nstw %zu\n", stw_len);
    buf_put(b, line, (size_t)l);
    if (stw_len) buf_put(b, stw, stw_len);
    buf_put(b, "\n", 1);
    for (size_t i = 0; i < ngens; i++) {
        l = snprintf(line, sizeof line, "segment seg-%08llu.pds\n",
                     (unsigned long long)gens[i]);
        buf_put(b, line, (size_t)l);
    }
    l = snprintf(line, sizeof line, "end %016llx\n",
                 (unsigned long long)checksum(b->p, b->n));
    buf_put(b, line, (size_t)l);
    if (b->oom)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                          "cannot allocate the manifest");
    return PYDB_OK;
}

typedef struct manifest {
    uint64_t gen;
    pydb_keyrules rules;
    const char *fst;
    size_t fst_len;
    const uint8_t *stw;
    size_t stw_len;
    uint64_t *segs;
    size_t nsegs;
} manifest;

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int parse_manifest(manifest *m, const uint8_t *d, size_t n,
                          const char *path, pydb_error *err)
{
    const uint8_t *p = d, *e = d + n;
    size_t ml = strlen(MANIFEST_MAGIC), cap = 0;
    unsigned long long v;
    int k;
    char *end;

    memset(m, 0, sizeof *m);
#define BAD(what) \
    do { \
        free(m->segs); \
        m->segs = NULL; \
        return PYDB_CORRUPT(err, path, (int64_t)(p - d), "manifest: %s", what); \
    } while (0)
    if (n < ml || memcmp(d, MANIFEST_MAGIC, ml) != 0) BAD("bad magic line");
    /* the checksum line covers everything before it */
    {
        const uint8_t *q = e;
        if (n < 21 || e[-1] != '\n') BAD("missing end line");
        q = e - 21;
        if (memcmp(q, "end ", 4) != 0) BAD("missing end line");
        uint64_t want = 0;
        for (int i = 0; i < 16; i++) {
            int h = hexval(q[4 + i]);
            if (h < 0) BAD("bad checksum");
            want = want << 4 | (uint64_t)h;
        }
        if (checksum(d, (size_t)(q - d)) != want) {
            p = q;
            BAD("checksum mismatch");
        }
        e = q;
    }
    p += ml;
    if (sscanf((const char *)p, "generation %llu\nutf8 %d\nmax_key %zu\n",
               &v, &m->rules.utf8, &m->rules.max_key) != 3)
        BAD("bad header lines");
    m->gen = v;
    for (k = 0; k < 3; k++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(e - p));
        if (!nl) BAD("truncated");
        p = nl + 1;
    }
    for (int t = 0; t < 2; t++) {
        uint8_t *dst = t ? m->rules.word : m->rules.upper;
        const char *name = t ? "word " : "upper ";
        size_t nl = strlen(name);
        if ((size_t)(e - p) < nl + 513 || memcmp(p, name, nl) != 0)
            BAD("bad table line");
        p += nl;
        for (int i = 0; i < 256; i++) {
            int h = hexval(p[2 * i]), l2 = hexval(p[2 * i + 1]);
            if (h < 0 || l2 < 0) BAD("bad table digit");
            dst[i] = (uint8_t)(h << 4 | l2);
        }
        p += 512;
        if (*p++ != '\n') BAD("bad table line end");
    }
    for (int t = 0; t < 2; t++) {
        const char *name = t ? "stw " : "fst ";
        if ((size_t)(e - p) < 5 || memcmp(p, name, 4) != 0)
            BAD("bad text section");
        p += 4;
        errno = 0;
        v = strtoull((const char *)p, &end, 10);
        if ((const uint8_t *)end >= e || *end != '\n' || errno)
            BAD("bad text length");
        p = (const uint8_t *)end + 1;
        if (v > (unsigned long long)(e - p) - 1) BAD("text passes the end");
        if (t) {
            m->stw = p;
            m->stw_len = (size_t)v;
        } else {
            m->fst = (const char *)p;
            m->fst_len = (size_t)v;
        }
        p += v;
        if (*p++ != '\n') BAD("bad text section end");
    }
    while (p < e) {
        unsigned long long g;
        if ((size_t)(e - p) < 25 || memcmp(p, "segment seg-", 12) != 0 ||
            sscanf((const char *)p + 12, "%8llu.pds\n", &g) != 1 ||
            memcmp(p + 20, ".pds\n", 5) != 0)
            BAD("bad segment line");
        if (m->nsegs == cap) {
            cap = cap ? cap * 2 : 8;
            uint64_t *nv = realloc(m->segs, cap * sizeof *nv);
            if (!nv) BAD("out of memory");
            m->segs = nv;
        }
        m->segs[m->nsegs++] = g;
        p += 25;
    }
#undef BAD
    return PYDB_OK;
}

static void seg_path(char *out, size_t cap, const char *dir, uint64_t gen)
{
    snprintf(out, cap, "%s/seg-%08llu.pds", dir, (unsigned long long)gen);
}

int pydb_native_index_open(pydb_index **out, const char *db_path,
                           pydb_error *err)
{
    nidx *x = calloc(1, sizeof *x);
    uint8_t *data = NULL;
    size_t len;
    manifest m;
    int rc;

    *out = NULL;
    memset(&m, 0, sizeof m);
    if (!x) return PYDB_ERROR(err, PYDB_ENOMEM, db_path, -1, "no memory");
    pthread_mutex_init(&x->mu, NULL);
    x->base.ops = &nidx_ops;
    x->base.kind = PYDB_INDEX_NATIVE;
    x->base.caps = PYDB_POSTING_TAG | PYDB_POSTING_OCC | PYDB_POSTING_CNT;
    if ((rc = index_dir(x->dir, sizeof x->dir, db_path, err))) goto cleanup;
    snprintf(x->manifest, sizeof x->manifest, "%s/MANIFEST", x->dir);
    if ((rc = pydb__read_file(x->manifest, &data, &len, err))) goto cleanup;
    if ((rc = parse_manifest(&m, data, len, x->manifest, err))) goto cleanup;
    x->rules = m.rules;
    x->gen = m.gen;
    x->fst_text = malloc(m.fst_len + 1);
    x->stw_text = malloc(m.stw_len + 1);
    if (!x->fst_text || !x->stw_text) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->manifest, -1, "no memory");
        goto cleanup;
    }
    memcpy(x->fst_text, m.fst, m.fst_len);
    x->fst_len = m.fst_len;
    memcpy(x->stw_text, m.stw, m.stw_len);
    x->stw_len = m.stw_len;
    if ((rc = pydb_fst_parse(&x->fst, x->fst_text, x->fst_len, x->manifest,
                             err)))
        goto cleanup;
    if ((rc = pydb__stopwords_parse(&x->sw, &x->rules, x->stw_text,
                                    x->stw_len, err)))
        goto cleanup;
    x->cur = segset_new(m.nsegs);
    if (!x->cur) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->manifest, -1, "no memory");
        goto cleanup;
    }
    x->cur->n = 0;
    for (size_t i = 0; i < m.nsegs; i++) {
        char path[1100];
        seg_path(path, sizeof path, x->dir, m.segs[i]);
        if ((rc = seg_open(&x->cur->v[i], path, m.segs[i], err)))
            goto cleanup;
        x->cur->n = i + 1;
    }
    segset_finish(x->cur);
cleanup:
    free(m.segs);
    free(data);
    if (rc) {
        nidx_close(&x->base);
        return rc;
    }
    *out = &x->base;
    return PYDB_OK;
}

/* --------------------------------------------------- accumulating keys */

typedef struct aterm {
    uint64_t off;
    uint32_t len, hash;
    uint64_t n;
} aterm;

typedef struct apost {
    uint32_t term;
    pydb_posting p;
} apost;

#define STAGE 1024    /* keys hashed and prefetched together */

typedef struct staged {
    uint64_t off;      /* in acc.stage_keys */
    uint32_t len, hash;
    pydb_posting p;
} staged;

typedef struct acc {
    staged *st;
    size_t nst;
    buf stage_keys;
    buf arena;
    aterm *t;
    size_t nt, tcap;
    uint64_t *ht;            /* hash << 32 | (term index + 1); 0 = empty */
    size_t hcap;
    apost *p;
    size_t np, pcap;
    pydb_error *err;
} acc;

static uint32_t key_hash(const uint8_t *k, size_t l)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ l;
    size_t i = 0;
    for (; i + 8 <= l; i += 8) {
        uint64_t w;
        memcpy(&w, k + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, k + i, l - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

static void acc_free(acc *a)
{
    free(a->st);
    free(a->stage_keys.p);
    free(a->arena.p);
    free(a->t);
    free(a->ht);
    free(a->p);
    memset(a, 0, sizeof *a);
}

static int acc_grow_ht(acc *a)
{
    size_t cap = a->hcap ? a->hcap * 2 : 65536;
    uint64_t *nh = calloc(cap, sizeof *nh);
    if (!nh) return -1;
    for (size_t i = 0; i < a->nt; i++) {
        size_t j = a->t[i].hash & (cap - 1);
        while (nh[j]) j = (j + 1) & (cap - 1);
        nh[j] = (uint64_t)a->t[i].hash << 32 | (uint64_t)(i + 1);
    }
    free(a->ht);
    a->ht = nh;
    a->hcap = cap;
    return 0;
}

/* Insert one key (hash h) and its posting. */
static int acc_insert(acc *a, const uint8_t *key, size_t len, uint32_t h,
                      const pydb_posting *p)
{
    size_t j;
    uint32_t ti = UINT32_MAX;

    j = h & (a->hcap - 1);
    for (;;) {
        uint64_t v = a->ht[j];
        if (!v) break;
        if ((uint32_t)(v >> 32) == h) {
            const aterm *t = &a->t[(uint32_t)v - 1];
            if (t->len == len && memcmp(a->arena.p + t->off, key, len) == 0) {
                ti = (uint32_t)v - 1;
                break;
            }
        }
        j = (j + 1) & (a->hcap - 1);
    }
    if (ti == UINT32_MAX) {
        if (len > UINT32_MAX || a->nt >= UINT32_MAX - 1)
            return PYDB_ERROR(a->err, PYDB_ETOOBIG, "", -1,
                              "too many or too long keys");
        if (a->nt == a->tcap) {
            size_t cap = a->tcap ? a->tcap * 2 : 4096;
            aterm *nv = realloc(a->t, cap * sizeof *nv);
            if (!nv) goto oom;
            a->t = nv;
            a->tcap = cap;
        }
        ti = (uint32_t)a->nt++;
        a->t[ti].off = a->arena.n;
        a->t[ti].len = (uint32_t)len;
        a->t[ti].hash = h;
        a->t[ti].n = 0;
        buf_put(&a->arena, key, len);
        if (a->arena.oom) goto oom;
        a->ht[j] = (uint64_t)h << 32 | (uint64_t)(ti + 1);
    }
    a->p[a->np].term = ti;
    a->p[a->np].p = *p;
    a->np++;
    a->t[ti].n++;
    return PYDB_OK;
oom:
    return PYDB_ERROR(a->err, PYDB_ENOMEM, "", -1,
                      "cannot grow the key accumulator");
}

/* Insert the staged keys: hash slots and terms prefetched first, so the
 * cache misses of a batch overlap. */
static int acc_flush(acc *a)
{
    int rc = PYDB_OK;
    if (a->nst == 0) return PYDB_OK;
    while ((a->nt + a->nst) * 2 >= a->hcap)
        if (acc_grow_ht(a) < 0) goto oom;
    if (a->np + a->nst > a->pcap) {
        size_t cap = a->pcap ? a->pcap : 65536;
        while (cap < a->np + a->nst) cap *= 2;
        apost *nv = realloc(a->p, cap * sizeof *nv);
        if (!nv) goto oom;
        a->p = nv;
        a->pcap = cap;
    }
    for (size_t i = 0; i < a->nst; i++)
        __builtin_prefetch(&a->ht[a->st[i].hash & (a->hcap - 1)]);
    for (size_t i = 0; i < a->nst; i++) {
        uint64_t v = a->ht[a->st[i].hash & (a->hcap - 1)];
        if (v) __builtin_prefetch(&a->t[(uint32_t)v - 1]);
    }
    for (size_t i = 0; i < a->nst && rc == PYDB_OK; i++)
        rc = acc_insert(a, a->stage_keys.p + a->st[i].off, a->st[i].len,
                        a->st[i].hash, &a->st[i].p);
    a->nst = 0;
    a->stage_keys.n = 0;
    return rc;
oom:
    return PYDB_ERROR(a->err, PYDB_ENOMEM, "", -1,
                      "cannot grow the key accumulator");
}

/* pydb_key_fn: add one (key, posting). */
static int acc_add(void *ctx, const uint8_t *key, size_t len,
                   const pydb_posting *p)
{
    acc *a = ctx;
    if (!a->st && !(a->st = malloc(STAGE * sizeof *a->st)))
        return PYDB_ERROR(a->err, PYDB_ENOMEM, "", -1, "no memory");
    if (len > UINT32_MAX)
        return PYDB_ERROR(a->err, PYDB_ETOOBIG, "", -1, "key too long");
    staged *s = &a->st[a->nst++];
    s->off = a->stage_keys.n;
    s->len = (uint32_t)len;
    s->hash = key_hash(key, len);
    s->p = *p;
    buf_put(&a->stage_keys, key, len);
    if (a->stage_keys.oom)
        return PYDB_ERROR(a->err, PYDB_ENOMEM, "", -1, "no memory");
    return a->nst == STAGE ? acc_flush(a) : PYDB_OK;
}

static int cmp_term(const void *x, const void *y, void *ctx)
{
    const acc *a = ctx;
    const aterm *s = &a->t[*(const uint32_t *)x], *t = &a->t[*(const uint32_t *)y];
    return pydb__keycmp(a->arena.p + s->off, s->len, a->arena.p + t->off,
                        t->len);
}

typedef struct skey {
    uint64_t pfx;   /* first 8 key bytes, big-endian, zero padded */
    uint32_t idx, pad;
} skey;

/* order[] = term indexes in key order: LSD radix sort on the 8-byte
 * prefix, then a comparison sort inside runs of equal prefixes. */
static int sort_terms(acc *a, uint32_t *order)
{
    size_t n = a->nt;
    skey *x = malloc((n ? n : 1) * sizeof *x), *y = malloc((n ? n : 1) * sizeof *y);
    size_t *cnt = malloc(65536 * sizeof *cnt);
    if (!x || !y || !cnt) {
        free(x);
        free(y);
        free(cnt);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = a->arena.p + a->t[i].off;
        size_t l = a->t[i].len < 8 ? a->t[i].len : 8;
        uint64_t v = 0;
        for (size_t j = 0; j < 8; j++) v = v << 8 | (j < l ? k[j] : 0);
        x[i].pfx = v;
        x[i].idx = (uint32_t)i;
    }
    for (int pass = 0; pass < 4; pass++) {
        int sh = pass * 16;
        memset(cnt, 0, 65536 * sizeof *cnt);
        for (size_t i = 0; i < n; i++) cnt[(x[i].pfx >> sh) & 0xFFFF]++;
        size_t sum = 0, nz = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = cnt[d];
            nz += c != 0;
            cnt[d] = sum;
            sum += c;
        }
        if (nz <= 1) continue;   /* one digit value: already in order */
        for (size_t i = 0; i < n; i++) y[cnt[(x[i].pfx >> sh) & 0xFFFF]++] = x[i];
        skey *t = x;
        x = y;
        y = t;
    }
    for (size_t i = 0; i < n; i++) order[i] = x[i].idx;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && x[j].pfx == x[i].pfx) j++;
        if (j - i > 1) qsort_r(order + i, j - i, sizeof *order, cmp_term, a);
        i = j;
    }
    free(x);
    free(y);
    free(cnt);
    return 0;
}

/* Build the bytes of a segment from the accumulated postings. */
static int acc_segment(acc *a, const int32_t *tombs, size_t ntombs, buf *out,
                       pydb_error *err)
{
    uint32_t *order = NULL;
    uint64_t *start = NULL;
    pydb_posting *sorted = NULL;
    buf dict = {0};
    uint64_t *blocks = NULL, nblocks = (a->nt + BLOCK_TERMS - 1) / BLOCK_TERMS;
    int rc = PYDB_OK;
    uint8_t hdr[SEG_HDR];

    if ((rc = acc_flush(a))) return rc;
    nblocks = (a->nt + BLOCK_TERMS - 1) / BLOCK_TERMS;
    order = malloc((a->nt ? a->nt : 1) * sizeof *order);
    start = malloc((a->nt + 1) * sizeof *start);
    sorted = malloc((a->np ? a->np : 1) * sizeof *sorted);
    blocks = malloc((nblocks ? nblocks : 1) * sizeof *blocks);
    if (!order || !start || !sorted || !blocks) goto oom;
    /* counting sort by term (stable: MFN order of arrival kept) */
    start[0] = 0;
    for (size_t i = 0; i < a->nt; i++) start[i + 1] = start[i] + a->t[i].n;
    for (size_t i = 0; i < a->np; i++) {
        if (i + 16 < a->np) __builtin_prefetch(&start[a->p[i + 16].term]);
        if (i + 8 < a->np)
            __builtin_prefetch(&sorted[start[a->p[i + 8].term]], 1);
        sorted[start[a->p[i].term]++] = a->p[i].p;
    }
    for (size_t i = a->nt; i > 0; i--) start[i] = start[i - 1];
    start[0] = 0;
    if (sort_terms(a, order) < 0) goto oom;

    memset(hdr, 0, sizeof hdr);
    buf_put(out, hdr, SEG_HDR);
    const uint8_t *prev = NULL;
    size_t prev_len = 0;
    for (size_t k = 0; k < a->nt; k++) {
        if (k + 16 < a->nt) {
            __builtin_prefetch(&a->t[order[k + 16]]);
            __builtin_prefetch(&start[order[k + 16]]);
        }
        if (k + 8 < a->nt) {
            __builtin_prefetch(a->arena.p + a->t[order[k + 8]].off);
            __builtin_prefetch(sorted + start[order[k + 8]]);
        }
        const aterm *t = &a->t[order[k]];
        pydb_posting *v = sorted + start[order[k]];
        size_t n = (size_t)t->n, pbeg = out->n;
        const uint8_t *key = a->arena.p + t->off;
        for (size_t i = 1; i < n; i++)
            if (pydb__posting_cmp(&v[i - 1], &v[i]) >= 0) {
                qsort(v, n, sizeof *v, pydb__posting_cmp);
                break;
            }
        /* drop exact duplicates (two rules with one ID may repeat one) */
        size_t w = 0;
        for (size_t i = 0; i < n; i++)
            if (w == 0 || pydb__posting_cmp(&v[w - 1], &v[i]) != 0)
                v[w++] = v[i];
        n = w;
        pydb_posting last = {0, 0, 0, 0};
        for (size_t i = 0; i < n; i++) {
            const pydb_posting *q = &v[i];
            if (i == 0 || q->mfn != last.mfn) {
                buf_varint(out, (uint64_t)(q->mfn - last.mfn));
                buf_varint(out, q->tag);
                buf_varint(out, q->occ);
                buf_varint(out, q->cnt);
            } else if (q->tag != last.tag) {
                buf_varint(out, 0);
                buf_varint(out, q->tag - last.tag);
                buf_varint(out, q->occ);
                buf_varint(out, q->cnt);
            } else if (q->occ != last.occ) {
                buf_varint(out, 0);
                buf_varint(out, 0);
                buf_varint(out, q->occ - last.occ);
                buf_varint(out, q->cnt);
            } else {
                buf_varint(out, 0);
                buf_varint(out, 0);
                buf_varint(out, 0);
                buf_varint(out, q->cnt - last.cnt);
            }
            last = *q;
        }
        if (k % BLOCK_TERMS == 0) {
            uint8_t b8[8];
            blocks[k / BLOCK_TERMS] = dict.n;
            wr64(b8, pbeg);
            buf_put(&dict, b8, 8);
            prev_len = 0;
        }
        size_t sh = 0;
        while (sh < prev_len && sh < t->len && prev[sh] == key[sh]) sh++;
        buf_varint(&dict, sh);
        buf_varint(&dict, t->len - sh);
        buf_put(&dict, key + sh, t->len - sh);
        buf_varint(&dict, n);
        buf_varint(&dict, out->n - pbeg);
        prev = key;
        prev_len = t->len;
    }
    uint64_t dict_off = out->n;
    buf_put(out, dict.p, dict.n);
    uint64_t bidx_off = out->n;
    for (uint64_t b = 0; b < nblocks; b++) {
        uint8_t b8[8];
        wr64(b8, dict_off + blocks[b]);
        buf_put(out, b8, 8);
    }
    uint64_t tomb_off = out->n;
    {
        uint8_t b4[4];
        pydb__put32(b4, (uint32_t)ntombs);
        buf_put(out, b4, 4);
        for (size_t i = 0; i < ntombs; i++) {
            pydb__put32(b4, (uint32_t)tombs[i]);
            buf_put(out, b4, 4);
        }
    }
    if (out->oom || dict.oom) goto oom;
    memcpy(out->p, SEG_MAGIC, 8);
    pydb__put32(out->p + 8, 1);
    pydb__put32(out->p + 12, BLOCK_TERMS);
    wr64(out->p + 16, a->nt);
    wr64(out->p + 24, a->np);
    wr64(out->p + 32, dict_off);
    wr64(out->p + 40, bidx_off);
    wr64(out->p + 48, nblocks);
    wr64(out->p + 56, tomb_off);
    {
        uint8_t b8[8];
        wr64(b8, checksum(out->p, out->n));
        buf_put(out, b8, 8);
        if (out->oom) goto oom;
    }
    goto cleanup;
oom:
    rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "cannot build a segment");
cleanup:
    free(order);
    free(start);
    free(sorted);
    free(blocks);
    free(dict.p);
    return rc;
}

/* ------------------------------------------------------------ bulk build */

struct pydb_nidx_builder {
    pydb_db *db;
    const pydb_fst *fst;
    char *fst_text;
    size_t fst_len;
    uint8_t *stw_text;
    size_t stw_len;
    pydb_keyrules rules;
    pydb_stopwords sw;
    acc a;
    pydb_record *rec;
    pydb_fst_scratch scratch;
    int32_t next, max;
    int64_t done;
    char dir[1024];
};

void pydb_nidx_builder_free(pydb_nidx_builder *b)
{
    if (!b) return;
    if (b->db) pydb_close(b->db);
    free(b->fst_text);
    free(b->stw_text);
    pydb__stopwords_free(&b->sw);
    acc_free(&b->a);
    pydb_record_free(b->rec);
    pydb__fst_scratch_free(&b->scratch);
    free(b);
}

static void dir_of(char *out, size_t cap, const char *path)
{
    const char *sl = strrchr(path, '/');
    if (!sl) snprintf(out, cap, ".");
    else if (sl == path) snprintf(out, cap, "/");
    else snprintf(out, cap, "%.*s", (int)(sl - path), path);
}

int pydb_nidx_builder_open(pydb_nidx_builder **out, const char *db_path,
                           const pydb_fst *fst, const pydb_nidx_options *opt,
                           pydb_error *err)
{
    pydb_nidx_builder *b = calloc(1, sizeof *b);
    pydb_options o = {PYDB_IO_MMAP, PYDB_LOCK_NONE, 0};
    int rc;

    *out = NULL;
    if (!b) return PYDB_ERROR(err, PYDB_ENOMEM, db_path, -1, "no memory");
    b->fst = fst;
    b->a.err = err;
    if ((rc = index_dir(b->dir, sizeof b->dir, db_path, err))) goto fail;
    if ((rc = pydb_open(&b->db, db_path, &o, err))) goto fail;
    pydb__keyrules_default(&b->rules, opt ? opt->utf8 : 0,
                           opt ? opt->max_key : 0);
    if (opt && opt->tables) {
        char d[1024];
        int found;
        pydb_info info;
        pydb_info_get(b->db, &info);
        dir_of(d, sizeof d, info.mst_path);
        if ((rc = pydb__keyrules_load_dir(&b->rules, d, &found, err)))
            goto fail;
    }
    if (opt && opt->stw_len) {
        b->stw_text = malloc(opt->stw_len);
        if (!b->stw_text) goto oom;
        memcpy(b->stw_text, opt->stw, opt->stw_len);
        b->stw_len = opt->stw_len;
        if ((rc = pydb__stopwords_parse(&b->sw, &b->rules, b->stw_text,
                                        b->stw_len, err)))
            goto fail;
    }
    /* the FST text, rebuilt from the rules, goes into the manifest */
    {
        buf t = {0};
        for (size_t i = 0; i < pydb_fst_count(fst); i++) {
            char line[64];
            uint32_t id;
            int tech;
            const char *fmt;
            size_t fl;
            pydb_fst_rule(fst, i, &id, &tech, &fmt, &fl, NULL);
            int l = snprintf(line, sizeof line, "%u %d ", id, tech);
            buf_put(&t, line, (size_t)l);
            buf_put(&t, fmt, fl);
            buf_put(&t, "\n", 1);
        }
        if (t.oom) {
            free(t.p);
            goto oom;
        }
        b->fst_text = (char *)t.p;
        b->fst_len = t.n;
    }
    b->next = 1;
    b->max = pydb_max_mfn(b->db);
    *out = b;
    return PYDB_OK;
oom:
    rc = PYDB_ERROR(err, PYDB_ENOMEM, db_path, -1, "no memory");
fail:
    pydb_nidx_builder_free(b);
    return rc;
}

int pydb_nidx_builder_step(pydb_nidx_builder *b, int32_t max, int64_t *done,
                           int64_t *total, int *more, pydb_error *err)
{
    int rc;
    b->a.err = err;
    for (int32_t k = 0; k < max && b->next <= b->max; k++, b->next++) {
        rc = pydb_read(&b->rec, b->db, b->next, err);
        if (rc == PYDB_ENOTFOUND) continue;
        if (rc) return rc;
        b->done++;
        if (b->rec->deleted || b->rec->status) continue;
        rc = pydb__fst_keys(b->fst, &b->rules, &b->sw, b->next,
                            b->rec->fields, b->rec->nfields, &b->scratch,
                            acc_add, &b->a, err);
        if (rc) return rc;
    }
    if (done) *done = b->next - 1;
    if (total) *total = b->max;
    if (more) *more = b->next <= b->max;
    return PYDB_OK;
}

static int read_generation(const char *dir, uint64_t *gen)
{
    char path[1100];
    uint8_t *d;
    size_t n;
    manifest m;
    pydb_error e;
    *gen = 0;
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    if (pydb__read_file(path, &d, &n, &e)) return 0;
    if (parse_manifest(&m, d, n, path, &e) == PYDB_OK) {
        *gen = m.gen;
        for (size_t i = 0; i < m.nsegs; i++)
            if (m.segs[i] > *gen) *gen = m.segs[i];
        free(m.segs);
    }
    free(d);
    return 0;
}

int pydb_nidx_builder_finish(pydb_nidx_builder *b, pydb_error *err)
{
    buf seg = {0}, man = {0};
    char path[1100], tmp[1100], mpath[1100];
    uint64_t gen;
    int rc;

    b->a.err = err;
    if (b->next <= b->max) {
        int more = 1;
        while (more)
            if ((rc = pydb_nidx_builder_step(b, 1 << 20, NULL, NULL, &more,
                                             err)))
                return rc;
    }
    if (mkdir(b->dir, 0755) != 0 && errno != EEXIST)
        return PYDB_OSERROR(err, errno, b->dir, -1, "cannot create");
    read_generation(b->dir, &gen);
    gen++;
    if ((rc = acc_segment(&b->a, NULL, 0, &seg, err))) goto cleanup;
    acc_free(&b->a);
    seg_path(path, sizeof path, b->dir, gen);
    unlink(path);   /* an orphan of an unfinished commit */
    if ((rc = write_file(path, seg.p, seg.n, 1, err))) goto cleanup;
    if ((rc = manifest_bytes(&man, gen, &b->rules, b->fst_text, b->fst_len,
                             b->stw_text, b->stw_len, &gen, 1, err)))
        goto cleanup;
    snprintf(tmp, sizeof tmp, "%s/MANIFEST.tmp", b->dir);
    snprintf(mpath, sizeof mpath, "%s/MANIFEST", b->dir);
    if ((rc = write_file(tmp, man.p, man.n, 0, err))) goto cleanup;
    if (rename(tmp, mpath) != 0) {
        rc = PYDB_OSERROR(err, errno, mpath, -1, "cannot rename %s", tmp);
        goto cleanup;
    }
    if ((rc = fsync_dir(b->dir, err))) goto cleanup;
    /* older segments are no longer referenced */
    {
        DIR *d = opendir(b->dir);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            unsigned long long g;
            char old[1100];
            if (sscanf(de->d_name, "seg-%8llu.pds", &g) == 1 && g < gen &&
                strlen(de->d_name) == 16) {
                seg_path(old, sizeof old, b->dir, g);
                unlink(old);
            }
        }
        if (d) closedir(d);
    }
cleanup:
    free(seg.p);
    free(man.p);
    return rc;
}

int pydb_native_index_build(const char *db_path, const pydb_fst *fst,
                            const pydb_nidx_options *opt,
                            pydb_progress_fn progress, void *ctx,
                            pydb_error *err)
{
    pydb_nidx_builder *b;
    int rc = pydb_nidx_builder_open(&b, db_path, fst, opt, err), more = 1;
    int64_t done, total;
    if (rc) return rc;
    while (more) {
        if ((rc = pydb_nidx_builder_step(b, 16384, &done, &total, &more,
                                         err)))
            goto cleanup;
        if (progress && progress(ctx, done, total)) {
            rc = PYDB_ERROR(err, PYDB_EINVAL, db_path, -1,
                            "index build cancelled");
            goto cleanup;
        }
    }
    rc = pydb_nidx_builder_finish(b, err);
cleanup:
    pydb_nidx_builder_free(b);
    return rc;
}

/* ------------------------------------------------------------ commit hook */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Merge the segments after the first (the bulk-built base) into `a`:
 * their live postings, less the records this commit replaces; their
 * tombstones join `tombs` (they still apply to the base). */
static int merge_tail(acc *a, const segset *ss, int32_t **tombs, size_t *nt,
                      pydb_error *err)
{
    pydb_postings p = {0};
    cursor c;
    int rc = PYDB_OK;
    size_t extra = 0;
    const int32_t *commit = *tombs;
    size_t ncommit = *nt;

    memset(&c, 0, sizeof c);
    for (size_t i = 1; i < ss->n; i++) extra += ss->v[i]->ntomb;
    int32_t *all = malloc((ncommit + extra + 1) * sizeof *all);
    if (!all) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    memcpy(all, commit, ncommit * sizeof *all);
    size_t na = ncommit;
    for (size_t i = 1; i < ss->n; i++)
        for (uint32_t k = 0; k < ss->v[i]->ntomb; k++)
            all[na++] = seg_tomb(ss->v[i], k);
    for (size_t i = 1; i < ss->n && rc == PYDB_OK; i++) {
        const seg *sg = ss->v[i];
        uint64_t live;
        c.s = sg;
        c.valid = 0;
        if (sg->nterms == 0) continue;
        if ((rc = cur_block(&c, 0, err))) break;
        for (;;) {
            if ((rc = cur_next(&c, err)) || !c.valid) break;
            p.n = 0;
            if ((rc = decode_postings(&p, ss, i, sg, c.pstart, c.plen,
                                      c.count, &live, err)))
                break;
            for (size_t k = 0; k < p.n && rc == PYDB_OK; k++) {
                int32_t m = p.v[k].mfn;
                if (bsearch(&m, commit, ncommit, sizeof m, cmp_i32)) continue;
                rc = acc_add(a, c.key, c.klen, &p.v[k]);
            }
            if (rc) break;
        }
    }
    free(c.key);
    pydb_postings_free(&p);
    if (rc) {
        free(all);
        return rc;
    }
    qsort(all, na, sizeof *all, cmp_i32);
    size_t w = 0;
    for (size_t i = 0; i < na; i++)
        if (w == 0 || all[w - 1] != all[i]) all[w++] = all[i];
    free(*tombs);
    *tombs = all;
    *nt = w;
    return PYDB_OK;
}

/* Remove segment files that neither the live list nor the MANIFEST on
 * disk names (segments merged away, orphans of uncommitted prepares).
 * The manifest on disk may lag behind the committed one until the write
 * path applies its log, so its segments are kept until it does.  Best
 * effort: errors are ignored. */
static uint64_t collect_garbage(nidx *x, const segset *ss)
{
    uint64_t top = 0;
    uint8_t *data = NULL;
    size_t len;
    manifest m;
    pydb_error e;
    DIR *d;
    struct dirent *de;

    memset(&m, 0, sizeof m);
    if (pydb__read_file(x->manifest, &data, &len, &e) != PYDB_OK) return 0;
    if (parse_manifest(&m, data, len, x->manifest, &e) != PYDB_OK) {
        free(data);
        return 0;
    }
    d = opendir(x->dir);
    while (d && (de = readdir(d)) != NULL) {
        unsigned long long g;
        int used = 0;
        char path[1100];
        if (strlen(de->d_name) != 16 ||
            sscanf(de->d_name, "seg-%8llu.pds", &g) != 1)
            continue;
        for (size_t i = 0; i < ss->n && !used; i++) used = ss->v[i]->gen == g;
        for (size_t i = 0; i < m.nsegs && !used; i++) used = m.segs[i] == g;
        if (!used) {
            seg_path(path, sizeof path, x->dir, g);
            unlink(path);
        } else if (g > top) {
            top = g;
        }
    }
    if (d) closedir(d);
    free(m.segs);
    free(data);
    return top;
}

/* Adopt the segment list of a MANIFEST newer than the one this handle
 * serves: another handle or process has committed.  Called by readers
 * on every entry (force 0: only the head of the MANIFEST is read unless
 * its generation is newer; a missing MANIFEST keeps the current list)
 * and by
 * the writer before it prepares a commit (force 1: it holds the writer
 * lock, so the file on disk is at least as new as its last commit).
 * The new list is built outside the lock (segments already open are
 * shared) and swapped in under it only if no newer one was installed
 * meanwhile, so concurrent refreshes and commits never mix lists.  A
 * segment that vanished between reading the MANIFEST and opening it
 * (merged away by a later commit) makes it read the MANIFEST again. */
/* The generation a MANIFEST's head announces, or 0 when the file is
 * missing or its head does not parse (the full read then decides). */
static uint64_t head_generation(const char *path)
{
    char hb[96];
    size_t ml = strlen(MANIFEST_MAGIC);
    unsigned long long g;
    ssize_t r;
    int fd = pydb__vfs->open(path, O_RDONLY, 0);
    if (fd < 0) return 0;
    r = pydb__vfs->pread(fd, hb, sizeof hb - 1, 0);
    pydb__vfs->close(fd);
    if (r < (ssize_t)ml || memcmp(hb, MANIFEST_MAGIC, ml) != 0) return 0;
    hb[r] = '\0';
    if (sscanf(hb + ml, "generation %llu\n", &g) != 1) return 0;
    return (uint64_t)g;
}

static int refresh(nidx *x, int force, pydb_error *err)
{
    uint8_t *data = NULL;
    size_t len;
    manifest m;
    segset *ns = NULL, *old = NULL;
    uint64_t cur_gen;
    int rc = PYDB_OK, tries = 0;

again:
    memset(&m, 0, sizeof m);
    if (!force) {
        uint64_t g = head_generation(x->manifest);
        pthread_mutex_lock(&x->mu);
        cur_gen = x->gen;
        pthread_mutex_unlock(&x->mu);
        if (g <= cur_gen) return PYDB_OK;   /* also: no MANIFEST now */
    }
    if ((rc = pydb__read_file(x->manifest, &data, &len, err))) goto cleanup;
    if ((rc = parse_manifest(&m, data, len, x->manifest, err))) goto cleanup;
    old = acquire(x);
    pthread_mutex_lock(&x->mu);
    cur_gen = x->gen;
    pthread_mutex_unlock(&x->mu);
    if (m.gen <= cur_gen) goto cleanup;
    ns = segset_new(m.nsegs);
    if (!ns) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->manifest, -1, "no memory");
        goto cleanup;
    }
    ns->n = 0;
    for (size_t i = 0; i < m.nsegs; i++) {
        seg *sg = NULL;
        for (size_t j = 0; j < old->n && !sg; j++)
            if (old->v[j]->gen == m.segs[i]) {
                sg = old->v[j];
                atomic_fetch_add(&sg->refs, 1);
            }
        if (!sg) {
            char path[1100];
            seg_path(path, sizeof path, x->dir, m.segs[i]);
            if ((rc = seg_open(&sg, path, m.segs[i], err))) {
                if (err->sys_errno == ENOENT && ++tries < 5) {
                    segset_unref(ns);
                    segset_unref(old);
                    free(m.segs);
                    free(data);
                    ns = old = NULL;
                    data = NULL;
                    goto again;
                }
                goto cleanup;
            }
        }
        ns->v[ns->n++] = sg;
    }
    segset_finish(ns);
    pthread_mutex_lock(&x->mu);
    if (m.gen > x->gen) {
        segset *prev = x->cur;
        x->cur = ns;
        x->gen = m.gen;
        ns = prev;   /* released below */
    }
    pthread_mutex_unlock(&x->mu);
cleanup:
    segset_unref(ns);
    segset_unref(old);
    free(m.segs);
    free(data);
    return rc;
}

typedef struct change_ref {
    int32_t mfn;
    size_t i;
} change_ref;

/* By MFN, then by position in the transaction. */
static int cmp_change_ref(const void *a, const void *b)
{
    const change_ref *x = a, *y = b;
    if (x->mfn != y->mfn) return x->mfn < y->mfn ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int hook_prepare(void *ctx, pydb_txn *t, const pydb_change *ch,
                        size_t n, pydb_error *err)
{
    change_ref *last = NULL;
    nidx *x = ctx;
    acc a;
    buf segb = {0}, man = {0};
    int32_t *tombs = NULL;
    size_t nt = 0, ngens;
    uint64_t *gens = NULL, gen, top;
    char path[1100];
    segset *ss = NULL;
    int rc = PYDB_OK, written = 0, merge;

    memset(&a, 0, sizeof a);
    a.err = err;
    if (n == 0) return PYDB_OK;
    if (x->pending)
        return PYDB_ERROR(err, PYDB_EINVAL, x->dir, -1,
                          "a prepared index change is still pending");
    tombs = malloc(n * sizeof *tombs);
    if (!tombs) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) tombs[nt++] = ch[i].mfn;
    qsort(tombs, nt, sizeof *tombs, cmp_i32);
    {
        size_t w = 0;
        for (size_t i = 0; i < nt; i++)
            if (w == 0 || tombs[w - 1] != tombs[i]) tombs[w++] = tombs[i];
        nt = w;
    }
    if ((rc = refresh(x, 1, err))) goto cleanup;
    ss = acquire(x);
    top = collect_garbage(x, ss);
    /* Too many segments: this commit's segment also takes in every
     * segment after the base (their dead postings dropped), so a
     * commit's cost stays proportional to the changes since the last
     * bulk build and readers merge at most MERGE_AT lists. */
    merge = ss->n + 1 > MERGE_AT && ss->n >= 2;
    if (merge && (rc = merge_tail(&a, ss, &tombs, &nt, err))) goto cleanup;
    /* A transaction may change one MFN several times (update, then
     * delete...): only its last change is the record's new state. */
    last = malloc(n * sizeof *last);
    if (!last) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        last[i].mfn = ch[i].mfn;
        last[i].i = i;
    }
    qsort(last, n, sizeof *last, cmp_change_ref);
    for (size_t k = 0; k < n; k++) {
        size_t i = last[k].i;
        if (k + 1 < n && last[k + 1].mfn == last[k].mfn) continue;
        if (ch[i].after && !ch[i].deleted_after &&
            (rc = pydb__fst_keys(x->fst, &x->rules, &x->sw, ch[i].mfn,
                                 ch[i].after, ch[i].nafter, &x->scratch,
                                 acc_add, &a, err)))
            goto cleanup;
    }
    if ((rc = acc_segment(&a, tombs, nt, &segb, err))) goto cleanup;
    pthread_mutex_lock(&x->mu);
    gen = x->gen + 1;
    pthread_mutex_unlock(&x->mu);
    if (top >= gen) gen = top + 1;   /* never reuse a live file's name */
    for (size_t i = 0; i < ss->n; i++)
        if (ss->v[i]->gen >= gen) gen = ss->v[i]->gen + 1;
    seg_path(path, sizeof path, x->dir, gen);
    unlink(path);   /* an orphan of an earlier, uncommitted prepare */
    written = 1;    /* from here on, a failure removes the file */
    if ((rc = write_file(path, segb.p, segb.n, 1, err))) goto cleanup;
    if ((rc = fsync_dir(x->dir, err))) goto cleanup;
    gens = malloc((ss->n + 1) * sizeof *gens);
    if (!gens) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    ngens = merge ? 1 : ss->n;
    for (size_t i = 0; i < ngens; i++) gens[i] = ss->v[i]->gen;
    gens[ngens++] = gen;
    if ((rc = manifest_bytes(&man, gen, &x->rules, x->fst_text, x->fst_len,
                             x->stw_text, x->stw_len, gens, ngens, err)))
        goto cleanup;
    if ((rc = seg_open(&x->pending, path, gen, err))) goto cleanup;
    x->pending_gen = gen;
    x->pending_merge = merge;
    if (x->put_file)
        rc = x->put_file(x->put_ctx, t, x->manifest, man.p, man.n, err);
    else
        rc = pydb_txn_put_file(t, x->manifest, man.p, man.n, err);
cleanup:
    if (rc) {
        if (x->pending) {
            seg_unref(x->pending);
            x->pending = NULL;
        }
        if (written) unlink(path);
    }
    segset_unref(ss);
    acc_free(&a);
    free(last);
    free(tombs);
    free(gens);
    free(segb.p);
    free(man.p);
    return rc;
}

static void hook_publish(void *ctx, pydb_txn *t)
{
    nidx *x = ctx;
    segset *old, *ns;
    size_t keep;
    if (!x->pending) return;
    pthread_mutex_lock(&x->mu);
    if (x->gen >= x->pending_gen) {
        /* a reader's refresh adopted this commit's MANIFEST already
         * (the write path applied it before publishing) */
        pthread_mutex_unlock(&x->mu);
        seg_unref(x->pending);
        x->pending = NULL;
        return;
    }
    old = x->cur;
    keep = x->pending_merge ? (old->n ? 1 : 0) : old->n;
    ns = segset_new(keep + 1);
    if (!ns) {
        /* cannot fail here: keep serving the old list; the next open
         * reads the committed manifest */
        pthread_mutex_unlock(&x->mu);
        seg_unref(x->pending);
        x->pending = NULL;
        return;
    }
    for (size_t i = 0; i < keep; i++) {
        ns->v[i] = old->v[i];
        atomic_fetch_add(&old->v[i]->refs, 1);
    }
    ns->v[keep] = x->pending;
    segset_finish(ns);
    x->cur = ns;
    x->gen = x->pending_gen;
    x->pending = NULL;
    pthread_mutex_unlock(&x->mu);
    /* merged segments are removed by a later prepare (collect_garbage),
     * once no manifest on disk can still name them */
    segset_unref(old);
}

static void hook_abort(void *ctx, pydb_txn *t)
{
    nidx *x = ctx;
    if (!x->pending) return;
    unlink(x->pending->path);
    seg_unref(x->pending);
    x->pending = NULL;
}

void pydb__nidx_set_put_file(pydb_index *ix, pydb_put_file_fn fn, void *ctx)
{
    nidx *x = (nidx *)ix;
    x->put_file = fn;
    x->put_ctx = ctx;
}

int pydb__nidx_hook(pydb_index *ix, pydb_commit_hook *out, pydb_error *err)
{
    if (!ix || ix->ops != &nidx_ops)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "not a native index");
    out->prepare = hook_prepare;
    out->publish = hook_publish;
    out->abort = hook_abort;
    out->ctx = ix;
    return PYDB_OK;
}

int pydb_native_index_attach(pydb_index *ix, pydb_db *db, pydb_error *err)
{
    pydb_commit_hook h;
    int rc = pydb__nidx_hook(ix, &h, err);
    if (rc) return rc;
    return pydb_set_commit_hook(db, &h, err);
}

/* ---- test double: put_file recorded, applied at a simulated commit
 * point the way a write-ahead-log replay would (whole file, atomically) */

static int test_put(void *ctx, pydb_txn *t, const char *path,
                    const void *data, size_t len, pydb_error *err)
{
    nidx *x = ctx;
    uint8_t *d = malloc(len ? len : 1);
    if (!d) return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
    memcpy(d, data, len);
    free(x->test_data);
    x->test_data = d;
    x->test_len = len;
    snprintf(x->test_path, sizeof x->test_path, "%s", path);
    return PYDB_OK;
}

int pydb__nidx_use_test_put(pydb_index *ix, pydb_error *err)
{
    if (!ix || ix->ops != &nidx_ops)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "not a native index");
    pydb__nidx_set_put_file(ix, test_put, ix);
    return PYDB_OK;
}

int pydb__nidx_test_commit_point(pydb_index *ix, pydb_error *err)
{
    nidx *x = (nidx *)ix;
    char tmp[1200];
    int rc;
    if (!x->test_data) return PYDB_OK;
    snprintf(tmp, sizeof tmp, "%s.tmp", x->test_path);
    if ((rc = write_file(tmp, x->test_data, x->test_len, 0, err))) return rc;
    if (rename(tmp, x->test_path) != 0)
        return PYDB_OSERROR(err, errno, x->test_path, -1, "cannot rename");
    rc = fsync_dir(x->dir, err);
    free(x->test_data);
    x->test_data = NULL;
    return rc;
}

void pydb__nidx_test_drop(pydb_index *ix)
{
    nidx *x = (nidx *)ix;
    free(x->test_data);
    x->test_data = NULL;
}
