/*
 * _pydb_record.h - records across the boundary, both ways: the Record type
 * (a pydb_record for Python) and the one converter from Python fields to
 * pydb_field (used by Transaction, the bulk builder and the test hooks).
 */
#ifndef PYDB_BINDING_RECORD_H
#define PYDB_BINDING_RECORD_H

#include "_pydb_module.h"

/* The decoders decode() (_pydb_record.c) calls directly: UTF-8, Latin-1
 * and ASCII by the names Python normalises to them, and the standard
 * library's single-byte code pages (CHARMAP: pydb.encoding.
 * charmap_decoding), sparing PyUnicode_Decode()'s lookup of the name and,
 * for a code page, its Python-level codec call per field; OTHER (0, what
 * a codec not yet resolved decodes with): that lookup. */
enum { CODEC_OTHER, CODEC_UTF8, CODEC_LATIN1, CODEC_ASCII, CODEC_CHARMAP };

/* How a database's values decode: resolved when the database is opened or
 * its codec set (codec_resolve), copied into each of its Records. */
typedef struct {
    int kind;          /* CODEC_*                                      */
    int ascii_same;    /* bytes 0x00-0x7F decode to themselves         */
    PyObject *table;   /* CODEC_CHARMAP: the 256-character decoding
                          table (a reference; interned, so immortal, on
                          a free-threaded build); else NULL            */
    PyObject *seen;    /* capsule owning `seen_at`: a reference, or
                          NULL (a free-threaded build keeps none)      */
    struct seen_table *seen_at; /* the Fields of short values lately
                          made with this codec (_pydb_record.c, "Fields
                          seen"), borrowed from `seen`                 */
} record_codec;

/* Resolve the codec named `encoding` (str) into *out, which holds no
 * reference before (record_codec_clear() drops one).  0, or -1 and an
 * exception (the name not a str, or charmap_decoding() failing). */
int codec_resolve(module_state *st, PyObject *encoding, record_codec *out);
void record_codec_clear(record_codec *c);

/* A new instance of the record class (pydb.Record) owning `rec` (freed on
 * failure too); values are decoded with `encoding`/`errors` (str) as
 * `codec` (resolved from that encoding) says; a value that does not
 * decode raises FieldDecodeError naming `source` (str: the master file),
 * the MFN, the tag and the occurrence. */
PyObject *record_new_from(module_state *st, PyObject *encoding,
                          PyObject *errors, PyObject *source,
                          const record_codec *codec, pydb_record *rec);

/* Up to n freed record blocks kept for reuse into out[0..) (a
 * pydb_read() reuses, grows or cuts each), and how many; and a block
 * given back: kept for a later read where there is room and it is at
 * most 4 KiB, else pydb_record_free()d.  With the GIL held
 * (_pydb_record.c, "Record memory"). */
size_t record_spares_take(pydb_record **out, size_t n);
void record_spare_put(pydb_record *r);

/* Test hooks (pydb._pydb._testing, _pydb_testing.c): the decoder a
 * Record's values take, ("utf-8" | "latin-1" | "ascii" | "charmap" |
 * "other", ascii_same); and the Field free list, (Fields kept, whether it
 * serves this module's Field type), after record_clear() when `clear`. */
PyObject *record_test_codec(module_state *st, PyObject *rec);
PyObject *record_test_free_list(module_state *st, int clear);
/* ... and the Record free list, (Records kept, whether it serves st's
 * record class of the moment). */
PyObject *record_test_records_kept(module_state *st);
/* ... and the slot of the table of Fields seen that a field (tag, value
 * bytes) takes, or None for a value too long to be kept. */
PyObject *record_test_seen_slot(unsigned int tag, PyObject *value);
/* ... and the capacities (bytes) of the record blocks kept for reuse. */
PyObject *record_test_spares(void);

/* ------------------------------------------------ the field converter
 *
 * The rule, the same for every caller (it is the writer's):
 *   - `fields` is an iterable of (tag, value) pairs (tuple or list of two,
 *     or a Field of a Record), a dict {tag: value or list/tuple of values}
 *     (Record.to_dict(): tags in the dict's order, each tag's values in
 *     theirs), or a Record (its fields, stored bytes); not a str or bytes;
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
