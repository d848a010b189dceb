/*
 * vfs.c - every file operation of the core goes through one table
 * (pydb__vfs), so that tests can swap in failing or slow versions.
 * Also the one function that reads bytes of a database file in each of
 * the three I/O modes, and the test hooks (slow reads, fault injection).
 *
 * Depends on: error.c only.  Everything that touches a file sits above.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static int posix_open(const char *path, int flags, int mode)
{
    return open(path, flags | O_CLOEXEC, mode);
}

static ssize_t posix_pread_nowait(int fd, void *buf, size_t n, off_t off)
{
#ifdef RWF_NOWAIT
    struct iovec iov = {buf, n};
    return preadv2(fd, &iov, 1, off, RWF_NOWAIT);
#else
    (void)fd; (void)buf; (void)n; (void)off;
    errno = EAGAIN;
    return -1;
#endif
}

static int posix_ftruncate(int fd, off_t len) { return ftruncate(fd, len); }

static int posix_exchange(const char *a, const char *b)
{
#ifdef RENAME_EXCHANGE
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
#else
    (void)a; (void)b;
    errno = ENOSYS;
    return -1;
#endif
}

pydb_vfs pydb__vfs_posix = {posix_open, pread, pwrite, fsync, close,
                            posix_pread_nowait, fdatasync, posix_ftruncate,
                            rename, unlink, posix_exchange};
pydb_vfs *pydb__vfs = &pydb__vfs_posix;

/* Read n bytes at off with fd, retrying on EINTR and short reads.
 * Returns bytes read (< n only at end of file) or -errno. */
