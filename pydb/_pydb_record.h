/*
 * _pydb_record.h - records across the boundary, both ways: the Record type
 * (a pydb_record for Python) and the one converter from Python fields to
 * pydb_field (used by Transaction, the bulk builder and the test hooks).
 */
#ifndef PYDB_BINDING_RECORD_H
#define PYDB_BINDING_RECORD_H

#include "_pydb_module.h"

/* A new instance of the record class (pydb.Record) owning `rec` (freed on
 * failure too); values are decoded with `encoding`/`errors` (str); a value
 * that does not decode raises FieldDecodeError naming `source` (str: the
 * master file), the MFN, the tag and the occurrence. */
PyObject *record_new_from(module_state *st, PyObject *encoding,
                          PyObject *errors, PyObject *source,
                          pydb_record *rec);

/* ------------------------------------------------ the field converter
 *
 * The rule, the same for every caller (it is the writer's):
 *   - `fields` is an iterable of (tag, value) pairs (tuple or list of two,
 *     or a Field of a Record), or a Record (its fields, stored bytes); not
 *     a str or bytes;
 *   - a tag is an int in 1..65535: TypeError for a non-int, ValueError
 *     outside the range;
 *   - a value is bytes, bytearray or memoryview (taken as it is), or str,
 *     encoded with `encoding`/`errors`; when the caller has no encoding
 *     (NULL: the bulk builder, which writes stored bytes) a str is a
 *     TypeError, as is any other type;
 *   - more than 65535 fields (NVF is 16-bit) or a value above 2 GiB:
 *     RecordTooLargeError.  The layout's own limit is the core's to check.
 *
 * The pydb_field values point into bytes objects the buffer holds a
 * reference to, so they stay valid with the GIL released until
 * fields_reset() / fields_free(). */
typedef struct {
    pydb_field *v;        /* PyMem; n used, cap allocated     */
    size_t n, cap;
    PyObject **keep;      /* PyMem; the bytes the values point into */
    size_t nkeep, keepcap;
} fieldbuf;

#define FIELDBUF_INIT {NULL, 0, 0, NULL, 0, 0}

/* Append the fields of `fields` to `b`.  0, or -1 with an exception (b
 * then still owns what it holds: call fields_free()). */
int fields_add(module_state *st, fieldbuf *b, PyObject *fields,
               const char *encoding, const char *errors);
/* Drop the fields and the references (GIL held); keep the memory. */
void fields_reset(fieldbuf *b);
/* fields_reset() and free the memory. */
void fields_free(fieldbuf *b);

#endif
