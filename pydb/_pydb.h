/*
 * _pydb.h - what the files of the binding (pydb/_pydb*.c) share: the
 * module state, the Database object, the GIL-release macro and the one
 * error mapping.  Each area of the binding lives in its own file
 * (_pydb.c: Database/Record/iteration; further areas in _pydb_<area>.c)
 * and adds its types and functions to the module from an exec hook
 * called by module_exec() in _pydb.c.
 */
#ifndef PYDB_BINDING_H
#define PYDB_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>
#include "pydb.h"
#include "pydb_int.h"

typedef struct {
    PyTypeObject *database_type;
    PyTypeObject *record_type;      /* base Record type                   */
    PyTypeObject *record_class;     /* class instantiated (pydb.Record)   */
    PyTypeObject *iter_type;
    PyTypeObject *field_type;       /* structseq Field(tag, value) + raw  */
    PyTypeObject *index_type;       /* _pydb_index.c                      */
    PyTypeObject *checkrun_type;    /* _pydb_check.c                      */
    PyTypeObject *txn_type;         /* _pydb_write.c: Transaction         */
    PyObject *Error, *CorruptionError, *NotFoundError, *DiskError,
        *DatabaseNotFoundError, *UnsupportedError, *RecordTooLargeError,
        *ClosedError, *SearchSyntaxError, *FSTError, *ReadOnlyError,
        *LockTimeoutError, *DatabaseExistsError;
} module_state;

extern struct PyModuleDef pydb_module;

/* The module state of a heap type defined by this module (NULL + exception
 * if the type is not ours). */
module_state *state_of_type(PyTypeObject *tp);

/* Raise the exception for core error `rc` with detail `e`; returns NULL.
 * The only place where core error codes become exceptions. */
PyObject *set_error(module_state *st, int rc, const pydb_error *e);

/* ------------------------------------------------------------- Database */

typedef struct {
    PyObject_HEAD
    pydb_db *db;
    atomic_int active;   /* operations in flight with the GIL released */
    int closing;
    PyObject *encoding;  /* str */
    PyObject *errors;    /* str */
    PyObject *path;      /* str, as given */
    PyObject *weakreflist;
    pydb_txn *txn;       /* the open write transaction (_pydb_write.c),
                            aborted by close(); changed with the GIL held */
    PyObject *hooked_index; /* IndexObject attached as the commit hook
                            (_pydb_native.c), or NULL; its pydb_index is
                            freed only after pydb_close() */
} DatabaseObject;

/* Abort the open transaction of `self`, if any (GIL held; no operation in
 * flight).  Called by close() and dealloc. */
void write_abort_open(DatabaseObject *self);

#define UNLOCKED(self, stmt)                                   \
    do {                                                       \
        atomic_fetch_add(&(self)->active, 1);                  \
        Py_BEGIN_ALLOW_THREADS                                 \
        stmt;                                                  \
        atomic_fetch_sub(&(self)->active, 1);                  \
        Py_END_ALLOW_THREADS                                   \
    } while (0)

/* 0 if `self` is open, else -1 with ClosedError set. */
int check_open(module_state *st, DatabaseObject *self);

/* Wait, with the GIL released, until no operation counted in `active`
 * (by UNLOCKED) is in flight.  Used by close() of Database and Index. */
void wait_idle(atomic_int *active);

/* Convert a Python int to a 1-based MFN (NotFoundError outside
 * 1..2^31-1, TypeError for non-ints).  0 on success, -1 on error. */
int parse_mfn(module_state *st, PyObject *arg, int32_t *mfn);

/* ------------------------------------------------------------- Index */
/* _pydb_index.c: a handle over any pydb_index (native, ISIS, memory). */

typedef struct {
    PyObject_HEAD
    pydb_index *ix;
    atomic_int active;   /* operations in flight with the GIL released */
    int closing;
    PyObject *owner;     /* object kept alive with the index, or None  */
    int hooked;          /* attached to a Database as its commit hook:
                            close() only marks it closed; the pydb_index
                            is freed by index_release_hooked()          */
} IndexObject;

/* 0 if `self` is open, else -1 with ClosedError set. */
int index_check_open(module_state *st, IndexObject *self);

/* Free the pydb_index of an IndexObject that was a Database's commit
 * hook, once that database's pydb_db is closed (GIL held). */
void index_release_hooked(PyObject *index);

/* Wrap an open index (ownership moves to the new object, which closes it
 * on failure too).  `owner` (may be NULL) is kept alive with it. */
PyObject *index_wrap(module_state *st, pydb_index *ix, PyObject *owner);
/* Open the index of the database at `path` (str, bytes or os.PathLike)
 * with `open_fn` (GIL released) and wrap it; NULL + exception on error. */
PyObject *index_open_path(module_state *st, PyObject *path,
                          int (*open_fn)(pydb_index **, const char *,
                                         pydb_error *));
/* List of (mfn, tag, occ, cnt) tuples from p, which is freed. */
PyObject *postings_to_list(pydb_postings *p);

/* ------------------------------------------------------------- exec hooks
 * Called by module_exec() in _pydb.c, one per area file. */
int index_exec(PyObject *m, module_state *st);
int isisidx_exec(PyObject *m, module_state *st);   /* _pydb_isisidx.c */
int check_exec(PyObject *m, module_state *st);
int search_exec(PyObject *m, module_state *st);   /* _pydb_search.c */
int native_exec(PyObject *m, module_state *st);   /* _pydb_native.c */
int write_exec(PyObject *m, module_state *st);

#endif
