/*
 * fst.c - CDS/ISIS field select tables (isis-formats.md §5): parsing the
 * FST text into a compiled form, evaluating the subset of the formatting
 * language that real FSTs use, and extracting keys with the OCC/CNT rules
 * of §5.2.
 *
 * Format language subset (formats §5.1; every FST under shared/data/isis
 * uses only these):
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
 * literals are separated by "; ".  A literal that is never closed runs to
 * the end of the line; a conditional/repeatable literal that no selector
 * follows or precedes produces nothing (also before mfn: ABCD's
 * "CN_"mfn is indexed as 000001).  Anything else is PYDB_EFST with
 * the line (err->offset) and the construct.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ------------------------------------------------------------ parsing */

#define MAX_DEPTH 32   /* nesting of groups, ifs, functions, conditions */

typedef struct parser {
    pydb_fst *f;
    int pos, end, line;
    int depth, in_group;
    pydb_error *err;
} parser;

static int perr(parser *p, const char *what)
{
    int col = 0, ls = p->pos;
    while (ls > 0 && p->f->text[ls - 1] != '\n') ls--;
    col = p->pos - ls + 1;
    pydb__error_set(p->err, PYDB_EFST, 0, p->f->filename, p->line, __FILE__,
                    __LINE__, "FST line %d, column %d: %s", p->line, col,
                    what);
    return -1;
}

/* The array v (n used, *cap allocated elements of `size` bytes) with
 * room for one more: v itself, or v moved to a larger block (first
 * `init` elements, then doubling); NULL when out of memory (v and *cap
 * unchanged). */
static void *grow(void *v, size_t n, size_t *cap, size_t size, size_t init)
{
    if (n < *cap) return v;
    size_t c = *cap ? *cap * 2 : init;
    void *nv = realloc(v, c * size);
    if (nv) *cap = c;
    return nv;
}

static int new_node(parser *p, int kind)
{
    pydb_fst *f = p->f;
    node *nv = grow(f->nodes, f->nn, &f->ncap, sizeof *nv, 64);
    if (!nv) {
        pydb__error_set(p->err, PYDB_ENOMEM, 0, "", -1, __FILE__, __LINE__,
                        "cannot allocate FST nodes");
        return -1;
    }
    f->nodes = nv;
    node *n = &f->nodes[f->nn];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->next = n->child = n->child2 = -1;
    n->off = n->len = -1;
    n->expr = -1;
    n->pre_cond.off = n->pre_rep.off = n->suf_rep.off = n->suf_cond.off = -1;
    n->lit.off = n->rep_from.off = n->rep_to.off = -1;
    return (int)f->nn++;
}

static int new_expr(parser *p, int kind)
{
    pydb_fst *f = p->f;
    expr *ev = grow(f->ex, f->ne, &f->ecap, sizeof *ev, 32);
    if (!ev) {
        pydb__error_set(p->err, PYDB_ENOMEM, 0, "", -1, __FILE__, __LINE__,
                        "cannot allocate FST expressions");
        return -1;
    }
    f->ex = ev;
    expr *e = &f->ex[f->ne];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->a = e->b = e->fmt = -1;
    e->str.off = -1;
    return (int)f->ne++;
}

static int peekc(parser *p)
{
    return p->pos < p->end ? (unsigned char)p->f->text[p->pos] : -1;
}

static void skip_blanks(parser *p)
{
    for (;;) {
        while (p->pos < p->end &&
               (p->f->text[p->pos] == ' ' || p->f->text[p->pos] == '\t'))
            p->pos++;
        if (p->pos + 1 < p->end && p->f->text[p->pos] == '/' &&
            p->f->text[p->pos + 1] == '*') {
            char *c = memmem(p->f->text + p->pos + 2,
                             (size_t)(p->end - p->pos - 2), "*/", 2);
            p->pos = c ? (int)(c - p->f->text) + 2 : p->end;
            continue;
        }
        return;
    }
}

