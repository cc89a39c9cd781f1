/* zerotrain: the ZeRO partition of one rank (see zero.h). Every question the engine asks about
 * the stage is answered here from the tables built once at creation: padded unit sizes, shard
 * sizes, where each unit lies in the full, shard and optimizer buffers. */
#include "zero.h"

#include <math.h>

#include "../common/alloc.h"

struct zt_zero {
    int stage;
    int world, rank;
    int64_t max_live;      /* stage3_max_live_parameters */
    bool release_after_use;
    int nu;
    /* per unit: padded size, shard size, offset in a full buffer, in a shard buffer, in the
     * optimizer elements, first unit position of the region, real elements */
    size_t *P, *S, *foff, *soff, *ooff, *base, *numel;
    size_t Ptot, Stot, Otot;
    size_t max_unit_p; /* max P[u] over units 1.. */
    size_t max_s;      /* max S[u] */
    size_t dev_n, host_n;
};

static size_t round_up(size_t x, size_t m)
{
    return (x + m - 1) / m * m;
}

zt_status zt_zero_create(zt_zero **out, const zt_zero_cfg *cfg, const size_t *unit_numel,
                         int n_units, int world, int rank, zt_err *err)
{
    *out = NULL;
    zt_zero *z = zt_calloc(1, sizeof(*z));
    size_t *arr = zt_calloc((size_t)n_units * 7, sizeof(size_t));
    if (!z || !arr) {
        zt_free(z);
        zt_free(arr);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    }
    z->stage = cfg->stage;
    z->world = world;
    z->rank = rank;
    z->max_live = cfg->stage3_max_live_parameters;
    z->release_after_use = cfg->stage3_max_reuse_distance == 0;
    int nu = z->nu = n_units;
    z->P = arr;
    z->S = arr + nu;
    z->foff = arr + 2 * nu;
    z->soff = arr + 3 * nu;
    z->ooff = arr + 4 * nu;
    z->base = arr + 5 * nu;
    z->numel = arr + 6 * nu;
    size_t align = (size_t)world * ZT_SHARD_ALIGN;
    bool optim_sharded = zt_zero_optim_sharded(z);
    for (int u = 0; u < nu; u++) {
        z->numel[u] = unit_numel[u];
        z->P[u] = round_up(unit_numel[u], align);
        z->S[u] = z->P[u] / (size_t)world;
        z->foff[u] = z->Ptot;
        z->soff[u] = z->Stot;
        z->ooff[u] = z->Otot;
        z->base[u] = optim_sharded ? (size_t)rank * z->S[u] : 0;
        z->Ptot += z->P[u];
        z->Stot += z->S[u];
        z->Otot += optim_sharded ? z->S[u] : z->P[u];
        if (u > 0 && z->P[u] > z->max_unit_p)
            z->max_unit_p = z->P[u];
        if (z->S[u] > z->max_s)
            z->max_s = z->S[u];
    }
    const zt_offload_cfg *off = &cfg->offload_optimizer;
    z->dev_n = z->Otot;
    if (off->enabled)
        z->dev_n = (size_t)llround((double)z->Otot * (1.0 - off->ratio));
    z->host_n = z->Otot - z->dev_n;
    *out = z;
    return ZT_OK;
}

void zt_zero_destroy(zt_zero *z)
{
    if (!z)
        return;
    zt_free(z->P);
    zt_free(z);
}

int zt_zero_stage(const zt_zero *z)
{
    return z->stage;
}

bool zt_zero_params_sharded(const zt_zero *z)
{
    return z->stage >= 3;
}

bool zt_zero_grads_sharded(const zt_zero *z)
{
    return z->stage >= 2;
}

bool zt_zero_optim_sharded(const zt_zero *z)
{
    return z->stage >= 1;
}

int zt_zero_units(const zt_zero *z)
{
    return z->nu;
}

const size_t *zt_zero_padded_sizes(const zt_zero *z)
{
    return z->P;
}

const size_t *zt_zero_shard_sizes(const zt_zero *z)
{
    return z->S;
}

