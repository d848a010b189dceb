/*
 * shm.h - the commit header <base>.shm: the latest committed state of a
 * database, published by its writer, and the reader table, shared by
 * every process through a memory mapping (shm.c).
 *
 * The model is LMDB's lock file (mdb.c: "Reader Lock Table", the meta
 * pages and mdb_txn_renew0's registration loop, mdb_reader_check's dead
 * readers) and SQLite's WAL index header (wal.c: two copies of the
 * header, read marks).  File format (native byte order and alignment: the
 * file is shared by processes of one machine, never copied; all sizes in
 * bytes):
 *
 *   0      magic "PYDBSHM1"
 *   8      u32 version (PYDB_SHM_VERSION)
 *   12     u32 bytes before the reader table (PYDB_SHM_HEAD = 4096)
 *   16     u32 reader slots (PYDB_SHM_READERS)
 *   20     u32 bytes per reader slot (64)
 *   24     u64 latest: the commit number of the newest published state
 *          (0: none yet); changes only after its state slot is complete
 *   32     u64 creation stamp (wall clock, ns; informational)
 *   40     u64 applying: the commit a writer is applying (0: none)
 *   48     i32 the applying writer's pid     56 u64 its start time
 *   64     state slot 0, 192 state slot 1 (128 bytes each): the state
 *          of commit n lives in slot n % 2 (a double buffer: the slot of
 *          the latest commit is never written while it is the latest):
 *            0 u64 commit (0 while the slot is being written)
 *            8 i32 NXTMFN, NXTMFB, NXTMFP, RECCNT
 *           24 i64 mst_end, mst_size, xrf_size
 *           48 u64 native index MANIFEST generation (0: unknown)
 *           56 u64 master file generation: compactions that replaced
 *              the .mst/.xrf pair so far (gc.c)
 *           64..119 0
 *          120 u32 CRC-32C of bytes 0..119    124 u32 0
 *   320    u64 master-file garbage: record versions superseded since the
 *          files were last replaced (compact.c; every pydb writer adds
 *          to it under the writer lock when it publishes a commit; a
 *          compaction sets it to 0)     328 u64 their bytes
 *   336    u64 the master file generation of the latest published state
 *          (a copy of its file_gen, stored after `latest`): plain reads
 *          compare it with their handle's files in one load
 *   344    u64 the commit the last compaction replaced (0: none)
 *   352    the state that compaction published (64 bytes, pydb_state as
 *          in memory): a snapshot of commit [344] reads on in it
 *          (docs/compaction.md)
 *   416    u64 the collector lease: pid << 32 | heartbeat (gc.c; see
 *          pydb__shm_lease_take)
 *   424    u32 the writer lock's wake word: bumped each time a writer
 *          releases the lock, a futex that waiting writers sleep on
 *          (pydb__shm_writer_wait)      428 u32 writers waiting on it
 *   432    i32 pid of a collector step waiting for the writer lock, which
 *          other writers let go first (pydb__shm_writer_claim; 0: none)
 *   436    u32 the id of the log's first frame (its trailer's CRC: wal.h)
 *          when [440] is not 0: the log that length is of
 *   440    u64 the log's applied length: bytes of <base>.wal, whole
 *          commits from its start, that writers of this boot have applied
 *          to the files (pydb__shm_log_applied); valid only while [448]
 *          names the running kernel's boot
 *   448    the boot that [440] belongs to: /proc/sys/kernel/random/boot_id
 *          (36 characters, 0 before: none)
 *   484    u32 0
 *   488    u64 the log's synced mark: the id of a log's first frame << 32
 *          | how many bytes of that log from its start an fdatasync
 *          covered (pydb__shm_log_synced; 0: none)
 *   496    i32 pid of the sync lock's holder (0: none; -1: a holder that
 *          kept it too long, not waited for; txn.c, "One fsync for many
 *          commits")     500 u32 the id of a log an fdatasync of its
 *          frames failed on (0: none): the log must be replayed
 *   504    u64 the sync lock holder's start time (as a reader slot's)
 *   512    u32 the sync wake word: bumped each time a log sync ends, a
 *          futex that commits waiting for one sleep on
 *          (pydb__shm_sync_wait)     516 u32 commits sleeping on it
 *   520    the direct-commit mark (pydb__shm_direct_set): i64 where a
 *          direct commit (wal.h) writes its records before its commit
 *          point, plus 1 (0: none); 528 u64 the master file generation,
 *          536 i64 the committed end of records and 544 i32 NXTMFN of
 *          the state it started from; 548 u32 0
 *   552..4095 0
 *   4096   reader slots, 64 bytes each:
 *            0 i32 pid (0: free; negative: being freed by process -pid)
 *            4 u32 0
 *            8 u64 process start time (/proc/<pid>/stat field 22; 0
 *              unknown): a pid reused by a new process is not mistaken
 *              for the reader that died
 *           16 u64 the commit the reader reads, plus 1 (0 while it
 *              registers)
 *           24 i64 that commit's end of records (mst_end; 0 until it is
 *              stored): what statistics call pinned (stat.c)
 *           32 u64 when it registered: pydb__now_ms(), CLOCK_MONOTONIC
 *              (0: unknown; a pydb before 2026-12-06 left it 0):
 *              how long an old reader has been reading (compact.c)
 *           40..63 0
 *
 * A reader copies the latest state without a lock: it loads `latest`,
 * copies slot latest % 2, and keeps the copy if the slot's commit field
 * read before and after the copy is `latest` and the CRC matches (else it
 * tries again; the writer would have to publish twice during the copy).
 * A writer killed while it writes a slot leaves `latest` on the other,
 * complete slot: readers never wait for a dead writer.
 *
 * Registration (pydb__shm_pin): claim a free slot with a compare-and-swap
 * of its pid, store the latest commit, then check that it is still the
 * latest (else store the new one and check again).  A full fence on both
 * sides (the writer publishes `latest`, fences, then scans) means a
 * writer that scans after publishing commit n+1 sees every reader still
 * on commit n.
 *
 * The file is created by the first writer (a new, empty file is laid out
 * by whoever opens it first); a damaged one (wrong magic, a future
 * version, too short, another geometry) is reinitialised only by the
 * writer, holding the writer lock (pydb__shm_reset), and is ignored by
 * readers until then.  Without the file (read-only media) a handle reads
 * the committed state from the control record (files mode).
 *
 * Depends on: util.h (CRC-32C), error.c, vfs.c.  Used by handle.c (open,
 * close), read.c (the state a read uses), txn.c and wal.c (publishing,
 * rebuilding) and the native index (segment files a reader may need).
 */
