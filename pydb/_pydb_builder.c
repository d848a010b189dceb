/*
 * _pydb_builder.c - the bulk builder (pydb_builder, csrc/build.c) for
 * Python: _build(), which pydb.iso2709 and the tests use to write a new
 * database in one pass, without the write-ahead log; and _mkxrf(), a new
 * XRF from a scan of a master file (csrc/mkxrf.c; pydb.rebuild_xrf).
 *
 * Records are converted by fields_add() (_pydb_record.c) in batches of
 * BUILD_BATCH with the GIL held, then written with it released; the batch
 * buffer holds the values until then.  Values are stored bytes: the
 * builder has no encoding, so a str value is a TypeError.
 */
#include "_pydb_record.h"

#define BUILD_BATCH 256   /* records handed to the core per GIL release */

/* One record of a batch: what the core is asked to do with it. */
typedef struct {
    int skip;          /* MFN left out (physically deleted)               */
    int deleted;       /* store logically deleted                          */
    size_t first, nf;  /* its fields in the batch's field buffer           */
} build_op;

/* Run a batch of records through the builder (inside UNLOCKED: plain C);
 * returns the first error, PYDB_OK otherwise. */
static int build_batch(pydb_builder *b, const build_op *ops, size_t n,
                       const pydb_field *fields, pydb_error *e)
{
    int rc = PYDB_OK;
    for (size_t i = 0; i < n && rc == PYDB_OK; i++) {
        if (ops[i].skip) {
            rc = pydb_builder_skip(b, e);
            continue;
        }
        rc = pydb_builder_add(b, fields + ops[i].first, (uint32_t)ops[i].nf, e);
        if (rc == PYDB_OK && ops[i].deleted) rc = pydb_builder_delete_last(b, e);
    }
    return rc;
}

/* The layout code of `name`, or -1 with ValueError set. */
static int layout_arg(const char *name)
{
    int layout = pydb_layout_from_name(name);
    if (layout < 0)
        PyErr_Format(PyExc_ValueError, "unknown layout '%s' (isis-packed, "
                     "isis-aligned, ffi-packed, ffi-aligned)", name);
    return layout;
}

static PyObject *mod_record_size(PyObject *m, PyObject *args)
{
    /* _record_size(layout, mstxl, fields, mfn=0): pydb_record_size() on
     * fields taken by the rule of fields_add() (values as bytes). */
    module_state *st = PyModule_GetState(m);
    PyObject *fields;
    fieldbuf fb = FIELDBUF_INIT;
    const char *layout_name;
    int mstxl, layout, mfn = 0, rc;
    int64_t mfrl = 0;
    pydb_error e;

    if (!PyArg_ParseTuple(args, "siO|i", &layout_name, &mstxl, &fields, &mfn))
        return NULL;
    layout = layout_arg(layout_name);
    if (layout < 0) return NULL;
    if (fields_add(st, &fb, fields, NULL, NULL) < 0) {
        fields_free(&fb);
        return NULL;
    }
    rc = pydb_record_size(&mfrl, layout, mstxl, mfn, fb.v, (uint32_t)fb.n, &e);
    fields_free(&fb);
    if (rc) {
        set_error(st, rc, &e);
        return NULL;
    }
    return PyLong_FromLongLong(mfrl);
}

static PyObject *mod_build(PyObject *m, PyObject *args)
{
    /* _build(path, layout, mstxl, records, sync[, deleted]): records is an
     * iterable of field lists (the rule of fields_add(), values as bytes),
     * or None for an MFN left out (physically deleted); `deleted` a
     * container of MFNs to store logically deleted. */
    module_state *st = PyModule_GetState(m);
    PyObject *records, *it = NULL, *item = NULL, *pb = NULL, *deleted = NULL;
    build_op ops[BUILD_BATCH];
    size_t nops = 0;
    fieldbuf fb = FIELDBUF_INIT;
    const char *layout_name, *cpath;
    int mstxl, sync, layout, rc = PYDB_OK;
    pydb_builder *b = NULL;
    pydb_error e;
    long count = 0;

    if (!PyArg_ParseTuple(args, "O&siOp|O", PyUnicode_FSConverter, &pb,
                          &layout_name, &mstxl, &records, &sync, &deleted))
        return NULL;
    if (deleted == Py_None) deleted = NULL;
    layout = layout_arg(layout_name);
    if (layout < 0) {
        Py_DECREF(pb);
        return NULL;
    }
    cpath = PyBytes_AS_STRING(pb);
    UNLOCKED(NULL, NULL, rc = pydb_builder_open(&b, cpath, layout, mstxl, &e));
    if (rc) goto fail;
    it = PyObject_GetIter(records);
    if (!it) goto fail_py;
    for (;;) {
        item = PyIter_Next(it);
        if (item == NULL || nops == BUILD_BATCH) {
            /* Write what is collected, then let go of its values. */
            const pydb_field *fields = fb.v;
            UNLOCKED(NULL, NULL, rc = build_batch(b, ops, nops, fields, &e));
            fields_reset(&fb);
            nops = 0;
            if (rc) goto fail;
            if (item == NULL) break;
        }
        count++;
        ops[nops].skip = item == Py_None;
        ops[nops].first = fb.n;
        ops[nops].nf = 0;
        ops[nops].deleted = 0;
        if (item == Py_None) {
            Py_CLEAR(item);
            nops++;
            continue;
        }
        if (fields_add(st, &fb, item, NULL, NULL) < 0) goto fail_py;
        Py_CLEAR(item);
        ops[nops].nf = fb.n - ops[nops].first;
        if (deleted) {
            PyObject *key = PyLong_FromLong(count);
            int is_del = key ? PySequence_Contains(deleted, key) : -1;
            Py_XDECREF(key);
            if (is_del < 0) goto fail_py;
            ops[nops].deleted = is_del;
        }
        nops++;
    }
    if (PyErr_Occurred()) goto fail_py;
    UNLOCKED(NULL, NULL, rc = pydb_builder_finish(b, sync, &e));
    if (rc) goto fail;
    pydb_builder_free(b);
    fields_free(&fb);
    Py_XDECREF(it);
    Py_DECREF(pb);
    return PyLong_FromLong(count);
fail:
    set_error(st, rc, &e);
fail_py:
    pydb_builder_free(b);
    fields_free(&fb);
    Py_XDECREF(item);
    Py_XDECREF(it);
    Py_XDECREF(pb);
    return NULL;
}

