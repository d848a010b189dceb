/*
 * nidx_handle.c - the native index handle (nidx_handle.h): segment sets
 * and dead postings, open/close, following newer MANIFESTs, and the read
 * operations of pydb_index (terms with a k-way merge over the segments,
 * postings, pinned views).
 *
 * Depends on: nidx_seg.h (segments, cursors), nidx_manifest.h (reading
 * the MANIFEST), the FST parser and stop words (nidx_int.h), shm.h (the
 * reader table, while the MANIFEST is read and its segments opened),
 * fork.h (the open handles' locks at a fork).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fork.h"
#include "gc.h"
#include "nidx_handle.h"
#include "shm.h"

void pydb__ncfg_unref(nidx_cfg *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    pydb_fst_free(c->fst);
    pydb__stopwords_free(&c->sw);
    free(c->fst_text);
    free(c->stw_text);
    free(c);
}

/* The configuration of manifest m (path: messages): `same` (a new
 * reference) when it agrees with m, else a new one. */
static int cfg_of(nidx_cfg **out, const nidx_manifest *m, nidx_cfg *same,
                  const char *path, pydb_error *err)
{
    nidx_cfg *c;
    int rc;

    *out = NULL;
    if (same && memcmp(&same->rules, &m->rules, sizeof m->rules) == 0 &&
        same->fst_len == m->fst_len && same->stw_len == m->stw_len &&
        memcmp(same->fst_text, m->fst, m->fst_len) == 0 &&
        memcmp(same->stw_text, m->stw, m->stw_len) == 0) {
        atomic_fetch_add(&same->refs, 1);
        *out = same;
        return PYDB_OK;
    }
    c = calloc(1, sizeof *c);
    if (!c) return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
    atomic_init(&c->refs, 1);
    c->rules = m->rules;
    c->fst_text = malloc(m->fst_len + 1);
    c->stw_text = malloc(m->stw_len + 1);
    if (!c->fst_text || !c->stw_text) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
        goto fail;
    }
    memcpy(c->fst_text, m->fst, m->fst_len);
    c->fst_len = m->fst_len;
    memcpy(c->stw_text, m->stw, m->stw_len);
    c->stw_len = m->stw_len;
    if ((rc = pydb_fst_parse(&c->fst, c->fst_text, c->fst_len, path, err)))
        goto fail;
    if ((rc = pydb__stopwords_parse(&c->sw, &c->rules, c->stw_text,
                                    c->stw_len, err)))
        goto fail;
    *out = c;
    return PYDB_OK;
fail:
    pydb__ncfg_unref(c);
    return rc;
}

void pydb__nsegset_unref(nidx_segset *ss)
{
    if (!ss || atomic_fetch_sub(&ss->refs, 1) != 1) return;
    pydb__ncfg_unref(ss->cfg);
    for (size_t i = 0; i < ss->n; i++) pydb__nseg_unref(ss->v[i]);
    free(ss->v);
    free(ss->newer_tombs);
    free(ss->newest);
    free(ss);
}

nidx_segset *pydb__nsegset_new(size_t n)
{
    nidx_segset *ss = calloc(1, sizeof *ss);
    if (!ss) return NULL;
    ss->v = calloc(n ? n : 1, sizeof *ss->v);
    ss->newer_tombs = calloc(n ? n : 1, 1);
    if (!ss->v || !ss->newer_tombs) {
        free(ss->v);
        free(ss->newer_tombs);
        free(ss);
        return NULL;
    }
    atomic_init(&ss->refs, 1);
    ss->n = n;
    return ss;
}

size_t pydb__nsegset_inline_bytes(const nidx_segset *ss, size_t lo,
                                  size_t n)
{
    size_t b = 0;
    for (size_t i = 0; i < ss->n; i++)
        if (ss->v[i]->inl && (i < lo || i >= lo + n)) b += ss->v[i]->size;
    return b;
}

/* Flags and the newest-tombstone table of the list.  A table that cannot
 * be allocated is left NULL (is_dead then searches the tombstones). */
void pydb__nsegset_finish(nidx_segset *ss)
{
    int any = 0;
    int32_t maxm = -1;
    uint64_t bytes = 0;
    for (size_t i = ss->n; i-- > 0;) {
        bytes += ss->v[i]->size;
        ss->newer_tombs[i] = (uint8_t)any;
        if (ss->v[i]->ntomb) {
            any = 1;
            int32_t m = pydb__nseg_tomb(ss->v[i], ss->v[i]->ntomb - 1);
            if (m > maxm) maxm = m;
        }
    }
    if (!any || ss->n < 2 || maxm < 0 ||
        (uint64_t)maxm >= bytes + NIDX_NEWEST_SLACK)
        return;   /* (nidx_handle.h: the table's bound) */
    ss->newest = calloc((size_t)maxm + 1, sizeof *ss->newest);
    if (!ss->newest) return;
    ss->newest_n = (uint32_t)maxm + 1;
    for (size_t j = 1; j < ss->n; j++)   /* oldest first: newest wins */
        for (uint32_t k = 0; k < ss->v[j]->ntomb; k++) {
            int32_t m = pydb__nseg_tomb(ss->v[j], k);
            if (m >= 0 && m <= maxm) ss->newest[m] = (uint32_t)j + 1;
        }
}

static int is_dead(const nidx_segset *ss, size_t i, int32_t mfn)
{
    if (!ss->newer_tombs[i]) return 0;
    if (ss->newest)
        return mfn >= 0 && (uint32_t)mfn < ss->newest_n &&
               ss->newest[mfn] > i + 1;
    for (size_t j = i + 1; j < ss->n; j++)
        if (ss->v[j]->ntomb && pydb__nseg_has_tomb(ss->v[j], mfn)) return 1;
    return 0;
}

void pydb__nidx_met(nidx *x)
{
    pydb_db *db;
    atomic_fetch_add(&x->met, 1);
    if (!__atomic_load_n(&x->db, __ATOMIC_ACQUIRE)) return;   /* read-only */
    pthread_rwlock_rdlock(&x->db_lock);
    db = __atomic_load_n(&x->db, __ATOMIC_ACQUIRE);
    if (db) pydb__gc_met(db);
    pthread_rwlock_unlock(&x->db_lock);
}

typedef struct dead_in {
    const nidx_segset *ss;
    size_t i;
} dead_in;

static int dead_after(const void *ctx, int32_t mfn)
{
    const dead_in *d = ctx;
    return is_dead(d->ss, d->i, mfn);
}

int pydb__nidx_decode_live(pydb_postings *out, const nidx_segset *ss,
                           size_t i, const nidx_cursor *c, uint64_t *live,
                           pydb_error *err)
{
    return pydb__nidx_decode_live_in(out, ss, i, c, NULL, live, err);
}

