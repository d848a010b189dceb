/* pydb_int.h - internals shared by the files of csrc/ (not installed). */
#ifndef PYDB_INT_H
#define PYDB_INT_H

#include "pydb.h"
#include "util.h"
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

/* ---- file names, formats §1 (mst.c) ---- */
/* Copy path into base without a known database-file extension (.mst,
 * .xrf, .cnt, .n01, ... any case). */
void pydb__strip_ext(char *base, size_t sz, const char *path);
/* Find the regular file `base`.`ext`: the extension as given, then upper
 * case, then the whole file name matched without regard to case in the
 * directory.  Writes the path found (else base.ext) into out; 0 or
 * -ENOENT. */
int pydb__find_file(char *out, size_t outsz, const char *base,
                    const char *ext);

/* ---- file operations table (swappable by tests for fault injection) ---- */
typedef struct pydb_vfs {
    int (*open)(const char *path, int flags, int mode);
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
    int (*fsync)(int fd);
    int (*close)(int fd);
    /* pread that fails with EAGAIN instead of waiting for the disk */
    ssize_t (*pread_nowait)(int fd, void *buf, size_t n, off_t off);
    /* write path (write.c) */
    int (*fdatasync)(int fd);
    int (*ftruncate)(int fd, off_t len);
    int (*rename)(const char *from, const char *to);
    int (*unlink)(const char *path);
} pydb_vfs;
extern pydb_vfs *pydb__vfs;   /* the table in use (default: POSIX)       */
extern pydb_vfs pydb__vfs_posix;

/* A database file opened for reading (and writing, for a writer). */
typedef struct pydb_file {
    int fd;          /* buffered fd (pread / mmap modes; O_RDWR if writer) */
    int dfd;         /* O_DIRECT fd, or -1                                 */
    int64_t size;    /* bytes known to hold data; grows with commits:
                        read it with pydb__fsize()                         */
    const uint8_t *map; /* read-only mapping in mmap mode, else NULL       */
    size_t map_len;  /* bytes mapped: the size at open plus headroom, so
                        the file can grow under the mapping; reads past it
                        fall back to pread                                 */
    char path[1024];
} pydb_file;

static inline int64_t pydb__fsize(const pydb_file *f)
{
    return __atomic_load_n(&f->size, __ATOMIC_ACQUIRE);
}
/* Raise f->size to at least `size` (never lowers it). */
static inline void pydb__fsize_raise(pydb_file *f, int64_t size)
{
    int64_t cur = __atomic_load_n(&f->size, __ATOMIC_RELAXED);
    while (cur < size &&
           !__atomic_compare_exchange_n(&f->size, &cur, size, 1,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}
#define PYDB_MAP_HEADROOM ((int64_t)1 << 30) /* bytes mapped past the size */

/* Read exactly n bytes at off (n > 0), through the handle's I/O mode.
 * A read past the end of the file is corruption (`what` names the thing
 * being read, for the message). */
int pydb__file_read(const pydb_file *f, int io, void *buf, size_t n,
                    int64_t off, const char *what, pydb_error *err);
/* The same, but PYDB_EWOULDBLOCK (no detail set) unless the bytes are in
 * the page cache already. */
int pydb__file_read_nowait(const pydb_file *f, int io, void *buf, size_t n,
                           int64_t off, const char *what, pydb_error *err);

/*
 * The handle.  Readers and the writer share it:
 *   - next_mfn, next_block, next_pos, reccnt and the file sizes change when
 *     a commit is applied; they are read and written with __atomic builtins
 *     (pydb__next_mfn(), pydb__fsize()).  A commit raises the sizes before
 *     it publishes XRF entries, and next_mfn last.
 *   - seq is a sequence lock around the moment a commit writes XRF blocks
 *     into the page cache (odd while it does): readers of the XRF re-read
 *     when it moved, so they never decode a half-written XRF block.  It
 *     never covers a disk wait (fsyncs come after it is even again).
 *   - the writer fields (write.c) are used under wmutex / by the thread
 *     that holds the transaction.
 */
struct pydb_db {
    pydb_file mst, xrf;
    int io, lock;
    int layout;
    int mstxl;
    int32_t next_mfn, next_block, next_pos, mftype, reccnt;
    pthread_mutex_t mutex;   /* used in PYDB_LOCK_MUTEX mode only          */
    uint64_t seq;            /* XRF sequence lock (see above)              */
    /* ---- write path (write.c) ---- */
    int flags;               /* PYDB_OPEN_* given to pydb_open()           */
    int fatal;               /* atomic: 1 after a failed fsync/apply       */
    int wal_fd;              /* <base>.wal (O_RDWR) of a writer, else -1   */
    char wal_path[1100];
    pthread_mutex_t wmutex;  /* guards wbusy / wowner                      */
    pthread_cond_t wcond;
    int wbusy;               /* a transaction is open                      */
    pthread_t wowner;        /* thread that began it                       */
    uint64_t commit_seq;     /* commits written to the log by this handle  */
    pydb_commit_hook hook;   /* hook.prepare == NULL: none                 */
};

static inline int32_t pydb__next_mfn(const pydb_db *db)
{
    return __atomic_load_n(&db->next_mfn, __ATOMIC_ACQUIRE);
}

/* Sequence lock for XRF reads (see struct pydb_db). */
uint64_t pydb__seq_begin(const pydb_db *db);
static inline int pydb__seq_retry(const pydb_db *db, uint64_t s)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&db->seq, __ATOMIC_RELAXED) != s;
}

