/*
 * txn.c - transactions on an open database: pydb_txn_begin(), the
 * changes (append, update, delete, undelete, whole files), and
 * pydb_txn_commit() / pydb_txn_abort(); the commit hook.
 *
 * Depends on: wal.c (the log image, its append and reset, recovery and
 * the writer lock), read.c (current versions of records), record.c
 * (encoding, placement, XRF values), util.c, vfs.c, error.c.  Nothing in
 * csrc/ below it calls into it.
 *
 * DESIGN
 *
 * Files.  The database stays a plain CDS/ISIS .mst/.xrf pair that WinISIS
 * and CISIS read (docs/isis-formats.md §2-3).  Beside it lives <base>.wal,
 * a redo log of the commits since the last checkpoint (its format and
 * checkpoints: wal.h).
 *
 * ISIS update technique (docs/isis-formats.md §2.4, §10).  Every change
 * writes a new record version at the end of the master file (NXTMFB/NXTMFP): records
 * start on a 2-byte boundary (2^MSTXL if MSTXL > 0) and obey the
 * never-split rule (the leader up to BASE inside one 512-byte block);
 * MFRL is even (a multiple of 2^MSTXL) with blank padding; the file is
 * zero-filled to a whole block.  An update's MFBWB/MFBWP point to the
 * version it replaces.  XRF flags (docs/isis-formats.md §3.2): a new
 * record gets 0x400 "new"; a change of a record that has "new" keeps it (it was never
 * inverted); any other change sets 0x200 "update pending".  Deletion
 * writes a version with STATUS 1 and negates the XRF pointer; undelete
 * writes one with STATUS 0 and a positive pointer.  XRFPOS is negative on
 * the last XRF block only.  The control record gets the new NXTMFN,
 * NXTMFB and NXTMFP; its other bytes (MFTYPE, MSTXL, RECCNT, MFCXX*) are
 * kept.  Nothing is ever written in place over a record version, so a
 * reader that follows an XRF pointer always finds a whole record.
 *
 * Commit.  (1) the commit hook's prepare() runs (it may add whole files);
 * (2) every byte the commit will write (the master-file region from the
 * committed end to the new block-padded end, each changed XRF block, the
 * control record, each whole file) is appended to <base>.wal as a frame
 * with a header, a trailer and a CRC-32C over both -- except the region
 * of a commit that writes PYDB_WAL_DIRECT bytes or more, which goes
 * straight into the .mst past the committed end and is fdatasync'ed
 * first (the frame keeps its first block); the log is
 * fdatasync'ed (with PYDB_OPEN_NOSYNC only when the commit writes in
 * place a unit no synced frame holds: "Commits without fsync" below)
 * -- this is the commit point;
 * (3) the bytes are written to the .mst, the .xrf (inside the handle's
 * sequence lock), the control record last, and whole files (not those
 * the hook wrote itself and logged for replay only: pydb__txn_log_file)
 * into their spare whose name is swapped in when the frame stays in the
 * log (pydb__swap_file: no file created or removed), else by write-temp
 * + rename + fsync; (4) with a usable commit header the frame stays in
 * the log, the header records the log's length as applied, and the
 * .mst/.xrf and whole files are synced only at a checkpoint (wal.h: the
 * log past PYDB_WAL_CHECKPOINT bytes or PYDB_WAL_CHECKPOINT_FILES
 * segments, a collection step, a writer's close) -- one fsync per
 * commit, or (sync=False) a few per checkpoint; otherwise (files mode,
 * where sync=False commits sync as sync=True ones) the log is truncated
 * to zero after an fdatasync of the .mst/.xrf.  (3) starts only once
 * the frame is durable (or, with sync=False, behind synced copies of
 * every unit it writes in place), and replay writes each byte with its
 * last value, so replaying applied commits is harmless.
 *
 * Recovery (wal.c; run by handle.c at open with PYDB_OPEN_WRITE and by
 * read-only opens that can write the files, and here by pydb_txn_begin()):
 * under the writer lock, unless the header vouches that the whole log is
 * applied in this boot, its complete frames are replayed and the files
 * fsync'ed; a torn last frame (a crash before its commit point) is
 * dropped, and the log truncated.  (With sync, the
 * directory is fsync'ed when the files or the log are created, so their
 * names survive a power loss too.)
 *
 * Locks.  One transaction per handle at a time (wmutex + wcond + wbusy,
 * with a timeout), and one writer per database across handles and
 * processes: an open-file-description lock (F_OFD_SETLK) on the whole
 * .wal file, tried until the timeout (wal.c: waiters sleep on a futex
 * in the commit header that each release bumps).  Both are held from
 * pydb_txn_begin() to commit/abort.  Readers take neither.  A collector
 * step (pydb__txn_begin_gc) goes first: while it waits for either lock,
 * other waiters stand back (in this handle: gc_waiting; across
 * processes: the header's priority word, wal.c) -- for at most the
 * step's own short wait.  Without that, commits that follow each other
 * without a pause (16 clients, say) take the lock at every release, the
 * step times out again and again, and garbage piles up (segments: each
 * commit adds one, and every lookup visits them all).  And a transaction
 * waits for its handle's own collector (a step holding the lock, or
 * about to take it) whatever its timeout: a step is bounded, and the
 * timeout is about other writers (with timeout 0, 7% of begins beside a
 * busy collector failed, "another thread holds the writer lock", in a
 * program with one thread).  That wait counts against the timeout: the
 * lock of other processes is then tried once.
 *
 * Failures.  Every write, fsync, truncate and rename goes through the vfs
 * table.  A failure before the commit point leaves the files as they were
 * (a direct commit's records past the end are cleared: clear_past_end)
 * and the handle usable -- except a failed fdatasync of a direct
 * commit's records, which, as any failed fsync, makes it read-only; the
 * transaction is then not committed.  A failed fsync anywhere sets
 * db->fatal to PYDB__FATAL_SYNC: the handle refuses further transactions
 * (PYDB_EREADONLY) until it is reopened; reopening replays the log.  A
 * failed write after the commit point (ENOSPC on the .mst) sets
 * PYDB__FATAL_APPLY: the next pydb_txn_begin() replays the log (it needs
 * the space the write lacked) and, once that works, the handle is
 * writable again. 
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
#include "gc.h"
#include "shm.h"
#include "wal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Turn the handle read-only: PYDB__FATAL_SYNC (a failed fsync: until it
 * is reopened) outranks PYDB__FATAL_APPLY (a failed write of a durable
 * commit: the next pydb_txn_begin() replays the log and, if that works,
 * makes the handle writable again). */
static void set_fatal(pydb_db *db, int kind)
{
    int cur = 0;
    if (kind == PYDB__FATAL_SYNC)
        __atomic_store_n(&db->fatal, kind, __ATOMIC_RELEASE);
    else
        __atomic_compare_exchange_n(&db->fatal, &cur, kind, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

int pydb__txn_read_only(const pydb_db *db)
{
    return __atomic_load_n(&db->fatal, __ATOMIC_ACQUIRE) == PYDB__FATAL_SYNC;
}

void pydb__writer_locks_init(pydb_db *db)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&db->wmutex, NULL);
    pthread_cond_init(&db->wcond, &ca);
    pthread_mutex_init(&db->gmutex, NULL);
    pthread_cond_init(&db->gcond, &ca);
    pthread_mutex_init(&db->lsmutex, NULL);
    pthread_condattr_destroy(&ca);
    db->gc_waiting = 0;   /* (wbusy: txn_begin clears a parent's) */
    db->ghead = db->gtail = NULL;
    db->gleader = 0;
}

/* With wmutex held: PYDB_ELOCKED if this thread began the open
 * transaction (it would wait for itself), else PYDB_OK. */
static int mine_open(const pydb_db *db, pydb_error *err)
{
    if (!db->wbusy || db->wbusy_pid != getpid() ||
        !pthread_equal(db->wowner, pthread_self()))
        return PYDB_OK;
    return PYDB_ERROR(err, PYDB_ELOCKED, db->mst.path, -1,
                      "this thread already has a transaction open on this "
                      "handle");
}

int pydb__txn_mine_open(pydb_db *db, pydb_error *err)
{
    int rc;
    pthread_mutex_lock(&db->wmutex);
    rc = mine_open(db, err);
    pthread_mutex_unlock(&db->wmutex);
    return rc;
}

/* fdatasync `fd` (of file `path`) for the commit protocol.  On failure
 * the handle turns read-only and the header stops vouching for the log
 * (the page cache may have dropped earlier commits' bytes too: the next
 * recovery writes them all again).  0, or PYDB_EIO with "<what> failed". */
static int datasync_or_fatal(pydb_db *db, int fd, const char *path,
                             const char *what, pydb_error *err)
{
    int e;
    if (pydb__vfs->fdatasync(fd) == 0) return PYDB_OK;
    e = errno;
    pydb__shm_log_set(pydb__db_shm(db), 0, 0);
    set_fatal(db, PYDB__FATAL_SYNC);
    return PYDB_OSERROR(err, e, path, -1, "%s failed: %s", what, strerror(e));
}

/* The error of a transaction refused on a handle set_fatal() made
 * read-only. */
static int fatal_error(const pydb_db *db, pydb_error *err)
{
    return PYDB_ERROR(err, PYDB_EREADONLY, db->mst.path, -1,
                      "the handle is read-only after a failed write or "
                      "fsync; reopen the database (recovery restores every "
                      "committed transaction)");
}

