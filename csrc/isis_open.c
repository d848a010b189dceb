/*
 * isis_open.c - opening an existing CDS/ISIS inverted file set: finding
 * the files beside a database path (any case of the names), reading the
 * .CNT control records, the geometry of nodes and leaves, validating each
 * candidate set, choosing one (pydb_isis_index_open) and describing it
 * (pydb_isis_index_describe).
 *
 * Choosing the file set (§4.8).  A directory may hold both a classic and
 * a LIND set, of which only one belongs to the .CNT/.N0x files.  Each
 * candidate set is validated before it is trusted: record sizes against
 * NMAXPOS/FMAXPOS and the file sizes, POS/OCK/IT fields of the first,
 * last and root records, the leaves reached from the leftmost and the
 * rightmost bottom nodes against their separator keys, and the postings
 * of the first keys.  A set that fails is dropped (the reason goes into
 * the index's note); if both pass, the one with the newer leaf files is
 * taken.  For LIND, the MFN width of MFN lists (3 bytes, LIND; 4 bytes,
 * LIND4) is not recorded in the files; it is the width under which the
 * sampled lists give ascending MFNs that fit the database (§4.7).
 *
 *
 * Depends on: isis_read.c (records, postings, cursors, the index
 * operations), keys.c (key rules), path.c (pydb__strip_ext).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "isis_int.h"

/* ------------------------------------------------------------- open */

/* Known key lengths (§4.1). */
static const char *const f_ext[F_COUNT] = {"cnt", "n01", "n02", "l01", "l02",
                                           "ifp", "ly1", "ly2", "iyp", "mst"};

static const int known_le[] = {10, 16, 30, 60, 256, 512};

