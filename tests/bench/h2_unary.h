/* A small gRPC unary client over HTTP/2 (nghttp2) for load generators: one connection per
 * simulated peer, one call at a time on it, driven by the caller's epoll loop. It speaks the
 * gRPC wire protocol (length-prefixed message, grpc-status trailers, grpc-timeout, a bearer
 * token) at a fraction of the gRPC core client's CPU per call, so a generator that shares a
 * machine with the server under test takes less of it. Not thread-safe: one thread owns a
 * connection and its epoll set. */
#ifndef ZT_TESTS_BENCH_H2_UNARY_H
#define ZT_TESTS_BENCH_H2_UNARY_H

#include <stddef.h>
#include <stdint.h>

typedef struct h2u_conn h2u_conn;

/* status: the call's grpc-status (0 = OK), or -1 when the connection failed or the reply
 * was not a gRPC reply (message says why); body/len: the reply message (status 0 only). */
typedef void (*h2u_done_fn)(void *arg, int status, const char *message, const uint8_t *body,
                            size_t len);

/* Takes fd, a connected TCP socket (closed on failure too), makes it non-blocking and adds it
 * to epfd with data.ptr = the connection; authority ("host:port") names the server in each
 * call. bearer may be NULL. Returns NULL with why in err. */
h2u_conn *h2u_open(int epfd, int fd, const char *authority, const char *bearer, char *err,
                   size_t cap);

/* Starts a call of path with one request message (timeout_ms is sent as grpc-timeout). 0 on
 * success; -1 when a call is in flight or the connection has failed. */
int h2u_call(h2u_conn *c, const char *path, const uint8_t *msg, size_t len, int timeout_ms,
             h2u_done_fn done, void *arg);

/* Handles an epoll event of the connection: reads, runs completions, writes. -1 when the
 * connection has failed (a call in flight completes with status -1 first). */
int h2u_on_event(h2u_conn *c, uint32_t events);

/* Closes the connection; a call in flight completes with status -1. */
void h2u_close(h2u_conn *c);

#endif
