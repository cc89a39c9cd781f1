/* zerotrain: parses and validates the job file into struct zt_job:
 * the job's own sections here, the DeepSpeed config in dsconfig.c. Every problem is collected
 * with the file, the JSON line and column (found with json_locate.c), the key path, what is
 * wrong and what to do, and reported together. Serialisation back to JSON lives in
 * jobfile_write.c. */
#define _POSIX_C_SOURCE 200809L
#include "jobfile.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "jobfile_int.h"
#include "log.h"

#define JOB_MAX_BYTES (16u << 20) /* a job file larger than this is surely a mistake */

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
static void one_line(char *msg)
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
    one_line(p->msg);
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

/* ------------------------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------------------------ */
/* Key tables: which keys an object may hold (jobfile_int.h). */

/* Optimal string alignment distance, case-insensitive, for short keys. */
static size_t edit_distance(const char *a, const char *b)
{
    enum { MAXK = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= MAXK || m >= MAXK) return (size_t)-1;
    size_t d[MAXK + 1][MAXK + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            size_t cost = ca != cb;
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(hay), m = strlen(needle);
    for (size_t i = 0; m <= n && i <= n - m; i++) {
        size_t k = 0;
        while (k < m && tolower((unsigned char)hay[i + k]) == tolower((unsigned char)needle[k]))
            k++;
        if (k == m) return true;
    }
    return false;
}

/* The candidate closest to `key`, or NULL when none is reasonably close. In order of
 * preference: one edit away (a typo), a name that contains the key (a truncation, e.g.
 * "train_micro_batch_size"), a few edits away (about a third of the length), a name that the
 * key contains. Ties go to the first (edits) or the shortest (containment) candidate. */
const char *jf_closest(const char *key, const char *const *names, size_t n)
{
    size_t len = strlen(key);
    size_t limit = len <= 3 ? 1 : len <= 8 ? 2 : len / 3;
    const char *by_edit = NULL, *within = NULL, *inside = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(key, names[i]);
        if (d <= limit && d < best_d) {
            by_edit = names[i];
            best_d = d;
        }
        if (len >= 4 && contains_ci(names[i], key) &&
            (!within || strlen(names[i]) < strlen(within)))
            within = names[i];
        if (strlen(names[i]) >= 4 && contains_ci(key, names[i]) &&
            (!inside || strlen(names[i]) < strlen(inside)))
            inside = names[i];
    }
    if (by_edit && best_d <= 1) return by_edit;
    if (within) return within;
    return by_edit ? by_edit : inside;
}

bool jf_in_list_ci(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (s[k] && tolower((unsigned char)s[k]) == tolower((unsigned char)list[i][k]))
            k++;
        if (s[k] == '\0' && list[i][k] == '\0') return true;
    }
    return false;
}

static bool allowed_value(const keyspec *ks, const json_t *v)
{
    if ((ks->allow & ALLOW_FALSE) && json_is_false(v)) return true;
    if ((ks->allow & ALLOW_TRUE) && json_is_true(v)) return true;
    if ((ks->allow & ALLOW_NULL) && json_is_null(v)) return true;
    if ((ks->allow & ALLOW_NUM) && json_is_number(v) && json_number_value(v) == ks->num)
        return true;
    if ((ks->allow & ALLOW_DISABLED) && json_is_object(v)) {
        json_t *en = json_object_get(v, "enabled");
        return !en || json_is_false(en);
    }
    return false;
}

static void allowed_text(const keyspec *ks, char *out, size_t cap)
{
    out[0] = '\0';
    if (ks->allow & ALLOW_DISABLED)
        snprintf(out, cap, " or set \"enabled\": false");
    else if (ks->allow & ALLOW_FALSE)
        snprintf(out, cap, " or set it to false");
    else if (ks->allow & ALLOW_TRUE)
        snprintf(out, cap, " or set it to true");
    else if (ks->allow & ALLOW_NUM) {
        char num[32];
        jf_format_double(ks->num, num, sizeof(num));
        snprintf(out, cap, " or set it to %s", num);
    } else if (ks->allow & ALLOW_NULL)
        snprintf(out, cap, " or set it to null");
}

/* Whether v is DeepSpeed's default dflt (JSON text; numbers compare by value, "1e9" too). */
static bool is_default(const json_t *v, const char *dflt)
{
    if (!dflt) return false;
    json_error_t je;
    json_t *d = json_loads(dflt, JSON_DECODE_ANY, &je);
    if (!d) {
        char *end;
        double x = strtod(dflt, &end);
        return end != dflt && *end == '\0' && json_is_number(v) && json_number_value(v) == x;
    }
    bool same = (json_is_number(v) && json_is_number(d))
                    ? json_number_value(v) == json_number_value(d)
                    : json_equal((json_t *)v, d);
    json_decref(d);
    return same;
}

/* Whether v has the table's type (keys with no effect are still checked, as DeepSpeed
 * checks them). */
