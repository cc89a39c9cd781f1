/* zerotrain: the limits of the zt.v1 protocol (proto/zerotrain.proto): what zcoord accepts in a
 * request, and what zctl and zagent check before they send one. */
#ifndef ZT_PROTO_LIMITS_H
#define ZT_PROTO_LIMITS_H

#define ZT_MAX_PRIORITY 1000
#define ZT_MAX_AGENT_SLOTS 4096
#define ZT_MAX_WORKERS_PER_HEARTBEAT 4096
#define ZT_MAX_BATCH_ENTRIES 10000
#define ZT_MAX_LOG_LINE 8192
#define ZT_MAX_RDZV_VALUE 65536
#define ZT_MAX_RDZV_WAIT_MS 60000
#define ZT_MAX_USER 256      /* SubmitJob user, bytes */
#define ZT_MAX_JOB_PATH 4096 /* SubmitJob job_path, bytes */
#define ZT_MAX_HOST 255      /* RegisterAgent hostname and address, bytes */
#define ZT_MAX_SERVICE 256   /* HealthCheckRequest service, bytes */

#endif
