/*
 * compact.c - SKELETON (issue 11, being written): the master file's
 * collection job; see compact.h.  Replaced before this lands.
 */
#include "compact.h"

void pydb__compact_garbage(pydb_db *db, int64_t *versions, int64_t *bytes)
{
    (void)db;
    *versions = 0;
    *bytes = 0;
}

int pydb__compact_wanted(pydb_db *db, int idle)
{
    (void)db;
    (void)idle;
    return 0;
}

int pydb__compact_step(pydb_db *db, int budget, int lock_ms, int *more,
                       pydb_gc_report *rep, pydb_error *err)
{
    (void)db; (void)budget; (void)lock_ms; (void)rep; (void)err;
    *more = 0;
    return PYDB_OK;
}

void pydb__compact_abort(pydb_db *db) { (void)db; }