const size_t *zt_zero_region_starts(const zt_zero *z)
{
    return z->base;
}

size_t zt_zero_padded_total(const zt_zero *z)
{
    return z->Ptot;
}

size_t zt_zero_shard_total(const zt_zero *z)
{
    return z->Stot;
}

size_t zt_zero_max_block(const zt_zero *z)
{
    return z->max_unit_p;
}

size_t zt_zero_param_elems(const zt_zero *z)
{
    return zt_zero_params_sharded(z) ? z->Stot : z->Ptot;
}

size_t zt_zero_grad_elems(const zt_zero *z)
{
    return zt_zero_grads_sharded(z) ? z->Stot : z->Ptot;
}

/* A buffer's span of unit u: this rank's chunk of a shard buffer, or the whole unit. */
static zt_zero_span span_of(const zt_zero *z, int u, bool sharded)
{
    if (sharded)
        return (zt_zero_span){z->soff[u], (size_t)z->rank * z->S[u], z->S[u]};
    return (zt_zero_span){z->foff[u], 0, z->P[u]};
}

zt_zero_span zt_zero_param_span(const zt_zero *z, int u)
{
    return span_of(z, u, zt_zero_params_sharded(z));
}

zt_zero_span zt_zero_grad_span(const zt_zero *z, int u)
{
    return span_of(z, u, zt_zero_grads_sharded(z));
}

size_t zt_zero_param_index(const zt_zero *z, int u, size_t pos)
{
    zt_zero_span s = zt_zero_param_span(z, u);
    return s.off + (pos - s.start);
}

size_t zt_zero_grad_index(const zt_zero *z, int u, size_t pos)
{
    zt_zero_span s = zt_zero_grad_span(z, u);
    return s.off + (pos - s.start);
}

size_t zt_zero_region_offset(const zt_zero *z, int u)
{
    return z->ooff[u];
}

size_t zt_zero_region_len(const zt_zero *z, int u)
{
    size_t n = z->numel[u];
    size_t olen = zt_zero_optim_sharded(z) ? z->S[u] : z->P[u];
    if (z->base[u] >= n)
        return 0;
    size_t r = n - z->base[u];
    return r < olen ? r : olen;
}

size_t zt_zero_region_total(const zt_zero *z)
{
    return z->Otot;
}

size_t zt_zero_device_elems(const zt_zero *z)
{
    return z->dev_n;
}

size_t zt_zero_host_elems(const zt_zero *z)
{
    return z->host_n;
}

zt_zero_micro_reduce zt_zero_micro(const zt_zero *z)
{
    return zt_zero_grads_sharded(z) ? ZT_ZERO_MICRO_REDUCE_SCATTER : ZT_ZERO_MICRO_ACCUMULATE;
}

zt_zero_boundary_reduce zt_zero_boundary(const zt_zero *z)
{
    if (z->world == 1 || zt_zero_grads_sharded(z))
        return ZT_ZERO_BOUNDARY_NONE;
    return zt_zero_optim_sharded(z) ? ZT_ZERO_BOUNDARY_REDUCE_SCATTER : ZT_ZERO_BOUNDARY_ALLREDUCE;
}

bool zt_zero_gathers_after_step(const zt_zero *z)
{
    return z->world > 1 && zt_zero_optim_sharded(z) && !zt_zero_params_sharded(z);
}

bool zt_zero_gathers_per_use(const zt_zero *z)
{
    return zt_zero_params_sharded(z);
}

bool zt_zero_release_after_use(const zt_zero *z)
{
    return zt_zero_params_sharded(z) && z->release_after_use;
}

int zt_zero_live_blocks(const zt_zero *z, int slots)
{
    if (!zt_zero_params_sharded(z))
        return slots;
    int64_t blocks = z->max_unit_p ? z->max_live / (int64_t)z->max_unit_p : slots;
    if (blocks < 1)
        blocks = 1;
    return blocks < slots ? (int)blocks : slots;
}

size_t zt_zero_max_reduce_scatter(const zt_zero *z)
{
    return zt_zero_optim_sharded(z) ? z->max_s : 0;
}
