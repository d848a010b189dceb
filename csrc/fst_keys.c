/*
 * fst_keys.c - key extraction: runs every rule of an FST over a record
 * (pydb__fst_format), splits the output by the rule's indexing
 * technique (0-8, and the CISIS IT+1000 "/MFN/" form), normalises the
 * keys, drops stop words and hands each (key, posting) to a callback,
 * with the OCC/CNT rules of docs/isis-formats.md §5.2 (pydb__fst_keys).
 *
 * Depends on: fst_format.c (pydb__fst_format), keys.c (normalisation,
 * word characters, stop words), fst_int.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <string.h>
#include "fst_int.h"

/* ------------------------------------------------------- key extraction */

typedef struct kx {
    const pydb_keyrules *r;
    const pydb_stopwords *sw;
    pydb_fst_scratch *s;
    const uint8_t *prefix;
    size_t prefix_len;
    pydb_key_fn fn;
    void *ctx;
    pydb_error *err;
} kx;

/* Normalise prefix + term and hand it on; *emitted = 1 if a key came out.
 * stop: check the stop words (technique 4/8), on the term alone, with
 * or without a prefix, as CISIS does (cifst.c, fst_inter, case 4: the
 * word without the prefix against the list; the list only when the
 * program is given one, mx's and ifupd's `stw=@`). */
static int emit(kx *k, const uint8_t *t, size_t tl, pydb_posting *p,
                int stop, int *emitted)
{
    /* the key (at most 4 bytes per input byte, pydb__key_normalize),
     * then room for prefix + term to normalise them together */
    size_t in = k->prefix_len + tl, out = in * 4 + 16, need = out + in, kl;
    int rc;
    *emitted = 0;
    if (need > k->s->key_cap) {
        uint8_t *nv = realloc(k->s->key, need);
        if (!nv)
            return PYDB_ERROR(k->err, PYDB_ENOMEM, "", -1,
                              "cannot allocate a %zu-byte key", need);
        k->s->key = nv;
        k->s->key_cap = need;
    }
    if (stop && k->sw && k->sw->n) {
        rc = pydb__key_normalize(k->r, t, tl, k->s->key, out, &kl, k->err);
        if (rc) return rc;
        if (pydb__stopwords_has(k->sw, k->s->key, kl)) return PYDB_OK;
    }
    if (k->prefix_len) {
        /* normalise the concatenation (blanks inside are kept) */
        uint8_t *tmp = k->s->key + out;
        memcpy(tmp, k->prefix, k->prefix_len);
        memcpy(tmp + k->prefix_len, t, tl);
        rc = pydb__key_normalize(k->r, tmp, in, k->s->key, out, &kl, k->err);
    } else {
        rc = pydb__key_normalize(k->r, t, tl, k->s->key, out, &kl, k->err);
    }
    if (rc) return rc;
    if (kl == 0) return PYDB_OK;
    *emitted = 1;
    return k->fn(k->ctx, k->s->key, kl, p);
}

static int nonblank(const uint8_t *t, size_t l)
{
    for (size_t i = 0; i < l; i++)
        if (t[i] != ' ') return 1;
    return 0;
}

