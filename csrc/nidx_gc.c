/*
 * nidx_gc.c - the native index's garbage and its collection: the commit
 * hook's collect() and garbage() (pydb.h group 5 and 9), and the reader's
 * signal that it met garbage (pydb__nidx_met).
 *
 * DESIGN.  Garbage of the index is (a) dead postings: postings of an MFN
 * that a newer segment of the set tombstones (every lookup decodes and
 * skips them), (b) segments themselves: each commit adds one, and every
 * lookup visits every segment, (c) tombstones, and (d) segment files no
 * set names (merged away, or orphans of failed commits and crashes).
 * Commits never merge; collect() does, in bounded steps:
 *
 *   1. choose (tiered merging, as log-structured indexes do): at most
 *      two merges run, on runs of segments that never overlap --
 *      x->minor, the TAIL: the newest segments, as long as each weighs
 *      (postings + tombstones) at most twice the newer ones of the run
 *      together, once there are NIDX_TAIL_MIN of them (2 when idle);
 *      x->merge, the BASE: the oldest segment and those after it up to a
 *      tail merge under way, when they weigh 1/NIDX_BASE_SHARE of it,
 *      each by the share of its records that it updated or deleted
 *      rather than appended (about the share of the base's postings
 *      they made dead: base_due), or whenever the
 *      database is idle (collect()'s `idle`: a quiet database ends with
 *      one clean segment).  Sets are immutable (a reference keeps their
 *      files mapped), so merging needs no lock;
 *   2. merge, resumable: a k-way merge of the run's dictionaries, one
 *      key per unit of `budget` -- the key's live postings (those no
 *      newer segment of the set tombstones) are decoded from every
 *      segment of the run that has it and encoded once; a key left with
 *      none is dropped.  A tail's merged segment keeps the run's
 *      tombstones (they still apply to the older segments); the base's
 *      needs none, nothing is older.  The cursors, the encoder and the
 *      output live in the merge between calls;
 *   3. write: a merged segment of at most pydb__nidx_inline_max bytes
 *      stays in memory, to go inline into the MANIFEST (step 4; when
 *      the set's inline segments would pass NIDX_INLINE_TOTAL there,
 *      it is written then); a larger one goes to merge-PID-N.tmp in the
 *      index directory, fsynced (one unit).  ENOSPC/EIO: the file is
 *      removed, the merge dropped, the error returned; the index is as
 *      it was;
 *   4. commit, under the writer lock (pydb_txn_begin with the step's
 *      lock_ms: 0 for a reader's step, a short wait for the thread's --
 *      a writer in another process that commits back to back leaves the
 *      lock free only for moments; a busy lock returns *more = 1, the
 *      next call tries again): the
 *      MANIFEST is read again; if the run is no longer in it in a row
 *      (or, for the base, no longer first: a rebuild, another process'
 *      collection) the merge is dropped and starts over.  Else an inline
 *      segment takes generation G (below) in the new MANIFEST, or the
 *      merged file is renamed to seg-G.pds (G above every generation in
 *      use, chosen under the lock as prepare chooses its own), the
 *      directory fsynced, and the new MANIFEST -- the run replaced by G
 *      -- goes through a transaction of whole files only
 *      (pydb_txn_put_file), its generation published with the commit's
 *      state (pydb__txn_set_index_gen), exactly as a commit's MANIFEST.
 *      The new set is installed in the handle after the commit, and the
 *      run's generations are remembered with the commit (x->drops).
 *      Segment lines are in age order; generations are names.
 *      OFFERED: a step of the collector thread while commits go on
 *      (pydb_gc_step.offer) does not commit a finished tail merge whose
 *      run and output are all inline (offerable): it leaves it in
 *      x->offer for the handle's next commit, whose prepare
 *      (pydb__nidx_offer_apply) checks the run as above and writes the
 *      merged segment in its place in the MANIFEST it writes anyway --
 *      the merge's own commit (a log write, an fsync, the MANIFEST
 *      written again) was a third of the writer's fsyncs in a stream of
 *      one-record commits.  No tail merge starts while one is offered; a
 *      step that does not offer (idle, a reader's, collect()) takes it
 *      back and commits it here; its dead postings go to the collector's
 *      next report (x->offer_dropped);
 *   5. remove: under the writer lock (a prepare's new file is unnamed
 *      until its commit), after a checkpoint (the .mst/.xrf synced, the
 *      log emptied durably: pydb__txn_settle, in both sync modes),
 *      segment files no set and no synced MANIFEST names, once no registered
 *      reader reads an older commit (pydb__nidx_may_remove) or, for the
 *      files in x->drops, once none reads a commit older than the one
 *      that unnamed them; and temporaries of dead processes (merges, and
 *      the runs of bulk builds: build-PID-N.tmp, nidx_spill.h).
 *      While a reader pins unnamed files no merge of the base starts:
 *      each would leave one more copy of the index on disk until the
 *      reader goes (an old snapshot stops the index's collection, as
 *      Firebird's oldest interesting transaction does; garbage() shows
 *      the pinned files as unused_files); tail merges go on while the
 *      pinned files weigh less than 1/NIDX_PIN_SHARE of the index.
 *
 * Crash safety: before the commit point the MANIFEST on disk is the old
 * one and the merge's files are unnamed (a temporary, or a seg-G.pds no
 * MANIFEST names): step 5 removes them later.  After it, recovery
 * replays the new MANIFEST.  A kill at any point leaves one of the two.
 * An offered merge is in memory only until the commit that carries it:
 * that commit's MANIFEST holds it (inline) or the old one stands.
 *
 * Units: one key merged, one file written, one file removed; the commit
 * (a rename and an fsync of a merged file, the log) is one unit too; an
 * offer is none.  A call does at most `budget` of them (at least one).
 *
 * Depends on: nidx_handle.h (sets, refresh, install, collect),
 * nidx_seg.h (cursors, decoding, the encoder), nidx_manifest.h,
 * transactions (pydb.h, pydb_int.h), gc.h (pydb__gc_met), shm.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "gc.h"
#include "nidx_handle.h"
#include "nidx_spill.h"
#include "shm.h"

#define NIDX_TAIL_MIN 4    /* commits go on: a tail merge of this many    */
#define NIDX_BASE_SHARE 16 /* the base is merged once the segments after
                              it weigh 1/NIDX_BASE_SHARE of it            */
#define NIDX_DROPS_MAX 4096 /* unnamed segments remembered (x->drops)    */
#define NIDX_PIN_SHARE 4   /* files pinned by a reader behind: tail merges
                              go on while they weigh less than
                              1/NIDX_PIN_SHARE of the index               */
