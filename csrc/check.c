/*
 * check.c - the validator: walk everything, report every fault.
 *
 * In the spirit of Firebird's `gfix -v -f`: the walk never stops at the
 * first fault; each one goes to the caller's callback with its kind,
 * severity, MFN and location (file + byte offset), and the summary counts
 * them per kind.  Formats: docs/isis-formats.md §2 (master
 * file: control record §2.1, leaders §2.2, placement §2.3, versions §2.4)
 * and §3 (XRF); the checks follow docs/reliability.md §2.1 "A validator".
 *
 * One committed state: the walk checks the state a snapshot pins
 * (pydb_snapshot_check; pydb_check_ex takes a snapshot itself), not the
 * files as they are at each moment, so writers in this or other processes
 * may commit while it runs (docs/design.md §6).  What the state fixes:
 *   - NXTMFN, NXTMFB/NXTMFP and the file sizes the steps compare with are
 *     the state's; the control record itself may be newer (a writer
 *     writes it before it publishes the next state) but never older;
 *   - an XRF entry whose pointer is at or past the state's end of records
 *     (mst_end) was written by a later commit: the version the state saw
 *     is found along the back pointers (pydb__version_visible, read.c)
 *     and that version and its chain are checked;
 *   - an XRF entry of an MFN the state does not have yet (>= its NXTMFN)
 *     is no fault when it points at or past mst_end at a leader of that
 *     MFN: a later commit's append;
 *   - the sequential scan stops at mst_end (later commits' bytes follow);
 *   - a last XRF block whose XRFPOS a later commit made positive (it added
 *     a block) is no fault.
 * In files mode (no usable commit header: info.commit == 0) the state is
 * the control record as read when the snapshot was taken and no writer
 * publishes states: a pointer past its end is reported, as other CDS/ISIS
 * tools would see it, and the scan runs to the end of the file.
 *
 * Steps, in order (each a function below; a step that finds its input
 * unusable reports it and the later steps still run):
 *   1. control record   NXTMFN/NXTMFB/NXTMFP against the file sizes,
 *                        MFTYPE, the CISIS lock words, file sizes; with a
 *                        commit header, the control record not behind
 *                        the state;
 *   2. XRF              every block of the file: XRFPOS number and sign,
 *                        every entry decoded; entries past NXTMFN must be 0;
 *   3. versions         for each XRF entry that names a position: the
 *                        record there (leader MFN, MFRL, BASE/NVF, STATUS
 *                        vs XRF sign, directory, placement), then its
 *                        back-pointer chain (each back version readable,
 *                        same MFN, strictly earlier offsets: no cycles);
 *                        steps 2 and 3 run interleaved, one XRF chunk at
 *                        a time;
 *   4. sequential scan  the versions reached in step 3, sorted by offset,
 *                        must not overlap; the gaps between them are
 *                        scanned for leaders that parse as records of a
 *                        valid MFN: versions nothing reaches (orphans);
 *   5. native index     (pydb_check_ex only, after the walk) the index
 *                        as of a commit: every key and its postings read
 *                        through the index's reader, which checks the
 *                        checksums and the order of keys; each key's
 *                        postings strictly ascending, no more than its
 *                        count, of MFNs active in that commit (a commit
 *                        changes a record's postings with the record:
 *                        deleted records have none); then each active
 *                        record's postings against the keys the index's
 *                        FST gives of it (index_records: records another
 *                        program wrote; `pydb index` makes them anew).
 * Not checked yet: the write-ahead log (<base>.wal, format in wal.h).  A
 * step between 1 and 2 would check the log's header/checksums and that
 * every record it would replay lies inside the files (add its kinds to
 * enum pydb_check_kind and call the step from pydb_check_ex()).
 *
 * Severities (one per kind, table `kinds` below): an ERROR is something a
 * reader fails on or that loses data; a WARNING is non-canonical or
 * wasteful but reads back without loss.  Orphans are warnings: the ISIS
 * update technique leaves superseded versions behind legitimately (§2.4).
 *
 * Safety: every offset and length taken from a file is checked against
 * the file size and the format limits before use; loops are bounded by
 * the file sizes (back chains strictly decrease); memory is bounded (see
 * pydb.h).  No global state: any number of checks may run at once, also
 * alongside readers and writers of the same handle.
 *
 * Depends on: record.c (geometry, leader and XRF decoding), vfs.c
 * (pydb__file_read), read.c (pydb__version_visible, the XRF sequence
 * lock, pydb__refresh_sizes), shm.h (the applying marker), the snapshot
 * (struct pydb_snapshot), error.c.  It reads the files itself rather than through read.c's
 * record reads, because it must go on past the first fault.
 */
#include "pydb_int.h"
#include "index_int.h"
#include "nidx_handle.h"
#include "nidx_manifest.h"
#include "shm.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (64 * 1024)            /* scan / XRF read unit (bytes)      */
#define XRF_CHUNK_BLOCKS (CHUNK / PYDB_BLOCK)
#define MAX_TRACKED (1 << 22)        /* record versions in the table      */
#define PROGRESS_EVERY 4096          /* units between progress calls      */

static const struct {
    const char *name;
    int severity;
} kinds[PYDB_CHECK_NKINDS] = {
    [PYDB_CHECK_CONTROL] = {"control", PYDB_CHECK_ERROR},
    [PYDB_CHECK_XRF_BLOCK] = {"xrf-block", PYDB_CHECK_ERROR},
    [PYDB_CHECK_XRF_POINTER] = {"xrf-pointer", PYDB_CHECK_ERROR},
    [PYDB_CHECK_XRF_BEYOND_END] = {"xrf-beyond-end", PYDB_CHECK_ERROR},
    [PYDB_CHECK_MFN_MISMATCH] = {"mfn-mismatch", PYDB_CHECK_ERROR},
    [PYDB_CHECK_MFRL] = {"mfrl", PYDB_CHECK_ERROR},
    [PYDB_CHECK_BASE] = {"base", PYDB_CHECK_ERROR},
    [PYDB_CHECK_DIRECTORY] = {"directory", PYDB_CHECK_ERROR},
    [PYDB_CHECK_STATUS] = {"status", PYDB_CHECK_ERROR},
    [PYDB_CHECK_BACK_POINTER] = {"back-pointer", PYDB_CHECK_ERROR},
    [PYDB_CHECK_OVERLAP] = {"overlap", PYDB_CHECK_ERROR},
    [PYDB_CHECK_IO] = {"io", PYDB_CHECK_ERROR},
    [PYDB_CHECK_INDEX] = {"index", PYDB_CHECK_ERROR},
    [PYDB_CHECK_INDEX_POSTING] = {"index-posting", PYDB_CHECK_ERROR},
    [PYDB_CHECK_MFRL_PADDING] = {"mfrl-padding", PYDB_CHECK_WARNING},
    [PYDB_CHECK_PLACEMENT] = {"placement", PYDB_CHECK_WARNING},
    [PYDB_CHECK_STATUS_MISMATCH] = {"status-mismatch", PYDB_CHECK_WARNING},
    [PYDB_CHECK_LOCKED] = {"locked", PYDB_CHECK_WARNING},
    [PYDB_CHECK_DIRECTORY_ORDER] = {"directory-order", PYDB_CHECK_WARNING},
    [PYDB_CHECK_XRFPOS_SIGN] = {"xrfpos-sign", PYDB_CHECK_WARNING},
    [PYDB_CHECK_FILE_SIZE] = {"file-size", PYDB_CHECK_WARNING},
    [PYDB_CHECK_CONTROL_END] = {"control-end", PYDB_CHECK_WARNING},
    [PYDB_CHECK_CONTROL_FLAGS] = {"control-flags", PYDB_CHECK_WARNING},
    [PYDB_CHECK_ORPHAN] = {"orphan", PYDB_CHECK_WARNING},
    [PYDB_CHECK_LIMIT] = {"limit", PYDB_CHECK_WARNING},
};

const char *pydb_check_kind_name(int kind)
{
    return kind >= 0 && kind < PYDB_CHECK_NKINDS ? kinds[kind].name : "?";
}

int pydb_check_kind_severity(int kind)
{
    return kind >= 0 && kind < PYDB_CHECK_NKINDS ? kinds[kind].severity : 0;
}

/* A record version reached from the XRF (current or back version). */
typedef struct {
    int64_t off;      /* -1 = empty slot */
    uint32_t mfrl;
    int32_t mfn;
} version;

/* What check_version() learnt about a readable version. */
typedef struct {
    uint32_t mfrl;
    int64_t back;     /* offset of the previous version, or -1 */
} vinfo;

typedef struct {
    pydb_db *db;
    const pydb_geom *g;
    const pydb_check_options *opt;
    pydb_check_summary *sum;
    int stop;
    /* The snapshot's committed state: commits during the walk do not move
     * what the walk checks against. */
    const pydb_state *st;
    int published;        /* 1: st comes from the commit header          */
    int64_t mst_size, xrf_size;
    int32_t next_mfn, next_block, next_pos;
    int64_t end;          /* committed end of the records (NXTMFB/NXTMFP) */
    int64_t append_at;    /* where the next append starts: end, aligned   */
    int64_t align;        /* record start alignment: 2 or 2^MSTXL        */
    int64_t max_mfrl;
    /* version table: open addressing on the offset */
    version *tab;
    size_t tab_cap, tab_n;
    int tracking;         /* 0 once the table is full (LIMIT reported)    */
    uint8_t *dir;         /* leader + directory buffer                    */
    size_t dir_cap;
    uint8_t *chunk;       /* scan / XRF buffer                            */
    int64_t chunk_off, chunk_len;
    int64_t done, total, next_progress;
    int64_t scan_base;    /* `done` when the sequential scan started     */
    char msg[512];
} ck;