/* Who says whether segment i's postings of an MFN are dead: nobody
 * when no newer segment has tombstones. */
static nidx_dead_fn dead_fn(const nidx_segset *ss, size_t i)
{
    return ss->newer_tombs[i] ? dead_after : NULL;
}

int pydb__nidx_decode_live_in(pydb_postings *out, const nidx_segset *ss,
                              size_t i, const nidx_cursor *c,
                              const pydb_mfn_bits *keep, uint64_t *live,
                              pydb_error *err)
{
    dead_in d = {ss, i};
    PYDB_ASSERT(i < ss->n && c->s == ss->v[i]);
    return pydb__nseg_decode_in(out, c, dead_fn(ss, i), &d, keep, live, err);
}

/* <base>.pdx for a database path ("x/cds", "x/cds.mst", "x/CDS.XRF"; the
 * base as pydb_open() takes it, pydb__db_base), the folder as it exists
 * in any letter case, else with ".pdx". */
int pydb__nidx_dir(char *out, size_t cap, const char *db_path,
                   pydb_error *err)
{
    char base[1024];
    size_t l = strlen(db_path);

    if (l < sizeof base) {
        pydb__db_base(base, sizeof base, db_path);
        l = strlen(base);
    }
    if (l == 0 || l + 5 >= cap || l >= sizeof base)
        return PYDB_ERROR(err, PYDB_EINVAL, db_path, -1,
                          "database path too long or empty");
    pydb__find_own(out, cap, base, "pdx", 1);   /* else out = <base>.pdx */
    return PYDB_OK;
}

nidx_segset *pydb__nidx_acquire(nidx *x)
{
    nidx_segset *ss;
    pthread_mutex_lock(&x->mu);
    ss = x->cur;
    atomic_fetch_add(&ss->refs, 1);
    pthread_mutex_unlock(&x->mu);
    return ss;
}

/* Where terms_in() puts the postings of the keys it walks (or NULL). */
typedef struct postings_sink {
    pydb_postings *out;
    pydb_runs *runs;
} postings_sink;

/* The live postings of cursor c's key (segment ss->v[c->idx]) as one run. */
static int sink_key(postings_sink *sink, nidx_segset *ss, nidx_cursor *c,
                    pydb_error *err)
{
    size_t start = sink->out->n;
    uint64_t live;
    int rc = pydb__nidx_decode_live(sink->out, ss, c->idx, c, &live, err);
    if (rc == PYDB_OK && sink->out->n > start)
        rc = pydb__runs_push(sink->runs, start, err);
    return rc;
}

/* Walk the keys >= start that begin with prefix, in order, merged over
 * the segments of ss: fn (may be NULL) gets each key with its live
 * posting count; sink (may be NULL) gets its postings.  skipped (may be
 * NULL): incremented by the dead postings decoded and left out. */
static int terms_in(const char *dir, nidx_segset *ss, const uint8_t *prefix,
                    size_t prefix_len, const uint8_t *start,
                    size_t start_len, pydb_term_fn fn, void *ctx,
                    postings_sink *sink, uint64_t *skipped, pydb_error *err)
{
    nidx_cursor *cs = calloc(ss->n ? ss->n : 1, sizeof *cs);
    const uint8_t *from = prefix;
    size_t from_len = prefix_len, nord = 0;
    nidx_cursor **ord = NULL;
    int rc = PYDB_OK;

    if (!cs) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, dir, -1, "cannot allocate");
        goto cleanup;
    }
    if (start && pydb__keycmp(start, start_len, prefix, prefix_len) > 0) {
        from = start;
        from_len = start_len;
    }
    for (size_t i = 0; i < ss->n; i++) {
        cs[i].s = ss->v[i];
        cs[i].idx = i;
        if ((rc = pydb__ncur_seek(&cs[i], from, from_len, err))) goto cleanup;
    }
    if (ss->n == 1 && !ss->newer_tombs[0]) {   /* one segment: no merge */
        nidx_cursor *c = &cs[0];
        while (c->valid) {
            if (c->klen < prefix_len ||
                (prefix_len && memcmp(c->key, prefix, prefix_len) != 0))
                break;
            if (sink && ((rc = pydb__nowait_spend(c->count)) ||
                         (rc = sink_key(sink, ss, c, err))))
                goto cleanup;
            if (fn && fn(ctx, c->key, c->klen, c->count)) break;
            if ((rc = pydb__ncur_next(c, err))) goto cleanup;
        }
        goto cleanup;
    }
    /* k-way merge: the valid cursors kept sorted by their current key, so
     * each key costs about one comparison per cursor that shares it */
    ord = malloc(ss->n * sizeof *ord);
    if (!ord) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, dir, -1, "cannot allocate");
        goto cleanup;
    }
    for (size_t i = 0; i < ss->n; i++) {
        if (!cs[i].valid) continue;
        size_t p = nord;
        while (p > 0 && pydb__keycmp(cs[i].key, cs[i].klen, ord[p - 1]->key,
                                     ord[p - 1]->klen) < 0) {
            ord[p] = ord[p - 1];
            p--;
        }
        ord[p] = &cs[i];
        nord++;
    }
    while (nord > 0) {
        nidx_cursor *min = ord[0];
        uint64_t total = 0;
        size_t k = 1;
        if (min->klen < prefix_len ||
            (prefix_len && memcmp(min->key, prefix, prefix_len) != 0))
            break;
        while (k < nord && pydb__keycmp(ord[k]->key, ord[k]->klen, min->key,
                                        min->klen) == 0)
            k++;
        for (size_t j = 0; j < k; j++) {
            nidx_cursor *c = ord[j];
            if ((sink || (fn && ss->newer_tombs[c->idx])) &&
                (rc = pydb__nowait_spend(c->count)))
                goto cleanup;
            if (sink && (rc = sink_key(sink, ss, c, err))) goto cleanup;
            if (!fn) continue;   /* postings only: no counts */
            if (ss->newer_tombs[c->idx]) {
                uint64_t live;
                if ((rc = pydb__nidx_decode_live(NULL, ss, c->idx, c, &live,
                                                 err)))
                    goto cleanup;
                total += live;
                if (skipped) *skipped += c->count - live;
            } else {
                total += c->count;
            }
        }
        if (fn && total > 0 && fn(ctx, min->key, min->klen, total)) break;
        /* advance the k cursors on this key and put them back in order */
        nidx_cursor *moved[k];
        size_t nm = 0;
        for (size_t j = 0; j < k; j++) {
            if ((rc = pydb__ncur_next(ord[j], err))) goto cleanup;
            if (ord[j]->valid) moved[nm++] = ord[j];
        }
        memmove(ord, ord + k, (nord - k) * sizeof *ord);
        nord -= k;
        for (size_t j = 0; j < nm; j++) {
            nidx_cursor *c = moved[j];
            size_t p = 0;
            while (p < nord && pydb__keycmp(ord[p]->key, ord[p]->klen,
                                            c->key, c->klen) < 0)
                p++;
            memmove(ord + p + 1, ord + p, (nord - p) * sizeof *ord);
            ord[p] = c;
            nord++;
        }
    }
