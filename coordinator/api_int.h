/* zerotrain: what only coordinator/api*.c see — the JSON helpers the API's views share, and
 * the views of api_cluster.c that api.c routes to. */
#ifndef ZT_COORDINATOR_API_INT_H
#define ZT_COORDINATOR_API_INT_H

#include <jansson.h>

#include "coordinator/api.h"
#include "coordinator/coord_int.h"

/* ---- JSON helpers (api.c) ---- */

/* A JSON string of s ("" for NULL); bytes that are not UTF-8 become '?'. */
json_t *api_jstr(const char *s);
/* o[k] = v, taking v; null when v is NULL (out of memory). */
void api_set(json_t *o, const char *k, json_t *v);
/* Answers r with o as JSON (o is taken); 500 when it cannot be built. */
void api_reply_json(zt_http_req *r, int status, json_t *o);
/* "cpu" or "cuda" (zt.v1.Device). */
const char *api_device_name(int d);
/* The name of a zt.v1.WorkerPhase. */
const char *api_phase_name(int phase);
/* A job as the model has it (mu held, after a commit). */
json_t *api_job_live_json(const c_job *j);

/* ---- memory-only views and the dashboard's cancel (api_cluster.c) ---- */

void api_get_agents(zt_coord *c, zt_http_req *r);
void api_get_cluster(zt_coord *c, zt_http_req *r);
/* Cancels job id through the state thread and waits for the commit. */
void api_post_cancel(zt_coord *c, zt_http_req *r, int64_t id);

#endif
