/* The cpu backend's hot loops timed one by one, beside the FMA peak of the same run: where the
 * forward's time goes on a core, without hardware counters (the VMs these run on expose none).
 *
 * usage: loop_lab [-t] [REPS] [TABLE...]  (TABLE: a kernel name or isa, default every table built in
 *                                          and supported here, widest first, then loop_lab's own
 *                                          instances (loop_lab_tiles.c); -t: the task lines only)
 * Per table, per loop: GFLOP per second of this thread's CPU time (CLOCK_THREAD_CPUTIME_ID, so
 * a machine shared with other work reads the same), median of REPS, and its share of the FMA
 * peak (16 register FMA chains, the instruction set's widest vector, measured before and after
 * each table; the median of both). The loops, at head_dim D = 128 and one key block (BK keys):
 *   scores_plain, scores      the compensated and the plain S^T tiles over a key block, every
 *                             full SJ-key tile (the task's loop), K rows at stride D ("block":
 *                             BK rows, 48 KiB at BK = 96) or all at one row ("l1", stride 0)
 *   softmax                   softmax_block over the block (with low parts): ns per call and
 *                             per key row (it has no FLOP of the attention's products)
 *   pv                        the DR-row P V tiles over the whole head_dim, V rows as K's
 *   task 1536, 4608           the table's forward task for a group of 8 query blocks (8 QB
 *                             queries) of one head against S keys (K, V in L2 at 1536), called
 *                             directly on one thread; "peaky": q, k x4 (the compensated path)
 *   bwd_tile 1536             the backward of a group of 4 query tiles against 1536 keys
 *   clock                     the core clock by a chain of dependent multiplies: idle, right after the
 *                             FMA peak and right after the task (does the task run at the clock
 *                             the peak was measured at?)
 * FLOP: 2 per multiply-add of the attention's own products (the FlashAttention convention). */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_kernels.h"
#include "jattn.h"

/* the template instances of loop_lab_tiles.c (LAB_TABLES: a comma list of their addresses) */
#ifdef LAB_HAVE_TABLES
#include "loop_lab_tables.h"
#endif

#define D 128
#define MAXQB 48

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 16 independent FMA chains of the widest vector: FLOP per CPU-second. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"), noinline)) static float peak512(long iters, float seed) {
    __m512 a[16];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f * seed);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    __m512 s = a[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx2,fma"), noinline)) static float peak256(long iters, float seed) {
    __m256 a[12];
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f * seed);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
    float out[8], s = 0;
    for (int i = 1; i < 12; i++) a[0] = _mm256_add_ps(a[0], a[i]);
    _mm256_storeu_ps(out, a[0]);
    for (int i = 0; i < 8; i++) s += out[i];
    return s;
}
#endif

/* The core clock: a chain of dependent integer multiplies (3 cycles each on the x86-64 cores this
 * runs on) timed by the wall clock, ~1 ms in all. Run right after a loop, it reads the clock that
 * loop left the core at (an AVX-512 frequency licence lasts milliseconds after the last wide
 * instruction). Not adds: a chain of immediate adds read 9-18 "GHz" on the Xeon of
 * bench/results/h200-2026-12-04-v7-call2/xeon/, so that core runs more than one a cycle (its
 * renamer folds them, presumably); a multiply cannot be folded. 0 where not x86-64. */
static double core_ghz(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    double best = 0.0; /* the fastest of 10 windows of ~0.1 ms: a window the thread lost to another reads low */
    for (int w = 0; w < 10; w++) {
        struct timespec a, b;
        const long n = 2000; /* iterations of 50 multiplies */
        uint64_t x = 1, one = 1;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < n; i++) __asm__ volatile(".rept 50\n\timulq %1, %0\n\t.endr" : "+r"(x) : "r"(one));
        clock_gettime(CLOCK_MONOTONIC, &b);
        const double t = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        if (3.0 * 50.0 * (double)n / t * 1e-9 > best) best = 3.0 * 50.0 * (double)n / t * 1e-9;
    }
    return best;
#else
    return 0.0;
#endif
}