#ifndef PYDB_SHM_H
#define PYDB_SHM_H

#include "pydb_int.h"

#define PYDB_SHM_MAGIC "PYDBSHM1"
#define PYDB_SHM_VERSION 2
#define PYDB_SHM_HEAD 4096
#define PYDB_SHM_READERS 960
#define PYDB_SHM_SLOT 64
#define PYDB_SHM_SIZE (PYDB_SHM_HEAD + PYDB_SHM_READERS * PYDB_SHM_SLOT)

typedef struct pydb_shm pydb_shm;

/* Open the commit header `path` (<base>.shm; pydb__shm_path) and map it;
 * with `create` (writers) create it if missing, with the mode of the
 * master file `mst_path` (readers never create files beside a database).
 * PYDB_OK with *out = NULL when the file is missing (and not created) or
 * cannot be opened read-write (read-only media, permissions): the caller
 * works in files mode.
 * A file that exists but is not valid is still returned (mapped if it is
 * long enough), with pydb__shm_valid() false.  Errors: PYDB_ENOMEM. */
int pydb__shm_open(pydb_shm **out, const char *path, const char *mst_path,
                   int create, pydb_error *err);
void pydb__shm_close(pydb_shm *s);
/* 1 if the file has this version's layout (magic, version, geometry). */
int pydb__shm_valid(const pydb_shm *s);
/* With the writer lock held: make an invalid file valid again (a new
 * layout, no state, an empty reader table).  PYDB_EIO on failure. */
int pydb__shm_reset(pydb_shm *s, pydb_error *err);

/* Copy the latest published state into *st: 0, or -1 when the file is
 * not valid or holds no complete state.  Lock-free. */
int pydb__shm_state(pydb_state *st, pydb_shm *s);
/* The commit number of the latest published state (0: none). */
uint64_t pydb__shm_latest(const pydb_shm *s);
/* With the writer lock held: publish *st as commit latest + 1 (sets
 * st->commit).  No-op on an invalid file. */
void pydb__shm_publish(pydb_shm *s, pydb_state *st);

