/* zerotrain: one logging call for every binary. A line carries time, level, node, rank, pid
 * and subsystem; warnings and errors also carry file:line. The level is checked before the
 * arguments are evaluated, so disabled debug logging costs one comparison. */
#ifndef ZT_COMMON_LOG_H
#define ZT_COMMON_LOG_H

#include <stdio.h>

typedef enum {
    ZT_LOG_ERROR = 0,
    ZT_LOG_WARN = 1,
    ZT_LOG_INFO = 2,
    ZT_LOG_DEBUG = 3,
} zt_log_level;

extern int zt_log_level_current;

#define ZT_LOG(level, subsys, ...)                                                                 \
    do {                                                                                           \
        if ((int)(level) <= zt_log_level_current)                                                  \
            zt_log_write((level), (subsys), __FILE__, __LINE__, __VA_ARGS__);                      \
    } while (0)

#define ZT_ERROR(subsys, ...) ZT_LOG(ZT_LOG_ERROR, subsys, __VA_ARGS__)
#define ZT_WARN(subsys, ...) ZT_LOG(ZT_LOG_WARN, subsys, __VA_ARGS__)
#define ZT_INFO(subsys, ...) ZT_LOG(ZT_LOG_INFO, subsys, __VA_ARGS__)
#define ZT_DEBUG(subsys, ...) ZT_LOG(ZT_LOG_DEBUG, subsys, __VA_ARGS__)

/* Writes one line. Use the macros; thread-safe (one write(2) per line). */
void zt_log_write(zt_log_level level, const char *subsys, const char *file, int line,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Process identity printed on every line: node name (NULL = hostname) and rank (-1 = none).
 * Call once at start-up, before threads. */
void zt_log_set_identity(const char *node, int rank);
/* Sets the level; also read at first use from ZT_LOG_LEVEL (error|warn|info|debug). */
void zt_log_set_level(zt_log_level level);
/* Parses "error|warn|info|debug"; returns -1 if unknown. */
int zt_log_parse_level(const char *s);
/* Where lines go (default stderr). Not owned. */
void zt_log_set_file(FILE *f);

#endif
