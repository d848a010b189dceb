/*
 * read.c - the master-file reader: the committed state a read uses (the
 * commit header's latest state, a snapshot's, or the control record's in
 * files mode), XRF entries and record versions read through the handle's
 * I/O mode (pread, mmap, O_DIRECT), versions of later commits followed
 * back to the state's, snapshots, the refresh that lets a handle see what
 * other handles and processes committed, and the writer's publishing of a
 * state into the header (it needs the handle's view and the control
 * record, which live here).
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
 * record.  Plain reads take the handle's view as a floor of the latest
 * state and copy the header's state only beyond it (read_latest).
 *
 * Depends on: shm.c (the commit header), record.c (decoding), vfs.c
 * (pydb__file_read), util.h, error.c.  Never calls the log, transactions
 * or the handle's open/close: handle.c and txn.c sit above it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
#include "shm.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCAN_BLOCKS 64
#define NEED_STATE 1   /* xrf_get on a floor: the latest state is needed */
#define NEED_SWITCH 2  /* the state is of newer files than the handle's  */

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

/* Decode a stored XRF value and check the offset it names: a record
 * start after the control record (docs/isis-formats.md §3.2).  Whether
 * it lies inside the committed records is the state's question
 * (resolve()).  `where` is its offset in the XRF, for the message. */
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
    if (e->offset < PYDB_CTL_SIZE) {
        char why[80];
        return PYDB_CORRUPT(err, db->xrf.path, where,
                            "XRF entry of MFN %d (value %d) %s", (int)mfn,
                            (int)raw,
                            pydb__xrf_low_reason(why, sizeof why, e->offset));
    }
    /* what a reader may follow: a record start inside the master file */
    PYDB_ASSERT((e->offset & ((1 << db->mstxl) - 1)) == 0);
    return PYDB_OK;
}

/* The master file's size as this handle knows it, taken again (fstat,
 * pydb__refresh_sizes) when `end` (bytes) lies past it: a commit of
 * another process, or a state pinned before a switch of the file pair,
 * may name bytes the handle has not seen yet; only past the size taken
 * again is a pointer damage. */
static int64_t mst_size_to(pydb_db *db, int64_t end)
{
    if (end > pydb__fsize(&db->mst)) pydb__refresh_sizes(db);
    return pydb__fsize(&db->mst);
}

/* Whether the XRF entry points at a stored version (active, or logically
 * deleted and still readable). */
static int has_version(const pydb_xrf_entry *e)
{
    return e->state == PYDB_XRF_ACTIVE || e->state == PYDB_XRF_LDELETED;
}

/* Bring an entry decoded from the XRF to the state st: a pointer at or
 * past st->mst_end names a version a later commit wrote; the version st
 * saw is found along the back pointers, and the entry's state follows
 * its STATUS.  `where`: the entry's offset in the XRF (messages).  With
 * `lenient` (scans, which never read records otherwise), a pointer past
 * the end of the master file or a version whose leader does not decode
 * leaves the entry as stored: the read of that record reports the
 * damage (one damaged entry stopped every listing: exports, stat). */
static int resolve(pydb_xrf_entry *e, pydb_db *db, const pydb_state *st,
                   int32_t mfn, int64_t where, int lenient, pydb_error *err)
{
    int64_t vis;
    int status, rc;

    if (!has_version(e) || e->offset < st->mst_end) return PYDB_OK;
    if (e->offset >= mst_size_to(db, e->offset + 1)) {
        if (lenient) return PYDB_OK;
        return PYDB_CORRUPT(err, db->xrf.path, where,
                            "XRF entry of MFN %d (value %d) points at "
                            "offset %lld, past the end of %s (%lld bytes)",
                            (int)mfn, (int)e->raw, (long long)e->offset,
                            db->mst.path, (long long)pydb__fsize(&db->mst));
    }
    rc = pydb__version_visible(&vis, &status, db, st, mfn, e->offset, err);
    if (rc == PYDB_ECORRUPT && lenient) return PYDB_OK;
    if (rc) return rc;
    if (vis != e->offset) {
        pydb__gc_met(db);   /* a reader walked a version chain */
        e->offset = vis;
        e->state = status == 1 ? PYDB_XRF_LDELETED : PYDB_XRF_ACTIVE;
    }
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

/* ----------------------------------------- the file pair's generation */

/* docs/compaction.md.  A compaction (compact.c) replaces the .mst/.xrf
 * pair by renames and publishes a state of the next file generation.  A
 * handle reads one pair at a time: fseq is twice its generation (odd
 * while files_switch() installs a newer pair).  Every read takes fseq
 * first (files_begin: also one load of the header's generation word, to
 * notice a compaction) and retries when it moved before the read ended
 * (files_moved): a read that overlapped a switch may have read bytes of
 * either pair, and is done again on the new one. */

uint64_t pydb__header_gen(pydb_db *db)
{
    pydb_shm *shm = pydb__db_shm(db);
    pydb_state st;
    uint64_t w;
    if (!shm || !pydb__shm_valid(shm)) return 0;
    w = pydb__shm_file_gen(shm);
    /* The word is a copy of the latest state's file_gen stored after the
     * state: it may lag the state (a writer died between the two), never
     * lead it.  The state decides; a word ahead of it is damage, and
     * syncing the handle to it would leave reads that need the state's
     * generation switching files forever. */
    if (pydb__shm_state(&st, shm) == 0) w = st.file_gen;
    return w;
}

/* A read found the latest state to be of other files than the handle's
 * (fs >> 1) and switched `switches` times already: switch again, or,
 * after so many switches that no run of compactions explains them, give
 * up on a commit header whose state names files the handle never
 * reaches (a generation of 2^63 or more cannot be held, for one). */
static int switch_files(pydb_db *db, const pydb_state *st, uint64_t fs,
                        int switches, pydb_error *err)
{
    if (switches >= 16)
        return PYDB_CORRUPT(err, db->shm_path, -1,
                            "the commit header's latest state (commit "
                            "%llu) is of master-file generation %llu, but "
                            "the files it leads to are of generation %llu",
                            (unsigned long long)st->commit,
                            (unsigned long long)st->file_gen,
                            (unsigned long long)(fs >> 1));
    return pydb__files_sync(db, err);
}

/* A reader with no commit header (it could not open <base>.shm for
 * writing: permissions, read-only media) cannot follow a compaction,
 * which replaces the files by renames and publishes the new pair's
 * generation only there: it would go on reading the old, unlinked files
 * for good (found by a review).  So such a handle looks, at most every
 * FOLLOW_CHECK_MS, for a header again (a writer may have made it since
 * the handle opened: attach_header, and the header's generation leads
 * the reads to the new files) and else whether the path of its master
 * file still names the file it reads; once it names another, every read
 * fails saying so (open the database again).  An open and a stat per
 * look; nothing on the handle's other reads. */
#define FOLLOW_CHECK_MS 100

static void attach_header(pydb_db *db);

static int unfollowed_check(pydb_db *db, pydb_error *err)
{
    struct stat a, b;
    int64_t now;
    if (!__atomic_load_n(&db->unfollowed, __ATOMIC_ACQUIRE)) {
        now = pydb__now_ms();
        if (now - __atomic_load_n(&db->follow_at, __ATOMIC_RELAXED) <
            FOLLOW_CHECK_MS)
            return PYDB_OK;
        __atomic_store_n(&db->follow_at, now, __ATOMIC_RELAXED);
        attach_header(db);
        if (__atomic_load_n(&db->gen_word, __ATOMIC_ACQUIRE))
            return PYDB_OK;   /* followed through the header from now on */
        if (fstat(__atomic_load_n(&db->mst.fd, __ATOMIC_ACQUIRE), &a) != 0 ||
            stat(db->mst.path, &b) != 0 ||
            (a.st_dev == b.st_dev && a.st_ino == b.st_ino))
            return PYDB_OK;   /* the same (or nothing there to follow) */
        __atomic_store_n(&db->unfollowed, 1, __ATOMIC_RELEASE);
    }
    return PYDB_ERROR(err, PYDB_EUNSUPPORTED, db->mst.path, -1,
                      "the master file was replaced (a writer's compaction) "
                      "and this handle cannot follow it: it has no commit "
                      "header (%s could not be opened for writing: "
                      "permissions? read-only media?); open the database "
                      "again", db->shm_path[0] ? db->shm_path : "the .shm");
}

static int files_begin(uint64_t *fs, pydb_db *db, int nowait,
                       pydb_error *err)
{
    if (!(db->flags & PYDB_OPEN_WRITE) &&
        !__atomic_load_n(&db->gen_word, __ATOMIC_ACQUIRE)) {
        int rc = unfollowed_check(db, err);
        if (rc) return rc;
    }
    for (int synced = 0;; synced = 1) {
        uint64_t s = __atomic_load_n(&db->fseq, __ATOMIC_ACQUIRE);
        const uint64_t *w = __atomic_load_n(&db->gen_word, __ATOMIC_RELAXED);
        int rc;
        /* even: no switch in progress (a read that began during one could
         * end before it does, unnoticed); after one sync a generation
         * word that still differs (a writer died between publishing the
         * state and the word) is left to the state checks */
        if (!(s & 1) &&
            (synced || !w || __atomic_load_n(w, __ATOMIC_RELAXED) == s >> 1)) {
            *fs = s;
            return PYDB_OK;
        }
        if (nowait) return PYDB_EWOULDBLOCK;
        rc = pydb__files_sync(db, err);   /* waits for a switch in progress */
        if (rc) return rc;
    }
}

static inline int files_moved(const pydb_db *db, uint64_t fs)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&db->fseq, __ATOMIC_RELAXED) != fs;
}

