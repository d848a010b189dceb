/*
 * _pydb_native.c - FST parsing, key extraction and the native index
 * (csrc/fst.c, csrc/keys.c, csrc/nidx.c) for Python.  The public face is
 * pydb/fst.py and pydb/native.py; these functions are private (_names).
 */
#include "_pydb.h"
#include "nidx_int.h"
#include <stdlib.h>
#include <string.h>

/* ---- fields argument: a sequence of (tag, bytes|str) ---- */
typedef struct {
    pydb_field *v;
    PyObject **keep;   /* bytes objects kept alive */
    Py_ssize_t n;
} fields_arg;

static void fields_free(fields_arg *f)
{
    for (Py_ssize_t i = 0; i < f->n; i++) Py_XDECREF(f->keep[i]);
    PyMem_Free(f->keep);
    PyMem_Free(f->v);
    memset(f, 0, sizeof *f);
}

static int fields_convert(PyObject *seq, fields_arg *f)
{
    PyObject *fast = PySequence_Fast(seq, "fields must be a sequence of "
                                          "(tag, value) pairs");
    Py_ssize_t n;
    memset(f, 0, sizeof *f);
    if (!fast) return -1;
    n = PySequence_Fast_GET_SIZE(fast);
    f->v = PyMem_Calloc(n ? (size_t)n : 1, sizeof *f->v);
    f->keep = PyMem_Calloc(n ? (size_t)n : 1, sizeof *f->keep);
    if (!f->v || !f->keep) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i), *val, *b;
        unsigned long tag;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError,
                            "each field must be a (tag, value) tuple");
            goto fail;
        }
        tag = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(item, 0));
        if (PyErr_Occurred()) goto fail;
        if (tag > 65535) {
            PyErr_SetString(PyExc_ValueError, "tag above 65535");
            goto fail;
        }
        val = PyTuple_GET_ITEM(item, 1);
        if (PyUnicode_Check(val)) b = PyUnicode_AsUTF8String(val);
        else b = PyBytes_FromObject(val);
        if (!b) goto fail;
        f->keep[i] = b;
        f->n = i + 1;
        f->v[i].tag = (uint32_t)tag;
        f->v[i].value = (const uint8_t *)PyBytes_AS_STRING(b);
        f->v[i].len = (uint32_t)PyBytes_GET_SIZE(b);
    }
    f->n = n;
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    fields_free(f);
    return -1;
}

