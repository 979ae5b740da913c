/* The single-thread AVX-512 FMA peak per second of CPU time (CLOCK_THREAD_CPUTIME_ID) and per
 * second of wall time, for a machine shared with other work, where the wall clock of a run
 * depends on the scheduler: 16 independent zmm FMA chains (as kit/peers.c), median of REPS.
 * build: cc -O2 -mavx512f -mfma lab/cpu/fma_peak_cputime.c -o /tmp/fma_peak_cputime
 * usage: /tmp/fma_peak_cputime [REPS] */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 16
#define ITERS 20000000L

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

__attribute__((noinline)) static float chains(long iters, float seed) {
    __m512 a[CHAINS];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f * seed);
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    }
    __m512 s = a[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    double cpu[64], wall[64];
    float sink = 0;
    for (int r = -1; r < reps && r < 64; r++) {
        const double c0 = now(CLOCK_THREAD_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
        sink += chains(ITERS, 1.0f + (float)r);
        const double c = now(CLOCK_THREAD_CPUTIME_ID) - c0, w = now(CLOCK_MONOTONIC) - w0;
        if (r >= 0) cpu[r] = 2.0 * 16 * CHAINS * ITERS / c / 1e9, wall[r] = 2.0 * 16 * CHAINS * ITERS / w / 1e9;
    }
    qsort(cpu, (size_t)reps, sizeof *cpu, cmp);
    qsort(wall, (size_t)reps, sizeof *wall, cmp);
    printf("fma peak 1 thread: %.1f GFLOP per cpu-s (min %.1f max %.1f), %.1f GFLOP/s wall (min %.1f max %.1f)%s\n",
           cpu[reps / 2], cpu[0], cpu[reps - 1], wall[reps / 2], wall[0], wall[reps - 1], sink == 0.5f ? " " : "");
    return 0;
}
