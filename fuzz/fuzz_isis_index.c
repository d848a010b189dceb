/*
 * fuzz_isis_index.c - libFuzzer target: the ISIS inverted file
 * (csrc/isis_open.c, isis_read.c): the .cnt control file, the B*-tree
 * node files .n01/.n02, the classic leaves and postings .l01/.l02/.ifp
 * and the LIND set .ly1/.ly2/.iyp, with the detection that chooses
 * between them.
 *
 * Input: the files in the order of `names` below, joined by FUZZ_SEP (an
 * empty part: no such file).  The index is opened, described, every key
 * enumerated (the first 2000), the postings of the keys read, a key
 * brought into key form and a prefix search evaluated.  Errors are fine
 * when they name themselves; crashes, leaks, hangs and reads out of
 * bounds are findings.
 *
 * Depends on: pydb.h.
 */
#include "fuzz.h"
#include "pydb.h"
#include <stdlib.h>
#include <string.h>

#define MAX_KEYS 2000

static const char *const names[] = {"db.cnt", "db.n01", "db.n02", "db.l01",
                                    "db.l02", "db.ifp", "db.ly1", "db.ly2",
                                    "db.iyp"};
#define NFILES (sizeof names / sizeof names[0])

typedef struct key_list {
    uint8_t keys[MAX_KEYS][64];
    size_t len[MAX_KEYS];
    size_t n;
} key_list;

static key_list kl;

static int on_term(void *ctx, const uint8_t *key, size_t len, uint64_t count)
{
    key_list *k = ctx;
    volatile uint8_t h = 0;
    (void)count;
    for (size_t i = 0; i < len; i++) h ^= key[i];   /* inside the key */
    if (k->n < MAX_KEYS) {
        size_t l = len < sizeof k->keys[0] ? len : sizeof k->keys[0];
        memcpy(k->keys[k->n], key, l);
        k->len[k->n] = l;
    }
    k->n++;
    return k->n >= MAX_KEYS;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part part[NFILES];
    pydb_isis_index_info info;
    pydb_postings post = {0};
    pydb_index *ix = NULL;
    pydb_error err;
    int32_t *mfns = NULL;
    uint8_t key[64];
    size_t n = 0, klen = 0;
    char path[512];
    int rc;

    fuzz_split(part, NFILES, data, size);
    fuzz_clear();
    fuzz_write_parts(names, part, NFILES);
    fuzz_path(path, sizeof path, "db");
    memset(&err, 0, sizeof err);
    /* the built-in key table: one of the four, from the input's size */
    rc = pydb_isis_index_open(&ix, path, (int)(size % 4), &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) {
        if (ix != NULL) abort();
        return 0;
    }
    if (pydb_isis_index_describe(&info, ix) != PYDB_OK) abort();
    kl.n = 0;
    rc = pydb_index_terms(ix, NULL, 0, NULL, 0, on_term, &kl, &err);
    fuzz_expect(rc, &err);
    for (size_t i = 0; i < kl.n && i < MAX_KEYS; i++) {
        rc = pydb_index_postings(&post, ix, kl.keys[i], kl.len[i], &err);
        fuzz_expect(rc, &err);
        if (post.n > 100000) pydb_postings_free(&post);
    }
    pydb_postings_free(&post);
    if (kl.n > 0) {   /* the terms that start with the first key's byte */
        kl.n = 0;
        rc = pydb_index_terms(ix, kl.keys[0], kl.len[0] ? 1 : 0, NULL, 0,
                              on_term, &kl, &err);
        fuzz_expect(rc, &err);
    }
    rc = pydb_index_key(key, sizeof key, &klen, ix, (const uint8_t *)"water",
                        5, &err);
    fuzz_expect(rc, &err);
    rc = pydb_search(&mfns, &n, ix, NULL, "A$ + WATER", 10, &err);
    fuzz_expect(rc, &err);
    free(mfns);
    pydb_index_close(ix);
    return 0;
}
