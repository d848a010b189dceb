/*
 * nidx_manifest.h - the MANIFEST of a native index (<base>.pdx/MANIFEST):
 * its text format, reading it, and publishing a new one atomically
 * (nidx_manifest.c).
 *
 * The MANIFEST is text: a magic line with the format version, the
 * generation, the key rules (utf8, max_key, the line "mode cisis" for
 * the CISIS key mode (absent: unicode), case and word tables in hex), the FST and stop-word texts, the live segments (oldest first),
 * and a checksum line ("end" and the CRC-32C of everything before it,
 * 8 hex digits).  It is replaced
 * whole, always by a transaction through pydb_txn_put_file() (a commit,
 * a merge, a bulk build; written with the records' write-ahead log and
 * replayed by recovery; unless synced at once, by a swap of names with
 * its spare MANIFEST.pydb-next: pydb__swap_file),
 * so the index flips with the records.  Each new MANIFEST has a higher
 * generation than the one it replaces.
 *
 * Depends on: nidx_seg.h (only NIDX_FORMAT_VERSION), util.h (buffer,
 * CRC-32C, atomic replace), index_int.h (key rules).
 */
#ifndef PYDB_NIDX_MANIFEST_H
#define PYDB_NIDX_MANIFEST_H

#include "index_int.h"
#include "nidx_seg.h"

#define NIDX_STR_(x) #x
#define NIDX_STR(x) NIDX_STR_(x)
/* The first line, with the format version (NIDX_FORMAT_VERSION). */
#define NIDX_MANIFEST_MAGIC \
    "pydb-native-index " NIDX_STR(NIDX_FORMAT_VERSION) "\n"

/* A parsed MANIFEST.  fst and stw point into the bytes it was parsed
 * from; segs is malloc'ed (free it). */
typedef struct nidx_manifest {
    uint64_t gen;
    pydb_keyrules rules;
    const char *fst;
    size_t fst_len;
    const uint8_t *stw;
    size_t stw_len;
    uint64_t *segs;
    size_t nsegs;
} nidx_manifest;

/* Append the MANIFEST text for generation gen, the rules, texts and the
 * segments gens[ngens] to b.  The segments are listed oldest first (the
 * order decides which tombstones hide which postings); their generations
 * are names, none above gen, not in any order (a merged segment is named
 * when its collection commits, wherever its run stood: nidx_gc.c). */
int pydb__nman_encode(pydb_buf *b, uint64_t gen, const pydb_keyrules *r,
                      const char *fst, size_t fst_len, const uint8_t *stw,
                      size_t stw_len, const uint64_t *gens, size_t ngens,
                      pydb_error *err);
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
/* The highest generation <dir>/MANIFEST names (its own or a segment's);
 * 0 when there is none or it cannot be read. */
uint64_t pydb__nman_top_generation(const char *dir);

#endif
