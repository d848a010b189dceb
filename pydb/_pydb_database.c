/*
 * _pydb_database.c - the Database object (pydb_db for Python) and its
 * RecordIterator (over a database, or over a snapshot of it); _create()
 * makes the files of an empty database.
 *
 * Reads run inside UNLOCKED() on the database's guard; a cache hit of
 * read() is served with the GIL held (pydb_read_nowait).  Iteration reads
 * BATCH records per GIL release.  close() marks the handle closing, waits
 * for the operations in flight, aborts the open transaction, releases the
 * live snapshots (_pydb_snapshot.c) and closes the core handle; the
 * attached native index is released after that.
 */
#include "_pydb_database.h"
#include "_pydb_index.h"
#include "_pydb_record.h"
#include "_pydb_snapshot.h"
#include "_pydb_transaction.h"
#include <structmember.h>

#define BATCH 256   /* records read per GIL release when iterating */

int database_check_open_(module_state *st, DatabaseObject *self,
                         guard_pins *pins)
{
    /* pinned first: close() clears self->db only once no pin is held */
    if (guard_pin(pins, &self->guard) == 0 && self->db) return 0;
    PyErr_SetString(st->ClosedError, "the database is closed");
    return -1;
}

/* Wait (GIL released) for in-flight operations, then free the handle. */
static void db_close_handle(DatabaseObject *self)
{
    pydb_db *db = self->db;
    /* closed, or another close (perhaps another thread's) runs: ended */
    if (!db || !guard_close_begin(&self->guard)) return;
    pydb_close_begin(db);   /* a write waiting for the writer lock gives up */
    guard_wait_idle(&self->guard);
    transaction_abort_open(self);
    snapshots_release_all(self);   /* pydb.h: before pydb_close() */
    if (self->hooked_index)        /* pydb.h group 7: before pydb_close() */
        index_detach_hooked(self->hooked_index);
    HANDLE_CLEAR(self->db);
    pydb_close(db);
    if (self->hooked_index) {   /* after pydb_close: no commit can run */
        index_release_hooked(self->hooked_index);
        Py_CLEAR(self->hooked_index);
    }
    guard_closed(&self->guard);
}

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
                             "flags", "gc", NULL};
    module_state *st = state_of_type(Py_TYPE(self));
    PyObject *path_obj, *path_bytes = NULL;
    const char *encoding = "utf-8", *errors = "surrogateescape";
    const char *io = "pread", *lock = "none", *cpath;
    const char *gc = pydb_gc_policy_name(PYDB_GC_DEFAULT);
    pydb_options opt;
    pydb_error e;
    pydb_db *db = NULL;
    int rc, flags = 0, policy;

    if (!st) return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|ssssis", kwlist, &path_obj,
                                     &encoding, &errors, &io, &lock, &flags,
                                     &gc))
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
    policy = pydb_gc_policy_from_name(gc);
    if (policy < 0) {
        PyErr_Format(PyExc_ValueError, "gc must be 'none', 'background', "
                     "'cooperative' or 'combined', not '%s'", gc);
        return -1;
    }
    opt.flags = flags | PYDB_OPEN_GC(policy);
    if (!PyCodec_KnownEncoding(encoding)) {  /* fail early */
        PyErr_Format(PyExc_LookupError, "unknown encoding: %s", encoding);
        return -1;
    }
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) return -1;
    cpath = PyBytes_AS_STRING(path_bytes);
    memset(&e, 0, sizeof e);
    UNLOCKED(NULL, NULL, rc = pydb_open(&db, cpath, &opt, &e));
    Py_DECREF(path_bytes);
    if (rc) {
        set_error(st, rc, &e);
        return -1;
    }
    self->db = db;
    /* open again: only `closing` (and what close() noted) is reset, the
     * slots are left as close() left them (another thread's pin may be
     * backing off) */
    atomic_store(&self->guard.closed, 0);
    atomic_store(&self->guard.closer, 0);
    atomic_store(&self->guard.closing, 0);
    Py_XSETREF(self->encoding, PyUnicode_FromString(encoding));
    Py_XSETREF(self->errors, PyUnicode_FromString(errors));
    Py_XSETREF(self->path, PyOS_FSPath(path_obj));
    {
        pydb_info i;
        pydb_info_get(&i, db);
        Py_XSETREF(self->mst_path, PyUnicode_DecodeFSDefault(i.mst_path));
    }
    if (!self->encoding || !self->errors || !self->path || !self->mst_path)
        return -1;
    shared_str(&self->encoding);
    shared_str(&self->errors);
    shared_str(&self->mst_path);
    record_codec_clear(&self->codec);
    return codec_resolve(st, self->encoding, &self->codec);
}

/* _set_codec(encoding, errors): the codec of the records read from now
 * on.  Only for Database.__init__ (pydb.open(encoding="auto") sets the
 * codec it detected), before the handle is shared: other calls keep the
 * UTF-8 of the old name while they run with the GIL released.  Records
 * read before keep theirs. */
