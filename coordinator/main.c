/* zerotrain: zcoord, the coordinator process. Reads its settings (flags over the ZT_*
 * variables of common/settings.h's table; both feed --help), opens the store, serves gRPC and
 * HTTP (dashboard, JSON API, Prometheus metrics), and shuts down cleanly on SIGTERM or SIGINT. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/netutil.h"
#include "common/secretfile.h"
#include "common/settings.h"
#include "coordinator/api.h"
#include "coordinator/auth.h"
#include "coordinator/coord.h"
#include "coordinator/http.h"
#include "coordinator/store.h"
#include "proto/rpc.h"

/* A flag and its row of common/settings.h (variable, type, default, bounds). */
typedef struct setting {
    const char *name; /* flag without "--" */
    zt_setting env;
    const char *help;
} setting;

enum {
    S_DB,
    S_GRPC,
    S_HTTP,
    S_TOKEN_FILE,
    S_USERS_FILE,
    S_AGENT_TOKEN_FILE,
    S_TLS_CERT,
    S_TLS_KEY,
    S_TLS_CLIENT_CA,
    S_HB_INTERVAL,
    S_HB_TIMEOUT,
    S_HANG_TIMEOUT,
    S_BACKOFF,
    S_BACKOFF_MAX,
    S_MAX_MESSAGE,
    S_POLLERS,
    S_METRICS_POINTS,
    S_LOG_LINES,
    S_LOG_STREAMS,
    S_WATCHERS,
    S_WATCHERS_PER_JOB,
    S_RDZV_WAITERS,
    S_RDZV_PER_RANK,
    S_READY_FILE,
    S_LOG_LEVEL,
    S_COUNT
};

