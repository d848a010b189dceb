/*
 * pydb.h - the public C API of the pydb core.
 *
 * The core reads (and, for bulk loads, writes) CDS/ISIS master files
 * (.mst) and cross-reference files (.xrf) as described in
 * docs/isis-formats.md sections 2 and 3 (referred to below as
 * "formats §N").  It never includes Python.h and never calls into Python.
 *
 * Conventions
 *   - Every fallible function returns int: PYDB_OK (0) or a negative
 *     PYDB_E* code.  The detail (message, file, byte offset, errno) goes
 *     into the caller's pydb_error, so concurrent threads never share
 *     error state.  Pass NULL if the detail is not wanted.
 *   - Out-parameters come first.
 *   - MFNs are 1-based; offsets and sizes are in bytes.
 *
 * Threads
 *   Any number of threads may call the read functions on one handle at
 *   once (pread/mmap, no shared file offset, no global state), also while
 *   one thread runs a write transaction on it (see "Write path" below).
 *   pydb_close() must not race with readers or a transaction; the caller
 *   ensures that.
 */
#ifndef PYDB_H
#define PYDB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: a reserved negative range that cannot collide with errno. */
#define PYDB_OK            0
#define PYDB_ECORRUPT      (-30700) /* a file violates the format          */
#define PYDB_ENOTFOUND     (-30701) /* MFN never created / physically gone */
#define PYDB_EIO           (-30702) /* OS call failed; see sys_errno       */
#define PYDB_ENOMEM        (-30703) /* allocation failed                   */
#define PYDB_EINVAL        (-30704) /* bad argument from the caller        */
#define PYDB_EUNSUPPORTED  (-30705) /* valid but unsupported file/feature  */
#define PYDB_ETOOBIG       (-30706) /* record above the layout's limit     */
#define PYDB_EWOULDBLOCK   (-30707) /* pydb_read_nowait: data not cached    */
#define PYDB_ESYNTAX       (-30708) /* search expression: offset = position */
#define PYDB_EFST          (-30709) /* FST: offset = 1-based line number    */
#define PYDB_EREADONLY     (-30710) /* write on a read-only handle (opened
                                       read-only, or after a failed fsync) */
#define PYDB_ELOCKED       (-30711) /* writer lock not obtained in time     */

typedef struct pydb_error {
    int code;            /* PYDB_E* */
    int sys_errno;       /* errno for PYDB_EIO (and O_DIRECT refusal), else 0 */
    int64_t offset;      /* byte offset in `path` where the fault is, or -1 */
    char path[1024];     /* file concerned, or "" */
    char message[512];   /* human-readable reason */
    const char *src_file;/* where in csrc/ the error was raised */
    int src_line;
} pydb_error;

/* Human-readable name of a PYDB_E* code (static string). */
const char *pydb_strerror(int code);

/* Leader layouts, formats §2.2. */
enum pydb_layout {
    PYDB_LAYOUT_ISIS_PACKED = 0,   /* 18-byte leader, 6-byte dir entries  */
    PYDB_LAYOUT_ISIS_ALIGNED = 1,  /* 20-byte leader, 6-byte dir entries  */
    PYDB_LAYOUT_FFI_PACKED = 2,    /* 22-byte leader, 10-byte dir entries */
    PYDB_LAYOUT_FFI_ALIGNED = 3    /* 24-byte leader, 12-byte dir entries */
};
const char *pydb_layout_name(int layout);  /* "isis-packed", ... */
int pydb_layout_from_name(const char *name); /* -1 if unknown */

/* I/O modes. */
enum pydb_io {
    PYDB_IO_PREAD = 0,   /* pread(2) into the caller's buffer             */
    PYDB_IO_MMAP = 1,    /* read-only mapping, copied out on each read     */
    PYDB_IO_DIRECT = 2   /* O_DIRECT, aligned bounce buffers: no page cache */
};
const char *pydb_io_name(int io);
int pydb_io_from_name(const char *name);

/* Lock modes for reads. */
enum pydb_lock {
    PYDB_LOCK_NONE = 0,  /* readers run concurrently                      */
    PYDB_LOCK_MUTEX = 1  /* every record read holds one per-handle mutex  */
};

typedef struct pydb_options {
    int io;    /* enum pydb_io   */
    int lock;  /* enum pydb_lock */
    int flags; /* PYDB_OPEN_* (write path); 0 = read-only                 */
} pydb_options;

typedef struct pydb_db pydb_db;

/* What pydb_info() reports: the control record (formats §2.1) and the
 * layout detected from the files (formats §2.5). */
