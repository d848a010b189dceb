/* index.c - dispatch of the pydb_index_* functions (pydb.h) to the
 * implementation behind each handle (index_int.h), and the posting-list
 * helpers every implementation shares (order, normalise, grow, and the
 * freed buffers each thread keeps for its next search).
 *
 * Depends on: index_int.h, pydb_int.h (errors), pthreads (the kept
 * buffers' key).  Knows no index kind. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "index_int.h"

int pydb_index_terms(pydb_index *ix, const uint8_t *prefix, size_t prefix_len,
                     const uint8_t *start, size_t start_len, pydb_term_fn fn,
                     void *ctx, pydb_error *err)
{
    return ix->ops->terms(ix, prefix, prefix_len, start, start_len, fn, ctx,
                          err);
}

int pydb_index_postings(pydb_postings *out, pydb_index *ix,
                        const uint8_t *key, size_t len, pydb_error *err)
{
    return ix->ops->postings(out, ix, key, len, err);
}

int pydb_index_key(uint8_t *out, size_t cap, size_t *out_len, pydb_index *ix,
                   const uint8_t *term, size_t len, pydb_error *err)
{
    return ix->ops->key(ix, term, len, out, cap, out_len, err);
}

/* pydb_index_lookup_key's probe: is the first key of the range the
 * term itself? */
typedef struct exact_probe {
    const uint8_t *term;
    size_t len;
    int found;
} exact_probe;

static int exact_fn(void *ctx, const uint8_t *key, size_t len, uint64_t n)
{
    exact_probe *p = ctx;
    (void)n;
    if (len == p->len && memcmp(key, p->term, len) == 0) {
        p->found = 1;
        return 1;
    }
    /* ISIS trees compare keys blank-padded: an extension of the term by
     * a byte below ' ' comes before the term itself; go on past those */
    return !(len > p->len && key[p->len] < ' ');
}

int pydb_index_lookup_key(uint8_t *out, size_t cap, size_t *out_len,
                          pydb_index *ix, const uint8_t *term, size_t len,
                          pydb_error *err)
{
    exact_probe p = {term, len, 0};
    int rc;

    while (p.len > 0 && term[p.len - 1] == ' ') p.len--;
    if (p.len > 0 && p.len <= cap) {
        rc = ix->ops->terms(ix, term, p.len, term, p.len, exact_fn, &p, err);
        if (rc) return rc;
        if (p.found) {
            memcpy(out, term, p.len);
            *out_len = p.len;
            return PYDB_OK;
        }
    }
    return ix->ops->key(ix, term, len, out, cap, out_len, err);
}

int pydb_index_kind(const pydb_index *ix) { return ix->kind; }
int pydb_index_caps(const pydb_index *ix) { return ix->caps; }

void pydb_index_close(pydb_index *ix)
{
    if (ix) ix->ops->close(ix);
}

/* ---- posting buffers kept for the thread's next search ----
 *
 * A search allocates its lists' buffers and frees them at its end: for
 * a frequent word some hundreds of KiB.  Given back to malloc, the
 * heap's top is trimmed past M_TRIM_THRESHOLD and the next search
 * faults the same pages in again, zeroed by the kernel (a quarter of
 * `THE $ ALIC`'s time was in the kernel, docs/design.md §9).  So each
 * thread keeps up to BUF_KEEP freed buffers, BUF_KEEP_BYTES at most in
 * all, for its next reserve of a fresh list; they are freed when the
 * thread ends (a key destructor).  Without the key (its creation
 * failed) buffers go back to malloc as before. */
#define BUF_KEEP 4
#define BUF_KEEP_BYTES ((size_t)4 << 20)
/* smaller buffers come and go through malloc's free lists, unfaulted */
#define BUF_KEEP_MIN 1024   /* postings */

/* Under ASan a kept buffer is poisoned, so that a use after it was
 * given back is still reported. */
