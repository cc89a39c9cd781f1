/* zerotrain: the file-system helper every program shares: mkdir -p, optionally durable. */
#ifndef ZT_COMMON_FSUTIL_H
#define ZT_COMMON_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>

/* Creates path and its missing parents with mode 0755. When durable, each directory it creates
 * is made durable by an fsync of its parent. Returns 0; -1 when a directory cannot be created
 * (errno set; ENOTDIR: a component exists and is not a directory; ENAMETOOLONG: path over
 * PATH_MAX), failed[cap] (when not NULL) naming it; -2 when the fsync of a parent failed
 * (errno set), failed naming that parent. Thread-safe. */
int zt_mkdirs(const char *path, bool durable, char *failed, size_t cap);

#endif
