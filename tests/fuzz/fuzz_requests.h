/* The request types the fuzz target knows (fuzz_requests.c), shared with the plain driver
 * (fuzz_main.c) that builds its seed corpus from them. */
#ifndef ZT_TESTS_FUZZ_REQUESTS_H
#define ZT_TESTS_FUZZ_REQUESTS_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

typedef struct zt_fuzz_type {
    const char *name;
    const ProtobufCMessageDescriptor *type;
    const void *check; /* bool (*)(const void *msg, char *why, size_t cap) */
} zt_fuzz_type;

extern const zt_fuzz_type zt_fuzz_types[];
extern const size_t zt_fuzz_n_types;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
