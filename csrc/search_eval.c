/*
 * search_eval.c - evaluating a parsed CDS/ISIS search expression
 * (search_int.h) over a pydb_index, and pydb_search() itself: parse,
 * pin one committed state of the index, evaluate, reduce to MFNs, drop
 * the records that are not active.
 *
 * DESIGN (sections 1, 2 and 4 -- tokens, grammar, capabilities -- are in
 * search_parse.c)
 *
 * 3. Values.  Every node evaluates to a posting list sorted by (MFN, TAG,
 *    OCC, CNT) without duplicates.  What each operator keeps:
 *      A + B      the union of both lists
 *      A * B      the postings of A and of B whose MFN is in both
 *      A ^ B      the postings of A whose MFN is not in B
 *      A (G) B    the postings of A and of B whose (MFN, TAG) is in both
 *      A (F) B    the postings of A and of B whose (MFN, TAG, OCC) is in both
 *      A .xn B    each posting p of A for which B has a posting q with the
 *                 same (MFN, TAG, OCC) and |CNT(p) - CNT(q)| <= n, and each
 *                 such q of B (order-insensitive, as CISIS b7_prox)
 *      A $xn B    the same with |CNT(p) - CNT(q)| = n
 *    So the MFN set of a result is exactly the boolean combination of the
 *    operands' MFN sets, and positional operators nest: `(A . B) . C`
 *    holds where C is within n words of A or of B where they are near each
 *    other; `(A + B) (F) C` where C shares an occurrence with A or B.
 *    The final answer is the distinct MFNs of the list, minus those whose
 *    XRF entry is not active when a database is given (logically deleted,
 *    physically deleted, never created or above the highest MFN: postings
 *    of such records may remain in an index until it is updated, formats
 *    §6.4 step 4).
 *
 * 5. Cost.  Every operator is one linear merge of two sorted lists; a
 *    truncation collects the keys first (the term callback must not read
 *    postings), then merges the per-key runs pairwise, bottom-up:
 *    O(N log k) for N postings over k keys; a chain of k '+' is merged
 *    the same way.  An operand after an empty left side of *, ^, (G), (F)
 *    or proximity is not evaluated.
 *
 * 6. MFN sets.  An expression with no (G), (F), '.' or '$' anywhere is
 *    evaluated on sorted, distinct MFN arrays instead (the answer is the
 *    same by section 3): a truncation's per-key runs and the operands of
 *    a '+' chain are reduced through a bitmap of their MFN range (or a
 *    sort when the range is sparse), not merged as postings: O(N + range
 *    / 64).  `BA$` on the default database: 2.4 -> 1.0 ms.
 *
 * 7. Restriction.  Every operator is MFN-local: its value at one MFN
 *    depends only on its operands' values at that MFN.  So an operand
 *    whose value matters only at some MFNs may be evaluated there alone:
 *    the right operand of *, ^, (G), (F) and proximity matters only at
 *    the MFNs of the left one's value.  eval() and mset_eval() take that
 *    set (`in`, a bitmap; NULL: every MFN) and pass it down through '+'
 *    to the terms, whose postings outside it the index reads past without
 *    storing them (postings_in_set, index_int.h) or which are dropped
 *    right after reading.  A value so computed is exact at every MFN of
 *    `in` and may lack postings elsewhere, which no caller looks at.  A
 *    left value too sparse for a bitmap (bits_alloc) restricts nothing.
 *    A chain of *, (G), (F) and proximity is empty wherever one operand
 *    is, so its operands are evaluated rarest first (the index's counts),
 *    each restricted to the MFNs of the one before, and combined in their
 *    order (eval_rarest_first); a chain of '*' alone on MFN sets too.
 *    On the default database (THE 11,697 postings, ALIC 5,724), with the
 *    decoder's one-load path for four one-byte varints and no sortedness
 *    pass over a native index's lists: `THE $ ALIC` 123 -> 57 us, `THE
 *    . . . ALIC` 121 -> 56 us, `THE * ALIC` 105 -> 50 us.
 *    A chain whose operands are all terms first narrows the records with
 *    the bits of all but its commonest term, rarest first (term_bits:
 *    the index's own bits, a native index's dense lists, nidx_seg.h, or
 *    the term's MFNs), then reads the commonest one's postings of those
 *    records, then the others' postings of the records it has; a chain
 *    of '*' on MFN sets evaluates its next operand within the rarest
 *    term's bits (mset_eval), and a chain of '+' ORs its terms' bits a
 *    word at a time (mset_or).  With dense lists (segment format 4) and
 *    bits: `THE $ ALIC` 72 -> 51 us, `THE * ALIC` 47 -> 13 us, `THE +
 *    ALIC` 81 -> 28 us (docs/architecture.md, "Dense lists").  A chain
 *    of (G), (F) and proximity alone holds a record only where its terms
 *    share a TAG (section 3), so it ANDs the commonest term's bits too
 *    and then passes the records whose terms' TAG masks (segment format
 *    5) share no bit (narrow_by_tags): of the 1,165 records THE and
 *    ALIC share, 10 are left to read; `THE $ ALIC` 51 -> 28 us.
 *
 * Depends on: search_parse.c (pydb__search_parse), index_int.h (the
 * index interface, postings), the database (pydb_xrf reads for
 * drop_inactive; as of a snapshot's state for pydb_snapshot_search).
 */
#include <stdlib.h>
#include <string.h>
#include "search_int.h"

/* -------------------------------------------------------------- postings */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

typedef pydb_postings plist;

/* A sorted, distinct MFN array: an MFN-level value (section 6). */
typedef pydb_mfns mset;

/* Compare postings on their first `level` fields (1 MFN, 2 +TAG, 3 +OCC,
 * 4 +CNT). */
static inline int pcmp(const pydb_posting *a, const pydb_posting *b,
                       int level)
{
    if (a->mfn != b->mfn) return a->mfn < b->mfn ? -1 : 1;
    if (level < 2) return 0;
    if (a->tag != b->tag) return a->tag < b->tag ? -1 : 1;
    if (level < 3) return 0;
    if (a->occ != b->occ) return a->occ < b->occ ? -1 : 1;
    if (level < 4) return 0;
    if (a->cnt != b->cnt) return a->cnt < b->cnt ? -1 : 1;
    return 0;
}

/* Keep the postings whose TAG is in tags[ntags] (sorted). */
static void pl_filter_tags(pydb_posting *v, size_t *n, const uint32_t *tags,
                           size_t ntags)
{
    size_t o = 0;
    for (size_t i = 0; i < *n; i++)
        if (bsearch(&v[i].tag, tags, ntags, sizeof *tags, cmp_u32))
            v[o++] = v[i];
    *n = o;
}

