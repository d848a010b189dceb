/*
 * _pydb.c - the CPython binding of the pydb core (csrc/).  Binding only:
 * argument parsing, GIL release, Python objects, and the one place where
 * core error codes become exceptions (set_error).
 *
 * GIL rules (../shared/docs/style.md, "GIL rules for pydb"):
 *   - arguments are parsed and copied into C memory first;
 *   - every core call that may touch a file runs inside UNLOCKED(), which
 *     counts the operation in db->active and releases the GIL; nothing
 *     between Py_BEGIN_ALLOW_THREADS and Py_END_ALLOW_THREADS calls Py*;
 *   - close() marks the handle closing, then waits (GIL released) until
 *     no operation is in flight before freeing the core handle.
 *
 * Module: multi-phase init (PEP 489), heap types, module state.  The
 * exception classes are defined in Python (pydb/errors.py) and looked up
 * at module execution.
 */
#include "_pydb.h"
#include <structmember.h>
#include <unistd.h>

#define BATCH 256   /* records read per GIL release when iterating */


module_state *state_of_type(PyTypeObject *tp)
{
    PyObject *m = PyType_GetModuleByDef(tp, &pydb_module);
    return m ? (module_state *)PyModule_GetState(m) : NULL;
}

/* ------------------------------------------------------------- errors */