static size_t roundup(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Parse .CNT record t (1-based) of size recsz at p into tr. */
static int parse_cnt(tree *tr, int t, const uint8_t *p, const ixfile *cnt,
                     int64_t off, pydb_error *err)
{
    memset(tr, 0, sizeof *tr);
    tr->t = t;
    tr->ordn = pydb__u16(p + 2);
    tr->ordf = pydb__u16(p + 4);
    tr->liv = i16(p + 10);
    tr->posrx = i32(p + 12);
    tr->nmax = i32(p + 16);
    tr->fmax = i32(p + 20);
    if (pydb__u16(p) != t)
        return PYDB_CORRUPT(err, cnt->f.path, off,
                            ".CNT record %d has IDTYPE %d", t,
                            pydb__u16(p));
    if (tr->liv < 0 || tr->fmax == 0) {
        tr->empty = 1;
        return PYDB_OK;
    }
    if (tr->ordn < 1 || tr->ordn > MAX_ORD || tr->ordf < 1 ||
        tr->ordf > MAX_ORD || tr->liv > MAX_LIV || tr->nmax < 1 ||
        tr->fmax < 1 || tr->posrx < 1 || tr->posrx > tr->nmax)
        return PYDB_CORRUPT(err, cnt->f.path, off,
                            ".CNT record %d: ORDN %d ORDF %d LIV %d POSRX %d "
                            "NMAXPOS %d FMAXPOS %d out of range", t,
                            tr->ordn, tr->ordf, tr->liv, (int)tr->posrx,
                            (int)tr->nmax, (int)tr->fmax);
    return PYDB_OK;
}

/* Find the node geometry (LE, pad) of a non-empty tree from the node
 * file: the record size must fit NMAXPOS records and divide the file,
 * and records 1 and POSRX must carry their own POS and IT. */
static int node_geometry(tree *tr, const ixfile *nf, pydb_error *err)
{
    uint8_t *buf = NULL;
    int rc = PYDB_OK;
    tr->nf = nf;
    if (!nf->open)
        return PYDB_CORRUPT(err, nf->f.path, -1,
                            "tree %d is not empty but its node file is "
                            "missing", tr->t);
    for (size_t i = 0; i < sizeof known_le / sizeof *known_le; i++) {
        int le = known_le[i];
        for (int pass = 0; pass < 2; pass++) {
            int pad = pass ? (4 - le % 4) % 4 : 0;
            size_t rec = 8 + 2 * (size_t)tr->ordn * (size_t)(le + pad + 4);
            int ock;
            pydb_error scratch;
            if (pass && pad == 0) continue;
            if ((int64_t)rec * tr->nmax > nf->f.size ||
                nf->f.size % (int64_t)rec != 0)
                continue;
            tr->le = le;
            tr->pad = pad;
            tr->nrec = rec;
            tr->nent = (size_t)(le + pad + 4);
            free(buf);
            buf = malloc(rec);
            if (!buf)
                return PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
            if (pydb__isis_read_node(tr, 1, buf, &ock, &scratch) == PYDB_OK &&
                pydb__isis_read_node(tr, tr->posrx, buf, &ock,
                                     &scratch) == PYDB_OK &&
                pydb__isis_read_node(tr, tr->nmax, buf, &ock,
                                     &scratch) == PYDB_OK)
                goto done;
        }
    }
    rc = PYDB_CORRUPT(err, nf->f.path, 0,
                      "node file of tree %d (%lld bytes, NMAXPOS %d) matches "
                      "no known key length (10/16/30/60/256/512, packed or "
                      "aligned)", tr->t, (long long)nf->f.size,
                      (int)tr->nmax);
done:
    free(buf);
    return rc;
}

/* Leaf geometry for classic (lind = 0) or LIND with (infx, align). */
static void leaf_geometry(tree *tr, int lind, int infx, int align)
{
    if (!lind) {
        tr->lhdr = 12;
        tr->lent = (size_t)(tr->le + tr->pad + 8);
        tr->info1 = (size_t)(tr->le + tr->pad);
        tr->info2 = tr->info1 + 4;
        tr->info3 = 0;
    } else {
        tr->lhdr = 16;
        tr->info1 = roundup((size_t)tr->le, (size_t)align);
        tr->info2 = tr->info1 + (size_t)infx;
        tr->info3 = roundup(tr->info2 + 4, (size_t)align);
        tr->lent = roundup(tr->info3 + (size_t)infx, (size_t)align);
    }
    tr->lrec = tr->lhdr + 2 * (size_t)tr->ordf * tr->lent;
}

/* Check the leaf file of tree tr against its geometry: size, records 1
 * and FMAXPOS, and the leaves under the leftmost and rightmost bottom
 * nodes against their separator keys. */
static int check_leaves(const tree *tr, pydb_error *err)
{
    const ixfile *lf = tr->lf;
    uint8_t *nbuf = malloc(tr->nrec), *lbuf = malloc(tr->lrec);
    int rc = PYDB_OK, ock;

    if (!nbuf || !lbuf) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1, "no memory");
        goto cleanup;
    }
    if ((int64_t)tr->lrec * tr->fmax > lf->f.size ||
        lf->f.size % (int64_t)tr->lrec != 0) {
        rc = PYDB_CORRUPT(err, lf->f.path, 0,
                          "leaf file (%lld bytes) does not hold FMAXPOS %d "
                          "records of %zu bytes", (long long)lf->f.size,
                          (int)tr->fmax, tr->lrec);
        goto cleanup;
    }
    if ((rc = pydb__isis_read_leaf(tr, 1, lbuf, &ock, err)) ||
        (rc = pydb__isis_read_leaf(tr, tr->fmax, lbuf, &ock, err)))
        goto cleanup;
    for (int side = 0; side < 2; side++) {
        int32_t r = tr->posrx;
        for (int level = 0; level <= tr->liv; level++) {
            int nock, j;
            int32_t p;
            rc = pydb__isis_read_node(tr, r, nbuf, &nock, err);
            if (rc) goto cleanup;
            j = side ? nock - 1 : 0;
            p = node_punt(tr, nbuf, j);
            if (p > 0 && level < tr->liv && p <= tr->nmax) {
                r = p;
                continue;
            }
            /* bottom node: every entry must name a leaf whose keys lie
             * between its separator and the next one */
            for (j = 0; j < nock; j++) {
                int lock;
                p = node_punt(tr, nbuf, j);
                if (p >= 0 || -(int64_t)p > tr->fmax) {
                    rc = PYDB_CORRUPT(err, tr->nf->f.path, node_off(tr, r),
                                      "bottom node %d entry %d points at %d, "
                                      "not a leaf (LIV %d)", (int)r, j,
                                      (int)p, tr->liv);
                    goto cleanup;
                }
                rc = pydb__isis_read_leaf(tr, -p, lbuf, &lock, err);
                if (rc) goto cleanup;
                if (lock > 0 &&
                    ((j > 0 && kcmp(leaf_key(tr, lbuf, 0), (size_t)tr->le,
                                    node_key(tr, nbuf, j),
                                    (size_t)tr->le) < 0) ||
                     (j + 1 < nock &&
                      kcmp(leaf_key(tr, lbuf, lock - 1), (size_t)tr->le,
                           node_key(tr, nbuf, j + 1), (size_t)tr->le) >= 0))) {
                    rc = PYDB_CORRUPT(err, lf->f.path, leaf_off(tr, -p),
                                      "leaf %d does not hold the keys its "
                                      "node %d says (stale or mismatched "
                                      "leaf file)", (int)-p, (int)r);
                    goto cleanup;
                }
            }
            break;
        }
    }
