/*
 * keys.c - key normalisation (docs/isis-formats.md §5.3), word characters,
 * ISISUC.TAB / ISISAC.TAB tables and stop words (§5.4).
 *
 * 8-bit data: keys go through a 256-entry upper-case table.  The default
 * table is the CDS/ISIS DOS one (code page 437/850): a-z -> A-Z and the
 * accented letters 128..165 folded to their unaccented capitals (Ç ü é â
 * ä à å ç ê ë è ï î ì Ä Å É ô ö ò û ù ÿ Ö Ü ... á í ó ú ñ Ñ; æ Æ to E, as
 * CISIS's isisuctab); every
 * other byte maps to itself.  The default word characters (ISISAC) are
 * the letters only: A-Z, a-z and 128..165 — digits split words.
 *
 * Other built-in tables (enum pydb_keys, pydb__keyrules_builtin): ANSI
 * (Latin-1/cp1252, as ABCD's and WinISIS's Windows ISISUC.TAB/ISISAC.TAB:
 * 192..255 folded to unaccented capitals, those letters word characters)
 * and ASCII (a-z -> A-Z only; every byte 128..255 kept and a word
 * character: keys of any 8-bit or UTF-8 text as stored, cut bytewise).
 *
 * UTF-8 data: Unicode case and accent folding by a compact table that
 * covers Basic Latin, Latin-1 Supplement, Latin Extended-A (accents
 * folded: É -> E, Ł -> L, Æ -> AE, Œ -> OE, ß -> SS, Þ -> TH), Greek
 * (tonos/dialytika folded: ά -> Α, final ς -> Σ), Cyrillic (case; Ё -> Е),
 * Latin Extended Additional (U+1E00-1EFF, case only) and combining
 * diacritics U+0300-036F (dropped).  Other scripts pass unchanged.  Word
 * characters: letters of those ranges and every code point >= U+0530
 * outside the punctuation blocks; digits split words as in 8-bit data.
 * Invalid UTF-8 bytes are copied unchanged (and are not word characters).
 * That is the CISIS key mode.  The unicode mode (pydb's own) first maps
 * compatibility characters to their NFKC form (ﬁ -> fi, Ａ -> A, ² -> 2;
 * unicode_keys.h, generated from Python's unicodedata) and takes as word
 * characters the letters and marks of the Unicode general categories
 * (L*, M*): digits, punctuation (U+1362 ETHIOPIC FULL STOP, the danda),
 * symbols and separators split words.
 *
 * Also pydb__read_file (a whole file through the vfs), which the table,
 * stop-word and MANIFEST readers use.
 *
 * Depends on: index_int.h (pydb_keyrules), pydb_int.h (vfs, errors,
 * pydb__find_file).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "nidx_int.h"
#include "unicode_keys.h"

/* CP437/850 accented letters 128..165 -> unaccented capital, as CISIS's
 * built-in upper-case table (cirun.h isisuctab, PC and UNIX): 145/146
 * (æ Æ) to 'E'. */
static const uint8_t dos_fold[38] = {
    'C', 'U', 'E', 'A', 'A', 'A', 'A', 'C', 'E', 'E', 'E', 'I', 'I', 'I',
    'A', 'A', 'E', 'E', 'E', 'O', 'O', 'O', 'U', 'U', 'Y', 'O', 'U',
    155, 156, 157, 158, 159, 'A', 'I', 'O', 'U', 'N', 'N'};

/* Latin-1/cp1252 192..255 -> capital, as ABCD's ANSI ISISUC.TAB (ABCD
 * documentation, "CISIS utilities", isisuc.tab; the file shipped in
 * bases-examples_Windows/servers/data): accents folded, 198/230 (Æ æ) to
 * 'E', Ð Þ ß × ÷ Ø ð ø þ kept (0 here = unchanged). */
