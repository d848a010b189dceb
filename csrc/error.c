/*
 * error.c - error detail (pydb__error_set, behind the PYDB_CORRUPT /
 * PYDB_ERROR / PYDB_OSERROR macros of pydb_int.h; the public
 * pydb_error_set for callbacks outside csrc/) and the names of error
 * codes, layouts and I/O modes.
 *
 * Depends on: nothing but libc; the bottom of csrc/.
 */
#include "pydb_int.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Fill *err (if not NULL); the one body of both setters below. */
static void error_fill(pydb_error *err, int code, int sys_errno,
                       const char *path, int64_t offset, const char *src_file,
                       int src_line, const char *fmt, va_list ap)
{
    if (!err) return;
    err->code = code;
    err->sys_errno = sys_errno;
    err->committed = PYDB_COMMIT_NO;
    err->offset = offset;
    snprintf(err->path, sizeof err->path, "%s", path ? path : "");
    vsnprintf(err->message, sizeof err->message, fmt ? fmt : "", ap);
    err->src_file = src_file;
    err->src_line = src_line;
}

int pydb__error_set(pydb_error *err, int code, int sys_errno, const char *path,
                    int64_t offset, const char *src_file, int src_line,
                    const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_fill(err, code, sys_errno, path, offset, src_file, src_line, fmt, ap);
    va_end(ap);
    return code;
}

int pydb_error_set(pydb_error *err, int code, const char *path,
                   int64_t offset, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* raised outside csrc/: no source location */
    error_fill(err, code, 0, path, offset, "", 0, fmt, ap);
    va_end(ap);
    return code;
}

const char *pydb_strerror(int code)
{
    switch (code) {
    case PYDB_OK: return "success";
    case PYDB_ECORRUPT: return "database file is corrupt";
    case PYDB_ENOTFOUND: return "record not found";
    case PYDB_EIO: return "input/output error";
    case PYDB_ENOMEM: return "out of memory";
    case PYDB_EINVAL: return "invalid argument";
    case PYDB_EUNSUPPORTED: return "unsupported";
    case PYDB_ETOOBIG: return "record too large for the layout";
    case PYDB_EWOULDBLOCK: return "data not in the page cache";
    case PYDB_ESYNTAX: return "search expression syntax error";
    case PYDB_EFST: return "field select table error";
    case PYDB_EREADONLY: return "database is read-only";
    case PYDB_ELOCKED: return "database is locked by another writer";
    case PYDB_ENEWINDEX:
        return "a native index was built since this handle looked for one";
    case PYDB_ECLOSED: return "the handle is being closed";
    default: return "unknown error";
    }
}

static const char *const layout_names[4] = {
    "isis-packed", "isis-aligned", "ffi-packed", "ffi-aligned"};

const char *pydb_layout_name(int layout)
{
    return (layout >= 0 && layout < 4) ? layout_names[layout] : "unknown";
}

int pydb_layout_from_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, layout_names[i]) == 0) return i;
    return -1;
}

static const char *const io_names[3] = {"pread", "mmap", "direct"};

const char *pydb_io_name(int io)
{
    return (io >= 0 && io < 3) ? io_names[io] : "unknown";
}

int pydb_io_from_name(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, io_names[i]) == 0) return i;
    return -1;
}
