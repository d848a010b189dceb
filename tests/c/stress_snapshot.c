/*
 * stress_snapshot.c - readers with and without snapshots beside a writer,
 * through the public C API alone (pydb.h); run under ThreadSanitizer by
 * tests/test_stress_c.py.
 *
 *   stress_snapshot [--seconds S] [--readers N] [--snap-readers N]
 *                   [--io pread|mmap] [--fork] [--max-commits N]
 *                   [--gc none|background|cooperative|combined] DIR
 *
 * Creates DIR/stress (a new database), then runs for S seconds (default
 * 3): one writer (a thread, or with --fork a child process) commits
 * transactions while N plain readers (default 2) and N snapshot readers
 * (default 2) verify what they read.  Exit status 0 when every check
 * held, 1 on a mismatch (each printed as "MISMATCH ..."), 2 on a failed
 * call or bad usage.  The last lines are "writer commits=C" and "ok
 * plain_reads=R snapshots=S snapshot_reads=T checks=V".
 *
 * The schedule (so that a reader can compute what any commit left):
 *   commit 0     appends MFN 1 (the marker) and MFN 2..N0 (N0 = 100);
 *   commit k>0   updates the marker to content k; "touches" every MFN m
 *                (2 <= m, existing before the commit) with m % P == k % P
 *                (P = 16); and, when k is odd and fewer than AMAX append
 *                commits ran, appends 3 records.
 *   The t-th touch of an MFN: t % 4 == 3 deletes it (logically: a new
 *   version with STATUS 1, fields kept), t % 4 == 0 undeletes it (fields
 *   kept), otherwise it writes content t.
 *   The content "u written at commit j" of MFN m is the fields
 *   1 = m, 2 = u, 3 = j, 4 = payload(m, u) (a length and letter that
 *   depend on both), so every read checks the whole record.
 * A snapshot reads the marker (content K: it holds commit K of the
 * schedule) and then checks NXTMFN, the counts and every MFN against the
 * state of commit K, twice, with commits going on in between (its view
 * must not move), the second time also through its listing
 * (pydb_snapshot_list, pydb_snapshot_read_listed); every 8th also runs
 * the validator on it (pydb_snapshot_check: no fault, and the figures of
 * commit K while the writer goes on).  A plain reader reads the marker (K1), an MFN m, the
 * marker again (K2): m's touches lie between those of commits K1 and K2.
 *
 * Threads share one writing handle in the thread variant (plain and
 * snapshot readers on it and on a second, read-only handle); with --fork
 * every reader uses the read-only handle of the parent and the writer
 * commits from another process, through the commit header.
 *
 * The garbage collector (pydb.h group 9) runs meanwhile: the writing
 * handle is opened with the policy of --gc (default combined: its
 * collector thread, woken by each commit, and cooperative steps of the
 * readers that share the handle).  In the thread variant one more thread
 * (the "gc driver") loops until the end: pydb_stat_get on the writing
 * handle (checked: every active or deleted record has a version, no
 * pinned garbage beyond the garbage, NXTMFN within the schedule),
 * pydb_gc_collect with a short timeout, and every 4th round a policy
 * change (none, then back to --gc: the thread is stopped, joined and
 * started again under the readers' feet).  It prints "gc stats=S
 * collects=C switches=W" before the "ok" line.
 */
#define _GNU_SOURCE
#include "pydb.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N0 100         /* MFNs of commit 0                               */
#define P 16           /* an MFN is touched every P commits              */
#define APPEND 3       /* records per append commit                      */
#define AMAX 300       /* append commits: at most N0 + 900 MFNs          */
#define MAX_MFN (N0 + APPEND * AMAX)
#define MAX_READERS 64

typedef struct {
    const char *dir;
    char base[1024];
    double seconds;
    int readers, snap_readers, io, fork_writer;
    int gc;                 /* the writing handle's pydb_gc_policy      */
    long max_commits;
} config;

typedef struct {
    pydb_db *db;
    int snapshots;          /* 1: a snapshot reader                      */
    unsigned seed;
    double stop;
    long reads, snaps, checks, mismatches, failures;
} reader;

