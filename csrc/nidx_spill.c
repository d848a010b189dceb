/*
 * nidx_spill.c - sorted runs of the bulk build and their merge into one
 * segment (nidx_spill.h has the run format).
 *
 * DESIGN: an external sort, as every indexer whose input outgrows memory
 * does (Lucene's flushed segments and merges, the sort-based inversion
 * of Witten, Moffat and Bell, "Managing Gigabytes", 2nd ed., §5.2): the
 * accumulator is sorted and written out whenever it passes its budget;
 * the runs are then merged k ways, each read through one buffer.  The
 * merged segment is streamed to its file: posting lists first (their
 * offsets are known as they are written), the dictionary to a second
 * temporary file that is copied after them, the block index (8 bytes per
 * 32 terms) kept in memory, then the header written at offset 0 and the
 * checksum computed by reading the file back, since the header it
 * covers comes first.  The bytes are those pydb__nseg_enc_* would build
 * in memory (the same encoder parts write them).
 *
 * All writes go through the vfs (pydb__vfs), so fault injection reaches
 * them; a failure removes the file being written.
 *
 * Depends on: nidx_spill.h, nidx_seg.h, nidx_writer.h, util.h; shm.h
 * (pydb__shm_process_gone, for pydb__nidx_temp_dead).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nidx_spill.h"
#include "shm.h"

/* Keys longer than this in a run are damage, not keys (a key is at most
 * a field, and a record is far smaller). */
#define RUN_MAX_KEY (64u * 1024 * 1024)

/* ------------------------------------------------ buffered file output */

typedef struct sfile {
    int fd;
    const char *path;
    pydb_buf buf;
    uint64_t off;            /* bytes in the file before buf */
} sfile;

static int sf_create(sfile *f, const char *path, pydb_error *err)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    f->fd = pydb__vfs->open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
    if (f->fd < 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot create: %s",
                            strerror(errno));
    if (pydb__buf_reserve(&f->buf, NIDX_SPILL_BUF) < 0)
        return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
    return PYDB_OK;
}

static int sf_flush(sfile *f, pydb_error *err)
{
    int e;
    if (f->buf.oom)
        return PYDB_ERROR(err, PYDB_ENOMEM, f->path, -1, "no memory");
    if (f->buf.n == 0) return PYDB_OK;
    if ((e = -pydb__write_full(f->fd, f->buf.p, f->buf.n, (int64_t)f->off)))
        return PYDB_OSERROR(err, e, f->path, (int64_t)f->off,
                            "write failed: %s", strerror(e));
    f->off += f->buf.n;
    f->buf.n = 0;
    return PYDB_OK;
}

/* Flush once the buffer holds NIDX_SPILL_BUF bytes. */
static inline int sf_check(sfile *f, pydb_error *err)
{
    return f->buf.n >= NIDX_SPILL_BUF || f->buf.oom ? sf_flush(f, err)
                                                    : PYDB_OK;
}

static inline uint64_t sf_pos(const sfile *f) { return f->off + f->buf.n; }

/* Close; remove the file too when `remove`. */
static void sf_close(sfile *f, int remove)
{
    if (f->fd >= 0) pydb__vfs->close(f->fd);
    /* a temporary: removed as nidx_gc.c removes its own, outside the
     * vfs (a failure leaves it to the collection after this process) */
    if (remove && f->fd >= 0) unlink(f->path);
    f->fd = -1;
    free(f->buf.p);
    f->buf.p = NULL;
}

/* ------------------------------------------------------ writing a run */

typedef struct run_out {
    sfile f;
    pydb_buf post;           /* the current term's posting bytes */
    pydb_error *err;
} run_out;

