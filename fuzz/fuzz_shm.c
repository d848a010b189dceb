/*
 * fuzz_shm.c - libFuzzer target: the commit header and reader table
 * <base>.shm (csrc/shm.c; read.c, handle.c, txn.c and wal.c as they use
 * it) beside a sound database.
 *
 * Input: the .shm file.  The database beside it is one this target
 * writes once per process through the public API (fuzz_template:
 * FUZZ_TEMPLATE_RECORDS records, one commit each, ISIS aligned layout)
 * and lays out again for every input.  The two state slots carry a CRC-32C (shm.h) that a
 * mutation almost always breaks, so the target writes valid CRCs into
 * both slots unless the input size is 7 modulo 8 (the check itself gets
 * fuzzed too).
 *
 * Run: a reader opens the database (pread or mmap by bit 1 of the size),
 * reads every record, counts, lists, takes a snapshot (registers in the
 * reader table) and reads through it, gets the statistics; then a writer
 * opens it, appends one record and commits (a damaged header is
 * rebuilt by the writer, shm.h), and a new reader must read that record
 * back, and the header must be valid again (magic, version, size).  The
 * promise (docs/reliability.md, shm.h): a damaged header is ignored by
 * readers and reset by the writer; errors name themselves; no crash,
 * leak or hang, and a commit that succeeded is there.
 *
 * Depends on: pydb.h, shm.h (the header's magic, version and size),
 * util.h (pydb__crc32c: the checksum the core computes).
 */
#include "fuzz.h"
#include "pydb.h"
#include "shm.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_OFF 64       /* shm.h: two state slots of 128 bytes     */
#define STATE_SIZE 128
#define STATE_CRC 120

static const uint8_t NEW_VALUE[] = "Appended under a fuzzed commit header";

static void fix_states(uint8_t *p, size_t n)
{
    for (size_t s = 0; s < 2; s++) {
        size_t off = STATE_OFF + s * STATE_SIZE;
        uint32_t crc;
        if (off + STATE_SIZE > n) return;
        crc = pydb__crc32c(0, p + off, STATE_CRC);
        for (int i = 0; i < 4; i++)
            p[off + STATE_CRC + i] = (uint8_t)(crc >> (8 * i));
    }
}

static void read_db(const char *path, int io)
{
    pydb_options opt = {io, PYDB_LOCK_NONE, 0};
    pydb_db *db = NULL;
    pydb_record *rec = NULL;
    pydb_snapshot *snap = NULL;
    pydb_counts counts;
    pydb_stat st;
    pydb_error err;
    int32_t mfns[16], max, next = 0;
    size_t n = 0;
    int rc;

    rc = pydb_open(&db, path, &opt, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) return;
    max = pydb_max_mfn(db);
    for (int32_t mfn = 1; mfn <= max && mfn <= 64; mfn++) {
        rc = pydb_read(&rec, db, mfn, &err);
        fuzz_expect(rc, &err);
    }
    rc = pydb_count(&counts, db, &err);
    fuzz_expect(rc, &err);
    rc = pydb_list_mfns(mfns, 16, &n, &next, db, 1, 0, &err);
    fuzz_expect(rc, &err);
    rc = pydb_snapshot_take(&snap, db, &err);
    fuzz_expect(rc, &err);
    if (rc == PYDB_OK) {
        for (int32_t mfn = 1; mfn <= FUZZ_TEMPLATE_RECORDS + 1; mfn++) {
            rc = pydb_snapshot_read(&rec, snap, mfn, &err);
            if (rc != PYDB_ENOTFOUND) fuzz_expect(rc, &err);
        }
        pydb_snapshot_release(snap);
    }
    rc = pydb_stat_get(&st, db, &err);
    fuzz_expect(rc, &err);
    pydb_record_free(rec);
    pydb_close(db);
}

/* Append one record; the MFN it got, or 0 when the commit failed. */
static int32_t write_db(const char *path)
{
    pydb_options opt = {PYDB_IO_PREAD, PYDB_LOCK_NONE,
                        PYDB_OPEN_WRITE | PYDB_OPEN_NOSYNC};
    pydb_db *db = NULL;
    pydb_error err;
    int32_t mfn = 0;
    int rc;

    rc = pydb_open(&db, path, &opt, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) return 0;
    mfn = fuzz_append(db, NEW_VALUE, sizeof NEW_VALUE - 1);
    pydb_close(db);
    return mfn;
}

/* A commit that succeeded is read back by a new reader, and the writer
 * left a valid header (shm.h: a damaged one is rebuilt by the writer):
 * its magic, version and full size. */
static void check_appended(const char *path, int32_t mfn)
{
    char shm_path[512];
    uint8_t got[12];
    FILE *f;
    long len = -1;

    fuzz_path(shm_path, sizeof shm_path, "db.shm");
    f = fopen(shm_path, "rb");
    if (f) {
        if (fread(got, 1, sizeof got, f) != sizeof got) memset(got, 0, sizeof got);
        if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
        fclose(f);
    }
    if (!f || memcmp(got, PYDB_SHM_MAGIC, 8) != 0 ||
        pydb__u32(got + 8) != PYDB_SHM_VERSION || len < PYDB_SHM_SIZE) {
        fprintf(stderr, "fuzz_shm: the writer committed MFN %d but left no "
                "valid commit header (%ld bytes)\n", (int)mfn, len);
        abort();
    }

    fuzz_reads_back(path, mfn, NEW_VALUE, sizeof NEW_VALUE - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *shm;
    char path[512];
    int32_t mfn;

    fuzz_template();
    shm = malloc(size ? size : 1);
    if (!shm) abort();
    memcpy(shm, data, size);
    if (size % 8 != 7) fix_states(shm, size);
    fuzz_write("db.shm", shm, size);   /* an empty input: an empty file */
    free(shm);
    fuzz_path(path, sizeof path, "db");
    read_db(path, (size & 2) ? PYDB_IO_MMAP : PYDB_IO_PREAD);
    mfn = write_db(path);
    if (mfn > 0) check_appended(path, mfn);
    read_db(path, PYDB_IO_PREAD);
    return 0;
}
