/*
 * group_commit.c - threads that commit single changes through
 * pydb_write_one() on one handle (group commit, csrc/group.c), through the
 * public C API alone (pydb.h); run plain and under ThreadSanitizer by
 * tests/test_stress_c.py.
 *
 *   group_commit [--threads N] [--each K] [--sync] [--holder] DIR
 *
 * Creates DIR/group (a new database) and starts N threads (default 8).
 * Thread t appends K records (default 200), one call each, with the
 * fields 1 = t, 2 = i (its i-th append), 3 = the version v (0 at first),
 * 4 = a payload that depends on all three.  After each append it reads
 * its record back; every 3rd record it then updates (v + 1), every 5th it
 * deletes and undeletes, every 7th it asks to update an MFN past the end
 * (PYDB_ENOTFOUND expected), and every 11th it appends a record that the
 * database's commit hook refuses (a field of tag 9999: PYDB_EINVAL, and
 * the other changes of its group commit alone), each through
 * pydb_write_one, checking the record after each.  The threads share the
 * handle, so their calls are grouped.
 *
 * With --holder, one more thread keeps taking the writer lock in an
 * explicit transaction for 1-4 ms at a time, and the writers' calls wait
 * 2 ms at most: a call that fails with PYDB_ELOCKED (it timed out in the
 * queue, or its group did) changed nothing and is made again, so groups
 * time out, put members back and re-form all the time.  It prints
 * "timeouts=T" (calls that timed out), which must not be 0.
 *
 * At the end every MFN 1..N*K must hold exactly one (t, i) with the
 * version its thread left, none deleted.  Exit status 0 when every check
 * held, 1 on a mismatch (printed as "MISMATCH ..."), 2 on a failed call
 * or bad usage.  The last line is "ok records=R".
 */
#define _GNU_SOURCE
#include "pydb.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 64
#define REFUSED_TAG 9999

typedef struct {
    char s[4][80];
    pydb_field f[4];
} content;

static void make_content(content *c, long t, long i, long v)
{
    long len = (t * 11 + i * 7 + v * 3) % 70 + 1;
    snprintf(c->s[0], sizeof c->s[0], "%ld", t);
    snprintf(c->s[1], sizeof c->s[1], "%ld", i);
    snprintf(c->s[2], sizeof c->s[2], "%ld", v);
    memset(c->s[3], 'a' + (int)((t + i + v) % 26), (size_t)len);
    c->s[3][len] = 0;
    for (int k = 0; k < 4; k++) {
        c->f[k].tag = (uint32_t)(k + 1);
        c->f[k].len = (uint32_t)strlen(c->s[k]);
        c->f[k].value = (const uint8_t *)c->s[k];
    }
}

/* 1 when rec holds exactly content (t, i, v). */
static int holds(const pydb_record *rec, long t, long i, long v)
{
    content want;
    make_content(&want, t, i, v);
    if (rec->nfields != 4) return 0;
    for (int k = 0; k < 4; k++)
        if (rec->fields[k].tag != want.f[k].tag ||
            rec->fields[k].len != want.f[k].len ||
            memcmp(rec->fields[k].value, want.f[k].value, want.f[k].len))
            return 0;
    return 1;
}

/* The commit hook: refuses a transaction that writes a field of tag
 * REFUSED_TAG, before its commit point. */
static int refuse(void *ctx, pydb_txn *t, const pydb_change *c, size_t n,
                  pydb_error *err)
{
    (void)ctx;
    (void)t;
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; c[i].after && k < c[i].nafter; k++)
            if (c[i].after[k].tag == REFUSED_TAG)
                return pydb_error_set(err, PYDB_EINVAL, NULL, -1,
                                      "refused: MFN %d has tag %d",
                                      (int)c[i].mfn, REFUSED_TAG);
    return PYDB_OK;
}

static void nothing(void *ctx, pydb_txn *t)
{
    (void)ctx;
    (void)t;
}

static int holder_stop;   /* atomic */

