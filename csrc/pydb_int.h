/*
 * pydb_int.h - internals shared by the files of csrc/ (not installed).
 *
 * The storage core, bottom up (a file calls only files above it in this
 * list, never one below; `nm` over the objects shows it):
 *
 *   error.c    error detail (pydb__error_set) and names
 *   vfs.c      the file-operations table; reading a database file in the
 *              three I/O modes (pydb__file_read); test fault injection
 *   util.c/h   buffers, le codecs, CRC-32C, write_full, fsync-directory
 *              policy, atomic file replace, PYDB_ASSERT
 *   path.c/h   file names: extensions, case-insensitive lookup, .wal
 *   record.c/h bytes of the formats, no I/O: geometry, XRF values,
 *              record encode/decode, placement
 *   shm.c/h    the commit header <base>.shm: the latest committed state
 *              and the reader table, shared by processes
 *   read.c     the reader: committed states, XRF entries, record
 *              versions, scans, refresh, snapshots
 *   wal.c/h    the write-ahead log: image, append, replay, reset, lock
 *   handle.c   pydb_open/pydb_close: recovery (wal), control record,
 *              layout detection (read), accessors
 *   build.c    the bulk builder of a new database; whole XRF files
 *   mkxrf.c    a new XRF from a scan of a master file (CISIS mkxrf)
 *   txn.c      transactions: begin, changes, commit, abort, commit hook
 *   create.c   pydb_create (build + open)
 *   check.c    the validator (reads the files itself)
 *
 * This header holds what several layers share: the error macros, the vfs
 * table, the file and handle structs, and the reader's entry points; it
 * includes util.h, path.h, record.h and pydb_test.h (the declarations
 * tests drive directly: vfs.c's test hooks, key rules, stop words, FST
 * key extraction, the native index's commit-hook doubles).
 * wal.h is included only by wal.c, handle.c and txn.c.
 */
#ifndef PYDB_INT_H
#define PYDB_INT_H

#include "pydb.h"
#include "util.h"
#include "path.h"
#include "record.h"
#include "pydb_test.h"
#include <pthread.h>
#include <sys/types.h>

#define PYDB_DIRECT_ALIGN 4096   /* O_DIRECT buffer/offset/length unit    */

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
    /* write path (txn.c, wal.c, build.c, util.c) */
    int (*fdatasync)(int fd);
    int (*ftruncate)(int fd, off_t len);
    int (*rename)(const char *from, const char *to);
    int (*unlink)(const char *path);
    /* swap the names a and b atomically (Linux renameat2 with
     * RENAME_EXCHANGE); -1 with errno EINVAL, ENOSYS or EOPNOTSUPP where
     * the file system or the system cannot (pydb__swap_file) */
    int (*exchange)(const char *a, const char *b);
} pydb_vfs;
extern pydb_vfs *pydb__vfs;   /* the table in use (default: POSIX)       */
extern pydb_vfs pydb__vfs_posix;

/* Which pages of a mapping were in the page cache when last seen
 * (resident.c).  The arrays are shared by every reader of the handle and
 * written through relaxed atomics, so a const one can be asked and marked. */
#define PYDB_RES_CHUNK_PAGES 256 /* pages per mincore() and per bitmap     */
#define PYDB_RES_TTL_MS 100      /* a chunk seen longer ago is seen again  */
typedef struct pydb_residency {
    uint64_t *bits;     /* PYDB_RES_CHUNK_PAGES bits per chunk, 1 resident */
    int64_t *seen_ms;   /* per chunk: coarse ms of its mincore(), 0 never  */
    size_t chunks;
} pydb_residency;
int pydb__resident_init(pydb_residency *r, size_t map_len);
void pydb__resident_free(pydb_residency *r);
/* 1 if every page of [off, off + n) of the mapping is known resident
 * (refreshing chunks seen too long ago), else 0. */
int pydb__resident(const pydb_residency *r, const uint8_t *map,
                   size_t map_len, int64_t off, size_t n);
/* The pages of [off, off + n) were just copied out of the mapping. */
void pydb__resident_mark(const pydb_residency *r, size_t map_len,
                         int64_t off, size_t n);
/* Every chunk unseen: another file is now mapped at the same address. */
void pydb__resident_forget(const pydb_residency *r);

