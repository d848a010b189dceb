/*
 * shm.c - the commit header <base>.shm and its reader table (format and
 * protocol: shm.h).
 *
 * Memory shared between processes is read and written with __atomic
 * builtins on naturally aligned 32/64-bit words (lock-free on every
 * platform pydb builds on); plain copies of a state slot are checked by
 * the slot's commit field and CRC before they are used.
 *
 * Depends on: util.h (CRC-32C, now_ms), vfs.c, error.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "shm.h"
#include "pydb_test.h"
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <limits.h>
#include <pthread.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OFF_MAGIC 0
#define OFF_VERSION 8
#define OFF_HEAD 12
#define OFF_READERS 16
#define OFF_SLOTSZ 20
#define OFF_LATEST 24
#define OFF_STAMP 32
#define OFF_APPLYING 40   /* commit a writer is applying (0: none)  */
#define OFF_APPLIER 48    /* its pid (i32)                          */
#define OFF_APPLIER_START 56 /* its start time                      */
#define OFF_STATE 64      /* two slots of STATE_SIZE */
#define STATE_SIZE 128
#define STATE_CRC 120     /* CRC-32C of bytes 0..119 of a state slot */
#define OFF_GARBAGE_V 320 /* master-file garbage: versions superseded */
#define OFF_GARBAGE_B 328 /* ... and their bytes (compact.c)          */
#define OFF_FILE_GEN 336  /* file_gen of the latest published state   */
/* Master-file generations count compactions; one at or above this is
 * damage (a handle keeps its files' generation doubled, read.c fseq) */
#define GEN_LIMIT ((uint64_t)1 << 62)
#define OFF_SWAP_FROM 344 /* the commit the last compaction replaced  */
#define OFF_SWAP_STATE 352 /* the state that compaction published (64) */
#define OFF_GC_LEASE 416  /* the collector lease: pid << 32 | time (gc.c) */
#define OFF_WAKE 424      /* u32 futex: bumped at each writer-lock release */
#define OFF_WAITERS 428   /* u32: writers sleeping on OFF_WAKE */
#define OFF_GC_FIRST 432  /* i32: pid of a collector step waiting (0: none) */
#define OFF_LOG_FIRST 436  /* u32: the id of the log's first frame */
#define OFF_LOG_APPLIED 440 /* u64: bytes of the log applied (this boot) */
#define OFF_BOOT 448      /* the boot of OFF_LOG_APPLIED: 36 characters */
#define OFF_LOG_SYNCED 488 /* u64: first id << 32 | bytes of that log
                              fdatasync'ed (pydb__shm_log_synced)   */
#define OFF_SYNC_HOLDER 496 /* i32: pid holding the sync lock (0: none;
                               -1: stale, do not wait)               */
#define OFF_LOG_SUSPECT 500 /* u32: id of a log an fdatasync failed on */
#define OFF_SYNC_START 504 /* u64: the holder's start time           */
#define OFF_SYNC_WAKE 512  /* u32 futex: bumped when a log sync ends  */
                           /* 516 u32: commits sleeping on it         */
#define OFF_DIRECT_AT 520  /* i64: a direct commit's records' start + 1 */
#define OFF_DIRECT_GEN 528 /* u64: the master file generation then     */
#define OFF_DIRECT_END 536 /* i64: the committed end of records then    */
#define OFF_DIRECT_NXT 544 /* i32: NXTMFN then                          */
#define BOOT_LEN 36

/* reader slot fields */
#define R_PID 0
#define R_START 8
#define R_COMMIT 16       /* commit + 1; 0 while the reader registers */
#define R_END 24          /* mst_end of that commit's state (0: unknown) */
#define R_SINCE 32        /* pydb__now_ms() at registration (0: unknown) */

struct pydb_shm {
    int fd;
    uint8_t *map;         /* atomic: PYDB_SHM_SIZE bytes, or NULL (a file
                             too short when opened); set once           */
    int valid;            /* atomic: the layout checked (shm.h); checked
                             again by pydb__shm_revalidate()           */
    int hint;             /* where the last claim found a free slot */
    uint64_t seen[PYDB_SHM_READERS]; /* pydb__shm_sweep's last look */
    uint64_t verified;    /* commit whose state slot passed its CRC:
                             the hot path skips the CRC for it (a slot's
                             bytes do not change while its commit field
                             holds the same number)                    */
    char path[1100];
};

static uint8_t *map_of(const pydb_shm *s)
{
    return __atomic_load_n(&s->map, __ATOMIC_ACQUIRE);
}

static uint64_t *u64_at(const pydb_shm *s, size_t off)
{
    return (uint64_t *)(void *)(map_of(s) + off);
}

static uint32_t *u32_at(const pydb_shm *s, size_t off)
{
    return (uint32_t *)(void *)(map_of(s) + off);
}

static int32_t *i32_at(const pydb_shm *s, size_t off)
{
    return (int32_t *)(void *)(map_of(s) + off);
}

/* The fields of reader slot i. */
static int32_t *slot_pid(const pydb_shm *s, int i)
{
    return i32_at(s, PYDB_SHM_HEAD + (size_t)i * PYDB_SHM_SLOT + R_PID);
}

static uint64_t *slot_start(const pydb_shm *s, int i)
{
    return u64_at(s, PYDB_SHM_HEAD + (size_t)i * PYDB_SHM_SLOT + R_START);
}

static uint64_t *slot_commit(const pydb_shm *s, int i)
{
    return u64_at(s, PYDB_SHM_HEAD + (size_t)i * PYDB_SHM_SLOT + R_COMMIT);
}

static uint64_t *slot_end(const pydb_shm *s, int i)
{
    return u64_at(s, PYDB_SHM_HEAD + (size_t)i * PYDB_SHM_SLOT + R_END);
}

static uint64_t *slot_since(const pydb_shm *s, int i)
{
    return u64_at(s, PYDB_SHM_HEAD + (size_t)i * PYDB_SHM_SLOT + R_SINCE);
}

/* ---------------------------------------------------------------- layout */

