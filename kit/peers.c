/* Peers measured beside jattn by `jattn bench` and bench/cpu (peers.h).
 *
 * FMA peak: as ../shared/peers/fma_peak.c — independent FMA chains held in registers (16 zmm
 * chains for AVX-512, 12 ymm for AVX2, 16 q-register chains for NEON, plain C otherwise), each
 * thread running its own, median of 5 timed repeats after a warm-up.
 *
 * BLAS attention: as ../shared/peers/blas_attention.c — per head, sgemm S = scale Q K^T into an
 * [S, S] buffer, row softmax (max-subtracted expf), sgemm O = P V written token-major; heads
 * over OpenMP threads, BLAS single-threaded. OpenBLAS is found at run time (dlopen of
 * libopenblas.so.0, cblas_sgemm and openblas_set_num_threads by dlsym), so nothing in the
 * build depends on it. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "clock.h"
#include "peers.h"

/* ---- FMA peak ------------------------------------------------------------------------ */

#define PEAK_ITERS 20000000L
#define PEAK_REPS 5

#if defined(__x86_64__) && defined(__GNUC__)
#define CHAINS_512 16
__attribute__((target("avx512f,fma"), noinline)) static float fma_chains_avx512(long iters, float seed) {
    __m512 a[CHAINS_512];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f * seed);
    for (int i = 0; i < CHAINS_512; i++) a[i] = _mm512_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS_512; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    }
    __m512 s = a[0];
    for (int i = 1; i < CHAINS_512; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}
#define CHAINS_256 12
__attribute__((target("avx2,fma"), noinline)) static float fma_chains_avx2(long iters, float seed) {
    __m256 a[CHAINS_256];
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f * seed);
    for (int i = 0; i < CHAINS_256; i++) a[i] = _mm256_set1_ps(seed + (float)i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS_256; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
    }
    __m256 s = a[0];
    for (int i = 1; i < CHAINS_256; i++) s = _mm256_add_ps(s, a[i]);
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif

#if defined(__aarch64__)
#define CHAINS_NEON 16
__attribute__((noinline)) static float fma_chains_neon(long iters, float seed) {
    float32x4_t a[CHAINS_NEON];
    const float32x4_t x = vdupq_n_f32(0.999999f), y = vdupq_n_f32(1e-7f * seed);
    for (int i = 0; i < CHAINS_NEON; i++) a[i] = vdupq_n_f32(seed + (float)i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS_NEON; i++) a[i] = vfmaq_f32(y, a[i], x);
    }
    float32x4_t s = a[0];
    for (int i = 1; i < CHAINS_NEON; i++) s = vaddq_f32(s, a[i]);
    return vaddvq_f32(s);
}
#endif

#define CHAINS_SCALAR 8
__attribute__((noinline)) static float fma_chains_scalar(long iters, float seed) {
    float a[CHAINS_SCALAR];
    const float x = 0.999999f, y = 1e-7f * seed;
    for (int i = 0; i < CHAINS_SCALAR; i++) a[i] = seed + (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS_SCALAR; i++) a[i] = a[i] * x + y;
    float s = 0;
    for (int i = 0; i < CHAINS_SCALAR; i++) s += a[i];
    return s;
}

typedef float (*chains_fn)(long, float);

volatile float jattn_peers_sink; /* keeps the chains' results alive */

int jattn_peer_fma_peak(int threads, double *gflops, const char **isa, char *err, size_t errlen) {
    chains_fn fn = fma_chains_scalar;
    double flops_per_iter = 2.0 * CHAINS_SCALAR;
    const char *name = "scalar";
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) {
        fn = fma_chains_avx512, flops_per_iter = 2.0 * 16 * CHAINS_512, name = "avx512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        fn = fma_chains_avx2, flops_per_iter = 2.0 * 8 * CHAINS_256, name = "avx2";
    }
#elif defined(__aarch64__)
    fn = fma_chains_neon, flops_per_iter = 2.0 * 4 * CHAINS_NEON, name = "neon";
#endif
    if (threads < 1) {
        snprintf(err, errlen, "fma peak: threads %d < 1", threads);
        return -1;
    }
#ifndef _OPENMP
    if (threads > 1) {
        snprintf(err, errlen, "fma peak: built without OpenMP, cannot run %d threads", threads);
        return -1;
    }