/* Word at pos (letters), lower-cased into w; returns its length. */
static int peek_word(parser *p, char *w, int cap)
{
    int i = 0;
    while (p->pos + i < p->end && i < cap - 1 &&
           isalpha((unsigned char)p->f->text[p->pos + i])) {
        w[i] = (char)tolower((unsigned char)p->f->text[p->pos + i]);
        i++;
    }
    w[i] = 0;
    return i;
}

static int accept_word(parser *p, const char *kw)
{
    char w[16];
    int l;
    skip_blanks(p);
    l = peek_word(p, w, sizeof w);
    if (l && strcmp(w, kw) == 0) {
        p->pos += l;
        return 1;
    }
    return 0;
}

static int expect_char(parser *p, int c, const char *what)
{
    skip_blanks(p);
    if (peekc(p) != c) return perr(p, what);
    p->pos++;
    return 0;
}

/* Literal delimited by q at pos (pos at the opening q). */
static span read_lit(parser *p, int q)
{
    span s;
    const char *c;
    p->pos++;
    s.off = p->pos;
    c = memchr(p->f->text + p->pos, q, (size_t)(p->end - p->pos));
    if (c) {
        s.len = (int)(c - p->f->text) - p->pos;
        p->pos += s.len + 1;
    } else {            /* never closed: runs to the end of the line */
        s.len = p->end - p->pos;
        p->pos = p->end;
    }
    return s;
}

static int read_int(parser *p, int *v)
{
    int n = 0, any = 0;
    skip_blanks(p);
    while (p->pos < p->end && isdigit((unsigned char)p->f->text[p->pos])) {
        if (n < 100000000) n = n * 10 + (p->f->text[p->pos] - '0');
        p->pos++;
        any = 1;
    }
    *v = n;
    return any ? 0 : -1;
}

static int parse_list(parser *p, int stop, int *head);

/* vTAG[^x][*off][.len] at pos (pos on 'v'). */
static int parse_field(parser *p)
{
    int n = new_node(p, N_FIELD), v;
    if (n < 0) return -1;
    p->pos++;   /* v */
    if (read_int(p, &v) < 0 || v > 65535)
        return perr(p, "field selector: tag number expected after 'v'");
    p->f->nodes[n].tag = (uint32_t)v;
    if (peekc(p) == '^' && p->pos + 1 < p->end) {
        p->f->nodes[n].sub = (uint8_t)tolower(
            (unsigned char)p->f->text[p->pos + 1]);
        p->pos += 2;
    }
    if (peekc(p) == '*' &&
        !(p->pos + 1 < p->end && p->f->text[p->pos + 1] == '/')) {
        p->pos++;
        if (read_int(p, &v) < 0)
            return perr(p, "field selector: offset expected after '*'");
        p->f->nodes[n].off = v;
    }
    if (peekc(p) == '.' && p->pos + 1 < p->end &&
        isdigit((unsigned char)p->f->text[p->pos + 1])) {
        p->pos++;
        read_int(p, &v);
        p->f->nodes[n].len = v;
    }
    return n;
}

static int parse_cond(parser *p);

static int parse_value(parser *p)
{
    char w[16];
    int c, e, l;
    skip_blanks(p);
    c = peekc(p);
    if (c == '(') {
        p->pos++;
        e = parse_cond(p);
        if (e < 0 || expect_char(p, ')', "condition: ')' expected") < 0)
            return -1;
        return e;
    }
    if (c == '\'' || c == '"' || c == '|') {
        e = new_expr(p, E_STR);
        if (e < 0) return -1;
        p->f->ex[e].str = read_lit(p, c);
        return e;
    }
    if (c >= 0 && isdigit(c)) {
        int v;
        e = new_expr(p, E_NUM);
        if (e < 0) return -1;
        read_int(p, &v);
        p->f->ex[e].num = v;
        return e;
    }
    l = peek_word(p, w, sizeof w);
    if (l == 1 && w[0] == 'v') {
        e = new_expr(p, E_FMT);
        if (e < 0) return -1;
        int n = parse_field(p);
        if (n < 0) return -1;
        p->f->ex[e].fmt = n;
        return e;
    }
    if (strcmp(w, "p") == 0 || strcmp(w, "a") == 0 ||
        strcmp(w, "size") == 0 || strcmp(w, "val") == 0) {
        int kind = w[0] == 'p' ? E_P : w[0] == 'a' ? E_A
                   : w[0] == 's' ? E_SIZE : E_FMT;
        p->pos += l;
        if (expect_char(p, '(', "function: '(' expected") < 0) return -1;
        e = new_expr(p, kind);
        if (e < 0) return -1;
        int head;
        if (parse_list(p, ')', &head) < 0) return -1;
        p->f->ex[e].fmt = head;
        if (expect_char(p, ')', "function: ')' expected") < 0) return -1;
        if (kind == E_FMT) {   /* val(): numeric value of the text */
            int e2 = new_expr(p, E_NUM);
            if (e2 < 0) return -1;
            p->f->ex[e2].a = e;
            p->f->ex[e2].op = 1;
            return e2;
        }
        return e;
    }
    if (strcmp(w, "iocc") == 0 || strcmp(w, "mfn") == 0) {
        p->pos += l;
        return new_expr(p, w[0] == 'i' ? E_IOCC : E_MFN);
    }
    return perr(p, l ? "condition: unsupported function or word"
                     : "condition: value expected");
}

