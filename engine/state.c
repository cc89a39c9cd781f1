/* zerotrain: this rank's model states element by element — where each optimizer state of its
 * region lives (device or host side of offload), reading and writing it, loading a unit's
 * values into parameters and region, and gathering a unit's state from every rank. */
#include "engine_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"

/* Real (unpadded) elements of unit u's optimizer region. */
size_t zt_engine_region_len(const zt_engine *e, int u)
{
    return zt_zero_region_len(e->zero, u);
}

/* Where optimizer state `section` (0 the fp32 truth: master weights, or the fp32 parameters
 * themselves; 1 exp_avg; 2 exp_avg_sq) of device-side optimizer element gi lives (set: about
 * to be written). */
static zt_status device_state(zt_engine *e, int u, size_t j, size_t gi, int section, bool set,
                              float **out, zt_err *err)
{
    if (section == 0 && !e->mixed) {
        void *p;
        zt_status st = zt_engine_param_ptr(e, u, e->base[u] + j,
                                           set ? ZT_PARAM_WRITE : ZT_PARAM_READ, &p, err);
        *out = p;
        return st;
    }
    *out = (section == 0 ? e->master : section == 1 ? e->m : e->v) + gi;
    return ZT_OK;
}

/* Copies one optimizer state section of region elements [j, j+len) of unit u out of (get) or
 * into (set) its home, piece by piece across the device/host split of offload: device memory,
 * host memory, or NVMe offload's swap files. */
static zt_status state_io(zt_engine *e, int u, size_t j, size_t len, int section, float *buf,
                          bool set, zt_err *err)
{
    zt_status st = zt_engine_optim_ready(e, -1, err); /* a step finishing in the background */
    if (st != ZT_OK)
        return st;
    size_t dev_n = zt_zero_device_elems(e->zero);
    while (len > 0) {
        size_t gi = zt_zero_region_offset(e->zero, u) + j;
        size_t n = len;
        if (gi < dev_n && gi + n > dev_n)
            n = dev_n - gi;
        if (gi >= dev_n && e->nvme) {
            st = zt_engine_nvme_io(e, gi - dev_n, n, section, buf, set, err);
            if (st != ZT_OK)
                return st;
        } else if (gi >= dev_n) {
            float *side[3] = {e->h_master, e->h_m, e->h_v};
            float *loc = side[section] + (gi - dev_n);
            memcpy(set ? loc : buf, set ? buf : loc, n * sizeof(float));
        } else {
            float *loc;
            zt_status st = device_state(e, u, j, gi, section, set, &loc, err);
            if (st != ZT_OK)
                return st;
            if (set)
                e->ops->copy_h2d(e->k, loc, buf, n * sizeof(float));
            else
                e->ops->copy_d2h(e->k, buf, loc, n * sizeof(float));
        }
        buf += n;
        j += n;
        len -= n;
    }
    return ZT_OK;
}

zt_status zt_engine_region_get(zt_engine *e, int u, size_t j, size_t len, float *out,
                               zt_err *err)
{
    return state_io(e, u, j, len, 0, out, false, err);
}

zt_status zt_engine_region_set(zt_engine *e, int u, size_t j, size_t len, const float *in,
                               zt_err *err)
{
    return state_io(e, u, j, len, 0, (float *)in, true, err);
}

zt_status zt_engine_moments_get(zt_engine *e, int u, size_t j, size_t len, float *m, float *v,
                                zt_err *err)
{
    zt_status st = state_io(e, u, j, len, 1, m, false, err);
    return st == ZT_OK ? state_io(e, u, j, len, 2, v, false, err) : st;
}

zt_status zt_engine_moments_set(zt_engine *e, int u, size_t j, size_t len, const float *m,
                                const float *v, zt_err *err)
{
    zt_status st = state_io(e, u, j, len, 1, (float *)m, true, err);
    return st == ZT_OK ? state_io(e, u, j, len, 2, (float *)v, true, err) : st;
}

/* Counts the non-finite values of each tensor of unit u in vals (the unit's values being
 * loaded) and remembers the first tensor that has any: a model file or checkpoint that holds
 * NaN or Inf makes every step non-finite, and the error then names where it came from. */
static void note_nonfinite_params(zt_engine *e, int u, const float *vals)
{
    const zt_gpt2_layout *lay = &e->lay;
    for (int ti = lay->unit_first_tensor[u]; ti < lay->unit_first_tensor[u + 1]; ti++) {
        const zt_gpt2_tensor *t = &lay->tensors[ti];
        size_t bad = 0;
        for (size_t i = 0; i < t->numel; i++)
            bad += !isfinite(vals[t->offset + i]);
        if (!bad)
            continue;
        e->nonfinite_tensors++;
        if (e->first_nonfinite[0])
            continue;
        char name[48];
        if (t->layer >= 0)
            snprintf(name, sizeof(name), "%s of layer %d", zt_gpt2_kind_name(t->kind), t->layer);
        else
            snprintf(name, sizeof(name), "%s", zt_gpt2_kind_name(t->kind));
        snprintf(e->first_nonfinite, sizeof(e->first_nonfinite),
                 "parameters at load: %s has %zu non-finite value%s", name, bad,
                 bad == 1 ? "" : "s");
    }
}