/* Copies out of a mapping that survive its file shrinking (mapguard.c):
 * pydb__map_guard() installs the process's SIGBUS handler (again if
 * another replaced it; call it before mapping a file); pydb__map_copy()
 * copies n bytes from src, a mapping, to dst: 0, or -1 if a page of src
 * lay past the end of its file (SIGBUS caught; dst partly written). */
void pydb__map_guard(void);
int pydb__map_copy(void *dst, const uint8_t *src, size_t n);

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
    pydb_residency res; /* mmap mode: pages known in the page cache        */
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
/* Set f->size to the file's true size, lower too: only a writer, under
 * the writer lock, after a cut past the committed end (txn.c,
 * clear_past_end) -- readers never read past that end, so a lower size
 * bounds nothing they read, and the size a commit publishes is true. */
static inline void pydb__fsize_set(pydb_file *f, int64_t size)
{
    __atomic_store_n(&f->size, size, __ATOMIC_RELEASE);
}
#define PYDB_MAP_HEADROOM ((int64_t)1 << 30) /* bytes mapped past the size */

/* Read exactly n bytes at off (n > 0), through the handle's I/O mode.
 * A read past the end of the file is corruption (`what` names the thing
 * being read, for the message). */
int pydb__file_read(const pydb_file *f, int io, void *buf, size_t n,
                    int64_t off, const char *what, pydb_error *err);
/* The same, but PYDB_EWOULDBLOCK (no detail set) unless the bytes are in
 * the page cache already: pread with RWF_NOWAIT, or in mmap mode the
 * pages known resident (resident.c); O_DIRECT never. */
int pydb__file_read_nowait(const pydb_file *f, int io, void *buf, size_t n,
                           int64_t off, const char *what, pydb_error *err);
/* The size of file f now (fstat of its fd) where it no longer holds the
 * n bytes at off (another program cut it), else -1 (also where fstat
 * fails).  For error paths: one fstat. */
int64_t pydb__file_short_of(const pydb_file *f, size_t n, int64_t off);
/* PYDB_OK where the file f still holds the n bytes at off, else the
 * corruption error of a file cut short after open (by another program;
 * `what` names the thing read).  For an error path: one fstat. */
int pydb__file_still_holds(const pydb_file *f, size_t n, int64_t off,
                           const char *what, pydb_error *err);

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
 *   - the writer fields (txn.c, wal.c) are used under wmutex / by the thread
 *     that holds the transaction.
 */
/* pydb_db.fatal: why the handle refuses transactions (txn.c). */
#define PYDB__FATAL_SYNC 1   /* an fsync failed: until reopened            */
#define PYDB__FATAL_APPLY 2  /* a durable commit's write failed: the next
                                transaction's begin replays the log        */
/* File pairs a handle keeps open after switching away from them
 * (read.c, pydb__files_sync): a read that loaded an fd just before a
 * switch may still pread on it, and retries (fseq moved); were the fd
 * closed and its number reused by a later switch's open, that pread
 * would read another file (harmless, it retries).  A reader
 * descheduled across several switches is rare; 4 pairs cost 16 fds. */
#define PYDB_RETIRED_GENS 4

/* Whole files (a native index's MANIFEST, a hook's files) whose durable
 * copies in the log a handle remembers for sync=False commits (txn.c). */
#define PYDB_IMG_FILES 8

