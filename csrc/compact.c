/*
 * compact.c - the master file's collection job: the versions of the
 * latest commit copied into a new .mst/.xrf pair that replaces the old
 * one atomically (as CISIS's mxcp copies a master file), in bounded
 * steps; see compact.h and docs/compaction.md.
 *
 * The job.  Copy phase, without the writer lock: a state S of the latest
 * commit (not registered: the master file is append-only, so S stays
 * readable while the files are not replaced, and only a compaction
 * replaces them); MFNs 1..S.next_mfn-1 are copied `budget` per step into
 * <mst>-compact / <xrf>-compact, each record's version visible in S,
 * with MFBWB/MFBWP 0 (no back versions), its leader STATUS, its XRF
 * flags and the sign of its XRF pointer (logically deleted records stay
 * logically deleted); a record whose XRF says "update pending" keeps one
 * back version, the one an ISIS inverted file reflects (copy_mfn);
 * never-used and physically deleted entries keep their XRF values.  Placement follows the writer's rules (record.c:
 * pydb__place, pydb__record_size/encode), as txn.c and build.c do.
 *
 * Swap phase (the last step), under the writer lock (pydb_txn_begin:
 * the log replayed and empty, no commit in flight), waiting at most
 * lock_ms: the MFNs later commits changed (XRF pointer >= S.mst_end, MFN
 * >= S.next_mfn) are copied again, in their latest version; if there are
 * more than 4 x budget, the lock is released and they are copied without
 * it from the newer state, and the next step tries again.  No registered
 * reader may be behind the latest commit at the swap (a snapshot of an
 * older commit would need the old files): the swap waits for such
 * readers a bounded time (drain_readers), else the job waits.  Then: the
 * control record (the old one's bytes, MFTYPE, MSTXL, RECCNT... kept,
 * with the new NXTMFN/NXTMFB/NXTMFP) and the XRF are written, the
 * log checkpointed (pydb__txn_settle: the old files synced, the log
 * emptied durably), both new
 * files fsync'ed (with sync=False too), the swap marker <mst>-swap created and the directory
 * fsync'ed, <xrf>-compact renamed over the .xrf and <mst>-compact over
 * the .mst, the directory fsync'ed, the new state published as the next
 * file generation (wal.c: pydb__swap_publish, with the swap record that
 * lets a snapshot of the replaced commit read on), the marker removed,
 * and the handle switched to the new files (read.c: pydb__files_sync).
 * Recovery (wal.c: pydb__swap_recover, at every writer-lock taking and a
 * read-only open that can write) finishes a swap whose marker exists and
 * removes the new files of a job that has none.
 *
 * A failure before the renames removes the job's files and leaves the
 * database as it was (the garbage stays counted); a failure of the
 * second rename after the first is retried (the marker makes recovery
 * finish it otherwise).
 *
 * Depends on: txn.c (the writer lock), read.c (versions as of a state,
 * the handle's file switch), wal.c (swap names, publish, recovery),
 * shm.c (garbage counters, reader table), record.c, util.c, vfs.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "compact.h"
#include "shm.h"
#include "wal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct pydb_compact pydb_compact;

#define CATCHUP_FACTOR 4   /* MFNs caught up under the lock: 4 x budget */
#define DRAIN_GAP 10       /* after a wait that failed: none for 10 x it  */

struct pydb_compact {
    pydb_state S;          /* the state being copied                     */
    int32_t next;          /* next MFN of S to copy                      */
    int fd_mst, fd_xrf;    /* the new files                              */
    int64_t pos;           /* next free byte of the new .mst             */
    int32_t *xrf;          /* XRF value per MFN - 1 (0: not yet)         */
    uint32_t *len;         /* bytes of the copy per MFN - 1 (0: none)    */
    size_t cap;
    int64_t dead_b;        /* bytes of copies made dead by a catch-up    */
    uint64_t gen;          /* file generation the job copies             */
    int forward;           /* the .xrf was replaced: keep the .mst's new
                              file for recovery whatever happens        */
    int swapped;           /* the files were replaced: the job is over   */
    pid_t pid;             /* the process that runs it (a fork()ed child
                              leaves its parent's job alone)            */
    pydb_record *rec;
    pydb_record *inv;      /* the inverted version of a pending record  */
    uint8_t *buf;
    size_t bufcap;
    char nm[1200], nx[1200], mk[1200];
    char tm[1200], tx[1200];   /* the files replaced (links followed)   */
};

/* ------------------------------------------------------------ counting */

