/* zerotrain: the job a checkpoint directory belongs to: <checkpoint_dir>/owner.json
 * (docs/formats.md), written by rank 0 before training. A directory holds one job's
 * checkpoints, so that one job cannot resume from, prune or overwrite another's. Engine-free. */
#ifndef ZT_ENGINE_CKPT_OWNER_H
#define ZT_ENGINE_CKPT_OWNER_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/jobfile.h"
#include "../common/status.h"

typedef struct zt_ckpt_owner {
    bool has_job_id;        /* false: a run without a coordinator (zctl run); "job_id": null */
    int64_t job_id;         /* the coordinator's job id */
    char job_name[ZT_NAME_MAX];
    char submit_key[256];   /* "" when none */
    char created[32];       /* ISO-8601 UTC, when the record was written; "" for this process */
} zt_ckpt_owner;
/* This process's job: ZT_JOB_ID (set by the coordinator through zagent; absent under zctl
 * run), ZT_SUBMIT_KEY (may be absent) and the job's name. ZT_ERR_CONFIG when ZT_JOB_ID is set
 * but not a non-negative integer. */
zt_status zt_ckpt_owner_from_env(zt_ckpt_owner *me, const char *job_name, zt_err *err);
/* Reads dir's owner.json into *out. ZT_OK with *found false when there is none; ZT_ERR_CONFIG
 * naming the file (with *found true) when it is not an owner record; ZT_ERR_IO when it cannot
 * be read. Follows no symbolic link to the record. Thread-safe. */
zt_status zt_ckpt_owner_read(const char *dir, zt_ckpt_owner *out, bool *found, zt_err *err);
/* The same job: both have the same job id, or neither has one (two local runs). */
bool zt_ckpt_owner_same(const zt_ckpt_owner *a, const zt_ckpt_owner *b);
/* Before a run starts (every rank, no writing): ZT_ERR_CONFIG naming the owner when dir
 * belongs to another job, unless takeover (then an unreadable record is no error either).
 * ZT_OK when dir or its owner.json does not exist yet. */
zt_status zt_ckpt_owner_check(const char *dir, const zt_ckpt_owner *me, bool takeover,
                              zt_err *err);
/* Records me as the owner of dir, which exists, durably, unless it already is; replaces
 * another job's record (or one that is not an owner record) only with takeover, logging it.
 * ZT_ERR_CONFIG naming the owner when dir belongs to another job. The local part of
 * zt_ckpt_claim (ckpt.h), done by rank 0. */
zt_status zt_ckpt_owner_claim(const char *dir, const zt_ckpt_owner *me, bool takeover,
                              zt_err *err);
/* Whether path is dir or lies inside it, both resolved (symbolic links, "..");
 * false when either does not exist. */
bool zt_ckpt_path_inside(const char *path, const char *dir);

#endif