/* ------------------------------------------------------- the schedule */

/* Content of MFN m as some commit left it. */
typedef struct {
    int exists, deleted;
    long u, j;              /* content u, written at commit j            */
} expect;

static long appends_by(long k)  /* append commits among 1..k */
{
    long a = (k + 1) / 2;
    return a < AMAX ? a : AMAX;
}

static long mfns_after(long k)  /* highest MFN after commit k */
{
    return N0 + APPEND * appends_by(k);
}

static long created_at(long m)  /* the commit that appended m */
{
    return m <= N0 ? 0 : 2 * ((m - N0 - 1) / APPEND) + 1;
}

/* The commit of the t-th touch (t >= 1) of MFN m >= 2. */
static long touch_commit(long m, long t)
{
    long c = created_at(m);
    long first = c + 1 + ((m - (c + 1)) % P + P) % P;
    return first + (t - 1) * P;
}

/* Touches of MFN m >= 2 in commits 1..k. */
static long touches_by(long m, long k)
{
    long first = touch_commit(m, 1);
    return k >= first ? (k - first) / P + 1 : 0;
}

/* MFN m as commit k left it. */
static void expected(expect *e, long m, long k)
{
    long t, u;

    memset(e, 0, sizeof *e);
    if (m < 1 || m > mfns_after(k)) return;
    e->exists = 1;
    if (m == 1) {
        e->u = e->j = k;
        return;
    }
    t = touches_by(m, k);
    u = t % 4 == 3 ? t - 1 : t % 4 == 0 && t > 0 ? t - 2 : t;
    e->deleted = t % 4 == 3;
    e->u = u;
    e->j = u ? touch_commit(m, u) : created_at(m);
}

/* ---------------------------------------------------------- records */

typedef struct {
    char s[4][64];
    pydb_field f[4];
} content;

static void make_content(content *c, long m, long u, long j)
{
    long len = (m * 13 + u * 7) % 61 + 1;

    snprintf(c->s[0], sizeof c->s[0], "%ld", m);
    snprintf(c->s[1], sizeof c->s[1], "%ld", u);
    snprintf(c->s[2], sizeof c->s[2], "%ld", j);
    memset(c->s[3], 'a' + (int)((m + u) % 26), (size_t)len);
    c->s[3][len] = 0;
    for (int i = 0; i < 4; i++) {
        c->f[i].tag = (uint32_t)(i + 1);
        c->f[i].len = (uint32_t)strlen(c->s[i]);
        c->f[i].value = (const uint8_t *)c->s[i];
    }
}

/* The content a record holds: 0, or -1 when it is not well formed
 * (fields, MFN, payload). */
static int parse_content(long *u, long *j, const pydb_record *r)
{
    content want;
    char buf[3][64];

    if (r->nfields != 4) return -1;
    for (int i = 0; i < 3; i++) {
        if (r->fields[i].tag != (uint32_t)(i + 1) || r->fields[i].len >= 64)
            return -1;
        memcpy(buf[i], r->fields[i].value, r->fields[i].len);
        buf[i][r->fields[i].len] = 0;
    }
    if (atol(buf[0]) != r->mfn) return -1;
    *u = atol(buf[1]);
    *j = atol(buf[2]);
    make_content(&want, r->mfn, *u, *j);
    for (int i = 0; i < 4; i++)
        if (r->fields[i].tag != want.f[i].tag ||
            r->fields[i].len != want.f[i].len ||
            memcmp(r->fields[i].value, want.f[i].value, want.f[i].len))
            return -1;
    return 0;
}

/* ------------------------------------------------------------- writer */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what, const pydb_error *e)
{
    fprintf(stderr, "stress_snapshot: %s: %s: %s (file %s, offset %lld)\n",
            what, pydb_strerror(e->code), e->message, e->path,
            (long long)e->offset);
    return 2;
}

