/*
 * mkxrf.c - a new cross-reference file for a master file whose XRF is lost
 * or damaged, from a sequential scan of its record versions
 * (pydb_mkxrf, pydb.h).
 *
 * The method is CISIS mkxrf's (BIREME, mkxrf.c, A. O. Tardelli 1989):
 * walk the master file from the end of the control record to the end of
 * records it names (NXTMFB/NXTMFP, docs/isis-formats.md §2.1), and at
 * each position take a version whose leader and directory are plausible
 * (pydb__leader_plausible, pydb__dir_plausible: the checks the
 * validator's orphan scan makes), then go on right after it; elsewhere
 * step one alignment unit (2^MSTXL with MSTXL > 0, §2.3; else one byte,
 * not two: pyisis writes records of an odd MFRL and the next one right
 * after, on an odd byte), which crosses the zero fill that the
 * never-split rule leaves at block ends.  A version
 * may start before the end of records and pass it (pyisis stores an end
 * inside its last record, §2.1); none is taken that starts at or past it
 * (an append a killed writer never committed).
 *
 * An MFN's entry names its last version in file order: every writer puts
 * a record's new version after its old ones, and CDS/ISIS rewrites one in
 * place only where it is the latest already (§2.4).  STATUS 1 negates the
 * pointer (logically deleted, §3.2).  A version with a back pointer gets
 * the "update pending" flag: CDS/ISIS clears the back pointer when it
 * inverts a record, so one that keeps it may be missing from an ISIS
 * inverted file.  An MFN below NXTMFN with no version is physically
 * deleted (-2048 >> MSTXL, as build.c writes a gap).  What CISIS mkxrf
 * does differently: it asks for "ok" on the terminal, writes over the
 * old XRF, and takes the layout it was compiled for; this takes a layout
 * or detects it (the one under which the first DETECT bytes hold the most
 * bytes of versions: the four leaders differ in size, so one fits), and
 * writes a new file that the caller renames into place.
 *
 * Safety: every read is bounded by the file's size and the window; the
 * arrays are bounded by NXTMFN, which must be below the file's size in
 * bytes (or 2^20).  The master file is opened read-only.
 *
 * Depends on: record.c (control record, leaders, XRF values), build.c
 * (pydb__xrf_write_all), vfs.c, error.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* F_OFD_SETLK, F_SETLEASE, F_SETSIG */
#endif
#include "pydb_int.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WINDOW (1 << 20)          /* bytes of the master file read at once */
#define DETECT (4 << 20)          /* bytes scanned to detect the layout    */

typedef struct scan {
    int fd;
    const char *path;
    int64_t size;                 /* of the master file                    */
    uint8_t *win;                 /* bytes [win_off, win_off + win_len)    */
    int64_t win_off, win_len;
    int failed;                   /* a read failed: err is set             */
    pydb_error *err;
} scan;

/* Bytes [off, off + n) of the master file (n <= WINDOW), or NULL past
 * its end or when a read fails (s->failed). */
static const uint8_t *peek(scan *s, int64_t off, int64_t n)
{
    int64_t len;
    ssize_t got;
    if (off < 0 || n > WINDOW || off > s->size - n) return NULL;
    if (off >= s->win_off && off + n <= s->win_off + s->win_len)
        return s->win + (off - s->win_off);
    len = s->size - off < WINDOW ? s->size - off : WINDOW;
    got = pydb__vfs->pread(s->fd, s->win, (size_t)len, off);
    if (got != len) {
        s->failed = 1;
        s->win_len = 0;
        if (got < 0)
            PYDB_OSERROR(s->err, errno, s->path, off, "read failed: %s",
                         strerror(errno));
        else
            PYDB_OSERROR(s->err, EIO, s->path, off, "short read: the file "
                         "shrank during the scan?");
        return NULL;
    }
    s->win_off = off;
    s->win_len = len;
    return s->win;
}

/* Walk the versions of layout g that start in [*at, end): their bytes
 * into *bytes and their count into *versions; with raw (an entry per MFN
 * below next_mfn), each version's XRF value stored at its MFN (the last
 * one in file order stays).  *at gets where the walk stopped.  0, or
 * PYDB_EIO (a read), or PYDB_ETOOBIG (an offset the XRF of this MSTXL
 * cannot name). */
