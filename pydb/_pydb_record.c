/*
 * _pydb_record.c - records for Python, both ways.
 *
 *   Record     a record version read from a master file (pydb_record);
 *              pydb.Record (pydb/database.py) subclasses it, and
 *              _set_record_class() makes the binding create that class.
 *   Field      structseq (tag, value) with .raw, the items of
 *              Record.fields.
 *   fields_add the one converter from Python fields to pydb_field (rule in
 *              _pydb_record.h), used by Transaction, _build and the test
 *              hooks.
 */
#include "_pydb_record.h"
#include <structmember.h>
#include <stdarg.h>

/* Tags below this share their int (tag_int): the three-digit tags of
 * CDS/ISIS and MARC databases. */
#define TAG_INTS 1000

/* ------------------------------------------------------------- Record */

typedef struct {
    PyObject_HEAD
    pydb_record *rec;
    PyObject *encoding;
    PyObject *errors;
    PyObject *source;   /* str: the master file, for decode errors */
    record_codec codec; /* its database's, when the record was read */
} RecordObject;

static int codec_of(const char *encoding)
{
    static const struct { const char *name; int codec; } known[] = {
        {"utf-8", CODEC_UTF8}, {"utf8", CODEC_UTF8}, {"UTF-8", CODEC_UTF8},
        {"latin-1", CODEC_LATIN1}, {"latin1", CODEC_LATIN1},
        {"iso-8859-1", CODEC_LATIN1}, {"iso8859-1", CODEC_LATIN1},
        {"ascii", CODEC_ASCII}, {"us-ascii", CODEC_ASCII}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcmp(encoding, known[i].name) == 0) return known[i].codec;
    return CODEC_OTHER;
}

/* The code page's answer of pydb.encoding.charmap_decoding() for
 * `encoding`, asked once per name per module (kept in st->charmaps):
 * (table, ascii) or None, borrowed (the dict never drops one).  NULL and
 * an exception where it fails or answers something else. */
static PyObject *charmap_answer(module_state *st, PyObject *encoding)
{
    PyObject *got = PyDict_GetItemWithError(st->charmaps, encoding);
    if (!got) {
        PyObject *fresh;
        if (PyErr_Occurred()) return NULL;
        fresh = PyObject_CallOneArg(st->charmap_decoding, encoding);
        if (!fresh) return NULL;
        if (fresh != Py_None &&
            (!PyTuple_Check(fresh) || PyTuple_GET_SIZE(fresh) != 2 ||
             !PyUnicode_Check(PyTuple_GET_ITEM(fresh, 0)) ||
             PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(fresh, 0)) != 256 ||
             !PyBool_Check(PyTuple_GET_ITEM(fresh, 1)))) {
            Py_DECREF(fresh);
            PyErr_SetString(PyExc_TypeError, "charmap_decoding() must return "
                            "(a str of 256 characters, bool) or None");
            return NULL;
        }
        got = PyDict_SetDefault(st->charmaps, encoding, fresh);
        Py_DECREF(fresh);
    }
    return got;
}

/* ------------------------------------------------------- Fields seen
 *
 * Catalogues repeat their short values: language and country codes,
 * document types, years, the same subject heading (in the real master
 * files the tests read, a fifth to three fifths of all fields repeat a
 * (tag, value) of at most 16 bytes seen shortly before).  A Field is
 * immutable, so each codec keeps Fields of such values in a
 * direct-mapped table of SEEN_SLOTS slots, and Record.fields hands the
 * same Field out again instead of decoding the value and allocating a
 * str, a Field and, for a value that is not its bytes (value_is_raw), a
 * bytes (docs/architecture.md, "Data flow: from pread to a Python
 * object").  A slot admits a value on its second sighting in a row
 * (`next` remembers the first): a value seen once, most of a catalogue's
 * long tail, costs a hash and a 24-byte write, and its Field still dies
 * with its record and is reused at once from the free list (holding
 * every new Field made a scan of the default database 27% slower: the
 * Field it evicted was cold when freed).
 *
 * The table belongs to the codec a database resolved when it was opened
 * (codec_resolve), so a Field is only shared between records decoded with
 * the same codec and error handler, whose decoding of given bytes is
 * taken to be always the same (Python's codecs and error handlers are; a
 * handler registered again under the same name would not be seen by
 * Fields made before); each Record holds a reference, so the table
 * outlives its database while a record of it does.  It holds at
 * most SEEN_SLOTS Fields of at most SEEN_MAX bytes, 56 KiB of slots and
 * 2 KiB of scores (below): about 250 KiB.  The GIL guards it; a
 * free-threaded build keeps none.
 *
 * A tag whose short values do not come again (an identifier, a page
 * range, a name) only pays for its lookups, and even a hit hardly pays
 * where the Field it spares would be taken warm from the free list (a
 * scan that lets each record go): a scan of the default database with
 * rec.fields ran as fast with no table at all as with one, which sped
 * up the real master files whose records keep repeating short values.
 * So the table keeps a score per tag (`worth`, tags taken modulo
 * SEEN_TAGS), up SEEN_HIT on each hit and down SEEN_MISS on each miss:
 * it stays above 0 where more than two thirds of the tag's lookups hit.
 * At 0 the tag's short fields are not looked up; the SEEN_IDLE-th of
 * them is, with the score set to SEEN_PROBE, so that a tag whose values
 * begin to repeat is looked up again (one whose values never repeat: 3
 * lookups in every 66 of its short fields).  On the default database
 * the language (40) and the notes (50, "Incl. bibl.") are looked up,
 * the authors (70), the collation (30) and the keywords (69) are not:
 * its scan with rec.fields went from 1.73M to 1.91M records/s (medians;
 * benchmarks/ab_builds.py scan-fields, 15 rounds, ministat on the
 * rounds' times: -11.4% +/- 5.9%), the lilacs, lilacs30 and rda master
 * files no difference proven, read with their records let go or kept
 * (scan-fields=PATH, real=PATH). */
#define SEEN_BITS 10
#define SEEN_SLOTS (1u << SEEN_BITS)
#define SEEN_MAX 16      /* value bytes: two 64-bit words */
#define SEEN_TAGS 1024   /* tags with a score of their own */
#define SEEN_WORTH_MAX 15
#define SEEN_WORTH_NEW 8 /* a tag's first: its first value misses twice */
#define SEEN_HIT 1
#define SEEN_MISS 2
#define SEEN_IDLE 64
#define SEEN_PROBE 6
#define SEEN_CAPSULE "pydb._pydb.fields_seen"

struct seen_key {
    uint64_t w[2];      /* the value's bytes (seen_key_of) */
    uint32_t tag;
    uint32_t len1;      /* the value's length + 1; 0: no key */
};

struct seen_slot {
    struct seen_key held;   /* the key of `field` (len1 0: none held) */
    PyObject *field;        /* a reference, or NULL */
    struct seen_key next;   /* the last key that missed: admitted when
                               it comes again before another misses */
};

struct seen_table {
    struct seen_slot slot[SEEN_SLOTS];
    uint8_t worth[SEEN_TAGS];  /* the tag's score: 0, not looked up */
    uint8_t idle[SEEN_TAGS];   /* its fields not looked up since */
};

#ifndef Py_GIL_DISABLED
/* The capsule's destructor: the table's Fields and its memory (only a
 * build with the GIL makes tables, seen_new). */
static void seen_free(PyObject *capsule)
{
    struct seen_table *t = PyCapsule_GetPointer(capsule, SEEN_CAPSULE);
    for (size_t i = 0; t && i < SEEN_SLOTS; i++) Py_XDECREF(t->slot[i].field);
    PyMem_Free(t);
}
#endif

/* A new, empty table into c->seen / c->seen_at.  0, or -1 and an
 * exception.  Nothing on a free-threaded build. */
static int seen_new(record_codec *c)
{
#ifndef Py_GIL_DISABLED
    struct seen_table *t = PyMem_Calloc(1, sizeof *t);
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    memset(t->worth, SEEN_WORTH_NEW, sizeof t->worth);
    c->seen = PyCapsule_New(t, SEEN_CAPSULE, seen_free);
    if (!c->seen) {
        PyMem_Free(t);
        return -1;
    }
    c->seen_at = t;
#else
    (void)c;
#endif
    return 0;
}

/* The key of field f (at most SEEN_MAX bytes) into *k, and the index of
 * its slot. */
