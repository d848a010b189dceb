/*
 * isis_int.h - internals of the reader of existing CDS/ISIS inverted
 * files (isis_read.c: trees, postings, cursors, the index operations;
 * isis_open.c: choosing and validating the file set).  Not installed.
 *
 * Formats: docs/isis-formats.md §4 (referred to as §4.x):
 *   .CNT                 two control records, 26 (packed) or 28 (aligned)
 *                        bytes: IDTYPE ORDN ORDF N K LIV POSRX NMAXPOS
 *                        FMAXPOS ABNORMAL (§4.2)
 *   .N01/.N02            B*-tree nodes (§4.3), shared by both variants
 *   .L01/.L02 + .IFP     classic leaves and 512-byte-block postings with
 *                        segment chains (§4.4, §4.5)
 *   .LY1/.LY2 + .IYP     CISIS "LIND" leaves and byte-addressed lists:
 *                        bit strings, MFN lists, (MFN, CNT) pairs (§4.7)
 * Key length limits LE1/LE2: 10/30, 16/60, 16/256, 16/512 (§4.1).
 *
 * Safety.  Every record number, word address, byte address and count
 * read from a file is checked against the file sizes before use; damage
 * is PYDB_ECORRUPT with the file, the byte offset and the reason.  Loops
 * are bounded: a descent reads at most LIV+1 nodes, a leaf chain visits
 * at most FMAXPOS leaves and keys must ascend along it, a posting chain
 * is followed only until IFPTOTP postings are read (as CISIS posting()
 * does; ABCD's odds.ifp has chains with empty trailing segments) and has
 * fewer segments than the IFP has 20-byte headers.
 * Postings must not descend within a list (§4.5 says strictly ascending;
 * ABCD's rda.ifp repeats one posting, (805,905,1,1), so equal neighbours
 * are accepted and returned as stored).
 *
 * Threads: the handle is immutable after open; every operation works on
 * its own buffers, so any number of threads may use one index at once.
 *
 * Depends on: index_int.h (the index interface, key rules), pydb_int.h
 * (pydb_file reads through the vfs, errors).
 */
#ifndef PYDB_ISIS_INT_H
#define PYDB_ISIS_INT_H

#include "index_int.h"

#define IFP_BLOCK 512
#define IFP_WORDS 127          /* words after IFPBLK in a block          */
#define MAX_ORD 64             /* sanity cap on ORDN/ORDF                */
#define MAX_LIV 32             /* sanity cap on B-tree depth             */
#define MAX_LE 1024
#define WIDTH_SAMPLE 256       /* LIND lists sampled for the MFN width   */
#define CAPS_SAMPLE 65536      /* LIND keys sampled for (MFN,CNT) lists  */

enum { F_CNT, F_N1, F_N2, F_L1, F_L2, F_IFP, F_LY1, F_LY2, F_IYP, F_MST,
       F_COUNT };

typedef struct ixfile {
    pydb_file f;
    int open;
    int64_t mtime_ns;
} ixfile;

static inline int io_of(const ixfile *x)
{
    return x->f.map ? PYDB_IO_MMAP : PYDB_IO_PREAD;
}

static inline int rd(const ixfile *x, void *buf, size_t n, int64_t off,
              const char *what, pydb_error *err)
{
    return pydb__file_read(&x->f, io_of(x), buf, n, off, what, err);
}

static inline int32_t i32(const uint8_t *p) { return (int32_t)pydb__u32(p); }

static inline int16_t i16(const uint8_t *p) { return (int16_t)pydb__u16(p); }

static inline int64_t i64(const uint8_t *p) { return (int64_t)pydb__u64(p); }

typedef struct tree {
    int t;                 /* 1 or 2                                       */
    int empty;             /* LIV -1, or no leaves                         */
    int le;                /* key length (blank padded)                    */
    int pad;               /* bytes after KEY in node/classic-leaf entries */
    int ordn, ordf, liv;
    int32_t posrx, nmax, fmax;
    size_t nrec, nent;     /* node record / entry size                     */
    size_t lrec, lhdr, lent; /* leaf record / header / entry size          */
    size_t info1, info2, info3; /* offsets inside a leaf entry             */
    const ixfile *nf, *lf; /* node and leaf files                          */
} tree;

typedef struct isis_index {
    struct pydb_index base;
    int lind;
    int cnt_aligned;       /* .CNT has 28-byte records                     */
    int infx, infx_align;  /* LIND: INFO1/INFO3 size and alignment         */
    int mfn_bytes;         /* LIND MFN lists: 3 or 4 (classic: 3)          */
    int32_t nxtmfn;        /* from the .mst control record, or 0           */
    tree tr[2];
    ixfile files[F_COUNT];
    int post;              /* F_IFP or F_IYP                               */
    pydb_keyrules rules;
    int keys;              /* the built-in table (enum pydb_keys)          */
    int tables;            /* bit 1: ISISUC.TAB loaded, bit 2: ISISAC.TAB  */
    char note[768];
} isis_index;