/* *st made readable through the handle's files of generation `gen`: a
 * header state of an older generation is the commit the last compaction
 * replaced, which reads on in the state that compaction published (the
 * same records, in the new files).  A state of the files mode (commit 0)
 * reads in whatever files the handle has (a snapshot's: see
 * pydb__snapshot_files_kept).  0, or -1 if it cannot be. */
static int state_in(pydb_state *out, pydb_db *db, const pydb_state *st,
                    uint64_t gen)
{
    uint64_t from;
    pydb_state after;
    *out = *st;
    if (st->commit == 0 || st->commit == PYDB__STATE_FLOOR ||
        st->file_gen == gen)
        return 0;
    if (pydb__shm_swap_get(pydb__db_shm(db), &from, &after) == 0 &&
        from == st->commit && after.file_gen == gen) {
        *out = after;
        return 0;
    }
    return -1;
}

/* The error of a read as of *st that state_in() cannot carry to the
 * handle's files of generation `gen`: it names what it compared (the
 * last compaction's record, if any), so that a report says which
 * compaction went past the state. */
static int replaced_error(pydb_db *db, const pydb_state *st, uint64_t gen,
                          pydb_error *err)
{
    char last[160] = "no compaction record";
    uint64_t from;
    pydb_state after;
    if (st->commit == 0)
        return PYDB_ERROR(err, PYDB_EIO, db->mst.path, -1,
                          "the master file this snapshot was taken of "
                          "(generation %llu) was replaced by a compaction "
                          "(generation %llu now): the snapshot was taken "
                          "without a usable commit header (files mode, "
                          "not registered), so nothing kept its records; "
                          "take a new snapshot",
                          (unsigned long long)st->file_gen,
                          (unsigned long long)gen);
    if (pydb__shm_swap_get(pydb__db_shm(db), &from, &after) == 0)
        snprintf(last, sizeof last, "the last compaction replaced commit "
                 "%llu with commit %llu of generation %llu",
                 (unsigned long long)from, (unsigned long long)after.commit,
                 (unsigned long long)after.file_gen);
    return PYDB_ERROR(err, PYDB_EIO, db->mst.path, -1,
                      "the master file of commit %llu (generation %llu) "
                      "was replaced by a compaction (files of generation "
                      "%llu now; %s)",
                      (unsigned long long)st->commit,
                      (unsigned long long)st->file_gen,
                      (unsigned long long)gen, last);
}

int pydb__swap_pending(const char *mst)
{
    char tm[PATH_MAX], mk[PATH_MAX];
    struct stat st;
    /* the marker lies beside the file a swap replaces (a link's target:
     * wal.c, pydb__swap_names) */
    return pydb__link_target(tm, sizeof tm, mst) == 0 &&
           (size_t)snprintf(mk, sizeof mk, "%s%s", tm, PYDB_SWAP_SUFFIX) <
               sizeof mk &&
           stat(mk, &st) == 0;
}

/* Open one database file of the new pair like handle.c's file_open
 * (without the mapping): its fd and size. */
static int pair_open(int *fd, int64_t *size, const char *path, int writable)
{
    struct stat st;
    *fd = pydb__vfs->open(path, writable ? O_RDWR : O_RDONLY, 0);
    if (*fd < 0) return -1;
    if (fstat(*fd, &st) != 0) {
        pydb__vfs->close(*fd);
        *fd = -1;
        return -1;
    }
    *size = (int64_t)st.st_size;
    return 0;
}

/* Install fd (size bytes) as file f of the handle (fseq odd).  The
 * mapping keeps its address: the whole region first becomes anonymous
 * zeros (a read still copying from it gets zeros, never a fault), then
 * the new file is mapped over the pages below its end only (a page past
 * the end of a file would raise SIGBUS); reads past map_len use pread.
 * The old fds go to retired[0..1]: a read that loaded them a moment ago
 * may still be in pread on them (it retries: fseq moved); they are
 * closed PYDB_RETIRED_GENS switches later or at close. */
