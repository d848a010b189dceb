/*
 * wal.h - the write-ahead log <base>.wal: its format, building a log
 * image, appending it (the commit point), replaying it (recovery),
 * resetting it, and the cross-process writer lock that lives on it.
 *
 * Log format (all integers little-endian).  The log is a sequence of
 * frames, one per commit, each appended where the one before ended:
 *
 *   header, PYDB_WAL_HEAD = 40 bytes
 *     0  "PYDBWAL1"        8  version (2; 1: a frame of the earlier
 *                             one-commit log, read alike)  12 entry count
 *     16 body length (u64) 24 commit sequence (u64)
 *     32 CRC-32C of bytes 0..31
 *     36 u32 the synced length: how many bytes of this log from its start
 *        an fdatasync had covered when the frame was built (0: none
 *        known; the commit header's synced mark, shm.h; earlier frames
 *        have 0 here)
 *   entries, each padded to 8 bytes
 *     0  kind (1 .mst, 2 .xrf, 3 whole file)    4  name length
 *     8  file offset (u64)  16 data length (u64)
 *     24 name (kind 3 only: version 2, relative to the log's folder, no
 *        ".." component; version 1, as the writer gave it), then the data
 *   trailer, PYDB_WAL_TAIL = 16 bytes
 *     0  "PYDBEND1"        8  CRC-32C of header + body   12  0
 *
 * A frame is complete when the magic, version, header CRC, body length,
 * trailer and its CRC all agree; the first frame that is not (a crash
 * before that commit point) ends the log, and recovery drops it --
 * unless its header checks out and a complete frame after it (where
 * its header says it ends, or after frames that follow from there) says,
 * by its synced length, that an fdatasync had covered the log past that
 * frame's start before it was built: that frame was durable, so it is
 * damaged, not torn, and the log is corrupt (wal.c, damage_past).  A
 * torn frame is never followed by such a frame: a synced length covers
 * only frames written, applied and synced before it.  Bodies are never
 * searched for frames (they hold the caller's data, which may hold a
 * frame's image).
 *
 * The file may be longer than its frames: past the last one it holds
 * zeros, which end the log as a torn frame does.  A commit that keeps
 * its frame (below) and finds no room for it writes zeros after it up
 * to the next multiple of PYDB_WAL_GROW, after the frame and before its
 * fdatasync (best effort: a full disk leaves the file shorter), so that
 * the commits after it overwrite bytes already in the file and their
 * fdatasync has no file size to write (on ext4 that is a journal commit
 * saved: 5,300 against 7,500-9,000 simulated commits/s here).  Past the
 * frames a writer writes only zeros or its next frame -- a frame whose
 * write failed is truncated away, and what a failed truncation leaves
 * is a partial frame -- and emptying the log truncates it to 0 bytes,
 * so no older frame lies past the zeros.  Within a boot, the commit
 * header (shm.h) holds the applied length and the id of the log's first
 * frame (its trailer's CRC, of header and body: two commits' frames
 * differ there but for a CRC collision, 2^-32): the log holds a frame
 * not yet applied when it starts with another frame (a process without
 * a usable header wrote it) or its bytes at that length are not zeros
 * (wal.c, wal_unapplied).
 *
 * Checkpoints (SQLite's WAL mode has the same shape).  A sync=True
 * commit fdatasyncs its frame -- the one fsync of the commit -- then
 * writes the bytes to the .mst/.xrf without syncing them and leaves the
 * frame in the log; the commit header (shm.h) then records the log's
 * length as applied, for this boot.  (A direct commit, PYDB_WAL_DIRECT
 * below, fdatasyncs its records in the .mst before its frame.)  Whole
 * files (the native index's MANIFEST) are written unsynced too, into a
 * spare whose name is swapped in (pydb__swap_file); files
 * the caller wrote already, unsynced, and put in the frame for replay
 * only (a native index's segment under PYDB_WAL_DIRECT bytes:
 * pydb__txn_log_file) are left as they are.  A checkpoint
 * (pydb__wal_checkpoint: when the log passes PYDB_WAL_CHECKPOINT bytes
 * or a handle's commits logged PYDB_WAL_CHECKPOINT_FILES segments,
 * before a collection step changes files outside the log, and when a
 * writer handle closes) fdatasyncs the .mst and .xrf, fsyncs the last
 * copy of each whole file the log names (writeback of all of them
 * started first) and then each of their folders once, then empties the
 * log and fdatasyncs that.
 * Recovery replays the whole log unless the header says every frame of
 * it was applied in this boot (after a power cut, a reboot, nothing is
 * known); a log shorter than the header's applied length that starts
 * with the header's first frame lost frames applied after those it
 * holds, so it is not replayed either (that would undo them): a
 * writer's recovery syncs the files and empties it (wal.c,
 * wal_unapplied).  Replay writes each byte once, with the value of the last
 * commit that wrote it (wal.c, wal_final_image), the .mst/.xrf in log
 * order, fdatasyncs both, then puts the whole files in place
 * (pydb__replace_file, unsynced) and syncs them as a checkpoint does --
 * so replaying commits already applied is
 * harmless, and readers never see an older value come back.  A
 * sync=False commit keeps its frame too, unsynced unless it writes in
 * place a unit that no synced frame of the log holds (txn.c, "Commits
 * without fsync"): a power cut keeps a prefix of the frames that holds
 * every unit written in place since the checkpoint, and the replay
 * leaves the files as after one commit.  A commit without a usable
 * header (files mode) syncs its frame and, after the apply, the .mst
 * and .xrf, and empties the log (whatever sync says).
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
/* No entry of a log ends past this offset: the end of the largest master
 * file an XRF can address (MSTXL 6: 2^26 blocks of 512 bytes), more than
 * the largest XRF (2^31 MFNs).  An entry that does is damage. */
