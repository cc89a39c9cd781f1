/* zerotrain: a small seeded PRNG (xoshiro256** seeded by splitmix64) with uniform and normal
 * draws. Deterministic across platforms; the state is a plain struct (checkpointable). */
#ifndef ZT_COMMON_RNG_H
#define ZT_COMMON_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct zt_rng {
    uint64_t s[4];
} zt_rng;

static inline uint64_t zt_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seeds from (seed, stream): different streams give independent sequences. */
static inline void zt_rng_seed(zt_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = zt_splitmix64(&x);
}

static inline uint64_t zt_rng_next(zt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double zt_rng_uniform(zt_rng *r)
{
    return (double)(zt_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller, one value per call, deterministic). */
static inline double zt_rng_normal(zt_rng *r)
{
    double u1 = zt_rng_uniform(r);
    double u2 = zt_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
