/*
 * nidx_bytes.c - byte helpers of the native index (see nidx_bytes.h):
 * growable buffer, checksum, whole-file write, directory fsync.
 *
 * Depends on: pydb_int.h (errors, the vfs).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include "nidx_bytes.h"

uint64_t pydb__nidx_checksum(const uint8_t *p, size_t n)
{
    uint64_t h = 0x243F6A8885A308D3ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = nidx_rd64(p + i);
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) {
        h = (h ^ p[i]) * 0x100000001B3ull;
    }
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

int pydb__nbuf_reserve(nidx_buf *b, size_t more)
{
    if (b->n + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    uint8_t *nv = realloc(b->p, cap);
    if (!nv) {
        b->oom = 1;
        return -1;
    }
    b->p = nv;
    b->cap = cap;
    return 0;
}

void pydb__nbuf_put(nidx_buf *b, const void *p, size_t n)
{
    if (n == 0 || pydb__nbuf_reserve(b, n) < 0) return;
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

int pydb__nidx_write_file(const char *path, const void *data,
                          size_t len, int excl, pydb_error *err)
{
    int fd = pydb__vfs->open(path, O_WRONLY | O_CREAT |
                                       (excl ? O_EXCL : O_TRUNC), 0644);
    size_t done = 0;
    if (fd < 0) return PYDB_OSERROR(err, errno, path, -1, "cannot create");
    while (done < len) {
        ssize_t r = pydb__vfs->pwrite(fd, (const uint8_t *)data + done,
                                      len - done, (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            pydb__vfs->close(fd);
            return PYDB_OSERROR(err, e, path, (int64_t)done, "cannot write");
        }
        done += (size_t)r;
    }
    if (pydb__vfs->fsync(fd) != 0) {
        int e = errno;
        pydb__vfs->close(fd);
        return PYDB_OSERROR(err, e, path, -1, "cannot fsync");
    }
    if (pydb__vfs->close(fd) != 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot close");
    return PYDB_OK;
}

int pydb__nidx_fsync_dir(const char *dir, pydb_error *err)
{
    int fd = pydb__vfs->open(dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) return PYDB_OSERROR(err, errno, dir, -1, "cannot open");
    if (pydb__vfs->fsync(fd) != 0) {
        int e = errno;
        pydb__vfs->close(fd);
        return PYDB_OSERROR(err, e, dir, -1, "cannot fsync the directory");
    }
    pydb__vfs->close(fd);
    return PYDB_OK;
}
