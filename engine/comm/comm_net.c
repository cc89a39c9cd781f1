/* zerotrain: the TCP bootstrap under both collective backends: socket helpers with deadlines
 * (never SIGPIPE, never an endless block) and the rendezvous through which rank 0 hands out
 * the peer table and a blob such as the NCCL unique id (see comm_int.h). */
#define _POSIX_C_SOURCE 200809L
#include "comm_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../common/alloc.h"
#include "../../common/log.h"
#include "../../common/timeutil.h"

#define RDV_MAGIC 0x5a545256u /* "ZTRV" */
#define RDV_VERSION 1u
#define RDV_HELLO_LEN 28
#define RDV_REPLY_LEN 16
#define RDV_TABLE_ENTRY 68 /* 64-byte host + u32 port */
#define RDV_MAX_SESSION 4096
#define RDV_MAX_BLOB 65536
#define RDV_TABLE 1u
#define RDV_REJECT 2u

/* ---- small socket helpers ---- */

int zt_comm_net_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -1;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl);
}

void zt_comm_net_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void set_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFD);
    if (fl >= 0) (void)fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
}

static int ms_until(uint64_t deadline_ns)
{
    uint64_t now = zt_now_ns();
    if (now >= deadline_ns) return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > 1000000000 ? 1000000000 : (int)ms;
}

/* Numeric text of a socket address; IPv4-mapped IPv6 addresses are given as plain IPv4 so
 * that IPv4-only peers can use them. */
static void numeric_host(const struct sockaddr *sa, socklen_t len, char *out, size_t outlen)
{
    char h[256];
    if (getnameinfo(sa, len, h, sizeof(h), NULL, 0, NI_NUMERICHOST) != 0) {
        snprintf(out, outlen, "?");
        return;
    }
    const char *p = h;
    if (strncmp(p, "::ffff:", 7) == 0 && strchr(p + 7, '.')) p += 7;
    snprintf(out, outlen, "%s", p);
}

static void peer_host(int fd, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) {
        snprintf(out, outlen, "?");
        return;
    }
    numeric_host((struct sockaddr *)&ss, len, out, outlen);
}

/* Waits until fd is ready for events (or a signal or error wakes poll): 0, or -1 once the
 * deadline has passed. */
static int wait_ready(int fd, short events, uint64_t deadline_ns)
{
    int ms = ms_until(deadline_ns);
    if (ms == 0) return -1;
    struct pollfd pfd = {.fd = fd, .events = events};
    (void)poll(&pfd, 1, ms);
    return 0;
}

int zt_comm_net_write_all(int fd, const void *buf, size_t len, uint64_t deadline_ns,
                          const char *who, zt_err *err)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_ready(fd, POLLOUT, deadline_ns) == 0) continue;
            zt_err_set(err, ZT_ERR_TIMEOUT, "%s did not accept data before the deadline", who);
            return -1;
        }
        zt_err_set(err, ZT_ERR_PEER, "%s closed the connection (%s)", who,
                   n < 0 ? strerror(errno) : "send returned 0");
        return -1;
    }
    return 0;
}

int zt_comm_net_read_all(int fd, void *buf, size_t len, uint64_t deadline_ns, const char *who,
                         zt_err *err)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            zt_err_set(err, ZT_ERR_PEER, "%s closed the connection", who);
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_ready(fd, POLLIN, deadline_ns) == 0) continue;
            zt_err_set(err, ZT_ERR_TIMEOUT, "%s sent nothing before the deadline", who);
            return -1;
        }
        zt_err_set(err, ZT_ERR_PEER, "%s closed the connection (%s)", who, strerror(errno));
        return -1;
    }
    return 0;
}

/* One non-blocking connect attempt to every address of host:port, each bounded by the
 * deadline and one second. Returns the fd or -1 with *why describing the last failure. */
