/*
 * _pydb_index.c - the Index object: one Python handle over any pydb_index
 * (native segments, ISIS classic/LIND files, in-memory; pydb.h "Inverted
 * index"), and the module functions that make one or feed one:
 *
 *   _open_native_index(db_path)      the native index <base>.pdx
 *   _open_isis_index(path)           a CDS/ISIS inverted file
 *   _isis_index_info(index)          what was detected when it was opened
 *   _memory_index(entries, caps)     an in-memory index
 *   _fst_parse(text, filename)       compile an FST (validation, pydb.fst)
 *   _index_build(db_path, fst, ...)  build the native index
 *   _attach_native_index(db, index)  make every commit update it
 *   _native_index_stored(db_path)    the settings an index was built with
 *   _snapshot_index(db, index)       a view of the index as of a new
 *                                    snapshot of db, and what it pins
 *
 * Keys cross this boundary as bytes in the index's key form; decoding to
 * str is done in pydb/index.py with the database's encoding.
 */
#include "_pydb_index.h"
#include "_pydb_database.h"
#include "_pydb_snapshot.h"
#include <stdlib.h>
#include <string.h>

#define TERM_BATCH 4096   /* keys collected per GIL release */

int index_check_open_(module_state *st, IndexObject *self, guard_pins *pins)
{
    if (guard_pin(pins, &self->guard) == 0 && self->ix) return 0;
    PyErr_SetString(st->ClosedError, "the index is closed");
    return -1;
}

static PyObject *index_wrap(module_state *st, pydb_index *ix, PyObject *owner)
{
    IndexObject *self =
        (IndexObject *)st->index_type->tp_alloc(st->index_type, 0);
    if (!self) {
        pydb_index_close(ix);
        return NULL;
    }
    self->ix = ix;
    guard_init(&self->guard);
    self->hooked = 0;
    self->owner = Py_NewRef(owner ? owner : Py_None);
    return (PyObject *)self;
}

/* Open the index of the database at `path` (str, bytes or os.PathLike)
 * with `open_fn` (GIL released) and wrap it; NULL + exception on error. */
static PyObject *index_open_path(module_state *st, PyObject *path,
                                 int (*open_fn)(pydb_index **, const char *,
                                                pydb_error *))
{
    PyObject *bytes = NULL;
    pydb_index *ix = NULL;
    const char *cpath;
    pydb_error e;
    int rc;

    if (!PyUnicode_FSConverter(path, &bytes)) return NULL;
    cpath = PyBytes_AS_STRING(bytes);
    UNLOCKED(NULL, NULL, rc = open_fn(&ix, cpath, &e));
    Py_DECREF(bytes);
    if (rc) return set_error(st, rc, &e);
    return index_wrap(st, ix, NULL);
}

/* Mark closed, wait for in-flight operations, then free the pydb_index
 * unless the handle is (still) a database's commit hook or another close
 * got it. */
static void index_close_after_wait(IndexObject *self)
{
    pydb_index *ix = NULL;
    guard_current(&self->guard);   /* a parent's close is not this one */
    self->guard.closing = 1;
    atomic_store(&self->guard.closer, PyThread_get_thread_ident());
    guard_wait_idle(&self->guard);
    /* A commit hook of an open database: the writer may still use the
     * pydb_index; the database frees it once closed.  The index's own
     * close() and its database's may both have waited: the one that
     * claims it (binding lock) frees it. */
    binding_lock();
    if (!self->hooked) {
        ix = self->ix;
        HANDLE_CLEAR(self->ix);
    }
    binding_unlock();
    if (ix) pydb_index_close(ix);
    guard_closed(&self->guard);
}

static void index_close_handle(IndexObject *self)
{
    /* closed, or another close (perhaps another thread's) waits; a
     * close of the parent's in flight at a fork is forgotten first */
    guard_current(&self->guard);
    if (atomic_exchange(&self->guard.closing, 1)) return;
    index_close_after_wait(self);
}

void index_detach_hooked(PyObject *index)
{
    IndexObject *self = (IndexObject *)index;
    if (!self->ix) return;
    /* removes the hook and waits for a reader of the index that is
     * telling the handle's collector it met garbage (pydb.h group 7) */
    Py_BEGIN_ALLOW_THREADS
    (void)pydb_native_index_attach(self->ix, NULL, NULL);
    Py_END_ALLOW_THREADS
}

