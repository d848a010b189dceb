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
 * The handle keeps the set it serves (cur) and the one before (prev),
 * each with its MANIFEST generation: a snapshot asks for the set of the
 * generation its commit published (pydb__nidx_set_at), which is one of
 * them or the MANIFEST on disk unless the index has moved on since.
 *
 * Segment files and readers of other processes (docs/design.md §6): a
 * commit removes segment files no MANIFEST names any more only when no
 * registered reader of the database's commit header (shm.h) reads an
 * older commit (nidx_commit.c).  So opening and refreshing register in
 * the reader table while they read the MANIFEST and open its segments:
 * the files it names stay until the segments are open (mapped; an
 * unlinked file stays readable through its mapping).  Without a usable
 * header (files mode) they proceed unregistered, as before: a segment
 * that vanished makes them read the MANIFEST again.
 *
 * The commit hook (nidx_commit.c) keeps its state in this handle too.
 *
 * Depends on: nidx_seg.h, nidx_manifest.h, nidx_int.h (FST, key rules,
 * stop words), index_int.h, shm.h (reader registration).
 */
#ifndef PYDB_NIDX_HANDLE_H
#define PYDB_NIDX_HANDLE_H

#include <pthread.h>
#include "nidx_int.h"
#include "nidx_manifest.h"
#include "nidx_seg.h"

/* How keys are made, as a MANIFEST says (key rules, FST, stop words):
 * shared by reference count between the segment sets of MANIFESTs that
 * agree on it.  A rebuild with other rules or another FST gives its sets
 * a new one, so a handle that adopts the rebuilt index makes keys (for
 * searches and for its commits) the way that index does. */
typedef struct nidx_cfg {
    atomic_int refs;
    pydb_keyrules rules;
    pydb_fst *fst;
    char *fst_text;
    size_t fst_len;
    uint8_t *stw_text;
    size_t stw_len;
    pydb_stopwords sw;
} nidx_cfg;

/* Drop one reference (NULL is ignored). */
void pydb__ncfg_unref(nidx_cfg *c);

/* The live segments, oldest first, shared by reference count. */
typedef struct nidx_segset {
    atomic_int refs;
    nidx_cfg *cfg;           /* how their keys were made (a reference)   */
    size_t n;
    nidx_seg **v;            /* oldest first */
    uint8_t *newer_tombs;    /* [i]: some segment after i has tombstones */
    uint32_t *newest;        /* [mfn]: 1 + position of the newest segment
                                that tombstones mfn (0: none), for
                                mfn < newest_n; NULL: not allocated (the
                                tombstones are searched instead)          */
    uint32_t newest_n;
} nidx_segset;

/* A set with room for n segments (n set; the caller fills v and sets
 * cfg), or NULL. */
nidx_segset *pydb__nsegset_new(size_t n);
/* Drop one reference (NULL is ignored). */
void pydb__nsegset_unref(nidx_segset *ss);
/* Compute the dead-posting flags and the newest-tombstone table once v[]
 * is filled: one table per set (4 bytes per MFN up to the highest
 * tombstoned one), so a set of n segments costs O(n + MFNs), not
 * O(n * MFNs), however many commits went uncollected.  The table is
 * bounded by the bytes of the set's segment files: it is made only when
 * the highest tombstoned MFN is below NIDX_NEWEST_SLACK plus their total
 * size (a sound index holds at least a byte of postings per record it
 * indexes, so this always holds for one), else the tombstones are
 * searched; a damaged segment naming MFN 2^31 - 1 thus costs no 8 GiB
 * table. */
#define NIDX_NEWEST_SLACK ((uint64_t)1 << 16)
void pydb__nsegset_finish(nidx_segset *ss);
/* Bytes of the inline segments of ss outside ss->v[lo..lo + n) (what a
 * MANIFEST with them in it holds: NIDX_INLINE_TOTAL at most). */
size_t pydb__nsegset_inline_bytes(const nidx_segset *ss, size_t lo,
                                  size_t n);

/* A refresh reads the MANIFEST's head at least this often (ms), even
 * while the header says no commit replaced it (pydb__nidx_refresh). */
#define NIDX_SEEN_MS 100

