/*
 * memindex.c - an inverted index held in memory (PYDB_INDEX_MEMORY): a
 * sorted array of keys, each with its sorted posting list.  Used by the
 * tests of the search language and available to the native index for
 * postings not yet written to a segment.
 *
 * Key form: ASCII letters a-z upper-cased, every other byte unchanged
 * (no case table, no accent folding, no blank trimming, no length limit).
 * Keys compare as unsigned byte strings, a shorter key before its
 * extensions.  Postings carry only the fields named by the caps given at
 * creation; the others are stored as 0.
 *
 * Depends on: index.c (the interface, posting helpers).
 */
#include <stdlib.h>
#include <string.h>
#include "index_int.h"

typedef struct mem_entry {
    uint8_t *key;
    size_t len;
    pydb_postings p;
} mem_entry;

typedef struct memindex {
    pydb_index base;     /* first member (index_int.h) */
    mem_entry *e;
    size_t n, cap;
} memindex;

/* First entry whose key is >= key. */
static size_t lower_bound(const memindex *m, const uint8_t *key, size_t len)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pydb__keycmp(m->e[mid].key, m->e[mid].len, key, len) < 0)
            lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int mem_terms(pydb_index *ix, const uint8_t *prefix, size_t prefix_len,
                     const uint8_t *start, size_t start_len, pydb_term_fn fn,
                     void *ctx, pydb_error *err)
{
    const memindex *m = (const memindex *)ix;
    size_t i = lower_bound(m, prefix, prefix_len);
    (void)err;
    if (start) {
        size_t j = lower_bound(m, start, start_len);
        if (j > i) i = j;
    }
    for (; i < m->n; i++) {
        const mem_entry *e = &m->e[i];
        if (e->len < prefix_len ||
            (prefix_len && memcmp(e->key, prefix, prefix_len) != 0))
            break;
        if (fn(ctx, e->key, e->len, (uint64_t)e->p.n)) break;
    }
    return PYDB_OK;
}

static int mem_postings(pydb_postings *out, pydb_index *ix,
                        const uint8_t *key, size_t len, pydb_error *err)
{
    const memindex *m = (const memindex *)ix;
    size_t i = lower_bound(m, key, len);
    const pydb_postings *p;
    if (i >= m->n || pydb__keycmp(m->e[i].key, m->e[i].len, key, len) != 0)
        return PYDB_OK;
    p = &m->e[i].p;
    int rc = pydb__postings_reserve(out, out->n + p->n, err);
    if (rc) return rc;
    if (p->n) memcpy(out->v + out->n, p->v, p->n * sizeof *p->v);
    out->n += p->n;
    return PYDB_OK;
}

static int mem_key(pydb_index *ix, const uint8_t *term, size_t len,
                   uint8_t *out, size_t cap, size_t *out_len, pydb_error *err)
{
    (void)ix;
    if (len > cap)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "key buffer of %zu bytes too small for %zu bytes",
                          cap, len);
    for (size_t i = 0; i < len; i++) {
        uint8_t c = term[i];
        out[i] = c >= 'a' && c <= 'z' ? (uint8_t)(c - 'a' + 'A') : c;
    }
    *out_len = len;
    return PYDB_OK;
}

static void mem_close(pydb_index *ix)
{
    memindex *m = (memindex *)ix;
    for (size_t i = 0; i < m->n; i++) {
        free(m->e[i].key);
        pydb_postings_free(&m->e[i].p);
    }
    free(m->e);
    free(m);
}

static int mem_resident(const pydb_index *ix)
{
    (void)ix;
    return 1;   /* in memory */
}

static const pydb_index_ops mem_ops = {
    "memory", mem_terms, mem_postings, mem_key, mem_close, NULL, NULL,
    mem_resident, NULL, NULL, NULL, NULL, NULL};

int pydb_memindex_new(pydb_index **out, int caps, pydb_error *err)
{
    memindex *m;
    *out = NULL;
    if (caps & ~(PYDB_POSTING_TAG | PYDB_POSTING_OCC | PYDB_POSTING_CNT))
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "unknown posting capability bits 0x%x", caps);
    m = calloc(1, sizeof *m);
    if (!m)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                          "no memory for an in-memory index");
    m->base.ops = &mem_ops;
    m->base.kind = PYDB_INDEX_MEMORY;
    m->base.caps = caps;
    *out = &m->base;
    return PYDB_OK;
}

int pydb_memindex_add(pydb_index *ix, const uint8_t *key, size_t len,
                      const pydb_posting *p, size_t n, pydb_error *err)
{
    memindex *m = (memindex *)ix;
    mem_entry *e;
    size_t i, old, k;
    int caps;

    if (!ix || ix->kind != PYDB_INDEX_MEMORY || (!key && len) || (!p && n))
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "pydb_memindex_add: bad arguments");
    for (k = 0; k < n; k++)
        if (p[k].mfn < 1)
            return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                              "posting %zu has MFN %d (MFNs start at 1)", k,
                              (int)p[k].mfn);
    if (n == 0) return PYDB_OK;
    /* find or insert the entry */
    if (m->n && pydb__keycmp(m->e[m->n - 1].key, m->e[m->n - 1].len, key,
                             len) < 0)
        i = m->n;   /* ascending input: append */
    else
        i = lower_bound(m, key, len);
    if (i >= m->n || pydb__keycmp(m->e[i].key, m->e[i].len, key, len) != 0) {
        uint8_t *copy;
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 64;
            mem_entry *v = realloc(m->e, cap * sizeof *v);
            if (!v)
                return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                                  "no memory for %zu keys", cap);
            m->e = v;
            m->cap = cap;
        }
        copy = malloc(len ? len : 1);
        if (!copy)
            return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                              "no memory for a %zu-byte key", len);
        if (len) memcpy(copy, key, len);
        memmove(m->e + i + 1, m->e + i, (m->n - i) * sizeof *m->e);
        memset(&m->e[i], 0, sizeof m->e[i]);
        m->e[i].key = copy;
        m->e[i].len = len;
        m->n++;
    }
    e = &m->e[i];
    old = e->p.n;
    if (old + n > e->p.cap) {
        size_t cap = e->p.cap ? e->p.cap : 4;
        while (cap < old + n) cap *= 2;
        pydb_posting *v = realloc(e->p.v, cap * sizeof *v);
        if (!v) {
            if (old == 0) {   /* do not leave a key without postings */
                free(e->key);
                memmove(m->e + i, m->e + i + 1,
                        (m->n - i - 1) * sizeof *m->e);
                m->n--;
            }
            return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                              "no memory for %zu postings", cap);
        }
        e->p.v = v;
        e->p.cap = cap;
    }
    caps = ix->caps;
    for (k = 0; k < n; k++) {
        pydb_posting q = p[k];
        if (!(caps & PYDB_POSTING_TAG)) q.tag = 0;
        if (!(caps & PYDB_POSTING_OCC)) q.occ = 0;
        if (!(caps & PYDB_POSTING_CNT)) q.cnt = 0;
        e->p.v[old + k] = q;
    }
    e->p.n = old + n;
    /* keep the list sorted and distinct */
    pydb__postings_normalize(e->p.v, &e->p.n, old ? old : 1);
    return PYDB_OK;
}