/* --holder: take the writer lock for 1-4 ms at a time until stopped. */
static void *hold(void *arg)
{
    pydb_db *db = arg;
    pydb_error e;
    pydb_txn *t;
    for (long k = 0; !__atomic_load_n(&holder_stop, __ATOMIC_ACQUIRE); k++) {
        struct timespec ts = {0, (1 + k % 4) * 1000000L};
        if (pydb_txn_begin(&t, db, 1000, &e) == PYDB_OK) {
            nanosleep(&ts, NULL);
            pydb_txn_abort(t);
        }
        ts.tv_nsec = 500000;
        nanosleep(&ts, NULL);
    }
    return NULL;
}

typedef struct {
    pydb_db *db;
    long t, each;
    int timeout_ms;    /* per call                                       */
    long timeouts;     /* calls that failed with PYDB_ELOCKED (made again) */
    int32_t *mfns;     /* [each]: the MFN of its i-th append             */
    long *versions;    /* [each]                                         */
    long mismatches;
    int rc;
    pydb_error err;
} worker;

static void mismatch(worker *w, const char *what, long i, int32_t mfn)
{
    w->mismatches++;
    printf("MISMATCH thread %ld record %ld (MFN %d): %s\n", w->t, i,
           (int)mfn, what);
    fflush(stdout);
}

/* Read MFN mfn back: (t, i, v), deleted or not. */
static int check(worker *w, long i, int32_t mfn, int deleted)
{
    pydb_record *rec = NULL;
    int rc = pydb_read(&rec, w->db, mfn, &w->err);
    if (rc) return rc;
    if (!holds(rec, w->t, i, w->versions[i]))
        mismatch(w, "not the content written", i, mfn);
    else if (!!rec->deleted != deleted)
        mismatch(w, deleted ? "not deleted" : "deleted", i, mfn);
    pydb_record_free(rec);
    return PYDB_OK;
}

/* pydb_write_one(), made again while it times out (PYDB_ELOCKED: it
 * changed nothing). */
static int write_again(worker *w, int32_t *mfn, int op, const pydb_field *f,
                 uint32_t n)
{
    int rc;
    while ((rc = pydb_write_one(mfn, w->db, op, f, n, w->timeout_ms,
                                &w->err)) == PYDB_ELOCKED)
        w->timeouts++;
    return rc;
}

static void *work(void *arg)
{
    worker *w = arg;
    content c;
    int32_t mfn;
    int rc = PYDB_OK;

    for (long i = 0; i < w->each && !rc; i++) {
        make_content(&c, w->t, i, 0);
        rc = write_again(w, &mfn, PYDB_WRITE_APPEND, c.f, 4);
        if (rc) break;
        w->mfns[i] = mfn;
        rc = check(w, i, mfn, 0);
        if (!rc && i % 3 == 0) {
            make_content(&c, w->t, i, ++w->versions[i]);
            rc = write_again(w, &mfn, PYDB_WRITE_UPDATE, c.f, 4);
            if (!rc) rc = check(w, i, mfn, 0);
        }
        if (!rc && i % 5 == 0) {
            rc = write_again(w, &mfn, PYDB_WRITE_DELETE, NULL, 0);
            if (!rc) rc = check(w, i, mfn, 1);
            if (!rc) rc = write_again(w, &mfn, PYDB_WRITE_UNDELETE, NULL, 0);
            if (!rc) rc = check(w, i, mfn, 0);
        }
        if (!rc && i % 7 == 0) {
            int32_t past = 0x7FFFFFF0;
            rc = write_again(w, &past, PYDB_WRITE_UPDATE, c.f, 4);
            if (rc == PYDB_ENOTFOUND && w->err.committed == PYDB_COMMIT_NO)
                rc = PYDB_OK;
            else if (rc == PYDB_OK)
                mismatch(w, "an update past the end worked", i, past);
        }
        if (!rc && i % 11 == 0) {
            int32_t got = 0;
            pydb_field bad = {REFUSED_TAG, 3, (const uint8_t *)"bad"};
            rc = write_again(w, &got, PYDB_WRITE_APPEND, &bad, 1);
            if (rc == PYDB_EINVAL && w->err.committed == PYDB_COMMIT_NO)
                rc = PYDB_OK;
            else if (rc == PYDB_OK)
                mismatch(w, "a refused record was appended", i, got);
        }
    }
    w->rc = rc;
    return NULL;
}

