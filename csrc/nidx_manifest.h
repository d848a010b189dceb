/*
 * nidx_manifest.h - the MANIFEST of a native index (<base>.pdx/MANIFEST):
 * its text format, reading it, and publishing a new one atomically
 * (nidx_manifest.c).
 *
 * The MANIFEST is text: a magic line with the format version, the
 * generation, the key rules (utf8, max_key, the line "mode cisis" for
 * the CISIS key mode (absent: unicode), case and word tables in hex),
 * the FST and stop-word texts, the live segments (oldest first), each a
 * line "segment seg-GGGGGGGG.pds" (a file beside it) or "inline GGGGGGGG
 * LEN" followed by the LEN bytes of the segment itself and a newline,
 * and a checksum line ("end" and the CRC-32C of everything before it,
 * 8 hex digits).  It is replaced
 * whole, always by a transaction through pydb_txn_put_file() (a commit,
 * a merge, a bulk build; written with the records' write-ahead log and
 * replayed by recovery; when the log keeps the commit's frame, by a swap
 * of names with its spare MANIFEST.pydb-next: pydb__swap_file),
 * so the index flips with the records.  Each new MANIFEST has a higher
 * generation than the one it replaces (a rebuild too, even after the
 * MANIFEST was damaged: nidx_build.c).
 *
 * Depends on: nidx_seg.h (the segments inline ones
 * are opened as, generation digits), util.h (buffer, CRC-32C, atomic
 * replace), index_int.h (key rules).
 */
#ifndef PYDB_NIDX_MANIFEST_H
#define PYDB_NIDX_MANIFEST_H

#include "index_int.h"
#include "nidx_seg.h"

#define NIDX_STR_(x) #x
#define NIDX_STR(x) NIDX_STR_(x)
/* The first line, with the MANIFEST's format version: 3 when a segment
 * is inline, else 2 (NIDX_MANIFEST_VERSION_FILES: what pydb before
 * inline segments writes and reads).  Both are read; an inline line in a
 * version 2 MANIFEST is damage. */
#define NIDX_MANIFEST_VERSION 3
#define NIDX_MANIFEST_VERSION_FILES 2
#define NIDX_MANIFEST_MAGIC \
    "pydb-native-index " NIDX_STR(NIDX_MANIFEST_VERSION) "\n"
#define NIDX_MANIFEST_MAGIC_V2 \
    "pydb-native-index " NIDX_STR(NIDX_MANIFEST_VERSION_FILES) "\n"

/* Inline segments: a commit's segment of at most NIDX_INLINE_MAX bytes
 * goes into the MANIFEST itself while the inline segments of the set
 * stay within NIDX_INLINE_TOTAL bytes (nidx_commit.c); past that it is
 * a file.  So is a merge of the collector's, by the same rules
 * (nidx_gc.c). */
#define NIDX_INLINE_MAX 4096
#define NIDX_INLINE_TOTAL 32768
/* The limit in force (a commit's segment and a merge's): NIDX_INLINE_MAX;
 * tests lower it to have segment files (pydb__test_set_inline_max,
 * pydb_test.h). */
extern size_t pydb__nidx_inline_max;

/* A segment a MANIFEST names: the file seg-GEN.pds, or (inl non-NULL)
 * the len bytes of an inline segment. */
typedef struct nidx_mseg {
    uint64_t gen;
    const uint8_t *inl;
    size_t len;
} nidx_mseg;

/* A parsed MANIFEST.  fst, stw and the inline segments' bytes point into
 * the bytes it was parsed from; segs is malloc'ed (free it). */
typedef struct nidx_manifest {
    uint64_t gen;
    pydb_keyrules rules;
    const char *fst;
    size_t fst_len;
    const uint8_t *stw;
    size_t stw_len;
    nidx_mseg *segs;
    size_t nsegs;
} nidx_manifest;

/* Append the MANIFEST text for generation gen, the rules, texts and the
 * segments segs[nsegs] to b.  The segments are listed oldest first (the
 * order decides which tombstones hide which postings); their generations
 * are names, none above gen, not in any order (a merged segment is named
 * when its collection commits, wherever its run stood: nidx_gc.c). */
int pydb__nman_encode(pydb_buf *b, uint64_t gen, const pydb_keyrules *r,
                      const char *fst, size_t fst_len, const uint8_t *stw,
                      size_t stw_len, const nidx_mseg *segs, size_t nsegs,
                      pydb_error *err);
/* segs[i] of the open segments v[n] (inline ones with their bytes). */
void pydb__nman_segs_of(nidx_mseg *segs, nidx_seg *const *v, size_t n);
/* Parse d[n] (read from path) into *m; PYDB_ECORRUPT (path, offset,
 * reason) for damage or another format version. */
int pydb__nman_parse(nidx_manifest *m, const uint8_t *d, size_t n,
                     const char *path, pydb_error *err);
/* Read the MANIFEST at path and parse it into *m (its bytes in *data:
 * free them and m->segs; both NULL on failure); synced: fsync what was
 * read.  A MANIFEST is replaced by a swap of names with its spare
 * (pydb__swap_file), so a reader that opened it just before a swap may
 * read it while the next swap rewrites it: damage is read again once,
 * and again while the file keeps changing (up to NIDX_READ_TRIES), and
 * reported only when it stays.  Errors: those of reading (PYDB_EIO,
 * PYDB_ENOMEM) and of pydb__nman_parse. */
#define NIDX_READ_TRIES 100
int pydb__nman_read(nidx_manifest *m, uint8_t **data, const char *path,
                    int synced, pydb_error *err);
/* The generation a MANIFEST's head announces; 0 when the file is
 * missing; NIDX_GEN_UNKNOWN when its head does not parse (damage, or a
 * file read while a swap rewrote it: a full read decides). */
#define NIDX_GEN_UNKNOWN UINT64_MAX
uint64_t pydb__nman_head_generation(const char *path);
/* The same for the bytes d[0..n) of a MANIFEST (its head, or all of it):
 * NIDX_GEN_UNKNOWN when they do not start with one. */
uint64_t pydb__nman_generation_of(const uint8_t *d, size_t n);

#endif
