/*
 * gc.c - the garbage collector of a handle: its policy, its thread, the
 * cooperative steps of readers, pydb_gc_collect() and what the handle
 * records of its collections (pydb.h group 9; gc.h).
 *
 * DESIGN (in the manner of redis's bio.c)
 *
 * Work.  Collection is done in bounded STEPS; a step is first the native
 * index's (db->hook.collect: merges dropping dead postings, segment files
 * no reader pins; NULL without a native index; told whether the database
 * is idle: while commits go on it merges only what keeps lookups cheap),
 * then the master file's when it has garbage enough (compact.h: a copy
 * of the latest versions into a new .mst/.xrf pair, then the swap), each
 * with its own budget.  Budgets (units: a
 * posting list merged or a segment file removed for the index, a record
 * copied for the master file):
 *     GC_THREAD_BUDGET  256   the collector thread, pydb_gc_collect()
 *     GC_COOP_BUDGET    256   a reader in pydb__gc_met() (a millisecond or
 *                             two: under a cooperative policy readers pay
 *                             for the garbage they meet, and a job must
 *                             end within the reads of one pass over it)
 * A COLLECTION is the steps run until neither job has more to do; it is
 * counted (collections, last time, last report) when it ends, and so is
 * a pass of the thread or a reader's step that reclaimed something
 * without reaching the end (a busy slice; readers may never meet the
 * last of the garbage).  pydb_gc_collect() always counts one.  A step
 * that comes back at once with more to do (turned away: the writer
 * lock busy) is followed by a GC_BACKOFF_MS pause, not a spin.
 *
 * Locks, in the order they may be taken:
 *   ctl   serialises what starts and stops the thread (set_policy, close,
 *         the lazy restart after fork, taken there with trylock only)
 *   step  one step at a time per handle: the thread and pydb_gc_collect()
 *         wait for it (a step is bounded), readers only try it, and
 *         pydb__gc_pause() takes it so that the commit hook is never
 *         swapped under a step (db->hook is read under it)
 *   mu    (with cond) the thread's wake-ups and stop request, and the
 *         record (collections, last report, last error); never held
 *         during a step or a join
 * A step may commit (an index merge takes the writer lock with timeout
 * 0): its commit calls pydb__gc_notify(), which takes mu only.
 *
 * Wake-ups.  pydb__gc_notify() (after each commit of this handle) sets the
 * atomic `pending` flag and signals the thread.  The thread also wakes
 * every GC_TICK_MS: it notices commits of other processes (the header's
 * latest commit moved: pending again) and idleness (no commit seen for
 * GC_IDLE_MS: the master file's job then starts for any garbage at all,
 * compact.h's `idle`).  `pending` is cleared only by an idle collection
 * that found nothing to do while no master-file garbage is counted and
 * no registered reader is behind the latest commit (a reader that pins
 * garbage keeps it set, so its release is noticed at the next tick).
 * pydb__gc_met() looks at `pending` (and at the header's latest commit)
 * first: a reader pays two atomic loads when there is nothing to do.
 *
 * Share.  While commits go on, a pass of the thread works at most
 * GC_BUSY_SLICE_MS (50 ms); when it had to stop there, the next starts
 * GC_BUSY_GAP_MS (100 ms) later (the jobs resume where they stopped:
 * the index's merges and the compaction keep their state between
 * steps), so a collector that is behind takes about a third of one core
 * and leaves the writer lock to the writers; one that caught up starts
 * its next pass at the next commit (the tail of the index is merged
 * while it is small); once idle it runs to the end.  (A nice value for the thread was tried
 * and dropped: on a loaded machine it starved the idle collection.)
 *
 * Processes.  The thread's passes and the readers' steps first take the
 * database's collector lease in the commit header (shm.h: the pid of the
 * collecting process and the time of its last step); a process that
 * finds another live one holding it, with a step less than 5 s ago,
 * leaves the work to it.  A collection that leaves nothing more drops
 * it.  Without it the collectors of N processes would each merge the
 * same segments and copy the same master file, and all but the first
 * to commit would have worked for nothing.  pydb_gc_collect() does not
 * wait for it (an explicit request).
 *
 * fork().  Only the forking thread survives in the child.  This
 * module's part of the pthread_atfork() handlers (fork.h, rank 1; the
 * index handles' part, rank 2, takes its locks after these and releases
 * them before) prepares by taking `gc_list_mutex` (the list whole), the
 * step lock of every collector (it waits for the steps in flight, which
 * are bounded: each of a step's waits for the writer lock -- up to
 * four: the index's removal of unused files, its two merges' commits,
 * the master file's swap -- lasts a slice of GC_THREAD_LOCK_MS at most,
 * the swap's wait for readers behind it PYDB_COMPACT_DRAIN_MAX_MS at
 * most, and backoff() lets the step lock go between steps; the child never
 * inherits a writer lock or a file a vanished step was in the middle
 * of) and each handle's smutex and vmutex.  The child releases those, marks each collector's thread as
 * gone, makes the collector's other locks anew and its handle's writer
 * locks and group commit queue (pydb__writer_locks_init: no thread of
 * the parent waits there) and read mutex (PYDB_LOCK_MUTEX), and gives
 * the handle descriptions of its log and fence of its own
 * (pydb__wal_forked).  The child starts a thread of its own lazily, at
 * its first commit (pydb__gc_notify), if the policy wants one; the
 * parent's thread is unaffected.
 *
 * Depends on: pydb_int.h, shm.h (latest commit, oldest reader),
 * compact.h (the master file's job), wal.h (a forked child's log),
 * fork.h (the fork handlers), the commit hook (pydb.h group 5).
 */