static uint32_t seen_key_of(const pydb_field *f, struct seen_key *k)
{
    const uint8_t *p = f->value;
    uint32_t n = f->len, lo, hi;
    uint64_t h;
    /* the bytes in two words without a call to memcpy: two loads that
     * overlap, which with the length say every byte */
    if (n >= 8) {
        memcpy(&k->w[0], p, 8);
        memcpy(&k->w[1], p + n - 8, 8);
    } else if (n >= 4) {
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
        k->w[0] = lo | (uint64_t)hi << 32;
        k->w[1] = 0;
    } else {
        k->w[0] = n ? p[0] | (uint64_t)p[n / 2] << 8 |
                          (uint64_t)p[n - 1] << 16
                    : 0;
        k->w[1] = 0;
    }
    k->tag = f->tag;
    k->len1 = n + 1;
    h = (k->w[0] * 0x9E3779B97F4A7C15ULL) ^
        ((k->w[1] + k->tag + ((uint64_t)k->len1 << 32)) *
         0xC2B2AE3D27D4EB4FULL);
    h ^= h >> 29;
    return (uint32_t)((h * 0x94D049BB133111EBULL) >> (64 - SEEN_BITS));
}

static int seen_same(const struct seen_key *a, const struct seen_key *b)
{
    return a->len1 == b->len1 && a->tag == b->tag && a->w[0] == b->w[0] &&
           a->w[1] == b->w[1];
}

/* The Field table `at` holds for field f (a new reference), or NULL
 * with *s the slot where a Field made for f is to be noted (seen_note)
 * and *k its key; *s NULL where f is too long, there is no table, or f's
 * tag is not looked up now.  Keeps the tag's score. */
static PyObject *seen_lookup(struct seen_table *at, const pydb_field *f,
                             struct seen_slot **s, struct seen_key *k)
{
    uint32_t t = f->tag % SEEN_TAGS;
    uint8_t *worth;
    *s = NULL;
    if (!at || f->len > SEEN_MAX) return NULL;
    worth = &at->worth[t];
    if (*worth == 0) {
        if (++at->idle[t] < SEEN_IDLE) return NULL;
        at->idle[t] = 0;
        *worth = SEEN_PROBE;
    }
    *s = &at->slot[seen_key_of(f, k)];
    if (!seen_same(&(*s)->held, k)) {
        *worth = *worth > SEEN_MISS ? *worth - SEEN_MISS : 0;
        return NULL;
    }
    *worth = *worth > SEEN_WORTH_MAX - SEEN_HIT ? SEEN_WORTH_MAX
                                                : *worth + SEEN_HIT;
    return Py_NewRef((*s)->field);
}

/* Field f, just made for key k, missed slot s: held from now on if k
 * missed s last time too, else remembered as s->next. */
static void seen_note(struct seen_slot *s, const struct seen_key *k,
                      PyObject *f)
{
    PyObject *old;
    if (!seen_same(&s->next, k)) {
        s->next = *k;
        return;
    }
    old = s->field;
    s->field = Py_NewRef(f);
    s->held = *k;
    s->next.len1 = 0;
    Py_XDECREF(old);   /* a Field: its dealloc runs no Python code */
}

/* codec_resolve() without the table of Fields seen (out->seen NULL): the
 * codec of a record rebuilt on its own (record_rebuild). */
static int codec_lookup(module_state *st, PyObject *encoding,
                        record_codec *out)
{
    const char *name = PyUnicode_AsUTF8(encoding);
    PyObject *got;
    out->kind = CODEC_OTHER;
    out->ascii_same = 0;
    out->table = NULL;
    out->seen = NULL;
    out->seen_at = NULL;
    if (!name) return -1;
    out->kind = codec_of(name);
    out->ascii_same = out->kind != CODEC_OTHER;
    if (out->kind == CODEC_OTHER) {
        got = charmap_answer(st, encoding);
        if (!got) return -1;
        if (got != Py_None) {
            out->kind = CODEC_CHARMAP;
            out->ascii_same = PyTuple_GET_ITEM(got, 1) == Py_True;
            out->table = Py_NewRef(PyTuple_GET_ITEM(got, 0));
            shared_str(&out->table);
        }
    }
    return 0;
}

int codec_resolve(module_state *st, PyObject *encoding, record_codec *out)
{
    if (codec_lookup(st, encoding, out) < 0) return -1;
    if (seen_new(out) < 0) {
        record_codec_clear(out);
        return -1;
    }
    return 0;
}

void record_codec_clear(record_codec *c)
{
    Py_CLEAR(c->table);
    Py_CLEAR(c->seen);
    c->seen_at = NULL;
    c->kind = CODEC_OTHER;
    c->ascii_same = 0;
}

/* ------------------------------------------------------ Record memory
 *
 * Freed record blocks kept for the next reads, as field_free keeps
 * Fields.  Iteration reads BATCH records with one GIL release and the
 * loop frees them one by one: glibc's per-thread cache keeps 7 blocks of
 * a size, so each of those reads went to malloc's bins and each free
 * back (a sixth of `for rec in db`, 30 ns a record, on the default
 * database).  A kept block is handed to the core's next read, which
 * reuses it, grows it if needed and cuts it to size if it is more than
 * twice what the record needs (pydb_read()), so that a Record held by
 * the application holds at most twice its memory.  Kept: at most
 * SPARE_MAX blocks of at most SPARE_BYTES.  The GIL guards the list; a
 * free-threaded build keeps none. */
#ifndef Py_GIL_DISABLED
#define SPARE_MAX 256
#define SPARE_BYTES 4096
static pydb_record *record_spare[SPARE_MAX];
static int record_nspare;
static module_state *record_spare_owner;   /* the main interpreter's
                                              module, until its clear */
#endif

size_t record_spares_take(pydb_record **out, size_t n)
{
    size_t got = 0;
#ifndef Py_GIL_DISABLED
    while (got < n && record_nspare) out[got++] = record_spare[--record_nspare];
#else
    (void)out;
    (void)n;
#endif
    return got;
}

void record_spare_put(pydb_record *r)
{
#ifndef Py_GIL_DISABLED
    if (r && record_spare_owner && record_nspare < SPARE_MAX &&
        r->capacity <= SPARE_BYTES) {
        record_spare[record_nspare++] = r;
        return;
    }
#endif
    pydb_record_free(r);
}

/* Freed Records kept for the next record_new_from(), as field_free keeps
 * Fields: a scan lets each Record go as it takes the next, and each went
 * through the allocator, its zeroing and the collector's bookkeeping
 * (ab_builds scan-fields 15: time -2.4% +/- 1.9% with the list).  Only the
 * records of the main interpreter's record class while that class is
 * untracked and has no finalizer (record_free_type: pydb.Record, set by
 * mod_set_record_class() while the module holds the class; the finalizer
 * looked at again as each Record is let go, since a __del__ may be given to
 * the class later) go on the list, so that every kept Record has the
 * class's size and is made again as tp_alloc would, untracked (a finalizer
 * would not run for a Record made again: the collector marks an object it
 * finalized in its header, which PyObject_Init leaves).  A kept Record
 * holds no reference (record_dealloc dropped them), its class's included.
 * The GIL guards it; a free-threaded build keeps none. */
#ifndef Py_GIL_DISABLED
#define RECORD_FREE_MAX 256
static PyObject *record_free[RECORD_FREE_MAX];
static int record_nfree;
static PyTypeObject *record_free_type;
#endif

/* The list's Records freed, and the list set to keep those of class
 * `keep` (NULL: none) where it may (see there).  Nothing outside the
 * main interpreter, whose list it is not. */
static void record_free_reset(PyTypeObject *keep)
{
#ifndef Py_GIL_DISABLED
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) return;
    while (record_nfree) PyObject_GC_Del(record_free[--record_nfree]);
    record_free_type =
        keep && !keep->tp_finalize && !keep->tp_del ? keep : NULL;
#else
    (void)keep;
#endif
}

/* A Record of st's record class as tp_alloc makes it (its items to be
 * set), untracked where the class is: from the list where it has one.
 * NULL and an exception. */
static RecordObject *record_alloc(module_state *st)
{
    PyObject *r;
#ifndef Py_GIL_DISABLED
    if (record_nfree && st->record_class == record_free_type) {
        r = record_free[--record_nfree];
        return (RecordObject *)PyObject_Init(r, st->record_class);
    }
#endif
    r = st->record_class->tp_alloc(st->record_class, 0);
    if (r && st->record_untracked) PyObject_GC_UnTrack(r);
    return (RecordObject *)r;
}

PyObject *record_new_from(module_state *st, PyObject *encoding,
                          PyObject *errors, PyObject *source,
                          const record_codec *codec, pydb_record *rec)
{
    RecordObject *r = record_alloc(st);
    if (!r) {
        pydb_record_free(rec);
        return NULL;
    }
    r->rec = rec;
    r->encoding = Py_NewRef(encoding);
    r->errors = Py_NewRef(errors);
    r->source = Py_NewRef(source);
    r->codec = *codec;
    Py_XINCREF(r->codec.table);
    Py_XINCREF(r->codec.seen);
    return (PyObject *)r;
}