/* Turn a core error into the matching exception (GIL held). */
PyObject *set_error(module_state *st, int rc, const pydb_error *e)
{
    PyObject *exc = NULL, *args = NULL;
    const char *path = e->path[0] ? e->path : NULL;

    switch (rc) {
    case PYDB_ENOMEM:
        return PyErr_NoMemory();
    case PYDB_EINVAL:
        PyErr_SetString(PyExc_ValueError, e->message);
        return NULL;
    case PYDB_ENOTFOUND:
        args = PyUnicode_FromString(e->message);
        if (args) {
            PyErr_SetObject(st->NotFoundError, args);
            Py_DECREF(args);
        }
        return NULL;
    case PYDB_ECORRUPT:
        exc = st->CorruptionError;
        args = Py_BuildValue("(zLs)", path, (long long)e->offset, e->message);
        break;
    case PYDB_EUNSUPPORTED:
        exc = st->UnsupportedError;
        args = Py_BuildValue("(isz)", e->sys_errno, e->message, path);
        break;
    case PYDB_EIO:
        exc = e->sys_errno == ENOENT ? st->DatabaseNotFoundError
            : e->sys_errno == EEXIST ? st->DatabaseExistsError
                                     : st->DiskError;
        args = Py_BuildValue("(isz)", e->sys_errno, e->message, path);
        break;
    case PYDB_ESYNTAX:
        exc = st->SearchSyntaxError;
        args = Py_BuildValue("(sL)", e->message, (long long)e->offset);
        break;
    case PYDB_EFST:
        exc = st->FSTError;
        args = Py_BuildValue("(zLs)", path, (long long)e->offset, e->message);
        break;
    case PYDB_EREADONLY:
        PyErr_SetString(st->ReadOnlyError, e->message);
        return NULL;
    case PYDB_ELOCKED:
        args = Py_BuildValue("(isz)", EAGAIN, e->message, path);
        exc = st->LockTimeoutError;
        break;
    case PYDB_EWOULDBLOCK:  /* never escapes the binding; defensive */
    case PYDB_ETOOBIG:
        PyErr_SetString(st->RecordTooLargeError, e->message);
        return NULL;
    default:
        PyErr_Format(st->Error, "pydb error %d: %s", rc, e->message);
        return NULL;
    }
    if (args) {
        PyErr_SetObject(exc, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* ------------------------------------------------------------- Database */

int check_open(module_state *st, DatabaseObject *self)
{
    if (self->db && !self->closing) return 0;
    PyErr_SetString(st->ClosedError, "the database is closed");
    return -1;
}

void wait_idle(atomic_int *active)
{
    Py_BEGIN_ALLOW_THREADS
    while (atomic_load(active) > 0) usleep(50);
    Py_END_ALLOW_THREADS
}

/* Wait (GIL released) for in-flight operations, then free the handle. */
static void db_close_handle(DatabaseObject *self)
{
    pydb_db *db = self->db;
    if (!db || self->closing) return;  /* closed, or another close waits */
    self->closing = 1;
    wait_idle(&self->active);
    write_abort_open(self);
    self->db = NULL;
    pydb_close(db);
    if (self->hooked_index) {   /* after pydb_close: no commit can run */
        index_release_hooked(self->hooked_index);
        Py_CLEAR(self->hooked_index);
    }
}

/* ------------------------------------------------------------- Record */

typedef struct {
    PyObject_HEAD
    pydb_record *rec;
    PyObject *encoding;
    PyObject *errors;
} RecordObject;

static PyObject *record_new_from(module_state *st, DatabaseObject *db,
                                 pydb_record *rec)
{
    RecordObject *r;
    r = (RecordObject *)st->record_class->tp_alloc(st->record_class, 0);
    if (!r) {
        pydb_record_free(rec);
        return NULL;
    }
    r->rec = rec;
    r->encoding = Py_NewRef(db->encoding);
    r->errors = Py_NewRef(db->errors);
    return (PyObject *)r;
}

static void record_dealloc(RecordObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pydb_record_free(self->rec);
    Py_XDECREF(self->encoding);
    Py_XDECREF(self->errors);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *decode(RecordObject *self, const pydb_field *f)
{
    return PyUnicode_Decode((const char *)f->value, f->len,
                            PyUnicode_AsUTF8(self->encoding),
                            PyUnicode_AsUTF8(self->errors));
}

static PyObject *record_fields(RecordObject *self, void *closure)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_record *r = self->rec;
    PyObject *t;
    (void)closure;
    if (!st) return NULL;
    t = PyTuple_New(r->nfields);
    if (!t) return NULL;
    for (uint32_t i = 0; i < r->nfields; i++) {
        PyObject *f = PyStructSequence_New(st->field_type), *v;
        if (!f) goto fail;
        PyTuple_SET_ITEM(t, i, f);
        v = PyLong_FromUnsignedLong(r->fields[i].tag);
        if (!v) goto fail;
        PyStructSequence_SetItem(f, 0, v);
        v = decode(self, &r->fields[i]);
        if (!v) goto fail;
        PyStructSequence_SetItem(f, 1, v);
        v = PyBytes_FromStringAndSize((const char *)r->fields[i].value,
                                      r->fields[i].len);
        if (!v) goto fail;
        PyStructSequence_SetItem(f, 2, v);
    }
    return t;
fail:
    Py_DECREF(t);
    return NULL;
}

static int tag_arg(PyObject *arg, unsigned long *tag)
{
    if (!PyLong_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "a tag is an int, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    *tag = PyLong_AsUnsignedLong(arg);
    if (*tag == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        *tag = 0x7FFFFFFF;  /* negative or huge: matches no field */
    }
    return 0;
}

/* Values of the fields with `tag`, decoded (raw=0) or as bytes (raw=1). */
static PyObject *record_values(RecordObject *self, unsigned long tag, int raw)
{
    pydb_record *r = self->rec;
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (uint32_t i = 0; i < r->nfields; i++) {
        PyObject *v;
        if (r->fields[i].tag != tag) continue;
        v = raw ? PyBytes_FromStringAndSize((const char *)r->fields[i].value,
                                            r->fields[i].len)
                : decode(self, &r->fields[i]);
        if (!v || PyList_Append(list, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(v);
    }
    return list;
}

static PyObject *record_getitem(RecordObject *self, PyObject *key)
{
    unsigned long tag;
    if (tag_arg(key, &tag) < 0) return NULL;
    return record_values(self, tag, 0);
}

static PyObject *record_raw(RecordObject *self, PyObject *key)
{
    unsigned long tag;
    if (tag_arg(key, &tag) < 0) return NULL;
    return record_values(self, tag, 1);
}

static PyObject *record_get(RecordObject *self, PyObject *const *args,
                            Py_ssize_t nargs)
{
    unsigned long tag;
    pydb_record *r = self->rec;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(tag, default=None)");
        return NULL;
    }
    if (tag_arg(args[0], &tag) < 0) return NULL;
    for (uint32_t i = 0; i < r->nfields; i++)
        if (r->fields[i].tag == tag) return decode(self, &r->fields[i]);
    return Py_NewRef(nargs == 2 ? args[1] : Py_None);
}

static int record_contains(RecordObject *self, PyObject *key)
{
    unsigned long tag;
    if (tag_arg(key, &tag) < 0) return -1;
    for (uint32_t i = 0; i < self->rec->nfields; i++)
        if (self->rec->fields[i].tag == tag) return 1;
    return 0;
}

static Py_ssize_t record_len(RecordObject *self)
{
    return (Py_ssize_t)self->rec->nfields;
}

static PyObject *record_tags(RecordObject *self, void *closure)
{
    PyObject *t = PyTuple_New(self->rec->nfields);
    (void)closure;
    if (!t) return NULL;
    for (uint32_t i = 0; i < self->rec->nfields; i++) {
        PyObject *v = PyLong_FromUnsignedLong(self->rec->fields[i].tag);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

#define RECORD_INT_GETTER(name, expr)                                   \
    static PyObject *record_get_##name(RecordObject *self, void *c)     \
    {                                                                   \
        (void)c;                                                        \
        return PyLong_FromLongLong((long long)(expr));                  \
    }
#define RECORD_BOOL_GETTER(name, expr)                                  \
    static PyObject *record_get_##name(RecordObject *self, void *c)     \
    {                                                                   \
        (void)c;                                                        \
        return PyBool_FromLong((long)(expr));                           \
    }
RECORD_INT_GETTER(mfn, self->rec->mfn)
RECORD_INT_GETTER(status, self->rec->status)
RECORD_INT_GETTER(offset, self->rec->offset)
RECORD_INT_GETTER(mfrl, self->rec->mfrl)
RECORD_BOOL_GETTER(deleted, self->rec->deleted)
RECORD_BOOL_GETTER(locked, self->rec->locked)
RECORD_BOOL_GETTER(pending, self->rec->flags & PYDB_FLAG_PENDING)
RECORD_BOOL_GETTER(new, self->rec->flags & PYDB_FLAG_NEW)

static PyObject *record_get_back_offset(RecordObject *self, void *c)
{
    (void)c;
    if (self->rec->back_offset < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->rec->back_offset);
}

static PyObject *record_get_encoding(RecordObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->encoding);
}

static PyGetSetDef record_getset[] = {
    {"mfn", (getter)record_get_mfn, NULL, "MFN, 1-based (int).", NULL},
    {"status", (getter)record_get_status, NULL,
     "Leader STATUS: 0 active, 1 logically deleted (int).", NULL},
    {"deleted", (getter)record_get_deleted, NULL,
     "True if logically deleted (negated XRF pointer; for a back version, "
     "STATUS 1).", NULL},
    {"locked", (getter)record_get_locked, NULL,
     "True if MFRL was stored negative (CDS/ISIS record lock sign).", NULL},
    {"pending", (getter)record_get_pending, NULL,
     "XRF flag 0x200: update pending (inverted file not yet updated).",
     NULL},
    {"new", (getter)record_get_new, NULL,
     "XRF flag 0x400: new record, not yet inverted.", NULL},
    {"offset", (getter)record_get_offset, NULL,
     "Byte offset of this version in the .mst (int).", NULL},
    {"back_offset", (getter)record_get_back_offset, NULL,
     "Byte offset of the previous version (MFBWB/MFBWP), or None.", NULL},
    {"mfrl", (getter)record_get_mfrl, NULL,
     "Record length in bytes, abs(MFRL), padding included (int).", NULL},
    {"fields", (getter)record_fields, NULL,
     "All fields in stored order: tuple of Field(tag, value); each Field "
     "also has .raw (bytes).", NULL},
    {"tags", (getter)record_tags, NULL,
     "Tags of the fields in stored order (tuple of int).", NULL},
    {"encoding", (getter)record_get_encoding, NULL,
     "Encoding used to decode values (str).", NULL},
    {NULL}};

static PyMethodDef record_methods[] = {
    {"raw", (PyCFunction)record_raw, METH_O,
     "raw($self, tag, /)\n--\n\nValues of the fields with `tag` as bytes, "
     "in occurrence order (list of bytes; empty if none)."},
    {"get", (PyCFunction)(void (*)(void))record_get, METH_FASTCALL,
     "get($self, tag, default=None, /)\n--\n\nFirst occurrence of `tag` "
     "as str, or `default`."},
    {NULL}};

static PyType_Slot record_slots[] = {
    {Py_tp_dealloc, record_dealloc},
    {Py_tp_getset, record_getset},
    {Py_tp_methods, record_methods},
    {Py_mp_subscript, record_getitem},
    {Py_mp_length, record_len},
    {Py_sq_contains, record_contains},
    {Py_tp_doc, "A record version read from a master file (see pydb.Record)."},
    {0, NULL}};

static PyType_Spec record_spec = {
    "pydb._pydb.Record", sizeof(RecordObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    record_slots};

/* ------------------------------------------------------ Database methods */

/* An MFN argument: an int in 1..2^31-1, else NotFoundError (outside
 * every database) or TypeError. */
int parse_mfn(module_state *st, PyObject *arg, int32_t *mfn)
{
    long long v;
    int overflow = 0;
    if (!PyLong_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "an MFN is an int, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    v = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (overflow || v < 1 || v > 0x7FFFFFFF) {
        PyObject *msg = PyUnicode_FromFormat("MFN %R is outside 1..2^31-1",
                                             arg);
        if (msg) {
            PyErr_SetObject(st->NotFoundError, msg);
            Py_DECREF(msg);
        }
        return -1;
    }
    *mfn = (int32_t)v;
    return 0;
}

static int database_init(DatabaseObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "encoding", "errors", "io", "lock",
                             "flags", NULL};
    module_state *st = state_of_type(Py_TYPE(self));
    PyObject *path_obj, *path_bytes = NULL;
    const char *encoding = "utf-8", *errors = "surrogateescape";
    const char *io = "pread", *lock = "none", *cpath;
    pydb_options opt;
    pydb_error e;
    pydb_db *db = NULL;
    int rc, flags = 0;

    if (!st) return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|ssssi", kwlist, &path_obj,
                                     &encoding, &errors, &io, &lock, &flags))
        return -1;
    if (self->db) {
        PyErr_SetString(PyExc_RuntimeError, "Database is already open");
        return -1;
    }
    memset(&opt, 0, sizeof opt);
    opt.io = pydb_io_from_name(io);
    if (opt.io < 0) {
        PyErr_Format(PyExc_ValueError,
                     "io must be 'pread', 'mmap' or 'direct', not '%s'", io);
        return -1;
    }
    if (strcmp(lock, "none") == 0) opt.lock = PYDB_LOCK_NONE;
    else if (strcmp(lock, "mutex") == 0) opt.lock = PYDB_LOCK_MUTEX;
    else {
        PyErr_Format(PyExc_ValueError, "lock must be 'none' or 'mutex', "
                     "not '%s'", lock);
        return -1;
    }
    opt.flags = flags;
    if (!PyCodec_KnownEncoding(encoding)) {  /* fail early */
        PyErr_Format(PyExc_LookupError, "unknown encoding: %s", encoding);
        return -1;
    }
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) return -1;
    cpath = PyBytes_AS_STRING(path_bytes);
    memset(&e, 0, sizeof e);
    Py_BEGIN_ALLOW_THREADS
    rc = pydb_open(&db, cpath, &opt, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_bytes);
    if (rc) {
        set_error(st, rc, &e);
        return -1;
    }
    self->db = db;
    self->closing = 0;
    Py_XSETREF(self->encoding, PyUnicode_FromString(encoding));
    Py_XSETREF(self->errors, PyUnicode_FromString(errors));
    Py_XSETREF(self->path, PyOS_FSPath(path_obj));
    if (!self->encoding || !self->errors || !self->path) return -1;
    return 0;
}

static void database_dealloc(DatabaseObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist) PyObject_ClearWeakRefs((PyObject *)self);
    if (self->db) {
        /* No operation can be in flight: it would hold a reference. */
        write_abort_open(self);
        pydb_close(self->db);
        self->db = NULL;
    }
    if (self->hooked_index) {
        index_release_hooked(self->hooked_index);
        Py_CLEAR(self->hooked_index);
    }
    Py_CLEAR(self->encoding);
    Py_CLEAR(self->errors);
    Py_CLEAR(self->path);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int database_traverse(DatabaseObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->hooked_index);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyObject *database_close(DatabaseObject *self, PyObject *unused)
{
    (void)unused;
    db_close_handle(self);
    Py_RETURN_NONE;
}

static PyObject *database_read(DatabaseObject *self, PyObject *arg)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_record *rec = NULL;
    pydb_error e;
    int32_t mfn;
    int rc;

    /* check_open() comes last: nothing may run Python code between it and
     * the core call (a __index__ could close the database). */
    if (!st || parse_mfn(st, arg, &mfn) < 0 || check_open(st, self) < 0)
        return NULL;
    /* Cache hit: read with the GIL held (it cannot wait for the disk).
     * Otherwise release the GIL and read. */
    rc = pydb_read_nowait(&rec, self->db, mfn, &e);
    if (rc == PYDB_EWOULDBLOCK)
        UNLOCKED(self, rc = pydb_read(&rec, self->db, mfn, &e));
    if (rc) {
        pydb_record_free(rec);
        return set_error(st, rc, &e);
    }
    return record_new_from(st, self, rec);
}

static PyObject *database_read_at(DatabaseObject *self, PyObject *args)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_record *rec = NULL;
    pydb_error e;
    int mfn;
    long long off;
    int rc;

    if (!st || !PyArg_ParseTuple(args, "iL", &mfn, &off) ||
        check_open(st, self) < 0)
        return NULL;
    UNLOCKED(self, rc = pydb_read_at(&rec, self->db, mfn, off, &e));
    if (rc) {
        pydb_record_free(rec);
        return set_error(st, rc, &e);
    }
    return record_new_from(st, self, rec);
}

static PyObject *database_read_many(DatabaseObject *self, PyObject *arg)
{
    module_state *st = state_of_type(Py_TYPE(self));
    PyObject *seq = NULL, *list = NULL;
    int32_t *mfns = NULL;
    pydb_record **recs = NULL;
    pydb_error e;
    Py_ssize_t n, i, done = 0;
    int rc = PYDB_OK;

    if (!st) return NULL;
    seq = PySequence_Fast(arg, "read_many() takes an iterable of MFNs");
    if (!seq) return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    mfns = PyMem_Malloc(sizeof *mfns * (size_t)(n ? n : 1));
    recs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *recs);
    if (!mfns || !recs) {
        PyErr_NoMemory();
        goto cleanup;
    }
    for (i = 0; i < n; i++)
        if (parse_mfn(st, PySequence_Fast_GET_ITEM(seq, i), &mfns[i]) < 0)
            goto cleanup;
    if (check_open(st, self) < 0) goto cleanup;
    UNLOCKED(self, {
        for (done = 0; done < n; done++) {
            rc = pydb_read(&recs[done], self->db, mfns[done], &e);
            if (rc) break;
        }
    });
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    list = PyList_New(n);
    if (!list) goto cleanup;
    for (i = 0; i < n; i++) {
        PyObject *r = record_new_from(st, self, recs[i]);
        recs[i] = NULL;
        if (!r) {
            Py_CLEAR(list);
            goto cleanup;
        }
        PyList_SET_ITEM(list, i, r);
    }
cleanup:
    if (recs)
        for (i = 0; i < n; i++) pydb_record_free(recs[i]);
    PyMem_Free(recs);
    PyMem_Free(mfns);
    Py_XDECREF(seq);
    return list;
}

