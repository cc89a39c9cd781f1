/* zerotrain: sharded checkpoints saved and loaded by a running engine. The format and the
 * engine-free reader are ckpt_format.h; whose directory it is, ckpt_owner.h. Each rank writes
 * its shard in the background and rank 0 commits meta.json once every shard is durable; a
 * load re-shards for the new rank count and stage and verifies every chunk it reads. */
#ifndef ZT_ENGINE_CKPT_H
#define ZT_ENGINE_CKPT_H

#include <stdbool.h>

#include "../common/jobfile.h"
#include "../common/status.h"
#include "ckpt_format.h"
#include "ckpt_owner.h"

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
/* Engine side (collective, after the rendezvous): rank 0 records me as the owner of the job's
 * checkpoint_dir (creating it) unless it already is, replacing another job's record only with
 * takeover (logged); every rank returns the same outcome. */
zt_status zt_ckpt_claim(zt_engine *e, const zt_ckpt_owner *me, bool takeover, zt_err *err);

/* Before resuming on `world` ranks: opens the checkpoint (all of zt_ckpt_open's checks), takes
 * its train_batch_size and re-derives the accumulation steps from the job's micro batch (an
 * elastic batch). Refuses a batch the new rank count cannot form, and a model that differs
 * from the checkpoint's. */
zt_status zt_ckpt_adapt_job(zt_job *job, const char *step_dir, int world, zt_err *err);

#endif
