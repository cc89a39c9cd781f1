/* zerotrain: the checkpoint format and its engine-free reader — resolving a path to a step
 * directory, meta.json (writing, reading, its canonical checksum), shard headers and chunk
 * checksums, the reader and verifier, and inspect (see ckpt_format.h). */
#define _XOPEN_SOURCE 700 /* POSIX 2008 */
#include "ckpt_format.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/crc32c.h"
#include "ckpt_int.h"
#include "gpt2.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint shards are little-endian and written from memory as they are"
#endif

#define META_CRC_KEY "meta_crc32c"
#define FORMAT_NAME "zerotrain-checkpoint"
#define META_HINT "meta.json was edited, damaged or belongs to another checkpoint; resume from an intact checkpoint"
/* Streaming buffer for checksummed reads of partial chunks and for verification. */
#define STREAM_BYTES ((size_t)4 << 20)

static const char *const section_names[ZT_CKPT_SECTIONS] = {"master", "exp_avg", "exp_avg_sq"};

int zt_ckpt_pathf(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return w;
}

/* ---- shard layout and checksums ---- */

size_t zt_ckpt_table_bytes(int n_units)
{
    return ((size_t)n_units * ZT_CKPT_SECTIONS * sizeof(uint32_t) + 63) / 64 * 64;
}

uint32_t zt_ckpt_units_crc(int n_units, const size_t *numel, const size_t *shard)
{
    uint32_t crc = 0;
    for (int u = 0; u < n_units; u++) {
        uint64_t pair[2] = {numel[u], shard[u]};
        crc = zt_crc32c(crc, pair, sizeof(pair));
    }
    return crc;
}

uint32_t zt_ckpt_shard_seal(unsigned char *buf, int n_units, const size_t *shard)
{
    zt_shard_header h;
    memcpy(&h, buf, sizeof(h));
    uint32_t *table = (uint32_t *)(buf + sizeof(h));
    memset(table, 0, h.payload_offset - sizeof(h));
    const unsigned char *p = buf + h.payload_offset;
    for (int u = 0; u < n_units; u++)
        for (int sec = 0; sec < ZT_CKPT_SECTIONS; sec++) {
            table[u * ZT_CKPT_SECTIONS + sec] = zt_crc32c(0, p, shard[u] * sizeof(float));
            p += shard[u] * sizeof(float);
        }
    h.table_crc32c = zt_crc32c(0, table, h.payload_offset - sizeof(h));
    h.header_crc32c = zt_crc32c(0, &h, offsetof(zt_shard_header, header_crc32c));
    memcpy(buf, &h, sizeof(h));
    return h.table_crc32c;
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- resolving a path to a complete step directory ---- */

int64_t zt_ckpt_parse_step_name(const char *name)
{
    if (strncmp(name, "step_", 5) != 0)
        return -1;
    char *end;
    long long v = strtoll(name + 5, &end, 10);
    if (*end || end == name + 5 || v < 0)
        return -1;
    return v;
}

int zt_ckpt_parse_shard_name(const char *name)
{
    if (strncmp(name, "rank_", 5) != 0 || !isdigit((unsigned char)name[5]))
        return -1;
    char *end;
    long v = strtol(name + 5, &end, 10);
    if (strcmp(end, ".zts") != 0 || v < 0)
        return -1;
    return v > INT_MAX ? INT_MAX : (int)v;
}

zt_status zt_ckpt_resolve(const char *given, char *step_dir, size_t len, zt_err *err)
{
    /* "ckpt/step_00000010/" names the same directory as "ckpt/step_00000010" */
    char path[ZT_PATH_MAX + 16];
    zt_ckpt_pathf(path, sizeof(path), "%s", given);
    for (size_t n = strlen(path); n > 1 && path[n - 1] == '/'; n--)
        path[n - 1] = '\0';
    char meta[ZT_PATH_MAX + 16];
    zt_ckpt_pathf(meta, sizeof(meta), "%s/%s", path, ZT_CKPT_META_NAME);
    if (file_exists(meta)) {
        zt_ckpt_pathf(step_dir, len, "%s", path);
        return ZT_OK;
    }
    DIR *d = opendir(path);
    if (!d)
        return zt_err_set(err, errno == ENOENT ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                          "checkpoint %s: %s; give a checkpoint directory or one of its step_* directories",
                          path, strerror(errno));
    int64_t best = -1;
    bool incomplete = false;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int64_t s = zt_ckpt_parse_step_name(de->d_name);
        if (s < 0)
            continue;
        zt_ckpt_pathf(meta, sizeof(meta), "%s/%s/%s", path, de->d_name, ZT_CKPT_META_NAME);
        if (!file_exists(meta)) {
            incomplete = true;
            continue;
        }
        if (s > best)
            best = s;
    }
    closedir(d);
    if (best < 0) {
        if (zt_ckpt_parse_step_name(strrchr(path, '/') ? strrchr(path, '/') + 1 : path) >= 0)
            return zt_err_set(err, ZT_ERR_CORRUPT,
                              "checkpoint %s is incomplete: it has no %s (the save did not finish); resume from an earlier step",
                              path, ZT_CKPT_META_NAME);
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "no complete checkpoint in %s%s", path,
                          incomplete ? " (only incomplete step directories without meta.json)"
                                     : "");
    }
    zt_ckpt_pathf(step_dir, len, "%s/step_%08lld", path, (long long)best);
    return ZT_OK;
}