/* Whether a failed write to the log says it cannot grow (no space, the
 * file size limit, the quota) rather than that the disk failed. */
static int log_cannot_grow(const pydb_error *e)
{
    return e->code == PYDB_EIO &&
           (e->sys_errno == ENOSPC || e->sys_errno == EFBIG ||
            e->sys_errno == EDQUOT);
}

/* A checkpoint with the writer lock held (wal.h); a failed fsync makes
 * the handle read-only. */
static int checkpoint(pydb_db *db, pydb_error *err)
{
    pydb_wal_files w = pydb__wal_files(db);
    int failed = 0, rc = pydb__wal_checkpoint(&w, &failed, err);
    if (failed) set_fatal(db, PYDB__FATAL_SYNC);
    if (rc == PYDB_OK) db->logged_files = 0;
    return rc;
}

/* ---------------------------------------------------------- transactions */

typedef struct txn_op {
    int32_t mfn;
    int32_t xrf_raw;          /* new XRF value                             */
    int64_t offset;           /* where the new version goes in the .mst    */
    pydb_record *before;      /* version replaced, or NULL (append)        */
    int own_before;           /* before was read from disk (we free it)    */
    pydb_record *after;       /* the new version, encoded in after's block */
    int deleted_after;
} txn_op;

typedef struct put_file {
    char *path;               /* as the caller gave it                     */
    char *name;               /* in the log: relative to the log's folder  */
    uint8_t *data;
    size_t len;
    int in_place;             /* written already: in the log for replay
                                 only (pydb__txn_log_file)                */
} put_file;

struct pydb_txn {
    pydb_db *db;
    uint8_t ctl[PYDB_CTL_SIZE];   /* control record at begin            */
    int64_t start;                /* committed end of the .mst (or the
                                     file's end past another program's
                                     bytes: check_tail)                 */
    int64_t end0;                 /* the committed end at begin         */
    int64_t pos;                  /* next free byte after this txn      */
    int32_t next_mfn;
    int32_t first_new;            /* NXTMFN at begin: appends from here   */
    txn_op *ops;
    size_t nops, opcap;
    int32_t *hkey;                /* MFN -> index of its latest op      */
    size_t *hval;
    size_t hcap;
    put_file *files;
    size_t nfiles;
    uint64_t index_gen;           /* MANIFEST generation it publishes   */
    int keep;                     /* its commit keeps its frame in the log
                                     (decided once, before prepare)      */
};

static size_t hslot(int32_t mfn, size_t cap)
{
    return ((uint32_t)mfn * 2654435761u) & (cap - 1);
}

static long hget(const pydb_txn *t, int32_t mfn)
{
    if (!t->hcap) return -1;
    for (size_t i = hslot(mfn, t->hcap);; i = (i + 1) & (t->hcap - 1)) {
        if (t->hkey[i] == 0) return -1;
        if (t->hkey[i] == mfn) return (long)t->hval[i];
    }
}

static int hput(pydb_txn *t, int32_t mfn, size_t idx, pydb_error *err)
{
    if ((t->nops + 1) * 2 > t->hcap) {
        size_t ncap = t->hcap ? t->hcap * 2 : 64;
        int32_t *nk = calloc(ncap, sizeof *nk);
        size_t *nv = calloc(ncap, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
        }
        for (size_t i = 0; i < t->hcap; i++) {
            if (!t->hkey[i]) continue;
            size_t j = hslot(t->hkey[i], ncap);
            while (nk[j]) j = (j + 1) & (ncap - 1);
            nk[j] = t->hkey[i];
            nv[j] = t->hval[i];
        }
        free(t->hkey);
        free(t->hval);
        t->hkey = nk;
        t->hval = nv;
        t->hcap = ncap;
    }
    for (size_t i = hslot(mfn, t->hcap);; i = (i + 1) & (t->hcap - 1)) {
        if (t->hkey[i] == 0 || t->hkey[i] == mfn) {
            t->hkey[i] = mfn;
            t->hval[i] = idx;
            return PYDB_OK;
        }
    }
}

/* Wake the next waiter for wbusy, or all of them while a collector step
 * waits (the one woken must be the step).  wmutex held. */
static void wake_writers(pydb_db *db)
{
    if (db->gc_waiting) pthread_cond_broadcast(&db->wcond);
    else pthread_cond_signal(&db->wcond);
}

static void release_writer(pydb_db *db)
{
    pydb__wal_unlock(db);
    pthread_mutex_lock(&db->wmutex);
    db->wbusy = 0;
    wake_writers(db);
    pthread_mutex_unlock(&db->wmutex);
}

static void txn_free(pydb_txn *t)
{
    for (size_t i = 0; i < t->nops; i++) {
        if (t->ops[i].own_before) pydb_record_free(t->ops[i].before);
        pydb_record_free(t->ops[i].after);
    }
    for (size_t i = 0; i < t->nfiles; i++) {
        free(t->files[i].path);
        free(t->files[i].name);
        free(t->files[i].data);
    }
    free(t->files);
    free(t->ops);
    free(t->hkey);
    free(t->hval);
    free(t);
}

/* Re-read the control record and sizes with the writer lock held (another
 * process may have committed, or recovery run); bring the commit header
 * in line with them. */
static int load_state(pydb_db *db, uint8_t ctl[PYDB_CTL_SIZE], pydb_error *err)
{
    pydb_ctl c;
    int64_t end, msize, xsize;
    ssize_t got;

    if (pydb__fd_size(db->mst.fd, &msize) != 0 ||
        pydb__fd_size(db->xrf.fd, &xsize) != 0)
        return PYDB_OSERROR(err, errno, db->mst.path, -1, "cannot stat: %s",
                            strerror(errno));
    got = pydb__vfs->pread(db->mst.fd, ctl, PYDB_CTL_SIZE, 0);
    if (got != PYDB_CTL_SIZE)
        return got < 0 ? PYDB_OSERROR(err, errno, db->mst.path, 0,
                                      "cannot read the control record: %s",
                                      strerror(errno))
                       : PYDB_CORRUPT(err, db->mst.path, 0,
                                      "the control record is truncated");
    pydb__ctl_decode(&c, ctl);
    end = pydb__ctl_end(c.next_block, c.next_pos);
    if (c.ctlmfn != 0 || !pydb__ctl_sane(&c) || end < PYDB_CTL_SIZE ||
        end > msize ||
        pydb__xrf_blocks(c.next_mfn) * PYDB_BLOCK > xsize ||
        c.mstxl != db->mstxl)
        return PYDB_CORRUPT(err, db->mst.path, 0,
                            "control record: NXTMFN %d, NXTMFB/NXTMFP %d/%d "
                            "do not fit the files (%lld and %lld bytes)",
                            (int)c.next_mfn, (int)c.next_block,
                            (int)c.next_pos, (long long)msize,
                            (long long)xsize);
    if (c.next_mfn < pydb__next_mfn(db))
        return PYDB_CORRUPT(err, db->mst.path, 4,
                            "control record: NXTMFN went back from %d to %d "
                            "(files replaced under an open handle?)",
                            (int)pydb__next_mfn(db), (int)c.next_mfn);
    /* the true sizes: a writer's cut past the end (clear_past_end) may
     * have lowered the .mst's since this handle last looked */
    pydb__fsize_set(&db->mst, msize);
    pydb__fsize_raise(&db->xrf, xsize);
    pydb__view_set_writer(db, c.next_mfn, c.next_block, c.next_pos,
                          c.reccnt);
    return pydb__header_sync(db, &c, err);
}

/* The end of the transaction's master-file region: its records end
 * (t->pos) rounded up to a whole block. */
static int64_t region_end(const pydb_txn *t)
{
    return (t->pos + PYDB_BLOCK - 1) / PYDB_BLOCK * PYDB_BLOCK;
}

/* Make the .mst past the committed end (t->start) what pydb leaves
 * there: the zero fill of the last block up to `size` and nothing after
 * -- after a direct commit failed before its commit point (`size`: the
 * file's size before it), or when check_tail() finds a killed direct
 * commit's records there (`size`: the block boundary after the end).
 * Best effort: bytes it cannot clear are found and cleared again by the
 * next transaction (the direct-commit mark, which names them as pydb's,
 * is left): 0 when cleared, -1 when not. */
static int clear_past_end(pydb_txn *t, int64_t size)
{
    static const uint8_t zeros[PYDB_BLOCK];
    pydb_db *db = t->db;
    int64_t at = t->start;
    if (size < at) size = at;
    if (pydb__vfs->ftruncate(db->mst.fd, size) != 0) return -1;
    pydb__fsize_set(&db->mst, size);
    while (at < size) {
        size_t n = (size_t)(size - at < PYDB_BLOCK ? size - at : PYDB_BLOCK);
        if (pydb__write_full(db->mst.fd, zeros, n, at) != 0) return -1;
        at += (int64_t)n;
    }
    return 0;
}

/* The error of a write that would take MFN `mfn` (at or past NXTMFN
 * `next_mfn`) whose XRF entry, at byte `where`, holds `raw` (not 0):
 * another program's writer died after it wrote the entry and before it
 * rewrote the control record (pydb's own are replayed from the log), and
 * the write would overwrite the entry, or cut the record it names off the
 * end of the master file. */
