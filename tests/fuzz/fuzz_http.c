/* Fuzz target for what zcoord's HTTP server parses before any route: zt_http_route_request
 * (coordinator/http.c) over the method, path, Authorization, sign-in cookie, Origin, Host,
 * X-Requested-With and a sign-in form body. Besides crashes and sanitizer reports it checks
 * the guarantees the dashboard's security rests on: nothing reaches the handler without the
 * token (a bearer header that holds it, a sign-in cookie made from it) unless it is open, a
 * cookie-authenticated change must come from the same site, and without a token only loopback
 * host names are served.
 *
 * Input: one flag byte, then fields separated by '\n' in the order method, path,
 * Authorization, cookie, Origin, Host, X-Requested-With; the rest is the body. Flag bit i
 * (0..6) set: field i is absent (NULL); bit 7: no token configured. A cookie field "VALID"
 * is replaced by a sign-in cookie value that is valid now, so that the cookie path is reachable.
 *
 * Built two ways: with clang's libFuzzer (tests/fuzz/run_libfuzzer.sh BUILD 10 http), and
 * with ZT_FUZZ_STANDALONE as a plain program that every build runs (fuzz_http): the files
 * named on its command line, the seeds below, then seeded random mutations of them for
 * ZT_FUZZ_SECONDS (default 3); ZT_FUZZ_SEED picks the random stream. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/netutil.h"
#include "coordinator/http.h"

#define TOKEN "fuzz-token-0123456789"
#define TOKEN2 "other-user-token-987654"
#define NOW 1800000000LL

static const zt_http_user USERS[] = {{"admin", TOKEN}, {"bob", TOKEN2}};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const zt_http_parts *p, zt_http_route r)
{
    fprintf(
        stderr,
        "fuzz_http: %s (route %d)\n  method=%s url=%s authorization=%s cookie=%s origin=%s host=%s requested_with=%s\n",
        what, (int)r, p->method ? p->method : "(null)", p->url ? p->url : "(null)",
        p->authorization ? p->authorization : "(null)", p->cookie ? p->cookie : "(null)",
        p->origin ? p->origin : "(null)", p->host ? p->host : "(null)",
        p->requested_with ? p->requested_with : "(null)");
    abort();
}

/* The user whose token the bearer header holds exactly (what authenticate() must demand),
 * -1 when none. */
static int bearer_user(const char *a)
{
    if (!a || strncasecmp(a, "Bearer ", 7) != 0) return -1;
    a += 7;
    while (*a == ' ')
        a++;
    return strcmp(a, TOKEN) == 0 ? 0 : strcmp(a, TOKEN2) == 0 ? 1 : -1;
}

static bool same_site(const zt_http_parts *p)
{
    if (p->requested_with && p->requested_with[0]) return true;
    const char *o = p->origin ? strstr(p->origin, "://") : NULL;
    return o && p->host && strcmp(o + 3, p->host) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16) return 0;
    uint8_t flags = data[0];
    char *buf = malloc(size);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    char *field[8] = {0};
    char *p = buf;
    for (int i = 0; i < 7 && p; i++) {
        field[i] = p;
        char *nl = memchr(p, '\n', (size_t)(buf + size - 1 - p));
        if (nl) *nl = '\0';
        p = nl ? nl + 1 : NULL;
    }
    field[7] = p ? p : (char *)"";
    for (int i = 0; i < 7; i++)
        if ((flags >> i) & 1) field[i] = NULL;
    int n_users = (flags & 0x80) ? 0 : 2;
    bool token = n_users > 0;
    char valid[200];
    if (field[3] && strcmp(field[3], "VALID") == 0 &&
        zt_http_cookie_value(&USERS[1], NOW + 3600, valid, sizeof(valid)))
        field[3] = valid;
    zt_http_parts parts = {.method = field[0],
                           .url = field[1],
                           .authorization = field[2],
                           .cookie = field[3],
                           .origin = field[4],
                           .host = field[5],
                           .requested_with = field[6],
                           .body = field[7]};
    int user = -2, user2 = -2;
    zt_http_route r = zt_http_route_request(USERS, n_users, &parts, NOW, &user);
    if (zt_http_route_request(USERS, n_users, &parts, NOW, &user2) != r || user != user2)
        fail("not deterministic", &parts, r);
    const char *url = parts.url ? parts.url : "";
    const char *method = parts.method ? parts.method : "";
    bool health = strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0;
    if (health != (r == ZT_HTTP_TO_HEALTH)) fail("health pages are open, and only they", &parts, r);
    int bu = bearer_user(parts.authorization);
    bool bearer = bu >= 0;
    bool cookie = parts.cookie && parts.cookie == valid;
    if (token && r == ZT_HTTP_TO_HANDLER && strcmp(url, "/style.css") != 0 &&
        user != (bearer ? bu : cookie ? 1 : -3))
        fail("the request is not attributed to the user its credential belongs to", &parts, r);
    if (token) {
        if (r == ZT_HTTP_TO_NOT_LOOPBACK || r == ZT_HTTP_TO_HOME)
            fail("with a token every host is served", &parts, r);
        if (r == ZT_HTTP_TO_HANDLER && strcmp(url, "/style.css") != 0) {
            if (!bearer && !cookie) fail("the handler without the token", &parts, r);
            bool changes = strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0;
            if (changes && !bearer && !same_site(&parts))
                fail("a cross-site change with a cookie", &parts, r);
        }
        if (r == ZT_HTTP_TO_LOGOUT && !bearer && !cookie)
            fail("logout without a credential", &parts, r);
        if (r == ZT_HTTP_TO_LOGIN_OK &&
            (strcmp(method, "POST") != 0 || !same_site(&parts) || !strstr(parts.body, "token=")))
            fail("a sign-in without a posted token from this site", &parts, r);
    } else {
        if (r == ZT_HTTP_TO_UNAUTHORIZED || r == ZT_HTTP_TO_LOGIN_OK ||
            r == ZT_HTTP_TO_LOGIN_WRONG || r == ZT_HTTP_TO_LOGIN_PAGE)
            fail("no credential is asked without a token", &parts, r);
        bool loopback = !parts.host || (strncmp(parts.host, "unix:", 5) != 0 &&
                                        zt_net_is_loopback(parts.host, true));
        if (!health && !loopback && r != ZT_HTTP_TO_NOT_LOOPBACK)
            fail("a host that is not loopback served without a token", &parts, r);
    }
    free(buf);
    return 0;
}

