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
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OFF_MAGIC 0
#define OFF_VERSION 8
#define OFF_HEAD 12
#define OFF_READERS 16
#define OFF_SLOTSZ 20
#define OFF_LATEST 24
#define OFF_STAMP 32
#define OFF_STATE 64      /* two slots of STATE_SIZE */
#define STATE_SIZE 64
#define STATE_CRC 56      /* CRC-32C of bytes 0..55 of a state slot */

/* reader slot fields */
#define R_PID 0
#define R_START 8
#define R_COMMIT 16       /* commit + 1; 0 while the reader registers */

struct pydb_shm {
    int fd;
    uint8_t *map;         /* PYDB_SHM_SIZE bytes, or NULL */
    int valid;            /* layout checked (shm.h)       */
    int hint;             /* where the last claim found a free slot */
    uint64_t verified;    /* commit whose state slot passed its CRC:
                             the hot path skips the CRC for it (a slot's
                             bytes do not change while its commit field
                             holds the same number)                    */
    char path[1100];
};

static uint64_t *u64_at(const pydb_shm *s, size_t off)
{
    return (uint64_t *)(void *)(s->map + off);
}

static uint8_t *reader_at(const pydb_shm *s, int i)
{
    return s->map + PYDB_SHM_HEAD + (size_t)i * PYDB_SHM_SLOT;
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

    if (pydb__vfs->ftruncate(fd, PYDB_SHM_SIZE) != 0) return errno;
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

static int map_file(pydb_shm *s)
{
    struct stat st;
    void *m;
    if (fstat(s->fd, &st) != 0 || st.st_size < PYDB_SHM_SIZE) return -1;
    m = mmap(NULL, PYDB_SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd,
             0);
    if (m == MAP_FAILED) return -1;
    s->map = m;
    s->valid = layout_ok(s->map);
    return 0;
}

int pydb__shm_open(pydb_shm **out, const char *path, const char *mst_path,
                   int create, pydb_error *err)
{
    pydb_shm *s;
    struct stat ms, st;
    mode_t mode = 0644;

    *out = NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return PYDB_ERROR(err, PYDB_ENOMEM, path, -1,
                          "no memory for the commit header");
    snprintf(s->path, sizeof s->path, "%s", path);
    if (stat(mst_path, &ms) == 0) mode = ms.st_mode & 0666;
    s->fd = pydb__vfs->open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0),
                            (int)mode);
    if (s->fd < 0) goto unusable;   /* missing, read-only media, permissions */
    if (init_lock(s->fd, F_WRLCK) != 0) goto unusable;
    /* A new (empty) file holds no state: anyone may lay it out. */
    if (fstat(s->fd, &st) == 0 && st.st_size == 0) {
        if (write_layout(s->fd) != 0) {
            init_lock(s->fd, F_UNLCK);
            goto unusable;
        }
    }
    init_lock(s->fd, F_UNLCK);
    map_file(s);    /* too short: unmapped and invalid until a reset */
    *out = s;
    return PYDB_OK;
unusable:
    pydb__shm_close(s);
    return PYDB_OK;
}

void pydb__shm_close(pydb_shm *s)
{
    if (!s) return;
    if (s->map) munmap(s->map, PYDB_SHM_SIZE);
    if (s->fd >= 0) pydb__vfs->close(s->fd);
    free(s);
}

int pydb__shm_valid(const pydb_shm *s)
{
    return s && s->map && s->valid;
}

