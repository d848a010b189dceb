/*
 * _pydb_snapshot.c - the Snapshot object: one pinned commit of a database
 * (pydb_snapshot, pydb.h group 3b) for Python, and its index views.
 *
 *     snap = _pydb.Snapshot(db, index=None)  # or db.snapshot()
 *     snap[mfn], snap.read_many(mfns), snap.xrf_entry(mfn), len(snap),
 *     snap.counts(), snap.mfns(), snap.records(), iter(snap), snap.info()
 *     view = snap._index_view()      # the Index as of the commit, or None
 *     snap._search(view, expr)       # pydb_snapshot_search: MFNs, as
 *                                    # _search() gives them (mfn_bytes)
 *     snap.close()                   # pydb_snapshot_release; idempotent
 *
 * Lifetime.  A snapshot holds a reference to its Database, and the
 * Database lists its live snapshots (DatabaseObject.snapshots, borrowed,
 * changed with the GIL held), because pydb_close() needs every snapshot
 * released first: the Database's close() waits for its own operations,
 * then releases each listed snapshot after waiting for the operations in
 * flight on it (snapshots_release_all).  A snapshot is linked into the
 * list before pydb_snapshot_take() runs and the core writes the handle
 * into the object inside UNLOCKED(), so a close() that has waited for the
 * take finds the handle and releases it; the take then reports
 * ClosedError.  Reads on a snapshot are counted on the snapshot's guard
 * only: the Database's close() waits for that guard too.
 *
 * The index view.  pydb_snapshot_index() answers only while the index
 * handle still holds the snapshot's generation (the set it serves and the
 * one before, pydb.h), so the view of the index given to the constructor
 * is taken right after the snapshot, in the same GIL release; when the
 * index has already moved on (PYDB_EWOULDBLOCK: a commit between
 * replacing the MANIFEST and publishing its state) the snapshot is
 * released and taken again, yielding between tries (as _pydb_index.c's
 * _snapshot_index does).  A view that cannot be had leaves the snapshot
 * usable for records; its error is raised by _index_view().  The view is
 * closed with the snapshot.
 *
 * A snapshot is released by close(), by the Database's close(), or when
 * the object is freed (tp_dealloc, tp_clear: garbage collection), each
 * time with the GIL held and no operation in flight.  Using a released
 * snapshot raises ClosedError.
 */
#include "_pydb_snapshot.h"
#include "_pydb_index.h"
#include "_pydb_record.h"
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

#define BATCH 4096   /* MFNs listed per call of pydb_snapshot_list_mfns */
#define VIEW_TRIES 2100   /* takes of a snapshot and its index view: 100
                             yielding, then 1 ms apart (about 2 s)       */

/* Is the snapshot's database open?  Also asked without a pin on the
 * snapshot (the `closed` property, the ClosedError message), while another
 * thread's close() of the database may be clearing its handle pointer:
 * read with HANDLE_LOAD (ThreadSanitizer on python3.13t reported the plain
 * read of the message). */
static int snapshot_db_open(SnapshotObject *s)
{
    return s->db && !s->db->guard.closing && HANDLE_LOAD(s->db->db);
}

int snapshot_check_open_(module_state *st, SnapshotObject *s,
                         guard_pins *pins)
{
    /* Reads on a snapshot count on its guard alone: the database's
     * close() waits for it (snapshots_release_all()). */
    if (guard_pin(pins, &s->guard) == 0 && s->snap && snapshot_db_open(s))
        return 0;
    PyErr_SetString(st->ClosedError, snapshot_db_open(s)
                                     ? "the snapshot is closed"
                                     : "the database is closed");
    return -1;
}

/* ------------------------------------------------- the database's list */

/* The list is changed under the binding lock (_pydb_module.h): the GIL
 * alone serialises nothing on a free-threaded build. */
static void snapshot_link(SnapshotObject *s, DatabaseObject *db)
{
    binding_lock();
    s->next = db->snapshots;
    if (s->next) s->next->pprev = &s->next;
    db->snapshots = s;
    s->pprev = &db->snapshots;
    binding_unlock();
}

