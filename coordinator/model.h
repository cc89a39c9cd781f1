/* zerotrain: the coordinator's vocabulary — job, attempt and agent states with their names,
 * and the records the store reads and writes. States use the numbers of the matching
 * zt.v1 enums (zerotrain.proto), so converting to the wire is a cast. */
#ifndef ZT_COORDINATOR_MODEL_H
#define ZT_COORDINATOR_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    ZT_JOB_QUEUED = 1,
    ZT_JOB_SCHEDULED = 2,
    ZT_JOB_RUNNING = 3,
    ZT_JOB_COMPLETED = 4,
    ZT_JOB_FAILED = 5,
    ZT_JOB_CANCELED = 6,
} zt_job_state;

typedef enum {
    ZT_ATTEMPT_STARTING = 1,
    ZT_ATTEMPT_RUNNING = 2,
    ZT_ATTEMPT_SUCCEEDED = 3,
    ZT_ATTEMPT_FAILED = 4,
    ZT_ATTEMPT_CANCELED = 5,
} zt_attempt_state;

typedef enum { ZT_AGENT_ALIVE = 1, ZT_AGENT_LOST = 2 } zt_agent_state;

/* DELETED: the directory was removed (keep_checkpoints); kept as history, never resumed.
 * BAD: a worker told to resume from it found it damaged (checksum, truncated shard, bad
 * meta.json); kept with the worker's reason, never resumed from again. */
typedef enum {
    ZT_CKPT_PARTIAL = 1,
    ZT_CKPT_COMMITTED = 2,
    ZT_CKPT_DELETED = 3,
    ZT_CKPT_BAD = 4,
} zt_ckpt_state;

/* Worker phases and log sources: numbers of zt.v1.WorkerPhase / zt.v1.LogSource. */
#define ZT_PHASE_EXITED 7
#define ZT_LOG_STDOUT 1
#define ZT_LOG_STDERR 2
#define ZT_LOG_EVENT 3

/* "QUEUED", ...; "?" when out of range. */
const char *zt_job_state_name(zt_job_state s);
const char *zt_attempt_state_name(zt_attempt_state s);
const char *zt_agent_state_name(zt_agent_state s);
const char *zt_ckpt_state_name(zt_ckpt_state s);
/* Inverse of the *_name functions; 0 when the name is unknown. */
int zt_job_state_parse(const char *name);
int zt_attempt_state_parse(const char *name);
int zt_agent_state_parse(const char *name);
int zt_ckpt_state_parse(const char *name);
bool zt_job_state_terminal(zt_job_state s);
bool zt_attempt_state_terminal(zt_attempt_state s);

/* 64-bit FNV-1a of len bytes as 16 lowercase hex digits + NUL. */
void zt_hash_hex(const void *data, size_t len, char out[17]);

/* Records as the store reads and writes them. Strings are borrowed: on reads they are valid
 * during the callback only; on writes the store copies what it needs. */
typedef struct zt_job_rec {
    int64_t id;
    const char *submit_key; /* NULL = none */
    const char *name;
    zt_job_state state;
    const char *reason;
    int priority;
    int ranks, ranks_per_node;
    int device; /* a zt_device (common/device.h): zt.v1.Device's numbers */
    int max_restarts, restarts;
    int64_t total_steps, last_step;
    const char *spec_text, *spec_dir, *spec_json, *spec_hash, *user;
    int64_t submitted_ms, started_ms, ended_ms;
    int64_t attempt_id; /* current or last attempt, 0 = none */
    int64_t metrics_stride;
    int64_t eligible_ms; /* restart backoff: not placed before this wall-clock time; 0 = none */
    const char *checkpoint_dir; /* train.checkpoint_dir as resolved at submit; "" = unknown */
} zt_job_rec;

typedef struct zt_attempt_rec {
    int64_t id, job_id;
    int number;
    zt_attempt_state state;
    const char *reason;
    int world_size;
    const char *resume_path;
    int64_t resume_step;
    int64_t created_ms, started_ms, ended_ms;
} zt_attempt_rec;

typedef struct zt_rank_rec {
    int64_t attempt_id;
    int rank;
    const char *agent;
    int local_rank, device_index;
    int pid;
    bool exited;
    int exit_code, exit_signal;
    int64_t last_step;
} zt_rank_rec;

typedef struct zt_agent_rec {
    const char *name, *hostname, *address, *version;
    int device, slots;
    const char *gpus_json; /* [{"index":0,"name":"...","memory_total":N}, ...] */
    int64_t incarnation;
    zt_agent_state state;
    int64_t registered_ms, last_seen_ms;
    const char *key_sha256; /* hex SHA-256 of its agent key; "" = none */
} zt_agent_rec;

typedef struct zt_event_rec {
    int64_t id, time_ms;
    int64_t job_id;     /* 0 = none */
    int64_t attempt_id; /* 0 = none */
    const char *agent;  /* NULL = none */
    const char *kind;   /* "job", "attempt", "rank", "agent", "checkpoint" */
    const char *from_state, *to_state, *reason;
} zt_event_rec;

typedef struct zt_log_rec {
    int64_t id, time_ms, job_id, attempt_id;
    int rank; /* -1 for events */
    int source;
    const char *text;
} zt_log_rec;

typedef struct zt_metric_rec {
    int64_t job_id, attempt_id, step, time_ms;
    const char *kv; /* "loss=3.41 lr=0.0003 ..." */
} zt_metric_rec;

typedef struct zt_ckpt_rec {
    int64_t id, job_id, attempt_id, step;
    const char *path;
    zt_ckpt_state state;
    int world_size, shards;
    int64_t bytes, created_ms, committed_ms;
    int64_t deleted_ms;     /* DELETED: when the removal was recorded */
    const char *bad_reason; /* BAD: what the worker found wrong; "" otherwise */
} zt_ckpt_rec;

typedef struct zt_shard_rec {
    int64_t ckpt_id;
    int rank;
    const char *file;
    int64_t bytes;
    uint32_t crc32c;
    int64_t reported_ms;
} zt_shard_rec;

#endif
