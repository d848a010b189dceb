/*
 * nidx_commit.c - the native index's commit hook and merging
 * (pydb_native_index_attach, pydb__nidx_hook): turning a transaction's
 * changed records into one new segment plus a MANIFEST that the write
 * path commits with the records, publishing it to readers, and the
 * test double of pydb_txn_put_file.
 *
 * prepare: the segment holds the keys of the records' new states and
 * tombstones every changed MFN (their postings in older segments are
 * dead).  Those of MFNs the transaction appended (pydb_change.appended)
 * hide nothing -- MFNs are never handed out twice -- but they stay: a
 * segment's tombstones are the records it holds, which the collector
 * compares with the records newer segments rewrote (nidx_gc.c,
 * mostly_dead).  The segment's nupd counts the others, the records it
 * updated or deleted, whose share of its weight the collector takes for
 * the postings it made dead (base_due).  One of at most pydb__nidx_inline_max bytes (NIDX_INLINE_MAX)
 * goes inline into the new MANIFEST while the set's inline segments stay
 * within NIDX_INLINE_TOTAL bytes (nidx_manifest.h): no file is created,
 * synced or later removed for it -- on a file system where creating
 * files costs (ext4 without a journal scans recently deleted inodes) that
 * was most of an indexed commit's time.  A larger one is a file: under
 * PYDB_WAL_DIRECT bytes it goes into the transaction's log frame too
 * (pydb__txn_log_file), so the log's fdatasync makes it durable and a
 * checkpoint fsyncs the file; a still larger one is fsynced with its
 * folder before the commit.  The new MANIFEST goes to the transaction
 * (pydb_txn_put_file), so it is replaced with the records: one fsync per
 * indexed commit.
 * A tail merge the collector offered (nidx_gc.c, OFFERED) rides on the
 * commit: its segment replaces its run in the MANIFEST (and in the set
 * publish installs: x->pending_base).
 * publish: the handle serves the new segment set.  abort: the segment
 * is removed (a file; an inline one has none).  Each commit adds one
 * small segment and nothing else: a
 * commit never merges (merging is garbage collection, nidx_gc.c, run by
 * the handle's collector as its policy says; under policy none the
 * segments accumulate, one per commit, and every lookup visits them
 * all).  No safety valve: segments are mapped and their descriptors
 * closed, so the hard limit is the process's number of mappings
 * (vm.max_map_count, 65530 by default) -- some 65,000 uncollected
 * commits, where opening a segment fails with PYDB_EIO/ENOMEM and the
 * commit fails cleanly.  Segment files no live set and no MANIFEST on
 * disk name are removed by the collector (collect(): nidx_gc.c), once no
 * registered reader reads an older commit (readers of other processes
 * may be opening them: nidx_handle.h); prepare neither scans nor
 * removes them (it did once: a directory scan at every commit, O(files)
 * with hundreds of segments piling up under contention).  prepare reports
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
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nidx_handle.h"
#include "nidx_writer.h"
#include "shm.h"
#include "wal.h"

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
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

/* The end of an offered merge a prepare took: the commit published it,
 * or not. */
static void pending_base_done(nidx *x, int published)
{
    pydb__nsegset_unref(x->pending_base);
    x->pending_base = NULL;
    pydb__nidx_offer_done(x, x->pending_merge, published);
    x->pending_merge = NULL;
}

