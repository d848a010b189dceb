/*
 * iso2709.c - the strict ISO 2709 record parser and the record encoder
 * (docs/isis-formats.md §7; pydb.h group 10).  The encoder writes what
 * pydb/iso2709.py's writer asks for: the leader's given positions, an
 * entry map of the narrowest widths (lengths 4 digits and starts 5 at
 * least), numeric tags above 999 with their leading digits in the
 * implementation-defined part of the entry.  The parser accepts exactly
 * the records that pydb/iso2709.py's IsoReader._parse accepts in its
 * first step (lengths
 * in bytes, 80-byte lines or none) without a repair, and gives the same
 * leader, fields and end offset; every other record is reported as not
 * sound and left to the Python reader, which owns the tolerant recovery
 * (§7.4), its repairs and its messages.  So the C path can only make a
 * sound record faster, never read a record differently.
 *
 * The rules, in the Python reader's order:
 *   - the leader's record length: 5 ASCII digits, >= 26, 24 bytes there;
 *   - lines: a record longer than 80 bytes whose byte 81 is CR or LF is
 *     read as lines of 80 bytes, each break CR LF or LF; otherwise the
 *     length is taken as one run of bytes;
 *   - the last byte is a record terminator of an allowed flavour;
 *   - entry map (leader 20-22): digits, the first two not 0 (else the
 *     Python reader repairs it);
 *   - the directory ends at the first '#' or 0x1E after the leader, at an
 *     entry boundary, and that byte chooses the flavour (must be allowed);
 *     the record ends with the flavour's record terminator;
 *   - base address (leader 12-16): digits equal to the directory's end + 1;
 *   - each entry: length and start ASCII digits, length >= 1, the field
 *     inside the data area and ending with the field terminator; the tag
 *     3 ASCII digits (an alphanumeric tag: not handled here).
 *
 * Depends on: error.c only.
 */
#include "pydb_int.h"
#include <stdlib.h>
#include <string.h>

#define LINE 80
#define MIN_RECORD 26

/* The field and record terminators of a flavour: '#' and '#' (CDS/ISIS),
 * 0x1E and 0x1D (MARC). */
static uint8_t field_end(int flavour)
{
    return flavour == PYDB_ISO_MARC ? 0x1E : 0x23;
}
static uint8_t record_end(int flavour)
{
    return flavour == PYDB_ISO_MARC ? 0x1D : 0x23;
}

/* Value of n ASCII digits at p, or -1 if one is not a digit. */
static int64_t digits(const uint8_t *p, size_t n)
{
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

static int is_eol(uint8_t c) { return c == '\r' || c == '\n'; }

/* The record's bytes without line breaks into r->unwrapped; 0, or 1 when
 * buf ends first or a line break is missing (IsoReader's _unwrap). */
static int unwrap(pydb_iso_record *r, const uint8_t *buf, size_t n,
                  size_t pos, size_t length, pydb_error *err, int *rc)
{
    size_t left = length, o = 0;
    *rc = PYDB_OK;
    if (r->ucap < length) {
        uint8_t *u = realloc(r->unwrapped, length);
        if (!u) {
            *rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                             "no memory for a %zu-byte ISO record", length);
            return 1;
        }
        r->unwrapped = u;
        r->ucap = length;
    }
    while (left > 0) {
        size_t k = left < LINE ? left : LINE;
        if (pos + k > n) return 1;
        memcpy(r->unwrapped + o, buf + pos, k);
        o += k;
        pos += k;
        left -= k;
        if (left > 0) {
            if (pos + 1 < n && buf[pos] == '\r' && buf[pos + 1] == '\n') pos += 2;
            else if (pos < n && buf[pos] == '\n') pos++;
            else return 1;
        }
    }
    r->rec = r->unwrapped;
    r->len = length;
    r->end = pos;
    return 0;
}

/* The flavour a field terminator byte names, if allowed; else 0. */
static int flavour_of(uint8_t ft, int flavours)
{
    if (ft == 0x23 && (flavours & PYDB_ISO_ISIS)) return PYDB_ISO_ISIS;
    if (ft == 0x1E && (flavours & PYDB_ISO_MARC)) return PYDB_ISO_MARC;
    return 0;
}

