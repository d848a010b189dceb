/*
 * _pydb_write.c - the write path of the binding: the Transaction type over
 * pydb_txn (csrc/write.c), creating a database, and the fault-injection
 * test hooks.
 *
 * A Database has at most one open Transaction (DatabaseObject.txn, changed
 * only with the GIL held).  Every core call that may touch the disk runs
 * in UNLOCKED() on the database: beginning (it may wait for the writer
 * lock and run recovery), update/delete (they read the current version),
 * commit (log, apply, fsync).  Field values are converted to bytes with
 * the GIL held first and kept alive until the call returns.
 */
#include "_pydb.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    DatabaseObject *db;  /* strong reference                           */
    pydb_txn *txn;       /* NULL once committed, aborted or closed      */
    int done;            /* 1 committed, 2 aborted                      */
    int busy;            /* a call is in progress with the GIL released */
} TxnObject;

void write_abort_open(DatabaseObject *self)
{
    pydb_txn *t = self->txn;
    if (!t) return;
    self->txn = NULL;
    pydb_txn_abort(t);   /* frees memory and releases the locks: quick */
}

/* ------------------------------------------------- field conversion */

typedef struct {
    pydb_field *f;
    uint32_t n;
    PyObject *keep;      /* list of bytes objects the values point into */
} fieldbuf;

static void fieldbuf_free(fieldbuf *b)
{
    PyMem_Free(b->f);
    Py_CLEAR(b->keep);
    b->f = NULL;
    b->n = 0;
}

/* Value -> bytes (new reference): bytes/bytearray/memoryview as they are,
 * str encoded with the database's encoding and error handler. */
static PyObject *value_bytes(DatabaseObject *db, PyObject *v)
{
    if (PyBytes_Check(v)) return Py_NewRef(v);
    if (PyUnicode_Check(v))
        return PyUnicode_AsEncodedString(v, PyUnicode_AsUTF8(db->encoding),
                                         PyUnicode_AsUTF8(db->errors));
    if (PyByteArray_Check(v) || PyMemoryView_Check(v))
        return PyBytes_FromObject(v);
    PyErr_Format(PyExc_TypeError, "a field value is str or bytes, not %.100s",
                 Py_TYPE(v)->tp_name);
    return NULL;
}

/* Convert `fields` (an iterable of (tag, str|bytes) pairs, or a Record)
 * into b.  0 or -1 with an exception. */
static int fields_convert(module_state *st, DatabaseObject *db,
                          PyObject *fields, fieldbuf *b)
{
    PyObject *seq = NULL, *src = fields;
    Py_ssize_t n, i;
    int rc = -1;

    b->f = NULL;
    b->n = 0;
    b->keep = PyList_New(0);
    if (!b->keep) return -1;
    if (PyObject_TypeCheck(fields, st->record_type)) {
        src = PyObject_GetAttrString(fields, "fields");
        if (!src) goto done;
    } else {
        Py_INCREF(src);
    }
    if (PyUnicode_Check(src) || PyBytes_Check(src)) {
        PyErr_SetString(PyExc_TypeError, "fields must be an iterable of "
                        "(tag, value) pairs, not a string");
        Py_DECREF(src);
        goto done;
    }
    seq = PySequence_Fast(src, "fields must be an iterable of (tag, value) "
                               "pairs or a Record");
    Py_DECREF(src);
    if (!seq) goto done;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > 65535) {
        PyErr_Format(st->RecordTooLargeError, "a record has at most 65535 "
                     "fields (NVF is 16-bit), not %zd", n);
        goto done;
    }
    b->f = PyMem_Calloc((size_t)(n ? n : 1), sizeof *b->f);
    if (!b->f) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *tag, *val, *bytes;
        unsigned long t;
        if (Py_IS_TYPE(item, st->field_type)) {
            /* A Field of a Record: its stored bytes, whatever the codec. */
            tag = PyStructSequence_GetItem(item, 0);
            val = PyStructSequence_GetItem(item, 2);
        } else {
            if (!PyTuple_Check(item) && !PyList_Check(item)) {
                PyErr_Format(PyExc_TypeError, "field %zd: expected a (tag, "
                             "value) pair, not %.100s", i + 1,
                             Py_TYPE(item)->tp_name);
                goto done;
            }
            if (PySequence_Size(item) != 2) {
                PyErr_Format(PyExc_ValueError, "field %zd: expected a (tag, "
                             "value) pair", i + 1);
                goto done;
            }
            tag = PySequence_Fast_GET_ITEM(item, 0);  /* tuple or list */
            val = PySequence_Fast_GET_ITEM(item, 1);
        }
        if (!PyLong_Check(tag)) {
            PyErr_Format(PyExc_TypeError, "field %zd: a tag is an int, not "
                         "%.100s", i + 1, Py_TYPE(tag)->tp_name);
            goto done;
        }
        t = PyLong_AsUnsignedLong(tag);
        if ((t == (unsigned long)-1 && PyErr_Occurred()) || t < 1 ||
            t > 65535) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "field %zd: tag %R is outside "
                         "1..65535", i + 1, tag);
            goto done;
        }
        bytes = value_bytes(db, val);
        if (!bytes) goto done;
        if (PyList_Append(b->keep, bytes) < 0) {
            Py_DECREF(bytes);
            goto done;
        }
        Py_DECREF(bytes);
        if (PyBytes_GET_SIZE(bytes) > 0x7FFFFFFF) {
            PyErr_Format(st->RecordTooLargeError, "field %zd is larger than "
                         "2 GiB", i + 1);
            goto done;
        }
        b->f[i].tag = (uint32_t)t;
        b->f[i].len = (uint32_t)PyBytes_GET_SIZE(bytes);
        b->f[i].value = (const uint8_t *)PyBytes_AS_STRING(bytes);
    }
    b->n = (uint32_t)n;
    rc = 0;
