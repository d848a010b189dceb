/*
 * _pydb_check.c - the validator's binding: the CheckRun type.
 *
 *     run = _pydb.CheckRun(target, max_problems)   # Database or Snapshot
 *     run.run()          # the whole walk, GIL released (any thread, once)
 *     run.progress       # (done, total): readable from another thread
 *     run.result()       # (problems, counts, summary) as Python objects
 *
 * pydb_check_ex() (csrc/check.c) reports each fault to problem_cb(), which
 * copies the first `max_problems` into C memory (malloc, no Python: the
 * GIL is released) and lets the core count the rest.  Python objects are
 * built only in result(), with the GIL held.  On a Database the walk
 * takes its own snapshot (pydb_check_ex); on a Snapshot it checks the
 * commit that snapshot pins (pydb_snapshot_check).  The public face is
 * Database.check() and Snapshot.check(), through pydb/check.py.
 */
#include "_pydb_snapshot.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    int kind, severity;
    int32_t mfn;
    int64_t offset;
    char *path;        /* points into the same allocation */
    char *message;
} stored_problem;

typedef struct {
    PyObject_HEAD
    PyObject *target;            /* strong reference: the Database or the
                                    Snapshot given                         */
    DatabaseObject *db;          /* the Database, or NULL for a Snapshot    */
    SnapshotObject *snap;        /* the Snapshot, or NULL for a Database    */
    Py_ssize_t max_problems;
    stored_problem *v;
    size_t n, cap;
    int nomem;                   /* a problem could not be stored          */
    atomic_int state;            /* 0 new, 1 running, 2 done               */
    atomic_llong done, total;
    int rc;
    pydb_error err;
    pydb_check_summary sum;
} CheckRunObject;

/* Runs with the GIL released: plain C only. */
static int problem_cb(void *ctx, const pydb_check_problem *p)
{
    CheckRunObject *r = ctx;
    size_t lp, lm;
    stored_problem *s;
    char *mem;

    if ((Py_ssize_t)r->n >= r->max_problems) return 0;  /* count only */
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 64;
        stored_problem *nv = realloc(r->v, nc * sizeof *nv);
        if (!nv) {
            r->nomem = 1;
            return 0;
        }
        r->v = nv;
        r->cap = nc;
    }
    lp = strlen(p->path ? p->path : "");
    lm = strlen(p->message ? p->message : "");
    mem = malloc(lp + lm + 2);
    if (!mem) {
        r->nomem = 1;
        return 0;
    }
    s = &r->v[r->n++];
    s->kind = p->kind;
    s->severity = p->severity;
    s->mfn = p->mfn;
    s->offset = p->offset;
    s->path = mem;
    memcpy(mem, p->path ? p->path : "", lp + 1);
    s->message = mem + lp + 1;
    memcpy(s->message, p->message ? p->message : "", lm + 1);
    return 0;
}

static void progress_cb(void *ctx, int64_t done, int64_t total)
{
    CheckRunObject *r = ctx;
    atomic_store(&r->total, (long long)total);
    atomic_store(&r->done, (long long)done);
}

/* 0 if the Database or Snapshot `target` is open, else -1 with
 * ClosedError. */
static int target_check_open_(module_state *st, PyObject *target,
                              int is_snap, guard_pins *pins)
{
    return is_snap ? snapshot_check_open_(st, (SnapshotObject *)target, pins)
                   : database_check_open_(st, (DatabaseObject *)target, pins);
}
#define target_check_open(st, t, s) target_check_open_(st, t, s, PINS_)