/* ---- key rules from keyword arguments ---- */
static int rules_from(module_state *st, pydb_keyrules *r, int utf8,
                      Py_ssize_t max_key, const char *dir)
{
    pydb_error e;
    int found, rc;
    if (max_key < 0) max_key = 0;
    pydb__keyrules_default(r, utf8, (size_t)max_key);
    if (dir) {
        Py_BEGIN_ALLOW_THREADS
        rc = pydb__keyrules_load_dir(r, dir, &found, &e);
        Py_END_ALLOW_THREADS
        if (rc) {
            set_error(st, rc, &e);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(fst_parse_doc,
"_fst_parse(text, filename=None)\n--\n\n"
"Compile FST text (bytes or str; isis-formats.md §5.1) and return its\n"
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
        pydb_fst_rule(f, i, &id, &tech, &fmt, &fl, &line);
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

typedef struct {
    PyObject *list;
} key_list;

static int key_collect(void *ctx, const uint8_t *key, size_t len,
                       const pydb_posting *p)
{
    key_list *k = ctx;
    PyObject *t = Py_BuildValue("(y#iIII)", key, (Py_ssize_t)len, (int)p->mfn,
                                p->tag, p->occ, p->cnt);
    if (!t || PyList_Append(k->list, t) < 0) {
        Py_XDECREF(t);
        return PYDB_ENOMEM;
    }
    Py_DECREF(t);
    return PYDB_OK;
}

PyDoc_STRVAR(fst_keys_doc,
"_fst_keys(fst, fields, mfn=1, utf8=False, max_key=0, stw=b'',\n"
"          tables_dir=None)\n--\n\n"
"The keys FST text `fst` extracts from one record `fields` (sequence of\n"
"(tag, bytes|str)): a list of (key: bytes, mfn, tag, occ, cnt) in\n"
"extraction order (isis-formats.md §5.2).  `stw`: stop-word text;\n"
"`tables_dir`: load ISISUC.TAB/ISISAC.TAB from there.");

static PyObject *fst_keys(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fst", "fields", "mfn", "utf8", "max_key", "stw",
                             "tables_dir", NULL};
    module_state *st = PyModule_GetState(m);
    Py_buffer text, stw = {0};
    PyObject *fields_obj, *res = NULL;
    int mfn = 1, utf8 = 0, rc;
    Py_ssize_t max_key = 0;
    const char *dir = NULL;
    pydb_fst *f = NULL;
    pydb_keyrules r;
    pydb_stopwords sw;
    pydb_fst_scratch s;
    fields_arg fa = {0};
    pydb_error e;
    key_list kl = {NULL};

    memset(&sw, 0, sizeof sw);
    memset(&s, 0, sizeof s);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s*O|ipny*z", kwlist, &text,
                                     &fields_obj, &mfn, &utf8, &max_key, &stw,
                                     &dir))
        return NULL;
    if (rules_from(st, &r, utf8, max_key, dir) < 0) goto cleanup;
    if (fields_convert(fields_obj, &fa) < 0) goto cleanup;
    if ((rc = pydb_fst_parse(&f, text.buf, (size_t)text.len, NULL, &e))) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    if (stw.obj && (rc = pydb__stopwords_parse(&sw, &r, stw.buf,
                                               (size_t)stw.len, &e))) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    kl.list = PyList_New(0);
    if (!kl.list) goto cleanup;
    rc = pydb__fst_keys(f, &r, &sw, mfn, fa.v, (uint32_t)fa.n, &s,
                        key_collect, &kl, &e);
    if (rc) {
        if (!PyErr_Occurred()) set_error(st, rc, &e);
        goto cleanup;
    }
    res = Py_NewRef(kl.list);
cleanup:
    Py_XDECREF(kl.list);
    pydb__stopwords_free(&sw);
    pydb__fst_scratch_free(&s);
    pydb_fst_free(f);
    fields_free(&fa);
    PyBuffer_Release(&text);
    if (stw.obj) PyBuffer_Release(&stw);
    return res;
}

PyDoc_STRVAR(fst_format_doc,
"_fst_format(fst, rule, fields, mfn=1)\n--\n\n"
"The output text (bytes) of rule number `rule` (0-based) of FST text\n"
"`fst` for one record: the format evaluated before keys are cut.");

static PyObject *fst_format(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fst", "rule", "fields", "mfn", NULL};
    module_state *st = PyModule_GetState(m);
    Py_buffer text;
    PyObject *fields_obj, *res = NULL;
    Py_ssize_t rule;
    int mfn = 1, rc;
    pydb_fst *f = NULL;
    pydb_fst_scratch s;
    fields_arg fa = {0};
    pydb_error e;

    memset(&s, 0, sizeof s);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s*nO|i", kwlist, &text, &rule,
                                     &fields_obj, &mfn))
        return NULL;
    if (fields_convert(fields_obj, &fa) < 0) goto cleanup;
    if ((rc = pydb_fst_parse(&f, text.buf, (size_t)text.len, NULL, &e)) ||
        (rc = pydb__fst_format(f, (size_t)rule, mfn, fa.v, (uint32_t)fa.n, &s,
                               &e))) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    res = PyBytes_FromStringAndSize((const char *)s.out,
                                    (Py_ssize_t)s.out_len);
cleanup:
    pydb__fst_scratch_free(&s);
    pydb_fst_free(f);
    fields_free(&fa);
    PyBuffer_Release(&text);
    return res;
}

PyDoc_STRVAR(keyrules_doc,
"_keyrules(utf8=False, max_key=0, tables_dir=None)\n--\n\n"
"The key rules in force: (upper: bytes of 256, word: bytes of 256), the\n"
"default CDS/ISIS tables or those of ISISUC.TAB/ISISAC.TAB in tables_dir.");

static PyObject *keyrules(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"utf8", "max_key", "tables_dir", NULL};
    module_state *st = PyModule_GetState(m);
    int utf8 = 0;
    Py_ssize_t max_key = 0;
    const char *dir = NULL;
    pydb_keyrules r;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pnz", kwlist, &utf8,
                                     &max_key, &dir))
        return NULL;
    if (rules_from(st, &r, utf8, max_key, dir) < 0) return NULL;
    return Py_BuildValue("(y#y#)", r.upper, (Py_ssize_t)256, r.word,
                         (Py_ssize_t)256);
}

PyDoc_STRVAR(key_normalize_doc,
"_key_normalize(term, utf8=False, max_key=0, tables_dir=None)\n--\n\n"
"`term` (bytes) in key form (isis-formats.md §5.3).");

