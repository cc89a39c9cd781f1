/* zerotrain: token shards and the data loader (see dataloader.h). Every shard is mapped once;
 * a sample is found by binary search over the shards' first sample numbers and copied out
 * with a widening loop, so the per-step cost is a few microseconds and no allocation. */
#define _POSIX_C_SOURCE 200809L
#include "engine/data/dataloader.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token shards are little-endian and are read in place: a big-endian host needs byte swaps"
#endif

/* The on-disk header, as llm.c writes it. */
typedef struct zt_shard_header {
    int32_t magic;      /* ZT_SHARD_MAGIC */
    int32_t version;    /* ZT_SHARD_VERSION */
    int32_t num_tokens; /* uint16 tokens that follow */
    int32_t reserved[ZT_SHARD_HEADER_INTS - 3];
} zt_shard_header;
_Static_assert(sizeof(zt_shard_header) == ZT_SHARD_HEADER_BYTES, "shard header is 256 int32");
_Static_assert(offsetof(zt_shard_header, version) == 4, "shard header [1] is the version");
_Static_assert(offsetof(zt_shard_header, num_tokens) == 8, "shard header [2] is the count");

typedef struct zt_shard {
    char *path;
    void *map; /* the whole file */
    size_t map_len;
    const uint16_t *tokens; /* (num_tokens) inside map */
    uint64_t num_tokens;
    uint64_t num_samples;
    uint64_t first_sample; /* global number of this shard's sample 0 */
} zt_shard;

struct zt_dataset {
    zt_shard *shards; /* (num_shards) in sorted name order */
    int num_shards;
    int block_size;
    int vocab_size; /* 0 = unchecked */
    uint64_t num_samples;
    uint64_t num_tokens;
};

/* ---- durable output ------------------------------------------------------------------ */

struct zt_outfile {
    int fd;
    char *path;
    char *tmp;     /* NULL when written in place */
    uint64_t size; /* bytes written */
};

static zt_status errno_status(int e)
{
#ifdef EDQUOT
    if (e == EDQUOT) return ZT_ERR_NOSPACE;
#endif
    return e == ENOSPC ? ZT_ERR_NOSPACE : ZT_ERR_IO;
}

static zt_status write_error(zt_err *err, int e, const char *what, const char *path)
{
    zt_status st = errno_status(e);
    if (st == ZT_ERR_NOSPACE)
        return zt_err_set(err, st,
                          "cannot %s %s: %s; free space on that file system or write elsewhere",
                          what, path, strerror(e));
    return zt_err_set(err, st, "cannot %s %s: %s; check the disk and the path", what, path,
                      strerror(e));
}

/* Directory part of path ("." when there is none); caller frees. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return zt_strdup(".");
    if (slash == path) return zt_strdup("/");
    return zt_strndup(path, (size_t)(slash - path));
}

zt_status zt_dir_fsync(const char *dir, zt_err *err)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return write_error(err, errno, "open the directory", dir);
    zt_status st = ZT_OK;
    /* Some file systems cannot fsync a directory at all (EINVAL): there is nothing more to
     * do there. Any other failure means the directory's entries may not be durable. */
    if (fsync(dfd) != 0 && errno != EINVAL)
        st = write_error(err, errno, "fsync the directory", dir);
    close(dfd);
    return st;
}

/* fsync of the directory that holds path. */
static zt_status fsync_parent(const char *path, zt_err *err)
{
    char *dir = dir_of(path);
    if (!dir)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory syncing the directory of %s", path);
    zt_status st = zt_dir_fsync(dir, err);
    zt_free(dir);
    return st;
}

zt_status zt_outfile_open(zt_outfile **out, const char *path, zt_err *err)
{
    *out = NULL;
    if (!path || !*path)
        return zt_err_set(err, ZT_ERR_INVALID, "output file name is empty; give a path");
    zt_status st = ZT_OK;
    zt_outfile *f = zt_calloc(1, sizeof(*f));
    if (!f) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory opening %s", path);
    f->fd = -1;
    f->path = zt_strdup(path);
    if (!f->path) goto fail_nomem;
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (exists && S_ISDIR(sb.st_mode)) {
        st = zt_err_set(err, ZT_ERR_INVALID, "cannot write %s: it is a directory; give a file name",
                        path);
        goto fail;
    }
    if (exists && !S_ISREG(sb.st_mode)) { /* a device or FIFO: write in place */
        f->fd = open(path, O_WRONLY | O_CLOEXEC);
    } else {
        f->tmp = zt_asprintf("%s.tmp.%ld", path, (long)getpid());
        if (!f->tmp) goto fail_nomem;
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (f->fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR) {
            char *dir = dir_of(path);
            st = zt_err_set(err, ZT_ERR_NOT_FOUND,
                            "cannot create %s: %s is not an existing directory; create it first",
                            path, dir ? dir : "?");
            zt_free(dir);
        } else {
            st = write_error(err, e, "create", path);
        }
        goto fail;
    }
    *out = f;
    return ZT_OK;

fail_nomem:
    st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory opening %s", path);
fail:
    zt_free(f->tmp);
    zt_free(f->path);
    zt_free(f);
    return st;
}