static int hook_prepare(void *ctx, pydb_txn *t, const pydb_change *ch,
                        size_t n, pydb_error *err)
{
    change_ref *last = NULL;
    nidx *x = ctx;
    nidx_acc a;
    pydb_buf segb = {0}, man = {0};
    int32_t *tombs = NULL;
    size_t nt = 0, nupd = 0;
    int32_t first_new = INT32_MAX;   /* the lowest MFN appended */
    nidx_mseg *segs = NULL;
    uint64_t gen;
    char path[1100];
    nidx_segset *ss = NULL;
    const nidx_cfg *cfg;
    int rc = PYDB_OK, written = 0, logged;

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
    {
        size_t w = 0;
        for (size_t i = 0; i < n; i++) tombs[nt++] = ch[i].mfn;
        qsort(tombs, nt, sizeof *tombs, cmp_i32);
        for (size_t i = 0; i < nt; i++)
            if (w == 0 || tombs[w - 1] != tombs[i]) tombs[w++] = tombs[i];
        nt = w;
        for (size_t i = 0; i < n; i++)   /* appended MFNs are new... */
            if (ch[i].appended) first_new = ch[i].mfn < first_new ? ch[i].mfn
                                                                : first_new;
        for (size_t i = 0; i < nt; i++)  /* ...from the lowest one on */
            nupd += tombs[i] < first_new;
    }
    if ((rc = pydb__nidx_refresh(x, 1, err))) goto cleanup;
    ss = pydb__nidx_acquire(x);
    cfg = ss->cfg;   /* the keys of the index as the MANIFEST now has it */
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
    /* The name: above the MANIFEST's generation and every segment of the
     * set.  Every file a reader may still read was named by a MANIFEST
     * (whose generations only grow: a build starts above every one in
     * use), so no live file is higher.  A file there already is an
     * orphan of a process killed between its write and its commit: it
     * is left to the collector (no directory scan per commit), and a
     * segment file takes the next name (an inline one has no file: the
     * collector tells the orphan of its generation by that). */
    pthread_mutex_lock(&x->mu);
    gen = x->gen + 1;
    pthread_mutex_unlock(&x->mu);
    for (size_t i = 0; i < ss->n; i++)
        if (ss->v[i]->gen >= gen) gen = ss->v[i]->gen + 1;
    /* A tail merge the collector finished and offered (nidx_gc.c): its
     * segment, inline, takes this generation in place of its run, and
     * this commit's the next; the MANIFEST written anyway publishes it,
     * with no commit and no fsync of its own. */
    if ((rc = pydb__nidx_offer_apply(&x->pending_base, &x->pending_merge, x,
                                     ss, gen, err)))
        goto cleanup;
    if (x->pending_base) {
        pydb__nsegset_unref(ss);
        ss = x->pending_base;
        atomic_fetch_add(&ss->refs, 1);
        gen++;
    }
    /* A segment under PYDB_WAL_DIRECT bytes of a commit that keeps its
     * frame goes into the frame as well, and a replay writes it again
     * (pydb__txn_log_file; a checkpoint syncs it); a larger one, or any
     * in files mode, is fsync'ed here with its folder -- also with
     * sync=False, whose frame may reach the disk before it (txn.c,
     * "Commits without fsync"). */
    logged = t && !x->put_file && segb.n < PYDB_WAL_DIRECT &&
             pydb__txn_keeps_frame(t);
    /* A small segment goes into the MANIFEST itself: no file to create,
     * sync and later remove (the MANIFEST is written anyway). */
    if (segb.n <= pydb__nidx_inline_max &&
        pydb__nsegset_inline_bytes(ss, 0, 0) + segb.n <= NIDX_INLINE_TOTAL) {
        if ((rc = pydb__nseg_open_inline(&x->pending, x->manifest, gen,
                                         segb.p, segb.n, err)))
            goto cleanup;
        goto manifest;
    }
    for (int tries = 0;; tries++, gen++) {
        pydb__nseg_path(path, sizeof path, x->dir, gen);
        written = 1;   /* from here on, a failure removes the file */
        rc = pydb__write_file(path, segb.p, segb.n, 1, !logged, NULL, err);
        if (rc == PYDB_OK) break;
        if (err->sys_errno != EEXIST || tries >= 64) {
            written = err->sys_errno != EEXIST;   /* not ours: stays */
            goto cleanup;
        }
    }
    if (logged) {
        if ((rc = pydb__txn_log_file(t, path, segb.p, segb.n, err)))
            goto cleanup;
    } else if ((rc = pydb__fsync_dir(x->dir, err))) {
        goto cleanup;
    }
    if ((rc = pydb__nseg_open(&x->pending, path, gen, err))) goto cleanup;
manifest:
    x->pending->nupd = (uint32_t)nupd;
    segs = malloc((ss->n + 1) * sizeof *segs);
    if (!segs) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, x->dir, -1, "no memory");
        goto cleanup;
    }
    pydb__nman_segs_of(segs, ss->v, ss->n);
    pydb__nman_segs_of(segs + ss->n, &x->pending, 1);
    if ((rc = pydb__nman_encode(&man, gen, &cfg->rules, cfg->fst_text,
                                cfg->fst_len, cfg->stw_text, cfg->stw_len,
                                segs, ss->n + 1, err)))
        goto cleanup;
    x->pending_gen = gen;
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
        pending_base_done(x, 0);
        if (written) unlink(path);
    }
    pydb__nsegset_unref(ss);
    pydb__nacc_free(&a);
    free(last);
    free(tombs);
    free(segs);
    free(segb.p);
    free(man.p);
    return rc;
}