static bool type_ok(int type, const json_t *v)
{
    switch (type) {
    case VT_BOOL:
        return json_is_boolean(v);
    case VT_INT:
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    case VT_NUM:
        return json_is_number(v);
    case VT_STR:
        return json_is_string(v);
    case VT_OBJ:
        return json_is_object(v);
    case VT_LIST:
        return json_is_array(v);
    case VT_STR_OR_NULL:
        return json_is_string(v) || json_is_null(v);
    default:
        return true;
    }
}

static const char *type_word(int type)
{
    switch (type) {
    case VT_BOOL:
        return "true or false";
    case VT_INT:
        return "an integer";
    case VT_NUM:
        return "a number";
    case VT_STR:
        return "a string";
    case VT_OBJ:
        return "an object {...}";
    case VT_LIST:
        return "a list";
    case VT_STR_OR_NULL:
        return "a string or null";
    default:
        return "a value";
    }
}

static void add_line(char *out, size_t cap, const char *sep, const char *text)
{
    size_t used = strlen(out);
    if (used) jf_append(out, cap, &used, sep);
    jf_append(out, cap, &used, text);
}

zt_status jf_check_keys(pctx *c, json_t *obj, const keyspec *ks, size_t n, int mode,
                        unknown_hint_fn hint_fn, const void *hint_arg)
{
    zt_status st = ZT_OK, s1;
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        const keyspec *spec = NULL;
        for (size_t i = 0; i < n && !spec; i++)
            if (strcmp(ks[i].name, key) == 0) spec = &ks[i];
        if (!spec) {
            const char *names[128];
            size_t nn = 0;
            for (size_t i = 0; i < n && nn < 128; i++)
                if (ks[i].kind != KEY_REFUSED && strcmp(ks[i].name, "deepspeed_notes") != 0)
                    names[nn++] = ks[i].name; /* written by zerotrain, not by users */
            const char *hint = hint_fn ? hint_fn(key, hint_arg) : NULL;
            const char *near = jf_closest(key, names, nn);
            if (mode == JF_LENIENT) {
                char path[JF_PATH_TEXT], text[JF_PATH_TEXT + 96];
                jf_path(c, key, path, sizeof(path));
                if (near)
                    snprintf(text, sizeof(text), "%s (did you mean \"%s\"?)", path, near);
                else
                    snprintf(text, sizeof(text), "%s", path);
                one_line(text);
                add_line(c->rep->ignored, sizeof(c->rep->ignored), ", ", text);
                continue;
            }
            if (hint)
                s1 = jf_fail_key(c, key, "unknown key; %s", hint);
            else if (near) {
                s1 = jf_fail_key(c, key, "unknown key; did you mean \"%s\"?", near);
                char path[JF_PATH_TEXT];
                jf_path(c, near, path, sizeof(path));
                size_t used = strlen(c->rep->suggested);
                jf_append(c->rep->suggested, sizeof(c->rep->suggested), &used, path);
                jf_append(c->rep->suggested, sizeof(c->rep->suggested), &used, "\n");
            } else {
                char list[768];
                size_t used = 0;
                list[0] = '\0';
                for (size_t i = 0; i < nn; i++) {
                    if (i) jf_append(list, sizeof(list), &used, ", ");
                    jf_append(list, sizeof(list), &used, names[i]);
                }
                s1 = jf_fail_key(c, key, "unknown key; remove it (keys allowed here: %s)", list);
            }
            if (st == ZT_OK) st = s1;
            continue;
        }
        if (jf_is_auto(v) || spec->kind == KEY_USED) continue;
        if (spec->kind == KEY_ALIAS) {
            const keyspec *of = NULL;
            for (size_t i = 0; i < n && !of; i++)
                if (strcmp(ks[i].name, spec->doc) == 0) of = &ks[i];
            if (!of || of->kind == KEY_USED) continue;
            spec = of; /* an alias of a key with no effect is checked like it */
        }
        if (spec->kind == KEY_REFUSED && !allowed_value(spec, v)) {
            char allow[64];
            allowed_text(spec, allow, sizeof(allow));
            s1 = jf_fail_key(c, key, "zerotrain does not offer this; remove it%s%s%s%s", allow,
                             spec->doc ? " (" : "", spec->doc ? spec->doc : "",
                             spec->doc ? ")" : "");
            if (st == ZT_OK) st = s1;
            continue;
        }
        if (!type_ok(spec->type, v)) {
            char got[64];
            jf_describe(v, got, sizeof(got));
            s1 = jf_fail_key(c, key, "must be %s (got %s)", type_word(spec->type), got);
            if (st == ZT_OK) st = s1;
            continue;
        }
        if (spec->kind == KEY_REFUSED || mode == JF_QUIET || is_default(v, spec->dflt)) continue;
        if (json_is_object(v) && json_is_false(json_object_get(v, "enabled"))) continue;
        char path[JF_PATH_TEXT], got[64], text[JF_PATH_TEXT + 512];
        jf_path(c, key, path, sizeof(path));
        jf_describe(v, got, sizeof(got));
        if (json_is_object(v))
            snprintf(text, sizeof(text), "%s: %s", path, spec->doc ? spec->doc : "");
        else
            snprintf(text, sizeof(text), "%s = %s: %s", path, got, spec->doc ? spec->doc : "");
        one_line(text);
        if (!strstr(c->rep->noeffect, text))
            add_line(c->rep->noeffect, sizeof(c->rep->noeffect), "\n", text);
    }
    return st;
}

