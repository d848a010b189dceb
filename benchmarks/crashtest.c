/*
 * pydb-crashtest - the pure-C threaded read benchmark (docs/experiments.md §1).
 *
 * After OpenIsis 0.9's crashtest: read every record 1..max MFN in one
 * thread ("sequential read"), then run 8, 2, 1 and 4 threads, each reading
 * the whole list of records (each thread starting at a different offset in
 * the list and wrapping), and report the rows per second of all threads
 * together.  The list comes from one of three row sources:
 *   --prefix P  the original's index phase: enumerate the keys of the
 *               database's inverted index (the native index, else the
 *               ISIS inverted file) that start with P in key form, print
 *               "N terms" and "M postings max mfn X", and read the MFN of
 *               every posting of those keys, in key order (a record named
 *               by several postings is read several times);
 *   --list FILE the MFNs in FILE, one per line;
 *   neither     the active MFNs of the XRF.
 * Python's twin is pydb/crashtest.py; `python -m pydb crashtest` runs
 * both and compares them.
 *
 * --snapshot reads through snapshots (pydb.h group 3b): the sequential
 * read and each thread take one snapshot before they start and read
 * every record with pydb_snapshot_read() (rows from the snapshot's
 * commit, whatever a writer does meanwhile).  --snapshot-cost N measures
 * instead the cost of pinning a commit: N rounds of pydb_snapshot_take()
 * + pydb_snapshot_release() in one thread, printed as nanoseconds per
 * round ("snapshot take+release ..."; JSON phase "snapshot-cost").
 *
 * Uses only the public header pydb.h.
 */
#define _GNU_SOURCE
#include "pydb.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *db_path;
    const char *list_path; /* NULL: the XRF's active MFNs */
    const char *prefix;    /* index phase: keys with this prefix */
    int threads[16], nthreads;
    const char *cache;     /* warm | cold | direct */
    int lock;
    int io;                /* for warm/cold */
    int reps;
    double min_time;
    double max_time;
    int json;
    int snapshot;          /* read through one snapshot per reader      */
    long snapshot_cost;    /* > 0: only time this many take+release     */
} config;

typedef struct {
    pydb_db *db;
    int snapshot;          /* read through a snapshot taken at the start */
    const int32_t *mfns;
    size_t n;
    size_t start;
    double deadline;       /* monotonic seconds; passes repeat until then */
    double stop;           /* monotonic seconds; a pass is cut off then    */
    pthread_barrier_t *barrier;
    long long rows;
    int rc;
    pydb_error err;
} worker;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Report e ("pydb-crashtest: open: No such file or directory: ...": the
 * system's word for an I/O error that has an errno, else the core's) and
 * exit with status 2. */
static void die(const char *what, const pydb_error *e)
{
    const char *kind = e->code == PYDB_EIO && e->sys_errno
                           ? strerror(e->sys_errno) : pydb_strerror(e->code);
    fprintf(stderr, "pydb-crashtest: %s: %s: %s", what, kind, e->message);
    if (e->path[0] && e->offset >= 0)
        fprintf(stderr, " (file %s, offset %lld)", e->path,
                (long long)e->offset);
    else if (e->path[0])
        fprintf(stderr, " (file %s)", e->path);
    fputc('\n', stderr);
    exit(2);
}

static void *work(void *arg)
{
    worker *w = arg;
    pydb_record *rec = NULL;
    pydb_snapshot *snap = NULL;
    w->rows = 0;
    w->rc = 0;
    if (w->snapshot) w->rc = pydb_snapshot_take(&snap, w->db, &w->err);
    pthread_barrier_wait(w->barrier);
    if (w->rc) goto out;
    do {
        for (size_t i = 0; i < w->n; i++) {
            int32_t mfn = w->mfns[(w->start + i) % w->n];
            w->rc = snap ? pydb_snapshot_read(&rec, snap, mfn, &w->err)
                         : pydb_read(&rec, w->db, mfn, &w->err);
            if (w->rc) goto out;
            w->rows++;
            if ((w->rows & 255) == 0 && now() >= w->stop) goto out;
        }
    } while (now() < w->deadline);
out:
    pydb_record_free(rec);
    pydb_snapshot_release(snap);
    return NULL;
}

