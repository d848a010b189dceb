/*
 * compact.h - the master file's collection job (compact.c): the latest
 * versions copied into a new .mst/.xrf pair that replaces the old one
 * atomically, as CISIS's mxcp copies a master file, in bounded steps.
 *
 * Depends on: pydb_int.h.  Used by gc.c (the collector) and stat.c.
 */
#ifndef PYDB_COMPACT_H
#define PYDB_COMPACT_H

#include "pydb_int.h"

/* Garbage of the master file as the writers count it (cheap: no walk):
 * versions superseded and their bytes since the files were last
 * replaced.  0 and 0 in files mode. */
void pydb__compact_garbage(pydb_db *db, int64_t *versions, int64_t *bytes);

/* Whether a compaction should start now: there is master-file garbage
 * (counted, or db->compact_dead) and no registered reader pins it;
 * `idle` (no commit for a while, or pydb_gc_collect) lowers the
 * threshold to any garbage at all. */
int pydb__compact_wanted(pydb_db *db, int idle);

/* Without idle, a compaction starts where the garbage is a share of the
 * live bytes: garbage * SHARE >= live (and stat.c's dead space, for
 * pydb_gc_find_dead_space, the same share). */
#define PYDB_COMPACT_GARBAGE_SHARE 4

/* The longest a swap waits for readers behind the latest commit (ms). */
#define PYDB_COMPACT_DRAIN_MAX_MS 1000

/* One bounded step of the job (at most `budget` records copied; the
 * last step replaces the files under the writer lock, waiting for it at
 * most `lock_ms`, and then, the lock held, for readers behind the latest
 * commit at most `drain_ms`: 0 for none, PYDB_COMPACT_DRAIN_MAX_MS at
 * most).  *more: the job is not finished.  *rep gets what was
 * reclaimed when the files were replaced.  A failure abandons the job
 * (its new files removed) and leaves the database as it was. */
int pydb__compact_step(pydb_db *db, int budget, int lock_ms, int drain_ms,
                       int *more, pydb_gc_report *rep, pydb_error *err);

/* Abandon a job in progress (close, policy none): removes its files. */
void pydb__compact_abort(pydb_db *db);

#endif /* PYDB_COMPACT_H */