typedef struct pydb_info {
    int32_t next_mfn;    /* NXTMFN: the MFN the next new record gets       */
    int32_t next_block;  /* NXTMFB, 1-based                                */
    int32_t next_pos;    /* NXTMFP, 1-based                                */
    int32_t mftype;      /* 0 user database, 1 system database             */
    int32_t mstxl;       /* MSTXL shift (0 classic; 3, 6 seen in practice) */
    int32_t reccnt;      /* RECCNT as stored (statistics only)             */
    int layout;          /* enum pydb_layout                               */
    int io;              /* enum pydb_io in use                            */
    int lock;            /* enum pydb_lock in use                          */
    int64_t mst_size;    /* bytes known to the handle (grows with commits) */
    int64_t xrf_size;    /* bytes known to the handle (grows with commits) */
    const char *mst_path;
    const char *xrf_path;
} pydb_info;

/* XRF entry states, formats §3.2. */
enum pydb_xrf_state {
    PYDB_XRF_UNUSED = 0,     /* value 0: never created                     */
    PYDB_XRF_ACTIVE = 1,     /* positive pointer                           */
    PYDB_XRF_LDELETED = 2,   /* negated pointer: logically deleted         */
    PYDB_XRF_PDELETED = 3    /* -2048 (block -1, offset 0): physically gone */
};
#define PYDB_FLAG_PENDING 0x1  /* XRF 0x200: inverted file not yet updated */
#define PYDB_FLAG_NEW     0x2  /* XRF 0x400: new record, not yet inverted  */

typedef struct pydb_xrf_entry {
    int32_t raw;       /* the stored 32-bit value                          */
    int state;         /* enum pydb_xrf_state                              */
    int flags;         /* PYDB_FLAG_*                                      */
    int64_t offset;    /* byte offset of the record in the .mst, or -1     */
} pydb_xrf_entry;

/* One field of a record: its tag and a view of its value inside the
 * record's buffer (valid until the record is freed or reused). */
typedef struct pydb_field {
    uint32_t tag;      /* 1..65535 (0 is stored as found)                  */
    uint32_t len;      /* bytes                                            */
    const uint8_t *value;
} pydb_field;

/* A record version read from the master file.  One allocation holds the
 * struct, the raw record bytes and the field array. */
typedef struct pydb_record {
    int32_t mfn;         /* 1-based                                        */
    int status;          /* leader STATUS: 0 active, 1 logically deleted   */
    int deleted;         /* 1 if the XRF pointer is negated (formats §3.2) */
    int flags;           /* PYDB_FLAG_* from the XRF                       */
    int64_t offset;      /* byte offset of this version in the .mst        */
    int64_t back_offset; /* offset of the previous version (MFBWB/MFBWP), or -1 */
    uint32_t mfrl;       /* record length in bytes, abs(MFRL)              */
    int locked;          /* MFRL was negative (record lock sign)           */
    uint32_t nfields;
    pydb_field *fields;  /* nfields entries, in stored (directory) order   */
    size_t data_len;     /* bytes of field data (sum of field lengths)     */
    size_t capacity;     /* bytes allocated for the whole block            */
} pydb_record;

/*
 * Open the database named by `path`: the base name ("data/cds") or any
 * of its files ("data/cds.mst", "data/CDS.XRF"); extensions match in any
 * case.  Reads the control record and detects byte order, layout and
 * MSTXL.  Errors: PYDB_EIO (missing file: sys_errno ENOENT), PYDB_ECORRUPT,
 * PYDB_EUNSUPPORTED (big-endian files; O_DIRECT refused by the file
 * system, sys_errno EINVAL), PYDB_ENOMEM, PYDB_EINVAL.
 */
int pydb_open(pydb_db **out, const char *path, const pydb_options *opt,
              pydb_error *err);
void pydb_close(pydb_db *db);
void pydb_info_get(const pydb_db *db, pydb_info *out);

/* Highest MFN ever assigned (NXTMFN - 1); 0 for an empty database. */
int32_t pydb_max_mfn(const pydb_db *db);

/* Decode the XRF entry of `mfn` (1..max MFN). */
int pydb_xrf_get(pydb_xrf_entry *out, pydb_db *db, int32_t mfn,
                 pydb_error *err);

/*
 * Read the current version of record `mfn`.  *rec may be NULL (a new
 * block is allocated) or a record from an earlier call, which is reused
 * (and grown if needed): a reading loop allocates once.  Free with
 * pydb_record_free().  Logically deleted records are returned with
 * deleted = 1.  Errors: PYDB_ENOTFOUND (out of range, never created or
 * physically deleted), PYDB_ECORRUPT, PYDB_EIO, PYDB_ENOMEM.
 */
