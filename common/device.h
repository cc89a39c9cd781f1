/* zerotrain: the kind of device ranks train on, as a job asks for it and an agent's slots offer
 * it. The numbers are zt.v1.Device's (proto/zerotrain.proto), so one value serves the job file,
 * the agent and the wire; code that sees the generated proto header asserts that they agree. */
#ifndef ZT_COMMON_DEVICE_H
#define ZT_COMMON_DEVICE_H

typedef enum { ZT_DEVICE_CPU = 1, ZT_DEVICE_CUDA = 2 } zt_device;

/* "cuda" or "cpu", as job files and messages spell it. */
static inline const char *zt_device_name(zt_device d)
{
    return d == ZT_DEVICE_CUDA ? "cuda" : "cpu";
}

#endif
