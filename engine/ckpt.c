/* zerotrain: sharded checkpoints — save (snapshot, background write, commit by rank 0),
 * load with re-sharding, and the engine-free reader behind export and inspect (see ckpt.h). */
#define _POSIX_C_SOURCE 200809L
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/crc32c.h"
#include "../common/log.h"
#include "../common/timeutil.h"
#include "dataloader.h"
#include "engine_int.h"
#include "gpt2.h"
#include "modelfile.h"

#define META_NAME "meta.json"
#define FORMAT_NAME "zerotrain-checkpoint"

/* snprintf for paths and short texts; truncation is checked by the callers that can hit it
 * (paths are bounded by ZT_PATH_MAX well before these buffers). */
static int pathf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return w;
}

static const char *precision_name(zt_dtype d)
{
    return zt_dtype_name(d);
}

static int mkdir_p(const char *path)
{
    char tmp[ZT_PATH_MAX];
    pathf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- resolving a path to a complete step directory ---- */

static int64_t parse_step_name(const char *name)
{
    if (strncmp(name, "step_", 5) != 0)
        return -1;
    char *end;
    long long v = strtoll(name + 5, &end, 10);
    if (*end || end == name + 5 || v < 0)
        return -1;
    return v;
}

zt_status zt_ckpt_resolve(const char *path, char *step_dir, size_t len, zt_err *err)
{
    char meta[ZT_PATH_MAX + 16];
    pathf(meta, sizeof(meta), "%s/%s", path, META_NAME);
    if (file_exists(meta)) {
        pathf(step_dir, len, "%s", path);
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
        int64_t s = parse_step_name(de->d_name);
        if (s < 0)
            continue;
        pathf(meta, sizeof(meta), "%s/%s/%s", path, de->d_name, META_NAME);
        if (!file_exists(meta)) {
            incomplete = true;
            continue;
        }
        if (s > best)
            best = s;
    }
    closedir(d);
    if (best < 0) {
        if (parse_step_name(strrchr(path, '/') ? strrchr(path, '/') + 1 : path) >= 0)
            return zt_err_set(err, ZT_ERR_CORRUPT,
                              "checkpoint %s is incomplete: it has no %s (the save did not finish); resume from an earlier step",
                              path, META_NAME);
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "no complete checkpoint in %s%s", path,
                          incomplete ? " (only incomplete step directories without meta.json)"
                                     : "");
    }
    pathf(step_dir, len, "%s/step_%08lld", path, (long long)best);
    return ZT_OK;
}

/* ---- meta.json ---- */

typedef struct ckpt_meta {
    int64_t step, applied_steps, skipped_steps;
    int world, stage;
    zt_dtype precision;
    zt_gpt2_dims dims;
    int64_t train_batch_size, micro_batch, grad_accum;
    int n_units;
    size_t *numel, *shard; /* per unit */
    uint64_t *bytes;       /* per rank */
    uint32_t *crc;         /* per rank */
    double ls_scale;
    int64_t ls_iter, ls_last_overflow;
    int ls_hyst_left;
} ckpt_meta;

static void meta_free(ckpt_meta *m)
{
    zt_free(m->numel);
    zt_free(m->bytes);
    m->numel = m->shard = NULL;
    m->bytes = NULL;
    m->crc = NULL;
}

static zt_status meta_alloc(ckpt_meta *m, zt_err *err)
{
    m->numel = zt_calloc((size_t)m->n_units * 2, sizeof(size_t));
    m->bytes = zt_calloc((size_t)m->world * 2, sizeof(uint64_t));
    if (!m->numel || !m->bytes) {
        meta_free(m);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    }
    m->shard = m->numel + m->n_units;
    m->crc = (uint32_t *)(m->bytes + m->world);
    return ZT_OK;
}

static char *meta_to_json(const ckpt_meta *m, const zt_job *job)
{
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(FORMAT_NAME));
    json_object_set_new(root, "version", json_integer(ZT_CKPT_VERSION));
    json_object_set_new(root, "step", json_integer(m->step));
    json_object_set_new(root, "applied_steps", json_integer(m->applied_steps));
    json_object_set_new(root, "skipped_steps", json_integer(m->skipped_steps));
    json_object_set_new(root, "world", json_integer(m->world));
    json_object_set_new(root, "stage", json_integer(m->stage));
    json_object_set_new(root, "precision", json_string(precision_name(m->precision)));
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
        pathf(name, sizeof(name), "rank_%05d.zts", r);
        pathf(crc, sizeof(crc), "%08x", m->crc[r]);
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(name));
        json_object_set_new(o, "bytes", json_integer((json_int_t)m->bytes[r]));
        json_object_set_new(o, "crc32c", json_string(crc));
        json_array_append_new(shards, o);
    }
    json_object_set_new(root, "shards", shards);
    if (job) {
        char *js = zt_job_to_json(job);
        json_t *jj = js ? json_loads(js, 0, NULL) : NULL;
        zt_free(js);
        if (jj)
            json_object_set_new(root, "job", jj);
    }
    char *out = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return out;
}

