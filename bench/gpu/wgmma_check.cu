/* wgmma_check: standalone correctness check and timing of the sm_90a attention kernels
 * (src/cuda/attention_f32_sm90_wgmma*.cu: v3.0 attention_f32_sm90_wgmma_64x64, v3.1
 * jattn_cuda_launch_v3) on an sm_90 GPU, before they are plugged into the cuda
 * backend.
 *
 * Build and run (on the H200):
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc/cuda \
 *        bench/gpu/wgmma_check.cu bench/gpu/attention_v3_0_sm90_smem.cu \
 *        src/cuda/attention_v3_sm90_tf32x3.cu src/cuda/sm90_contract.c -o /tmp/wgmma_check
 *   /tmp/wgmma_check [--kernel v3.0|v3.1] [--small] [seed]
 *     --kernel: only that version (run each in its own process: a kernel that faults ends
 *               its process, and the other's results survive)
 *     --small:  skip the large shapes (e.g. under compute-sanitizer)
 *
 * What it does: fresh random inputs (seed printed; pass it back to replay) from the four
 * distributions of docs/DESIGN.md §2 (uniform, normal, peaky with logit std 8, large |x| <= 1e3);
 * small and odd shapes checked in full (every output element, poisoned with NaN before the
 * call, and the bytes around and between output rows checked untouched), the FLUX shapes
 * (1,24,{1536,4608,16384},128) checked on a sample of query rows; all against a float64 CPU
 * reference, with the gates of docs/DESIGN.md §2 (the formulas of jattn_metrics_pass and
 * jattn_lse_pass over the JATTN_GATE_* constants of kit/metrics.h).
 * Then times the FLUX shapes: CUDA events around each call, median of 30 after 3 warm-up
 * calls, TFLOP/s = 4*B*H*Sq*Skv*D / t. Exits 1 on any failure, 2 without a usable GPU.
 * The last lines printed are a short table. */
#include "attention_sm90.h"
#include "metrics.h" /* the gate's constants (JATTN_GATE_*) */

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

#define CUDA_OK(call)                                                                                   \
    do {                                                                                                \
        cudaError_t err_ = (call);                                                                      \
        if (err_ != cudaSuccess) {                                                                      \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(err_)); \
            std::exit(1);                                                                               \
        }                                                                                               \
    } while (0)

/* ---- random inputs ------------------------------------------------------------------- */

struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
    double normal() {
        double u = uniform(), v = uniform();
        if (u < 1e-300) u = 1e-300;
        return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
    }
};

/* ZERO_Q is a diagnostic: q = 0 makes every softmax row uniform, so out = mean of v tests
 * the P V path alone; the lse of the other distributions depends on Q K^T alone. */
enum Dist { UNIFORM, NORMAL, PEAKY, LARGE, ZERO_Q };
const char *dist_name(Dist d) {
    static const char *const n[] = {"uniform", "normal", "peaky", "large", "zero_q"};
    return n[d];
}

enum Layout { FLUX, TOKEN_MAJOR, PADDED };
const char *layout_name(Layout l) {
    static const char *const n[] = {"flux", "token", "padded"};
    return n[l];
}

struct Strides {
    int64_t b, h, t;
};

/* [B, H, S, D] in a layout; returns the strides and the element count to allocate. */
Strides make_strides(Layout l, bool is_out, int64_t H, int64_t S, int64_t D, int64_t B, int64_t *count) {
    Strides s;
    const bool token_major = (l == TOKEN_MAJOR) || (l == FLUX && is_out);
    if (token_major) {
        s = {S * H * D, D, H * D};
    } else {
        const int64_t row = (l == PADDED) ? D + 12 : D; /* a gap of 12 floats keeps 16-byte alignment */
        s = {H * S * row, S * row, row};
    }
    *count = B * s.b;
    return s;
}

struct Case {
    int64_t B, H, Sq, Skv, D;
    Layout layout;
    int sample_rows; /* 0: check every row; else rows checked per (b, h) */
    bool timed;
};

struct Tensors {
    Case c;
    float scale;
    Strides sq, sk, sv, so;
    int64_t nq, nk, nv, no;
    std::vector<float> q, k, v;
};

