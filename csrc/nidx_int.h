/* nidx_int.h - the cross-file interface of key tables and stop words
 * (keys.c), FST key extraction (fst_keys.c, fst_format.c) and the native
 * index's commit hook and test doubles (nidx_commit.c); the binding's
 * _pydb_native.c includes it.  Not installed.
 *
 * Depends on: index_int.h. */
#ifndef PYDB_NIDX_INT_H
#define PYDB_NIDX_INT_H

#include "index_int.h"

/* ---- keys.c: tables, stop words, word characters (formats §5.3-5.4) ---- */

/* Parse an ISISUC.TAB text (256 decimal codes 0..255, any blank/newline
 * separation, a trailing ^Z tolerated) into r->upper.  PYDB_ECORRUPT
 * (path, byte offset) when the text is not such a table. */
int pydb__keyrules_parse_uc(pydb_keyrules *r, const uint8_t *text, size_t len,
                            const char *path, pydb_error *err);
/* Parse an ISISAC.TAB text (decimal codes of the word characters) into
 * r->word (replacing the default set). */
int pydb__keyrules_parse_ac(pydb_keyrules *r, const uint8_t *text, size_t len,
                            const char *path, pydb_error *err);
/* Load ISISUC.TAB / ISISAC.TAB from `dir` if present (any case of the
 * names); *found gets bit 1 for UC, bit 2 for AC. */
int pydb__keyrules_load_dir(pydb_keyrules *r, const char *dir, int *found,
                            pydb_error *err);

/* Length in bytes of the character at p (UTF-8 sequence or 1 byte) and
 * whether it is a word character (technique 4/8). */
size_t pydb__word_char(const pydb_keyrules *r, const uint8_t *p, size_t n,
                       int *is_word);

/* Stop words (.STW): keys in key form, sorted, looked up exactly. */
typedef struct pydb_stopwords {
    uint8_t *arena;
    size_t *off;
    uint32_t *len;
    size_t n;
} pydb_stopwords;
int pydb__stopwords_parse(pydb_stopwords *sw, const pydb_keyrules *r,
                          const uint8_t *text, size_t len, pydb_error *err);
int pydb__stopwords_has(const pydb_stopwords *sw, const uint8_t *key,
                        size_t len);
void pydb__stopwords_free(pydb_stopwords *sw);

/* Read a whole file through the vfs (malloc'ed; *len bytes). */
int pydb__read_file(const char *path, uint8_t **data, size_t *len,
                    pydb_error *err);

/* ---- fst_keys.c (key extraction), fst_format.c (format evaluation) ---- */

/* Called once per key of a record: key in key form, and its posting;
 * returns PYDB_OK or an error code (with err filled by the callee). */
typedef int (*pydb_key_fn)(void *ctx, const uint8_t *key, size_t len,
                           const pydb_posting *p);

/* Scratch space for pydb__fst_keys (reused between records). */
typedef struct pydb_fst_scratch {
    uint8_t *out;  size_t out_len, out_cap;   /* format output            */
    uint8_t *key;  size_t key_cap;            /* key being built          */
    uint8_t *tmp;  size_t tmp_cap;
} pydb_fst_scratch;
void pydb__fst_scratch_free(pydb_fst_scratch *s);

/* Extract the keys of record `mfn` (fields[n]) by every rule of `fst`,
 * calling fn for each (formats §5.2 OCC/CNT rules). */
int pydb__fst_keys(const pydb_fst *fst, const pydb_keyrules *r,
                   const pydb_stopwords *sw, int32_t mfn,
                   const pydb_field *fields, uint32_t n,
                   pydb_fst_scratch *s, pydb_key_fn fn, void *ctx,
                   pydb_error *err);

/* Evaluate rule `i`'s format only (tests, diagnostics): the output text
 * goes to s->out[0..s->out_len). */
int pydb__fst_format(const pydb_fst *fst, size_t i, int32_t mfn,
                     const pydb_field *fields, uint32_t n,
                     pydb_fst_scratch *s, pydb_error *err);

/* ---- nidx_commit.c: the commit hook and its test double ---- */
typedef int (*pydb_put_file_fn)(void *ctx, pydb_txn *t, const char *path,
                                const void *data, size_t len,
                                pydb_error *err);
/* Route the index's put_file calls to fn (NULL: pydb_txn_put_file). */
void pydb__nidx_set_put_file(pydb_index *ix, pydb_put_file_fn fn, void *ctx);
/* Tests: record put_file calls in the index (no writer needed), and
 * apply the recorded file at the simulated commit point (atomic replace,
 * as the write-ahead-log replay does) or drop it (abort). */
int pydb__nidx_use_test_put(pydb_index *ix, pydb_error *err);
int pydb__nidx_test_commit_point(pydb_index *ix, pydb_error *err);
void pydb__nidx_test_drop(pydb_index *ix);
/* The commit hook the native index registers (for direct unit tests). */
int pydb__nidx_hook(pydb_index *ix, pydb_commit_hook *out, pydb_error *err);

#endif