static float sink;
static double fma_peak(int vl, int reps) {
#if defined(__x86_64__) && defined(__GNUC__)
    double best[64];
    const long iters = 4000000;
    for (int r = 0; r < reps && r < 64; r++) {
        const double t0 = cpu_now();
        double flop;
        if (vl == 16)
            sink += peak512(iters, 1.0f + (float)r), flop = 2.0 * 16 * 16 * iters;
        else
            sink += peak256(iters, 1.0f + (float)r), flop = 2.0 * 8 * 12 * iters;
        best[r] = flop / (cpu_now() - t0);
    }
    qsort(best, (size_t)reps, sizeof *best, cmpd);
    return best[reps / 2];
#else
    (void)vl, (void)reps;
    return 0.0;
#endif
}

typedef struct lab {
    const cpu_kernels *kern;
    float *k, *v, *qt, *st, *sl, *ot, *m, *ml, *l, *alpha;
} lab;

static void loop_scores(const lab *L, int plain, ptrdiff_t ks) {
    const cpu_kernels *K = L->kern;
    const int bk = K->bk, sj = plain ? K->sjp : K->sj, qb = K->qb;
    for (int j = 0; j + sj <= bk; j += sj) {
        if (plain)
            K->scores_plain(sj, D, L->k + j * ks, ks, L->qt, L->st + j * qb, L->sl + j * qb);
        else
            K->scores(sj, D, L->k + j * ks, ks, L->qt, L->st + j * qb, L->sl + j * qb);
    }
}
static void loop_pv(const lab *L, ptrdiff_t vs) {
    const cpu_kernels *K = L->kern;
    for (int d = 0; d + K->dr <= D; d += K->dr) K->pv(K->dr, K->bk, L->v + d, vs, L->st, L->alpha, L->ot + d * K->qb);
}

/* median GFLOP per CPU-second of `calls` calls of one loop, `flop` each */
typedef enum { SCORES_PLAIN, SCORES, SOFTMAX, PV } which;
static double time_loop(const lab *L, which w, ptrdiff_t stride, int reps, double *ns_per_call) {
    const cpu_kernels *K = L->kern;
    const int calls = 200;
    double rate[64], ns[64];
    for (int r = -1; r < reps && r < 64; r++) {
        const double t0 = cpu_now();
        for (int c = 0; c < calls; c++) {
            switch (w) {
            case SCORES_PLAIN: loop_scores(L, 1, stride); break;
            case SCORES: loop_scores(L, 0, stride); break;
            case SOFTMAX:
                /* fresh logits each call: the running max restarts (m = -inf) */
                for (int i = 0; i < K->qb; i++) L->m[i] = -INFINITY, L->ml[i] = L->l[i] = 0.0f;
                K->softmax_block(K->bk, 0.1f, L->st, L->sl, L->m, L->ml, L->l, L->alpha);
                break;
            case PV: loop_pv(L, stride); break;
            }
        }
        const double t = cpu_now() - t0;
        if (r < 0) continue;
        const int sj = w == SCORES_PLAIN ? K->sjp : K->sj;
        const double flop = 2.0 * (K->bk / sj * sj) * D * K->qb;
        rate[r] = flop * calls / t;
        ns[r] = 1e9 * t / calls;
    }
    qsort(rate, (size_t)reps, sizeof *rate, cmpd);
    qsort(ns, (size_t)reps, sizeof *ns, cmpd);
    *ns_per_call = ns[reps / 2];
    return rate[reps / 2];
}

static void *aligned(size_t floats) {
    void *p = NULL;
    if (posix_memalign(&p, 64, floats * sizeof(float) + 64) != 0) exit(1);
    memset(p, 0, floats * sizeof(float));
    return p;
}

#define CPU_BWD_TILES 4 /* the driver's CPU_BWD_GROUP */

/* The forward task of one (b, h) and a group of 8 query blocks (8 QB queries) against S keys,
 * called on the table directly (one thread, no driver): GFLOP per CPU-second. Standard-normal-
 * like inputs (uniform [-1, 1] q, k: the plain scores path), or x4 q and k ("peaky": the
 * compensated path). bwd: instead the backward of a group of 4 query tiles (bwd_tile, dq, dk
 * and dv), FLOP 2.5x the forward's of the same queries. */