void fill(std::vector<float> &x, const Strides &s, const Case &c, int64_t S, Rng &r, Dist d, double amp) {
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t h = 0; h < c.H; h++)
            for (int64_t i = 0; i < S; i++) {
                float *row = x.data() + b * s.b + h * s.h + i * s.t;
                for (int64_t e = 0; e < c.D; e++)
                    row[e] = (float)(d == UNIFORM || d == LARGE ? amp * (2.0 * r.uniform() - 1.0) : amp * r.normal());
            }
}

Tensors make_inputs(const Case &c, Dist d, Rng &r) {
    Tensors t;
    t.c = c;
    t.sq = make_strides(c.layout, false, c.H, c.Sq, c.D, c.B, &t.nq);
    t.sk = make_strides(c.layout, false, c.H, c.Skv, c.D, c.B, &t.nk);
    t.sv = make_strides(c.layout, false, c.H, c.Skv, c.D, c.B, &t.nv);
    t.so = make_strides(c.layout, true, c.H, c.Sq, c.D, c.B, &t.no);
    t.q.assign(t.nq, 0.f);
    t.k.assign(t.nk, 0.f);
    t.v.assign(t.nv, 0.f);
    t.scale = (float)(1.0 / std::sqrt((double)c.D));
    double qk_amp = 1.0, v_amp = 1.0;
    if (d == PEAKY) qk_amp = std::sqrt(8.0); /* logit std = scale * sqrt(D) * amp^2 = 8 */
    if (d == LARGE) {
        qk_amp = v_amp = 1e3;
        t.scale = (float)(30.0 / (std::sqrt((double)c.D) * 1e6 / 3.0));
    }
    fill(t.q, t.sq, c, c.Sq, r, d, d == ZERO_Q ? 0.0 : qk_amp);
    fill(t.k, t.sk, c, c.Skv, r, d, qk_amp);
    fill(t.v, t.sv, c, c.Skv, r, d, v_amp);
    return t;
}

/* ---- float64 reference of one query row -------------------------------------------------- */

void reference_row(const Tensors &t, int64_t b, int64_t h, int64_t i, std::vector<double> &s, double *o, double *lse) {
    const Case &c = t.c;
    const float *q = t.q.data() + b * t.sq.b + h * t.sq.h + i * t.sq.t;
    double mx = -INFINITY;
    for (int64_t j = 0; j < c.Skv; j++) {
        const float *k = t.k.data() + b * t.sk.b + h * t.sk.h + j * t.sk.t;
        double acc = 0.0;
        for (int64_t e = 0; e < c.D; e++) acc += (double)q[e] * (double)k[e];
        s[j] = (double)t.scale * acc;
        mx = std::max(mx, s[j]);
    }
    double sum = 0.0;
    for (int64_t e = 0; e < c.D; e++) o[e] = 0.0;
    for (int64_t j = 0; j < c.Skv; j++) {
        const double p = std::exp(s[j] - mx);
        sum += p;
        const float *v = t.v.data() + b * t.sv.b + h * t.sv.h + j * t.sv.t;
        for (int64_t e = 0; e < c.D; e++) o[e] += p * (double)v[e];
    }
    for (int64_t e = 0; e < c.D; e++) o[e] /= sum;
    *lse = mx + std::log(sum);
}

/* ---- metrics (the formulas of kit/metrics.h) -------------------------------------------- */

struct Metrics {
    double err2 = 0, ref2 = 0, dot = 0, out2 = 0, max_abs = 0, max_ref = 0, lse_worst = 0;
    int64_t count = 0, nonfinite = 0, lse_bad = 0, guard_bad = 0;
    double rel_l2() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2); }
    double cos() const { return (ref2 > 0 && out2 > 0) ? dot / std::sqrt(ref2 * out2) : (err2 == 0 ? 1.0 : 0.0); }
    void add(float out, double ref) {
        count++;
        max_ref = std::max(max_ref, std::fabs(ref));
        if (!std::isfinite(out)) {
            nonfinite++;
            return;
        }
        const double e = (double)out - ref;
        err2 += e * e;
        ref2 += ref * ref;
        out2 += (double)out * out;
        dot += (double)out * ref;
        max_abs = std::max(max_abs, std::fabs(e));
    }
    bool pass(jattn_precision prec) const {
        if (nonfinite || lse_bad || guard_bad || count == 0) return false;
        if (prec == JATTN_PRECISION_TF32) return rel_l2() <= JATTN_GATE_TF32_REL_L2;
        return rel_l2() <= JATTN_GATE_F32_REL_L2 && max_abs <= JATTN_GATE_F32_MAX_ABS * std::max(1.0, max_ref) &&
               cos() >= JATTN_GATE_F32_COS;
    }
};

