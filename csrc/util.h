/*
 * util.h - byte-level helpers shared by every file of csrc/: a growable
 * buffer, little-endian codecs, CRC-32C, writing a whole buffer, the one
 * fsync-the-directory policy and the one atomic replace-a-file routine,
 * and PYDB_ASSERT.
 *
 * Depends on: pydb.h (pydb_error, error codes), the vfs table (vfs.c;
 * every file operation here goes through pydb__vfs so that the fault
 * injection of the tests sees it) and error.c.  Nothing here knows about
 * databases, records or indexes.
 */
#ifndef PYDB_UTIL_H
#define PYDB_UTIL_H

#include "pydb.h"
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

/* ---- assertions ----
 * PYDB_ASSERT(cond): with PYDB_DEBUG defined, a failed condition prints
 * the condition, file and line to stderr and aborts (whatever NDEBUG
 * says); without it the condition is not evaluated.  Use it at
 * invariants a reviewer wants checked, never for input validation (bad
 * input is an error code, not an assertion). */
void pydb__assert_fail(const char *cond, const char *file, int line)
    __attribute__((noreturn));
#ifdef PYDB_DEBUG
#define PYDB_ASSERT(cond) \
    ((cond) ? (void)0 : pydb__assert_fail(#cond, __FILE__, __LINE__))
#else
#define PYDB_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

/* ---- little-endian codecs ---- */
static inline uint16_t pydb__u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t pydb__u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
static inline uint64_t pydb__u64(const uint8_t *p) {
    return (uint64_t)pydb__u32(p) | ((uint64_t)pydb__u32(p + 4) << 32);
}
static inline void pydb__put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8);
}
static inline void pydb__put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void pydb__put64(uint8_t *p, uint64_t v) {
    pydb__put32(p, (uint32_t)v);
    pydb__put32(p + 4, (uint32_t)(v >> 32));
}

/* ---- growable byte buffer ----
 * Zero-initialise (pydb_buf b = {0}), append, free with pydb__buf_free().
 * A failed allocation sets `oom` and leaves the contents as they were;
 * the appenders that return void just do nothing, so a writer may append
 * a run of pieces and test `oom` once at the end. */
typedef struct pydb_buf {
    uint8_t *p;
    size_t n, cap;
    int oom;        /* an allocation failed                               */
} pydb_buf;

/* Room for `more` bytes after n (capacity doubles from 4096): 0, or -1
 * with oom set. */
int pydb__buf_reserve(pydb_buf *b, size_t more);
/* Append `more` uninitialised bytes; their address, or NULL (oom set). */
uint8_t *pydb__buf_grow(pydb_buf *b, size_t more);
/* Append n bytes (nothing if n is 0 or the allocation fails: oom set). */
void pydb__buf_put(pydb_buf *b, const void *p, size_t n);
void pydb__buf_free(pydb_buf *b);

/* The n bytes at p into out (cap bytes, NUL-terminated) as printable
 * ASCII for an error message: bytes outside 0x20..0x7e as \xNN, and
 * "..." instead of what follows the first `max` bytes (messages must be
 * valid UTF-8: the binding decodes them). */
void pydb__quote_bytes(char *out, size_t cap, const uint8_t *p, size_t n,
                       size_t max);

/* ---- checksum ----
 * CRC-32C (Castagnoli, reflected, as in iSCSI/ext4): start with crc 0;
 * pass the result back in to continue over more bytes. */
uint32_t pydb__crc32c(uint32_t crc, const void *p, size_t n);

/* ---- time ---- */
/* Milliseconds of CLOCK_MONOTONIC (for deadlines). */
int64_t pydb__now_ms(void);
/* pthread_cond_timedwait() until `deadline` (ms of pydb__now_ms()), with
 * mutex held, on a condition made with CLOCK_MONOTONIC
 * (pthread_condattr_setclock), so that a step of the wall clock neither
 * stretches nor cuts the wait; returns at once (ETIMEDOUT) when the
 * deadline has passed. */
int pydb__cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex,
                          int64_t deadline);

/* ---- file helpers (all through pydb__vfs) ---- */

