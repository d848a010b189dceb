/*
 * fuzz_wal.c - libFuzzer target: the write-ahead log <base>.wal
 * (csrc/wal.c: frames, entries, the final image of a replay, whole-file
 * names) beside a sound database.
 *
 * Input: the .wal file.  The database beside it is one this target
 * writes once per process through the public API (TEMPLATE_RECORDS
 * records, one commit each, ISIS aligned layout), laid out again for
 * every input with an empty <db>.pdx folder (whole-file entries of the
 * seeds name db.pdx/MANIFEST) and no commit header (so the log is
 * replayed: nothing vouches for it).  Each frame carries two CRC-32Cs
 * (wal.h) that a mutation almost always breaks, so the target rewrites
 * both in every frame it can delimit unless the input size is 7 modulo
 * 8 (the checks themselves get fuzzed too).
 *
 * Run: a read-only open (it replays when it can write the files) reads
 * every record; then a writer opens the database -- the replay -- and,
 * when that succeeded, the log must be empty, one record is appended and
 * committed, and a new reader must read it back.  The promise
 * (docs/reliability.md, wal.h): a damaged or hostile log gives an error
 * naming itself, never a crash, a leak, a hang or a write outside the
 * database's folder; a commit that succeeded is there.
 *
 * Depends on: pydb.h, util.h (pydb__crc32c, pydb__u64, pydb__put32: the
 * checksum and the integers the core uses).
 */
#include "fuzz.h"
#include "pydb.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TEMPLATE_RECORDS 3
#define WAL_HEAD 40            /* wal.h: PYDB_WAL_HEAD, PYDB_WAL_TAIL */
#define WAL_TAIL 16

static uint8_t *tmpl_mst, *tmpl_xrf;
static size_t tmpl_mst_n, tmpl_xrf_n;

static const uint8_t NEW_VALUE[] = "Appended after a fuzzed log";

static void slurp(const char *name, uint8_t **out, size_t *n)
{
    char path[512];
    FILE *f;
    long len;

    fuzz_path(path, sizeof path, name);
    f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        abort();
    }
    *out = malloc(len ? (size_t)len : 1);
    if (!*out || fread(*out, 1, (size_t)len, f) != (size_t)len) abort();
    *n = (size_t)len;
    fclose(f);
}

static void must(int rc, const pydb_error *err)
{
    if (rc != PYDB_OK) {
        fprintf(stderr, "fuzz_wal: template: %s: %s\n", err->path,
                err->message);
        abort();
    }
}

/* The database every input runs against, written once. */
static void make_template(void)
{
    pydb_db *db = NULL;
    pydb_error err;
    char path[512];

    fuzz_clear();
    fuzz_path(path, sizeof path, "tmpl");
    must(pydb_create(&db, path, PYDB_LAYOUT_ISIS_ALIGNED, 0, NULL, &err),
         &err);
    for (int i = 1; i <= TEMPLATE_RECORDS; i++) {
        char text[64];
        pydb_field f = {24, 0, (const uint8_t *)text};
        pydb_txn *t = NULL;
        int32_t mfn;
        f.len = (uint32_t)snprintf(text, sizeof text, "Record %d on water", i);
        must(pydb_txn_begin(&t, db, 1000, &err), &err);
        must(pydb_txn_append(&mfn, t, &f, 1, &err), &err);
        must(pydb_txn_commit(t, &err), &err);
    }
    pydb_close(db);
    slurp("tmpl.mst", &tmpl_mst, &tmpl_mst_n);
    slurp("tmpl.xrf", &tmpl_xrf, &tmpl_xrf_n);
    fuzz_clear();
}

/* Rewrite the header and trailer CRCs of every frame p[0..n) delimits
 * (its body length in bounds), as wal.c's seal writes them. */
static void fix_frames(uint8_t *p, size_t n)
{
    size_t pos = 0;
    while (n - pos >= WAL_HEAD + WAL_TAIL) {
        uint8_t *h = p + pos;
        uint64_t body = pydb__u64(h + 16);
        if (body > n - pos - WAL_HEAD - WAL_TAIL) return;
        pydb__put32(h + 32, pydb__crc32c(0, h, 32));
        pydb__put32(h + WAL_HEAD + body + 8,
                    pydb__crc32c(0, h, (size_t)(WAL_HEAD + body)));
        pos += WAL_HEAD + (size_t)body + WAL_TAIL;
    }
}

