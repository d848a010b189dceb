/*
 * _pydb_transaction.c - the Transaction object over pydb_txn (csrc/txn.c)
 * and _txn_begin(), which Database.transaction() calls.
 *
 * A Database has at most one open Transaction (DatabaseObject.txn, changed
 * only with the GIL held).  Every core call that may touch the disk runs
 * in UNLOCKED() on the database's guard: beginning (it may wait for the
 * writer lock and run recovery), update/delete (they read the current
 * version), commit (log, apply, fsync).  Fields are converted by
 * fields_add() (_pydb_record.c) with the GIL held first, str values with
 * the database's encoding; the buffer keeps them alive until the call
 * returns.
 */
#include "_pydb_transaction.h"
#include "_pydb_record.h"
#include <math.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    DatabaseObject *db;  /* strong reference                           */
    pydb_txn *txn;       /* NULL once committed, aborted or closed      */
    int done;            /* 1 committed, 2 aborted                      */
    pid_t pid;           /* the process that began it (a fork()ed child
                            does not inherit it: mod_forked)             */
    atomic_int busy;     /* a call is in progress (claimed by txn_check(),
                            cleared by that call): one thread at a time,
                            with or without the GIL                      */
} TxnObject;

/* Claim the handle's open transaction `t` for its abort: 1 if this call
 * took it out of self->txn, so that of a close() and a Transaction's
 * dealloc running at once (free-threaded) only one aborts it. */