/* Re-read the control record and the file sizes, so that a handle sees
 * records that another handle or process committed after it was opened.
 * Never lowers what the handle knows.  Best effort: returns 0. */
int pydb__refresh(pydb_db *db);
/* Raise the cached file sizes to what fstat says now (they never shrink);
 * 1 if one grew, else 0. */
int pydb__refresh_sizes(pydb_db *db);

/* Record layout helpers shared by the bulk writer and the write path
 * (formats §2.2-2.3). */
int64_t pydb__place(int layout, int mstxl, int64_t pos);
int pydb__record_size(int64_t *mfrl, int layout, int mstxl, int32_t mfn,
                      const pydb_field *fields, uint32_t nfields,
                      const char *path, pydb_error *err);
void pydb__record_encode(uint8_t *p, int layout, int64_t mfrl, int32_t mfn,
                         const pydb_field *fields, uint32_t nfields,
                         int64_t back_offset, int status);

/* A pydb_record is one malloc'ed block: the struct, the record's bytes
 * (MFRL of them) and its field array, each part 8-aligned (mst.c). */
static inline size_t pydb__round8(size_t n) { return (n + 7) & ~(size_t)7; }
static inline uint8_t *pydb__record_raw(const pydb_record *r)
{
    return (uint8_t *)r + pydb__round8(sizeof(pydb_record));
}
static inline pydb_field *pydb__record_fields(const pydb_record *r,
                                              size_t raw)
{
    return (pydb_field *)(pydb__record_raw(r) + pydb__round8(raw));
}
/* Make *rec (NULL: a new one) hold `raw` record bytes and `nf` fields. */
int pydb__record_reserve(pydb_record **rec, size_t raw, size_t nf,
                         pydb_error *err);

/* Write-path steps of pydb_open()/pydb_close() (write.c). */
int pydb__write_open(pydb_db *db, const char *base, pydb_error *err);
/* A read-only open replays a complete log if it can write the files
 * (mst/xrf: the paths pydb_open() found) and no writer holds the lock. */
int pydb__recover_readonly(const char *base, const char *mst,
                           const char *xrf, pydb_error *err);
void pydb__write_close(pydb_db *db);

/* Geometry of a leader layout. */
typedef struct pydb_geom {
    int leader;      /* leader size in bytes                               */
    int entry;       /* directory entry size                               */
    int ffi;         /* 32-bit MFRL/BASE/POS/LEN                           */
    int off_mfrl, off_mfbwb, off_mfbwp, off_base, off_nvf, off_status;
    int dir_pos, dir_len;  /* offsets of POS and LEN inside an entry       */
} pydb_geom;
extern const pydb_geom pydb__geom[4];

/* ---- control record, formats §2.1 ---- */
typedef struct pydb_ctl {
    int32_t ctlmfn, next_mfn, next_block, next_pos, reccnt;
    int mftype, mstxl;
} pydb_ctl;