struct pydb_db {
    pydb_file mst, xrf;
    int io, lock;
    int layout;
    int mstxl;
    int32_t next_mfn, next_block, next_pos, mftype, reccnt;
    pthread_mutex_t mutex;   /* used in PYDB_LOCK_MUTEX mode only          */
    pthread_mutex_t vmutex;  /* serialises pydb__view_set()                */
    uint64_t vseq;           /* sequence lock of next_mfn..reccnt (odd
                                while pydb__view_set() writes them)       */
    int64_t view_end;        /* atomic: pydb__ctl_end(next_block,
                                next_pos), for plain reads (read.c)       */
    uint64_t seq;            /* XRF sequence lock (see above)              */
    /* ---- write path (txn.c, wal.c) ---- */
    int flags;               /* PYDB_OPEN_* given to pydb_open()           */
    int fatal;               /* atomic: 0 or PYDB__FATAL_* (txn.c)         */
    int wal_fd;              /* <base>.wal (O_RDWR) of a writer, else -1   */
    pid_t wal_pid;           /* the process that opened wal_fd: a fork()ed
                                child opens the log again before it locks
                                (an OFD lock is shared by the copies of
                                an fd, so the child would "hold" the
                                parent's lock too: wal.c)                */
    char wal_path[1100];
    size_t logged_files;     /* files this handle's commits logged in place
                                since its last checkpoint (txn.c)        */
    /* sync=False (txn.c, "Commits without fsync"): the units -- the
     * control record, XRF blocks (a bitmap), whole files -- of which a
     * frame this handle fdatasync'ed holds a whole copy, in the log whose
     * first frame has the id img_first (0: none known) */
    uint32_t img_first;
    int img_ctl;
    uint8_t *img_xrf;
    size_t img_xrf_bytes;
    char *img_files[PYDB_IMG_FILES];
    size_t img_nfiles;
    char log_pending[600];   /* read-only handle: why the log's committed
                                transaction could not be applied at open
                                ("" when there was none or it was)       */
    pthread_mutex_t wmutex;  /* guards wbusy / wowner                      */
    pthread_cond_t wcond;
    int wbusy;               /* a transaction is open                      */
    int wbusy_gc;            /* ... and it is a collector step             */
    pthread_t wowner;        /* thread that began it                       */
    pid_t wbusy_pid;         /* process that set wbusy (a fork()ed child
                                clears a wbusy it inherited)              */
    int gc_waiting;          /* collector steps waiting for wbusy: other
                                waiters stand back (txn.c, "Locks")       */
    int closing;             /* pydb_close_begin() was called (atomic)    */
    uint64_t commit_seq;     /* commits written to the log by this handle  */
    pthread_mutex_t lsmutex; /* held around each fdatasync of a frame and
                                the set_fatal of its failure (txn.c,
                                log_sync): no thread of the handle sees a
                                sync succeed after another's failed      */
    /* the sync fence of a writer (wal.c), under lsmutex (pydb__wal_close
     * and pydb__wal_forked: no other thread runs) */
    int fence_fd;            /* <base>.shm again, or -1                    */
    pid_t fence_pid;         /* the process that opened (or could not
                                open) fence_fd; 0: none yet              */
    int fence_due;           /* atomic: the description of the log is new:
                                it has yet to pass the fence             */
    /* ---- group commit (group.c), under gmutex ---- */
    pthread_mutex_t gmutex;
    pthread_cond_t gcond;    /* CLOCK_MONOTONIC                            */
    struct pydb__wreq *ghead, *gtail; /* pydb_write_one() requests, FIFO  */
    int gleader;             /* a thread is committing a group             */
    /* ---- committed state (shm.c; read.c) ---- */
    struct pydb_shm *shm;    /* commit header <base>.shm, or NULL (files
                                mode: the state comes from the control
                                record)                                   */
    int shm_stale;           /* atomic: 1 while the header disagrees with
                                the files and no writer holds the lock
                                (another program wrote them): files mode */
    char shm_path[1100];
    pydb_commit_hook hook;   /* hook.prepare == NULL: none                 */
    uint64_t index_gen_seen; /* atomic: the index generation as of which
                                the caller last looked for a native index
                                (pydb_index_gen_seen); UINT64_MAX: never
                                said, not checked (txn.c, txn_begin)     */
    struct pydb_gc *gc;      /* the collector (gc.c); NULL until open ends */
    const struct pydb_gc_ops *gc_ops; /* its listeners (below), set at open */
    /* ---- master file generation (read.c; docs/compaction.md) ---- */
    uint64_t fseq;           /* atomic: 2 x the generation of the .mst/.xrf
                                pair the handle reads, + 1 while it
                                switches to a newer pair (a compaction
                                replaced the files): reads retry when it
                                moved during them                         */
    const uint64_t *gen_word; /* atomic: the header's file-generation word
                                (shm.h offset 336), or NULL              */
    pthread_mutex_t smutex;  /* serialises switches of the file pair      */
    int retired[PYDB_RETIRED_GENS * 4]; /* fds of the pairs before the
                                last PYDB_RETIRED_GENS switches (per
                                switch: .mst fd, dfd, .xrf fd, dfd; -1
                                none), a ring at retired_at: a late pread
                                may still use them; closed when the ring
                                comes round or at close (smutex)         */
    int retired_at;
    int64_t follow_at;       /* atomic: pydb__now_ms() of the last look of
                                a reader without a header at its files
                                (read.c, unfollowed_check)              */
    int unfollowed;          /* atomic: that look found them replaced     */
    size_t mst_region, xrf_region; /* bytes the mappings reserve (mmap
                                mode; constant while the handle is open) */
    struct pydb_compact *compact; /* the compaction job (compact.c)      */
    int compact_dead;        /* pydb_gc_find_dead_space found dead space
                                the counters do not name (other
                                programs' versions): a compaction is
                                wanted once (under the collector's step
                                lock, pydb__gc_want_dead)                */
    struct {                 /* compaction and readers (compact.c: under
                                the collector's step lock)               */
        int drain_ms;        /* the next wait for readers at a swap (0:
                                none yet: the step's lock_ms)            */
        int64_t drain_after; /* none before this (pydb__now_ms())         */
        uint64_t drain_oldest; /* the oldest reader a failed wait left   */
    } compact_readers;
};