static int layout_ok(const uint8_t *m)
{
    return memcmp(m + OFF_MAGIC, PYDB_SHM_MAGIC, 8) == 0 &&
           pydb__u32(m + OFF_VERSION) == PYDB_SHM_VERSION &&
           pydb__u32(m + OFF_HEAD) == PYDB_SHM_HEAD &&
           pydb__u32(m + OFF_READERS) == PYDB_SHM_READERS &&
           pydb__u32(m + OFF_SLOTSZ) == PYDB_SHM_SLOT;
}

/* Write a fresh header into the file (not through the mapping, so that it
 * works before the file is long enough to map): zeros, then the geometry,
 * then the magic last.  0 or an errno. */
static int write_layout(int fd)
{
    static const uint8_t zero[PYDB_SHM_HEAD];
    uint8_t h[24];
    struct timespec ts;
    uint64_t stamp;
    int e;

    struct stat st;

    /* Never shorter: processes that mapped more of it (a later version)
     * would die of SIGBUS. */
    if (fstat(fd, &st) != 0) return errno;
    if (st.st_size < PYDB_SHM_SIZE &&
        pydb__vfs->ftruncate(fd, PYDB_SHM_SIZE) != 0)
        return errno;
    /* The reader table and both state slots zeroed (no state, no reader);
     * a reinitialised file may be mapped by readers that ignore it. */
    for (int64_t off = 0; off < PYDB_SHM_SIZE; off += PYDB_SHM_HEAD) {
        e = -pydb__write_full(fd, zero, PYDB_SHM_HEAD, off);
        if (e) return e;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    stamp = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    e = -pydb__write_full(fd, &stamp, sizeof stamp, OFF_STAMP);
    if (e) return e;
    pydb__put32(h, PYDB_SHM_VERSION);
    pydb__put32(h + 4, PYDB_SHM_HEAD);
    pydb__put32(h + 8, PYDB_SHM_READERS);
    pydb__put32(h + 12, PYDB_SHM_SLOT);
    e = -pydb__write_full(fd, h, 16, OFF_VERSION);
    if (e) return e;
    return -pydb__write_full(fd, PYDB_SHM_MAGIC, 8, OFF_MAGIC);
}

/* An exclusive lock on the first byte, held while a file is initialised
 * (two processes creating it at once).  0 or an errno. */
static int init_lock(int fd, int type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = (short)type;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    while (fcntl(fd, F_OFD_SETLKW, &fl) != 0)
        if (errno != EINTR) return errno;
    return 0;
}

/* Map the file if it is long enough and not mapped yet (the mapping is
 * set once and kept until close: other threads may be reading it). */
static int map_file(pydb_shm *s)
{
    struct stat st;
    uint8_t *m, *none = NULL;
    if (map_of(s)) return 0;
    if (fstat(s->fd, &st) != 0 || st.st_size < PYDB_SHM_SIZE) return -1;
    m = mmap(NULL, PYDB_SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd,
             0);
    if (m == MAP_FAILED) return -1;
    if (!__atomic_compare_exchange_n(&s->map, &none, m, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        munmap(m, PYDB_SHM_SIZE);   /* another thread mapped it first */
    return 0;
}

void pydb__shm_revalidate(pydb_shm *s)
{
    const uint8_t *m;
    if (!s) return;
    map_file(s);
    m = map_of(s);
    __atomic_store_n(&s->valid, m && layout_ok(m), __ATOMIC_RELEASE);
}

/* The mode the header file takes: the master file's (0644 if it cannot
 * be read). */
static mode_t mode_of(const char *mst_path)
{
    struct stat ms;
    return stat(mst_path, &ms) == 0 ? ms.st_mode & 0666 : 0644;
}

int pydb__shm_open(pydb_shm **out, const char *path, const char *mst_path,
                   int create, pydb_error *err)
{
    pydb_shm *s;
    struct stat st;
    mode_t mode;

    *out = NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return PYDB_ERROR(err, PYDB_ENOMEM, path, -1,
                          "no memory for the commit header");
    snprintf(s->path, sizeof s->path, "%s", path);
    /* the master file's mode, needed only to create or lay out the file:
     * a reader of a database without a header tries the open at each
     * refresh, and a stat costs as much again */
    mode = create ? mode_of(mst_path) : 0644;
    s->fd = pydb__vfs->open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0),
                            (int)mode);
    if (s->fd < 0) goto unusable;   /* missing, read-only media, permissions */
    if (init_lock(s->fd, F_WRLCK) != 0) goto unusable;
    /* A new (empty) file holds no state: anyone may lay it out, with the
     * master file's mode (open() applied the umask): every process that
     * may read the database must be able to register in it. */
    if (fstat(s->fd, &st) == 0 && st.st_size == 0) {
        if (!create) mode = mode_of(mst_path);
        if (fchmod(s->fd, mode) != 0 || write_layout(s->fd) != 0) {
            init_lock(s->fd, F_UNLCK);
            goto unusable;
        }
    }
    init_lock(s->fd, F_UNLCK);
    pydb__shm_revalidate(s);   /* too short: unmapped, invalid until reset */
    *out = s;
    return PYDB_OK;
unusable:
    pydb__shm_close(s);
    return PYDB_OK;
}

void pydb__shm_close(pydb_shm *s)
{
    if (!s) return;
    if (map_of(s)) munmap(map_of(s), PYDB_SHM_SIZE);
    if (s->fd >= 0) pydb__vfs->close(s->fd);
    free(s);
}

int pydb__shm_valid(const pydb_shm *s)
{
    return s && __atomic_load_n(&s->valid, __ATOMIC_ACQUIRE);
}

int pydb__shm_reset(pydb_shm *s, pydb_error *err)
{
    int e;
    pydb__shm_revalidate(s);   /* damaged since it was opened? */
    if (pydb__shm_valid(s)) return PYDB_OK;
    e = init_lock(s->fd, F_WRLCK);
    if (e == 0) e = write_layout(s->fd);
    init_lock(s->fd, F_UNLCK);
    if (e)
        return PYDB_OSERROR(err, e, s->path, -1,
                            "cannot rebuild the commit header: %s",
                            strerror(e));
    pydb__shm_revalidate(s);
    if (!pydb__shm_valid(s))
        return PYDB_ERROR(err, PYDB_EIO, s->path, -1,
                          "cannot map the rebuilt commit header");
    return PYDB_OK;
}

/* ------------------------------------------------------------- the state */

uint64_t pydb__shm_latest(const pydb_shm *s)
{
    if (!pydb__shm_valid(s)) return 0;
    return __atomic_load_n(u64_at(s, OFF_LATEST), __ATOMIC_ACQUIRE);
}

/* A state slot holds a pydb_state as it is in memory (the field order of
 * shm.h, no padding: checked here), zeros up to the CRC, then the CRC: a
 * copy is fifteen word loads, and decoding nothing. */
_Static_assert(sizeof(pydb_state) <= STATE_CRC &&
                   sizeof(pydb_state) % 8 == 0 &&
                   offsetof(pydb_state, next_mfn) == 8 &&
                   offsetof(pydb_state, reccnt) == 20 &&
                   offsetof(pydb_state, mst_end) == 24 &&
                   offsetof(pydb_state, index_gen) == 48 &&
                   offsetof(pydb_state, file_gen) == 56,
               "pydb_state must match the state slot of shm.h");

/* Copy the state of commit `c` from the mapping m (0, or -1 if its slot
 * holds another commit, is being written, or fails its CRC). */
static int state_copy(pydb_state *st, pydb_shm *s, const uint8_t *m,
                      uint64_t c)
{
    const uint64_t *w =
        (const uint64_t *)(const void *)(m + OFF_STATE +
                                         (size_t)(c & 1) * STATE_SIZE);
    uint64_t b[STATE_SIZE / 8];

    if (c == 0) return -1;   /* no commit published yet */
    if (__atomic_load_n(&w[0], __ATOMIC_ACQUIRE) != c) return -1;
    for (size_t i = 1; i < STATE_SIZE / 8; i++)
        b[i] = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&w[0], __ATOMIC_RELAXED) != c) return -1;
    b[0] = c;
    if (__atomic_load_n(&s->verified, __ATOMIC_RELAXED) != c) {
        if (pydb__u32((const uint8_t *)b + STATE_CRC) !=
            pydb__crc32c(0, b, STATE_CRC))
            return -1;
        __atomic_store_n(&s->verified, c, __ATOMIC_RELAXED);
    }
    memcpy(st, b, sizeof *st);
    if (st->file_gen >= GEN_LIMIT) return -1;   /* a damaged slot */
    return 0;
}

