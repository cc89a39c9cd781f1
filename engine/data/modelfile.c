/* zerotrain: llm.c GPT-2 model files (see modelfile.h). The reader checks the header and the
 * file size before it allocates anything; the writer streams fp32 pieces through a small
 * staging buffer (bf16 conversion) into a durable zt_outfile. */
#define _POSIX_C_SOURCE 200809L
#include "engine/data/modelfile.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/log.h"
#include "engine/data/dataloader.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "model files are little-endian and are read in place: a big-endian host needs byte swaps"
#endif

/* The on-disk header, as llm.c writes it. */
typedef struct zt_modelfile_header {
    int32_t magic;             /* [0] ZT_MODELFILE_MAGIC */
    int32_t version;           /* [1] 3 fp32, 5 bf16 */
    int32_t max_seq_len;       /* [2] T */
    int32_t vocab_size;        /* [3] V */
    int32_t num_layers;        /* [4] L */
    int32_t num_heads;         /* [5] NH */
    int32_t channels;          /* [6] C */
    int32_t padded_vocab_size; /* [7] Vp */
    int32_t reserved[256 - 8];
} zt_modelfile_header;
_Static_assert(sizeof(zt_modelfile_header) == ZT_MODELFILE_HEADER_BYTES, "header is 256 int32");
_Static_assert(offsetof(zt_modelfile_header, max_seq_len) == 2 * 4, "header [2] is T");
_Static_assert(offsetof(zt_modelfile_header, padded_vocab_size) == 7 * 4, "header [7] is Vp");

#define ZT_MODELFILE_MAX_LAYERS 1024
#define ZT_MODELFILE_MAX_CHANNELS 65536
#define ZT_MODELFILE_MAX_DIM (1 << 24)
#define ZT_STAGE_ELEMS 16384 /* bf16 staging buffer, elements */

static const char *const tensor_names[ZT_MODELFILE_NUM_TENSORS] = {
    "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb",
};

const char *zt_modelfile_tensor_name(int i)
{
    return i >= 0 && i < ZT_MODELFILE_NUM_TENSORS ? tensor_names[i] : "?";
}

size_t zt_modelfile_tensor_sizes(const zt_model_shape *s, size_t sizes[16])
{
    size_t Vp = (size_t)s->padded_vocab_size, T = (size_t)s->max_seq_len;
    size_t L = (size_t)s->num_layers, C = (size_t)s->channels;
    sizes[0] = Vp * C;         /* wte */
    sizes[1] = T * C;          /* wpe */
    sizes[2] = L * C;          /* ln1w */
    sizes[3] = L * C;          /* ln1b */
    sizes[4] = L * 3 * C * C;  /* qkvw */
    sizes[5] = L * 3 * C;      /* qkvb */
    sizes[6] = L * C * C;      /* attprojw */
    sizes[7] = L * C;          /* attprojb */
    sizes[8] = L * C;          /* ln2w */
    sizes[9] = L * C;          /* ln2b */
    sizes[10] = L * 4 * C * C; /* fcw */
    sizes[11] = L * 4 * C;     /* fcb */
    sizes[12] = L * C * 4 * C; /* fcprojw */
    sizes[13] = L * C;         /* fcprojb */
    sizes[14] = C;             /* lnfw */
    sizes[15] = C;             /* lnfb */
    size_t total = 0;
    for (int i = 0; i < ZT_MODELFILE_NUM_TENSORS; i++)
        total += sizes[i];
    return total;
}

/* The tensor that element `offset` (in llm.c order) belongs to. */
static const char *tensor_at(const zt_model_shape *s, size_t offset)
{
    size_t sizes[ZT_MODELFILE_NUM_TENSORS];
    zt_modelfile_tensor_sizes(s, sizes);
    for (int i = 0; i < ZT_MODELFILE_NUM_TENSORS; i++) {
        if (offset < sizes[i]) return tensor_names[i];
        offset -= sizes[i];
    }
    return "(past the end)";
}

static zt_status check_range(const char *origin, const char *field, int v, int max, zt_err *err)
{
    if (v < 1 || v > max)
        return zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: %s = %d is outside 1..%d; the shape is corrupt or not a GPT-2 model file", origin,
            field, v, max);
    return ZT_OK;
}