/* 1 if every commit on db fdatasyncs its log frame (not
 * PYDB_OPEN_NOSYNC).  With sync=False a commit's frame is synced only
 * when the commit would otherwise write in place a unit of which the log
 * holds no synced copy (txn.c, "Commits without fsync"); every other
 * fsync of the core (direct regions, large segments, merges,
 * checkpoints, recovery, creation) is made in both modes, so that a
 * power cut never leaves a damaged database. */
static inline int pydb__synced(const pydb_db *db)
{
    return !(db->flags & PYDB_OPEN_NOSYNC);
}

/* The collector's listeners (gc.c installs them when it opens, before
 * the handle is shared).  The layers below the collector (txn.c, read.c,
 * the native index) signal through them instead of linking to gc.c,
 * which calls down into them (tools/linkgraph.py: no cycles). */
typedef struct pydb_gc_ops {
    void (*notify)(pydb_db *db);  /* a commit was published              */
    void (*met)(pydb_db *db);     /* a reader met garbage                */
    void (*swept)(pydb_db *db);   /* a full pass met the garbage     */
    void (*pause)(pydb_db *db);   /* wait for a step, hold off the next  */
    void (*resume)(pydb_db *db);
} pydb_gc_ops;

/* Calls that must not wait (the *_nowait entry points, which the binding
 * makes with the GIL held: docs/conventions.md §4, rule 6) mark their
 * thread for their duration.  Work on their path that could wait -- a
 * collector step a reader met (gc.c), an index refresh that reads files
 * (nidx_handle.c), segment pages not known to be in the page cache, more
 * than pydb__nowait_postings postings (search_eval.c) -- is then not
 * done: pydb__nowait_refuse() records it and the entry point returns
 * PYDB_EWOULDBLOCK, and its caller calls the blocking variant.  Per
 * thread, not nested. */
void pydb__nowait_begin(void);
/* Ends the mark; 1 if something was refused meanwhile. */
int pydb__nowait_end(void);
/* 1 while the thread's call must not wait. */
int pydb__nowait(void);
/* Something that could wait was left undone: returns PYDB_EWOULDBLOCK. */
int pydb__nowait_refuse(void);
/* About to read `postings` postings: PYDB_OK, or under nowait past the
 * call's budget (pydb__nowait_postings) pydb__nowait_refuse(). */
int pydb__nowait_spend(uint64_t postings);
/* Postings a search may read before it counts as long work (test hook:
 * pydb__set_nowait_postings, pydb_test.h). */
extern size_t pydb__nowait_postings;

/* After a commit was published, on the committing thread: wakes the
 * collector.  Cheap, never blocks on it. */
static inline void pydb__gc_notify(pydb_db *db)
{
    const pydb_gc_ops *o = __atomic_load_n(&db->gc_ops, __ATOMIC_ACQUIRE);
    if (o) o->notify(db);
}
/* A reader met garbage (a record with back versions, a posting list
 * with dead postings): with a cooperative policy it does one small step
 * if no other step is running (else wakes the thread, if any).  Never
 * waits.  No Python, any thread, the GIL released or not. */
