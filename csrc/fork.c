/*
 * fork.c - the process's pthread_atfork() handlers: the parts of the
 * modules that own locks, run in order of rank (fork.h).
 *
 * The table of parts is guarded by `parts_mutex`, which the prepare
 * handler takes first and the parent and child handlers release last,
 * so that no part joins while a fork() runs the table.
 *
 * Depends on: util.h (PYDB_ASSERT).
 */
#include "fork.h"
#include "util.h"
#include <pthread.h>

static pthread_mutex_t parts_mutex = PTHREAD_MUTEX_INITIALIZER;
static const pydb_fork_part *parts[PYDB_FORK_PARTS];   /* by rank */
static int nparts;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void on_prepare(void)
{
    pthread_mutex_lock(&parts_mutex);
    for (int i = 0; i < nparts; i++) parts[i]->prepare();
}

static void on_parent(void)
{
    for (int i = nparts; i-- > 0;) parts[i]->parent();
    pthread_mutex_unlock(&parts_mutex);
}

static void on_child(void)
{
    for (int i = nparts; i-- > 0;) parts[i]->child();
    pthread_mutex_unlock(&parts_mutex);
}

static void install(void)
{
    pthread_atfork(on_prepare, on_parent, on_child);
}

void pydb__fork_join(const pydb_fork_part *part)
{
    int i;
    pthread_once(&installed, install);
    pthread_mutex_lock(&parts_mutex);
    for (i = 0; i < nparts && parts[i] != part; i++) {}
    if (i == nparts) {
        PYDB_ASSERT(nparts < PYDB_FORK_PARTS);
        if (nparts < PYDB_FORK_PARTS) {
            for (i = nparts++; i > 0 && parts[i - 1]->rank > part->rank; i--)
                parts[i] = parts[i - 1];
            parts[i] = part;
        }
    }
    pthread_mutex_unlock(&parts_mutex);
}