zt_status zt_modelfile_check(const zt_model_shape *s, const char *origin, zt_err *err)
{
    zt_status st;
    if ((st = check_range(origin, "max_seq_len", s->max_seq_len, ZT_MODELFILE_MAX_DIM, err)) ||
        (st = check_range(origin, "vocab_size", s->vocab_size, ZT_MODELFILE_MAX_DIM, err)) ||
        (st = check_range(origin, "padded_vocab_size", s->padded_vocab_size, ZT_MODELFILE_MAX_DIM,
                          err)) ||
        (st = check_range(origin, "num_layers", s->num_layers, ZT_MODELFILE_MAX_LAYERS, err)) ||
        (st = check_range(origin, "channels", s->channels, ZT_MODELFILE_MAX_CHANNELS, err)) ||
        (st = check_range(origin, "num_heads", s->num_heads, s->channels, err)))
        return st;
    if (s->channels % s->num_heads != 0)
        return zt_err_set(err, ZT_ERR_FORMAT,
                          "%s: channels %d is not divisible by num_heads %d; the shape is corrupt",
                          origin, s->channels, s->num_heads);
    if (s->padded_vocab_size < s->vocab_size)
        return zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: padded_vocab_size %d is smaller than vocab_size %d; the shape is corrupt", origin,
            s->padded_vocab_size, s->vocab_size);
    return ZT_OK;
}

/* Opens path, reads and checks its header; on success *fp is positioned at the parameters. */
static zt_status open_and_check(const char *path, FILE **fp, zt_model_shape *shape, zt_dtype *dtype,
                                size_t *total, zt_err *err)
{
    *fp = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return zt_err_set(err, errno == ENOENT ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                          "cannot open model file %s: %s; check model.init in the job file", path,
                          strerror(errno));
    zt_status st = ZT_OK;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = zt_err_set(err, ZT_ERR_IO, "model file %s is not a readable regular file", path);
        goto close_file;
    }
    uint64_t size = (uint64_t)sb.st_size;
    zt_modelfile_header h;
    if (size < sizeof(h) || fread(&h, sizeof(h), 1, f) != 1) {
        st = zt_err_set(err, ZT_ERR_FORMAT,
                        "%s: truncated model file: %llu bytes, shorter than the %d-byte header",
                        path, (unsigned long long)size, ZT_MODELFILE_HEADER_BYTES);
        goto close_file;
    }
    if (h.magic != ZT_MODELFILE_MAGIC) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: not an llm.c model file (magic %d, expected %d); model.init takes a file written by llm.c or `zctl ckpt export --format llmc`",
            path, (int)h.magic, ZT_MODELFILE_MAGIC);
        goto close_file;
    }
    if (h.version == ZT_MODELFILE_VERSION_F32) {
        *dtype = ZT_F32;
    } else if (h.version == ZT_MODELFILE_VERSION_BF16) {
        *dtype = ZT_BF16;
    } else {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: model file version %d is not supported (3 = fp32, 5 = bf16; 1 and 2 are older llm.c formats); re-export it with a current llm.c",
            path, (int)h.version);
        goto close_file;
    }
    shape->max_seq_len = h.max_seq_len;
    shape->vocab_size = h.vocab_size;
    shape->num_layers = h.num_layers;
    shape->num_heads = h.num_heads;
    shape->channels = h.channels;
    shape->padded_vocab_size = h.padded_vocab_size;
    st = zt_modelfile_check(shape, path, err);
    if (st != ZT_OK) goto close_file;
    size_t sizes[ZT_MODELFILE_NUM_TENSORS];
    *total = zt_modelfile_tensor_sizes(shape, sizes);
    uint64_t want = sizeof(h) + (uint64_t)*total * zt_dtype_size(*dtype);
    if (size != want) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: %s model file: its header (%s, L=%d C=%d NH=%d T=%d V=%d Vp=%d) needs %llu bytes but the file has %llu; re-export or re-copy it",
            path, size < want ? "truncated" : "oversized", zt_dtype_name(*dtype), shape->num_layers,
            shape->channels, shape->num_heads, shape->max_seq_len, shape->vocab_size,
            shape->padded_vocab_size, (unsigned long long)want, (unsigned long long)size);
        goto close_file;
    }
    *fp = f;
    return ZT_OK;

close_file:
    fclose(f);
    return st;
}

zt_status zt_modelfile_read_header(const char *path, zt_model_shape *shape, int *dtype_code,
                                   zt_err *err)
{
    FILE *f;
    zt_dtype dt;
    size_t total;
    zt_status st = open_and_check(path, &f, shape, &dt, &total, err);
    if (st != ZT_OK) return st;
    fclose(f);
    if (dtype_code) *dtype_code = (int)dt;
    return ZT_OK;
}