/* Keep the postings of v[*n] whose MFN is in *in. */
static void pl_restrict(pydb_posting *v, size_t *n, const pydb_mfn_bits *in)
{
    size_t o = 0;
    for (size_t i = 0; i < *n; i++) {   /* no branch on the answer */
        v[o] = v[i];
        o += (size_t)pydb__mfn_bits_has(in, v[i].mfn);
    }
    *n = o;
}

/* A restriction (section 7): the bitmap of MFNs lo..hi, zeroed, for n of
 * them, in b (b->w = *w, the caller's to free); *w NULL and no error
 * when they are too sparse for a bitmap (no restriction then). */
static int bits_alloc(uint64_t **w, pydb_mfn_bits *b, int32_t lo,
                      int32_t hi, size_t n, pydb_error *err)
{
    size_t words = ((size_t)((int64_t)hi - lo) >> 6) + 1;
    *w = NULL;
    if (words > 4 * n + 1024) return PYDB_OK;   /* 32 bytes per MFN at most */
    if (!(*w = calloc(words, sizeof **w)))
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                          "no memory for a %zu-word MFN bitmap", words);
    b->w = *w;
    b->lo = lo;
    b->nwords = words;
    return PYDB_OK;
}

static inline void bits_set(uint64_t *w, int32_t lo, int32_t m)
{
    uint32_t d = (uint32_t)((int64_t)m - lo);
    w[d >> 6] |= (uint64_t)1 << (d & 63);
}

/* The restriction to the MFNs of l (sorted, not empty): *w NULL when
 * there is none (bits_alloc). */
static int bits_of_postings(uint64_t **w, pydb_mfn_bits *b, const plist *l,
                            pydb_error *err)
{
    int rc = bits_alloc(w, b, l->v[0].mfn, l->v[l->n - 1].mfn, l->n, err);
    if (rc || !*w) return rc;
    for (size_t i = 0; i < l->n; i++) bits_set(*w, b->lo, l->v[i].mfn);
    return PYDB_OK;
}

/* The restriction to the MFNs of m (not empty): as bits_of_postings. */
static int bits_of_mset(uint64_t **w, pydb_mfn_bits *b, const mset *m,
                        pydb_error *err)
{
    int rc = bits_alloc(w, b, m->v[0], m->v[m->n - 1], m->n, err);
    if (rc || !*w) return rc;
    for (size_t i = 0; i < m->n; i++) bits_set(*w, b->lo, m->v[i]);
    return PYDB_OK;
}

/* The first k >= i with v[k].mfn >= mfn (n if none): galloping, then a
 * binary search, so that a long run of MFNs the other list lacks costs
 * its logarithm (a frequent term against a rare one). */
static size_t skip_to(const pydb_posting *v, size_t n, size_t i,
                      int32_t mfn)
{
    size_t lo = i, step = 1, hi;
    while (lo + step < n && v[lo + step].mfn < mfn) {
        lo += step;
        step *= 2;
    }
    hi = lo + step < n ? lo + step : n;   /* v[hi].mfn >= mfn, or hi = n */
    while (lo < hi) {                     /* v[lo].mfn < mfn unless lo = i */
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].mfn < mfn) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* End of the group of v[i] on `level` fields. */
static inline size_t group_end(const pydb_posting *v, size_t n, size_t i,
                               int level)
{
    size_t j = i + 1;
    while (j < n && pcmp(&v[i], &v[j], level) == 0) j++;
    return j;
}

typedef struct scratch {
    uint8_t *ma, *mb;    /* proximity match marks                         */
    size_t cap;
} scratch;

static int marks(scratch *s, size_t n, pydb_error *err)
{
    if (n <= s->cap) return PYDB_OK;
    uint8_t *a = realloc(s->ma, n), *b;
    if (!a) goto oom;
    s->ma = a;
    b = realloc(s->mb, n);
    if (!b) goto oom;
    s->mb = b;
    s->cap = n;
    return PYDB_OK;
oom:
    return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for %zu marks", n);
}

/* Mark each a[i] that has a b[j] at CNT distance <= n (exact: == n).
 * Both runs share (MFN, TAG, OCC) and are sorted by CNT. */
static void prox_mark(uint8_t *m, const pydb_posting *a, size_t na,
                      const pydb_posting *b, size_t nb, int64_t n, int exact)
{
    size_t k = 0, k2 = 0;
    for (size_t i = 0; i < na; i++) {
        int64_t c = a[i].cnt;
        m[i] = 0;
        if (!exact) {
            while (k < nb && (int64_t)b[k].cnt < c - n) k++;
            m[i] = k < nb && (int64_t)b[k].cnt <= c + n;
        } else {
            while (k < nb && (int64_t)b[k].cnt < c - n) k++;
            while (k2 < nb && (int64_t)b[k2].cnt < c + n) k2++;
            m[i] = (k < nb && (int64_t)b[k].cnt == c - n) ||
                   (k2 < nb && (int64_t)b[k2].cnt == c + n);
        }
    }
}

/* out = a OP b (a, b sorted and distinct; out sorted and distinct). */
static int combine(plist *out, const plist *a, const plist *b, int op,
                   int dist, scratch *sc, pydb_error *err)
{
    const pydb_posting *A = a->v, *B = b->v;
    size_t na = a->n, nb = b->n, i = 0, j = 0, o = 0;
    int level, rc;

    memset(out, 0, sizeof *out);
    if (op == OP_OR) {
        if ((rc = pydb__postings_reserve(out, na + nb, err))) return rc;
        pydb__postings_merge(out->v, &o, A, na, B, nb);
        out->n = o;
        return PYDB_OK;
    }
    level = op == OP_AND || op == OP_NOT ? 1 : op == OP_G ? 2 : 3;
    if ((rc = pydb__postings_reserve(out, op == OP_NOT ? na : na + nb,
                                     err)))
        return rc;
    while (i < na && j < nb) {
        int c;
        if (A[i].mfn < B[j].mfn) {   /* records B lacks: skip them */
            size_t ie = skip_to(A, na, i, B[j].mfn);
            if (op == OP_NOT) {
                memcpy(out->v + o, A + i, (ie - i) * sizeof *A);
                o += ie - i;
            }
            i = ie;
            continue;
        }
        if (B[j].mfn < A[i].mfn) {
            j = skip_to(B, nb, j, A[i].mfn);
            continue;
        }
        c = pcmp(&A[i], &B[j], level);
        if (c < 0) {
            size_t ie = group_end(A, na, i, level);
            if (op == OP_NOT) {
                memcpy(out->v + o, A + i, (ie - i) * sizeof *A);
                o += ie - i;
            }
            i = ie;
        } else if (c > 0) {
            j = group_end(B, nb, j, level);
        } else {
            size_t ie = group_end(A, na, i, level);
            size_t je = group_end(B, nb, j, level);
            if (op == OP_NEAR || op == OP_EXACT) {
                size_t ka = ie - i, kb = je - j, x = 0, y = 0;
                if ((rc = marks(sc, ka > kb ? ka : kb, err))) return rc;
                prox_mark(sc->ma, A + i, ka, B + j, kb, dist,
                          op == OP_EXACT);
                prox_mark(sc->mb, B + j, kb, A + i, ka, dist,
                          op == OP_EXACT);
                /* merge the marked postings of both runs */
                while (x < ka || y < kb) {
                    while (x < ka && !sc->ma[x]) x++;
                    while (y < kb && !sc->mb[y]) y++;
                    if (x >= ka && y >= kb) break;
                    int d = x >= ka ? 1 : y >= kb ? -1
                          : pcmp(&A[i + x], &B[j + y], 4);
                    if (d <= 0) {
                        out->v[o++] = A[i + x++];
                        if (d == 0) y++;
                    } else {
                        out->v[o++] = B[j + y++];
                    }
                }
            } else if (op != OP_NOT) {
                pydb__postings_merge(out->v, &o, A + i, ie - i, B + j, je - j);
            }
            i = ie;
            j = je;
        }
    }
    if (op == OP_NOT && i < na) {
        memcpy(out->v + o, A + i, (na - i) * sizeof *A);
        o += na - i;
    }
    out->n = o;
    return PYDB_OK;
}