#if defined(__SANITIZE_ADDRESS__)
#define BUF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BUF_ASAN 1
#endif
#endif
#ifdef BUF_ASAN
#include <sanitizer/asan_interface.h>
#define BUF_POISON(v, bytes) ASAN_POISON_MEMORY_REGION((v), (bytes))
#define BUF_UNPOISON(v, bytes) ASAN_UNPOISON_MEMORY_REGION((v), (bytes))
#else
#define BUF_POISON(v, bytes) ((void)(v), (void)(bytes))
#define BUF_UNPOISON(v, bytes) ((void)(v), (void)(bytes))
#endif

typedef struct buf_cache {
    pydb_posting *v[BUF_KEEP];
    size_t cap[BUF_KEEP];   /* postings; 0: slot empty */
    size_t bytes;
} buf_cache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_ok;

static void cache_destroy(void *p)
{
    buf_cache *c = p;
    for (int i = 0; i < BUF_KEEP; i++) {
        BUF_UNPOISON(c->v[i], c->cap[i] * sizeof *c->v[i]);
        free(c->v[i]);
    }
    free(c);
}

static void cache_init(void)
{
    cache_ok = pthread_key_create(&cache_key, cache_destroy) == 0;
}

/* This thread's cache; NULL without one (and none made unless make). */
static buf_cache *cache_get(int make)
{
    buf_cache *c;
    pthread_once(&cache_once, cache_init);
    if (!cache_ok) return NULL;
    c = pthread_getspecific(cache_key);
    if (!c && make && (c = calloc(1, sizeof *c)) &&
        pthread_setspecific(cache_key, c)) {
        free(c);
        c = NULL;
    }
    return c;
}

/* Keep v (cap postings) for this thread if there is room; else free it. */
static void cache_put(pydb_posting *v, size_t cap)
{
    buf_cache *c = cap >= BUF_KEEP_MIN ? cache_get(1) : NULL;
    size_t bytes = cap * sizeof *v;
    if (c && bytes <= BUF_KEEP_BYTES - c->bytes)
        for (int i = 0; i < BUF_KEEP; i++)
            if (!c->cap[i]) {
                BUF_POISON(v, bytes);
                c->v[i] = v;
                c->cap[i] = cap;
                c->bytes += bytes;
                return;
            }
    free(v);
}

/* A kept buffer of at least n postings (the smallest such) into *p,
 * which holds none; 0 if none fits (or n is small: a small list would
 * take a large buffer that a large one then lacks). */
static int cache_take(pydb_postings *p, size_t n)
{
    buf_cache *c = n >= BUF_KEEP_MIN ? cache_get(0) : NULL;
    int best = -1;
    if (!c) return 0;
    for (int i = 0; i < BUF_KEEP; i++)
        if (c->cap[i] >= n && (best < 0 || c->cap[i] < c->cap[best]))
            best = i;
    if (best < 0) return 0;
    p->v = c->v[best];
    p->cap = c->cap[best];
    BUF_UNPOISON(p->v, p->cap * sizeof *p->v);
    c->bytes -= c->cap[best] * sizeof *p->v;
    c->v[best] = NULL;
    c->cap[best] = 0;
    return 1;
}

void pydb_postings_free(pydb_postings *p)
{
    cache_put(p->v, p->v ? p->cap : 0);
    memset(p, 0, sizeof *p);
}

int pydb__test_postings_reserve(size_t n, size_t *cap, pydb_error *err)
{
    pydb_postings p = {0};
    int rc = pydb__postings_reserve(&p, n, err);
    if (rc) return rc;
    *cap = p.cap;
    for (size_t i = 0; i < n; i++)
        p.v[i] = (pydb_posting){(int32_t)(i + 1), 1, 1, 1};
    pydb_postings_free(&p);
    return PYDB_OK;
}

int pydb__posting_cmp(const void *a, const void *b)
{
    return pydb__posting_order(a, b);
}

