/*
 * check_main.c - the validator through the public C API alone (no
 * Python): `check_main DB [STOP_AFTER]` prints one line per fault
 * ("severity kind mfn offset path"), then "errors=E warnings=W versions=V
 * orphans=O".  With STOP_AFTER = n > 0 the callback stops the walk at the
 * n-th fault.  Exit status: 0 sound, 1 errors, 2 cannot open / usage.
 * Built and run by tests/test_check.py.
 */
#include "pydb.h"
#include <stdio.h>
#include <stdlib.h>

struct ctx {
    long seen, stop_after;
};

static int on_problem(void *vctx, const pydb_check_problem *p)
{
    struct ctx *c = vctx;
    printf("%s %s %d %lld %s\n",
           p->severity == PYDB_CHECK_ERROR ? "error" : "warning", p->name,
           (int)p->mfn, (long long)p->offset, p->path);
    c->seen++;
    return c->stop_after > 0 && c->seen >= c->stop_after;
}

int main(int argc, char **argv)
{
    pydb_db *db = NULL;
    pydb_error err;
    pydb_check_summary sum;
    struct ctx c = {0, 0};
    int rc;

    if (argc < 2) {
        fprintf(stderr, "usage: check_main DB [STOP_AFTER]\n");
        return 2;
    }
    if (argc > 2) c.stop_after = atol(argv[2]);
    rc = pydb_open(&db, argv[1], NULL, &err);
    if (rc) {
        fprintf(stderr, "cannot open: %s\n", err.message);
        return 2;
    }
    rc = pydb_check(&sum, db, on_problem, &c, &err);
    pydb_close(db);
    if (rc) {
        fprintf(stderr, "check failed: %s\n", err.message);
        return 2;
    }
    printf("errors=%lld warnings=%lld versions=%lld orphans=%lld "
           "stopped=%d\n", (long long)sum.errors, (long long)sum.warnings,
           (long long)sum.versions, (long long)sum.orphans, sum.stopped);
    return sum.errors ? 1 : 0;
}