static const setting settings[S_COUNT] = {
    [S_DB] = {"db", ZT_SET_DB, "SQLite database file"},
    [S_GRPC] = {"grpc", ZT_SET_GRPC_ADDR, "gRPC listen address (port 0 picks one)"},
    [S_HTTP] = {"http", ZT_SET_HTTP_ADDR,
                "HTTP listen address: dashboard, /api/v1, /metrics, /healthz ('off' = none)"},
    [S_TOKEN_FILE] =
        {"token-file", ZT_SET_TOKEN_FILE,
         "file holding the user token of user 'admin' (or set ZT_TOKEN); no token at all = loopback only"},
    [S_USERS_FILE] =
        {"users-file", ZT_SET_USERS_FILE,
         "file of named user tokens, one 'NAME TOKEN' per line (events name the user)"},
    [S_AGENT_TOKEN_FILE] =
        {"agent-token-file", ZT_SET_AGENT_TOKEN_FILE,
         "file holding the agent join token (or set ZT_AGENT_TOKEN); agents register with it"},
    [S_TLS_CERT] = {"tls-cert", ZT_SET_TLS_CERT, "PEM certificate chain: serve TLS"},
    [S_TLS_CLIENT_CA] =
        {"tls-client-ca", ZT_SET_TLS_CLIENT_CA,
         "PEM roots of agents' client certificates (mutual TLS: a certificate for NAME stands for agent NAME's join token and agent key)"},
    [S_TLS_KEY] = {"tls-key", ZT_SET_TLS_KEY, "PEM private key for --tls-cert"},
    [S_HB_INTERVAL] = {"heartbeat-interval", ZT_SET_HEARTBEAT_INTERVAL,
                       "how often agents heartbeat"},
    [S_HB_TIMEOUT] = {"heartbeat-timeout", ZT_SET_HEARTBEAT_TIMEOUT,
                      "silence after which an agent is LOST and its attempts fail"},
    [S_HANG_TIMEOUT] = {"hang-timeout", ZT_SET_HANG_TIMEOUT,
                        "no step progress after which an attempt fails as hung"},
    [S_BACKOFF] = {"restart-backoff", ZT_SET_RESTART_BACKOFF,
                   "delay before the first restart (doubles each restart)"},
    [S_BACKOFF_MAX] = {"restart-backoff-max", ZT_SET_RESTART_BACKOFF_MAX, "longest restart delay"},
    [S_MAX_MESSAGE] = {"max-message", ZT_SET_MAX_MESSAGE,
                       "largest RPC message accepted (larger: RESOURCE_EXHAUSTED)"},
    [S_POLLERS] = {"pollers", ZT_SET_POLLERS, "threads polling the gRPC completion queue"},
    [S_METRICS_POINTS] = {"metrics-max-points", ZT_SET_METRICS_MAX_POINTS,
                          "stored metric rows per job before downsampling"},
    [S_LOG_LINES] = {"logs-max-lines", ZT_SET_LOGS_MAX_LINES,
                     "stored log lines per job (oldest dropped)"},
    [S_LOG_STREAMS] = {"max-log-streams", ZT_SET_MAX_LOG_STREAMS,
                       "GetLogs streams open at once (zctl logs -f)"},
    [S_WATCHERS] = {"max-watchers", ZT_SET_MAX_WATCHERS,
                    "WatchJob and Health.Watch streams open at once"},
    [S_WATCHERS_PER_JOB] = {"max-watchers-per-job", ZT_SET_MAX_WATCHERS_PER_JOB,
                            "WatchJob streams open at once on one job"},
    [S_RDZV_WAITERS] = {"max-rdzv-waiters", ZT_SET_MAX_RDZV_WAITERS,
                        "Rendezvous calls waiting at once"},
    [S_RDZV_PER_RANK] = {"max-rdzv-waiters-per-rank", ZT_SET_MAX_RDZV_WAITERS_PER_RANK,
                         "Rendezvous calls waiting on one attempt, per rank of it"},
    [S_READY_FILE] = {"ready-file", ZT_SET_READY_FILE,
                      "write {\"grpc\":ADDR,\"http\":ADDR,\"pid\":N} here once serving"},
    [S_LOG_LEVEL] = {"log-level", ZT_SET_LOG_LEVEL, "error|warn|info|debug"},
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: zcoord [options]\n\n"
        "The zerotrain coordinator: stores jobs in SQLite, schedules them on agents and serves the gRPC API\n(zt.v1.Coordinator, zt.v1.AgentControl, grpc.health.v1.Health). SIGTERM or SIGINT stop it cleanly.\n\noptions (each also from its environment variable):\n");
    for (int i = 0; i < S_COUNT; i++) {
        const setting *s = &settings[i];
        const zt_setting_info *v = zt_setting_about(s->env);
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s %s", s->name,
                 v->type == ZT_SETTING_DURATION ? "DUR"
                 : v->type == ZT_SETTING_SIZE   ? "SIZE"
                 : v->type == ZT_SETTING_INT    ? "N"
                                                : "VAL");
        fprintf(f, "  %-32s %s (%s", flag, s->help, v->name);
        if (v->def[0]) fprintf(f, ", default %s", v->def);
        fprintf(f, ")\n");
    }
    fprintf(f,
            "\nDurations take ms, s, m or h (default s); sizes take KiB, MiB, GiB.\n"
            "The tokens may also come from ZT_TOKEN and ZT_AGENT_TOKEN. Users and agents hold different\n"
            "credentials: a user token cannot make agent calls and the agent join token cannot make user\n"
            "calls. Without any token zcoord binds loopback only. See docs/security.md.\n");
}

static bool parse_number(const char *v, double *num, const char **unit)
{
    char *end;
    errno = 0;
    *num = strtod(v, &end);
    if (end == v || errno != 0 || *num < 0) return false;
    *unit = end;
    return true;
}