static zt_status meta_get_int(json_t *o, const char *key, int64_t *v, const char *path,
                              zt_err *err)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x))
        return zt_err_set(err, ZT_ERR_CORRUPT,
                          "%s: \"%s\" is missing or not an integer; the checkpoint metadata is damaged",
                          path, key);
    *v = json_integer_value(x);
    return ZT_OK;
}

static zt_status meta_read(ckpt_meta *m, const char *step_dir, zt_err *err)
{
    zt_status st;
    memset(m, 0, sizeof(*m));
    char path[ZT_PATH_MAX + 16];
    pathf(path, sizeof(path), "%s/%s", step_dir, META_NAME);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (!file_exists(path))
            return zt_err_set(err, ZT_ERR_NOT_FOUND,
                              "%s is missing: %s is not a complete checkpoint", path, step_dir);
        return zt_err_set(err, ZT_ERR_CORRUPT, "%s:%d:%d: %s; the checkpoint metadata is damaged",
                          path, je.line, je.column, je.text);
    }
    int64_t v = 0;
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), FORMAT_NAME) != 0) {
        st = zt_err_set(err, ZT_ERR_FORMAT, "%s: not a zerotrain checkpoint (format is not \"%s\")",
                        path, FORMAT_NAME);
        goto out;
    }
#define GETI(obj, key, dst)                                                                        \
    do {                                                                                           \
        if ((st = meta_get_int((obj), (key), &v, path, err)) != ZT_OK)                             \
            goto out;                                                                              \
        dst = v;                                                                                   \
    } while (0)
    GETI(root, "version", v);
    if (v != ZT_CKPT_VERSION) {
        st = zt_err_set(err, ZT_ERR_FORMAT,
                        "%s: checkpoint version %lld, this zerotrain reads version %d", path,
                        (long long)v, ZT_CKPT_VERSION);
        goto out;
    }
    GETI(root, "step", m->step);
    GETI(root, "applied_steps", m->applied_steps);
    GETI(root, "skipped_steps", m->skipped_steps);
    GETI(root, "world", m->world);
    GETI(root, "stage", m->stage);
    GETI(root, "train_batch_size", m->train_batch_size);
    GETI(root, "train_micro_batch_size_per_gpu", m->micro_batch);
    GETI(root, "gradient_accumulation_steps", m->grad_accum);
    json_t *model = json_object_get(root, "model");
    GETI(model, "n_layer", m->dims.L);
    GETI(model, "n_head", m->dims.NH);
    GETI(model, "n_embd", m->dims.C);
    GETI(model, "block_size", m->dims.T);
    GETI(model, "vocab_size", m->dims.V);
    GETI(model, "padded_vocab_size", m->dims.Vp);
    const char *prec = json_string_value(json_object_get(root, "precision"));
    m->precision = !prec ? ZT_F32 : strcmp(prec, "bf16") == 0 ? ZT_BF16
                              : strcmp(prec, "fp16") == 0 ? ZT_F16
                                                           : ZT_F32;
    json_t *ls = json_object_get(root, "loss_scaler");
    m->ls_scale = json_number_value(json_object_get(ls, "scale"));
    GETI(ls, "iter", m->ls_iter);
    GETI(ls, "last_overflow", m->ls_last_overflow);
    GETI(ls, "hysteresis_left", m->ls_hyst_left);
    json_t *units = json_object_get(root, "units");
    json_t *shards = json_object_get(root, "shards");
    if (m->world < 1 || m->world > 1 << 20 || !json_is_array(units) || !json_is_array(shards) ||
        json_array_size(units) != (size_t)(m->dims.L + 2) ||
        json_array_size(shards) != (size_t)m->world || m->dims.L < 1 || m->dims.C < 1) {
        st = zt_err_set(err, ZT_ERR_CORRUPT,
                        "%s: the unit or shard lists do not match the model and world size it records; the checkpoint metadata is damaged",
                        path);
        goto out;
    }
    m->n_units = m->dims.L + 2;
    if ((st = meta_alloc(m, err)) != ZT_OK)
        goto out;
    for (int u = 0; u < m->n_units; u++) {
        json_t *o = json_array_get(units, (size_t)u);
        GETI(o, "numel", m->numel[u]);
        GETI(o, "shard", m->shard[u]);
        if (m->shard[u] * (size_t)m->world < m->numel[u]) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "%s: unit %d: %d shards of %zu elements cannot hold %zu elements", path,
                            u, m->world, m->shard[u], m->numel[u]);
            goto out;
        }
    }
    for (int r = 0; r < m->world; r++) {
        json_t *o = json_array_get(shards, (size_t)r);
        GETI(o, "bytes", m->bytes[r]);
        const char *crc = json_string_value(json_object_get(o, "crc32c"));
        char expect[32];
        pathf(expect, sizeof(expect), "rank_%05d.zts", r);
        const char *file = json_string_value(json_object_get(o, "file"));
        if (!crc || !file || strcmp(file, expect) != 0) {
            st = zt_err_set(err, ZT_ERR_CORRUPT, "%s: shard entry %d is malformed", path, r);
            goto out;
        }
        m->crc[r] = (uint32_t)strtoul(crc, NULL, 16);
    }