void index_release_hooked(PyObject *index)
{
    IndexObject *self = (IndexObject *)index;
    binding_lock();
    self->hooked = 0;
    binding_unlock();
    index_close_after_wait(self);
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
"terms($self, prefix=b'', start=None, limit=4096, /)\n--\n\n"
"Up to `limit` keys that start with `prefix` and are >= `start` (or >\n"
"`start` when start is given as (bytes, True)), in ascending byte order,\n"
"as a list of (key: bytes, count: int).  An empty list means the end.");

static PyObject *index_terms(IndexObject *self, PyObject *args)
{
    PIN_SCOPE;
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
    UNLOCKED(&self->guard, NULL, rc = pydb_index_terms(
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
static PyObject *postings_to_list(pydb_postings *p)
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
"postings($self, key, /)\n--\n\n"
"The postings of exactly `key` (bytes, key form) as a list of\n"
"(mfn, tag, occ, cnt) tuples sorted ascending; [] if the key is absent.\n"
"Decoded with the GIL released.");

static PyObject *index_postings(IndexObject *self, PyObject *arg)
{
    PIN_SCOPE;
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
    UNLOCKED(&self->guard, NULL,
             rc = pydb_index_postings(&p, self->ix, key.buf, (size_t)key.len,
                                      &e));
    PyBuffer_Release(&key);
    if (rc) {
        pydb_postings_free(&p);
        return set_error(st, rc, &e);
    }
    return postings_to_list(&p);
}

PyDoc_STRVAR(index_key_doc,
"key($self, term, /)\n--\n\n"
"`term` (bytes) brought into this index's key form (case table or\n"
"Unicode folding, truncation; docs/isis-formats.md §5.3), as bytes.");

/* key() and lookup_key(): `term` (bytes) in key form, or (lookup) as
 * stored when the index holds it, probing with the GIL released. */
static PyObject *key_of(IndexObject *self, PyObject *arg, int lookup)
{
    PIN_SCOPE;
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
    if (lookup)
        UNLOCKED(&self->guard, NULL,
                 rc = pydb_index_lookup_key(out, cap, &out_len, self->ix,
                                            term.buf, (size_t)term.len, &e));
    else   /* pure computation: GIL held */
        rc = pydb_index_key(out, cap, &out_len, self->ix, term.buf,
                            (size_t)term.len, &e);
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

static PyObject *index_key(IndexObject *self, PyObject *arg)
{
    return key_of(self, arg, 0);
}

PyDoc_STRVAR(index_lookup_key_doc,
"lookup_key($self, term, /)\n--\n\n"
"The key `term` (bytes) looks up: itself, trailing blanks trimmed, when\n"
"the index holds exactly that key as stored, else its key form (as\n"
"key()).  Probes the index with the GIL released.");

static PyObject *index_lookup_key(IndexObject *self, PyObject *arg)
{
    return key_of(self, arg, 1);
}

static PyObject *index_get_kind(IndexObject *self, void *c)
{
    PIN_SCOPE;
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
    PIN_SCOPE;
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
    return PyBool_FromLong(self->guard.closing || !HANDLE_LOAD(self->ix));
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
    {"lookup_key", (PyCFunction)index_lookup_key, METH_O,
     index_lookup_key_doc},
    {"close", (PyCFunction)index_close, METH_NOARGS,
     "close($self, /)\n--\n\nRelease the index files (idempotent)."},
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

/* ------------------------------------------------------- ISIS files */

PyDoc_STRVAR(open_isis_index_doc,
"_open_isis_index(path, keys=0, /)\n--\n\n"
"Open the CDS/ISIS inverted file of the database `path` (base name or\n"
"any of its files; str, bytes or os.PathLike) and return an Index whose\n"
"key form is the ISISUC/ISISAC.TAB beside it when present, else the\n"
"built-in table `keys` (0 DOS, 1 ANSI, 2 ASCII, 3 Unicode).\n"
"Raises DatabaseNotFoundError when there is no .cnt file (no inverted\n"
"file), CorruptionError when no file set validates (docs/isis-formats.md\n"
"§4.8) or a .tab is damaged, ValueError for an unknown `keys`, DiskError\n"
"for other OS errors.");

static PyObject *open_isis_index(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *path, *bytes = NULL;
    pydb_index *ix = NULL;
    const char *cpath;
    pydb_error e;
    int keys = PYDB_KEYS_DOS, rc;

    if (!PyArg_ParseTuple(args, "O|i:_open_isis_index", &path, &keys))
        return NULL;
    if (!PyUnicode_FSConverter(path, &bytes)) return NULL;
    cpath = PyBytes_AS_STRING(bytes);
    UNLOCKED(NULL, NULL, rc = pydb_isis_index_open(&ix, cpath, keys, &e));
    Py_DECREF(bytes);
    if (rc) return set_error(st, rc, &e);
    return index_wrap(st, ix, NULL);
}

static PyObject *str_or_none(const char *s)
{
    if (!s || !*s) Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(s);
}

PyDoc_STRVAR(isis_index_info_doc,
"_isis_index_info(index, /)\n--\n\n"
"What was detected when `index` (opened by _open_isis_index) was opened,\n"
"as a dict: kind ('isis-classic' or 'isis-lind'), le1, le2 (key lengths\n"
"of trees 1 and 2, bytes), layout ('packed' or 'aligned': .cnt record\n"
"size 26 or 28), key_pad (bytes after a 10/30 key), infx and infx_align\n"
"(LIND INFO1/INFO3 size and alignment, bytes; 0 for classic), mfn_bytes\n"
"(3, or 4 for LIND4), cnt, postings (paths), trees (two dicts: empty,\n"
"liv, root, nodes, leaves, node_size, leaf_size, node_file, leaf_file),\n"
"note (which file set was used and why, docs/isis-formats.md §4.8), keys\n"
"(the built-in key table, 0-3) and tables (bit 1: ISISUC.TAB, bit 2:\n"
"ISISAC.TAB beside the .cnt replaced it).");

static PyObject *isis_index_info(PyObject *m, PyObject *arg)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    IndexObject *self;
    pydb_isis_index_info in;
    PyObject *trees = NULL, *result = NULL;

    if (!PyObject_TypeCheck(arg, st->index_type)) {
        PyErr_SetString(PyExc_TypeError, "expected an Index");
        return NULL;
    }
    self = (IndexObject *)arg;
    if (index_check_open(st, self) < 0) return NULL;
    if (pydb_isis_index_describe(&in, self->ix) != PYDB_OK) {
        PyErr_SetString(PyExc_TypeError, "not an ISIS inverted file");
        return NULL;
    }
    trees = PyList_New(2);
    if (!trees) return NULL;
    for (int t = 0; t < 2; t++) {
        PyObject *node = str_or_none(in.tree[t].node_path);
        PyObject *leaf = str_or_none(in.tree[t].leaf_path);
        PyObject *d = NULL;
        if (node && leaf)
            d = Py_BuildValue(
                "{s:O,s:i,s:i,s:i,s:i,s:n,s:n,s:O,s:O}", "empty",
                in.tree[t].empty ? Py_True : Py_False, "liv", in.tree[t].liv,
                "root", (int)in.tree[t].root, "nodes", (int)in.tree[t].nodes,
                "leaves", (int)in.tree[t].leaves, "node_size",
                (Py_ssize_t)in.tree[t].node_size, "leaf_size",
                (Py_ssize_t)in.tree[t].leaf_size, "node_file", node,
                "leaf_file", leaf);
        Py_XDECREF(node);
        Py_XDECREF(leaf);
        if (!d) goto cleanup;
        PyList_SET_ITEM(trees, t, d);
    }
    {
        PyObject *cnt = str_or_none(in.cnt_path);
        PyObject *post = str_or_none(in.postings_path);
        if (cnt && post)
            result = Py_BuildValue(
                "{s:s,s:i,s:i,s:s,s:i,s:i,s:i,s:i,s:O,s:O,s:O,s:s,s:i,s:i}",
                "kind",
                in.kind == PYDB_INDEX_ISIS_LIND ? "isis-lind"
                                                : "isis-classic",
                "le1", in.le1, "le2", in.le2, "layout",
                in.cnt_aligned ? "aligned" : "packed", "key_pad", in.key_pad,
                "infx", in.infx, "infx_align", in.infx_align, "mfn_bytes",
                in.mfn_bytes, "cnt", cnt, "postings", post, "trees", trees,
                "note", in.note ? in.note : "", "keys", in.keys, "tables",
                in.tables);
        Py_XDECREF(cnt);
        Py_XDECREF(post);
    }
cleanup:
    Py_DECREF(trees);
    return result;
}

/* ------------------------------------------------------- in-memory */

/* Caps from "tag,occ,cnt" (any subset, any order; "" = MFN only). */
static int parse_caps(const char *s, int *caps)
{
    *caps = 0;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 3 && memcmp(s, "tag", 3) == 0) *caps |= PYDB_POSTING_TAG;
        else if (n == 3 && memcmp(s, "occ", 3) == 0) *caps |= PYDB_POSTING_OCC;
        else if (n == 3 && memcmp(s, "cnt", 3) == 0) *caps |= PYDB_POSTING_CNT;
        else {
            PyErr_Format(PyExc_ValueError,
                         "caps must name 'tag', 'occ' and/or 'cnt' separated "
                         "by commas, not %.*s", (int)n, s);
            return -1;
        }
        s += n;
        if (*s == ',') s++;
    }
    return 0;
}

static int u32_of(PyObject *o, uint32_t *out, const char *what)
{
    unsigned long long v;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "posting %s must be an int", what);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "posting %s must be 0..4294967295",
                     what);
        return -1;
    }
    if (v > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "posting %s must be 0..4294967295",
                     what);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