const char *jf_pick_alias(pctx *c, json_t *obj, const keyspec *ks, size_t n, const char *key)
{
    const char *found = json_object_get(obj, key) ? key : NULL;
    for (size_t i = 0; i < n; i++) {
        if (ks[i].kind != KEY_ALIAS || strcmp(ks[i].doc, key) != 0) continue;
        if (!json_object_get(obj, ks[i].name)) continue;
        if (found) {
            jf_fail_key(c, ks[i].name, "is another name for \"%s\", which is also given; keep one",
                        found);
            continue;
        }
        found = ks[i].name;
    }
    return found ? found : key;
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

/* ------------------------------------------------------------------------------------------ */
/* Paths. Relative paths resolve against the job file's directory; the result is absolute and
 * lexically cleaned like Python's os.path.abspath: "//" and "." dropped, "x/.." removed. */

static bool clean_path(const char *in, char *out, size_t cap)
{
    size_t used = 0;
    const char *p = in;
    if (cap < 2) return false;
    out[0] = '\0';
    while (*p) {
        while (*p == '/')
            p++;
        const char *e = p;
        while (*e && *e != '/')
            e++;
        size_t k = (size_t)(e - p);
        if (k == 2 && p[0] == '.' && p[1] == '.') {
            while (used > 0 && out[used - 1] != '/')
                used--;
            if (used > 0) used--; /* the slash; ".." of the root is the root */
            out[used] = '\0';
        } else if (k > 0 && !(k == 1 && p[0] == '.')) {
            if (used + 1 + k + 1 > cap) return false;
            out[used++] = '/';
            memcpy(out + used, p, k);
            used += k;
            out[used] = '\0';
        }
        p = e;
    }
    if (used == 0) {
        out[0] = '/';
        out[1] = '\0';
    }
    return true;
}

/* Joins base (absolute) and p unless p is absolute. False when the result does not fit. */
bool jf_absolute_path(const char *base, const char *p, char *out, size_t cap)
{
    if (p[0] == '/') return clean_path(p, out, cap);
    char tmp[2 * ZT_PATH_MAX + 2];
    int n = snprintf(tmp, sizeof(tmp), "%s/%s", base, p);
    if (n < 0 || (size_t)n >= sizeof(tmp)) return false;
    return clean_path(tmp, out, cap);
}

static zt_status cwd_path(char *out, size_t cap, zt_err *err)
{
    if (!getcwd(out, cap)) {
        char why[128];
        strerror_r(errno, why, sizeof(why));
        return zt_err_set(
            err, ZT_ERR_IO,
            "job file: cannot read the current directory: %s; run from a directory that exists or pass an absolute base directory",
            why);
    }
    return ZT_OK;
}

/* Reads member `key` as a path and stores it resolved against base_dir. */
zt_status jf_get_path(pctx *c, json_t *obj, const char *key, const char *base_dir, char *out,
                      bool *present)
{
    char raw[ZT_PATH_MAX];
    bool given;
    zt_status st = jf_get_str(c, obj, key, raw, sizeof(raw), &given);
    if (present) *present = given;
    if (st != ZT_OK || !given) return st;
    if (!jf_absolute_path(base_dir, raw, out, ZT_PATH_MAX))
        return jf_fail_key(
            c, key,
            "path is too long once resolved against %s (at most %d bytes); use a shorter path",
            base_dir, ZT_PATH_MAX - 1);
    return ZT_OK;
}

/* Reads a whole file into a NUL-terminated buffer (caller frees with zt_free). `what` names
 * the file in messages ("job file", "DeepSpeed config"). */
zt_status jf_read_text(const char *path, const char *shown, const char *what, char **out,
                       size_t *out_len, zt_err *err)
{
    char why[128];
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        strerror_r(e, why, sizeof(why));
        return zt_err_set(err, e == ENOENT ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                          "%s: cannot open %s: %s; check the path", shown, what, why);
    }
    zt_status st = ZT_OK;
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        st = zt_err_set(err, ZT_ERR_IO,
                        "%s: is a directory, not a %s; give the path of a JSON file", shown, what);
        goto close_file;
    }
    size_t cap = 4096, len = 0;
    char *buf = zt_malloc(cap);
    if (!buf) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "%s: out of memory reading the %s", shown, what);
        goto close_file;
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= JOB_MAX_BYTES) {
                st = zt_err_set(
                    err, ZT_ERR_CONFIG,
                    "%s: the %s is larger than %u MiB; a job file is a small JSON object", shown,
                    what, JOB_MAX_BYTES >> 20);
                goto free_buf;
            }
            char *nb = zt_realloc(buf, cap * 2);
            if (!nb) {
                st = zt_err_set(err, ZT_ERR_NOMEM, "%s: out of memory reading the %s", shown, what);
                goto free_buf;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                strerror_r(errno, why, sizeof(why));
                st = zt_err_set(err, ZT_ERR_IO, "%s: cannot read %s: %s", shown, what, why);
                goto free_buf;
            }
            break;
        }
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    goto close_file;
free_buf:
    zt_free(buf);