static double time_task(const cpu_kernels *K, int S, int peaky, int bwd, int reps) {
    const int Sq = (bwd ? CPU_BWD_TILES : 8) * K->qb;
    const size_t nq = (size_t)Sq * D, nk = (size_t)S * D;
    float *q = aligned(nq), *k = aligned(nk), *v = aligned(nk), *out = aligned(nq), *lse = aligned((size_t)Sq);
    float *g = aligned(nq), *dq = aligned(nq), *dk = aligned(nk), *dv = aligned(nk);
    uint64_t s = 7;
    const float amp = peaky ? 4.0f * 1.7f : 1.7f; /* uniform [-1.7, 1.7]: variance ~1 */
    for (size_t i = 0; i < nq; i++)
        s = s * 6364136223846793005ull + 1, q[i] = amp * ((float)(s >> 40) * 0x1p-23f - 1.0f);
    for (size_t i = 0; i < nk; i++)
        s = s * 6364136223846793005ull + 1, k[i] = amp * ((float)(s >> 40) * 0x1p-23f - 1.0f);
    for (size_t i = 0; i < nk; i++) s = s * 6364136223846793005ull + 1, v[i] = (float)(s >> 40) * 0x1p-23f - 1.0f;
    for (size_t i = 0; i < nq; i++) s = s * 6364136223846793005ull + 1, g[i] = (float)(s >> 40) * 0x1p-23f - 1.0f;
    double k_norm2 = K->max_row_norm2(S, D, k, D);
    const jattn_strides qs = {(int64_t)Sq * D, (int64_t)Sq * D, D}, ks = {(int64_t)S * D, (int64_t)S * D, D};
    const float scale = 1.0f / sqrtf((float)D);
    const cpu_flash_args a = {q,        k,    v,    out, lse, 1,  1,     Sq,
                              S,        D,    qs,   ks,  ks,  qs, scale, (float)(scale * 1.4426950408889634),
                              &k_norm2, NULL, NULL, 0};
    const cpu_bwd_args ba = {a, out, lse, g, NULL, dq, dk, dv, qs, qs, ks, ks};
    const int64_t wf = cpu_task_workspace_floats(K, D, 8), wb = cpu_bwd_tile_workspace_floats(K, D, CPU_BWD_TILES);
    float *ws = aligned((size_t)(wf > wb ? wf : wb));
    if (bwd) K->task(&a, 0, 0, 0, CPU_BWD_TILES, ws); /* out and lse for the backward */
    double rate[64];
    for (int r = -1; r < reps && r < 64; r++) {
        const double t0 = cpu_now();
        for (int c = 0; c < 4; c++)
            if (bwd)
                K->bwd_tile(&ba, 0, 0, 0, CPU_BWD_TILES, 0, -1, CPU_BWD_DKV | CPU_BWD_DQ, ws);
            else
                K->task(&a, 0, 0, 0, 8, ws);
        const double t = cpu_now() - t0;
        if (r >= 0) rate[r] = 4.0 * 4.0 * Sq * (double)S * D * (bwd ? 2.5 : 1.0) / t;
    }
    free(q), free(k), free(v), free(out), free(lse), free(g), free(dq), free(dk), free(dv), free(ws);
    qsort(rate, (size_t)reps, sizeof *rate, cmpd);
    return rate[reps / 2];
}

