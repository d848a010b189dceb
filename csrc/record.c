/*
 * record.c - the bytes of the master and cross-reference files, without
 * I/O: leader geometry, XRF pointer encoding, record encoding, decoding
 * and placement (docs/isis-formats.md §2-3).  See record.h.
 *
 * Depends on: util.h (codecs, PYDB_ASSERT), error.c.  Nothing here reads
 * or writes a file.
 */
#include "pydb_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Leader geometry per layout, docs/isis-formats.md §2.2 (table). */
const pydb_geom pydb__geom[4] = {
    /* leader entry ffi mfrl mfbwb mfbwp base nvf status dpos dlen */
    {18, 6, 0, 4, 6, 10, 12, 14, 16, 2, 4},   /* ISIS packed  */
    {20, 6, 0, 4, 8, 12, 14, 16, 18, 2, 4},   /* ISIS aligned */
    {22, 10, 1, 4, 8, 12, 14, 18, 20, 2, 6},  /* FFI packed   */
    {24, 12, 1, 4, 8, 12, 16, 20, 22, 4, 8},  /* FFI aligned  */
};

/* ------------------------------------------------------------ XRF values */

int32_t pydb__xrf_encode(int64_t offset, int flags, int mstxl)
{
    int64_t block = offset / PYDB_BLOCK + 1;
    int64_t low = offset % PYDB_BLOCK;
    if (flags & PYDB_FLAG_PENDING) low |= 0x200;
    int32_t raw;
    if (flags & PYDB_FLAG_NEW) low |= 0x400;
    raw = (int32_t)(block * (2048 >> mstxl) + (low >> mstxl));
#ifdef PYDB_DEBUG
    {   /* the value decodes back to the offset and flags */
        pydb_xrf_entry e;
        pydb__xrf_unpack(&e, raw, mstxl);
        PYDB_ASSERT(offset >= PYDB_CTL_SIZE && offset % (1 << mstxl) == 0);
        PYDB_ASSERT(e.state == PYDB_XRF_ACTIVE && e.offset == offset &&
                    e.flags == (flags & (PYDB_FLAG_NEW | PYDB_FLAG_PENDING)));
    }
#endif
    return raw;
}

const char *pydb__xrf_low_reason(char *out, size_t n, int64_t offset)
{
    if (offset < 0)
        snprintf(out, n, "names block 0 (the master file's blocks count "
                 "from 1)");
    else
        snprintf(out, n, "points at offset %lld, inside the control record",
                 (long long)offset);
    return out;
}

/* ------------------------------------------------- encoding, placement */

int64_t pydb__place(int layout, int mstxl, int64_t pos)
{
    const pydb_geom *g = &pydb__geom[layout];
    int64_t align = mstxl ? ((int64_t)1 << mstxl) : 2;
    int64_t start = (pos + align - 1) / align * align;
    /* Never-split rule (docs/isis-formats.md §2.3): leader up to BASE in
     * one block. */
    if (start % PYDB_BLOCK > PYDB_BLOCK - (g->leader - 4))
        start = (start / PYDB_BLOCK + 1) * PYDB_BLOCK;
    PYDB_ASSERT(start >= pos && start % align == 0);
    PYDB_ASSERT(start % PYDB_BLOCK + (g->leader - 4) <= PYDB_BLOCK);
    return start;
}