close_file:
    fclose(f);
    return st;
}

/* jansson's parse of text, with messages "origin:line:col: text". Empty text, a duplicate
 * key (named with its path and both positions) and a root that is not an object get their
 * own messages. */
zt_status jf_load_json(const char *text, size_t len, const char *origin, const char *what,
                       json_t **out, zt_err *err)
{
    *out = NULL;
    size_t k = 0;
    while (k < len && isspace((unsigned char)text[k]))
        k++;
    if (k == len)
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "%s: the %s is empty; it must hold one JSON object {...}", origin, what);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        char path[JF_PATH_TEXT];
        zt_json_loc first, second;
        if (json_error_code(&je) == json_error_duplicate_key &&
            zt_json_find_duplicate(text, len, path, sizeof(path), &first, &second))
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "%s:%d:%d: %s: duplicate key (first at line %d, column %d); keep only one", origin,
                second.line, second.col, path, first.line, first.col);
        /* jansson says column 0 at the start of a line (e.g. at end of file); columns are
         * 1-based everywhere else. */
        zt_err_set(err, ZT_ERR_CONFIG, "%s:%d:%d: %s", origin, je.line,
                   je.column > 0 ? je.column : 1, je.text);
        if (err) one_line(err->msg);
        return ZT_ERR_CONFIG;
    }
    if (!json_is_object(root)) {
        zt_json_loc loc = zt_json_offset_loc(text, len, k);
        json_decref(root);
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "%s:%d:%d: the %s must be a JSON object {...}, not an array", origin,
                          loc.line, loc.col, what);
    }
    *out = root;
    return ZT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Key tables. */

static const keyspec job_keys[] = {
    SUP("name"),      SUP("model"),        SUP("data"),      SUP("train"),
    SUP("resources"), SUP("max_restarts"), SUP("deepspeed"), SUP("deepspeed_notes"),
};

static const keyspec model_keys[] = {
    SUP("arch"),       SUP("n_layer"),           SUP("n_head"), SUP("n_embd"), SUP("block_size"),
    SUP("vocab_size"), SUP("padded_vocab_size"), SUP("init"),   SUP("seed"),
};

static const keyspec data_keys[] = {SUP("train"), SUP("val")};

static const keyspec train_keys[] = {
    SUP("steps"),
    SUP("eval_every"),
    SUP("eval_steps"),
    SUP("checkpoint_every"),
    SUP("checkpoint_dir"),
    SUP("keep_checkpoints"),
    SUP("comm_timeout_ms"),
    SUP("max_skipped_steps"),
    SUP("resume_from"),
    SUP("batch_size"),
    SUP("micro_batch_size"),
    SUP("warmup_steps"),
    SUP("precision"),
};

static const keyspec resources_keys[] = {SUP("ranks"), SUP("ranks_per_node"), SUP("device")};

/* A DeepSpeed key written at the job's top level belongs inside "deepspeed". */
static const char *job_key_hint(const char *key, const void *arg)
{
    (void)arg;
    return zt_ds_top_key_hint(key);
}

/* ------------------------------------------------------------------------------------------ */
/* The job's own sections. Each goes on after a problem, so that one run reports them all. */

#define KEEP(expr)                                                                                 \
    do {                                                                                           \
        zt_status s_ = (expr);                                                                     \
        if (s_ != ZT_OK && st == ZT_OK) st = s_;                                                   \
    } while (0)

zt_status jf_require(pctx *c, json_t *obj, const char *key, const char *what)
{
    if (jf_member(obj, key)) return ZT_OK;
    return jf_fail_key(c, key, "missing; add it (%s)", what);
}

static bool valid_name(const char *s)
{
    if (!isalnum((unsigned char)s[0])) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.') return false;
    return true;
}

/* The default name: the job file's name without its extension, else "job". */
static void default_name(const zt_job *job, char *out, size_t cap)
{
    const char *base = strrchr(job->job_path, '/');
    base = base ? base + 1 : job->job_path;
    size_t k = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base) k = (size_t)(dot - base);
    if (k == 0 || k >= cap) {
        snprintf(out, cap, "job");
        return;
    }
    memcpy(out, base, k);
    out[k] = '\0';
    if (!valid_name(out)) snprintf(out, cap, "job");
}

static zt_status parse_name(pctx *c, json_t *root, zt_job *job)
{
    bool present;
    zt_status st = jf_get_str(c, root, "name", job->name, sizeof(job->name), &present);
    if (st != ZT_OK || !present) {
        default_name(job, job->name, sizeof(job->name));
        return st;
    }
    if (!valid_name(job->name)) {
        st = jf_fail_key(
            c, "name",
            "must start with a letter or digit and hold only letters, digits, '-', '_' and '.' (got \"%s\")",
            job->name);
        default_name(job, job->name, sizeof(job->name));
    }
    return st;
}