/* ------------------------------------------------------------ reports */

static int report(ck *c, int kind, int32_t mfn, const char *path,
                  int64_t off, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static int report(ck *c, int kind, int32_t mfn, const char *path,
                  int64_t off, const char *fmt, ...)
{
    va_list ap;
    pydb_check_problem p;

    if (c->stop) return 1;
    c->sum->by_kind[kind]++;
    if (kinds[kind].severity == PYDB_CHECK_ERROR) c->sum->errors++;
    else c->sum->warnings++;
    if (!c->opt->problem) return 0;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    p.kind = kind;
    p.name = kinds[kind].name;
    p.severity = kinds[kind].severity;
    p.mfn = mfn;
    p.path = path;
    p.offset = off;
    p.message = c->msg;
    if (c->opt->problem(c->opt->ctx, &p)) {
        c->stop = 1;
        c->sum->stopped = 1;
    }
    return c->stop;
}

/* The scan has reached byte `pos` of the master file. */
static void progress(ck *c, int64_t units, int force);
static void scan_progress(ck *c, int64_t pos)
{
    int64_t d = c->scan_base + pos / PYDB_BLOCK;
    if (d > c->done) progress(c, d - c->done, 0);
}

static void progress(ck *c, int64_t units, int force)
{
    c->done += units;
    if (!c->opt->progress) return;
    if (force || c->done >= c->next_progress) {
        c->opt->progress(c->opt->progress_ctx, c->done, c->total);
        c->next_progress = c->done + PROGRESS_EVERY;
    }
}

/* Whether file f now ends before the n bytes at `off` the check read:
 * it shrank after the handle learnt its size (another program truncated
 * it).  Then that is reported, once, and the whole check stops (the
 * index's comparison too): every later read past the end would fail
 * alike (the orphan scan once per byte) or, through a mapping, read the
 * zeros of the last page. */
static int shrank(ck *c, const pydb_file *f, int64_t off, size_t n,
                  int32_t mfn, const char *what)
{
    int64_t size = pydb__file_short_of(f, n, off);
    if (size < 0) return 0;
    report(c, PYDB_CHECK_IO, mfn, f->path, off,
           "reading %s: the file is %lld bytes now, short of the %zu bytes "
           "at offset %lld: it shrank after the database was opened "
           "(another program truncated it?); the check stops here (open "
           "the database again and check it)", what, (long long)size, n,
           (long long)off);
    c->stop = 1;
    c->sum->stopped = 1;
    return 1;
}

/* Read through the handle; a failure becomes an IO problem (reads are
 * bounds-checked by the callers against the sizes the handle knows, so
 * this is a real I/O error, or a file that shrank). */
static int ck_read(ck *c, const pydb_file *f, void *buf, size_t n,
                   int64_t off, int32_t mfn, const char *what)
{
    pydb_error e;
    int rc = pydb__file_read(f, c->db->io, buf, n, off, what, &e);
    if (rc == PYDB_OK) return 0;
    if (!shrank(c, f, off, n, mfn, what))
        report(c, PYDB_CHECK_IO, mfn, f->path, off, "reading %s: %s", what,
               e.message);
    return -1;
}

/* ------------------------------------------------------ version table */

static uint64_t hash_off(int64_t off)
{
    uint64_t h = (uint64_t)off * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

static version *tab_find(ck *c, int64_t off)
{
    size_t i;
    if (!c->tab) return NULL;
    for (i = hash_off(off) & (c->tab_cap - 1);; i = (i + 1) & (c->tab_cap - 1)) {
        if (c->tab[i].off == off) return &c->tab[i];
        if (c->tab[i].off < 0) return NULL;
    }
}

static void tab_put(version *tab, size_t cap, const version *v)
{
    size_t i;
    for (i = hash_off(v->off) & (cap - 1); tab[i].off >= 0;
         i = (i + 1) & (cap - 1)) {
    }
    tab[i] = *v;
}

/* Remember a version; on a full table or no memory, stop tracking. */
static void tab_add(ck *c, int64_t off, uint32_t mfrl, int32_t mfn)
{
    version v = {off, mfrl, mfn};
    if (!c->tracking) return;
    if (c->tab_n + 1 > c->tab_cap / 2) {
        size_t ncap = c->tab_cap ? c->tab_cap * 2 : 1024, i;
        version *nt = NULL;
        if (c->tab_n + 1 <= MAX_TRACKED) nt = malloc(ncap * sizeof *nt);
        if (!nt) {
            c->tracking = 0;
            free(c->tab);
            c->tab = NULL;
            c->tab_cap = c->tab_n = 0;
            report(c, PYDB_CHECK_LIMIT, 0, c->db->mst.path, -1,
                   "more than %d record versions (or no memory for "
                   "them): the overlap and orphan checks are skipped and "
                   "shared back chains are walked again", MAX_TRACKED);
            return;
        }
        for (i = 0; i < ncap; i++) nt[i].off = -1;
        for (i = 0; i < c->tab_cap; i++)
            if (c->tab[i].off >= 0) tab_put(nt, ncap, &c->tab[i]);
        free(c->tab);
        c->tab = nt;
        c->tab_cap = ncap;
    }
    tab_put(c->tab, c->tab_cap, &v);
    c->tab_n++;
}

/* ------------------------------------------------------------ records */

/* Make the directory buffer hold n bytes (n <= leader + 65535 * 12). */
static int dir_reserve(ck *c, size_t n)
{
    uint8_t *b;
    if (n <= c->dir_cap) return 0;
    b = realloc(c->dir, n);
    if (!b) return -1;
    c->dir = b;
    c->dir_cap = n;
    return 0;
}

/*
 * Check the version of `mfn` at `off` (already known to lie in
 * [64, file size)).  `xrf_state` is the XRF state for a current version,
 * or -1 for a back version.  Returns 0 and fills *vi when the version is
 * readable (possibly with faults reported), -1 when it is not.
 */
static int check_version(ck *c, int32_t mfn, int64_t off, int xrf_state,
                         vinfo *vi)
{
    const pydb_geom *g = c->g;
    const char *path = c->db->mst.path;
    const char *what = xrf_state < 0 ? "back version" : "record";
    int64_t size = c->mst_size, mfrl, base, nvf, i, expect = 0;
    int64_t mfbwb, mfbwp, lim = PYDB_BLOCK - (g->leader - 4);
    int32_t got;
    int locked, status, order_reported = 0;
    pydb_leader l;
    uint8_t *h;

    if (size - off < g->leader) {
        report(c, PYDB_CHECK_MFRL, mfn, path, off,
               "%s of MFN %d at offset %lld: the %d-byte leader passes the "
               "end of the file (%lld bytes)", what, (int)mfn,
               (long long)off, g->leader, (long long)size);
        return -1;
    }
    if (dir_reserve(c, (size_t)g->leader) < 0) return -1;
    h = c->dir;
    if (ck_read(c, &c->db->mst, h, (size_t)g->leader, off, mfn, "leader"))
        return -1;
    pydb__leader_decode(&l, g, h);  /* record.c; every field checked below */
    got = l.mfn;
    if (got != mfn) {
        /* (a mapping reads zeros past a cut: no leader of any MFN) */
        if (!shrank(c, &c->db->mst, off, (size_t)g->leader, mfn, "leader"))
            report(c, PYDB_CHECK_MFN_MISMATCH, mfn, path, off,
                   "the %s of MFN %d at offset %lld carries MFN %d in its "
                   "leader", what, (int)mfn, (long long)off, (int)got);
        return -1;
    }
    mfrl = l.mfrl;
    locked = l.locked;
    if (mfrl < g->leader || mfrl > c->max_mfrl) {
        report(c, PYDB_CHECK_MFRL, mfn, path, off + g->off_mfrl,
               "%s of MFN %d at offset %lld: impossible MFRL %lld "
               "(%d..%lld)", what, (int)mfn, (long long)off,
               (long long)mfrl, g->leader, (long long)c->max_mfrl);
        return -1;
    }
    if (mfrl > size - off) {
        report(c, PYDB_CHECK_MFRL, mfn, path, off + g->off_mfrl,
               "%s of MFN %d at offset %lld: MFRL %lld passes the end of "
               "the file (%lld bytes)", what, (int)mfn, (long long)off,
               (long long)mfrl, (long long)size);
        return -1;
    }
    /* The next append starts at the committed end, aligned (§2.3). */
    if (off < c->end && off + mfrl > c->append_at)
        report(c, PYDB_CHECK_MFRL, mfn, path, off + g->off_mfrl,
               "%s of MFN %d at offset %lld: its %lld bytes pass the "
               "committed end %lld (NXTMFB/NXTMFP): the next append "
               "overwrites it", what, (int)mfn, (long long)off,
               (long long)mfrl, (long long)c->end);
    else if (off < c->end && off + mfrl > c->end)
        report(c, PYDB_CHECK_CONTROL_END, mfn, path, 8,
               "%s of MFN %d at offset %lld ends at %lld, past the "
               "committed end %lld (NXTMFB/NXTMFP %d/%d, off by %lld; the "
               "next append, aligned, does not overwrite it)", what,
               (int)mfn, (long long)off, (long long)(off + mfrl),
               (long long)c->end, (int)c->next_block,
               (int)c->next_pos, (long long)(off + mfrl - c->end));
    if (locked && xrf_state >= 0)
        report(c, PYDB_CHECK_LOCKED, mfn, path, off + g->off_mfrl,
               "record of MFN %d at offset %lld: MFRL stored negative "
               "(-%lld): a record lock was left set", (int)mfn,
               (long long)off, (long long)mfrl);
    if (mfrl % c->align)
        report(c, PYDB_CHECK_MFRL_PADDING, mfn, path, off + g->off_mfrl,
               "%s of MFN %d at offset %lld: MFRL %lld is not a multiple "
               "of %lld (%s)", what, (int)mfn, (long long)off,
               (long long)mfrl, (long long)c->align,
               c->db->mstxl ? "2^MSTXL" : "records are even");
    if (off % c->align || off % PYDB_BLOCK > lim)
        report(c, PYDB_CHECK_PLACEMENT, mfn, path, off,
               "%s of MFN %d starts at offset %lld: %s", what, (int)mfn,
               (long long)off,
               off % c->align ? "not on the record alignment boundary"
                              : "its leader splits a 512-byte block "
                                "(never-split rule)");
    base = l.base;
    nvf = l.nvf;
    if (base != g->leader + nvf * g->entry || base > mfrl) {
        report(c, PYDB_CHECK_BASE, mfn, path, off + g->off_base,
               "%s of MFN %d at offset %lld: BASE %lld and NVF %lld do "
               "not fit (expected BASE %lld within MFRL %lld)", what,
               (int)mfn, (long long)off, (long long)base, (long long)nvf,
               (long long)(g->leader + nvf * g->entry), (long long)mfrl);
        return -1;
    }
    status = l.status;
    if (status > 1)
        report(c, PYDB_CHECK_STATUS, mfn, path, off + g->off_status,
               "%s of MFN %d at offset %lld: STATUS %d (0 active, 1 "
               "deleted)", what, (int)mfn, (long long)off, status);
    else if ((xrf_state == PYDB_XRF_ACTIVE && status == 1) ||
             (xrf_state == PYDB_XRF_LDELETED && status == 0))
        report(c, PYDB_CHECK_STATUS_MISMATCH, mfn, path, off + g->off_status,
               "record of MFN %d at offset %lld: STATUS %d but the XRF "
               "pointer is %s", (int)mfn, (long long)off, status,
               status ? "positive (active)" : "negated (deleted)");
    mfbwb = l.mfbwb;
    mfbwp = l.mfbwp;
    vi->mfrl = (uint32_t)mfrl;
    vi->back = -1;
    if (mfbwb != 0 || mfbwp != 0) {
        if (mfbwb < 1 || mfbwp >= PYDB_BLOCK)
            report(c, PYDB_CHECK_BACK_POINTER, mfn, path, off + g->off_mfbwb,
                   "%s of MFN %d at offset %lld: malformed back pointer "
                   "MFBWB/MFBWP %lld/%lld", what, (int)mfn, (long long)off,
                   (long long)mfbwb, (long long)mfbwp);
        else
            vi->back = (mfbwb - 1) * PYDB_BLOCK + mfbwp;
    }
    /* Directory: every field inside the record, stored back to back. */
    if (nvf > 0) {
        if (dir_reserve(c, (size_t)base) < 0) {
            report(c, PYDB_CHECK_LIMIT, mfn, path, off,
                   "no memory for a %lld-byte directory", (long long)base);
            return 0;
        }
        if (ck_read(c, &c->db->mst, c->dir + g->leader,
                    (size_t)(base - g->leader), off + g->leader, mfn,
                    "directory"))
            return -1;
        for (i = 0; i < nvf && !c->stop; i++) {
            const uint8_t *d = c->dir + g->leader + i * g->entry;
            int64_t pos, len;
            pydb__dir_entry(g, d, &pos, &len);
            if (pos + len > mfrl - base) {
                report(c, PYDB_CHECK_DIRECTORY, mfn, path,
                       off + g->leader + i * g->entry,
                       "%s of MFN %d at offset %lld: directory entry %lld "
                       "(tag %u, pos %lld, len %lld) passes the end of the "
                       "record (%lld data bytes)", what, (int)mfn,
                       (long long)off, (long long)(i + 1),
                       (unsigned)pydb__u16(d), (long long)pos,
                       (long long)len, (long long)(mfrl - base));
                continue;
            }
            if (pos != expect && !order_reported) {
                order_reported = 1;
                report(c, PYDB_CHECK_DIRECTORY_ORDER, mfn, path,
                       off + g->leader + i * g->entry,
                       "%s of MFN %d at offset %lld: directory entry %lld "
                       "(tag %u) starts at data byte %lld, expected %lld "
                       "(fields not back to back in directory order)",
                       what, (int)mfn, (long long)off, (long long)(i + 1),
                       (unsigned)pydb__u16(d), (long long)pos,
                       (long long)expect);
            }
            expect = pos + len;
        }
    }
    return 0;
}

/* Check the current version of `mfn` at `off`, then its back chain. */
static void check_chain(ck *c, int32_t mfn, int64_t off, int state)
{
    const char *path = c->db->mst.path;
    const pydb_geom *g = c->g;
    version *seen;
    vinfo vi;
    int64_t cur = off;

    seen = tab_find(c, off);
    if (seen) {
        /* Another XRF entry reached this offset first. */
        if (seen->mfn != mfn)
            report(c, PYDB_CHECK_MFN_MISMATCH, mfn, path, off,
                   "the XRF entry of MFN %d points at offset %lld, which "
                   "holds a version of MFN %d", (int)mfn, (long long)off,
                   (int)seen->mfn);
        return;
    }
    if (check_version(c, mfn, off, state, &vi) < 0) return;
    c->sum->versions++;
    tab_add(c, off, vi.mfrl, mfn);
    while (vi.back >= 0 && !c->stop) {
        int64_t back = vi.back;
        if (back >= cur) {
            report(c, PYDB_CHECK_BACK_POINTER, mfn, path, cur + g->off_mfbwb,
                   "version of MFN %d at offset %lld: back pointer to "
                   "offset %lld is not strictly earlier in the file "
                   "(cycle?)", (int)mfn, (long long)cur, (long long)back);
            return;
        }
        if (back < PYDB_CTL_SIZE) {
            report(c, PYDB_CHECK_BACK_POINTER, mfn, path, cur + g->off_mfbwb,
                   "version of MFN %d at offset %lld: back pointer to "
                   "offset %lld, inside the control record", (int)mfn,
                   (long long)cur, (long long)back);
            return;
        }
        seen = tab_find(c, back);
        if (seen) {
            if (seen->mfn != mfn)
                report(c, PYDB_CHECK_BACK_POINTER, mfn, path,
                       cur + g->off_mfbwb,
                       "version of MFN %d at offset %lld: back pointer to "
                       "offset %lld, a version of MFN %d", (int)mfn,
                       (long long)cur, (long long)back, (int)seen->mfn);
            return;   /* the rest of the chain was checked already */
        }
        if (check_version(c, mfn, back, -1, &vi) < 0) return;
        c->sum->back_versions++;
        tab_add(c, back, vi.mfrl, mfn);
        cur = back;
    }
}

/* ---------------------------------------------------- step 1: control */

/* With a commit header: the control record `h` (32 bytes) is the state's
 * or a later commit's (a writer writes it before it publishes), never an
 * older one: NXTMFN and the end of the records not below the state's. */
static void check_control_state(ck *c, const uint8_t *h)
{
    pydb_ctl ctl;
    int64_t end;

    pydb__ctl_decode(&ctl, h);
    end = pydb__ctl_end(ctl.next_block, ctl.next_pos);
    if (ctl.next_mfn < c->next_mfn)
        report(c, PYDB_CHECK_CONTROL, 0, c->db->mst.path, 4,
               "control record: NXTMFN %d is below the NXTMFN %d of the "
               "committed state (commit %llu of the commit header)",
               (int)ctl.next_mfn, (int)c->next_mfn,
               (unsigned long long)c->st->commit);
    else if (end < c->end)
        report(c, PYDB_CHECK_CONTROL, 0, c->db->mst.path, 8,
               "control record: NXTMFB/NXTMFP %d/%d put the end of the "
               "records at byte %lld, before the end %lld of the committed "
               "state (commit %llu of the commit header): the next append "
               "overwrites records", (int)ctl.next_block, (int)ctl.next_pos,
               (long long)end, (long long)c->end,
               (unsigned long long)c->st->commit);
}

static void check_control(ck *c)
{
    pydb_db *db = c->db;
    uint8_t h[32];
    int32_t delock, ewlock;

    if (c->mst_size % PYDB_BLOCK)
        report(c, PYDB_CHECK_FILE_SIZE, 0, db->mst.path, c->mst_size,
               "the master file has %lld bytes, not a multiple of 512",
               (long long)c->mst_size);
    if (c->xrf_size % PYDB_BLOCK)
        report(c, PYDB_CHECK_FILE_SIZE, 0, db->xrf.path, c->xrf_size,
               "the XRF has %lld bytes, not a multiple of 512 (the partial "
               "block is ignored)", (long long)c->xrf_size);
    if (c->end < PYDB_CTL_SIZE || c->end > c->mst_size)
        report(c, PYDB_CHECK_CONTROL, 0, db->mst.path, 8,
               "control record: NXTMFB/NXTMFP %d/%d put the end of the "
               "records at byte %lld, outside %d..%lld", (int)c->next_block,
               (int)c->next_pos, (long long)c->end, PYDB_CTL_SIZE,
               (long long)c->mst_size);
    if (c->next_pos > PYDB_BLOCK)
        report(c, PYDB_CHECK_CONTROL, 0, db->mst.path, 12,
               "control record: NXTMFP %d is past the 512-byte block",
               (int)c->next_pos);
    if (db->mftype > 1)
        report(c, PYDB_CHECK_CONTROL_FLAGS, 0, db->mst.path, 14,
               "control record: MFTYPE %d (0 user, 1 system database)",
               (int)db->mftype);
    if (ck_read(c, &db->mst, h, sizeof h, 0, 0, "control record")) return;
    if (c->published) check_control_state(c, h);
    delock = (int32_t)pydb__u32(h + 24);
    ewlock = (int32_t)pydb__u32(h + 28);
    if (delock != 0 || ewlock != 0)
        report(c, PYDB_CHECK_CONTROL_FLAGS, 0, db->mst.path,
               delock ? 24 : 28,
               "control record: CISIS lock words set (data-entry locks "
               "%d, exclusive write lock %d): a writer did not finish",
               (int)delock, (int)ewlock);
}

/* --------------------------------------------- steps 2+3: XRF, records */

/* Does a leader of `mfn` lie at `off` (at or past the state's end: a
 * later commit's version, perhaps past the sizes the handle knows)? */
static int later_leader(ck *c, int32_t mfn, int64_t off)
{
    pydb_db *db = c->db;
    pydb_leader l;
    pydb_error e;

    if (dir_reserve(c, (size_t)c->g->leader) < 0) return 0;
    if (off > pydb__fsize(&db->mst) - c->g->leader) pydb__refresh_sizes(db);
    if (pydb__file_read(&db->mst, db->io, c->dir, (size_t)c->g->leader, off,
                        "leader", &e))
        return 0;
    pydb__leader_decode(&l, c->g, c->dir);
    return l.mfn == mfn;
}

/* The XRF entry of `mfn` points at `off`, at or past the state's end of
 * records: a later commit wrote that version.  Check the version the
 * state saw (found along the back pointers) and its chain instead; a
 * chain that does not lead back to one is a fault of the entry.  Returns
 * 1 when done, 0 when the version there has no older one (no commit of
 * this protocol wrote it: the caller reports it as any pointer past the
 * committed end). */
static int check_later(ck *c, int32_t mfn, int32_t raw, int64_t off,
                       int64_t where)
{
    pydb_error e;
    int64_t vis;
    int status, rc;

    rc = pydb__version_visible(&vis, &status, c->db, c->st, mfn, off, &e);
    if (rc == PYDB_EIO) {
        report(c, PYDB_CHECK_IO, mfn, e.path[0] ? e.path : c->db->mst.path,
               e.offset, "reading the versions of MFN %d: %s", (int)mfn,
               e.message);
        return 1;
    }
    if (rc) {
        report(c, PYDB_CHECK_XRF_POINTER, mfn, c->db->xrf.path, where,
               "XRF entry of MFN %d (value %d) points at offset %lld, past "
               "the committed end %lld (commit %llu), and no version of "
               "that commit lies behind it: %s", (int)mfn, (int)raw,
               (long long)off, (long long)c->end,
               (unsigned long long)c->st->commit, e.message);
        return 1;
    }
    if (vis >= c->end) return 0;
    check_chain(c, mfn, vis, status ? PYDB_XRF_LDELETED : PYDB_XRF_ACTIVE);
    return 1;
}

static void check_xrf_entry(ck *c, int32_t mfn, int32_t raw, int64_t where)
{
    pydb_db *db = c->db;
    pydb_xrf_entry e;
    int64_t off;

    pydb__xrf_unpack(&e, raw, db->mstxl);
    if (e.state == PYDB_XRF_UNUSED || e.state == PYDB_XRF_PDELETED)
        return;                   /* never created / physically gone */
    off = e.offset;
    if (off < PYDB_CTL_SIZE) {
        char why[80];
        report(c, PYDB_CHECK_XRF_POINTER, mfn, db->xrf.path, where,
               "XRF entry of MFN %d (value %d) %s", (int)mfn, (int)raw,
               pydb__xrf_low_reason(why, sizeof why, off));
        return;
    }
    if (c->published && off >= c->end &&
        check_later(c, mfn, raw, off, where))
        return;
    if (off >= c->mst_size) {
        report(c, PYDB_CHECK_XRF_POINTER, mfn, db->xrf.path, where,
               "XRF entry of MFN %d (value %d) points at offset %lld, past "
               "the end of the master file (%lld bytes)", (int)mfn,
               (int)raw, (long long)off, (long long)c->mst_size);
        return;
    }
    if (off >= c->end)   /* reported, and the version is still checked */
        report(c, PYDB_CHECK_XRF_POINTER, mfn, db->xrf.path, where,
               "XRF entry of MFN %d (value %d) points at offset %lld, past "
               "the committed end %lld (NXTMFB/NXTMFP): the next append "
               "overwrites the record", (int)mfn, (int)raw, (long long)off,
               (long long)c->end);
    check_chain(c, mfn, off, e.state);
}

/* Read XRF blocks b0..b0+nb-1 into buf: 0, or -1 with the failure
 * reported as an IO problem. */
static int xrf_read(ck *c, uint8_t *buf, int64_t nb, int64_t b0)
{
    pydb_error e;
    if (pydb__file_read(&c->db->xrf, c->db->io, buf,
                        (size_t)(nb * PYDB_BLOCK), b0 * PYDB_BLOCK,
                        "XRF blocks", &e) == PYDB_OK)
        return 0;
    report(c, PYDB_CHECK_IO, 0, c->db->xrf.path, b0 * PYDB_BLOCK,
           "reading XRF blocks: %s", e.message);
    return -1;
}

/* With a commit header: has a later commit added XRF blocks (so the
 * state's last block has lost its negative XRFPOS legitimately)?  A
 * writer applying a commit writes the old last block before the new one:
 * while it applies (the header's applying marker), the new block may not
 * be there yet. */
static int xrf_grew(ck *c)
{
    pydb_db *db = c->db;
    pydb_shm *shm = pydb__db_shm(db);

    if (!c->published) return 0;
    if (pydb__fsize(&db->xrf) <= c->xrf_size) pydb__refresh_sizes(db);
    return pydb__fsize(&db->xrf) >= c->xrf_size + PYDB_BLOCK ||
           (shm && pydb__shm_applying_commit(shm) ==
                       pydb__shm_latest(shm) + 1);
}

/* With a commit header: is the nonzero XRF entry `raw` of `mfn` (an MFN
 * the state does not have) a later commit's append, pointing at or past
 * the state's end at a leader of that MFN? */
static int later_append(ck *c, int32_t mfn, int32_t raw)
{
    pydb_xrf_entry e;

    if (!c->published) return 0;
    pydb__xrf_unpack(&e, raw, c->db->mstxl);
    return (e.state == PYDB_XRF_ACTIVE || e.state == PYDB_XRF_LDELETED) &&
           e.offset >= c->end && later_leader(c, mfn, e.offset);
}

static void check_xrf(ck *c)
{
    pydb_db *db = c->db;
    int64_t nblocks = c->xrf_size / PYDB_BLOCK, b, b0;
    int64_t need = pydb__xrf_blocks(c->next_mfn);
    int neg_reported = 0;

    if (nblocks < need)
        report(c, PYDB_CHECK_XRF_BLOCK, 0, db->xrf.path, c->xrf_size,
               "the XRF has %lld whole blocks, NXTMFN %d needs %lld: MFN "
               "%lld..%d have no entry", (long long)nblocks,
               (int)c->next_mfn, (long long)need,
               (long long)(nblocks * PYDB_XRF_PER_BLOCK + 1),
               (int)(c->next_mfn - 1));
    for (b0 = 0; b0 < nblocks && !c->stop; b0 += XRF_CHUNK_BLOCKS) {
        int64_t nb = nblocks - b0 < XRF_CHUNK_BLOCKS ? nblocks - b0
                                                     : XRF_CHUNK_BLOCKS;
        uint8_t *buf = c->chunk;
        uint64_t seq;
        int failed;
        c->chunk_len = 0;   /* the scan buffer no longer holds MST bytes */
        do {    /* not while this process's writer copies XRF blocks */
            seq = pydb__seq_begin(db);
            failed = xrf_read(c, buf, nb, b0);
        } while (!failed && pydb__seq_retry(db, seq));
        if (failed) return;
        for (b = b0; b < b0 + nb && !c->stop; b++) {
            const uint8_t *blk = buf + (b - b0) * PYDB_BLOCK;
            int32_t pos = (int32_t)pydb__u32(blk);
            int64_t apos = pos < 0 ? -(int64_t)pos : pos;
            if (apos != b + 1)
                report(c, PYDB_CHECK_XRF_BLOCK, 0, db->xrf.path,
                       b * PYDB_BLOCK,
                       "XRF block %lld holds XRFPOS %d (expected %lld or "
                       "its negation): readers refuse its %d entries",
                       (long long)(b + 1), (int)pos, (long long)(b + 1),
                       PYDB_XRF_PER_BLOCK);
            else if (pos < 0 && b != nblocks - 1 && !neg_reported) {
                neg_reported = 1;
                report(c, PYDB_CHECK_XRFPOS_SIGN, 0, db->xrf.path,
                       b * PYDB_BLOCK,
                       "XRF block %lld is not the last but its XRFPOS is "
                       "negative (%d)", (long long)(b + 1), (int)pos);
            } else if (pos > 0 && b == nblocks - 1 && !xrf_grew(c))
                report(c, PYDB_CHECK_XRFPOS_SIGN, 0, db->xrf.path,
                       b * PYDB_BLOCK,
                       "XRF block %lld is the last but its XRFPOS is "
                       "positive (%d)", (long long)(b + 1), (int)pos);
            for (int s = 0; s < PYDB_XRF_PER_BLOCK && !c->stop; s++) {
                int64_t mfn = b * PYDB_XRF_PER_BLOCK + s + 1;
                int64_t where = b * PYDB_BLOCK + 4 + 4 * s;
                int32_t raw = (int32_t)pydb__u32(blk + 4 + 4 * s);
                if (mfn >= c->next_mfn) {
                    if (raw != 0 && !later_append(c, (int32_t)mfn, raw))
                        report(c, PYDB_CHECK_XRF_BEYOND_END, (int32_t)mfn,
                               db->xrf.path, where,
                               "XRF entry of MFN %lld holds %d, but NXTMFN "
                               "is %d: a record readers cannot see (or "
                               "NXTMFN too small)", (long long)mfn,
                               (int)raw, (int)c->next_mfn);
                    continue;
                }
                c->sum->mfns++;
                check_xrf_entry(c, (int32_t)mfn, raw, where);
                progress(c, 1, 0);
            }
        }
    }
}

/* ------------------------------------------- step 4: sequential scan */

static int cmp_version(const void *a, const void *b)
{
    const version *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Bytes [off, off+n) of the master file from the scan buffer (refilled
 * as needed; n <= CHUNK), or NULL if they pass the end of the file or
 * cannot be read. */
static const uint8_t *peek(ck *c, int64_t off, int64_t n)
{
    pydb_file *f = &c->db->mst;
    int64_t len, size = c->mst_size;
    if (off < 0 || n > CHUNK || off > size - n) return NULL;
    if (off >= c->chunk_off && off + n <= c->chunk_off + c->chunk_len)
        return c->chunk + (off - c->chunk_off);
    len = size - off < CHUNK ? size - off : CHUNK;
    c->chunk_len = 0;
    if (ck_read(c, f, c->chunk, (size_t)len, off, 0, "master file"))
        return NULL;
    c->chunk_off = off;
    c->chunk_len = len;
    return c->chunk;
}

/* Does a record of a valid MFN start at q and end by `limit`?  Sets
 * *mfrl and *mfn. */
static int plausible(ck *c, int64_t q, int64_t limit, int64_t *mfrl,
                     int32_t *mfn)
{
    const pydb_geom *g = c->g;
    const uint8_t *h = peek(c, q, g->leader);
    pydb_leader l;
    if (!h) return 0;
    pydb__leader_decode(&l, g, h);
    *mfn = l.mfn;
    if (!pydb__leader_plausible(&l, g, c->next_mfn, q, limit)) return 0;
    if (l.base <= CHUNK) {
        const uint8_t *d = peek(c, q, l.base);
        if (!d || !pydb__dir_plausible(&l, g, d)) return 0;
    }
    *mfrl = l.mfrl;
    return 1;
}

/* Look for records in the gap [a, b) that nothing reaches. */
static void scan_gap(ck *c, int64_t a, int64_t b)
{
    int64_t q = (a + c->align - 1) / c->align * c->align, m;
    int32_t mfn;

    while (q + c->g->leader <= b && !c->stop) {
        if (plausible(c, q, b, &m, &mfn)) {
            c->sum->orphans++;
            c->sum->orphan_bytes += m;
            report(c, PYDB_CHECK_ORPHAN, mfn, c->db->mst.path, q,
                   "a %lld-byte version of MFN %d at offset %lld is reached "
                   "neither from the XRF nor by a back pointer%s",
                   (long long)m, (int)mfn, (long long)q,
                   q >= c->end ? " (past the committed end: an append "
                                 "that was never committed, or a version "
                                 "another program left there)"
                               : " (garbage left by an update)");
            q = (q + m + c->align - 1) / c->align * c->align;
        } else {
            q += c->align;
        }
        scan_progress(c, q);
    }
}

static void check_scan(ck *c)
{
    version *v = NULL;
    size_t n = 0, i;
    int64_t prev_end = PYDB_CTL_SIZE;
    int32_t prev_mfn = 0;
    int64_t prev_off = -1;

    if (!c->tracking || c->stop) return;
    c->scan_base = c->done;
    if (c->tab_n) {
        v = malloc(c->tab_n * sizeof *v);
        if (!v) {
            report(c, PYDB_CHECK_LIMIT, 0, c->db->mst.path, -1,
                   "no memory to sort %zu versions: the overlap and orphan "
                   "checks are skipped", c->tab_n);
            return;
        }
        for (i = 0; i < c->tab_cap; i++)
            if (c->tab[i].off >= 0) v[n++] = c->tab[i];
        qsort(v, n, sizeof *v, cmp_version);
    }
    for (i = 0; i < n && !c->stop; i++) {
        int64_t vend = v[i].off + v[i].mfrl;
        if (v[i].off < prev_end && prev_off >= 0)
            report(c, PYDB_CHECK_OVERLAP, v[i].mfn, c->db->mst.path,
                   v[i].off,
                   "the version of MFN %d at offset %lld starts inside the "
                   "version of MFN %d at offset %lld (which ends at %lld)",
                   (int)v[i].mfn, (long long)v[i].off, (int)prev_mfn,
                   (long long)prev_off, (long long)prev_end);
        else
            scan_gap(c, prev_end, v[i].off);
        scan_progress(c, v[i].off);
        if (vend > prev_end) {
            prev_end = vend;
            prev_off = v[i].off;
            prev_mfn = v[i].mfn;
        }
    }
    /* With a commit header, later commits' versions follow the end. */
    if (!c->stop)
        scan_gap(c, prev_end, c->published ? c->end : c->mst_size);
    free(v);
    if (!c->stop) c->sum->scanned = 1;
}

/* ----------------------------------------------------------- driver */

/* One walk of the files as of *st (the handle's files: st of their
 * generation). */
static int check_once(pydb_check_summary *out, pydb_db *db,
                      const pydb_state *st, const pydb_check_options *opt,
                      pydb_error *err)
{
    pydb_check_options none = {0};
    ck c;
    int rc = PYDB_OK;

    memset(out, 0, sizeof *out);
    memset(&c, 0, sizeof c);
    c.db = db;
    c.g = &pydb__geom[db->layout];
    c.opt = opt ? opt : &none;
    c.sum = out;
    c.st = st;
    c.published = st->commit != 0;
    c.mst_size = st->mst_size;
    c.xrf_size = st->xrf_size;
    c.next_block = st->next_block;
    c.next_pos = st->next_pos;
    c.next_mfn = st->next_mfn;
    c.end = st->mst_end;
    c.align = db->mstxl ? ((int64_t)1 << db->mstxl) : 2;
    c.append_at = (c.end + c.align - 1) / c.align * c.align;
    c.max_mfrl = c.g->ffi ? PYDB_MAX_FFI_MFRL : 32767;
    c.tracking = 1;
    c.total = (int64_t)c.next_mfn - 1 + c.mst_size / PYDB_BLOCK;
    /* The handle may know smaller sizes than a state another process
     * published: reads up to the state's sizes must pass. */
    if (pydb__fsize(&db->mst) < c.mst_size ||
        pydb__fsize(&db->xrf) < c.xrf_size)
        pydb__refresh_sizes(db);
    c.chunk = malloc(CHUNK);
    c.dir_cap = 4096;
    c.dir = malloc(c.dir_cap);
    if (!c.chunk || !c.dir) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for the check");
        goto cleanup;
    }
    check_control(&c);
    /* A write-ahead-log step goes here (see the top of this file). */
    check_xrf(&c);
    check_scan(&c);
    if (c.done < c.total) c.done = c.total;
    progress(&c, 0, 1);
cleanup:
    free(c.chunk);
    free(c.dir);
    free(c.tab);
    return rc;
}

int pydb_snapshot_check(pydb_check_summary *out, const pydb_snapshot *snap,
                        const pydb_check_options *opt, pydb_error *err)
{
    int rc = PYDB_OK;

    memset(out, 0, sizeof *out);
    if (!snap) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "no snapshot");
    /* The files of the snapshot's records: a compaction may have
     * replaced the pair the handle reads (docs/compaction.md); the walk
     * reads the newest pair as of the snapshot's records, and walks again
     * if the files are replaced under it (rare: the problems of the
     * abandoned walk were reported already). */
    for (int pass = 0; pass < 3; pass++) {
        pydb_state cur;
        uint64_t fs;
        rc = pydb__snapshot_files_kept(
            pydb__state_files(&cur, &fs, snap->db, &snap->st, err), snap,
            err);
        if (rc) return rc;
        rc = check_once(out, snap->db, &cur, opt, err);
        if (rc || !pydb__files_moved(snap->db, fs)) break;
    }
    return pydb__snapshot_files_kept(rc, snap, err);
}

/* ------------------------------------------------ 5. the native index */

/* A snapshot's view of the index is asked for right after the snapshot
 * is taken; a commit in between moves the index past it, and the step
 * takes both again, up to VIEW_TRIES times, VIEW_NAP_MS apart. */
#define VIEW_TRIES 20
#define VIEW_NAP_MS 10

/* The faults of a first pass without a commit header (check_index),
 * each a hash of its key and kind with its MFN, sorted; at most
 * SEEN_FAULTS (past it the last pass reports all it finds). */
#define SEEN_FAULTS 4096

/* How long (ms) check_index goes on looking again at faults of the
 * postings a writer's commits may explain, first after FIRST_NAP_MS. */
#define CONFIRM_MS 2000
#define FIRST_NAP_MS 50
#define POLL_US 200

/* What a walk of the index does with the faults of the postings it
 * finds (check_index): note them (first pass), mark which of the noted
 * it finds again, or report them. */
typedef enum { PASS_NOTE, PASS_AGAIN, PASS_REPORT } pass_mode;

typedef struct {
    uint64_t key;
    int32_t mfn;
} fault_id;

/* The faults a first pass noted (ids, n of them, sorted by fault_cmp
 * before a later pass looks them up) and found[i], which a PASS_AGAIN
 * sets where it finds ids[i] again; SEEN_FAULTS of each. */
typedef struct {
    fault_id *ids;
    uint8_t *found;
    size_t n;
} fault_set;

typedef struct {
    ck *c;
    pydb_index *view;
    const char *dir;          /* <base>.pdx, where posting faults are     */
    const uint8_t *active;    /* a bit per MFN active in the commit       */
    int32_t next_mfn;         /* the commit's NXTMFN                      */
    int dry;                  /* note faults in `seen`, report none       */
    fault_id *seen;           /* the first pass's faults (dry: noted;
                                 else: only these are reported), or NULL */
    size_t nseen;
    uint8_t *found;           /* PASS_AGAIN: found[i] set where seen[i] is
                                 found again (nothing reported), or NULL */
    int64_t faults;           /* found in this pass                       */
    uint64_t *sums;           /* per MFN below next_mfn: the sum of its
                                 postings' hashes in the index (key_hash) */
    uint32_t *counts;         /* per MFN: its postings in the index       */
    pydb_error e;
} index_walk;

/* A key as text for a message (pydb__quote_bytes, at most 60 bytes). */
static const char *key_quoted(char *out, size_t cap, const uint8_t *key,
                              size_t len)
{
    pydb__quote_bytes(out, cap, key, len, 60);
    return out;
}

/* Whether error rc of the index is a fault of its files (reported), not
 * of the machine (no memory: returned to the caller). */
static int index_fault(int rc)
{
    return rc == PYDB_ECORRUPT || rc == PYDB_EIO || rc == PYDB_EFST;
}

static int report_index_error(ck *c, const pydb_error *e)
{
    return report(c, PYDB_CHECK_INDEX, 0, e->path[0] ? e->path : "",
                  e->offset, "%s", e->message);
}

static int fault_cmp(const void *a, const void *b)
{
    const fault_id *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->mfn > y->mfn) - (x->mfn < y->mfn);
}