static void record_dealloc(RecordObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    record_spare_put(self->rec);
    Py_XDECREF(self->encoding);
    Py_XDECREF(self->errors);
    Py_XDECREF(self->source);
    Py_XDECREF(self->codec.table);
    Py_XDECREF(self->codec.seen);
#ifndef Py_GIL_DISABLED
    if (tp == record_free_type && record_nfree < RECORD_FREE_MAX &&
        !tp->tp_finalize && !tp->tp_del) {
        /* subtype_dealloc untracked it (and tracks it again only for a
         * base the collector knows, which Record is not): kept untracked
         * whatever the class */
        PyObject_GC_UnTrack(self);
        record_free[record_nfree++] = (PyObject *)self;
    } else
#endif
        tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* The codec's error now set -- a UnicodeDecodeError (`decoding`) or a
 * UnicodeEncodeError -- raised again as `kind`, called with (encoding,
 * object, start, end, reason) and the items of the tuple Py_BuildValue
 * makes of `fmt` and the rest: a pydb error that is also the codec's
 * class (FieldDecodeError, FieldEncodeError), the codec's error its
 * __cause__.  `encoding` is the database's name for the codec ("cp850",
 * not the codec's "charmap").  Other exceptions pass through.  NULL. */
static PyObject *codec_error_as(PyObject *kind, int decoding,
                                const char *encoding, const char *fmt, ...)
{
    PyObject *type, *exc, *tb, *obj = NULL, *reason = NULL, *err = NULL;
    PyObject *head = NULL, *extra = NULL, *args = NULL;
    Py_ssize_t start, end;
    int bad;
    va_list ap;
    if (!PyErr_ExceptionMatches(decoding ? PyExc_UnicodeDecodeError
                                         : PyExc_UnicodeEncodeError))
        return NULL;
    PyErr_Fetch(&type, &exc, &tb);   /* PyErr_GetRaisedException: 3.12 */
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb) PyException_SetTraceback(exc, tb);
    obj = decoding ? PyUnicodeDecodeError_GetObject(exc)
                   : PyUnicodeEncodeError_GetObject(exc);
    reason = !obj ? NULL
             : decoding ? PyUnicodeDecodeError_GetReason(exc)
                        : PyUnicodeEncodeError_GetReason(exc);
    bad = !reason ||
          (decoding ? PyUnicodeDecodeError_GetStart(exc, &start)
                    : PyUnicodeEncodeError_GetStart(exc, &start)) < 0 ||
          (decoding ? PyUnicodeDecodeError_GetEnd(exc, &end)
                    : PyUnicodeEncodeError_GetEnd(exc, &end)) < 0;
    if (bad) goto done;
    va_start(ap, fmt);
    extra = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    head = extra ? Py_BuildValue("(sOnnO)", encoding, obj, start, end, reason)
                 : NULL;
    args = head ? PySequence_Concat(head, extra) : NULL;
    err = args ? PyObject_Call(kind, args, NULL) : NULL;
    if (err) {
        PyException_SetCause(err, Py_NewRef(exc));
        PyException_SetContext(err, Py_NewRef(exc));
        PyErr_SetObject((PyObject *)Py_TYPE(err), err);
    }
done:
    if (!err && !PyErr_Occurred()) {   /* raise the codec's own error */
        PyErr_Restore(type, exc, tb);
        type = exc = tb = NULL;
    }
    Py_XDECREF(args);
    Py_XDECREF(head);
    Py_XDECREF(extra);
    Py_XDECREF(err);
    Py_XDECREF(reason);
    Py_XDECREF(obj);
    Py_XDECREF(type);
    Py_XDECREF(exc);
    Py_XDECREF(tb);
    return NULL;
}

/* The UnicodeDecodeError now set, raised again as FieldDecodeError (a
 * pydb.Error and a UnicodeDecodeError) that names the master file, the
 * MFN, the tag and the 1-based occurrence of field `f` (codec_error_as).
 * NULL. */
static PyObject *decode_failed(RecordObject *self, const char *encoding,
                               const pydb_field *f)
{
    module_state *st = state_of_type(Py_TYPE(self));
    uint32_t occ = 1;
    if (!st) return NULL;
    for (const pydb_field *g = self->rec->fields; g < f; g++)
        if (g->tag == f->tag) occ++;
    return codec_error_as(st->FieldDecodeError, 1, encoding, "(OlkI)",
                          self->source, (long)self->rec->mfn,
                          (unsigned long)f->tag, (unsigned int)occ);
}

/* How a record's values decode, taken once per call of fields, rec[tag]
 * or get() (decoder_init) and used for each field (decode).  The names
 * are looked up only for a value that goes through the codec
 * (decoder_names): most values of most catalogues do not. */
typedef struct {
    const record_codec *c;  /* the record's */
    const char *encoding;   /* for CODEC_OTHER; NULL: not looked up yet */
    const char *errors;
} decoder;

static void decoder_init(decoder *d, RecordObject *self)
{
    d->c = &self->codec;
    d->encoding = d->errors = NULL;
}

/* d's encoding and error handler, those of record `self`, as C strings.
 * 0, or -1 and an exception. */
static int decoder_names(decoder *d, RecordObject *self)
{
    if (d->errors) return 0;
    d->encoding = PyUnicode_AsUTF8(self->encoding);
    d->errors = d->encoding ? PyUnicode_AsUTF8(self->errors) : NULL;
    return d->errors ? 0 : -1;
}

/* Whether a decoded value can stand for its stored bytes: a str of
 * one-byte characters (ASCII, or up to U+00FF) whose codes are the bytes
 * (any codec, any error handler: every Latin-1 value, a cp1252 value
 * whose letters are Latin-1's).  The test costs a read of the bytes; the
 * bytes object it spares costs an allocation and a copy (a fifth of
 * Record.fields on the default database). */
static int value_is_raw(PyObject *value, const pydb_field *f)
{
    return PyUnicode_KIND(value) == PyUnicode_1BYTE_KIND &&
           PyUnicode_GET_LENGTH(value) == (Py_ssize_t)f->len &&
           memcmp(PyUnicode_DATA(value), f->value, f->len) == 0;
}

/* Whether n bytes are all ASCII (eight at a time). */
static int all_ascii(const uint8_t *s, size_t n)
{
    uint64_t acc = 0, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        acc |= w;
    }
    for (; i < n; i++) acc |= s[i];
    return (acc & 0x8080808080808080ULL) == 0;
}

/* The value of field f as a str (new reference; NULL and an exception:
 * FieldDecodeError where it does not decode).  *same (if not NULL) set
 * when the value can stand for the stored bytes (value_is_raw).  ASCII
 * bytes decode to themselves under UTF-8, Latin-1, ASCII and the code
 * pages whose table says so (ascii_same) whatever the error handler (no
 * byte is in error), so such a value is made by one check and one copy,
 * and is its bytes without comparing them: a tenth of a scan with
 * rec.fields.  One byte goes through the codec, which shares CPython's
 * one-character strings. */
static PyObject *decode(RecordObject *self, decoder *d,
                        const pydb_field *f, int *same)
{
    const char *s = (const char *)f->value;
    PyObject *v;
    if (d->c->ascii_same && f->len > 1) {
        /* ASCII bytes decode to themselves (see above), and under Latin-1
         * every byte decodes to the character of the same code: a str of
         * one-byte characters that are the bytes, ASCII or not (what the
         * codec makes, without its scan for the largest character) */
        int ascii = all_ascii(f->value, f->len);
        if (ascii || d->c->kind == CODEC_LATIN1) {
            v = PyUnicode_New((Py_ssize_t)f->len, ascii ? 127 : 255);
            if (v) memcpy(PyUnicode_DATA(v), s, f->len);
            if (v && same) *same = 1;
            return v;
        }
    }
    if (decoder_names(d, self) < 0) return NULL;
    switch (d->c->kind) {
    case CODEC_UTF8: v = PyUnicode_DecodeUTF8(s, f->len, d->errors); break;
    case CODEC_LATIN1: v = PyUnicode_DecodeLatin1(s, f->len, d->errors); break;
    case CODEC_ASCII: v = PyUnicode_DecodeASCII(s, f->len, d->errors); break;
    case CODEC_CHARMAP:
        v = PyUnicode_DecodeCharmap(s, f->len, d->c->table, d->errors);
        break;
    default: v = PyUnicode_Decode(s, f->len, d->encoding, d->errors);
    }
    if (!v) return decode_failed(self, d->encoding, f);
    if (same) *same = value_is_raw(v, f);
    return v;
}

/* The tag as an int: a shared one from the module's table for the tags
 * most databases use (CPython caches only 0..256), else a new one. */
static PyObject *tag_int(module_state *st, uint32_t tag)
{
    if (tag < (uint32_t)PyTuple_GET_SIZE(st->tag_ints))
        return Py_NewRef(PyTuple_GET_ITEM(st->tag_ints, tag));
    return PyLong_FromUnsignedLong(tag);
}