static inline void pydb__gc_met(pydb_db *db)
{
    const pydb_gc_ops *o = __atomic_load_n(&db->gc_ops, __ATOMIC_ACQUIRE);
    if (o) o->met(db);
}
/* A full pass (the validator) read every record and met whatever
 * garbage there is: with a cooperative policy, it collects all of it now,
 * with the database taken as idle (Firebird's sweep), in bounded steps
 * while they make progress. */
static inline void pydb__gc_swept(pydb_db *db)
{
    const pydb_gc_ops *o = __atomic_load_n(&db->gc_ops, __ATOMIC_ACQUIRE);
    if (o) o->swept(db);
}
/* Wait for the step in progress, if any, and hold off the next:
 * pydb_set_commit_hook() swaps the hook between the two (a step calls
 * db->hook.collect), stat.c calls db->hook.garbage between them.  Never
 * from inside a step. */
static inline void pydb__gc_pause(pydb_db *db)
{
    const pydb_gc_ops *o = __atomic_load_n(&db->gc_ops, __ATOMIC_ACQUIRE);
    if (o) o->pause(db);
}
static inline void pydb__gc_resume(pydb_db *db)
{
    const pydb_gc_ops *o = __atomic_load_n(&db->gc_ops, __ATOMIC_ACQUIRE);
    if (o) o->resume(db);
}

/* A committed state: what one commit left in the files (shm.h publishes
 * it; docs/architecture.md, "Committed state").  Versions at or after mst_end were written by
 * later commits. */
typedef struct pydb_state {
    uint64_t commit;     /* commit number in the header; 0 in files mode */
    int32_t next_mfn, next_block, next_pos, reccnt;
    int64_t mst_end;     /* pydb__ctl_end(next_block, next_pos)          */
    int64_t mst_size;    /* .mst bytes that hold the commit's data       */
    int64_t xrf_size;    /* .xrf bytes                                   */
    uint64_t index_gen;  /* native index MANIFEST generation; 0 unknown  */
    uint64_t file_gen;   /* master file generation: compactions that
                            replaced the .mst/.xrf so far (gc)          */
} pydb_state;

/* *st = the state control record *c announces (NXTMFN, NXTMFB, NXTMFP,
 * RECCNT and the end of records), the rest zero (read.c). */
void pydb__state_of_ctl(pydb_state *st, const pydb_ctl *c);

/* pydb_state.commit of a floor (read.c): not a state, a lower bound. */
#define PYDB__STATE_FLOOR UINT64_MAX

/* A pinned committed state (pydb.h group 3b). */
struct pydb_snapshot {
    pydb_db *db;
    pydb_state st;
    int slot;            /* reader-table slot, or -1 (not registered)    */
};

/* `rc`, the result of a read as of snapshot `snap`, or where `snap` is
 * of the files mode (commit 0) and the handle no longer reads the files
 * it was taken of, an error saying so (PYDB_EIO; read.c).  Such a
 * snapshot names no commit a compaction's swap record could carry to the
 * new files, and an unregistered one does not stop the compaction: read
 * through the new files it would take their records for its own.
 * Generations only grow and a read that saw the files switch under it
 * failed already, so the same generation after the read means the read
 * was of the snapshot's files.  PYDB_EWOULDBLOCK passes (the blocking
 * read checks). */
int pydb__snapshot_files_kept(int rc, const pydb_snapshot *snap,
                              pydb_error *err);

/* The handle's commit header, or NULL (files mode); a reader handle may
 * attach one later (read.c), so it is loaded atomically. */
static inline struct pydb_shm *pydb__db_shm(const pydb_db *db)
{
    return __atomic_load_n(&db->shm, __ATOMIC_ACQUIRE);
}

/* Drop the pages of the handle's file mappings from this process' page
 * tables (MADV_DONTNEED; the page cache keeps them, the next read of
 * them is a minor fault): a long scan in mmap mode (the native index's
 * bulk build) keeps its resident set from growing with the files. */
void pydb__db_unmap_pages(pydb_db *db);

static inline int32_t pydb__next_mfn(const pydb_db *db)
{
    return __atomic_load_n(&db->next_mfn, __ATOMIC_ACQUIRE);
}

