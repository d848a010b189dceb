/*
 * nidx_commit.c - the native index's commit hook and merging
 * (pydb_native_index_attach, pydb__nidx_hook): turning a transaction's
 * changed records into one new segment plus a MANIFEST that the write
 * path commits with the records, publishing it to readers, and the
 * test double of pydb_txn_put_file.
 *
 * prepare: the segment holds the keys of the records' new states and
 * tombstones every changed MFN (their postings in older segments are
 * dead); it is written and fsynced, and the new MANIFEST goes to the
 * transaction (pydb_txn_put_file), so it is replaced with the records.
 * publish: the handle serves the new segment set.  abort: the segment
 * is removed.  Each commit adds one small segment; when there would be
 * more than MERGE_AT, the commit's segment also takes in all segments
 * after the bulk-built base (dropping their dead postings).  Segment
 * files no live set and no MANIFEST on disk name are removed by a later
 * prepare, once no registered reader reads an older commit (readers of
 * other processes may be opening them: nidx_handle.h).  prepare reports
 * the new MANIFEST's generation to the transaction, which publishes it
 * with the commit's state (pydb__txn_set_index_gen; snapshots find their
 * index by it).
 *
 * Depends on: nidx_handle.h (the handle, segment sets, pydb__nidx_refresh),
 * nidx_writer.h (segment bytes), nidx_manifest.h, nidx_seg.h, key
 * extraction (nidx_int.h), transactions (pydb_int.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nidx_handle.h"
#include "nidx_writer.h"
#include "shm.h"

#define MERGE_AT 8            /* segments before a commit merges the tail */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Merge the segments after the first (the bulk-built base) into `a`:
 * their live postings, less the records this commit replaces; their
 * tombstones join `tombs` (they still apply to the base). */
static int merge_tail(nidx_acc *a, const nidx_segset *ss, int32_t **tombs,
                      size_t *nt, pydb_error *err)
{
    pydb_postings p = {0};
    nidx_cursor c;
    int rc = PYDB_OK;
    size_t extra = 0;
    const int32_t *commit = *tombs;
    size_t ncommit = *nt;

    memset(&c, 0, sizeof c);
    for (size_t i = 0; i < ncommit; i++)   /* the commit's MFNs: sorted */
        PYDB_ASSERT(i == 0 || commit[i - 1] < commit[i]);
    for (size_t i = 1; i < ss->n; i++) {   /* segments: oldest first */
        PYDB_ASSERT(ss->v[i - 1]->gen < ss->v[i]->gen);
        extra += ss->v[i]->ntomb;
    }
    int32_t *all = malloc((ncommit + extra + 1) * sizeof *all);
    if (!all) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    memcpy(all, commit, ncommit * sizeof *all);
    size_t na = ncommit;
    for (size_t i = 1; i < ss->n; i++)
        for (uint32_t k = 0; k < ss->v[i]->ntomb; k++)
            all[na++] = pydb__nseg_tomb(ss->v[i], k);
    for (size_t i = 1; i < ss->n && rc == PYDB_OK; i++) {
        const nidx_seg *sg = ss->v[i];
        uint64_t live;
        c.s = sg;
        c.valid = 0;
        if (sg->nterms == 0) continue;
        if ((rc = pydb__ncur_block(&c, 0, err))) break;
        for (;;) {
            if ((rc = pydb__ncur_next(&c, err)) || !c.valid) break;
            p.n = 0;
            if ((rc = pydb__nidx_decode_live(&p, ss, i, &c, &live, err)))
                break;
            for (size_t k = 0; k < p.n && rc == PYDB_OK; k++) {
                int32_t m = p.v[k].mfn;
                if (bsearch(&m, commit, ncommit, sizeof m, cmp_i32)) continue;
                rc = pydb__nacc_add(a, c.key, c.klen, &p.v[k]);
            }
            if (rc) break;
        }
    }
    free(c.key);
    pydb_postings_free(&p);
    if (rc) {
        free(all);
        return rc;
    }
    qsort(all, na, sizeof *all, cmp_i32);
    size_t w = 0;
    for (size_t i = 0; i < na; i++)
        if (w == 0 || all[w - 1] != all[i]) all[w++] = all[i];
    free(*tombs);
    *tombs = all;
    *nt = w;
    return PYDB_OK;
}