static int lagging_ctl_error(pydb_db *db, int32_t mfn, int32_t raw,
                             int32_t next_mfn, int64_t where,
                             pydb_error *err)
{
    return PYDB_CORRUPT(err, db->xrf.path, where,
                        "the XRF has an entry for MFN %d (value %d), at or "
                        "past the control record's NXTMFN %d: the control "
                        "record lags the XRF (a writer died before it "
                        "rewrote it?); pydb writes nothing here, which "
                        "would overwrite that entry or cut its record off "
                        "(pydb check lists them)", (int)mfn, (int)raw,
                        (int)next_mfn);
}

/* The most XRF bytes xrf_lagging() reads. */
#define TAIL_XRF_MAX ((int64_t)1 << 20)

/* PYDB_ECORRUPT (lagging_ctl_error) if the XRF has an entry for an MFN at
 * or past NXTMFN `next_mfn`: another program's writer died after it wrote
 * the entry and before it rewrote the control record (pydb's own are
 * replayed from the log before this), and the bytes past the end may be
 * that entry's record.  Only the blocks from NXTMFN's on are read, at
 * most TAIL_XRF_MAX bytes of them (a replayed log may leave a sparse XRF
 * of hundreds of GB: docs/fuzzing.md, wal-sparse-xrf-2e39). */
static int xrf_lagging(pydb_db *db, int32_t next_mfn, pydb_error *err)
{
    uint8_t buf[PYDB_BLOCK];
    int64_t first = (next_mfn - 1) / PYDB_XRF_PER_BLOCK;
    int64_t nb = pydb__fsize(&db->xrf) / PYDB_BLOCK;

    if (nb > first + TAIL_XRF_MAX / PYDB_BLOCK)
        nb = first + TAIL_XRF_MAX / PYDB_BLOCK;
    for (int64_t b = first; b < nb; b++) {
        int rc = pydb__file_read(&db->xrf, PYDB_IO_PREAD, buf, PYDB_BLOCK,
                                 b * PYDB_BLOCK, "XRF block", err);
        if (rc) return rc;
        for (int i = 0; i < PYDB_XRF_PER_BLOCK; i++) {
            int64_t mfn = b * PYDB_XRF_PER_BLOCK + i + 1;
            int32_t raw = (int32_t)pydb__u32(buf + 4 + 4 * i);
            if (mfn >= next_mfn && raw != 0)
                return lagging_ctl_error(db, (int32_t)mfn, raw, next_mfn,
                                         b * PYDB_BLOCK + 4 + 4 * i, err);
        }
    }
    return PYDB_OK;
}

/* The bytes after NXTMFB/NXTMFP should be the zero fill of the last block
 * (docs/isis-formats.md §2.1).  Other bytes there (or more than 1 MiB of
 * file) are pydb's own only where the direct-commit mark (shm.h) names
 * where they start and the state they were written past -- this end,
 * NXTMFN and master file generation: the records of a direct commit
 * killed before its commit point, cleared (zero fill to the block
 * boundary and the file cut there, or, where that commit started after
 * the end of the file, the file cut where it started).  Any others are
 * another program's -- a record some writer placed across its own end
 * (pyisis stores an end inside its last record), versions WinISIS left
 * past it -- and are never written over: the transaction starts after
 * the end of the file (a review: a writer's open cut 18 versions off a
 * WinISIS master file, the only copies of four physically deleted
 * records).  A mark that names another state is stale and cleared (the
 * writer lock is held: no direct commit is under way).  An XRF entry at
 * or past NXTMFN is PYDB_ECORRUPT either way (xrf_lagging). */
static int check_tail(pydb_txn *t, pydb_error *err)
{
    pydb_db *db = t->db;
    pydb_shm *shm = pydb__db_shm(db);
    pydb_direct_mark m;
    int64_t off = t->start, size = pydb__fsize(&db->mst);  /* load_state's */
    uint8_t buf[PYDB_BLOCK];
    int dirty, marked, ours, rc;

    marked = pydb__shm_direct_get(shm, &m);
    ours = marked && m.end == t->start && m.next_mfn == t->next_mfn &&
           m.gen == pydb__files_gen(db) && m.start >= t->start &&
           m.start <= size;
    if (marked && !ours) pydb__shm_direct_clear(shm);
    dirty = size - off > ((int64_t)1 << 20);
    while (!dirty && off < size) {
        size_t n = (size_t)(size - off < PYDB_BLOCK ? size - off : PYDB_BLOCK);
        rc = pydb__file_read(&db->mst, PYDB_IO_PREAD, buf, n, off,
                             "master file tail", err);
        if (rc) return rc;
        for (size_t i = 0; i < n; i++)
            if (buf[i]) dirty = 1;
        off += (int64_t)n;
    }
    if (!dirty) {
        if (ours) pydb__shm_direct_clear(shm);
        return PYDB_OK;
    }
    rc = xrf_lagging(db, t->next_mfn, err);
    if (rc) return rc;
    if (ours && m.start == t->start) {
        if (clear_past_end(t, region_end(t)) == 0)
            pydb__shm_direct_clear(shm);
        return PYDB_OK;
    }
    if (ours && pydb__vfs->ftruncate(db->mst.fd, m.start) == 0) {
        pydb__fsize_set(&db->mst, m.start);
        pydb__shm_direct_clear(shm);
        size = m.start;
    }
    t->start = t->pos = size;
    return PYDB_OK;
}

/* With the writer lock: finish a compaction that died in its swap (its
 * marker stays) and read the newest file pair (a compaction replaced the
 * files since this handle last looked: docs/compaction.md), then replay
 * the log of a writer that died mid-commit (or one a failed reset left)
 * inside the sequence lock, as a commit's apply would be -- in that
 * order: the log's frames are of the newest pair, as a compaction
 * empties the log before it swaps. */
static int recover_newest(pydb_db *db, int *failed, pydb_error *err)
{
    int finished, rc;
    pydb_wal_files w;
    rc = pydb__swap_recover(db->mst.path, db->xrf.path, pydb__db_shm(db),
                            &finished, err);
    if (rc == PYDB_OK) rc = pydb__files_sync(db, err);
    if (rc) return rc;
    w = pydb__wal_files(db);
    return pydb__wal_recover(&w, failed, err);
}

void pydb__txn_tidy_tail(pydb_db *db)
{
    pydb_txn t;
    pydb_ctl c;
    pydb_error ignored;
    int failed = 0;

    /* what a transaction's begin does: recovery first (a writer that died
     * after its commit point: its records past the end are committed,
     * and the replay moves the end past them), the state, the tail */
    if (recover_newest(db, &failed, &ignored) != PYDB_OK || failed)
        return;
    memset(&t, 0, sizeof t);
    t.db = db;
    if (load_state(db, t.ctl, &ignored) != PYDB_OK) return;
    pydb__ctl_decode(&c, t.ctl);
    t.next_mfn = c.next_mfn;
    t.start = t.pos = t.end0 = pydb__ctl_end(c.next_block, c.next_pos);
    (void)check_tail(&t, &ignored);
}

/* A begin waiting for its handle's collector past its own timeout looks
 * again this often (a step's end wakes it at once). */
#define OWN_GC_SLICE_MS 50


