/* attention v1 below head_dim 8 (launched by jattn_cuda_launch_v1 for head_dim < JATTN_CUDA_V1_SMALL_D,
 * reported as v1): the reference's algorithm in float64, one thread per query row. AUTO's forward at these
 * head dims (cuda_versions.c): with a handful of columns nothing averages a rounding away, and out and lse
 * must come out as the float64 answer rounded once for the backward's float32 floor (src/cuda/JOURNAL.md,
 * "The head_dim-1 chain is the forward's").
 *
 * Reads  q [B, H, Sq, D], k and v [B, Hkv, Skv, D] through element strides (head_dim contiguous, scalar
 *        loads); with key padding the attended keys' rows (key_padding.cuh); with a mask (kMasked: a
 *        window or a key bias) the mask's windows and the bias [B, (H,) Skv] (key_window.cuh).
 * Writes out [B, H, Sq, D] through its strides, lse [B, H, Sq] contiguous (natural log) when not NULL.
 *
 * A block of kRows threads owns kRows query rows of one (b, h) and walks the attended keys of its rows'
 * windows twice in tiles of kKeys keys staged in shared memory (every thread reads the same key: a
 * broadcast): first each row's maximum score, then its weights exp(s - max), their sum l and
 * o = sum_j w_j v_j, all in float64 (q * scale is exact in float64, a score's dot errs by ~2^-52 of its
 * terms, the exponential below by ~2^-50); out = o / l and lse = max + log l, each rounded once. As in
 * src/reference.c: a NaN score or an infinite maximum makes the row NaN, a key's weight multiplies its v
 * whatever it is, and a row with no attended key gets 0 and lse -inf. float64 runs at half the fp32 rate
 * on the data-centre GPUs (A100, H100) and a 64th on the others, where these head dims cost accordingly. */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_internal.h"
#include "v1_row.cuh"