static PyObject *database_set_codec(DatabaseObject *self, PyObject *args)
{
    module_state *st = state_of_type(Py_TYPE(self));
    const char *encoding, *errors;
    PyObject *enc, *err;
    record_codec codec;
    if (!st || !PyArg_ParseTuple(args, "ss:_set_codec", &encoding, &errors))
        return NULL;
    if (!PyCodec_KnownEncoding(encoding)) {
        PyErr_Format(PyExc_LookupError, "unknown encoding: %s", encoding);
        return NULL;
    }
    enc = PyUnicode_FromString(encoding);
    err = enc ? PyUnicode_FromString(errors) : NULL;
    if (!err) {
        Py_XDECREF(enc);
        return NULL;
    }
    shared_str(&enc);
    shared_str(&err);
    if (codec_resolve(st, enc, &codec) < 0) {
        Py_DECREF(enc);
        Py_DECREF(err);
        return NULL;
    }
    record_codec_clear(&self->codec);
    self->codec = codec;
    Py_XSETREF(self->encoding, enc);
    Py_XSETREF(self->errors, err);
    Py_RETURN_NONE;
}

static void database_dealloc(DatabaseObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist) PyObject_ClearWeakRefs((PyObject *)self);
    if (self->db) {
        /* No operation can be in flight: it would hold a reference; no
         * snapshot is left: each holds a reference too. */
        transaction_abort_open(self);
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
    Py_CLEAR(self->mst_path);
    record_codec_clear(&self->codec);
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

/* 0 if `db` is open, and `snap` too where reads go through it; else -1
 * with ClosedError set (see database_check_open()). */
static int reads_check_open_(module_state *st, DatabaseObject *db,
                             SnapshotObject *snap, guard_pins *pins)
{
    if (snap) return snapshot_check_open_(st, snap, pins);
    return database_check_open_(st, db, pins);
}
#define reads_check_open(st, db, snap) reads_check_open_(st, db, snap, PINS_)

/* The module state, found from the snapshot where reads go through one:
 * a snapshot's database is NULL once the collector cleared it
 * (snapshot_clear), which its open check then reports. */
static module_state *reads_state(DatabaseObject *db, SnapshotObject *snap)
{
    return state_of_type(snap ? Py_TYPE(snap) : Py_TYPE(db));
}

PyObject *records_read(DatabaseObject *db, SnapshotObject *snap,
                       PyObject *arg)
{
    PIN_SCOPE;
    module_state *st = reads_state(db, snap);
    handle_guard *guard = snap ? &snap->guard : &db->guard;
    pydb_record *rec = NULL;
    pydb_error e;
    int32_t mfn;
    int rc;

    (void)record_spares_take(&rec, 1);

    /* the open check comes last: nothing may run Python code between it
     * and the core call (a __index__ could close the database) */
    if (!st || parse_mfn(st, arg, &mfn) < 0 ||
        reads_check_open(st, db, snap) < 0) {
        record_spare_put(rec);
        return NULL;
    }
    /* A cache hit (of a record unchanged since the snapshot) is read with
     * the GIL held: it cannot wait for the disk.  Otherwise release the
     * GIL and read. */
    rc = snap ? pydb_snapshot_read_nowait(&rec, snap->snap, mfn, &e)
              : pydb_read_nowait(&rec, db->db, mfn, &e);
    if (rc == PYDB_EWOULDBLOCK)
        UNLOCKED(guard, NULL,
                 rc = snap ? pydb_snapshot_read(&rec, snap->snap, mfn, &e)
                           : pydb_read(&rec, db->db, mfn, &e));
    if (rc) {
        pydb_record_free(rec);
        return set_error(st, rc, &e);
    }
    return record_new_from(st, db->encoding, db->errors, db->mst_path,
                           &db->codec, rec);
}

static PyObject *database_read(DatabaseObject *self, PyObject *arg)
{
    return records_read(self, NULL, arg);
}

static PyObject *database_read_at(DatabaseObject *self, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_record *rec = NULL;
    pydb_error e;
    int mfn;
    long long off;
    int rc;

    if (!st || !PyArg_ParseTuple(args, "iL", &mfn, &off) ||
        database_check_open(st, self) < 0)
        return NULL;
    UNLOCKED(&self->guard, NULL, rc = pydb_read_at(&rec, self->db, mfn, off, &e));
    if (rc) {
        pydb_record_free(rec);
        return set_error(st, rc, &e);
    }
    return record_new_from(st, self->encoding, self->errors, self->mst_path,
                           &self->codec, rec);
}

static PyObject *database_files_sequence(DatabaseObject *self,
                                         PyObject *unused)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    (void)unused;
    if (!st || database_check_open(st, self) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(pydb_files_sequence(self->db));
}

PyObject *records_read_many(DatabaseObject *db, SnapshotObject *snap,
                            PyObject *arg)
{
    PIN_SCOPE;
    module_state *st = reads_state(db, snap);
    handle_guard *guard = snap ? &snap->guard : &db->guard;
    PyObject *list = NULL;
    int32_t *mfns = NULL;
    pydb_record **recs = NULL;
    pydb_error e;
    Py_ssize_t n = 0, i;
    int rc = PYDB_OK;

    if (!st) return NULL;
    mfns = mfns_from_seq(st, arg, &n);
    if (!mfns) return NULL;
    recs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *recs);
    if (!recs) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if (reads_check_open(st, db, snap) < 0) goto cleanup;
    (void)record_spares_take(recs, (size_t)n);
    /* One committed state for the batch: the snapshot's, else one taken
     * for it (each read on its own should the reader table be full). */
    UNLOCKED(guard, NULL, {
        pydb_snapshot *tmp = NULL;
        const pydb_snapshot *at = snap ? snap->snap : NULL;
        if (!at && pydb_snapshot_take(&tmp, db->db, &e) == PYDB_OK) at = tmp;
        for (Py_ssize_t k = 0; k < n; k++) {
            rc = at ? pydb_snapshot_read(&recs[k], at, mfns[k], &e)
                    : pydb_read(&recs[k], db->db, mfns[k], &e);
            if (rc) break;
        }
        pydb_snapshot_release(tmp);
    });
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    list = PyList_New(n);
    if (!list) goto cleanup;
    for (i = 0; i < n; i++) {
        PyObject *r = record_new_from(st, db->encoding, db->errors,
                                      db->mst_path, &db->codec, recs[i]);
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
    return list;
}

static PyObject *database_read_many(DatabaseObject *self, PyObject *arg)
{
    return records_read_many(self, NULL, arg);
}

int32_t *mfns_from_seq(module_state *st, PyObject *arg, Py_ssize_t *n)
{
    PyObject *seq = PySequence_Fast(arg, "read_many() takes an iterable "
                                         "of MFNs");
    int32_t *mfns;
    if (!seq) return NULL;
    *n = PySequence_Fast_GET_SIZE(seq);
    mfns = PyMem_Malloc(sizeof *mfns * (size_t)(*n ? *n : 1));
    if (!mfns) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++)
        if (parse_mfn(st, PySequence_Fast_GET_ITEM(seq, i), &mfns[i]) < 0) {
            PyMem_Free(mfns);
            Py_DECREF(seq);
            return NULL;
        }
    Py_DECREF(seq);
    return mfns;
}