/* Sequence lock for XRF reads (see struct pydb_db; read.c). */
uint64_t pydb__seq_begin(const pydb_db *db);
static inline int pydb__seq_retry(const pydb_db *db, uint64_t s)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&db->seq, __ATOMIC_RELAXED) != s;
}

/* Raise the handle's view of the control record (next_mfn, next_block,
 * next_pos, reccnt) to these values, as one change readers see whole
 * (vseq); a view that would go back is ignored, and so are values of
 * other files: `fs` is the handle's fseq when they were read (the view
 * is set only while it still is). */
void pydb__view_set(pydb_db *db, uint64_t fs, int32_t next_mfn,
                    int32_t next_block, int32_t next_pos, int32_t reccnt);
/* The same with the writer lock held (txn.c): no switch can begin, so
 * there is no generation to compare. */
void pydb__view_set_writer(pydb_db *db, int32_t next_mfn, int32_t next_block,
                           int32_t next_pos, int32_t reccnt);
/* The header's latest state into *st (and the handle's view raised to
 * it): 0, or -1 when there is no usable header (files mode). */
int pydb__state_header(pydb_state *st, pydb_db *db);

/* Re-read the control record and the file sizes, so that a handle sees
 * records that another handle or process committed after it was opened
 * (read.c: a read of an MFN past the known end needs it).
 * Never lowers what the handle knows.  Best effort: returns 0. */
void pydb__refresh(pydb_db *db);
/* Raise the cached file sizes to what fstat says now (they never shrink);
 * 1 if one grew, else 0. */
int pydb__refresh_sizes(pydb_db *db);

/* ---- whole XRF files (build.c) ---- */

/* Write the XRF of MFN 1..n, their stored values raw[n] (0 for none),
 * to fd from offset 0: blocks of 127 entries, XRFPOS the block number,
 * negated on the last (docs/isis-formats.md §3), at least one block.
 * 0 or PYDB_EIO (path and offset in err). */
int pydb__xrf_write_all(int fd, const char *path, const int32_t *raw,
                        int64_t n, pydb_error *err);

/* ---- publishing the committed state (read.c; the writer lock held) ---- */

/* Publish the state of control record *c (sizes: what the handle knows)
 * as commit latest + 1 in the commit header; index generation `gen`, or
 * with keep_gen and gen 0 the header's previous one. */
void pydb__header_publish(pydb_db *db, const pydb_ctl *c, uint64_t gen,
                          int keep_gen);
/* Make the commit header describe the files (control record *c): a
 * damaged header is laid out again; one that disagrees with the files (a
 * crash between applying and publishing, another program's writes, an
 * old pydb) gets the files' state as a new commit, index generation 0
 * (unknown).  0 or PYDB_EIO (the header could not be rebuilt). */
int pydb__header_sync(pydb_db *db, const pydb_ctl *c, pydb_error *err);
/* pydb__header_sync() with the control record read now. */
int pydb__header_sync_files(pydb_db *db, pydb_error *err);

/* ---- the file pair's generation (read.c; docs/compaction.md) ---- */

/* Bring the handle to the file pair of the latest generation the header
 * announces (a compaction replaced the files): opens the paths again and
 * checks they are one pair (no swap marker, fstat = stat).  0 or a PYDB
 * error (the handle keeps its files). */
int pydb__files_sync(pydb_db *db, pydb_error *err);
/* The handle brought to the newest files and *st made readable in them
 * (a snapshot of the commit a compaction replaced reads in the state it
 * published): *out, and in *fs the handle's file sequence for
 * pydb__files_moved() after the reads.  PYDB_EIO when st's files are
 * gone. */
int pydb__state_files(pydb_state *out, uint64_t *fs, pydb_db *db,
                      const pydb_state *st, pydb_error *err);
/* 1 if the handle switched files since pydb__state_files() gave fs. */
int pydb__files_moved(const pydb_db *db, uint64_t fs);
/* Close the fds the switches retired (at close). */
void pydb__files_retired_close(pydb_db *db);
/* The generation of the handle's files. */
static inline uint64_t pydb__files_gen(const pydb_db *db)
{
    return __atomic_load_n(&db->fseq, __ATOMIC_ACQUIRE) >> 1;
}
/* The generation the header announces (the latest state's file_gen;
 * 0 without a usable header). */
uint64_t pydb__header_gen(pydb_db *db);
/* Names beside the master file: the compaction's new files and its swap
 * marker (docs/compaction.md). */