/* Write n bytes at off, retrying short writes and EINTR.  0 or -errno. */
int pydb__write_full(int fd, const void *buf, size_t n, int64_t off);

/* fsync a directory, so that names created or renamed in it survive a
 * power loss.  Policy (the one for the whole core): a directory that
 * cannot be opened or whose fsync fails is reported (PYDB_EIO with the
 * errno); the one exception is fsync failing with EINVAL, which is how a
 * file system says it does not support fsync on a directory: that counts
 * as done.  Returns 0 or PYDB_EIO. */
int pydb__fsync_dir(const char *dir, pydb_error *err);
/* The same for the directory that holds `path` (a file name). */
int pydb__fsync_parent(const char *path, pydb_error *err);
/* An open-file-description lock of `type` (F_WRLCK, F_UNLCK) on the
 * whole of fd, not waiting (F_OFD_SETLK): pydb's writer lock on the log
 * (wal.c), the compaction job's lock (compact.c), mkxrf's on the XRF.
 * 0, or -1 with errno (EAGAIN or EACCES: another description holds it). */
int pydb__ofd_lock(int fd, int type);
/* Whether a lock of another open file description (pydb__ofd_lock: a
 * writer's, another handle's or process's) covers any of fd: 1 or 0 (0
 * too where the kernel cannot say). */
int pydb__ofd_held(int fd);
/* fsync the file at path (opened read-only for it): PYDB_EIO with the
 * errno when it cannot be opened or the fsync fails. */
int pydb__fsync_file(const char *path, pydb_error *err);
/* The same, but a file that does not exist (its open fails with ENOENT;
 * not a failed fsync) sets *absent and counts as done. */
int pydb__fsync_if_present(const char *path, int *absent, pydb_error *err);
/* 1 if the open file fd is the file now named path (same device and
 * inode): not replaced by a rename since it was opened. */
int pydb__same_file(int fd, const char *path);
/* The size in bytes of the open file fd in *size: 0, or -1 with errno.
 * Neither this nor pydb__same_file asks for the file's times: on Linux
 * 6.13 and later (multigrain timestamps) a stat that reports them makes
 * the next write to any file change its modification time, which a
 * durable commit's fdatasync of its log then writes as well (measured
 * on ext4 here: about 50 us more per fdatasync; util.c).  Use these,
 * not fstat, on paths that run at every commit. */
int pydb__fd_size(int fd, int64_t *size);

/* Create `path` (O_EXCL if excl, else truncate what is there), write
 * len bytes and, if sync, fsync it; then close it.  A failed fsync also
 * sets *fsync_failed (may be NULL).  0 or a PYDB error. */
int pydb__write_file(const char *path, const void *data, size_t len,
                     int excl, int sync, int *fsync_failed, pydb_error *err);

/* Atomically replace `path` with len bytes: write them to `tmp` (NULL:
 * "<path>.pydb-tmp"), fsync it, rename it over path, fsync the parent
 * directory (both fsyncs only if sync).  Readers see the old file or the
 * new one, never a mixture.  On failure before the rename the temporary
 * file is removed and path is untouched.  A failed fsync also sets
 * *fsync_failed (may be NULL).  0 or a PYDB error. */
int pydb__replace_file(const char *path, const char *tmp, const void *data,
                       size_t len, int sync, int *fsync_failed,
                       pydb_error *err);

/* Replace `path` with len bytes without creating or removing a file:
 * they are written to the spare "<path>.pydb-next" (created the first
 * time, kept after), whose name is then swapped with path's (the vfs's
 * exchange), so that the spare holds the previous content and the next
 * swap writes into it.  Nothing is synced (callers that need the bytes
 * durable have them in the log: a checkpoint syncs path and its folder).
 * Where the file system cannot swap names, or path does not exist yet,
 * the spare is renamed over path instead (pydb__replace_file's way,
 * unsynced).  Readers that open path see the old file or the new one;
 * one that opened it before a swap and still reads it after the next
 * swap began may see a mixture, so readers check what they read (the
 * native index's MANIFEST carries a CRC-32C: pydb__nman_read).
 * On failure path is untouched.  0 or a PYDB error. */
int pydb__swap_file(const char *path, const void *data, size_t len,
                    pydb_error *err);

#endif
