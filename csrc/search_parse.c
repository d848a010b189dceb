/*
 * search_parse.c - the lexer and parser of the CDS/ISIS search language
 * (docs/isis-formats.md §6): an expression in the index's encoding becomes
 * the tree of search_int.h, with every term in key form.  The evaluator
 * is search_eval.c.
 *
 * DESIGN (sections 3 and 5 -- values, cost -- are in search_eval.c)
 *
 * 1. Tokens.  An expression is a byte string in the index's encoding.
 *    Blanks (space, tab, CR, LF) separate tokens.
 *      +  *  ^  ( )         OR, AND, AND NOT, parentheses
 *      (G) (F)               same field, same occurrence (G/F either case)
 *      AND OR WITH           the words, in any case (and, And: CISIS
 *      AND NOT               cib71.c), as whole tokens: AND = *, OR = +,
 *                            WITH = (F), AND NOT = ^ (docs/isis-formats.md
 *                            §6.2 note); a bare NOT is a term
 *      .  $                  proximity: a token made only of '.' (or only
 *                            of '$') and surrounded by blanks; its length
 *                            adds to n, and consecutive tokens add up, so
 *                            `A . . B` = `A .. B` is "near, n = 2" and
 *                            `A $ $ B` = `A $$ B` is "exactly 2 apart"
 *      "..."                 a quoted term: any bytes (blanks,
 *                            operators, parentheses, a leading '#'); a
 *                            '"' of the key is written '""' (a pydb
 *                            extension: CISIS has no way to quote one)
 *      TERM                  any other run of bytes up to a blank, one of
 *                            ( ) + * ^ ", or a qualifier; a term made only
 *                            of '.'/'$' is a proximity token instead
 *      TERM$  "...$" "..."$  right truncation: every key starting with the
 *                            key form of TERM (a range scan, no cap); a
 *                            '$' that ends a quoted term truncates it, as
 *                            in CISIS (cib72.c), so a key ending in '$'
 *                            cannot be searched whole
 *      /(t1,t2,...)          field qualifier, directly after a term, blanks
 *                            allowed before '/' and inside; tags 1..65535
 *    Unquoted terms that start with '#' (CISIS references to earlier
 *    results) are refused: quote them to search for the key.
 *
 * 2. Grammar (recursive descent; precedence of docs/isis-formats.md
 *    §6.2, highest first; every binary operator is left-associative):
 *      expr  := and  { '+' and }
 *      and   := g    { ('*' | '^') g }
 *      g     := f    { '(G)' f }
 *      f     := prox { '(F)' prox }
 *      prox  := prim { ('.'xn | '$'xn) prim }
 *      prim  := TERM [qualifier] | '(' expr ')'
 *    A chain of one level is one node with a list of operands (evaluated
 *    left to right), so the depth of the tree -- and of the recursion in
 *    the parser and the evaluator -- is bounded by the parenthesis
 *    nesting, itself limited to PYDB_SEARCH_MAX_DEPTH; the expression is
 *    limited to PYDB_SEARCH_MAX_LEN bytes.  Terms are brought into key
 *    form (pydb_index_key) while parsing, so every syntax and capability
 *    error is reported before the index is read.  Once the whole
 *    expression has parsed, each whole (untruncated) term is looked up
 *    as given when the index holds exactly that key
 *    (pydb_index_lookup_key: keys stored in mixed case or by another
 *    table stay reachable); else its key form stands.
 *
 * 4. Capabilities.  (G) and qualifiers need TAG in the postings; (F) TAG
 *    and OCC; proximity TAG, OCC and CNT.  On an index without them (ISIS
 *    LIND, docs/isis-formats.md §4.7, where CISIS compiles these
 *    operators out) they fail with PYDB_EUNSUPPORTED naming the first such
 *    operator and its position, once the whole expression has parsed: a
 *    syntax error anywhere in it is reported instead.
 *
 *
 * Depends on: search_int.h, index_int.h (pydb_index_key, capabilities).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "search_int.h"

/* ------------------------------------------------------------------ lexer */

enum tok_kind {
    T_END, T_TERM, T_LPAR, T_RPAR, T_OR, T_AND, T_NOT, T_G, T_F,
    T_NEAR, T_EXACT, T_QUAL
};

