/* zerotrain: printing text that others wrote (worker output, event reasons) on a terminal
 * without letting it steer the terminal: escape sequences could move the cursor, rewrite
 * earlier lines, retitle the window or answer back on the terminal's input. */
#ifndef ZT_CLI_TERMTEXT_H
#define ZT_CLI_TERMTEXT_H

#include <stddef.h>
#include <stdio.h>

/* Writes the n bytes at s to f, with every byte or character that a terminal acts on written
 * as visible text instead: C0 controls but tab and newline, and DEL, as "\x1b"; C1 controls
 * (U+0080..U+009F, two bytes in UTF-8) as "\u009b"; bytes that are not valid UTF-8 as "\xff".
 * Everything else, valid multi-byte UTF-8 included, is written unchanged. A backslash is not
 * doubled: the output is for reading, not for parsing back. Returns the bytes written, or -1
 * on a write error (ferror(f) is set). Thread-safe as stdio is. */
long zt_term_write(FILE *f, const char *s, size_t n);
/* The same for a NUL-terminated string. */
long zt_term_puts(FILE *f, const char *s);

#endif