void pydb__compact_garbage(pydb_db *db, int64_t *versions, int64_t *bytes)
{
    pydb_shm *shm = pydb__db_shm(db);
    *versions = *bytes = 0;
    if (!shm || __atomic_load_n(&db->shm_stale, __ATOMIC_ACQUIRE)) return;
    pydb__shm_garbage(shm, versions, bytes);
}

/* Whether registered readers pin the garbage: one that reads a commit
 * behind the latest registered PYDB_COMPACT_DRAIN_MAX_MS or more ago
 * (the reader table keeps when each registered; an old snapshot:
 * Firebird's stuck OIT).  Younger readers do not: the swap waits for
 * them to leave (drain_readers).  Without that, readers whose snapshots
 * overlapped (each short, always one behind a writer that commits on)
 * kept every compaction from starting, and the master file grew without
 * bound (found by a review: 51.6 MB in 8.7 s for a database of one
 * record).  (A first version timed a reader from the collector's first
 * look at it: a long snapshot, first seen, started a job that copied
 * the whole file to wait beside it; the code review found it.) */
static int readers_pin(pydb_shm *shm)
{
    int64_t since = pydb__shm_behind_since(shm);
    return since != INT64_MAX &&
           pydb__now_ms() - since >= PYDB_COMPACT_DRAIN_MAX_MS;
}

int pydb__compact_wanted(pydb_db *db, int idle)
{
    pydb_shm *shm = pydb__db_shm(db);
    int64_t v, b, total;
    pydb_state st;

    if (!(db->flags & PYDB_OPEN_WRITE) || !shm || !pydb__shm_valid(shm))
        return 0;
    if (db->compact) return 1;   /* a job in progress goes on */
    pydb__compact_garbage(db, &v, &b);
    if (v <= 0 && !(idle && db->compact_dead)) return 0;
    if (readers_pin(shm)) return 0;
    if (idle) return 1;
    if (pydb__shm_state(&st, shm) != 0) return 0;
    /* b * PYDB_COMPACT_GARBAGE_SHARE >= the live bytes (the records'
     * bytes - b), that is b >= the records' bytes /
     * (PYDB_COMPACT_GARBAGE_SHARE + 1), rounded up:
     * written so that no header value can overflow it */
    if (b <= 0) return 0;
    total = st.mst_end > PYDB_CTL_SIZE ? st.mst_end - PYDB_CTL_SIZE : 0;
    return b >= total / (PYDB_COMPACT_GARBAGE_SHARE + 1) +
                (total % (PYDB_COMPACT_GARBAGE_SHARE + 1) != 0);
}

/* ------------------------------------------------------------ the job */

static void job_free(pydb_db *db, int remove)
{
    pydb_compact *j = db->compact;
    if (!j) return;
    if (remove && !j->forward) {   /* before the closes: still locked */
        unlink(j->nm);
        unlink(j->nx);
    }
    if (j->fd_mst >= 0) pydb__vfs->close(j->fd_mst);
    if (j->fd_xrf >= 0) pydb__vfs->close(j->fd_xrf);
    pydb_record_free(j->rec);
    pydb_record_free(j->inv);
    free(j->xrf);
    free(j->len);
    free(j->buf);
    free(j);
    db->compact = NULL;
}

void pydb__compact_abort(pydb_db *db)
{
    if (db && db->compact)
        job_free(db, db->compact->pid == getpid());
}


/* Create (or take over from a dead job) the new file `path`, locked so
 * that one job at a time writes it: 1 with *fd, 0 when a live job of
 * another handle or process holds it, or when the swap marker `mk`
 * stands (a job that died in its swap: recovery renames its files, which
 * must not be emptied), or a PYDB error. */
static int new_file(int *fd, const char *path, const char *mk, int mode,
                    pydb_error *err)
{
    struct stat st;
    for (int tries = 0; tries < 4; tries++) {
        *fd = pydb__vfs->open(path, O_RDWR | O_CREAT, mode);
        if (*fd < 0)
            return PYDB_OSERROR(err, errno, path, -1, "cannot create: %s",
                                strerror(errno));
        if (pydb__ofd_lock(*fd, F_WRLCK) != 0) {
            pydb__vfs->close(*fd);
            *fd = -1;
            return 0;   /* another job is running */
        }
        if (stat(mk, &st) == 0) {
            /* a job died after its marker (a review: looked at before the
             * lock only, a job killed in between left files this one
             * emptied, and recovery renamed them over the database); an
             * empty file here is the one this open made after that job's
             * rename (its own has a control record at least), which
             * recovery would rename too: removed, the lock still held */
            if (fstat(*fd, &st) == 0 && st.st_size == 0 &&
                pydb__same_file(*fd, path))
                unlink(path);
            pydb__vfs->close(*fd);
            *fd = -1;
            return 0;
        }
        if (pydb__same_file(*fd, path)) {
            /* a dead job's leftover or a new file: start empty */
            if (pydb__vfs->ftruncate(*fd, 0) != 0) {
                int rc = PYDB_OSERROR(err, errno, path, -1,
                                      "ftruncate failed: %s",
                                      strerror(errno));
                unlink(path);   /* ours: the lock is held */
                pydb__vfs->close(*fd);
                *fd = -1;
                return rc;
            }
            return 1;
        }
        /* another job replaced the name meanwhile */
        pydb__vfs->close(*fd);
        *fd = -1;
    }
    return 0;
}