/* pydb_txn_begin(); `gc`: a collector step, which goes first. */
static int txn_begin(pydb_txn **out, pydb_db *db, int timeout_ms, int gc,
                     pydb_error *err)
{
    pydb_txn *t = NULL;
    int64_t deadline = pydb__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int rc, failed = 0, collector = gc;

    *out = NULL;
    if (!(db->flags & PYDB_OPEN_WRITE))
        return PYDB_ERROR(err, PYDB_EREADONLY, db->mst.path, -1,
                          "the database was opened read-only");
    if (pydb__txn_read_only(db)) return fatal_error(db, err);
    pthread_mutex_lock(&db->wmutex);
    /* A fork()ed child: a transaction (or a collector step) of its
     * parent's threads was open at the fork; those threads are not here
     * and never end it. */
    if (db->wbusy && db->wbusy_pid != getpid()) db->wbusy = 0;
    rc = mine_open(db, err);
    if (rc) {
        pthread_mutex_unlock(&db->wmutex);
        return rc;
    }
    gc = gc && timeout_ms > 0;   /* one try: nobody needs to stand back */
    db->gc_waiting += gc;
    while ((rc = pydb__closing_error(db, err)) == PYDB_OK &&
           (db->wbusy || (!gc && db->gc_waiting))) {
        /* the handle's own collector: waited for ("Locks" above) */
        if (!collector && (db->wbusy ? db->wbusy_gc : 1)) {
            int64_t slice = pydb__now_ms() + OWN_GC_SLICE_MS;
            pydb__cond_wait_until(&db->wcond, &db->wmutex,
                                  slice > deadline ? slice : deadline);
            continue;
        }
        if (deadline - pydb__now_ms() <= 0) {
            if (gc) {
                db->gc_waiting--;
                pthread_cond_broadcast(&db->wcond);   /* stand back no more */
            }
            pthread_mutex_unlock(&db->wmutex);
            return PYDB_ERROR(err, PYDB_ELOCKED, db->mst.path, -1,
                              "another thread holds the writer lock of this "
                              "handle");
        }
        pydb__cond_wait_until(&db->wcond, &db->wmutex, deadline);
    }
    db->gc_waiting -= gc;
    if (rc) {   /* closing: the next waiter sees it too */
        if (gc) pthread_cond_broadcast(&db->wcond);
        pthread_mutex_unlock(&db->wmutex);
        return rc;
    }
    /* Again now that it is this thread's turn: a transaction that failed
     * while this one waited (a collector step waits a little) may have
     * made the handle read-only, and its log must then be replayed by a
     * reopen, not by this handle. */
    if (pydb__txn_read_only(db)) {
        wake_writers(db);   /* the next waiter sees it too */
        pthread_mutex_unlock(&db->wmutex);
        return fatal_error(db, err);
    }
    db->wbusy = 1;
    db->wbusy_gc = collector;
    db->wbusy_pid = getpid();
    db->wowner = pthread_self();
    pthread_mutex_unlock(&db->wmutex);

    rc = pydb__wal_lock(db, deadline, gc, err);
    if (rc) goto fail;   /* (unlocking a lock not held is a no-op) */
    rc = recover_newest(db, &failed, err);
    if (rc) {
        if (failed) set_fatal(db, PYDB__FATAL_SYNC);
        goto fail;
    }
    /* This handle's own commit whose apply failed is in the files now:
     * writable again, and the index change it prepared is served (the
     * replay put its MANIFEST in place). */
    if (__atomic_load_n(&db->fatal, __ATOMIC_ACQUIRE) == PYDB__FATAL_APPLY) {
        __atomic_store_n(&db->fatal, 0, __ATOMIC_RELEASE);
        if (db->hook.publish) db->hook.publish(db->hook.ctx, NULL);
    }
    /* A native index built since the caller last looked, while this
     * handle has none attached: its commits would leave the index behind
     * the records (pydb_index_gen_seen).  Not a collector's step: it
     * changes no record's postings. */
    if (!collector && !db->hook.prepare) {
        uint64_t seen = __atomic_load_n(&db->index_gen_seen, __ATOMIC_ACQUIRE);
        uint64_t now = seen == UINT64_MAX ? 0 : pydb_index_gen(db);
        if (now > seen) {
            rc = PYDB_ERROR(err, PYDB_ENEWINDEX, db->mst.path, -1,
                            "a native index (generation %llu) was built "
                            "since this handle looked for one (generation "
                            "%llu) and none is attached: attach it, then "
                            "begin again", (unsigned long long)now,
                            (unsigned long long)seen);
            goto fail;
        }
    }
    t = calloc(1, sizeof *t);
    if (!t) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
        goto fail;
    }
    t->db = db;
    rc = load_state(db, t->ctl, err);
    if (rc) goto fail;
    {
        pydb_ctl c;
        pydb__ctl_decode(&c, t->ctl);
        t->next_mfn = t->first_new = c.next_mfn;
        t->start = t->pos = t->end0 = pydb__ctl_end(c.next_block, c.next_pos);
    }
    rc = check_tail(t, err);
    if (rc) goto fail;
    *out = t;
    return PYDB_OK;
fail:
    free(t);
    release_writer(db);
    return rc;
}

int pydb_txn_begin(pydb_txn **out, pydb_db *db, int timeout_ms,
                   pydb_error *err)
{
    return txn_begin(out, db, timeout_ms, 0, err);
}

int pydb__txn_begin_gc(pydb_txn **out, pydb_db *db, int timeout_ms,
                       pydb_error *err)
{
    return txn_begin(out, db, timeout_ms, 1, err);
}

int pydb__txn_settle(pydb_txn *t, pydb_error *err)
{
    return checkpoint(t->db, err);
}

/* Add an op writing a new version of `mfn` with these fields/status. */
static int add_version(pydb_txn *t, int32_t mfn, const pydb_field *fields,
                       uint32_t nfields, int status, int deleted,
                       pydb_record *before, int own_before, int flags,
                       pydb_error *err)
{
    pydb_db *db = t->db;
    int64_t mfrl, start, capacity;
    pydb_record *r;
    txn_op *op;
    const pydb_geom *g = &pydb__geom[db->layout];
    int rc;

    rc = pydb__record_size(&mfrl, db->layout, db->mstxl, mfn, fields, nfields,
                           db->mst.path, err);
    if (rc) goto fail;
    capacity = ((int64_t)1 << (20 + db->mstxl)) * PYDB_BLOCK;
    /* (a master file already past it: a sparse file another program, or
     * a damaged log, made; pydb__place() must not overflow) */
    start = t->pos < capacity ? pydb__place(db->layout, db->mstxl, t->pos)
                              : t->pos;
    if (start > capacity - PYDB_BLOCK || mfrl > capacity - PYDB_BLOCK - start) {
        rc = PYDB_ERROR(err, PYDB_ETOOBIG, db->mst.path, start,
                        "the master file would pass %lld bytes, the most an "
                        "XRF pointer can address with MSTXL %d",
                        (long long)capacity, db->mstxl);
        goto fail;
    }
    if (t->nops == t->opcap) {
        size_t nc = t->opcap ? t->opcap * 2 : 16;
        txn_op *o = realloc(t->ops, nc * sizeof *o);
        if (!o) {
            rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
            goto fail;
        }
        t->ops = o;
        t->opcap = nc;
    }
    r = NULL;
    rc = pydb__record_reserve(&r, (size_t)mfrl, nfields, err);
    if (rc) goto fail;
    {
        uint8_t *raw = pydb__record_raw(r);
        pydb_field *f = pydb__record_fields(r, (size_t)mfrl);
        int64_t base = g->leader + (int64_t)nfields * g->entry, d = 0;
        pydb__record_encode(raw, db->layout, mfrl, mfn, fields, nfields,
                            before ? before->offset : -1, status);
        for (uint32_t i = 0; i < nfields; i++) {
            f[i].tag = fields[i].tag;
            f[i].len = fields[i].len;
            f[i].value = raw + base + d;
            d += fields[i].len;
        }
        r->mfn = mfn;
        r->status = status;
        r->deleted = deleted;
        r->flags = flags;
        r->offset = start;
        r->back_offset = before ? before->offset : -1;
        r->mfrl = (uint32_t)mfrl;
        r->locked = 0;
        r->nfields = nfields;
        r->fields = f;
        r->data_len = (size_t)d;
    }
    rc = hput(t, mfn, t->nops, err);
    if (rc) {
        free(r);
        goto fail;
    }
    op = &t->ops[t->nops++];
    op->mfn = mfn;
    op->offset = start;
    op->before = before;
    op->own_before = own_before;
    op->after = r;
    op->deleted_after = deleted;
    op->xrf_raw = pydb__xrf_encode(start, flags, db->mstxl);
    if (deleted) op->xrf_raw = -op->xrf_raw;
    t->pos = start + mfrl;
    return PYDB_OK;
fail:
    if (own_before) pydb_record_free(before);
    return rc;
}

int pydb_txn_append(int32_t *mfn, pydb_txn *t, const pydb_field *fields,
                    uint32_t nfields, pydb_error *err)
{
    int rc;
    if (t->next_mfn >= 0x7FFFFFFF)
        return PYDB_ERROR(err, PYDB_ETOOBIG, t->db->mst.path, -1,
                          "no MFN left (NXTMFN is %d)", (int)t->next_mfn);
    rc = add_version(t, t->next_mfn, fields, nfields, 0, 0, NULL, 0,
                     PYDB_FLAG_NEW, err);
    if (rc) return rc;
    *mfn = t->next_mfn++;
    return PYDB_OK;
}

/* The current version of `mfn` as this transaction sees it. */
static int current(pydb_record **rec, int *own, pydb_txn *t, int32_t mfn,
                   pydb_error *err)
{
    long i = hget(t, mfn);
    int rc;
    *rec = NULL;
    *own = 0;
    if (i >= 0) {
        *rec = t->ops[i].after;
        return PYDB_OK;
    }
    if (mfn < 1 || mfn >= t->next_mfn)
        return PYDB_ERROR(err, PYDB_ENOTFOUND, t->db->mst.path, -1,
                          "MFN %d is outside 1..%d", (int)mfn,
                          (int)(t->next_mfn - 1));
    rc = pydb_read(rec, t->db, mfn, err);
    if (rc) {
        pydb_record_free(*rec);
        *rec = NULL;
        return rc;
    }
    *own = 1;
    return PYDB_OK;
}

/* New XRF flags for a change of a record that had `old`
 * (docs/isis-formats.md §3.2). */
static int changed_flags(int old)
{
    return (old & PYDB_FLAG_NEW) ? PYDB_FLAG_NEW : PYDB_FLAG_PENDING;
}

int pydb_txn_update(pydb_txn *t, int32_t mfn, const pydb_field *fields,
                    uint32_t nfields, pydb_error *err)
{
    pydb_record *cur;
    int own, rc = current(&cur, &own, t, mfn, err);
    if (rc) return rc;
    return add_version(t, mfn, fields, nfields, cur->deleted ? 1 : 0,
                       cur->deleted, cur, own, changed_flags(cur->flags), err);
}

static int set_deleted(pydb_txn *t, int32_t mfn, int deleted, pydb_error *err)
{
    pydb_record *cur;
    int own, rc = current(&cur, &own, t, mfn, err);
    if (rc) return rc;
    if (!!cur->deleted == deleted) {
        if (own) pydb_record_free(cur);
        return PYDB_OK;
    }
    return add_version(t, mfn, cur->fields, cur->nfields, deleted, deleted,
                       cur, own, changed_flags(cur->flags), err);
}

int pydb_txn_delete(pydb_txn *t, int32_t mfn, pydb_error *err)
{
    return set_deleted(t, mfn, 1, err);
}

int pydb_txn_undelete(pydb_txn *t, int32_t mfn, pydb_error *err)
{
    return set_deleted(t, mfn, 0, err);
}

