/* zerotrain: saving and loading sharded checkpoints from a running engine — snapshot,
 * background write, commit by rank 0 that every rank agrees on, pruning, the claim on the
 * checkpoint directory, and load with re-sharding and per-chunk verification (see ckpt.h). */
#define _XOPEN_SOURCE 700 /* POSIX 2008 */
#include "ckpt.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/fsutil.h"
#include "../common/log.h"
#include "../common/timeutil.h"
#include "ckpt_int.h"
#include "data/dataloader.h"
#include "engine_int.h"
#include "gpt2.h"

/* The status of a failed file-system call: no space (ENOSPC, EDQUOT) or another I/O error. */
static zt_status errno_status(int e)
{
#ifdef EDQUOT
    if (e == EDQUOT)
        return ZT_ERR_NOSPACE;
#endif
    return e == ENOSPC ? ZT_ERR_NOSPACE : ZT_ERR_IO;
}

/* zt_mkdirs, durable (a directory it creates is made durable by an fsync of its parent), with
 * its failure turned into a status and a message that names the directory and what to do. */
static zt_status mkdirs_explained(const char *path, zt_err *err)
{
    char bad[ZT_PATH_MAX + 32];
    int rc = zt_mkdirs(path, true, bad, sizeof(bad));
    if (rc == 0) return ZT_OK;
    int e = errno;
    if (rc == -2)
        return zt_err_set(err, errno_status(e),
                          "cannot fsync the directory %s: %s; check the disk and the path", bad,
                          strerror(e));
    if (e == ENAMETOOLONG)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "checkpoint directory %s: the path is too long; set a shorter train.checkpoint_dir",
                          path);
    if (errno_status(e) == ZT_ERR_NOSPACE)
        return zt_err_set(err, ZT_ERR_NOSPACE,
                          "cannot create the checkpoint directory %s: %s; free space on that file system or set train.checkpoint_dir elsewhere",
                          bad, strerror(e));
    return zt_err_set(err, ZT_ERR_IO,
                      "cannot create the checkpoint directory %s: %s; check the path and its permissions, or set train.checkpoint_dir elsewhere",
                      bad, strerror(e));
}

/* ---- agreement between ranks ---- */

/* One outcome on every rank (collective): ZT_OK when st is ZT_OK everywhere, otherwise the
 * status of the lowest failing rank and its message as "rank R: ..." on every rank, so that a
 * failure only one rank saw (rank 0's meta.json, one chunk's checksum) cannot leave the others
 * reporting success. A failed collective is returned as it is. */
static zt_status agree(zt_engine *e, zt_status st, zt_err *err)
{
    if (e->world == 1)
        return st;
    typedef struct outcome {
        int32_t status;
        char msg[ZT_ERRMSG_MAX];
    } outcome;
    size_t n = (size_t)e->world;
    size_t dev_bytes = n * sizeof(float) > sizeof(outcome) ? n * sizeof(float) : sizeof(outcome);
    uint32_t *codes = zt_calloc(n, sizeof(uint32_t));
    outcome *o = zt_calloc(1, sizeof(*o));
    float *dev = zt_engine_comm_alloc(e, dev_bytes);
    zt_status cst = ZT_OK;
    if (!codes || !o || !dev) {
        cst = zt_err_set(err, ZT_ERR_NOMEM, "out of memory sharing a checkpoint outcome");
        goto free_buffers;
    }
    uint32_t mine = (uint32_t)st;
    e->ops->copy_h2d(e->k, dev + e->rank, &mine, sizeof(mine));
    if ((cst = zt_comm_allgather(e->comm, dev + e->rank, dev, 1, ZT_F32, NULL, err)) != ZT_OK)
        goto free_buffers;
    e->ops->copy_d2h(e->k, codes, dev, n * sizeof(uint32_t));
    int root = -1;
    for (int r = 0; r < e->world && root < 0; r++)
        if (codes[r] != ZT_OK)
            root = r;
    if (root < 0)
        goto free_buffers;
    if (e->rank == root) {
        o->status = (int32_t)st;
        zt_ckpt_pathf(o->msg, sizeof(o->msg), "rank %d: %s", root,
                      err ? zt_err_msg(err) : zt_strerror(st));
        e->ops->copy_h2d(e->k, dev, o, sizeof(*o));
    }
    if ((cst = zt_comm_broadcast(e->comm, dev, sizeof(*o), root, NULL, err)) != ZT_OK)
        goto free_buffers;
    e->ops->copy_d2h(e->k, o, dev, sizeof(*o));
    o->msg[sizeof(o->msg) - 1] = '\0';
    cst = zt_err_set(err, (zt_status)codes[root], "%s", o->msg);
free_buffers:
    if (dev)
        zt_engine_comm_free(e, dev, dev_bytes);
    zt_free(o);
    zt_free(codes);
    return cst;
}

