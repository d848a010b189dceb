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
 *     (PYDB_COMMIT_NO: a commit hook refused one record's keys, say)
 *     puts every member back at the head of the queue, each marked to be
 *     committed in a group of its own, so that one bad change never
 *     fails another's and each waits there with its own timeout --
 *     unless the failure made the handle read-only (a failed fsync):
 *     that outcome, and every other one (committed, durable but not
 *     applied, unknown), is every member's, with err->committed saying
 *     which.
 *   - Timeouts stay each caller's: a queued request whose deadline passes
 *     before a leader takes it leaves the queue with PYDB_ELOCKED; a
 *     leader waits for the writer lock until the earliest deadline of its
 *     group, and if that passes, the requests whose deadline has passed
 *     fail with PYDB_ELOCKED and the others go back to the head of the
 *     queue, in order, for the next leader.  A member of a group whose
 *     commit is under way waits for it (one fsync, a hook's prepare),
 *     its deadline passed or not.
 *
 * Who owns what.  gmutex guards the queue (ghead, gtail, gleader) and
 * each request's next, state and alone: only a thread holding it links,
 * unlinks or moves a request between QUEUED, TAKEN and DONE.  A request
 * lives on its caller's stack, so it must be out of the queue and out of
 * every group before its caller returns: the caller returns only once it
 * saw DONE under gmutex, or after it unlinked itself while QUEUED.  While
 * a request is TAKEN, the leader alone writes its mfn, rc, err and
 * outcome (without gmutex; the caller reads them after DONE); the caller
 * wrote op, fields, deadline and the MFN to change before it queued it,
 * and nobody writes them after.
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
#include <stdio.h>
#include <string.h>

#define GROUP_MAX 128               /* requests per transaction            */
#define GROUP_BYTES (1 << 20)       /* field bytes per transaction (the
                                       first request is taken whatever
                                       its size)                           */

enum { QUEUED, TAKEN, DONE };       /* pydb__wreq.state                    */
enum { SETTLED, AGAIN, ALONE };     /* pydb__wreq.outcome: rc/err are the
                                       answer; queue it again; again, in a
                                       group of its own                    */

struct pydb__wreq {
    /* under gmutex */
    struct pydb__wreq *next;
    int state;
    int alone;               /* commit it in a group of its own            */
    /* the caller's, set before it is queued */
    int op;                  /* PYDB_WRITE_*                               */
    const pydb_field *fields;
    uint32_t nfields;
    int64_t deadline;        /* pydb__now_ms() until which it may wait     */
    /* in: the MFN changed; written by the leader while TAKEN */
    int32_t mfn;             /* out: the MFN appended                      */
    int outcome;
    int rc;
    pydb_error err;
};

static size_t field_bytes(const struct pydb__wreq *r)
{
    size_t n = 0;
    for (uint32_t i = 0; i < r->nfields; i++) n += r->fields[i].len;
    return n;
}

static void settle(struct pydb__wreq *r, int rc, const pydb_error *err)
{
    r->outcome = SETTLED;
    r->rc = rc;
    if (rc) r->err = *err;
}

/* r timed out in the queue: other calls of this handle went first. */
static int queue_timeout(struct pydb__wreq *r, const pydb_db *db)
{
    return PYDB_ERROR(&r->err, PYDB_ELOCKED, db->mst.path, -1,
                      "the writer lock was not free in time (calls of "
                      "other threads of this handle went first)");
}

/* r's group did not get the writer lock before r's deadline: the error of
 * the group's pydb_txn_begin() (who held it, which file). */
static int group_timeout(struct pydb__wreq *r, const pydb_error *err)
{
    r->err = *err;
    return PYDB_ELOCKED;
}

/* Begin the group's transaction, waiting until its earliest deadline.
 * On PYDB_ELOCKED the members whose own deadline has passed are settled
 * with it and the others go AGAIN; on another error all are settled. */
static int begin_group(pydb_txn **t, pydb_db *db, struct pydb__wreq **g,
                       size_t n)
{
    pydb_error err;
    int64_t first = g[0]->deadline, now;
    size_t i;
    int rc;

    for (i = 1; i < n; i++)
        if (g[i]->deadline < first) first = g[i]->deadline;
    memset(&err, 0, sizeof err);
    rc = pydb_txn_begin(t, db, (int)(first - pydb__now_ms()), &err);
    if (rc == PYDB_ELOCKED) {
        now = pydb__now_ms();
        for (i = 0; i < n; i++) {
            g[i]->outcome = AGAIN;
            if (g[i]->deadline <= now) {
                g[i]->outcome = SETTLED;
                g[i]->rc = group_timeout(g[i], &err);
            }
        }
    } else if (rc) {
        for (i = 0; i < n; i++) settle(g[i], rc, &err);
    }
    return rc;
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
        PYDB_ASSERT(r->op == PYDB_WRITE_UNDELETE);
        return pydb_txn_undelete(t, r->mfn, err);
    }
}