PyObject *xrf_entry_dict(const pydb_xrf_entry *x)
{
    static const char *const states[] = {"unused", "active",
                                         "logically deleted",
                                         "physically deleted"};
    return Py_BuildValue("{s:i,s:s,s:L,s:O,s:O}", "raw", (int)x->raw,
                         "state", states[x->state], "offset",
                         (long long)x->offset, "new",
                         (x->flags & PYDB_FLAG_NEW) ? Py_True : Py_False,
                         "pending",
                         (x->flags & PYDB_FLAG_PENDING) ? Py_True : Py_False);
}

PyObject *counts_dict(const pydb_counts *c)
{
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i}", "active", c->active,
                         "logically_deleted", c->ldeleted,
                         "physically_deleted", c->pdeleted, "unused",
                         c->unused, "new", c->flag_new, "pending",
                         c->flag_pending);
}

static PyObject *database_xrf(DatabaseObject *self, PyObject *arg)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_xrf_entry x;
    pydb_error e;
    int32_t mfn;
    int rc;
    if (!st || parse_mfn(st, arg, &mfn) < 0 || database_check_open(st, self) < 0)
        return NULL;
    UNLOCKED(&self->guard, NULL, rc = pydb_xrf_get(&x, self->db, mfn, &e));
    if (rc) return set_error(st, rc, &e);
    return xrf_entry_dict(&x);
}

static PyObject *database_counts(DatabaseObject *self, PyObject *unused)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_counts c;
    pydb_error e;
    int rc;
    (void)unused;
    if (!st || database_check_open(st, self) < 0) return NULL;
    UNLOCKED(&self->guard, NULL, rc = pydb_count(&c, self->db, &e));
    if (rc) return set_error(st, rc, &e);
    return counts_dict(&c);
}

static Py_ssize_t database_len(DatabaseObject *self)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_counts c;
    pydb_error e;
    int rc;
    if (!st || database_check_open(st, self) < 0) return -1;
    UNLOCKED(&self->guard, NULL, rc = pydb_count(&c, self->db, &e));
    if (rc) {
        set_error(st, rc, &e);
        return -1;
    }
    return c.active;
}

