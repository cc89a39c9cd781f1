/* Tests agent/config.c: zagent's settings from flags and ZT_* variables (flags win), their
 * defaults, and one clear message per kind of bad value that names the flag or variable; the
 * allowed paths and the user workers run as (the policy itself: tests/agent/test_confine.c). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "tests/test.h"

static char tmpdir[256];

static const char *const env_names[] = {
    "ZT_COORDINATOR", "ZT_TOKEN_FILE", "ZT_TOKEN",       "ZT_TLS_CA",       "ZT_SLOTS",
    "ZT_AGENT_NAME",  "ZT_WORK_DIR",   "ZT_WORKER",      "ZT_HEARTBEAT_MS", "ZT_ADVERTISE_HOST",
    "ZT_STOP_GRACE",  "ZT_LOG_QUEUE",  "ZT_STATUS_FILE", "ZT_LOG_LEVEL",    "OMP_NUM_THREADS",
    "ZT_ALLOW_PATH",  "ZT_RUN_AS",     "ZT_ALLOW_ROOT"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
        unsetenv(env_names[i]);
    char wd[300];
    snprintf(wd, sizeof(wd), "%s/work", tmpdir);
    setenv("ZT_WORK_DIR", wd, 1);
    setenv("ZT_WORKER", "/bin/true", 1);
    /* as root (a CI container) zagent refuses to start without --run-as or --allow-root */
    if (geteuid() == 0) setenv("ZT_ALLOW_ROOT", "1", 1);
}