zt_status zt_outfile_write(zt_outfile *f, const void *data, size_t n, zt_err *err)
{
    const char *p = data;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(f->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return write_error(err, errno, "write", f->path);
        }
        if (w == 0) return write_error(err, ENOSPC, "write", f->path);
        p += w;
        n -= (size_t)w;
        f->size += (uint64_t)w;
    }
    return ZT_OK;
}

uint64_t zt_outfile_size(const zt_outfile *f)
{
    return f ? f->size : 0;
}

void zt_outfile_abort(zt_outfile *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    zt_free(f->tmp);
    zt_free(f->path);
    zt_free(f);
}

zt_status zt_outfile_commit(zt_outfile *f, zt_err *err)
{
    zt_status st = ZT_OK;
    if (fsync(f->fd) != 0 && (f->tmp || (errno != EINVAL && errno != EROFS))) {
        st = write_error(err, errno, "flush", f->path);
        goto out_abort;
    }
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) {
        st = write_error(err, errno, "close", f->path);
        goto out_abort;
    }
    if (f->tmp) {
        if (rename(f->tmp, f->path) != 0) {
            st = write_error(err, errno, "rename the temporary file onto", f->path);
            goto out_abort;
        }
        zt_free(f->tmp);
        f->tmp = NULL; /* renamed: nothing left to remove */
        st = fsync_parent(f->path, err);
    }
out_abort:
    zt_outfile_abort(f);
    return st;
}

zt_status zt_shard_write(const char *path, const uint16_t *tokens, uint64_t n, zt_err *err)
{
    if (n > ZT_SHARD_MAX_TOKENS)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "cannot write %s: %llu tokens exceed the shard format's limit of %llu; split them over several shards",
            path, (unsigned long long)n, (unsigned long long)ZT_SHARD_MAX_TOKENS);
    if (n > 0 && !tokens)
        return zt_err_set(err, ZT_ERR_INVALID, "cannot write %s: no token buffer given", path);
    zt_shard_header h;
    memset(&h, 0, sizeof(h));
    h.magic = ZT_SHARD_MAGIC;
    h.version = ZT_SHARD_VERSION;
    h.num_tokens = (int32_t)n;
    zt_outfile *f = NULL;
    zt_status st = zt_outfile_open(&f, path, err);
    if (st != ZT_OK) return st;
    st = zt_outfile_write(f, &h, sizeof(h), err);
    if (st == ZT_OK && n > 0) st = zt_outfile_write(f, tokens, (size_t)n * sizeof(uint16_t), err);
    if (st != ZT_OK) {
        zt_outfile_abort(f);
        return st;
    }
    return zt_outfile_commit(f, err);
}

/* ---- reading ------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Maps one shard and checks its header; fills s (s->path already set). */
static zt_status map_shard(zt_shard *s, int block_size, zt_err *err)
{
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zt_err_set(err, errno == ENOENT ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                          "cannot open token shard %s: %s", s->path, strerror(errno));
    zt_status st = ZT_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = zt_err_set(err, ZT_ERR_IO, "cannot stat token shard %s: %s", s->path, strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = zt_err_set(err, ZT_ERR_FORMAT,
                        "%s matches the data pattern but is not a regular file; narrow the pattern",
                        s->path);
        goto close_fd;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < ZT_SHARD_HEADER_BYTES) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: truncated token shard: %llu bytes, shorter than the %d-byte header; regenerate it",
            s->path, (unsigned long long)size, ZT_SHARD_HEADER_BYTES);
        goto close_fd;
    }
    if (size > (uint64_t)SIZE_MAX) {
        st = zt_err_set(err, ZT_ERR_FORMAT, "%s: too large to map on this host", s->path);
        goto close_fd;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        st = zt_err_set(err, ZT_ERR_IO, "cannot map token shard %s (%llu bytes): %s", s->path,
                        (unsigned long long)size, strerror(errno));
        goto close_fd;
    }
    zt_shard_header h;
    memcpy(&h, map, sizeof(h));
    if (h.magic != ZT_SHARD_MAGIC) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: not a token shard (magic %d, expected %d); point the data pattern at shards from `zctl data synth`, `zctl data tokenize` or llm.c",
            s->path, (int)h.magic, ZT_SHARD_MAGIC);
        goto unmap;
    }
    if (h.version != ZT_SHARD_VERSION) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: token shard version %d is not supported (expected %d); regenerate the shard",
            s->path, (int)h.version, ZT_SHARD_VERSION);
        goto unmap;
    }
    if (h.num_tokens < 0) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: corrupt token shard header: token count %d is negative; regenerate the shard",
            s->path, (int)h.num_tokens);
        goto unmap;
    }
    uint64_t want = ZT_SHARD_HEADER_BYTES + 2 * (uint64_t)h.num_tokens;
    if (size < want) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: truncated token shard: the header says %d tokens, so the file should have %llu bytes, but it has %llu; regenerate or re-copy it",
            s->path, (int)h.num_tokens, (unsigned long long)want, (unsigned long long)size);
        goto unmap;
    }
    if (size > want) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: corrupt token shard: the header says %d tokens (%llu bytes) but the file has %llu bytes; regenerate it",
            s->path, (int)h.num_tokens, (unsigned long long)want, (unsigned long long)size);
        goto unmap;
    }
    uint64_t n = (uint64_t)h.num_tokens;
    if (n < (uint64_t)block_size + 1) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "%s: has %llu tokens, but a shard needs at least T+1 tokens (block_size T = %d, so %d); use a smaller block_size or a longer shard",
            s->path, (unsigned long long)n, block_size, block_size + 1);
        goto unmap;
    }
    s->map = map;
    s->map_len = (size_t)size;
    s->tokens = (const uint16_t *)((const char *)map + ZT_SHARD_HEADER_BYTES);
    s->num_tokens = n;
    s->num_samples = (n - 1) / (uint64_t)block_size;
    close(fd);
    return ZT_OK;

