/*
 * isisidx.c - reading existing CDS/ISIS inverted files, as they are.
 *
 * Formats: ../shared/docs/isis-formats.md §4 (referred to as §4.x):
 *   .CNT                 two control records, 26 (packed) or 28 (aligned)
 *                        bytes: IDTYPE ORDN ORDF N K LIV POSRX NMAXPOS
 *                        FMAXPOS ABNORMAL (§4.2)
 *   .N01/.N02            B*-tree nodes (§4.3), shared by both variants
 *   .L01/.L02 + .IFP     classic leaves and 512-byte-block postings with
 *                        segment chains (§4.4, §4.5)
 *   .LY1/.LY2 + .IYP     CISIS "LIND" leaves and byte-addressed lists:
 *                        bit strings, MFN lists, (MFN, CNT) pairs (§4.7)
 * Key length limits LE1/LE2: 10/30, 16/60, 16/256, 16/512 (§4.1).
 *
 * Choosing the file set (§4.8).  A directory may hold both a classic and
 * a LIND set, of which only one belongs to the .CNT/.N0x files.  Each
 * candidate set is validated before it is trusted: record sizes against
 * NMAXPOS/FMAXPOS and the file sizes, POS/OCK/IT fields of the first,
 * last and root records, the leaves reached from the leftmost and the
 * rightmost bottom nodes against their separator keys, and the postings
 * of the first keys.  A set that fails is dropped (the reason goes into
 * the index's note); if both pass, the one with the newer leaf files is
 * taken.  For LIND, the MFN width of MFN lists (3 bytes, LIND; 4 bytes,
 * LIND4) is not recorded in the files; it is the width under which the
 * sampled lists give ascending MFNs that fit the database (§4.7).
 *
 * Safety.  Every record number, word address, byte address and count
 * read from a file is checked against the file sizes before use; damage
 * is PYDB_ECORRUPT with the file, the byte offset and the reason.  Loops
 * are bounded: a descent reads at most LIV+1 nodes, a leaf chain visits
 * at most FMAXPOS leaves and keys must ascend along it, a posting chain
 * is followed only until IFPTOTP postings are read (as CISIS posting()
 * does; ABCD's odds.ifp has chains with empty trailing segments) and has
 * fewer segments than the IFP has 20-byte headers.
 * Postings must not descend within a list (§4.5 says strictly ascending;
 * ABCD's rda.ifp repeats one posting, (805,905,1,1), so equal neighbours
 * are accepted and returned as stored).
 *
 * Threads: the handle is immutable after open; every operation works on
 * its own buffers, so any number of threads may use one index at once.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "index_int.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IFP_BLOCK 512
#define IFP_WORDS 127          /* words after IFPBLK in a block          */
#define MAX_ORD 64             /* sanity cap on ORDN/ORDF                */
#define MAX_LIV 32             /* sanity cap on B-tree depth             */
#define MAX_LE 1024
#define WIDTH_SAMPLE 256       /* LIND lists sampled for the MFN width   */
#define CAPS_SAMPLE 65536      /* LIND keys sampled for (MFN,CNT) lists  */

/* ------------------------------------------------------------- files */

enum { F_CNT, F_N1, F_N2, F_L1, F_L2, F_IFP, F_LY1, F_LY2, F_IYP, F_MST,
       F_COUNT };
static const char *const f_ext[F_COUNT] = {"cnt", "n01", "n02", "l01", "l02",
                                           "ifp", "ly1", "ly2", "iyp", "mst"};

typedef struct ixfile {
    pydb_file f;
    int open;
    int64_t mtime_ns;
} ixfile;

static void ixfile_init(ixfile *x)
{
    memset(x, 0, sizeof *x);
    x->f.fd = -1;
    x->f.dfd = -1;
}

static void ixfile_close(ixfile *x)
{
    if (x->f.map) munmap((void *)x->f.map, (size_t)x->f.size);
    if (x->f.fd >= 0) pydb__vfs->close(x->f.fd);
    ixfile_init(x);
}

/* Open `path` read-only through the vfs table and map it (read through
 * pread if the mapping fails). */
static int ixfile_open(ixfile *x, const char *path, pydb_error *err)
{
    struct stat st;

    ixfile_init(x);
    snprintf(x->f.path, sizeof x->f.path, "%.1023s", path);
    x->f.fd = pydb__vfs->open(path, O_RDONLY, 0);
    if (x->f.fd < 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot open: %s",
                            strerror(errno));
    if (fstat(x->f.fd, &st) != 0) {
        int e = errno;
        ixfile_close(x);
        return PYDB_OSERROR(err, e, path, -1, "cannot stat: %s", strerror(e));
    }
    x->f.size = (int64_t)st.st_size;
    x->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if (x->f.size > 0) {
        void *m = mmap(NULL, (size_t)x->f.size, PROT_READ, MAP_SHARED,
                       x->f.fd, 0);
        if (m != MAP_FAILED) x->f.map = m;
    }
    x->open = 1;
    return PYDB_OK;
}

static int io_of(const ixfile *x)
{
    return x->f.map ? PYDB_IO_MMAP : PYDB_IO_PREAD;
}

static int rd(const ixfile *x, void *buf, size_t n, int64_t off,
              const char *what, pydb_error *err)
{
    return pydb__file_read(&x->f, io_of(x), buf, n, off, what, err);
}

static int32_t i32(const uint8_t *p) { return (int32_t)pydb__u32(p); }
static int16_t i16(const uint8_t *p) { return (int16_t)pydb__u16(p); }
static int64_t i64(const uint8_t *p)
{
    return (int64_t)((uint64_t)pydb__u32(p) |
                     ((uint64_t)pydb__u32(p + 4) << 32));
}

/* ------------------------------------------------------------- the handle */

typedef struct tree {
    int t;                 /* 1 or 2                                       */
    int empty;             /* LIV -1, or no leaves                         */
    int le;                /* key length (blank padded)                    */
    int pad;               /* bytes after KEY in node/classic-leaf entries */
    int ordn, ordf, liv;
    int32_t posrx, nmax, fmax;
    size_t nrec, nent;     /* node record / entry size                     */
    size_t lrec, lhdr, lent; /* leaf record / header / entry size          */
    size_t info1, info2, info3; /* offsets inside a leaf entry             */
    const ixfile *nf, *lf; /* node and leaf files                          */
} tree;

typedef struct isis_index {
    struct pydb_index base;
    int lind;
    int cnt_aligned;       /* .CNT has 28-byte records                     */
    int infx, infx_align;  /* LIND: INFO1/INFO3 size and alignment         */
    int mfn_bytes;         /* LIND MFN lists: 3 or 4 (classic: 3)          */
    int32_t nxtmfn;        /* from the .mst control record, or 0           */
    tree tr[2];
    ixfile files[F_COUNT];
    int post;              /* F_IFP or F_IYP                               */
    pydb_keyrules rules;
    char note[768];
} isis_index;

/* ------------------------------------------------------------- keys */

/* Compare two keys as blank-padded strings (the order of the trees,
 * §4.1): missing bytes count as blanks. */
static int kcmp(const uint8_t *a, size_t la, const uint8_t *b, size_t lb)
{
    size_t n = la > lb ? la : lb;
    for (size_t i = 0; i < n; i++) {
        int ca = i < la ? a[i] : ' ', cb = i < lb ? b[i] : ' ';
        if (ca != cb) return ca - cb;
    }
    return 0;
}

