/*
 * wal.c - the write-ahead log: image building, append (the commit
 * point), replay (recovery), reset, and the writer lock on the log file.
 * The format and the rules are in wal.h.
 *
 * Depends on: util.c, path.c, vfs.c, error.c and the handle's fields.
 * Called by txn.c (commit, recovery at pydb_txn_begin) and handle.c
 * (recovery at open); it calls neither.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "wal.h"
#include "shm.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAL_MAGIC "PYDBWAL1"
#define WAL_END "PYDBEND1"
#define WAL_MAX_BODY ((uint64_t)1 << 40)  /* sanity bound on a log length */

/* ------------------------------------------------------- building images */

int pydb__wal_begin(pydb_buf *log)
{
    PYDB_ASSERT(log->n == 0);
    return pydb__buf_grow(log, PYDB_WAL_HEAD) ? 0 : -1;
}

uint8_t *pydb__wal_entry(pydb_buf *log, uint32_t kind, const char *name,
                         uint64_t off, uint64_t len, uint32_t *count)
{
    size_t nlen = name ? strlen(name) : 0;
    size_t total = PYDB_WAL_ENTRY + nlen + (size_t)len;
    size_t pad = ((total + 7) & ~(size_t)7) - total;
    uint8_t *e;

    PYDB_ASSERT(log->n >= PYDB_WAL_HEAD && nlen <= PYDB_WAL_MAX_PATH);
    PYDB_ASSERT((kind == PYDB_WAL_FILE) == (nlen > 0));
    e = pydb__buf_grow(log, total + pad);
    if (!e) return NULL;
    pydb__put32(e, kind);
    pydb__put32(e + 4, (uint32_t)nlen);
    pydb__put64(e + 8, off);
    pydb__put64(e + 16, len);
    if (nlen) memcpy(e + PYDB_WAL_ENTRY, name, nlen);
    memset(e + total, 0, pad);
    (*count)++;
    return e + PYDB_WAL_ENTRY + nlen;
}

int pydb__wal_seal(pydb_buf *log, uint32_t count, uint64_t seq)
{
    uint8_t *h = log->p, *tl;
    uint64_t body = log->n - PYDB_WAL_HEAD;

    PYDB_ASSERT(log->n >= PYDB_WAL_HEAD && body % 8 == 0);
    memcpy(h, WAL_MAGIC, 8);
    pydb__put32(h + 8, 1);
    pydb__put32(h + 12, count);
    pydb__put64(h + 16, body);
    pydb__put64(h + 24, seq);
    pydb__put32(h + 32, pydb__crc32c(0, h, 32));
    pydb__put32(h + 36, 0);
    tl = pydb__buf_grow(log, PYDB_WAL_TAIL);
    if (!tl) return -1;
    memcpy(tl, WAL_END, 8);
    pydb__put32(tl + 8, pydb__crc32c(0, log->p, (size_t)(PYDB_WAL_HEAD + body)));
    pydb__put32(tl + 12, 0);
    return 0;
}

/* ---------------------------------------------------------- log replay */

/* Read the whole log into *out (malloc'ed) if it holds a complete,
 * checksummed commit: returns 1 (complete), 0 (empty or torn), or a
 * negative PYDB error. */
