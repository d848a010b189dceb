/*
 * fst_format.c - the interpreter of the CDS/ISIS formatting language
 * subset of fst_int.h: evaluates one compiled FST rule over a record's
 * fields into text (pydb__fst_format), with the P/H/D modes, groups,
 * conditions and functions.
 *
 * Depends on: fst_int.h (compiled form), pydb_int.h (fields, errors).
 * Knows nothing of keys or indexes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fst_int.h"

/* ---------------------------------------------------------- evaluation */

typedef struct ev {
    const pydb_fst *f;
    int32_t mfn;
    const pydb_field *fields;
    uint32_t n;
    int mode;          /* 'P', 'H', 'D' */
    int iocc;          /* current group occurrence, 0 outside groups */
    int brk;
    pydb_fst_scratch *s;
    pydb_error *err;
} ev;

#define MAX_OUTPUT ((size_t)64 << 20)   /* bytes of format output per rule */

static int out_reserve(ev *e, size_t more)
{
    pydb_fst_scratch *s = e->s;
    if (s->out_len + more <= s->out_cap) return 0;
    if (s->out_len + more > MAX_OUTPUT) {
        PYDB_ERROR(e->err, PYDB_ETOOBIG, "", -1,
                   "FST format output of record %d passes %zu bytes",
                   (int)e->mfn, MAX_OUTPUT);
        return -1;
    }
    size_t cap = (s->out_cap ? s->out_cap : 1024);
    while (cap < s->out_len + more) cap *= 2;
    uint8_t *nv = realloc(s->out, cap);
    if (!nv) {
        PYDB_ERROR(e->err, PYDB_ENOMEM, "", -1,
                   "cannot grow the format output to %zu bytes", cap);
        return -1;
    }
    s->out = nv;
    s->out_cap = cap;
    return 0;
}

static int out_put(ev *e, const void *p, size_t n)
{
    if (out_reserve(e, n) < 0) return -1;
    memcpy(e->s->out + e->s->out_len, p, n);
    e->s->out_len += n;
    return 0;
}

static int out_span(ev *e, span sp)
{
    if (sp.off < 0 || sp.len <= 0) return 0;
    return out_put(e, e->f->text + sp.off, (size_t)sp.len);
}

/* Extract occurrence value: subfield, offset, length.  Returns 0 and sets
 * *v and *vl, or 1 if the occurrence yields nothing. */
static int extract(const node *nd, const pydb_field *fl, const uint8_t **v,
                   size_t *vl)
{
    const uint8_t *p = fl->value;
    size_t l = fl->len;
    if (nd->sub == '*') {
        if (l >= 2 && p[0] == '^') {
            p += 2;
            l -= 2;
        }
        const uint8_t *c = memchr(p, '^', l);
        if (c) l = (size_t)(c - p);
    } else if (nd->sub) {
        size_t i = 0;
        int found = 0;
        while (i + 1 < l) {
            if (p[i] == '^' && tolower(p[i + 1]) == nd->sub) {
                found = 1;
                break;
            }
            i++;
        }
        if (!found) return 1;
        p += i + 2;
        l -= i + 2;
        const uint8_t *c = memchr(p, '^', l);
        if (c) l = (size_t)(c - p);
    }
    if (nd->off >= 0) {
        if ((size_t)nd->off >= l) return 1;
        p += nd->off;
        l -= (size_t)nd->off;
    }
    if (nd->len >= 0 && (size_t)nd->len < l) l = (size_t)nd->len;
    if (l == 0) return 1;
    *v = p;
    *vl = l;
    return 0;
}

/* Output a value in the current mode. */
static int out_value(ev *e, const uint8_t *v, size_t l, int whole)
{
    if (e->mode == 'P') return out_put(e, v, l);
    if (out_reserve(e, l * 2 + 4) < 0) return -1;
    uint8_t *o = e->s->out + e->s->out_len;
    size_t k = 0;
    for (size_t i = 0; i < l; i++) {
        uint8_t c = v[i];
        if (c == '^' && whole && i + 1 < l) {
            int code = tolower(v[i + 1]);
            i++;
            if (k == 0) continue;
            const char *rep = code == 'a' ? "; "
                              : (code >= 'b' && code <= 'i') ? ", " : ". ";
            o[k++] = (uint8_t)rep[0];
            o[k++] = ' ';
            continue;
        }
        if (c == '<') {   /* <shown=filed>: the shown part stays */
            const uint8_t *gt = memchr(v + i, '>', l - i);
            if (gt) {
                const uint8_t *eq = memchr(v + i, '=', (size_t)(gt - v - i));
                if (eq) {
                    memcpy(o + k, v + i + 1, (size_t)(eq - v) - i - 1);
                    k += (size_t)(eq - v) - i - 1;
                    i = (size_t)(gt - v);
                }
                continue;
            }
        }
        if (c == '>') continue;
        o[k++] = c;
    }
    e->s->out_len += k;
    return 0;
}

