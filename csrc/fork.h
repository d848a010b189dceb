/*
 * fork.h - the process's pthread_atfork() handlers (fork.c), for the
 * modules whose locks a fork()ed child must not inherit held by a
 * thread it does not have.
 *
 * Only the forking thread lives on in the child.  A lock another thread
 * held at the fork stays held there forever, and the child's first call
 * that takes it hangs.  A module that owns such locks joins once with
 * its part: `prepare` takes them (it may wait for holders, so a lock
 * must never be held across a wait for another part's locks), `parent`
 * and `child` release them or make them anew.  Parts run in order of
 * rank for `prepare` and in reverse order for `parent` and `child`: a
 * lower rank's locks are taken first (gc.c, 1: collectors and database
 * handles; nidx_handle.c, 2: index handles, whose mutex no one holds
 * while waiting for the others).
 *
 * Depends on: nothing.
 */
#ifndef PYDB_FORK_H
#define PYDB_FORK_H

typedef struct pydb_fork_part {
    int rank;
    void (*prepare)(void);
    void (*parent)(void);
    void (*child)(void);
} pydb_fork_part;

/* Adds part (static storage: it is kept) to the handlers, installed at
 * the first call; a part already in is not added again.  At most
 * PYDB_FORK_PARTS parts (more are ignored: a programming error,
 * asserted). */
#define PYDB_FORK_PARTS 4
void pydb__fork_join(const pydb_fork_part *part);

#endif