/* ---- meta.json ---- */

void zt_ckpt_meta_free(zt_ckpt_meta *m)
{
    zt_free(m->numel);
    zt_free(m->bytes);
    m->numel = m->shard = NULL;
    m->bytes = NULL;
    m->crc = NULL;
}

zt_status zt_ckpt_meta_alloc(zt_ckpt_meta *m, zt_err *err)
{
    m->numel = zt_calloc((size_t)m->n_units * 2, sizeof(size_t));
    m->bytes = zt_calloc((size_t)m->world * 2, sizeof(uint64_t));
    if (!m->numel || !m->bytes) {
        zt_ckpt_meta_free(m);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    }
    m->shard = m->numel + m->n_units;
    m->crc = (uint32_t *)(m->bytes + m->world);
    return ZT_OK;
}

/* CRC32C of meta.json's canonical text (compact, keys sorted, ASCII), without meta_crc32c:
 * independent of formatting, so the reader recomputes it from what it parsed. */
static zt_status meta_canonical_crc(const json_t *root, uint32_t *crc)
{
    char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    if (!s)
        return ZT_ERR_NOMEM;
    *crc = zt_crc32c(0, s, strlen(s));
    free(s);
    return ZT_OK;
}

char *zt_ckpt_meta_to_json(const zt_ckpt_meta *m, const zt_job *job)
{
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(FORMAT_NAME));
    json_object_set_new(root, "version", json_integer(ZT_CKPT_VERSION));
    json_object_set_new(root, "step", json_integer(m->step));
    json_object_set_new(root, "applied_steps", json_integer(m->applied_steps));
    json_object_set_new(root, "skipped_steps", json_integer(m->skipped_steps));
    json_object_set_new(root, "world", json_integer(m->world));
    json_object_set_new(root, "stage", json_integer(m->stage));
    json_object_set_new(root, "precision", json_string(zt_dtype_name(m->precision)));
    json_t *model = json_object();
    json_object_set_new(model, "n_layer", json_integer(m->dims.L));
    json_object_set_new(model, "n_head", json_integer(m->dims.NH));
    json_object_set_new(model, "n_embd", json_integer(m->dims.C));
    json_object_set_new(model, "block_size", json_integer(m->dims.T));
    json_object_set_new(model, "vocab_size", json_integer(m->dims.V));
    json_object_set_new(model, "padded_vocab_size", json_integer(m->dims.Vp));
    json_object_set_new(root, "model", model);
    json_object_set_new(root, "train_batch_size", json_integer(m->train_batch_size));
    json_object_set_new(root, "train_micro_batch_size_per_gpu", json_integer(m->micro_batch));
    json_object_set_new(root, "gradient_accumulation_steps", json_integer(m->grad_accum));
    json_t *data = json_object();
    json_object_set_new(data, "next_step", json_integer(m->step));
    json_object_set_new(data, "samples_consumed", json_integer(m->step * m->train_batch_size));
    json_object_set_new(root, "data", data);
    json_t *sched = json_object();
    json_object_set_new(sched, "t", json_integer(m->applied_steps));
    json_object_set_new(root, "scheduler", sched);
    json_t *ls = json_object();
    json_object_set_new(ls, "scale", json_real(m->ls_scale));
    json_object_set_new(ls, "iter", json_integer(m->ls_iter));
    json_object_set_new(ls, "last_overflow", json_integer(m->ls_last_overflow));
    json_object_set_new(ls, "hysteresis_left", json_integer(m->ls_hyst_left));
    json_object_set_new(root, "loss_scaler", ls);
    json_t *units = json_array();
    for (int u = 0; u < m->n_units; u++) {
        json_t *o = json_object();
        json_object_set_new(o, "numel", json_integer((json_int_t)m->numel[u]));
        json_object_set_new(o, "shard", json_integer((json_int_t)m->shard[u]));
        json_array_append_new(units, o);
    }
    json_object_set_new(root, "units", units);
    json_t *shards = json_array();
    for (int r = 0; r < m->world; r++) {
        char name[32], crc[16];
        zt_ckpt_pathf(name, sizeof(name), "rank_%05d.zts", r);
        zt_ckpt_pathf(crc, sizeof(crc), "%08x", m->crc[r]);
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(name));
        json_object_set_new(o, "bytes", json_integer((json_int_t)m->bytes[r]));
        json_object_set_new(o, "crc32c", json_string(crc));
        json_array_append_new(shards, o);
    }
    json_object_set_new(root, "shards", shards);
    char *js = zt_job_to_json(job);
    json_t *jj = js ? json_loads(js, 0, NULL) : NULL;
    zt_free(js);
    char *out = NULL;
    uint32_t crc;
    if (jj) {
        json_object_set_new(root, "job", jj);
        if (meta_canonical_crc(root, &crc) == ZT_OK) {
            char hex[16];
            zt_ckpt_pathf(hex, sizeof(hex), "%08x", crc);
            json_object_set_new(root, META_CRC_KEY, json_string(hex));
            out = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        }
    }
    json_decref(root);
    return out;
}