static PyObject *database_list_mfns(DatabaseObject *self, PyObject *args,
                                    PyObject *kw)
{
    PIN_SCOPE;
    static char *kwlist[] = {"deleted", NULL};
    module_state *st = state_of_type(Py_TYPE(self));
    SnapshotObject *snap;
    int include_deleted = 0;
    PyObject *list;

    if (!st || !PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist,
                                            &include_deleted) ||
        database_check_open(st, self) < 0)
        return NULL;
    /* One committed state for the whole listing: a snapshot taken for it
     * (the start of a listing re-reads the control record first, as
     * pydb_list_mfns() does).  With the reader table full of live
     * readers, each part lists the latest commit instead. */
    UNLOCKED(&self->guard, NULL, (void)pydb_refresh(self->db, NULL));
    snap = (SnapshotObject *)snapshot_take(st->snapshot_type, self, NULL);
    if (snap) {
        list = mfn_list(self, snap, include_deleted, 1);
        snapshot_close_handle(snap);
        Py_DECREF(snap);
        return list;
    }
    if (!PyErr_ExceptionMatches(st->LockTimeoutError)) return NULL;
    PyErr_Clear();
    return mfn_list(self, NULL, include_deleted, 1);
}

static PyObject *database_snapshot(DatabaseObject *self, PyObject *unused)
{
    module_state *st = state_of_type(Py_TYPE(self));
    (void)unused;
    if (!st) return NULL;
    return snapshot_take(st->snapshot_type, self, NULL);
}

static PyObject *database_drop_cache(DatabaseObject *self, PyObject *unused)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_error e;
    int rc;
    (void)unused;
    if (!st || database_check_open(st, self) < 0) return NULL;
    UNLOCKED(&self->guard, NULL, rc = pydb_drop_cache(self->db, &e));
    if (rc) return set_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *database_info(DatabaseObject *self, PyObject *unused)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_info i;
    (void)unused;
    if (!st || database_check_open(st, self) < 0) return NULL;
    pydb_info_get(&i, self->db);
    return Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:s,s:L,s:L,s:s,s:s,s:z}",
        "next_mfn",
        i.next_mfn, "next_block", i.next_block, "next_pos", i.next_pos,
        "mftype", i.mftype, "mstxl", i.mstxl, "reccnt", i.reccnt, "layout",
        pydb_layout_name(i.layout), "io", pydb_io_name(i.io), "lock",
        i.lock ? "mutex" : "none", "mst_size", (long long)i.mst_size,
        "xrf_size", (long long)i.xrf_size, "mst_path", i.mst_path, "xrf_path",
        i.xrf_path, "log_pending", i.log_pending[0] ? i.log_pending : NULL);
}

static PyObject *database_get_max_mfn(DatabaseObject *self, void *c)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    (void)c;
    if (!st || database_check_open(st, self) < 0) return NULL;
    /* Records committed by another handle or process since: re-read the
     * control record (a small read; the GIL is released for it). */
    UNLOCKED(&self->guard, NULL, (void)pydb_refresh(self->db, NULL));
    return PyLong_FromLong(pydb_max_mfn(self->db));
}

static PyObject *database_get_closed(DatabaseObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->guard.closing || !HANDLE_LOAD(self->db));
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

/* ------------------------------------------------------ garbage (group 9) */

static PyObject *database_get_gc_policy(DatabaseObject *self, void *c)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    (void)c;
    if (!st || database_check_open(st, self) < 0) return NULL;
    return PyUnicode_FromString(
        pydb_gc_policy_name(pydb_gc_get_policy(self->db)));
}

static int database_set_gc_policy(DatabaseObject *self, PyObject *value,
                                  void *c)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    const char *name;
    pydb_error e;
    int policy, rc;
    (void)c;
    if (!st) return -1;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "gc_policy cannot be deleted");
        return -1;
    }
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "gc_policy is a str, not %.100s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    name = PyUnicode_AsUTF8(value);
    if (!name) return -1;
    policy = pydb_gc_policy_from_name(name);
    if (policy < 0) {
        PyErr_Format(PyExc_ValueError, "gc_policy must be 'none', "
                     "'background', 'cooperative' or 'combined', not %R",
                     value);
        return -1;
    }
    if (database_check_open(st, self) < 0) return -1;
    /* stopping the thread joins it: it may finish a step first */
    UNLOCKED(&self->guard, NULL,
             rc = pydb_gc_set_policy(self->db, policy, &e));
    if (rc) {
        set_error(st, rc, &e);
        return -1;
    }
    return 0;
}

static PyObject *gc_report_dict(const pydb_gc_report *r)
{
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L}", "versions",
                         (long long)r->versions, "bytes", (long long)r->bytes,
                         "postings", (long long)r->postings, "segments",
                         (long long)r->segments, "compactions",
                         (long long)r->compactions, "pinned",
                         (long long)r->pinned);
}