#undef GETI
    st = ZT_OK;
out:
    if (st != ZT_OK)
        meta_free(m);
    json_decref(root);
    return st;
}

/* ---- reader ---- */

struct zt_ckpt {
    char dir[ZT_PATH_MAX + 32];
    ckpt_meta m;
    int *fds;
    size_t *unit_off; /* byte offset of unit u's section 0 in the payload */
    zt_gpt2_layout lay;
};

static size_t payload_bytes(const ckpt_meta *m)
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
    zt_gpt2_layout_free(&c->lay);
    meta_free(&c->m);
    zt_free(c);
}

static zt_status read_header(int fd, zt_shard_header *h)
{
    ssize_t n = pread(fd, h, sizeof(*h), 0);
    return n == (ssize_t)sizeof(*h) ? ZT_OK : ZT_ERR_IO;
}

zt_status zt_ckpt_open(zt_ckpt **out, const char *path, zt_err *err)
{
    zt_status st;
    *out = NULL;
    zt_ckpt *c = zt_calloc(1, sizeof(*c));
    if (!c)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    if ((st = zt_ckpt_resolve(path, c->dir, sizeof(c->dir), err)) != ZT_OK)
        goto fail;
    if ((st = meta_read(&c->m, c->dir, err)) != ZT_OK)
        goto fail;
    if (zt_gpt2_layout_init(&c->lay, &c->m.dims) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int u = 0; u < c->m.n_units; u++) {
        if (c->lay.unit_numel[u] != c->m.numel[u]) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "%s/%s: unit %d records %zu elements but its model has %zu; the metadata disagrees with itself",
                            c->dir, META_NAME, u, c->m.numel[u], c->lay.unit_numel[u]);
            goto fail;
        }
    }
    c->fds = zt_calloc((size_t)c->m.world, sizeof(int));
    c->unit_off = zt_calloc((size_t)c->m.n_units, sizeof(size_t));
    if (!c->fds || !c->unit_off) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t off = 0;
    for (int u = 0; u < c->m.n_units; u++) {
        c->unit_off[u] = off;
        off += 12 * c->m.shard[u];
    }
    size_t expect = sizeof(zt_shard_header) + payload_bytes(&c->m);
    for (int r = 0; r < c->m.world; r++)
        c->fds[r] = -1;
    for (int r = 0; r < c->m.world; r++) {
        char file[ZT_PATH_MAX + 32];
        pathf(file, sizeof(file), "%s/rank_%05d.zts", c->dir, r);
        c->fds[r] = open(file, O_RDONLY | O_CLOEXEC);
        if (c->fds[r] < 0) {
            st = zt_err_set(err, errno == ENOENT ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                            "checkpoint shard %s: %s; the checkpoint is incomplete, resume from another step",
                            file, strerror(errno));
            goto fail;
        }
        struct stat sb;
        if (fstat(c->fds[r], &sb) != 0 || (uint64_t)sb.st_size != c->m.bytes[r] ||
            (size_t)sb.st_size != expect) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "checkpoint shard %s has %lld bytes but %s records %llu and the layout needs %zu; the file is truncated or from another checkpoint",
                            file, (long long)sb.st_size, META_NAME,
                            (unsigned long long)c->m.bytes[r], expect);
            goto fail;
        }
        zt_shard_header h;
        if (read_header(c->fds[r], &h) != ZT_OK) {
            st = zt_err_set(err, ZT_ERR_IO, "checkpoint shard %s: cannot read its header", file);
            goto fail;
        }
        uint32_t hcrc = zt_crc32c(0, &h, offsetof(zt_shard_header, header_crc32c));
        if (memcmp(h.magic, ZT_CKPT_SHARD_MAGIC, 8) != 0 || hcrc != h.header_crc32c) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "checkpoint shard %s: bad header (magic or header checksum); the file is corrupted",
                            file);
            goto fail;
        }
        if (h.version != ZT_CKPT_VERSION || h.rank != (uint32_t)r ||
            h.world != (uint32_t)c->m.world || h.step != (uint64_t)c->m.step ||
            h.n_units != (uint32_t)c->m.n_units || h.payload_bytes != payload_bytes(&c->m) ||
            h.payload_crc32c != c->m.crc[r]) {
            st = zt_err_set(err, ZT_ERR_CORRUPT,
                            "checkpoint shard %s disagrees with %s (header says rank %u of %u, step %llu, crc32c %08x; meta.json says rank %d of %d, step %lld, crc32c %08x)",
                            file, META_NAME, h.rank, h.world, (unsigned long long)h.step,
                            h.payload_crc32c, r, c->m.world, (long long)c->m.step, c->m.crc[r]);
            goto fail;
        }
    }
    *out = c;
    return ZT_OK;