static PyObject *database_xrf(DatabaseObject *self, PyObject *arg)
{
    module_state *st = state_of_type(Py_TYPE(self));
    static const char *const states[] = {"unused", "active",
                                         "logically deleted",
                                         "physically deleted"};
    pydb_xrf_entry x;
    pydb_error e;
    int32_t mfn;
    int rc;
    if (!st || parse_mfn(st, arg, &mfn) < 0 || check_open(st, self) < 0)
        return NULL;
    UNLOCKED(self, rc = pydb_xrf_get(&x, self->db, mfn, &e));
    if (rc) return set_error(st, rc, &e);
    return Py_BuildValue("{s:i,s:s,s:L,s:O,s:O}", "raw", (int)x.raw, "state",
                         states[x.state], "offset", (long long)x.offset,
                         "new", (x.flags & PYDB_FLAG_NEW) ? Py_True : Py_False,
                         "pending",
                         (x.flags & PYDB_FLAG_PENDING) ? Py_True : Py_False);
}

static PyObject *database_counts(DatabaseObject *self, PyObject *unused)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_counts c;
    pydb_error e;
    int rc;
    (void)unused;
    if (!st || check_open(st, self) < 0) return NULL;
    UNLOCKED(self, rc = pydb_count(&c, self->db, &e));
    if (rc) return set_error(st, rc, &e);
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i}", "active", c.active,
                         "logically_deleted", c.ldeleted,
                         "physically_deleted", c.pdeleted, "unused", c.unused,
                         "new", c.flag_new, "pending", c.flag_pending);
}

