/*
 * iso2709.c - the strict ISO 2709 record parser (docs/isis-formats.md
 * §7; pydb.h group 10).  It accepts exactly the records that
 * pydb/iso2709.py's IsoReader._parse accepts in its first step (lengths
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
    ft = r->flavour == PYDB_ISO_ISIS ? 0x23 : 0x1E;
    rt = r->flavour == PYDB_ISO_ISIS ? 0x23 : 0x1D;
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
