/* zerotrain: the training engine of one rank — GPT-2 with ZeRO stages 0-3, mixed precision,
 * optimizer offload, activation checkpointing, evaluation and checkpoints. zworker wraps it
 * in a process; tests drive it in-process. One engine per thread; not thread-safe. */
#ifndef ZT_ENGINE_ENGINE_H
#define ZT_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/jobfile.h"
#include "../common/status.h"
#include "memacct.h"

typedef struct zt_engine zt_engine;

typedef struct zt_engine_opts {
    int rank, world_size, local_rank;
    const char *rendezvous; /* tcp://host:port; NULL for world_size 1 */
    const char *session;    /* run attempt id, may be NULL */
    int comm_timeout_ms;    /* <= 0: default */
    const char *resume;     /* checkpoint dir or step dir to resume from, or NULL */
    FILE *step_out;         /* where rank 0 prints its step lines (NULL = none) */
    /* Machine-readable lines for the agent, -1 = none. Every line starts "rank=R " and is
     * space-separated key=value pairs:
     *   rank=R phase=rendezvous|loading|training|evaluating|checkpointing
     *   rank=R step=N loss=X ... (the step line's fields) coll_seq=S      every rank, each step
     *   rank=R ckpt step=N file=/abs/rank_0000R.zts bytes=B crc32c=XXXXXXXX  shard durable
     *   rank=0 ckpt_commit step=N dir=/abs/step_0000000N                meta.json committed
     *   rank=0 ckpt_removed step=N dir=/abs/step_0000000N     deleted by keep_checkpoints
     * and, written by zworker before it exits 5 (docs/formats.md "zworker"):
     *   rank=R ckpt_bad step=N dir=/abs/step_0000000N why=TEXT  resume's checkpoint is damaged
     * (why= is last and takes the rest of the line, the error message without newlines) */
    int report_fd;
    bool no_final_save;     /* skip the save at the end of training (tests) */
    /* The job that checkpoint_dir belongs to (ckpt.h): rank 0 records it in owner.json once
     * the model is loaded, replacing another job's record only with owner_takeover. NULL:
     * no record is kept (tests). */
    const struct zt_ckpt_owner *owner;
    bool owner_takeover;
    /* Set (when not NULL) to whether zt_engine_create failed because the checkpoint in
     * `resume` failed verification (zt_ckpt_status_is_bad), not for another reason. */
    bool *resume_bad;
} zt_engine_opts;

/* What one optimizer step did (rank-local values unless noted). */
typedef struct zt_step_stats {
    int64_t step;         /* 1-based optimizer step */
    double loss;          /* mean over every target token of the global batch (all ranks) */
    double lr;
    double grad_norm;     /* global, unscaled, before clipping */
    double loss_scale;
    bool skipped;         /* non-finite gradient: not applied */
    int64_t skipped_total;
    double val_loss;      /* < 0 when no evaluation ran this step */
    double step_s, fwd_s, bwd_s, opt_s, comm_s;
    /* NVMe offload, where the optimizer's host part finishes in the background: how long the
     * last such part that finished took, from the start of its update to its last write-back
     * (the previous step's, overlapping this one); 0 when none */
    double opt_bg_s;
    double tokens_per_s;
    double tflops, mfu;
    uint64_t comm_bytes;  /* bytes this rank sent in collectives this step */
    int64_t mem[ZT_MEM_CATEGORY_COUNT]; /* current bytes by category */
    int64_t mem_peak;     /* peak total bytes this step */
    int64_t model_state_bytes;
} zt_step_stats;

/* Memory one rank of the job will allocate, by category, computed from the same table the
 * engine allocates from (no allocation, no I/O). world is the rank count.
 *
 * What a rank holds over a run: the buffers of the table (steady from start-up to exit), the
 * communicator's own staging and scratch (tcp; part of ZT_MEM_COMM), the checkpoint snapshot
 * (ZT_MEM_CKPT, from the first save on: the final save at the latest) and, only while the
 * model is initialised, the init transient (one unit in fp32, plus the whole llm.c file when
 * init is a file). peak_total = device_total + host_total + max(0, init_bytes - ckpt). On the
 * CPU path runtime_bytes is what the process costs beyond its buffers once it trains (code and
 * libraries, oneDNN's generated kernels, heap and stacks; measured, see ZT_PLAN_RUNTIME_BYTES),
 * and total_bytes predicts the worker's peak resident memory: the larger of start-up (buffers
 * without the snapshot, the init transient, ZT_PLAN_RUNTIME_START_BYTES) and training (every
 * buffer, runtime_bytes). Not modelled: a resume (checkpoint reading), the page cache of the
 * token shards (mapped, clean, reclaimable), and on cuda the CUDA context itself and NCCL's
 * buffers (there total_bytes is peak_total); the kernel context's device buffers (cuBLASLt
 * workspace, scratch) are backend_bytes, part of device_total. */
