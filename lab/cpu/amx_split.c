/* f32-exact matrix products on AMX (TDPBF16PS) by a 3-way bf16 split, beside the AVX-512 FMA
 * peak of the same run: is AMX worth an instruction set of the cpu backend (issue 31)?
 *
 * Each f32 operand x is split into three bf16 parts, x = h + m 2^-8 + l 2^-16 exactly (h =
 * bf16(x), m = bf16((x - h) 2^8), l = bf16((x - h - m 2^-8) 2^16): the low parts pre-scaled by
 * powers of two, so they are as large as x and AMX, which flushes denormal inputs and outputs,
 * keeps them). A product x y needs the six cross products down to 2^-16 (h h; h m, m h; h l, l h,
 * m m); the dropped ones (m l, l m, l l) are below 2^-24 x y. Each product of two bf16 is exact in
 * f32; TDPBF16PS adds them into f32 accumulators, rounding each addition as a plain f32 dot
 * product does. Three accumulator tiles, one per power of two (C0: h h; C1: h m + m h, at 2^8;
 * C2: h l + l h + m m, at 2^16), are combined in AVX-512 as C0 + (C1 2^-8 + C2 2^-16).
 *
 * Shapes (attention's, D = 128): S = Q K^T for 48 queries x S keys over D (A = Q rows, B = K
 * rows in pairs), and O = P V for 48 queries x D over S keys (A = P rows, B = V rows in pairs),
 * S = 1536 and 4608. Per output tile (16 x 16) and step of 32 along the reduction: 3 A and 3 B
 * tile loads, 6 TDPBF16PS (the 8 tiles: C0-C2, A parts 3-5, B parts 6-7, B's low part reusing
 * tile 6). The operands are split and packed into tile layouts beforehand (timed apart: in
 * attention K and V would be split once per head, P once per key block).
 *
 * Reports, per shape: the rate in f32-equivalent GFLOP/s (2 M N K per product, counting each
 * f32 multiply-add once) per second of CPU time, its ratio to the AVX-512 FMA peak (16 register
 * FMA chains, CPU time, before and after), the split+pack time per element, and the accuracy
 * against float64 of the same f32 inputs: max and rms of |err| / (u sum |terms|), u = 2^-24,
 * beside a plain f32 FMA dot product on the same data (what the cpu backend's plain path does).
 * "tiny" inputs (1e-18: products near 2^-120) show AMX's limit: products below 2^-126 are flushed
 * (DAZ/FTZ), which the f32 FMA keeps as subnormals. The split is scalar C (not what a kernel
 * would ship); its time is reported to size that cost, not as a floor.
 *
 * usage: amx_split [REPS]
 * Without AMX (cpuid AMX-TILE and AMX-BF16, the OS's XTILEDATA state, Linux's arch_prctl
 * permission) it prints why and exits 0, after checking its split and accumulation logic with the
 * tile product emulated in C (AMX_SPLIT_EMULATE=1 forces that path on any CPU; its rates mean
 * nothing). build: cc -O2 lab/cpu/amx_split.c -lm -o /tmp/amx_split (x86-64, gcc or clang with
 * binutils >= 2.36; the AMX and AVX-512 code is in functions with their own target attributes). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if !defined(__x86_64__) || !defined(__GNUC__)
int main(void) {
    puts("amx_split: skipped (x86-64 with gcc or clang only)");
    return 0;
}
#else
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define D 128
#define MQ 48 /* queries: 3 tiles of 16 rows */
#define T 16  /* tile rows / f32 columns */
#define KS 32 /* bf16 elements of the reduction per tile step */

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return v[n / 2];
}