PyDoc_STRVAR(memory_index_doc,
"_memory_index(entries, caps='tag,occ,cnt')\n--\n\n"
"An in-memory Index (kind 'memory') from `entries`, a dict mapping each\n"
"key (bytes, taken as the key form) to a list of (mfn, tag, occ, cnt)\n"
"tuples (MFN >= 1; the others 0..2**32-1).  `caps` names the posting\n"
"fields the index records ('tag', 'occ', 'cnt', comma-separated; '' for\n"
"MFNs only, like an ISIS LIND index); the others are stored as 0.  Its\n"
"key form upper-cases ASCII a-z and keeps every other byte.  Raises\n"
"TypeError/ValueError for malformed entries.");

static PyObject *mod_memory_index(PyObject *m, PyObject *args,
                                  PyObject *kw)
{
    static char *kwlist[] = {"entries", "caps", NULL};
    module_state *st = PyModule_GetState(m);
    PyObject *entries, *keys = NULL, *result = NULL;
    const char *caps_s = "tag,occ,cnt";
    pydb_index *ix = NULL;
    pydb_posting *buf = NULL;
    size_t bufcap = 0;
    pydb_error e;
    int caps, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|s", kwlist, &PyDict_Type,
                                     &entries, &caps_s) ||
        parse_caps(caps_s, &caps) < 0)
        return NULL;
    keys = PyDict_Keys(entries);
    if (!keys || PyList_Sort(keys) < 0) goto cleanup;   /* ascending: O(1) adds */
    if ((rc = pydb_memindex_new(&ix, caps, &e))) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        PyObject *key = PyList_GET_ITEM(keys, i), *list, *seq;
        Py_ssize_t n;
        if (!PyBytes_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "index keys must be bytes");
            goto cleanup;
        }
        list = PyDict_GetItemWithError(entries, key);
        if (!list) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "key vanished");
            goto cleanup;
        }
        seq = PySequence_Fast(list, "postings must be a list of tuples");
        if (!seq) goto cleanup;
        n = PySequence_Fast_GET_SIZE(seq);
        if ((size_t)n > bufcap) {
            pydb_posting *nb = realloc(buf, (size_t)n * sizeof *nb);
            if (!nb) {
                Py_DECREF(seq);
                PyErr_NoMemory();
                goto cleanup;
            }
            buf = nb;
            bufcap = (size_t)n;
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *t = PySequence_Fast_GET_ITEM(seq, k);
            uint32_t mfn;
            if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
                PyErr_SetString(PyExc_TypeError,
                                "a posting must be a (mfn, tag, occ, cnt) tuple");
                Py_DECREF(seq);
                goto cleanup;
            }
            if (u32_of(PyTuple_GET_ITEM(t, 0), &mfn, "mfn") < 0 ||
                u32_of(PyTuple_GET_ITEM(t, 1), &buf[k].tag, "tag") < 0 ||
                u32_of(PyTuple_GET_ITEM(t, 2), &buf[k].occ, "occ") < 0 ||
                u32_of(PyTuple_GET_ITEM(t, 3), &buf[k].cnt, "cnt") < 0) {
                Py_DECREF(seq);
                goto cleanup;
            }
            if (mfn < 1 || mfn > INT32_MAX) {
                PyErr_Format(PyExc_ValueError,
                             "posting MFN must be 1..2147483647, not %lu",
                             (unsigned long)mfn);
                Py_DECREF(seq);
                goto cleanup;
            }
            buf[k].mfn = (int32_t)mfn;
        }
        Py_DECREF(seq);
        rc = pydb_memindex_add(ix, (const uint8_t *)PyBytes_AS_STRING(key),
                               (size_t)PyBytes_GET_SIZE(key), buf, (size_t)n,
                               &e);
        if (rc) {
            set_error(st, rc, &e);
            goto cleanup;
        }
    }
    result = index_wrap(st, ix, NULL);
    ix = NULL;   /* owned (or closed) by index_wrap */
