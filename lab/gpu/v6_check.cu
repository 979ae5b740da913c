/* v6_check: the standalone harness of kernel v6 (src/cuda/attention_v6_sm90_fa3_f16x2.cu), with
 * kernel v4 (src/cuda/attention_v4_sm90_f16x2.cu) linked in for a same-run comparison.
 *
 * For each shape (B, H, S, D), Sq = Skv = S unless given as B,H,Sq,Skv,D, and each input
 * distribution (uniform [-1, 1]; normal; peaky: q, k ~ N(0, 8^(1/2)), logit std ~8), fresh
 * inputs from a printed seed: q, k, v head-major [B, H, S, D]; out token-major [B, Sq, H * D]
 * poisoned (NaN) before the call, every element checked finite; sampled query rows (spread over
 * heads and positions) compared element by element with a float64 CPU reference: the f32 gate of
 * docs/DESIGN.md section 2 (rel_l2 <= 2e-6, max_abs <= 1e-5 max(1, max|ref|), cos >= 0.99999),
 * and the lse. Timing: CUDA events around whole calls (pre-pass + kernel), 3 warm-ups, median of
 * `reps` runs; TFLOP/s = 4 B H Sq Skv D / t.
 *
 * --tail N: N single-row peaky draws (1, 2, 1, 1000, 128), v6 and v4, counted against the gate
 * (alone: only that). --no-probe: skip the V-descriptor probe (for profilers).
 *
 * usage: v6_check [--reps N] [--seed S] [--rows N] [--no-v4] [--check-only]
 *                 [--time-only] [--no-probe] [--tail N] [shape ...]   shape = B,H,S,D or B,H,Sq,Skv,D
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Isrc/cuda -Xcompiler -fopenmp
 *        lab/gpu/v6_check.cu src/cuda/attention_v6_sm90_fa3_f16x2.cu
 *        src/cuda/attention_v6_split_kv_f16x2.cu src/cuda/attention_v4_sm90_f16x2.cu
 *        src/cuda/attention_v4_split_kv_f16x2.cu src/cuda/sm90_contract.c -o v6_check */
#include <math.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <cuda_runtime.h>

#include "attention_sm90.h"

extern "C" cudaError_t split_kv_f16x2_v6(const jattn_cuda_args *a, void *workspace, cudaStream_t stream);

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)

struct Shape {
    int b, h, sq, skv, d;
};

enum Dist { UNIFORM, NORMAL, PEAKY, NDIST };
static const char *dist_name[NDIST] = {"uniform", "normal", "peaky"};

