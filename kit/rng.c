/* Random numbers: see rng.h. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void jattn_rng_seed(jattn_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t jattn_rng_next(jattn_rng *r) {
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double jattn_rng_uniform(jattn_rng *r) { return (double)(jattn_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

double jattn_rng_normal(jattn_rng *r) {
    const double u = jattn_rng_uniform(r), v = jattn_rng_uniform(r); /* 1 - u in (0, 1]: log finite */
    return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * acos(-1.0) * v);
}

void jattn_rng_fill_normal(float *x, int64_t n, uint64_t seed, uint64_t stream) {
    jattn_rng r;
    jattn_rng_seed(&r, seed ^ (stream * 0xD1B54A32D192ED03ull));
    for (int64_t i = 0; i < n; i++) x[i] = (float)jattn_rng_normal(&r);
}