/* Exactly eight hex digits. */
static bool parse_hex32(const char *s, uint32_t *out)
{
    if (!s || strlen(s) != 8)
        return false;
    for (int i = 0; i < 8; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    *out = (uint32_t)strtoul(s, NULL, 16);
    return true;
}

/* Field readers of meta.json: `name` is how messages spell the field ("model.n_layer"). */
typedef struct meta_reader {
    const char *path; /* .../meta.json */
    zt_err *err;
} meta_reader;

static zt_status meta_missing(const meta_reader *r, const char *name, const char *want)
{
    return zt_err_set(r->err, ZT_ERR_CORRUPT, "%s: \"%s\" is missing or not %s; %s", r->path,
                      name, want, META_HINT);
}

static zt_status meta_int(const meta_reader *r, json_t *obj, const char *key, const char *name,
                          int64_t lo, int64_t hi, int64_t *out)
{
    json_t *x = json_object_get(obj, key);
    if (!json_is_integer(x))
        return meta_missing(r, name, "an integer");
    int64_t v = json_integer_value(x);
    if (v < lo || v > hi)
        return zt_err_set(r->err, ZT_ERR_CORRUPT, "%s: \"%s\" is %lld, outside [%lld, %lld]; %s",
                          r->path, name, (long long)v, (long long)lo, (long long)hi, META_HINT);
    *out = v;
    return ZT_OK;
}

static zt_status meta_object(const meta_reader *r, json_t *obj, const char *key,
                             const char *name, json_t **out)
{
    *out = json_object_get(obj, key);
    return json_is_object(*out) ? ZT_OK : meta_missing(r, name, "an object");
}

static zt_status meta_array(const meta_reader *r, json_t *obj, const char *key, size_t n,
                            json_t **out)
{
    *out = json_object_get(obj, key);
    if (!json_is_array(*out))
        return meta_missing(r, key, "an array");
    if (json_array_size(*out) != n)
        return zt_err_set(r->err, ZT_ERR_CORRUPT,
                          "%s: \"%s\" has %zu entries but the model and world size it records need %zu; %s",
                          r->path, key, json_array_size(*out), n, META_HINT);
    return ZT_OK;
}

static zt_status meta_string(const meta_reader *r, json_t *obj, const char *key,
                             const char *name, const char **out)
{
    *out = json_string_value(json_object_get(obj, key));
    return *out ? ZT_OK : meta_missing(r, name, "a string");
}

/* A field that must equal what the rest of meta.json implies. */
static zt_status meta_derived(const meta_reader *r, const char *name, int64_t v, int64_t want,
                              const char *why)
{
    if (v == want)
        return ZT_OK;
    return zt_err_set(r->err, ZT_ERR_CORRUPT, "%s: \"%s\" is %lld but %s gives %lld; %s", r->path,
                      name, (long long)v, why, (long long)want, META_HINT);
}

/* A field check of meta_read: on failure st holds its status and control goes to the label
 * the call site names. */
#define TRY(call, label)                                                                           \
    do {                                                                                           \
        if ((st = (call)) != ZT_OK)                                                                \
            goto label;                                                                            \
    } while (0)

/* Parses and validates meta.json: every field present, of its type and in range, the derived
 * fields consistent, and its checksum computed (compared by zt_ckpt_open after the shards,
 * so that a field the shards contradict is named first). */
static zt_status meta_read(zt_ckpt_meta *m, const char *step_dir, zt_err *err)
{
    zt_status st;
    memset(m, 0, sizeof(*m));
    char path[ZT_PATH_MAX + 16];
    zt_ckpt_pathf(path, sizeof(path), "%s/%s", step_dir, ZT_CKPT_META_NAME);
    meta_reader rd = {path, err};
    const meta_reader *r = &rd;
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (!file_exists(path))
            return zt_err_set(err, ZT_ERR_NOT_FOUND,
                              "%s is missing: %s is not a complete checkpoint", path, step_dir);
        return zt_err_set(err, ZT_ERR_CORRUPT, "%s:%d:%d: %s; %s", path, je.line, je.column,
                          je.text, META_HINT);
    }
    int64_t v = 0;
    const char *s = NULL;
    json_t *model, *data, *sched, *ls, *units, *shards, *job;
    if (!json_is_object(root) || !json_is_string(json_object_get(root, "format")) ||
        strcmp(json_string_value(json_object_get(root, "format")), FORMAT_NAME) != 0) {
        st = zt_err_set(err, ZT_ERR_FORMAT, "%s: not a zerotrain checkpoint (format is not \"%s\")",
                        path, FORMAT_NAME);
        goto free_root;
    }
    TRY(meta_int(r, root, "version", "version", 0, INT32_MAX, &v), free_root);
    if (v != ZT_CKPT_VERSION) {
        st = zt_err_set(err, ZT_ERR_FORMAT,
                        "%s: checkpoint version %lld, this zerotrain reads version %d; resume it with the zerotrain that wrote it",
                        path, (long long)v, ZT_CKPT_VERSION);
        goto free_root;
    }
    TRY(meta_int(r, root, "step", "step", 0, INT64_MAX / 2, &m->step), free_root);
    TRY(meta_int(r, root, "applied_steps", "applied_steps", 0, m->step, &m->applied_steps),
        free_root);
    TRY(meta_int(r, root, "skipped_steps", "skipped_steps", 0, m->step, &m->skipped_steps),
        free_root);
    TRY(meta_derived(r, "applied_steps", m->applied_steps, m->step - m->skipped_steps,
                     "step - skipped_steps"), free_root);
    TRY(meta_int(r, root, "world", "world", 1, 1 << 20, &v), free_root);
    m->world = (int)v;
    TRY(meta_int(r, root, "stage", "stage", 0, 3, &v), free_root);
    m->stage = (int)v;
    TRY(meta_string(r, root, "precision", "precision", &s), free_root);
    if (strcmp(s, "fp32") == 0) {
        m->precision = ZT_F32;
    } else if (strcmp(s, "bf16") == 0) {
        m->precision = ZT_BF16;
    } else if (strcmp(s, "fp16") == 0) {
        m->precision = ZT_F16;
    } else {
        st = zt_err_set(err, ZT_ERR_CORRUPT,
                        "%s: \"precision\" is \"%s\", not fp32, bf16 or fp16; %s", path, s,
                        META_HINT);
        goto free_root;
    }
    TRY(meta_object(r, root, "model", "model", &model), free_root);
    TRY(meta_int(r, model, "n_layer", "model.n_layer", 1, 1 << 16, &v), free_root);
    m->dims.L = (int)v;
    TRY(meta_int(r, model, "n_head", "model.n_head", 1, 1 << 16, &v), free_root);
    m->dims.NH = (int)v;
    TRY(meta_int(r, model, "n_embd", "model.n_embd", 1, 1 << 20, &v), free_root);
    m->dims.C = (int)v;
    TRY(meta_int(r, model, "block_size", "model.block_size", 1, 1 << 24, &v), free_root);
    m->dims.T = (int)v;
    TRY(meta_int(r, model, "vocab_size", "model.vocab_size", 1, 1 << 24, &v), free_root);
    m->dims.V = (int)v;
    TRY(meta_int(r, model, "padded_vocab_size", "model.padded_vocab_size", m->dims.V, 1 << 24,
                 &v), free_root);
    m->dims.Vp = (int)v;
    TRY(meta_int(r, root, "train_batch_size", "train_batch_size", 1, INT32_MAX,
                 &m->train_batch_size), free_root);
    TRY(meta_int(r, root, "train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu", 1,
                 INT32_MAX, &m->micro_batch), free_root);
    TRY(meta_int(r, root, "gradient_accumulation_steps", "gradient_accumulation_steps", 1,
                 INT32_MAX, &m->grad_accum), free_root);
    TRY(meta_derived(r, "train_batch_size", m->train_batch_size,
                     m->micro_batch * m->grad_accum * m->world,
                     "micro batch x accumulation steps x world"), free_root);
    TRY(meta_object(r, root, "data", "data", &data), free_root);
    TRY(meta_int(r, data, "next_step", "data.next_step", 0, INT64_MAX, &v), free_root);
    TRY(meta_derived(r, "data.next_step", v, m->step, "step"), free_root);
    TRY(meta_int(r, data, "samples_consumed", "data.samples_consumed", 0, INT64_MAX, &v),
        free_root);
    TRY(meta_derived(r, "data.samples_consumed", v, m->step * m->train_batch_size,
                     "step x train_batch_size"), free_root);
    TRY(meta_object(r, root, "scheduler", "scheduler", &sched), free_root);
    TRY(meta_int(r, sched, "t", "scheduler.t", 0, INT64_MAX, &v), free_root);
    TRY(meta_derived(r, "scheduler.t", v, m->applied_steps, "applied_steps"), free_root);
    TRY(meta_object(r, root, "loss_scaler", "loss_scaler", &ls), free_root);
    json_t *scale = json_object_get(ls, "scale");
    if (!json_is_number(scale)) {
        st = meta_missing(r, "loss_scaler.scale", "a number");
        goto free_root;
    }
    m->ls_scale = json_number_value(scale);
    if (!isfinite(m->ls_scale) || m->ls_scale <= 0.0) {
        st = zt_err_set(err, ZT_ERR_CORRUPT, "%s: \"loss_scaler.scale\" is %g, not a positive number; %s",
                        path, m->ls_scale, META_HINT);
        goto free_root;
    }
    TRY(meta_int(r, ls, "iter", "loss_scaler.iter", 0, INT64_MAX, &m->ls_iter), free_root);
    TRY(meta_int(r, ls, "last_overflow", "loss_scaler.last_overflow", -1, INT64_MAX,
                 &m->ls_last_overflow), free_root);
    TRY(meta_int(r, ls, "hysteresis_left", "loss_scaler.hysteresis_left", 0, INT32_MAX, &v),
        free_root);
    m->ls_hyst_left = (int)v;
    m->n_units = m->dims.L + 2;
    TRY(meta_array(r, root, "units", (size_t)m->n_units, &units), free_root);
    TRY(meta_array(r, root, "shards", (size_t)m->world, &shards), free_root);
    TRY(meta_object(r, root, "job", "job", &job), free_root);
    TRY(zt_ckpt_meta_alloc(m, err), free_root);
    char name[64];
    for (int u = 0; u < m->n_units; u++) {
        json_t *o = json_array_get(units, (size_t)u);
        zt_ckpt_pathf(name, sizeof(name), "units[%d].numel", u);
        TRY(meta_int(r, o, "numel", name, 1, INT64_MAX / 16, &v), free_meta);
        m->numel[u] = (size_t)v;
        zt_ckpt_pathf(name, sizeof(name), "units[%d].shard", u);
        TRY(meta_int(r, o, "shard", name, 1, INT64_MAX / 16 / m->world, &v), free_meta);
        m->shard[u] = (size_t)v;
        if (m->shard[u] * (size_t)m->world < m->numel[u]) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "%s: \"units[%d]\": %d shards of %zu elements cannot hold %zu elements; %s",
                            path, u, m->world, m->shard[u], m->numel[u], META_HINT);
            goto free_meta;
        }
    }
    for (int i = 0; i < m->world; i++) {
        json_t *o = json_array_get(shards, (size_t)i);
        char expect[32];
        zt_ckpt_pathf(expect, sizeof(expect), "rank_%05d.zts", i);
        zt_ckpt_pathf(name, sizeof(name), "shards[%d].file", i);
        TRY(meta_string(r, o, "file", name, &s), free_meta);
        if (strcmp(s, expect) != 0) {
            st = zt_err_set(err, ZT_ERR_CORRUPT, "%s: \"%s\" is \"%s\", expected \"%s\"; %s", path,
                            name, s, expect, META_HINT);
            goto free_meta;
        }
        zt_ckpt_pathf(name, sizeof(name), "shards[%d].bytes", i);
        TRY(meta_int(r, o, "bytes", name, (int64_t)sizeof(zt_shard_header), INT64_MAX, &v),
            free_meta);
        m->bytes[i] = (uint64_t)v;
        zt_ckpt_pathf(name, sizeof(name), "shards[%d].crc32c", i);
        TRY(meta_string(r, o, "crc32c", name, &s), free_meta);
        if (!parse_hex32(s, &m->crc[i])) {
            st = meta_missing(r, name, "eight hex digits");
            goto free_meta;
        }
    }
    if (!parse_hex32(json_string_value(json_object_get(root, META_CRC_KEY)),
                     &m->meta_crc_recorded)) {
        st = meta_missing(r, META_CRC_KEY, "eight hex digits");
        goto free_meta;
    }
    json_object_del(root, META_CRC_KEY);
    if (meta_canonical_crc(root, &m->meta_crc) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory checking %s", path);
        goto free_meta;
    }
    json_decref(root);
    return ZT_OK;
