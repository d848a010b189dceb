/*
 * isis_read.c - reading an open CDS/ISIS inverted file set (formats in
 * isis_int.h): the files, B*-tree node and leaf records and the descent,
 * classic IFP posting chains and CISIS LIND lists, leaf-chain cursors,
 * and the pydb_index operations (terms, postings, key, close).
 *
 * Threads: the handle is immutable after open; every operation works on
 * its own buffers, so any number of threads may use one index at once.
 *
 * Depends on: isis_int.h, index_int.h (interface, key normalisation),
 * pydb_int.h (file reads through the vfs).  Does not choose files.
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
#include "isis_int.h"

/* ------------------------------------------------------------- files */

void pydb__isis_ixfile_init(ixfile *x)
{
    memset(x, 0, sizeof *x);
    x->f.fd = -1;
    x->f.dfd = -1;
}

void pydb__isis_ixfile_close(ixfile *x)
{
    if (x->f.map) munmap((void *)x->f.map, (size_t)x->f.size);
    if (x->f.fd >= 0) pydb__vfs->close(x->f.fd);
    pydb__isis_ixfile_init(x);
}

/* Open `path` read-only through the vfs table and map it (read through
 * pread if the mapping fails). */
int pydb__isis_ixfile_open(ixfile *x, const char *path, pydb_error *err)
{
    struct stat st;

    pydb__isis_ixfile_init(x);
    snprintf(x->f.path, sizeof x->f.path, "%.1023s", path);
    x->f.fd = pydb__vfs->open(path, O_RDONLY, 0);
    if (x->f.fd < 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot open: %s",
                            strerror(errno));
    if (fstat(x->f.fd, &st) != 0) {
        int e = errno;
        pydb__isis_ixfile_close(x);
        return PYDB_OSERROR(err, e, path, -1, "cannot stat: %s", strerror(e));
    }
    x->f.size = (int64_t)st.st_size;
    x->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if (x->f.size > 0) {
        void *m;
        pydb__map_guard();   /* copies out of it survive a truncation */
        m = mmap(NULL, (size_t)x->f.size, PROT_READ, MAP_SHARED,
                 x->f.fd, 0);
        if (m != MAP_FAILED) x->f.map = m;
    }
    x->open = 1;
    return PYDB_OK;
}

/* ------------------------------------------------------------- records */

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

int pydb__isis_read_node(const tree *tr, int32_t r, uint8_t *buf, int *ock,
                         pydb_error *err)
{
    return read_rec(tr, 0, r, buf, ock, err);
}

int pydb__isis_read_leaf(const tree *tr, int32_t r, uint8_t *buf, int *ock,
                         pydb_error *err)
{
    return read_rec(tr, 1, r, buf, ock, err);
}

/* Descend from the root to the leaf that may hold `key` (any length,
 * compared blank-padded): at each node the last entry whose KEY <= key,
 * or the first (§4.3).  At most LIV+1 node reads. */