static PyObject *key_normalize(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"term", "utf8", "max_key", "tables_dir", NULL};
    module_state *st = PyModule_GetState(m);
    Py_buffer term;
    int utf8 = 0, rc;
    Py_ssize_t max_key = 0;
    const char *dir = NULL;
    pydb_keyrules r;
    pydb_error e;
    PyObject *res = NULL;
    uint8_t *out = NULL;
    size_t ol;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|pnz", kwlist, &term, &utf8,
                                     &max_key, &dir))
        return NULL;
    if (rules_from(st, &r, utf8, max_key, dir) < 0) goto cleanup;
    out = PyMem_Malloc((size_t)term.len * 4 + 16);
    if (!out) {
        PyErr_NoMemory();
        goto cleanup;
    }
    rc = pydb__key_normalize(&r, term.buf, (size_t)term.len, out,
                             (size_t)term.len * 4 + 16, &ol, &e);
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    res = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)ol);
cleanup:
    PyMem_Free(out);
    PyBuffer_Release(&term);
    return res;
}

PyDoc_STRVAR(index_build_doc,
"_index_build(db_path, fst, progress=None, utf8=False, max_key=0,\n"
"             stw=None, tables=True, batch=8192)\n--\n\n"
"Build the native index of the database at db_path (str) from FST text\n"
"`fst` into <base>.pdx/.  The work runs with the GIL released in batches\n"
"of `batch` records; between batches progress(done, total) is called\n"
"(records read so far, max MFN).  Returns the number of records read.\n"
"Raises FSTError, CorruptionError, DiskError, DatabaseNotFoundError.");

static PyObject *index_build(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"db_path", "fst", "progress", "utf8", "max_key",
                             "stw", "tables", "batch", NULL};
    module_state *st = PyModule_GetState(m);
    PyObject *path_obj = NULL, *progress = Py_None, *res = NULL;
    Py_buffer text, stw = {0};
    int utf8 = 0, tables = 1, rc, more = 1;
    Py_ssize_t max_key = 0, batch = 8192;
    pydb_fst *f = NULL;
    pydb_nidx_builder *b = NULL;
    pydb_nidx_options opt;
    pydb_error e;
    int64_t done = 0, total = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&s*|Opnz*pn", kwlist,
                                     PyUnicode_FSConverter, &path_obj, &text,
                                     &progress, &utf8, &max_key, &stw,
                                     &tables, &batch))
        return NULL;
    if (batch < 1) batch = 1;
    if (batch > INT32_MAX) batch = INT32_MAX;
    memset(&opt, 0, sizeof opt);
    opt.utf8 = utf8;
    opt.max_key = max_key > 0 ? (size_t)max_key : 0;
    opt.tables = tables;
    if (stw.obj) {
        opt.stw = stw.buf;
        opt.stw_len = (size_t)stw.len;
    }
    rc = pydb_fst_parse(&f, text.buf, (size_t)text.len, NULL, &e);
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = pydb_nidx_builder_open(&b, PyBytes_AS_STRING(path_obj), f, &opt, &e);
    Py_END_ALLOW_THREADS
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    while (more) {
        Py_BEGIN_ALLOW_THREADS
        rc = pydb_nidx_builder_step(b, (int32_t)batch, &done, &total, &more,
                                    &e);
        Py_END_ALLOW_THREADS
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
    Py_BEGIN_ALLOW_THREADS
    rc = pydb_nidx_builder_finish(b, &e);
    Py_END_ALLOW_THREADS
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    res = PyLong_FromLongLong((long long)done);
cleanup:
    if (b) {
        Py_BEGIN_ALLOW_THREADS
        pydb_nidx_builder_free(b);
        Py_END_ALLOW_THREADS
    }
    pydb_fst_free(f);
    Py_XDECREF(path_obj);
    PyBuffer_Release(&text);
    if (stw.obj) PyBuffer_Release(&stw);
    return res;
}

PyDoc_STRVAR(open_native_doc,
"_open_native_index(db_path)\n--\n\n"
"Open the native index <base>.pdx of the database at db_path as an\n"
"Index handle.  Raises DatabaseNotFoundError when there is none,\n"
"CorruptionError for a damaged manifest or segment.");

static PyObject *open_native(PyObject *m, PyObject *arg)
{
    return index_open_path(PyModule_GetState(m), arg, pydb_native_index_open);
}

PyDoc_STRVAR(attach_native_doc,
"_attach_native_index(db, index)\n--\n\n"
"Make every commit on the writable Database `db` update the native Index\n"
"`index` (opened on the same database) in the same transaction\n"
"(pydb_native_index_attach).  From then on the database holds the index:\n"
"index.close() only marks it closed, and its files are released when the\n"
"database is closed.  Raises ValueError if either is attached already,\n"
"ClosedError if either is closed, UnsupportedError for an index that is\n"
"not native.");