static int job_start(pydb_db *db, int *started, pydb_error *err)
{
    pydb_compact *j;
    struct stat st;
    uint8_t ctl[PYDB_CTL_SIZE];
    int rc, mode;

    *started = 0;
    j = calloc(1, sizeof *j);
    if (!j) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    j->fd_mst = j->fd_xrf = -1;
    if (pydb__swap_names(j->nm, j->nx, j->mk, j->tm, j->tx, sizeof j->nm,
                         db->mst.path, db->xrf.path) != 0) {
        free(j);
        return PYDB_ERROR(err, PYDB_EINVAL, db->mst.path, -1,
                          "the path is too long for a compaction");
    }
    if (stat(j->mk, &st) == 0) {   /* a swap to finish first (recovery) */
        free(j);
        return PYDB_OK;
    }
    pydb__state_now(&j->S, db);
    if (j->S.commit == 0 || j->S.file_gen != pydb__files_gen(db)) {
        free(j);   /* files mode, or the handle is about to switch */
        return PYDB_OK;
    }
    j->gen = j->S.file_gen;
    j->pid = getpid();
    j->next = 1;
    j->pos = PYDB_CTL_SIZE;
    /* the new files get the master file's permissions */
    mode = fstat(db->mst.fd, &st) == 0 ? (int)(st.st_mode & 07777) : 0644;
    rc = new_file(&j->fd_mst, j->nm, j->mk, mode, err);
    if (rc == 1) rc = new_file(&j->fd_xrf, j->nx, j->mk, mode, err);
    if (rc != 1) {
        if (j->fd_mst >= 0) {
            unlink(j->nm);   /* before the close: the lock is still held */
            pydb__vfs->close(j->fd_mst);
        }
        free(j);
        return rc;   /* 0: another job runs; or an error */
    }
    db->compact = j;
    /* placeholder control record until the swap writes the real one */
    memset(ctl, 0, sizeof ctl);
    if (pydb__write_full(j->fd_mst, ctl, sizeof ctl, 0) != 0) {
        rc = PYDB_OSERROR(err, errno, j->nm, 0, "write failed: %s",
                          strerror(errno));
        job_free(db, 1);
        return rc;
    }
    *started = 1;
    return PYDB_OK;
}

static int grow(pydb_compact *j, int32_t mfn, pydb_error *err)
{
    size_t need = (size_t)mfn;
    if (need <= j->cap) return PYDB_OK;
    size_t nc = j->cap ? j->cap : 1024;
    while (nc < need) nc *= 2;
    int32_t *x = realloc(j->xrf, nc * sizeof *x);
    if (!x) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    j->xrf = x;
    uint32_t *l = realloc(j->len, nc * sizeof *l);
    if (!l) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    j->len = l;
    memset(j->xrf + j->cap, 0, (nc - j->cap) * sizeof *x);
    memset(j->len + j->cap, 0, (nc - j->cap) * sizeof *l);
    j->cap = nc;
    return PYDB_OK;
}

/* Write version r of `mfn` at the next free place of the new .mst, with
 * back pointer `back` (-1: none); *at gets its offset, *mfrl its
 * length. */