static int wal_load(uint8_t **out, size_t *out_len, int wal_fd,
                    int64_t size, const char *wal_path, pydb_error *err)
{
    uint8_t head[PYDB_WAL_HEAD], *buf;
    uint64_t body, total;
    ssize_t got;

    *out = NULL;
    if (size < PYDB_WAL_HEAD + PYDB_WAL_TAIL) return 0;
    got = pydb__vfs->pread(wal_fd, head, PYDB_WAL_HEAD, 0);
    if (got < 0)
        return PYDB_OSERROR(err, errno, wal_path, 0, "read failed: %s",
                            strerror(errno));
    if (got != PYDB_WAL_HEAD || memcmp(head, WAL_MAGIC, 8) != 0 ||
        pydb__u32(head + 8) != 1 ||
        pydb__crc32c(0, head, 32) != pydb__u32(head + 32))
        return 0;
    body = pydb__u64(head + 16);
    if (body > WAL_MAX_BODY) return 0;
    total = PYDB_WAL_HEAD + body + PYDB_WAL_TAIL;
    if (total > (uint64_t)size) return 0;  /* torn: shorter */
    buf = malloc((size_t)total);
    if (!buf)
        return PYDB_ERROR(err, PYDB_ENOMEM, wal_path, -1,
                          "no memory for a %llu-byte log",
                          (unsigned long long)total);
    for (size_t done = 0; done < total;) {
        got = pydb__vfs->pread(wal_fd, buf + done, (size_t)total - done,
                               (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            int e = got < 0 ? errno : EIO;
            free(buf);
            return PYDB_OSERROR(err, e, wal_path, (int64_t)done,
                                "read failed: %s", strerror(e));
        }
        done += (size_t)got;
    }
    {
        const uint8_t *t = buf + PYDB_WAL_HEAD + body;
        if (memcmp(t, WAL_END, 8) != 0 ||
            pydb__crc32c(0, buf, (size_t)(PYDB_WAL_HEAD + body)) != pydb__u32(t + 8)) {
            free(buf);
            return 0;
        }
    }
    *out = buf;
    *out_len = (size_t)total;
    return 1;
}

/* Apply a loaded log to the files (fds given).  fsync'ed unless !sync.
 * `seq` (or NULL): the sequence lock of a handle reading these files,
 * held odd while the .mst/.xrf bytes are written (not over the fsyncs). */
static int wal_apply(const uint8_t *buf, size_t len, int mst_fd, int xrf_fd,
                     const char *mst_path, const char *xrf_path, int sync,
                     uint64_t *seq, int *fsync_failed, pydb_error *err)
{
    uint32_t n = pydb__u32(buf + 12);
    size_t pos = PYDB_WAL_HEAD, end = len - PYDB_WAL_TAIL;
    int rc, e, pass;

    /* only a complete log is replayed (wal_load() checked it) */
    PYDB_ASSERT(len >= PYDB_WAL_HEAD + PYDB_WAL_TAIL &&
                memcmp(buf, WAL_MAGIC, 8) == 0 &&
                memcmp(buf + end, WAL_END, 8) == 0 &&
                pydb__u64(buf + 16) == end - PYDB_WAL_HEAD);

    /* Pass 0: .mst and .xrf writes, in log order (control record last);
     * pass 1: whole files. */
    for (pass = 0; pass < 2; pass++) {
        pos = PYDB_WAL_HEAD;
        if (pass == 0 && seq) {
            uint64_t odd = __atomic_add_fetch(seq, 1, __ATOMIC_ACQ_REL);
            PYDB_ASSERT(odd & 1);   /* no other writer inside the lock */
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t kind, nlen;
            uint64_t off, dlen;
            const uint8_t *name, *data;
            if (end - pos < PYDB_WAL_ENTRY) {
                rc = PYDB_CORRUPT(err, mst_path, -1, "log entry %u passes "
                                  "the end of the log", i + 1);
                goto failed;
            }
            kind = pydb__u32(buf + pos);
            nlen = pydb__u32(buf + pos + 4);
            off = pydb__u64(buf + pos + 8);
            dlen = pydb__u64(buf + pos + 16);
            pos += PYDB_WAL_ENTRY;
            if (nlen > PYDB_WAL_MAX_PATH || dlen > end - pos ||
                nlen > end - pos - dlen) {
                rc = PYDB_CORRUPT(err, mst_path, -1, "log entry %u has "
                                  "impossible lengths", i + 1);
                goto failed;
            }
            name = buf + pos;
            data = buf + pos + nlen;
            pos += nlen + dlen;
            pos = (pos + 7) & ~(size_t)7;
            if (pos > end) pos = end;
            if (pass == 0 && (kind == PYDB_WAL_MST || kind == PYDB_WAL_XRF)) {
                int fd = kind == PYDB_WAL_MST ? mst_fd : xrf_fd;
                e = -pydb__write_full(fd, data, (size_t)dlen, (int64_t)off);
                if (e) {
                    rc = PYDB_OSERROR(err, e,
                                      kind == PYDB_WAL_MST ? mst_path : xrf_path,
                                      (int64_t)off, "write failed: %s",
                                      strerror(e));
                    goto failed;
                }
            } else if (pass == 1 && kind == PYDB_WAL_FILE) {
                char path[PYDB_WAL_MAX_PATH + 1];
                memcpy(path, name, nlen);
                path[nlen] = 0;
                rc = pydb__replace_file(path, NULL, data, (size_t)dlen, sync,
                                        fsync_failed, err);
                if (rc) return rc;
            }
        }
        if (pass == 0 && seq) {
            uint64_t even = __atomic_add_fetch(seq, 1, __ATOMIC_RELEASE);
            PYDB_ASSERT((even & 1) == 0);
        }
        if (pass == 0 && sync) {
            if (pydb__vfs->fdatasync(mst_fd) != 0) {
                *fsync_failed = 1;
                return PYDB_OSERROR(err, errno, mst_path, -1,
                                    "fdatasync failed: %s", strerror(errno));
            }
            if (pydb__vfs->fdatasync(xrf_fd) != 0) {
                *fsync_failed = 1;
                return PYDB_OSERROR(err, errno, xrf_path, -1,
                                    "fdatasync failed: %s", strerror(errno));
            }
        }
    }
    return PYDB_OK;
failed:
    if (seq && pass == 0) __atomic_add_fetch(seq, 1, __ATOMIC_RELEASE);
    return rc;
}

/* Empty the log (after a commit is applied, or a torn log is dropped). */
static int wal_reset(int wal_fd, const char *wal_path, int *fsync_failed,
                     pydb_error *err)
{
    if (pydb__vfs->ftruncate(wal_fd, 0) != 0)
        return PYDB_OSERROR(err, errno, wal_path, -1, "ftruncate failed: %s",
                            strerror(errno));
    if (pydb__vfs->fdatasync(wal_fd) != 0) {
        *fsync_failed = 1;
        return PYDB_OSERROR(err, errno, wal_path, -1, "fdatasync failed: %s",
                            strerror(errno));
    }
    return PYDB_OK;
}

int pydb__wal_settle(int wal_fd, const char *wal_path, pydb_error *err)
{
    if (pydb__vfs->fdatasync(wal_fd) != 0)
        return PYDB_OSERROR(err, errno, wal_path, -1,
                            "fdatasync of the emptied log failed: %s",
                            strerror(errno));
    return PYDB_OK;
}

/* Recovery with the writer lock held: replay a complete log, drop a torn
 * one.  `seq`: as for wal_apply(). */
int pydb__wal_recover(int wal_fd, const char *wal_path, int mst_fd,
                      int xrf_fd, const char *mst_path, const char *xrf_path,
                      uint64_t *seq, int *fsync_failed, pydb_error *err)
{
    struct stat st;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc;

    if (fstat(wal_fd, &st) != 0)
        return PYDB_OSERROR(err, errno, wal_path, -1, "cannot stat: %s",
                            strerror(errno));
    if (st.st_size == 0) return PYDB_OK;
    rc = wal_load(&buf, &len, wal_fd, (int64_t)st.st_size, wal_path, err);
    if (rc < 0) return rc;
    if (rc == 1) {
        rc = wal_apply(buf, len, mst_fd, xrf_fd, mst_path, xrf_path, 1, seq,
                       fsync_failed, err);
        free(buf);
        if (rc) return rc;
    }
    return wal_reset(wal_fd, wal_path, fsync_failed, err);
}

/* ------------------------------------- a compaction's swap (compact.c) */

int pydb__swap_names(char *new_mst, char *new_xrf, char *marker, size_t cap,
                     const char *mst, const char *xrf)
{
    if ((size_t)snprintf(new_mst, cap, "%s%s", mst, PYDB_COMPACT_SUFFIX) >=
            cap ||
        (size_t)snprintf(new_xrf, cap, "%s%s", xrf, PYDB_COMPACT_SUFFIX) >=
            cap ||
        (size_t)snprintf(marker, cap, "%s%s", mst, PYDB_SWAP_SUFFIX) >= cap)
        return -1;
    return 0;
}

void pydb__swap_publish(struct pydb_shm *shm, const uint8_t *ctl,
                        int64_t mst_size, int64_t xrf_size)
{
    pydb_state prev, st;
    pydb_ctl c;
    uint64_t from = 0;

    if (!pydb__shm_valid(shm)) return;
    memset(&st, 0, sizeof st);
    pydb__ctl_decode(&c, ctl);
    st.next_mfn = c.next_mfn;
    st.next_block = c.next_block;
    st.next_pos = c.next_pos;
    st.reccnt = c.reccnt;
    st.mst_end = pydb__ctl_end(c.next_block, c.next_pos);
    st.mst_size = mst_size;
    st.xrf_size = xrf_size;
    st.file_gen = pydb__shm_file_gen(shm) + 1;
    if (pydb__shm_state(&prev, shm) == 0) {
        from = prev.commit;
        st.index_gen = prev.index_gen;
        if (prev.file_gen + 1 > st.file_gen) st.file_gen = prev.file_gen + 1;
    }
    st.commit = pydb__shm_latest(shm) + 1;   /* what publish will give */
    if (from) pydb__shm_swap_set(shm, from, &st);
    pydb__shm_publish(shm, &st);
    pydb__shm_garbage_reset(shm);
}

/* Remove `path` unless a live compaction job holds its lock. */
static void remove_unlocked(const char *path)
{
    struct flock fl;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) unlink(path);
    close(fd);
}

