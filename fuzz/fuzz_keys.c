/*
 * fuzz_keys.c - libFuzzer target: the key rules a database may bring
 * along (csrc/keys.c): the case table ISISUC.TAB, the word-character
 * table ISISAC.TAB and a stop-word file (.STW), then key normalisation.
 *
 * Input: ISISUC.TAB, FUZZ_SEP, ISISAC.TAB, FUZZ_SEP, the stop words (an
 * empty part: no such file).  Bit 0 of the input size picks 8-bit or
 * UTF-8 rules, bit 1 a 30-byte key limit.  Each line of the stop-word text
 * is also normalised as a key.  Errors are fine when they name themselves
 * (PYDB_ECORRUPT for a table that is not one); normalised keys must
 * respect the limit.
 *
 * Depends on: pydb.h, pydb_test.h (key rules and stop words: test-only
 * entry points, docs/conventions.md §7).
 */
#include "fuzz.h"
#include "pydb.h"
#include "pydb_test.h"
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"ISISUC.TAB", "ISISAC.TAB"};

static uint8_t out[4 * 4096 + 16];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part part[3];
    pydb_keyrules rules;
    pydb_stopwords sw;
    pydb_error err;
    int found = 0, rc;
    size_t max_key = (size & 2) ? 30 : 0;

    fuzz_split(part, 3, data, size);
    fuzz_clear();
    fuzz_write_parts(names, part, 2);
    memset(&err, 0, sizeof err);
    memset(&sw, 0, sizeof sw);
    pydb__keyrules_default(&rules, (int)(size & 1), max_key);
    rc = pydb__keyrules_load_dir(&rules, fuzz_dir(), &found, &err);
    if (rc != PYDB_OK) {
        fuzz_expect(rc, &err);
        return 0;
    }
    if ((found & 1) != (part[0].n > 0) || ((found & 2) != 0) != (part[1].n > 0))
        abort();   /* a table written was not found, or one not written was */
    rc = pydb__stopwords_parse(&sw, &rules, part[2].p, part[2].n, &err);
    if (rc != PYDB_OK && rc != PYDB_ENOMEM) abort();
    for (size_t i = 0; i < sw.n; i++)
        if (max_key && sw.len[i] > max_key) abort();
    pydb__stopwords_free(&sw);
    for (size_t i = 0; i < part[2].n;) {
        size_t e = i, len = 0;
        while (e < part[2].n && part[2].p[e] != '\n') e++;
        if (e - i <= 4096) {
            rc = pydb__key_normalize(&rules, part[2].p + i, e - i, out,
                                     sizeof out, &len, &err);
            if (rc != PYDB_OK) abort();   /* the buffer is big enough */
            if (len > sizeof out || (max_key && len > max_key)) abort();
        }
        i = e + 1;
    }
    return 0;
}