static void report(const config *c, const char *phase, int threads,
                   int rep, long long rows, double secs)
{
    double rps = secs > 0 ? (double)rows / secs : 0.0;
    if (c->json) {
        printf("{\"impl\": \"c\", \"phase\": \"%s\", \"threads\": %d, "
               "\"rep\": %d, \"rows\": %lld, \"seconds\": %.9f, "
               "\"rows_per_sec\": %.3f, \"cache\": \"%s\", \"lock\": \"%s\"}\n",
               phase, threads, rep, rows, secs, rps, c->cache,
               c->lock ? "mutex" : "none");
    } else if (strcmp(phase, "seq") == 0) {
        printf("sequential read %lld rows in %.3f seconds %.0f rows per sec\n",
               rows, secs, rps);
    } else {
        printf("%d threads  %.0f rows per sec\n", threads, rps);
    }
    fflush(stdout);
}

/* The usage text: on stdout with status 0 when asked for (--help), else
 * on stderr with status 2 (bad usage). */
static void usage_to(FILE *out, int status)
{
    fputs("usage: pydb-crashtest [--threads 8,2,1,4] [--cache warm|cold|direct]\n"
          "                      [--lock none|mutex] [--io pread|mmap]\n"
          "                      [--reps N] [--min-time SECONDS]\n"
          "                      [--max-time SECONDS] [--prefix P | --list FILE]\n"
          "                      [--snapshot] [--snapshot-cost N] [--json] DB\n"
          "A pass reads the whole list once, repeats until --min-time has\n"
          "passed (default 0), and is cut off after --max-time (default 60).\n"
          "--prefix P: read the records named by the postings of the index\n"
          "keys that start with P (native index, else the ISIS inverted file).\n"
          "--list FILE: read the MFNs in FILE (one per line).\n"
          "Neither: read the XRF's active records.\n"
          "--snapshot: read through one snapshot per thread.\n"
          "--snapshot-cost N: time N snapshot take+release rounds only.\n"
          "Exit status: 0 done; 2 bad usage, or a read or open failed (the\n"
          "reason on stderr).\n",
          out);
    exit(status);
}

static void usage(void)
{
    usage_to(stderr, 2);
}

/* Read the MFN list of --list: decimal MFNs 1..maxmfn, one per line. */
/* Append m to the growing list v (n used, cap allocated); exits on no
 * memory. */
static void push_mfn(int32_t **v, size_t *n, size_t *cap, int32_t m)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4096;
        *v = realloc(*v, *cap * sizeof **v);
        if (!*v) { perror("realloc"); exit(2); }
    }
    (*v)[(*n)++] = m;
}