int pydb__swap_recover(const char *mst, const char *xrf,
                       struct pydb_shm *shm, int sync, int *finished,
                       pydb_error *err)
{
    char nm[1200], nx[1200], mk[1200];
    struct stat st, ms, xs;
    uint8_t ctl[PYDB_CTL_SIZE];
    pydb_state cur;
    pydb_ctl c;
    int fd, rc = PYDB_OK;

    *finished = 0;
    if (pydb__swap_names(nm, nx, mk, sizeof nm, mst, xrf) != 0)
        return PYDB_OK;
    if (stat(mk, &st) != 0) {
        /* no intent: a dead job's leftovers (a live job, of any handle,
         * holds an OFD lock on its files) */
        remove_unlocked(nm);
        remove_unlocked(nx);
        return PYDB_OK;
    }
    /* The new files were complete and synced before the marker was
     * written: finish the renames (the XRF first, as the swap does). */
    if (stat(nx, &st) == 0 && pydb__vfs->rename(nx, xrf) != 0)
        return PYDB_OSERROR(err, errno, xrf, -1, "cannot finish a "
                            "compaction's swap: rename of %s: %s", nx,
                            strerror(errno));
    if (stat(nm, &st) == 0 && pydb__vfs->rename(nm, mst) != 0)
        return PYDB_OSERROR(err, errno, mst, -1, "cannot finish a "
                            "compaction's swap: rename of %s: %s", nm,
                            strerror(errno));
    if (sync) {
        rc = pydb__fsync_parent(mst, err);
        if (rc) return rc;
    }
    /* A header that does not describe the new files yet gets their state
     * as the next generation (readers of the old pair switch). */
    fd = pydb__vfs->open(mst, O_RDONLY, 0);
    if (fd >= 0) {
        if (pydb__vfs->pread(fd, ctl, sizeof ctl, 0) == (ssize_t)sizeof ctl &&
            fstat(fd, &ms) == 0 && stat(xrf, &xs) == 0) {
            pydb__ctl_decode(&c, ctl);
            if (pydb__shm_valid(shm) &&
                (pydb__shm_state(&cur, shm) != 0 ||
                 cur.next_mfn != c.next_mfn ||
                 cur.next_block != c.next_block ||
                 cur.next_pos != c.next_pos))
                pydb__swap_publish(shm, ctl, (int64_t)ms.st_size,
                                   (int64_t)xs.st_size);
        }
        pydb__vfs->close(fd);
    }
    if (pydb__vfs->unlink(mk) != 0 && errno != ENOENT)
        return PYDB_OSERROR(err, errno, mk, -1, "cannot remove the swap "
                            "marker: %s", strerror(errno));
    *finished = 1;
    return PYDB_OK;
}

