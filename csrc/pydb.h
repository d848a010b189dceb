/*
 * pydb.h - the public C API of the pydb core (csrc/).
 *
 * The core reads CDS/ISIS master files (.mst) and cross-reference files
 * (.xrf) as docs/isis-formats.md §2-3 describes them, writes them (bulk
 * builder, transactions with a write-ahead log), reads the ISIS inverted
 * files (§4), keeps its own native index and evaluates the ISIS search
 * language (§6).  It never includes Python.h and never calls into
 * Python; the CPython binding (pydb/_pydb_*.c) includes this header and
 * nothing else from csrc/ (only its test door adds csrc/pydb_test.h, the
 * core's test-only header).
 *
 * Groups, in this order:
 *   1. version and conventions
 *   2. errors
 *   3. handle and reads          pydb_open, pydb_read, pydb_refresh, ...
 *   3b. snapshots                pydb_snapshot_* (one pinned commit)
 *   4. bulk builder              pydb_builder_* (a new database)
 *   5. transactions, commit hook pydb_create, pydb_txn_*, pydb_commit_hook
 *   6. index and search          pydb_index_*, pydb_isis_index_*,
 *                                pydb_memindex_*, pydb_search
 *   7. FST and native index      pydb_fst_*, pydb_native_index_*,
 *                                pydb_nidx_builder_*
 *   8. validator                 pydb_check, pydb_check_ex
 *   9. garbage and statistics    pydb_gc_*, pydb_stat_get
 *   10. ISO 2709                 pydb_iso_strict, pydb_iso_encode
 */
