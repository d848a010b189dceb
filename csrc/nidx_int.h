/* nidx_int.h - the cross-file interface of key tables and stop words
 * (keys.c) and the native index's commit hook (nidx_commit.c), beyond
 * what pydb_test.h declares (key rules, stop words, FST key extraction
 * and the commit hook's test doubles, which tests drive directly).  Not
 * installed; the binding does not include it.
 *
 * Depends on: index_int.h (and through it pydb_int.h, pydb_test.h). */
#ifndef PYDB_NIDX_INT_H
#define PYDB_NIDX_INT_H

#include "index_int.h"

/* ---- keys.c: tables, stop words, word characters
 * (docs/isis-formats.md §5.3-5.4) ---- */

/* Parse an ISISUC.TAB text (256 decimal codes 0..255, any blank/newline
 * separation, a trailing ^Z tolerated) into r->upper.  PYDB_ECORRUPT
 * (path, byte offset) when the text is not such a table. */
int pydb__keyrules_parse_uc(pydb_keyrules *r, const uint8_t *text, size_t len,
                            const char *path, pydb_error *err);
/* Parse an ISISAC.TAB text (decimal codes of the word characters) into
 * r->word (replacing the default set). */
int pydb__keyrules_parse_ac(pydb_keyrules *r, const uint8_t *text, size_t len,
                            const char *path, pydb_error *err);
/* Length in bytes of the character at p (UTF-8 sequence or 1 byte) and
 * whether it is a word character (technique 4/8). */
size_t pydb__word_char(const pydb_keyrules *r, const uint8_t *p, size_t n,
                       int *is_word);

/* 1 if `key` (key form) is a stop word of sw, else 0. */
int pydb__stopwords_has(const pydb_stopwords *sw, const uint8_t *key,
                        size_t len);
/* Read a whole file through the vfs (malloc'ed; *len bytes). */
int pydb__read_file(const char *path, uint8_t **data, size_t *len,
                    pydb_error *err);
/* The same, and fsync the file it read before closing it (the bytes
 * returned are then durable under that inode). */
int pydb__read_file_synced(const char *path, uint8_t **data, size_t *len,
                           pydb_error *err);

/* ---- nidx_commit.c: the commit hook and its test double ---- */
typedef int (*pydb_put_file_fn)(void *ctx, pydb_txn *t, const char *path,
                                const void *data, size_t len,
                                pydb_error *err);
/* Route the index's put_file calls to fn (NULL: pydb_txn_put_file). */
void pydb__nidx_set_put_file(pydb_index *ix, pydb_put_file_fn fn, void *ctx);

#endif
