/*
 * fuzz_mst.c - libFuzzer target: a master file and its cross-reference
 * file in any of the four leader layouts (csrc/handle.c, read.c,
 * record.c, check.c, stat.c), with the write-ahead log and the commit
 * header (csrc/wal.c, shm.c) a read-only open also reads.
 *
 * Input: the .mst, FUZZ_SEP, the .xrf, and optionally FUZZ_SEP, the .wal,
 * FUZZ_SEP, the .shm (an empty part: no such file).  Bit 0 of the input
 * size picks pread or mmap reads.  The database is opened read-only;
 * every MFN is read (and every byte of every field touched), the MFNs
 * listed and counted, a snapshot read, the validator and the statistics
 * run.  Then the XRF is made again from the master file alone
 * (pydb_mkxrf, csrc/mkxrf.c: the layout detected, or one chosen by bits
 * 1-2 of the size), its counts checked against NXTMFN, and that database
 * opened and read as well.  Errors are fine when they name themselves
 * (code and message); crashes, leaks, hangs and reads out of bounds are
 * findings.
 *
 * Depends on: pydb.h.
 */
#include "fuzz.h"
#include "pydb.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_READS 20000     /* MFNs read per input: about 80 KiB of XRF */

static const char *const names[] = {"db.mst", "db.xrf", "db.wal", "db.shm"};

static volatile unsigned sink;

static void touch(const pydb_record *rec)
{
    unsigned h = 0;
    size_t total = 0;
    for (uint32_t i = 0; i < rec->nfields; i++) {
        const pydb_field *f = &rec->fields[i];
        for (uint32_t j = 0; j < f->len; j++) h = h * 31 + f->value[j];
        total += f->len;
    }
    if (total != rec->data_len) abort();
    sink += h;
}

static void read_all(pydb_db *db)
{
    pydb_record *rec = NULL;
    pydb_snapshot *snap = NULL;
    pydb_xrf_entry x;
    pydb_counts counts;
    pydb_error err;
    int32_t max = pydb_max_mfn(db), mfns[64];
    int32_t last = max < MAX_READS ? max : MAX_READS;
    int rc;

    for (int32_t mfn = 1; mfn <= last; mfn++) {
        rc = pydb_xrf_get(&x, db, mfn, &err);
        fuzz_expect(rc, &err);
        rc = pydb_read(&rec, db, mfn, &err);
        fuzz_expect(rc, &err);
        if (rc == PYDB_OK) {
            if (rec->mfn != mfn) abort();
            touch(rec);
        }
    }
    rc = pydb_read(&rec, db, max + 1, &err);
    if (rc != PYDB_ENOTFOUND && rc != PYDB_OK) fuzz_expect(rc, &err);
    int32_t from = 1;
    for (int i = 0; i < 400 && from <= last; i++) {
        size_t n = 0;
        int32_t next = 0;
        rc = pydb_list_mfns(mfns, 64, &n, &next, db, from, i & 1, &err);
        fuzz_expect(rc, &err);
        if (rc != PYDB_OK) break;
        if (n > 64 || next <= from) abort();   /* no progress: a hang */
        from = next;
    }
    rc = pydb_count(&counts, db, &err);
    fuzz_expect(rc, &err);
    rc = pydb_snapshot_take(&snap, db, &err);
    fuzz_expect(rc, &err);
    if (rc == PYDB_OK) {
        for (int32_t mfn = 1; mfn <= last && mfn <= 64; mfn++) {
            rc = pydb_snapshot_read(&rec, snap, mfn, &err);
            fuzz_expect(rc, &err);
            if (rc == PYDB_OK) touch(rec);
        }
        pydb_snapshot_release(snap);
    }
    pydb_record_free(rec);
}

/* The master file part[0] as mk.mst, its XRF made by pydb_mkxrf(), then
 * opened read-only and read.  The report's MFNs add up to NXTMFN - 1. */
static void remake_xrf(const fuzz_part *mst, size_t size,
                       const pydb_options *opt)
{
    static const char *const mk[] = {"mk.mst"};
    pydb_mkxrf_report r;
    pydb_db *db = NULL;
    pydb_error err;
    char mpath[512], xpath[512], base[512];
    int layout = (size & 8) ? -1 : (int)((size >> 1) & 3), rc;

    if (mst->n == 0) return;
    fuzz_write_parts(mk, mst, 1);
    fuzz_path(mpath, sizeof mpath, "mk.mst");
    fuzz_path(xpath, sizeof xpath, "mk.xrf");
    fuzz_path(base, sizeof base, "mk");
    memset(&err, 0, sizeof err);
    unlink(xpath);
    rc = pydb_mkxrf(&r, mpath, xpath, NULL, layout, 1, 1, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) return;
    if (r.active < 0 || r.deleted < 0 || r.missing < 0 ||
        (int64_t)r.active + r.deleted + r.missing != (int64_t)r.next_mfn - 1 ||
        r.pending > r.active + r.deleted || r.versions < r.active + r.deleted)
        abort();
    rc = pydb_open(&db, base, opt, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) return;
    read_all(db);
    pydb_close(db);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part part[4];
    pydb_options opt = {(size & 1) ? PYDB_IO_MMAP : PYDB_IO_PREAD,
                        PYDB_LOCK_NONE, 0};
    pydb_check_summary sum;
    pydb_stat st;
    pydb_db *db = NULL;
    pydb_error err;
    char path[512];
    int rc;

    fuzz_split(part, 4, data, size);
    fuzz_clear();
    fuzz_write_parts(names, part, 4);
    fuzz_path(path, sizeof path, "db");
    memset(&err, 0, sizeof err);
    rc = pydb_open(&db, path, &opt, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) {
        if (db != NULL) abort();
        remake_xrf(&part[0], size, &opt);
        return 0;
    }
    read_all(db);
    rc = pydb_check(&sum, db, NULL, NULL, &err);
    fuzz_expect(rc, &err);
    rc = pydb_stat_get(&st, db, &err);
    fuzz_expect(rc, &err);
    pydb_close(db);
    remake_xrf(&part[0], size, &opt);
    return 0;
}