/* ------------------------------------------------------------ evaluation */

typedef struct eval_ctx {
    pydb_index *ix;
    /* the index's lists come sorted and distinct (native: its decoder
     * refuses a list that is not strictly ascending, and the runs of
     * several segments are merged): no pass to check them */
    int sorted;
    scratch sc;
    pydb_error *err;
} eval_ctx;

typedef struct key_list {
    pydb_buf arena;
    size_t *off, *len;
    size_t n, cap;
    int oom;
} key_list;

static int collect_key(void *ctx, const uint8_t *key, size_t len,
                       uint64_t count)
{
    key_list *k = ctx;
    (void)count;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        size_t *o = realloc(k->off, cap * sizeof *o), *l;
        if (!o) goto oom;
        k->off = o;
        l = realloc(k->len, cap * sizeof *l);
        if (!l) goto oom;
        k->len = l;
        k->cap = cap;
    }
    /* reserve at least one byte, so arena.p is never NULL */
    if (pydb__buf_reserve(&k->arena, len ? len : 1) < 0) goto oom;
    k->off[k->n] = k->arena.n;
    k->len[k->n] = len;
    pydb__buf_put(&k->arena, key, len);
    k->n++;
    return 0;
oom:
    k->oom = 1;
    return 1;
}

/* out holds runs->n sorted runs (starts in runs->v): sort and deduplicate
 * each in place (a no-op pass for the sorted lists every index gives;
 * none when c->sorted) and keep only the postings of t's tags (and of
 * the MFNs in *in when given), dropping runs left empty. */
static void runs_tidy(plist *out, pydb_runs *runs, const node *t,
                      const eval_ctx *c, const pydb_mfn_bits *in)
{
    size_t o = 0, kept = 0;
    for (size_t r = 0; r < runs->n; r++) {
        size_t start = runs->v[r];
        size_t end = r + 1 < runs->n ? runs->v[r + 1] : out->n;
        size_t n = end - start;
        if (!c->sorted) pydb__postings_normalize(out->v + start, &n, 1);
        if (t->tags) pl_filter_tags(out->v + start, &n, t->tags, t->ntags);
        if (in) pl_restrict(out->v + start, &n, in);
        if (n == 0) continue;
        memmove(out->v + o, out->v + start, n * sizeof *out->v);
        runs->v[kept++] = o;
        o += n;
    }
    out->n = o;
    runs->n = kept;
}

/* Postings of one term node as sorted runs, back to back in *out (one
 * run, runs->n 0, for a term without truncation; truncation: all keys
 * with the prefix, as one walk of the keys where the index has it, else
 * per key), the tag qualifier applied, and only those of the MFNs in *in
 * when in is given (section 7).  *runs is the caller's to free. */
static int term_runs(plist *out, pydb_runs *runs, const node *t,
                     eval_ctx *c, const pydb_mfn_bits *in)
{
    key_list keys = {0};
    int rc = PYDB_OK;

    memset(out, 0, sizeof *out);
    if (!t->trunc) {
        /* the index leaves the postings outside *in out where it can */
        int by_index = in && c->ix->ops->postings_in_set;
        rc = by_index ? c->ix->ops->postings_in_set(out, c->ix, t->key,
                                                    t->key_len, in, c->err)
                      : pydb_index_postings(out, c->ix, t->key, t->key_len,
                                            c->err);
        if (rc) goto cleanup;
        if (!c->sorted) pydb__postings_normalize(out->v, &out->n, 1);
        if (t->tags) pl_filter_tags(out->v, &out->n, t->tags, t->ntags);
        if (in && !by_index) pl_restrict(out->v, &out->n, in);
        goto cleanup;
    }
    if (c->ix->ops->prefix_postings) {
        rc = c->ix->ops->prefix_postings(out, runs, c->ix, t->key,
                                         t->key_len, c->err);
        if (rc) goto cleanup;
    } else {
        rc = pydb_index_terms(c->ix, t->key, t->key_len, NULL, 0, collect_key,
                              &keys, c->err);
        if (!rc && keys.oom)
            rc = PYDB_ERROR(c->err, PYDB_ENOMEM, "", -1,
                            "no memory for the keys of a truncated term");
        /* one sorted run per key, back to back in out */
        for (size_t k = 0; !rc && k < keys.n; k++) {
            size_t start = out->n;
            rc = pydb_index_postings(out, c->ix, keys.arena.p + keys.off[k],
                                     keys.len[k], c->err);
            if (!rc && out->n > start) rc = pydb__runs_push(runs, start, c->err);
        }
        if (rc) goto cleanup;
    }
    runs_tidy(out, runs, t, c, in);
cleanup:
    pydb__buf_free(&keys.arena);
    free(keys.off);
    free(keys.len);
    if (rc) pydb_postings_free(out);
    return rc;
}

/* Postings of one term node, one sorted list. */
static int eval_term(plist *out, const node *t, eval_ctx *c,
                     const pydb_mfn_bits *in)
{
    pydb_runs runs = {0};
    int rc = term_runs(out, &runs, t, c, in);
    if (!rc && runs.n > 1)
        rc = pydb__postings_merge_runs(out, runs.v, runs.n, c->err);
    if (rc) pydb_postings_free(out);
    free(runs.v);
    return rc;
}