void pydb__postings_merge(pydb_posting *out, size_t *no, const pydb_posting *a,
                          size_t na, const pydb_posting *b, size_t nb)
{
    size_t i = 0, j = 0, o = *no;
    while (i < na && j < nb) {
        int c = pydb__posting_order(&a[i], &b[j]);
        if (c < 0) out[o++] = a[i++];
        else if (c > 0) out[o++] = b[j++];
        else { out[o++] = a[i++]; j++; }
    }
    while (i < na) out[o++] = a[i++];
    while (j < nb) out[o++] = b[j++];
    *no = o;
}

int pydb__runs_push(pydb_runs *r, size_t start, pydb_error *err)
{
    if (r->n + 2 > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        size_t *v = realloc(r->v, cap * sizeof *v);
        if (!v)
            return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                              "no memory for %zu posting runs", cap);
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = start;
    return PYDB_OK;
}

int pydb__postings_merge_runs(pydb_postings *l, size_t *runs, size_t nruns,
                              pydb_error *err)
{
    pydb_postings tmp = {0};
    size_t keep = runs[0];   /* l->v[0..keep) is not part of the runs */
    int rc;

    runs[nruns] = l->n;
    if (nruns < 2) return PYDB_OK;
    if ((rc = pydb__postings_reserve(&tmp, l->n, err))) return rc;
    memcpy(tmp.v, l->v, keep * sizeof *tmp.v);   /* both buffers hold it */
    while (nruns > 1) {
        size_t o = keep, r, w = 0;
        /* each step reads runs[r..r+2] before writing runs[w], w <= r */
        for (r = 0; r + 1 < nruns; r += 2) {
            size_t s0 = runs[r], s1 = runs[r + 1], e1 = runs[r + 2];
            runs[w++] = o;
            pydb__postings_merge(tmp.v, &o, l->v + s0, s1 - s0, l->v + s1,
                                 e1 - s1);
        }
        if (r < nruns) {   /* odd run out */
            size_t s0 = runs[r], e0 = runs[r + 1];
            runs[w++] = o;
            memcpy(tmp.v + o, l->v + s0, (e0 - s0) * sizeof *tmp.v);
            o += e0 - s0;
        }
        runs[w] = o;
        nruns = w;
        pydb_posting *sw = l->v;
        size_t swcap = l->cap;
        l->v = tmp.v;
        l->cap = tmp.cap;
        l->n = o;
        tmp.v = sw;
        tmp.cap = swcap;
    }
    pydb_postings_free(&tmp);
    return PYDB_OK;
}

void pydb__postings_normalize(pydb_posting *v, size_t *n, size_t from)
{
    size_t i, o;
    for (i = from; i < *n; i++)
        if (pydb__posting_order(&v[i - 1], &v[i]) >= 0) break;
    if (i >= *n) return;
    qsort(v, *n, sizeof *v, pydb__posting_cmp);
    for (i = 1, o = 1; i < *n; i++)
        if (pydb__posting_order(&v[o - 1], &v[i]) != 0) v[o++] = v[i];
    *n = o;
}

/* Grow the array *v of *cap items of `size` bytes to room for n > *cap
 * (capacity doubles from 64); `what` names the items in the error.
 * PYDB_ENOMEM leaves it unchanged. */
static int grow(void **v, size_t *cap, size_t n, size_t size,
                const char *what, pydb_error *err)
{
    size_t c = *cap ? *cap : 64;
    void *nv;
    /* doubling stays below 2n, whose bytes must not wrap */
    if (n > SIZE_MAX / 2 / size)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for %zu %s",
                          n, what);
    while (c < n) c *= 2;
    if (!(nv = realloc(*v, c * size)))
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for %zu %s",
                          c, what);
    *v = nv;
    *cap = c;
    return PYDB_OK;
}

int pydb__postings_reserve(pydb_postings *p, size_t n, pydb_error *err)
{
    void *v = p->v;
    int rc;
    if (n <= p->cap) return PYDB_OK;
    if (!p->v && cache_take(p, n)) return PYDB_OK;
    if ((rc = grow(&v, &p->cap, n, sizeof *p->v, "postings", err)))
        return rc;
    p->v = v;
    return PYDB_OK;
}