free_meta:
    zt_ckpt_meta_free(m);
free_root:
    json_decref(root);
    return st;
}
#undef TRY

/* ---- reader ---- */

static size_t payload_bytes(const zt_ckpt_meta *m)
{
    size_t b = 0;
    for (int u = 0; u < m->n_units; u++)
        b += 12 * m->shard[u];
    return b;
}

void zt_ckpt_close(zt_ckpt *c)
{
    if (!c)
        return;
    if (c->fds)
        for (int r = 0; r < c->m.world; r++)
            if (c->fds[r] >= 0)
                close(c->fds[r]);
    zt_free(c->fds);
    zt_free(c->unit_off);
    zt_free(c->tables);
    zt_free(c->scratch);
    zt_gpt2_layout_free(&c->lay);
    zt_ckpt_meta_free(&c->m);
    zt_free(c);
}

/* n bytes at offset `at` of shard r, all of them (a short file is an error). */
static zt_status pread_full(zt_ckpt *c, int r, void *buf, size_t n, uint64_t at, zt_err *err)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = pread(c->fds[r], p, n, (off_t)at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return zt_err_set(err, got < 0 ? ZT_ERR_IO : ZT_ERR_CORRUPT,
                              "%s/rank_%05d.zts: cannot read byte %llu: %s; the shard is unreadable or truncated, resume from another checkpoint",
                              c->dir, r, (unsigned long long)at,
                              got < 0 ? strerror(errno) : "end of file");
        p += got;
        at += (uint64_t)got;
        n -= (size_t)got;
    }
    return ZT_OK;
}