cleanup:
    if (cs)
        for (size_t i = 0; i < ss->n; i++) free(cs[i].key);
    free(cs);
    free(ord);
    return rc;
}

static int nidx_terms(pydb_index *ix, const uint8_t *prefix,
                      size_t prefix_len, const uint8_t *start,
                      size_t start_len, pydb_term_fn fn, void *ctx,
                      pydb_error *err)
{
    nidx *x = (nidx *)ix;
    uint64_t skipped = 0;
    int rc = pydb__nidx_refresh(x, 0, err);
    if (rc) return rc;
    nidx_segset *ss = pydb__nidx_acquire(x);
    rc = terms_in(x->dir, ss, prefix, prefix_len, start, start_len, fn, ctx,
                  NULL, &skipped, err);
    pydb__nsegset_unref(ss);
    if (skipped) pydb__nidx_met(x);
    return rc;
}

/* Where segment i of a set holds a key: its list (a copy of the
 * cursor's; c.s NULL where it holds none), for a dense list its bits
 * (pydb__nseg_dense_bits), for another its MFNs' run [from, to) in
 * mfn_bits_in's array. */
typedef struct key_part {
    nidx_cursor c;
    int dense;
    uint64_t lo, nwords;
    const uint8_t *words;
    size_t from, to;
} key_part;

/* Key's list in each segment of ss: *out (calloc'ed, ss->n parts, the
 * caller's to free), *total the postings of all, dead ones included. */
static int key_parts(key_part **out, uint64_t *total, nidx_segset *ss,
                     const uint8_t *key, size_t len, pydb_error *err)
{
    key_part *part = calloc(ss->n ? ss->n : 1, sizeof *part);
    nidx_cursor c;
    int rc = PYDB_OK;

    *out = NULL;
    *total = 0;
    if (!part) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    memset(&c, 0, sizeof c);
    for (size_t i = 0; i < ss->n; i++) {
        c.s = ss->v[i];
        if ((rc = pydb__ncur_seek(&c, key, len, err))) break;
        if (!c.valid || pydb__keycmp(c.key, c.klen, key, len) != 0) continue;
        part[i].c = c;
        part[i].c.key = NULL;   /* (the key is c's, freed below) */
        *total += c.count;
    }
    free(c.key);
    if (rc) free(part);
    else *out = part;
    return rc;
}

/* The live postings of key in ss, or only those of the MFNs in *keep
 * when keep is given. */
static int postings_in(pydb_postings *out, nidx_segset *ss,
                       const uint8_t *key, size_t len,
                       const pydb_mfn_bits *keep, uint64_t *skipped,
                       pydb_error *err)
{
    key_part *part = NULL;
    size_t *runs = NULL, parts = 0;
    uint64_t total;
    int rc;

    /* Each segment's live postings of the key are one sorted run; the
     * runs are merged (pydb__postings_merge_runs), not sorted again. */
    if ((rc = key_parts(&part, &total, ss, key, len, err))) return rc;
    runs = malloc((ss->n + 1) * sizeof *runs);
    if (!runs) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, NULL, -1,
                        "no memory for %zu posting runs", ss->n);
        goto cleanup;
    }
    for (size_t i = 0; i < ss->n; i++) {
        const nidx_cursor *c = &part[i].c;
        uint64_t live;
        size_t start = out->n;
        if (!c->s) continue;
        if ((rc = pydb__nowait_spend(c->count)) ||
            (rc = pydb__nidx_decode_live_in(out, ss, i, c, keep, &live,
                                            err)))
            goto cleanup;
        if (out->n > start) runs[parts++] = start;
        /* dead postings left out (with keep: a lower bound, unknown) */
        if (skipped && !keep) *skipped += c->count - live;
    }
    if (parts > 1) rc = pydb__postings_merge_runs(out, runs, parts, err);
cleanup:
    free(runs);
    free(part);
    return rc;
}

/* The records of the live postings of the lists in part (key_parts; only
 * those in *keep when given), appended to out ascending and distinct:
 * each segment's are one sorted run, and several go through
 * pydb__mfns_distinct. */
static int parts_mfns(pydb_mfns *out, nidx_segset *ss, const key_part *part,
                      const pydb_mfn_bits *keep, pydb_error *err)
{
    size_t start = out->n, parts = 0, n;
    int rc = PYDB_OK;

    for (size_t i = 0; i < ss->n; i++) {
        uint64_t live;   /* a view reports no dead postings it met */
        size_t before = out->n;
        dead_in d = {ss, i};
        if (!part[i].c.s) continue;
        if ((rc = pydb__nowait_spend(part[i].c.count)) ||
            (rc = pydb__nseg_mfns_in(out, &part[i].c, dead_fn(ss, i), &d,
                                     keep, &live, err)))
            return rc;
        parts += out->n > before;
    }
    n = out->n - start;
    if (parts > 1 && !(rc = pydb__mfns_distinct(out->v + start, &n, err)))
        out->n = start + n;
    return rc;
}

/* The records of key's live postings in ss (only those in *keep when
 * given), appended to out ascending and distinct (parts_mfns). */
static int mfns_in(pydb_mfns *out, nidx_segset *ss, const uint8_t *key,
                   size_t len, const pydb_mfn_bits *keep, pydb_error *err)
{
    key_part *part;
    uint64_t total;
    int rc = key_parts(&part, &total, ss, key, len, err);
    if (rc) return rc;
    rc = parts_mfns(out, ss, part, keep, err);
    free(part);
    return rc;
}

/* The postings of key in every segment of ss, dead ones included. */
static int count_in(uint64_t *n, nidx_segset *ss, const uint8_t *key,
                    size_t len, pydb_error *err)
{
    key_part *part;
    int rc = key_parts(&part, n, ss, key, len, err);
    free(part);
    return rc;
}

static int nidx_postings(pydb_postings *out, pydb_index *ix,
                         const uint8_t *key, size_t len, pydb_error *err)
{
    uint64_t skipped = 0;
    int rc = pydb__nidx_refresh((nidx *)ix, 0, err);
    if (rc) return rc;
    nidx_segset *ss = pydb__nidx_acquire((nidx *)ix);
    rc = postings_in(out, ss, key, len, NULL, &skipped, err);
    pydb__nsegset_unref(ss);
    if (skipped) pydb__nidx_met((nidx *)ix);
    return rc;
}

