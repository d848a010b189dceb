/*
 * fuzz_iso2709.c - libFuzzer target: the strict ISO 2709 record parser
 * (csrc/iso2709.c, pydb_iso_strict) on a file's worth of records, for each
 * flavour choice (ISIS '#' terminators, MARC 0x1D/0x1E, either).
 *
 * A sound record must lie inside the input, end after where it started,
 * and have every field inside the record; a record that is not sound is
 * skipped to the next line or record terminator, as a tolerant reader
 * would go on.  The only error pydb_iso_strict may return is PYDB_ENOMEM.
 *
 * Depends on: pydb.h.
 */
#include "fuzz.h"
#include "pydb.h"
#include <stdlib.h>
#include <string.h>

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
