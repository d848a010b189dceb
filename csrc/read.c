/*
 * read.c - the master-file reader: XRF entries and record versions, read
 * through the handle's I/O mode (pread, mmap, O_DIRECT), and the refresh
 * that lets a handle see what other handles and processes committed.
 *
 * Every offset and length taken from a file is checked against the file
 * size and the format's limits before use (record.c decodes, this file
 * checks against the files); a violation is PYDB_ECORRUPT with the file,
 * the byte offset and the reason (docs/isis-formats.md §2-3).
 *
 * Concurrency: readers take no lock (except in PYDB_LOCK_MUTEX mode).
 * They read the XRF inside the handle's sequence lock (struct pydb_db),
 * so a block a commit is rewriting is read again; record versions are
 * never written in place, so a pointer read from the XRF names a whole
 * record.
 *
 * Depends on: record.c (decoding), vfs.c (pydb__file_read), util.h,
 * error.c.  Never calls the log, transactions or the handle's open/close:
 * handle.c and txn.c sit above it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SCAN_BLOCKS 64

/* -------------------------------------------------------- sequence lock */

uint64_t pydb__seq_begin(const pydb_db *db)
{
    uint64_t s;
    while ((s = __atomic_load_n(&db->seq, __ATOMIC_ACQUIRE)) & 1)
        sched_yield();  /* a commit is copying XRF blocks: microseconds */
    PYDB_ASSERT((s & 1) == 0);
    return s;
}

/* ------------------------------------------------------------ XRF values */

/* Decode a stored XRF value and check the offset it names against the
 * files, docs/isis-formats.md §3.2.  `where` is its offset in the XRF,
 * for the message. */
static int xrf_decode(pydb_xrf_entry *e, const pydb_db *db, int32_t raw,
                      int32_t mfn, int64_t where, pydb_error *err)
{
    pydb__xrf_unpack(e, raw, db->mstxl);
    PYDB_ASSERT(e->raw == raw);
    if (e->state == PYDB_XRF_UNUSED || e->state == PYDB_XRF_PDELETED) {
        PYDB_ASSERT(e->offset == -1 && e->flags == 0);
        return PYDB_OK;
    }
    PYDB_ASSERT((e->state == PYDB_XRF_LDELETED) == (raw < 0));
    if (e->offset < PYDB_CTL_SIZE)
        return PYDB_CORRUPT(err, db->xrf.path, where,
                            "XRF entry of MFN %d (value %d) points at "
                            "offset %lld, inside the control record",
                            (int)mfn, (int)raw, (long long)e->offset);
    if (e->offset >= pydb__fsize(&db->mst))
        return PYDB_CORRUPT(err, db->xrf.path, where,
                            "XRF entry of MFN %d (value %d) points at "
                            "offset %lld, past the end of %s (%lld bytes)",
                            (int)mfn, (int)raw, (long long)e->offset,
                            db->mst.path, (long long)pydb__fsize(&db->mst));
    /* what a reader may follow: a record start inside the master file */
    PYDB_ASSERT((e->offset & ((1 << db->mstxl) - 1)) == 0);
    return PYDB_OK;
}

/* XRF block b (0-based) must start with XRFPOS b + 1 or its negation. */
static int check_xrfpos(const pydb_db *db, const uint8_t *blk, int64_t b,
                        pydb_error *err)
{
    int32_t pos = (int32_t)pydb__u32(blk);
    if (pos == b + 1 || pos == -(b + 1)) return PYDB_OK;
    return PYDB_CORRUPT(err, db->xrf.path, b * PYDB_BLOCK,
                        "XRF block %lld holds XRFPOS %d (expected %lld or "
                        "its negation)", (long long)(b + 1), (int)pos,
                        (long long)(b + 1));
}

/* Read through the I/O mode, or only from the page cache if `nowait`. */
static int file_read(const pydb_file *f, int io, void *buf, size_t n,
                     int64_t off, const char *what, pydb_error *err,
                     int nowait)
{
    if (nowait) return pydb__file_read_nowait(f, io, buf, n, off, what, err);
    return pydb__file_read(f, io, buf, n, off, what, err);
}