static void snapshot_unlink(SnapshotObject *s)
{
    if (!s->db) return;
    binding_lock();
    if (s->pprev) {
        *s->pprev = s->next;
        if (s->next) s->next->pprev = s->pprev;
        s->next = NULL;
        s->pprev = NULL;
    }
    binding_unlock();
}

/* Release the core snapshot and close its index view (GIL held, nothing
 * in flight on the snapshot; the view's close() waits for its own), unless
 * another thread's close() did it: the database's and the snapshot's
 * close() may both have waited.  The claim is made under the binding
 * lock. */
static void snapshot_release_once(SnapshotObject *s)
{
    pydb_snapshot *p = NULL;
    PyObject *view = NULL, *r;
    binding_lock();
    if (s->snap) {   /* claim it */
        p = s->snap;
        view = s->view;
        HANDLE_CLEAR(s->snap);
        s->view = NULL;
    }
    binding_unlock();
    if (!p) return;
    snapshot_unlink(s);
    pydb_snapshot_release(p);
    if (view) {
        /* an exception may be on its way (a dealloc during unwinding: a
         * temporary snapshot left by a raise): kept aside, else the call
         * would see it set and the raise would be lost (SystemError, or a
         * NULL exception later: a crash, found by a review) */
        PyObject *type, *value, *tb;   /* PyErr_GetRaisedException: 3.12 */
        PyErr_Fetch(&type, &value, &tb);
        r = PyObject_CallMethod(view, "close", NULL);
        if (r) Py_DECREF(r);
        else PyErr_WriteUnraisable(view);
        Py_DECREF(view);   /* (its dealloc, too, before the restore) */
        PyErr_Restore(type, value, tb);
    }
}

void snapshots_release_all(DatabaseObject *db)
{
    for (;;) {
        SnapshotObject *s;
        binding_lock();
        s = db->snapshots;
        Py_XINCREF(s);           /* the wait releases the GIL */
        binding_unlock();
        if (!s) break;
        snapshot_unlink(s);
        /* a close() of the snapshot in flight: waited for; else this is
         * its close (a re-entrant one of this thread's: what is left) */
        if (guard_close_begin(&s->guard)) {
            guard_wait_idle(&s->guard);
            snapshot_release_once(s);
            guard_closed(&s->guard);
        } else {
            snapshot_release_once(s);
        }
        Py_DECREF(s);
    }
}

/* ------------------------------------------------------------ life */

/* Take a snapshot of `db` and, with `ix`, the view of ix as of it (GIL
 * released: plain C).  *out is written as soon as a snapshot is held, so
 * that the database's close() finds it.  The take's result is returned;
 * the view's in *view_rc (PYDB_ELOCKED when the index kept moving). */