/* Length of a stored key without its blank padding. */
static size_t ktrim(const uint8_t *k, size_t le)
{
    while (le > 0 && k[le - 1] == ' ') le--;
    return le;
}

/* ------------------------------------------------------------- records */

static int64_t node_off(const tree *tr, int32_t r)
{
    return (int64_t)(r - 1) * (int64_t)tr->nrec;
}
static int64_t leaf_off(const tree *tr, int32_t r)
{
    return (int64_t)(r - 1) * (int64_t)tr->lrec;
}

/* Read record r of the node file (leaf 0, tr->nrec bytes) or the leaf
 * file (leaf 1, tr->lrec bytes) into buf and check POS/OCK/IT; *ock =
 * active keys (a node has at least one, a leaf may have none). */
static int read_rec(const tree *tr, int leaf, int32_t r, uint8_t *buf,
                    int *ock, pydb_error *err)
{
    const ixfile *f = leaf ? tr->lf : tr->nf;
    const char *kind = leaf ? "leaf" : "node";
    int32_t max = leaf ? tr->fmax : tr->nmax;
    int rc, n, lim = 2 * (leaf ? tr->ordf : tr->ordn);
    int64_t off = leaf ? leaf_off(tr, r) : node_off(tr, r);
    if (r < 1 || r > max)
        return PYDB_CORRUPT(err, f->f.path, -1,
                            "%s record %d of tree %d outside 1..%s (%d)",
                            kind, (int)r, tr->t,
                            leaf ? "FMAXPOS" : "NMAXPOS", (int)max);
    rc = rd(f, buf, leaf ? tr->lrec : tr->nrec, off,
            leaf ? "B-tree leaf" : "B-tree node", err);
    if (rc) return rc;
    n = pydb__u16(buf + 4);
    if (i32(buf) != r)
        return PYDB_CORRUPT(err, f->f.path, off, "%s record %d has POS %d",
                            kind, (int)r, (int)i32(buf));
    if (pydb__u16(buf + 6) != tr->t)
        return PYDB_CORRUPT(err, f->f.path, off + 6,
                            "%s record %d has IT %d, not %d", kind, (int)r,
                            pydb__u16(buf + 6), tr->t);
    if (!leaf && (n < 1 || n > lim))
        return PYDB_CORRUPT(err, f->f.path, off + 4,
                            "node record %d has OCK %d outside 1..%d",
                            (int)r, n, lim);
    if (leaf && n > lim)
        return PYDB_CORRUPT(err, f->f.path, off + 4,
                            "leaf record %d has OCK %d above %d", (int)r, n,
                            lim);
    *ock = n;
    return PYDB_OK;
}

static int read_node(const tree *tr, int32_t r, uint8_t *buf, int *ock,
                     pydb_error *err)
{
    return read_rec(tr, 0, r, buf, ock, err);
}

static const uint8_t *node_key(const tree *tr, const uint8_t *buf, int j)
{
    return buf + 8 + (size_t)j * tr->nent;
}
static int32_t node_punt(const tree *tr, const uint8_t *buf, int j)
{
    return i32(buf + 8 + (size_t)j * tr->nent + tr->le + tr->pad);
}

static int read_leaf(const tree *tr, int32_t r, uint8_t *buf, int *ock,
                     pydb_error *err)
{
    return read_rec(tr, 1, r, buf, ock, err);
}

static const uint8_t *leaf_key(const tree *tr, const uint8_t *buf, int j)
{
    return buf + tr->lhdr + (size_t)j * tr->lent;
}
static int32_t leaf_next(const uint8_t *buf) { return i32(buf + 8); }

/* Descend from the root to the leaf that may hold `key` (any length,
 * compared blank-padded): at each node the last entry whose KEY <= key,
 * or the first (§4.3).  At most LIV+1 node reads. */
static int descend(const tree *tr, const uint8_t *key, size_t len,
                   uint8_t *nbuf, int32_t *leaf, pydb_error *err)
{
    int32_t r = tr->posrx;
    for (int level = 0; level <= tr->liv; level++) {
        int ock, j, rc = read_node(tr, r, nbuf, &ock, err);
        int32_t p;
        if (rc) return rc;
        for (j = ock - 1; j > 0; j--)
            if (kcmp(node_key(tr, nbuf, j), (size_t)tr->le, key, len) <= 0)
                break;
        p = node_punt(tr, nbuf, j);
        if (p < 0) {
            if (-(int64_t)p > tr->fmax)
                return PYDB_CORRUPT(err, tr->nf->f.path,
                                    node_off(tr, r) + 8 +
                                        (int64_t)j * (int64_t)tr->nent,
                                    "node %d points at leaf %lld beyond "
                                    "FMAXPOS (%d)", (int)r,
                                    -(long long)p, (int)tr->fmax);
            *leaf = -p;
            return PYDB_OK;
        }
        if (p == 0 || p > tr->nmax)
            return PYDB_CORRUPT(err, tr->nf->f.path,
                                node_off(tr, r) + 8 +
                                    (int64_t)j * (int64_t)tr->nent,
                                "node %d entry %d points at node %d "
                                "(NMAXPOS %d)", (int)r, j, (int)p,
                                (int)tr->nmax);
        r = p;
    }
    return PYDB_CORRUPT(err, tr->nf->f.path, node_off(tr, r),
                        "descent in tree %d did not reach a leaf within "
                        "LIV+1 = %d levels", tr->t, tr->liv + 1);
}

/* ------------------------------------------------------------- postings */

/* Byte address of IFP word (block, word), §4.5. */
static int64_t ifp_addr(int32_t block, int32_t word)
{
    return (int64_t)(block - 1) * IFP_BLOCK + 4 + 4 * (int64_t)word;
}

static int ifp_check_block(const isis_index *ix, int32_t block, pydb_error *err)
{
    const ixfile *f = &ix->files[F_IFP];
    uint8_t b[4];
    int64_t off = (int64_t)(block - 1) * IFP_BLOCK;
    int rc = rd(f, b, 4, off, "IFP block header", err);
    if (rc) return rc;
    if (i32(b) != block)
        return PYDB_CORRUPT(err, f->f.path, off,
                            "IFP block %d has IFPBLK %d", (int)block,
                            (int)i32(b));
    return PYDB_OK;
}

/* Read and check a segment header at (block, word). */
static int ifp_header(const isis_index *ix, int32_t block, int32_t word,
                      int32_t h[5], pydb_error *err)
{
    const ixfile *f = &ix->files[F_IFP];
    uint8_t b[20];
    int64_t off = ifp_addr(block, word);
    int rc;
    if (block < 1 || word < 0 || word > IFP_WORDS - 5 ||
        (int64_t)block > f->f.size / IFP_BLOCK)
        return PYDB_CORRUPT(err, f->f.path, block >= 1 ? off : -1,
                            "posting list address %d/%d outside the IFP "
                            "(%lld blocks)", (int)block, (int)word,
                            (long long)(f->f.size / IFP_BLOCK));
    rc = ifp_check_block(ix, block, err);
    if (rc) return rc;
    rc = rd(f, b, 20, off, "IFP segment header", err);
    if (rc) return rc;
    for (int i = 0; i < 5; i++) h[i] = i32(b + 4 * i);
    /* NXTB NXTP TOTP SEGP SEGC */
    if (h[2] < 0 || h[3] < 0 || h[4] < 0 || h[3] > h[4] ||
        (int64_t)h[2] * 8 > f->f.size || (int64_t)h[4] * 8 > f->f.size)
        return PYDB_CORRUPT(err, f->f.path, off,
                            "IFP segment header TOTP %d SEGP %d SEGC %d "
                            "inconsistent or beyond the file (%lld bytes)",
                            (int)h[2], (int)h[3], (int)h[4],
                            (long long)f->f.size);
    if (h[3] > 0 && word > IFP_WORDS - 7)
        return PYDB_CORRUPT(err, f->f.path, off,
                            "IFP segment header and first posting straddle "
                            "a block (word %d)", (int)word);
    return PYDB_OK;
}

