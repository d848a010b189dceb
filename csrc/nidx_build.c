/*
 * nidx_build.c - the bulk build of a native index: read every record of
 * the database, extract its keys by the FST, write one segment and a
 * MANIFEST naming only it, and remove the segments of earlier builds
 * (pydb_nidx_builder_*, pydb_native_index_build of pydb.h).
 *
 * Depends on: nidx_writer.h (accumulator, segment bytes), nidx_manifest.h
 * (MANIFEST text, atomic publish), nidx_handle.h (only pydb__nidx_dir),
 * the FST and key rules (nidx_int.h), the database reader (pydb.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nidx_handle.h"
#include "nidx_writer.h"

struct pydb_nidx_builder {
    pydb_db *db;
    const pydb_fst *fst;
    char *fst_text;
    size_t fst_len;
    uint8_t *stw_text;
    size_t stw_len;
    pydb_keyrules rules;
    pydb_stopwords sw;
    nidx_acc a;
    pydb_record *rec;
    pydb_fst_scratch scratch;
    int32_t next, max;
    int64_t done;
    char dir[1024];
};

void pydb_nidx_builder_free(pydb_nidx_builder *b)
{
    if (!b) return;
    if (b->db) pydb_close(b->db);
    free(b->fst_text);
    free(b->stw_text);
    pydb__stopwords_free(&b->sw);
    pydb__nacc_free(&b->a);
    pydb_record_free(b->rec);
    pydb__fst_scratch_free(&b->scratch);
    free(b);
}

int pydb_nidx_builder_open(pydb_nidx_builder **out, const char *db_path,
                           const pydb_fst *fst, const pydb_nidx_options *opt,
                           pydb_error *err)
{
    pydb_nidx_builder *b = calloc(1, sizeof *b);
    pydb_options o = {PYDB_IO_MMAP, PYDB_LOCK_NONE, 0};
    int rc;

    *out = NULL;
    if (!b) return PYDB_ERROR(err, PYDB_ENOMEM, db_path, -1, "no memory");
    b->fst = fst;
    b->a.err = err;
    if ((rc = pydb__nidx_dir(b->dir, sizeof b->dir, db_path, err))) goto fail;
    if ((rc = pydb_open(&b->db, db_path, &o, err))) goto fail;
    pydb__keyrules_default(&b->rules, opt ? opt->utf8 : 0,
                           opt ? opt->max_key : 0);
    if (opt && opt->tables) {
        char d[1024];
        const char *name;
        int found;
        pydb_info info;
        pydb_info_get(&info, b->db);
        pydb__path_split(d, sizeof d, &name, info.mst_path);
        if ((rc = pydb__keyrules_load_dir(&b->rules, d, &found, err)))
            goto fail;
    }
    if (opt && opt->stw_len) {
        b->stw_text = malloc(opt->stw_len);
        if (!b->stw_text) goto oom;
        memcpy(b->stw_text, opt->stw, opt->stw_len);
        b->stw_len = opt->stw_len;
        if ((rc = pydb__stopwords_parse(&b->sw, &b->rules, b->stw_text,
                                        b->stw_len, err)))
            goto fail;
    }
    /* the FST text, rebuilt from the rules, goes into the manifest */
    {
        pydb_buf t = {0};
        for (size_t i = 0; i < pydb_fst_count(fst); i++) {
            char line[64];
            uint32_t id;
            int tech;
            const char *fmt;
            size_t fl;
            pydb_fst_rule(&id, &tech, &fmt, &fl, NULL, fst, i);
            int l = snprintf(line, sizeof line, "%u %d ", id, tech);
            pydb__buf_put(&t, line, (size_t)l);
            pydb__buf_put(&t, fmt, fl);
            pydb__buf_put(&t, "\n", 1);
        }
        if (t.oom) {
            free(t.p);
            goto oom;
        }
        b->fst_text = (char *)t.p;
        b->fst_len = t.n;
    }
    b->next = 1;
    b->max = pydb_max_mfn(b->db);
    *out = b;
    return PYDB_OK;