static int eval(plist *out, const node *n, eval_ctx *c,
                const pydb_mfn_bits *in);

/* A chain of '+' (a level-0 chain holds nothing else): the operands side
 * by side, then one k-way merge -- not k - 1 growing copies. */
static int eval_or(plist *out, const node *n, eval_ctx *c,
                   const pydb_mfn_bits *in)
{
    size_t *runs = malloc((n->nitems + 1) * sizeof *runs), nruns = 0;
    plist part = {0};
    int rc = PYDB_OK;

    memset(out, 0, sizeof *out);
    if (!runs)
        return PYDB_ERROR(c->err, PYDB_ENOMEM, "", -1, "no memory for runs");
    for (size_t i = 0; i < n->nitems; i++) {
        if ((rc = eval(&part, n->items[i].node, c, in))) break;
        if (part.n) {
            if (out->n == 0) {   /* adopt the first list */
                *out = part;
                memset(&part, 0, sizeof part);
                runs[nruns++] = 0;
                continue;
            }
            if ((rc = pydb__postings_reserve(out, out->n + part.n, c->err)))
                break;
            memcpy(out->v + out->n, part.v, part.n * sizeof *part.v);
            runs[nruns++] = out->n;
            out->n += part.n;
        }
        pydb_postings_free(&part);
    }
    if (!rc) rc = pydb__postings_merge_runs(out, runs, nruns, c->err);
    pydb_postings_free(&part);
    free(runs);
    if (rc) pydb_postings_free(out);
    return rc;
}

/* Chains of '*', (G), (F) and proximity longer than this are evaluated
 * left to right (the order is found by insertion). */
#define RAREST_MAX 16

/* 1 if n is a chain of '*', (G), (F) and proximity alone (of '*' alone
 * when and_only) whose operands may be evaluated rarest first. */
static int rarest_first_fits(const node *n, const eval_ctx *c, int and_only)
{
    if (!c->ix->ops->count || n->nitems > RAREST_MAX) return 0;
    for (size_t i = 1; i < n->nitems; i++)
        if (n->items[i].op == OP_OR || n->items[i].op == OP_NOT ||
            (and_only && n->items[i].op != OP_AND))
            return 0;
    return 1;
}

/* What evaluating operand t may cost: a term's postings (the index's
 * count); UINT64_MAX for anything else. */
static int operand_cost(uint64_t *cost, const node *t, eval_ctx *c)
{
    *cost = UINT64_MAX;
    if (t->kind != N_TERM || t->trunc) return PYDB_OK;
    return c->ix->ops->count(c->ix, t->key, t->key_len, cost, c->err);
}

/* The operands of n (at most RAREST_MAX) rarest first into ord: by
 * operand_cost (cost[i]: operand i's), ties in their order. */
static int rarest_order(size_t *ord, uint64_t *cost, const node *n,
                        eval_ctx *c)
{
    for (size_t i = 0; i < n->nitems; i++) {   /* insertion: stable */
        size_t j = i;
        int rc = operand_cost(&cost[i], n->items[i].node, c);
        if (rc) return rc;
        while (j > 0 && cost[ord[j - 1]] > cost[i]) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = i;
    }
    return PYDB_OK;
}

/* A chain of '*', (G), (F) and proximity (section 7): its value is empty
 * wherever one operand has no posting, so each operand matters only at
 * the MFNs of all the others.  The operands are evaluated rarest first
 * (operand_cost; ties and non-terms in their order), each restricted to
 * the MFNs of the one before (those of all before, by induction); the
 * operands before the last are then cut down to the last one's MFNs
 * (those of all, where each step had its bitmap; a superset of them
 * otherwise, which is as right), so that combining them in their own
 * order walks fewer postings of records not in all. */
static int mset_term(mset *out, const node *t, eval_ctx *c,
                     const pydb_mfn_bits *in);

/* 1 if the bitmap b holds no MFN. */
static int bits_empty(const pydb_mfn_bits *b)
{
    for (size_t k = 0; k < b->nwords; k++)
        if (b->w[k]) return 0;
    return 1;
}

/* The records of term t (within *in when given) in the form the index
 * reads cheaper (its mfn_bits op, index_int.h: a native index's dense
 * lists as bits): *w and b, or *w NULL and its MFNs in *m; MFNs alone
 * from an index that keeps no bits, or for a truncated or qualified
 * term (mset_term).  Nothing to free on error. */
static int term_records(uint64_t **w, pydb_mfn_bits *b, mset *m,
                        const node *t, eval_ctx *c, const pydb_mfn_bits *in)
{
    int rc;
    *w = NULL;
    memset(m, 0, sizeof *m);
    if (t->trunc || t->tags || !c->ix->ops->mfn_bits)
        return mset_term(m, t, c, in);
    rc = c->ix->ops->mfn_bits(w, b, m, c->ix, t->key, t->key_len, in,
                              c->err);
    if (rc) {
        free(m->v);
        memset(m, 0, sizeof *m);
    }
    return rc;
}

/* The records of term t (within *in when given) as a restriction: *w
 * and b as bits_alloc gives them, from term_records' bits or MFNs (*w
 * NULL: too sparse for a bitmap; its MFNs are then in *m, the caller's
 * to free in any case); *empty 1 when there are none. */
static int term_bits(uint64_t **w, pydb_mfn_bits *b, mset *m, int *empty,
                     const node *t, eval_ctx *c, const pydb_mfn_bits *in)
{
    int rc = term_records(w, b, m, t, c, in);
    if (rc) return rc;
    if (*w) {
        *empty = bits_empty(b);
        return PYDB_OK;
    }
    *empty = m->n == 0;
    return m->n ? bits_of_mset(w, b, m, c->err) : PYDB_OK;
}

/* A chain narrows its records by the terms' TAG masks (narrow_by_tags)
 * when two of its terms have more postings than this: a native index
 * keeps masks for the dense form of lists of more than 128 postings
 * (nidx_seg.h), and masks of one term alone clear nothing. */
#define TAGS_MIN 128

/* 1 if every operator of chain n is (G), (F) or proximity. */
static int all_positional(const node *n)
{
    for (size_t i = 1; i < n->nitems; i++)
        if (n->items[i].op < OP_G) return 0;
    return 1;
}

/* Section 3: (G), (F) and proximity keep only postings of TAGs both
 * sides have, so a chain of them whose operands are terms holds a record
 * only where one TAG is every term's there.  The records of the bitmap
 * (w, *b) where the terms' TAG masks (the index's tag_masks op) share no
 * bit are cleared from w, term by term, each term's masks read for the
 * records left.  A truncated term (several keys), or one whose masks the
 * index does not keep, clears nothing. */