#define PYDB_WAL_MAX_END ((uint64_t)1 << 35)
/* A frame kept for a checkpoint that would end past the file's end
 * grows the file to a multiple of this (bytes; zeros after the frame). */
#define PYDB_WAL_GROW (64 << 10)
/* A commit that leaves the log longer than this checkpoints (bytes). */
#define PYDB_WAL_CHECKPOINT (4 << 20)
/* ... and so does one after which this handle's commits since the last
 * checkpoint logged this many files written in place (a native index's
 * small segments: pydb__txn_log_file): the checkpoint fsyncs each, under
 * the writer lock, so this bounds the wait of the commit that makes it
 * (about 100 us each here; a 4 MiB log holds some 1,600). */
#define PYDB_WAL_CHECKPOINT_FILES 256
/* A commit whose new master-file region has at least this many bytes
 * writes the region straight into the .mst, past the committed end, and
 * (with sync) fdatasyncs it before its frame, which holds only the
 * region's first block (so that a replay's earlier block padding stops
 * where it starts: wal.c, wal_final_image): a bulk load writes its
 * records once, not into the log and again at the checkpoint (txn.c). */
#define PYDB_WAL_DIRECT (1 << 20)

struct pydb_shm;
/* The files a replay or checkpoint works on: the log, the .mst and .xrf
 * (fds open read-write, and their names for errors), the commit header
 * (NULL: files mode) and the sequence lock of a handle reading these
 * files (NULL: none), held odd while replay writes the .mst/.xrf. */
typedef struct pydb_wal_files {
    int wal_fd, mst_fd, xrf_fd;
    const char *wal_path, *mst_path, *xrf_path;
    struct pydb_shm *shm;
    uint64_t *seq;
} pydb_wal_files;

/* ---- building a log image in memory ---- */

/* Start an image in an empty buffer (room for the header).  0 or -1 (no
 * memory). */
int pydb__wal_begin(pydb_buf *log);
/* Append one entry; the address of its `len` data bytes for the caller
 * to fill, or NULL (no memory).  *count is incremented. */
uint8_t *pydb__wal_entry(pydb_buf *log, uint32_t kind, const char *name,
                         uint64_t off, uint64_t len, uint32_t *count);
/* Write the header (count entries, commit sequence `seq`, the synced
 * length `synced`: pydb__shm_log_synced_len, 0 past 4 GiB) and append
 * the trailer, both with their checksums.  0 or -1 (no memory). */
int pydb__wal_seal(pydb_buf *log, uint32_t count, uint64_t seq,
                   uint64_t synced);

/* ---- the log of an open writer handle ---- */

/* Open (create) db's log beside the master file of `base`; with sync,
 * fsync the directory if the log is new.  If no writer holds the lock,
 * recover now (else the next transaction will).  0 or a PYDB error. */
int pydb__wal_open(pydb_db *db, const char *base, pydb_error *err);
/* Close the log of a writer handle, with a last checkpoint when it can
 * take the writer lock at once and the handle is not read-only after a
 * failure (best effort: the next writer's open recovers what is left). */
void pydb__wal_close(pydb_db *db);
/* The handle's files for pydb__wal_recover / pydb__wal_checkpoint. */
pydb_wal_files pydb__wal_files(pydb_db *db);

/* Take the writer lock, trying until `deadline` (ms of pydb__now_ms();
 * < 0: one try).  `gc`: for a collector step, which goes first (the
 * commit header's priority word: wal.c).  PYDB_ELOCKED when another
 * handle or process holds it. */
int pydb__wal_lock(pydb_db *db, int64_t deadline, int gc, pydb_error *err);
void pydb__wal_unlock(pydb_db *db);