static zt_status parse_model(pctx *c, json_t *root, zt_job *job)
{
    zt_model_cfg *m = &job->model;
    json_t *o;
    zt_status st = jf_get_obj(c, root, "model", &o);
    if (st != ZT_OK) return st;
    if (!o)
        return jf_fail_key(
            c, "model",
            "missing; add the model, e.g. \"model\": {\"n_layer\": 4, \"n_head\": 4, \"n_embd\": 128, \"block_size\": 128, \"vocab_size\": 256}");
    jf_push(c, "model");
    KEEP(jf_check_keys(c, o, model_keys, NKEYS(model_keys), JF_STRICT, NULL, NULL));
    snprintf(m->arch, sizeof(m->arch), "gpt2");
    KEEP(jf_get_str(c, o, "arch", m->arch, sizeof(m->arch), NULL));
    if (strcmp(m->arch, "gpt2") != 0)
        KEEP(jf_fail_key(c, "arch",
                         "unsupported architecture \"%s\"; zerotrain implements \"gpt2\" only",
                         m->arch));
    static const char *const required[] = {"n_layer", "n_head", "n_embd", "block_size",
                                           "vocab_size"};
    for (size_t i = 0; i < NKEYS(required); i++)
        KEEP(jf_require(c, o, required[i], "a positive integer"));
    KEEP(jf_get_int(c, o, "n_layer", 1, INT_MAX, &m->n_layer));
    KEEP(jf_get_int(c, o, "n_head", 1, INT_MAX, &m->n_head));
    KEEP(jf_get_int(c, o, "n_embd", 1, INT_MAX, &m->n_embd));
    if (m->n_head > 0 && m->n_embd > 0 && m->n_embd % m->n_head != 0)
        KEEP(jf_fail_key(c, "n_head",
                         "must be a positive integer that divides n_embd (got %d for n_embd %d)",
                         m->n_head, m->n_embd));
    KEEP(jf_get_int(c, o, "block_size", 1, INT_MAX, &m->block_size));
    KEEP(jf_get_int(c, o, "vocab_size", 1, 65536, &m->vocab_size));
    /* V rounded up to a multiple of 128, computed in 64 bits: V <= 65536 so it fits. */
    m->padded_vocab_size = (int)(((int64_t)m->vocab_size + 127) / 128 * 128);
    KEEP(jf_get_int(c, o, "padded_vocab_size", 1, INT_MAX, &m->padded_vocab_size));
    if (m->padded_vocab_size < m->vocab_size)
        KEEP(jf_fail_key(
            c, "padded_vocab_size",
            "must be >= vocab_size (got %d for vocab_size %d); leave it out to get a multiple of 128",
            m->padded_vocab_size, m->vocab_size));
    char init[ZT_PATH_MAX];
    bool present = false;
    zt_status s_init = jf_get_str(c, o, "init", init, sizeof(init), &present);
    KEEP(s_init);
    m->init_random = !present || strcmp(init, "random") == 0;
    if (!m->init_random) KEEP(jf_get_path(c, o, "init", job->base_dir, m->init_path, NULL));
    int64_t seed = 1337;
    KEEP(jf_get_i64(c, o, "seed", 0, INT64_MAX, &seed));
    m->seed = (uint64_t)seed;
    jf_pop(c);
    return st;
}

static zt_status parse_data(pctx *c, json_t *root, zt_job *job)
{
    json_t *o;
    zt_status st = jf_get_obj(c, root, "data", &o);
    if (st != ZT_OK) return st;
    if (!o)
        return jf_fail_key(
            c, "data",
            "missing; add the token shards, e.g. \"data\": {\"train\": \"data/train_*.bin\"}");
    jf_push(c, "data");
    KEEP(jf_check_keys(c, o, data_keys, NKEYS(data_keys), JF_STRICT, NULL, NULL));
    KEEP(jf_require(c, o, "train", "a glob of training shards, e.g. \"data/train_*.bin\""));
    KEEP(jf_get_path(c, o, "train", job->base_dir, job->data.train, NULL));
    KEEP(jf_get_path(c, o, "val", job->base_dir, job->data.val, NULL));
    jf_pop(c);
    return st;
}

static zt_status parse_precision(pctx *c, json_t *o, zt_train_cfg *t)
{
    char p[32];
    bool present = false;
    zt_status st = jf_get_str(c, o, "precision", p, sizeof(p), &present);
    if (st != ZT_OK || !present) return st;
    if (strcmp(p, "fp32") == 0)
        t->precision = ZT_PREC_FP32;
    else if (strcmp(p, "bf16") == 0)
        t->precision = ZT_PREC_BF16;
    else if (strcmp(p, "fp16") == 0)
        t->precision = ZT_PREC_FP16;
    else
        return jf_fail_key(c, "precision", "must be \"fp32\", \"bf16\" or \"fp16\" (got \"%s\")",
                           p);
    t->precision_given = true;
    return ZT_OK;
}

