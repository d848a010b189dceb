/*
 * group.c - group commit: single changes from several threads of one
 * handle share a transaction, and so one fdatasync (pydb_write_one).
 *
 * DESIGN.  A durable commit costs one fdatasync of the log (txn.c), about
 * 100-200 us on an SSD, and one transaction at a time holds the writer
 * lock.  Threads that each append or update one record (a threaded
 * service: every request a commit) therefore commit one after another, one
 * fsync each, however many wait.  pydb_write_one() queues its change
 * instead, as LevelDB's DBImpl::Write queues writers (db/db_impl.cc,
 * BuildBatchGroup) and PostgreSQL's group commit flushes for the backends
 * waiting behind the leader (xlog.c, XLogFlush):
 *
 *   - Each call puts a request on the handle's queue (FIFO, under
 *     gmutex) and waits.  The request at the head, when no group is being
 *     committed, is the *leader*: it takes the queue's requests (at most
 *     GROUP_MAX of them, and about GROUP_BYTES of fields), begins one
 *     transaction, applies them in queue order, commits, and hands each
 *     request its outcome.  Requests that came while it committed form
 *     the next group, led by the first of them.
 *   - A change that fails on its own (no such MFN, a record too large)
 *     leaves the transaction as it was (txn.c's add_version changes
 *     nothing before its last check): that request gets its error, the
 *     others go on.  A commit that fails before the commit point
 *     (PYDB_COMMIT_NO: a commit hook refused one record's keys, say) is
 *     tried again for each request alone, so one bad change never fails
 *     another's -- unless it made the handle read-only (a failed fsync):
 *     any such outcome, and every other one (committed, durable but not
 *     applied, unknown), is every member's, with err->committed saying
 *     which.
 *   - Timeouts stay each caller's: a queued request whose deadline passes
 *     before a leader takes it leaves the queue with PYDB_ELOCKED; a
 *     leader waits for the writer lock until the earliest deadline of its
 *     group, and if that passes, the requests whose deadline has passed
 *     fail with PYDB_ELOCKED and the others go back to the head of the
 *     queue, in order, for the next leader.
 *
 * What a caller sees is as if its change were committed alone: it is
 * atomic, durable when the call returns (sync=True), and its MFN is
 * final; it may become visible together with other callers' changes, in
 * queue order.  Explicit transactions (pydb_txn_begin) are not grouped:
 * they take the writer lock as before and a group waits for it like any
 * transaction.  Groups are per handle: writers in other processes, or on
 * other handles, wait for the writer lock and commit alone.
 */
#include "pydb_int.h"
#include "pydb_test.h"
#include <errno.h>
#include <string.h>
#include <unistd.h>

#define GROUP_MAX 128               /* requests per transaction            */
#define GROUP_BYTES (1 << 20)       /* field bytes per transaction (the
                                       first request is taken whatever
                                       its size)                           */

enum { QUEUED, TAKEN, DONE };

struct pydb__wreq {
    struct pydb__wreq *next;
    int op;                  /* PYDB_WRITE_*                               */
    int32_t mfn;             /* in: the MFN changed; out: the MFN appended */
    const pydb_field *fields;
    uint32_t nfields;
    int64_t deadline;        /* pydb__now_ms() until which it may wait     */
    int state;               /* QUEUED, TAKEN (in a group), DONE           */
    int rc;
    pydb_error err;
};

static size_t field_bytes(const struct pydb__wreq *r)
{
    size_t n = 0;
    for (uint32_t i = 0; i < r->nfields; i++) n += r->fields[i].len;
    return n;
}

/* Apply one request's change to the open transaction. */
static int apply(pydb_txn *t, struct pydb__wreq *r, pydb_error *err)
{
    switch (r->op) {
    case PYDB_WRITE_APPEND:
        return pydb_txn_append(&r->mfn, t, r->fields, r->nfields, err);
    case PYDB_WRITE_UPDATE:
        return pydb_txn_update(t, r->mfn, r->fields, r->nfields, err);
    case PYDB_WRITE_DELETE:
        return pydb_txn_delete(t, r->mfn, err);
    default:
        return pydb_txn_undelete(t, r->mfn, err);
    }
}