static int field_count(const ev *e, uint32_t tag)
{
    int c = 0;
    for (uint32_t i = 0; i < e->n; i++) c += e->fields[i].tag == tag;
    return c;
}

/* Walk the occurrences a selector selects now; for each present one call
 * the output.  present-only mode (out == 0) just reports presence. */
static int eval_field(ev *e, const node *nd, int out, int *present)
{
    int occ = 0, first = 1, has_rep = nd->pre_rep.off >= 0 ||
                                      nd->suf_rep.off >= 0;
    *present = 0;
    for (uint32_t i = 0; i < e->n; i++) {
        const uint8_t *v;
        size_t vl;
        if (e->fields[i].tag != nd->tag) continue;
        occ++;
        if (e->iocc > 0 && occ != e->iocc) continue;
        if (extract(nd, &e->fields[i], &v, &vl)) continue;
        *present = 1;
        if (!out) return 0;
        if (first) {
            if (out_span(e, nd->pre_cond) < 0) return -1;
        } else if (!has_rep) {
            if (out_put(e, "; ", 2) < 0) return -1;
        }
        first = 0;
        if (out_span(e, nd->pre_rep) < 0 ||
            out_value(e, v, vl, nd->sub == 0) < 0 ||
            out_span(e, nd->suf_rep) < 0)
            return -1;
    }
    if (out && *present && out_span(e, nd->suf_cond) < 0) return -1;
    return 0;
}

static int eval_list(ev *e, int head);

/* Largest occurrence count of the fields used inside a group. */
static int max_occ(ev *e, int head)
{
    int m = 0;
    for (int i = head; i >= 0; i = e->f->nodes[i].next) {
        const node *nd = &e->f->nodes[i];
        int c = 0;
        if (nd->kind == N_FIELD) c = field_count(e, nd->tag);
        else if (nd->kind == N_IF) {
            const expr *x = &e->f->ex[nd->expr];
            c = max_occ(e, nd->child);
            int c2 = max_occ(e, nd->child2);
            if (c2 > c) c = c2;
            /* fields named in the condition count too */
            int stack[32], sp = 0;
            stack[sp++] = nd->expr;
            while (sp > 0) {
                const expr *y = &e->f->ex[stack[--sp]];
                if (y->fmt >= 0) {
                    int c3 = max_occ(e, y->fmt);
                    if (c3 > c) c = c3;
                }
                if (y->a >= 0 && sp < 31) stack[sp++] = y->a;
                if (y->b >= 0 && sp < 31) stack[sp++] = y->b;
            }
            (void)x;
        } else if (nd->kind == N_REPLACE) c = max_occ(e, nd->child);
        if (c > m) m = c;
    }
    return m;
}

/* Evaluate a node list into a string at the end of out; *start gets its
 * offset (the caller truncates out_len back). */
static int eval_to_string(ev *e, int head, size_t *start)
{
    *start = e->s->out_len;
    int save_brk = e->brk;
    int rc = eval_list(e, head);
    e->brk = save_brk;
    return rc;
}

static int eval_num(ev *e, int x, double *v);

static int eval_str(ev *e, int x, size_t *start, size_t *len)
{
    const expr *y = &e->f->ex[x];
    if (y->kind == E_STR) {
        *start = e->s->out_len;
        if (out_span(e, y->str) < 0) return -1;
    } else if (y->kind == E_FMT) {
        if (eval_to_string(e, y->fmt, start) < 0) return -1;
    } else {
        double v;
        char buf[64];
        *start = e->s->out_len;
        if (eval_num(e, x, &v) < 0) return -1;
        int l = snprintf(buf, sizeof buf, "%.15g", v);
        if (out_put(e, buf, (size_t)l) < 0) return -1;
    }
    *len = e->s->out_len - *start;
    return 0;
}

static int eval_cond(ev *e, int x, int *r);

/* The number the l bytes the format just wrote at st begin with (strtod;
 * at most 63 bytes read), taken back out of the output.  Nothing written
 * (l 0, the output perhaps not allocated yet) is 0. */
