/*
 * _pydb_search.c - the search language (csrc/search_parse.c,
 * csrc/search_eval.c) for Python: _search(), used by pydb/search.py.
 * Which MFNs are dropped as deleted is pydb_search()'s rule (pydb.h);
 * this file only passes the Index's and the Database's handles.
 *
 * _search() evaluates with the GIL held when the search cannot wait
 * (pydb_search_nowait: cached segments, a bounded number of postings),
 * else with it released inside UNLOCKED() on both the Index's and the
 * Database's guard, so that close() of either waits for it.
 */
#include "_pydb_database.h"
#include "_pydb_index.h"
#include <stdlib.h>
#include <string.h>

PyObject *mfn_bytes(const int32_t *mfns, size_t n)
{
    if (n > (size_t)PY_SSIZE_T_MAX / sizeof *mfns) return PyErr_NoMemory();
    return PyBytes_FromStringAndSize(n ? (const char *)mfns : "",
                                     (Py_ssize_t)(n * sizeof *mfns));
}

/* Byte offset `off` in `encoded` -> character offset (-1 stays -1). */
static Py_ssize_t search_char_offset(PyObject *encoded, int64_t off,
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

void search_error_in_chars(pydb_error *e, PyObject *encoded,
                           const char *encoding)
{
    static const char key[] = "at position ";
    const size_t klen = sizeof key - 1;
    char out[sizeof e->message];
    const char *p = e->message;
    size_t o = 0;
    int done = 0;

    e->offset = search_char_offset(encoded, e->offset, encoding);
    while (*p && o + 1 < sizeof out) {
        if (!done && strncmp(p, key, klen) == 0 && p[klen] >= '0' &&
            p[klen] <= '9') {
            char *end;
            long long n = strtoll(p + klen, &end, 10);
            int w = snprintf(out + o, sizeof out - o, "%s%zd", key,
                             search_char_offset(encoded, n, encoding));
            if (w < 0 || (size_t)w >= sizeof out - o) break;
            o += (size_t)w;
            p = end;
            done = 1;   /* the core's; a later one is the user's text */
            continue;
        }
        out[o++] = *p++;
    }
    out[o] = '\0';
    memcpy(e->message, out, o + 1);
}

PyDoc_STRVAR(search_doc,
"_search(index, expr, db=None, encoding=None, errors=None)\n--\n\n"
"Evaluate the CDS/ISIS search expression `expr` (str; docs/isis-formats.md §6,\n"
"the language of csrc/search_parse.c) against `index` (an Index).  The\n"
"expression is encoded with `db`'s encoding and error handler when a\n"
"Database is given, else with `encoding` and `errors` (default UTF-8,\n"
"strict).  With `db`, MFNs whose record is not active (logically or\n"
"physically deleted, never created) are dropped; the native index a\n"
"writable Database has attached holds no postings of inactive records\n"
"and is not filtered by the XRF.  A native index is evaluated on one\n"
"pinned segment list (one committed state).  Returns the sorted,\n"
"distinct MFNs as bytes: native-endian 32-bit ints, 4 bytes per MFN\n"
"(no Python int per hit; array('i').frombytes() reads them).\n"
"Evaluated with the GIL released.\n"
"Raises SearchSyntaxError (reason, 0-based character position),\n"
"UnsupportedError (operator the index cannot answer, e.g. (G) on a LIND\n"
"index), ClosedError, CorruptionError/DiskError from the index or XRF,\n"
"UnicodeEncodeError if `expr` does not fit the encoding, TypeError.");

static PyObject *mod_search(PyObject *m, PyObject *args, PyObject *kw)
{
    PIN_SCOPE;
    static char *kwlist[] = {"index", "expr", "db", "encoding", "errors",
                             NULL};
    module_state *st = PyModule_GetState(m);
    PyObject *index_obj, *expr, *db_obj = Py_None, *encoded = NULL;
    PyObject *result = NULL;
    IndexObject *ix;
    DatabaseObject *db = NULL;
    const char *encoding = "utf-8", *errors = "strict";
    int32_t *mfns = NULL;
    size_t n = 0, text_len;
    const char *text;
    pydb_error e;
    int rc;

    memset(&e, 0, sizeof e);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!U|Ozz", kwlist,
                                     st->index_type, &index_obj, &expr,
                                     &db_obj, &encoding, &errors))
        return NULL;
    if (!encoding) encoding = "utf-8";
    if (!errors) errors = "strict";
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
    if (db && database_check_open(st, db) < 0) goto cleanup;
    /* Which MFNs the XRF drops is pydb_search()'s rule (pydb.h). */
    text = PyBytes_AS_STRING(encoded);
    text_len = (size_t)PyBytes_GET_SIZE(encoded);
    /* A search that cannot wait runs with the GIL held (conventions.md
     * §4, rule 6); otherwise release it and search. */
    rc = pydb_search_nowait(&mfns, &n, ix->ix, db ? db->db : NULL, text,
                            text_len, &e);
    if (rc == PYDB_EWOULDBLOCK)
        UNLOCKED(&ix->guard, db ? &db->guard : NULL,
                 rc = pydb_search(&mfns, &n, ix->ix, db ? db->db : NULL,
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

static PyMethodDef search_functions[] = {
    {"_search", (PyCFunction)(void (*)(void))mod_search,
     METH_VARARGS | METH_KEYWORDS, search_doc},
    {NULL}};

int search_exec(PyObject *m, module_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, search_functions);
}