int pydb__shm_reset(pydb_shm *s, pydb_error *err)
{
    int e;
    if (pydb__shm_valid(s)) return PYDB_OK;
    e = init_lock(s->fd, F_WRLCK);
    if (e == 0) e = write_layout(s->fd);
    init_lock(s->fd, F_UNLCK);
    if (e)
        return PYDB_OSERROR(err, e, s->path, -1,
                            "cannot rebuild the commit header: %s",
                            strerror(e));
    if (s->map) {
        s->valid = layout_ok(s->map);
        return PYDB_OK;
    }
    if (map_file(s) != 0 || !s->valid)
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

static void state_encode(uint8_t *b, const pydb_state *st)
{
    memset(b, 0, STATE_SIZE);
    memcpy(b, &st->commit, 8);
    memcpy(b + 8, &st->next_mfn, 4);
    memcpy(b + 12, &st->next_block, 4);
    memcpy(b + 16, &st->next_pos, 4);
    memcpy(b + 20, &st->reccnt, 4);
    memcpy(b + 24, &st->mst_end, 8);
    memcpy(b + 32, &st->mst_size, 8);
    memcpy(b + 40, &st->xrf_size, 8);
    memcpy(b + 48, &st->index_gen, 8);
    pydb__put32(b + STATE_CRC, pydb__crc32c(0, b, STATE_CRC));
}

static int state_decode(pydb_state *st, const uint8_t *b, int check)
{
    if (check && pydb__u32(b + STATE_CRC) != pydb__crc32c(0, b, STATE_CRC))
        return -1;
    memcpy(&st->commit, b, 8);
    memcpy(&st->next_mfn, b + 8, 4);
    memcpy(&st->next_block, b + 12, 4);
    memcpy(&st->next_pos, b + 16, 4);
    memcpy(&st->reccnt, b + 20, 4);
    memcpy(&st->mst_end, b + 24, 8);
    memcpy(&st->mst_size, b + 32, 8);
    memcpy(&st->xrf_size, b + 40, 8);
    memcpy(&st->index_gen, b + 48, 8);
    return 0;
}

/* Copy the state of commit `c` (0, or -1 if its slot holds another
 * commit or is being written). */
static int state_copy(pydb_state *st, pydb_shm *s, uint64_t c)
{
    int check = __atomic_load_n(&s->verified, __ATOMIC_RELAXED) != c;
    size_t off = OFF_STATE + (size_t)(c & 1) * STATE_SIZE;
    uint64_t *seq = u64_at(s, off);
    uint8_t b[STATE_SIZE];

    if (c == 0) return -1;   /* no commit published yet */
    if (__atomic_load_n(seq, __ATOMIC_ACQUIRE) != c) return -1;
    for (size_t i = 0; i < STATE_SIZE; i += 8) {
        uint64_t w = __atomic_load_n(u64_at(s, off + i), __ATOMIC_RELAXED);
        memcpy(b + i, &w, 8);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(seq, __ATOMIC_RELAXED) != c) return -1;
    if (state_decode(st, b, check) != 0 || st->commit != c) return -1;
    if (check) __atomic_store_n(&s->verified, c, __ATOMIC_RELAXED);
    return 0;
}

int pydb__shm_state(pydb_state *st, pydb_shm *s)
{
    if (!pydb__shm_valid(s)) return -1;
    for (int tries = 0; tries < 1000; tries++) {
        uint64_t c = pydb__shm_latest(s);
        if (c == 0) return -1;
        if (state_copy(st, s, c) == 0) return 0;
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
    state_encode(b, st);
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
    /* a writer that scans the reader table after this sees every reader
     * that registered the previous commit (shm.h, registration) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------- the reader table */

/* Field 22 of /proc/<pid>/stat (start time in clock ticks since boot),
 * or 0 when it cannot be read. */
static uint64_t start_time(pid_t pid)
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
    /* after ")": field 3 (state) ... field 22 (starttime) */
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    if (!p) return 0;
    v = strtoull(p + 1, NULL, 10);
    return v;
}

/* Whether the process that claimed slot r is gone. */
static int slot_dead(const uint8_t *r)
{
    int32_t pid = __atomic_load_n((const int32_t *)(const void *)(r + R_PID),
                                  __ATOMIC_ACQUIRE);
    uint64_t st = __atomic_load_n((const uint64_t *)(const void *)
                                  (r + R_START), __ATOMIC_ACQUIRE);
    uint64_t now;
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    if (st == 0) return 0;            /* start time unknown: alive */
    now = start_time(pid);
    return now != 0 && now != st;     /* the pid belongs to another process */
}

/* Free slot r if it still belongs to `pid` (a dead reader). */
static void slot_clear(uint8_t *r, int32_t pid)
{
    int32_t *p = (int32_t *)(void *)(r + R_PID);
    __atomic_store_n((uint64_t *)(void *)(r + R_COMMIT), 0,
                     __ATOMIC_RELAXED);
    __atomic_compare_exchange_n(p, &pid, 0, 0, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
}

static int claim(pydb_shm *s, int32_t pid, uint64_t stime)
{
    int start = __atomic_load_n(&s->hint, __ATOMIC_RELAXED);
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < PYDB_SHM_READERS; k++) {
            int i = (start + k) % PYDB_SHM_READERS;
            uint8_t *r = reader_at(s, i);
            int32_t *p = (int32_t *)(void *)(r + R_PID);
            int32_t zero = 0, cur;
            cur = __atomic_load_n(p, __ATOMIC_RELAXED);
            if (cur == 0 &&
                __atomic_compare_exchange_n(p, &zero, pid, 0,
                                            __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                __atomic_store_n((uint64_t *)(void *)(r + R_START), stime,
                                 __ATOMIC_RELAXED);
                __atomic_store_n(&s->hint, (i + 1) % PYDB_SHM_READERS,
                                 __ATOMIC_RELAXED);
                return i;
            }
            if (pass == 1 && cur != 0 && slot_dead(r)) {
                slot_clear(r, cur);
                k--;   /* try this slot again */
            }
        }
    }
    return -1;
}

int pydb__shm_pin(int *slot, pydb_state *st, pydb_shm *s, pydb_error *err)
{
    static __thread int32_t my_pid;
    static __thread uint64_t my_start;
    uint64_t *commit;
    uint64_t c;
    int i;

    *slot = -1;
    if (!pydb__shm_valid(s)) return -1;
    if (my_pid != (int32_t)getpid()) {   /* first use, or after fork() */
        my_pid = (int32_t)getpid();
        my_start = start_time(my_pid);
    }
    i = claim(s, my_pid, my_start);
    if (i < 0)
        return PYDB_ERROR(err, PYDB_ELOCKED, s->path, -1,
                          "the reader table is full: %d live readers hold "
                          "snapshots of this database",
                          PYDB_SHM_READERS);
    commit = (uint64_t *)(void *)(reader_at(s, i) + R_COMMIT);
    for (int tries = 0;; tries++) {
        c = pydb__shm_latest(s);
        /* the commit a writer will see, then confirm it is still the
         * latest (a full fence: Dekker with pydb__shm_publish) */
        __atomic_store_n(commit, c + 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (pydb__shm_latest(s) != c) continue;
        if (state_copy(st, s, c) == 0) break;
        if (c == 0 || tries >= 1000) {
            /* no state yet, or a damaged slot: registered, files mode */
            st->commit = 0;
            break;
        }
    }
    *slot = i;
    return PYDB_OK;
}

void pydb__shm_unpin(pydb_shm *s, int slot)
{
    uint8_t *r;
    if (slot < 0 || !pydb__shm_valid(s)) return;
    r = reader_at(s, slot);
    /* Only the process that claimed the slot frees it: a child of fork()
     * that releases a snapshot it inherited leaves its parent's slot. */
    if (__atomic_load_n((int32_t *)(void *)(r + R_PID), __ATOMIC_ACQUIRE) !=
        (int32_t)getpid())
        return;
    __atomic_store_n((uint64_t *)(void *)(r + R_COMMIT), 0, __ATOMIC_RELAXED);
    __atomic_store_n((int32_t *)(void *)(r + R_PID), 0, __ATOMIC_RELEASE);
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
        uint8_t *r = reader_at(s, i);
        int32_t pid = __atomic_load_n((int32_t *)(void *)(r + R_PID),
                                      __ATOMIC_ACQUIRE);
        uint64_t c;
        if (pid == 0) continue;
        c = __atomic_load_n((uint64_t *)(void *)(r + R_COMMIT),
                            __ATOMIC_ACQUIRE);
        if (c == 0) {   /* registering: it will read `latest` or newer */
            n++;
            continue;
        }
        c--;            /* stored as commit + 1 (0: registering) */
        if (c < oldest && slot_dead(r)) {
            slot_clear(r, pid);
            continue;
        }
        n++;
        if (c < oldest) oldest = c;
    }
    if (readers) *readers = n;
    return oldest;
}