/* Decode the first 20 bytes of a control record. */
static inline void pydb__ctl_decode(pydb_ctl *c, const uint8_t *p)
{
    c->ctlmfn = (int32_t)pydb__u32(p);
    c->next_mfn = (int32_t)pydb__u32(p + 4);
    c->next_block = (int32_t)pydb__u32(p + 8);
    c->next_pos = pydb__u16(p + 12);
    c->mftype = p[14];
    c->mstxl = p[15];
    c->reccnt = (int32_t)pydb__u32(p + 16);
}
/* NXTMFN, NXTMFB and NXTMFP are in range (NXTMFP 1..513). */
static inline int pydb__ctl_sane(const pydb_ctl *c)
{
    return c->next_mfn >= 1 && c->next_block >= 1 && c->next_pos >= 1 &&
           c->next_pos <= PYDB_BLOCK + 1;
}
/* The byte offset where the records end, from NXTMFB/NXTMFP. */
static inline int64_t pydb__ctl_end(int32_t next_block, int32_t next_pos)
{
    return (int64_t)(next_block - 1) * PYDB_BLOCK + next_pos - 1;
}
/* Store NXTMFN and the NXTMFB/NXTMFP of `end` into a control record. */
static inline void pydb__ctl_set_next(uint8_t *p, int32_t next_mfn,
                                      int64_t end)
{
    pydb__put32(p + 4, (uint32_t)next_mfn);
    pydb__put32(p + 8, (uint32_t)(end / PYDB_BLOCK + 1));
    pydb__put16(p + 12, (uint32_t)(end % PYDB_BLOCK + 1));
}
/* XRF blocks that hold the entries of MFN 1..next_mfn-1 (formats §3). */
static inline int64_t pydb__xrf_blocks(int64_t next_mfn)
{
    return (next_mfn - 1 + PYDB_XRF_PER_BLOCK - 1) / PYDB_XRF_PER_BLOCK;
}

/* POS and LEN of the directory entry at d (formats §2.2), whatever the
 * layout's widths. */
static inline void pydb__dir_entry(const pydb_geom *g, const uint8_t *d,
                                   int64_t *pos, int64_t *len)
{
    if (g->ffi) {
        *pos = pydb__u32(d + g->dir_pos);
        *len = pydb__u32(d + g->dir_len);
    } else {
        *pos = pydb__u16(d + g->dir_pos);
        *len = pydb__u16(d + g->dir_len);
    }
}

/* XRF pointer encoding, formats §3.2. */
int32_t pydb__xrf_encode(int64_t offset, int flags, int mstxl);

/* Decode a stored XRF value (formats §3.2) without checking it against
 * the files: raw, state, flags and the byte offset it names.  UNUSED (0)
 * and PDELETED (-2048, or a negated pointer to offset 0) get offset -1;
 * for the others the caller checks the offset: below PYDB_CTL_SIZE (which
 * covers a block number < 1) or past the master file is damage. */
static inline void pydb__xrf_unpack(pydb_xrf_entry *e, int32_t raw,
                                    int mstxl)
{
    int64_t v = raw < 0 ? -(int64_t)raw : (int64_t)raw;
    int64_t block = v >> (11 - mstxl);
    int64_t low = v & ((1 << (11 - mstxl)) - 1);
    int64_t off = (block - 1) * PYDB_BLOCK + ((low & (0x1FF >> mstxl)) << mstxl);

    e->raw = raw;
    e->flags = 0;
    e->offset = -1;
    if (raw == 0) {
        e->state = PYDB_XRF_UNUSED;
        return;
    }
    if (raw < 0 && (off == 0 || raw == -2048)) {
        e->state = PYDB_XRF_PDELETED;
        return;
    }
    if (low & (0x200 >> mstxl)) e->flags |= PYDB_FLAG_PENDING;
    if (low & (0x400 >> mstxl)) e->flags |= PYDB_FLAG_NEW;
    e->state = raw < 0 ? PYDB_XRF_LDELETED : PYDB_XRF_ACTIVE;
    e->offset = off;
}

/* Test hook: every pread of the core sleeps `usec` microseconds first
 * (0 restores the POSIX table).  Not thread-safe; tests only. */
void pydb__test_set_read_delay(unsigned usec);

/* Test hook (fault injection): make the n-th (1-based) write-side file
 * operation (pwrite, fsync, fdatasync, ftruncate, rename, unlink) fail with
 * `eno`; with `short_write` = 1, an n-th pwrite writes less than asked and
 * the next one fails with `eno`; with `short_write` = 2 the process exits
 * (_exit(137), a crash point) instead of doing the n-th operation.
 * n = 0 restores the POSIX table; n < 0 only counts.  Not thread-safe to
 * switch; tests only. */
void pydb__test_fail_io(long n, int eno, int short_write);
long pydb__test_io_count(void);        /* operations counted so far      */
const char *pydb__test_io_fired(void); /* name of the failed op, or NULL  */

#endif