fail:
    zt_ckpt_close(c);
    return st;
}

int64_t zt_ckpt_step(const zt_ckpt *c)
{
    return c->m.step;
}

static zt_status verify_shard(zt_ckpt *c, int r, zt_err *err)
{
    size_t total = payload_bytes(&c->m);
    size_t chunk = 8u << 20;
    unsigned char *buf = zt_malloc(chunk);
    if (!buf)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    uint32_t crc = 0;
    size_t done = 0;
    zt_status st = ZT_OK;
    while (done < total) {
        size_t n = total - done < chunk ? total - done : chunk;
        ssize_t got = pread(c->fds[r], buf, n, (off_t)(sizeof(zt_shard_header) + done));
        if (got != (ssize_t)n) {
            st = zt_err_set(err, ZT_ERR_IO, "%s/rank_%05d.zts: read failed at byte %zu", c->dir,
                            r, sizeof(zt_shard_header) + done);
            break;
        }
        crc = zt_crc32c(crc, buf, n);
        done += n;
    }
    zt_free(buf);
    if (st == ZT_OK && crc != c->m.crc[r])
        st = zt_err_set(err, ZT_ERR_CORRUPT,
                        "%s/rank_%05d.zts: checksum mismatch (crc32c %08x, expected %08x); the shard is corrupted, resume from another checkpoint",
                        c->dir, r, crc, c->m.crc[r]);
    return st;
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
        off_t at = (off_t)(sizeof(zt_shard_header) + c->unit_off[u] +
                           ((size_t)section * S + in) * 4);
        ssize_t got = pread(c->fds[r], out, n * 4, at);
        if (got != (ssize_t)(n * 4))
            return zt_err_set(err, ZT_ERR_IO, "%s/rank_%05d.zts: short read at byte %lld",
                              c->dir, r, (long long)at);
        out += n;
        pos += n;
        len -= n;
    }
    return ZT_OK;
}

/* ---- save ---- */

struct ckpt_writer {
    char path[ZT_PATH_MAX + 32];
    unsigned char *buf; /* header + payload */
    size_t bytes;
    double write_s; /* checksum, open to durable rename, in the background thread */
    uint32_t crc;   /* payload CRC32C, set by the writer thread */
    atomic_int done;
    zt_status st;
    zt_err err;
};
typedef struct ckpt_writer ckpt_writer;

static void *writer_main(void *arg)
{
    ckpt_writer *w = arg;
    zt_outfile *f = NULL;
    double t0 = zt_now_s();
    zt_shard_header h;
    memcpy(&h, w->buf, sizeof(h));
    h.payload_crc32c = zt_crc32c(0, w->buf + sizeof(h), h.payload_bytes);
    h.header_crc32c = zt_crc32c(0, &h, offsetof(zt_shard_header, header_crc32c));
    memcpy(w->buf, &h, sizeof(h));
    w->crc = h.payload_crc32c;
    w->st = zt_outfile_open(&f, w->path, &w->err);
    if (w->st == ZT_OK)
        w->st = zt_outfile_write(f, w->buf, w->bytes, &w->err);
    if (w->st == ZT_OK)
        w->st = zt_outfile_commit(f, &w->err);
    else
        zt_outfile_abort(f);
    w->write_s = zt_now_s() - t0;
    atomic_store(&w->done, 1);
    return NULL;
}

static void step_dir_of(const zt_engine *e, int64_t step, char *out, size_t n)
{
    pathf(out, n, "%s/step_%08lld", e->job.train.checkpoint_dir, (long long)step);
}

