/* zerotrain: sharded checkpoints (DESIGN.md "Checkpoint"). CKPT_DIR/step_NNNNNNNN/ holds one
 * rank_NNNNN.zts per rank — that rank's chunk of every unit's fp32 master weights and Adam
 * moments, CRC32C-checksummed — and meta.json, written by rank 0 last, after every shard is
 * durable: a step directory without meta.json is not a checkpoint. Chunks follow the world
 * partition (chunk r of unit u = unit positions [r*S_u, (r+1)*S_u)) whatever the ZeRO stage,
 * so any rank count and stage can load any checkpoint by reading the positions it needs. */
#ifndef ZT_ENGINE_CKPT_H
#define ZT_ENGINE_CKPT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/dtype.h"
#include "../common/jobfile.h"
#include "../common/status.h"

typedef struct zt_engine zt_engine;

#define ZT_CKPT_SHARD_MAGIC "ZTSHARD"
#define ZT_CKPT_VERSION 1

/* On-disk header of a rank shard; then the payload: for each unit, S_u fp32 master values,
 * S_u exp_avg, S_u exp_avg_sq. */
typedef struct zt_shard_header {
    char magic[8];          /* "ZTSHARD\0" */
    uint32_t version;       /* ZT_CKPT_VERSION */
    uint32_t rank, world, stage;
    uint32_t n_units;
    uint32_t sections;      /* 3 */
    uint64_t step;
    uint64_t payload_bytes;
    uint32_t payload_crc32c;
    uint32_t header_crc32c; /* CRC32C of the header bytes before this field */
    uint8_t reserved[8];
} zt_shard_header;
_Static_assert(sizeof(zt_shard_header) == 64, "checkpoint shard header must be 64 bytes");

/* Engine side (collective: every rank calls them at the same point). */
/* Snapshots this rank's shard to host memory and starts writing it in the background. */
zt_status zt_ckpt_save_begin(zt_engine *e, zt_err *err);
/* Waits for the background write, then rank 0 commits meta.json once every shard is durable,
 * and prunes old checkpoints (keep_checkpoints). A no-op when no save is pending. */
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
/* Loads a checkpoint into a freshly created engine, re-sharding for its rank count and stage. */
zt_status zt_ckpt_load(zt_engine *e, const char *path, zt_err *err);

/* Resolves path (a checkpoint directory: its newest complete step; or a step directory) to a
 * step directory that holds meta.json. */
zt_status zt_ckpt_resolve(const char *path, char *step_dir, size_t len, zt_err *err);
/* Before resuming on `world` ranks: takes the checkpoint's train_batch_size and re-derives
 * the accumulation steps from the job's micro batch (an elastic batch). Refuses a batch the
 * new rank count cannot form, and a model that differs from the checkpoint's. */
zt_status zt_ckpt_adapt_job(zt_job *job, const char *step_dir, int world, zt_err *err);

/* Reader (no engine): export and inspect. */
typedef struct zt_ckpt zt_ckpt;
/* Opens a checkpoint (a step directory or a checkpoint directory's newest), parses meta.json
 * and checks that every shard exists with the size meta.json records and a header that
 * agrees with it. Checksums are verified by zt_ckpt_verify. */
zt_status zt_ckpt_open(zt_ckpt **out, const char *path, zt_err *err);
void zt_ckpt_close(zt_ckpt *c);
zt_status zt_ckpt_verify(zt_ckpt *c, zt_err *err);
/* Values of section (0 master, 1 exp_avg, 2 exp_avg_sq) at positions [pos, pos+len) of unit u. */
zt_status zt_ckpt_read(zt_ckpt *c, int section, int u, size_t pos, size_t len, float *out,
                       zt_err *err);
int64_t zt_ckpt_step(const zt_ckpt *c);

/* Writes the consolidated model: format "llmc" or "safetensors", dtype ZT_F32 or ZT_BF16,
 * streaming one tensor at a time. */
zt_status zt_ckpt_export(const char *path, const char *format, zt_dtype dtype, const char *out,
                         zt_err *err);
/* Prints what a checkpoint holds and verifies every checksum. */
zt_status zt_ckpt_inspect(const char *path, FILE *out, bool json, zt_err *err);

#endif