static int txn_claim(DatabaseObject *self, pydb_txn *t)
{
    return __atomic_compare_exchange_n(&self->txn, &t, NULL, 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

void transaction_abort_open(DatabaseObject *self)
{
    pydb_txn *t = __atomic_load_n(&self->txn, __ATOMIC_ACQUIRE);
    if (!t || !txn_claim(self, t)) return;
    pydb_txn_abort(t);   /* frees memory and releases the locks: quick */
}


/* ------------------------------------------------------- Transaction */

static int timeout_ms_of(PyObject *obj, int *ms)
{
    double s;
    if (obj == NULL || obj == Py_None) {
        *ms = 10000;
        return 0;
    }
    s = PyFloat_AsDouble(obj);
    if (s == -1.0 && PyErr_Occurred()) return -1;
    if (!(s >= 0) || s > 86400.0 * 24) {
        PyErr_SetString(PyExc_ValueError, "timeout must be between 0 and "
                        "2073600 seconds");
        return -1;
    }
    *ms = (int)ceil(s * 1000.0);
    return 0;
}

/* After PYDB_ENEWINDEX (a native index was built since the Database
 * looked for one): let it attach that index (Database._attach_built_index,
 * pydb/database.py) before the caller begins again.  0, or -1 and an
 * exception. */
static int follow_new_index(DatabaseObject *db)
{
    PyObject *r = PyObject_CallMethod((PyObject *)db, "_attach_built_index",
                                      NULL);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* How many times a begin follows a newly built index before it gives up
 * (each follow attaches what the latest commit names). */
#define NEW_INDEX_TRIES 3

/* _txn_begin(db, timeout=None) -> Transaction */
static PyObject *mod_txn_begin(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *dbo, *timeout = Py_None;
    DatabaseObject *db;
    TxnObject *tx;
    pydb_txn *t = NULL;
    pydb_error e;
    lock_wait w;
    int ms, rc;

    if (!PyArg_ParseTuple(args, "O!|O", st->database_type, &dbo, &timeout))
        return NULL;
    db = (DatabaseObject *)dbo;
    if (timeout_ms_of(timeout, &ms) < 0 || database_check_open(st, db) < 0)
        return NULL;
    /* Another thread's open transaction: pydb_txn_begin() waits for it
     * (up to the timeout, in slices); this thread's own: it fails at
     * once. */
    lock_wait_start(&w, st, ms);
    for (int tries = 0;;) {
        int slice = lock_wait_slice(&w), again;
        memset(&e, 0, sizeof e);
        UNLOCKED(&db->guard, NULL,
                 rc = pydb_txn_begin(&t, db->db, slice, &e));
        again = lock_wait_again(&w, rc, &e);
        if (again < 0) return NULL;
        if (!again && (rc != PYDB_ENEWINDEX || tries++ == NEW_INDEX_TRIES))
            break;
        if (!again && follow_new_index(db) < 0) return NULL;
        if (database_check_open(st, db) < 0) return NULL;
    }
    if (rc) return set_error(st, rc, &e);
    if (db->txn || database_check_open(st, db) < 0) {  /* raced while unlocked */
        pydb_txn_abort(t);
        if (!PyErr_Occurred())
            PyErr_SetString(st->LockTimeoutError, "this Database already "
                            "has an open transaction");
        return NULL;
    }
    tx = PyObject_GC_New(TxnObject, st->txn_type);
    if (!tx) {
        pydb_txn_abort(t);
        return NULL;
    }
    tx->db = (DatabaseObject *)Py_NewRef(db);
    tx->txn = t;
    tx->done = 0;
    tx->pid = getpid();
    tx->busy = 0;
    db->txn = t;
    PyObject_GC_Track(tx);
    return (PyObject *)tx;
}

/* 0 if the transaction can be used, and then it is claimed (busy: the
 * caller clears it when done); else -1 with ClosedError/RuntimeError. */
static int txn_check_(module_state *st, TxnObject *self, guard_pins *pins)
{
    if (atomic_exchange(&self->busy, 1)) {
        PyErr_SetString(PyExc_RuntimeError, "the transaction is in use by "
                        "another thread");
        return -1;
    }
    if (!self->txn || self->db->txn != self->txn) {
        PyErr_SetString(st->ClosedError,
                        self->done == 1 ? "the transaction is committed"
                        : self->done == 2 ? "the transaction is aborted"
                        : self->pid != getpid()
                        ? "the transaction is the parent process's: a "
                          "fork()ed child does not inherit it (the parent "
                          "commits or aborts it)"
                        : "the transaction was ended by closing the "
                          "database");
        atomic_store(&self->busy, 0);
        return -1;
    }
    if (database_check_open_(st, self->db, pins) < 0) {
        atomic_store(&self->busy, 0);
        return -1;
    }
    return 0;
}
#define txn_check(st, self) txn_check_(st, self, PINS_)

static void txn_end(TxnObject *self, int how)
{
    if (self->txn && self->db && self->db->txn == self->txn)
        self->db->txn = NULL;
    self->txn = NULL;
    self->done = how;
}

/* The fields of append()/update(), str values encoded with the
 * database's encoding and error handler.  0, or -1 with an exception. */
static int db_fields(module_state *st, DatabaseObject *db, PyObject *fields,
                     fieldbuf *b)
{
    const char *encoding = PyUnicode_AsUTF8(db->encoding);
    const char *errors = encoding ? PyUnicode_AsUTF8(db->errors) : NULL;
    if (!errors || fields_add(st, b, fields, encoding, errors) < 0) {
        fields_free(b);
        return -1;
    }
    return 0;
}

static PyObject *txn_append(TxnObject *self, PyObject *fields)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    fieldbuf b = FIELDBUF_INIT;
    pydb_error e;
    int32_t mfn = 0;
    int rc;
    if (!st || db_fields(st, self->db, fields, &b) < 0) return NULL;
    if (txn_check(st, self) < 0) {
        fields_free(&b);
        return NULL;
    }
    /* Appends touch no file (the record is built in memory). */
    rc = pydb_txn_append(&mfn, self->txn, b.v, (uint32_t)b.n, &e);
    atomic_store(&self->busy, 0);
    fields_free(&b);
    if (rc) return set_error(st, rc, &e);
    return PyLong_FromLong(mfn);
}

static PyObject *txn_update(TxnObject *self, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    PyObject *mfno, *fields;
    fieldbuf b = FIELDBUF_INIT;
    pydb_error e;
    int32_t mfn;
    int rc;
    if (!st || !PyArg_ParseTuple(args, "OO:update", &mfno, &fields) ||
        parse_mfn(st, mfno, &mfn) < 0 ||
        db_fields(st, self->db, fields, &b) < 0)
        return NULL;
    if (txn_check(st, self) < 0) {
        fields_free(&b);
        return NULL;
    }
    UNLOCKED(&self->db->guard, NULL,
             rc = pydb_txn_update(self->txn, mfn, b.v, (uint32_t)b.n, &e));
    atomic_store(&self->busy, 0);
    fields_free(&b);
    if (rc) return set_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *txn_set_deleted(TxnObject *self, PyObject *arg, int del)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_error e;
    int32_t mfn;
    int rc;
    if (!st || parse_mfn(st, arg, &mfn) < 0 || txn_check(st, self) < 0)
        return NULL;
    UNLOCKED(&self->db->guard, NULL,
             rc = del ? pydb_txn_delete(self->txn, mfn, &e)
                      : pydb_txn_undelete(self->txn, mfn, &e));
    atomic_store(&self->busy, 0);
    if (rc) return set_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *txn_delete(TxnObject *self, PyObject *arg)
{
    return txn_set_deleted(self, arg, 1);
}

static PyObject *txn_undelete(TxnObject *self, PyObject *arg)
{
    return txn_set_deleted(self, arg, 0);
}

/* set_error() for a failed commit, with the exception's `committed`
 * attribute: False, True (durable in the log: do not retry) or None
 * (unknown: the log's fsync failed). */
static PyObject *commit_error(module_state *st, int rc, const pydb_error *e)
{
    PyObject *type, *value, *tb, *flag;
    set_error(st, rc, e);
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    flag = e->committed == PYDB_COMMIT_DURABLE   ? Py_True
           : e->committed == PYDB_COMMIT_UNKNOWN ? Py_None
                                                 : Py_False;
    if (value && PyObject_SetAttrString(value, "committed", flag) < 0)
        PyErr_Clear();   /* a built-in exception without a __dict__ */
    PyErr_Restore(type, value, tb);
    return NULL;
}

static PyObject *txn_commit(TxnObject *self, PyObject *unused)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_txn *t;
    pydb_error e;
    int rc;
    (void)unused;
    if (!st || txn_check(st, self) < 0) return NULL;
    t = self->txn;
    txn_end(self, 1);  /* before the GIL is released */
    memset(&e, 0, sizeof e);
    UNLOCKED(&self->db->guard, NULL, rc = pydb_txn_commit(t, &e));
    atomic_store(&self->busy, 0);
    if (rc) return commit_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *txn_abort(TxnObject *self, PyObject *unused)
{
    (void)unused;
    if (atomic_exchange(&self->busy, 1)) {
        PyErr_SetString(PyExc_RuntimeError, "the transaction is in use by "
                        "another thread");
        return NULL;
    }
    if (self->txn && self->db->txn == self->txn) {
        pydb_txn *t = self->txn;
        txn_end(self, 2);
        pydb_txn_abort(t);
    } else if (!self->done) {
        self->txn = NULL;
        self->done = 2;
    }
    atomic_store(&self->busy, 0);
    Py_RETURN_NONE;
}

static PyObject *txn_enter(TxnObject *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *txn_exit(TxnObject *self, PyObject *args)
{
    PyObject *type = Py_None, *val = Py_None, *tb = Py_None, *r;
    if (!PyArg_UnpackTuple(args, "__exit__", 0, 3, &type, &val, &tb))
        return NULL;
    if (type == Py_None && self->txn) {
        r = txn_commit(self, NULL);
    } else {
        r = txn_abort(self, NULL);
    }
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *txn_get_active(TxnObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->txn && self->db->txn == self->txn);
}

/* A Transaction dropped open (neither committed nor aborted: an
 * exception left its `with`-less scope) is aborted here, whatever other
 * threads do with the handle meanwhile: the abort only frees it and
 * releases the writer locks, as abort() does.  (It was aborted only when
 * nothing was in flight on the handle; with other threads reading, the
 * writer lock stayed held until close(), for every thread, handle and
 * process: found by a review.)  A close() aborting it at the same time
 * does not abort it twice (txn_claim). */
static void txn_dealloc(TxnObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->txn && self->db && txn_claim(self->db, self->txn)) {
        pydb_txn *t = self->txn;
        txn_end(self, 2);
        pydb_txn_abort(t);
    }
    Py_CLEAR(self->db);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int txn_traverse(TxnObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->db);
    return 0;
}

static PyMethodDef txn_methods[] = {
    {"append", (PyCFunction)txn_append, METH_O,
     "append($self, fields, /)\n--\n\nAdd a new record; returns its MFN "
     "(int, 1-based: NXTMFN, docs/isis-formats.md §2.4).  `fields` is an "
     "iterable of (tag, value) pairs (tag: int 1..65535; value: str, "
     "encoded with the database's encoding, or bytes), a dict {tag: value "
     "or list of values} (Record.to_dict()) or a Record.\n\n"
     "Raises RecordTooLargeError above the layout's limit (ISIS: 32767 "
     "bytes; use an FFI layout), ValueError/TypeError for bad fields, "
     "ClosedError after commit/abort."},
    {"update", (PyCFunction)txn_update, METH_VARARGS,
     "update($self, mfn, fields, /)\n--\n\nWrite a new version of record "
     "`mfn` with `fields` (as for append()); the previous version stays in "
     "the master file, pointed to by MFBWB/MFBWP.  A logically deleted "
     "record stays deleted.  Raises NotFoundError if the record does not "
     "exist or is physically deleted, RecordTooLargeError, DiskError."},
    {"delete", (PyCFunction)txn_delete, METH_O,
     "delete($self, mfn, /)\n--\n\nLogically delete record `mfn` (a new "
     "version with STATUS 1, negated XRF pointer; still readable, flagged "
     "deleted).  No-op if already deleted.  Raises NotFoundError."},
    {"undelete", (PyCFunction)txn_undelete, METH_O,
     "undelete($self, mfn, /)\n--\n\nUndo a logical deletion (a new version "
     "with STATUS 0, positive XRF pointer).  No-op if active.  Raises "
     "NotFoundError."},
    {"commit", (PyCFunction)txn_commit, METH_NOARGS,
     "commit($self, /)\n--\n\nMake every change of the transaction durable "
     "(with sync=False: durable at the next synced commit or checkpoint, "
     "see pydb.open) and visible, "
     "atomically.  Raises DiskError (an OSError: errno, filename) if a "
     "write or fsync fails; after a failed fsync the Database is read-only "
     "(ReadOnlyError) until reopened.  The exception's `committed` says "
     "what the failure left: False (nothing; a retry is safe), True (the "
     "transaction IS committed: the log holds it, and the handle's next "
     "transaction, or the next open, applies it; do not retry), None (the "
     "log's fsync failed: reopen to see).  A signal handler's exception "
     "(Ctrl-C's KeyboardInterrupt) raised while commit() runs comes once "
     "the commit has ended, which it does not undo: `active` is False "
     "if it committed."},
    {"abort", (PyCFunction)txn_abort, METH_NOARGS,
     "abort($self, /)\n--\n\nDiscard the transaction (nothing was written). "
     " Idempotent."},
    {"__enter__", (PyCFunction)txn_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)txn_exit, METH_VARARGS,
     "Commit on normal exit, abort on an exception."},
    {NULL}};

static PyGetSetDef txn_getset[] = {
    {"active", (getter)txn_get_active, NULL,
     "True until the transaction is committed or aborted.", NULL},
    {NULL}};

static PyType_Slot txn_slots[] = {
    {Py_tp_dealloc, txn_dealloc},
    {Py_tp_traverse, txn_traverse},
    {Py_tp_methods, txn_methods},
    {Py_tp_getset, txn_getset},
    {Py_tp_doc,
     "A write transaction (see Database.transaction()): append, update, "
     "delete and undelete records, then commit() -- all or nothing."},
    {0, NULL}};

static PyType_Spec txn_spec = {
    "pydb.Transaction", sizeof(TxnObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
        Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    txn_slots};

/* ------------------------------------------- one change, one commit */

/* _write_one(db, op, mfn, fields, timeout) -> MFN.  pydb_write_one()
 * with the GIL released from the wait to the end of the commit, so the
 * writer lock is never held while this thread waits for the GIL (with
 * many Python threads writing, a transaction begun in one call and
 * committed in the next keeps the lock through a GIL hand-off, up to a
 * switch interval, 5 ms, per commit); the calls of other threads waiting
 * meanwhile share the commit (group commit, csrc/group.c). */
static PyObject *mod_write_one(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *dbo, *mfno, *fields, *timeout;
    DatabaseObject *db;
    fieldbuf b = FIELDBUF_INIT;
    pydb_error e;
    lock_wait w;
    int op, ms, rc;
    int32_t mfn = 0;

    if (!PyArg_ParseTuple(args, "O!iOOO", st->database_type, &dbo, &op, &mfno,
                          &fields, &timeout))
        return NULL;
    db = (DatabaseObject *)dbo;
    if (op < PYDB_WRITE_APPEND || op > PYDB_WRITE_UNDELETE) {
        PyErr_SetString(PyExc_ValueError, "op must be 0..3");
        return NULL;
    }
    if (timeout_ms_of(timeout, &ms) < 0) return NULL;
    if (op != PYDB_WRITE_APPEND && parse_mfn(st, mfno, &mfn) < 0) return NULL;
    if ((op == PYDB_WRITE_APPEND || op == PYDB_WRITE_UPDATE) &&
        db_fields(st, db, fields, &b) < 0)
        return NULL;
    /* last: nothing may run Python code between it and the core calls
     * (but follow_new_index, after which it is checked again) */
    if (database_check_open(st, db) < 0) {
        fields_free(&b);
        return NULL;
    }
    lock_wait_start(&w, st, ms);
    for (int tries = 0;;) {
        int slice = lock_wait_slice(&w), again;
        memset(&e, 0, sizeof e);
        UNLOCKED(&db->guard, NULL, {
            rc = pydb_write_one(&mfn, db->db, op, b.v, (uint32_t)b.n, slice,
                                &e);
        });
        /* nothing was written: a slice ran out (the lock), or the begin
         * refused (PYDB_ENEWINDEX: attach, go again) */
        again = lock_wait_again(&w, rc, &e);
        if (!again && (rc != PYDB_ENEWINDEX || tries++ == NEW_INDEX_TRIES))
            break;
        if (again < 0 || (!again && follow_new_index(db) < 0) ||
            database_check_open(st, db) < 0) {
            fields_free(&b);
            return NULL;
        }
    }
    fields_free(&b);
    if (rc) return commit_error(st, rc, &e);
    return PyLong_FromLong(mfn);
}

/* _forked(): in a fork()ed child, its one thread is the main thread (the
 * one whose lock waits are sliced): pydb.database's at-fork hook. */
/* _forked(handles): in a fork()ed child, this thread is the main thread
 * now, and a transaction another thread of the parent had open on one of
 * `handles` (an iterable of Database) is forgotten, not aborted: its
 * threads are not in the child, and its abort would release the writer
 * lock the parent holds on the log's shared file description.  Before,
 * the child's handle kept pointing at it, and every transaction() of
 * the child raised "this Database already has an open transaction"
 * (found by a review). */
static PyObject *mod_forked(PyObject *m, PyObject *handles)
{
    module_state *st = PyModule_GetState(m);
    PyObject *seq = PySequence_Fast(handles, "_forked() takes the handles");
    if (!seq) return NULL;
    st->main_thread = PyThread_get_thread_ident();
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(seq, i);
        if (PyObject_TypeCheck(h, st->database_type))
            __atomic_store_n(&((DatabaseObject *)h)->txn, NULL,
                             __ATOMIC_RELEASE);
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static PyMethodDef transaction_functions[] = {
    {"_forked", mod_forked, METH_O,
     "_forked(handles, /)\n--\n\nIn a fork()ed child: this thread is the "
     "main thread now (its waits for the writer lock are made in slices), "
     "and a transaction of the parent's threads open on one of `handles` "
     "(Database objects) is forgotten."},
    {"_txn_begin", mod_txn_begin, METH_VARARGS,
     "_txn_begin(db, timeout=None, /)\n--\n\nBegin a write transaction on "
     "`db`, waiting up to `timeout` seconds (default 10) for the writer "
     "lock.  Use Database.transaction()."},
    {"_write_one", mod_write_one, METH_VARARGS,
     "_write_one(db, op, mfn, fields, timeout, /)\n--\n\nOne change in its "
     "own transaction, committed: op 0 append(fields) (mfn ignored), 1 "
     "update(mfn, fields), 2 delete(mfn), 3 undelete(mfn) (fields "
     "ignored); waits up to `timeout` seconds (None: 10) for the writer "
     "lock, with the GIL released from the wait to the end of the commit.  "
     "Returns the MFN.  Use Database.append/update/delete/undelete."},
    {NULL}};

int transaction_exec(PyObject *m, module_state *st)
{
    st->txn_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &txn_spec,
                                                            NULL);
    if (!st->txn_type) return -1;
    if (PyModule_AddType(m, st->txn_type) < 0) return -1;
    return PyModule_AddFunctions(m, transaction_functions);
}