#define _GNU_SOURCE
#include "gc.h"
#include "compact.h"
#include "fork.h"
#include "shm.h"
#include "wal.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GC_THREAD_BUDGET 256   /* units per step of the thread / collect() */
#define GC_COOP_BUDGET 256     /* units per step of a cooperating reader   */
#define GC_SWEEP_STEPS 100000  /* at most, after a full pass (gc_swept)    */
#define GC_TICK_MS 200         /* the thread's timer                       */
#define GC_IDLE_MS 500         /* no commit for this long: idle            */
#define GC_THREAD_LOCK_MS PYDB_GC_LOCK_WAIT_MS /* the thread's wait for
                                  the writer lock (shm.h: 100 ms)         */
#define GC_BUSY_SLICE_MS 50    /* busy: a pass of the thread works this long */
#define GC_BUSY_GAP_MS 100     /* busy: then waits this long               */
#define GC_QUICK_STEP_NS 100000 /* a step back this fast with more to do  */
#define GC_BACKOFF_MS 1        /* ... is followed by this pause            */
#define GC_LEASE_STALE_DS 50   /* a lease holder silent this long (5 s,
                                  deciseconds) is replaced                */

/* A step that did not get the writer lock (held, or the handle closing):
 * not a failure to record, the next step tries again. */
static int lock_refusal(int rc)
{
    return rc == PYDB_ELOCKED || rc == PYDB_ECLOSED;
}

struct pydb_gc {
    pydb_db *db;
    int writable;             /* only writable handles collect            */
    int policy;               /* atomic: enum pydb_gc_policy              */
    int pending;              /* atomic: garbage may be collectable       */
    int compacting;           /* under step: a master-file job is open    */
    int stepping;             /* atomic: a step runs, on `stepper`: the
                                 commits it makes (an index merge, a
                                 compaction) are the collector's own and
                                 must not make the database look busy  */
    pthread_t stepper;        /* atomic (an integer on Linux), set under
                                 step                                     */
    int64_t last_commit_ns;   /* atomic: monotonic time of the last commit
                                 seen (this handle's or another process') */
    uint64_t seen_commit;     /* atomic: header's latest commit last seen */
    pthread_mutex_t ctl, step, mu;
    pthread_cond_t cond;      /* with mu: wakes the thread                */
    pthread_t thread;
    int thread_on;            /* under mu (written under ctl too): a
                                 thread runs and will be joined           */
    int stop, wake;           /* under mu                                 */
    /* the record, under mu */
    uint64_t collections;
    double last_time;         /* Unix time, 0: none                       */
    pydb_gc_report last;
    pydb_gc_report carried;   /* what pydb_gc_collect() calls that did not
                                 complete (out of time, or failed)
                                 collected: part of the next complete
                                 one's record (the binding collects in
                                 slices of one call each)               */
    char last_error[256];
    /* the global list (fork) */
    struct pydb_gc *next, *prev;
};

static pthread_mutex_t gc_list_mutex = PTHREAD_MUTEX_INITIALIZER;
static pydb_gc *gc_list;

static const char *const policy_names[] = {"none", "background",
                                           "cooperative", "combined"};

int pydb_gc_policy_from_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, policy_names[i]) == 0) return i;
    return -1;
}

const char *pydb_gc_policy_name(int policy)
{
    return policy >= 0 && policy < 4 ? policy_names[policy] : "?";
}

/* ------------------------------------------------------------ helpers */

static int64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The database's collector lease for this process (shm.h): taken or
 * refreshed before a step of the thread or of a reader, dropped when a
 * collection leaves nothing more.  One process collects at a time, so
 * that the collectors of several processes do not each merge the same
 * segments and copy the same master file; pydb_gc_collect() does not
 * wait for it. */
static int lease_take(pydb_gc *g)
{
    pydb_shm *shm = pydb__db_shm(g->db);
    if (!shm) return 1;
    return pydb__shm_lease_take(
        shm, (int32_t)getpid(),
        (uint32_t)(now_ns(CLOCK_MONOTONIC) / 100000000), GC_LEASE_STALE_DS);
}

static void lease_drop(pydb_gc *g)
{
    pydb_shm *shm = pydb__db_shm(g->db);
    if (shm) pydb__shm_lease_drop(shm, (int32_t)getpid());
}