static __attribute__((noinline)) PYDB_POPCNT_CLONES int
narrow_by_tags(uint64_t *w, const pydb_mfn_bits *b, const node *n,
               eval_ctx *c)
{
    uint32_t *rank = malloc(b->nwords * sizeof *rank);
    uint8_t *acc = NULL, *m = NULL;
    size_t total = 0;
    int rc = PYDB_OK, first = 1;

    if (!rank) goto oom;
    for (size_t x = 0; x < b->nwords; x++) total += pydb__popcount64(w[x]);
    if (!(acc = malloc(total ? total : 1)) || !(m = malloc(total ? total : 1)))
        goto oom;
    for (size_t j = 0; j < n->nitems && total; j++) {
        const node *t = n->items[j].node;
        size_t r = 0, kept = 0;
        int known;
        if (t->trunc) continue;
        for (size_t x = 0, sum = 0; x < b->nwords; x++) {
            rank[x] = (uint32_t)sum;
            sum += pydb__popcount64(w[x]);
        }
        memset(m, 0, total);
        if ((rc = c->ix->ops->tag_masks(m, &known, c->ix, t->key, t->key_len,
                                        b, rank, c->err)))
            goto cleanup;
        if (!known) continue;
        if (first) {   /* the first term's masks are acc */
            uint8_t *swap = acc;
            acc = m;
            m = swap;
            first = 0;
            continue;
        }
        /* acc[kept]: the masks ANDed so far of the records left */
        for (size_t x = 0; x < b->nwords; x++)
            for (uint64_t v = w[x]; v; v &= v - 1, r++) {
                const uint8_t a = acc[r] & m[r];
                if (a) acc[kept++] = a;
                else w[x] &= ~(v & -v);
            }
        total = kept;
    }
    goto cleanup;
oom:
    rc = PYDB_ERROR(c->err, PYDB_ENOMEM, "", -1, "no memory for TAG masks");
cleanup:
    free(rank);
    free(acc);
    free(m);
    return rc;
}

/* b cut to its words from its first MFN to its last (one word at
 * least): a read within it passes fewer words. */
static void bits_trim(pydb_mfn_bits *b)
{
    size_t lo = 0, hi = b->nwords - 1;
    while (lo < hi && !b->w[lo]) lo++;
    while (hi > lo && !b->w[hi]) hi--;
    b->w += lo;
    b->lo = (int32_t)(b->lo + 64 * (int64_t)lo);
    b->nwords = hi - lo + 1;
}

/* 1 if every operand of n is a term. */
static int all_terms(const node *n)
{
    for (size_t i = 0; i < n->nitems; i++)
        if (n->items[i].node->kind != N_TERM) return 0;
    return 1;
}

static int eval_rarest_first(plist *out, const node *n, eval_ctx *c,
                             const pydb_mfn_bits *in)
{
    size_t k = n->nitems, ord[RAREST_MAX];
    uint64_t cost[RAREST_MAX];
    uint64_t *w = NULL;
    plist val[RAREST_MAX], acc = {0}, res = {0};
    pydb_mfn_bits sub;
    const pydb_mfn_bits *within = in;
    int rc;

    memset(out, 0, sizeof *out);
    memset(val, 0, sizeof val);
    if ((rc = rarest_order(ord, cost, n, c))) goto cleanup;
    if (all_terms(n)) {
        /* terms: the records all but the commonest hold, from their bits
         * or MFNs alone (a dense list's bitmap: nidx_seg.h), rarest
         * first, each within those before; the commonest one's postings
         * of those records, then the others' postings of the records it
         * has */
        const size_t last = ord[k - 1];
        /* a chain of (G), (F) and proximity of two terms or more with
         * lists that may keep TAG masks: the commonest one's bits too,
         * then the records whose terms share no TAG passed */
        const int tags = c->ix->ops->tag_masks && all_positional(n) &&
                         cost[ord[k - 2]] > TAGS_MIN;
        for (size_t j = 0; j + 1 < k + (size_t)tags; j++) {
            uint64_t *w2;
            pydb_mfn_bits sub2;
            mset m;
            int empty;
            rc = term_bits(&w2, &sub2, &m, &empty, n->items[ord[j]].node, c,
                           within);
            free(m.v);
            if (rc || empty) {
                free(w2);
                goto cleanup;   /* (empty: so is the chain) */
            }
            if (w2) {   /* (none: too sparse, the restriction stays) */
                free(w);
                w = w2;
                sub = sub2;
                within = &sub;
            }
        }
        if (w && tags) {
            if ((rc = narrow_by_tags(w, &sub, n, c))) goto cleanup;
            bits_trim(&sub);
        }
        if ((rc = eval(&val[last], n->items[last].node, c, within)) ||
            val[last].n == 0)
            goto cleanup;
        free(w);
        if ((rc = bits_of_postings(&w, &sub, &val[last], c->err)))
            goto cleanup;
        for (size_t i = 0; i < k; i++)
            if (i != last &&
                (rc = eval(&val[i], n->items[i].node, c, w ? &sub : in)))
                goto cleanup;
        goto combine;
    }
    for (size_t j = 0; j < k; j++) {
        size_t i = ord[j];
        if ((rc = eval(&val[i], n->items[i].node, c, within))) goto cleanup;
        if (val[i].n == 0) goto cleanup;   /* the chain is empty */
        free(w);
        if ((rc = bits_of_postings(&w, &sub, &val[i], c->err))) goto cleanup;
        within = w ? &sub : in;   /* too sparse: no narrower restriction */
    }
    for (size_t j = 0; w && j + 1 < k; j++)   /* w, sub: the last one's */
        pl_restrict(val[ord[j]].v, &val[ord[j]].n, &sub);
combine:
    acc = val[0];
    memset(&val[0], 0, sizeof val[0]);
    for (size_t i = 1; i < k; i++) {
        const item *it = &n->items[i];
        rc = combine(&res, &acc, &val[i], it->op, it->n, &c->sc, c->err);
        if (rc) goto cleanup;
        pydb_postings_free(&acc);
        acc = res;
        memset(&res, 0, sizeof res);
        if (acc.n == 0) break;
    }
    *out = acc;
    memset(&acc, 0, sizeof acc);
cleanup:
    for (size_t i = 0; i < k; i++) pydb_postings_free(&val[i]);
    pydb_postings_free(&acc);
    pydb_postings_free(&res);
    free(w);
    return rc;
}

/* The value of node n (section 3), restricted to the MFNs in *in when in
 * is given (section 7). */