/* Check the layout again (another process may have damaged or rebuilt
 * the file since it was opened; a file too short then may be mapped
 * now). */
void pydb__shm_revalidate(pydb_shm *s);

/* With the writer lock held: free reader slots that hold garbage (a
 * negative pid, a pid without start time, a commit never published, a
 * free slot with fields set) seen the same at this sweep and the one
 * before; a live process leaves such a slot for nanoseconds only. */
void pydb__shm_sweep(pydb_shm *s);

/* The applying marker: a writer sets it (on = 1) once its commit is
 * durable in the log and before it writes the first file, and clears it
 * (on = 0) when it has published (its pid and start time are stored
 * beside it, for a person reading the header); a recovery's replay does
 * the same (wal.c).  While it is set for commit latest + 1, a control
 * record newer than the header is that commit being applied -- by a live
 * writer, which publishes it in a moment, or by one killed (or failed)
 * while it applied, whose log holds the commit for the next recovery to
 * finish and publish; either way the header's latest state is still
 * whole to read (nothing of a published version is overwritten).
 * Otherwise such a control record was written by someone that does not
 * publish (another program, an older pydb, a writer that could not open
 * the header), and readers stop trusting the header.  The price: while a
 * dead writer's marker stands, such a program's writes go unnoticed
 * until a pydb writer recovers. */
void pydb__shm_applying(pydb_shm *s, int on);
/* The commit the marker names (0: none, or an invalid file): set by a
 * writer or a replay for the commit after the latest and not cleared
 * (alive and applying, or killed or failed while it applied, or a
 * replay that could not publish: the next writer's open or transaction
 * publishes). */
uint64_t pydb__shm_applying_commit(pydb_shm *s);

/* The direct-commit mark (offset 520): where a direct commit writes its
 * records past the committed end (that end, or the end of the file after
 * another program's bytes), and the state it started from.  A writer
 * holding the writer lock sets it before it writes them, synced to the
 * disk with the header's page (msync) so that it outlives the records,
 * which are fdatasync'ed; and clears it once that commit is logged or its
 * records are put back.  A commit killed in between leaves its records
 * with the mark naming where they start, so that the next transaction
 * clears them as pydb's own -- only while the files still hold the state
 * it names; bytes past the end without such a mark are another program's
 * (WinISIS leaves older versions there), which pydb never writes over
 * (txn.c, check_tail).  No-ops, and no mark, on an invalid file. */
typedef struct pydb_direct_mark {
    int64_t start;      /* the records' first byte in the .mst         */
    int64_t end;        /* the committed end of records then           */
    int32_t next_mfn;   /* NXTMFN then                                 */
    uint64_t gen;       /* the master file generation then             */
} pydb_direct_mark;
void pydb__shm_direct_set(pydb_shm *s, const pydb_direct_mark *m);
void pydb__shm_direct_clear(pydb_shm *s);
/* 1 with *m when a mark is set, else 0. */
int pydb__shm_direct_get(pydb_shm *s, pydb_direct_mark *m);

/* Register a reader at the latest commit (LMDB's registration loop);
 * *slot gets the claimed slot, *st the state of that commit (st->commit
 * == the registered commit; when the file holds no state, st->commit is
 * 0 and the rest is left as it was).  PYDB_ELOCKED when every slot is
 * held by a live process; -1 (no error set) on an invalid file. */
int pydb__shm_pin(int *slot, pydb_state *st, pydb_shm *s, pydb_error *err);
/* Release a slot from pydb__shm_pin (slot < 0: nothing). */
void pydb__shm_unpin(pydb_shm *s, int slot);
/* The oldest commit any live registered reader reads, or `latest` when
 * none reads an older one; slots of dead processes are cleared on the
 * way (kill(pid, 0) and the start time).  *readers (or NULL) gets the
 * number of live registered readers. */
uint64_t pydb__shm_oldest(pydb_shm *s, int *readers);
/* The earliest pydb__now_ms() (CLOCK_MONOTONIC, one clock for every
 * process) at which a live registered reader that reads a commit behind
 * the latest registered: how long the oldest such reader has been
 * reading.  INT64_MAX: none is behind; 0: one's time is unknown (a slot
 * of a pydb that did not store it). */
int64_t pydb__shm_behind_since(pydb_shm *s);
/* The smallest end of records (mst_end) of a live registered reader:
 * versions a commit wrote at or after it are invisible to that reader,
 * so the versions they superseded are pinned.  INT64_MAX: no registered
 * reader; 0: one is registering (everything counts as pinned). */