#define NIDX_UNUSED_MIN (1 << 20) /* unnamed files the thread leaves for
                              its idle pass while commits go on, unless
                              they also weigh 1/NIDX_PIN_SHARE of the
                              index (bytes)                             */

/* A merge in progress (x->merge, under x->gc_mu). */
typedef struct nidx_merge {
    nidx_segset *in;         /* the set it was chosen from (a reference)  */
    size_t lo, hi;           /* it merges in->v[lo..hi)                   */
    int32_t *tombs;          /* lo > 0: the range's tombstones, ascending
                                (they still apply to in->v[0..lo))        */
    size_t ntombs;
    nidx_cursor *cs;         /* one per segment of `in` (the range used)  */
    nidx_cursor **ord;       /* valid cursors, by current key            */
    size_t nord;
    pydb_buf out;            /* the merged segment's bytes               */
    nidx_seg_enc enc;
    int enc_open;
    pydb_postings p;
    uint8_t *key[2];         /* the last two keys encoded (enc.prev)     */
    size_t kcap[2];
    int kcur;
    int64_t dropped;         /* dead postings left out                   */
    int written;             /* complete: the temporary file, or (small,
                                to go inline) the bytes in out         */
    char tmp[1100];
} nidx_merge;

static atomic_ulong merge_seq;   /* names of temporary files */

/* A segment a merge of this handle unnamed, and the commit that did: a
 * reader registered at that commit or later reads a MANIFEST without it
 * (x->drops, under x->gc_mu; at most NIDX_DROPS_MAX, the oldest
 * forgotten: such a file waits for the rule of pydb__nidx_may_remove). */
typedef struct nidx_drop {
    uint64_t gen, commit;
} nidx_drop;

static void merge_free(nidx_merge *g)
{
    if (!g) return;
    if (g->cs)
        for (size_t i = 0; g->in && i < g->in->n; i++) free(g->cs[i].key);
    free(g->cs);
    free(g->ord);
    if (g->enc_open) pydb__nseg_enc_free(&g->enc);
    free(g->out.p);
    pydb_postings_free(&g->p);
    free(g->key[0]);
    free(g->key[1]);
    free(g->tombs);
    if (g->tmp[0]) unlink(g->tmp);
    pydb__nsegset_unref(g->in);
    free(g);
}

void pydb__nidx_gc_free(nidx *x)
{
    merge_free(x->merge);
    x->merge = NULL;
    merge_free(x->minor);
    x->minor = NULL;
    /* a commit that failed after its commit point ends with neither
     * publish nor abort: its prepare's set and merge end here */
    pydb__nsegset_unref(x->pending_base);
    x->pending_base = NULL;
    x->pending_merge = NULL;   /* x->offer */
    merge_free(x->offer);
    x->offer = NULL;
    free(x->drops);
    x->drops = NULL;
    x->ndrops = x->cap_drops = 0;
}

/* Remember that commit `commit` unnamed the segments of in->v[lo..hi). */
static void drops_add(nidx *x, const nidx_segset *in, size_t lo, size_t hi,
                      uint64_t commit)
{
    size_t n = hi - lo;
    if (x->ndrops + n > NIDX_DROPS_MAX) {   /* forget the oldest */
        size_t k = x->ndrops + n - NIDX_DROPS_MAX;
        if (k > x->ndrops) k = x->ndrops;
        memmove(x->drops, x->drops + k, (x->ndrops - k) * sizeof *x->drops);
        x->ndrops -= k;
    }
    if (x->ndrops + n > x->cap_drops) {
        size_t cap = x->cap_drops ? x->cap_drops * 2 : 64;
        nidx_drop *d;
        while (cap < x->ndrops + n) cap *= 2;
        d = realloc(x->drops, cap * sizeof *d);
        if (!d) return;   /* they wait for the general rule */
        x->drops = d;
        x->cap_drops = cap;
    }
    for (size_t i = lo; i < hi && x->ndrops < NIDX_DROPS_MAX; i++) {
        if (in->v[i]->inl) continue;   /* no file to remove */
        x->drops[x->ndrops].gen = in->v[i]->gen;
        x->drops[x->ndrops++].commit = commit;
    }
}

/* may_go of pydb__nidx_collect_if: a segment this handle's merge unnamed
 * at a commit no registered reader is older than (ctx: the nidx, whose
 * `oldest` holds the oldest reader's commit). */
typedef struct drop_ctx {
    const nidx *x;
    uint64_t oldest;
} drop_ctx;

static int drop_may_go(void *ctx, uint64_t gen)
{
    const drop_ctx *d = ctx;
    for (size_t i = 0; i < d->x->ndrops; i++)
        if (d->x->drops[i].gen == gen) return d->x->drops[i].commit <= d->oldest;
    return 0;
}

/* Forget the drops whose files are gone (after a removal). */
static void drops_prune(nidx *x)
{
    size_t w = 0;
    for (size_t i = 0; i < x->ndrops; i++) {
        char path[1100];
        struct stat sb;
        pydb__nseg_path(path, sizeof path, x->dir, x->drops[i].gen);
        if (stat(path, &sb) == 0) x->drops[w++] = x->drops[i];
    }
    x->ndrops = w;
}

/* Drop the merge in *slot (it failed, or no longer applies). */
static void merge_drop(nidx_merge **slot)
{
    merge_free(*slot);
    *slot = NULL;
}

/* ---- unnamed files ---- */

/* May unnamed segment files go?  Only when no registered reader of the
 * commit header reads a commit older than the latest: a reader that
 * registered at an older commit may still be about to open a segment its
 * MANIFEST named (nidx_handle.c, load_set), and a snapshot of an older
 * commit may still ask for its generation's segments.  Without a usable
 * header (files mode) no reader can register: as before, they may. */
int pydb__nidx_may_remove(struct pydb_shm *shm)
{
    if (!shm || !pydb__shm_valid(shm)) return 1;
    return pydb__shm_oldest(shm, NULL) == pydb__shm_latest(shm);
}

static int collect(uint64_t *top_out, const char *dir, struct pydb_shm *shm,
                   const nidx_segset *ss, pydb_txn *sync_first,
                   int64_t *files, int64_t *bytes,
                   int (*may_go)(void *ctx, uint64_t gen), void *ctx,
                   pydb_error *err);

int pydb__nidx_collect(uint64_t *top, const char *dir, struct pydb_shm *shm,
                       const nidx_segset *ss, pydb_txn *sync_first,
                       pydb_error *err)
{
    return collect(top, dir, shm, ss, sync_first, NULL, NULL, NULL, NULL, err);
}

uint64_t pydb__nidx_collect_if(const char *dir, struct pydb_shm *shm,
                               const nidx_segset *ss, int64_t *files,
                               int64_t *bytes,
                               int (*may_go)(void *ctx, uint64_t gen),
                               void *ctx)
{
    uint64_t top = 0;
    (void)collect(&top, dir, shm, ss, NULL, files, bytes, may_go, ctx, NULL);
    return top;
}

