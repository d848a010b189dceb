/*
 * nidx_manifest.c - the native index's MANIFEST (format in
 * nidx_manifest.h): encode, parse, read the generation, publish.
 *
 * Depends on: util.h (buffer, CRC-32C, atomic replace), index_int.h (key
 * rules), the vfs; pydb__read_file (keys.c).  Holds the inline limit
 * (pydb__nidx_inline_max; its test setter of pydb_test.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nidx_int.h"
#include "nidx_manifest.h"
#include "pydb_test.h"

size_t pydb__nidx_inline_max = NIDX_INLINE_MAX;

size_t pydb__test_set_inline_max(size_t n)
{
    size_t old = pydb__nidx_inline_max;
    pydb__nidx_inline_max = n;
    return old;
}

static void hex_put(pydb_buf *b, const uint8_t *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    if (pydb__buf_reserve(b, n * 2) < 0) return;
    for (size_t i = 0; i < n; i++) {
        b->p[b->n++] = (uint8_t)hx[p[i] >> 4];
        b->p[b->n++] = (uint8_t)hx[p[i] & 15];
    }
}

int pydb__nman_encode(pydb_buf *b, uint64_t gen, const pydb_keyrules *r,
                      const char *fst, size_t fst_len, const uint8_t *stw,
                      size_t stw_len, const nidx_mseg *segs, size_t nsegs,
                      pydb_error *err)
{
    char line[128];
    int l;
    /* oldest first, none newer than the MANIFEST; generations are names,
     * not ages (a merged segment takes a new one wherever it stands) */
    int inl = 0;
    for (size_t i = 0; i < nsegs; i++) {
        PYDB_ASSERT(segs[i].gen <= gen);
        inl |= segs[i].inl != NULL;
    }
    /* format 2 while nothing is inline: pydb before inline segments
     * reads it */
    if (inl)
        pydb__buf_put(b, NIDX_MANIFEST_MAGIC, strlen(NIDX_MANIFEST_MAGIC));
    else
        pydb__buf_put(b, NIDX_MANIFEST_MAGIC_V2,
                      strlen(NIDX_MANIFEST_MAGIC_V2));
    l = snprintf(line, sizeof line, "generation %llu\nutf8 %d\nmax_key %zu\n",
                 (unsigned long long)gen, r->utf8, r->max_key);
    pydb__buf_put(b, line, (size_t)l);
    if (r->mode == PYDB_KEYMODE_CISIS) pydb__buf_put(b, "mode cisis\n", 11);
    pydb__buf_put(b, "upper ", 6);
    hex_put(b, r->upper, 256);
    pydb__buf_put(b, "\nword ", 6);
    hex_put(b, r->word, 256);
    l = snprintf(line, sizeof line, "\nfst %zu\n", fst_len);
    pydb__buf_put(b, line, (size_t)l);
    pydb__buf_put(b, fst, fst_len);
    l = snprintf(line, sizeof line, "\nstw %zu\n", stw_len);
    pydb__buf_put(b, line, (size_t)l);
    if (stw_len) pydb__buf_put(b, stw, stw_len);
    pydb__buf_put(b, "\n", 1);
    for (size_t i = 0; i < nsegs; i++) {
        if (segs[i].inl) {
            l = snprintf(line, sizeof line, "inline %08llu %zu\n",
                         (unsigned long long)segs[i].gen, segs[i].len);
            pydb__buf_put(b, line, (size_t)l);
            pydb__buf_put(b, segs[i].inl, segs[i].len);
            pydb__buf_put(b, "\n", 1);
            continue;
        }
        l = snprintf(line, sizeof line, "segment seg-%08llu.pds\n",
                     (unsigned long long)segs[i].gen);
        pydb__buf_put(b, line, (size_t)l);
    }
    l = snprintf(line, sizeof line, "end %08x\n",
                 (unsigned)pydb__crc32c(0, b->p, b->n));
    pydb__buf_put(b, line, (size_t)l);
    if (b->oom)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                          "cannot allocate the manifest");
    return PYDB_OK;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

void pydb__nman_segs_of(nidx_mseg *segs, nidx_seg *const *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        segs[i].gen = v[i]->gen;
        segs[i].inl = v[i]->inl ? v[i]->map : NULL;
        segs[i].len = v[i]->inl ? v[i]->size : 0;
    }
}

/* The format version d[n] starts with: 3, 2, or 0 (another magic line;
 * both are as long). */
