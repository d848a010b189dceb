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
 * deleted (-(2048 >> MSTXL), as build.c writes a gap).  What CISIS mkxrf
 * does differently: it asks for "ok" on the terminal, takes the layout it
 * was compiled for, and keeps no copy; this takes a layout or detects it
 * (the one under which the first DETECT bytes hold the most bytes of
 * versions: the four leaders differ in size, so one fits), copies the old
 * XRF first, and has the database to itself meanwhile (take_database).
 * Like CISIS it writes the new XRF into the old file.
 *
 * A master file cut short (its control record names an end of records
 * past the file's end: a copy broken off, a disk full) keeps that end,
 * and pydb refuses to open it; with `mend` the control record then gets
 * the end of the last whole version found (CISIS does this with another
 * tool, ctlmfn).  Versions after the end of records the control record
 * names are not taken (an append never committed, or versions WinISIS
 * left there), but with `mend` those the old XRF points at are
 * (NXTMFB/NXTMFP damaged to an earlier block), and the end goes after
 * the last of them.
 *
 * Safety: every read is bounded by the file's size and the window; the
 * arrays are bounded by NXTMFN, which must be at most a sixteenth of the
 * file's size in bytes (or 2^20).  The master file is opened read-only,
 * and for `mend` written at its control record only (and grown by zeros
 * to a 2^MSTXL boundary).
 *
 * Depends on: record.c (control record, leaders, XRF values), build.c
 * (pydb__xrf_write_all), vfs.c, error.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* F_SETLEASE, F_SETSIG */
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
    int64_t taken_end;            /* the end of the last version taken     */
    const int32_t *only;          /* non-NULL: a version is taken only where
                                     only[mfn - 1] (an old XRF value) points
                                     at it; the others are counted in
                                     left_out                             */
    int64_t left_out;
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

/* Whether the XRF value `raw` names a version at offset q. */
static int points_at(int32_t raw, int64_t q, int mstxl)
{
    pydb_xrf_entry e;
    pydb__xrf_unpack(&e, raw, mstxl);
    return (e.state == PYDB_XRF_ACTIVE || e.state == PYDB_XRF_LDELETED) &&
           e.offset == q;
}

/* Walk the versions of layout g that start in [*at, end): their bytes
 * into *bytes and their count into *versions; with raw (an entry per MFN
 * below next_mfn), each version's XRF value stored at its MFN (the last
 * one in file order stays) -- with s->only, only the versions an old
 * entry points at, and only they are counted.  *at gets where the walk
 * stopped.  0, or PYDB_EIO (a read), or PYDB_ETOOBIG (an offset the XRF
 * of this MSTXL cannot name). */
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
        int version;
        if (!h) break;
        pydb__leader_decode(&l, g, h);
        /* (BASE is below 2^20: 65535 directory entries of 12 bytes) */
        version = pydb__leader_plausible(&l, g, next_mfn - 1, q, s->size) &&
                  (d = peek(s, q, l.base)) && pydb__dir_plausible(&l, g, d);
        if (version && s->only && !points_at(s->only[l.mfn - 1], q, mstxl)) {
            s->left_out++;   /* a version, but no old entry's */
        } else if (version) {
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
                s->taken_end = q + l.mfrl;
            }
        }
        /* after a version, its aligned MFRL (a multiple); else a step */
        q += version ? (l.mfrl + align - 1) / align * align : align;
        if (s->failed) break;
    }
    *at = q;
    return rc ? rc : s->failed ? PYDB_EIO : PYDB_OK;
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

/* The database to itself (docs: pydb.h, pydb_mkxrf).  The pydb writer
 * lock (the log's, as wal.c takes it) keeps out pydb commits and
 * collections; a lock on the XRF keeps out another mkxrf; a write lease
 * on the XRF (fcntl F_SETLEASE, Linux) is refused while any process has
 * it open -- a pydb handle holds its XRF open while it lives, and so do
 * WinISIS and CISIS -- and, held, makes every open of it wait until it is
 * given back (its break signal is SIGURG, which a process ignores by
 * default).  So the new XRF is written into the old file, not renamed
 * over it: an open that waited gets the file with its new content.
 * *wal_fd and *xrf_fd get the descriptors (-1: none); *created is set
 * when the XRF was made here (there was none).  `force`: go on where no
 * lease or writer lock can be had (another owner's files, NFS) -- the
 * caller vouches that nobody has the database open.  0, PYDB_ELOCKED
 * (held), PYDB_EUNSUPPORTED (a log with commits to apply; no lease or
 * lock to be had without `force`), PYDB_EIO. */