zt_status zt_ckpt_save_begin(zt_engine *e, zt_err *err)
{
    zt_status st;
    if (e->ck_writer)
        if ((st = zt_ckpt_save_finish(e, err)) != ZT_OK)
            return st;
    uint64_t t0 = zt_now_ns();
    char dir[ZT_PATH_MAX + 32];
    step_dir_of(e, e->steps_done, dir, sizeof(dir));
    int ok = 1;
    if (e->rank == 0) {
        if (mkdir_p(dir) != 0) {
            ok = 0;
            zt_err_set(err, errno == ENOSPC ? ZT_ERR_NOSPACE : ZT_ERR_IO,
                       "cannot create checkpoint directory %s: %s", dir, strerror(errno));
        } else {
            char meta[ZT_PATH_MAX + 16];
            pathf(meta, sizeof(meta), "%s/%s", dir, META_NAME);
            unlink(meta); /* re-saving a step: it is not complete until meta.json is back */
        }
    }
    float flag = (float)ok;
    e->ops->copy_h2d(e->k, e->d_red, &flag, sizeof(flag));
    if ((st = zt_comm_broadcast(e->comm, e->d_red, sizeof(float), 0, NULL, err)) != ZT_OK)
        return st;
    e->ops->copy_d2h(e->k, &flag, e->d_red, sizeof(flag));
    if (flag == 0.0f)
        return e->rank == 0 ? ZT_ERR_IO
                            : zt_err_set(err, ZT_ERR_IO,
                                         "rank 0 could not create the checkpoint directory %s",
                                         dir);

    ckpt_writer *w = zt_calloc(1, sizeof(*w));
    size_t payload = 0;
    for (int u = 0; u < e->nu; u++)
        payload += 12 * e->S[u];
    if (!w || (!e->ck_buf && zt_ckpt_prepare(e, err) != ZT_OK)) {
        zt_free(w);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory for the checkpoint snapshot (%zu bytes)",
                          payload);
    }
    w->buf = e->ck_buf;
    pathf(w->path, sizeof(w->path), "%s/rank_%05d.zts", dir, e->rank);
    w->bytes = sizeof(zt_shard_header) + payload;
    /* snapshot: this rank's chunk of every unit (master, exp_avg, exp_avg_sq), padding zero */
    float *p = (float *)(w->buf + sizeof(zt_shard_header));
    for (int u = 0; u < e->nu; u++) {
        size_t S = e->S[u], r0 = (size_t)e->rank * S, n = e->lay.unit_numel[u];
        size_t len = r0 >= n ? 0 : (n - r0 < S ? n - r0 : S);
        if (len) {
            zt_engine_region_get(e, u, r0 - e->base[u], len, p);
            zt_engine_moments_get(e, u, r0 - e->base[u], len, p + S, p + 2 * S);
        }
        for (int sec = 0; sec < 3; sec++)
            memset(p + (size_t)sec * S + len, 0, (S - len) * sizeof(float));
        p += 3 * S;
    }
    if ((st = e->ops->sync(e->k, err)) != ZT_OK) {
        zt_free(w);
        return st;
    }
    zt_shard_header h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, ZT_CKPT_SHARD_MAGIC, 8);
    h.version = ZT_CKPT_VERSION;
    h.rank = (uint32_t)e->rank;
    h.world = (uint32_t)e->world;
    h.stage = (uint32_t)e->stage;
    h.n_units = (uint32_t)e->nu;
    h.sections = 3;
    h.step = (uint64_t)e->steps_done;
    h.payload_bytes = payload;
    memcpy(w->buf, &h, sizeof(h)); /* the checksums are filled in by the writer thread */
    e->ck_step = e->steps_done;
    e->ck_applied = e->applied_steps;
    e->ck_skipped = e->skipped_total;
    e->ck_scaler = e->scaler;
    e->ck_writer = w;
    if (pthread_create(&e->ck_thread, NULL, writer_main, w) != 0)
        writer_main(w), e->ck_threaded = false;
    else
        e->ck_threaded = true;
    e->ck_blocked_s = (double)(zt_now_ns() - t0) * 1e-9;
    return ZT_OK;
}

static void prune(const zt_engine *e)
{
    int keep = e->job.train.keep_checkpoints;
    const char *root = e->job.train.checkpoint_dir;
    DIR *d = opendir(root);
    if (!d)
        return;
    int64_t steps[4096];
    int n = 0;
    int64_t newest = -1;
    struct dirent *de;
    char meta[ZT_PATH_MAX + 320];
    while ((de = readdir(d)) != NULL && n < 4096) {
        int64_t s = parse_step_name(de->d_name);
        if (s < 0)
            continue;
        pathf(meta, sizeof(meta), "%s/%s/%s", root, de->d_name, META_NAME);
        bool complete = file_exists(meta);
        steps[n++] = complete ? s : -(s + 2); /* incomplete ones encoded negative */
        if (complete && s > newest)
            newest = s;
    }
    closedir(d);
    /* complete ones sorted newest first */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (steps[j] > steps[i]) {
                int64_t t = steps[i];
                steps[i] = steps[j];
                steps[j] = t;
            }
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int64_t s = steps[i];
        bool complete = s >= 0;
        int64_t step = complete ? s : -s - 2;
        bool drop = complete ? (keep > 0 && ++kept > keep) : step < newest;
        if (!drop)
            continue;
        char dir[ZT_PATH_MAX + 32];
        pathf(dir, sizeof(dir), "%s/step_%08lld", root, (long long)step);
        /* meta.json first: the checkpoint stops counting before its shards go */
        pathf(meta, sizeof(meta), "%s/%s", dir, META_NAME);
        unlink(meta);
        DIR *sd = opendir(dir);
        if (sd) {
            struct dirent *f;
            while ((f = readdir(sd)) != NULL) {
                if (f->d_name[0] == '.')
                    continue;
                char fp[ZT_PATH_MAX + 320];
                pathf(fp, sizeof(fp), "%s/%s", dir, f->d_name);
                unlink(fp);
            }
            closedir(sd);
        }
        rmdir(dir);
        ZT_INFO("ckpt", "removed checkpoint %s (keep_checkpoints %d)", dir, keep);
        if (e->opts.report_fd >= 0) { /* incomplete ones too: the coordinator may know them */
            char line[ZT_PATH_MAX + 96];
            int n = pathf(line, sizeof(line), "rank=%d ckpt_removed step=%lld dir=%s\n", e->rank,
                          (long long)step, dir);
            if (n > 0 && write(e->opts.report_fd, line, (size_t)n) < 0) {
            }
        }
    }
}

