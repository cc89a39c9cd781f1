/* zerotrain: picking a TCP port for a rank-0 rendezvous listener that another process will
 * bind a moment later (zctl run, zagent). */
#ifndef ZT_COMMON_NETUTIL_H
#define ZT_COMMON_NETUTIL_H

#include <stdbool.h>

/* A TCP port that is free now on host (a loopback host is probed on that address, any other
 * on every address, as the engine binds). Ports are drawn at random below the kernel's
 * ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), so the outgoing connections of
 * other processes cannot take the port between this probe and the listener's bind; the
 * kernel's own choice is the fallback. Returns -1 with errno set on failure. Thread-safe. */
int zt_net_pick_port(const char *host);

/* Whether addr names this machine's loopback only: "unix:PATH", or a host that is "localhost",
 * "[::1]" or an IPv4 address in 127.0.0.0/8, followed by ":PORT" (or by nothing, when
 * port_optional: an HTTP Host header). A name that merely starts like a loopback address
 * ("127.0.0.1.example") is not one: it resolves wherever its owner likes. Thread-safe. */
bool zt_net_is_loopback(const char *addr, bool port_optional);

#endif