static int nidx_key(pydb_index *ix, const uint8_t *term, size_t len,
                    uint8_t *out, size_t cap, size_t *out_len,
                    pydb_error *err)
{
    nidx_segset *ss = pydb__nidx_acquire((nidx *)ix);
    int rc = pydb__key_normalize(&ss->cfg->rules, term, len, out, cap,
                                 out_len, err);
    pydb__nsegset_unref(ss);
    return rc;
}

/* ------------------------------------------------------------ fork */

static pthread_mutex_t fork_list_mutex = PTHREAD_MUTEX_INITIALIZER;
static nidx *fork_list;   /* every open handle (fork_next, fork_prev) */

static void fork_list_add(nidx *x)
{
    pthread_mutex_lock(&fork_list_mutex);
    x->fork_next = fork_list;
    if (fork_list) fork_list->fork_prev = x;
    fork_list = x;
    pthread_mutex_unlock(&fork_list_mutex);
}

static void fork_list_remove(nidx *x)
{
    pthread_mutex_lock(&fork_list_mutex);
    if (x->fork_prev) x->fork_prev->fork_next = x->fork_next;
    else if (fork_list == x) fork_list = x->fork_next;
    if (x->fork_next) x->fork_next->fork_prev = x->fork_prev;
    x->fork_next = x->fork_prev = NULL;
    pthread_mutex_unlock(&fork_list_mutex);
}

/* fork.h, rank 2: every open handle's mu, held for pointer swaps only
 * (never across a wait), and its db_lock, which a reader holds to tell
 * the attached database's collector of dead postings (a cooperative
 * step: by then the collectors' part holds every step lock, and a
 * reader only tries it), so that no child inherits either held by a
 * thread it does not have (its detach would wait for the db_lock
 * forever); released in the parent, released or made anew in the
 * child. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&fork_list_mutex);
    for (nidx *x = fork_list; x; x = x->fork_next) {
        pthread_rwlock_wrlock(&x->db_lock);
        pthread_mutex_lock(&x->mu);
    }
}

static void fork_parent(void)
{
    for (nidx *x = fork_list; x; x = x->fork_next) {
        pthread_mutex_unlock(&x->mu);
        pthread_rwlock_unlock(&x->db_lock);
    }
    pthread_mutex_unlock(&fork_list_mutex);
}

/* The child's db_lock is made anew, not unlocked: glibc tells a
 * writer's unlock from a reader's by the thread id of the writer, which
 * the child's one thread does not have, so an unlock there left the lock
 * write-locked and the child's close (its detach) and searches that
 * tell of dead postings waited forever. */
static void fork_child(void)
{
    for (nidx *x = fork_list; x; x = x->fork_next) {
        pthread_mutex_unlock(&x->mu);
        pthread_rwlock_init(&x->db_lock, NULL);
        /* a commit of a parent's thread between its prepare and its
         * publish (the commit hook's state, nidx_commit.c): the parent
         * ends it; left here, it made every commit of the child "still
         * pending".  The parent's thread changes these outside x->mu, so
         * the fork may have come between an unref and its pointer's
         * reset: the child drops its references without releasing them
         * (a segment and a set leaked at most, per fork), and the offer,
         * whatever state it was in, is offered again. */
        x->pending = NULL;
        x->pending_base = NULL;
        x->pending_merge = NULL;
        x->offer_taken = 0;
    }
    pthread_mutex_unlock(&fork_list_mutex);
}

static const pydb_fork_part nidx_fork = {2, fork_prepare, fork_parent,
                                         fork_child};

static void nidx_close(pydb_index *ix)
{
    nidx *x = (nidx *)ix;
    fork_list_remove(x);
    /* A pending segment here belongs to a commit that failed once its log
     * may have been durable (pydb.h, pydb_commit_hook): recovery may name
     * it, so it stays; if it does not, the collector removes it (an
     * unnamed file: nidx_gc.c). */
    if (x->pending) pydb__nseg_unref(x->pending);
    if (x->gc_free) x->gc_free(x);   /* a merge in progress (nidx_gc.c) */
    pydb__nsegset_unref(x->cur);
    pydb__nsegset_unref(x->prev);
    if (x->shm) pydb__shm_close(x->shm);
    pydb__fst_scratch_free(&x->scratch);
    free(x->test_data);
    pthread_mutex_destroy(&x->mu);
    pthread_mutex_destroy(&x->gc_mu);
    pthread_rwlock_destroy(&x->db_lock);
    free(x);
}

/* A pinned view: one segment set, with copies of the key rules and the
 * directory name, so that it outlives its index (pydb_snapshot_index's
 * views may be kept after the index is closed). */
typedef struct nidx_view {
    pydb_index base;
    nidx_segset *ss;
    pydb_keyrules rules;
    char dir[1024];
} nidx_view;

static int view_terms(pydb_index *ix, const uint8_t *prefix,
                      size_t prefix_len, const uint8_t *start,
                      size_t start_len, pydb_term_fn fn, void *ctx,
                      pydb_error *err)
{
    nidx_view *v = (nidx_view *)ix;
    return terms_in(v->dir, v->ss, prefix, prefix_len, start, start_len, fn,
                    ctx, NULL, NULL, err);
}

static int view_prefix_postings(pydb_postings *out, pydb_runs *runs,
                                pydb_index *ix, const uint8_t *prefix,
                                size_t prefix_len, pydb_error *err)
{
    nidx_view *v = (nidx_view *)ix;
    postings_sink sink = {out, runs};
    return terms_in(v->dir, v->ss, prefix, prefix_len, NULL, 0, NULL, NULL,
                    &sink, NULL, err);
}

static int view_postings(pydb_postings *out, pydb_index *ix,
                         const uint8_t *key, size_t len, pydb_error *err)
{
    return postings_in(out, ((nidx_view *)ix)->ss, key, len, NULL, NULL,
                       err);
}

static int view_postings_in_set(pydb_postings *out, pydb_index *ix,
                                const uint8_t *key, size_t len,
                                const pydb_mfn_bits *in, pydb_error *err)
{
    return postings_in(out, ((nidx_view *)ix)->ss, key, len, in, NULL, err);
}

static int view_mfns(pydb_mfns *out, pydb_index *ix, const uint8_t *key,
                     size_t len, const pydb_mfn_bits *in, pydb_error *err)
{
    return mfns_in(out, ((nidx_view *)ix)->ss, key, len, in, err);
}

/* The records of key's live postings in ss (only those in *in when
 * given) as a bitmap (index_int.h, mfn_bits): the segments oldest first,
 * each clearing the bits of the records its tombstones supersede, then
 * adding its own: a dense list's words, another list's MFNs.  Where no
 * list is dense, or the bitmap would be too sparse, the MFNs into *m
 * (parts_mfns) and *w NULL. */