static void read_db(const char *path)
{
    pydb_db *db = NULL;
    pydb_record *rec = NULL;
    pydb_error err;
    int32_t max;
    int rc = pydb_open(&db, path, NULL, &err);

    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) return;
    max = pydb_max_mfn(db);
    for (int32_t mfn = 1; mfn <= max && mfn <= 64; mfn++) {
        rc = pydb_read(&rec, db, mfn, &err);
        if (rc != PYDB_ENOTFOUND) fuzz_expect(rc, &err);
        pydb_record_free(rec);
        rec = NULL;
    }
    pydb_close(db);
}

/* Open for writing (the replay), append one record; its MFN, or 0. */
static int32_t write_db(const char *path)
{
    pydb_options opt = {PYDB_IO_PREAD, PYDB_LOCK_NONE,
                        PYDB_OPEN_WRITE | PYDB_OPEN_NOSYNC |
                            PYDB_OPEN_GC(PYDB_GC_NONE)};
    pydb_field f = {24, sizeof NEW_VALUE - 1, NEW_VALUE};
    pydb_db *db = NULL;
    pydb_txn *t = NULL;
    pydb_error err;
    char wal[512];
    struct stat st;
    int32_t mfn = 0;
    int rc = pydb_open(&db, path, &opt, &err);

    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) return 0;
    fuzz_path(wal, sizeof wal, "db.wal");
    if (stat(wal, &st) == 0 && st.st_size != 0) {
        fprintf(stderr, "fuzz_wal: a writer opened the database but its "
                "log still holds %lld bytes\n", (long long)st.st_size);
        abort();
    }
    rc = pydb_txn_begin(&t, db, 0, &err);
    fuzz_expect(rc, &err);
    if (rc == PYDB_OK) {
        rc = pydb_txn_append(&mfn, t, &f, 1, &err);
        fuzz_expect(rc, &err);
        if (rc == PYDB_OK) {
            rc = pydb_txn_commit(t, &err);
            fuzz_expect(rc, &err);
            if (rc != PYDB_OK) mfn = 0;
        } else {
            pydb_txn_abort(t);
            mfn = 0;
        }
    }
    pydb_close(db);
    return mfn;
}

static void check_appended(const char *path, int32_t mfn)
{
    pydb_db *db = NULL;
    pydb_record *rec = NULL;
    pydb_error err;
    int rc = pydb_open(&db, path, NULL, &err);

    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) abort();   /* it opened for the writer */
    rc = pydb_read(&rec, db, mfn, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK || rec->nfields != 1 || rec->fields[0].tag != 24 ||
        rec->fields[0].len != sizeof NEW_VALUE - 1 ||
        memcmp(rec->fields[0].value, NEW_VALUE, sizeof NEW_VALUE - 1) != 0) {
        fprintf(stderr, "fuzz_wal: the record committed as MFN %d does not "
                "read back\n", (int)mfn);
        abort();
    }
    pydb_record_free(rec);
    pydb_close(db);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *wal;
    char path[512];
    int32_t mfn;

    if (!tmpl_mst) make_template();
    fuzz_clear();
    fuzz_write("db.mst", tmpl_mst, tmpl_mst_n);
    fuzz_write("db.xrf", tmpl_xrf, tmpl_xrf_n);
    fuzz_write("db.pdx/.keep", (const uint8_t *)"", 0);
    wal = malloc(size ? size : 1);
    if (!wal) abort();
    memcpy(wal, data, size);
    if (size % 8 != 7) fix_frames(wal, size);
    fuzz_write("db.wal", wal, size);
    free(wal);
    fuzz_path(path, sizeof path, "db");
    read_db(path);
    mfn = write_db(path);
    if (mfn > 0) check_appended(path, mfn);
    read_db(path);
    return 0;
}
