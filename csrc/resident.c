/*
 * resident.c - what the handle knows about which pages of a mapped file
 * are in the page cache, so that a read in mmap mode can tell, cheaply
 * and without a system call in the common case, whether copying out of
 * the mapping may wait for the disk (issue: the GIL only when I/O
 * blocks; docs/architecture.md, "Reads and the GIL").
 *
 * The mapping is cut into chunks of PYDB_RES_CHUNK_PAGES pages.  Each
 * chunk has a bitmap (1 = the page was resident when last seen) and the
 * coarse monotonic time of the mincore(2) that filled it.  A question
 * about a page whose chunk was seen within PYDB_RES_TTL_MS is answered
 * from the bitmap; otherwise one mincore() refreshes the whole chunk
 * (about 1 us for 256 pages here, against 0.7 us for one page: a
 * mincore() per read would cost as much as the read).  A copy that went
 * through the mapping with the GIL released marks its pages resident:
 * they are, now.
 *
 * What this knowledge can get wrong, and what that costs:
 *   - a page evicted after its chunk was seen is taken as resident for at
 *     most PYDB_RES_TTL_MS: a read in that window faults on the disk with
 *     the caller's GIL held (correct, only slower for other threads);
 *   - a page read in by someone else is taken as not resident until the
 *     chunk is seen again: the read releases the GIL it need not have.
 * Neither gives a wrong byte: the copy always reads the mapping itself.
 * Since Linux 5.2 mincore() reports page-cache residency only for files
 * the caller may write or owns, otherwise only pages mapped into this
 * process; either way a "resident" answer is true when it is given.
 *
 * Concurrency: any thread may ask and mark at once (GIL or not): words
 * and times are read and written with relaxed atomics; a refresh racing
 * with a mark may lose the mark (the next read then releases the GIL
 * once).  pydb__resident_forget() makes every chunk unseen (a new file
 * pair was installed under the mapping).
 *
 * Depends on: nothing but the C library; used by vfs.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pydb_int.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define WORD_PAGES 64
#define CHUNK_WORDS (PYDB_RES_CHUNK_PAGES / WORD_PAGES)

static size_t page_size(void)
{
    static size_t page;
    size_t p = __atomic_load_n(&page, __ATOMIC_RELAXED);
    if (!p) {
        long s = sysconf(_SC_PAGESIZE);
        p = s > 0 ? (size_t)s : 4096;
        __atomic_store_n(&page, p, __ATOMIC_RELAXED);
    }
    return p;
}

/* log2 of the page size (a power of two): the per-read questions divide
 * by shifting (two divisions per call were most of a mark's cost). */
static unsigned page_shift(void)
{
    return (unsigned)__builtin_ctzl((unsigned long)page_size());
}

/* Milliseconds of the coarse monotonic clock (a vDSO call, ~8 ns), never 0. */
static int64_t now_ms(void)
{
    struct timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 1;
}

int pydb__resident_init(pydb_residency *r, size_t map_len)
{
    size_t chunk = page_size() * PYDB_RES_CHUNK_PAGES;
    r->chunks = (map_len + chunk - 1) / chunk;
    r->bits = calloc(r->chunks ? r->chunks * CHUNK_WORDS : 1, sizeof *r->bits);
    r->seen_ms = calloc(r->chunks ? r->chunks : 1, sizeof *r->seen_ms);
    if (!r->bits || !r->seen_ms) {
        pydb__resident_free(r);
        return PYDB_ENOMEM;
    }
    return PYDB_OK;
}

void pydb__resident_free(pydb_residency *r)
{
    free(r->bits);
    free(r->seen_ms);
    memset(r, 0, sizeof *r);
}

void pydb__resident_forget(const pydb_residency *r)
{
    for (size_t c = 0; c < r->chunks; c++)
        __atomic_store_n(&r->seen_ms[c], 0, __ATOMIC_RELAXED);
}