static int collect(uint64_t *top_out, const char *dir, struct pydb_shm *shm,
                   const nidx_segset *ss, pydb_txn *sync_first,
                   int64_t *files, int64_t *bytes,
                   int (*may_go)(void *ctx, uint64_t gen), void *ctx,
                   pydb_error *err)
{
    char manifest[1100];
    uint64_t top = 0;
    uint8_t *data = NULL;
    nidx_manifest m;
    pydb_error e;
    DIR *d;
    struct dirent *de;
    int remove = pydb__nidx_may_remove(shm), named, rc = PYDB_OK;

    memset(&m, 0, sizeof m);
    snprintf(manifest, sizeof manifest, "%s/MANIFEST", dir);
    named = pydb__nman_read(&m, &data, manifest, 0, &e) == PYDB_OK;
    if (!named) remove = 0;   /* cannot tell what the MANIFEST names */
    d = opendir(dir);
    while (d && (de = readdir(d)) != NULL) {
        uint64_t g;
        int used = 0;
        char path[1100];
        struct stat sb;
        if (pydb__nidx_temp_dead(de->d_name)) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            if (stat(path, &sb) == 0 && unlink(path) == 0) {
                if (files) (*files)++;
                if (bytes) *bytes += (int64_t)sb.st_size;
            }
            continue;
        }
        if (!pydb__nseg_name_gen(de->d_name, &g)) continue;
        /* (an inline segment has no file: a file of its generation is
         * an orphan of a killed commit) */
        for (size_t i = 0; ss && i < ss->n && !used; i++)
            used = ss->v[i]->gen == g && !ss->v[i]->inl;
        for (size_t i = 0; i < m.nsegs && !used; i++)
            used = m.segs[i].gen == g && !m.segs[i].inl;
        if (!used && (remove || (named && may_go && may_go(ctx, g)))) {
            /* before the first removal, every frame of the log durable
             * (pydb__txn_log_durable) */
            if (sync_first) {
                if ((rc = pydb__txn_log_durable(sync_first, err))) break;
                sync_first = NULL;
            }
            pydb__nseg_path(path, sizeof path, dir, g);
            if (stat(path, &sb) == 0 && unlink(path) == 0) {
                if (files) (*files)++;
                if (bytes) *bytes += (int64_t)sb.st_size;
            } else if (g > top) {
                top = g;   /* still there: never reuse its name */
            }
        } else if (g > top) {
            top = g;
        }
    }
    if (d) closedir(d);
    if (m.gen > top) top = m.gen;
    free(m.segs);
    free(data);
    *top_out = top;
    return rc;
}

/* ---- the k-way merge of a set's dictionaries (also for garbage()) ---- */

/* Insert c into ord[0..*nord) by key. */
static void ord_insert(nidx_cursor **ord, size_t *nord, nidx_cursor *c)
{
    size_t p = *nord;
    while (p > 0 &&
           pydb__keycmp(c->key, c->klen, ord[p - 1]->key, ord[p - 1]->klen) < 0) {
        ord[p] = ord[p - 1];
        p--;
    }
    ord[p] = c;
    (*nord)++;
}

/* Position cs[i] at the first key of segments lo..hi-1 of ss and order
 * the valid ones into ord. */
static int kway_start(nidx_cursor *cs, nidx_cursor **ord, size_t *nord,
                      const nidx_segset *ss, size_t lo, size_t hi,
                      pydb_error *err)
{
    int rc;
    *nord = 0;
    for (size_t i = lo; i < hi; i++) {
        cs[i].s = ss->v[i];
        cs[i].idx = i;
        cs[i].valid = 0;
        if (ss->v[i]->nterms == 0) continue;
        if ((rc = pydb__ncur_block(&cs[i], 0, err))) return rc;
        if ((rc = pydb__ncur_next(&cs[i], err))) return rc;
        if (cs[i].valid) ord_insert(ord, nord, &cs[i]);
    }
    return PYDB_OK;
}

/* How many cursors at the head of ord share the smallest key. */
static size_t kway_group(nidx_cursor *const *ord, size_t nord)
{
    size_t k = 1;
    while (k < nord && pydb__keycmp(ord[k]->key, ord[k]->klen, ord[0]->key,
                                    ord[0]->klen) == 0)
        k++;
    return k;
}

/* Advance the first k cursors of ord and restore the order. */
static int kway_advance(nidx_cursor **ord, size_t *nord, size_t k,
                        pydb_error *err)
{
    nidx_cursor *moved[k];
    size_t nm = 0;
    int rc;
    for (size_t j = 0; j < k; j++) {
        if ((rc = pydb__ncur_next(ord[j], err))) return rc;
        if (ord[j]->valid) moved[nm++] = ord[j];
    }
    memmove(ord, ord + k, (*nord - k) * sizeof *ord);
    *nord -= k;
    for (size_t j = 0; j < nm; j++) ord_insert(ord, nord, moved[j]);
    return PYDB_OK;
}

/* ---- collect() ---- */

/* The current set and its generation (a reference). */
static nidx_segset *current(nidx *x, uint64_t *gen)
{
    nidx_segset *ss;
    pthread_mutex_lock(&x->mu);
    ss = x->cur;
    atomic_fetch_add(&ss->refs, 1);
    *gen = x->gen;
    pthread_mutex_unlock(&x->mu);
    return ss;
}

/* A segment's weight in the choice of merges: its postings and
 * tombstones (at least 1). */
static uint64_t seg_weight(const nidx_seg *s)
{
    return s->nposts + s->ntomb + 1;
}

/* The tail to merge (tiered merging, DESIGN step 1): the longest run of
 * the newest segments of ss from `from` on in which each segment weighs
 * no more than twice all newer ones of the run together (about a binary
 * counter, with room for commits of different sizes: a posting is merged
 * O(log(tail / commit)) times, and the tail has O(log) segments), or is
 * mostly dead (mostly_dead: a frequently rewritten set of records would
 * otherwise keep dead postings and keys in the tail's oldest, largest
 * segment for long).  Returns its first index, or ss->n when it has
 * fewer than `min` segments. */
/* Whether at least half of the records segment i of ss holds postings
 * of (its tombstones: a commit tombstones the records it writes, a tail
 * merge keeps its run's) were written again by a newer segment, so that
 * at least about half its postings are dead (and its keys, such as the
 * words of records written once, may be dead keys every truncation
 * enumerates).  Needs the newest-tombstone table (else 0). */
