/*
 * record.h - the bytes of the ISIS master and cross-reference files
 * (docs/isis-formats.md §2-3), with no I/O: the leader geometry of the
 * four layouts, the control record, XRF pointer encoding and decoding,
 * record encoding and decoding, and the placement rules a writer obeys
 * (never-split leader, 2^MSTXL alignment, even MFRL).
 *
 * Depends on: pydb.h (pydb_record, pydb_field, pydb_xrf_entry), util.h
 * (codecs, PYDB_ASSERT) and error.c (messages).  Readers (read.c, check.c),
 * writers (txn.c, build.c) and the handle (handle.c) sit above it.
 */
#ifndef PYDB_RECORD_H
#define PYDB_RECORD_H

#include "pydb.h"
#include "util.h"
#include <stddef.h>
#include <stdint.h>

#define PYDB_BLOCK 512           /* MST/XRF block size,
                                    docs/isis-formats.md §2-3             */
#define PYDB_CTL_SIZE 64         /* control record + filler               */
#define PYDB_XRF_PER_BLOCK 127
#define PYDB_MAX_FFI_MFRL (1 << 30) /* sanity cap for FFI records (bytes) */

/* ---- leader geometry, docs/isis-formats.md §2.2 ---- */
typedef struct pydb_geom {
    int leader;      /* leader size in bytes                               */
    int entry;       /* directory entry size                               */
    int ffi;         /* 32-bit MFRL/BASE/POS/LEN                           */
    int off_mfrl, off_mfbwb, off_mfbwp, off_base, off_nvf, off_status;
    int dir_pos, dir_len;  /* offsets of POS and LEN inside an entry       */
} pydb_geom;
extern const pydb_geom pydb__geom[4];

/* POS and LEN of the directory entry at d (docs/isis-formats.md §2.2),
 * whatever the layout's widths. */
static inline void pydb__dir_entry(const pydb_geom *g, const uint8_t *d,
                                   int64_t *pos, int64_t *len)
{
    if (g->ffi) {
        *pos = pydb__u32(d + g->dir_pos);
        *len = pydb__u32(d + g->dir_len);
    } else {
        *pos = pydb__u16(d + g->dir_pos);
        *len = pydb__u16(d + g->dir_len);
    }
}

/* The leader of a record version, decoded without any check. */
typedef struct pydb_leader {
    int32_t mfn;
    int64_t mfrl;    /* |stored MFRL|                                      */
    int locked;      /* the stored MFRL is negative (record lock)          */
    int64_t base, nvf;
    int32_t mfbwb;
    int mfbwp, status;
} pydb_leader;

/* Decode the g->leader bytes at p. */
void pydb__leader_decode(pydb_leader *l, const pydb_geom *g,
                         const uint8_t *p);

/* Check a decoded leader read at `off` for the XRF entry of `mfn`, in a
 * master file of `mst_size` bytes: the MFN matches, MFRL is possible and
 * inside the file, BASE agrees with NVF.  0 or PYDB_ECORRUPT (path and
 * offset of the bad field). */
int pydb__leader_check(const pydb_leader *l, const pydb_geom *g,
                       int32_t mfn, int64_t off, int64_t mst_size,
                       const char *path, pydb_error *err);

/* Whether a decoded leader, found at `off` with no XRF entry naming it
 * (a scan of the master file), could start a record version that ends by
 * `limit`: MFN 1..max_mfn, MFRL from the leader's size to the layout's
 * largest (32767, or PYDB_MAX_FFI_MFRL with FFI), BASE the leader plus
 * NVF directory entries and inside MFRL, STATUS 0 or 1, MFBWB >= 0 and
 * MFBWP < 512.  The validator's orphan scan and pydb_mkxrf() use it,
 * then pydb__dir_plausible(). */
int pydb__leader_plausible(const pydb_leader *l, const pydb_geom *g,
                           int32_t max_mfn, int64_t off, int64_t limit);
