/* Tests common/settings.c: defaults, parsing, bounds and the warning a bad value gives; and
 * that docs/env.md and the table agree: every variable of one is in the other, with the same
 * words for what it does and the table's default first in the page's default column. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/settings.h"
#include "kernels/cuda/cuda_plan.h"
#include "tests/test.h"

#ifndef ZT_SOURCE_DIR
#error "ZT_SOURCE_DIR must name the repository root"
#endif

/* What the log said since the last call (warnings go to a temporary file). */
static FILE *log_file;
static char log_text[8192];

static const char *log_since(void)
{
    fflush(log_file);
    long n = ftell(log_file);
    if (n < 0) n = 0;
    if (n >= (long)sizeof(log_text)) n = (long)sizeof(log_text) - 1;
    rewind(log_file);
    size_t got = fread(log_text, 1, (size_t)n, log_file);
    log_text[got] = '\0';
    rewind(log_file);
    if (ftruncate(fileno(log_file), 0) != 0) ZT_FAIL("cannot truncate the log file");
    return log_text;
}

static void test_defaults(void)
{
    unsetenv("ZT_CPU_ATTN_BLOCK");
    unsetenv("ZT_CUDA_GEMM_STAGE");
    unsetenv("ZT_CUDA_ATTN");
    unsetenv("ZT_CUDA_ATTN_DQ");
    unsetenv("ZT_COORDINATOR");
    unsetenv("ZT_TOKEN");
    ASSERT_EQ_INT((int)zt_setting_int(ZT_SET_CPU_ATTN_BLOCK), 64);
    ASSERT_TRUE(zt_setting_bool(ZT_SET_CUDA_GEMM_STAGE));
    ASSERT_TRUE(!zt_setting_bool(ZT_SET_CUDA_GEMM_TUNE));
    ASSERT_TRUE(zt_setting_choice(ZT_SET_CUDA_ATTN) == NULL);
    ASSERT_STREQ(zt_setting_choice(ZT_SET_CUDA_ATTN_DQ), "kernel");
    ASSERT_STREQ(zt_setting_str(ZT_SET_COORDINATOR), "127.0.0.1:50051");
    ASSERT_STREQ(zt_setting_str(ZT_SET_TOKEN), "");
    ASSERT_TRUE(zt_setting_raw(ZT_SET_TOKEN) == NULL);
    ASSERT_TRUE(zt_setting_env(ZT_SET_TOKEN) == NULL);
    ASSERT_NEAR(zt_setting_real(ZT_SET_CUDA_GEMM_STAGE_MIB), 512.0, 0, 0);
    /* the kernels' constant and the table say the same default */
    ASSERT_EQ_INT(atoi(zt_setting_about(ZT_SET_CUDA_GEMM_STAGE_MIB)->def), ZT_CUDA_STAGE_MIB);
    /* set empty: the default, but set all the same for zt_setting_env */
    setenv("ZT_TOKEN", "", 1);
    ASSERT_TRUE(zt_setting_raw(ZT_SET_TOKEN) == NULL);
    ASSERT_STREQ(zt_setting_env(ZT_SET_TOKEN), "");
    setenv("ZT_CPU_ATTN_BLOCK", "", 1);
    ASSERT_EQ_INT((int)zt_setting_int(ZT_SET_CPU_ATTN_BLOCK), 64);
    unsetenv("ZT_TOKEN");
    unsetenv("ZT_CPU_ATTN_BLOCK");
    ASSERT_STREQ(log_since(), "");
}

static void test_parsing(void)
{
    /* each read sees the environment as it is now */
    setenv("ZT_CPU_ATTN_BLOCK", "8", 1);
    ASSERT_EQ_INT((int)zt_setting_int(ZT_SET_CPU_ATTN_BLOCK), 8);
    setenv("ZT_CPU_ATTN_BLOCK", "1048576", 1);
    ASSERT_EQ_INT((int)zt_setting_int(ZT_SET_CPU_ATTN_BLOCK), 1 << 20);
    setenv("ZT_CUDA_GEMM_TUNE", "1", 1);
    ASSERT_TRUE(zt_setting_bool(ZT_SET_CUDA_GEMM_TUNE));
    setenv("ZT_CUDA_GEMM_STAGE", "0", 1);
    ASSERT_TRUE(!zt_setting_bool(ZT_SET_CUDA_GEMM_STAGE));
    setenv("ZT_CUDA_ATTN", "chunked", 1);
    ASSERT_STREQ(zt_setting_choice(ZT_SET_CUDA_ATTN), "chunked");
    setenv("ZT_CUDA_GEMM_STAGE_MIB", "0.5", 1);
    ASSERT_NEAR(zt_setting_real(ZT_SET_CUDA_GEMM_STAGE_MIB), 0.5, 0, 0);
    setenv("ZT_CUDA_GEMM_STAGE_MIB", "65536", 1);
    ASSERT_NEAR(zt_setting_real(ZT_SET_CUDA_GEMM_STAGE_MIB), 65536.0, 0, 0);
    setenv("ZT_COORDINATOR", "10.0.0.1:7000", 1);
    ASSERT_STREQ(zt_setting_str(ZT_SET_COORDINATOR), "10.0.0.1:7000");
    unsetenv("ZT_COORDINATOR");
    ASSERT_STREQ(log_since(), "");
}