int64_t pydb__shm_oldest_end(pydb_shm *s);

/* ---- garbage and compactions (compact.c; docs/compaction.md) ---- */

/* With the writer lock held: add to the master file's garbage counters. */
void pydb__shm_garbage_add(pydb_shm *s, int64_t versions, int64_t bytes);
/* The counters (0, 0 on an invalid file). */
void pydb__shm_garbage(pydb_shm *s, int64_t *versions, int64_t *bytes);
/* With the writer lock held, when a compaction replaces the files. */
void pydb__shm_garbage_reset(pydb_shm *s);
/* The address of the file-generation word (NULL: invalid file) and its
 * value (0 on an invalid file). */
const uint64_t *pydb__shm_gen_word(const pydb_shm *s);
uint64_t pydb__shm_file_gen(const pydb_shm *s);
/* With the writer lock held, before publishing `after`: the compaction
 * replacing commit `from`'s files publishes `after`. */
void pydb__shm_swap_set(pydb_shm *s, uint64_t from, const pydb_state *after);
/* The last compaction's record: 0, or -1 when there is none. */
int pydb__shm_swap_get(pydb_shm *s, uint64_t *from, pydb_state *after);

/* ---- the collector lease (gc.c) ----
 * One process collects at a time: the word holds the collecting pid and
 * the time of its last step (deciseconds of CLOCK_MONOTONIC, system-wide
 * on Linux).  pydb__shm_lease_take() takes or refreshes it for `pid` at
 * `now`: 1 when pid holds it now, 0 when another live process took a
 * step less than `stale` deciseconds ago (a silent holder is replaced,
 * and one that is gone at once: no such process, or a zombie, as for
 * pydb__shm_process_gone()).  pydb__shm_lease_drop() lets it go if pid
 * holds it.  pydb__shm_lease_holder(): the pid holding it (0: none). */
int pydb__shm_lease_take(pydb_shm *s, int32_t pid, uint32_t now,
                         uint32_t stale);
void pydb__shm_lease_drop(pydb_shm *s, int32_t pid);
int32_t pydb__shm_lease_holder(pydb_shm *s);

/* ---- waiting for the writer lock (wal.c) ----
 * The writer lock is an OFD lock on the log (wal.c), which the kernel
 * releases when its process dies; these calls only make the wait short.
 * A writer that found the lock taken calls pydb__shm_writer_ticket()
 * (it counts itself as waiting and reads the wake word), tries the lock
 * once more (so a release between the two tries is not missed), then
 * pydb__shm_writer_wait(): it sleeps on the wake word until a writer's
 * pydb__shm_writer_released() bumps it and wakes one waiter, or `us`
 * microseconds pass (a release by a process that died, or by an older
 * pydb, wakes nobody), and stops counting itself (`us` 0: it only stops
 * counting itself: the second try took the lock).  Without a valid
 * header the ticket is 0 and the wait is a plain sleep of `us`. */
uint32_t pydb__shm_writer_ticket(pydb_shm *s);
void pydb__shm_writer_wait(pydb_shm *s, uint32_t ticket, unsigned us);
void pydb__shm_writer_released(pydb_shm *s);
/* How long a step of the collector thread waits for the writer lock
 * (gc.c), and so how long its claim (below) lasts while it lives: a
 * writer checks that the claimer lives only when a claim lasts longer
 * (wal.c). */
#define PYDB_GC_LOCK_WAIT_MS 100
/* A collector step of process `pid` waits for the writer lock: other
 * processes' writers stand back while the claim lasts (wal.c bounds how
 * long).  One claim at a time (a second claimer waits like any writer);
 * unclaim (only the claimer's pid clears it) wakes every sleeper.
 * claimed(): the claiming pid, 0 for none.  No-ops without a valid
 * header. */
/* 1 if process `pid` is gone: no such process, or one that exited and
 * waits to be reaped (a zombie holds nothing). */
int pydb__shm_process_gone(int32_t pid);
void pydb__shm_writer_claim(pydb_shm *s, int32_t pid);
void pydb__shm_writer_unclaim(pydb_shm *s, int32_t pid);
int32_t pydb__shm_writer_claimed(pydb_shm *s);

