/*
 * stat.c - gstat for pydb: pydb_stat_get() (pydb.h group 9), the figures
 * of the latest committed state in one pass.
 *
 * What it does: reads the reader table (registered readers, the oldest
 * commit they read and the smallest end of records they see), then
 * takes a snapshot of the latest commit (so that a writer may go on
 * committing meanwhile) and walks every MFN's XRF entry as of that
 * snapshot and the back-version chain of each version it sees (leaders
 * only: MFN, MFRL, STATUS, MFBWB/MFBWP), and asks the attached native
 * index (the commit hook's garbage()) for its figures.
 *
 * Counting rules (docs/architecture.md, "Garbage"):
 *   - versions: every version reachable from the XRF entry of an active
 *     or logically deleted record through the back pointers; the first
 *     of each chain is the record's current version (live bytes), the
 *     others are back versions, which are all garbage (superseded),
 *     except the first version of the chain of a record whose XRF says
 *     "update pending" (the one an ISIS inverted file reflects, which a
 *     compaction keeps: compact.c);
 *   - a back version v whose next-newer version lies at offset q is
 *     pinned iff q >= pydb__shm_oldest_end() (a registered reader's state
 *     ends before q, so that reader still reads v);
 *   - bytes are MFRL (the stored record length, alignment padding
 *     excluded).
 * The reader table is read before the snapshot is taken, so the
 * snapshot's own slot is not counted.  The handle's collector waits
 * during the walk (pydb__gc_pause: its compaction cannot replace the
 * files under it); a replacement by another handle or process (the
 * file pair's generation moves) makes it start again.
 *
 * Depends on: pydb_int.h, shm.h, gc.h (the collector's record and the
 * step lock around the index's garbage(); the dead-space wish),
 * compact.h (the writers' counters, the garbage share), nidx_handle.h (the figures
 * of an index no hook serves), read.c (snapshot, XRF scan),
 * record.c (leaders), vfs.c (reads).
 */
#include "compact.h"
#include "gc.h"
#include "nidx_handle.h"
#include "shm.h"
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#define STAT_ATTEMPTS 50   /* walks begun again after a file replacement */

typedef struct walk {
    pydb_db *db;
    int64_t oldest_end;   /* INT64_MAX: no registered reader             */
    int64_t mst_size;
    pydb_stat *out;
    int rc;
    pydb_error *err;
} walk;

/* The walk met a damaged record (w->rc PYDB_ECORRUPT, *w->err its
 * error): counted, the first one's error kept, and the walk goes on. */
static int damaged(walk *w)
{
    if (w->out->damaged++ == 0) {
        if (w->err) w->out->first_damage = *w->err;
        else w->out->first_damage.code = PYDB_ECORRUPT;
    }
    w->rc = PYDB_OK;
    return 0;
}

static int visit(void *ctx, int32_t mfn, const pydb_xrf_entry *e)
{
    walk *w = ctx;
    pydb_stat *o = w->out;
    pydb_leader l;
    int64_t off, newer = -1, back, chain = 0;

    if (e->state == PYDB_XRF_ACTIVE) o->active++;
    else if (e->state == PYDB_XRF_LDELETED) o->deleted++;
    else return 0;
    /* from the version the state sees back to the first one; `newer`:
     * the offset of the version that superseded the one at `off` */
    for (off = e->offset;; newer = off, off = back) {
        w->rc = pydb__leader_read(&l, w->db, mfn, off, w->mst_size, w->err);
        if (w->rc == PYDB_ECORRUPT) return damaged(w);
        if (w->rc) return 1;
        chain++;
        o->versions++;
        o->version_bytes += l.mfrl;
        if (newer < 0) {
            o->live_bytes += l.mfrl;
        } else {
            o->back_versions++;
            o->garbage_versions++;
            o->garbage_bytes += l.mfrl;
            if (newer >= w->oldest_end) {
                o->pinned_versions++;
                o->pinned_bytes += l.mfrl;
            }
        }
        back = l.mfbwb > 0 ? (int64_t)(l.mfbwb - 1) * PYDB_BLOCK + l.mfbwp
                           : -1;
        if (back < 0 && newer >= 0 && (e->flags & PYDB_FLAG_PENDING)) {
            /* the version an ISIS inverted file reflects: kept (compact.c
             * copy_mfn), a back version but no garbage */
            o->garbage_versions--;
            o->garbage_bytes -= l.mfrl;
            if (newer >= w->oldest_end) {
                o->pinned_versions--;
                o->pinned_bytes -= l.mfrl;
            }
        }
        if (back < 0) break;
        if (back >= off) {
            w->rc = PYDB_CORRUPT(w->err, w->db->mst.path, off,
                                 "record of MFN %d: back pointer to offset "
                                 "%lld does not point before the version "
                                 "at %lld", (int)mfn, (long long)back,
                                 (long long)off);
            return damaged(w);
        }
    }
    if (chain > o->longest_chain) o->longest_chain = chain;
    return 0;
}