static double take_number(ev *e, size_t st, size_t l)
{
    char buf[64];
    size_t k = l < 63 ? l : 63;
    if (k) memcpy(buf, e->s->out + st, k);
    buf[k] = 0;
    e->s->out_len = st;
    return strtod(buf, NULL);
}

static int eval_num(ev *e, int x, double *v)
{
    const expr *y = &e->f->ex[x];
    size_t st, l;
    switch (y->kind) {
    case E_NUM:
        if (y->a >= 0) {   /* val(format) */
            if (eval_str(e, y->a, &st, &l) < 0) return -1;
            *v = take_number(e, st, l);
            return 0;
        }
        *v = y->num;
        return 0;
    case E_IOCC: *v = e->iocc; return 0;
    case E_MFN: *v = e->mfn; return 0;
    case E_SIZE:
        if (eval_to_string(e, y->fmt, &st) < 0) return -1;
        *v = (double)(e->s->out_len - st);
        e->s->out_len = st;
        return 0;
    case E_STR: case E_FMT:
        if (eval_str(e, x, &st, &l) < 0) return -1;
        *v = take_number(e, st, l);
        return 0;
    default: {
        int r;
        if (eval_cond(e, x, &r) < 0) return -1;
        *v = r;
        return 0;
    }
    }
}

static int is_numeric(const expr *y)
{
    return y->kind == E_NUM || y->kind == E_IOCC || y->kind == E_MFN ||
           y->kind == E_SIZE;
}

static int eval_cond(ev *e, int x, int *r)
{
    const expr *y = &e->f->ex[x];
    switch (y->kind) {
    case E_P: case E_A: {
        int any = 0;
        for (int i = y->fmt; i >= 0; i = e->f->nodes[i].next) {
            const node *nd = &e->f->nodes[i];
            int pr = 0;
            if (nd->kind == N_FIELD) {
                if (eval_field(e, nd, 0, &pr) < 0) return -1;
            } else {
                size_t st;
                if (eval_to_string(e, i, &st) < 0) return -1;
                pr = e->s->out_len > st;
                e->s->out_len = st;
            }
            any |= pr;
        }
        *r = y->kind == E_P ? any : !any;
        return 0;
    }
    case E_AND: case E_OR: {
        int a, b;
        if (eval_cond(e, y->a, &a) < 0) return -1;
        if (y->kind == E_AND && !a) { *r = 0; return 0; }
        if (y->kind == E_OR && a) { *r = 1; return 0; }
        if (eval_cond(e, y->b, &b) < 0) return -1;
        *r = b;
        return 0;
    }
    case E_NOT: {
        int a;
        if (eval_cond(e, y->a, &a) < 0) return -1;
        *r = !a;
        return 0;
    }
    case E_CMP: {
        const expr *ya = &e->f->ex[y->a], *yb = &e->f->ex[y->b];
        int c;
        if (y->op != OP_CONTAINS && (is_numeric(ya) || is_numeric(yb))) {
            double a, b;
            if (eval_num(e, y->a, &a) < 0 || eval_num(e, y->b, &b) < 0)
                return -1;
            c = (a > b) - (a < b);
        } else {
            size_t sa, la, sb, lb;
            if (eval_str(e, y->a, &sa, &la) < 0 ||
                eval_str(e, y->b, &sb, &lb) < 0)
                return -1;
            /* out is NULL while nothing was written (both empty) */
            static const uint8_t nothing[1];
            const uint8_t *out = e->s->out ? e->s->out : nothing;
            const uint8_t *pa = out + sa, *pb = out + sb;
            if (y->op == OP_CONTAINS) {
                int found = lb == 0;
                for (size_t i = 0; !found && i + lb <= la; i++) {
                    size_t k = 0;
                    while (k < lb && toupper(pa[i + k]) == toupper(pb[k])) k++;
                    found = k == lb;
                }
                e->s->out_len = sa;
                *r = found;
                return 0;
            }
            c = memcmp(pa, pb, la < lb ? la : lb);
            if (!c) c = (la > lb) - (la < lb);
            e->s->out_len = sa;
        }
        switch (y->op) {
        case OP_EQ: *r = c == 0; break;
        case OP_NE: *r = c != 0; break;
        case OP_LT: *r = c < 0; break;
        case OP_GT: *r = c > 0; break;
        case OP_LE: *r = c <= 0; break;
        default: *r = c >= 0; break;
        }
        return 0;
    }
    default: {
        double v;
        if (eval_num(e, x, &v) < 0) return -1;
        *r = v != 0;
        return 0;
    }
    }
}

