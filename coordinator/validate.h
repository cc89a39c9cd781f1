/* zerotrain: checks of decoded RPC requests that need no state — missing fields, values out
 * of range, oversized lists — so every handler refuses bad input the same way (with
 * INVALID_ARGUMENT and the message written here) and the fuzz target can run them on
 * arbitrary bytes. Each returns true when the request is acceptable; otherwise why (cap
 * bytes) says what is wrong and what to do. Thread-safe. */
#ifndef ZT_COORDINATOR_VALIDATE_H
#define ZT_COORDINATOR_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/limits.h"
#include "proto/zerotrain.pb-c.h"

/* Every string field of m, nested messages and repeated fields included, is valid UTF-8
 * (protobuf `string` fields must be; standard clients cannot decode anything else) — except
 * zt.v1.LogEntry.text, which the ReportLogs handler cleans instead of refusing (worker output
 * is kept). Otherwise why names the first bad field ("gpus[1].name") and where it goes bad.
 * Run it before the other checks, whose messages may quote the request's strings. */
bool zt_check_strings(const ProtobufCMessage *m, char *why, size_t cap);

/* A name for agents: 1..128 of [A-Za-z0-9._-]. */
bool zt_valid_name(const char *s);
/* A metric key: 1..64 of [A-Za-z0-9_.]. */
bool zt_valid_metric_key(const char *s);

bool zt_check_submit(const Zt__V1__SubmitJobRequest *q, char *why, size_t cap);
bool zt_check_job_id(int64_t id, char *why, size_t cap);
bool zt_check_list_jobs(const Zt__V1__ListJobsRequest *q, char *why, size_t cap);
bool zt_check_get_metrics(const Zt__V1__GetMetricsRequest *q, char *why, size_t cap);
bool zt_check_get_logs(const Zt__V1__GetLogsRequest *q, char *why, size_t cap);
bool zt_check_register(const Zt__V1__RegisterAgentRequest *q, char *why, size_t cap);
bool zt_check_heartbeat(const Zt__V1__HeartbeatRequest *q, char *why, size_t cap);
bool zt_check_report_metrics(const Zt__V1__ReportMetricsRequest *q, char *why, size_t cap);
bool zt_check_report_checkpoint(const Zt__V1__ReportCheckpointRequest *q, char *why, size_t cap);
bool zt_check_report_checkpoint_removed(const Zt__V1__ReportCheckpointRemovedRequest *q, char *why,
                                        size_t cap);
bool zt_check_report_logs(const Zt__V1__ReportLogsRequest *q, char *why, size_t cap);
bool zt_check_rendezvous(const Zt__V1__RendezvousRequest *q, char *why, size_t cap);
/* grpc.health.v1.HealthCheckRequest: the service name's length. */
bool zt_check_health(const char *service, char *why, size_t cap);

#endif