int take_with_view(pydb_snapshot **out, pydb_index **view, int *view_rc,
                   pydb_error *view_err, pydb_db *db, pydb_index *ix,
                   pydb_error *err)
{
    pydb_error old;
    int rc;
    for (int tries = 0;; tries++) {
        rc = pydb_snapshot_take(out, db, err);
        if (rc || !ix) return rc;
        *view_rc = pydb_snapshot_index(view, *out, ix, view_err);
        if (*view_rc != PYDB_EWOULDBLOCK) return PYDB_OK;
        if (tries + 1 == VIEW_TRIES) break;
        pydb_snapshot_release(*out);
        *out = NULL;
        if (tries < 100) {
            sched_yield();
        } else {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    old = *view_err;   /* not formatted into itself */
    *view_rc = pydb_error_set(view_err, PYDB_ELOCKED, old.path, -1,
                              "the index kept moving past new snapshots (a "
                              "writer died between replacing the index "
                              "MANIFEST and publishing its commit? the next "
                              "writer recovers): %s", old.message);
    return PYDB_OK;
}

/* An Index object owning `view` (NULL + exception; the view is closed on
 * failure); `index` is kept alive with it when the view borrows from it
 * (ISIS and in-memory indexes). */
static PyObject *view_wrap(module_state *st, pydb_index *view, PyObject *index)
{
    IndexObject *v =
        (IndexObject *)st->index_type->tp_alloc(st->index_type, 0);
    if (!v) {
        pydb_index_close(view);
        return NULL;
    }
    v->ix = view;
    guard_init(&v->guard);
    v->hooked = 0;
    v->owner = Py_NewRef(pydb_index_kind(view) == PYDB_INDEX_NATIVE ? Py_None
                                                                    : index);
    return (PyObject *)v;
}

PyObject *snapshot_take(PyTypeObject *tp, DatabaseObject *db, PyObject *index)
{
    PIN_SCOPE;
    module_state *st = state_of_type(tp);
    IndexObject *ix = (IndexObject *)index;
    pydb_index *view = NULL;
    SnapshotObject *s;
    pydb_error e, ve;
    int rc, vrc = PYDB_OK;

    if (!st || database_check_open(st, db) < 0) return NULL;
    s = (SnapshotObject *)tp->tp_alloc(tp, 0);
    if (!s) return NULL;
    s->db = (DatabaseObject *)Py_NewRef(db);
    guard_init(&s->guard);
    /* The allocation may have run Python code (a collection): check
     * again, last before UNLOCKED(). */
    if (database_check_open(st, db) < 0 ||
        (ix && index_check_open(st, ix) < 0)) {
        Py_DECREF(s);
        return NULL;
    }
    snapshot_link(s, db);
    memset(&e, 0, sizeof e);
    memset(&ve, 0, sizeof ve);
    UNLOCKED(&db->guard, ix ? &ix->guard : NULL,
             rc = take_with_view(&s->snap, &view, &vrc, &ve, db->db,
                                 ix ? ix->ix : NULL, &e));
    if (rc) {
        HANDLE_CLEAR(s->snap);
        snapshot_unlink(s);
        Py_DECREF(s);
        return set_error(st, rc, &e);
    }
    if (!s->snap) {   /* the database's close() released it meanwhile */
        pydb_index_close(view);
        Py_DECREF(s);
        PyErr_SetString(st->ClosedError, "the database is closed");
        return NULL;
    }
    s->view_rc = vrc;
    s->view_err = ve;
    if (view) {
        s->view = view_wrap(st, view, index);
        if (!s->view) {
            Py_DECREF(s);
            return NULL;
        }
    }
    return (PyObject *)s;
}

static PyObject *snapshot_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"db", "index", NULL};
    module_state *st = state_of_type(tp);
    PyObject *db, *index = Py_None;
    if (!st || !PyArg_ParseTupleAndKeywords(args, kw, "O!|O:Snapshot", kwlist,
                                            st->database_type, &db, &index))
        return NULL;
    if (index != Py_None && !PyObject_TypeCheck(index, st->index_type)) {
        PyErr_Format(PyExc_TypeError, "index must be an Index or None, not "
                     "%.100s", Py_TYPE(index)->tp_name);
        return NULL;
    }
    return snapshot_take(tp, (DatabaseObject *)db,
                         index == Py_None ? NULL : index);
}

static int snapshot_clear(SnapshotObject *s)
{
    /* No operation can be in flight: it would hold a reference. */
    snapshot_release_once(s);
    snapshot_unlink(s);
    Py_CLEAR(s->view);
    Py_CLEAR(s->db);
    return 0;
}

static void snapshot_dealloc(SnapshotObject *s)
{
    PyTypeObject *tp = Py_TYPE(s);
    PyObject_GC_UnTrack(s);
    if (s->weakreflist) PyObject_ClearWeakRefs((PyObject *)s);
    snapshot_clear(s);
    tp->tp_free((PyObject *)s);
    Py_DECREF(tp);
}

static int snapshot_traverse(SnapshotObject *s, visitproc visit, void *arg)
{
    Py_VISIT(s->db);
    Py_VISIT(s->view);
    Py_VISIT(Py_TYPE(s));
    return 0;
}

void snapshot_close_handle(SnapshotObject *s)
{
    /* a second close (perhaps another thread's) returns once the first
     * released the snapshot and its reader-table slot (guard_close_begin) */
    if (!guard_close_begin(&s->guard)) return;
    guard_wait_idle(&s->guard);
    snapshot_release_once(s);
    guard_closed(&s->guard);
}

