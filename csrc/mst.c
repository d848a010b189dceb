/*
 * mst.c - opening a database and reading records through the XRF.
 *
 * Formats: ../shared/docs/isis-formats.md §2 (master file) and §3
 * (cross-reference file).  Every offset and length taken from a file is
 * checked against the file size and the format's limits before use; a
 * violation is PYDB_ECORRUPT with the file, the byte offset and the reason.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
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

/* Leader geometry per layout, formats §2.2 (table). */
const pydb_geom pydb__geom[4] = {
    /* leader entry ffi mfrl mfbwb mfbwp base nvf status dpos dlen */
    {18, 6, 0, 4, 6, 10, 12, 14, 16, 2, 4},   /* ISIS packed  */
    {20, 6, 0, 4, 8, 12, 14, 16, 18, 2, 4},   /* ISIS aligned */
    {22, 10, 1, 4, 8, 12, 14, 18, 20, 2, 6},  /* FFI packed   */
    {24, 12, 1, 4, 8, 12, 16, 20, 22, 4, 8},  /* FFI aligned  */
};

/* Known extensions of database files, formats §1 (stripped from a path). */
static const char *const known_ext[] = {
    "mst", "xrf", "cnt", "n01", "n02", "l01", "l02", "ifp", "ly1", "ly2",
    "iyp", "iy0", "fdt", "fst", "stw", "pft", "fmt", "any", NULL};

/* ---------------------------------------------------------------- paths */

int pydb__find_file(char *out, size_t outsz, const char *base,
                    const char *ext)
{
    char want[1024], dir[1024];
    const char *slash, *name;
    struct stat st;
    DIR *d;
    struct dirent *de;
    char upper[8];
    size_t i;

    snprintf(out, outsz, "%s.%s", base, ext);
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) return 0;
    for (i = 0; ext[i] && i < sizeof upper - 1; i++)
        upper[i] = (char)toupper((unsigned char)ext[i]);
    upper[i] = 0;
    snprintf(out, outsz, "%s.%s", base, upper);
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) return 0;

    slash = strrchr(base, '/');
    if (slash) {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - base + 1), base);
        name = slash + 1;
    } else {
        snprintf(dir, sizeof dir, "./");
        name = base;
    }
    snprintf(want, sizeof want, "%s.%s", name, ext);
    d = opendir(dir);
    if (!d) return -ENOENT;
    while ((de = readdir(d)) != NULL) {
        if (strcasecmp(de->d_name, want) == 0) {
            snprintf(out, outsz, "%s%s", slash ? dir : "", de->d_name);
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
                closedir(d);
                return 0;
            }
        }
    }
    closedir(d);
    snprintf(out, outsz, "%s.%s", base, ext);
    return -ENOENT;
}

void pydb__strip_ext(char *base, size_t sz, const char *path)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    snprintf(base, sz, "%s", path);
    if (!dot || (slash && dot < slash)) return;
    for (int i = 0; known_ext[i]; i++) {
        if (strcasecmp(dot + 1, known_ext[i]) == 0) {
            base[dot - path] = 0;
            return;
        }
    }
}

/* ---------------------------------------------------------------- files */

static void file_init(pydb_file *f)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->dfd = -1;
}

static void file_close(pydb_file *f)
{
    if (f->map) munmap((void *)f->map, f->map_len);
    if (f->fd >= 0) pydb__vfs->close(f->fd);
    if (f->dfd >= 0) pydb__vfs->close(f->dfd);
    file_init(f);
}