int pydb__record_size(int64_t *out, int layout, int mstxl, int32_t mfn,
                      const pydb_field *fields, uint32_t nfields,
                      const char *path, pydb_error *err)
{
    const pydb_geom *g = &pydb__geom[layout];
    int64_t align = mstxl ? ((int64_t)1 << mstxl) : 2;
    int64_t data = 0, mfrl;

    if (nfields > 65535)
        return PYDB_ERROR(err, PYDB_ETOOBIG, path, -1,
                          "record of MFN %d has %u fields; NVF is 16-bit "
                          "(at most 65535)", (int)mfn, nfields);
    for (uint32_t i = 0; i < nfields; i++) {
        if (fields[i].tag > 65535)
            return PYDB_ERROR(err, PYDB_EINVAL, path, -1,
                              "tag %u is outside 0..65535", fields[i].tag);
        if (fields[i].len && !fields[i].value)
            return PYDB_ERROR(err, PYDB_EINVAL, path, -1,
                              "field %u has no value", i + 1);
        data += fields[i].len;
        if (data > PYDB_MAX_FFI_MFRL) break;
    }
    mfrl = g->leader + (int64_t)nfields * g->entry + data;
    mfrl = (mfrl + align - 1) / align * align;
    PYDB_ASSERT(mfrl % 2 == 0 && mfrl % align == 0);
    if (!g->ffi && (mfrl > 32767 || data > 65535))
        return PYDB_ERROR(err, PYDB_ETOOBIG, path, -1,
                          "record of MFN %d needs %lld bytes; the ISIS "
                          "layouts allow 32767 (16-bit MFRL); use an FFI "
                          "layout (ffi-packed or ffi-aligned) for larger "
                          "records", (int)mfn, (long long)mfrl);
    if (mfrl > PYDB_MAX_FFI_MFRL)
        return PYDB_ERROR(err, PYDB_ETOOBIG, path, -1,
                          "record of MFN %d needs %lld bytes; the FFI limit "
                          "is %d", (int)mfn, (long long)mfrl,
                          PYDB_MAX_FFI_MFRL);
    *out = mfrl;
    return PYDB_OK;
}

int pydb_record_size(int64_t *mfrl, int layout, int mstxl, int32_t mfn,
                     const pydb_field *fields, uint32_t nfields,
                     pydb_error *err)
{
    if (layout < 0 || layout > 3 || mstxl < 0 || mstxl > 6)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "bad layout %d or MSTXL %d (0..6)", layout, mstxl);
    return pydb__record_size(mfrl, layout, mstxl, mfn, fields, nfields, "",
                             err);
}

void pydb__record_encode(uint8_t *p, int layout, int64_t mfrl, int32_t mfn,
                         const pydb_field *fields, uint32_t nfields,
                         int64_t back_offset, int status)
{
    const pydb_geom *g = &pydb__geom[layout];
    int64_t base = g->leader + (int64_t)nfields * g->entry, data = 0;

    PYDB_ASSERT(layout >= 0 && layout < 4 && mfrl >= base && mfrl % 2 == 0);
    memset(p, 0, (size_t)g->leader);
    pydb__put32(p, (uint32_t)mfn);
    if (g->ffi) {
        pydb__put32(p + g->off_mfrl, (uint32_t)mfrl);
        pydb__put32(p + g->off_base, (uint32_t)base);
    } else {
        pydb__put16(p + g->off_mfrl, (uint32_t)mfrl);
        pydb__put16(p + g->off_base, (uint32_t)base);
    }
    if (back_offset >= 0) {
        pydb__put32(p + g->off_mfbwb, (uint32_t)(back_offset / PYDB_BLOCK + 1));
        pydb__put16(p + g->off_mfbwp, (uint32_t)(back_offset % PYDB_BLOCK));
    }
    pydb__put16(p + g->off_nvf, nfields);
    pydb__put16(p + g->off_status, (uint32_t)status);
    for (uint32_t i = 0; i < nfields; i++) {
        uint8_t *d = p + g->leader + (int64_t)i * g->entry;
        memset(d, 0, (size_t)g->entry);
        pydb__put16(d, fields[i].tag);
        if (g->ffi) {
            pydb__put32(d + g->dir_pos, (uint32_t)data);
            pydb__put32(d + g->dir_len, fields[i].len);
        } else {
            pydb__put16(d + g->dir_pos, (uint32_t)data);
            pydb__put16(d + g->dir_len, fields[i].len);
        }
        if (fields[i].len)
            memcpy(p + base + data, fields[i].value, fields[i].len);
        data += fields[i].len;
    }
    PYDB_ASSERT(base + data <= mfrl);
    memset(p + base + data, ' ', (size_t)(mfrl - base - data));
}

