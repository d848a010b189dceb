/*
 * nidx_handle.h - the native index handle and its segment set
 * (nidx_handle.c): opening and closing an index, the list of live
 * segments readers share, following commits made elsewhere, and the
 * read operations (terms, postings, pinned views).
 *
 * Readers take a reference to the current segment set (a mutex held only
 * for the pointer copy) and never wait for the writer; a commit
 * publishes a new set (the old one is freed by its last reader).
 * Commits made through another handle or process are picked up on the
 * next terms/postings/pin call: the MANIFEST's generation line is read
 * (open, one pread of its first bytes, close -- a stat() would miss a
 * replacement that reuses the inode, size and coarse mtime); when it is
 * newer, the whole MANIFEST is read and its segment set built outside
 * the lock (segments already open are shared) and swapped in under it.
 *
 * The commit hook (nidx_commit.c) keeps its state in this handle too.
 *
 * Depends on: nidx_seg.h, nidx_manifest.h, nidx_int.h (FST, key rules,
 * stop words), index_int.h.
 */
#ifndef PYDB_NIDX_HANDLE_H
#define PYDB_NIDX_HANDLE_H

#include <pthread.h>
#include "nidx_int.h"
#include "nidx_manifest.h"
#include "nidx_seg.h"

/* The live segments, oldest first, shared by reference count. */
typedef struct nidx_segset {
    atomic_int refs;
    size_t n;
    nidx_seg **v;            /* oldest first */
    uint8_t *newer_tombs;    /* [i]: some segment after i has tombstones */
    uint8_t **dead;          /* [i]: bitmap of the MFNs tombstoned after i
                                (MFN < dead_bits[i]), or NULL            */
    uint32_t *dead_bits;
} nidx_segset;

/* A set with room for n segments (n set; the caller fills v), or NULL. */
nidx_segset *pydb__nsegset_new(size_t n);
/* Drop one reference (NULL is ignored). */
void pydb__nsegset_unref(nidx_segset *ss);
/* Compute the dead-posting flags and bitmaps once v[] is filled. */
void pydb__nsegset_finish(nidx_segset *ss);

typedef struct nidx {
    pydb_index base;
    char dir[1024], manifest[1100];
    pydb_keyrules rules;
    pydb_stopwords sw;
    pydb_fst *fst;
    char *fst_text;
    size_t fst_len;
    uint8_t *stw_text;
    size_t stw_len;
    pthread_mutex_t mu;
    nidx_segset *cur;
    uint64_t gen;
    /* commit hook (nidx_commit.c) */
    pydb_put_file_fn put_file;
    void *put_ctx;
    nidx_seg *pending;
    uint64_t pending_gen;
    int pending_merge;         /* the pending segment replaces the tail */
    pydb_fst_scratch scratch;
    /* test double of pydb_txn_put_file (pydb__nidx_use_test_put) */
    char test_path[1100];
    uint8_t *test_data;
    size_t test_len;
} nidx;

/* <base>.pdx for a database path ("x/cds", "x/cds.mst", "x/CDS.XRF"). */
int pydb__nidx_dir(char *out, size_t cap, const char *db_path,
                   pydb_error *err);
/* 1 if ix is a native index handle (not a view or another kind). */
int pydb__nidx_is_native(const pydb_index *ix);
/* A reference to the current segment set (pydb__nsegset_unref it). */
nidx_segset *pydb__nidx_acquire(nidx *x);
/* Adopt a newer MANIFEST written by another handle or process (force 0:
 * only if its head announces a newer generation; force 1: read it whole,
 * the writer does so before it prepares a commit). */
int pydb__nidx_refresh(nidx *x, int force, pydb_error *err);
/* pydb__nseg_decode for the entry at cursor c of segment ss->v[i], with
 * the postings the newer segments of ss tombstone left out. */
int pydb__nidx_decode_live(pydb_postings *out, const nidx_segset *ss,
                           size_t i, const nidx_cursor *c, uint64_t *live,
                           pydb_error *err);

#endif