static int write_version(pydb_db *db, pydb_compact *j, int32_t mfn,
                         const pydb_record *r, int64_t back, int64_t *at,
                         int64_t *mfrl, pydb_error *err)
{
    int64_t start, capacity, gap;
    int rc;

    rc = pydb__record_size(mfrl, db->layout, db->mstxl, mfn, r->fields,
                           r->nfields, db->mst.path, err);
    if (rc) return rc;
    start = pydb__place(db->layout, db->mstxl, j->pos);
    capacity = ((int64_t)1 << (20 + db->mstxl)) * PYDB_BLOCK;
    if (start + *mfrl > capacity - PYDB_BLOCK)
        return PYDB_ERROR(err, PYDB_ETOOBIG, j->nm, start,
                          "the compacted master file would pass the "
                          "MSTXL %d limit", db->mstxl);
    gap = start - j->pos;
    if ((size_t)(gap + *mfrl) > j->bufcap) {
        size_t nc = (size_t)(gap + *mfrl) * 2;
        uint8_t *b = realloc(j->buf, nc);
        if (!b) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
        j->buf = b;
        j->bufcap = nc;
    }
    memset(j->buf, 0, (size_t)gap);
    pydb__record_encode(j->buf + gap, db->layout, *mfrl, mfn, r->fields,
                        r->nfields, back, r->status);
    rc = -pydb__write_full(j->fd_mst, j->buf, (size_t)(gap + *mfrl), j->pos);
    if (rc)
        return PYDB_OSERROR(err, rc, j->nm, j->pos, "write failed: %s",
                            strerror(rc));
    j->pos = start + *mfrl;
    *at = start;
    return PYDB_OK;
}

/* The version of `mfn` an ISIS inverted file reflects when its XRF says
 * "update pending": the oldest of the chain from `back` (ISIS clears the
 * back pointer of the version it inverts, and points every later
 * version's back at it, docs/isis-formats.md §2.4; pydb's updates chain
 * each to the one they replace), read into j->inv, *found 1.  A chain
 * that cannot be followed (damaged) keeps none: *found 0 and PYDB_OK (its
 * versions are dropped, as any garbage).  Other errors (PYDB_EIO,
 * PYDB_ENOMEM) fail the step, which leaves the database as it was. */
static int inverted_version(pydb_db *db, pydb_compact *j, int32_t mfn,
                            int64_t back, int *found, pydb_error *err)
{
    pydb_leader l;
    int64_t at = back;
    int rc;

    *found = 0;
    for (;;) {
        int64_t prev;
        rc = pydb__leader_read(&l, db, mfn, at, -1, err);
        if (rc) return rc == PYDB_ECORRUPT ? PYDB_OK : rc;
        prev = l.mfbwb > 0 ? (int64_t)(l.mfbwb - 1) * PYDB_BLOCK + l.mfbwp
                           : -1;
        if (prev < 0) break;
        if (prev >= at) return PYDB_OK;   /* not back: a damaged chain */
        at = prev;
    }
    rc = pydb_read_at(&j->inv, db, mfn, at, err);
    if (rc) return rc == PYDB_ECORRUPT ? PYDB_OK : rc;
    *found = 1;
    return PYDB_OK;
}

/* Zero the copy of `mfn` made before (its version and, before it, the
 * inverted version kept with it: j->len bytes from the first): dead
 * space in the new file, which nobody reads yet, so that it reads as
 * fill, not as versions nothing reaches (check's orphans). */
static int zero_copy(pydb_db *db, pydb_compact *j, int32_t mfn,
                     pydb_error *err)
{
    static const uint8_t zeros[PYDB_BLOCK];
    const pydb_geom *g = &pydb__geom[db->layout];
    uint8_t head[64];
    pydb_xrf_entry old;
    pydb_leader l;
    int64_t left = j->len[mfn - 1], at;

    pydb__xrf_unpack(&old, j->xrf[mfn - 1], db->mstxl);
    at = old.offset;
    if (at >= PYDB_CTL_SIZE &&
        pread(j->fd_mst, head, (size_t)g->leader, at) == g->leader) {
        pydb__leader_decode(&l, g, head);
        if (l.mfbwb > 0)   /* an inverted version kept: the copy's start */
            at = (int64_t)(l.mfbwb - 1) * PYDB_BLOCK + l.mfbwp;
    }
    while (at >= PYDB_CTL_SIZE && left > 0) {
        size_t n = left > PYDB_BLOCK ? PYDB_BLOCK : (size_t)left;
        int rc = -pydb__write_full(j->fd_mst, zeros, n, at);
        if (rc)
            return PYDB_OSERROR(err, rc, j->nm, at, "write failed: %s",
                                strerror(rc));
        at += (int64_t)n;
        left -= (int64_t)n;
    }
    j->dead_b += j->len[mfn - 1];
    j->len[mfn - 1] = 0;
    return PYDB_OK;
}

/* Copy the version of `mfn` that st sees into the new files; for a
 * record whose XRF says "update pending", the version the ISIS inverted
 * file reflects too, just before it and named by its back pointer, so
 * that ISIS's inverted-file update can still remove that version's keys
 * (without it, a compaction left every pending record with no back
 * version: WinISIS's own pending records included; found by a review
 * with the WinISIS sample). */