/* ---- the kernel versions under test ------------------------------------------------------ */

typedef cudaError_t (*launch_fn)(const jattn_cuda_args *, cudaStream_t);

/* The library's v3 through its launcher (cuda_internal.h), in v3.0's shape. */
cudaError_t launch_v3(const jattn_cuda_args *a, cudaStream_t stream) {
    return (cudaError_t)jattn_cuda_launch_v3(a, nullptr, stream);
}
struct Kernel {
    const char *name;
    launch_fn launch;
};
const Kernel g_kernels[] = {
    {"v3.0", attention_f32_sm90_wgmma_64x64}, /* S = Q K^T, operands in shared memory */
    {"v3.1", launch_v3},                      /* S^T = K Q^T, K and V from registers */
};

/* ---- one check: run the kernel, compare, optionally time ------------------------------------ */

struct Device {
    float *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *lse = nullptr;
    int64_t nq = 0, nk = 0, nv = 0, no = 0, nl = 0;
};

const int64_t kGuard = 256; /* poisoned floats after out and lse */

void upload(const Tensors &t, Device &d) {
    const int64_t nl = t.c.B * t.c.H * t.c.Sq;
    CUDA_OK(cudaMalloc(&d.q, t.nq * sizeof(float)));
    CUDA_OK(cudaMalloc(&d.k, t.nk * sizeof(float)));
    CUDA_OK(cudaMalloc(&d.v, t.nv * sizeof(float)));
    CUDA_OK(cudaMalloc(&d.out, (t.no + kGuard) * sizeof(float)));
    CUDA_OK(cudaMalloc(&d.lse, (nl + kGuard) * sizeof(float)));
    d.nq = t.nq, d.nk = t.nk, d.nv = t.nv, d.no = t.no, d.nl = nl;
    CUDA_OK(cudaMemcpy(d.q, t.q.data(), t.nq * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.k, t.k.data(), t.nk * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.v, t.v.data(), t.nv * sizeof(float), cudaMemcpyHostToDevice));
}

void release(Device &d) {
    cudaFree(d.q);
    cudaFree(d.k);
    cudaFree(d.v);
    cudaFree(d.out);
    cudaFree(d.lse);
    d = Device();
}

jattn_cuda_args make_args(const Tensors &t, const Device &d, jattn_precision prec) {
    jattn_cuda_args a;
    std::memset(&a, 0, sizeof a);
    a.q = d.q, a.k = d.k, a.v = d.v, a.out = d.out, a.lse = d.lse;
    a.batch = t.c.B, a.heads = t.c.H, a.seq_q = t.c.Sq, a.seq_kv = t.c.Skv, a.head_dim = t.c.D;
    a.q_strides = {t.sq.b, t.sq.h, t.sq.t};
    a.k_strides = {t.sk.b, t.sk.h, t.sk.t};
    a.v_strides = {t.sv.b, t.sv.h, t.sv.t};
    a.out_strides = {t.so.b, t.so.h, t.so.t};
    a.scale = t.scale;
    a.precision = prec;
    return a;
}

struct Result {
    std::string label;
    Metrics m;
    bool ok;
    double median_us = 0, tflops = 0;
};

std::vector<Result> g_results;
int g_failures = 0;

std::string shape_label(const Case &c) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "(%lld,%lld,%lld,%lld,%lld) %s", (long long)c.B, (long long)c.H, (long long)c.Sq,
                  (long long)c.Skv, (long long)c.D, layout_name(c.layout));
    return buf;
}