static int fail(const char *what, const pydb_error *e)
{
    fprintf(stderr, "group_commit: %s: %s: %s (file %s, offset %lld)\n",
            what, pydb_strerror(e->code), e->message, e->path,
            (long long)e->offset);
    return 2;
}

static void usage(void)
{
    fputs("usage: group_commit [--threads N] [--each K] [--sync] "
          "[--holder] DIR\n", stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    long threads = 8, each = 200, bad = 0, total, timeouts = 0;
    int sync = 0, holder = 0, rc = 0;
    pydb_commit_hook hook = {refuse, nothing, nothing, NULL, NULL, NULL};
    pthread_t ht;
    const char *dir = NULL;
    char base[1024];
    pydb_options o;
    pydb_db *db = NULL;
    pydb_error e;
    pthread_t th[MAX_THREADS];
    worker w[MAX_THREADS];
    char *seen;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--sync")) sync = 1;
        else if (!strcmp(a, "--holder")) holder = 1;
        else if (!strcmp(a, "--threads") && v) threads = atol(argv[++i]);
        else if (!strcmp(a, "--each") && v) each = atol(argv[++i]);
        else if (a[0] == '-' || dir) usage();
        else dir = a;
    }
    if (!dir || threads < 1 || threads > MAX_THREADS || each < 1) usage();
    snprintf(base, sizeof base, "%s/group", dir);
    memset(&o, 0, sizeof o);
    o.flags = sync ? 0 : PYDB_OPEN_NOSYNC;
    if (pydb_create(&db, base, PYDB_LAYOUT_FFI_PACKED, 0, &o, &e))
        return fail("create", &e);
    if (pydb_set_commit_hook(db, &hook, &e)) return fail("hook", &e);
    if (holder && pthread_create(&ht, NULL, hold, db)) {
        perror("pthread_create");
        return 2;
    }
    memset(w, 0, sizeof w);
    for (long t = 0; t < threads; t++) {
        w[t].db = db;
        w[t].t = t;
        w[t].each = each;
        w[t].timeout_ms = holder ? 2 : 60000;
        w[t].mfns = calloc((size_t)each, sizeof *w[t].mfns);
        w[t].versions = calloc((size_t)each, sizeof *w[t].versions);
        if (!w[t].mfns || !w[t].versions) {
            fputs("group_commit: no memory\n", stderr);
            return 2;
        }
        if (pthread_create(&th[t], NULL, work, &w[t])) {
            perror("pthread_create");
            return 2;
        }
    }
    for (long t = 0; t < threads; t++) pthread_join(th[t], NULL);
    if (holder) {
        __atomic_store_n(&holder_stop, 1, __ATOMIC_RELEASE);
        pthread_join(ht, NULL);
        for (long t = 0; t < threads; t++) timeouts += w[t].timeouts;
        printf("timeouts=%ld\n", timeouts);
    }
    for (long t = 0; t < threads; t++)
        if (w[t].rc && !rc) rc = fail("write", &w[t].err);
    /* every MFN handed out once, and each record as its thread left it */
    total = threads * each;
    seen = calloc((size_t)total + 1, 1);
    for (long t = 0; !rc && seen && t < threads; t++) {
        for (long i = 0; i < each; i++) {
            int32_t m = w[t].mfns[i];
            if (m < 1 || m > total || seen[m]++) {
                mismatch(&w[t], "MFN out of range or handed out twice", i, m);
                continue;
            }
            if (check(&w[t], i, m, 0)) rc = fail("read", &w[t].err);
        }
    }
    free(seen);
    for (long t = 0; t < threads; t++) bad += w[t].mismatches;
    for (long t = 0; t < threads; t++) {
        free(w[t].mfns);
        free(w[t].versions);
    }
    pydb_close(db);
    if (rc) return rc;
    if (bad) {
        printf("%ld mismatches\n", bad);
        return 1;
    }
    printf("ok records=%ld\n", total);
    return 0;
}
