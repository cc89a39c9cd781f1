/* zerotrain: every heap allocation goes through these, so tests can count allocations and
 * make the n-th one fail on purpose (curl's torture tests). Thread-safe. */
#ifndef ZT_COMMON_ALLOC_H
#define ZT_COMMON_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *zt_malloc(size_t size);
void *zt_calloc(size_t n, size_t size);
void *zt_realloc(void *p, size_t size);
/* 64-byte aligned unless align is larger (a power of two); free with zt_free. */
void *zt_aligned_alloc(size_t align, size_t size);
char *zt_strdup(const char *s);
char *zt_strndup(const char *s, size_t n);
/* printf into a fresh string; NULL on failure. */
char *zt_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void zt_free(void *p);
/* "512 B", "1.2 GiB": b in binary units with one decimal; returns buf. */
const char *zt_fmt_bytes(int64_t b, char *buf, size_t cap);
/* "80GiB", "80GB", "80G", "512MiB", "1e9" -> bytes (decimal and binary units, case-insensitive);
 * -1 when s is not a size. */
double zt_parse_size(const char *s);

/* Test hooks: after `n` more successful allocations, every allocation fails (n < 0 turns
 * failure injection off). Also read once from ZT_ALLOC_FAIL_AFTER. */
void zt_alloc_fail_after(long n);
/* Allocations made since start (successful ones). */
uint64_t zt_alloc_count(void);

#endif