/* Whether each of the l->nvf directory entries of a plausible leader (the
 * record's first l->base bytes at p) lies inside the record's data. */
int pydb__dir_plausible(const pydb_leader *l, const pydb_geom *g,
                        const uint8_t *p);

/* Fill rec (reserved for l->mfrl bytes and l->nvf fields, its raw bytes
 * read) from a checked leader: the field array (each directory entry
 * checked against the record's data), MFN, offsets, status, lock.  The
 * caller sets deleted and flags.  0 or PYDB_ECORRUPT. */
int pydb__record_decode(pydb_record *rec, const pydb_geom *g,
                        const pydb_leader *l, int64_t off, const char *path,
                        pydb_error *err);

/* ---- record encoding and placement, docs/isis-formats.md §2.2-2.3 ---- */

/* Where a record goes that could start at `pos`: aligned to 2 (2^MSTXL if
 * MSTXL > 0), then moved to the next block if the leader up to BASE would
 * straddle a block boundary (never-split rule). */
int64_t pydb__place(int layout, int mstxl, int64_t pos);
/* MFRL of a record with these fields (even, a multiple of 2^MSTXL);
 * PYDB_ETOOBIG or PYDB_EINVAL if the layout cannot hold it. */
int pydb__record_size(int64_t *mfrl, int layout, int mstxl, int32_t mfn,
                      const pydb_field *fields, uint32_t nfields,
                      const char *path, pydb_error *err);
/* Encode a record of `mfrl` bytes at p: leader, directory, data, blank
 * padding.  back_offset: the version it replaces (MFBWB/MFBWP), or -1. */
void pydb__record_encode(uint8_t *p, int layout, int64_t mfrl, int32_t mfn,
                         const pydb_field *fields, uint32_t nfields,
                         int64_t back_offset, int status);

/* A pydb_record is one malloc'ed block: the struct, the record's bytes
 * (MFRL of them) and its field array, each part 8-aligned. */
static inline size_t pydb__round8(size_t n) { return (n + 7) & ~(size_t)7; }
static inline uint8_t *pydb__record_raw(const pydb_record *r)
{
    return (uint8_t *)r + pydb__round8(sizeof(pydb_record));
}
static inline pydb_field *pydb__record_fields(const pydb_record *r,
                                              size_t raw)
{
    return (pydb_field *)(pydb__record_raw(r) + pydb__round8(raw));
}
/* Make *rec (NULL: a new one) hold `raw` record bytes and `nf` fields:
 * kept if it holds them in at most twice their size, else reallocated
 * to their size (grown or cut). */
int pydb__record_reserve(pydb_record **rec, size_t raw, size_t nf,
                         pydb_error *err);

/* ---- control record, docs/isis-formats.md §2.1 ---- */
typedef struct pydb_ctl {
    int32_t ctlmfn, next_mfn, next_block, next_pos, reccnt;
    int mftype, mstxl;
} pydb_ctl;

/* Decode the first 20 bytes of a control record. */
static inline void pydb__ctl_decode(pydb_ctl *c, const uint8_t *p)
{
    c->ctlmfn = (int32_t)pydb__u32(p);
    c->next_mfn = (int32_t)pydb__u32(p + 4);
    c->next_block = (int32_t)pydb__u32(p + 8);
    c->next_pos = pydb__u16(p + 12);
    c->mftype = p[14];
    c->mstxl = p[15];
    c->reccnt = (int32_t)pydb__u32(p + 16);
}
/* NXTMFN, NXTMFB and NXTMFP are in range (NXTMFP 1..513). */
static inline int pydb__ctl_sane(const pydb_ctl *c)
{
    return c->next_mfn >= 1 && c->next_block >= 1 && c->next_pos >= 1 &&
           c->next_pos <= PYDB_BLOCK + 1;
}
/* The byte offset where the records end, from NXTMFB/NXTMFP.  Computed in
 * 64 bits, so that values no sane control record holds (a NXTMFB of
 * -2^31 from a damaged file) give an absurd offset for the caller's
 * checks to refuse, not an overflow. */
