/*
 * wal.c - the write-ahead log: image building, append (the commit
 * point), replay (recovery), reset, and the writer lock on the log file.
 * The format and the rules are in wal.h.
 *
 * Depends on: util.c, path.c, vfs.c, error.c and the handle's fields.
 * Called by txn.c (commit, recovery at pydb_txn_begin) and handle.c
 * (recovery at open); it calls neither.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "wal.h"
#include "shm.h"
#include "nidx_manifest.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAL_MAGIC "PYDBWAL1"
#define WAL_END "PYDBEND1"
#define WAL_MAX_BODY ((uint64_t)1 << 40)  /* sanity bound on a log length */
/* Where a frame's trailer keeps its CRC-32C of header and body, which is
 * also the frame's id (wal.h): bytes from the trailer's start. */
#define WAL_TAIL_CRC 8
/* Where a frame's header keeps its synced length (wal.h). */
#define WAL_HEAD_SYNCED 36

/* ------------------------------------------------------- building images */

int pydb__wal_begin(pydb_buf *log)
{
    PYDB_ASSERT(log->n == 0);
    return pydb__buf_grow(log, PYDB_WAL_HEAD) ? 0 : -1;
}

uint8_t *pydb__wal_entry(pydb_buf *log, uint32_t kind, const char *name,
                         uint64_t off, uint64_t len, uint32_t *count)
{
    size_t nlen = name ? strlen(name) : 0;
    size_t total = PYDB_WAL_ENTRY + nlen + (size_t)len;
    size_t pad = ((total + 7) & ~(size_t)7) - total;
    uint8_t *e;

    PYDB_ASSERT(log->n >= PYDB_WAL_HEAD && nlen <= PYDB_WAL_MAX_PATH);
    PYDB_ASSERT((kind == PYDB_WAL_FILE) == (nlen > 0));
    e = pydb__buf_grow(log, total + pad);
    if (!e) return NULL;
    pydb__put32(e, kind);
    pydb__put32(e + 4, (uint32_t)nlen);
    pydb__put64(e + 8, off);
    pydb__put64(e + 16, len);
    if (nlen) memcpy(e + PYDB_WAL_ENTRY, name, nlen);
    memset(e + total, 0, pad);
    (*count)++;
    return e + PYDB_WAL_ENTRY + nlen;
}

/* The trailer's CRC of the sealed frame log[0..n), of header and body. */
static void frame_crc_set(pydb_buf *log)
{
    size_t end = log->n - PYDB_WAL_TAIL;
    pydb__put32(log->p + end + WAL_TAIL_CRC, pydb__crc32c(0, log->p, end));
}

int pydb__wal_seal(pydb_buf *log, uint32_t count, uint64_t seq,
                   uint64_t synced)
{
    uint8_t *h = log->p, *tl;
    uint64_t body = log->n - PYDB_WAL_HEAD;

    PYDB_ASSERT(log->n >= PYDB_WAL_HEAD && body % 8 == 0);
    memcpy(h, WAL_MAGIC, 8);
    pydb__put32(h + 8, 2);   /* frames that follow each other */
    pydb__put32(h + 12, count);
    pydb__put64(h + 16, body);
    pydb__put64(h + 24, seq);
    pydb__put32(h + 32, pydb__crc32c(0, h, 32));
    pydb__put32(h + WAL_HEAD_SYNCED,
                synced > 0xffffffffu ? 0 : (uint32_t)synced);
    tl = pydb__buf_grow(log, PYDB_WAL_TAIL);
    if (!tl) return -1;
    memcpy(tl, WAL_END, 8);
    pydb__put32(tl + 12, 0);
    frame_crc_set(log);
    return 0;
}

/* ---------------------------------------------------------- log replay */

/* The length a frame at buf[pos..len) declares by a header that checks
 * out (magic, version, header CRC; its body need not), or 0. */
static size_t frame_declared(const uint8_t *buf, size_t pos, size_t len)
{
    const uint8_t *h = buf + pos;
    uint32_t version;
    uint64_t body;
    if (len - pos < PYDB_WAL_HEAD) return 0;
    version = pydb__u32(h + 8);
    if (memcmp(h, WAL_MAGIC, 8) != 0 || (version != 1 && version != 2) ||
        pydb__crc32c(0, h, 32) != pydb__u32(h + 32))
        return 0;
    body = pydb__u64(h + 16);
    if (body % 8 != 0 || body > WAL_MAX_BODY) return 0;
    return (size_t)(PYDB_WAL_HEAD + body + PYDB_WAL_TAIL);
}

/* The length of the complete, checksummed frame at buf[pos..len), or 0
 * when there is none there (a torn frame, or the end). */
static size_t frame_len(const uint8_t *buf, size_t pos, size_t len)
{
    size_t n = frame_declared(buf, pos, len);
    const uint8_t *t;
    if (n == 0 || n > len - pos) return 0;
    t = buf + pos + n - PYDB_WAL_TAIL;
    if (memcmp(t, WAL_END, 8) != 0 ||
        pydb__crc32c(0, buf + pos, n - PYDB_WAL_TAIL) !=
            pydb__u32(t + WAL_TAIL_CRC))
        return 0;
    return n;
}

/* The log's complete frames end at `valid`, before its `len` bytes do.
 * A torn frame there is the end of the log (a crash before that commit
 * point), but a damaged one is not: PYDB_CORRUPT when a complete frame
 * after it says, by its synced length (wal.h), that an fdatasync had
 * covered the log past `valid` before it was built, else PYDB_OK.  The
 * frames looked at are those that follow the bad one where its header
 * (which checks out) says it ends, each after the one before: never a
 * place inside a frame's body, whose bytes are the caller's data and may
 * hold anything, a frame's image included.  A bad frame whose header
 * does not check out ends the log, damaged or torn. */
static int damage_past(const uint8_t *buf, size_t valid, size_t len,
                       const char *wal_path, pydb_error *err)
{
    size_t q = frame_declared(buf, valid, len), n;
    if (q == 0 || q > len - valid) return PYDB_OK;
    q += valid;
    while (q < len && (n = frame_len(buf, q, len)) > 0) {
        uint32_t synced = pydb__u32(buf + q + WAL_HEAD_SYNCED);
        if (synced > valid && synced <= q)
            return PYDB_CORRUPT(err, wal_path, (int64_t)valid,
                                "the commit frame here is damaged: the "
                                "complete frame at offset %zu was written "
                                "after an fdatasync had made the log "
                                "durable up to offset %u, so commits that "
                                "were durable would be lost", q,
                                (unsigned)synced);
        q += n;
    }
    return PYDB_OK;
}

/* Read the whole log (`size` bytes) into *out (malloc'ed) and give in
 * *out_len the length of its complete frames from the start (a torn
 * frame and anything after it are left out: with sync, a frame is
 * written only after the one before it is durable), or fail with
 * PYDB_CORRUPT when a frame after those shows that the one ending them
 * was durable (damage_past).  Returns 1 when there is at least one
 * complete frame, 0 when there is none, or a negative PYDB error. */
