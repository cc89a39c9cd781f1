/* zerotrain: what speaks at a coordinator address that a gRPC call could not connect to, so
 * that zctl can say "it speaks TLS, pass --tls-ca" instead of "is zcoord running there?" (the
 * gRPC core reports a TLS mismatch only as a closed socket or a handshake failure). */
#ifndef ZT_CLI_PROBE_H
#define ZT_CLI_PROBE_H

typedef enum {
    ZT_PROBE_UNKNOWN,  /* nothing listens, or it answered neither way, or the address is odd */
    ZT_PROBE_TLS,      /* a TLS server: it answered a ClientHello with a TLS record */
    ZT_PROBE_PLAIN_H2, /* a plain-text HTTP/2 server (gRPC without TLS): it sent a frame */
} zt_probe_kind;

/* Connects once to target ("host:port", "[v6]:port", optionally with a gRPC scheme "dns:",
 * "dns:///", "ipv4:", "ipv6:"; "unix:PATH") and sends a TLS 1.2 ClientHello: a TLS server
 * answers with a handshake or alert record (first byte 0x16 or 0x15), a plain gRPC server
 * with an HTTP/2 SETTINGS frame. Gives up after about timeout_ms in all (connect and answer).
 * Sends nothing but the ClientHello, and closes the connection. Thread-safe. */
zt_probe_kind zt_cli_probe(const char *target, int timeout_ms);

#endif