/* Append the classic posting list at (block, word) to out (§4.5). */
static int ifp_postings(const isis_index *ix, int32_t block, int32_t word,
                        pydb_postings *out, pydb_error *err)
{
    const ixfile *f = &ix->files[F_IFP];
    int32_t h[5];
    int64_t total, got = 0, segs = 0;
    size_t first = out->n;
    uint8_t buf[IFP_WORDS * 4];
    int rc = ifp_header(ix, block, word, h, err);
    if (rc) return rc;
    total = h[2];
    for (;;) {
        int32_t seg = h[3], b = block, w = word + 5;
        if ((int64_t)seg > total - got)
            return PYDB_CORRUPT(err, f->f.path, ifp_addr(block, word),
                                "IFP segment holds %d postings, more than "
                                "the %lld left of IFPTOTP %lld", (int)seg,
                                (long long)(total - got), (long long)total);
        while (seg > 0) {
            int32_t room, k;
            if (w > IFP_WORDS - 2) {   /* a posting never straddles */
                b++;
                w = 0;
                if ((int64_t)b > f->f.size / IFP_BLOCK)
                    return PYDB_CORRUPT(err, f->f.path,
                                        (int64_t)(b - 1) * IFP_BLOCK,
                                        "posting list runs past the end of "
                                        "the IFP");
                rc = ifp_check_block(ix, b, err);
                if (rc) return rc;
            }
            room = (IFP_WORDS - w) / 2;
            k = seg < room ? seg : room;
            rc = rd(f, buf, (size_t)k * 8, ifp_addr(b, w), "postings", err);
            if (rc) return rc;
            for (int32_t i = 0; i < k; i++) {
                const uint8_t *p = buf + 8 * i;
                pydb_posting q;
                q.mfn = (int32_t)((p[0] << 16) | (p[1] << 8) | p[2]);
                q.tag = (uint32_t)((p[3] << 8) | p[4]);
                q.occ = p[5];
                q.cnt = (uint32_t)((p[6] << 8) | p[7]);
                if (q.mfn < 1 ||
                    (out->n > first &&
                     pydb__posting_cmp(&out->v[out->n - 1], &q) > 0))
                    return PYDB_CORRUPT(err, f->f.path,
                                        ifp_addr(b, w) + 8 * (int64_t)i,
                                        "posting (%d,%u,%u,%u) is below "
                                        "the one before it or has MFN 0", (int)q.mfn,
                                        q.tag, q.occ, q.cnt);
                rc = pydb__postings_push(out, &q, err);
                if (rc) return rc;
            }
            seg -= k;
            got += k;
            w += 2 * k;
        }
        /* like CISIS posting(): IFPTOTP postings are read, following
         * the chain (over empty segments) only while some are missing;
         * what the chain holds after them is not part of the list */
        if (got == total || (h[0] == 0 && h[1] == 0)) break;
        if (++segs > f->f.size / 20)
            return PYDB_CORRUPT(err, f->f.path, ifp_addr(block, word),
                                "IFP segment chain longer than the file "
                                "can hold: a cycle");
        block = h[0];
        word = h[1];
        rc = ifp_header(ix, block, word, h, err);
        if (rc) return rc;
    }
    if (got != total)
        return PYDB_CORRUPT(err, f->f.path, ifp_addr(block, word),
                            "posting list ends after %lld of IFPTOTP %lld "
                            "postings", (long long)got, (long long)total);
    return PYDB_OK;
}

/* The LIND list of a leaf entry, §4.7. */
typedef struct lind_ref {
    int64_t addr, info3;
    int32_t n;
    int64_t where;          /* leaf entry offset, for messages */
} lind_ref;

static void lind_entry(const isis_index *ix, const tree *tr,
                       const uint8_t *e, lind_ref *r)
{
    const uint8_t *p1 = e + tr->info1, *p3 = e + tr->info3;
    r->addr = ix->infx == 8 ? i64(p1) : (int64_t)i32(p1);
    r->n = i32(e + tr->info2);
    r->info3 = ix->infx == 8 ? i64(p3) : (int64_t)i32(p3);
}

/* Decode a LIND list with MFN width `w` (3 or 4) into out (when out is
 * NULL only check it).  nxtmfn > 0 bounds the MFNs. */
static int lind_postings(const isis_index *ix, const lind_ref *r, int w,
                         int32_t nxtmfn, pydb_postings *out, pydb_error *err)
{
    const ixfile *f = &ix->files[F_IYP];
    const char *path = f->f.path;
    int64_t len, size = f->f.size;
    uint8_t *buf = NULL;
    int rc = PYDB_OK;
    int32_t prev = 0, prevcnt = 0, distinct = 0, seen = 0;

    if (r->n < 0 || r->addr < 0)
        return PYDB_CORRUPT(err, path, r->addr,
                            "LIND list: address %lld count %d",
                            (long long)r->addr, (int)r->n);
    if (r->info3 < 0) {
        if (r->info3 < -size) goto beyond;
        len = -r->info3;
    } else {
        if ((int64_t)r->n > size) goto beyond;
        len = (int64_t)r->n * (r->info3 > 0 ? w + 2 : w);
    }
    if (len > size || r->addr > size - len) goto beyond;
    if (len == 0) {
        if (r->n != 0)
            return PYDB_CORRUPT(err, path, r->addr,
                                "LIND bit string empty for %d postings",
                                (int)r->n);
        return PYDB_OK;
    }
    buf = malloc((size_t)len);
    if (!buf)
        return PYDB_ERROR(err, PYDB_ENOMEM, path, r->addr,
                          "no memory for a %lld-byte posting list",
                          (long long)len);
    rc = rd(f, buf, (size_t)len, r->addr, "LIND posting list", err);
    if (rc) goto cleanup;
    if (r->info3 < 0) {
        for (int64_t i = 0; i < len; i++) {
            if (!buf[i]) continue;
            for (int bit = 0; bit < 8; bit++) {
                int64_t m = i * 8 + bit;
                pydb_posting q = {0, 0, 0, 0};
                if (!(buf[i] & (0x80 >> bit))) continue;
                if (m == 0 || m > INT32_MAX ||
                    (nxtmfn > 0 && m >= nxtmfn) || ++seen > r->n) {
                    rc = PYDB_CORRUPT(err, path, r->addr + i,
                                      "LIND bit string: MFN %lld impossible "
                                      "or more than %d hits", (long long)m,
                                      (int)r->n);
                    goto cleanup;
                }
                q.mfn = (int32_t)m;
                if (out && (rc = pydb__postings_push(out, &q, err)))
                    goto cleanup;
            }
        }
        if (seen != r->n) {
            rc = PYDB_CORRUPT(err, path, r->addr,
                              "LIND bit string has %d hits, not %d",
                              (int)seen, (int)r->n);
            goto cleanup;
        }
        goto cleanup;
    }
    for (int32_t i = 0; i < r->n; i++) {
        const uint8_t *p = buf + (size_t)i * (size_t)(r->info3 > 0 ? w + 2 : w);
        int32_t m = w == 3 ? (p[0] << 16) | (p[1] << 8) | p[2]
                           : (int32_t)(((uint32_t)p[0] << 24) |
                                       ((uint32_t)p[1] << 16) |
                                       ((uint32_t)p[2] << 8) | p[3]);
        int32_t c = r->info3 > 0 ? (p[w] << 8) | p[w + 1] : 0;
        pydb_posting q = {m, 0, 0, (uint32_t)c};
        int bad = m < 1 || (nxtmfn > 0 && m >= nxtmfn) || m < prev ||
                  (m == prev && (r->info3 == 0 || c < prevcnt));
        if (bad) {
            rc = PYDB_CORRUPT(err, path,
                              r->addr + (int64_t)((const uint8_t *)p - buf),
                              "LIND posting %d (MFN %d) is not ascending or "
                              "outside the database", (int)i, (int)m);
            goto cleanup;
        }
        if (m != prev) distinct++;
        prev = m;
        prevcnt = c;
        if (out && (rc = pydb__postings_push(out, &q, err))) goto cleanup;
    }
    if (r->info3 > 0 && distinct != r->info3)
        rc = PYDB_CORRUPT(err, path, r->addr,
                          "LIND (MFN,CNT) list names %d records, INFO3 says "
                          "%lld", (int)distinct, (long long)r->info3);
cleanup:
    free(buf);
    return rc;
beyond:
    return PYDB_CORRUPT(err, path, r->addr,
                        "LIND list (address %lld, %d postings, INFO3 %lld) "
                        "runs past the end of the file (%lld bytes)",
                        (long long)r->addr, (int)r->n, (long long)r->info3,
                        (long long)size);
}