static int take_database(int *wal_fd, int *xrf_fd, int *created,
                         const char *mst_path, const char *xrf_path,
                         mode_t mode, int force, pydb_error *err)
{
    char base[1100], wal[1100];
    struct stat st;
    int fd;

    *wal_fd = *xrf_fd = -1;
    *created = 0;
    pydb__strip_ext(base, sizeof base, mst_path);
    pydb__wal_path(wal, sizeof wal, base, mst_path);
    fd = pydb__vfs->open(wal, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0 && errno != ENOENT && !force)
        return PYDB_ERROR(err, PYDB_EUNSUPPORTED, wal, -1,
                          "cannot take the pydb writer lock (%s): make sure "
                          "no program has the database open, then run with "
                          "force", strerror(errno));
    if (fd >= 0) {   /* (no log: no pydb writer ever opened it) */
        *wal_fd = fd;
        if (pydb__ofd_lock(fd, F_WRLCK) != 0)
            return PYDB_ERROR(err, PYDB_ELOCKED, wal, -1,
                              "a pydb writer is committing to this "
                              "database: close it first");
        if (fstat(fd, &st) == 0 && st.st_size > 0)
            return PYDB_ERROR(err, PYDB_EUNSUPPORTED, wal, -1,
                              "the write-ahead log holds commits (a pydb "
                              "handle has the database open, or one died "
                              "before recovery): open the database once, "
                              "close it, then make the XRF again");
    }
    fd = pydb__vfs->open(xrf_path, O_RDWR | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0 && errno == ENOENT) {
        fd = pydb__vfs->open(xrf_path, O_RDWR | O_CREAT | O_EXCL | O_NONBLOCK |
                                           O_CLOEXEC, (int)mode);
        *created = fd >= 0;
    }
    if (fd < 0)
        return errno == EWOULDBLOCK || errno == EEXIST
                   ? PYDB_ERROR(err, PYDB_ELOCKED, xrf_path, -1,
                                "the database is open (another process "
                                "holds its XRF): close it first")
                   : PYDB_OSERROR(err, errno, xrf_path, -1,
                                  "cannot open: %s", strerror(errno));
    *xrf_fd = fd;
    if (*created) (void)fchmod(fd, mode);   /* the umask's bits too */
    if (pydb__ofd_lock(fd, F_WRLCK) != 0)
        return PYDB_ERROR(err, PYDB_ELOCKED, xrf_path, -1,
                          "another mkxrf is at work on this database");
    if (fcntl(fd, F_SETSIG, SIGURG) != 0 ||
        fcntl(fd, F_SETLEASE, F_WRLCK) != 0) {
        if (errno == EAGAIN)
            return PYDB_ERROR(err, PYDB_ELOCKED, xrf_path, -1,
                              "the database is open (this or another "
                              "process has its XRF open): close it first");
        if (!force)
            return PYDB_ERROR(err, PYDB_EUNSUPPORTED, xrf_path, -1,
                              "cannot tell whether another process has the "
                              "database open (no file lease: %s): make sure "
                              "none has, then run with force",
                              strerror(errno));
    }
    return PYDB_OK;
}

/* Copy the n bytes of fd to a new file bak_path (created, never over
 * another; fsynced).  0 or PYDB_EIO. */
static int keep_copy(int fd, int64_t n, const char *path,
                     const char *bak_path, uint8_t *buf, size_t cap,
                     pydb_error *err)
{
    int out = pydb__vfs->open(bak_path, O_WRONLY | O_CREAT | O_EXCL |
                                            O_CLOEXEC, 0644);
    struct stat st;
    int rc = PYDB_OK;
    if (out < 0)
        return PYDB_OSERROR(err, errno, bak_path, -1, "cannot create: %s",
                            strerror(errno));
    if (fstat(fd, &st) == 0) (void)fchmod(out, st.st_mode & 07777);
    for (int64_t off = 0; off < n && rc == PYDB_OK;) {
        size_t len = n - off < (int64_t)cap ? (size_t)(n - off) : cap;
        ssize_t got = pydb__vfs->pread(fd, buf, len, off);
        int e;
        if (got <= 0) {
            rc = PYDB_OSERROR(err, got < 0 ? errno : EIO, path, off,
                              "read failed: %s",
                              got < 0 ? strerror(errno) : "short read");
        } else if ((e = -pydb__write_full(out, buf, (size_t)got, off)) != 0) {
            rc = PYDB_OSERROR(err, e, bak_path, off, "write failed: %s",
                              strerror(e));
        }
        off += got > 0 ? got : 0;
    }
    if (rc == PYDB_OK && pydb__vfs->fsync(out) != 0)
        rc = PYDB_OSERROR(err, errno, bak_path, -1, "fsync failed: %s",
                          strerror(errno));
    pydb__vfs->close(out);
    if (rc) unlink(bak_path);
    return rc ? rc : pydb__fsync_parent(bak_path, err);
}