static int eval_list(ev *e, int head)
{
    for (int i = head; i >= 0 && !e->brk; i = e->f->nodes[i].next) {
        const node *nd = &e->f->nodes[i];
        int pr;
        char buf[64];
        switch (nd->kind) {
        case N_LIT:
            if (out_span(e, nd->lit) < 0) return -1;
            break;
        case N_FIELD:
            if (eval_field(e, nd, 1, &pr) < 0) return -1;
            break;
        case N_MFN: {
            int w = nd->w > 0 && nd->w < 32 ? nd->w : 6;
            int l = snprintf(buf, sizeof buf, "%0*d", w, (int)e->mfn);
            if (out_put(e, buf, (size_t)l) < 0) return -1;
            break;
        }
        case N_NL:
            if (out_put(e, "\n", 1) < 0) return -1;
            break;
        case N_PCT:
            if (out_put(e, "%", 1) < 0) return -1;
            break;
        case N_MODE:
            e->mode = nd->mode;
            break;
        case N_GROUP: {
            /* CISIS runs a group's body before it tests for another
             * occurrence (cifm1.c: beg_init_rep, the body, test_rep), so
             * a group runs once even when none of its fields is present:
             * (|AI_|v711^a,', '/) gives "," then, as in ABCD's indexes */
            int m = max_occ(e, nd->child), save = e->iocc;
            if (m < 1) m = 1;
            for (int k = 1; k <= m; k++) {
                e->iocc = k;
                if (eval_list(e, nd->child) < 0) return -1;
                if (e->brk) {
                    e->brk = 0;
                    break;
                }
            }
            e->iocc = save;
            break;
        }
        case N_IF: {
            int r;
            if (eval_cond(e, nd->expr, &r) < 0) return -1;
            if (eval_list(e, r ? nd->child : nd->child2) < 0) return -1;
            break;
        }
        case N_BREAK:
            if (e->iocc > 0) e->brk = 1;
            break;
        case N_FNUM: {
            double v;
            if (eval_num(e, nd->expr, &v) < 0) return -1;
            int w = nd->w >= 0 && nd->w < 40 ? nd->w : 1;
            int d = nd->d >= 0 && nd->d < 16 ? nd->d : 0;
            int l = snprintf(buf, sizeof buf, "%*.*f", w, d, v);
            if (out_put(e, buf, (size_t)l) < 0) return -1;
            break;
        }
        case N_REPLACE: {
            size_t st;
            if (eval_to_string(e, nd->child, &st) < 0) return -1;
            size_t l = e->s->out_len - st;
            size_t fl = nd->rep_from.len > 0 ? (size_t)nd->rep_from.len : 0;
            if (fl == 0 || l == 0) break;
            const uint8_t *from = (const uint8_t *)e->f->text +
                                  nd->rep_from.off;
            if (l > e->s->tmp_cap) {
                uint8_t *t = realloc(e->s->tmp, l);
                if (!t) {
                    PYDB_ERROR(e->err, PYDB_ENOMEM, "", -1,
                               "cannot allocate %zu bytes", l);
                    return -1;
                }
                e->s->tmp = t;
                e->s->tmp_cap = l;
            }
            memcpy(e->s->tmp, e->s->out + st, l);
            e->s->out_len = st;
            for (size_t k = 0; k < l;) {
                if (k + fl <= l && memcmp(e->s->tmp + k, from, fl) == 0) {
                    if (out_span(e, nd->rep_to) < 0) return -1;
                    k += fl;
                } else {
                    if (out_put(e, e->s->tmp + k, 1) < 0) return -1;
                    k++;
                }
            }
            break;
        }
        }
    }
    return 0;
}

int pydb__fst_format(const pydb_fst *fst, size_t i, int32_t mfn,
                     const pydb_field *fields, uint32_t n,
                     pydb_fst_scratch *s, pydb_error *err)
{
    ev e = {fst, mfn, fields, n, 'P', 0, 0, s, err};
    s->out_len = 0;
    if (i >= fst->nrules)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "no FST rule %zu", i);
    if (eval_list(&e, fst->rules[i].head) < 0)
        return err ? err->code : PYDB_ENOMEM;
    return PYDB_OK;
}

void pydb__fst_scratch_free(pydb_fst_scratch *s)
{
    free(s->out);
    free(s->key);
    free(s->tmp);
    memset(s, 0, sizeof *s);
}

