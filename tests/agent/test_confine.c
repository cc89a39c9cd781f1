/* Tests agent/confine.c: resolving a job's paths the way a worker would reach them (symbolic
 * links, dangling ones, paths not created yet), the allowed-root test, the check of every path
 * a job names with a message that names the key, the path, where it leads and the roots, and
 * the policy of --run-as / --allow-root. */
#define _XOPEN_SOURCE 700
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/confine.h"
#include "common/alloc.h"
#include "tests/test.h"
#include "tests/tmpdir.h"

static char base[PATH_MAX]; /* tmpdir, canonical */

/* base/rel in one of 8 rotating buffers */
static const char *at(const char *rel)
{
    static char bufs[8][PATH_MAX + 64];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, PATH_MAX + 64, "%s/%s", base, rel);
    return b;
}

static void make_dir(const char *rel)
{
    if (mkdir(at(rel), 0755) != 0) ZT_FAIL("mkdir %s failed", at(rel));
}

static void make_file(const char *rel)
{
    FILE *f = fopen(at(rel), "w");
    if (!f) ZT_FAIL("cannot create %s", at(rel));
    fputs("x", f);
    fclose(f);
}

static void make_link(const char *target, const char *rel)
{
    if (symlink(target, at(rel)) != 0) ZT_FAIL("symlink %s -> %s failed", at(rel), target);
}

/* root/ inside; out/ outside; links from inside to outside */
static void make_tree(void)
{
    make_dir("root");
    make_dir("root/data");
    make_file("root/data/train_0.bin");
    make_file("root/data/val_0.bin");
    make_file("root/model.bin");
    make_dir("out");
    make_dir("out/data");
    make_file("out/data/train_0.bin");
    make_file("out/secret.bin");
    make_link(at("out/data"), "root/evil"); /* a directory outside */
    make_dir("root/mixed");
    make_file("root/mixed/train_0.bin");
    make_link(at("out/secret.bin"), "root/mixed/train_1.bin"); /* one file outside */
    make_link(at("out/not_yet"), "root/dangling");             /* dangling, to outside */
    make_link("../out/rel_not_yet", "root/dangling_rel");      /* dangling, relative */
    make_link("inside_not_yet", "root/dangling_in");           /* dangling, stays inside */
    make_link("loop_b", "root/loop_a");
    make_link("loop_a", "root/loop_b");
}

static void expect_resolve(const char *path, const char *want)
{
    char out[PATH_MAX];
    zt_err err = {0};
    zt_status st = zt_confine_resolve(path, out, sizeof(out), &err);
    if (st != ZT_OK) ZT_FAIL("resolve %s: %s", path, err.msg);
    ASSERT_STREQ(out, want);
}

static void expect_resolve_error(const char *path, const char *needle)
{
    char out[PATH_MAX];
    zt_err err = {0};
    zt_status st = zt_confine_resolve(path, out, sizeof(out), &err);
    if (st != ZT_ERR_CONFIG) ZT_FAIL("resolve %s: status %d, expected an error", path, (int)st);
    ASSERT_CONTAINS(err.msg, needle);
}

static void test_resolve(void)
{
    expect_resolve(at("root/data/train_0.bin"), at("root/data/train_0.bin"));
    expect_resolve(at("root/evil/train_0.bin"), at("out/data/train_0.bin"));
    /* not there yet: the nearest existing ancestor, resolved, and the rest as it stands */
    expect_resolve(at("root/ckpt/job/step_1"), at("root/ckpt/job/step_1"));
    expect_resolve(at("root/evil/ckpt/new"), at("out/data/ckpt/new"));
    expect_resolve(at("root/data/train_0.bin/x"), at("root/data/train_0.bin/x"));
    /* dangling links lead where they point, whatever is created through them */
    expect_resolve(at("root/dangling"), at("out/not_yet"));
    expect_resolve(at("root/dangling/sub/dir"), at("out/not_yet/sub/dir"));
    expect_resolve(at("root/dangling_rel/x"), at("out/rel_not_yet/x"));
    expect_resolve(at("root/dangling_in"), at("root/inside_not_yet"));
    expect_resolve("/", "/");
    expect_resolve_error(at("root/missing/../x"), "goes up");
    expect_resolve_error(at("root/loop_a"), "cannot resolve");
    expect_resolve_error(at("root/loop_a/x"), "cannot resolve");
    expect_resolve_error("relative/path", "not an absolute path");
}

