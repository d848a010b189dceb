/* index_int.h - the interface every index implementation fills in
 * (native segments, ISIS classic/LIND files, in-memory).  Each
 * implementation embeds struct pydb_index as its first member; the
 * pydb_index_* functions of pydb.h dispatch through ops.
 *
 * Depends on: pydb_int.h. */
#ifndef PYDB_INDEX_INT_H
#define PYDB_INDEX_INT_H

#include <string.h>
#include "pydb_int.h"

/* A set of MFNs as a bitmap: m is in it when lo <= m < lo + 64 * nwords
 * and bit (m - lo) % 64 of w[(m - lo) / 64] is set. */
typedef struct pydb_mfn_bits {
    const uint64_t *w;
    int32_t lo;
    size_t nwords;
} pydb_mfn_bits;

/* 1 if m is in b: no branch on the answer (postings of wanted and
 * unwanted records alternate unpredictably). */
static inline int pydb__mfn_bits_has(const pydb_mfn_bits *b, int32_t m)
{
    uint64_t d = (uint64_t)((int64_t)m - b->lo);
    int in = d < (uint64_t)b->nwords * 64;
    uint64_t w = b->w[in ? d >> 6 : 0];
    return in & (int)((w >> (d & 63)) & 1);
}

/* 1 if b holds an MFN m with lo <= m <= hi: a block of a posting list
 * none of whose MFNs can be wanted is passed unread (nidx_seg.c). */
static inline int pydb__mfn_bits_any(const pydb_mfn_bits *b, int64_t lo,
                                     int64_t hi)
{
    int64_t a = lo - b->lo, z = hi - b->lo;
    int64_t top = (int64_t)b->nwords * 64 - 1;
    PYDB_ASSERT(b->nwords > 0);
    if (z < 0 || a > top || a > z) return 0;
    if (a < 0) a = 0;
    if (z > top) z = top;
    size_t wa = (size_t)a >> 6, wz = (size_t)z >> 6;
    uint64_t ma = ~(uint64_t)0 << (a & 63);
    uint64_t mz = ~(uint64_t)0 >> (63 - (z & 63));
    if (wa == wz) return (b->w[wa] & ma & mz) != 0;
    if (b->w[wa] & ma) return 1;
    for (size_t i = wa + 1; i < wz; i++)
        if (b->w[i]) return 1;
    return (b->w[wz] & mz) != 0;
}

/* Bit i of the result: 1 if base + i is in b (0 <= i < 64): the set's
 * bits for 64 MFNs from base, which a dense posting list ANDs with its
 * own bitmap a word at a time (nidx_seg.c). */
static inline uint64_t pydb__mfn_bits_word(const pydb_mfn_bits *b,
                                           int64_t base)
{
    int64_t d = base - b->lo;
    int64_t top = (int64_t)b->nwords * 64;
    size_t wi;
    unsigned sh;
    uint64_t r;
    if (d <= -64 || d >= top) return 0;
    if (d < 0) return b->w[0] << (unsigned)-d;
    wi = (size_t)d >> 6;
    sh = (unsigned)(d & 63);
    r = b->w[wi] >> sh;
    if (sh && wi + 1 < b->nwords) r |= b->w[wi + 1] << (64 - sh);
    return r;
}

/* The least MFN >= from in b, or INT64_MAX if none: a reader of
 * another bitmap a word at a time passes the words where b wants none
 * (nidx_seg.c). */
static inline int64_t pydb__mfn_bits_next(const pydb_mfn_bits *b,
                                          int64_t from)
{
    int64_t d = from - b->lo;
    size_t wi;
    uint64_t v;
    if (d < 0) d = 0;
    wi = (size_t)d >> 6;
    if (wi >= b->nwords) return INT64_MAX;
    v = b->w[wi] & (~(uint64_t)0 << (d & 63));
    while (!v) {
        if (++wi >= b->nwords) return INT64_MAX;
        v = b->w[wi];
    }
    return b->lo + 64 * (int64_t)wi + __builtin_ctzll(v);
}

/* OR the 64 bits of v into the bitmap w of nw words, bit j of v at bit
 * `at` + j of w (bits past the end dropped): a word of one bitmap ORed
 * into another whose range starts `at` bits before it (the union of
 * terms' records, search_eval.c; a dense list's bits, nidx_handle.c). */
static inline void pydb__bits_or_word(uint64_t *w, size_t nw, uint64_t at,
                                      uint64_t v)
{
    const size_t wi = (size_t)(at >> 6);
    const unsigned sh = (unsigned)(at & 63);
    if (wi >= nw) return;
    w[wi] |= v << sh;
    if (sh && wi + 1 < nw) w[wi + 1] |= v >> (64 - sh);
}

/* The functions that count bits a word at a time are built twice on
 * x86-64 with glibc, with and without the POPCNT instruction, the one
 * the processor has chosen when the library loads (GCC's target_clones,
 * an ifunc); elsewhere once, counting as pydb__popcount64's fallback
 * does.
 * Not under ThreadSanitizer, whose runtime is not up yet when the ifunc
 * resolvers run (the program dies at load with SIGSEGV), nor with clang,
 * which refuses target_clones beside noinline (the fuzzing builds). */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PYDB_POPCNT_NO_CLONES 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define PYDB_POPCNT_NO_CLONES 1