int pydb_read(pydb_record **rec, pydb_db *db, int32_t mfn, pydb_error *err);

/*
 * Like pydb_read(), but only if it cannot wait for the disk: every byte it
 * needs must come from the page cache without waiting (pread mode:
 * preadv2(2) with RWF_NOWAIT; mmap and direct modes: never, since a copy
 * out of a mapping may fault on the disk) and, in mutex mode, the mutex
 * must be free.  Otherwise it returns PYDB_EWOULDBLOCK and the caller uses
 * pydb_read().  The binding calls it with the GIL held, so that cache hits
 * cost no GIL hand-off (docs/conventions.md, GIL rule 6).
 */
int pydb_read_nowait(pydb_record **rec, pydb_db *db, int32_t mfn,
                     pydb_error *err);

/* Read the record version stored at byte `offset` of the .mst (a back
 * version); its MFN must be `mfn`. */
int pydb_read_at(pydb_record **rec, pydb_db *db, int32_t mfn, int64_t offset,
                 pydb_error *err);

void pydb_record_free(pydb_record *rec);

/* Counts of XRF states over MFN 1..max (a scan of the XRF). */
typedef struct pydb_counts {
    int32_t active, ldeleted, pdeleted, unused;
    int32_t flag_new, flag_pending;
} pydb_counts;
int pydb_count(pydb_counts *out, pydb_db *db, pydb_error *err);

/*
 * List the MFNs >= `from` whose records are active (and logically
 * deleted too if `include_deleted`), in MFN order, up to `cap` of them.
 * *n receives how many were stored; *next the MFN to continue from
 * (max MFN + 1 at the end).
 */
int pydb_list_mfns(int32_t *mfns, size_t cap, size_t *n, int32_t *next,
                   pydb_db *db, int32_t from, int include_deleted,
                   pydb_error *err);

/* Drop the database files from the page cache (posix_fadvise DONTNEED,
 * and MADV_DONTNEED on the mappings in mmap mode).  Best effort. */
int pydb_drop_cache(pydb_db *db, pydb_error *err);

/* ---- bulk writer: a new database, records appended in MFN order ---- */

typedef struct pydb_builder pydb_builder;

/*
 * Create a new, empty database at `path` (base name; ".mst"/".xrf" are
 * added) with the given layout and MSTXL shift (0..6).  Fails with
 * PYDB_EIO/EEXIST if the files exist.  Records are appended with
 * pydb_builder_add() and the control record and XRF are written by
 * pydb_builder_finish(), which also fsyncs when `sync` is nonzero.
 * Placement follows formats §2.3 (never-split rule, 2-byte or 2^MSTXL
 * alignment, even MFRL padded with blanks).
 */
int pydb_builder_open(pydb_builder **out, const char *path, int layout,
                      int mstxl, pydb_error *err);
/* Append one record (MFN = previous + 1).  PYDB_ETOOBIG when the record
 * exceeds the layout's limit (ISIS: 32767 bytes). */
int pydb_builder_add(pydb_builder *b, const pydb_field *fields,
                     uint32_t nfields, pydb_error *err);
/* Leave the next MFN out of the master file: its XRF entry says
 * "physically deleted" (-2048, formats §3.2), as after a WinISIS
 * reorganisation.  Used by ISO/JSON Lines import to keep MFN gaps. */
int pydb_builder_skip(pydb_builder *b, pydb_error *err);
/* Mark the record just added logically deleted: STATUS = 1 in its leader
 * and its XRF pointer negated (formats §2.4). */
int pydb_builder_delete_last(pydb_builder *b, pydb_error *err);
int pydb_builder_finish(pydb_builder *b, int sync, pydb_error *err);
/* Free the builder; if not finished, the partial files are removed. */
void pydb_builder_free(pydb_builder *b);


/* ======================================================================
 * Validator (issue 3, item 5): csrc/check.c.  Walks the control record,
 * every XRF block and entry, every record version reachable from the XRF
 * and every back-pointer chain, then scans the master file sequentially
 * for versions nothing points at (formats §2-3; docs/reliability.md §2.1
 * "A validator").  Every fault is reported to a callback with its kind,
 * severity and location; the walk never stops at the first fault.
 * ====================================================================== */