void check(const Kernel &kern, const Tensors &t, Device &d, jattn_precision prec, Dist dist, Rng &r) {
    const Case &c = t.c;
    const char *pname = prec == JATTN_PRECISION_F32 ? "f32" : "tf32";
    const jattn_cuda_args a = make_args(t, d, prec);
    CUDA_OK(cudaMemset(d.out, 0xFF, (d.no + kGuard) * sizeof(float))); /* NaN poison */
    CUDA_OK(cudaMemset(d.lse, 0xFF, (d.nl + kGuard) * sizeof(float)));
    const cudaError_t launch = kern.launch(&a, 0);
    const cudaError_t sync = cudaDeviceSynchronize();
    Result res;
    res.label = std::string(kern.name) + " " + shape_label(c) + " " + dist_name(dist) + " " + pname;
    if (launch != cudaSuccess || sync != cudaSuccess) {
        std::printf("FAIL %-52s launch %s, sync %s\n", res.label.c_str(), cudaGetErrorName(launch),
                    cudaGetErrorName(sync));
        if (sync != cudaSuccess) std::exit(1); /* the context is gone */
        res.ok = false;
        g_failures++;
        g_results.push_back(res);
        return;
    }
    std::vector<float> out(d.no + kGuard), lse(d.nl + kGuard);
    CUDA_OK(cudaMemcpy(out.data(), d.out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse.data(), d.lse, lse.size() * sizeof(float), cudaMemcpyDeviceToHost));

    Metrics m;
    const double lse_tol = prec == JATTN_PRECISION_F32 ? JATTN_GATE_LSE_F32 : JATTN_GATE_LSE_TF32;
    std::vector<double> s(c.Skv), o(c.D);
    std::vector<char> written;
    if (c.sample_rows == 0) written.assign(out.size(), 0);
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t h = 0; h < c.H; h++) {
            std::vector<int64_t> rows;
            if (c.sample_rows == 0) {
                for (int64_t i = 0; i < c.Sq; i++) rows.push_back(i);
            } else {
                rows.push_back(0);
                rows.push_back(c.Sq - 1);
                while ((int)rows.size() < c.sample_rows) rows.push_back((int64_t)(r.next() % (uint64_t)c.Sq));
            }
            for (int64_t i : rows) {
                double ref_lse;
                reference_row(t, b, h, i, s, o.data(), &ref_lse);
                const int64_t base = b * t.so.b + h * t.so.h + i * t.so.t;
                for (int64_t e = 0; e < c.D; e++) {
                    m.add(out[base + e], o[e]);
                    if (!written.empty()) written[base + e] = 1;
                }
                const float got = lse[(b * c.H + h) * c.Sq + i];
                const double lerr = std::isfinite(got)
                                        ? std::fabs((double)got - ref_lse) / std::max(1.0, std::fabs(ref_lse))
                                        : INFINITY;
                m.lse_worst = std::max(m.lse_worst, lerr);
                if (!(lerr <= lse_tol)) m.lse_bad++;
            }
        }
    /* Nothing outside the output tensor was written: guard floats, and (full checks) the gaps
     * between rows of strided outputs, still hold the poison bit pattern. */
    uint32_t bits;
    for (int64_t e = 0; e < (int64_t)out.size(); e++) {
        if (e < d.no && (written.empty() || written[e])) continue;
        std::memcpy(&bits, &out[e], 4);
        if (bits != 0xFFFFFFFFu) m.guard_bad++;
    }
    for (int64_t e = d.nl; e < (int64_t)lse.size(); e++) {
        std::memcpy(&bits, &lse[e], 4);
        if (bits != 0xFFFFFFFFu) m.guard_bad++;
    }
    res.m = m;
    res.ok = m.pass(prec);
    if (!res.ok) g_failures++;
    std::printf(
        "%s %-53s rel_l2 %.3e max_abs %.3e (max|ref| %.3g) cos %.9f lse %.2e nonfinite %lld guard %lld rows %s\n",
        res.ok ? "PASS" : "FAIL", res.label.c_str(), m.rel_l2(), m.max_abs, m.max_ref, m.cos(), m.lse_worst,
        (long long)m.nonfinite, (long long)m.guard_bad, c.sample_rows ? "sampled" : "all");

    if (c.timed) {
        const int kWarm = 3, kReps = 30;
        cudaEvent_t e0, e1;
        CUDA_OK(cudaEventCreate(&e0));
        CUDA_OK(cudaEventCreate(&e1));
        for (int i = 0; i < kWarm; i++) CUDA_OK(kern.launch(&a, 0));
        std::vector<float> ms(kReps);
        for (int i = 0; i < kReps; i++) {
            CUDA_OK(cudaEventRecord(e0, 0));
            CUDA_OK(kern.launch(&a, 0));
            CUDA_OK(cudaEventRecord(e1, 0));
            CUDA_OK(cudaEventSynchronize(e1));
            CUDA_OK(cudaEventElapsedTime(&ms[i], e0, e1));
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[kReps / 2] * 1e-3;
        res.median_us = med * 1e6;
        res.tflops = 4.0 * c.B * c.H * c.Sq * c.Skv * c.D / med / 1e12;
        std::printf("TIME %-53s median %.1f us (min %.1f, max %.1f) %.1f TFLOP/s\n", res.label.c_str(), res.median_us,
                    ms[0] * 1e3, ms[kReps - 1] * 1e3, res.tflops);
        CUDA_OK(cudaEventDestroy(e0));
        CUDA_OK(cudaEventDestroy(e1));
    }
    g_results.push_back(res);
}