static Py_ssize_t database_len(DatabaseObject *self)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_counts c;
    pydb_error e;
    int rc;
    if (!st || check_open(st, self) < 0) return -1;
    UNLOCKED(self, rc = pydb_count(&c, self->db, &e));
    if (rc) {
        set_error(st, rc, &e);
        return -1;
    }
    return c.active;
}

static PyObject *database_list_mfns(DatabaseObject *self, PyObject *args,
                                    PyObject *kw)
{
    static char *kwlist[] = {"deleted", NULL};
    module_state *st = state_of_type(Py_TYPE(self));
    int include_deleted = 0;
    int32_t *buf = NULL, next, from = 1, end;
    size_t n = 0, total = 0, cap = 0;
    pydb_error e;
    PyObject *list = NULL;
    int rc = PYDB_OK;

    if (!st || !PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist,
                                            &include_deleted) ||
        check_open(st, self) < 0)
        return NULL;
    end = pydb_max_mfn(self->db) + 1;
    while (from < end) {
        /* Grow with the GIL held, fill with it released. */
        size_t ncap = cap ? cap * 2 : 4096;
        int32_t *g = PyMem_Realloc(buf, sizeof *buf * ncap);
        if (!g) {
            PyErr_NoMemory();
            goto cleanup;
        }
        buf = g;
        cap = ncap;
        if (check_open(st, self) < 0) goto cleanup;  /* GIL was free */
        UNLOCKED(self, {
            while (rc == PYDB_OK && from < end && total < cap) {
                rc = pydb_list_mfns(buf + total, cap - total, &n, &next,
                                    self->db, from, include_deleted, &e);
                total += n;
                from = next;
            }
        });
        if (rc) {
            set_error(st, rc, &e);
            goto cleanup;
        }
    }
    list = PyList_New((Py_ssize_t)total);
    for (size_t i = 0; list && i < total; i++) {
        PyObject *v = PyLong_FromLong(buf[i]);
        if (!v) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
cleanup:
    PyMem_Free(buf);
    return list;
}

