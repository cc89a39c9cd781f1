/* zerotrain: UTF-8 checks for text that crosses a protobuf or JSON boundary. Protobuf
 * `string` fields and JSON must hold valid UTF-8 (standard clients refuse anything else), so
 * the coordinator refuses or cleans what it is sent, cuts long text on a character boundary,
 * and the agent cleans worker output before forwarding it. Valid means RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF. All functions are pure and thread-safe. */
#ifndef ZT_COMMON_UTF8_H
#define ZT_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when the n bytes at s are valid UTF-8. When not, *bad_at (optional) receives the
 * offset of the first byte that does not start a valid sequence. */
bool zt_utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Replaces, in place, every byte that is not part of a valid sequence with '?'; returns how
 * many were replaced (0: the text was valid). The length does not change. */
size_t zt_utf8_clean(char *s, size_t n);

/* The largest length <= max (and <= n) at which the n bytes at s can be cut without
 * splitting a character: cutting a valid text there leaves a valid text. */
size_t zt_utf8_cut(const char *s, size_t n, size_t max);

/* Drops, in place, an incomplete sequence at the end of the NUL-terminated s (what a
 * truncating snprintf may leave); returns the new length. */
size_t zt_utf8_trim_partial(char *s);

/* The 1-based line and column (counted in characters: bytes that do not continue a UTF-8
 * sequence) of byte offset `at` in s, for messages that point into a text file. */
void zt_utf8_position(const char *s, size_t at, size_t *line, size_t *col);

#endif