/* raw[n] written over the XRF at fd from offset 0, the file cut to its
 * blocks, fsynced.  0 or PYDB_EIO. */
static int write_xrf(int fd, const char *path, const int32_t *raw,
                     int64_t n, pydb_error *err)
{
    int64_t blocks = pydb__xrf_blocks(n + 1);
    int rc = pydb__xrf_write_all(fd, path, raw, n, err);
    if (rc) return rc;
    if (pydb__vfs->ftruncate(fd, (blocks ? blocks : 1) * PYDB_BLOCK) != 0)
        return PYDB_OSERROR(err, errno, path, -1, "ftruncate failed: %s",
                            strerror(errno));
    if (pydb__vfs->fsync(fd) != 0)
        return PYDB_OSERROR(err, errno, path, -1, "fsync failed: %s",
                            strerror(errno));
    return PYDB_OK;
}

/* The control record ctlb (PYDB_CTL_SIZE bytes, as read) written back to
 * the master file mst_path with NXTMFB/NXTMFP of `end`, the file first
 * grown with zeros to `end` where it is shorter now (an end rounded up to
 * 2^MSTXL past a cut; never cut), then fsynced. */
static int mend_control(const char *mst_path, uint8_t *ctlb, int32_t next_mfn,
                        int64_t end, pydb_error *err)
{
    int fd = pydb__vfs->open(mst_path, O_RDWR | O_CLOEXEC, 0);
    struct stat st;
    ssize_t put;
    int rc = PYDB_OK;
    if (fd < 0)
        return PYDB_OSERROR(err, errno, mst_path, -1, "cannot open for "
                            "writing: %s", strerror(errno));
    pydb__ctl_set_next(ctlb, next_mfn, end);
    if (fstat(fd, &st) != 0) {
        rc = PYDB_OSERROR(err, errno, mst_path, -1, "cannot stat: %s",
                          strerror(errno));
        goto cleanup;
    }
    if (end > (int64_t)st.st_size &&
        pydb__vfs->ftruncate(fd, (off_t)end) != 0) {
        rc = PYDB_OSERROR(err, errno, mst_path, (int64_t)st.st_size,
                          "cannot grow to %lld bytes: %s", (long long)end,
                          strerror(errno));
        goto cleanup;
    }
    put = pydb__vfs->pwrite(fd, ctlb, PYDB_CTL_SIZE, 0);
    if (put != PYDB_CTL_SIZE) {
        int e = put < 0 ? errno : EIO;   /* a short write sets none */
        rc = PYDB_OSERROR(err, e, mst_path, 0, "cannot write the control "
                          "record: %s", strerror(e));
        goto cleanup;
    }
    if (pydb__vfs->fsync(fd) != 0)
        rc = PYDB_OSERROR(err, errno, mst_path, -1, "fsync failed: %s",
                          strerror(errno));
cleanup:
    pydb__vfs->close(fd);
    return rc;
}

/* The values of the XRF open at fd for MFN 1..next_mfn-1 (*out: free
 * it), 0 where the file is shorter: what the old XRF pointed at.  0, or
 * PYDB_EIO, PYDB_ENOMEM. */
static int old_entries(int32_t **out, int fd, const char *path,
                       int32_t next_mfn, pydb_error *err)
{
    uint8_t blk[PYDB_BLOCK];
    int32_t n = next_mfn > 1 ? next_mfn - 1 : 0;
    int32_t *v = calloc((size_t)n + 1, sizeof *v);
    *out = NULL;
    if (!v) return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory");
    for (int32_t b = 0; (int64_t)b * PYDB_XRF_PER_BLOCK < n; b++) {
        ssize_t got = pydb__vfs->pread(fd, blk, sizeof blk,
                                       (off_t)b * PYDB_BLOCK);
        if (got < 0) {
            free(v);
            return PYDB_OSERROR(err, errno, path, (int64_t)b * PYDB_BLOCK,
                                "read failed: %s", strerror(errno));
        }
        if (got < (ssize_t)sizeof blk) break;   /* shorter: 0 from here */
        for (int k = 0; k < PYDB_XRF_PER_BLOCK; k++) {
            int64_t m = (int64_t)b * PYDB_XRF_PER_BLOCK + k;
            if (m < n) v[m] = (int32_t)pydb__u32(blk + 4 + 4 * k);
        }
    }
    *out = v;
    return PYDB_OK;
}