/* ------------------------------------------------------------- locking */

static int ofd_lock(int fd, int type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = (short)type;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 0;
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* The errors of a try of the writer lock that failed (errno set): 0 when
 * it is only taken by another handle or process. */
static int lock_failed(pydb_db *db, pydb_error *err)
{
    if (errno == EAGAIN || errno == EACCES || errno == EINTR) return 0;
    return PYDB_OSERROR(err, errno, db->wal_path, -1,
                        "fcntl(F_OFD_SETLK) failed: %s", strerror(errno));
}

/* How long a writer stands back for a collector step of another process
 * that waits for the lock (its own wait is shorter:
 * PYDB_GC_LOCK_WAIT_MS, shm.h). */
#define GC_FIRST_MS 250

/* 1 while this writer (process `me`, which may wait: `waits`) lets a
 * waiting collector step of another process go first: for GC_FIRST_MS
 * from *since (set at the first look).  A live collector unclaims within
 * its own wait, so only a claim that lasts longer than that costs a look
 * at /proc: one left by a process that is gone is cleared then.  A
 * writer that only tries once never stands back. */
static int stand_back(pydb_db *db, pid_t me, int waits, int64_t *since)
{
    int32_t first = pydb__shm_writer_claimed(db->shm);
    int64_t now;
    if (first == 0 || first == me || !waits) return 0;
    now = pydb__now_ms();
    if (*since < 0) *since = now;
    if (now - *since >= PYDB_GC_LOCK_WAIT_MS &&
        pydb__shm_process_gone(first)) {
        pydb__shm_writer_unclaim(db->shm, first);
        return 0;
    }
    return now - *since < GC_FIRST_MS;
}

/* Take the cross-process writer lock, trying until `deadline` (ms,
 * CLOCK_MONOTONIC; < 0: one try).  Between tries it sleeps on the commit
 * header's wake word (shm.h), so a release wakes a waiter at once; the
 * sleep is bounded (0.5 ms doubling to 20 ms) for releases that wake
 * nobody.  A collector step (`gc`) claims the header's priority word
 * while it waits; other writers stand back meanwhile (stand_back). */
int pydb__wal_lock(pydb_db *db, int64_t deadline, int gc, pydb_error *err)
{
    unsigned nap = 500;
    int64_t since = -1;
    pid_t me = getpid();
    int rc;
    if (db->wal_pid != me) {
        /* a fork()ed child: the fd's open file description is the
         * parent's, and so is any OFD lock on it; a lock of its own needs
         * a description of its own (closing the copy leaves the parent's
         * lock alone: the parent still has its fd) */
        int fd = pydb__vfs->open(db->wal_path, O_RDWR, 0);
        if (fd < 0)
            return PYDB_OSERROR(err, errno, db->wal_path, -1,
                                "cannot open the write-ahead log: %s",
                                strerror(errno));
        pydb__vfs->close(db->wal_fd);
        db->wal_fd = fd;
        db->wal_pid = me;
    }
    gc = gc && deadline >= 0;
    if (gc) pydb__shm_writer_claim(db->shm, me);
    for (;;) {
        /* counted as waiting before the try: a release after it wakes
         * this writer, or moves the word it sleeps on */
        uint32_t ticket = pydb__shm_writer_ticket(db->shm);
        int go = gc || !stand_back(db, me, deadline >= 0, &since);
        if (go && ofd_lock(db->wal_fd, F_WRLCK) == 0) {
            rc = PYDB_OK;
        } else if (go && (rc = lock_failed(db, err)) != 0) {
            /* rc set */
        } else if (deadline < 0 || pydb__now_ms() >= deadline) {
            rc = PYDB_ERROR(err, PYDB_ELOCKED, db->wal_path, -1,
                            "another process (or handle) holds the writer "
                            "lock of this database");
        } else {
            pydb__shm_writer_wait(db->shm, ticket, nap);
            if (nap < 20000) nap *= 2;
            continue;
        }
        pydb__shm_writer_wait(db->shm, ticket, 0);   /* waits no more */
        break;
    }
    if (gc) pydb__shm_writer_unclaim(db->shm, me);
    return rc;
}

void pydb__wal_unlock(pydb_db *db)
{
    ofd_lock(db->wal_fd, F_UNLCK);
    pydb__shm_writer_released(db->shm);
}

/* ------------------------------------------------------ open and close */

int pydb__wal_open(pydb_db *db, const char *base, pydb_error *err)
{
    int rc, failed = 0;
    struct stat st;
    int existed;

    pydb__wal_path(db->wal_path, sizeof db->wal_path, base, db->mst.path);
    existed = stat(db->wal_path, &st) == 0;
    db->wal_fd = pydb__vfs->open(db->wal_path, O_RDWR | O_CREAT, 0644);
    db->wal_pid = getpid();
    if (db->wal_fd < 0)
        return PYDB_OSERROR(err, errno, db->wal_path, -1,
                            "cannot open the write-ahead log: %s",
                            strerror(errno));
    /* A new log's name must survive a power loss like its content. */
    if (!existed && pydb__synced(db) &&
        (rc = pydb__fsync_parent(db->wal_path, err)) != PYDB_OK)
        return rc;
    /* Recover now if no writer is active; else the next transaction will. */
    if (pydb__wal_lock(db, -1, 0, NULL) != PYDB_OK) return PYDB_OK;
    rc = pydb__wal_recover(db->wal_fd, db->wal_path, db->mst.fd, db->xrf.fd,
                           db->mst.path, db->xrf.path, NULL, &failed, err);
    if (rc == PYDB_OK) {
        int finished;
        rc = pydb__swap_recover(db->mst.path, db->xrf.path, db->shm,
                                pydb__synced(db), &finished,
                                err);
    }
    pydb__wal_unlock(db);
    return rc;
}

int pydb__wal_recover_readonly(const char *base, const char *mst,
                               const char *xrf, pydb_error *err)
{
    char wal[1100], mk[1200];
    struct stat st;
    int wfd = -1, mfd = -1, xfd = -1, rc = PYDB_OK, failed = 0;
    int swap;

    snprintf(mk, sizeof mk, "%s%s", mst, PYDB_SWAP_SUFFIX);
    swap = stat(mk, &st) == 0;
    if (pydb__find_file(wal, sizeof wal, base, "wal") != 0 ||
        stat(wal, &st) != 0 || (st.st_size == 0 && !swap))
        return PYDB_OK;   /* no log, or an empty one: nothing to do */
    wfd = pydb__vfs->open(wal, O_RDWR, 0);
    mfd = pydb__vfs->open(mst, O_RDWR, 0);
    xfd = pydb__vfs->open(xrf, O_RDWR, 0);
    if (wfd < 0 || mfd < 0 || xfd < 0) goto cleanup;  /* cannot write: skip */
    if (ofd_lock(wfd, F_WRLCK) != 0) goto cleanup;  /* writer busy */
    rc = pydb__wal_recover(wfd, wal, mfd, xfd, mst, xrf, NULL, &failed, err);
    if (rc == PYDB_OK && swap) {
        /* a dead compaction's swap: finish it (the header, if there is
         * one, gets the new files' state) */
        char shm_path[1200];
        struct pydb_shm *shm = NULL;
        int finished;
        pydb__shm_path(shm_path, sizeof shm_path, base, mst);
        if (pydb__shm_open(&shm, shm_path, mst, 0, NULL) != PYDB_OK)
            shm = NULL;
        rc = pydb__swap_recover(mst, xrf, shm, 1, &finished, err);
        pydb__shm_close(shm);
    }
cleanup:
    if (wfd >= 0) pydb__vfs->close(wfd);  /* releases the OFD lock */
    if (mfd >= 0) pydb__vfs->close(mfd);
    if (xfd >= 0) pydb__vfs->close(xfd);
    return rc;
}

void pydb__wal_close(pydb_db *db)
{
    if (db->wal_fd >= 0) pydb__vfs->close(db->wal_fd);
    db->wal_fd = -1;
}

/* ------------------------------------------------------------- commit */

int pydb__wal_append(pydb_db *db, const pydb_buf *log, int sync,
                     int *sync_failed, pydb_error *err)
{
    int e;

    PYDB_ASSERT(db->wal_fd >= 0 && log->n >= PYDB_WAL_HEAD + PYDB_WAL_TAIL);
    PYDB_ASSERT(memcmp(log->p, WAL_MAGIC, 8) == 0 &&
                memcmp(log->p + log->n - PYDB_WAL_TAIL, WAL_END, 8) == 0);
    e = -pydb__write_full(db->wal_fd, log->p, log->n, 0);
    if (e) {
        int rc = PYDB_OSERROR(err, e, db->wal_path, 0,
                              "writing the write-ahead log failed: %s",
                              strerror(e));
        pydb__vfs->ftruncate(db->wal_fd, 0);  /* best effort; torn anyway */
        return rc;
    }
    if (sync && pydb__vfs->fdatasync(db->wal_fd) != 0) {
        e = errno;
        *sync_failed = 1;
        return PYDB_OSERROR(err, e, db->wal_path, -1,
                            "fdatasync of the write-ahead log failed: %s",
                            strerror(e));
    }
    return PYDB_OK;
}

void pydb__wal_discard(pydb_db *db)
{
    pydb__vfs->ftruncate(db->wal_fd, 0);
}
