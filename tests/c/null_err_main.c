/*
 * null_err_main.c - calls of the public C API that pass no error detail
 * (err NULL, as pydb.h allows) on the paths that read their own errors:
 *
 *   null_err_main commit DB    50 appends, then no file may grow past
 *                              400,000 bytes (RLIMIT_FSIZE, SIGXFSZ
 *                              ignored) and 200 more are committed with
 *                              pydb_txn_commit(t, NULL): the log that
 *                              cannot grow is emptied by a checkpoint
 *                              (txn.c, log_cannot_grow).  Prints
 *                              "committed N of 200".
 *   null_err_main build DB FST the native index built with skip_damaged
 *                              and err NULL (nidx_build.c, note_damaged).
 *                              Prints "build rc R".
 *
 * Exit status 0 unless a call that must work failed.  Built and run by
 * tests/test_checkpoint.py.
 */
#include "pydb.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int append_one(pydb_db *db, const char *text, pydb_error *err)
{
    pydb_txn *t = NULL;
    pydb_field f = {24, (uint32_t)strlen(text), (const uint8_t *)text};
    int32_t mfn;
    int rc = pydb_txn_begin(&t, db, 10000, err);
    if (rc) return rc;
    rc = pydb_txn_append(&mfn, t, &f, 1, err);
    if (rc) {
        pydb_txn_abort(t);
        return rc;
    }
    return pydb_txn_commit(t, err);   /* err may be NULL */
}

static int commit_mode(const char *path)
{
    pydb_db *db = NULL;
    pydb_error e;
    struct rlimit lim = {400000, RLIM_INFINITY};
    char text[1600];
    int ok = 0;

    if (pydb_create(&db, path, PYDB_LAYOUT_ISIS_PACKED, 0, NULL, &e)) {
        fprintf(stderr, "create: %s\n", e.message);
        return 1;
    }
    memset(text, 'x', 1000);
    text[1000] = '\0';
    for (int i = 0; i < 50; i++)
        if (append_one(db, text, &e)) {
            fprintf(stderr, "append: %s\n", e.message);
            pydb_close(db);
            return 1;
        }
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    memset(text, 'y', 1500);
    text[1500] = '\0';
    for (int i = 0; i < 200; i++) ok += append_one(db, text, NULL) == PYDB_OK;
    pydb_close(db);
    printf("committed %d of 200\n", ok);
    return 0;
}

static int build_mode(const char *path, const char *fst_path)
{
    pydb_fst *fst = NULL;
    pydb_nidx_options opt;
    pydb_error e;
    char text[65536];
    size_t n;
    FILE *f = fopen(fst_path, "rb");
    int rc;

    if (!f) return 1;
    n = fread(text, 1, sizeof text, f);
    fclose(f);
    if (pydb_fst_parse(&fst, text, n, fst_path, &e)) {
        fprintf(stderr, "fst: %s\n", e.message);
        return 1;
    }
    memset(&opt, 0, sizeof opt);
    opt.keys = 1;   /* ANSI: odds is Latin-1 */
    opt.skip_damaged = 1;
    rc = pydb_native_index_build(path, fst, &opt, NULL, NULL, NULL);
    pydb_fst_free(fst);
    printf("build rc %d\n", rc);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "commit") == 0) return commit_mode(argv[2]);
    if (argc == 4 && strcmp(argv[1], "build") == 0)
        return build_mode(argv[2], argv[3]);
    fprintf(stderr, "usage: null_err_main commit DB | build DB FST\n");
    return 2;
}