static int line_keys(kx *k, int tech, const uint8_t *t, size_t l,
                     pydb_posting *p)
{
    int rc, em;
    switch (tech) {
    case 0:
        p->cnt++;
        if ((rc = emit(k, t, l, p, 0, &em))) return rc;
        if (!em) p->cnt--;
        return PYDB_OK;
    case 1: {
        size_t i = 0, st = 0;
        while (i <= l) {
            if (i == l || (t[i] == '^' && i + 1 < l)) {
                if (i > st && nonblank(t + st, i - st)) {
                    p->cnt++;
                    if ((rc = emit(k, t + st, i - st, p, 0, &em))) return rc;
                    if (!em) p->cnt--;
                } else if (i == st && i > 0 && i < l) {
                    /* an empty subfield before a delimiter takes a
                     * position, as in CISIS (cifst.c, technique 1: an
                     * item of length 0 ended by the delimiter, cnt++);
                     * a leading ^x does not */
                    p->cnt++;
                }
                if (i == l) break;
                i += 2;
                st = i;
                continue;
            }
            i++;
        }
        return PYDB_OK;
    }
    case 2: case 3: {
        int open = tech == 2 ? '<' : '/', close = tech == 2 ? '>' : '/';
        size_t i = 0;
        while (i < l) {
            const uint8_t *a = memchr(t + i, open, l - i);
            if (!a) break;
            size_t st = (size_t)(a - t) + 1;
            const uint8_t *b = st < l ? memchr(t + st, close, l - st) : NULL;
            if (!b) break;
            size_t en = (size_t)(b - t);
            if (en > st && nonblank(t + st, en - st)) {
                p->cnt++;
                if ((rc = emit(k, t + st, en - st, p, 0, &em))) return rc;
                if (!em) p->cnt--;
            }
            i = en + 1;
        }
        return PYDB_OK;
    }
    default: {   /* 4: words */
        size_t i = 0;
        while (i < l) {
            int w;
            size_t cl = pydb__word_char(k->r, t + i, l - i, &w);
            if (!w) {
                i += cl;
                continue;
            }
            size_t st = i;
            i += cl;
            while (i < l) {
                cl = pydb__word_char(k->r, t + i, l - i, &w);
                if (!w) break;
                i += cl;
            }
            p->cnt++;   /* stop words are counted, not emitted */
            if ((rc = emit(k, t + st, i - st, p, 1, &em))) return rc;
        }
        return PYDB_OK;
    }
    }
}

int pydb__fst_keys(const pydb_fst *fst, const pydb_keyrules *r,
                   const pydb_stopwords *sw, int32_t mfn,
                   const pydb_field *fields, uint32_t n,
                   pydb_fst_scratch *s, pydb_key_fn fn, void *ctx,
                   pydb_error *err)
{
    kx k = {r, sw, s, NULL, 0, fn, ctx, err};
    int rc;

    for (size_t ri = 0; ri < fst->nrules; ri++) {
        const rule *ru = &fst->rules[ri];
        int tech = ru->tech % 1000, ext = ru->tech >= 1000;
        /* p.mfn: the record's, or the one named by an IT+1000 output */
        pydb_posting p = {mfn, ru->id, 0, 0};
        if ((rc = pydb__fst_format(fst, ri, mfn, fields, n, s, err)))
            return rc;
        const uint8_t *o = s->out;
        size_t ol = s->out_len, i = 0;
        k.prefix = NULL;
        k.prefix_len = 0;
        if (ext && ol > 2 && o[0] == '/') {
            /* CISIS IT+1000: the output starts with /MFN/, the record
             * whose postings the keys become */
            size_t j = 1;
            int64_t m = 0;
            while (j < ol && o[j] >= '0' && o[j] <= '9' && m < 1 << 30)
                m = m * 10 + (o[j++] - '0');
            if (j > 1 && j < ol && o[j] == '/' && m >= 1) {
                p.mfn = (int32_t)m;
                i = j + 1;
            }
        }
        if (tech >= 5) {
            tech -= 4;
            if (ol - i >= 2) {
                const uint8_t *c = memchr(o + i + 1, o[i], ol - i - 1);
                if (c) {
                    k.prefix = o + i + 1;
                    k.prefix_len = (size_t)(c - o) - i - 1;
                    i = (size_t)(c - o) + 1;
                }
            }
        }
        /* '%' separates occurrences (OCC + 1, CNT restarts); new lines
         * separate keys (technique 0) and end items and words, CNT goes
         * on [E: pyisis sample cds, (V70/) gives OCC 1, CNT 1, 2, ...] */
        while (i < ol) {
            size_t oe = i;
            int had = 0;
            while (oe < ol && o[oe] != '%') oe++;
            p.cnt = 0;
            while (i < oe) {
                size_t e = i;
                while (e < oe && o[e] != '\n' && o[e] != '\r') e++;
                const uint8_t *t = o + i;
                size_t l = e - i;
                i = e + 1;
                while (l > 0 && t[0] == ' ') t++, l--;
                while (l > 0 && t[l - 1] == ' ') l--;
                if (l == 0) continue;
                if (!had) {
                    p.occ++;
                    had = 1;
                }
                if ((rc = line_keys(&k, tech, t, l, &p))) return rc;
            }
            i = oe + 1;
        }
    }
    return PYDB_OK;
}
