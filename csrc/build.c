/*
 * build.c - the bulk writer: a new database whose records are appended in
 * MFN order, then closed by writing the control record and the XRF.
 *
 * Placement follows docs/isis-formats.md §2.3 and §10 (writer checklist):
 * records start on a 2-byte boundary (2^MSTXL when MSTXL > 0); the leader
 * up to BASE never straddles a 512-byte block; MFRL is even (a multiple of
 * 2^MSTXL) with blank padding; the file is zero-filled to a whole block;
 * XRF blocks carry XRFPOS = block number, negated on the last block.
 * Records get the XRF "new" flag (0x400, not yet inverted) as CISIS loads do.
 *
 * This is not the transactional write path: a crash while building leaves
 * a half-written new database, which pydb_builder_free() removes.
 *
 * Depends on: record.c (encoding, placement, XRF values), path.c (file
 * names), vfs.c (writes), error.c.  No log, no handle: create.c opens the
 * result.
 */
#include "pydb_int.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


struct pydb_builder {
    int fd_mst, fd_xrf;
    int layout, mstxl, finished;
    int64_t pos;           /* next free byte in the .mst                   */
    int32_t *offsets_xrf;  /* encoded XRF value per MFN                    */
    size_t n, cap;
    uint8_t *rec;          /* scratch record                               */
    size_t reccap;
    char mst_path[1100], xrf_path[1100];
};

int pydb_builder_open(pydb_builder **out, const char *path, int layout,
                      int mstxl, pydb_error *err)
{
    pydb_builder *b;
    uint8_t ctl[PYDB_CTL_SIZE];
    int rc = PYDB_OK;

    *out = NULL;
    if (layout < 0 || layout > 3 || mstxl < 0 || mstxl > 6)
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1,
                          "bad layout %d or MSTXL %d", layout, mstxl);
    b = calloc(1, sizeof *b);
    if (!b) return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
    b->fd_mst = b->fd_xrf = -1;
    b->layout = layout;
    b->mstxl = mstxl;
    b->pos = PYDB_CTL_SIZE;
    pydb__path_ext(b->mst_path, sizeof b->mst_path, path, "mst");
    pydb__path_ext(b->xrf_path, sizeof b->xrf_path, path, "xrf");
    b->fd_mst = pydb__vfs->open(b->mst_path, O_RDWR | O_CREAT | O_EXCL, 0644);
    if (b->fd_mst < 0) {
        rc = PYDB_OSERROR(err, errno, b->mst_path, -1, "cannot create: %s",
                          strerror(errno));
        goto cleanup;
    }
    b->fd_xrf = pydb__vfs->open(b->xrf_path, O_RDWR | O_CREAT | O_EXCL, 0644);
    if (b->fd_xrf < 0) {
        rc = PYDB_OSERROR(err, errno, b->xrf_path, -1, "cannot create: %s",
                          strerror(errno));
        goto cleanup;
    }
    memset(ctl, 0, sizeof ctl);   /* placeholder until finish */
    if (pydb__vfs->pwrite(b->fd_mst, ctl, sizeof ctl, 0) != sizeof ctl) {
        rc = PYDB_OSERROR(err, errno, b->mst_path, 0, "write failed: %s",
                          strerror(errno));
        goto cleanup;
    }
    *out = b;
    return PYDB_OK;
cleanup:
    pydb_builder_free(b);
    return rc;
}

/* Room for one more XRF value. */
static int grow_xrf(pydb_builder *b, pydb_error *err)
{
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        int32_t *x = realloc(b->offsets_xrf, nc * sizeof *x);
        if (!x) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
        b->offsets_xrf = x;
        b->cap = nc;
    }
    return PYDB_OK;
}

int pydb_builder_add(pydb_builder *b, const pydb_field *fields,
                     uint32_t nfields, pydb_error *err)
{
    int64_t mfrl, start, gap;
    int32_t mfn = (int32_t)b->n + 1;
    int rc;

    if (b->finished)
        return PYDB_ERROR(err, PYDB_EINVAL, b->mst_path, -1, "finished");
    rc = pydb__record_size(&mfrl, b->layout, b->mstxl, mfn, fields, nfields,
                           b->mst_path, err);
    if (rc) return rc;
    if ((size_t)mfrl > b->reccap) {
        uint8_t *r = realloc(b->rec, (size_t)mfrl);
        if (!r) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
        b->rec = r;
        b->reccap = (size_t)mfrl;
    }
    if (grow_xrf(b, err)) return PYDB_ENOMEM;
    /* Placement: alignment, then the never-split rule (record.c). */
    start = pydb__place(b->layout, b->mstxl, b->pos);
    pydb__record_encode(b->rec, b->layout, mfrl, mfn, fields, nfields, -1, 0);
    gap = start - b->pos;
    if (gap > 0) {
        static const uint8_t zeros[PYDB_BLOCK];
        if (pydb__vfs->pwrite(b->fd_mst, zeros, (size_t)gap, b->pos) != gap)
            return PYDB_OSERROR(err, errno, b->mst_path, b->pos,
                                "write failed: %s", strerror(errno));
    }
    if (pydb__vfs->pwrite(b->fd_mst, b->rec, (size_t)mfrl, start) != mfrl)
        return PYDB_OSERROR(err, errno, b->mst_path, start,
                            "write failed: %s", strerror(errno));
    b->offsets_xrf[b->n++] = pydb__xrf_encode(start, PYDB_FLAG_NEW, b->mstxl);
    b->pos = start + mfrl;
    return PYDB_OK;
}

