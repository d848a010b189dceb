/*
 * fuzz_wal.c - libFuzzer target: the write-ahead log <base>.wal
 * (csrc/wal.c: frames, entries, the final image of a replay, whole-file
 * names) beside a sound database.
 *
 * Input: the .wal file.  The database beside it is one this target
 * writes once per process through the public API (fuzz_template:
 * three records, one commit each, ISIS aligned layout), laid out again for
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
 * naming itself, never a crash, a leak or a hang; a commit that succeeded
 * is there.  (Whole-file names outside the database's folder are refused
 * before anything is written: tests/test_checkpoint.py checks that; this
 * target does not watch the rest of the file system.)
 *
 * Depends on: pydb.h, util.h (pydb__crc32c, pydb__u64, pydb__put32: the
 * checksum and the integers the core uses), wal.h (PYDB_WAL_HEAD and
 * PYDB_WAL_TAIL: the frame's header and trailer).
 */
#include "fuzz.h"
#include "pydb.h"
#include "util.h"
#include "wal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const uint8_t NEW_VALUE[] = "Appended after a fuzzed log";

/* Rewrite the header and trailer CRCs of every frame p[0..n) delimits
 * (its body length in bounds), as wal.c's seal writes them. */
static void fix_frames(uint8_t *p, size_t n)
{
    size_t pos = 0;
    while (n - pos >= PYDB_WAL_HEAD + PYDB_WAL_TAIL) {
        uint8_t *h = p + pos;
        uint64_t body = pydb__u64(h + 16);
        if (body > n - pos - PYDB_WAL_HEAD - PYDB_WAL_TAIL) return;
        pydb__put32(h + 32, pydb__crc32c(0, h, 32));
        pydb__put32(h + PYDB_WAL_HEAD + body + 8,
                    pydb__crc32c(0, h, (size_t)(PYDB_WAL_HEAD + body)));
        pos += PYDB_WAL_HEAD + (size_t)body + PYDB_WAL_TAIL;
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
    pydb_db *db = NULL;
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
    mfn = fuzz_append(db, NEW_VALUE, sizeof NEW_VALUE - 1);
    pydb_close(db);
    return mfn;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *wal;
    char path[512];
    int32_t mfn;

    fuzz_template();
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
    if (mfn > 0) fuzz_reads_back(path, mfn, NEW_VALUE, sizeof NEW_VALUE - 1);
    read_db(path);
    return 0;
}
