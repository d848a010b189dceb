/*
 * fuzz.h - what the fuzz targets of fuzz/ share: the libFuzzer entry point
 * every target defines, and the helpers of fuzz_util.c that turn one input
 * into the files of a database (docs/fuzzing.md).
 *
 * Inputs that stand for several files are the files' bytes joined by the
 * separator FUZZ_SEP, in the order the target names them; an empty part
 * is a missing file.  fuzz/make_seeds.py writes seeds that way.
 *
 * Depends on: pydb.h (fuzz_expect's error type).
 */
#ifndef PYDB_FUZZ_H
#define PYDB_FUZZ_H
#include <stddef.h>
#include <stdint.h>

/* The entry point libFuzzer (or fuzz/standalone.c) calls once per input;
 * returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SEP "#PYDB-FUZZ-FILE#"
#define FUZZ_SEP_LEN (sizeof FUZZ_SEP - 1)

typedef struct fuzz_part {
    const uint8_t *p;
    size_t n;
} fuzz_part;

/* Split data[size] at FUZZ_SEP into parts[0..max) (the last part keeps any
 * further separators); parts not present get n = 0.  Returns the number of
 * parts found. */
size_t fuzz_split(fuzz_part *parts, size_t max, const uint8_t *data,
                  size_t size);

/* The scratch folder of this process (created on first use under /dev/shm,
 * or /tmp without it; removed at exit).  Aborts when it cannot be made:
 * the target could not run at all. */
const char *fuzz_dir(void);

/* Remove every file in fuzz_dir() (the folder stays), recursing into
 * folders. */
void fuzz_clear(void);

/* Write the n bytes at p to fuzz_dir()/name, creating folders of name as
 * needed; aborts on failure (a full scratch disk is not a finding). */
void fuzz_write(const char *name, const uint8_t *p, size_t n);

/* Write each non-empty parts[i] to fuzz_dir()/names[i]. */
void fuzz_write_parts(const char *const *names, const fuzz_part *parts,
                      size_t n);

/* fuzz_dir()/name into out[cap]. */
void fuzz_path(char *out, size_t cap, const char *name);

/* Empty fuzz_dir() and lay out in it, as db.mst and db.xrf, the
 * database the commit-header and log targets run against: ISIS aligned,
 * three records -- field 24 "Record <i> on water", field 70 "Smith, J."
 * -- one commit each, written through the API on the first call.  Aborts
 * on failure (the target cannot run). */
void fuzz_template(void);
#define FUZZ_TEMPLATE_RECORDS 3

/* Append one record (field 24 = the len bytes at value) in its own
 * transaction, each call through fuzz_expect: its MFN, or 0 when a step
 * failed (with a named error). */
struct pydb_db;
int32_t fuzz_append(struct pydb_db *db, const uint8_t *value, size_t len);

/* A new reader of the database at path opens it and reads MFN mfn as
 * the one field 24 = value; aborts otherwise (a commit that succeeded
 * must read back). */
void fuzz_reads_back(const char *path, int32_t mfn, const uint8_t *value,
                     size_t len);

/* A core call returned rc with err: when rc is an error, it must name
 * itself (err->code == rc, a message; for PYDB_ECORRUPT a file), else
 * abort.  With PYDB_FUZZ_VERBOSE set in the environment, print the error
 * (to see what a corpus reaches). */
struct pydb_error;
void fuzz_expect(int rc, const struct pydb_error *err);
#endif