int main(int argc, char **argv) {
    /* -t first: the task lines only (A/B runs of variants) */
    const int tasks_only = argc > 1 && strcmp(argv[1], "-t") == 0;
    if (tasks_only) argc--, argv++;
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    const cpu_kernels *tabs[32];
    int n = cpu_kernels_available(tabs, 16);
#ifdef LAB_TABLES
    const cpu_kernels *extra[] = {LAB_TABLES};
    if (__builtin_cpu_supports("avx512f"))
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) tabs[n++] = extra[i];
#endif
    printf("%-34s %-22s %10s %8s %10s\n", "table", "loop", "GFLOP/s", "% peak", "ns/call");
    for (int t = 0; t < n; t++) {
        const cpu_kernels *K = tabs[t];
        if (argc > 2) {
            int want = 0;
            for (int a = 2; a < argc; a++) want |= strcmp(argv[a], K->kernel) == 0 || strcmp(argv[a], K->isa) == 0;
            if (!want) continue;
        }
        lab L = {K, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        L.k = aligned((size_t)K->bk * D), L.v = aligned((size_t)K->bk * D);
        L.qt = aligned((size_t)D * K->qb), L.ot = aligned((size_t)D * K->qb);
        L.st = aligned((size_t)K->bk * K->qb), L.sl = aligned((size_t)K->bk * K->qb);
        L.m = aligned(MAXQB), L.ml = aligned(MAXQB), L.l = aligned(MAXQB), L.alpha = aligned(MAXQB);
        uint64_t s = 1;
        for (int i = 0; i < K->bk * D; i++) {
            s = s * 6364136223846793005ull + 1;
            L.k[i] = (float)((int)(s >> 40) % 2001 - 1000) * 1e-3f;
            L.v[i] = L.k[i] * 0.5f;
        }
        for (int i = 0; i < D * K->qb; i++) L.qt[i] = (float)(i % 17) * 0.01f;
        for (int i = 0; i < K->qb; i++) L.alpha[i] = 0.5f;
        const double ghz_idle = core_ghz();
        const double peak0 = fma_peak(K->vl, reps), ghz_peak = core_ghz();
        struct {
            const char *name;
            which w;
            ptrdiff_t stride;
        } loops[] = {{"scores_plain block", SCORES_PLAIN, D},
                     {"scores_plain l1", SCORES_PLAIN, 0},
                     {"scores block", SCORES, D},
                     {"scores l1", SCORES, 0},
                     {"pv block", PV, D},
                     {"pv l1", PV, 0},
                     {"softmax (scores)", SOFTMAX, 0}};
        double rates[8], ns[8];
        const size_t nloops = tasks_only ? 0 : sizeof loops / sizeof loops[0];
        for (size_t i = 0; i < nloops; i++) {
            if (loops[i].w == SOFTMAX) loop_scores(&L, 0, D); /* logits to take the softmax of */
            rates[i] = time_loop(&L, loops[i].w, loops[i].stride, reps, &ns[i]);
        }
        const double task = time_task(K, 1536, 0, 0, reps), ghz_task = core_ghz();
        const double task_peaky = time_task(K, 1536, 1, 0, reps), task_4608 = time_task(K, 4608, 0, 0, reps);
        const double bwd = time_task(K, 1536, 0, 1, reps);
        const double peak1 = fma_peak(K->vl, reps), peak = 0.5 * (peak0 + peak1);
        printf("%-34s %-22s %10.1f %8s %10s   (before %.1f, after %.1f)\n", K->kernel, "fma peak", 1e-9 * peak, "100",
               "", 1e-9 * peak0, 1e-9 * peak1);
        for (size_t i = 0; i < nloops; i++)
            if (loops[i].w == SOFTMAX)
                printf("%-34s %-22s %10s %8s %10.0f   (%.2f ns per key row of %d queries)\n", K->kernel, loops[i].name,
                       "-", "-", ns[i], ns[i] / K->bk, K->qb);
            else
                printf("%-34s %-22s %10.1f %8.1f %10.0f\n", K->kernel, loops[i].name, 1e-9 * rates[i],
                       100.0 * rates[i] / peak, ns[i]);
        printf("%-34s %-22s %10.1f %8.1f\n", K->kernel, "task 1536", 1e-9 * task, 100.0 * task / peak);
        printf("%-34s %-22s %10.1f %8.1f\n", K->kernel, "task 1536 peaky", 1e-9 * task_peaky,
               100.0 * task_peaky / peak);
        printf("%-34s %-22s %10.1f %8.1f\n", K->kernel, "task 4608", 1e-9 * task_4608, 100.0 * task_4608 / peak);
        printf("%-34s %-22s %10.1f %8.1f\n", K->kernel, "bwd_tile 1536", 1e-9 * bwd, 100.0 * bwd / peak);
        printf("%-34s %-22s %10s %8s %10s   core GHz (dependent imul): idle %.2f, after the fma peak %.2f, after "
               "the task %.2f\n",
               K->kernel, "clock", "", "", "", ghz_idle, ghz_peak, ghz_task);
        fflush(stdout);
    }
    return (int)(sink == 12345.0f);
}
