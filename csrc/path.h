/*
 * path.h - names of the files of a database (docs/isis-formats.md §1):
 * stripping a known extension from a path, finding a file whatever the
 * case of its name, and building the .mst/.xrf/.wal names.
 *
 * Depends on: pydb.h (pydb_error) and error.c.  Touches the file system
 * only to look names up (stat, readdir); never opens a database file.
 */
#ifndef PYDB_PATH_H
#define PYDB_PATH_H

#include "pydb.h"
#include <stddef.h>

/* Split `path` at its last '/': dir = the directory with its trailing
 * '/' ("./" when there is none; truncated to dirsz), *name = the last
 * component (points into `path`). */
void pydb__path_split(char *dir, size_t dirsz, const char **name,
                      const char *path);

/* `path` itself, or, where it is a symbolic link, the file its links
 * lead to (realpath): the file a compaction replaces.  Renamed onto the
 * link, the new file would replace the link, and the database behind it
 * (another folder's, or another program's path to it) would keep the
 * old files (found by a review).  0, or -1 when it does not fit in
 * `cap` bytes. */
int pydb__link_target(char *out, size_t cap, const char *path);

/* out = "<base>.<ext>" (truncated to sz). */
void pydb__path_ext(char *out, size_t sz, const char *base, const char *ext);

/* Copy path into base without a known database-file extension (.mst,
 * .xrf, .cnt, .n01, ... any case). */
void pydb__strip_ext(char *base, size_t sz, const char *path);

/* Find the regular file `base`.`ext`: the extension as given, then upper
 * case, then the whole file name matched without regard to case in the
 * directory.  Writes the path found (else base.ext) into out; 0 or
 * -ENOENT. */
int pydb__find_file(char *out, size_t outsz, const char *base,
                    const char *ext);

/* A file (`dir` 0) or folder (`dir` 1) of pydb's beside the master file
 * of database `base` (its .wal, .shm, .pdx), found as pydb__find_file()
 * finds one, a name in another letter case only where no other master
 * file in the folder answers to it in any case ("cds.mst" beside
 * "CDS.MST" are two databases, each with its own files).  0 or -ENOENT
 * (out = base.ext). */
int pydb__find_own(char *out, size_t outsz, const char *base,
                   const char *ext, int dir);

/* The base name of the database named by `path` ("x/cds", "x/CDS.MST",
 * ...) as its master file names it: `path` without a known extension,
 * its last component then spelled as the .mst found in any letter case
 * ("x/CDS" -> "x/cds" for x/cds.mst), so that every spelling of one
 * database names the same log, commit header and index (two did not:
 * two writers, each holding its own lock, lost commits); the path
 * without its extension where no master file is found.  A master file
 * reached through a symbolic link keeps the link's folder and name (a
 * known gap: docs/isis-formats.md §1).  Truncated to sz. */
void pydb__db_base(char *base, size_t sz, const char *path);

/* The files of the database named by `path` ("x/cds", "x/CDS.MST", ...):
 * base = pydb__db_base(path), mst and xrf = the master and
 * cross-reference files found (any case).  0, PYDB_EINVAL (empty or too
 * long path) or PYDB_EIO with ENOENT (a file is missing). */
int pydb__db_paths(char *base, size_t basesz, char *mst, size_t mstsz,
                   char *xrf, size_t xrfsz, const char *path,
                   pydb_error *err);

/* The write-ahead log of database `base` whose master file is `mst`: one
 * that exists in any letter case, else the extension following the case
 * of the master file's (BIBL.MST: BIBL.WAL). */
void pydb__wal_path(char *out, size_t sz, const char *base, const char *mst);
/* The commit header beside the master file: <base>.shm, found or named
 * as pydb__wal_path() does. */
void pydb__shm_path(char *out, size_t sz, const char *base, const char *mst);

#endif