static int mostly_dead(const nidx_segset *ss, size_t i)
{
    const nidx_seg *s = ss->v[i];
    uint32_t dead = 0;
    if (!ss->newest || !ss->newer_tombs[i] || s->ntomb == 0) return 0;
    for (uint32_t k = 0; k < s->ntomb; k++) {
        int32_t m = pydb__nseg_tomb(s, k);
        if (m >= 0 && (uint32_t)m < ss->newest_n && ss->newest[m] > i + 1)
            dead++;
    }
    return dead * 2 >= s->ntomb;
}

static size_t tail_start(const nidx_segset *ss, size_t from, size_t min)
{
    uint64_t acc = 0;
    size_t lo = ss->n;
    for (size_t i = ss->n; i-- > from;) {
        uint64_t w = seg_weight(ss->v[i]);
        if (ss->n - i >= 2 && w > 2 * acc && !mostly_dead(ss, i)) break;
        acc += w;
        lo = i;
    }
    return ss->n - lo >= min ? lo : ss->n;
}

/* Whether the base (the oldest segment) is worth merging with what
 * follows it (up to `hi`) while commits go on: the postings the newer
 * segments made dead -- about the share of each one's weight that its
 * updated or deleted records make (nupd of its ntomb records: the MFNs
 * its commits appended hide nothing, nidx_commit.c) -- have grown to
 * NIDX_BASE_SHARE of it.  Appends alone make nothing dead; tail merges
 * keep their number logarithmic, and an idle collection merges them
 * all.  (Counting them too made a database filled by single-record
 * commits rewrite its base every few commits: 0.45 merge commits per
 * commit, each with its own fsync.) */
static int base_due(const nidx_segset *ss, size_t hi)
{
    uint64_t newer = 0;
    if (hi < 2) return 0;
    for (size_t i = 1; i < hi; i++) {
        const nidx_seg *s = ss->v[i];
        if (s->ntomb) newer += seg_weight(s) * s->nupd / s->ntomb;
    }
    return newer * NIDX_BASE_SHARE >= seg_weight(ss->v[0]);
}

/* A merged segment's nupd: at most its tombstones, at most those of its
 * run's segments (a tail keeps its run's tombstones; a base has none). */
static void merged_nupd(nidx_seg *mseg, const nidx_merge *g)
{
    uint64_t n = 0;
    for (size_t i = g->lo; i < g->hi; i++) n += g->in->v[i]->nupd;
    mseg->nupd = n < mseg->ntomb ? (uint32_t)n : mseg->ntomb;
}

/* Where the range of merge g lies in cur: its first index, or (size_t)-1
 * when its segments are no longer there in a row (a rebuild, another
 * handle's collection). */
static size_t range_in(const nidx_merge *g, const nidx_segset *cur)
{
    size_t n = g->hi - g->lo;
    if (cur->cfg != g->in->cfg) return (size_t)-1;
    for (size_t p = 0; p + n <= cur->n; p++) {
        if (cur->v[p]->gen != g->in->v[g->lo]->gen) continue;
        for (size_t k = 1; k < n; k++)
            if (cur->v[p + k]->gen != g->in->v[g->lo + k]->gen)
                return (size_t)-1;
        return p;
    }
    return (size_t)-1;
}

static int cmp_mfn(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* g->tombs: the tombstones of g's range, ascending, without repeats. */
static int range_tombs(nidx_merge *g, pydb_error *err)
{
    size_t n = 0, w = 0;
    for (size_t i = g->lo; i < g->hi; i++) n += g->in->v[i]->ntomb;
    if (n == 0) return PYDB_OK;
    g->tombs = malloc(n * sizeof *g->tombs);
    if (!g->tombs) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    for (size_t i = g->lo; i < g->hi; i++)
        for (uint32_t k = 0; k < g->in->v[i]->ntomb; k++)
            g->tombs[w++] = pydb__nseg_tomb(g->in->v[i], k);
    qsort(g->tombs, n, sizeof *g->tombs, cmp_mfn);
    w = 1;
    for (size_t i = 1; i < n; i++)
        if (g->tombs[i] != g->tombs[w - 1]) g->tombs[w++] = g->tombs[i];
    g->ntombs = w;
    return PYDB_OK;
}

/* Begin a merge of ss->v[lo..hi) (ss: a reference, taken over). */
static int merge_begin(nidx_merge **out, nidx *x, nidx_segset *ss, size_t lo,
                       size_t hi, pydb_error *err)
{
    nidx_merge *g = calloc(1, sizeof *g);
    uint64_t nterms = 0;
    int rc;

    *out = NULL;
    if (!g) {
        pydb__nsegset_unref(ss);
        return PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
    }
    g->in = ss;
    g->lo = lo;
    g->hi = hi;
    g->cs = calloc(ss->n ? ss->n : 1, sizeof *g->cs);
    g->ord = calloc(ss->n ? ss->n : 1, sizeof *g->ord);
    if (!g->cs || !g->ord) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto fail;
    }
    /* the oldest segment of any set needs no tombstones */
    if (lo > 0 && (rc = range_tombs(g, err))) goto fail;
    for (size_t i = lo; i < hi; i++) nterms += ss->v[i]->nterms;
    if ((rc = pydb__nseg_enc_begin(&g->enc, &g->out, nterms, err))) goto fail;
    g->enc_open = 1;
    if ((rc = kway_start(g->cs, g->ord, &g->nord, ss, lo, hi, err)))
        goto fail;
    *out = g;
    return PYDB_OK;
fail:
    merge_free(g);
    return rc;
}

static int cmp_posting(const void *a, const void *b)
{
    return pydb__posting_cmp(a, b);
}

/* Merge one key: its live postings from every segment that has it. */
static int merge_key(nidx_merge *g, pydb_error *err)
{
    size_t k = kway_group(g->ord, g->nord);
    nidx_cursor *min = g->ord[0];
    int rc;

    g->p.n = 0;
    for (size_t j = 0; j < k; j++) {
        uint64_t live;
        if ((rc = pydb__nidx_decode_live(&g->p, g->in, g->ord[j]->idx,
                                         g->ord[j], &live, err)))
            return rc;
        g->dropped += (int64_t)(g->ord[j]->count - live);
    }
    if (k > 1 && g->p.n > 1) {   /* an MFN is live in one segment only */
        size_t w = 1;
        qsort(g->p.v, g->p.n, sizeof *g->p.v, cmp_posting);
        for (size_t i = 1; i < g->p.n; i++)
            if (pydb__posting_cmp(&g->p.v[w - 1], &g->p.v[i]) != 0)
                g->p.v[w++] = g->p.v[i];
        g->p.n = w;
    }
    if (g->p.n) {
        int c = g->kcur;
        if (g->kcap[c] < min->klen + 1) {
            uint8_t *nk = realloc(g->key[c], min->klen + 1);
            if (!nk) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
            g->key[c] = nk;
            g->kcap[c] = min->klen + 1;
        }
        memcpy(g->key[c], min->key, min->klen);
        /* enc.prev keeps pointing at the other buffer until this call */
        pydb__nseg_enc_term(&g->enc, g->key[c], min->klen, g->p.v, g->p.n);
        g->kcur = !c;
    }
    return kway_advance(g->ord, &g->nord, k, err);
}

