/* zerotrain: the ZeRO partition of one rank — which model states are sharded at the configured
 * stage, where each unit's part lies in the flat parameter, gradient and optimizer buffers, and
 * which collectives a micro-step and a step run. The only code that interprets the stage. */
#ifndef ZT_ENGINE_ZERO_H
#define ZT_ENGINE_ZERO_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/jobfile.h"
#include "../common/status.h"

/* Elements of padding granularity per rank: shards start 64-byte aligned. */
#define ZT_SHARD_ALIGN 16

/* The partition is immutable once built; any number of threads may ask it questions.
 *
 * Geometry, the same at every stage: unit u (the embeddings, each block, the final layer norm)
 * of unit_numel[u] real elements is padded to P_u, a multiple of world * ZT_SHARD_ALIGN, and cut
 * into world equal chunks of S_u = P_u / world; rank r's chunk is unit positions
 * [r * S_u, (r + 1) * S_u). A full buffer holds every unit's P_u elements one after the other,
 * a shard buffer every unit's S_u (this rank's chunk).
 *
 * What the stage changes: whether the parameter and gradient buffers are full or shard buffers,
 * and the optimizer region, the unit positions whose optimizer state this rank keeps and
 * updates (the whole padded unit when the optimizer is not sharded, else this rank's chunk). */
typedef struct zt_zero zt_zero;

/* Builds the partition of rank `rank` of `world` over n_units units of unit_numel[u] real
 * elements each, from the job's zero_optimization block (stage, stage-3 limits, offload ratio).
 * unit_numel is copied. Fails only with ZT_ERR_NOMEM. */
zt_status zt_zero_create(zt_zero **out, const zt_zero_cfg *cfg, const size_t *unit_numel,
                         int n_units, int world, int rank, zt_err *err);
void zt_zero_destroy(zt_zero *z); /* NULL is a no-op */

/* The configured stage, 0-3: for records and messages (checkpoint metadata) only; what it
 * means is asked of the functions below. */
int zt_zero_stage(const zt_zero *z);

/* ---- what is sharded ---- */

/* Each rank keeps only its chunk of the parameters (stage 3) and gathers a unit to use it;
 * otherwise it keeps all of them. */
bool zt_zero_params_sharded(const zt_zero *z);
/* Each rank keeps only its chunk of the reduced gradients (stages 2-3); otherwise the full
 * gradients, reduced at the accumulation boundary. */
bool zt_zero_grads_sharded(const zt_zero *z);
/* Each rank keeps and updates the optimizer state of its chunk only (stages 1-3); otherwise of
 * every element, as every other rank does. */
bool zt_zero_optim_sharded(const zt_zero *z);

/* ---- geometry (the same at every stage) ---- */

int zt_zero_units(const zt_zero *z);
/* Per-unit tables, n_units entries, owned by z: P_u, S_u, and the unit position where this
 * rank's optimizer region starts (0 when the optimizer is not sharded, else rank * S_u). */
const size_t *zt_zero_padded_sizes(const zt_zero *z);
const size_t *zt_zero_shard_sizes(const zt_zero *z);
const size_t *zt_zero_region_starts(const zt_zero *z);
size_t zt_zero_padded_total(const zt_zero *z); /* sum of P_u: a full buffer */
size_t zt_zero_shard_total(const zt_zero *z);  /* sum of S_u: a shard buffer */
/* Largest P_u over the blocks and the final unit (unit 0, the embeddings, excluded): the size
 * of a working slot for any unit but 0. 0 when there is no such unit. */
size_t zt_zero_max_block(const zt_zero *z);

/* ---- model-state buffers ---- */

/* Elements of this rank's parameter buffer (the parameter dtype) and gradient buffer (the
 * gradient dtype): a full buffer or a shard buffer, as the stage shards them. */
size_t zt_zero_param_elems(const zt_zero *z);
size_t zt_zero_grad_elems(const zt_zero *z);

/* What this rank's parameter (or gradient) buffer holds of unit u: unit positions
 * [start, start + len) from buffer element `off` on (the whole padded unit, or this rank's
 * chunk). */