/* The figures of a native index no hook of this handle serves (a
 * read-only handle, or a writer that attached none): the index opened
 * for them and closed.  No index: none (present 0). */
static int unattached_index(pydb_index_stat *out, pydb_db *db,
                            pydb_error *err)
{
    pydb_index *ix = NULL;
    pydb_error e;
    int rc = pydb_native_index_open(&ix, db->mst.path, &e);
    if (rc == PYDB_EIO && e.sys_errno == ENOENT) return PYDB_OK;
    if (rc) {
        if (err) *err = e;
        return rc;
    }
    rc = pydb__nidx_gc_garbage(ix, db, out, err);
    pydb_index_close(ix);
    return rc;
}

/* One attempt of pydb_stat_get(); *gen_moved set when the handle's file
 * pair changed during it (a compaction of another handle or process
 * replaced the files): the figures are then mixed and it is done again. */
static int stat_once(pydb_stat *out, pydb_db *db, int flags, int *gen_moved,
                     pydb_error *err)
{
    pydb_shm *shm = pydb__db_shm(db);
    pydb_snapshot *snap = NULL;
    pydb_commit_hook hook;
    uint64_t oldest = 0, gen0;
    int readers = 0, rc;
    int32_t stopped;
    walk w;

    *gen_moved = 0;
    memset(out, 0, sizeof *out);
    memset(&w, 0, sizeof w);
    w.oldest_end = INT64_MAX;
    /* the reader table before this call's own snapshot registers */
    if (shm && pydb__shm_valid(shm)) {
        oldest = pydb__shm_oldest(shm, &readers);
        /* 0: a reader is between registering and storing its end (a few
         * instructions): look again */
        for (int i = 0; i < 100; i++) {
            w.oldest_end = pydb__shm_oldest_end(shm);
            if (w.oldest_end != 0) break;
            sched_yield();
        }
    }
    /* This handle's collector waits (no compaction of its own replaces
     * the files under the walk; the index is counted between steps),
     * from before the snapshot: a snapshot taken while a step of it
     * swapped the files would name the old pair once the step ended,
     * and under a collector that compacts most of the time nearly every
     * attempt would start over. */
    pydb__gc_pause(db);
    rc = pydb_snapshot_take(&snap, db, err);
    if (rc) {
        pydb__gc_resume(db);
        return rc;
    }
    gen0 = pydb__files_gen(db);
    if (snap->st.commit != 0 && snap->st.file_gen != gen0) {
        *gen_moved = 1;   /* the handle has not switched to the new pair */
        rc = PYDB_OK;
        goto cleanup;
    }
    out->commit = snap->st.commit;
    out->readers = readers;
    out->oldest_commit = readers > 0 && oldest < out->commit ? oldest
                                                             : out->commit;
    out->policy = pydb_gc_get_policy(db);
    out->file_gen = snap->st.file_gen;
    pydb__gc_record_get(db, &out->collections, &out->last_collection,
                        &out->last, out->last_error, sizeof out->last_error,
                        &out->gc_pending);
    out->collector_pid = pydb__shm_lease_holder(pydb__db_shm(db));
    out->next_mfn = snap->st.next_mfn;
    out->mst_size = snap->st.mst_size;
    w.db = db;
    w.mst_size = pydb__fsize(&db->mst);
    if (w.mst_size < snap->st.mst_size) w.mst_size = snap->st.mst_size;
    w.out = out;
    w.err = err;
    rc = pydb__xrf_scan(db, &snap->st, 1, visit, &w, &stopped, 64, err);
    if (rc == PYDB_OK) rc = w.rc;
    if (pydb__files_gen(db) != gen0) {
        *gen_moved = 1;
        rc = PYDB_OK;
        goto cleanup;
    }
    if (rc) goto cleanup;
    hook = db->hook;
    if (flags & PYDB_STAT_NO_INDEX) goto cleanup;
    if (hook.prepare && hook.garbage) {
        out->index.present = 1;
        rc = hook.garbage(hook.ctx, db, &out->index, err);
    } else {
        rc = unattached_index(&out->index, db, err);
    }
cleanup:
    pydb__gc_resume(db);
    pydb_snapshot_release(snap);
    return rc;
}