static int get_policy(const pydb_gc *g)
{
    return __atomic_load_n(&g->policy, __ATOMIC_ACQUIRE);
}

static int wants_thread(const pydb_gc *g, int policy)
{
    return g->writable && (policy & PYDB_GC_BACKGROUND);
}

static void locks_init(pydb_gc *g)
{
    pthread_condattr_t ca;
    pthread_mutex_init(&g->ctl, NULL);
    pthread_mutex_init(&g->step, NULL);
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cond, &ca);
    pthread_condattr_destroy(&ca);
}

static void locks_destroy(pydb_gc *g)
{
    pthread_mutex_destroy(&g->ctl);
    pthread_mutex_destroy(&g->step);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cond);
}

/* ------------------------------------------------------------ fork */

/* Before fork(): the list whole, no step of any collector in flight
 * (each step lock taken: a step is bounded), no handle switching to a
 * compaction's new file pair (each handle's smutex, taken after the
 * step locks as a compaction's step takes it) and none setting its view
 * (vmutex, taken under smutex by a switch and alone by a refresh: its
 * seqlock is never left odd), so that the child never inherits a handle
 * whose writer lock, job, file switch or view a vanished thread was in
 * the middle of. */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&gc_list_mutex);
    for (pydb_gc *g = gc_list; g; g = g->next) pthread_mutex_lock(&g->step);
    for (pydb_gc *g = gc_list; g; g = g->next) {
        pthread_mutex_lock(&g->db->smutex);
        pthread_mutex_lock(&g->db->vmutex);
    }
}

static void atfork_parent(void)
{
    for (pydb_gc *g = gc_list; g; g = g->next) {
        pthread_mutex_unlock(&g->db->vmutex);
        pthread_mutex_unlock(&g->db->smutex);
        pthread_mutex_unlock(&g->step);
    }
    pthread_mutex_unlock(&gc_list_mutex);
}

/* The child: no collector thread survived; locks another thread held at
 * the fork would stay held forever, so every one is made anew (those
 * the prepare handler took -- the list, the step locks, smutexes and
 * vmutexes -- are this thread's: released, as ThreadSanitizer must see
 * them go; the mutex of PYDB_LOCK_MUTEX reads, which a read of another
 * thread may have held across a pread, made anew: it guards no state);
 * and each handle takes descriptions of its log and its fence of its
 * own (pydb__wal_forked), or a parent killed with the writer lock would
 * leave it held by the child. */
static void atfork_child(void)
{
    for (pydb_gc *g = gc_list; g; g = g->next) {
        pthread_mutex_unlock(&g->db->vmutex);
        pthread_mutex_unlock(&g->db->smutex);
        pthread_mutex_unlock(&g->step);
        pthread_mutex_init(&g->db->mutex, NULL);
        pydb__writer_locks_init(g->db);
        pydb__wal_forked(g->db);
        locks_init(g);
        g->thread_on = 0;
        g->stop = 0;
        g->wake = 0;
        g->compacting = 0;
    }
    pthread_mutex_unlock(&gc_list_mutex);
}

/* fork.h: rank 1, before the index handles' part */
static const pydb_fork_part gc_fork = {1, atfork_prepare, atfork_parent,
                                       atfork_child};

/* ------------------------------------------------------------ record */

/* A collection ended (rc == PYDB_OK) or a step failed (the message kept;
 * the garbage stays counted and a later collection tries again). */
static void record(pydb_gc *g, int rc, const pydb_gc_report *rep,
                   const pydb_error *err)
{
    pthread_mutex_lock(&g->mu);
    if (rc == PYDB_OK) {
        g->collections++;
        g->last_time = (double)now_ns(CLOCK_REALTIME) / 1e9;
        g->last = *rep;
    } else if (err->path[0]) {
        snprintf(g->last_error, sizeof g->last_error, "%.30s: %.150s (%.60s)",
                 pydb_strerror(rc), err->message, err->path);
    } else {
        snprintf(g->last_error, sizeof g->last_error, "%.30s: %.200s",
                 pydb_strerror(rc), err->message);
    }
    pthread_mutex_unlock(&g->mu);
}

static void report_add(pydb_gc_report *to, const pydb_gc_report *r)
{
    to->versions += r->versions;
    to->bytes += r->bytes;
    to->postings += r->postings;
    to->segments += r->segments;
    to->compactions += r->compactions;
}

/* ------------------------------------------------------------ steps */

/* Whether the database is idle: no commit seen for GC_IDLE_MS. */
static int is_idle(pydb_gc *g)
{
    int64_t last = __atomic_load_n(&g->last_commit_ns, __ATOMIC_RELAXED);
    return now_ns(CLOCK_MONOTONIC) - last >= (int64_t)GC_IDLE_MS * 1000000;
}

/* Note the header's latest commit: a new one (another process', or this
 * handle's) makes garbage pending and the database busy. */
