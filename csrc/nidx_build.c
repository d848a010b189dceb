/*
 * nidx_build.c - the bulk build of a native index: read every record of
 * the database, extract its keys by the FST, write one segment and a
 * MANIFEST naming only it (pydb_nidx_builder_*, pydb_native_index_build
 * of pydb.h).
 *
 * DESIGN: a rebuild beside writers.  The MANIFEST is the index's commit
 * record, and writers of other processes change it with every commit, so
 * a rebuild publishes like a commit: under the writer lock, through a
 * transaction (pydb_txn_put_file: the new MANIFEST goes to the
 * write-ahead log and is replayed by recovery), with the new generation
 * in the committed state (pydb__txn_set_index_gen) for snapshots.  A
 * writable handle with the index attached picks it up at its next
 * prepare, which reads the MANIFEST whole (nidx_handle.c, refresh).
 *
 * Records committed while the build reads: the scan reads one committed
 * state S0 (a snapshot taken when the build opens) without the lock, so
 * writers are not held up by a long build.  Under the lock, at state S1,
 * the records that changed since are exactly those whose XRF entry now
 * points at or past S0's end of records (every version a later commit
 * wrote lies there: the master file is append-only) plus the MFNs from
 * S0's NXTMFN on; they go to a second segment whose tombstones hide
 * their postings in the first.  So the index published equals a build
 * of S1, the state its commit leaves, and the lock is held only to index
 * the changes and write the files.
 * A compaction (compact.c) rewrites the master file shorter, and its
 * swap may come while S0 is still the latest commit (a registered S0
 * holds it back only once a later commit exists): the later commits'
 * versions then lie below S0's end.  When S1's file generation is not
 * S0's, the build starts its scan over from the latest commit (the lock
 * released; a swap needs S0 to be the latest commit, so a second race
 * is as unlikely as the first), and after BUILD_RESCANS of them indexes
 * every record of S1 under the lock.
 *
 * Segment numbers are chosen under the lock (above every segment file,
 * the MANIFEST's head and the committed state's generation:
 * above_every_generation), so no commit of another process can take or
 * remove
 * them; the segments of the old index are removed by the first writer
 * (or this build, right after its commit) that finds no registered
 * reader on an older commit (pydb__nidx_collect).
 *
 * Bounded memory: the scan holds at most a budget of keys and postings
 * (pydb_nidx_options.memory, PYDB_NIDX_MEMORY_DEFAULT), checked between
 * records; past it the accumulator is sorted into a run file
 * (build-PID-N.tmp, nidx_spill.h) and emptied, and runs of one level are
 * merged NIDX_MERGE_WAY at a time.  finish() then merges the runs into
 * the segment's file before it takes the lock, and renames it to its
 * generation's name under the lock.  A build that never passed its
 * budget writes the segment from memory as before; both write the same
 * bytes.  The build reads records through the mapping and drops the
 * pages it read from its page tables after each step
 * (pydb__db_unmap_pages): a mapping keeps every page touched in the
 * process' resident set.
 * Runs are removed when the builder is freed (after a failure too); a
 * killed build's are removed by the next build (at open) or collection
 * (pydb__nidx_collect), as temporaries of a dead process.
 *
 * Depends on: nidx_spill.h (runs and their merge),
 * nidx_writer.h (accumulator, segment bytes), nidx_manifest.h
 * (MANIFEST text), nidx_handle.h (pydb__nidx_dir, pydb__nidx_collect),
 * the FST and key rules (nidx_int.h), snapshots and transactions
 * (pydb.h), the committed state and XRF scan (pydb_int.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include "nidx_handle.h"
#include "nidx_spill.h"
#include "nidx_writer.h"
#include "shm.h"

/* How long a build waits for the writer lock (ms), as a Database's
 * default lock_timeout. */
#define BUILD_LOCK_MS 10000

/* How many times a build scans again from the latest commit when a
 * compaction replaced the master file during its scan, before it
 * indexes every record under the lock instead (see DESIGN above). */
#define BUILD_RESCANS 2

