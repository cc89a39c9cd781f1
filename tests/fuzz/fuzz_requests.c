/* Fuzz target: arbitrary bytes decoded as each request type zcoord accepts (the first byte
 * picks the type), then what the server does with a decoded request before any state:
 * the UTF-8 check of every string field and the stateless checks of coordinator/validate.c,
 * zt_job_parse of a submitted job file, the cleaning of log lines (always valid UTF-8 after),
 * the JSON view (never refused), and a re-encode/decode round trip; a first byte of 0xff
 * fuzzes who may call instead (coordinator/auth.c, any token against every access class). Built as a libFuzzer target with clang
 * (tests/fuzz/run_libfuzzer.sh) and with fuzz_main.c as a plain test otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/jobfile.h"
#include "common/utf8.h"
#include "coordinator/auth.h"
#include "coordinator/validate.h"
#include "proto/health.pb-c.h"
#include "proto/pbjson.h"
#include "proto/rpc.h"
#include "proto/zerotrain.pb-c.h"
#include "tests/fuzz/fuzz_requests.h"

typedef bool (*check_fn)(const void *msg, char *why, size_t cap);

static bool check_submit(const void *m, char *why, size_t cap)
{
    const Zt__V1__SubmitJobRequest *q = m;
    if (!zt_check_submit(q, why, cap)) return false;
    /* the server parses the job file next */
    zt_job *job = zt_calloc(1, sizeof(*job));
    if (!job) return false;
    zt_err err = {0};
    if (zt_job_parse_inline(job, q->job_text, q->job_path[0] ? q->job_path : "job",
                     q->job_dir[0] ? q->job_dir : "/", &err) == ZT_OK) {
        char *json = zt_job_to_json(job);
        zt_free(json);
    }
    zt_free(job);
    return true;
}

#define ID_CHECK(fn, type, field)                                                                  \
    static bool fn(const void *m, char *why, size_t cap)                                           \
    {                                                                                              \
        return zt_check_job_id(((const type *)m)->field, why, cap);                                \
    }
ID_CHECK(check_get_job, Zt__V1__GetJobRequest, job_id)
ID_CHECK(check_cancel, Zt__V1__CancelJobRequest, job_id)
ID_CHECK(check_watch, Zt__V1__WatchJobRequest, job_id)
ID_CHECK(check_ckpts, Zt__V1__ListCheckpointsRequest, job_id)

#define WRAP(fn, type, check)                                                                      \
    static bool fn(const void *m, char *why, size_t cap)                                           \
    {                                                                                              \
        return check((const type *)m, why, cap);                                                   \
    }
WRAP(check_list_jobs, Zt__V1__ListJobsRequest, zt_check_list_jobs)
WRAP(check_metrics, Zt__V1__GetMetricsRequest, zt_check_get_metrics)
WRAP(check_logs, Zt__V1__GetLogsRequest, zt_check_get_logs)
WRAP(check_register, Zt__V1__RegisterAgentRequest, zt_check_register)
WRAP(check_heartbeat, Zt__V1__HeartbeatRequest, zt_check_heartbeat)
WRAP(check_report_metrics, Zt__V1__ReportMetricsRequest, zt_check_report_metrics)
WRAP(check_report_ckpt, Zt__V1__ReportCheckpointRequest, zt_check_report_checkpoint)
WRAP(check_report_ckpt_removed, Zt__V1__ReportCheckpointRemovedRequest,
     zt_check_report_checkpoint_removed)
WRAP(check_rdzv, Zt__V1__RendezvousRequest, zt_check_rendezvous)

/* The handler stores each line cut to ZT_MAX_LOG_LINE on a character boundary, with bytes that
 * are not UTF-8 replaced: whatever came, what is stored is valid UTF-8. */