/* meta.json against one shard's header: the training state each header repeats. A mismatch
 * names meta.json, the field and the shard. */
static zt_status check_header_state(const zt_ckpt *c, const zt_shard_header *h, const char *file,
                                    zt_err *err)
{
    const zt_ckpt_meta *m = &c->m;
    const struct {
        const char *name;
        long long meta, shard;
    } f[] = {
        {"stage", m->stage, h->stage},
        {"applied_steps", m->applied_steps, (long long)h->applied_steps},
        {"skipped_steps", m->skipped_steps, (long long)h->skipped_steps},
        {"train_batch_size", m->train_batch_size, (long long)h->train_batch_size},
        {"train_micro_batch_size_per_gpu", m->micro_batch, (long long)h->micro_batch},
        {"gradient_accumulation_steps", m->grad_accum, (long long)h->grad_accum},
        {"loss_scaler.iter", m->ls_iter, h->ls_iter},
        {"loss_scaler.last_overflow", m->ls_last_overflow, h->ls_last_overflow},
        {"loss_scaler.hysteresis_left", m->ls_hyst_left, h->ls_hysteresis_left},
        {"model.n_layer", m->dims.L, h->dims[0]},
        {"model.n_head", m->dims.NH, h->dims[1]},
        {"model.n_embd", m->dims.C, h->dims[2]},
        {"model.block_size", m->dims.T, h->dims[3]},
        {"model.vocab_size", m->dims.V, h->dims[4]},
        {"model.padded_vocab_size", m->dims.Vp, h->dims[5]},
    };
    char mp[ZT_PATH_MAX + 48];
    zt_ckpt_pathf(mp, sizeof(mp), "%s/%s", c->dir, ZT_CKPT_META_NAME);
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i].meta != f[i].shard)
            return zt_err_set(err, ZT_ERR_CORRUPT, "%s: \"%s\" is %lld but %s was written with %lld; %s",
                              mp, f[i].name, f[i].meta, file, f[i].shard, META_HINT);
    if (h->precision != (uint32_t)m->precision)
        return zt_err_set(err, ZT_ERR_CORRUPT, "%s: \"precision\" is %s but %s was written with %s; %s",
                          mp, zt_dtype_name(m->precision), file,
                          h->precision <= ZT_F16 ? zt_dtype_name((zt_dtype)h->precision) : "?",
                          META_HINT);
    if (memcmp(&h->ls_scale, &m->ls_scale, sizeof(double)) != 0)
        return zt_err_set(err, ZT_ERR_CORRUPT, "%s: \"loss_scaler.scale\" is %.17g but %s was written with %.17g; %s",
                          mp, m->ls_scale, file, h->ls_scale, META_HINT);
    if (zt_ckpt_units_crc(m->n_units, m->numel, m->shard) != h->units_crc32c)
        return zt_err_set(err, ZT_ERR_CORRUPT,
                          "%s: \"units\" (the partition layout) disagrees with the one %s was written with; %s",
                          mp, file, META_HINT);
    return ZT_OK;
}