struct pydb_nidx_builder {
    pydb_db *db;
    const pydb_fst *fst;
    char *fst_text;
    size_t fst_len;
    uint8_t *stw_text;
    size_t stw_len;
    pydb_keyrules rules;
    pydb_stopwords sw;
    nidx_acc a;
    pydb_record *rec;
    pydb_fst_scratch scratch;
    pydb_snapshot *snap;      /* S0: the state the scan reads */
    int32_t next, max;
    int64_t done;
    size_t budget;            /* bytes of the accumulator before a spill */
    char **runs;              /* the sorted runs spilled, in MFN order   */
    int *level;               /* of each run: NIDX_MERGE_WAY^level spills */
    size_t nruns, cap_runs;
    char merged[1100];        /* the merged runs' segment, until renamed */
    char dir[1024];
    int skip_damaged;         /* opt->skip_damaged                        */
    pydb_nidx_damaged *damaged;   /* the records left out (note_damaged) */
    size_t ndamaged, cap_damaged;
};

static atomic_ulong temp_seq;   /* names of temporary files */

/* A new temporary file name of this process in the index directory. */
static void temp_path(char *out, size_t cap, const char *dir)
{
    snprintf(out, cap, "%s/build-%d-%lu.tmp", dir, (int)getpid(),
             atomic_fetch_add(&temp_seq, 1));
}

/* Remove the temporaries (runs, merges) of processes that are gone: a
 * build or a merge killed before its end.  Nothing reads them. */
static void remove_dead_temps(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[1300];
    while (d && (de = readdir(d)) != NULL) {
        if (pydb__nidx_temp_dead(de->d_name)) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
    }
    if (d) closedir(d);
}

static void remove_runs(pydb_nidx_builder *b)
{
    for (size_t i = 0; i < b->nruns; i++) {
        unlink(b->runs[i]);
        free(b->runs[i]);
    }
    b->nruns = 0;
}

/* Sort the accumulator and write it as the next run; empty it. */
static int spill(pydb_nidx_builder *b, pydb_error *err)
{
    char path[1100];
    int rc;
    if (b->nruns == 0 && mkdir(b->dir, 0755) != 0 && errno != EEXIST)
        return PYDB_OSERROR(err, errno, b->dir, -1, "cannot create");
    if (b->nruns == b->cap_runs) {
        size_t cap = b->cap_runs ? b->cap_runs * 2 : 16;
        char **nv = realloc(b->runs, cap * sizeof *nv);
        if (!nv) return PYDB_ERROR(err, PYDB_ENOMEM, b->dir, -1, "no memory");
        b->runs = nv;
        int *nl = realloc(b->level, cap * sizeof *nl);
        if (!nl) return PYDB_ERROR(err, PYDB_ENOMEM, b->dir, -1, "no memory");
        b->level = nl;
        b->cap_runs = cap;
    }
    temp_path(path, sizeof path, b->dir);
    if (!(b->runs[b->nruns] = strdup(path)))
        return PYDB_ERROR(err, PYDB_ENOMEM, b->dir, -1, "no memory");
    if ((rc = pydb__nrun_write(&b->a, path, err))) {
        free(b->runs[b->nruns]);
        return rc;
    }
    b->level[b->nruns++] = 0;
    pydb__nacc_reset(&b->a);
    /* levels never rise towards the newest run: while the newest
     * NIDX_MERGE_WAY runs share a level, merge them into one run of the
     * next (they are adjacent, so the runs stay in MFN order) */
    while (b->nruns >= NIDX_MERGE_WAY) {
        size_t from = b->nruns - NIDX_MERGE_WAY;
        int lv = b->level[b->nruns - 1];
        if (b->level[from] != lv) break;
        temp_path(path, sizeof path, b->dir);
        char *merged = strdup(path);
        if (!merged)
            return PYDB_ERROR(err, PYDB_ENOMEM, b->dir, -1, "no memory");
        if ((rc = pydb__nrun_merge((const char *const *)b->runs + from,
                                   NIDX_MERGE_WAY, merged, NULL, err))) {
            free(merged);
            return rc;
        }
        for (size_t i = from; i < b->nruns; i++) {
            unlink(b->runs[i]);
            free(b->runs[i]);
        }
        b->runs[from] = merged;
        b->level[from] = lv + 1;
        b->nruns = from + 1;
    }
    return PYDB_OK;
}

void pydb_nidx_builder_free(pydb_nidx_builder *b)
{
    if (!b) return;
    remove_runs(b);
    free(b->runs);
    free(b->level);
    if (b->merged[0]) unlink(b->merged);
    pydb_snapshot_release(b->snap);
    if (b->db) pydb_close(b->db);
    free(b->fst_text);
    free(b->stw_text);
    pydb__stopwords_free(&b->sw);
    pydb__nacc_free(&b->a);
    pydb_record_free(b->rec);
    pydb__fst_scratch_free(&b->scratch);
    free(b->damaged);
    free(b);
}

