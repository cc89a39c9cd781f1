/* zerotrain: what zctl's coordinator commands share (cli/cmd_coord.c): connecting with the
 * global options (--coordinator, --token-file, --tls-ca), calling with user-facing error
 * messages (unreachable coordinator, refused token, ...), -o json output, and formatting.
 * Also the `zctl ckpt list` part that cmd_ckpt.c calls. Single-threaded use (zctl). */
#ifndef ZT_CLI_RPC_CLI_H
#define ZT_CLI_RPC_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rpc.h"
#include "proto/zerotrain.pb-c.h"

/* Exit codes of commands that wait for a job (submit --follow, wait). */
#define ZT_CLI_EXIT_COMPLETED 0
#define ZT_CLI_EXIT_FAILED 1
#define ZT_CLI_EXIT_USAGE 2
#define ZT_CLI_EXIT_CANCELED 3
#define ZT_CLI_EXIT_TIMEOUT 124

/* Where zt_cli.token_file and zt_cli.tls_ca came from ("--tls-ca" or "ZT_TLS_CA"), for
 * messages; set by main. */
extern const char *zt_cli_token_file_origin;
extern const char *zt_cli_tls_ca_origin;

/* A client for zt_cli's coordinator; reads the token file (once, into zt_cli.token) and the
 * CA file as zagent does; prints why and returns NULL on failure (e.g. an unreadable
 * --tls-ca file). Free with zt_rpc_client_destroy. */
zt_rpc_client *zt_cli_connect(void);
/* Same; wait_for_ready: calls wait for the coordinator until their deadline (retries). */
zt_rpc_client *zt_cli_connect_opts(bool wait_for_ready);

/* One unary call on the Coordinator service ("SubmitJob"); on failure prints a message that
 * says what went wrong and what to do, and returns the zt_status. *code (optional) gets the
 * gRPC code. */
zt_status zt_cli_call(zt_rpc_client *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *reply_type, void **reply,
                      zt_rpc_code *code);

/* Prints the user-facing message for a failed call or stream to stderr. */
void zt_cli_rpc_error(const char *what, zt_status st, zt_rpc_code code, const zt_err *err);

/* -o json: prints msg as one JSON document (pretty unless compact) on stdout. */
void zt_cli_print_json(const ProtobufCMessage *msg, bool compact);

/* "17" -> 17; prints a usage error and returns 0 when s is not a job id. */
int64_t zt_cli_parse_job_id(const char *s);
/* "10s", "500ms", "2m", "1h", "30" (seconds) -> seconds; false when malformed. */
bool zt_cli_parse_duration(const char *s, double *seconds);

/* Formatting into buf (returned). */
const char *zt_cli_fmt_time(int64_t ms, char *buf, size_t cap);   /* "10:14:13" or date */
const char *zt_cli_fmt_ago(int64_t ms, char *buf, size_t cap);    /* "3m ago" */
const char *zt_cli_fmt_duration(double s, char *buf, size_t cap); /* "1h02m", "42s" */
/* The short name of a job state ("RUNNING"). */
const char *zt_cli_job_state(int state);

/* Follows a job with WatchJob until it ends (reconnecting while the coordinator restarts)
 * and returns ZT_CLI_EXIT_* for its final state. progress: a live progress bar on a
 * terminal, event lines otherwise; quiet: only the final line. timeout_s <= 0: none. */
int zt_cli_follow(zt_rpc_client *c, int64_t job_id, bool progress, bool quiet, double timeout_s);

#endif