static int parse_cmp(parser *p)
{
    int a = parse_value(p), op = -1, e;
    if (a < 0) return -1;
    skip_blanks(p);
    const char *t = p->f->text + p->pos;
    int rest = p->end - p->pos;
    if (rest >= 2 && t[0] == '<' && t[1] == '>') op = OP_NE, p->pos += 2;
    else if (rest >= 2 && t[0] == '<' && t[1] == '=') op = OP_LE, p->pos += 2;
    else if (rest >= 2 && t[0] == '>' && t[1] == '=') op = OP_GE, p->pos += 2;
    else if (rest >= 1 && t[0] == '<') op = OP_LT, p->pos++;
    else if (rest >= 1 && t[0] == '>') op = OP_GT, p->pos++;
    else if (rest >= 1 && t[0] == '=') op = OP_EQ, p->pos++;
    else if (rest >= 1 && t[0] == ':') op = OP_CONTAINS, p->pos++;
    if (op < 0) return a;
    int b = parse_value(p);
    if (b < 0) return -1;
    e = new_expr(p, E_CMP);
    if (e < 0) return -1;
    p->f->ex[e].a = a;
    p->f->ex[e].b = b;
    p->f->ex[e].op = op;
    return e;
}

static int parse_not(parser *p)
{
    if (accept_word(p, "not")) {
        if (++p->depth > MAX_DEPTH)
            return perr(p, "condition nested too deeply");
        int a = parse_not(p), e;
        p->depth--;
        if (a < 0) return -1;
        e = new_expr(p, E_NOT);
        if (e < 0) return -1;
        p->f->ex[e].a = a;
        return e;
    }
    return parse_cmp(p);
}

static int parse_and(parser *p)
{
    int a = parse_not(p);
    while (a >= 0 && accept_word(p, "and")) {
        int b = parse_not(p), e;
        if (b < 0) return -1;
        e = new_expr(p, E_AND);
        if (e < 0) return -1;
        p->f->ex[e].a = a;
        p->f->ex[e].b = b;
        a = e;
    }
    return a;
}

static int parse_cond(parser *p)
{
    if (++p->depth > MAX_DEPTH) return perr(p, "condition nested too deeply");
    int a = parse_and(p);
    p->depth--;
    if (a < 0) return -1;
    while (a >= 0 && accept_word(p, "or")) {
        int b = parse_and(p), e;
        if (b < 0) return -1;
        e = new_expr(p, E_OR);
        if (e < 0) return -1;
        p->f->ex[e].a = a;
        p->f->ex[e].b = b;
        a = e;
    }
    return a;
}

/* A list of items up to `stop` (')' for groups/functions, 'e' for
 * "else"/"fi", ',' for a function argument, 0 for the end of the rule). */
static int parse_list_body(parser *p, int stop, int *head);

static int parse_list(parser *p, int stop, int *head)
{
    int rc;
    if (++p->depth > MAX_DEPTH) return perr(p, "format nested too deeply");
    rc = parse_list_body(p, stop, head);
    p->depth--;
    return rc;
}

