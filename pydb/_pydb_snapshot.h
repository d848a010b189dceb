/*
 * _pydb_snapshot.h - the Snapshot object (a pydb_snapshot for Python) as
 * the other files of the binding see it: the Database releases its live
 * snapshots when it closes, its RecordIterator reads through one, and the
 * validator and the search may run on one.
 */
#ifndef PYDB_BINDING_SNAPSHOT_H
#define PYDB_BINDING_SNAPSHOT_H

#include "_pydb_database.h"

typedef struct SnapshotObject {
    PyObject_HEAD
    pydb_snapshot *snap;   /* NULL once released (close(), the database's
                              close(), GC)                               */
    handle_guard guard;    /* operations in flight; closing               */
    DatabaseObject *db;    /* strong reference: the database outlives its
                              snapshots                                   */
    /* The database's list of live snapshots (DatabaseObject.snapshots),
     * changed with the GIL held; pprev is NULL when not linked. */
    struct SnapshotObject *next, **pprev;
    /* The index view as of the commit (an IndexObject), taken with the
     * snapshot (pydb_snapshot_index works only for recent commits), or
     * NULL: no index was given, or view_rc says why it failed. */
    PyObject *view;
    int view_rc;
    pydb_error view_err;
    PyObject *weakreflist;
} SnapshotObject;

/* 0 if `s` and its database are open, else -1 with ClosedError set.
 * Called last before UNLOCKED(), as database_check_open(). */
int snapshot_check_open_(module_state *st, SnapshotObject *s,
                         guard_pins *pins);
#define snapshot_check_open(st, s) snapshot_check_open_(st, s, PINS_)

/* The database's close(): release every live snapshot of `db`, each
 * after waiting (GIL released) for the operations in flight on it.
 * Called after db->guard.closing is set and its own operations are done,
 * before pydb_close() (pydb.h: every snapshot first). */
void snapshots_release_all(DatabaseObject *db);

/* A new snapshot of `db` (the latest published commit), as an instance
 * of `tp` (the Snapshot type or a subclass), with the view of `index` (an
 * IndexObject of db, or NULL) as of that commit.  NULL + exception. */
PyObject *snapshot_take(PyTypeObject *tp, DatabaseObject *db,
                        PyObject *index);

/* Take a snapshot of `db` and, with `ix`, the view of ix as of it,
 * retaking the snapshot while a native index has moved past it (about
 * 2 s, then *view_rc = PYDB_ELOCKED).  GIL released: plain C.  *out is
 * written as soon as a snapshot is held; the take's result is returned,
 * the view's in *view_rc (view_err may be err). */
int take_with_view(pydb_snapshot **out, pydb_index **view, int *view_rc,
                   pydb_error *view_err, pydb_db *db, pydb_index *ix,
                   pydb_error *err);

/* close(): wait for the operations in flight on `s`, then release it
 * (GIL held; nothing if released or being closed). */
void snapshot_close_handle(SnapshotObject *s);

/* mfns(): the MFNs from `start` as of the snapshot `s`, or (s NULL) as
 * the latest commit of `db` shows each part (list of int; NULL +
 * exception). */
PyObject *mfn_list(DatabaseObject *db, SnapshotObject *s,
                   int include_deleted, int start);

#endif