typedef struct zt_zero_span {
    size_t off, start, len;
} zt_zero_span;
zt_zero_span zt_zero_param_span(const zt_zero *z, int u);
zt_zero_span zt_zero_grad_span(const zt_zero *z, int u);
/* The buffer element holding unit position pos of unit u; pos must lie in that buffer's span
 * (any position when the buffer is full, this rank's chunk when it is a shard). */
size_t zt_zero_param_index(const zt_zero *z, int u, size_t pos);
size_t zt_zero_grad_index(const zt_zero *z, int u, size_t pos);

/* ---- the optimizer region ---- */

/* Region element j of unit u is unit position zt_zero_region_starts(z)[u] + j. The regions of
 * all units, one after the other, are this rank's optimizer elements: region element j of unit
 * u is optimizer element zt_zero_region_offset(z, u) + j. */
size_t zt_zero_region_offset(const zt_zero *z, int u);
/* Real (unpadded) elements of unit u's region: the padding is never updated nor saved. */
size_t zt_zero_region_len(const zt_zero *z, int u);
/* Optimizer elements of this rank, padding included: sum of the regions' padded sizes. */
size_t zt_zero_region_total(const zt_zero *z);
/* Optimizer offload (Twin-Flow): the first device_elems optimizer elements keep their state in
 * device memory, the remaining host_elems in host memory, where the host updates them
 * (offload_optimizer.ratio of the region, rounded; all on the device without offload). */
size_t zt_zero_device_elems(const zt_zero *z);
size_t zt_zero_host_elems(const zt_zero *z);

/* ---- collectives ---- */

/* What backward does with a unit's gradient once it is complete for a micro-step. */
typedef enum zt_zero_micro_reduce {
    ZT_ZERO_MICRO_ACCUMULATE,     /* add it into the full gradient buffer (stages 0-1) */
    ZT_ZERO_MICRO_REDUCE_SCATTER, /* reduce-scatter it at once; each rank adds its reduced chunk
                                   * into its gradient shard (stages 2-3) */
} zt_zero_micro_reduce;
zt_zero_micro_reduce zt_zero_micro(const zt_zero *z);

/* What the step runs on the gradient buffer at the accumulation boundary, before the
 * optimizer. */
typedef enum zt_zero_boundary_reduce {
    ZT_ZERO_BOUNDARY_NONE,           /* one rank, or reduced per micro-step already */
    ZT_ZERO_BOUNDARY_ALLREDUCE,      /* stage 0: the whole buffer, every rank gets the sum */
    ZT_ZERO_BOUNDARY_REDUCE_SCATTER, /* stage 1: each unit, into each rank's region of it */
} zt_zero_boundary_reduce;
zt_zero_boundary_reduce zt_zero_boundary(const zt_zero *z);

/* After the optimizer updated the regions: every rank's updated region of each unit is
 * all-gathered into the full parameter buffers (stages 1-2 on more than one rank). */
bool zt_zero_gathers_after_step(const zt_zero *z);
/* A unit's parameters are all-gathered from the shards for each use (stage 3), ahead of it
 * when a working slot is free. */
bool zt_zero_gathers_per_use(const zt_zero *z);
/* A gathered unit is dropped as soon as its use ends, so the next use gathers it again
 * (stage 3 with stage3_max_reuse_distance 0, DeepSpeed's release-after-use); otherwise it
 * stays in its working slot until the slot is needed. */
bool zt_zero_release_after_use(const zt_zero *z);
/* How many blocks may be held gathered at once, out of `slots` working slots: the slots, or at
 * stage 3 the blocks stage3_max_live_parameters allows (at least one). */
int zt_zero_live_blocks(const zt_zero *z, int slots);
/* Elements of the largest reduce-scatter a step runs (one unit's chunk per rank, stages 1-3),
 * 0 when it runs none (stage 0 only all-reduces): what the communicator's buffers follow. */
size_t zt_zero_max_reduce_scatter(const zt_zero *z);

#endif