static int mfn_bits_in(uint64_t **w, pydb_mfn_bits *b, pydb_mfns *m,
                       nidx_segset *ss, const uint8_t *key, size_t len,
                       const pydb_mfn_bits *in, pydb_error *err)
{
    key_part *part;
    pydb_mfns other = {0};   /* the MFNs of the lists not dense */
    int64_t lo = INT64_MAX, hi = -1;
    uint64_t total;
    size_t words;
    int rc, any_dense = 0;

    *w = NULL;
    if ((rc = key_parts(&part, &total, ss, key, len, err))) return rc;
    for (size_t i = 0; i < ss->n; i++) {
        key_part *p = &part[i];
        if (!p->c.s) continue;
        if ((rc = pydb__nseg_dense_bits(&p->c, &p->dense, &p->lo, &p->nwords,
                                        &p->words, err)))
            goto cleanup;
        if (p->dense) {
            any_dense = 1;
            if ((rc = pydb__nowait_spend(p->nwords))) goto cleanup;
            if ((int64_t)p->lo < lo) lo = (int64_t)p->lo;
            if ((int64_t)(p->lo + 64 * p->nwords - 1) > hi)
                hi = (int64_t)(p->lo + 64 * p->nwords - 1);
        }
    }
    if (!any_dense) goto mfns;
    for (size_t i = 0; i < ss->n; i++) {   /* the other lists' MFNs */
        key_part *p = &part[i];
        uint64_t live;
        if (!p->c.s || p->dense) continue;
        p->from = other.n;
        if ((rc = pydb__nowait_spend(p->c.count)) ||
            (rc = pydb__nseg_mfns_in(&other, &p->c, NULL, NULL, NULL, &live,
                                     err)))
            goto cleanup;
        p->to = other.n;
        for (size_t k = p->from; k < p->to; k++) {
            if (other.v[k] < lo) lo = other.v[k];
            if (other.v[k] > hi) hi = other.v[k];
        }
    }
    words = (size_t)((hi - lo) >> 6) + 1;
    if (words > 4 * total + 1024) goto mfns;
    if (!(*w = calloc(words, sizeof **w))) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                        "no memory for a %zu-word MFN bitmap", words);
        goto cleanup;
    }
    for (size_t i = 0; i < ss->n; i++) {
        const nidx_seg *s = ss->v[i];
        const key_part *p = &part[i];
        for (uint32_t t = 0; i > 0 && t < s->ntomb; t++) {
            int64_t d = (int64_t)pydb__nseg_tomb(s, t) - lo;
            if (d >= 0 && d <= hi - lo)
                (*w)[d >> 6] &= ~((uint64_t)1 << (d & 63));
        }
        for (uint64_t k = 0; p->dense && k < p->nwords; k++)
            pydb__bits_or_word(*w, words,
                               (uint64_t)((int64_t)p->lo - lo) + 64 * k,
                               pydb__u64(p->words + 8 * k));
        for (size_t k = p->from; k < p->to; k++) {
            int64_t d = (int64_t)other.v[k] - lo;
            (*w)[d >> 6] |= (uint64_t)1 << (d & 63);
        }
    }
    for (size_t k = 0; in && k < words; k++)
        (*w)[k] &= pydb__mfn_bits_word(in, lo + 64 * (int64_t)k);
    b->w = *w;
    b->lo = (int32_t)lo;
    b->nwords = words;
    goto cleanup;
mfns:
    rc = parts_mfns(m, ss, part, in, err);
cleanup:
    if (rc) {
        free(*w);
        *w = NULL;
    }
    free(part);
    free(other.v);
    return rc;
}

static int view_mfn_bits(uint64_t **w, pydb_mfn_bits *b, pydb_mfns *m,
                         pydb_index *ix, const uint8_t *key, size_t len,
                         const pydb_mfn_bits *in, pydb_error *err)
{
    return mfn_bits_in(w, b, m, ((nidx_view *)ix)->ss, key, len, in, err);
}

/* The TAG masks of the short list at the cursor (no more than NIDX_SKIP
 * postings: a newer segment's, which keeps no masks) for the records of
 * *in, from its postings there (index_int.h, tag_masks). */
static int short_tag_masks(uint8_t *m, const nidx_cursor *c,
                           const pydb_mfn_bits *in, const uint32_t *rank,
                           pydb_error *err)
{
    pydb_postings v = {0};
    uint64_t live;
    int rc = pydb__nseg_decode_in(&v, c, NULL, NULL, in, &live, err);
    for (size_t i = 0; !rc && i < v.n; i++) {
        const uint64_t d = (uint64_t)((int64_t)v.v[i].mfn - in->lo);
        const uint64_t r = rank[d >> 6] +
                           pydb__popcount64(in->w[d >> 6] &
                                            (((uint64_t)1 << (d & 63)) - 1));
        m[r] |= (uint8_t)(1u << pydb__nseg_tag_bit(v.v[i].tag));
    }
    pydb_postings_free(&v);
    return rc;
}

/* The TAG masks of key's lists in ss for the records of *in
 * (index_int.h, tag_masks): each segment's ORed in, a dense list's from
 * its masks, a short one's from its postings; unknown where a segment
 * has a long list that keeps none (segment format 4, or a list not
 * dense). */
static int tag_masks_in(uint8_t *m, int *known, nidx_segset *ss,
                        const uint8_t *key, size_t len,
                        const pydb_mfn_bits *in, const uint32_t *rank,
                        pydb_error *err)
{
    key_part *part;
    uint64_t total;
    int rc = key_parts(&part, &total, ss, key, len, err);

    *known = 1;
    for (size_t i = 0; !rc && *known && i < ss->n; i++) {
        const nidx_cursor *c = &part[i].c;
        if (!c->s) continue;
        if (c->count <= NIDX_SKIP) {
            if (!(rc = pydb__nowait_spend(c->count)))
                rc = short_tag_masks(m, c, in, rank, err);
        } else if (!(rc = pydb__nowait_spend(in->nwords))) {
            rc = pydb__nseg_tag_masks(c, in, rank, m, known, err);
        }
    }
    free(part);
    return rc;
}

static int view_tag_masks(uint8_t *m, int *known, pydb_index *ix,
                          const uint8_t *key, size_t len,
                          const pydb_mfn_bits *in, const uint32_t *rank,
                          pydb_error *err)
{
    return tag_masks_in(m, known, ((nidx_view *)ix)->ss, key, len, in, rank,
                        err);
}

static int view_count(pydb_index *ix, const uint8_t *key, size_t len,
                      uint64_t *n, pydb_error *err)
{
    return count_in(n, ((nidx_view *)ix)->ss, key, len, err);
}

static int view_key(pydb_index *ix, const uint8_t *term, size_t len,
                    uint8_t *out, size_t cap, size_t *out_len,
                    pydb_error *err)
{
    return pydb__key_normalize(&((nidx_view *)ix)->rules, term, len, out,
                               cap, out_len, err);
}