int pydb__shm_state(pydb_state *st, pydb_shm *s)
{
    const uint8_t *m = map_of(s);
    if (!m || !__atomic_load_n(&s->valid, __ATOMIC_ACQUIRE)) return -1;
    for (int tries = 0; tries < 1000; tries++) {
        uint64_t c = __atomic_load_n(
            (const uint64_t *)(const void *)(m + OFF_LATEST),
            __ATOMIC_ACQUIRE);
        if (c == 0) return -1;
        if (state_copy(st, s, m, c) == 0) return 0;
        /* the writer published twice during the copy, or the slot is
         * damaged: a damaged slot stays so, give up after a while */
    }
    return -1;
}

void pydb__shm_publish(pydb_shm *s, pydb_state *st)
{
    uint64_t c;
    size_t off;
    uint8_t b[STATE_SIZE];

    if (!pydb__shm_valid(s)) return;
    c = pydb__shm_latest(s) + 1;
    st->commit = c;
    off = OFF_STATE + (size_t)(c & 1) * STATE_SIZE;
    memset(b, 0, sizeof b);
    memcpy(b, st, sizeof *st);
    pydb__put32(b + STATE_CRC, pydb__crc32c(0, b, STATE_CRC));
    /* commit field 0 while the slot is written, the real one last */
    __atomic_store_n(u64_at(s, off), 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (size_t i = 8; i < STATE_SIZE; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        __atomic_store_n(u64_at(s, off + i), w, __ATOMIC_RELAXED);
    }
    __atomic_store_n(u64_at(s, off), c, __ATOMIC_RELEASE);
    __atomic_store_n(u64_at(s, OFF_LATEST), c, __ATOMIC_RELEASE);
    /* the plain-read hint: readers compare it with their files' */
    __atomic_store_n(u64_at(s, OFF_FILE_GEN), st->file_gen,
                     __ATOMIC_RELEASE);
    /* a writer that scans the reader table after this sees every reader
     * that registered the previous commit (shm.h, registration) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* ------------------------------------------- garbage and compactions */

void pydb__shm_garbage_add(pydb_shm *s, int64_t versions, int64_t bytes)
{
    if (!pydb__shm_valid(s) || (versions == 0 && bytes == 0)) return;
    __atomic_add_fetch(u64_at(s, OFF_GARBAGE_V), (uint64_t)versions,
                       __ATOMIC_RELAXED);
    __atomic_add_fetch(u64_at(s, OFF_GARBAGE_B), (uint64_t)bytes,
                       __ATOMIC_RELAXED);
}

/* A garbage counter as read: at most GARBAGE_MAX, so that sums and
 * products of a few never overflow (a damaged header's counters may hold
 * anything: fuzz_shm found 5.9e18 * 4 in compact.c). */
#define GARBAGE_MAX (INT64_MAX / 64)
static int64_t garbage_load(const uint64_t *w)
{
    uint64_t v = __atomic_load_n(w, __ATOMIC_RELAXED);
    return v > (uint64_t)GARBAGE_MAX ? GARBAGE_MAX : (int64_t)v;
}

void pydb__shm_garbage(pydb_shm *s, int64_t *versions, int64_t *bytes)
{
    *versions = *bytes = 0;
    if (!pydb__shm_valid(s)) return;
    *versions = garbage_load(u64_at(s, OFF_GARBAGE_V));
    *bytes = garbage_load(u64_at(s, OFF_GARBAGE_B));
}

void pydb__shm_garbage_reset(pydb_shm *s)
{
    if (!pydb__shm_valid(s)) return;
    __atomic_store_n(u64_at(s, OFF_GARBAGE_V), 0, __ATOMIC_RELAXED);
    __atomic_store_n(u64_at(s, OFF_GARBAGE_B), 0, __ATOMIC_RELAXED);
}

const uint64_t *pydb__shm_gen_word(const pydb_shm *s)
{
    if (!pydb__shm_valid(s)) return NULL;
    return u64_at(s, OFF_FILE_GEN);
}

uint64_t pydb__shm_file_gen(const pydb_shm *s)
{
    uint64_t w;
    if (!pydb__shm_valid(s)) return 0;
    w = __atomic_load_n(u64_at(s, OFF_FILE_GEN), __ATOMIC_ACQUIRE);
    return w < GEN_LIMIT ? w : 0;
}

_Static_assert(sizeof(pydb_state) == 64, "the swap record holds a state");

void pydb__shm_swap_set(pydb_shm *s, uint64_t from, const pydb_state *after)
{
    uint64_t w[8];
    if (!pydb__shm_valid(s)) return;
    memcpy(w, after, sizeof w);
    __atomic_store_n(u64_at(s, OFF_SWAP_FROM), 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (size_t i = 0; i < 8; i++)
        __atomic_store_n(u64_at(s, OFF_SWAP_STATE + i * 8), w[i],
                         __ATOMIC_RELAXED);
    __atomic_store_n(u64_at(s, OFF_SWAP_FROM), from, __ATOMIC_RELEASE);
}

int pydb__shm_swap_get(pydb_shm *s, uint64_t *from, pydb_state *after)
{
    uint64_t w[8], f;
    if (!pydb__shm_valid(s)) return -1;
    f = __atomic_load_n(u64_at(s, OFF_SWAP_FROM), __ATOMIC_ACQUIRE);
    if (f == 0) return -1;
    for (size_t i = 0; i < 8; i++)
        w[i] = __atomic_load_n(u64_at(s, OFF_SWAP_STATE + i * 8),
                               __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(u64_at(s, OFF_SWAP_FROM), __ATOMIC_RELAXED) != f)
        return -1;
    memcpy(after, w, sizeof w);
    *from = f;
    return 0;
}

/* ------------------------------------------------------- the reader table */

/* pid's start time (/proc/<pid>/stat field 22; 0: unknown), and in
 * *zombie (may be NULL) whether it has exited and waits to be reaped
 * (state Z: it reads nothing any more, though kill(pid, 0) succeeds until
 * its parent waits for it). */
static uint64_t proc_start(pid_t pid, int *zombie)
{
    char path[64], buf[1024];
    const char *p;
    uint64_t v = 0;
    ssize_t n;
    int fd;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    p = strrchr(buf, ')');   /* the command name may hold spaces */
    if (!p) return 0;
    /* after ") ": field 3 (state) ... field 22 (starttime) */
    if (zombie) *zombie = p[1] == ' ' && p[2] == 'Z';
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    if (!p) return 0;
    v = strtoull(p + 1, NULL, 10);
    return v;
}


/* This process: its pid and start time (again after fork()).  One cache
 * for the process, not per thread: a __thread variable in a dlopen()ed
 * library lives in dynamic TLS, which glibc frees when it reuses a dead
 * thread's stack, and ThreadSanitizer reports that free as a race with
 * the dead thread's last read (a false positive that failed test runs).
 * Threads that fill the cache at once store the same values; the pid is
 * published after the start time it goes with. */
static void me(int32_t *pid, uint64_t *start)
{
    static int32_t my_pid;
    static uint64_t my_start;
    int32_t now = (int32_t)getpid();
    if (__atomic_load_n(&my_pid, __ATOMIC_ACQUIRE) != now) {
        __atomic_store_n(&my_start, proc_start(now, NULL), __ATOMIC_RELAXED);
        __atomic_store_n(&my_pid, now, __ATOMIC_RELEASE);
    }
    *pid = now;
    *start = __atomic_load_n(&my_start, __ATOMIC_RELAXED);
}

/* Whether process `pid`, started at `start` (0: unknown), is gone. */
static int process_gone(int32_t pid, uint64_t start)
{
    uint64_t now;
    int zombie = 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    now = proc_start(pid, &zombie);
    if (zombie) return 1;              /* exited, not yet reaped */
    if (start == 0) return 0;          /* start time unknown: alive */
    return now != 0 && now != start;   /* the pid is another process now */
}

int pydb__shm_process_gone(int32_t pid)
{
    return process_gone(pid, 0);
}

/* Whether slot i belongs to a process that is gone: a reader (pid > 0)
 * or a cleaner that died while it freed the slot (pid < 0: -cleaner). */
static int slot_dead(const pydb_shm *s, int i, int32_t pid)
{
    if (pid > 0)
        return process_gone(pid, __atomic_load_n(slot_start(s, i),
                                                 __ATOMIC_ACQUIRE));
    if (pid < 0) return pid == INT32_MIN || process_gone(-pid, 0);
    return 0;
}

/* Free slot i if it still holds `pid`: first take it over (pid becomes
 * -this process), so that no other cleaner or new reader can be in it,
 * then zero it and release it.  A cleaner that dies in between leaves
 * -its pid, which the next cleaner sees as dead. */
static void slot_clear(pydb_shm *s, int i, int32_t pid)
{
    int32_t mine;
    uint64_t start;
    me(&mine, &start);
    if (!__atomic_compare_exchange_n(slot_pid(s, i), &pid, -mine, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;   /* someone else cleared or claimed it */
    __atomic_store_n(slot_commit(s, i), 0, __ATOMIC_RELAXED);
    __atomic_store_n(slot_end(s, i), 0, __ATOMIC_RELAXED);
    __atomic_store_n(slot_since(s, i), 0, __ATOMIC_RELAXED);
    __atomic_store_n(slot_start(s, i), 0, __ATOMIC_RELAXED);
    __atomic_store_n(slot_pid(s, i), 0, __ATOMIC_RELEASE);
}

static int claim(pydb_shm *s)
{
    int start = __atomic_load_n(&s->hint, __ATOMIC_RELAXED);
    int32_t pid;
    uint64_t stime;

    me(&pid, &stime);
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < PYDB_SHM_READERS; k++) {
            int i = (start + k) % PYDB_SHM_READERS;
            int32_t zero = 0;
            int32_t cur = __atomic_load_n(slot_pid(s, i), __ATOMIC_RELAXED);
            if (cur == 0 &&
                __atomic_compare_exchange_n(slot_pid(s, i), &zero, pid, 0,
                                            __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                /* start and commit are 0 here (freed that way) */
                __atomic_store_n(slot_start(s, i), stime, __ATOMIC_RELEASE);
                __atomic_store_n(&s->hint, (i + 1) % PYDB_SHM_READERS,
                                 __ATOMIC_RELAXED);
                return i;
            }
            /* a full table: free the slots of dead processes */
            if (pass == 1 && cur != 0 && slot_dead(s, i, cur)) {
                slot_clear(s, i, cur);
                k--;   /* try this slot again */
            }
        }
    }
    return -1;
}

int pydb__shm_pin(int *slot, pydb_state *st, pydb_shm *s, pydb_error *err)
{
    uint64_t *commit;
    uint64_t c;
    int i;

    *slot = -1;
    if (!pydb__shm_valid(s)) return -1;
    i = claim(s);
    if (i < 0)
        return PYDB_ERROR(err, PYDB_ELOCKED, s->path, -1,
                          "the reader table is full: %d live readers hold "
                          "snapshots of this database",
                          PYDB_SHM_READERS);
    commit = slot_commit(s, i);
    __atomic_store_n(slot_since(s, i), (uint64_t)pydb__now_ms(),
                     __ATOMIC_RELAXED);
    for (int tries = 0;; tries++) {
        c = pydb__shm_latest(s);
        /* the commit a writer will see, then confirm it is still the
         * latest (a full fence: Dekker with pydb__shm_publish) */
        __atomic_store_n(commit, c + 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (pydb__shm_latest(s) != c) continue;
        if (state_copy(st, s, map_of(s), c) == 0) break;
        if (c == 0 || tries >= 1000) {
            /* no state yet, or a damaged slot: registered, files mode */
            st->commit = 0;
            break;
        }
    }
    /* for pydb__shm_oldest_end (statistics only: 0 means unknown) */
    __atomic_store_n(slot_end(s, i), (uint64_t)(st->commit ? st->mst_end : 0),
                     __ATOMIC_RELEASE);
    *slot = i;
    return PYDB_OK;
}

void pydb__shm_unpin(pydb_shm *s, int slot)
{
    int32_t pid;
    uint64_t start;
    if (slot < 0 || !map_of(s)) return;
    /* Only the process that claimed the slot frees it: a child of fork()
     * that releases a snapshot it inherited leaves its parent's slot. */
    me(&pid, &start);
    if (__atomic_load_n(slot_pid(s, slot), __ATOMIC_ACQUIRE) != pid) return;
    __atomic_store_n(slot_commit(s, slot), 0, __ATOMIC_RELAXED);
    __atomic_store_n(slot_end(s, slot), 0, __ATOMIC_RELAXED);
    __atomic_store_n(slot_since(s, slot), 0, __ATOMIC_RELAXED);
    __atomic_store_n(slot_start(s, slot), 0, __ATOMIC_RELAXED);
    __atomic_store_n(slot_pid(s, slot), 0, __ATOMIC_RELEASE);
}

uint64_t pydb__shm_oldest(pydb_shm *s, int *readers)
{
    uint64_t latest, oldest;
    int n = 0;

    if (readers) *readers = 0;
    if (!pydb__shm_valid(s)) return 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    latest = pydb__shm_latest(s);
    oldest = latest;
    for (int i = 0; i < PYDB_SHM_READERS; i++) {
        int32_t pid = __atomic_load_n(slot_pid(s, i), __ATOMIC_ACQUIRE);
        uint64_t c;
        if (pid == 0) continue;
        if (pid < 0) {   /* being freed, or left so by a dead cleaner */
            if (slot_dead(s, i, pid)) slot_clear(s, i, pid);
            continue;
        }
        c = __atomic_load_n(slot_commit(s, i), __ATOMIC_ACQUIRE);
        if (c == 0) {   /* registering: it will read `latest` or newer */
            n++;
            continue;
        }
        c--;            /* stored as commit + 1 (0: registering) */
        if (c < oldest && slot_dead(s, i, pid)) {
            slot_clear(s, i, pid);
            continue;
        }
        n++;
        if (c < oldest) oldest = c;
    }
    if (readers) *readers = n;
    return oldest;
}

int64_t pydb__shm_oldest_end(pydb_shm *s)
{
    int64_t end = INT64_MAX;

    if (!pydb__shm_valid(s)) return 0;
    (void)pydb__shm_oldest(s, NULL);   /* frees the slots of dead readers */
    for (int i = 0; i < PYDB_SHM_READERS; i++) {
        int32_t pid = __atomic_load_n(slot_pid(s, i), __ATOMIC_ACQUIRE);
        uint64_t c, e;
        if (pid <= 0) continue;
        c = __atomic_load_n(slot_commit(s, i), __ATOMIC_ACQUIRE);
        e = __atomic_load_n(slot_end(s, i), __ATOMIC_ACQUIRE);
        if (c == 0) continue;          /* registering: the latest or newer */
        if (e == 0) return 0;          /* registered, end not yet stored */
        if ((int64_t)e < end) end = (int64_t)e;
    }
    return end;
}

int64_t pydb__shm_behind_since(pydb_shm *s)
{
    int64_t since = INT64_MAX;
    uint64_t latest;

    if (!pydb__shm_valid(s)) return INT64_MAX;
    (void)pydb__shm_oldest(s, NULL);   /* frees the slots of dead readers */
    latest = pydb__shm_latest(s);
    for (int i = 0; i < PYDB_SHM_READERS; i++) {
        int32_t pid = __atomic_load_n(slot_pid(s, i), __ATOMIC_ACQUIRE);
        uint64_t c, t;
        if (pid <= 0) continue;
        c = __atomic_load_n(slot_commit(s, i), __ATOMIC_ACQUIRE);
        if (c == 0 || c - 1 >= latest) continue;   /* not behind */
        t = __atomic_load_n(slot_since(s, i), __ATOMIC_ACQUIRE);
        if (t == 0) return 0;   /* unknown: an older pydb's slot */
        if ((int64_t)t < since) since = (int64_t)t;
    }
    return since;
}

void pydb__shm_sweep(pydb_shm *s)
{
    uint64_t latest;
    if (!pydb__shm_valid(s)) return;
    latest = pydb__shm_latest(s);
    for (int i = 0; i < PYDB_SHM_READERS; i++) {
        int32_t pid = __atomic_load_n(slot_pid(s, i), __ATOMIC_ACQUIRE);
        uint64_t start = __atomic_load_n(slot_start(s, i), __ATOMIC_ACQUIRE);
        uint64_t c = __atomic_load_n(slot_commit(s, i), __ATOMIC_ACQUIRE);
        uint64_t key;
        if (pid == 0) {
            /* A free slot is all zeros (a claimer relies on it): take a
             * damaged one over and free it properly. */
            int32_t zero = 0;
            if ((start || c) &&
                __atomic_compare_exchange_n(slot_pid(s, i), &zero, INT32_MIN,
                                            0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
                slot_clear(s, i, INT32_MIN);
            s->seen[i] = 0;
            continue;
        }
        /* What a live process leaves for nanoseconds only: a slot being
         * freed (pid < 0), claimed (no start time yet), or a commit no
         * writer has published.  Seen the same at two sweeps: garbage. */
        if (pid > 0 && start != 0 && c <= latest + 1) {
            s->seen[i] = 0;
            continue;
        }
        key = ((uint64_t)(uint32_t)pid << 32 | (c & 0xFFFFFFFFu)) | 1;
        if (s->seen[i] == key) {
            slot_clear(s, i, pid);
            key = 0;
        }
        s->seen[i] = key;
    }
}

/* ------------------------------------------------- the applying marker */

void pydb__shm_applying(pydb_shm *s, int on)
{
    int32_t pid;
    uint64_t start;
    if (!pydb__shm_valid(s)) return;
    if (!on) {
        __atomic_store_n(u64_at(s, OFF_APPLYING), 0, __ATOMIC_RELEASE);
        return;
    }
    me(&pid, &start);
    __atomic_store_n(i32_at(s, OFF_APPLIER), pid, __ATOMIC_RELAXED);
    __atomic_store_n(u64_at(s, OFF_APPLIER_START), start, __ATOMIC_RELAXED);
    __atomic_store_n(u64_at(s, OFF_APPLYING), pydb__shm_latest(s) + 1,
                     __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

uint64_t pydb__shm_applying_commit(pydb_shm *s)
{
    if (!pydb__shm_valid(s)) return 0;
    return __atomic_load_n(u64_at(s, OFF_APPLYING), __ATOMIC_ACQUIRE);
}

/* ---------------------------------------------- the direct-commit mark */

void pydb__shm_direct_set(pydb_shm *s, const pydb_direct_mark *m)
{
    uint8_t *map;
    if (!pydb__shm_valid(s)) return;
    __atomic_store_n(u64_at(s, OFF_DIRECT_GEN), m->gen, __ATOMIC_RELAXED);
    __atomic_store_n(u64_at(s, OFF_DIRECT_END), (uint64_t)m->end,
                     __ATOMIC_RELAXED);
    __atomic_store_n(i32_at(s, OFF_DIRECT_NXT), m->next_mfn,
                     __ATOMIC_RELAXED);
    __atomic_store_n(u64_at(s, OFF_DIRECT_AT), (uint64_t)m->start + 1,
                     __ATOMIC_RELEASE);
    /* best effort: without it a power cut may keep the records, not the
     * mark, and they stay as another program's would (never cut) */
    map = map_of(s);
    if (map) (void)msync(map, PYDB_SHM_HEAD, MS_SYNC);
}

void pydb__shm_direct_clear(pydb_shm *s)
{
    if (!pydb__shm_valid(s)) return;
    __atomic_store_n(u64_at(s, OFF_DIRECT_AT), 0, __ATOMIC_RELEASE);
}

int pydb__shm_direct_get(pydb_shm *s, pydb_direct_mark *m)
{
    uint64_t at;
    if (!pydb__shm_valid(s)) return 0;
    at = __atomic_load_n(u64_at(s, OFF_DIRECT_AT), __ATOMIC_ACQUIRE);
    if (at == 0 || at > (uint64_t)INT64_MAX) return 0;
    m->start = (int64_t)(at - 1);
    m->gen = __atomic_load_n(u64_at(s, OFF_DIRECT_GEN), __ATOMIC_RELAXED);
    m->end = (int64_t)__atomic_load_n(u64_at(s, OFF_DIRECT_END),
                                      __ATOMIC_RELAXED);
    m->next_mfn = __atomic_load_n(i32_at(s, OFF_DIRECT_NXT), __ATOMIC_RELAXED);
    return 1;
}

/* ------------------------------------------------- the collector lease */

static uint64_t lease_word(int32_t pid, uint32_t now)
{
    return (uint64_t)(uint32_t)pid << 32 | now;
}

int pydb__shm_lease_take(pydb_shm *s, int32_t pid, uint32_t now,
                         uint32_t stale)
{
    uint64_t *w;
    if (!pydb__shm_valid(s)) return 1;   /* no header: nobody to share with */
    w = u64_at(s, OFF_GC_LEASE);
    for (;;) {
        uint64_t cur = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        int32_t holder = (int32_t)(cur >> 32);
        uint32_t beat = (uint32_t)cur;
        if (holder != 0 && holder != pid && (uint32_t)(now - beat) < stale &&
            !process_gone(holder, 0))
            return 0;
        if (__atomic_compare_exchange_n(w, &cur, lease_word(pid, now), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return 1;
    }
}

void pydb__shm_lease_drop(pydb_shm *s, int32_t pid)
{
    uint64_t *w, cur;
    if (!pydb__shm_valid(s)) return;
    w = u64_at(s, OFF_GC_LEASE);
    cur = __atomic_load_n(w, __ATOMIC_ACQUIRE);
    if ((int32_t)(cur >> 32) == pid)
        __atomic_compare_exchange_n(w, &cur, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
}

int32_t pydb__shm_lease_holder(pydb_shm *s)
{
    if (!pydb__shm_valid(s)) return 0;
    return (int32_t)(__atomic_load_n(u64_at(s, OFF_GC_LEASE),
                                     __ATOMIC_ACQUIRE) >> 32);
}

/* ------------------------------------------ waiting for the writer lock */

/* A wake word at `word` and its count of sleepers at `word` + 4 (the
 * writer lock's, the sync lock's): ticket, wait and wake. */
static uint32_t ticket_at(pydb_shm *s, size_t word)
{
    if (!s || !pydb__shm_valid(s)) return 0;
    __atomic_add_fetch(u32_at(s, word + 4), 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(u32_at(s, word), __ATOMIC_SEQ_CST);
}

static void wait_at(pydb_shm *s, size_t word, uint32_t ticket, unsigned us)
{
    struct timespec ts;
    if (!s || !pydb__shm_valid(s)) {
        if (us) usleep(us);
        return;
    }
    if (us == 0) {
        __atomic_sub_fetch(u32_at(s, word + 4), 1, __ATOMIC_SEQ_CST);
        return;
    }
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (long)(us % 1000000) * 1000;
    /* not FUTEX_PRIVATE_FLAG: the word is shared with other processes;
     * EAGAIN (the word moved), ETIMEDOUT and EINTR all end the wait */
    (void)syscall(SYS_futex, u32_at(s, word), FUTEX_WAIT, ticket, &ts, NULL,
                  0);
    __atomic_sub_fetch(u32_at(s, word + 4), 1, __ATOMIC_SEQ_CST);
}

/* Bump the wake word at `word` and wake `n` sleepers. */
static void wake_at(pydb_shm *s, size_t word, int n)
{
    __atomic_add_fetch(u32_at(s, word), 1, __ATOMIC_SEQ_CST);
    (void)syscall(SYS_futex, u32_at(s, word), FUTEX_WAKE, n, NULL, NULL, 0);
}

uint32_t pydb__shm_writer_ticket(pydb_shm *s)
{
    return ticket_at(s, OFF_WAKE);
}

void pydb__shm_writer_wait(pydb_shm *s, uint32_t ticket, unsigned us)
{
    wait_at(s, OFF_WAKE, ticket, us);
}

void pydb__shm_writer_released(pydb_shm *s)
{
    if (!s || !pydb__shm_valid(s)) return;
    /* while a collector step waits, every sleeper must look (the step
     * goes first, the others go back to sleep); a count left by a waiter
     * that was killed only costs a wake-up */
    if (__atomic_load_n(i32_at(s, OFF_GC_FIRST), __ATOMIC_SEQ_CST) != 0)
        wake_at(s, OFF_WAKE, INT_MAX);
    else if (__atomic_load_n(u32_at(s, OFF_WAITERS), __ATOMIC_SEQ_CST) != 0)
        wake_at(s, OFF_WAKE, 1);
    else
        __atomic_add_fetch(u32_at(s, OFF_WAKE), 1, __ATOMIC_SEQ_CST);
}

void pydb__shm_writer_claim(pydb_shm *s, int32_t pid)
{
    int32_t none = 0;
    if (!s || !pydb__shm_valid(s)) return;
    __atomic_compare_exchange_n(i32_at(s, OFF_GC_FIRST), &none, pid, 0,
                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

void pydb__shm_writer_unclaim(pydb_shm *s, int32_t pid)
{
    if (!s || !pydb__shm_valid(s)) return;
    if (__atomic_compare_exchange_n(i32_at(s, OFF_GC_FIRST), &pid, 0, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        wake_at(s, OFF_WAKE, INT_MAX);   /* those standing back go on */
}

int32_t pydb__shm_writer_claimed(pydb_shm *s)
{
    if (!s || !pydb__shm_valid(s)) return 0;
    return __atomic_load_n(i32_at(s, OFF_GC_FIRST), __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------- the log's applied length */

/* This kernel boot's id (36 characters), read once; "" when unknown. */
static char boot_id[BOOT_LEN + 1];
static pthread_once_t boot_once = PTHREAD_ONCE_INIT;

static void boot_read(void)
{
    char buf[64];
    ssize_t n;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    n = read(fd, buf, sizeof buf);
    close(fd);
    if (n >= BOOT_LEN) memcpy(boot_id, buf, BOOT_LEN);
}

static const char *boot(void)
{
    pthread_once(&boot_once, boot_read);
    return boot_id;
}

static int boot_unknown;   /* pydb__test_set_boot_unknown */

int pydb__test_set_boot_unknown(int unknown)
{
    int old = boot_unknown;
    boot_unknown = unknown;
    return old;
}

int pydb__shm_log_usable(pydb_shm *s)
{
    return s && pydb__shm_valid(s) && !boot_unknown && boot()[0] != 0;
}

int pydb__shm_log_applied(pydb_shm *s, uint64_t *len, uint32_t *first)
{
    char mine[BOOT_LEN];
    uint64_t l;
    uint32_t f, f2;
    if (!pydb__shm_log_usable(s)) return 0;
    /* first, length, first: pydb__shm_log_set() stores the length 0,
     * then the first id, then the length (each a release), so a length
     * read between two equal ids is of that log, or 0 (a look without
     * the writer lock: read-only opens, pydb__shm_log_synced's users) */
    do {
        f = __atomic_load_n(u32_at(s, OFF_LOG_FIRST), __ATOMIC_ACQUIRE);
        l = __atomic_load_n(u64_at(s, OFF_LOG_APPLIED), __ATOMIC_ACQUIRE);
        f2 = __atomic_load_n(u32_at(s, OFF_LOG_FIRST), __ATOMIC_ACQUIRE);
    } while (f != f2);
    for (int i = 0; i < BOOT_LEN; i++)
        mine[i] = (char)__atomic_load_n(map_of(s) + OFF_BOOT + i, __ATOMIC_RELAXED);
    if (memcmp(mine, boot(), BOOT_LEN) != 0) return 0;
    *len = l;
    *first = f;
    return 1;
}

void pydb__shm_log_set(pydb_shm *s, uint64_t len, uint32_t first)
{
    const char *b;
    uint64_t synced;
    if (!pydb__shm_log_usable(s)) return;
    b = boot();
    /* the length is 0 while the boot and the first frame change: never
     * a length of another boot or log under this one's name */
    __atomic_store_n(u64_at(s, OFF_LOG_APPLIED), 0, __ATOMIC_RELEASE);
    for (int i = 0; i < BOOT_LEN; i++)
        __atomic_store_n(map_of(s) + OFF_BOOT + i, (uint8_t)b[i], __ATOMIC_RELAXED);
    __atomic_store_n(u32_at(s, OFF_LOG_FIRST), first, __ATOMIC_RELEASE);
    /* the synced mark of another log goes (it could only cost a sync:
     * pydb__shm_log_synced compares ids) */
    synced = __atomic_load_n(u64_at(s, OFF_LOG_SYNCED), __ATOMIC_RELAXED);
    if ((uint32_t)(synced >> 32) != first || first == 0)
        __atomic_store_n(u64_at(s, OFF_LOG_SYNCED), 0, __ATOMIC_RELAXED);
    __atomic_store_n(u64_at(s, OFF_LOG_APPLIED), len, __ATOMIC_RELEASE);
}

/* Whether the log whose first frame has id `first` (the header's) is
 * named suspect. */
static int suspect_is(pydb_shm *s, uint32_t first)
{
    return __atomic_load_n(u32_at(s, OFF_LOG_SUSPECT), __ATOMIC_ACQUIRE) ==
           first;
}

int pydb__shm_log_suspect(pydb_shm *s)
{
    uint64_t len;
    uint32_t now;
    return pydb__shm_log_applied(s, &len, &now) && now != 0 &&
           suspect_is(s, now);
}

void pydb__shm_log_suspect_set(pydb_shm *s)
{
    uint64_t len;
    uint32_t now;
    if (pydb__shm_log_applied(s, &len, &now) && now != 0)
        __atomic_store_n(u32_at(s, OFF_LOG_SUSPECT), now, __ATOMIC_RELEASE);
}

/* The synced mark's length when the mark is of the header's log, of
 * this boot, on which no fdatasync failed (that log's id in *now), else
 * 0. */
static uint64_t synced_len(pydb_shm *s, uint32_t *now)
{
    uint64_t m, len;
    if (!pydb__shm_log_applied(s, &len, now) || *now == 0 ||
        suspect_is(s, *now))
        return 0;
    m = __atomic_load_n(u64_at(s, OFF_LOG_SYNCED), __ATOMIC_ACQUIRE);
    return (uint32_t)(m >> 32) == *now ? (m & 0xffffffffu) : 0;
}

int pydb__shm_log_synced(pydb_shm *s, uint32_t first, uint64_t end)
{
    uint32_t now = 0;
    uint64_t len = synced_len(s, &now);
    return first != 0 && now == first && len > 0 && len >= end;
}

uint64_t pydb__shm_log_synced_len(pydb_shm *s)
{
    uint32_t now;
    return synced_len(s, &now);
}

void pydb__shm_log_synced_to(pydb_shm *s, uint32_t first, uint64_t len)
{
    uint64_t old, want = (uint64_t)first << 32 | len;
    if (!pydb__shm_log_usable(s) || first == 0 || len > 0xffffffffu) return;
    old = __atomic_load_n(u64_at(s, OFF_LOG_SYNCED), __ATOMIC_RELAXED);
    do {
        if ((uint32_t)(old >> 32) == first && (old & 0xffffffffu) >= len)
            return;   /* a later sync said more */
    } while (!__atomic_compare_exchange_n(u64_at(s, OFF_LOG_SYNCED), &old,
                                          want, 1, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
}

/* The sync lock: an OFD lock on byte 1, tried without waiting; its
 * holder's pid and start time at OFF_SYNC_HOLDER / OFF_SYNC_START, so
 * that waiters know a dead one (a pid reused is told by its start). */
int pydb__shm_sync_lock(pydb_shm *s, int lock)
{
    struct flock fl;
    int32_t pid, holder;
    uint64_t start;
    if (!s || s->fd < 0) return -1;
    me(&pid, &start);
    memset(&fl, 0, sizeof fl);
    fl.l_type = (short)(lock ? F_WRLCK : F_UNLCK);
    fl.l_whence = SEEK_SET;
    fl.l_start = 1;
    fl.l_len = 1;
    if (!lock && map_of(s))   /* (only the holder's pid is cleared) */
        __atomic_compare_exchange_n(i32_at(s, OFF_SYNC_HOLDER), &pid, 0, 0,
                                    __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    while (fcntl(s->fd, F_OFD_SETLK, &fl) != 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EACCES) return -1;
        if (!map_of(s)) return 1;
        holder = __atomic_load_n(i32_at(s, OFF_SYNC_HOLDER), __ATOMIC_ACQUIRE);
        start = __atomic_load_n(u64_at(s, OFF_SYNC_START), __ATOMIC_RELAXED);
        return holder == -1 || (holder > 0 && process_gone(holder, start))
                   ? 2 : 1;
    }
    if (lock && map_of(s)) {
        __atomic_store_n(u64_at(s, OFF_SYNC_START), start, __ATOMIC_RELAXED);
        __atomic_store_n(i32_at(s, OFF_SYNC_HOLDER), pid, __ATOMIC_RELEASE);
    }
    return 0;
}

void pydb__shm_sync_lock_stale(pydb_shm *s)
{
    int32_t holder;
    if (!s || !map_of(s)) return;
    holder = __atomic_load_n(i32_at(s, OFF_SYNC_HOLDER), __ATOMIC_ACQUIRE);
    if (holder > 0)
        __atomic_compare_exchange_n(i32_at(s, OFF_SYNC_HOLDER), &holder, -1,
                                    0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

uint32_t pydb__shm_sync_ticket(pydb_shm *s)
{
    return ticket_at(s, OFF_SYNC_WAKE);
}

void pydb__shm_sync_wait(pydb_shm *s, uint32_t ticket, unsigned us)
{
    wait_at(s, OFF_SYNC_WAKE, ticket, us);
}

void pydb__shm_sync_done(pydb_shm *s)
{
    if (!s || !pydb__shm_valid(s)) return;
    if (__atomic_load_n(u32_at(s, OFF_SYNC_WAKE + 4), __ATOMIC_SEQ_CST) != 0)
        wake_at(s, OFF_SYNC_WAKE, INT_MAX);
    else
        __atomic_add_fetch(u32_at(s, OFF_SYNC_WAKE), 1, __ATOMIC_SEQ_CST);
}