/* ---- bf16 ---------------------------------------------------------------------------- */
static uint16_t bf16_rne(float x) { /* round to nearest even; x finite */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf16_f(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
/* x = f(h) + f(m) 2^-8 + f(l) 2^-16 (exact for normal x not within 2^16 of the underflow) */
static void split3(float x, uint16_t *h, uint16_t *m, uint16_t *l) {
    *h = bf16_rne(x);
    const float r1 = x - bf16_f(*h); /* exact */
    *m = bf16_rne(r1 * 0x1p8f);
    const float r2 = r1 - bf16_f(*m) * 0x1p-8f; /* exact */
    *l = bf16_rne(r2 * 0x1p16f);
}

/* ---- tile layouts ---------------------------------------------------------------------
 * A tile: 16 rows x 32 bf16 (row stride 64 bytes). B tile (VNNI): 16 rows of pairs, row kp
 * holds (B[2kp][n], B[2kp+1][n]) for n < 16. A packed operand is an array of such tiles, one
 * per (row tile, reduction step), 3 parts each: [tile][part][16][32] bf16. */
typedef struct packed {
    uint16_t *t; /* [ntiles][3][16 * 32] */
    int rows, steps;
} packed;

/* A operand from a row-major matrix x [rows][k] (k a multiple of 32, rows of 16). */
static packed pack_a(const float *x, int rows, int k) {
    packed p = {aligned_alloc(64, (size_t)rows / T * (size_t)(k / KS) * 3 * T * KS * 2), rows / T, k / KS};
    for (int rt = 0; rt < rows / T; rt++)
        for (int s = 0; s < k / KS; s++) {
            uint16_t *t = p.t + ((size_t)rt * p.steps + s) * 3 * T * KS;
            for (int r = 0; r < T; r++)
                for (int c = 0; c < KS; c++)
                    split3(x[(size_t)(rt * T + r) * k + s * KS + c], &t[r * KS + c], &t[T * KS + r * KS + c],
                           &t[2 * T * KS + r * KS + c]);
        }
    return p;
}
/* B operand of a product A B where B[kk][n] = y(n, kk) = trans ? y[n][kk] : y[kk][n], y row-major
 * with row length ld: tiles over n (16 columns) and the reduction (32 = 16 pairs). */
static packed pack_b(const float *y, int ld, int n, int k, int trans) {
    packed p = {aligned_alloc(64, (size_t)n / T * (size_t)(k / KS) * 3 * T * KS * 2), n / T, k / KS};
    for (int nt = 0; nt < n / T; nt++)
        for (int s = 0; s < k / KS; s++) {
            uint16_t *t = p.t + ((size_t)nt * p.steps + s) * 3 * T * KS;
            for (int kp = 0; kp < KS / 2; kp++)
                for (int c = 0; c < T; c++)
                    for (int e = 0; e < 2; e++) {
                        const int kk = s * KS + 2 * kp + e, nn = nt * T + c;
                        const float v = trans ? y[(size_t)nn * ld + kk] : y[(size_t)kk * ld + nn];
                        const int at = kp * 2 * T + 2 * c + e;
                        split3(v, &t[at], &t[T * KS + at], &t[2 * T * KS + at]);
                    }
        }
    return p;
}

/* ---- the tile products: AMX, or emulated -------------------------------------------- */
#define AMX_LOAD(tmm, base) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #tmm ::"r"(base), "r"(64L) : "memory")
#define AMX_STORE(tmm, base) __asm__ volatile("tilestored %%tmm" #tmm ", (%0,%1,1)" ::"r"(base), "r"(64L) : "memory")
#define AMX_ZERO(tmm) __asm__ volatile("tilezero %%tmm" #tmm ::)
#define AMX_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

typedef struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

__attribute__((target("amx-tile,amx-bf16"), noinline)) static void amx_config(void) {
    static tilecfg cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) cfg.rows[i] = T, cfg.colsb[i] = 64;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}
__attribute__((target("amx-tile"), noinline)) static void amx_release(void) { __asm__ volatile("tilerelease" ::); }

/* C[rt][nt] (16 x 16, three accumulators, row stride 16 floats) = A tile row rt . B tile column nt
 * over all steps. */
__attribute__((target("amx-tile,amx-bf16"), noinline)) static void
amx_tile(const uint16_t *a, const uint16_t *b, int steps, float *c0, float *c1, float *c2) {
    AMX_ZERO(0);
    AMX_ZERO(1);
    AMX_ZERO(2);
    for (int s = 0; s < steps; s++) {
        const uint16_t *as = a + (size_t)s * 3 * T * KS, *bs = b + (size_t)s * 3 * T * KS;
        AMX_LOAD(3, as);
        AMX_LOAD(4, as + T * KS);
        AMX_LOAD(5, as + 2 * T * KS);
        AMX_LOAD(6, bs);
        AMX_LOAD(7, bs + T * KS);
        AMX_DP(0, 3, 6); /* h h */
        AMX_DP(1, 4, 6); /* m h */
        AMX_DP(2, 5, 6); /* l h */
        AMX_DP(1, 3, 7); /* h m */
        AMX_DP(2, 4, 7); /* m m */
        AMX_LOAD(6, bs + 2 * T * KS);
        AMX_DP(2, 3, 6); /* h l */
    }
    AMX_STORE(0, c0);
    AMX_STORE(1, c1);
    AMX_STORE(2, c2);
}

/* TDPBF16PS in C: each pair's products (exact in f32) added to the f32 accumulator one at a
 * time, rounding each addition; denormal inputs and outputs flushed, as AMX does. */
static float ftz(float x) { return fabsf(x) < 0x1p-126f ? 0.0f * x : x; }
static void emul_dp(float *c, const uint16_t *a, const uint16_t *b) {
    for (int m = 0; m < T; m++)
        for (int n = 0; n < T; n++) {
            float acc = c[m * T + n];
            for (int kp = 0; kp < KS / 2; kp++)
                for (int e = 1; e >= 0; e--)
                    acc = ftz(acc + ftz(bf16_f(a[m * KS + 2 * kp + e])) * ftz(bf16_f(b[kp * 2 * T + 2 * n + e])));
            c[m * T + n] = acc;
        }
}
static void emul_tile(const uint16_t *a, const uint16_t *b, int steps, float *c0, float *c1, float *c2) {
    memset(c0, 0, T * T * 4), memset(c1, 0, T * T * 4), memset(c2, 0, T * T * 4);
    for (int s = 0; s < steps; s++) {
        const uint16_t *as = a + (size_t)s * 3 * T * KS, *bs = b + (size_t)s * 3 * T * KS;
        emul_dp(c0, as, bs);
        emul_dp(c1, as + T * KS, bs);
        emul_dp(c2, as + 2 * T * KS, bs);
        emul_dp(c1, as, bs + T * KS);
        emul_dp(c2, as + T * KS, bs + T * KS);
        emul_dp(c2, as, bs + 2 * T * KS);
    }
}

/* out [rows][n] (row stride n) = A B, every output tile; the three accumulators combined. */
__attribute__((target("avx512f"), noinline)) static void combine(const float *c0, const float *c1, const float *c2,
                                                                 float *out, int ld) {
    for (int r = 0; r < T; r++) {
        const __m512 lo = _mm512_fmadd_ps(_mm512_load_ps(c2 + r * T), _mm512_set1_ps(0x1p-16f),
                                          _mm512_mul_ps(_mm512_load_ps(c1 + r * T), _mm512_set1_ps(0x1p-8f)));
        _mm512_storeu_ps(out + (size_t)r * ld, _mm512_add_ps(_mm512_load_ps(c0 + r * T), lo));
    }
}
static int emulate;
static void product(const packed *a, const packed *b, float *out) {
    _Alignas(64) float c0[T * T], c1[T * T], c2[T * T];
    for (int rt = 0; rt < a->rows; rt++)
        for (int nt = 0; nt < b->rows; nt++) {
            const uint16_t *at = a->t + (size_t)rt * a->steps * 3 * T * KS,
                           *bt = b->t + (size_t)nt * b->steps * 3 * T * KS;
            if (emulate)
                emul_tile(at, bt, a->steps, c0, c1, c2);
            else
                amx_tile(at, bt, a->steps, c0, c1, c2);
            combine(c0, c1, c2, out + (size_t)rt * T * (b->rows * T) + nt * T, b->rows * T);
        }
}

/* ---- AVX-512 FMA peak (16 register chains) ------------------------------------------ */
__attribute__((target("avx512f"), noinline)) static float fma_chains(long iters, float seed) {
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
static float sink;
static double fma_peak(int reps) {
    double r[32];
    for (int i = 0; i < reps; i++) {
        const double t0 = cpu_now();
        sink += fma_chains(4000000, 1.0f + (float)i);
        r[i] = 2.0 * 16 * 16 * 4000000.0 / (cpu_now() - t0);
    }
    return median(r, reps);
}

/* ---- accuracy against float64 ------------------------------------------------------- */
typedef struct acc {
    double max, rms;
    long n;
} acc;
static void acc_add(acc *e, double err, double mag) {
    const double x = mag > 0 ? err / (0x1p-24 * mag) : 0.0;
    if (x > e->max) e->max = x;
    e->rms += x * x, e->n++;
}

/* A [m][k] row-major, B given as y (B[kk][n] = trans ? y[n][kk] : y[kk][n]); err of out and of a
 * plain f32 FMA chain, in u sum |terms|. */
static void check(const float *x, const float *y, int ld, int m, int n, int k, int trans, const float *out, acc *e_amx,
                  acc *e_fma) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            float f = 0.0f;
            for (int kk = 0; kk < k; kk++) {
                const float b = trans ? y[(size_t)j * ld + kk] : y[(size_t)kk * ld + j];
                ref += (double)x[(size_t)i * k + kk] * b, mag += fabs((double)x[(size_t)i * k + kk] * b);
                f = fmaf(x[(size_t)i * k + kk], b, f);
            }
            acc_add(e_amx, fabs(out[(size_t)i * n + j] - ref), mag);
            acc_add(e_fma, fabs((double)f - ref), mag);
        }
}