static int connect_once(const char *host, uint16_t port, uint64_t deadline_ns, char *why,
                        size_t whylen)
{
    char ports[8];
    snprintf(ports, sizeof(ports), "%u", (unsigned)port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int gai = getaddrinfo(host, ports, &hints, &res);
    if (gai != 0) {
        snprintf(why, whylen, "cannot resolve '%s': %s", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            snprintf(why, whylen, "socket: %s", strerror(errno));
            continue;
        }
        set_cloexec(fd);
        zt_comm_net_set_nonblock(fd, 1);
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            uint64_t lim = zt_now_ns() + 1000000000ull;
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            rc = poll(&pfd, 1, ms_until(lim < deadline_ns ? lim : deadline_ns));
            if (rc == 1) {
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                rc = soerr ? -1 : 0;
                errno = soerr;
            } else {
                rc = -1;
                errno = ETIMEDOUT;
            }
        }
        if (rc == 0) break;
        snprintf(why, whylen, "%s", strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

int zt_comm_net_connect_retry(const char *host, uint16_t port, uint64_t deadline_ns,
                              const char *who, zt_err *err)
{
    uint64_t start = zt_now_ns();
    char why[256] = "no attempt made";
    for (;;) {
        int fd = connect_once(host, port, deadline_ns, why, sizeof(why));
        if (fd >= 0) {
            zt_comm_net_nodelay(fd);
            return fd;
        }
        uint64_t now = zt_now_ns();
        if (now >= deadline_ns) {
            zt_err_set(err, ZT_ERR_TIMEOUT,
                       "could not connect to %s at %s:%u within %llu ms (last error: %s)", who,
                       host, (unsigned)port, (unsigned long long)((zt_now_ns() - start) / 1000000),
                       why);
            return -1;
        }
        uint64_t left_ms = (deadline_ns - now) / 1000000ull;
        zt_sleep_ms(left_ms < 50 ? (int64_t)left_ms + 1 : 50);
    }
}

int zt_comm_net_accept(int lfd, uint64_t deadline_ns, const char *who, zt_err *err)
{
    for (;;) {
        int ms = ms_until(deadline_ns);
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        int rc = ms > 0 ? poll(&pfd, 1, ms) : 0;
        if (rc < 0 && errno == EINTR) continue;
        if (rc == 0) {
            zt_err_set(err, ZT_ERR_TIMEOUT, "%s did not connect before the deadline", who);
            return -1;
        }
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED)
                continue;
            zt_err_set(err, ZT_ERR_IO, "accept while waiting for %s: %s", who, strerror(errno));
            return -1;
        }
        set_cloexec(fd);
        zt_comm_net_set_nonblock(fd, 1);
        zt_comm_net_nodelay(fd);
        return fd;
    }
}

int zt_comm_net_listen_any(uint16_t *port, zt_err *err)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd >= 0) {
        int zero = 0;
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof(a6));
        a6.sin6_family = AF_INET6;
        a6.sin6_addr = in6addr_any;
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0 ||
            bind(fd, (struct sockaddr *)&a6, sizeof(a6)) != 0) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) { /* no IPv6 here: plain IPv4 */
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
            zt_err_set(err, ZT_ERR_IO, "cannot create a listening socket: %s", strerror(errno));
            return -1;
        }
        struct sockaddr_in a4;
        memset(&a4, 0, sizeof(a4));
        a4.sin_family = AF_INET;
        a4.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(fd, (struct sockaddr *)&a4, sizeof(a4)) != 0) {
            zt_err_set(err, ZT_ERR_IO, "cannot bind a listening socket: %s", strerror(errno));
            close(fd);
            return -1;
        }
    }
    set_cloexec(fd);
    if (listen(fd, 64) != 0) {
        zt_err_set(err, ZT_ERR_IO, "listen: %s", strerror(errno));
        close(fd);
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                     : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    zt_comm_net_set_nonblock(fd, 1);
    return fd;
}

/* ---- rendezvous ---- */

/* Splits "tcp://host:port", "host:port" or "[v6]:port". */
static zt_status parse_addr(const char *s, char *host, size_t hlen, uint16_t *port, zt_err *err)
{
    const char *p = s;
    const char *scheme = strstr(s, "://");
    if (scheme) {
        if (strncmp(s, "tcp://", 6) != 0)
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "rendezvous address '%s': only tcp:// is supported (write tcp://host:port)", s);
        p = s + 6;
    }
    const char *colon;
    const char *h = p;
    size_t n;
    if (*p == '[') {
        const char *close_br = strchr(p, ']');
        if (!close_br || close_br[1] != ':')
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "rendezvous address '%s': an IPv6 address needs the form tcp://[addr]:port", s);
        h = p + 1;
        n = (size_t)(close_br - h);
        colon = close_br + 1;
    } else {
        colon = strrchr(p, ':');
        if (!colon || strchr(p, ':') != colon)
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "rendezvous address '%s': expected tcp://host:port (IPv6 addresses in brackets)",
                s);
        n = (size_t)(colon - p);
    }
    if (n == 0 || n >= hlen)
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "rendezvous address '%s': the host part is empty or too long", s);
    memcpy(host, h, n);
    host[n] = '\0';
    char *end = NULL;
    errno = 0;
    long v = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end != '\0' || v < 1 || v > 65535)
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "rendezvous address '%s': the port must be a number from 1 to 65535", s);
    *port = (uint16_t)v;
    return ZT_OK;
}

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