/* Fill chunk c's bitmap from mincore() over the mapping's len bytes. */
static void refresh(const pydb_residency *r, const uint8_t *map, size_t len,
                    size_t c, int64_t now)
{
    size_t page = page_size();
    size_t start = c * PYDB_RES_CHUNK_PAGES * page;
    size_t bytes = PYDB_RES_CHUNK_PAGES * page;
    unsigned char vec[PYDB_RES_CHUNK_PAGES];
    uint64_t words[CHUNK_WORDS] = {0};

    if (start + bytes > len) bytes = len - start;
    if (mincore((void *)(map + start), bytes, vec) == 0) {
        size_t pages = (bytes + page - 1) / page;
        for (size_t i = 0; i < pages; i++)
            if (vec[i] & 1) words[i / WORD_PAGES] |= (uint64_t)1 << (i % WORD_PAGES);
    }   /* on failure: nothing is known resident */
    for (size_t w = 0; w < CHUNK_WORDS; w++)
        __atomic_store_n(&r->bits[c * CHUNK_WORDS + w], words[w], __ATOMIC_RELAXED);
    __atomic_store_n(&r->seen_ms[c], now, __ATOMIC_RELAXED);
}

int pydb__resident(const pydb_residency *r, const uint8_t *map, size_t map_len,
                   int64_t off, size_t n)
{
    unsigned shift = page_shift();
    size_t first, last;
    int64_t now = 0;

    if (!r->bits || n == 0 || off < 0 || (uint64_t)off + n > map_len) return 0;
    first = (size_t)off >> shift;
    last = ((size_t)off + n - 1) >> shift;
    if (last / PYDB_RES_CHUNK_PAGES >= r->chunks) return 0;
    for (size_t p = first; p <= last; p++) {
        size_t c = p / PYDB_RES_CHUNK_PAGES, i = p % PYDB_RES_CHUNK_PAGES;
        int64_t seen = __atomic_load_n(&r->seen_ms[c], __ATOMIC_RELAXED);
        uint64_t w;
        if (p == first || i == 0) {   /* once per chunk touched */
            if (!now) now = now_ms();
            if (seen == 0 || now - seen > PYDB_RES_TTL_MS)
                refresh(r, map, map_len, c, now);
        }
        w = __atomic_load_n(&r->bits[c * CHUNK_WORDS + i / WORD_PAGES],
                            __ATOMIC_RELAXED);
        if (i % WORD_PAGES == 0 && last - p >= WORD_PAGES - 1) {
            if (w != ~(uint64_t)0) return 0;   /* a whole word asked for */
            p += WORD_PAGES - 1;
            continue;
        }
        if (!(w & ((uint64_t)1 << (i % WORD_PAGES)))) return 0;
    }
    return 1;
}

void pydb__resident_mark(const pydb_residency *r, size_t map_len, int64_t off,
                         size_t n)
{
    unsigned shift = page_shift();
    size_t last;
    if (!r->bits || n == 0 || off < 0 || (uint64_t)off + n > map_len) return;
    last = ((size_t)off + n - 1) >> shift;
    for (size_t p = (size_t)off >> shift; p <= last; p++) {
        size_t c = p / PYDB_RES_CHUNK_PAGES, i = p % PYDB_RES_CHUNK_PAGES;
        uint64_t *w, bit = (uint64_t)1 << (i % WORD_PAGES);
        if (c >= r->chunks) return;
        /* Read first: the bit is almost always set already (a scan marks
         * each page once per chunk refresh), and a locked OR on a line
         * every reader shares cost 14% of a warm scan. */
        w = &r->bits[c * CHUNK_WORDS + i / WORD_PAGES];
        if (!(__atomic_load_n(w, __ATOMIC_RELAXED) & bit))
            __atomic_fetch_or(w, bit, __ATOMIC_RELAXED);
    }
}

/* Test hook (pydb._pydb._testing.resident): what a nowait read in mmap
 * mode would decide for n bytes at off of the handle's .mst (xrf 0) or
 * .xrf (xrf 1): 1 resident, 0 not, -1 not mapped there. */
int pydb__test_resident(pydb_db *db, int xrf, int64_t off, int64_t n);

int pydb__test_resident(pydb_db *db, int xrf, int64_t off, int64_t n)
{
    const pydb_file *f = xrf ? &db->xrf : &db->mst;
    size_t map_len = __atomic_load_n(&f->map_len, __ATOMIC_ACQUIRE);
    if (!f->map || n <= 0 || off < 0 || off + n > (int64_t)map_len) return -1;
    return pydb__resident(&f->res, f->map, map_len, off, (size_t)n);
}