/* Same inputs, same output bits on a second call. */
void check_deterministic(const Kernel &kern, const Tensors &t, Device &d) {
    const jattn_cuda_args a = make_args(t, d, JATTN_PRECISION_F32);
    std::vector<float> o1(d.no), o2(d.no);
    CUDA_OK(kern.launch(&a, 0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o1.data(), d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemset(d.out, 0xFF, d.no * sizeof(float)));
    CUDA_OK(kern.launch(&a, 0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o2.data(), d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));
    const bool same = std::memcmp(o1.data(), o2.data(), d.no * sizeof(float)) == 0;
    std::printf("%s %s deterministic: two calls give identical bits\n", same ? "PASS" : "FAIL", kern.name);
    if (!same) g_failures++;
}

/* The launch function refuses what its contract excludes, enqueuing nothing. */
void check_rejections(const Kernel &kern, const Tensors &t, Device &d) {
    struct {
        const char *what;
        jattn_cuda_args a;
    } bad[4];
    for (auto &b : bad) b.a = make_args(t, d, JATTN_PRECISION_F32);
    bad[0].what = "head_dim 96";
    bad[0].a.head_dim = 96;
    bad[1].what = "q misaligned";
    bad[1].a.q = d.q + 1;
    bad[2].what = "k token stride 130";
    bad[2].a.k_strides.token = 130;
    bad[3].what = "scale 0";
    bad[3].a.scale = 0.f;
    for (auto &b : bad) {
        const cudaError_t e = kern.launch(&b.a, 0);
        const bool ok = e == cudaErrorInvalidValue;
        std::printf("%s %s rejects %s (%s)\n", ok ? "PASS" : "FAIL", kern.name, b.what, cudaGetErrorName(e));
        if (!ok) g_failures++;
    }
    cudaGetLastError();
}

} /* namespace */

