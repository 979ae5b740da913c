/* The random numbers of the tests and of the jattn command's synthetic inputs, written once:
 * xoshiro256** seeded through splitmix64, uniforms and Box-Muller normals. Deterministic for a
 * seed on every platform. */
#ifndef JATTN_RNG_H
#define JATTN_RNG_H

#include <stdint.h>

typedef struct jattn_rng {
    uint64_t s[4];
} jattn_rng;

void jattn_rng_seed(jattn_rng *r, uint64_t seed);
uint64_t jattn_rng_next(jattn_rng *r);
/* Uniform in [0, 1). */
double jattn_rng_uniform(jattn_rng *r);
/* Standard normal. */
double jattn_rng_normal(jattn_rng *r);

/* Fills x[0..n) with standard normal values from (seed, stream): reproducible, and each
 * stream (q = 0, k = 1, v = 2) independent. */
void jattn_rng_fill_normal(float *x, int64_t n, uint64_t seed, uint64_t stream);

#endif
