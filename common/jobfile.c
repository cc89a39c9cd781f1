/* zerotrain: parses and validates the job file and the DeepSpeed config inside it
 * (DESIGN.md "The job file", deepspeed-semantics.md §1) into struct zt_job. Every error
 * names the file, the JSON line and column (found with json_locate.c), the key path, what is
 * wrong and what to do. Serialisation back to JSON lives in jobfile_write.c. */
#define _POSIX_C_SOURCE 200809L
#include "jobfile.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "json_locate.h"

#define JOB_MAX_BYTES (16u << 20) /* a job file larger than this is surely a mistake */
#define CTX_DEPTH 8               /* deepest key path: deepspeed.optimizer.params.betas[1] */
#define PATH_TEXT_MAX 256

/* ------------------------------------------------------------------------------------------ */
/* Parse context: the text being read (for positions) and the key path of the current object. */

typedef struct pctx {
    const char *origin; /* the name shown in messages: a file path or "job 17" */
    const char *text;
    size_t len;
    zt_json_seg seg[CTX_DEPTH];
    size_t depth;
    zt_err *err;
} pctx;

static void push(pctx *c, const char *key)
{
    if (c->depth < CTX_DEPTH) c->seg[c->depth] = (zt_json_seg){key, 0};
    c->depth++;
}

static void pop(pctx *c)
{
    c->depth--;
}

static void append(char *out, size_t cap, size_t *used, const char *s)
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
            if (d > 0) append(out, cap, &used, ".");
            append(out, cap, &used, segs[d].key);
        } else {
            char idx[32];
            snprintf(idx, sizeof(idx), "[%ld]", segs[d].index);
            append(out, cap, &used, idx);
        }
    }
}

/* Keeps a message on one line: control characters from keys and values become '?'. */
static zt_status one_line(zt_err *err, zt_status st)
{
    if (err)
        for (char *p = err->msg; *p; p++)
            if ((unsigned char)*p < 0x20) *p = '?';
    return st;
}

/* Sets the error for member `key` (or element `index` when key is NULL and index >= 0) of the
 * current object, or for the current object itself, as "origin:line:col: path: message". The
 * position is that of the member's key; when the path is not in the text (a missing key) it is
 * that of the nearest enclosing member. */
static zt_status failv(pctx *c, zt_status st, const char *key, long index, const char *fmt,
                       va_list ap)
{
    zt_json_seg segs[CTX_DEPTH + 1];
    size_t n = c->depth < CTX_DEPTH ? c->depth : CTX_DEPTH;
    memcpy(segs, c->seg, n * sizeof(segs[0]));
    if (key)
        segs[n++] = (zt_json_seg){key, 0};
    else if (index >= 0)
        segs[n++] = (zt_json_seg){NULL, index};
    char path[PATH_TEXT_MAX];
    path_text(segs, n, path, sizeof(path));
    char what[ZT_ERRMSG_MAX];
    vsnprintf(what, sizeof(what), fmt, ap);
    zt_json_loc loc = {0, 0, 0};
    bool have = false;
    for (size_t d = n + 1; d-- > 0 && !have;)
        have = zt_json_locate(c->text, c->len, segs, d, &loc, NULL);
    const char *sep = path[0] ? ": " : "";
    if (have)
        zt_err_set(c->err, st, "%s:%d:%d: %s%s%s", c->origin, loc.line, loc.col, path, sep, what);
    else
        zt_err_set(c->err, st, "%s: %s%s%s", c->origin, path, sep, what);
    return one_line(c->err, st);
}