int pydb_stat_get(pydb_stat *out, pydb_db *db, pydb_error *err)
{
    return pydb_stat_get_ex(out, db, 0, err);
}

int pydb_stat_get_ex(pydb_stat *out, pydb_db *db, int flags,
                     pydb_error *err)
{
    struct timespec pause = {0, 2000000};
    int moved = 0, rc = PYDB_OK;
    for (int attempt = 0; attempt < STAT_ATTEMPTS; attempt++) {
        rc = stat_once(out, db, flags, &moved, err);
        if (rc || !moved) return rc;
        /* the pause first: a compaction of another handle that ends
         * between the switch and the next snapshot makes that attempt
         * start over too, and a busy collector ends one every few ms */
        if (attempt >= 2) nanosleep(&pause, NULL);
        (void)pydb__files_sync(db, NULL);   /* to the new pair, then again */
    }
    return pydb__error_set(err, PYDB_EIO, EAGAIN, db->mst.path, -1, __FILE__,
                           __LINE__, "the master file was replaced by "
                           "compactions %d times during the statistics (try "
                           "again)", STAT_ATTEMPTS);
}

/* ------------------------------------------------- dead space (gc.c) */

/* Whether the dead space the statistics show is worth a compaction
 * (pydb_gc_find_dead_space; not written in compact.c, which the walk's
 * layer above gc.c must not be called from). */
static int dead_space(pydb_db *db)
{
    pydb_stat s;
    pydb_state st;
    pydb_error e;
    int64_t total, kept, dead, align = db->mstxl ? (int64_t)1 << db->mstxl : 2;

    if (pydb_stat_get_ex(&s, db, PYDB_STAT_NO_INDEX, &e) != PYDB_OK ||
        s.damaged)
        return 0;
    /* up to the end of records, not the file's last block: the rest of
     * that block is no garbage (a compaction writes it again; counted,
     * a database of a few small records was compacted at every call, a
     * review found) */
    pydb__state_now(&st, db);
    total = (st.mst_end < s.mst_size ? st.mst_end : s.mst_size) -
            PYDB_CTL_SIZE;
    kept = s.version_bytes - s.garbage_bytes;   /* what a job copies */
    if (total <= 0 || kept < 0) return 0;
    /* less the padding a job writes too (pydb__place: each version
     * aligned, a leader moved to the next block), at most: so that a
     * master file of small aligned versions is not compacted again at
     * each call for the gaps it keeps */
    dead = total - kept - (s.versions - s.garbage_versions) * (align - 1) -
           (total / PYDB_BLOCK + 1) * (pydb__geom[db->layout].leader + align);
    /* a block at least, and the writers' share */
    return dead >= PYDB_BLOCK &&
           dead >= total / (PYDB_COMPACT_GARBAGE_SHARE + 1) +
                       (total % (PYDB_COMPACT_GARBAGE_SHARE + 1) != 0);
}

int pydb_gc_find_dead_space(pydb_db *db)
{
    pydb_shm *shm = pydb__db_shm(db);
    int64_t v, b;
    int dead;

    if (!(db->flags & PYDB_OPEN_WRITE) || !db->gc || !shm ||
        !pydb__shm_valid(shm))
        return 0;
    pydb__compact_garbage(db, &v, &b);
    /* the counters' collection (a job in progress, db->compact, is the
     * collector's to read, under its step lock: it goes on anyway) */
    if (v > 0) return 0;
    dead = dead_space(db);
    pydb__gc_want_dead(db, dead);
    return dead;
}