/* Kinds of fault.  Each kind has one severity (pydb_check_kind_severity):
 * an ERROR is something a reader fails on or that loses data; a WARNING
 * is non-canonical or wasteful but readable without loss. */
enum pydb_check_kind {
    /* errors */
    PYDB_CHECK_CONTROL = 0,      /* control record contradicts the files    */
    PYDB_CHECK_XRF_BLOCK,        /* XRFPOS is not the block number; XRF
                                    shorter than NXTMFN needs              */
    PYDB_CHECK_XRF_POINTER,      /* XRF entry points outside the records
                                    (control record, past the committed end
                                    or the end of the file)               */
    PYDB_CHECK_XRF_BEYOND_END,   /* non-zero XRF entry for MFN >= NXTMFN    */
    PYDB_CHECK_MFN_MISMATCH,     /* leader MFN is not the MFN looked for    */
    PYDB_CHECK_MFRL,             /* MFRL impossible, or the record passes
                                    the end of the file / committed end    */
    PYDB_CHECK_BASE,             /* BASE != leader + NVF*entry, or > MFRL   */
    PYDB_CHECK_DIRECTORY,        /* a field passes the end of the record    */
    PYDB_CHECK_STATUS,           /* leader STATUS is neither 0 nor 1        */
    PYDB_CHECK_BACK_POINTER,     /* MFBWB/MFBWP malformed, not strictly
                                    earlier in the file, or leading into
                                    another MFN's chain                    */
    PYDB_CHECK_OVERLAP,          /* two reachable versions share bytes      */
    PYDB_CHECK_IO,               /* a read failed (EIO, ...)                */
    /* warnings */
    PYDB_CHECK_MFRL_PADDING,     /* MFRL odd / not a multiple of 2^MSTXL    */
    PYDB_CHECK_PLACEMENT,        /* start not aligned, or leader splits a
                                    block (never-split rule, formats §2.3) */
    PYDB_CHECK_STATUS_MISMATCH,  /* STATUS disagrees with the XRF sign      */
    PYDB_CHECK_LOCKED,           /* current version has a negative MFRL
                                    (record lock left set)                 */
    PYDB_CHECK_DIRECTORY_ORDER,  /* fields not stored back to back in
                                    directory order (gaps or overlaps)     */
    PYDB_CHECK_XRFPOS_SIGN,      /* XRFPOS negative on a block that is not
                                    the last, or positive on the last      */
    PYDB_CHECK_FILE_SIZE,        /* .mst/.xrf not a multiple of 512 bytes   */
    PYDB_CHECK_CONTROL_END,      /* a record ends past NXTMFB/NXTMFP, but
                                    before the next (aligned) append       */
    PYDB_CHECK_CONTROL_FLAGS,    /* MFTYPE not 0/1; CISIS lock words set    */
    PYDB_CHECK_ORPHAN,           /* a record version nothing reaches
                                    (garbage left by updates)              */
    PYDB_CHECK_LIMIT,            /* too many versions to track: overlap and
                                    orphan checks skipped                  */
    PYDB_CHECK_NKINDS
};
#define PYDB_CHECK_WARNING 1
#define PYDB_CHECK_ERROR   2

/* One fault, as the callback sees it (pointers valid during the call). */
typedef struct pydb_check_problem {
    int kind;             /* enum pydb_check_kind                          */
    const char *name;     /* kind name, e.g. "mfn-mismatch" (static)       */
    int severity;         /* PYDB_CHECK_ERROR or PYDB_CHECK_WARNING        */
    int32_t mfn;          /* MFN concerned, or 0                           */
    const char *path;     /* file where the fault is                       */
    int64_t offset;       /* byte offset in that file, or -1               */
    const char *message;  /* human-readable reason                         */
} pydb_check_problem;

/* Receives each fault; return nonzero to stop the walk. */
typedef int (*pydb_check_fn)(void *ctx, const pydb_check_problem *p);

typedef struct pydb_check_summary {
    int64_t errors, warnings;
    int64_t by_kind[PYDB_CHECK_NKINDS];
    int32_t mfns;          /* XRF entries walked (MFN 1..NXTMFN-1)         */
    int64_t versions;      /* current versions checked                     */
    int64_t back_versions; /* back versions checked along MFBWB/MFBWP      */
    int64_t orphans;       /* versions found only by the sequential scan   */
    int64_t orphan_bytes;  /* their MFRL total                             */
    int scanned;           /* 1 if the sequential scan ran to the end      */
    int stopped;           /* 1 if the callback stopped the walk           */
} pydb_check_summary;