cleanup:
    free(nbuf);
    free(lbuf);
    return rc;
}

/* Decode (check only) the lists of the first keys of tree tr; for LIND
 * with width w.  *max_mfn receives the largest MFN met. */
static int check_lists(const isis_index *ix, const tree *tr, int w,
                       int limit, int32_t *max_mfn, pydb_error *err)
{
    cursor c;
    int rc = pydb__isis_cursor_init(&c, tr, (const uint8_t *)"", 0, err);
    pydb_postings p = {0};
    for (int k = 0; !rc && k < limit; k++) {
        const uint8_t *e;
        rc = pydb__isis_cursor_peek(&c, &e, err);
        if (rc || !e) break;
        p.n = 0;
        if (ix->lind) {
            lind_ref r;
            pydb__isis_lind_entry(ix, tr, e, &r);
            rc = pydb__isis_lind_postings(ix, &r, w, ix->nxtmfn, &p, err);
        } else {
            rc = pydb__isis_ifp_postings(
                ix, i32(e + tr->info1), i32(e + tr->info2), tr->lf->f.path,
                leaf_entry_off(tr, c.leaf, c.buf, e) + (int64_t)tr->info1,
                &p, err);
        }
        if (!rc && p.n && p.v[p.n - 1].mfn > *max_mfn)
            *max_mfn = p.v[p.n - 1].mfn;
        pydb__isis_cursor_advance(&c);
    }
    pydb__isis_cursor_free(&c);
    pydb_postings_free(&p);
    return rc;
}

/* Try the classic (lind = 0) or LIND set on ix (trees parsed from .CNT,
 * node geometry known).  On success ix describes a usable index. */