int pydb_builder_skip(pydb_builder *b, pydb_error *err)
{
    if (b->finished)
        return PYDB_ERROR(err, PYDB_EINVAL, b->mst_path, -1, "finished");
    if (grow_xrf(b, err)) return PYDB_ENOMEM;
    /* offset 0, negated: the value WinISIS leaves for an MFN that is not
     * in the master file (docs/isis-formats.md §2.4, §3.2). */
    b->offsets_xrf[b->n++] = -(2048 >> b->mstxl);
    return PYDB_OK;
}

int pydb_builder_delete_last(pydb_builder *b, pydb_error *err)
{
    const pydb_geom *g = &pydb__geom[b->layout];
    pydb_xrf_entry e;
    int32_t v;
    int64_t off;
    uint8_t status[2];

    if (b->finished || b->n == 0 || b->offsets_xrf[b->n - 1] <= 0)
        return PYDB_ERROR(err, PYDB_EINVAL, b->mst_path, -1,
                          "no record was just added");
    v = b->offsets_xrf[b->n - 1];
    pydb__xrf_unpack(&e, v, b->mstxl);   /* the pointer we encoded */
    off = e.offset;
    pydb__put16(status, 1);
    if (pydb__vfs->pwrite(b->fd_mst, status, 2, off + g->off_status) != 2)
        return PYDB_OSERROR(err, errno, b->mst_path, off + g->off_status,
                            "write failed: %s", strerror(errno));
    b->offsets_xrf[b->n - 1] = -v;
    return PYDB_OK;
}

int pydb__xrf_write_all(int fd, const char *path, const int32_t *raw,
                        int64_t n, pydb_error *err)
{
    uint8_t blk[PYDB_BLOCK];
    int64_t nblocks = pydb__xrf_blocks(n + 1);
    if (nblocks == 0) nblocks = 1;
    for (int64_t bi = 0; bi < nblocks; bi++) {
        memset(blk, 0, sizeof blk);
        pydb__put32(blk, (uint32_t)(bi == nblocks - 1 ? -(bi + 1) : bi + 1));
        for (int s = 0; s < PYDB_XRF_PER_BLOCK; s++) {
            int64_t m = bi * PYDB_XRF_PER_BLOCK + s;
            if (m < n) pydb__put32(blk + 4 + 4 * s, (uint32_t)raw[m]);
        }
        if (pydb__vfs->pwrite(fd, blk, sizeof blk, bi * PYDB_BLOCK) !=
            (ssize_t)sizeof blk)
            return PYDB_OSERROR(err, errno, path, bi * PYDB_BLOCK,
                                "write failed: %s", strerror(errno));
    }
    return PYDB_OK;
}

int pydb_builder_finish(pydb_builder *b, int sync, pydb_error *err)
{
    uint8_t ctl[PYDB_CTL_SIZE];
    int64_t end = b->pos, padded;
    int rc;
    static const uint8_t zeros[PYDB_BLOCK];

    memset(ctl, 0, sizeof ctl);
    pydb__ctl_set_next(ctl, (int32_t)(b->n + 1), end);
    ctl[14] = 0;
    ctl[15] = (uint8_t)b->mstxl;
    padded = (end + PYDB_BLOCK - 1) / PYDB_BLOCK * PYDB_BLOCK;
    if (padded > end &&
        pydb__vfs->pwrite(b->fd_mst, zeros, (size_t)(padded - end), end) !=
            padded - end)
        return PYDB_OSERROR(err, errno, b->mst_path, end, "write failed: %s",
                            strerror(errno));
    if (pydb__vfs->pwrite(b->fd_mst, ctl, sizeof ctl, 0) != sizeof ctl)
        return PYDB_OSERROR(err, errno, b->mst_path, 0, "write failed: %s",
                            strerror(errno));
    rc = pydb__xrf_write_all(b->fd_xrf, b->xrf_path, b->offsets_xrf,
                             (int64_t)b->n, err);
    if (rc) return rc;
    if (sync) {
        if (pydb__vfs->fsync(b->fd_mst) != 0)
            return PYDB_OSERROR(err, errno, b->mst_path, -1,
                                "fsync failed: %s", strerror(errno));
        if (pydb__vfs->fsync(b->fd_xrf) != 0)
            return PYDB_OSERROR(err, errno, b->xrf_path, -1,
                                "fsync failed: %s", strerror(errno));
    }
    b->finished = 1;
    return PYDB_OK;
}

void pydb_builder_free(pydb_builder *b)
{
    if (!b) return;
    if (b->fd_mst >= 0) pydb__vfs->close(b->fd_mst);
    if (b->fd_xrf >= 0) pydb__vfs->close(b->fd_xrf);
    if (!b->finished) {
        if (b->fd_mst >= 0) unlink(b->mst_path);
        if (b->fd_xrf >= 0) unlink(b->xrf_path);
    }
    free(b->offsets_xrf);
    free(b->rec);
    free(b);
}
