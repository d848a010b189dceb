/*
 * util.c - the helpers declared in util.h: growable buffer, CRC-32C,
 * write_full, the fsync-the-directory policy, whole-file writes and the
 * atomic replace of a file, the PYDB_ASSERT failure path, and the mark of
 * a call that must not wait (pydb__nowait_*, declared in pydb_int.h).
 *
 * Depends on: vfs.c (pydb__vfs: every file operation goes through the
 * table, so fault injection sees it), error.c (pydb__error_set).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#define MAX_PATH_LEN 4096

/* ------------------------------------------------------------ asserts */

void pydb__assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "pydb: assertion failed: %s (%s:%d)\n", cond, file,
            line);
    fflush(stderr);
    abort();
}

/* ------------------------------------------------------------- nowait */

/* pydb_int.h: the thread's *_nowait call in progress and whether it
 * refused work.  65536 postings are decoded in about 0.2 ms here: a
 * search longer than that gives the GIL up (docs/conventions.md §4). */
static _Thread_local struct {
    int on, refused;
    uint64_t left;   /* postings it may still read */
} nowait_call;
size_t pydb__nowait_postings = 65536;

void pydb__nowait_begin(void)
{
    nowait_call.on = 1;
    nowait_call.refused = 0;
    nowait_call.left = pydb__nowait_postings;
}

int pydb__nowait_end(void)
{
    int r = nowait_call.refused;
    nowait_call.on = 0;
    nowait_call.refused = 0;
    return r;
}

int pydb__nowait(void)
{
    return nowait_call.on;
}

int pydb__nowait_refuse(void)
{
    nowait_call.refused = 1;
    return PYDB_EWOULDBLOCK;
}

int pydb__nowait_spend(uint64_t postings)
{
    if (!nowait_call.on) return PYDB_OK;
    if (postings > nowait_call.left) return pydb__nowait_refuse();
    nowait_call.left -= postings;
    return PYDB_OK;
}

size_t pydb__test_set_nowait_postings(size_t n)
{
    size_t old = pydb__nowait_postings;
    pydb__nowait_postings = n;
    return old;
}

/* ------------------------------------------------------------- buffer */

int pydb__buf_reserve(pydb_buf *b, size_t more)
{
    size_t cap;
    uint8_t *nv;
    if (b->n + more <= b->cap) return 0;
    cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    nv = realloc(b->p, cap);
    if (!nv) {
        b->oom = 1;
        return -1;
    }
    b->p = nv;
    b->cap = cap;
    return 0;
}

uint8_t *pydb__buf_grow(pydb_buf *b, size_t more)
{
    if (pydb__buf_reserve(b, more) < 0) return NULL;
    b->n += more;
    return b->p + b->n - more;
}

void pydb__buf_put(pydb_buf *b, const void *p, size_t n)
{
    if (n == 0 || pydb__buf_reserve(b, n) < 0) return;
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

void pydb__buf_free(pydb_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void pydb__quote_bytes(char *out, size_t cap, const uint8_t *p, size_t n,
                       size_t max)
{
    size_t o = 0, i;
    for (i = 0; i < n && i < max; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f) {
            if (o + 2 > cap) break;
            out[o++] = (char)p[i];
        } else {
            if (o + 5 > cap) break;
            snprintf(out + o, cap - o, "\\x%02x", p[i]);
            o += 4;
        }
    }
    if (i < n && o + 4 <= cap) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = 0;
}

/* ------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[256];
static int crc_hw;   /* the CPU has the CRC32 instruction (SSE4.2) */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & -(c & 1));
        crc_table[i] = c;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* The register form (pre- and post-inversion are the caller's): a byte at
 * a time through the table. */
static uint32_t crc_portable(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n--) crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with SSE4.2's CRC32 instruction, whose polynomial is
 * CRC-32C's (Intel SDM, CRC32): 8 bytes a step, some 20 times the
 * table's speed. */
__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    for (; n && ((uintptr_t)p & 7); n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    for (; n; n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

uint32_t pydb__crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
#if defined(__x86_64__) && defined(__GNUC__)
    if (crc_hw) return ~crc_sse42(~crc, data, n);
#endif
    return ~crc_portable(~crc, data, n);
}

uint32_t pydb__test_crc32c(uint32_t crc, const void *data, size_t n,
                           int portable)
{
    if (!portable) return pydb__crc32c(crc, data, n);
    pthread_once(&crc_once, crc_init);
    return ~crc_portable(~crc, data, n);
}

/* --------------------------------------------------------------- time */

int64_t pydb__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int pydb__cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex,
                          int64_t deadline)
{
    struct timespec ts;
    if (deadline <= pydb__now_ms()) return ETIMEDOUT;
    ts.tv_sec = (time_t)(deadline / 1000);
    ts.tv_nsec = (long)(deadline % 1000) * 1000000;
    return pthread_cond_timedwait(cond, mutex, &ts);
}

/* -------------------------------------------------------------- files */

int pydb__write_full(int fd, const void *buf, size_t n, int64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = pydb__vfs->pwrite(fd, (const uint8_t *)buf + done,
                                      n - done, (off_t)(off + (int64_t)done));
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (w == 0) return -EIO;
        done += (size_t)w;
    }
    return 0;
}