static int try_set(isis_index *ix, int lind, pydb_error *err)
{
    static const int layouts[][2] = {{4, 4}, {8, 8}, {8, 4}, {4, 1}, {8, 1}};
    const int nlayouts = lind ? 5 : 1;
    int lf_id[2] = {lind ? F_LY1 : F_L1, lind ? F_LY2 : F_L2};
    int post = lind ? F_IYP : F_IFP;
    int any = 0, rc = PYDB_OK;

    ix->lind = lind;
    ix->post = post;
    ix->infx = ix->infx_align = 0;
    ix->mfn_bytes = 3;
    for (int t = 0; t < 2; t++) {
        ix->tr[t].lf = &ix->files[lf_id[t]];
        if (ix->tr[t].empty) continue;
        any = 1;
        if (!ix->files[lf_id[t]].open)
            return PYDB_CORRUPT(err, ix->files[lf_id[t]].f.path, -1,
                                "tree %d is not empty but its %s leaf file "
                                "is missing", t + 1,
                                lind ? "LIND" : "classic");
    }
    if (any && !ix->files[post].open)
        return PYDB_CORRUPT(err, ix->files[post].f.path, -1,
                            "the %s posting file is missing",
                            lind ? "LIND (.iyp)" : "classic (.ifp)");
    if (!any) return PYDB_OK;
    for (int l = 0; l < nlayouts; l++) {
        pydb_error scratch;
        int ok = 1;
        for (int t = 0; t < 2 && ok; t++) {
            tree *tr = &ix->tr[t];
            if (tr->empty) continue;
            leaf_geometry(tr, lind, layouts[l][0], layouts[l][1]);
            rc = check_leaves(tr, l + 1 < nlayouts ? &scratch : err);
            if (rc) ok = 0;
        }
        if (ok) {
            ix->infx = lind ? layouts[l][0] : 0;
            ix->infx_align = lind ? layouts[l][1] : 0;
            rc = PYDB_OK;
            break;
        }
        if (l + 1 == nlayouts) return rc;
    }
    if (!lind) {
        int32_t mx = 0;
        for (int t = 0; t < 2; t++)
            if (!ix->tr[t].empty &&
                (rc = check_lists(ix, &ix->tr[t], 3, 4, &mx, err)))
                return rc;
        return PYDB_OK;
    }
    /* LIND: the MFN width under which the sampled lists decode, ascend
     * and fit the database; of two, the one giving smaller MFNs. */
    {
        int32_t mx[2] = {0, 0};
        int ok[2] = {0, 0};
        pydb_error e3, e4;
        /* bounded by the master file's NXTMFN first; an index newer than
         * the master file is then tried without that bound */
        for (int pass = 0; pass < 2 && !ok[0] && !ok[1]; pass++) {
            int32_t saved_nxt = ix->nxtmfn;
            if (pass == 1) {
                if (!saved_nxt) break;
                ix->nxtmfn = 0;
            }
            for (int w = 3; w <= 4; w++) {
                pydb_error *pe = w == 3 ? &e3 : &e4;
                ok[w - 3] = 1;
                mx[w - 3] = 0;
                for (int t = 0; t < 2 && ok[w - 3]; t++)
                    if (!ix->tr[t].empty &&
                        check_lists(ix, &ix->tr[t], w, WIDTH_SAMPLE,
                                    &mx[w - 3], pe) != PYDB_OK)
                        ok[w - 3] = 0;
            }
            ix->nxtmfn = saved_nxt;
        }
        if (ok[0] && (!ok[1] || mx[0] <= mx[1]))
            ix->mfn_bytes = 3;
        else if (ok[1])
            ix->mfn_bytes = 4;
        else {
            return PYDB_CORRUPT(err, e3.path, e3.offset,
                                "LIND postings decode with neither 3- nor "
                                "4-byte MFNs (3: %s)", e3.message);
        }
    }
    return PYDB_OK;
}

/* Locate every index file of `base` in its directory, case-insensitively
 * (§1).  Sets paths (found or not) and opens those found. */
static int find_files(isis_index *ix, const char *base, pydb_error *err)
{
    char dir[1024];
    const char *name;
    size_t nlen;
    DIR *d;
    struct dirent *de;
    char found[F_COUNT][1024];

    memset(found, 0, sizeof found);
    pydb__path_split(dir, sizeof dir, &name, base);
    nlen = strlen(name);
    d = opendir(dir);
    if (!d)
        return PYDB_OSERROR(err, errno, dir, -1, "cannot list directory: %s",
                            strerror(errno));
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strlen(n) != nlen + 4 || n[nlen] != '.' ||
            strncasecmp(n, name, nlen) != 0)
            continue;
        for (int i = 0; i < F_COUNT; i++) {
            if (strcasecmp(n + nlen + 1, f_ext[i]) != 0) continue;
            /* prefer the exact-case name if several differ only in case */
            if (!found[i][0] || strncmp(n, name, nlen) == 0)
                snprintf(found[i], sizeof found[i], "%.511s%.511s",
                         name != base ? dir : "", n);
        }
    }
    closedir(d);
    for (int i = 0; i < F_COUNT; i++) {
        int rc;
        if (!found[i][0]) {
            snprintf(ix->files[i].f.path, sizeof ix->files[i].f.path,
                     "%.1010s.%s", base, f_ext[i]);
            continue;
        }
        rc = pydb__isis_ixfile_open(&ix->files[i], found[i], err);
        if (rc) return rc;
    }
    return PYDB_OK;
}

