/* zerotrain: the planner's micro batch for a job whose train_micro_batch_size_per_gpu is
 * "auto" (DeepSpeed's autotuning, done before launch from the memory plan): the largest micro
 * batch whose plan (zt_engine_plan) fits the rank's memory with a 10% margin, of at most
 * ZT_AUTO_BATCH_MAX_TOKENS tokens, and, when the global batch is fixed, divides it. */
#ifndef ZT_ENGINE_AUTOBATCH_H
#define ZT_ENGINE_AUTOBATCH_H

#include <stdint.h>

#include "common/jobfile.h"

/* The share of memory the plan may fill: the rest is the margin for what it does not model. */
#define ZT_AUTO_BATCH_FILL 0.9
/* The most tokens a picked micro batch holds (micro batch x block_size). Past this the matmuls
 * are large enough that a bigger micro batch no longer raises tokens/s (GPT-2 124M on an H200
 * peaks at 128 x 1024 tokens), while a small model on a large host would otherwise get a micro
 * batch of many thousands and a first step of minutes. */
#define ZT_AUTO_BATCH_MAX_TOKENS 131072

/* The memory one rank may use, in bytes, and where that figure comes from (`why`, e.g. "host
 * memory 23.4 GiB / 2 ranks on the node"): on cuda the GPU's memory; on the CPU the smallest
 * of the process's RLIMIT_AS and RLIMIT_DATA, the cgroup's memory.max / local_ranks and
 * MemTotal / local_ranks; on either, at most ZT_MEMORY_LIMIT (bytes, for one rank) when it is
 * set. Thread-safe. */
zt_status zt_auto_batch_budget(const zt_job *job, int local_ranks, int64_t *budget, char *why,
                               size_t why_cap, zt_err *err);

/* When job->ds.micro_auto: picks the micro batch for world ranks, local_ranks of them on this
 * node (<= 0: the job's ranks_per_node, at most world), within budget bytes (<= 0:
 * zt_auto_batch_budget's), stores it in job->ds.micro_picked, resolves the batch triad and
 * writes the choice into job->ds.notes. A job whose micro batch is not "auto" is left alone.
 * ZT_ERR_NOMEM when not even a micro batch of 1 fits (the message gives both figures and what
 * to change), ZT_ERR_CONFIG when the global batch cannot be split over world ranks. */
zt_status zt_auto_batch_pick(zt_job *job, int world, int local_ranks, int64_t budget, zt_err *err);

#endif