/* Commit the group g[0..n) in one transaction and set each member's
 * outcome. */
static void commit_group(pydb_db *db, struct pydb__wreq **g, size_t n)
{
    pydb_txn *t = NULL;
    pydb_error err;
    size_t i, applied = 0;
    int rc;

    if (begin_group(&t, db, g, n)) return;
    for (i = 0; i < n; i++) {
        pydb_error own;
        memset(&own, 0, sizeof own);
        settle(g[i], apply(t, g[i], &own), &own);
        applied += !g[i]->rc;
    }
    if (!applied) {
        pydb_txn_abort(t);
        return;
    }
    memset(&err, 0, sizeof err);
    rc = pydb_txn_commit(t, &err);
    if (rc && err.committed == PYDB_COMMIT_NO && applied > 1 &&
        !pydb__txn_read_only(db)) {
        /* Nothing was committed, and the handle still writes: one change
         * may be what failed it.  Each member again, alone (its own
         * change's error too: it may have depended on the others). */
        for (i = 0; i < n; i++) g[i]->outcome = ALONE;
        return;
    }
    for (i = 0; i < n; i++)
        if (!g[i]->rc) settle(g[i], rc, &err);
}

/* Lead: take a group from the head of the queue (the caller's request
 * is its first), commit it, hand out the outcomes, and put back at the
 * head, in order, the members that go again.  Called and returns with
 * gmutex held. */
static void lead(pydb_db *db)
{
    struct pydb__wreq *g[GROUP_MAX], *back = NULL, *last = NULL, *r;
    size_t n = 0, bytes = 0;

    db->gleader = 1;
    while ((r = db->ghead) && n < GROUP_MAX) {
        bytes += field_bytes(r);
        if (n && (r->alone || g[0]->alone || bytes > GROUP_BYTES)) break;
        db->ghead = r->next;
        r->state = TAKEN;
        g[n++] = r;
    }
    if (!db->ghead) db->gtail = NULL;
    pthread_mutex_unlock(&db->gmutex);
    commit_group(db, g, n);
    pthread_mutex_lock(&db->gmutex);
    for (size_t i = 0; i < n; i++) {
        if (g[i]->outcome == SETTLED) {
            g[i]->state = DONE;
            continue;
        }
        g[i]->state = QUEUED;
        g[i]->alone = g[i]->outcome == ALONE;
        if (last) last->next = g[i];
        else back = g[i];
        last = g[i];
    }
    if (back) {
        last->next = db->ghead;
        if (!db->ghead) db->gtail = last;
        db->ghead = back;
    }
    db->gleader = 0;
    pthread_cond_broadcast(&db->gcond);
}

/* Unlink r, QUEUED, from the queue. */
static void unqueue(pydb_db *db, struct pydb__wreq *r)
{
    struct pydb__wreq **p = &db->ghead, *prev = NULL;
    while (*p && *p != r) {
        prev = *p;
        p = &(*p)->next;
    }
    PYDB_ASSERT(*p == r);
    if (!*p) return;
    *p = r->next;
    if (db->gtail == r) db->gtail = prev;
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
    /* (a read-only handle: the group's pydb_txn_begin says so to each) */
    rc = pydb__txn_mine_open(db, err);
    if (rc) return rc;
    memset(&r, 0, sizeof r);
    r.op = op;
    r.mfn = op == PYDB_WRITE_APPEND ? 0 : *mfn;
    r.fields = fields;
    r.nfields = op == PYDB_WRITE_APPEND || op == PYDB_WRITE_UPDATE ? nfields
                                                                  : 0;
    r.deadline = pydb__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    r.state = QUEUED;

    pthread_mutex_lock(&db->gmutex);
    if (db->gtail) db->gtail->next = &r;
    else db->ghead = &r;
    db->gtail = &r;
    while (r.state != DONE) {
        if (r.state == QUEUED && !db->gleader && db->ghead == &r) {
            lead(db);
        } else if (r.state == QUEUED && pydb__now_ms() >= r.deadline) {
            unqueue(db, &r);
            r.rc = queue_timeout(&r, db);
            break;
        } else if (r.state == QUEUED) {
            pydb__cond_wait_until(&db->gcond, &db->gmutex, r.deadline);
        } else {
            pthread_cond_wait(&db->gcond, &db->gmutex);
        }
    }
    pthread_mutex_unlock(&db->gmutex);
    if (r.rc) *err = r.err;
    else if (op == PYDB_WRITE_APPEND) *mfn = r.mfn;
    return r.rc;
}

void pydb__test_group_state(pydb_db *db, int *queued, int *leading)
{
    pthread_mutex_lock(&db->gmutex);
    *queued = 0;
    for (struct pydb__wreq *r = db->ghead; r; r = r->next) ++*queued;
    *leading = db->gleader;
    pthread_mutex_unlock(&db->gmutex);
}