static bool check_report_logs(const void *m, char *why, size_t cap)
{
    const Zt__V1__ReportLogsRequest *q = m;
    if (!zt_check_report_logs(q, why, cap)) return false;
    for (size_t i = 0; i < q->n_entries; i++) {
        char line[ZT_MAX_LOG_LINE + 1];
        const char *t = q->entries[i]->text;
        size_t n = zt_utf8_cut(t, strlen(t), ZT_MAX_LOG_LINE);
        memcpy(line, t, n);
        line[n] = '\0';
        zt_utf8_clean(line, n);
        if (!zt_utf8_valid(line, n, NULL)) {
            fprintf(stderr, "ReportLogs: entries[%zu] is not valid UTF-8 once cleaned\n", i);
            abort();
        }
    }
    return true;
}

static bool check_health(const void *m, char *why, size_t cap)
{
    return zt_check_health(((const Grpc__Health__V1__HealthCheckRequest *)m)->service, why, cap);
}

static bool check_none(const void *m, char *why, size_t cap)
{
    (void)m;
    (void)why;
    (void)cap;
    return true;
}

const zt_fuzz_type zt_fuzz_types[] = {
    {"SubmitJob", &zt__v1__submit_job_request__descriptor, check_submit},
    {"GetJob", &zt__v1__get_job_request__descriptor, check_get_job},
    {"ListJobs", &zt__v1__list_jobs_request__descriptor, check_list_jobs},
    {"CancelJob", &zt__v1__cancel_job_request__descriptor, check_cancel},
    {"WatchJob", &zt__v1__watch_job_request__descriptor, check_watch},
    {"GetMetrics", &zt__v1__get_metrics_request__descriptor, check_metrics},
    {"ListCheckpoints", &zt__v1__list_checkpoints_request__descriptor, check_ckpts},
    {"ListAgents", &zt__v1__list_agents_request__descriptor, check_none},
    {"GetLogs", &zt__v1__get_logs_request__descriptor, check_logs},
    {"Ping", &zt__v1__ping_request__descriptor, check_none},
    {"RegisterAgent", &zt__v1__register_agent_request__descriptor, check_register},
    {"Heartbeat", &zt__v1__heartbeat_request__descriptor, check_heartbeat},
    {"GetAttemptSpec", &zt__v1__get_attempt_spec_request__descriptor, check_none},
    {"ReportMetrics", &zt__v1__report_metrics_request__descriptor, check_report_metrics},
    {"ReportCheckpoint", &zt__v1__report_checkpoint_request__descriptor, check_report_ckpt},
    {"ReportCheckpointRemoved", &zt__v1__report_checkpoint_removed_request__descriptor,
     check_report_ckpt_removed},
    {"ReportLogs", &zt__v1__report_logs_request__descriptor, check_report_logs},
    {"Rendezvous", &zt__v1__rendezvous_request__descriptor, check_rdzv},
    {"Health", &grpc__health__v1__health_check_request__descriptor, check_health},
};
const size_t zt_fuzz_n_types = sizeof(zt_fuzz_types) / sizeof(zt_fuzz_types[0]);

/* True when m or a message inside it carries unknown fields. */
static bool has_unknown(const ProtobufCMessage *m)
{
    if (m->n_unknown_fields) return true;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        const char *base = (const char *)m + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
            ProtobufCMessage *const *arr = *(ProtobufCMessage *const *const *)base;
            for (size_t k = 0; k < n; k++)
                if (has_unknown(arr[k])) return true;
        } else {
            const ProtobufCMessage *sub = *(ProtobufCMessage *const *)base;
            if (sub && has_unknown(sub)) return true;
        }
    }
    return false;
}

/* ---- who may call: coordinator/auth.c's decision for any bearer token ---- */

#define FZ_USER "fuzz-user-token-0123456789"
#define FZ_JOIN "fuzz-join-token-0123456789"

static zt_auth *fz_auth;
static char fz_key[ZT_AUTH_KEY_LEN + 1];

/* data[1]: the access class (and whether to send a token at all), the rest: the token. The
 * decision must follow the rules exactly: each class takes its own credential only. */
