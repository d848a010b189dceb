/*
 * keys.c - key normalisation, isis-formats.md §5.3.
 *
 * placeholder: replaced by the native-index branch at merge.
 *
 * This minimal version implements the two functions declared in
 * index_int.h so that the ISIS inverted-file reader links: the default
 * CDS/ISIS upper-case table for the ASCII range (a-z -> A-Z, every other
 * byte unchanged), letters as word characters, leading/trailing blanks
 * removed, truncation to max_key bytes (never inside a UTF-8 sequence
 * when utf8 is set).  UTF-8 text is NOT case- or accent-folded here.
 */
#include "index_int.h"
#include <string.h>

void pydb__keyrules_default(pydb_keyrules *r, int utf8, size_t max_key)
{
    for (int c = 0; c < 256; c++) {
        r->upper[c] = (uint8_t)((c >= 'a' && c <= 'z') ? c - 'a' + 'A' : c);
        r->word[c] = (uint8_t)((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
    }
    r->utf8 = utf8;
    r->max_key = max_key;
}

int pydb__key_normalize(const pydb_keyrules *r, const uint8_t *in,
                        size_t len, uint8_t *out, size_t cap,
                        size_t *out_len, pydb_error *err)
{
    size_t b = 0, e = len, n;

    while (b < e && in[b] == ' ') b++;
    while (e > b && in[e - 1] == ' ') e--;
    n = e - b;
    if (r->max_key && n > r->max_key) {
        n = r->max_key;
        /* do not cut a UTF-8 sequence: back up to its lead byte */
        if (r->utf8 && b + n < e && (in[b + n] & 0xC0) == 0x80) {
            while (n > 0 && (in[b + n] & 0xC0) == 0x80) n--;
        }
        while (n > 0 && in[b + n - 1] == ' ') n--;
    }
    if (n > cap)
        return PYDB_ERROR(err, PYDB_EINVAL, "", -1,
                          "key buffer too small (%zu bytes for %zu)", cap, n);
    for (size_t i = 0; i < n; i++) out[i] = r->upper[in[b + i]];
    *out_len = n;
    return PYDB_OK;
}