static void view_close(pydb_index *ix)
{
    nidx_view *v = (nidx_view *)ix;
    pydb__nsegset_unref(v->ss);
    free(v);
}

static int view_resident(const pydb_index *ix)
{
    const nidx_segset *ss = ((const nidx_view *)ix)->ss;
    for (size_t i = 0; i < ss->n; i++)
        if (!pydb__nseg_resident(ss->v[i])) return 0;
    return 1;
}

static const pydb_index_ops view_ops = {"native", view_terms, view_postings,
                                        view_key, view_close, NULL,
                                        view_prefix_postings, view_resident,
                                        view_postings_in_set, view_count,
                                        view_mfns, view_mfn_bits,
                                        view_tag_masks};

/* pydb__nidx_view_walk's state: the postings of the key terms_in() is
 * on gather in sink, as one run per segment that holds some. */
typedef struct view_walk {
    pydb__key_postings_fn fn;
    void *ctx;
    postings_sink sink;
    int rc;                 /* a merge failed: its error in *err */
    pydb_error *err;
} view_walk;

/* pydb_term_fn of the walk: the key's runs merged, handed to the
 * caller's fn, then dropped for the next key. */
static int walk_key(void *ctx, const uint8_t *key, size_t len,
                    uint64_t count)
{
    view_walk *w = ctx;
    int stop;
    if (w->sink.runs->n > 1 &&
        (w->rc = pydb__postings_merge_runs(w->sink.out, w->sink.runs->v,
                                           w->sink.runs->n, w->err)))
        return 1;
    stop = w->fn(w->ctx, key, len, count, w->sink.out);
    w->sink.out->n = 0;
    w->sink.runs->n = 0;
    return stop;
}

int pydb__nidx_view_walk(pydb_index *view, pydb__key_postings_fn fn,
                         void *ctx, pydb_error *err)
{
    nidx_view *v = (nidx_view *)view;
    pydb_postings out = {0};
    pydb_runs runs = {0};
    view_walk w;
    int rc;

    if (!view || view->ops != &view_ops)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "not a pinned view of a native index");
    memset(&w, 0, sizeof w);
    w.fn = fn;
    w.ctx = ctx;
    w.sink.out = &out;
    w.sink.runs = &runs;
    w.err = err;
    rc = terms_in(v->dir, v->ss, NULL, 0, NULL, 0, walk_key, &w, &w.sink,
                  NULL, err);
    if (rc == PYDB_OK) rc = w.rc;
    pydb_postings_free(&out);
    free(runs.v);
    return rc;
}

int pydb__nidx_view_keys(pydb_index *view, int32_t mfn,
                         const pydb_field *fields, uint32_t n,
                         pydb_fst_scratch *s, pydb_key_fn fn, void *ctx,
                         pydb_error *err)
{
    const nidx_cfg *cfg;
    if (!view || view->ops != &view_ops)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "not a pinned view of a native index");
    cfg = ((nidx_view *)view)->ss->cfg;
    return pydb__fst_keys(cfg->fst, &cfg->rules, &cfg->sw, mfn, fields, n, s,
                          fn, ctx, err);
}

int pydb__nidx_view_elsewhere(pydb_index *view, uint32_t tag)
{
    const pydb_fst *fst;
    if (!view || view->ops != &view_ops) return 0;
    fst = ((nidx_view *)view)->ss->cfg->fst;
    for (size_t i = 0; i < pydb_fst_count(fst); i++) {
        uint32_t id;
        int tech, line;
        const char *fmt;
        size_t fmt_len;
        pydb_fst_rule(&id, &tech, &fmt, &fmt_len, &line, fst, i);
        if (id == tag && tech >= 1000) return 1;
    }
    return 0;
}

/* A view of x serving ss (the reference is taken over, also on error). */
static int view_make(pydb_index **out, nidx *x, nidx_segset *ss,
                     pydb_error *err)
{
    nidx_view *v = calloc(1, sizeof *v);
    if (!v) {
        pydb__nsegset_unref(ss);
        return PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
    }
    v->base = x->base;
    v->base.ops = &view_ops;
    v->ss = ss;
    v->rules = ss->cfg->rules;
    memcpy(v->dir, x->dir, sizeof v->dir);
    *out = &v->base;
    return PYDB_OK;
}

static int nidx_pin(pydb_index *ix, pydb_index **out, pydb_error *err)
{
    nidx *x = (nidx *)ix;
    int rc = pydb__nidx_refresh(x, 0, err);
    if (rc) return rc;
    return view_make(out, x, pydb__nidx_acquire(x), err);
}

static const pydb_index_ops nidx_ops = {"native", nidx_terms, nidx_postings,
                                        nidx_key, nidx_close, nidx_pin, NULL,
                                        NULL, NULL, NULL, NULL, NULL, NULL};

int pydb__nidx_is_native(const pydb_index *ix)
{
    return ix && ix->ops == &nidx_ops;
}

/* ---- registration and loading a MANIFEST's segment set ---- */

/* Find the commit header of the database at db_path (its path and the
 * master file's, in x; both left empty when the database files are not
 * found: files mode for good). */
static void header_find(nidx *x, const char *db_path)
{
    char base[1024], xrf[1100];
    pydb_error e;
    if (pydb__db_paths(base, sizeof base, x->mst_path, sizeof x->mst_path,
                       xrf, sizeof xrf, db_path, &e) != PYDB_OK) {
        x->mst_path[0] = '\0';
        return;
    }
    pydb__shm_path(x->shm_path, sizeof x->shm_path, base, x->mst_path);
}

/* The commit header, mapped on first use (readers never create it: a
 * database no writer of this version has opened yet has none until one
 * does), or NULL (files mode).  Opened without x->mu: the open may wait
 * for another process laying the header out, and a thread that held mu
 * meanwhile would leave it held in a fork()ed child; two threads that
 * open it at once keep the first and close the other. */
