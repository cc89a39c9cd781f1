/* zerotrain: terminal-safe printing of others' text (see termtext.h). */
#include "cli/termtext.h"

#include <string.h>

#include "common/utf8.h"

/* The length of the valid UTF-8 sequence at s (n bytes left), or 0 when the byte at s does
 * not start one. */
static size_t seq_len(const unsigned char *s, size_t n)
{
    size_t len = 0;
    if (s[0] < 0x80)
        len = 1;
    else if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4;
    if (!len || len > n) return 0;
    return zt_utf8_valid((const char *)s, len, NULL) ? len : 0;
}

long zt_term_write(FILE *f, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    long out = 0;
    size_t i = 0;
    while (i < n) {
        /* the longest run that goes out unchanged */
        size_t run = i;
        for (;;) {
            if (run >= n) break;
            unsigned char c = p[run];
            if (c >= 0x20 && c < 0x7f) {
                run++;
                continue;
            }
            if (c == '\t' || c == '\n') {
                run++;
                continue;
            }
            size_t len = c >= 0x80 ? seq_len(p + run, n - run) : 0;
            if (len >= 2 && !(c == 0xc2 && p[run + 1] < 0xa0)) {
                run += len;
                continue;
            }
            break;
        }
        if (run > i) {
            if (fwrite(p + i, 1, run - i, f) != run - i) return -1;
            out += (long)(run - i);
            i = run;
            continue;
        }
        /* p[i] needs escaping: a C1 control (0xc2 0x80..0x9f), or a single byte */
        char esc[8];
        int w;
        if (p[i] == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] < 0xa0) {
            w = snprintf(esc, sizeof(esc), "\\u%04x", p[i + 1]);
            i += 2;
        } else {
            w = snprintf(esc, sizeof(esc), "\\x%02x", p[i]);
            i += 1;
        }
        if (fwrite(esc, 1, (size_t)w, f) != (size_t)w) return -1;
        out += w;
    }
    return out;
}

long zt_term_puts(FILE *f, const char *s)
{
    return zt_term_write(f, s, strlen(s));
}