static int wal_load(uint8_t **out, size_t *out_len, int wal_fd,
                    int64_t size, const char *wal_path, pydb_error *err)
{
    uint8_t *buf;
    size_t valid = 0, n;

    *out = NULL;
    *out_len = 0;
    if (size < PYDB_WAL_HEAD + PYDB_WAL_TAIL) return 0;
    if ((uint64_t)size > WAL_MAX_BODY)
        return PYDB_CORRUPT(err, wal_path, -1, "the log is %lld bytes, more "
                            "than a log can be", (long long)size);
    buf = malloc((size_t)size);
    if (!buf)
        return PYDB_ERROR(err, PYDB_ENOMEM, wal_path, -1,
                          "no memory for a %lld-byte log", (long long)size);
    for (size_t done = 0; done < (size_t)size;) {
        ssize_t got = pydb__vfs->pread(wal_fd, buf + done,
                                       (size_t)size - done, (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            return PYDB_OSERROR(err, e, wal_path, (int64_t)done,
                                "read failed: %s", strerror(e));
        }
        if (got == 0) {   /* shorter than it was: the frames read so far */
            size = (int64_t)done;
            break;
        }
        done += (size_t)got;
    }
    while ((n = frame_len(buf, valid, (size_t)size)) > 0) valid += n;
    if (valid < (size_t)size) {
        int rc = damage_past(buf, valid, (size_t)size, wal_path, err);
        if (rc) {
            free(buf);
            return rc;
        }
    }
    if (valid == 0) {
        free(buf);
        return 0;
    }
    *out = buf;
    *out_len = valid;
    return 1;
}

/* One entry of a loaded log, in log order (`order`); a whole file's
 * entry that a later one of the same file supersedes has `skip` set
 * (wal_last_files). */
typedef struct wal_ent {
    uint32_t kind, nlen, version;
    const uint8_t *name, *data;
    uint64_t off, dlen;
    size_t order;
    int skip;
} wal_ent;

/* What replay writes of an .mst or .xrf entry: `len` bytes at file
 * offset `off`, from the entry's data at off - e->off (wal_final_image). */
typedef struct wal_piece {
    const wal_ent *e;
    uint64_t off, len;
} wal_piece;

/* Whole-file entries by name, then log order (wal_last_files). */
static int file_ent_cmp(const void *a, const void *b)
{
    const wal_ent *x = *(const wal_ent *const *)a, *y = *(const wal_ent *const *)b;
    int c = memcmp(x->name, y->name, x->nlen < y->nlen ? x->nlen : y->nlen);
    if (c) return c;
    if (x->nlen != y->nlen) return x->nlen < y->nlen ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Split the frames of buf[0..len) into entries (*out, malloc'ed; *n).
 * 0 or a PYDB error (an entry that passes its frame's end). */
static int wal_entries(wal_ent **out, size_t *n, const uint8_t *buf,
                       size_t len, const char *wal_path, pydb_error *err)
{
    size_t cap = len / PYDB_WAL_ENTRY + 1, k = 0, pos = 0;
    wal_ent *v = malloc(cap * sizeof *v);

    *out = NULL;
    *n = 0;
    if (!v)
        return PYDB_ERROR(err, PYDB_ENOMEM, wal_path, -1,
                          "no memory for the log's entries");
    while (pos < len) {
        size_t flen = frame_len(buf, pos, len);
        size_t end = pos + flen - PYDB_WAL_TAIL, at = pos + PYDB_WAL_HEAD;
        uint32_t count = pydb__u32(buf + pos + 12);
        uint32_t version = pydb__u32(buf + pos + 8);
        PYDB_ASSERT(flen > 0);   /* wal_load() kept complete frames only */
        for (uint32_t i = 0; i < count; i++) {
            wal_ent *e = &v[k];
            if (end - at < PYDB_WAL_ENTRY || k == cap) {
                free(v);
                return PYDB_CORRUPT(err, wal_path, (int64_t)at, "log entry "
                                    "%u passes the end of its commit", i + 1);
            }
            e->kind = pydb__u32(buf + at);
            e->nlen = pydb__u32(buf + at + 4);
            e->off = pydb__u64(buf + at + 8);
            e->dlen = pydb__u64(buf + at + 16);
            at += PYDB_WAL_ENTRY;
            if (e->nlen > PYDB_WAL_MAX_PATH || e->dlen > end - at ||
                e->nlen > end - at - e->dlen ||
                e->off > PYDB_WAL_MAX_END ||
                e->dlen > PYDB_WAL_MAX_END - e->off ||
                (e->kind == PYDB_WAL_FILE) != (e->nlen > 0) ||
                e->kind < PYDB_WAL_MST || e->kind > PYDB_WAL_FILE) {
                free(v);
                return PYDB_CORRUPT(err, wal_path, (int64_t)at, "log entry "
                                    "%u has impossible lengths or kind", i + 1);
            }
            e->version = version;
            e->name = buf + at;
            e->data = buf + at + e->nlen;
            e->order = k++;
            e->skip = 0;
            at = (at + e->nlen + (size_t)e->dlen + 7) & ~(size_t)7;
            if (at > end) at = end;
        }
        pos += flen;
    }
    *out = v;
    *n = k;
    return PYDB_OK;
}

/* The folder part of path (shorter than PATH_MAX) into out[PATH_MAX], by
 * its name only: dirname(3) ("." for a bare name, "/" for a file of the
 * root folder). */
static void parent_of(char *out, const char *path)
{
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    snprintf(out, PATH_MAX, "%s", dirname(copy));
}

/* The folder of `path` (resolved: realpath) into out[PATH_MAX]; -1
 * when it cannot be resolved. */
static int folder_of(char *out, const char *path)
{
    char d[PATH_MAX];
    if (strlen(path) >= sizeof d) return -1;
    parent_of(d, path);
    return realpath(d, out) ? 0 : -1;
}

/* The part of folder `sub` below folder `top` (both resolved): "" when
 * they are the same, NULL when sub is not inside top. */
static const char *below(const char *sub, const char *top)
{
    size_t n = strlen(top);
    if (strcmp(top, "/") == 0) return sub + 1;
    if (strncmp(sub, top, n) != 0) return NULL;
    if (sub[n] == 0) return sub + n;
    return sub[n] == '/' ? sub + n + 1 : NULL;
}

int pydb__wal_file_name(char *out, size_t cap, const char *wal_path,
                        const char *path)
{
    char top[PATH_MAX], dir[PATH_MAX];
    const char *rel, *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *wslash = strrchr(wal_path, '/');
    size_t wn = wslash ? (size_t)(wslash - wal_path) + 1 : 0;
    int n;
    /* the usual case without resolving: the file is named from the same
     * folder as the log (the index's folder is the database's name +
     * ".pdx"), below it, without a ".." component */
    if (strncmp(path, wal_path, wn) == 0 && path[wn] && path[wn] != '/' &&
        strcmp(path + wn, "..") != 0 && strncmp(path + wn, "../", 3) != 0 &&
        !strstr(path + wn, "/../") && !strstr(path + wn, "/./") &&
        strncmp(path + wn, "./", 2) != 0 &&
        !(strlen(base) <= 2 && base[0] == '.')) {
        n = snprintf(out, cap, "%s", path + wn);
        return n < 0 || (size_t)n >= cap ? -1 : 0;
    }
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 ||
        folder_of(top, wal_path) != 0 || folder_of(dir, path) != 0 ||
        (rel = below(dir, top)) == NULL)
        return -1;
    n = *rel ? snprintf(out, cap, "%s/%s", rel, base)
             : snprintf(out, cap, "%s", base);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* The file a whole-file entry names, into out[PATH_MAX]: a version 2
 * name (relative, without a ".." component) joined to the log's folder;
 * a version 1 name (as the writer gave it: absolute, or relative to its
 * working folder) as it is, if its folder lies in the log's.  -1 for a
 * name that points elsewhere (a damaged or hostile log). */
static int wal_file_path(char *out, const pydb_wal_files *w,
                         const wal_ent *e)
{
    char top[PATH_MAX], dir[PATH_MAX], name[PYDB_WAL_MAX_PATH + 1];
    memcpy(name, e->name, e->nlen);
    name[e->nlen] = 0;
    if (strlen(name) != e->nlen || folder_of(top, w->wal_path) != 0)
        return -1;
    if (e->version == 1) {
        if (folder_of(dir, name) != 0 || below(dir, top) == NULL) return -1;
        memcpy(out, name, e->nlen + 1);
        return 0;
    }
    if (name[0] == '/' || strcmp(name, "..") == 0 || strncmp(name, "../", 3) == 0 ||
        strstr(name, "/../") != NULL ||
        (e->nlen >= 3 && strcmp(name + e->nlen - 3, "/..") == 0))
        return -1;
    return snprintf(out, PATH_MAX, "%s/%s", top, name) < PATH_MAX ? 0 : -1;
}

/* Mark each whole-file entry that a later entry of the same file
 * supersedes (`skip`): replay writes and checkpoints sync the last copy
 * only.  0 or PYDB_ENOMEM. */
static int wal_last_files(wal_ent *v, size_t n, const char *wal_path,
                          pydb_error *err)
{
    wal_ent **p;
    size_t k = 0;
    if (n < 2) return PYDB_OK;
    p = malloc(n * sizeof *p);
    if (!p)
        return PYDB_ERROR(err, PYDB_ENOMEM, wal_path, -1,
                          "no memory for the log's entries");
    for (size_t i = 0; i < n; i++)
        if (v[i].kind == PYDB_WAL_FILE) p[k++] = &v[i];
    qsort(p, k, sizeof *p, file_ent_cmp);
    for (size_t i = 0; i + 1 < k; i++) {
        const wal_ent *f = p[i + 1];
        if (f->nlen == p[i]->nlen && memcmp(f->name, p[i]->name, f->nlen) == 0)
            p[i]->skip = 1;
    }
    free(p);
    return PYDB_OK;
}

/* Byte ranges [a, b) of one file that later entries write, disjoint,
 * sorted, touching ones merged (wal_final_image). */
typedef struct wal_cover {
    uint64_t (*r)[2];
    size_t n, cap;
} wal_cover;

/* Append piece {e, off, len} to *out (growing it).  0 or -1 (memory). */
static int piece_add(wal_piece **out, size_t *n, size_t *cap,
                     const wal_ent *e, uint64_t off, uint64_t len)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        wal_piece *p = realloc(*out, c * sizeof *p);
        if (!p) return -1;
        *out = p;
        *cap = c;
    }
    (*out)[(*n)++] = (wal_piece){e, off, len};
    return 0;
}

/* The parts of entry e that no range of *c covers become pieces; then
 * e's range joins *c.  0 or -1 (memory). */
static int cover_take(wal_cover *c, const wal_ent *e, wal_piece **out,
                      size_t *n, size_t *cap)
{
    uint64_t at = e->off, end = e->off + e->dlen;
    size_t i, j, lo = 0, hi = c->n;
    while (lo < hi) {   /* i: the first range ending at or after e's start */
        size_t mid = lo + (hi - lo) / 2;
        if (c->r[mid][1] < at) lo = mid + 1; else hi = mid;
    }
    i = lo;
    for (j = i; j < c->n && c->r[j][0] <= end; j++) {
        if (c->r[j][0] > at &&
            piece_add(out, n, cap, e, at, c->r[j][0] - at) != 0)
            return -1;
        if (c->r[j][1] > at) at = c->r[j][1];
    }
    if (at < end && piece_add(out, n, cap, e, at, end - at) != 0) return -1;
    /* ranges i..j-1 touch or overlap e's: they merge into one */
    if (j > i) {
        uint64_t a = c->r[i][0] < e->off ? c->r[i][0] : e->off;
        uint64_t b = c->r[j - 1][1] > end ? c->r[j - 1][1] : end;
        c->r[i][0] = a;
        c->r[i][1] = b;
        memmove(c->r + i + 1, c->r + j, (c->n - j) * sizeof *c->r);
        c->n -= j - i - 1;
        return 0;
    }
    if (c->n == c->cap) {
        size_t k = c->cap ? 2 * c->cap : 16;
        void *p = realloc(c->r, k * sizeof *c->r);
        if (!p) return -1;
        c->r = p;
        c->cap = k;
    }
    memmove(c->r + i + 1, c->r + i, (c->n - i) * sizeof *c->r);
    c->r[i][0] = e->off;
    c->r[i][1] = end;
    c->n++;
    return 0;
}

static int piece_cmp(const void *a, const void *b)
{
    const wal_piece *x = a, *y = b;
    if (x->e->order != y->e->order) return x->e->order < y->e->order ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* What replay writes of the .mst and .xrf entries v[0..n): every byte
 * once, with the value of the last commit that writes it -- so that
 * replaying applied commits again never shows a reader an older XRF
 * entry, control record or an earlier commit's block padding over a
 * later one's records.  An entry is cut around every range a later
 * entry of the same file writes (anywhere inside it: a later commit
 * rewrites single XRF blocks inside an earlier one's run of blocks).
 * The pieces (*out, malloc'ed; *count) come in log order, each entry's
 * by offset.  0 or PYDB_ENOMEM. */
static int wal_final_image(wal_piece **out, size_t *count, const wal_ent *v,
                           size_t n, const char *wal_path, pydb_error *err)
{
    wal_cover cov[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
    size_t cap = 0;
    int rc = PYDB_OK;

    *out = NULL;
    *count = 0;
    for (size_t i = n; i-- > 0 && rc == PYDB_OK;) {   /* the last first */
        if (v[i].kind == PYDB_WAL_FILE || v[i].dlen == 0) continue;
        if (cover_take(&cov[v[i].kind == PYDB_WAL_XRF], &v[i], out, count,
                       &cap) != 0)
            rc = PYDB_ERROR(err, PYDB_ENOMEM, wal_path, -1,
                            "no memory for the log's entries");
    }
    free(cov[0].r);
    free(cov[1].r);
    if (rc) {
        free(*out);
        *out = NULL;
        *count = 0;
        return rc;
    }
    if (*count > 1) qsort(*out, *count, sizeof **out, piece_cmp);
    return PYDB_OK;
}

/* fdatasync the .mst and the .xrf. */
static int wal_sync_files(const pydb_wal_files *w, int *fsync_failed,
                          pydb_error *err)
{
    if (pydb__vfs->fdatasync(w->mst_fd) != 0) {
        *fsync_failed = 1;
        return PYDB_OSERROR(err, errno, w->mst_path, -1,
                            "fdatasync failed: %s", strerror(errno));
    }
    if (pydb__vfs->fdatasync(w->xrf_fd) != 0) {
        *fsync_failed = 1;
        return PYDB_OSERROR(err, errno, w->xrf_path, -1,
                            "fdatasync failed: %s", strerror(errno));
    }
    return PYDB_OK;
}

/* Ask the kernel to start writing path's dirty pages back, so that the
 * fsyncs that follow wait on writes already under way rather than each
 * on its own (about half the time per file for many small files here).
 * A hint only: not through the vfs table, failures ignored. */
static void start_writeback(const char *path)
{
#ifdef __linux__
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    close(fd);
#else
    (void)path;
#endif
}

/* Folders to fsync once each (sync_whole_files). */
typedef struct folders {
    char (*v)[PATH_MAX];
    size_t n;
} folders;

/* Add the folder of `path` to f unless it is there. */
static int folders_add(folders *f, const char *path, pydb_error *err)
{
    char dir[PATH_MAX];
    void *p;
    parent_of(dir, path);
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->v[i], dir) == 0) return PYDB_OK;
    p = realloc(f->v, (f->n + 1) * sizeof *f->v);
    if (!p) return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
    f->v = p;
    memcpy(f->v[f->n++], dir, strlen(dir) + 1);
    return PYDB_OK;
}

/* fsync the files the whole-file entries of v[0..n) name (the last copy
 * of each: wal_final_image), which commits that keep their frame and
 * replay put in place unsynced (a native index's MANIFEST swapped in by a
 * commit, renamed in by replay; its segment files written before their
 * frame: txn.c,
 * pydb__txn_log_file) -- writeback of all started first -- then each of
 * their folders once.  A file removed since (a dropped index; a segment
 * an index build or a collection removed) is skipped; a name that cannot
 * be resolved is an error, so that a checkpoint never empties a log
 * whose files it could not sync. */
static int sync_whole_files(const wal_ent *v, size_t n,
                            const pydb_wal_files *w, int *fsync_failed,
                            pydb_error *err)
{
    folders f = {NULL, 0};
    int rc = PYDB_OK;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (!v[i].skip && v[i].kind == PYDB_WAL_FILE &&
            wal_file_path(path, w, &v[i]) == 0)
            start_writeback(path);
    }
    for (size_t i = 0; i < n && rc == PYDB_OK; i++) {
        char path[PATH_MAX];
        int absent;
        if (v[i].skip || v[i].kind != PYDB_WAL_FILE) continue;
        if (wal_file_path(path, w, &v[i]) != 0) {
            rc = PYDB_ERROR(err, PYDB_EIO, w->wal_path, -1, "cannot "
                            "resolve a whole file the log names: %.*s",
                            (int)(v[i].nlen > 200 ? 200 : v[i].nlen),
                            (const char *)v[i].name);
            break;
        }
        if ((rc = pydb__fsync_if_present(path, &absent, err))) {
            *fsync_failed = 1;
            break;
        }
        if (!absent) rc = folders_add(&f, path, err);
    }
    for (size_t i = 0; i < f.n && rc == PYDB_OK; i++)
        if ((rc = pydb__fsync_dir(f.v[i], err))) *fsync_failed = 1;
    free(f.v);
    return rc;
}

/* Apply the complete frames buf[0..len) to the files (wal_final_image).
 * fsync'ed unless !sync.  `seq` (or NULL): the sequence lock of a handle
 * reading these files, held odd while the .mst/.xrf bytes are written
 * (not over the fsyncs).  *index_gen gets the generation of the last
 * native index MANIFEST written (its head in the log's checked bytes;
 * NIDX_GEN_UNKNOWN for a head that does not parse), 0 for none. */
static int wal_apply(const uint8_t *buf, size_t len, const pydb_wal_files *w,
                     int sync, uint64_t *index_gen, int *fsync_failed,
                     pydb_error *err)
{
    wal_ent *v = NULL;
    wal_piece *pc = NULL;
    size_t n = 0, np = 0;
    int rc, e;

    rc = wal_entries(&v, &n, buf, len, w->wal_path, err);
    if (rc == PYDB_OK) rc = wal_last_files(v, n, w->wal_path, err);
    if (rc == PYDB_OK) rc = wal_final_image(&pc, &np, v, n, w->wal_path, err);
    /* every whole file's name first: a log that names a file outside the
     * database's folder changes nothing */
    for (size_t i = 0; i < n && rc == PYDB_OK; i++) {
        char path[PATH_MAX];
        if (v[i].kind == PYDB_WAL_FILE && wal_file_path(path, w, &v[i]) != 0)
            rc = PYDB_CORRUPT(err, w->wal_path, -1, "a log entry names a "
                              "file outside the database's folder: %.*s",
                              (int)(v[i].nlen > 200 ? 200 : v[i].nlen),
                              (const char *)v[i].name);
    }
    if (rc) goto cleanup;
    /* the .mst and .xrf in log order (each commit's control record after
     * its records and XRF blocks), inside the sequence lock */
    if (w->seq) {
        uint64_t odd = __atomic_add_fetch(w->seq, 1, __ATOMIC_ACQ_REL);
        PYDB_ASSERT(odd & 1);   /* no other writer inside the lock */
    }
    for (size_t i = 0; i < np && rc == PYDB_OK; i++) {
        const wal_piece *q = &pc[i];
        int mst = q->e->kind == PYDB_WAL_MST;
        e = -pydb__write_full(mst ? w->mst_fd : w->xrf_fd,
                              q->e->data + (q->off - q->e->off),
                              (size_t)q->len, (int64_t)q->off);
        if (e)
            rc = PYDB_OSERROR(err, e, mst ? w->mst_path : w->xrf_path,
                              (int64_t)q->off, "write failed: %s",
                              strerror(e));
    }
    if (w->seq) {
        uint64_t even = __atomic_add_fetch(w->seq, 1, __ATOMIC_RELEASE);
        PYDB_ASSERT((even & 1) == 0);
    }
    if (rc) goto cleanup;
    if (sync) rc = wal_sync_files(w, fsync_failed, err);
    /* then the whole files, unsynced, and (sync) all of them at once */
    for (size_t i = 0; i < n && rc == PYDB_OK; i++) {
        char path[PATH_MAX];
        if (v[i].skip || v[i].kind != PYDB_WAL_FILE) continue;
        if (wal_file_path(path, w, &v[i]) == 0) {   /* (checked above) */
            const char *slash = strrchr(path, '/');
            rc = pydb__replace_file(path, NULL, v[i].data,
                                    (size_t)v[i].dlen, 0, fsync_failed,
                                    err);
            if (rc == PYDB_OK && strcmp(slash ? slash + 1 : path,
                                        "MANIFEST") == 0)
                *index_gen = pydb__nman_generation_of(v[i].data,
                                                      (size_t)v[i].dlen);
        }
    }
    if (rc == PYDB_OK && sync)
        rc = sync_whole_files(v, n, w, fsync_failed, err);
cleanup:
    free(pc);
    free(v);
    return rc;
}

/* Empty the log (truncate it to 0 bytes) and tell the commit header so:
 * its applied length is 0 while the file shrinks (never a length past
 * the file's end).  When the truncation fails, the header's length and
 * first frame are put back, so that the next frame is written after the
 * frames still there and never over them (wal.h: no older frame lies
 * past the zeros).  0, or -1 with errno. */
static int log_empty(pydb_shm *shm, int wal_fd)
{
    uint64_t len = 0;
    uint32_t first = 0;
    int had = pydb__shm_log_applied(shm, &len, &first), e;
    pydb__shm_log_set(shm, 0, 0);
    if (pydb__vfs->ftruncate(wal_fd, 0) == 0) return 0;
    e = errno;
    if (had) pydb__shm_log_set(shm, len, first);
    errno = e;
    return -1;
}

/* Empty the log durably: the truncation (log_empty, of a log that has a
 * `size`), then its fdatasync.  A failure leaves the handle writable:
 * the files hold every commit (synced), so the log has nothing to lose,
 * and the next commit's frame follows those still there with an
 * fdatasync of its own. */
static int wal_reset(const pydb_wal_files *w, int64_t size, pydb_error *err)
{
    if (size == 0)
        pydb__shm_log_set(w->shm, 0, 0);
    else if (log_empty(w->shm, w->wal_fd) != 0)
        return PYDB_OSERROR(err, errno, w->wal_path, -1,
                            "ftruncate failed: %s", strerror(errno));
    if (pydb__vfs->fdatasync(w->wal_fd) != 0)
        return PYDB_OSERROR(err, errno, w->wal_path, -1,
                            "fdatasync of the emptied log failed: %s",
                            strerror(errno));
    return PYDB_OK;
}

/* Whether the first `len` bytes of the log `fd` hold a whole first
 * frame whose id (its trailer's CRC) is `first`. */
static int first_frame_is(int fd, uint32_t first, uint64_t len)
{
    uint8_t h[PYDB_WAL_HEAD], id[4];
    uint64_t body;
    if (pydb__vfs->pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h ||
        memcmp(h, WAL_MAGIC, 8) != 0)
        return 0;
    body = pydb__u64(h + 16);
    return body <= len && PYDB_WAL_HEAD + body + PYDB_WAL_TAIL <= len &&
           pydb__vfs->pread(fd, id, 4, (off_t)(PYDB_WAL_HEAD + body +
                                               WAL_TAIL_CRC)) == 4 &&
           pydb__u32(id) == first;
}

/* What the log holds against the files (wal_unapplied, wal_pending). */
enum {
    LOG_APPLIED = 0,    /* nothing, or only frames applied in this boot  */
    LOG_PENDING = 1,    /* maybe a frame not applied: replay it          */
    LOG_CUT_SHORT = 2   /* frames applied in this boot, and frames applied
                           after them lost: sync the files, replay none  */
};

/* What the log `fd` of `size` bytes holds, given the header's applied
 * length and first frame's id (its trailer's CRC: pydb__shm_log_applied).
 *   LOG_APPLIED: the log is the header's and ends at that length, or
 *     zeros follow it.  A frame is written from its start, and its
 *     header's first bytes are never zeros, so a header's worth of bytes
 *     tells.
 *   LOG_CUT_SHORT: the log is the header's (its first frame is whole and
 *     the one the header names) but shorter than that length: damage, or
 *     a program that truncated it.  Every frame it still holds was
 *     applied in this boot and the frames applied after them are gone,
 *     so a replay would write the older values of its frames over the
 *     newer ones in the files -- acknowledged commits undone, and XRF
 *     entries the lost frames wrote left pointing past the control
 *     record's end.
 *   LOG_PENDING: anything else -- its first frame is not the header's (a
 *     process without a usable header emptied the log and wrote its
 *     own), or not whole in a log shorter than that length; the bytes at
 *     that length are not zeros (the start of a frame, whole or torn:
 *     wal.h); or they cannot be read. */
static int wal_unapplied(int fd, uint64_t applied, uint32_t first,
                         int64_t size)
{
    uint8_t h[PYDB_WAL_HEAD];
    uint64_t left;
    size_t n;

    if (size < 0) return LOG_PENDING;
    if (applied > (uint64_t)size)
        return first_frame_is(fd, first, (uint64_t)size) ? LOG_CUT_SHORT
                                                         : LOG_PENDING;
    if (applied > 0 && !first_frame_is(fd, first, applied)) return LOG_PENDING;
    left = (uint64_t)size - applied;
    if (left == 0) return LOG_APPLIED;
    n = left < sizeof h ? (size_t)left : sizeof h;
    if (pydb__vfs->pread(fd, h, n, (off_t)applied) != (ssize_t)n)
        return LOG_PENDING;
    for (size_t i = 0; i < n; i++)
        if (h[i]) return LOG_PENDING;
    return LOG_APPLIED;
}

/* The log's length in *size (its file's, a grown tail of zeros
 * included), and what it holds (wal_unapplied; LOG_APPLIED also when it
 * is empty, LOG_PENDING when the header knows no log of this boot), or
 * a negative PYDB error. */
static int wal_pending(const pydb_wal_files *w, int64_t *size,
                       pydb_error *err)
{
    uint64_t applied;
    uint32_t first;
    int rc;
    if (pydb__fd_size(w->wal_fd, size) != 0)
        return PYDB_OSERROR(err, errno, w->wal_path, -1, "cannot stat: %s",
                            strerror(errno));
    if (*size == 0) {
        /* emptied by a process without a usable header (files mode),
         * which cannot change the header: forget the header's log, of
         * which sync=False handles remember synced frames (txn.c) */
        if (pydb__shm_log_applied(w->shm, &applied, &first) && applied)
            pydb__shm_log_set(w->shm, 0, 0);
        return LOG_APPLIED;
    }
    if (!pydb__shm_log_applied(w->shm, &applied, &first)) return LOG_PENDING;
    rc = wal_unapplied(w->wal_fd, applied, first, *size);
    /* an fdatasync of its frames failed: the disk may lack one the
     * length counts (txn.c, log_sync): replay it from the page cache */
    return rc == LOG_APPLIED && pydb__shm_log_suspect(w->shm) ? LOG_PENDING
                                                            : rc;
}

/* Whether the files a replay wrote are still those their paths name:
 * not a pair a compaction replaced since the handle opened it (a handle
 * that has not switched yet must switch first: the log's frames are of
 * the newest pair, as a compaction empties the log before its swap). */
static int wal_files_current(const pydb_wal_files *w)
{
    return pydb__same_file(w->mst_fd, w->mst_path) &&
           pydb__same_file(w->xrf_fd, w->xrf_path);
}

/* After a replay, under the writer lock: the files' state published, as
 * the dead writer whose commit the replay finished would have, so that
 * readers go on reading a published state, never the files half-applied
 * (the records of a commit without its index).  The control record just
 * written, the files' sizes, and `index_gen`, the generation of the
 * MANIFEST the replay wrote (0: none, the header's stays; a merge's or a
 * rebuild's commit changes the MANIFEST alone, and a snapshot must find
 * the set its state names).  1 when published; 0 when nothing was: no
 * state in the header yet (the writer's open publishes one), a
 * compaction's swap pending (its recovery publishes the new pair), a
 * control record that cannot be read or is older than the latest state,
 * or a MANIFEST head that does not parse -- the caller then leaves the
 * applying marker set, so that readers keep the header's latest state
 * until a writer publishes. */
static int header_publish_replayed(const pydb_wal_files *w,
                                   uint64_t index_gen)
{
    uint8_t ctl[PYDB_CTL_SIZE];
    struct stat ms, xs;
    pydb_state prev, st;
    pydb_ctl c;

    if (!w->shm || pydb__shm_state(&prev, w->shm) != 0 ||
        index_gen == NIDX_GEN_UNKNOWN)
        return 0;
    if (pydb__swap_pending(w->mst_path)) return 0;
    if (pydb__vfs->pread(w->mst_fd, ctl, sizeof ctl, 0) != (ssize_t)sizeof ctl ||
        fstat(w->mst_fd, &ms) != 0 || fstat(w->xrf_fd, &xs) != 0)
        return 0;
    pydb__ctl_decode(&c, ctl);
    pydb__state_of_ctl(&st, &c);
    if (!pydb__ctl_sane(&c) || st.next_mfn < prev.next_mfn ||
        st.mst_end < prev.mst_end)
        return 0;
    st.mst_size = (int64_t)ms.st_size;
    st.xrf_size = (int64_t)xs.st_size;
    st.file_gen = prev.file_gen;
    st.index_gen = index_gen ? index_gen : prev.index_gen;
    pydb__shm_publish(w->shm, &st);
    return 1;
}

/* Replay every complete frame (a torn one is dropped), fsync the files,
 * empty the log. */
static int wal_replay(const pydb_wal_files *w, int64_t size,
                      int *fsync_failed, pydb_error *err)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    uint64_t index_gen = 0;
    int rc = wal_load(&buf, &len, w->wal_fd, size, w->wal_path, err);
    if (rc < 0) return rc;
    if (rc == 1 && !wal_files_current(w)) {
        free(buf);
        return PYDB_ERROR(err, PYDB_EIO, w->mst_path, -1,
                          "the log holds commits of the master file that "
                          "replaced the one this handle has open (a "
                          "compaction's): not replayed into the old one");
    }
    if (rc == 1) {
        /* as a commit applies: the marker before the first file is
         * written, cleared once the state is published -- a replay that
         * fails or is killed half-way leaves it, so readers keep the
         * header's latest state until the next recovery (shm.h) */
        pydb__shm_applying(w->shm, 1);
        rc = wal_apply(buf, len, w, 1, &index_gen, fsync_failed, err);
        free(buf);
        if (rc) return rc;
        if (header_publish_replayed(w, index_gen))
            pydb__shm_applying(w->shm, 0);
    }
    return wal_reset(w, size, err);
}

/* A checkpoint of commits that kept their frames: fsync the whole files
 * the log's `size` bytes name (sync_whole_files). */
static int wal_sync_whole(const pydb_wal_files *w, int64_t size,
                          int *fsync_failed, pydb_error *err)
{
    uint8_t *buf = NULL;
    size_t len = 0, n = 0;
    wal_ent *v = NULL;
    int rc = wal_load(&buf, &len, w->wal_fd, size, w->wal_path, err);
    if (rc <= 0) return rc;
    rc = wal_entries(&v, &n, buf, len, w->wal_path, err);
    if (rc == PYDB_OK) rc = wal_last_files(v, n, w->wal_path, err);
    if (rc == PYDB_OK) rc = sync_whole_files(v, n, w, fsync_failed, err);
    free(v);
    free(buf);
    return rc;
}

/* A checkpoint of a log whose frames are all applied (wal_pending:
 * LOG_APPLIED, or LOG_CUT_SHORT: `lost`): fsync the .mst/.xrf and the
 * whole files the log's `size` bytes name, then empty it. */
static int wal_sync_applied(const pydb_wal_files *w, int64_t size, int lost,
                            int *fsync_failed, pydb_error *err)
{
    int rc;
    if (size > 0 && ((rc = wal_sync_files(w, fsync_failed, err)) != PYDB_OK ||
                     (rc = wal_sync_whole(w, size, fsync_failed, err)) != PYDB_OK)) {
        /* the page cache may have dropped what it failed to write: the
         * next recovery replays the whole log (writes it again) -- not a
         * log that lost frames applied after those it holds, whose
         * replay would undo them */
        if (!lost) pydb__shm_log_set(w->shm, 0, 0);
        return rc;
    }
    return wal_reset(w, size, err);
}

int pydb__wal_recover(const pydb_wal_files *w, int *fsync_failed,
                      pydb_error *err)
{
    int64_t size;
    int rc = wal_pending(w, &size, err);
    if (rc < 0 || rc == LOG_APPLIED) return rc;
    if (rc == LOG_CUT_SHORT)
        /* the log is of the newest pair (a compaction empties it before
         * its swap): a handle still on the old one leaves it alone */
        return wal_files_current(w)
                   ? wal_sync_applied(w, size, 1, fsync_failed, err)
                   : PYDB_OK;
    return wal_replay(w, size, fsync_failed, err);
}

int pydb__wal_checkpoint(const pydb_wal_files *w, int *fsync_failed,
                         pydb_error *err)
{
    int64_t size;
    int rc;
    /* a handle still on a pair a compaction replaced would sync the old
     * files and empty a log whose commits are in the new ones: it leaves
     * the log to a handle on the newest pair */
    if (!wal_files_current(w)) return PYDB_OK;
    rc = wal_pending(w, &size, err);
    if (rc < 0) return rc;
    if (rc == LOG_PENDING) return wal_replay(w, size, fsync_failed, err);
    return wal_sync_applied(w, size, rc == LOG_CUT_SHORT, fsync_failed, err);
}

/* ------------------------------------- a compaction's swap (compact.c) */

int pydb__swap_names(char *new_mst, char *new_xrf, char *marker,
                     char *tgt_mst, char *tgt_xrf, size_t cap,
                     const char *mst, const char *xrf)
{
    if (pydb__link_target(tgt_mst, cap, mst) != 0 ||
        pydb__link_target(tgt_xrf, cap, xrf) != 0 ||
        (size_t)snprintf(new_mst, cap, "%s%s", tgt_mst,
                         PYDB_COMPACT_SUFFIX) >= cap ||
        (size_t)snprintf(new_xrf, cap, "%s%s", tgt_xrf,
                         PYDB_COMPACT_SUFFIX) >= cap ||
        (size_t)snprintf(marker, cap, "%s%s", tgt_mst, PYDB_SWAP_SUFFIX) >=
            cap)
        return -1;
    return 0;
}

void pydb__swap_publish(struct pydb_shm *shm, const uint8_t *ctl,
                        int64_t mst_size, int64_t xrf_size)
{
    pydb_state prev, st;
    pydb_ctl c;
    uint64_t from = 0;

    if (!pydb__shm_valid(shm)) return;
    pydb__ctl_decode(&c, ctl);
    pydb__state_of_ctl(&st, &c);
    st.mst_size = mst_size;
    st.xrf_size = xrf_size;
    st.file_gen = pydb__shm_file_gen(shm) + 1;
    if (pydb__shm_state(&prev, shm) == 0) {
        from = prev.commit;
        st.index_gen = prev.index_gen;
        if (prev.file_gen + 1 > st.file_gen) st.file_gen = prev.file_gen + 1;
    }
    st.commit = pydb__shm_latest(shm) + 1;   /* what publish will give */
    if (from) pydb__shm_swap_set(shm, from, &st);
    pydb__shm_publish(shm, &st);
    pydb__shm_garbage_reset(shm);
}

/* Remove `path` unless a live compaction job holds its lock. */
static void remove_unlocked(const char *path)
{
    struct flock fl;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) unlink(path);
    close(fd);
}

int pydb__swap_recover(const char *mst, const char *xrf,
                       struct pydb_shm *shm, int *finished, pydb_error *err)
{
    char nm[1200], nx[1200], mk[1200], tm[1200], tx[1200];
    struct stat st, ms, xs;
    uint8_t ctl[PYDB_CTL_SIZE];
    pydb_state cur;
    pydb_ctl c;
    int fd, rc = PYDB_OK;

    *finished = 0;
    if (pydb__swap_names(nm, nx, mk, tm, tx, sizeof nm, mst, xrf) != 0)
        return PYDB_OK;
    mst = tm;   /* the files the swap replaces (a link's target) */
    xrf = tx;
    if (stat(mk, &st) != 0) {
        /* no intent: a dead job's leftovers (a live job, of any handle,
         * holds an OFD lock on its files) */
        remove_unlocked(nm);
        remove_unlocked(nx);
        return PYDB_OK;
    }
    /* The new files were complete and synced before the marker was
     * written: finish the renames (the XRF first, as the swap does). */
    if (stat(nx, &st) == 0 && pydb__vfs->rename(nx, xrf) != 0)
        return PYDB_OSERROR(err, errno, xrf, -1, "cannot finish a "
                            "compaction's swap: rename of %s: %s", nx,
                            strerror(errno));
    if (stat(nm, &st) == 0 && pydb__vfs->rename(nm, mst) != 0)
        return PYDB_OSERROR(err, errno, mst, -1, "cannot finish a "
                            "compaction's swap: rename of %s: %s", nm,
                            strerror(errno));
    rc = pydb__fsync_parent(mst, err);   /* (in both sync modes) */
    if (rc) return rc;
    /* A header that does not describe the new files yet gets their state
     * as the next generation (readers of the old pair switch). */
    fd = pydb__vfs->open(mst, O_RDONLY, 0);
    if (fd >= 0) {
        if (pydb__vfs->pread(fd, ctl, sizeof ctl, 0) == (ssize_t)sizeof ctl &&
            fstat(fd, &ms) == 0 && stat(xrf, &xs) == 0) {
            pydb__ctl_decode(&c, ctl);
            if (pydb__shm_valid(shm) &&
                (pydb__shm_state(&cur, shm) != 0 ||
                 cur.next_mfn != c.next_mfn ||
                 cur.next_block != c.next_block ||
                 cur.next_pos != c.next_pos))
                pydb__swap_publish(shm, ctl, (int64_t)ms.st_size,
                                   (int64_t)xs.st_size);
        }
        pydb__vfs->close(fd);
    }
    if (pydb__vfs->unlink(mk) != 0 && errno != ENOENT)
        return PYDB_OSERROR(err, errno, mk, -1, "cannot remove the swap "
                            "marker: %s", strerror(errno));
    *finished = 1;
    return PYDB_OK;
}

/* ------------------------------------------------------------- locking */


/* The errors of a try of the writer lock that failed (errno set): 0 when
 * it is only taken by another handle or process. */
static int lock_failed(pydb_db *db, pydb_error *err)
{
    if (errno == EAGAIN || errno == EACCES || errno == EINTR) return 0;
    return PYDB_OSERROR(err, errno, db->wal_path, -1,
                        "fcntl(F_OFD_SETLK) failed: %s", strerror(errno));
}

/* ---------------------------------------------------------- sync fence
 *
 * Linux reports a writeback error of a file to the next fdatasync of each
 * open file description that was open when it happened, and to one of a
 * description opened later only while no fdatasync has reported it yet
 * (errseq_sample(), mm/filemap.c).  A handle that opens the log just
 * after another's fdatasync saw an error, before that handle named the
 * log suspect in the commit header (txn.c, log_sync), would see its own
 * fdatasync succeed and acknowledge a commit that lies behind the lost
 * frame.  The fence closes that window: every fdatasync of a frame holds
 * a shared OFD lock on byte FENCE_BYTE of the header file from before the
 * call until its failure, if any, is named (fence_hold / fence_release),
 * and a writer whose description of the log is new (opened, or taken in
 * a fork()ed child: pydb__wal_forked) takes the exclusive lock once and
 * drops it (fence_pass) before its first commit: by then every fdatasync
 * that was in flight has ended and named its failure.
 *
 * The lock is on a description of the header file of the handle's own
 * (fence_fd), which a fork()ed child drops and opens anew: an OFD lock
 * is its description's, and a child that kept its parent's would keep
 * the fence held after the parent died.  Best effort, so that no process
 * can stall the others: the pass waits at most FENCE_WAIT_US (a process
 * stopped inside its fdatasync), a hold FENCE_HOLD_WAIT_US (the exclusive
 * lock is held for two system calls), and the fence is skipped where its
 * description cannot be opened.  A process killed between its failed
 * fdatasync and the naming leaves the failure unnamed: the fence does not
 * cover that. */
#define FENCE_BYTE 2
#define FENCE_WAIT_US 1000000
#define FENCE_HOLD_WAIT_US 2000

/* The handle's description of the header file for the fence, opened on
 * first use in each process; -1: no header, or it could not be opened
 * (not tried again in this process).  Under lsmutex. */
static int fence_fd(pydb_db *db)
{
    pid_t me = getpid();
    if (!pydb__db_shm(db)) return -1;
    if (db->fence_pid == me) return db->fence_fd;
    if (db->fence_fd >= 0) pydb__vfs->close(db->fence_fd);   /* the parent's */
    db->fence_fd = pydb__vfs->open(db->shm_path, O_RDWR, 0);
    db->fence_pid = me;
    return db->fence_fd;
}

/* Lock type `type` (F_RDLCK, F_WRLCK, F_UNLCK) on the fence byte, tried
 * for at most `wait_us`.  0, or -1 (not had: busy so long, or an error).
 * Under lsmutex. */
static int fence_lock(pydb_db *db, int type, unsigned wait_us)
{
    struct flock fl;
    unsigned nap = 100, waited = 0;
    int fd = fence_fd(db);
    if (fd < 0) return -1;
    memset(&fl, 0, sizeof fl);
    fl.l_type = (short)type;
    fl.l_whence = SEEK_SET;
    fl.l_start = FENCE_BYTE;
    fl.l_len = 1;
    while (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        if (errno == EINTR) continue;
        if ((errno != EAGAIN && errno != EACCES) || waited >= wait_us)
            return -1;
        usleep(nap);
        waited += nap;
        if (nap < 5000) nap *= 2;
    }
    return 0;
}

void pydb__wal_fence_hold(pydb_db *db)
{
    (void)fence_lock(db, F_RDLCK, FENCE_HOLD_WAIT_US);
}

void pydb__wal_fence_release(pydb_db *db)
{
    if (db->fence_fd >= 0 && db->fence_pid == getpid())
        (void)fence_lock(db, F_UNLCK, 0);
}

/* Marks the handle's description of the log new: it has yet to pass. */
static void fence_due(pydb_db *db)
{
    __atomic_store_n(&db->fence_due, 1, __ATOMIC_RELEASE);
}

/* A new description of the log passes the fence (nothing for one that
 * passed): waits for the fdatasyncs in flight until `deadline` (ms of
 * pydb__now_ms(); < 0: one try), FENCE_WAIT_US at most.  A pass that
 * waited its time counts as done: best effort. */
static void fence_pass(pydb_db *db, int64_t deadline)
{
    unsigned wait_us = 0;
    int got;
    if (!__atomic_load_n(&db->fence_due, __ATOMIC_ACQUIRE)) return;
    if (deadline >= 0) {
        int64_t left_ms = deadline - pydb__now_ms();
        if (left_ms >= FENCE_WAIT_US / 1000) wait_us = FENCE_WAIT_US;
        else if (left_ms > 0) wait_us = (unsigned)left_ms * 1000;
    }
    pthread_mutex_lock(&db->lsmutex);
    got = fence_lock(db, F_WRLCK, wait_us);
    if (got == 0) (void)fence_lock(db, F_UNLCK, 0);
    if (got == 0 || wait_us > 0)
        __atomic_store_n(&db->fence_due, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&db->lsmutex);
}

/* A description of the log of this process's own in place of the one at
 * db->wal_fd (a fork()ed child's copy of its parent's, which shares the
 * parent's OFD locks: closing the copy leaves them alone, the parent
 * still has its fd), under the same fd number; it has yet to pass the
 * fence.  0, or -1 with errno set (nothing changed). */
static int log_own(pydb_db *db)
{
    int fd = pydb__vfs->open(db->wal_path, O_RDWR, 0), rc = -1;
    if (fd < 0) return -1;
    if (dup3(fd, db->wal_fd, O_CLOEXEC) >= 0) {
        db->wal_pid = getpid();
        fence_due(db);
        rc = 0;
    }
    pydb__vfs->close(fd);
    return rc;
}

void pydb__wal_forked(pydb_db *db)
{
    /* if no description can be had now, pydb__wal_lock() tries again */
    if (db->wal_fd >= 0 && db->wal_pid != getpid()) (void)log_own(db);
    if (db->fence_fd >= 0) pydb__vfs->close(db->fence_fd);
    db->fence_fd = -1;
}

/* How long a writer stands back for a collector step of another process
 * that waits for the lock (its own wait is shorter:
 * PYDB_GC_LOCK_WAIT_MS, shm.h). */
#define GC_FIRST_MS 250

/* 1 while this writer (process `me`, which may wait: `waits`) lets a
 * waiting collector step of another process go first: for GC_FIRST_MS
 * from *since (set at the first look).  A live collector unclaims within
 * its own wait, so only a claim that lasts longer than that costs a look
 * at /proc: one left by a process that is gone is cleared then.  A
 * writer that only tries once never stands back. */
static int stand_back(pydb_db *db, pid_t me, int waits, int64_t *since)
{
    int32_t first = pydb__shm_writer_claimed(db->shm);
    int64_t now;
    if (first == 0 || first == me || !waits) return 0;
    now = pydb__now_ms();
    if (*since < 0) *since = now;
    if (now - *since >= PYDB_GC_LOCK_WAIT_MS &&
        pydb__shm_process_gone(first)) {
        pydb__shm_writer_unclaim(db->shm, first);
        return 0;
    }
    return now - *since < GC_FIRST_MS;
}

/* Take the cross-process writer lock, trying until `deadline` (ms,
 * CLOCK_MONOTONIC; < 0: one try).  Between tries it sleeps on the commit
 * header's wake word (shm.h), so a release wakes a waiter at once; the
 * sleep is bounded (0.5 ms doubling to 20 ms) for releases that wake
 * nobody.  A collector step (`gc`) claims the header's priority word
 * while it waits; other writers stand back meanwhile (stand_back). */
int pydb__wal_lock(pydb_db *db, int64_t deadline, int gc, pydb_error *err)
{
    unsigned nap = 500;
    int64_t since = -1;
    pid_t me = getpid();
    int rc;
    /* a fork()ed child whose atfork handler could not give it a
     * description of the log of its own (pydb__wal_forked): a lock of
     * its own needs one */
    if (db->wal_pid != me && log_own(db) != 0)
        return PYDB_OSERROR(err, errno, db->wal_path, -1,
                            "cannot open the write-ahead log: %s",
                            strerror(errno));
    fence_pass(db, deadline);   /* within the caller's time */
    gc = gc && deadline >= 0;
    if (gc) pydb__shm_writer_claim(db->shm, me);
    for (;;) {
        /* counted as waiting before the try: a release after it wakes
         * this writer, or moves the word it sleeps on */
        uint32_t ticket = pydb__shm_writer_ticket(db->shm);
        int go = gc || !stand_back(db, me, deadline >= 0, &since);
        if (go && pydb__ofd_lock(db->wal_fd, F_WRLCK) == 0) {
            rc = PYDB_OK;
        } else if (go && (rc = lock_failed(db, err)) != 0) {
            /* rc set */
        } else if ((rc = pydb__closing_error(db, err)) != 0) {
            /* rc set: the handle is being closed */
        } else if (deadline < 0 || pydb__now_ms() >= deadline) {
            rc = PYDB_ERROR(err, PYDB_ELOCKED, db->wal_path, -1,
                            "another process (or handle) holds the writer "
                            "lock of this database");
        } else {
            pydb__shm_writer_wait(db->shm, ticket, nap);
            if (nap < 20000) nap *= 2;
            continue;
        }
        pydb__shm_writer_wait(db->shm, ticket, 0);   /* waits no more */
        break;
    }
    if (gc) pydb__shm_writer_unclaim(db->shm, me);
    return rc;
}

void pydb__wal_unlock(pydb_db *db)
{
    pydb__ofd_lock(db->wal_fd, F_UNLCK);
    pydb__shm_writer_released(db->shm);
}

/* ------------------------------------------------------ open and close */

int pydb__wal_open(pydb_db *db, const char *base, pydb_error *err)
{
    int rc, failed = 0;
    struct stat st;
    int existed;

    pydb__wal_path(db->wal_path, sizeof db->wal_path, base, db->mst.path);
    existed = stat(db->wal_path, &st) == 0;
    db->wal_fd = pydb__vfs->open(db->wal_path, O_RDWR | O_CREAT, 0644);
    db->wal_pid = getpid();
    if (db->wal_fd < 0)
        return PYDB_OSERROR(err, errno, db->wal_path, -1,
                            "cannot open the write-ahead log: %s",
                            strerror(errno));
    fence_due(db);
    fence_pass(db, pydb__now_ms() + FENCE_WAIT_US / 1000);
    /* A new log's name must survive a power loss like its content. */
    if (!existed &&
        (rc = pydb__fsync_parent(db->wal_path, err)) != PYDB_OK)
        return rc;
    /* Recover now if no writer is active; else the next transaction will
     * (also when a compaction replaced the pair this handle has just
     * opened: the transaction switches to the new pair first). */
    if (pydb__wal_lock(db, -1, 0, NULL) != PYDB_OK) return PYDB_OK;
    {
        pydb_wal_files w = pydb__wal_files(db);
        w.seq = NULL;   /* nothing reads the files yet */
        rc = wal_files_current(&w) ? pydb__wal_recover(&w, &failed, err)
                                   : PYDB_OK;
    }
    if (rc == PYDB_OK) {
        int finished;
        rc = pydb__swap_recover(db->mst.path, db->xrf.path, db->shm,
                                &finished, err);
    }
    pydb__wal_unlock(db);
    return rc;
}

int pydb__wal_recover_readonly(const char *base, const char *mst,
                               const char *xrf, struct pydb_shm *shm,
                               pydb_error *err)
{
    char wal[1100];
    int wfd = -1, mfd = -1, xfd = -1, rc = PYDB_OK, failed = 0;
    int swap = pydb__swap_pending(mst);

    if (pydb__find_file(wal, sizeof wal, base, "wal") != 0)
        return PYDB_OK;   /* no log: nothing to do */
    /* a log that cannot be opened for writing (gone since): skip */
    wfd = pydb__vfs->open(wal, O_RDWR, 0);
    if (wfd < 0) goto cleanup;
    {
        pydb_wal_files w = {wfd, -1, -1, wal, mst, xrf, shm, NULL};
        int64_t size;
        int pending = wal_pending(&w, &size, NULL);
        /* no size, or every commit is in the (synced) files; a log cut
         * short is checkpointed here too: its commits are in the files
         * unsynced, and a power cut before a writer comes would leave
         * them to a replay of the frames before the cut */
        if (pending < 0 || (!swap && pending == LOG_APPLIED))
            goto cleanup;
    }
    mfd = pydb__vfs->open(mst, O_RDWR, 0);
    xfd = pydb__vfs->open(xrf, O_RDWR, 0);
    if (mfd < 0 || xfd < 0) goto cleanup;  /* cannot write: skip */
    if (pydb__ofd_lock(wfd, F_WRLCK) != 0) goto cleanup;  /* writer busy */
    {
        pydb_wal_files w = {wfd, mfd, xfd, wal, mst, xrf, shm, NULL};
        rc = pydb__wal_recover(&w, &failed, err);
    }
    if (rc == PYDB_OK && swap) {
        /* a dead compaction's swap: finish it (the header, if there is
         * one, gets the new files' state) */
        int finished;
        rc = pydb__swap_recover(mst, xrf, shm, &finished, err);
    }
cleanup:
    if (wfd >= 0) pydb__vfs->close(wfd);  /* releases the OFD lock */
    if (mfd >= 0) pydb__vfs->close(mfd);
    if (xfd >= 0) pydb__vfs->close(xfd);
    return rc;
}

pydb_wal_files pydb__wal_files(pydb_db *db)
{
    pydb_wal_files w = {db->wal_fd,
                        __atomic_load_n(&db->mst.fd, __ATOMIC_ACQUIRE),
                        __atomic_load_n(&db->xrf.fd, __ATOMIC_ACQUIRE),
                        db->wal_path, db->mst.path, db->xrf.path, db->shm,
                        &db->seq};
    return w;
}

void pydb__wal_close(pydb_db *db)
{
    int64_t size;
    if (db->wal_fd < 0) return;
    /* a last checkpoint of a log that holds commits (best effort: what
     * it leaves, the next writer's open does), so that a closed database
     * is whole in its .mst/.xrf */
    if (__atomic_load_n(&db->fatal, __ATOMIC_ACQUIRE) == 0 &&
        pydb__fd_size(db->wal_fd, &size) == 0 && size > 0 &&
        pydb__wal_lock(db, -1, 0, NULL) == PYDB_OK) {
        pydb_wal_files w = pydb__wal_files(db);
        int failed = 0;
        (void)pydb__wal_checkpoint(&w, &failed, NULL);
        pydb__wal_unlock(db);
    }
    pydb__vfs->close(db->wal_fd);
    db->wal_fd = -1;
    if (db->fence_fd >= 0) pydb__vfs->close(db->fence_fd);
    db->fence_fd = -1;
}

/* ------------------------------------------------------------- commit */

/* Zeros in `fd` from `end` to the next multiple of PYDB_WAL_GROW (wal.h),
 * best effort: they only spare later commits' fdatasyncs a new file size,
 * so a write that fails (a full disk) or no memory leaves the file as it
 * is, or longer by zeros. */
static void wal_grow(int fd, int64_t end)
{
    int64_t grown = (end + PYDB_WAL_GROW - 1) / PYDB_WAL_GROW * PYDB_WAL_GROW;
    uint8_t *zeros;

    if (grown == end || !(zeros = calloc(1, (size_t)(grown - end)))) return;
    (void)pydb__write_full(fd, zeros, (size_t)(grown - end), end);
    free(zeros);
}

int pydb__wal_append(pydb_db *db, pydb_buf *log, int keep, int64_t *at,
                     pydb_error *err)
{
    uint64_t applied;
    uint32_t first;
    int64_t size;
    int e;

    PYDB_ASSERT(db->wal_fd >= 0 && log->n >= PYDB_WAL_HEAD + PYDB_WAL_TAIL);
    PYDB_ASSERT(memcmp(log->p, WAL_MAGIC, 8) == 0 &&
                memcmp(log->p + log->n - PYDB_WAL_TAIL, WAL_END, 8) == 0);
    if (pydb__fd_size(db->wal_fd, &size) != 0)
        return PYDB_OSERROR(err, errno, db->wal_path, -1, "cannot stat: %s",
                            strerror(errno));
    /* after the frames: zeros of a grown tail may follow them (wal.h) */
    *at = size;
    if (pydb__shm_log_applied(db->shm, &applied, &first) &&
        applied <= (uint64_t)size) {
        *at = (int64_t)applied;
    } else if (pydb__u32(log->p + WAL_HEAD_SYNCED) != 0) {
        /* not the header's log: its synced length says nothing here */
        pydb__put32(log->p + WAL_HEAD_SYNCED, 0);
        frame_crc_set(log);
    }
    e = -pydb__write_full(db->wal_fd, log->p, log->n, *at);
    if (e) {
        int rc = PYDB_OSERROR(err, e, db->wal_path, *at,
                              "writing the write-ahead log failed: %s",
                              strerror(e));
        /* best effort: a torn frame left there is dropped by the next
         * recovery, which finds its bytes past the applied length */
        pydb__vfs->ftruncate(db->wal_fd, *at);
        return rc;
    }
    if (keep && *at + (int64_t)log->n > size)
        wal_grow(db->wal_fd, *at + (int64_t)log->n);
    return PYDB_OK;
}

void pydb__wal_mark_applied(pydb_db *db, int64_t at, const pydb_buf *log)
{
    uint64_t applied;
    uint32_t first;
    if (at == 0)   /* the first frame: its id, its trailer's CRC (wal.h) */
        first = pydb__u32(log->p + log->n - PYDB_WAL_TAIL + WAL_TAIL_CRC);
    else if (!pydb__shm_log_applied(db->shm, &applied, &first))
        return;    /* (no usable header: nothing to keep) */
    pydb__shm_log_set(db->shm, (uint64_t)at + log->n, first);
}

void pydb__wal_discard(pydb_db *db)
{
    (void)log_empty(db->shm, db->wal_fd);
}