/* Rank 0's rendezvous listener. A loopback host is bound as given; any other host is bound
 * on the wildcard address of its family, so that a host name resolving to a local alias
 * (Debian's 127.0.1.1) still accepts remote ranks. Retries "address in use" for up to 10 s
 * (a previous attempt may still hold the port). */
static int listen_rendezvous(const char *host, uint16_t port, uint64_t deadline_ns,
                             const char *addr, zt_err *err)
{
    char ports[8];
    snprintf(ports, sizeof(ports), "%u", (unsigned)port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    int gai = getaddrinfo(host, ports, &hints, &res);
    if (gai != 0) {
        zt_err_set(
            err, ZT_ERR_CONFIG,
            "rendezvous %s: rank 0 cannot resolve '%s' (%s); use a host name or address of rank 0's machine",
            addr, host, gai_strerror(gai));
        return -1;
    }
    char why[256] = "no usable address";
    uint64_t bind_deadline = zt_now_ns() + 10000000000ull;
    if (bind_deadline > deadline_ns) bind_deadline = deadline_ns;
    for (;;) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            struct sockaddr_storage ss;
            memset(&ss, 0, sizeof(ss));
            memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
            if (!is_loopback(ai->ai_addr)) {
                if (ai->ai_family == AF_INET)
                    ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
                else if (ai->ai_family == AF_INET6)
                    ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
            }
            int fd = socket(ai->ai_family, SOCK_STREAM, 0);
            if (fd < 0) {
                snprintf(why, sizeof(why), "socket: %s", strerror(errno));
                continue;
            }
            set_cloexec(fd);
            int one = 1;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            if (ai->ai_family == AF_INET6) {
                int zero = 0;
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
            }
            if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) {
                zt_comm_net_set_nonblock(fd, 1);
                freeaddrinfo(res);
                return fd;
            }
            snprintf(why, sizeof(why), "%s", strerror(errno));
            close(fd);
        }
        /* a port still held by a previous attempt frees up within seconds; do not spend the
         * whole rendezvous timeout on a port another program owns */
        if (zt_now_ns() + 100000000ull >= bind_deadline) break;
        zt_sleep_ms(100);
    }
    freeaddrinfo(res);
    zt_err_set(
        err, ZT_ERR_IO,
        "rendezvous %s: rank 0 cannot listen there: %s (another process may hold the port; pick another port in ZT_RENDEZVOUS)",
        addr, why);
    return -1;
}

typedef struct hello {
    uint32_t magic, version, rank, world, port, blob_len;
    char session[RDV_MAX_SESSION + 1];
} hello;

static int send_reply(int fd, uint32_t type, zt_status st, const void *body, size_t len,
                      uint64_t deadline_ns, const char *who, zt_err *err)
{
    unsigned char h[RDV_REPLY_LEN];
    zt_comm_put_u32(h, RDV_MAGIC);
    zt_comm_put_u32(h + 4, type);
    zt_comm_put_u32(h + 8, (uint32_t)st);
    zt_comm_put_u32(h + 12, (uint32_t)len);
    if (zt_comm_net_write_all(fd, h, sizeof(h), deadline_ns, who, err) != 0) return -1;
    return zt_comm_net_write_all(fd, body, len, deadline_ns, who, err);
}

/* Refuses a joining rank: it reports `msg`; rank 0 logs it and keeps waiting. */
static void refuse(int fd, zt_status st, const char *msg, char *last, size_t lastlen)
{
    zt_err e;
    snprintf(last, lastlen, "%s", msg);
    ZT_WARN("comm", "rendezvous: refused a rank: %s", msg);
    (void)send_reply(fd, RDV_REJECT, st, msg, strlen(msg), zt_now_ns() + 1000000000ull,
                     "the refused rank", &e);
}