static PyObject *checkrun_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PIN_SCOPE;
    static char *kwlist[] = {"target", "max_problems", NULL};
    module_state *st = state_of_type(tp);
    PyObject *target;
    Py_ssize_t maxp = 1000;
    CheckRunObject *self;
    int is_snap;

    if (!st) return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|n:CheckRun", kwlist,
                                     &target, &maxp))
        return NULL;
    is_snap = PyObject_TypeCheck(target, st->snapshot_type);
    if (!is_snap && !PyObject_TypeCheck(target, st->database_type)) {
        PyErr_SetString(PyExc_TypeError,
                        "target must be a pydb.Database or a pydb.Snapshot");
        return NULL;
    }
    if (maxp < 0) {
        PyErr_SetString(PyExc_ValueError, "max_problems must be >= 0");
        return NULL;
    }
    if (target_check_open(st, target, is_snap) < 0) return NULL;
    self = (CheckRunObject *)tp->tp_alloc(tp, 0);
    if (!self) return NULL;
    self->target = Py_NewRef(target);
    if (is_snap) self->snap = (SnapshotObject *)target;
    else self->db = (DatabaseObject *)target;
    self->max_problems = maxp;
    atomic_store(&self->state, 0);
    atomic_store(&self->done, 0);
    atomic_store(&self->total, 0);
    return (PyObject *)self;
}

static void checkrun_free_problems(CheckRunObject *self)
{
    for (size_t i = 0; i < self->n; i++) free(self->v[i].path);
    free(self->v);
    self->v = NULL;
    self->n = self->cap = 0;
}

static void checkrun_dealloc(CheckRunObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    checkrun_free_problems(self);
    self->db = NULL;
    self->snap = NULL;
    Py_CLEAR(self->target);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int checkrun_traverse(CheckRunObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->target);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyObject *checkrun_run(CheckRunObject *self, PyObject *unused)
{
    PIN_SCOPE;
    module_state *st = state_of_type(Py_TYPE(self));
    DatabaseObject *db = self->db;
    SnapshotObject *snap = self->snap;
    pydb_check_options o;
    int expected = 0, rc;

    if (!st) return NULL;
    if (!atomic_compare_exchange_strong(&self->state, &expected, 1)) {
        PyErr_SetString(PyExc_RuntimeError, "this CheckRun was already run");
        return NULL;
    }
    if (target_check_open(st, self->target, snap != NULL) < 0) {
        atomic_store(&self->state, 2);
        self->rc = -1;
        return NULL;
    }
    memset(&o, 0, sizeof o);
    o.problem = problem_cb;
    o.ctx = self;
    o.progress = progress_cb;
    o.progress_ctx = self;
    if (snap)
        UNLOCKED(&snap->db->guard, &snap->guard,
                 rc = pydb_snapshot_check(&self->sum, snap->snap, &o,
                                          &self->err));
    else
        UNLOCKED(&db->guard, NULL,
                 rc = pydb_check_ex(&self->sum, db->db, &o, &self->err));
    self->rc = rc;
    atomic_store(&self->state, 2);
    if (rc) return set_error(st, rc, &self->err);
    Py_RETURN_NONE;
}

static PyObject *checkrun_result(CheckRunObject *self, PyObject *unused)
{
    PyObject *problems = NULL, *counts = NULL, *summary = NULL, *out = NULL;

    if (atomic_load(&self->state) != 2 || self->rc != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "result() needs a successful run() first");
        return NULL;
    }
    problems = PyList_New((Py_ssize_t)self->n);
    if (!problems) goto fail;
    for (size_t i = 0; i < self->n; i++) {
        stored_problem *s = &self->v[i];
        PyObject *t = Py_BuildValue(
            "(ssiNLN)", pydb_check_kind_name(s->kind),
            s->severity == PYDB_CHECK_ERROR ? "error" : "warning",
            (int)s->mfn, PyUnicode_DecodeFSDefault(s->path),
            (long long)s->offset,
            PyUnicode_DecodeUTF8(s->message, (Py_ssize_t)strlen(s->message),
                                 "replace"));
        if (!t) goto fail;
        PyList_SET_ITEM(problems, (Py_ssize_t)i, t);
    }
    counts = PyDict_New();
    if (!counts) goto fail;
    for (int k = 0; k < PYDB_CHECK_NKINDS; k++) {
        PyObject *v;
        if (!self->sum.by_kind[k]) continue;
        v = PyLong_FromLongLong((long long)self->sum.by_kind[k]);
        if (!v || PyDict_SetItemString(counts, pydb_check_kind_name(k), v) < 0) {
            Py_XDECREF(v);
            goto fail;
        }
        Py_DECREF(v);
    }
    summary = Py_BuildValue(
        "{s:L,s:L,s:i,s:L,s:L,s:L,s:L,s:O,s:O,s:L,s:L,s:O,s:O}",
        "errors", (long long)self->sum.errors,
        "warnings", (long long)self->sum.warnings,
        "mfns", (int)self->sum.mfns,
        "versions", (long long)self->sum.versions,
        "back_versions", (long long)self->sum.back_versions,
        "orphans", (long long)self->sum.orphans,
        "orphan_bytes", (long long)self->sum.orphan_bytes,
        "scanned", self->sum.scanned ? Py_True : Py_False,
        "index_checked", self->sum.index_checked ? Py_True : Py_False,
        "index_keys", (long long)self->sum.index_keys,
        "index_postings", (long long)self->sum.index_postings,
        "truncated", (self->nomem || (Py_ssize_t)self->n <
                      (Py_ssize_t)(self->sum.errors + self->sum.warnings))
                         ? Py_True : Py_False,
        "stopped", self->sum.stopped ? Py_True : Py_False);
    if (!summary) goto fail;
    out = PyTuple_Pack(3, problems, counts, summary);
fail:
    Py_XDECREF(problems);
    Py_XDECREF(counts);
    Py_XDECREF(summary);
    return out;
}

