/* zerotrain: sharded checkpoints (docs/formats.md). CKPT_DIR/step_NNNNNNNN/ holds one
 * rank_NNNNN.zts per rank — that rank's chunk of every unit's fp32 master weights and Adam
 * moments, CRC32C-checksummed — and meta.json, written by rank 0 last, after every shard is
 * durable: a step directory without meta.json is not a checkpoint. Chunks follow the world
 * partition (chunk r of unit u = unit positions [r*S_u, (r+1)*S_u)) whatever the ZeRO stage,
 * so any rank count and stage can load any checkpoint by reading the positions it needs. */
#ifndef ZT_ENGINE_CKPT_H
#define ZT_ENGINE_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/dtype.h"
#include "../common/jobfile.h"
#include "../common/status.h"

typedef struct zt_engine zt_engine;

#define ZT_CKPT_SHARD_MAGIC "ZTSHARD"
#define ZT_CKPT_VERSION 2

/* There is no RNG state to checkpoint: training draws no random numbers (no dropout; the
 * sample order is a function of the step, docs/formats.md "Sample order"), and the
 * only randomness, the initialisation, is a function of model.seed, which each shard header
 * (init_seed) and meta.json's job record. Resuming therefore needs only the state below. */

/* On-disk layout of a rank shard (little-endian):
 *   header (256 bytes, zt_shard_header)
 *   chunk table at byte 256: CRC32C of every (unit, section) chunk, n_units * 3 uint32 in
 *     payload order, zero-padded to payload_offset (a multiple of 64)
 *   payload at payload_offset: for each unit u, S_u fp32 master values, S_u exp_avg,
 *     S_u exp_avg_sq (the chunks; padding positions are zero).
 * table_crc32c covers the padded table, so every byte of the file is checksummed; it is also
 * the shard's "crc32c" in meta.json. The header repeats the training state that meta.json
 * records: a reader refuses a meta.json that disagrees with any shard, naming the field. */
typedef struct zt_shard_header {
    char magic[8];            /* "ZTSHARD\0" */
    uint32_t version;         /* ZT_CKPT_VERSION */
    uint32_t rank, world;     /* this shard's rank, and how many ranks wrote the checkpoint */
    uint32_t stage;           /* ZeRO stage of the run that wrote it */
    uint32_t n_units;         /* L + 2 */
    uint32_t sections;        /* 3: master, exp_avg, exp_avg_sq */
    uint64_t step;            /* optimizer steps taken (skipped ones included) */
    uint64_t payload_offset;  /* byte offset of the payload */
    uint64_t payload_bytes;   /* 12 * sum of S_u */
    uint32_t table_crc32c;    /* CRC32C of the chunk table, padding included */
    uint32_t units_crc32c;    /* CRC32C of (numel_u, S_u) as uint64 pairs, u = 0.. */
    uint64_t applied_steps, skipped_steps;
    uint64_t train_batch_size, micro_batch, grad_accum;
    double ls_scale;          /* loss scaler (1, unused, without fp16) */
    int64_t ls_iter, ls_last_overflow;
    int32_t ls_hysteresis_left;
    uint32_t precision;       /* zt_dtype of the parameters */
    uint32_t dims[6];         /* n_layer, n_head, n_embd, block_size, vocab_size, padded vocab */
    uint64_t init_seed;       /* model.seed of the job */
    uint8_t reserved[84];
    uint32_t header_crc32c;   /* CRC32C of the header bytes before this field */
} zt_shard_header;
_Static_assert(sizeof(zt_shard_header) == 256, "checkpoint shard header must be 256 bytes");
_Static_assert(offsetof(zt_shard_header, header_crc32c) == 252,
               "the header checksum must be the header's last field");

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

/* Resolves path (a checkpoint directory: its newest complete step; or a step directory) to a
 * step directory that holds meta.json. */
zt_status zt_ckpt_resolve(const char *path, char *step_dir, size_t len, zt_err *err);
/* Before resuming on `world` ranks: opens the checkpoint (all of zt_ckpt_open's checks), takes
 * its train_batch_size and re-derives the accumulation steps from the job's micro batch (an
 * elastic batch). Refuses a batch the new rank count cannot form, and a model that differs
 * from the checkpoint's. */
zt_status zt_ckpt_adapt_job(zt_job *job, const char *step_dir, int world, zt_err *err);

/* A checkpoint that failed verification: the statuses (ZT_ERR_CORRUPT, ZT_ERR_FORMAT) with
 * which zt_ckpt_resolve, zt_ckpt_open, zt_ckpt_adapt_job and zt_ckpt_load say that the
 * checkpoint itself is damaged (a checksum mismatch, a truncated shard, a bad meta.json, a
 * step directory without meta.json), as opposed to a missing path, an I/O error or a job
 * that does not fit it. zworker names such a checkpoint (ckpt_bad) so that the coordinator
 * resumes from an older one. */
bool zt_ckpt_status_is_bad(zt_status st);

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

/* Reader (no engine): export and inspect. */
typedef struct zt_ckpt zt_ckpt;
/* Opens a checkpoint (a step directory or a checkpoint directory's newest), parses and
 * validates meta.json (every field present with its type and range, its own checksum
 * meta_crc32c), and checks that every shard exists with the size meta.json records, an intact
 * header and chunk table, and the same state as meta.json (step, stage, precision, batch,
 * loss scaler, model, layout). Each refusal names the file and, for meta.json, the field.
 * Payload checksums are verified by zt_ckpt_verify (all) or while loading (what is read). */
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
