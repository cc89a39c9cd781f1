/* zerotrain: rendezvous port choice (see netutil.h). */
#define _POSIX_C_SOURCE 200809L
#include "netutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rng.h"
#include "timeutil.h"

/* Binds a probe socket on host:port (0 = the kernel picks); returns the bound port or -1. */
static int probe(const char *host, int port)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int family = AF_INET;
    bool loopback = false;
    if (host && getaddrinfo(host, "0", &hints, &res) == 0 && res) {
        family = res->ai_family;
        if (family == AF_INET)
            loopback = (ntohl(((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        else if (family == AF_INET6)
            loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr);
    }
    int fd = socket(family, SOCK_STREAM, 0);
    int got = -1;
    if (fd >= 0) {
        struct sockaddr_storage ss;
        socklen_t len;
        memset(&ss, 0, sizeof(ss));
        if (loopback) {
            memcpy(&ss, res->ai_addr, res->ai_addrlen);
            len = res->ai_addrlen;
        } else if (family == AF_INET6) {
            ((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
            ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
            len = sizeof(struct sockaddr_in6);
        } else {
            ((struct sockaddr_in *)&ss)->sin_family = AF_INET;
            ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
            len = sizeof(struct sockaddr_in);
        }
        if (family == AF_INET6)
            ((struct sockaddr_in6 *)&ss)->sin6_port = htons((unsigned short)port);
        else
            ((struct sockaddr_in *)&ss)->sin_port = htons((unsigned short)port);
        if (bind(fd, (struct sockaddr *)&ss, len) == 0 &&
            getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
            got = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
        int e = errno;
        close(fd);
        errno = e;
    }
    if (res)
        freeaddrinfo(res);
    return got;
}

int zt_net_pick_port(const char *host)
{
    int lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        int a = 0, b = 0;
        if (fscanf(f, "%d %d", &a, &b) == 2 && a > 0)
            lo = a;
        fclose(f);
    }
    int base = 20000;
    if (lo - base >= 1000) {
        zt_rng rng;
        zt_rng_seed(&rng, zt_now_ns(), (uint64_t)getpid());
        for (int tries = 0; tries < 64; tries++) {
            int port = base + (int)(zt_rng_next(&rng) % (uint64_t)(lo - base));
            if (probe(host, port) == port)
                return port;
        }
    }
    return probe(host, 0);
}

/* ":PORT" with 1 to 5 digits, or nothing when allowed. */
static bool port_part(const char *p, bool optional)
{
    if (*p == '\0') return optional;
    if (*p++ != ':') return false;
    size_t n = 0;
    while (p[n] >= '0' && p[n] <= '9')
        n++;
    return n >= 1 && n <= 5 && p[n] == '\0';
}

bool zt_net_is_loopback(const char *addr, bool port_optional)
{
    if (!addr) return false;
    if (strncmp(addr, "unix:", 5) == 0) return true;
    if (strncmp(addr, "[::1]", 5) == 0) return port_part(addr + 5, port_optional);
    if (strncasecmp(addr, "localhost", 9) == 0) return port_part(addr + 9, port_optional);
    char host[INET_ADDRSTRLEN];
    size_t n = strcspn(addr, ":");
    if (n >= sizeof(host)) return false;
    memcpy(host, addr, n);
    host[n] = '\0';
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127 &&
           port_part(addr + n, port_optional);
}
