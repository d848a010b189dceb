/*
 * _pydb_testing.c - TEST-ONLY hooks.  Nothing here is API; nothing in the
 * pydb package calls it.  It ships in the module so that the test suite
 * runs against the normal build (CI builds with a plain `pip install .`),
 * but it lives behind one door: the submodule object pydb._pydb._testing,
 * not in pydb._pydb's own namespace.
 *
 * Some of these hooks change process-wide state of the core and are
 * dangerous outside a test process:
 *   fail_io(n, errno, short, crash, sticky, pause)
 *                                    make the n-th write-side file operation
 *                                    of the calling thread (other threads:
 *                                    not counted, e.g. a collector)
 *                                    fail; crash=True calls _exit(137);
 *                                    pause=usec: it sleeps before failing
 *   io_count(), io_fired()           what fail_io() counted / fired
 *   io_syncs()                       fsyncs + fdatasyncs it counted
 *   crc32c(data, offset, portable, seed)  the core's CRC-32C (or its
 *                                    table form), continued from seed
 *   set_read_delay(usec)             make every core pread sleep first
 *   set_nowait_postings(n)           postings a search reads with the GIL
 *                                    held before it releases it
 *   set_boot_unknown(flag)           the process cannot tell the boot:
 *                                    its headers keep no log length
 *   set_inline_max(n)                the largest native index segment
 *                                    that goes inline into the MANIFEST
 *   commit_hook(db, path)            install a commit hook that writes a
 *   hook_counts()                    file in each transaction (+ counters;
 *                                    it refuses a record with a field of
 *                                    tag 9999)
 *   group_state(db)                  (queued, leading) of db's group
 *                                    commit queue
 * Others drive internals directly, without a database or a writer:
 *   native_hook(index, action, changes)  the native index's commit hook
 *   postings_reserve(n)                  a list's room, from a kept buffer
 *   fst_keys(), fst_format()             FST key extraction / formatting
 *   keyrules(), key_normalize()          the key rules and key form
 *   bench_scan(index, prefix, postings)  enumerate keys in C (benchmarks)
 *
 * They use the core's internal functions (pydb__*) declared in
 * csrc/pydb_test.h, the core's one test-only header; no other file of the
 * binding includes it (they include pydb.h alone).
 */
#include "_pydb_database.h"
#include "_pydb_index.h"
#include "_pydb_record.h"
#include "pydb_test.h"  /* the core's test-only header: I/O hooks, key
                           rules, stop words, FST keys, native hook */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- I/O faults */

static PyObject *mod_test_fail_io(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"n", "errno", "short", "crash", "sticky",
                             "pause", NULL};
    long n;
    int eno = EIO, shortw = 0, crash = 0, sticky = 0;
    int pause = 0;
    (void)m;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "l|ipppi", kwlist, &n, &eno,
                                     &shortw, &crash, &sticky, &pause))
        return NULL;
    if (pause < 0) {
        PyErr_SetString(PyExc_ValueError, "pause must be >= 0");
        return NULL;
    }
    pydb__test_fail_io(n, eno, crash ? 2 : sticky ? 3 : shortw);
    pydb__test_fault_pause((unsigned)pause);
    Py_RETURN_NONE;
}

static PyObject *mod_test_io_count(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLong(pydb__test_io_count());
}

static PyObject *mod_test_io_syncs(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLong(pydb__test_io_syncs());
}

static PyObject *mod_test_io_fired(PyObject *m, PyObject *unused)
{
    const char *s = pydb__test_io_fired();
    (void)m;
    (void)unused;
    if (!s) Py_RETURN_NONE;
    return PyUnicode_FromString(s);
}

static PyObject *mod_test_inline_max(PyObject *m, PyObject *arg)
{
    size_t n = PyLong_AsSize_t(arg);
    (void)m;
    if (n == (size_t)-1 && PyErr_Occurred()) return NULL;
    return PyLong_FromSize_t(pydb__test_set_inline_max(n));
}