/* Write the merged bytes to the temporary file and fsync it (in both
 * sync modes: the MANIFEST that will name it may reach the disk through
 * a frame synced later; txn.c, "Commits without fsync").  On failure the
 * file is removed. */
static int merge_file(nidx_merge *g, nidx *x, pydb_error *err)
{
    int rc;
    snprintf(g->tmp, sizeof g->tmp, "%s/merge-%d-%lu.tmp", x->dir,
             (int)getpid(), (unsigned long)atomic_fetch_add(&merge_seq, 1));
    rc = pydb__write_file(g->tmp, g->out.p, g->out.n, 1, 1, NULL, err);
    if (rc) {
        unlink(g->tmp);
        g->tmp[0] = '\0';
        return rc;
    }
    free(g->out.p);
    memset(&g->out, 0, sizeof g->out);
    g->written = 1;
    return PYDB_OK;
}

/* The merge is complete: finish the bytes; a small segment stays in
 * memory to go inline into the MANIFEST (merge_commit), a larger one is
 * written (merge_file). */
static int merge_write(nidx_merge *g, nidx *x, pydb_error *err)
{
    int rc;
    if ((rc = pydb__nseg_enc_finish(&g->enc, g->tombs, g->ntombs, err)))
        return rc;
    if (g->out.n <= pydb__nidx_inline_max) {
        g->written = 1;   /* (in g->out) */
        return PYDB_OK;
    }
    return merge_file(g, x, err);
}

/* A new set: cur->v[0..p), mseg (whose reference it takes), then
 * cur->v[p + nin..); NULL (no memory: mseg's reference left alone). */
static nidx_segset *set_replacing(const nidx_segset *cur, size_t p,
                                  size_t nin, nidx_seg *mseg)
{
    nidx_segset *ns = pydb__nsegset_new(cur->n - nin + 1);
    if (!ns) return NULL;
    for (size_t i = 0, j = 0; i < cur->n; i++) {
        if (i > p && i < p + nin) continue;
        if (i == p) {
            ns->v[j++] = mseg;
            continue;
        }
        ns->v[j++] = cur->v[i];
        atomic_fetch_add(&cur->v[i]->refs, 1);
    }
    ns->cfg = cur->cfg;
    atomic_fetch_add(&ns->cfg->refs, 1);
    pydb__nsegset_finish(ns);
    return ns;
}

/* Step 4: under the writer lock, publish the merged segment of *slot in
 * place of its range.  *busy: the lock was taken (try again later).  A
 * merge whose range is no longer in the current set in a row (or, for a
 * merge without tombstones, no longer first) is dropped (start again). */
static int merge_commit(nidx *x, pydb_db *db, nidx_merge **slot,
                        int lock_ms, int *busy, pydb_gc_report *rep,
                        pydb_error *err)
{
    nidx_merge *g = *slot;
    nidx_segset *cur = NULL, *ns = NULL;
    nidx_seg *mseg = NULL;
    pydb_txn *t = NULL;
    pydb_buf man = {0};
    nidx_mseg *segs = NULL;
    uint64_t gen, top, cur_gen;
    char path[1100];
    size_t nsegs, p, nin = g->hi - g->lo;
    int rc;

    *busy = 0;
    rc = pydb__txn_begin_gc(&t, db, lock_ms, err);
    if (rc == PYDB_ELOCKED) {
        *busy = 1;
        return PYDB_OK;
    }
    if (rc) return rc;
    if ((rc = pydb__nidx_refresh(x, 1, err))) goto cleanup;
    cur = current(x, &cur_gen);
    p = range_in(g, cur);
    if (p == (size_t)-1 || (g->lo == 0 && p != 0)) {
        /* a rebuild, or another handle collected first: start over */
        merge_drop(slot);
        goto cleanup;
    }
    /* unnamed files go only once every frame of the log is durable: a
     * sync=False frame (of any handle) may be what unnamed them */
    if ((rc = pydb__nidx_collect(&top, x->dir, pydb__nidx_header(x), cur, t,
                                 err)))
        goto cleanup;
    gen = top > cur_gen ? top : cur_gen;
    for (size_t i = 0; i < cur->n; i++)
        if (cur->v[i]->gen > gen) gen = cur->v[i]->gen;
    gen++;
    if (!g->tmp[0] &&
        pydb__nsegset_inline_bytes(cur, p, nin) + g->out.n <= NIDX_INLINE_TOTAL) {
        /* inline in the MANIFEST: no file */
        if ((rc = pydb__nseg_open_inline(&mseg, x->manifest, gen, g->out.p,
                                         g->out.n, err)))
            goto cleanup;
        goto named;
    }
    if (!g->tmp[0] && (rc = merge_file(g, x, err)))
        goto cleanup;
    pydb__nseg_path(path, sizeof path, x->dir, gen);
    if (pydb__vfs->rename(g->tmp, path) != 0) {
        rc = PYDB_OSERROR(err, errno, g->tmp, -1, "cannot rename: %s",
                          strerror(errno));
        goto cleanup;
    }
    g->tmp[0] = '\0';   /* now an unnamed seg-G.pds until the commit */
    if ((rc = pydb__fsync_dir(x->dir, err))) goto cleanup;
    if ((rc = pydb__nseg_open(&mseg, path, gen, err))) goto cleanup;
named:
    merged_nupd(mseg, g);
    nsegs = cur->n - nin + 1;
    segs = malloc(nsegs * sizeof *segs);
    if (!segs || !(ns = set_replacing(cur, p, nin, mseg))) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    mseg = NULL;   /* ns holds it */
    pydb__nman_segs_of(segs, ns->v, nsegs);
    if ((rc = pydb__nman_encode(&man, gen, &cur->cfg->rules,
                                cur->cfg->fst_text, cur->cfg->fst_len,
                                cur->cfg->stw_text, cur->cfg->stw_len, segs,
                                nsegs, err)))
        goto cleanup;
    if ((rc = pydb_txn_put_file(t, x->manifest, man.p, man.n, err)))
        goto cleanup;
    pydb__txn_set_index_gen(t, gen);
    rc = pydb_txn_commit(t, err);
    t = NULL;
    if (rc) goto cleanup;   /* the unnamed seg-G.pds goes with step 5 */
    pydb__nidx_install(x, ns, gen);
    ns = NULL;
    rep->postings += g->dropped;
    /* the commit that unnamed the inputs, or a later one: a reader at
     * it or later does not need them */
    if (pydb__nidx_header(x) && pydb__shm_valid(pydb__nidx_header(x)))
        drops_add(x, g->in, g->lo, g->hi,
                  pydb__shm_latest(pydb__nidx_header(x)));
    merge_drop(slot);
cleanup:
    if (t) pydb_txn_abort(t);
    if (rc && *slot) merge_drop(slot);   /* start over next time */
    pydb__nseg_unref(mseg);
    pydb__nsegset_unref(ns);
    pydb__nsegset_unref(cur);
    free(segs);
    free(man.p);
    return rc;
}