static int descend(const tree *tr, const uint8_t *key, size_t len,
                   uint8_t *nbuf, int32_t *leaf, pydb_error *err)
{
    int32_t r = tr->posrx;
    for (int level = 0; level <= tr->liv; level++) {
        int ock, j, rc = pydb__isis_read_node(tr, r, nbuf, &ock, err);
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
    return ((int64_t)block - 1) * IFP_BLOCK + 4 + 4 * (int64_t)word;
}

static int ifp_check_block(const isis_index *ix, int32_t block, pydb_error *err)
{
    const ixfile *f = &ix->files[F_IFP];
    uint8_t b[4];
    int64_t off = ((int64_t)block - 1) * IFP_BLOCK;
    int rc = rd(f, b, 4, off, "IFP block header", err);
    if (rc) return rc;
    if (i32(b) != block)
        return PYDB_CORRUPT(err, f->f.path, off,
                            "IFP block %d has IFPBLK %d", (int)block,
                            (int)i32(b));
    return PYDB_OK;
}

/* Read and check a segment header at (block, word), an address that
 * file `from` holds at byte `from_off` (-1: not known): a leaf entry's,
 * or the previous segment header's NXTB/NXTP.  An address outside the
 * IFP is that file's fault, and named so (it was blamed on the IFP, at
 * the offset the address would have, past the IFP's end). */
static int ifp_header(const isis_index *ix, int32_t block, int32_t word,
                      const char *from, int64_t from_off, int32_t h[5],
                      pydb_error *err)
{
    const ixfile *f = &ix->files[F_IFP];
    uint8_t b[20];
    int64_t off = ifp_addr(block, word);
    int rc;
    if (block < 1 || word < 0 || word > IFP_WORDS - 5 ||
        (int64_t)block > f->f.size / IFP_BLOCK)
        return PYDB_CORRUPT(err, from, from_off,
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
int pydb__isis_ifp_postings(const isis_index *ix, int32_t block,
                            int32_t word, const char *from, int64_t from_off,
                            pydb_postings *out, pydb_error *err)
{
    const ixfile *f = &ix->files[F_IFP];
    int32_t h[5];
    int64_t total, got = 0, segs = 0;
    size_t first = out->n;
    uint8_t buf[IFP_WORDS * 4];
    int rc = ifp_header(ix, block, word, from, from_off, h, err);
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
                                        ((int64_t)b - 1) * IFP_BLOCK,
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
        {
            int64_t at = ifp_addr(block, word);   /* NXTB, NXTP */
            block = h[0];
            word = h[1];
            rc = ifp_header(ix, block, word, f->f.path, at, h, err);
        }
        if (rc) return rc;
    }
    if (got != total)
        return PYDB_CORRUPT(err, f->f.path, ifp_addr(block, word),
                            "posting list ends after %lld of IFPTOTP %lld "
                            "postings", (long long)got, (long long)total);
    return PYDB_OK;
}

void pydb__isis_lind_entry(const isis_index *ix, const tree *tr,
                           const uint8_t *e, lind_ref *r)
{
    const uint8_t *p1 = e + tr->info1, *p3 = e + tr->info3;
    r->addr = ix->infx == 8 ? i64(p1) : (int64_t)i32(p1);
    r->n = i32(e + tr->info2);
    r->info3 = ix->infx == 8 ? i64(p3) : (int64_t)i32(p3);
}

/* Decode a LIND list with MFN width `w` (3 or 4) into out (when out is
 * NULL only check it).  nxtmfn > 0 bounds the MFNs. */
int pydb__isis_lind_postings(const isis_index *ix, const lind_ref *r, int w,
                             int32_t nxtmfn, pydb_postings *out,
                             pydb_error *err)
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

/* Posting count of leaf entry e, at byte `at` of the leaf file
 * (classic: IFPTOTP; LIND: INFO2). */
static int entry_count(const isis_index *ix, const tree *tr,
                       const uint8_t *e, int64_t at, uint64_t *count,
                       pydb_error *err)
{
    if (ix->lind) {
        lind_ref r;
        pydb__isis_lind_entry(ix, tr, e, &r);
        if (r.n < 0)
            return PYDB_CORRUPT(err, tr->lf->f.path, at,
                                "LIND leaf entry with %d postings", (int)r.n);
        *count = (uint64_t)r.n;
        return PYDB_OK;
    } else {
        int32_t h[5];
        int rc = ifp_header(ix, i32(e + tr->le + tr->pad),
                            i32(e + tr->le + tr->pad + 4), tr->lf->f.path,
                            at + tr->le + tr->pad, h, err);
        if (rc) return rc;
        *count = (uint64_t)h[2];
        return PYDB_OK;
    }
}

/* The postings of leaf entry e, at byte `at` of the leaf file. */
static int entry_postings(const isis_index *ix, const tree *tr,
                          const uint8_t *e, int64_t at, pydb_postings *out,
                          pydb_error *err)
{
    if (ix->lind) {
        lind_ref r;
        pydb__isis_lind_entry(ix, tr, e, &r);
        return pydb__isis_lind_postings(ix, &r, ix->mfn_bytes, 0, out, err);
    }
    return pydb__isis_ifp_postings(ix, i32(e + tr->le + tr->pad),
                                   i32(e + tr->le + tr->pad + 4),
                                   tr->lf->f.path, at + tr->le + tr->pad,
                                   out, err);
}

/* ------------------------------------------------------------- cursor */

void pydb__isis_cursor_free(cursor *c)
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
    return pydb__isis_read_leaf(c->tr, leaf, c->buf, &c->ock, err);
}

/* The cursor moved to the leaf that follows its own (c->done at the
 * last).  PYDB_OK, or an error: a next leaf outside the file's leaves
 * (corruption), cursor_load()'s. */
static int cursor_next_leaf(cursor *c, pydb_error *err)
{
    const tree *tr = c->tr;
    int32_t leaf = leaf_next(c->buf);
    if (leaf == 0) {
        c->done = 1;
        return PYDB_OK;
    }
    if (leaf < 0 || leaf > tr->fmax)
        return PYDB_CORRUPT(err, tr->lf->f.path, leaf_off(tr, c->leaf) + 8,
                            "leaf %d: next leaf %d outside 1..FMAXPOS",
                            (int)c->leaf, (int)leaf);
    return cursor_load(c, leaf, err);
}

/* Position c at the first key >= lo (blank-padded order). */
int pydb__isis_cursor_init(cursor *c, const tree *tr, const uint8_t *lo,
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
    while (rc == PYDB_OK && !c->done) {
        while (c->j < c->ock &&
               kcmp(leaf_key(tr, c->buf, c->j), (size_t)tr->le, lo, lolen) < 0)
            c->j++;
        if (c->j < c->ock) break;
        rc = cursor_next_leaf(c, err);
    }
    return rc;
}

/* The entry under the cursor (NULL at the end), moving on to the next
 * leaf when the current one is used up. */
int pydb__isis_cursor_peek(cursor *c, const uint8_t **entry, pydb_error *err)
{
    const tree *tr = c->tr;
    *entry = NULL;
    while (!c->done && c->j >= c->ock) {
        int rc = cursor_next_leaf(c, err);
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

void pydb__isis_cursor_advance(cursor *c)
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
        rc = pydb__isis_cursor_init(&c[t], &ix->tr[t], lo, lolen, err);
        if (rc) goto cleanup;
    }
    for (;;) {
        const uint8_t *e[2];
        size_t len[2];
        int pick = -1;
        uint64_t count = 0;
        for (int t = 0; t < 2; t++) {
            rc = pydb__isis_cursor_peek(&c[t], &e[t], err);
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
        pydb__isis_cursor_advance(&c[pick]);
        if (!starts_with(e[pick], len[pick], prefix, prefix_len))
            continue;   /* below the prefix (only when keys hold blanks) */
        rc = entry_count(ix, &ix->tr[pick], e[pick],
                         leaf_entry_off(&ix->tr[pick], c[pick].leaf,
                                        c[pick].buf, e[pick]),
                         &count, err);
        if (rc) goto cleanup;
        if (fn(ctx, e[pick], len[pick], count)) break;
    }
cleanup:
    pydb__isis_cursor_free(&c[0]);
    pydb__isis_cursor_free(&c[1]);
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
    rc = pydb__isis_read_leaf(tr, leaf, lbuf, &ock, err);
    if (rc) goto cleanup;
    for (int j = 0; j < ock; j++) {
        const uint8_t *e = leaf_key(tr, lbuf, j);
        int d = kcmp(e, (size_t)tr->le, key, len);
        if (d == 0) {
            rc = entry_postings(ix, tr, e, leaf_entry_off(tr, leaf, lbuf, e),
                                out, err);
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

void pydb__isis_close(pydb_index *base)
{
    isis_index *ix = (isis_index *)base;
    for (int i = 0; i < F_COUNT; i++) pydb__isis_ixfile_close(&ix->files[i]);
    free(ix);
}

const pydb_index_ops pydb__isis_ops = {"isis", isis_terms, isis_postings,
                                        isis_key, pydb__isis_close, NULL,
                                        NULL, NULL, NULL, NULL,
                                        NULL, NULL, NULL};