/* May unnamed segment files go?  Only when no registered reader of the
 * commit header reads a commit older than the latest: a reader that
 * registered at an older commit may still be about to open a segment its
 * MANIFEST named (nidx_handle.c, load_set), and a snapshot of an older
 * commit may still ask for its generation's segments.  Without a usable
 * header (files mode) no reader can register: as before, they may. */
static int may_remove(struct pydb_shm *shm)
{
    if (!shm || !pydb__shm_valid(shm)) return 1;
    return pydb__shm_oldest(shm, NULL) == pydb__shm_latest(shm);
}

uint64_t pydb__nidx_collect(const char *dir, struct pydb_shm *shm,
                            const nidx_segset *ss)
{
    char manifest[1100];
    uint64_t top = 0;
    uint8_t *data = NULL;
    size_t len;
    nidx_manifest m;
    pydb_error e;
    DIR *d;
    struct dirent *de;
    int remove = may_remove(shm), named;

    memset(&m, 0, sizeof m);
    snprintf(manifest, sizeof manifest, "%s/MANIFEST", dir);
    named = pydb__read_file(manifest, &data, &len, &e) == PYDB_OK &&
            pydb__nman_parse(&m, data, len, manifest, &e) == PYDB_OK;
    if (!named) remove = 0;   /* cannot tell what the MANIFEST names */
    d = opendir(dir);
    while (d && (de = readdir(d)) != NULL) {
        unsigned long long g;
        int used = 0;
        char path[1100];
        if (strlen(de->d_name) != 16 ||
            sscanf(de->d_name, "seg-%8llu.pds", &g) != 1)
            continue;
        for (size_t i = 0; ss && i < ss->n && !used; i++)
            used = ss->v[i]->gen == g;
        for (size_t i = 0; i < m.nsegs && !used; i++) used = m.segs[i] == g;
        if (!used && remove) {
            pydb__nseg_path(path, sizeof path, dir, g);
            unlink(path);
        } else if (g > top) {
            top = g;
        }
    }
    if (d) closedir(d);
    if (m.gen > top) top = m.gen;
    free(m.segs);
    free(data);
    return top;
}

typedef struct change_ref {
    int32_t mfn;
    size_t i;
} change_ref;