static PyObject *attach_native(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *db_obj, *index_obj;
    DatabaseObject *db;
    IndexObject *io;
    pydb_error e;
    int rc;

    if (!PyArg_ParseTuple(args, "O!O!", st->database_type, &db_obj,
                          st->index_type, &index_obj))
        return NULL;
    db = (DatabaseObject *)db_obj;
    io = (IndexObject *)index_obj;
    if (check_open(st, db) < 0) return NULL;
    if (index_check_open(st, io) < 0) return NULL;
    if (db->hooked_index || io->hooked) {
        PyErr_SetString(PyExc_ValueError,
                        "a native index is attached already");
        return NULL;
    }
    if (db->txn) {
        PyErr_SetString(PyExc_ValueError,
                        "cannot attach an index during a transaction");
        return NULL;
    }
    UNLOCKED(db, rc = pydb_native_index_attach(io->ix, db->db, &e));
    if (rc) return set_error(st, rc, &e);
    io->hooked = 1;
    db->hooked_index = Py_NewRef(index_obj);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(native_hook_doc,
"_native_hook(index, action, changes=None)\n--\n\n"
"Unit-test driver of the native index's commit hook, without a writer:\n"
"action 'prepare' runs prepare() on `changes` — a list of (mfn, fields or\n"
"None, deleted_after) — with pydb_txn_put_file replaced by a recorder;\n"
"'commit' applies the recorded manifest as the write-ahead log would\n"
"(atomic replace) and runs publish(); 'publish' runs publish() only;\n"
"'abort' runs abort() and drops the recorded file.");

static PyObject *native_hook(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *index_obj, *changes = Py_None;
    const char *action;
    pydb_commit_hook h;
    pydb_error e;
    pydb_index *ix;
    int rc;

    if (!PyArg_ParseTuple(args, "O!s|O", st->index_type, &index_obj, &action,
                          &changes))
        return NULL;
    if (index_check_open(st, (IndexObject *)index_obj) < 0) return NULL;
    ix = ((IndexObject *)index_obj)->ix;
    if ((rc = pydb__nidx_hook(ix, &h, &e))) return set_error(st, rc, &e);
    if (strcmp(action, "prepare") == 0) {
        PyObject *fast = PySequence_Fast(changes, "changes must be a list");
        Py_ssize_t n;
        pydb_change *ch;
        fields_arg *fa;
        if (!fast) return NULL;
        n = PySequence_Fast_GET_SIZE(fast);
        ch = PyMem_Calloc(n ? (size_t)n : 1, sizeof *ch);
        fa = PyMem_Calloc(n ? (size_t)n : 1, sizeof *fa);
        rc = 0;
        if (!ch || !fa) {
            PyErr_NoMemory();
            rc = -1;
        }
        for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
            PyObject *fields = NULL;
            int mfn, del;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "iOp",
                                  &mfn, &fields, &del)) {
                rc = -1;
                break;
            }
            ch[i].mfn = mfn;
            ch[i].deleted_after = del;
            if (fields != Py_None) {
                if (fields_convert(fields, &fa[i]) < 0) {
                    rc = -1;
                    break;
                }
                ch[i].after = fa[i].v;
                ch[i].nafter = (uint32_t)fa[i].n;
            }
        }
        if (rc == 0) {
            rc = pydb__nidx_use_test_put(ix, &e);
            if (rc == 0) {
                Py_BEGIN_ALLOW_THREADS
                rc = h.prepare(h.ctx, NULL, ch, (size_t)n, &e);
                Py_END_ALLOW_THREADS
            }
            if (rc) set_error(st, rc, &e);
        }
        for (Py_ssize_t i = 0; fa && i < n; i++) fields_free(&fa[i]);
        PyMem_Free(fa);
        PyMem_Free(ch);
        Py_DECREF(fast);
        if (rc) return NULL;
        Py_RETURN_NONE;
    }
    if (strcmp(action, "commit") == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = pydb__nidx_test_commit_point(ix, &e);
        Py_END_ALLOW_THREADS
        if (rc) return set_error(st, rc, &e);
        h.publish(h.ctx, NULL);
        Py_RETURN_NONE;
    }
    if (strcmp(action, "publish") == 0) {
        h.publish(h.ctx, NULL);
        Py_RETURN_NONE;
    }
    if (strcmp(action, "abort") == 0) {
        h.abort(h.ctx, NULL);
        pydb__nidx_test_drop(ix);
        Py_RETURN_NONE;
    }
    PyErr_Format(PyExc_ValueError, "unknown action %s", action);
    return NULL;
}