static zt_status rank0_serve(const zt_comm_opts *opts, const char *session, const char *addr,
                             const char *host, uint16_t port, uint64_t deadline_ns, int timeout_ms,
                             uint16_t listen_port, const void *blob, size_t blob_len,
                             zt_comm_peer_addr *table, zt_err *err)
{
    int world = opts->world_size;
    zt_status st = ZT_OK;
    int lfd = listen_rendezvous(host, port, deadline_ns, addr, err);
    if (lfd < 0) return err ? err->status : ZT_ERR_IO;
    int *fds = zt_calloc((size_t)world, sizeof(int));
    zt_comm_peer_addr *tab = zt_calloc((size_t)world, sizeof(*tab));
    unsigned char *body = NULL;
    hello *hl = zt_calloc(1, sizeof(*hl));
    if (!fds || !tab || !hl) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "rendezvous: out of memory");
        goto free_all;
    }
    for (int i = 0; i < world; i++)
        fds[i] = -1;
    tab[0].port = listen_port;
    int joined = 0;
    char last_refusal[512] = "";
    while (joined < world - 1) {
        zt_err e;
        int fd = zt_comm_net_accept(lfd, deadline_ns, "a rank", &e);
        if (fd < 0) {
            if (e.status != ZT_ERR_TIMEOUT) {
                st = zt_err_set(err, e.status, "rendezvous %s: %s", addr, e.msg);
                goto free_all;
            }
            char missing[256] = "";
            size_t used = 0;
            for (int r = 1; r < world && used + 12 < sizeof(missing); r++)
                if (fds[r] < 0)
                    used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d",
                                             used ? ", " : "", r);
            st = zt_err_set(
                err, ZT_ERR_TIMEOUT,
                "rendezvous %s: only %d of %d ranks joined within %d ms; missing rank(s) %s%s%s; start them with ZT_RENDEZVOUS=%s, or raise the timeout (train.comm_timeout_ms in the job file, or ZT_COMM_TIMEOUT_MS)",
                addr, joined + 1, world, timeout_ms, missing,
                last_refusal[0] ? "; last refusal: " : "", last_refusal, addr);
            goto free_all;
        }
        char who[96];
        char phost[64];
        peer_host(fd, phost, sizeof(phost));
        snprintf(who, sizeof(who), "a joining rank at %s", phost);
        uint64_t conn_deadline = zt_now_ns() + 5000000000ull;
        if (conn_deadline > deadline_ns) conn_deadline = deadline_ns;
        unsigned char h[RDV_HELLO_LEN];
        if (zt_comm_net_read_all(fd, h, sizeof(h), conn_deadline, who, &e) != 0) {
            ZT_WARN("comm", "rendezvous %s: dropped a connection: %s", addr, e.msg);
            close(fd);
            continue;
        }
        hl->magic = zt_comm_get_u32(h);
        hl->version = zt_comm_get_u32(h + 4);
        hl->rank = zt_comm_get_u32(h + 8);
        hl->world = zt_comm_get_u32(h + 12);
        hl->port = zt_comm_get_u32(h + 16);
        hl->blob_len = zt_comm_get_u32(h + 20);
        uint32_t slen = zt_comm_get_u32(h + 24);
        if (hl->magic != RDV_MAGIC) {
            ZT_WARN("comm", "rendezvous %s: %s is not a zerotrain rank (bad greeting); ignored",
                    addr, phost);
            close(fd);
            continue;
        }
        char msg[900];
        if (hl->version != RDV_VERSION) {
            snprintf(
                msg, sizeof(msg),
                "rendezvous protocol version %u does not match rank 0's %u; run the same zerotrain build on every rank",
                hl->version, RDV_VERSION);
            refuse(fd, ZT_ERR_CONFIG, msg, last_refusal, sizeof(last_refusal));
            close(fd);
            continue;
        }
        if (slen > RDV_MAX_SESSION ||
            zt_comm_net_read_all(fd, hl->session, slen, conn_deadline, who, &e) != 0) {
            ZT_WARN("comm", "rendezvous %s: dropped %s: bad session field", addr, phost);
            close(fd);
            continue;
        }
        hl->session[slen] = '\0';
        int r = (int)hl->rank;
        if ((int)hl->world != world) {
            snprintf(
                msg, sizeof(msg),
                "rank %u from %s says the world has %u ranks but rank 0 has %d; give every rank the same ZT_WORLD_SIZE",
                hl->rank, phost, hl->world, world);
            refuse(fd, ZT_ERR_CONFIG, msg, last_refusal, sizeof(last_refusal));
        } else if (r < 1 || r >= world) {
            snprintf(
                msg, sizeof(msg),
                "rank %u from %s is not a valid joining rank for a world of %d (1..%d); check ZT_RANK",
                hl->rank, phost, world, world - 1);
            refuse(fd, ZT_ERR_CONFIG, msg, last_refusal, sizeof(last_refusal));
        } else if (strcmp(hl->session, session) != 0) {
            snprintf(
                msg, sizeof(msg),
                "rank %d from %s presents session '%.200s' but rank 0 runs session '%.200s' (a rank of another run attempt?); start every rank of the run with the same session",
                r, phost, hl->session, session);
            refuse(fd, ZT_ERR_AUTH, msg, last_refusal, sizeof(last_refusal));
        } else if (hl->blob_len != blob_len) {
            snprintf(
                msg, sizeof(msg),
                "rank %d from %s expects a %u-byte bootstrap blob but rank 0 sends %zu bytes (are the ranks using different collective backends?)",
                r, phost, hl->blob_len, blob_len);
            refuse(fd, ZT_ERR_CONFIG, msg, last_refusal, sizeof(last_refusal));
        } else if (fds[r] >= 0) {
            snprintf(msg, sizeof(msg),
                     "rank %d from %s joined twice (first from %s); each ZT_RANK must be used once",
                     r, phost, tab[r].host);
            refuse(fd, ZT_ERR_CONFIG, msg, last_refusal, sizeof(last_refusal));
        } else {
            fds[r] = fd;
            snprintf(tab[r].host, sizeof(tab[r].host), "%s", phost);
            tab[r].port = (uint16_t)hl->port;
            joined++;
            ZT_DEBUG("comm", "rendezvous: rank %d joined from %s (%d of %d)", r, phost, joined + 1,
                     world);
            continue;
        }
        close(fd);
    }

    size_t body_len = (size_t)world * RDV_TABLE_ENTRY + blob_len;
    body = zt_calloc(1, body_len);
    if (!body) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "rendezvous: out of memory");
        goto free_all;
    }
    for (int r = 0; r < world; r++) {
        memcpy(body + (size_t)r * RDV_TABLE_ENTRY, tab[r].host, sizeof(tab[r].host));
        zt_comm_put_u32(body + (size_t)r * RDV_TABLE_ENTRY + 64, tab[r].port);
    }
    if (blob_len) memcpy(body + (size_t)world * RDV_TABLE_ENTRY, blob, blob_len);
    for (int r = 1; r < world; r++) {
        char who[64];
        zt_err e;
        snprintf(who, sizeof(who), "rank %d", r);
        if (send_reply(fds[r], RDV_TABLE, ZT_OK, body, body_len, deadline_ns, who, &e) != 0) {
            st = zt_err_set(err, ZT_ERR_PEER,
                            "rendezvous %s: could not send the peer table to rank %d: %s", addr, r,
                            e.msg);
            goto free_all;
        }
    }
    if (table) memcpy(table, tab, (size_t)world * sizeof(*tab));