static inline int64_t pydb__ctl_end(int32_t next_block, int32_t next_pos)
{
    return ((int64_t)next_block - 1) * PYDB_BLOCK + (int64_t)next_pos - 1;
}
/* Store NXTMFN and the NXTMFB/NXTMFP of `end` into a control record. */
static inline void pydb__ctl_set_next(uint8_t *p, int32_t next_mfn,
                                      int64_t end)
{
    PYDB_ASSERT(next_mfn >= 1 && end >= PYDB_CTL_SIZE);
    pydb__put32(p + 4, (uint32_t)next_mfn);
    pydb__put32(p + 8, (uint32_t)(end / PYDB_BLOCK + 1));
    pydb__put16(p + 12, (uint32_t)(end % PYDB_BLOCK + 1));
}

/* ---- cross-reference file, docs/isis-formats.md §3 ---- */

/* XRF blocks that hold the entries of MFN 1..next_mfn-1. */
static inline int64_t pydb__xrf_blocks(int64_t next_mfn)
{
    return (next_mfn - 1 + PYDB_XRF_PER_BLOCK - 1) / PYDB_XRF_PER_BLOCK;
}

/* XRF pointer encoding, docs/isis-formats.md §3.2: the value naming
 * `offset` (a record start, so a multiple of 2^MSTXL) with PYDB_FLAG_NEW/PENDING. */
int32_t pydb__xrf_encode(int64_t offset, int flags, int mstxl);

/* Why an XRF entry whose offset is below PYDB_CTL_SIZE cannot be
 * followed, for a damage message: "points at offset N, inside the
 * control record", or, for a value naming block 0 (blocks count from 1,
 * so its offset is negative), "names block 0 ...".  Written into out (n
 * bytes, 80 are enough), which is returned. */
const char *pydb__xrf_low_reason(char *out, size_t n, int64_t offset);

/* Decode a stored XRF value (docs/isis-formats.md §3.2) without checking
 * it against the files: raw, state, flags and the byte offset it names.  UNUSED (0)
 * and PDELETED (a negated pointer to offset 0, whatever its flags: block
 * 1, position 0, as CISIS recxref tests it; -2048 with MSTXL 0,
 * -(2048 >> MSTXL) in general) get offset -1;
 * for the others the caller checks the offset: below PYDB_CTL_SIZE (which
 * covers a block number < 1) or past the master file is damage. */
static inline void pydb__xrf_unpack(pydb_xrf_entry *e, int32_t raw,
                                    int mstxl)
{
    int64_t v = raw < 0 ? -(int64_t)raw : (int64_t)raw;
    int64_t block = v >> (11 - mstxl);
    int64_t low = v & ((1 << (11 - mstxl)) - 1);
    int64_t off = (block - 1) * PYDB_BLOCK + ((low & (0x1FF >> mstxl)) << mstxl);

    PYDB_ASSERT(mstxl >= 0 && mstxl <= 6);
    e->raw = raw;
    e->flags = 0;
    e->offset = -1;
    if (raw == 0) {
        e->state = PYDB_XRF_UNUSED;
        return;
    }
    /* not raw == -2048 alone: with MSTXL >= 1 that is a logically
     * deleted record at offset 512 (MSTXL 1) or further */
    if (raw < 0 && off == 0) {
        e->state = PYDB_XRF_PDELETED;
        return;
    }
    if (low & (0x200 >> mstxl)) e->flags |= PYDB_FLAG_PENDING;
    if (low & (0x400 >> mstxl)) e->flags |= PYDB_FLAG_NEW;
    e->state = raw < 0 ? PYDB_XRF_LDELETED : PYDB_XRF_ACTIVE;
    e->offset = off;
    /* the offset is inside its block and on a 2^MSTXL boundary */
    PYDB_ASSERT(off % PYDB_BLOCK < PYDB_BLOCK && (off & ((1 << mstxl) - 1)) == 0);
}

#endif