static int run_term(void *ctx, const uint8_t *key, size_t len,
                    const pydb_posting *v, size_t n)
{
    run_out *r = ctx;
    r->post.n = 0;
    pydb__nseg_put_varints(&r->post, v, n);
    if (r->post.oom)
        return PYDB_ERROR(r->err, PYDB_ENOMEM, r->f.path, -1, "no memory");
    pydb__nseg_put_varint(&r->f.buf, len);
    pydb__buf_put(&r->f.buf, key, len);
    pydb__nseg_put_varint(&r->f.buf, n);
    pydb__nseg_put_varint(&r->f.buf, (uint64_t)v[n - 1].mfn);
    pydb__nseg_put_varint(&r->f.buf, r->post.n);
    pydb__buf_put(&r->f.buf, r->post.p, r->post.n);
    return sf_check(&r->f, r->err);
}

int pydb__nrun_write(nidx_acc *a, const char *path, pydb_error *err)
{
    run_out r;
    int rc;

    memset(&r, 0, sizeof r);
    r.err = err;
    if ((rc = sf_create(&r.f, path, err))) goto cleanup;
    if ((rc = pydb__nacc_each(a, run_term, &r, err))) goto cleanup;
    rc = sf_flush(&r.f, err);
cleanup:
    sf_close(&r.f, rc != PYDB_OK);
    free(r.post.p);
    return rc;
}

/* ------------------------------------------------------ reading a run */

typedef struct run_in {
    int fd;
    const char *path;
    size_t idx;              /* position in the run list: ties go first */
    uint8_t *buf;
    size_t pos, len;         /* unread bytes: buf[pos..len)             */
    uint64_t foff;           /* file offset of buf[len]                 */
    uint8_t *key;
    size_t klen, kcap;
    uint64_t count, last, plen;
    int valid;
} run_in;

static int ri_corrupt(const run_in *r, const char *what, pydb_error *err)
{
    return PYDB_CORRUPT(err, r->path, (int64_t)(r->foff - (r->len - r->pos)),
                        "index build run: %s", what);
}

/* Have at least `need` (<= NIDX_SPILL_BUF) unread bytes in the buffer,
 * or all that is left of the file. */
__attribute__((noinline)) static int ri_refill(run_in *r, size_t need, pydb_error *err)
{
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
    while (r->len < need) {
        ssize_t got = pydb__vfs->pread(r->fd, r->buf + r->len,
                                       NIDX_SPILL_BUF - r->len,
                                       (off_t)r->foff);
        if (got < 0) {
            if (errno == EINTR) continue;
            return PYDB_OSERROR(err, errno, r->path, (int64_t)r->foff,
                                "read failed: %s", strerror(errno));
        }
        if (got == 0) break;
        r->len += (size_t)got;
        r->foff += (uint64_t)got;
    }
    return PYDB_OK;
}

static inline int ri_fill(run_in *r, size_t need, pydb_error *err)
{
    return r->len - r->pos >= need ? PYDB_OK : ri_refill(r, need, err);
}

/* The next varint, left unread; *used gets its length in bytes. */
static int ri_peek_slow(run_in *r, uint64_t *v, size_t *used,
                        pydb_error *err)
{
    uint64_t x = 0;
    int rc;
    if ((rc = ri_fill(r, 10, err))) return rc;
    for (size_t i = 0; i < 10 && r->pos + i < r->len; i++) {
        uint8_t c = r->buf[r->pos + i];
        x |= (uint64_t)(c & 0x7F) << (7 * i);
        if (!(c & 0x80)) {
            if (i == 9 && c > 1) break;
            *used = i + 1;
            *v = x;
            return PYDB_OK;
        }
    }
    return ri_corrupt(r, "truncated or overlong varint", err);
}

static inline int ri_peek(run_in *r, uint64_t *v, size_t *used,
                          pydb_error *err)
{
    /* most are one byte, and most lie whole in the buffer */
    if (r->pos < r->len && r->buf[r->pos] < 0x80) {
        *v = r->buf[r->pos];
        *used = 1;
        return PYDB_OK;
    }
    if (r->len - r->pos >= 10) {
        const uint8_t *p = r->buf + r->pos;
        uint64_t x = 0;
        for (size_t i = 0; i < 9; i++) {
            x |= (uint64_t)(p[i] & 0x7F) << (7 * i);
            if (!(p[i] & 0x80)) {
                *v = x;
                *used = i + 1;
                return PYDB_OK;
            }
        }
    }
    return ri_peek_slow(r, v, used, err);
}