static const uint8_t ansi_fold[64] = {
    'A', 'A', 'A', 'A', 'A', 'A', 'E', 'C', 'E', 'E', 'E', 'E', 'I', 'I',
    'I', 'I', 0,   'N', 'O', 'O', 'O', 'O', 'O', 0,   0,   'U', 'U', 'U',
    'U', 'Y', 0,   0,   'A', 'A', 'A', 'A', 'A', 'A', 'E', 'C', 'E', 'E',
    'E', 'E', 'I', 'I', 'I', 'I', 0,   'N', 'O', 'O', 'O', 'O', 'O', 0,
    0,   'U', 'U', 'U', 'U', 'Y', 0,   'Y'};

/* ANSI word characters above 191 (ABCD's ISISAC.TAB): the letters except
 * Ð Ø Þ ß ð ø þ, and not × ÷. */
static int ansi_word(int c)
{
    return c >= 192 && c != 208 && c != 215 && c != 216 && c != 222 &&
           c != 223 && c != 240 && c != 247 && c != 248 && c != 254;
}

int pydb__keyrules_builtin(pydb_keyrules *r, int keys, size_t max_key,
                           pydb_error *err)
{
    if (keys < PYDB_KEYS_DOS || keys > PYDB_KEYS_UNICODE)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "unknown key table %d", keys);
    memset(r, 0, sizeof *r);
    for (int c = 0; c < 256; c++) {
        int letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        r->upper[c] = (uint8_t)c;
        if (c >= 'a' && c <= 'z') r->upper[c] = (uint8_t)(c - 32);
        switch (keys) {
        case PYDB_KEYS_ANSI:
            if (c >= 192 && ansi_fold[c - 192])
                r->upper[c] = ansi_fold[c - 192];
            r->word[c] = (uint8_t)(letter || ansi_word(c));
            break;
        case PYDB_KEYS_ASCII:
            r->word[c] = (uint8_t)(letter || c >= 128);
            break;
        default:   /* DOS; also the 8-bit fallback of UNICODE */
            if (c >= 128 && c <= 165) r->upper[c] = dos_fold[c - 128];
            r->word[c] = (uint8_t)(letter ||
                                   (c >= 128 && c <= 165 &&
                                    (c < 155 || c > 159)));
        }
    }
    r->utf8 = keys == PYDB_KEYS_UNICODE;
    r->max_key = max_key;
    return PYDB_OK;
}

/* The word characters of ABCD for Windows' own isisac.tab (ABCD2,
 * www/bases-examples_Windows/isisac.tab; the CISIS programs of an ABCD
 * installation read it): digits, A-Z, '_', a-z and the Latin-1 letters
 * except Æ Ð Þ ß æ ð þ (and × ÷).  CISIS's built-in tables differ by
 * installation: the PC/UNIX isisactab of cirun.h holds letters only
 * (digits split words, as the CDS/ISIS for DOS indexes show), its
 * ansiactab (`actab=ansi`) adds 48-64. */
static int abcd_win_word(int c)
{
    if ((c >= '0' && c <= '9') || c == '_' || (c >= 'A' && c <= 'Z') ||
        (c >= 'a' && c <= 'z'))
        return 1;
    return c >= 192 && c != 198 && c != 208 && c != 215 && c != 222 &&
           c != 223 && c != 230 && c != 240 && c != 247 && c != 254;
}

int pydb__keyrules_set_mode(pydb_keyrules *r, int keys, int mode,
                            pydb_error *err)
{
    if (mode != PYDB_KEYMODE_UNICODE && mode != PYDB_KEYMODE_CISIS)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1, "unknown key mode %d",
                          mode);
    r->mode = mode;
    if (mode == PYDB_KEYMODE_CISIS && keys == PYDB_KEYS_ANSI)
        for (int c = 0; c < 256; c++)
            r->word[c] = (uint8_t)abcd_win_word(c);
    /* ABCD's UTF-8 indexes keep '_' inside words (dubcore: `RT_TEXT_C`
     * from "text_c"); their digits split words (marcuni: no TW_ key of
     * "Spring 2") */
    if (mode == PYDB_KEYMODE_CISIS && keys == PYDB_KEYS_UNICODE)
        r->word['_'] = 1;
    return PYDB_OK;
}