/* The sync fence (wal.c, "sync fence"): pydb__wal_fence_hold before each
 * fdatasync of a frame and pydb__wal_fence_release once its failure, if
 * any, is named in the commit header (txn.c, log_sync), both with the
 * handle's lsmutex held (a new description of the log passes the fence
 * in pydb__wal_open and pydb__wal_lock).  pydb__wal_forked: in a fork()ed
 * child (gc.c), the handle takes descriptions of the log and of the
 * fence of its own, so that a parent that dies leaves none of its locks
 * held by the child.  Best effort: none fails. */
void pydb__wal_fence_hold(pydb_db *db);
void pydb__wal_fence_release(pydb_db *db);
void pydb__wal_forked(pydb_db *db);

/* Append a sealed frame after the log's last frame (its offset in *at:
 * the applied length where the commit header has one, else the file's
 * size), unsynced: the caller fdatasyncs it (txn.c, log_sync) where that
 * is its commit point.  `keep`: the frame stays for a checkpoint
 * (txn.c), so a file without room for it grows by zeros to a multiple
 * of PYDB_WAL_GROW (best effort).  A failed write of the frame
 * truncates the log back to *at (best effort: recovery drops a torn
 * frame) and leaves the files untouched.  A frame that would not follow
 * the commit header's log (a file shorter than its applied length: a
 * process without a usable header emptied it) has its synced length
 * cleared first: it is of another log.  The caller holds the writer
 * lock and has recovered (nothing past the applied length). */
int pydb__wal_append(pydb_db *db, pydb_buf *log, int keep, int64_t *at,
                     pydb_error *err);
/* After the kept frame `log` appended at `at` was applied: the commit
 * header's applied length becomes its end, and the log's first frame id
 * this frame's when it is the first (shm.h).  No-op without a usable
 * header. */
void pydb__wal_mark_applied(pydb_db *db, int64_t at, const pydb_buf *log);

/* The name under which whole file `path` goes into the log `wal_path`:
 * its path relative to the log's folder, both resolved (realpath; the
 * file's folder must exist).  0, or -1 when it lies outside that folder
 * and its subfolders, or does not fit in `cap`.  Replay resolves the
 * name against the log's folder again (wal.c, wal_file_path), so a log
 * written by a process in one working folder replays in another, and a
 * log cannot name a file outside its database's folder. */
int pydb__wal_file_name(char *out, size_t cap, const char *wal_path,
                        const char *path);

/* Empty the log after its commit was applied to the files and synced
 * (files mode).  Best effort, not synced: if it fails, or a power cut
 * undoes it, the log still holds applied commits, which the next
 * transaction or open replays harmlessly -- as long as only commits
 * changed the files since: hence the checkpoint before other changes. */
void pydb__wal_discard(pydb_db *db);

/* With the writer lock held: replay the log if it may hold a commit not
 * in the files (the header does not vouch for it: wal.c, wal_pending),
 * then empty it durably; sync the files and empty the log, replaying
 * nothing, if it was cut short after its frames were applied in this
 * boot (wal.c, wal_unapplied); else nothing.  A torn last frame is
 * dropped.  A failed fsync sets *fsync_failed.  0 or a PYDB error. */
int pydb__wal_recover(const pydb_wal_files *w, int *fsync_failed,
                      pydb_error *err);

/* With the writer lock held: a checkpoint.  Replay what may be missing
 * (as pydb__wal_recover), fdatasync the .mst and .xrf when the log holds
 * commits, fsync each whole file it names (a MANIFEST, a native index's
 * small segments) and their folders, then empty the log and fdatasync
 * it -- whatever sync says:
 * before a step that changes the files outside the log (a compaction's
 * swap, the native index's removals), a power cut must not bring back
 * applied commits whose replay would write records and XRF blocks at
 * offsets of the old files, or a MANIFEST naming removed segments.  A
 * failed fsync sets *fsync_failed.  0 or a PYDB error. */
int pydb__wal_checkpoint(const pydb_wal_files *w, int *fsync_failed,
                         pydb_error *err);

/* A read-only open recovers (pydb__wal_recover) a log that may hold
 * commits not in the files, or was cut short after its frames were
 * applied (the header `shm`, or NULL, says), if it can write the files
 * (mst/xrf: the paths pydb_open() found) and no writer holds the lock. */
int pydb__wal_recover_readonly(const char *base, const char *mst,
                               const char *xrf, struct pydb_shm *shm,
                               pydb_error *err);

/* ---- a compaction's swap (compact.c; docs/compaction.md) ---- */

/* The files a compaction of mst/xrf replaces (tgt_*: each path, or the
 * file its symbolic links lead to), and its new files and swap marker
 * beside those: 0, or -1 when a name does not fit in cap bytes. */
int pydb__swap_names(char *new_mst, char *new_xrf, char *marker,
                     char *tgt_mst, char *tgt_xrf, size_t cap,
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
                       struct pydb_shm *shm, int *finished, pydb_error *err);

#endif