int pydb__fsync_dir(const char *dir, pydb_error *err)
{
    int fd = pydb__vfs->open(dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return PYDB_OSERROR(err, errno, dir, -1,
                            "cannot open the directory: %s", strerror(errno));
    if (pydb__vfs->fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        pydb__vfs->close(fd);
        return PYDB_OSERROR(err, e, dir, -1,
                            "fsync of the directory failed: %s", strerror(e));
    }
    pydb__vfs->close(fd);
    return PYDB_OK;
}

/* pydb__fsync_file(); with missing_ok a file that does not exist (its
 * open fails with ENOENT) sets *absent and counts as done. */
static int fsync_path(const char *path, int missing_ok, int *absent,
                      pydb_error *err)
{
    int fd = pydb__vfs->open(path, O_RDONLY, 0);
    if (absent) *absent = 0;
    if (fd < 0) {
        if (missing_ok && errno == ENOENT) {
            *absent = 1;
            return PYDB_OK;
        }
        return PYDB_OSERROR(err, errno, path, -1, "cannot open: %s",
                            strerror(errno));
    }
    if (pydb__vfs->fsync(fd) != 0) {
        int e = errno;
        pydb__vfs->close(fd);
        return PYDB_OSERROR(err, e, path, -1, "fsync failed: %s",
                            strerror(e));
    }
    pydb__vfs->close(fd);
    return PYDB_OK;
}

int pydb__fsync_file(const char *path, pydb_error *err)
{
    return fsync_path(path, 0, NULL, err);
}

int pydb__fsync_if_present(const char *path, int *absent, pydb_error *err)
{
    return fsync_path(path, 1, absent, err);
}

/* What pydb__same_file and pydb__fd_size read of a file. */
typedef struct file_facts {
    uint64_t size, ino, dev_major, dev_minor;
} file_facts;

/* The size, inode and device of `fd` (path NULL) or of `path` in *f, by
 * a statx that asks for `mask` alone: never the times (util.h,
 * pydb__fd_size).  0 or -1 with errno.  Where there is no statx (a C
 * library without it, or a kernel before Linux 4.11: ENOSYS), or it
 * does not give all of `mask`, fstat/stat fill the same fields. */
static int facts_of(int fd, const char *path, unsigned mask, file_facts *f)
{
    struct stat st;
    int rc;
#ifdef STATX_SIZE
    struct statx sx;
    rc = statx(path ? AT_FDCWD : fd, path ? path : "",
               path ? 0 : AT_EMPTY_PATH, mask, &sx);
    if (rc == 0 && (sx.stx_mask & mask) == mask) {
        f->size = sx.stx_size;
        f->ino = sx.stx_ino;
        f->dev_major = sx.stx_dev_major;
        f->dev_minor = sx.stx_dev_minor;
        return 0;
    }
    if (rc != 0 && errno != ENOSYS) return -1;
    /* no statx, or it gave less than asked: fstat/stat give it all */
#else
    (void)mask;
#endif
    rc = path ? stat(path, &st) : fstat(fd, &st);
    if (rc != 0) return -1;
    f->size = (uint64_t)st.st_size;
    f->ino = (uint64_t)st.st_ino;
    f->dev_major = major(st.st_dev);
    f->dev_minor = minor(st.st_dev);
    return 0;
}

#ifdef STATX_SIZE
#define PYDB_STATX_SIZE STATX_SIZE
#define PYDB_STATX_INO STATX_INO
#else
#define PYDB_STATX_SIZE 0u
#define PYDB_STATX_INO 0u
#endif

int pydb__same_file(int fd, const char *path)
{
    file_facts a, b;
    return facts_of(fd, NULL, PYDB_STATX_INO, &a) == 0 &&
           facts_of(-1, path, PYDB_STATX_INO, &b) == 0 &&
           a.dev_major == b.dev_major && a.dev_minor == b.dev_minor &&
           a.ino == b.ino;
}

int pydb__fd_size(int fd, int64_t *size)
{
    file_facts f;
    if (facts_of(fd, NULL, PYDB_STATX_SIZE, &f) != 0) return -1;
    *size = (int64_t)f.size;
    return 0;
}

int pydb__fsync_parent(const char *path, pydb_error *err)
{
    char dir[MAX_PATH_LEN + 1];
    if (strlen(path) > MAX_PATH_LEN)
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1, "path too long");
    snprintf(dir, sizeof dir, "%s", path);
    return pydb__fsync_dir(dirname(dir), err);
}

/* pydb__write_file(); *created: the file was created (so a caller that
 * gives up may remove it). */