static PyObject *snapshot_close(SnapshotObject *s, PyObject *unused)
{
    (void)unused;
    snapshot_close_handle(s);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------ reads */

static PyObject *snapshot_read(SnapshotObject *s, PyObject *arg)
{
    return records_read(s->db, s, arg);
}

static PyObject *snapshot_read_many(SnapshotObject *s, PyObject *arg)
{
    return records_read_many(s->db, s, arg);
}

static PyObject *snapshot_xrf(SnapshotObject *s, PyObject *arg)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(s));
    pydb_xrf_entry x;
    pydb_error e;
    int32_t mfn;
    int rc;

    if (!st || parse_mfn(st, arg, &mfn) < 0 || snapshot_check_open(st, s) < 0)
        return NULL;
    UNLOCKED(&s->guard, NULL,
             rc = pydb_snapshot_xrf_get(&x, s->snap, mfn, &e));
    if (rc) return set_error(st, rc, &e);
    return xrf_entry_dict(&x);
}

/* pydb_snapshot_count() into *c: 0, or -1 with an exception. */
static int snapshot_count(module_state *st, SnapshotObject *s, pydb_counts *c)
{
    PIN_SCOPE;
    pydb_error e;
    int rc;
    if (snapshot_check_open(st, s) < 0) return -1;
    UNLOCKED(&s->guard, NULL, rc = pydb_snapshot_count(c, s->snap, &e));
    if (rc) {
        set_error(st, rc, &e);
        return -1;
    }
    return 0;
}

static PyObject *snapshot_counts(SnapshotObject *s, PyObject *unused)
{
    module_state *st = state_of_type(Py_TYPE(s));
    pydb_counts c;
    (void)unused;
    if (!st || snapshot_count(st, s, &c) < 0) return NULL;
    return counts_dict(&c);
}

static Py_ssize_t snapshot_len(SnapshotObject *s)
{
    module_state *st = state_of_type(Py_TYPE(s));
    pydb_counts c;
    if (!st || snapshot_count(st, s, &c) < 0) return -1;
    return c.active;
}

PyObject *mfn_list(DatabaseObject *db, SnapshotObject *s,
                   int include_deleted, int start)
{
    PIN_SCOPE;
    module_state *st = state_of_type(s ? Py_TYPE(s) : Py_TYPE(db));
    handle_guard *guard = s ? &s->guard : &db->guard;
    int32_t *buf = NULL, next, from, end;
    size_t n = 0, total = 0, cap = 0;
    pydb_snapshot_info si;
    pydb_error e;
    PyObject *list = NULL;
    int rc = PYDB_OK;

    if (!st ||
        (s ? snapshot_check_open(st, s) : database_check_open(st, db)) < 0)
        return NULL;
    if (s) {
        pydb_snapshot_info_get(&si, s->snap);
        end = si.next_mfn;
    } else {
        end = pydb_max_mfn(db->db) + 1;
    }
    from = start < 1 ? 1 : start;
    while (from < end) {
        /* Grow with the GIL held, fill with it released. */
        size_t ncap = cap ? cap * 2 : BATCH;
        int32_t *g = PyMem_Realloc(buf, sizeof *buf * ncap);
        if (!g) {
            PyErr_NoMemory();
            goto cleanup;
        }
        buf = g;
        cap = ncap;
        /* the GIL was free: closed meanwhile? */
        if ((s ? snapshot_check_open(st, s) : database_check_open(st, db)) < 0)
            goto cleanup;
        UNLOCKED(guard, NULL, {
            while (rc == PYDB_OK && from < end && total < cap) {
                rc = s ? pydb_snapshot_list_mfns(buf + total, cap - total, &n,
                                                 &next, s->snap, from,
                                                 include_deleted, &e)
                       : pydb_list_mfns(buf + total, cap - total, &n, &next,
                                        db->db, from, include_deleted, &e);
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

static PyObject *snapshot_mfns(SnapshotObject *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"deleted", "start", NULL};
    PyObject *start = NULL;
    int32_t from;
    int include_deleted = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pO", kwlist,
                                     &include_deleted, &start) ||
        mfn_start(start, &from) < 0)
        return NULL;
    return mfn_list(NULL, s, include_deleted, from);
}

/* The RecordIterator through `s` (records_iter_new checks it is open). */
static PyObject *snapshot_records_from(SnapshotObject *s, int start,
                                       int deleted, int skip)
{
    PIN_SCOPE;
    if (!s->db) {   /* cleared by the collector: closed */
        module_state *st = state_of_type(Py_TYPE(s));
        if (st) snapshot_check_open(st, s);
        return NULL;
    }
    return records_iter_new(s->db, s, start, deleted, skip);
}

static PyObject *snapshot_iter(SnapshotObject *s)
{
    return snapshot_records_from(s, 1, 0, 0);
}

static PyObject *snapshot_records(SnapshotObject *s, PyObject *args,
                                  PyObject *kw)
{
    int32_t from;
    int deleted, skip;
    if (records_args(args, kw, &from, &deleted, &skip) < 0) return NULL;
    return snapshot_records_from(s, from, deleted, skip);
}

static PyObject *snapshot_info(SnapshotObject *s, PyObject *unused)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(s));
    pydb_snapshot_info i;
    (void)unused;
    if (!st || snapshot_check_open(st, s) < 0) return NULL;
    pydb_snapshot_info_get(&i, s->snap);
    return Py_BuildValue(
        "{s:K,s:i,s:i,s:i,s:L,s:L,s:L,s:K,s:O}", "commit",
        (unsigned long long)i.commit, "next_mfn", (int)i.next_mfn, "max_mfn",
        (int)i.next_mfn - 1, "reccnt", (int)i.reccnt, "mst_end",
        (long long)i.mst_end, "mst_size", (long long)i.mst_size, "xrf_size",
        (long long)i.xrf_size, "index_gen", (unsigned long long)i.index_gen,
        "registered", i.registered ? Py_True : Py_False);
}