static int copy_mfn(pydb_db *db, pydb_compact *j, const pydb_state *st,
                    int32_t mfn, pydb_error *err)
{
    pydb_xrf_entry e;
    int64_t first = -1, back = -1, at, mfrl;
    int rc, kept = 0;

    rc = grow(j, mfn, err);
    if (rc) return rc;
    rc = pydb__xrf_get_in(&e, db, st, mfn, err);
    if (rc) return rc;
    if (j->len[mfn - 1]) {   /* copied before, changed since */
        rc = zero_copy(db, j, mfn, err);
        if (rc) return rc;
    }
    if (e.state != PYDB_XRF_ACTIVE && e.state != PYDB_XRF_LDELETED) {
        j->xrf[mfn - 1] = e.raw;   /* never used / physically deleted */
        return PYDB_OK;
    }
    rc = pydb__read_in(&j->rec, db, st, mfn, err);
    if (rc) return rc;
    if ((e.flags & PYDB_FLAG_PENDING) && j->rec->back_offset >= 0) {
        rc = inverted_version(db, j, mfn, j->rec->back_offset, &kept, err);
        if (rc) return rc;
    }
    if (kept) {
        rc = write_version(db, j, mfn, j->inv, -1, &back, &mfrl, err);
        if (rc) return rc;
        first = back;
    }
    rc = write_version(db, j, mfn, j->rec, back, &at, &mfrl, err);
    if (rc) return rc;
    if (first < 0) first = at;
    j->xrf[mfn - 1] = pydb__xrf_encode(at, e.flags, db->mstxl);
    if (e.state == PYDB_XRF_LDELETED) j->xrf[mfn - 1] = -j->xrf[mfn - 1];
    j->len[mfn - 1] = (uint32_t)(at + mfrl - first);
    return PYDB_OK;
}

/* ----------------------------------------------------------- catch-up */

struct changed_ctx {
    const pydb_state *S;
    int32_t *mfns;
    size_t n, cap, limit;
    int over, oom;
};

static int changed_visit(void *ctx, int32_t mfn, const pydb_xrf_entry *e)
{
    struct changed_ctx *c = ctx;
    int changed = mfn >= c->S->next_mfn ||
                  ((e->state == PYDB_XRF_ACTIVE ||
                    e->state == PYDB_XRF_LDELETED) &&
                   e->offset >= c->S->mst_end);
    if (!changed) return 0;
    if (c->n == c->limit) {
        c->over = 1;
        return 1;
    }
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 256;
        int32_t *m = realloc(c->mfns, nc * sizeof *m);
        if (!m) {
            c->oom = 1;
            return 1;
        }
        c->mfns = m;
        c->cap = nc;
    }
    c->mfns[c->n++] = mfn;
    return 0;
}

/* Copy what commits after j->S changed, as of T (at most `limit` MFNs:
 * *over when there are more, nothing copied then); j->S becomes T. */
static int catch_up(pydb_db *db, pydb_compact *j, const pydb_state *T,
                    size_t limit, int *over, pydb_error *err)
{
    struct changed_ctx c;
    int32_t stop;
    int rc;

    memset(&c, 0, sizeof c);
    c.S = &j->S;
    c.limit = limit;
    *over = 0;
    rc = pydb__xrf_scan(db, T, 1, changed_visit, &c, &stop, 64, err);
    if (rc == PYDB_OK && c.oom)
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    if (rc == PYDB_OK && c.over) *over = 1;
    for (size_t i = 0; rc == PYDB_OK && !c.over && i < c.n; i++)
        rc = copy_mfn(db, j, T, c.mfns[i], err);
    free(c.mfns);
    if (rc == PYDB_OK && !c.over) {
        j->S = *T;
        j->next = T->next_mfn;
    }
    return rc;
}

/* ---------------------------------------------------------------- swap */

static int sync_fd(int fd, const char *path, pydb_error *err)
{
    if (pydb__vfs->fsync(fd) != 0)
        return PYDB_OSERROR(err, errno, path, -1, "fsync failed: %s",
                            strerror(errno));
    return PYDB_OK;
}

/* Write the control record and the XRF of the new files and sync them
 * (with sync=False too: they replace the only copy of every record, and
 * a power cut after unsynced renames leaves empty files;
 * docs/reliability.md §2.2): *mst_size / *xrf_size get their sizes, ctl
 * the control record. */
