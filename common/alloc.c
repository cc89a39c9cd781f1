/* zerotrain: allocation wrappers with counting and failure injection (see alloc.h). */
#define _POSIX_C_SOURCE 200809L
#include "alloc.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "settings.h"

static atomic_ullong alloc_count;
static atomic_long fail_after = -1;
static atomic_int fail_init;

static int should_fail(void)
{
    if (!atomic_exchange(&fail_init, 1)) {
        const char *e = zt_setting_raw(ZT_SET_ALLOC_FAIL_AFTER);
        if (e)
            atomic_store(&fail_after, strtol(e, NULL, 10));
    }
    long f = atomic_load(&fail_after);
    if (f < 0)
        return 0;
    if (f == 0)
        return 1;
    atomic_fetch_sub(&fail_after, 1);
    return 0;
}

void zt_alloc_fail_after(long n)
{
    atomic_store(&fail_init, 1);
    atomic_store(&fail_after, n);
}

uint64_t zt_alloc_count(void)
{
    return atomic_load(&alloc_count);
}

void *zt_malloc(size_t size)
{
    if (should_fail())
        return NULL;
    void *p = malloc(size ? size : 1);
    if (p)
        atomic_fetch_add(&alloc_count, 1);
    return p;
}

void *zt_calloc(size_t n, size_t size)
{
    if (should_fail())
        return NULL;
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p)
        atomic_fetch_add(&alloc_count, 1);
    return p;
}

void *zt_realloc(void *p, size_t size)
{
    if (should_fail())
        return NULL;
    void *q = realloc(p, size ? size : 1);
    if (q && !p)
        atomic_fetch_add(&alloc_count, 1);
    return q;
}

void *zt_aligned_alloc(size_t align, size_t size)
{
    if (should_fail())
        return NULL;
    if (align < 64)
        align = 64;
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0)
        return NULL;
    atomic_fetch_add(&alloc_count, 1);
    return p;
}

char *zt_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *d = zt_malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

char *zt_strndup(const char *s, size_t n)
{
    if (!s)
        return NULL;
    size_t len = strnlen(s, n);
    char *d = zt_malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

char *zt_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = zt_malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void zt_free(void *p)
{
    free(p);
}

const char *zt_fmt_bytes(int64_t b, char *buf, size_t cap)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while ((v >= 1024 || v <= -1024) && i < 4) {
        v /= 1024;
        i++;
    }
    if (i == 0)
        snprintf(buf, cap, "%lld B", (long long)b);
    else
        snprintf(buf, cap, "%.1f %s", v, u[i]);
    return buf;
}

double zt_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0) || v > 1e30) return -1;
    while (isspace((unsigned char)*end))
        end++;
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"k", 1e3},
                 {"kb", 1e3},
                 {"kib", 1024.0},
                 {"m", 1e6},
                 {"mb", 1e6},
                 {"mib", 1048576.0},
                 {"g", 1e9},
                 {"gb", 1e9},
                 {"gib", 1073741824.0},
                 {"t", 1e12},
                 {"tb", 1e12},
                 {"tib", 1099511627776.0}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcasecmp(end, units[i].suffix) == 0) return v * units[i].mult;
    return -1;
}
