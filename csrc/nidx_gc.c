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
 *   1. choose: the whole current set when it has more than one segment
 *      or any tombstone (a single segment without tombstones is clean);
 *      the set is immutable (a reference keeps its files mapped), so the
 *      merge needs no lock;
 *   2. merge, resumable: a k-way merge of the set's dictionaries, one
 *      key per unit of `budget` -- the key's live postings (those no
 *      newer segment of the set tombstones) are decoded from every
 *      segment that has it and encoded once; a key left with none is
 *      dropped.  The merged segment has no tombstones: it is the oldest
 *      of any set it will join, so none of them is needed any more.  The
 *      cursors, the encoder and the output buffer live in x->merge
 *      between calls;
 *   3. write: the bytes go to merge-PID-N.tmp in the index directory,
 *      fsynced (one unit).  ENOSPC/EIO: the file is removed, the merge
 *      dropped, the error returned; the index is as it was;
 *   4. commit, under the writer lock (pydb_txn_begin with timeout 0: a
 *      busy lock returns *more = 1, the next call tries again): the
 *      MANIFEST is read again; if the merge's input set is no longer a
 *      prefix of it (a rebuild, another process's collection) the merge
 *      is dropped and starts over.  Else the merged file is renamed to
 *      seg-G.pds (G above every generation in use, chosen under the lock
 *      as prepare chooses its own), the directory fsynced, and the new
 *      MANIFEST -- G, then the segments commits added after the input
 *      set, whose tombstones still apply to it -- goes through a
 *      transaction of whole files only (pydb_txn_put_file), its
 *      generation published with the commit's state
 *      (pydb__txn_set_index_gen), exactly as a commit's MANIFEST.  The
 *      new set is installed in the handle after the commit.  Segment
 *      lines are in age order; generations are names, ascending except
 *      that a merged segment's may be above those after it;
 *   5. remove: under the writer lock (a prepare's new file is unnamed
 *      until its commit), segment files no set names, once no registered
 *      reader reads an older commit (pydb__nidx_may_remove), and merge
 *      temporaries of dead processes.
 *
 * Crash safety: before the commit point the MANIFEST on disk is the old
 * one and the merge's files are unnamed (a temporary, or a seg-G.pds no
 * MANIFEST names): step 5 removes them later.  After it, recovery
 * replays the new MANIFEST.  A kill at any point leaves one of the two.
 *
 * Units: one key merged, one file written, one file removed; the commit
 * (a rename, two fsyncs, a log write) is one unit too.  A call does at
 * most `budget` of them (at least one).
 *
 * Depends on: nidx_handle.h (sets, refresh, install, collect_n),
 * nidx_seg.h (cursors, decoding, the encoder), nidx_manifest.h,
 * transactions (pydb.h, pydb_int.h), gc.h (pydb__gc_met), shm.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gc.h"
#include "nidx_handle.h"
#include "shm.h"

/* A merge in progress (x->merge, under x->gc_mu). */
typedef struct nidx_merge {
    nidx_segset *in;         /* the input set (a reference)               */
    nidx_cursor *cs;         /* one per input segment                    */
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
    int written;             /* the temporary file is complete           */
    char tmp[1100];
} nidx_merge;

static atomic_ulong merge_seq;   /* names of temporary files */

void pydb__nidx_met(nidx *x)
{
    pydb_db *db = __atomic_load_n(&x->db, __ATOMIC_ACQUIRE);
    atomic_fetch_add(&x->met, 1);
    if (db) pydb__gc_met(db);
}

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
    if (g->tmp[0]) unlink(g->tmp);
    pydb__nsegset_unref(g->in);
    free(g);
}

