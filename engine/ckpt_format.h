/* zerotrain: the sharded checkpoint format (docs/formats.md) and its engine-free reader, what
 * zctl's export and inspect and a resuming run's checks use. CKPT_DIR/step_NNNNNNNN/ holds one
 * rank_NNNNN.zts per rank — that rank's chunk of every unit's fp32 master weights and Adam
 * moments, CRC32C-checksummed — and meta.json, written by rank 0 last, after every shard is
 * durable: a step directory without meta.json is not a checkpoint. Chunks follow the world
 * partition (chunk r of unit u = unit positions [r*S_u, (r+1)*S_u)) whatever the ZeRO stage,
 * so any rank count and stage can load any checkpoint by reading the positions it needs. */
#ifndef ZT_ENGINE_CKPT_FORMAT_H
#define ZT_ENGINE_CKPT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

#define ZT_CKPT_SHARD_MAGIC "ZTSHARD"
#define ZT_CKPT_VERSION 2
#define ZT_CKPT_META_NAME "meta.json"
#define ZT_CKPT_SECTIONS 3 /* per unit: master, exp_avg, exp_avg_sq */

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

/* Resolves path (a checkpoint directory: its newest complete step; or a step directory) to a
 * step directory that holds meta.json. */
zt_status zt_ckpt_resolve(const char *path, char *step_dir, size_t len, zt_err *err);

/* A checkpoint that failed verification: the statuses (ZT_ERR_CORRUPT, ZT_ERR_FORMAT) with
 * which zt_ckpt_resolve, zt_ckpt_open, zt_ckpt_adapt_job and zt_ckpt_load say that the
 * checkpoint itself is damaged (a checksum mismatch, a truncated shard, a bad meta.json, a
 * step directory without meta.json), as opposed to a missing path, an I/O error or a job
 * that does not fit it. zworker names such a checkpoint (ckpt_bad) so that the coordinator
 * resumes from an older one. */
bool zt_ckpt_status_is_bad(zt_status st);

/* Reader (no engine): export, inspect and the checks before a resume. */
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

/* Prints what a checkpoint holds and verifies every checksum. */
zt_status zt_ckpt_inspect(const char *path, FILE *out, bool json, zt_err *err);

#endif
