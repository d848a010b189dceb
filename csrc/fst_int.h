/*
 * fst_int.h - the compiled form of a CDS/ISIS field select table
 * (docs/isis-formats.md §5), shared by the parser (fst_parse.c), the
 * formatting-language interpreter (fst_format.c) and key extraction
 * (fst_keys.c).  Not installed.
 *
 * Format language subset (docs/isis-formats.md §5.1; every FST under
 * shared/data/isis uses only these):
 *   vTAG  field selector, with ^x subfield (^* = first subfield), *OFF
 *         offset and .LEN length;  mfn, mfn(N)
 *   '...' unconditional literal (also `...`);  "..." conditional literal
 *         (before a selector: output once if the field is present, after
 *         it: once after the last occurrence);  |...| repeatable literal
 *         (before/after each occurrence; a trailing + is accepted)
 *   ( ... ) repeatable group (once per occurrence, until no field inside
 *         has that occurrence);  / and # new line;  % occurrence break
 *   mpl mpu mhl mhu mdl mdu  modes (P: proof, as stored; H/D: subfield
 *         delimiters become punctuation — ^a "; ", ^b..^i ", ", others
 *         ". ", none at the start of the field — and <a=b> shows b)
 *   if COND then ... [else ...] fi, break, f(NUM,W,D), replace(FMT,'a','b'),
 *   size(FMT), iocc, p(..), a(..), comparisons = <> < > <= >= : , and/or/not,
 *   comments (slash-star ... star-slash).
 * Outside a group, the occurrences of a selector without repeatable
 * literals are separated by "; ".  A literal must close on its line (one
 * that does not is PYDB_EFST naming its kind, line and column); a
 * conditional/repeatable literal that no selector follows or precedes
 * produces nothing (also before mfn: ABCD's "CN_"mfn is indexed as
 * 000001).  Anything else is PYDB_EFST with the line (err->offset) and
 * the construct.
 *
 * Depends on: nidx_int.h (key rules, stop words, scratch space, the key
 * callback), pydb_int.h.
 */
#ifndef PYDB_FST_INT_H
#define PYDB_FST_INT_H

#include "nidx_int.h"

enum {
    N_LIT, N_FIELD, N_MFN, N_NL, N_PCT, N_MODE, N_GROUP, N_IF, N_BREAK,
    N_FNUM, N_REPLACE
};
enum {
    E_NUM, E_STR, E_FMT, E_P, E_A, E_IOCC, E_MFN, E_SIZE, E_AND, E_OR,
    E_NOT, E_CMP
};
enum { OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_CONTAINS };

typedef struct { int off, len; } span;   /* into fst->text; off<0: none */

typedef struct node {
    int kind, next, child, child2;
    uint32_t tag;
    uint8_t sub;            /* 0: whole field, '*': first subfield */
    int off, len;           /* extraction *OFF .LEN, -1 = none     */
    span pre_cond, pre_rep, suf_rep, suf_cond, lit, rep_from, rep_to;
    int mode, upper;        /* N_MODE: 'P'/'H'/'D', 1 = upper      */
    int expr;               /* N_IF condition, N_FNUM number       */
    int w, d;               /* N_FNUM width/decimals, N_MFN width  */
} node;

typedef struct expr {
    int kind, a, b, op;
    double num;
    span str;
    int fmt;                /* node list (E_FMT, E_SIZE, E_P, E_A) */
} expr;

typedef struct rule {
    uint32_t id;
    int tech, line;
    int fmt_off, fmt_len;
    int head;
} rule;

struct pydb_fst {
    char *text;
    size_t len;
    rule *rules;
    size_t nrules, rcap;
    node *nodes;
    size_t nn, ncap;
    expr *ex;
    size_t ne, ecap;
    char filename[256];
};

#endif