cleanup:
    pydb_index_close(ix);
    free(buf);
    Py_XDECREF(keys);
    return result;
}

/* ------------------------------------------- FST and native index */

PyDoc_STRVAR(fst_parse_doc,
"_fst_parse(text, filename=None)\n--\n\n"
"Compile FST text (bytes or str; docs/isis-formats.md §5.1) and return its\n"
"rules as a list of (id, technique, format: bytes, line) tuples.\n"
"Raises FSTError(filename, line, reason) naming the construct.");

static PyObject *fst_parse(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"text", "filename", NULL};
    module_state *st = PyModule_GetState(m);
    Py_buffer text;
    const char *filename = NULL;
    pydb_fst *f = NULL;
    pydb_error e;
    PyObject *res = NULL;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s*|z", kwlist, &text,
                                     &filename))
        return NULL;
    rc = pydb_fst_parse(&f, text.buf, (size_t)text.len, filename, &e);
    PyBuffer_Release(&text);
    if (rc) return set_error(st, rc, &e);
    res = PyList_New((Py_ssize_t)pydb_fst_count(f));
    for (size_t i = 0; res && i < pydb_fst_count(f); i++) {
        uint32_t id;
        int tech, line;
        const char *fmt;
        size_t fl;
        pydb_fst_rule(&id, &tech, &fmt, &fl, &line, f, i);
        PyObject *t = Py_BuildValue("(Iiy#i)", id, tech, fmt, (Py_ssize_t)fl,
                                    line);
        if (!t) {
            Py_CLEAR(res);
            break;
        }
        PyList_SET_ITEM(res, (Py_ssize_t)i, t);
    }
    pydb_fst_free(f);
    return res;
}

