/* zerotrain: sharded checkpoints saved and loaded by a running engine, and the job a
 * checkpoint directory belongs to. The format and the engine-free reader are ckpt_format.h.
 * Each rank writes its shard in the background and rank 0 commits meta.json once every shard
 * is durable; a load re-shards for the new rank count and stage and verifies every chunk it
 * reads. */
#ifndef ZT_ENGINE_CKPT_H
#define ZT_ENGINE_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/jobfile.h"
#include "../common/status.h"
#include "ckpt_format.h"

typedef struct zt_engine zt_engine;

/* Engine side (collective: every rank calls them at the same point). Every rank returns the
 * same outcome: when one rank fails, all return the lowest failing rank's status and message
 * ("rank R: ..."), so no rank reports a checkpoint that did not commit. */
/* Snapshots this rank's shard to host memory and starts writing it in the background. */
zt_status zt_ckpt_save_begin(zt_engine *e, zt_err *err);
/* Waits for the background write, then rank 0 commits meta.json once every shard is durable
 * (fsync of the step directory and of CKPT_DIR), every rank learns whether that worked, and
 * only then do ranks report their shards and rank 0 prunes old checkpoints
 * (keep_checkpoints). A failed save is an error on every rank (training stops: a run that
 * cannot checkpoint could not be restarted without losing work). No-op when none is pending. */
zt_status zt_ckpt_save_finish(zt_engine *e, zt_err *err);
/* Allocates and touches the host buffer that checkpoint snapshots go to (so the first save
 * does not stall on page faults). Called at start-up when the job checkpoints. */
zt_status zt_ckpt_prepare(zt_engine *e, zt_err *err);
/* Abandons a pending write and frees the snapshot buffer (engine teardown). */
void zt_ckpt_release(zt_engine *e);
/* True while this rank's background shard write has not finished (no waiting). */
bool zt_ckpt_write_pending(const zt_engine *e);
/* Waits for a background write and drops it uncommitted (the engine is going away after an
 * error; no collective). */
void zt_ckpt_save_abandon(zt_engine *e);
/* Loads a checkpoint into a freshly created engine, re-sharding for its rank count and stage.
 * Each rank reads only what it needs (all master values at stages 0-2, its own part at stage
 * 3, and its optimizer region's moments) and verifies the checksum of every chunk it reads
 * before using it, so a corrupted shard is refused by every rank (see above). */
zt_status zt_ckpt_load(zt_engine *e, const char *path, zt_err *err);

/* The job a checkpoint directory belongs to: <checkpoint_dir>/owner.json (docs/formats.md),
 * written by rank 0 before training. A directory holds one job's checkpoints, so that one job
 * cannot resume from, prune or overwrite another's. */
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
/* Engine side (collective, after the rendezvous): rank 0 records me as the owner of the job's
 * checkpoint_dir (creating it) unless it already is, replacing another job's record only with
 * takeover (logged); every rank returns the same outcome. */
zt_status zt_ckpt_claim(zt_engine *e, const zt_ckpt_owner *me, bool takeover, zt_err *err);
/* Whether path is dir or lies inside it, both resolved (symbolic links, "..");
 * false when either does not exist. */
bool zt_ckpt_path_inside(const char *path, const char *dir);

/* Before resuming on `world` ranks: opens the checkpoint (all of zt_ckpt_open's checks), takes
 * its train_batch_size and re-derives the accumulation steps from the job's micro batch (an
 * elastic batch). Refuses a batch the new rank count cannot form, and a model that differs
 * from the checkpoint's. */
zt_status zt_ckpt_adapt_job(zt_job *job, const char *step_dir, int world, zt_err *err);

#endif