zt_status zt_ckpt_save_finish(zt_engine *e, zt_err *err)
{
    ckpt_writer *w = e->ck_writer;
    if (!w)
        return ZT_OK;
    uint64_t t0 = zt_now_ns();
    if (e->ck_threaded)
        pthread_join(e->ck_thread, NULL);
    e->ck_writer = NULL;
    zt_status st = w->st;
    if (st != ZT_OK)
        zt_err_set(err, st, "%s", w->err.msg);
    /* every rank's (ok, crc, bytes) to everyone: rank 0 commits only if all shards are durable */
    float *info = zt_calloc((size_t)e->world * 4, sizeof(float));
    float *dev = zt_engine_comm_alloc(e, (size_t)e->world * 4 * sizeof(float));
    uint32_t mine[4] = {st == ZT_OK ? 1u : 0u, w->crc, (uint32_t)(w->bytes & 0xffffffffu),
                        (uint32_t)(w->bytes >> 32)};
    zt_status cst = ZT_OK;
    if (!info || !dev) {
        cst = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto out;
    }
    e->ops->copy_h2d(e->k, dev + (size_t)e->rank * 4, mine, sizeof(mine));
    cst = zt_comm_allgather(e->comm, dev + (size_t)e->rank * 4, dev, 4, ZT_F32, NULL,
                            st == ZT_OK ? err : NULL);
    if (cst != ZT_OK)
        goto out;
    e->ops->copy_d2h(e->k, info, dev, (size_t)e->world * 4 * sizeof(float));
    int failed = -1;
    for (int r = 0; r < e->world; r++) {
        uint32_t v[4];
        memcpy(v, info + (size_t)r * 4, sizeof(v));
        if (!v[0] && failed < 0)
            failed = r;
    }
    if (st == ZT_OK && failed >= 0)
        st = zt_err_set(err, ZT_ERR_IO,
                        "checkpoint step %lld: rank %d could not write its shard (see its log); the checkpoint does not count",
                        (long long)e->ck_step, failed);
    char dir[ZT_PATH_MAX + 32];
    step_dir_of(e, e->ck_step, dir, sizeof(dir));
    if (st == ZT_OK)
        ZT_INFO("ckpt", "shard %s: %zu bytes written and fsync'd in %.3f s", w->path, w->bytes,
                w->write_s);
    if (st == ZT_OK && e->opts.report_fd >= 0) {
        char line[ZT_PATH_MAX + 128];
        int n = pathf(line, sizeof(line), "rank=%d ckpt step=%lld file=%s bytes=%zu crc32c=%08x\n",
                         e->rank, (long long)e->ck_step, w->path, w->bytes, w->crc);
        if (n > 0 && write(e->opts.report_fd, line, (size_t)n) < 0) {
        }
    }
    if (st == ZT_OK && e->rank == 0) {
        ckpt_meta m;
        memset(&m, 0, sizeof(m));
        m.step = e->ck_step;
        m.applied_steps = e->ck_applied;
        m.skipped_steps = e->ck_skipped;
        m.world = e->world;
        m.stage = e->stage;
        m.precision = e->pdt;
        m.dims = e->lay.d;
        m.train_batch_size = e->job.ds.train_batch_size;
        m.micro_batch = e->job.ds.micro_batch;
        m.grad_accum = e->job.ds.grad_accum;
        m.n_units = e->nu;
        m.ls_scale = e->ck_scaler.scale;
        m.ls_iter = e->ck_scaler.iter;
        m.ls_last_overflow = e->ck_scaler.last_overflow;
        m.ls_hyst_left = e->ck_scaler.hysteresis_left;
        if ((st = meta_alloc(&m, err)) == ZT_OK) {
            for (int u = 0; u < e->nu; u++) {
                m.numel[u] = e->lay.unit_numel[u];
                m.shard[u] = e->S[u];
            }
            for (int r = 0; r < e->world; r++) {
                uint32_t v[4];
                memcpy(v, info + (size_t)r * 4, sizeof(v));
                m.crc[r] = v[1];
                m.bytes[r] = (uint64_t)v[2] | ((uint64_t)v[3] << 32);
            }
            char *js = meta_to_json(&m, &e->job);
            char path[ZT_PATH_MAX + 16];
            pathf(path, sizeof(path), "%s/%s", dir, META_NAME);
            zt_outfile *f = NULL;
            if (!js)
                st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
            else if ((st = zt_outfile_open(&f, path, err)) == ZT_OK &&
                     (st = zt_outfile_write(f, js, strlen(js), err)) == ZT_OK)
                st = zt_outfile_commit(f, err);
            else
                zt_outfile_abort(f);
            free(js);
            meta_free(&m);
        }
        if (st == ZT_OK) {
            prune(e);
            if (e->opts.report_fd >= 0) {
                char line[ZT_PATH_MAX + 64];
                int n = pathf(line, sizeof(line), "rank=0 ckpt_commit step=%lld dir=%s\n",
                                 (long long)e->ck_step, dir);
                if (n > 0 && write(e->opts.report_fd, line, (size_t)n) < 0) {
                }
            }
        }
    }
    e->ck_blocked_s += (double)(zt_now_ns() - t0) * 1e-9;
    if (st == ZT_OK) {
        e->last_ckpt_step = e->ck_step;
        if (e->rank == 0)
            ZT_INFO("ckpt", "checkpoint %s complete: rank 0 wrote %zu bytes in %.3f s (%.3f GB/s, fsync'd), training blocked %.1f ms",
                    dir, w->bytes, w->write_s, (double)w->bytes / (w->write_s > 0 ? w->write_s : 1e-9) / 1e9,
                    e->ck_blocked_s * 1e3);
    }
out:
    zt_engine_comm_free(e, dev, (size_t)e->world * 4 * sizeof(float));
    zt_free(info);
    zt_free(w);
    return st != ZT_OK ? st : cst;
}