static int xrf_get(pydb_xrf_entry *out, pydb_db *db, int32_t mfn,
                   pydb_error *err, int nowait)
{
    uint8_t buf[PYDB_BLOCK];
    int64_t b, slot, start, where;
    uint64_t seq;
    int rc;

    if (mfn >= 1 && mfn >= pydb__next_mfn(db)) {
        /* Committed since we looked (another handle or process)?  That
         * re-reads the control record: not for the no-wait path. */
        if (nowait) return PYDB_EWOULDBLOCK;
        pydb__refresh(db);
    }
    if (mfn < 1 || mfn >= pydb__next_mfn(db))
        return PYDB_ERROR(err, PYDB_ENOTFOUND, db->mst.path, -1,
                          "MFN %d is outside 1..%d", (int)mfn,
                          (int)(pydb__next_mfn(db) - 1));
    b = (mfn - 1) / PYDB_XRF_PER_BLOCK;
    slot = (mfn - 1) % PYDB_XRF_PER_BLOCK;
    start = b * PYDB_BLOCK;
    where = start + 4 + slot * 4;
    do {
        if (nowait && (__atomic_load_n(&db->seq, __ATOMIC_ACQUIRE) & 1))
            return PYDB_EWOULDBLOCK;
        seq = pydb__seq_begin(db);
        rc = file_read(&db->xrf, db->io, buf, (size_t)(where + 4 - start),
                       start, "XRF block", err, nowait);
    } while (pydb__seq_retry(db, seq));
    if (rc) return rc;
    rc = check_xrfpos(db, buf, b, err);
    if (rc) return rc;
    return xrf_decode(out, db, (int32_t)pydb__u32(buf + (where - start)), mfn,
                      where, err);
}

int pydb_xrf_get(pydb_xrf_entry *out, pydb_db *db, int32_t mfn,
                 pydb_error *err)
{
    return xrf_get(out, db, mfn, err, 0);
}

/* ------------------------------------------------------------- records */

/* Read and validate the version of `mfn` stored at `off`. */
static int read_version(pydb_record **rec, pydb_db *db, int32_t mfn,
                        int64_t off, pydb_error *err, int nowait)
{
    const pydb_geom *g = &pydb__geom[db->layout];
    const char *path = db->mst.path;
    int64_t mst_size = pydb__fsize(&db->mst);
    int64_t avail = mst_size - off;
    size_t first, mfrl;
    pydb_leader l;
    uint8_t *raw;
    int rc;

    if (off < PYDB_CTL_SIZE || avail < g->leader)
        return PYDB_CORRUPT(err, path, off,
                            "record of MFN %d: a %d-byte leader at offset "
                            "%lld does not fit in the file (%lld bytes)",
                            (int)mfn, g->leader, (long long)off,
                            (long long)mst_size);
    first = 1024;
    if (db->io == PYDB_IO_DIRECT)
        first = PYDB_DIRECT_ALIGN - (size_t)(off % PYDB_DIRECT_ALIGN);
    if ((int64_t)first > avail) first = (size_t)avail;
    if (first < (size_t)g->leader) first = (size_t)g->leader;
    rc = pydb__record_reserve(rec, first, 0, err);
    if (rc) return rc;
    raw = pydb__record_raw(*rec);
    rc = file_read(&db->mst, db->io, raw, first, off, "record", err, nowait);
    if (rc) return rc;

    pydb__leader_decode(&l, g, raw);
    rc = pydb__leader_check(&l, g, mfn, off, mst_size, path, err);
    if (rc) return rc;
    mfrl = (size_t)l.mfrl;
    rc = pydb__record_reserve(rec, mfrl, (size_t)l.nvf, err);
    if (rc) return rc;
    raw = pydb__record_raw(*rec);
    if (mfrl > first) {
        rc = file_read(&db->mst, db->io, raw + first, mfrl - first,
                       off + (int64_t)first, "record", err, nowait);
        if (rc) return rc;
    }
    return pydb__record_decode(*rec, g, &l, off, path, err);
}

/* Whether the XRF entry points at a stored version (active, or logically
 * deleted and still readable). */
static int has_version(const pydb_xrf_entry *e)
{
    return e->state == PYDB_XRF_ACTIVE || e->state == PYDB_XRF_LDELETED;
}

static int read_current(pydb_record **rec, pydb_db *db, int32_t mfn,
                        pydb_error *err, int nowait)
{
    pydb_xrf_entry e;
    int rc;

    if (db->lock == PYDB_LOCK_MUTEX) {
        if (!nowait) pthread_mutex_lock(&db->mutex);
        else if (pthread_mutex_trylock(&db->mutex) != 0)
            return PYDB_EWOULDBLOCK;
    }
    rc = xrf_get(&e, db, mfn, err, nowait);
    if (rc == PYDB_OK && has_version(&e))
        rc = read_version(rec, db, mfn, e.offset, err, nowait);
    if (rc == PYDB_ECORRUPT) {
        /* Another handle or process may have committed since our sizes
         * were taken: what looks like a pointer past the end may be a new
         * version.  Re-take the sizes (not on the no-wait path: fstat and
         * a re-read are the blocking path's job) and read once more. */
        if (nowait) {
            rc = PYDB_EWOULDBLOCK;
            goto cleanup;
        }
        if (pydb__refresh_sizes(db)) {
            rc = xrf_get(&e, db, mfn, err, 0);
            if (rc == PYDB_OK && has_version(&e))
                rc = read_version(rec, db, mfn, e.offset, err, 0);
        }
    }
    if (rc) goto cleanup;
    if (e.state == PYDB_XRF_UNUSED || e.state == PYDB_XRF_PDELETED) {
        rc = PYDB_ERROR(err, PYDB_ENOTFOUND, db->mst.path, -1,
                        "MFN %d is %s", (int)mfn,
                        e.state == PYDB_XRF_UNUSED ? "not in use"
                                                   : "physically deleted");
        goto cleanup;
    }
    (*rec)->deleted = e.state == PYDB_XRF_LDELETED;
    (*rec)->flags = e.flags;
cleanup:
    if (db->lock == PYDB_LOCK_MUTEX) pthread_mutex_unlock(&db->mutex);
    return rc;
}