/* Writes the full fp32 values of unit u (P_u elements, host) into this rank's parameters
 * (cast to the parameter dtype) and optimizer truth. */
zt_status zt_engine_load_unit(zt_engine *e, int u, const float *vals, zt_err *err)
{
    zt_status ready = zt_engine_optim_ready(e, -1, err); /* a step finishing in the background */
    if (ready != ZT_OK)
        return ready;
    note_nonfinite_params(e, u, vals);
    zt_zero_span own = zt_zero_param_span(e->zero, u);
    size_t n_own = own.len;
    const float *src = vals + own.start;
    void *dstv;
    zt_status pst = zt_engine_param_ptr(e, u, own.start, ZT_PARAM_OVERWRITE, &dstv, err);
    if (pst != ZT_OK)
        return pst;
    char *dst = dstv;
    if (e->pdt == ZT_F32) {
        zt_engine_params_put(e, dst, src, n_own * sizeof(float));
    } else {
        /* cast piece by piece: a whole-unit temporary would be a start-up peak of its own */
        size_t piece = n_own < ZT_LOAD_PIECE ? n_own : ZT_LOAD_PIECE;
        void *tmp = zt_malloc(piece * zt_engine_psize(e));
        if (!tmp)
            return zt_err_set(err, ZT_ERR_NOMEM, "out of memory loading unit %d", u);
        zt_status st = ZT_OK;
        for (size_t i0 = 0; i0 < n_own && st == ZT_OK; i0 += piece) {
            size_t n = n_own - i0 < piece ? n_own - i0 : piece;
            for (size_t i = 0; i < n; i++)
                zt_store_f32(tmp, e->pdt, i, src[i0 + i]);
            zt_engine_params_put(e, dst + i0 * zt_engine_psize(e), tmp, n * zt_engine_psize(e));
            st = e->ops->sync(e->k, err); /* tmp is refilled next */
        }
        zt_free(tmp);
        if (st != ZT_OK)
            return st;
    }
    size_t rl = zt_engine_region_len(e, u);
    if (rl) {
        zt_status st = zt_engine_region_set(e, u, 0, rl, vals + e->base[u], err);
        if (st != ZT_OK)
            return st;
    }
    /* the caller may reuse vals as soon as this returns */
    return e->ops->sync(e->k, err);
}

/* ---- export ---- */

/* Gathers the fp32 values of unit u (P_u elements) from every rank's region into out. */
zt_status zt_engine_gather_unit(zt_engine *e, int u, int section, float *out, zt_err *err)
{
    size_t S = e->S[u];
    size_t r0 = (size_t)e->rank * S;
    memset(out, 0, e->P[u] * sizeof(float));
    /* this rank's chunk [r*S, (r+1)*S) of the unit, from wherever its truth lives */
    size_t n = e->lay.unit_numel[u];
    size_t len = r0 >= n ? 0 : (n - r0 < S ? n - r0 : S);
    zt_status st = ZT_OK;
    if (len && section == 0) {
        st = zt_engine_region_get(e, u, r0 - e->base[u], len, out + r0, err);
    } else if (len) {
        float *tmp = zt_malloc(len * sizeof(float));
        if (!tmp)
            return zt_err_set(err, ZT_ERR_NOMEM, "out of memory gathering unit %d", u);
        st = zt_engine_moments_get(e, u, r0 - e->base[u], len, section == 1 ? out + r0 : tmp,
                                   section == 1 ? tmp : out + r0, err);
        zt_free(tmp);
    }
    if (st != ZT_OK)
        return st;
    if (e->world == 1)
        return ZT_OK;
    float *dev = zt_engine_comm_alloc(e, e->P[u] * sizeof(float));
    if (!dev)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory gathering unit %d", u);
    e->ops->copy_h2d(e->k, dev + r0, out + r0, S * sizeof(float));
    st = zt_comm_allgather(e->comm, dev + r0, dev, S, ZT_F32, NULL, err);
    if (st == ZT_OK)
        e->ops->copy_d2h(e->k, out, dev, e->P[u] * sizeof(float));
    zt_engine_comm_free(e, dev, e->P[u] * sizeof(float));
    return st;
}

zt_status zt_engine_dump_state(zt_engine *e, const char *path, zt_err *err)
{
    zt_status st = ZT_OK;
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    float *buf = zt_malloc(maxp * sizeof(float));
    FILE *f = NULL;
    if (!buf)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    if (e->rank == 0 && !(f = fopen(path, "wb"))) {
        st = zt_err_set(err, ZT_ERR_IO, "cannot write %s", path);
        /* keep going: the gathers are collective */
    }
    for (int u = 0; u < e->nu; u++) {
        for (int sec = 0; sec < 3; sec++) {
            zt_status s2 = zt_engine_gather_unit(e, u, sec, buf, err);
            if (s2 != ZT_OK) {
                st = s2;
                goto close_file;
            }
            if (f && fwrite(buf, sizeof(float), e->lay.unit_numel[u], f) != e->lay.unit_numel[u])
                st = zt_err_set(err, ZT_ERR_IO, "cannot write %s", path);
        }
    }
close_file:
    if (f && fclose(f) != 0 && st == ZT_OK)
        st = zt_err_set(err, ZT_ERR_IO, "cannot write %s", path);
    zt_free(buf);
    return st;
}