static int finish_files(pydb_db *db, pydb_compact *j, const pydb_state *T,
                        uint8_t ctl[PYDB_CTL_SIZE], int64_t *mst_size,
                        int64_t *xrf_size, pydb_error *err)
{
    static const uint8_t zeros[PYDB_BLOCK];
    uint8_t blk[PYDB_BLOCK];
    int64_t end = j->pos;
    int64_t padded = (end + PYDB_BLOCK - 1) / PYDB_BLOCK * PYDB_BLOCK;
    int64_t nblocks = pydb__xrf_blocks(T->next_mfn);
    int rc;

    if (nblocks < 1) nblocks = 1;
    /* the old control record's bytes (MFTYPE, MSTXL, RECCNT, MFCXX*) */
    rc = pydb__file_read(&db->mst, PYDB_IO_PREAD, ctl, PYDB_CTL_SIZE, 0,
                         "control record", err);
    if (rc) return rc;
    pydb__ctl_set_next(ctl, T->next_mfn, end);
    if (padded > end) {
        rc = -pydb__write_full(j->fd_mst, zeros, (size_t)(padded - end), end);
        if (rc)
            return PYDB_OSERROR(err, rc, j->nm, end, "write failed: %s",
                                strerror(rc));
    }
    rc = -pydb__write_full(j->fd_mst, ctl, PYDB_CTL_SIZE, 0);
    if (rc)
        return PYDB_OSERROR(err, rc, j->nm, 0, "write failed: %s",
                            strerror(rc));
    rc = grow(j, T->next_mfn, err);
    if (rc) return rc;
    for (int64_t bi = 0; bi < nblocks; bi++) {
        memset(blk, 0, sizeof blk);
        pydb__put32(blk, (uint32_t)(bi == nblocks - 1 ? -(bi + 1) : bi + 1));
        for (int s = 0; s < PYDB_XRF_PER_BLOCK; s++) {
            int64_t m = bi * PYDB_XRF_PER_BLOCK + s;   /* MFN - 1 */
            if (m < T->next_mfn - 1)
                pydb__put32(blk + 4 + 4 * s, (uint32_t)j->xrf[m]);
        }
        rc = -pydb__write_full(j->fd_xrf, blk, sizeof blk, bi * PYDB_BLOCK);
        if (rc)
            return PYDB_OSERROR(err, rc, j->nx, bi * PYDB_BLOCK,
                                "write failed: %s", strerror(rc));
    }
    rc = sync_fd(j->fd_mst, j->nm, err);
    if (rc == PYDB_OK) rc = sync_fd(j->fd_xrf, j->nx, err);
    if (rc) return rc;
    *mst_size = padded;
    *xrf_size = nblocks * PYDB_BLOCK;
    return PYDB_OK;
}