oom:
    rc = PYDB_ERROR(err, PYDB_ENOMEM, db_path, -1, "no memory");
fail:
    pydb_nidx_builder_free(b);
    return rc;
}

int pydb_nidx_builder_step(int64_t *done, int64_t *total, int *more,
                           pydb_nidx_builder *b, int32_t max, pydb_error *err)
{
    int rc;
    b->a.err = err;
    for (int32_t k = 0; k < max && b->next <= b->max; k++, b->next++) {
        rc = pydb_read(&b->rec, b->db, b->next, err);
        if (rc == PYDB_ENOTFOUND) continue;
        if (rc) return rc;
        b->done++;
        if (b->rec->deleted || b->rec->status) continue;
        rc = pydb__fst_keys(b->fst, &b->rules, &b->sw, b->next,
                            b->rec->fields, b->rec->nfields, &b->scratch,
                            pydb__nacc_add, &b->a, err);
        if (rc) return rc;
    }
    if (done) *done = b->next - 1;
    if (total) *total = b->max;
    if (more) *more = b->next <= b->max;
    return PYDB_OK;
}

int pydb_nidx_builder_finish(pydb_nidx_builder *b, pydb_error *err)
{
    pydb_buf segb = {0}, man = {0};
    char path[1100];
    uint64_t gen;
    int rc;

    b->a.err = err;
    if (b->next <= b->max) {
        int more = 1;
        while (more)
            if ((rc = pydb_nidx_builder_step(NULL, NULL, &more, b, 1 << 20,
                                             err)))
                return rc;
    }
    if (mkdir(b->dir, 0755) != 0 && errno != EEXIST)
        return PYDB_OSERROR(err, errno, b->dir, -1, "cannot create");
    gen = pydb__nman_top_generation(b->dir) + 1;
    if ((rc = pydb__nacc_segment(&b->a, NULL, 0, &segb, err))) goto cleanup;
    pydb__nacc_free(&b->a);
    pydb__nseg_path(path, sizeof path, b->dir, gen);
    unlink(path);   /* an orphan of an unfinished commit */
    if ((rc = pydb__write_file(path, segb.p, segb.n, 1, 1, NULL, err)))
        goto cleanup;
    if ((rc = pydb__nman_encode(&man, gen, &b->rules, b->fst_text, b->fst_len,
                                b->stw_text, b->stw_len, &gen, 1, err)))
        goto cleanup;
    if ((rc = pydb__nman_publish(b->dir, man.p, man.n, err))) goto cleanup;
    /* older segments are no longer referenced */
    {
        DIR *d = opendir(b->dir);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            unsigned long long g;
            char old[1100];
            if (sscanf(de->d_name, "seg-%8llu.pds", &g) == 1 && g < gen &&
                strlen(de->d_name) == 16) {
                pydb__nseg_path(old, sizeof old, b->dir, g);
                unlink(old);
            }
        }
        if (d) closedir(d);
    }
cleanup:
    free(segb.p);
    free(man.p);
    return rc;
}

int pydb_native_index_build(const char *db_path, const pydb_fst *fst,
                            const pydb_nidx_options *opt,
                            pydb_progress_fn progress, void *ctx,
                            pydb_error *err)
{
    pydb_nidx_builder *b;
    int rc = pydb_nidx_builder_open(&b, db_path, fst, opt, err), more = 1;
    int64_t done, total;
    if (rc) return rc;
    while (more) {
        if ((rc = pydb_nidx_builder_step(&done, &total, &more, b, 16384,
                                         err)))
            goto cleanup;
        if (progress && progress(ctx, done, total)) {
            rc = PYDB_ERROR(err, PYDB_EINVAL, db_path, -1,
                            "index build cancelled");
            goto cleanup;
        }
    }
    rc = pydb_nidx_builder_finish(b, err);
cleanup:
    pydb_nidx_builder_free(b);
    return rc;
}

