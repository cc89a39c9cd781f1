/* zerotrain: `zctl logs ID` — a job's worker output and the coordinator's events, oldest
 * first; -f follows until the job ends. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/rpc_cli.h"
#include "cli/termtext.h"
#include "common/alloc.h"
#include "common/timeutil.h"

ZT_COMMAND(logs, zt_cmd_logs, "show a job's worker output and events (-f to follow)")

int zt_cmd_logs(int argc, char **argv)
{
    if (zt_cli_wants_help(argc, argv)) {
        printf("usage: zctl logs JOB_ID [-f] [--rank R]... [--tail N] [--no-events] [--raw]\n\n"
               "Prints the job's worker output (stdout and stderr of every rank) and the\n"
               "coordinator's events, oldest first.\n"
               "  -f, --follow   keep printing new lines until the job ends\n"
               "  --rank R       only rank R's output (repeatable; events still show)\n"
               "  --tail N       start with the last N lines\n"
               "  --no-events    worker output only\n"
               "  --raw          print the output's bytes as they are; by default terminal\n"
               "                 controls in it (escape sequences, carriage returns) are\n"
               "                 shown as \\x1b-style text\n"
               "  -o json        one JSON object per line\n");
        return 0;
    }
    Zt__V1__GetLogsRequest q = ZT__V1__GET_LOGS_REQUEST__INIT;
    int32_t ranks[256];
    bool raw = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0) {
            q.follow = true;
        } else if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc) {
            char *end;
            long r = strtol(argv[++i], &end, 10);
            if (*end || r < 0 || q.n_ranks >= 256) {
                zt_cli_error("--rank takes a rank number (0, 1, ...), not '%s'", argv[i]);
                return ZT_CLI_EXIT_USAGE;
            }
            ranks[q.n_ranks++] = (int32_t)r;
        } else if (strcmp(argv[i], "--tail") == 0 && i + 1 < argc) {
            q.tail = atoi(argv[++i]);
            if (q.tail <= 0) {
                zt_cli_error("--tail takes a positive number of lines, not '%s'", argv[i]);
                return ZT_CLI_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--no-events") == 0) {
            q.no_events = true;
        } else if (strcmp(argv[i], "--raw") == 0) {
            raw = true;
        } else if (!q.job_id && argv[i][0] != '-') {
            if (!(q.job_id = zt_cli_parse_job_id(argv[i]))) return ZT_CLI_EXIT_USAGE;
        } else {
            zt_cli_error("logs: unexpected argument '%s'; see 'zctl logs --help'", argv[i]);
            return ZT_CLI_EXIT_USAGE;
        }
    }
    if (!q.job_id) {
        zt_cli_error("usage: zctl logs JOB_ID [-f] [--rank R]");
        return ZT_CLI_EXIT_USAGE;
    }
    q.ranks = ranks;
    zt_rpc_client *c = zt_cli_connect();
    if (!c) return 1;
    int rc = 1;
    double unavailable_since = 0;
    zt_rpc_client *patient = NULL; /* a wait-for-ready client for reconnecting */
    for (;;) {
        zt_rpc_stream *s = NULL;
        zt_err err = {0};
        zt_rpc_code code = ZT_RPC_OK;
        if (unavailable_since && !patient) patient = zt_cli_connect_opts(true);
        zt_status st = zt_rpc_stream_open(patient ? patient : c, "/zt.v1.Coordinator/GetLogs",
                                          &q.base, 0, &s, &err);
        if (st != ZT_OK) {
            zt_cli_rpc_error("logs", st, ZT_RPC_INTERNAL, &err);
            break;
        }
        bool got = false, final = false;
        for (;;) {
            Zt__V1__LogBatch *b = NULL;
            st = zt_rpc_stream_next(s, &zt__v1__log_batch__descriptor, (void **)&b, &code, &err);
            if (st != ZT_OK || !b) break;
            got = true;
            for (size_t i = 0; i < b->n_entries; i++) {
                const Zt__V1__LogEntry *e = b->entries[i];
                if (e->id > q.after_id) q.after_id = e->id;
                if (zt_cli.json) {
                    zt_cli_print_json(&e->base, true);
                    continue;
                }
                char t[32];
                zt_cli_fmt_time(e->time_ms, t, sizeof(t));
                if (e->source == ZT__V1__LOG_SOURCE__LOG_SOURCE_EVENT)
                    printf("%s [coordinator] ", t);
                else
                    printf("%s [rank %d%s] ", t, e->rank,
                           e->source == ZT__V1__LOG_SOURCE__LOG_SOURCE_STDERR ? " err" : "");
                /* workers write what they like: nothing of it may steer the terminal */
                if (raw)
                    fputs(e->text, stdout);
                else
                    zt_term_puts(stdout, e->text);
                putchar('\n');
            }
            fflush(stdout);
            final = b->final;
            zt_pb_free(b);
        }
        zt_rpc_stream_close(s);
        if (st == ZT_OK) {
            rc = 0;
            (void) final;
            break;
        }
        if (q.follow && (got || unavailable_since) &&
            (code == ZT_RPC_UNAVAILABLE || code == ZT_RPC_RESOURCE_EXHAUSTED)) {
            double now = zt_now_s();
            if (!unavailable_since) {
                unavailable_since = now;
                fprintf(stderr, "zctl: lost the coordinator (%s); reconnecting...\n",
                        zt_err_msg(&err));
            }
            if (now - unavailable_since < 60) {
                q.tail = 0;
                zt_sleep_ms(200);
                continue;
            }
        }
        zt_cli_rpc_error("logs", st, code, &err);
        break;
    }
    zt_rpc_client_destroy(patient);
    zt_rpc_client_destroy(c);
    return rc;
}
