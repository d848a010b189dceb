/*
 * snapshot_index_main.c - the index side of snapshots through the public
 * C API alone (no Python): `snapshot_index_main DIR` creates DIR/c with a
 * native index attached and prints one line per check ("name value"),
 * then "done".  Built and run by tests/test_index_concurrency.py, which
 * compares the lines exactly.  Exit status: 0 when every call it expects
 * to succeed did, 2 otherwise (with the error on stderr).
 *
 * What it shows:
 *   - pydb_snapshot_index() answers as of the snapshot's commit after 20
 *     more commits and a collection (pydb_gc_collect: commits never merge,
 *     the collection merges every segment into one) through the attached
 *     handle, and pydb_snapshot_search() on that view;
 *   - while the snapshot is registered, no segment file that existed when
 *     it was taken is removed; after it is released, the next
 *     collection removes the ones no MANIFEST names;
 *   - a handle that holds neither the snapshot's generation nor finds it
 *     in the MANIFEST answers PYDB_EWOULDBLOCK;
 *   - for an index that commits never change (in-memory), the snapshot's
 *     search drops the records inactive as of the snapshot, not later.
 */
#include "pydb.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pydb_error err;

#define TRY(call)                                                        \
    do {                                                                 \
        int rc_ = (call);                                                \
        if (rc_) {                                                       \
            fprintf(stderr, "%s:%d: %s -> %d: %s (%s)\n", __FILE__,      \
                    __LINE__, #call, rc_, err.message, err.path);        \
            exit(2);                                                     \
        }                                                                \
    } while (0)

/* Append one record with field 1 = text; its MFN. */
static int32_t append(pydb_db *db, const char *text)
{
    pydb_txn *t;
    pydb_field f = {1, (uint32_t)strlen(text), (const uint8_t *)text};
    int32_t mfn;
    TRY(pydb_txn_begin(&t, db, 1000, &err));
    TRY(pydb_txn_append(&mfn, t, &f, 1, &err));
    TRY(pydb_txn_commit(t, &err));
    return mfn;
}

static void update(pydb_db *db, int32_t mfn, const char *text)
{
    pydb_txn *t;
    pydb_field f = {1, (uint32_t)strlen(text), (const uint8_t *)text};
    TRY(pydb_txn_begin(&t, db, 1000, &err));
    TRY(pydb_txn_update(t, mfn, &f, 1, &err));
    TRY(pydb_txn_commit(t, &err));
}

/* "name mfn mfn ..." for the search of expr on view as of snap (snap
 * NULL: pydb_search on the latest state of db). */
static void show_search(const char *name, pydb_index *view,
                        const pydb_snapshot *snap, pydb_db *db,
                        const char *expr)
{
    int32_t *m;
    size_t n;
    if (snap)
        TRY(pydb_snapshot_search(&m, &n, view, snap, expr, strlen(expr),
                                 &err));
    else
        TRY(pydb_search(&m, &n, view, db, expr, strlen(expr), &err));
    printf("%s", name);
    for (size_t i = 0; i < n; i++) printf(" %d", (int)m[i]);
    printf("\n");
    free(m);
}

/* The segment files of dir into names[] (at most 64); their number. */
static int segments(char names[][32], const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d)) != NULL && n < 64)
        if (strncmp(de->d_name, "seg-", 4) == 0 && strlen(de->d_name) < 32)
            memcpy(names[n++], de->d_name, strlen(de->d_name) + 1);
    if (d) closedir(d);
    return n;
}

/* 1 if dir/MANIFEST names segment `name`. */
static int named(const char *dir, const char *name)
{
    char path[2048], line[256], want[64];
    FILE *f;
    int found = 0;
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    snprintf(want, sizeof want, "segment %s\n", name);
    f = fopen(path, "r");
    while (f && !found && fgets(line, sizeof line, f))
        found = strcmp(line, want) == 0;
    if (f) fclose(f);
    return found;
}

static int exists(const char *dir, const char *name)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