/* ---- the job a checkpoint directory belongs to ---- */

zt_status zt_ckpt_claim(zt_engine *e, const zt_ckpt_owner *me, bool takeover, zt_err *err)
{
    zt_status st = ZT_OK;
    if (e->rank == 0) {
        const char *dir = e->job.train.checkpoint_dir;
        st = mkdirs_explained(dir, err);
        if (st == ZT_OK)
            st = zt_ckpt_owner_claim(dir, me, takeover, err);
    }
    return agree(e, st, err);
}

/* ---- save ---- */

struct ckpt_writer {
    char path[ZT_PATH_MAX + 32];
    unsigned char *buf; /* header + chunk table + payload */
    size_t bytes;
    const size_t *S;    /* the engine's shard sizes per unit */
    int n_units;
    double write_s; /* checksums, open to durable rename, in the background thread */
    uint32_t crc;   /* table_crc32c, set by the writer thread */
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
    w->crc = zt_ckpt_shard_seal(w->buf, w->n_units, w->S);
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
    zt_ckpt_pathf(out, n, "%s/step_%08lld", e->job.train.checkpoint_dir, (long long)step);
}

static size_t shard_bytes(const zt_engine *e, size_t *payload)
{
    size_t p = 0;
    for (int u = 0; u < e->nu; u++)
        p += 12 * e->S[u];
    if (payload)
        *payload = p;
    return sizeof(zt_shard_header) + zt_ckpt_table_bytes(e->nu) + p;
}

/* True for a name zerotrain writes in a step directory: meta.json, rank_NNNNN.zts, and the
 * temporaries zt_outfile writes them under ("<name>.tmp.<pid>"). Clean-up removes nothing
 * else, so a file someone put there (or a link to one) is never lost to pruning. */
static bool own_step_file(const char *name)
{
    char base[64];
    const char *tmp = strstr(name, ".tmp.");
    if (tmp) {
        const char *pid = tmp + 5;
        if (!*pid || (size_t)(tmp - name) >= sizeof(base))
            return false;
        for (const char *p = pid; *p; p++)
            if (!isdigit((unsigned char)*p))
                return false;
        memcpy(base, name, (size_t)(tmp - name));
        base[tmp - name] = '\0';
        name = base;
    }
    return strcmp(name, ZT_CKPT_META_NAME) == 0 || zt_ckpt_parse_shard_name(name) >= 0;
}

/* Removes name from the directory open as dfd when it is a regular file (never through a
 * symbolic link: unlinkat removes the entry itself). 1: removed; 0: there is none; -1: not
 * removed, errno says why (EPERM: it is not a regular file). */
static int unlink_regular_at(int dfd, const char *name)
{
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISREG(sb.st_mode)) {
        errno = EPERM;
        return -1;
    }
    if (unlinkat(dfd, name, 0) == 0)
        return 1;
    return errno == ENOENT ? 0 : -1;
}

/* Rank 0, before any shard of a step is written: the step directory exists, is a real
 * directory (not a symbolic link: zerotrain writes only where it made the directory), and its
 * entry is durable; a re-saved step loses its meta.json first (it is not complete until that
 * is back), and the shards of ranks the new world does not have and temporaries of an
 * interrupted save are removed, so the directory holds only what the new meta.json will list. */