/* Posting count of leaf entry e (classic: IFPTOTP; LIND: INFO2). */
static int entry_count(const isis_index *ix, const tree *tr,
                       const uint8_t *e, uint64_t *count, pydb_error *err)
{
    if (ix->lind) {
        lind_ref r;
        lind_entry(ix, tr, e, &r);
        if (r.n < 0)
            return PYDB_CORRUPT(err, tr->lf->f.path, -1,
                                "LIND leaf entry with %d postings", (int)r.n);
        *count = (uint64_t)r.n;
        return PYDB_OK;
    } else {
        int32_t h[5];
        int rc = ifp_header(ix, i32(e + tr->le + tr->pad),
                            i32(e + tr->le + tr->pad + 4), h, err);
        if (rc) return rc;
        *count = (uint64_t)h[2];
        return PYDB_OK;
    }
}

static int entry_postings(const isis_index *ix, const tree *tr,
                          const uint8_t *e, pydb_postings *out,
                          pydb_error *err)
{
    if (ix->lind) {
        lind_ref r;
        lind_entry(ix, tr, e, &r);
        return lind_postings(ix, &r, ix->mfn_bytes, 0, out, err);
    }
    return ifp_postings(ix, i32(e + tr->le + tr->pad),
                        i32(e + tr->le + tr->pad + 4), out, err);
}

/* ------------------------------------------------------------- cursor */

/* A position in one tree's leaf chain, for ordered enumeration. */
typedef struct cursor {
    const tree *tr;
    uint8_t *buf;          /* current leaf                                 */
    int ock, j;            /* active keys, next index                      */
    int32_t leaf;          /* current leaf number                          */
    int32_t visited;       /* leaves read                                  */
    uint8_t *prev;         /* previous key (order check)                   */
    int has_prev;
    int done;
} cursor;

static void cursor_free(cursor *c)
{
    free(c->buf);
    free(c->prev);
    memset(c, 0, sizeof *c);
}

static int cursor_load(cursor *c, int32_t leaf, pydb_error *err)
{
    if (++c->visited > c->tr->fmax)
        return PYDB_CORRUPT(err, c->tr->lf->f.path, leaf_off(c->tr, leaf),
                            "leaf chain of tree %d visits more than FMAXPOS "
                            "(%d) leaves: a cycle", c->tr->t,
                            (int)c->tr->fmax);
    c->leaf = leaf;
    c->j = 0;
    return read_leaf(c->tr, leaf, c->buf, &c->ock, err);
}

/* Position c at the first key >= lo (blank-padded order). */
static int cursor_init(cursor *c, const tree *tr, const uint8_t *lo,
                       size_t lolen, pydb_error *err)
{
    uint8_t *nbuf = NULL;
    int32_t leaf;
    int rc;

    memset(c, 0, sizeof *c);
    c->tr = tr;
    if (tr->empty) {
        c->done = 1;
        return PYDB_OK;
    }
    c->buf = malloc(tr->lrec);
    c->prev = malloc((size_t)tr->le);
    nbuf = malloc(tr->nrec);
    if (!c->buf || !c->prev || !nbuf) {
        free(nbuf);
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for a cursor");
    }
    rc = descend(tr, lo, lolen, nbuf, &leaf, err);
    free(nbuf);
    if (rc) return rc;
    rc = cursor_load(c, leaf, err);
    if (rc) return rc;
    for (;;) {
        while (c->j < c->ock &&
               kcmp(leaf_key(tr, c->buf, c->j), (size_t)tr->le, lo, lolen) < 0)
            c->j++;
        if (c->j < c->ock) break;
        leaf = leaf_next(c->buf);
        if (leaf == 0) {
            c->done = 1;
            break;
        }
        if (leaf < 0 || leaf > tr->fmax)
            return PYDB_CORRUPT(err, tr->lf->f.path, leaf_off(tr, c->leaf) + 8,
                                "leaf %d: next leaf %d outside 1..FMAXPOS",
                                (int)c->leaf, (int)leaf);
        rc = cursor_load(c, leaf, err);
        if (rc) return rc;
    }
    return PYDB_OK;
}

/* The entry under the cursor (NULL at the end), moving on to the next
 * leaf when the current one is used up. */
static int cursor_peek(cursor *c, const uint8_t **entry, pydb_error *err)
{
    const tree *tr = c->tr;
    *entry = NULL;
    while (!c->done && c->j >= c->ock) {
        int32_t leaf = leaf_next(c->buf);
        int rc;
        if (leaf == 0) {
            c->done = 1;
            break;
        }
        if (leaf < 0 || leaf > tr->fmax)
            return PYDB_CORRUPT(err, tr->lf->f.path, leaf_off(tr, c->leaf) + 8,
                                "leaf %d: next leaf %d outside 1..FMAXPOS",
                                (int)c->leaf, (int)leaf);
        rc = cursor_load(c, leaf, err);
        if (rc) return rc;
    }
    if (c->done) return PYDB_OK;
    *entry = leaf_key(tr, c->buf, c->j);
    if (c->has_prev &&
        kcmp(c->prev, (size_t)tr->le, *entry, (size_t)tr->le) >= 0)
        return PYDB_CORRUPT(err, tr->lf->f.path,
                            leaf_off(tr, c->leaf) + (int64_t)tr->lhdr +
                                (int64_t)c->j * (int64_t)tr->lent,
                            "keys of tree %d do not ascend at leaf %d entry "
                            "%d", tr->t, (int)c->leaf, c->j);
    return PYDB_OK;
}