/* splitmix64 per element index: fills are reproducible from the seed and parallel. */
static inline uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double unit(uint64_t z) { return ((mix(z) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static void fill(std::vector<float> &x, uint64_t seed, Dist d, bool is_v) {
    const int64_t n = (int64_t)x.size();
    /* peaky: q, k ~ N(0, sqrt 8), so that the logit (scale 1/sqrt(D)) has std 8, as tests/harness.c */
    const double a = (d == PEAKY && !is_v) ? sqrt(8.0) : 1.0;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t z = seed * 0x100000001B3ull + (uint64_t)i;
        if (d == UNIFORM) {
            x[i] = (float)(2.0 * unit(z) - 1.0);
        } else {
            const double u1 = unit(2 * z), u2 = unit(2 * z + 1);
            x[i] = (float)(a * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        }
    }
}

struct Metrics {
    double diff2 = 0, ref2 = 0, out2 = 0, dot = 0, max_abs = 0, max_ref = 0, lse_max = 0;
    long nonfinite = 0;
    double rel_l2() const { return ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2); }
    double cosv() const { return (ref2 > 0 && out2 > 0) ? dot / sqrt(ref2 * out2) : 1.0; }
    bool pass() const {
        return nonfinite == 0 && rel_l2() <= 2e-6 && max_abs <= 1e-5 * std::max(1.0, max_ref) && cosv() >= 0.99999;
    }
};

/* float64 reference of sampled rows; compares out (token-major) and lse. */
static Metrics check(const Shape &s, float scale, const std::vector<float> &q, const std::vector<float> &k,
                     const std::vector<float> &v, const std::vector<float> &out, const std::vector<float> &lse,
                     int rows, uint64_t seed) {
    Metrics m;
    const int64_t D = s.d;
    /* every element finite (poisoned with NaN before the call) */
    long nonfinite = 0;
#pragma omp parallel for reduction(+ : nonfinite)
    for (int64_t i = 0; i < (int64_t)out.size(); ++i)
        if (!std::isfinite(out[i])) nonfinite++;
    m.nonfinite = nonfinite;
    std::vector<int64_t> pick(rows);
    for (int r = 0; r < rows; ++r) {
        const int64_t bh = (int64_t)(mix(seed + 7 * r) % (uint64_t)(s.b * s.h));
        int64_t i = (int64_t)(mix(seed + 7 * r + 3) % (uint64_t)s.sq);
        if (r == 0) i = s.sq - 1; /* the last row (a partial query block) */
        pick[r] = bh * s.sq + i;
    }
    std::vector<Metrics> part(rows);
#pragma omp parallel for schedule(dynamic)
    for (int r = 0; r < rows; ++r) {
        const int64_t bh = pick[r] / s.sq, i = pick[r] % s.sq, b = bh / s.h, h = bh % s.h;
        const float *qr = &q[(bh * s.sq + i) * D];
        const float *kh = &k[bh * s.skv * D], *vh = &v[bh * s.skv * D];
        std::vector<double> sc(s.skv), acc(D, 0.0);
        double mx = -INFINITY;
        for (int64_t j = 0; j < s.skv; ++j) {
            double t = 0;
            for (int64_t d = 0; d < D; ++d) t += (double)qr[d] * (double)kh[j * D + d];
            sc[j] = t * (double)scale;
            mx = std::max(mx, sc[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < s.skv; ++j) {
            const double p = exp(sc[j] - mx);
            l += p;
            for (int64_t d = 0; d < D; ++d) acc[d] += p * (double)vh[j * D + d];
        }
        Metrics &pm = part[r];
        const float *o = &out[((b * s.sq + i) * s.h + h) * D];
        for (int64_t d = 0; d < D; ++d) {
            const double ref = acc[d] / l, x = o[d], df = x - ref;
            pm.diff2 += df * df;
            pm.ref2 += ref * ref;
            pm.out2 += x * x;
            pm.dot += x * ref;
            pm.max_abs = std::max(pm.max_abs, fabs(df));
            pm.max_ref = std::max(pm.max_ref, fabs(ref));
        }
        const double lse_ref = mx + log(l);
        if (!lse.empty()) pm.lse_max = fabs((double)lse[bh * s.sq + i] - lse_ref) / std::max(1.0, fabs(lse_ref));
    }
    for (const Metrics &pm : part) {
        m.diff2 += pm.diff2;
        m.ref2 += pm.ref2;
        m.out2 += pm.out2;
        m.dot += pm.dot;
        m.max_abs = std::max(m.max_abs, pm.max_abs);
        m.max_ref = std::max(m.max_ref, pm.max_ref);
        m.lse_max = std::max(m.lse_max, pm.lse_max);
    }
    return m;
}

struct Dev {
    float *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *lse = nullptr;
    void *ws6 = nullptr, *ws4 = nullptr;
};

static jattn_cuda_args v4_args(const Shape &s, const Dev &d, float scale) {
    jattn_cuda_args a;
    memset(&a, 0, sizeof a);
    a.q = d.q;
    a.k = d.k;
    a.v = d.v;
    a.out = d.out;
    a.lse = d.lse;
    a.batch = s.b;
    a.heads = s.h;
    a.seq_q = s.sq;
    a.seq_kv = s.skv;
    a.head_dim = s.d;
    a.q_strides = {(int64_t)s.h * s.sq * s.d, (int64_t)s.sq * s.d, s.d};
    a.k_strides = {(int64_t)s.h * s.skv * s.d, (int64_t)s.skv * s.d, s.d};
    a.v_strides = a.k_strides;
    a.out_strides = {(int64_t)s.sq * s.h * s.d, s.d, (int64_t)s.h * s.d};
    a.scale = scale;
    a.precision = JATTN_PRECISION_F32;
    return a;
}

/* kernel: 6 = v6, 4 = v4 */
static cudaError_t launch(int kernel, const Shape &s, const Dev &d, float scale) {
    jattn_cuda_args a = v4_args(s, d, scale);
    if (kernel == 4) return (cudaError_t)jattn_cuda_launch_v4(&a, d.ws4, 0);
    return (cudaError_t)jattn_cuda_launch_v6(&a, d.ws6, 0);
}

static double time_ms(int kernel, const Shape &s, const Dev &d, float scale, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) CK(launch(kernel, s, d, scale));
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(e0));
        CK(launch(kernel, s, d, scale));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static double time_prepass_ms(const Shape &s, const Dev &d, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const jattn_cuda_args a = v4_args(s, d, 1.f);
    CK(split_kv_f16x2_v6(&a, d.ws6, 0));
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(e0));
        CK(split_kv_f16x2_v6(&a, d.ws6, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main(int argc, char **argv) {
    int reps = 20, rows = 64;
    uint64_t seed = 0;
    bool v4 = true, check_only = false, time_only = false, probe = true;
    int tail = 0;
    std::vector<Shape> shapes;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], nullptr, 10);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-v4"))
            v4 = false;
        else if (!strcmp(argv[i], "--check-only"))
            check_only = true;
        else if (!strcmp(argv[i], "--time-only"))
            time_only = true;
        else if (!strcmp(argv[i], "--no-probe"))
            probe = false;
        else if (!strcmp(argv[i], "--tail") && i + 1 < argc)
            tail = atoi(argv[++i]);
        else {
            int a[5], n = sscanf(argv[i], "%d,%d,%d,%d,%d", &a[0], &a[1], &a[2], &a[3], &a[4]);
            if (n == 4)
                shapes.push_back({a[0], a[1], a[2], a[2], a[3]});
            else if (n == 5)
                shapes.push_back({a[0], a[1], a[2], a[3], a[4]});
            else {
                fprintf(stderr, "bad argument %s\n", argv[i]);
                return 2;
            }
        }
    }
    if (seed == 0) seed = (uint64_t)time(nullptr);
    const bool shapes_given = !shapes.empty();
    if (shapes.empty()) shapes = {{1, 24, 1536, 1536, 128}, {1, 24, 4608, 4608, 128}, {1, 24, 16384, 16384, 128}};
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs; seed %llu; reps %d; rows sampled %d\n", prop.name, prop.multiProcessorCount,
           (unsigned long long)seed, reps, rows);

    /* probe the V descriptor on a small case */
    if (probe) {
        const Shape s = {1, 2, 200, 333, 128};
        const float scale = 1.f / sqrtf((float)s.d);
        std::vector<float> q((size_t)s.b * s.h * s.sq * s.d), k((size_t)s.b * s.h * s.skv * s.d), v(k.size());
        fill(q, seed + 1, NORMAL, false);
        fill(k, seed + 2, NORMAL, false);
        fill(v, seed + 3, NORMAL, true);
        Dev d;
        CK(cudaMalloc(&d.q, q.size() * 4));
        CK(cudaMalloc(&d.k, k.size() * 4));
        CK(cudaMalloc(&d.v, v.size() * 4));
        CK(cudaMalloc(&d.out, q.size() * 4));
        CK(cudaMalloc(&d.lse, (size_t)s.b * s.h * s.sq * 4));
        CK(cudaMalloc(&d.ws6, attention_f32_sm90_fa3_f16x2_workspace_bytes(s.b, s.h, s.skv, s.d)));
        CK(cudaMemcpy(d.q, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d.k, k.data(), k.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d.v, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
        {
            CK(cudaMemset(d.out, 0xFF, q.size() * 4));
            CK(launch(6, s, d, scale));
            CK(cudaDeviceSynchronize());
            std::vector<float> out(q.size()), lse((size_t)s.b * s.h * s.sq);
            CK(cudaMemcpy(out.data(), d.out, out.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(lse.data(), d.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
            const Metrics m = check(s, scale, q, k, v, out, lse, 32, seed);
            printf("probe V descriptor (LBO = 8 KB, SBO = 1 KB): rel_l2 %.2e max_abs %.2e nonfinite %ld -> %s\n",
                   m.rel_l2(), m.max_abs, m.nonfinite, m.pass() ? "PASS" : "FAIL");
        }
        cudaFree(d.q);
        cudaFree(d.k);
        cudaFree(d.v);
        cudaFree(d.out);
        cudaFree(d.lse);
        cudaFree(d.ws6);
    }

    if (tail > 0) {
        /* the single-row peaky tail: `tail` fresh draws of (1, 2, 1, 1000, 128), each checked by the gate */
        const Shape s = {1, 2, 1, 1000, 128};
        const float scale = 1.f / sqrtf((float)s.d);
        std::vector<float> q((size_t)s.b * s.h * s.sq * s.d), k((size_t)s.b * s.h * s.skv * s.d), v(k.size());
        std::vector<float> out(q.size()), lse((size_t)s.b * s.h * s.sq);
        Dev d;
        CK(cudaMalloc(&d.q, q.size() * 4));
        CK(cudaMalloc(&d.k, k.size() * 4));
        CK(cudaMalloc(&d.v, v.size() * 4));
        CK(cudaMalloc(&d.out, q.size() * 4));
        CK(cudaMalloc(&d.lse, lse.size() * 4));
        CK(cudaMalloc(&d.ws6, attention_f32_sm90_fa3_f16x2_workspace_bytes(s.b, s.h, s.skv, s.d)));
        CK(cudaMalloc(&d.ws4, attention_f32_sm90_f16x2_workspace_bytes(s.b, s.h, s.skv, s.d)));
        int fails[2] = {0, 0};
        double worst[2] = {0, 0}, sum_rel[2] = {0, 0};
        for (int t = 0; t < tail; ++t) {
            const uint64_t sd = seed + 100000 + 10 * (uint64_t)t;
            fill(q, sd + 1, PEAKY, false);
            fill(k, sd + 2, PEAKY, false);
            fill(v, sd + 3, PEAKY, true);
            CK(cudaMemcpy(d.q, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d.k, k.data(), k.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d.v, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
            for (int ki = 0; ki < 2; ++ki) {
                CK(cudaMemset(d.out, 0xFF, q.size() * 4));
                CK(launch(ki == 0 ? 6 : 4, s, d, scale));
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(out.data(), d.out, out.size() * 4, cudaMemcpyDeviceToHost));
                const Metrics m = check(s, scale, q, k, v, out, std::vector<float>(), 2, sd);
                if (!m.pass()) fails[ki]++;
                worst[ki] = std::max(worst[ki], m.max_abs / (1e-5 * std::max(1.0, m.max_ref)));
                sum_rel[ki] += m.rel_l2();
            }
        }
        printf("tail (1,2,1,1000,128) peaky, %d draws: v6 over the gate %d (worst max_abs/bound %.2f, "
               "mean rel_l2 %.2e); v4 %d (worst %.2f, mean rel_l2 %.2e)\n",
               tail, fails[0], worst[0], sum_rel[0] / tail, fails[1], worst[1], sum_rel[1] / tail);
        cudaFree(d.q);
        cudaFree(d.k);
        cudaFree(d.v);
        cudaFree(d.out);
        cudaFree(d.lse);
        cudaFree(d.ws6);
        cudaFree(d.ws4);
        if (!shapes_given) return fails[0] ? 1 : 0; /* --tail alone: the tail only */
    }

    struct Row {
        Shape s;
        double ms6;
        double ms4, pre_ms;
        double rel6[NDIST], rel4[NDIST];
        bool pass6, pass4;
    };
    std::vector<Row> table;
    int failures = 0;
    for (const Shape &s : shapes) {
        Row row{};
        row.s = s;
        row.pass6 = row.pass4 = true;
        const float scale = 1.f / sqrtf((float)s.d);
        const size_t nq = (size_t)s.b * s.h * s.sq * s.d, nk = (size_t)s.b * s.h * s.skv * s.d;
        std::vector<float> q(nq), k(nk), v(nk), out(nq), lse((size_t)s.b * s.h * s.sq);
        Dev d;
        CK(cudaMalloc(&d.q, nq * 4));
        CK(cudaMalloc(&d.k, nk * 4));
        CK(cudaMalloc(&d.v, nk * 4));
        CK(cudaMalloc(&d.out, nq * 4));
        CK(cudaMalloc(&d.lse, lse.size() * 4));
        CK(cudaMalloc(&d.ws6, attention_f32_sm90_fa3_f16x2_workspace_bytes(s.b, s.h, s.skv, s.d)));
        if (v4) CK(cudaMalloc(&d.ws4, attention_f32_sm90_f16x2_workspace_bytes(s.b, s.h, s.skv, s.d)));
        for (int di = 0; di < NDIST; ++di) {
            if (time_only && di != NORMAL) continue;
            const uint64_t sd = seed + 1000 * (uint64_t)(&s - &shapes[0]) + 10 * di;
            fill(q, sd + 1, (Dist)di, false);
            fill(k, sd + 2, (Dist)di, false);
            fill(v, sd + 3, (Dist)di, true);
            CK(cudaMemcpy(d.q, q.data(), nq * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d.k, k.data(), nk * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d.v, v.data(), nk * 4, cudaMemcpyHostToDevice));
            if (!time_only) {
                for (int kern : {6, 4}) {
                    if (kern == 4 && !v4) continue;
                    CK(cudaMemset(d.out, 0xFF, nq * 4));
                    CK(cudaMemset(d.lse, 0xFF, lse.size() * 4));
                    CK(launch(kern, s, d, scale));
                    CK(cudaDeviceSynchronize());
                    CK(cudaMemcpy(out.data(), d.out, nq * 4, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(lse.data(), d.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
                    const Metrics m = check(s, scale, q, k, v, out, lse, rows, sd);
                    bool same = true;
                    if (kern == 6) { /* bitwise repeatability: the same call again */
                        std::vector<float> again(nq);
                        CK(cudaMemset(d.out, 0xFF, nq * 4));
                        CK(launch(kern, s, d, scale));
                        CK(cudaDeviceSynchronize());
                        CK(cudaMemcpy(again.data(), d.out, nq * 4, cudaMemcpyDeviceToHost));
                        same = memcmp(again.data(), out.data(), nq * 4) == 0;
                        if (!same) failures++;
                    }
                    printf("%s", same ? "" : "NOT BITWISE REPEATABLE: ");
                    printf("check v%d (%d,%d,%d,%d,%d) %-7s seed %llu: rel_l2 %.3e max_abs %.3e (bound %.1e) "
                           "cos-1 %.1e lse_rel %.1e nonfinite %ld -> %s\n",
                           kern, s.b, s.h, s.sq, s.skv, s.d, dist_name[di], (unsigned long long)sd, m.rel_l2(),
                           m.max_abs, 1e-5 * std::max(1.0, m.max_ref), m.cosv() - 1, m.lse_max, m.nonfinite,
                           m.pass() ? "PASS" : "FAIL");
                    fflush(stdout);
                    if (kern == 6) {
                        row.rel6[di] = m.rel_l2();
                        if (!m.pass()) {
                            row.pass6 = false;
                            failures++;
                        }
                    } else {
                        row.rel4[di] = m.rel_l2();
                        if (!m.pass()) row.pass4 = false;
                    }
                }
            }
            if (di == NORMAL && !check_only) {
                row.ms6 = time_ms(6, s, d, scale, reps);
                row.pre_ms = time_prepass_ms(s, d, reps);
                if (v4) row.ms4 = time_ms(4, s, d, scale, reps);
                /* v6 again: the spread of repeated timings */
                const double again = time_ms(6, s, d, scale, reps);
                const double fl = 4.0 * s.b * s.h * (double)s.sq * s.skv * s.d;
                printf("time (%d,%d,%d,%d,%d):", s.b, s.h, s.sq, s.skv, s.d);
                printf(" v6 %.4f ms %.1f TFLOP/s;", row.ms6, fl / row.ms6 * 1e-9);
                printf(" v6 again %.1f; pre-pass %.4f ms", fl / again * 1e-9, row.pre_ms);
                if (v4) printf("; v4 %.4f ms %.1f TFLOP/s", row.ms4, fl / row.ms4 * 1e-9);
                printf("\n");
                fflush(stdout);
            }
        }
        cudaFree(d.q);
        cudaFree(d.k);
        cudaFree(d.v);
        cudaFree(d.out);
        cudaFree(d.lse);
        cudaFree(d.ws6);
        if (d.ws4) cudaFree(d.ws4);
        table.push_back(row);
    }
    printf("\n| shape | v6 TFLOP/s | pre-pass ms | v4 TFLOP/s | v6 rel_l2 u/n/p | v4 rel_l2 u/n/p | v6 gate |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    for (const Row &r : table) {
        const double fl = 4.0 * r.s.b * r.s.h * (double)r.s.sq * r.s.skv * r.s.d;
        printf("| %d,%d,%d,%d,%d | ", r.s.b, r.s.h, r.s.sq, r.s.skv, r.s.d);
        printf("%.1f", r.ms6 > 0 ? fl / r.ms6 * 1e-9 : 0.0);
        printf(" | %.4f | %.1f | %.1e %.1e %.1e | %.1e %.1e %.1e | %s |\n", r.pre_ms,
               r.ms4 > 0 ? fl / r.ms4 * 1e-9 : 0.0, r.rel6[0], r.rel6[1], r.rel6[2], r.rel4[0], r.rel4[1], r.rel4[2],
               r.pass6 ? "PASS" : "FAIL");
    }
    printf("v6 failures: %d\n", failures);
    return failures ? 1 : 0;
}