static void observe_commit(pydb_gc *g)
{
    pydb_shm *shm = pydb__db_shm(g->db);
    uint64_t c;
    if (!shm) return;
    c = pydb__shm_latest(shm);
    if (c != __atomic_load_n(&g->seen_commit, __ATOMIC_RELAXED)) {
        __atomic_store_n(&g->seen_commit, c, __ATOMIC_RELAXED);
        __atomic_store_n(&g->last_commit_ns, now_ns(CLOCK_MONOTONIC),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&g->pending, 1, __ATOMIC_RELEASE);
    }
}

/* One bounded step, the step lock held: the index's job first (`idle`:
 * no commit comes, merge what can be merged), then the master file's
 * (`mst`: its own idle flag, or -1: the index's job only).  *more:
 * either has more to do now; *worked set when
 * there was work (the index had more, or a master-file job ran); *rep
 * gets what the step reclaimed (added). */
static int step_jobs(pydb_gc *g, int budget, int idle, int lock_ms,
                     int drain_ms, int offer, int mst, int *more,
                     int *worked, pydb_gc_report *rep, pydb_error *err)
{
    pydb_db *db = g->db;
    pydb_gc_report r;
    int imore = 0, cmore = 0, rc;

    *more = 0;
    if (db->hook.collect) {
        memset(&r, 0, sizeof r);
        pydb_gc_step how = {budget, idle, lock_ms, offer};
        rc = db->hook.collect(db->hook.ctx, db, &how, &imore, &r, err);
        report_add(rep, &r);
        if (r.postings || r.segments) *worked = 1;
        if (rc) return rc;
        if (imore) {
            *more = 1;
            *worked = 1;
        }
    }
    /* the master file's job does not wait for the index's: a merge of
     * the base may be under way for long while commits go on */
    if (mst < 0 || (!g->compacting && !pydb__compact_wanted(db, mst)))
        return PYDB_OK;
    memset(&r, 0, sizeof r);
    g->compacting = 1;
    *worked = 1;
    rc = pydb__compact_step(db, budget, lock_ms, drain_ms, &cmore, &r, err);
    g->compacting = rc == PYDB_OK && cmore;
    if (rc) return rc;
    report_add(rep, &r);
    *more = imore || cmore;
    return PYDB_OK;
}

/* step_jobs() marked as running on this thread (the step lock held): its
 * commits are the collector's own (gc_notify). */
static int step(pydb_gc *g, int budget, int idle, int lock_ms, int drain_ms,
                int offer, int mst, int *more, int *worked,
                pydb_gc_report *rep, pydb_error *err)
{
    int rc;
    __atomic_store_n(&g->stepper, pthread_self(), __ATOMIC_RELAXED);
    __atomic_store_n(&g->stepping, 1, __ATOMIC_RELEASE);
    rc = step_jobs(g, budget, idle, lock_ms, drain_ms, offer, mst, more,
                   worked, rep, err);
    __atomic_store_n(&g->stepping, 0, __ATOMIC_RELEASE);
    return rc;
}

/* What is left pinned after a collection: the master file's garbage
 * (after a complete collection, only pinned garbage is left). */
static int64_t left_pinned(pydb_gc *g)
{
    int64_t v, b;
    pydb__compact_garbage(g->db, &v, &b);
    return v;
}

/* After a collection that found nothing more: clear `pending` if nothing
 * can become collectable without a commit (no master-file garbage, no
 * registered reader behind the latest commit). */