static zt_status fail_key(pctx *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static zt_status fail_key(pctx *c, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_status st = failv(c, ZT_ERR_CONFIG, key, -1, fmt, ap);
    va_end(ap);
    return st;
}

static zt_status fail_index(pctx *c, long index, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static zt_status fail_index(pctx *c, long index, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_status st = failv(c, ZT_ERR_CONFIG, NULL, index, fmt, ap);
    va_end(ap);
    return st;
}

static zt_status fail_key_code(pctx *c, zt_status code, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static zt_status fail_key_code(pctx *c, zt_status code, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_status st = failv(c, code, key, -1, fmt, ap);
    va_end(ap);
    return st;
}

static zt_status fail_here(pctx *c, zt_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static zt_status fail_here(pctx *c, zt_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_status st = failv(c, code, NULL, -1, fmt, ap);
    va_end(ap);
    return st;
}

/* Shortest decimal text that reads back as exactly d. */
static void format_double(double d, char *out, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, d);
        if (strtod(out, NULL) == d) return;
    }
}

/* A short description of a JSON value for "(got ...)" in messages. */
static void describe(const json_t *v, char *out, size_t cap)
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
        format_double(json_real_value(v), out, cap);
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

static bool is_auto(const json_t *v)
{
    return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

static json_t *member(json_t *obj, const char *key)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    return v && !is_auto(v) ? v : NULL;
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

static zt_status get_int_max(pctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi,
                             int64_t type_max, int64_t *out)
{
    json_t *v = member(obj, key);
    if (!v) return ZT_OK;
    char rule[96], got[64];
    int_rule(lo, hi, type_max, rule, sizeof(rule));
    describe(v, got, sizeof(got));
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        /* 2^63 is exactly representable; anything >= it does not fit int64_t. */
        if (d != floor(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
            return fail_key(c, key, "must be %s (got %s)", rule, got);
        x = (int64_t)d;
    } else {
        return fail_key(c, key, "must be %s (got %s)", rule, got);
    }
    if (x < lo || x > hi) return fail_key(c, key, "must be %s (got %s)", rule, got);
    *out = x;
    return ZT_OK;
}

static zt_status get_i64(pctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi,
                         int64_t *out)
{
    return get_int_max(c, obj, key, lo, hi, INT64_MAX, out);
}

static zt_status get_int(pctx *c, json_t *obj, const char *key, int lo, int hi, int *out)
{
    int64_t x = *out;
    zt_status st = get_int_max(c, obj, key, lo, hi, INT_MAX, &x);
    if (st == ZT_OK) *out = (int)x;
    return st;
}

enum {
    NUM_GE = 0,      /* x >= lo */
    NUM_GT = 1,      /* x > lo */
    NUM_RANGE = 2,   /* lo <= x <= hi */
    NUM_RANGE_HO = 3 /* lo <= x < hi */
};

static zt_status check_num(pctx *c, const char *key, long index, double x, double lo, double hi,
                           int rule, const char *got)
{
    bool ok;
    char lo_s[32], hi_s[32], want[96];
    format_double(lo, lo_s, sizeof(lo_s));
    format_double(hi, hi_s, sizeof(hi_s));
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
    if (key) return fail_key(c, key, "must be %s (got %s)", want, got);
    return fail_index(c, index, "must be %s (got %s)", want, got);
}

static zt_status get_num(pctx *c, json_t *obj, const char *key, double lo, double hi, int rule,
                         double *out)
{
    json_t *v = member(obj, key);
    if (!v) return ZT_OK;
    char got[64];
    describe(v, got, sizeof(got));
    if (!json_is_number(v)) return fail_key(c, key, "must be a number (got %s)", got);
    double x = json_number_value(v);
    zt_status st = check_num(c, key, -1, x, lo, hi, rule, got);
    if (st == ZT_OK) *out = x;
    return st;
}

static zt_status get_bool(pctx *c, json_t *obj, const char *key, bool *out)
{
    json_t *v = member(obj, key);
    if (!v) return ZT_OK;
    if (!json_is_boolean(v)) {
        char got[64];
        describe(v, got, sizeof(got));
        return fail_key(c, key, "must be true or false (got %s)", got);
    }
    *out = json_is_true(v);
    return ZT_OK;
}

/* A non-empty string that fits in cap bytes. *present tells whether it was given. */
static zt_status get_str(pctx *c, json_t *obj, const char *key, char *out, size_t cap,
                         bool *present)
{
    json_t *v = member(obj, key);
    if (present) *present = v != NULL;
    if (!v) return ZT_OK;
    char got[64];
    describe(v, got, sizeof(got));
    if (!json_is_string(v)) return fail_key(c, key, "must be a string (got %s)", got);
    size_t k = json_string_length(v);
    if (k == 0) return fail_key(c, key, "must be a non-empty string");
    if (k >= cap) return fail_key(c, key, "is too long (%zu bytes, at most %zu)", k, cap - 1);
    if (strlen(json_string_value(v)) != k)
        return fail_key(c, key, "must not contain NUL characters");
    memcpy(out, json_string_value(v), k + 1);
    return ZT_OK;
}

/* Member `key` as an object: *sub is NULL when it is absent or "auto". */
static zt_status get_obj(pctx *c, json_t *obj, const char *key, json_t **sub)
{
    json_t *v = member(obj, key);
    *sub = NULL;
    if (!v) return ZT_OK;
    if (!json_is_object(v)) {
        char got[64];
        describe(v, got, sizeof(got));
        return fail_key(c, key, "must be an object {...} (got %s)", got);
    }
    *sub = v;
    return ZT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Key tables: which keys an object may hold. Unknown keys get the closest known key
 * suggested; known DeepSpeed keys that zerotrain does not implement are errors unless they
 * hold the value that means "off" (allow). */

enum { KEY_OK = 0, KEY_UNSUPPORTED = 1 };
enum {
    ALLOW_FALSE = 1 << 0,
    ALLOW_TRUE = 1 << 1,
    ALLOW_NULL = 1 << 2,
    ALLOW_NUM = 1 << 3,      /* the number in keyspec.num */
    ALLOW_DISABLED = 1 << 4, /* an object whose "enabled" is false */
};

typedef struct keyspec {
    const char *name;
    int kind;
    int allow;
    double num;
    const char *hint; /* what to do instead, for unsupported keys */
} keyspec;

#define SUP(name)                                                                                  \
    {                                                                                              \
        name, KEY_OK, 0, 0, NULL                                                                   \
    }
#define UNSUP(name, allow, num, hint)                                                              \
    {                                                                                              \
        name, KEY_UNSUPPORTED, allow, num, hint                                                    \
    }
#define NKEYS(t) (sizeof(t) / sizeof((t)[0]))

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
static const char *closest(const char *key, const char *const *names, size_t n)
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

static bool allowed_value(const keyspec *ks, const json_t *v)
{
    if ((ks->allow & ALLOW_FALSE) && json_is_false(v)) return true;
    if ((ks->allow & ALLOW_TRUE) && json_is_true(v)) return true;
    if ((ks->allow & ALLOW_NULL) && json_is_null(v)) return true;
    if ((ks->allow & ALLOW_NUM) && json_is_number(v) && json_number_value(v) == ks->num)
        return true;
    if ((ks->allow & ALLOW_DISABLED) && json_is_object(v)) {
        json_t *en = json_object_get(v, "enabled");
        return en && json_is_false(en);
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
        format_double(ks->num, num, sizeof(num));
        snprintf(out, cap, " or set it to %s", num);
    } else if (ks->allow & ALLOW_NULL)
        snprintf(out, cap, " or set it to null");
}

/* Optional extra advice for an unknown key (e.g. "it belongs inside deepspeed"). */
typedef const char *(*unknown_hint_fn)(const char *key, const void *arg);

static zt_status check_keys(pctx *c, json_t *obj, const keyspec *ks, size_t n,
                            unknown_hint_fn hint_fn, const void *hint_arg)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        const keyspec *spec = NULL;
        for (size_t i = 0; i < n && !spec; i++)
            if (strcmp(ks[i].name, key) == 0) spec = &ks[i];
        if (!spec) {
            const char *names[64];
            size_t nn = 0;
            for (size_t i = 0; i < n && nn < 64; i++)
                if (ks[i].kind == KEY_OK) names[nn++] = ks[i].name;
            const char *hint = hint_fn ? hint_fn(key, hint_arg) : NULL;
            if (hint) return fail_key(c, key, "unknown key; %s", hint);
            const char *near = closest(key, names, nn);
            if (near) return fail_key(c, key, "unknown key; did you mean \"%s\"?", near);
            char list[512];
            size_t used = 0;
            list[0] = '\0';
            for (size_t i = 0; i < nn; i++) {
                if (i) append(list, sizeof(list), &used, ", ");
                append(list, sizeof(list), &used, names[i]);
            }
            return fail_key(c, key, "unknown key; remove it (keys allowed here: %s)", list);
        }
        if (spec->kind == KEY_UNSUPPORTED && !is_auto(v) && !allowed_value(spec, v)) {
            char allow[64];
            allowed_text(spec, allow, sizeof(allow));
            return fail_key(
                c, key,
                "\"%s\" is a DeepSpeed key that zerotrain does not support; remove it%s%s%s", key,
                allow, spec->hint ? "; " : "", spec->hint ? spec->hint : "");
        }
    }
    return ZT_OK;
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
static bool absolute_path(const char *base, const char *p, char *out, size_t cap)
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
static zt_status get_path(pctx *c, json_t *obj, const char *key, const char *base_dir, char *out,
                          bool *present)
{
    char raw[ZT_PATH_MAX];
    bool given;
    zt_status st = get_str(c, obj, key, raw, sizeof(raw), &given);
    if (present) *present = given;
    if (st != ZT_OK || !given) return st;
    if (!absolute_path(base_dir, raw, out, ZT_PATH_MAX))
        return fail_key(
            c, key,
            "path is too long once resolved against %s (at most %d bytes); use a shorter path",
            base_dir, ZT_PATH_MAX - 1);
    return ZT_OK;
}

/* Reads a whole file into a NUL-terminated buffer (caller frees with zt_free). `what` names
 * the file in messages ("job file", "DeepSpeed config"). */
static zt_status read_text(const char *path, const char *shown, const char *what, char **out,
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
static zt_status load_json(const char *text, size_t len, const char *origin, const char *what,
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
        char path[PATH_TEXT_MAX];
        zt_json_loc first, second;
        if (json_error_code(&je) == json_error_duplicate_key &&
            zt_json_find_duplicate(text, len, path, sizeof(path), &first, &second))
            return one_line(
                err, zt_err_set(
                         err, ZT_ERR_CONFIG,
                         "%s:%d:%d: %s: duplicate key (first at line %d, column %d); keep only one",
                         origin, second.line, second.col, path, first.line, first.col));
        /* jansson says column 0 at the start of a line (e.g. at end of file); columns are
         * 1-based everywhere else. */
        zt_err_set(err, ZT_ERR_CONFIG, "%s:%d:%d: %s", origin, je.line,
                   je.column > 0 ? je.column : 1, je.text);
        return one_line(err, ZT_ERR_CONFIG);
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
    SUP("resources"), SUP("max_restarts"), SUP("deepspeed"),
};

static const keyspec model_keys[] = {
    SUP("arch"),       SUP("n_layer"),           SUP("n_head"), SUP("n_embd"), SUP("block_size"),
    SUP("vocab_size"), SUP("padded_vocab_size"), SUP("init"),   SUP("seed"),
};

static const keyspec data_keys[] = {SUP("train"), SUP("val")};

static const keyspec train_keys[] = {
    SUP("steps"),          SUP("eval_every"),       SUP("eval_steps"), SUP("checkpoint_every"),
    SUP("checkpoint_dir"), SUP("keep_checkpoints"), SUP("comm_timeout_ms"),
};

static const keyspec resources_keys[] = {SUP("ranks"), SUP("ranks_per_node"), SUP("device")};

static const keyspec ds_keys[] = {
    SUP("train_batch_size"),
    SUP("train_micro_batch_size_per_gpu"),
    SUP("gradient_accumulation_steps"),
    SUP("optimizer"),
    SUP("scheduler"),
    SUP("gradient_clipping"),
    SUP("fp16"),
    SUP("bf16"),
    SUP("bfloat16"),
    SUP("zero_optimization"),
    SUP("activation_checkpointing"),
    SUP("data_types"),
    SUP("steps_per_print"),
    /* reporting switches: harmless when off */
    UNSUP("wall_clock_breakdown", ALLOW_FALSE, 0, NULL),
    UNSUP("memory_breakdown", ALLOW_FALSE, 0, NULL),
    UNSUP("dump_state", ALLOW_FALSE, 0, NULL),
    UNSUP("prescale_gradients", ALLOW_FALSE, 0, NULL),
    UNSUP("sparse_gradients", ALLOW_FALSE, 0, NULL),
    UNSUP("disable_allgather", ALLOW_FALSE, 0, NULL),
    UNSUP("dataloader_drop_last", ALLOW_FALSE, 0, NULL),
    UNSUP("zero_allow_untested_optimizer", ALLOW_FALSE, 0,
          "zerotrain implements Adam and AdamW only"),
    UNSUP("tensorboard", ALLOW_DISABLED, 0,
          "zerotrain reports metrics to its coordinator and /metrics"),
    UNSUP("wandb", ALLOW_DISABLED, 0, "zerotrain reports metrics to its coordinator and /metrics"),
    UNSUP("csv_monitor", ALLOW_DISABLED, 0,
          "zerotrain reports metrics to its coordinator and /metrics"),
    UNSUP("comet", ALLOW_DISABLED, 0, "zerotrain reports metrics to its coordinator and /metrics"),
    UNSUP("comms_logger", ALLOW_DISABLED, 0, NULL),
    UNSUP("flops_profiler", ALLOW_DISABLED, 0, "zerotrain reports TFLOP/s and MFU every step"),
    UNSUP("amp", ALLOW_DISABLED, 0, "use fp16 or bf16"),
    /* everything else DeepSpeed knows */
    UNSUP("pipeline", 0, 0, NULL),
    UNSUP("sparse_attention", 0, 0, NULL),
    UNSUP("elasticity", 0, 0, NULL),
    UNSUP("compression_training", 0, 0, NULL),
    UNSUP("data_efficiency", 0, 0, NULL),
    UNSUP("curriculum_learning", 0, 0, NULL),
    UNSUP("autotuning", 0, 0, NULL),
    UNSUP("aio", 0, 0, NULL),
    UNSUP("checkpoint", 0, 0, "checkpointing is set in the job's \"train\" section"),
    UNSUP("communication_data_type", ALLOW_NULL, 0, "collectives use the training precision"),
    UNSUP("seq_parallel_communication_data_type", ALLOW_NULL, 0, NULL),
    UNSUP("gradient_predivide_factor", 0, 0, NULL),
    UNSUP("zero_force_ds_cpu_optimizer", 0, 0, NULL),
    UNSUP("eigenvalue", 0, 0, NULL),
    UNSUP("progressive_layer_drop", 0, 0, NULL),
    UNSUP("quantize_training", 0, 0, NULL),
    UNSUP("weight_quantization", 0, 0, NULL),
    UNSUP("nebula", 0, 0, NULL),
    UNSUP("moe", 0, 0, NULL),
    UNSUP("hybrid_engine", 0, 0, NULL),
    UNSUP("graph_harvesting", 0, 0, NULL),
    UNSUP("compile", 0, 0, NULL),
    UNSUP("use_data_before_expert_parallelism", 0, 0, NULL),
    UNSUP("timers", 0, 0, NULL),
    UNSUP("tensor_parallel", 0, 0, NULL),
    UNSUP("sequence_parallel_size", 0, 0, NULL),
    UNSUP("torch_autocast", 0, 0, "use fp16 or bf16"),
};

static const keyspec fp16_keys[] = {
    SUP("enabled"),
    SUP("loss_scale"),
    SUP("initial_scale_power"),
    SUP("loss_scale_window"),
    SUP("hysteresis"),
    SUP("consecutive_hysteresis"),
    SUP("min_loss_scale"),
    UNSUP("auto_cast", ALLOW_FALSE, 0, NULL),
    UNSUP("fp16_master_weights_and_grads", ALLOW_FALSE, 0, "zerotrain keeps fp32 master weights"),
};

static const keyspec bf16_keys[] = {
    SUP("enabled"),
    UNSUP("immediate_grad_update", ALLOW_FALSE, 0, NULL),
    UNSUP("check_grad_overflow", ALLOW_TRUE, 0,
          "zerotrain always checks gradients for non-finite values"),
};

static const keyspec optimizer_keys[] = {
    SUP("type"),
    SUP("params"),
    UNSUP("legacy_fusion", ALLOW_FALSE, 0, NULL),
};

static const keyspec adam_keys[] = {
    SUP("lr"),
    SUP("betas"),
    SUP("eps"),
    SUP("weight_decay"),
    SUP("adam_w_mode"),
    UNSUP("max_grad_norm", 0, 0,
          "DeepSpeed rejects it too (ValueError); use the top-level \"gradient_clipping\" instead"),
    UNSUP("amsgrad", ALLOW_FALSE, 0, NULL),
    UNSUP("torch_adam", ALLOW_FALSE, 0, NULL),
    UNSUP("bias_correction", ALLOW_TRUE, 0, "zerotrain's Adam always corrects the moments' bias"),
    UNSUP("set_grad_none", ALLOW_TRUE | ALLOW_FALSE, 0, NULL),
    UNSUP("maximize", ALLOW_FALSE, 0, NULL),
    UNSUP("foreach", ALLOW_NULL | ALLOW_FALSE, 0, NULL),
    UNSUP("fused", ALLOW_NULL | ALLOW_FALSE, 0, NULL),
    UNSUP("capturable", ALLOW_FALSE, 0, NULL),
    UNSUP("differentiable", ALLOW_FALSE, 0, NULL),
};

static const keyspec scheduler_keys[] = {SUP("type"), SUP("params")};

/* The parameters of each supported schedule, in one table so that a parameter given to the
 * wrong schedule can say where it belongs. */
typedef struct sched_info {
    const char *name;
    zt_sched_type type;
    const char *params[8];
} sched_info;

static const sched_info sched_table[] = {
    {"WarmupLR",
     ZT_SCHED_WARMUP_LR,
     {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"}},
    {"WarmupDecayLR",
     ZT_SCHED_WARMUP_DECAY_LR,
     {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps",
      "last_batch_iteration"}},
    {"WarmupCosineLR",
     ZT_SCHED_WARMUP_COSINE_LR,
     {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type",
      "last_batch_iteration"}},
};

static const char *const unsupported_schedulers[] = {
    "OneCycle",
    "LRRangeTest",
    /* torch.optim.lr_scheduler, which DeepSpeed falls back to */
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "SequentialLR",
    "CosineAnnealingLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CyclicLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "PolynomialLR",
};

static const char *const unsupported_optimizers[] = {
    /* DeepSpeed's own (lowercased) */
    "lamb",
    "onebitadam",
    "zerooneadam",
    "onebitlamb",
    "adagrad",
    "lion",
    "muadam",
    "muadamw",
    "musgd",
    "muon",
    /* torch.optim, which DeepSpeed falls back to */
    "sgd",
    "rmsprop",
    "adadelta",
    "adamax",
    "asgd",
    "lbfgs",
    "nadam",
    "radam",
    "rprop",
    "sparseadam",
    "adafactor",
};

static const keyspec zero_keys[] = {
    SUP("stage"),
    SUP("reduce_bucket_size"),
    SUP("allgather_bucket_size"),
    SUP("overlap_comm"),
    SUP("contiguous_gradients"),
    SUP("offload_optimizer"),
    SUP("offload_param"),
    SUP("stage3_prefetch_bucket_size"),
    SUP("stage3_param_persistence_threshold"),
    SUP("stage3_max_reuse_distance"),
    /* settings zerotrain's design already matches */
    UNSUP("reduce_scatter", ALLOW_TRUE, 0, "zerotrain always reduce-scatters gradients"),
    UNSUP("use_multi_rank_bucket_allreduce", ALLOW_TRUE | ALLOW_FALSE, 0, NULL),
    UNSUP("allgather_partitions", ALLOW_TRUE, 0, NULL),
    UNSUP("load_from_fp32_weights", ALLOW_TRUE, 0, NULL),
    UNSUP("ignore_unused_parameters", ALLOW_TRUE, 0, NULL),
    UNSUP("elastic_checkpoint", ALLOW_FALSE, 0, NULL),
    UNSUP("legacy_stage1", ALLOW_FALSE, 0, NULL),
    UNSUP("stage3_gather_16bit_weights_on_model_save", ALLOW_TRUE | ALLOW_FALSE, 0, NULL),
    UNSUP("stage3_gather_fp16_weights_on_model_save", ALLOW_TRUE | ALLOW_FALSE, 0, NULL),
    UNSUP("memory_efficient_linear", ALLOW_TRUE, 0, NULL),
    UNSUP("override_module_apply", ALLOW_TRUE, 0, NULL),
    /* features zerotrain does not have */
    UNSUP("round_robin_gradients", ALLOW_FALSE, 0, NULL),
    UNSUP("sub_group_size", 0, 0, "zerotrain steps each rank's optimizer shard as one piece"),
    UNSUP("stage3_max_live_parameters", 0, 0, NULL),
    UNSUP("stage3_model_persistence_threshold", 0, 0, NULL),
    UNSUP("stage3_module_granularity_threshold", ALLOW_NUM, 0, NULL),
    UNSUP("stage3_use_all_reduce_for_fetch_params", ALLOW_FALSE, 0, NULL),
    UNSUP("zero_hpz_partition_size", ALLOW_NUM, 1, NULL),
    UNSUP("zero_quantized_weights", ALLOW_FALSE, 0, NULL),
    UNSUP("zero_quantized_nontrainable_weights", ALLOW_FALSE, 0, NULL),
    UNSUP("zero_quantized_gradients", ALLOW_FALSE, 0, NULL),
    UNSUP("zeropp_loco_param", ALLOW_NULL, 0, NULL),
    UNSUP("mics_shard_size", ALLOW_NUM, -1, NULL),
    UNSUP("mics_hierarchical_params_gather", ALLOW_FALSE, 0, NULL),
    UNSUP("pipeline_loading_checkpoint", ALLOW_FALSE, 0, NULL),
    UNSUP("log_trace_cache_warnings", ALLOW_FALSE, 0, NULL),
    UNSUP("cpu_offload", ALLOW_FALSE, 0, "use \"offload_optimizer\": {\"device\": \"cpu\"}"),
    UNSUP("cpu_offload_param", ALLOW_FALSE, 0, "use \"offload_param\": {\"device\": \"cpu\"}"),
    UNSUP("cpu_offload_use_pin_memory", ALLOW_FALSE, 0,
          "use \"pin_memory\" inside offload_optimizer"),
};

static const keyspec offload_optimizer_keys[] = {
    SUP("device"),
    SUP("pin_memory"),
    SUP("ratio"),
    UNSUP("nvme_path", ALLOW_NULL, 0, NULL),
    UNSUP("buffer_count", 0, 0, NULL),
    UNSUP("pipeline_read", ALLOW_FALSE, 0, NULL),
    UNSUP("pipeline_write", ALLOW_FALSE, 0, NULL),
    UNSUP("fast_init", ALLOW_FALSE, 0, NULL),
};

static const keyspec offload_param_keys[] = {
    SUP("device"),
    SUP("pin_memory"),
    UNSUP("nvme_path", ALLOW_NULL, 0, NULL),
    UNSUP("buffer_count", 0, 0, NULL),
    UNSUP("buffer_size", 0, 0, NULL),
    UNSUP("max_in_cpu", 0, 0, NULL),
};

static const keyspec actckpt_keys[] = {
    SUP("partition_activations"),
    SUP("cpu_checkpointing"),
    UNSUP("contiguous_memory_optimization", ALLOW_FALSE, 0, NULL),
    UNSUP("number_checkpoints", ALLOW_NULL | ALLOW_FALSE, 0, NULL),
    UNSUP("synchronize_checkpoint_boundary", ALLOW_FALSE, 0, NULL),
    UNSUP("profile", ALLOW_FALSE, 0, NULL),
};

static const keyspec data_types_keys[] = {SUP("grad_accum_dtype")};

/* A DeepSpeed key written at the job's top level belongs inside "deepspeed". */
static const char *job_key_hint(const char *key, const void *arg)
{
    (void)arg;
    for (size_t i = 0; i < NKEYS(ds_keys); i++)
        if (strcmp(ds_keys[i].name, key) == 0)
            return "it is a DeepSpeed key; move it inside \"deepspeed\"";
    return NULL;
}

/* A schedule parameter given to the wrong schedule says which schedules take it. */
static const char *sched_key_hint(const char *key, const void *arg)
{
    (void)arg;
    if (strcmp(key, "warmup_min_lr") == 0 || strcmp(key, "warmup_max_lr") == 0)
        return "it is a parameter of WarmupLR and WarmupDecayLR, not of this schedule";
    if (strcmp(key, "total_num_steps") == 0)
        return "it is a parameter of WarmupDecayLR and WarmupCosineLR, not of this schedule";
    if (strcmp(key, "warmup_min_ratio") == 0 || strcmp(key, "cos_min_ratio") == 0)
        return "it is a parameter of WarmupCosineLR, not of this schedule";
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* The job's own sections. */

#define TRY(expr, label)                                                                           \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st != ZT_OK) goto label;                                                               \
    } while (0)

static zt_status require(pctx *c, json_t *obj, const char *key, const char *what)
{
    if (member(obj, key)) return ZT_OK;
    return fail_key(c, key, "missing; add it (%s)", what);
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
    zt_status st = get_str(c, root, "name", job->name, sizeof(job->name), &present);
    if (st != ZT_OK) return st;
    if (!present) {
        default_name(job, job->name, sizeof(job->name));
        return ZT_OK;
    }
    if (!valid_name(job->name))
        return fail_key(
            c, "name",
            "must start with a letter or digit and hold only letters, digits, '-', '_' and '.' (got \"%s\")",
            job->name);
    return ZT_OK;
}

static zt_status parse_model(pctx *c, json_t *root, zt_job *job)
{
    zt_model_cfg *m = &job->model;
    json_t *o;
    zt_status st = get_obj(c, root, "model", &o);
    if (st != ZT_OK) return st;
    if (!o)
        return fail_key(
            c, "model",
            "missing; add the model, e.g. \"model\": {\"n_layer\": 4, \"n_head\": 4, \"n_embd\": 128, \"block_size\": 128, \"vocab_size\": 256}");
    push(c, "model");
    TRY(check_keys(c, o, model_keys, NKEYS(model_keys), NULL, NULL), out);
    snprintf(m->arch, sizeof(m->arch), "gpt2");
    TRY(get_str(c, o, "arch", m->arch, sizeof(m->arch), NULL), out);
    if (strcmp(m->arch, "gpt2") != 0) {
        st = fail_key(c, "arch",
                      "unsupported architecture \"%s\"; zerotrain implements \"gpt2\" only",
                      m->arch);
        goto out;
    }
    static const char *const required[] = {"n_layer", "n_head", "n_embd", "block_size",
                                           "vocab_size"};
    for (size_t i = 0; i < NKEYS(required); i++)
        TRY(require(c, o, required[i], "a positive integer"), out);
    TRY(get_int(c, o, "n_layer", 1, INT_MAX, &m->n_layer), out);
    TRY(get_int(c, o, "n_head", 1, INT_MAX, &m->n_head), out);
    TRY(get_int(c, o, "n_embd", 1, INT_MAX, &m->n_embd), out);
    if (m->n_embd % m->n_head != 0) {
        st = fail_key(c, "n_head",
                      "must be a positive integer that divides n_embd (got %d for n_embd %d)",
                      m->n_head, m->n_embd);
        goto out;
    }
    TRY(get_int(c, o, "block_size", 1, INT_MAX, &m->block_size), out);
    TRY(get_int(c, o, "vocab_size", 1, 65536, &m->vocab_size), out);
    /* V rounded up to a multiple of 128, computed in 64 bits: V <= 65536 so it fits. */
    m->padded_vocab_size = (int)(((int64_t)m->vocab_size + 127) / 128 * 128);
    TRY(get_int(c, o, "padded_vocab_size", 1, INT_MAX, &m->padded_vocab_size), out);
    if (m->padded_vocab_size < m->vocab_size) {
        st = fail_key(
            c, "padded_vocab_size",
            "must be >= vocab_size (got %d for vocab_size %d); leave it out to get a multiple of 128",
            m->padded_vocab_size, m->vocab_size);
        goto out;
    }
    char init[ZT_PATH_MAX];
    bool present;
    TRY(get_str(c, o, "init", init, sizeof(init), &present), out);
    m->init_random = !present || strcmp(init, "random") == 0;
    if (!m->init_random) TRY(get_path(c, o, "init", job->base_dir, m->init_path, NULL), out);
    int64_t seed = 1337;
    TRY(get_i64(c, o, "seed", 0, INT64_MAX, &seed), out);
    m->seed = (uint64_t)seed;
out:
    pop(c);
    return st;
}

static zt_status parse_data(pctx *c, json_t *root, zt_job *job)
{
    json_t *o;
    zt_status st = get_obj(c, root, "data", &o);
    if (st != ZT_OK) return st;
    if (!o)
        return fail_key(
            c, "data",
            "missing; add the token shards, e.g. \"data\": {\"train\": \"data/train_*.bin\"}");
    push(c, "data");
    TRY(check_keys(c, o, data_keys, NKEYS(data_keys), NULL, NULL), out);
    TRY(require(c, o, "train", "a glob of training shards, e.g. \"data/train_*.bin\""), out);
    TRY(get_path(c, o, "train", job->base_dir, job->data.train, NULL), out);
    TRY(get_path(c, o, "val", job->base_dir, job->data.val, NULL), out);
out:
    pop(c);
    return st;
}

static zt_status parse_train(pctx *c, json_t *root, zt_job *job)
{
    zt_train_cfg *t = &job->train;
    t->eval_every = 0;
    t->eval_steps = 10;
    t->checkpoint_every = 0;
    t->keep_checkpoints = 3;
    t->comm_timeout_ms = ZT_JOB_DEFAULT_COMM_TIMEOUT_MS;
    json_t *o;
    zt_status st = get_obj(c, root, "train", &o);
    if (st != ZT_OK) return st;
    if (!o) return fail_key(c, "train", "missing; add at least \"train\": {\"steps\": N}");
    push(c, "train");
    TRY(check_keys(c, o, train_keys, NKEYS(train_keys), NULL, NULL), out);
    TRY(require(c, o, "steps", "the number of optimizer steps, a positive integer"), out);
    TRY(get_i64(c, o, "steps", 1, INT64_MAX, &t->steps), out);
    TRY(get_i64(c, o, "eval_every", 0, INT64_MAX, &t->eval_every), out);
    TRY(get_i64(c, o, "eval_steps", 1, INT64_MAX, &t->eval_steps), out);
    TRY(get_i64(c, o, "checkpoint_every", 0, INT64_MAX, &t->checkpoint_every), out);
    TRY(get_int(c, o, "keep_checkpoints", 0, INT_MAX, &t->keep_checkpoints), out);
    TRY(get_int(c, o, "comm_timeout_ms", ZT_JOB_MIN_COMM_TIMEOUT_MS, ZT_JOB_MAX_COMM_TIMEOUT_MS,
                &t->comm_timeout_ms),
        out);
    bool present;
    TRY(get_path(c, o, "checkpoint_dir", job->base_dir, t->checkpoint_dir, &present), out);
    if (!present) {
        char rel[ZT_NAME_MAX + 8];
        snprintf(rel, sizeof(rel), "ckpt/%s", job->name);
        if (!absolute_path(job->base_dir, rel, t->checkpoint_dir, sizeof(t->checkpoint_dir))) {
            st = fail_here(c, ZT_ERR_CONFIG,
                           "the default checkpoint_dir %s/%s is too long; set \"checkpoint_dir\"",
                           job->base_dir, rel);
            goto out;
        }
    }
out:
    pop(c);
    return st;
}

static zt_status parse_resources(pctx *c, json_t *root, zt_job *job)
{
    zt_resources_cfg *r = &job->resources;
    r->ranks = 1;
    r->device = ZT_DEVICE_CPU;
    json_t *o;
    zt_status st = get_obj(c, root, "resources", &o);
    if (st != ZT_OK || !o) {
        r->ranks_per_node = r->ranks;
        return st;
    }
    push(c, "resources");
    TRY(check_keys(c, o, resources_keys, NKEYS(resources_keys), NULL, NULL), out);
    TRY(get_int(c, o, "ranks", 1, INT_MAX, &r->ranks), out);
    r->ranks_per_node = r->ranks;
    TRY(get_int(c, o, "ranks_per_node", 1, INT_MAX, &r->ranks_per_node), out);
    if (r->ranks_per_node > r->ranks) {
        st = fail_key(c, "ranks_per_node", "must be at most ranks (got %d for ranks %d)",
                      r->ranks_per_node, r->ranks);
        goto out;
    }
    char dev[64];
    bool present;
    TRY(get_str(c, o, "device", dev, sizeof(dev), &present), out);
    if (present) {
        if (strcmp(dev, "cpu") == 0) {
            r->device = ZT_DEVICE_CPU;
        } else if (strcmp(dev, "cuda") == 0) {
            r->device = ZT_DEVICE_CUDA;
        } else {
            st = fail_key(c, "device", "must be \"cpu\" or \"cuda\" (got \"%s\")", dev);
            goto out;
        }
    }
out:
    pop(c);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* The DeepSpeed config (deepspeed-semantics.md §1). */

static bool in_list_ci(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (s[k] && tolower((unsigned char)s[k]) == tolower((unsigned char)list[i][k]))
            k++;
        if (s[k] == '\0' && list[i][k] == '\0') return true;
    }
    return false;
}

static zt_status parse_fp16(pctx *c, json_t *ds, zt_fp16_cfg *f)
{
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_fp16_cfg defaults = {.enabled = false,
                                         .loss_scale = 0,
                                         .initial_scale_power = 16,
                                         .loss_scale_window = 1000,
                                         .hysteresis = 2,
                                         .consecutive_hysteresis = false,
                                         .min_loss_scale = 1};
    memcpy(f, &defaults, sizeof(*f));
    json_t *o;
    zt_status st = get_obj(c, ds, "fp16", &o);
    if (st != ZT_OK || !o) return st;
    push(c, "fp16");
    TRY(check_keys(c, o, fp16_keys, NKEYS(fp16_keys), NULL, NULL), out);
    TRY(get_bool(c, o, "enabled", &f->enabled), out);
    TRY(get_num(c, o, "loss_scale", 0, 0, NUM_GE, &f->loss_scale), out);
    TRY(get_int(c, o, "initial_scale_power", 0, 64, &f->initial_scale_power), out);
    TRY(get_int(c, o, "loss_scale_window", 1, INT_MAX, &f->loss_scale_window), out);
    TRY(get_int(c, o, "hysteresis", 1, INT_MAX, &f->hysteresis), out);
    TRY(get_bool(c, o, "consecutive_hysteresis", &f->consecutive_hysteresis), out);
    TRY(get_num(c, o, "min_loss_scale", 0, 0, NUM_GT, &f->min_loss_scale), out);
out:
    pop(c);
    return st;
}

/* bf16 (or its alias bfloat16); *key_out names the one given, for later messages. */
static zt_status parse_bf16(pctx *c, json_t *ds, bool *enabled, const char **key_out)
{
    *enabled = false;
    *key_out = "bf16";
    bool have_bf16 = member(ds, "bf16") != NULL, have_alias = member(ds, "bfloat16") != NULL;
    if (have_bf16 && have_alias)
        return fail_key(c, "bfloat16",
                        "is an alias of \"bf16\", which is also given; keep only one of them");
    if (have_alias) *key_out = "bfloat16";
    json_t *o;
    zt_status st = get_obj(c, ds, *key_out, &o);
    if (st != ZT_OK || !o) return st;
    push(c, *key_out);
    TRY(check_keys(c, o, bf16_keys, NKEYS(bf16_keys), NULL, NULL), out);
    TRY(get_bool(c, o, "enabled", enabled), out);
out:
    pop(c);
    return st;
}

static zt_status parse_betas(pctx *c, json_t *params, zt_optim_cfg *opt)
{
    json_t *v = member(params, "betas");
    if (!v) return ZT_OK;
    if (!json_is_array(v) || json_array_size(v) != 2) {
        char got[64];
        if (json_is_array(v))
            snprintf(got, sizeof(got), "a list of %zu", json_array_size(v));
        else
            describe(v, got, sizeof(got));
        return fail_key(c, "betas",
                        "must be a list of two numbers [beta1, beta2], each in [0, 1) (got %s)",
                        got);
    }
    double b[2];
    zt_status st = ZT_OK;
    push(c, "betas");
    for (size_t i = 0; i < 2 && st == ZT_OK; i++) {
        json_t *e = json_array_get(v, i);
        char got[64];
        describe(e, got, sizeof(got));
        if (!json_is_number(e))
            st = fail_index(c, (long)i, "must be a number (got %s)", got);
        else
            st = check_num(c, NULL, (long)i, json_number_value(e), 0, 1, NUM_RANGE_HO, got);
        if (st == ZT_OK) b[i] = json_number_value(e);
    }
    pop(c);
    if (st == ZT_OK) {
        opt->beta1 = b[0];
        opt->beta2 = b[1];
    }
    return st;
}

static zt_status parse_optimizer(pctx *c, json_t *ds, zt_optim_cfg *opt)
{
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_optim_cfg defaults = {.type = ZT_OPTIM_ADAMW,
                                          .lr = 1e-3,
                                          .beta1 = 0.9,
                                          .beta2 = 0.999,
                                          .eps = 1e-8,
                                          .weight_decay = 0,
                                          .adam_w_mode = true};
    memcpy(opt, &defaults, sizeof(*opt));
    json_t *o, *p;
    zt_status st = get_obj(c, ds, "optimizer", &o);
    if (st != ZT_OK || !o) return st;
    push(c, "optimizer");
    TRY(check_keys(c, o, optimizer_keys, NKEYS(optimizer_keys), NULL, NULL), out);
    TRY(require(c, o, "type", "\"AdamW\" or \"Adam\""), out);
    char type[64];
    TRY(get_str(c, o, "type", type, sizeof(type), NULL), out);
    bool named_adamw;
    if (in_list_ci(type, (const char *const[]){"adam"}, 1)) {
        named_adamw = false;
    } else if (in_list_ci(type, (const char *const[]){"adamw"}, 1)) {
        named_adamw = true;
    } else if (in_list_ci(type, unsupported_optimizers, NKEYS(unsupported_optimizers))) {
        st = fail_key(
            c, "type",
            "\"%s\" is a DeepSpeed optimizer that zerotrain does not support; use \"AdamW\" or \"Adam\"",
            type);
        goto out;
    } else {
        const char *near = closest(type, (const char *const[]){"Adam", "AdamW"}, 2);
        if (near)
            st = fail_key(c, "type", "unknown optimizer \"%s\"; did you mean \"%s\"?", type, near);
        else
            st = fail_key(c, "type", "unknown optimizer \"%s\"; use \"AdamW\" or \"Adam\"", type);
        goto out;
    }
    TRY(get_obj(c, o, "params", &p), out);
    if (p) {
        push(c, "params");
        st = check_keys(c, p, adam_keys, NKEYS(adam_keys), NULL, NULL);
        if (st == ZT_OK) st = get_num(c, p, "lr", 0, 0, NUM_GE, &opt->lr);
        if (st == ZT_OK) st = parse_betas(c, p, opt);
        if (st == ZT_OK) st = get_num(c, p, "eps", 0, 0, NUM_GT, &opt->eps);
        if (st == ZT_OK) st = get_num(c, p, "weight_decay", 0, 0, NUM_GE, &opt->weight_decay);
        if (st == ZT_OK) st = get_bool(c, p, "adam_w_mode", &opt->adam_w_mode);
        pop(c);
        if (st != ZT_OK) goto out;
    }
    /* DeepSpeed: decoupled decay when the type is adamw or adam_w_mode is set (default). */
    opt->type = named_adamw || opt->adam_w_mode ? ZT_OPTIM_ADAMW : ZT_OPTIM_ADAM;
    opt->adam_w_mode = opt->type == ZT_OPTIM_ADAMW;
out:
    pop(c);
    return st;
}

static bool sched_has(const sched_info *info, const char *param)
{
    for (size_t i = 0; i < NKEYS(info->params) && info->params[i]; i++)
        if (strcmp(info->params[i], param) == 0) return true;
    return false;
}

static zt_status parse_sched_params(pctx *c, json_t *p, const sched_info *info, zt_sched_cfg *s,
                                    const zt_job *job)
{
    keyspec ks[NKEYS(info->params)];
    size_t n = 0;
    for (size_t i = 0; i < NKEYS(info->params) && info->params[i]; i++) {
        if (strcmp(info->params[i], "last_batch_iteration") == 0)
            ks[n++] = (keyspec)UNSUP("last_batch_iteration", ALLOW_NUM, -1,
                                     "zerotrain restores the schedule from its checkpoints");
        else
            ks[n++] = (keyspec)SUP(info->params[i]);
    }
    zt_status st = ZT_OK;
    if (p) TRY(check_keys(c, p, ks, n, sched_key_hint, NULL), out);
    if (sched_has(info, "warmup_min_lr")) {
        TRY(get_num(c, p, "warmup_min_lr", 0, 0, NUM_GE, &s->warmup_min_lr), out);
        TRY(get_num(c, p, "warmup_max_lr", 0, 0, NUM_GE, &s->warmup_max_lr), out);
    }
    TRY(get_i64(c, p, "warmup_num_steps", 0, INT64_MAX, &s->warmup_num_steps), out);
    char wt[64];
    bool present;
    TRY(get_str(c, p, "warmup_type", wt, sizeof(wt), &present), out);
    if (present) {
        if (strcmp(wt, "log") == 0) {
            s->warmup_type = ZT_WARMUP_LOG;
        } else if (strcmp(wt, "linear") == 0) {
            s->warmup_type = ZT_WARMUP_LINEAR;
        } else {
            st = fail_key(
                c, "warmup_type",
                "must be \"log\" or \"linear\" (got \"%s\"); DeepSpeed would fall back to \"log\" with a warning",
                wt);
            goto out;
        }
    }
    if (sched_has(info, "total_num_steps")) {
        if (!member(p, "total_num_steps")) {
            st = fail_key(
                c, "total_num_steps",
                "missing; %s needs the step where the schedule ends, e.g. the job's train.steps (%lld)",
                info->name, (long long)job->train.steps);
            goto out;
        }
        TRY(get_i64(c, p, "total_num_steps", 1, INT64_MAX, &s->total_num_steps), out);
    }
    if (info->type == ZT_SCHED_WARMUP_COSINE_LR) {
        TRY(get_num(c, p, "warmup_min_ratio", 0, 1, NUM_RANGE, &s->warmup_min_ratio), out);
        TRY(get_num(c, p, "cos_min_ratio", 0, 1, NUM_RANGE, &s->cos_min_ratio), out);
        if (s->total_num_steps <= s->warmup_num_steps) {
            st = fail_key(
                c, "total_num_steps",
                "must be greater than warmup_num_steps (got %lld <= %lld%s); lower warmup_num_steps or raise total_num_steps",
                (long long)s->total_num_steps, (long long)s->warmup_num_steps,
                member(p, "warmup_num_steps") ? "" : ", the default");
            goto out;
        }
    }
out:
    return st;
}

static zt_status parse_scheduler(pctx *c, json_t *ds, zt_sched_cfg *s, const zt_job *job)
{
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_sched_cfg defaults = {.type = ZT_SCHED_NONE,
                                          .warmup_min_lr = 0,
                                          .warmup_max_lr = 0.001,
                                          .warmup_num_steps = 1000,
                                          .warmup_type = ZT_WARMUP_LOG,
                                          .total_num_steps = 0,
                                          .warmup_min_ratio = 0,
                                          .cos_min_ratio = 1e-4};
    memcpy(s, &defaults, sizeof(*s));
    json_t *o, *p;
    zt_status st = get_obj(c, ds, "scheduler", &o);
    if (st != ZT_OK || !o) return st;
    push(c, "scheduler");
    TRY(check_keys(c, o, scheduler_keys, NKEYS(scheduler_keys), NULL, NULL), out);
    TRY(require(c, o, "type", "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\""), out);
    char type[64];
    TRY(get_str(c, o, "type", type, sizeof(type), NULL), out);
    const sched_info *info = NULL;
    for (size_t i = 0; i < NKEYS(sched_table) && !info; i++)
        if (strcmp(sched_table[i].name, type) == 0) info = &sched_table[i];
    if (!info) {
        const char *names[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
        const char *near = closest(type, names, NKEYS(names));
        if (near)
            st = fail_key(c, "type", "unknown scheduler \"%s\"; did you mean \"%s\"?", type, near);
        else if (in_list_ci(type, unsupported_schedulers, NKEYS(unsupported_schedulers)))
            st = fail_key(
                c, "type",
                "\"%s\" is a DeepSpeed scheduler that zerotrain does not support; use \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"",
                type);
        else
            st = fail_key(
                c, "type",
                "unknown scheduler \"%s\"; use \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"",
                type);
        goto out;
    }
    s->type = info->type;
    TRY(get_obj(c, o, "params", &p), out);
    push(c, "params");
    st = parse_sched_params(c, p, info, s, job);
    pop(c);
out:
    pop(c);
    return st;
}

/* offload_optimizer / offload_param "device": "none" or "cpu". */
static zt_status parse_offload_device(pctx *c, json_t *o, bool *enabled)
{
    char dev[64];
    bool present;
    zt_status st = get_str(c, o, "device", dev, sizeof(dev), &present);
    if (st != ZT_OK || !present) return st;
    if (strcmp(dev, "none") == 0)
        *enabled = false;
    else if (strcmp(dev, "cpu") == 0)
        *enabled = true;
    else if (strcmp(dev, "nvme") == 0)
        return fail_key(
            c, "device",
            "\"nvme\" is a DeepSpeed offload device that zerotrain does not support; use \"cpu\" or \"none\"");
    else
        return fail_key(c, "device", "must be \"none\" or \"cpu\" (got \"%s\")", dev);
    return ZT_OK;
}

static zt_status parse_offload(pctx *c, json_t *zo, const char *key, zt_offload_cfg *off)
{
    bool is_opt = strcmp(key, "offload_optimizer") == 0;
    json_t *o;
    zt_status st = get_obj(c, zo, key, &o);
    if (st != ZT_OK || !o) return st;
    push(c, key);
    if (is_opt)
        TRY(check_keys(c, o, offload_optimizer_keys, NKEYS(offload_optimizer_keys), NULL, NULL),
            out);
    else
        TRY(check_keys(c, o, offload_param_keys, NKEYS(offload_param_keys), NULL, NULL), out);
    TRY(parse_offload_device(c, o, &off->enabled), out);
    TRY(get_bool(c, o, "pin_memory", &off->pin_memory), out);
    if (is_opt) TRY(get_num(c, o, "ratio", 0, 1, NUM_RANGE, &off->ratio), out);
out:
    pop(c);
    return st;
}

static zt_status parse_zero(pctx *c, json_t *ds, zt_zero_cfg *z)
{
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_zero_cfg defaults = {.stage = 0,
                                         .reduce_bucket_size = 500000000,
                                         .allgather_bucket_size = 500000000,
                                         .overlap_comm = false,
                                         .contiguous_gradients = true,
                                         .offload_optimizer = {false, false, 1.0},
                                         .offload_param = {false, false, 1.0},
                                         .stage3_prefetch_bucket_size = 50000000,
                                         .stage3_param_persistence_threshold = 100000,
                                         .stage3_max_reuse_distance = 1000000000};
    memcpy(z, &defaults, sizeof(*z));
    json_t *v = member(ds, "zero_optimization");
    if (v && json_is_boolean(v)) { /* legacy form: true means stage 1 */
        z->stage = json_is_true(v) ? 1 : 0;
        return ZT_OK;
    }
    json_t *o;
    zt_status st = get_obj(c, ds, "zero_optimization", &o);
    if (st != ZT_OK || !o) return st;
    push(c, "zero_optimization");
    TRY(check_keys(c, o, zero_keys, NKEYS(zero_keys), NULL, NULL), out);
    TRY(get_int(c, o, "stage", 0, 3, &z->stage), out);
    TRY(get_i64(c, o, "reduce_bucket_size", 1, INT64_MAX, &z->reduce_bucket_size), out);
    TRY(get_i64(c, o, "allgather_bucket_size", 1, INT64_MAX, &z->allgather_bucket_size), out);
    if (z->allgather_bucket_size % 2 != 0) {
        st = fail_key(
            c, "allgather_bucket_size",
            "must be even (got %lld); DeepSpeed requires a multiple of nccl_start_alignment_factor, 2",
            (long long)z->allgather_bucket_size);
        goto out;
    }
    z->overlap_comm = z->stage == 3;
    TRY(get_bool(c, o, "overlap_comm", &z->overlap_comm), out);
    TRY(get_bool(c, o, "contiguous_gradients", &z->contiguous_gradients), out);
    TRY(parse_offload(c, o, "offload_optimizer", &z->offload_optimizer), out);
    TRY(parse_offload(c, o, "offload_param", &z->offload_param), out);
    if (z->offload_param.enabled && z->stage != 3) {
        push(c, "offload_param");
        st = fail_key(
            c, "device",
            "offloading parameters needs zero_optimization.stage 3 (stage is %d); remove offload_param or set \"stage\": 3",
            z->stage);
        pop(c);
        goto out;
    }
    TRY(get_i64(c, o, "stage3_prefetch_bucket_size", 0, INT64_MAX, &z->stage3_prefetch_bucket_size),
        out);
    TRY(get_i64(c, o, "stage3_param_persistence_threshold", 0, INT64_MAX,
                &z->stage3_param_persistence_threshold),
        out);
    TRY(get_i64(c, o, "stage3_max_reuse_distance", 0, INT64_MAX, &z->stage3_max_reuse_distance),
        out);
out:
    pop(c);
    return st;
}

static zt_status parse_actckpt(pctx *c, json_t *ds, zt_actckpt_cfg *a)
{
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_actckpt_cfg defaults = {false, false, false};
    memcpy(a, &defaults, sizeof(*a));
    json_t *o;
    zt_status st = get_obj(c, ds, "activation_checkpointing", &o);
    if (st != ZT_OK || !o) return st;
    a->enabled = true;
    push(c, "activation_checkpointing");
    TRY(check_keys(c, o, actckpt_keys, NKEYS(actckpt_keys), NULL, NULL), out);
    TRY(get_bool(c, o, "partition_activations", &a->partition_activations), out);
    TRY(get_bool(c, o, "cpu_checkpointing", &a->cpu_checkpointing), out);
out:
    pop(c);
    return st;
}

static const char *precision_name(zt_precision p)
{
    return p == ZT_PREC_FP16 ? "fp16" : p == ZT_PREC_BF16 ? "bf16" : "fp32";
}

/* data_types.grad_accum_dtype: fp32, or the 16-bit type in use. */
static zt_status parse_data_types(pctx *c, json_t *ds, zt_ds_cfg *d)
{
    d->grad_accum_fp32 = d->precision != ZT_PREC_FP16;
    json_t *o;
    zt_status st = get_obj(c, ds, "data_types", &o);
    if (st != ZT_OK || !o) return st;
    push(c, "data_types");
    TRY(check_keys(c, o, data_types_keys, NKEYS(data_types_keys), NULL, NULL), out);
    char dt[64];
    bool present;
    TRY(get_str(c, o, "grad_accum_dtype", dt, sizeof(dt), &present), out);
    if (!present) goto out;
    static const char *const fp32_names[] = {"fp32", "float32", "float", "torch.float32"};
    static const char *const fp16_names[] = {"fp16", "float16", "half", "torch.float16"};
    static const char *const bf16_names[] = {"bf16", "bfloat16", "torch.bfloat16"};
    zt_precision want;
    if (in_list_ci(dt, fp32_names, NKEYS(fp32_names))) {
        d->grad_accum_fp32 = true;
        goto out;
    } else if (in_list_ci(dt, fp16_names, NKEYS(fp16_names))) {
        want = ZT_PREC_FP16;
    } else if (in_list_ci(dt, bf16_names, NKEYS(bf16_names))) {
        want = ZT_PREC_BF16;
    } else {
        st = fail_key(c, "grad_accum_dtype", "must be \"fp32\", \"fp16\" or \"bf16\" (got \"%s\")",
                      dt);
        goto out;
    }
    if (want != d->precision) {
        if (d->precision == ZT_PREC_FP32)
            st = fail_key(
                c, "grad_accum_dtype",
                "\"%s\" needs %s training, but neither fp16 nor bf16 is enabled; use \"fp32\" or enable %s",
                dt, precision_name(want), precision_name(want));
        else
            st = fail_key(c, "grad_accum_dtype",
                          "\"%s\" does not match the training precision %s; use \"fp32\" or \"%s\"",
                          dt, precision_name(d->precision), precision_name(d->precision));
        goto out;
    }
    d->grad_accum_fp32 = false;
out:
    pop(c);
    return st;
}

/* The DeepSpeed object `ds`, whose path is c's current one. */
static zt_status parse_ds(pctx *c, json_t *ds, zt_job *job)
{
    zt_ds_cfg *d = &job->ds;
    zt_status st;
    TRY(check_keys(c, ds, ds_keys, NKEYS(ds_keys), NULL, NULL), out);
    TRY(get_int_max(c, ds, "train_batch_size", 1, INT_MAX, INT_MAX, &d->given_train_batch_size),
        out);
    TRY(get_int_max(c, ds, "train_micro_batch_size_per_gpu", 1, INT_MAX, INT_MAX,
                    &d->given_micro_batch),
        out);
    TRY(get_int_max(c, ds, "gradient_accumulation_steps", 1, INT_MAX, INT_MAX,
                    &d->given_grad_accum),
        out);
    d->steps_per_print = 10;
    TRY(get_i64(c, ds, "steps_per_print", 1, INT64_MAX, &d->steps_per_print), out);
    d->gradient_clipping = 0;
    TRY(get_num(c, ds, "gradient_clipping", 0, 0, NUM_GE, &d->gradient_clipping), out);
    TRY(parse_fp16(c, ds, &d->fp16), out);
    const char *bf16_key;
    TRY(parse_bf16(c, ds, &d->bf16, &bf16_key), out);
    if (d->fp16.enabled && d->bf16) {
        push(c, bf16_key);
        st = fail_key(
            c, "enabled",
            "fp16 and bf16 cannot both be enabled (DeepSpeed: \"bfloat16 and fp16 modes cannot be simultaneously enabled\"); enable at most one");
        pop(c);
        goto out;
    }
    d->precision = d->fp16.enabled ? ZT_PREC_FP16 : d->bf16 ? ZT_PREC_BF16 : ZT_PREC_FP32;
    TRY(parse_optimizer(c, ds, &d->optimizer), out);
    TRY(parse_scheduler(c, ds, &d->scheduler, job), out);
    TRY(parse_zero(c, ds, &d->zero), out);
    TRY(parse_actckpt(c, ds, &d->activation_checkpointing), out);
    TRY(parse_data_types(c, ds, d), out);

    zt_err berr;
    zt_err_clear(&berr);
    st = zt_job_resolve_batch(job, job->resources.ranks, &berr);
    if (st != ZT_OK) {
        const char *key = d->given_train_batch_size ? "train_batch_size"
                          : d->given_micro_batch    ? "train_micro_batch_size_per_gpu"
                          : d->given_grad_accum     ? "gradient_accumulation_steps"
                                                    : NULL;
        /* The message already names the section; only the position is added. */
        zt_json_seg segs[CTX_DEPTH + 1];
        size_t n = c->depth < CTX_DEPTH ? c->depth : CTX_DEPTH;
        memcpy(segs, c->seg, n * sizeof(segs[0]));
        if (key) segs[n++] = (zt_json_seg){key, 0};
        zt_json_loc loc;
        if (zt_json_locate(c->text, c->len, segs, n, &loc, NULL))
            st = zt_err_set(c->err, st, "%s:%d:%d: %s", c->origin, loc.line, loc.col, berr.msg);
        else
            st = zt_err_set(c->err, st, "%s: %s", c->origin, berr.msg);
    }
out:
    return st;
}

static zt_status parse_deepspeed(pctx *c, json_t *root, zt_job *job)
{
    json_t *v = member(root, "deepspeed");
    if (!v)
        return fail_key(
            c, "deepspeed",
            "missing; add the DeepSpeed config (an object, or the path of a DeepSpeed JSON file) with at least \"train_micro_batch_size_per_gpu\"");
    if (json_is_object(v)) {
        push(c, "deepspeed");
        zt_status st = parse_ds(c, v, job);
        pop(c);
        return st;
    }
    if (!json_is_string(v)) {
        char got[64];
        describe(v, got, sizeof(got));
        return fail_key(c, "deepspeed",
                        "must be an object {...} or the path of a DeepSpeed JSON file (got %s)",
                        got);
    }
    char path[ZT_PATH_MAX];
    zt_status st = get_path(c, root, "deepspeed", job->base_dir, path, NULL);
    if (st != ZT_OK) return st;
    char *text = NULL;
    size_t len = 0;
    zt_err ferr;
    zt_err_clear(&ferr);
    st = read_text(path, path, "DeepSpeed config", &text, &len, &ferr);
    if (st != ZT_OK)
        return fail_key_code(c, st, "deepspeed", "%s (relative paths resolve against %s)", ferr.msg,
                             job->base_dir);
    json_t *ds = NULL;
    st = load_json(text, len, path, "DeepSpeed config", &ds, c->err);
    if (st == ZT_OK) {
        pctx dc = {.origin = path, .text = text, .len = len, .depth = 0, .err = c->err};
        st = parse_ds(&dc, ds, job);
        json_decref(ds);
    }
    zt_free(text);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points. */

/* Parses text into job, whose job_path and base_dir the caller has set. */
static zt_status parse_job(zt_job *job, const char *text, size_t len, const char *origin,
                           zt_err *err)
{
    json_t *root;
    zt_status st = load_json(text, len, origin, "job file", &root, err);
    if (st != ZT_OK) return st;
    pctx c = {.origin = origin, .text = text, .len = len, .depth = 0, .err = err};
    TRY(check_keys(&c, root, job_keys, NKEYS(job_keys), job_key_hint, NULL), out);
    TRY(parse_name(&c, root, job), out);
    TRY(parse_model(&c, root, job), out);
    TRY(parse_data(&c, root, job), out);
    TRY(parse_train(&c, root, job), out);
    TRY(parse_resources(&c, root, job), out);
    job->max_restarts = 0;
    TRY(get_int(&c, root, "max_restarts", 0, INT_MAX, &job->max_restarts), out);
    TRY(parse_deepspeed(&c, root, job), out);
out:
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
    bool ok = base_dir ? absolute_path(cwd, base_dir, job->base_dir, sizeof(job->base_dir))
                       : clean_path(cwd, job->base_dir, sizeof(job->base_dir));
    if (!ok)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "job file: base directory %s is longer than %d bytes; use a shorter path",
                          base_dir ? base_dir : cwd, ZT_PATH_MAX - 1);
    return ZT_OK;
}

zt_status zt_job_parse(zt_job *job, const char *text, const char *origin, const char *base_dir,
                       zt_err *err)
{
    if (!job || !text)
        return zt_err_set(err, ZT_ERR_INVALID, "zt_job_parse: job and text must not be NULL");
    memset(job, 0, sizeof(*job));
    zt_status st = set_base_dir(job, base_dir, err);
    if (st == ZT_OK) st = parse_job(job, text, strlen(text), origin ? origin : "job", err);
    if (st != ZT_OK) memset(job, 0, sizeof(*job));
    return st;
}

zt_status zt_job_load(zt_job *job, const char *path, zt_err *err)
{
    if (!job || !path || !path[0])
        return zt_err_set(err, ZT_ERR_INVALID, "zt_job_load: give the path of a job file");
    memset(job, 0, sizeof(*job));
    char *text = NULL;
    size_t len = 0;
    zt_status st = read_text(path, path, "job file", &text, &len, err);
    if (st != ZT_OK) return st;
    char cwd[ZT_PATH_MAX] = "/";
    if (path[0] != '/') st = cwd_path(cwd, sizeof(cwd), err);
    if (st == ZT_OK && !absolute_path(cwd, path, job->job_path, sizeof(job->job_path)))
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
        st = parse_job(job, text, len, path, err);
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