/* The id of a fault: FNV-1a of its key and kind, and its MFN. */
static fault_id fault_of(const uint8_t *key, size_t len, int kind,
                         int32_t mfn)
{
    fault_id f = {0xcbf29ce484222325ULL ^ (uint64_t)kind, mfn};
    for (size_t i = 0; i < len; i++)
        f.key = (f.key ^ key[i]) * 0x100000001b3ULL;
    return f;
}

/* One fault (kind 0: count, 1: order, 2: not active) of a key's
 * postings: noted in a dry pass, else reported unless a first pass
 * (w->seen) did not find it too.  Nonzero: stop the walk. */
static int posting_fault(index_walk *w, const uint8_t *key, size_t len,
                         int kind, int32_t mfn, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static int posting_fault(index_walk *w, const uint8_t *key, size_t len,
                         int kind, int32_t mfn, const char *fmt, ...)
{
    fault_id f = fault_of(key, len, kind, mfn);
    char msg[480];
    va_list ap;
    w->faults++;
    if (w->dry) {
        if (w->seen && w->nseen < SEEN_FAULTS) w->seen[w->nseen++] = f;
        return 0;
    }
    if (w->found) {
        const fault_id *at = bsearch(&f, w->seen, w->nseen, sizeof f,
                                     fault_cmp);
        if (at) w->found[at - w->seen] = 1;
        return 0;
    }
    if (w->seen && !bsearch(&f, w->seen, w->nseen, sizeof f, fault_cmp))
        return 0;   /* a commit in progress during the first pass */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return report(w->c, PYDB_CHECK_INDEX_POSTING, mfn, w->dir, -1, "%s", msg);
}

/* A hash of one posting of a key (FNV-1a of the key, then its TAG, OCC
 * and CNT, finished by splitmix64's mixer): a record's postings in the
 * index and the keys its FST gives are compared by the sum of these
 * (index_records). */
static uint64_t key_hash(const uint8_t *key, size_t len,
                         const pydb_posting *p)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const uint32_t f[3] = {p->tag, p->occ, p->cnt};
    for (size_t i = 0; i < len; i++) h = (h ^ key[i]) * 0x100000001b3ULL;
    for (int i = 0; i < 3; i++) {   /* each field mixed in on its own */
        h = (h ^ f[i]) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

/* pydb__key_postings_fn: the postings of one key, checked. */
static int index_key(void *ctx, const uint8_t *key, size_t len,
                     uint64_t count, const pydb_postings *p)
{
    index_walk *w = ctx;
    char text[320];
    const pydb_posting *v = p->v;

    w->c->sum->index_keys++;
    w->c->sum->index_postings += (int64_t)p->n;
    if (p->n > count &&
        posting_fault(w, key, len, 0, 0,
                      "key \"%s\": %zu postings, its count says %llu",
                      key_quoted(text, sizeof text, key, len), p->n,
                      (unsigned long long)count))
        return 1;
    for (size_t i = 0; i < p->n; i++) {
        int32_t m = v[i].mfn;
        if (i > 0 && pydb__posting_cmp(&v[i - 1], &v[i]) >= 0) {
            if (posting_fault(w, key, len, 1, m,
                              "key \"%s\": posting %zu (MFN %d, TAG %u, "
                              "OCC %u, CNT %u) not after the one before it",
                              key_quoted(text, sizeof text, key, len), i + 1,
                              (int)m, v[i].tag, v[i].occ, v[i].cnt))
                return 1;
        } else if (m >= 1 && m < w->next_mfn &&
                   (w->active[m / 8] & (1u << (m % 8)))) {
            w->sums[m] += key_hash(key, len, &v[i]);
            w->counts[m]++;
        } else if (m >= 1 && pydb__nidx_view_elsewhere(w->view, v[i].tag)) {
            /* an FST line of technique 1000 and up names the MFN its
             * keys go to: any MFN, as in CISIS */
        } else {
            if (posting_fault(w, key, len, 2, m,
                              "key \"%s\": a posting of MFN %d, which "
                              "has no active record in the commit checked "
                              "(NXTMFN %d)",
                              key_quoted(text, sizeof text, key, len), (int)m,
                              (int)w->next_mfn))
                return 1;
        }
    }
    return 0;
}

/* One posting a record's FST gives: its key_hash and the MFN it is for
 * (its own, except under a technique of 1000 and up, whose output names
 * the MFN: docs/isis-formats.md §5.2). */
typedef struct {
    uint64_t h;
    int64_t mfn;
} given_key;

/* pydb_key_fn: note one posting of a record, appended to the pydb_buf
 * ctx (its oom flag set when that fails). */
static int record_key(void *ctx, const uint8_t *key, size_t len,
                      const pydb_posting *p)
{
    given_key g = {key_hash(key, len, p), p->mfn};
    pydb__buf_put(ctx, &g, sizeof g);
    return PYDB_OK;
}

static int given_cmp(const void *a, const void *b)
{
    const given_key *x = a, *y = b;
    if (x->mfn != y->mfn) return x->mfn < y->mfn ? -1 : 1;
    return (x->h > y->h) - (x->h < y->h);
}

/* The keys the index's FST gives of each active record, as a count and a
 * sum of key_hash per MFN (want_sums, want_counts; the index holds a
 * posting once, so a record's repeated keys count once).  *other set
 * where one is for another MFN (techniques 1000 and up).  A record that
 * cannot be read is skipped (its step reported it); one the FST fails on
 * is reported.  Nonzero: stop (the caller's callback had enough);
 * PYDB_ENOMEM in w->e as -1. */
static int records_keys(index_walk *w, const pydb_snapshot *snap,
                        uint64_t *want_sums, uint32_t *want_counts,
                        int *other)
{
    pydb_record *rec = NULL;
    pydb_fst_scratch s;
    pydb_buf k = {0};         /* the record's postings (given_key) */
    int stop = 0, rc;

    memset(&s, 0, sizeof s);
    for (int32_t m = 1; m < w->next_mfn && !stop; m++) {
        given_key *v;
        size_t nk;
        if (!(w->active[m / 8] & (1u << (m % 8)))) continue;
        rc = pydb_snapshot_read(&rec, snap, m, &w->e);
        if (rc == PYDB_ENOMEM) {
            stop = -1;
            break;
        }
        if (rc || rec->deleted || rec->status) continue;
        k.n = 0;
        rc = pydb__nidx_view_keys(w->view, m, rec->fields, rec->nfields, &s,
                                  record_key, &k, &w->e);
        if (rc == PYDB_ENOMEM || k.oom) {
            stop = -1;
            break;
        }
        if (rc) {
            stop = posting_fault(w, (const uint8_t *)"", 0, 3, m,
                                 "MFN %d: the index's FST fails on its "
                                 "record: %s", (int)m, w->e.message);
            continue;
        }
        v = (given_key *)k.p;
        nk = k.n / sizeof *v;
        if (nk) qsort(v, nk, sizeof *v, given_cmp);
        for (size_t i = 0; i < nk; i++) {
            if (i > 0 && !given_cmp(&v[i], &v[i - 1])) continue;
            if (v[i].mfn != m) *other = 1;
            if (v[i].mfn < 1 || v[i].mfn >= w->next_mfn) continue;
            want_sums[v[i].mfn] += v[i].h;
            want_counts[v[i].mfn]++;
        }
    }
    pydb_record_free(rec);
    pydb__fst_scratch_free(&s);
    if (stop < 0 && k.oom)
        PYDB_ERROR(&w->e, PYDB_ENOMEM, "", -1, "no memory for the check");
    pydb__buf_free(&k);
    return stop;
}

/* Whether each active record's postings in the index (w->sums,
 * w->counts: the walk's) are the keys the index's FST gives of it,
 * compared by their count and the sum of their hashes (key_hash).  A
 * record another program added or changed (WinISIS, CISIS, an older
 * pydb: they do not know pydb's index) has no postings or its old ones,
 * which a search then misses or finds: reported with how to mend it.
 * Not compared where the FST gives a record postings for other MFNs
 * (techniques 1000 and up: postings of one MFN from several records,
 * which the index holds once).  Nonzero: stop; PYDB_ENOMEM in w->e as
 * -1. */
static int index_records(index_walk *w, const pydb_snapshot *snap)
{
    uint64_t *sums = calloc((size_t)w->next_mfn + 1, sizeof *sums);
    uint32_t *counts = calloc((size_t)w->next_mfn + 1, sizeof *counts);
    int other = 0, stop;

    if (!sums || !counts) {
        PYDB_ERROR(&w->e, PYDB_ENOMEM, "", -1, "no memory for the check");
        stop = -1;
        goto cleanup;
    }
    stop = records_keys(w, snap, sums, counts, &other);
    for (int32_t m = 1; m < w->next_mfn && !stop && !other; m++) {
        if (!(w->active[m / 8] & (1u << (m % 8)))) continue;
        if (sums[m] == w->sums[m] && counts[m] == w->counts[m]) continue;
        stop = posting_fault(w, (const uint8_t *)"", 0, 3, m,
                             "MFN %d: the index holds %u postings of it, "
                             "its record gives %u keys by the index's "
                             "FST%s: the record changed without the index "
                             "(another program wrote the master file?), "
                             "and searches go by its old keys; rebuild the "
                             "index (python -m pydb index)", (int)m,
                             w->counts[m], counts[m],
                             counts[m] == w->counts[m] ? " (other keys)"
                                                       : "");
    }
cleanup:
    free(sums);
    free(counts);
    return stop;
}

/* A bit per MFN below snap's NXTMFN, set where its record is active
 * (*out: free it), or a PYDB error. */
static int active_bits(uint8_t **out, const pydb_snapshot *snap,
                       int32_t next_mfn, pydb_error *err)
{
    int32_t mfns[1024], from = 1, next;
    size_t n;
    uint8_t *bits = calloc((size_t)next_mfn / 8 + 1, 1);
    int rc = PYDB_OK;
    *out = NULL;
    if (!bits)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for the check");
    while (from < next_mfn) {
        rc = pydb_snapshot_list_mfns(mfns, 1024, &n, &next, snap, from, 0,
                                     err);
        if (rc) break;
        for (size_t i = 0; i < n; i++)
            if (mfns[i] >= 1 && mfns[i] < next_mfn)
                bits[mfns[i] / 8] |= (uint8_t)(1u << (mfns[i] % 8));
        if (next <= from) break;
        from = next;
    }
    if (rc) free(bits);
    else *out = bits;
    return rc;
}

/* A snapshot and its view of ix (*snap, w->view), taken again while a
 * commit comes between the two (module comment above).  PYDB_OK; or
 * PYDB_EWOULDBLOCK with *moved set when commits kept coming (else the
 * index never matched an unchanged commit); or another PYDB error. */
static int index_view(pydb_snapshot **snap, index_walk *w, pydb_db *db,
                      pydb_index *ix, int *moved, pydb_error *err)
{
    pydb_snapshot_info si;
    uint64_t first = 0;
    int rc;
    for (int tries = 0;; tries++) {
        struct timespec nap = {0, VIEW_NAP_MS * 1000 * 1000};
        rc = pydb_snapshot_take(snap, db, err);
        if (rc) return rc;
        pydb_snapshot_info_get(&si, *snap);
        if (tries == 0) first = si.commit;
        rc = pydb_snapshot_index(&w->view, *snap, ix, err);
        if (rc != PYDB_EWOULDBLOCK || tries == VIEW_TRIES) break;
        pydb_snapshot_release(*snap);
        *snap = NULL;
        nanosleep(&nap, NULL);
    }
    *moved = rc == PYDB_EWOULDBLOCK && si.commit != first;
    return rc;
}

/* One walk of the index as of a snapshot.  Where the snapshot names an
 * index generation, or seen is NULL, it reports every fault it finds.
 * Else (files mode, or a header that never named one: nothing ties the
 * index to the control record, check_index) by `mode`: PASS_NOTE notes
 * its posting faults in seen (at most SEEN_FAULTS), reports none and
 * sets *dry; PASS_AGAIN sets seen->found[i] where it finds seen->ids[i]
 * again, reports none; PASS_REPORT reports only the faults in seen.
 * *faults gets how many this walk found.  0, or a PYDB error that is no
 * fault of the files. */
static int index_pass(ck *c, pydb_db *db, pydb_index *ix, pass_mode mode,
                      fault_set *seen, int64_t *faults, int *dry,
                      pydb_error *err)
{
    pydb_snapshot *snap = NULL;
    pydb_snapshot_info si;
    uint8_t *bits = NULL;
    index_walk w;
    char dir[1024];           /* as nidx.dir */
    int moved = 0, rc;

    memset(&w, 0, sizeof w);
    w.c = c;
    rc = index_view(&snap, &w, db, ix, &moved, &w.e);
    if (rc == PYDB_EWOULDBLOCK) {
        if (!moved)
            report(c, PYDB_CHECK_INDEX, 0, w.e.path, -1,
                   "not the index of the latest commit: its MANIFEST is of "
                   "another generation than the commit header names, and "
                   "no commit came for %d ms", VIEW_TRIES * VIEW_NAP_MS);
        rc = PYDB_OK;   /* commits kept coming: left unchecked */
        goto cleanup;
    }
    if (rc) {
        if (index_fault(rc)) {
            report_index_error(c, &w.e);
            rc = PYDB_OK;
        }
        goto cleanup;
    }
    pydb_snapshot_info_get(&si, snap);
    if (seen && si.index_gen == 0) {
        w.dry = mode == PASS_NOTE;
        w.seen = seen->ids;
        w.nseen = w.dry ? 0 : seen->n;
        w.found = mode == PASS_AGAIN ? seen->found : NULL;
    }
    w.next_mfn = si.next_mfn;
    w.dir = pydb__nidx_dir(dir, sizeof dir, db->mst.path, &w.e) == PYDB_OK
                ? dir : db->mst.path;
    rc = active_bits(&bits, snap, si.next_mfn, &w.e);
    if (rc) {
        if (index_fault(rc)) {
            report(c, PYDB_CHECK_IO, 0, w.e.path, w.e.offset,
                   "listing the records for the index: %s", w.e.message);
            rc = PYDB_OK;
        }
        goto cleanup;
    }
    w.active = bits;
    w.sums = calloc((size_t)si.next_mfn + 1, sizeof *w.sums);
    w.counts = calloc((size_t)si.next_mfn + 1, sizeof *w.counts);
    if (!w.sums || !w.counts) {
        rc = PYDB_ERROR(&w.e, PYDB_ENOMEM, "", -1, "no memory for the check");
        goto cleanup;
    }
    c->sum->index_keys = c->sum->index_postings = 0;
    rc = pydb__nidx_view_walk(w.view, index_key, &w, &w.e);
    if (rc) {
        if (index_fault(rc)) {
            report_index_error(c, &w.e);
            rc = PYDB_OK;
        }
        goto cleanup;
    }
    if (c->stop) goto cleanup;
    if (index_records(&w, snap) < 0) {
        rc = PYDB_ENOMEM;
        goto cleanup;
    }
    if (!c->stop) c->sum->index_checked = 1;
cleanup:
    *faults = w.faults;
    *dry = w.dry;
    if (w.dry) seen->n = w.nseen;
    if (rc && err) *err = w.e;
    free(bits);
    free(w.sums);
    free(w.counts);
    pydb_index_close(w.view);
    pydb_snapshot_release(snap);
    return rc;
}

/* A writer's commit in files mode: its frame is in the log (<base>.wal
 * not empty) from before it writes the master file and the XRF until
 * after it puts the index's MANIFEST in place, and it holds the writer
 * lock (an OFD lock on the whole log) throughout.  Whether one is in
 * progress now, as the log open at wal_fd (-1: none, no pydb writer
 * ever opened the database) shows: the size first, then the lock (a
 * log left by a writer that died is no commit in progress).  A
 * transaction of this handle that is not committing has an empty log. */
static int commit_in_progress(int wal_fd)
{
    struct stat st;
    if (wal_fd < 0 || fstat(wal_fd, &st) != 0 || st.st_size == 0) return 0;
    return pydb__ofd_held(wal_fd);
}

/* What a commit changes of the files a walk of the index reads, beside
 * the records: the generation the index's MANIFEST announces (each
 * commit that changes postings writes the next) and the inodes of the
 * master file and the XRF (a compaction swaps new ones in). */
typedef struct {
    uint64_t gen;
    ino_t mst, xrf;
} index_stamp;

static void stamp_index(index_stamp *out, const pydb_db *db,
                        const char *manifest)
{
    struct stat st;
    out->gen = pydb__nman_head_generation(manifest);
    out->mst = stat(db->mst.path, &st) == 0 ? st.st_ino : 0;
    out->xrf = stat(db->xrf.path, &st) == 0 ? st.st_ino : 0;
}

/* The faults a first pass noted without a commit header, looked at
 * again (all: the first found more than SEEN_FAULTS of them).  Each
 * pass waits a pause (doubling from FIRST_NAP_MS), then until no commit
 * is in progress (polled every POLL_US), and keeps the noted faults it
 * finds again; none left (and, with all, no fault at all): they were
 * commits in progress, nothing is reported.  A pass with no commit in
 * progress before and after it and no commit during it (the stamps) is
 * quiet: a last pass reports the faults kept (with all, every fault it
 * finds).  Without a quiet pass within CONFIRM_MS (commits kept coming)
 * the index is left unchecked, as index_view leaves it.  wal_fd: the
 * log, as commit_in_progress.  0, or a PYDB error that is no fault of
 * the files. */
static int confirm_faults(ck *c, pydb_db *db, pydb_index *ix, int wal_fd,
                          fault_set *seen, int all, pydb_error *err)
{
    char dir[1024], manifest[1100];
    int64_t deadline = pydb__now_ms() + CONFIRM_MS, faults = 0;
    long nap_ms = FIRST_NAP_MS;
    int dry = 0, rc;

    if (pydb__nidx_dir(dir, sizeof dir, db->mst.path, err) != PYDB_OK)
        return PYDB_EINVAL;
    snprintf(manifest, sizeof manifest, "%s/MANIFEST", dir);
    qsort(seen->ids, seen->n, sizeof *seen->ids, fault_cmp);
    for (;;) {
        struct timespec nap, poll = {0, POLL_US * 1000};
        index_stamp before, after;
        size_t kept = 0;
        if (nap_ms > deadline - pydb__now_ms())
            nap_ms = (long)(deadline - pydb__now_ms());
        if (nap_ms > 0) {
            nap.tv_sec = nap_ms / 1000;
            nap.tv_nsec = (nap_ms % 1000) * 1000 * 1000;
            nanosleep(&nap, NULL);
        }
        while (commit_in_progress(wal_fd) && pydb__now_ms() < deadline)
            nanosleep(&poll, NULL);
        if (pydb__now_ms() >= deadline) break;
        stamp_index(&before, db, manifest);
        memset(seen->found, 0, seen->n);
        rc = index_pass(c, db, ix, PASS_AGAIN, seen, &faults, &dry, err);
        if (rc) return rc;
        stamp_index(&after, db, manifest);
        for (size_t i = 0; i < seen->n; i++)
            if (seen->found[i]) seen->ids[kept++] = seen->ids[i];
        seen->n = kept;
        if (kept == 0 && (!all || faults == 0))
            return PYDB_OK;   /* commits in progress */
        if (!commit_in_progress(wal_fd) && before.gen == after.gen &&
            before.gen != NIDX_GEN_UNKNOWN && before.mst == after.mst &&
            before.xrf == after.xrf)
            return index_pass(c, db, ix, PASS_REPORT, all ? NULL : seen,
                              &faults, &dry, err);
        nap_ms *= 2;
    }
    c->sum->index_checked = 0;   /* commits kept coming: left unchecked */
    return PYDB_OK;
}

/* Step 5 for db (the summary and callback of c).  A database without a
 * native index is no fault -- unless the latest commit names an index
 * generation (its MANIFEST is gone).  With a generation the view is that
 * commit's.  Without one (files mode, or a header that never named one)
 * nothing ties the index to the control record, which a writer updates
 * (and syncs) before it puts the index's MANIFEST in place: a first pass
 * only notes the faults of the postings, and where it finds some,
 * confirm_faults reports those that stay while no commit is in progress.
 * 0, or a PYDB error that is no fault of the files (no memory, the
 * reader table full). */
static int check_index(ck *c, pydb_db *db, pydb_error *err)
{
    pydb_index *ix = NULL;
    fault_set seen = {0};
    pydb_error e;
    uint64_t gen = pydb_index_gen(db);
    int64_t faults = 0, errors;
    int rc, dry = 0, wal_fd = -1;

    rc = pydb_native_index_open(&ix, db->mst.path, &e);
    if (rc == PYDB_EIO && e.sys_errno == ENOENT) {
        if (gen != 0)
            report(c, PYDB_CHECK_INDEX, 0, e.path, -1,
                   "missing, while the latest commit names index "
                   "generation %llu: %s", (unsigned long long)gen, e.message);
        return PYDB_OK;
    }
    if (rc) {
        if (!index_fault(rc)) {
            if (err) *err = e;
            return rc;
        }
        report_index_error(c, &e);
        return PYDB_OK;
    }
    seen.ids = malloc(SEEN_FAULTS * sizeof *seen.ids);
    seen.found = malloc(SEEN_FAULTS);
    if (!seen.ids || !seen.found) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for the check");
        goto cleanup;
    }
    errors = c->sum->errors;
    rc = index_pass(c, db, ix, PASS_NOTE, &seen, &faults, &dry, err);
    if (rc == PYDB_OK && dry && faults > 0 && c->sum->errors == errors) {
        char base[1024], wal[1100];
        pydb__db_base(base, sizeof base, db->mst.path);
        pydb__wal_path(wal, sizeof wal, base, db->mst.path);
        wal_fd = pydb__vfs->open(wal, O_RDONLY | O_CLOEXEC, 0);
        rc = confirm_faults(c, db, ix, wal_fd, &seen, faults > SEEN_FAULTS,
                            err);
    }
cleanup:
    if (wal_fd >= 0) pydb__vfs->close(wal_fd);
    free(seen.ids);
    free(seen.found);
    pydb_index_close(ix);
    return rc;
}

int pydb_check_ex(pydb_check_summary *out, pydb_db *db,
                  const pydb_check_options *opt, pydb_error *err)
{
    pydb_check_options none = {0};
    pydb_snapshot *snap = NULL;
    ck c;
    int rc;

    memset(out, 0, sizeof *out);
    if (!db) return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "no database");
    for (int tries = 0;; tries++) {
        uint64_t gen;
        int files_mode;
        rc = pydb_snapshot_take(&snap, db, err);
        if (rc) return rc;
        files_mode = snap->st.commit == 0;
        gen = snap->st.file_gen;
        rc = pydb_snapshot_check(out, snap, opt, err);
        pydb_snapshot_release(snap);
        /* the check's own snapshot of the files mode fails once a
         * compaction replaced its files (pydb__snapshot_files_kept): a
         * new one, the walk again (its problems so far were reported) */
        if (!(rc == PYDB_EIO && files_mode && tries < 2 &&
              pydb__files_gen(db) != gen))
            break;
        memset(out, 0, sizeof *out);
    }
    if (rc) return rc;
    /* The walk met every back version: a reader that meets garbage, as
     * Firebird's validation does under its cooperative policy.  Told
     * after the walk (a compaction during it would mix two files'
     * offsets in its tables): a full pass, so a sweep (gc.c). */
    pydb__gc_swept(db);
    if (out->stopped) return PYDB_OK;   /* the callback had enough */
    memset(&c, 0, sizeof c);
    c.opt = opt ? opt : &none;
    c.sum = out;
    return check_index(&c, db, err);
}

int pydb_check(pydb_check_summary *out, pydb_db *db, pydb_check_fn fn,
               void *ctx, pydb_error *err)
{
    pydb_check_options o = {0};
    o.problem = fn;
    o.ctx = ctx;
    return pydb_check_ex(out, db, &o, err);
}