#ifdef ZT_FUZZ_STANDALONE
#include "common/timeutil.h"

static const char *const seeds[] = {
    "\x00GET\n/api/v1/jobs\nBearer " TOKEN "\n\n\n127.0.0.1:8080\n\n",
    "\x00POST\n/api/v1/jobs/1/cancel\n\nVALID\nhttp://127.0.0.1:8080\n127.0.0.1:8080\n\n",
    "\x00POST\n/api/v1/jobs/1/cancel\n\nVALID\nhttp://evil.example\n127.0.0.1:8080\n\n",
    "\x00POST\n/login\n\n\nhttps://zc:8443\nzc:8443\n\ntoken=fuzz-token-0123456789&x=1",
    "\x00POST\n/login\n\n\n\n\nXMLHttpRequest\ntoken=fuzz%2Dtoken%2D0123456789",
    "\x00POST\n/login\n\n\n\n\nXMLHttpRequest\ntoken=wrong+token%zz&token=",
    "\x00GET\n/logout\n\nVALID\n\n\n\n",
    "\x00GET\n/healthz\n\n\n\n\n\n",
    "\x00GET\n/style.css\n\n\n\n\n\n",
    "\x00GET\n/\n\n1800003600.00\n\n\n\n",
    "\x00GET\n/\nbearer    fuzz-token-0123456789\n\n\n\n\n",
    "\x80GET\n/api/v1/jobs\n\n\n\n127.0.0.1.example:80\n\n",
    "\x80GET\n/login\n\n\n\n[::1]:8080\n\n",
    "\x80POST\n/api/v1/jobs/2/cancel\n\n\n\nlocalhost\n\n",
    "\x80GET\n/\n\n\n\nunix:/tmp/x\n\n",
    "\x20GET\n/api/v1/stream\nBasic Zm9v\n99999999999999999999999.ab\n\n\n\n",
};

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void run(const uint8_t *d, size_t n)
{
    LLVMFuzzerTestOneInput(d, n);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "fuzz_http: cannot open %s\n", argv[i]);
            return 1;
        }
        static uint8_t in[1 << 16];
        size_t n = fread(in, 1, sizeof(in), f);
        fclose(f);
        run(in, n);
    }
    size_t nseeds = sizeof(seeds) / sizeof(seeds[0]);
    for (size_t i = 0; i < nseeds; i++)
        run((const uint8_t *)seeds[i], strlen(seeds[i] + 1) + 1);
    const char *sec = getenv("ZT_FUZZ_SECONDS");
    const char *seed = getenv("ZT_FUZZ_SEED");
    double seconds = sec ? atof(sec) : 3.0;
    rng_state = seed ? strtoull(seed, NULL, 0) : 0x9e3779b97f4a7c15ULL;
    if (!rng_state) rng_state = 1;
    double t0 = zt_now_s();
    long runs = 0;
    uint8_t m[4096];
    while (zt_now_s() - t0 < seconds) {
        const char *s = seeds[rnd() % nseeds];
        size_t n = strlen(s + 1) + 1;
        memcpy(m, s, n);
        int edits = 1 + (int)(rnd() % 8);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(rnd() % (n ? n : 1));
            switch (rnd() % 5) {
            case 0: /* flip a byte */
                if (n) m[at] = (uint8_t)rnd();
                break;
            case 1: /* insert a byte that matters to the parsers */
                if (n < sizeof(m)) {
                    static const char interesting[] = "\n\0 .%=+&:/[]@xX0\x7f\xff";
                    memmove(m + at + 1, m + at, n - at);
                    m[at] = (uint8_t)interesting[rnd() % (sizeof(interesting) - 1)];
                    n++;
                }
                break;
            case 2: /* delete a byte */
                if (n > 1 && at > 0) {
                    memmove(m + at, m + at + 1, n - at - 1);
                    n--;
                }
                break;
            case 3: /* repeat a run (long values) */
                if (n > 0 && n * 2 < sizeof(m)) {
                    size_t len = 1 + (size_t)(rnd() % (n - at));
                    memmove(m + at + len, m + at, n - at);
                    n += len;
                }
                break;
            default: /* the flags byte */
                m[0] = (uint8_t)rnd();
                break;
            }
        }
        run(m, n);
        runs++;
    }
    printf("fuzz_http: ok (%zu seeds, %ld mutated inputs in %.1f s)\n", nseeds, runs, seconds);
    return 0;
}
#endif
