/* Where a whole call of the cpu backend loses against its task alone (issue 31): loop_lab's
 * "task 1536" runs one group of query blocks with everything hot; a call walks every (b, h) and
 * group, fetches each head's Q, K, V from memory, writes out and lse, computes the key norms and
 * runs under OpenMP. This program times, in ONE process and round by round (each round every
 * variant once, the order rotated), the same amount of work done these ways at (1,H,S,128),
 * standard-normal head-major inputs (interleaved.py's):
 *   hot          the table's task on the group (b, h, q0) = (0, 0, 0) called H*groups times
 *                (bwd: bwd_tile on the first group of tiles): loop_lab's task, the call's inputs
 *   walk         every task of the call in the driver's order on this thread, the table called
 *                directly (no OpenMP, no key norms, the workspace allocated once)
 *   walk kv0     the same with every head reading the first head's K and V (and, bwd, adding
 *                into its dK, dV): what fetching each head's K and V from memory costs
 *   walk q0      the same with every head reading the first head's Q and writing its out (bwd:
 *                reading its out and dout, writing its dq): what streaming those costs
 *   api          jattn_forward / jattn_backward, this many threads, the caller's workspace
 *   api alloc    the same, the library allocating its workspace (each call)
 * On THREADS > 1 the direct variants run on that many threads at once (one OpenMP region), each
 * over its own contiguous share of the heads with its own workspace ("first head": its share's). * Rates are GFLOP (4 H
 * S^2 D forward, 2.5x that backward) per second of CPU time per thread (the process's CPU time for the api lines:
 * OpenMP's waiting counts) and per wall second, the median over the rounds; beside them the FMA peak measured on every
 * thread at once (T threads in one OpenMP region: a core that is slower, or the clock of T active cores, shows there)
 * and the core clock by a dependent integer-multiply chain (3 cycles each on the x86-64 cores this runs on; loop_lab's
 * old add chain ran faster than one a cycle on the Xeon).
 *
 * usage: call_lab fwd|bwd H S THREADS ROUNDS
 * Built with the benchmarks (JATTN_BUILD_BENCH=ON), AVX-512 x86-64 (it runs the avx512 table,
 * or JATTN_CPU_ISA's). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "cpu/cpu_kernels.h"
#include "jattn.h"

#define D 128
#define BWD_GROUP 4 /* cpu_backend.c's CPU_BWD_GROUP */

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmpd);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}
static float *aligned(size_t floats) {
    void *p = NULL;
    if (posix_memalign(&p, 64, floats * sizeof(float) + 64) != 0) exit(1);
    memset(p, 0, floats * sizeof(float) + 64);
    return p;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* 16 independent zmm FMA chains: FLOP per CPU-second of this thread. */
__attribute__((target("avx512f"), noinline)) static double peak512(long iters) {
    __m512 a[16];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1.0f + (float)i);
    const double t0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    const double t = now(CLOCK_THREAD_CPUTIME_ID) - t0;
    __m512 s = a[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return 2.0 * 16 * 16 * (double)iters / t;
}
/* The core clock in GHz: the fastest of 10 windows of a dependent imul chain (3 cycles each). */
static double core_ghz(void) {
    double best = 0.0;
    for (int w = 0; w < 10; w++) {
        uint64_t x = 1, one = 1;
        const double t0 = now(CLOCK_MONOTONIC);
        for (int i = 0; i < 2000; i++) __asm__ volatile(".rept 50\n\timulq %1, %0\n\t.endr" : "+r"(x) : "r"(one));
        const double g = 3.0 * 2000 * 50 / (now(CLOCK_MONOTONIC) - t0) * 1e-9;
        if (g > best) best = g;
    }
    return best;
}
#else
static double peak512(long iters) {
    (void)iters;
    return 0.0;
}
static double core_ghz(void) { return 0.0; }
#endif

/* The FMA peak of each of `threads` threads running at once: min, median and max over them. */
static void peak_all(int threads, double out[3]) {
    double r[64];
    int n = threads < 64 ? threads : 64;
#ifdef _OPENMP
#pragma omp parallel num_threads(n)
    {
        r[omp_get_thread_num()] = peak512(8000000);
#pragma omp single
        n = omp_get_num_threads(); /* the threads the region got */
    }
#else
    n = 1;
    r[0] = peak512(8000000);
#endif
    qsort(r, (size_t)n, sizeof *r, cmpd);
    out[0] = r[0], out[1] = r[n / 2], out[2] = r[n - 1];
}

typedef struct lab {
    const cpu_kernels *K;
    int H, S, threads, bwd;
    float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv, *ws, *api_ws;
    size_t api_ws_bytes, ws_floats; /* ws: ws_floats per thread */
    double *k_norm2;
} lab;

/* The call's arguments; share_kv / share_q: every head reads head h0's K and V / Q and out. */
static cpu_flash_args fwd_args(const lab *L, int share_kv, int share_q, int h0) {
    const jattn_strides hm = jattn_strides_head_major(L->H, L->S, D);
    jattn_strides qs = hm, kv = hm;
    const size_t kv0 = share_kv ? (size_t)h0 * L->S * D : 0, q0 = share_q ? (size_t)h0 * L->S * D : 0;
    if (share_q) qs.head = 0;
    if (share_kv) kv.head = 0;
    const float scale = 1.0f / sqrtf((float)D);
    const cpu_flash_args a = {L->q + q0,  L->k + kv0, L->v + kv0, L->out + q0,
                              L->lse,     1,          L->H,       L->S,
                              L->S,       D,          qs,         kv,
                              kv,         qs,         scale,      (float)(scale * 1.4426950408889634),
                              L->k_norm2, NULL,       NULL,       0};
    return a;
}

/* One variant, once, over the heads [h0, h1): 0 hot, 1 walk, 2 walk kv0, 3 walk q0. */
static void run_direct(const lab *L, int variant, int h0, int h1, float *ws) {
    const cpu_kernels *K = L->K;
    const cpu_flash_args a = fwd_args(L, variant == 2, variant == 3, h0);
    const jattn_strides go = a.qs, gk = a.ks; /* dout, dq like q; dk, dv like k */
    const size_t o0 = (const float *)a.out - L->out, k0 = a.k - L->k;
    const cpu_bwd_args ba = {a,          L->out + o0, L->lse, L->dout + o0, NULL, L->dq + o0,
                             L->dk + k0, L->dv + k0,  go,     go,           gk,   gk};
    const int blocks = L->S / K->qb, group = L->bwd ? BWD_GROUP : CPU_GROUP_MAX;
    const int groups = (blocks + group - 1) / group;
    for (int h = h0; h < h1; h++) {
        const int hd = variant == 0 ? h0 : h; /* hot: the range's first head every time */
        if (L->bwd) {                         /* the driver zeroes a head's dk, dv rows before its first tile */
            memset(ba.dk + hd * gk.head, 0, (size_t)L->S * D * sizeof(float));
            memset(ba.dv + hd * gk.head, 0, (size_t)L->S * D * sizeof(float));
        }
        for (int g = 0; g < groups; g++) {
            const int gg = variant == 0 ? 0 : g;
            const int n = blocks - gg * group < group ? blocks - gg * group : group;
            if (L->bwd)
                K->bwd_tile(&ba, 0, hd, (int64_t)gg * group * K->qb, n, 0, -1, CPU_BWD_DKV | CPU_BWD_DQ, ws);
            else
                K->task(&a, 0, hd, (int64_t)gg * group * K->qb, n, ws);
        }
    }
}

/* The direct variant on L->threads threads at once, each over its own contiguous share of the
 * heads with its own workspace: @return the CPU seconds of all of them (each thread's own). */
static double run_direct_threads(const lab *L, int variant) {
    double cpu = 0.0;
#ifdef _OPENMP
#pragma omp parallel num_threads(L->threads) reduction(+ : cpu)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
#else
    {
        const int t = 0, n = 1;
#endif
        const double c0 = now(CLOCK_THREAD_CPUTIME_ID);
        run_direct(L, variant, L->H * t / n, L->H * (t + 1) / n, L->ws + (size_t)t * L->ws_floats);
        cpu += now(CLOCK_THREAD_CPUTIME_ID) - c0;
    }
    return cpu;
}

static int run_api(const lab *L, int own_ws) {
    jattn_problem p = jattn_problem_flux(1, L->H, L->S, L->S, D);
    p.q = p.k = p.v = p.out = jattn_strides_head_major(L->H, L->S, D);
    jattn_exec e = {JATTN_BACKEND_CPU, JATTN_PRECISION_F32, JATTN_MEMORY_HOST, L->threads, NULL, NULL, 0};
    if (own_ws) e.workspace = L->api_ws, e.workspace_bytes = L->api_ws_bytes;
    if (!L->bwd) return jattn_forward(NULL, &p, &e, L->q, L->k, L->v, L->out, L->lse);
    return jattn_backward(NULL, &p, NULL, &e, L->q, L->k, L->v, L->out, L->lse, L->dout, NULL, NULL, L->dq, L->dk,
                          L->dv);
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: call_lab fwd|bwd H S THREADS ROUNDS\n");
        return 2;
    }
    lab L;
    memset(&L, 0, sizeof L);
    L.bwd = strcmp(argv[1], "bwd") == 0;
    L.H = atoi(argv[2]), L.S = atoi(argv[3]), L.threads = atoi(argv[4]);
    const int rounds = atoi(argv[5]) < 1 ? 1 : atoi(argv[5]) > 64 ? 64 : atoi(argv[5]);
    const char *why = "";
    L.K = cpu_kernels_select(&why);
    if (!L.K) return fprintf(stderr, "%s\n", why), 1;
    if (L.S % L.K->qb) return fprintf(stderr, "S must be a multiple of %d\n", L.K->qb), 2;
    const size_t n = (size_t)L.H * L.S * D;
    L.q = aligned(n), L.k = aligned(n), L.v = aligned(n), L.out = aligned(n), L.dout = aligned(n);
    L.dq = aligned(n), L.dk = aligned(n), L.dv = aligned(n), L.lse = aligned((size_t)L.H * L.S);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    float *in[4] = {L.q, L.k, L.v, L.dout};
    for (int t = 0; t < 4; t++) /* standard normal by Box-Muller */
        for (size_t i = 0; i < n; i += 2) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const double u1 = ((double)(s >> 11) + 1.0) * 0x1p-53;
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const double u2 = (double)(s >> 11) * 0x1p-53, r = sqrt(-2.0 * log(u1));
            in[t][i] = (float)(r * cos(6.283185307179586 * u2));
            if (i + 1 < n) in[t][i + 1] = (float)(r * sin(6.283185307179586 * u2));
        }
    L.k_norm2 = malloc((size_t)L.H * sizeof(double));
    for (int h = 0; h < L.H; h++) L.k_norm2[h] = L.K->max_row_norm2(L.S, D, L.k + (size_t)h * L.S * D, D);
    const int64_t wf = cpu_task_workspace_floats(L.K, D, CPU_GROUP_MAX);
    const int64_t wb = cpu_bwd_tile_workspace_floats(L.K, D, BWD_GROUP);
    L.ws_floats = (size_t)(wf > wb ? wf : wb);
    L.ws = aligned(L.ws_floats * (size_t)L.threads);
    {
        jattn_problem p = jattn_problem_flux(1, L.H, L.S, L.S, D);
        p.q = p.k = p.v = p.out = jattn_strides_head_major(L.H, L.S, D);
        jattn_exec e = {JATTN_BACKEND_CPU, JATTN_PRECISION_F32, JATTN_MEMORY_HOST, L.threads, NULL, NULL, 0};
        const jattn_status st = L.bwd ? jattn_backward_workspace_size(&p, NULL, &e, &L.api_ws_bytes)
                                      : jattn_workspace_size(&p, &e, &L.api_ws_bytes);
        if (st != JATTN_OK) return fprintf(stderr, "workspace: %s\n", jattn_last_error()), 1;
        L.api_ws = aligned(L.api_ws_bytes / sizeof(float) + 16);
        L.bwd = 0; /* out and lse of the forward, for the backward */
        if (run_api(&L, 1) != JATTN_OK) return fprintf(stderr, "forward: %s\n", jattn_last_error()), 1;
        L.bwd = strcmp(argv[1], "bwd") == 0;
    }
    const double flop = 4.0 * L.H * (double)L.S * L.S * D * (L.bwd ? 2.5 : 1.0);

    enum { HOT, WALK, WALK_KV0, WALK_Q0, API, API_ALLOC, NV };
    static const char *names[NV] = {"hot", "walk", "walk kv0", "walk q0", "api", "api alloc"};
    double cpu_rate[NV][64], wall_rate[NV][64], ghz[NV][64];
    double pk[64][3];
    for (int r = -1; r < rounds; r++) {
        if (r >= 0) peak_all(L.threads, pk[r]);
        for (int i = 0; i < NV; i++) {
            const int v = (i + (r < 0 ? 0 : r)) % (NV);
            const int api = v >= API;
            const double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
            double tc;
            if (api) {
                if (run_api(&L, v == API) != JATTN_OK) return fprintf(stderr, "call: %s\n", jattn_last_error()), 1;
                tc = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
            } else
                tc = run_direct_threads(&L, v);
            const double tw = now(CLOCK_MONOTONIC) - w0;
            const double g = core_ghz();
            if (r < 0) continue;
            cpu_rate[v][r] = flop / tc;
            wall_rate[v][r] = flop / tw / L.threads;
            ghz[v][r] = g;
        }
    }
    double p0[64], p1[64], p2[64];
    for (int r = 0; r < rounds; r++) p0[r] = pk[r][0], p1[r] = pk[r][1], p2[r] = pk[r][2];
    const double peak = median(p1, rounds), pmin = median(p0, rounds), pmax = median(p2, rounds);
    printf("call_lab %s (1,%d,%d,%d) threads %d, %s, %d rounds; FMA peak per thread with %d running: %.1f "
           "(slowest %.1f, fastest %.1f) GFLOP/s\n",
           L.bwd ? "bwd" : "fwd", L.H, L.S, D, L.threads, L.K->kernel, rounds, L.threads, 1e-9 * peak, 1e-9 * pmin,
           1e-9 * pmax);
    printf("%-10s %12s %8s %12s %8s %10s\n", "variant", "GFLOP/cpu-s", "% peak", "GFLOP/s", "% peak", "GHz after");
    for (int v = 0; v < NV; v++) {
        const double rc = median(cpu_rate[v], rounds), rw = median(wall_rate[v], rounds), gz = median(ghz[v], rounds);
        printf("%-10s %12.1f %8.1f %12.1f %8.1f %10.2f\n", names[v], 1e-9 * rc, 100.0 * rc / peak, 1e-9 * rw,
               100.0 * rw / peak, gz);
    }
    return 0;
}