static zt_status parse_train(pctx *c, json_t *root, zt_job *job)
{
    zt_train_cfg *t = &job->train;
    t->eval_every = 0;
    t->eval_steps = 10;
    t->checkpoint_every = 0;
    t->keep_checkpoints = 3;
    t->comm_timeout_ms = ZT_JOB_DEFAULT_COMM_TIMEOUT_MS;
    t->max_skipped_steps = ZT_JOB_DEFAULT_MAX_SKIPPED_STEPS;
    t->warmup_steps = -1;
    json_t *o;
    zt_status st = jf_get_obj(c, root, "train", &o);
    if (st != ZT_OK) return st;
    if (!o) return jf_fail_key(c, "train", "missing; add at least \"train\": {\"steps\": N}");
    jf_push(c, "train");
    KEEP(jf_check_keys(c, o, train_keys, NKEYS(train_keys), JF_STRICT, NULL, NULL));
    KEEP(jf_require(c, o, "steps", "the number of optimizer steps, a positive integer"));
    KEEP(jf_get_i64(c, o, "steps", 1, INT64_MAX, &t->steps));
    KEEP(jf_get_i64(c, o, "eval_every", 0, INT64_MAX, &t->eval_every));
    KEEP(jf_get_i64(c, o, "eval_steps", 1, INT64_MAX, &t->eval_steps));
    KEEP(jf_get_i64(c, o, "checkpoint_every", 0, INT64_MAX, &t->checkpoint_every));
    KEEP(jf_get_int(c, o, "keep_checkpoints", 0, INT_MAX, &t->keep_checkpoints));
    KEEP(jf_get_int(c, o, "comm_timeout_ms", ZT_JOB_MIN_COMM_TIMEOUT_MS, ZT_JOB_MAX_COMM_TIMEOUT_MS,
                    &t->comm_timeout_ms));
    KEEP(jf_get_i64(c, o, "max_skipped_steps", 0, INT64_MAX, &t->max_skipped_steps));
    json_t *rf = jf_member(o, "resume_from");
    if (json_is_string(rf) && !json_string_value(rf)[0])
        KEEP(jf_fail_key(c, "resume_from",
                         "is empty; give a checkpoint (a step_* directory or a checkpoint directory) or remove the key"));
    else
        KEEP(jf_get_path(c, o, "resume_from", job->base_dir, t->resume_from, NULL));
    KEEP(jf_get_i64(c, o, "batch_size", 1, INT_MAX, &t->batch_size));
    KEEP(jf_get_i64(c, o, "micro_batch_size", 1, INT_MAX, &t->micro_batch_size));
    KEEP(jf_get_i64(c, o, "warmup_steps", 0, INT64_MAX, &t->warmup_steps));
    KEEP(parse_precision(c, o, t));
    bool present = false;
    KEEP(jf_get_path(c, o, "checkpoint_dir", job->base_dir, t->checkpoint_dir, &present));
    if (!present) {
        char rel[ZT_NAME_MAX + 8];
        snprintf(rel, sizeof(rel), "ckpt/%s", job->name);
        if (!jf_absolute_path(job->base_dir, rel, t->checkpoint_dir, sizeof(t->checkpoint_dir)))
            KEEP(
                jf_fail_here(c, ZT_ERR_CONFIG,
                             "the default checkpoint_dir %s/%s is too long; set \"checkpoint_dir\"",
                             job->base_dir, rel));
    }
    jf_pop(c);
    return st;
}

