/*
 * path.c - names of the files of a database (docs/isis-formats.md §1):
 * extension stripping, case-insensitive file finding, the .mst/.xrf/.wal
 * names.
 * See path.h.
 *
 * Depends on: error.c (messages of pydb__db_paths).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Known extensions of database files, docs/isis-formats.md §1 (stripped
 * from a path). */
static const char *const known_ext[] = {
    "mst", "xrf", "cnt", "n01", "n02", "l01", "l02", "ifp", "ly1", "ly2",
    "iyp", "iy0", "fdt", "fst", "stw", "pft", "fmt", "any", NULL};

void pydb__path_split(char *dir, size_t dirsz, const char **name,
                      const char *path)
{
    const char *slash = strrchr(path, '/');

    if (slash) {
        snprintf(dir, dirsz, "%.*s", (int)(slash - path + 1), path);
        *name = slash + 1;
    } else {
        snprintf(dir, dirsz, "./");
        *name = path;
    }
}

/* The entries of base's folder named "<name of base>.<ext>" in any
 * letter case, counted up to 2 (-1: the folder cannot be read). */
static int count_any_case(const char *base, const char *ext)
{
    char want[1024], dir[1024];
    const char *name;
    DIR *d;
    struct dirent *de;
    int n = 0;

    pydb__path_split(dir, sizeof dir, &name, base);
    snprintf(want, sizeof want, "%s.%s", name, ext);
    d = opendir(dir);
    if (!d) return -1;
    while (n < 2 && (de = readdir(d)) != NULL)
        if (strcasecmp(de->d_name, want) == 0) n++;
    closedir(d);
    return n;
}

/* <base>.<ext> as given, then with the extension upper-cased, as an
 * entry of the file type `kind` (S_IFREG, S_IFDIR) into out.  0 or
 * -ENOENT (out = base.ext). */
static int find_exact(char *out, size_t outsz, const char *base,
                      const char *ext, mode_t kind)
{
    struct stat st;
    char upper[8];
    size_t i;

    snprintf(out, outsz, "%s.%s", base, ext);
    if (stat(out, &st) == 0 && (st.st_mode & S_IFMT) == kind) return 0;
    for (i = 0; ext[i] && i < sizeof upper - 1; i++)
        upper[i] = (char)toupper((unsigned char)ext[i]);
    upper[i] = 0;
    snprintf(out, outsz, "%s.%s", base, upper);
    if (stat(out, &st) == 0 && (st.st_mode & S_IFMT) == kind) return 0;
    snprintf(out, outsz, "%s.%s", base, ext);
    return -ENOENT;
}

/* The entry of base's folder named "<name of base>.<ext>" in any letter
 * case and of the file type `kind`, into out.  0 or -ENOENT (out =
 * base.ext). */
static int find_any_case(char *out, size_t outsz, const char *base,
                         const char *ext, mode_t kind)
{
    char want[1024], dir[1024];
    const char *name;
    struct stat st;
    DIR *d;
    struct dirent *de;

    pydb__path_split(dir, sizeof dir, &name, base);
    snprintf(want, sizeof want, "%s.%s", name, ext);
    d = opendir(dir);
    if (d) {
        while ((de = readdir(d)) != NULL) {
            if (strcasecmp(de->d_name, want) != 0) continue;
            snprintf(out, outsz, "%s%s", name != base ? dir : "", de->d_name);
            if (stat(out, &st) == 0 && (st.st_mode & S_IFMT) == kind) {
                closedir(d);
                return 0;
            }
        }
        closedir(d);
    }
    snprintf(out, outsz, "%s.%s", base, ext);
    return -ENOENT;
}

int pydb__find_file(char *out, size_t outsz, const char *base,
                    const char *ext)
{
    if (find_exact(out, outsz, base, ext, S_IFREG) == 0) return 0;
    return find_any_case(out, outsz, base, ext, S_IFREG);
}