/* The log's applied length (wal.c: a sync=True commit leaves its log
 * in place until a checkpoint) and the id of the log's first frame.
 * Within one boot the page cache holds every write a process made, even
 * one killed since, so a log that starts with that frame and holds
 * nothing past that length but zeros needs no replay (wal.h); after a
 * reboot (a power cut) nothing is known and the whole log is replayed.
 * The first frame's id tells a log some process without a usable header
 * emptied and wrote again (it cannot set these) from the one the length
 * is of.  pydb__shm_log_applied(): 1 and *len, *first when the header
 * is valid and the values belong to this boot; 0 otherwise (also when
 * the boot cannot be told: no /proc).  pydb__shm_log_set(), with the
 * writer lock held: store them for this boot (len 0, first 0 before the
 * log is truncated, so that a writer that dies between the two leaves
 * no length a new log could match).  pydb__shm_log_usable(): 1 when the
 * values can be kept (valid header, boot known).  No-ops / 0 on NULL. */
int pydb__shm_log_applied(pydb_shm *s, uint64_t *len, uint32_t *first);
void pydb__shm_log_set(pydb_shm *s, uint64_t len, uint32_t first);
int pydb__shm_log_usable(pydb_shm *s);

/* The log's synced mark (txn.c, "One fsync for many commits"): a commit
 * that defers its fsync past the writer lock asks whether another's
 * fdatasync already covered its frame.  pydb__shm_log_synced(): 1 if an
 * fdatasync of this boot covered bytes [0, end) of the log whose first
 * frame has id `first`, the header's log, on which no fdatasync failed.
 * pydb__shm_log_synced_to(): after an fdatasync that covered [0, len) of
 * that log, raise the mark (lock-free; a mark of another log is
 * replaced; lengths past 4 GiB are not kept).  pydb__shm_log_set() drops
 * a mark of another log.  No-ops / 0 without a usable header. */
int pydb__shm_log_synced(pydb_shm *s, uint32_t first, uint64_t end);
/* How many bytes of the header's log from its start an fdatasync of this
 * boot covered, by the synced mark (0: none known, or no usable header);
 * what a frame built now says it was written after (wal.h, header byte
 * 36). */
uint64_t pydb__shm_log_synced_len(pydb_shm *s);
void pydb__shm_log_synced_to(pydb_shm *s, uint32_t first, uint64_t len);

/* A failed fdatasync of the log's frames: pydb__shm_log_suspect_set()
 * names the header's log suspect (lock-free, at once: the header counts
 * frames in its length that the disk may lack); pydb__shm_log_suspect():
 * 1 while the header's log is the one named.  Recovery then replays it
 * (wal.c, wal_pending), which gives a new log; a commit whose own
 * fdatasync succeeds behind it is not acknowledged (txn.c, log_sync). */
int pydb__shm_log_suspect(pydb_shm *s);
void pydb__shm_log_suspect_set(pydb_shm *s);

/* The sync lock: held (`lock` 1) by a commit while it fdatasyncs the log
 * for its frame, so that commits that wait for it find their frames
 * covered instead of each making its own (an OFD lock on byte 1 of the
 * file; the holder's pid and start time in the header).  Tried once: 0
 * taken (or, `lock` 0, let go), 1 held by another, 2 held by a process
 * that is gone or was found stale, -1 not possible (no file).  A waiter
 * polls, and syncs without it when the holder is gone or after a bound,
 * after which pydb__shm_sync_lock_stale() tells later waiters not to
 * wait for that holder (the lock belongs to the open file description:
 * a fork()ed child that keeps the file open keeps a dead parent's lock,
 * and a stopped holder keeps it too). */
int pydb__shm_sync_lock(pydb_shm *s, int lock);
void pydb__shm_sync_lock_stale(pydb_shm *s);
/* Waiting for a log sync, as for the writer lock (above): a commit that
 * waits counts itself and takes the wake word (ticket) before it looks at
 * the mark and the lock, then sleeps until pydb__shm_sync_done() -- after
 * each fdatasync of the log that may have raised the mark or let the
 * lock go -- bumps the word, or `us` microseconds pass (`us` 0: it only
 * stops counting itself).  Without a valid header: a plain sleep. */
uint32_t pydb__shm_sync_ticket(pydb_shm *s);
void pydb__shm_sync_wait(pydb_shm *s, uint32_t ticket, unsigned us);
void pydb__shm_sync_done(pydb_shm *s);

#endif