unmap:
    munmap(map, (size_t)size);
close_fd:
    close(fd);
    return st;
}

zt_status zt_dataset_open(zt_dataset **out, const char *pattern, int block_size, int vocab_size,
                          zt_err *err)
{
    *out = NULL;
    if (!pattern || !*pattern)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "the data pattern is empty; set data.train in the job file");
    if (block_size < 1)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "block_size %d is not positive; set model.block_size >= 1", block_size);
    if (vocab_size < 0 || vocab_size > 65536)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "vocab_size %d is outside 1..65536 (tokens are uint16); fix model.vocab_size",
            vocab_size);
    glob_t g;
    memset(&g, 0, sizeof(g));
    int grc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        return zt_err_set(
            err, ZT_ERR_NOT_FOUND,
            "no files match the data pattern '%s'; check the path (relative paths in a job file resolve against its directory) or create shards with `zctl data synth`",
            pattern);
    }
    if (grc != 0) {
        globfree(&g);
        return zt_err_set(
            err, grc == GLOB_NOSPACE ? ZT_ERR_NOMEM : ZT_ERR_IO,
            "cannot list the files matching '%s' (glob error %d); check that its directories are readable",
            pattern, grc);
    }
    if (g.gl_pathc > (size_t)INT_MAX) {
        globfree(&g);
        return zt_err_set(err, ZT_ERR_INVALID, "'%s' matches too many files", pattern);
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), cmp_str);

    zt_status st = ZT_OK;
    zt_dataset *ds = zt_calloc(1, sizeof(*ds));
    if (!ds) goto fail_nomem;
    ds->block_size = block_size;
    ds->vocab_size = vocab_size;
    ds->shards = zt_calloc(g.gl_pathc, sizeof(*ds->shards));
    if (!ds->shards) goto fail_nomem;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        zt_shard *s = &ds->shards[i];
        s->path = zt_strdup(g.gl_pathv[i]);
        if (!s->path) goto fail_nomem;
        ds->num_shards = (int)i + 1;
        st = map_shard(s, block_size, err);
        if (st != ZT_OK) goto fail;
        s->first_sample = ds->num_samples;
        ds->num_samples += s->num_samples;
        ds->num_tokens += s->num_tokens;
    }
    globfree(&g);
    *out = ds;
    return ZT_OK;

fail_nomem:
    st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory opening the data pattern '%s'", pattern);
fail:
    globfree(&g);
    zt_dataset_close(ds);
    return st;
}

void zt_dataset_close(zt_dataset *ds)
{
    if (!ds) return;
    for (int i = 0; i < ds->num_shards; i++) {
        if (ds->shards[i].map) munmap(ds->shards[i].map, ds->shards[i].map_len);
        zt_free(ds->shards[i].path);
    }
    zt_free(ds->shards);
    zt_free(ds);
}

uint64_t zt_dataset_num_samples(const zt_dataset *ds)
{
    return ds->num_samples;
}

uint64_t zt_dataset_num_tokens(const zt_dataset *ds)
{
    return ds->num_tokens;
}

int zt_dataset_num_shards(const zt_dataset *ds)
{
    return ds->num_shards;
}

