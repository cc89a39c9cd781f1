/* zerotrain: the parse of a job file, piece by piece: the key path of the value being read,
 * the problems recorded at their line and column (json_locate.c finds them), the typed getters
 * that check a value's type and bounds, and the "auto" values a parse fills. The job's sections
 * (jobfile.c) and the DeepSpeed config (dsconfig*.c) read every value through these. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfile_int.h"

/* ------------------------------------------------------------------------------------------ */
/* Key paths and problems. */

void jf_push(pctx *c, const char *key)
{
    if (c->depth < JF_CTX_DEPTH) c->seg[c->depth] = (zt_json_seg){key, 0};
    c->depth++;
}

void jf_pop(pctx *c)
{
    c->depth--;
}

void jf_append(char *out, size_t cap, size_t *used, const char *s)
{
    size_t k = strlen(s);
    if (*used + 1 >= cap) return;
    if (k > cap - 1 - *used) k = cap - 1 - *used;
    memcpy(out + *used, s, k);
    *used += k;
    out[*used] = '\0';
}

static void path_text(const zt_json_seg *segs, size_t n, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t d = 0; d < n; d++) {
        if (segs[d].key) {
            if (d > 0) jf_append(out, cap, &used, ".");
            jf_append(out, cap, &used, segs[d].key);
        } else {
            char idx[32];
            snprintf(idx, sizeof(idx), "[%ld]", segs[d].index);
            jf_append(out, cap, &used, idx);
        }
    }
}

void jf_path(const pctx *c, const char *key, char *out, size_t cap)
{
    zt_json_seg segs[JF_CTX_DEPTH + 1];
    size_t n = c->depth < JF_CTX_DEPTH ? c->depth : JF_CTX_DEPTH;
    memcpy(segs, c->seg, n * sizeof(segs[0]));
    if (key) segs[n++] = (zt_json_seg){key, 0};
    path_text(segs, n, out, cap);
}

/* Keeps a message on one line: control characters from keys and values become '?'. */
void jf_one_line(char *msg)
{
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
}

/* Adds a finished message to the report, at its position in the text. */
static zt_status record(pctx *c, zt_status st, int line, int col, const char *msg)
{
    jf_report *r = c->rep;
    if (r->nproblems == JF_MAX_PROBLEMS) {
        r->dropped++;
        return st;
    }
    jf_problem *p = &r->problems[r->nproblems++];
    p->origin = c->origin_index;
    p->line = line;
    p->col = col;
    p->seq = r->seq++;
    p->code = st;
    int k = snprintf(p->msg, sizeof(p->msg), "%s", msg);
    (void)k;
    jf_one_line(p->msg);
    return st;
}

/* The position of segs[0..n) in the text, or of the nearest enclosing member present. */
static bool locate(const pctx *c, const zt_json_seg *segs, size_t n, zt_json_loc *loc)
{
    for (size_t d = n + 1; d-- > 0;)
        if (zt_json_locate(c->text, c->len, segs, d, loc, NULL)) return true;
    return false;
}

/* Records a problem for member `key` (or element `index` when key is NULL and index >= 0) of
 * the current object, or for the current object itself, as "origin:line:col: path: message".
 * The position is that of the member's key; when the path is not in the text (a missing key)
 * it is that of the nearest enclosing member. */
static zt_status failv(pctx *c, zt_status st, const char *key, long index, const char *fmt,
                       va_list ap)
{
    zt_json_seg segs[JF_CTX_DEPTH + 1];
    size_t n = c->depth < JF_CTX_DEPTH ? c->depth : JF_CTX_DEPTH;
    memcpy(segs, c->seg, n * sizeof(segs[0]));
    if (key)
        segs[n++] = (zt_json_seg){key, 0};
    else if (index >= 0)
        segs[n++] = (zt_json_seg){NULL, index};
    char path[JF_PATH_TEXT];
    path_text(segs, n, path, sizeof(path));
    char what[ZT_ERRMSG_MAX / 2];
    vsnprintf(what, sizeof(what), fmt, ap);
    if (strncmp(what, "missing", 7) == 0) {
        char line[JF_PATH_TEXT + 2];
        snprintf(line, sizeof(line), "%s\n", path);
        if (strstr(c->rep->suggested, line)) return st; /* the typo's problem says it */
    }
    zt_json_loc loc = {0, 0, 0};
    bool have = locate(c, segs, n, &loc);
    const char *sep = path[0] ? ": " : "";
    char msg[ZT_ERRMSG_MAX];
    int k; /* a message longer than the record is cut */
    if (have)
        k = snprintf(msg, sizeof(msg), "%s:%d:%d: %s%s%s", c->origin, loc.line, loc.col, path, sep,
                     what);
    else
        k = snprintf(msg, sizeof(msg), "%s: %s%s%s", c->origin, path, sep, what);
    (void)k;
    return record(c, st, have ? loc.line : 0, have ? loc.col : 0, msg);
}