void pydb__keyrules_default(pydb_keyrules *r, int utf8, size_t max_key)
{
    (void)pydb__keyrules_builtin(r, utf8 ? PYDB_KEYS_UNICODE : PYDB_KEYS_DOS,
                                 max_key, NULL);
}

/* ---- Unicode folding ---- */

/* U+00C0..U+00FF (upper and lower halves fold alike); "" = unchanged. */
static const char *const latin1_fold[32] = {
    "A", "A", "A", "A", "A", "A", "AE", "C", "E", "E", "E", "E", "I", "I",
    "I", "I", "D", "N", "O", "O", "O", "O", "O", "", "O", "U", "U", "U",
    "U", "Y", "TH", "SS"};
/* U+0100..U+017F base letters; '1' = IJ, '2' = OE. */
static const char latin_a_fold[129] =
    "AAAAAACCCCCCCCDD" "DDEEEEEEEEEEGGGG" "GGGGHHHHIIIIIIII"
    "II11JJKKKLLLLLLL" "LLLNNNNNNNNNOOOO" "OO22RRRRRRSSSSSS"
    "SSTTTTTTUUUUUUUU" "UUUUWWYYYZZZZZZS";

static size_t put_cp(uint8_t *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode one UTF-8 sequence at p[0..n); returns its length, or 0 if the
 * bytes are not valid UTF-8 (the caller treats p[0] as a lone byte). */
static size_t get_cp(const uint8_t *p, size_t n, uint32_t *cp)
{
    uint8_t c = p[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF && n >= 2 && (p[1] & 0xC0) == 0x80) {
        *cp = ((uint32_t)(c & 0x1F) << 6) | (p[1] & 0x3F);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF && n >= 3 && (p[1] & 0xC0) == 0x80 &&
        (p[2] & 0xC0) == 0x80) {
        uint32_t v = ((uint32_t)(c & 0x0F) << 12) |
                     ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
        if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) return 0;
        *cp = v;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4 && n >= 4 && (p[1] & 0xC0) == 0x80 &&
        (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) {
        uint32_t v = ((uint32_t)(c & 0x07) << 18) |
                     ((uint32_t)(p[1] & 0x3F) << 12) |
                     ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
        if (v < 0x10000 || v > 0x10FFFF) return 0;
        *cp = v;
        return 4;
    }
    return 0;
}

/* Fold one code point into o (at most 8 bytes); returns bytes written. */
static size_t fold_cp(uint32_t cp, uint8_t *o)
{
    if (cp < 0x80) {
        o[0] = (uint8_t)((cp >= 'a' && cp <= 'z') ? cp - 32 : cp);
        return 1;
    }
    if (cp >= 0xC0 && cp <= 0xFF && cp != 0xD7 && cp != 0xF7) {
        const char *s = cp == 0xFF ? "Y" : latin1_fold[(cp - 0xC0) & 31];
        if (cp == 0xDF) s = "SS";
        else if (cp == 0xFE) s = "TH";
        else if (cp == 0xDE) s = "TH";
        size_t l = strlen(s);
        memcpy(o, s, l);
        return l;
    }
    if (cp >= 0x100 && cp <= 0x17F) {
        char c = latin_a_fold[cp - 0x100];
        if (c == '1') { memcpy(o, "IJ", 2); return 2; }
        if (c == '2') { memcpy(o, "OE", 2); return 2; }
        o[0] = (uint8_t)c;
        return 1;
    }
    if (cp >= 0x300 && cp <= 0x36F) return 0;   /* combining marks */
    if (cp >= 0x386 && cp <= 0x3CE) {
        switch (cp) {
        case 0x386: case 0x3AC: cp = 0x391; break;
        case 0x388: case 0x3AD: cp = 0x395; break;
        case 0x389: case 0x3AE: cp = 0x397; break;
        case 0x38A: case 0x3AF: case 0x390: case 0x3AA: case 0x3CA:
            cp = 0x399; break;
        case 0x38C: case 0x3CC: cp = 0x39F; break;
        case 0x38E: case 0x3CD: case 0x3B0: case 0x3AB: case 0x3CB:
            cp = 0x3A5; break;
        case 0x38F: case 0x3CE: cp = 0x3A9; break;
        case 0x3C2: cp = 0x3A3; break;
        default:
            if (cp >= 0x3B1 && cp <= 0x3C9) cp -= 0x20;
        }
        return put_cp(o, cp);
    }
    if (cp >= 0x400 && cp <= 0x4FF) {
        if (cp >= 0x430 && cp <= 0x44F) cp -= 0x20;
        else if (cp >= 0x450 && cp <= 0x45F) cp -= 0x50;
        else if (((cp >= 0x460 && cp <= 0x481) ||
                  (cp >= 0x48A && cp <= 0x4BF) ||
                  (cp >= 0x4D0 && cp <= 0x4FF)) && (cp & 1))
            cp -= 1;
        if (cp == 0x401) cp = 0x415;   /* Ё -> Е */
        return put_cp(o, cp);
    }
    if (cp >= 0x1E00 && cp <= 0x1EFF && (cp & 1)) cp -= 1;
    return put_cp(o, cp);
}

static int cp_is_word(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z');
    if (cp < 0xC0) return cp == 0xAA || cp == 0xB5 || cp == 0xBA;
    if (cp == 0xD7 || cp == 0xF7) return 0;
    if (cp < 0x370) return 1;    /* Latin, IPA, modifiers, combining */
    if (cp < 0x530)
        return !(cp == 0x375 || cp == 0x37E || cp == 0x384 || cp == 0x385 ||
                 cp == 0x387 || (cp >= 0x482 && cp <= 0x489));
    if (cp >= 0x2000 && cp <= 0x2BFF) return 0;   /* punctuation, symbols */
    if (cp >= 0x2E00 && cp <= 0x2E7F) return 0;
    if (cp >= 0x3000 && cp <= 0x303F) return 0;
    if (cp >= 0xFE30 && cp <= 0xFE4F) return 0;
    if (cp >= 0xFF00 && cp <= 0xFF20) return 0;
    if (cp >= 0xFF3B && cp <= 0xFF40) return 0;
    if (cp >= 0xFF5B && cp <= 0xFF65) return 0;
    if (cp >= 0x0660 && cp <= 0x0669) return 0;   /* Arabic-Indic digits */
    /* sentence punctuation of scripts without case, where ABCD's UTF-8
     * CISIS splits words (its unicode and marcuni indexes): Devanagari
     * danda, Ethiopic word space to paragraph separator; the byte-order
     * mark */
    if (cp == 0x0964 || cp == 0x0965) return 0;
    if (cp >= 0x1360 && cp <= 0x1368) return 0;
    if (cp == 0xFEFF) return 0;
    return 1;
}

/* Binary search of the sorted code points uk_nfkc_cp; -1 if absent. */
static long nfkc_index(uint32_t cp)
{
    size_t lo = 0, hi = sizeof uk_nfkc_cp / sizeof uk_nfkc_cp[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (uk_nfkc_cp[mid] == cp) return (long)mid;
        if (uk_nfkc_cp[mid] < cp) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* A letter or mark of the Unicode general categories (cp >= 0x80). */
static int cp_is_letter(uint32_t cp)
{
    size_t lo = 0, hi = sizeof uk_word / sizeof uk_word[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < uk_word[mid][0]) hi = mid;
        else if (cp > uk_word[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Fold cp into o as the rules' mode says: in the unicode mode a
 * compatibility character through its NFKC form first.  o has room for
 * 4 bytes per byte of cp's UTF-8 form (the generator keeps only mappings
 * at most 3 times as long; folding a code point never grows it further
 * than that); returns bytes written. */
static size_t fold_mode(const pydb_keyrules *r, uint32_t cp, uint8_t *o)
{
    long k;
    if (r->mode != PYDB_KEYMODE_UNICODE || cp < 0x80 ||
        (k = nfkc_index(cp)) < 0)
        return fold_cp(cp, o);
    size_t n = 0, i = uk_nfkc_off[k], e = uk_nfkc_off[k + 1];
    while (i < e) {
        uint32_t c;
        size_t l = get_cp(uk_nfkc_pool + i, e - i, &c);
        if (l == 0) break;            /* cannot happen: the pool is UTF-8 */
        n += fold_cp(c, o + n);
        i += l;
    }
    return n;
}

size_t pydb__word_char(const pydb_keyrules *r, const uint8_t *p, size_t n,
                       int *is_word)
{
    if (r->utf8 && p[0] >= 0x80) {
        uint32_t cp;
        size_t l = get_cp(p, n, &cp);
        if (l == 0) {
            *is_word = 0;
            return 1;
        }
        *is_word = r->mode == PYDB_KEYMODE_UNICODE ? cp_is_letter(cp)
                                                   : cp_is_word(cp);
        return l;
    }
    *is_word = r->word[p[0]];
    return 1;
}

int pydb__key_normalize(const pydb_keyrules *r, const uint8_t *in,
                        size_t len, uint8_t *out, size_t cap,
                        size_t *out_len, pydb_error *err)
{
    size_t o = 0, i = 0, keep;

    while (len > 0 && in[len - 1] == ' ') len--;
    while (i < len && in[i] == ' ') i++;
    if (!r->utf8) {
        if (len - i > cap)
            return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                              "key buffer too small (%zu < %zu bytes)", cap,
                              len - i);
        for (; i < len; i++) out[o++] = r->upper[in[i]];
    } else {
        while (i < len) {
            uint8_t tmp[16];
            uint32_t cp;
            size_t l = get_cp(in + i, len - i, &cp), k;
            if (l == 0) {        /* invalid byte: copied unchanged */
                tmp[0] = in[i];
                k = 1;
                l = 1;
            } else {
                k = fold_mode(r, cp, tmp);
            }
            if (o + k > cap)
                return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                                  "key buffer too small (%zu bytes)", cap);
            memcpy(out + o, tmp, k);
            o += k;
            i += l;
        }
    }
    /* truncation, never inside a UTF-8 sequence */
    keep = o;
    if (r->max_key && keep > r->max_key) {
        keep = r->max_key;
        if (r->utf8)
            while (keep > 0 && (out[keep] & 0xC0) == 0x80) keep--;
    }
    while (keep > 0 && out[keep - 1] == ' ') keep--;
    /* leading blanks may come from folding (none do today); kept simple */
    *out_len = keep;
    return PYDB_OK;
}

/* ---- tables ---- */

/* The next decimal code 0..255 of a table at text[*i..len), skipping
 * blanks, commas and the DOS end-of-file byte; *code = -1 at the end.
 * *at is where the code starts; `what` names the table in errors. */
static int next_code(const uint8_t *text, size_t len, size_t *i, int *code,
                     size_t *at, const char *what, const char *path,
                     pydb_error *err)
{
    *code = -1;
    while (*i < len) {
        uint8_t c = text[*i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' ||
            c == 26) {
            (*i)++;
            continue;
        }
        if (c < '0' || c > '9')
            return PYDB_CORRUPT(err, path, (int64_t)*i,
                                "%s: byte 0x%02x is not a decimal digit",
                                what, c);
        unsigned v = 0;
        *at = *i;
        while (*i < len && text[*i] >= '0' && text[*i] <= '9' && v < 1000)
            v = v * 10 + (unsigned)(text[(*i)++] - '0');
        if (v > 255)
            return PYDB_CORRUPT(err, path, (int64_t)*at,
                                "%s: code %u above 255", what, v);
        *code = (int)v;
        return PYDB_OK;
    }
    return PYDB_OK;
}

int pydb__keyrules_parse_uc(pydb_keyrules *r, const uint8_t *text, size_t len,
                            const char *path, pydb_error *err)
{
    size_t i = 0, at = 0;
    int n = 0, v, rc;
    uint8_t t[256];

    for (;;) {
        if ((rc = next_code(text, len, &i, &v, &at, "case table", path, err)))
            return rc;
        if (v < 0) break;
        if (n == 256)
            return PYDB_CORRUPT(err, path, (int64_t)at,
                                "case table: more than 256 codes");
        t[n++] = (uint8_t)v;
    }
    if (n != 256)
        return PYDB_CORRUPT(err, path, (int64_t)len,
                            "case table: %d codes, 256 expected", n);
    memcpy(r->upper, t, 256);
    return PYDB_OK;
}

int pydb__keyrules_parse_ac(pydb_keyrules *r, const uint8_t *text, size_t len,
                            const char *path, pydb_error *err)
{
    uint8_t w[256] = {0};
    size_t i = 0, at = 0;
    int n = 0, v, rc;

    for (;;) {
        if ((rc = next_code(text, len, &i, &v, &at, "word-character table",
                            path, err)))
            return rc;
        if (v < 0) break;
        w[v] = 1;
        n++;
    }
    if (n == 0)
        return PYDB_CORRUPT(err, path, 0, "word-character table is empty");
    memcpy(r->word, w, 256);
    return PYDB_OK;
}

/* pydb__read_file(); with sync, fsync the file read (the same inode)
 * before closing it. */
static int read_file(const char *path, uint8_t **data, size_t *len,
                     int sync, pydb_error *err)
{
    struct stat stbuf;
    uint8_t *buf = NULL;
    size_t done = 0, size;
    int e, rc = PYDB_OK, fd = pydb__vfs->open(path, O_RDONLY, 0);

    *data = NULL;
    *len = 0;
    if (fd < 0) return PYDB_OSERROR(err, errno, path, -1, "cannot open");
    if (fstat(fd, &stbuf) != 0) {
        rc = PYDB_OSERROR(err, errno, path, -1, "cannot stat");
        goto cleanup;
    }
    size = (size_t)stbuf.st_size;
    buf = malloc(size + 1);
    if (!buf) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, path, -1,
                        "cannot allocate %zu bytes", size);
        goto cleanup;
    }
    while (done < size) {
        ssize_t r = pydb__vfs->pread(fd, buf + done, size - done,
                                     (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = PYDB_OSERROR(err, errno, path, (int64_t)done, "cannot read");
            goto cleanup;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    if (sync && pydb__vfs->fsync(fd) != 0) {
        e = errno;
        rc = PYDB_OSERROR(err, e, path, -1, "fsync failed: %s", strerror(e));
        goto cleanup;
    }
    buf[done] = 0;
    *data = buf;
    *len = done;
    buf = NULL;
cleanup:
    pydb__vfs->close(fd);
    free(buf);
    return rc;
}

int pydb__read_file(const char *path, uint8_t **data, size_t *len,
                    pydb_error *err)
{
    return read_file(path, data, len, 0, err);
}

int pydb__read_file_synced(const char *path, uint8_t **data, size_t *len,
                           pydb_error *err)
{
    return read_file(path, data, len, 1, err);
}

int pydb__keyrules_load_dir(pydb_keyrules *r, const char *dir, int *found,
                            pydb_error *err)
{
    char path[1024], stem[1024];
    uint8_t *data;
    size_t len;
    int rc;

    *found = 0;
    snprintf(stem, sizeof stem, "%.1000s/isisuc", dir);
    if (pydb__find_file(path, sizeof path, stem, "tab") == 0) {
        if ((rc = pydb__read_file(path, &data, &len, err))) return rc;
        rc = pydb__keyrules_parse_uc(r, data, len, path, err);
        free(data);
        if (rc) return rc;
        *found |= 1;
    }
    snprintf(stem, sizeof stem, "%.1000s/isisac", dir);
    if (pydb__find_file(path, sizeof path, stem, "tab") == 0) {
        if ((rc = pydb__read_file(path, &data, &len, err))) return rc;
        rc = pydb__keyrules_parse_ac(r, data, len, path, err);
        free(data);
        if (rc) return rc;
        *found |= 2;
    }
    return PYDB_OK;
}

/* ---- stop words ---- */

static int cmp_sw(const void *a, const void *b, void *ctx)
{
    const pydb_stopwords *sw = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    size_t la = sw->len[i], lb = sw->len[j];
    int c = memcmp(sw->arena + sw->off[i], sw->arena + sw->off[j],
                   la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

int pydb__stopwords_parse(pydb_stopwords *sw, const pydb_keyrules *r,
                          const uint8_t *text, size_t len, pydb_error *err)
{
    size_t i = 0, nlines = 1, cap;
    size_t *order = NULL, *off2 = NULL;
    uint32_t *len2 = NULL;
    int rc = PYDB_OK;

    memset(sw, 0, sizeof *sw);
    /* every byte that ends a word in the loop below counts (a CR alone,
     * as old Mac files end lines, or a DOS end-of-file mark) */
    for (size_t k = 0; k < len; k++)
        nlines += text[k] == '\n' || text[k] == '\r' || text[k] == 26;
    cap = len * 4 + 16;
    sw->arena = malloc(cap);
    sw->off = malloc(nlines * sizeof *sw->off);
    sw->len = malloc(nlines * sizeof *sw->len);
    order = malloc(nlines * sizeof *order);
    off2 = malloc(nlines * sizeof *off2);
    len2 = malloc(nlines * sizeof *len2);
    if (!sw->arena || !sw->off || !sw->len || !order || !off2 || !len2) {
        rc = PYDB_ERROR(err, PYDB_ENOMEM, "", -1,
                        "cannot allocate stop words");
        goto cleanup;
    }
    size_t used = 0;
    while (i < len) {
        size_t e = i, kl;
        while (e < len && text[e] != '\n' && text[e] != '\r' && text[e] != 26)
            e++;
        if (e > i) {
            rc = pydb__key_normalize(r, text + i, e - i, sw->arena + used,
                                     cap - used, &kl, err);
            if (rc) goto cleanup;
            if (kl > 0) {
                sw->off[sw->n] = used;
                sw->len[sw->n] = (uint32_t)kl;
                sw->n++;
                used += kl;
            }
        }
        i = e + 1;
    }
    for (size_t k = 0; k < sw->n; k++) order[k] = k;
    qsort_r(order, sw->n, sizeof *order, cmp_sw, sw);
    for (size_t k = 0; k < sw->n; k++) {
        off2[k] = sw->off[order[k]];
        len2[k] = sw->len[order[k]];
    }
    free(sw->off);
    free(sw->len);
    sw->off = off2;
    sw->len = len2;
    off2 = NULL;
    len2 = NULL;
cleanup:
    free(order);
    free(off2);
    free(len2);
    if (rc) pydb__stopwords_free(sw);
    return rc;
}

int pydb__stopwords_has(const pydb_stopwords *sw, const uint8_t *key,
                        size_t len)
{
    size_t lo = 0, hi = sw ? sw->n : 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2, ml = sw->len[mid];
        int c = memcmp(sw->arena + sw->off[mid], key, ml < len ? ml : len);
        if (c == 0) c = (ml > len) - (ml < len);
        if (c == 0) return 1;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

void pydb__stopwords_free(pydb_stopwords *sw)
{
    if (!sw) return;
    free(sw->arena);
    free(sw->off);
    free(sw->len);
    memset(sw, 0, sizeof *sw);
}
