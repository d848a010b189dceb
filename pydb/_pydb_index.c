/*
 * _pydb_index.c - the Index type: one Python handle over any pydb_index
 * (native segments, ISIS classic/LIND files, in-memory), see pydb.h
 * "Inverted index".  Functions that open a particular kind of index
 * build the handle with index_wrap().
 *
 * Keys cross this boundary as bytes in the index's key form; decoding to
 * str is done in pydb/index.py with the database's encoding.
 */
#include "_pydb.h"
#include <stdlib.h>
#include <string.h>

#define TERM_BATCH 4096   /* keys collected per GIL release */

int index_check_open(module_state *st, IndexObject *self)
{
    if (self->ix && !self->closing) return 0;
    PyErr_SetString(st->ClosedError, "the index is closed");
    return -1;
}

PyObject *index_wrap(module_state *st, pydb_index *ix, PyObject *owner)
{
    IndexObject *self =
        (IndexObject *)st->index_type->tp_alloc(st->index_type, 0);
    if (!self) {
        pydb_index_close(ix);
        return NULL;
    }
    self->ix = ix;
    atomic_store(&self->active, 0);
    self->closing = 0;
    self->hooked = 0;
    self->owner = Py_NewRef(owner ? owner : Py_None);
    return (PyObject *)self;
}

