/* zerotrain: CRC32C (Castagnoli), the checksum of checkpoint shards. Hardware-accelerated
 * with SSE4.2 where the CPU has it, a table otherwise; both give the same values. */
#ifndef ZT_COMMON_CRC32C_H
#define ZT_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over n bytes. Thread-safe. */
uint32_t zt_crc32c(uint32_t crc, const void *data, size_t n);

#endif