bool zt_ckpt_write_pending(const zt_engine *e)
{
    return e->ck_writer && !atomic_load(&e->ck_writer->done);
}

void zt_ckpt_save_abandon(zt_engine *e)
{
    ckpt_writer *w = e->ck_writer;
    if (!w)
        return;
    if (e->ck_threaded)
        pthread_join(e->ck_thread, NULL);
    e->ck_writer = NULL;
    zt_free(w);
}

zt_status zt_ckpt_prepare(zt_engine *e, zt_err *err)
{
    if (e->ck_buf)
        return ZT_OK;
    size_t bytes = sizeof(zt_shard_header);
    for (int u = 0; u < e->nu; u++)
        bytes += 12 * e->S[u];
    /* huge pages where the kernel offers them, and touched now: faulting in a fresh buffer
     * page by page during a save would block training for longer than the copy itself */
    size_t huge = (size_t)2 << 20;
    e->ck_buf_bytes = (bytes + huge - 1) / huge * huge;
    e->ck_buf = zt_aligned_alloc(huge, e->ck_buf_bytes);
    if (!e->ck_buf)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory for the checkpoint snapshot (%zu bytes)", bytes);
#ifdef MADV_HUGEPAGE
    madvise(e->ck_buf, e->ck_buf_bytes, MADV_HUGEPAGE);
#endif
    memset(e->ck_buf, 0, e->ck_buf_bytes);
    return ZT_OK;
}

void zt_ckpt_release(zt_engine *e)
{
    zt_ckpt_save_abandon(e);
    zt_free(e->ck_buf);
    e->ck_buf = NULL;
}

/* ---- load ---- */