typedef struct pydb_check_options {
    pydb_check_fn problem; /* may be NULL: only the summary is filled      */
    void *ctx;
    /* Called now and then from the walking thread with work done / total
     * (units: XRF entries + 512-byte blocks scanned).  May be NULL. */
    void (*progress)(void *ctx, int64_t done, int64_t total);
    void *progress_ctx;
} pydb_check_options;

const char *pydb_check_kind_name(int kind);   /* "?" if unknown            */
int pydb_check_kind_severity(int kind);       /* PYDB_CHECK_* or 0         */

/*
 * Validate an open database.  Returns PYDB_OK when the walk ran (whatever
 * it found: see *out), PYDB_ENOMEM if the fixed work buffers cannot be
 * allocated.  Memory use is bounded: a 64 KiB buffer, a directory buffer
 * of at most 786 KiB, and a table of at most 4 Mi record versions (16
 * bytes each at load <= 1/2, plus a sorted copy: at most 192 MiB); a
 * database with more versions gets a PYDB_CHECK_LIMIT warning and skips
 * the overlap and orphan checks.  Reads go
 * through the handle's I/O mode; the handle is not modified, so readers
 * may run at the same time.
 */
int pydb_check_ex(pydb_db *db, const pydb_check_options *opt,
                  pydb_check_summary *out, pydb_error *err);
int pydb_check(pydb_db *db, pydb_check_fn fn, void *ctx,
               pydb_check_summary *out, pydb_error *err);


/* ======================================================================
 * Write path (issue 3): transactions on an open database.
 * A database opened with PYDB_OPEN_WRITE may have one transaction at a
 * time (per process: a mutex; across processes: an fcntl lock).
 * Readers never wait for the writer.  Recovery runs in pydb_open().
 * ====================================================================== */
#define PYDB_OPEN_WRITE 0x1      /* pydb_options.flags                     */
#define PYDB_OPEN_NOSYNC 0x2     /* commits do not fsync (sync=False)      */
/* Layout to assume when the files hold no record to detect it from (an
 * empty database): PYDB_OPEN_LAYOUT(PYDB_LAYOUT_FFI_PACKED) | ...        */
#define PYDB_OPEN_LAYOUT(layout) ((((layout) & 3) + 1) << 8)

/*
 * What readers observe (the contract of this section):
 *   - A commit is applied after it is durable in the write-ahead log
 *     <base>.wal: the new record versions are written to free space at the
 *     end of the .mst, then the XRF blocks, then the control record.
 *     Record versions are never overwritten in place.
 *   - A reader on the same handle (any thread) sees a commit as soon as
 *     pydb_txn_commit() returns, never sees a half-written record, and
 *     never waits for the writer's lock or fsyncs.  A single read (one
 *     record, or one XRF batch of a listing) sees each record either
 *     before or after the commit; a reader that reads several records one
 *     by one while a commit is applied may see some of them from before
 *     the commit and later ones from after it (there are no snapshots).
 *   - A handle opened elsewhere (another handle, another process) picks up
 *     later commits when it re-reads the control record: when asked for an
 *     MFN beyond the highest it knows, and at pydb_count()/listings from
 *     MFN 1.  It too sees every record whole, but may see a multi-record
 *     commit partly applied while the committing process is applying it,
 *     and, if that process dies then, until the next writer (or an open)
 *     runs recovery.
 *   - WinISIS/CISIS know nothing of the log: after recovery the .mst/.xrf
 *     alone are consistent.
 */

/*
 * Create a new, empty database `path` (base name; .mst/.xrf are added)
 * with the given layout and MSTXL (0..6), and open it for writing with
 * `opt` (io, lock; flags gets PYDB_OPEN_WRITE and the layout added).
 * PYDB_EIO with sys_errno EEXIST if either file exists.
 */
int pydb_create(pydb_db **out, const char *path, int layout, int mstxl,
                const pydb_options *opt, pydb_error *err);

typedef struct pydb_txn pydb_txn;

/* Begin a transaction; waits up to timeout_ms for the writer lock
 * (PYDB_ELOCKED after that; PYDB_EREADONLY on a read-only handle). */
int pydb_txn_begin(pydb_txn **out, pydb_db *db, int timeout_ms,
                   pydb_error *err);
/* Append a new record; *mfn receives its MFN (NXTMFN at the time).
 * PYDB_ETOOBIG above the layout's limit (ISIS: 32767 bytes).  New records
 * get the XRF flag "new" (0x400, formats §3.2). */
int pydb_txn_append(pydb_txn *t, const pydb_field *fields, uint32_t nfields,
                    int32_t *mfn, pydb_error *err);
