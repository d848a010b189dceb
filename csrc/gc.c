/*
 * gc.c - SKELETON (issue 11, being written): the collector of a handle.
 * Replaced by the real collector before this lands; see gc.h.
 */
#include "gc.h"
#include <stdlib.h>
#include <string.h>

struct pydb_gc {
    int policy;
};

int pydb_gc_policy_from_name(const char *name)
{
    static const char *names[] = {"none", "background", "cooperative",
                                  "combined"};
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, names[i]) == 0) return i;
    return -1;
}

const char *pydb_gc_policy_name(int policy)
{
    static const char *names[] = {"none", "background", "cooperative",
                                  "combined"};
    return policy >= 0 && policy < 4 ? names[policy] : "?";
}

int pydb__gc_open(pydb_db *db, pydb_error *err)
{
    db->gc = calloc(1, sizeof *db->gc);
    if (!db->gc) return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
    db->gc->policy = PYDB_GC_DEFAULT;
    return PYDB_OK;
}

void pydb__gc_close(pydb_db *db)
{
    free(db->gc);
    db->gc = NULL;
}

void pydb__gc_notify(pydb_db *db) { (void)db; }
void pydb__gc_met(pydb_db *db) { (void)db; }

int pydb_gc_set_policy(pydb_db *db, int policy, pydb_error *err)
{
    if (policy < 0 || policy > 3)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "bad policy %d", policy);
    db->gc->policy = policy;
    return PYDB_OK;
}

int pydb_gc_get_policy(const pydb_db *db) { return db->gc->policy; }