#define PYDB_COMPACT_SUFFIX "-compact"
#define PYDB_SWAP_SUFFIX "-swap"
/* 1 if a compaction's swap marker stands beside the master file `mst`:
 * its renames are under way, or its writer died in them (read.c). */
int pydb__swap_pending(const char *mst);

/* ---- transactions (txn.c) ---- */

/* The native index MANIFEST generation a commit publishes (the commit
 * hook calls it from prepare); it goes into the commit header. */
void pydb__txn_set_index_gen(pydb_txn *t, uint64_t gen);
/* The handle a transaction writes to. */
pydb_db *pydb__txn_db(const pydb_txn *t);
/* In a commit hook's prepare: 1 if this commit keeps its frame in the
 * log until a checkpoint (a usable commit header, either sync mode:
 * wal.h), so a whole file the log holds is synced only there; 0 if the
 * commit syncs what it writes and empties the log (files mode).  Decided
 * once per commit, before prepare. */
int pydb__txn_keeps_frame(const pydb_txn *t);
/* Put whole file `path` (len bytes of data, copied) in the transaction's
 * log frame, as pydb_txn_put_file() does, for a file the caller has
 * written already, unsynced, under a name no reader knows yet: the
 * commit leaves it as it is, recovery after a power cut puts it in place
 * from the log, and a checkpoint fsyncs it (wal.h) -- so a commit
 * makes one fsync for it, the log's.  Only in a commit that keeps its
 * frame (pydb__txn_keeps_frame; else PYDB_EINVAL: nothing would sync the
 * file).  The caller removes the file if the commit fails before its
 * commit point.  0 or PYDB_EINVAL (also: a name outside the database's
 * folder) / PYDB_ENOMEM. */
int pydb__txn_log_file(pydb_txn *t, const char *path, const void *data,
                       size_t len, pydb_error *err);
/* pydb_txn_begin() for a collector step (gc.c, nidx_gc.c, compact.c):
 * while it waits, commits that wait too let it go first (txn.c,
 * "Locks"), so collection keeps up when commits come back to back. */
int pydb__txn_begin_gc(pydb_txn **out, pydb_db *db, int timeout_ms,
                       pydb_error *err);
/* In a collector step's transaction, before the step changes files
 * outside the log (a compaction's swap, the removal of index segments):
 * a checkpoint (pydb__wal_checkpoint), whatever sync says -- the .mst
 * and .xrf synced, the log emptied durably.  Applied commits left in the
 * log (kept until a checkpoint; files mode's truncation is not
 * synced) must not come back after a power cut: recovery would
 * replay them over the changed files (records and XRF blocks at offsets
 * of the old files, a MANIFEST naming removed segments).  0 or a PYDB
 * error (the step then fails; nothing was changed; a failed fsync of the
 * .mst/.xrf makes the handle read-only). */
int pydb__txn_settle(pydb_txn *t, pydb_error *err);
/* PYDB_ELOCKED if the calling thread has a transaction open on db (it
 * would wait for itself for the writer lock), as pydb_txn_begin() says;
 * else PYDB_OK.  Takes wmutex. */
int pydb__txn_mine_open(pydb_db *db, pydb_error *err);
/* 1 if a failed fsync made the handle read-only until it is reopened
 * (PYDB__FATAL_SYNC): its transactions are refused. */
int pydb__txn_read_only(const pydb_db *db);
/* PYDB_ECLOSED once pydb_close_begin() was called on db, else PYDB_OK:
 * looked at by every wait for the writer lock (txn.c, wal.c; here, so
 * that neither links to the other for it). */
static inline int pydb__closing_error(pydb_db *db, pydb_error *err)
{
    if (!__atomic_load_n(&db->closing, __ATOMIC_ACQUIRE)) return PYDB_OK;
    return PYDB_ERROR(err, PYDB_ECLOSED, db->mst.path, -1,
                      "the database is being closed (no write begins, and "
                      "a write waiting for the writer lock gave up)");
}
/* The handle's writer locks and queues made anew (wmutex/wcond, the
 * group commit's gmutex/gcond, lsmutex; conditions on CLOCK_MONOTONIC, as
 * pydb__cond_wait_until waits) and emptied: at open, and in a fork()ed
 * child, where a lock another thread held at the fork would stay held
 * and no waiter of the parent exists (gc.c's atfork handler). */