/* The record in r->rec[0..len) is sound: fill r's fields; 1 if not. */
static int parse(pydb_iso_record *r, int flavours, pydb_error *err, int *rc)
{
    const uint8_t *s = r->rec;
    size_t L = r->len, dir_end = 0, esize, base;
    int64_t ll, ls, li;
    uint8_t ft, rt;

    *rc = PYDB_OK;
    r->nfields = 0;
    ll = digits(s + 20, 1);
    ls = digits(s + 21, 1);
    li = digits(s + 22, 1);
    if (ll <= 0 || ls <= 0 || li < 0) return 1;   /* entry map repaired */
    esize = (size_t)(3 + ll + ls + li);
    for (size_t i = 24; i < L; i++)
        if (s[i] == 0x23 || s[i] == 0x1E) {
            dir_end = i;
            break;
        }
    if (dir_end == 0 || (dir_end - 24) % esize) return 1;
    r->flavour = flavour_of(s[dir_end], flavours);
    if (!r->flavour) return 1;
    ft = field_end(r->flavour);
    rt = record_end(r->flavour);
    if (s[L - 1] != rt) return 1;
    base = dir_end + 1;
    if (digits(s + 12, 5) != (int64_t)base) return 1;   /* base repaired */
    for (size_t e = 24; e < dir_end; e += esize) {
        const uint8_t *ent = s + e;
        int64_t tag = digits(ent, 3), impl = 0;
        int64_t flen = digits(ent + 3, (size_t)ll);
        int64_t fst = digits(ent + 3 + ll, (size_t)ls);
        size_t a, b;
        if (tag < 0 || flen < 1 || fst < 0) return 1;
        a = base + (size_t)fst;
        b = a + (size_t)flen;
        if (b > L - 1 || s[b - 1] != ft) return 1;
        if (li > 0) {
            impl = digits(ent + 3 + ll + ls, (size_t)li);
            if (impl > 0) {
                /* int(impl + tag): the implementation digits in front */
                for (int k = 0; k < 3; k++) impl *= 10;
                tag += impl;
            }   /* not digits (or 0): the tag alone, as int(tag) */
            if (tag > 0x7FFFFFFF) return 1;
        }
        if (r->nfields == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 32;
            pydb_iso_field *v = realloc(r->fields, cap * sizeof *v);
            if (!v) {
                *rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                                 "no memory for %zu ISO fields", cap);
                return 1;
            }
            r->fields = v;
            r->cap = cap;
        }
        r->fields[r->nfields].tag = (uint32_t)tag;
        r->fields[r->nfields].off = (uint32_t)a;
        r->fields[r->nfields].len = (uint32_t)(flen - 1);
        r->nfields++;
    }
    return 0;
}

int pydb_iso_strict(int *sound, pydb_iso_record *out, const uint8_t *buf,
                    size_t n, size_t start, int flavours, pydb_error *err)
{
    int64_t length;
    int rc = PYDB_OK, wrapped;

    *sound = 0;
    if (start > n || n - start < 24) return PYDB_OK;
    length = digits(buf + start, 5);
    if (length < MIN_RECORD) return PYDB_OK;
    wrapped = length > LINE && start + LINE < n && is_eol(buf[start + LINE]);
    if (wrapped) {
        int eol = start + LINE + 1 < n && buf[start + LINE] == '\r' &&
                  buf[start + LINE + 1] == '\n' ? 2 : 1;
        size_t last = start + (size_t)length - 1 +
                      (size_t)((length - 1) / LINE) * (size_t)eol;
        if (last >= n) return PYDB_OK;
        if (!((buf[last] == 0x23 && (flavours & PYDB_ISO_ISIS)) ||
              (buf[last] == 0x1D && (flavours & PYDB_ISO_MARC))))
            return PYDB_OK;
        if (unwrap(out, buf, n, start, (size_t)length, err, &rc)) return rc;
    } else {
        size_t last = start + (size_t)length - 1;
        if (last >= n) return PYDB_OK;
        if (!((buf[last] == 0x23 && (flavours & PYDB_ISO_ISIS)) ||
              (buf[last] == 0x1D && (flavours & PYDB_ISO_MARC))))
            return PYDB_OK;
        out->rec = buf + start;
        out->len = (size_t)length;
        out->end = start + (size_t)length;
    }
    if (parse(out, flavours, err, &rc)) return rc;
    *sound = 1;
    return PYDB_OK;
}