static void cursor_advance(cursor *c)
{
    memcpy(c->prev, leaf_key(c->tr, c->buf, c->j), (size_t)c->tr->le);
    c->has_prev = 1;
    c->j++;
}

/* ------------------------------------------------------------- ops */

static int starts_with(const uint8_t *k, size_t len, const uint8_t *p,
                       size_t plen)
{
    return len >= plen && memcmp(k, p, plen) == 0;
}

static int isis_terms(pydb_index *base, const uint8_t *prefix,
                      size_t prefix_len, const uint8_t *start,
                      size_t start_len, pydb_term_fn fn, void *ctx,
                      pydb_error *err)
{
    isis_index *ix = (isis_index *)base;
    cursor c[2];
    const uint8_t *lo = prefix;
    size_t lolen = prefix_len;
    int rc = PYDB_OK;

    memset(c, 0, sizeof c);
    if (!prefix) {
        prefix = (const uint8_t *)"";
        prefix_len = 0;
        lo = prefix;
        lolen = 0;
    }
    if (start && kcmp(start, start_len, prefix, prefix_len) > 0) {
        lo = start;
        lolen = start_len;
    }
    for (int t = 0; t < 2; t++) {
        rc = cursor_init(&c[t], &ix->tr[t], lo, lolen, err);
        if (rc) goto cleanup;
    }
    for (;;) {
        const uint8_t *e[2];
        size_t len[2];
        int pick = -1;
        uint64_t count = 0;
        for (int t = 0; t < 2; t++) {
            rc = cursor_peek(&c[t], &e[t], err);
            if (rc) goto cleanup;
            len[t] = e[t] ? ktrim(e[t], (size_t)ix->tr[t].le) : 0;
            /* past the prefix range: this tree is finished */
            if (e[t] && !starts_with(e[t], len[t], prefix, prefix_len) &&
                kcmp(e[t], len[t], prefix, prefix_len) > 0) {
                c[t].done = 1;
                e[t] = NULL;
            }
        }
        if (!e[0] && !e[1]) break;
        if (!e[1] || (e[0] && kcmp(e[0], len[0], e[1], len[1]) <= 0))
            pick = 0;
        else
            pick = 1;
        cursor_advance(&c[pick]);
        if (!starts_with(e[pick], len[pick], prefix, prefix_len))
            continue;   /* below the prefix (only when keys hold blanks) */
        rc = entry_count(ix, &ix->tr[pick], e[pick], &count, err);
        if (rc) goto cleanup;
        if (fn(ctx, e[pick], len[pick], count)) break;
    }
cleanup:
    cursor_free(&c[0]);
    cursor_free(&c[1]);
    return rc;
}

static int isis_postings(pydb_postings *out, pydb_index *base,
                         const uint8_t *key, size_t len, pydb_error *err)
{
    isis_index *ix = (isis_index *)base;
    const tree *tr;
    uint8_t *nbuf = NULL, *lbuf = NULL;
    int32_t leaf;
    int ock, rc;

    len = ktrim(key, len);
    if (len == 0 || len > (size_t)ix->tr[1].le) return PYDB_OK;
    tr = &ix->tr[len <= (size_t)ix->tr[0].le ? 0 : 1];
    if (tr->empty) return PYDB_OK;
    nbuf = malloc(tr->nrec);
    lbuf = malloc(tr->lrec);
    if (!nbuf || !lbuf) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for a lookup");
        goto cleanup;
    }
    rc = descend(tr, key, len, nbuf, &leaf, err);
    if (rc) goto cleanup;
    rc = read_leaf(tr, leaf, lbuf, &ock, err);
    if (rc) goto cleanup;
    for (int j = 0; j < ock; j++) {
        const uint8_t *e = leaf_key(tr, lbuf, j);
        int d = kcmp(e, (size_t)tr->le, key, len);
        if (d == 0) {
            rc = entry_postings(ix, tr, e, out, err);
            break;
        }
        if (d > 0) break;
    }
cleanup:
    free(nbuf);
    free(lbuf);
    return rc;
}

static int isis_key(pydb_index *base, const uint8_t *term, size_t len,
                    uint8_t *out, size_t cap, size_t *out_len,
                    pydb_error *err)
{
    isis_index *ix = (isis_index *)base;
    return pydb__key_normalize(&ix->rules, term, len, out, cap, out_len, err);
}

static void isis_close(pydb_index *base)
{
    isis_index *ix = (isis_index *)base;
    for (int i = 0; i < F_COUNT; i++) ixfile_close(&ix->files[i]);
    free(ix);
}

static const pydb_index_ops isis_ops = {"isis", isis_terms, isis_postings,
                                        isis_key, isis_close, NULL};

/* ------------------------------------------------------------- open */

/* Known key lengths (§4.1). */
static const int known_le[] = {10, 16, 30, 60, 256, 512};