struct pydb_shm *pydb__nidx_header(nidx *x)
{
    pydb_shm *s = __atomic_load_n(&x->shm, __ATOMIC_ACQUIRE), *none = NULL;
    pydb_error e;
    if (s || !x->shm_path[0]) return s;
    if (pydb__shm_open(&s, x->shm_path, x->mst_path, 0, &e) != PYDB_OK || !s)
        return __atomic_load_n(&x->shm, __ATOMIC_ACQUIRE);
    if (!__atomic_compare_exchange_n(&x->shm, &none, s, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        pydb__shm_close(s);
        s = none;
    }
    return s;
}

/* Register in the reader table at the latest commit: the slot, or -1
 * when the handle proceeds unregistered (files mode, an invalid header,
 * a table full of live readers). */
static int register_reader(nidx *x)
{
    pydb_shm *s = pydb__nidx_header(x);
    pydb_state st;
    pydb_error e;
    int slot = -1;
    if (!s || pydb__shm_pin(&slot, &st, s, &e) != PYDB_OK) return -1;
    return slot;
}

static int cmp_seg_gen(const void *a, const void *b)
{
    uint64_t x = (*(nidx_seg *const *)a)->gen, y = (*(nidx_seg *const *)b)->gen;
    return x < y ? -1 : x > y;
}

/* The open segments of the sets share[nshare], sorted by generation, so
 * that a set of n segments is matched in n log n, not n^2 (a writer
 * refreshes its set at every commit).  NULL (*n 0) when there are none,
 * or without memory: nothing is then shared and the segments are opened
 * again. */
static nidx_seg **share_index(nidx_segset *const *share, size_t nshare,
                              size_t *n)
{
    nidx_seg **ix;
    size_t total = 0, w = 0;
    for (size_t k = 0; k < nshare; k++)
        if (share[k]) total += share[k]->n;
    *n = 0;
    if (total == 0 || !(ix = malloc(total * sizeof *ix))) return NULL;
    for (size_t k = 0; k < nshare; k++)
        for (size_t j = 0; share[k] && j < share[k]->n; j++)
            ix[w++] = share[k]->v[j];
    qsort(ix, w, sizeof *ix, cmp_seg_gen);
    *n = w;
    return ix;
}

/* Find segment gen in share_index()'s ix[n] (a new reference), or
 * NULL. */
static nidx_seg *shared_seg(nidx_seg *const *ix, size_t n, uint64_t gen)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix[mid]->gen < gen) lo = mid + 1;
        else hi = mid;
    }
    if (lo == n || ix[lo]->gen != gen) return NULL;
    atomic_fetch_add(&ix[lo]->refs, 1);
    return ix[lo];
}

/* Read the MANIFEST whole into *m (its bytes in *data: free them and
 * m->segs) and open the segment set it names into *out, reusing the open
 * segments of share[nshare].  Registered in the reader table meanwhile,
 * so that no commit removes a file it names before it is open.  A
 * segment that vanished anyway (files mode) makes it read the MANIFEST
 * again, a few times; one still missing then is damage (PYDB_ECORRUPT,
 * naming the MANIFEST), not a database that does not exist. */
static int load_set(nidx_segset **out, nidx_manifest *m, uint8_t **data,
                    nidx *x, nidx_segset *const *share, size_t nshare,
                    pydb_error *err)
{
    nidx_segset *ns = NULL;
    nidx_seg **ix;
    size_t nix;
    int rc, tries = 0, slot, vanished;
    char path[1100];

    *out = NULL;
    *data = NULL;
    memset(m, 0, sizeof *m);
    ix = share_index(share, nshare, &nix);
again:
    vanished = 0;
    slot = register_reader(x);
    if ((rc = pydb__nman_read(m, data, x->manifest, 0, err))) goto cleanup;
    ns = pydb__nsegset_new(m->nsegs);
    if (!ns) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->manifest, -1, "no memory");
        goto cleanup;
    }
    ns->n = 0;
    if ((rc = cfg_of(&ns->cfg, m, nshare && share[0] ? share[0]->cfg : NULL,
                     x->manifest, err)))
        goto cleanup;
    for (size_t i = 0; i < m->nsegs; i++) {
        const nidx_mseg *ms = &m->segs[i];
        nidx_seg *sg = shared_seg(ix, nix, ms->gen);
        if (!sg && ms->inl) {
            if ((rc = pydb__nseg_open_inline(&sg, x->manifest, ms->gen,
                                             ms->inl, ms->len, err)))
                goto cleanup;
        } else if (!sg) {
            pydb__nseg_path(path, sizeof path, x->dir, ms->gen);
            if ((rc = pydb__nseg_open(&sg, path, ms->gen, err))) {
                vanished = err->sys_errno == ENOENT;
                goto cleanup;
            }
        }
        ns->v[ns->n++] = sg;
    }
    pydb__nsegset_finish(ns);
cleanup:
    if (slot >= 0) pydb__shm_unpin(pydb__nidx_header(x), slot);
    if (rc == PYDB_OK) {
        free(ix);
        *out = ns;
        return PYDB_OK;
    }
    pydb__nsegset_unref(ns);
    ns = NULL;
    free(m->segs);
    free(*data);
    memset(m, 0, sizeof *m);
    *data = NULL;
    if (vanished && ++tries < 5)
        goto again;   /* a segment merged away between read and open */
    if (vanished)
        rc = PYDB_ERROR(err, PYDB_ECORRUPT, x->manifest, -1,
                        "names the segment %s, which is missing", path);
    free(ix);
    return rc;
}

int pydb_native_index_open(pydb_index **out, const char *db_path,
                           pydb_error *err)
{
    nidx *x = calloc(1, sizeof *x);
    uint8_t *data = NULL;
    nidx_manifest m;
    int rc;

    *out = NULL;
    memset(&m, 0, sizeof m);
    if (!x) return PYDB_ERROR(err, PYDB_ENOMEM, db_path, -1, "no memory");
    pthread_mutex_init(&x->mu, NULL);
    pthread_mutex_init(&x->gc_mu, NULL);
    pthread_rwlock_init(&x->db_lock, NULL);
    pydb__fork_join(&nidx_fork);
    fork_list_add(x);
    x->base.ops = &nidx_ops;
    x->base.kind = PYDB_INDEX_NATIVE;
    x->base.caps = PYDB_POSTING_TAG | PYDB_POSTING_OCC | PYDB_POSTING_CNT;
    if ((rc = pydb__nidx_dir(x->dir, sizeof x->dir, db_path, err)))
        goto cleanup;
    snprintf(x->manifest, sizeof x->manifest, "%s/MANIFEST", x->dir);
    header_find(x, db_path);
    if ((rc = load_set(&x->cur, &m, &data, x, NULL, 0, err))) goto cleanup;
    x->gen = m.gen;
cleanup:
    free(m.segs);
    free(data);
    if (rc) {
        nidx_close(&x->base);
        return rc;
    }
    *out = &x->base;
    return PYDB_OK;
}

int pydb__nidx_install(nidx *x, nidx_segset *ns, uint64_t gen)
{
    nidx_segset *drop = ns;
    int done = 0;
    pthread_mutex_lock(&x->mu);
    if (gen > x->gen) {
        drop = x->prev;
        x->prev = x->cur;
        x->prev_gen = x->gen;
        x->cur = ns;
        x->gen = gen;
        done = 1;
    }
    pthread_mutex_unlock(&x->mu);
    pydb__nsegset_unref(drop);
    return done;
}