typedef struct token {
    int kind;
    size_t pos;            /* byte offset of the token's first byte        */
    size_t end;            /* offset just past it                          */
    const uint8_t *text;   /* term text (inside the quotes if quoted)      */
    size_t text_len;
    int quoted, trunc;
    int escaped;           /* quoted text holds '""' (one '"' each)        */
    int n;                 /* T_NEAR/T_EXACT: number of '.'/'$'            */
} token;

typedef struct parser {
    const uint8_t *s;
    size_t len, at;        /* input and the lexer's position               */
    token tok;             /* current (lookahead) token                    */
    pydb_index *ix;
    int caps;
    int depth;
    struct node *nodes;    /* every node allocated, for freeing            */
    pydb_error *err;
    int unsupported;       /* need_caps found an operator the index lacks */
    pydb_error first_unsupported;   /* ... the first one's error        */
} parser;

static int is_blank(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int ends_term(uint8_t c)
{
    return is_blank(c) || c == '(' || c == ')' || c == '+' || c == '*' ||
           c == '^' || c == '"';
}

/* Does a field qualifier '/' [blanks] '(' start at offset i? */
static int qualifier_at(const parser *p, size_t i)
{
    if (i >= p->len || p->s[i] != '/') return 0;
    for (i++; i < p->len && is_blank(p->s[i]); i++) {}
    return i < p->len && p->s[i] == '(';
}

/* A printable rendering of bytes for messages: ASCII as is, others \xNN;
 * at most `max` input bytes, then "...". */
static void render(char *out, size_t cap, const uint8_t *b, size_t n,
                   size_t max)
{
    size_t o = 0;
    for (size_t i = 0; i < n && i < max && o + 5 < cap; i++) {
        uint8_t c = b[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out[o++] = (char)c;
        } else {
            static const char hex[] = "0123456789abcdef";
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (n > max && o + 4 < cap) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = 0;
}

/* Words for the token, for "expected X but found Y" messages. */
static void describe(char *out, size_t cap, const parser *p, const token *t)
{
    static const char *const names[] = {
        "the end of the expression", "", "'('", "')'", "'+'", "'*'", "'^'",
        "'(G)'", "'(F)'", "proximity operator", "proximity operator",
        "field qualifier"};
    if (t->kind == T_TERM) {
        char r[160];
        render(r, sizeof r, p->s + t->pos, t->end - t->pos, 40);
        snprintf(out, cap, "term '%s'", r);
    } else if (t->kind == T_OR || t->kind == T_AND || t->kind == T_NOT ||
               t->kind == T_F) {
        char r[40];
        render(r, sizeof r, p->s + t->pos, t->end - t->pos, 16);
        snprintf(out, cap, "'%s'", r);
    } else {
        snprintf(out, cap, "%s", names[t->kind]);
    }
}

/* "'c'" for the byte at i, or "the end of the expression". */
static void quote_byte(char *out, size_t cap, const parser *p, size_t i)
{
    char r[8];
    if (i >= p->len) {
        snprintf(out, cap, "the end of the expression");
        return;
    }
    render(r, sizeof r, p->s + i, 1, 1);
    snprintf(out, cap, "'%s'", r);
}

/* Report a syntax error at byte `pos`; `fmt` is a printf format taking
 * the message's arguments (callers pass literals, which the format
 * attribute lets the compiler check). */
__attribute__((format(printf, 3, 4)))
static int syntax(parser *p, size_t pos, const char *fmt, ...)
{
    char msg[sizeof p->err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return PYDB_ERROR(p->err, PYDB_ESYNTAX, "", (int64_t)pos, "%s", msg);
}

/* A whole unquoted word equal to `w` (upper case) at [i, i+n), in any
 * case, as CISIS's gettoken compares the operator words (cib71.c)? */
static int word_is(const parser *p, size_t i, size_t n, const char *w)
{
    if (strlen(w) != n) return 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t c = p->s[i + k];
        if (c >= 'a' && c <= 'z') c = (uint8_t)(c - 'a' + 'A');
        if (c != (uint8_t)w[k]) return 0;
    }
    return 1;
}

/* Read the next token into p->tok. */
static int lex(parser *p)
{
    token *t = &p->tok;
    const uint8_t *s = p->s;
    size_t i = p->at, n = p->len;

    while (i < n && is_blank(s[i])) i++;
    memset(t, 0, sizeof *t);
    t->pos = i;
    if (i >= n) {
        t->kind = T_END;
        t->end = p->at = n;
        return PYDB_OK;
    }
    switch (s[i]) {
    case '(':
        if (i + 2 < n && s[i + 2] == ')' &&
            (s[i + 1] == 'G' || s[i + 1] == 'g' || s[i + 1] == 'F' ||
             s[i + 1] == 'f')) {
            t->kind = (s[i + 1] == 'G' || s[i + 1] == 'g') ? T_G : T_F;
            t->end = p->at = i + 3;
            return PYDB_OK;
        }
        t->kind = T_LPAR;
        t->end = p->at = i + 1;
        return PYDB_OK;
    case ')': t->kind = T_RPAR; t->end = p->at = i + 1; return PYDB_OK;
    case '+': t->kind = T_OR; t->end = p->at = i + 1; return PYDB_OK;
    case '*': t->kind = T_AND; t->end = p->at = i + 1; return PYDB_OK;
    case '^': t->kind = T_NOT; t->end = p->at = i + 1; return PYDB_OK;
    case '/':
        if (qualifier_at(p, i)) {
            t->kind = T_QUAL;
            t->end = p->at = i + 1;
            return PYDB_OK;
        }
        break;
    case '"': {
        size_t j = i + 1;
        for (; j < n; j++) {
            if (s[j] != '"') continue;
            if (j + 1 < n && s[j + 1] == '"') {
                t->escaped = 1;   /* '""' inside: one '"' of the key */
                j++;
                continue;
            }
            break;
        }
        if (j >= n)
            return syntax(p, i, "unterminated quoted term: expected a "
                          "closing '\"'%s%s", "", "");
        if (j == i + 1)
            return syntax(p, i, "empty quoted term: expected a key "
                          "between the quotes%s%s", "", "");
        t->kind = T_TERM;
        t->quoted = 1;
        t->text = s + i + 1;
        t->text_len = j - i - 1;
        if (t->text[t->text_len - 1] == '$') {
            /* "TERM$": truncation, as CISIS reads a '$' that ends the
             * term inside its quotes (cib72.c b7_run); the only way to
             * truncate a key that holds blanks there */
            t->trunc = 1;
            if (--t->text_len == 0)
                return syntax(p, i, "empty quoted term: expected a key "
                              "before the '$'%s%s", "", "");
        }
        j++;
        if (j < n && s[j] == '$') {
            t->trunc = 1;
            j++;
        }
        if (j < n && !ends_term(s[j]) && !qualifier_at(p, j))
            return syntax(p, j, "expected a blank, an operator or a field "
                          "qualifier after a quoted term%s%s", "", "");
        t->end = p->at = j;
        return PYDB_OK;
    }
    default:
        break;
    }
    /* An unquoted run. */
    size_t j = i;
    while (j < n && !ends_term(s[j]) && !qualifier_at(p, j)) j++;
    size_t dots = 0, dollars = 0;
    for (size_t k = i; k < j; k++) {
        if (s[k] == '.') dots++;
        else if (s[k] == '$') dollars++;
    }
    t->end = p->at = j;
    if (dots + dollars == j - i) {
        /* proximity operator: must be surrounded by blanks */
        if (dots && dollars)
            return syntax(p, i, "a proximity operator is made of '.' or of "
                          "'$', not both%s%s", "", "");
        if ((i > 0 && !is_blank(s[i - 1])) || (j < n && !is_blank(s[j])))
            return syntax(p, i, "proximity operator '%s' must be surrounded "
                          "by blanks%s", dots ? "." : "$", "");
        t->kind = dots ? T_NEAR : T_EXACT;
        t->n = (int)(j - i);
        return PYDB_OK;
    }
    if (word_is(p, i, j - i, "AND")) {
        /* AND NOT = ^ */
        size_t k = j;
        while (k < n && is_blank(s[k])) k++;
        size_t e = k;
        while (e < n && !ends_term(s[e]) && !qualifier_at(p, e)) e++;
        if (k > j && word_is(p, k, e - k, "NOT")) {
            t->kind = T_NOT;
            t->end = p->at = e;
        } else {
            t->kind = T_AND;
        }
        return PYDB_OK;
    }
    if (word_is(p, i, j - i, "OR")) {
        t->kind = T_OR;
        return PYDB_OK;
    }
    if (word_is(p, i, j - i, "WITH")) {
        t->kind = T_F;
        return PYDB_OK;
    }
    if (s[i] == '#')
        return syntax(p, i, "references to earlier results ('#n') are not "
                      "supported: quote a term that starts with '#'%s%s",
                      "", "");
    t->kind = T_TERM;
    t->text = s + i;
    t->text_len = j - i;
    if (s[j - 1] == '$') {
        t->trunc = 1;
        t->text_len--;
    }
    return PYDB_OK;
}

/* ------------------------------------------------------------------- tree */

static void free_nodes(node *n)
{
    while (n) {
        node *next = n->next_alloc;
        free(n->key);
        free(n->text);
        free(n->tags);
        free(n->items);
        free(n);
        n = next;
    }
}

static node *new_node(parser *p, int kind, size_t pos)
{
    node *n = calloc(1, sizeof *n);
    if (!n) {
        PYDB_ERROR(p->err, PYDB_ENOMEM, "", -1, "no memory for a search node");
        return NULL;
    }
    n->kind = kind;
    n->pos = pos;
    n->next_alloc = p->nodes;
    p->nodes = n;
    return n;
}

static int chain_push(parser *p, node *c, int op, int dist, node *operand)
{
    if (c->nitems == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        item *v = realloc(c->items, cap * sizeof *v);
        if (!v)
            return PYDB_ERROR(p->err, PYDB_ENOMEM, "", -1,
                              "no memory for a search node");
        c->items = v;
        c->cap = cap;
    }
    c->items[c->nitems].op = op;
    c->items[c->nitems].n = dist;
    c->items[c->nitems].node = operand;
    c->nitems++;
    return PYDB_OK;
}

static const char *kind_name(int kind)
{
    switch (kind) {
    case PYDB_INDEX_NATIVE: return "native";
    case PYDB_INDEX_ISIS_CLASSIC: return "ISIS classic";
    case PYDB_INDEX_ISIS_LIND: return "ISIS LIND";
    case PYDB_INDEX_MEMORY: return "in-memory";
    default: return "unknown";
    }
}

/* Note the first operator the index cannot evaluate (`what` at `pos`
 * needs the posting fields `need`): reported once the whole expression
 * parsed (pydb__search_parse), so that a syntax error after it, the
 * expression's own fault, is the one reported.  Always PYDB_OK. */
static int need_caps(parser *p, int need, size_t pos, const char *what)
{
    static const char *const field[] = {"TAG", "OCC", "CNT"};
    int missing = need & ~p->caps;
    if (!missing || p->unsupported) return PYDB_OK;
    const char *f = missing & PYDB_POSTING_TAG ? field[0]
                  : missing & PYDB_POSTING_OCC ? field[1] : field[2];
    p->unsupported = 1;
    (void)PYDB_ERROR(&p->first_unsupported, PYDB_EUNSUPPORTED, "", (int64_t)pos,
                     "%s at byte offset %zu needs the %s of each posting, which "
                     "this %s index does not record (docs/isis-formats.md §4.7)",
                     what, pos, f, kind_name(pydb_index_kind(p->ix)));
    return PYDB_OK;
}

static int parse_expr(parser *p, node **out);

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Qualifier after a term: p->tok is T_QUAL; reads through ')'. */
static int parse_qualifier(parser *p, node *term)
{
    const uint8_t *s = p->s;
    size_t i = p->tok.pos + 1, cap = 0;
    int rc = need_caps(p, PYDB_POSTING_TAG, p->tok.pos, "a field qualifier");
    if (rc) return rc;
    while (i < p->len && is_blank(s[i])) i++;
    i++;   /* '(' (qualifier_at checked it) */
    for (;;) {
        while (i < p->len && is_blank(s[i])) i++;
        if (i >= p->len || s[i] < '0' || s[i] > '9') {
            char found[64];
            quote_byte(found, sizeof found, p, i);
            return syntax(p, i, "expected a tag number in the field "
                          "qualifier but found %s%s", found, "");
        }
        size_t start = i;
        uint64_t v = 0;
        while (i < p->len && s[i] >= '0' && s[i] <= '9') {
            v = v * 10 + (uint64_t)(s[i] - '0');
            if (v > 65535) break;
            i++;
        }
        if (v < 1 || v > 65535)
            return syntax(p, start, "tag in a field qualifier must be "
                          "1..65535%s%s", "", "");
        if (term->ntags == cap) {
            cap = cap ? cap * 2 : 4;
            uint32_t *t = realloc(term->tags, cap * sizeof *t);
            if (!t)
                return PYDB_ERROR(p->err, PYDB_ENOMEM, "", -1,
                                  "no memory for a field qualifier");
            term->tags = t;
        }
        term->tags[term->ntags++] = (uint32_t)v;
        while (i < p->len && is_blank(s[i])) i++;
        if (i < p->len && s[i] == ',') {
            i++;
            continue;
        }
        if (i < p->len && s[i] == ')') {
            i++;
            break;
        }
        char found[64];
        quote_byte(found, sizeof found, p, i);
        return syntax(p, i, "expected ',' or ')' in the field qualifier "
                      "but found %s%s", found, "");
    }
    qsort(term->tags, term->ntags, sizeof *term->tags, cmp_u32);
    p->at = i;
    return lex(p);
}

static int parse_primary(parser *p, node **out)
{
    token t = p->tok;
    int rc;
    char found[200];

    if (t.kind == T_LPAR) {
        if (++p->depth > PYDB_SEARCH_MAX_DEPTH)
            return PYDB_ERROR(p->err, PYDB_ESYNTAX, "", (int64_t)t.pos,
                              "parentheses nested deeper than %d levels",
                              PYDB_SEARCH_MAX_DEPTH);
        if ((rc = lex(p)) || (rc = parse_expr(p, out))) return rc;
        if (p->tok.kind != T_RPAR) {
            char open[32];
            snprintf(open, sizeof open, "%zu", t.pos);
            describe(found, sizeof found, p, &p->tok);
            return syntax(p, p->tok.pos, "expected an operator or ')' "
                          "closing the '(' at position %s but found %s",
                          open, found);
        }
        p->depth--;
        rc = lex(p);
        if (!rc && p->tok.kind == T_QUAL)
            return syntax(p, p->tok.pos, "a field qualifier may only follow "
                          "a term, not '(...)'%s%s", "", "");
        return rc;
    }
    if (t.kind != T_TERM) {
        describe(found, sizeof found, p, &t);
        return syntax(p, t.pos, "expected a term or '(' but found %s%s",
                      found, "");
    }
    node *n = new_node(p, N_TERM, t.pos);
    if (!n) return PYDB_ENOMEM;
    size_t cap = t.text_len * 4 + 16, klen = 0, tl = t.text_len;
    n->key = malloc(cap);
    n->text = malloc(tl ? tl : 1);
    if (!n->key || !n->text)
        return PYDB_ERROR(p->err, PYDB_ENOMEM, "", -1, "no memory for a key");
    n->key_cap = cap;
    if (t.escaped) {   /* '""' -> '"' */
        size_t o = 0;
        for (size_t k = 0; k < tl; k++) {
            n->text[o++] = t.text[k];
            if (t.text[k] == '"') k++;
        }
        tl = o;
    } else {
        memcpy(n->text, t.text, tl);
    }
    n->text_len = tl;
    rc = pydb_index_key(n->key, cap, &klen, p->ix, n->text, tl, p->err);
    if (rc) return rc;
    if (klen == 0)
        return syntax(p, t.pos, "the term has no key form (nothing left "
                      "after normalisation)%s%s", "", "");
    n->key_len = klen;
    n->trunc = t.trunc;
    *out = n;
    if ((rc = lex(p))) return rc;
    if (p->tok.kind == T_QUAL) return parse_qualifier(p, n);
    return PYDB_OK;
}

/* One precedence level: operand { op operand }.  level 0 = '+', 1 = '*'
 * and '^', 2 = (G), 3 = (F), 4 = proximity. */
static int parse_level(parser *p, int level, node **out)
{
    node *first = NULL, *chain = NULL;
    int rc = level == 4 ? parse_primary(p, &first)
                        : parse_level(p, level + 1, &first);
    if (rc) return rc;
    for (;;) {
        token t = p->tok;
        int op = OP_NONE, dist = 0;
        switch (level) {
        case 0: if (t.kind == T_OR) op = OP_OR; break;
        case 1:
            if (t.kind == T_AND) op = OP_AND;
            else if (t.kind == T_NOT) op = OP_NOT;
            break;
        case 2: if (t.kind == T_G) op = OP_G; break;
        case 3: if (t.kind == T_F) op = OP_F; break;
        case 4:
            if (t.kind == T_NEAR || t.kind == T_EXACT) {
                op = t.kind == T_NEAR ? OP_NEAR : OP_EXACT;
                dist = t.n;
            }
            break;
        }
        if (op == OP_NONE) break;
        if (op == OP_G)
            rc = need_caps(p, PYDB_POSTING_TAG, t.pos, "'(G)'");
        else if (op == OP_F)
            rc = need_caps(p, PYDB_POSTING_TAG | PYDB_POSTING_OCC, t.pos,
                           "'(F)'");
        else if (op == OP_NEAR || op == OP_EXACT)
            rc = need_caps(p, PYDB_POSTING_TAG | PYDB_POSTING_OCC |
                           PYDB_POSTING_CNT, t.pos,
                           op == OP_NEAR ? "proximity '.'" : "proximity '$'");
        if (rc) return rc;
        if ((rc = lex(p))) return rc;
        /* repeated proximity tokens add up: A . . B */
        while (level == 4 && (p->tok.kind == T_NEAR ||
                              p->tok.kind == T_EXACT)) {
            if ((p->tok.kind == T_NEAR) != (op == OP_NEAR))
                return syntax(p, p->tok.pos, "a proximity operator is made "
                              "of '.' or of '$', not both%s%s", "", "");
            if (dist > PYDB_SEARCH_MAX_LEN)
                return syntax(p, p->tok.pos, "proximity distance too "
                              "large%s%s", "", "");
            dist += p->tok.n;
            if ((rc = lex(p))) return rc;
        }
        node *rhs = NULL;
        rc = level == 4 ? parse_primary(p, &rhs)
                        : parse_level(p, level + 1, &rhs);
        if (rc) return rc;
        if (!chain) {
            chain = new_node(p, N_CHAIN, first->pos);
            if (!chain) return PYDB_ENOMEM;
            if ((rc = chain_push(p, chain, OP_NONE, 0, first))) return rc;
        }
        if ((rc = chain_push(p, chain, op, dist, rhs))) return rc;
    }
    *out = chain ? chain : first;
    return PYDB_OK;
}

static int parse_expr(parser *p, node **out)
{
    return parse_level(p, 0, out);
}

int pydb__search_parse(node **root, node **nodes, pydb_index *ix,
                       const uint8_t *expr, size_t len, pydb_error *err)
{
    parser p;
    int rc;

    *root = NULL;
    memset(&p, 0, sizeof p);
    p.s = expr;
    p.len = len;
    p.ix = ix;
    p.caps = pydb_index_caps(ix);
    p.err = err;
    if ((rc = lex(&p)) || (rc = parse_expr(&p, root))) goto cleanup;
    if (p.tok.kind != T_END) {
        char found[200];
        describe(found, sizeof found, &p, &p.tok);
        rc = syntax(&p, p.tok.pos, p.tok.kind == T_RPAR
                    ? "found %s without a matching '('%s"
                    : p.tok.kind == T_QUAL
                    ? "found a %s that does not follow a term%s"
                    : "expected an operator but found %s%s", found, "");
    }
    if (!rc && p.unsupported) {
        if (err) *err = p.first_unsupported;
        rc = PYDB_EUNSUPPORTED;
    }
    /* the whole expression parsed: whole terms are looked up as stored
     * when the index holds them so (this reads the index) */
    for (node *n = p.nodes; !rc && n; n = n->next_alloc) {
        if (n->kind != N_TERM || n->trunc) continue;
        rc = pydb_index_lookup_key(n->key, n->key_cap, &n->key_len, ix,
                                   n->text, n->text_len, err);
    }
cleanup:
    *nodes = p.nodes;
    if (rc) *root = NULL;
    return rc;
}

void pydb__search_free(node *nodes)
{
    free_nodes(nodes);
}