static int walk(scan *s, const pydb_geom *g, int mstxl, int32_t next_mfn,
                int64_t *at, int64_t end, int32_t *raw, int64_t *versions,
                int64_t *bytes)
{
    /* MSTXL 0: every byte, as records of an odd MFRL (pyisis) are
     * followed by one on an odd byte */
    int64_t align = (int64_t)1 << mstxl;
    int64_t q = *at;
    int rc = PYDB_OK;
    *versions = *bytes = 0;
    while (q + g->leader <= end) {
        const uint8_t *h = peek(s, q, g->leader), *d = NULL;
        pydb_leader l;
        if (!h) break;
        pydb__leader_decode(&l, g, h);
        /* (BASE is below 2^20: 65535 directory entries of 12 bytes) */
        if (pydb__leader_plausible(&l, g, next_mfn - 1, q, s->size) &&
            (d = peek(s, q, l.base)) && pydb__dir_plausible(&l, g, d)) {
            (*versions)++;
            *bytes += l.mfrl;
            if (raw) {
                int flags = l.mfbwb || l.mfbwp ? PYDB_FLAG_PENDING : 0;
                if (q / PYDB_BLOCK + 1 > (int64_t)(INT32_MAX >> (11 - mstxl))) {
                    rc = PYDB_ERROR(s->err, PYDB_ETOOBIG, s->path, q,
                                    "a version of MFN %d at offset %lld, "
                                    "past what an XRF with MSTXL %d can "
                                    "name", (int)l.mfn, (long long)q, mstxl);
                    break;
                }
                raw[l.mfn - 1] = pydb__xrf_encode(q, flags, mstxl);
                if (l.status == 1) raw[l.mfn - 1] = -raw[l.mfn - 1];
            }
            q += (l.mfrl + align - 1) / align * align;   /* (a multiple) */
        } else {
            q += align;
        }
        if (s->failed) break;
    }
    *at = q;
    return rc ? rc : s->failed ? PYDB_EIO : PYDB_OK;
}

/* Write raw[n] as the new XRF file at path (created with `mode`,
 * fsynced; removed again on failure). */
static int write_xrf(const char *path, const int32_t *raw, int64_t n,
                     mode_t mode, pydb_error *err)
{
    int fd = pydb__vfs->open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                             (int)mode);
    int rc;
    if (fd < 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot create: %s",
                            strerror(errno));
    (void)fchmod(fd, mode);   /* the umask may have taken bits off */
    rc = pydb__xrf_write_all(fd, path, raw, n, err);
    if (rc == PYDB_OK && pydb__vfs->fsync(fd) != 0)
        rc = PYDB_OSERROR(err, errno, path, -1, "fsync failed: %s",
                          strerror(errno));
    pydb__vfs->close(fd);
    if (rc) unlink(path);
    return rc;
}

/* The layout under which the first DETECT bytes before `end` hold the
 * most bytes of versions (the first of a tie).  0..3, or a negative
 * PYDB error (a read). */
static int detect_layout(scan *s, int mstxl, int32_t next_mfn, int64_t end)
{
    int64_t best = -1, versions, bytes, lim = end < DETECT ? end : DETECT;
    int layout = 0, rc;
    for (int k = 0; k < 4; k++) {
        int64_t at = PYDB_CTL_SIZE;
        rc = walk(s, &pydb__geom[k], mstxl, next_mfn, &at, lim, NULL,
                  &versions, &bytes);
        if (rc) return rc;
        if (bytes > best) {
            best = bytes;
            layout = k;
        }
    }
    return layout;
}

/* Nobody else may use the database while its XRF is replaced: the pydb
 * writer lock (an open-file-description lock on the whole of <base>.wal,
 * as wal.c takes it) keeps out pydb commits, collections and another
 * mkxrf; a write lease on the XRF (fcntl F_SETLEASE, Linux) is refused
 * while any process has the file open -- a pydb handle holds its XRF open
 * while it lives, and so do WinISIS and CISIS while they use it.  The
 * lease is only a probe (taken, then given back at once: held, another
 * process's open would wait for it, then open the old file); its break
 * signal is set to SIGURG, which a process ignores by default, should an
 * open come in between.  Where leases are not available (NFS, a file of
 * another owner without CAP_LEASE) only the lock guards.  *wal_fd gets
 * the locked log's descriptor (-1: there is no log to lock).  0,
 * PYDB_ELOCKED, or PYDB_EUNSUPPORTED (the log holds commits to apply).
 * No log is made where there is none (no pydb writer ever opened the
 * database, or its folder is read-only). */