/* Parses sval into *ival for the numeric types of s (INT, DURATION, SIZE); message in err. */
static bool parse_setting(const zt_setting_info *s, const char *sval, int64_t *ival,
                          const char *origin, zt_err *err)
{
    if (s->type != ZT_SETTING_INT && s->type != ZT_SETTING_DURATION && s->type != ZT_SETTING_SIZE)
        return true;
    double num;
    const char *unit;
    if (!parse_number(sval, &num, &unit)) {
        zt_err_set(err, ZT_ERR_CONFIG, "%s: '%s' is not a %s", origin, sval,
                   s->type == ZT_SETTING_DURATION ? "duration (e.g. 10s, 500ms, 2m)"
                   : s->type == ZT_SETTING_SIZE   ? "size (e.g. 4MiB)"
                                                  : "number");
        return false;
    }
    double mult = 1;
    if (s->type == ZT_SETTING_DURATION) {
        if (!*unit || strcmp(unit, "s") == 0)
            mult = 1000;
        else if (strcmp(unit, "ms") == 0)
            mult = 1;
        else if (strcmp(unit, "m") == 0)
            mult = 60000;
        else if (strcmp(unit, "h") == 0)
            mult = 3600000;
        else
            unit = NULL;
    } else if (s->type == ZT_SETTING_SIZE) {
        if (!*unit || strcmp(unit, "B") == 0)
            mult = 1;
        else if (strcmp(unit, "KiB") == 0 || strcmp(unit, "K") == 0)
            mult = 1024;
        else if (strcmp(unit, "MiB") == 0 || strcmp(unit, "M") == 0)
            mult = 1024 * 1024;
        else if (strcmp(unit, "GiB") == 0 || strcmp(unit, "G") == 0)
            mult = 1024.0 * 1024 * 1024;
        else
            unit = NULL;
    } else if (*unit) {
        unit = NULL;
    }
    if (!unit) {
        zt_err_set(err, ZT_ERR_CONFIG, "%s: '%s' has an unknown unit", origin, sval);
        return false;
    }
    double v = num * mult;
    if (v < (double)s->min || v > (double)s->max) {
        zt_err_set(err, ZT_ERR_CONFIG, "%s: '%s' is out of range [%" PRId64 ", %" PRId64 "]%s",
                   origin, sval, s->min, s->max,
                   s->type == ZT_SETTING_DURATION ? " ms"
                   : s->type == ZT_SETTING_SIZE   ? " bytes"
                                                  : "");
        return false;
    }
    *ival = (int64_t)v;
    return true;
}

static char *read_file(const char *path, size_t max, zt_err *err, const char *what)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        zt_err_set(err, ZT_ERR_IO, "cannot read %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    char *buf = zt_malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (!buf) {
        zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* Listen addresses are host:port or unix:PATH (gRPC cannot bind its ipv4:/ipv6: URI forms). */
static bool is_loopback(const char *addr)
{
    return zt_net_is_loopback(addr, false);
}

static atomic_bool stopping; /* after SIGTERM: /healthz and /readyz answer 503 */

static bool health(void *arg)
{
    (void)arg;
    return !atomic_load(&stopping);
}

static int write_ready(const char *path, const char *grpc, const char *http)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "{\"grpc\": \"%s\", \"http\": \"%s\", \"pid\": %d}\n", grpc, http, (int)getpid());
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        fclose(f);
        return -1;
    }
    fclose(f);
    return rename(tmp, path);
}