/* Write a new version of record `mfn` (back pointer MFBWB/MFBWP to the
 * version it replaces, formats §2.4).  The XRF entry keeps the "new" flag
 * if the record has it (never inverted), else gets "update pending"
 * (0x200).  A logically deleted record stays deleted.  PYDB_ENOTFOUND if
 * the record does not exist or is physically deleted. */
int pydb_txn_update(pydb_txn *t, int32_t mfn, const pydb_field *fields,
                    uint32_t nfields, pydb_error *err);
/* Logical deletion: a new version with leader STATUS 1 and the XRF
 * pointer negated (formats §2.4, §3.2); undelete writes a version with
 * STATUS 0 and a positive pointer.  Either is a no-op if the record is
 * already in that state. */
int pydb_txn_delete(pydb_txn *t, int32_t mfn, pydb_error *err);
int pydb_txn_undelete(pydb_txn *t, int32_t mfn, pydb_error *err);
/* Make the transaction durable (sync unless PYDB_OPEN_NOSYNC) and
 * visible; frees t whatever the outcome.  PYDB_EIO (errno in sys_errno)
 * when a write or fsync fails: a failure before the log is durable leaves
 * the database as it was; any failed fsync, or a failure while applying
 * the durable log, makes the handle read-only (PYDB_EREADONLY) until it is
 * reopened, and the transaction then appears (whole) after recovery. */
int pydb_txn_commit(pydb_txn *t, pydb_error *err);
/* Discard the transaction; frees t. */
void pydb_txn_abort(pydb_txn *t);

/* One record change of a transaction, as the commit hook sees it. */
typedef struct pydb_change {
    int32_t mfn;
    const pydb_record *before;  /* version replaced/deleted, or NULL       */
    const pydb_field *after;    /* new fields, or NULL for a deletion      */
    uint32_t nafter;
    int deleted_after;          /* 1 if the record is logically deleted now */
} pydb_change;

/* A commit hook lets another structure (the native index) join every
 * transaction: prepare() runs before the commit point and may add whole
 * files to the transaction with pydb_txn_put_file(); it must leave
 * nothing visible.  publish() runs after the commit point (no failure
 * allowed: it only swaps in-memory state); abort() when the commit fails
 * before its log can be durable (it removes what prepare wrote).  When a
 * commit fails once its log may be durable (a failed fsync of the log, a
 * failure while applying it) neither is called: the handle becomes
 * read-only, recovery at the next open may put the prepared files in
 * place, so they must stay; the hook's owner drops its pending state
 * (without deleting files) when it is closed. */
typedef struct pydb_commit_hook {
    int (*prepare)(void *ctx, pydb_txn *t, const pydb_change *changes,
                   size_t n, pydb_error *err);
    void (*publish)(void *ctx, pydb_txn *t);
    void (*abort)(void *ctx, pydb_txn *t);
    void *ctx;
} pydb_commit_hook;
int pydb_set_commit_hook(pydb_db *db, const pydb_commit_hook *hook,
                         pydb_error *err);
/* Replace the whole content of file `path` atomically as part of the
 * transaction (logged in the write-ahead log, replayed by recovery). */
int pydb_txn_put_file(pydb_txn *t, const char *path, const void *data,
                      size_t len, pydb_error *err);

/* ======================================================================
 * Inverted index (issue 4): one interface over the native index and the
 * ISIS inverted files (formats §4-6).
 * ====================================================================== */
typedef struct pydb_posting {
    int32_t mfn;     /* 1-based                                            */
    uint32_t tag;    /* FST line ID (formats §5.1)                         */
    uint32_t occ;    /* 1-based FST output line ("occurrence")             */
    uint32_t cnt;    /* 1-based term position within the line              */
} pydb_posting;

/* A growable array of postings, sorted by (mfn, tag, occ, cnt). */
typedef struct pydb_postings {
    pydb_posting *v;
    size_t n, cap;
} pydb_postings;
void pydb_postings_free(pydb_postings *p);   /* frees v; zeroes the struct */

enum pydb_index_kind {
    PYDB_INDEX_NATIVE = 0,        /* pydb's own segments                    */
    PYDB_INDEX_ISIS_CLASSIC = 1,  /* .cnt/.n0x/.l0x/.ifp                   */
    PYDB_INDEX_ISIS_LIND = 2,     /* .cnt/.n0x/.ly0x/.iyp: no TAG/OCC      */
    PYDB_INDEX_MEMORY = 3         /* in-memory (tests, recent commits)     */
};
/* What the postings of an index carry (LIND: MFN, maybe CNT only). */
#define PYDB_POSTING_TAG 0x1
#define PYDB_POSTING_OCC 0x2
#define PYDB_POSTING_CNT 0x4