void pydb_iso_record_free(pydb_iso_record *r)
{
    if (!r) return;
    free(r->fields);
    free(r->unwrapped);
    memset(r, 0, sizeof *r);
}

/* -------------------------------------------------------------- writing */

#define MAX_RECORD 99999   /* the leader's record length has 5 digits */

int pydb_iso_reserved(const uint8_t *value, size_t len)
{
    static const uint8_t order[3] = {0x1D, 0x1E, 0x1F};
    for (int i = 0; i < 3; i++)
        if (len && memchr(value, order[i], len)) return order[i];
    return -1;
}

/* Decimal digits of v. */
static int ndigits(uint64_t v)
{
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* v as exactly `width` decimal digits, zero-padded, at p (v fits). */
static void put_digits(uint8_t *p, uint64_t v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (uint8_t)('0' + v % 10);
        v /= 10;
    }
}

/* A MARC control field (tags 001-009, no implementation part): no
 * indicators and no subfields, so a '^' in its value is a character,
 * written as it is (a review: a MARC file's "001 abc^def" came back as
 * "abc" 0x1F "def"). */
static int control_field(const pydb_iso_wfield *f)
{
    return f->nimpl == 0 && f->tag[0] == '0' && f->tag[1] == '0' &&
           f->tag[2] >= '1' && f->tag[2] <= '9';
}

int pydb_iso_encode(uint8_t *out, size_t *len, const pydb_iso_wfield *f,
                    size_t n, int flavour, int caret, const uint8_t mid[7],
                    const uint8_t tail[3], pydb_error *err)
{
    uint8_t ft = field_end(flavour), rt = record_end(flavour);
    int li = 0, ll = 4, ls;
    uint64_t data = 0, pos = 0, base, total;
    uint8_t *p;

    for (size_t i = 0; i < n; i++) {
        int d = ndigits((uint64_t)f[i].len + 1);
        if (f[i].nimpl > li) li = f[i].nimpl;
        if (d > ll) ll = d;
        data += (uint64_t)f[i].len + 1;
    }
    ls = ndigits(data) > 5 ? ndigits(data) : 5;
    if (ll > 9 || ls > 9)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "a field or the data "
                          "area is too long for ISO 2709");
    base = 24 + (uint64_t)(3 + ll + ls + li) * n + 1;
    total = base + data + 1;
    if (total > MAX_RECORD)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "record needs %llu "
                          "bytes; ISO 2709 record lengths have 5 digits (at "
                          "most %d)", (unsigned long long)total, MAX_RECORD);
    *len = (size_t)total;
    if (!out) return PYDB_OK;
    /* the leader: 0-4 length, 5-11 given, 12-16 base, 17-19 given, 20-23
     * the entry map */
    p = out;
    put_digits(p, total, 5);
    memcpy(p + 5, mid, 7);
    put_digits(p + 12, base, 5);
    memcpy(p + 17, tail, 3);
    p[20] = (uint8_t)('0' + ll);
    p[21] = (uint8_t)('0' + ls);
    p[22] = (uint8_t)('0' + li);
    p[23] = '0';
    p += 24;
    /* the directory: tag, length (with the terminator), start, the
     * implementation-defined digits right-aligned in li */
    for (size_t i = 0; i < n; i++) {
        memcpy(p, f[i].tag, 3);
        put_digits(p + 3, (uint64_t)f[i].len + 1, ll);
        put_digits(p + 3 + ll, pos, ls);
        memset(p + 3 + ll + ls, '0', (size_t)(li - f[i].nimpl));
        memcpy(p + 3 + ll + ls + li - f[i].nimpl, f[i].impl, f[i].nimpl);
        p += 3 + ll + ls + li;
        pos += (uint64_t)f[i].len + 1;
    }
    *p++ = ft;
    /* the data area */
    for (size_t i = 0; i < n; i++) {
        if (f[i].len) memcpy(p, f[i].value, f[i].len);
        if (flavour == PYDB_ISO_MARC && caret && !control_field(&f[i]))
            for (size_t k = 0; k < f[i].len; k++)
                if (p[k] == '^') p[k] = 0x1F;
        p += f[i].len;
        *p++ = ft;
    }
    *p++ = rt;
    PYDB_ASSERT((uint64_t)(p - out) == total);
    return PYDB_OK;
}