int pydb__mfns_reserve(pydb_mfns *m, size_t n, pydb_error *err)
{
    void *v = m->v;
    int rc;
    if (n <= m->cap) return PYDB_OK;
    if ((rc = grow(&v, &m->cap, n, sizeof *m->v, "MFNs", err))) return rc;
    m->v = v;
    return PYDB_OK;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int pydb__mfns_distinct(int32_t *v, size_t *n, pydb_error *err)
{
    int32_t lo, hi;
    size_t o = 0, words;
    uint64_t *bits;

    if (*n < 2) return PYDB_OK;
    lo = hi = v[0];
    for (size_t i = 1; i < *n; i++) {
        if (v[i] < lo) lo = v[i];
        if (v[i] > hi) hi = v[i];
    }
    words = ((size_t)((int64_t)hi - lo) >> 6) + 1;
    if (words > *n) {
        qsort(v, *n, sizeof *v, cmp_i32);
        for (size_t i = 0; i < *n; i++)
            if (!o || v[o - 1] != v[i]) v[o++] = v[i];
        *n = o;
        return PYDB_OK;
    }
    bits = calloc(words, sizeof *bits);
    if (!bits)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                          "no memory for a %zu-word MFN bitmap", words);
    for (size_t i = 0; i < *n; i++) {
        uint32_t d = (uint32_t)((int64_t)v[i] - lo);
        bits[d >> 6] |= (uint64_t)1 << (d & 63);
    }
    for (size_t w = 0; w < words; w++)
        for (uint64_t b = bits[w]; b; b &= b - 1)
            v[o++] = (int32_t)((int64_t)lo + (int64_t)(w << 6) +
                               __builtin_ctzll(b));
    free(bits);
    *n = o;
    return PYDB_OK;
}

int pydb__postings_push(pydb_postings *p, const pydb_posting *v,
                        pydb_error *err)
{
    int rc = pydb__postings_reserve(p, p->n + 1, err);
    if (rc) return rc;
    p->v[p->n++] = *v;
    return PYDB_OK;
}

/* ---- a borrowed view: an index that commits never change, as it is ---- */

typedef struct borrowed {
    pydb_index base;
    pydb_index *ix;
} borrowed;

static int borrowed_terms(pydb_index *ix, const uint8_t *prefix,
                          size_t prefix_len, const uint8_t *start,
                          size_t start_len, pydb_term_fn fn, void *ctx,
                          pydb_error *err)
{
    pydb_index *o = ((borrowed *)ix)->ix;
    return o->ops->terms(o, prefix, prefix_len, start, start_len, fn, ctx,
                         err);
}

static int borrowed_postings(pydb_postings *out, pydb_index *ix,
                             const uint8_t *key, size_t len, pydb_error *err)
{
    pydb_index *o = ((borrowed *)ix)->ix;
    return o->ops->postings(out, o, key, len, err);
}

static int borrowed_key(pydb_index *ix, const uint8_t *term, size_t len,
                        uint8_t *out, size_t cap, size_t *out_len,
                        pydb_error *err)
{
    pydb_index *o = ((borrowed *)ix)->ix;
    return o->ops->key(o, term, len, out, cap, out_len, err);
}

static void borrowed_close(pydb_index *ix) { free(ix); }

static int borrowed_resident(const pydb_index *ix)
{
    const pydb_index *o = ((const borrowed *)ix)->ix;
    return o->ops->resident && o->ops->resident(o);
}

int pydb__index_borrow(pydb_index **view, pydb_index *ix, pydb_error *err)
{
    static const pydb_index_ops ops = {"borrowed", borrowed_terms,
                                       borrowed_postings, borrowed_key,
                                       borrowed_close, NULL, NULL,
                                       borrowed_resident, NULL, NULL,
                                       NULL, NULL, NULL};
    borrowed *b = calloc(1, sizeof *b);
    if (!b) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    b->base = *ix;
    b->base.ops = &ops;
    b->ix = ix;
    *view = &b->base;
    return PYDB_OK;
}