static void file_install(pydb_file *f, size_t region, int fd, int64_t size,
                         int retired[2])
{
    int old = f->fd, oldd = f->dfd;
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer counts mmap(MAP_FIXED) over a range a late reader
     * still copies from as a write racing with that copy (by design here:
     * the read retries).  In its builds the old mapping stays and every
     * read after a switch uses pread (map_len 0). */
    if (f->map && region) {
        __atomic_store_n(&f->map_len, 0, __ATOMIC_RELEASE);
        region = 0;
    }
#endif
    if (f->map && region) {
        long page = sysconf(_SC_PAGESIZE);
        size_t len = (size_t)((size + page - 1) / page * page);
        if (len > region) len = region;
        __atomic_store_n(&f->map_len, 0, __ATOMIC_RELEASE);
        mmap((void *)f->map, region, PROT_READ,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (len > 0 &&
            mmap((void *)f->map, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd,
                 0) == MAP_FAILED) {
            mmap((void *)f->map, region, PROT_READ,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            len = 0;
        }
        pydb__resident_forget(&f->res);
        __atomic_store_n(&f->map_len, len, __ATOMIC_RELEASE);
    }
    if (oldd >= 0) {
        int nd = pydb__vfs->open(f->path, O_RDONLY | O_DIRECT, 0);
        __atomic_store_n(&f->dfd, nd, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&f->fd, fd, __ATOMIC_RELEASE);
    __atomic_store_n(&f->size, size, __ATOMIC_RELEASE);
    retired[0] = old;
    retired[1] = oldd;
}

/* Close the 4 fds of ring slot k (-1 entries are skipped). */
static void retired_close_slot(pydb_db *db, int k)
{
    for (int i = 4 * k; i < 4 * k + 4; i++) {
        if (db->retired[i] >= 0) pydb__vfs->close(db->retired[i]);
        db->retired[i] = -1;
    }
}

void pydb__files_retired_close(pydb_db *db)
{
    for (int k = 0; k < PYDB_RETIRED_GENS; k++) retired_close_slot(db, k);
}

/* Set the handle's view to st (it may go back: new files). */
static void view_reset(pydb_db *db, const pydb_state *st)
{
    pthread_mutex_lock(&db->vmutex);
    __atomic_add_fetch(&db->vseq, 1, __ATOMIC_ACQ_REL);   /* odd */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&db->next_block, st->next_block, __ATOMIC_RELAXED);
    __atomic_store_n(&db->next_pos, st->next_pos, __ATOMIC_RELAXED);
    __atomic_store_n(&db->reccnt, st->reccnt, __ATOMIC_RELAXED);
    __atomic_store_n(&db->view_end, pydb__ctl_end(st->next_block,
                                                  st->next_pos),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&db->next_mfn, st->next_mfn, __ATOMIC_RELEASE);
    __atomic_add_fetch(&db->vseq, 1, __ATOMIC_RELEASE);   /* even */
    pthread_mutex_unlock(&db->vmutex);
}

static int peek_control(pydb_db *db, pydb_ctl *c);

int pydb__files_sync(pydb_db *db, pydb_error *err)
{
    int writable = (db->flags & PYDB_OPEN_WRITE) != 0;
    int rc = PYDB_OK;

    pthread_mutex_lock(&db->smutex);
    for (int tries = 0;; tries++) {
        uint64_t g1 = pydb__header_gen(db), g2;
        int mfd = -1, xfd = -1;
        int64_t msize = 0, xsize = 0;
        pydb_state st;
        pydb_ctl c;

        if (g1 == pydb__files_gen(db)) break;
        if (tries >= 2000) {
            rc = PYDB_ERROR(err, PYDB_EIO, db->mst.path, -1,
                            "the master file is being replaced (a "
                            "compaction's swap marker %s%s stays)",
                            db->mst.path, PYDB_SWAP_SUFFIX);
            break;
        }
        if (pair_open(&mfd, &msize, db->mst.path, writable) == 0 &&
            pair_open(&xfd, &xsize, db->xrf.path, writable) == 0 &&
            !pydb__swap_pending(db->mst.path) && pydb__same_file(mfd, db->mst.path) &&
            pydb__same_file(xfd, db->xrf.path) &&
            (g2 = pydb__header_gen(db)) == g1) {
            uint64_t s = __atomic_load_n(&db->fseq, __ATOMIC_RELAXED);
            int64_t ms, xs;
            /* the header's state of the new files first, their sizes
             * after it: they hold at least what the state announces */
            int have = pydb__shm_state(&st, pydb__db_shm(db)) == 0 &&
                       st.file_gen == g1;
            if (pydb__fd_size(mfd, &ms) == 0 && ms > msize) msize = ms;
            if (pydb__fd_size(xfd, &xs) == 0 && xs > xsize) xsize = xs;
            __atomic_store_n(&db->fseq, s | 1, __ATOMIC_RELEASE);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            /* the pair retired PYDB_RETIRED_GENS switches ago: no read
             * can still be using it (it retried long ago) */
            {
                int k = db->retired_at;
                db->retired_at = (k + 1) % PYDB_RETIRED_GENS;
                retired_close_slot(db, k);
                file_install(&db->mst, db->mst_region, mfd, msize,
                             db->retired + 4 * k);
                file_install(&db->xrf, db->xrf_region, xfd, xsize,
                             db->retired + 4 * k + 2);
            }
            /* the view of the new files: the header's state of them, or
             * their control record */
            if (have) {
                view_reset(db, &st);
            } else if (peek_control(db, &c) == 0 && pydb__ctl_sane(&c)) {
                pydb__state_of_ctl(&st, &c);
                view_reset(db, &st);
            }
            __atomic_store_n(&db->fseq, g1 * 2, __ATOMIC_RELEASE);
            break;
        }
        if (mfd >= 0) pydb__vfs->close(mfd);
        if (xfd >= 0) pydb__vfs->close(xfd);
        /* a swap is renaming the files: milliseconds (readers refreshing
         * sizes need the mutex meanwhile) */
        pthread_mutex_unlock(&db->smutex);
        usleep(1000);
        pthread_mutex_lock(&db->smutex);
    }
    pthread_mutex_unlock(&db->smutex);
    return rc;
}

/* ------------------------------------------------------ committed state */

/* pydb__view_set(); `any_fs`: the caller holds the writer lock, so no
 * file switch can begin (fs is not compared). */
static void view_set(pydb_db *db, int any_fs, uint64_t fs, int32_t next_mfn,
                     int32_t next_block, int32_t next_pos, int32_t reccnt)
{
    pthread_mutex_lock(&db->vmutex);
    /* files_sync() makes fseq odd before its view_reset() (under vmutex)
     * and even again after it: values of the files the handle no longer
     * reads are either overwritten by that reset or refused here */
    if ((any_fs || __atomic_load_n(&db->fseq, __ATOMIC_ACQUIRE) == fs) &&
        next_mfn >= db->next_mfn &&
        pydb__ctl_end(next_block, next_pos) >=
            pydb__ctl_end(db->next_block, db->next_pos)) {
        __atomic_add_fetch(&db->vseq, 1, __ATOMIC_ACQ_REL);   /* odd */
        __atomic_thread_fence(__ATOMIC_RELEASE);  /* odd before the fields */
        __atomic_store_n(&db->next_block, next_block, __ATOMIC_RELAXED);
        __atomic_store_n(&db->next_pos, next_pos, __ATOMIC_RELAXED);
        __atomic_store_n(&db->reccnt, reccnt, __ATOMIC_RELAXED);
        __atomic_store_n(&db->view_end, pydb__ctl_end(next_block, next_pos),
                         __ATOMIC_RELEASE);
        __atomic_store_n(&db->next_mfn, next_mfn, __ATOMIC_RELEASE);
        __atomic_add_fetch(&db->vseq, 1, __ATOMIC_RELEASE);   /* even */
    }
    pthread_mutex_unlock(&db->vmutex);
}

void pydb__view_set(pydb_db *db, uint64_t fs, int32_t next_mfn,
                    int32_t next_block, int32_t next_pos, int32_t reccnt)
{
    view_set(db, 0, fs, next_mfn, next_block, next_pos, reccnt);
}

void pydb__view_set_writer(pydb_db *db, int32_t next_mfn, int32_t next_block,
                           int32_t next_pos, int32_t reccnt)
{
    view_set(db, 1, 0, next_mfn, next_block, next_pos, reccnt);
}

/* The handle's own view (files mode): one consistent copy of the fields
 * pydb__view_set() writes. */
static void view_copy(pydb_state *st, const pydb_db *db)
{
    uint64_t s;
    do {
        while ((s = __atomic_load_n(&db->vseq, __ATOMIC_ACQUIRE)) & 1)
            sched_yield();
        st->next_mfn = __atomic_load_n(&db->next_mfn, __ATOMIC_RELAXED);
        st->next_block = __atomic_load_n(&db->next_block, __ATOMIC_RELAXED);
        st->next_pos = __atomic_load_n(&db->next_pos, __ATOMIC_RELAXED);
        st->reccnt = __atomic_load_n(&db->reccnt, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
    } while (__atomic_load_n(&db->vseq, __ATOMIC_RELAXED) != s);
    st->commit = 0;
    st->mst_end = pydb__ctl_end(st->next_block, st->next_pos);
    st->mst_size = pydb__fsize(&db->mst);
    st->xrf_size = pydb__fsize(&db->xrf);
    st->index_gen = 0;
    st->file_gen = pydb__files_gen(db);
}

/* The handle's commit header if reads may trust it, else NULL. */
static pydb_shm *header_of(const pydb_db *db)
{
    pydb_shm *shm = pydb__db_shm(db);
    if (!shm || __atomic_load_n(&db->shm_stale, __ATOMIC_ACQUIRE)) return NULL;
    return shm;
}

int pydb__state_header(pydb_state *st, pydb_db *db)
{
    pydb_shm *shm = header_of(db);
    uint64_t fs;
    if (!shm || pydb__shm_state(st, shm) != 0) return -1;
    /* a state of other files: the caller switches first (files_sync) */
    fs = st->file_gen * 2;
    if (__atomic_load_n(&db->fseq, __ATOMIC_ACQUIRE) != fs) return 0;
    /* What the header announces must be in the files before reads (the
     * mapping too) go that far: fstat, once per growth. */
    if (st->mst_size > pydb__fsize(&db->mst) ||
        st->xrf_size > pydb__fsize(&db->xrf)) {
        pydb__refresh_sizes(db);
        if (st->mst_size > pydb__fsize(&db->mst) ||
            st->xrf_size > pydb__fsize(&db->xrf)) {
            /* a switch to newer (compacted, shorter) files meanwhile:
             * the caller switches too */
            if (__atomic_load_n(&db->fseq, __ATOMIC_ACQUIRE) != fs) return 0;
            /* the files are shorter than the header says: not trusted */
            __atomic_store_n(&db->shm_stale, 1, __ATOMIC_RELEASE);
            return -1;
        }
    }
    if (st->next_mfn > pydb__next_mfn(db) ||
        st->mst_end > __atomic_load_n(&db->view_end, __ATOMIC_ACQUIRE))
        pydb__view_set(db, fs, st->next_mfn, st->next_block, st->next_pos,
                       st->reccnt);
    return 0;
}

/* A floor of the latest committed state: the handle's view, raised only
 * to states that were published (or read from the control record in
 * files mode), loaded without its sequence lock.  Each value is at most
 * the latest state's, so a plain read of an MFN below next_mfn whose XRF
 * pointer lies below mst_end finds the version every later state has too
 * (nothing newer of that MFN exists): no state is needed for it. */
static void state_floor(pydb_state *st, const pydb_db *db)
{
    st->commit = PYDB__STATE_FLOOR;
    st->next_mfn = pydb__next_mfn(db);
    st->mst_end = __atomic_load_n(&db->view_end, __ATOMIC_ACQUIRE);
}

void pydb__state_peek(pydb_state *st, const pydb_db *db)
{
    pydb_shm *shm = header_of(db);
    if (shm && pydb__shm_state(st, shm) == 0) return;
    view_copy(st, db);
}

void pydb__state_now(pydb_state *st, pydb_db *db)
{
    if (pydb__state_header(st, db) == 0) return;
    view_copy(st, db);
}

/* The state for a read of `mfn`: an MFN past the known end re-reads the
 * control record first (another handle or process may have committed it;
 * a header other programs left stale is noticed there).  Not on the
 * no-wait path. */
static int state_for(pydb_state *st, pydb_db *db, int32_t mfn, int nowait)
{
    pydb__state_now(st, db);
    if (mfn >= st->next_mfn) {
        if (nowait) return PYDB_EWOULDBLOCK;
        pydb__refresh(db);
        pydb__state_now(st, db);
    }
    return PYDB_OK;
}

/* ------------------------------------------------------------ versions */

int pydb__leader_read(pydb_leader *l, pydb_db *db, int32_t mfn, int64_t off,
                      int64_t limit, pydb_error *err)
{
    const pydb_geom *g = &pydb__geom[db->layout];
    uint8_t h[32];
    int rc;

    if (limit < 0) (void)mst_size_to(db, off + g->leader);
    if (limit >= 0 && off + g->leader > limit)
        return PYDB_CORRUPT(err, db->mst.path, off,
                            "version of MFN %d at offset %lld lies past the "
                            "end of the master file (%lld bytes)",
                            (int)mfn, (long long)off, (long long)limit);
    rc = pydb__file_read(&db->mst, PYDB_IO_PREAD, h, (size_t)g->leader, off,
                         "leader", err);
    if (rc) return rc;
    pydb__leader_decode(l, g, h);
    if (limit < 0) limit = mst_size_to(db, off + l->mfrl);
    return pydb__leader_check(l, g, mfn, off, limit, db->mst.path, err);
}

int pydb__version_visible(int64_t *vis, int *status, pydb_db *db,
                          const pydb_state *st, int32_t mfn, int64_t off,
                          pydb_error *err)
{
    pydb_leader l;
    int rc;

    for (;;) {
        int64_t back;
        rc = pydb__leader_read(&l, db, mfn, off, -1, err);
        if (rc) return rc;
        *vis = off;
        *status = l.status;
        if (off < st->mst_end) return PYDB_OK;
        back = l.mfbwb > 0 ? (int64_t)(l.mfbwb - 1) * PYDB_BLOCK + l.mfbwp
                           : -1;
        /* A version past the end with no older one: written by a program
         * whose control record ends inside or before its last records
         * (docs/isis-formats.md §2.1); it is the only version there is. */
        if (back < 0) return PYDB_OK;
        if (back >= off)
            return PYDB_CORRUPT(err, db->mst.path, off,
                                "record of MFN %d: back pointer to offset "
                                "%lld does not point before the version at "
                                "%lld", (int)mfn, (long long)back,
                                (long long)off);
        off = back;
    }
}

/* The XRF entry of `mfn` as stored (not resolved), read inside the
 * sequence lock.  `where` gets its offset in the XRF. */
static inline int xrf_raw(pydb_xrf_entry *out, int64_t *where, pydb_db *db,
                   const pydb_state *st, int32_t mfn, pydb_error *err,
                   int nowait)
{
    uint8_t buf[PYDB_BLOCK];
    int64_t b, slot, start;
    uint64_t seq;
    int rc;

    if (mfn < 1 || mfn >= st->next_mfn)
        return PYDB_ERROR(err, PYDB_ENOTFOUND, db->mst.path, -1,
                          "MFN %d is outside 1..%d", (int)mfn,
                          (int)(st->next_mfn - 1));
    b = (mfn - 1) / PYDB_XRF_PER_BLOCK;
    slot = (mfn - 1) % PYDB_XRF_PER_BLOCK;
    start = b * PYDB_BLOCK;
    *where = start + 4 + slot * 4;
    do {
        if (nowait && (__atomic_load_n(&db->seq, __ATOMIC_ACQUIRE) & 1))
            return PYDB_EWOULDBLOCK;
        seq = pydb__seq_begin(db);
        rc = file_read(&db->xrf, db->io, buf, (size_t)(*where + 4 - start),
                       start, "XRF block", err, nowait);
    } while (pydb__seq_retry(db, seq));
    if (rc) return rc;
    rc = check_xrfpos(db, buf, b, err);
    if (rc) return rc;
    return xrf_decode(out, db, (int32_t)pydb__u32(buf + (*where - start)),
                      mfn, *where, err);
}

static int xrf_get(pydb_xrf_entry *out, pydb_db *db, const pydb_state *st,
                   int32_t mfn, pydb_error *err, int nowait)
{
    int64_t where;
    int rc = xrf_raw(out, &where, db, st, mfn, err, nowait);
    if (rc || !has_version(out) || out->offset < st->mst_end) return rc;
    if (st->commit == PYDB__STATE_FLOOR) return NEED_STATE;
    if (nowait) return PYDB_EWOULDBLOCK;   /* a chain walk: blocking path */
    return resolve(out, db, st, mfn, where, 0, err);
}

static int read_in_gen(pydb_record **rec, pydb_xrf_entry *xe, pydb_db *db,
                       const pydb_state *st, int32_t mfn, pydb_error *err,
                       int nowait);

int pydb__xrf_get_in(pydb_xrf_entry *out, pydb_db *db, const pydb_state *st,
                     int32_t mfn, pydb_error *err)
{
    return read_in_gen(NULL, out, db, st, mfn, err, 0);
}

int pydb_xrf_get(pydb_xrf_entry *out, pydb_db *db, int32_t mfn,
                 pydb_error *err)
{
    int switches = 0;
    for (;;) {
        pydb_state st;
        uint64_t fs;
        int rc = files_begin(&fs, db, 0, err);
        if (rc) return rc;
        state_for(&st, db, mfn, 0);
        if (st.commit != 0 && st.file_gen != fs >> 1) {
            rc = switch_files(db, &st, fs, switches++, err);
            if (rc) return rc;
            continue;
        }
        rc = xrf_get(out, db, &st, mfn, err, 0);
        if (!files_moved(db, fs)) return rc;
    }
}

/* ------------------------------------------------------------- records */

/* Read and validate the version of `mfn` stored at `off`. */
static int read_version(pydb_record **rec, pydb_db *db, int32_t mfn,
                        int64_t off, pydb_error *err, int nowait)
{
    const pydb_geom *g = &pydb__geom[db->layout];
    const char *path = db->mst.path;
    int64_t mst_size = mst_size_to(db, off + g->leader);
    int64_t avail = mst_size - off;
    size_t first, mfrl;
    pydb_leader l;
    uint8_t *raw, head[PYDB_DIRECT_ALIGN];
    int rc;

    if (off < PYDB_CTL_SIZE || avail < g->leader)
        return PYDB_CORRUPT(err, path, off,
                            "record of MFN %d: a %d-byte leader at offset "
                            "%lld does not fit in the file (%lld bytes)",
                            (int)mfn, g->leader, (long long)off,
                            (long long)mst_size);
    /* One read of the head (leader and, for most records, all of it)
     * into a local buffer, then the record's one allocation at its exact
     * size (a 1 KiB one passed glibc's per-thread cache: a tenth of a
     * warm scan), the head copied in and the rest, if any, read.  A
     * system call is dear: pread takes 1 KiB, O_DIRECT the rest of its
     * aligned block; a guarded copy out of the mapping costs a
     * sigsetjmp() and a residency mark: mmap takes 512 bytes. */
    first = db->io == PYDB_IO_DIRECT
                ? PYDB_DIRECT_ALIGN - (size_t)(off % PYDB_DIRECT_ALIGN)
            : db->io == PYDB_IO_MMAP ? 512 : 1024;
    if ((int64_t)first > avail) first = (size_t)avail;
    if (first < (size_t)g->leader) first = (size_t)g->leader;
    rc = file_read(&db->mst, db->io, head, first, off, "record", err,
                   nowait);
    if (rc) return rc;
    pydb__leader_decode(&l, g, head);
    mst_size = mst_size_to(db, off + l.mfrl);
    rc = pydb__leader_check(&l, g, mfn, off, mst_size, path, err);
    /* a mapping reads zeros past a cut inside its last page: no leader
     * of any MFN, but the cut is what to tell */
    if (rc && db->io == PYDB_IO_MMAP &&
        pydb__file_still_holds(&db->mst, (size_t)g->leader, off, "record",
                               err) != PYDB_OK)
        return PYDB_ECORRUPT;
    if (rc) return rc;
    mfrl = (size_t)l.mfrl;
    rc = pydb__record_reserve(rec, mfrl, (size_t)l.nvf, err);
    if (rc) return rc;
    raw = pydb__record_raw(*rec);
    memcpy(raw, head, mfrl < first ? mfrl : first);
    if (mfrl > first) {
        rc = file_read(&db->mst, db->io, raw + first, mfrl - first,
                       off + (int64_t)first, "record", err, nowait);
        if (rc) return rc;
    }
    return pydb__record_decode(*rec, g, &l, off, path, err);
}

static int read_in(pydb_record **rec, pydb_db *db, const pydb_state *st,
                   int32_t mfn, pydb_error *err, int nowait)
{
    pydb_xrf_entry e;
    int rc;

    if (db->lock == PYDB_LOCK_MUTEX) {
        if (!nowait) pthread_mutex_lock(&db->mutex);
        else if (pthread_mutex_trylock(&db->mutex) != 0)
            return PYDB_EWOULDBLOCK;
    }
    rc = xrf_get(&e, db, st, mfn, err, nowait);
    if (rc) goto cleanup;
    if (e.state == PYDB_XRF_UNUSED || e.state == PYDB_XRF_PDELETED) {
        rc = PYDB_ERROR(err, PYDB_ENOTFOUND, db->mst.path, -1,
                        "MFN %d is %s", (int)mfn,
                        e.state == PYDB_XRF_UNUSED ? "not in use"
                                                   : "physically deleted");
        goto cleanup;
    }
    rc = read_version(rec, db, mfn, e.offset, err, nowait);
    if (rc) goto cleanup;
    (*rec)->deleted = e.state == PYDB_XRF_LDELETED;
    (*rec)->flags = e.flags;
cleanup:
    if (db->lock == PYDB_LOCK_MUTEX) pthread_mutex_unlock(&db->mutex);
    return rc;
}

/* A read as of *st through the handle's files, retried when a switch of
 * the file pair overlapped it (st translated to the new files: state_in).
 * nowait (records only): PYDB_EWOULDBLOCK instead of any wait. */
static int read_in_gen(pydb_record **rec, pydb_xrf_entry *xe, pydb_db *db,
                       const pydb_state *st, int32_t mfn, pydb_error *err,
                       int nowait)
{
    for (;;) {
        pydb_state cur;
        uint64_t fs;
        int rc = files_begin(&fs, db, nowait, err);
        if (rc) return rc;
        if (state_in(&cur, db, st, fs >> 1) != 0) {
            if (nowait) return PYDB_EWOULDBLOCK;
            if (st->file_gen > fs >> 1) {
                rc = pydb__files_sync(db, err);
                if (rc) return rc;
                if (pydb__files_gen(db) < st->file_gen)
                    return PYDB_ERROR(err, PYDB_EIO, db->mst.path, -1,
                                      "cannot open the master file of "
                                      "generation %llu",
                                      (unsigned long long)st->file_gen);
                continue;
            }
            return replaced_error(db, st, fs >> 1, err);
        }
        if (rec) rc = read_in(rec, db, &cur, mfn, err, nowait);
        else rc = xrf_get(xe, db, &cur, mfn, err, 0);
        if (!files_moved(db, fs)) return rc;
        /* the block read into stays the caller's (pydb_read_nowait):
         * its blocking read reuses it */
        if (nowait) return PYDB_EWOULDBLOCK;
        if (st->commit == 0 || st->commit == PYDB__STATE_FLOOR)
            return PYDB_ERROR(err, PYDB_EIO, db->mst.path, -1,
                              "the master file was replaced during the "
                              "read");
    }
}

int pydb__read_in(pydb_record **rec, pydb_db *db, const pydb_state *st,
                  int32_t mfn, pydb_error *err)
{
    return read_in_gen(rec, NULL, db, st, mfn, err, 0);
}

/* A plain read: first against the floor of the latest state (no state
 * to copy: the common case), then, when the record lies beyond it,
 * against the latest state itself. */
static int read_latest_once(pydb_record **rec, pydb_db *db, int32_t mfn,
                            pydb_error *err, int nowait, uint64_t fs,
                            pydb_state *st)
{
    int rc = NEED_STATE;
    state_floor(st, db);
    if (mfn >= 1 && mfn < st->next_mfn)
        rc = read_in(rec, db, st, mfn, err, nowait);
    if (rc != NEED_STATE) return rc;
    rc = state_for(st, db, mfn, nowait);
    if (rc) return rc;
    if (st->commit != 0 && st->file_gen != fs >> 1) return NEED_SWITCH;
    return read_in(rec, db, st, mfn, err, nowait);
}

/* A plain read, retried when the handle switched to a new file pair
 * during it (files_begin / files_moved). */
static int read_latest(pydb_record **rec, pydb_db *db, int32_t mfn,
                       pydb_error *err, int nowait)
{
    int switches = 0;
    for (;;) {
        pydb_state st;
        uint64_t fs;
        int rc = files_begin(&fs, db, nowait, err);
        if (rc) return rc;
        rc = read_latest_once(rec, db, mfn, err, nowait, fs, &st);
        if (rc == NEED_SWITCH) {
            if (nowait) return PYDB_EWOULDBLOCK;
            rc = switch_files(db, &st, fs, switches++, err);
            if (rc) return rc;
            continue;
        }
        if (files_moved(db, fs)) continue;
        if (rc == PYDB_OK && (*rec)->back_offset >= 0)
            pydb__gc_met(db);   /* a record with a back version */
        return rc;
    }
}

/* The end of a *_nowait read begun with pydb__nowait_begin(): a read that
 * left work undone (a collector step it met: pydb_int.h) is dropped and
 * PYDB_EWOULDBLOCK returned, so that the blocking read does it. */
static int nowait_done(pydb_record **rec, int rc)
{
    if (pydb__nowait_end() && rc == PYDB_OK) {
        pydb_record_free(*rec);
        *rec = NULL;
        rc = PYDB_EWOULDBLOCK;
    }
    return rc;
}

int pydb_read(pydb_record **rec, pydb_db *db, int32_t mfn, pydb_error *err)
{
    return read_latest(rec, db, mfn, err, 0);
}

int pydb_read_nowait(pydb_record **rec, pydb_db *db, int32_t mfn,
                     pydb_error *err)
{
    /* O_DIRECT always waits for the disk: say so before any work.  pread
     * and mmap read from the page cache only (vfs.c, resident.c). */
    if (db->io == PYDB_IO_DIRECT) return PYDB_EWOULDBLOCK;
    pydb__nowait_begin();
    return nowait_done(rec, read_latest(rec, db, mfn, err, 1));
}

int pydb_read_at(pydb_record **rec, pydb_db *db, int32_t mfn, int64_t offset,
                 pydb_error *err)
{
    int rc;
    uint64_t fs;
    do {
        rc = files_begin(&fs, db, 0, err);
        if (rc) return rc;
        if (db->lock == PYDB_LOCK_MUTEX) pthread_mutex_lock(&db->mutex);
        rc = read_version(rec, db, mfn, offset, err, 0);
        if (rc == PYDB_OK) {
            (*rec)->deleted = (*rec)->status == 1;
            (*rec)->flags = 0;
        }
        if (db->lock == PYDB_LOCK_MUTEX) pthread_mutex_unlock(&db->mutex);
    } while (files_moved(db, fs));
    return rc;
}

uint64_t pydb_files_sequence(const pydb_db *db)
{
    return __atomic_load_n(&db->fseq, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------ XRF scans */

/* The state a scan reads in after files_begin: st translated to the
 * handle's files (state_in), or the handle switched to st's newer files
 * first.  `moved`: the files changed since the scan began (a state of
 * the files mode or a floor cannot follow them). */
static int scan_state(pydb_state *cur, uint64_t *fs, pydb_db *db,
                      const pydb_state *st, int moved, pydb_error *err)
{
    for (int tries = 0; tries < 16; tries++) {
        int rc = files_begin(fs, db, 0, err);
        if (rc) return rc;
        if (moved && (st->commit == 0 || st->commit == PYDB__STATE_FLOOR))
            break;
        if (state_in(cur, db, st, *fs >> 1) == 0) return PYDB_OK;
        if (st->file_gen <= *fs >> 1) break;
        rc = pydb__files_sync(db, err);
        if (rc) return rc;
    }
    return pydb__error_set(err, PYDB_EIO, EAGAIN, db->mst.path, -1, __FILE__,
                           __LINE__, "the master file was replaced by a "
                           "compaction during the scan (try again)");
}

int pydb__state_files(pydb_state *out, uint64_t *fs, pydb_db *db,
                      const pydb_state *st, pydb_error *err)
{
    int rc = pydb__files_sync(db, err);
    if (rc) return rc;
    return scan_state(out, fs, db, st, 0, err);
}

int pydb__files_moved(const pydb_db *db, uint64_t fs)
{
    return files_moved(db, fs);
}

int pydb__xrf_scan(pydb_db *db, const pydb_state *st, int32_t from,
                   pydb__xrf_visit fn, void *ctx, int32_t *stopped_at,
                   int64_t max_blocks, pydb_error *err)
{
    uint8_t *buf = NULL;
    int32_t max = st->next_mfn - 1, mfn = from < 1 ? 1 : from;
    int rc = PYDB_OK;
    uint64_t seq, fs;
    pydb_state cur;
    const pydb_state *orig = st;

    *stopped_at = max + 1;
    rc = scan_state(&cur, &fs, db, orig, 0, err);
    if (rc) return rc;
    st = &cur;
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
                int64_t where = b * PYDB_BLOCK + 4 + slot * 4;
                pydb_xrf_entry e;
                rc = xrf_decode(&e, db, (int32_t)pydb__u32(blk + 4 + slot * 4),
                                mfn, where, err);
                if (rc == PYDB_OK)
                    rc = resolve(&e, db, st, mfn, where, 1, err);
                if (files_moved(db, fs)) {
                    /* new files under the scan: read this MFN's block
                     * again from them, as of the same records */
                    rc = scan_state(&cur, &fs, db, orig, 1, err);
                    if (rc) goto cleanup;
                    goto next_round;
                }
                if (rc) goto cleanup;
                if (fn(ctx, mfn, &e)) {
                    *stopped_at = mfn + 1;
                    goto cleanup;
                }
            }
        }
next_round:;
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

static int count_in(pydb_counts *out, pydb_db *db, const pydb_state *st,
                    pydb_error *err)
{
    int32_t stop;
    memset(out, 0, sizeof *out);
    return pydb__xrf_scan(db, st, 1, count_visit, out, &stop, SCAN_BLOCKS,
                          err);
}

/* The latest state after a refresh (the control record re-read: files
 * mode follows it, and a header another program left stale is noticed). */
static void state_fresh(pydb_state *st, pydb_db *db)
{
    pydb__refresh(db);
    pydb__state_now(st, db);
}

int pydb_count(pydb_counts *out, pydb_db *db, pydb_error *err)
{
    int rc;
    for (int tries = 0;; tries++) {
        pydb_state st;
        state_fresh(&st, db);
        rc = count_in(out, db, &st, err);
        /* a compaction replaced the files under it: count again */
        if (rc != PYDB_EIO || !err || err->sys_errno != EAGAIN || tries > 8)
            return rc;
    }
}

struct list_ctx {
    int32_t *mfns;
    size_t cap, n;
    int include_deleted;
};

/* Whether a listing takes an entry: an active record, or a logically
 * deleted one with `include_deleted`. */
static int listed(const pydb_xrf_entry *e, int include_deleted)
{
    return e->state == PYDB_XRF_ACTIVE ||
           (include_deleted && e->state == PYDB_XRF_LDELETED);
}

/* XRF blocks a listing of `cap` entries reads at a time: no more than
 * they can fill. */
static int64_t list_blocks(size_t cap)
{
    int64_t blocks = (int64_t)(cap / PYDB_XRF_PER_BLOCK) + 2;
    return blocks < SCAN_BLOCKS ? blocks : SCAN_BLOCKS;
}

static int list_visit(void *ctx, int32_t mfn, const pydb_xrf_entry *e)
{
    struct list_ctx *c = ctx;
    if (listed(e, c->include_deleted)) c->mfns[c->n++] = mfn;
    return c->n == c->cap;
}

static int list_in(int32_t *mfns, size_t cap, size_t *n, int32_t *next,
                   pydb_db *db, const pydb_state *st, int32_t from,
                   int include_deleted, pydb_error *err)
{
    struct list_ctx c = {mfns, cap, 0, include_deleted};
    int rc;
    *n = 0;
    *next = st->next_mfn;
    if (cap == 0) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "cap is 0");
    rc = pydb__xrf_scan(db, st, from, list_visit, &c, next,
                        list_blocks(cap), err);
    *n = c.n;
    return rc;
}

int pydb_list_mfns(int32_t *mfns, size_t cap, size_t *n, int32_t *next,
                   pydb_db *db, int32_t from, int include_deleted,
                   pydb_error *err)
{
    int rc;
    for (int tries = 0;; tries++) {
        pydb_state st;
        if (from <= 1) state_fresh(&st, db);
        else pydb__state_now(&st, db);
        rc = list_in(mfns, cap, n, next, db, &st, from, include_deleted, err);
        if (rc != PYDB_EIO || !err || err->sys_errno != EAGAIN || tries > 8)
            return rc;
    }
}

/* ------------------------------------------------------------ snapshots */

/* pydb_snapshot_take(), after pydb__refresh() when `fresh`: one refresh
 * in either mode (without a usable header the take refreshes anyway). */
static int snapshot_take(pydb_snapshot **out, pydb_db *db, int fresh,
                         pydb_error *err)
{
    pydb_snapshot *s;
    pydb_shm *shm;
    int rc;

    *out = NULL;
    if (!db) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "no database");
    s = malloc(sizeof *s);
    if (!s)
        return PYDB_ERROR(err, PYDB_ENOMEM, db->mst.path, -1,
                          "no memory for a snapshot");
    s->db = db;
    s->slot = -1;
    if (fresh) pydb__refresh(db);
    shm = header_of(db);
    if (shm) {
        rc = pydb__shm_pin(&s->slot, &s->st, shm, err);
        if (rc == PYDB_ELOCKED) {
            free(s);
            return rc;
        }
        if (rc == PYDB_OK && s->st.commit != 0) {
            /* sizes of the files the handle no longer reads (a switch
             * since the pin) must never raise the new ones': the check
             * and the raise under smutex, which files_sync() holds */
            pthread_mutex_lock(&db->smutex);
            if (s->st.file_gen == pydb__files_gen(db)) {
                pydb__fsize_raise(&db->mst, s->st.mst_size);
                pydb__fsize_raise(&db->xrf, s->st.xrf_size);
            }
            pthread_mutex_unlock(&db->smutex);
            *out = s;
            return PYDB_OK;
        }
        /* registered, but the header holds no state: files mode, still
         * registered so that the index keeps its files */
    }
    if (!fresh) pydb__refresh(db);   /* files mode: the state as of now */
    pydb__state_now(&s->st, db);
    *out = s;
    return PYDB_OK;
}

int pydb_snapshot_take(pydb_snapshot **out, pydb_db *db, pydb_error *err)
{
    return snapshot_take(out, db, 0, err);
}

int pydb_snapshot_take_fresh(pydb_snapshot **out, pydb_db *db,
                             pydb_error *err)
{
    return snapshot_take(out, db, 1, err);
}

uint64_t pydb_index_gen(pydb_db *db)
{
    pydb_shm *s = db ? pydb__db_shm(db) : NULL;
    pydb_state st;
    return s && pydb__shm_state(&st, s) == 0 ? st.index_gen : 0;
}

void pydb_index_gen_seen(pydb_db *db, uint64_t gen)
{
    if (db) __atomic_store_n(&db->index_gen_seen, gen, __ATOMIC_RELEASE);
}

void pydb_snapshot_release(pydb_snapshot *snap)
{
    if (!snap) return;
    pydb__shm_unpin(pydb__db_shm(snap->db), snap->slot);
    free(snap);
}

void pydb_snapshot_info_get(pydb_snapshot_info *o, const pydb_snapshot *snap)
{
    o->commit = snap->st.commit;
    o->next_mfn = snap->st.next_mfn;
    o->reccnt = snap->st.reccnt;
    o->mst_end = snap->st.mst_end;
    o->mst_size = snap->st.mst_size;
    o->xrf_size = snap->st.xrf_size;
    o->index_gen = snap->st.index_gen;
    o->registered = snap->slot >= 0;
}

int pydb__snapshot_files_kept(int rc, const pydb_snapshot *snap,
                              pydb_error *err)
{
    uint64_t gen;
    if (snap->st.commit != 0 || rc == PYDB_EWOULDBLOCK) return rc;
    gen = pydb__files_gen(snap->db);
    if (gen == snap->st.file_gen) return rc;
    return replaced_error(snap->db, &snap->st, gen, err);
}

int pydb_snapshot_read(pydb_record **rec, const pydb_snapshot *snap,
                       int32_t mfn, pydb_error *err)
{
    return pydb__snapshot_files_kept(
        read_in_gen(rec, NULL, snap->db, &snap->st, mfn, err, 0), snap, err);
}

int pydb_snapshot_read_nowait(pydb_record **rec, const pydb_snapshot *snap,
                              int32_t mfn, pydb_error *err)
{
    if (snap->db->io == PYDB_IO_DIRECT) return PYDB_EWOULDBLOCK;
    pydb__nowait_begin();
    return pydb__snapshot_files_kept(
        nowait_done(rec, read_in_gen(rec, NULL, snap->db, &snap->st, mfn,
                                     err, 1)),
        snap, err);
}

int pydb_snapshot_xrf_get(pydb_xrf_entry *out, const pydb_snapshot *snap,
                          int32_t mfn, pydb_error *err)
{
    return pydb__snapshot_files_kept(
        read_in_gen(NULL, out, snap->db, &snap->st, mfn, err, 0), snap, err);
}

int pydb_snapshot_count(pydb_counts *out, const pydb_snapshot *snap,
                        pydb_error *err)
{
    return pydb__snapshot_files_kept(count_in(out, snap->db, &snap->st, err),
                                     snap, err);
}

int pydb_snapshot_list_mfns(int32_t *mfns, size_t cap, size_t *n,
                            int32_t *next, const pydb_snapshot *snap,
                            int32_t from, int include_deleted,
                            pydb_error *err)
{
    return pydb__snapshot_files_kept(
        list_in(mfns, cap, n, next, snap->db, &snap->st, from,
                include_deleted, err),
        snap, err);
}

struct listed_ctx {
    pydb_listed *out;
    size_t cap, n;
    int include_deleted;
    int64_t mst_end;    /* of the state the scan resolves in */
};

static int listed_visit(void *ctx, int32_t mfn, const pydb_xrf_entry *e)
{
    struct listed_ctx *c = ctx;
    pydb_listed *l;
    if (!listed(e, c->include_deleted)) return 0;
    l = &c->out[c->n++];
    l->mfn = mfn;
    l->state = e->state;
    l->flags = e->flags;
    /* the scan resolves leniently: a version past the state's end is one
     * whose chain it could not follow, which the read reports */
    l->offset = e->offset < c->mst_end ? e->offset : -1;
    return c->n == c->cap;
}

int pydb_snapshot_list(pydb_listed *out, size_t cap, size_t *n,
                       int32_t *next, const pydb_snapshot *snap,
                       int32_t from, int include_deleted, pydb_error *err)
{
    struct listed_ctx c = {out, cap, 0, include_deleted, 0};
    pydb_db *db = snap->db;
    pydb_state cur;
    uint64_t fs;
    int rc;

    *n = 0;
    *next = snap->st.next_mfn;
    if (cap == 0) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "cap is 0");
    /* the state and file pair the scan resolves in (pydb__xrf_scan takes
     * the same) */
    rc = scan_state(&cur, &fs, db, &snap->st, 0, err);
    if (rc) return rc;
    c.mst_end = cur.mst_end;
    rc = pydb__xrf_scan(db, &snap->st, from, listed_visit, &c, next,
                        list_blocks(cap), err);
    *n = c.n;
    /* a pair switched since (here or during the scan) is not fs:
     * pydb_snapshot_read_listed() then reads by MFN */
    for (size_t i = 0; i < c.n; i++) out[i].files = fs;
    return pydb__snapshot_files_kept(rc, snap, err);
}

int pydb_snapshot_read_listed(pydb_record **rec, const pydb_snapshot *snap,
                              const pydb_listed *l, pydb_error *err)
{
    pydb_db *db = snap->db;
    uint64_t fs;
    int rc;

    if (l->offset < 0) return pydb_snapshot_read(rec, snap, l->mfn, err);
    rc = files_begin(&fs, db, 0, err);
    if (rc) return rc;
    if (fs != l->files) return pydb_snapshot_read(rec, snap, l->mfn, err);
    if (db->lock == PYDB_LOCK_MUTEX) pthread_mutex_lock(&db->mutex);
    rc = read_version(rec, db, l->mfn, l->offset, err, 0);
    if (db->lock == PYDB_LOCK_MUTEX) pthread_mutex_unlock(&db->mutex);
    /* switched during the read: it may have read the new files at an
     * offset of the old */
    if (files_moved(db, fs)) return pydb_snapshot_read(rec, snap, l->mfn, err);
    rc = pydb__snapshot_files_kept(rc, snap, err);
    if (rc) return rc;
    (*rec)->deleted = l->state == PYDB_XRF_LDELETED;
    (*rec)->flags = l->flags;
    return PYDB_OK;
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
    int64_t ms, xs;
    int grew = 0;
    /* no switch of the file pair meanwhile: sizes of the files the handle
     * no longer reads must never raise the new ones' */
    pthread_mutex_lock(&db->smutex);
    if (pydb__fd_size(db->mst.fd, &ms) != 0 ||
        pydb__fd_size(db->xrf.fd, &xs) != 0) {
        pthread_mutex_unlock(&db->smutex);
        return 0;
    }
    if (xs > pydb__fsize(&db->xrf)) {
        pydb__fsize_raise(&db->xrf, xs);
        grew = 1;
    }
    if (ms > pydb__fsize(&db->mst)) {
        pydb__fsize_raise(&db->mst, ms);
        grew = 1;
    }
    pthread_mutex_unlock(&db->smutex);
    return grew;
}

int pydb_refresh(pydb_db *db, pydb_error *err)
{
    if (!db) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "no database");
    pydb__refresh(db);
    return PYDB_OK;
}