static PyObject *mod_test_boot_unknown(PyObject *m, PyObject *arg)
{
    int unknown = PyObject_IsTrue(arg);
    (void)m;
    if (unknown < 0) return NULL;
    return PyBool_FromLong(pydb__test_set_boot_unknown(unknown));
}

static PyObject *mod_test_read_delay(PyObject *m, PyObject *arg)
{
    unsigned long us = PyLong_AsUnsignedLong(arg);
    (void)m;
    if (us == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    pydb__test_set_read_delay((unsigned)us);
    Py_RETURN_NONE;
}

static PyObject *mod_test_nowait_postings(PyObject *m, PyObject *arg)
{
    size_t n = PyLong_AsSize_t(arg);
    (void)m;
    if (n == (size_t)-1 && PyErr_Occurred()) return NULL;
    return PyLong_FromSize_t(pydb__test_set_nowait_postings(n));
}

/* ---------------------------------------------- a test commit hook */

/* ---- test hook: a commit hook that writes a summary of each
 * transaction's changes into a whole file (pydb_txn_put_file), so that the
 * hook interface and whole-file log entries can be tested from Python. */

typedef struct {
    char path[1024];
    long prepared, published, aborted;
} test_hook_ctx;

static test_hook_ctx the_test_hook;   /* tests only */

/* A transaction with a record that has a field of this tag fails in
 * prepare (PYDB_ETOOBIG): a commit hook that refuses one record. */
#define TEST_HOOK_REFUSED_TAG 9999

static int test_hook_prepare(void *ctx, pydb_txn *t, const pydb_change *c,
                             size_t n, pydb_error *err)
{
    test_hook_ctx *h = ctx;
    size_t cap = 64 + n * 64, len = 0;
    char *buf = malloc(cap);
    int rc;
    if (!buf) return pydb_error_set(err, PYDB_ENOMEM, "", -1, "no memory");
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; c[i].after && j < c[i].nafter; j++)
            if (c[i].after[j].tag == TEST_HOOK_REFUSED_TAG) {
                free(buf);
                return pydb_error_set(err, PYDB_ETOOBIG, "", -1,
                                      "the test hook refuses MFN %d: it "
                                      "has a field with tag %d",
                                      (int)c[i].mfn, TEST_HOOK_REFUSED_TAG);
            }
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%d %d %d %d\n",
                                (int)c[i].mfn,
                                c[i].before ? (int)c[i].before->nfields : -1,
                                c[i].after ? (int)c[i].nafter : -1,
                                c[i].deleted_after);
    rc = pydb_txn_put_file(t, h->path, buf, len, err);
    free(buf);
    if (rc == PYDB_OK) h->prepared++;
    return rc;
}

static void test_hook_publish(void *ctx, pydb_txn *t)
{
    (void)t;
    ((test_hook_ctx *)ctx)->published++;
}

static void test_hook_abort(void *ctx, pydb_txn *t)
{
    (void)t;
    ((test_hook_ctx *)ctx)->aborted++;
}

static PyObject *mod_test_commit_hook(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *dbo, *pb = NULL;
    pydb_commit_hook hook = {test_hook_prepare, test_hook_publish,
                             test_hook_abort, &the_test_hook, NULL, NULL};
    pydb_error e;
    int rc;
    if (!PyArg_ParseTuple(args, "O!O&", st->database_type, &dbo,
                          PyUnicode_FSConverter, &pb))
        return NULL;
    if (database_check_open(st, (DatabaseObject *)dbo) < 0) {
        Py_DECREF(pb);
        return NULL;
    }
    memset(&the_test_hook, 0, sizeof the_test_hook);
    snprintf(the_test_hook.path, sizeof the_test_hook.path, "%s",
             PyBytes_AS_STRING(pb));
    Py_DECREF(pb);
    rc = pydb_set_commit_hook(((DatabaseObject *)dbo)->db, &hook, &e);
    if (rc) return set_error(st, rc, &e);
    Py_RETURN_NONE;
}

