/*
 * nidx_writer.c - the native index's segment writer (nidx_writer.h):
 * accumulating keys and postings, sorting them, and handing them to the
 * segment encoder in key order.
 *
 * Depends on: nidx_seg.h (encoder), index_int.h (key and posting order).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>
#include "nidx_writer.h"

#define STAGE 1024    /* keys hashed and prefetched together */

static uint32_t key_hash(const uint8_t *k, size_t l)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ l;
    size_t i = 0;
    for (; i + 8 <= l; i += 8) {
        uint64_t w;
        memcpy(&w, k + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, k + i, l - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

void pydb__nacc_free(nidx_acc *a)
{
    free(a->st);
    free(a->stage_keys.p);
    free(a->arena.p);
    free(a->t);
    free(a->ht);
    free(a->p);
    memset(a, 0, sizeof *a);
}

static int acc_grow_ht(nidx_acc *a)
{
    size_t cap = a->hcap ? a->hcap * 2 : 1024;   /* a commit: few terms */
    uint64_t *nh = calloc(cap, sizeof *nh);
    if (!nh) return -1;
    for (size_t i = 0; i < a->nt; i++) {
        size_t j = a->t[i].hash & (cap - 1);
        while (nh[j]) j = (j + 1) & (cap - 1);
        nh[j] = (uint64_t)a->t[i].hash << 32 | (uint64_t)(i + 1);
    }
    free(a->ht);
    a->ht = nh;
    a->hcap = cap;
    return 0;
}

/* Insert one key (hash h) and its posting. */
static int acc_insert(nidx_acc *a, const uint8_t *key, size_t len,
                      uint32_t h, const pydb_posting *p)
{
    size_t j;
    uint32_t ti = UINT32_MAX;

    j = h & (a->hcap - 1);
    for (;;) {
        uint64_t v = a->ht[j];
        if (!v) break;
        if ((uint32_t)(v >> 32) == h) {
            const nidx_aterm *t = &a->t[(uint32_t)v - 1];
            if (t->len == len && memcmp(a->arena.p + t->off, key, len) == 0) {
                ti = (uint32_t)v - 1;
                break;
            }
        }
        j = (j + 1) & (a->hcap - 1);
    }
    if (ti == UINT32_MAX) {
        if (len > UINT32_MAX || a->nt >= UINT32_MAX - 1)
            return PYDB_ERROR(a->err, PYDB_ETOOBIG, "", -1,
                              "too many or too long keys");
        if (a->nt == a->tcap) {
            size_t cap = a->tcap ? a->tcap * 2 : 4096;
            nidx_aterm *nv = realloc(a->t, cap * sizeof *nv);
            if (!nv) goto oom;
            a->t = nv;
            a->tcap = cap;
        }
        ti = (uint32_t)a->nt++;
        a->t[ti].off = a->arena.n;
        a->t[ti].len = (uint32_t)len;
        a->t[ti].hash = h;
        a->t[ti].n = 0;
        pydb__buf_put(&a->arena, key, len);
        if (a->arena.oom) goto oom;
        a->ht[j] = (uint64_t)h << 32 | (uint64_t)(ti + 1);
    }
    a->p[a->np].term = ti;
    a->p[a->np].p = *p;
    a->np++;
    a->t[ti].n++;
    return PYDB_OK;
oom:
    return PYDB_ERROR(a->err, PYDB_ENOMEM, "", -1,
                      "cannot grow the key accumulator");
}

/* Insert the staged keys: hash slots and terms prefetched first, so the
 * cache misses of a batch overlap. */
static int acc_flush(nidx_acc *a)
{
    int rc = PYDB_OK;
    if (a->nst == 0) return PYDB_OK;
    while ((a->nt + a->nst) * 2 >= a->hcap)
        if (acc_grow_ht(a) < 0) goto oom;
    if (a->np + a->nst > a->pcap) {
        size_t cap = a->pcap ? a->pcap : 65536;
        while (cap < a->np + a->nst) cap *= 2;
        nidx_apost *nv = realloc(a->p, cap * sizeof *nv);
        if (!nv) goto oom;
        a->p = nv;
        a->pcap = cap;
    }
    for (size_t i = 0; i < a->nst; i++)
        __builtin_prefetch(&a->ht[a->st[i].hash & (a->hcap - 1)]);
    for (size_t i = 0; i < a->nst; i++) {
        uint64_t v = a->ht[a->st[i].hash & (a->hcap - 1)];
        if (v) __builtin_prefetch(&a->t[(uint32_t)v - 1]);
    }
    for (size_t i = 0; i < a->nst && rc == PYDB_OK; i++)
        rc = acc_insert(a, a->stage_keys.p + a->st[i].off, a->st[i].len,
                        a->st[i].hash, &a->st[i].p);
    a->nst = 0;
    a->stage_keys.n = 0;
    return rc;
oom:
    return PYDB_ERROR(a->err, PYDB_ENOMEM, "", -1,
                      "cannot grow the key accumulator");
}

/* pydb_key_fn: add one (key, posting). */
int pydb__nacc_add(void *ctx, const uint8_t *key, size_t len,
                   const pydb_posting *p)
{
    nidx_acc *a = ctx;
    if (!a->st && !(a->st = malloc(STAGE * sizeof *a->st)))
        return PYDB_ERROR(a->err, PYDB_ENOMEM, "", -1, "no memory");
    if (len > UINT32_MAX)
        return PYDB_ERROR(a->err, PYDB_ETOOBIG, "", -1, "key too long");
    nidx_staged *s = &a->st[a->nst++];
    s->off = a->stage_keys.n;
    s->len = (uint32_t)len;
    s->hash = key_hash(key, len);
    s->p = *p;
    pydb__buf_put(&a->stage_keys, key, len);
    if (a->stage_keys.oom)
        return PYDB_ERROR(a->err, PYDB_ENOMEM, "", -1, "no memory");
    return a->nst == STAGE ? acc_flush(a) : PYDB_OK;
}

static int cmp_term(const void *x, const void *y, void *ctx)
{
    const nidx_acc *a = ctx;
    const nidx_aterm *s = &a->t[*(const uint32_t *)x];
    const nidx_aterm *t = &a->t[*(const uint32_t *)y];
    return pydb__keycmp(a->arena.p + s->off, s->len, a->arena.p + t->off,
                        t->len);
}

typedef struct skey {
    uint64_t pfx;   /* first 8 key bytes, big-endian, zero padded */
    uint32_t idx, pad;
} skey;

/* Below this many terms a comparison sort beats the radix sort, whose
 * four passes over 65,536 counters cost the same for one term as for a
 * million (a one-record commit has a few dozen). */
#define RADIX_MIN 4096

/* sort_terms() for fewer than RADIX_MIN terms. */
static int sort_few_terms(nidx_acc *a, uint32_t *order)
{
    for (size_t i = 0; i < a->nt; i++) order[i] = (uint32_t)i;
    qsort_r(order, a->nt, sizeof *order, cmp_term, a);
    return 0;
}

/* order[] = term indexes in key order: LSD radix sort on the 8-byte
 * prefix, then a comparison sort inside runs of equal prefixes (few
 * terms: sort_few_terms). */
static int sort_terms(nidx_acc *a, uint32_t *order)
{
    if (a->nt < RADIX_MIN) return sort_few_terms(a, order);
    size_t n = a->nt;
    skey *x = malloc((n ? n : 1) * sizeof *x), *y = malloc((n ? n : 1) * sizeof *y);
    size_t *cnt = malloc(65536 * sizeof *cnt);
    if (!x || !y || !cnt) {
        free(x);
        free(y);
        free(cnt);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = a->arena.p + a->t[i].off;
        size_t l = a->t[i].len < 8 ? a->t[i].len : 8;
        uint64_t v = 0;
        for (size_t j = 0; j < 8; j++) v = v << 8 | (j < l ? k[j] : 0);
        x[i].pfx = v;
        x[i].idx = (uint32_t)i;
    }
    for (int pass = 0; pass < 4; pass++) {
        int sh = pass * 16;
        memset(cnt, 0, 65536 * sizeof *cnt);
        for (size_t i = 0; i < n; i++) cnt[(x[i].pfx >> sh) & 0xFFFF]++;
        size_t sum = 0, nz = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = cnt[d];
            nz += c != 0;
            cnt[d] = sum;
            sum += c;
        }
        if (nz <= 1) continue;   /* one digit value: already in order */
        for (size_t i = 0; i < n; i++) y[cnt[(x[i].pfx >> sh) & 0xFFFF]++] = x[i];
        skey *t = x;
        x = y;
        y = t;
    }
    for (size_t i = 0; i < n; i++) order[i] = x[i].idx;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && x[j].pfx == x[i].pfx) j++;
        if (j - i > 1) qsort_r(order + i, j - i, sizeof *order, cmp_term, a);
        i = j;
    }
    free(x);
    free(y);
    free(cnt);
    return 0;
}

