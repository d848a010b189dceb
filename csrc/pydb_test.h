/*
 * pydb_test.h - the one test-only header of the core: internal entry
 * points that tests drive directly.  Not API, not installed, no
 * compatibility promise.
 *
 * Who includes it: outside csrc/, only the tests (tests/c/), the fuzz
 * targets (fuzz/), the benchmarks (benchmarks/) and the binding's test door
 * (pydb/_pydb_testing.c, the submodule pydb._pydb._testing); every other
 * file of the binding includes pydb.h alone.  Inside csrc/, pydb_int.h
 * includes it, so the files that define these functions and the internal
 * headers that use the types below (index_int.h, nidx_int.h) see one
 * declaration.
 *
 * What it holds:
 *   - I/O test hooks (vfs.c): slow reads and fault injection on the file
 *     operations;
 *   - key rules, stop words and FST key extraction (keys.c, fst_keys.c,
 *     fst_format.c), which the native index uses internally and tests call
 *     without an index;
 *   - test doubles of the native index's commit hook (nidx_commit.c), to
 *     drive it without a writer.
 *
 * Depends on: pydb.h (declarations only).
 */
#ifndef PYDB_TEST_H
#define PYDB_TEST_H

#include "pydb.h"

/* ---- I/O test hooks (vfs.c) ---- */

/* Every pread of the core sleeps `usec` microseconds first (0 restores the
 * POSIX table).  Not thread-safe; tests only. */
void pydb__test_set_read_delay(unsigned usec);

/* A search read with the GIL held (pydb_search_nowait) gives up after
 * `n` postings (default 65536) and is redone with it released.  Returns
 * the previous limit.  Not thread-safe; tests only. */
size_t pydb__test_set_nowait_postings(size_t n);

/* With `unknown` set, this process cannot tell the kernel's boot (as
 * where /proc hides boot_id): its commit headers keep no log length
 * (shm.h, pydb__shm_log_usable), so its commits empty the log as in
 * files mode.  Returns the previous setting.  Tests only. */
int pydb__test_set_boot_unknown(int unknown);

/* A native index segment of at most `n` bytes goes inline into the
 * MANIFEST (default 4096; 0: never).  Returns the previous limit.  Not
 * thread-safe; tests only. */
size_t pydb__test_set_inline_max(size_t n);

/* Fault injection: make the n-th (1-based) write-side file operation
 * (pwrite, fsync, fdatasync, ftruncate, rename, unlink, exchange) fail
 * with `eno`; with `short_write` = 1, an n-th pwrite writes less than asked and the
 * next one fails with `eno`; with `short_write` = 2 the process exits
 * (_exit(137), a crash point) instead of doing the n-th operation; with
 * `short_write` = 3 every operation from the n-th on fails (a full disk).
 * n = 0 restores the POSIX table; n < 0 only counts.  Not thread-safe to
 * switch; tests only. */
void pydb__test_fail_io(long n, int eno, int short_write);
long pydb__test_io_count(void);        /* operations counted so far      */
long pydb__test_io_syncs(void);        /* fsyncs + fdatasyncs among them */
const char *pydb__test_io_fired(void); /* name of the failed op, or NULL  */
/* The operation fail_io fails sleeps `usec` microseconds before it returns
 * its error (after io_fired names it): a failure that another thread or
 * process may race.  Reset by pydb__test_fail_io().  Tests only. */
void pydb__test_fault_pause(unsigned usec);

/* ---- group commit (group.c) ---- */

/* *queued: pydb_write_one() requests waiting in db's queue (not yet taken
 * into a group); *leading: 1 while a group is being committed.  Tests
 * only (they wait for a known queue before they let a group go). */
void pydb__test_group_state(pydb_db *db, int *queued, int *leading);

/* ---- checksum (util.c) ---- */

/* pydb__crc32c() (util.h) as the core computes it, or with `portable`
 * by the table form whatever the CPU has: tests compare the two. */
uint32_t pydb__test_crc32c(uint32_t crc, const void *data, size_t n,
                           int portable);

/* ---- key rules (keys.c), docs/isis-formats.md §5.3-5.4 ---- */

typedef struct pydb_keyrules {
    uint8_t upper[256];  /* case table (ISISUC.TAB) for 8-bit data         */
    uint8_t word[256];   /* 1 = word character (ISISAC.TAB), technique 4/8 */
    int utf8;            /* keys are UTF-8: Unicode case and accent folding */
    size_t max_key;      /* longer keys are truncated to this many bytes   */
    int mode;            /* enum pydb_keymode                              */
} pydb_keyrules;

/* The default rules: the CDS/ISIS default tables for 8-bit data, or
 * Unicode folding when utf8; keys cut to max_key bytes (0: no limit). */
void pydb__keyrules_default(pydb_keyrules *r, int utf8, size_t max_key);
/* The built-in table `keys` (enum pydb_keys), keys cut to max_key bytes.
 * PYDB_EINVAL for an unknown table. */
int pydb__keyrules_builtin(pydb_keyrules *r, int keys, size_t max_key,
                           pydb_error *err);