/* A bad value gives the default and one warning naming the variable, the value and what is
 * accepted (rows marked ZT_SETTING_ONCE: the first time only). */
static void test_bad_values(void)
{
    const char *log;
    setenv("ZT_CPU_ATTN_BLOCK", "7", 1); /* below the bounds */
    ASSERT_EQ_INT((int)zt_setting_int(ZT_SET_CPU_ATTN_BLOCK), 64);
    ASSERT_CONTAINS(log_since(),
                    "ignoring ZT_CPU_ATTN_BLOCK=7: expected an integer in [8, 1048576]; using 64");
    setenv("ZT_CPU_ATTN_BLOCK", "1048577", 1);
    ASSERT_EQ_INT((int)zt_setting_int(ZT_SET_CPU_ATTN_BLOCK), 64);
    ASSERT_CONTAINS(log_since(), "ignoring ZT_CPU_ATTN_BLOCK=1048577");
    setenv("ZT_CPU_ATTN_BLOCK", "64k", 1);
    ASSERT_EQ_INT((int)zt_setting_int(ZT_SET_CPU_ATTN_BLOCK), 64);
    ASSERT_CONTAINS(log_since(), "ignoring ZT_CPU_ATTN_BLOCK=64k");
    unsetenv("ZT_CPU_ATTN_BLOCK");

    setenv("ZT_CUDA_GEMM_TUNE", "yes", 1);
    ASSERT_TRUE(!zt_setting_bool(ZT_SET_CUDA_GEMM_TUNE));
    ASSERT_CONTAINS(log_since(), "ignoring ZT_CUDA_GEMM_TUNE=yes: expected 0 or 1");
    unsetenv("ZT_CUDA_GEMM_TUNE");

    setenv("ZT_CUDA_ATTN", "flash", 1);
    ASSERT_TRUE(zt_setting_choice(ZT_SET_CUDA_ATTN) == NULL);
    ASSERT_CONTAINS(log_since(),
                    "ignoring ZT_CUDA_ATTN=flash: expected 'fused', 'chunked' or 'cudnn'");
    setenv("ZT_CUDA_ATTN_FWD", "mma2", 1); /* the backward's choice, not the forward's */
    ASSERT_STREQ(zt_setting_choice(ZT_SET_CUDA_ATTN_FWD), "mma");
    ASSERT_CONTAINS(log_since(),
                    "ignoring ZT_CUDA_ATTN_FWD=mma2: expected 'mma', 'mma4' or 'wmma'");
    unsetenv("ZT_CUDA_ATTN");
    unsetenv("ZT_CUDA_ATTN_FWD");

    /* ZT_SETTING_ONCE: the second bad value is quiet */
    setenv("ZT_CUDA_GEMM_STAGE", "2", 1);
    ASSERT_TRUE(zt_setting_bool(ZT_SET_CUDA_GEMM_STAGE));
    ASSERT_CONTAINS(log_since(), "ignoring ZT_CUDA_GEMM_STAGE=2: expected 0 or 1");
    ASSERT_TRUE(zt_setting_bool(ZT_SET_CUDA_GEMM_STAGE));
    ASSERT_STREQ(log_since(), "");
    unsetenv("ZT_CUDA_GEMM_STAGE");
    setenv("ZT_CUDA_GEMM_STAGE_MIB", "0", 1); /* the bound is open below */
    ASSERT_NEAR(zt_setting_real(ZT_SET_CUDA_GEMM_STAGE_MIB), 512.0, 0, 0);
    log = log_since();
    ASSERT_CONTAINS(
        log,
        "ignoring ZT_CUDA_GEMM_STAGE_MIB=0: expected a size in MiB above 0 and up to 65536; using 512");
    unsetenv("ZT_CUDA_GEMM_STAGE_MIB");

    /* a bad ZT_LOG_LEVEL keeps the level and says so */
    setenv("ZT_LOG_LEVEL", "loud", 1);
    zt_log_set_identity("test", -1);
    ASSERT_EQ_INT(zt_log_level_current, ZT_LOG_INFO);
    ASSERT_CONTAINS(log_since(), "ignoring ZT_LOG_LEVEL=loud: expected error, warn, info or debug");
    unsetenv("ZT_LOG_LEVEL");
}