static void maybe_settle(pydb_gc *g, int idle)
{
    pydb_shm *shm = pydb__db_shm(g->db);
    int64_t v, b;
    if (!idle) return;
    pydb__compact_garbage(g->db, &v, &b);
    if (v > 0) return;
    if (shm && pydb__shm_oldest(shm, NULL) != pydb__shm_latest(shm)) return;
    __atomic_store_n(&g->pending, 0, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------ thread */

static int stop_requested(pydb_gc *g)
{
    int s;
    pthread_mutex_lock(&g->mu);
    s = g->stop;
    pthread_mutex_unlock(&g->mu);
    return s;
}

/* A step that came back at once with more to do was most likely turned
 * away (the writer lock busy, another collector of the index in another
 * handle): pause a little rather than spin on it.  So was one that took
 * a whole slice of the writer lock's wait: the pause lets whoever waits
 * for the step lock (a fork()'s prepare handler, close(), a reader's
 * step) have it, which a mutex does not promise (the loop would take it
 * back at once, slice after slice). */
static void backoff(int64_t started, int more)
{
    struct timespec ts = {0, GC_BACKOFF_MS * 1000000L};
    int64_t took = now_ns(CLOCK_MONOTONIC) - started;
    if (more && (took < GC_QUICK_STEP_NS ||
                 took >= (int64_t)GC_THREAD_LOCK_MS * 1000000))
        nanosleep(&ts, NULL);
}

/* Whether a report holds anything reclaimed. */
static int reclaimed(const pydb_gc_report *r)
{
    return r->versions || r->postings || r->segments || r->compactions;
}

/* The end of a pass of the thread or of a reader's step: it counts as a
 * collection when it worked and left nothing more, or when it reclaimed
 * something; with nothing more, `pending` may be cleared. */
static void collection_end(pydb_gc *g, pydb_gc_report *rep, int worked,
                           int more, int idle)
{
    if ((worked && !more) || reclaimed(rep)) {
        rep->pinned = left_pinned(g);
        record(g, PYDB_OK, rep, NULL);
    }
    if (!more) {
        lease_drop(g);
        maybe_settle(g, idle);
    }
}

/* One pass of the thread: steps until nothing is left, the step lock
 * released between steps (readers and collect() get their turn),
 * stopping early when asked to stop.  While commits go on (not idle) a
 * pass ends after GC_BUSY_SLICE_MS of work (the jobs resume where they
 * stopped), so that the collector takes a bounded share of the machine
 * and of the writer lock from the writers.  A pass that ends with
 * nothing more to do, or that reclaimed something, counts as a
 * collection.  Returns 1 if it left more to do. */
static int thread_collect(pydb_gc *g)
{
    pydb_gc_report rep;
    pydb_error err;
    int idle = is_idle(g), more = 1, rc = PYDB_OK, worked = 0;
    int64_t slice_end = now_ns(CLOCK_MONOTONIC) +
                        (int64_t)GC_BUSY_SLICE_MS * 1000000;

    memset(&rep, 0, sizeof rep);
    if (!lease_take(g)) return 0;   /* another process collects */
    while (more) {
        if (stop_requested(g)) return 0;
        if (!idle && now_ns(CLOCK_MONOTONIC) >= slice_end) break;
        (void)lease_take(g);   /* its heartbeat */
        int64_t t0 = now_ns(CLOCK_MONOTONIC);
        pthread_mutex_lock(&g->step);
        memset(&err, 0, sizeof err);
        /* while commits go on, a small merge rides on the next commit
         * (nidx_gc.c, offer): no commit, and no fsync, of its own */
        rc = step(g, GC_THREAD_BUDGET, idle, GC_THREAD_LOCK_MS,
                  PYDB_COMPACT_DRAIN_MAX_MS, !idle, idle, &more, &worked,
                  &rep, &err);
        pthread_mutex_unlock(&g->step);
        if (rc == PYDB_OK) backoff(t0, more);
        if (rc) {
            /* ELOCKED: the writer was busy; try at the next wake-up.  Any
             * other failure is kept as the last error. */
            if (!lock_refusal(rc)) record(g, rc, NULL, &err);
            return 0;
        }
    }
    collection_end(g, &rep, worked, more, idle);
    return more;
}

static void *gc_thread(void *arg)
{
    pydb_gc *g = arg;
    int64_t next_pass = 0;   /* busy: no pass before this time */
    int more;
    for (;;) {
        struct timespec ts;
        int64_t t = now_ns(CLOCK_MONOTONIC) + (int64_t)GC_TICK_MS * 1000000;
        int pending = __atomic_load_n(&g->pending, __ATOMIC_ACQUIRE);
        pthread_mutex_lock(&g->mu);
        if (pending && next_pass > now_ns(CLOCK_MONOTONIC) &&
            next_pass < t) {
            t = next_pass;   /* the gap after a busy pass ends first */
            g->wake = 0;     /* commits meanwhile: the pass will see them */
        }
        if (!g->stop && !g->wake) {
            ts.tv_sec = t / 1000000000;
            ts.tv_nsec = t % 1000000000;
            pthread_cond_timedwait(&g->cond, &g->mu, &ts);
        }
        g->wake = 0;
        if (g->stop) {
            pthread_mutex_unlock(&g->mu);
            break;
        }
        pthread_mutex_unlock(&g->mu);
        observe_commit(g);
        if (!__atomic_load_n(&g->pending, __ATOMIC_ACQUIRE)) continue;
        if (!is_idle(g) && now_ns(CLOCK_MONOTONIC) < next_pass) continue;
        /* a pass cut short by its slice is followed by a gap; one that
         * caught up lets the next commit start the next pass at once */
        more = thread_collect(g);
        next_pass = is_idle(g) || !more
                        ? 0
                        : now_ns(CLOCK_MONOTONIC) +
                              (int64_t)GC_BUSY_GAP_MS * 1000000;
    }
    return NULL;
}

/* Start the thread (ctl held, thread_on 0): PYDB_OK or PYDB_ENOMEM /
 * PYDB_EIO.  Every signal is blocked in it: signals go to the threads
 * of the program (Python's main thread). */
static int thread_start(pydb_gc *g, pydb_error *err)
{
    sigset_t all, old;
    int e;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_mutex_lock(&g->mu);
    g->stop = 0;
    g->wake = 0;
    e = pthread_create(&g->thread, NULL, gc_thread, g);
    if (e == 0) g->thread_on = 1;
    pthread_mutex_unlock(&g->mu);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e == 0) {
        pthread_setname_np(g->thread, "pydb-gc");
        return PYDB_OK;
    }
    if (e == ENOMEM || e == EAGAIN)
        return PYDB_ERROR(err, PYDB_ENOMEM, g->db->mst.path, -1,
                          "cannot start the collector thread: %s",
                          strerror(e));
    return PYDB_OSERROR(err, e, g->db->mst.path, -1,
                        "cannot start the collector thread: %s", strerror(e));
}

/* Stop and join the thread (ctl held). */
static void thread_stop(pydb_gc *g)
{
    pthread_t th;
    pthread_mutex_lock(&g->mu);
    if (!g->thread_on) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    g->stop = 1;
    th = g->thread;
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->mu);
    pthread_join(th, NULL);
    pthread_mutex_lock(&g->mu);
    g->thread_on = 0;
    g->stop = 0;
    pthread_mutex_unlock(&g->mu);
}