/* Whether a header state describes the files of control record *c. */
static int state_agrees(const pydb_state *st, const pydb_ctl *c)
{
    return st->next_mfn == c->next_mfn && st->next_block == c->next_block &&
           st->next_pos == c->next_pos;
}

/* Whether control record *c is newer than state *st of the same files:
 * within one file generation the records' end and NXTMFN only grow. */
static int ctl_newer(const pydb_ctl *c, const pydb_state *st)
{
    return c->next_mfn > st->next_mfn ||
           pydb__ctl_end(c->next_block, c->next_pos) > st->mst_end;
}

/* Decide whether reads may trust the header, given the control record *v
 * just read (under fseq `fs`): yes when it agrees with the header's
 * latest state, or when a pydb writer is applying the commit after it
 * (it writes the control record, then publishes) or was killed while it
 * applied it (shm.h: the applying marker; reading the files' half-applied
 * state instead would show that commit's records without the index files
 * it had not reached yet).  The marker is loaded after the control record
 * and before the state: a writer sets it before it writes the control
 * record and clears it after it publishes (the kernel orders the file
 * write after the marker's store: pwrite is a system call after a full
 * fence), so a control record newer than the state with no marker seen
 * was written by someone that does not publish -- the header is not
 * trusted.  A look that proves nothing is taken again, up to 4 looks: a
 * control record read while it changed, of a pair the handle switched
 * from since (a compaction's: its records end further), or older than
 * the state (read before a commit published); an older one seen twice
 * with the same latest state means files older than the header (restored
 * under it): not trusted.  After 4 looks that proved nothing the handle
 * keeps what it decided before. */
