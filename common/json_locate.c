/* zerotrain: a small JSON scanner that tracks key paths over the raw text, used only to
 * point configuration errors at a line and column (see json_locate.h). It trusts that the
 * text is mostly valid JSON (jansson has usually parsed it already) but never reads past len
 * and fails softly on anything it does not understand. */
#include "json_locate.h"

#include <stdint.h>
#include <string.h>

#include "alloc.h"

#define ZT_JSON_MAX_DEPTH 128

typedef struct scanner {
    const char *s;
    size_t n, i;
} scanner;

/* A growable, always NUL-terminated byte buffer for decoded keys. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
} strbuf;

static bool sb_put(strbuf *b, const char *src, size_t k)
{
    if (b->len + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->len + k + 1)
            cap *= 2;
        char *p = zt_realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, k);
    b->len += k;
    b->p[b->len] = '\0';
    return true;
}

static bool sb_put_utf8(strbuf *b, uint32_t cp)
{
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    return sb_put(b, u, k);
}

static void skip_ws(scanner *sc)
{
    while (sc->i < sc->n) {
        char c = sc->s[sc->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        sc->i++;
    }
}

static bool peek_is(const scanner *sc, char c)
{
    return sc->i < sc->n && sc->s[sc->i] == c;
}

static bool expect(scanner *sc, char c)
{
    skip_ws(sc);
    if (!peek_is(sc, c)) return false;
    sc->i++;
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at sc->i. */
static bool scan_hex4(scanner *sc, uint32_t *out)
{
    if (sc->n - sc->i < 4) return false;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(sc->s[sc->i + (size_t)k]);
        if (h < 0) return false;
        v = v * 16 + (uint32_t)h;
    }
    sc->i += 4;
    *out = v;
    return true;
}

/* Scans the string at sc->i (which must be '"'), appending its decoded bytes to out when out
 * is not NULL. */
static bool scan_string(scanner *sc, strbuf *out)
{
    if (!peek_is(sc, '"')) return false;
    sc->i++;
    while (sc->i < sc->n) {
        char c = sc->s[sc->i];
        if (c == '"') {
            sc->i++;
            return out ? sb_put(out, "", 0) : true;
        }
        if ((unsigned char)c < 0x20) return false;
        if (c != '\\') {
            if (out && !sb_put(out, &c, 1)) return false;
            sc->i++;
            continue;
        }
        if (sc->i + 1 >= sc->n) return false;
        char e = sc->s[sc->i + 1];
        sc->i += 2;
        char lit;
        switch (e) {
        case '"':
            lit = '"';
            break;
        case '\\':
            lit = '\\';
            break;
        case '/':
            lit = '/';
            break;
        case 'b':
            lit = '\b';
            break;
        case 'f':
            lit = '\f';
            break;
        case 'n':
            lit = '\n';
            break;
        case 'r':
            lit = '\r';
            break;
        case 't':
            lit = '\t';
            break;
        case 'u': {
            uint32_t cp;
            if (!scan_hex4(sc, &cp)) return false;
            if (cp >= 0xD800 && cp < 0xDC00 && sc->n - sc->i >= 6 && sc->s[sc->i] == '\\' &&
                sc->s[sc->i + 1] == 'u') {
                scanner look = *sc;
                look.i += 2;
                uint32_t lo;
                if (scan_hex4(&look, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    sc->i = look.i;
                }
            }
            if (out && !sb_put_utf8(out, cp)) return false;
            continue;
        }
        default:
            return false;
        }
        if (out && !sb_put(out, &lit, 1)) return false;
    }
    return false;
}

/* Skips one value (string, number, literal, object or array) starting after whitespace. */
static bool skip_value(scanner *sc)
{
    skip_ws(sc);
    if (sc->i >= sc->n) return false;
    char c = sc->s[sc->i];
    if (c == '"') return scan_string(sc, NULL);
    if (c == '{' || c == '[') {
        size_t depth = 0;
        while (sc->i < sc->n) {
            c = sc->s[sc->i];
            if (c == '"') {
                if (!scan_string(sc, NULL)) return false;
                continue;
            }
            if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                depth--;
                if (depth == 0) {
                    sc->i++;
                    return true;
                }
            }
            sc->i++;
        }
        return false;
    }
    size_t start = sc->i;
    while (sc->i < sc->n && !strchr(",}] \t\r\n", sc->s[sc->i]))
        sc->i++;
    return sc->i > start;
}