/* ------------------------------------------------------------ gc.h */

static const pydb_gc_ops gc_ops;   /* the listeners, defined below */

int pydb__gc_open(pydb_db *db, pydb_error *err)
{
    pydb_gc *g;
    int policy = PYDB_GC_DEFAULT, rc;
    int asked = (db->flags >> PYDB_OPEN_GC_SHIFT) & 7;

    if (asked >= 1 && asked <= 4) policy = asked - 1;
    pydb__fork_join(&gc_fork);
    g = calloc(1, sizeof *g);
    if (!g) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    g->db = db;
    g->writable = (db->flags & PYDB_OPEN_WRITE) != 0;
    g->policy = policy;
    g->pending = 1;   /* the files may hold garbage already */
    g->last_commit_ns = now_ns(CLOCK_MONOTONIC);
    if (db->shm) g->seen_commit = pydb__shm_latest(db->shm);
    locks_init(g);
    pthread_mutex_lock(&gc_list_mutex);
    g->next = gc_list;
    if (gc_list) gc_list->prev = g;
    gc_list = g;
    pthread_mutex_unlock(&gc_list_mutex);
    db->gc = g;
    __atomic_store_n(&db->gc_ops, &gc_ops, __ATOMIC_RELEASE);
    if (wants_thread(g, policy)) {
        pthread_mutex_lock(&g->ctl);
        rc = thread_start(g, err);
        pthread_mutex_unlock(&g->ctl);
        if (rc) {
            pydb__gc_close(db);
            return rc;
        }
    }
    return PYDB_OK;
}

void pydb__gc_close(pydb_db *db)
{
    pydb_gc *g = db->gc;
    if (!g) return;
    /* the collector's own last commits find no listener */
    __atomic_store_n(&db->gc_ops, NULL, __ATOMIC_RELEASE);
    pthread_mutex_lock(&g->ctl);
    thread_stop(g);
    pthread_mutex_unlock(&g->ctl);
    pthread_mutex_lock(&g->step);
    if (g->compacting) pydb__compact_abort(db);
    g->compacting = 0;
    pthread_mutex_unlock(&g->step);
    if (g->writable) lease_drop(g);
    pthread_mutex_lock(&gc_list_mutex);
    if (g->prev) g->prev->next = g->next;
    else gc_list = g->next;
    if (g->next) g->next->prev = g->prev;
    pthread_mutex_unlock(&gc_list_mutex);
    locks_destroy(g);
    free(g);
    db->gc = NULL;
}

static void gc_notify(pydb_db *db)
{
    pydb_gc *g = db->gc;
    int policy, restart;
    if (!g) return;
    if (__atomic_load_n(&g->stepping, __ATOMIC_ACQUIRE) &&
        pthread_equal(__atomic_load_n(&g->stepper, __ATOMIC_RELAXED),
                      pthread_self())) {
        /* the collector's own commit: seen, not activity (the writer
         * lock is still held: the latest commit is this one) */
        pydb_shm *shm = pydb__db_shm(db);
        if (shm)
            __atomic_store_n(&g->seen_commit, pydb__shm_latest(shm),
                             __ATOMIC_RELAXED);
        __atomic_store_n(&g->pending, 1, __ATOMIC_RELEASE);
        return;
    }
    __atomic_store_n(&g->last_commit_ns, now_ns(CLOCK_MONOTONIC),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&g->pending, 1, __ATOMIC_RELEASE);
    policy = get_policy(g);
    if (!wants_thread(g, policy)) return;
    pthread_mutex_lock(&g->mu);
    restart = !g->thread_on;
    g->wake = 1;
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->mu);
    /* After fork() (the child has no thread): start one now, unless a
     * policy change is under way (it decides). */
    if (restart && pthread_mutex_trylock(&g->ctl) == 0) {
        int on;
        pthread_mutex_lock(&g->mu);
        on = g->thread_on;
        pthread_mutex_unlock(&g->mu);
        if (!on && wants_thread(g, get_policy(g))) thread_start(g, NULL);
        pthread_mutex_unlock(&g->ctl);
    }
}

/* One cooperative step (met: idle as the clock says; swept: a full pass
 * met the garbage, so the database counts as idle, as for a sweep).
 * Returns 1 if the step left more to do. */