/* A read of `mfn` failed with rc: with skip_damaged, a damaged record
 * (PYDB_ECORRUPT) is noted with its error and left out (PYDB_OK), up to
 * PYDB_NIDX_DAMAGED_MAX of them; else, or past that, rc (err as the read
 * set it). */
static int note_damaged(pydb_nidx_builder *b, int32_t mfn, int rc,
                        pydb_error *err)
{
    if (rc != PYDB_ECORRUPT || !b->skip_damaged ||
        b->ndamaged == PYDB_NIDX_DAMAGED_MAX)
        return rc;
    if (b->ndamaged == b->cap_damaged) {
        size_t cap = b->cap_damaged ? b->cap_damaged * 2 : 16;
        pydb_nidx_damaged *v = realloc(b->damaged, cap * sizeof *v);
        if (!v)
            return PYDB_ERROR(err, PYDB_ENOMEM, b->dir, -1, "no memory");
        b->damaged = v;
        b->cap_damaged = cap;
    }
    b->damaged[b->ndamaged].mfn = mfn;
    if (err) {
        b->damaged[b->ndamaged].error = *err;
    } else {   /* the caller wants no detail: the code, at least */
        memset(&b->damaged[b->ndamaged].error, 0, sizeof *err);
        b->damaged[b->ndamaged].error.code = rc;
    }
    b->ndamaged++;
    return PYDB_OK;
}

static int damaged_cmp(const void *x, const void *y)
{
    const pydb_nidx_damaged *a = x, *b = y;
    return (a->mfn > b->mfn) - (a->mfn < b->mfn);
}

const pydb_nidx_damaged *pydb_nidx_builder_damaged(const pydb_nidx_builder *b,
                                                   size_t *n)
{
    *n = b->ndamaged;
    return b->damaged;
}

/* S0: the latest commit, registered, which the scan reads from MFN 1. */
static int take_s0(pydb_nidx_builder *b, pydb_error *err)
{
    pydb_snapshot_info si;
    int rc = pydb_snapshot_take(&b->snap, b->db, err);
    if (rc) return rc;
    pydb_snapshot_info_get(&si, b->snap);
    b->next = 1;
    b->max = si.next_mfn - 1;
    b->done = 0;
    return PYDB_OK;
}

int pydb_nidx_builder_open(pydb_nidx_builder **out, const char *db_path,
                           const pydb_fst *fst, const pydb_nidx_options *opt,
                           pydb_error *err)
{
    pydb_nidx_builder *b = calloc(1, sizeof *b);
    pydb_options o = {PYDB_IO_MMAP, PYDB_LOCK_NONE, PYDB_OPEN_WRITE};
    int rc;

    *out = NULL;
    if (!b) return PYDB_ERROR(err, PYDB_ENOMEM, db_path, -1, "no memory");
    b->fst = fst;
    b->a.err = err;
    b->budget = opt && opt->memory ? opt->memory : PYDB_NIDX_MEMORY_DEFAULT;
    b->skip_damaged = opt && opt->skip_damaged;
    if ((rc = pydb__nidx_dir(b->dir, sizeof b->dir, db_path, err))) goto fail;
    remove_dead_temps(b->dir);
    if ((rc = pydb_open(&b->db, db_path, &o, err))) goto fail;
    rc = pydb__keyrules_builtin(&b->rules,
                                !opt ? PYDB_KEYS_DOS
                                : opt->utf8 ? PYDB_KEYS_UNICODE : opt->keys,
                                opt ? opt->max_key : 0, err);
    if (rc) goto fail;
    if ((rc = pydb__keyrules_set_mode(&b->rules,
                                      !opt ? PYDB_KEYS_DOS
                                      : opt->utf8 ? PYDB_KEYS_UNICODE
                                      : opt->keys,
                                      opt ? opt->mode : 0, err)))
        goto fail;
    if (opt && opt->upper) memcpy(b->rules.upper, opt->upper, 256);
    if (opt && opt->word) memcpy(b->rules.word, opt->word, 256);
    if (opt && opt->tables) {
        char d[1024];
        const char *name;
        int found;
        pydb_info info;
        pydb_info_get(&info, b->db);
        pydb__path_split(d, sizeof d, &name, info.mst_path);
        if ((rc = pydb__keyrules_load_dir(&b->rules, d, &found, err)))
            goto fail;
    }
    if (opt && opt->stw_len) {
        b->stw_text = malloc(opt->stw_len);
        if (!b->stw_text) goto oom;
        memcpy(b->stw_text, opt->stw, opt->stw_len);
        b->stw_len = opt->stw_len;
        if ((rc = pydb__stopwords_parse(&b->sw, &b->rules, b->stw_text,
                                        b->stw_len, err)))
            goto fail;
    }
    /* the FST text, rebuilt from the rules, goes into the manifest */
    {
        pydb_buf t = {0};
        for (size_t i = 0; i < pydb_fst_count(fst); i++) {
            char line[64];
            uint32_t id;
            int tech;
            const char *fmt;
            size_t fl;
            pydb_fst_rule(&id, &tech, &fmt, &fl, NULL, fst, i);
            int l = snprintf(line, sizeof line, "%u %d ", id, tech);
            pydb__buf_put(&t, line, (size_t)l);
            pydb__buf_put(&t, fmt, fl);
            pydb__buf_put(&t, "\n", 1);
        }
        if (t.oom) {
            free(t.p);
            goto oom;
        }
        b->fst_text = (char *)t.p;
        b->fst_len = t.n;
    }
    if ((rc = take_s0(b, err))) goto fail;
    *out = b;
    return PYDB_OK;
oom:
    rc = PYDB_ERROR(err, PYDB_ENOMEM, db_path, -1, "no memory");
fail:
    pydb_nidx_builder_free(b);
    return rc;
}