zt_status zt_ckpt_load(zt_engine *e, const char *path, zt_err *err)
{
    zt_ckpt *c = NULL;
    zt_status st = zt_ckpt_open(&c, path, err);
    if (st != ZT_OK)
        return st;
    float *vals = NULL, *mv = NULL;
    const zt_gpt2_dims *a = &c->m.dims, *b = &e->lay.d;
    if (a->L != b->L || a->C != b->C || a->NH != b->NH || a->T != b->T || a->V != b->V ||
        a->Vp != b->Vp) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "checkpoint %s holds a model with n_layer %d n_head %d n_embd %d block_size %d vocab %d (padded %d) but the job has %d %d %d %d %d (%d); resume with the job that wrote it",
                        c->dir, a->L, a->NH, a->C, a->T, a->V, a->Vp, b->L, b->NH, b->C, b->T,
                        b->V, b->Vp);
        goto out;
    }
    if ((st = zt_ckpt_verify(c, err)) != ZT_OK)
        goto out;
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    vals = zt_calloc(maxp, sizeof(float));
    mv = zt_calloc(maxp * 2, sizeof(float));
    if (!vals || !mv) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory loading the checkpoint");
        goto out;
    }
    for (int u = 0; u < e->nu; u++) {
        size_t n = e->lay.unit_numel[u];
        memset(vals, 0, e->P[u] * sizeof(float));
        if ((st = zt_ckpt_read(c, 0, u, 0, n, vals, err)) != ZT_OK)
            goto out;
        if ((st = zt_engine_load_unit(e, u, vals, err)) != ZT_OK)
            goto out;
        size_t rl = zt_engine_region_len(e, u);
        if (rl) {
            if ((st = zt_ckpt_read(c, 1, u, e->base[u], rl, mv, err)) != ZT_OK ||
                (st = zt_ckpt_read(c, 2, u, e->base[u], rl, mv + rl, err)) != ZT_OK)
                goto out;
            zt_engine_moments_set(e, u, 0, rl, mv, mv + rl);
        }
    }
    e->steps_done = c->m.step;
    e->applied_steps = c->m.applied_steps;
    e->skipped_total = c->m.skipped_steps;
    e->last_ckpt_step = c->m.step;
    if (e->job.ds.fp16.enabled) {
        e->scaler.scale = c->m.ls_scale;
        e->scaler.iter = c->m.ls_iter;
        e->scaler.last_overflow = c->m.ls_last_overflow;
        e->scaler.hysteresis_left = c->m.ls_hyst_left;
    }
    if (e->rank == 0)
        ZT_INFO("ckpt", "resumed from %s (step %lld, written by %d ranks at stage %d; now %d ranks at stage %d)",
                c->dir, (long long)c->m.step, c->m.world, c->m.stage, e->world, e->stage);
out:
    zt_free(vals);
    zt_free(mv);
    zt_ckpt_close(c);
    return st;
}

zt_status zt_ckpt_adapt_job(zt_job *job, const char *step_dir, int world, zt_err *err)
{
    ckpt_meta m;
    zt_status st = meta_read(&m, step_dir, err);
    if (st != ZT_OK)
        return st;
    const zt_model_cfg *mc = &job->model;
    if (m.dims.L != mc->n_layer || m.dims.C != mc->n_embd || m.dims.NH != mc->n_head ||
        m.dims.T != mc->block_size || m.dims.V != mc->vocab_size ||
        m.dims.Vp != mc->padded_vocab_size) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "checkpoint %s holds a model with n_layer %d n_head %d n_embd %d block_size %d vocab_size %d but the job asks for %d %d %d %d %d; resume with the job that wrote it",
                        step_dir, m.dims.L, m.dims.NH, m.dims.C, m.dims.T, m.dims.V, mc->n_layer,
                        mc->n_head, mc->n_embd, mc->block_size, mc->vocab_size);
        goto out;
    }
    /* elastic batch: the global batch and the sample order stay; accumulation re-derived */
    int64_t tb = m.train_batch_size;
    int64_t micro = job->ds.given_micro_batch ? job->ds.given_micro_batch : job->ds.micro_batch;
    if (micro <= 0 || tb % (micro * world) != 0) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "cannot resume %s on %d ranks: its train_batch_size %lld is not a multiple of train_micro_batch_size_per_gpu %lld * %d ranks; pick a rank count and micro batch whose product divides %lld",
                        step_dir, world, (long long)tb, (long long)micro, world, (long long)tb);
        goto out;
    }
    job->ds.given_train_batch_size = tb;
    job->ds.given_micro_batch = micro;
    job->ds.given_grad_accum = 0;
    job->resources.ranks = world;
    st = zt_job_resolve_batch(job, world, err);
out:
    meta_free(&m);
    return st;
}

/* ---- export ---- */

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
    default: pathf(buf, n, "transformer.h.%d.%s", layer, block_names[kind]); return buf;
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
    pathf(stepbuf, sizeof(stepbuf), "%lld", (long long)c->m.step);
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
        goto out;
    size_t maxt = 0;
    for (int i = 0; i < c->lay.n_tensors; i++)
        if (c->lay.tensors[i].numel > maxt)
            maxt = c->lay.tensors[i].numel;
    buf = zt_malloc(maxt * sizeof(float));
    tbuf = st_fmt ? zt_malloc(maxt * sizeof(float)) : NULL;
    if (!buf || (st_fmt && !tbuf)) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto out;
    }
    st = st_fmt ? export_safetensors(c, dtype, out, buf, tbuf, err)
                : export_llmc(c, dtype, out, buf, err);
out:
    zt_free(buf);
    zt_free(tbuf);
    zt_ckpt_close(c);
    return st;
}

zt_status zt_ckpt_inspect(const char *path, FILE *out, bool json, zt_err *err)
{
    zt_ckpt *c = NULL;
    zt_status st = zt_ckpt_open(&c, path, err);
    if (st != ZT_OK)
        return st;
    const ckpt_meta *m = &c->m;
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