/* Parses argv (NULL-terminated list after "zagent"); returns the status. */
static zt_status parse(zt_agent_config *cfg, zt_err *err, const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = "zagent";
    for (; args && *args && argc < 31; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    bool help = false;
    zt_err_clear(err);
    return zt_agent_config_parse(cfg, argc, argv, &help, err);
}

static void expect_error(const char *const *args, zt_status want, const char *needle)
{
    zt_agent_config cfg;
    zt_err err;
    zt_status st = parse(&cfg, &err, args);
    if (st != want)
        ZT_FAIL("args starting '%s': status %s (%s), expected %s", args[0] ? args[0] : "",
                zt_status_name(st), err.msg, zt_status_name(want));
    ASSERT_CONTAINS(err.msg, needle);
    ASSERT_TRUE(cfg.coordinator == NULL && cfg.name == NULL); /* left empty */
}

static void test_defaults(void)
{
    clear_env();
    zt_agent_config cfg;
    zt_err err;
    const char *none[] = {NULL};
    ASSERT_OK(parse(&cfg, &err, none));
    ASSERT_STREQ(cfg.coordinator, "127.0.0.1:50051");
    ASSERT_EQ_INT(cfg.device, ZT_DEVICE_CPU);
    ASSERT_EQ_INT(cfg.slots, 1);
    ASSERT_STREQ(cfg.advertise_host, "127.0.0.1"); /* loopback coordinator */
    ASSERT_EQ_INT(cfg.heartbeat_ms, 0);
    ASSERT_EQ_INT(cfg.stop_grace_ms, 10000);
    ASSERT_EQ_INT(cfg.log_queue_lines, 10000);
    ASSERT_TRUE(cfg.token == NULL && cfg.tls_ca_pem == NULL && cfg.status_file == NULL);
    ASSERT_TRUE(cfg.work_dir[0] == '/');
    ASSERT_CONTAINS(cfg.work_dir, "/work");
    ASSERT_TRUE(strstr(cfg.worker, "true") != NULL);
    ASSERT_TRUE(cfg.exec_wrapper && cfg.exec_wrapper[0] == '/');
    char host[256];
    gethostname(host, sizeof(host));
    ASSERT_TRUE(cfg.name && cfg.name[0]);
    ASSERT_EQ_INT(strlen(cfg.name), strlen(host) < 128 ? strlen(host) : 128);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ASSERT_EQ_INT(cfg.omp_threads, cpus);
    zt_agent_config_free(&cfg);
    ASSERT_TRUE(cfg.coordinator == NULL);
    zt_agent_config_free(&cfg); /* twice is fine */
}

static void test_env_and_flags(void)
{
    clear_env();
    setenv("ZT_COORDINATOR", "10.1.2.3:7000", 1);
    setenv("ZT_SLOTS", "cpu:3", 1);
    setenv("ZT_AGENT_NAME", "env-name", 1);
    setenv("ZT_HEARTBEAT_MS", "250", 1);
    setenv("ZT_TOKEN", "tok-from-env", 1);
    setenv("OMP_NUM_THREADS", "5", 1);
    zt_agent_config cfg;
    zt_err err;
    const char *none[] = {NULL};
    ASSERT_OK(parse(&cfg, &err, none));
    ASSERT_STREQ(cfg.coordinator, "10.1.2.3:7000");
    ASSERT_EQ_INT(cfg.slots, 3);
    ASSERT_STREQ(cfg.name, "env-name");
    ASSERT_EQ_INT(cfg.heartbeat_ms, 250);
    ASSERT_STREQ(cfg.token, "tok-from-env");
    ASSERT_EQ_INT(cfg.omp_threads, 0); /* the environment sets OMP_NUM_THREADS already */
    char host[256];
    gethostname(host, sizeof(host));
    ASSERT_STREQ(cfg.advertise_host, host); /* remote coordinator: peers need our name */
    zt_agent_config_free(&cfg);

    /* flags win, in both spellings */
    const char *flags[] = {"--coordinator",
                           "127.0.0.1:9",
                           "--slots=cpu:2",
                           "--name",
                           "flag-name",
                           "--heartbeat-ms=100",
                           "--advertise-host",
                           "node7",
                           "--stop-grace",
                           "2.5s",
                           "--log-queue",
                           "50",
                           NULL};
    ASSERT_OK(parse(&cfg, &err, flags));
    ASSERT_STREQ(cfg.coordinator, "127.0.0.1:9");
    ASSERT_EQ_INT(cfg.slots, 2);
    ASSERT_STREQ(cfg.name, "flag-name");
    ASSERT_EQ_INT(cfg.heartbeat_ms, 100);
    ASSERT_STREQ(cfg.advertise_host, "node7");
    ASSERT_EQ_INT(cfg.stop_grace_ms, 2500);
    ASSERT_EQ_INT(cfg.log_queue_lines, 50);
    zt_agent_config_free(&cfg);
}

static void test_token_file(void)
{
    clear_env();
    setenv("ZT_TOKEN", "ignored-when-a-file-is-given", 1);
    char path[300];
    snprintf(path, sizeof(path), "%s/token", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("s3cret-join-token-0123\r\n", f);
    fclose(f);
    /* read as common/secretfile.h says: the owner's alone, one line, 16+ printable bytes */
    zt_agent_config cfg;
    zt_err err;
    const char *args[] = {"--token-file", path, NULL};
    chmod(path, 0644);
    expect_error(args, ZT_ERR_CONFIG, "chmod 600");
    chmod(path, 0600);
    ASSERT_OK(parse(&cfg, &err, args));
    ASSERT_STREQ(cfg.token, "s3cret-join-token-0123");
    zt_agent_config_free(&cfg);
    f = fopen(path, "w");
    fputs("short\n", f);
    fclose(f);
    expect_error(args, ZT_ERR_CONFIG, "16");
    const char *missing[] = {"--token-file", "/nonexistent/token", NULL};
    expect_error(missing, ZT_ERR_IO, "/nonexistent/token");
    const char *badca[] = {"--tls-ca", path, NULL};
    expect_error(badca, ZT_ERR_CONFIG, "no PEM certificate");
}

static void test_slots(void)
{
    zt_device dev = 0;
    int slots = 0;
    zt_err err = {0};
    ASSERT_OK(zt_agent_parse_slots("cpu:8", &dev, &slots, &err));
    ASSERT_EQ_INT(dev, ZT_DEVICE_CPU);
    ASSERT_EQ_INT(slots, 8);
    ASSERT_OK(zt_agent_parse_slots("cuda:auto", &dev, &slots, &err));
    ASSERT_EQ_INT(dev, ZT_DEVICE_CUDA);
    ASSERT_EQ_INT(slots, -1);
    ASSERT_OK(zt_agent_parse_slots("cuda:2", &dev, &slots, &err));
    ASSERT_EQ_INT(slots, 2);
    const char *bad[] = {"cpu:0", "cpu:4097", "cpu:", "cpu:2x", "gpu:1", "cpu", "", "cuda:-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zt_err_clear(&err);
        if (zt_agent_parse_slots(bad[i], &dev, &slots, &err) != ZT_ERR_CONFIG)
            ZT_FAIL("slots '%s' accepted", bad[i]);
        ASSERT_CONTAINS(err.msg, bad[i]);
    }
    clear_env();
    const char *a1[] = {"--slots", "gpu:2", NULL};
    expect_error(a1, ZT_ERR_CONFIG, "--slots");
    setenv("ZT_SLOTS", "cpu:many", 1);
    const char *none[] = {NULL};
    expect_error(none, ZT_ERR_CONFIG, "ZT_SLOTS");
    /* cuda:auto: a clear error where no GPU is usable (here: no driver), else every GPU */
    clear_env();
    const char *cuda[] = {"--slots", "cuda:auto", NULL};
    zt_agent_config cfg;
    zt_status st = parse(&cfg, &err, cuda);
    if (st == ZT_OK) {
        ASSERT_TRUE(cfg.slots >= 1 && cfg.n_gpus == cfg.slots);
        ASSERT_EQ_INT(cfg.omp_threads, 0);
        printf("cuda:auto found %d GPU(s): %s\n", cfg.n_gpus, cfg.gpus[0].name);
        zt_agent_config_free(&cfg);
    } else {
        ASSERT_EQ_INT(st, ZT_ERR_NO_DEVICE);
        ASSERT_CONTAINS(err.msg, "no usable GPU");
        ASSERT_CONTAINS(err.msg, "--slots cpu:N");
        printf("cuda:auto here: %s\n", err.msg);
    }
}

static void test_bad_values(void)
{
    clear_env();
    const char *hb[] = {"--heartbeat-ms", "10", NULL};
    expect_error(hb, ZT_ERR_CONFIG, "--heartbeat-ms");
    setenv("ZT_HEARTBEAT_MS", "soon", 1);
    const char *none[] = {NULL};
    expect_error(none, ZT_ERR_CONFIG, "ZT_HEARTBEAT_MS");
    clear_env();
    const char *name[] = {"--name", "a b", NULL};
    expect_error(name, ZT_ERR_CONFIG, "agent name 'a b' is not valid");
    const char *grace[] = {"--stop-grace", "forever", NULL};
    expect_error(grace, ZT_ERR_CONFIG, "--stop-grace");
    const char *lq[] = {"--log-queue", "3", NULL};
    expect_error(lq, ZT_ERR_CONFIG, "--log-queue");
    const char *lvl[] = {"--log-level", "loud", NULL};
    expect_error(lvl, ZT_ERR_CONFIG, "not error, warn, info or debug");
    const char *coord[] = {"--coordinator=", NULL};
    expect_error(coord, ZT_ERR_CONFIG, "--coordinator is empty");
    const char *worker[] = {"--worker", "/nonexistent/zworker", NULL};
    expect_error(worker, ZT_ERR_CONFIG, "/nonexistent/zworker is not an executable file");
    const char *unknown[] = {"--colour", "red", NULL};
    expect_error(unknown, ZT_ERR_CONFIG, "unknown option '--colour'");
    const char *novalue[] = {"--slots", NULL};
    expect_error(novalue, ZT_ERR_CONFIG, "--slots needs a value");
    const char *positional[] = {"job.json", NULL};
    expect_error(positional, ZT_ERR_CONFIG, "unexpected argument 'job.json'");
    const char *wd[] = {"--work-dir", "/proc/self/zagent-cannot-be-here", NULL};
    expect_error(wd, ZT_ERR_IO, "cannot create the work directory");
}

static void test_allow_paths(void)
{
    char a[300], b[300], file[300], cwd[4096], rp[4096];
    snprintf(a, sizeof(a), "%s/root_a", tmpdir);
    snprintf(b, sizeof(b), "%s/root_b", tmpdir);
    snprintf(file, sizeof(file), "%s/a_file", tmpdir);
    ASSERT_TRUE(mkdir(a, 0755) == 0 && mkdir(b, 0755) == 0);
    FILE *f = fopen(file, "w");
    ASSERT_TRUE(f != NULL);
    fclose(f);
    ASSERT_TRUE(getcwd(cwd, sizeof(cwd)) != NULL && realpath(cwd, rp) != NULL);

    /* default: the working directory, canonical */
    clear_env();
    zt_agent_config cfg;
    zt_err err;
    const char *none[] = {NULL};
    ASSERT_OK(parse(&cfg, &err, none));
    ASSERT_EQ_INT(cfg.n_allow_paths, 1);
    ASSERT_STREQ(cfg.allow_paths[0], rp);
    ASSERT_TRUE(cfg.allow_paths_default);
    zt_agent_config_free(&cfg);

    /* flags: repeatable, canonicalised ("//" and "/." gone), a root given twice kept once;
     * they win over the variable */
    char a_odd[320];
    snprintf(a_odd, sizeof(a_odd), "%s/./root_a//", tmpdir);
    setenv("ZT_ALLOW_PATH", "/nonexistent-root", 1);
    char eqb[320];
    snprintf(eqb, sizeof(eqb), "--allow-path=%s", b);
    const char *flags[] = {"--allow-path", a_odd, eqb, "--allow-path", a, NULL};
    ASSERT_OK(parse(&cfg, &err, flags));
    ASSERT_EQ_INT(cfg.n_allow_paths, 2);
    ASSERT_TRUE(realpath(a, rp) != NULL);
    ASSERT_STREQ(cfg.allow_paths[0], rp);
    ASSERT_TRUE(realpath(b, rp) != NULL);
    ASSERT_STREQ(cfg.allow_paths[1], rp);
    ASSERT_TRUE(!cfg.allow_paths_default);
    zt_agent_config_free(&cfg);

    /* the variable: a ':'-separated list (empty parts skipped) */
    clear_env();
    char list[700];
    snprintf(list, sizeof(list), "%s::%s", a, b);
    setenv("ZT_ALLOW_PATH", list, 1);
    ASSERT_OK(parse(&cfg, &err, none));
    ASSERT_EQ_INT(cfg.n_allow_paths, 2);
    zt_agent_config_free(&cfg);

    /* each root must exist and be a directory */
    setenv("ZT_ALLOW_PATH", "/nonexistent-root", 1);
    expect_error(none, ZT_ERR_CONFIG,
                 "ZT_ALLOW_PATH: the allowed path /nonexistent-root cannot be resolved");
    clear_env();
    const char *missing[] = {"--allow-path", "/nonexistent-root", NULL};
    expect_error(missing, ZT_ERR_CONFIG,
                 "--allow-path: the allowed path /nonexistent-root cannot be resolved");
    const char *notdir[] = {"--allow-path", file, NULL};
    expect_error(notdir, ZT_ERR_CONFIG, "is not a directory");
}

static void test_user(void)
{
    zt_agent_config cfg;
    zt_err err;
    const char *none[] = {NULL};
    clear_env();
    setenv("ZT_ALLOW_ROOT", "perhaps", 1);
    expect_error(none, ZT_ERR_CONFIG, "ZT_ALLOW_ROOT: 'perhaps' is not 1 or 0");
    clear_env();
    const char *nouser[] = {"--run-as", "no-such-user-zt", NULL};
    expect_error(nouser, ZT_ERR_CONFIG, "there is no user 'no-such-user-zt'");
    if (geteuid() == 0) {
        /* root without --run-as: refused unless --allow-root (flag or variable) */
        unsetenv("ZT_ALLOW_ROOT");
        expect_error(none, ZT_ERR_CONFIG,
                     "zagent runs as root: give --run-as USER so workers do not run as root");
        const char *allow[] = {"--allow-root", NULL};
        ASSERT_OK(parse(&cfg, &err, allow));
        ASSERT_TRUE(cfg.allow_root && !cfg.drop_privileges);
        zt_agent_config_free(&cfg);
        /* --run-as nobody: workers drop to that user, its groups looked up now */
        const char *nobody[] = {"--run-as", "nobody", NULL};
        ASSERT_OK(parse(&cfg, &err, nobody));
        ASSERT_TRUE(cfg.drop_privileges);
        ASSERT_STREQ(cfg.run_as, "nobody");
        ASSERT_TRUE(cfg.run_as_uid != 0);
        ASSERT_TRUE(cfg.n_run_as_groups >= 1 && cfg.run_as_groups[0] == cfg.run_as_gid);
        ASSERT_TRUE(cfg.run_as_home && cfg.run_as_home[0] == '/');
        zt_agent_config_free(&cfg);
        /* by uid too */
        char uid[32];
        snprintf(uid, sizeof(uid), "%u", 65534u);
        setenv("ZT_RUN_AS", uid, 1);
        zt_status st = parse(&cfg, &err, none);
        if (st == ZT_OK) {
            ASSERT_TRUE(cfg.drop_privileges && cfg.run_as_uid == 65534);
            zt_agent_config_free(&cfg);
        }
        unsetenv("ZT_RUN_AS");
        const char *asroot[] = {"--run-as", "root", NULL};
        expect_error(asroot, ZT_ERR_CONFIG, "--run-as root is root");
    } else {
        /* not root: --run-as may only name ourselves */
        const char *asroot[] = {"--run-as", "root", NULL};
        expect_error(asroot, ZT_ERR_CONFIG, "only root can start workers as another user");
    }
}

static void test_help(void)
{
    clear_env();
    zt_agent_config cfg;
    bool help = false;
    zt_err err = {0};
    char *argv[] = {"zagent", "--slots", "cpu:1", "--help", NULL};
    ASSERT_OK(zt_agent_config_parse(&cfg, 4, argv, &help, &err));
    ASSERT_TRUE(help);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    zt_agent_usage(f);
    fclose(f);
    const char *must[] = {"--coordinator",  "ZT_COORDINATOR",   "--token-file", "ZT_TOKEN",
                          "--slots",        "cuda:auto",        "--work-dir",   "--worker",
                          "--heartbeat-ms", "--advertise-host", "--name",       "--tls-ca",
                          "--allow-path",   "ZT_ALLOW_PATH",    "--run-as",     "--allow-root",
                          "Exit codes"};
    for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++)
        ASSERT_CONTAINS(buf, must[i]);
    free(buf);
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/zt_agent_config_XXXXXX");
    if (!mkdtemp(tmpdir)) ZT_FAIL("mkdtemp failed");
    test_defaults();
    test_env_and_flags();
    test_token_file();
    test_slots();
    test_bad_values();
    test_allow_paths();
    test_user();
    test_help();
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    printf("test_agent_config: ok\n");
    return 0;
}