/* pydb_txn_put_file() and pydb__txn_log_file(). */
static int add_file(pydb_txn *t, const char *path, const void *data,
                    size_t len, int in_place, pydb_error *err)
{
    put_file *f;
    char name[PYDB_WAL_MAX_PATH + 1];
    if (!path || strlen(path) > PYDB_WAL_MAX_PATH || (len && !data))
        return PYDB_ERROR(err, PYDB_EINVAL, path ? path : "", -1,
                          "bad path or data for pydb_txn_put_file()");
    if (pydb__wal_file_name(name, sizeof name, t->db->wal_path, path) != 0)
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1, "pydb_txn_put_file(): "
                          "the file must be in the database's folder (or "
                          "below it), in an existing folder");
    f = realloc(t->files, (t->nfiles + 1) * sizeof *f);
    if (!f) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    t->files = f;
    f = &t->files[t->nfiles];
    f->path = strdup(path);
    f->name = strdup(name);
    f->data = malloc(len ? len : 1);
    f->len = len;
    f->in_place = in_place;
    if (!f->path || !f->name || !f->data) {
        free(f->path);
        free(f->name);
        free(f->data);
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    }
    if (len) memcpy(f->data, data, len);
    t->nfiles++;
    return PYDB_OK;
}

int pydb_txn_put_file(pydb_txn *t, const char *path, const void *data,
                      size_t len, pydb_error *err)
{
    return add_file(t, path, data, len, 0, err);
}

int pydb__txn_log_file(pydb_txn *t, const char *path, const void *data,
                       size_t len, pydb_error *err)
{
    if (!t->keep)   /* nothing would ever sync the file */
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1, "pydb__txn_log_file(): "
                          "the commit does not keep its frame in the log");
    return add_file(t, path, data, len, 1, err);
}

int pydb__txn_keeps_frame(const pydb_txn *t)
{
    return t->keep;
}

void pydb__txn_set_index_gen(pydb_txn *t, uint64_t gen)
{
    t->index_gen = gen;
}

pydb_db *pydb__txn_db(const pydb_txn *t)
{
    return t->db;
}

int pydb_set_commit_hook(pydb_db *db, const pydb_commit_hook *hook,
                         pydb_error *err)
{
    /* The collector calls the hook's collect/garbage: no step may run
     * while it changes (the step lock first, as a step takes it before
     * the writer lock). */
    pydb__gc_pause(db);
    pthread_mutex_lock(&db->wmutex);
    if (db->wbusy) {
        pthread_mutex_unlock(&db->wmutex);
        pydb__gc_resume(db);
        return PYDB_ERROR(err, PYDB_EINVAL, db->mst.path, -1,
                          "cannot change the commit hook during a "
                          "transaction");
    }
    if (hook) db->hook = *hook;
    else memset(&db->hook, 0, sizeof db->hook);
    pthread_mutex_unlock(&db->wmutex);
    pydb__gc_resume(db);
    return PYDB_OK;
}

/* ------------------------------------------------------------- commit */

typedef struct xblock {
    int64_t index;
    uint8_t data[PYDB_BLOCK];
} xblock;

static int cmp_block(const void *a, const void *b)
{
    int64_t x = ((const xblock *)a)->index, y = ((const xblock *)b)->index;
    return x < y ? -1 : x > y;
}

/* The region [t->start, region_end(t)) as the .mst holds it: each new
 * version at its offset, block padding zero. */
static void fill_region(uint8_t *d, const pydb_txn *t)
{
    memset(d, 0, (size_t)(region_end(t) - t->start));
    for (size_t i = 0; i < t->nops; i++)
        memcpy(d + (t->ops[i].offset - t->start),
               pydb__record_raw(t->ops[i].after), t->ops[i].after->mfrl);
}

/* A direct commit (wal.h, PYDB_WAL_DIRECT): write the region, already
 * laid out in `region`, past the committed end -- readers never look
 * there before the control record moves -- and fdatasync it, before the
 * frame that makes it committed (also with sync=False: the frame may
 * reach the disk before the region, through a later commit's fsync or
 * the OS's writeback, and a replay would then point the XRF at it).  A
 * failed fdatasync makes the handle read-only (datasync_or_fatal).
 * Nothing is committed on failure. */
static int write_region(pydb_txn *t, const uint8_t *region,
                        pydb_error *err)
{
    pydb_db *db = t->db;
    int64_t end = region_end(t);
    pydb_direct_mark m;
    int e;
    /* the records about to lie past the end are pydb's (check_tail) */
    m.start = t->start;
    m.end = t->end0;
    m.next_mfn = t->first_new;
    m.gen = pydb__files_gen(db);
    pydb__shm_direct_set(pydb__db_shm(db), &m);
    e = -pydb__write_full(db->mst.fd, region, (size_t)(end - t->start),
                          t->start);
    if (e)
        return PYDB_OSERROR(err, e, db->mst.path, t->start,
                            "write failed: %s", strerror(e));
    return datasync_or_fatal(db, db->mst.fd, db->mst.path, "fdatasync", err);
}

/* Build the log image of the transaction: MST region, XRF blocks,
 * control record, whole files.  With `region` (a direct commit, the
 * region written already) only the region's first block goes into the
 * log.  Also fills *mst_end. */
static int build_log(pydb_buf *log, pydb_txn *t, const uint8_t *region,
                     xblock **xb_out, size_t *nxb_out, int64_t *mst_end,
                     uint8_t ctl[PYDB_CTL_SIZE], pydb_error *err)
{
    pydb_db *db = t->db;
    int64_t end = t->pos, padded = region_end(t);
    int64_t old_blocks = pydb__fsize(&db->xrf) / PYDB_BLOCK;
    int64_t need_blocks = pydb__xrf_blocks(t->next_mfn);
    int64_t new_blocks = need_blocks > old_blocks ? need_blocks : old_blocks;
    xblock *xb = NULL;
    size_t nxb = 0, cap = 0;
    uint32_t count = 0;
    uint8_t *d;
    int rc = PYDB_OK;

    if (new_blocks < 1) new_blocks = 1;
    *xb_out = NULL;
    *nxb_out = 0;
    if (pydb__wal_begin(log) != 0) goto nomem;
    /* 1. master file region: [start, padded), or its first block */
    if (padded > t->start) {
        int64_t len = padded - t->start;
        if (region && len > PYDB_BLOCK - t->start % PYDB_BLOCK)
            len = PYDB_BLOCK - t->start % PYDB_BLOCK;
        d = pydb__wal_entry(log, PYDB_WAL_MST, NULL, (uint64_t)t->start,
                            (uint64_t)len, &count);
        if (!d) goto nomem;
        if (region) memcpy(d, region, (size_t)len);
        else fill_region(d, t);
    }
    /* 2. XRF blocks: each touched entry's block, plus the old and new last
     * blocks (XRFPOS sign: negative on the last block only). */
    {
        int64_t want[2] = {old_blocks - 1, new_blocks - 1};
        size_t nwant = old_blocks != new_blocks ? 2 : 0;
        size_t total = t->nops + nwant;
        cap = total ? total : 1;
        xb = malloc(cap * sizeof *xb);
        if (!xb) goto nomem;
        for (size_t i = 0; i < total; i++) {
            int64_t bi = i < t->nops ? (t->ops[i].mfn - 1) / PYDB_XRF_PER_BLOCK
                                     : want[i - t->nops];
            if (bi < 0) continue;
            if (nxb && xb[nxb - 1].index == bi) continue;
            xb[nxb++].index = bi;
        }
        qsort(xb, nxb, sizeof *xb, cmp_block);
        {   /* unique */
            size_t k = 0;
            for (size_t i = 0; i < nxb; i++)
                if (k == 0 || xb[k - 1].index != xb[i].index) xb[k++] = xb[i];
            nxb = k;
        }
        for (size_t i = 0; i < nxb; i++) {
            int64_t bi = xb[i].index;
            if (bi < old_blocks) {
                rc = pydb__file_read(&db->xrf, PYDB_IO_PREAD, xb[i].data,
                                     PYDB_BLOCK, bi * PYDB_BLOCK, "XRF block",
                                     err);
                if (rc) goto cleanup;
            } else {
                memset(xb[i].data, 0, PYDB_BLOCK);
            }
            pydb__put32(xb[i].data, (uint32_t)(bi == new_blocks - 1
                                                   ? -(bi + 1) : bi + 1));
        }
        /* Blocks between the old end and a new last block must exist too
         * (XRFPOS + zero entries) when a transaction skips none: appends are
         * consecutive, so every new block holds an op -- except when no op
         * lands in it, which cannot happen (MFNs are dense). */
        /* a new MFN's entry is 0 in the file (lagging_ctl_error): all are
         * looked at before any is set (an MFN may have several ops) */
        for (int pass = 0; pass < 2; pass++) {
            for (size_t i = 0; i < t->nops; i++) {
                int64_t bi = (t->ops[i].mfn - 1) / PYDB_XRF_PER_BLOCK;
                size_t lo = 0, hi = nxb;
                uint8_t *slot;
                while (lo < hi) {
                    size_t mid = (lo + hi) / 2;
                    if (xb[mid].index < bi) lo = mid + 1;
                    else hi = mid;
                }
                slot = xb[lo].data + 4 +
                       ((t->ops[i].mfn - 1) % PYDB_XRF_PER_BLOCK) * 4;
                if (pass == 1) {
                    pydb__put32(slot, (uint32_t)t->ops[i].xrf_raw);
                } else if (t->ops[i].mfn >= t->first_new &&
                           pydb__u32(slot) != 0) {
                    rc = lagging_ctl_error(
                        db, t->ops[i].mfn, (int32_t)pydb__u32(slot),
                        t->first_new, bi * PYDB_BLOCK + (slot - xb[lo].data),
                        err);
                    goto cleanup;
                }
            }
        }
        for (size_t i = 0; i < nxb;) {
            size_t j = i + 1;
            while (j < nxb && xb[j].index == xb[j - 1].index + 1) j++;
            d = pydb__wal_entry(log, PYDB_WAL_XRF, NULL,
                          (uint64_t)(xb[i].index * PYDB_BLOCK),
                          (uint64_t)((j - i) * PYDB_BLOCK), &count);
            if (!d) goto nomem;
            for (size_t k = i; k < j; k++)
                memcpy(d + (k - i) * PYDB_BLOCK, xb[k].data, PYDB_BLOCK);
            i = j;
        }
    }
    /* 3. control record, last of the ISIS writes */
    memcpy(ctl, t->ctl, PYDB_CTL_SIZE);
    pydb__ctl_set_next(ctl, t->next_mfn, end);
    d = pydb__wal_entry(log, PYDB_WAL_MST, NULL, 0, PYDB_CTL_SIZE, &count);
    if (!d) goto nomem;
    memcpy(d, ctl, PYDB_CTL_SIZE);
    /* 4. whole files */
    for (size_t i = 0; i < t->nfiles; i++) {
        d = pydb__wal_entry(log, PYDB_WAL_FILE, t->files[i].name, 0,
                            t->files[i].len, &count);
        if (!d) goto nomem;
        if (t->files[i].len) memcpy(d, t->files[i].data, t->files[i].len);
    }
    /* header and trailer */
    if (pydb__wal_seal(log, count, ++db->commit_seq,
                       pydb__shm_log_synced_len(pydb__db_shm(db))) != 0)
        goto nomem;
    *mst_end = padded;
    *xb_out = xb;
    *nxb_out = nxb;
    return PYDB_OK;
nomem:
    rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for the log");
cleanup:
    free(xb);
    return rc;
}