static int file_open(pydb_file *f, const char *path, int io, int writable,
                     pydb_error *err)
{
    struct stat st;

    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = pydb__vfs->open(path, writable ? O_RDWR : O_RDONLY, 0);
    if (f->fd < 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot open: %s",
                            strerror(errno));
    if (fstat(f->fd, &st) != 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot stat: %s",
                            strerror(errno));
    f->size = (int64_t)st.st_size;
    if (io == PYDB_IO_MMAP) {
        /* Map more than the file holds, so that records appended later
         * (by this handle or another process) are read through the same
         * mapping; pages past the end of the file are never touched. */
        size_t len = (size_t)(f->size + PYDB_MAP_HEADROOM);
        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, f->fd, 0);
        if (m == MAP_FAILED)
            return PYDB_OSERROR(err, errno, path, -1, "cannot mmap: %s",
                                strerror(errno));
        f->map = m;
        f->map_len = len;
    }
    if (io == PYDB_IO_DIRECT) {
        f->dfd = pydb__vfs->open(path, O_RDONLY | O_DIRECT, 0);
        if (f->dfd < 0) {
            int e = errno;
            if (e == EINVAL)
                return pydb__error_set(err, PYDB_EUNSUPPORTED, e, path, -1,
                                       __FILE__, __LINE__,
                                       "the file system refuses O_DIRECT "
                                       "(use io=\"pread\" or \"mmap\")");
            return PYDB_OSERROR(err, e, path, -1, "cannot open with "
                                "O_DIRECT: %s", strerror(e));
        }
    }
    return PYDB_OK;
}

/* ------------------------------------------------------------ XRF values */

int32_t pydb__xrf_encode(int64_t offset, int flags, int mstxl)
{
    int64_t block = offset / PYDB_BLOCK + 1;
    int64_t low = offset % PYDB_BLOCK;
    if (flags & PYDB_FLAG_PENDING) low |= 0x200;
    if (flags & PYDB_FLAG_NEW) low |= 0x400;
    return (int32_t)(block * (2048 >> mstxl) + (low >> mstxl));
}

/* Decode a stored XRF value and check the offset it names against the
 * files, formats §3.2.  `where` is its offset in the XRF, for the message. */
static int xrf_decode(pydb_xrf_entry *e, const pydb_db *db, int32_t raw,
                      int32_t mfn, int64_t where, pydb_error *err)
{
    pydb__xrf_unpack(e, raw, db->mstxl);
    if (e->state == PYDB_XRF_UNUSED || e->state == PYDB_XRF_PDELETED)
        return PYDB_OK;
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

int pydb__record_reserve(pydb_record **rec, size_t raw, size_t nf,
                         pydb_error *err)
{
    size_t need = pydb__round8(sizeof(pydb_record)) + pydb__round8(raw) +
                  nf * sizeof(pydb_field);
    pydb_record *r = *rec;
    if (r && r->capacity >= need) return PYDB_OK;
    r = realloc(r, need);
    if (!r)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                          "no memory for a %zu-byte record", need);
    r->capacity = need;
    *rec = r;
    return PYDB_OK;
}

void pydb_record_free(pydb_record *rec) { free(rec); }