int pydb_nidx_builder_step(int64_t *done, int64_t *total, int *more,
                           pydb_nidx_builder *b, int32_t max, pydb_error *err)
{
    int rc;
    b->a.err = err;
    for (int32_t k = 0; k < max && b->next <= b->max; k++, b->next++) {
        rc = pydb_snapshot_read(&b->rec, b->snap, b->next, err);
        if (rc == PYDB_ENOTFOUND) continue;
        if (rc) {
            if ((rc = note_damaged(b, b->next, rc, err))) return rc;
            continue;
        }
        b->done++;
        if (b->rec->deleted || b->rec->status) continue;
        rc = pydb__fst_keys(b->fst, &b->rules, &b->sw, b->next,
                            b->rec->fields, b->rec->nfields, &b->scratch,
                            pydb__nacc_add, &b->a, err);
        if (rc) return rc;
        /* between records: the runs cover disjoint MFN ranges */
        if (pydb__nacc_bytes(&b->a) >= b->budget && (rc = spill(b, err)))
            return rc;
    }
    /* the pages read stay in the page cache, not in this process */
    pydb__db_unmap_pages(b->db);
    if (done) *done = b->next - 1;
    if (total) *total = b->max;
    if (more) *more = b->next <= b->max;
    return PYDB_OK;
}

typedef struct changed {
    int32_t s0_next;         /* NXTMFN of S0                     */
    int64_t s0_end;          /* S0's end of records               */
    int all;                 /* every MFN: the file was compacted */
    int32_t *v;              /* MFNs changed since S0, ascending */
    size_t n, cap;
    int oom;
} changed;

static int changed_visit(void *ctx, int32_t mfn, const pydb_xrf_entry *e)
{
    changed *c = ctx;
    if (!c->all && mfn < c->s0_next &&
        (e->state == PYDB_XRF_UNUSED || e->offset < c->s0_end))
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        int32_t *v = realloc(c->v, cap * sizeof *v);
        if (!v) {
            c->oom = 1;
            return 1;
        }
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = mfn;
    return 0;
}

/* With the writer lock held: the records changed since S0 (c->v) and a
 * segment of their state now, tombstoning every one of them, into segb
 * (left empty when none changed).  When a compaction replaced the master
 * file since S0, offsets no longer tell which versions are newer than
 * S0: with `may_rescan` *again is set and nothing is done, else every
 * record counts as changed. */