static int eval(plist *out, const node *n, eval_ctx *c,
                const pydb_mfn_bits *in)
{
    plist acc = {0}, rhs = {0}, res;
    pydb_mfn_bits sub;
    uint64_t *w = NULL;
    int rc;

    if (n->kind == N_TERM) return eval_term(out, n, c, in);
    if (n->items[1].op == OP_OR) return eval_or(out, n, c, in);
    if (rarest_first_fits(n, c, 0)) return eval_rarest_first(out, n, c, in);
    rc = eval(&acc, n->items[0].node, c, in);
    for (size_t i = 1; !rc && i < n->nitems; i++) {
        const item *it = &n->items[i];
        if (acc.n == 0 && it->op != OP_OR)
            continue;   /* empty AND/NOT/(G)/(F)/proximity stays empty */
        if (it->op == OP_OR) {
            rc = eval(&rhs, it->node, c, in);
        } else {   /* only the records of acc (within in) matter: section 7 */
            if ((rc = bits_of_postings(&w, &sub, &acc, c->err))) break;
            rc = eval(&rhs, it->node, c, w ? &sub : in);
            free(w);
        }
        if (rc) break;
        rc = combine(&res, &acc, &rhs, it->op, it->n, &c->sc, c->err);
        pydb_postings_free(&rhs);
        if (rc) break;
        pydb_postings_free(&acc);
        acc = res;
    }
    if (rc) {
        pydb_postings_free(&acc);
        return rc;
    }
    *out = acc;
    return PYDB_OK;
}

/* ------------------------------------------------- MFN-level evaluation */

/* Section 6 above: an expression with no (G), (F), '.' or '$'
 * anywhere needs only the MFN sets of its operands (section 3 keeps them
 * exact), so it is evaluated on sorted, distinct MFN arrays: a truncated
 * term's per-key runs, and the operands of a chain of '+', are reduced
 * through a bitmap of their MFN range instead of being merged as 16-byte
 * postings (O(N + range / 64) instead of O(N log k)); '*' and '^' are
 * linear merges of MFN arrays. */
static int has_positional(const node *n)
{
    if (n->kind == N_TERM) return 0;
    for (size_t i = 0; i < n->nitems; i++)
        if ((i > 0 && n->items[i].op >= OP_G) ||
            has_positional(n->items[i].node))
            return 1;
    return 0;
}