static int parse_list_body(parser *p, int stop, int *head)
{
    int last = -1;
    span pre_cond = {-1, 0}, pre_rep = {-1, 0};
    int pending_field = -1;   /* last selector, for suffix literals */
    *head = -1;

#define APPEND(n_)                                               \
    do {                                                         \
        if (last < 0) *head = (n_);                              \
        else p->f->nodes[last].next = (n_);                      \
        last = (n_);                                             \
    } while (0)

    for (;;) {
        char w[16];
        int c, l, n;
        skip_blanks(p);
        c = peekc(p);
        if (c < 0) break;
        if (stop == ')' && c == ')') break;
        if (stop == ',' && (c == ',' || c == ')')) break;
        l = peek_word(p, w, sizeof w);
        if (stop == 'e' && l && (strcmp(w, "else") == 0 ||
                                 strcmp(w, "fi") == 0))
            break;
        if (c == ',') {
            p->pos++;
            pending_field = -1;
            continue;
        }
        if (c == '"' || c == '|') {
            span s = read_lit(p, c);
            if (c == '|' && peekc(p) == '+') p->pos++;
            if (pending_field >= 0) {   /* suffix of the selector before */
                node *f = &p->f->nodes[pending_field];
                if (c == '|' && f->suf_rep.off < 0 && f->suf_cond.off < 0) {
                    f->suf_rep = s;
                    continue;
                }
                if (c == '"' && f->suf_cond.off < 0) {
                    f->suf_cond = s;
                    continue;
                }
            }
            if (c == '"') pre_cond = s;
            else pre_rep = s;
            pending_field = -1;
            continue;
        }
        pending_field = -1;
        if (c == '\'' || c == '`') {
            if ((n = new_node(p, N_LIT)) < 0) return -1;
            p->f->nodes[n].lit = read_lit(p, c);
            APPEND(n);
            continue;
        }
        if (c == '/' || c == '#' || c == '%') {
            p->pos++;
            if ((n = new_node(p, c == '%' ? N_PCT : N_NL)) < 0) return -1;
            APPEND(n);
            continue;
        }
        if (c == '(') {
            if (p->in_group)
                return perr(p, "repeatable groups cannot be nested");
            p->pos++;
            if ((n = new_node(p, N_GROUP)) < 0) return -1;
            int h;
            p->in_group = 1;
            if (parse_list(p, ')', &h) < 0) return -1;
            p->in_group = 0;
            p->f->nodes[n].child = h;
            if (expect_char(p, ')', "group: ')' expected") < 0) return -1;
            APPEND(n);
            continue;
        }
        if (l == 1 && w[0] == 'v' && p->pos + 1 < p->end &&
            isdigit((unsigned char)p->f->text[p->pos + 1])) {
            if ((n = parse_field(p)) < 0) return -1;
            p->f->nodes[n].pre_cond = pre_cond;
            p->f->nodes[n].pre_rep = pre_rep;
            pre_cond.off = pre_rep.off = -1;
            APPEND(n);
            pending_field = n;
            continue;
        }
        if (l == 3 && (w[0] == 'm') && strchr("phd", w[1]) &&
            strchr("lu", w[2])) {
            p->pos += 3;
            if ((n = new_node(p, N_MODE)) < 0) return -1;
            p->f->nodes[n].mode = toupper((unsigned char)w[1]);
            p->f->nodes[n].upper = w[2] == 'u';
            APPEND(n);
            continue;
        }
        if (strcmp(w, "mfn") == 0) {
            p->pos += 3;
            if ((n = new_node(p, N_MFN)) < 0) return -1;
            p->f->nodes[n].w = 6;
            skip_blanks(p);
            if (peekc(p) == '(') {
                p->pos++;
                if (read_int(p, &p->f->nodes[n].w) < 0 ||
                    expect_char(p, ')', "mfn(N): ')' expected") < 0)
                    return perr(p, "mfn(N): width expected");
            }
            /* a conditional/repeatable literal before mfn stays
             * unattached and shows nothing [E: ABCD dubcore.fst
             * "CN_"mfn indexed as 000001] */
            pre_cond.off = pre_rep.off = -1;
            APPEND(n);
            continue;
        }
        if (strcmp(w, "if") == 0) {
            p->pos += 2;
            if ((n = new_node(p, N_IF)) < 0) return -1;
            int e = parse_cond(p), h;
            if (e < 0) return -1;
            p->f->nodes[n].expr = e;
            if (!accept_word(p, "then")) return perr(p, "if: 'then' expected");
            if (parse_list(p, 'e', &h) < 0) return -1;
            p->f->nodes[n].child = h;
            if (accept_word(p, "else")) {
                if (parse_list(p, 'e', &h) < 0) return -1;
                p->f->nodes[n].child2 = h;
            }
            if (!accept_word(p, "fi")) return perr(p, "if: 'fi' expected");
            APPEND(n);
            continue;
        }
        if (strcmp(w, "break") == 0) {
            p->pos += 5;
            if ((n = new_node(p, N_BREAK)) < 0) return -1;
            APPEND(n);
            continue;
        }
        if (strcmp(w, "f") == 0 && p->pos + 1 < p->end &&
            p->f->text[p->pos + 1] == '(') {
            p->pos += 2;
            if ((n = new_node(p, N_FNUM)) < 0) return -1;
            int e = parse_value(p);
            if (e < 0) return -1;
            p->f->nodes[n].expr = e;
            p->f->nodes[n].w = 1;
            skip_blanks(p);
            if (peekc(p) == ',') {
                p->pos++;
                if (read_int(p, &p->f->nodes[n].w) < 0)
                    return perr(p, "f(): width expected");
                skip_blanks(p);
                if (peekc(p) == ',') {
                    p->pos++;
                    if (read_int(p, &p->f->nodes[n].d) < 0)
                        return perr(p, "f(): decimals expected");
                }
            }
            if (expect_char(p, ')', "f(): ')' expected") < 0) return -1;
            APPEND(n);
            continue;
        }
        if (strcmp(w, "replace") == 0) {
            p->pos += 7;
            if (expect_char(p, '(', "replace: '(' expected") < 0) return -1;
            if ((n = new_node(p, N_REPLACE)) < 0) return -1;
            int h;
            if (parse_list(p, ',', &h) < 0) return -1;
            p->f->nodes[n].child = h;
            for (int k = 0; k < 2; k++) {
                if (expect_char(p, ',', "replace: ',' expected") < 0)
                    return -1;
                skip_blanks(p);
                c = peekc(p);
                if (c != '\'' && c != '"' && c != '|')
                    return perr(p, "replace: string literal expected");
                span s = read_lit(p, c);
                if (k == 0) p->f->nodes[n].rep_from = s;
                else p->f->nodes[n].rep_to = s;
            }
            if (expect_char(p, ')', "replace: ')' expected") < 0) return -1;
            APPEND(n);
            continue;
        }
        if (c == ')') return perr(p, "unbalanced ')'");
        {
            char msg[96];
            if (l)
                snprintf(msg, sizeof msg,
                         "unsupported format construct '%s'", w);
            else if (c >= 0x20 && c < 0x7f)
                snprintf(msg, sizeof msg,
                         "unsupported format construct '%c'", c);
            else
                snprintf(msg, sizeof msg,
                         "unsupported format construct: byte 0x%02x", c);
            return perr(p, msg);
        }
    }
#undef APPEND
    return 0;
}