#ifndef PYDB_H
#define PYDB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * 1. Version and conventions
 *
 * The version of the core, the same as the Python package's
 * (pyproject.toml).  Until 1.0 the API may change between minor versions.
 *
 * Conventions (docs/conventions.md):
 *   - Every fallible function returns int: PYDB_OK (0) or a negative
 *     PYDB_E* code.  The detail (message, file, byte offset, errno) goes
 *     into the caller's pydb_error, so concurrent threads never share
 *     error state.  Pass NULL if the detail is not wanted.
 *   - Argument order: out-parameters first (the results, including a
 *     caller's output buffer with its capacity), then the object the
 *     function acts on, then the inputs, and `pydb_error *err` last.
 *   - Memory: an object returned through an out-parameter belongs to the
 *     caller and is freed with the function named next to it
 *     (pydb_close, pydb_record_free, pydb_index_close, ...; each accepts
 *     NULL).  Pointers into an object (field values, names, paths) are
 *     valid while that object lives.  Arrays that a function allocates for
 *     the caller say so ("malloc'ed: free()").
 *   - MFNs are 1-based; offsets and sizes are in bytes.
 *   - Threads: each group says which calls may run concurrently on one
 *     object.  The core has no global mutable state (except the test
 *     hooks of csrc/pydb_test.h); distinct objects are independent.
 * ====================================================================== */
#define PYDB_VERSION_MAJOR 0
#define PYDB_VERSION_MINOR 1
#define PYDB_VERSION_PATCH 0
#define PYDB_VERSION "0.1.0"

/* ======================================================================
 * 2. Errors
 *
 * Error codes are in a reserved negative range that cannot collide with
 * errno values.  A failed call fills the caller's pydb_error (if not
 * NULL); a successful one leaves it untouched.
 * ====================================================================== */
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
#define PYDB_ENEWINDEX     (-30712) /* pydb_txn_begin: a native index was
                                       built since the caller last looked
                                       (pydb_index_gen_seen), none attached */
#define PYDB_ECLOSED       (-30713) /* a wait for the writer lock ended by
                                       pydb_close_begin()                   */

typedef struct pydb_error {
    int code;            /* PYDB_E* */
    int sys_errno;       /* errno for PYDB_EIO (and O_DIRECT refusal), else 0 */
    int64_t offset;      /* byte offset in `path` where the fault is, or -1;
                            PYDB_ESYNTAX: position in the expression;
                            PYDB_EFST: 1-based line                        */
    char path[1024];     /* file concerned, or "" */
    char message[512];   /* human-readable reason */
    const char *src_file;/* where in csrc/ the error was raised ("" when
                            set by pydb_error_set)                         */
    int src_line;
    int committed;       /* a failed pydb_txn_commit(): PYDB_COMMIT_*; 0
                            (PYDB_COMMIT_NO) from every other call        */
} pydb_error;

/* What a failed commit leaves (pydb_error.committed). */
#define PYDB_COMMIT_NO 0      /* nothing of the transaction is committed   */
#define PYDB_COMMIT_DURABLE 1 /* committed: the write-ahead log holds it
                                 and the next open applies it; the handle
                                 is read-only until it is reopened         */
#define PYDB_COMMIT_UNKNOWN 2 /* the log's fsync failed: it may or may not
                                 have reached the disk                     */

/* Human-readable name of a PYDB_E* code (a static string; "unknown
 * error" for other values).  Thread-safe. */
const char *pydb_strerror(int code);

/* Fill *err (if not NULL) with `code`, `path` (NULL or "" for none),
 * `offset` (-1 when not meaningful) and a printf-style message, and
 * return `code`.  For callbacks that report errors to the core, such as a
 * pydb_commit_hook's prepare().  Never fails.  Thread-safe (touches only
 * *err). */
int pydb_error_set(pydb_error *err, int code, const char *path,
                   int64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ======================================================================
 * 3. Handle and reads
 *
 * pydb_open() opens a database (its .mst and .xrf) and returns a handle;
 * the read functions decode the control record, XRF entries and record
 * versions through it.
 *
 * Threads: any number of threads may call the read functions on one
 * handle at once (pread/mmap, no shared file offset), also while one
 * thread runs a write transaction on it (group 5 says what they see).
 * pydb_close() must not race with any other call on the handle; the
 * caller ensures that.
 * ====================================================================== */

/* Leader layouts, docs/isis-formats.md §2.2. */
enum pydb_layout {
    PYDB_LAYOUT_ISIS_PACKED = 0,   /* 18-byte leader, 6-byte dir entries  */
    PYDB_LAYOUT_ISIS_ALIGNED = 1,  /* 20-byte leader, 6-byte dir entries  */
    PYDB_LAYOUT_FFI_PACKED = 2,    /* 22-byte leader, 10-byte dir entries */
    PYDB_LAYOUT_FFI_ALIGNED = 3    /* 24-byte leader, 12-byte dir entries */
};
/* "isis-packed", "isis-aligned", "ffi-packed", "ffi-aligned" (static
 * strings; "unknown" for another value). */
const char *pydb_layout_name(int layout);
/* The layout named `name` (as pydb_layout_name spells it), or -1. */
int pydb_layout_from_name(const char *name);

/* I/O modes. */
enum pydb_io {
    PYDB_IO_PREAD = 0,   /* pread(2) into the caller's buffer             */
    PYDB_IO_MMAP = 1,    /* read-only mapping, copied out on each read     */
    PYDB_IO_DIRECT = 2   /* O_DIRECT, aligned bounce buffers: no page cache */
};
/* "pread", "mmap", "direct" (static strings; "unknown" otherwise). */
const char *pydb_io_name(int io);
/* The I/O mode named `name`, or -1. */
int pydb_io_from_name(const char *name);

/* Lock modes for reads. */
enum pydb_lock {
    PYDB_LOCK_NONE = 0,  /* readers run concurrently                      */
    PYDB_LOCK_MUTEX = 1  /* every record read holds one per-handle mutex  */
};

typedef struct pydb_options {
    int io;    /* enum pydb_io   */
    int lock;  /* enum pydb_lock */
    int flags; /* PYDB_OPEN_* below; 0 = read-only                        */
} pydb_options;
/* pydb_options.flags: */
#define PYDB_OPEN_WRITE 0x1      /* open for transactions (group 5)        */
#define PYDB_OPEN_NOSYNC 0x2     /* sync=False: a commit fsyncs its log
                                    frame only when it writes in place a
                                    unit no synced frame holds (txn.c,
                                    "Commits without fsync"); a power cut
                                    loses recent commits, never damages */
/* Layout to assume when the files hold no record to detect it from (an
 * empty database): PYDB_OPEN_LAYOUT(PYDB_LAYOUT_FFI_PACKED) | ...        */
#define PYDB_OPEN_LAYOUT(layout) ((((layout) & 3) + 1) << 8)

typedef struct pydb_db pydb_db;   /* an open database (opaque) */

/*
 * Open the database named by `path`: the base name ("data/cds") or any
 * of its files ("data/cds.mst", "data/CDS.XRF"); extensions match in any
 * case.  Reads the control record and detects byte order, layout and
 * MSTXL; a log left by a crashed writer is replayed first (group 5).
 * `opt` may be NULL (pread, no lock, read-only).  *out belongs to the
 * caller: pydb_close() it.
 * Errors: PYDB_EIO (missing file: sys_errno ENOENT; other OS failures),
 * PYDB_ECORRUPT (control record, or a log that cannot be replayed),
 * PYDB_EUNSUPPORTED (big-endian files; O_DIRECT refused by the file
 * system, sys_errno EINVAL), PYDB_ENOMEM, PYDB_EINVAL (empty or too long
 * path, bad options).  (When another writer holds the lock, recovery is
 * left to the next transaction.)
 */
int pydb_open(pydb_db **out, const char *path, const pydb_options *opt,
              pydb_error *err);
/* Close the handle and free it (NULL: nothing).  No other call on it may
 * run or follow. */
void pydb_close(pydb_db *db);
/* Start closing db, for a caller whose other threads may be waiting for
 * the writer lock (held by another thread's open transaction, another
 * handle or another process), which pydb_close() must not race: every
 * such wait ends with PYDB_ECLOSED (at once for another thread's
 * transaction; within 20 ms for another process's lock, or a second
 * where a log's fence is being passed), and so does every later
 * begin (pydb_txn_begin, pydb_write_one, a collection's step); reads are
 * unaffected.  Any thread may call it, more than once.  Then wait for
 * the calls in flight to return, and pydb_close(). */
void pydb_close_begin(pydb_db *db);

/* Re-read the control record and the file sizes.  With a usable commit
 * header (group 3b) every read already sees the latest published commit;
 * a refresh also checks the header against the control record, and when
 * they disagree while no pydb writer holds the lock (another program
 * wrote the files), the handle reads in files mode until a writer
 * rebuilds the header.  In files mode it is how `db` sees records that
 * another handle or process committed since it was opened.  The handle
 * refreshes by itself when asked for an MFN beyond the highest it knows,
 * in pydb_count() and in listings from MFN 1.  Never lowers what the
 * handle knows.  Best effort: a control record that cannot be read, or
 * that announces more than the files hold yet (a commit being applied),
 * leaves the handle's view as it was.  Reads the files: call it where a
 * read would be allowed.  Returns PYDB_OK, or PYDB_EINVAL when db is
 * NULL.  Thread-safe as pydb_read(). */
int pydb_refresh(pydb_db *db, pydb_error *err);

/* What pydb_info_get() reports: the control record
 * (docs/isis-formats.md §2.1) and the layout detected from the files
 * (§2.5). */
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
    const char *mst_path;/* owned by db, valid until pydb_close()          */
    const char *xrf_path;
    const char *log_pending; /* "" or, for a read-only handle whose open
                            could not apply the write-ahead log (a full
                            disk: ENOSPC), why: the reads show the files'
                            last applied commit, without the logged one  */
} pydb_info;
/* Fill *out: the control-record values of the latest committed state
 * (group 3b; no file I/O, cannot fail), the sizes the handle knows.
 * Thread-safe. */
void pydb_info_get(pydb_info *out, const pydb_db *db);

/* Highest MFN ever assigned (NXTMFN - 1) in the latest committed state;
 * 0 for an empty database.  No file I/O (see pydb_refresh()).
 * Thread-safe. */
int32_t pydb_max_mfn(const pydb_db *db);

/* XRF entry states, docs/isis-formats.md §3.2. */
enum pydb_xrf_state {
    PYDB_XRF_UNUSED = 0,     /* value 0: never created                     */
    PYDB_XRF_ACTIVE = 1,     /* positive pointer                           */
    PYDB_XRF_LDELETED = 2,   /* negated pointer: logically deleted         */
    PYDB_XRF_PDELETED = 3    /* offset 0 negated: physically gone */
};

typedef struct pydb_xrf_entry {
    int32_t raw;       /* the stored 32-bit value                          */
    int state;         /* enum pydb_xrf_state                              */
    int flags;         /* PYDB_FLAG_* below                                */
    int64_t offset;    /* byte offset of the record in the .mst, or -1     */
} pydb_xrf_entry;
/* pydb_xrf_entry.flags and pydb_record.flags: */
#define PYDB_FLAG_PENDING 0x1  /* XRF 0x200: inverted file not yet updated */
#define PYDB_FLAG_NEW     0x2  /* XRF 0x400: new record, not yet inverted  */

/* Decode the XRF entry of `mfn` (1..max MFN) into *out.  Errors:
 * PYDB_ENOTFOUND (mfn out of range), PYDB_ECORRUPT (the entry points
 * outside the master file), PYDB_EIO. */
int pydb_xrf_get(pydb_xrf_entry *out, pydb_db *db, int32_t mfn,
                 pydb_error *err);

/* One field of a record: its tag and a view of its value inside the
 * record's buffer (valid until the record is freed or reused). */
typedef struct pydb_field {
    uint32_t tag;      /* 1..65535 (0 is stored as found)                  */
    uint32_t len;      /* bytes                                            */
    const uint8_t *value;
} pydb_field;

/* A record version read from the master file.  One allocation holds the
 * struct, the raw record bytes and the field array; pydb_record_free()
 * frees it. */
typedef struct pydb_record {
    int32_t mfn;         /* 1-based                                        */
    int status;          /* leader STATUS: 0 active, 1 logically deleted   */
    int deleted;         /* 1 if the XRF pointer is negated
                            (docs/isis-formats.md §3.2)                    */
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
 * Read the version of record `mfn` of the latest committed state (group
 * 3b: never a version of a commit still being applied).  *rec may be NULL (a new
 * block is allocated) or a record from an earlier call, which is reused
 * (grown if needed, cut to size when it is more than twice what the
 * record needs): a reading loop allocates once.  *rec belongs to
 * the caller: pydb_record_free() it (also after a failure, when it was
 * passed in non-NULL).  Logically deleted records are returned with
 * deleted = 1.  Errors: PYDB_ENOTFOUND (out of range, never created or
 * physically deleted), PYDB_ECORRUPT, PYDB_EIO, PYDB_ENOMEM.
 */
int pydb_read(pydb_record **rec, pydb_db *db, int32_t mfn, pydb_error *err);

/*
 * Like pydb_read(), but only if it cannot wait for the disk: every byte it
 * needs must come from the page cache without waiting (pread mode:
 * preadv2(2) with RWF_NOWAIT; mmap mode: pages the handle knows to be
 * resident, from a mincore(2) of their 1 MiB chunk at most 100 ms ago or
 * an earlier copy, so a page evicted since may still fault; direct mode:
 * never) and, in mutex mode, the mutex must be free.  Otherwise it returns PYDB_EWOULDBLOCK (no detail set)
 * and the caller uses pydb_read().  The binding calls it with the GIL
 * held, so that cache hits cost no GIL hand-off (docs/conventions.md, GIL
 * rule 6).  Other errors and ownership as pydb_read().
 */
int pydb_read_nowait(pydb_record **rec, pydb_db *db, int32_t mfn,
                     pydb_error *err);

/* Read the record version stored at byte `offset` of the .mst (a back
 * version, from pydb_record.back_offset); its leader MFN must be `mfn`.
 * deleted is set from the version's STATUS, flags is 0.  Ownership as
 * pydb_read().  Errors: PYDB_ECORRUPT (no valid version of `mfn` there),
 * PYDB_EIO, PYDB_ENOMEM. */
int pydb_read_at(pydb_record **rec, pydb_db *db, int32_t mfn, int64_t offset,
                 pydb_error *err);

/* The handle's file sequence: it changes when the handle moves to the
 * files a compaction put in place, where the offsets of versions read
 * before name other bytes.  Taken before and after reads that follow
 * such offsets (pydb_read_at of a back pointer): unchanged, they read
 * one master file.  No I/O. */
uint64_t pydb_files_sequence(const pydb_db *db);

/* Free a record from pydb_read*() or pydb_record_make() (NULL: nothing). */
void pydb_record_free(pydb_record *rec);

/* A new record block (*out, the caller's: pydb_record_free() it) as
 * pydb_read() would return it: the header of `head` (mfn, status,
 * deleted, flags, offset, back_offset, mfrl, locked; its fields,
 * nfields, data_len and capacity are not read) and a copy of the `n`
 * fields `fields` (tags, lengths, value bytes) in their order.  For a
 * record rebuilt from its parts (the binding's unpickling).  Errors:
 * PYDB_ENOMEM. */
int pydb_record_make(pydb_record **out, const pydb_record *head,
                     const pydb_field *fields, uint32_t n, pydb_error *err);

/* Counts of XRF states over MFN 1..max, from pydb_count(). */
typedef struct pydb_counts {
    int32_t active, ldeleted, pdeleted, unused;
    int32_t flag_new, flag_pending;
} pydb_counts;
/* Count the XRF states over MFN 1..max (a scan of the XRF; refreshes the
 * handle first).  Errors: PYDB_ECORRUPT (a damaged entry), PYDB_EIO,
 * PYDB_ENOMEM. */
int pydb_count(pydb_counts *out, pydb_db *db, pydb_error *err);

/*
 * List the MFNs >= `from` whose records are active (and logically
 * deleted too if `include_deleted`), in MFN order, into mfns[cap]; *n
 * receives how many were stored, *next the MFN to continue from (max MFN
 * + 1 at the end).  A listing from MFN 1 refreshes the handle first.
 * Errors: PYDB_EINVAL (cap 0), PYDB_ECORRUPT, PYDB_EIO, PYDB_ENOMEM.
 */
int pydb_list_mfns(int32_t *mfns, size_t cap, size_t *n, int32_t *next,
                   pydb_db *db, int32_t from, int include_deleted,
                   pydb_error *err);

/* Drop the database files from the page cache (posix_fadvise DONTNEED,
 * and MADV_DONTNEED on the mappings in mmap mode), for cold-cache
 * benchmarks.  Best effort; PYDB_EIO when the advice is refused. */
int pydb_drop_cache(pydb_db *db, pydb_error *err);

/* ======================================================================
 * 3b. Snapshots: one committed state, pinned
 *
 * Every read of group 3 sees one committed state: the latest commit that
 * was published when the call started.  Writers publish each commit in
 * the commit header <base>.shm beside the .mst (its format: csrc/shm.h;
 * the design: docs/architecture.md, "Committed state"), a small
 * memory-mapped file that readers in every process copy without locks; a record
 * version a later, unpublished commit wrote is never returned (the read
 * follows the back pointers to the version that commit replaced).
 *
 * A snapshot pins one commit for many reads: records, counts, listings,
 * the native index (pydb_snapshot_index) and the validator
 * (pydb_snapshot_check) all answer as of that commit while writers in
 * this and other processes go on committing.  It is registered in the
 * reader table of the commit header, so that nothing it may still read
 * (a segment file of the index, a record version) is removed before it
 * is released; the entry of a process that dies is found and cleared by
 * the next writer that looks.
 *
 * How a snapshot finds its versions: the master file is append-only, so
 * every version a commit wrote lies at or after the end of the records
 * of the commit before it (NXTMFB/NXTMFP).  A snapshot keeps that end
 * (pydb_snapshot_info.mst_end); a version at or past it is newer than
 * the snapshot, and its back pointer (MFBWB/MFBWP) leads to the version
 * the snapshot saw.  XRF flags (PYDB_FLAG_*) are those of the latest XRF
 * entry: the flags of older commits are not kept.
 *
 * Without a usable commit header (read-only media, no pydb writer yet,
 * a file that is damaged or from a future version: never trusted, or
 * one that disagrees with the control record while no pydb writer is
 * applying a commit: another program wrote the files) the committed
 * state is read from the control record, as other CDS/ISIS programs do
 * ("files mode"), and snapshots are registered only when the header's
 * reader table is usable (pydb_snapshot_info.registered).
 *
 * Threads: a snapshot may be read by any number of threads at once;
 * pydb_snapshot_release() must not run concurrently with a read on it,
 * and every snapshot must be released before pydb_close() of its
 * database.  fork(): a child may read through the snapshots it
 * inherited while its parent holds them (the registration is the
 * parent's); releasing them in the child leaves the parent's slots
 * alone.  As with LMDB, fork only when no thread is inside a pydb call.
 * ====================================================================== */
typedef struct pydb_snapshot pydb_snapshot;   /* opaque */

/* Pin the latest published commit of `db`.  Costs a copy of the commit
 * header and one claimed slot of the reader table (no file I/O when the
 * header is usable).  *out: pydb_snapshot_release().  Errors:
 * PYDB_ELOCKED (the reader table is full of live readers), PYDB_ENOMEM,
 * PYDB_EINVAL (db NULL), and those of pydb_refresh() without a header. */
int pydb_snapshot_take(pydb_snapshot **out, pydb_db *db, pydb_error *err);
/* pydb_snapshot_take() after pydb_refresh(), with one re-read of the
 * control record in either mode (a take without a header re-reads it
 * anyway): the start of a scan, which must see the commits of programs
 * that do not know the header.  Returns and errors: pydb_snapshot_take's. */
int pydb_snapshot_take_fresh(pydb_snapshot **out, pydb_db *db,
                             pydb_error *err);
/* Release the snapshot and its reader-table slot (NULL: nothing). */
void pydb_snapshot_release(pydb_snapshot *snap);

/* What a snapshot pins. */
typedef struct pydb_snapshot_info {
    uint64_t commit;     /* commit number from the header; 0 without one  */
    int32_t next_mfn;    /* NXTMFN of that commit                          */
    int32_t reccnt;      /* RECCNT of that commit                          */
    int64_t mst_end;     /* end of its records (NXTMFB/NXTMFP), bytes      */
    int64_t mst_size;    /* .mst bytes it may read                         */
    int64_t xrf_size;    /* .xrf bytes it may read                         */
    uint64_t index_gen;  /* native index MANIFEST generation; 0 unknown    */
    int registered;      /* 1 if it holds a reader-table slot              */
} pydb_snapshot_info;
/* Fill *out (no I/O, cannot fail). */
void pydb_snapshot_info_get(pydb_snapshot_info *out,
                            const pydb_snapshot *snap);

/* pydb_read() as of the snapshot: the version of `mfn` that was current
 * at its commit (deleted = 1 if it was logically deleted then).  Errors
 * as pydb_read(); PYDB_ENOTFOUND also for an MFN created after the
 * snapshot; PYDB_ECORRUPT when the version chain does not lead back to
 * a version the snapshot can see. */
int pydb_snapshot_read(pydb_record **rec, const pydb_snapshot *snap,
                       int32_t mfn, pydb_error *err);
/* pydb_snapshot_read() only if it cannot wait for the disk (the rules of
 * pydb_read_nowait(); also PYDB_EWOULDBLOCK when the record changed after
 * the snapshot: following its version chain is left to the blocking
 * call).  The binding calls it with the GIL held. */
int pydb_snapshot_read_nowait(pydb_record **rec, const pydb_snapshot *snap,
                              int32_t mfn, pydb_error *err);
/* pydb_xrf_get() as of the snapshot (state and offset of the version
 * the snapshot sees; raw and flags from the latest entry). */
int pydb_snapshot_xrf_get(pydb_xrf_entry *out, const pydb_snapshot *snap,
                          int32_t mfn, pydb_error *err);
/* pydb_count() as of the snapshot. */
int pydb_snapshot_count(pydb_counts *out, const pydb_snapshot *snap,
                        pydb_error *err);
/* pydb_list_mfns() as of the snapshot (*next ends at its NXTMFN). */
int pydb_snapshot_list_mfns(int32_t *mfns, size_t cap, size_t *n,
                            int32_t *next, const pydb_snapshot *snap,
                            int32_t from, int include_deleted,
                            pydb_error *err);

/* What pydb_snapshot_list() found for one MFN, for
 * pydb_snapshot_read_listed(): the MFN, and where the snapshot's version
 * of it lies as the listing resolved it.  The other members are the
 * core's; a caller only reads `mfn`. */
typedef struct pydb_listed {
    int32_t mfn;
    int state;         /* PYDB_XRF_ACTIVE or PYDB_XRF_LDELETED            */
    int flags;         /* PYDB_FLAG_* of the entry                         */
    int64_t offset;    /* the version's offset, or -1: read it by MFN      */
    uint64_t files;    /* the file pair the offset is in                   */
} pydb_listed;

/* pydb_snapshot_list_mfns(), each MFN with its XRF entry as the listing
 * read and resolved it, so that pydb_snapshot_read_listed() need not read
 * the entry again (an iteration reads each XRF entry once). */
int pydb_snapshot_list(pydb_listed *out, size_t cap, size_t *n,
                       int32_t *next, const pydb_snapshot *snap,
                       int32_t from, int include_deleted, pydb_error *err);
/* pydb_snapshot_read() of l->mfn, l from pydb_snapshot_list() of the same
 * snapshot: the version at the listed offset, or, where the files were
 * switched (a compaction) since the listing or during the read, or the
 * listing left the version to the read (offset -1), pydb_snapshot_read()
 * itself.  Same results, errors and *rec rules as pydb_snapshot_read(). */
int pydb_snapshot_read_listed(pydb_record **rec, const pydb_snapshot *snap,
                              const pydb_listed *l, pydb_error *err);

/* ======================================================================
 * 4. Bulk builder: a new database, records appended in MFN order
 *
 * Writes the .mst sequentially and the XRF and control record at the end,
 * without a log: for imports and conversions.  The files are not valid
 * until pydb_builder_finish() returns PYDB_OK.
 *
 * Threads: one builder is used by one thread at a time.
 * ====================================================================== */

typedef struct pydb_builder pydb_builder;   /* opaque */

/*
 * Create a new, empty database at `path` (base name; ".mst"/".xrf" are
 * added) with the given layout (enum pydb_layout) and MSTXL shift (0..6).
 * Records are appended with pydb_builder_add() and the control record and
 * XRF are written by pydb_builder_finish().  Placement follows
 * docs/isis-formats.md §2.3 (never-split rule, 2-byte or 2^MSTXL
 * alignment, even MFRL padded with blanks).  *out belongs to the caller:
 * pydb_builder_free() it.  Errors: PYDB_EIO (sys_errno EEXIST if a file
 * exists; other OS failures), PYDB_EINVAL (bad layout, MSTXL or path),
 * PYDB_ENOMEM.
 */
int pydb_builder_open(pydb_builder **out, const char *path, int layout,
                      int mstxl, pydb_error *err);
/* Append one record (MFN = previous + 1) with fields[nfields] (copied).
 * Errors: PYDB_ETOOBIG (above the layout's limit, ISIS: 32767 bytes),
 * PYDB_EINVAL (builder finished), PYDB_EIO, PYDB_ENOMEM. */
int pydb_builder_add(pydb_builder *b, const pydb_field *fields,
                     uint32_t nfields, pydb_error *err);
/* Leave the next MFN out of the master file: its XRF entry says
 * "physically deleted" (-2048, docs/isis-formats.md §3.2), as after a
 * WinISIS reorganisation.  Used by ISO/JSON Lines import to keep MFN
 * gaps.  Errors: PYDB_EINVAL (builder finished), PYDB_ENOMEM. */
int pydb_builder_skip(pydb_builder *b, pydb_error *err);
/* Mark the record just added logically deleted: STATUS = 1 in its leader
 * and its XRF pointer negated (docs/isis-formats.md §2.4).  PYDB_EINVAL
 * if the last MFN was not added by pydb_builder_add() (or the builder is
 * finished); PYDB_EIO. */
int pydb_builder_delete_last(pydb_builder *b, pydb_error *err);
/* Write the XRF and the control record, and fsync the files and their
 * directory when `sync` is nonzero.  Call it once.  Errors: PYDB_EIO,
 * PYDB_ENOMEM. */
int pydb_builder_finish(pydb_builder *b, int sync, pydb_error *err);
/* Free the builder (NULL: nothing); if it was not finished, the partial
 * files are removed. */
void pydb_builder_free(pydb_builder *b);

/* What pydb_mkxrf() found and wrote. */
typedef struct pydb_mkxrf_report {
    int layout;              /* enum pydb_layout, given or detected         */
    int mstxl;               /* the control record's                        */
    int32_t next_mfn;        /* the control record's NXTMFN: the XRF has
                                entries for MFN 1..next_mfn-1              */
    int64_t ctl_end;         /* the end of records the control record
                                names (NXTMFB/NXTMFP), bytes              */
    int64_t end;             /* where the scan ended: ctl_end, or the
                                file's end where the file is shorter or
                                past_end_taken > 0                        */
    int64_t past_end;        /* versions found after the end of records
                                the control record names (an append never
                                committed, or a writer that left the
                                control record behind): not taken         */
    int64_t past_end_taken;  /* with `mend`: versions after that end the
                                old XRF points at, taken (mended_end)     */
    int64_t versions;        /* record versions found (every version of
                                an MFN counts)                             */
    int64_t version_bytes;   /* bytes in them                               */
    int32_t active, deleted; /* MFNs whose XRF entry names a version: of
                                STATUS 0, of STATUS 1 (pointer negated)   */
    int32_t pending;         /* of them, with the "update pending" flag    */
    int32_t missing;         /* MFNs below NXTMFN with no version found:
                                "physically deleted"                       */
    int64_t mended_end;      /* with `mend`: the end of records written
                                into the control record of a master file
                                shorter than ctl_end, or after the
                                versions past it; else 0                   */
} pydb_mkxrf_report;

/*
 * Make the cross-reference file `xrf_path` anew for the master file
 * `mst_path`, from a sequential scan of its record versions: CISIS
 * mkxrf's method (BIREME `mkxrf.c`, for a master file whose XRF is lost
 * or damaged; docs/isis-formats.md §3.3).  An existing xrf_path is first
 * copied to `bak_path` (created, fsynced; NULL: refused, PYDB_EIO with
 * sys_errno EEXIST; so is an existing bak_path), then written over in
 * place and fsynced; a missing one is created (the master file's mode).
 * The database is had to itself meanwhile: the pydb writer lock
 * (PYDB_ELOCKED when a writer holds it; a log with commits to apply is
 * PYDB_EUNSUPPORTED), a lock on the XRF (another mkxrf: PYDB_ELOCKED),
 * and a write lease on it (Linux): PYDB_ELOCKED while this or another
 * process has the XRF open -- a pydb handle, WinISIS -- and, held, opens
 * of it wait until the new XRF is in.  Where the lease or the writer
 * lock cannot be had (another owner's files, NFS) it is
 * PYDB_EUNSUPPORTED unless `force` (the caller vouches that nobody has
 * the database open).  The scan reads from the end of the control
 * record to the end of records it names (NXTMFB/NXTMFP), at each 2-byte
 * (2^MSTXL) step taking a version whose leader and directory are
 * plausible (an MFN below NXTMFN, MFRL, BASE, NVF, STATUS and every field
 * inside the record) and going on after it.  An MFN's entry names its last
 * version in file order, negated for STATUS 1, flagged "update pending"
 * where that version has a back pointer (CDS/ISIS clears it when it
 * inverts the record); an MFN with none is physically deleted; the "new"
 * flag is not known and not set.  `layout`: enum pydb_layout, or -1 to
 * take the one under which the first 4 MiB hold the most bytes of
 * versions.  The master file is only read, but with `mend`: where it is
 * shorter than the end of records its control record names (cut short),
 * NXTMFB/NXTMFP are set to the end of the last whole version found
 * (rounded up to 2^MSTXL, the file grown by zeros to it), after the XRF,
 * and fsynced: pydb opens the database again (CISIS ctlmfn mends it
 * so); out->mended_end.  With `mend`, the versions after the end of
 * records that the old XRF points at are taken too (a damaged
 * NXTMFB/NXTMFP; out->end is then the file's size) and the end of
 * records set after the last of them.  A scan that found no whole version there (a
 * wrong layout) is PYDB_ECORRUPT for `mend`, before anything is written.
 * *out is filled on success.
 * Errors also: PYDB_EIO, PYDB_ECORRUPT (an unusable control record:
 * NXTMFN, NXTMFB/NXTMFP, MSTXL out of range), PYDB_EINVAL (a layout out
 * of range; a master file that is not a regular file), PYDB_ENOMEM.
 * Thread-safe: no state.
 */
int pydb_mkxrf(pydb_mkxrf_report *out, const char *mst_path,
               const char *xrf_path, const char *bak_path, int layout,
               int force, int mend, pydb_error *err);

/* The MFRL in bytes (even, a multiple of 2^MSTXL) that a record with
 * fields[nfields] takes in `layout` with shift `mstxl`
 * (docs/isis-formats.md §2.2-2.3), into *mfrl: the check that
 * pydb_builder_add() and pydb_txn_append() make, for a caller that
 * refuses a record before it hands over a batch.  `mfn` only names the
 * record in the message.  Errors: PYDB_ETOOBIG (an ISIS layout and more
 * than 32767 bytes, more than 65535 fields, or above the FFI limit),
 * PYDB_EINVAL (a layout or MSTXL out of range, a tag above 65535).
 * Thread-safe: no state. */
int pydb_record_size(int64_t *mfrl, int layout, int mstxl, int32_t mfn,
                     const pydb_field *fields, uint32_t nfields,
                     pydb_error *err);

/* ======================================================================
 * 5. Transactions and the commit hook
 *
 * A database opened with PYDB_OPEN_WRITE (or made by pydb_create()) may
 * have one transaction at a time (per process: a mutex; across
 * processes: an fcntl lock).  Readers never wait for the writer.
 * Recovery runs in pydb_open() and, if another writer held the lock
 * then, at the next pydb_txn_begin().
 *
 * What readers observe:
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
 *     later commits when it re-reads the control record: pydb_refresh(),
 *     and by itself when asked for an MFN beyond the highest it knows and
 *     at pydb_count()/listings from MFN 1.  It too sees every record
 *     whole, but may see a multi-record commit partly applied while the
 *     committing process is applying it, and, if that process dies then,
 *     until the next writer (or an open) runs recovery.
 *   - WinISIS/CISIS know nothing of the log: after recovery the .mst/.xrf
 *     alone are consistent.
 *
 * Threads: a transaction belongs to the thread that began it; only that
 * thread calls pydb_txn_* on it.  pydb_set_commit_hook() must not run
 * during a transaction.
 * ====================================================================== */

/*
 * Create a new, empty database `path` (base name; .mst/.xrf are added)
 * with the given layout and MSTXL (0..6), and open it for writing with
 * `opt` (io, lock; flags gets PYDB_OPEN_WRITE and the layout added; NULL:
 * defaults).  *out as pydb_open().  Errors: PYDB_EIO (sys_errno EEXIST if
 * either file exists; other OS failures), PYDB_EINVAL, PYDB_ENOMEM, and
 * those of pydb_open().
 */
int pydb_create(pydb_db **out, const char *path, int layout, int mstxl,
                const pydb_options *opt, pydb_error *err);

typedef struct pydb_txn pydb_txn;   /* opaque */

/* Begin a transaction on `db`; waits up to timeout_ms (0 or less: no
 * wait) for the writer lock held by another thread or process -- a step
 * of db's own collector, which holds it briefly, is waited for whatever
 * the timeout -- and runs recovery if a crashed writer left a log.  *out
 * is freed by pydb_txn_commit() or pydb_txn_abort(), whatever their
 * outcome.  Errors: PYDB_ELOCKED (lock not obtained in time, or
 * this thread already has a transaction open on db), PYDB_ECLOSED
 * (pydb_close_begin() was called), PYDB_EREADONLY
 * (read-only handle, or one made read-only by a failed fsync),
 * PYDB_ENEWINDEX (a native index was built since the caller last looked
 * and none is attached: pydb_index_gen_seen; nothing written),
 * PYDB_ECORRUPT, PYDB_EIO, PYDB_ENOMEM. */
int pydb_txn_begin(pydb_txn **out, pydb_db *db, int timeout_ms,
                   pydb_error *err);
/* Append a new record with fields[nfields] (copied); *mfn receives its
 * MFN (NXTMFN at the time).  New records get the XRF flag "new" (0x400,
 * docs/isis-formats.md §3.2).  Errors: PYDB_ETOOBIG (above the layout's
 * limit, ISIS: 32767 bytes; or the MFN range is exhausted), PYDB_EINVAL,
 * PYDB_ENOMEM. */
int pydb_txn_append(int32_t *mfn, pydb_txn *t, const pydb_field *fields,
                    uint32_t nfields, pydb_error *err);
/* Write a new version of record `mfn` (back pointer MFBWB/MFBWP to the
 * version it replaces, docs/isis-formats.md §2.4).  The XRF entry keeps
 * the "new" flag if the record has it (never inverted), else gets "update
 * pending" (0x200).  A logically deleted record stays deleted.  Errors:
 * PYDB_ENOTFOUND (the record does not exist or is physically deleted),
 * PYDB_ETOOBIG, PYDB_ECORRUPT, PYDB_EIO, PYDB_ENOMEM. */
int pydb_txn_update(pydb_txn *t, int32_t mfn, const pydb_field *fields,
                    uint32_t nfields, pydb_error *err);
/* Logical deletion: a new version with leader STATUS 1 and the XRF
 * pointer negated (docs/isis-formats.md §2.4, §3.2); undelete writes a
 * version with STATUS 0 and a positive pointer.  Either is a no-op if the
 * record is already in that state.  Errors as pydb_txn_update(). */
int pydb_txn_delete(pydb_txn *t, int32_t mfn, pydb_error *err);
int pydb_txn_undelete(pydb_txn *t, int32_t mfn, pydb_error *err);
/* Replace the whole content of file `path` atomically as part of the
 * transaction (logged in the write-ahead log, under its name relative to
 * the database's folder, and replayed by recovery whatever the working
 * folder of the process that replays); the data are copied.  When the
 * log keeps the commit's frame (sync=True with a commit header), the
 * bytes go into the spare "<path>.pydb-next", whose name is then swapped
 * with path's: the spare keeps the previous content, and a reader that
 * opened path before the swap may meet it rewritten by a later commit
 * (check what is read); else a new file is renamed over path.  For
 * commit hooks.  Errors: PYDB_EINVAL (no path; a path outside the database's
 * folder and its subfolders, or in a folder that does not exist; data
 * NULL with len > 0), PYDB_ENOMEM. */
int pydb_txn_put_file(pydb_txn *t, const char *path, const void *data,
                      size_t len, pydb_error *err);
/* Make the transaction durable (one fdatasync, of its log frame -- two
 * for 1 MiB of records or more, which go straight into the .mst and are
 * synced first (a direct commit, wal.h); the .mst/.xrf are synced at
 * checkpoints; with PYDB_OPEN_NOSYNC the frame is synced only when the
 * commit writes in place a unit no synced frame holds, and the commit
 * is durable with the next synced frame or checkpoint) and visible; frees t
 * whatever the outcome.  Errors: PYDB_EIO (errno in sys_errno) when a
 * write or fsync fails: a failure before the log is durable leaves the
 * database as it was (and the transaction is not committed); any failed
 * fsync, or a failure while applying the durable log, makes the handle
 * read-only (PYDB_EREADONLY for later transactions) until it is reopened;
 * a transaction whose log was durable then appears (whole) after
 * recovery.  PYDB_ENOMEM; any
 * error of the commit hook's prepare().  On failure err->committed says
 * which of these happened: PYDB_COMMIT_NO (the database is as it was),
 * PYDB_COMMIT_DURABLE (the log was durable: the transaction is committed,
 * and the message says so), PYDB_COMMIT_UNKNOWN (the log's fsync failed).
 * A caller that retries only after PYDB_COMMIT_NO never commits twice. */
int pydb_txn_commit(pydb_txn *t, pydb_error *err);
/* Discard the transaction and free t (NULL: nothing). */
void pydb_txn_abort(pydb_txn *t);

/* One change committed in its own transaction -- as far as the caller can
 * tell: pydb_write_one() calls of other threads on the same handle that
 * wait meanwhile share one transaction, and so one fdatasync (group
 * commit, csrc/group.c).  op is one of: */
#define PYDB_WRITE_APPEND 0    /* append fields[nfields]; *mfn receives
                                  the new MFN                              */
#define PYDB_WRITE_UPDATE 1    /* pydb_txn_update(*mfn, fields[nfields])  */
#define PYDB_WRITE_DELETE 2    /* pydb_txn_delete(*mfn); fields ignored   */
#define PYDB_WRITE_UNDELETE 3  /* pydb_txn_undelete(*mfn); fields ignored */
/* Waits up to timeout_ms (0 or less: no wait) for its turn and the writer
 * lock (once in a group whose commit is under way, for that commit).
 * Returns when the change is committed (durable unless
 * PYDB_OPEN_NOSYNC), or with the error of its change or of the commit
 * (err->committed as for pydb_txn_commit(); other requests' failures are
 * not this one's).  fields must stay valid until it returns.  Errors:
 * those of pydb_txn_begin(), of the change (pydb_txn_append(),
 * pydb_txn_update(), ...) and of pydb_txn_commit(); PYDB_EINVAL (op). */
int pydb_write_one(int32_t *mfn, pydb_db *db, int op,
                   const pydb_field *fields, uint32_t nfields, int timeout_ms,
                   pydb_error *err);

/* One record change of a transaction, as the commit hook sees it
 * (pointers valid during the hook call). */
typedef struct pydb_change {
    int32_t mfn;
    const pydb_record *before;  /* version replaced/deleted, or NULL       */
    const pydb_field *after;    /* new fields, or NULL for a deletion      */
    uint32_t nafter;
    int deleted_after;          /* 1 if the record is logically deleted now */
    int appended;               /* 1 if the transaction appended the MFN:
                                   new, no version of it is older         */
} pydb_change;

/* A commit hook lets another structure (the native index) join every
 * transaction: prepare() runs before the commit point and may add whole
 * files to the transaction with pydb_txn_put_file(); it must leave
 * nothing visible, and reports failure with a PYDB_E* code and
 * pydb_error_set().  publish() runs after the commit point (no failure
 * allowed: it only swaps in-memory state); abort() when the commit fails
 * before its log can be durable (it removes what prepare wrote).  When a
 * commit fails once its log may be durable (a failed fsync of the log, a
 * failure while applying it) neither is called then: recovery may put
 * the prepared files in place, so they must stay.  After a failed fsync
 * the handle is read-only until reopened, and the hook's owner drops its
 * pending state (without deleting files) when it is closed; after a
 * failed write, the handle's next pydb_txn_begin() replays the log and,
 * once that succeeds, calls publish(ctx, NULL) (t is NULL there) on the
 * thread that began.  Otherwise the three run on the committing thread. */
struct pydb_index_stat;   /* group 9 */
struct pydb_gc_report;    /* group 9 */
struct pydb_gc_step;      /* group 9 */
typedef struct pydb_commit_hook {
    int (*prepare)(void *ctx, pydb_txn *t, const pydb_change *changes,
                   size_t n, pydb_error *err);
    void (*publish)(void *ctx, pydb_txn *t);
    void (*abort)(void *ctx, pydb_txn *t);
    void *ctx;                  /* owned by the hook's installer           */
    /* Garbage of the hooked structure (group 9), both optional (NULL):
     * collect() does at most how->budget units of collection work (a
     * unit: one posting list merged, one segment file removed) and sets
     * *more when collectable garbage remains, adding what it removed to
     * *rep (postings, segments); how->idle is 1 when no commit came for a
     * while (collect everything now) and 0 while commits go on (collect
     * what keeps the structure's cost bounded); it may take the writer
     * lock with pydb_txn_begin(timeout how->lock_ms) for a bounded step
     * and must leave the structure readable at every point (readers
     * never wait for it).
     * garbage() adds the structure's figures to *out (pydb_stat.index).
     * Both run on the collector's thread or a cooperating reader's,
     * never on two threads at once for one handle. */
    int (*collect)(void *ctx, pydb_db *db, const struct pydb_gc_step *how,
                   int *more, struct pydb_gc_report *rep, pydb_error *err);
    int (*garbage)(void *ctx, pydb_db *db, struct pydb_index_stat *out,
                   pydb_error *err);
} pydb_commit_hook;
/* Install `hook` (copied; NULL or prepare == NULL: remove it) on `db`:
 * one hook per handle.  PYDB_EINVAL during a transaction. */
int pydb_set_commit_hook(pydb_db *db, const pydb_commit_hook *hook,
                         pydb_error *err);

/* ======================================================================
 * 6. Index and search
 *
 * One interface over every inverted index: the native index (group 7),
 * the ISIS inverted files (docs/isis-formats.md §4-6, read-only) and an
 * in-memory index.  pydb_search() evaluates the ISIS search language on
 * any of them.
 *
 * Threads: any number of threads may read one index at once
 * (pydb_index_terms, _postings, _key, pydb_search), also while a commit
 * on an attached database updates a native index.  pydb_index_close()
 * and pydb_memindex_add() must not race with any other call on the
 * index.
 * ====================================================================== */
typedef struct pydb_posting {
    int32_t mfn;     /* 1-based                                            */
    uint32_t tag;    /* FST line ID (docs/isis-formats.md §5.1)            */
    uint32_t occ;    /* 1-based FST output line ("occurrence")             */
    uint32_t cnt;    /* 1-based term position within the line              */
} pydb_posting;

/* A growable array of postings, sorted by (mfn, tag, occ, cnt).  Start
 * from {0}; the caller owns v and frees it with pydb_postings_free(),
 * which trusts cap: v is a malloc'ed block of cap postings or more. */
typedef struct pydb_postings {
    pydb_posting *v;
    size_t n, cap;
} pydb_postings;
/* Gives v back (kept for this thread's next list, or freed: index.c);
 * zeroes the struct. */
void pydb_postings_free(pydb_postings *p);

/* Built-in key tables: how a key is made from field text, byte by byte
 * (docs/isis-formats.md §5.3; a database's ISISUC.TAB/ISISAC.TAB replace
 * the 8-bit ones).  The choice is stored with a native index. */
/* Key modes (docs/isis-formats.md §5.3), stored with a native index.
 * UNICODE (pydb's own rules, 0: what an index built before modes has):
 * stop words apply to every technique 4/8 word, the length limit is
 * the caller's.  CISIS (what CISIS-built indexes hold): the word
 * characters of the CISIS installation the key table stands for (ABCD
 * for Windows: digits and '_' are word characters); a bulk build takes
 * the key length of the database's shipped inverted file (pydb.native).
 * Stop words apply to technique 4 and 8 words alike in both modes, as
 * in CISIS (cifst.c, fst_inter). */
enum pydb_keymode {
    PYDB_KEYMODE_UNICODE = 0,
    PYDB_KEYMODE_CISIS = 1
};

enum pydb_keys {
    PYDB_KEYS_DOS = 0,        /* CDS/ISIS for DOS, code pages 437/850:
                                 a-z and 128..165 folded to capitals   */
    PYDB_KEYS_ANSI = 1,       /* WinISIS / ABCD for Windows, Latin-1 and
                                 cp1252: a-z and 192..255 folded        */
    PYDB_KEYS_ASCII = 2,      /* a-z upper-cased only; bytes 128..255
                                 kept as stored, word characters        */
    PYDB_KEYS_UNICODE = 3     /* UTF-8: Unicode case and accent folding,
                                 as ABCD's UTF-8 CISIS keys show        */
};

enum pydb_index_kind {
    PYDB_INDEX_NATIVE = 0,        /* pydb's own segments                    */
    PYDB_INDEX_ISIS_CLASSIC = 1,  /* .cnt/.n0x/.l0x/.ifp                   */
    PYDB_INDEX_ISIS_LIND = 2,     /* .cnt/.n0x/.ly0x/.iyp: no TAG/OCC      */
    PYDB_INDEX_MEMORY = 3         /* in-memory (tests, recent commits)     */
};

typedef struct pydb_index pydb_index;   /* opaque; pydb_index_close() */

/* The enum pydb_index_kind of ix.  No I/O. */
int pydb_index_kind(const pydb_index *ix);
/* What the postings of ix carry (LIND: MFN, maybe CNT only): */
int pydb_index_caps(const pydb_index *ix);
#define PYDB_POSTING_TAG 0x1
#define PYDB_POSTING_OCC 0x2
#define PYDB_POSTING_CNT 0x4
/* Close the index and free it (NULL: nothing). */
void pydb_index_close(pydb_index *ix);

/* Called once per key in ascending byte order; return nonzero to stop
 * (the enumeration then returns PYDB_OK). */
typedef int (*pydb_term_fn)(void *ctx, const uint8_t *key, size_t len,
                            uint64_t count);

/* Enumerate the keys that start with `prefix` and are >= `start` (NULL:
 * from the first), with their posting counts.  A range scan, no cap.
 * Errors: PYDB_ECORRUPT, PYDB_EIO, PYDB_ENOMEM. */
int pydb_index_terms(pydb_index *ix, const uint8_t *prefix, size_t prefix_len,
                     const uint8_t *start, size_t start_len, pydb_term_fn fn,
                     void *ctx, pydb_error *err);
/* Append the postings of exactly `key` (already in key form) to *out
 * (nothing if the key is absent).  Errors: PYDB_ECORRUPT, PYDB_EIO,
 * PYDB_ENOMEM (*out keeps what it had). */
int pydb_index_postings(pydb_postings *out, pydb_index *ix,
                        const uint8_t *key, size_t len, pydb_error *err);
/* Bring a search term into the index's key form (case table / Unicode
 * folding, truncation) into the caller's out[cap]; *out_len receives the
 * length.  Pure computation.  PYDB_EINVAL if cap is too small
 * (cap >= 4 * len + 16 always suffices). */
int pydb_index_key(uint8_t *out, size_t cap, size_t *out_len, pydb_index *ix,
                   const uint8_t *term, size_t len, pydb_error *err);
/* The key a search term looks up, into out[cap] (*out_len its length):
 * the term itself, trailing blanks trimmed, when the index holds exactly
 * that key (as stored, before any normalisation: mixed-case keys of
 * technique 0 lines, keys made by another table), else its key form
 * (pydb_index_key).  Reads the index (one range probe): call it without
 * holding a lock others wait on.  Errors: those of pydb_index_key and of
 * pydb_index_terms. */
int pydb_index_lookup_key(uint8_t *out, size_t cap, size_t *out_len,
                          pydb_index *ix, const uint8_t *term, size_t len,
                          pydb_error *err);

/* Open the ISIS inverted file of the database `path` (base name, or any
 * of its files): .cnt + .n01/.n02 with the classic .l01/.l02/.ifp or the
 * LIND .ly1/.ly2/.iyp set (docs/isis-formats.md §4), extensions in any
 * case.  Where both sets are present the one that validates against
 * .cnt/.n0x is used (§4.8).  Search terms are brought into key form
 * (pydb_index_key) by the ISISUC.TAB/ISISAC.TAB beside the .cnt when
 * present, else by the built-in table `keys` (enum pydb_keys: the one
 * the database's encoding implies), cut to LE2 bytes.
 * *out: pydb_index_close().  Errors: PYDB_EIO
 * with sys_errno ENOENT (no .cnt: the database has no inverted file),
 * PYDB_ECORRUPT (file, offset, reason; also a damaged .tab),
 * PYDB_ENOMEM, PYDB_EINVAL (empty path, unknown `keys`). */
int pydb_isis_index_open(pydb_index **out, const char *path, int keys,
                         pydb_error *err);

/* What pydb_isis_index_describe() reports about an open ISIS index.  The
 * strings belong to the index (valid until it is closed). */
typedef struct pydb_isis_index_info {
    int kind;            /* PYDB_INDEX_ISIS_CLASSIC or PYDB_INDEX_ISIS_LIND */
    int le1, le2;        /* key lengths of tree 1 / tree 2
                            (docs/isis-formats.md §4.1)                    */
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
    int keys;            /* the built-in key table (enum pydb_keys)        */
    int tables;          /* bit 1: the ISISUC.TAB beside the .cnt replaced
                            its case map, bit 2: ISISAC.TAB its word
                            characters                                     */
} pydb_isis_index_info;
/* Describe an index opened by pydb_isis_index_open() into *out (no I/O).
 * PYDB_EINVAL (err not filled) for any other kind of index. */
int pydb_isis_index_describe(pydb_isis_index_info *out,
                             const pydb_index *ix);

/* An in-memory index (kind PYDB_INDEX_MEMORY) whose postings carry the
 * fields in `caps` (PYDB_POSTING_* bits; the others are stored as 0).
 * Its key form is the term with ASCII a-z upper-cased, nothing else.
 * *out: pydb_index_close().  Errors: PYDB_EINVAL (bad caps),
 * PYDB_ENOMEM. */
int pydb_memindex_new(pydb_index **out, int caps, pydb_error *err);
/* Add p[n] (copied; MFN >= 1) to `key` (taken as given, in key form);
 * creates the key if absent (not if n = 0).  Keys added in ascending
 * byte order are appended in O(1); others are inserted in place.  Must
 * not run concurrently with any other call on ix.  Errors: PYDB_EINVAL
 * (not an in-memory index, MFN < 1), PYDB_ENOMEM. */
int pydb_memindex_add(pydb_index *ix, const uint8_t *key, size_t len,
                      const pydb_posting *p, size_t n, pydb_error *err);

/* Evaluate the search expression expr[len] (docs/isis-formats.md §6; the
 * language and the postings each operator yields: csrc/search_parse.c)
 * against `ix`.  A native index is evaluated on one pinned segment list
 * (one committed state).
 *
 * The deleted-record rule is decided here: with `db` (the database the
 * index belongs to; may be NULL), the MFNs whose XRF entry is not active
 * (logically or physically deleted, never created, above the highest
 * MFN) are dropped, except for a native index (PYDB_INDEX_NATIVE): its
 * postings change in the same transaction as the records (deleted records
 * have none), and filtering by the XRF, which a commit changes at another
 * moment than it publishes the index, could mix two states.  A caller
 * passes its handles and never decides this itself.
 *
 * *mfns (malloc'ed: free() it; NULL on failure) gets the sorted, distinct
 * MFNs, *n how many.  Errors: PYDB_ESYNTAX (err->offset = 0-based byte
 * position of the fault; also above PYDB_SEARCH_MAX_LEN/_DEPTH),
 * PYDB_EUNSUPPORTED (an operator needs posting fields the index lacks:
 * LIND), PYDB_EINVAL (no index), PYDB_ECORRUPT, PYDB_EIO (index or XRF),
 * PYDB_ENOMEM.  Thread-safe on shared ix and db. */
int pydb_search(int32_t **mfns, size_t *n, pydb_index *ix, pydb_db *db,
                const char *expr, size_t len, pydb_error *err);
/* pydb_search() only if it cannot wait: the index is in memory or a
 * native index whose segments are all known to be in the page cache (a
 * mincore(2) at most 100 ms ago), no file has to be read to follow a
 * commit (the commit header says none replaced the MANIFEST), no
 * collector step is due (cooperative policies), no XRF has to be read,
 * and it reads at most 65,536 postings.  Otherwise PYDB_EWOULDBLOCK (no
 * detail set) and the caller uses pydb_search().  The binding calls it
 * with the GIL held (docs/conventions.md, GIL rule 6).  Other errors and
 * ownership as pydb_search(). */
int pydb_search_nowait(int32_t **mfns, size_t *n, pydb_index *ix,
                       pydb_db *db, const char *expr, size_t len,
                       pydb_error *err);
#define PYDB_SEARCH_MAX_LEN 65536    /* bytes of an expression             */
#define PYDB_SEARCH_MAX_DEPTH 100    /* nested parentheses                 */

/* ======================================================================
 * 7. FST and native index
 *
 * A field select table (FST, docs/isis-formats.md §5) says which keys
 * each record yields; the native index (segments in <base>.pdx beside
 * the .mst) is built from one and, once attached to a writable handle,
 * updated in the same transaction as the records.
 *
 * Threads: a compiled FST is immutable; any number of threads may read
 * it.  A native index is read as group 6 says; a pydb_nidx_builder is
 * used by one thread at a time.
 * ====================================================================== */
typedef struct pydb_fst pydb_fst;   /* opaque; pydb_fst_free() */

/* Compile FST text (docs/isis-formats.md §5.1: one "ID IT FORMAT" rule
 * per line; blank lines ignored).  `filename` names the source in errors
 * (may be NULL).  *out: pydb_fst_free().  Errors: PYDB_EFST
 * (err->offset = 1-based line, message names the construct),
 * PYDB_ENOMEM. */
int pydb_fst_parse(pydb_fst **out, const char *text, size_t len,
                   const char *filename, pydb_error *err);
/* Free a compiled FST (NULL: nothing). */
void pydb_fst_free(pydb_fst *f);
/* Number of rules. */
size_t pydb_fst_count(const pydb_fst *f);
/* Rule i (0 <= i < pydb_fst_count(f)): its ID, technique (0-8, or
 * 1000-1008), format text (a view into f, not NUL-terminated) and source
 * line.  Any out-pointer may be NULL.  Cannot fail. */
void pydb_fst_rule(uint32_t *id, int *technique, const char **format,
                   size_t *format_len, int *line, const pydb_fst *f,
                   size_t i);

/* How a native index makes keys (stored with the index). */
typedef struct pydb_nidx_options {
    int utf8;               /* keys are UTF-8 (Unicode folding)           */
    int keys;               /* enum pydb_keys when utf8 is 0 (0: DOS)     */
    int mode;               /* enum pydb_keymode (0: UNICODE)             */
    const uint8_t *upper;   /* explicit case and word-character tables    */
    const uint8_t *word;    /* (256 bytes each, a rebuild keeping the
                               stored ones), or NULL for the table `keys` */
    size_t max_key;         /* keys cut to this many bytes; 0 = no limit  */
    const uint8_t *stw;     /* stop-word text (.STW), or NULL             */
    size_t stw_len;
    int tables;             /* 1: load ISISUC.TAB/ISISAC.TAB from the
                               database's directory when present          */
    size_t memory;          /* bulk build: bytes of keys and postings held
                               before a sorted run is spilled to the index
                               directory; 0 = PYDB_NIDX_MEMORY_DEFAULT    */
    int skip_damaged;       /* bulk build: 1 leaves a record that cannot
                               be read (PYDB_ECORRUPT) out of the index,
                               noted (pydb_nidx_builder_damaged), instead
                               of failing; past PYDB_NIDX_DAMAGED_MAX
                               such records the build fails as without */
} pydb_nidx_options;

/* A record a build with skip_damaged left out: its MFN and the error of
 * its read (file, byte offset, reason). */
typedef struct pydb_nidx_damaged {
    int32_t mfn;
    pydb_error error;
} pydb_nidx_damaged;

/* At most this many damaged records are left out of one build. */
#define PYDB_NIDX_DAMAGED_MAX 10000

/* The bulk build's default memory budget (64 MiB).  The build holds at
 * most about this much of keys and postings (counted with what sorting
 * them adds); past it, it sorts them into a run file (build-PID-N.tmp in
 * the index directory) and starts over; 64 runs of one size are merged
 * into one, and at the end the runs are merged into the one segment it
 * publishes, each read through a 64 KiB buffer.  Its peak memory is thus
 * about the budget plus 64 KiB per run left for the end (at most 63 per
 * 64-fold of size), whatever the size of the database; the segment is
 * the same bytes for any budget.  Measured (benchmarks/
 * bench_index_memory.py): 85-88 MiB peak RSS of `python -m pydb index`
 * for 59 thousand to 1.2 million records. */
#define PYDB_NIDX_MEMORY_DEFAULT ((size_t)64 << 20)

/* Progress of a bulk build: records done of total; nonzero cancels. */
typedef int (*pydb_progress_fn)(void *ctx, int64_t done, int64_t total);

/* Build (or rebuild) the native index of the database `db_path` from
 * `fst`: files in the directory <base>.pdx beside the .mst.  Active
 * records only (logically deleted ones are skipped); a damaged record
 * fails the build (PYDB_ECORRUPT naming it) rather than leaving it out,
 * unless opt->skip_damaged (which records were left out, only the steps
 * below tell: pydb_nidx_builder_damaged).
 * The new index replaces the old one atomically, as a commit: under the
 * writer lock (waiting up to 10 s for it), through the write-ahead log,
 * with the records committed while the build read included; handles
 * opened before pick it up, with its key rules and FST, at their next
 * call (an attached handle at its next commit).  Memory is bounded by
 * opt->memory (PYDB_NIDX_MEMORY_DEFAULT): past it the build spills
 * sorted runs to temporary files in the index directory.
 * `fst` must outlive the build; `opt` may be NULL.  Errors: PYDB_EINVAL
 * (cancelled by `progress`), PYDB_ELOCKED (the writer lock was not
 * obtained), PYDB_EREADONLY, PYDB_ECORRUPT, PYDB_EIO, PYDB_ENOMEM, those
 * of pydb_open() (the database is opened for writing) and PYDB_EFST
 * (stop words). */
int pydb_native_index_build(const char *db_path, const pydb_fst *fst,
                            const pydb_nidx_options *opt,
                            pydb_progress_fn progress, void *ctx,
                            pydb_error *err);
/* The same in steps (a binding reports progress between them). */
typedef struct pydb_nidx_builder pydb_nidx_builder;   /* opaque */
/* Open the database and prepare the build.  *out:
 * pydb_nidx_builder_free().  Errors as pydb_native_index_build(). */
int pydb_nidx_builder_open(pydb_nidx_builder **out, const char *db_path,
                           const pydb_fst *fst, const pydb_nidx_options *opt,
                           pydb_error *err);
/* Index up to `max` more records; *done and *total report progress
 * (records read, highest MFN); *more is 0 once every record has been
 * read.  Any out-pointer may be NULL.  Errors: PYDB_ECORRUPT, PYDB_EIO,
 * PYDB_EFST, PYDB_ENOMEM. */
int pydb_nidx_builder_step(int64_t *done, int64_t *total, int *more,
                           pydb_nidx_builder *b, int32_t max,
                           pydb_error *err);
/* Read what is left, write the segment and MANIFEST and publish them
 * atomically.  Errors: as pydb_nidx_builder_step(), PYDB_EIO. */
int pydb_nidx_builder_finish(pydb_nidx_builder *b, pydb_error *err);
/* Free the builder (NULL: nothing); an unfinished build leaves the old
 * index as it was. */
void pydb_nidx_builder_free(pydb_nidx_builder *b);
/* The records a finished build with opt->skip_damaged left out, *n of
 * them, ascending by MFN, one per MFN (valid until the builder is
 * freed). */
const pydb_nidx_damaged *pydb_nidx_builder_damaged(const pydb_nidx_builder *b,
                                                   size_t *n);

/* The settings a native index was built with, read from its MANIFEST: a
 * rebuild keeps them unless told otherwise (pydb.build_index, `python -m
 * pydb index`). */
typedef struct pydb_nidx_stored {
    int utf8;               /* keys are UTF-8                              */
    size_t max_key;         /* 0 = no limit                                */
    int mode;               /* enum pydb_keymode                           */
    uint8_t upper[256];     /* the case table keys were made with          */
    uint8_t word[256];      /* and the word characters                     */
    char *fst;              /* FST text (NUL-terminated), fst_len bytes    */
    size_t fst_len;
    uint8_t *stw;           /* stop-word text, stw_len bytes (may be 0)    */
    size_t stw_len;
} pydb_nidx_stored;
/* Fill *out from the MANIFEST of the native index of `db_path`; free it
 * with pydb_nidx_stored_free().  Errors: PYDB_EIO with sys_errno ENOENT
 * (no index), PYDB_ECORRUPT (a damaged MANIFEST), PYDB_EINVAL (empty or
 * too long path), PYDB_ENOMEM. */
int pydb_native_index_stored(pydb_nidx_stored *out, const char *db_path,
                             pydb_error *err);
/* The same from the MANIFEST's spare (MANIFEST.pydb-next: the MANIFEST
 * of an earlier commit, which commits swap in by renames), for a
 * rebuild when the MANIFEST is damaged: the settings of the same index
 * (a rebuild removes the spare, which held the index it replaced,
 * unless another writer held the lock right after its commit).  The
 * same errors. */
int pydb_native_index_stored_spare(pydb_nidx_stored *out,
                                   const char *db_path, pydb_error *err);
void pydb_nidx_stored_free(pydb_nidx_stored *s);

/* Open the native index of `db_path`.  *out: pydb_index_close().
 * Errors: PYDB_EIO with sys_errno ENOENT (no index), PYDB_ECORRUPT,
 * PYDB_EFST (stored FST or stop words), PYDB_EINVAL (empty or too long
 * path), PYDB_ENOMEM. */
int pydb_native_index_open(pydb_index **out, const char *db_path,
                           pydb_error *err);
/* Make every commit on `db` update the native index `ix` (opened on the
 * same database) in the same transaction (pydb_set_commit_hook): prepare
 * writes a segment and hands the new MANIFEST to pydb_txn_put_file;
 * publish makes it visible to searches on ix; the hook's collect and
 * garbage (group 9) merge its segments and count its garbage.  ix must
 * stay attached while db is open; db = NULL detaches ix from the handle
 * it was attached to (removing the hook, waiting for a collection step
 * or a reader signalling the collector), which must come before
 * pydb_close(db).  Errors: PYDB_EINVAL (ix is not a native index, or db
 * is in a transaction). */
int pydb_native_index_attach(pydb_index *ix, pydb_db *db, pydb_error *err);

/* The native index generation the latest commit published (its
 * MANIFEST's), or 0: none, or no usable commit header (files mode).  No
 * I/O. */
uint64_t pydb_index_gen(pydb_db *db);
/* The caller looked for db's native index as of generation `gen` (read
 * with pydb_index_gen() before it looked) and attached what it found
 * (pydb_native_index_attach), or found none.  From then on, while no
 * index is attached, pydb_txn_begin() fails with PYDB_ENEWINDEX, before
 * anything is written, once a later commit names a newer generation (a
 * build by another handle or process): the caller attaches the new index
 * (or says none is there) and begins again, so that no commit of this
 * handle leaves the index behind its records.  A handle whose caller
 * never calls this is not checked, nor one without a usable commit
 * header (files mode: pydb_index_gen() is 0), nor a build whose
 * generation does not pass the one seen (a header rebuilt from the
 * files names generation 0, and a build into an emptied index folder
 * starts again at 1). */
void pydb_index_gen_seen(pydb_db *db, uint64_t gen);

/* A read-only view of `ix` as of the snapshot's commit: for a native
 * index opened on the snapshot's database, the segment list of the
 * MANIFEST generation that commit published; for an index that commits
 * never change (ISIS inverted files, in-memory), a view of it as it is.
 * Registered snapshots keep every segment file of their generation on
 * disk.  *view: pydb_index_close() (the snapshot may be released first);
 * a native view needs nothing else to stay open, other kinds borrow ix,
 * which must outlive them.  The index handle holds the set it serves and
 * the one before: ask right after taking the snapshot.  Errors:
 * PYDB_EWOULDBLOCK (the index has moved past the snapshot's generation:
 * commits since, or one between replacing its MANIFEST and publishing
 * its state -- take a new snapshot and ask again, yielding between
 * tries), PYDB_EINVAL (NULL arguments), PYDB_ECORRUPT, PYDB_EIO,
 * PYDB_ENOMEM. */
int pydb_snapshot_index(pydb_index **view, const pydb_snapshot *snap,
                        pydb_index *ix, pydb_error *err);
/* pydb_search() as of the snapshot: `view` from pydb_snapshot_index();
 * the deleted-record rule of pydb_search() applied with the XRF as of
 * the snapshot. */
int pydb_snapshot_search(int32_t **mfns, size_t *n, pydb_index *view,
                         const pydb_snapshot *snap, const char *expr,
                         size_t len, pydb_error *err);
/* pydb_snapshot_search() only if it cannot wait (the rules of
 * pydb_search_nowait()); else PYDB_EWOULDBLOCK. */
int pydb_snapshot_search_nowait(int32_t **mfns, size_t *n, pydb_index *view,
                                const pydb_snapshot *snap, const char *expr,
                                size_t len, pydb_error *err);

/* ======================================================================
 * 8. Validator (csrc/check.c)
 *
 * Walks the control record, every XRF block and entry, every record
 * version reachable from the XRF and every back-pointer chain, then scans
 * the master file sequentially for versions nothing points at
 * (docs/isis-formats.md §2-3; docs/reliability.md §2.1 "A validator").
 * Every fault is reported to a callback with its kind, severity and
 * location; the walk never stops at the first fault.
 *
 * Threads: the walk reads through the handle and does not modify it, so
 * readers (and a writer) may run at the same time; the callbacks run on
 * the calling thread.
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
    PYDB_CHECK_INDEX,            /* the native index cannot be read: a
                                    damaged or missing file (the reader's
                                    file, offset and reason)               */
    PYDB_CHECK_INDEX_POSTING,    /* a key's postings out of order or
                                    repeated, more than its count, or of an
                                    MFN with no active record in the commit
                                    checked; or a record's postings not the
                                    keys the index's FST gives of it       */
    /* warnings */
    PYDB_CHECK_MFRL_PADDING,     /* MFRL odd / not a multiple of 2^MSTXL    */
    PYDB_CHECK_PLACEMENT,        /* start not aligned, or leader splits a
                                    block (never-split rule,
                                    docs/isis-formats.md §2.3)             */
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

/* One fault, as the callback sees it (pointers valid during the call). */
typedef struct pydb_check_problem {
    int kind;             /* enum pydb_check_kind                          */
    const char *name;     /* kind name, e.g. "mfn-mismatch" (static)       */
    int severity;         /* PYDB_CHECK_ERROR or PYDB_CHECK_WARNING below  */
    int32_t mfn;          /* MFN concerned, or 0                           */
    const char *path;     /* file where the fault is                       */
    int64_t offset;       /* byte offset in that file, or -1               */
    const char *message;  /* human-readable reason                         */
} pydb_check_problem;
/* pydb_check_problem.severity: */
#define PYDB_CHECK_WARNING 1
#define PYDB_CHECK_ERROR   2

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
    int index_checked;     /* 1 if a native index was read to its end      */
    int64_t index_keys;    /* its keys read                                */
    int64_t index_postings;/* its postings read                            */
    int stopped;           /* 1 if the walk stopped: the callback asked,
                              or a file shrank under it (an io problem)  */
} pydb_check_summary;

typedef struct pydb_check_options {
    pydb_check_fn problem; /* may be NULL: only the summary is filled      */
    void *ctx;
    /* Called now and then from the walking thread with work done / total
     * (units: XRF entries + 512-byte blocks scanned).  May be NULL. */
    void (*progress)(void *ctx, int64_t done, int64_t total);
    void *progress_ctx;
} pydb_check_options;

/* The name of a kind ("mfn-mismatch", ...; static; "?" if unknown). */
const char *pydb_check_kind_name(int kind);
/* The severity of a kind: PYDB_CHECK_ERROR/WARNING, or 0 if unknown. */
int pydb_check_kind_severity(int kind);

/*
 * Validate the open database `db` and fill *out (zeroed first).  `opt`
 * may be NULL (summary only).  Returns PYDB_OK when the walk ran
 * (whatever it found: see *out; read failures are PYDB_CHECK_IO
 * problems), PYDB_EINVAL (db NULL), PYDB_ENOMEM if the fixed work buffers
 * cannot be allocated, PYDB_ELOCKED when the snapshot it takes finds the
 * reader table full of live readers (group 3b; the walk is of that
 * snapshot's commit).  Memory use is bounded: a 64 KiB buffer, a
 * directory buffer of at most 786 KiB, and a table of at most 4 Mi record
 * versions (16 bytes each at load <= 1/2, plus a sorted copy: at most
 * 192 MiB); a database with more versions gets a PYDB_CHECK_LIMIT warning
 * and skips the overlap and orphan checks.  Reads go through the
 * handle's I/O mode.  After the walk, under a cooperative policy (group
 * 9), the handle collects as a sweep: bounded steps until nothing is
 * left or a step is turned away (the writer lock busy), the database
 * taken as idle (Firebird's validation and sweep collect garbage under
 * its cooperative policy; the walk read every record, so the collection
 * costs it the same order of work again).  Then, where the database has
 * a native index, that index as of the latest commit (a snapshot taken
 * then): every key and its postings read (PYDB_CHECK_INDEX,
 * PYDB_CHECK_INDEX_POSTING), then each active record's keys by the
 * index's FST compared with its postings; memory: 13 bytes per MFN, the
 * postings of one key and the keys of one record at a time.  pydb_snapshot_check() does not check the index.
 */
int pydb_check_ex(pydb_check_summary *out, pydb_db *db,
                  const pydb_check_options *opt, pydb_error *err);
/* pydb_check_ex() with only a problem callback (fn may be NULL). */
int pydb_check(pydb_check_summary *out, pydb_db *db, pydb_check_fn fn,
               void *ctx, pydb_error *err);
/* pydb_check_ex() of the committed state a snapshot pins: the walk
 * sees the control-record values, XRF entries and versions of that commit
 * (later commits' versions are followed back, not reported), so a
 * database is judged sound while writers commit.  pydb_check_ex() runs on
 * a snapshot it takes itself. */
int pydb_snapshot_check(pydb_check_summary *out, const pydb_snapshot *snap,
                        const pydb_check_options *opt, pydb_error *err);

/* ======================================================================
 * 9. Garbage, its collection, and statistics (csrc/gc.c, csrc/stat.c;
 *    docs/architecture.md "Garbage")
 *
 * Garbage is what no snapshot or registered reader of any process can
 * see any more: back versions of records (superseded by a later commit),
 * the postings of such versions in the native index, segment files no
 * reader pins, and the master-file bytes they occupy.  The last version
 * of a logically deleted record is not garbage (pydb_txn_undelete brings
 * it back, as WinISIS/CISIS can).  Collection is chosen per handle by a
 * policy (Firebird's GCPolicy names): none (nothing is collected, not
 * even the segment merges commits used to do), background (a pthread of
 * the handle, woken by commits), cooperative (readers that meet
 * collectable garbage collect a bounded amount themselves), combined
 * (both).  Only a writable handle collects; the others count.
 * ====================================================================== */

enum pydb_gc_policy {
    PYDB_GC_NONE = 0,
    PYDB_GC_BACKGROUND = 1,
    PYDB_GC_COOPERATIVE = 2,
    PYDB_GC_COMBINED = 3      /* BACKGROUND | COOPERATIVE */
};
#define PYDB_GC_DEFAULT PYDB_GC_BACKGROUND
/* The policy a handle starts with, in pydb_options.flags (group 1):
 * opt.flags |= PYDB_OPEN_GC(PYDB_GC_NONE).  Without it: PYDB_GC_DEFAULT.
 * A writable handle with a background policy starts its collector
 * thread in pydb_open(); pydb_gc_set_policy() changes it later. */
#define PYDB_OPEN_GC_SHIFT 12
#define PYDB_OPEN_GC(policy) ((((policy) & 3) + 1) << PYDB_OPEN_GC_SHIFT)
/* "none", "background", "cooperative", "combined" -> the policy, or -1. */
int pydb_gc_policy_from_name(const char *name);
/* The policy's name ("none" ...); "?" for an unknown value. */
const char *pydb_gc_policy_name(int policy);

/* Set the handle's policy (any handle; only a writable one collects):
 * starts or stops (joins) the collector thread as the policy needs.
 * Errors: PYDB_EINVAL (unknown policy), PYDB_ENOMEM / PYDB_EIO (the
 * thread could not start: the policy is left unchanged). */
int pydb_gc_set_policy(pydb_db *db, int policy, pydb_error *err);
int pydb_gc_get_policy(const pydb_db *db);

/* What one collection did, and what the handle has done so far. */
/* One bounded step of collection work asked of a collector's job (the
 * commit hook's collect()). */
typedef struct pydb_gc_step {
    int budget;              /* units of work, at least 1                  */
    int idle;                /* 1: no commit for a while, collect all;
                                0: commits go on, collect what is due      */
    int lock_ms;             /* the longest wait for the writer lock (ms)  */
    int offer;               /* 1: a finished small merge may wait for the
                                handle's next commit to publish it (the
                                collector thread while commits go on)      */
} pydb_gc_step;

typedef struct pydb_gc_report {
    int64_t versions;        /* back versions removed from the master file */
    int64_t bytes;           /* master-file bytes reclaimed                */
    int64_t postings;        /* dead postings dropped from the index       */
    int64_t segments;        /* segment files removed                      */
    int64_t compactions;     /* master files replaced                      */
    int64_t pinned;          /* garbage left because a reader pins it      */
} pydb_gc_report;

/* Collect everything collectable now (the garbage of the commits up to
 * the latest when it is called; the master file's by a compaction that
 * replaces a commit at least as new), in bounded steps, on the calling
 * thread (whatever the policy; the collector thread, if any, keeps
 * running and the two never work at once).  *out: what was collected.
 * A step that fails (ENOSPC during a merge or a compaction) leaves the
 * database as it was before that step and is reported (PYDB_EIO /
 * with the file, sys_errno ENOSPC and the reason); the garbage stays
 * counted.
 * Errors also: PYDB_EREADONLY (a read-only handle), PYDB_ELOCKED (the
 * writer lock was busy, or the collection did not finish, within
 * `timeout_ms`: *out says what the steps done collected, and a later
 * call goes on from there), PYDB_ECLOSED (pydb_close_begin() was
 * called). */
int pydb_gc_collect(pydb_gc_report *out, pydb_db *db, int timeout_ms,
                    pydb_error *err);
/* pydb_gc_collect() as one collection made of several calls (a caller
 * that waits in slices): *commit 0 on the first call, which sets it to
 * the latest commit, whose garbage the collection collects (what is
 * committed meanwhile is left to the next collection, so that writers
 * that go on committing do not keep it going); pass it back to the
 * following calls. */
int pydb_gc_collect_since(pydb_gc_report *out, pydb_db *db, int timeout_ms,
                          uint64_t *commit, pydb_error *err);

/* Native index figures (pydb_stat.index; the hook's garbage()). */
typedef struct pydb_index_stat {
    int present;             /* 1: a native index is attached              */
    int64_t segments;        /* segments of the latest set                 */
    int64_t terms;           /* distinct keys over all segments            */
    int64_t postings;        /* postings stored (live + dead)              */
    int64_t dead_postings;   /* postings of versions a later commit replaced */
    int64_t tombstones;      /* tombstoned MFNs stored in segments         */
    int64_t bytes;           /* bytes of the live segments (inline too)    */
    int64_t files;           /* segment files in the directory             */
    int64_t unused_files;    /* files no set names (removable when unpinned) */
    int64_t unused_bytes;
} pydb_index_stat;

/* gstat: the figures of the latest committed state (a snapshot of it),
 * walking the XRF and every back-version chain and, with an attached
 * native index, every segment.  Time: one pass over the XRF, the
 * versions' leaders and the index's postings. */
typedef struct pydb_stat {
    /* header */
    uint64_t commit;           /* latest commit (0: files mode)            */
    uint64_t oldest_commit;    /* oldest registered reader's commit (commit
                                  when none)                               */
    int readers;               /* registered readers (snapshots) now       */
    int policy;                /* this handle's pydb_gc_policy             */
    uint64_t file_gen;         /* master file generation (compactions)     */
    uint64_t collections;      /* collections completed by this handle     */
    double last_collection;    /* Unix time of the last, 0 if none         */
    pydb_gc_report last;       /* what the last collection did             */
    char last_error[256];      /* the last failed step's message, or ""    */
    int gc_pending;            /* 1 while this handle's collector may still
                                  have work (a commit since its last idle
                                  collection that found nothing, a job in
                                  progress, garbage a reader pins); 0 once
                                  quiescent.  Only writable handles settle */
    int32_t collector_pid;     /* the process whose collector holds the
                                  database's lease (one collecting process
                                  at a time; gc.c), 0: none               */
    /* records */
    int64_t active, deleted;   /* deleted: logically deleted               */
    int32_t next_mfn;
    /* versions */
    int64_t versions;          /* stored versions reachable from the XRF   */
    int64_t back_versions;
    int64_t longest_chain;     /* versions of the record with the most     */
    int64_t version_bytes;     /* bytes of all reachable versions          */
    /* garbage (master file) */
    int64_t garbage_versions;  /* back versions (all are superseded)       */
    int64_t garbage_bytes;
    int64_t pinned_versions;   /* of those, visible to a registered reader */
    int64_t pinned_bytes;
    /* master file */
    int64_t mst_size;          /* bytes of the .mst                        */
    int64_t live_bytes;        /* bytes of the versions of the latest state */
    pydb_index_stat index;
    /* damage: records whose version chain could not be walked (a leader
     * or back pointer that is damage); their versions from the damaged
     * one on are not counted.  first_damage: the first one's error. */
    int64_t damaged;
    pydb_error first_damage;
} pydb_stat;

/* Fill *out (pydb_stat above): the index figures are those of the
 * attached native index, else of the database's native index opened for
 * them (a read-only handle's too).  A damaged record is counted
 * (out->damaged, out->first_damage), not an error.  Errors: PYDB_ECORRUPT
 * (the XRF, or the index's files, with the file and offset), PYDB_EIO,
 * PYDB_ENOMEM, PYDB_ELOCKED (the reader table full). */
int pydb_stat_get(pydb_stat *out, pydb_db *db, pydb_error *err);
/* The same; flags PYDB_STAT_NO_INDEX: no index figures (index.present 0,
 * the index's files not read: a report of a database whose index is
 * damaged). */
#define PYDB_STAT_NO_INDEX 1
int pydb_stat_get_ex(pydb_stat *out, pydb_db *db, int flags,
                     pydb_error *err);

/* Before a collection (pydb_gc_collect_since with *commit 0): whether
 * the master file holds dead space no writer counted -- versions no XRF
 * entry reaches and back versions that are garbage, as WinISIS and
 * CISIS leave them (their updates append and publish nothing) -- of a
 * fifth of its records' bytes or more (and a block at least), padding a
 * compaction writes again not counted; where it does, the collection
 * that follows compacts for it (docs/compaction.md, "When").  Only where
 * the writers' counters say no garbage.  One walk of the statistics
 * (every reachable version's leader).  1 or 0; 0 for a read-only handle,
 * files mode, damage or a walk that fails. */
int pydb_gc_find_dead_space(pydb_db *db);

/* ======================================================================
 * 10. ISO 2709 (csrc/iso2709.c; docs/isis-formats.md §7)
 *
 * The strict half of the ISO 2709 reader: one sound record, parsed as
 * pydb/iso2709.py parses it before any repair; and the writer's encoding
 * of one record.  Anything else (a bad
 * length, a directory, entry map or base address that needs a repair, a
 * non-numeric tag, lengths counted in characters) is left to the
 * tolerant reader in Python, which keeps every repair and message.
 * ====================================================================== */

#define PYDB_ISO_ISIS 1   /* terminators '#' (field) and '#' (record)   */
#define PYDB_ISO_MARC 2   /* 0x1E (field) and 0x1D (record)             */

typedef struct pydb_iso_field {
    uint32_t tag;      /* the tag, with the implementation part's digits
                          in front when the entry map gives it          */
    uint32_t off, len; /* value: rec[off .. off + len)                   */
} pydb_iso_field;

/* A parsed record; zero it before first use, reuse it for the next
 * record, free it with pydb_iso_record_free(). */
typedef struct pydb_iso_record {
    const uint8_t *rec;   /* the record without line breaks: into the
                             caller's buffer, or into `unwrapped`        */
    size_t len;           /* its length (the leader's)                   */
    size_t end;           /* offset in the buffer just after the record  */
    int flavour;          /* PYDB_ISO_ISIS or PYDB_ISO_MARC              */
    pydb_iso_field *fields;
    size_t nfields, cap;
    uint8_t *unwrapped;   /* copy of a record stored in 80-byte lines    */
    size_t ucap;
} pydb_iso_record;

/* Parse the record at buf[start] (n bytes in buf).  `flavours`: the
 * flavours allowed (PYDB_ISO_ISIS | PYDB_ISO_MARC for auto).  A record
 * longer than 80 bytes whose 81st byte is a line break is read as
 * 80-byte lines (CR LF or LF between them), as WinISIS and CISIS write
 * it.  *sound = 1 and *out filled when the record is sound, *sound = 0
 * when it is not (out unspecified).  Errors: PYDB_ENOMEM only. */
int pydb_iso_strict(int *sound, pydb_iso_record *out, const uint8_t *buf,
                    size_t n, size_t start, int flavours, pydb_error *err);
void pydb_iso_record_free(pydb_iso_record *r);

/* Writing: one field of a record to encode. */
typedef struct pydb_iso_wfield {
    uint8_t tag[3];        /* the entry's tag: a numeric tag's last three
                              digits, or three printable ASCII characters */
    uint8_t impl[2];       /* a numeric tag's digits before those (tags
                              1000..99999), written as the entry's
                              implementation-defined part                 */
    int nimpl;             /* 0..2 digits in impl                          */
    const uint8_t *value;  /* the value, without its field terminator      */
    size_t len;            /* bytes                                        */
} pydb_iso_wfield;

/* The first of the MARC flavour's reserved bytes 0x1D, 0x1E, 0x1F (in
 * that order) that occurs in the value, or -1. */
int pydb_iso_reserved(const uint8_t *value, size_t len);

/* Encode one record, without line breaks (docs/isis-formats.md §7):
 * leader (record length, mid = positions 5-11, base address, tail =
 * positions 17-19, entry map: the widths of lengths and starts, 4 and 5
 * at least, and of the implementation part, the widest tag's), the
 * directory, the fields each with its terminator, the record terminator
 * (PYDB_ISO_ISIS: '#' and '#'; PYDB_ISO_MARC: 0x1E and 0x1D).  With
 * PYDB_ISO_MARC and `caret`, each '^' in a value is written as the
 * subfield delimiter 0x1F, except in control fields (tags 001-009 without
 * an implementation part), which have no subfields.  The record's length
 * (bytes) goes to *len; it is written to `out` (*len bytes of room)
 * unless out is NULL (the length only).  Errors: PYDB_EINVAL when the
 * record cannot be represented (a field or the data area needs lengths
 * of more than 9 digits; the record is longer than 99,999 bytes). */
int pydb_iso_encode(uint8_t *out, size_t *len, const pydb_iso_wfield *f,
                    size_t n, int flavour, int caret, const uint8_t mid[7],
                    const uint8_t tail[3], pydb_error *err);

#ifdef __cplusplus
}
#endif
#endif /* PYDB_H */