static size_t roundup(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Parse .CNT record t (1-based) of size recsz at p into tr. */
static int parse_cnt(tree *tr, int t, const uint8_t *p, const ixfile *cnt,
                     int64_t off, pydb_error *err)
{
    memset(tr, 0, sizeof *tr);
    tr->t = t;
    tr->ordn = pydb__u16(p + 2);
    tr->ordf = pydb__u16(p + 4);
    tr->liv = i16(p + 10);
    tr->posrx = i32(p + 12);
    tr->nmax = i32(p + 16);
    tr->fmax = i32(p + 20);
    if (pydb__u16(p) != t)
        return PYDB_CORRUPT(err, cnt->f.path, off,
                            ".CNT record %d has IDTYPE %d", t,
                            pydb__u16(p));
    if (tr->liv < 0 || tr->fmax == 0) {
        tr->empty = 1;
        return PYDB_OK;
    }
    if (tr->ordn < 1 || tr->ordn > MAX_ORD || tr->ordf < 1 ||
        tr->ordf > MAX_ORD || tr->liv > MAX_LIV || tr->nmax < 1 ||
        tr->fmax < 1 || tr->posrx < 1 || tr->posrx > tr->nmax)
        return PYDB_CORRUPT(err, cnt->f.path, off,
                            ".CNT record %d: ORDN %d ORDF %d LIV %d POSRX %d "
                            "NMAXPOS %d FMAXPOS %d out of range", t,
                            tr->ordn, tr->ordf, tr->liv, (int)tr->posrx,
                            (int)tr->nmax, (int)tr->fmax);
    return PYDB_OK;
}

/* Find the node geometry (LE, pad) of a non-empty tree from the node
 * file: the record size must fit NMAXPOS records and divide the file,
 * and records 1 and POSRX must carry their own POS and IT. */
static int node_geometry(tree *tr, const ixfile *nf, pydb_error *err)
{
    uint8_t *buf = NULL;
    int rc = PYDB_OK;
    tr->nf = nf;
    if (!nf->open)
        return PYDB_CORRUPT(err, nf->f.path, -1,
                            "tree %d is not empty but its node file is "
                            "missing", tr->t);
    for (size_t i = 0; i < sizeof known_le / sizeof *known_le; i++) {
        int le = known_le[i];
        for (int pass = 0; pass < 2; pass++) {
            int pad = pass ? (4 - le % 4) % 4 : 0;
            size_t rec = 8 + 2 * (size_t)tr->ordn * (size_t)(le + pad + 4);
            int ock;
            pydb_error scratch;
            if (pass && pad == 0) continue;
            if ((int64_t)rec * tr->nmax > nf->f.size ||
                nf->f.size % (int64_t)rec != 0)
                continue;
            tr->le = le;
            tr->pad = pad;
            tr->nrec = rec;
            tr->nent = (size_t)(le + pad + 4);
            free(buf);
            buf = malloc(rec);
            if (!buf)
                return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
            if (read_node(tr, 1, buf, &ock, &scratch) == PYDB_OK &&
                read_node(tr, tr->posrx, buf, &ock, &scratch) == PYDB_OK &&
                read_node(tr, tr->nmax, buf, &ock, &scratch) == PYDB_OK)
                goto done;
        }
    }
    rc = PYDB_CORRUPT(err, nf->f.path, 0,
                      "node file of tree %d (%lld bytes, NMAXPOS %d) matches "
                      "no known key length (10/16/30/60/256/512, packed or "
                      "aligned)", tr->t, (long long)nf->f.size,
                      (int)tr->nmax);
done:
    free(buf);
    return rc;
}

/* Leaf geometry for classic (lind = 0) or LIND with (infx, align). */
static void leaf_geometry(tree *tr, int lind, int infx, int align)
{
    if (!lind) {
        tr->lhdr = 12;
        tr->lent = (size_t)(tr->le + tr->pad + 8);
        tr->info1 = (size_t)(tr->le + tr->pad);
        tr->info2 = tr->info1 + 4;
        tr->info3 = 0;
    } else {
        tr->lhdr = 16;
        tr->info1 = roundup((size_t)tr->le, (size_t)align);
        tr->info2 = tr->info1 + (size_t)infx;
        tr->info3 = roundup(tr->info2 + 4, (size_t)align);
        tr->lent = roundup(tr->info3 + (size_t)infx, (size_t)align);
    }
    tr->lrec = tr->lhdr + 2 * (size_t)tr->ordf * tr->lent;
}

/* Check the leaf file of tree tr against its geometry: size, records 1
 * and FMAXPOS, and the leaves under the leftmost and rightmost bottom
 * nodes against their separator keys. */
static int check_leaves(const tree *tr, pydb_error *err)
{
    const ixfile *lf = tr->lf;
    uint8_t *nbuf = malloc(tr->nrec), *lbuf = malloc(tr->lrec);
    int rc = PYDB_OK, ock;

    if (!nbuf || !lbuf) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
        goto cleanup;
    }
    if ((int64_t)tr->lrec * tr->fmax > lf->f.size ||
        lf->f.size % (int64_t)tr->lrec != 0) {
        rc = PYDB_CORRUPT(err, lf->f.path, 0,
                          "leaf file (%lld bytes) does not hold FMAXPOS %d "
                          "records of %zu bytes", (long long)lf->f.size,
                          (int)tr->fmax, tr->lrec);
        goto cleanup;
    }
    if ((rc = read_leaf(tr, 1, lbuf, &ock, err)) ||
        (rc = read_leaf(tr, tr->fmax, lbuf, &ock, err)))
        goto cleanup;
    for (int side = 0; side < 2; side++) {
        int32_t r = tr->posrx;
        for (int level = 0; level <= tr->liv; level++) {
            int nock, j;
            int32_t p;
            rc = read_node(tr, r, nbuf, &nock, err);
            if (rc) goto cleanup;
            j = side ? nock - 1 : 0;
            p = node_punt(tr, nbuf, j);
            if (p > 0 && level < tr->liv && p <= tr->nmax) {
                r = p;
                continue;
            }
            /* bottom node: every entry must name a leaf whose keys lie
             * between its separator and the next one */
            for (j = 0; j < nock; j++) {
                int lock;
                p = node_punt(tr, nbuf, j);
                if (p >= 0 || -(int64_t)p > tr->fmax) {
                    rc = PYDB_CORRUPT(err, tr->nf->f.path, node_off(tr, r),
                                      "bottom node %d entry %d points at %d, "
                                      "not a leaf (LIV %d)", (int)r, j,
                                      (int)p, tr->liv);
                    goto cleanup;
                }
                rc = read_leaf(tr, -p, lbuf, &lock, err);
                if (rc) goto cleanup;
                if (lock > 0 &&
                    ((j > 0 && kcmp(leaf_key(tr, lbuf, 0), (size_t)tr->le,
                                    node_key(tr, nbuf, j),
                                    (size_t)tr->le) < 0) ||
                     (j + 1 < nock &&
                      kcmp(leaf_key(tr, lbuf, lock - 1), (size_t)tr->le,
                           node_key(tr, nbuf, j + 1), (size_t)tr->le) >= 0))) {
                    rc = PYDB_CORRUPT(err, lf->f.path, leaf_off(tr, -p),
                                      "leaf %d does not hold the keys its "
                                      "node %d says (stale or mismatched "
                                      "leaf file)", (int)-p, (int)r);
                    goto cleanup;
                }
            }
            break;
        }
    }
cleanup:
    free(nbuf);
    free(lbuf);
    return rc;
}

/* Decode (check only) the lists of the first keys of tree tr; for LIND
 * with width w.  *max_mfn receives the largest MFN met. */
static int check_lists(const isis_index *ix, const tree *tr, int w,
                       int limit, int32_t *max_mfn, pydb_error *err)
{
    cursor c;
    int rc = cursor_init(&c, tr, (const uint8_t *)"", 0, err);
    pydb_postings p = {0};
    for (int k = 0; !rc && k < limit; k++) {
        const uint8_t *e;
        rc = cursor_peek(&c, &e, err);
        if (rc || !e) break;
        p.n = 0;
        if (ix->lind) {
            lind_ref r;
            lind_entry(ix, tr, e, &r);
            rc = lind_postings(ix, &r, w, ix->nxtmfn, &p, err);
        } else {
            rc = ifp_postings(ix, i32(e + tr->info1), i32(e + tr->info2), &p,
                              err);
        }
        if (!rc && p.n && p.v[p.n - 1].mfn > *max_mfn)
            *max_mfn = p.v[p.n - 1].mfn;
        cursor_advance(&c);
    }
    cursor_free(&c);
    pydb_postings_free(&p);
    return rc;
}

/* Try the classic (lind = 0) or LIND set on ix (trees parsed from .CNT,
 * node geometry known).  On success ix describes a usable index. */