static int64_t newest(const isis_index *ix, int a, int b, int c)
{
    int64_t m = ix->files[a].mtime_ns;
    if (ix->files[b].mtime_ns > m) m = ix->files[b].mtime_ns;
    if (ix->files[c].mtime_ns > m) m = ix->files[c].mtime_ns;
    return m;
}

int pydb_isis_index_open(pydb_index **out, const char *path, int keys,
                         pydb_error *err)
{
    char base[1024];
    isis_index *ix = NULL;
    uint8_t cnt[56];
    int rc, recsz, have_classic, have_lind, ok_classic, ok_lind;
    pydb_error ec, el;
    tree saved[2];

    *out = NULL;
    if (!path || !*path || strlen(path) >= sizeof base - 8)
        return PYDB_ERROR(err, PYDB_EINVAL, path ? path : "", -1,
                          "empty or too long database path");
    pydb__strip_ext(base, sizeof base, path);
    ix = calloc(1, sizeof *ix);
    if (!ix)
        return PYDB_ERROR(err, PYDB_ENOMEM, path, -1, "no memory for index");
    for (int i = 0; i < F_COUNT; i++) pydb__isis_ixfile_init(&ix->files[i]);
    ix->base.ops = &pydb__isis_ops;
    ix->base.kind = PYDB_INDEX_ISIS_CLASSIC;
    rc = find_files(ix, base, err);
    if (rc) goto cleanup;
    if (!ix->files[F_CNT].open) {
        rc = PYDB_OSERROR(err, ENOENT, ix->files[F_CNT].f.path, -1,
                          "no inverted file (.cnt) for database %s", base);
        goto cleanup;
    }
    /* NXTMFN bounds LIND MFNs when the master file is there (§2.1) */
    if (ix->files[F_MST].open && ix->files[F_MST].f.size >= 8) {
        uint8_t h[8];
        if (rd(&ix->files[F_MST], h, 8, 0, "control record", err) == PYDB_OK &&
            i32(h + 4) > 0)
            ix->nxtmfn = i32(h + 4);
    }
    /* .CNT: 2 x 26 bytes (packed) or 2 x 28 (aligned), §4.2 */
    if (ix->files[F_CNT].f.size == 52)
        recsz = 26;
    else if (ix->files[F_CNT].f.size == 56)
        recsz = 28;
    else {
        rc = PYDB_CORRUPT(err, ix->files[F_CNT].f.path, 0,
                          ".CNT has %lld bytes, not 52 (packed) or 56 "
                          "(aligned)", (long long)ix->files[F_CNT].f.size);
        goto cleanup;
    }
    ix->cnt_aligned = recsz == 28;
    rc = rd(&ix->files[F_CNT], cnt, (size_t)(2 * recsz), 0, ".CNT", err);
    if (rc) goto cleanup;
    for (int t = 0; t < 2; t++) {
        rc = parse_cnt(&ix->tr[t], t + 1, cnt + t * recsz, &ix->files[F_CNT],
                       (int64_t)t * recsz, err);
        if (rc) goto cleanup;
        if (!ix->tr[t].empty) {
            rc = node_geometry(&ix->tr[t], &ix->files[t ? F_N2 : F_N1], err);
            if (rc) goto cleanup;
        }
        ix->tr[t].nf = &ix->files[t ? F_N2 : F_N1];
    }
    /* key lengths of empty trees from the other tree (§4.1 pairs) */
    if (ix->tr[0].empty)
        ix->tr[0].le = (!ix->tr[1].empty && ix->tr[1].le == 30) ? 10 : 16;
    if (ix->tr[1].empty)
        ix->tr[1].le = ix->tr[0].le == 10 ? 30 : 60;
    if (ix->tr[0].le >= ix->tr[1].le) {
        rc = PYDB_CORRUPT(err, ix->files[F_N2].f.path, 0,
                          "tree 2 key length %d is not above tree 1's %d",
                          ix->tr[1].le, ix->tr[0].le);
        goto cleanup;
    }
    have_classic = ix->files[F_L1].open || ix->files[F_L2].open ||
                   ix->files[F_IFP].open;
    have_lind = ix->files[F_LY1].open || ix->files[F_LY2].open ||
                ix->files[F_IYP].open;
    memcpy(saved, ix->tr, sizeof saved);
    ok_lind = have_lind && try_set(ix, 1, &el) == PYDB_OK;
    if (ok_lind) {
        tree lt[2];
        int lind_infx = ix->infx, lind_align = ix->infx_align,
            lind_w = ix->mfn_bytes;
        memcpy(lt, ix->tr, sizeof lt);
        memcpy(ix->tr, saved, sizeof saved);
        ok_classic = have_classic && try_set(ix, 0, &ec) == PYDB_OK;
        if (ok_classic &&
            newest(ix, F_L1, F_L2, F_IFP) >= newest(ix, F_LY1, F_LY2, F_IYP)) {
            snprintf(ix->note, sizeof ix->note,
                     "both the classic and the LIND file sets validate; "
                     "the classic set (.l0x/.ifp) is newer and was used");
        } else {
            memcpy(ix->tr, lt, sizeof lt);
            ix->lind = 1;
            ix->post = F_IYP;
            ix->infx = lind_infx;
            ix->infx_align = lind_align;
            ix->mfn_bytes = lind_w;
            if (ok_classic)
                snprintf(ix->note, sizeof ix->note,
                         "both the classic and the LIND file sets validate; "
                         "the LIND set (.ly0x/.iyp) is newer and was used");
            else if (have_classic)
                snprintf(ix->note, sizeof ix->note,
                         "LIND set used; the classic set (.l0x/.ifp) is "
                         "stale: %.600s", ec.message);
            else
                snprintf(ix->note, sizeof ix->note, "LIND set used");
        }
    } else {
        memcpy(ix->tr, saved, sizeof saved);
        ok_classic = (have_classic || !have_lind) &&
                     try_set(ix, 0, &ec) == PYDB_OK;
        if (!ok_classic) {
            if (err) *err = have_classic || !have_lind ? ec : el;
            rc = PYDB_ECORRUPT;
            goto cleanup;
        }
        if (have_lind)
            snprintf(ix->note, sizeof ix->note,
                     "classic set used; the LIND set (.ly0x/.iyp) is "
                     "stale: %.600s", el.message);
        else
            snprintf(ix->note, sizeof ix->note, "classic set used");
    }
    ix->base.kind = ix->lind ? PYDB_INDEX_ISIS_LIND : PYDB_INDEX_ISIS_CLASSIC;
    ix->base.caps = !ix->lind ? PYDB_POSTING_TAG | PYDB_POSTING_OCC |
                                    PYDB_POSTING_CNT
                              : 0;
    if (ix->lind) {
        /* CNT only where (MFN,CNT) lists exist: set if one of the first
         * CAPS_SAMPLE keys of a tree has one */
        for (int t = 0; t < 2 && !ix->base.caps; t++) {
            cursor c;
            const tree *tr = &ix->tr[t];
            if (tr->empty) continue;
            rc = pydb__isis_cursor_init(&c, tr, (const uint8_t *)"", 0, err);
            for (int k = 0; !rc && k < CAPS_SAMPLE; k++) {
                const uint8_t *e;
                lind_ref r;
                rc = pydb__isis_cursor_peek(&c, &e, err);
                if (rc || !e) break;
                pydb__isis_lind_entry(ix, tr, e, &r);
                if (r.info3 > 0) {
                    ix->base.caps = PYDB_POSTING_CNT;
                    break;
                }
                pydb__isis_cursor_advance(&c);
            }
            pydb__isis_cursor_free(&c);
            if (rc) goto cleanup;
        }
    }
    /* key form: the database's ISISUC/ISISAC tables, else the built-in
     * table of its encoding, in the CISIS key mode (no NFKC: CISIS keeps
     * compatibility characters as stored); cut to LE2 bytes (§5.3) */
    rc = pydb__keyrules_builtin(&ix->rules, keys, (size_t)ix->tr[1].le, err);
    if (rc == PYDB_OK)
        rc = pydb__keyrules_set_mode(&ix->rules, keys, PYDB_KEYMODE_CISIS, err);
    if (rc) goto cleanup;
    {
        char dir[1024];
        const char *name;
        int found;
        pydb__path_split(dir, sizeof dir, &name, ix->files[F_CNT].f.path);
        rc = pydb__keyrules_load_dir(&ix->rules, dir, &found, err);
        if (rc) goto cleanup;
        if (found & 1) ix->rules.utf8 = 0;   /* a table works on bytes */
        ix->keys = keys;
        ix->tables = found;
    }
    /* drop the files of the set not used */
    for (int i = 0; i < F_COUNT; i++) {
        int used = i == F_CNT || i == F_N1 || i == F_N2 ||
                   (ix->lind ? (i == F_LY1 || i == F_LY2 || i == F_IYP)
                             : (i == F_L1 || i == F_L2 || i == F_IFP));
        if (!used && ix->files[i].open) {
            char keep[1024];
            snprintf(keep, sizeof keep, "%s", ix->files[i].f.path);
            pydb__isis_ixfile_close(&ix->files[i]);
            snprintf(ix->files[i].f.path, sizeof ix->files[i].f.path, "%s",
                     keep);
        }
    }
    *out = &ix->base;
    ix = NULL;
    rc = PYDB_OK;
cleanup:
    if (ix) pydb__isis_close(&ix->base);
    return rc;
}