/* ------------------------------------------------------------ decoding */

void pydb__leader_decode(pydb_leader *l, const pydb_geom *g,
                         const uint8_t *p)
{
    int64_t smfrl = g->ffi ? (int64_t)(int32_t)pydb__u32(p + g->off_mfrl)
                           : (int64_t)(int16_t)pydb__u16(p + g->off_mfrl);
    l->mfn = (int32_t)pydb__u32(p);
    l->locked = smfrl < 0;
    l->mfrl = smfrl < 0 ? -smfrl : smfrl;
    l->base = g->ffi ? (int64_t)pydb__u32(p + g->off_base)
                     : (int64_t)pydb__u16(p + g->off_base);
    l->nvf = pydb__u16(p + g->off_nvf);
    l->mfbwb = (int32_t)pydb__u32(p + g->off_mfbwb);
    l->mfbwp = pydb__u16(p + g->off_mfbwp);
    l->status = pydb__u16(p + g->off_status);
}

int pydb__leader_plausible(const pydb_leader *l, const pydb_geom *g,
                           int32_t max_mfn, int64_t off, int64_t limit)
{
    int64_t m = l->mfrl;
    if (l->mfn < 1 || l->mfn > max_mfn) return 0;
    if (m < g->leader || m > (g->ffi ? PYDB_MAX_FFI_MFRL : 32767) ||
        off + m > limit)
        return 0;
    if (l->base != g->leader + l->nvf * g->entry || l->base > m) return 0;
    return l->status <= 1 && l->mfbwb >= 0 && l->mfbwp < PYDB_BLOCK;
}

int pydb__dir_plausible(const pydb_leader *l, const pydb_geom *g,
                        const uint8_t *p)
{
    for (int64_t i = 0; i < l->nvf; i++) {
        int64_t pos, len;
        pydb__dir_entry(g, p + g->leader + i * g->entry, &pos, &len);
        if (pos + len > l->mfrl - l->base) return 0;
    }
    return 1;
}

int pydb__leader_check(const pydb_leader *l, const pydb_geom *g,
                       int32_t mfn, int64_t off, int64_t mst_size,
                       const char *path, pydb_error *err)
{
    int64_t avail = mst_size - off;

    if (l->mfn != mfn)
        return PYDB_CORRUPT(err, path, off,
                            "the record at offset %lld has MFN %d, but the "
                            "XRF entry of MFN %d points there",
                            (long long)off, (int)l->mfn, (int)mfn);
    if (l->mfrl < g->leader ||
        l->mfrl > (g->ffi ? PYDB_MAX_FFI_MFRL : 32767))
        return PYDB_CORRUPT(err, path, off + g->off_mfrl,
                            "record of MFN %d has an impossible MFRL %lld",
                            (int)mfn, (long long)l->mfrl);
    if (l->mfrl > avail)
        return PYDB_CORRUPT(err, path, off + g->off_mfrl,
                            "record of MFN %d: MFRL %lld at offset %lld "
                            "passes the end of the file (%lld bytes)",
                            (int)mfn, (long long)l->mfrl, (long long)off,
                            (long long)mst_size);
    if (l->base != g->leader + l->nvf * g->entry || l->base > l->mfrl)
        return PYDB_CORRUPT(err, path, off + g->off_base,
                            "record of MFN %d: BASE %lld and NVF %lld do not "
                            "fit (expected BASE %lld within MFRL %zu)",
                            (int)mfn, (long long)l->base, (long long)l->nvf,
                            (long long)(g->leader + l->nvf * g->entry),
                            (size_t)l->mfrl);
    return PYDB_OK;
}

