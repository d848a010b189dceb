/*
 * _pydb_iso.c - _iso_strict(), the fast path of pydb/iso2709.py's reader:
 * one sound ISO 2709 record parsed by the core (csrc/iso2709.c,
 * pydb_iso_strict), or None for the Python reader to parse, repair or
 * reject as before; and _iso_encode(), the writer's encoding of one
 * record (pydb_iso_encode), with the checks and messages of its fields.
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

PyDoc_STRVAR(iso_encode_doc,
"_iso_encode(fields, marc, caret, encoding, mid, tail, /)\n--\n\n"
"One record in ISO 2709 form, without line breaks (csrc/iso2709.c,\n"
"pydb_iso_encode; docs/isis-formats.md section 7).\n\n"
"Parameters: fields, an iterable of (tag, value) pairs -- tag an int\n"
"0..99999 (or what int() makes one of), a str of ASCII digits, or 3\n"
"printable ASCII characters; value bytes, bytearray, memoryview, or str\n"
"encoded with `encoding` (errors: surrogateescape).  marc: the MARC\n"
"flavour (0x1E/0x1D terminators, the reserved bytes refused), else\n"
"CDS/ISIS ('#').  caret: with marc, '^' written as 0x1F and 0x1F refused\n"
"in a value.  mid, tail: leader positions 5-11 and 17-19 (7 and 3 bytes).\n\n"
"Returns: the record (bytes).\n\n"
"Raises: ValueError naming the field or the reason (the messages of\n"
"pydb.iso2709.write), TypeError for a tag or pair of the wrong type, and\n"
"what the codec raises (LookupError, UnicodeError).");

/* The value of a (tag, value) pair as bytes (a new reference), or NULL
 * with an exception. */
static PyObject *iso_value(PyObject *tag, PyObject *value, PyObject *encoding)
{
    if (PyUnicode_Check(value)) {
        if (PyUnicode_Check(encoding)) {
            const char *enc = PyUnicode_AsUTF8(encoding);
            return enc ? PyUnicode_AsEncodedString(value, enc,
                                                   "surrogateescape")
                       : NULL;
        }
        /* str.encode's own error for an encoding that is no str */
        return PyObject_CallMethod(value, "encode", "Os", encoding,
                                   "surrogateescape");
    }
    if (PyBytes_Check(value)) return Py_NewRef(value);
    if (PyByteArray_Check(value) || PyMemoryView_Check(value))
        return PyBytes_FromObject(value);
    {
        PyObject *name = PyType_GetName(Py_TYPE(value));
        if (name) {
            PyErr_Format(PyExc_ValueError, "field %S: value must be bytes or "
                         "str, not %U", tag, name);
            Py_DECREF(name);
        }
        return NULL;
    }
}

/* A str tag that is not all ASCII digits: 3 printable ASCII characters.
 * 0, 1 (not such a tag: the caller reads it as a number), or -1 with an
 * exception. */
static int iso_text_tag(pydb_iso_wfield *w, PyObject *tag)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(tag);
    int digits = n > 0 && PyUnicode_IS_ASCII(tag);
    for (Py_ssize_t i = 0; digits && i < n; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(tag, i);
        digits = c >= '0' && c <= '9';
    }
    if (digits) return 1;
    if (n != 3 || !PyUnicode_IS_ASCII(tag)) goto bad;
    for (Py_ssize_t i = 0; i < 3; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(tag, i);
        if (c < 0x20 || c > 0x7E) goto bad;
        w->tag[i] = (uint8_t)c;
    }
    w->nimpl = 0;
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "tag %R is not 3 printable ASCII "
                 "characters", tag);
    return -1;
}

/* A numeric tag (int(tag)) 0..99999: its last three digits and the ones
 * before them.  0 or -1 with an exception. */
static int iso_number_tag(pydb_iso_wfield *w, PyObject *tag)
{
    PyObject *t = PyNumber_Long(tag);
    long long v;
    int overflow = 0;
    char s[8];
    if (!t) return -1;
    v = PyLong_AsLongLongAndOverflow(t, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(t);
        return -1;
    }
    if (overflow || v < 0 || v > 99999) {
        PyErr_Format(PyExc_ValueError, "tag %S is outside 0..99999", t);
        Py_DECREF(t);
        return -1;
    }
    Py_DECREF(t);
    snprintf(s, sizeof s, "%03lld", v);
    w->nimpl = (int)strlen(s) - 3;
    memcpy(w->impl, s, (size_t)w->nimpl);
    memcpy(w->tag, s + w->nimpl, 3);
    return 0;
}

/* One (tag, value) pair into w, unpacked as `for tag, value in fields`
 * does; its bytes value (a new reference, kept by the caller while w is
 * used) into *keep.  The pair is a copy (a tuple), so Python code run
 * here (a codec, a tag's __index__) cannot change what is read.  0 or -1
 * with an exception. */