static zt_status prepare_step_dir(zt_engine *e, const char *dir, zt_err *err)
{
    zt_status st = mkdirs_explained(dir, err);
    if (st != ZT_OK)
        return st;
    int sfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0) {
        int en = errno;
        if (en == ELOOP || en == ENOTDIR)
            return zt_err_set(err, ZT_ERR_CONFIG,
                              "checkpoint %s is a symbolic link or not a directory, not a step directory zerotrain made; remove it or set train.checkpoint_dir elsewhere",
                              dir);
        return zt_err_set(err, errno_status(en), "cannot open the checkpoint directory %s: %s",
                          dir, strerror(en));
    }
    int lfd = -1;
    DIR *d = NULL;
    if (unlink_regular_at(sfd, ZT_CKPT_META_NAME) < 0) {
        st = zt_err_set(err, errno == EPERM ? ZT_ERR_CONFIG : errno_status(errno),
                        "cannot remove %s/%s before re-saving step %lld: %s; remove it by hand or set train.checkpoint_dir elsewhere",
                        dir, ZT_CKPT_META_NAME, (long long)e->steps_done,
                        errno == EPERM ? "it is not a regular file" : strerror(errno));
        goto close_dir;
    }
    lfd = dup(sfd);
    d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        st = zt_err_set(err, ZT_ERR_IO, "cannot list the checkpoint directory %s: %s", dir,
                        strerror(errno));
        if (lfd >= 0)
            close(lfd);
        goto close_dir;
    }
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int r = zt_ckpt_parse_shard_name(de->d_name);
        bool tmp = strstr(de->d_name, ".tmp.") != NULL && own_step_file(de->d_name);
        if (!((r >= 0 && r >= e->world) || tmp))
            continue;
        if (unlink_regular_at(sfd, de->d_name) < 0) {
            st = zt_err_set(err, errno == EPERM ? ZT_ERR_CONFIG : errno_status(errno),
                            "cannot remove the stale %s/%s before re-saving step %lld with %d ranks: %s; remove it by hand",
                            dir, de->d_name, (long long)e->steps_done, e->world,
                            errno == EPERM ? "it is not a regular file" : strerror(errno));
            break;
        }
        ZT_INFO("ckpt", "removed stale %s/%s (step %lld is re-saved by %d ranks)", dir,
                de->d_name, (long long)e->steps_done, e->world);
        removed++;
    }
    closedir(d);
    if (st == ZT_OK && removed)
        st = zt_dir_fsync(dir, err);