zt_status jf_fail_at(pctx *c, zt_status code, const char *key, const char *msg)
{
    zt_json_seg segs[JF_CTX_DEPTH + 1];
    size_t n = c->depth < JF_CTX_DEPTH ? c->depth : JF_CTX_DEPTH;
    memcpy(segs, c->seg, n * sizeof(segs[0]));
    if (key) segs[n++] = (zt_json_seg){key, 0};
    zt_json_loc loc = {0, 0, 0};
    char full[ZT_ERRMSG_MAX];
    /* a message from a file reader already starts with the file's name */
    bool named = strncmp(msg, c->origin, strlen(c->origin)) == 0;
    if (!named && (key || n) && locate(c, segs, n, &loc)) {
        int k = snprintf(full, sizeof(full), "%s:%d:%d: %s", c->origin, loc.line, loc.col, msg);
        (void)k;
        return record(c, code, loc.line, loc.col, full);
    }
    if (named) return record(c, code, 0, 0, msg);
    int k = snprintf(full, sizeof(full), "%s: %s", c->origin, msg);
    (void)k;
    return record(c, code, 0, 0, full);
}

zt_status jf_fail_key(pctx *c, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_status st = failv(c, ZT_ERR_CONFIG, key, -1, fmt, ap);
    va_end(ap);
    return st;
}

zt_status jf_fail_index(pctx *c, long index, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_status st = failv(c, ZT_ERR_CONFIG, NULL, index, fmt, ap);
    va_end(ap);
    return st;
}

zt_status jf_fail_key_code(pctx *c, zt_status code, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_status st = failv(c, code, key, -1, fmt, ap);
    va_end(ap);
    return st;
}

zt_status jf_fail_here(pctx *c, zt_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_status st = failv(c, code, NULL, -1, fmt, ap);
    va_end(ap);
    return st;
}
/* Shortest decimal text that reads back as exactly d. */
void jf_format_double(double d, char *out, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, d);
        if (strtod(out, NULL) == d) return;
    }
}