int pydb_isis_index_describe(pydb_isis_index_info *o,
                             const pydb_index *base)
{
    const isis_index *ix = (const isis_index *)base;
    if (!base || base->ops != &pydb__isis_ops) return PYDB_EINVAL;
    memset(o, 0, sizeof *o);
    o->kind = base->kind;
    o->le1 = ix->tr[0].le;
    o->le2 = ix->tr[1].le;
    o->cnt_aligned = ix->cnt_aligned;
    o->key_pad = ix->tr[0].pad > ix->tr[1].pad ? ix->tr[0].pad
                                               : ix->tr[1].pad;
    o->infx = ix->infx;
    o->infx_align = ix->infx_align;
    o->mfn_bytes = ix->mfn_bytes;
    for (int t = 0; t < 2; t++) {
        o->tree[t].empty = ix->tr[t].empty;
        o->tree[t].liv = ix->tr[t].liv;
        o->tree[t].root = ix->tr[t].posrx;
        o->tree[t].nodes = ix->tr[t].nmax;
        o->tree[t].leaves = ix->tr[t].fmax;
        o->tree[t].node_size = ix->tr[t].nrec;
        o->tree[t].leaf_size = ix->tr[t].lrec;
        o->tree[t].node_path = ix->files[t ? F_N2 : F_N1].f.path;
        o->tree[t].leaf_path =
            ix->files[ix->lind ? (t ? F_LY2 : F_LY1) : (t ? F_L2 : F_L1)]
                .f.path;
    }
    o->cnt_path = ix->files[F_CNT].f.path;
    o->postings_path = ix->files[ix->lind ? F_IYP : F_IFP].f.path;
    o->note = ix->note;
    o->keys = ix->keys;
    o->tables = ix->tables;
    return PYDB_OK;
}
