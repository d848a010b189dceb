/*
 * handle.c - the database handle: pydb_open() (find the files, run
 * recovery through the log, open them in the chosen I/O mode, read the
 * control record, detect the leader layout), pydb_close(), and the
 * handle's accessors (info, max MFN, dropping the page cache).
 *
 * Opening order matters: a writer (PYDB_OPEN_WRITE) opens the files
 * read-write and lets wal.c replay a complete log before anything is
 * read; a reader asks wal.c to replay only if it could write the files
 * and no writer holds the lock.  Refreshing a handle (seeing commits made
 * elsewhere) is the reader's job (read.c), because a read past the known
 * end needs it.
 *
 * Depends on: wal.c (recovery at open, the log's fd), read.c (the XRF
 * scan that detects the layout, sizes refresh), record.c, path.c, vfs.c,
 * error.c.  Nothing below calls into this file except through pydb_open.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
#include "compact.h"
#include "gc.h"
#include "shm.h"
#include "wal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- files */

static void file_init(pydb_file *f)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->dfd = -1;
}

static void file_close(pydb_file *f, size_t region)
{
    /* after a switch of the file pair map_len is what the new file
     * covers; the mapping still reserves the whole region */
    if (f->map) munmap((void *)f->map, region ? region : f->map_len);
    pydb__resident_free(&f->res);
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
        void *m;
        pydb__map_guard();   /* copies out of it survive a truncation */
        m = mmap(NULL, len, PROT_READ, MAP_SHARED, f->fd, 0);
        if (m == MAP_FAILED)
            return PYDB_OSERROR(err, errno, path, -1, "cannot mmap: %s",
                                strerror(errno));
        f->map = m;
        f->map_len = len;
        if (pydb__resident_init(&f->res, len) != PYDB_OK)
            return PYDB_ERROR(err, PYDB_ENOMEM, path, -1,
                              "no memory for the residency table of a "
                              "%zu-byte mapping", len);
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

/* ---------------------------------------------------------------- open */

/* Does the record at `off` look like MFN `mfn` in layout `lay`? */
static int layout_fits(const pydb_db *db, int lay, int32_t mfn, int64_t off)
{
    const pydb_geom *g = &pydb__geom[lay];
    uint8_t h[24];
    pydb_leader l;
    if (pydb__file_read(&db->mst, db->io, h, (size_t)g->leader, off, "leader",
                        NULL) != PYDB_OK)
        return 0;
    pydb__leader_decode(&l, g, h);
    if (l.mfn != mfn) return 0;
    return l.base == g->leader + l.nvf * g->entry && l.mfrl >= l.base &&
           off + l.mfrl <= pydb__fsize(&db->mst);
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
    if (e->offset >= pydb__fsize(&c->db->mst))
        return 0;   /* damage the read of that record reports */
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
    pydb_state st;
    int32_t stop;
    int best = -1, rc;

    memset(&c, 0, sizeof c);
    c.db = db;
    /* An empty database: the layout given when it was opened, if any. */
    db->layout = (db->flags >> 8) & 7 ? ((db->flags >> 8) & 7) - 1
                                      : PYDB_LAYOUT_ISIS_PACKED;
    /* The entries as stored (following a version chain needs the
     * layout this detects); those past the file's end are skipped. */
    memset(&st, 0, sizeof st);
    st.next_mfn = db->next_mfn;
    st.mst_end = pydb__fsize(&db->mst);
    rc = pydb__xrf_scan(db, &st, 1, detect_visit, &c, &stop, 1, err);
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
    db->view_end = pydb__ctl_end(ctl.next_block, ctl.next_pos);
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

/* Open the .mst/.xrf pair in the handle's I/O mode, as one pair: a
 * compaction renames new files over both (docs/compaction.md), so the
 * two opened must be the files the names hold now, with no swap marker,
 * and the header's file generation the same before and after: the
 * handle reads generation fseq / 2. */
static int open_pair(pydb_db *db, const char *mst, const char *xrf, int io,
                     pydb_error *err)
{
    int writable = (db->flags & PYDB_OPEN_WRITE) != 0, rc;

    if (db->shm && pydb__shm_valid(db->shm))
        db->gen_word = pydb__shm_gen_word(db->shm);
    for (int tries = 0;; tries++) {
        uint64_t g1 = pydb__header_gen(db);
        rc = file_open(&db->mst, mst, io, writable, err);
        if (rc == PYDB_OK) rc = file_open(&db->xrf, xrf, io, writable, err);
        if (rc == PYDB_OK) {
            int pair = pydb__same_file(db->mst.fd, mst) &&
                       pydb__same_file(db->xrf.fd, xrf) &&
                       !pydb__swap_pending(mst) &&
                       pydb__header_gen(db) == g1;
            /* a marker that stays (its writer died, and this handle
             * could not finish the swap): take the pair as it is */
            if (pair || tries >= 3000) {
                db->fseq = g1 * 2;
                db->mst_region = db->mst.map ? db->mst.map_len : 0;
                db->xrf_region = db->xrf.map ? db->xrf.map_len : 0;
                return PYDB_OK;
            }
        }
        file_close(&db->mst, 0);
        file_close(&db->xrf, 0);
        if (rc) return rc;
        usleep(1000);   /* a swap renames the files: milliseconds */
    }
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
    if (io < 0 || io > 2 || lock < 0 || lock > 1)
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1, "bad io or lock mode");
    rc = pydb__db_paths(base, sizeof base, mst, sizeof mst, xrf, sizeof xrf,
                        path, err);
    if (rc) return rc;
    db = calloc(1, sizeof *db);
    if (!db)
        return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory for handle");
    file_init(&db->mst);
    file_init(&db->xrf);
    db->io = io;
    db->lock = lock;
    db->flags = opt ? opt->flags : 0;
    db->wal_fd = -1;
    db->index_gen_seen = UINT64_MAX;
    db->fence_fd = -1;
    pthread_mutex_init(&db->mutex, NULL);
    pthread_mutex_init(&db->vmutex, NULL);
    pthread_mutex_init(&db->smutex, NULL);
    for (int i = 0; i < PYDB_RETIRED_GENS * 4; i++) db->retired[i] = -1;
    db->retired_at = 0;
    pydb__writer_locks_init(db);
    /* The commit header (NULL: files mode; docs/architecture.md,
     * "Committed state"), first: recovery may finish a compaction's swap
     * and publish the new files' state in it. */
    pydb__shm_path(db->shm_path, sizeof db->shm_path, base, mst);
    rc = pydb__shm_open(&db->shm, db->shm_path, mst,
                        db->flags & PYDB_OPEN_WRITE, err);
    if (rc) goto cleanup;
    if (db->flags & PYDB_OPEN_WRITE) {
        /* Recovery first: it may rewrite the files before they are read. */
        rc = file_open(&db->mst, mst, PYDB_IO_PREAD, 1, err);
        if (rc) goto cleanup;
        rc = file_open(&db->xrf, xrf, PYDB_IO_PREAD, 1, err);
        if (rc) goto cleanup;
        rc = pydb__wal_open(db, base, err);
        if (rc) goto cleanup;
        /* Reopen with the handle's I/O mode (sizes after recovery). */
        file_close(&db->mst, 0);
        file_close(&db->xrf, 0);
    } else {
        /* A read-only open must work on a full disk: when the log cannot
         * be applied (a failed write: ENOSPC, EIO), the files alone hold
         * the last applied commit, consistently (an interrupted replay
         * leaves them as an interrupted commit does: read.c follows
         * pointers past the control record's end back), and the handle
         * says why the logged commit is missing. */
        rc = pydb__wal_recover_readonly(base, mst, xrf, db->shm, err);
        if (rc == PYDB_EIO) {
            snprintf(db->log_pending, sizeof db->log_pending,
                     "%.300s: %.280s", err ? err->path : "",
                     err ? err->message : "a write failed");
            if (err) memset(err, 0, sizeof *err);
            rc = PYDB_OK;
        }
        if (rc) goto cleanup;
    }
    rc = open_pair(db, mst, xrf, io, err);
    if (rc) goto cleanup;
    rc = read_control(db, err);
    if (rc) goto cleanup;
    rc = detect_layout(db, err);
    /* A commit of another process between taking the sizes and reading
     * the XRF makes new pointers look past the end: sizes again, once. */
    if (rc == PYDB_ECORRUPT && pydb__refresh_sizes(db))
        rc = detect_layout(db, err);
    if (rc) goto cleanup;
    /* A writer that finds no other writer clears what a killed commit
     * left past the committed end and brings the header in line with
     * the files now (recovery may just have replayed a log), so that
     * readers need not wait for its first transaction; best effort, the
     * transaction does it again.  Then whether the header agrees with the
     * files (another program may have written them): files mode until it
     * does. */
    if ((db->flags & PYDB_OPEN_WRITE) &&
        pydb__wal_lock(db, -1, 0, NULL) == PYDB_OK) {
        pydb__txn_tidy_tail(db);
        pydb__header_sync_files(db, NULL);
        pydb__wal_unlock(db);
    }
    pydb__refresh(db);
    rc = pydb__gc_open(db, err);
    if (rc) goto cleanup;
    *out = db;
    db = NULL;
cleanup:
    if (db) pydb_close(db);
    return rc;
}

void pydb_close_begin(pydb_db *db)
{
    if (!db) return;
    __atomic_store_n(&db->closing, 1, __ATOMIC_RELEASE);
    /* the waiters of this process for another thread's transaction wake
     * at once; a wait for another process's lock naps at most 20 ms
     * (pydb__wal_lock) */
    pthread_mutex_lock(&db->wmutex);
    pthread_cond_broadcast(&db->wcond);
    pthread_mutex_unlock(&db->wmutex);
}

void pydb_close(pydb_db *db)
{
    if (!db) return;
    pydb__gc_close(db);   /* the collector first: it uses the files */
    pydb__wal_close(db);
    pydb__compact_abort(db);   /* a job in progress: its files go */
    pydb__shm_close(db->shm);
    pydb__files_retired_close(db);
    file_close(&db->mst, db->mst_region);
    file_close(&db->xrf, db->xrf_region);
    pthread_mutex_destroy(&db->mutex);
    pthread_mutex_destroy(&db->smutex);
    pthread_mutex_destroy(&db->vmutex);
    pthread_mutex_destroy(&db->wmutex);
    pthread_cond_destroy(&db->wcond);
    pthread_mutex_destroy(&db->gmutex);
    pthread_cond_destroy(&db->gcond);
    pthread_mutex_destroy(&db->lsmutex);
    pydb__txn_img_free(db);
    free(db);
}

void pydb_info_get(pydb_info *o, const pydb_db *db)
{
    pydb_state st;
    pydb__state_peek(&st, db);   /* the latest committed state */
    o->next_mfn = st.next_mfn;
    o->next_block = st.next_block;
    o->next_pos = st.next_pos;
    o->mftype = db->mftype;
    o->mstxl = db->mstxl;
    o->reccnt = st.reccnt;
    o->layout = db->layout;
    o->io = db->io;
    o->lock = db->lock;
    o->mst_size = pydb__fsize(&db->mst);
    o->xrf_size = pydb__fsize(&db->xrf);
    o->mst_path = db->mst.path;
    o->xrf_path = db->xrf.path;
    o->log_pending = db->log_pending;
}

int32_t pydb_max_mfn(const pydb_db *db)
{
    pydb_state st;
    pydb__state_peek(&st, db);
    return st.next_mfn - 1;
}

void pydb__db_unmap_pages(pydb_db *db)
{
    pydb_file *files[2] = {&db->mst, &db->xrf};
    for (int i = 0; i < 2; i++) {
        pydb_file *f = files[i];
        size_t len = __atomic_load_n(&f->map_len, __ATOMIC_RELAXED);
        if (f->map && len) madvise((void *)f->map, len, MADV_DONTNEED);
    }
}

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
