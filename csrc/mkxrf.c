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
 * validator's orphan scan makes), then go on after it; elsewhere step one
 * alignment unit (2 bytes, 2^MSTXL with MSTXL > 0: §2.3), which crosses
 * the zero fill that the never-split rule leaves at block ends.  A version
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
#include "pydb_int.h"
#include <errno.h>
#include <fcntl.h>
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

/* Walk the versions of layout g that start in [PYDB_CTL_SIZE, end):
 * their bytes into *bytes and their count into *versions; with raw (an
 * entry per MFN below next_mfn), each version's XRF value stored at its
 * MFN (the last one in file order stays).  0, or PYDB_EIO (a read), or
 * PYDB_ETOOBIG (an offset the XRF of this MSTXL cannot name). */
static int walk(scan *s, const pydb_geom *g, int mstxl, int32_t next_mfn,
                int64_t end, int32_t *raw, int64_t *versions,
                int64_t *bytes)
{
    int64_t align = mstxl > 0 ? (int64_t)1 << mstxl : 2;
    int64_t q = PYDB_CTL_SIZE;
    *versions = *bytes = 0;
    while (q + g->leader <= end) {
        const uint8_t *h = peek(s, q, g->leader), *d = NULL;
        pydb_leader l;
        if (!h) break;
        pydb__leader_decode(&l, g, h);
        if (pydb__leader_plausible(&l, g, next_mfn - 1, q, s->size) &&
            (l.base > WINDOW || ((d = peek(s, q, l.base)) &&
                                 pydb__dir_plausible(&l, g, d)))) {
            (*versions)++;
            *bytes += l.mfrl;
            if (raw) {
                int flags = l.mfbwb || l.mfbwp ? PYDB_FLAG_PENDING : 0;
                if (q / PYDB_BLOCK + 1 > (int64_t)(INT32_MAX >> (11 - mstxl)))
                    return PYDB_ERROR(s->err, PYDB_ETOOBIG, s->path, q,
                                      "a version of MFN %d at offset %lld, "
                                      "past what an XRF with MSTXL %d can "
                                      "name", (int)l.mfn, (long long)q,
                                      mstxl);
                raw[l.mfn - 1] = pydb__xrf_encode(q, flags, mstxl);
                if (l.status == 1) raw[l.mfn - 1] = -raw[l.mfn - 1];
            }
            q += (l.mfrl + align - 1) / align * align;
        } else {
            q += align;
        }
        if (s->failed) return PYDB_EIO;
    }
    return s->failed ? PYDB_EIO : PYDB_OK;
}

/* Write raw[n] as the new XRF file at path (created, fsynced; removed
 * again on failure). */
static int write_xrf(const char *path, const int32_t *raw, int64_t n,
                     pydb_error *err)
{
    int fd = pydb__vfs->open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                             0644);
    int rc;
    if (fd < 0)
        return PYDB_OSERROR(err, errno, path, -1, "cannot create: %s",
                            strerror(errno));
    rc = pydb__xrf_write_all(fd, path, raw, n, err);
    if (rc == PYDB_OK && pydb__vfs->fsync(fd) != 0)
        rc = PYDB_OSERROR(err, errno, path, -1, "fsync failed: %s",
                          strerror(errno));
    pydb__vfs->close(fd);
    if (rc) unlink(path);
    return rc;
}

int pydb_mkxrf(pydb_mkxrf_report *out, const char *mst_path,
               const char *xrf_path, int layout, pydb_error *err)
{
    uint8_t ctlb[PYDB_CTL_SIZE];
    pydb_ctl c;
    scan s;
    struct stat sb;
    int32_t *raw = NULL;
    int64_t end, versions = 0, bytes = 0;
    int rc = PYDB_OK;

    memset(out, 0, sizeof *out);
    memset(&s, 0, sizeof s);
    s.fd = -1;
    s.path = mst_path;
    s.err = err;
    if (layout < -1 || layout > 3)
        return PYDB_ERROR(err, PYDB_EINVAL, mst_path, -1, "bad layout %d",
                          layout);
    s.fd = pydb__vfs->open(mst_path, O_RDONLY | O_CLOEXEC, 0);
    if (s.fd < 0)
        return PYDB_OSERROR(err, errno, mst_path, -1, "cannot open: %s",
                            strerror(errno));
    if (fstat(s.fd, &sb) != 0) {
        rc = PYDB_OSERROR(err, errno, mst_path, -1, "cannot stat: %s",
                          strerror(errno));
        goto cleanup;
    }
    s.size = (int64_t)sb.st_size;
    if (pydb__vfs->pread(s.fd, ctlb, sizeof ctlb, 0) != sizeof ctlb) {
        rc = PYDB_CORRUPT(err, mst_path, 0, "no control record (%lld bytes)",
                          (long long)s.size);
        goto cleanup;
    }
    pydb__ctl_decode(&c, ctlb);
    end = pydb__ctl_end(c.next_block, c.next_pos);
    if (!pydb__ctl_sane(&c) || c.mstxl > 6 || end < PYDB_CTL_SIZE ||
        (int64_t)c.next_mfn - 1 > (s.size > (1 << 20) ? s.size : (1 << 20))) {
        rc = PYDB_CORRUPT(err, mst_path, 4,
                          "control record: NXTMFN %d, NXTMFB/NXTMFP %d/%d, "
                          "MSTXL %d cannot be those of this %lld-byte master "
                          "file", (int)c.next_mfn, (int)c.next_block,
                          (int)c.next_pos, c.mstxl, (long long)s.size);
        goto cleanup;
    }
    if (end > s.size) end = s.size;
    s.win = malloc(WINDOW);
    raw = malloc(((size_t)c.next_mfn - 1 + 1) * sizeof *raw);
    if (!s.win || !raw) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, mst_path, -1, "no memory");
        goto cleanup;
    }
    if (layout < 0) {
        int64_t best = -1, lim = end < DETECT ? end : DETECT;
        for (int k = 0; k < 4; k++) {
            rc = walk(&s, &pydb__geom[k], c.mstxl, c.next_mfn, lim, NULL,
                      &versions, &bytes);
            if (rc) goto cleanup;
            if (bytes > best) {
                best = bytes;
                layout = k;
            }
        }
    }
    for (int32_t m = 0; m < c.next_mfn - 1; m++)
        raw[m] = -2048 >> c.mstxl;   /* physically deleted until found */
    rc = walk(&s, &pydb__geom[layout], c.mstxl, c.next_mfn, end, raw,
              &versions, &bytes);
    if (rc) goto cleanup;
    out->layout = layout;
    out->mstxl = c.mstxl;
    out->next_mfn = c.next_mfn;
    out->end = end;
    out->versions = versions;
    out->version_bytes = bytes;
    for (int32_t m = 0; m < c.next_mfn - 1; m++) {
        pydb_xrf_entry e;
        pydb__xrf_unpack(&e, raw[m], c.mstxl);
        if (e.state == PYDB_XRF_PDELETED) out->missing++;
        else if (e.state == PYDB_XRF_LDELETED) out->deleted++;
        else out->active++;
        if (e.flags & PYDB_FLAG_PENDING) out->pending++;
    }
    rc = write_xrf(xrf_path, raw, (int64_t)c.next_mfn - 1, err);
cleanup:
    if (s.fd >= 0) pydb__vfs->close(s.fd);
    free(s.win);
    free(raw);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}