static PyObject *database_drop_cache(DatabaseObject *self, PyObject *unused)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_error e;
    int rc;
    (void)unused;
    if (!st || check_open(st, self) < 0) return NULL;
    UNLOCKED(self, rc = pydb_drop_cache(self->db, &e));
    if (rc) return set_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *database_info(DatabaseObject *self, PyObject *unused)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_info i;
    (void)unused;
    if (!st || check_open(st, self) < 0) return NULL;
    pydb_info_get(self->db, &i);
    return Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:s,s:L,s:L,s:s,s:s}", "next_mfn",
        i.next_mfn, "next_block", i.next_block, "next_pos", i.next_pos,
        "mftype", i.mftype, "mstxl", i.mstxl, "reccnt", i.reccnt, "layout",
        pydb_layout_name(i.layout), "io", pydb_io_name(i.io), "lock",
        i.lock ? "mutex" : "none", "mst_size", (long long)i.mst_size,
        "xrf_size", (long long)i.xrf_size, "mst_path", i.mst_path, "xrf_path",
        i.xrf_path);
}

static PyObject *database_get_max_mfn(DatabaseObject *self, void *c)
{
    module_state *st = state_of_type(Py_TYPE(self));
    (void)c;
    if (!st || check_open(st, self) < 0) return NULL;
    /* Records committed by another handle or process since: re-read the
     * control record (a small read; the GIL is released for it). */
    UNLOCKED(self, pydb__refresh(self->db));
    return PyLong_FromLong(pydb_max_mfn(self->db));
}

static PyObject *database_get_closed(DatabaseObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->db == NULL || self->closing);
}

static PyObject *database_get_encoding(DatabaseObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->encoding ? self->encoding : Py_None);
}

static PyObject *database_get_path(DatabaseObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->path ? self->path : Py_None);
}

/* ------------------------------------------------------------ iterator */

typedef struct {
    PyObject_HEAD
    DatabaseObject *db;
    int32_t next;          /* next MFN to list from                       */
    int include_deleted;
    int skip_damaged;
    pydb_record *recs[BATCH];
    int nrecs, pos;
    int done;
    int pending_rc;        /* error met after the records of this batch  */
    pydb_error pending;
} IterObject;

static void iter_clear_batch(IterObject *it)
{
    for (int i = it->pos; i < it->nrecs; i++) {
        pydb_record_free(it->recs[i]);
        it->recs[i] = NULL;
    }
    it->nrecs = it->pos = 0;
}

static void iter_dealloc(IterObject *it)
{
    PyTypeObject *tp = Py_TYPE(it);
    PyObject_GC_UnTrack(it);
    iter_clear_batch(it);
    Py_CLEAR(it->db);
    tp->tp_free((PyObject *)it);
    Py_DECREF(tp);
}

static int iter_traverse(IterObject *it, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(it));
    Py_VISIT(it->db);
    return 0;
}

/* Read the next batch with one GIL release. */
static int iter_fill(module_state *st, IterObject *it)
{
    DatabaseObject *self = it->db;
    int32_t mfns[BATCH], next = it->next;
    size_t n = 0;
    pydb_error e;
    int rc = PYDB_OK, nrecs = 0;

    if (check_open(st, self) < 0) return -1;
    UNLOCKED(self, {
        while (nrecs == 0 && next <= pydb_max_mfn(self->db)) {
            rc = pydb_list_mfns(mfns, BATCH, &n, &next, self->db, next,
                                it->include_deleted, &e);
            if (rc) break;
            for (size_t i = 0; i < n; i++) {
                pydb_record *r = NULL;
                int rrc = pydb_read(&r, self->db, mfns[i], &e);
                if (rrc == PYDB_OK) {
                    it->recs[nrecs++] = r;
                    continue;
                }
                pydb_record_free(r);
                if (rrc == PYDB_ENOTFOUND ||
                    (rrc == PYDB_ECORRUPT && it->skip_damaged))
                    continue;
                rc = rrc;
                next = mfns[i] + 1;   /* resume after the damaged one */
                break;
            }
            if (rc) break;
        }
    });
    it->nrecs = nrecs;
    it->pos = 0;
    it->next = next;
    if (rc) {
        if (nrecs == 0) return set_error(st, rc, &e), -1;
        /* Yield the records read before the damaged one first. */
        it->pending_rc = rc;
        it->pending = e;
        return 0;
    }
    if (nrecs == 0) it->done = 1;
    return 0;
}

static PyObject *iter_next(IterObject *it)
{
    module_state *st = state_of_type(Py_TYPE(it));
    pydb_record *r;
    if (!st) return NULL;
    if (!(it->done && it->pos >= it->nrecs) && check_open(st, it->db) < 0)
        return NULL;
    if (it->pos >= it->nrecs) {
        if (it->pending_rc) {
            int rc = it->pending_rc;
            it->pending_rc = 0;
            it->nrecs = it->pos = 0;
            return set_error(st, rc, &it->pending);
        }
        if (it->done) return NULL;
        if (iter_fill(st, it) < 0) return NULL;
        if (it->nrecs == 0) return NULL;
    }
    r = it->recs[it->pos];
    it->recs[it->pos++] = NULL;
    return record_new_from(st, it->db, r);
}

static PyType_Slot iter_slots[] = {
    {Py_tp_dealloc, iter_dealloc},
    {Py_tp_traverse, iter_traverse},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, iter_next},
    {0, NULL}};

