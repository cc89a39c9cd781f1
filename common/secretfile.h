/* zerotrain: reading a secret (an API token, a join token) from a file, as zcoord, zctl and
 * zagent do for --token-file. The checks refuse a file that others can read and a secret that
 * an editor or a copy-paste mangled, so that a wrong token fails at start-up with the file's
 * name instead of as "invalid token" on every call. */
#ifndef ZT_COMMON_SECRETFILE_H
#define ZT_COMMON_SECRETFILE_H

#include "common/status.h"

/* Shortest and longest secret accepted, in bytes. */
#define ZT_SECRET_MIN 16
#define ZT_SECRET_MAX 4096

/* Reads the secret kept in the file at path: its whole content less one trailing newline
 * (LF or CR LF). what names the file in messages, with where its path came from, e.g.
 * "the token file (--token-file)".
 *
 * Refused, with a message that names the file and says what to do:
 *   - a file that group or others may access (mode & 077): "run chmod 600 PATH";
 *   - anything but a regular file (a directory, a FIFO, a device; symbolic links are followed);
 *   - a secret shorter than ZT_SECRET_MIN or longer than ZT_SECRET_MAX bytes (a longer one is
 *     never cut short);
 *   - more than one line;
 *   - any byte that is not printable ASCII (0x21..0x7e) inside the secret: control characters,
 *     spaces, non-ASCII bytes. Tokens travel in HTTP and gRPC headers, which carry printable
 *     ASCII only.
 *
 * Returns the secret (caller frees with zt_free), or NULL with err set: ZT_ERR_INVALID (no
 * path), ZT_ERR_IO (cannot open or read), ZT_ERR_CONFIG (permissions, not a regular file, bad
 * content), ZT_ERR_NOMEM. Messages never quote the secret. Never blocks on a FIFO.
 * Thread-safe. */
char *zt_secret_file_read(const char *path, const char *what, zt_err *err);

#endif