/* ------------------------------------------- commits without fsync
 *
 * With sync=False (PYDB_OPEN_NOSYNC) a commit's frame stays in the log as
 * with sync=True, but is not fdatasync'ed -- unless the commit would
 * write in place a unit of which no synced frame of this log holds a
 * whole copy.  The units are the control record, each XRF block (frames
 * hold whole blocks) and each whole file (a MANIFEST); record bytes go
 * past the committed end, where nothing points before the control record
 * and the XRF say so.  After a power cut the log is a synced prefix plus
 * whatever the OS wrote of the rest: recovery replays its complete
 * frames, at least up to the last fdatasync, and writes every unit they
 * hold with its last value (wal.c, wal_final_image).  Any unit written in
 * place since the last checkpoint is among them -- its first write in
 * place came after a synced frame that holds it -- so the files end as
 * after one commit, with no byte of a lost commit left: a whole prefix,
 * never a damaged database (SQLite's synchronous=NORMAL in WAL mode
 * syncs its log only at checkpoints; pydb writes in place at once, for
 * readers and other ISIS programs, so it needs these few syncs: one for
 * the first commit after a checkpoint, then one per XRF block first
 * written -- appends fill a block's 127 entries before the next).
 *
 * A handle remembers what its own synced frames held (a process' other
 * handles and other processes sync for themselves: a frame it did not
 * sync is not counted, which only costs a sync), for the log whose first
 * frame has the id in the commit header (wal.h): a checkpoint, a
 * replay or another process empties the log, the next first frame has
 * another id, and the memory is dropped.  All of it runs with the writer
 * lock held. */

static void img_reset(pydb_db *db, uint32_t first)
{
    if (db->img_xrf) memset(db->img_xrf, 0, db->img_xrf_bytes);
    for (size_t i = 0; i < db->img_nfiles; i++) free(db->img_files[i]);
    db->img_nfiles = 0;
    db->img_ctl = 0;
    db->img_first = first;
}

void pydb__txn_img_free(pydb_db *db)
{
    img_reset(db, 0);
    free(db->img_xrf);
    db->img_xrf = NULL;
    db->img_xrf_bytes = 0;
}

static int img_has_file(const pydb_db *db, const char *name)
{
    for (size_t i = 0; i < db->img_nfiles; i++)
        if (strcmp(db->img_files[i], name) == 0) return 1;
    return 0;
}

/* 1 if synced frames of the log as it is now hold every unit that the
 * commit writes in place (its frame then needs no fdatasync). */
static int img_holds(const pydb_db *db, const pydb_txn *t, const xblock *xb,
                     size_t nxb)
{
    uint64_t len;
    uint32_t first;
    if (!pydb__shm_log_applied(pydb__db_shm(db), &len, &first) || len == 0 ||
        first != db->img_first || !db->img_ctl)
        return 0;
    for (size_t i = 0; i < nxb; i++) {
        uint64_t bi = (uint64_t)xb[i].index;
        if (bi / 8 >= db->img_xrf_bytes ||
            !(db->img_xrf[bi / 8] & (1u << (bi % 8))))
            return 0;
    }
    for (size_t i = 0; i < t->nfiles; i++)
        if (!t->files[i].in_place && !img_has_file(db, t->files[i].name))
            return 0;
    return 1;
}

/* After a commit whose frame was fdatasync'ed, applied and marked in the
 * header: remember the units it holds.  What does not fit (no memory,
 * more than PYDB_IMG_FILES files) is left out: a later commit syncs. */
static void img_add(pydb_db *db, const pydb_txn *t, const xblock *xb,
                    size_t nxb)
{
    uint64_t len;
    uint32_t first;
    if (!pydb__shm_log_applied(pydb__db_shm(db), &len, &first) || len == 0) {
        img_reset(db, 0);
        return;
    }
    if (first != db->img_first) img_reset(db, first);
    db->img_ctl = 1;
    for (size_t i = 0; i < nxb; i++) {
        uint64_t bi = (uint64_t)xb[i].index;
        if (bi / 8 >= db->img_xrf_bytes) {
            size_t n = db->img_xrf_bytes ? db->img_xrf_bytes : 64;
            uint8_t *p;
            while (n <= bi / 8) n *= 2;
            p = realloc(db->img_xrf, n);
            if (!p) continue;
            memset(p + db->img_xrf_bytes, 0, n - db->img_xrf_bytes);
            db->img_xrf = p;
            db->img_xrf_bytes = n;
        }
        db->img_xrf[bi / 8] |= (uint8_t)(1u << (bi % 8));
    }
    for (size_t i = 0; i < t->nfiles; i++) {
        if (t->files[i].in_place || img_has_file(db, t->files[i].name) ||
            db->img_nfiles >= PYDB_IMG_FILES)
            continue;
        db->img_files[db->img_nfiles] = strdup(t->files[i].name);
        if (db->img_files[db->img_nfiles]) db->img_nfiles++;
    }
}

/* ------------------------------------------- one fsync for many commits
 *
 * A durable commit's fdatasync is most of its time (100-200 us on an
 * SSD).  Made with the writer lock held, it kept every writer of other
 * handles and processes waiting, one fsync each.  A sync=True commit
 * whose frame needs no fsync to be safe (img_holds: each unit it writes
 * in place has a synced copy in this log, the argument of "Commits
 * without fsync") writes its frame, applies and publishes it, lets the
 * writer lock go, and only then waits until an fdatasync covers its
 * frame (log_durable_to): the next writer writes its frame meanwhile,
 * and one fdatasync covers every frame in the log when it starts.  The
 * header keeps the log's synced mark (shm.h), which every fdatasync of a
 * frame raises: a commit whose frame ends below it returns at once;
 * others take the sync lock (a commit that waited for it finds its
 * frame covered, most often), fdatasync the log and raise the mark to
 * the applied length they read before -- PostgreSQL's XLogFlush,
 * which flushes what is written and lets the backends whose records lie
 * below the flushed point return (src/backend/access/transam/xlog.c).
 * Commits that write a unit in place with no synced copy (the first
 * after a checkpoint, a new XRF block, a new MANIFEST) sync with the
 * lock held, as before, and their frame then gives the copies.
 *
 * Why an fdatasync of the log is enough even when the log changed: it is
 * emptied only after the files were synced (a checkpoint, a replay, a
 * files-mode commit), and a failed sync that drops the header's length
 * leaves the log as it was.  A mark names its log by the first frame's
 * id, so a mark raised late for a log that is gone says nothing of the
 * next one.
 *
 * What a caller sees: its commit is durable when the call returns, as
 * before; a failed fdatasync makes the handle read-only and the outcome
 * unknown (the commit is applied, but the log may have lost it).  Since
 * the frame is counted in the header's length by then, a failed
 * fdatasync names the log suspect in the header (recovery replays it,
 * rather than append behind a frame the disk may lack), and every
 * fdatasync of a frame runs under the handle's lsmutex with the
 * failure's set_fatal and looks at that name after it succeeds, so that
 * another thread of the handle or another process, whose own fdatasync
 * would succeed (Linux reports a writeback error once per open file
 * description), fails its commit too (log_sync).  Other
 * readers may see the commit during that fsync, before it is durable; a
 * power cut then loses it like any commit whose call had not returned,
 * and a later commit -- one that read it, say -- lies after it in the
 * log, so it cannot be durable without it. */