void pydb__nidx_gc_free(nidx *x)
{
    merge_free(x->merge);
    x->merge = NULL;
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

/* Position cs[i] at the first key of every segment of ss and order the
 * valid ones into ord. */
static int kway_start(nidx_cursor *cs, nidx_cursor **ord, size_t *nord,
                      const nidx_segset *ss, pydb_error *err)
{
    int rc;
    *nord = 0;
    for (size_t i = 0; i < ss->n; i++) {
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

/* Does ss hold garbage a merge removes? */
static int wants_merge(const nidx_segset *ss)
{
    if (ss->n > 1) return 1;
    return ss->n == 1 && ss->v[0]->ntomb > 0;
}

static int merge_begin(nidx_merge **out, nidx *x, nidx_segset *ss,
                       pydb_error *err)
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
    g->cs = calloc(ss->n ? ss->n : 1, sizeof *g->cs);
    g->ord = calloc(ss->n ? ss->n : 1, sizeof *g->ord);
    if (!g->cs || !g->ord) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto fail;
    }
    for (size_t i = 0; i < ss->n; i++) nterms += ss->v[i]->nterms;
    if ((rc = pydb__nseg_enc_begin(&g->enc, &g->out, nterms, err))) goto fail;
    g->enc_open = 1;
    if ((rc = kway_start(g->cs, g->ord, &g->nord, ss, err))) goto fail;
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

/* The merge is complete: finish the bytes, write and fsync the
 * temporary file.  On failure the file is removed. */
static int merge_write(nidx_merge *g, nidx *x, pydb_error *err)
{
    int rc;
    if ((rc = pydb__nseg_enc_finish(&g->enc, NULL, 0, err))) return rc;
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

/* Is `in` a prefix of `cur` (same segments, same order)? */
static int is_prefix(const nidx_segset *in, const nidx_segset *cur)
{
    if (in->n > cur->n) return 0;
    for (size_t i = 0; i < in->n; i++)
        if (in->v[i]->gen != cur->v[i]->gen) return 0;
    return 1;
}

/* Step 4: under the writer lock, publish the merged segment.  *busy:
 * the lock was taken (try again later).  *dropped_merge: the merge no
 * longer applies and was dropped (start again). */
static int merge_commit(nidx *x, pydb_db *db, int *busy,
                        pydb_gc_report *rep, pydb_error *err)
{
    nidx_merge *g = x->merge;
    nidx_segset *cur = NULL, *ns = NULL;
    nidx_seg *mseg = NULL;
    pydb_txn *t = NULL;
    pydb_buf man = {0};
    uint64_t *gens = NULL, gen, top, cur_gen;
    char path[1100];
    size_t ngens;
    int rc;

    *busy = 0;
    rc = pydb_txn_begin(&t, db, 0, err);
    if (rc == PYDB_ELOCKED) {
        *busy = 1;
        return PYDB_OK;
    }
    if (rc) return rc;
    if ((rc = pydb__nidx_refresh(x, 1, err))) goto cleanup;
    cur = current(x, &cur_gen);
    if (!is_prefix(g->in, cur) || cur->cfg != g->in->cfg) {
        /* a rebuild, or another handle collected first: start over */
        pydb__nidx_gc_free(x);
        goto cleanup;
    }
    top = pydb__nidx_collect_n(x->dir, pydb__nidx_header(x), cur, NULL, NULL);
    gen = top > cur_gen ? top : cur_gen;
    for (size_t i = 0; i < cur->n; i++)
        if (cur->v[i]->gen > gen) gen = cur->v[i]->gen;
    gen++;
    pydb__nseg_path(path, sizeof path, x->dir, gen);
    if (pydb__vfs->rename(g->tmp, path) != 0) {
        rc = PYDB_OSERROR(err, errno, g->tmp, -1, "cannot rename: %s",
                          strerror(errno));
        goto cleanup;
    }
    g->tmp[0] = '\0';   /* now an unnamed seg-G.pds until the commit */
    if ((rc = pydb__fsync_dir(x->dir, err))) goto cleanup;
    if ((rc = pydb__nseg_open(&mseg, path, gen, err))) goto cleanup;
    ngens = 1 + cur->n - g->in->n;
    gens = malloc(ngens * sizeof *gens);
    ns = pydb__nsegset_new(ngens);
    if (!gens || !ns) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    gens[0] = gen;
    ns->v[0] = mseg;
    mseg = NULL;
    for (size_t i = g->in->n; i < cur->n; i++) {
        size_t j = 1 + i - g->in->n;
        gens[j] = cur->v[i]->gen;
        ns->v[j] = cur->v[i];
        atomic_fetch_add(&cur->v[i]->refs, 1);
    }
    ns->cfg = cur->cfg;
    atomic_fetch_add(&ns->cfg->refs, 1);
    pydb__nsegset_finish(ns);
    if ((rc = pydb__nman_encode(&man, gen, &cur->cfg->rules,
                                cur->cfg->fst_text, cur->cfg->fst_len,
                                cur->cfg->stw_text, cur->cfg->stw_len, gens,
                                ngens, err)))
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
    pydb__nidx_gc_free(x);
cleanup:
    if (t) pydb_txn_abort(t);
    if (rc && x->merge) pydb__nidx_gc_free(x);   /* start over next time */
    pydb__nseg_unref(mseg);
    pydb__nsegset_unref(ns);
    pydb__nsegset_unref(cur);
    free(gens);
    free(man.p);
    return rc;
}

/* Files of the directory: segment files and merge temporaries, those no
 * set names (cur, the MANIFEST on disk), and their bytes.  Temporaries
 * of live processes (a merge being written) are counted as files, not as
 * unused; the segment of a commit in flight counts as unused until its
 * commit names it. */
static void scan_files(nidx *x, const nidx_segset *cur, int64_t *files,
                       int64_t *unused, int64_t *unused_bytes)
{
    uint8_t *data = NULL;
    size_t len;
    nidx_manifest m;
    pydb_error e;
    DIR *d;
    struct dirent *de;

    memset(&m, 0, sizeof m);
    if (pydb__read_file(x->manifest, &data, &len, &e) != PYDB_OK ||
        pydb__nman_parse(&m, data, len, x->manifest, &e) != PYDB_OK)
        memset(&m, 0, sizeof m);
    d = opendir(x->dir);
    while (d && (de = readdir(d)) != NULL) {
        unsigned long long g;
        int pid, used = 0;
        unsigned long n;
        char path[1300];   /* dir (1024) + "/" + a d_name (256) */
        struct stat sb;
        if (sscanf(de->d_name, "merge-%d-%lu.tmp", &pid, &n) == 2) {
            (*files)++;
            snprintf(path, sizeof path, "%s/%s", x->dir, de->d_name);
            if (kill(pid, 0) != 0 && errno == ESRCH &&
                stat(path, &sb) == 0) {
                (*unused)++;
                *unused_bytes += (int64_t)sb.st_size;
            }
            continue;
        }
        if (strlen(de->d_name) != 16 ||
            sscanf(de->d_name, "seg-%8llu.pds", &g) != 1)
            continue;
        (*files)++;
        for (size_t i = 0; i < cur->n && !used; i++) used = cur->v[i]->gen == g;
        for (size_t i = 0; i < m.nsegs && !used; i++) used = m.segs[i] == g;
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

/* Step 5: remove unnamed files if no reader pins them.  *removed: files
 * removed; *pinned: unused files left because a reader is behind. */
static int remove_unused(nidx *x, pydb_db *db, int64_t *removed, int *busy,
                         pydb_error *err)
{
    pydb_txn *t = NULL;
    nidx_segset *cur;
    uint64_t g;
    int rc;

    *busy = 0;
    rc = pydb_txn_begin(&t, db, 0, err);
    if (rc == PYDB_ELOCKED) {
        *busy = 1;
        return PYDB_OK;
    }
    if (rc) return rc;
    rc = pydb__nidx_refresh(x, 1, err);
    if (rc == PYDB_OK) {
        cur = current(x, &g);
        pydb__nidx_collect_n(x->dir, pydb__nidx_header(x), cur, removed,
                             NULL);
        pydb__nsegset_unref(cur);
    }
    pydb_txn_abort(t);
    return rc;
}

int pydb__nidx_gc_collect(void *ctx, pydb_db *db, int budget, int *more,
                          pydb_gc_report *rep, pydb_error *err)
{
    nidx *x = ctx;
    nidx_segset *cur = NULL;
    int64_t files = 0, unused = 0, ubytes = 0, removed = 0;
    uint64_t g;
    int rc = PYDB_OK, busy = 0, units = 0;

    *more = 0;
    if (budget < 1) budget = 1;
    if (pthread_mutex_trylock(&x->gc_mu) != 0) {
        *more = 1;   /* another thread collects this index now */
        return PYDB_OK;
    }
    if ((rc = pydb__nidx_refresh(x, 0, err))) goto cleanup;
    /* (b) unnamed files first: they cost disk, not lookups */
    cur = current(x, &g);
    scan_files(x, cur, &files, &unused, &ubytes);
    if (unused && pydb__nidx_may_remove(pydb__nidx_header(x))) {
        if ((rc = remove_unused(x, db, &removed, &busy, err))) goto cleanup;
        rep->segments += removed;
        units += (int)(removed < budget ? removed : budget);
        if (busy) {
            *more = 1;
            goto cleanup;
        }
    }
    /* (a) the merge */
    if (!x->merge) {
        if (!wants_merge(cur)) goto cleanup;
        atomic_fetch_add(&cur->refs, 1);
        if ((rc = merge_begin(&x->merge, x, cur, err))) goto cleanup;
    }
    while (!x->merge->written && units < budget) {
        nidx_merge *m = x->merge;
        if (m->nord > 0) {
            rc = merge_key(m, err);
        } else {
            rc = merge_write(m, x, err);
        }
        units++;
        if (rc) {
            pydb__nidx_gc_free(x);   /* the index is as it was */
            goto cleanup;
        }
    }
    if (!x->merge->written || units >= budget) {
        *more = 1;
        goto cleanup;
    }
    rc = merge_commit(x, db, &busy, rep, err);
    /* more: a busy lock, a merge dropped to start over, or the inputs
     * to remove (once no reader is behind) */
    *more = 1;
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
    if ((rc = kway_start(cs, ord, &nord, ss, err))) goto cleanup;
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