zt_status zt_ckpt_open(zt_ckpt **out, const char *path, zt_err *err)
{
    zt_status st;
    *out = NULL;
    zt_ckpt *c = zt_calloc(1, sizeof(*c));
    if (!c)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    unsigned char *table = NULL;
    if ((st = zt_ckpt_resolve(path, c->dir, sizeof(c->dir), err)) != ZT_OK)
        goto close_ckpt;
    if ((st = meta_read(&c->m, c->dir, err)) != ZT_OK)
        goto close_ckpt;
    if (zt_gpt2_layout_init(&c->lay, &c->m.dims) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto close_ckpt;
    }
    for (int u = 0; u < c->m.n_units; u++) {
        if (c->lay.unit_numel[u] != c->m.numel[u]) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "%s/%s: \"units[%d].numel\" is %zu but its model has %zu; %s",
                            c->dir, ZT_CKPT_META_NAME, u, c->m.numel[u], c->lay.unit_numel[u],
                            META_HINT);
            goto close_ckpt;
        }
    }
    size_t ntab = (size_t)c->m.n_units * ZT_CKPT_SECTIONS;
    size_t tbytes = zt_ckpt_table_bytes(c->m.n_units);
    c->fds = zt_calloc((size_t)c->m.world, sizeof(int));
    c->unit_off = zt_calloc((size_t)c->m.n_units, sizeof(size_t));
    c->tables = zt_calloc((size_t)c->m.world * ntab, sizeof(uint32_t));
    table = zt_malloc(tbytes);
    if (!c->fds || !c->unit_off || !c->tables || !table) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto close_ckpt;
    }
    size_t off = 0;
    for (int u = 0; u < c->m.n_units; u++) {
        c->unit_off[u] = off;
        off += 12 * c->m.shard[u];
    }
    c->payload_off = sizeof(zt_shard_header) + tbytes;
    size_t expect = c->payload_off + payload_bytes(&c->m);
    for (int r = 0; r < c->m.world; r++)
        c->fds[r] = -1;
    for (int r = 0; r < c->m.world; r++) {
        char file[ZT_PATH_MAX + 32];
        zt_ckpt_pathf(file, sizeof(file), "%s/rank_%05d.zts", c->dir, r);
        c->fds[r] = open(file, O_RDONLY | O_CLOEXEC);
        if (c->fds[r] < 0) {
            st = zt_err_set(err, errno == ENOENT ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                            "checkpoint shard %s: %s; the checkpoint is incomplete, resume from another step",
                            file, strerror(errno));
            goto close_ckpt;
        }
        struct stat sb;
        if (fstat(c->fds[r], &sb) != 0 || (uint64_t)sb.st_size != c->m.bytes[r] ||
            (size_t)sb.st_size != expect) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "checkpoint shard %s has %lld bytes but %s records %llu and the layout needs %zu; the file is truncated or from another checkpoint",
                            file, (long long)sb.st_size, ZT_CKPT_META_NAME,
                            (unsigned long long)c->m.bytes[r], expect);
            goto close_ckpt;
        }
        zt_shard_header h;
        if ((st = pread_full(c, r, &h, sizeof(h), 0, err)) != ZT_OK)
            goto close_ckpt;
        uint32_t hcrc = zt_crc32c(0, &h, offsetof(zt_shard_header, header_crc32c));
        if (memcmp(h.magic, ZT_CKPT_SHARD_MAGIC, 8) != 0 || hcrc != h.header_crc32c) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "checkpoint shard %s: bad header (magic or header checksum); the file is corrupted",
                            file);
            goto close_ckpt;
        }
        if (h.version != ZT_CKPT_VERSION || h.rank != (uint32_t)r ||
            h.world != (uint32_t)c->m.world || h.step != (uint64_t)c->m.step ||
            h.n_units != (uint32_t)c->m.n_units || h.sections != ZT_CKPT_SECTIONS ||
            h.payload_offset != c->payload_off || h.payload_bytes != payload_bytes(&c->m) ||
            h.table_crc32c != c->m.crc[r]) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "checkpoint shard %s disagrees with %s (header says version %u, rank %u of %u, step %llu, crc32c %08x; meta.json says version %d, rank %d of %d, step %lld, crc32c %08x)",
                            file, ZT_CKPT_META_NAME, h.version, h.rank, h.world,
                            (unsigned long long)h.step, h.table_crc32c, ZT_CKPT_VERSION, r,
                            c->m.world, (long long)c->m.step, c->m.crc[r]);
            goto close_ckpt;
        }
        if ((st = pread_full(c, r, table, tbytes, sizeof(h), err)) != ZT_OK)
            goto close_ckpt;
        uint32_t tcrc = zt_crc32c(0, table, tbytes);
        if (tcrc != h.table_crc32c) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "checkpoint shard %s: its chunk checksum table is corrupted (crc32c %08x, expected %08x); resume from another checkpoint",
                            file, tcrc, h.table_crc32c);
            goto close_ckpt;
        }
        memcpy(c->tables + (size_t)r * ntab, table, ntab * sizeof(uint32_t));
        if ((st = check_header_state(c, &h, file, err)) != ZT_OK)
            goto close_ckpt;
    }
    if (c->m.meta_crc != c->m.meta_crc_recorded) {
        st = zt_err_set(err, ZT_ERR_CORRUPT,
                        "%s/%s: its content does not match its checksum \"%s\" (%08x, recorded %08x); %s",
                        c->dir, ZT_CKPT_META_NAME, META_CRC_KEY, c->m.meta_crc,
                        c->m.meta_crc_recorded, META_HINT);
        goto close_ckpt;
    }
    zt_free(table);
    *out = c;
    return ZT_OK;