done:
    Py_XDECREF(seq);
    if (rc) fieldbuf_free(b);
    return rc;
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

/* _txn_begin(db, timeout=None) -> Transaction */
static PyObject *mod_txn_begin(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *dbo, *timeout = Py_None;
    DatabaseObject *db;
    TxnObject *tx;
    pydb_txn *t = NULL;
    pydb_error e;
    int ms, rc;

    if (!PyArg_ParseTuple(args, "O!|O", st->database_type, &dbo, &timeout))
        return NULL;
    db = (DatabaseObject *)dbo;
    if (timeout_ms_of(timeout, &ms) < 0 || check_open(st, db) < 0)
        return NULL;
    /* Another thread's open transaction: pydb_txn_begin() waits for it
     * (up to the timeout); this thread's own: it fails at once. */
    memset(&e, 0, sizeof e);
    UNLOCKED(db, rc = pydb_txn_begin(&t, db->db, ms, &e));
    if (rc) return set_error(st, rc, &e);
    if (db->txn || check_open(st, db) < 0) {  /* raced while unlocked */
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
    tx->busy = 0;
    db->txn = t;
    PyObject_GC_Track(tx);
    return (PyObject *)tx;
}

/* 0 if the transaction can be used, else -1 with ClosedError/ValueError. */
static int txn_check(module_state *st, TxnObject *self)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the transaction is in use by "
                        "another thread");
        return -1;
    }
    if (!self->txn || self->db->txn != self->txn) {
        PyErr_SetString(st->ClosedError,
                        self->done == 1 ? "the transaction is committed"
                        : self->done == 2 ? "the transaction is aborted"
                        : "the transaction was ended by closing the "
                          "database");
        return -1;
    }
    return check_open(st, self->db);
}

static void txn_end(TxnObject *self, int how)
{
    if (self->txn && self->db && self->db->txn == self->txn)
        self->db->txn = NULL;
    self->txn = NULL;
    self->done = how;
}

static PyObject *txn_append(TxnObject *self, PyObject *fields)
{
    module_state *st = state_of_type(Py_TYPE(self));
    fieldbuf b;
    pydb_error e;
    int32_t mfn = 0;
    int rc;
    if (!st || fields_convert(st, self->db, fields, &b) < 0) return NULL;
    if (txn_check(st, self) < 0) {
        fieldbuf_free(&b);
        return NULL;
    }
    /* Appends touch no file (the record is built in memory). */
    rc = pydb_txn_append(self->txn, b.f, b.n, &mfn, &e);
    fieldbuf_free(&b);
    if (rc) return set_error(st, rc, &e);
    return PyLong_FromLong(mfn);
}