/* ---- a merge offered to the next commit ---- */

/* Whether the finished merge g may wait for the handle's next commit to
 * publish it: its bytes are in memory, small enough to go inline, and
 * every segment of its run is inline (no file to rename or to drop:
 * publishing it writes nothing but the MANIFEST the commit writes
 * anyway).  Only tail merges (lo > 0). */
static int offerable(const nidx_merge *g)
{
    if (!g->written || g->tmp[0] || g->lo == 0 ||
        g->out.n > pydb__nidx_inline_max)
        return 0;
    for (size_t i = g->lo; i < g->hi; i++)
        if (!g->in->v[i]->inl) return 0;
    return 1;
}

/* Move the merge in *slot to x->offer (none is there: no tail merge
 * starts while one is). */
static void offer_put(nidx *x, nidx_merge **slot)
{
    uint64_t latest = pydb__nidx_latest(x);
    pthread_mutex_lock(&x->mu);
    PYDB_ASSERT(!x->offer);
    x->offer = *slot;
    x->offer_taken = 0;
    x->offer_commit = latest;
    pthread_mutex_unlock(&x->mu);
    *slot = NULL;
}

/* The offered merge back into x->minor (empty then), to be committed by
 * the collector itself (1 if so), unless a commit carries it now: when
 * `always` (idle, or a caller that does not offer), or when commits that
 * did not take it came since it was offered -- two: one of this handle
 * may have been past its prepare then; more come from another handle or
 * process, and this handle's next commit may be far off (no tail merge
 * starts while one is offered). */
static int offer_reclaim(nidx *x, int always)
{
    uint64_t latest = always ? 0 : pydb__nidx_latest(x);
    int done = 0;
    pthread_mutex_lock(&x->mu);
    if (x->offer && !x->offer_taken && !x->minor &&
        (always || latest > x->offer_commit + 1)) {
        x->minor = x->offer;
        x->offer = NULL;
        done = 1;
    }
    pthread_mutex_unlock(&x->mu);
    return done;
}

/* Where the offered merge's run lies in cur (range_in), or (size_t)-1
 * when none is offered. */
static size_t offer_at(nidx *x, const nidx_segset *cur)
{
    size_t p = (size_t)-1;
    pthread_mutex_lock(&x->mu);
    if (x->offer) p = range_in(x->offer, cur);
    pthread_mutex_unlock(&x->mu);
    return p;
}

static int offered(nidx *x)
{
    int o;
    pthread_mutex_lock(&x->mu);
    o = x->offer != NULL;
    pthread_mutex_unlock(&x->mu);
    return o;
}

int pydb__nidx_offer_apply(nidx_segset **out, nidx_merge **taken, nidx *x,
                           const nidx_segset *ss, uint64_t gen,
                           pydb_error *err)
{
    nidx_merge *g, *stale = NULL;
    nidx_seg *mseg = NULL;
    size_t p = (size_t)-1, nin = 0;
    int rc = PYDB_OK;

    *out = NULL;
    *taken = NULL;
    pthread_mutex_lock(&x->mu);
    g = x->offer_taken ? NULL : x->offer;
    if (g) {
        nin = g->hi - g->lo;
        p = range_in(g, ss);
        if (p == (size_t)-1 || p == 0 ||
            pydb__nsegset_inline_bytes(ss, p, nin) + g->out.n >
                NIDX_INLINE_TOTAL) {
            stale = g;   /* another handle's commit changed the set */
            x->offer = NULL;
            g = NULL;
        } else {
            x->offer_taken = 1;
        }
    }
    pthread_mutex_unlock(&x->mu);
    if (!g) goto cleanup;
    rc = pydb__nseg_open_inline(&mseg, x->manifest, gen, g->out.p, g->out.n,
                                err);
    if (rc == PYDB_OK) merged_nupd(mseg, g);
    if (rc == PYDB_OK && !(*out = set_replacing(ss, p, nin, mseg)))
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
    if (rc) {
        pydb__nseg_unref(mseg);
        pydb__nidx_offer_done(x, g, 0);
        goto cleanup;
    }
    *taken = g;
cleanup:
    merge_free(stale);
    return rc;
}

void pydb__nidx_offer_done(nidx *x, nidx_merge *m, int published)
{
    if (!m) return;
    pthread_mutex_lock(&x->mu);
    PYDB_ASSERT(x->offer == m && x->offer_taken);
    x->offer_taken = 0;
    if (published) {
        x->offer = NULL;
        x->offer_dropped += m->dropped;
    }
    pthread_mutex_unlock(&x->mu);
    if (published) merge_free(m);
}

/* Files of the directory: segment files and temporaries, those no
 * set names (cur, the MANIFEST on disk), and their bytes.  Temporaries
 * of live processes (a merge being written) are counted as files, not as
 * unused; the segment of a commit in flight counts as unused until its
 * commit names it. */
static void scan_files(nidx *x, const nidx_segset *cur, int64_t *files,
                       int64_t *unused, int64_t *unused_bytes)
{
    uint8_t *data = NULL;
    nidx_manifest m;
    pydb_error e;
    DIR *d;
    struct dirent *de;

    memset(&m, 0, sizeof m);
    if (pydb__nman_read(&m, &data, x->manifest, 0, &e) != PYDB_OK)
        memset(&m, 0, sizeof m);
    d = opendir(x->dir);
    while (d && (de = readdir(d)) != NULL) {
        uint64_t g;
        int used = 0;
        char path[1300];   /* dir (1024) + "/" + a d_name (256) */
        struct stat sb;
        if (pydb__nidx_temp_pid(de->d_name) > 0) {
            (*files)++;
            snprintf(path, sizeof path, "%s/%s", x->dir, de->d_name);
            if (pydb__nidx_temp_dead(de->d_name) && stat(path, &sb) == 0) {
                (*unused)++;
                *unused_bytes += (int64_t)sb.st_size;
            }
            continue;
        }
        if (!pydb__nseg_name_gen(de->d_name, &g)) continue;
        (*files)++;
        for (size_t i = 0; i < cur->n && !used; i++)
            used = cur->v[i]->gen == g && !cur->v[i]->inl;
        for (size_t i = 0; i < m.nsegs && !used; i++)
            used = m.segs[i].gen == g && !m.segs[i].inl;
        if (used) continue;
        pydb__nseg_path(path, sizeof path, x->dir, g);
        if (stat(path, &sb) == 0) {
            (*unused)++;
            *unused_bytes += (int64_t)sb.st_size;
        }
    }
    if (d) closedir(d);
    free(m.segs);
    free(data);
}