static PyType_Spec iter_spec = {
    "pydb._pydb.RecordIterator", sizeof(IterObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    iter_slots};

static PyObject *make_iter(DatabaseObject *self, int32_t start,
                           int include_deleted, int skip_damaged)
{
    module_state *st = state_of_type(Py_TYPE(self));
    IterObject *it;
    if (!st || check_open(st, self) < 0) return NULL;
    it = PyObject_GC_New(IterObject, st->iter_type);
    if (!it) return NULL;
    it->db = (DatabaseObject *)Py_NewRef(self);
    it->next = start < 1 ? 1 : start;
    it->include_deleted = include_deleted;
    it->skip_damaged = skip_damaged;
    it->nrecs = it->pos = 0;
    it->done = 0;
    it->pending_rc = 0;
    PyObject_GC_Track(it);
    return (PyObject *)it;
}

static PyObject *database_iter(DatabaseObject *self)
{
    return make_iter(self, 1, 0, 0);
}

static PyObject *database_records(DatabaseObject *self, PyObject *args,
                                  PyObject *kw)
{
    static char *kwlist[] = {"start", "deleted", "skip_damaged", NULL};
    int start = 1, deleted = 0, skip = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$ipp", kwlist, &start,
                                     &deleted, &skip))
        return NULL;
    return make_iter(self, start, deleted, skip);
}

static PyMethodDef database_methods[] = {
    {"close", (PyCFunction)database_close, METH_NOARGS,
     "close($self, /)\n--\n\nClose the files.  Waits for reads in flight "
     "in other threads; later calls raise ClosedError.  Idempotent."},
    {"read", (PyCFunction)database_read, METH_O,
     "read($self, mfn, /)\n--\n\nThe current version of record `mfn` "
     "(int, 1-based) as a Record; logically deleted records too (deleted "
     "is True).  Same as db[mfn].\n\nRaises NotFoundError (a KeyError) "
     "for an MFN outside 1..max_mfn, never created or physically deleted; "
     "CorruptionError (file, byte offset, reason) for a damaged record or "
     "XRF; DiskError for an I/O error; ClosedError; TypeError for a "
     "non-int."},
    {"_read_at", (PyCFunction)database_read_at, METH_VARARGS,
     "_read_at($self, mfn, offset, /)\n--\n\nThe version of `mfn` stored at "
     "byte `offset` of the .mst."},
    {"read_many", (PyCFunction)database_read_many, METH_O,
     "read_many($self, mfns, /)\n--\n\nThe records of an iterable of MFNs "
     "(ints, 1-based), in the order given, as a list of Record, read with "
     "one GIL release.\n\nRaises, for the first MFN that fails: "
     "NotFoundError, CorruptionError, DiskError (as read()); ClosedError; "
     "TypeError."},
    {"xrf_entry", (PyCFunction)database_xrf, METH_O,
     "xrf_entry($self, mfn, /)\n--\n\nThe decoded XRF entry of `mfn`: dict "
     "with raw, state, offset, new, pending."},
    {"counts", (PyCFunction)database_counts, METH_NOARGS,
     "counts($self, /)\n--\n\nXRF states over MFN 1..max_mfn: dict with "
     "active, logically_deleted, physically_deleted, unused, new, pending."},
    {"mfns", (PyCFunction)(void (*)(void))database_list_mfns,
     METH_VARARGS | METH_KEYWORDS,
     "mfns($self, /, deleted=False)\n--\n\nMFNs of the active records (and "
     "logically deleted ones if `deleted`), ascending (list of int)."},
    {"records", (PyCFunction)(void (*)(void))database_records,
     METH_VARARGS | METH_KEYWORDS,
     "records($self, /, *, start=1, deleted=False, skip_damaged=False)\n--\n"
     "\nAn iterator of the records (Record) from MFN `start` (1-based) in "
     "MFN order: the active ones, and the logically deleted ones too if "
     "`deleted`; 256 records are read per GIL release.  With "
     "`skip_damaged`, damaged records are left out instead of raising."
     "\n\nRaises (while iterating): CorruptionError for a damaged record "
     "(after yielding the records before it) unless skip_damaged; "
     "DiskError; ClosedError once the database is closed."},
    {"drop_cache", (PyCFunction)database_drop_cache, METH_NOARGS,
     "drop_cache($self, /)\n--\n\nDrop the files from the page cache."},
    {"info", (PyCFunction)database_info, METH_NOARGS,
     "info($self, /)\n--\n\nControl record and detected layout (dict)."},
    {NULL}};

static PyGetSetDef database_getset[] = {
    {"max_mfn", (getter)database_get_max_mfn, NULL,
     "Highest MFN ever assigned, NXTMFN - 1 (int; 0 when empty), as the "
     "control record says now (commits of other handles and processes "
     "included).", NULL},
    {"closed", (getter)database_get_closed, NULL, "True once closed.", NULL},
    {"encoding", (getter)database_get_encoding, NULL,
     "Encoding used to decode field values (str).", NULL},
    {"path", (getter)database_get_path, NULL, "The path as given.", NULL},
    {NULL}};

static PyMemberDef database_members[] = {
    {"__weaklistoffset__", T_PYSSIZET,
     offsetof(DatabaseObject, weakreflist), READONLY, NULL},
    {NULL}};

static PyType_Slot database_slots[] = {
    {Py_tp_init, database_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, database_dealloc},
    {Py_tp_traverse, database_traverse},
    {Py_tp_methods, database_methods},
    {Py_tp_getset, database_getset},
    {Py_tp_members, database_members},
    {Py_tp_iter, database_iter},
    {Py_mp_subscript, database_read},
    {Py_mp_length, database_len},
    {Py_tp_doc, "Low-level database handle (see pydb.Database)."},
    {0, NULL}};

