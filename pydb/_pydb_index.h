/*
 * _pydb_index.h - the Index object (any pydb_index: native segments, ISIS
 * classic/LIND files, in-memory) as the other files of the binding see it.
 */
#ifndef PYDB_BINDING_INDEX_H
#define PYDB_BINDING_INDEX_H

#include "_pydb_module.h"

typedef struct {
    PyObject_HEAD
    pydb_index *ix;
    handle_guard guard;  /* operations in flight; closing               */
    PyObject *owner;     /* object kept alive with the index, or None  */
    int hooked;          /* attached to a Database as its commit hook:
                            close() only marks it closed; the pydb_index
                            is freed by index_release_hooked()          */
} IndexObject;

/* 0 if `self` is open, else -1 with ClosedError set (call it last before
 * UNLOCKED(), as database_check_open()). */
int index_check_open_(module_state *st, IndexObject *self, guard_pins *pins);
#define index_check_open(st, self) index_check_open_(st, self, PINS_)

/* Free the pydb_index of an IndexObject that was a Database's commit
 * hook, once that database's pydb_db is closed (GIL held). */
/* Detach the index from its database handle (removes the commit hook
 * and waits for readers signalling the collector): before pydb_close. */
void index_detach_hooked(PyObject *index);
void index_release_hooked(PyObject *index);

#endif
