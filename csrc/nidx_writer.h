/*
 * nidx_writer.h - the segment writer of the native index
 * (nidx_writer.c): an accumulator that collects (key, posting) pairs
 * from key extraction and turns them into the bytes of one segment.
 * Used by the bulk build (nidx_build.c) and by the commit hook
 * (nidx_commit.c).
 *
 * Keys are staged in batches, hashed into a table of distinct terms
 * (with the hash slots prefetched per batch), then sorted (radix on an
 * 8-byte prefix, comparison sort inside equal prefixes); postings are
 * bucketed per term by a counting sort that keeps their arrival order.
 *
 * Depends on: nidx_seg.h (the segment encoder), index_int.h.
 */
#ifndef PYDB_NIDX_WRITER_H
#define PYDB_NIDX_WRITER_H

#include "nidx_seg.h"

typedef struct nidx_aterm {
    uint64_t off;            /* key in arena */
    uint32_t len, hash;
    uint64_t n;              /* postings */
} nidx_aterm;

typedef struct nidx_apost {
    uint32_t term;
    pydb_posting p;
} nidx_apost;

typedef struct nidx_staged {
    uint64_t off;            /* in acc.stage_keys */
    uint32_t len, hash;
    pydb_posting p;
} nidx_staged;

/* Zero-initialise; err is where pydb__nacc_add reports errors. */
typedef struct nidx_acc {
    nidx_staged *st;
    size_t nst;
    pydb_buf stage_keys;
    pydb_buf arena;
    nidx_aterm *t;
    size_t nt, tcap;
    uint64_t *ht;            /* hash << 32 | (term index + 1); 0 = empty */
    size_t hcap;
    nidx_apost *p;
    size_t np, pcap;
    pydb_error *err;
} nidx_acc;

/* pydb_key_fn: add one (key, posting); ctx is the nidx_acc. */
int pydb__nacc_add(void *ctx, const uint8_t *key, size_t len,
                   const pydb_posting *p);
/* Append the segment of everything added, with tombstones tombs[ntombs]
 * (ascending), to out. */
int pydb__nacc_segment(nidx_acc *a, const int32_t *tombs, size_t ntombs,
                       pydb_buf *out, pydb_error *err);
/* Called with each term of the accumulator in key order: its key and its
 * postings v[n] (n >= 1, ascending, no duplicates); views valid during
 * the call.  Nonzero (a PYDB_E* code) stops the walk and is returned. */
typedef int (*nidx_term_fn)(void *ctx, const uint8_t *key, size_t len,
                            const pydb_posting *v, size_t n);
/* Sort everything added and call fn with each term in key order (what
 * pydb__nacc_segment encodes).  PYDB_ENOMEM, or fn's code. */
int pydb__nacc_each(nidx_acc *a, nidx_term_fn fn, void *ctx,
                    pydb_error *err);
/* Bytes the accumulator holds now plus those sorting it would add: what
 * the bulk build compares with its memory budget (nidx_build.c). */
size_t pydb__nacc_bytes(const nidx_acc *a);
/* Forget everything added, keeping the allocations for reuse. */
void pydb__nacc_reset(nidx_acc *a);
/* Free the accumulator's memory and zero it. */
void pydb__nacc_free(nidx_acc *a);

#endif