static int magic_version(const void *d, size_t n)
{
    size_t ml = strlen(NIDX_MANIFEST_MAGIC);
    if (n < ml) return 0;
    if (memcmp(d, NIDX_MANIFEST_MAGIC, ml) == 0) return NIDX_MANIFEST_VERSION;
    if (memcmp(d, NIDX_MANIFEST_MAGIC_V2, ml) == 0)
        return NIDX_MANIFEST_VERSION_FILES;
    return 0;
}

int pydb__nman_parse(nidx_manifest *m, const uint8_t *d, size_t n,
                     const char *path, pydb_error *err)
{
    const uint8_t *p = d, *e = d + n;
    size_t ml = strlen(NIDX_MANIFEST_MAGIC), cap = 0;
    unsigned long long v;
    int k, v2, version;
    char *end;

    memset(m, 0, sizeof *m);
#define BAD(what) \
    do { \
        free(m->segs); \
        m->segs = NULL; \
        return PYDB_CORRUPT(err, path, (int64_t)(p - d), "manifest: %s", what); \
    } while (0)
    if (n >= ml && memcmp(d, NIDX_MANIFEST_MAGIC, ml - 2) == 0 &&
        !magic_version(d, n)) {
        const uint8_t *nl = memchr(d + ml - 2, '\n', n - (ml - 2));
        int vl = nl ? (int)(nl - (d + ml - 2)) : 0;
        return PYDB_CORRUPT(err, path, (int64_t)(ml - 2),
                            "manifest: format version %.*s, this pydb reads "
                            "versions %d and %d (rebuild the index)",
                            vl > 16 ? 16 : vl, (const char *)d + ml - 2,
                            NIDX_MANIFEST_VERSION_FILES, NIDX_MANIFEST_VERSION);
    }
    if (!(version = magic_version(d, n))) BAD("bad magic line");
    v2 = version == NIDX_MANIFEST_VERSION_FILES;
    /* the checksum line covers everything before it */
    {
        const uint8_t *q = e;
        if (n < ml + 13 || e[-1] != '\n') BAD("missing end line");
        q = e - 13;
        if (memcmp(q, "end ", 4) != 0) BAD("missing end line");
        uint32_t want = 0;
        for (int i = 0; i < 8; i++) {
            int h = hexval(q[4 + i]);
            if (h < 0) BAD("bad checksum");
            want = want << 4 | (uint32_t)h;
        }
        if (pydb__crc32c(0, d, (size_t)(q - d)) != want) {
            p = q;
            BAD("checksum mismatch");
        }
        e = q;
    }
    p += ml;
    if (sscanf((const char *)p, "generation %llu\nutf8 %d\nmax_key %zu\n",
               &v, &m->rules.utf8, &m->rules.max_key) != 3)
        BAD("bad header lines");
    m->gen = v;
    for (k = 0; k < 3; k++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(e - p));
        if (!nl) BAD("truncated");
        p = nl + 1;
    }
    /* optional: the key mode (absent: UNICODE, the rules of an index
     * written before key modes) */
    m->rules.mode = PYDB_KEYMODE_UNICODE;
    if ((size_t)(e - p) >= 11 && memcmp(p, "mode cisis\n", 11) == 0) {
        m->rules.mode = PYDB_KEYMODE_CISIS;
        p += 11;
    }
    for (int t = 0; t < 2; t++) {
        uint8_t *dst = t ? m->rules.word : m->rules.upper;
        const char *name = t ? "word " : "upper ";
        size_t nl = strlen(name);
        if ((size_t)(e - p) < nl + 513 || memcmp(p, name, nl) != 0)
            BAD("bad table line");
        p += nl;
        for (int i = 0; i < 256; i++) {
            int h = hexval(p[2 * i]), l2 = hexval(p[2 * i + 1]);
            if (h < 0 || l2 < 0) BAD("bad table digit");
            dst[i] = (uint8_t)(h << 4 | l2);
        }
        p += 512;
        if (*p++ != '\n') BAD("bad table line end");
    }
    for (int t = 0; t < 2; t++) {
        const char *name = t ? "stw " : "fst ";
        if ((size_t)(e - p) < 5 || memcmp(p, name, 4) != 0)
            BAD("bad text section");
        p += 4;
        errno = 0;
        v = strtoull((const char *)p, &end, 10);
        if ((const uint8_t *)end >= e || *end != '\n' || errno)
            BAD("bad text length");
        p = (const uint8_t *)end + 1;
        if (v >= (unsigned long long)(e - p)) BAD("text passes the end");
        if (t) {
            m->stw = p;
            m->stw_len = (size_t)v;
        } else {
            m->fst = (const char *)p;
            m->fst_len = (size_t)v;
        }
        p += v;
        if (*p++ != '\n') BAD("bad text section end");
    }
    while (p < e) {
        nidx_mseg sg = {0, NULL, 0};
        size_t nd;
        if (!v2 && (size_t)(e - p) >= 7 && memcmp(p, "inline ", 7) == 0) {
            /* "inline GGGGGGGG LEN\n", LEN bytes, "\n" */
            nd = pydb__nseg_gen_digits(p + 7, (size_t)(e - p) - 7, &sg.gen);
            if (!nd || p + 7 + nd >= e || p[7 + nd] != ' ')
                BAD("bad inline segment line");
            p += 7 + nd + 1;
            errno = 0;
            v = strtoull((const char *)p, &end, 10);
            if ((const uint8_t *)end >= e || *end != '\n' || errno ||
                (const uint8_t *)end == p || *p < '0' || *p > '9')
                BAD("bad inline segment line");
            p = (const uint8_t *)end + 1;
            if (v >= (unsigned long long)(e - p))
                BAD("inline segment passes the end");
            sg.inl = p;
            sg.len = (size_t)v;
            p += v;
            if (*p++ != '\n') BAD("bad inline segment end");
        } else {
            if ((size_t)(e - p) < 12 || memcmp(p, "segment seg-", 12) != 0 ||
                !(nd = pydb__nseg_gen_digits(p + 12, (size_t)(e - p) - 12,
                                             &sg.gen)) ||
                (size_t)(e - p) < 12 + nd + 5 ||
                memcmp(p + 12 + nd, ".pds\n", 5) != 0)
                BAD("bad segment line");
            p += 12 + nd + 5;
        }
        if (m->nsegs == cap) {
            cap = cap ? cap * 2 : 8;
            nidx_mseg *nv = realloc(m->segs, cap * sizeof *nv);
            if (!nv) BAD("out of memory");
            m->segs = nv;
        }
        m->segs[m->nsegs++] = sg;
    }