static PyObject *database_collect(DatabaseObject *self, PyObject *args,
                                  PyObject *kw)
{
    PIN_SCOPE;
    static char *kwlist[] = {"timeout", NULL};
    module_state *st = state_of_type(Py_TYPE(self));
    double timeout = 10.0;
    pydb_gc_report r, sum;
    pydb_error e;
    lock_wait w;
    uint64_t since = 0;   /* the slices are one collection */
    int rc, ms;

    if (!st || !PyArg_ParseTupleAndKeywords(args, kw, "|d", kwlist, &timeout))
        return NULL;
    if (!(timeout >= 0)) {
        PyErr_SetString(PyExc_ValueError, "timeout must be a number of "
                        "seconds >= 0");
        return NULL;
    }
    ms = timeout * 1000.0 > (double)INT_MAX ? INT_MAX : (int)(timeout * 1000.0);
    if (database_check_open(st, self) < 0) return NULL;
    /* in slices in the main thread (lock_wait): a signal's handler runs
     * between them; each slice's work adds to the report */
    memset(&sum, 0, sizeof sum);
    /* dead space other programs left, which no counter names: this call
     * compacts for it (one walk) */
    UNLOCKED(&self->guard, NULL, (void)pydb_gc_find_dead_space(self->db));
    lock_wait_start(&w, st, ms);
    for (;;) {
        int slice = lock_wait_slice(&w), again;
        memset(&e, 0, sizeof e);
        UNLOCKED(&self->guard, NULL,
                 rc = pydb_gc_collect_since(&r, self->db, slice, &since,
                                            &e));
        sum.versions += r.versions;
        sum.bytes += r.bytes;
        sum.postings += r.postings;
        sum.segments += r.segments;
        sum.compactions += r.compactions;
        sum.pinned = r.pinned;
        again = lock_wait_again(&w, rc, &e);
        if (again < 0) return NULL;
        if (!again) break;
        if (database_check_open(st, self) < 0) return NULL;
    }
    if (rc) return set_error(st, rc, &e);
    return gc_report_dict(&sum);
}

static PyObject *database_stat(DatabaseObject *self, PyObject *args,
                               PyObject *kw)
{
    PIN_SCOPE;
    static char *kwlist[] = {"index", NULL};
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_stat *s;
    pydb_error e;
    PyObject *last = NULL, *last_time = NULL, *last_error = NULL;
    PyObject *oldest = NULL, *index = NULL, *collector = NULL, *res = NULL;
    PyObject *first_damage = NULL;
    int rc, with_index = 1;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$p", kwlist, &with_index))
        return NULL;
    if (!st || database_check_open(st, self) < 0) return NULL;
    s = PyMem_Malloc(sizeof *s);
    if (!s) return PyErr_NoMemory();
    UNLOCKED(&self->guard, NULL,
             rc = pydb_stat_get_ex(s, self->db,
                                   with_index ? 0 : PYDB_STAT_NO_INDEX, &e));
    if (rc) {
        PyMem_Free(s);
        return set_error(st, rc, &e);
    }
    last = gc_report_dict(&s->last);
    last_time = s->last_collection > 0 ? PyFloat_FromDouble(s->last_collection)
                                       : Py_NewRef(Py_None);
    last_error = s->last_error[0]
                     ? PyUnicode_DecodeUTF8(s->last_error,
                                            strlen(s->last_error), "replace")
                     : Py_NewRef(Py_None);
    oldest = s->readers > 0 ? PyLong_FromUnsignedLongLong(s->oldest_commit)
                            : Py_NewRef(Py_None);
    if (s->index.present)
        index = Py_BuildValue(
            "{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "segments",
            (long long)s->index.segments, "terms", (long long)s->index.terms,
            "postings", (long long)s->index.postings, "dead_postings",
            (long long)s->index.dead_postings, "tombstones",
            (long long)s->index.tombstones, "bytes", (long long)s->index.bytes,
            "files", (long long)s->index.files, "unused_files",
            (long long)s->index.unused_files, "unused_bytes",
            (long long)s->index.unused_bytes);
    else
        index = Py_NewRef(Py_None);
    collector = s->collector_pid ? PyLong_FromLong(s->collector_pid)
                                 : Py_NewRef(Py_None);
    /* as a CorruptionError's text says it: "FILE at byte N: reason" */
    first_damage =
        !s->damaged ? Py_NewRef(Py_None)
        : s->first_damage.offset >= 0
            ? PyUnicode_FromFormat("%s at byte %lld: %s", s->first_damage.path,
                                   (long long)s->first_damage.offset,
                                   s->first_damage.message)
            : PyUnicode_FromFormat("%s: %s", s->first_damage.path,
                                   s->first_damage.message);
    if (!last || !last_time || !last_error || !oldest || !index ||
        !collector || !first_damage)
        goto cleanup;
    res = Py_BuildValue(
        "{s:{s:K,s:O,s:K,s:i,s:s,s:K,s:K,s:O,s:O,s:O,s:O,s:O},"
        "s:{s:L,s:L,s:i,s:L,s:O},"
        "s:{s:L,s:L,s:L,s:d},"
        "s:{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L},"
        "s:{s:L,s:L,s:d},"
        "s:O}",
        "header",
        "commit", (unsigned long long)s->commit,
        "oldest_reader_commit", oldest,
        "behind", (unsigned long long)(s->commit - s->oldest_commit),
        "readers", s->readers,
        "gc_policy", pydb_gc_policy_name(s->policy),
        "file_generation", (unsigned long long)s->file_gen,
        "collections", (unsigned long long)s->collections,
        "last_collection", last_time,
        "last", last,
        "last_error", last_error,
        "pending", s->gc_pending ? Py_True : Py_False,
        "collector_pid", collector,
        "records",
        "active", (long long)s->active,
        "deleted", (long long)s->deleted,
        "next_mfn", (int)s->next_mfn,
        "damaged", (long long)s->damaged,
        "first_damage", first_damage,
        "versions",
        "versions", (long long)s->versions,
        "back_versions", (long long)s->back_versions,
        "longest_chain", (long long)s->longest_chain,
        "average_size",
        s->versions ? (double)s->version_bytes / (double)s->versions : 0.0,
        "garbage",
        "versions", (long long)s->garbage_versions,
        "bytes", (long long)s->garbage_bytes,
        "postings", (long long)(s->index.present ? s->index.dead_postings : 0),
        "segment_files",
        (long long)(s->index.present ? s->index.unused_files : 0),
        "pinned_versions", (long long)s->pinned_versions,
        "pinned_bytes", (long long)s->pinned_bytes,
        "collectable_versions",
        (long long)(s->garbage_versions - s->pinned_versions),
        "collectable_bytes", (long long)(s->garbage_bytes - s->pinned_bytes),
        "master_file",
        "size", (long long)s->mst_size,
        "live_bytes", (long long)s->live_bytes,
        "fill", s->mst_size > 0 ? (double)s->live_bytes / (double)s->mst_size
                                : 0.0,
        "index", index);
cleanup:
    Py_XDECREF(last);
    Py_XDECREF(last_time);
    Py_XDECREF(last_error);
    Py_XDECREF(oldest);
    Py_XDECREF(index);
    Py_XDECREF(collector);
    Py_XDECREF(first_damage);
    PyMem_Free(s);
    return res;
}

