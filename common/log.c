/* zerotrain: logging (see log.h). */
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "settings.h"

int zt_log_level_current = ZT_LOG_INFO;

static char log_node[64];
static int log_rank = -1;
static FILE *log_file;

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

int zt_log_parse_level(const char *s)
{
    if (!s)
        return -1;
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return ZT_LOG_WARN;
    return -1;
}

void zt_log_set_level(zt_log_level level)
{
    zt_log_level_current = (int)level;
}

void zt_log_set_file(FILE *f)
{
    log_file = f;
}

void zt_log_set_identity(const char *node, int rank)
{
    if (node && node[0]) {
        snprintf(log_node, sizeof(log_node), "%s", node);
    } else if (gethostname(log_node, sizeof(log_node) - 1) != 0) {
        snprintf(log_node, sizeof(log_node), "localhost");
    }
    log_node[sizeof(log_node) - 1] = '\0';
    log_rank = rank;
    const char *v = zt_setting_raw(ZT_SET_LOG_LEVEL);
    int lvl = zt_log_parse_level(v);
    if (lvl >= 0)
        zt_log_level_current = lvl;
    else if (v)
        zt_setting_warn(ZT_SET_LOG_LEVEL, v);
}

void zt_log_write(zt_log_level level, const char *subsys, const char *file, int line,
                  const char *fmt, ...)
{
    if (!log_node[0])
        zt_log_set_identity(NULL, log_rank);
    char buf[4096];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[level < 4 ? level : 3], log_node);
    if (log_rank >= 0)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, " rank=%d", log_rank);
    n += snprintf(buf + n, sizeof(buf) - (size_t)n, " pid=%d [%s] ", (int)getpid(), subsys);
    if (level <= ZT_LOG_WARN && n < (int)sizeof(buf)) {
        const char *base = strrchr(file, '/');
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s:%d: ", base ? base + 1 : file, line);
    }
    if (n < (int)sizeof(buf)) {
        va_list ap;
        va_start(ap, fmt);
        n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    if (n >= (int)sizeof(buf) - 1)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    FILE *f = log_file ? log_file : stderr;
    fflush(f);
    ssize_t w = write(fileno(f), buf, (size_t)n);
    (void)w;
}