/* Touch MFN m for the t-th time in commit k. */
static int touch(pydb_txn *t, long m, long nth, long k, pydb_error *e)
{
    content c;

    if (nth % 4 == 3) return pydb_txn_delete(t, (int32_t)m, e);
    if (nth % 4 == 0) return pydb_txn_undelete(t, (int32_t)m, e);
    make_content(&c, m, nth, k);
    return pydb_txn_update(t, (int32_t)m, c.f, 4, e);
}

/* Commit k of the schedule (k = 0: the first records). */
static int commit(pydb_db *db, long k, pydb_error *e)
{
    pydb_txn *t = NULL;
    content c;
    int32_t got;
    long m, from, to;
    int rc;

    rc = pydb_txn_begin(&t, db, 10000, e);
    if (rc) return rc;
    if (k == 0) {
        from = 1;
        to = N0;
    } else {
        make_content(&c, 1, k, k);
        rc = pydb_txn_update(t, 1, c.f, 4, e);
        for (m = 2; !rc && m <= mfns_after(k - 1); m++)
            if (m % P == k % P) rc = touch(t, m, touches_by(m, k), k, e);
        from = mfns_after(k - 1) + 1;
        to = mfns_after(k);
    }
    for (m = from; !rc && m <= to; m++) {
        make_content(&c, m, m == 1 ? k : 0, k);
        rc = pydb_txn_append(&got, t, c.f, 4, e);
        if (!rc && got != m) {
            fprintf(stderr, "stress_snapshot: append got MFN %d, not %ld\n",
                    (int)got, m);
            pydb_txn_abort(t);
            return pydb_error_set(e, PYDB_EINVAL, NULL, -1, "schedule");
        }
    }
    if (rc) {
        pydb_txn_abort(t);
        return rc;
    }
    return pydb_txn_commit(t, e);
}

typedef struct {
    pydb_db *db;
    double stop;
    long max_commits, commits;
    int rc;
    pydb_error err;
} writer;

static void *write_loop(void *arg)
{
    writer *w = arg;
    for (long k = 1; k <= w->max_commits && now() < w->stop; k++) {
        w->rc = commit(w->db, k, &w->err);
        if (w->rc) break;
        w->commits = k;
    }
    return NULL;
}

/* ------------------------------------------------------------ readers */

