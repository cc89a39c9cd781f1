/* zerotrain: what zcoord serves over HTTP behind the credential check of http.c — the
 * dashboard's files (web/, embedded at build time), the JSON API under /api/v1/, its event
 * streams, and /metrics in the Prometheus text format. Reads come from the coordinator's live
 * model (its lock held only to copy values) and from read-only store handles of its own, so
 * that no HTTP reader waits for the state thread or makes a heartbeat wait. */
#ifndef ZT_COORDINATOR_API_H
#define ZT_COORDINATOR_API_H

#include "coordinator/coord.h"
#include "coordinator/http.h"

/* The zt_http_handler_fn of zcoord: arg is the zt_coord. Thread-safe. */
void zt_api_handle(void *arg, zt_http_req *req);

/* Feeds h's event streams from c's commits from now on; NULL stops it (call before
 * zt_http_stop). */
void zt_api_attach(zt_coord *c, zt_http *h);

/* Writes the Prometheus text exposition of c (and of h's counters when h is not NULL) into a
 * new string (zt_free it); NULL when out of memory. */
char *zt_api_metrics_text(zt_coord *c, zt_http *h);

#endif