PyDoc_STRVAR(index_build_doc,
"_index_build(db_path, fst, progress=None, utf8=False, max_key=0,\n"
"             stw=None, tables=True, batch=8192, keys=0, upper=None,\n"
"             word=None, memory=0, mode=0, skip_damaged=False)\n--\n\n"
"Build the native index of the database at db_path (str) from FST text\n"
"`fst` into <base>.pdx/.  Keys are made by Unicode folding when utf8,\n"
"else by the built-in table `keys` (0 DOS, 1 ANSI, 2 ASCII), whose\n"
"case and word tables `upper` and `word` (bytes of 256, a rebuild passing\n"
"the stored ones) replace; then ISISUC/ISISAC.TAB when `tables`.  The work runs with the GIL released in batches\n"
"of `batch` records; between batches progress(done, total) is called\n"
"(records read so far, max MFN).  `memory`: bytes of keys and postings\n"
"held before a sorted run is spilled (0: PYDB_NIDX_MEMORY_DEFAULT).\n"
"`mode`: the key mode (0 unicode, 1 cisis; enum pydb_keymode).\n"
"`skip_damaged`: a record that cannot be read is left out, not raised.\n"
"Returns the number of records read; with skip_damaged, (that number,\n"
"[(mfn, CorruptionError) of each record left out]).\n"
"Raises FSTError, CorruptionError, DiskError, DatabaseNotFoundError,\n"
"ValueError (unknown `keys`, a table not of 256 bytes, memory < 0).");

/* The exception set_error() would raise for e, as an object (new
 * reference; NULL and an exception where even that fails). */
