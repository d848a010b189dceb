/* pydb_int.h - internals shared by the files of csrc/ (not installed). */
#ifndef PYDB_INT_H
#define PYDB_INT_H

#include "pydb.h"
#include <pthread.h>
#include <sys/types.h>

#define PYDB_BLOCK 512           /* MST/XRF block size, formats §2-3     */
#define PYDB_CTL_SIZE 64         /* control record + filler               */
#define PYDB_DIRECT_ALIGN 4096   /* O_DIRECT buffer/offset/length unit    */
#define PYDB_XRF_PER_BLOCK 127
#define PYDB_MAX_FFI_MFRL (1 << 30) /* sanity cap for FFI records (bytes) */

/* Record an error: code, file, offset and a printf-style reason, plus the
 * csrc/ source line (one breakpoint on pydb__error_set catches them all). */
int pydb__error_set(pydb_error *err, int code, int sys_errno,
                    const char *path, int64_t offset, const char *src_file,
                    int src_line, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

#define PYDB_CORRUPT(err, path, off, ...) \
    pydb__error_set((err), PYDB_ECORRUPT, 0, (path), (off), __FILE__, \
                    __LINE__, __VA_ARGS__)
#define PYDB_ERROR(err, code, path, off, ...) \
    pydb__error_set((err), (code), 0, (path), (off), __FILE__, __LINE__, \
                    __VA_ARGS__)
#define PYDB_OSERROR(err, eno, path, off, ...) \
    pydb__error_set((err), PYDB_EIO, (eno), (path), (off), __FILE__, \
                    __LINE__, __VA_ARGS__)

/* ---- file operations table (swappable by tests for fault injection) ---- */
typedef struct pydb_vfs {
    int (*open)(const char *path, int flags, int mode);
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
    int (*fsync)(int fd);
    int (*close)(int fd);
    /* pread that fails with EAGAIN instead of waiting for the disk */
    ssize_t (*pread_nowait)(int fd, void *buf, size_t n, off_t off);
} pydb_vfs;
extern pydb_vfs *pydb__vfs;   /* the table in use (default: POSIX)       */
extern pydb_vfs pydb__vfs_posix;

/* A database file opened for reading. */
typedef struct pydb_file {
    int fd;          /* buffered fd (pread / mmap modes)                  */
    int dfd;         /* O_DIRECT fd, or -1                                 */
    int64_t size;    /* bytes, at open                                     */
    const uint8_t *map; /* read-only mapping in mmap mode, else NULL       */
    char path[1024];
} pydb_file;

/* Read exactly n bytes at off (n > 0), through the handle's I/O mode.
 * A read past the end of the file is corruption (`what` names the thing
 * being read, for the message). */
int pydb__file_read(const pydb_file *f, int io, void *buf, size_t n,
                    int64_t off, const char *what, pydb_error *err);
/* The same, but PYDB_EWOULDBLOCK (no detail set) unless the bytes are in
 * the page cache already. */
int pydb__file_read_nowait(const pydb_file *f, int io, void *buf, size_t n,
                           int64_t off, const char *what, pydb_error *err);

struct pydb_db {
    pydb_file mst, xrf;
    int io, lock;
    int layout;
    int mstxl;
    int32_t next_mfn, next_block, next_pos, mftype, reccnt;
    pthread_mutex_t mutex;   /* used in PYDB_LOCK_MUTEX mode only          */
};

/* Geometry of a leader layout. */
typedef struct pydb_geom {
    int leader;      /* leader size in bytes                               */
    int entry;       /* directory entry size                               */
    int ffi;         /* 32-bit MFRL/BASE/POS/LEN                           */
    int off_mfrl, off_mfbwb, off_mfbwp, off_base, off_nvf, off_status;
    int dir_pos, dir_len;  /* offsets of POS and LEN inside an entry       */
} pydb_geom;
extern const pydb_geom pydb__geom[4];

static inline uint16_t pydb__u16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t pydb__u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
static inline void pydb__put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8);
}
static inline void pydb__put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

/* XRF pointer encoding, formats §3.2. */
int32_t pydb__xrf_encode(int64_t offset, int flags, int mstxl);

/* Test hook: every pread of the core sleeps `usec` microseconds first
 * (0 restores the POSIX table).  Not thread-safe; tests only. */
void pydb__test_set_read_delay(unsigned usec);

#endif