#endif
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && \
    !defined(__clang__) && defined(__has_attribute) && \
    !defined(PYDB_POPCNT_NO_CLONES)
#if __has_attribute(target_clones)
#define PYDB_POPCNT_CLONES \
    __attribute__((target_clones("popcnt", "default")))
#define PYDB_POPCNT_CLONED 1
#endif
#endif
#ifndef PYDB_POPCNT_CLONES
#define PYDB_POPCNT_CLONES
#endif

/* Set bits of x: the POPCNT instruction in a PYDB_POPCNT_CLONES function's
 * clone for it (a library call in the other), else shifts and adds. */
static inline __attribute__((always_inline)) unsigned
pydb__popcount64(uint64_t x)
{
#if defined(__POPCNT__) || defined(PYDB_POPCNT_CLONED)
    return (unsigned)__builtin_popcountll(x);
#else
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
#endif
}

/* MFNs (search_eval.c's MFN-level values; an index's mfns op). */
typedef struct pydb_mfns {
    int32_t *v;
    size_t n, cap;
} pydb_mfns;

/* Starts of sorted runs in a pydb_postings (pydb__postings_merge_runs);
 * v always has room for one more entry than n. */
typedef struct pydb_runs {
    size_t *v;
    size_t n, cap;
} pydb_runs;

typedef struct pydb_index_ops {
    const char *name;
    int (*terms)(pydb_index *ix, const uint8_t *prefix, size_t prefix_len,
                 const uint8_t *start, size_t start_len, pydb_term_fn fn,
                 void *ctx, pydb_error *err);
    int (*postings)(pydb_postings *out, pydb_index *ix, const uint8_t *key,
                    size_t len, pydb_error *err);
    int (*key)(pydb_index *ix, const uint8_t *term, size_t len, uint8_t *out,
               size_t cap, size_t *out_len, pydb_error *err);
    void (*close)(pydb_index *ix);
    /* Optional: a read-only view of the index as it is now, unchanged by
     * later commits (closed with pydb_index_close); NULL when the index
     * never changes while open.  pydb_search() evaluates a whole
     * expression on one view, so it sees one committed state. */
    int (*pin)(pydb_index *ix, pydb_index **view, pydb_error *err);
    /* Optional: the postings of every key that starts with prefix, in one
     * walk of the keys (no seek per key): appended to out as sorted runs
     * (one per key and segment), the start of each run pushed on runs.
     * NULL: the caller enumerates the keys and asks postings per key. */
    int (*prefix_postings)(pydb_postings *out, pydb_runs *runs,
                           pydb_index *ix, const uint8_t *prefix,
                           size_t prefix_len, pydb_error *err);
    /* Optional: 1 if reading the index now cannot wait for the disk (its
     * bytes are in memory, or known to be in the page cache); NULL: it
     * may.  A search that must not wait (pydb_search_nowait) asks it. */
    int (*resident)(const pydb_index *ix);
    /* Optional: the postings of key whose MFN is in *in (nwords >= 1),
     * appended to out sorted and distinct, as postings would give them
     * less the others; NULL: the caller asks postings and drops the
     * others itself.  A search restricting an operand to the records
     * another one has (search_eval.c, section 7) asks it. */
    int (*postings_in_set)(pydb_postings *out, pydb_index *ix,
                           const uint8_t *key, size_t len,
                           const pydb_mfn_bits *in, pydb_error *err);
    /* Optional: in *n, at least the number of postings of key (0 when
     * absent), without reading them (a native index: every segment's,
     * dead ones included); NULL: unknown.  A search evaluates the rarer
     * operands of '*', (G), (F) and proximity first (search_eval.c,
     * section 7). */
    int (*count)(pydb_index *ix, const uint8_t *key, size_t len,
                 uint64_t *n, pydb_error *err);
    /* Optional: the MFNs of key's postings (only those in *in when in is
     * given), appended to out ascending and distinct, without the
     * postings themselves; NULL: the caller asks postings and takes
     * their MFNs.  A search that needs only the records a term is in
     * (search_eval.c, section 6) asks it. */
    int (*mfns)(pydb_mfns *out, pydb_index *ix, const uint8_t *key,
                size_t len, const pydb_mfn_bits *in, pydb_error *err);
    /* Optional: the records of key's live postings (only those in *in
     * when given) in whichever of two forms the index reads cheaper: a
     * bitmap, *w (calloc'ed, the caller's to free) and b describing it,
     * built from bits the index keeps (a native index's dense lists)
     * without reading postings; or, where it keeps none for key or they
     * would make a bitmap too sparse, *w NULL and the MFNs appended to
     * *m ascending and distinct, as mfns gives them.  NULL: never bits
     * (the caller asks mfns).  A chain of terms (search_eval.c, section
     * 7) asks it for all but its commonest operand, a chain of '+' for
     * every term. */
    int (*mfn_bits)(uint64_t **w, pydb_mfn_bits *b, pydb_mfns *m,
                    pydb_index *ix, const uint8_t *key, size_t len,
                    const pydb_mfn_bits *in, pydb_error *err);
    /* Optional: the TAGs of key's postings in each record of *in, as a
     * mask (bit pydb__nseg_tag_bit(TAG), nidx_seg.h, set for each TAG;
     * dead postings' TAGs may be set too): m[i] |= the mask of in's i-th
     * record (rank[k]: in's records before its word k; m as many bytes
     * as in has records, 0 where key has none), *known 1; *known 0 where
     * the index keeps no masks for key (m then of no use).  NULL: never.
     * A chain of (G), (F) and proximity (search_eval.c, section 7) asks
     * it to pass records whose terms share no TAG. */
    int (*tag_masks)(uint8_t *m, int *known, pydb_index *ix,
                     const uint8_t *key, size_t len, const pydb_mfn_bits *in,
                     const uint32_t *rank, pydb_error *err);
} pydb_index_ops;