/* scan_files() for a collect step, reusing the last scan while the
 * directory is unchanged: a commit, a merge or a removal creates,
 * renames or unlinks a file in it, which moves its mtime; the segment
 * set's generation must be the same too.  A directory changed within
 * 20 ms of the scan is scanned again (its mtime comes from a coarse
 * clock: two changes in one tick share it), and any scan is redone
 * after a second (a merge temporary whose process died names no change).
 * Without this every step read the MANIFEST and the whole directory:
 * with cooperative collection, at every read that met garbage. */
static void scan_cached(nidx *x, const nidx_segset *cur, uint64_t g,
                        int64_t *files, int64_t *unused, int64_t *unused_bytes)
{
    struct stat sb;
    struct timespec now;
    int64_t mtime_ns = -1, now_ms = pydb__now_ms();
    if (stat(x->dir, &sb) == 0)
        mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    if (x->scan.valid && mtime_ns >= 0 && x->scan.gen == g &&
        x->scan.mtime_ns == mtime_ns && now_ms - x->scan.at_ms < 1000) {
        *files += x->scan.files;
        *unused += x->scan.unused;
        *unused_bytes += x->scan.unused_bytes;
        return;
    }
    x->scan.files = x->scan.unused = x->scan.unused_bytes = 0;
    scan_files(x, cur, &x->scan.files, &x->scan.unused,
               &x->scan.unused_bytes);
    clock_gettime(CLOCK_REALTIME, &now);
    x->scan.valid = mtime_ns >= 0 &&
        (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - mtime_ns > 20000000;
    x->scan.gen = g;
    x->scan.mtime_ns = mtime_ns;
    x->scan.at_ms = now_ms;
    *files += x->scan.files;
    *unused += x->scan.unused;
    *unused_bytes += x->scan.unused_bytes;
}

/* The oldest commit a registered reader reads (the latest when none is
 * behind; 0 without a usable header). */
static uint64_t oldest_reader(nidx *x)
{
    struct pydb_shm *shm = pydb__nidx_header(x);
    if (!shm || !pydb__shm_valid(shm)) return 0;
    return pydb__shm_oldest(shm, NULL);
}

/* Whether step 5 may remove something now: no reader is behind, or a
 * file this handle's merge unnamed is older than every reader. */
static int removable(nidx *x)
{
    uint64_t oldest;
    if (pydb__nidx_may_remove(pydb__nidx_header(x))) return 1;
    oldest = oldest_reader(x);
    for (size_t i = 0; i < x->ndrops; i++)
        if (x->drops[i].commit <= oldest) return 1;
    return 0;
}

/* Step 5: remove unnamed files that no reader pins (none is behind, or
 * the commit that unnamed the file is not newer than any reader's),
 * after a checkpoint (pydb__txn_settle: the log emptied durably -- a power cut
 * must not bring back an applied commit's log, whose replay would put
 * back a MANIFEST naming removed files).  *removed: files removed; *busy: the writer lock was
 * taken. */
static int remove_unused(nidx *x, pydb_db *db, int lock_ms,
                         int64_t *removed, int *busy, pydb_error *err)
{
    pydb_txn *t = NULL;
    nidx_segset *cur;
    uint64_t g;
    int rc;

    *busy = 0;
    rc = pydb__txn_begin_gc(&t, db, lock_ms, err);
    if (rc == PYDB_ELOCKED) {
        *busy = 1;
        return PYDB_OK;
    }
    if (rc) return rc;
    rc = pydb__nidx_refresh(x, 1, err);
    if (rc == PYDB_OK) rc = pydb__txn_settle(t, err);
    if (rc == PYDB_OK) {
        drop_ctx d = {x, oldest_reader(x)};
        cur = current(x, &g);
        pydb__nidx_collect_if(x->dir, pydb__nidx_header(x), cur,
                              removed, NULL, drop_may_go, &d);
        pydb__nsegset_unref(cur);
        drops_prune(x);
    }
    pydb_txn_abort(t);
    return rc;
}

/* Advance the merge in *slot while *units < cap: its keys, the write,
 * then (one more unit) the commit.  *more set while it is not published,
 * and after it (the inputs to remove). */
static int merge_run(nidx *x, pydb_db *db, nidx_merge **slot, int cap,
                     int lock_ms, int offer, int *units, int *more,
                     pydb_gc_report *rep, pydb_error *err)
{
    int rc, busy = 0;
    *more = 1;
    while (!(*slot)->written && *units < cap) {
        nidx_merge *m = *slot;
        rc = m->nord > 0 ? merge_key(m, err)
                         : merge_write(m, x, err);
        (*units)++;
        if (rc) {
            merge_drop(slot);   /* the index is as it was */
            return rc;
        }
    }
    if (!(*slot)->written || *units >= cap) return PYDB_OK;
    if (offer && offerable(*slot)) {
        /* published by the handle's next commit (pydb__nidx_offer_apply),
         * or by the collector once idle if none comes */
        offer_put(x, slot);
        *more = 0;
        return PYDB_OK;
    }
    (*units)++;
    /* after it: a busy lock, a merge dropped to start over, or the
     * inputs to remove (once no reader is behind) */
    return merge_commit(x, db, slot, lock_ms, &busy, rep, err);
}

/* Whether a merge of the base (segments 0..hi of cur) is due. */
static int base_wanted(const nidx_segset *cur, size_t hi, int idle)
{
    if (hi >= 2) return idle || base_due(cur, hi);
    return idle && cur->n == 1 && cur->v[0]->ntomb > 0;
}

int pydb__nidx_gc_collect(void *ctx, pydb_db *db, const pydb_gc_step *how,
                          int *more, pydb_gc_report *rep, pydb_error *err)
{
    nidx *x = ctx;
    int budget = how->budget, idle = how->idle, lock_ms = how->lock_ms;
    nidx_segset *cur = NULL;
    int64_t files = 0, unused = 0, ubytes = 0, removed = 0;
    uint64_t g;
    int rc = PYDB_OK, busy = 0, units = 0, pinned = 0, heavy = 0, m = 0;
    int offer, later;
    uint64_t live = 0;   /* bytes of the current set's segments */

    *more = 0;
    if (budget < 1) budget = 1;
    if (pthread_mutex_trylock(&x->gc_mu) != 0) {
        *more = 1;   /* another thread collects this index now */
        return PYDB_OK;
    }
    x->gc_free = pydb__nidx_gc_free;
    /* a merge offered to commits that did not come: committed here */
    offer = how->offer && !idle;
    if (offer_reclaim(x, !offer)) offer = 0;
    pthread_mutex_lock(&x->mu);
    rep->postings += x->offer_dropped;   /* those that came */
    x->offer_dropped = 0;
    pthread_mutex_unlock(&x->mu);
    if ((rc = pydb__nidx_refresh(x, 0, err))) goto cleanup;
    /* (c) unnamed files first: they cost disk, not lookups.  Removing
     * them takes a checkpoint first (remove_unused: four fsyncs, the log
     * emptied), so while commits go on the thread leaves them for its
     * idle pass (`later`) until they weigh NIDX_UNUSED_MIN bytes and
     * 1/NIDX_PIN_SHARE of the index; the log's own checkpoints come
     * every PYDB_WAL_CHECKPOINT bytes. */
    cur = current(x, &g);
    scan_cached(x, cur, g, &files, &unused, &ubytes);
    for (size_t i = 0; i < cur->n; i++) live += cur->v[i]->size;
    later = offer && !((uint64_t)ubytes >= NIDX_UNUSED_MIN &&
                       (uint64_t)ubytes * NIDX_PIN_SHARE > live);
    if (unused && !later && removable(x)) {
        rc = remove_unused(x, db, lock_ms, &removed, &busy, err);
        if (rc) goto cleanup;
        rep->segments += removed;
        units += (int)(removed < budget ? removed : budget);
        if (busy) *more = 1;
        if (removed) {
            files = unused = ubytes = 0;
            x->scan.valid = 0;
            scan_cached(x, cur, g, &files, &unused, &ubytes);
        }
    }
    /* Files left unused are pinned by a reader behind (or by another
     * process' merge).  While they are, no merge of the base starts:
     * each would leave another copy of the index (Firebird's stuck
     * OIT); tail merges go on while what is pinned weighs less than
     * 1/NIDX_PIN_SHARE of the index.  The merges under way go on.
     * Files left for later are not pinned. */
    pinned = unused > 0 && !(later && removable(x));
    if (pinned) heavy = (uint64_t)ubytes * NIDX_PIN_SHARE > live;
    /* (a) the tail, after the segments a merge of the base holds; none
     * while a finished one waits for a commit (its run stays as it is) */
    if (!x->minor && !heavy && !offered(x)) {
        size_t from = 1, lo;
        if (x->merge && range_in(x->merge, cur) == 0)
            from = x->merge->hi;
        lo = tail_start(cur, from, idle ? 2 : NIDX_TAIL_MIN);
        /* idle, without a merge of the base: merge the whole set now */
        if (lo < cur->n && !(idle && !x->merge)) {
            atomic_fetch_add(&cur->refs, 1);
            if ((rc = merge_begin(&x->minor, x, cur, lo, cur->n, err)))
                goto cleanup;
        }
    }
    if (x->minor) {
        rc = merge_run(x, db, &x->minor, x->merge ? budget / 2 + 1 : budget,
                       lock_ms, offer, &units, &m, rep, err);
        *more |= m;
        if (rc) goto cleanup;
        if (!x->minor) {   /* published: the set changed */
            pydb__nsegset_unref(cur);
            cur = current(x, &g);
        }
    }
    /* (b) the base: the oldest segment and those after it up to a tail
     * merge under way (idle: once that has ended, all of them) */
    if (!x->merge && !pinned && !(idle && x->minor)) {
        size_t hi = cur->n, p;
        if (x->minor && (p = range_in(x->minor, cur)) != (size_t)-1) hi = p;
        else if ((p = offer_at(x, cur)) != (size_t)-1) hi = p;
        if (base_wanted(cur, hi, idle)) {
            atomic_fetch_add(&cur->refs, 1);
            if ((rc = merge_begin(&x->merge, x, cur, 0, hi, err)))
                goto cleanup;
        }
    }
    if (x->merge) {
        if (units >= budget) units = budget - 1;   /* a share for it */
        rc = merge_run(x, db, &x->merge, budget, lock_ms, 0, &units, &m,
                       rep, err);
        *more |= m;
    }
cleanup:
    pydb__nsegset_unref(cur);
    pthread_mutex_unlock(&x->gc_mu);
    return rc;
}

/* ---- garbage() ---- */

int pydb__nidx_gc_garbage(void *ctx, pydb_db *db, struct pydb_index_stat *out,
                          pydb_error *err)
{
    nidx *x = ctx;
    nidx_segset *ss;
    nidx_cursor *cs = NULL, **ord = NULL;
    size_t nord = 0;
    uint64_t g;
    int64_t terms = 0, dead = 0, files = 0, unused = 0, ubytes = 0;
    int rc;

    (void)db;
    if ((rc = pydb__nidx_refresh(x, 0, err))) return rc;
    ss = current(x, &g);
    cs = calloc(ss->n ? ss->n : 1, sizeof *cs);
    ord = calloc(ss->n ? ss->n : 1, sizeof *ord);
    if (!cs || !ord) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    if ((rc = kway_start(cs, ord, &nord, ss, 0, ss->n, err)))
        goto cleanup;
    while (nord > 0) {
        size_t k = kway_group(ord, nord);
        terms++;
        for (size_t j = 0; j < k; j++) {
            uint64_t live;
            if (!ss->newer_tombs[ord[j]->idx]) continue;
            if ((rc = pydb__nidx_decode_live(NULL, ss, ord[j]->idx, ord[j],
                                             &live, err)))
                goto cleanup;
            dead += (int64_t)(ord[j]->count - live);
        }
        if ((rc = kway_advance(ord, &nord, k, err))) goto cleanup;
    }
    scan_files(x, ss, &files, &unused, &ubytes);
    out->present = 1;
    out->segments += (int64_t)ss->n;
    out->terms += terms;
    out->dead_postings += dead;
    for (size_t i = 0; i < ss->n; i++) {
        out->postings += (int64_t)ss->v[i]->nposts;
        out->tombstones += (int64_t)ss->v[i]->ntomb;
        out->bytes += (int64_t)ss->v[i]->size;
    }
    out->files += files;
    out->unused_files += unused;
    out->unused_bytes += ubytes;
cleanup:
    if (cs)
        for (size_t i = 0; i < ss->n; i++) free(cs[i].key);
    free(cs);
    free(ord);
    pydb__nsegset_unref(ss);
    return rc;
}