/* ------------------------------------------------------- index views */

static PyObject *snapshot_index_view(SnapshotObject *s, PyObject *unused)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(s));
    (void)unused;
    if (!st || snapshot_check_open(st, s) < 0) return NULL;
    if (s->view_rc) return set_error(st, s->view_rc, &s->view_err);
    return Py_NewRef(s->view ? s->view : Py_None);
}

static PyObject *snapshot_search(SnapshotObject *s, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(s));
    PyObject *view_obj, *expr, *encoded = NULL, *result = NULL;
    const char *encoding, *errors, *text;
    IndexObject *view;
    int32_t *mfns = NULL;
    size_t n = 0, text_len;
    pydb_error e;
    int rc;

    if (!st || !PyArg_ParseTuple(args, "O!U:_search", st->index_type,
                                 &view_obj, &expr))
        return NULL;
    view = (IndexObject *)view_obj;
    if (snapshot_check_open(st, s) < 0) return NULL;
    /* The database's codec and error handler, as _search() uses. */
    encoding = PyUnicode_AsUTF8(s->db->encoding);
    errors = encoding ? PyUnicode_AsUTF8(s->db->errors) : NULL;
    if (!errors) return NULL;
    encoded = PyUnicode_AsEncodedString(expr, encoding, errors);
    if (!encoded) return NULL;
    /* The open checks come last (see database_check_open()). */
    if (index_check_open(st, view) < 0 || snapshot_check_open(st, s) < 0)
        goto cleanup;
    text = PyBytes_AS_STRING(encoded);
    text_len = (size_t)PyBytes_GET_SIZE(encoded);
    memset(&e, 0, sizeof e);
    /* with the GIL held if it cannot wait, as _search() */
    rc = pydb_snapshot_search_nowait(&mfns, &n, view->ix, s->snap, text,
                                     text_len, &e);
    if (rc == PYDB_EWOULDBLOCK)
        UNLOCKED(&s->guard, &view->guard,
                 rc = pydb_snapshot_search(&mfns, &n, view->ix, s->snap,
                                           text, text_len, &e));
    if (rc) {
        if (rc == PYDB_ESYNTAX) search_error_in_chars(&e, encoded, encoding);
        set_error(st, rc, &e);
        goto cleanup;
    }
    result = mfn_bytes(mfns, n);
cleanup:
    free(mfns);
    Py_XDECREF(encoded);
    return result;
}

/* ------------------------------------------------------------ getters */