/* ------------------------------------------------------------ iterator */

typedef struct {
    PyObject_HEAD
    DatabaseObject *db;
    SnapshotObject *snap;  /* read through this snapshot, or NULL: the
                              latest commit, per batch                    */
    int32_t next;          /* next MFN to list from                       */
    int include_deleted;
    int skip_damaged;
    pydb_record *recs[BATCH];
    int nrecs, pos;
    int done;
    int pending_rc;        /* error met after the records of this batch  */
    pydb_error pending;
    atomic_int busy;       /* a next() is running: another thread's next()
                              raises RuntimeError, as a running generator
                              does (the batch is filled with the GIL
                              released, with or without the GIL)          */
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
    Py_CLEAR(it->snap);
    Py_CLEAR(it->db);
    tp->tp_free((PyObject *)it);
    Py_DECREF(tp);
}

static int iter_traverse(IterObject *it, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(it));
    Py_VISIT(it->db);
    Py_VISIT(it->snap);
    return 0;
}

#define iter_check_open(st, it) reads_check_open(st, (it)->db, (it)->snap)

/* Read the next batch with one GIL release: through the iterator's
 * snapshot if it has one, else through a snapshot of the latest commit
 * taken for the batch (so that the batch is one committed state: listed
 * and read at the same commit).  Should that take fail (every slot of the
 * reader table held by a live process), each read sees the latest
 * commit when it starts, as pydb_read() does. */
static int iter_fill(module_state *st, IterObject *it)
{
    PIN_SCOPE;
    DatabaseObject *self = it->db;
    const pydb_snapshot *snap = it->snap ? it->snap->snap : NULL;
    handle_guard *guard = it->snap ? &it->snap->guard : &self->guard;
    pydb_snapshot *tmp = NULL;
    pydb_snapshot_info si;
    pydb_record *spare[BATCH];
    pydb_listed listed[BATCH];
    int32_t mfns[BATCH], next = it->next, end = 0;
    size_t n = 0;
    pydb_error e;
    size_t nspare, used = 0;
    int rc = PYDB_OK, nrecs = 0, last = 0;

    if (iter_check_open(st, it) < 0) return -1;
    nspare = record_spares_take(spare, BATCH);
    UNLOCKED(guard, NULL, {
        if (!snap) {
            /* The start of an iteration re-reads the control record
             * (commits of programs that do not know the header). */
            int trc;
            if (next <= 1)
                trc = pydb_snapshot_take_fresh(&tmp, self->db, &e);
            else
                trc = pydb_snapshot_take(&tmp, self->db, &e);
            if (trc == PYDB_OK) snap = tmp;
        }
        if (snap) {
            pydb_snapshot_info_get(&si, snap);
            end = si.next_mfn;
        }
        while (nrecs == 0 &&
               next < (snap ? end : pydb_max_mfn(self->db) + 1)) {
            /* through a snapshot, each XRF entry is read once: the
             * listing's (pydb_snapshot_read_listed) */
            rc = snap ? pydb_snapshot_list(listed, BATCH, &n, &next, snap,
                                           next, it->include_deleted, &e)
                      : pydb_list_mfns(mfns, BATCH, &n, &next, self->db,
                                       next, it->include_deleted, &e);
            if (rc) break;
            for (size_t i = 0; i < n; i++) {
                pydb_record *r = used < nspare ? spare[used++] : NULL;
                int32_t mfn = snap ? listed[i].mfn : mfns[i];
                int rrc = snap ? pydb_snapshot_read_listed(&r, snap,
                                                           &listed[i], &e)
                               : pydb_read(&r, self->db, mfn, &e);
                if (rrc == PYDB_OK) {
                    it->recs[nrecs++] = r;
                    continue;
                }
                pydb_record_free(r);
                if (rrc == PYDB_ENOTFOUND ||
                    (rrc == PYDB_ECORRUPT && it->skip_damaged))
                    continue;
                rc = rrc;
                next = mfn + 1;   /* resume after the damaged one */
                break;
            }
            if (rc) break;
        }
        /* Without a commit header each take re-reads the control record
         * (three system calls, a third of iterating a small database):
         * there the iteration ends where the state its last take saw
         * ends, rather than take another to find nothing past it. */
        last = tmp && si.commit == 0 && next >= end && !rc;
        pydb_snapshot_release(tmp);
    });
    while (used < nspare) record_spare_put(spare[used++]);
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
    if (nrecs == 0 || last) it->done = 1;
    return 0;
}

