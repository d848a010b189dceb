/*
 * fst_parse.c - parsing an FST text (docs/isis-formats.md §5: one rule per
 * line, "ID TECHNIQUE FORMAT") into the compiled form of fst_int.h:
 * pydb_fst_parse / pydb_fst_free / pydb_fst_count / pydb_fst_rule.
 * The formatting language accepted is described in fst_int.h; anything
 * else is PYDB_EFST with the line (err->offset) and the construct.
 *
 * Depends on: fst_int.h, pydb_int.h (errors).  Knows nothing of records
 * or keys.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fst_int.h"

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

/* Literal delimited by q at pos (pos at the opening q) into *s, pos after
 * the closing q.  A literal must close on its line: one that does not
 * (an unconditional 'abc or `abc, a conditional "abc, a repeatable |abc)
 * is PYDB_EFST at the opening q, naming the kind and the text: taking
 * the rest of the line as the literal would swallow the selectors after
 * it and silently index nothing. */
static int read_lit(parser *p, int q, span *s)
{
    int open = p->pos;
    const char *c = memchr(p->f->text + open + 1, q,
                           (size_t)(p->end - open - 1));
    if (!c) {
        char lit[96], msg[192];
        pydb__quote_bytes(lit, sizeof lit, (const uint8_t *)p->f->text + open,
                          (size_t)(p->end - open), 40);
        snprintf(msg, sizeof msg,
                 "unterminated %s literal %s (no closing %c on the line)",
                 q == '"' ? "conditional" : q == '|' ? "repeatable"
                                                     : "unconditional",
                 lit, q);
        return perr(p, msg);
    }
    s->off = open + 1;
    s->len = (int)(c - p->f->text) - s->off;
    p->pos = (int)(c - p->f->text) + 1;
    return 0;
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
    if (read_int(p, &v) < 0)
        return perr(p, "field selector: tag number expected after 'v'");
    if (v > 65535)
        return perr(p, "field selector: tag above 65535 (a tag is 16 bits)");
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
        if (e < 0 || read_lit(p, c, &p->f->ex[e].str) < 0) return -1;
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
            span s;
            if (read_lit(p, c, &s) < 0) return -1;
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
            if ((n = new_node(p, N_LIT)) < 0 ||
                read_lit(p, c, &p->f->nodes[n].lit) < 0)
                return -1;
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
                span s;
                if (read_lit(p, c, &s) < 0) return -1;
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

void pydb_fst_rule(uint32_t *id, int *technique, const char **format,
                   size_t *format_len, int *line, const pydb_fst *f, size_t i)
{
    const rule *r = &f->rules[i];
    if (id) *id = r->id;
    if (technique) *technique = r->tech;
    if (format) *format = f->text + r->fmt_off;
    if (format_len) *format_len = (size_t)r->fmt_len;
    if (line) *line = r->line;
}