static void update_stale(pydb_db *db, const pydb_ctl *v, uint64_t fs)
{
    pydb_shm *shm = pydb__db_shm(db);
    pydb_state st;
    pydb_ctl again = *v;
    uint64_t older_at = 0;   /* latest commit an older record was seen at */
    int stale = -1;          /* not decided */

    if (!shm) return;
    pydb__shm_revalidate(shm);
    for (int look = 0; look < 4 && stale < 0; look++) {
        uint64_t applying;
        if (look) {   /* the record again, of the files read now */
            fs = __atomic_load_n(&db->fseq, __ATOMIC_ACQUIRE);
            if ((fs & 1) || peek_control(db, &again) != 0) continue;
        }
        applying = pydb__shm_applying_commit(shm);
        if (pydb__shm_state(&st, shm) != 0) {
            /* no state yet: reads use the files anyway, and snapshots
             * still register in its reader table */
            stale = 0;
            break;
        }
        if (st.file_gen != fs >> 1) {
            /* a compaction's state: the control record read is of the
             * other pair, which says nothing about the header (reads
             * switch to the state's files first: pydb__files_sync) */
            stale = 0;
            break;
        }
        if (files_moved(db, fs)) continue;
        if (state_agrees(&st, &again)) {
            stale = 0;
        } else if (ctl_newer(&again, &st)) {
            stale = applying != st.commit + 1;
        } else if (older_at == st.commit) {
            stale = 1;
        } else {
            older_at = st.commit;
        }
    }
    if (stale >= 0) __atomic_store_n(&db->shm_stale, stale, __ATOMIC_RELEASE);
}