#endif
    double t[PEAK_REPS];
    for (int r = -1; r < PEAK_REPS; r++) {
        const double t0 = kit_now();
        float acc = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(+ : acc)
        acc += fn(PEAK_ITERS, 1.0f + (float)omp_get_thread_num());
#else
        acc += fn(PEAK_ITERS, 1.0f);
#endif
        jattn_peers_sink += acc;
        if (r >= 0) t[r] = kit_now() - t0;
    }
    *gflops = threads * flops_per_iter * (double)PEAK_ITERS / kit_median(t, PEAK_REPS) / 1e9;
    *isa = name;
    return 0;
}

/* ---- BLAS attention ------------------------------------------------------------------ */

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 }; /* CBLAS enum values */
typedef void (*sgemm_fn)(int order, int transa, int transb, int m, int n, int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc);
typedef void (*set_threads_fn)(int);

static sgemm_fn load_sgemm(char *err, size_t errlen) {
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(err, errlen, "blas attention: no OpenBLAS (dlopen libopenblas.so.0 failed)");
        return NULL;
    }
    sgemm_fn gemm;
    set_threads_fn set_threads;
    void *sym = dlsym(lib, "cblas_sgemm");
    memcpy(&gemm, &sym, sizeof gemm);
    sym = dlsym(lib, "openblas_set_num_threads");
    memcpy(&set_threads, &sym, sizeof set_threads);
    if (!gemm) {
        snprintf(err, errlen, "blas attention: libopenblas has no cblas_sgemm");
        return NULL;
    }
    if (set_threads) set_threads(1);
    return gemm;
}

static void softmax_rows(float *p, int S) {
    for (int i = 0; i < S; i++, p += S) {
        float mx = -INFINITY, sum = 0;
        for (int j = 0; j < S; j++) mx = p[j] > mx ? p[j] : mx;
        for (int j = 0; j < S; j++) {
            p[j] = expf(p[j] - mx);
            sum += p[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < S; j++) p[j] *= inv;
    }
}

static void blas_attention(sgemm_fn gemm, const float *q, const float *k, const float *v, float *out, int H, int S,
                           int D, float **scratch, int threads) {
    const float scale = 1.0f / sqrtf((float)D);
    (void)threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (int h = 0; h < H; h++) {
#ifdef _OPENMP
        float *p = scratch[omp_get_thread_num()];
#else
        float *p = scratch[0];
#endif
        const size_t off = (size_t)h * S * D;
        gemm(ROW_MAJOR, NO_TRANS, TRANS, S, S, D, scale, q + off, D, k + off, D, 0.0f, p, S);
        softmax_rows(p, S);
        gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, S, D, S, 1.0f, p, S, v + off, D, 0.0f, out + (size_t)h * D, H * D);
    }
}

int jattn_peer_blas_attention(int heads, int seq, int dim, int threads, int reps, const float *q, const float *k,
                              const float *v, float *out, double *ms, char *err, size_t errlen) {
    if (heads < 1 || seq < 1 || dim < 1 || threads < 1 || reps < 1) {
        snprintf(err, errlen, "blas attention: bad arguments");
        return -1;
    }
    sgemm_fn gemm = load_sgemm(err, errlen);
    if (!gemm) return -1;
    float **scratch = calloc((size_t)threads, sizeof *scratch);
    double *t = malloc((size_t)reps * sizeof *t);
    int ok = scratch && t;
    for (int i = 0; ok && i < threads; i++)
        ok = (scratch[i] = malloc((size_t)seq * (size_t)seq * sizeof(float))) != NULL;
    if (ok) {
        blas_attention(gemm, q, k, v, out, heads, seq, dim, scratch, threads); /* warm-up */
        for (int r = 0; r < reps; r++) {
            const double t0 = kit_now();
            blas_attention(gemm, q, k, v, out, heads, seq, dim, scratch, threads);
            t[r] = kit_now() - t0;
        }
        *ms = kit_median(t, reps) * 1e3;
    } else {
        snprintf(err, errlen, "blas attention: allocation of the %d x %d score buffers failed", seq, seq);
    }
    for (int i = 0; scratch && i < threads; i++) free(scratch[i]);
    free(scratch);
    free(t);
    return ok ? 0 : -1;
}