static int try_set(isis_index *ix, int lind, pydb_error *err)
{
    static const int layouts[][2] = {{4, 4}, {8, 8}, {8, 4}, {4, 1}, {8, 1}};
    const int nlayouts = lind ? 5 : 1;
    int lf_id[2] = {lind ? F_LY1 : F_L1, lind ? F_LY2 : F_L2};
    int post = lind ? F_IYP : F_IFP;
    int any = 0, rc = PYDB_OK;

    ix->lind = lind;
    ix->post = post;
    ix->infx = ix->infx_align = 0;
    ix->mfn_bytes = 3;
    for (int t = 0; t < 2; t++) {
        ix->tr[t].lf = &ix->files[lf_id[t]];
        if (ix->tr[t].empty) continue;
        any = 1;
        if (!ix->files[lf_id[t]].open)
            return PYDB_CORRUPT(err, ix->files[lf_id[t]].f.path, -1,
                                "tree %d is not empty but its %s leaf file "
                                "is missing", t + 1,
                                lind ? "LIND" : "classic");
    }
    if (any && !ix->files[post].open)
        return PYDB_CORRUPT(err, ix->files[post].f.path, -1,
                            "the %s posting file is missing",
                            lind ? "LIND (.iyp)" : "classic (.ifp)");
    if (!any) return PYDB_OK;
    for (int l = 0; l < nlayouts; l++) {
        pydb_error scratch;
        int ok = 1;
        for (int t = 0; t < 2 && ok; t++) {
            tree *tr = &ix->tr[t];
            if (tr->empty) continue;
            leaf_geometry(tr, lind, layouts[l][0], layouts[l][1]);
            rc = check_leaves(tr, l + 1 < nlayouts ? &scratch : err);
            if (rc) ok = 0;
        }
        if (ok) {
            ix->infx = lind ? layouts[l][0] : 0;
            ix->infx_align = lind ? layouts[l][1] : 0;
            rc = PYDB_OK;
            break;
        }
        if (l + 1 == nlayouts) return rc;
    }
    if (!lind) {
        int32_t mx = 0;
        for (int t = 0; t < 2; t++)
            if (!ix->tr[t].empty &&
                (rc = check_lists(ix, &ix->tr[t], 3, 4, &mx, err)))
                return rc;
        return PYDB_OK;
    }
    /* LIND: the MFN width under which the sampled lists decode, ascend
     * and fit the database; of two, the one giving smaller MFNs. */
    {
        int32_t mx[2] = {0, 0};
        int ok[2] = {0, 0};
        pydb_error e3, e4;
        /* bounded by the master file's NXTMFN first; an index newer than
         * the master file is then tried without that bound */
        for (int pass = 0; pass < 2 && !ok[0] && !ok[1]; pass++) {
            int32_t saved_nxt = ix->nxtmfn;
            if (pass == 1) {
                if (!saved_nxt) break;
                ix->nxtmfn = 0;
            }
            for (int w = 3; w <= 4; w++) {
                pydb_error *pe = w == 3 ? &e3 : &e4;
                ok[w - 3] = 1;
                mx[w - 3] = 0;
                for (int t = 0; t < 2 && ok[w - 3]; t++)
                    if (!ix->tr[t].empty &&
                        check_lists(ix, &ix->tr[t], w, WIDTH_SAMPLE,
                                    &mx[w - 3], pe) != PYDB_OK)
                        ok[w - 3] = 0;
            }
            ix->nxtmfn = saved_nxt;
        }
        if (ok[0] && (!ok[1] || mx[0] <= mx[1]))
            ix->mfn_bytes = 3;
        else if (ok[1])
            ix->mfn_bytes = 4;
        else {
            return PYDB_CORRUPT(err, e3.path, e3.offset,
                                "LIND postings decode with neither 3- nor "
                                "4-byte MFNs (3: %s)", e3.message);
        }
    }
    return PYDB_OK;
}

/* Locate every index file of `base` in its directory, case-insensitively
 * (§1).  Sets paths (found or not) and opens those found. */
static int find_files(isis_index *ix, const char *base, pydb_error *err)
{
    char dir[1024];
    const char *slash = strrchr(base, '/'), *name;
    size_t nlen;
    DIR *d;
    struct dirent *de;
    char found[F_COUNT][1024];

    memset(found, 0, sizeof found);
    if (slash) {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - base + 1), base);
        name = slash + 1;
    } else {
        snprintf(dir, sizeof dir, "./");
        name = base;
    }
    nlen = strlen(name);
    d = opendir(dir);
    if (!d)
        return PYDB_OSERROR(err, errno, dir, -1, "cannot list directory: %s",
                            strerror(errno));
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strlen(n) != nlen + 4 || n[nlen] != '.' ||
            strncasecmp(n, name, nlen) != 0)
            continue;
        for (int i = 0; i < F_COUNT; i++) {
            if (strcasecmp(n + nlen + 1, f_ext[i]) != 0) continue;
            /* prefer the exact-case name if several differ only in case */
            if (!found[i][0] || strncmp(n, name, nlen) == 0)
                snprintf(found[i], sizeof found[i], "%.511s%.511s",
                         slash ? dir : "", n);
        }
    }
    closedir(d);
    for (int i = 0; i < F_COUNT; i++) {
        int rc;
        if (!found[i][0]) {
            snprintf(ix->files[i].f.path, sizeof ix->files[i].f.path,
                     "%.1010s.%s", base, f_ext[i]);
            continue;
        }
        rc = ixfile_open(&ix->files[i], found[i], err);
        if (rc) return rc;
    }
    return PYDB_OK;
}

static int64_t newest(const isis_index *ix, int a, int b, int c)
{
    int64_t m = ix->files[a].mtime_ns;
    if (ix->files[b].mtime_ns > m) m = ix->files[b].mtime_ns;
    if (ix->files[c].mtime_ns > m) m = ix->files[c].mtime_ns;
    return m;
}

