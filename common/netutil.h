/* zerotrain: picking a TCP port for a rank-0 rendezvous listener that another process will
 * bind a moment later (zctl run, zagent). */
#ifndef ZT_COMMON_NETUTIL_H
#define ZT_COMMON_NETUTIL_H

/* A TCP port that is free now on host (a loopback host is probed on that address, any other
 * on every address, as the engine binds). Ports are drawn at random below the kernel's
 * ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), so the outgoing connections of
 * other processes cannot take the port between this probe and the listener's bind; the
 * kernel's own choice is the fallback. Returns -1 with errno set on failure. Thread-safe. */
int zt_net_pick_port(const char *host);

#endif