/* Compare two keys as blank-padded strings (the order of the trees,
 * §4.1): missing bytes count as blanks. */
static inline int kcmp(const uint8_t *a, size_t la, const uint8_t *b,
                       size_t lb)
{
    size_t n = la > lb ? la : lb;
    for (size_t i = 0; i < n; i++) {
        int ca = i < la ? a[i] : ' ', cb = i < lb ? b[i] : ' ';
        if (ca != cb) return ca - cb;
    }
    return 0;
}

/* Length of a stored key without its blank padding. */
static inline size_t ktrim(const uint8_t *k, size_t le)
{
    while (le > 0 && k[le - 1] == ' ') le--;
    return le;
}

static inline int64_t node_off(const tree *tr, int32_t r)
{
    return ((int64_t)r - 1) * (int64_t)tr->nrec;
}

static inline int64_t leaf_off(const tree *tr, int32_t r)
{
    return ((int64_t)r - 1) * (int64_t)tr->lrec;
}

/* The byte offset in the leaf file of e, a pointer into buf, which holds
 * leaf r. */
static inline int64_t leaf_entry_off(const tree *tr, int32_t r,
                                     const uint8_t *buf, const uint8_t *e)
{
    return leaf_off(tr, r) + (int64_t)(e - buf);
}

static inline const uint8_t *node_key(const tree *tr, const uint8_t *buf,
                                      int j)
{
    return buf + 8 + (size_t)j * tr->nent;
}

static inline int32_t node_punt(const tree *tr, const uint8_t *buf, int j)
{
    return i32(buf + 8 + (size_t)j * tr->nent + tr->le + tr->pad);
}

static inline const uint8_t *leaf_key(const tree *tr, const uint8_t *buf,
                                      int j)
{
    return buf + tr->lhdr + (size_t)j * tr->lent;
}

static inline int32_t leaf_next(const uint8_t *buf) { return i32(buf + 8); }

/* The LIND list of a leaf entry, §4.7. */
typedef struct lind_ref {
    int64_t addr, info3;
    int32_t n;
    int64_t where;          /* leaf entry offset, for messages */
} lind_ref;

/* A position in one tree's leaf chain, for ordered enumeration. */
typedef struct cursor {
    const tree *tr;
    uint8_t *buf;          /* current leaf                                 */
    int ock, j;            /* active keys, next index                      */
    int32_t leaf;          /* current leaf number                          */
    int32_t visited;       /* leaves read                                  */
    uint8_t *prev;         /* previous key (order check)                   */
    int has_prev;
    int done;
} cursor;

/* ---- isis_read.c ---- */

/* Files: ixfile_init empties x; ixfile_open opens and maps path (read
 * through pread if mapping fails); ixfile_close undoes both. */
void pydb__isis_ixfile_init(ixfile *x);
void pydb__isis_ixfile_close(ixfile *x);
int pydb__isis_ixfile_open(ixfile *x, const char *path, pydb_error *err);

/* Read record r of the node / leaf file of tr into buf, checking POS,
 * OCK and IT; *ock = active keys. */
int pydb__isis_read_node(const tree *tr, int32_t r, uint8_t *buf, int *ock,
                         pydb_error *err);
int pydb__isis_read_leaf(const tree *tr, int32_t r, uint8_t *buf, int *ock,
                         pydb_error *err);

/* The classic posting list starting at IFP (block, word), §4.5, appended
 * to out (NULL: only checked).  `from`: the file whose entry gave the
 * address (a leaf file), and `from_off` the address's byte offset there
 * (-1: not known), named when the address is outside the IFP. */
int pydb__isis_ifp_postings(const isis_index *ix, int32_t block,
                            int32_t word, const char *from, int64_t from_off,
                            pydb_postings *out, pydb_error *err);
/* The LIND list reference of leaf entry e, §4.7. */
void pydb__isis_lind_entry(const isis_index *ix, const tree *tr,
                           const uint8_t *e, lind_ref *r);
/* Decode a LIND list with MFN width w (3 or 4) into out (NULL: only
 * check it); nxtmfn > 0 bounds the MFNs. */
int pydb__isis_lind_postings(const isis_index *ix, const lind_ref *r, int w,
                             int32_t nxtmfn, pydb_postings *out,
                             pydb_error *err);

/* Ordered enumeration of one tree's leaf chain from the first key >= lo
 * (see isis_read.c). */
int pydb__isis_cursor_init(cursor *c, const tree *tr, const uint8_t *lo,
                           size_t lolen, pydb_error *err);
int pydb__isis_cursor_peek(cursor *c, const uint8_t **entry,
                           pydb_error *err);
void pydb__isis_cursor_advance(cursor *c);
void pydb__isis_cursor_free(cursor *c);

/* The index operations (pydb_index_ops) and the close of a handle. */
extern const pydb_index_ops pydb__isis_ops;
void pydb__isis_close(pydb_index *base);

#endif