int pydb__find_own(char *out, size_t outsz, const char *base,
                   const char *ext, int dir)
{
    mode_t kind = dir ? S_IFDIR : S_IFREG;
    if (find_exact(out, outsz, base, ext, kind) == 0) return 0;
    /* a name in another case is this database's only where no other
     * master file answers to it ("cds.mst" beside "CDS.MST": two) */
    if (count_any_case(base, "mst") != 1) return -ENOENT;
    return find_any_case(out, outsz, base, ext, kind);
}

/* base = `path` without a known extension, spelled as its master file
 * found in any case (pydb__db_base), whose path goes into mst.  0, or
 * -ENOENT (no master file: base as stripped). */
static int base_and_mst(char *base, size_t sz, char *mst, size_t mstsz,
                        const char *path)
{
    size_t n;

    pydb__strip_ext(base, sz, path);
    if (pydb__find_file(mst, mstsz, base, "mst") != 0) return -ENOENT;
    n = strlen(mst);   /* "<folder as given><name as stored>.mst" */
    if (n > 4 && n - 4 < sz) {
        memcpy(base, mst, n - 4);
        base[n - 4] = '\0';
    }
    return 0;
}

void pydb__db_base(char *base, size_t sz, const char *path)
{
    char mst[1400];
    (void)base_and_mst(base, sz, mst, sizeof mst, path);
}

void pydb__strip_ext(char *base, size_t sz, const char *path)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    snprintf(base, sz, "%s", path);
    if (!dot || (slash && dot < slash)) return;
    for (int i = 0; known_ext[i]; i++) {
        if (strcasecmp(dot + 1, known_ext[i]) == 0) {
            base[dot - path] = 0;
            return;
        }
    }
}

void pydb__path_ext(char *out, size_t sz, const char *base, const char *ext)
{
    snprintf(out, sz, "%s.%s", base, ext);
}

/* The error for `what` of database `base` not found as a regular file
 * at `path`: something else there (a directory, a FIFO) is named so. */
static int not_found(const char *path, const char *what, const char *base,
                     pydb_error *err)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return PYDB_OSERROR(err, S_ISDIR(st.st_mode) ? EISDIR : EINVAL, path,
                            -1, "the %s of database %s is %s, not a file",
                            what, base,
                            S_ISDIR(st.st_mode) ? "a directory"
                                                : "not a regular file");
    return PYDB_OSERROR(err, ENOENT, path, -1, "no %s for database %s", what,
                        base);
}

int pydb__db_paths(char *base, size_t basesz, char *mst, size_t mstsz,
                   char *xrf, size_t xrfsz, const char *path,
                   pydb_error *err)
{
    if (!path || !*path || strlen(path) >= basesz)
        return PYDB_ERROR(err, PYDB_EINVAL, path ? path : "", -1,
                          "empty or too long database path");
    if (base_and_mst(base, basesz, mst, mstsz, path) != 0)
        return not_found(mst, "master file (.mst)", base, err);
    if (pydb__find_file(xrf, xrfsz, base, "xrf") != 0)
        return not_found(xrf, "cross-reference file (.xrf)", base, err);
    return PYDB_OK;
}

/* <base>.<ext> as it exists in any letter case (pydb__find_own), else
 * with the extension upper-cased when the .mst's is. */
static void sidecar_path(char *out, size_t sz, const char *base,
                         const char *mst, const char *lower,
                         const char *upper)
{
    const char *dot = strrchr(mst, '.');
    int up = dot && strcmp(dot, ".MST") == 0;
    if (pydb__find_own(out, sz, base, lower, 0) == 0) return;
    pydb__path_ext(out, sz, base, up ? upper : lower);
}

void pydb__wal_path(char *out, size_t sz, const char *base, const char *mst)
{
    sidecar_path(out, sz, base, mst, "wal", "WAL");
}

void pydb__shm_path(char *out, size_t sz, const char *base, const char *mst)
{
    sidecar_path(out, sz, base, mst, "shm", "SHM");
}

int pydb__link_target(char *out, size_t cap, const char *path)
{
    struct stat st;
    char *real = NULL;
    int n;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        real = realpath(path, NULL);
    n = snprintf(out, cap, "%s", real ? real : path);
    free(real);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}