/* A short description of a JSON value for "(got ...)" in messages. */
void jf_describe(const json_t *v, char *out, size_t cap)
{
    switch (json_typeof(v)) {
    case JSON_STRING: {
        /* quoted, control characters shown as '?', long strings cut (at a character start)
         * so that a message stays on one line and readable */
        const char *s = json_string_value(v);
        size_t used = 0, limit = cap > 8 ? cap - 6 : 0;
        if (cap < 3) {
            out[0] = '\0';
            break;
        }
        out[used++] = '"';
        for (; *s && used < limit; s++)
            out[used++] = (unsigned char)*s < 0x20 ? '?' : *s;
        if (*s) {
            while (used > 1 && ((unsigned char)out[used - 1] & 0xC0) == 0x80)
                used--;
            if (used > 1 && (unsigned char)out[used - 1] >= 0xC0) used--;
            memcpy(out + used, "...", 3);
            used += 3;
        }
        out[used++] = '"';
        out[used] = '\0';
        break;
    }
    case JSON_INTEGER:
        snprintf(out, cap, "%lld", (long long)json_integer_value(v));
        break;
    case JSON_REAL:
        jf_format_double(json_real_value(v), out, cap);
        break;
    case JSON_TRUE:
        snprintf(out, cap, "true");
        break;
    case JSON_FALSE:
        snprintf(out, cap, "false");
        break;
    case JSON_NULL:
        snprintf(out, cap, "null");
        break;
    case JSON_OBJECT:
        snprintf(out, cap, "an object");
        break;
    case JSON_ARRAY:
        snprintf(out, cap, "an array");
        break;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Typed getters. Each leaves *out alone when the key is absent or "auto" (DeepSpeed drops
 * "auto" values), and otherwise checks type and bounds. */

bool jf_is_auto(const json_t *v)
{
    return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

json_t *jf_member(json_t *obj, const char *key)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    return v && !jf_is_auto(v) ? v : NULL;
}

static void int_rule(int64_t lo, int64_t hi, int64_t type_max, char *out, size_t cap)
{
    if (hi >= type_max && lo == 1)
        snprintf(out, cap, "a positive integer");
    else if (hi >= type_max && lo == 0)
        snprintf(out, cap, "a non-negative integer");
    else if (hi >= type_max)
        snprintf(out, cap, "an integer >= %lld", (long long)lo);
    else
        snprintf(out, cap, "an integer from %lld to %lld", (long long)lo, (long long)hi);
}

zt_status jf_get_int_max(pctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi,
                         int64_t type_max, int64_t *out)
{
    json_t *v = jf_member(obj, key);
    if (!v) return ZT_OK;
    char rule[96], got[64];
    int_rule(lo, hi, type_max, rule, sizeof(rule));
    jf_describe(v, got, sizeof(got));
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        /* 2^63 is exactly representable; anything >= it does not fit int64_t. */
        if (d != floor(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
            return jf_fail_key(c, key, "must be %s (got %s)", rule, got);
        x = (int64_t)d;
    } else {
        return jf_fail_key(c, key, "must be %s (got %s)", rule, got);
    }
    if (x < lo || x > hi) return jf_fail_key(c, key, "must be %s (got %s)", rule, got);
    *out = x;
    return ZT_OK;
}

zt_status jf_get_i64(pctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    return jf_get_int_max(c, obj, key, lo, hi, INT64_MAX, out);
}

zt_status jf_get_int(pctx *c, json_t *obj, const char *key, int lo, int hi, int *out)
{
    int64_t x = *out;
    zt_status st = jf_get_int_max(c, obj, key, lo, hi, INT_MAX, &x);
    if (st == ZT_OK) *out = (int)x;
    return st;
}

zt_status jf_check_num(pctx *c, const char *key, long index, double x, double lo, double hi,
                       int rule, const char *got)
{
    bool ok;
    char lo_s[32], hi_s[32], want[96];
    jf_format_double(lo, lo_s, sizeof(lo_s));
    jf_format_double(hi, hi_s, sizeof(hi_s));
    switch (rule) {
    case NUM_GT:
        ok = x > lo;
        snprintf(want, sizeof(want), "a number > %s", lo_s);
        break;
    case NUM_RANGE:
        ok = x >= lo && x <= hi;
        snprintf(want, sizeof(want), "a number in [%s, %s]", lo_s, hi_s);
        break;
    case NUM_RANGE_HO:
        ok = x >= lo && x < hi;
        snprintf(want, sizeof(want), "a number in [%s, %s)", lo_s, hi_s);
        break;
    default:
        ok = x >= lo;
        snprintf(want, sizeof(want), "a number >= %s", lo_s);
        break;
    }
    if (ok) return ZT_OK;
    if (key) return jf_fail_key(c, key, "must be %s (got %s)", want, got);
    return jf_fail_index(c, index, "must be %s (got %s)", want, got);
}

zt_status jf_get_num(pctx *c, json_t *obj, const char *key, double lo, double hi, int rule,
                     double *out)
{
    json_t *v = jf_member(obj, key);
    if (!v) return ZT_OK;
    char got[64];
    jf_describe(v, got, sizeof(got));
    if (!json_is_number(v)) return jf_fail_key(c, key, "must be a number (got %s)", got);
    double x = json_number_value(v);
    zt_status st = jf_check_num(c, key, -1, x, lo, hi, rule, got);
    if (st == ZT_OK) *out = x;
    return st;
}

zt_status jf_get_bool(pctx *c, json_t *obj, const char *key, bool *out)
{
    json_t *v = jf_member(obj, key);
    if (!v) return ZT_OK;
    if (!json_is_boolean(v)) {
        char got[64];
        jf_describe(v, got, sizeof(got));
        return jf_fail_key(c, key, "must be true or false (got %s)", got);
    }
    *out = json_is_true(v);
    return ZT_OK;
}

/* A non-empty string that fits in cap bytes. *present tells whether it was given. */
zt_status jf_get_str(pctx *c, json_t *obj, const char *key, char *out, size_t cap, bool *present)
{
    json_t *v = jf_member(obj, key);
    if (present) *present = v != NULL;
    if (!v) return ZT_OK;
    char got[64];
    jf_describe(v, got, sizeof(got));
    if (!json_is_string(v)) return jf_fail_key(c, key, "must be a string (got %s)", got);
    size_t k = json_string_length(v);
    if (k == 0) return jf_fail_key(c, key, "must be a non-empty string");
    if (k >= cap) return jf_fail_key(c, key, "is too long (%zu bytes, at most %zu)", k, cap - 1);
    if (strlen(json_string_value(v)) != k)
        return jf_fail_key(c, key, "must not contain NUL characters");
    memcpy(out, json_string_value(v), k + 1);
    return ZT_OK;
}

/* Member `key` as an object: *sub is NULL when it is absent or "auto". */
zt_status jf_get_obj(pctx *c, json_t *obj, const char *key, json_t **sub)
{
    json_t *v = jf_member(obj, key);
    *sub = NULL;
    if (!v) return ZT_OK;
    if (!json_is_object(v)) {
        char got[64];
        jf_describe(v, got, sizeof(got));
        return jf_fail_key(c, key, "must be an object {...} (got %s)", got);
    }
    *sub = v;
    return ZT_OK;
}

zt_status jf_require(pctx *c, json_t *obj, const char *key, const char *what)
{
    if (jf_member(obj, key)) return ZT_OK;
    return jf_fail_key(c, key, "missing; add it (%s)", what);
}

/* ------------------------------------------------------------------------------------------ */
/* "auto" values. */

bool jf_auto_given(const pctx *c, json_t *obj, const char *key)
{
    (void)c;
    return obj && jf_is_auto(json_object_get(obj, key));
}

void jf_auto_note(pctx *c, const char *key, jf_vtype type, const void *value, const char *from)
{
    jf_report *r = c->rep;
    char path[JF_PATH_TEXT];
    jf_path(c, key, path, sizeof(path));
    jf_auto *a = NULL;
    for (size_t i = 0; i < r->nautos && !a; i++)
        if (strcmp(r->autos[i].path, path) == 0) a = &r->autos[i];
    if (!a) {
        if (r->nautos == JF_MAX_AUTOS) return;
        a = &r->autos[r->nautos++];
        snprintf(a->path, sizeof(a->path), "%s", path);
    }
    a->type = type;
    a->value = value;
    a->from = from;
}