zt_json_loc zt_json_offset_loc(const char *text, size_t len, size_t offset)
{
    zt_json_loc loc = {offset < len ? offset : len, 1, 1};
    for (size_t k = 0; k < loc.offset; k++) {
        unsigned char b = (unsigned char)text[k];
        if (b == '\n') {
            loc.line++;
            loc.col = 1;
        } else if ((b & 0xC0) != 0x80) {
            loc.col++;
        }
    }
    return loc;
}

/* Moves sc to the value of member `key` of the object at sc->i. */
static bool find_member(scanner *sc, const char *key, strbuf *kb, size_t *key_off)
{
    if (!expect(sc, '{')) return false;
    skip_ws(sc);
    if (peek_is(sc, '}')) return false;
    size_t klen = strlen(key);
    for (;;) {
        skip_ws(sc);
        size_t ko = sc->i;
        kb->len = 0;
        if (!scan_string(sc, kb) || !expect(sc, ':')) return false;
        skip_ws(sc);
        if (kb->len == klen && memcmp(kb->p, key, klen) == 0) {
            *key_off = ko;
            return true;
        }
        if (!skip_value(sc)) return false;
        if (!expect(sc, ',')) return false;
    }
}

/* Moves sc to element `index` of the array at sc->i. */
static bool find_element(scanner *sc, long index)
{
    if (index < 0 || !expect(sc, '[')) return false;
    skip_ws(sc);
    if (peek_is(sc, ']')) return false;
    for (long k = 0;; k++) {
        skip_ws(sc);
        if (k == index) return true;
        if (!skip_value(sc) || !expect(sc, ',')) return false;
    }
}

bool zt_json_locate(const char *text, size_t len, const zt_json_seg *path, size_t depth,
                    zt_json_loc *key_loc, zt_json_loc *value_loc)
{
    if (!text) return false;
    scanner sc = {text, len, 0};
    strbuf kb = {0};
    skip_ws(&sc);
    if (sc.i >= len) return false;
    size_t key_off = sc.i;
    bool ok = true;
    for (size_t d = 0; d < depth && ok; d++) {
        if (path[d].key) {
            ok = find_member(&sc, path[d].key, &kb, &key_off);
        } else {
            ok = find_element(&sc, path[d].index);
            key_off = sc.i;
        }
    }
    zt_free(kb.p);
    if (!ok || sc.i >= len) return false;
    if (key_loc) *key_loc = zt_json_offset_loc(text, len, key_off);
    if (value_loc) *value_loc = zt_json_offset_loc(text, len, sc.i);
    return true;
}

/* ---- duplicate keys ---- */

typedef struct keyrec {
    char *key;
    size_t len, off;
} keyrec;

typedef struct dupwalk {
    scanner sc;
    zt_json_seg stack[ZT_JSON_MAX_DEPTH];
    char *path;
    size_t path_size;
    size_t first, second;
} dupwalk;

static void path_append(char *out, size_t size, size_t *used, const char *s)
{
    size_t k = strlen(s);
    if (*used + 1 >= size) return;
    if (k > size - 1 - *used) k = size - 1 - *used;
    memcpy(out + *used, s, k);
    *used += k;
    out[*used] = '\0';
}