static PyObject *iter_next_claimed(IterObject *it)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(it));
    pydb_record *r;
    if (!st) return NULL;
    if (!(it->done && it->pos >= it->nrecs) && iter_check_open(st, it) < 0)
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
    return record_new_from(st, it->db->encoding, it->db->errors,
                           it->db->mst_path, &it->db->codec, r);
}

static PyObject *iter_next(IterObject *it)
{
    PyObject *r;
    if (atomic_exchange(&it->busy, 1)) {
        PyErr_SetString(PyExc_RuntimeError, "the RecordIterator is in use "
                        "by another thread");
        return NULL;
    }
    r = iter_next_claimed(it);
    atomic_store(&it->busy, 0);
    return r;
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

PyObject *records_iter_new(DatabaseObject *self, SnapshotObject *snap,
                           int32_t start, int include_deleted,
                           int skip_damaged)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    IterObject *it;
    if (!st) return NULL;
    if (snap ? snapshot_check_open(st, snap) < 0
             : database_check_open(st, self) < 0)
        return NULL;
    it = PyObject_GC_New(IterObject, st->iter_type);
    if (!it) return NULL;
    it->db = (DatabaseObject *)Py_NewRef(self);
    it->snap = snap ? (SnapshotObject *)Py_NewRef(snap) : NULL;
    it->next = start < 1 ? 1 : start;
    it->include_deleted = include_deleted;
    it->skip_damaged = skip_damaged;
    it->nrecs = it->pos = 0;
    it->done = 0;
    it->pending_rc = 0;
    atomic_store(&it->busy, 0);
    PyObject_GC_Track(it);
    return (PyObject *)it;
}

int mfn_start(PyObject *start, int32_t *out)
{
    int over = 0;
    long long v = 1;
    if (start) {
        /* any integer type (__index__: numpy's too), as "i" took them */
        PyObject *i = PyIndex_Check(start) ? PyNumber_Index(start) : NULL;
        if (!i) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "start must be an int, not "
                             "%.100s", Py_TYPE(start)->tp_name);
            return -1;
        }
        v = PyLong_AsLongLongAndOverflow(i, &over);
        Py_DECREF(i);
        if (v == -1 && PyErr_Occurred()) return -1;
    }
    *out = over > 0 || (!over && v > INT32_MAX) ? INT32_MAX
           : over < 0 || v < 1 ? 1 : (int32_t)v;
    return 0;
}

static PyObject *database_iter(DatabaseObject *self)
{
    return records_iter_new(self, NULL, 1, 0, 0);
}

int records_args(PyObject *args, PyObject *kw, int32_t *from, int *deleted,
                 int *skip)
{
    static char *kwlist[] = {"start", "deleted", "skip_damaged", NULL};
    PyObject *start = NULL;
    *deleted = *skip = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$Opp", kwlist, &start,
                                     deleted, skip))
        return -1;
    return mfn_start(start, from);
}

static PyObject *database_records(DatabaseObject *self, PyObject *args,
                                  PyObject *kw)
{
    int32_t from;
    int deleted, skip;
    if (records_args(args, kw, &from, &deleted, &skip) < 0) return NULL;
    return records_iter_new(self, NULL, from, deleted, skip);
}