static ssize_t read_full(int fd, uint8_t *buf, size_t n, int64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pydb__vfs->pread(fd, buf + done, n - done,
                                     (off_t)(off + (int64_t)done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* The error of n bytes at off that lie past the end of file f, `size`
 * bytes now: cut short after open. */
static int cut_error(const pydb_file *f, size_t n, int64_t off,
                     const char *what, int64_t size, pydb_error *err)
{
    return PYDB_CORRUPT(err, f->path, off,
                        "%s: %zu bytes at offset %lld lie past the end of "
                        "the file (%lld bytes now): it was cut short after "
                        "open, by another program?", what, n, (long long)off,
                        (long long)size);
}

/* The size of file f now (fstat of its fd), or -1 where fstat fails. */
static int64_t file_size_now(const pydb_file *f)
{
    struct stat st;
    if (fstat(__atomic_load_n(&f->fd, __ATOMIC_ACQUIRE), &st) != 0)
        return -1;
    return (int64_t)st.st_size;
}

int64_t pydb__file_short_of(const pydb_file *f, size_t n, int64_t off)
{
    int64_t size = file_size_now(f);
    return size >= 0 && size < off + (int64_t)n ? size : -1;
}

int pydb__file_still_holds(const pydb_file *f, size_t n, int64_t off,
                           const char *what, pydb_error *err)
{
    int64_t size = pydb__file_short_of(f, n, off);
    return size < 0 ? PYDB_OK : cut_error(f, n, off, what, size, err);
}

/* A copy out of f's mapping; a file cut short under the mapping (by
 * another program: the size the handle knows is older) is corruption,
 * not a signal (mapguard.c). */
static int map_read(const pydb_file *f, void *buf, size_t n, int64_t off,
                    const char *what, pydb_error *err)
{
    if (pydb__map_copy(buf, f->map + off, n) == 0) return PYDB_OK;
    return cut_error(f, n, off, what, file_size_now(f), err);
}

int pydb__file_read(const pydb_file *f, int io, void *buf, size_t n,
                    int64_t off, const char *what, pydb_error *err)
{
    ssize_t got;
    int rc_map;
    int64_t size = pydb__fsize(f);
    /* A compaction may switch the handle to a new file pair while this
     * read runs (read.c, files_switch): fd, dfd and map_len are loaded
     * once; the mapping's address never changes and every page of it
     * stays mapped (file pages below the file's end, zeros after), so a
     * late read gets wrong bytes at worst and the caller retries.
     * Acquire loads, paired with the switch's release stores: a read that
     * sees the new fd sees the open that made it (relaxed, ThreadSanitizer
     * reported the pread racing with that open). */
    int fd = __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE);
    int dfd = __atomic_load_n(&f->dfd, __ATOMIC_ACQUIRE);
    size_t map_len = __atomic_load_n(&f->map_len, __ATOMIC_ACQUIRE);

    if (off < 0 || (int64_t)n > size || off > size - (int64_t)n)
        return PYDB_CORRUPT(err, f->path, off,
                            "%s: %zu bytes at offset %lld pass the end of "
                            "the file (%lld bytes)",
                            what, n, (long long)off, (long long)size);
    if (n == 0) return PYDB_OK;
    if (io == PYDB_IO_MMAP && f->map && off + (int64_t)n <= (int64_t)map_len) {
        rc_map = map_read(f, buf, n, off, what, err);
        if (rc_map == PYDB_OK) pydb__resident_mark(&f->res, map_len, off, n);
        return rc_map;
    }
    if (io == PYDB_IO_DIRECT && dfd >= 0) {
        int64_t start = off & ~(int64_t)(PYDB_DIRECT_ALIGN - 1);
        int64_t end = off + (int64_t)n;
        size_t len = (size_t)(((end - start) + PYDB_DIRECT_ALIGN - 1) &
                              ~(int64_t)(PYDB_DIRECT_ALIGN - 1));
        uint8_t *bounce = NULL;
        int rc = PYDB_OK;
        if (posix_memalign((void **)&bounce, PYDB_DIRECT_ALIGN, len) != 0)
            return PYDB_ERROR(err, PYDB_ENOMEM, f->path, off,
                              "no memory for a %zu-byte O_DIRECT buffer", len);
        got = read_full(dfd, bounce, len, start);
        if (got == -EINVAL)
            rc = pydb__error_set(err, PYDB_EUNSUPPORTED, EINVAL, f->path, off,
                                 __FILE__, __LINE__,
                                 "the file system refuses O_DIRECT reads");
        else if (got < 0)
            rc = PYDB_OSERROR(err, (int)-got, f->path, off,
                              "reading %s: %s", what, strerror((int)-got));
        else if (got < end - start)
            rc = PYDB_CORRUPT(err, f->path, off,
                              "%s: %zu bytes wanted, the file ends %lld "
                              "bytes into them (it shrank after open?)",
                              what, n,
                              (long long)(start + got > off
                                              ? start + got - off : 0));
        else
            memcpy(buf, bounce + (off - start), n);
        free(bounce);
        return rc;
    }
    got = read_full(fd, buf, n, off);
    if (got < 0)
        return PYDB_OSERROR(err, (int)-got, f->path, off, "reading %s: %s",
                            what, strerror((int)-got));
    if ((size_t)got < n)
        return PYDB_CORRUPT(err, f->path, off,
                            "%s: %zu bytes wanted, the file ends %lld bytes "
                            "into them (it shrank after open?)", what, n,
                            (long long)got);
    return PYDB_OK;
}

int pydb__file_read_nowait(const pydb_file *f, int io, void *buf, size_t n,
                           int64_t off, const char *what, pydb_error *err)
{
    ssize_t got;
    int64_t size = pydb__fsize(f);
    size_t map_len = __atomic_load_n(&f->map_len, __ATOMIC_ACQUIRE);
    if (off < 0 || (int64_t)n > size || off > size - (int64_t)n ||
        n == 0)  /* let the blocking path report it */
        return PYDB_EWOULDBLOCK;
    /* direct: always goes to the disk. */
    if (io == PYDB_IO_DIRECT) return PYDB_EWOULDBLOCK;
    /* mmap: a copy out of the mapping may fault on the disk, and must
     * then happen with the GIL released (docs/design.md §3): only pages
     * known resident are copied here.  Past the mapping: pread below. */
    if (io == PYDB_IO_MMAP && f->map && off + (int64_t)n <= (int64_t)map_len) {
        if (!pydb__resident(&f->res, f->map, map_len, off, n))
            return PYDB_EWOULDBLOCK;
        return map_read(f, buf, n, off, what, err);
    }
    got = pydb__vfs->pread_nowait(__atomic_load_n(&f->fd, __ATOMIC_ACQUIRE),
                                  buf, n, (off_t)off);
    if (got < 0 || (size_t)got != n) return PYDB_EWOULDBLOCK;
    (void)what; (void)err;
    return PYDB_OK;
}

/* ---- test hook: a table whose pread sleeps first (GIL-release tests) ---- */

static unsigned read_delay_usec;

static ssize_t slow_pread(int fd, void *buf, size_t n, off_t off)
{
    if (read_delay_usec) usleep(read_delay_usec);
    return pread(fd, buf, n, off);
}

static ssize_t never_cached(int fd, void *buf, size_t n, off_t off)
{
    (void)fd; (void)buf; (void)n; (void)off;
    errno = EAGAIN;
    return -1;
}

static pydb_vfs vfs_slow = {posix_open, slow_pread, pwrite, fsync, close,
                            never_cached, fdatasync, posix_ftruncate, rename,
                            unlink, posix_exchange};

void pydb__test_set_read_delay(unsigned usec)
{
    read_delay_usec = usec;
    pydb__vfs = usec ? &vfs_slow : &pydb__vfs_posix;
}

/* ---- test hook: fault injection on the write-side operations ---- */

static long fault_at;        /* fail the fault_at-th operation (1-based)  */
static int fault_errno;
static int fault_short;      /* short write at fault_at, error after it   */
static long fault_count;     /* operations counted                        */
static long fault_syncs;     /* fsyncs and fdatasyncs among them          */
static int fault_was_short;  /* the fault_at-th operation wrote short     */
static int fault_crash;      /* _exit(137) instead of failing (crash point) */
static int fault_sticky;     /* every operation from fault_at on fails (a
                                full disk) */
static const char *fault_fired; /* atomic: read by other threads     */
static unsigned fault_pause_usec; /* the failing operation sleeps first */
static pthread_t fault_thread; /* only its operations count: a collector
                                  thread's I/O must not move the count */

static int fault_mine(void)
{
    return pthread_equal(pthread_self(), fault_thread);
}

/* The first operation that failed (or wrote short) is `name`. */
static void fired(const char *name)
{
    const char *none = NULL;
    __atomic_compare_exchange_n(&fault_fired, &none, name, 0,
                                __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

/* 1 if this operation must fail (errno set). */
static int fault_hit(const char *name)
{
    long n;
    if (!fault_mine()) return 0;
    n = __atomic_add_fetch(&fault_count, 1, __ATOMIC_RELAXED);
    if (fault_at > 0 && (n == fault_at || (fault_sticky && n > fault_at))) {
        if (fault_crash) _exit(137);
        fired(name);
        if (fault_pause_usec) usleep(fault_pause_usec);
        errno = fault_errno;
        return 1;
    }
    if (fault_was_short && n == fault_at + 1) {
        errno = fault_errno;
        return 1;
    }
    return 0;
}

static ssize_t faulty_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    long next = __atomic_load_n(&fault_count, __ATOMIC_RELAXED) + 1;
    if (!fault_mine()) return pwrite(fd, buf, n, off);
    if (fault_crash && fault_at > 0 && next == fault_at) _exit(137);
    if (fault_short && fault_at > 0 && next == fault_at && n > 1) {
        __atomic_add_fetch(&fault_count, 1, __ATOMIC_RELAXED);
        fired("pwrite (short)");
        fault_was_short = 1;
        return pwrite(fd, buf, n / 2, off);
    }
    if (fault_hit("pwrite")) return -1;
    return pwrite(fd, buf, n, off);
}
static int faulty_fsync(int fd)
{
    if (fault_mine()) __atomic_add_fetch(&fault_syncs, 1, __ATOMIC_RELAXED);
    return fault_hit("fsync") ? -1 : fsync(fd);
}
static int faulty_fdatasync(int fd)
{
    if (fault_mine()) __atomic_add_fetch(&fault_syncs, 1, __ATOMIC_RELAXED);
    return fault_hit("fdatasync") ? -1 : fdatasync(fd);
}
static int faulty_ftruncate(int fd, off_t len)
{
    return fault_hit("ftruncate") ? -1 : ftruncate(fd, len);
}
static int faulty_rename(const char *a, const char *b)
{
    return fault_hit("rename") ? -1 : rename(a, b);
}
static int faulty_unlink(const char *a)
{
    return fault_hit("unlink") ? -1 : unlink(a);
}
static int faulty_exchange(const char *a, const char *b)
{
    return fault_hit("exchange") ? -1 : posix_exchange(a, b);
}

static pydb_vfs vfs_faulty = {posix_open, pread, faulty_pwrite, faulty_fsync,
                              close, posix_pread_nowait, faulty_fdatasync,
                              faulty_ftruncate, faulty_rename, faulty_unlink,
                              faulty_exchange};

void pydb__test_fail_io(long n, int eno, int short_write)
{
    fault_at = n;
    fault_errno = eno;
    fault_short = short_write == 1;
    fault_crash = short_write == 2;
    fault_sticky = short_write == 3;
    fault_count = 0;
    fault_syncs = 0;
    __atomic_store_n(&fault_fired, NULL, __ATOMIC_RELEASE);
    fault_pause_usec = 0;
    fault_was_short = 0;
    fault_thread = pthread_self();
    pydb__vfs = n == 0 ? &pydb__vfs_posix : &vfs_faulty;
}

long pydb__test_io_count(void)
{
    return __atomic_load_n(&fault_count, __ATOMIC_RELAXED);
}

long pydb__test_io_syncs(void)
{
    return __atomic_load_n(&fault_syncs, __ATOMIC_RELAXED);
}

const char *pydb__test_io_fired(void)
{
    return __atomic_load_n(&fault_fired, __ATOMIC_ACQUIRE);
}

void pydb__test_fault_pause(unsigned usec) { fault_pause_usec = usec; }