close_dir:
    close(sfd);
    return st;
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
    size_t payload;
    size_t bytes = shard_bytes(e, &payload);
    ckpt_writer *w = zt_calloc(1, sizeof(*w));
    if (!w)
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory for a checkpoint writer");
    else if (!e->ck_buf)
        st = zt_ckpt_prepare(e, err);
    else
        st = ZT_OK;
    if (st == ZT_OK && e->rank == 0)
        st = prepare_step_dir(e, dir, err);
    if ((st = agree(e, st, err)) != ZT_OK) {
        zt_free(w);
        if (err)
            zt_err_prefix(err, "checkpoint %s not saved", dir);
        return st;
    }
    w->buf = e->ck_buf;
    w->S = e->S;
    w->n_units = e->nu;
    zt_ckpt_pathf(w->path, sizeof(w->path), "%s/rank_%05d.zts", dir, e->rank);
    w->bytes = bytes;
    zt_shard_header h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, ZT_CKPT_SHARD_MAGIC, 8);
    h.version = ZT_CKPT_VERSION;
    h.rank = (uint32_t)e->rank;
    h.world = (uint32_t)e->world;
    h.stage = (uint32_t)zt_zero_stage(e->zero);
    h.n_units = (uint32_t)e->nu;
    h.sections = ZT_CKPT_SECTIONS;
    h.step = (uint64_t)e->steps_done;
    h.payload_offset = sizeof(h) + zt_ckpt_table_bytes(e->nu);
    h.payload_bytes = payload;
    h.units_crc32c = zt_ckpt_units_crc(e->nu, e->lay.unit_numel, e->S);
    h.applied_steps = (uint64_t)e->applied_steps;
    h.skipped_steps = (uint64_t)e->skipped_total;
    h.train_batch_size = (uint64_t)e->job.ds.train_batch_size;
    h.micro_batch = (uint64_t)e->job.ds.micro_batch;
    h.grad_accum = (uint64_t)e->job.ds.grad_accum;
    h.ls_scale = e->scaler.scale;
    h.ls_iter = e->scaler.iter;
    h.ls_last_overflow = e->scaler.last_overflow;
    h.ls_hysteresis_left = e->scaler.hysteresis_left;
    h.precision = (uint32_t)e->pdt;
    h.dims[0] = (uint32_t)e->lay.d.L;
    h.dims[1] = (uint32_t)e->lay.d.NH;
    h.dims[2] = (uint32_t)e->lay.d.C;
    h.dims[3] = (uint32_t)e->lay.d.T;
    h.dims[4] = (uint32_t)e->lay.d.V;
    h.dims[5] = (uint32_t)e->lay.d.Vp;
    h.init_seed = e->job.model.seed;
    /* snapshot: this rank's chunk of every unit (master, exp_avg, exp_avg_sq), padding zero */
    float *p = (float *)(w->buf + h.payload_offset);
    for (int u = 0; u < e->nu; u++) {
        size_t S = e->S[u], r0 = (size_t)e->rank * S, n = e->lay.unit_numel[u];
        size_t len = r0 >= n ? 0 : (n - r0 < S ? n - r0 : S);
        if (len && ((st = zt_engine_region_get(e, u, r0 - e->base[u], len, p, err)) != ZT_OK ||
                    (st = zt_engine_moments_get(e, u, r0 - e->base[u], len, p + S, p + 2 * S,
                                                err)) != ZT_OK)) {
            zt_free(w);
            return st;
        }
        for (int sec = 0; sec < ZT_CKPT_SECTIONS; sec++)
            memset(p + (size_t)sec * S + len, 0, (S - len) * sizeof(float));
        p += ZT_CKPT_SECTIONS * S;
    }
    if ((st = e->ops->sync(e->k, err)) != ZT_OK) {
        zt_free(w);
        return st;
    }
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

typedef struct step_entry {
    int64_t step;
    bool complete;
} step_entry;