static PyObject *snapshot_get_closed(SnapshotObject *s, void *c)
{
    (void)c;
    return PyBool_FromLong(s->guard.closing || !HANDLE_LOAD(s->snap) ||
                           !snapshot_db_open(s));
}

static PyObject *snapshot_get_commit(SnapshotObject *s, void *c)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(s));
    pydb_snapshot_info i;
    (void)c;
    if (!st || snapshot_check_open(st, s) < 0) return NULL;
    pydb_snapshot_info_get(&i, s->snap);
    return PyLong_FromUnsignedLongLong((unsigned long long)i.commit);
}

static PyObject *snapshot_get_max_mfn(SnapshotObject *s, void *c)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(s));
    pydb_snapshot_info i;
    (void)c;
    if (!st || snapshot_check_open(st, s) < 0) return NULL;
    pydb_snapshot_info_get(&i, s->snap);
    return PyLong_FromLong((long)i.next_mfn - 1);
}

static PyObject *snapshot_get_database(SnapshotObject *s, void *c)
{
    (void)c;
    return Py_NewRef(s->db ? (PyObject *)s->db : Py_None);
}

static PyMethodDef snapshot_methods[] = {
    {"close", (PyCFunction)snapshot_close, METH_NOARGS,
     "close($self, /)\n--\n\nRelease the snapshot and its reader-table "
     "slot.  Waits for reads in flight on it in other threads; later "
     "calls raise ClosedError.  Idempotent."},
    {"read", (PyCFunction)snapshot_read, METH_O,
     "read($self, mfn, /)\n--\n\nThe version of record `mfn` (int, "
     "1-based) that was current at the snapshot's commit, as a Record "
     "(logically deleted then: deleted is True).  Same as snap[mfn]."
     "\n\nRaises NotFoundError (a KeyError) for an MFN outside "
     "1..max_mfn of the commit, never created or physically deleted "
     "then; CorruptionError (file, byte offset, reason) when the record "
     "or its version chain is damaged; DiskError; ClosedError; TypeError "
     "for a non-int."},
    {"read_many", (PyCFunction)snapshot_read_many, METH_O,
     "read_many($self, mfns, /)\n--\n\nThe records of an iterable of MFNs "
     "(ints, 1-based) as of the commit, in the order given, as a list of "
     "Record, read with one GIL release.\n\nRaises, for the first MFN "
     "that fails: NotFoundError, CorruptionError, DiskError (as read()); "
     "ClosedError; TypeError."},
    {"xrf_entry", (PyCFunction)snapshot_xrf, METH_O,
     "xrf_entry($self, mfn, /)\n--\n\nThe XRF entry of `mfn` as of the "
     "commit: dict with raw (int, the latest entry's), state (str: "
     "'active', 'logically deleted', 'physically deleted', 'unused'), "
     "offset (bytes into the .mst of the version the snapshot sees), new "
     "and pending (bool, the latest entry's flags).\n\nRaises "
     "NotFoundError outside 1..max_mfn of the commit; CorruptionError; "
     "DiskError; ClosedError."},
    {"counts", (PyCFunction)snapshot_counts, METH_NOARGS,
     "counts($self, /)\n--\n\nXRF states over MFN 1..max_mfn as of the "
     "commit: dict of int with active, logically_deleted, "
     "physically_deleted, unused, new, pending.\n\nRaises "
     "CorruptionError, DiskError, ClosedError."},
    {"mfns", (PyCFunction)(void (*)(void))snapshot_mfns,
     METH_VARARGS | METH_KEYWORDS,
     "mfns($self, /, deleted=False, start=1)\n--\n\nMFNs (list of int, "
     "ascending, from `start`) of the records active at the commit, and "
     "of those logically deleted then if `deleted`.\n\nRaises "
     "CorruptionError, DiskError, ClosedError."},
    {"records", (PyCFunction)(void (*)(void))snapshot_records,
     METH_VARARGS | METH_KEYWORDS,
     "records($self, /, *, start=1, deleted=False, skip_damaged=False)\n--"
     "\n\nAn iterator of the records (Record) as of the commit from MFN "
     "`start` (1-based) in MFN order: the active ones, and the logically "
     "deleted ones too if `deleted`; 256 records are read per GIL "
     "release.  With `skip_damaged`, damaged records are left out "
     "instead of raising.\n\nRaises (while iterating): CorruptionError "
     "unless skip_damaged; DiskError; ClosedError once the snapshot or "
     "its database is closed."},
    {"info", (PyCFunction)snapshot_info, METH_NOARGS,
     "info($self, /)\n--\n\nWhat the snapshot pins (dict, no I/O): commit "
     "(int, the header's commit number; 0 without a usable header), "
     "next_mfn, max_mfn, reccnt (ints), mst_end (bytes: the end of the "
     "commit's records; versions at or past it are newer), mst_size and "
     "xrf_size (bytes the commit may read), index_gen (int, native index "
     "MANIFEST generation; 0 unknown), registered (bool: holds a "
     "reader-table slot).\n\nRaises ClosedError."},
    {"_index_view", (PyCFunction)snapshot_index_view, METH_NOARGS,
     "_index_view($self, /)\n--\n\nThe read-only Index over the index "
     "given to the constructor as of the snapshot's commit (for the "
     "native index, the segments of the MANIFEST generation the commit "
     "published; an index commits do not change, ISIS or in-memory, as it "
     "is), or None when none was given.  Closed with the snapshot."
     "\n\nRaises ClosedError; the error the view met when the snapshot "
     "was taken: LockTimeoutError (the index kept moving), "
     "CorruptionError, DiskError."},
    {"_search", (PyCFunction)snapshot_search, METH_VARARGS,
     "_search($self, view, expr, /)\n--\n\nEvaluate the search expression "
     "`expr` (str, encoded with the database's encoding) on `view` (an "
     "Index from _index_view()), dropping the MFNs whose record was not "
     "active at the commit.  Returns the sorted distinct MFNs (list of "
     "int).  GIL released.\n\nRaises SearchSyntaxError (reason, 0-based "
     "character position), UnsupportedError, ClosedError, "
     "CorruptionError, DiskError, UnicodeEncodeError, TypeError."},
    {NULL}};