static void fuzz_auth(const uint8_t *data, size_t size)
{
    if (!fz_auth) {
        zt_auth_user u = {"admin", FZ_USER};
        zt_err err = {0};
        char sha[65];
        if (zt_auth_create(&fz_auth, &u, 1, FZ_JOIN, &err) != ZT_OK ||
            zt_auth_key_issue(fz_auth, "n1", fz_key, sha, &err) != ZT_OK) {
            fprintf(stderr, "fuzz_auth: %s\n", zt_err_msg(&err));
            abort();
        }
    }
    if (size < 2) return;
    zt_rpc_access access = (zt_rpc_access)(data[1] % 4);
    bool none = data[1] & 0x80;
    /* tokens that are worth reaching: the real ones, selected by a byte, mutated by the rest */
    char tok[256];
    size_t n = size - 2 < sizeof(tok) ? size - 2 : sizeof(tok);
    memcpy(tok, data + 2, n);
    if (n == 1 && tok[0] < 3) {
        const char *real = tok[0] == 0 ? FZ_USER : tok[0] == 1 ? FZ_JOIN : fz_key;
        n = strlen(real);
        memcpy(tok, real, n);
    }
    char who[96] = "", msg[400] = "";
    zt_rpc_code code = zt_auth_authorize(fz_auth, access, none ? NULL : tok, none ? 0 : n, NULL,
                                         who, sizeof(who), msg, sizeof(msg));
    bool is_user = !none && n == strlen(FZ_USER) && memcmp(tok, FZ_USER, n) == 0;
    bool is_join = !none && n == strlen(FZ_JOIN) && memcmp(tok, FZ_JOIN, n) == 0;
    bool is_key = !none && n == strlen(fz_key) && memcmp(tok, fz_key, n) == 0;
    bool want = access == ZT_RPC_ACCESS_OPEN || (access == ZT_RPC_ACCESS_USER && is_user) ||
                (access == ZT_RPC_ACCESS_AGENT_JOIN && is_join) ||
                (access == ZT_RPC_ACCESS_AGENT && is_key);
    if ((code == ZT_RPC_OK) != want) {
        fprintf(stderr, "fuzz_auth: access %d with a %zu-byte token: %s (%s), want %s\n",
                (int)access, n, zt_rpc_code_name(code), msg, want ? "OK" : "refused");
        abort();
    }
    if (code == ZT_RPC_OK && access == ZT_RPC_ACCESS_AGENT && strcmp(who, "agent:n1") != 0) abort();
    if (code == ZT_RPC_OK && access == ZT_RPC_ACCESS_USER && strcmp(who, "user:admin") != 0) abort();
    if (code != ZT_RPC_OK && (code != ZT_RPC_UNAUTHENTICATED && code != ZT_RPC_PERMISSION_DENIED))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] == 0xff) {
        fuzz_auth(data, size);
        return 0;
    }
    const zt_fuzz_type *t = &zt_fuzz_types[data[0] % zt_fuzz_n_types];
    ProtobufCMessage *m = zt_pb_unpack(t->type, data + 1, size - 1);
    if (!m) return 0; /* the server answers INVALID_ARGUMENT */
    char why[512];
    /* every handler refuses strings that are not UTF-8 before its own checks */
    if (zt_check_strings(m, why, sizeof(why))) ((check_fn)t->check)(m, why, sizeof(why));
    /* the JSON view prints anything (bad bytes as '?'): only memory can make it fail */
    json_t *j = zt_pb_to_json(m);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (!s) {
        fprintf(stderr, "%s: a decoded message has no JSON view\n", t->name);
        abort();
    }
    free(s);
    json_decref(j);
    size_t n = 0;
    uint8_t *again = zt_pb_pack(m, &n);
    if (again) {
        /* what decoded must encode into what decodes again; protobuf-c keeps unknown
         * fields verbatim, even malformed ones (field number 0), so only known ones count */
        ProtobufCMessage *m2 = zt_pb_unpack(t->type, again, n);
        if (!m2 && !has_unknown(m)) {
            fprintf(stderr, "%s: a decoded message did not decode again after encoding\n", t->name);
            abort();
        }
        zt_pb_free(m2);
        zt_free(again);
    }
    zt_pb_free(m);
    return 0;
}