/* By MFN, then by position in the transaction. */
static int cmp_change_ref(const void *a, const void *b)
{
    const change_ref *x = a, *y = b;
    if (x->mfn != y->mfn) return x->mfn < y->mfn ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int hook_prepare(void *ctx, pydb_txn *t, const pydb_change *ch,
                        size_t n, pydb_error *err)
{
    change_ref *last = NULL;
    nidx *x = ctx;
    nidx_acc a;
    pydb_buf segb = {0}, man = {0};
    int32_t *tombs = NULL;
    size_t nt = 0, ngens;
    uint64_t *gens = NULL, gen, top;
    char path[1100];
    nidx_segset *ss = NULL;
    const nidx_cfg *cfg;
    int rc = PYDB_OK, written = 0, merge;

    memset(&a, 0, sizeof a);
    a.err = err;
    if (n == 0) return PYDB_OK;
    if (x->pending)
        return PYDB_ERROR(err, PYDB_EINVAL, x->dir, -1,
                          "a prepared index change is still pending");
    tombs = malloc(n * sizeof *tombs);
    if (!tombs) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) tombs[nt++] = ch[i].mfn;
    qsort(tombs, nt, sizeof *tombs, cmp_i32);
    {
        size_t w = 0;
        for (size_t i = 0; i < nt; i++)
            if (w == 0 || tombs[w - 1] != tombs[i]) tombs[w++] = tombs[i];
        nt = w;
    }
    if ((rc = pydb__nidx_refresh(x, 1, err))) goto cleanup;
    ss = pydb__nidx_acquire(x);
    cfg = ss->cfg;   /* the keys of the index as the MANIFEST now has it */
    top = pydb__nidx_collect(x->dir, pydb__nidx_header(x), ss);
    /* Too many segments: this commit's segment also takes in every
     * segment after the base (their dead postings dropped), so a
     * commit's cost stays proportional to the changes since the last
     * bulk build and readers merge at most MERGE_AT lists. */
    merge = ss->n + 1 > MERGE_AT && ss->n >= 2;
    if (merge && (rc = merge_tail(&a, ss, &tombs, &nt, err))) goto cleanup;
    /* A transaction may change one MFN several times (update, then
     * delete...): only its last change is the record's new state. */
    last = malloc(n * sizeof *last);
    if (!last) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        last[i].mfn = ch[i].mfn;
        last[i].i = i;
    }
    qsort(last, n, sizeof *last, cmp_change_ref);
    for (size_t k = 0; k < n; k++) {
        size_t i = last[k].i;
        if (k + 1 < n && last[k + 1].mfn == last[k].mfn) continue;
        if (ch[i].after && !ch[i].deleted_after &&
            (rc = pydb__fst_keys(cfg->fst, &cfg->rules, &cfg->sw, ch[i].mfn,
                                 ch[i].after, ch[i].nafter, &x->scratch,
                                 pydb__nacc_add, &a, err)))
            goto cleanup;
    }
    if ((rc = pydb__nacc_segment(&a, tombs, nt, &segb, err))) goto cleanup;
    pthread_mutex_lock(&x->mu);
    gen = x->gen + 1;
    pthread_mutex_unlock(&x->mu);
    if (top >= gen) gen = top + 1;   /* never reuse a live file's name */
    for (size_t i = 0; i < ss->n; i++)
        if (ss->v[i]->gen >= gen) gen = ss->v[i]->gen + 1;
    pydb__nseg_path(path, sizeof path, x->dir, gen);
    unlink(path);   /* an orphan of an earlier, uncommitted prepare */
    written = 1;    /* from here on, a failure removes the file */
    if ((rc = pydb__write_file(path, segb.p, segb.n, 1, 1, NULL, err)))
        goto cleanup;
    if ((rc = pydb__fsync_dir(x->dir, err))) goto cleanup;
    gens = malloc((ss->n + 1) * sizeof *gens);
    if (!gens) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    ngens = merge ? 1 : ss->n;
    for (size_t i = 0; i < ngens; i++) gens[i] = ss->v[i]->gen;
    gens[ngens++] = gen;
    if ((rc = pydb__nman_encode(&man, gen, &cfg->rules, cfg->fst_text,
                                cfg->fst_len, cfg->stw_text, cfg->stw_len,
                                gens, ngens, err)))
        goto cleanup;
    if ((rc = pydb__nseg_open(&x->pending, path, gen, err))) goto cleanup;
    x->pending_gen = gen;
    x->pending_merge = merge;
    if (x->put_file) {
        rc = x->put_file(x->put_ctx, t, x->manifest, man.p, man.n, err);
    } else {
        rc = pydb_txn_put_file(t, x->manifest, man.p, man.n, err);
        /* the committed state carries the generation (snapshots) */
        if (rc == PYDB_OK) pydb__txn_set_index_gen(t, gen);
    }
cleanup:
    if (rc) {
        if (x->pending) {
            pydb__nseg_unref(x->pending);
            x->pending = NULL;
        }
        if (written) unlink(path);
    }
    pydb__nsegset_unref(ss);
    pydb__nacc_free(&a);
    free(last);
    free(tombs);
    free(gens);
    free(segb.p);
    free(man.p);
    return rc;
}