static int32_t *read_list(const char *path, int32_t maxmfn, size_t *n)
{
    FILE *f = fopen(path, "r");
    int32_t *v = NULL;
    size_t cap = 0;
    long long m;
    int got;

    *n = 0;
    if (!f) {
        fprintf(stderr, "pydb-crashtest: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    while ((got = fscanf(f, "%lld", &m)) == 1) {
        if (m < 1 || m > maxmfn) {
            fprintf(stderr, "pydb-crashtest: %s: MFN %lld outside 1..%d\n",
                    path, m, (int)maxmfn);
            exit(2);
        }
        push_mfn(&v, n, &cap, (int32_t)m);
    }
    if (got != EOF) {
        fprintf(stderr, "pydb-crashtest: %s: not a list of MFNs\n", path);
        exit(2);
    }
    fclose(f);
    return v;
}

static void parse(config *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->threads[0] = 8; c->threads[1] = 2; c->threads[2] = 1; c->threads[3] = 4;
    c->nthreads = 4;
    c->cache = "warm";
    c->reps = 1;
    c->io = PYDB_IO_MMAP;
    c->max_time = 60;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage_to(stdout, 0);
        if (!strcmp(a, "--json")) { c->json = 1; continue; }
        if (!strcmp(a, "--snapshot")) { c->snapshot = 1; continue; }
        if (a[0] != '-') { c->db_path = a; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--threads")) {
            char *s = strdup(v), *tok, *save = NULL;
            c->nthreads = 0;
            for (tok = strtok_r(s, ",", &save); tok && c->nthreads < 16;
                 tok = strtok_r(NULL, ",", &save)) {
                int t = atoi(tok);
                if (t < 1 || t > 1024) usage();
                c->threads[c->nthreads++] = t;
            }
            free(s);
        } else if (!strcmp(a, "--list")) {
            c->list_path = v;
        } else if (!strcmp(a, "--prefix")) {
            c->prefix = v;
        } else if (!strcmp(a, "--cache")) {
            if (strcmp(v, "warm") && strcmp(v, "cold") && strcmp(v, "direct"))
                usage();
            c->cache = v;
        } else if (!strcmp(a, "--lock")) {
            if (!strcmp(v, "none")) c->lock = PYDB_LOCK_NONE;
            else if (!strcmp(v, "mutex")) c->lock = PYDB_LOCK_MUTEX;
            else usage();
        } else if (!strcmp(a, "--io")) {
            c->io = pydb_io_from_name(v);
            if (c->io < 0 || c->io == PYDB_IO_DIRECT) usage();
        } else if (!strcmp(a, "--reps")) {
            c->reps = atoi(v);
            if (c->reps < 1) usage();
        } else if (!strcmp(a, "--max-time")) {
            c->max_time = atof(v);
            if (c->max_time <= 0) usage();
        } else if (!strcmp(a, "--min-time")) {
            c->min_time = atof(v);
            if (c->min_time < 0) usage();
        } else if (!strcmp(a, "--snapshot-cost")) {
            c->snapshot_cost = atol(v);
            if (c->snapshot_cost < 1) usage();
        } else usage();
    }
    if (!c->db_path || (c->prefix && c->list_path)) usage();
}

/* ---- index phase ---------------------------------------------------- */

typedef struct {
    uint8_t *buf;          /* the keys, each preceded by its length      */
    size_t len, cap;
    size_t nkeys;
    int oom;
} keylist;

static int collect_key(void *ctx, const uint8_t *key, size_t len,
                       uint64_t count)
{
    keylist *k = ctx;
    (void)count;
    if (k->len + sizeof(size_t) + len > k->cap) {
        size_t cap = k->cap ? k->cap : 65536;
        while (cap < k->len + sizeof(size_t) + len) cap *= 2;
        uint8_t *b = realloc(k->buf, cap);
        if (!b) { k->oom = 1; return 1; }  /* stops the scan */
        k->buf = b;
        k->cap = cap;
    }
    memcpy(k->buf + k->len, &len, sizeof len);
    memcpy(k->buf + k->len + sizeof len, key, len);
    k->len += sizeof len + len;
    k->nkeys++;
    return 0;
}

/* The original's index phase: open the native index of the database (else
 * its ISIS inverted file), enumerate the keys that start with `prefix`
 * (brought into key form by the index), and return the MFN of every
 * posting of every key, in key order; *nterms gets the number of keys. */
static int32_t *index_rows(const char *db_path, const char *prefix,
                           int32_t maxmfn, size_t *n, size_t *nterms,
                           double *secs)
{
    pydb_index *ix = NULL;
    pydb_error e;
    pydb_postings p = {0};
    keylist keys = {0};
    uint8_t kp[1024];
    size_t kp_len = 0, cap = 0, off = 0;
    int32_t *v = NULL;
    int rc;
    double t0 = now();

    *n = *nterms = 0;
    rc = pydb_native_index_open(&ix, db_path, &e);
    if (rc == PYDB_EIO && e.sys_errno == ENOENT)
        rc = pydb_isis_index_open(&ix, db_path, PYDB_KEYS_DOS, &e);
    if (rc == PYDB_EIO && e.sys_errno == ENOENT) {
        fprintf(stderr, "pydb-crashtest: %s has no inverted index (no native "
                "index, no ISIS inverted file); --prefix needs one\n", db_path);
        exit(2);
    }
    if (rc) die("open index", &e);
    if ((rc = pydb_index_key(kp, sizeof kp, &kp_len, ix,
                             (const uint8_t *)prefix, strlen(prefix), &e)))
        die("prefix", &e);
    if ((rc = pydb_index_terms(ix, kp, kp_len, NULL, 0, collect_key, &keys,
                               &e)))
        die("index terms", &e);
    if (keys.oom) {
        fputs("pydb-crashtest: out of memory collecting keys\n", stderr);
        exit(2);
    }
    for (size_t k = 0; k < keys.nkeys; k++) {
        size_t len;
        memcpy(&len, keys.buf + off, sizeof len);
        p.n = 0;
        if ((rc = pydb_index_postings(&p, ix, keys.buf + off + sizeof len,
                                      len, &e)))
            die("index postings", &e);
        off += sizeof len + len;
        for (size_t i = 0; i < p.n; i++) {
            if (p.v[i].mfn < 1 || p.v[i].mfn > maxmfn) {
                fprintf(stderr, "pydb-crashtest: posting names MFN %d outside "
                        "1..%d\n", (int)p.v[i].mfn, (int)maxmfn);
                exit(2);
            }
            push_mfn(&v, n, &cap, p.v[i].mfn);
        }
    }
    *nterms = keys.nkeys;
    *secs = now() - t0;
    pydb_postings_free(&p);
    free(keys.buf);
    pydb_index_close(ix);
    return v;
}