size_t pydb__nacc_bytes(const nidx_acc *a)
{
    /* what the accumulator holds (terms, their keys, the hash table,
     * postings), and what sorting it adds (per term: order, start and
     * two radix keys; per posting: its copy in key order) */
    return a->arena.n + a->stage_keys.n + a->hcap * sizeof *a->ht +
           (a->nt + a->nst) * (sizeof(nidx_aterm) + 4 + 8 + 2 * 16) +
           (a->np + a->nst) * (sizeof(nidx_apost) + sizeof(pydb_posting));
}

void pydb__nacc_reset(nidx_acc *a)
{
    a->nst = 0;
    a->stage_keys.n = 0;
    a->arena.n = 0;
    a->nt = 0;
    a->np = 0;
    if (a->ht) memset(a->ht, 0, a->hcap * sizeof *a->ht);
}

int pydb__nacc_each(nidx_acc *a, nidx_term_fn fn, void *ctx, pydb_error *err)
{
    uint32_t *order = NULL;
    uint64_t *start = NULL;
    pydb_posting *sorted = NULL;
    int rc = PYDB_OK;

    if ((rc = acc_flush(a))) return rc;
    order = malloc((a->nt ? a->nt : 1) * sizeof *order);
    start = malloc((a->nt + 1) * sizeof *start);
    sorted = malloc((a->np ? a->np : 1) * sizeof *sorted);
    if (!order || !start || !sorted) goto oom;
    /* counting sort by term (stable: MFN order of arrival kept) */
    start[0] = 0;
    for (size_t i = 0; i < a->nt; i++) start[i + 1] = start[i] + a->t[i].n;
    for (size_t i = 0; i < a->np; i++) {
        if (i + 16 < a->np) __builtin_prefetch(&start[a->p[i + 16].term]);
        if (i + 8 < a->np)
            __builtin_prefetch(&sorted[start[a->p[i + 8].term]], 1);
        sorted[start[a->p[i].term]++] = a->p[i].p;
    }
    for (size_t i = a->nt; i > 0; i--) start[i] = start[i - 1];
    start[0] = 0;
    if (sort_terms(a, order) < 0) goto oom;

    for (size_t k = 0; k < a->nt && rc == PYDB_OK; k++) {
        if (k + 16 < a->nt) {
            __builtin_prefetch(&a->t[order[k + 16]]);
            __builtin_prefetch(&start[order[k + 16]]);
        }
        if (k + 8 < a->nt) {
            __builtin_prefetch(a->arena.p + a->t[order[k + 8]].off);
            __builtin_prefetch(sorted + start[order[k + 8]]);
        }
        const nidx_aterm *t = &a->t[order[k]];
        pydb_posting *v = sorted + start[order[k]];
        size_t n = (size_t)t->n;
        for (size_t i = 1; i < n; i++)
            if (pydb__posting_cmp(&v[i - 1], &v[i]) >= 0) {
                qsort(v, n, sizeof *v, pydb__posting_cmp);
                break;
            }
        /* drop exact duplicates (two rules with one ID may repeat one) */
        size_t w = 0;
        for (size_t i = 0; i < n; i++)
            if (w == 0 || pydb__posting_cmp(&v[w - 1], &v[i]) != 0)
                v[w++] = v[i];
        rc = fn(ctx, a->arena.p + t->off, t->len, v, w);
    }
    goto cleanup;
oom:
    rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "cannot sort the index keys");
cleanup:
    free(order);
    free(start);
    free(sorted);
    return rc;
}

static int enc_term(void *ctx, const uint8_t *key, size_t len,
                    const pydb_posting *v, size_t n)
{
    pydb__nseg_enc_term(ctx, key, len, v, n);
    return PYDB_OK;
}

/* Build the bytes of a segment from the accumulated postings. */
int pydb__nacc_segment(nidx_acc *a, const int32_t *tombs, size_t ntombs,
                       pydb_buf *out, pydb_error *err)
{
    nidx_seg_enc enc;
    int rc;

    memset(&enc, 0, sizeof enc);
    if ((rc = acc_flush(a))) return rc;
    if ((rc = pydb__nseg_enc_begin(&enc, out, a->nt, err))) goto cleanup;
    if ((rc = pydb__nacc_each(a, enc_term, &enc, err))) goto cleanup;
    rc = pydb__nseg_enc_finish(&enc, tombs, ntombs, err);
cleanup:
    pydb__nseg_enc_free(&enc);
    return rc;
}