static PyObject *mod_test_group_state(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *dbo;
    int queued, leading;
    if (!PyArg_ParseTuple(args, "O!", st->database_type, &dbo)) return NULL;
    if (database_check_open(st, (DatabaseObject *)dbo) < 0) return NULL;
    pydb__test_group_state(((DatabaseObject *)dbo)->db, &queued, &leading);
    return Py_BuildValue("(ii)", queued, leading);
}

static PyObject *mod_test_hook_counts(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return Py_BuildValue("(lll)", the_test_hook.prepared,
                         the_test_hook.published, the_test_hook.aborted);
}

/* ------------------------------------------- FST and key extraction */

/* ---- key rules from keyword arguments ---- */
static int rules_from(module_state *st, pydb_keyrules *r, int utf8,
                      Py_ssize_t max_key, const char *dir)
{
    pydb_error e;
    int found, rc;
    if (max_key < 0) max_key = 0;
    pydb__keyrules_default(r, utf8, (size_t)max_key);
    if (dir) {
        UNLOCKED(NULL, NULL,
                 rc = pydb__keyrules_load_dir(r, dir, &found, &e));
        if (rc) {
            set_error(st, rc, &e);
            return -1;
        }
    }
    return 0;
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
"fst_keys(fst, fields, mfn=1, utf8=False, max_key=0, stw=b'',\n"
"          tables_dir=None)\n--\n\n"
"The keys FST text `fst` extracts from one record `fields` (sequence of\n"
"(tag, bytes|str)): a list of (key: bytes, mfn, tag, occ, cnt) in\n"
"extraction order (docs/isis-formats.md §5.2).  `stw`: stop-word text;\n"
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
    fieldbuf fa = FIELDBUF_INIT;
    pydb_error e;
    key_list kl = {NULL};

    memset(&sw, 0, sizeof sw);
    memset(&s, 0, sizeof s);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s*O|ipny*z", kwlist, &text,
                                     &fields_obj, &mfn, &utf8, &max_key, &stw,
                                     &dir))
        return NULL;
    if (rules_from(st, &r, utf8, max_key, dir) < 0) goto cleanup;
    if (fields_add(st, &fa, fields_obj, "utf-8", "strict") < 0) goto cleanup;
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
"fst_format(fst, rule, fields, mfn=1)\n--\n\n"
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
    fieldbuf fa = FIELDBUF_INIT;
    pydb_error e;

    memset(&s, 0, sizeof s);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s*nO|i", kwlist, &text, &rule,
                                     &fields_obj, &mfn))
        return NULL;
    if (fields_add(st, &fa, fields_obj, "utf-8", "strict") < 0) goto cleanup;
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
"keyrules(utf8=False, max_key=0, tables_dir=None)\n--\n\n"
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
"key_normalize(term, utf8=False, max_key=0, tables_dir=None)\n--\n\n"
"`term` (bytes) in key form (docs/isis-formats.md §5.3).");

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

/* ----------------------------------------------- native index hook */

PyDoc_STRVAR(native_hook_doc,
"native_hook(index, action, changes=None, /)\n--\n\n"
"Unit-test driver of the native index's commit hook, without a writer:\n"
"action 'prepare' runs prepare() on `changes` — a list of (mfn, fields or\n"
"None, deleted_after) — with pydb_txn_put_file replaced by a recorder;\n"
"'commit' applies the recorded manifest as the write-ahead log would\n"
"(atomic replace) and runs publish(); 'publish' runs publish() only;\n"
"'abort' runs abort() and drops the recorded file.");