/* The intent marker: its name, durable, before the first rename. */
static int marker_create(pydb_compact *j, pydb_error *err)
{
    int fd = pydb__vfs->open(j->mk, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = PYDB_OK;
    if (fd < 0)
        return PYDB_OSERROR(err, errno, j->mk, -1, "cannot create: %s",
                            strerror(errno));
    if (pydb__write_full(fd, "swap\n", 5, 0) != 0)
        rc = PYDB_OSERROR(err, errno, j->mk, 0, "write failed: %s",
                          strerror(errno));
    if (rc == PYDB_OK) rc = sync_fd(fd, j->mk, err);
    pydb__vfs->close(fd);
    if (rc == PYDB_OK) rc = pydb__fsync_parent(j->mk, err);
    if (rc) unlink(j->mk);
    return rc;
}

/* Under the writer lock: replace the files, every step synced whatever
 * the handle's setting (finish_files).  *done: they were replaced (the
 * job is over either way when this returns an error). */
static int swap(pydb_db *db, pydb_compact *j, const pydb_state *T,
                pydb_gc_report *rep, pydb_error *err)
{
    pydb_shm *shm = pydb__db_shm(db);
    uint8_t ctl[PYDB_CTL_SIZE];
    int64_t mst_size = 0, xrf_size = 0, gv, gb;
    int64_t old_size = pydb__fsize(&db->mst);
    int rc, tries;

    pydb__shm_garbage(shm, &gv, &gb);
    rc = finish_files(db, j, T, ctl, &mst_size, &xrf_size, err);
    if (rc) return rc;
    rc = marker_create(j, err);
    if (rc) return rc;
    if (pydb__vfs->rename(j->nx, j->tx) != 0) {
        rc = PYDB_OSERROR(err, errno, j->tx, -1,
                          "rename of %s failed: %s", j->nx, strerror(errno));
        unlink(j->mk);   /* nothing replaced: no swap to finish */
        return rc;
    }
    /* The .xrf is the new one now: only forward from here (recovery
     * finishes it from the marker if this process dies). */
    j->forward = 1;
    for (tries = 0; pydb__vfs->rename(j->nm, j->tm) != 0; tries++)
        if (tries >= 3)
            return PYDB_OSERROR(err, errno, j->tm, -1,
                                "rename of %s failed (the swap marker %s "
                                "stays: reopening finishes it): %s", j->nm,
                                j->mk, strerror(errno));
    for (tries = 0; (rc = pydb__fsync_parent(j->tm, err)) != 0; tries++)
        if (tries >= 3) return rc;   /* the marker stays */
    /* The new files' locks go only now, their names gone: while they are
     * held, another handle's job_start() cannot take the names, empty the
     * files and have them renamed half-written over the database's (a
     * review: the locks were let go before the marker, and two processes
     * compacting at once left an empty XRF and a control record of
     * zeros). */
    pydb__vfs->close(j->fd_mst);
    pydb__vfs->close(j->fd_xrf);
    j->fd_mst = j->fd_xrf = -1;
    pydb__swap_publish(shm, ctl, mst_size, xrf_size);
    j->swapped = 1;
    /* copies a catch-up left dead in the new file are its garbage: their
     * bytes, no version (no reader ever sees them, and a compaction is
     * started for versions: the next one reclaims them; counted as
     * versions, they were reported as pinned with no reader, and an idle
     * collector compacted the whole file again for them) */
    pydb__shm_garbage_add(shm, 0, j->dead_b);
    /* readers opening the files wait while the marker exists: retried
     * (one that stays is removed by the next recovery: the header then
     * describes the files already) */
    for (tries = 0; tries < 4 && pydb__vfs->unlink(j->mk) != 0 &&
                    errno != ENOENT;
         tries++)
        ;
    rc = pydb__files_sync(db, err);
    if (rep) {
        rep->versions += gv;
        rep->bytes += old_size - mst_size > 0 ? old_size - mst_size : 0;
        rep->compactions += 1;
    }
    return rc;
}

/* Whether a swap may be tried now: no registered reader is behind the
 * latest commit, or one is and a wait for it is due (drain_readers): the
 * last wait that failed is DRAIN_GAP times its length back, and the
 * oldest reader is not the one it left (a long snapshot: it pins the
 * garbage until it ends).  Looked at before the writer lock is taken. */
static int swap_due(pydb_db *db, pydb_shm *shm)
{
    uint64_t oldest = pydb__shm_oldest(shm, NULL);
    return oldest == pydb__shm_latest(shm) ||
           (pydb__now_ms() >= db->compact_readers.drain_after &&
            oldest != db->compact_readers.drain_oldest);
}

/* Wait, the writer lock held (no commit comes meanwhile, and a reader
 * that registers now reads commit c), for the registered readers behind
 * commit c to leave: 1 when none is left.  Writers wait too, so the wait
 * is bounded: the handle's learned drain_ms (the step's lock_ms first),
 * doubled after a wait that failed, up to PYDB_COMPACT_DRAIN_MAX_MS, and
 * halved after one that did not, never more than the step's `cap` (the
 * collector thread's: the most; collect()'s: its time left; a
 * cooperating reader's, which never waits: 0, no wait); after a failure
 * swap_due() holds the next one back for DRAIN_GAP times its length.
 * Writers so lose at most a tenth of their time to waits that fail. */
static int drain_readers(pydb_db *db, pydb_shm *shm, uint64_t c, int lock_ms,
                         int cap)
{
    int64_t end;
    int *ms = &db->compact_readers.drain_ms, wait;
    uint64_t oldest;
    if (pydb__shm_oldest(shm, NULL) == c) return 1;
    if (cap <= 0) return 0;
    if (*ms < lock_ms) *ms = lock_ms;
    if (*ms < 1) *ms = 1;
    wait = *ms < cap ? *ms : cap;
    end = pydb__now_ms() + wait;
    while ((oldest = pydb__shm_oldest(shm, NULL)) != c) {
        if (pydb__now_ms() >= end) {
            db->compact_readers.drain_after =
                pydb__now_ms() + (int64_t)wait * DRAIN_GAP;
            db->compact_readers.drain_oldest = oldest;
            if (wait == *ms)   /* a shorter wait says nothing of this one */
                *ms = *ms * 2 > PYDB_COMPACT_DRAIN_MAX_MS
                          ? PYDB_COMPACT_DRAIN_MAX_MS : *ms * 2;
            return 0;
        }
        usleep(1000);
    }
    *ms /= 2;
    return 1;
}

/* The last step: catch up and swap under the writer lock. */
static int swap_step(pydb_db *db, pydb_compact *j, int budget, int lock_ms,
                     int drain_ms, int *more, pydb_gc_report *rep,
                     pydb_error *err)
{
    pydb_shm *shm = pydb__db_shm(db);
    pydb_txn *t = NULL;
    pydb_state T;
    pydb_error e2;
    int rc, over = 0;

    if (!swap_due(db, shm)) return PYDB_OK;   /* kept: see below */
    rc = pydb__txn_begin_gc(&t, db, lock_ms > 0 ? lock_ms : 0, &e2);
    if (rc == PYDB_ELOCKED) {
        *more = 1;   /* a commit holds the lock: next step */
        return PYDB_OK;
    }
    if (rc) {
        if (err) *err = e2;
        return rc;
    }
    pydb__state_now(&T, db);
    if (T.commit == 0 || T.file_gen != j->gen ||
        !pydb__shm_valid(shm)) {
        /* another compaction replaced the files, or no header: drop it */
        pydb_txn_abort(t);
        job_free(db, 1);
        return PYDB_OK;
    }
    if (!drain_readers(db, shm, T.commit, lock_ms, drain_ms)) {
        /* a reader of an older commit: the job waits for it, kept in the
         * handle; more = 0 so that the collector does not spin on it
         * (compact_wanted() says yes while a job is kept: the next
         * wake-up tries again) */
        pydb_txn_abort(t);
        return PYDB_OK;
    }
    rc = catch_up(db, j, &T, (size_t)budget * CATCHUP_FACTOR, &over, err);
    if (rc == PYDB_OK && over) {
        /* too much for the lock: catch up without it, try again later */
        pydb_txn_abort(t);
        rc = catch_up(db, j, &T, (size_t)-1, &over, err);
        if (rc) return rc;
        *more = 1;
        return PYDB_OK;
    }
    if (rc == PYDB_OK) rc = pydb__txn_settle(t, err);
    if (rc == PYDB_OK) rc = swap(db, j, &T, rep, err);
    pydb_txn_abort(t);   /* releases the writer lock */
    return rc;
}

int pydb__compact_step(pydb_db *db, int budget, int lock_ms, int drain_ms,
                       int *more, pydb_gc_report *rep, pydb_error *err)
{
    pydb_compact *j;
    int rc, n;

    *more = 0;
    if (!(db->flags & PYDB_OPEN_WRITE) || !pydb__db_shm(db)) return PYDB_OK;
    if (budget < 1) budget = 1;
    if (db->compact && db->compact->pid != getpid())
        job_free(db, 0);   /* the parent's job (fork): its files are its */
    if (!db->compact) {
        int started;
        if (!pydb__compact_wanted(db, 1)) return PYDB_OK;
        db->compact_dead = 0;   /* wanted once (pydb_gc_find_dead_space) */
        rc = job_start(db, &started, err);
        if (rc || !started) return rc;
    }
    j = db->compact;
    for (n = 0; n < budget && j->next < j->S.next_mfn; n++, j->next++) {
        rc = copy_mfn(db, j, &j->S, j->next, err);
        if (rc) goto failed;
    }
    if (j->next < j->S.next_mfn) {
        *more = 1;
        return PYDB_OK;
    }
    rc = swap_step(db, j, budget, lock_ms, drain_ms, more, rep, err);
    if (rc) goto failed;
    /* done (the files replaced, or the job dropped), or kept waiting */
    if (db->compact && db->compact->swapped) job_free(db, 0);
    return PYDB_OK;
failed:
    job_free(db, 1);
    *more = 0;
    return rc;
}

/* ------------------------------------------------- test entry point */

int pydb__test_compact(pydb_db *db, int budget, int64_t out[3],
                       pydb_error *err);

/* Run a whole job (tests: _pydb._testing.compact): out = versions,
 * bytes, compactions. */
int pydb__test_compact(pydb_db *db, int budget, int64_t out[3],
                       pydb_error *err)
{
    pydb_gc_report rep;
    int more = 1, rc = PYDB_OK;
    int64_t deadline = pydb__now_ms() + 5000;
    memset(&rep, 0, sizeof rep);
    pydb__gc_pause(db);   /* never beside a step of the collector */
    while (more && pydb__now_ms() < deadline) {
        rc = pydb__compact_step(db, budget, 1000, PYDB_COMPACT_DRAIN_MAX_MS,
                                &more, &rep, err);
        if (rc) break;
        if (more && !db->compact) break;
        if (more && db->compact && db->compact->next >= db->compact->S.next_mfn)
            usleep(1000);   /* waiting for the lock */
    }
    pydb__gc_resume(db);
    out[0] = rep.versions;
    out[1] = rep.bytes;
    out[2] = rep.compactions;
    return rc;
}