namespace {

constexpr int kRows = 128; /* query rows per block, one per thread */
constexpr int kKeys = 256; /* keys per shared-memory tile */

/* e^x in float64 for x <= 0 (to ~2^-50 relative): x = n ln 2 + r, |r| <= ln 2 / 2, e^r by its Taylor
 * polynomial of degree 12 (remainder below 2^-52), times 2^n. e^0 = 1 exactly; x below -745.2 gives 0,
 * NaN gives NaN. */
__device__ __forceinline__ double exp_le0(double x) {
    if (!(x >= -745.2)) return x != x ? x : 0.0;
    const double n = rint(x * 1.4426950408889634);
    double r = fma(-n, 6.93147180369123816490e-01, x); /* ln 2 in two parts: n ln2_hi is exact */
    r = fma(-n, 1.90821492927058770002e-10, r);
    double e = 1.0 / 479001600.0;
    e = fma(e, r, 1.0 / 39916800.0);
    e = fma(e, r, 1.0 / 3628800.0);
    e = fma(e, r, 1.0 / 362880.0);
    e = fma(e, r, 1.0 / 40320.0);
    e = fma(e, r, 1.0 / 5040.0);
    e = fma(e, r, 1.0 / 720.0);
    e = fma(e, r, 1.0 / 120.0);
    e = fma(e, r, 1.0 / 24.0);
    e = fma(e, r, 1.0 / 6.0);
    e = fma(e, r, 0.5);
    e = fma(e, r, 1.0);
    e = fma(e, r, 1.0);
    return scalbn(e, (int)n);
}

/* The attended keys [kv0, kv0 + keys) of a tile into shared memory: k rows (and v rows with_v), and under a
 * mask each key's position and bias (0 without one). Every thread of the block calls it. */
template <int D, bool kMasked>
__device__ __forceinline__ void stage_tile(const jattn_cuda_params &p, const float *k, const float *v, const int *rows,
                                           const float *bias_row, int kv0, int keys, bool with_v, float *ks, float *vs,
                                           int64_t *kpos, float *kbias) {
    for (int i = threadIdx.x; i < keys * D; i += kRows) {
        const int j = i / D, d = i % D;
        const int64_t key = key_row(rows, kv0 + j);
        ks[i] = k[key * p.k_s + d];
        if (with_v) vs[i] = v[key * p.v_s + d];
    }
    if (kMasked)
        for (int j = threadIdx.x; j < keys; j += kRows) {
            const int64_t key = key_row(rows, kv0 + j);
            kpos[j] = key;
            kbias[j] = bias_row ? __ldg(bias_row + key) : 0.0f;
        }
}

template <int D, bool kMasked>
__global__ void __launch_bounds__(kRows)
    attention_f64_small_head_dim_v1(jattn_cuda_params p, KwMask mk, const float *bias, int64_t bias_b, int64_t bias_h) {
    __shared__ float ks[kKeys * D], vs[kKeys * D];
    __shared__ int64_t kpos[kMasked ? kKeys : 1];
    __shared__ float kbias[kMasked ? kKeys : 1];
    /* the thread's row; kMasked: the block walks the attended keys [r.kv_lo, r.kv_hi) of its rows' windows and
     * the row attends original keys [r.w_lo, r.w_hi) whose bias is not -inf */
    const V1Row r = v1_row<kMasked>(p, mk, bias, bias_b, bias_h, kRows, threadIdx.x);
    double qs[D];
#pragma unroll
    for (int d = 0; d < D; d++) qs[d] = r.row_valid ? (double)r.q[(int64_t)r.row * p.q_s + d] * (double)p.scale : 0.0;

    /* the score of tile key j, and whether the row attends it */
    auto score = [&](int j, bool &attended) {
        attended = r.row_valid;
        if (kMasked) attended = attended && kpos[j] >= r.w_lo && kpos[j] < r.w_hi && kbias[j] != -INFINITY;
        double s = 0.0;
#pragma unroll
        for (int d = 0; d < D; d++) s = fma(qs[d], (double)ks[j * D + d], s);
        return kMasked ? s + (double)kbias[j] : s;
    };

    double mx = -INFINITY; /* pass 1: the row's largest score (a NaN score is not one: its weight is NaN) */
    bool seen = false;
    for (int kv0 = r.kv_lo; kv0 < r.kv_hi; kv0 += kKeys) {
        const int keys = min(kKeys, r.kv_hi - kv0);
        __syncthreads(); /* the previous tile is consumed */
        stage_tile<D, kMasked>(p, r.k, r.v, r.rows, r.bias_row, kv0, keys, false, ks, vs, kpos, kbias);
        __syncthreads();
        for (int j = 0; j < keys; j++) {
            bool attended;
            const double s = score(j, attended);
            if (!attended) continue;
            seen = true;
            if (s > mx) mx = s;
        }
    }
    double l = 0.0, o[D]; /* pass 2: the weights, their sum and P V */
#pragma unroll
    for (int d = 0; d < D; d++) o[d] = 0.0;
    for (int kv0 = r.kv_lo; kv0 < r.kv_hi; kv0 += kKeys) {
        const int keys = min(kKeys, r.kv_hi - kv0);
        __syncthreads();
        stage_tile<D, kMasked>(p, r.k, r.v, r.rows, r.bias_row, kv0, keys, true, ks, vs, kpos, kbias);
        __syncthreads();
        for (int j = 0; j < keys; j++) {
            bool attended;
            const double s = score(j, attended);
            if (!attended) continue;
            const double w = exp_le0(s - mx); /* s - mx > 0 only where it is NaN (an infinite max) */
            l += w;
#pragma unroll
            for (int d = 0; d < D; d++) o[d] = fma(w, (double)vs[j * D + d], o[d]);
        }
    }

    if (!r.row_valid) return;
    float *out = p.out + r.b * p.o_b + r.h * p.o_h + (int64_t)r.row * p.o_s;
    float *lse = p.lse ? p.lse + (int64_t)r.bh * p.seq_q + r.row : nullptr;
    if (!seen) { /* no key to attend (key padding, a window, -inf biases): 0, lse -inf */
#pragma unroll
        for (int d = 0; d < D; d++) out[d] = 0.0f;
        if (lse) *lse = -INFINITY;
        return;
    }
    const double inv = 1.0 / l;
#pragma unroll
    for (int d = 0; d < D; d++) out[d] = (float)(o[d] * inv);
    if (lse) *lse = (float)(mx + log(l));
}

template <int D, bool kMasked>
cudaError_t launch(const jattn_cuda_params &p, const jattn_cuda_args *a, cudaStream_t stream) {
    const long long blocks = (long long)((p.seq_q + kRows - 1) / kRows) * p.batch * p.heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    attention_f64_small_head_dim_v1<D, kMasked><<<(unsigned)blocks, kRows, 0, stream>>>(
        p, kw_mask_of(*a), a->key_bias, a->bias_batch_stride, a->bias_head_stride);
    return cudaGetLastError();
}

template <bool kMasked>
cudaError_t launch_masked(const jattn_cuda_params &p, const jattn_cuda_args *a, cudaStream_t s) {
    switch (p.head_dim) {
    case 1: return launch<1, kMasked>(p, a, s);
    case 2: return launch<2, kMasked>(p, a, s);
    case 3: return launch<3, kMasked>(p, a, s);
    case 4: return launch<4, kMasked>(p, a, s);
    case 5: return launch<5, kMasked>(p, a, s);
    case 6: return launch<6, kMasked>(p, a, s);
    case 7: return launch<7, kMasked>(p, a, s);
    default: return cudaErrorInvalidValue;
    }
}

} /* namespace */

static_assert(JATTN_CUDA_V1_SMALL_D == 8, "the launch switch instantiates head_dim 1 .. 7");

extern "C" int jattn_cuda_launch_v1_small_head_dim(const jattn_cuda_args *a, void *stream) {
    const jattn_cuda_params p = flash_params_from_args(a);
    const cudaStream_t s = (cudaStream_t)stream;
    return (int)(kw_has_window(*a) || a->key_bias ? launch_masked<true>(p, a, s) : launch_masked<false>(p, a, s));
}