int main(int argc, char **argv) {
    uint64_t seed = 0;
    bool small_only = false; /* --small: the small shapes only (for compute-sanitizer runs) */
    const char *only = nullptr;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--small") == 0)
            small_only = true;
        else if (std::strcmp(argv[i], "--kernel") == 0 && i + 1 < argc)
            only = argv[++i];
        else
            seed = std::strtoull(argv[i], nullptr, 0);
    }
    std::vector<Kernel> kernels;
    for (const Kernel &k : g_kernels)
        if (only == nullptr || std::strcmp(only, k.name) == 0) kernels.push_back(k);
    if (kernels.empty()) {
        std::printf("no kernel named %s\n", only);
        return 1;
    }
    if (seed == 0) {
        Rng t{(uint64_t)time(nullptr) ^ ((uint64_t)clock() << 32)};
        seed = t.next();
    }
    std::printf("wgmma_check seed %llu (replay: wgmma_check %llu)\n", (unsigned long long)seed,
                (unsigned long long)seed);
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        std::printf("no CUDA device\n");
        return 2;
    }
    std::printf("device %s, cc %d.%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    if (prop.major != 9 || prop.minor != 0) {
        std::printf("needs compute capability 9.0 (sm_90a image)\n");
        return 2;
    }
    Rng rng{seed};

    const Case small[] = {
        {1, 1, 1, 1, 128, FLUX, 0, false},           {2, 8, 8, 8, 128, FLUX, 0, false},
        {1, 2, 40, 40, 128, FLUX, 0, false},         {1, 1, 50, 50, 128, FLUX, 0, false},
        {1, 1, 64, 64, 128, FLUX, 0, false},         {1, 2, 65, 129, 128, FLUX, 0, false},
        {2, 3, 127, 33, 128, TOKEN_MAJOR, 0, false}, {1, 2, 129, 1000, 128, PADDED, 0, false},
        {2, 2, 1000, 7, 128, FLUX, 0, false},        {1, 3, 7, 65, 64, FLUX, 0, false},
        {2, 2, 200, 333, 64, TOKEN_MAJOR, 0, false}, {1, 2, 130, 257, 64, PADDED, 0, false},
        {1, 4, 256, 1536, 128, FLUX, 0, false},
    };
    const Case large[] = {
        {1, 24, 1536, 1536, 128, FLUX, 24, true},
        {1, 24, 4608, 4608, 128, FLUX, 12, true},
        {1, 24, 16384, 16384, 128, FLUX, 6, true},
    };
    const jattn_precision precs[] = {JATTN_PRECISION_F32, JATTN_PRECISION_TF32};

    std::printf("-- small and odd shapes, every row --\n");
    for (const Case &c : small)
        for (Dist dist : {UNIFORM, NORMAL, PEAKY, LARGE, ZERO_Q}) {
            if (dist == ZERO_Q && c.Skv < 64) continue; /* diagnostic: a few shapes suffice */
            Tensors t = make_inputs(c, dist, rng);
            Device d;
            upload(t, d);
            for (const Kernel &k : kernels)
                for (jattn_precision p : precs) check(k, t, d, p, dist, rng);
            if (&c == &small[7] && dist == NORMAL)
                for (const Kernel &k : kernels) {
                    check_deterministic(k, t, d);
                    check_rejections(k, t, d);
                }
            release(d);
        }
    std::printf("-- FLUX shapes, sampled rows, timed --\n");
    for (const Case &c : large) {
        if (small_only) break;
        for (Dist dist : {NORMAL, PEAKY}) {
            Tensors t = make_inputs(c, dist, rng);
            Device d;
            upload(t, d);
            for (const Kernel &k : kernels)
                for (jattn_precision p : precs) check(k, t, d, p, dist, rng);
            release(d);
        }
    }

    /* The short table: the timed FLUX shapes, then one line per kernel. */
    std::printf("\n%-55s %10s %10s %10s %9s %s\n", "kernel (B,H,Sq,Skv,D) layout dist prec", "rel_l2", "max_abs", "us",
                "TFLOP/s", "gate");
    for (const Result &r : g_results)
        if (r.median_us > 0)
            std::printf("%-55s %10.3e %10.3e %10.1f %9.1f %s\n", r.label.c_str(), r.m.rel_l2(), r.m.max_abs,
                        r.median_us, r.tflops, r.ok ? "PASS" : "FAIL");
    for (const Kernel &k : kernels) {
        int n = 0, failed = 0;
        double worst[2] = {0, 0};
        for (const Result &r : g_results) {
            if (r.label.compare(0, std::strlen(k.name) + 1, std::string(k.name) + " ") != 0) continue;
            n++;
            if (!r.ok) failed++;
            const bool tf32 = r.label.size() >= 5 && r.label.compare(r.label.size() - 5, 5, " tf32") == 0;
            worst[tf32] = std::max(worst[tf32], r.m.rel_l2());
        }
        std::printf("%s: %d checks, %d failed; worst rel_l2 f32 %.3e, tf32 %.3e\n", k.name, n, failed, worst[0],
                    worst[1]);
    }
    std::printf("%d failures in all (seed %llu)\n", g_failures, (unsigned long long)seed);
    return g_failures ? 1 : 0;
}