int pydb_read(pydb_record **rec, pydb_db *db, int32_t mfn, pydb_error *err)
{
    return read_current(rec, db, mfn, err, 0);
}

int pydb_read_nowait(pydb_record **rec, pydb_db *db, int32_t mfn,
                     pydb_error *err)
{
    return read_current(rec, db, mfn, err, 1);
}

int pydb_read_at(pydb_record **rec, pydb_db *db, int32_t mfn, int64_t offset,
                 pydb_error *err)
{
    int rc;
    if (db->lock == PYDB_LOCK_MUTEX) pthread_mutex_lock(&db->mutex);
    rc = read_version(rec, db, mfn, offset, err, 0);
    if (rc == PYDB_OK) {
        (*rec)->deleted = (*rec)->status == 1;
        (*rec)->flags = 0;
    }
    if (db->lock == PYDB_LOCK_MUTEX) pthread_mutex_unlock(&db->mutex);
    return rc;
}

/* ------------------------------------------------------------ XRF scans */

int pydb__xrf_scan(pydb_db *db, int32_t from, pydb__xrf_visit fn, void *ctx,
                   int32_t *stopped_at, int64_t max_blocks, pydb_error *err)
{
    uint8_t *buf = NULL;
    int32_t max = pydb__next_mfn(db) - 1, mfn = from < 1 ? 1 : from;
    int rc = PYDB_OK;
    uint64_t seq;

    *stopped_at = max + 1;
    buf = malloc(SCAN_BLOCKS * PYDB_BLOCK);
    if (!buf)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for XRF scan");
    while (mfn <= max) {
        int64_t b0 = (mfn - 1) / PYDB_XRF_PER_BLOCK;
        int64_t blast = (max - 1) / PYDB_XRF_PER_BLOCK;
        int64_t nb = blast - b0 + 1, b;
        if (nb > max_blocks) nb = max_blocks;
        do {
            seq = pydb__seq_begin(db);
            rc = pydb__file_read(&db->xrf, db->io, buf,
                                 (size_t)nb * PYDB_BLOCK, b0 * PYDB_BLOCK,
                                 "XRF block", err);
        } while (pydb__seq_retry(db, seq));
        if (rc) goto cleanup;
        for (b = b0; b < b0 + nb; b++) {
            const uint8_t *blk = buf + (b - b0) * PYDB_BLOCK;
            rc = check_xrfpos(db, blk, b, err);
            if (rc) goto cleanup;
            for (; mfn <= max && (mfn - 1) / PYDB_XRF_PER_BLOCK == b; mfn++) {
                int64_t slot = (mfn - 1) % PYDB_XRF_PER_BLOCK;
                pydb_xrf_entry e;
                rc = xrf_decode(&e, db,
                                (int32_t)pydb__u32(blk + 4 + slot * 4), mfn,
                                b * PYDB_BLOCK + 4 + slot * 4, err);
                if (rc) goto cleanup;
                if (fn(ctx, mfn, &e)) {
                    *stopped_at = mfn + 1;
                    goto cleanup;
                }
            }
        }
    }
cleanup:
    free(buf);
    return rc;
}

static int count_visit(void *ctx, int32_t mfn, const pydb_xrf_entry *e)
{
    pydb_counts *c = ctx;
    (void)mfn;
    switch (e->state) {
    case PYDB_XRF_ACTIVE: c->active++; break;
    case PYDB_XRF_LDELETED: c->ldeleted++; break;
    case PYDB_XRF_PDELETED: c->pdeleted++; break;
    default: c->unused++; break;
    }
    if (e->flags & PYDB_FLAG_NEW) c->flag_new++;
    if (e->flags & PYDB_FLAG_PENDING) c->flag_pending++;
    return 0;
}

int pydb_count(pydb_counts *out, pydb_db *db, pydb_error *err)
{
    int32_t stop;
    memset(out, 0, sizeof *out);
    pydb__refresh(db);
    return pydb__xrf_scan(db, 1, count_visit, out, &stop, SCAN_BLOCKS, err);
}

