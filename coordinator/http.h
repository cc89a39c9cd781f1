/* zerotrain: zcoord's HTTP listener. For now it serves a health page (GET /healthz: 200 when
 * serving, 503 otherwise) and a short index; the dashboard, JSON API and Prometheus metrics
 * come with a later piece and will replace this file's handler. One thread, one connection
 * at a time. */
#ifndef ZT_COORDINATOR_HTTP_H
#define ZT_COORDINATOR_HTTP_H

#include <stdbool.h>

#include "common/status.h"

typedef struct zt_http zt_http;

/* Returns whether the coordinator serves (for /healthz). */
typedef bool (*zt_http_health_fn)(void *arg);

/* Listens on addr ("host:port", port 0 picks one) and serves in a thread. Errors: ZT_ERR_IO
 * (cannot bind; the message names the address), ZT_ERR_INVALID (malformed address). */
zt_status zt_http_start(zt_http **out, const char *addr, zt_http_health_fn health, void *arg,
                        zt_err *err);
/* The bound port. */
int zt_http_port(const zt_http *h);
/* Stops the thread and closes the socket. NULL is a no-op. */
void zt_http_stop(zt_http *h);

#endif