static void finish(struct pydb__wreq *r, int rc, const pydb_error *err)
{
    r->rc = rc;
    if (rc) r->err = *err;
}

/* Commit request r alone (the retry after a group's commit failed before
 * its commit point). */
static void commit_alone(pydb_db *db, struct pydb__wreq *r)
{
    pydb_txn *t = NULL;
    pydb_error err;
    int rc;
    memset(&err, 0, sizeof err);
    rc = pydb_txn_begin(&t, db, (int)(r->deadline - pydb__now_ms()), &err);
    if (rc) goto done;
    rc = apply(t, r, &err);
    if (rc) pydb_txn_abort(t);
    else rc = pydb_txn_commit(t, &err);
done:
    finish(r, rc, &err);
}

/* Commit the group g[0..n) in one transaction; every request gets its
 * outcome (DONE is set by the caller), except those put back (*back: the
 * first of them; they stay linked by next, in order). */
static void commit_group(pydb_db *db, struct pydb__wreq **g, size_t n,
                         struct pydb__wreq **back)
{
    pydb_txn *t = NULL;
    pydb_error err;
    int64_t first = g[0]->deadline, now;
    size_t i, applied = 0;
    int rc;

    *back = NULL;
    memset(&err, 0, sizeof err);
    for (i = 1; i < n; i++)
        if (g[i]->deadline < first) first = g[i]->deadline;
    rc = pydb_txn_begin(&t, db, (int)(first - pydb__now_ms()), &err);
    if (rc == PYDB_ELOCKED) {
        /* the earliest deadline passed: those whose own passed fail, the
         * others wait on for the next leader */
        struct pydb__wreq **tail = back;
        now = pydb__now_ms();
        for (i = 0; i < n; i++) {
            if (g[i]->deadline <= now) {
                finish(g[i], rc, &err);
            } else {
                g[i]->state = QUEUED;
                *tail = g[i];
                tail = &g[i]->next;
            }
        }
        *tail = NULL;
        return;
    }
    if (rc) {
        for (i = 0; i < n; i++) finish(g[i], rc, &err);
        return;
    }
    for (i = 0; i < n; i++) {
        pydb_error own;
        memset(&own, 0, sizeof own);
        g[i]->rc = apply(t, g[i], &own);
        if (g[i]->rc) g[i]->err = own;
        else applied++;
    }
    if (!applied) {
        pydb_txn_abort(t);
        return;
    }
    rc = pydb_txn_commit(t, &err);
    if (rc && err.committed == PYDB_COMMIT_NO && applied > 1 &&
        !__atomic_load_n(&db->fatal, __ATOMIC_ACQUIRE)) {
        /* Nothing was committed, and the handle still writes: one change
         * may be what failed it */
        for (i = 0; i < n; i++)
            if (!g[i]->rc) commit_alone(db, g[i]);
        return;
    }
    for (i = 0; i < n; i++)
        if (!g[i]->rc) finish(g[i], rc, &err);
}

/* Lead: take a group from the head of the queue (r is its first), commit
 * it, and hand out the outcomes.  Called and returns with gmutex held. */
static void lead(pydb_db *db)
{
    struct pydb__wreq *g[GROUP_MAX], *back, *r;
    size_t n = 0, bytes = 0;

    db->gleader = 1;
    while (db->ghead && n < GROUP_MAX) {
        r = db->ghead;
        bytes += field_bytes(r);
        if (n && bytes > GROUP_BYTES) break;
        db->ghead = r->next;
        r->state = TAKEN;
        g[n++] = r;
    }
    if (!db->ghead) db->gtail = NULL;
    pthread_mutex_unlock(&db->gmutex);
    commit_group(db, g, n, &back);
    pthread_mutex_lock(&db->gmutex);
    for (size_t i = 0; i < n; i++)
        if (g[i]->state == TAKEN) g[i]->state = DONE;
    if (back) {   /* to the head, in their order */
        r = back;
        while (r->next) r = r->next;
        r->next = db->ghead;
        if (!db->ghead) db->gtail = r;
        db->ghead = back;
    }
    db->gleader = 0;
    pthread_cond_broadcast(&db->gcond);
}

