/* zerotrain: export of a checkpoint as one consolidated model file — llm.c's model format or
 * safetensors with Hugging Face GPT-2 names — read through the engine-free checkpoint reader,
 * one tensor at a time (see ckpt_export.h). */
#define _POSIX_C_SOURCE 200809L
#include "ckpt_export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "ckpt_int.h"
#include "data/dataloader.h"
#include "data/modelfile.h"
#include "gpt2.h"

static const char *hf_name(int kind, int layer, char *buf, size_t n)
{
    static const char *const block_names[ZT_T_KIND_COUNT] = {
        [ZT_T_LN1W] = "ln_1.weight",         [ZT_T_LN1B] = "ln_1.bias",
        [ZT_T_QKVW] = "attn.c_attn.weight",  [ZT_T_QKVB] = "attn.c_attn.bias",
        [ZT_T_ATTPROJW] = "attn.c_proj.weight", [ZT_T_ATTPROJB] = "attn.c_proj.bias",
        [ZT_T_LN2W] = "ln_2.weight",         [ZT_T_LN2B] = "ln_2.bias",
        [ZT_T_FCW] = "mlp.c_fc.weight",      [ZT_T_FCB] = "mlp.c_fc.bias",
        [ZT_T_FCPROJW] = "mlp.c_proj.weight", [ZT_T_FCPROJB] = "mlp.c_proj.bias",
    };
    switch (kind) {
    case ZT_T_WTE: return "transformer.wte.weight";
    case ZT_T_WPE: return "transformer.wpe.weight";
    case ZT_T_LNFW: return "transformer.ln_f.weight";
    case ZT_T_LNFB: return "transformer.ln_f.bias";
    default: zt_ckpt_pathf(buf, n, "transformer.h.%d.%s", layer, block_names[kind]); return buf;
    }
}

/* Rows and columns as llm.c stores the tensor ([out, in]); 1-D tensors have rows 1. */
static void kind_shape(const zt_gpt2_dims *d, int kind, size_t *rows, size_t *cols)
{
    size_t C = (size_t)d->C;
    *rows = 1;
    switch (kind) {
    case ZT_T_WTE: *rows = (size_t)d->V; *cols = C; break; /* exported without padding rows */
    case ZT_T_WPE: *rows = (size_t)d->T; *cols = C; break;
    case ZT_T_QKVW: *rows = 3 * C; *cols = C; break;
    case ZT_T_ATTPROJW: *rows = C; *cols = C; break;
    case ZT_T_FCW: *rows = 4 * C; *cols = C; break;
    case ZT_T_FCPROJW: *rows = C; *cols = 4 * C; break;
    case ZT_T_QKVB: *cols = 3 * C; break;
    case ZT_T_FCB: *cols = 4 * C; break;
    default: *cols = C; break;
    }
}

static bool kind_transposed(int kind)
{
    return kind == ZT_T_QKVW || kind == ZT_T_ATTPROJW || kind == ZT_T_FCW || kind == ZT_T_FCPROJW;
}

static zt_status put_values(zt_outfile *f, const float *v, size_t n, zt_dtype dt, zt_err *err)
{
    if (dt == ZT_F32)
        return zt_outfile_write(f, v, n * 4, err);
    uint16_t tmp[4096];
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < k; j++)
            tmp[j] = zt_bf16_from_f32(v[i + j]);
        zt_status st = zt_outfile_write(f, tmp, k * 2, err);
        if (st != ZT_OK)
            return st;
    }
    return ZT_OK;
}