static int step_entry_newest_first(const void *a, const void *b)
{
    int64_t x = ((const step_entry *)a)->step, y = ((const step_entry *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void report(const zt_engine *e, const char *line, int n)
{
    if (e->opts.report_fd >= 0 && n > 0 && write(e->opts.report_fd, line, (size_t)n) < 0)
        ZT_WARN("ckpt", "cannot write to the report pipe: %s", strerror(errno));
}

/* Whether step directory `name` of the checkpoint directory open as rfd holds meta.json (a
 * regular file), looking through no symbolic link. */
static bool step_complete_at(int rfd, const char *name)
{
    int sfd = openat(rfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0)
        return false;
    struct stat sb;
    bool ok = fstatat(sfd, ZT_CKPT_META_NAME, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
    close(sfd);
    return ok;
}

/* Removes step directory `name` of the checkpoint directory open as rfd: meta.json first (the
 * checkpoint stops counting before its shards go), then the other files zerotrain writes there
 * (own_step_file, regular files only), then the directory itself, unless anything else is left
 * in it. Looks through no symbolic link. *removed counts the files removed. 0: the directory
 * is gone; 1: it was kept for what else it holds (*foreign entries, the first named in first);
 * -1: it could not be listed or removed; -2: it could not be opened (nothing was touched).
 * errno says why for -1 and -2. */
static int remove_step_at(int rfd, const char *name, int *removed, int *foreign, char *first,
                          size_t first_n)
{
    *removed = *foreign = 0;
    first[0] = '\0';
    int sfd = openat(rfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0)
        return -2;
    int u = unlink_regular_at(sfd, ZT_CKPT_META_NAME);
    if (u < 0) {
        (*foreign)++;
        snprintf(first, first_n, "%s", ZT_CKPT_META_NAME);
    }
    *removed += u > 0;
    int lfd = dup(sfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        int en = errno;
        if (lfd >= 0)
            close(lfd);
        close(sfd);
        errno = en;
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            strcmp(de->d_name, ZT_CKPT_META_NAME) == 0)
            continue;
        if (own_step_file(de->d_name) && (u = unlink_regular_at(sfd, de->d_name)) >= 0) {
            *removed += u;
            continue;
        }
        if (!*foreign)
            snprintf(first, first_n, "%s", de->d_name);
        (*foreign)++;
    }
    closedir(d);
    close(sfd);
    if (*foreign)
        return 1;
    return unlinkat(rfd, name, AT_REMOVEDIR) == 0 ? 0 : -1;
}

/* Rank 0, after a commit: keeps the newest keep_checkpoints complete checkpoints and removes
 * incomplete step directories older than the newest complete one. Only real step_NNNNNNNN
 * directories count: an entry of that name that is a symbolic link or not a directory is left
 * alone (with one warning a run), and only the files zerotrain writes are removed (remove_step_at).
 * Best effort: a directory that cannot be listed or removed is left (and logged). */
static void prune(zt_engine *e)
{
    int keep = e->job.train.keep_checkpoints;
    const char *root = e->job.train.checkpoint_dir;
    int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return;
    int lfd = dup(rfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0)
            close(lfd);
        close(rfd);
        return;
    }
    step_entry *steps = NULL;
    size_t n = 0, cap = 0;
    int64_t newest = -1;
    bool listed = true;
    int odd = 0;
    char odd_first[300] = "";
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int64_t s = zt_ckpt_parse_step_name(de->d_name);
        char canon[32];
        if (s < 0 ||
            zt_ckpt_pathf(canon, sizeof(canon), "step_%08lld", (long long)s) >=
                (int)sizeof(canon) ||
            strcmp(canon, de->d_name) != 0)
            continue;
        struct stat sb;
        if (fstatat(rfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (!S_ISDIR(sb.st_mode)) {
            if (!odd++)
                zt_ckpt_pathf(odd_first, sizeof(odd_first), "%s (%s)", de->d_name,
                              S_ISLNK(sb.st_mode) ? "a symbolic link" : "not a directory");
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            step_entry *grown = zt_realloc(steps, ncap * sizeof(*steps));
            if (!grown) {
                listed = false;
                break;
            }
            steps = grown;
            cap = ncap;
        }
        steps[n].step = s;
        steps[n].complete = step_complete_at(rfd, de->d_name);
        if (steps[n].complete && s > newest)
            newest = s;
        n++;
    }
    closedir(d);
    if (odd && !e->ck_odd_warned) {
        e->ck_odd_warned = true;
        ZT_WARN("ckpt",
                "%s: left %d step_* entr%s alone, e.g. %s: keep_checkpoints removes only step directories zerotrain made",
                root, odd, odd == 1 ? "y" : "ies", odd_first);
    }
    if (!listed) { /* a partial list could keep the wrong ones: remove nothing this time */
        ZT_WARN("ckpt", "out of memory listing %s; old checkpoints are kept this time", root);
        zt_free(steps);
        close(rfd);
        return;
    }
    if (n > 1) /* qsort wants a valid pointer, even for no elements */
        qsort(steps, n, sizeof(*steps), step_entry_newest_first);
    int kept = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t step = steps[i].step;
        bool drop = steps[i].complete ? (keep > 0 && ++kept > keep) : step < newest;
        if (!drop)
            continue;
        char name[32], dir[ZT_PATH_MAX + 32], first[300];
        zt_ckpt_pathf(name, sizeof(name), "step_%08lld", (long long)step);
        zt_ckpt_pathf(dir, sizeof(dir), "%s/%s", root, name);
        int removed = 0, foreign = 0;
        int rc = remove_step_at(rfd, name, &removed, &foreign, first, sizeof(first));
        if (rc == 1 && removed == 0)
            continue; /* nothing of zerotrain's in it (any more): not a checkpoint */
        if (rc < 0) {
            ZT_WARN("ckpt", "cannot remove old checkpoint %s: %s", dir, strerror(errno));
            if (rc == -2)
                continue; /* nothing of it was touched */
        } else if (rc > 0) {
            ZT_WARN("ckpt",
                    "removed checkpoint %s's files but kept the directory: it holds %d entr%s zerotrain did not write (%s)",
                    dir, foreign, foreign == 1 ? "y" : "ies", first);
        } else {
            ZT_INFO("ckpt", "removed checkpoint %s (keep_checkpoints %d)", dir, keep);
        }
        /* incomplete ones too: the coordinator may know them */
        char line[ZT_PATH_MAX + 96];
        report(e, line,
               zt_ckpt_pathf(line, sizeof(line), "rank=%d ckpt_removed step=%lld dir=%s\n",
                             e->rank, (long long)step, dir));
    }
    zt_free(steps);
    close(rfd);
}

/* Rank 0: meta.json from every rank's (table crc, bytes), durable, and the step directory's
 * entry in CKPT_DIR durable before prune may remove older checkpoints. On failure meta.json is
 * removed again: a checkpoint whose commit failed does not count. */
static zt_status commit_meta(zt_engine *e, const char *dir, const uint32_t *info, zt_err *err)
{
    zt_ckpt_meta m;
    memset(&m, 0, sizeof(m));
    m.step = e->ck_step;
    m.applied_steps = e->ck_applied;
    m.skipped_steps = e->ck_skipped;
    m.world = e->world;
    m.stage = zt_zero_stage(e->zero);
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
    zt_status st = zt_ckpt_meta_alloc(&m, err);
    if (st != ZT_OK)
        return st;
    for (int u = 0; u < e->nu; u++) {
        m.numel[u] = e->lay.unit_numel[u];
        m.shard[u] = e->S[u];
    }
    for (int r = 0; r < e->world; r++) {
        const uint32_t *v = info + (size_t)r * 3;
        m.crc[r] = v[0];
        m.bytes[r] = (uint64_t)v[1] | ((uint64_t)v[2] << 32);
    }
    char *js = zt_ckpt_meta_to_json(&m, &e->job);
    zt_ckpt_meta_free(&m);
    char path[ZT_PATH_MAX + 48];
    zt_ckpt_pathf(path, sizeof(path), "%s/%s", dir, ZT_CKPT_META_NAME);
    zt_outfile *f = NULL;
    if (!js)
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory writing %s", path);
    else if ((st = zt_outfile_open(&f, path, err)) == ZT_OK &&
             (st = zt_outfile_write(f, js, strlen(js), err)) == ZT_OK)
        st = zt_outfile_commit(f, err);
    else
        zt_outfile_abort(f);
    free(js);
    if (st == ZT_OK)
        st = zt_dir_fsync(e->job.train.checkpoint_dir, err);
    if (st != ZT_OK && unlink(path) != 0 && errno != ENOENT)
        ZT_WARN("ckpt", "cannot remove %s after its failed commit: %s; remove it by hand", path,
                strerror(errno));
    return st;
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
    char dir[ZT_PATH_MAX + 32];
    step_dir_of(e, e->ck_step, dir, sizeof(dir));
    size_t info_bytes = (size_t)e->world * 3 * sizeof(uint32_t);
    uint32_t *info = zt_calloc((size_t)e->world * 3, sizeof(uint32_t));
    float *dev = zt_engine_comm_alloc(e, info_bytes);
    zt_status st = w->st;
    if (st != ZT_OK)
        zt_err_set(err, st, "%s", w->err.msg);
    else if (!info || !dev)
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    /* is every shard durable? every rank learns the first failure */
    if ((st = agree(e, st, err)) != ZT_OK)
        goto not_saved;
    /* every rank's (table crc, bytes) for rank 0's meta.json */
    uint32_t mine[3] = {w->crc, (uint32_t)(w->bytes & 0xffffffffu), (uint32_t)(w->bytes >> 32)};
    e->ops->copy_h2d(e->k, dev + (size_t)e->rank * 3, mine, sizeof(mine));
    if ((st = zt_comm_allgather(e->comm, dev + (size_t)e->rank * 3, dev, 3, ZT_F32, NULL, err)) !=
        ZT_OK)
        goto not_saved;
    e->ops->copy_d2h(e->k, info, dev, info_bytes);
    /* rank 0 commits; every rank learns whether that worked before anyone reports the step */
    st = e->rank == 0 ? commit_meta(e, dir, info, err) : ZT_OK;
    if ((st = agree(e, st, err)) != ZT_OK)
        goto not_saved;
    ZT_INFO("ckpt", "shard %s: %zu bytes written and fsync'd in %.3f s", w->path, w->bytes,
            w->write_s);
    char line[ZT_PATH_MAX + 128];
    report(e, line,
           zt_ckpt_pathf(line, sizeof(line),
                         "rank=%d ckpt step=%lld file=%s bytes=%zu crc32c=%08x\n", e->rank,
                         (long long)e->ck_step, w->path, w->bytes, w->crc));
    if (e->rank == 0) {
        prune(e);
        report(e, line,
               zt_ckpt_pathf(line, sizeof(line), "rank=0 ckpt_commit step=%lld dir=%s\n",
                             (long long)e->ck_step, dir));
    }
    e->last_ckpt_step = e->ck_step;
    e->ck_blocked_s += (double)(zt_now_ns() - t0) * 1e-9;
    if (e->rank == 0)
        ZT_INFO("ckpt", "checkpoint %s complete: rank 0 wrote %zu bytes in %.3f s (%.3f GB/s, fsync'd), training blocked %.1f ms",
                dir, w->bytes, w->write_s,
                (double)w->bytes / (w->write_s > 0 ? w->write_s : 1e-9) / 1e9,
                e->ck_blocked_s * 1e3);
    goto free_buffers;
not_saved:
    if (err)
        zt_err_prefix(err, "checkpoint %s not saved", dir);
free_buffers:
    if (dev)
        zt_engine_comm_free(e, dev, info_bytes);
    zt_free(info);
    zt_free(w);
    return st;
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
    size_t bytes = shard_bytes(e, NULL);
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

/* This rank's part of a load: the checkpoint opened (every header checked), then per unit the
 * master values this rank keeps (all of them below stage 3, its own chunk and optimizer region
 * at stage 3) and its region's moments, each chunk read verified against its checksum. */
static zt_status load_local(zt_engine *e, zt_ckpt **cp, const char *path, zt_err *err)
{
    zt_status st = zt_ckpt_open(cp, path, err);
    if (st != ZT_OK)
        return st;
    zt_ckpt *c = *cp;
    float *vals = NULL, *mv = NULL;
    const zt_gpt2_dims *a = &c->m.dims, *b = &e->lay.d;
    if (a->L != b->L || a->C != b->C || a->NH != b->NH || a->T != b->T || a->V != b->V ||
        a->Vp != b->Vp) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "checkpoint %s holds a model with n_layer %d n_head %d n_embd %d block_size %d vocab %d (padded %d) but the job has %d %d %d %d %d (%d); resume with the job that wrote it",
                        c->dir, a->L, a->NH, a->C, a->T, a->V, a->Vp, b->L, b->NH, b->C, b->T,
                        b->V, b->Vp);
        goto free_buffers;
    }
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    vals = zt_calloc(maxp, sizeof(float));
    mv = zt_calloc(maxp * 2, sizeof(float));
    if (!vals || !mv) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory loading the checkpoint");
        goto free_buffers;
    }
    for (int u = 0; u < e->nu; u++) {
        size_t n = e->lay.unit_numel[u];
        size_t rl = zt_engine_region_len(e, u);
        size_t lo = 0, hi = n;
        if (zt_zero_params_sharded(e->zero)) { /* its parameter chunk and its optimizer region */
            zt_zero_span ps = zt_zero_param_span(e->zero, u);
            size_t s0 = ps.start, s1 = ps.start + ps.len;
            lo = rl && e->base[u] < s0 ? e->base[u] : s0;
            hi = rl && e->base[u] + rl > s1 ? e->base[u] + rl : s1;
            hi = hi < n ? hi : n;
            lo = lo < hi ? lo : hi;
        }
        memset(vals, 0, e->P[u] * sizeof(float));
        if ((st = zt_ckpt_read_verified(c, 0, u, lo, hi - lo, vals + lo, err)) != ZT_OK)
            goto free_buffers;
        if ((st = zt_engine_load_unit(e, u, vals, err)) != ZT_OK)
            goto free_buffers;
        if (rl) {
            if ((st = zt_ckpt_read_verified(c, 1, u, e->base[u], rl, mv, err)) != ZT_OK ||
                (st = zt_ckpt_read_verified(c, 2, u, e->base[u], rl, mv + rl, err)) != ZT_OK)
                goto free_buffers;
            if ((st = zt_engine_moments_set(e, u, 0, rl, mv, mv + rl, err)) != ZT_OK)
                goto free_buffers;
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
free_buffers:
    zt_free(vals);
    zt_free(mv);
    return st;
}

zt_status zt_ckpt_load(zt_engine *e, const char *path, zt_err *err)
{
    zt_ckpt *c = NULL;
    double t0 = zt_now_s();
    zt_status st = load_local(e, &c, path, err);
    if (st == ZT_OK)
        ZT_INFO("ckpt", "read %.1f MB of %s (every chunk read checksum-verified) in %.3f s",
                (double)c->bytes_read / 1e6, c->dir, zt_now_s() - t0);
    /* a chunk only this rank read may be the corrupted one: all ranks refuse together */
    st = agree(e, st, err);
    if (st == ZT_OK && e->rank == 0)
        ZT_INFO("ckpt", "resumed from %s (step %lld, written by %d rank%s at stage %d; now %d rank%s at stage %d)",
                c->dir, (long long)c->m.step, c->m.world, c->m.world == 1 ? "" : "s", c->m.stage,
                e->world, e->world == 1 ? "" : "s", zt_zero_stage(e->zero));
    zt_ckpt_close(c);
    return st;
}

zt_status zt_ckpt_adapt_job(zt_job *job, const char *step_dir, int world, zt_err *err)
{
    zt_ckpt *c = NULL;
    zt_status st = zt_ckpt_open(&c, step_dir, err);
    if (st != ZT_OK)
        return st;
    const zt_ckpt_meta *m = &c->m;
    const zt_model_cfg *mc = &job->model;
    if (m->dims.L != mc->n_layer || m->dims.C != mc->n_embd || m->dims.NH != mc->n_head ||
        m->dims.T != mc->block_size || m->dims.V != mc->vocab_size ||
        m->dims.Vp != mc->padded_vocab_size) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "checkpoint %s holds a model with n_layer %d n_head %d n_embd %d block_size %d vocab_size %d but the job asks for %d %d %d %d %d; resume with the job that wrote it",
                        step_dir, m->dims.L, m->dims.NH, m->dims.C, m->dims.T, m->dims.V,
                        mc->n_layer, mc->n_head, mc->n_embd, mc->block_size, mc->vocab_size);
        goto close_ckpt;
    }
    /* elastic batch: the global batch and the sample order stay; accumulation re-derived */
    int64_t tb = m->train_batch_size;
    int64_t micro = job->ds.given_micro_batch ? job->ds.given_micro_batch : job->ds.micro_batch;
    if (job->ds.micro_auto && !job->ds.given_micro_batch) {
        /* "auto": the planner picks it again for this rank count, within the same global
         * batch (zt_auto_batch_pick); here only the split of the batch over the ranks */
        if (tb % world != 0) {
            st = zt_err_set(err, ZT_ERR_CONFIG,
                            "cannot resume %s on %d ranks: its train_batch_size %lld is not a multiple of the rank count; pick a rank count that divides %lld",
                            step_dir, world, (long long)tb, (long long)tb);
            goto close_ckpt;
        }
        job->ds.given_train_batch_size = tb;
        job->ds.given_grad_accum = 0;
        job->ds.micro_picked = 1;
        job->resources.ranks = world;
        st = zt_job_resolve_batch(job, world, err);
        goto close_ckpt;
    }
    if (micro <= 0 || tb % (micro * world) != 0) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "cannot resume %s on %d ranks: its train_batch_size %lld is not a multiple of train_micro_batch_size_per_gpu %lld * %d ranks; pick a rank count and micro batch whose product divides %lld",
                        step_dir, world, (long long)tb, (long long)micro, world, (long long)tb);
        goto close_ckpt;
    }
    job->ds.given_train_batch_size = tb;
    job->ds.given_micro_batch = micro;
    job->ds.given_grad_accum = 0;
    job->resources.ranks = world;
    st = zt_job_resolve_batch(job, world, err);
close_ckpt:
    zt_ckpt_close(c);
    return st;
}