typedef struct pydb_index pydb_index;

/* Called once per key in ascending byte order; return nonzero to stop
 * (the enumeration then returns PYDB_OK). */
typedef int (*pydb_term_fn)(void *ctx, const uint8_t *key, size_t len,
                            uint64_t count);

/* Enumerate the keys that start with `prefix` and are >= `start` (NULL:
 * from the first), with their posting counts.  A range scan, no cap. */
int pydb_index_terms(pydb_index *ix, const uint8_t *prefix, size_t prefix_len,
                     const uint8_t *start, size_t start_len, pydb_term_fn fn,
                     void *ctx, pydb_error *err);
/* Append the postings of exactly `key` (already in key form) to *out. */
int pydb_index_postings(pydb_postings *out, pydb_index *ix,
                        const uint8_t *key, size_t len, pydb_error *err);
/* Bring a search term into key form (case table / Unicode folding,
 * truncation), into out[cap]; *out_len receives the length. */
int pydb_index_key(pydb_index *ix, const uint8_t *term, size_t len,
                   uint8_t *out, size_t cap, size_t *out_len,
                   pydb_error *err);
int pydb_index_kind(const pydb_index *ix);
int pydb_index_caps(const pydb_index *ix);     /* PYDB_POSTING_* bits      */
void pydb_index_close(pydb_index *ix);

/* Open the ISIS inverted file of the database `path` (base name, or any
 * of its files): .cnt + .n01/.n02 with the classic .l01/.l02/.ifp or the
 * LIND .ly1/.ly2/.iyp set (formats §4), extensions in any case.  Where
 * both sets are present the one that validates against .cnt/.n0x is used
 * (formats §4.8).  Errors: PYDB_EIO with sys_errno ENOENT (no .cnt: the
 * database has no inverted file), PYDB_ECORRUPT (file, offset, reason),
 * PYDB_ENOMEM, PYDB_EINVAL. */
int pydb_isis_index_open(pydb_index **out, const char *path, pydb_error *err);

/* What pydb_isis_index_describe() reports about an open ISIS index.  The
 * strings belong to the index (valid until it is closed). */
typedef struct pydb_isis_index_info {
    int kind;            /* PYDB_INDEX_ISIS_CLASSIC or PYDB_INDEX_ISIS_LIND */
    int le1, le2;        /* key lengths of tree 1 / tree 2 (formats §4.1)  */
    int cnt_aligned;     /* .cnt has 28-byte (aligned) records, else 26    */
    int key_pad;         /* pad bytes after a 10/30 key (aligned): 0 or 2  */
    int infx;            /* LIND: INFO1/INFO3 size, 4 or 8; classic: 0     */
    int infx_align;      /* LIND: alignment of INFX fields (1, 4 or 8)     */
    int mfn_bytes;       /* MFN width in postings: 3, or 4 (LIND4)         */
    struct {
        int empty;       /* LIV -1 (or no leaves)                          */
        int liv;         /* index levels below the root                    */
        int32_t root, nodes, leaves;   /* POSRX, NMAXPOS, FMAXPOS          */
        size_t node_size, leaf_size;   /* record sizes in bytes            */
        const char *node_path, *leaf_path;
    } tree[2];
    const char *cnt_path, *postings_path;
    const char *note;    /* which file set was used and why                */
} pydb_isis_index_info;
/* Describe an index opened by pydb_isis_index_open (PYDB_EINVAL for any
 * other kind of index). */
int pydb_isis_index_describe(const pydb_index *ix, pydb_isis_index_info *out);

/* Evaluate a search expression (formats §6) against `ix`; `db` (may be
 * NULL) drops the MFNs whose XRF entry is not active (logically or
 * physically deleted, never created, above the highest MFN).  *mfns
 * (malloc'ed, free()) gets the sorted, distinct MFNs.  PYDB_ESYNTAX:
 * err->offset = 0-based byte position of the fault; PYDB_EUNSUPPORTED:
 * an operator needs posting fields the index lacks (LIND).  The language
 * and the postings each operator yields: csrc/search.c. */
int pydb_search(int32_t **mfns, size_t *n, pydb_index *ix, pydb_db *db,
                const char *expr, size_t len, pydb_error *err);