static PyObject *txn_update(TxnObject *self, PyObject *args)
{
    module_state *st = state_of_type(Py_TYPE(self));
    PyObject *mfno, *fields;
    fieldbuf b;
    pydb_error e;
    int32_t mfn;
    int rc;
    if (!st || !PyArg_ParseTuple(args, "OO:update", &mfno, &fields) ||
        parse_mfn(st, mfno, &mfn) < 0 ||
        fields_convert(st, self->db, fields, &b) < 0)
        return NULL;
    if (txn_check(st, self) < 0) {
        fieldbuf_free(&b);
        return NULL;
    }
    self->busy = 1;
    UNLOCKED(self->db, rc = pydb_txn_update(self->txn, mfn, b.f, b.n, &e));
    self->busy = 0;
    fieldbuf_free(&b);
    if (rc) return set_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *txn_set_deleted(TxnObject *self, PyObject *arg, int del)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_error e;
    int32_t mfn;
    int rc;
    if (!st || parse_mfn(st, arg, &mfn) < 0 || txn_check(st, self) < 0)
        return NULL;
    self->busy = 1;
    UNLOCKED(self->db, rc = del ? pydb_txn_delete(self->txn, mfn, &e)
                                : pydb_txn_undelete(self->txn, mfn, &e));
    self->busy = 0;
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

static PyObject *txn_commit(TxnObject *self, PyObject *unused)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_txn *t;
    pydb_error e;
    int rc;
    (void)unused;
    if (!st || txn_check(st, self) < 0) return NULL;
    t = self->txn;
    txn_end(self, 1);  /* before the GIL is released: see _pydb.h */
    memset(&e, 0, sizeof e);
    UNLOCKED(self->db, rc = pydb_txn_commit(t, &e));
    if (rc) return set_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *txn_abort(TxnObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) {
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

static void txn_dealloc(TxnObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->txn && self->db && self->db->txn == self->txn &&
        atomic_load(&self->db->active) == 0) {
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
     "(int, 1-based: NXTMFN, isis-formats.md §2.4).  `fields` is an "
     "iterable of (tag, value) pairs (tag: int 1..65535; value: str, "
     "encoded with the database's encoding, or bytes) or a Record.\n\n"
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
     "(unless the database was opened with sync=False) and visible, "
     "atomically.  Raises DiskError (an OSError: errno, filename) if a "
     "write or fsync fails; after a failed fsync the Database is read-only "
     "(ReadOnlyError) until reopened."},
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

/* ------------------------------------------------------- module functions */

/* _create(path, layout, mstxl, sync): the files of an empty database. */
static PyObject *mod_create(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *pb = NULL;
    const char *layout_name;
    int mstxl, sync, layout, rc;
    pydb_options opt;
    pydb_db *db = NULL;
    pydb_error e;

    if (!PyArg_ParseTuple(args, "O&sip", PyUnicode_FSConverter, &pb,
                          &layout_name, &mstxl, &sync))
        return NULL;
    layout = pydb_layout_from_name(layout_name);
    if (layout < 0) {
        Py_DECREF(pb);
        PyErr_Format(PyExc_ValueError, "layout must be isis-packed, "
                     "isis-aligned, ffi-packed or ffi-aligned, not '%s'",
                     layout_name);
        return NULL;
    }
    if (mstxl < 0 || mstxl > 6) {
        Py_DECREF(pb);
        PyErr_Format(PyExc_ValueError, "mstxl must be 0..6, not %d", mstxl);
        return NULL;
    }
    memset(&opt, 0, sizeof opt);
    opt.io = PYDB_IO_PREAD;
    opt.flags = sync ? 0 : PYDB_OPEN_NOSYNC;
    memset(&e, 0, sizeof e);
    Py_BEGIN_ALLOW_THREADS
    rc = pydb_create(&db, PyBytes_AS_STRING(pb), layout, mstxl, &opt, &e);
    if (rc == PYDB_OK) pydb_close(db);
    Py_END_ALLOW_THREADS
    Py_DECREF(pb);
    if (rc) return set_error(st, rc, &e);
    return PyLong_FromLong(PYDB_OPEN_LAYOUT(layout));
}

static PyObject *mod_test_fail_io(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"n", "errno", "short", "crash", NULL};
    long n;
    int eno = EIO, shortw = 0, crash = 0;
    (void)m;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "l|ipp", kwlist, &n, &eno,
                                     &shortw, &crash))
        return NULL;
    pydb__test_fail_io(n, eno, crash ? 2 : shortw);
    Py_RETURN_NONE;
}

static PyObject *mod_test_io_count(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLong(pydb__test_io_count());
}

static PyObject *mod_test_io_fired(PyObject *m, PyObject *unused)
{
    const char *s = pydb__test_io_fired();
    (void)m;
    (void)unused;
    if (!s) Py_RETURN_NONE;
    return PyUnicode_FromString(s);
}

/* ---- test hook: a commit hook that writes a summary of each
 * transaction's changes into a whole file (pydb_txn_put_file), so that the
 * hook interface and whole-file log entries can be tested from Python. */

typedef struct {
    char path[1024];
    long prepared, published, aborted;
} test_hook_ctx;