struct list_ctx {
    int32_t *mfns;
    size_t cap, n;
    int include_deleted;
};

static int list_visit(void *ctx, int32_t mfn, const pydb_xrf_entry *e)
{
    struct list_ctx *c = ctx;
    if (e->state == PYDB_XRF_ACTIVE ||
        (c->include_deleted && e->state == PYDB_XRF_LDELETED))
        c->mfns[c->n++] = mfn;
    return c->n == c->cap;
}

int pydb_list_mfns(int32_t *mfns, size_t cap, size_t *n, int32_t *next,
                   pydb_db *db, int32_t from, int include_deleted,
                   pydb_error *err)
{
    struct list_ctx c = {mfns, cap, 0, include_deleted};
    int rc;
    *n = 0;
    if (from <= 1) pydb__refresh(db);
    *next = pydb__next_mfn(db);
    if (cap == 0) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "cap is 0");
    /* Read no more XRF blocks at a time than `cap` entries can fill. */
    int64_t blocks = (int64_t)(cap / PYDB_XRF_PER_BLOCK) + 2;
    rc = pydb__xrf_scan(db, from, list_visit, &c, next,
                  blocks < SCAN_BLOCKS ? blocks : SCAN_BLOCKS, err);
    *n = c.n;
    return rc;
}

/* -------------------------------------------------------------- refresh */

/* Read the control record of the file into *c: 0, or -1 if it does not
 * read back the same twice (a concurrent write) or CTLMFN is not 0. */
static int peek_control(pydb_db *db, pydb_ctl *c)
{
    uint8_t a[20], b[20];
    if (pydb__file_read(&db->mst, PYDB_IO_PREAD, a, sizeof a, 0,
                        "control record", NULL) != PYDB_OK ||
        pydb__file_read(&db->mst, PYDB_IO_PREAD, b, sizeof b, 0,
                        "control record", NULL) != PYDB_OK ||
        memcmp(a, b, sizeof a) != 0 || pydb__u32(a) != 0)
        return -1;
    pydb__ctl_decode(c, a);
    return 0;
}

int pydb__refresh_sizes(pydb_db *db)
{
    struct stat ms, xs;
    int grew = 0;
    if (fstat(db->mst.fd, &ms) != 0 || fstat(db->xrf.fd, &xs) != 0) return 0;
    if ((int64_t)xs.st_size > pydb__fsize(&db->xrf)) {
        pydb__fsize_raise(&db->xrf, (int64_t)xs.st_size);
        grew = 1;
    }
    if ((int64_t)ms.st_size > pydb__fsize(&db->mst)) {
        pydb__fsize_raise(&db->mst, (int64_t)ms.st_size);
        grew = 1;
    }
    return grew;
}

int pydb_refresh(pydb_db *db, pydb_error *err)
{
    if (!db) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "no database");
    pydb__refresh(db);
    return PYDB_OK;
}

void pydb__refresh(pydb_db *db)
{
    pydb_ctl v;
    int32_t cur;
    uint8_t ent[4];

    /* Sizes first: an update of existing records grows the files
     * without changing NXTMFN.  What they are now (never lower than what
     * fstat said) bounds what the control record may announce. */
    pydb__refresh_sizes(db);
    cur = pydb__next_mfn(db);
    if (peek_control(db, &v) != 0 || v.next_mfn <= cur || !pydb__ctl_sane(&v) ||
        pydb__ctl_end(v.next_block, v.next_pos) > pydb__fsize(&db->mst) ||
        pydb__xrf_blocks(v.next_mfn) * PYDB_BLOCK > pydb__fsize(&db->xrf))
        return;
    /* The control record is written last: the XRF entry of the highest
     * MFN it announces must be there already, else it is torn. */
    {
        int64_t m = v.next_mfn - 1;
        int64_t at = ((m - 1) / PYDB_XRF_PER_BLOCK) * PYDB_BLOCK + 4 +
                     ((m - 1) % PYDB_XRF_PER_BLOCK) * 4;
        if (pydb__file_read(&db->xrf, PYDB_IO_PREAD, ent, 4, at, "XRF entry",
                            NULL) != PYDB_OK || pydb__u32(ent) == 0)
            return;
    }
    /* Publish: positions first, NXTMFN last (readers key on it). */
    __atomic_store_n(&db->next_block, v.next_block, __ATOMIC_RELAXED);
    __atomic_store_n(&db->next_pos, v.next_pos, __ATOMIC_RELAXED);
    __atomic_store_n(&db->reccnt, v.reccnt, __ATOMIC_RELAXED);
    while (cur < v.next_mfn &&
           !__atomic_compare_exchange_n(&db->next_mfn, &cur, v.next_mfn, 1,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}
