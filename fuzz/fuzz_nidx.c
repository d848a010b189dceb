/*
 * fuzz_nidx.c - libFuzzer target: the native index's files as a reader
 * opens them (csrc/nidx_manifest.c, nidx_seg.c, nidx_handle.c; the FST
 * and stop words the MANIFEST stores: fst_parse.c, keys.c).
 *
 * Input: the MANIFEST, then up to MAX_SEGS segment files, each part
 * after a FUZZ_SEP.  They are laid out as the index directory db.pdx of
 * a database "db" (no master file: the index is read in files mode):
 * part i >= 1 is named after the i-th "segment seg-NNNNNNNN.pds" line of
 * the MANIFEST (seg-9999999i.pds when it has fewer lines).
 *
 * Small segments are inline in the MANIFEST ("inline GGGGGGGG LEN" and
 * the segment's bytes).  Both files end in a CRC-32C (nidx_manifest.h,
 * nidx_seg.h) that a mutation almost always breaks, so the target writes
 * valid checksums over what it was given (each inline segment's of at
 * least 76 bytes, then a MANIFEST whose last 13 bytes are "end
 * XXXXXXXX\n": the hex digits; a segment file of at least 76 bytes: its
 * last 8 bytes) unless the input size is 7 modulo 8, which keeps the
 * files as given (the checks themselves get fuzzed too).
 *
 * Run: the stored settings read (pydb_native_index_stored), the index
 * opened (pydb_native_index_open), every key enumerated (up to
 * MAX_TERMS) and the postings of the first MAX_KEYS read, a prefix scan
 * and searches.  Errors are fine when they name themselves; checked
 * beyond "no crash, leak, hang": keys ascending and distinct, a key's
 * posting count at least the postings read for it (equal but for
 * duplicates between segments), postings sorted and
 * distinct with MFN >= 1, search results sorted and distinct.
 *
 * Depends on: pydb.h, util.h (pydb__crc32c: the checksums the core
 * computes).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fuzz.h"
#include "pydb.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEGS 64
#define MAX_TERMS 5000
#define MAX_KEYS 200

typedef struct terms {
    uint8_t *key[MAX_KEYS];
    size_t len[MAX_KEYS];
    uint64_t count[MAX_KEYS];
    size_t n, seen;
    uint8_t *last;       /* the previous key (every one is checked) */
    size_t last_len;
    int has_last;
} terms;

static int key_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al > bl) - (al < bl);
}

static int on_term(void *ctx, const uint8_t *key, size_t len, uint64_t count)
{
    terms *t = ctx;
    uint8_t *copy = malloc(len ? len : 1);

    if (!copy) abort();
    memcpy(copy, key, len);
    if (t->has_last && key_cmp(t->last, t->last_len, key, len) >= 0)
        abort();   /* keys must come ascending and distinct */
    if (count == 0) abort();   /* a key without live postings is left out */
    free(t->last);
    t->last = copy;
    t->last_len = len;
    t->has_last = 1;
    if (t->n < MAX_KEYS) {
        t->key[t->n] = malloc(len ? len : 1);
        if (!t->key[t->n]) abort();
        memcpy(t->key[t->n], key, len);
        t->len[t->n] = len;
        t->count[t->n] = count;
        t->n++;
    }
    return ++t->seen >= MAX_TERMS;
}

static void terms_free(terms *t)
{
    for (size_t i = 0; i < t->n; i++) free(t->key[i]);
    free(t->last);
    memset(t, 0, sizeof *t);
}

static int posting_cmp(const pydb_posting *a, const pydb_posting *b)
{
    if (a->mfn != b->mfn) return a->mfn < b->mfn ? -1 : 1;
    if (a->tag != b->tag) return a->tag < b->tag ? -1 : 1;
    if (a->occ != b->occ) return a->occ < b->occ ? -1 : 1;
    if (a->cnt != b->cnt) return a->cnt < b->cnt ? -1 : 1;
    return 0;
}

static void search(pydb_index *ix, const char *expr, size_t len)
{
    int32_t *mfns = NULL;
    size_t n = 0;
    pydb_error err;
    int rc = pydb_search(&mfns, &n, ix, NULL, expr, len, &err);

    fuzz_expect(rc, &err);
    for (size_t i = 1; rc == PYDB_OK && i < n; i++)
        if (mfns[i] <= mfns[i - 1]) abort();
    if (rc == PYDB_OK && n > 0 && mfns[0] < 1) abort();
    free(mfns);
}