static int add_rule(pydb_fst *f, rule *r, pydb_error *err)
{
    rule *rv = grow(f->rules, f->nrules, &f->rcap, sizeof *rv, 16);
    if (!rv)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                          "cannot allocate FST rules");
    f->rules = rv;
    f->rules[f->nrules++] = *r;
    return PYDB_OK;
}

int pydb_fst_parse(pydb_fst **out, const char *text, size_t len,
                   const char *filename, pydb_error *err)
{
    pydb_fst *f = calloc(1, sizeof *f);
    parser p;
    size_t i = 0;
    int line = 0, rc = PYDB_OK;

    *out = NULL;
    if (!f || len > (size_t)1 << 30 || !(f->text = malloc(len + 1))) {
        free(f);
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "cannot allocate FST");
    }
    memcpy(f->text, text, len);
    f->text[len] = 0;
    f->len = len;
    snprintf(f->filename, sizeof f->filename, "%s", filename ? filename : "");
    p.f = f;
    p.err = err;
    while (i < len) {
        size_t e = i, s, t;
        rule r;
        unsigned long v;
        line++;
        while (e < len && text[e] != '\n') e++;
        t = e;
        while (t > i && (text[t - 1] == '\r' || text[t - 1] == ' ' ||
                         text[t - 1] == '\t' || text[t - 1] == 26))
            t--;
        s = i;
        while (s < t && (text[s] == ' ' || text[s] == '\t')) s++;
        i = e + 1;
        if (s == t) continue;   /* blank line */
        memset(&r, 0, sizeof r);
        r.line = line;
        p.line = line;
        p.pos = (int)s;
        p.end = (int)t;
        p.depth = 0;
        p.in_group = 0;
        if (!isdigit((unsigned char)text[s])) {
            perr(&p, "rule must start with a numeric ID");
            rc = PYDB_EFST;
            goto cleanup;
        }
        v = 0;
        while (s < t && isdigit((unsigned char)text[s]) && v <= 65535)
            v = v * 10 + (unsigned long)(text[s++] - '0');
        if (v < 1 || v > 65535 || (s < t && text[s] != ' ' &&
                                   text[s] != '\t')) {
            p.pos = (int)s;
            perr(&p, "ID must be a number 1..65535 followed by a blank");
            rc = PYDB_EFST;
            goto cleanup;
        }
        r.id = (uint32_t)v;
        while (s < t && (text[s] == ' ' || text[s] == '\t')) s++;
        p.pos = (int)s;
        v = 0;
        if (s >= t || !isdigit((unsigned char)text[s])) {
            perr(&p, "indexing technique (0-8) expected after the ID");
            rc = PYDB_EFST;
            goto cleanup;
        }
        while (s < t && isdigit((unsigned char)text[s]) && v < 100000)
            v = v * 10 + (unsigned long)(text[s++] - '0');
        if (!(v <= 8 || (v >= 1000 && v <= 1008))) {
            char msg[96];
            snprintf(msg, sizeof msg,
                     "indexing technique %lu is not supported (0-8, "
                     "1000-1008)", v);
            perr(&p, msg);
            rc = PYDB_EFST;
            goto cleanup;
        }
        r.tech = (int)v;
        while (s < t && (text[s] == ' ' || text[s] == '\t')) s++;
        if (s >= t) {
            p.pos = (int)s;
            perr(&p, "format expected after the technique");
            rc = PYDB_EFST;
            goto cleanup;
        }
        r.fmt_off = (int)s;
        r.fmt_len = (int)(t - s);
        p.pos = (int)s;
        if (parse_list(&p, 0, &r.head) < 0) {
            rc = err ? err->code : PYDB_EFST;
            goto cleanup;
        }
        if ((rc = add_rule(f, &r, err))) goto cleanup;
    }