/* One varint; *used (may be NULL) gets its length in bytes. */
static int ri_varint(run_in *r, uint64_t *v, size_t *used, pydb_error *err)
{
    size_t u;
    int rc = ri_peek(r, v, &u, err);
    if (rc) return rc;
    r->pos += u;
    if (used) *used = u;
    return PYDB_OK;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Copy n bytes of the run to `to`: the buffer of the sfile out, or
 * (out NULL) a buffer in memory. */
static int ri_copy(run_in *r, pydb_buf *to, sfile *out, uint64_t n,
                   pydb_error *err)
{
    int rc;
    while (n > 0) {
        if ((rc = ri_fill(r, 1, err))) return rc;
        if (r->len == r->pos) return ri_corrupt(r, "posting bytes cut", err);
        size_t k = r->len - r->pos;
        if (k > n) k = (size_t)n;
        pydb__buf_put(to, r->buf + r->pos, k);
        r->pos += k;
        n -= k;
        if (out && (rc = sf_check(out, err))) return rc;
        if (!out && to->oom)
            return PYDB_ERROR(err, PYDB_ENOMEM, r->path, -1, "no memory");
    }
    return PYDB_OK;
}

/* Read the next term's head (key, count, last MFN, posting length);
 * valid = 0 at the end of the run. */
static int ri_next(run_in *r, pydb_error *err)
{
    uint64_t kl;
    int rc;
    /* the head is at most 5 varints and the key */
    if ((rc = ri_fill(r, 64, err))) return rc;
    if (r->pos == r->len) {
        r->valid = 0;
        return PYDB_OK;
    }
    if ((rc = ri_varint(r, &kl, NULL, err))) return rc;
    if (kl > RUN_MAX_KEY) return ri_corrupt(r, "key length out of range", err);
    if (kl > r->kcap) {
        size_t cap = (size_t)kl * 2;
        uint8_t *nk = realloc(r->key, cap);
        if (!nk) return PYDB_ERROR(err, PYDB_ENOMEM, r->path, -1, "no memory");
        r->key = nk;
        r->kcap = cap;
    }
    r->klen = 0;
    while (r->klen < kl) {
        if ((rc = ri_fill(r, 1, err))) return rc;
        if (r->pos == r->len) return ri_corrupt(r, "key cut", err);
        size_t k = r->len - r->pos;
        if (k > kl - r->klen) k = (size_t)(kl - r->klen);
        memcpy(r->key + r->klen, r->buf + r->pos, k);
        r->klen += k;
        r->pos += k;
    }
    if ((rc = ri_varint(r, &r->count, NULL, err)) ||
        (rc = ri_varint(r, &r->last, NULL, err)) ||
        (rc = ri_varint(r, &r->plen, NULL, err)))
        return rc;
    /* a posting takes 4 to 40 bytes */
    if (r->count == 0 || r->count > r->plen / 4 || r->last < 1 ||
        r->last > INT32_MAX)
        return ri_corrupt(r, "posting count, length or MFN out of range",
                          err);
    r->valid = 1;
    return PYDB_OK;
}

/* ------------------------------------------------------------ merging */

static int ri_cmp(const run_in *a, const run_in *b)
{
    int c = pydb__keycmp(a->key, a->klen, b->key, b->klen);
    return c ? c : (a->idx < b->idx ? -1 : a->idx > b->idx);
}

/* Insert r into ord[0..*n) by (key, run). */
static void ord_insert(run_in **ord, size_t *n, run_in *r)
{
    size_t lo = 0, hi = *n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ri_cmp(ord[mid], r) < 0) lo = mid + 1;
        else hi = mid;
    }
    memmove(ord + lo + 1, ord + lo, (*n - lo) * sizeof *ord);
    ord[lo] = r;
    (*n)++;
}