/* Limits of pydb_search(): longer expressions and deeper parentheses are
 * refused with PYDB_ESYNTAX (csrc/search.c explains the language). */
#define PYDB_SEARCH_MAX_LEN 65536    /* bytes                             */
#define PYDB_SEARCH_MAX_DEPTH 100    /* nested parentheses                */

/* An in-memory index (kind PYDB_INDEX_MEMORY) whose postings carry the
 * fields in `caps` (PYDB_POSTING_* bits; the others are stored as 0).
 * Its key form is the term with ASCII a-z upper-cased, nothing else.
 * Readers may share it; pydb_memindex_add() must not run concurrently
 * with any other call on the same index. */
int pydb_memindex_new(pydb_index **out, int caps, pydb_error *err);
/* Add n postings (MFN >= 1) to `key` (taken as given, in key form);
 * creates the key if absent (not if n = 0).  Keys added in ascending
 * byte order are appended in O(1); others are inserted in place. */
int pydb_memindex_add(pydb_index *ix, const uint8_t *key, size_t len,
                      const pydb_posting *p, size_t n, pydb_error *err);


/* ======================================================================
 * FST and native index (issue 4, csrc/fst.c, csrc/keys.c, csrc/nidx.c).
 * ====================================================================== */
typedef struct pydb_fst pydb_fst;

/* Compile FST text (formats §5.1: one "ID IT FORMAT" rule per line; blank
 * lines ignored).  `filename` names the source in errors (may be NULL).
 * PYDB_EFST: err->offset = 1-based line, message names the construct. */
int pydb_fst_parse(pydb_fst **out, const char *text, size_t len,
                   const char *filename, pydb_error *err);
void pydb_fst_free(pydb_fst *f);
size_t pydb_fst_count(const pydb_fst *f);
/* Rule i: its ID, technique (0-8, or 1000-1008) and format text. */
void pydb_fst_rule(const pydb_fst *f, size_t i, uint32_t *id, int *technique,
                   const char **format, size_t *format_len, int *line);

typedef struct pydb_nidx_options {
    int utf8;               /* keys are UTF-8 (Unicode folding)           */
    size_t max_key;         /* keys cut to this many bytes; 0 = no limit  */
    const uint8_t *stw;     /* stop-word text (.STW), or NULL             */
    size_t stw_len;
    int tables;             /* 1: load ISISUC.TAB/ISISAC.TAB from the
                               database's directory when present          */
} pydb_nidx_options;

/* Progress of a bulk build: records done of total; nonzero cancels. */
typedef int (*pydb_progress_fn)(void *ctx, int64_t done, int64_t total);

/* Build (or rebuild) the native index of the database `db_path` from
 * `fst`: files in the directory <base>.pdx beside the .mst.  Active
 * records only (logically deleted ones are skipped); a damaged record
 * fails the build (PYDB_ECORRUPT naming it) rather than leaving it out.
 * The new index replaces the old one atomically; handles opened before
 * must be reopened.  `fst` must outlive the build. */
int pydb_native_index_build(const char *db_path, const pydb_fst *fst,
                            const pydb_nidx_options *opt,
                            pydb_progress_fn progress, void *ctx,
                            pydb_error *err);
/* The same in steps (a binding reports progress between them). */
typedef struct pydb_nidx_builder pydb_nidx_builder;
int pydb_nidx_builder_open(pydb_nidx_builder **out, const char *db_path,
                           const pydb_fst *fst, const pydb_nidx_options *opt,
                           pydb_error *err);
/* Index up to `max` more records; *done and *total report progress; *more
 * is 0 once every record has been read. */
int pydb_nidx_builder_step(pydb_nidx_builder *b, int32_t max, int64_t *done,
                           int64_t *total, int *more, pydb_error *err);
int pydb_nidx_builder_finish(pydb_nidx_builder *b, pydb_error *err);
void pydb_nidx_builder_free(pydb_nidx_builder *b);

/* Open the native index of `db_path` (PYDB_EIO/ENOENT if none). */
int pydb_native_index_open(pydb_index **out, const char *db_path,
                           pydb_error *err);
/* Make every commit on `db` update the native index `ix` (opened on the
 * same database) in the same transaction (pydb_set_commit_hook): prepare
 * writes a segment and hands the new MANIFEST to pydb_txn_put_file;
 * publish makes it visible to searches on ix.  ix must stay open while db
 * is. */
int pydb_native_index_attach(pydb_index *ix, pydb_db *db, pydb_error *err);

#ifdef __cplusplus
}
#endif
#endif /* PYDB_H */