static int coop_step(pydb_db *db, int swept)
{
    pydb_gc *g = db->gc;
    pydb_gc_report rep;
    pydb_error err;
    int policy, more = 0, worked = 0, rc, idle;

    if (!g || !g->writable) return 0;
    policy = get_policy(g);
    if (!(policy & PYDB_GC_COOPERATIVE)) return 0;
    if (!__atomic_load_n(&g->pending, __ATOMIC_ACQUIRE)) {
        observe_commit(g);   /* another process' commit? */
        if (!__atomic_load_n(&g->pending, __ATOMIC_ACQUIRE)) return 0;
    }
    /* a caller holding the GIL: the step is for its blocking redo */
    if (pydb__nowait()) {
        (void)pydb__nowait_refuse();
        return 0;
    }
    if (!lease_take(g)) return 0;   /* another process collects */
    if (pthread_mutex_trylock(&g->step) != 0) {
        if (policy & PYDB_GC_BACKGROUND) {   /* a step runs: hand it over */
            pthread_mutex_lock(&g->mu);
            g->wake = 1;
            pthread_cond_signal(&g->cond);
            pthread_mutex_unlock(&g->mu);
        }
        return 0;
    }
    memset(&rep, 0, sizeof rep);
    memset(&err, 0, sizeof err);
    idle = swept || is_idle(g);
    rc = step(g, GC_COOP_BUDGET, idle, 0, 0, 0, idle, &more, &worked, &rep,
              &err);
    pthread_mutex_unlock(&g->step);
    if (rc) {
        if (!lock_refusal(rc)) record(g, rc, NULL, &err);
        return 0;
    }
    /* readers drive it, so it may never reach its end (nobody meets the
     * last of the garbage) */
    collection_end(g, &rep, worked, more, idle);
    return more;
}

static void gc_met(pydb_db *db)
{
    (void)coop_step(db, 0);
}

/* A full pass (the validator) read every record, so it met all the
 * garbage: steps until nothing is left (the pass's own cost is of the
 * order of the whole collection's: a copy of the live records, a merge
 * of the index), while they make progress (at most GC_SWEEP_STEPS; a
 * step turned away -- the step lock or the writer lock busy -- ends it,
 * and the thread, if any, finishes). */
static void gc_swept(pydb_db *db)
{
    for (int i = 0; i < GC_SWEEP_STEPS; i++) {
        int64_t t0 = now_ns(CLOCK_MONOTONIC);
        int more = coop_step(db, 1);
        if (!more) break;
        backoff(t0, more);
    }
}

static void gc_pause(pydb_db *db)
{
    if (db->gc) pthread_mutex_lock(&db->gc->step);
}

static void gc_resume(pydb_db *db)
{
    if (db->gc) pthread_mutex_unlock(&db->gc->step);
}

static const pydb_gc_ops gc_ops = {gc_notify, gc_met, gc_swept, gc_pause,
                                   gc_resume};

/* ------------------------------------------------------------ pydb.h */

int pydb_gc_set_policy(pydb_db *db, int policy, pydb_error *err)
{
    pydb_gc *g = db->gc;
    int old, rc = PYDB_OK, on;

    if (policy < PYDB_GC_NONE || policy > PYDB_GC_COMBINED)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "unknown garbage collection policy %d", policy);
    if (!g) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "no collector");
    pthread_mutex_lock(&g->ctl);
    old = get_policy(g);
    __atomic_store_n(&g->policy, policy, __ATOMIC_RELEASE);
    pthread_mutex_lock(&g->mu);
    on = g->thread_on;
    pthread_mutex_unlock(&g->mu);
    if (wants_thread(g, policy) && !on) {
        rc = thread_start(g, err);
        if (rc) __atomic_store_n(&g->policy, old, __ATOMIC_RELEASE);
    } else if (!wants_thread(g, policy) && on) {
        thread_stop(g);
    }
    pthread_mutex_unlock(&g->ctl);
    if (rc == PYDB_OK && policy == PYDB_GC_NONE) {
        pthread_mutex_lock(&g->step);   /* a job in progress is dropped */
        if (g->compacting) pydb__compact_abort(db);
        g->compacting = 0;
        pthread_mutex_unlock(&g->step);
    }
    return rc;
}

int pydb_gc_get_policy(const pydb_db *db)
{
    return db->gc ? get_policy(db->gc) : PYDB_GC_NONE;
}

/* Whether the master file's garbage of commits up to `start` is
 * collected: no job under way, and the last compaction replaced a commit
 * at least as new (its catch-up copied the latest versions). */
static int mst_collected(pydb_gc *g, pydb_shm *shm, uint64_t start)
{
    pydb_state after;
    uint64_t from;
    return shm && !g->compacting &&
           pydb__shm_swap_get(shm, &from, &after) == 0 && from >= start;
}

int pydb_gc_collect(pydb_gc_report *out, pydb_db *db, int timeout_ms,
                    pydb_error *err)
{
    uint64_t commit = 0;
    return pydb_gc_collect_since(out, db, timeout_ms, &commit, err);
}

