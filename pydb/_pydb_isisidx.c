/*
 * _pydb_isisidx.c - opening existing CDS/ISIS inverted files
 * (csrc/isisidx.c, isis-formats.md §4) as Index handles.
 *
 * Module functions:
 *   _open_isis_index(path) -> Index   (GIL released while opening)
 *   _isis_index_info(index) -> dict   (what was detected; no I/O)
 */
#include "_pydb.h"

PyDoc_STRVAR(open_isis_index_doc,
"_open_isis_index(path, /)\n--\n\n"
"Open the CDS/ISIS inverted file of the database `path` (base name or\n"
"any of its files; str, bytes or os.PathLike) and return an Index.\n"
"Raises DatabaseNotFoundError when there is no .cnt file (no inverted\n"
"file), CorruptionError when no file set validates (isis-formats.md\n"
"§4.8), DiskError for other OS errors.");

static PyObject *open_isis_index(PyObject *m, PyObject *arg)
{
    return index_open_path(PyModule_GetState(m), arg, pydb_isis_index_open);
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
"liv, root, nodes, leaves, node_size, leaf_size, node_file, leaf_file)\n"
"and note (which file set was used and why, isis-formats.md §4.8).");

static PyObject *isis_index_info(PyObject *m, PyObject *arg)
{
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
    if (pydb_isis_index_describe(self->ix, &in) != PYDB_OK) {
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
                "{s:s,s:i,s:i,s:s,s:i,s:i,s:i,s:i,s:O,s:O,s:O,s:s}", "kind",
                in.kind == PYDB_INDEX_ISIS_LIND ? "isis-lind"
                                                : "isis-classic",
                "le1", in.le1, "le2", in.le2, "layout",
                in.cnt_aligned ? "aligned" : "packed", "key_pad", in.key_pad,
                "infx", in.infx, "infx_align", in.infx_align, "mfn_bytes",
                in.mfn_bytes, "cnt", cnt, "postings", post, "trees", trees,
                "note", in.note ? in.note : "");
        Py_XDECREF(cnt);
        Py_XDECREF(post);
    }
cleanup:
    Py_DECREF(trees);
    return result;
}

static PyMethodDef isisidx_methods[] = {
    {"_open_isis_index", open_isis_index, METH_O, open_isis_index_doc},
    {"_isis_index_info", isis_index_info, METH_O, isis_index_info_doc},
    {NULL}};

int isisidx_exec(PyObject *m, module_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, isisidx_methods);
}
