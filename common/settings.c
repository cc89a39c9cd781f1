/* zerotrain: reads the ZT_* environment variables through the one table of settings.h.
 * Values are parsed at each read, so a test may change a variable between reads; a bad value
 * warns, naming the variable, the value and what is accepted, and the default holds. */
#define _POSIX_C_SOURCE 200809L
#include "common/settings.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static const zt_setting_info table[ZT_SET_COUNT] = {
#define ZT_SETTING_ROW(id, name, type, use, def, min, max, choices, subsys, expect, what)          \
    [ZT_SET_##id] = {name, type, use, def, min, max, choices, subsys, expect, what},
    ZT_SETTINGS(ZT_SETTING_ROW)
#undef ZT_SETTING_ROW
};

/* rows marked ZT_SETTING_ONCE: whether their warning was given */
static atomic_bool warned[ZT_SET_COUNT];

const zt_setting_info *zt_setting_about(zt_setting id)
{
    return (int)id >= 0 && id < ZT_SET_COUNT ? &table[id] : NULL;
}

int zt_setting_find(const char *name)
{
    for (int i = 0; name && i < ZT_SET_COUNT; i++)
        if (strcmp(table[i].name, name) == 0) return i;
    return -1;
}

const char *zt_setting_raw(zt_setting id)
{
    const char *v = getenv(table[id].name);
    return v && *v ? v : NULL;
}

const char *zt_setting_env(zt_setting id)
{
    return getenv(table[id].name);
}

const char *zt_setting_str(zt_setting id)
{
    const char *v = zt_setting_raw(id);
    return v ? v : table[id].def;
}

void zt_setting_warn(zt_setting id, const char *value)
{
    const zt_setting_info *s = &table[id];
    if ((s->use & ZT_SETTING_ONCE) && atomic_exchange(&warned[id], true)) return;
    const char *subsys = s->subsys ? s->subsys : "settings";
    if (s->expect) {
        ZT_WARN(subsys, "ignoring %s=%s: expected %s", s->name, value, s->expect);
    } else if (s->type == ZT_SETTING_INT) {
        ZT_WARN(subsys, "ignoring %s=%s: expected an integer in [%lld, %lld]; using %s", s->name,
                value, (long long)s->min, (long long)s->max, s->def[0] ? s->def : "none");
    } else if (s->type == ZT_SETTING_REAL) {
        ZT_WARN(subsys, "ignoring %s=%s: expected a number above %lld and up to %lld; using %s",
                s->name, value, (long long)s->min, (long long)s->max, s->def[0] ? s->def : "none");
    } else if (s->type == ZT_SETTING_BOOL) {
        ZT_WARN(subsys, "ignoring %s=%s: expected 0 or 1", s->name, value);
    } else if (s->type == ZT_SETTING_CHOICE) {
        ZT_WARN(subsys, "ignoring %s=%s: expected one of %s", s->name, value, s->choices);
    } else {
        ZT_WARN(subsys, "ignoring %s=%s", s->name, value);
    }
}

/* A whole decimal integer in [min, max]. */
static bool parse_int(const zt_setting_info *s, const char *v, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < s->min || x > s->max) return false;
    *out = (int64_t)x;
    return true;
}

int64_t zt_setting_int(zt_setting id)
{
    const zt_setting_info *s = &table[id];
    int64_t x = 0;
    const char *v = zt_setting_raw(id);
    if (v && parse_int(s, v, &x)) return x;
    if (v) zt_setting_warn(id, v);
    return s->def[0] ? (int64_t)strtoll(s->def, NULL, 10) : 0;
}

double zt_setting_real(zt_setting id)
{
    const zt_setting_info *s = &table[id];
    const char *v = zt_setting_raw(id);
    if (v) {
        char *end = NULL;
        double x = strtod(v, &end);
        if (end != v && !*end && x > (double)s->min && x <= (double)s->max) return x;
        zt_setting_warn(id, v);
    }
    return s->def[0] ? strtod(s->def, NULL) : 0.0;
}

bool zt_setting_bool(zt_setting id)
{
    const char *v = zt_setting_raw(id);
    if (v && strcmp(v, "1") == 0) return true;
    if (v && strcmp(v, "0") == 0) return false;
    if (v) zt_setting_warn(id, v);
    return strcmp(table[id].def, "1") == 0;
}

/* Whether v is one of s's '|'-separated choices. */
static bool find_choice(const zt_setting_info *s, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = s->choices; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k == n && strncmp(p, v, n) == 0) return true;
        p += k + (bar ? 1 : 0);
    }
    return false;
}

const char *zt_setting_choice(zt_setting id)
{
    const zt_setting_info *s = &table[id];
    const char *v = zt_setting_raw(id);
    if (v) {
        if (find_choice(s, v)) return v;
        zt_setting_warn(id, v);
    }
    return s->def[0] ? s->def : NULL;
}