PyObject *index_open_path(module_state *st, PyObject *path,
                          int (*open_fn)(pydb_index **, const char *,
                                         pydb_error *))
{
    PyObject *bytes = NULL;
    pydb_index *ix = NULL;
    pydb_error e;
    int rc;

    if (!PyUnicode_FSConverter(path, &bytes)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = open_fn(&ix, PyBytes_AS_STRING(bytes), &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc) return set_error(st, rc, &e);
    return index_wrap(st, ix, NULL);
}

/* Mark closed, wait for in-flight operations, then free `ix` unless the
 * handle is (still) a database's commit hook or another close got it. */
static void index_close_after_wait(IndexObject *self, pydb_index *ix)
{
    self->closing = 1;
    wait_idle(&self->active);
    /* A commit hook of an open database: the writer may still use the
     * pydb_index; the database frees it once closed. */
    if (self->hooked || self->ix != ix) return;
    self->ix = NULL;
    pydb_index_close(ix);
}

static void index_close_handle(IndexObject *self)
{
    if (!self->ix || self->closing) return;
    index_close_after_wait(self, self->ix);
}

void index_release_hooked(PyObject *index)
{
    IndexObject *self = (IndexObject *)index;
    self->hooked = 0;
    if (!self->ix) return;
    index_close_after_wait(self, self->ix);
}

static void index_dealloc(IndexObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    index_close_handle(self);
    Py_CLEAR(self->owner);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int index_traverse(IndexObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->owner);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyObject *index_close(IndexObject *self, PyObject *unused)
{
    (void)unused;
    index_close_handle(self);
    Py_RETURN_NONE;
}

/* ---- terms: collected in C batches with the GIL released ---- */

typedef struct {
    uint8_t *arena;       /* keys, back to back                            */
    size_t used, size;
    size_t *off, *len;    /* per key                                       */
    uint64_t *count;
    size_t n, cap;        /* keys collected / wanted                       */
    int oom;
    const uint8_t *skip;  /* key to skip (exclusive start), or NULL        */
    size_t skip_len;
} term_batch;

static int term_collect(void *ctx, const uint8_t *key, size_t len,
                        uint64_t count)
{
    term_batch *b = ctx;
    if (b->skip) {
        int same = len == b->skip_len && memcmp(key, b->skip, len) == 0;
        b->skip = NULL;
        if (same) return 0;
    }
    if (b->used + len > b->size) {
        size_t size = (b->size + len) * 2;
        uint8_t *a = realloc(b->arena, size);
        if (!a) {
            b->oom = 1;
            return 1;
        }
        b->arena = a;
        b->size = size;
    }
    memcpy(b->arena + b->used, key, len);
    b->off[b->n] = b->used;
    b->len[b->n] = len;
    b->count[b->n] = count;
    b->used += len;
    return ++b->n >= b->cap;
}

PyDoc_STRVAR(index_terms_doc,
"terms(prefix=b'', start=None, limit=4096, /)\n--\n\n"
"Up to `limit` keys that start with `prefix` and are >= `start` (or >\n"
"`start` when start is given as (bytes, True)), in ascending byte order,\n"
"as a list of (key: bytes, count: int).  An empty list means the end.");

static PyObject *index_terms(IndexObject *self, PyObject *args)
{
    module_state *st = state_of_type(Py_TYPE(self));
    Py_buffer prefix = {0}, start = {0};
    PyObject *start_obj = Py_None, *result = NULL;
    Py_ssize_t limit = TERM_BATCH;
    int exclusive = 0, rc;
    term_batch b;
    pydb_error e;

    memset(&b, 0, sizeof b);
    if (!st || !PyArg_ParseTuple(args, "|y*On", &prefix, &start_obj, &limit))
        return NULL;
    if (limit < 1) limit = 1;
    if (PyTuple_Check(start_obj)) {
        if (!PyArg_ParseTuple(start_obj, "y*p", &start, &exclusive))
            goto cleanup;
    } else if (start_obj != Py_None) {
        if (PyObject_GetBuffer(start_obj, &start, PyBUF_SIMPLE) < 0)
            goto cleanup;
    }
    b.cap = (size_t)limit + (exclusive ? 1 : 0);
    b.off = PyMem_RawMalloc(b.cap * sizeof *b.off);
    b.len = PyMem_RawMalloc(b.cap * sizeof *b.len);
    b.count = PyMem_RawMalloc(b.cap * sizeof *b.count);
    if (!b.off || !b.len || !b.count) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if (exclusive) {
        b.skip = start.buf;
        b.skip_len = (size_t)start.len;
        b.cap = (size_t)limit;  /* the skipped key does not count */
    }
    if (index_check_open(st, self) < 0) goto cleanup;
    UNLOCKED(self, rc = pydb_index_terms(
                 self->ix, prefix.buf, (size_t)prefix.len,
                 start.obj ? start.buf : NULL,
                 start.obj ? (size_t)start.len : 0, term_collect, &b, &e));
    if (b.oom) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    result = PyList_New((Py_ssize_t)b.n);
    if (!result) goto cleanup;
    for (size_t i = 0; i < b.n; i++) {
        PyObject *t = Py_BuildValue("(y#K)", b.arena + b.off[i],
                                    (Py_ssize_t)b.len[i],
                                    (unsigned long long)b.count[i]);
        if (!t) {
            Py_CLEAR(result);
            goto cleanup;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, t);
    }
cleanup:
    free(b.arena);
    PyMem_RawFree(b.off);
    PyMem_RawFree(b.len);
    PyMem_RawFree(b.count);
    if (prefix.obj) PyBuffer_Release(&prefix);
    if (start.obj) PyBuffer_Release(&start);
    return result;
}

/* Build a list of (mfn, tag, occ, cnt) tuples; frees p. */
PyObject *postings_to_list(pydb_postings *p)
{
    PyObject *result = PyList_New((Py_ssize_t)p->n);
    if (result) {
        for (size_t i = 0; i < p->n; i++) {
            const pydb_posting *q = &p->v[i];
            PyObject *t = Py_BuildValue("(iIII)", (int)q->mfn, q->tag,
                                        q->occ, q->cnt);
            if (!t) {
                Py_CLEAR(result);
                break;
            }
            PyList_SET_ITEM(result, (Py_ssize_t)i, t);
        }
    }
    pydb_postings_free(p);
    return result;
}

PyDoc_STRVAR(index_postings_doc,
"postings(key, /)\n--\n\n"
"The postings of exactly `key` (bytes, key form) as a list of\n"
"(mfn, tag, occ, cnt) tuples sorted ascending; [] if the key is absent.\n"
"Decoded with the GIL released.");

static PyObject *index_postings(IndexObject *self, PyObject *arg)
{
    module_state *st = state_of_type(Py_TYPE(self));
    Py_buffer key;
    pydb_postings p = {0};
    pydb_error e;
    int rc;

    if (!st || PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0) return NULL;
    if (index_check_open(st, self) < 0) {
        PyBuffer_Release(&key);
        return NULL;
    }
    UNLOCKED(self, rc = pydb_index_postings(&p, self->ix, key.buf,
                                            (size_t)key.len, &e));
    PyBuffer_Release(&key);
    if (rc) {
        pydb_postings_free(&p);
        return set_error(st, rc, &e);
    }
    return postings_to_list(&p);
}

PyDoc_STRVAR(index_key_doc,
"key(term, /)\n--\n\n"
"`term` (bytes) brought into this index's key form (case table or\n"
"Unicode folding, truncation; isis-formats.md §5.3), as bytes.");

static PyObject *index_key(IndexObject *self, PyObject *arg)
{
    module_state *st = state_of_type(Py_TYPE(self));
    Py_buffer term;
    PyObject *result = NULL;
    uint8_t *out;
    size_t cap, out_len = 0;
    pydb_error e;
    int rc;

    if (!st || PyObject_GetBuffer(arg, &term, PyBUF_SIMPLE) < 0) return NULL;
    cap = (size_t)term.len * 4 + 16;   /* folding may grow UTF-8 */
    out = PyMem_Malloc(cap);
    if (!out) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if (index_check_open(st, self) < 0) goto cleanup;
    rc = pydb_index_key(self->ix, term.buf, (size_t)term.len, out, cap,
                        &out_len, &e);   /* pure computation: GIL held */
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    result = PyBytes_FromStringAndSize((const char *)out,
                                       (Py_ssize_t)out_len);
cleanup:
    PyMem_Free(out);
    PyBuffer_Release(&term);
    return result;
}

static PyObject *index_get_kind(IndexObject *self, void *c)
{
    static const char *const names[] = {"native", "isis-classic",
                                        "isis-lind", "memory"};
    module_state *st = state_of_type(Py_TYPE(self));
    int kind;
    if (!st || index_check_open(st, self) < 0) return NULL;
    kind = pydb_index_kind(self->ix);
    return PyUnicode_FromString(kind >= 0 && kind < 4 ? names[kind]
                                                     : "unknown");
}

static PyObject *index_get_caps(IndexObject *self, void *c)
{
    module_state *st = state_of_type(Py_TYPE(self));
    int caps;
    if (!st || index_check_open(st, self) < 0) return NULL;
    caps = pydb_index_caps(self->ix);
    return Py_BuildValue("{s:O,s:O,s:O}",
                         "tag", caps & PYDB_POSTING_TAG ? Py_True : Py_False,
                         "occ", caps & PYDB_POSTING_OCC ? Py_True : Py_False,
                         "cnt", caps & PYDB_POSTING_CNT ? Py_True : Py_False);
}

static PyObject *index_get_closed(IndexObject *self, void *c)
{
    return PyBool_FromLong(!self->ix || self->closing);
}

static PyGetSetDef index_getset[] = {
    {"kind", (getter)index_get_kind, NULL,
     "'native', 'isis-classic', 'isis-lind' or 'memory'", NULL},
    {"caps", (getter)index_get_caps, NULL,
     "which posting fields are meaningful: {'tag': bool, 'occ': bool, "
     "'cnt': bool} (LIND indexes carry no TAG/OCC)", NULL},
    {"closed", (getter)index_get_closed, NULL, "True once closed", NULL},
    {NULL}};

static PyMethodDef index_methods[] = {
    {"terms", (PyCFunction)index_terms, METH_VARARGS, index_terms_doc},
    {"postings", (PyCFunction)index_postings, METH_O, index_postings_doc},
    {"key", (PyCFunction)index_key, METH_O, index_key_doc},
    {"close", (PyCFunction)index_close, METH_NOARGS,
     "close()\n--\n\nRelease the index files (idempotent)."},
    {NULL}};

static PyType_Slot index_slots[] = {
    {Py_tp_dealloc, index_dealloc},
    {Py_tp_traverse, index_traverse},
    {Py_tp_methods, index_methods},
    {Py_tp_getset, index_getset},
    {Py_tp_doc, "Low-level inverted-index handle (see pydb.index)."},
    {0, NULL}};

static PyType_Spec index_spec = {
    "pydb._pydb.Index", sizeof(IndexObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
        Py_TPFLAGS_DISALLOW_INSTANTIATION, index_slots};

int index_exec(PyObject *m, module_state *st)
{
    st->index_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &index_spec, NULL);
    if (!st->index_type) return -1;
    return PyModule_AddType(m, st->index_type);
}
