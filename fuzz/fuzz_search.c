/*
 * fuzz_search.c - libFuzzer target: the search-expression parser and
 * evaluator (csrc/search_parse.c, csrc/search_eval.c).  The input is the
 * expression; it is evaluated with pydb_search() against an in-memory
 * index of a few keys whose postings carry TAG, OCC and CNT, so every
 * operator (boolean, (G), (F), proximity, qualifiers, truncation) runs.
 * Errors (PYDB_ESYNTAX and the rest) are fine; the result must be sorted
 * and distinct MFNs of the index.
 *
 * Depends on: pydb.h.
 */
#include "fuzz.h"
#include "pydb.h"
#include <stdlib.h>
#include <string.h>

static pydb_index *ix;

/* Keys in ascending byte order, each with postings over MFNs 1..9. */
static const char *const keys[] = {
    "1990", "A", "AB", "ABC", "AGRICULTURE", "SOIL", "SOILS", "WATER",
    "WATERS", "WATERSHED", "\xc3\x89TUDE",
};

static void build_index(void)
{
    pydb_error err;
    pydb_posting p[8];

    if (pydb_memindex_new(&ix, PYDB_POSTING_TAG | PYDB_POSTING_OCC |
                          PYDB_POSTING_CNT, &err) != PYDB_OK)
        abort();
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        size_t n = 0;
        for (int32_t mfn = 1 + (int32_t)(k % 3); mfn <= 9 && n < 8;
             mfn += 1 + (int32_t)(k % 2)) {
            p[n].mfn = mfn;
            p[n].tag = (uint32_t)(24 + (k + (size_t)mfn) % 3 * 46);
            p[n].occ = (uint32_t)(1 + (size_t)mfn % 2);
            p[n].cnt = (uint32_t)(1 + (k + (size_t)mfn) % 4);
            n++;
        }
        if (pydb_memindex_add(ix, (const uint8_t *)keys[k], strlen(keys[k]),
                              p, n, &err) != PYDB_OK)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int32_t *mfns = NULL;
    size_t n = 0;
    pydb_error err;
    int rc;

    if (!ix) build_index();
    memset(&err, 0, sizeof err);
    rc = pydb_search(&mfns, &n, ix, NULL, (const char *)data, size, &err);
    if (rc == PYDB_OK) {
        for (size_t i = 0; i < n; i++)
            if (mfns[i] < 1 || mfns[i] > 9 || (i > 0 && mfns[i] <= mfns[i - 1]))
                abort();   /* not sorted, not distinct, or not in the index */
    } else {
        fuzz_expect(rc, &err);
        if (mfns != NULL || (rc == PYDB_ESYNTAX && (err.offset < 0 ||
                                                    (uint64_t)err.offset > size)))
            abort();   /* a failure leaves no result and says where */
    }
    free(mfns);
    return 0;
}