/* fdatasync the log for a frame -- a commit point, or a deferred
 * commit's -- under lsmutex together with the set_fatal of a failure:
 * Linux reports a writeback error once per open file description, so a
 * thread of this handle whose sync follows another's failed one would
 * see success for a log that may have lost an earlier frame; it is told
 * of the failure instead.  A failure names the header's log suspect at
 * once (shm.h), so that recovery replays it and a process that opened
 * the log after the error, whose own fdatasync succeeds, does not
 * acknowledge a frame behind a lost one either; the sync fence (wal.c)
 * holds a handle that opens the log meanwhile until the failure is
 * named.  PYDB_OK, or PYDB_EIO (after a failure of its own the handle is
 * read-only). */
static int log_sync(pydb_db *db, pydb_error *err)
{
    pydb_shm *shm = pydb__db_shm(db);
    int e = 0, rc = PYDB_OK;
    pthread_mutex_lock(&db->lsmutex);
    if (pydb__txn_read_only(db)) {
        rc = PYDB_OSERROR(err, EIO, db->wal_path, -1, "an earlier fsync of "
                          "this handle failed: the write-ahead log may "
                          "have lost a frame");
        goto cleanup;
    }
    /* the fence stays up until a failure is named (wal.c, "sync fence") */
    pydb__wal_fence_hold(db);
    if (pydb__vfs->fdatasync(db->wal_fd) != 0) {
        e = errno;
        pydb__shm_log_suspect_set(shm);
    }
    pydb__wal_fence_release(db);
    if (e) {
        set_fatal(db, PYDB__FATAL_SYNC);
        rc = PYDB_OSERROR(err, e, db->wal_path, -1,
                          "fdatasync of the write-ahead log failed: %s",
                          strerror(e));
    } else if (pydb__shm_log_suspect(shm)) {
        rc = PYDB_OSERROR(err, EIO, db->wal_path, -1, "an fdatasync of this "
                          "write-ahead log failed in another handle or "
                          "process: it may have lost a frame");
    }
cleanup:
    pthread_mutex_unlock(&db->lsmutex);
    return rc;
}

int pydb__txn_log_durable(pydb_txn *t, pydb_error *err)
{
    return log_sync(t->db, err);
}

/* How long a deferred commit waits for the sync lock before it syncs
 * without it and marks the holder stale (a stopped holder, or one slower
 * than that; one that died is seen at once: shm.h), in microseconds of
 * sleep asked for, in naps that a sync's end cuts short (shm.h,
 * pydb__shm_sync_wait). */
#define SYNC_LOCK_WAIT_US 1000000
#define SYNC_NAP_US 1000

/* Return once an fdatasync covered bytes [0, end) of the log whose first
 * frame has id `first` (0: unknown; then this call syncs).  Without the
 * writer lock.  PYDB_OK, or PYDB_EIO (log_sync's). */
static int log_durable_to(pydb_db *db, uint32_t first, uint64_t end,
                          pydb_error *err)
{
    pydb_shm *shm = pydb__db_shm(db);
    uint64_t len = 0;
    uint32_t now = 0;
    unsigned waited = 0;
    int locked = 0, rc = PYDB_OK;
    for (;;) {
        /* counted as waiting before the looks: a sync that ends after
         * them wakes this commit, or moves the word it sleeps on */
        uint32_t ticket = pydb__shm_sync_ticket(shm);
        int got = -1;
        if (pydb__shm_log_synced(shm, first, end)) {
            pydb__shm_sync_wait(shm, ticket, 0);
            goto cleanup;
        }
        if (!locked) {
            got = pydb__shm_sync_lock(shm, 1);
            locked = got == 0;
        }
        if (locked || got != 1 || waited >= SYNC_LOCK_WAIT_US) {
            pydb__shm_sync_wait(shm, ticket, 0);
            if (locked && got == 0) continue;   /* look once more */
            if (!locked && got == 1) pydb__shm_sync_lock_stale(shm);
            break;
        }
        pydb__shm_sync_wait(shm, ticket, SYNC_NAP_US);
        waited += SYNC_NAP_US;
    }
    /* what this fdatasync covers: the frames applied before it starts */
    if (!pydb__shm_log_applied(shm, &len, &now)) len = 0;
    rc = log_sync(db, err);
    if (rc == PYDB_OK && len) pydb__shm_log_synced_to(shm, now, len);
cleanup:
    if (locked) {
        pydb__shm_sync_lock(shm, 0);
        pydb__shm_sync_done(shm);   /* the mark moved, the lock is free */
    }
    return rc;
}

/* A failed commit's outcome into err->committed, and into its message
 * when the transaction is committed anyway (the caller must not retry). */
static void commit_outcome(pydb_error *err, int logged, int log_sync_failed,
                           int read_only)
{
    size_t len = strlen(err->message);
    if (logged) {
        err->committed = PYDB_COMMIT_DURABLE;
        snprintf(err->message + len, sizeof err->message - len,
                 " (the transaction IS committed: the write-ahead log holds "
                 "it; this handle's next transaction applies it first, or "
                 "the next open does)");
    } else if (log_sync_failed) {
        err->committed = PYDB_COMMIT_UNKNOWN;
        snprintf(err->message + len, sizeof err->message - len,
                 " (the transaction may or may not be committed: reopen the "
                 "database to see; this handle is read-only until then)");
    } else {
        err->committed = PYDB_COMMIT_NO;
        if (read_only)   /* a direct commit's records failed their fsync */
            snprintf(err->message + len, sizeof err->message - len,
                     " (the transaction is not committed; this handle is "
                     "read-only until the database is reopened)");
    }
}