static int write_file(const char *path, const void *data, size_t len,
                      int excl, int sync, int *fsync_failed, int *created,
                      pydb_error *err)
{
    int fd, e, rc = PYDB_OK;

    *created = 0;
    fd = pydb__vfs->open(path, O_RDWR | O_CREAT | (excl ? O_EXCL : O_TRUNC),
                         0644);
    if (fd < 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot create: %s",
                            strerror(errno));
    *created = 1;
    e = len ? -pydb__write_full(fd, data, len, 0) : 0;
    if (e) {
        rc = PYDB_OSERROR(err, e, path, 0, "write failed: %s", strerror(e));
        goto cleanup;
    }
    if (sync && pydb__vfs->fsync(fd) != 0) {
        if (fsync_failed) *fsync_failed = 1;
        rc = PYDB_OSERROR(err, errno, path, -1, "fsync failed: %s",
                          strerror(errno));
        goto cleanup;
    }
cleanup:
    if (pydb__vfs->close(fd) != 0 && rc == PYDB_OK)
        rc = PYDB_OSERROR(err, errno, path, -1, "close failed: %s",
                          strerror(errno));
    return rc;
}

int pydb__write_file(const char *path, const void *data, size_t len,
                     int excl, int sync, int *fsync_failed, pydb_error *err)
{
    int created;
    return write_file(path, data, len, excl, sync, fsync_failed, &created,
                      err);
}

int pydb__replace_file(const char *path, const char *tmp, const void *data,
                       size_t len, int sync, int *fsync_failed,
                       pydb_error *err)
{
    char tmpbuf[MAX_PATH_LEN + 16];
    int rc, created;

    if (!tmp) {
        if (strlen(path) > MAX_PATH_LEN)
            return PYDB_ERROR(err, PYDB_EINVAL, path, -1, "path too long");
        snprintf(tmpbuf, sizeof tmpbuf, "%s.pydb-tmp", path);
        tmp = tmpbuf;
    }
    rc = write_file(tmp, data, len, 0, sync, fsync_failed, &created, err);
    if (rc) {
        if (created) pydb__vfs->unlink(tmp);
        return rc;
    }
    if (pydb__vfs->rename(tmp, path) != 0) {
        rc = PYDB_OSERROR(err, errno, path, -1, "rename failed: %s",
                          strerror(errno));
        pydb__vfs->unlink(tmp);
        return rc;
    }
    if (sync && (rc = pydb__fsync_parent(path, err)) != PYDB_OK) {
        if (fsync_failed) *fsync_failed = 1;
        return rc;
    }
    return PYDB_OK;
}

/* pydb__swap_file(): write data[len] into the spare (created if
 * missing), cut to len bytes. */
static int write_spare(const char *spare, const void *data, size_t len,
                       pydb_error *err)
{
    struct stat st;
    int e, rc = PYDB_OK, fd = pydb__vfs->open(spare, O_RDWR | O_CREAT, 0644);

    if (fd < 0)
        return PYDB_OSERROR(err, errno, spare, -1, "cannot open: %s",
                            strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = PYDB_OSERROR(err, errno, spare, -1, "cannot stat: %s",
                          strerror(errno));
        goto cleanup;
    }
    e = len ? -pydb__write_full(fd, data, len, 0) : 0;
    if (e) {
        rc = PYDB_OSERROR(err, e, spare, 0, "write failed: %s", strerror(e));
        goto cleanup;
    }
    /* Cut what an older, longer content left -- in a spare that held
     * one, whatever its length: the same operations every time, as the
     * fault tests count them; a spare just made has nothing to cut (and
     * LazyFS fails that ftruncate with ENOENT).  Not O_TRUNC: ext4 then
     * starts writeback at close, as it does for a rename over a file --
     * the cost pydb__swap_file avoids. */
    if (st.st_size > 0 && pydb__vfs->ftruncate(fd, (off_t)len) != 0)
        rc = PYDB_OSERROR(err, errno, spare, (int64_t)len,
                          "ftruncate failed: %s", strerror(errno));
cleanup:
    if (pydb__vfs->close(fd) != 0 && rc == PYDB_OK)
        rc = PYDB_OSERROR(err, errno, spare, -1, "close failed: %s",
                          strerror(errno));
    return rc;
}

int pydb__swap_file(const char *path, const void *data, size_t len,
                    pydb_error *err)
{
    char spare[MAX_PATH_LEN + 16];
    int rc, e;

    if (strlen(path) > MAX_PATH_LEN)
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1, "path too long");
    snprintf(spare, sizeof spare, "%s.pydb-next", path);
    if ((rc = write_spare(spare, data, len, err))) return rc;
    if (pydb__vfs->exchange(spare, path) == 0) return PYDB_OK;
    e = errno;
    if (e != EINVAL && e != ENOSYS && e != EOPNOTSUPP && e != ENOENT)
        return PYDB_OSERROR(err, e, path, -1, "exchange with %s failed: %s",
                            spare, strerror(e));
    if (pydb__vfs->rename(spare, path) != 0)
        return PYDB_OSERROR(err, errno, path, -1, "rename failed: %s",
                            strerror(errno));
    return PYDB_OK;
}

int pydb__ofd_lock(int fd, int type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = (short)type;
    fl.l_whence = SEEK_SET;
    return fcntl(fd, F_OFD_SETLK, &fl);
}

int pydb__ofd_held(int fd)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return 0;
    return fl.l_type != F_UNLCK;
}