static int index_changes(changed *c, pydb_buf *segb, pydb_nidx_builder *b,
                         int may_rescan, int *again, pydb_error *err)
{
    pydb_snapshot_info si;
    pydb_state s1;
    nidx_acc a;
    int32_t stop;
    int rc = PYDB_OK;

    memset(&a, 0, sizeof a);
    a.err = err;
    pydb_snapshot_info_get(&si, b->snap);
    c->s0_next = si.next_mfn;
    c->s0_end = si.mst_end;
    pydb__state_now(&s1, b->db);
    if (s1.file_gen != b->snap->st.file_gen) {
        *again = may_rescan;
        c->all = 1;
        if (*again) goto cleanup;
    }
    if ((rc = pydb__xrf_scan(b->db, &s1, 1, changed_visit, c, &stop, 64,
                             err)))
        goto cleanup;
    if (c->oom) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, b->dir, -1, "no memory");
        goto cleanup;
    }
    for (size_t i = 0; i < c->n; i++) {
        rc = pydb__read_in(&b->rec, b->db, &s1, c->v[i], err);
        if (rc == PYDB_ENOTFOUND) continue;
        if (rc) {
            if ((rc = note_damaged(b, c->v[i], rc, err))) goto cleanup;
            continue;
        }
        if (b->rec->deleted || b->rec->status) continue;
        if ((rc = pydb__fst_keys(b->fst, &b->rules, &b->sw, c->v[i],
                                 b->rec->fields, b->rec->nfields,
                                 &b->scratch, pydb__nacc_add, &a, err)))
            goto cleanup;
    }
    if (c->n) rc = pydb__nacc_segment(&a, c->v, c->n, segb, err);
cleanup:
    pydb__nacc_free(&a);
    return rc;
}

/* Write segment `gen` of dir from data[len] (fsynced). */
static int write_segment(const char *dir, uint64_t gen, const pydb_buf *seg,
                         pydb_error *err)
{
    char path[1100];
    pydb__nseg_path(path, sizeof path, dir, gen);
    unlink(path);   /* an orphan of an unfinished commit */
    return pydb__write_file(path, seg->p, seg->n, 1, 1, NULL, err);
}

/* After the build's commit: remove the old index's segments now if no
 * registered reader may need them (else the next writer will), after a
 * checkpoint (pydb__txn_settle), as the collector does: the log may hold
 * commits' small segments (pydb__txn_log_file), which a replay after a
 * power cut would write back as orphans.  And the MANIFEST's spare,
 * which holds the index this one replaced, maybe of other settings, so
 * that a rebuild after damage never takes them back
 * (pydb_native_index_stored_spare); the next commit makes it again.
 * Both under the writer lock: a writer's commit writes into the spare
 * and swaps it in.  Best effort: a busy lock leaves them. */
static void collect_after(pydb_nidx_builder *b)
{
    char spare[1200];
    pydb_txn *t;
    pydb_error e;
    uint64_t top;
    if (pydb_txn_begin(&t, b->db, 0, &e) != PYDB_OK) return;
    if (pydb__txn_settle(t, &e) == PYDB_OK) {
        (void)pydb__nidx_collect(&top, b->dir, pydb__db_shm(b->db), NULL,
                                 NULL, &e);
        snprintf(spare, sizeof spare, "%s/MANIFEST.pydb-next", b->dir);
        (void)unlink(spare);
    }
    pydb_txn_abort(t);
}

/* In *gen, the first generation above every one in use, under the
 * writer lock in transaction t: segment files (pydb__nidx_collect, which
 * also removes unused ones, after an fdatasync of the log),
 * the MANIFEST's head even when the rest of it is damaged, and the
 * generation the committed state carries -- an index whose segments are
 * inline has files for few of its generations, and a rebuild that took
 * a lower one would look older than the index it replaces to every
 * handle (nidx_manifest.h: generations only grow). */
static int above_every_generation(uint64_t *gen, pydb_nidx_builder *b,
                                  pydb_txn *t, pydb_error *err)
{
    char manifest[1100];
    pydb_state st;
    struct pydb_shm *s = pydb__db_shm(b->db);
    uint64_t top, g;
    int rc = pydb__nidx_collect(&top, b->dir, s, NULL, t, err);
    if (rc) return rc;
    snprintf(manifest, sizeof manifest, "%s/MANIFEST", b->dir);
    g = pydb__nman_head_generation(manifest);
    if (g != NIDX_GEN_UNKNOWN && g > top) top = g;
    if (s && pydb__shm_state(&st, s) == 0 && st.index_gen > top)
        top = st.index_gen;
    *gen = top + 1;
    return PYDB_OK;
}