static void test_inside(void)
{
    char *roots[] = {"/srv/zt", "/data"};
    ASSERT_TRUE(zt_confine_inside("/srv/zt", roots, 2));
    ASSERT_TRUE(zt_confine_inside("/srv/zt/a/b", roots, 2));
    ASSERT_TRUE(zt_confine_inside("/data/x", roots, 2));
    ASSERT_TRUE(!zt_confine_inside("/srv/ztx", roots, 2));
    ASSERT_TRUE(!zt_confine_inside("/srv", roots, 2));
    ASSERT_TRUE(!zt_confine_inside("/etc/passwd", roots, 2));
    ASSERT_TRUE(!zt_confine_inside("/srv/zt", roots, 0));
    char *slash[] = {"/"};
    ASSERT_TRUE(zt_confine_inside("/etc/passwd", slash, 1));
    ASSERT_TRUE(zt_confine_inside("/", slash, 1));
}

/* A job with these paths (absolute), parsed as the agent parses what the coordinator sends. */
static zt_job *job_with(const char *train, const char *val, const char *init, const char *ckpt)
{
    char *text =
        zt_asprintf("{\"name\": \"j\",\n"
                    " \"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"block_size\": 16,"
                    " \"vocab_size\": 100, \"init\": \"%s\"},\n"
                    " \"data\": {\"train\": \"%s\"%s%s%s},\n"
                    " \"train\": {\"steps\": 10, \"checkpoint_dir\": \"%s\"},\n"
                    " \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 2}}\n",
                    init ? init : "random", train, val ? ", \"val\": \"" : "", val ? val : "",
                    val ? "\"" : "", ckpt);
    zt_job *job = zt_malloc(sizeof(*job));
    ASSERT_TRUE(text && job);
    zt_err err = {0};
    if (zt_job_parse_inline(job, text, "job 12", base, &err) != ZT_OK)
        ZT_FAIL("job does not parse: %s\n%s", err.msg, text);
    zt_free(text);
    return job;
}

static void expect_ok(const zt_job *job, const char *resume, char *const *roots, int n)
{
    zt_err err = {0};
    zt_status st = zt_confine_check_job(job, resume, roots, n, "job 12", &err);
    if (st != ZT_OK) ZT_FAIL("refused: %s", err.msg);
}

/* Refused with ZT_ERR_AUTH; the message holds each of the NULL-terminated needles. */
static void expect_refused(const zt_job *job, const char *resume, char *const *roots, int n,
                           const char *const *needles)
{
    zt_err err = {0};
    zt_status st = zt_confine_check_job(job, resume, roots, n, "job 12", &err);
    if (st != ZT_ERR_AUTH) ZT_FAIL("status %d (%s), expected ZT_ERR_AUTH", (int)st, err.msg);
    ASSERT_TRUE(strncmp(err.msg, "job 12: ", 8) == 0);
    ASSERT_CONTAINS(err.msg, "outside the agent's allowed paths (");
    ASSERT_CONTAINS(err.msg, "start zagent with --allow-path DIR");
    for (; *needles; needles++)
        ASSERT_CONTAINS(err.msg, *needles);
}

