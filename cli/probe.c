/* zerotrain: probing a coordinator address for TLS (see probe.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A TLS 1.2 ClientHello: two ECDHE AES-GCM suites, the groups x25519 and P-256, three
 * signature schemes and ALPN "h2", as a gRPC client offers. A TLS server answers it with a
 * ServerHello or an alert; either tells it apart. The random field is zero: nothing is
 * negotiated with it. */
/* clang-format off */
static const unsigned char CLIENT_HELLO[] = {
    0x16, 0x03, 0x01, 0x00, 0x56,                   /* record: handshake, 86 bytes */
    0x01, 0x00, 0x00, 0x52,                         /* ClientHello, 82 bytes */
    0x03, 0x03,                                     /* TLS 1.2 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* random */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* random */
    0x00,                                           /* no resumption id */
    0x00, 0x04, 0xc0, 0x2f, 0xc0, 0x2b,             /* cipher suites */
    0x01, 0x00,                                     /* compression: none */
    0x00, 0x25,                                     /* extensions, 37 bytes */
    0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17, /* supported groups */
    0x00, 0x0b, 0x00, 0x02, 0x01, 0x00,             /* point formats: uncompressed */
    0x00, 0x0d, 0x00, 0x08, 0x00, 0x06, 0x08, 0x04, 0x04, 0x03, 0x04, 0x01, /* sig algs */
    0x00, 0x10, 0x00, 0x05, 0x00, 0x03, 0x02, 'h', '2',                     /* ALPN h2 */
};
/* clang-format on */
_Static_assert(sizeof(CLIENT_HELLO) == 5 + 0x56, "ClientHello record length");

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline; true when they came. */
static bool wait_fd(int fd, short events, long deadline)
{
    for (;;) {
        long left = deadline - now_ms();
        if (left <= 0) return false;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)left);
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
    }
}

/* A non-blocking connect to addr, done by deadline; the socket or -1. */
static int connect_by(const struct sockaddr *addr, socklen_t len, int family, long deadline)
{
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (connect(fd, addr, len) != 0) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (errno != EINPROGRESS || !wait_fd(fd, POLLOUT, deadline) ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* Sends the ClientHello on fd and classifies the first bytes of the answer. */
static zt_probe_kind classify(int fd, long deadline)
{
    size_t off = 0;
    while (off < sizeof(CLIENT_HELLO)) {
        if (!wait_fd(fd, POLLOUT, deadline)) return ZT_PROBE_UNKNOWN;
        ssize_t w = send(fd, CLIENT_HELLO + off, sizeof(CLIENT_HELLO) - off, MSG_NOSIGNAL);
        if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (w <= 0) return ZT_PROBE_UNKNOWN;
        off += (size_t)w;
    }
    unsigned char b[9];
    size_t got = 0;
    while (got < sizeof(b)) {
        if (!wait_fd(fd, POLLIN, deadline)) break;
        ssize_t r = recv(fd, b + got, sizeof(b) - got, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) break;
        got += (size_t)r;
        /* a TLS record: content type handshake (0x16) or alert (0x15), major version 3 */
        if (got >= 2 && (b[0] == 0x16 || b[0] == 0x15) && b[1] == 0x03) return ZT_PROBE_TLS;
    }
    /* an HTTP/2 frame header: 24-bit length, type SETTINGS (4) or GOAWAY (7), stream 0 */
    if (got == sizeof(b) && (b[3] == 0x04 || b[3] == 0x07) && !b[5] && !b[6] && !b[7] && !b[8])
        return ZT_PROBE_PLAIN_H2;
    return ZT_PROBE_UNKNOWN;
}

zt_probe_kind zt_cli_probe(const char *target, int timeout_ms)
{
    if (!target) return ZT_PROBE_UNKNOWN;
    long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 1000);
    if (strncmp(target, "unix:", 5) == 0) {
        struct sockaddr_un un;
        memset(&un, 0, sizeof(un));
        un.sun_family = AF_UNIX;
        const char *path = target + 5;
        if (strlen(path) >= sizeof(un.sun_path)) return ZT_PROBE_UNKNOWN;
        memcpy(un.sun_path, path, strlen(path));
        int fd = connect_by((struct sockaddr *)&un, sizeof(un), AF_UNIX, deadline);
        if (fd < 0) return ZT_PROBE_UNKNOWN;
        zt_probe_kind k = classify(fd, deadline);
        close(fd);
        return k;
    }
    static const char *const schemes[] = {"dns:///", "dns:", "ipv4:", "ipv6:"};
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (strncmp(target, schemes[i], strlen(schemes[i])) == 0) {
            target += strlen(schemes[i]);
            break;
        }
    const char *colon = strrchr(target, ':');
    if (!colon || !colon[1]) return ZT_PROBE_UNKNOWN;
    char host[256];
    const char *hs = target;
    size_t hl = (size_t)(colon - target);
    if (hl >= 2 && hs[0] == '[' && hs[hl - 1] == ']') {
        hs++;
        hl -= 2;
    }
    if (hl >= sizeof(host)) return ZT_PROBE_UNKNOWN;
    memcpy(host, hs, hl);
    host[hl] = '\0';
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(hl ? host : "localhost", colon + 1, &hints, &res) != 0) return ZT_PROBE_UNKNOWN;
    zt_probe_kind k = ZT_PROBE_UNKNOWN;
    for (struct addrinfo *ai = res; ai && k == ZT_PROBE_UNKNOWN; ai = ai->ai_next) {
        int fd = connect_by(ai->ai_addr, ai->ai_addrlen, ai->ai_family, deadline);
        if (fd < 0) continue;
        k = classify(fd, deadline);
        close(fd);
    }
    freeaddrinfo(res);
    return k;
}
