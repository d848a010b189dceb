/*
 * _pydb_database.h - the Database object (a pydb_db for Python), as the
 * other files of the binding see it: Transaction, the native-index attach,
 * search and the validator work on its handle.
 */
#ifndef PYDB_BINDING_DATABASE_H
#define PYDB_BINDING_DATABASE_H

#include "_pydb_module.h"

typedef struct {
    PyObject_HEAD
    pydb_db *db;
    handle_guard guard;  /* operations in flight; closing               */
    PyObject *encoding;  /* str */
    PyObject *errors;    /* str */
    PyObject *path;      /* str, as given */
    PyObject *weakreflist;
    pydb_txn *txn;       /* the open write transaction (_pydb_transaction.c),
                            aborted by close(); changed with the GIL held */
    PyObject *hooked_index; /* IndexObject attached as the commit hook
                            (_pydb_index.c), or NULL; its pydb_index is
                            freed only after pydb_close() */
} DatabaseObject;

/* 0 if `self` is open, else -1 with ClosedError set.  Called last before
 * UNLOCKED(): nothing may run Python code between the check and the core
 * call (a __index__ could close the database). */
int database_check_open(module_state *st, DatabaseObject *self);

/* Convert a Python int to a 1-based MFN (NotFoundError outside
 * 1..2^31-1, TypeError for non-ints).  0 on success, -1 on error. */
int parse_mfn(module_state *st, PyObject *arg, int32_t *mfn);

#endif