close_ckpt:
    zt_free(table);
    zt_ckpt_close(c);
    return st;
}

int64_t zt_ckpt_step(const zt_ckpt *c)
{
    return c->m.step;
}

static uint32_t chunk_crc_recorded(const zt_ckpt *c, int r, int u, int section)
{
    size_t chunk = ((size_t)r * (size_t)c->m.n_units + (size_t)u) * ZT_CKPT_SECTIONS;
    return c->tables[chunk + (size_t)section];
}

static zt_status chunk_mismatch(const zt_ckpt *c, int r, int u, int section, uint32_t got,
                                zt_err *err)
{
    return zt_err_set(err, ZT_ERR_CORRUPT,
                      "%s/rank_%05d.zts: checksum mismatch in unit %d %s (crc32c %08x, expected %08x); the shard is corrupted, resume from another checkpoint",
                      c->dir, r, u, section_names[section], got,
                      chunk_crc_recorded(c, r, u, section));
}

static zt_status verify_shard(zt_ckpt *c, int r, zt_err *err)
{
    if (!c->scratch && !(c->scratch = zt_malloc(STREAM_BYTES)))
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    uint64_t at = c->payload_off;
    for (int u = 0; u < c->m.n_units; u++) {
        for (int sec = 0; sec < ZT_CKPT_SECTIONS; sec++) {
            size_t total = c->m.shard[u] * sizeof(float);
            uint32_t crc = 0;
            for (size_t done = 0; done < total;) {
                size_t n = total - done < STREAM_BYTES ? total - done : STREAM_BYTES;
                zt_status st = pread_full(c, r, c->scratch, n, at, err);
                if (st != ZT_OK)
                    return st;
                crc = zt_crc32c(crc, c->scratch, n);
                done += n;
                at += n;
            }
            c->bytes_read += total;
            if (crc != chunk_crc_recorded(c, r, u, sec))
                return chunk_mismatch(c, r, u, sec, crc, err);
        }
    }
    return ZT_OK;
}

zt_status zt_ckpt_verify(zt_ckpt *c, zt_err *err)
{
    for (int r = 0; r < c->m.world; r++) {
        zt_status st = verify_shard(c, r, err);
        if (st != ZT_OK)
            return st;
    }
    return ZT_OK;
}

/* Byte offset in its shard file of element `in` of section `section` of unit u. */
static uint64_t chunk_at(const zt_ckpt *c, int section, int u, size_t in)
{
    return c->payload_off + c->unit_off[u] + ((size_t)section * c->m.shard[u] + in) * 4;
}

zt_status zt_ckpt_read(zt_ckpt *c, int section, int u, size_t pos, size_t len, float *out,
                       zt_err *err)
{
    size_t S = c->m.shard[u];
    while (len > 0) {
        int r = (int)(pos / S);
        size_t in = pos - (size_t)r * S;
        size_t n = S - in < len ? S - in : len;
        if (r >= c->m.world)
            return zt_err_set(err, ZT_ERR_INVALID, "checkpoint read past unit %d", u);
        zt_status st = pread_full(c, r, out, n * 4, chunk_at(c, section, u, in), err);
        if (st != ZT_OK)
            return st;
        c->bytes_read += n * 4;
        out += n;
        pos += n;
        len -= n;
    }
    return ZT_OK;
}

