/* Copies out of a file mapping that survive the file shrinking under it.
 *
 * A page of a MAP_SHARED mapping that lies past the end of its file
 * raises SIGBUS when touched.  Other programs truncate or rewrite master
 * files in place (reorganising, CISIS copying a master file over
 * itself), so a copy out of the mapping of a file another process cut
 * short would kill the interpreter (py-lmdb and SQLite's mmap mode have
 * the same exposure; SQLite only maps what it has checked, LMDB never
 * shrinks).  Here every copy out of a mapping goes through
 * pydb__map_copy(), which arms a per-thread sigsetjmp() buffer around
 * the memcpy(); a process-wide SIGBUS handler jumps back to it when the
 * fault lies inside the armed range, and the read becomes a corruption
 * error naming the file and offset (vfs.c).
 *
 * Decisions:
 * - One handler for the process, installed with the first mapping and
 *   again at each later one if another handler replaced it (Python's
 *   faulthandler installs its own when enabled): pydb__map_guard().  A
 *   SIGBUS that is not ours goes to the handler that was there before,
 *   then to the default action, so a real crash still crashes (with
 *   faulthandler's traceback when it is enabled).
 * - SA_NODEFER and an empty sa_mask: siglongjmp() out of the handler
 *   leaves no signal blocked, so sigsetjmp() need not save the mask (no
 *   system call per copy: a copy costs about 10 ns more).
 * - The armed range is per thread, in initial-exec TLS: reading it in a
 *   signal handler is async-signal-safe (dynamic TLS may allocate), and
 *   glibc never frees it under another thread.
 * Depends on: nothing of pydb (libc only). */

#include "pydb_int.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

#define TLS_IE __attribute__((tls_model("initial-exec")))

static __thread sigjmp_buf *volatile armed TLS_IE;
static __thread const uint8_t *volatile armed_lo TLS_IE;
static __thread const uint8_t *volatile armed_hi TLS_IE;
static __thread volatile int chaining TLS_IE;  /* in the previous handler */

static pthread_mutex_t guard_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction previous;   /* the handler before ours (guard_mutex) */

static void fall_to_default(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    sigjmp_buf *env = armed;
    const uint8_t *at = si ? (const uint8_t *)si->si_addr : NULL;

    if (env && at >= armed_lo && at < armed_hi) {
        armed = NULL;
        siglongjmp(*env, 1);
    }
    /* Not a copy of ours: the previous handler takes it.  One that ends
     * by re-raising under its own previous handler (faulthandler, when
     * it was installed after us and we again after it) comes back here:
     * then the default action follows. */
    if (chaining) {
        fall_to_default(sig);
        return;
    }
    chaining = 1;
    if (previous.sa_flags & SA_SIGINFO)
        previous.sa_sigaction(sig, si, uc);
    else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN)
        previous.sa_handler(sig);
    chaining = 0;
    /* Still alive: a hardware fault repeats when this returns, now under
     * the default action; a SIGBUS sent by kill() is sent again. */
    fall_to_default(sig);
    if (si && si->si_code <= 0) raise(sig);
}

void pydb__map_guard(void)
{
    struct sigaction now, ours;

    pthread_mutex_lock(&guard_mutex);
    if (sigaction(SIGBUS, NULL, &now) == 0 &&
        !((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus)) {
        memset(&ours, 0, sizeof ours);
        ours.sa_sigaction = on_sigbus;
        ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        sigemptyset(&ours.sa_mask);
        if (sigaction(SIGBUS, &ours, &previous) != 0)
            previous = now;
    }
    pthread_mutex_unlock(&guard_mutex);
}

int pydb__map_copy(void *dst, const uint8_t *src, size_t n)
{
    sigjmp_buf env;

    armed_lo = src;
    armed_hi = src + n;
    if (sigsetjmp(env, 0) != 0) return -1;   /* the handler cleared armed */
    armed = &env;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    memcpy(dst, src, n);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    armed = NULL;
    return 0;
}