typedef struct nidx {
    pydb_index base;
    char dir[1024], manifest[1100];
    pthread_mutex_t mu;
    nidx_segset *cur;
    uint64_t gen;            /* MANIFEST generation of cur                 */
    nidx_segset *prev;       /* the set cur replaced, or NULL               */
    uint64_t prev_gen;
    struct pydb_shm *shm;    /* the database's commit header, or NULL
                                (atomic; mapped on first use, then fixed) */
    char shm_path[1100], mst_path[1100];   /* "" : no database files     */
    atomic_ullong seen_commit; /* the header's latest commit before the
                                MANIFEST was last read (refresh): while it
                                stays, no commit replaced the MANIFEST    */
    atomic_llong seen_ms;    /* pydb__now_ms() of that read               */
    /* commit hook (nidx_commit.c) */
    pydb_put_file_fn put_file;
    void *put_ctx;
    nidx_seg *pending;
    uint64_t pending_gen;
    nidx_segset *pending_base; /* the set pending follows when prepare
                                took an offered merge, or NULL (then cur;
                                both under the writer lock)              */
    struct nidx_merge *pending_merge; /* that merge (x->offer, taken)   */
    pydb_fst_scratch scratch;
    /* garbage (nidx_gc.c) */
    pydb_db *db;             /* the attached writable handle, or NULL
                                (atomic: readers tell its collector when
                                they skip dead postings)                 */
    pthread_rwlock_t db_lock; /* read: a reader telling db's collector;
                                write: detaching (db set to NULL)        */
    atomic_ullong met;       /* reads that skipped dead postings          */
    pthread_mutex_t gc_mu;   /* one collect() at a time (trylock)         */
    struct nidx_merge *merge; /* a merge of the base (the oldest segment
                                and those after it) in progress, or NULL
                                (gc_mu)                                   */
    struct nidx_merge *minor; /* a merge of the tail (the newest segments
                                after those) in progress, or NULL (gc_mu) */
    struct nidx_merge *offer; /* a finished tail merge of inline segments
                                that the next commit of this handle
                                publishes, or NULL (mu; nidx_gc.c)        */
    int offer_taken;         /* a commit in flight carries it (mu)        */
    uint64_t offer_commit;   /* the header's latest commit when it was
                                offered (mu): a later one that did not
                                take it came from elsewhere             */
    int64_t offer_dropped;   /* dead postings such commits dropped, for
                                the collector's next report (mu)         */
    struct nidx_drop *drops; /* segments this handle's merges unnamed, with
                                the commit that did (gc_mu)               */
    size_t ndrops, cap_drops;
    struct {                 /* the last scan of the directory by a
                                collect step, reused while the directory
                                is unchanged (nidx_gc.c, scan_cached; gc_mu) */
        int valid;
        uint64_t gen;        /* the set's generation it was made against */
        int64_t mtime_ns;    /* the directory's mtime then                */
        int64_t at_ms;       /* pydb__now_ms() then                       */
        int64_t files, unused, unused_bytes;
    } scan;
    void (*gc_free)(struct nidx *x); /* ends a merge in progress (set by
                                nidx_gc.c; called at close)              */
    /* test double of pydb_txn_put_file (pydb__nidx_use_test_put) */
    char test_path[1100];
    uint8_t *test_data;
    size_t test_len;
    struct nidx *fork_next, *fork_prev; /* every open handle (fork)     */
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
/* Serve ns (a reference the handle takes over) as generation gen if it
 * is newer than the current set, which becomes the previous one; else
 * drop ns.  1 if installed, 0 if not. */
int pydb__nidx_install(nidx *x, nidx_segset *ns, uint64_t gen);

/* The database's commit header, mapped on first use (readers never
 * create it), or NULL (files mode). */
struct pydb_shm *pydb__nidx_header(nidx *x);

/* With the writer lock held: *top gets the highest generation of a
 * segment file in dir or of the MANIFEST on disk (0: none), the floor of
 * a new segment's generation.  Removes the temporary files of merges
 * (merge-PID-N.tmp) whose process is gone, and the segment files that
 * neither ss (may be NULL) nor the MANIFEST on disk names, if no reader
 * registered in the commit header shm (NULL: files mode) reads an older
 * commit than the latest.  A frame of the log that a power cut may keep
 * must not name a removed file: call it after a checkpoint (sync_first
 * NULL), or in the transaction sync_first, which fdatasyncs the log
 * before the first removal (pydb__txn_log_durable: a log with sync=False
 * frames may come back from a power cut as a prefix ending at an older
 * MANIFEST; txn.c, "Commits without fsync").  0, or the error of that
 * fdatasync (nothing more is removed).  Otherwise best effort. */
int pydb__nidx_collect(uint64_t *top, const char *dir, struct pydb_shm *shm,
                       const nidx_segset *ss, struct pydb_txn *sync_first,
                       pydb_error *err);
/* The same after a checkpoint, returning the top generation, counting
 * the files removed and their bytes into *files and *bytes (either may be
 * NULL), where a file the rule above keeps may still go when may_go(ctx,
 * generation) says so (NULL: none may). */
uint64_t pydb__nidx_collect_if(const char *dir, struct pydb_shm *shm,
                               const nidx_segset *ss, int64_t *files,
                               int64_t *bytes,
                               int (*may_go)(void *ctx, uint64_t gen),
                               void *ctx);
/* 1 if unnamed segment files may be removed now: no reader registered in
 * shm (NULL: files mode, always 1) reads a commit older than the
 * latest. */
int pydb__nidx_may_remove(struct pydb_shm *shm);
/* A read skipped dead postings: count it and, for an index attached to
 * a writable handle, tell the handle's collector (pydb__gc_met: never
 * waits for the collector; holds db_lock for reading meanwhile, so that
 * pydb_native_index_attach(ix, NULL) -- detaching, before the handle is
 * closed -- waits for it). */
void pydb__nidx_met(nidx *x);
/* The header's latest commit (0: no valid header; under nowait also when
 * it is not mapped yet: mapping it opens a file). */
uint64_t pydb__nidx_latest(nidx *x);
/* The handle serves the MANIFEST that stood at the header's commit
 * `latest`: refreshes read no file while the header stays there
 * (pydb__nidx_refresh). */
void pydb__nidx_seen(nidx *x, uint64_t latest);
/* The collection callbacks of the commit hook (nidx_gc.c) and the end
 * of a merge in progress (at close). */
int pydb__nidx_gc_collect(void *ctx, pydb_db *db,
                          const struct pydb_gc_step *how, int *more,
                          struct pydb_gc_report *rep,
                          pydb_error *err);
int pydb__nidx_gc_garbage(void *ctx, pydb_db *db,
                          struct pydb_index_stat *out, pydb_error *err);
/* Every key of a pinned view of a native index (pydb_snapshot_index) in
 * order, with its live postings merged over the view's segments, in one
 * pass over each segment (a lookup per key visits every segment: with a
 * thousand segments, the validator's walk took 40 times as long): fn
 * gets the key, its live posting count and its postings (valid during
 * the call); nonzero stops the walk.  PYDB_EINVAL for an index that is
 * not such a view; the segments' read errors. */
typedef int (*pydb__key_postings_fn)(void *ctx, const uint8_t *key,
                                     size_t len, uint64_t count,
                                     const pydb_postings *p);
int pydb__nidx_view_walk(pydb_index *view, pydb__key_postings_fn fn,
                         void *ctx, pydb_error *err);
/* The keys of record `mfn` (fields[n]) by the FST, key rules and stop
 * words of a pinned view (pydb_snapshot_index): fn gets each key and its
 * posting, as a commit adds them (pydb__fst_keys; s: its scratch).
 * PYDB_EINVAL for an index that is not such a view; pydb__fst_keys'
 * errors. */
int pydb__nidx_view_keys(pydb_index *view, int32_t mfn,
                         const pydb_field *fields, uint32_t n,
                         pydb_fst_scratch *s, pydb_key_fn fn, void *ctx,
                         pydb_error *err);
/* Whether the FST of `view` (a pinned view) has a line of ID `tag` whose
 * technique is 1000 or more: postings of that TAG may be for any MFN, a
 * record that does not exist or is deleted included, as in a CISIS
 * inverted file (docs/isis-formats.md §5.2).  0 for anything else. */
int pydb__nidx_view_elsewhere(pydb_index *view, uint32_t tag);
void pydb__nidx_gc_free(nidx *x);
/* A commit's prepare (the writer lock held): if a merge is offered and
 * its run is still in ss in a row, *out is ss with the run replaced by
 * the merged segment, inline with generation gen, and *taken the merge
 * (marked taken: it stays offered until pydb__nidx_offer_done); else
 * both NULL (an offer that no longer fits is dropped: the collector
 * merges again).  PYDB_ENOMEM or the inline segment's error (the offer
 * stays). */
int pydb__nidx_offer_apply(nidx_segset **out, struct nidx_merge **taken,
                           nidx *x, const nidx_segset *ss, uint64_t gen,
                           pydb_error *err);
/* After that commit: published (the merge freed, its dead postings for
 * the collector's next report) or not (offered again). */
void pydb__nidx_offer_done(nidx *x, struct nidx_merge *m, int published);

/* pydb__nidx_set_at: the MANIFEST on disk is newer than the generation
 * asked for, and the handle holds neither (not an error code). */
#define NIDX_MOVED 1
/* A reference to the segment set of MANIFEST generation g (0: the
 * current set after a refresh): the current or previous set when it has
 * that generation, else the MANIFEST on disk when it has it (adopted as
 * the current set).  NIDX_MOVED (with *out NULL and err describing it)
 * when the MANIFEST is newer than g: that set is gone from this handle;
 * PYDB_ECORRUPT when the MANIFEST is older than g; errors of reading. */
int pydb__nidx_set_at(nidx_segset **out, nidx *x, uint64_t g,
                      pydb_error *err);
/* pydb__nseg_decode for the entry at cursor c of segment ss->v[i], with
 * the postings the newer segments of ss tombstone left out. */
int pydb__nidx_decode_live(pydb_postings *out, const nidx_segset *ss,
                           size_t i, const nidx_cursor *c, uint64_t *live,
                           pydb_error *err);
/* The same, through pydb__nseg_decode_in: with keep, only the postings
 * of the MFNs in *keep. */
int pydb__nidx_decode_live_in(pydb_postings *out, const nidx_segset *ss,
                              size_t i, const nidx_cursor *c,
                              const pydb_mfn_bits *keep, uint64_t *live,
                              pydb_error *err);

#endif