/* Append the bytes of the file `from` (len bytes) to out. */
static int copy_file(sfile *out, int from, const char *from_path,
                     uint64_t len, pydb_error *err)
{
    uint64_t at = 0;
    int rc;
    while (at < len) {
        size_t want = NIDX_SPILL_BUF - out->buf.n;
        if (want > len - at) want = (size_t)(len - at);
        ssize_t got = pydb__vfs->pread(from, out->buf.p + out->buf.n, want,
                                       (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return PYDB_OSERROR(err, errno, from_path, (int64_t)at,
                                "read failed: %s", strerror(errno));
        if (got == 0)
            return PYDB_CORRUPT(err, from_path, (int64_t)at,
                                "index build dictionary cut short");
        out->buf.n += (size_t)got;
        at += (uint64_t)got;
        if ((rc = sf_check(out, err))) return rc;
    }
    return PYDB_OK;
}

/* The CRC-32C of the first len bytes of f's file. */
static int file_crc(uint32_t *crc, sfile *f, uint64_t len, pydb_error *err)
{
    uint64_t at = 0;
    *crc = 0;
    while (at < len) {
        size_t want = f->buf.cap;
        if (want > len - at) want = (size_t)(len - at);
        ssize_t got = pydb__vfs->pread(f->fd, f->buf.p, want, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return PYDB_OSERROR(err, got < 0 ? errno : EIO, f->path,
                                (int64_t)at, "read back failed: %s",
                                strerror(got < 0 ? errno : EIO));
        *crc = pydb__crc32c(*crc, f->buf.p, (size_t)got);
        at += (uint64_t)got;
    }
    return PYDB_OK;
}

int pydb__nrun_merge(const char *const *runs, size_t n, const char *out_path,
                     const char *dict_path, pydb_error *err)
{
    const int to_run = dict_path == NULL;
    run_in *in = calloc(n ? n : 1, sizeof *in);
    run_in **ord = calloc(n ? n : 1, sizeof *ord);
    run_in **taken = calloc(n ? n : 1, sizeof *taken);
    sfile out, dict;
    uint64_t *blocks = NULL, nblocks = 0, bcap = 0, nterms = 0, nposts = 0;
    uint8_t *prev = NULL, hdr[NIDX_SEG_HDR], b8[8];
    size_t prev_len = 0, prev_cap = 0, nord = 0;
    int rc = PYDB_OK, out_open = 0, dict_open = 0, tabled;
    pydb_buf gather = {0}, *to;   /* a term's postings, to be skip-led */
    sfile *flush;                 /* out, or NULL while gathering */
    pydb_postings postings = {0};

    out.fd = dict.fd = -1;
    out.buf.p = dict.buf.p = NULL;
    if (!in || !ord || !taken) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, out_path, -1, "no memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) in[i].fd = -1;
    for (size_t i = 0; i < n; i++) {
        run_in *r = &in[i];
        r->path = runs[i];
        r->idx = i;
        r->fd = pydb__vfs->open(runs[i], O_RDONLY, 0);
        if (r->fd < 0) {
            rc = PYDB_OSERROR(err, errno, runs[i], -1, "cannot open: %s",
                              strerror(errno));
            goto cleanup;
        }
        if (!(r->buf = malloc(NIDX_SPILL_BUF))) {
            rc = PYDB_ERROR(err, PYDB_ENOMEM, runs[i], -1, "no memory");
            goto cleanup;
        }
        if ((rc = ri_next(r, err))) goto cleanup;
        if (r->valid) ord_insert(ord, &nord, r);
    }
    out_open = 1;
    if ((rc = sf_create(&out, out_path, err))) goto cleanup;
    memset(hdr, 0, sizeof hdr);
    if (!to_run) {
        dict_open = 1;
        if ((rc = sf_create(&dict, dict_path, err))) goto cleanup;
        pydb__buf_put(&out.buf, hdr, sizeof hdr);
    }

    while (nord > 0) {
        run_in *first = ord[0];
        size_t m = 1;
        uint64_t pbeg = sf_pos(&out), count = 0, last = 0;
        while (m < nord && pydb__keycmp(ord[m]->key, ord[m]->klen, first->key,
                                        first->klen) == 0)
            m++;
        if (to_run) {
            /* a run's head comes before its postings: their length */
            uint64_t plen = 0, cnt = 0, prev_last = 0;
            for (size_t j = 0; j < m; j++) {
                uint64_t mfn;
                size_t used;
                if ((rc = ri_peek(ord[j], &mfn, &used, err))) goto cleanup;
                if (mfn <= prev_last || used > ord[j]->plen) {
                    rc = ri_corrupt(ord[j], "runs out of MFN order", err);
                    goto cleanup;
                }
                plen += ord[j]->plen - used + varint_len(mfn - prev_last);
                cnt += ord[j]->count;
                prev_last = ord[j]->last;
            }
            pydb__nseg_put_varint(&out.buf, first->klen);
            pydb__buf_put(&out.buf, first->key, first->klen);
            pydb__nseg_put_varint(&out.buf, cnt);
            pydb__nseg_put_varint(&out.buf, prev_last);
            pydb__nseg_put_varint(&out.buf, plen);
        }
        /* this term's postings: each run's list in run order, the first
         * MFN delta of each made relative to the list before it; a
         * segment's list of more than NIDX_SKIP postings is gathered in
         * memory, decoded and written again behind its skip table */
        for (size_t j = 0; j < m; j++) count += ord[j]->count;
        tabled = !to_run && count > NIDX_SKIP;
        to = tabled ? &gather : &out.buf;
        flush = tabled ? NULL : &out;
        gather.n = 0;
        for (size_t j = 0; j < m; j++) {
            run_in *r = ord[j];
            uint64_t mfn;
            size_t used;
            if (j == 0 && !to_run) {
                /* the first list: its first MFN delta stays */
                if ((rc = ri_copy(r, to, flush, r->plen, err))) goto cleanup;
                last = r->last;
                continue;
            }
            if ((rc = ri_varint(r, &mfn, &used, err))) goto cleanup;
            if (mfn <= last || mfn > r->last || used > r->plen) {
                rc = ri_corrupt(r, "runs out of MFN order", err);
                goto cleanup;
            }
            pydb__nseg_put_varint(to, mfn - last);
            if ((rc = ri_copy(r, to, flush, r->plen - used, err)))
                goto cleanup;
            last = r->last;
        }
        if (tabled) {
            if (gather.oom) {
                rc = PYDB_ERROR(err, PYDB_ENOMEM, out_path, -1, "no memory");
                goto cleanup;
            }
            postings.n = 0;
            if ((rc = pydb__nseg_get_varints(&postings, gather.p, gather.n,
                                             count, first->path, -1, err)))
                goto cleanup;
            pydb__nseg_put_postings(&out.buf, postings.v, postings.n);
            if ((rc = sf_check(&out, err))) goto cleanup;
        }
        if (to_run) {
            /* no dictionary */
        } else if (nterms % NIDX_BLOCK_TERMS == 0) {
            if (nblocks == bcap) {
                uint64_t cap = bcap ? bcap * 2 : 1024;
                uint64_t *nb = realloc(blocks, cap * sizeof *nb);
                if (!nb) {
                    rc = PYDB_ERROR(err, PYDB_ENOMEM, out_path, -1,
                                    "no memory");
                    goto cleanup;
                }
                blocks = nb;
                bcap = cap;
            }
            blocks[nblocks++] = sf_pos(&dict);
            prev_len = 0;
        }
        if (!to_run) {
            pydb__nseg_dict_entry(&dict.buf, nterms, pbeg, prev, prev_len,
                                  first->key, first->klen, count,
                                  sf_pos(&out) - pbeg);
            if ((rc = sf_check(&dict, err))) goto cleanup;
        }
        if (first->klen > prev_cap) {
            size_t cap = first->klen * 2;
            uint8_t *np = realloc(prev, cap);
            if (!np) {
                rc = PYDB_ERROR(err, PYDB_ENOMEM, out_path, -1, "no memory");
                goto cleanup;
            }
            prev = np;
            prev_cap = cap;
        }
        if (first->klen) memcpy(prev, first->key, first->klen);
        prev_len = first->klen;
        nterms++;
        nposts += count;
        /* advance the m runs just used and put them back in order */
        memcpy(taken, ord, m * sizeof *ord);
        memmove(ord, ord + m, (nord - m) * sizeof *ord);
        nord -= m;
        for (size_t j = 0; j < m; j++) {
            if ((rc = ri_next(taken[j], err))) goto cleanup;
            if (taken[j]->valid) ord_insert(ord, &nord, taken[j]);
        }
    }

    if (to_run) {
        rc = sf_flush(&out, err);
        goto cleanup;
    }
    /* dictionary, block index, no tombstones, header, checksum */
    if ((rc = sf_flush(&out, err)) || (rc = sf_flush(&dict, err)))
        goto cleanup;
    uint64_t dict_off = sf_pos(&out);
    if ((rc = copy_file(&out, dict.fd, dict_path, sf_pos(&dict), err)))
        goto cleanup;
    sf_close(&dict, 1);
    dict_open = 0;
    uint64_t bidx_off = sf_pos(&out);
    for (uint64_t b = 0; b < nblocks; b++) {
        pydb__put64(b8, dict_off + blocks[b]);
        pydb__buf_put(&out.buf, b8, 8);
        if ((rc = sf_check(&out, err))) goto cleanup;
    }
    uint64_t tomb_off = sf_pos(&out);
    memset(b8, 0, 4);
    pydb__buf_put(&out.buf, b8, 4);
    if ((rc = sf_flush(&out, err))) goto cleanup;
    pydb__nseg_header(hdr, nterms, nposts, dict_off, bidx_off, tomb_off);
    {
        int e = -pydb__write_full(out.fd, hdr, sizeof hdr, 0);
        uint32_t crc;
        if (e) {
            rc = PYDB_OSERROR(err, e, out_path, 0, "write failed: %s",
                              strerror(e));
            goto cleanup;
        }
        if ((rc = file_crc(&crc, &out, sf_pos(&out), err))) goto cleanup;
        pydb__put64(b8, crc);
        out.buf.n = 0;
        pydb__buf_put(&out.buf, b8, 8);
        if ((rc = sf_flush(&out, err))) goto cleanup;
    }
    if (pydb__vfs->fsync(out.fd) != 0) {
        rc = PYDB_OSERROR(err, errno, out_path, -1, "fsync failed: %s",
                          strerror(errno));
        goto cleanup;
    }
cleanup:
    if (dict_open) sf_close(&dict, 1);
    if (out_open) sf_close(&out, rc != PYDB_OK);
    for (size_t i = 0; in && i < n; i++) {
        if (in[i].fd >= 0) pydb__vfs->close(in[i].fd);
        free(in[i].buf);
        free(in[i].key);
    }
    free(in);
    free(ord);
    free(taken);
    free(blocks);
    free(prev);
    free(gather.p);
    pydb_postings_free(&postings);
    return rc;
}

int pydb__nidx_temp_pid(const char *name)
{
    int pid;
    unsigned long n;
    char tail[8];
    if ((sscanf(name, "merge-%d-%lu.%7s", &pid, &n, tail) != 3 &&
         sscanf(name, "build-%d-%lu.%7s", &pid, &n, tail) != 3) ||
        strcmp(tail, "tmp") != 0 || pid <= 0)
        return 0;
    return pid;
}

int pydb__nidx_temp_dead(const char *name)
{
    int pid = pydb__nidx_temp_pid(name);
    return pid > 0 && pydb__shm_process_gone(pid);
}