int pydb_gc_collect_since(pydb_gc_report *out, pydb_db *db, int timeout_ms,
                          uint64_t *commit, pydb_error *err)
{
    pydb_gc *g = db->gc;
    pydb_gc_report rep;
    pydb_shm *shm;
    uint64_t start;
    int64_t deadline;
    int more = 1, worked = 0, idle, rc = PYDB_OK;

    memset(out, 0, sizeof *out);
    if (!(db->flags & PYDB_OPEN_WRITE) || !g)
        return PYDB_ERROR(err, PYDB_EREADONLY, db->mst.path, -1,
                          "a read-only handle does not collect garbage");
    if (timeout_ms < 0) timeout_ms = 0;
    deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)timeout_ms * 1000000;
    memset(&rep, 0, sizeof rep);
    observe_commit(g);
    /* the commit whose garbage this call collects: a compaction that
     * replaced a commit at least as new has collected it (its catch-up
     * copied the latest versions), and what writers commit meanwhile is
     * left to the next collection.  (Without that bound, a writer that
     * committed now and then kept the call compacting the whole file
     * again for each new back version until its timeout: found by a
     * review.) */
    shm = pydb__db_shm(db);
    if (*commit == 0 && shm) *commit = pydb__shm_latest(shm);
    start = *commit;
    while (more) {
        int64_t t0 = now_ns(CLOCK_MONOTONIC);
        int64_t left = (deadline - t0) / 1000000, drain;
        if (left < 0) left = 0;
        /* a wait for readers at a swap: within the caller's time */
        drain = left < PYDB_COMPACT_DRAIN_MAX_MS ? left
                                                 : PYDB_COMPACT_DRAIN_MAX_MS;
        /* the writer lock is waited for a slice at a time, as the thread
         * waits, the step lock let go between steps: a fork() (whose
         * prepare handler takes every step lock), a reader's step and
         * close() wait for one step's slices (at most four), not for the
         * whole timeout */
        if (left > GC_THREAD_LOCK_MS) left = GC_THREAD_LOCK_MS;
        /* the index's job as when idle while no commit came since the
         * start; after one, what is due (with commits going on, "merge
         * all" would chase each commit's new segment) */
        idle = !shm || pydb__shm_latest(shm) == start;
        pthread_mutex_lock(&g->step);
        rc = step(g, GC_THREAD_BUDGET, idle, (int)left, (int)drain, 0,
                  mst_collected(g, shm, start) ? -1 : 1, &more, &worked,
                  &rep, err);
        pthread_mutex_unlock(&g->step);
        if (rc) break;
        backoff(t0, more);
        if (more && now_ns(CLOCK_MONOTONIC) >= deadline) {
            /* no figure of ms: the binding, which calls in slices,
             * appends the caller's whole wait */
            rc = PYDB_ERROR(err, PYDB_ELOCKED, db->mst.path, -1,
                            "the collection did not finish in the time "
                            "given");
            break;
        }
    }
    if (rc) {
        if (!lock_refusal(rc)) record(g, rc, NULL, err);
        pthread_mutex_lock(&g->mu);
        report_add(&g->carried, &rep);
        pthread_mutex_unlock(&g->mu);
        *out = rep;
        return rc;
    }
    pydb__gc_want_dead(db, 0);   /* a complete collection: done with it */
    rep.pinned = left_pinned(g);
    {
        pydb_gc_report whole = rep;
        pthread_mutex_lock(&g->mu);
        report_add(&whole, &g->carried);
        memset(&g->carried, 0, sizeof g->carried);
        pthread_mutex_unlock(&g->mu);
        record(g, PYDB_OK, &whole, NULL);
    }
    maybe_settle(g, 1);
    *out = rep;
    return PYDB_OK;
}

void pydb__gc_want_dead(pydb_db *db, int dead)
{
    pydb_gc *g = db->gc;
    if (!g) return;
    pthread_mutex_lock(&g->step);
    db->compact_dead = dead;
    pthread_mutex_unlock(&g->step);
}

/* ------------------------------------------------------------ stat.c */

void pydb__gc_record_get(const pydb_db *db, uint64_t *collections,
                         double *last_time, pydb_gc_report *last,
                         char *last_error, size_t cap, int *pending)
{
    pydb_gc *g = db->gc;
    if (!g) {
        *collections = 0;
        *last_time = 0;
        memset(last, 0, sizeof *last);
        if (cap) last_error[0] = '\0';
        *pending = 0;
        return;
    }
    /* commits of other processes since the thread's last tick: pending
     * now, not up to GC_TICK_MS later (a caller waiting for `pending` to
     * clear would otherwise take a quiet handle for a settled one) */
    observe_commit(g);
    *pending = __atomic_load_n(&g->pending, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&g->mu);
    *collections = g->collections;
    *last_time = g->last_time;
    *last = g->last;
    if (cap) snprintf(last_error, cap, "%s", g->last_error);
    pthread_mutex_unlock(&g->mu);
}