static zt_status export_safetensors(zt_ckpt *c, zt_dtype dt, const char *out, float *buf,
                                    float *tbuf, zt_err *err)
{
    const zt_gpt2_layout *lay = &c->lay;
    const zt_gpt2_dims *d = &lay->d;
    size_t es = zt_dtype_size(dt);
    /* header: every tensor in model order with its byte range */
    json_t *hdr = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(meta, "producer", json_string("zerotrain"));
    char stepbuf[32];
    zt_ckpt_pathf(stepbuf, sizeof(stepbuf), "%lld", (long long)c->m.step);
    json_object_set_new(meta, "step", json_string(stepbuf));
    json_object_set_new(hdr, "__metadata__", meta);
    size_t off = 0;
    char name[128];
    for (int ti = 0; ti < lay->n_tensors; ti++) {
        const zt_gpt2_tensor *t = &lay->tensors[ti];
        size_t rows, cols;
        kind_shape(d, t->kind, &rows, &cols);
        json_t *o = json_object();
        json_object_set_new(o, "dtype", json_string(dt == ZT_F32 ? "F32" : "BF16"));
        json_t *shape = json_array();
        if (rows > 1 || t->kind == ZT_T_WTE || t->kind == ZT_T_WPE) {
            json_array_append_new(shape, json_integer((json_int_t)(kind_transposed(t->kind) ? cols : rows)));
            json_array_append_new(shape, json_integer((json_int_t)(kind_transposed(t->kind) ? rows : cols)));
        } else {
            json_array_append_new(shape, json_integer((json_int_t)cols));
        }
        json_object_set_new(o, "shape", shape);
        json_t *range = json_array();
        size_t nbytes = rows * cols * es;
        json_array_append_new(range, json_integer((json_int_t)off));
        json_array_append_new(range, json_integer((json_int_t)(off + nbytes)));
        json_object_set_new(o, "data_offsets", range);
        json_object_set_new(hdr, hf_name(t->kind, t->layer, name, sizeof(name)), o);
        off += nbytes;
    }
    char *hs = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    if (!hs)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
    zt_outfile *f = NULL;
    zt_status st = zt_outfile_open(&f, out, err);
    if (st != ZT_OK) {
        free(hs);
        return st;
    }
    uint64_t len64 = padded;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(len64 >> (8 * i));
    st = zt_outfile_write(f, le, 8, err);
    if (st == ZT_OK)
        st = zt_outfile_write(f, hs, hl, err);
    if (st == ZT_OK && padded > hl)
        st = zt_outfile_write(f, "        ", padded - hl, err);
    free(hs);
    for (int ti = 0; ti < lay->n_tensors && st == ZT_OK; ti++) {
        const zt_gpt2_tensor *t = &lay->tensors[ti];
        size_t rows, cols;
        kind_shape(d, t->kind, &rows, &cols);
        size_t n = rows * cols;
        st = zt_ckpt_read(c, 0, t->unit, t->offset, n, buf, err);
        if (st != ZT_OK)
            break;
        const float *src = buf;
        if (kind_transposed(t->kind)) {
            for (size_t r = 0; r < rows; r++)
                for (size_t k = 0; k < cols; k++)
                    tbuf[k * rows + r] = buf[r * cols + k];
            src = tbuf;
        }
        st = put_values(f, src, n, dt, err);
    }
    if (st == ZT_OK)
        return zt_outfile_commit(f, err);
    zt_outfile_abort(f);
    return st;
}

static zt_status export_llmc(zt_ckpt *c, zt_dtype dt, const char *out, float *buf, zt_err *err)
{
    const zt_gpt2_layout *lay = &c->lay;
    const zt_gpt2_dims *d = &lay->d;
    zt_model_shape shape = {d->T, d->V, d->Vp, d->L, d->NH, d->C};
    zt_modelfile_writer *w = NULL;
    zt_status st = zt_modelfile_writer_open(&w, out, &shape, dt, err);
    if (st != ZT_OK)
        return st;
    for (int kind = 0; kind < ZT_T_KIND_COUNT && st == ZT_OK; kind++) {
        bool layered = kind != ZT_T_WTE && kind != ZT_T_WPE && kind != ZT_T_LNFW && kind != ZT_T_LNFB;
        for (int l = 0; l < (layered ? d->L : 1) && st == ZT_OK; l++) {
            int u;
            size_t off, n;
            zt_gpt2_locate(lay, kind, layered ? l : -1, &u, &off, &n);
            st = zt_ckpt_read(c, 0, u, off, n, buf, err);
            if (st == ZT_OK)
                st = zt_modelfile_writer_put(w, buf, n, err);
        }
    }
    if (st == ZT_OK)
        return zt_modelfile_writer_commit(w, err);
    zt_modelfile_writer_abort(w);
    return st;
}

zt_status zt_ckpt_export(const char *path, const char *format, zt_dtype dtype, const char *out,
                         zt_err *err)
{
    bool st_fmt = strcmp(format, "safetensors") == 0;
    if (!st_fmt && strcmp(format, "llmc") != 0)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "unknown export format \"%s\"; use llmc or safetensors", format);
    if (dtype != ZT_F32 && dtype != ZT_BF16)
        return zt_err_set(err, ZT_ERR_INVALID, "export dtype must be fp32 or bf16");
    zt_ckpt *c = NULL;
    zt_status st = zt_ckpt_open(&c, path, err);
    if (st != ZT_OK)
        return st;
    float *buf = NULL, *tbuf = NULL;
    if ((st = zt_ckpt_verify(c, err)) != ZT_OK)
        goto free_buffers;
    size_t maxt = 0;
    for (int i = 0; i < c->lay.n_tensors; i++)
        if (c->lay.tensors[i].numel > maxt)
            maxt = c->lay.tensors[i].numel;
    buf = zt_malloc(maxt * sizeof(float));
    tbuf = st_fmt ? zt_malloc(maxt * sizeof(float)) : NULL;
    if (!buf || (st_fmt && !tbuf)) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto free_buffers;
    }
    st = st_fmt ? export_safetensors(c, dtype, out, buf, tbuf, err)
                : export_llmc(c, dtype, out, buf, err);
free_buffers:
    zt_free(buf);
    zt_free(tbuf);
    zt_ckpt_close(c);
    return st;
}