typedef struct zt_mem_plan {
    int64_t bytes[ZT_MEM_CATEGORY_COUNT];      /* device and host together */
    int64_t host_bytes[ZT_MEM_CATEGORY_COUNT]; /* the host part of each */
    int64_t device_total;  /* everything on the device (all of it on the CPU path) */
    int64_t backend_bytes; /* on cuda: the kernel context's device buffers, in device_total */
    int64_t host_total;    /* offloaded optimizer states, their staging, the checkpoint snapshot
                            * and the communicator's buffers */
    int64_t disk_bytes;    /* NVMe offload: this rank's swap files (about: each segment's last
                            * page is padding) */
    int64_t io_read_bytes;  /* NVMe offload: bytes this rank reads from its swap files in one
                             * training step, the sum over its swaps (about, as disk_bytes; for
                             * the parameter swap the most it can read) */
    int64_t io_write_bytes; /* ... and writes back in one training step */
    int64_t init_bytes;    /* host, only while the model is initialised */
    int64_t peak_total;    /* the most the engine holds at once (device and host) */
    int64_t runtime_bytes; /* the process beyond its buffers (CPU path; 0 on cuda) */
    int64_t total_bytes;   /* the process's peak: buffers, transients and runtime */
    size_t num_params;     /* Psi, with the padded vocabulary rows */
    size_t padded_params;  /* with the per-unit padding to the rank count */
} zt_mem_plan;
zt_status zt_engine_plan(const zt_job *job, int world, zt_mem_plan *out, zt_err *err);

/* Resident memory of a zworker process beyond its engine's buffers on the CPU path, once it
 * trains: code and shared libraries (about 9 MiB, oneDNN the most), oneDNN's generated kernels
 * (about 3.5 MiB), malloc's heap (oneDNN's packing buffers, which malloc keeps) and the stacks.
 * Measured with zworker on x86-64 Linux, one compute thread per rank: 13.5 to 18 MiB over
 * models from 0.1M to 10M parameters (tests/engine/test_plan.py prints the comparison); more
 * compute threads keep more packing buffers (about 21 MiB with 2 to 4, 24 to 28 MiB with 8).
 * Before its first step the process holds far less (nothing generated or paged in yet). */
#define ZT_PLAN_RUNTIME_BYTES ((int64_t)16 << 20)
#define ZT_PLAN_RUNTIME_START_BYTES ((int64_t)4 << 20)

/* Checks what a run will read before any process starts: the headers and sizes of the training
 * (and validation) shards, and the init file's header against the model. */
zt_status zt_engine_preflight(const zt_job *job, zt_err *err);

/* Builds the engine: joins the collective group, allocates model states for the ZeRO stage,
 * initialises (random, llm.c file, or checkpoint) and opens the data. The job is copied. */
zt_status zt_engine_create(zt_engine **out, const zt_job *job, const zt_engine_opts *opts,
                           zt_err *err);
void zt_engine_destroy(zt_engine *e); /* NULL is a no-op */

/* After a failure: when the communicator has failed, logs this rank's last collectives (kind,
 * size, sequence number, state) at ERROR, oldest first, so the log shows where each rank was;
 * a no-op otherwise (NULL included). Call it before logging the error itself. */
void zt_engine_log_comm_failure(const zt_engine *e);

/* Runs one optimizer step (gradient accumulation included). */
zt_status zt_engine_step(zt_engine *e, zt_step_stats *st, zt_err *err);
/* Mean validation loss over train.eval_steps batches (same samples every time). */
zt_status zt_engine_eval(zt_engine *e, double *loss, zt_err *err);
/* Runs the remaining steps with evaluation, step lines, checkpoints and the final save. */
zt_status zt_engine_train(zt_engine *e, zt_err *err);
/* Steps completed so far (including skipped ones). */
int64_t zt_engine_steps_done(const zt_engine *e);

/* CRC32C of this rank's full compute-precision parameters as it holds them (stage 3: as it
 * gathers them). Every rank must get the same value (collective in stage 3). */
zt_status zt_engine_param_digest(zt_engine *e, uint32_t *crc, zt_err *err);
/* Test hook (collective): rank 0 writes every unit's master weights, exp_avg and exp_avg_sq
 * (unpadded fp32, unit after unit) to path. */
zt_status zt_engine_dump_state(zt_engine *e, const char *path, zt_err *err);
/* Writes a checkpoint of the current state (collective). */
zt_status zt_engine_save(zt_engine *e, zt_err *err);

#endif
