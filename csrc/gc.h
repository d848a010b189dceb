/*
 * gc.h - the garbage collector of a handle (gc.c): its policy, its
 * thread, and the calls the rest of the core makes into it.
 *
 * The collector runs the collection jobs in bounded steps: the native
 * index's (the commit hook's collect(): merges dropping dead postings,
 * segment files no reader pins) and the master file's (compact.c:
 * a copy of the latest versions into new files that replace the
 * .mst/.xrf pair atomically).  A step is done by the collector thread
 * (policies background, combined), by a reader that met garbage
 * (cooperative, combined: pydb__gc_met) or by pydb_gc_collect(); a
 * handle's steps never run on two threads at once.
 *
 * Depends on: pydb_int.h, compact.c, the commit hook (pydb.h group 5).
 */
#ifndef PYDB_GC_H
#define PYDB_GC_H

#include "pydb_int.h"

typedef struct pydb_gc pydb_gc;

/* At open (handle.c), after the handle is complete: the collector with
 * the policy pydb_options.flags names (PYDB_OPEN_GC(policy), pydb.h
 * group 9), else PYDB_GC_DEFAULT; a writable handle whose policy wants
 * one starts the thread now (a read-only handle never does).
 * PYDB_ENOMEM, PYDB_EIO (the thread could not start). */
int pydb__gc_open(pydb_db *db, pydb_error *err);
/* At close, before the handle's files go: stops and joins the thread. */
void pydb__gc_close(pydb_db *db);
/* pydb__gc_open installs the collector's listeners in db->gc_ops
 * (pydb_int.h: pydb__gc_notify, _met, _pause, _resume), through which
 * the layers below signal it. */

/* The handle's record (stat.c): collections completed, the Unix time of
 * the last (0: none), what it did, the last failed step's message ("":
 * none) into last_error[cap], and whether work may be pending
 * (pydb_stat.gc_pending). */
void pydb__gc_record_get(const pydb_db *db, uint64_t *collections,
                         double *last_time, pydb_gc_report *last,
                         char *last_error, size_t cap, int *pending);

/* Set db->compact_dead (under the step lock; stat.c's
 * pydb_gc_find_dead_space): a compaction is wanted for dead space no
 * writer counted, until one starts or a pydb_gc_collect_since completes. */
void pydb__gc_want_dead(pydb_db *db, int dead);

#endif /* PYDB_GC_H */
