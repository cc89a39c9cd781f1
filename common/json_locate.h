/* zerotrain: finds where things are in raw JSON text. jansson keeps no source positions,
 * so configuration errors (common/jobfile_get.c) ask this small scanner for the line and column
 * of a key path, and for the first duplicated key, to point the user at the right spot. */
#ifndef ZT_COMMON_JSON_LOCATE_H
#define ZT_COMMON_JSON_LOCATE_H

#include <stdbool.h>
#include <stddef.h>

/* One step of a key path: an object member (key != NULL) or an array element (key == NULL,
 * index >= 0). */
typedef struct zt_json_seg {
    const char *key;
    long index;
} zt_json_seg;

/* A place in the text: byte offset, 1-based line, and 1-based column counted in characters
 * (UTF-8 code points), as jansson counts them in its own error positions. */
typedef struct zt_json_loc {
    size_t offset;
    int line;
    int col;
} zt_json_loc;

/* Finds the member or element at `path` (depth steps from the root value) in the JSON text
 * text[0..len). On success returns true and fills *key_loc with the position of the member's
 * key string (the value's position when the last step is an array index or depth is 0) and
 * *value_loc with the position of the value; either pointer may be NULL. Keys are compared
 * after decoding escapes. When a key occurs twice in one object the first one is found.
 * Returns false when the path does not exist or the text is malformed before reaching it.
 * Pure function; thread-safe. */
bool zt_json_locate(const char *text, size_t len, const zt_json_seg *path, size_t depth,
                    zt_json_loc *key_loc, zt_json_loc *value_loc);

/* Finds the first key (in text order) that repeats inside one object. On success returns true,
 * writes the dotted path of the repeated member ("model.n_layer", "a.b[2].c") into path (always
 * NUL-terminated, truncated to path_size) and the positions of the first and the repeated key.
 * Returns false when there is no duplicate, the text is malformed, nesting exceeds 128 levels,
 * or memory runs out. Thread-safe. */
bool zt_json_find_duplicate(const char *text, size_t len, char *path, size_t path_size,
                            zt_json_loc *first, zt_json_loc *second);

/* Line and column of a byte offset (clamped to len). Thread-safe. */
zt_json_loc zt_json_offset_loc(const char *text, size_t len, size_t offset);

#endif