static zt_status parse_resources(pctx *c, json_t *root, zt_job *job)
{
    zt_resources_cfg *r = &job->resources;
    r->ranks = 1;
    r->device = ZT_DEVICE_CPU;
    json_t *o;
    zt_status st = jf_get_obj(c, root, "resources", &o);
    if (st != ZT_OK || !o) {
        r->ranks_per_node = r->ranks;
        return st;
    }
    jf_push(c, "resources");
    KEEP(jf_check_keys(c, o, resources_keys, NKEYS(resources_keys), JF_STRICT, NULL, NULL));
    KEEP(jf_get_int(c, o, "ranks", 1, INT_MAX, &r->ranks));
    r->ranks_per_node = r->ranks;
    KEEP(jf_get_int(c, o, "ranks_per_node", 1, INT_MAX, &r->ranks_per_node));
    if (r->ranks_per_node > r->ranks)
        KEEP(jf_fail_key(c, "ranks_per_node", "must be at most ranks (got %d for ranks %d)",
                         r->ranks_per_node, r->ranks));
    char dev[64];
    bool present = false;
    KEEP(jf_get_str(c, o, "device", dev, sizeof(dev), &present));
    if (present) {
        if (strcmp(dev, "cpu") == 0)
            r->device = ZT_DEVICE_CPU;
        else if (strcmp(dev, "cuda") == 0)
            r->device = ZT_DEVICE_CUDA;
        else
            KEEP(jf_fail_key(c, "device", "must be \"cpu\" or \"cuda\" (got \"%s\")", dev));
    }
    jf_pop(c);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points. */

static int problem_order(const void *a, const void *b)
{
    const jf_problem *p = a, *q = b;
    if (p->origin != q->origin) return p->origin - q->origin;
    /* problems without a position go after those of their file with one */
    if ((p->line == 0) != (q->line == 0)) return p->line == 0 ? 1 : -1;
    if (p->line != q->line) return p->line - q->line;
    if (p->col != q->col) return p->col - q->col;
    return p->seq - q->seq;
}

/* err = every problem of rep, in file order, one per line. */
static zt_status report_problems(jf_report *rep, zt_err *err)
{
    qsort(rep->problems, rep->nproblems, sizeof(rep->problems[0]), problem_order);
    zt_status code = rep->problems[0].code;
    if (!err) return code;
    char *out = err->msg;
    size_t cap = sizeof(err->msg), used = 0;
    out[0] = '\0';
    size_t shown = 0;
    for (size_t i = 0; i < rep->nproblems; i++) {
        const char *m = rep->problems[i].msg;
        /* keep room for the count of what does not fit */
        if (used + strlen(m) + 2 > cap - 64) break;
        if (i) jf_append(out, cap, &used, "\n");
        jf_append(out, cap, &used, m);
        shown++;
    }
    size_t rest = rep->nproblems - shown + rep->dropped;
    if (rest) {
        char more[64];
        snprintf(more, sizeof(more), "\n... and %zu more problem%s", rest, rest == 1 ? "" : "s");
        jf_append(out, cap, &used, more);
    }
    err->status = code;
    return code;
}

/* Parses text into job, whose job_path and base_dir the caller has set. */
static zt_status parse_job(zt_job *job, const char *text, size_t len, const char *origin,
                           bool no_files, zt_err *err)
{
    json_t *root;
    zt_status st = jf_load_json(text, len, origin, "job file", &root, err);
    if (st != ZT_OK) return st;
    jf_report *rep = zt_calloc(1, sizeof(*rep));
    if (!rep) {
        json_decref(root);
        return zt_err_set(err, ZT_ERR_NOMEM, "%s: out of memory while reading the job file",
                          origin);
    }
    pctx c = {.origin = origin,
              .origin_index = 0,
              .text = text,
              .len = len,
              .rep = rep,
              .no_files = no_files};
    KEEP(jf_check_keys(&c, root, job_keys, NKEYS(job_keys), JF_STRICT, job_key_hint, NULL));
    KEEP(parse_name(&c, root, job));
    KEEP(parse_model(&c, root, job));
    KEEP(parse_data(&c, root, job));
    KEEP(parse_train(&c, root, job));
    KEEP(parse_resources(&c, root, job));
    job->max_restarts = 0;
    KEEP(jf_get_int(&c, root, "max_restarts", 0, INT_MAX, &job->max_restarts));
    KEEP(zt_ds_parse(&c, root, job));
    if (rep->nproblems || rep->dropped) {
        st = report_problems(rep, err);
    } else {
        /* a resolved job (zt_job_to_json) carries the summary of the config it came from */
        zt_ds_notes_build(rep, job);
        json_t *n = json_object_get(root, "deepspeed_notes");
        if (n && !json_is_string(n)) {
            char got[64];
            jf_describe(n, got, sizeof(got));
            jf_fail_key(&c, "deepspeed_notes", "must be a string (got %s)", got);
            st = report_problems(rep, err);
        } else if (n) {
            memset(job->ds.notes, 0, sizeof(job->ds.notes));
            size_t k = json_string_length(n);
            if (k >= sizeof(job->ds.notes)) k = sizeof(job->ds.notes) - 1;
            memcpy(job->ds.notes, json_string_value(n), k);
        }
    }
    zt_free(rep);
    json_decref(root);
    return st;
}

static zt_status set_base_dir(zt_job *job, const char *base_dir, zt_err *err)
{
    char cwd[ZT_PATH_MAX] = "/";
    if (!base_dir || base_dir[0] != '/') {
        zt_status st = cwd_path(cwd, sizeof(cwd), err);
        if (st != ZT_OK) return st;
    }
    bool ok = base_dir ? jf_absolute_path(cwd, base_dir, job->base_dir, sizeof(job->base_dir))
                       : clean_path(cwd, job->base_dir, sizeof(job->base_dir));
    if (!ok)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "job file: base directory %s is longer than %d bytes; use a shorter path",
                          base_dir ? base_dir : cwd, ZT_PATH_MAX - 1);
    return ZT_OK;
}

static zt_status parse_text(zt_job *job, const char *text, const char *origin,
                            const char *base_dir, bool no_files, zt_err *err)
{
    if (!job || !text)
        return zt_err_set(err, ZT_ERR_INVALID, "zt_job_parse: job and text must not be NULL");
    memset(job, 0, sizeof(*job));
    zt_status st = set_base_dir(job, base_dir, err);
    if (st == ZT_OK)
        st = parse_job(job, text, strlen(text), origin ? origin : "job", no_files, err);
    if (st != ZT_OK) memset(job, 0, sizeof(*job));
    return st;
}

zt_status zt_job_parse(zt_job *job, const char *text, const char *origin, const char *base_dir,
                       zt_err *err)
{
    return parse_text(job, text, origin, base_dir, false, err);
}

zt_status zt_job_parse_inline(zt_job *job, const char *text, const char *origin,
                              const char *base_dir, zt_err *err)
{
    return parse_text(job, text, origin, base_dir, true, err);
}

