/* zerotrain: zcoord's minimal HTTP listener (see http.h). */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"

struct zt_http {
    int fd;
    int wake[2]; /* a pipe: writing to it stops the thread */
    int port;
    pthread_t thread;
    zt_http_health_fn health;
    void *arg;
};

/* Splits "host:port" / "[v6]:port" into host and port. */
static bool split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || !colon[1]) return false;
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= hcap || strlen(colon + 1) >= pcap) return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    snprintf(port, pcap, "%s", colon + 1);
    return true;
}

static void respond(int fd, int code, const char *type, const char *body)
{
    char head[256];
    const char *text = code == 200   ? "OK"
                       : code == 404 ? "Not Found"
                       : code == 405 ? "Method Not Allowed"
                                     : "Service Unavailable";
    int n = snprintf(
        head, sizeof(head),
        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
        code, text, type, strlen(body));
    if (write(fd, head, (size_t)n) < 0 || write(fd, body, strlen(body)) < 0)
        ZT_DEBUG("http", "client went away: %s", strerror(errno));
}

static void serve_one(zt_http *h, int fd)
{
    struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[2048];
    size_t n = 0;
    while (n < sizeof(buf) - 1) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
        buf[n] = '\0';
        if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n")) break;
    }
    buf[n] = '\0';
    char method[16] = "", path[256] = "";
    if (sscanf(buf, "%15s %255s", method, path) != 2) {
        respond(fd, 404, "text/plain", "bad request\n");
        return;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        respond(fd, 405, "text/plain", "only GET\n");
        return;
    }
    bool ok = h->health(h->arg);
    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0) {
        respond(fd, ok ? 200 : 503, "text/plain", ok ? "ok\n" : "shutting down\n");
    } else if (strcmp(path, "/") == 0) {
        respond(
            fd, 200, "text/html; charset=utf-8",
            "<!doctype html><title>zcoord</title><h1>zerotrain coordinator</h1><p>Health: <a href=\"/healthz\">/healthz</a>. The dashboard is not built into this zcoord yet; use <code>zctl jobs</code>.</p>\n");
    } else {
        respond(fd, 404, "text/plain", "not found\n");
    }
}

static void *http_main(void *arg)
{
    zt_http *h = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = h->fd, .events = POLLIN},
                              {.fd = h->wake[0], .events = POLLIN}};
        int r = poll(p, 2, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || (p[1].revents & POLLIN)) break;
        if (p[0].revents & POLLIN) {
            int fd = accept(h->fd, NULL, NULL);
            if (fd < 0) continue;
            serve_one(h, fd);
            close(fd);
        }
    }
    return NULL;
}

zt_status zt_http_start(zt_http **out, const char *addr, zt_http_health_fn health, void *arg,
                        zt_err *err)
{
    *out = NULL;
    char host[256], port[32];
    if (!addr || !split_addr(addr, host, sizeof(host), port, sizeof(port)))
        return zt_err_set(err, ZT_ERR_INVALID,
                          "HTTP address '%s' is not host:port; e.g. --http 127.0.0.1:8080",
                          addr ? addr : "");
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (gai != 0)
        return zt_err_set(err, ZT_ERR_INVALID, "HTTP address %s: %s", addr, gai_strerror(gai));
    zt_http *h = zt_calloc(1, sizeof(*h));
    if (!h) {
        freeaddrinfo(res);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    }
    h->fd = -1;
    h->health = health;
    h->arg = arg;
    int e = 0;
    for (struct addrinfo *ai = res; ai && h->fd < 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) {
            h->fd = fd;
        } else {
            e = errno;
            close(fd);
        }
    }
    freeaddrinfo(res);
    if (h->fd < 0) {
        zt_free(h);
        return zt_err_set(err, ZT_ERR_IO,
                          "cannot listen on %s for HTTP: %s; choose another --http address", addr,
                          strerror(e ? e : EADDRNOTAVAIL));
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(h->fd, (struct sockaddr *)&ss, &sl) == 0)
        h->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    if (pipe(h->wake) != 0 || pthread_create(&h->thread, NULL, http_main, h) != 0) {
        close(h->fd);
        zt_free(h);
        return zt_err_set(err, ZT_ERR_INTERNAL, "cannot start the HTTP thread");
    }
    *out = h;
    return ZT_OK;
}

int zt_http_port(const zt_http *h)
{
    return h ? h->port : 0;
}

void zt_http_stop(zt_http *h)
{
    if (!h) return;
    if (write(h->wake[1], "x", 1) < 0)
        ZT_WARN("http", "cannot wake the HTTP thread: %s", strerror(errno));
    pthread_join(h->thread, NULL);
    close(h->wake[0]);
    close(h->wake[1]);
    close(h->fd);
    zt_free(h);
}