/* Adopt the segment list of a MANIFEST newer than the one this handle
 * serves: another handle or process has committed.  Called by readers
 * on every entry (force 0: only the head of the MANIFEST is read unless
 * its generation is newer; a missing MANIFEST keeps the current list)
 * and by the writer before it prepares a commit (force 1: it holds the
 * writer lock, so the file on disk is at least as new as its last
 * commit).  The new list is built outside the lock (segments already
 * open are shared; load_set registers as a reader meanwhile) and
 * swapped in under it only if no newer one was installed meanwhile, so
 * concurrent refreshes and commits never mix lists.  The list is the
 * MANIFEST's alone: segments of the current list it does not name (an
 * index rebuilt by another process) are not kept. */
uint64_t pydb__nidx_latest(nidx *x)
{
    pydb_shm *s = pydb__nowait() ? __atomic_load_n(&x->shm, __ATOMIC_ACQUIRE)
                                 : pydb__nidx_header(x);
    return s && pydb__shm_valid(s) ? pydb__shm_latest(s) : 0;
}

void pydb__nidx_seen(nidx *x, uint64_t latest)
{
    atomic_store(&x->seen_ms, pydb__now_ms());
    atomic_store(&x->seen_commit, latest);
}

int pydb__nidx_refresh(nidx *x, int force, pydb_error *err)
{
    uint8_t *data = NULL;
    nidx_manifest m;
    nidx_segset *ns = NULL, *share[2];
    uint64_t cur_gen, latest = pydb__nidx_latest(x);
    int rc;

    /* Every commit that replaces the MANIFEST publishes a new state after
     * it: no file is read while the header's latest commit stays where it
     * was when the MANIFEST was last read.  A recovery that replays only
     * the MANIFEST (a merge's or a rebuild's log) may publish nothing, so
     * the head is read again every NIDX_SEEN_MS even then -- also by a
     * call that must not wait: a read of a file read moments ago. */
    if (!force && latest && latest == atomic_load(&x->seen_commit)) {
        if (pydb__now_ms() - atomic_load(&x->seen_ms) < NIDX_SEEN_MS)
            return PYDB_OK;
    } else if (pydb__nowait()) {
        return pydb__nowait_refuse();
    }
    if (!force) {
        uint64_t g = pydb__nman_head_generation(x->manifest);
        pthread_mutex_lock(&x->mu);
        cur_gen = x->gen;
        pthread_mutex_unlock(&x->mu);
        if (g <= cur_gen) {   /* also: no MANIFEST now (unknown: read it) */
            pydb__nidx_seen(x, latest);
            return PYDB_OK;
        }
    }
    if (pydb__nowait()) return pydb__nowait_refuse();   /* segments to open */
    share[0] = pydb__nidx_acquire(x);
    pthread_mutex_lock(&x->mu);
    share[1] = x->prev;
    if (share[1]) atomic_fetch_add(&share[1]->refs, 1);
    cur_gen = x->gen;
    pthread_mutex_unlock(&x->mu);
    memset(&m, 0, sizeof m);
    rc = load_set(&ns, &m, &data, x, share, 2, err);
    if (rc == PYDB_OK && m.gen > cur_gen) {
        pydb__nidx_install(x, ns, m.gen);
        ns = NULL;
    }
    if (rc == PYDB_OK) pydb__nidx_seen(x, latest);
    pydb__nsegset_unref(ns);
    pydb__nsegset_unref(share[0]);
    pydb__nsegset_unref(share[1]);
    free(m.segs);
    free(data);
    return rc;
}

/* The set of generation g held by the handle (a new reference), or NULL;
 * g == 0: the previous set, whatever its generation. */
static nidx_segset *held_set(nidx *x, uint64_t g)
{
    nidx_segset *ss = NULL;
    pthread_mutex_lock(&x->mu);
    if (g == 0) ss = x->prev;
    else if (x->gen == g) ss = x->cur;
    else if (x->prev && x->prev_gen == g) ss = x->prev;
    if (ss) atomic_fetch_add(&ss->refs, 1);
    pthread_mutex_unlock(&x->mu);
    return ss;
}

int pydb__nidx_set_at(nidx_segset **out, nidx *x, uint64_t g,
                      pydb_error *err)
{
    uint8_t *data = NULL;
    nidx_manifest m;
    nidx_segset *ns = NULL, *share[2] = {NULL, NULL};
    uint64_t head;
    int rc = PYDB_OK;

    *out = NULL;
    memset(&m, 0, sizeof m);
    if (g == 0) {   /* generation unknown: the current set */
        if ((rc = pydb__nidx_refresh(x, 0, err))) return rc;
        *out = pydb__nidx_acquire(x);
        return PYDB_OK;
    }
    if ((*out = held_set(x, g)) != NULL) return PYDB_OK;
    if (pydb__nowait()) return pydb__nowait_refuse();
    head = pydb__nman_head_generation(x->manifest);
    if (head > g && head != NIDX_GEN_UNKNOWN) goto moved;
    share[0] = pydb__nidx_acquire(x);
    share[1] = held_set(x, 0);
    if ((rc = load_set(&ns, &m, &data, x, share, 2, err))) goto cleanup;
    if (m.gen > g) goto moved;
    if (m.gen < g) {
        rc = PYDB_CORRUPT(err, x->manifest, -1,
                          "manifest: generation %llu is older than the "
                          "committed state's %llu",
                          (unsigned long long)m.gen, (unsigned long long)g);
        goto cleanup;
    }
    atomic_fetch_add(&ns->refs, 1);
    *out = ns;
    pydb__nidx_install(x, ns, g);
    ns = NULL;
    goto cleanup;
moved:
    PYDB_ERROR(err, PYDB_EWOULDBLOCK, x->manifest, -1,
               "the index has moved past generation %llu since the "
               "snapshot was taken: take a new snapshot",
               (unsigned long long)g);
    rc = NIDX_MOVED;
cleanup:
    pydb__nsegset_unref(ns);
    pydb__nsegset_unref(share[0]);
    pydb__nsegset_unref(share[1]);
    free(m.segs);
    free(data);
    return rc;
}

/* The snapshot's generation: the set its commit published.  A native
 * index whose MANIFEST has moved past it (commits since the snapshot, or
 * one between replacing the MANIFEST and publishing its state) and whose
 * handle no longer holds it: PYDB_EWOULDBLOCK, a new snapshot will find
 * its set (docs/design.md §6). */
int pydb_snapshot_index(pydb_index **view, const pydb_snapshot *snap,
                        pydb_index *ix, pydb_error *err)
{
    nidx_segset *ss;
    nidx *x = (nidx *)ix;
    int rc;

    if (view) *view = NULL;
    if (!view || !snap || !ix)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "pydb_snapshot_index: NULL argument");
    if (!pydb__nidx_is_native(ix)) return pydb__index_borrow(view, ix, err);
    rc = pydb__nidx_set_at(&ss, x, snap->st.index_gen, err);
    if (rc == NIDX_MOVED) return PYDB_EWOULDBLOCK;
    if (rc) return rc;
    return view_make(view, x, ss, err);
}