static void read_index(pydb_index *ix)
{
    terms t;
    pydb_error err;
    int rc, listed;

    memset(&t, 0, sizeof t);
    rc = pydb_index_terms(ix, NULL, 0, NULL, 0, on_term, &t, &err);
    fuzz_expect(rc, &err);
    listed = rc == PYDB_OK;   /* else the counts of the last keys listed
                                 may miss a segment the error stopped */
    for (size_t i = 0; i < t.n; i++) {
        pydb_postings p = {0};
        rc = pydb_index_postings(&p, ix, t.key[i], t.len[i], &err);
        fuzz_expect(rc, &err);
        if (rc == PYDB_OK) {
            /* t.count[i] counted the live postings of every segment
             * holding the key, on the same segment set; reading them
             * merges the segments' lists dropping duplicates, which only
             * a damaged set (a tombstone missing: checksums cannot tell)
             * holds: never more */
            if (listed && p.n > t.count[i]) abort();
            for (size_t j = 0; j < p.n; j++)
                if (p.v[j].mfn < 1 ||
                    (j && posting_cmp(&p.v[j - 1], &p.v[j]) >= 0))
                    abort();
        }
        pydb_postings_free(&p);
    }
    if (t.n > 0) {
        terms u;
        size_t pl = t.len[0] > 2 ? 2 : t.len[0];
        char expr[96];
        int l;

        memset(&u, 0, sizeof u);
        rc = pydb_index_terms(ix, t.key[0], pl, NULL, 0, on_term, &u, &err);
        fuzz_expect(rc, &err);
        terms_free(&u);
        /* the first and last keys read as search terms (quoted: keys may
         * hold operators), truncated, and combined */
        l = snprintf(expr, sizeof expr, "\"%.*s\"", (int)(t.len[0] > 40 ? 40 : t.len[0]),
                     (const char *)t.key[0]);
        if (l > 0 && !memchr(t.key[0], '"', t.len[0]) &&
            !memchr(t.key[0], 0, t.len[0]))
            search(ix, expr, strlen(expr));
        search(ix, "A$ + B$ * C$", 12);
        search(ix, "A$ (G) B$ . C$ $ D$", 19);
        search(ix, "A$ ^ Z$", 7);
        /* chains of terms of the big seed's dense lists: their bits,
         * TAG masks and restricted reads */
        search(ix, "SURVEY . WATER", 14);
        search(ix, "WATER (G) SOIL $ SURVEY", 23);
    }
    terms_free(&t);
}

static void fix_segment(uint8_t *p, size_t n)
{
    uint32_t crc;

    if (n < 76) return;
    crc = pydb__crc32c(0, p, n - 8);
    for (int i = 0; i < 8; i++)
        p[n - 8 + i] = i < 4 ? (uint8_t)(crc >> (8 * i)) : 0;
}

/* Write valid checksums (see the head): of each inline segment the text
 * holds ("\ninline GGGGGGGG LEN\n" and LEN bytes within it), then of the
 * whole MANIFEST over the bytes before its end line. */
static void fix_manifest(uint8_t *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    static const char line[] = "\ninline ";
    const size_t ll = sizeof line - 1;
    size_t at = 0;
    uint32_t crc;

    if (n < 13 || memcmp(p + n - 13, "end ", 4) != 0 || p[n - 1] != '\n')
        return;
    while (at < n) {
        const uint8_t *hit = memmem(p + at, n - at, line, ll);
        size_t i, len = 0;
        if (!hit) break;
        at = (size_t)(hit - p) + ll + 9;   /* past "GGGGGGGG " */
        for (i = at; i < n && p[i] >= '0' && p[i] <= '9' && len < n; i++)
            len = len * 10 + (size_t)(p[i] - '0');
        if (i >= n || p[i] != '\n' || len > n - i - 1) continue;
        fix_segment(p + i + 1, len);
        at = i + 1 + len;
    }
    crc = pydb__crc32c(0, p, n - 13);
    for (int i = 0; i < 8; i++)
        p[n - 13 + 4 + i] = (uint8_t)hx[(crc >> (28 - 4 * i)) & 15];
}

/* The generation of the k-th (0-based) segment line of the MANIFEST
 * text, or -1. */
static long long seg_gen(const uint8_t *m, size_t n, size_t k)
{
    static const char line[] = "\nsegment seg-";
    const size_t ll = sizeof line - 1;
    size_t at = 0, found = 0;

    while (at + ll + 8 <= n) {
        const uint8_t *hit = memmem(m + at, n - at, line, ll);
        long long g = 0;
        size_t i;
        if (!hit || (size_t)(hit - m) + ll + 8 > n) return -1;
        at = (size_t)(hit - m) + ll;
        for (i = 0; i < 8 && m[at + i] >= '0' && m[at + i] <= '9'; i++)
            g = g * 10 + (m[at + i] - '0');
        if (i < 8) continue;
        if (found++ == k) return g;
    }
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part part[MAX_SEGS + 1];
    size_t nparts = fuzz_split(part, MAX_SEGS + 1, data, size);
    int fix = size % 8 != 7;
    pydb_nidx_stored stored;
    pydb_index *ix = NULL;
    pydb_error err;
    char path[512];
    int rc;

    fuzz_clear();
    for (size_t i = 0; i < nparts; i++) {
        uint8_t *copy = malloc(part[i].n ? part[i].n : 1);
        char name[64];
        if (!copy) abort();
        memcpy(copy, part[i].p, part[i].n);
        if (i == 0) {
            if (fix) fix_manifest(copy, part[i].n);
            snprintf(name, sizeof name, "db.pdx/MANIFEST");
        } else {
            long long g = seg_gen(part[0].p, part[0].n, i - 1);
            if (fix) fix_segment(copy, part[i].n);
            if (g < 0) g = 99999990 + (long long)i;
            snprintf(name, sizeof name, "db.pdx/seg-%08lld.pds", g);
        }
        /* an empty MANIFEST is a file; an empty segment part: none */
        if (part[i].n > 0 || i == 0) fuzz_write(name, copy, part[i].n);
        free(copy);
    }
    fuzz_path(path, sizeof path, "db");
    memset(&err, 0, sizeof err);
    rc = pydb_native_index_stored(&stored, path, &err);
    fuzz_expect(rc, &err);
    if (rc == PYDB_OK) {
        if (strlen(stored.fst) > stored.fst_len) abort();
        pydb_nidx_stored_free(&stored);
    }
    rc = pydb_native_index_open(&ix, path, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) {
        if (ix != NULL) abort();
        return 0;
    }
    if (pydb_index_kind(ix) != PYDB_INDEX_NATIVE) abort();
    read_index(ix);
    pydb_index_close(ix);
    return 0;
}