int main(int argc, char **argv)
{
    zt_log_set_identity(NULL, -1);
    /* flags first (they win over the environment) */
    const char *flag_vals[S_COUNT] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "zcoord: unexpected argument '%s'; see zcoord --help\n", a);
            return 2;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        int found = -1;
        for (int k = 0; k < S_COUNT; k++)
            if (strlen(settings[k].name) == nlen && strncmp(settings[k].name, name, nlen) == 0)
                found = k;
        if (found < 0) {
            fprintf(stderr, "zcoord: unknown option '%s'; see zcoord --help\n", a);
            return 2;
        }
        if (eq) {
            flag_vals[found] = eq + 1;
        } else if (i + 1 < argc) {
            flag_vals[found] = argv[++i];
        } else {
            fprintf(stderr, "zcoord: %s needs a value\n", a);
            return 2;
        }
    }
    zt_err err = {0};
    char token_origin[128] = "the token file", agent_origin[128] = "the agent token file",
         users_origin[128] = "the users file";
    const char *sval[S_COUNT]; /* each setting's text: flag, else variable, else default */
    int64_t ival[S_COUNT] = {0}; /* the numeric ones parsed */
    for (int k = 0; k < S_COUNT; k++) {
        const setting *s = &settings[k];
        const zt_setting_info *v = zt_setting_about(s->env);
        char origin[96];
        if (flag_vals[k]) {
            sval[k] = flag_vals[k];
            snprintf(origin, sizeof(origin), "--%s", s->name);
        } else if (zt_setting_raw(s->env)) {
            sval[k] = zt_setting_raw(s->env);
            snprintf(origin, sizeof(origin), "%s", v->name);
        } else {
            sval[k] = v->def;
            snprintf(origin, sizeof(origin), "default of --%s", s->name);
        }
        if (k == S_TOKEN_FILE)
            snprintf(token_origin, sizeof(token_origin), "the token file (%s)", origin);
        if (k == S_AGENT_TOKEN_FILE)
            snprintf(agent_origin, sizeof(agent_origin), "the agent token file (%s)", origin);
        if (k == S_USERS_FILE)
            snprintf(users_origin, sizeof(users_origin), "the users file (%s)", origin);
        if (!parse_setting(v, sval[k], &ival[k], origin, &err)) {
            fprintf(stderr, "zcoord: %s\n", zt_err_msg(&err));
            return 2;
        }
    }
    int lvl = zt_log_parse_level(sval[S_LOG_LEVEL]);
    if (lvl < 0) {
        fprintf(stderr, "zcoord: --log-level '%s' is not error, warn, info or debug\n",
                sval[S_LOG_LEVEL]);
        return 2;
    }
    zt_log_set_level((zt_log_level)lvl);

    char *token = NULL, *agent_token = NULL, *cert = NULL, *key = NULL, *client_ca = NULL;
    zt_auth_user *users = NULL;
    int n_users = 0, n_file_users = 0;
    zt_auth *auth = NULL;
    int rc = 1;
    if (sval[S_TOKEN_FILE][0]) {
        token = zt_secret_file_read(sval[S_TOKEN_FILE], token_origin, &err);
        if (!token) goto usage_error;
    } else if (zt_setting_raw(ZT_SET_TOKEN)) {
        token = zt_strdup(zt_setting_raw(ZT_SET_TOKEN));
    }
    if (sval[S_AGENT_TOKEN_FILE][0]) {
        agent_token = zt_secret_file_read(sval[S_AGENT_TOKEN_FILE], agent_origin, &err);
        if (!agent_token) goto usage_error;
    } else if (zt_setting_raw(ZT_SET_AGENT_TOKEN)) {
        agent_token = zt_strdup(zt_setting_raw(ZT_SET_AGENT_TOKEN));
    }
    if (sval[S_USERS_FILE][0] &&
        zt_auth_users_file_read(sval[S_USERS_FILE], users_origin, &users, &n_users,
                                &err) != ZT_OK)
        goto usage_error;
    n_file_users = n_users;
    if (token) {
        zt_auth_user *u = zt_realloc(users, (size_t)(n_users + 1) * sizeof(*u));
        if (!u) {
            zt_err_set(&err, ZT_ERR_NOMEM, "out of memory");
            goto usage_error;
        }
        users = u;
        users[n_users].name = "admin";
        users[n_users].token = token;
        n_users++;
    }
    if (zt_auth_create(&auth, users, n_users, agent_token, &err) != ZT_OK) goto usage_error;
    const char *grpc_addr = sval[S_GRPC];
    const char *http_addr = sval[S_HTTP];
    bool http_on = http_addr[0] && strcmp(http_addr, "off") != 0;
    if (n_users == 0 && (!is_loopback(grpc_addr) || (http_on && !is_loopback(http_addr)))) {
        zt_err_set(
            &err, ZT_ERR_CONFIG,
            "refusing to listen on %s without a token: anyone who can reach it could run jobs; set --token-file (or ZT_TOKEN), or bind 127.0.0.1",
            !is_loopback(grpc_addr) ? grpc_addr : http_addr);
        goto usage_error;
    }
    if (!!sval[S_TLS_CERT][0] != !!sval[S_TLS_KEY][0]) {
        zt_err_set(&err, ZT_ERR_CONFIG,
                   "--tls-cert and --tls-key go together: give both or neither");
        goto usage_error;
    }
    if (sval[S_TLS_CERT][0]) {
        cert = read_file(sval[S_TLS_CERT], 1 << 20, &err, "the TLS certificate");
        key = cert ? read_file(sval[S_TLS_KEY], 1 << 20, &err, "the TLS key") : NULL;
        if (!cert || !key) goto usage_error;
    }
    if (sval[S_TLS_CLIENT_CA][0]) {
        if (!cert) {
            zt_err_set(&err, ZT_ERR_CONFIG,
                       "--tls-client-ca needs TLS: give --tls-cert and --tls-key too");
            goto usage_error;
        }
        if (zt_rpc_read_ca_file(sval[S_TLS_CLIENT_CA], "--tls-client-ca", &client_ca,
                                &err) != ZT_OK)
            goto usage_error;
    }

    /* signals: handled by sigwait in this thread; every thread started later blocks them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    zt_coord_config cc = {.db_path = sval[S_DB],
                          .auth = auth,
                          .heartbeat_interval_ms = ival[S_HB_INTERVAL],
                          .heartbeat_timeout_ms = ival[S_HB_TIMEOUT],
                          .hang_timeout_ms = ival[S_HANG_TIMEOUT],
                          .restart_backoff_ms = ival[S_BACKOFF],
                          .restart_backoff_max_ms = ival[S_BACKOFF_MAX],
                          .metrics_max_points = (int)ival[S_METRICS_POINTS],
                          .logs_max_lines = ival[S_LOG_LINES],
                          .max_log_streams = (int)ival[S_LOG_STREAMS],
                          .max_watchers = (int)ival[S_WATCHERS],
                          .max_watchers_per_job = (int)ival[S_WATCHERS_PER_JOB],
                          .max_rdzv_waiters = (int)ival[S_RDZV_WAITERS],
                          .max_rdzv_waiters_per_rank = (int)ival[S_RDZV_PER_RANK],
                          .version = ZT_VERSION};
    /* a test hook: tests/coordinator/test_zcoord.c (test_watch_at_end) */
    cc.test_commit_delay_ms = (int)zt_setting_int(ZT_SET_TEST_COMMIT_DELAY_MS);
    zt_coord *coord = NULL;
    zt_rpc_server *srv = NULL;
    zt_http *http = NULL;
    /* one coordinator per database, for this process's whole life */
    zt_store_lock *db_lock = NULL;
    if (zt_store_lock_acquire(&db_lock, cc.db_path, &err) != ZT_OK) {
        fprintf(stderr, "zcoord: %s\n", zt_err_msg(&err));
        goto cleanup;
    }
    if (zt_coord_open(&coord, &cc, &err) != ZT_OK) {
        fprintf(stderr, "zcoord: %s\n", zt_err_msg(&err));
        goto cleanup;
    }
    zt_rpc_method methods[32];
    size_t nm = zt_coord_methods(coord, methods, 32);
    zt_rpc_server_config sc = {.addr = grpc_addr,
                               .authorize = zt_auth_authorize,
                               .authorize_user = auth,
                               .tls_cert_pem = cert,
                               .tls_key_pem = key,
                               .tls_client_ca_pem = client_ca,
                               .max_message_bytes = (size_t)ival[S_MAX_MESSAGE],
                               .pollers = (int)ival[S_POLLERS]};
    if (zt_rpc_server_create(&srv, &sc, methods, nm, &err) != ZT_OK) {
        fprintf(stderr, "zcoord: %s\n", zt_err_msg(&err));
        goto cleanup;
    }
    char grpc_bound[300], http_bound[300] = "off";
    snprintf(grpc_bound, sizeof(grpc_bound), "%s", grpc_addr);
    char *colon = strrchr(grpc_bound, ':');
    if (colon && strncmp(grpc_addr, "unix:", 5) != 0)
        snprintf(colon + 1, sizeof(grpc_bound) - (size_t)(colon + 1 - grpc_bound), "%d",
                 zt_rpc_server_port(srv));
    if (http_on) {
        /* the same users sign in to the dashboard (zt_auth_user and zt_http_user agree) */
        zt_http_user *hu = zt_calloc(n_users > 0 ? (size_t)n_users : 1, sizeof(*hu));
        if (!hu) {
            fprintf(stderr, "zcoord: out of memory\n");
            goto cleanup;
        }
        for (int i = 0; i < n_users; i++) {
            hu[i].name = users[i].name;
            hu[i].token = users[i].token;
        }
        zt_http_config hc = {.addr = http_addr,
                             .users = hu,
                             .n_users = n_users,
                             .tls_cert_pem = cert,
                             .tls_key_pem = key,
                             .health = health,
                             .handler = zt_api_handle,
                             .handler_arg = coord};
        zt_status hst = zt_http_start(&http, &hc, &err); /* copies the users */
        zt_free(hu);
        if (hst != ZT_OK) {
            fprintf(stderr, "zcoord: %s\n", zt_err_msg(&err));
            goto cleanup;
        }
        zt_api_attach(coord, http);
        snprintf(http_bound, sizeof(http_bound), "%s", http_addr);
        colon = strrchr(http_bound, ':');
        if (colon)
            snprintf(colon + 1, sizeof(http_bound) - (size_t)(colon + 1 - http_bound), "%d",
                     zt_http_port(http));
    }
    if (zt_store_lock_describe(db_lock, grpc_bound, http_bound, &err) != ZT_OK) {
        fprintf(stderr, "zcoord: %s\n", zt_err_msg(&err));
        goto cleanup;
    }
    if (sval[S_READY_FILE][0] &&
        write_ready(sval[S_READY_FILE], grpc_bound, http_bound) != 0) {
        fprintf(stderr, "zcoord: cannot write the ready file %s: %s\n", sval[S_READY_FILE],
                strerror(errno));
        goto cleanup;
    }
    printf("zcoord %s: serving gRPC on %s%s, HTTP%s on %s, database %s\n", ZT_VERSION,
           grpc_bound, cert ? " (TLS)" : "", cert && http ? "S" : "", http_bound, cc.db_path);
    fflush(stdout);
    ZT_INFO("zcoord", "serving gRPC on %s%s (%s; %s), HTTP on %s", grpc_bound,
            cert ? " with TLS" : "",
            n_users ? "user tokens required" : "no user token: loopback only",
            agent_token ? "agents join with the agent token"
            : n_users   ? "no agent token: agents cannot join"
                        : "agents join without a token",
            http_bound);

    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {
    }
    ZT_INFO("zcoord", "signal %d: shutting down", sig);
    atomic_store(&stopping, true);
    rc = 0;

cleanup:
    if (http) zt_api_attach(coord, NULL);
    zt_http_stop(http);
    zt_coord_stop_serving(coord);
    if (srv) zt_rpc_server_shutdown(srv, 2000);
    zt_coord_drain(coord);
    zt_rpc_server_destroy(srv);
    zt_coord_close(coord);
    zt_store_lock_release(db_lock);
    zt_auth_users_free(users, n_file_users);
    zt_auth_destroy(auth);
    zt_free(token);
    zt_free(agent_token);
    zt_free(cert);
    zt_free(key);
    zt_free(client_ca);
    if (rc == 0) ZT_INFO("zcoord", "stopped");
    return rc;

usage_error:
    fprintf(stderr, "zcoord: %s\n", zt_err_msg(&err));
    zt_auth_users_free(users, n_file_users);
    zt_auth_destroy(auth);
    zt_free(token);
    zt_free(agent_token);
    zt_free(cert);
    zt_free(key);
    zt_free(client_ca);
    return 2;
}