int pydb_isis_index_open(pydb_index **out, const char *path, pydb_error *err)
{
    char base[1024];
    isis_index *ix = NULL;
    uint8_t cnt[56];
    int rc, recsz, have_classic, have_lind, ok_classic, ok_lind;
    pydb_error ec, el;
    tree saved[2];

    *out = NULL;
    if (!path || !*path || strlen(path) >= sizeof base - 8)
        return PYDB_ERROR(err, PYDB_EINVAL, path ? path : "", -1,
                          "empty or too long database path");
    pydb__strip_ext(base, sizeof base, path);
    ix = calloc(1, sizeof *ix);
    if (!ix)
        return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory for index");
    for (int i = 0; i < F_COUNT; i++) ixfile_init(&ix->files[i]);
    ix->base.ops = &isis_ops;
    ix->base.kind = PYDB_INDEX_ISIS_CLASSIC;
    rc = find_files(ix, base, err);
    if (rc) goto cleanup;
    if (!ix->files[F_CNT].open) {
        rc = PYDB_OSERROR(err, ENOENT, ix->files[F_CNT].f.path, -1,
                          "no inverted file (.cnt) for database %s", base);
        goto cleanup;
    }
    /* NXTMFN bounds LIND MFNs when the master file is there (§2.1) */
    if (ix->files[F_MST].open && ix->files[F_MST].f.size >= 8) {
        uint8_t h[8];
        if (rd(&ix->files[F_MST], h, 8, 0, "control record", err) == PYDB_OK &&
            i32(h + 4) > 0)
            ix->nxtmfn = i32(h + 4);
    }
    /* .CNT: 2 x 26 bytes (packed) or 2 x 28 (aligned), §4.2 */
    if (ix->files[F_CNT].f.size == 52)
        recsz = 26;
    else if (ix->files[F_CNT].f.size == 56)
        recsz = 28;
    else {
        rc = PYDB_CORRUPT(err, ix->files[F_CNT].f.path, 0,
                          ".CNT has %lld bytes, not 52 (packed) or 56 "
                          "(aligned)", (long long)ix->files[F_CNT].f.size);
        goto cleanup;
    }
    ix->cnt_aligned = recsz == 28;
    rc = rd(&ix->files[F_CNT], cnt, (size_t)(2 * recsz), 0, ".CNT", err);
    if (rc) goto cleanup;
    for (int t = 0; t < 2; t++) {
        rc = parse_cnt(&ix->tr[t], t + 1, cnt + t * recsz, &ix->files[F_CNT],
                       (int64_t)t * recsz, err);
        if (rc) goto cleanup;
        if (!ix->tr[t].empty) {
            rc = node_geometry(&ix->tr[t], &ix->files[t ? F_N2 : F_N1], err);
            if (rc) goto cleanup;
        }
        ix->tr[t].nf = &ix->files[t ? F_N2 : F_N1];
    }
    /* key lengths of empty trees from the other tree (§4.1 pairs) */
    if (ix->tr[0].empty)
        ix->tr[0].le = (!ix->tr[1].empty && ix->tr[1].le == 30) ? 10 : 16;
    if (ix->tr[1].empty)
        ix->tr[1].le = ix->tr[0].le == 10 ? 30 : 60;
    if (ix->tr[0].le >= ix->tr[1].le) {
        rc = PYDB_CORRUPT(err, ix->files[F_N2].f.path, 0,
                          "tree 2 key length %d is not above tree 1's %d",
                          ix->tr[1].le, ix->tr[0].le);
        goto cleanup;
    }
    have_classic = ix->files[F_L1].open || ix->files[F_L2].open ||
                   ix->files[F_IFP].open;
    have_lind = ix->files[F_LY1].open || ix->files[F_LY2].open ||
                ix->files[F_IYP].open;
    memcpy(saved, ix->tr, sizeof saved);
    ok_lind = have_lind && try_set(ix, 1, &el) == PYDB_OK;
    if (ok_lind) {
        tree lt[2];
        int lind_infx = ix->infx, lind_align = ix->infx_align,
            lind_w = ix->mfn_bytes;
        memcpy(lt, ix->tr, sizeof lt);
        memcpy(ix->tr, saved, sizeof saved);
        ok_classic = have_classic && try_set(ix, 0, &ec) == PYDB_OK;
        if (ok_classic &&
            newest(ix, F_L1, F_L2, F_IFP) >= newest(ix, F_LY1, F_LY2, F_IYP)) {
            snprintf(ix->note, sizeof ix->note,
                     "both the classic and the LIND file sets validate; "
                     "the classic set (.l0x/.ifp) is newer and was used");
        } else {
            memcpy(ix->tr, lt, sizeof lt);
            ix->lind = 1;
            ix->post = F_IYP;
            ix->infx = lind_infx;
            ix->infx_align = lind_align;
            ix->mfn_bytes = lind_w;
            if (ok_classic)
                snprintf(ix->note, sizeof ix->note,
                         "both the classic and the LIND file sets validate; "
                         "the LIND set (.ly0x/.iyp) is newer and was used");
            else if (have_classic)
                snprintf(ix->note, sizeof ix->note,
                         "LIND set used; the classic set (.l0x/.ifp) is "
                         "stale: %.600s", ec.message);
            else
                snprintf(ix->note, sizeof ix->note, "LIND set used");
        }
    } else {
        memcpy(ix->tr, saved, sizeof saved);
        ok_classic = (have_classic || !have_lind) &&
                     try_set(ix, 0, &ec) == PYDB_OK;
        if (!ok_classic) {
            if (err) *err = have_classic || !have_lind ? ec : el;
            rc = PYDB_ECORRUPT;
            goto cleanup;
        }
        if (have_lind)
            snprintf(ix->note, sizeof ix->note,
                     "classic set used; the LIND set (.ly0x/.iyp) is "
                     "stale: %.600s", el.message);
        else
            snprintf(ix->note, sizeof ix->note, "classic set used");
    }
    ix->base.kind = ix->lind ? PYDB_INDEX_ISIS_LIND : PYDB_INDEX_ISIS_CLASSIC;
    ix->base.caps = !ix->lind ? PYDB_POSTING_TAG | PYDB_POSTING_OCC |
                                    PYDB_POSTING_CNT
                              : 0;
    if (ix->lind) {
        /* CNT only where (MFN,CNT) lists exist: set if one of the first
         * CAPS_SAMPLE keys of a tree has one */
        for (int t = 0; t < 2 && !ix->base.caps; t++) {
            cursor c;
            const tree *tr = &ix->tr[t];
            if (tr->empty) continue;
            rc = cursor_init(&c, tr, (const uint8_t *)"", 0, err);
            for (int k = 0; !rc && k < CAPS_SAMPLE; k++) {
                const uint8_t *e;
                lind_ref r;
                rc = cursor_peek(&c, &e, err);
                if (rc || !e) break;
                lind_entry(ix, tr, e, &r);
                if (r.info3 > 0) {
                    ix->base.caps = PYDB_POSTING_CNT;
                    break;
                }
                cursor_advance(&c);
            }
            cursor_free(&c);
            if (rc) goto cleanup;
        }
    }
    pydb__keyrules_default(&ix->rules, 0, (size_t)ix->tr[1].le);
    /* drop the files of the set not used */
    for (int i = 0; i < F_COUNT; i++) {
        int used = i == F_CNT || i == F_N1 || i == F_N2 ||
                   (ix->lind ? (i == F_LY1 || i == F_LY2 || i == F_IYP)
                             : (i == F_L1 || i == F_L2 || i == F_IFP));
        if (!used && ix->files[i].open) {
            char keep[1024];
            snprintf(keep, sizeof keep, "%s", ix->files[i].f.path);
            ixfile_close(&ix->files[i]);
            snprintf(ix->files[i].f.path, sizeof ix->files[i].f.path, "%s",
                     keep);
        }
    }
    *out = &ix->base;
    ix = NULL;
    rc = PYDB_OK;
cleanup:
    if (ix) isis_close(&ix->base);
    return rc;
}

int pydb_isis_index_describe(const pydb_index *base,
                             pydb_isis_index_info *o)
{
    const isis_index *ix = (const isis_index *)base;
    if (!base || base->ops != &isis_ops) return PYDB_EINVAL;
    memset(o, 0, sizeof *o);
    o->kind = base->kind;
    o->le1 = ix->tr[0].le;
    o->le2 = ix->tr[1].le;
    o->cnt_aligned = ix->cnt_aligned;
    o->key_pad = ix->tr[0].pad > ix->tr[1].pad ? ix->tr[0].pad
                                               : ix->tr[1].pad;
    o->infx = ix->infx;
    o->infx_align = ix->infx_align;
    o->mfn_bytes = ix->mfn_bytes;
    for (int t = 0; t < 2; t++) {
        o->tree[t].empty = ix->tr[t].empty;
        o->tree[t].liv = ix->tr[t].liv;
        o->tree[t].root = ix->tr[t].posrx;
        o->tree[t].nodes = ix->tr[t].nmax;
        o->tree[t].leaves = ix->tr[t].fmax;
        o->tree[t].node_size = ix->tr[t].nrec;
        o->tree[t].leaf_size = ix->tr[t].lrec;
        o->tree[t].node_path = ix->files[t ? F_N2 : F_N1].f.path;
        o->tree[t].leaf_path =
            ix->files[ix->lind ? (t ? F_LY2 : F_LY1) : (t ? F_L2 : F_L1)]
                .f.path;
    }
    o->cnt_path = ix->files[F_CNT].f.path;
    o->postings_path = ix->files[ix->lind ? F_IYP : F_IFP].f.path;
    o->note = ix->note;
    return PYDB_OK;
}