static int keep_others_out(int *wal_fd, const char *mst_path,
                           const char *xrf_path, pydb_error *err)
{
    char base[1100], wal[1100];
    struct flock fl;
    struct stat st;
    int fd;

    *wal_fd = -1;
    pydb__strip_ext(base, sizeof base, mst_path);
    pydb__wal_path(wal, sizeof wal, base, mst_path);
    fd = pydb__vfs->open(wal, O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0) {
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
            pydb__vfs->close(fd);
            return PYDB_ERROR(err, PYDB_ELOCKED, wal, -1,
                              "a pydb writer is committing to this database: "
                              "close it first");
        }
        *wal_fd = fd;
        if (fstat(fd, &st) == 0 && st.st_size > 0)
            return PYDB_ERROR(err, PYDB_EUNSUPPORTED, wal, -1,
                              "the write-ahead log holds commits (a pydb "
                              "handle has the database open, or one died "
                              "before recovery): open the database once, "
                              "close it, then make the XRF again");
    }
    fd = pydb__vfs->open(xrf_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0) return PYDB_OK;   /* none yet, or unreadable: the rename says */
    if (fcntl(fd, F_SETSIG, SIGURG) == 0 &&
        fcntl(fd, F_SETLEASE, F_WRLCK) != 0 && errno == EAGAIN) {
        pydb__vfs->close(fd);
        return PYDB_ERROR(err, PYDB_ELOCKED, xrf_path, -1,
                          "the database is open (this or another process "
                          "has its XRF open): close it first");
    }
    (void)fcntl(fd, F_SETLEASE, F_UNLCK);
    pydb__vfs->close(fd);
    return PYDB_OK;
}

