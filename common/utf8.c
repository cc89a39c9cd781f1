/* zerotrain: UTF-8 validation, cleaning and cutting (see utf8.h). */
#include "common/utf8.h"

#include <string.h>

/* Length of the valid sequence starting at u[i] (n bytes in all), 0 when none starts there. */
static size_t seq_len(const unsigned char *u, size_t i, size_t n)
{
    unsigned char c = u[i];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xC2 && c <= 0xDF ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (!len || len > n - i) return 0;
    for (size_t k = 1; k < len; k++)
        if ((u[i + k] & 0xC0) != 0x80) return 0;
    if (len > 2) {
        unsigned char c1 = u[i + 1];
        /* overlong forms, UTF-16 surrogates, code points above U+10FFFF */
        if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
            (c == 0xF4 && c1 > 0x8F))
            return 0;
    }
    return len;
}

bool zt_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { /* the common case: ASCII */
            i++;
            continue;
        }
        size_t len = seq_len(u, i, n);
        if (!len) {
            if (bad_at) *bad_at = i;
            return false;
        }
        i += len;
    }
    return true;
}

size_t zt_utf8_clean(char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, replaced = 0;
    while (i < n) {
        size_t len = u[i] < 0x80 ? 1 : seq_len(u, i, n);
        if (!len) {
            s[i++] = '?';
            replaced++;
            continue;
        }
        i += len;
    }
    return replaced;
}

size_t zt_utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max) return n;
    const unsigned char *u = (const unsigned char *)s;
    size_t k = max;
    /* back over continuation bytes to the start of the character that max splits (at most
     * three: a longer run is not one character, cut anywhere in it) */
    for (int back = 0; k > 0 && back < 3 && (u[k] & 0xC0) == 0x80; back++)
        k--;
    if ((u[k] & 0xC0) == 0x80) return max;
    return k;
}

size_t zt_utf8_trim_partial(char *s)
{
    size_t n = strlen(s);
    const unsigned char *u = (const unsigned char *)s;
    /* the last character's lead byte: at most three continuation bytes back */
    size_t k = n;
    for (int back = 0; k > 0 && back < 4; back++) {
        k--;
        if ((u[k] & 0xC0) != 0x80) break;
    }
    if (k < n && u[k] >= 0xC0 && seq_len(u, k, n) == 0) {
        size_t need = u[k] >= 0xF0 ? 4 : u[k] >= 0xE0 ? 3 : 2;
        if (n - k < need) { /* incomplete, not merely invalid: drop it */
            s[k] = '\0';
            return k;
        }
    }
    return n;
}

void zt_utf8_position(const char *s, size_t at, size_t *line, size_t *col)
{
    size_t l = 1, c = 1;
    for (size_t i = 0; i < at; i++) {
        if (s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}
