/*
 * search.c - the CDS/ISIS search language (isis-formats.md §6) over any
 * pydb_index (pydb.h "Inverted index").
 *
 * DESIGN
 *
 * 1. Tokens.  An expression is a byte string in the index's encoding.
 *    Blanks (space, tab, CR, LF) separate tokens.
 *      +  *  ^  ( )         OR, AND, AND NOT, parentheses
 *      (G) (F)               same field, same occurrence (G/F either case)
 *      AND OR WITH           the words, upper case only, as whole tokens:
 *      AND NOT               AND = *, OR = +, WITH = (F), AND NOT = ^
 *                            (formats §6.2 note); a bare NOT is a term
 *      .  $                  proximity: a token made only of '.' (or only
 *                            of '$') and surrounded by blanks; its length
 *                            adds to n, and consecutive tokens add up, so
 *                            `A . . B` = `A .. B` is "near, n = 2" and
 *                            `A $ $ B` = `A $$ B` is "exactly 2 apart"
 *      "..."                 a quoted term: any bytes but '"' (blanks,
 *                            operators, parentheses, a leading '#')
 *      TERM                  any other run of bytes up to a blank, one of
 *                            ( ) + * ^ ", or a qualifier; a term made only
 *                            of '.'/'$' is a proximity token instead
 *      TERM$  "..."$         right truncation: every key starting with the
 *                            key form of TERM (a range scan, no cap)
 *      /(t1,t2,...)          field qualifier, directly after a term, blanks
 *                            allowed before '/' and inside; tags 1..65535
 *    Unquoted terms that start with '#' (CISIS references to earlier
 *    results) are refused: quote them to search for the key.
 *
 * 2. Grammar (recursive descent; precedence of formats §6.2, highest
 *    first; every binary operator is left-associative):
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
 *    error is reported before the index is read.
 *
 * 3. Values.  Every node evaluates to a posting list sorted by (MFN, TAG,
 *    OCC, CNT) without duplicates.  What each operator keeps:
 *      A + B      the union of both lists
 *      A * B      the postings of A and of B whose MFN is in both
 *      A ^ B      the postings of A whose MFN is not in B
 *      A (G) B    the postings of A and of B whose (MFN, TAG) is in both
 *      A (F) B    the postings of A and of B whose (MFN, TAG, OCC) is in both
 *      A .xn B    each posting p of A for which B has a posting q with the
 *                 same (MFN, TAG, OCC) and |CNT(p) - CNT(q)| <= n, and each
 *                 such q of B (order-insensitive, as CISIS b7_prox)
 *      A $xn B    the same with |CNT(p) - CNT(q)| = n
 *    So the MFN set of a result is exactly the boolean combination of the
 *    operands' MFN sets, and positional operators nest: `(A . B) . C`
 *    holds where C is within n words of A or of B where they are near each
 *    other; `(A + B) (F) C` where C shares an occurrence with A or B.
 *    The final answer is the distinct MFNs of the list, minus those whose
 *    XRF entry is not active when a database is given (logically deleted,
 *    physically deleted, never created or above the highest MFN: postings
 *    of such records may remain in an index until it is updated, formats
 *    §6.4 step 4).
 *
 * 4. Capabilities.  (G) and qualifiers need TAG in the postings; (F) TAG
 *    and OCC; proximity TAG, OCC and CNT.  On an index without them (ISIS
 *    LIND, formats §4.7, where CISIS compiles these operators out) they
 *    fail with PYDB_EUNSUPPORTED naming the operator and its position.
 *
 * 5. Cost.  Every operator is one linear merge of two sorted lists; a
 *    truncation collects the keys first (the term callback must not read
 *    postings), then merges the per-key runs pairwise, bottom-up:
 *    O(N log k) for N postings over k keys; a chain of k '+' is merged
 *    the same way.  An operand after an empty left side of *, ^, (G), (F)
 *    or proximity is not evaluated.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "index_int.h"

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

static int syntax(parser *p, size_t pos, const char *fmt, const char *a,
                  const char *b)
{
    return PYDB_ERROR(p->err, PYDB_ESYNTAX, "", (int64_t)pos, fmt, a, b);
}

/* A whole unquoted word equal to `w` at [i, i+n)? */
static int word_is(const parser *p, size_t i, size_t n, const char *w)
{
    return strlen(w) == n && memcmp(p->s + i, w, n) == 0;
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
        while (j < n && s[j] != '"') j++;
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

enum node_kind { N_TERM, N_CHAIN };
enum op { OP_NONE, OP_OR, OP_AND, OP_NOT, OP_G, OP_F, OP_NEAR, OP_EXACT };

typedef struct item {
    int op;            /* how this operand joins the result so far        */
    int n;             /* OP_NEAR/OP_EXACT distance                       */
    struct node *node;
} item;

typedef struct node {
    struct node *next_alloc;
    int kind;
    size_t pos;
    /* N_TERM */
    uint8_t *key;
    size_t key_len;
    int trunc;
    uint32_t *tags;    /* qualifier: sorted tags, or NULL                 */
    size_t ntags;
    /* N_CHAIN */
    item *items;
    size_t nitems, cap;
} node;

static void free_nodes(node *n)
{
    while (n) {
        node *next = n->next_alloc;
        free(n->key);
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

/* The operator at `pos` needs posting fields `need`. */
static int need_caps(parser *p, int need, size_t pos, const char *what)
{
    static const char *const field[] = {"TAG", "OCC", "CNT"};
    int missing = need & ~p->caps;
    if (!missing) return PYDB_OK;
    const char *f = missing & PYDB_POSTING_TAG ? field[0]
                  : missing & PYDB_POSTING_OCC ? field[1] : field[2];
    return PYDB_ERROR(p->err, PYDB_EUNSUPPORTED, "", (int64_t)pos,
                      "%s at byte offset %zu needs the %s of each posting, which "
                      "this %s index does not record (isis-formats.md §4.7)",
                      what, pos, f, kind_name(pydb_index_kind(p->ix)));
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
    size_t cap = t.text_len * 4 + 16, klen = 0;
    n->key = malloc(cap);
    if (!n->key)
        return PYDB_ERROR(p->err, PYDB_ENOMEM, "", -1, "no memory for a key");
    rc = pydb_index_key(p->ix, t.text, t.text_len, n->key, cap, &klen, p->err);
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

/* -------------------------------------------------------------- postings */

typedef pydb_postings plist;

/* Compare postings on their first `level` fields (1 MFN, 2 +TAG, 3 +OCC,
 * 4 +CNT). */
static int pcmp(const pydb_posting *a, const pydb_posting *b, int level)
{
    if (a->mfn != b->mfn) return a->mfn < b->mfn ? -1 : 1;
    if (level < 2) return 0;
    if (a->tag != b->tag) return a->tag < b->tag ? -1 : 1;
    if (level < 3) return 0;
    if (a->occ != b->occ) return a->occ < b->occ ? -1 : 1;
    if (level < 4) return 0;
    if (a->cnt != b->cnt) return a->cnt < b->cnt ? -1 : 1;
    return 0;
}

/* Keep the postings whose TAG is in tags[ntags] (sorted). */
static void pl_filter_tags(pydb_posting *v, size_t *n, const uint32_t *tags,
                           size_t ntags)
{
    size_t o = 0;
    for (size_t i = 0; i < *n; i++)
        if (bsearch(&v[i].tag, tags, ntags, sizeof *tags, cmp_u32))
            v[o++] = v[i];
    *n = o;
}

/* Merge sorted a[na] and b[nb] into out (appending), dropping duplicates. */
static void merge_into(pydb_posting *out, size_t *no, const pydb_posting *a,
                       size_t na, const pydb_posting *b, size_t nb)
{
    size_t i = 0, j = 0, o = *no;
    while (i < na && j < nb) {
        int c = pcmp(&a[i], &b[j], 4);
        if (c < 0) out[o++] = a[i++];
        else if (c > 0) out[o++] = b[j++];
        else { out[o++] = a[i++]; j++; }
    }
    while (i < na) out[o++] = a[i++];
    while (j < nb) out[o++] = b[j++];
    *no = o;
}

/* End of the group of v[i] on `level` fields. */
static size_t group_end(const pydb_posting *v, size_t n, size_t i, int level)
{
    size_t j = i + 1;
    while (j < n && pcmp(&v[i], &v[j], level) == 0) j++;
    return j;
}

typedef struct scratch {
    uint8_t *ma, *mb;    /* proximity match marks                         */
    size_t cap;
} scratch;

static int marks(scratch *s, size_t n, pydb_error *err)
{
    if (n <= s->cap) return PYDB_OK;
    uint8_t *a = realloc(s->ma, n), *b;
    if (!a) goto oom;
    s->ma = a;
    b = realloc(s->mb, n);
    if (!b) goto oom;
    s->mb = b;
    s->cap = n;
    return PYDB_OK;
oom:
    return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for %zu marks", n);
}

/* Mark each a[i] that has a b[j] at CNT distance <= n (exact: == n).
 * Both runs share (MFN, TAG, OCC) and are sorted by CNT. */
static void prox_mark(uint8_t *m, const pydb_posting *a, size_t na,
                      const pydb_posting *b, size_t nb, int64_t n, int exact)
{
    size_t k = 0, k2 = 0;
    for (size_t i = 0; i < na; i++) {
        int64_t c = a[i].cnt;
        m[i] = 0;
        if (!exact) {
            while (k < nb && (int64_t)b[k].cnt < c - n) k++;
            m[i] = k < nb && (int64_t)b[k].cnt <= c + n;
        } else {
            while (k < nb && (int64_t)b[k].cnt < c - n) k++;
            while (k2 < nb && (int64_t)b[k2].cnt < c + n) k2++;
            m[i] = (k < nb && (int64_t)b[k].cnt == c - n) ||
                   (k2 < nb && (int64_t)b[k2].cnt == c + n);
        }
    }
}

/* out = a OP b (a, b sorted and distinct; out sorted and distinct). */
static int combine(plist *out, const plist *a, const plist *b, int op,
                   int dist, scratch *sc, pydb_error *err)
{
    const pydb_posting *A = a->v, *B = b->v;
    size_t na = a->n, nb = b->n, i = 0, j = 0, o = 0;
    int level, rc;

    memset(out, 0, sizeof *out);
    if (op == OP_OR) {
        if ((rc = pydb__postings_reserve(out, na + nb, err))) return rc;
        merge_into(out->v, &o, A, na, B, nb);
        out->n = o;
        return PYDB_OK;
    }
    level = op == OP_AND || op == OP_NOT ? 1 : op == OP_G ? 2 : 3;
    if ((rc = pydb__postings_reserve(out, op == OP_NOT ? na : na + nb,
                                     err)))
        return rc;
    while (i < na && j < nb) {
        int c = pcmp(&A[i], &B[j], level);
        if (c < 0) {
            size_t ie = group_end(A, na, i, level);
            if (op == OP_NOT) {
                memcpy(out->v + o, A + i, (ie - i) * sizeof *A);
                o += ie - i;
            }
            i = ie;
        } else if (c > 0) {
            j = group_end(B, nb, j, level);
        } else {
            size_t ie = group_end(A, na, i, level);
            size_t je = group_end(B, nb, j, level);
            if (op == OP_NEAR || op == OP_EXACT) {
                size_t ka = ie - i, kb = je - j, x = 0, y = 0;
                if ((rc = marks(sc, ka > kb ? ka : kb, err))) return rc;
                prox_mark(sc->ma, A + i, ka, B + j, kb, dist,
                          op == OP_EXACT);
                prox_mark(sc->mb, B + j, kb, A + i, ka, dist,
                          op == OP_EXACT);
                /* merge the marked postings of both runs */
                while (x < ka || y < kb) {
                    while (x < ka && !sc->ma[x]) x++;
                    while (y < kb && !sc->mb[y]) y++;
                    if (x >= ka && y >= kb) break;
                    int d = x >= ka ? 1 : y >= kb ? -1
                          : pcmp(&A[i + x], &B[j + y], 4);
                    if (d <= 0) {
                        out->v[o++] = A[i + x++];
                        if (d == 0) y++;
                    } else {
                        out->v[o++] = B[j + y++];
                    }
                }
            } else if (op != OP_NOT) {
                merge_into(out->v, &o, A + i, ie - i, B + j, je - j);
            }
            i = ie;
            j = je;
        }
    }
    if (op == OP_NOT && i < na) {
        memcpy(out->v + o, A + i, (na - i) * sizeof *A);
        o += na - i;
    }
    out->n = o;
    return PYDB_OK;
}

/* ------------------------------------------------------------ evaluation */

typedef struct eval_ctx {
    pydb_index *ix;
    scratch sc;
    pydb_error *err;
} eval_ctx;

typedef struct key_list {
    uint8_t *arena;
    size_t used, size;
    size_t *off, *len;
    size_t n, cap;
    int oom;
} key_list;

static int collect_key(void *ctx, const uint8_t *key, size_t len,
                       uint64_t count)
{
    key_list *k = ctx;
    (void)count;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        size_t *o = realloc(k->off, cap * sizeof *o), *l;
        if (!o) goto oom;
        k->off = o;
        l = realloc(k->len, cap * sizeof *l);
        if (!l) goto oom;
        k->len = l;
        k->cap = cap;
    }
    if (k->used + len > k->size) {
        size_t size = (k->size + len) * 2 + 256;
        uint8_t *a = realloc(k->arena, size);
        if (!a) goto oom;
        k->arena = a;
        k->size = size;
    }
    if (len) memcpy(k->arena + k->used, key, len);
    k->off[k->n] = k->used;
    k->len[k->n] = len;
    k->used += len;
    k->n++;
    return 0;
oom:
    k->oom = 1;
    return 1;
}

/* l->v holds nruns sorted runs back to back, run r starting at runs[r]
 * (runs[nruns] = l->n; runs has nruns + 1 entries and is overwritten).
 * Merge them pairwise, bottom-up, into one sorted distinct list: O(N log
 * nruns). */
static int merge_runs(plist *l, size_t *runs, size_t nruns, pydb_error *err)
{
    plist tmp = {0};
    int rc;

    runs[nruns] = l->n;
    if (nruns < 2) return PYDB_OK;
    if ((rc = pydb__postings_reserve(&tmp, l->n, err))) return rc;
    while (nruns > 1) {
        size_t o = 0, r, w = 0;
        /* each step reads runs[r..r+2] before writing runs[w], w <= r */
        for (r = 0; r + 1 < nruns; r += 2) {
            size_t s0 = runs[r], s1 = runs[r + 1], e1 = runs[r + 2];
            runs[w++] = o;
            merge_into(tmp.v, &o, l->v + s0, s1 - s0, l->v + s1, e1 - s1);
        }
        if (r < nruns) {   /* odd run out */
            size_t s0 = runs[r], e0 = runs[r + 1];
            runs[w++] = o;
            memcpy(tmp.v + o, l->v + s0, (e0 - s0) * sizeof *tmp.v);
            o += e0 - s0;
        }
        runs[w] = o;
        nruns = w;
        pydb_posting *sw = l->v;
        size_t swcap = l->cap;
        l->v = tmp.v;
        l->cap = tmp.cap;
        l->n = o;
        tmp.v = sw;
        tmp.cap = swcap;
    }
    pydb_postings_free(&tmp);
    return PYDB_OK;
}

/* Postings of one term node (truncation: all keys with the prefix). */
static int eval_term(plist *out, const node *t, eval_ctx *c)
{
    key_list keys = {0};
    size_t *runs = NULL, nruns = 0;
    int rc;

    memset(out, 0, sizeof *out);
    if (!t->trunc) {
        rc = pydb_index_postings(out, c->ix, t->key, t->key_len, c->err);
        if (rc) goto cleanup;
        pydb__postings_normalize(out->v, &out->n, 1);
        if (t->tags) pl_filter_tags(out->v, &out->n, t->tags, t->ntags);
        goto cleanup;
    }
    rc = pydb_index_terms(c->ix, t->key, t->key_len, NULL, 0, collect_key,
                          &keys, c->err);
    if (!rc && keys.oom)
        rc = PYDB_ERROR(c->err, PYDB_ENOMEM, "", -1,
                        "no memory for the keys of a truncated term");
    if (rc) goto cleanup;
    runs = malloc((keys.n + 1) * sizeof *runs);
    if (!runs) {
        rc = PYDB_ERROR(c->err, PYDB_ENOMEM, "", -1, "no memory for runs");
        goto cleanup;
    }
    /* one sorted run per key, back to back in out */
    for (size_t k = 0; k < keys.n; k++) {
        size_t start = out->n;
        rc = pydb_index_postings(out, c->ix, keys.arena + keys.off[k],
                                 keys.len[k], c->err);
        if (rc) goto cleanup;
        size_t n = out->n - start;
        pydb__postings_normalize(out->v + start, &n, 1);
        if (t->tags) pl_filter_tags(out->v + start, &n, t->tags, t->ntags);
        out->n = start + n;
        if (n) runs[nruns++] = start;
    }
    rc = merge_runs(out, runs, nruns, c->err);
cleanup:
    free(keys.arena);
    free(keys.off);
    free(keys.len);
    free(runs);
    if (rc) pydb_postings_free(out);
    return rc;
}

static int eval(plist *out, const node *n, eval_ctx *c);

/* A chain of '+' (a level-0 chain holds nothing else): the operands side
 * by side, then one k-way merge -- not k - 1 growing copies. */
static int eval_or(plist *out, const node *n, eval_ctx *c)
{
    size_t *runs = malloc((n->nitems + 1) * sizeof *runs), nruns = 0;
    plist part = {0};
    int rc = PYDB_OK;

    memset(out, 0, sizeof *out);
    if (!runs)
        return PYDB_ERROR(c->err, PYDB_ENOMEM, "", -1, "no memory for runs");
    for (size_t i = 0; i < n->nitems; i++) {
        if ((rc = eval(&part, n->items[i].node, c))) break;
        if (part.n) {
            if (out->n == 0) {   /* adopt the first list */
                *out = part;
                memset(&part, 0, sizeof part);
                runs[nruns++] = 0;
                continue;
            }
            if ((rc = pydb__postings_reserve(out, out->n + part.n, c->err)))
                break;
            memcpy(out->v + out->n, part.v, part.n * sizeof *part.v);
            runs[nruns++] = out->n;
            out->n += part.n;
        }
        pydb_postings_free(&part);
    }
    if (!rc) rc = merge_runs(out, runs, nruns, c->err);
    pydb_postings_free(&part);
    free(runs);
    if (rc) pydb_postings_free(out);
    return rc;
}

static int eval(plist *out, const node *n, eval_ctx *c)
{
    plist acc = {0}, rhs = {0}, res;
    int rc;

    if (n->kind == N_TERM) return eval_term(out, n, c);
    if (n->items[1].op == OP_OR) return eval_or(out, n, c);
    rc = eval(&acc, n->items[0].node, c);
    for (size_t i = 1; !rc && i < n->nitems; i++) {
        const item *it = &n->items[i];
        if (acc.n == 0 && it->op != OP_OR)
            continue;   /* empty AND/NOT/(G)/(F)/proximity stays empty */
        rc = eval(&rhs, it->node, c);
        if (rc) break;
        rc = combine(&res, &acc, &rhs, it->op, it->n, &c->sc, c->err);
        pydb_postings_free(&rhs);
        if (rc) break;
        pydb_postings_free(&acc);
        acc = res;
    }
    if (rc) {
        pydb_postings_free(&acc);
        return rc;
    }
    *out = acc;
    return PYDB_OK;
}

/* Keep the MFNs of v[*n] (ascending, distinct) whose XRF entry is active.
 * Sparse results look each MFN up; dense ones (at least one candidate per
 * DENSE MFNs of their range) merge with a scan of the active MFNs. */
#define DENSE 16
#define SCAN_BATCH 4096

static int drop_inactive(int32_t *v, size_t *n, pydb_db *db, pydb_error *err)
{
    size_t i = 0, o = 0, cnt = *n;
    int rc;

    if (cnt == 0) return PYDB_OK;
    if ((int64_t)cnt * DENSE < (int64_t)v[cnt - 1] - v[0] + 1) {
        for (i = 0; i < cnt; i++) {
            pydb_xrf_entry x;
            rc = pydb_xrf_get(&x, db, v[i], err);
            if (rc == PYDB_ENOTFOUND) continue;   /* above the highest MFN */
            if (rc) return rc;
            if (x.state == PYDB_XRF_ACTIVE) v[o++] = v[i];
        }
        *n = o;
        return PYDB_OK;
    }
    int32_t *buf = malloc(SCAN_BATCH * sizeof *buf);
    if (!buf)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for a scan");
    rc = PYDB_OK;
    while (i < cnt && v[i] <= pydb_max_mfn(db)) {
        size_t bn = 0, k = 0;
        int32_t next = 0;
        rc = pydb_list_mfns(buf, SCAN_BATCH, &bn, &next, db, v[i], 0, err);
        if (rc) break;
        /* the batch decides every candidate below `next` (> v[i]: the
         * scan stops after a full batch or at the end of the XRF) */
        while (i < cnt && v[i] < next) {
            while (k < bn && buf[k] < v[i]) k++;
            if (k < bn && buf[k] == v[i]) v[o++] = v[i];
            i++;
        }
    }
    free(buf);
    *n = o;
    return rc;
}

/* ---------------------------------------------------------------- public */

int pydb_search(int32_t **mfns, size_t *n, pydb_index *ix, pydb_db *db,
                const char *expr, size_t len, pydb_error *err)
{
    parser p;
    node *root = NULL;
    pydb_index *view = NULL;
    plist l = {0};
    eval_ctx c;
    int32_t *v = NULL;
    size_t o = 0;
    int rc;

    *mfns = NULL;
    *n = 0;
    memset(&p, 0, sizeof p);
    memset(&c, 0, sizeof c);
    if (!ix || (!expr && len))
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "pydb_search: no index or no expression");
    if (len > PYDB_SEARCH_MAX_LEN)
        return PYDB_ERROR(err, PYDB_ESYNTAX, "", PYDB_SEARCH_MAX_LEN,
                          "search expression of %zu bytes is longer than "
                          "the limit of %d bytes", len, PYDB_SEARCH_MAX_LEN);
    p.s = (const uint8_t *)expr;
    p.len = len;
    p.ix = ix;
    p.caps = pydb_index_caps(ix);
    p.err = err;
    if ((rc = lex(&p)) || (rc = parse_expr(&p, &root))) goto cleanup;
    if (p.tok.kind != T_END) {
        char found[200];
        describe(found, sizeof found, &p, &p.tok);
        rc = syntax(&p, p.tok.pos, p.tok.kind == T_RPAR
                    ? "found %s without a matching '('%s"
                    : p.tok.kind == T_QUAL
                    ? "found a %s that does not follow a term%s"
                    : "expected an operator but found %s%s", found, "");
        goto cleanup;
    }
    /* one committed state of an index that commits change */
    if (ix->ops->pin && (rc = ix->ops->pin(ix, &view, err))) goto cleanup;
    c.ix = view ? view : ix;
    c.err = err;
    if ((rc = eval(&l, root, &c))) goto cleanup;
    v = malloc((l.n ? l.n : 1) * sizeof *v);
    if (!v) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory for %zu MFNs",
                        l.n);
        goto cleanup;
    }
    for (size_t i = 0; i < l.n; i++)
        if (!o || v[o - 1] != l.v[i].mfn) v[o++] = l.v[i].mfn;
    if (db && (rc = drop_inactive(v, &o, db, err))) goto cleanup;
    *mfns = v;
    *n = o;
    v = NULL;
cleanup:
    free(v);
    pydb_postings_free(&l);
    if (view) pydb_index_close(view);
    free(c.sc.ma);
    free(c.sc.mb);
    free_nodes(p.nodes);
    return rc;
}
