/* zerotrain: coordinator state names and small helpers (see model.h). */
#include "coordinator/model.h"

#include <stdio.h>
#include <string.h>

static const char *const job_names[] = {"?",         "QUEUED", "SCHEDULED", "RUNNING",
                                        "COMPLETED", "FAILED", "CANCELED"};
static const char *const attempt_names[] = {"?",         "STARTING", "RUNNING",
                                            "SUCCEEDED", "FAILED",   "CANCELED"};
static const char *const agent_names[] = {"?", "ALIVE", "LOST"};
static const char *const ckpt_names[] = {"?", "PARTIAL", "COMMITTED", "DELETED", "BAD"};

#define NAME_OF(tbl, v) ((int)(v) > 0 && (size_t)(v) < sizeof(tbl) / sizeof(tbl[0]) ? tbl[v] : "?")

static int parse_in(const char *const *tbl, size_t n, const char *name)
{
    if (!name) return 0;
    for (size_t i = 1; i < n; i++)
        if (strcmp(tbl[i], name) == 0) return (int)i;
    return 0;
}

const char *zt_job_state_name(zt_job_state s)
{
    return NAME_OF(job_names, s);
}
const char *zt_attempt_state_name(zt_attempt_state s)
{
    return NAME_OF(attempt_names, s);
}
const char *zt_agent_state_name(zt_agent_state s)
{
    return NAME_OF(agent_names, s);
}
const char *zt_ckpt_state_name(zt_ckpt_state s)
{
    return NAME_OF(ckpt_names, s);
}
int zt_job_state_parse(const char *name)
{
    return parse_in(job_names, sizeof(job_names) / sizeof(job_names[0]), name);
}
int zt_attempt_state_parse(const char *name)
{
    return parse_in(attempt_names, sizeof(attempt_names) / sizeof(attempt_names[0]), name);
}
int zt_agent_state_parse(const char *name)
{
    return parse_in(agent_names, sizeof(agent_names) / sizeof(agent_names[0]), name);
}
int zt_ckpt_state_parse(const char *name)
{
    return parse_in(ckpt_names, sizeof(ckpt_names) / sizeof(ckpt_names[0]), name);
}

bool zt_job_state_terminal(zt_job_state s)
{
    return s == ZT_JOB_COMPLETED || s == ZT_JOB_FAILED || s == ZT_JOB_CANCELED;
}

bool zt_attempt_state_terminal(zt_attempt_state s)
{
    return s == ZT_ATTEMPT_SUCCEEDED || s == ZT_ATTEMPT_FAILED || s == ZT_ATTEMPT_CANCELED;
}

void zt_hash_hex(const void *data, size_t len, char out[17])
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}