static PyType_Spec database_spec = {
    "pydb._pydb.Database", sizeof(DatabaseObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    database_slots};

/* ------------------------------------------------------------- module */

static PyObject *mod_set_record_class(PyObject *m, PyObject *cls)
{
    module_state *st = PyModule_GetState(m);
    if (!PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject *)cls, st->record_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a subclass of Record");
        return NULL;
    }
    Py_XSETREF(st->record_class, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyObject *mod_test_read_delay(PyObject *m, PyObject *arg)
{
    unsigned long us = PyLong_AsUnsignedLong(arg);
    (void)m;
    if (us == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    pydb__test_set_read_delay((unsigned)us);
    Py_RETURN_NONE;
}

/* One record of a _build batch: what the core is asked to do with it. */
typedef struct {
    int skip;          /* MFN left out (physically deleted)               */
    int deleted;       /* store logically deleted                          */
    size_t first, nf;  /* its fields in the batch's field array            */
} build_op;

#define BUILD_BATCH 256   /* records handed to the core per GIL release */

/* Run a batch of records through the builder (GIL released by the caller);
 * returns the first error, PYDB_OK otherwise. */
static int build_batch(pydb_builder *b, const build_op *ops, size_t n,
                       const pydb_field *fields, pydb_error *e)
{
    int rc = PYDB_OK;
    for (size_t i = 0; i < n && rc == PYDB_OK; i++) {
        if (ops[i].skip) {
            rc = pydb_builder_skip(b, e);
            continue;
        }
        rc = pydb_builder_add(b, fields + ops[i].first, (uint32_t)ops[i].nf, e);
        if (rc == PYDB_OK && ops[i].deleted) rc = pydb_builder_delete_last(b, e);
    }
    return rc;
}

static PyObject *mod_build(PyObject *m, PyObject *args)
{
    /* _build(path, layout, mstxl, records, sync[, deleted]): records is an
     * iterable of sequences of (tag, bytes), or None for an MFN left out
     * (physically deleted); `deleted` a container of MFNs to store
     * logically deleted.  Records are converted in batches with the GIL
     * held, then written with it released (the field values stay owned
     * by the batch's sequences until then). */
    module_state *st = PyModule_GetState(m);
    PyObject *records, *it = NULL, *item = NULL, *pb = NULL, *deleted = NULL;
    PyObject *hold[BUILD_BATCH];
    build_op ops[BUILD_BATCH];
    size_t nops = 0, nhold = 0, nfields = 0, fcap = 0;
    const char *layout_name;
    int mstxl, sync, layout, rc = PYDB_OK;
    pydb_builder *b = NULL;
    pydb_error e;
    pydb_field *fields = NULL;
    long count = 0;

    if (!PyArg_ParseTuple(args, "O&siOp|O", PyUnicode_FSConverter, &pb,
                          &layout_name, &mstxl, &records, &sync, &deleted))
        return NULL;
    if (deleted == Py_None) deleted = NULL;
    layout = pydb_layout_from_name(layout_name);
    if (layout < 0) {
        Py_DECREF(pb);
        PyErr_Format(PyExc_ValueError, "unknown layout '%s' (isis-packed, "
                     "isis-aligned, ffi-packed, ffi-aligned)", layout_name);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = pydb_builder_open(&b, PyBytes_AS_STRING(pb), layout, mstxl, &e);
    Py_END_ALLOW_THREADS
    if (rc) goto fail;
    it = PyObject_GetIter(records);
    if (!it) goto fail_py;
    for (;;) {
        PyObject *fs;
        Py_ssize_t nf, i;
        item = PyIter_Next(it);
        if (item == NULL || nops == BUILD_BATCH) {
            /* Write what is collected, then let go of its values. */
            Py_BEGIN_ALLOW_THREADS
            rc = build_batch(b, ops, nops, fields, &e);
            Py_END_ALLOW_THREADS
            while (nhold) Py_DECREF(hold[--nhold]);
            nops = nfields = 0;
            if (rc) goto fail;
            if (item == NULL) break;
        }
        count++;
        ops[nops].skip = item == Py_None;
        ops[nops].first = nfields;
        ops[nops].nf = 0;
        ops[nops].deleted = 0;
        if (item == Py_None) {
            Py_CLEAR(item);
            nops++;
            continue;
        }
        fs = PySequence_Fast(item, "a record is a sequence of (tag, bytes) "
                                   "pairs, or None");
        Py_CLEAR(item);
        if (!fs) goto fail_py;
        hold[nhold++] = fs;
        nf = PySequence_Fast_GET_SIZE(fs);
        if (nfields + (size_t)nf > fcap) {
            size_t cap = (nfields + (size_t)nf) * 2;
            pydb_field *g = PyMem_Realloc(fields, sizeof *g * cap);
            if (!g) {
                PyErr_NoMemory();
                goto fail_py;
            }
            fields = g;
            fcap = cap;
        }
        for (i = 0; i < nf; i++) {
            PyObject *pair = PySequence_Fast_GET_ITEM(fs, i);
            unsigned int tag;
            const char *v;
            Py_ssize_t len;
            if (!PyArg_ParseTuple(pair, "Iy#", &tag, &v, &len))
                goto fail_py;
            fields[nfields + (size_t)i].tag = tag;
            fields[nfields + (size_t)i].value = (const uint8_t *)v;
            fields[nfields + (size_t)i].len = (uint32_t)len;
        }
        ops[nops].nf = (size_t)nf;
        nfields += (size_t)nf;
        if (deleted) {
            PyObject *key = PyLong_FromLong(count);
            int is_del = key ? PySequence_Contains(deleted, key) : -1;
            Py_XDECREF(key);
            if (is_del < 0) goto fail_py;
            ops[nops].deleted = is_del;
        }
        nops++;
    }
    if (PyErr_Occurred()) goto fail_py;
    Py_BEGIN_ALLOW_THREADS
    rc = pydb_builder_finish(b, sync, &e);
    Py_END_ALLOW_THREADS
    if (rc) goto fail;
    pydb_builder_free(b);
    PyMem_Free(fields);
    Py_XDECREF(it);
    Py_DECREF(pb);
    return PyLong_FromLong(count);
fail:
    set_error(st, rc, &e);
fail_py:
    while (nhold) Py_DECREF(hold[--nhold]);
    pydb_builder_free(b);
    PyMem_Free(fields);
    Py_XDECREF(item);
    Py_XDECREF(it);
    Py_XDECREF(pb);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"_set_record_class", mod_set_record_class, METH_O, NULL},
    {"_test_set_read_delay", mod_test_read_delay, METH_O,
     "_test_set_read_delay(usec, /)\n--\n\nTests only: make every pread of "
     "the core sleep `usec` microseconds first (0 turns it off)."},
    {"_build", mod_build, METH_VARARGS,
     "_build(path, layout, mstxl, records, sync, deleted=None, /)\n--\n\n"
     "Write a new database from an iterable of records, each a sequence of "
     "(tag, bytes), or None for an MFN left out (XRF: physically deleted); "
     "the MFNs in the container `deleted` are stored logically deleted.  "
     "Returns the number of MFNs assigned."},
    {NULL}};

static PyStructSequence_Field field_fields[] = {
    {"tag", "field tag (int, 1..65535)"},
    {"value", "value decoded with the database's encoding (str)"},
    {"raw", "value as stored (bytes)"},
    {NULL}};

static PyStructSequence_Desc field_desc = {
    "pydb.Field", "A field of a record: (tag, value), with .raw bytes.",
    field_fields, 2};

static int module_exec(PyObject *m)
{
    module_state *st = PyModule_GetState(m);
    PyObject *errors;
#define GET_EXC(name)                                                   \
    do {                                                                \
        st->name = PyObject_GetAttrString(errors, #name);               \
        if (!st->name) goto fail;                                       \
    } while (0)

    st->record_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &record_spec, NULL);
    if (!st->record_type) return -1;
    st->record_class = (PyTypeObject *)Py_NewRef(st->record_type);
    st->database_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &database_spec, NULL);
    if (!st->database_type) return -1;
    st->iter_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &iter_spec, NULL);
    if (!st->iter_type) return -1;
    st->field_type = PyStructSequence_NewType(&field_desc);
    if (!st->field_type) return -1;
    if (PyModule_AddType(m, st->record_type) < 0 ||
        PyModule_AddType(m, st->database_type) < 0 ||
        PyModule_AddObjectRef(m, "Field", (PyObject *)st->field_type) < 0)
        return -1;
    if (index_exec(m, st) < 0) return -1;
    if (isisidx_exec(m, st) < 0) return -1;
    if (check_exec(m, st) < 0) return -1;
    if (search_exec(m, st) < 0) return -1;
    if (native_exec(m, st) < 0) return -1;
    if (write_exec(m, st) < 0) return -1;
    errors = PyImport_ImportModule("pydb.errors");
    if (!errors) return -1;
    GET_EXC(Error);
    GET_EXC(CorruptionError);
    GET_EXC(NotFoundError);
    GET_EXC(DiskError);
    GET_EXC(DatabaseNotFoundError);
    GET_EXC(UnsupportedError);
    GET_EXC(RecordTooLargeError);
    GET_EXC(ClosedError);
    GET_EXC(SearchSyntaxError);
    GET_EXC(FSTError);
    GET_EXC(ReadOnlyError);
    GET_EXC(LockTimeoutError);
    GET_EXC(DatabaseExistsError);
    Py_DECREF(errors);
    return 0;
fail:
    Py_DECREF(errors);
    return -1;
#undef GET_EXC
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = PyModule_GetState(m);
    Py_VISIT(st->database_type);
    Py_VISIT(st->record_type);
    Py_VISIT(st->record_class);
    Py_VISIT(st->iter_type);
    Py_VISIT(st->field_type);
    Py_VISIT(st->index_type);
    Py_VISIT(st->checkrun_type);
    Py_VISIT(st->txn_type);
    Py_VISIT(st->Error);
    Py_VISIT(st->CorruptionError);
    Py_VISIT(st->NotFoundError);
    Py_VISIT(st->DiskError);
    Py_VISIT(st->DatabaseNotFoundError);
    Py_VISIT(st->UnsupportedError);
    Py_VISIT(st->RecordTooLargeError);
    Py_VISIT(st->ClosedError);
    Py_VISIT(st->SearchSyntaxError);
    Py_VISIT(st->FSTError);
    Py_VISIT(st->ReadOnlyError);
    Py_VISIT(st->LockTimeoutError);
    Py_VISIT(st->DatabaseExistsError);
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = PyModule_GetState(m);
    Py_CLEAR(st->database_type);
    Py_CLEAR(st->record_type);
    Py_CLEAR(st->record_class);
    Py_CLEAR(st->iter_type);
    Py_CLEAR(st->field_type);
    Py_CLEAR(st->index_type);
    Py_CLEAR(st->checkrun_type);
    Py_CLEAR(st->txn_type);
    Py_CLEAR(st->Error);
    Py_CLEAR(st->CorruptionError);
    Py_CLEAR(st->NotFoundError);
    Py_CLEAR(st->DiskError);
    Py_CLEAR(st->DatabaseNotFoundError);
    Py_CLEAR(st->UnsupportedError);
    Py_CLEAR(st->RecordTooLargeError);
    Py_CLEAR(st->ClosedError);
    Py_CLEAR(st->SearchSyntaxError);
    Py_CLEAR(st->FSTError);
    Py_CLEAR(st->ReadOnlyError);
    Py_CLEAR(st->LockTimeoutError);
    Py_CLEAR(st->DatabaseExistsError);
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL}};

struct PyModuleDef pydb_module = {
    PyModuleDef_HEAD_INIT, "pydb._pydb",
    "Binding of the pydb C core (use the pydb package, not this module).",
    sizeof(module_state), module_methods, module_slots, module_traverse,
    module_clear, module_free};

PyMODINIT_FUNC PyInit__pydb(void) { return PyModuleDef_Init(&pydb_module); }