int pydb_mkxrf(pydb_mkxrf_report *out, const char *mst_path,
               const char *xrf_path, const char *bak_path, int layout,
               pydb_error *err)
{
    uint8_t ctlb[PYDB_CTL_SIZE];
    char tmp[1100], dir[1100];
    const char *name;
    pydb_ctl c;
    scan s;
    struct stat sb, xs;
    int32_t *raw = NULL;
    int64_t end, nmax, at = PYDB_CTL_SIZE, versions = 0, bytes = 0;
    int wal_fd = -1, have_xrf, rc = PYDB_OK;
    ssize_t got;

    memset(out, 0, sizeof *out);
    memset(&s, 0, sizeof s);
    s.fd = -1;
    s.path = mst_path;
    s.err = err;
    if (layout < -1 || layout > 3)
        return PYDB_ERROR(err, PYDB_EINVAL, mst_path, -1, "bad layout %d",
                          layout);
    have_xrf = lstat(xrf_path, &xs) == 0;
    if (have_xrf && !bak_path)
        return PYDB_OSERROR(err, EEXIST, xrf_path, -1, "the database has an "
                            "XRF (give a name to keep it under)");
    if (bak_path && lstat(bak_path, &xs) == 0)
        return PYDB_OSERROR(err, EEXIST, bak_path, -1, "in the way of the "
                            "old XRF: move it away first");
    /* O_NONBLOCK: a FIFO does not wait for a writer (and is refused) */
    s.fd = pydb__vfs->open(mst_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
    if (s.fd < 0)
        return PYDB_OSERROR(err, errno, mst_path, -1, "cannot open: %s",
                            strerror(errno));
    if (fstat(s.fd, &sb) != 0) {
        rc = PYDB_OSERROR(err, errno, mst_path, -1, "cannot stat: %s",
                          strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = PYDB_ERROR(err, PYDB_EINVAL, mst_path, -1,
                        "not a regular file");
        goto cleanup;
    }
    s.size = (int64_t)sb.st_size;
    if ((rc = keep_others_out(&wal_fd, mst_path, xrf_path, err))) goto cleanup;
    got = pydb__vfs->pread(s.fd, ctlb, sizeof ctlb, 0);
    if (got < 0) {
        rc = PYDB_OSERROR(err, errno, mst_path, 0, "read failed: %s",
                          strerror(errno));
        goto cleanup;
    }
    if (got != sizeof ctlb) {
        rc = PYDB_CORRUPT(err, mst_path, 0, "no control record (%lld bytes)",
                          (long long)s.size);
        goto cleanup;
    }
    pydb__ctl_decode(&c, ctlb);
    end = pydb__ctl_end(c.next_block, c.next_pos);
    /* an XRF entry per MFN below NXTMFN: bounded by the file (a version
     * takes at least 16 bytes; 2^20 for the MFNs a reorganisation left
     * physically deleted in a small file) */
    nmax = s.size / 16 > (1 << 20) ? s.size / 16 : (1 << 20);
    if (!pydb__ctl_sane(&c) || c.mstxl > 6 || end < PYDB_CTL_SIZE ||
        (int64_t)c.next_mfn - 1 > nmax) {
        rc = PYDB_CORRUPT(err, mst_path, 4,
                          "control record: NXTMFN %d, NXTMFB/NXTMFP %d/%d, "
                          "MSTXL %d cannot be those of this %lld-byte master "
                          "file", (int)c.next_mfn, (int)c.next_block,
                          (int)c.next_pos, c.mstxl, (long long)s.size);
        goto cleanup;
    }
    out->ctl_end = end;
    if (end > s.size) end = s.size;
    s.win = malloc(WINDOW);
    if ((uint64_t)c.next_mfn * sizeof *raw <= SIZE_MAX)
        raw = malloc((size_t)c.next_mfn * sizeof *raw);
    if (!s.win || !raw) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, mst_path, -1, "no memory");
        goto cleanup;
    }
    if (layout < 0 && (layout = detect_layout(&s, c.mstxl, c.next_mfn,
                                              end)) < 0) {
        rc = layout;
        goto cleanup;
    }
    for (int32_t m = 0; m < c.next_mfn - 1; m++)
        raw[m] = -(2048 >> c.mstxl);   /* physically deleted until found */
    rc = walk(&s, &pydb__geom[layout], c.mstxl, c.next_mfn, &at, end, raw,
              &versions, &bytes);
    if (rc) goto cleanup;
    out->layout = layout;
    out->mstxl = c.mstxl;
    out->next_mfn = c.next_mfn;
    out->end = end;
    out->versions = versions;
    out->version_bytes = bytes;
    /* versions past the end of records: not taken, but told */
    rc = walk(&s, &pydb__geom[layout], c.mstxl, c.next_mfn, &at, s.size,
              NULL, &out->past_end, &bytes);
    if (rc) goto cleanup;
    for (int32_t m = 0; m < c.next_mfn - 1; m++) {
        pydb_xrf_entry e;
        pydb__xrf_unpack(&e, raw[m], c.mstxl);
        if (e.state == PYDB_XRF_PDELETED) out->missing++;
        else if (e.state == PYDB_XRF_LDELETED) out->deleted++;
        else out->active++;
        if (e.flags & PYDB_FLAG_PENDING) out->pending++;
    }
    /* the new file beside the old one, then the names swapped: the old
     * XRF kept under bak_path; a failure leaves it where it was */
    snprintf(tmp, sizeof tmp, "%s.mkxrf", xrf_path);
    unlink(tmp);   /* left by a run that was killed */
    rc = write_xrf(tmp, raw, (int64_t)c.next_mfn - 1,
                   (have_xrf && stat(xrf_path, &xs) == 0 ? xs.st_mode
                                                          : sb.st_mode) & 0666,
                   err);
    if (rc) goto cleanup;
    if (have_xrf && rename(xrf_path, bak_path) != 0) {
        rc = PYDB_OSERROR(err, errno, xrf_path, -1, "cannot rename to %s: %s",
                          bak_path, strerror(errno));
        unlink(tmp);
        goto cleanup;
    }
    if (rename(tmp, xrf_path) != 0) {
        rc = PYDB_OSERROR(err, errno, tmp, -1, "cannot rename to %s: %s",
                          xrf_path, strerror(errno));
        if (have_xrf) (void)rename(bak_path, xrf_path);
        unlink(tmp);
        goto cleanup;
    }
    pydb__path_split(dir, sizeof dir, &name, xrf_path);
    rc = pydb__fsync_dir(dir, err);
cleanup:
    if (wal_fd >= 0) pydb__vfs->close(wal_fd);   /* the lock goes with it */
    if (s.fd >= 0) pydb__vfs->close(s.fd);
    free(s.win);
    free(raw);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}
