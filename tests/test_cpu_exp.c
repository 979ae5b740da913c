/* The cpu backend's vector exp2 (cpu_kernels.h: exp2), for every instruction set this build and
 * CPU have, against libm's exp2 in double: a dense sweep of the floats in [-126, 0] (every
 * STRIDE-th bit pattern, plus every float in [-1, -1/2] and the 129 around each integer), which is
 * the range the softmax feeds it. Gate: <= 2 ulp of the float result. Below -126 (where the
 * true value is subnormal), and for -inf, the result must be 0; NaN gives NaN; x > 0 gives 1. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jattn_internal.h" /* cpu/cpu_kernels.h */
#include "harness.h"

#define STRIDE 1009 /* about 1.1 million of the 1.1 billion floats in [-126, 0], every binade */
#define BATCH 4096
#define MAX_ULP 2.0

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Error of y against exp2(x) in units of the last place of the float nearest the truth. */
static double ulp_error(float x, float y) {
    const double r = exp2((double)x);
    const double ulp = ldexp(1.0, ilogb(r) - 23);
    return fabs((double)y - r) / ulp;
}

typedef struct sweep {
    float x[BATCH], y[BATCH];
    int n;
    double worst;
    float worst_x;
} sweep;

static void flush(const cpu_kernels *k, sweep *s) {
    k->exp2(s->n, s->x, s->y);
    for (int i = 0; i < s->n; i++) {
        const double e = ulp_error(s->x[i], s->y[i]);
        if (!(e <= s->worst)) { /* NaN results count as worst */
            s->worst = isnan(e) ? INFINITY : e;
            s->worst_x = s->x[i];
        }
    }
    s->n = 0;
}

static void add(const cpu_kernels *k, sweep *s, float x) {
    s->x[s->n++] = x;
    if (s->n == BATCH) flush(k, s);
}

int main(void) {
    const cpu_kernels *all[8];
    const int n = cpu_kernels_available(all, 8);
    jt_tally tally = {0};
    const uint32_t lo = to_bits(-126.0f); /* negative floats: larger bit pattern = more negative */
    for (int t = 0; t < n; t++) {
        const cpu_kernels *k = all[t];
        sweep *s = calloc(1, sizeof *s);
        for (uint32_t u = to_bits(-0.0f); u <= lo; u += STRIDE) add(k, s, from_bits(u));
        for (uint32_t u = to_bits(-0.5f); u <= to_bits(-1.0f); u++) add(k, s, from_bits(u));
        for (int i = 0; i <= 126; i++) /* around each integer, where the reduction switches n */
            for (int d = -64; d <= 64; d++) {
                const float x = from_bits((uint32_t)((int64_t)to_bits(-(float)i) + d));
                if (x <= 0.0f && x >= -126.0f) add(k, s, x);
            }
        add(k, s, -126.0f);
        flush(k, s);
        const int ok = s->worst <= MAX_ULP;
        printf("%s exp2 %s: max error %.3f ulp at x = %a over [-126, 0] (gate %.1f)\n", ok ? "ok  " : "FAIL", k->isa,
               s->worst, (double)s->worst_x, MAX_ULP);
        jt_tally_add(&tally, ok);

        /* The edges of the contract. */
        const float xs[] = {-126.5f, -127.0f, -150.0f, -1e30f, -INFINITY, NAN, 0.5f, 3.0f, 0.0f, -0.0f};
        const float want[] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, NAN, 1.0f, 1.0f, 1.0f, 1.0f};
        float y[sizeof xs / sizeof xs[0]];
        k->exp2((int64_t)(sizeof xs / sizeof xs[0]), xs, y);
        for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
            const int good = isnan(want[i]) ? isnan(y[i]) : y[i] == want[i];
            if (!good) printf("FAIL exp2 %s(%g) = %g, want %g\n", k->isa, (double)xs[i], (double)y[i], (double)want[i]);
            jt_tally_add(&tally, good);
        }
        free(s);
    }
    return jt_tally_finish(&tally, "test_cpu_exp");
}