/* --snapshot-cost: `rounds` snapshot take+release pairs in this thread,
 * after a warm-up; prints the nanoseconds per pair.  Exits on failure. */
static void snapshot_cost(const config *c, pydb_db *db, long rounds)
{
    pydb_snapshot *snap;
    pydb_snapshot_info info;
    pydb_error e;
    double t0, secs, ns;

    for (long i = 0; i < rounds / 10 + 1; i++) {
        if (pydb_snapshot_take(&snap, db, &e)) die("snapshot", &e);
        pydb_snapshot_release(snap);
    }
    if (pydb_snapshot_take(&snap, db, &e)) die("snapshot", &e);
    pydb_snapshot_info_get(&info, snap);
    pydb_snapshot_release(snap);
    t0 = now();
    for (long i = 0; i < rounds; i++) {
        if (pydb_snapshot_take(&snap, db, &e)) die("snapshot", &e);
        pydb_snapshot_release(snap);
    }
    secs = now() - t0;
    ns = secs * 1e9 / (double)rounds;
    if (c->json)
        printf("{\"impl\": \"c\", \"phase\": \"snapshot-cost\", "
               "\"rounds\": %ld, \"seconds\": %.9f, \"ns_per_op\": %.1f, "
               "\"registered\": %d}\n", rounds, secs, ns, info.registered);
    else
        printf("snapshot take+release %ld rounds in %.3f seconds %.1f ns "
               "each (%s)\n", rounds, secs, ns,
               info.registered ? "registered in the reader table"
                               : "files mode: not registered");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    config c;
    pydb_db *db;
    pydb_options opt;
    pydb_error e;
    pydb_record *rec = NULL;
    int32_t *mfns = NULL, next = 1, maxmfn;
    size_t n = 0, cap = 0, got, nterms = 0;
    double index_secs = 0;
    int rc;

    parse(&c, argc, argv);
    memset(&opt, 0, sizeof opt);
    opt.io = strcmp(c.cache, "direct") == 0 ? PYDB_IO_DIRECT : c.io;
    opt.lock = c.lock;
    if ((rc = pydb_open(&db, c.db_path, &opt, &e))) die("open", &e);
    if (c.snapshot_cost) {
        snapshot_cost(&c, db, c.snapshot_cost);
        pydb_close(db);
        return 0;
    }
    maxmfn = pydb_max_mfn(db);
    if (c.prefix)
        mfns = index_rows(c.db_path, c.prefix, maxmfn, &n, &nterms,
                          &index_secs);
    else if (c.list_path) mfns = read_list(c.list_path, maxmfn, &n);
    else while (next <= maxmfn) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            mfns = realloc(mfns, cap * sizeof *mfns);
            if (!mfns) { perror("realloc"); return 2; }
        }
        if ((rc = pydb_list_mfns(mfns + n, cap - n, &got, &next, db, next, 0, &e)))
            die("XRF scan", &e);
        n += got;
    }
    if (c.json && c.prefix) {
        printf("{\"impl\": \"c\", \"phase\": \"index\", \"prefix\": \"");
        for (const unsigned char *q = (const unsigned char *)c.prefix; *q; q++) {
            if (*q < 0x20 || *q == '"' || *q == '\\') printf("\\u%04x", *q);
            else putchar(*q);
        }
        printf("\", \"terms\": %zu, \"postings\": %zu, \"max_mfn\": %d, "
               "\"seconds\": %.9f}\n", nterms, n, (int)maxmfn, index_secs);
    } else if (c.prefix) {
        printf("%zu terms\n", nterms);
        printf("%zu postings max mfn %d\n", n, (int)maxmfn);
    }
    if (n == 0) {
        if (c.prefix)
            fprintf(stderr, "pydb-crashtest: no postings under the prefix %s "
                    "in %s\n", c.prefix, c.db_path);
        else if (c.list_path)
            fprintf(stderr, "pydb-crashtest: %s lists no MFNs\n", c.list_path);
        else
            fprintf(stderr, "pydb-crashtest: %s has no active records\n",
                    c.db_path);
        free(mfns);
        pydb_close(db);
        return 2;
    }
    if (c.json || c.prefix) {
        /* header already printed (or none in JSON) */
    } else if (c.list_path) {
        printf("%zu rows max mfn %d\n", n, (int)maxmfn);
    } else {
        printf("%zu records (from the XRF; no index phase)\n", n);
        printf("%zu rows max mfn %d\n", n, (int)maxmfn);
    }
    for (int rep = 0; rep < c.reps; rep++) {
        long long rows = 0;
        double t0, secs, deadline, stop;
        pydb_snapshot *snap = NULL;
        if (!strcmp(c.cache, "cold") && (rc = pydb_drop_cache(db, &e)))
            die("drop cache", &e);
        t0 = now();
        if (c.snapshot && (rc = pydb_snapshot_take(&snap, db, &e)))
            die("snapshot", &e);
        deadline = t0 + c.min_time;
        stop = t0 + c.max_time;
        do {
            for (int32_t m = 1; m <= maxmfn; m++) {
                rc = snap ? pydb_snapshot_read(&rec, snap, m, &e)
                          : pydb_read(&rec, db, m, &e);
                if (rc == PYDB_ENOTFOUND) continue;
                if (rc) die("sequential read", &e);
                rows++;
                if ((rows & 255) == 0 && now() >= stop) goto seq_done;
            }
        } while (now() < deadline);
    seq_done:
        secs = now() - t0;
        pydb_snapshot_release(snap);
        report(&c, "seq", 1, rep, rows, secs);
    }
    for (int ti = 0; ti < c.nthreads; ti++) {
        int t = c.threads[ti];
        for (int rep = 0; rep < c.reps; rep++) {
            pthread_t *tid = calloc((size_t)t, sizeof *tid);
            worker *w = calloc((size_t)t, sizeof *w);
            pthread_barrier_t barrier;
            long long rows = 0;
            double t0, secs;
            if (!tid || !w) { perror("calloc"); return 2; }
            if (!strcmp(c.cache, "cold") && (rc = pydb_drop_cache(db, &e)))
                die("drop cache", &e);
            pthread_barrier_init(&barrier, NULL, (unsigned)t + 1);
            for (int i = 0; i < t; i++) {
                w[i].db = db;
                w[i].snapshot = c.snapshot;
                w[i].mfns = mfns;
                w[i].n = n;
                w[i].start = n * (size_t)i / (size_t)t;
                w[i].barrier = &barrier;
                if (pthread_create(&tid[i], NULL, work, &w[i])) {
                    perror("pthread_create");
                    return 2;
                }
            }
            t0 = now();
            for (int i = 0; i < t; i++) {
                w[i].deadline = t0 + c.min_time;
                w[i].stop = t0 + c.max_time;
            }
            pthread_barrier_wait(&barrier);
            for (int i = 0; i < t; i++) {
                pthread_join(tid[i], NULL);
                if (w[i].rc) die("threaded read", &w[i].err);
                rows += w[i].rows;
            }
            secs = now() - t0;
            report(&c, "threads", t, rep, rows, secs);
            pthread_barrier_destroy(&barrier);
            free(tid);
            free(w);
        }
    }
    pydb_record_free(rec);
    free(mfns);
    pydb_close(db);
    return 0;
}