static int iso_field(pydb_iso_wfield *w, PyObject **keep, PyObject *item,
                     int marc, int caret, PyObject *encoding)
{
    PyObject *pair, *tag, *value;
    int rc = -1, bad;

    if (Py_TYPE(item)->tp_iter == NULL && !PySequence_Check(item)) {
        PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %s object",
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    pair = PySequence_Tuple(item);
    if (!pair) return -1;
    if (PyTuple_GET_SIZE(pair) != 2) {
        if (PyTuple_GET_SIZE(pair) > 2)
            PyErr_SetString(PyExc_ValueError,
                            "too many values to unpack (expected 2)");
        else
            PyErr_Format(PyExc_ValueError, "not enough values to unpack "
                         "(expected 2, got %zd)", PyTuple_GET_SIZE(pair));
        goto cleanup;
    }
    tag = PyTuple_GET_ITEM(pair, 0);
    value = PyTuple_GET_ITEM(pair, 1);
    *keep = iso_value(tag, value, encoding);
    if (!*keep) goto cleanup;
    w->value = (const uint8_t *)PyBytes_AS_STRING(*keep);
    w->len = (size_t)PyBytes_GET_SIZE(*keep);
    bad = marc ? pydb_iso_reserved(w->value, w->len) : -1;
    if (bad >= 0 && (bad != 0x1F || caret)) {
        char hex[12];   /* PyErr_Format has no %02X */
        snprintf(hex, sizeof hex, "0x%02X", (unsigned)bad);
        PyErr_Format(PyExc_ValueError, "field %S contains byte %s, which "
                     "the MARC flavour reserves (write it in the CDS/ISIS "
                     "flavour)", tag, hex);
        goto cleanup;
    }
    rc = PyUnicode_Check(tag) ? iso_text_tag(w, tag) : 1;
    if (rc == 1) rc = iso_number_tag(w, tag);
cleanup:
    Py_DECREF(pair);
    return rc;
}

/* One record per call of the writer: METH_FASTCALL. */
static PyObject *iso_encode(PyObject *m, PyObject *const *args,
                            Py_ssize_t nargs)
{
    module_state *st = PyModule_GetState(m);
    PyObject *seq = NULL, *keep = NULL, *out = NULL;
    Py_buffer mid = {0}, tail = {0};
    int marc, caret, rc, flavour;
    pydb_iso_wfield *w = NULL;
    Py_ssize_t n = 0;
    size_t len = 0;
    pydb_error e;

    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "_iso_encode expected 6 arguments, "
                     "got %zd", nargs);
        return NULL;
    }
    if ((marc = PyObject_IsTrue(args[1])) < 0 ||
        (caret = PyObject_IsTrue(args[2])) < 0 ||
        PyObject_GetBuffer(args[4], &mid, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(args[5], &tail, PyBUF_SIMPLE) < 0)
        goto cleanup;
    if (mid.len != 7 || tail.len != 3) {
        PyErr_SetString(PyExc_ValueError, "mid and tail must be 7 and 3 bytes");
        goto cleanup;
    }
    flavour = marc ? PYDB_ISO_MARC : PYDB_ISO_ISIS;
    seq = PySequence_Tuple(args[0]);   /* a copy: see iso_field */
    if (!seq) goto cleanup;
    n = PyTuple_GET_SIZE(seq);
    keep = PyList_New(n);
    w = PyMem_Calloc(n ? (size_t)n : 1, sizeof *w);
    if (!keep || !w) {
        if (!w) PyErr_NoMemory();
        goto cleanup;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = NULL;
        rc = iso_field(&w[i], &b, PyTuple_GET_ITEM(seq, i), marc, caret,
                       args[3]);
        if (b) PyList_SET_ITEM(keep, i, b);
        if (rc) goto cleanup;
    }
    /* a record is at most 99,999 bytes: no need to release the GIL */
    rc = pydb_iso_encode(NULL, &len, w, (size_t)n, flavour, caret, mid.buf,
                         tail.buf, &e);
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    if (!out) goto cleanup;
    rc = pydb_iso_encode((uint8_t *)PyBytes_AS_STRING(out), &len, w,
                         (size_t)n, flavour, caret, mid.buf, tail.buf, &e);
    if (rc) {   /* cannot happen: the same record was measured above */
        Py_CLEAR(out);
        set_error(st, rc, &e);
    }
cleanup:
    PyMem_Free(w);
    Py_XDECREF(keep);
    Py_XDECREF(seq);
    if (mid.obj) PyBuffer_Release(&mid);
    if (tail.obj) PyBuffer_Release(&tail);
    return out;
}

static PyMethodDef iso_functions[] = {
    {"_iso_strict", iso_strict, METH_VARARGS, iso_strict_doc},
    {"_iso_encode", (PyCFunction)(void (*)(void))iso_encode, METH_FASTCALL,
     iso_encode_doc},
    {NULL}};

int iso_exec(PyObject *m, module_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, iso_functions);
}