/* Set the key mode (enum pydb_keymode) of rules made for the built-in
 * table `keys`: CISIS with the ANSI table takes the word characters of
 * ABCD for Windows' isisac.tab (digits, '_'), with the Unicode table '_'
 * is a word character too (docs/isis-formats.md §5.3).
 * PYDB_EINVAL for an unknown mode. */
int pydb__keyrules_set_mode(pydb_keyrules *r, int keys, int mode,
                            pydb_error *err);
/* Load ISISUC.TAB / ISISAC.TAB from `dir` if present (any case of the
 * names); *found gets bit 1 for UC, bit 2 for AC.  PYDB_EIO (a table
 * cannot be read), PYDB_ECORRUPT (not a table), PYDB_ENOMEM. */
int pydb__keyrules_load_dir(pydb_keyrules *r, const char *dir, int *found,
                            pydb_error *err);
/* Bring `in` into key form: case table / folding, leading and trailing
 * blanks removed, truncated to max_key (never inside a UTF-8 sequence).
 * PYDB_EINVAL if out[cap] is too small (cap >= 4 * len + 16 suffices). */
int pydb__key_normalize(const pydb_keyrules *r, const uint8_t *in,
                        size_t len, uint8_t *out, size_t cap,
                        size_t *out_len, pydb_error *err);

/* ---- stop words (keys.c): keys in key form, sorted, looked up exactly */

typedef struct pydb_stopwords {
    uint8_t *arena;
    size_t *off;
    uint32_t *len;
    size_t n;
} pydb_stopwords;
/* Parse .STW text (one word per line) into *sw, in key form by `r`.
 * PYDB_ENOMEM.  Free with pydb__stopwords_free() (also after a failure). */
int pydb__stopwords_parse(pydb_stopwords *sw, const pydb_keyrules *r,
                          const uint8_t *text, size_t len, pydb_error *err);
void pydb__stopwords_free(pydb_stopwords *sw);

/* ---- FST key extraction (fst_keys.c) and formatting (fst_format.c) ---- */

/* Called once per key of a record: key in key form, and its posting;
 * returns PYDB_OK or an error code (with err filled by the callee). */
typedef int (*pydb_key_fn)(void *ctx, const uint8_t *key, size_t len,
                           const pydb_posting *p);

/* Scratch space for pydb__fst_keys / pydb__fst_format (reused between
 * records; zero it before the first use, free with
 * pydb__fst_scratch_free()). */
typedef struct pydb_fst_scratch {
    uint8_t *out;  size_t out_len, out_cap;   /* format output            */
    uint8_t *key;  size_t key_cap;            /* key being built          */
    uint8_t *tmp;  size_t tmp_cap;
} pydb_fst_scratch;
void pydb__fst_scratch_free(pydb_fst_scratch *s);

/* Extract the keys of record `mfn` (fields[n]) by every rule of `fst`,
 * calling fn for each (docs/isis-formats.md §5.2 OCC/CNT rules).
 * PYDB_EFST (format runaway), PYDB_ENOMEM, or fn's error. */
int pydb__fst_keys(const pydb_fst *fst, const pydb_keyrules *r,
                   const pydb_stopwords *sw, int32_t mfn,
                   const pydb_field *fields, uint32_t n,
                   pydb_fst_scratch *s, pydb_key_fn fn, void *ctx,
                   pydb_error *err);

/* Evaluate rule `i`'s format only (tests, diagnostics): the output text
 * goes to s->out[0..s->out_len).  PYDB_EINVAL (no rule i), PYDB_EFST,
 * PYDB_ENOMEM. */
int pydb__fst_format(const pydb_fst *fst, size_t i, int32_t mfn,
                     const pydb_field *fields, uint32_t n,
                     pydb_fst_scratch *s, pydb_error *err);

/* ---- native index commit hook without a writer (nidx_commit.c) ---- */

/* The commit hook a native index registers with pydb_native_index_attach()
 * (*out filled; its ctx is owned by ix).  PYDB_EINVAL for an index that is
 * not native. */
int pydb__nidx_hook(pydb_index *ix, pydb_commit_hook *out, pydb_error *err);
/* Record the index's pydb_txn_put_file calls in the index (no writer
 * needed; prepare() may then be called with t = NULL), and apply the
 * recorded file at the simulated commit point (atomic replace, as the
 * write-ahead-log replay does) or drop it (abort). */
int pydb__nidx_use_test_put(pydb_index *ix, pydb_error *err);
int pydb__nidx_test_commit_point(pydb_index *ix, pydb_error *err);
/* After the hook's publish: a new state in the database's commit header
 * (a copy of the latest), as the write path publishes one after the
 * hook's publish (readers look at the MANIFEST again when the latest
 * commit moves). */
void pydb__nidx_test_publish_state(pydb_index *ix);
void pydb__nidx_test_drop(pydb_index *ix);

/* ---- posting buffers a thread keeps (index.c) ---- */

/* Reserve room for n postings in a new list as a search does (a buffer
 * this thread kept first), write all n, and give the list back; *cap:
 * the postings the buffer had room for.  PYDB_ENOMEM. */
int pydb__test_postings_reserve(size_t n, size_t *cap, pydb_error *err);

#endif