static void mismatch(reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void mismatch(reader *r, const char *fmt, ...)
{
    va_list ap;
    r->mismatches++;
    if (r->mismatches > 20) return;
    va_start(ap, fmt);
    fputs("MISMATCH ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
}

/* One read failed: a call error counts as a mismatch too (a reader never
 * fails on sound files). */
static void failed(reader *r, const char *what, long m, const pydb_error *e)
{
    r->failures++;
    mismatch(r, "%s of MFN %ld: %s: %s", what, m, pydb_strerror(e->code),
             e->message);
}

/* Compare a record read with MFN m as commit k left it. */
static void compare(reader *r, const pydb_record *rec, long m, long k,
                    const char *how)
{
    expect x;
    long u, j;

    expected(&x, m, k);
    if (parse_content(&u, &j, rec))
        mismatch(r, "%s: MFN %ld is not a record the writer wrote", how, m);
    else if (u != x.u || j != x.j || rec->deleted != x.deleted)
        mismatch(r, "%s: MFN %ld at commit %ld: content %ld of commit %ld%s, "
                 "expected content %ld of commit %ld%s", how, m, k, u, j,
                 rec->deleted ? " (deleted)" : "", x.u, x.j,
                 x.deleted ? " (deleted)" : "");
}

/* Check every MFN, NXTMFN and the counts of the snapshot against commit
 * k of the schedule. */
static void check_snapshot(reader *r, const pydb_snapshot *s, long k,
                           pydb_record **rec)
{
    pydb_snapshot_info info;
    pydb_counts cnt;
    pydb_error e;
    long m, n = mfns_after(k), active = 0, deleted = 0;
    int rc;

    pydb_snapshot_info_get(&info, s);
    if (info.next_mfn != n + 1)
        mismatch(r, "snapshot of commit %ld: NXTMFN %d, expected %ld", k,
                 (int)info.next_mfn, n + 1);
    for (m = 1; m <= n; m++) {
        expect x;
        expected(&x, m, k);
        if (x.deleted) deleted++;
        else active++;
        rc = pydb_snapshot_read(rec, s, (int32_t)m, &e);
        if (rc) {
            failed(r, "snapshot read", m, &e);
            continue;
        }
        r->reads++;
        compare(r, *rec, m, k, "snapshot");
    }
    rc = pydb_snapshot_read(rec, s, (int32_t)(n + 1), &e);
    if (rc != PYDB_ENOTFOUND)
        mismatch(r, "snapshot of commit %ld: MFN %ld (created later) read "
                 "with %s", k, n + 1, pydb_strerror(rc));
    rc = pydb_snapshot_count(&cnt, s, &e);
    if (rc)
        failed(r, "snapshot count", 0, &e);
    else if (cnt.active != active || cnt.ldeleted != deleted)
        mismatch(r, "snapshot of commit %ld: counts %d active %d deleted, "
                 "expected %ld %ld", k, (int)cnt.active, (int)cnt.ldeleted,
                 active, deleted);
}

/* Every MFN of the snapshot through its listing (pydb_snapshot_list,
 * deleted records included, a few per call) and
 * pydb_snapshot_read_listed(): MFNs 1..N in order, each as commit k left
 * it, while the collector may switch the files under the reads. */
static void check_listed(reader *r, const pydb_snapshot *s, long k,
                         pydb_record **rec)
{
    pydb_listed l[40];
    pydb_error e;
    long n = mfns_after(k), want = 1;
    int32_t next = 1;
    size_t got = 1;
    int rc;

    while (next <= n && got > 0) {
        rc = pydb_snapshot_list(l, 40, &got, &next, s, next, 1, &e);
        if (rc) {
            failed(r, "snapshot list", want, &e);
            return;
        }
        for (size_t i = 0; i < got; i++, want++) {
            if (l[i].mfn != want) {
                mismatch(r, "snapshot of commit %ld: listed MFN %d where "
                         "%ld was due", k, (int)l[i].mfn, want);
                return;
            }
            rc = pydb_snapshot_read_listed(rec, s, &l[i], &e);
            if (rc) {
                failed(r, "listed read", want, &e);
                continue;
            }
            r->reads++;
            compare(r, *rec, want, k, "listed");
        }
    }
    if (want != n + 1)
        mismatch(r, "snapshot of commit %ld: %ld MFNs listed, expected %ld",
                 k, want - 1, n);
}

/* The commit a snapshot holds: the content of its marker, or -1. */
static long snapshot_commit(reader *r, const pydb_snapshot *s,
                            pydb_record **rec)
{
    pydb_error e;
    long u, j;

    if (pydb_snapshot_read(rec, s, 1, &e)) {
        failed(r, "snapshot read", 1, &e);
        return -1;
    }
    if (parse_content(&u, &j, *rec)) {
        mismatch(r, "snapshot: the marker is not a record the writer wrote");
        return -1;
    }
    return u;
}

/* The validator on the snapshot: no fault in the state of commit k,
 * and that state's figures (every MFN current, one back version per
 * touch that wrote a version). */
static void validate(reader *r, const pydb_snapshot *s, long k)
{
    pydb_check_summary sum;
    pydb_error e;
    long m, back = 0;

    if (pydb_snapshot_check(&sum, s, NULL, &e)) {
        failed(r, "snapshot check", 0, &e);
        return;
    }
    back = k;                            /* the marker: one per commit */
    for (m = 2; m <= mfns_after(k); m++) back += touches_by(m, k);
    if (sum.errors || sum.warnings || sum.mfns != mfns_after(k) ||
        sum.versions != mfns_after(k) ||
        /* a compaction (the collector's) removes back versions */
        sum.back_versions > back ||
        !sum.scanned)
        mismatch(r, "snapshot check of commit %ld: %lld errors, %lld "
                 "warnings, %d MFNs, %lld versions, %lld back versions "
                 "(expected 0 0 %ld %ld <= %ld)", k, (long long)sum.errors,
                 (long long)sum.warnings, (int)sum.mfns,
                 (long long)sum.versions, (long long)sum.back_versions,
                 mfns_after(k), mfns_after(k), back);
    r->checks++;
}

static void snapshot_round(reader *r, pydb_record **rec)
{
    pydb_snapshot *s = NULL;
    pydb_error e;
    long k, again;
    int rc;

    rc = pydb_snapshot_take(&s, r->db, &e);
    if (rc) {
        failed(r, "snapshot take", 0, &e);
        return;
    }
    r->snaps++;
    k = snapshot_commit(r, s, rec);
    if (k >= 0 && r->snaps % 8 == 1) validate(r, s, k);
    if (k >= 0) {
        check_snapshot(r, s, k, rec);
        usleep(1000);          /* commits go on meanwhile */
        again = snapshot_commit(r, s, rec);
        if (again != k)
            mismatch(r, "snapshot of commit %ld: the marker now says %ld",
                     k, again);
        else {
            check_snapshot(r, s, k, rec);
            check_listed(r, s, k, rec);
        }
    }
    pydb_snapshot_release(s);
}

/* The marker's content through a plain read, or -1. */
static long plain_commit(reader *r, pydb_record **rec)
{
    pydb_error e;
    long u, j;

    if (pydb_read(rec, r->db, 1, &e)) {
        failed(r, "read", 1, &e);
        return -1;
    }
    if (parse_content(&u, &j, *rec)) {
        mismatch(r, "read: the marker is not a record the writer wrote");
        return -1;
    }
    return u;
}

static void plain_round(reader *r, pydb_record **rec)
{
    pydb_error e;
    expect lo, hi;
    long k1, k2, m, u, j, t;
    int rc;

    k1 = plain_commit(r, rec);
    if (k1 < 0) return;
    m = 2 + (long)(rand_r(&r->seed) % (unsigned)(MAX_MFN - 1));
    rc = pydb_read(rec, r->db, (int32_t)m, &e);
    if (rc && rc != PYDB_ENOTFOUND) {
        failed(r, "read", m, &e);
        return;
    }
    k2 = plain_commit(r, rec + 1);
    if (k2 < 0) return;
    r->reads++;
    expected(&lo, m, k1);
    expected(&hi, m, k2);
    if (rc == PYDB_ENOTFOUND) {
        if (lo.exists)
            mismatch(r, "read: MFN %ld not found, but commit %ld had it", m,
                     k1);
        return;
    }
    if (!hi.exists) {
        mismatch(r, "read: MFN %ld found, but commit %ld did not have it",
                 m, k2);
        return;
    }
    if (parse_content(&u, &j, *rec)) {
        mismatch(r, "read: MFN %ld is not a record the writer wrote", m);
        return;
    }
    /* The content must be one that a commit in k1..k2 left. */
    t = touches_by(m, k1);
    for (;; t++) {
        expect x;
        long k = t ? touch_commit(m, t) : created_at(m);
        if (k > k2) {
            mismatch(r, "read: MFN %ld holds content %ld of commit %ld%s, "
                     "which no commit in %ld..%ld left", m, u, j,
                     (*rec)->deleted ? " (deleted)" : "", k1, k2);
            return;
        }
        expected(&x, m, k < k1 ? k1 : k);
        if (x.u == u && x.j == j && x.deleted == (*rec)->deleted) return;
    }
}

static void *read_loop(void *arg)
{
    reader *r = arg;
    pydb_record *rec[2] = {NULL, NULL};

    while (now() < r->stop) {
        if (r->snapshots) snapshot_round(r, rec);
        else plain_round(r, rec);
    }
    pydb_record_free(rec[0]);
    pydb_record_free(rec[1]);
    return NULL;
}

/* --------------------------------------------------------------- main */

static void usage(void)
{
    fputs("usage: stress_snapshot [--seconds S] [--readers N] "
          "[--snap-readers N]\n"
          "                       [--io pread|mmap] [--fork] "
          "[--max-commits N]\n"
          "                       [--gc none|background|cooperative|combined]"
          " DIR\n", stderr);
    exit(2);
}

static void parse(config *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->seconds = 3;
    c->readers = 2;
    c->snap_readers = 2;
    c->io = PYDB_IO_PREAD;
    c->max_commits = 100000;
    c->gc = PYDB_GC_COMBINED;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--fork")) { c->fork_writer = 1; continue; }
        if (a[0] != '-') { c->dir = a; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--seconds")) c->seconds = atof(v);
        else if (!strcmp(a, "--readers")) c->readers = atoi(v);
        else if (!strcmp(a, "--snap-readers")) c->snap_readers = atoi(v);
        else if (!strcmp(a, "--max-commits")) c->max_commits = atol(v);
        else if (!strcmp(a, "--io")) c->io = pydb_io_from_name(v);
        else if (!strcmp(a, "--gc")) c->gc = pydb_gc_policy_from_name(v);
        else usage();
    }
    if (!c->dir || c->seconds <= 0 || c->readers < 0 || c->snap_readers < 0 ||
        c->readers + c->snap_readers > MAX_READERS || c->max_commits < 1 ||
        c->io < 0 || c->io == PYDB_IO_DIRECT || c->gc < 0)
        usage();
    snprintf(c->base, sizeof c->base, "%s/stress", c->dir);
}

/* ------------------------------------------------------ the gc driver */

typedef struct {
    pydb_db *db;            /* the writing handle                        */
    int policy;             /* --gc                                      */
    double stop;
    long stats, collects, switches, failures;
    pydb_error err;
} gc_driver;

/* Statistics, collections and policy switches on the writing handle
 * while the writer and the readers run.  A collection may time out
 * (PYDB_ELOCKED: the writer holds the lock); anything else fails. */
static void *gc_loop(void *arg)
{
    gc_driver *d = arg;
    pydb_stat *s = malloc(sizeof *s);
    pydb_gc_report r;
    pydb_error e;
    int rc;

    if (!s) {
        d->failures++;
        return NULL;
    }
    for (long round = 0; now() < d->stop; round++) {
        rc = pydb_stat_get(s, d->db, &e);
        if (rc == PYDB_OK) {
            d->stats++;
            if (s->next_mfn < N0 + 1 || s->next_mfn > MAX_MFN + 1 ||
                s->versions != s->active + s->deleted + s->back_versions ||
                s->garbage_versions != s->back_versions ||
                s->pinned_versions > s->garbage_versions ||
                s->live_bytes > s->mst_size) {
                printf("MISMATCH stat: next_mfn %d active %lld deleted %lld "
                       "versions %lld back %lld pinned %lld\n",
                       (int)s->next_mfn, (long long)s->active,
                       (long long)s->deleted, (long long)s->versions,
                       (long long)s->back_versions,
                       (long long)s->pinned_versions);
                d->failures++;
            }
        } else if (rc != PYDB_ELOCKED) {
            d->err = e;
            d->failures++;
            break;
        }
        rc = pydb_gc_collect(&r, d->db, 20, &e);
        if (rc == PYDB_OK) d->collects++;
        else if (rc != PYDB_ELOCKED) {
            d->err = e;
            d->failures++;
            break;
        }
        if (round % 4 == 3) {
            rc = pydb_gc_set_policy(d->db, round % 8 == 3 ? PYDB_GC_NONE
                                                          : d->policy, &e);
            if (rc) {
                d->err = e;
                d->failures++;
                break;
            }
            d->switches++;
        }
        usleep(20000);
    }
    free(s);
    return NULL;
}

/* The writer process of --fork: commits until `stop`; exit status 0 or
 * 2.  Prints "commits=C". */
static int writer_process(const config *c, double stop)
{
    pydb_options o = {c->io, PYDB_LOCK_NONE,
                      PYDB_OPEN_WRITE | PYDB_OPEN_NOSYNC | PYDB_OPEN_GC(c->gc)};
    writer w;

    memset(&w, 0, sizeof w);
    if (pydb_open(&w.db, c->base, &o, &w.err)) return fail("open", &w.err);
    w.stop = stop;
    w.max_commits = c->max_commits;
    write_loop(&w);
    pydb_close(w.db);
    if (w.rc) return fail("commit", &w.err);
    printf("writer commits=%ld\n", w.commits);
    fflush(stdout);           /* the child leaves with _exit() */
    return 0;
}

int main(int argc, char **argv)
{
    config c;
    pydb_options wo, ro;
    pydb_db *wdb = NULL, *rdb = NULL;
    pydb_error e;
    pthread_t wt, gt, rt[MAX_READERS];
    reader rd[MAX_READERS];
    writer w;
    gc_driver gd;
    pid_t child = -1;
    long reads = 0, snaps = 0, snap_reads = 0, checks = 0, bad = 0;
    double stop;
    int n, rc, status;

    parse(&c, argc, argv);
    memset(&wo, 0, sizeof wo);
    wo.io = c.io;
    wo.flags = PYDB_OPEN_NOSYNC | PYDB_OPEN_GC(c.gc);
    if ((rc = pydb_create(&wdb, c.base, PYDB_LAYOUT_FFI_PACKED, 0, &wo, &e)))
        return fail("create", &e);
    if ((rc = commit(wdb, 0, &e))) return fail("commit 0", &e);
    stop = now() + c.seconds;
    if (c.fork_writer) {
        pydb_close(wdb);
        wdb = NULL;
        fflush(stdout);
        child = fork();
        if (child < 0) {
            perror("fork");
            return 2;
        }
        if (child == 0) _exit(writer_process(&c, stop));
    }
    memset(&ro, 0, sizeof ro);
    ro.io = c.io;
    if ((rc = pydb_open(&rdb, c.base, &ro, &e))) return fail("open", &e);
    memset(&w, 0, sizeof w);
    w.db = wdb;
    w.stop = stop;
    w.max_commits = c.max_commits;
    if (!c.fork_writer && pthread_create(&wt, NULL, write_loop, &w)) {
        perror("pthread_create");
        return 2;
    }
    memset(&gd, 0, sizeof gd);
    gd.db = wdb;
    gd.policy = c.gc;
    gd.stop = stop;
    if (!c.fork_writer && pthread_create(&gt, NULL, gc_loop, &gd)) {
        perror("pthread_create");
        return 2;
    }
    n = c.readers + c.snap_readers;
    for (int i = 0; i < n; i++) {
        memset(&rd[i], 0, sizeof rd[i]);
        rd[i].snapshots = i >= c.readers;
        /* the thread variant shares the writer's handle with half */
        rd[i].db = wdb && i % 2 ? wdb : rdb;
        rd[i].seed = (unsigned)i * 7919u + 17u;
        rd[i].stop = stop;
        if (pthread_create(&rt[i], NULL, read_loop, &rd[i])) {
            perror("pthread_create");
            return 2;
        }
    }
    for (int i = 0; i < n; i++) {
        pthread_join(rt[i], NULL);
        bad += rd[i].mismatches;
        if (rd[i].snapshots) {
            snaps += rd[i].snaps;
            checks += rd[i].checks;
            snap_reads += rd[i].reads;
        } else {
            reads += rd[i].reads;
        }
    }
    rc = 0;
    if (c.fork_writer) {
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "stress_snapshot: the writer process failed\n");
            rc = 2;
        }
    } else {
        pthread_join(wt, NULL);
        pthread_join(gt, NULL);
        if (w.rc) rc = fail("commit", &w.err);
        printf("writer commits=%ld\n", w.commits);
        if (gd.failures) {
            if (gd.err.code) fail("gc driver", &gd.err);
            bad += gd.failures;
        }
        printf("gc stats=%ld collects=%ld switches=%ld\n", gd.stats,
               gd.collects, gd.switches);
    }
    pydb_close(rdb);
    pydb_close(wdb);
    if (rc) return rc;
    if (bad) {
        printf("%ld mismatches\n", bad);
        return 1;
    }
    printf("ok plain_reads=%ld snapshots=%ld snapshot_reads=%ld checks=%ld\n",
           reads, snaps, snap_reads, checks);
    return 0;
}