free_all:
    if (fds)
        for (int r = 0; r < world; r++)
            if (fds[r] >= 0) close(fds[r]);
    zt_free(hl);
    zt_free(body);
    zt_free(tab);
    zt_free(fds);
    close(lfd);
    return st;
}

static zt_status peer_join(const zt_comm_opts *opts, const char *session, const char *addr,
                           const char *host, uint16_t port, uint64_t deadline_ns, int timeout_ms,
                           uint16_t listen_port, void *blob, size_t blob_len,
                           zt_comm_peer_addr *table, char *rank0_host, size_t host_len, zt_err *err)
{
    int world = opts->world_size;
    zt_status st = ZT_OK;
    zt_err e;
    char who[600];
    snprintf(who, sizeof(who), "rank 0 (rendezvous %s)", addr);
    int fd = zt_comm_net_connect_retry(host, port, deadline_ns, who, &e);
    if (fd < 0)
        return zt_err_set(
            err, e.status,
            "rendezvous: rank %d %s; is rank 0 running and listening there? (ZT_RENDEZVOUS)",
            opts->rank, e.msg);
    size_t slen = strlen(session);
    unsigned char *hbuf = NULL, *body = NULL;
    if (slen > RDV_MAX_SESSION) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "rendezvous: the session string is longer than %d bytes", RDV_MAX_SESSION);
        goto close_fd;
    }
    hbuf = zt_malloc(RDV_HELLO_LEN + slen);
    if (!hbuf) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "rendezvous: out of memory");
        goto close_fd;
    }
    zt_comm_put_u32(hbuf, RDV_MAGIC);
    zt_comm_put_u32(hbuf + 4, RDV_VERSION);
    zt_comm_put_u32(hbuf + 8, (uint32_t)opts->rank);
    zt_comm_put_u32(hbuf + 12, (uint32_t)world);
    zt_comm_put_u32(hbuf + 16, listen_port);
    zt_comm_put_u32(hbuf + 20, (uint32_t)blob_len);
    zt_comm_put_u32(hbuf + 24, (uint32_t)slen);
    memcpy(hbuf + RDV_HELLO_LEN, session, slen);
    if (zt_comm_net_write_all(fd, hbuf, RDV_HELLO_LEN + slen, deadline_ns, who, &e) != 0) {
        st = zt_err_set(err, e.status, "rendezvous: rank %d: %s", opts->rank, e.msg);
        goto close_fd;
    }
    unsigned char rh[RDV_REPLY_LEN];
    if (zt_comm_net_read_all(fd, rh, sizeof(rh), deadline_ns, who, &e) != 0) {
        if (e.status == ZT_ERR_TIMEOUT)
            st = zt_err_set(
                err, ZT_ERR_TIMEOUT,
                "rendezvous %s: rank 0 took rank %d in but did not send the peer table within %d ms (are all %d ranks started?)",
                addr, opts->rank, timeout_ms, world);
        else
            st = zt_err_set(err, e.status, "rendezvous: rank %d: %s", opts->rank, e.msg);
        goto close_fd;
    }
    uint32_t type = zt_comm_get_u32(rh + 4), rst = zt_comm_get_u32(rh + 8);
    uint32_t len = zt_comm_get_u32(rh + 12);
    size_t want = (size_t)world * RDV_TABLE_ENTRY + blob_len;
    if (zt_comm_get_u32(rh) != RDV_MAGIC || (type != RDV_TABLE && type != RDV_REJECT) ||
        (type == RDV_TABLE && len != want) || (type == RDV_REJECT && len > 4096)) {
        st = zt_err_set(
            err, ZT_ERR_PEER,
            "rendezvous %s: rank %d got a garbled reply (is something other than zerotrain's rank 0 listening there?)",
            addr, opts->rank);
        goto close_fd;
    }
    body = zt_malloc(len + 1);
    if (!body) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "rendezvous: out of memory");
        goto close_fd;
    }
    if (zt_comm_net_read_all(fd, body, len, deadline_ns, who, &e) != 0) {
        st = zt_err_set(err, e.status, "rendezvous: rank %d: %s", opts->rank, e.msg);
        goto close_fd;
    }
    if (type == RDV_REJECT) {
        body[len] = '\0';
        zt_status rs = rst > ZT_OK && rst < ZT_STATUS_COUNT ? (zt_status)rst : ZT_ERR_PEER;
        st = zt_err_set(err, rs, "rendezvous %s: rank 0 refused rank %d: %s", addr, opts->rank,
                        (const char *)body);
        goto close_fd;
    }
    if (table)
        for (int r = 0; r < world; r++) {
            memcpy(table[r].host, body + (size_t)r * RDV_TABLE_ENTRY, sizeof(table[r].host));
            table[r].host[sizeof(table[r].host) - 1] = '\0';
            table[r].port = (uint16_t)zt_comm_get_u32(body + (size_t)r * RDV_TABLE_ENTRY + 64);
        }
    if (blob_len) memcpy(blob, body + (size_t)world * RDV_TABLE_ENTRY, blob_len);
    if (rank0_host && host_len) peer_host(fd, rank0_host, host_len);

close_fd:
    zt_free(body);
    zt_free(hbuf);
    close(fd);
    return st;
}

zt_status zt_comm_net_rendezvous(const zt_comm_opts *opts, const char *session, int timeout_ms,
                                 uint16_t listen_port, void *blob, size_t blob_len,
                                 zt_comm_peer_addr *table, char *rank0_host, size_t host_len,
                                 zt_err *err)
{
    char host[256];
    uint16_t port = 0;
    const char *addr = opts->rendezvous ? opts->rendezvous : "";
    zt_status st = parse_addr(addr, host, sizeof(host), &port, err);
    if (st != ZT_OK) return st;
    if (blob_len > RDV_MAX_BLOB)
        return zt_err_set(err, ZT_ERR_INVALID, "rendezvous: blob of %zu bytes is too large",
                          blob_len);
    uint64_t deadline = zt_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    if (opts->rank == 0)
        return rank0_serve(opts, session, addr, host, port, deadline, timeout_ms, listen_port, blob,
                           blob_len, table, err);
    return peer_join(opts, session, addr, host, port, deadline, timeout_ms, listen_port, blob,
                     blob_len, table, rank0_host, host_len, err);
}