zt_status zt_job_load(zt_job *job, const char *path, zt_err *err)
{
    if (!job || !path || !path[0])
        return zt_err_set(err, ZT_ERR_INVALID, "zt_job_load: give the path of a job file");
    memset(job, 0, sizeof(*job));
    char *text = NULL;
    size_t len = 0;
    zt_status st = jf_read_text(path, path, "job file", &text, &len, err);
    if (st != ZT_OK) return st;
    /* a UTF-8 byte order mark (some Windows editors write one) is no part of the JSON */
    size_t bom = len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
    if (bom)
        ZT_WARN(
            "jobfile",
            "%s: skipped the UTF-8 byte order mark at the start of the job file; save it without one to drop this note",
            path);
    size_t k = bom;
    while (k < len && isspace((unsigned char)text[k]))
        k++;
    if (k == len && len > bom) {
        zt_free(text);
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s: the job file holds only whitespace; it must hold one JSON object {...}", path);
    }
    char cwd[ZT_PATH_MAX] = "/";
    if (path[0] != '/') st = cwd_path(cwd, sizeof(cwd), err);
    if (st == ZT_OK && !jf_absolute_path(cwd, path, job->job_path, sizeof(job->job_path)))
        st = zt_err_set(
            err, ZT_ERR_INVALID,
            "%s: the absolute path of the job file is longer than %d bytes; move it to a shorter path",
            path, ZT_PATH_MAX - 1);
    if (st == ZT_OK) {
        /* base_dir is still all zeros: copy only the directory part, so no bytes of the
         * file name linger after its NUL (parsed jobs compare equal with memcmp). */
        const char *slash = strrchr(job->job_path, '/');
        size_t k = slash == job->job_path ? 1 : (size_t)(slash - job->job_path);
        memcpy(job->base_dir, job->job_path, k);
        st = parse_job(job, text + bom, len - bom, path, false, err);
    }
    zt_free(text);
    if (st != ZT_OK) memset(job, 0, sizeof(*job));
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* The batch triad (deepspeed-semantics.md §1.1). */

/* a * b, or -1 when it does not fit int64_t (a, b >= 0). */
static int64_t mul_or_neg(int64_t a, int64_t b)
{
    if (a != 0 && b > INT64_MAX / a) return -1;
    return a * b;
}

zt_status zt_job_resolve_batch(zt_job *job, int world_size, zt_err *err)
{
    if (!job) return zt_err_set(err, ZT_ERR_INVALID, "zt_job_resolve_batch: job must not be NULL");
    if (world_size < 1)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "deepspeed: the world size must be at least 1 (got %d)", world_size);
    zt_ds_cfg *d = &job->ds;
    int64_t ws = world_size;
    int64_t tb = d->given_train_batch_size, mb = d->given_micro_batch, gas = d->given_grad_accum;
    /* an "auto" micro batch counts as given: the planner's pick, or 1 until it has picked */
    if (!mb && d->micro_auto) mb = d->micro_picked > 0 ? d->micro_picked : 1;
    if (tb < 0 || mb < 0 || gas < 0)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "deepspeed: given batch sizes must not be negative (train_batch_size %lld, train_micro_batch_size_per_gpu %lld, gradient_accumulation_steps %lld)",
            (long long)tb, (long long)mb, (long long)gas);
    bool dtb = false, dmb = false, dgas = false; /* derived, not given */
    const char *advice =
        "make train_batch_size = micro * accumulation * ranks, or give only two of the three";
    char buf[160];
    if (tb && mb && gas) {
    } else if (tb && mb) {
        gas = tb / mb / ws;
        dgas = true;
        snprintf(
            buf, sizeof(buf),
            "train_batch_size must be a positive multiple of train_micro_batch_size_per_gpu * ranks = %lld",
            (long long)mul_or_neg(mb, ws));
        advice = buf;
    } else if (tb && gas) {
        mb = tb / ws / gas;
        dmb = true;
        snprintf(
            buf, sizeof(buf),
            "train_batch_size must be a positive multiple of gradient_accumulation_steps * ranks = %lld",
            (long long)mul_or_neg(gas, ws));
        advice = buf;
    } else if (mb && gas) {
        tb = mul_or_neg(mul_or_neg(mb, gas), ws);
        dtb = true;
    } else if (tb) {
        gas = 1;
        mb = tb / ws;
        dgas = dmb = true;
        snprintf(buf, sizeof(buf), "train_batch_size must be a positive multiple of ranks %lld",
                 (long long)ws);
        advice = buf;
    } else if (mb) {
        gas = 1;
        tb = mul_or_neg(mb, ws);
        dtb = dgas = true;
    } else {
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "deepspeed: give train_batch_size or train_micro_batch_size_per_gpu (DeepSpeed: \"Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided\"); e.g. \"train_micro_batch_size_per_gpu\": 4");
    }
    int64_t prod = mul_or_neg(mul_or_neg(mb, gas), ws);
    if (tb <= 0 || mb <= 0 || gas <= 0 || prod < 0 || tb != prod) {
        const char *mark = " (derived)";
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "deepspeed: train_batch_size %lld%s != train_micro_batch_size_per_gpu %lld%s * gradient_accumulation_steps %lld%s * ranks %lld; %s",
            (long long)tb, dtb ? mark : "", (long long)mb, dmb ? mark : "", (long long)gas,
            dgas ? mark : "", (long long)ws, advice);
    }
    d->train_batch_size = tb;
    d->micro_batch = mb;
    d->grad_accum = gas;
    d->world_size = world_size;
    return ZT_OK;
}