static test_hook_ctx the_test_hook;   /* tests only */

static int test_hook_prepare(void *ctx, pydb_txn *t, const pydb_change *c,
                             size_t n, pydb_error *err)
{
    test_hook_ctx *h = ctx;
    size_t cap = 64 + n * 64, len = 0;
    char *buf = malloc(cap);
    int rc;
    if (!buf) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%d %d %d %d\n",
                                (int)c[i].mfn,
                                c[i].before ? (int)c[i].before->nfields : -1,
                                c[i].after ? (int)c[i].nafter : -1,
                                c[i].deleted_after);
    rc = pydb_txn_put_file(t, h->path, buf, len, err);
    free(buf);
    if (rc == PYDB_OK) h->prepared++;
    return rc;
}

static void test_hook_publish(void *ctx, pydb_txn *t)
{
    (void)t;
    ((test_hook_ctx *)ctx)->published++;
}

static void test_hook_abort(void *ctx, pydb_txn *t)
{
    (void)t;
    ((test_hook_ctx *)ctx)->aborted++;
}

static PyObject *mod_test_commit_hook(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *dbo, *pb = NULL;
    pydb_commit_hook hook = {test_hook_prepare, test_hook_publish,
                             test_hook_abort, &the_test_hook};
    pydb_error e;
    int rc;
    if (!PyArg_ParseTuple(args, "O!O&", st->database_type, &dbo,
                          PyUnicode_FSConverter, &pb))
        return NULL;
    if (check_open(st, (DatabaseObject *)dbo) < 0) {
        Py_DECREF(pb);
        return NULL;
    }
    memset(&the_test_hook, 0, sizeof the_test_hook);
    snprintf(the_test_hook.path, sizeof the_test_hook.path, "%s",
             PyBytes_AS_STRING(pb));
    Py_DECREF(pb);
    rc = pydb_set_commit_hook(((DatabaseObject *)dbo)->db, &hook, &e);
    if (rc) return set_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *mod_test_hook_counts(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return Py_BuildValue("(lll)", the_test_hook.prepared,
                         the_test_hook.published, the_test_hook.aborted);
}

static PyMethodDef write_functions[] = {
    {"_test_commit_hook", mod_test_commit_hook, METH_VARARGS,
     "_test_commit_hook(db, path, /)\n--\n\nTests only: install a commit "
     "hook that writes one line 'mfn nbefore nafter deleted' per change "
     "into the file `path` as part of each transaction."},
    {"_test_hook_counts", mod_test_hook_counts, METH_NOARGS,
     "Tests only: (prepared, published, aborted) of the test hook."},
    {"_txn_begin", mod_txn_begin, METH_VARARGS,
     "_txn_begin(db, timeout=None, /)\n--\n\nBegin a write transaction on "
     "`db`, waiting up to `timeout` seconds (default 10) for the writer "
     "lock.  Use Database.transaction()."},
    {"_create", mod_create, METH_VARARGS,
     "_create(path, layout, mstxl, sync, /)\n--\n\nCreate the files of an "
     "empty database; returns the open flags that name its layout.  Use "
     "pydb.create()."},
    {"_test_fail_io", (PyCFunction)(void (*)(void))mod_test_fail_io,
     METH_VARARGS | METH_KEYWORDS,
     "_test_fail_io(n, errno=EIO, short=False)\n--\n\nTests only: make the "
     "n-th write-side file operation of the core (pwrite, fsync, fdatasync, "
     "ftruncate, rename, unlink) fail with `errno`; with `short`, the n-th "
     "pwrite writes half and the next operation fails; with `crash`, the "
     "process exits with status 137 just before the n-th operation (a "
     "crash point).  n=0 turns it off, n<0 only counts.  Process-wide."},
    {"_test_io_count", mod_test_io_count, METH_NOARGS,
     "Tests only: write-side operations counted since _test_fail_io()."},
    {"_test_io_fired", mod_test_io_fired, METH_NOARGS,
     "Tests only: the operation that was made to fail, or None."},
    {NULL}};

int write_exec(PyObject *m, module_state *st)
{
    st->txn_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &txn_spec,
                                                            NULL);
    if (!st->txn_type) return -1;
    if (PyModule_AddType(m, st->txn_type) < 0) return -1;
    if (PyModule_AddIntConstant(m, "OPEN_WRITE", PYDB_OPEN_WRITE) < 0 ||
        PyModule_AddIntConstant(m, "OPEN_NOSYNC", PYDB_OPEN_NOSYNC) < 0)
        return -1;
    return PyModule_AddFunctions(m, write_functions);
}
