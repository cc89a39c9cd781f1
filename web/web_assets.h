/* zerotrain: the dashboard's files, embedded into zcoord at build time (web/embed.cmake writes
 * the table from the files listed in web/CMakeLists.txt). Served by coordinator/api.c. */
#ifndef ZT_WEB_ASSETS_H
#define ZT_WEB_ASSETS_H

#include <stddef.h>

typedef struct zt_web_file {
    const char *path; /* "/app.js" */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
} zt_web_file;

extern const zt_web_file zt_web_files[];
extern const size_t zt_web_n_files;

#endif