static PyObject *error_object(module_state *st, const pydb_error *e)
{
    PyObject *type, *value, *tb;
    set_error(st, e->code, e);
    PyErr_Fetch(&type, &value, &tb);   /* PyErr_GetRaisedException: 3.12 */
    PyErr_NormalizeException(&type, &value, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

/* _index_build's answer with skip_damaged: (done, [(mfn, the
 * CorruptionError of its read) of each record the build left out]). */
static PyObject *build_result(module_state *st, int64_t done,
                              const pydb_nidx_builder *b)
{
    size_t n;
    const pydb_nidx_damaged *d = pydb_nidx_builder_damaged(b, &n);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *exc = error_object(st, &d[i].error);
        PyObject *t = exc ? Py_BuildValue("(iN)", (int)d[i].mfn, exc) : NULL;
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return Py_BuildValue("(LN)", (long long)done, list);
}

static PyObject *index_build(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"db_path", "fst", "progress", "utf8", "max_key",
                             "stw", "tables", "batch", "keys", "upper",
                             "word", "memory", "mode", "skip_damaged", NULL};
    module_state *st = PyModule_GetState(m);
    PyObject *path_obj = NULL, *progress = Py_None, *res = NULL;
    Py_buffer text, stw = {0}, upper = {0}, word = {0};
    int utf8 = 0, tables = 1, keys = 0, mode = 0, skip = 0, rc, more = 1;
    Py_ssize_t max_key = 0, batch = 8192, memory = 0;
    pydb_fst *f = NULL;
    pydb_nidx_builder *b = NULL;
    pydb_nidx_options opt;
    pydb_error e;
    int64_t done = 0, total = 0;
    const char *cpath;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&s*|Opnz*pniz*z*nip", kwlist,
                                     PyUnicode_FSConverter, &path_obj, &text,
                                     &progress, &utf8, &max_key, &stw,
                                     &tables, &batch, &keys, &upper, &word,
                                     &memory, &mode, &skip))
        return NULL;
    if (memory < 0) {
        PyErr_SetString(PyExc_ValueError, "memory must be >= 0 (bytes)");
        goto cleanup;
    }
    if ((upper.obj && upper.len != 256) || (word.obj && word.len != 256)) {
        PyErr_Format(PyExc_ValueError, "%s table has %zd bytes, not 256",
                     upper.obj && upper.len != 256 ? "the case" : "the word",
                     upper.obj && upper.len != 256 ? upper.len : word.len);
        goto cleanup;
    }
    if (batch < 1) batch = 1;
    if (batch > INT32_MAX) batch = INT32_MAX;
    memset(&opt, 0, sizeof opt);
    opt.utf8 = utf8;
    opt.keys = keys;
    opt.mode = mode;
    opt.upper = upper.obj ? upper.buf : NULL;
    opt.word = word.obj ? word.buf : NULL;
    opt.max_key = max_key > 0 ? (size_t)max_key : 0;
    opt.tables = tables;
    opt.memory = (size_t)memory;
    opt.skip_damaged = skip;
    if (stw.obj) {
        opt.stw = stw.buf;
        opt.stw_len = (size_t)stw.len;
    }
    rc = pydb_fst_parse(&f, text.buf, (size_t)text.len, NULL, &e);
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    cpath = PyBytes_AS_STRING(path_obj);
    UNLOCKED(NULL, NULL, rc = pydb_nidx_builder_open(&b, cpath, f, &opt, &e));
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    while (more) {
        int32_t nbatch = (int32_t)batch;
        UNLOCKED(NULL, NULL, rc = pydb_nidx_builder_step(&done, &total, &more,
                                                         b, nbatch, &e));
        if (rc) {
            set_error(st, rc, &e);
            goto cleanup;
        }
        if (progress != Py_None) {
            PyObject *r = PyObject_CallFunction(progress, "LL",
                                                (long long)done,
                                                (long long)total);
            if (!r) goto cleanup;
            Py_DECREF(r);
        }
        if (PyErr_CheckSignals() < 0) goto cleanup;
    }
    UNLOCKED(NULL, NULL, rc = pydb_nidx_builder_finish(b, &e));
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    res = skip ? build_result(st, done, b)
               : PyLong_FromLongLong((long long)done);
cleanup:
    if (b) UNLOCKED(NULL, NULL, pydb_nidx_builder_free(b));
    pydb_fst_free(f);
    Py_XDECREF(path_obj);
    PyBuffer_Release(&text);
    if (stw.obj) PyBuffer_Release(&stw);
    if (upper.obj) PyBuffer_Release(&upper);
    if (word.obj) PyBuffer_Release(&word);
    return res;
}

PyDoc_STRVAR(open_native_doc,
"_open_native_index(db_path, /)\n--\n\n"
"Open the native index <base>.pdx of the database at db_path as an\n"
"Index handle.  Raises DatabaseNotFoundError when there is none,\n"
"CorruptionError for a damaged manifest or segment.");

static PyObject *open_native(PyObject *m, PyObject *arg)
{
    return index_open_path(PyModule_GetState(m), arg, pydb_native_index_open);
}

PyDoc_STRVAR(index_gen_doc,
"_index_gen(db, /)\n--\n\n"
"The native index generation the latest commit of the Database `db`\n"
"published (int; 0: none, or no usable commit header): pydb_index_gen.\n"
"Raises ClosedError.");

static PyObject *index_gen(PyObject *m, PyObject *arg)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    DatabaseObject *db;
    if (!PyObject_TypeCheck(arg, st->database_type)) {
        PyErr_SetString(PyExc_TypeError, "_index_gen(db): a Database");
        return NULL;
    }
    db = (DatabaseObject *)arg;
    if (database_check_open(st, db) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(pydb_index_gen(db->db));
}

