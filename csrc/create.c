/*
 * create.c - pydb_create(): a new, empty database (the bulk builder with
 * no record), made durable (files and their directory entry), then opened
 * for writing.
 *
 * Depends on: build.c (writing the files), handle.c (pydb_open), util.c
 * (directory fsync), error.c.  The top of the storage layers: nothing in
 * csrc/ calls it.
 */
#include "pydb_int.h"
#include <string.h>

int pydb_create(pydb_db **out, const char *path, int layout, int mstxl,
                const pydb_options *opt, pydb_error *err)
{
    pydb_builder *b = NULL;
    pydb_options o;
    char mst[1100];
    int rc;

    *out = NULL;
    if (layout < 0 || layout > 3)
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1, "bad layout %d",
                          layout);
    if (mstxl < 0 || mstxl > 6)
        return PYDB_ERROR(err, PYDB_EINVAL, path, -1,
                          "bad MSTXL %d (0..6)", mstxl);
    {
        /* "dir/" would make the hidden files dir/.mst and dir/.xrf */
        char dir[1024];
        const char *name;
        pydb__path_split(dir, sizeof dir, &name, path);
        if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            return PYDB_ERROR(err, PYDB_EINVAL, path, -1,
                              "the base name of the files is empty");
    }
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    o.flags |= PYDB_OPEN_WRITE | PYDB_OPEN_LAYOUT(layout);
    rc = pydb_builder_open(&b, path, layout, mstxl, err);
    if (rc) return rc;
    /* synced in both modes: with sync=False a power cut after the first
     * commits must not find the files themselves missing or empty */
    rc = pydb_builder_finish(b, 1, err);
    pydb_builder_free(b);  /* removes the files if not finished */
    if (rc) return rc;
    pydb__path_ext(mst, sizeof mst, path, "mst");
    rc = pydb__fsync_parent(mst, err);
    if (rc) return rc;
    return pydb_open(out, path, &o, err);
}