static void hook_publish(void *ctx, pydb_txn *t)
{
    nidx *x = ctx;
    nidx_segset *old, *ns, *drop;
    size_t keep;
    if (!x->pending) return;
    pthread_mutex_lock(&x->mu);
    if (x->gen >= x->pending_gen) {
        /* a reader's refresh adopted this commit's MANIFEST already
         * (the write path applied it before publishing) */
        pthread_mutex_unlock(&x->mu);
        pydb__nseg_unref(x->pending);
        x->pending = NULL;
        return;
    }
    old = x->cur;
    keep = x->pending_merge ? (old->n ? 1 : 0) : old->n;
    ns = pydb__nsegset_new(keep + 1);
    if (!ns) {
        /* cannot fail here: keep serving the old list; the next open
         * reads the committed manifest */
        pthread_mutex_unlock(&x->mu);
        pydb__nseg_unref(x->pending);
        x->pending = NULL;
        return;
    }
    ns->cfg = old->cfg;
    atomic_fetch_add(&ns->cfg->refs, 1);
    for (size_t i = 0; i < keep; i++) {
        ns->v[i] = old->v[i];
        atomic_fetch_add(&old->v[i]->refs, 1);
    }
    ns->v[keep] = x->pending;
    pydb__nsegset_finish(ns);
    drop = x->prev;          /* old becomes the previous set */
    x->prev = old;
    x->prev_gen = x->gen;
    x->cur = ns;
    x->gen = x->pending_gen;
    x->pending = NULL;
    pthread_mutex_unlock(&x->mu);
    /* merged segments are removed by a later prepare (pydb__nidx_collect),
     * once no manifest on disk names them and no reader may need them */
    pydb__nsegset_unref(drop);
}

static void hook_abort(void *ctx, pydb_txn *t)
{
    nidx *x = ctx;
    if (!x->pending) return;
    unlink(x->pending->path);
    pydb__nseg_unref(x->pending);
    x->pending = NULL;
}

void pydb__nidx_set_put_file(pydb_index *ix, pydb_put_file_fn fn, void *ctx)
{
    nidx *x = (nidx *)ix;
    x->put_file = fn;
    x->put_ctx = ctx;
}

int pydb__nidx_hook(pydb_index *ix, pydb_commit_hook *out, pydb_error *err)
{
    if (!pydb__nidx_is_native(ix))
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "not a native index");
    out->prepare = hook_prepare;
    out->publish = hook_publish;
    out->abort = hook_abort;
    out->ctx = ix;
    return PYDB_OK;
}

int pydb_native_index_attach(pydb_index *ix, pydb_db *db, pydb_error *err)
{
    pydb_commit_hook h;
    int rc = pydb__nidx_hook(ix, &h, err);
    if (rc) return rc;
    return pydb_set_commit_hook(db, &h, err);
}

/* ---- test double: put_file recorded, applied at a simulated commit
 * point the way a write-ahead-log replay would (whole file, atomically) */

static int test_put(void *ctx, pydb_txn *t, const char *path,
                    const void *data, size_t len, pydb_error *err)
{
    nidx *x = ctx;
    uint8_t *d = malloc(len ? len : 1);
    if (!d) return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
    memcpy(d, data, len);
    free(x->test_data);
    x->test_data = d;
    x->test_len = len;
    snprintf(x->test_path, sizeof x->test_path, "%s", path);
    return PYDB_OK;
}

int pydb__nidx_use_test_put(pydb_index *ix, pydb_error *err)
{
    if (!pydb__nidx_is_native(ix))
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "not a native index");
    pydb__nidx_set_put_file(ix, test_put, ix);
    return PYDB_OK;
}

int pydb__nidx_test_commit_point(pydb_index *ix, pydb_error *err)
{
    nidx *x = (nidx *)ix;
    char tmp[1200];
    int rc;
    if (!x->test_data) return PYDB_OK;
    snprintf(tmp, sizeof tmp, "%s.tmp", x->test_path);
    if ((rc = pydb__replace_file(x->test_path, tmp, x->test_data,
                                 x->test_len, 1, NULL, err)))
        return rc;
    free(x->test_data);
    x->test_data = NULL;
    return PYDB_OK;
}

void pydb__nidx_test_drop(pydb_index *ix)
{
    nidx *x = (nidx *)ix;
    free(x->test_data);
    x->test_data = NULL;
}