/* _mkxrf(mst_path, xrf_path, bak_path, layout, force, mend): pydb_mkxrf(),
 * its report as a dict. */
static PyObject *mod_mkxrf(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *pm = NULL, *px = NULL, *pb = NULL, *bak = NULL, *out = NULL;
    const char *layout_name, *cm, *cx, *cb;
    int layout = -1, force, mend, rc;
    pydb_mkxrf_report r;
    pydb_error e;

    if (!PyArg_ParseTuple(args, "O&O&Ozpp", PyUnicode_FSConverter, &pm,
                          PyUnicode_FSConverter, &px, &bak, &layout_name,
                          &force, &mend))
        goto cleanup;
    if (bak != Py_None && !PyUnicode_FSConverter(bak, &pb)) goto cleanup;
    if (layout_name && (layout = pydb_layout_from_name(layout_name)) < 0) {
        PyErr_Format(PyExc_ValueError, "layout must be isis-packed, "
                     "isis-aligned, ffi-packed or ffi-aligned, not '%s'",
                     layout_name);
        goto cleanup;
    }
    memset(&e, 0, sizeof e);
    cm = PyBytes_AS_STRING(pm);
    cx = PyBytes_AS_STRING(px);
    cb = pb ? PyBytes_AS_STRING(pb) : NULL;
    UNLOCKED(NULL, NULL,
             rc = pydb_mkxrf(&r, cm, cx, cb, layout, force, mend, &e));
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    out = Py_BuildValue(
        "{sssisisLsLsLsLsLsLsisisisisL}", "layout",
        pydb_layout_name(r.layout), "mstxl", r.mstxl, "next_mfn",
        (int)r.next_mfn, "ctl_end", (long long)r.ctl_end, "end",
        (long long)r.end, "past_end", (long long)r.past_end,
        "past_end_taken", (long long)r.past_end_taken, "versions",
        (long long)r.versions,
        "version_bytes", (long long)r.version_bytes, "active", (int)r.active,
        "deleted", (int)r.deleted, "pending", (int)r.pending, "missing",
        (int)r.missing, "mended_end", (long long)r.mended_end);
cleanup:
    Py_XDECREF(pm);
    Py_XDECREF(px);
    Py_XDECREF(pb);
    return out;
}

static PyMethodDef builder_functions[] = {
    {"_mkxrf", mod_mkxrf, METH_VARARGS,
     "_mkxrf(mst_path, xrf_path, bak_path, layout, force, mend, /)\n--\n\n"
     "Make the XRF xrf_path anew for the master file mst_path from a scan "
     "of its record versions, an existing one first copied to bak_path "
     "(None: refused); layout a LAYOUTS name or None (detected); force: go "
     "on where no file lease or writer lock can be had; mend: give a master "
     "file cut short the end of its last whole version.  Returns the "
     "report as a dict.  Use pydb.rebuild_xrf()."},
    {"_build", mod_build, METH_VARARGS,
     "_build(path, layout, mstxl, records, sync, deleted=None, /)\n--\n\n"
     "Write a new database from an iterable of records, each a sequence of "
     "(tag, bytes), or None for an MFN left out (XRF: physically deleted); "
     "the MFNs in the container `deleted` are stored logically deleted.  "
     "Returns the number of MFNs assigned."},
    {"_record_size", mod_record_size, METH_VARARGS,
     "_record_size(layout, mstxl, fields, mfn=0, /)\n--\n\n"
     "The MFRL in bytes that a record of `fields` (a sequence of (tag, "
     "bytes)) takes in `layout` (a LAYOUTS name) with MSTXL `mstxl`, as "
     "the builder and transactions compute it (docs/isis-formats.md "
     "§2.2-2.3).  RecordTooLargeError when the layout cannot hold it; "
     "ValueError for an unknown layout, a bad MSTXL or tag; TypeError for "
     "a value that is not bytes.  `mfn` only names the record in the "
     "message."},
    {NULL}};

int builder_exec(PyObject *m, module_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, builder_functions);
}