/* Freed Fields kept for the next field_new() (where field_fast holds),
 * as CPython keeps freed tuples: a record's Fields die together and the
 * next record's are made at once, so a scan would otherwise allocate and
 * free two objects per field (the Field and its str), of which the
 * Field's memory is now reused, its GC bookkeeping skipped (measured:
 * 12% of a scan with rec.fields, docs/architecture.md).  Only the main
 * interpreter's Fields (field_free_type, set by record_exec()) go on the
 * list: a subinterpreter may have an allocator of its own.  The GIL
 * guards it (the module allows only interpreters that share the main
 * one's GIL: no Py_mod_multiple_interpreters slot); a free-threaded
 * build keeps no list.  A Field on the list holds no reference, its own
 * type's included (field_dealloc dropped them), so the list never keeps
 * a module alive. */
#ifndef Py_GIL_DISABLED
#define FIELD_FREE_MAX 2048
static PyTupleObject *field_free[FIELD_FREE_MAX];
static int field_nfree;
static PyTypeObject *field_free_type;   /* the main interpreter's Field */

/* The main interpreter's Fields are allocated by field_new() itself with
 * PyObject_Malloc() (where field_presize is not 0): the block
 * PyObject_GC_NewVar() would take, its GC header (the `field_presize`
 * bytes before the object) zeroed, which is how the collector's header
 * reads for an object it does not track (CPython 3.11-3.13: gc_link()),
 * but not counted among the collector's allocations, which for a Field,
 * never tracked (field_new), only brought collections with nothing of
 * its to collect: cachegrind counted 9% fewer instructions and 7% fewer
 * L1 data misses on ten scans of the lilacs sample that keep every
 * Field to the scan's end (docs/architecture.md, "Data flow").  Such a
 * block is freed with PyObject_Free() (field_memory_free); a Field
 * Python made was counted, and goes back through the collector
 * (field_dealloc).  0: Fields are made and freed through the
 * collector's functions (field_presize_of() found another header). */
static size_t field_presize;
static size_t field_size;               /* bytes from the object on */
#endif

/* A Field (tag, value, raw), taking the three references (any NULL:
 * an exception is set; the others are released and NULL returned).
 * `lazy`: no raw is given (raw NULL, no exception): the value is a str
 * of one-byte characters whose codes are the stored bytes (value_is_raw),
 * which Field.raw builds when asked (field_raw; only where field_lazy
 * holds).
 * PyStructSequence_New() looks up two sizes in the type's dict on every
 * call (CPython 3.11-3.13: a fifth of Record.fields).  A structseq is a
 * tuple whose hidden fields follow the visible ones, ob_size counting
 * only the visible; record_exec() checks that a Field made by
 * PyStructSequence_New() has exactly that shape (field_fast), else this
 * takes the slow path.  A Field holds an int, a str and a bytes, so it
 * can be in no reference cycle: it is not tracked by the collector (as
 * CPython itself untracks such tuples), which then never visits it. */
static PyObject *field_new(module_state *st, PyObject *tag, PyObject *value,
                           PyObject *raw, int lazy)
{
    PyTupleObject *t;
    if (!tag || !value || (!raw && !lazy)) goto fail;
    if (st->field_fast) {
#ifndef Py_GIL_DISABLED
        if (field_nfree && st->field_type == field_free_type) {
            t = field_free[--field_nfree];
            (void)PyObject_InitVar((PyVarObject *)t, st->field_type, 2);
        } else if (field_presize && st->field_type == field_free_type) {
            char *m = PyObject_Malloc(field_presize + field_size);
            if (!m) {
                PyErr_NoMemory();
                goto fail;
            }
            memset(m, 0, field_presize);
            t = (PyTupleObject *)(m + field_presize);
            (void)PyObject_InitVar((PyVarObject *)t, st->field_type, 2);
        } else
#endif
        {
            t = PyObject_GC_NewVar(PyTupleObject, st->field_type, 3);
            if (!t) goto fail;
            Py_SET_SIZE(t, 2);
        }
    } else {
        t = (PyTupleObject *)PyStructSequence_New(st->field_type);
        if (!t) goto fail;
    }
    t->ob_item[0] = tag;
    t->ob_item[1] = value;
    t->ob_item[2] = raw;
    return (PyObject *)t;
fail:
    Py_XDECREF(tag);
    Py_XDECREF(value);
    Py_XDECREF(raw);
    return NULL;
}

/* Field.raw (new reference): the hidden item, or for a Field made
 * without it (field_new's `lazy`) the codes of its value's one-byte
 * characters (value_is_raw). */
static PyObject *field_raw(PyObject *self, void *closure)
{
    PyTupleObject *t = (PyTupleObject *)self;
    PyObject *value = t->ob_item[1];
    (void)closure;
    if (t->ob_item[2]) return Py_NewRef(t->ob_item[2]);
    return PyBytes_FromStringAndSize((const char *)PyUnicode_DATA(value),
                                     PyUnicode_GET_LENGTH(value));
}

/* Field.__reduce__: structseq's, with raw taken through field_raw (the
 * structseq's own reads the hidden item as stored, NULL included). */
static PyObject *field_reduce(PyObject *self, PyObject *unused)
{
    PyTupleObject *t = (PyTupleObject *)self;
    PyObject *raw = field_raw(self, NULL), *out;
    (void)unused;
    if (!raw) return NULL;
    out = Py_BuildValue("(O((OO){sN}))", (PyObject *)Py_TYPE(self),
                        t->ob_item[0], t->ob_item[1], "raw", raw);
    return out;
}

#if PY_VERSION_HEX >= 0x030D0000
/* Field.__replace__ (copy.replace, 3.13): structseq's, with raw taken
 * through field_raw. */
static PyObject *field_replace(PyObject *self, PyObject *args,
                               PyObject *kwargs)
{
    PyTupleObject *t = (PyTupleObject *)self;
    static const char *names[] = {"tag", "value", "raw"};
    PyObject *v[3] = {NULL, NULL, NULL}, *out = NULL;
    Py_ssize_t used = 0;
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "__replace__() takes no "
                        "positional arguments");
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        PyObject *x = kwargs ? PyDict_GetItemString(kwargs, names[i]) : NULL;
        if (x) used++;
        v[i] = x ? Py_NewRef(x)
                 : i < 2 ? Py_NewRef(t->ob_item[i]) : field_raw(self, NULL);
        if (!v[i]) goto cleanup;
    }
    if (kwargs && PyDict_GET_SIZE(kwargs) > used) {
        PyErr_SetString(PyExc_TypeError, "__replace__() got an unexpected "
                        "field name");
        goto cleanup;
    }
    out = PyObject_CallFunction((PyObject *)Py_TYPE(self), "(OO){sO}", v[0],
                                v[1], "raw", v[2]);
cleanup:
    for (int i = 0; i < 3; i++) Py_XDECREF(v[i]);
    return out;
}
#endif

/* Free the memory of Field `self` of type `tp` that field_new() made or
 * the free list kept (its references dropped already): PyObject_Free()
 * for the main interpreter's where field_new() allocates them
 * (field_presize), else the collector's function. */
static void field_memory_free(PyObject *self, PyTypeObject *tp)
{
#ifndef Py_GIL_DISABLED
    if (field_presize && tp == field_free_type) {
        PyObject_Free((char *)self - field_presize);
        return;
    }
#endif
    (void)tp;
    PyObject_GC_Del(self);
}

/* tp_dealloc of Field where field_fast holds: structseq_dealloc()'s, less
 * its lookup of the real size in the type's dict (CPython 3.11-3.13: a
 * third of freeing a Field), the memory kept on field_free while there
 * is room.  Every Field has the three items and the same size, any made
 * by Python too (structseq_new fills the hidden one with None). */
static void field_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyTupleObject *t = (PyTupleObject *)self;
    /* tracked: a Field Python made (Field(...), unpickling, __replace__:
     * structseq_new), which the collector counted and tracked when it was
     * allocated; it goes back through the collector, which takes it off
     * its count (freed as field_new()'s are, it stayed counted: 10,000
     * such Fields added 10,002 to it, a review found) */
    int by_python = PyObject_GC_IsTracked(self);
    PyObject_GC_UnTrack(self);
    Py_XDECREF(t->ob_item[0]);
    Py_XDECREF(t->ob_item[1]);
    Py_XDECREF(t->ob_item[2]);
    if (by_python)
        PyObject_GC_Del(self);
#ifndef Py_GIL_DISABLED
    else if (tp == field_free_type && field_nfree < FIELD_FREE_MAX)
        field_free[field_nfree++] = t;
#endif
    else
        field_memory_free(self, tp);
    Py_DECREF(tp);
}

/* Whether field_new() may build Fields itself and field_dealloc() free
 * them (see there). */