/* The MFN set of one term node (within *in when in is given). */
static int mset_term(mset *out, const node *t, eval_ctx *c,
                     const pydb_mfn_bits *in)
{
    plist l = {0};
    pydb_runs runs = {0};
    size_t o = 0;
    int rc;

    memset(out, 0, sizeof *out);
    if (!t->trunc && !t->tags && c->ix->ops->mfns) {
        /* the index reads the records of the term without its postings */
        rc = c->ix->ops->mfns(out, c->ix, t->key, t->key_len, in, c->err);
        goto cleanup;
    }
    if ((rc = term_runs(&l, &runs, t, c, in)) ||
        (rc = pydb__mfns_reserve(out, l.n, c->err)))
        goto cleanup;
    /* each run is sorted: its repeats are neighbours */
    for (size_t i = 0; i < l.n; i++)
        if (!o || out->v[o - 1] != l.v[i].mfn) out->v[o++] = l.v[i].mfn;
    out->n = o;
    if (runs.n > 1) rc = pydb__mfns_distinct(out->v, &out->n, c->err);
cleanup:
    pydb_postings_free(&l);
    free(runs.v);
    if (rc) {
        free(out->v);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

/* out = a * b (op OP_AND) or a ^ b (OP_NOT), a and b sorted, distinct;
 * in place in a. */
static void mset_combine(mset *a, const mset *b, int op)
{
    size_t i = 0, j = 0, o = 0;
    while (i < a->n && j < b->n) {
        if (a->v[i] < b->v[j]) {
            if (op == OP_NOT) a->v[o++] = a->v[i];
            i++;
        } else if (a->v[i] > b->v[j]) {
            j++;
        } else {
            if (op == OP_AND) a->v[o++] = a->v[i];
            i++;
            j++;
        }
    }
    if (op == OP_NOT)
        while (i < a->n) a->v[o++] = a->v[i++];
    a->n = o;
}

static int mset_eval(mset *out, const node *n, eval_ctx *c,
                     const pydb_mfn_bits *in);

/* The MFNs of the bitmap (w, lo, words) appended to out (ascending). */
static int mset_add_bits(mset *out, const uint64_t *w, int64_t lo,
                         size_t words, pydb_error *err)
{
    for (size_t x = 0; x < words; x++) {
        int rc;
        if (!w[x]) continue;
        if ((rc = pydb__mfns_reserve(out, out->n + 64, err))) return rc;
        for (uint64_t v = w[x]; v; v &= v - 1)
            out->v[out->n++] = (int32_t)(lo + 64 * (int64_t)x +
                                         __builtin_ctzll(v));
    }
    return PYDB_OK;
}

/* A chain of '+': the union of its operands' records.  A term's come in
 * the form the index reads cheaper (term_records: bits or MFNs),
 * anything else's as MFNs.  The MFNs side by side are reduced once
 * (pydb__mfns_distinct); where an operand gave bits, they are set in one
 * bitmap of the range of all, into which the bits are ORed a word at a
 * time (or, were that bitmap too sparse, the bits' MFNs join the
 * others). */
static int mset_or(mset *out, const node *n, eval_ctx *c,
                   const pydb_mfn_bits *in)
{
    const size_t k = n->nitems;
    uint64_t **w = calloc(k, sizeof *w), *acc = NULL;
    pydb_mfn_bits *b = calloc(k, sizeof *b);
    mset part = {0};
    int64_t lo = INT64_MAX, hi = -1;
    size_t words, bit_words = 0;
    int rc = PYDB_OK;

    memset(out, 0, sizeof *out);
    if (!w || !b) {
        rc = PYDB_ERROR(c->err, PYDB_ENOMEM, "", -1, "no memory");
        goto cleanup;
    }
    for (size_t i = 0; i < k; i++) {
        const node *t = n->items[i].node;
        rc = t->kind == N_TERM ? term_records(&w[i], &b[i], &part, t, c, in)
                               : mset_eval(&part, t, c, in);
        if (rc) goto cleanup;
        if (w[i]) {
            bit_words += b[i].nwords;
            if (b[i].lo < lo) lo = b[i].lo;
            if (b[i].lo + 64 * (int64_t)b[i].nwords - 1 > hi)
                hi = b[i].lo + 64 * (int64_t)b[i].nwords - 1;
        } else if (part.n) {
            if ((rc = pydb__mfns_reserve(out, out->n + part.n, c->err)))
                goto cleanup;
            memcpy(out->v + out->n, part.v, part.n * sizeof *part.v);
            out->n += part.n;
            if (part.v[0] < lo) lo = part.v[0];
            if (part.v[part.n - 1] > hi) hi = part.v[part.n - 1];
        }
        free(part.v);
        memset(&part, 0, sizeof part);
    }
    if (!bit_words) {
        rc = pydb__mfns_distinct(out->v, &out->n, c->err);
        goto cleanup;
    }
    words = (size_t)((hi - lo) >> 6) + 1;
    if (words > 4 * out->n + bit_words + 1024) {   /* too sparse */
        for (size_t i = 0; i < k; i++)
            if (w[i] && (rc = mset_add_bits(out, w[i], b[i].lo, b[i].nwords,
                                            c->err)))
                goto cleanup;
        rc = pydb__mfns_distinct(out->v, &out->n, c->err);
        goto cleanup;
    }
    if (!(acc = calloc(words, sizeof *acc))) {
        rc = PYDB_ERROR(c->err, PYDB_ENOMEM, "", -1,
                        "no memory for a %zu-word MFN bitmap", words);
        goto cleanup;
    }
    for (size_t j = 0; j < out->n; j++)
        bits_set(acc, (int32_t)lo, out->v[j]);
    for (size_t i = 0; i < k; i++)
        for (size_t x = 0; w[i] && x < b[i].nwords; x++)
            pydb__bits_or_word(acc, words,
                               (uint64_t)(b[i].lo - lo) + 64 * (uint64_t)x,
                               w[i][x]);
    out->n = 0;
    rc = mset_add_bits(out, acc, lo, words, c->err);
cleanup:
    for (size_t i = 0; w && i < k; i++) free(w[i]);
    free(w);
    free(b);
    free(part.v);
    free(acc);
    if (rc) {
        free(out->v);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

/* The MFN set of node n (within *in when in is given: section 7). */
static int mset_eval(mset *out, const node *n, eval_ctx *c,
                     const pydb_mfn_bits *in)
{
    mset acc = {0}, rhs = {0};
    pydb_mfn_bits sub;
    uint64_t *w = NULL;
    size_t ord[RAREST_MAX], first = 1;
    uint64_t cost[RAREST_MAX];
    int rc = PYDB_OK, rarest, have = 0;

    if (n->kind == N_TERM) return mset_term(out, n, c, in);
    if (n->items[1].op == OP_OR) return mset_or(out, n, c, in);
    /* a chain of '*' alone: in any order, so rarest first (section 7) */
    rarest = rarest_first_fits(n, c, 1);
    if (rarest && (rc = rarest_order(ord, cost, n, c))) return rc;
    if (rarest && n->items[ord[0]].node->kind == N_TERM) {
        /* the rarest term's records as bits (term_bits), the next
         * operand within them, and what it holds of them */
        mset m;
        int empty;
        memset(out, 0, sizeof *out);
        if ((rc = term_bits(&w, &sub, &m, &empty, n->items[ord[0]].node, c,
                            in)) ||
            empty) {
            free(w);
            free(m.v);
            return rc;
        }
        if (!w) {   /* too sparse for bits: its MFNs, to combine */
            acc = m;
            have = 1;
        } else {
            size_t o = 0;
            free(m.v);
            rc = mset_eval(&acc, n->items[ord[1]].node, c, &sub);
            for (size_t i = 0; !rc && i < acc.n; i++) {
                acc.v[o] = acc.v[i];
                o += (size_t)pydb__mfn_bits_has(&sub, acc.v[i]);
            }
            if (!rc) acc.n = o;
            first = 2;
            free(w);
            w = NULL;
        }
    }
    if (first == 1 && !have)
        rc = mset_eval(&acc, n->items[rarest ? ord[0] : 0].node, c, in);
    for (size_t i = first; !rc && i < n->nitems; i++) {
        size_t k = rarest ? ord[i] : i;
        if (acc.n == 0) break;   /* an empty AND / NOT stays empty */
        /* only the records of acc matter to acc * rhs and acc ^ rhs */
        if ((rc = bits_of_mset(&w, &sub, &acc, c->err))) break;
        rc = mset_eval(&rhs, n->items[k].node, c, w ? &sub : in);
        free(w);
        if (!rc) mset_combine(&acc, &rhs, rarest ? OP_AND : n->items[i].op);
        free(rhs.v);
        rhs.v = NULL;
    }
    if (rc) {
        free(acc.v);
        return rc;
    }
    *out = acc;
    return PYDB_OK;
}

/* Keep the MFNs of v[*n] (ascending, distinct) whose XRF entry is active
 * in the latest committed state of db, or as of snap when it is given.
 * Sparse results look each MFN up; dense ones (at least one candidate per
 * DENSE MFNs of their range) merge with a scan of the active MFNs. */
#define DENSE 16
#define SCAN_BATCH 4096

static int xrf_get(pydb_xrf_entry *x, pydb_db *db, const pydb_snapshot *snap,
                   int32_t mfn, pydb_error *err)
{
    if (snap) return pydb__xrf_get_in(x, snap->db, &snap->st, mfn, err);
    return pydb_xrf_get(x, db, mfn, err);
}

static int list_active(int32_t *buf, size_t *bn, int32_t *next, pydb_db *db,
                       const pydb_snapshot *snap, int32_t from,
                       pydb_error *err)
{
    if (snap)
        return pydb_snapshot_list_mfns(buf, SCAN_BATCH, bn, next, snap, from,
                                       0, err);
    return pydb_list_mfns(buf, SCAN_BATCH, bn, next, db, from, 0, err);
}

static int drop_inactive(int32_t *v, size_t *n, pydb_db *db,
                         const pydb_snapshot *snap, pydb_error *err)
{
    size_t i = 0, o = 0, cnt = *n;
    int32_t top = snap ? snap->st.next_mfn - 1 : pydb_max_mfn(db);
    int rc;

    if (cnt == 0) return PYDB_OK;
    if ((int64_t)cnt * DENSE < (int64_t)v[cnt - 1] - v[0] + 1) {
        for (i = 0; i < cnt; i++) {
            pydb_xrf_entry x;
            rc = xrf_get(&x, db, snap, v[i], err);
            if (rc == PYDB_ENOTFOUND) continue;   /* above the highest MFN */
            if (rc) return rc;
            if (x.state == PYDB_XRF_ACTIVE) v[o++] = v[i];
        }
        *n = o;
        return PYDB_OK;
    }
    int32_t *buf = malloc(SCAN_BATCH * sizeof *buf);
    if (!buf)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for a scan");
    rc = PYDB_OK;
    while (i < cnt && v[i] <= top) {
        size_t bn = 0, k = 0;
        int32_t next = 0;
        rc = list_active(buf, &bn, &next, db, snap, v[i], err);
        if (rc) break;
        /* the batch decides every candidate below `next` (> v[i]: the
         * scan stops after a full batch or at the end of the XRF) */
        while (i < cnt && v[i] < next) {
            while (k < bn && buf[k] < v[i]) k++;
            if (k < bn && buf[k] == v[i]) v[o++] = v[i];
            i++;
        }
    }
    free(buf);
    *n = o;
    return rc;
}

/* ---------------------------------------------------------------- public */

/* pydb_search() and pydb_snapshot_search(): parse, evaluate on one view
 * (pinned here unless ix is one already), reduce to MFNs, and drop the
 * inactive records of db (as of snap when given) for index kinds that
 * commits do not update. */
static int search_run(int32_t **mfns, size_t *n, pydb_index *ix,
                      pydb_db *db, const pydb_snapshot *snap,
                      const char *expr, size_t len, int nowait,
                      pydb_error *err)
{
    node *root = NULL, *nodes = NULL;
    pydb_index *view = NULL;
    plist l = {0};
    eval_ctx c;
    int32_t *v = NULL;
    size_t o = 0;
    int rc, xrf_filter;

    *mfns = NULL;
    *n = 0;
    memset(&c, 0, sizeof c);
    if (!ix || (!expr && len))
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "pydb_search: no index or no expression");
    if (len > PYDB_SEARCH_MAX_LEN)
        return PYDB_ERROR(err, PYDB_ESYNTAX, "", PYDB_SEARCH_MAX_LEN,
                          "search expression of %zu bytes is longer than "
                          "the limit of %d bytes", len, PYDB_SEARCH_MAX_LEN);
    if ((rc = pydb__search_parse(&root, &nodes, ix, (const uint8_t *)expr,
                                 len, err)))
        goto cleanup;
    /* one committed state of an index that commits change: the snapshot's
     * generation, or the latest */
    if (snap && ix->ops->pin) {
        if ((rc = pydb_snapshot_index(&view, snap, ix, err))) goto cleanup;
    } else if (ix->ops->pin && (rc = ix->ops->pin(ix, &view, err))) {
        goto cleanup;
    }
    c.ix = view ? view : ix;
    c.sorted = c.ix->kind == PYDB_INDEX_NATIVE;
    c.err = err;
    /* The XRF filter (pydb.h): not for a native index, whose postings
     * change in the same transaction as the records (attached, or read
     * through another handle that refreshes with every commit):
     * filtering by the XRF, which a commit changes at another moment
     * than it publishes the index, could mix two states. */
    xrf_filter = (db || snap) && ix->kind != PYDB_INDEX_NATIVE;
    /* without waiting: an index whose reading may wait for the disk, or
     * an XRF to filter by, is for the blocking call */
    if (nowait && (!c.ix->ops->resident || !c.ix->ops->resident(c.ix) ||
                   xrf_filter)) {
        rc = pydb__nowait_refuse();
        goto cleanup;
    }
    if (!has_positional(root)) {
        mset m;
        if ((rc = mset_eval(&m, root, &c, NULL))) goto cleanup;
        v = m.v;
        o = m.n;
        if (!v && !(v = malloc(sizeof *v))) {
            rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
            goto cleanup;
        }
    } else {
        if ((rc = eval(&l, root, &c, NULL))) goto cleanup;
        v = malloc((l.n ? l.n : 1) * sizeof *v);
        if (!v) {
            rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                            "no memory for %zu MFNs", l.n);
            goto cleanup;
        }
        for (size_t i = 0; i < l.n; i++)
            if (!o || v[o - 1] != l.v[i].mfn) v[o++] = l.v[i].mfn;
    }
    if (xrf_filter && (rc = drop_inactive(v, &o, db, snap, err)))
        goto cleanup;
    *mfns = v;
    *n = o;
    v = NULL;
cleanup:
    free(v);
    pydb_postings_free(&l);
    if (view) pydb_index_close(view);
    free(c.sc.ma);
    free(c.sc.mb);
    pydb__search_free(nodes);
    return rc;
}

int pydb_search(int32_t **mfns, size_t *n, pydb_index *ix, pydb_db *db,
                const char *expr, size_t len, pydb_error *err)
{
    return search_run(mfns, n, ix, db, NULL, expr, len, 0, err);
}

/* A search run with the thread marked (pydb__nowait_begin, pydb_int.h):
 * anything it refused makes the result PYDB_EWOULDBLOCK. */
static int search_nowait(int32_t **mfns, size_t *n, pydb_index *ix,
                         const pydb_snapshot *snap, pydb_db *db,
                         const char *expr, size_t len, pydb_error *err)
{
    int rc;
    pydb__nowait_begin();
    rc = search_run(mfns, n, ix, db, snap, expr, len, 1, err);
    if (pydb__nowait_end() && rc == PYDB_OK) {
        free(*mfns);
        *mfns = NULL;
        *n = 0;
        rc = PYDB_EWOULDBLOCK;
    }
    return rc;
}

int pydb_search_nowait(int32_t **mfns, size_t *n, pydb_index *ix,
                       pydb_db *db, const char *expr, size_t len,
                       pydb_error *err)
{
    return search_nowait(mfns, n, ix, NULL, db, expr, len, err);
}

/* rc of a search as of snap, or the error of a snapshot whose files are
 * gone (pydb__snapshot_files_kept), the MFNs then freed. */
static int snapshot_result(int rc, int32_t **mfns, size_t *n,
                           const pydb_snapshot *snap, pydb_error *err)
{
    int kept = pydb__snapshot_files_kept(rc, snap, err);
    if (kept != rc) {
        free(*mfns);
        *mfns = NULL;
        *n = 0;
    }
    return kept;
}

int pydb_snapshot_search(int32_t **mfns, size_t *n, pydb_index *view,
                         const pydb_snapshot *snap, const char *expr,
                         size_t len, pydb_error *err)
{
    if (!snap) {
        *mfns = NULL;
        *n = 0;
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "pydb_snapshot_search: no snapshot");
    }
    return snapshot_result(
        search_run(mfns, n, view, NULL, snap, expr, len, 0, err), mfns, n,
        snap, err);
}

int pydb_snapshot_search_nowait(int32_t **mfns, size_t *n, pydb_index *view,
                                const pydb_snapshot *snap, const char *expr,
                                size_t len, pydb_error *err)
{
    if (!snap) return pydb_snapshot_search(mfns, n, view, snap, expr, len,
                                           err);
    return snapshot_result(
        search_nowait(mfns, n, view, snap, NULL, expr, len, err), mfns, n,
        snap, err);
}
