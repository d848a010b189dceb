/*
 * _pydb_iso.c - _iso_strict(), the fast path of pydb/iso2709.py's reader:
 * one sound ISO 2709 record parsed by the core (csrc/iso2709.c,
 * pydb_iso_strict), or None for the Python reader to parse, repair or
 * reject as before.
 */
#include "_pydb_module.h"

PyDoc_STRVAR(iso_strict_doc,
"_iso_strict(buf, start, flavours, isis_subfields, /)\n--\n\n"
"Parse the sound ISO 2709 record at byte `start` of `buf` (a bytes-like\n"
"object): `flavours` 1 isis, 2 marc, 3 either; `isis_subfields`: MARC\n"
"subfield delimiters 0x1F become '^'.  Returns (leader: bytes, fields:\n"
"list of (int tag, bytes value), flavour: 'isis' or 'marc', end: int\n"
"offset after the record), or None when the record is not sound as it\n"
"stands (csrc/iso2709.c says which; the Python reader then decides).\n"
"Raises MemoryError.");

static PyObject *iso_strict(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    Py_buffer buf = {0};
    Py_ssize_t start;
    int flavours, conv, sound = 0, rc;
    pydb_iso_record r;
    pydb_error e;
    PyObject *fields = NULL, *out = NULL;

    memset(&r, 0, sizeof r);
    if (!PyArg_ParseTuple(args, "y*nip", &buf, &start, &flavours, &conv))
        return NULL;
    if (start < 0 || start > buf.len) {
        PyErr_SetString(PyExc_ValueError, "start is outside the buffer");
        goto cleanup;
    }
    /* a record is at most 99,999 bytes: no need to release the GIL */
    rc = pydb_iso_strict(&sound, &r, buf.buf, (size_t)buf.len, (size_t)start,
                         flavours, &e);
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    if (!sound) {
        out = Py_NewRef(Py_None);
        goto cleanup;
    }
    fields = PyList_New((Py_ssize_t)r.nfields);
    if (!fields) goto cleanup;
    conv = conv && r.flavour == PYDB_ISO_MARC;
    for (size_t i = 0; i < r.nfields; i++) {
        const pydb_iso_field *f = &r.fields[i];
        const char *src = (const char *)r.rec + f->off;
        PyObject *value, *pair;
        if (conv && f->len > 0 && memchr(src, 0x1F, f->len)) {
            /* a new object (never a shared one-byte bytes) to write into */
            value = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)f->len);
            if (!value) goto cleanup;
            char *p = PyBytes_AS_STRING(value);
            for (uint32_t k = 0; k < f->len; k++)
                p[k] = src[k] == 0x1F ? '^' : src[k];
        } else {
            value = PyBytes_FromStringAndSize(src, (Py_ssize_t)f->len);
            if (!value) goto cleanup;
        }
        pair = Py_BuildValue("(kN)", (unsigned long)f->tag, value);
        if (!pair) goto cleanup;
        PyList_SET_ITEM(fields, (Py_ssize_t)i, pair);
    }
    out = Py_BuildValue("(y#Osn)", (const char *)r.rec, (Py_ssize_t)24, fields,
                        r.flavour == PYDB_ISO_MARC ? "marc" : "isis",
                        (Py_ssize_t)r.end);
cleanup:
    Py_XDECREF(fields);
    pydb_iso_record_free(&r);
    PyBuffer_Release(&buf);
    return out;
}

static PyMethodDef iso_functions[] = {
    {"_iso_strict", iso_strict, METH_VARARGS, iso_strict_doc},
    {NULL}};

int iso_exec(PyObject *m, module_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, iso_functions);
}
