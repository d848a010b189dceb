/*
 * nidx_bytes.h - byte helpers of the native index: little-endian 64-bit
 * codec, a growable byte buffer, the segment/MANIFEST checksum, and
 * whole-file write and directory fsync (nidx_bytes.c).
 *
 * These are the native index's private twins of the shared helpers
 * (util.h); they are kept in this one place so they can be replaced by
 * the shared ones without touching the format code.
 *
 * Depends on: pydb_int.h (pydb__u32/pydb__put32, errors, the vfs).
 */
#ifndef PYDB_NIDX_BYTES_H
#define PYDB_NIDX_BYTES_H

#include <stdlib.h>
#include <string.h>
#include "pydb_int.h"

/* Invariant check (PYDB_DEBUG builds; util.h provides the shared one). */
#ifndef PYDB_ASSERT
#include <assert.h>
#define PYDB_ASSERT(c) assert(c)
#endif

static inline uint64_t nidx_rd64(const uint8_t *p)
{
    return (uint64_t)pydb__u32(p) | ((uint64_t)pydb__u32(p + 4) << 32);
}

static inline void nidx_wr64(uint8_t *p, uint64_t v)
{
    pydb__put32(p, (uint32_t)v);
    pydb__put32(p + 4, (uint32_t)(v >> 32));
}

/* A growable byte buffer.  A failed allocation sets oom and makes every
 * later put a no-op, so a sequence of puts is checked once at the end. */
typedef struct nidx_buf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} nidx_buf;

/* Room for `more` bytes (-1 and oom set on failure). */
int pydb__nbuf_reserve(nidx_buf *b, size_t more);
/* Append n bytes (nothing when oom). */
void pydb__nbuf_put(nidx_buf *b, const void *p, size_t n);

/* Checksum of the segment and MANIFEST formats (version 1). */
uint64_t pydb__nidx_checksum(const uint8_t *p, size_t n);

/* Write data[len] to path (excl: the file must not exist; else it is
 * truncated), fsync it and close it.  PYDB_EIO etc. with the path. */
int pydb__nidx_write_file(const char *path, const void *data, size_t len,
                          int excl, pydb_error *err);
/* fsync a directory (a directory that cannot be opened is an error). */
int pydb__nidx_fsync_dir(const char *dir, pydb_error *err);

#endif
