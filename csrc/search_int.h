/*
 * search_int.h - the parsed form of a CDS/ISIS search expression, shared
 * by the parser (search_parse.c) and the evaluator (search_eval.c).
 * Not installed.
 *
 * A tree of nodes: a term (key form, truncation, field qualifier) or a
 * chain of one precedence level (operands joined left to right by one
 * of the operators of that level).  Every node is also on the
 * allocation list (next_alloc), which frees the whole tree.
 *
 * Depends on: index_int.h.
 */
#ifndef PYDB_SEARCH_INT_H
#define PYDB_SEARCH_INT_H

#include "index_int.h"

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
    size_t key_len, key_cap;
    uint8_t *text;     /* the term as written (quotes and '""' undone)   */
    size_t text_len;
    int trunc;
    uint32_t *tags;    /* qualifier: sorted tags, or NULL                 */
    size_t ntags;
    /* N_CHAIN */
    item *items;
    size_t nitems, cap;
} node;

/* Parse expr[len] for index ix (terms are brought into key form, and
 * operators checked against its capabilities) into *root; *nodes gets
 * the allocation list (pydb__search_free it, also on error).
 * PYDB_ESYNTAX / PYDB_EUNSUPPORTED with the byte position. */
int pydb__search_parse(node **root, node **nodes, pydb_index *ix,
                       const uint8_t *expr, size_t len, pydb_error *err);
/* Free a tree by its allocation list (NULL is ignored). */
void pydb__search_free(node *nodes);

#endif