static int field_shape_known(module_state *st)
{
    PyTypeObject *tp = st->field_type;
    PyObject *probe;
    int ok;
    /* the items at a tuple's ob_item, and nothing else in the header:
     * CPython 3.13 counts a structseq's hidden items in its basicsize
     * (Objects/structseq.c), Field's one (raw) included; 3.14's tuples
     * cache their hash (ob_hash), which field_new() does not set, so
     * there the slow path is taken */
    Py_ssize_t want = (Py_ssize_t)offsetof(PyTupleObject, ob_item);
#if PY_VERSION_HEX >= 0x030E0000
    return 0;
#endif
#if PY_VERSION_HEX >= 0x030D0000
    want += (Py_ssize_t)sizeof(PyObject *);
#endif
    if (tp->tp_itemsize != sizeof(PyObject *) || tp->tp_basicsize != want ||
        !(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
        (tp->tp_flags & Py_TPFLAGS_BASETYPE))
        return 0;
    probe = PyStructSequence_New(tp);
    if (!probe) {
        PyErr_Clear();
        return 0;
    }
    ok = Py_SIZE(probe) == 2;
    Py_DECREF(probe);   /* its items are NULL: dealloc skips them */
    return ok;
}

#ifndef Py_GIL_DISABLED
/* The bytes CPython keeps before each object of the Field type `tp`, as
 * sys.getsizeof() counts them beyond __sizeof__() (the collector's
 * header), into *presize where they are the two words field_new() can
 * write as an untracked object's header, else 0 (Fields are then made
 * through the collector's functions).  0, or -1 and an exception. */
static int field_presize_of(PyTypeObject *tp, size_t *presize)
{
    PyObject *getsizeof = NULL, *probe = NULL, *all = NULL, *own = NULL;
    Py_ssize_t pre;
    int rc = -1;
    *presize = 0;
    getsizeof = Py_XNewRef(PySys_GetObject("getsizeof"));   /* borrowed */
    if (!getsizeof) {
        rc = 0;   /* no sys.getsizeof (an embedder's sys): made as before */
        goto cleanup;
    }
    probe = PyStructSequence_New(tp);   /* items NULL: dealloc skips them */
    if (!probe) goto cleanup;
    all = PyObject_CallOneArg(getsizeof, probe);
    if (!all) goto cleanup;
    own = PyObject_CallMethod(probe, "__sizeof__", NULL);
    if (!own) goto cleanup;
    pre = PyLong_AsSsize_t(all) - PyLong_AsSsize_t(own);
    if (PyErr_Occurred()) goto cleanup;
    if (pre == (Py_ssize_t)(2 * sizeof(void *))) *presize = (size_t)pre;
    rc = 0;
cleanup:
    Py_XDECREF(own);
    Py_XDECREF(all);
    Py_XDECREF(probe);
    Py_XDECREF(getsizeof);
    return rc;
}
#endif

/* The Field of fl (new reference; NULL and an exception): the one its
 * codec's table holds for the same tag and bytes (Fields seen), else a
 * new one, which the table notes (seen_note). */
static PyObject *field_of(module_state *st, RecordObject *self,
                          decoder *d, const pydb_field *fl)
{
    struct seen_key k;
    struct seen_slot *s;
    PyObject *tag, *value, *raw = NULL;
    PyObject *f = seen_lookup(self->codec.seen_at, fl, &s, &k);
    int lazy = 0;
    if (f) return f;
    tag = tag_int(st, fl->tag);
    value = tag ? decode(self, d, fl, &lazy) : NULL;
    lazy = value && lazy && st->field_lazy;
    if (value && !lazy)
        raw = PyBytes_FromStringAndSize((const char *)fl->value, fl->len);
    f = field_new(st, tag, value, raw, lazy);
    if (f && s) seen_note(s, &k, f);
    return f;
}

static PyObject *record_fields(RecordObject *self, void *closure)
{
    module_state *st = state_of_type(Py_TYPE(self));
    pydb_record *r = self->rec;
    decoder d;
    PyObject *t;
    (void)closure;
    if (!st) return NULL;
    decoder_init(&d, self);
    t = PyTuple_New(r->nfields);
    if (!t) return NULL;
    for (uint32_t i = 0; i < r->nfields; i++) {
        PyObject *f = field_of(st, self, &d, &r->fields[i]);
        if (!f) goto fail;
        PyTuple_SET_ITEM(t, i, f);
    }
    /* a tuple of Fields can be in no cycle either (field_new) */
    PyObject_GC_UnTrack(t);
    return t;
fail:
    Py_DECREF(t);
    return NULL;
}

static int tag_arg(PyObject *arg, unsigned long *tag)
{
    if (!PyLong_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "a tag is an int, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    *tag = PyLong_AsUnsignedLong(arg);
    if (*tag == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        *tag = 0x7FFFFFFF;  /* negative or huge: matches no field */
    }
    return 0;
}

/* Values of the fields with `tag`, decoded (raw=0) or as bytes (raw=1). */
static PyObject *record_values(RecordObject *self, unsigned long tag, int raw)
{
    pydb_record *r = self->rec;
    decoder d;
    PyObject *list;
    decoder_init(&d, self);
    list = PyList_New(0);
    if (!list) return NULL;
    for (uint32_t i = 0; i < r->nfields; i++) {
        PyObject *v;
        if (r->fields[i].tag != tag) continue;
        v = raw ? PyBytes_FromStringAndSize((const char *)r->fields[i].value,
                                            r->fields[i].len)
                : decode(self, &d, &r->fields[i], NULL);
        if (!v || PyList_Append(list, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(v);
    }
    return list;
}

static PyObject *record_getitem(RecordObject *self, PyObject *key)
{
    unsigned long tag;
    if (tag_arg(key, &tag) < 0) return NULL;
    return record_values(self, tag, 0);
}

static PyObject *record_raw(RecordObject *self, PyObject *key)
{
    unsigned long tag;
    if (tag_arg(key, &tag) < 0) return NULL;
    return record_values(self, tag, 1);
}

static PyObject *record_get(RecordObject *self, PyObject *const *args,
                            Py_ssize_t nargs)
{
    unsigned long tag;
    pydb_record *r = self->rec;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(tag, default=None)");
        return NULL;
    }
    if (tag_arg(args[0], &tag) < 0) return NULL;
    for (uint32_t i = 0; i < r->nfields; i++) {
        decoder d;
        if (r->fields[i].tag != tag) continue;
        decoder_init(&d, self);
        return decode(self, &d, &r->fields[i], NULL);
    }
    return Py_NewRef(nargs == 2 ? args[1] : Py_None);
}

static int record_contains(RecordObject *self, PyObject *key)
{
    unsigned long tag;
    if (tag_arg(key, &tag) < 0) return -1;
    for (uint32_t i = 0; i < self->rec->nfields; i++)
        if (self->rec->fields[i].tag == tag) return 1;
    return 0;
}

static Py_ssize_t record_len(RecordObject *self)
{
    return (Py_ssize_t)self->rec->nfields;
}

static PyObject *record_tags(RecordObject *self, void *closure)
{
    module_state *st = state_of_type(Py_TYPE(self));
    PyObject *t;
    (void)closure;
    if (!st) return NULL;
    t = PyTuple_New(self->rec->nfields);
    if (!t) return NULL;
    for (uint32_t i = 0; i < self->rec->nfields; i++) {
        PyObject *v = tag_int(st, self->rec->fields[i].tag);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

#define RECORD_INT_GETTER(name, expr)                                   \
    static PyObject *record_get_##name(RecordObject *self, void *c)     \
    {                                                                   \
        (void)c;                                                        \
        return PyLong_FromLongLong((long long)(expr));                  \
    }
#define RECORD_BOOL_GETTER(name, expr)                                  \
    static PyObject *record_get_##name(RecordObject *self, void *c)     \
    {                                                                   \
        (void)c;                                                        \
        return PyBool_FromLong((long)(expr));                           \
    }
RECORD_INT_GETTER(mfn, self->rec->mfn)
RECORD_INT_GETTER(status, self->rec->status)
RECORD_INT_GETTER(offset, self->rec->offset)
RECORD_INT_GETTER(mfrl, self->rec->mfrl)
RECORD_BOOL_GETTER(deleted, self->rec->deleted)
RECORD_BOOL_GETTER(locked, self->rec->locked)
RECORD_BOOL_GETTER(pending, self->rec->flags & PYDB_FLAG_PENDING)
RECORD_BOOL_GETTER(new, self->rec->flags & PYDB_FLAG_NEW)

static PyObject *record_get_back_offset(RecordObject *self, void *c)
{
    (void)c;
    if (self->rec->back_offset < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->rec->back_offset);
}

static PyObject *record_get_encoding(RecordObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->encoding);
}

static PyGetSetDef record_getset[] = {
    {"mfn", (getter)record_get_mfn, NULL, "MFN, 1-based (int).", NULL},
    {"status", (getter)record_get_status, NULL,
     "Leader STATUS: 0 active, 1 logically deleted (int).", NULL},
    {"deleted", (getter)record_get_deleted, NULL,
     "True if logically deleted (negated XRF pointer; for a back version, "
     "STATUS 1).", NULL},
    {"locked", (getter)record_get_locked, NULL,
     "True if MFRL was stored negative (CDS/ISIS record lock sign).", NULL},
    {"pending", (getter)record_get_pending, NULL,
     "XRF flag 0x200: update pending (inverted file not yet updated).",
     NULL},
    {"new", (getter)record_get_new, NULL,
     "XRF flag 0x400: new record, not yet inverted.", NULL},
    {"offset", (getter)record_get_offset, NULL,
     "Byte offset of this version in the .mst (int).", NULL},
    {"back_offset", (getter)record_get_back_offset, NULL,
     "Byte offset of the previous version (MFBWB/MFBWP), or None.", NULL},
    {"mfrl", (getter)record_get_mfrl, NULL,
     "Record length in bytes, abs(MFRL), padding included (int).", NULL},
    {"fields", (getter)record_fields, NULL,
     "All fields in stored order: tuple of Field(tag, value); each Field "
     "also has .raw (bytes).  Records of one handle may share one Field "
     "for an equal value of 16 bytes or less.  Raises FieldDecodeError (a "
     "UnicodeDecodeError) for a value the encoding cannot decode with the "
     "handle's error handler.", NULL},
    {"tags", (getter)record_tags, NULL,
     "Tags of the fields in stored order (tuple of int).", NULL},
    {"encoding", (getter)record_get_encoding, NULL,
     "Encoding used to decode values (str).", NULL},
    {NULL}};

/* Record.__reduce__: (_pydb._record_rebuild, (mfn, status, deleted,
 * flags, offset, back_offset, mfrl, locked, encoding, errors, source,
 * ((tag, stored bytes), ...))), so that a record pickles (to a worker
 * process of multiprocessing, say) and copies as the version read: its
 * header and its stored bytes, decoded again where it is unpickled. */
static PyObject *record_reduce(RecordObject *self, PyObject *unused)
{
    const pydb_record *r = self->rec;
    PyObject *mod, *fn = NULL, *fields = NULL, *out = NULL;
    (void)unused;
    mod = PyType_GetModuleByDef(Py_TYPE(self), &pydb_module); /* borrowed */
    if (!mod) return NULL;
    fn = PyObject_GetAttrString(mod, "_record_rebuild");
    fields = fn ? PyTuple_New(r->nfields) : NULL;
    if (!fields) goto cleanup;
    for (uint32_t i = 0; i < r->nfields; i++) {
        PyObject *item = Py_BuildValue("(Iy#)", (unsigned)r->fields[i].tag,
                                       (const char *)r->fields[i].value,
                                       (Py_ssize_t)r->fields[i].len);
        if (!item) goto cleanup;
        PyTuple_SET_ITEM(fields, i, item);
    }
    out = Py_BuildValue("(O(iiiiLLIiOOOO))", fn, (int)r->mfn, r->status,
                        r->deleted, r->flags, (long long)r->offset,
                        (long long)r->back_offset, (unsigned)r->mfrl,
                        r->locked, self->encoding, self->errors,
                        self->source, fields);
cleanup:
    Py_XDECREF(fn);
    Py_XDECREF(fields);
    return out;
}

static PyMethodDef record_methods[] = {
    {"__reduce__", (PyCFunction)record_reduce, METH_NOARGS,
     "Pickle support: the record's header and stored bytes."},
    {"raw", (PyCFunction)record_raw, METH_O,
     "raw($self, tag, /)\n--\n\nValues of the fields with `tag` as bytes, "
     "in occurrence order (list of bytes; empty if none)."},
    {"get", (PyCFunction)(void (*)(void))record_get, METH_FASTCALL,
     "get($self, tag, default=None, /)\n--\n\nFirst occurrence of `tag` "
     "as str, or `default`."},
    {NULL}};

static PyType_Slot record_slots[] = {
    {Py_tp_dealloc, record_dealloc},
    {Py_tp_getset, record_getset},
    {Py_tp_methods, record_methods},
    {Py_mp_subscript, record_getitem},
    {Py_mp_length, record_len},
    {Py_sq_contains, record_contains},
    {Py_tp_doc, "A record version read from a master file (see pydb.Record)."},
    {0, NULL}};

/* No instances made by Python (Record() or Record.__new__): a Record
 * always owns a pydb_record, which every method reads (one made without
 * it crashed them, and pickling it, found by a code review). */
static PyType_Spec record_spec = {
    "pydb._pydb.Record", sizeof(RecordObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE |
        Py_TPFLAGS_DISALLOW_INSTANTIATION,
    record_slots};

static PyStructSequence_Field field_fields[] = {
    {"tag", "field tag (int, 1..65535)"},
    {"value", "value decoded with the database's encoding (str)"},
    {"raw", "value as stored (bytes)"},
    {NULL}};

static PyStructSequence_Desc field_desc = {
    "pydb.Field", "A field of a record: (tag, value), with .raw bytes.",
    field_fields, 2};


/* Whether instances of `tp`, a subclass of Record that the collector
 * tracks, hold nothing but what a Record holds: strings, its codec's
 * table and capsule, its pydb_record, and its class.  A subclass that
 * adds a __dict__ or a slot may hold anything.  __weakref__ counts as a
 * slot: from CPython 3.12 it (like __dict__ from 3.11) may be kept
 * before the object, its flag set and the size unchanged (a review: on
 * 3.13, __slots__ = ("__weakref__",) passed the size test alone). */
static int record_class_atomic(module_state *st, PyTypeObject *tp)
{
    unsigned long managed = 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
    managed |= Py_TPFLAGS_MANAGED_DICT;
#endif
#ifdef Py_TPFLAGS_MANAGED_WEAKREF
    managed |= Py_TPFLAGS_MANAGED_WEAKREF;
#endif
    return PyType_IS_GC(tp) && tp->tp_dictoffset == 0 &&
           tp->tp_weaklistoffset == st->record_type->tp_weaklistoffset &&
           !(tp->tp_flags & managed) &&
           tp->tp_basicsize == st->record_type->tp_basicsize;
}

/* _set_record_class(cls, untracked=False): the class of the records read
 * from now on; with `untracked`, they are not tracked by the collector,
 * as CPython leaves a tuple of atomic items untracked, so that a scan
 * that keeps its records no longer has each collection walk all of them
 * (13% of list(db) on the lilacs sample).  Only for a class that adds no
 * __dict__ and no slot and lives as long as the module (pydb.Record):
 * the one cycle such a record can be in runs through its class (a record
 * stored as an attribute of the class), and that keeps it no longer than
 * a module global would. */
static PyObject *mod_set_record_class(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    PyObject *cls;
    int untracked = 0;
    if (!PyArg_ParseTuple(args, "O|p:_set_record_class", &cls, &untracked))
        return NULL;
    if (!PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject *)cls, st->record_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a subclass of Record");
        return NULL;
    }
    if (untracked && !record_class_atomic(st, (PyTypeObject *)cls)) {
        PyErr_SetString(PyExc_ValueError, "only a class that adds no "
                        "__dict__ and no slot may have untracked records");
        return NULL;
    }
    /* the kept Records freed while their class is surely alive */
    record_free_reset(untracked ? (PyTypeObject *)cls : NULL);
    Py_XSETREF(st->record_class, (PyTypeObject *)Py_NewRef(cls));
    st->record_untracked = untracked;
    Py_RETURN_NONE;
}

/* _record_rebuild(mfn, status, deleted, flags, offset, back_offset, mfrl,
 * locked, encoding, errors, source, fields): the Record that
 * Record.__reduce__ took apart (record_reduce), an instance of the
 * record class.  TypeError / ValueError for parts that are not such,
 * LookupError for an encoding or error handler Python does not know. */
static PyObject *mod_record_rebuild(PyObject *m, PyObject *args)
{
    module_state *st = PyModule_GetState(m);
    pydb_record head, *rec = NULL;
    pydb_field *f = NULL;
    record_codec codec = {0};
    PyObject *encoding, *errors, *source, *fields, *handler, *out = NULL;
    long long offset, back;
    unsigned int mfrl;
    const char *name;
    Py_ssize_t name_len;
    int mfn, status, deleted, flags, locked, rc;
    Py_ssize_t n;
    pydb_error e;

    memset(&head, 0, sizeof head);
    if (!PyArg_ParseTuple(args, "iiiiLLIiUUUO!:_record_rebuild", &mfn,
                          &status, &deleted, &flags, &offset, &back, &mfrl,
                          &locked, &encoding, &errors, &source, &PyTuple_Type,
                          &fields))
        return NULL;
    n = PyTuple_GET_SIZE(fields);
    if (n > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many fields");
        return NULL;
    }
    f = PyMem_Calloc(n ? (size_t)n : 1, sizeof *f);
    if (!f) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(fields, i), *tag_o, *raw;
        unsigned long tag;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyLong_Check(tag_o = PyTuple_GET_ITEM(item, 0)) ||
            !PyBytes_Check(raw = PyTuple_GET_ITEM(item, 1)) ||
            PyBytes_GET_SIZE(raw) > (Py_ssize_t)UINT32_MAX) {
            PyErr_SetString(PyExc_TypeError, "a record's fields are (tag, "
                            "bytes) pairs");
            goto cleanup;
        }
        tag = PyLong_AsUnsignedLong(tag_o);
        if (tag == (unsigned long)-1 && PyErr_Occurred()) goto cleanup;
        if (tag > 65535) {
            PyErr_SetString(PyExc_ValueError, "a tag is 0..65535");
            goto cleanup;
        }
        f[i].tag = (uint32_t)tag;
        f[i].len = (uint32_t)PyBytes_GET_SIZE(raw);
        f[i].value = (const uint8_t *)PyBytes_AS_STRING(raw);
    }
    head.mfn = mfn;
    head.status = status;
    head.deleted = deleted;
    head.flags = flags;
    head.offset = offset;
    head.back_offset = back;
    head.mfrl = mfrl;
    head.locked = locked;
    /* NULL would mean "strict"; a NUL inside names another handler */
    name = PyUnicode_AsUTF8AndSize(errors, &name_len);
    if (name && strlen(name) != (size_t)name_len) {
        PyErr_SetString(PyExc_ValueError, "embedded null character in "
                        "errors");
        goto cleanup;
    }
    if (!name || !(handler = PyCodec_LookupError(name))) goto cleanup;
    Py_DECREF(handler);
    if (codec_lookup(st, encoding, &codec) < 0) goto cleanup;
    if (codec.kind == CODEC_OTHER &&
        !PyCodec_KnownEncoding(PyUnicode_AsUTF8(encoding))) {
        PyErr_Format(PyExc_LookupError, "unknown encoding: %U", encoding);
        goto cleanup;
    }
    rc = pydb_record_make(&rec, &head, f, (uint32_t)n, &e);
    if (rc) {
        set_error(st, rc, &e);
        goto cleanup;
    }
    out = record_new_from(st, encoding, errors, source, &codec, rec);
cleanup:
    record_codec_clear(&codec);
    PyMem_Free(f);
    return out;
}

static PyMethodDef record_functions[] = {
    {"_record_rebuild", mod_record_rebuild, METH_VARARGS,
     "_record_rebuild(mfn, status, deleted, flags, offset, back_offset, "
     "mfrl, locked, encoding, errors, source, fields, /)\n--\n\nThe "
     "Record that Record.__reduce__ took apart (unpickling)."},
    {"_set_record_class", mod_set_record_class, METH_VARARGS,
     "_set_record_class(cls, untracked=False, /)\n--\n\nMake the binding "
     "create instances of `cls`, a subclass of Record (pydb.Record), for "
     "the records it reads; with `untracked`, instances the cycle "
     "collector does not track (ValueError for a class that adds a "
     "__dict__ or a slot; only for a class that lives as long as the "
     "module)."},
    {NULL}};

/* ------------------------------------------------ the field converter */

void fields_reset(fieldbuf *b)
{
    while (b->nkeep) Py_DECREF(b->keep[--b->nkeep]);
    b->n = 0;
}

void fields_free(fieldbuf *b)
{
    fields_reset(b);
    PyMem_Free(b->v);
    PyMem_Free(b->keep);
    b->v = NULL;
    b->keep = NULL;
    b->cap = b->keepcap = 0;
}

/* Room for `more` fields (and as many kept references). */
static int fields_reserve(fieldbuf *b, size_t more)
{
    if (b->n + more > b->cap) {
        size_t cap = (b->n + more) * 2;
        pydb_field *v = PyMem_Realloc(b->v, cap * sizeof *v);
        if (!v) goto nomem;
        b->v = v;
        b->cap = cap;
    }
    if (b->nkeep + more > b->keepcap) {
        size_t cap = (b->nkeep + more) * 2;
        PyObject **k = PyMem_Realloc(b->keep, cap * sizeof *k);
        if (!k) goto nomem;
        b->keep = k;
        b->keepcap = cap;
    }
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

/* The UnicodeEncodeError now set by the encoding of field i (1-based
 * i + 1, tag t), raised again as FieldEncodeError (a pydb.Error and a
 * UnicodeEncodeError) naming the field and the tag (codec_error_as).
 * NULL. */
static PyObject *encode_failed(module_state *st, Py_ssize_t i,
                               unsigned long t, const char *encoding)
{
    return codec_error_as(st->FieldEncodeError, 0, encoding, "(nk)", i + 1,
                          t);
}

/* Value -> bytes (new reference), by the rule in _pydb_record.h; a str
 * that does not encode: FieldEncodeError (encode_failed, tag t). */
static PyObject *value_bytes(module_state *st, PyObject *v, Py_ssize_t i,
                             unsigned long t, const char *encoding,
                             const char *errors)
{
    if (PyBytes_Check(v)) return Py_NewRef(v);
    if (PyUnicode_Check(v)) {
        if (encoding) {
            PyObject *b = PyUnicode_AsEncodedString(v, encoding, errors);
            return b ? b : encode_failed(st, i, t, encoding);
        }
        PyErr_Format(PyExc_TypeError, "field %zd: a value is bytes here "
                     "(stored as given, no encoding), not str", i + 1);
        return NULL;
    }
    if (PyByteArray_Check(v) || PyMemoryView_Check(v))
        return PyBytes_FromObject(v);
    PyErr_Format(PyExc_TypeError, "field %zd: a field value is %s, not "
                 "%.100s", i + 1, encoding ? "str or bytes" : "bytes",
                 Py_TYPE(v)->tp_name);
    return NULL;
}

/* A dict {tag: value, or a list or tuple of values} (the shape of
 * Record.to_dict()) as a list of (tag, value) pairs: the tags in the
 * dict's order, each tag's values in theirs (new reference, or NULL and
 * an exception).  Tags and values are checked by fields_add() as for
 * any pair. */
static PyObject *pairs_of_dict(PyObject *d)
{
    PyObject *items = PyDict_Items(d), *out = NULL;
    if (!items) return NULL;
    out = PyList_New(0);
    if (!out) goto cleanup;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *kv = PyList_GET_ITEM(items, i);
        PyObject *tag = PyTuple_GET_ITEM(kv, 0);
        PyObject *vals = PyTuple_GET_ITEM(kv, 1);
        int many = PyList_Check(vals) || PyTuple_Check(vals);
        Py_ssize_t n = many ? PySequence_Fast_GET_SIZE(vals) : 1;
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *v = many ? PySequence_Fast_GET_ITEM(vals, j) : vals;
            PyObject *pair = PyTuple_Pack(2, tag, v);
            int rc = pair ? PyList_Append(out, pair) : -1;
            Py_XDECREF(pair);
            if (rc < 0) {
                Py_CLEAR(out);
                goto cleanup;
            }
        }
    }
cleanup:
    Py_DECREF(items);
    return out;
}

int fields_add(module_state *st, fieldbuf *b, PyObject *fields,
               const char *encoding, const char *errors)
{
    PyObject *seq = NULL, *src = fields, *held = NULL;
    Py_ssize_t n, i;
    int rc = -1;

    if (PyObject_TypeCheck(fields, st->record_type)) {
        src = PyObject_GetAttrString(fields, "fields");
        if (!src) return -1;
    } else {
        Py_INCREF(src);
    }
    if (PyUnicode_Check(src) || PyBytes_Check(src)) {
        PyErr_SetString(PyExc_TypeError, "fields must be an iterable of "
                        "(tag, value) pairs, not a string");
        Py_DECREF(src);
        return -1;
    }
    if (PyDict_Check(src)) {
        PyObject *pairs = pairs_of_dict(src);
        Py_DECREF(src);
        if (!pairs) return -1;
        src = pairs;
    }
    seq = PySequence_Fast(src, "fields must be an iterable of (tag, value) "
                               "pairs, a dict or a Record");
    Py_DECREF(src);
    if (!seq) return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > 65535) {
        PyErr_Format(st->RecordTooLargeError, "a record has at most 65535 "
                     "fields (NVF is 16-bit), not %zd", n);
        goto done;
    }
    if (fields_reserve(b, (size_t)n) < 0) goto done;
    for (i = 0; i < n; i++) {
        PyObject *item, *tag, *val, *bytes;
        pydb_field *f = &b->v[b->n];
        unsigned long t;
        if (i >= PySequence_Fast_GET_SIZE(seq)) {   /* a codec shrank it */
            PyErr_SetString(PyExc_RuntimeError, "fields changed size "
                            "during conversion");
            goto done;
        }
        item = PySequence_Fast_GET_ITEM(seq, i);
        if (Py_IS_TYPE(item, st->field_type)) {
            /* A Field of a Record: its stored bytes, whatever the codec
             * (field_raw: a new reference, or NULL with an exception). */
            tag = PyStructSequence_GetItem(item, 0);
            val = held = field_raw(item, NULL);
            if (!val) goto done;
        } else {
            if (!PyTuple_Check(item) && !PyList_Check(item)) {
                PyErr_Format(PyExc_TypeError, "field %zd: expected a (tag, "
                             "value) pair, not %.100s", i + 1,
                             Py_TYPE(item)->tp_name);
                goto done;
            }
            if (PySequence_Fast_GET_SIZE(item) != 2) {
                PyErr_Format(PyExc_ValueError, "field %zd: expected a (tag, "
                             "value) pair", i + 1);
                goto done;
            }
            tag = PySequence_Fast_GET_ITEM(item, 0);  /* tuple or list */
            val = PySequence_Fast_GET_ITEM(item, 1);
        }
        if (!PyLong_Check(tag) || PyBool_Check(tag)) {
            PyErr_Format(PyExc_TypeError, "field %zd: a tag is an int, not "
                         "%.100s", i + 1, Py_TYPE(tag)->tp_name);
            goto done;
        }
        t = PyLong_AsUnsignedLong(tag);
        if ((t == (unsigned long)-1 && PyErr_Occurred()) || t < 1 ||
            t > 65535) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "field %zd: tag %R is outside "
                         "1..65535", i + 1, tag);
            goto done;
        }
        /* `item` may be a list that other code changes: take the value
         * before anything can run Python code, and hold it (a Field's
         * raw is held already). */
        if (!held) held = Py_NewRef(val);
        bytes = value_bytes(st, val, i, t, encoding, errors);
        Py_CLEAR(held);
        if (!bytes) goto done;
        b->keep[b->nkeep++] = bytes;
        if (PyBytes_GET_SIZE(bytes) > 0x7FFFFFFF) {
            PyErr_Format(st->RecordTooLargeError, "field %zd is larger than "
                         "2 GiB", i + 1);
            goto done;
        }
        f->tag = (uint32_t)t;
        f->len = (uint32_t)PyBytes_GET_SIZE(bytes);
        f->value = (const uint8_t *)PyBytes_AS_STRING(bytes);
        b->n++;
    }
    rc = 0;