static PyObject *checkrun_get_progress(CheckRunObject *self, void *c)
{
    return Py_BuildValue("(LL)", (long long)atomic_load(&self->done),
                         (long long)atomic_load(&self->total));
}

static PyObject *checkrun_get_finished(CheckRunObject *self, void *c)
{
    return PyBool_FromLong(atomic_load(&self->state) == 2);
}

static PyObject *mod_check_kinds(PyObject *m, PyObject *unused)
{
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int k = 0; k < PYDB_CHECK_NKINDS; k++) {
        PyObject *v = PyUnicode_FromString(
            pydb_check_kind_severity(k) == PYDB_CHECK_ERROR ? "error"
                                                            : "warning");
        if (!v || PyDict_SetItemString(d, pydb_check_kind_name(k), v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyMethodDef checkrun_methods[] = {
    {"run", (PyCFunction)checkrun_run, METH_NOARGS,
     "run($self, /)\n--\n\nWalk the database, or the commit of the snapshot "
     "(GIL released); once per object.  Raises MemoryError if the work "
     "buffers cannot be allocated and ClosedError if the database or the "
     "snapshot is closed."},
    {"result", (PyCFunction)checkrun_result, METH_NOARGS,
     "result($self, /)\n--\n\n(problems, counts, summary) after run(): problems is "
     "a list of (kind, severity, mfn, file, offset, message) tuples (the "
     "first max_problems), counts a dict kind -> number (all of them), "
     "summary a dict of totals."},
    {NULL}};

static PyGetSetDef checkrun_getset[] = {
    {"progress", (getter)checkrun_get_progress, NULL,
     "(done, total) units of work (XRF entries + 512-byte blocks scanned)",
     NULL},
    {"finished", (getter)checkrun_get_finished, NULL,
     "True once run() has returned", NULL},
    {NULL}};

static PyType_Slot checkrun_slots[] = {
    {Py_tp_new, checkrun_new},
    {Py_tp_dealloc, checkrun_dealloc},
    {Py_tp_traverse, checkrun_traverse},
    {Py_tp_methods, checkrun_methods},
    {Py_tp_getset, checkrun_getset},
    {Py_tp_doc, "CheckRun(target, max_problems=1000)\n--\n\nOne run of "
                "the validator over an open Database, or over the commit an "
                "open Snapshot pins (see pydb.check)."},
    {0, NULL}};

static PyType_Spec checkrun_spec = {
    "pydb._pydb.CheckRun", sizeof(CheckRunObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, checkrun_slots};

static PyMethodDef check_functions[] = {
    {"_check_kinds", mod_check_kinds, METH_NOARGS,
     "_check_kinds()\n--\n\n{kind name: 'error' | 'warning'} for every "
     "kind of fault the validator reports."},
    {NULL}};

int check_exec(PyObject *m, module_state *st)
{
    st->checkrun_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &checkrun_spec, NULL);
    if (!st->checkrun_type) return -1;
    if (PyModule_AddType(m, st->checkrun_type) < 0) return -1;
    return PyModule_AddFunctions(m, check_functions);
}
