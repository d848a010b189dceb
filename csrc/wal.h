/*
 * wal.h - the write-ahead log <base>.wal: its format, building a log
 * image, appending it (the commit point), replaying it (recovery),
 * resetting it, and the cross-process writer lock that lives on it.
 *
 * Log format (all integers little-endian; one commit at most, the file
 * is empty between commits):
 *
 *   header, PYDB_WAL_HEAD = 40 bytes
 *     0  "PYDBWAL1"        8  version (1)       12  entry count
 *     16 body length (u64) 24 commit sequence (u64)
 *     32 CRC-32C of bytes 0..31                 36  0
 *   entries, each padded to 8 bytes
 *     0  kind (1 .mst, 2 .xrf, 3 whole file)    4  name length
 *     8  file offset (u64)  16 data length (u64)
 *     24 name (kind 3 only), then the data
 *   trailer, PYDB_WAL_TAIL = 16 bytes
 *     0  "PYDBEND1"        8  CRC-32C of header + body   12  0
 *
 * A log is complete when the magic, version, header CRC, body length,
 * trailer and its CRC all agree; anything else is a torn log (a crash
 * before the commit point) and is discarded.  Replay writes the .mst and
 * .xrf entries in log order (the control record is the last of them),
 * fdatasyncs both, then puts the whole files in place (pydb__replace_file)
 * -- so replaying a log twice is harmless.
 *
 * The writer lock is an open-file-description lock (F_OFD_SETLK) on the
 * whole log file: one writer per database across handles and processes.
 *
 * Depends on: util.c (CRC-32C, write_full, replace_file, fsync_parent),
 * path.c (the log's name), vfs.c, error.c, and the handle's fields
 * (struct pydb_db: wal_fd, wal_path, the files' paths, seq).  It never
 * calls transactions (txn.c) or the handle's open (handle.c): both call
 * it.
 */
#ifndef PYDB_WAL_H
#define PYDB_WAL_H

#include "pydb_int.h"

#define PYDB_WAL_HEAD 40
#define PYDB_WAL_TAIL 16
#define PYDB_WAL_ENTRY 24
#define PYDB_WAL_MST 1          /* bytes of the master file at an offset */
#define PYDB_WAL_XRF 2          /* bytes of the XRF at an offset          */
#define PYDB_WAL_FILE 3         /* a whole file, replaced atomically      */
#define PYDB_WAL_MAX_PATH 4096  /* longest name of a whole file           */

/* ---- building a log image in memory ---- */

/* Start an image in an empty buffer (room for the header).  0 or -1 (no
 * memory). */
int pydb__wal_begin(pydb_buf *log);
/* Append one entry; the address of its `len` data bytes for the caller
 * to fill, or NULL (no memory).  *count is incremented. */
uint8_t *pydb__wal_entry(pydb_buf *log, uint32_t kind, const char *name,
                         uint64_t off, uint64_t len, uint32_t *count);
/* Write the header (count entries, commit sequence `seq`) and append the
 * trailer, both with their checksums.  0 or -1 (no memory). */
int pydb__wal_seal(pydb_buf *log, uint32_t count, uint64_t seq);

/* ---- the log of an open writer handle ---- */

/* Open (create) db's log beside the master file of `base`; with sync,
 * fsync the directory if the log is new.  If no writer holds the lock,
 * recover now (else the next transaction will).  0 or a PYDB error. */
int pydb__wal_open(pydb_db *db, const char *base, pydb_error *err);
void pydb__wal_close(pydb_db *db);

/* Take the writer lock, trying until `deadline` (ms of pydb__now_ms();
 * < 0: one try).  `gc`: for a collector step, which goes first (the
 * commit header's priority word: wal.c).  PYDB_ELOCKED when another
 * handle or process holds it. */
int pydb__wal_lock(pydb_db *db, int64_t deadline, int gc, pydb_error *err);
void pydb__wal_unlock(pydb_db *db);

/* Append a sealed image at the start of the (empty) log and, with sync,
 * fdatasync it: when this returns 0 the commit is durable (the commit
 * point).  A failed write truncates the log again (best effort; it is
 * torn anyway) and leaves the files untouched; a failed fdatasync sets
 * *sync_failed: the log may or may not be durable. */
int pydb__wal_append(pydb_db *db, const pydb_buf *log, int sync,
                     int *sync_failed, pydb_error *err);

/* Empty the log after its commit was applied to the files.  Best effort,
 * not synced: if it fails, or a power cut undoes it, the log still holds
 * an applied commit, which the next transaction or open replays
 * harmlessly -- as long as only commits changed the files since: see
 * pydb__wal_settle(). */
void pydb__wal_discard(pydb_db *db);

/* Make the empty log durable (fdatasync), with the writer lock held,
 * before a step that changes the files outside the log (a compaction's
 * swap, the native index's merges and removals): replayed after such a
 * step, an applied commit's log that a power cut brought back would write
 * its records and XRF blocks at offsets of the old files, and put back
 * a MANIFEST naming removed segments.  0 or a PYDB error (the step then
 * fails; the handle stays writable: the log holds no commit to lose, and
 * the next commit's log replaces it with an fdatasync of its own). */
int pydb__wal_settle(int wal_fd, const char *wal_path, pydb_error *err);

/* Recovery with the writer lock held: replay a complete log into the
 * files (fds given), drop a torn one, then truncate and fdatasync the
 * log.  `seq` (or NULL): the sequence lock of a handle reading these
 * files, held odd while the .mst/.xrf bytes are written.  A failed fsync
 * sets *fsync_failed.  0 or a PYDB error. */
int pydb__wal_recover(int wal_fd, const char *wal_path, int mst_fd,
                      int xrf_fd, const char *mst_path, const char *xrf_path,
                      uint64_t *seq, int *fsync_failed, pydb_error *err);

/* A read-only open replays a complete log if it can write the files
 * (mst/xrf: the paths pydb_open() found) and no writer holds the lock. */
int pydb__wal_recover_readonly(const char *base, const char *mst,
                               const char *xrf, pydb_error *err);

/* ---- a compaction's swap (compact.c; docs/compaction.md) ---- */

struct pydb_shm;
/* The compaction's new files and its swap marker beside mst/xrf: 0, or
 * -1 when a name does not fit in cap bytes. */
int pydb__swap_names(char *new_mst, char *new_xrf, char *marker, size_t cap,
                     const char *mst, const char *xrf);
/* With the writer lock held: publish the state of new files (their
 * control record `ctl` and sizes) as the next file generation, with the
 * swap record (shm.h) naming the commit they replace; the garbage
 * counters go to 0. */
void pydb__swap_publish(struct pydb_shm *shm, const uint8_t *ctl,
                        int64_t mst_size, int64_t xrf_size);
/* With the writer lock held: a swap marker means a compaction's new
 * files were complete: finish its renames, publish their state (when the
 * header does not describe them yet) and remove the marker (*finished =
 * 1); without a marker, remove a dead job's new files. */
int pydb__swap_recover(const char *mst, const char *xrf,
                       struct pydb_shm *shm, int sync, int *finished,
                       pydb_error *err);

#endif