done:
    Py_XDECREF(held);
    Py_DECREF(seq);
    return rc;
}

/* ------------------------------------------------------------- exec */

static PyGetSetDef field_raw_def = {
    "raw", field_raw, NULL, "value as stored (bytes)", NULL};
static PyMethodDef field_method_defs[] = {
    {"__reduce__", field_reduce, METH_NOARGS, NULL},
#if PY_VERSION_HEX >= 0x030D0000
    {"__replace__", (PyCFunction)(void (*)(void))field_replace,
     METH_VARARGS | METH_KEYWORDS, NULL},
#endif
    {NULL}};

/* Let Fields leave raw to be built when asked (field_new's `lazy`):
 * Field.raw, __reduce__ and __replace__ replaced by ones that build it,
 * since structseq's read the hidden item as stored.  1, or 0 (nothing
 * changed, no exception: Fields keep their bytes). */
static int field_make_lazy(PyTypeObject *tp)
{
    PyObject *d = PyDescr_NewGetSet(tp, &field_raw_def);
    int ok = d && PyObject_SetAttrString((PyObject *)tp, "raw", d) == 0;
    Py_XDECREF(d);
    for (PyMethodDef *m = field_method_defs; ok && m->ml_name; m++) {
        d = PyDescr_NewMethod(tp, m);
        ok = d && PyObject_SetAttrString((PyObject *)tp, m->ml_name, d) == 0;
        Py_XDECREF(d);
    }
    if (!ok) PyErr_Clear();
    return ok;
}