static void hook_publish(void *ctx, pydb_txn *t)
{
    nidx *x = ctx;
    nidx_segset *old, *from, *ns = NULL, *drop = NULL;
    pydb_shm *s = __atomic_load_n(&x->shm, __ATOMIC_ACQUIRE);
    size_t keep;
    if (!x->pending) return;
    /* The MANIFEST on disk is this commit's (prepare built it on the list
     * it read under the writer lock), and the write path publishes the
     * commit's state next under the same lock, as latest + 1: searches
     * that follow need not read it again. */
    if (s && pydb__shm_valid(s)) pydb__nidx_seen(x, pydb__shm_latest(s) + 1);
    pthread_mutex_lock(&x->mu);
    /* Done already when a reader's refresh adopted this commit's MANIFEST
     * (the write path applied it before publishing).  Without memory,
     * the old list is served; the next open reads the committed one. */
    old = x->cur;
    from = x->pending_base ? x->pending_base : old;   /* prepare's set */
    keep = from->n;
    if (x->gen >= x->pending_gen || !(ns = pydb__nsegset_new(keep + 1))) {
        pydb__nseg_unref(x->pending);
        goto done;
    }
    ns->cfg = from->cfg;
    atomic_fetch_add(&ns->cfg->refs, 1);
    for (size_t i = 0; i < keep; i++) {
        ns->v[i] = from->v[i];
        atomic_fetch_add(&from->v[i]->refs, 1);
    }
    ns->v[keep] = x->pending;
    pydb__nsegset_finish(ns);
    drop = x->prev;          /* old becomes the previous set */
    x->prev = old;
    x->prev_gen = x->gen;
    x->cur = ns;
    x->gen = x->pending_gen;
done:
    x->pending = NULL;
    pthread_mutex_unlock(&x->mu);
    pydb__nsegset_unref(drop);
    pending_base_done(x, 1);   /* the MANIFEST on disk has the merge */
}

static void hook_abort(void *ctx, pydb_txn *t)
{
    nidx *x = ctx;
    pending_base_done(x, 0);
    if (!x->pending) return;
    if (!x->pending->inl) unlink(x->pending->path);
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
    out->collect = pydb__nidx_gc_collect;
    out->garbage = pydb__nidx_gc_garbage;
    out->ctx = ix;
    return PYDB_OK;
}

/* db NULL: detach -- the index forgets its handle (waiting for a reader
 * that is telling the handle's collector it met garbage), so the handle
 * may be closed while the index is still read.  The hook stays on the
 * handle until pydb_set_commit_hook(db, NULL) or pydb_close. */
int pydb_native_index_attach(pydb_index *ix, pydb_db *db, pydb_error *err)
{
    pydb_commit_hook h;
    int rc = pydb__nidx_hook(ix, &h, err);
    if (rc) return rc;
    if (!db) {
        nidx *x = (nidx *)ix;
        pthread_rwlock_wrlock(&x->db_lock);
        __atomic_store_n(&x->db, NULL, __ATOMIC_RELEASE);
        pthread_rwlock_unlock(&x->db_lock);
        return PYDB_OK;
    }
    if ((rc = pydb_set_commit_hook(db, &h, err))) return rc;
    /* readers that skip dead postings tell db's collector from now on */
    __atomic_store_n(&((nidx *)ix)->db, db, __ATOMIC_RELEASE);
    return PYDB_OK;
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

void pydb__nidx_test_publish_state(pydb_index *ix)
{
    pydb_shm *s = pydb__nidx_header((nidx *)ix);
    pydb_state st;
    if (s && pydb__shm_state(&st, s) == 0) pydb__shm_publish(s, &st);
}

void pydb__nidx_test_drop(pydb_index *ix)
{
    nidx *x = (nidx *)ix;
    free(x->test_data);
    x->test_data = NULL;
}