static void test_check_job(void)
{
    char root[PATH_MAX];
    snprintf(root, sizeof(root), "%s", at("root"));
    char *roots[] = {root};
    char roots_text[PATH_MAX + 4];
    snprintf(roots_text, sizeof(roots_text), "(%s)", root);

    /* everything inside, the checkpoint directory not created yet */
    zt_job *job = job_with(at("root/data/train_*.bin"), at("root/data/val_*.bin"),
                           at("root/model.bin"), at("root/ckpt/j"));
    expect_ok(job, NULL, roots, 1);
    expect_ok(job, at("root/ckpt/j/step_00000010"), roots, 1);
    /* the resume checkpoint the coordinator names */
    {
        const char *want[] = {"the checkpoint to resume from", at("out/data/step_1"),
                              "resume from a checkpoint inside them", roots_text, NULL};
        expect_refused(job, at("root/evil/step_1"), roots, 1, want);
    }
    /* train.resume_from */
    snprintf(job->train.resume_from, sizeof(job->train.resume_from), "%s", at("out/ck"));
    {
        const char *want[] = {"train.resume_from", at("out/ck"), NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    job->train.resume_from[0] = '\0';
    /* DeepSpeed's CSV monitor writes too */
    job->ds.csv_monitor.enabled = true;
    snprintf(job->ds.csv_monitor.output_path, sizeof(job->ds.csv_monitor.output_path), "%s",
             at("root/dangling/csv"));
    {
        const char *want[] = {"deepspeed.csv_monitor.output_path", at("out/not_yet/csv"), NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    job->ds.csv_monitor.enabled = false;
    /* the NVMe swaps write there too: offload_param's nvme_path as offload_optimizer's */
    job->ds.zero.offload_param.enabled = job->ds.zero.offload_param.nvme = true;
    snprintf(job->ds.zero.offload_param.nvme_path, sizeof(job->ds.zero.offload_param.nvme_path),
             "%s", at("out"));
    {
        const char *want[] = {"deepspeed.zero_optimization.offload_param.nvme_path", at("out"),
                              "choose an nvme_path inside them", NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    snprintf(job->ds.zero.offload_param.nvme_path, sizeof(job->ds.zero.offload_param.nvme_path),
             "%s", at("root"));
    expect_ok(job, NULL, roots, 1);
    job->ds.csv_monitor.enabled = true;
    /* with the outside directory allowed too, all of it passes */
    char out[PATH_MAX];
    snprintf(out, sizeof(out), "%s", at("out"));
    char *both[] = {root, out};
    expect_ok(job, at("root/evil/step_1"), both, 2);
    zt_free(job);

    /* data in a directory outside */
    job = job_with(at("out/data/train_*.bin"), NULL, NULL, at("root/ckpt/j"));
    {
        char resolves[PATH_MAX + 64];
        snprintf(resolves, sizeof(resolves), "data.train %s resolves to %s,",
                 at("out/data/train_*.bin"), at("out/data/train_*.bin"));
        const char *want[] = {resolves, roots_text, "or move the data inside them", NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    zt_free(job);
    /* a link inside the root to a directory outside */
    job = job_with(at("root/evil/train_*.bin"), NULL, NULL, at("root/ckpt/j"));
    {
        char resolves[PATH_MAX + 64];
        snprintf(resolves, sizeof(resolves), "resolves to %s,", at("out/data/train_*.bin"));
        const char *want[] = {"data.train", resolves, NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    zt_free(job);
    /* one matched file that is a link to outside */
    job = job_with(at("root/mixed/train_*.bin"), NULL, NULL, at("root/ckpt/j"));
    {
        char matches[2 * PATH_MAX];
        snprintf(matches, sizeof(matches), "matches %s, which resolves to %s,",
                 at("root/mixed/train_1.bin"), at("out/secret.bin"));
        const char *want[] = {"data.train", matches, NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    zt_free(job);
    /* data.val, a plain file name (no wildcard) */
    job = job_with(at("root/data/train_*.bin"), at("out/secret.bin"), NULL, at("root/ckpt/j"));
    {
        const char *want[] = {"data.val", at("out/secret.bin"), NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    zt_free(job);
    /* a model file reached through a link */
    job =
        job_with(at("root/data/train_*.bin"), NULL, at("root/evil/train_0.bin"), at("root/ckpt/j"));
    {
        const char *want[] = {"model.init", at("out/data/train_0.bin"),
                              "move the model file inside them", NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    zt_free(job);
    /* a checkpoint directory below a dangling link */
    job = job_with(at("root/data/train_*.bin"), NULL, NULL, at("root/dangling/j"));
    {
        const char *want[] = {"train.checkpoint_dir", at("out/not_yet/j"),
                              "choose a checkpoint_dir inside them", NULL};
        expect_refused(job, NULL, roots, 1, want);
    }
    zt_free(job);
    /* a path that cannot be resolved at all is an error too */
    job = job_with(at("root/data/train_*.bin"), NULL, NULL, at("root/loop_a/j"));
    zt_err err = {0};
    ASSERT_EQ_INT(zt_confine_check_job(job, NULL, roots, 1, "job 12", &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "job 12: train.checkpoint_dir");
    zt_free(job);
    /* no match yet is not a refusal: the worker says the data is missing */
    job = job_with(at("root/data/none_*.bin"), NULL, NULL, at("root/ckpt/j"));
    expect_ok(job, NULL, roots, 1);
    zt_free(job);
}

static void test_user_policy(void)
{
    zt_err err = {0};
    bool drop = true;
    /* root */
    ASSERT_EQ_INT(zt_confine_check_user(0, NULL, 0, false, &drop, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg,
                    "zagent runs as root: give --run-as USER so workers do not run as root");
    ASSERT_CONTAINS(err.msg, "--allow-root");
    ASSERT_OK(zt_confine_check_user(0, "", 0, true, &drop, &err));
    ASSERT_TRUE(!drop);
    ASSERT_OK(zt_confine_check_user(0, "nobody", 65534, false, &drop, &err));
    ASSERT_TRUE(drop);
    ASSERT_OK(zt_confine_check_user(0, "nobody", 65534, true, &drop, &err)); /* --run-as wins */
    ASSERT_TRUE(drop);
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_confine_check_user(0, "root", 0, false, &drop, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "--run-as root is root");
    ASSERT_OK(zt_confine_check_user(0, "root", 0, true, &drop, &err));
    ASSERT_TRUE(!drop);
    /* not root */
    ASSERT_OK(zt_confine_check_user(1000, NULL, 0, false, &drop, &err));
    ASSERT_TRUE(!drop);
    ASSERT_OK(zt_confine_check_user(1000, NULL, 0, true, &drop, &err));
    ASSERT_OK(zt_confine_check_user(1000, "me", 1000, false, &drop, &err));
    ASSERT_TRUE(!drop);
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_confine_check_user(1000, "nobody", 65534, false, &drop, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg,
                    "zagent runs as uid 1000, and only root can start workers as another user");
    ASSERT_TRUE(!drop);
}

static void test_root(void)
{
    char out[PATH_MAX];
    zt_err err = {0};
    char odd[PATH_MAX + 16];
    snprintf(odd, sizeof(odd), "%s/./root//", base);
    ASSERT_OK(zt_confine_root(odd, "--allow-path", out, sizeof(out), &err));
    ASSERT_STREQ(out, at("root"));
    ASSERT_OK(zt_confine_root(at("root/evil"), "--allow-path", out, sizeof(out), &err));
    ASSERT_STREQ(out, at("out/data")); /* a link names its target */
    ASSERT_EQ_INT(zt_confine_root(at("nope"), "ZT_ALLOW_PATH", out, sizeof(out), &err),
                  ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "ZT_ALLOW_PATH: the allowed path");
    ASSERT_EQ_INT(zt_confine_root(at("root/model.bin"), "--allow-path", out, sizeof(out), &err),
                  ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "is not a directory");
}

int main(void)
{
    if (tmpdir_create("zt_confine") != 0 || !realpath(tmpdir, base)) {
        perror("tmpdir");
        return 1;
    }
    make_tree();
    ZT_TEST_RUN(test_resolve());
    ZT_TEST_RUN(test_inside());
    ZT_TEST_RUN(test_check_job());
    ZT_TEST_RUN(test_user_policy());
    ZT_TEST_RUN(test_root());
    if (*zt_test_failed_parts()) return 1;
    printf("test_confine: ok\n");
    return 0;
}
