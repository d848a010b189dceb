/*
 * fuzz_fst.c - libFuzzer target: FST text (csrc/fst_parse.c) and, when it
 * compiles, the formatting-language interpreter and key extraction
 * (csrc/fst_format.c, csrc/fst_keys.c) on a record.
 *
 * Input: the FST text, then optionally FUZZ_SEP and the record, one field
 * per line as "TAG VALUE" (lines without a leading number get tag 24);
 * without a record part a fixed CDS-like record is used.  Bit 0 of the
 * input size picks 8-bit or UTF-8 key rules, bit 1 a 30-byte key limit.
 * Errors are fine (PYDB_EFST with a line inside the text); every key must
 * respect the limit and carry the record's MFN.
 *
 * Depends on: pydb.h, pydb_test.h (key rules, stop words, FST keys: the
 * test-only entry points, docs/conventions.md §7).
 */
#include "fuzz.h"
#include "pydb.h"
#include "pydb_test.h"
#include <stdlib.h>
#include <string.h>

#define MAX_FIELDS 64

static const char default_record[] =
    "24 <The> world of <water>: a survey^bfirst edition\n"
    "26 ^aParis^bUnesco^c1990\n"
    "69 Water resources; Hydrology; Soil\n"
    "70 Smith, J.\n70 Doe, A.B.\n"
    "44 \xc3\x89tudes et documents\n";

typedef struct key_check {
    size_t max_key;
    size_t keys;
} key_check;

static int on_key(void *ctx, const uint8_t *key, size_t len,
                  const pydb_posting *p)
{
    key_check *c = ctx;
    (void)key;
    if ((c->max_key && len > c->max_key) || p->mfn < 1) abort();
    c->keys++;
    return PYDB_OK;
}

static uint32_t parse_fields(pydb_field *f, const uint8_t *p, size_t n)
{
    uint32_t nf = 0;
    size_t i = 0;

    while (i < n && nf < MAX_FIELDS) {
        size_t e = i;
        uint32_t tag = 0;
        int digits = 0;
        while (e < n && p[e] != '\n') e++;
        while (i < e && p[i] >= '0' && p[i] <= '9' && digits < 5) {
            tag = tag * 10 + (uint32_t)(p[i] - '0');
            i++;
            digits++;
        }
        if (digits == 0) tag = 24;
        if (i < e && p[i] == ' ') i++;
        f[nf].tag = tag;
        f[nf].value = p + i;
        f[nf].len = (uint32_t)(e - i);
        nf++;
        i = e + 1;
    }
    return nf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part part[2];
    pydb_field fields[MAX_FIELDS];
    pydb_fst *fst = NULL;
    pydb_fst_scratch s;
    pydb_keyrules rules;
    pydb_stopwords sw;
    pydb_error err;
    key_check c;
    uint32_t nf;
    int rc;

    fuzz_split(part, 2, data, size);
    memset(&err, 0, sizeof err);
    memset(&s, 0, sizeof s);
    memset(&sw, 0, sizeof sw);
    rc = pydb_fst_parse(&fst, (const char *)part[0].p, part[0].n, "fuzz.fst",
                        &err);
    if (rc != PYDB_OK) {
        fuzz_expect(rc, &err);
        if (fst != NULL) abort();
        if (rc == PYDB_EFST && err.offset < 1) abort();   /* a line number */
        return 0;
    }
    if (part[1].n > 0)
        nf = parse_fields(fields, part[1].p, part[1].n);
    else
        nf = parse_fields(fields, (const uint8_t *)default_record,
                          sizeof default_record - 1);
    pydb__keyrules_default(&rules, (int)(size & 1), (size & 2) ? 30 : 0);
    rc = pydb__stopwords_parse(&sw, &rules, (const uint8_t *)"THE\nOF\nA\n",
                               9, &err);
    if (rc != PYDB_OK) abort();
    for (size_t i = 0; i < pydb_fst_count(fst); i++) {
        uint32_t id;
        int technique, line;
        const char *format;
        size_t flen;
        pydb_fst_rule(&id, &technique, &format, &flen, &line, fst, i);
        if (line < 1 || flen > part[0].n || (flen > 0 && format == NULL))
            abort();
        rc = pydb__fst_format(fst, i, 7, fields, nf, &s, &err);
        fuzz_expect(rc, &err);
        if (rc != PYDB_OK && rc != PYDB_EFST && rc != PYDB_ENOMEM) abort();
    }
    c.max_key = rules.max_key;
    c.keys = 0;
    rc = pydb__fst_keys(fst, &rules, &sw, 7, fields, nf, &s, on_key, &c, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK && rc != PYDB_EFST && rc != PYDB_ENOMEM) abort();
    pydb__fst_scratch_free(&s);
    pydb__stopwords_free(&sw);
    pydb_fst_free(fst);
    return 0;
}