struct pydb_index {
    const pydb_index_ops *ops;
    int kind;   /* enum pydb_index_kind */
    int caps;   /* PYDB_POSTING_* */
};

/* A view of ix that forwards to it and whose close frees only the view
 * (pydb_snapshot_index for kinds that commits never change): ix must
 * outlive it. */
int pydb__index_borrow(pydb_index **view, pydb_index *ix, pydb_error *err);

/* Postings in (mfn, tag, occ, cnt) order, MFN signed: <0, 0, >0.  Two
 * 64-bit comparisons, inline: merging postings is most of a truncated
 * search. */
static inline int pydb__posting_order(const pydb_posting *x,
                                      const pydb_posting *y)
{
    uint64_t a = (uint64_t)((uint32_t)x->mfn ^ 0x80000000u) << 32 | x->tag;
    uint64_t b = (uint64_t)((uint32_t)y->mfn ^ 0x80000000u) << 32 | y->tag;
    if (a == b) {
        a = (uint64_t)x->occ << 32 | x->cnt;
        b = (uint64_t)y->occ << 32 | y->cnt;
    }
    return (a > b) - (a < b);
}

/* qsort comparator: pydb__posting_order. */
int pydb__posting_cmp(const void *a, const void *b);

/* Keys in index order: bytewise, a key before its longer extensions. */
static inline int pydb__keycmp(const uint8_t *a, size_t al, const uint8_t *b,
                               size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = n ? memcmp(a, b, n) : 0;
    return c ? c : (al > bl) - (al < bl);
}

/* Bring v[*n] into pydb__posting_cmp order without duplicates, in place;
 * v[0..from) is known to be sorted already (from >= 1), so an already
 * sorted list costs one pass from there and no sort. */
void pydb__postings_normalize(pydb_posting *v, size_t *n, size_t from);

/* Push a run start (PYDB_ENOMEM on failure). */
int pydb__runs_push(pydb_runs *r, size_t start, pydb_error *err);

/* Merge sorted a[na] and b[nb] into out (appending at *no), dropping
 * duplicates. */
void pydb__postings_merge(pydb_posting *out, size_t *no, const pydb_posting *a,
                          size_t na, const pydb_posting *b, size_t nb);

/* l->v holds nruns sorted runs back to back, run r starting at runs[r]
 * (runs has nruns + 1 entries; runs[nruns] is set to l->n and the array
 * is overwritten; l->v[0..runs[0]) is kept as it is).  Merge them pairwise, bottom-up, into one sorted
 * distinct list: O(N log nruns), one scratch list of N postings. */
int pydb__postings_merge_runs(pydb_postings *l, size_t *runs, size_t nruns,
                              pydb_error *err);

/* Make room for n postings in *p (capacity doubles; PYDB_ENOMEM on
 * failure, *p unchanged). */
int pydb__postings_reserve(pydb_postings *p, size_t n, pydb_error *err);

/* Make room for n MFNs in *m (as pydb__postings_reserve; m->v is the
 * caller's to free()). */
int pydb__mfns_reserve(pydb_mfns *m, size_t n, pydb_error *err);

/* v[*n] (any order, duplicates allowed) made ascending and distinct, in
 * place: a bitmap over [min, max] when the range is at most 64 MFNs per
 * element (bitmap words <= elements), else a sort.  PYDB_ENOMEM: v
 * unchanged. */
int pydb__mfns_distinct(int32_t *v, size_t *n, pydb_error *err);

/* Append one posting to *p, growing it (PYDB_ENOMEM on failure). */
int pydb__postings_push(pydb_postings *p, const pydb_posting *v,
                        pydb_error *err);

/* The key rules (pydb_keyrules, pydb__keyrules_default,
 * pydb__key_normalize; keys.c) are declared in pydb_test.h, which
 * pydb_int.h includes: tests drive them without an index. */

#endif