/* ---- benchmark helper: enumerate (and decode) entirely in C ---- */
typedef struct {
    uint64_t terms;
    uint8_t *arena;
    size_t used, size;
    size_t *off, *len;
    size_t n, cap;
    int keep, oom;
} scan_ctx;

static int scan_term(void *ctx, const uint8_t *key, size_t len, uint64_t c)
{
    scan_ctx *s = ctx;
    s->terms++;
    if (!s->keep) return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        size_t *o = realloc(s->off, cap * sizeof *o);
        if (!o) return s->oom = 1;
        s->off = o;
        size_t *l = realloc(s->len, cap * sizeof *l);
        if (!l) return s->oom = 1;
        s->len = l;
        s->cap = cap;
    }
    if (s->used + len > s->size) {
        size_t size = (s->size + len) * 2 + 4096;
        uint8_t *a = realloc(s->arena, size);
        if (!a) return s->oom = 1;
        s->arena = a;
        s->size = size;
    }
    memcpy(s->arena + s->used, key, len);
    s->off[s->n] = s->used;
    s->len[s->n++] = len;
    s->used += len;
    return 0;
}

PyDoc_STRVAR(bench_scan_doc,
"_bench_scan(index, prefix=b'', postings=False)\n--\n\n"
"Benchmark helper: enumerate every key starting with `prefix` in C (GIL\n"
"released, no Python objects); with postings=True also decode the\n"
"postings of every key.  Returns (terms, postings).");

static PyObject *bench_scan(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *index_obj;
    Py_buffer prefix = {0};
    int postings = 0, rc;
    scan_ctx s;
    pydb_error e;
    uint64_t nposts = 0;
    IndexObject *io;

    memset(&s, 0, sizeof s);
    if (!PyArg_ParseTuple(args, "O!|y*p", st->index_type, &index_obj, &prefix,
                          &postings))
        return NULL;
    io = (IndexObject *)index_obj;
    if (index_check_open(st, io) < 0) {
        PyBuffer_Release(&prefix);
        return NULL;
    }
    s.keep = postings;
    UNLOCKED(io, {
        rc = pydb_index_terms(io->ix, prefix.buf, (size_t)prefix.len, NULL, 0,
                              scan_term, &s, &e);
        if (rc == 0 && postings && !s.oom) {
            pydb_postings p = {0};
            for (size_t i = 0; i < s.n && rc == 0; i++) {
                p.n = 0;
                rc = pydb_index_postings(&p, io->ix, s.arena + s.off[i],
                                         s.len[i], &e);
                nposts += p.n;
            }
            pydb_postings_free(&p);
        }
    });
    free(s.arena);
    free(s.off);
    free(s.len);
    PyBuffer_Release(&prefix);
    if (s.oom) return PyErr_NoMemory();
    if (rc) return set_error(st, rc, &e);
    return Py_BuildValue("(KK)", (unsigned long long)s.terms,
                         (unsigned long long)nposts);
}

static PyMethodDef native_methods[] = {
    {"_bench_scan", (PyCFunction)bench_scan, METH_VARARGS, bench_scan_doc},
    {"_fst_parse", (PyCFunction)(void (*)(void))fst_parse,
     METH_VARARGS | METH_KEYWORDS, fst_parse_doc},
    {"_fst_keys", (PyCFunction)(void (*)(void))fst_keys,
     METH_VARARGS | METH_KEYWORDS, fst_keys_doc},
    {"_fst_format", (PyCFunction)(void (*)(void))fst_format,
     METH_VARARGS | METH_KEYWORDS, fst_format_doc},
    {"_keyrules", (PyCFunction)(void (*)(void))keyrules,
     METH_VARARGS | METH_KEYWORDS, keyrules_doc},
    {"_key_normalize", (PyCFunction)(void (*)(void))key_normalize,
     METH_VARARGS | METH_KEYWORDS, key_normalize_doc},
    {"_index_build", (PyCFunction)(void (*)(void))index_build,
     METH_VARARGS | METH_KEYWORDS, index_build_doc},
    {"_open_native_index", (PyCFunction)open_native, METH_O,
     open_native_doc},
    {"_attach_native_index", (PyCFunction)attach_native, METH_VARARGS,
     attach_native_doc},
    {"_native_hook", (PyCFunction)native_hook, METH_VARARGS, native_hook_doc},
    {NULL}};

int native_exec(PyObject *m, module_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, native_methods);
}
