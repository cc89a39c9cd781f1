/* zerotrain: the key tables of a job file (jobfile_int.h): which keys an object may hold, and
 * for each one that is not used what the parse says about it. An unknown key gets the closest
 * known one as a suggestion, or is named in the summary where DeepSpeed ignores it. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfile_int.h"

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
                jf_one_line(text);
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
        jf_one_line(text);
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