#undef BAD
    return PYDB_OK;
}

/* Whether the file at path changed between the stat a and now. */
static int changed_since(const char *path, const struct stat *a)
{
    struct stat b;
    if (stat(path, &b) != 0) return 1;
    return a->st_ino != b.st_ino || a->st_size != b.st_size ||
           a->st_ctim.tv_sec != b.st_ctim.tv_sec ||
           a->st_ctim.tv_nsec != b.st_ctim.tv_nsec;
}

int pydb__nman_read(nidx_manifest *m, uint8_t **data, const char *path,
                    int synced, pydb_error *err)
{
    struct stat a;
    size_t len;
    int rc;

    memset(m, 0, sizeof *m);
    for (int tries = 0;; tries++) {
        *data = NULL;
        if (stat(path, &a) != 0) memset(&a, 0, sizeof a);
        rc = synced ? pydb__read_file_synced(path, data, &len, err)
                    : pydb__read_file(path, data, &len, err);
        if (rc) return rc;
        rc = pydb__nman_parse(m, *data, len, path, err);
        if (rc == PYDB_OK) return PYDB_OK;
        free(*data);
        *data = NULL;
        if (rc != PYDB_ECORRUPT) return rc;
        /* read while a swap rewrote it: again (once in any case) */
        if (tries >= NIDX_READ_TRIES ||
            (tries > 0 && !changed_since(path, &a)))
            return rc;
    }
}

uint64_t pydb__nman_generation_of(const uint8_t *d, size_t n)
{
    char hb[96];
    size_t ml = strlen(NIDX_MANIFEST_MAGIC);
    unsigned long long g;
    if (n > sizeof hb - 1) n = sizeof hb - 1;
    if (n < ml || !magic_version(d, n)) return NIDX_GEN_UNKNOWN;
    memcpy(hb, d, n);
    hb[n] = '\0';
    if (sscanf(hb + ml, "generation %llu\n", &g) != 1 ||
        (uint64_t)g == NIDX_GEN_UNKNOWN)
        return NIDX_GEN_UNKNOWN;
    return (uint64_t)g;
}

uint64_t pydb__nman_head_generation(const char *path)
{
    uint8_t hb[95];   /* as much as pydb__nman_generation_of looks at */
    ssize_t r;
    int fd = pydb__vfs->open(path, O_RDONLY, 0), moved;
    if (fd < 0) return 0;
    r = pydb__vfs->pread(fd, hb, sizeof hb, 0);
    /* no longer the MANIFEST: the next commit may have been rewriting
     * it while it was read (a swap), so the digits may be torn */
    moved = !pydb__same_file(fd, path);
    pydb__vfs->close(fd);
    if (moved || r < 0) return NIDX_GEN_UNKNOWN;
    return pydb__nman_generation_of(hb, (size_t)r);
}