static uint64_t rng = 88172645463325252ull;
static double uni(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) * 0x1p-53;
}
static float normal(void) { return (float)(sqrt(-2.0 * log(uni())) * cos(6.283185307179586 * uni())); }

static int amx_usable(const char **why) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return *why = "no cpuid leaf 7", 0;
    if (!(d & (1u << 24)) || !(d & (1u << 22))) return *why = "this CPU has no AMX-TILE / AMX-BF16", 0;
    if (!(c & (1u << 27))) return *why = "no OSXSAVE", 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return *why = "the OS does not enable the AMX tile state (XCR0)", 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return *why = "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused", 0;
    return 1;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 && atoi(argv[1]) > 0 ? (atoi(argv[1]) < 32 ? atoi(argv[1]) : 31) : 5;
    const char *why = "";
    const int forced = getenv("AMX_SPLIT_EMULATE") && atoi(getenv("AMX_SPLIT_EMULATE")) != 0;
    const int have = !forced && amx_usable(&why);
    emulate = !have;
    if (!have && !forced) printf("amx_split: AMX not usable here (%s); the emulated check only\n", why);
    const int have512 = __builtin_cpu_supports("avx512f");
    if (!have512) {
        printf("amx_split: skipped (no AVX-512F for the combine and the FMA peak)\n");
        return 0;
    }
    if (have) amx_config();
    const double peak0 = fma_peak(reps);
    printf("%-26s %10s %8s %12s %16s %16s\n", "product", "GFLOP/s", "x peak", "split ns/el", "err max/rms (u)",
           "f32 FMA max/rms");
    const int seqs[] = {1536, 4608};
    const int dists = 3; /* normal, large (+-1e3), tiny (1e-18: products near 2^-120) */
    for (int dist = 0; dist < dists; dist++)
        for (int si = 0; si < 2; si++) {
            const int S = emulate ? 128 : seqs[si]; /* emulation: small, its rates mean nothing */
            if (emulate && si > 0) continue;
            const float amp = dist == 1 ? 1e3f : dist == 2 ? 1e-18f : 1.0f;
            float *q = malloc((size_t)MQ * D * 4), *k = malloc((size_t)S * D * 4), *p = malloc((size_t)MQ * S * 4);
            float *v = malloc((size_t)S * D * 4), *s_out = malloc((size_t)MQ * S * 4),
                  *o_out = malloc((size_t)MQ * D * 4);
            for (int i = 0; i < MQ * D; i++) q[i] = dist == 1 ? amp * (float)(2 * uni() - 1) : amp * normal();
            for (int i = 0; i < S * D; i++) k[i] = dist == 1 ? amp * (float)(2 * uni() - 1) : amp * normal();
            for (int i = 0; i < S * D; i++) v[i] = amp * normal();
            for (int i = 0; i < MQ * S; i++) p[i] = (float)uni(); /* weights in (0, 1) */
            for (int which = 0; which < 2; which++) {             /* 0: S = Q K^T, 1: O = P V */
                const double t0 = cpu_now();
                packed A = which ? pack_a(p, MQ, S) : pack_a(q, MQ, D);
                packed B = which ? pack_b(v, D, D, S, 0) : pack_b(k, D, S, D, 1);
                const double split_ns = 1e9 * (cpu_now() - t0) / ((double)MQ * (which ? S : D) + (double)S * D);
                float *out = which ? o_out : s_out;
                double rate[32];
                const int n = which ? D : S, kk = which ? S : D;
                for (int r = -1; r < (emulate ? 0 : reps); r++) {
                    const double t1 = cpu_now();
                    product(&A, &B, out);
                    if (r >= 0) rate[r] = 2.0 * MQ * (double)n * kk / (cpu_now() - t1);
                }
                acc ea = {0, 0, 0}, ef = {0, 0, 0};
                if (which)
                    check(p, v, D, MQ, D, S, 0, out, &ea, &ef);
                else
                    check(q, k, D, MQ, S, D, 1, out, &ea, &ef);
                char name[64], r1[32] = "-", r2[32] = "-";
                snprintf(name, sizeof name, "%s S=%d %s", which ? "P V" : "Q K^T", S,
                         dist == 0   ? "normal"
                         : dist == 1 ? "large"
                                     : "tiny");
                if (!emulate) {
                    const double g = median(rate, reps);
                    snprintf(r1, sizeof r1, "%.1f", 1e-9 * g);
                    snprintf(r2, sizeof r2, "%.2f", g / peak0);
                }
                printf("%-26s %10s %8s %12.2f %8.2f/%-7.3f %8.2f/%-7.3f\n", name, r1, r2, split_ns, ea.max,
                       sqrt(ea.rms / (double)ea.n), ef.max, sqrt(ef.rms / (double)ef.n));
                free(A.t), free(B.t);
            }
            free(q), free(k), free(p), free(v), free(s_out), free(o_out);
        }
    const double peak1 = fma_peak(reps);
    printf("AVX-512 FMA peak (1 thread, CPU time): %.1f GFLOP/s before, %.1f after%s\n", 1e-9 * peak0, 1e-9 * peak1,
           emulate ? "; tile products emulated in C (rates not measured)" : "");
    if (have) amx_release();
    return sink == 12345.0f;
}
#endif