int pydb__record_decode(pydb_record *rec, const pydb_geom *g,
                        const pydb_leader *l, int64_t off, const char *path,
                        pydb_error *err)
{
    size_t mfrl = (size_t)l->mfrl;
    int64_t base = l->base, nvf = l->nvf, datalen = 0, i;
    const uint8_t *raw = pydb__record_raw(rec);
    pydb_field *fields = pydb__record_fields(rec, mfrl);

    /* pydb__leader_check() passed: the directory fits before BASE */
    PYDB_ASSERT(base == g->leader + nvf * g->entry && base <= (int64_t)mfrl);
    PYDB_ASSERT(rec->capacity >= pydb__round8(sizeof *rec) +
                                     pydb__round8(mfrl) +
                                     (size_t)nvf * sizeof(pydb_field));
    for (i = 0; i < nvf; i++) {
        const uint8_t *d = raw + g->leader + i * g->entry;
        int64_t pos, len;
        pydb__dir_entry(g, d, &pos, &len);
        if (pos + len > (int64_t)mfrl - base)
            return PYDB_CORRUPT(err, path, off + g->leader + i * g->entry,
                                "record of MFN %d: directory entry %lld "
                                "(tag %u, pos %lld, len %lld) passes the end "
                                "of the record (%lld data bytes)",
                                (int)l->mfn, (long long)(i + 1),
                                (unsigned)pydb__u16(d), (long long)pos,
                                (long long)len,
                                (long long)((int64_t)mfrl - base));
        fields[i].tag = pydb__u16(d);
        fields[i].len = (uint32_t)len;
        fields[i].value = raw + base + pos;
        datalen += len;
    }
    rec->mfn = l->mfn;
    rec->status = l->status;
    rec->locked = l->locked;
    rec->offset = off;
    rec->back_offset =
        l->mfbwb > 0 ? (int64_t)(l->mfbwb - 1) * PYDB_BLOCK + l->mfbwp : -1;
    rec->mfrl = (uint32_t)mfrl;
    rec->nfields = (uint32_t)nvf;
    rec->fields = fields;
    rec->data_len = (size_t)datalen;
    return PYDB_OK;
}

/* -------------------------------------------------------- record memory */

int pydb__record_reserve(pydb_record **rec, size_t raw, size_t nf,
                         pydb_error *err)
{
    size_t need = pydb__round8(sizeof(pydb_record)) + pydb__round8(raw) +
                  nf * sizeof(pydb_field);
    pydb_record *r = *rec;
    /* a block passed in is reused as it is unless it is more than twice
     * what this record needs: then it is cut to size, so that a record
     * read into the block of a larger one does not hold its memory */
    if (r && r->capacity >= need && r->capacity / 2 <= need) return PYDB_OK;
    r = realloc(r, need);
    if (!r)
        return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                          "no memory for a %zu-byte record", need);
    r->capacity = need;
    *rec = r;
    return PYDB_OK;
}

void pydb_record_free(pydb_record *rec) { free(rec); }

int pydb_record_make(pydb_record **out, const pydb_record *head,
                     const pydb_field *fields, uint32_t n, pydb_error *err)
{
    pydb_record *r = NULL;
    pydb_field *f;
    uint8_t *p;
    size_t data = 0, cap;
    int rc;

    for (uint32_t i = 0; i < n; i++) {
        if (fields[i].len > SIZE_MAX / 2 - data)
            return PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                              "no memory for a record of %u fields", n);
        data += fields[i].len;
    }
    rc = pydb__record_reserve(&r, data, n, err);
    if (rc) return rc;
    cap = r->capacity;
    *r = *head;
    r->capacity = cap;
    p = pydb__record_raw(r);
    f = pydb__record_fields(r, data);
    for (uint32_t i = 0; i < n; i++) {
        if (fields[i].len) memcpy(p, fields[i].value, fields[i].len);
        f[i].tag = fields[i].tag;
        f[i].len = fields[i].len;
        f[i].value = p;
        p += fields[i].len;
    }
    r->fields = f;
    r->nfields = n;
    r->data_len = data;
    *out = r;
    return PYDB_OK;
}