zt_status zt_ckpt_read_verified(zt_ckpt *c, int section, int u, size_t pos, size_t len,
                               float *out, zt_err *err)
{
    size_t S = c->m.shard[u];
    if (len == 0)
        return ZT_OK;
    size_t r0 = pos / S, r1 = (pos + len - 1) / S;
    if (r1 >= (size_t)c->m.world)
        return zt_err_set(err, ZT_ERR_INVALID, "checkpoint read past unit %d", u);
    for (size_t r = r0; r <= r1; r++) {
        size_t c0 = r * S;
        size_t lo = pos > c0 ? pos : c0, hi = pos + len < c0 + S ? pos + len : c0 + S;
        uint64_t at = chunk_at(c, section, u, 0);
        uint32_t crc = 0;
        zt_status st;
        if (lo == c0 && hi == c0 + S) { /* the whole chunk is wanted: read it in place */
            float *dst = out + (c0 - pos);
            if ((st = pread_full(c, (int)r, dst, S * 4, at, err)) != ZT_OK)
                return st;
            crc = zt_crc32c(0, dst, S * 4);
        } else {
            if (!c->scratch && !(c->scratch = zt_malloc(STREAM_BYTES)))
                return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
            size_t want0 = (lo - c0) * 4, want1 = (hi - c0) * 4;
            unsigned char *dst = (unsigned char *)(out + (lo - pos));
            for (size_t done = 0; done < S * 4;) {
                size_t n = S * 4 - done < STREAM_BYTES ? S * 4 - done : STREAM_BYTES;
                if ((st = pread_full(c, (int)r, c->scratch, n, at + done, err)) != ZT_OK)
                    return st;
                crc = zt_crc32c(crc, c->scratch, n);
                size_t b0 = done > want0 ? done : want0;
                size_t b1 = done + n < want1 ? done + n : want1;
                if (b0 < b1)
                    memcpy(dst + (b0 - want0), c->scratch + (b0 - done), b1 - b0);
                done += n;
            }
        }
        c->bytes_read += S * 4;
        if (crc != chunk_crc_recorded(c, (int)r, u, section))
            return chunk_mismatch(c, (int)r, u, section, crc, err);
    }
    return ZT_OK;
}

bool zt_ckpt_status_is_bad(zt_status st)
{
    return st == ZT_ERR_CORRUPT || st == ZT_ERR_FORMAT;
}

zt_status zt_ckpt_inspect(const char *path, FILE *out, bool json, zt_err *err)
{
    zt_ckpt *c = NULL;
    zt_status st = zt_ckpt_open(&c, path, err);
    if (st != ZT_OK)
        return st;
    const zt_ckpt_meta *m = &c->m;
    zt_status vst = ZT_OK;
    zt_err verr;
    zt_err_clear(&verr);
    int bad = -1;
    for (int r = 0; r < m->world && bad < 0; r++) {
        vst = verify_shard(c, r, &verr);
        if (vst != ZT_OK)
            bad = r;
    }
    size_t params = 0;
    for (int u = 0; u < m->n_units; u++)
        params += m->numel[u];
    if (json) {
        fprintf(out,
                "{\"dir\":\"%s\",\"step\":%lld,\"applied_steps\":%lld,\"skipped_steps\":%lld,\"world\":%d,\"stage\":%d,\"precision\":\"%s\",\"params\":%zu,\"train_batch_size\":%lld,\"verified\":%s,\"shards\":[",
                c->dir, (long long)m->step, (long long)m->applied_steps,
                (long long)m->skipped_steps, m->world, m->stage, zt_dtype_name(m->precision),
                params, (long long)m->train_batch_size, vst == ZT_OK ? "true" : "false");
        for (int r = 0; r < m->world; r++)
            fprintf(out, "%s{\"file\":\"rank_%05d.zts\",\"bytes\":%llu,\"crc32c\":\"%08x\"}",
                    r ? "," : "", r, (unsigned long long)m->bytes[r], m->crc[r]);
        fprintf(out, "]}\n");
    } else {
        fprintf(out, "checkpoint %s\n", c->dir);
        fprintf(out, "  step %lld (%lld applied, %lld skipped)\n", (long long)m->step,
                (long long)m->applied_steps, (long long)m->skipped_steps);
        fprintf(out, "  model: n_layer %d n_head %d n_embd %d block_size %d vocab %d (padded %d), %zu parameters\n",
                m->dims.L, m->dims.NH, m->dims.C, m->dims.T, m->dims.V, m->dims.Vp, params);
        fprintf(out, "  written by %d ranks at ZeRO stage %d, %s; train_batch_size %lld\n",
                m->world, m->stage, zt_dtype_name(m->precision), (long long)m->train_batch_size);
        for (int r = 0; r < m->world; r++)
            fprintf(out, "  rank_%05d.zts  %llu bytes  crc32c %08x  %s\n", r,
                    (unsigned long long)m->bytes[r], m->crc[r],
                    bad < 0 || r < bad ? "ok" : r == bad ? "CORRUPT" : "not checked");
    }
    if (vst != ZT_OK)
        st = zt_err_set(err, vst, "%s", verr.msg);
    zt_ckpt_close(c);
    return st;
}
