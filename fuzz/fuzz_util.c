/*
 * fuzz_util.c - the helpers of the fuzz targets (fuzz.h): splitting one
 * input into files and writing them into a scratch folder that is
 * emptied before each input and removed when the process ends.
 *
 * Depends on: pydb.h (the error structure).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fuzz.h"
#include "pydb.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

size_t fuzz_split(fuzz_part *parts, size_t max, const uint8_t *data,
                  size_t size)
{
    size_t k = 0, at = 0;

    for (size_t i = 0; i < max; i++) {
        parts[i].p = data;
        parts[i].n = 0;
    }
    if (max == 0) return 0;
    while (k < max) {
        const uint8_t *hit = NULL;
        if (k + 1 < max && size - at >= FUZZ_SEP_LEN)
            hit = memmem(data + at, size - at, FUZZ_SEP, FUZZ_SEP_LEN);
        parts[k].p = data + at;
        if (!hit) {
            parts[k].n = size - at;
            return k + 1;
        }
        parts[k].n = (size_t)(hit - (data + at));
        at = (size_t)(hit - data) + FUZZ_SEP_LEN;
        k++;
    }
    return k;
}

static void remove_tree(const char *path, int keep_top)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char sub[512];

    if (!d) {
        unlink(path);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (unlink(sub) != 0 && (errno == EISDIR || errno == EPERM))
            remove_tree(sub, 0);
    }
    closedir(d);
    if (!keep_top) rmdir(path);
}

static void remove_dir(void)
{
    if (dir[0]) remove_tree(dir, 0);
}

const char *fuzz_dir(void)
{
    if (!dir[0]) {
        struct stat st;
        const char *top = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)
                          ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/pydb-fuzz-XXXXXX", top);
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    return dir;
}

void fuzz_clear(void)
{
    remove_tree(fuzz_dir(), 1);
}

void fuzz_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fuzz_dir(), name);
}

void fuzz_write(const char *name, const uint8_t *p, size_t n)
{
    char path[512];
    int fd;

    fuzz_path(path, sizeof path, name);
    for (char *s = strchr(path + strlen(fuzz_dir()) + 1, '/'); s;
         s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(path);
        abort();
    }
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

void fuzz_write_parts(const char *const *names, const fuzz_part *parts,
                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (parts[i].n > 0) fuzz_write(names[i], parts[i].p, parts[i].n);
}

void fuzz_expect(int rc, const pydb_error *err)
{
    static int verbose = -1;

    if (rc == PYDB_OK) return;
    if (verbose < 0) verbose = getenv("PYDB_FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "fuzz: %s: %s: %s\n", pydb_strerror(rc), err->path,
                err->message);
    if (err->code != rc || err->message[0] == '\0' ||
        (rc == PYDB_ECORRUPT && err->path[0] == '\0')) {
        fprintf(stderr, "fuzz: error %d does not name itself (code %d, "
                "path '%s', message '%s')\n", rc, err->code, err->path,
                err->message);
        abort();
    }
}

/* The n bytes of fuzz_dir()/name, malloc'ed, into *out. */
static void slurp(const char *name, uint8_t **out, size_t *n)
{
    char path[512];
    FILE *f;
    long len;

    fuzz_path(path, sizeof path, name);
    f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        abort();
    }
    *out = malloc(len ? (size_t)len : 1);
    if (!*out || fread(*out, 1, (size_t)len, f) != (size_t)len) abort();
    *n = (size_t)len;
    fclose(f);
}

static void must(int rc, const pydb_error *err)
{
    if (rc != PYDB_OK) {
        fprintf(stderr, "fuzz: template: %s: %s\n", err->path, err->message);
        abort();
    }
}

static uint8_t *tmpl_mst, *tmpl_xrf;
static size_t tmpl_mst_n, tmpl_xrf_n;

/* Write the template database once and keep its .mst and .xrf. */
static void make_template(void)
{
    pydb_db *db = NULL;
    pydb_error err;
    char path[512];

    fuzz_clear();
    fuzz_path(path, sizeof path, "tmpl");
    must(pydb_create(&db, path, PYDB_LAYOUT_ISIS_ALIGNED, 0, NULL, &err),
         &err);
    for (int i = 1; i <= FUZZ_TEMPLATE_RECORDS; i++) {
        char text[64];
        pydb_field f[2];
        pydb_txn *t = NULL;
        int32_t mfn;
        int n = snprintf(text, sizeof text, "Record %d on water", i);
        f[0] = (pydb_field){24, (uint32_t)n, (const uint8_t *)text};
        f[1] = (pydb_field){70, 9, (const uint8_t *)"Smith, J."};
        must(pydb_txn_begin(&t, db, 1000, &err), &err);
        must(pydb_txn_append(&mfn, t, f, 2, &err), &err);
        must(pydb_txn_commit(t, &err), &err);
    }
    pydb_close(db);
    slurp("tmpl.mst", &tmpl_mst, &tmpl_mst_n);
    slurp("tmpl.xrf", &tmpl_xrf, &tmpl_xrf_n);
}

void fuzz_template(void)
{
    if (!tmpl_mst) make_template();
    fuzz_clear();
    fuzz_write("db.mst", tmpl_mst, tmpl_mst_n);
    fuzz_write("db.xrf", tmpl_xrf, tmpl_xrf_n);
}

int32_t fuzz_append(pydb_db *db, const uint8_t *value, size_t len)
{
    pydb_field f = {24, (uint32_t)len, value};
    pydb_txn *t = NULL;
    pydb_error err;
    int32_t mfn = 0;
    int rc = pydb_txn_begin(&t, db, 0, &err);

    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) return 0;
    rc = pydb_txn_append(&mfn, t, &f, 1, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) {
        pydb_txn_abort(t);
        return 0;
    }
    rc = pydb_txn_commit(t, &err);
    fuzz_expect(rc, &err);
    return rc == PYDB_OK ? mfn : 0;
}

void fuzz_reads_back(const char *path, int32_t mfn, const uint8_t *value,
                     size_t len)
{
    pydb_db *db = NULL;
    pydb_record *rec = NULL;
    pydb_error err;
    int rc = pydb_open(&db, path, NULL, &err);

    fuzz_expect(rc, &err);
    if (rc != PYDB_OK) abort();   /* it opened for the writer */
    rc = pydb_read(&rec, db, mfn, &err);
    fuzz_expect(rc, &err);
    if (rc != PYDB_OK || rec->nfields != 1 || rec->fields[0].tag != 24 ||
        rec->fields[0].len != len ||
        memcmp(rec->fields[0].value, value, len) != 0) {
        fprintf(stderr, "fuzz: the record committed as MFN %d does not "
                "read back\n", (int)mfn);
        abort();
    }
    pydb_record_free(rec);
    pydb_close(db);
}