/* The rest of the scan, the segment of S0, and its commit with the
 * changes since S0 (index_changes: *again when the scan must start
 * over). */
static int finish_scan(pydb_nidx_builder *b, int may_rescan, int *again,
                       pydb_error *err)
{
    pydb_buf segb = {0}, delta = {0}, man = {0};
    changed c;
    char manifest[1100];
    uint64_t gens[2], gen;
    nidx_mseg segs[2];
    size_t ngens = 1;
    pydb_txn *t = NULL;
    int rc, written = 0;

    memset(&c, 0, sizeof c);
    b->a.err = err;
    if (b->next <= b->max) {
        int more = 1;
        while (more)
            if ((rc = pydb_nidx_builder_step(NULL, NULL, &more, b, 1 << 20,
                                             err)))
                return rc;
    }
    if (mkdir(b->dir, 0755) != 0 && errno != EEXIST)
        return PYDB_OSERROR(err, errno, b->dir, -1, "cannot create");
    if (b->nruns == 0) {
        if ((rc = pydb__nacc_segment(&b->a, NULL, 0, &segb, err)))
            goto cleanup;
    } else {
        /* the rest as the last run, then the runs merged into the
         * segment's file (a temporary until it is renamed, under the
         * lock, to its generation's name) */
        char dict[1100];
        if (b->a.np + b->a.nst > 0 && (rc = spill(b, err))) goto cleanup;
        pydb__nacc_free(&b->a);
        temp_path(b->merged, sizeof b->merged, b->dir);
        temp_path(dict, sizeof dict, b->dir);
        rc = pydb__nrun_merge((const char *const *)b->runs, b->nruns,
                              b->merged, dict, err);
        remove_runs(b);
        if (rc) {
            b->merged[0] = '\0';   /* the merge removed it */
            goto cleanup;
        }
    }
    pydb__nacc_free(&b->a);
    /* from here on, under the writer lock */
    if ((rc = pydb_txn_begin(&t, b->db, BUILD_LOCK_MS, err))) goto cleanup;
    if ((rc = index_changes(&c, &delta, b, may_rescan, again, err)) || *again)
        goto cleanup;
    /* S0 is read: its registration would keep the old index's segments
     * on disk after this commit (pydb__nidx_collect) */
    pydb_snapshot_release(b->snap);
    b->snap = NULL;
    if ((rc = above_every_generation(&gen, b, t, err))) goto cleanup;
    gens[0] = gen;
    if (c.n) gens[ngens++] = gen + 1;
    written = 1;
    if (b->merged[0]) {
        char path[1100];
        pydb__nseg_path(path, sizeof path, b->dir, gens[0]);
        unlink(path);   /* an orphan of an unfinished commit */
        if (pydb__vfs->rename(b->merged, path) != 0) {
            rc = PYDB_OSERROR(err, errno, b->merged, -1,
                              "cannot rename to %s: %s", path,
                              strerror(errno));
            goto cleanup;
        }
        b->merged[0] = '\0';
    } else if ((rc = write_segment(b->dir, gens[0], &segb, err))) {
        goto cleanup;
    }
    if (c.n && (rc = write_segment(b->dir, gens[1], &delta, err)))
        goto cleanup;
    if ((rc = pydb__fsync_dir(b->dir, err))) goto cleanup;
    for (size_t i = 0; i < ngens; i++)
        segs[i] = (nidx_mseg){gens[i], NULL, 0};   /* files */
    if ((rc = pydb__nman_encode(&man, gens[ngens - 1], &b->rules, b->fst_text,
                                b->fst_len, b->stw_text, b->stw_len, segs,
                                ngens, err)))
        goto cleanup;
    snprintf(manifest, sizeof manifest, "%s/MANIFEST", b->dir);
    if ((rc = pydb_txn_put_file(t, manifest, man.p, man.n, err)))
        goto cleanup;
    pydb__txn_set_index_gen(t, gens[ngens - 1]);
    /* A failed commit may leave a durable log that names the segments:
     * they stay (unnamed, a later writer collects them). */
    written = 0;
    rc = pydb_txn_commit(t, err);
    t = NULL;
    if (rc == PYDB_OK) collect_after(b);
cleanup:
    if (t) pydb_txn_abort(t);
    if (rc && written) {
        char path[1100];
        for (size_t i = 0; i < ngens; i++) {
            pydb__nseg_path(path, sizeof path, b->dir, gens[i]);
            unlink(path);
        }
    }
    free(c.v);
    free(segb.p);
    free(delta.p);
    free(man.p);
    return rc;
}