/* Read and validate the version of `mfn` stored at `off`. */
static int read_version(pydb_record **rec, pydb_db *db, int32_t mfn,
                        int64_t off, pydb_error *err, int nowait)
{
    const pydb_geom *g = &pydb__geom[db->layout];
    const char *path = db->mst.path;
    int64_t mst_size = pydb__fsize(&db->mst);
    int64_t avail = mst_size - off;
    size_t first, mfrl;
    int64_t smfrl, base, nvf, i, datalen = 0, mfbwb, mfbwp;
    int32_t got_mfn;
    uint8_t *raw;
    pydb_field *fields;
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

    got_mfn = (int32_t)pydb__u32(raw);
    if (got_mfn != mfn)
        return PYDB_CORRUPT(err, path, off,
                            "the record at offset %lld has MFN %d, but the "
                            "XRF entry of MFN %d points there",
                            (long long)off, (int)got_mfn, (int)mfn);
    if (g->ffi)
        smfrl = (int32_t)pydb__u32(raw + g->off_mfrl);
    else
        smfrl = (int16_t)pydb__u16(raw + g->off_mfrl);
    (*rec)->locked = smfrl < 0;
    if (smfrl < 0) smfrl = -smfrl;
    if (smfrl < g->leader || smfrl > (g->ffi ? PYDB_MAX_FFI_MFRL : 32767))
        return PYDB_CORRUPT(err, path, off + g->off_mfrl,
                            "record of MFN %d has an impossible MFRL %lld",
                            (int)mfn, (long long)smfrl);
    if (smfrl > avail)
        return PYDB_CORRUPT(err, path, off + g->off_mfrl,
                            "record of MFN %d: MFRL %lld at offset %lld "
                            "passes the end of the file (%lld bytes)",
                            (int)mfn, (long long)smfrl, (long long)off,
                            (long long)mst_size);
    mfrl = (size_t)smfrl;
    base = g->ffi ? (int64_t)pydb__u32(raw + g->off_base)
                  : (int64_t)pydb__u16(raw + g->off_base);
    nvf = pydb__u16(raw + g->off_nvf);
    if (base != g->leader + nvf * g->entry || base > (int64_t)mfrl)
        return PYDB_CORRUPT(err, path, off + g->off_base,
                            "record of MFN %d: BASE %lld and NVF %lld do not "
                            "fit (expected BASE %lld within MFRL %zu)",
                            (int)mfn, (long long)base, (long long)nvf,
                            (long long)(g->leader + nvf * g->entry), mfrl);
    mfbwb = (int32_t)pydb__u32(raw + g->off_mfbwb);
    mfbwp = pydb__u16(raw + g->off_mfbwp);
    (*rec)->status = pydb__u16(raw + g->off_status);

    rc = pydb__record_reserve(rec, mfrl, (size_t)nvf, err);
    if (rc) return rc;
    raw = pydb__record_raw(*rec);
    if (mfrl > first) {
        rc = file_read(&db->mst, db->io, raw + first, mfrl - first,
                       off + (int64_t)first, "record", err, nowait);
        if (rc) return rc;
    }
    fields = pydb__record_fields(*rec, mfrl);
    for (i = 0; i < nvf; i++) {
        const uint8_t *d = raw + g->leader + i * g->entry;
        int64_t pos, len;
        pydb__dir_entry(g, d, &pos, &len);
        if (pos + len > (int64_t)mfrl - base)
            return PYDB_CORRUPT(err, path, off + g->leader + i * g->entry,
                                "record of MFN %d: directory entry %lld "
                                "(tag %u, pos %lld, len %lld) passes the end "
                                "of the record (%lld data bytes)",
                                (int)mfn, (long long)(i + 1),
                                (unsigned)pydb__u16(d), (long long)pos,
                                (long long)len,
                                (long long)((int64_t)mfrl - base));
        fields[i].tag = pydb__u16(d);
        fields[i].len = (uint32_t)len;
        fields[i].value = raw + base + pos;
        datalen += len;
    }
    (*rec)->mfn = mfn;
    (*rec)->offset = off;
    (*rec)->back_offset =
        mfbwb > 0 ? (int64_t)(mfbwb - 1) * PYDB_BLOCK + mfbwp : -1;
    (*rec)->mfrl = (uint32_t)mfrl;
    (*rec)->nfields = (uint32_t)nvf;
    (*rec)->fields = fields;
    (*rec)->data_len = (size_t)datalen;
    return PYDB_OK;
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
    if (rc == PYDB_OK &&
        (e.state == PYDB_XRF_ACTIVE || e.state == PYDB_XRF_LDELETED))
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
            if (rc == PYDB_OK &&
                (e.state == PYDB_XRF_ACTIVE || e.state == PYDB_XRF_LDELETED))
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

#define SCAN_BLOCKS 64

/* Call fn on each XRF entry of MFN from..max, reading at most max_blocks (<= SCAN_BLOCKS) blocks
 * at a time.  fn returns nonzero to stop. */
typedef int (*xrf_visit)(void *ctx, int32_t mfn, const pydb_xrf_entry *e);

static int xrf_scan(pydb_db *db, int32_t from, xrf_visit fn, void *ctx,
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
    return xrf_scan(db, 1, count_visit, out, &stop, SCAN_BLOCKS, err);
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
    rc = xrf_scan(db, from, list_visit, &c, next,
                  blocks < SCAN_BLOCKS ? blocks : SCAN_BLOCKS, err);
    *n = c.n;
    return rc;
}

/* ---------------------------------------------------------------- open */

/* Does the record at `off` look like MFN `mfn` in layout `lay`? */
static int layout_fits(const pydb_db *db, int lay, int32_t mfn, int64_t off)
{
    const pydb_geom *g = &pydb__geom[lay];
    uint8_t h[24];
    int64_t mfrl, base, nvf;
    if (pydb__file_read(&db->mst, db->io, h, (size_t)g->leader, off, "leader",
                        NULL) != PYDB_OK)
        return 0;
    if ((int32_t)pydb__u32(h) != mfn) return 0;
    mfrl = g->ffi ? (int32_t)pydb__u32(h + 4) : (int16_t)pydb__u16(h + 4);
    if (mfrl < 0) mfrl = -mfrl;
    base = g->ffi ? pydb__u32(h + g->off_base) : pydb__u16(h + g->off_base);
    nvf = pydb__u16(h + g->off_nvf);
    return base == g->leader + nvf * g->entry && mfrl >= base &&
           off + mfrl <= pydb__fsize(&db->mst);
}

struct detect_ctx {
    pydb_db *db;
    int votes[4];
    int tried;
    int64_t first_offset;   /* of the first record tried, for the message */
    int32_t first_mfn;
};

static int detect_visit(void *ctx, int32_t mfn, const pydb_xrf_entry *e)
{
    struct detect_ctx *c = ctx;
    if (e->state != PYDB_XRF_ACTIVE && e->state != PYDB_XRF_LDELETED)
        return 0;
    if (c->tried == 0) {
        c->first_offset = e->offset;
        c->first_mfn = mfn;
    }
    for (int lay = 0; lay < 4; lay++)
        c->votes[lay] += layout_fits(c->db, lay, mfn, e->offset);
    return ++c->tried >= 16;
}

/* Formats §2.5: try the four leaders on up to 16 records named by the XRF
 * and keep the layout that fits most of them. */
static int detect_layout(pydb_db *db, pydb_error *err)
{
    struct detect_ctx c;
    int32_t stop;
    int best = -1, rc;

    memset(&c, 0, sizeof c);
    c.db = db;
    /* An empty database: the layout given when it was opened, if any. */
    db->layout = (db->flags >> 8) & 7 ? ((db->flags >> 8) & 7) - 1
                                      : PYDB_LAYOUT_ISIS_PACKED;
    rc = xrf_scan(db, 1, detect_visit, &c, &stop, 1, err);
    if (rc) return rc;
    if (c.tried == 0) return PYDB_OK;  /* no record: nothing to detect */
    for (int lay = 0; lay < 4; lay++)
        if (c.votes[lay] > 0 && (best < 0 || c.votes[lay] > c.votes[best]))
            best = lay;
    if (best < 0)
        return PYDB_CORRUPT(err, db->mst.path, c.first_offset,
                            "the record of MFN %d (XRF entry) and the %d "
                            "after it fit none of the four leader layouts "
                            "(isis/ffi, packed/aligned)", (int)c.first_mfn,
                            c.tried - 1);
    db->layout = best;
    return PYDB_OK;
}

static int read_control(pydb_db *db, pydb_error *err)
{
    uint8_t c[32];
    pydb_ctl ctl;
    int64_t end, need;
    int rc;

    if (pydb__fsize(&db->mst) < 32)
        return PYDB_CORRUPT(err, db->mst.path, 0,
                            "the master file has %lld bytes, too short for "
                            "the 32-byte control record",
                            (long long)pydb__fsize(&db->mst));
    rc = pydb__file_read(&db->mst, db->io, c, sizeof c, 0, "control record",
                         err);
    if (rc) return rc;
    pydb__ctl_decode(&ctl, c);
    if (ctl.ctlmfn != 0) {
        /* CTLMFN is 0 in either byte order: this is damage, not a swap. */
        return PYDB_CORRUPT(err, db->mst.path, 0,
                            "control record: CTLMFN is %d, expected 0",
                            (int)ctl.ctlmfn);
    }
    db->next_mfn = ctl.next_mfn;
    db->next_block = ctl.next_block;
    db->next_pos = ctl.next_pos;
    db->mftype = ctl.mftype;
    db->mstxl = ctl.mstxl;
    db->reccnt = ctl.reccnt;
    if (!pydb__ctl_sane(&ctl)) {
        /* A big-endian control record decodes to absurd values here. */
        uint32_t be = ((uint32_t)c[4] << 24) | ((uint32_t)c[5] << 16) |
                      ((uint32_t)c[6] << 8) | c[7];
        if (be >= 1 && be < 0x01000000 && db->next_mfn > 0x01000000)
            return PYDB_ERROR(err, PYDB_EUNSUPPORTED, db->mst.path, 4,
                              "this master file looks big-endian (NXTMFN "
                              "%u when byte-swapped); only little-endian "
                              "files are supported", be);
        return PYDB_CORRUPT(err, db->mst.path, 4,
                            "control record: impossible NXTMFN %d / NXTMFB "
                            "%d / NXTMFP %d", (int)db->next_mfn,
                            (int)db->next_block, (int)db->next_pos);
    }
    if (db->mstxl > 6)
        return PYDB_CORRUPT(err, db->mst.path, 15,
                            "control record: MSTXL %d is not a known shift "
                            "(0..6)", db->mstxl);
    end = pydb__ctl_end(db->next_block, db->next_pos);
    need = pydb__xrf_blocks(db->next_mfn) * PYDB_BLOCK;
    /* The sizes were taken before the control record was read; a commit
     * in between (another process) writes the records first and the
     * control record last, so sizes taken now cover what it announces. */
    if (end > pydb__fsize(&db->mst) || need > pydb__fsize(&db->xrf))
        pydb__refresh_sizes(db);
    if (end > pydb__fsize(&db->mst))
        return PYDB_CORRUPT(err, db->mst.path, 8,
                            "control record: NXTMFB/NXTMFP %d/%d say the "
                            "records end at byte %lld, but the file has %lld "
                            "bytes (truncated?)", (int)db->next_block,
                            (int)db->next_pos, (long long)end,
                            (long long)pydb__fsize(&db->mst));
    if (pydb__fsize(&db->xrf) < need)
        return PYDB_CORRUPT(err, db->xrf.path, pydb__fsize(&db->xrf),
                            "the XRF has %lld bytes, but NXTMFN %d needs "
                            "%lld (truncated?)",
                            (long long)pydb__fsize(&db->xrf),
                            (int)db->next_mfn, (long long)need);
    return PYDB_OK;
}

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

int pydb__refresh(pydb_db *db)
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
        return 0;
    /* The control record is written last: the XRF entry of the highest
     * MFN it announces must be there already, else it is torn. */
    {
        int64_t m = v.next_mfn - 1;
        int64_t at = ((m - 1) / PYDB_XRF_PER_BLOCK) * PYDB_BLOCK + 4 +
                     ((m - 1) % PYDB_XRF_PER_BLOCK) * 4;
        if (pydb__file_read(&db->xrf, PYDB_IO_PREAD, ent, 4, at, "XRF entry",
                            NULL) != PYDB_OK || pydb__u32(ent) == 0)
            return 0;
    }
    /* Publish: positions first, NXTMFN last (readers key on it). */
    __atomic_store_n(&db->next_block, v.next_block, __ATOMIC_RELAXED);
    __atomic_store_n(&db->next_pos, v.next_pos, __ATOMIC_RELAXED);
    __atomic_store_n(&db->reccnt, v.reccnt, __ATOMIC_RELAXED);
    while (cur < v.next_mfn &&
           !__atomic_compare_exchange_n(&db->next_mfn, &cur, v.next_mfn, 1,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
    return 0;
}

int pydb_open(pydb_db **out, const char *path, const pydb_options *opt,
              pydb_error *err)
{
    char base[1024], mst[1400], xrf[1400];
    pydb_db *db = NULL;
    int io = opt ? opt->io : PYDB_IO_PREAD;
    int lock = opt ? opt->lock : PYDB_LOCK_NONE;
    int rc;

    *out = NULL;
    if (!path || !*path || strlen(path) >= sizeof base)
        return PYDB_ERROR(err, PYDB_EINVAL, path ? path : "", -1,
                          "empty or too long database path");
    if (io < 0 || io > 2 || lock < 0 || lock > 1)
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1, "bad io or lock mode");
    pydb__strip_ext(base, sizeof base, path);
    if (pydb__find_file(mst, sizeof mst, base, "mst") != 0)
        return PYDB_OSERROR(err, ENOENT, mst, -1,
                            "no master file (.mst) for database %s", base);
    if (pydb__find_file(xrf, sizeof xrf, base, "xrf") != 0)
        return PYDB_OSERROR(err, ENOENT, xrf, -1,
                            "no cross-reference file (.xrf) for database %s",
                            base);
    db = calloc(1, sizeof *db);
    if (!db)
        return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory for handle");
    file_init(&db->mst);
    file_init(&db->xrf);
    db->io = io;
    db->lock = lock;
    db->flags = opt ? opt->flags : 0;
    db->wal_fd = -1;
    pthread_mutex_init(&db->mutex, NULL);
    pthread_mutex_init(&db->wmutex, NULL);
    pthread_cond_init(&db->wcond, NULL);
    if (db->flags & PYDB_OPEN_WRITE) {
        /* Recovery first: it may rewrite the files before they are read. */
        rc = file_open(&db->mst, mst, PYDB_IO_PREAD, 1, err);
        if (rc) goto cleanup;
        rc = file_open(&db->xrf, xrf, PYDB_IO_PREAD, 1, err);
        if (rc) goto cleanup;
        rc = pydb__write_open(db, base, err);
        if (rc) goto cleanup;
        /* Reopen with the handle's I/O mode (sizes after recovery). */
        file_close(&db->mst);
        file_close(&db->xrf);
    } else {
        rc = pydb__recover_readonly(base, mst, xrf, err);
        if (rc) goto cleanup;
    }
    rc = file_open(&db->mst, mst, io, db->flags & PYDB_OPEN_WRITE, err);
    if (rc) goto cleanup;
    rc = file_open(&db->xrf, xrf, io, db->flags & PYDB_OPEN_WRITE, err);
    if (rc) goto cleanup;
    rc = read_control(db, err);
    if (rc) goto cleanup;
    rc = detect_layout(db, err);
    /* A commit of another process between taking the sizes and reading
     * the XRF makes new pointers look past the end: sizes again, once. */
    if (rc == PYDB_ECORRUPT && pydb__refresh_sizes(db))
        rc = detect_layout(db, err);
    if (rc) goto cleanup;
    *out = db;
    db = NULL;
cleanup:
    if (db) pydb_close(db);
    return rc;
}

void pydb_close(pydb_db *db)
{
    if (!db) return;
    pydb__write_close(db);
    file_close(&db->mst);
    file_close(&db->xrf);
    pthread_mutex_destroy(&db->mutex);
    pthread_mutex_destroy(&db->wmutex);
    pthread_cond_destroy(&db->wcond);
    free(db);
}

void pydb_info_get(const pydb_db *db, pydb_info *o)
{
    o->next_mfn = pydb__next_mfn(db);
    o->next_block = __atomic_load_n(&db->next_block, __ATOMIC_RELAXED);
    o->next_pos = __atomic_load_n(&db->next_pos, __ATOMIC_RELAXED);
    o->mftype = db->mftype;
    o->mstxl = db->mstxl;
    o->reccnt = __atomic_load_n(&db->reccnt, __ATOMIC_RELAXED);
    o->layout = db->layout;
    o->io = db->io;
    o->lock = db->lock;
    o->mst_size = pydb__fsize(&db->mst);
    o->xrf_size = pydb__fsize(&db->xrf);
    o->mst_path = db->mst.path;
    o->xrf_path = db->xrf.path;
}

int32_t pydb_max_mfn(const pydb_db *db) { return pydb__next_mfn(db) - 1; }

int pydb_drop_cache(pydb_db *db, pydb_error *err)
{
    pydb_file *files[2] = {&db->mst, &db->xrf};
    for (int i = 0; i < 2; i++) {
        pydb_file *f = files[i];
        if (f->map) madvise((void *)f->map, f->map_len, MADV_DONTNEED);
        if (posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
            return PYDB_OSERROR(err, errno, f->path, -1,
                                "posix_fadvise(DONTNEED) failed");
    }
    return PYDB_OK;
}