int zt_dataset_block_size(const zt_dataset *ds)
{
    return ds->block_size;
}

const char *zt_dataset_shard_path(const zt_dataset *ds, int i)
{
    return i >= 0 && i < ds->num_shards ? ds->shards[i].path : NULL;
}

uint64_t zt_dataset_shard_tokens(const zt_dataset *ds, int i)
{
    return i >= 0 && i < ds->num_shards ? ds->shards[i].num_tokens : 0;
}

uint64_t zt_dataset_shard_samples(const zt_dataset *ds, int i)
{
    return i >= 0 && i < ds->num_shards ? ds->shards[i].num_samples : 0;
}

/* The shard holding global sample k (k < num_samples). */
static const zt_shard *shard_of(const zt_dataset *ds, uint64_t k)
{
    int lo = 0, hi = ds->num_shards - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (ds->shards[mid].first_sample <= k)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &ds->shards[lo];
}

zt_status zt_dataset_sample(const zt_dataset *ds, uint64_t k, int32_t *inputs, int32_t *targets,
                            zt_err *err)
{
    if (k >= ds->num_samples)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "sample %llu is out of range: the data set has %llu samples",
                          (unsigned long long)k, (unsigned long long)ds->num_samples);
    const zt_shard *s = shard_of(ds, k);
    const int T = ds->block_size;
    const uint64_t off = (k - s->first_sample) * (uint64_t)T;
    const uint16_t *tok = s->tokens + off;
    unsigned maxtok = 0;
    for (int j = 0; j < T; j++) {
        inputs[j] = tok[j];
        targets[j] = tok[j + 1];
        maxtok = tok[j + 1] > maxtok ? tok[j + 1] : maxtok;
    }
    maxtok = tok[0] > maxtok ? tok[0] : maxtok;
    if (ds->vocab_size > 0 && maxtok >= (unsigned)ds->vocab_size) {
        for (int j = 0; j <= T; j++) {
            if (tok[j] >= (unsigned)ds->vocab_size) {
                uint64_t idx = off + (uint64_t)j;
                return zt_err_set(
                    err, ZT_ERR_FORMAT,
                    "%s: token %u at token offset %llu (byte %llu) is >= vocab_size %d; the data was made for a larger vocabulary: raise model.vocab_size or regenerate the data",
                    s->path, (unsigned)tok[j], (unsigned long long)idx,
                    (unsigned long long)(ZT_SHARD_HEADER_BYTES + 2 * idx), ds->vocab_size);
            }
        }
    }
    return ZT_OK;
}

/* (a * b) mod m for a, b < m, without overflow. */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
    if (a <= UINT32_MAX && b <= UINT32_MAX) return (a * b) % m;
    uint64_t r = 0;
    a %= m;
    while (b) {
        if (b & 1) r = r >= m - a ? r - (m - a) : r + a;
        a = a >= m - a ? a - (m - a) : a + a;
        b >>= 1;
    }
    return r;
}

uint64_t zt_dataset_batch_sample(const zt_dataset *ds, int64_t step, int64_t train_batch_size,
                                 int64_t i)
{
    const uint64_t n = ds->num_samples;
    uint64_t base = mulmod((uint64_t)step % n, (uint64_t)train_batch_size % n, n);
    uint64_t add = (uint64_t)i % n;
    return base >= n - add ? base - (n - add) : base + add;
}

zt_status zt_dataset_micro_batch(const zt_dataset *ds, int64_t step, int64_t train_batch_size,
                                 int ranks, int rank, int micro_step, int micro, int32_t *inputs,
                                 int32_t *targets, zt_err *err)
{
    if (step < 0 || train_batch_size < 1 || ranks < 1 || rank < 0 || rank >= ranks ||
        micro_step < 0 || micro < 1)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "bad micro-batch request: step %lld, train_batch_size %lld, rank %d of %d, micro_step %d, micro %d",
            (long long)step, (long long)train_batch_size, rank, ranks, micro_step, micro);
    int64_t first = ((int64_t)micro_step * ranks + rank) * (int64_t)micro;
    if (first > train_batch_size - micro)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "micro-step %d of rank %d (of %d) with micro-batch %d reaches batch position %lld, beyond train_batch_size %lld; check gradient_accumulation_steps",
            micro_step, rank, ranks, micro, (long long)(first + micro - 1),
            (long long)train_batch_size);
    const size_t T = (size_t)ds->block_size;
    for (int j = 0; j < micro; j++) {
        uint64_t k = zt_dataset_batch_sample(ds, step, train_batch_size, first + j);
        zt_status st =
            zt_dataset_sample(ds, k, inputs + (size_t)j * T, targets + (size_t)j * T, err);
        if (st != ZT_OK) return st;
    }
    return ZT_OK;
}