/* The main interpreter's module going away: the free list's Fields are
 * freed and the list serves no type until a module is executed again,
 * so that no later type allocated at the old one's address takes their
 * memory. */
void record_clear(module_state *st)
{
#ifndef Py_GIL_DISABLED
    if (st->field_type && st->field_type == field_free_type) {
        while (field_nfree)
            field_memory_free((PyObject *)field_free[--field_nfree],
                              field_free_type);
        field_free_type = NULL;
        field_presize = 0;
    }
    if (st == record_spare_owner) {
        while (record_nspare) pydb_record_free(record_spare[--record_nspare]);
        record_spare_owner = NULL;
    }
    if (record_free_type && st->record_class == record_free_type)
        record_free_reset(NULL);
#else
    (void)st;
#endif
}

PyObject *record_test_codec(module_state *st, PyObject *rec)
{
    static const char *const names[] = {"other", "utf-8", "latin-1", "ascii",
                                        "charmap"};
    const record_codec *c;
    if (!PyObject_TypeCheck(rec, st->record_type)) {
        PyErr_SetString(PyExc_TypeError, "a Record");
        return NULL;
    }
    c = &((RecordObject *)rec)->codec;
    return Py_BuildValue("sO", names[c->kind], c->ascii_same ? Py_True : Py_False);
}