/* A handle opened before the first writer made the header: use it from
 * now on (readers never create it). */
static void attach_header(pydb_db *db)
{
    pydb_shm *s = NULL, *none = NULL;
    if (__atomic_load_n(&db->shm, __ATOMIC_ACQUIRE) || !db->shm_path[0])
        return;
    if (pydb__shm_open(&s, db->shm_path, db->mst.path, 0, NULL) != PYDB_OK ||
        !s)
        return;
    if (!__atomic_compare_exchange_n(&db->shm, &none, s, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        pydb__shm_close(s);   /* another thread attached it first */
    else
        __atomic_store_n(&db->gen_word, pydb__shm_gen_word(s),
                         __ATOMIC_RELEASE);
}

/* Whether the records and XRF entries control record *c announces lie
 * within the files' sizes as the handle knows them. */
static int ctl_within_sizes(const pydb_db *db, const pydb_ctl *c)
{
    return pydb__ctl_end(c->next_block, c->next_pos) <=
               pydb__fsize(&db->mst) &&
           pydb__xrf_blocks(c->next_mfn) * PYDB_BLOCK <=
               pydb__fsize(&db->xrf);
}

void pydb__refresh(pydb_db *db)
{
    pydb_ctl v;
    int32_t cur;
    uint8_t ent[4];
    uint64_t fs;

    attach_header(db);

    cur = pydb__next_mfn(db);
    fs = __atomic_load_n(&db->fseq, __ATOMIC_ACQUIRE);   /* files read */
    if ((fs & 1) || peek_control(db, &v) != 0) return;
    /* The sizes (never lower than what fstat said) bound what the control
     * record may announce.  A writer grows the files before it writes the
     * control record that names their bytes, so sizes taken after it was
     * read cover what it says: fstat only when it announces more than the
     * handle knows (an update of existing records grows the master file
     * without changing NXTMFN, but moves NXTMFB/NXTMFP). */
    if (!ctl_within_sizes(db, &v)) pydb__refresh_sizes(db);
    update_stale(db, &v, fs);
    /* With a usable header the view follows published states only (the
     * control record may announce a commit still being applied). */
    if (header_of(db)) {
        pydb_state st;
        if (pydb__state_header(&st, db) == 0) return;
    }
    if (v.next_mfn < cur || !pydb__ctl_sane(&v) || !ctl_within_sizes(db, &v))
        return;
    /* The control record is written last: the XRF entry of the highest
     * MFN it announces must be there already, else it is torn. */
    if (v.next_mfn > cur) {
        int64_t m = v.next_mfn - 1;
        int64_t at = ((m - 1) / PYDB_XRF_PER_BLOCK) * PYDB_BLOCK + 4 +
                     ((m - 1) % PYDB_XRF_PER_BLOCK) * 4;
        if (pydb__file_read(&db->xrf, PYDB_IO_PREAD, ent, 4, at, "XRF entry",
                            NULL) != PYDB_OK || pydb__u32(ent) == 0)
            return;
    }
    pydb__view_set(db, fs, v.next_mfn, v.next_block, v.next_pos, v.reccnt);
}

/* ------------------------------------------------- publishing (writer) */

void pydb__state_of_ctl(pydb_state *st, const pydb_ctl *c)
{
    memset(st, 0, sizeof *st);
    st->next_mfn = c->next_mfn;
    st->next_block = c->next_block;
    st->next_pos = c->next_pos;
    st->reccnt = c->reccnt;
    st->mst_end = pydb__ctl_end(c->next_block, c->next_pos);
}

void pydb__header_publish(pydb_db *db, const pydb_ctl *c, uint64_t gen,
                           int keep_gen)
{
    pydb_shm *shm = pydb__db_shm(db);
    pydb_state st, prev;
    if (!shm) return;
    pydb__state_of_ctl(&st, c);
    st.mst_size = pydb__fsize(&db->mst);
    st.xrf_size = pydb__fsize(&db->xrf);
    st.index_gen = gen;
    st.file_gen = pydb__files_gen(db);   /* the files this writer wrote */
    if (keep_gen && gen == 0 && pydb__shm_state(&prev, shm) == 0)
        st.index_gen = prev.index_gen;
    pydb__shm_publish(shm, &st);
    __atomic_store_n(&db->shm_stale, 0, __ATOMIC_RELEASE);
}

int pydb__header_sync(pydb_db *db, const pydb_ctl *c, pydb_error *err)
{
    pydb_shm *shm = pydb__db_shm(db);
    pydb_state st;
    int rc;
    if (!shm) return PYDB_OK;
    rc = pydb__shm_reset(shm, err);   /* checks the layout; rebuilds */
    if (rc) return rc;
    pydb__shm_sweep(shm);
    if (pydb__shm_state(&st, shm) == 0 && state_agrees(&st, c)) {
        __atomic_store_n(&db->shm_stale, 0, __ATOMIC_RELEASE);
        return PYDB_OK;
    }
    pydb__header_publish(db, c, 0, 0);
    return PYDB_OK;
}

int pydb__header_sync_files(pydb_db *db, pydb_error *err)
{
    pydb_ctl c;
    pydb__refresh_sizes(db);
    if (peek_control(db, &c) != 0 || !pydb__ctl_sane(&c)) return PYDB_OK;
    return pydb__header_sync(db, &c, err);
}