void pydb__writer_locks_init(pydb_db *db);

/* With the writer lock held, at a writer's open: bytes past the master
 * file's committed end that no record reaches (a commit killed before
 * its commit point wrote them) are cleared, as a transaction's begin
 * clears them (txn.c, check_tail), so that other ISIS programs find the
 * zero fill there.  Best effort: a failure is left to the next
 * transaction. */
void pydb__txn_tidy_tail(pydb_db *db);
/* In a transaction: fdatasync the log, so that every frame in it is
 * durable and no power cut can bring back an older MANIFEST than its
 * last frame's -- which a sync=False frame, synced by nobody, could
 * otherwise leave to a replay ("Commits without fsync").  Before segment
 * files that the MANIFEST on disk no longer names are removed outside a
 * checkpoint (pydb__nidx_collect, for a merge's commit and an index
 * build).  0, or PYDB_EIO
 * when the fdatasync failed: nothing may be removed, the log is named
 * suspect (recovery replays it) and the handle turns read-only, as after
 * any failed fdatasync of the log (txn.c, log_sync). */
int pydb__txn_log_durable(pydb_txn *t, pydb_error *err);
/* Forget the units a handle's synced frames held (txn.c; at close). */
void pydb__txn_img_free(pydb_db *db);

/* ---- the reader (read.c) ---- */

/* The committed state a plain read uses: the header's latest state, or
 * in files mode (no usable header, or a stale one) the handle's view of
 * the control record.  No file I/O with a usable header. */
void pydb__state_now(pydb_state *st, pydb_db *db);
/* The same without touching the handle (no size or view update): for
 * accessors of a const handle. */
void pydb__state_peek(pydb_state *st, const pydb_db *db);

/* Follow the version chain of `mfn` from the version at `off` back to the
 * first version written before st->mst_end (off itself when it is
 * older): *vis gets its offset, *status its leader STATUS (0 active, 1
 * deleted).  Versions newer than the state are read with pread (they may
 * lie past the sizes the state knows).  PYDB_ECORRUPT when a back pointer
 * does not lead strictly backwards or the chain ends before a visible
 * version; PYDB_EIO. */
/* Read (pread) and check the leader of the version of `mfn` at `off`:
 * within the first `limit` bytes of the master file, or, with limit < 0,
 * within what the file holds now (its size refreshed: a later commit's
 * version may lie past the sizes the handle knows).  0, PYDB_ECORRUPT
 * (file, offset, reason) or PYDB_EIO. */
int pydb__leader_read(pydb_leader *l, pydb_db *db, int32_t mfn, int64_t off,
                      int64_t limit, pydb_error *err);
int pydb__version_visible(int64_t *vis, int *status, pydb_db *db,
                          const pydb_state *st, int32_t mfn, int64_t off,
                          pydb_error *err);
/* The XRF entry of `mfn` as of st: state and offset of the version st
 * sees (raw and flags of the latest entry).  PYDB_ENOTFOUND outside
 * 1..st->next_mfn-1. */
int pydb__xrf_get_in(pydb_xrf_entry *out, pydb_db *db, const pydb_state *st,
                     int32_t mfn, pydb_error *err);
/* pydb_read() as of st. */
int pydb__read_in(pydb_record **rec, pydb_db *db, const pydb_state *st,
                  int32_t mfn, pydb_error *err);

/* Call fn on each XRF entry of MFN from..st->next_mfn-1 as of st
 * (entries resolved as pydb__xrf_get_in does), reading at most
 * max_blocks (<= 64) XRF blocks at a time (each inside the sequence
 * lock).  fn returns nonzero to stop; *stopped_at gets the MFN after the
 * one it stopped at (or NXTMFN).  0 or a PYDB error (a damaged entry is
 * PYDB_ECORRUPT). */
typedef int (*pydb__xrf_visit)(void *ctx, int32_t mfn,
                               const pydb_xrf_entry *e);
int pydb__xrf_scan(pydb_db *db, const pydb_state *st, int32_t from,
                   pydb__xrf_visit fn, void *ctx, int32_t *stopped_at,
                   int64_t max_blocks, pydb_error *err);

#endif