zt_status zt_modelfile_read(const char *path, zt_model_shape *shape, float **params_out,
                            zt_err *err)
{
    *params_out = NULL;
    FILE *f;
    zt_dtype dt;
    size_t total;
    zt_status st = open_and_check(path, &f, shape, &dt, &total, err);
    if (st != ZT_OK) return st;
    uint16_t *stage = NULL;
    float *params = zt_malloc(total * sizeof(float));
    if (!params) {
        st =
            zt_err_set(err, ZT_ERR_NOMEM, "out of memory reading %s (%zu parameters)", path, total);
        goto close_file;
    }
    if (dt == ZT_F32) {
        if (fread(params, sizeof(float), total, f) != total) goto read_error;
    } else {
        stage = zt_malloc(ZT_STAGE_ELEMS * sizeof(uint16_t));
        if (!stage) {
            st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory reading %s", path);
            goto free_params;
        }
        for (size_t done = 0; done < total;) {
            size_t n = total - done < ZT_STAGE_ELEMS ? total - done : ZT_STAGE_ELEMS;
            if (fread(stage, sizeof(uint16_t), n, f) != n) goto read_error;
            for (size_t i = 0; i < n; i++)
                params[done + i] = zt_f32_from_bf16(stage[i]);
            done += n;
        }
    }
    zt_free(stage);
    fclose(f);
    *params_out = params;
    return ZT_OK;

read_error:
    st = zt_err_set(err, ZT_ERR_IO, "%s: read error: %s", path,
                    ferror(f) ? strerror(errno) : "the file ended early (changed while reading?)");
free_params:
    zt_free(stage);
    zt_free(params);
close_file:
    fclose(f);
    return st;
}

struct zt_modelfile_writer {
    zt_outfile *out;
    char *path; /* for messages */
    zt_model_shape shape;
    zt_dtype dtype;
    size_t total;    /* elements the shape holds */
    size_t written;  /* elements put so far */
    uint16_t *stage; /* (ZT_STAGE_ELEMS) for bf16 */
};

zt_status zt_modelfile_writer_open(zt_modelfile_writer **out, const char *path,
                                   const zt_model_shape *s, zt_dtype dtype, zt_err *err)
{
    *out = NULL;
    if (dtype != ZT_F32 && dtype != ZT_BF16)
        return zt_err_set(err, ZT_ERR_UNSUPPORTED,
                          "cannot write %s as %s: llm.c model files are fp32 or bf16", path,
                          zt_dtype_name(dtype));
    zt_status st = zt_modelfile_check(s, path, err);
    if (st != ZT_OK) return st;
    zt_modelfile_writer *w = zt_calloc(1, sizeof(*w));
    if (!w) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory writing %s", path);
    w->shape = *s;
    w->dtype = dtype;
    w->path = zt_strdup(path);
    if (!w->path) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory writing %s", path);
        goto free_writer;
    }
    size_t sizes[ZT_MODELFILE_NUM_TENSORS];
    w->total = zt_modelfile_tensor_sizes(s, sizes);
    if (dtype == ZT_BF16) {
        w->stage = zt_malloc(ZT_STAGE_ELEMS * sizeof(uint16_t));
        if (!w->stage) {
            st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory writing %s", path);
            goto free_writer;
        }
    }
    st = zt_outfile_open(&w->out, path, err);
    if (st != ZT_OK) goto free_writer;
    zt_modelfile_header h;
    memset(&h, 0, sizeof(h));
    h.magic = ZT_MODELFILE_MAGIC;
    h.version = dtype == ZT_F32 ? ZT_MODELFILE_VERSION_F32 : ZT_MODELFILE_VERSION_BF16;
    h.max_seq_len = s->max_seq_len;
    h.vocab_size = s->vocab_size;
    h.num_layers = s->num_layers;
    h.num_heads = s->num_heads;
    h.channels = s->channels;
    h.padded_vocab_size = s->padded_vocab_size;
    st = zt_outfile_write(w->out, &h, sizeof(h), err);
    if (st != ZT_OK) goto free_writer;
    *out = w;
    return ZT_OK;

free_writer:
    zt_modelfile_writer_abort(w);
    return st;
}