int main(int argc, char **argv)
{
    char base[1024], pdx[1100], held[64][32];
    int was_unnamed[64] = {0};
    /* policy none: no collector thread, so that the files on disk when
     * the snapshot is taken are exactly those its generation names (a
     * background merge and removal around it made the count vary) */
    pydb_options opt = {PYDB_IO_PREAD, PYDB_LOCK_NONE,
                        PYDB_OPEN_NOSYNC | PYDB_OPEN_GC(PYDB_GC_NONE)};
    pydb_db *db;
    pydb_fst *fst;
    pydb_index *ix, *stale, *late, *view, *mem, *mview;
    pydb_snapshot *snap, *snap2;
    pydb_snapshot_info si;
    const char *fst_text = "1 4 v1\n";
    int nheld, kept = 0, gone = 0, unnamed = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: snapshot_index_main DIR\n");
        return 2;
    }
    snprintf(base, sizeof base, "%s/c", argv[1]);
    snprintf(pdx, sizeof pdx, "%s.pdx", base);
    TRY(pydb_create(&db, base, PYDB_LAYOUT_ISIS_PACKED, 0, &opt, &err));
    TRY(pydb_fst_parse(&fst, fst_text, strlen(fst_text), NULL, &err));
    TRY(pydb_native_index_build(base, fst, NULL, NULL, NULL, &err));
    TRY(pydb_native_index_open(&ix, base, &err));
    TRY(pydb_native_index_attach(ix, db, &err));
    TRY(pydb_native_index_open(&stale, base, &err));   /* never refreshed */

    append(db, "alpha common");
    TRY(pydb_snapshot_take(&snap, db, &err));
    pydb_snapshot_info_get(&si, snap);
    printf("snapshot next_mfn=%d registered=%d gen_known=%d\n",
           (int)si.next_mfn, si.registered, si.index_gen > 0);
    TRY(pydb_snapshot_index(&view, snap, ix, &err));
    nheld = segments(held, pdx);

    append(db, "beta common");
    printf("stale_handle %s\n",
           pydb_snapshot_index(&late, snap, stale, &err) == PYDB_EWOULDBLOCK
               ? "EWOULDBLOCK" : "answered");

    for (int i = 0; i < 20; i++) {   /* 22 commits in all */
        char text[64];
        snprintf(text, sizeof text, "gamma common w%c", 'a' + i);
        update(db, 1, text);
    }
    {   /* the merge: the snapshot's segments are no longer named */
        pydb_gc_report rep;
        TRY(pydb_gc_collect(&rep, db, 10000, &err));
    }
    show_search("view_common", view, snap, NULL, "COMMON");
    show_search("view_alpha", view, snap, NULL, "ALPHA");
    show_search("view_gamma", view, snap, NULL, "GAMMA");
    show_search("latest_common", ix, NULL, db, "COMMON");
    show_search("latest_alpha", ix, NULL, db, "ALPHA");
    /* the attached handle no longer holds the snapshot's generation */
    printf("attached_handle_now %s\n",
           pydb_snapshot_index(&late, snap, ix, &err) == PYDB_EWOULDBLOCK
               ? "EWOULDBLOCK" : "answered");
    /* the snapshot's segments that no MANIFEST names any more: kept */
    for (int i = 0; i < nheld; i++)
        if (!named(pdx, held[i])) {
            was_unnamed[i] = 1;
            unnamed++;
            kept += exists(pdx, held[i]);
        }
    printf("while_registered held:%d unnamed:%d kept:%d\n", nheld, unnamed,
           kept);
    pydb_index_close(view);
    pydb_snapshot_release(snap);
    append(db, "delta");
    {   /* no reader older: the collector removes them (a commit does not:
         * nidx_commit.c) */
        pydb_gc_report rep;
        TRY(pydb_gc_collect(&rep, db, 10000, &err));
    }
    for (int i = 0; i < nheld; i++)
        if (was_unnamed[i]) gone += !exists(pdx, held[i]);
    printf("after_release removed_all:%d\n", gone == unnamed);

    /* an index commits never change: the XRF as of the snapshot */
    {
        pydb_posting p[3] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {3, 1, 1, 1}};
        pydb_txn *t;
        TRY(pydb_memindex_new(&mem, PYDB_POSTING_TAG | PYDB_POSTING_OCC |
                                        PYDB_POSTING_CNT, &err));
        TRY(pydb_memindex_add(mem, (const uint8_t *)"X", 1, p, 3, &err));
        TRY(pydb_snapshot_take(&snap2, db, &err));
        TRY(pydb_txn_begin(&t, db, 1000, &err));
        TRY(pydb_txn_delete(t, 2, &err));
        TRY(pydb_txn_commit(t, &err));
        TRY(pydb_snapshot_index(&mview, snap2, mem, &err));
        show_search("memory_snapshot", mview, snap2, NULL, "X");
        show_search("memory_handle_snapshot", mem, snap2, NULL, "X");
        show_search("memory_latest", mem, NULL, db, "X");
        pydb_index_close(mview);
        pydb_snapshot_release(snap2);
        pydb_index_close(mem);
    }
    pydb_index_close(stale);
    pydb_close(db);
    pydb_index_close(ix);
    pydb_fst_free(fst);
    printf("done\n");
    return 0;
}