cleanup:
    if (rc) {
        pydb_fst_free(f);
        return rc;
    }
    *out = f;
    return PYDB_OK;
}

void pydb_fst_free(pydb_fst *f)
{
    if (!f) return;
    free(f->text);
    free(f->rules);
    free(f->nodes);
    free(f->ex);
    free(f);
}

size_t pydb_fst_count(const pydb_fst *f) { return f->nrules; }

void pydb_fst_rule(const pydb_fst *f, size_t i, uint32_t *id, int *technique,
                   const char **format, size_t *format_len, int *line)
{
    const rule *r = &f->rules[i];
    if (id) *id = r->id;
    if (technique) *technique = r->tech;
    if (format) *format = f->text + r->fmt_off;
    if (format_len) *format_len = (size_t)r->fmt_len;
    if (line) *line = r->line;
}

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

static int eval_num(ev *e, int x, double *v)
{
    const expr *y = &e->f->ex[x];
    size_t st, l;
    switch (y->kind) {
    case E_NUM:
        if (y->a >= 0) {   /* val(format) */
            if (eval_str(e, y->a, &st, &l) < 0) return -1;
            char buf[64];
            size_t k = l < 63 ? l : 63;
            memcpy(buf, e->s->out + st, k);
            buf[k] = 0;
            e->s->out_len = st;
            *v = strtod(buf, NULL);
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
    case E_STR: case E_FMT: {
        if (eval_str(e, x, &st, &l) < 0) return -1;
        char buf[64];
        size_t k = l < 63 ? l : 63;
        memcpy(buf, e->s->out + st, k);
        buf[k] = 0;
        e->s->out_len = st;
        *v = strtod(buf, NULL);
        return 0;
    }
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
            const uint8_t *pa = e->s->out + sa, *pb = e->s->out + sb;
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
            int m = max_occ(e, nd->child), save = e->iocc;
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

/* ------------------------------------------------------- key extraction */

typedef struct kx {
    const pydb_keyrules *r;
    const pydb_stopwords *sw;
    pydb_fst_scratch *s;
    const uint8_t *prefix;
    size_t prefix_len;
    pydb_key_fn fn;
    void *ctx;
    pydb_error *err;
} kx;

/* Normalise prefix + term and hand it on; *emitted = 1 if a key came out.
 * stop: check the stop words (technique 4/8), on the term alone. */
static int emit(kx *k, const uint8_t *t, size_t tl, pydb_posting *p,
                int stop, int *emitted)
{
    size_t need = (k->prefix_len + tl) * 4 + 16, kl;
    int rc;
    *emitted = 0;
    if (need > k->s->key_cap) {
        uint8_t *nv = realloc(k->s->key, need);
        if (!nv)
            return PYDB_ERROR(k->err, PYDB_ENOMEM, "", -1,
                              "cannot allocate a %zu-byte key", need);
        k->s->key = nv;
        k->s->key_cap = need;
    }
    if (stop && k->sw && k->sw->n) {
        rc = pydb__key_normalize(k->r, t, tl, k->s->key, k->s->key_cap, &kl,
                                 k->err);
        if (rc) return rc;
        if (pydb__stopwords_has(k->sw, k->s->key, kl)) return PYDB_OK;
    }
    if (k->prefix_len) {
        /* normalise the concatenation (blanks inside are kept) */
        uint8_t *tmp = k->s->key + need / 2;
        size_t room = need - need / 2;
        if (k->prefix_len + tl > room) return PYDB_EINVAL;
        memcpy(tmp, k->prefix, k->prefix_len);
        memcpy(tmp + k->prefix_len, t, tl);
        uint8_t *dst = k->s->key;
        /* folding never grows a byte string more than 2x */
        rc = pydb__key_normalize(k->r, tmp, k->prefix_len + tl, dst,
                                 need / 2, &kl, k->err);
    } else {
        rc = pydb__key_normalize(k->r, t, tl, k->s->key, k->s->key_cap, &kl,
                                 k->err);
    }
    if (rc) return rc;
    if (kl == 0) return PYDB_OK;
    *emitted = 1;
    return k->fn(k->ctx, k->s->key, kl, p);
}

static int nonblank(const uint8_t *t, size_t l)
{
    for (size_t i = 0; i < l; i++)
        if (t[i] != ' ') return 1;
    return 0;
}

static int line_keys(kx *k, int tech, const uint8_t *t, size_t l,
                     pydb_posting *p)
{
    int rc, em;
    switch (tech) {
    case 0:
        p->cnt++;
        if ((rc = emit(k, t, l, p, 0, &em))) return rc;
        if (!em) p->cnt--;
        return PYDB_OK;
    case 1: {
        size_t i = 0, st = 0;
        while (i <= l) {
            if (i == l || (t[i] == '^' && i + 1 < l)) {
                if (i > st && nonblank(t + st, i - st)) {
                    p->cnt++;
                    if ((rc = emit(k, t + st, i - st, p, 0, &em))) return rc;
                    if (!em) p->cnt--;
                }
                if (i == l) break;
                i += 2;
                st = i;
                continue;
            }
            i++;
        }
        return PYDB_OK;
    }
    case 2: case 3: {
        int open = tech == 2 ? '<' : '/', close = tech == 2 ? '>' : '/';
        size_t i = 0;
        while (i < l) {
            const uint8_t *a = memchr(t + i, open, l - i);
            if (!a) break;
            size_t st = (size_t)(a - t) + 1;
            const uint8_t *b = st < l ? memchr(t + st, close, l - st) : NULL;
            if (!b) break;
            size_t en = (size_t)(b - t);
            if (en > st && nonblank(t + st, en - st)) {
                p->cnt++;
                if ((rc = emit(k, t + st, en - st, p, 0, &em))) return rc;
                if (!em) p->cnt--;
            }
            i = en + 1;
        }
        return PYDB_OK;
    }
    default: {   /* 4: words */
        size_t i = 0;
        while (i < l) {
            int w;
            size_t cl = pydb__word_char(k->r, t + i, l - i, &w);
            if (!w) {
                i += cl;
                continue;
            }
            size_t st = i;
            i += cl;
            while (i < l) {
                cl = pydb__word_char(k->r, t + i, l - i, &w);
                if (!w) break;
                i += cl;
            }
            p->cnt++;   /* stop words are counted, not emitted */
            if ((rc = emit(k, t + st, i - st, p, 1, &em))) return rc;
        }
        return PYDB_OK;
    }
    }
}

int pydb__fst_keys(const pydb_fst *fst, const pydb_keyrules *r,
                   const pydb_stopwords *sw, int32_t mfn,
                   const pydb_field *fields, uint32_t n,
                   pydb_fst_scratch *s, pydb_key_fn fn, void *ctx,
                   pydb_error *err)
{
    kx k = {r, sw, s, NULL, 0, fn, ctx, err};
    int rc;

    for (size_t ri = 0; ri < fst->nrules; ri++) {
        const rule *ru = &fst->rules[ri];
        int tech = ru->tech % 1000, ext = ru->tech >= 1000;
        /* p.mfn: the record's, or the one named by an IT+1000 output */
        pydb_posting p = {mfn, ru->id, 0, 0};
        if ((rc = pydb__fst_format(fst, ri, mfn, fields, n, s, err)))
            return rc;
        const uint8_t *o = s->out;
        size_t ol = s->out_len, i = 0;
        k.prefix = NULL;
        k.prefix_len = 0;
        if (ext && ol > 2 && o[0] == '/') {
            /* CISIS IT+1000: the output starts with /MFN/, the record
             * whose postings the keys become */
            size_t j = 1;
            int64_t m = 0;
            while (j < ol && o[j] >= '0' && o[j] <= '9' && m < 1 << 30)
                m = m * 10 + (o[j++] - '0');
            if (j > 1 && j < ol && o[j] == '/' && m >= 1) {
                p.mfn = (int32_t)m;
                i = j + 1;
            }
        }
        if (tech >= 5) {
            tech -= 4;
            if (ol - i >= 2) {
                const uint8_t *c = memchr(o + i + 1, o[i], ol - i - 1);
                if (c) {
                    k.prefix = o + i + 1;
                    k.prefix_len = (size_t)(c - o) - i - 1;
                    i = (size_t)(c - o) + 1;
                }
            }
        }
        /* '%' separates occurrences (OCC + 1, CNT restarts); new lines
         * separate keys (technique 0) and end items and words, CNT goes
         * on [E: pyisis sample cds, (V70/) gives OCC 1, CNT 1, 2, ...] */
        while (i < ol) {
            size_t oe = i;
            int had = 0;
            while (oe < ol && o[oe] != '%') oe++;
            p.cnt = 0;
            while (i < oe) {
                size_t e = i;
                while (e < oe && o[e] != '\n' && o[e] != '\r') e++;
                const uint8_t *t = o + i;
                size_t l = e - i;
                i = e + 1;
                while (l > 0 && t[0] == ' ') t++, l--;
                while (l > 0 && t[l - 1] == ' ') l--;
                if (l == 0) continue;
                if (!had) {
                    p.occ++;
                    had = 1;
                }
                if ((rc = line_keys(&k, tech, t, l, &p))) return rc;
            }
            i = oe + 1;
        }
    }
    return PYDB_OK;
}