int pydb_mkxrf(pydb_mkxrf_report *out, const char *mst_path,
               const char *xrf_path, const char *bak_path, int layout,
               int force, int mend, pydb_error *err)
{
    uint8_t ctlb[PYDB_CTL_SIZE];
    pydb_ctl c;
    scan s;
    struct stat sb, xs;
    int32_t *raw = NULL;
    int64_t end, nmax, at = PYDB_CTL_SIZE, versions = 0, bytes = 0;
    int wal_fd = -1, xrf_fd = -1, created = 0, leased = 0, rc = PYDB_OK;
    int taken_past = 0;
    int32_t *old = NULL;
    ssize_t got;

    memset(out, 0, sizeof *out);
    memset(&s, 0, sizeof s);
    s.fd = -1;
    s.taken_end = PYDB_CTL_SIZE;
    s.path = mst_path;
    s.err = err;
    if (layout < -1 || layout > 3)
        return PYDB_ERROR(err, PYDB_EINVAL, mst_path, -1, "bad layout %d",
                          layout);
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
    rc = take_database(&wal_fd, &xrf_fd, &created, mst_path, xrf_path,
                       sb.st_mode & 0666, force, err);
    leased = xrf_fd >= 0;
    if (rc) goto cleanup;
    if (!created && !bak_path) {
        rc = PYDB_OSERROR(err, EEXIST, xrf_path, -1, "the database has an "
                          "XRF (give a name to keep it under)");
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
    /* versions past the end of records: not taken, but told; with
     * `mend` taken (a control record whose end lies before the versions:
     * damaged, or not updated by the program that wrote them) */
    if (mend && out->ctl_end <= s.size && !created) {
        rc = old_entries(&old, xrf_fd, xrf_path, c.next_mfn, err);
        if (rc) goto cleanup;
        s.only = old;   /* what no old entry names: told, not taken */
        rc = walk(&s, &pydb__geom[layout], c.mstxl, c.next_mfn, &at, s.size,
                  raw, &out->past_end_taken, &bytes);
        out->past_end = s.left_out;
        taken_past = out->past_end_taken > 0;
        if (taken_past) {
            out->versions += out->past_end_taken;
            out->version_bytes += bytes;
            out->end = s.size;
        }
    } else {
        rc = walk(&s, &pydb__geom[layout], c.mstxl, c.next_mfn, &at, s.size,
                  NULL, &out->past_end, &bytes);
    }
    if (rc) goto cleanup;
    for (int32_t m = 0; m < c.next_mfn - 1; m++) {
        pydb_xrf_entry e;
        pydb__xrf_unpack(&e, raw[m], c.mstxl);
        if (e.state == PYDB_XRF_PDELETED) out->missing++;
        else if (e.state == PYDB_XRF_LDELETED) out->deleted++;
        else out->active++;
        if (e.flags & PYDB_FLAG_PENDING) out->pending++;
    }
    if (mend && out->ctl_end > s.size && versions == 0) {
        /* the end would go back to the control record, and the next
         * append over what the scan did not recognise */
        rc = PYDB_CORRUPT(err, mst_path, PYDB_CTL_SIZE,
                          "no whole record version of the %s layout before "
                          "the cut at byte %lld: the control record is not "
                          "mended, and nothing is written (another layout?)",
                          pydb_layout_name(layout), (long long)s.size);
        goto cleanup;
    }
    /* the old XRF kept, as it is, before a byte changes (the buffer is
     * free: the scan is over) */
    if (!created) {
        if (fstat(xrf_fd, &xs) != 0) {
            rc = PYDB_OSERROR(err, errno, xrf_path, -1, "cannot stat: %s",
                              strerror(errno));
            goto cleanup;
        }
        rc = keep_copy(xrf_fd, (int64_t)xs.st_size, xrf_path, bak_path,
                       s.win, WINDOW, err);
        if (rc) goto cleanup;
    }
    rc = write_xrf(xrf_fd, xrf_path, raw, (int64_t)c.next_mfn - 1, err);
    if (rc == PYDB_OK && created) rc = pydb__fsync_parent(xrf_path, err);
    /* a master file cut short: the records end where its last whole
     * version ends (on a 2^MSTXL boundary), after the new XRF is in (a
     * failure between leaves a run to do again, as before it) */
    if (rc == PYDB_OK && mend &&
        (out->ctl_end > s.size || taken_past)) {
        int64_t align = (int64_t)1 << c.mstxl;
        int64_t at_end = (s.taken_end + align - 1) / align * align;
        rc = mend_control(mst_path, ctlb, c.next_mfn, at_end, err);
        if (rc == PYDB_OK) out->mended_end = at_end;
    }
cleanup:
    if (leased) (void)fcntl(xrf_fd, F_SETLEASE, F_UNLCK);
    if (xrf_fd >= 0) pydb__vfs->close(xrf_fd);   /* its lock goes with it */
    if (rc && created) unlink(xrf_path);          /* no half-made XRF */
    if (wal_fd >= 0) pydb__vfs->close(wal_fd);
    if (s.fd >= 0) pydb__vfs->close(s.fd);
    free(s.win);
    free(raw);
    free(old);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}
