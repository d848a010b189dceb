/*
 * fuzz_iso2709.c - libFuzzer target: the strict ISO 2709 record parser
 * (csrc/iso2709.c, pydb_iso_strict) on a file's worth of records, for each
 * flavour choice (ISIS '#' terminators, MARC 0x1D/0x1E, either).
 *
 * A sound record must lie inside the input, end after where it started,
 * and have every field inside the record; a record that is not sound is
 * skipped to the next line or record terminator, as a tolerant reader
 * would go on.  The only error pydb_iso_strict may return is PYDB_ENOMEM.
 * Each sound record is encoded again (pydb_iso_encode, the writer's
 * encoder; MARC also with '^' as 0x1F outside control fields) with its
 * leader positions, tags
 * and values, unless the
 * record cannot be (a tag above 99999, a MARC value holding a
 * terminator, more than 99,999 bytes with the writer's widths: then
 * only PYDB_EINVAL may come back); the copy must parse as sound with
 * the same leader positions, tags and values -- unless its 81st byte is
 * a line break, which makes it read as 80-byte lines (the writer writes
 * lines).
 *
 * Depends on: pydb.h.
 */
#include "fuzz.h"
#include "pydb.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Encode the sound record r again (MARC with `caret`: '^' written as
 * 0x1F, except in control fields) and check that it reads back. */
static void round_trip(const pydb_iso_record *r, int caret)
{
    pydb_iso_wfield *w = calloc(r->nfields ? r->nfields : 1, sizeof *w);
    pydb_iso_record back;
    pydb_error err;
    uint8_t *out = NULL;
    size_t len = 0;
    int rc, sound = 0;

    memset(&back, 0, sizeof back);
    if (!w) return;
    for (size_t i = 0; i < r->nfields; i++) {
        const pydb_iso_field *f = &r->fields[i];
        char s[16];
        int bad;
        if (f->tag > 99999) goto cleanup;
        snprintf(s, sizeof s, "%03u", (unsigned)f->tag);
        w[i].nimpl = (int)strlen(s) - 3;
        memcpy(w[i].impl, s, (size_t)w[i].nimpl);
        memcpy(w[i].tag, s + w[i].nimpl, 3);
        w[i].value = r->rec + f->off;
        w[i].len = f->len;
        bad = pydb_iso_reserved(w[i].value, w[i].len);
        if (r->flavour == PYDB_ISO_MARC && bad >= 0 && bad != 0x1F)
            goto cleanup;
    }
    rc = pydb_iso_encode(NULL, &len, w, r->nfields, r->flavour, caret,
                         r->rec + 5, r->rec + 17, &err);
    if (rc == PYDB_EINVAL) goto cleanup;
    if (rc != PYDB_OK || len < 26 || !(out = malloc(len))) abort();
    if (pydb_iso_encode(out, &len, w, r->nfields, r->flavour, caret,
                        r->rec + 5, r->rec + 17, &err) != PYDB_OK)
        abort();
    /* Unwrapped, a record whose 81st byte is a line break reads as
     * 80-byte lines (the writer writes lines: iso2709.write) */
    if (len > 80 && (out[80] == '\r' || out[80] == '\n')) goto cleanup;
    rc = pydb_iso_strict(&sound, &back, out, len, 0, r->flavour, &err);
    if (rc == PYDB_ENOMEM) goto cleanup;
    if (rc != PYDB_OK || !sound || back.end != len ||
        back.nfields != r->nfields || memcmp(back.rec + 5, r->rec + 5, 7) ||
        memcmp(back.rec + 17, r->rec + 17, 3))
        abort();
    for (size_t i = 0; i < r->nfields; i++) {
        const uint8_t *got = back.rec + back.fields[i].off;
        const uint8_t *was = r->rec + r->fields[i].off;
        /* a control field (001-009) keeps its '^' (no subfields there) */
        int sub = caret && r->flavour == PYDB_ISO_MARC &&
                  !(r->fields[i].tag >= 1 && r->fields[i].tag <= 9);
        if (back.fields[i].tag != r->fields[i].tag ||
            back.fields[i].len != r->fields[i].len)
            abort();
        for (uint32_t k = 0; k < r->fields[i].len; k++)
            if (got[k] != (sub && was[k] == '^' ? 0x1F : was[k]))
                abort();
    }
cleanup:
    pydb_iso_record_free(&back);
    free(out);
    free(w);
}

static void parse_all(const uint8_t *data, size_t size, int flavours,
                      pydb_iso_record *r)
{
    size_t start = 0;
    pydb_error err;

    while (start < size) {
        int sound = 0;
        int rc = pydb_iso_strict(&sound, r, data, size, start, flavours, &err);
        if (rc == PYDB_ENOMEM) return;
        if (rc != PYDB_OK) abort();
        if (sound) {
            if (r->end <= start || r->end > size) abort();
            if (!(r->flavour & flavours)) abort();
            if (r->rec == NULL || r->len == 0) abort();
            for (size_t i = 0; i < r->nfields; i++) {
                const pydb_iso_field *f = &r->fields[i];
                if ((size_t)f->off + f->len > r->len) abort();
            }
            round_trip(r, 0);
            round_trip(r, 1);
            start = r->end;
        } else {
            while (start < size && data[start] != '\n' &&
                   data[start] != 0x1d && data[start] != '#')
                start++;
            start++;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int flavours[] = {PYDB_ISO_ISIS, PYDB_ISO_MARC,
                                   PYDB_ISO_ISIS | PYDB_ISO_MARC};
    pydb_iso_record r;

    memset(&r, 0, sizeof r);
    for (size_t i = 0; i < sizeof flavours / sizeof flavours[0]; i++)
        parse_all(data, size, flavours[i], &r);
    pydb_iso_record_free(&r);
    return 0;
}