/* Unlink r, still QUEUED, from the queue. */
static void unqueue(pydb_db *db, struct pydb__wreq *r)
{
    struct pydb__wreq **p = &db->ghead, *prev = NULL;
    while (*p && *p != r) {
        prev = *p;
        p = &(*p)->next;
    }
    if (!*p) return;
    *p = r->next;
    if (db->gtail == r) db->gtail = prev;
}

/* This thread's own transaction is open on db (its group would wait for
 * it for ever). */
static int own_txn_open(pydb_db *db)
{
    int own;
    pthread_mutex_lock(&db->wmutex);
    own = db->wbusy && db->wbusy_pid == getpid() &&
          pthread_equal(db->wowner, pthread_self());
    pthread_mutex_unlock(&db->wmutex);
    return own;
}

int pydb_write_one(int32_t *mfn, pydb_db *db, int op,
                   const pydb_field *fields, uint32_t nfields, int timeout_ms,
                   pydb_error *err)
{
    struct pydb__wreq r;
    int rc;

    if (op < PYDB_WRITE_APPEND || op > PYDB_WRITE_UNDELETE)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "pydb_write_one: op %d is not a PYDB_WRITE_*", op);
    if (!(db->flags & PYDB_OPEN_WRITE))
        return PYDB_ERROR(err, PYDB_EREADONLY, db->mst.path, -1,
                          "the database was opened read-only");
    if (own_txn_open(db))
        return PYDB_ERROR(err, PYDB_ELOCKED, db->mst.path, -1,
                          "this thread already has a transaction open on "
                          "this handle");
    memset(&r, 0, sizeof r);
    r.op = op;
    r.mfn = op == PYDB_WRITE_APPEND ? 0 : *mfn;
    r.fields = fields;
    r.nfields = op == PYDB_WRITE_APPEND || op == PYDB_WRITE_UPDATE ? nfields
                                                                  : 0;
    r.deadline = pydb__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    r.state = QUEUED;

    pthread_mutex_lock(&db->gmutex);
    if (db->gpid != getpid()) {
        /* a fork()ed child: its parent's queued threads are not here */
        db->ghead = db->gtail = NULL;
        db->gleader = 0;
        db->gpid = getpid();
    }
    if (db->gtail) db->gtail->next = &r;
    else db->ghead = &r;
    db->gtail = &r;
    for (;;) {
        if (r.state == DONE) break;
        if (r.state == QUEUED && !db->gleader && db->ghead == &r) {
            lead(db);
            continue;
        }
        if (r.state == QUEUED && pydb__now_ms() >= r.deadline) {
            unqueue(db, &r);
            pthread_mutex_unlock(&db->gmutex);
            return PYDB_ERROR(err, PYDB_ELOCKED, db->mst.path, -1,
                              "another thread holds the writer lock of "
                              "this handle (waited %d ms)", timeout_ms);
        }
        if (r.state == QUEUED)
            pydb__cond_wait_until(&db->gcond, &db->gmutex, r.deadline);
        else pthread_cond_wait(&db->gcond, &db->gmutex);
    }
    pthread_mutex_unlock(&db->gmutex);
    rc = r.rc;
    if (rc) *err = r.err;
    else if (op == PYDB_WRITE_APPEND) *mfn = r.mfn;
    return rc;
}

void pydb__test_group_state(pydb_db *db, int *queued, int *leading)
{
    pthread_mutex_lock(&db->gmutex);
    *queued = 0;
    for (struct pydb__wreq *r = db->ghead; r; r = r->next) ++*queued;
    *leading = db->gleader;
    pthread_mutex_unlock(&db->gmutex);
}