PyDoc_STRVAR(index_gen_seen_doc,
"_index_gen_seen(db, gen, /)\n--\n\n"
"The caller looked for the native index of the writable Database `db` as\n"
"of generation `gen` (_index_gen before it looked) and attached what it\n"
"found: from now on, while none is attached, a transaction's begin asks\n"
"db._attach_built_index() once a later commit names a newer generation\n"
"(pydb_index_gen_seen).  Raises ClosedError.");

static PyObject *index_gen_seen(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *dbo;
    unsigned long long gen;
    if (!PyArg_ParseTuple(args, "O!K", st->database_type, &dbo, &gen))
        return NULL;
    if (database_check_open(st, (DatabaseObject *)dbo) < 0) return NULL;
    pydb_index_gen_seen(((DatabaseObject *)dbo)->db, (uint64_t)gen);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(attach_native_doc,
"_attach_native_index(db, index, /)\n--\n\n"
"Make every commit on the writable Database `db` update the native Index\n"
"`index` (opened on the same database) in the same transaction\n"
"(pydb_native_index_attach).  From then on the database holds the index:\n"
"index.close() only marks it closed, and its files are released when the\n"
"database is closed.  Raises ValueError if either is attached already,\n"
"ClosedError if either is closed, UnsupportedError for an index that is\n"
"not native.");

static PyObject *attach_native(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *db_obj, *index_obj;
    DatabaseObject *db;
    IndexObject *io;
    pydb_error e;
    int rc;
    const char *why = NULL;

    if (!PyArg_ParseTuple(args, "O!O!", st->database_type, &db_obj,
                          st->index_type, &index_obj))
        return NULL;
    db = (DatabaseObject *)db_obj;
    io = (IndexObject *)index_obj;
    if (database_check_open(st, db) < 0) return NULL;
    if (index_check_open(st, io) < 0) return NULL;
    /* Claimed before the core call, under both objects' critical
     * sections: two threads cannot attach at once (free-threaded). */
    binding_lock();
    if (db->hooked_index || io->hooked)
        why = "a native index is attached already";
    else if (db->txn)
        why = "cannot attach an index during a transaction";
    else {
        io->hooked = 1;
        db->hooked_index = Py_NewRef(index_obj);
    }
    binding_unlock();
    if (why) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    UNLOCKED(&db->guard, &io->guard,
             rc = pydb_native_index_attach(io->ix, db->db, &e));
    if (rc) {
        PyObject *hooked;
        binding_lock();
        hooked = db->hooked_index;
        db->hooked_index = NULL;
        io->hooked = 0;
        binding_unlock();
        Py_XDECREF(hooked);
        /* closed meanwhile: its close() left the freeing to us */
        if (io->guard.closing) index_release_hooked(index_obj);
        return set_error(st, rc, &e);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(native_stored_doc,
"_native_index_stored(db_path, spare=False, /)\n--\n\n"
"The settings the native index <base>.pdx of the database at db_path\n"
"was built with (its MANIFEST; with spare, the MANIFEST's spare\n"
"MANIFEST.pydb-next, an earlier commit's): a dict {'utf8': bool, 'max_key': int\n"
"(bytes, 0 = no limit), 'mode': str ('cisis' or 'unicode'), 'upper', 'word': bytes of 256 (case table and\n"
"word characters), 'fst': bytes (FST text), 'stw': bytes (stop\n"
"words, b'' for none)}, or None when the database has no native index.\n"
"Raises CorruptionError for a damaged MANIFEST, DiskError.");

static PyObject *native_stored(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *bytes = NULL;
    pydb_nidx_stored s;
    pydb_error e;
    int rc, spare = 0;

    const char *cpath;
    if (!PyArg_ParseTuple(args, "O&|p:_native_index_stored",
                          PyUnicode_FSConverter, &bytes, &spare))
        return NULL;
    cpath = PyBytes_AS_STRING(bytes);
    UNLOCKED(NULL, NULL,
             rc = spare ? pydb_native_index_stored_spare(&s, cpath, &e)
                        : pydb_native_index_stored(&s, cpath, &e));
    Py_DECREF(bytes);
    if (rc == PYDB_EIO && e.sys_errno == ENOENT) Py_RETURN_NONE;
    if (rc) return set_error(st, rc, &e);
    PyObject *res = Py_BuildValue(
        "{s:O,s:n,s:s,s:y#,s:y#,s:y#,s:y#}", "utf8",
        s.utf8 ? Py_True : Py_False, "max_key", (Py_ssize_t)s.max_key,
        "mode", s.mode == PYDB_KEYMODE_CISIS ? "cisis" : "unicode", "upper", (const char *)s.upper,
        (Py_ssize_t)256, "word", (const char *)s.word, (Py_ssize_t)256,
        "fst", s.fst,
        (Py_ssize_t)s.fst_len, "stw", (const char *)s.stw,
        (Py_ssize_t)s.stw_len);
    pydb_nidx_stored_free(&s);
    return res;
}

PyDoc_STRVAR(snapshot_index_doc,
"_snapshot_index(db, index, /)\n--\n\n"
"Take a snapshot of the Database `db` and return (view, info): `view`\n"
"an Index answering terms/postings/search as of the snapshot's commit\n"
"(pydb_snapshot_index; kept unchanged while writers commit, and valid\n"
"after db and index close for a native index), `info` a dict of what the\n"
"snapshot pinned: commit, next_mfn, reccnt, mst_end (bytes), index_gen,\n"
"registered (bool).  The snapshot itself is released before returning:\n"
"a native view keeps its segments open.  Raises ClosedError,\n"
"LockTimeoutError (the index kept moving: see pydb_snapshot_index),\n"
"CorruptionError, DiskError.");

static PyObject *snapshot_index(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *db_obj, *index_obj, *view_obj, *res;
    DatabaseObject *db;
    IndexObject *io;
    pydb_snapshot *snap = NULL;
    pydb_snapshot_info si;
    pydb_index *view = NULL;
    pydb_error e;
    int rc, vrc = PYDB_OK;

    if (!PyArg_ParseTuple(args, "O!O!", st->database_type, &db_obj,
                          st->index_type, &index_obj))
        return NULL;
    db = (DatabaseObject *)db_obj;
    io = (IndexObject *)index_obj;
    if (database_check_open(st, db) < 0) return NULL;
    if (index_check_open(st, io) < 0) return NULL;
    UNLOCKED(&db->guard, &io->guard, {
        /* the snapshot's take-and-retry (_pydb_snapshot.c) */
        rc = take_with_view(&snap, &view, &vrc, &e, db->db, io->ix, &e);
        if (rc == PYDB_OK) {
            pydb_snapshot_info_get(&si, snap);
            pydb_snapshot_release(snap);
            rc = vrc;
        }
    });
    if (rc) return set_error(st, rc, &e);
    /* a borrowed (non-native) view keeps its index alive */
    view_obj = index_wrap(st, view,
                          pydb_index_kind(view) == PYDB_INDEX_NATIVE
                              ? NULL : index_obj);
    if (!view_obj) return NULL;
    res = Py_BuildValue("(N{s:K,s:i,s:i,s:L,s:K,s:O})", view_obj, "commit",
                        (unsigned long long)si.commit, "next_mfn",
                        (int)si.next_mfn, "reccnt", (int)si.reccnt,
                        "mst_end", (long long)si.mst_end, "index_gen",
                        (unsigned long long)si.index_gen, "registered",
                        si.registered ? Py_True : Py_False);
    return res;
}

static PyMethodDef index_functions[] = {
    {"_open_native_index", (PyCFunction)open_native, METH_O,
     open_native_doc},
    {"_open_isis_index", open_isis_index, METH_VARARGS, open_isis_index_doc},
    {"_isis_index_info", isis_index_info, METH_O, isis_index_info_doc},
    {"_memory_index", (PyCFunction)(void (*)(void))mod_memory_index,
     METH_VARARGS | METH_KEYWORDS, memory_index_doc},
    {"_fst_parse", (PyCFunction)(void (*)(void))fst_parse,
     METH_VARARGS | METH_KEYWORDS, fst_parse_doc},
    {"_index_build", (PyCFunction)(void (*)(void))index_build,
     METH_VARARGS | METH_KEYWORDS, index_build_doc},
    {"_attach_native_index", (PyCFunction)attach_native, METH_VARARGS,
     attach_native_doc},
    {"_index_gen", (PyCFunction)index_gen, METH_O, index_gen_doc},
    {"_index_gen_seen", (PyCFunction)index_gen_seen, METH_VARARGS,
     index_gen_seen_doc},
    {"_native_index_stored", (PyCFunction)native_stored, METH_VARARGS,
     native_stored_doc},
    {"_snapshot_index", (PyCFunction)snapshot_index, METH_VARARGS,
     snapshot_index_doc},
    {NULL}};

int index_exec(PyObject *m, module_state *st)
{
    st->index_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &index_spec, NULL);
    if (!st->index_type) return -1;
    if (PyModule_AddType(m, st->index_type) < 0) return -1;
    return PyModule_AddFunctions(m, index_functions);
}
