/* zerotrain: per-rank memory accounting by category (docs/formats.md "The step line").
 * Every tensor the engine allocates is charged to one category; current and peak bytes are
 * kept per category and in total, so a step can report what ZeRO saves and where memory goes.
 * Thread-safe (atomics). */
#ifndef ZT_ENGINE_MEMACCT_H
#define ZT_ENGINE_MEMACCT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    ZT_MEM_PARAMS = 0,    /* compute-precision parameters (full or shard) */
    ZT_MEM_MASTER,        /* fp32 master weights (mixed precision) */
    ZT_MEM_GRADS,         /* gradient accumulation buffers */
    ZT_MEM_OPTIM,         /* optimizer moments */
    ZT_MEM_ACTIVATIONS,   /* activations kept for backward */
    ZT_MEM_BUFFERS,       /* working buffers: gathered units, unit gradients, scratch */
    ZT_MEM_COMM,          /* communication buffers */
    ZT_MEM_HOST_OPTIM,    /* offloaded master weights and moments (host memory) */
    ZT_MEM_CKPT,          /* host snapshot a checkpoint is written from (12 bytes per element
                           * of this rank's shard), held from the first save on */
    ZT_MEM_CATEGORY_COUNT
} zt_mem_category;

typedef struct zt_memacct {
    int64_t cur[ZT_MEM_CATEGORY_COUNT];
    int64_t peak[ZT_MEM_CATEGORY_COUNT];
    int64_t total_cur, total_peak;
} zt_memacct;

/* Adds (bytes > 0) or removes (bytes < 0) a charge. */
void zt_memacct_charge(zt_memacct *m, zt_mem_category cat, int64_t bytes);
/* Model-state bytes: params + master + grads + optim (+ host optim). */
int64_t zt_memacct_model_states(const zt_memacct *m);
/* Restarts the peaks at the current values (e.g. per step). */
void zt_memacct_reset_peaks(zt_memacct *m);
const char *zt_mem_category_name(zt_mem_category cat);

#endif