static PyGetSetDef snapshot_getset[] = {
    {"closed", (getter)snapshot_get_closed, NULL,
     "True once the snapshot or its database is closed.", NULL},
    {"commit", (getter)snapshot_get_commit, NULL,
     "The commit number the snapshot pins (int; 0 without a usable commit "
     "header).  Raises ClosedError.", NULL},
    {"max_mfn", (getter)snapshot_get_max_mfn, NULL,
     "NXTMFN - 1 at the commit (int; 0 when empty).  Raises ClosedError.",
     NULL},
    {"database", (getter)snapshot_get_database, NULL,
     "The Database the snapshot was taken of.", NULL},
    {NULL}};

static PyMemberDef snapshot_members[] = {
    {"__weaklistoffset__", T_PYSSIZET,
     offsetof(SnapshotObject, weakreflist), READONLY, NULL},
    {NULL}};

static PyType_Slot snapshot_slots[] = {
    {Py_tp_new, snapshot_new},
    {Py_tp_dealloc, snapshot_dealloc},
    {Py_tp_traverse, snapshot_traverse},
    {Py_tp_clear, snapshot_clear},
    {Py_tp_methods, snapshot_methods},
    {Py_tp_getset, snapshot_getset},
    {Py_tp_members, snapshot_members},
    {Py_tp_iter, snapshot_iter},
    {Py_mp_subscript, snapshot_read},
    {Py_mp_length, snapshot_len},
    {Py_tp_doc, "Snapshot(db, index=None)\n--\n\n"
     "Low-level snapshot: the latest published commit of the Database "
     "`db`, pinned, with the view of `index` (an Index of db) as of it "
     "(see pydb.Snapshot).  Raises ClosedError, LockTimeoutError (the "
     "reader table is full of live readers), CorruptionError/DiskError "
     "(reading the control record without a commit header), TypeError."},
    {0, NULL}};

static PyType_Spec snapshot_spec = {
    "pydb._pydb.Snapshot", sizeof(SnapshotObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    snapshot_slots};

int snapshot_exec(PyObject *m, module_state *st)
{
    st->snapshot_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &snapshot_spec, NULL);
    if (!st->snapshot_type) return -1;
    return PyModule_AddType(m, st->snapshot_type);
}