static void write_path(dupwalk *w, size_t depth)
{
    size_t used = 0;
    if (w->path_size == 0) return;
    w->path[0] = '\0';
    for (size_t d = 0; d < depth; d++) {
        if (w->stack[d].key) {
            if (d > 0) path_append(w->path, w->path_size, &used, ".");
            path_append(w->path, w->path_size, &used, w->stack[d].key);
        } else {
            char idx[32];
            int k = 0;
            long v = w->stack[d].index;
            char rev[24];
            do {
                rev[k++] = (char)('0' + v % 10);
                v /= 10;
            } while (v > 0 && k < 20);
            size_t m = 0;
            idx[m++] = '[';
            while (k > 0)
                idx[m++] = rev[--k];
            idx[m++] = ']';
            idx[m] = '\0';
            path_append(w->path, w->path_size, &used, idx);
        }
    }
}

/* 1: duplicate found (path and offsets filled), 0: value scanned, no duplicate, -1: gave up. */
static int walk(dupwalk *w, size_t depth)
{
    scanner *sc = &w->sc;
    skip_ws(sc);
    if (depth >= ZT_JSON_MAX_DEPTH) return -1;
    if (peek_is(sc, '[')) {
        sc->i++;
        skip_ws(sc);
        if (peek_is(sc, ']')) {
            sc->i++;
            return 0;
        }
        for (long k = 0;; k++) {
            w->stack[depth] = (zt_json_seg){NULL, k};
            int r = walk(w, depth + 1);
            if (r != 0) return r;
            skip_ws(sc);
            if (peek_is(sc, ']')) {
                sc->i++;
                return 0;
            }
            if (!expect(sc, ',')) return -1;
        }
    }
    if (!peek_is(sc, '{')) return skip_value(sc) ? 0 : -1;
    sc->i++;
    keyrec *keys = NULL;
    size_t nkeys = 0, cap = 0;
    int result = -1;
    skip_ws(sc);
    if (peek_is(sc, '}')) {
        sc->i++;
        return 0;
    }
    for (;;) {
        skip_ws(sc);
        size_t ko = sc->i;
        strbuf kb = {0};
        if (!scan_string(sc, &kb)) {
            zt_free(kb.p);
            goto free_keys;
        }
        for (size_t k = 0; k < nkeys; k++) {
            if (keys[k].len == kb.len && memcmp(keys[k].key, kb.p, kb.len) == 0) {
                w->stack[depth] = (zt_json_seg){kb.p, 0};
                write_path(w, depth + 1);
                w->first = keys[k].off;
                w->second = ko;
                zt_free(kb.p);
                result = 1;
                goto free_keys;
            }
        }
        if (nkeys == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            keyrec *nk = zt_realloc(keys, ncap * sizeof(*nk));
            if (!nk) {
                zt_free(kb.p);
                goto free_keys;
            }
            keys = nk;
            cap = ncap;
        }
        keys[nkeys++] = (keyrec){kb.p, kb.len, ko};
        if (!expect(sc, ':')) goto free_keys;
        w->stack[depth] = (zt_json_seg){kb.p, 0};
        int r = walk(w, depth + 1);
        if (r != 0) {
            result = r;
            goto free_keys;
        }
        skip_ws(sc);
        if (peek_is(sc, '}')) {
            sc->i++;
            result = 0;
            goto free_keys;
        }
        if (!expect(sc, ',')) goto free_keys;
    }
free_keys:
    for (size_t k = 0; k < nkeys; k++)
        zt_free(keys[k].key);
    zt_free(keys);
    return result;
}

bool zt_json_find_duplicate(const char *text, size_t len, char *path, size_t path_size,
                            zt_json_loc *first, zt_json_loc *second)
{
    if (!text) return false;
    dupwalk *w = zt_calloc(1, sizeof(*w));
    if (!w) return false;
    w->sc = (scanner){text, len, 0};
    w->path = path;
    w->path_size = path ? path_size : 0;
    if (path && path_size) path[0] = '\0';
    bool found = walk(w, 0) == 1;
    if (found) {
        if (first) *first = zt_json_offset_loc(text, len, w->first);
        if (second) *second = zt_json_offset_loc(text, len, w->second);
    }
    zt_free(w);
    return found;
}
