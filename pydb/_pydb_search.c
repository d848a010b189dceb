/*
 * _pydb_search.c - the search language (csrc/search.c) and the in-memory
 * index (csrc/memindex.c) for Python: module functions _search() and
 * _memory_index(), used by pydb/search.py.
 *
 * _search() evaluates with the GIL released, counted in the Index's (and
 * the Database's) `active` counter so that close() waits for it.
 */
#include "_pydb.h"
#include <stdlib.h>
#include <string.h>

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

/* Byte offset `off` in the encoded expression -> character offset. */
static Py_ssize_t char_offset(PyObject *encoded, int64_t off,
                              const char *encoding)
{
    Py_ssize_t n = PyBytes_GET_SIZE(encoded), len;
    PyObject *prefix;
    if (off <= 0) return off < 0 ? -1 : 0;
    if (off > n) off = n;
    prefix = PyUnicode_Decode(PyBytes_AS_STRING(encoded), (Py_ssize_t)off,
                              encoding, "replace");
    if (!prefix) {
        PyErr_Clear();
        return (Py_ssize_t)off;
    }
    len = PyUnicode_GET_LENGTH(prefix);
    Py_DECREF(prefix);
    return len;
}

PyDoc_STRVAR(search_doc,
"_search(index, expr, db=None)\n--\n\n"
"Evaluate the CDS/ISIS search expression `expr` (str; isis-formats.md §6,\n"
"the language of csrc/search.c) against `index` (an Index).  The\n"
"expression is encoded with `db`'s encoding when a Database is given,\n"
"else UTF-8.  With `db`, MFNs whose record is not active (logically or\n"
"physically deleted, never created) are dropped; the native index a\n"
"writable Database has attached holds no postings of inactive records\n"
"and is not filtered by the XRF.  A native index is evaluated on one\n"
"pinned segment list (one committed state).  Returns the sorted,\n"
"distinct MFNs (list of int).  Evaluated with the GIL released.\n"
"Raises SearchSyntaxError (reason, 0-based character position),\n"
"UnsupportedError (operator the index cannot answer, e.g. (G) on a LIND\n"
"index), ClosedError, CorruptionError/DiskError from the index or XRF,\n"
"UnicodeEncodeError if `expr` does not fit the encoding, TypeError.");

static PyObject *mod_search(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"index", "expr", "db", NULL};
    module_state *st = PyModule_GetState(m);
    PyObject *index_obj, *expr, *db_obj = Py_None, *encoded = NULL;
    PyObject *result = NULL;
    IndexObject *ix;
    DatabaseObject *db = NULL;
    const char *encoding = "utf-8", *errors = "strict";
    int32_t *mfns = NULL;
    size_t n = 0;
    pydb_error e;
    int rc;

    memset(&e, 0, sizeof e);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!U|O", kwlist,
                                     st->index_type, &index_obj, &expr,
                                     &db_obj))
        return NULL;
    ix = (IndexObject *)index_obj;
    if (db_obj != Py_None) {
        if (!PyObject_TypeCheck(db_obj, st->database_type)) {
            PyErr_Format(PyExc_TypeError, "db must be a pydb.Database or "
                         "None, not %.100s", Py_TYPE(db_obj)->tp_name);
            return NULL;
        }
        db = (DatabaseObject *)db_obj;
        if (!db->encoding) {   /* never initialised */
            PyErr_SetString(st->ClosedError, "the database is not open");
            return NULL;
        }
        encoding = PyUnicode_AsUTF8(db->encoding);
        if (!encoding) return NULL;
        /* The database's error handler (surrogateescape by default), so
         * that a key read from terms() can be searched as it came. */
        errors = db->errors ? PyUnicode_AsUTF8(db->errors) : "strict";
        if (!errors) return NULL;
    }
    encoded = PyUnicode_AsEncodedString(expr, encoding, errors);
    if (!encoded) return NULL;
    /* The open checks come last: nothing may run Python code between them
     * and the core call (it could close the handles). */
    if (index_check_open(st, ix) < 0) goto cleanup;
    if (db && check_open(st, db) < 0) goto cleanup;
    atomic_fetch_add(&ix->active, 1);
    if (db) atomic_fetch_add(&db->active, 1);
    Py_BEGIN_ALLOW_THREADS
    /* A native index attached to the database is updated in the same
     * transaction as the records: deleted records have no postings in
     * it.  Filtering by the XRF, which a commit changes at another
     * moment than it publishes the index, could mix two states.  The
     * same holds for a native index read through another handle: every
     * pydb commit changes it with the records (nidx.c refresh). */
    rc = pydb_search(&mfns, &n, ix->ix,
                     db && !ix->hooked &&
                             pydb_index_kind(ix->ix) != PYDB_INDEX_NATIVE ? db->db
                                                               : NULL,
                     PyBytes_AS_STRING(encoded),
                     (size_t)PyBytes_GET_SIZE(encoded), &e);
    if (db) atomic_fetch_sub(&db->active, 1);
    atomic_fetch_sub(&ix->active, 1);
    Py_END_ALLOW_THREADS
    if (rc) {
        if (rc == PYDB_ESYNTAX)
            e.offset = char_offset(encoded, e.offset, encoding);
        set_error(st, rc, &e);
        goto cleanup;
    }
    result = PyList_New((Py_ssize_t)n);
    if (!result) goto cleanup;
    for (size_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(mfns[i]);
        if (!v) {
            Py_CLEAR(result);
            goto cleanup;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, v);
    }
cleanup:
    free(mfns);
    Py_XDECREF(encoded);
    return result;
}

static PyMethodDef search_methods[] = {
    {"_search", (PyCFunction)(void (*)(void))mod_search,
     METH_VARARGS | METH_KEYWORDS, search_doc},
    {"_memory_index", (PyCFunction)(void (*)(void))mod_memory_index,
     METH_VARARGS | METH_KEYWORDS, memory_index_doc},
    {NULL}};

int search_exec(PyObject *m, module_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, search_methods);
}