PyObject *record_test_seen_slot(unsigned int tag, PyObject *value)
{
    struct seen_key k;
    pydb_field f;
    if (PyBytes_GET_SIZE(value) > SEEN_MAX) Py_RETURN_NONE;
    f.tag = tag;
    f.len = (uint32_t)PyBytes_GET_SIZE(value);
    f.value = (const uint8_t *)PyBytes_AS_STRING(value);
    return PyLong_FromUnsignedLong(seen_key_of(&f, &k));
}

PyObject *record_test_free_list(module_state *st, int clear)
{
    if (clear) record_clear(st);
#ifndef Py_GIL_DISABLED
    return Py_BuildValue("iO", field_nfree,
                         field_free_type && field_free_type == st->field_type
                             ? Py_True : Py_False);
#else
    return Py_BuildValue("iO", 0, Py_False);
#endif
}

PyObject *record_test_records_kept(module_state *st)
{
#ifndef Py_GIL_DISABLED
    return Py_BuildValue("iO", record_nfree,
                         record_free_type &&
                                 record_free_type == st->record_class
                             ? Py_True : Py_False);
#else
    (void)st;
    return Py_BuildValue("iO", 0, Py_False);
#endif
}

PyObject *record_test_spares(void)
{
    PyObject *out = PyList_New(0);
#ifndef Py_GIL_DISABLED
    for (int i = 0; out && i < record_nspare; i++) {
        PyObject *n = PyLong_FromSize_t(record_spare[i]->capacity);
        if (!n || PyList_Append(out, n) < 0) Py_CLEAR(out);
        Py_XDECREF(n);
    }
#endif
    return out;
}

int record_exec(PyObject *m, module_state *st)
{
    PyObject *enc;
    st->record_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(m, &record_spec, NULL);
    if (!st->record_type) return -1;
    st->record_class = (PyTypeObject *)Py_NewRef(st->record_type);
    st->record_untracked = 0;
    st->field_type = PyStructSequence_NewType(&field_desc);
    if (!st->field_type) return -1;
    st->field_fast = field_shape_known(st);
    if (st->field_fast) {
        st->field_type->tp_dealloc = field_dealloc;
        PyType_Modified(st->field_type);
        st->field_lazy = field_make_lazy(st->field_type);
#ifndef Py_GIL_DISABLED
        if (PyInterpreterState_Get() == PyInterpreterState_Main()) {
            PyTypeObject *tp = st->field_type;
            /* the block PyObject_GC_NewVar(.., 3) allocates */
            size_t size = (size_t)(tp->tp_basicsize + 3 * tp->tp_itemsize);
            field_size = (size + sizeof(void *) - 1) &
                         ~(sizeof(void *) - 1);
            field_free_type = tp;
            if (field_presize_of(tp, &field_presize) < 0) return -1;
        }
#endif
    }
#ifndef Py_GIL_DISABLED
    if (PyInterpreterState_Get() == PyInterpreterState_Main())
        record_spare_owner = st;
#endif
    st->charmaps = PyDict_New();
    if (!st->charmaps) return -1;
    enc = PyImport_ImportModule("pydb.encoding");
    if (!enc) return -1;
    st->charmap_decoding = PyObject_GetAttrString(enc, "charmap_decoding");
    Py_DECREF(enc);
    if (!st->charmap_decoding) return -1;
    st->tag_ints = PyTuple_New(TAG_INTS);
    if (!st->tag_ints) return -1;
    for (Py_ssize_t i = 0; i < TAG_INTS; i++) {
        PyObject *v = PyLong_FromSsize_t(i);
        if (!v) return -1;
        PyTuple_SET_ITEM(st->tag_ints, i, v);
    }
    if (PyModule_AddType(m, st->record_type) < 0 ||
        PyModule_AddObjectRef(m, "Field", (PyObject *)st->field_type) < 0)
        return -1;
    return PyModule_AddFunctions(m, record_functions);
}