/* Start the scan over from the latest commit: the runs, the merged
 * segment and the accumulator dropped, a new S0. */
static int rescan(pydb_nidx_builder *b, pydb_error *err)
{
    remove_runs(b);
    if (b->merged[0]) unlink(b->merged);
    b->merged[0] = '\0';
    pydb__nacc_free(&b->a);
    pydb_snapshot_release(b->snap);
    b->snap = NULL;
    b->ndamaged = 0;
    return take_s0(b, err);
}

int pydb_nidx_builder_finish(pydb_nidx_builder *b, pydb_error *err)
{
    int rc, again;
    for (int left = BUILD_RESCANS;; left--) {
        again = 0;
        if ((rc = finish_scan(b, left > 0, &again, err)) || !again) break;
        if ((rc = rescan(b, err))) return rc;
    }
    if (rc == PYDB_OK && b->ndamaged > 1) {
        /* by MFN, one each (a record met by the scan and again among
         * the changes since is told once) */
        size_t n = 1;
        qsort(b->damaged, b->ndamaged, sizeof *b->damaged, damaged_cmp);
        for (size_t i = 1; i < b->ndamaged; i++) {
            if (b->damaged[i].mfn == b->damaged[n - 1].mfn) n--;
            b->damaged[n++] = b->damaged[i];
        }
        b->ndamaged = n;
    }
    return rc;
}

int pydb_native_index_build(const char *db_path, const pydb_fst *fst,
                            const pydb_nidx_options *opt,
                            pydb_progress_fn progress, void *ctx,
                            pydb_error *err)
{
    pydb_nidx_builder *b;
    int rc = pydb_nidx_builder_open(&b, db_path, fst, opt, err), more = 1;
    int64_t done, total;
    if (rc) return rc;
    while (more) {
        if ((rc = pydb_nidx_builder_step(&done, &total, &more, b, 16384,
                                         err)))
            goto cleanup;
        if (progress && progress(ctx, done, total)) {
            rc = PYDB_ERROR(err, PYDB_EINVAL, db_path, -1,
                            "index build cancelled");
            goto cleanup;
        }
    }
    rc = pydb_nidx_builder_finish(b, err);
cleanup:
    pydb_nidx_builder_free(b);
    return rc;
}


void pydb_nidx_stored_free(pydb_nidx_stored *s)
{
    if (!s) return;
    free(s->fst);
    free(s->stw);
    memset(s, 0, sizeof *s);
}

/* pydb_native_index_stored() and _spare(): *out from the index's file
 * `name` (MANIFEST, or its spare). */
static int stored_from(pydb_nidx_stored *out, const char *db_path,
                       const char *name, pydb_error *err)
{
    char dir[1024], path[1100];
    uint8_t *data = NULL;
    nidx_manifest m;
    int rc;

    memset(out, 0, sizeof *out);
    memset(&m, 0, sizeof m);
    if ((rc = pydb__nidx_dir(dir, sizeof dir, db_path, err))) return rc;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if ((rc = pydb__nman_read(&m, &data, path, 0, err))) return rc;
    out->utf8 = m.rules.utf8;
    out->max_key = m.rules.max_key;
    out->mode = m.rules.mode;
    memcpy(out->upper, m.rules.upper, 256);
    memcpy(out->word, m.rules.word, 256);
    out->fst = malloc(m.fst_len + 1);
    out->stw = malloc(m.stw_len + 1);
    if (!out->fst || !out->stw) {
        pydb_nidx_stored_free(out);
        rc = PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
        goto cleanup;
    }
    memcpy(out->fst, m.fst, m.fst_len);
    out->fst[m.fst_len] = '\0';
    out->fst_len = m.fst_len;
    memcpy(out->stw, m.stw, m.stw_len);
    out->stw_len = m.stw_len;
cleanup:
    free(m.segs);
    free(data);
    return rc;
}

int pydb_native_index_stored(pydb_nidx_stored *out, const char *db_path,
                             pydb_error *err)
{
    return stored_from(out, db_path, "MANIFEST", err);
}

int pydb_native_index_stored_spare(pydb_nidx_stored *out,
                                   const char *db_path, pydb_error *err)
{
    return stored_from(out, db_path, "MANIFEST.pydb-next", err);
}