static PyMethodDef database_methods[] = {
    {"_set_codec", (PyCFunction)database_set_codec, METH_VARARGS,
     "_set_codec($self, encoding, errors, /)\n--\n\nDecode the records "
     "read from now on with `encoding`/`errors` (internal: used by "
     "pydb.open(encoding='auto') before the handle is shared).\n\n"
     "Raises LookupError for an unknown encoding."},
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
    {"_files_sequence", (PyCFunction)database_files_sequence, METH_NOARGS,
     "_files_sequence($self, /)\n--\n\nThe handle's file sequence (int): "
     "changed when it moved to the files a compaction put in place."},
    {"read_many", (PyCFunction)database_read_many, METH_O,
     "read_many($self, mfns, /)\n--\n\nThe records of an iterable of MFNs "
     "(ints, 1-based), in the order given, as a list of Record, read with "
     "one GIL release and as of one commit (the latest when it starts).\n\nRaises, for the first MFN that fails: "
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
     "logically deleted ones if `deleted`), ascending (list of int), as of "
     "one commit (the latest when it starts).\n\nRaises CorruptionError, "
     "DiskError, ClosedError."},
    {"records", (PyCFunction)(void (*)(void))database_records,
     METH_VARARGS | METH_KEYWORDS,
     "records($self, /, *, start=1, deleted=False, skip_damaged=False)\n--\n"
     "\nAn iterator of the records (Record) from MFN `start` (1-based; "
     "below 1 counts as 1, past the largest MFN nothing is found) in "
     "MFN order: the active ones, and the logically deleted ones too if "
     "`deleted`; 256 records are read per GIL release, each batch as of one "
     "commit (the latest when the batch starts).  With "
     "`skip_damaged`, damaged records are left out instead of raising."
     "\n\nRaises (while iterating): CorruptionError for a damaged record "
     "(after yielding the records before it) unless skip_damaged; "
     "iterating on goes on after it (as `pydb dump` does, naming each "
     "damaged record).  DiskError; ClosedError once the database is "
     "closed."},
    {"snapshot", (PyCFunction)database_snapshot, METH_NOARGS,
     "snapshot($self, /)\n--\n\nA Snapshot pinned to the latest published "
     "commit (Snapshot(db), without an index view): reads through it "
     "answer as of that commit while writers go on.  The GIL is released while it is taken (a copy "
     "of the commit header and a reader-table slot; in files mode a read "
     "of the control record).\n\nRaises ClosedError; LockTimeoutError "
     "when every reader-table slot is held by a live process; "
     "CorruptionError/DiskError reading the control record without a "
     "commit header."},
    {"drop_cache", (PyCFunction)database_drop_cache, METH_NOARGS,
     "drop_cache($self, /)\n--\n\nDrop the files from the page cache."},
    {"info", (PyCFunction)database_info, METH_NOARGS,
     "info($self, /)\n--\n\nControl record and detected layout (dict)."},
    {"collect", (PyCFunction)(void (*)(void))database_collect,
     METH_VARARGS | METH_KEYWORDS,
     "collect($self, /, timeout=10.0)\n--\n\nCollect all collectable "
     "garbage now, on the calling thread (GIL released); see "
     "pydb.Database.collect."},
    {"stat", (PyCFunction)(void (*)(void))database_stat,
     METH_VARARGS | METH_KEYWORDS,
     "stat($self, /, *, index=True)\n--\n\nThe figures of the latest "
     "commit (GIL released); see pydb.Database.stat."},
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
    {"gc_policy", (getter)database_get_gc_policy,
     (setter)database_set_gc_policy,
     "The garbage collection policy (str): 'none', 'background', "
     "'cooperative' or 'combined'; settable.", NULL},
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
    {Py_tp_doc, "Database(path, encoding='utf-8', errors='surrogateescape', "
     "io='pread', lock='none', flags=0, gc='background')\n--\n\n"
     "Low-level database handle (see pydb.Database)."},
    {0, NULL}};

static PyType_Spec database_spec = {
    "pydb._pydb.Database", sizeof(DatabaseObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    database_slots};

/* ------------------------------------------------------- module functions */

/* _create(path, layout, mstxl, sync): the files of an empty database. */
static PyObject *mod_create(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *pb = NULL;
    const char *layout_name, *cpath;
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
    cpath = PyBytes_AS_STRING(pb);
    UNLOCKED(NULL, NULL, {
        rc = pydb_create(&db, cpath, layout, mstxl, &opt, &e);
        if (rc == PYDB_OK) pydb_close(db);
    });
    Py_DECREF(pb);
    if (rc) return set_error(st, rc, &e);
    return PyLong_FromLong(PYDB_OPEN_LAYOUT(layout));
}

static PyMethodDef database_functions[] = {
    {"_create", mod_create, METH_VARARGS,
     "_create(path, layout, mstxl, sync, /)\n--\n\nCreate the files of an "
     "empty database; returns the open flags that name its layout.  Use "
     "pydb.create()."},
    {NULL}};

int database_exec(PyObject *m, module_state *st)
{
    st->database_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &database_spec, NULL);
    if (!st->database_type) return -1;
    st->iter_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &iter_spec, NULL);
    if (!st->iter_type) return -1;
    if (PyModule_AddType(m, st->database_type) < 0 ||
        PyModule_AddType(m, st->iter_type) < 0)
        return -1;
    return PyModule_AddFunctions(m, database_functions);
}