static void test_table(void)
{
    ASSERT_TRUE(zt_setting_about(ZT_SET_COUNT) == NULL);
    ASSERT_EQ_INT(zt_setting_find("ZT_COMM_STALL_MS"), ZT_SET_COMM_STALL_MS);
    ASSERT_EQ_INT(zt_setting_find("ZT_NO_SUCH_THING"), -1);
    for (int i = 0; i < ZT_SET_COUNT; i++) {
        const zt_setting_info *s = zt_setting_about((zt_setting)i);
        ASSERT_TRUE(strncmp(s->name, "ZT_", 3) == 0);
        ASSERT_EQ_INT(zt_setting_find(s->name), i);
        ASSERT_TRUE(s->what && s->what[0]);
        ASSERT_TRUE(s->min <= s->max);
        /* a default parses as its own type */
        if (s->type == ZT_SETTING_CHOICE) {
            ASSERT_TRUE(s->choices != NULL);
            if (s->def[0]) {
                char bars[256];
                snprintf(bars, sizeof(bars), "|%s|", s->choices);
                char want[64];
                snprintf(want, sizeof(want), "|%s|", s->def);
                ASSERT_CONTAINS(bars, want);
            }
        }
        if (s->type == ZT_SETTING_INT && s->def[0]) {
            long long d = atoll(s->def);
            ASSERT_TRUE(d >= s->min && d <= s->max);
        }
        if (s->type == ZT_SETTING_BOOL && s->def[0])
            ASSERT_TRUE(strcmp(s->def, "0") == 0 || strcmp(s->def, "1") == 0);
    }
}

/* The rows of docs/env.md's tables: `NAME` | default | effect. */
static void test_doc(void)
{
    const char *path = ZT_SOURCE_DIR "/docs/env.md";
    FILE *f = fopen(path, "r");
    if (!f) ZT_FAIL("cannot open %s", path);
    static char line[8192];
    bool seen[ZT_SET_COUNT] = {false};
    int rows = 0;
    bool hooks = false; /* under "## Test hooks" */
    /* read by tests only, or set for the workers and read by nobody: named in the page's
     * text, never in a table row */
    static const char *const not_read[] = {"ZT_ATTEMPT_ID", "ZT_RESUME", "ZT_DEVICE_INDEX"};
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "## Test hooks", 13) == 0) hooks = true;
        if (strncmp(line, "| `ZT_", 6) != 0) continue;
        char *name = line + 3;
        char *end = strchr(name, '`');
        ASSERT_TRUE(end != NULL);
        *end = '\0';
        char *def = end + 1;
        ASSERT_TRUE(strncmp(def, " | ", 3) == 0);
        def += 3;
        char *bar = strstr(def, " | ");
        ASSERT_TRUE(bar != NULL);
        *bar = '\0';
        char *what = bar + 3;
        size_t n = strlen(what);
        while (n > 0 && (what[n - 1] == '\n' || what[n - 1] == ' ' || what[n - 1] == '|'))
            what[--n] = '\0';
        int id = zt_setting_find(name);
        if (id < 0) ZT_FAIL("docs/env.md names %s, which common/settings.h lacks", name);
        const zt_setting_info *s = zt_setting_about((zt_setting)id);
        seen[id] = true;
        if (hooks != ((s->use & ZT_SETTING_USE_MASK) == ZT_SETTING_HOOK))
            ZT_FAIL("%s: docs/env.md %s it among the test hooks, common/settings.h %s", name,
                    hooks ? "lists" : "does not list", hooks ? "does not" : "does");
        rows++;
        if (strcmp(s->what, what) != 0)
            ZT_FAIL("%s: docs/env.md says\n  %s\nwhere common/settings.h says\n  %s", name, what,
                    s->what);
        if (s->def[0]) {
            char want[128];
            snprintf(want, sizeof(want), "`%s`", s->def);
            if (strncmp(def, want, strlen(want)) != 0)
                ZT_FAIL("%s: docs/env.md's default '%s' does not start with %s", name, def, want);
        }
        for (size_t k = 0; k < sizeof(not_read) / sizeof(not_read[0]); k++)
            ASSERT_TRUE(strcmp(name, not_read[k]) != 0);
    }
    fclose(f);
    for (int i = 0; i < ZT_SET_COUNT; i++)
        if (!seen[i])
            ZT_FAIL("%s is in common/settings.h but not in docs/env.md",
                    zt_setting_about((zt_setting)i)->name);
    ASSERT_EQ_INT(rows, ZT_SET_COUNT);
}

int main(void)
{
    log_file = tmpfile();
    if (!log_file) ZT_FAIL("tmpfile failed");
    zt_log_set_file(log_file);
    unsetenv("ZT_LOG_LEVEL");
    zt_log_set_identity("test", -1);
    zt_log_set_level(ZT_LOG_INFO);
    test_defaults();
    test_parsing();
    test_bad_values();
    test_table();
    test_doc();
    printf("test_settings: %d settings, all checks passed\n", (int)ZT_SET_COUNT);
    return 0;
}