int pydb_txn_commit(pydb_txn *t, pydb_error *err)
{
    pydb_error local;   /* err NULL: the commit still reads its errors */
    pydb_db *db = t->db;
    pydb_change *changes = NULL;
    pydb_buf log = {0};
    xblock *xb = NULL;
    size_t nxb = 0;
    int64_t mst_end = 0;
    uint8_t ctl[PYDB_CTL_SIZE];
    int rc = PYDB_OK, e, hooked = 0;
    int fsync_failed = 0;   /* an fsync of the apply failed (also set by
                               pydb__replace_file()) */
    int log_sync_failed = 0, logged = 0, applied = 0;
    /* With a usable header the frame stays in the log, and the .mst/.xrf
     * are synced at checkpoints (wal.h).  Without one the log is emptied
     * after each commit, so nothing would order the files' writes: the
     * commit syncs as with sync=True. */
    int keep = t->keep = pydb__shm_log_usable(pydb__db_shm(db));
    int sync = pydb__synced(db) || !keep;
    int frame_sync = 1;   /* this commit fdatasyncs its frame */
    int defer = 0;        /* ... after the writer lock (sync=True) */
    uint32_t log_first = 0;   /* the log its frame is in, and where */
    uint64_t frame_end = 0;   /* the frame ends ("One fsync for many") */
    int64_t log_at = 0;
    uint8_t *region = NULL;   /* a direct commit's region (wal.h) */
    int64_t mst_size = pydb__fsize(&db->mst);   /* true: load_state's */
    pydb_ctl newctl;
    uint64_t s;

    if (!err) {
        memset(&local, 0, sizeof local);
        err = &local;
    }
    if (t->nops == 0 && t->nfiles == 0) goto done;  /* nothing to write */
    if (db->hook.prepare && t->nops) {
        changes = calloc(t->nops, sizeof *changes);
        if (!changes) {
            rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
            goto done;
        }
        for (size_t i = 0; i < t->nops; i++) {
            changes[i].mfn = t->ops[i].mfn;
            changes[i].before = t->ops[i].before;
            changes[i].after = t->ops[i].deleted_after ? NULL
                                                       : t->ops[i].after->fields;
            changes[i].nafter = t->ops[i].deleted_after
                                    ? 0 : t->ops[i].after->nfields;
            changes[i].deleted_after = t->ops[i].deleted_after;
            changes[i].appended = t->ops[i].mfn >= t->first_new;
        }
        rc = db->hook.prepare(db->hook.ctx, t, changes, t->nops, err);
        if (rc) goto done;
        hooked = 1;
    }
    if (region_end(t) - t->start >= PYDB_WAL_DIRECT) {
        region = malloc((size_t)(region_end(t) - t->start));
        if (!region) {
            rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                            "no memory for the records");
            goto done;
        }
        fill_region(region, t);
        rc = write_region(t, region, err);
        if (rc) goto done;
    }
    /* The log, then the commit point.  A log that cannot grow (a full
     * disk, a file size limit) while it holds commits since the last
     * checkpoint is emptied by one, and the frame, made again for the
     * empty log, tried once more: else every commit would fail until a
     * collection or a reopen checkpointed.  Not for a collector's step
     * (wbusy_gc: this thread's own hold): its failure is recorded and
     * the step tried again later, and a checkpoint whose fsync fails
     * would make the application's handle read-only for it. */
    for (int tries = 0;; tries++) {
        pydb_error scratch;
        int crc;
        rc = build_log(&log, t, region, &xb, &nxb, &mst_end, ctl, err);
        if (rc) goto done;
        if (keep) frame_sync = !img_holds(db, t, xb, nxb);
        defer = sync && !frame_sync;   /* (keep: a sync=True handle's) */
        rc = pydb__wal_append(db, &log, keep, &log_at, err);
        if (rc == PYDB_OK || tries > 0 || !keep || log_at == 0 ||
            db->wbusy_gc || !log_cannot_grow(err))
            break;
        if ((crc = checkpoint(db, &scratch)) != PYDB_OK) {
            /* its error, not the log's: a failed fsync made the handle
             * read-only, and the caller must be told why */
            rc = crc;
            *err = scratch;
            break;
        }
        pydb__buf_free(&log);
        free(xb);
        xb = NULL;
        nxb = 0;
    }
    if (rc == PYDB_OK && frame_sync && (rc = log_sync(db, err)) != PYDB_OK)
        log_sync_failed = 1;
    if (rc) {
        if (log_sync_failed) {
            set_fatal(db, PYDB__FATAL_SYNC);
            hooked = 0;   /* the log may be durable anyway: see apply_failed */
        }
        goto done;
    }
    logged = 1;
    /* Readers that see the control record change before the header are
     * told a live writer is applying this commit (shm.h). */
    pydb__shm_applying(pydb__db_shm(db), 1);

    /* Apply.  Record bytes first (unreachable until the XRF says so;
     * a direct commit's are there already).  A transaction of whole files
     * only (an index build or merge) changes no byte of the master file:
     * neither the zero fill past the end of records nor an unchanged
     * control record is written (the file's mtime stays, which backup
     * tools and the librarian see; a replay of the frame writes the same
     * bytes). */
    /* logged before a committed byte changes: durable, or (sync=False)
     * behind synced copies of every unit written in place */
    PYDB_ASSERT(logged);
    if (t->nops && !region && mst_end > t->start) {
        /* the first entry is the MST region */
        const uint8_t *p = log.p + PYDB_WAL_HEAD + PYDB_WAL_ENTRY;
        e = -pydb__write_full(db->mst.fd, p, (size_t)(mst_end - t->start),
                              t->start);
        if (e) {
            rc = PYDB_OSERROR(err, e, db->mst.path, t->start,
                              "write failed: %s", strerror(e));
            goto apply_failed;
        }
    }
    pydb__fsize_raise(&db->mst, mst_end);
    s = __atomic_add_fetch(&db->seq, 1, __ATOMIC_ACQ_REL);   /* odd */
    PYDB_ASSERT(s & 1);
    for (size_t i = 0; i < nxb; i++) {
        e = -pydb__write_full(db->xrf.fd, xb[i].data, PYDB_BLOCK,
                              xb[i].index * PYDB_BLOCK);
        if (e) {
            __atomic_add_fetch(&db->seq, 1, __ATOMIC_RELEASE);
            rc = PYDB_OSERROR(err, e, db->xrf.path, xb[i].index * PYDB_BLOCK,
                              "write failed: %s", strerror(e));
            goto apply_failed;
        }
        pydb__fsize_raise(&db->xrf, (xb[i].index + 1) * PYDB_BLOCK);
    }
    e = t->nops || memcmp(ctl, t->ctl, PYDB_CTL_SIZE) != 0
            ? -pydb__write_full(db->mst.fd, ctl, PYDB_CTL_SIZE, 0) : 0;
    if (e) {
        __atomic_add_fetch(&db->seq, 1, __ATOMIC_RELEASE);
        rc = PYDB_OSERROR(err, e, db->mst.path, 0, "write failed: %s",
                          strerror(e));
        goto apply_failed;
    }
    pydb__ctl_decode(&newctl, ctl);
    s = __atomic_add_fetch(&db->seq, 1, __ATOMIC_RELEASE);   /* even */
    PYDB_ASSERT((s & 1) == 0);

    if (!keep) {   /* (sync is set: see keep) */
        if (pydb__vfs->fdatasync(db->mst.fd) != 0) {
            e = errno;
            rc = PYDB_OSERROR(err, e, db->mst.path, -1,
                              "fdatasync failed: %s", strerror(e));
            fsync_failed = 1;
            goto apply_failed;
        }
        if (pydb__vfs->fdatasync(db->xrf.fd) != 0) {
            e = errno;
            rc = PYDB_OSERROR(err, e, db->xrf.path, -1,
                              "fdatasync failed: %s", strerror(e));
            fsync_failed = 1;
            goto apply_failed;
        }
    }
    for (size_t i = 0; i < t->nfiles; i++) {
        if (t->files[i].in_place) continue;   /* written by the caller */
        /* kept in the log (synced at a checkpoint, replayed after a
         * power cut): into the spare, whose name is swapped in -- no
         * file created or removed per commit; else a new file renamed
         * in, synced */
        if (keep)
            rc = pydb__swap_file(t->files[i].path, t->files[i].data,
                                 t->files[i].len, err);
        else
            rc = pydb__replace_file(t->files[i].path, NULL, t->files[i].data,
                                    t->files[i].len, 1, &fsync_failed,
                                    err);
        if (rc) goto apply_failed;
    }
    applied = 1;
    if (hooked && db->hook.publish) db->hook.publish(db->hook.ctx, t);
    hooked = 0;
    /* Master-file garbage (compact.c): each version this commit
     * superseded (an update's or deletion's before version, including
     * versions of this same transaction) becomes a back version. */
    {
        int64_t gv = 0, gb = 0;
        for (size_t i = 0; i < t->nops; i++)
            if (t->ops[i].before) {
                gv++;
                gb += t->ops[i].before->mfrl;
            }
        pydb__shm_garbage_add(pydb__db_shm(db), gv, gb);
    }
    /* Readers in every process see the commit from here on (the handle's
     * view, which plain reads take as a floor, follows the header). */
    pydb__header_publish(db, &newctl, t->index_gen, 1);
    pydb__view_set_writer(db, newctl.next_mfn, newctl.next_block,
                          newctl.next_pos, newctl.reccnt);
    /* The commit is in the files.  Kept: the log's length is applied
     * (a checkpoint once it is long; one that fails does not undo the
     * commit -- a failed fsync makes the handle read-only, and the next
     * transaction says so).  Else empty the log; if that fails, the log
     * still holds this (applied) commit, replaying it is harmless and
     * the next transaction tries again, so the commit is reported as
     * done -- unless it held commits of another handle kept for a
     * checkpoint, whose .mst/.xrf bytes are not synced: a checkpoint. */
    PYDB_ASSERT(logged && applied);   /* reset only after the apply */
    if (keep) {
        int64_t end = log_at + (int64_t)log.n;
        uint64_t len;
        pydb__wal_mark_applied(db, log_at, &log);
        if (pydb__shm_log_applied(pydb__db_shm(db), &len, &log_first))
            frame_end = (uint64_t)end;
        if (frame_sync) {   /* its fdatasync covered the log up to it */
            img_add(db, t, xb, nxb);
            pydb__shm_log_synced_to(pydb__db_shm(db), log_first, frame_end);
            pydb__shm_sync_done(pydb__db_shm(db));
        }
        for (size_t i = 0; i < t->nfiles; i++)
            db->logged_files += (size_t)t->files[i].in_place;
        if (end >= PYDB_WAL_CHECKPOINT ||
            db->logged_files >= PYDB_WAL_CHECKPOINT_FILES)
            (void)checkpoint(db, NULL);   /* (a deferred commit then
                                             syncs the emptied log) */
    } else if (log_at > 0) {
        (void)checkpoint(db, NULL);
    } else {
        pydb__wal_discard(db);
    }
    pydb__gc_notify(db);   /* the commit may have made garbage */
    goto done;

apply_failed:
    if (defer) {   /* its frame waits for an fdatasync: now, locked */
        pydb_error scratch;   /* (err says why the apply failed) */
        defer = 0;
        if (log_sync(db, &scratch) != PYDB_OK) {
            logged = 0;   /* the outcome is unknown (commit_outcome) */
            log_sync_failed = fsync_failed = 1;
        }
    }
    /* The log is durable (or, with NOSYNC, in the page cache): reopening
     * replays it, and so does this handle's next pydb_txn_begin() unless
     * an fsync failed (then the page cache cannot be trusted: read-only
     * until reopened, PostgreSQL's fsyncgate lesson).  Meanwhile the
     * handle's view may be partial.  The hook's prepared files are named
     * by the durable log (recovery puts them in place): neither publish
     * nor abort (which would delete them) is called here. */
    set_fatal(db, fsync_failed ? PYDB__FATAL_SYNC : PYDB__FATAL_APPLY);
    hooked = 0;
done:
    if (region) {
        /* the mark's work is done once the commit is logged (recovery
         * finishes it) or its records are cleared; else the next begin's */
        int cleared = 0;
        if (rc && !logged && !log_sync_failed)
            cleared = clear_past_end(t, mst_size) == 0;
        if (logged || cleared) pydb__shm_direct_clear(pydb__db_shm(db));
    }
    if (rc && err)
        commit_outcome(err, logged, log_sync_failed, pydb__txn_read_only(db));
    /* cleared once published; a commit whose apply failed leaves it, so
     * that readers keep the header's latest state rather than the files
     * half-applied (the replay that finishes the commit clears it) */
    if (logged && applied) pydb__shm_applying(pydb__db_shm(db), 0);
    if (rc && hooked && db->hook.abort) db->hook.abort(db->hook.ctx, t);
    free(changes);
    free(region);
    pydb__buf_free(&log);
    free(xb);
    release_writer(db);
    if (rc == PYDB_OK && defer &&
        (rc = log_durable_to(db, log_first, frame_end, err)) != PYDB_OK &&
        err)
        commit_outcome(err, 0, 1, 1);
    txn_free(t);
    return rc;
}

void pydb_txn_abort(pydb_txn *t)
{
    if (!t) return;
    release_writer(t->db);
    txn_free(t);
}