zt_status zt_modelfile_writer_put(zt_modelfile_writer *w, const float *data, size_t n, zt_err *err)
{
    if (n > w->total - w->written)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "%s: a piece of %zu elements at offset %zu (tensor %s) goes past the %zu parameters of the shape; this is a bug in the exporter",
            w->path, n, w->written, tensor_at(&w->shape, w->written), w->total);
    if (w->dtype == ZT_F32) {
        zt_status st = zt_outfile_write(w->out, data, n * sizeof(float), err);
        if (st != ZT_OK) return st;
        w->written += n;
        return ZT_OK;
    }
    for (size_t done = 0; done < n;) {
        size_t m = n - done < ZT_STAGE_ELEMS ? n - done : ZT_STAGE_ELEMS;
        for (size_t i = 0; i < m; i++)
            w->stage[i] = zt_bf16_from_f32(data[done + i]);
        zt_status st = zt_outfile_write(w->out, w->stage, m * sizeof(uint16_t), err);
        if (st != ZT_OK) return st;
        done += m;
        w->written += m;
    }
    return ZT_OK;
}

zt_status zt_modelfile_writer_commit(zt_modelfile_writer *w, zt_err *err)
{
    if (w->written != w->total) {
        zt_status st = zt_err_set(
            err, ZT_ERR_INVALID,
            "%s: only %zu of %zu parameters were written (tensor %s onwards is missing); nothing was saved",
            w->path, w->written, w->total, tensor_at(&w->shape, w->written));
        zt_modelfile_writer_abort(w);
        return st;
    }
    zt_status st = zt_outfile_commit(w->out, err);
    w->out = NULL;
    zt_modelfile_writer_abort(w);
    return st;
}

void zt_modelfile_writer_abort(zt_modelfile_writer *w)
{
    if (!w) return;
    zt_outfile_abort(w->out);
    zt_free(w->path);
    zt_free(w->stage);
    zt_free(w);
}

zt_status zt_modelfile_write(const char *path, const zt_model_shape *s, const float *params,
                             zt_dtype dtype, zt_err *err)
{
    zt_modelfile_writer *w;
    zt_status st = zt_modelfile_writer_open(&w, path, s, dtype, err);
    if (st != ZT_OK) return st;
    st = zt_modelfile_writer_put(w, params, w->total, err);
    if (st != ZT_OK) {
        zt_modelfile_writer_abort(w);
        return st;
    }
    return zt_modelfile_writer_commit(w, err);
}

void zt_modelfile_shape_from_cfg(const zt_model_cfg *cfg, zt_model_shape *s)
{
    s->max_seq_len = cfg->block_size;
    s->vocab_size = cfg->vocab_size;
    s->padded_vocab_size = cfg->padded_vocab_size;
    s->num_layers = cfg->n_layer;
    s->num_heads = cfg->n_head;
    s->channels = cfg->n_embd;
}

/* Appends "; " + text to buf (bounded). */
static void append(char *buf, size_t cap, const char *fmt, int a, int b)
{
    size_t len = strlen(buf);
    if (len + 1 >= cap) return;
    snprintf(buf + len, cap - len, fmt, len ? "; " : "", a, b);
}

zt_status zt_modelfile_check_shape(const zt_model_shape *file, const zt_model_cfg *cfg,
                                   const char *path, zt_err *err)
{
    char diff[600] = "";
    if (file->num_layers != cfg->n_layer)
        append(diff, sizeof(diff), "%sn_layer %d (file) vs %d (job)", file->num_layers,
               cfg->n_layer);
    if (file->num_heads != cfg->n_head)
        append(diff, sizeof(diff), "%sn_head %d (file) vs %d (job)", file->num_heads, cfg->n_head);
    if (file->channels != cfg->n_embd)
        append(diff, sizeof(diff), "%sn_embd %d (file) vs %d (job)", file->channels, cfg->n_embd);
    if (file->vocab_size != cfg->vocab_size)
        append(diff, sizeof(diff), "%svocab_size %d (file) vs %d (job)", file->vocab_size,
               cfg->vocab_size);
    if (file->padded_vocab_size != cfg->padded_vocab_size)
        append(diff, sizeof(diff), "%spadded_vocab_size %d (file) vs %d (job)",
               file->padded_vocab_size, cfg->padded_vocab_size);
    if (file->max_seq_len < cfg->block_size)
        append(
            diff, sizeof(diff),
            "%smax_seq_len %d (file) is smaller than block_size %d (job): the file has too few position embeddings",
            file->max_seq_len, cfg->block_size);
    if (diff[0])
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "init file %s does not match the job's model: %s; fix model.* in the job file or use an init file of this shape",
            path, diff);
    if (file->max_seq_len > cfg->block_size)
        ZT_INFO("engine", "init file %s: using the first %d of its %d position embeddings (block_size %d)",
                path, cfg->block_size, file->max_seq_len, cfg->block_size);
    return ZT_OK;
}
