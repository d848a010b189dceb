/*
 * _pydb_database.h - the Database object (a pydb_db for Python), as the
 * other files of the binding see it: Transaction, the native-index attach,
 * search and the validator work on its handle.
 */
#ifndef PYDB_BINDING_DATABASE_H
#define PYDB_BINDING_DATABASE_H

#include "_pydb_module.h"
#include "_pydb_record.h"

struct SnapshotObject;   /* _pydb_snapshot.h */

typedef struct {
    PyObject_HEAD
    pydb_db *db;
    handle_guard guard;  /* operations in flight; closing               */
    PyObject *encoding;  /* str */
    PyObject *errors;    /* str */
    PyObject *path;      /* str, as given */
    PyObject *mst_path;  /* str: the master file, named by decode errors */
    record_codec codec;  /* how `encoding` decodes (codec_resolve)      */
    PyObject *weakreflist;
    pydb_txn *txn;       /* the open write transaction (_pydb_transaction.c),
                            aborted by close(); changed with the GIL held */
    PyObject *hooked_index; /* IndexObject attached as the commit hook
                            (_pydb_index.c), or NULL; its pydb_index is
                            freed only after pydb_close() */
    struct SnapshotObject *snapshots; /* live snapshots (borrowed: each
                            holds a reference to the database); released
                            by close() before pydb_close()            */
} DatabaseObject;

/* 0 if `self` is open, else -1 with ClosedError set.  Called last before
 * UNLOCKED(): nothing may run Python code between the check and the core
 * call (a __index__ could close the database). */
int database_check_open_(module_state *st, DatabaseObject *self,
                         guard_pins *pins);
/* In a function that declared PIN_SCOPE (_pydb_module.h): the check pins
 * the handle on a free-threaded build until that function returns. */
#define database_check_open(st, self) database_check_open_(st, self, PINS_)

/* Convert a Python int to a 1-based MFN (NotFoundError outside
 * 1..2^31-1, TypeError for non-ints).  0 on success, -1 on error. */
int parse_mfn(module_state *st, PyObject *arg, int32_t *mfn);

/* What Database and Snapshot answer alike (GIL held):
 *   xrf_entry_dict   the dict of xrf_entry(): raw, state, offset, new,
 *                    pending
 *   counts_dict      the dict of counts(): active, logically_deleted,
 *                    physically_deleted, unused, new, pending
 *   mfns_from_seq    a PyMem array of the MFNs of an iterable (parse_mfn
 *                    each); NULL + exception
 *   records_iter_new the RecordIterator over `db`, or over the snapshot
 *                    `snap` of it when not NULL
 *   mfn_start        a listing's start argument as an MFN
 *   records_args     records()'s arguments
 *   records_read     read(): the Record of the MFN `arg`, as of `snap`
 *                    when not NULL, else of the latest commit
 *   records_read_many read_many(): the list of the Records of the MFNs
 *                    of the iterable `arg`, all as of one commit (`snap`'s,
 *                    or a snapshot taken for the call) */
PyObject *xrf_entry_dict(const pydb_xrf_entry *x);
PyObject *counts_dict(const pydb_counts *c);
int32_t *mfns_from_seq(module_state *st, PyObject *arg, Py_ssize_t *n);
PyObject *records_iter_new(DatabaseObject *db, struct SnapshotObject *snap,
                           int32_t start, int include_deleted,
                           int skip_damaged);
/* *out = a listing's `start` argument (any int; NULL: not given, 1) as
 * the first MFN to look at: below 1 is 1, above the largest MFN the
 * largest (a listing that finds nothing; it raised OverflowError past
 * 2^31).  0, or -1 and TypeError for what is not an int. */
int mfn_start(PyObject *start, int32_t *out);
/* records()'s arguments (start=1, deleted=False, skip_damaged=False,
 * keywords only) into *from, *deleted, *skip: 0, or -1 and an exception
 * (Database.records and Snapshot.records). */
int records_args(PyObject *args, PyObject *kw, int32_t *from, int *deleted,
                 int *skip);
PyObject *records_read(DatabaseObject *db, struct SnapshotObject *snap,
                       PyObject *arg);
PyObject *records_read_many(DatabaseObject *db, struct SnapshotObject *snap,
                            PyObject *arg);

#endif