static PyObject *native_hook(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    static const pydb_field no_fields = {0};  /* `after` of an empty record */
    module_state *st = PyModule_GetState(m);
    PyObject *index_obj, *changes = Py_None;
    const char *action;
    pydb_commit_hook h;
    pydb_error e;
    IndexObject *io;
    pydb_index *ix;
    int rc;

    if (!PyArg_ParseTuple(args, "O!s|O", st->index_type, &index_obj, &action,
                          &changes))
        return NULL;
    io = (IndexObject *)index_obj;
    if (index_check_open(st, io) < 0) return NULL;
    ix = io->ix;
    if ((rc = pydb__nidx_hook(ix, &h, &e))) return set_error(st, rc, &e);
    if (strcmp(action, "prepare") == 0) {
        PyObject *fast = PySequence_Fast(changes, "changes must be a list");
        Py_ssize_t n;
        pydb_change *ch;
        size_t *first;
        fieldbuf fa = FIELDBUF_INIT;   /* the fields of all changes */
        if (!fast) return NULL;
        n = PySequence_Fast_GET_SIZE(fast);
        ch = PyMem_Calloc(n ? (size_t)n : 1, sizeof *ch);
        first = PyMem_Calloc(n ? (size_t)n : 1, sizeof *first);
        rc = 0;
        if (!ch || !first) {
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
            first[i] = SIZE_MAX;   /* no new version */
            if (fields != Py_None) {
                first[i] = fa.n;
                if (fields_add(st, &fa, fields, "utf-8", "strict") < 0) {
                    rc = -1;
                    break;
                }
                ch[i].nafter = (uint32_t)(fa.n - first[i]);
            }
        }
        /* fa.v may have moved while it grew: point into it now. */
        for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
            if (first[i] != SIZE_MAX)
                ch[i].after = fa.v ? fa.v + first[i] : &no_fields;
        /* Converting ran Python code, which could have closed the index. */
        if (rc == 0 && index_check_open(st, io) < 0) rc = -1;
        if (rc == 0) {
            rc = pydb__nidx_use_test_put(ix, &e);
            if (rc == 0)
                UNLOCKED(&io->guard, NULL,
                         rc = h.prepare(h.ctx, NULL, ch, (size_t)n, &e));
            if (rc) set_error(st, rc, &e);
        }
        fields_free(&fa);
        PyMem_Free(first);
        PyMem_Free(ch);
        Py_DECREF(fast);
        if (rc) return NULL;
        Py_RETURN_NONE;
    }
    if (strcmp(action, "commit") == 0) {
        UNLOCKED(&io->guard, NULL, rc = pydb__nidx_test_commit_point(ix, &e));
        if (rc) return set_error(st, rc, &e);
        h.publish(h.ctx, NULL);
        pydb__nidx_test_publish_state(ix);
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

/* -------------------------------------------------- benchmark scan */

/* Enumerate (and decode) entirely in C, for benchmarks. */
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
"bench_scan(index, prefix=b'', postings=False, /)\n--\n\n"
"Benchmark helper: enumerate every key starting with `prefix` in C (GIL\n"
"released, no Python objects); with postings=True also decode the\n"
"postings of every key.  Returns (terms, postings).");

static PyObject *bench_scan(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
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
    UNLOCKED(&io->guard, NULL, {
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

/* ------------------------------------- posting buffers a thread keeps */

static PyObject *postings_reserve(PyObject *m, PyObject *arg)
{
    module_state *st = PyModule_GetState(m);
    pydb_error e = {0};
    size_t n = PyLong_AsSize_t(arg), cap = 0;
    int rc;
    if (n == (size_t)-1 && PyErr_Occurred()) return NULL;
    rc = pydb__test_postings_reserve(n, &cap, &e);
    if (rc) return set_error(st, rc, &e);
    return PyLong_FromSize_t(cap);
}

/* ---------------------------------------------- mmap residency (resident.c) */

int pydb__test_resident(pydb_db *db, int xrf, int64_t off, int64_t n);

PyDoc_STRVAR(resident_doc,
"resident(db, xrf, offset, length, /)\n--\n\n"
"What a cache-hit read of `db` (io=\"mmap\") would decide for `length`\n"
"bytes at byte `offset` of its .mst (xrf False) or .xrf (xrf True): True\n"
"if every page is known to be in the page cache (the read keeps the GIL),\n"
"False if not (it releases the GIL), None if the bytes are not mapped.");

static PyObject *resident(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *dbo;
    DatabaseObject *d;
    int xrf, got;
    long long off, n;

    if (!PyArg_ParseTuple(args, "O!pLL", st->database_type, &dbo, &xrf, &off, &n))
        return NULL;
    d = (DatabaseObject *)dbo;
    if (database_check_open(st, d) < 0) return NULL;
    got = pydb__test_resident(d->db, xrf, (int64_t)off, (int64_t)n);
    if (got < 0) Py_RETURN_NONE;
    return PyBool_FromLong(got);
}

/* ----------------------------------------------------------- checksum */

static PyObject *mod_test_crc32c(PyObject *m, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t off = 0;
    int portable = 0;
    unsigned int seed = 0;
    uint32_t crc;
    (void)m;
    if (!PyArg_ParseTuple(args, "y*|npI", &b, &off, &portable, &seed))
        return NULL;
    if (off < 0 || off > b.len) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "offset outside the data");
        return NULL;
    }
    crc = pydb__test_crc32c(seed, (char *)b.buf + off, (size_t)(b.len - off),
                            portable);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}

/* ------------------------------------------------------------- records */

static PyObject *record_codec_hook(PyObject *m, PyObject *rec)
{
    return record_test_codec(PyModule_GetState(m), rec);
}

static PyObject *field_free_list(PyObject *m, PyObject *args)
{
    int clear = 0;
    if (!PyArg_ParseTuple(args, "|p", &clear)) return NULL;
    return record_test_free_list(PyModule_GetState(m), clear);
}

static PyObject *records_kept(PyObject *m, PyObject *unused)
{
    (void)unused;
    return record_test_records_kept(PyModule_GetState(m));
}

static PyObject *record_spares(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return record_test_spares();
}

static PyObject *fields_seen_slot(PyObject *m, PyObject *args)
{
    unsigned int tag;
    PyObject *value;
    (void)m;
    if (!PyArg_ParseTuple(args, "IS", &tag, &value)) return NULL;
    if (tag < 1 || tag > 65535) {
        PyErr_SetString(PyExc_ValueError, "a tag is in 1..65535");
        return NULL;
    }
    return record_test_seen_slot(tag, value);
}

/* ------------------------------------------------------------- the door */

/* index garbage (issue 11, helper "idx"): defined at the end of the file */
static PyObject *index_collect(PyObject *m, PyObject *args);
static PyObject *index_garbage(PyObject *m, PyObject *args);

static PyMethodDef testing_functions[] = {
    {"fail_io", (PyCFunction)(void (*)(void))mod_test_fail_io,
     METH_VARARGS | METH_KEYWORDS,
     "fail_io(n, errno=5, short=False, crash=False, sticky=False, "
     "pause=0)\n--\n\n"
     "Make the n-th write-side file operation of the core (pwrite, fsync, "
     "fdatasync, ftruncate, rename, unlink, exchange) fail with `errno`; with "
     "`short`, the n-th pwrite writes half and the next operation fails; "
     "with `crash`, the process exits with status 137 just before the n-th "
     "operation (a crash point); with `sticky`, every operation from the "
     "n-th on fails (a full disk); with `pause` (microseconds), the failing "
     "operation sleeps that long, once io_fired() names it, before it "
     "returns.  errno defaults to EIO.  n=0 turns it off, n<0 only counts.  "
     "Process-wide."},
    {"crc32c", mod_test_crc32c, METH_VARARGS,
     "crc32c(data, offset=0, portable=False, seed=0, /)\n--\n\nCRC-32C "
     "of data[offset:] as the core computes it (with `portable`, by its "
     "table, whatever the CPU has), continuing from `seed` (the CRC of "
     "the bytes before)."},
    {"io_count", mod_test_io_count, METH_NOARGS,
     "io_count()\n--\n\nWrite-side operations counted since fail_io()."},
    {"io_syncs", mod_test_io_syncs, METH_NOARGS,
     "io_syncs()\n--\n\nfsync and fdatasync calls among the operations "
     "counted since fail_io()."},
    {"io_fired", mod_test_io_fired, METH_NOARGS,
     "io_fired()\n--\n\nThe operation that was made to fail, or None."},
    {"set_read_delay", mod_test_read_delay, METH_O,
     "set_read_delay(usec, /)\n--\n\nMake every pread of the core sleep "
     "`usec` microseconds first (0 turns it off).  Process-wide."},
    {"set_boot_unknown", mod_test_boot_unknown, METH_O,
     "set_boot_unknown(flag, /)\n--\n\nWith flag true, this process cannot "
     "tell the kernel's boot (as where /proc hides boot_id): its commit "
     "headers keep no log length, so its commits empty the log as in files "
     "mode.  Returns the previous setting.  Process-wide."},
    {"set_inline_max", mod_test_inline_max, METH_O,
     "set_inline_max(n, /)\n--\n\nA native index segment of at most `n` "
     "bytes goes inline into the MANIFEST (default 4096; 0: never, every "
     "segment a file); returns the previous limit.  Process-wide."},
    {"set_nowait_postings", mod_test_nowait_postings, METH_O,
     "set_nowait_postings(n, /)\n--\n\nA search gives the GIL up once it "
     "would read more than `n` postings (default 65536); returns the "
     "previous limit.  Process-wide."},
    {"commit_hook", mod_test_commit_hook, METH_VARARGS,
     "commit_hook(db, path, /)\n--\n\nInstall on `db` a commit hook that "
     "writes one line 'mfn nbefore nafter deleted' per change into the file "
     "`path` as part of each transaction."},
    {"hook_counts", mod_test_hook_counts, METH_NOARGS,
     "hook_counts()\n--\n\n(prepared, published, aborted) of the "
     "commit_hook() hook."},
    {"group_state", mod_test_group_state, METH_VARARGS,
     "group_state(db, /)\n--\n\n(queued, leading): requests waiting in "
     "db's group commit queue, and 1 while a group is being committed."},
    {"native_hook", (PyCFunction)native_hook, METH_VARARGS, native_hook_doc},
    {"postings_reserve", postings_reserve, METH_O,
     "postings_reserve(n, /)\n--\n\nReserve room for `n` postings in a new "
     "list as a search does (a buffer this thread kept first), write all "
     "of them and give the list back; returns the room the buffer had "
     "(postings)."},
    {"fst_keys", (PyCFunction)(void (*)(void))fst_keys,
     METH_VARARGS | METH_KEYWORDS, fst_keys_doc},
    {"fst_format", (PyCFunction)(void (*)(void))fst_format,
     METH_VARARGS | METH_KEYWORDS, fst_format_doc},
    {"keyrules", (PyCFunction)(void (*)(void))keyrules,
     METH_VARARGS | METH_KEYWORDS, keyrules_doc},
    {"key_normalize", (PyCFunction)(void (*)(void))key_normalize,
     METH_VARARGS | METH_KEYWORDS, key_normalize_doc},
    {"bench_scan", (PyCFunction)bench_scan, METH_VARARGS, bench_scan_doc},
    {"resident", (PyCFunction)resident, METH_VARARGS, resident_doc},
    {"record_codec", record_codec_hook, METH_O,
     "record_codec($module, rec, /)\n--\n\nThe decoder rec's values take: (\"utf-8\" | "
     "\"latin-1\" | \"ascii\" | \"charmap\" | \"other\", whether ASCII bytes "
     "are copied without it)."},
    {"field_free_list", field_free_list, METH_VARARGS,
     "field_free_list($module, clear=False, /)\n--\n\n(Fields kept for reuse, whether the "
     "list serves this module's Field type); with clear, after the module's "
     "clear of the list (record_clear), as at the interpreter's exit."},
    {"records_kept", records_kept, METH_NOARGS,
     "records_kept($module, /)\n--\n\n(Records kept for reuse, whether "
     "the list serves the module's record class of the moment)."},
    {"record_spares", record_spares, METH_NOARGS,
     "record_spares($module, /)\n--\n\nThe capacities (bytes) of the freed "
     "record blocks kept for the next reads."},
    {"fields_seen_slot", fields_seen_slot, METH_VARARGS,
     "fields_seen_slot($module, tag, value, /)\n--\n\nThe slot of a "
     "codec's table of Fields seen that a field (tag, value bytes) takes "
     "(0..1023), or None for a value of more than 16 bytes, which is not "
     "kept."},
    {"index_collect", (PyCFunction)index_collect, METH_VARARGS,
     "index_collect(db, index, budget, idle=True, offer=False, /)\n--\n\n"
     "One call of the native index's collect(ctx, db, {budget, idle, 0 ms, "
     "offer}, &more) (csrc/nidx_gc.c; idle: merge everything, else only "
     "what is due; offer: a finished small tail merge waits for the next "
     "commit to publish it, as the collector thread's do) on the "
     "writable Database `db` and its attached Index handle `index`: True "
     "when more garbage may be collectable (or the writer lock was busy)."},
    {"index_garbage", (PyCFunction)index_garbage, METH_VARARGS,
     "index_garbage(db, index, /)\n--\n\nThe native index's garbage() "
     "figures (pydb_index_stat): a dict with segments, terms, postings, "
     "dead_postings, tombstones, bytes, files, unused_files, "
     "unused_bytes."},
    {NULL}};

PyDoc_STRVAR(testing_doc,
"Test and benchmark hooks of pydb._pydb -- NOT API, for tests/ and\n"
"benchmarks/ only.  Some change process-wide state of the core (fail_io\n"
"can make the process exit with status 137).  See pydb/_pydb_testing.c.");

/* Add the submodule object `_testing` to `m`.  Its functions are bound to
 * `m` (their `self` is the main module, whose state they use); their
 * __module__ is "pydb._pydb._testing".  It is an attribute of pydb._pydb,
 * not a package member: reach it as pydb._pydb._testing. */
int testing_compact_exec(PyObject *m);   /* at the end of this file */

int testing_exec(PyObject *m, module_state *st)
{
    PyObject *sub, *name;
    int rc = -1;
    (void)st;
    sub = PyModule_New("pydb._pydb._testing");
    if (!sub) return -1;
    name = PyUnicode_FromString("pydb._pydb._testing");
    if (!name || PyModule_SetDocString(sub, testing_doc) < 0) goto done;
    for (PyMethodDef *d = testing_functions; d->ml_name; d++) {
        PyObject *f = PyCFunction_NewEx(d, m, name);
        int added = f ? PyModule_AddObjectRef(sub, d->ml_name, f) : -1;
        Py_XDECREF(f);
        if (added < 0) goto done;
    }
    rc = PyModule_AddObjectRef(m, "_testing", sub);
    if (rc == 0) rc = testing_compact_exec(m);
done:
    Py_XDECREF(name);
    Py_DECREF(sub);
    return rc;
}

/* ------------------------------------------- native index garbage (idx)
 * Test entry points of the native index's collect() and garbage()
 * (csrc/nidx_gc.c), until Database.collect()/stat() drive them: they
 * call the commit hook's callbacks directly, as the collector would. */

static int index_hook_args(PyObject *m, PyObject *args, DatabaseObject **db,
                           IndexObject **io, int *budget, int *idle,
                           int *offer, pydb_commit_hook *h)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *dbo, *ixo;
    pydb_error e;
    int rc;
    if (budget) {
        if (!PyArg_ParseTuple(args, "O!O!i|pp", st->database_type, &dbo,
                              st->index_type, &ixo, budget, idle, offer))
            return -1;
    } else if (!PyArg_ParseTuple(args, "O!O!", st->database_type, &dbo,
                                 st->index_type, &ixo)) {
        return -1;
    }
    *db = (DatabaseObject *)dbo;
    *io = (IndexObject *)ixo;
    if (database_check_open(st, *db) < 0 || index_check_open(st, *io) < 0)
        return -1;
    rc = pydb__nidx_hook((*io)->ix, h, &e);
    if (rc) {
        set_error(st, rc, &e);
        return -1;
    }
    return 0;
}

static PyObject *index_collect(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    DatabaseObject *db;
    IndexObject *io;
    pydb_commit_hook h;
    pydb_error e;
    pydb_gc_report rep;
    int budget, idle = 1, offer = 0, more = 0, rc;
    memset(&rep, 0, sizeof rep);
    if (index_hook_args(m, args, &db, &io, &budget, &idle, &offer, &h) < 0)
        return NULL;
    pydb_gc_step how = {budget, idle, 0, offer};
    UNLOCKED(&db->guard, &io->guard,
             rc = h.collect(h.ctx, db->db, &how, &more, &rep, &e));
    if (rc) return set_error(st, rc, &e);
    return PyBool_FromLong(more);
}

static PyObject *index_garbage(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    DatabaseObject *db;
    IndexObject *io;
    pydb_commit_hook h;
    pydb_index_stat s;
    pydb_error e;
    int rc;
    if (index_hook_args(m, args, &db, &io, NULL, NULL, NULL, &h) < 0)
        return NULL;
    memset(&s, 0, sizeof s);
    UNLOCKED(&db->guard, &io->guard, rc = h.garbage(h.ctx, db->db, &s, &e));
    if (rc) return set_error(st, rc, &e);
    return Py_BuildValue(
        "{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "segments",
        (long long)s.segments, "terms", (long long)s.terms, "postings",
        (long long)s.postings, "dead_postings", (long long)s.dead_postings,
        "tombstones", (long long)s.tombstones, "bytes", (long long)s.bytes,
        "files", (long long)s.files, "unused_files",
        (long long)s.unused_files, "unused_bytes", (long long)s.unused_bytes);
}

/* ------------------------------------------ compaction (helper "mst") */
/* A separate test entry point, kept apart from the rest of this file
 * (issue 11): run a whole compaction job of the master file on `db`
 * (csrc/compact.c), `budget` records per step, until the gc helper's
 * Database.collect() drives it.  Exposed as pydb._pydb._testing.compact
 * (its stub: class _Testing in pydb/_pydb.pyi). */
int pydb__test_compact(pydb_db *db, int budget, int64_t out[3],
                       pydb_error *err);

static PyObject *test_compact(PyObject *m, PyObject *args)
{
    PIN_SCOPE;
    module_state *st = PyModule_GetState(m);
    PyObject *dbo;
    DatabaseObject *d;
    int budget = 64, rc;
    int64_t out[3] = {0, 0, 0};
    pydb_error e;
    if (!PyArg_ParseTuple(args, "O!|i", st->database_type, &dbo, &budget))
        return NULL;
    d = (DatabaseObject *)dbo;
    if (database_check_open(st, d) < 0) return NULL;
    UNLOCKED(&d->guard, NULL,
             rc = pydb__test_compact(d->db, budget, out, &e));
    if (rc) return set_error(st, rc, &e);
    return Py_BuildValue("(LLL)", (long long)out[0], (long long)out[1],
                         (long long)out[2]);
}

static PyMethodDef compact_test_def = {
    "compact", test_compact, METH_VARARGS,
    "compact(db, budget=64, /)\n--\n\nRun a whole compaction of the master "
    "file of `db` (budget records per step); returns (versions, bytes, "
    "compactions) reclaimed."};

int testing_compact_exec(PyObject *m)
{
    PyObject *name = PyUnicode_FromString("pydb._pydb._testing");
    PyObject *f = name ? PyCFunction_NewEx(&compact_test_def, m, name) : NULL;
    PyObject *sub = PyObject_GetAttrString(m, "_testing");
    int rc = -1;
    if (f && sub && PyObject_SetAttrString(sub, "compact", f) == 0) rc = 0;
    Py_XDECREF(sub);
    Py_XDECREF(f);
    Py_XDECREF(name);
    return rc;
}
