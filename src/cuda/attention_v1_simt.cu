/* attention v1: plain fp32 SIMT flash attention (the baseline, and the correct path for any
 * problem: head_dim up to 512, every device, a single key; AUTO runs it where v6 and v7 do not:
 * the ladders of src/cuda/NOTES.md).
 *
 * Reads  q [B,H,Sq,D], k and v [B,H,Skv,D] through element strides (head_dim contiguous, any
 *        4-byte alignment: scalar loads only);
 * writes out [B,H,Sq,D] through its strides (token-major directly), lse [B,H,Sq] contiguous.
 *
 * Design: a block of V1_WARPS warps owns V1_WARPS query rows of one (b,h), one row per warp.
 * Key tiles of V1_KEYS keys (k padded by one float per row against bank conflicts, v dense)
 * are staged in shared memory by the whole block. Lane j scores key j of the tile with a
 * compensated fp32 dot product over D (TwoProduct by fma, TwoSum), then one multiply by the
 * scale, the rounding errors kept beside the score (s, s_lo); scores stay in natural units so
 * s - max is exact when s is, and the weight is exp2(((s - max) + (s_lo - max_lo)) log2 e),
 * the max key's exactly 1 (one key returns v bit for bit); a warp
 * max/sum gives the online softmax (exp2 of (s - max) * log2 e); each lane owns D/32 columns
 * of the output row and accumulates each tile's sum_j p_j v[j,d] (p_j broadcast by shuffle)
 * from zero, then adds it into O and the tile's row sum into l with Kahan compensation, so
 * rows of 64K keys keep fp32 accuracy; with one column per lane (head_dim <= 32) l and O are pairs
 * whose rescale and additions keep every rounding error, and out and lse are rounded once from
 * float64 (the head_dim-1 training chain needs them that close: src/cuda/JOURNAL.md). Precision:
 * fp32 throughout (also when tf32 is asked for).
 *
 * Masks (kMasked: a window or a key bias; grouped heads and key padding in every instance): a block
 * walks the attended keys of its rows' windows only (kw_tile_keys); each lane tests its key against
 * its warp's row (the window in original positions, the bias not -inf), unattended keys score -inf
 * and are left out of P V by a ballot of the attended lanes (no 0 * Inf reaches a row from a key it does
 * not attend); the bias joins the score pair by TwoSum (s + b, its rounding error into s_lo); a row
 * with no attended key gets 0 and lse -inf.
 *
 * Below head_dim 8 v1 is attention_v1_small_head_dim.cu's float64 kernel (this file's launcher hands it over).
 *
 * Measured: src/cuda/NOTES.md's version table (each step: JOURNAL.md beside it).
 * Verdict: the baseline and the correct path (D > 256, seq_kv = 1, sequences beyond v7's 32-bit
 * index, a call whose v7 workspace the pool cannot give), an order of magnitude slower than v7.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_internal.h"
#include "v1_row.cuh"

#define V1_WARPS 8
#define V1_KEYS 32 /* one key per lane */
#define WARP 32
#define LOG2E 1.44269504088896340736f

/* sum += x with Kahan compensation c (sum - c is the better estimate). */
__device__ __forceinline__ void kahan_add(float &sum, float &c, float x) {
    const float y = x - c, t = sum + y;
    c = (t - sum) - y;
    sum = t;
}

/* TwoSum: the rounding error of t = a + b (t + two_sum_err(a, b, t) = a + b exactly for finite a, b). */
__device__ __forceinline__ float two_sum_err(float a, float b, float t) {
    const float bp = t - a;
    return (a - (t - bp)) + (b - bp);
}

/* x + x_lo summed over the warp by a butterfly, every addition's rounding error (TwoSum) carried in
 * x_lo; every lane ends with the same pair. A non-finite x leaves x_lo non-finite. */
__device__ __forceinline__ void warp_sum_pair(float &x, float &x_lo) {
#pragma unroll
    for (int off = WARP / 2; off > 0; off /= 2) {
        const float b = __shfl_xor_sync(0xffffffffu, x, off), b_lo = __shfl_xor_sync(0xffffffffu, x_lo, off);
        const float t = x + b;
        x_lo = (x_lo + b_lo) + two_sum_err(x, b, t);
        x = t;
    }
}

/* The running sum (hi - comp) becomes (hi - comp) alpha + (x + x_lo), the product's and the
 * addition's rounding errors kept in comp (a plain rescale loses half an ulp of the whole row each
 * time the row's maximum moves: at D = 1 nothing averages it away, and the backward's dK carries it
 * amplified); a non-finite error term (an infinite sum) is dropped. */
__device__ __forceinline__ void scale_add_pair(float &hi, float &comp, float alpha, float x, float x_lo) {
    const float xx = hi * alpha, xx_err = fmaf(hi, alpha, -xx);
    const float t = xx + x, t_err = two_sum_err(xx, x, t);
    const float c = fmaf(comp, alpha, -((xx_err + t_err) + x_lo));
    comp = isfinite(c) ? c : 0.0f;
    hi = t;
}

/* COLS = output columns per lane: head_dim <= 32 * COLS. kMasked: a window or a key bias (mk: the mask's
 * windows, bias: the key bias as jattn_cuda_args has it). */
template <int COLS, bool kMasked>
__global__ void __launch_bounds__(V1_WARPS *WARP)
    attention_f32_simt_v1(jattn_cuda_params p, KwMask mk, const float *bias, int64_t bias_b, int64_t bias_h) {
    extern __shared__ float smem[];
    const int D = p.head_dim;
    const int k_stride = D + 1;          /* padded: lane j reads row j, column d -> bank (j + d) % 32 */
    float *qs = smem;                    /* [V1_WARPS][D] */
    float *ks = qs + V1_WARPS * D;       /* [V1_KEYS][D + 1] */
    float *vs = ks + V1_KEYS * k_stride; /* [V1_KEYS][D] */

    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    /* the warp's row; kMasked: the block walks the attended keys [r.kv_lo, r.kv_hi) of its rows' windows and
     * the row attends original keys [r.w_lo, r.w_hi) whose bias is not -inf */
    const V1Row r = v1_row<kMasked>(p, mk, bias, bias_b, bias_h, V1_WARPS, warp);
    bool seen = false; /* kMasked: the row attends a key */

    for (int d = lane; d < D; d += WARP) qs[warp * D + d] = r.row_valid ? r.q[r.row * p.q_s + d] : 0.0f;

    float o[COLS], o_comp[COLS];
#pragma unroll
    for (int c = 0; c < COLS; c++) o[c] = o_comp[c] = 0.0f;
    float m = -INFINITY, ml = 0.0f, l = 0.0f, l_comp = 0.0f; /* running max as a pair m + ml */

    for (int kv0 = r.kv_lo; kv0 < r.kv_hi; kv0 += V1_KEYS) {
        const int keys = min(V1_KEYS, r.kv_hi - kv0);
        __syncthreads(); /* the previous tile is consumed (and qs written, first time) */
        for (int i = threadIdx.x; i < V1_KEYS * D; i += V1_WARPS * WARP) {
            const int j = i / D, d = i % D;
            const bool ok = j < keys;
            const int64_t key = ok ? key_row(r.rows, kv0 + j) : 0;
            ks[j * k_stride + d] = ok ? r.k[key * p.k_s + d] : 0.0f;
            vs[j * D + d] = ok ? r.v[key * p.v_s + d] : 0.0f;
        }
        __syncthreads();

        /* S: lane = key */
        /* compensated dot product: every product's rounding error (fma) and every add's
         * (TwoSum) is carried, so s is q.k to ~2^-40 relative before the one rounding of
         * the scale */
        float sum = 0.0f, err = 0.0f;
        const float *qr = qs + warp * D, *kr = ks + lane * k_stride;
        for (int d = 0; d < D; d++) {
            const float prod = qr[d] * kr[d], prod_err = fmaf(qr[d], kr[d], -prod);
            const float t = sum + prod;
            err += two_sum_err(sum, prod, t) + prod_err;
            sum = t;
        }
        /* The score as a pair s + s_lo: s = (q.k) * scale rounded once, s_lo the rounding
         * errors of the dot product's last add and of the scale's product, so that the softmax
         * sees the logit to ~2^-40 (with f32 logits alone, D = 1 and logits of order 30 miss
         * the gate in a few % of draws: an f32 logit is off by up to 2e-6 there). An infinite
         * or NaN sum stands as it is (its error terms are NaN) with s_lo = 0. */
        float s, s_lo = 0.0f;
        if (isfinite(sum)) {
            const float dot = sum + err, dot_lo = err - (dot - sum);
            s = dot * p.scale;
            if (isfinite(s)) s_lo = fmaf(dot, p.scale, -s) + dot_lo * p.scale;
        } else {
            s = sum * p.scale;
        }
        /* kMasked: the lane's key attended by the warp's row (window, bias), and its bias added to the pair */
        bool attended = lane < keys;
        if constexpr (kMasked) {
            const int64_t key = attended ? key_row(r.rows, kv0 + lane) : 0;
            const float bk = attended && r.bias_row ? __ldg(r.bias_row + key) : 0.0f;
            attended = attended && key >= r.w_lo && key < r.w_hi && bk != -INFINITY;
            if (attended && r.bias_row) {
                const float t = s + bk; /* t + e = s + bk exactly (an infinite s or bk stands as t) */
                const float e = two_sum_err(s, bk, t);
                s_lo = isfinite(t) ? s_lo + e : 0.0f;
                s = t;
            }
        }
        if (!attended) s = -INFINITY, s_lo = 0.0f;
        const unsigned att = kMasked ? __ballot_sync(0xffffffffu, attended) : 0u;
        if (kMasked) seen |= att != 0;

        /* online softmax */
        float tile_max = s;
#pragma unroll
        for (int off = WARP / 2; off > 0; off /= 2)
            tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
        /* the max's own s_lo (of the lowest lane attaining it): the max key gets weight
         * exp2(0) = 1 exactly (one key returns its v row bit for bit) */
        const unsigned at_max = __ballot_sync(0xffffffffu, attended && s == tile_max);
        const float tile_ml = __shfl_sync(0xffffffffu, s_lo, at_max ? __ffs(at_max) - 1 : 0);
        const float m_new = fmaxf(m, tile_max);
        const float ml_new = tile_max > m ? (at_max ? tile_ml : 0.0f) : ml;
        const bool none = m_new == -INFINITY; /* no finite score yet: weights 0 */
        const float m_use = none ? 0.0f : m_new, ml_use = none ? 0.0f : ml_new;
        /* With one column per lane (D <= 32) the weights are exp of the exact logit difference
         * in double, rounded once to float: nothing averages a weight's error away there, and
         * exp2f of a rounded (x * log2 e) errs by a few ulp where a rounded weight errs by half
         * of one (the D = 1 tail: 6 in 20000 draws over the gate with exp2f, H200). */
        float alpha, pj;
        if (COLS == 1) {
            alpha = (float)exp(((double)m - m_use) + ((double)ml - ml_use));
            pj = attended ? (float)exp(((double)s - m_use) + ((double)s_lo - ml_use)) : 0.0f;
        } else {
            alpha = exp2f(((m - m_use) + (ml - ml_use)) * LOG2E);
            pj = attended ? exp2f(((s - m_use) + (s_lo - ml_use)) * LOG2E) : 0.0f;
        }
        float psum = pj, psum_lo = 0.0f;
        if (COLS == 1) {
            warp_sum_pair(psum, psum_lo);
            scale_add_pair(l, l_comp, alpha, psum, psum_lo);
        } else {
#pragma unroll
            for (int off = WARP / 2; off > 0; off /= 2) psum += __shfl_xor_sync(0xffffffffu, psum, off);
            l *= alpha;
            l_comp *= alpha;
            kahan_add(l, l_comp, psum);
        }
        m = m_new;
        ml = ml_new;

        /* O = alpha O + P V (this tile's part from zero). With one column per lane (D <= 32)
         * the tile's sum keeps every product's and addition's rounding error (TwoProduct by
         * fma, TwoSum), added to O's compensation: with few columns nothing averages an
         * error away, and a nearly cancelling sum (D = 1) loses many ulps to a plain chain. */
        float o_tile[COLS], o_tile_lo[COLS];
#pragma unroll
        for (int c = 0; c < COLS; c++) o_tile[c] = o_tile_lo[c] = 0.0f;
        for (int j = 0; j < keys; j++) {
            if (kMasked && !((att >> j) & 1u)) continue; /* not attended: its v (Inf, NaN) never meets a 0 */
            const float pb = __shfl_sync(0xffffffffu, pj, j);
#pragma unroll
            for (int c = 0; c < COLS; c++) {
                const int d = lane + c * WARP;
                if (d >= D) continue;
                const float x = vs[j * D + d];
                if (COLS == 1) {
                    const float prod = pb * x, prod_err = fmaf(pb, x, -prod);
                    const float t = o_tile[c] + prod;
                    o_tile_lo[c] += two_sum_err(o_tile[c], prod, t) + prod_err;
                    o_tile[c] = t;
                } else {
                    o_tile[c] = fmaf(pb, x, o_tile[c]);
                }
            }
        }
#pragma unroll
        for (int c = 0; c < COLS; c++) {
            if (COLS == 1) {
                scale_add_pair(o[c], o_comp[c], alpha, o_tile[c], o_tile_lo[c]);
            } else {
                o[c] *= alpha;
                o_comp[c] *= alpha;
                kahan_add(o[c], o_comp[c], o_tile[c]);
            }
        }
    }

    if (!r.row_valid) return;
    float *out = p.out + r.b * p.o_b + r.h * p.o_h + (int64_t)r.row * p.o_s;
    if (kMasked ? !seen : r.n_kv == 0) { /* no key to attend (key padding, a window, -inf biases): 0, lse -inf */
        for (int d = lane; d < D; d += WARP) out[d] = 0.0f;
        if (p.lse && lane == 0) p.lse[(int64_t)r.bh * p.seq_q + r.row] = -INFINITY;
        return;
    }
    if (COLS == 1) { /* the pairs divided and the lse summed in double, each rounded once */
        const double l64 = (double)l - l_comp;
        if (lane < D) out[lane] = (float)(((double)o[0] - o_comp[0]) / l64);
        if (p.lse && lane == 0) p.lse[(int64_t)r.bh * p.seq_q + r.row] = (float)(((double)m + ml) + log(l64));
        return;
    }
    const float inv_l = 1.0f / (l - l_comp);
#pragma unroll
    for (int c = 0; c < COLS; c++) {
        const int d = lane + c * WARP;
        if (d < D) out[d] = (o[c] - o_comp[c]) * inv_l;
    }
    if (p.lse && lane == 0) p.lse[(int64_t)r.bh * p.seq_q + r.row] = (m + ml) + logf(l - l_comp);
}

template <int COLS, bool kMasked>
static cudaError_t launch(const jattn_cuda_params *p, const jattn_cuda_args *a, cudaStream_t stream) {
    const int D = p->head_dim;
    const size_t smem = sizeof(float) * ((size_t)V1_WARPS * D + (size_t)V1_KEYS * (D + 1) + (size_t)V1_KEYS * D);
    cudaError_t e = cudaFuncSetAttribute(attention_f32_simt_v1<COLS, kMasked>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const long long q_blocks = (p->seq_q + V1_WARPS - 1) / V1_WARPS;
    const long long blocks = q_blocks * p->batch * p->heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    attention_f32_simt_v1<COLS, kMasked><<<(unsigned)blocks, V1_WARPS * WARP, smem, stream>>>(
        *p, kw_mask_of(*a), a->key_bias, a->bias_batch_stride, a->bias_head_stride);
    return cudaGetLastError();
}

extern "C" int jattn_cuda_launch_v1(const jattn_cuda_args *a, void *workspace, void *stream) {
    (void)workspace; /* none needed */
    if (a->head_dim < JATTN_CUDA_V1_SMALL_D) return jattn_cuda_launch_v1_small_head_dim(a, stream);
    const jattn_cuda_params kp = flash_params_from_args(a), *p = &kp;
    cudaStream_t s = (cudaStream_t)stream;
    const int D = p->head_dim;
    if (kw_has_window(*a) || a->key_bias) {
        if (D <= 1 * WARP) return (int)launch<1, true>(p, a, s);
        if (D <= 2 * WARP) return (int)launch<2, true>(p, a, s);
        if (D <= 4 * WARP) return (int)launch<4, true>(p, a, s);
        if (D <= 8 * WARP) return (int)launch<8, true>(p, a, s);
        if (D <= 16 * WARP) return (int)launch<16, true>(p, a, s);
        return (int)cudaErrorInvalidValue;
    }
    if (D <= 1 * WARP) return (int)launch<1, false>(p, a, s);
    if (D <= 2 * WARP) return (int)launch<2, false>(p, a, s);
    if (D <= 4 * WARP) return (int)launch<4, false>(p, a, s);
    if (D <= 8 * WARP) return (int)launch<8, false>(p, a, s);
    if (D <= 16 * WARP) return (int)launch<16, false>(p, a, s);
    return (int)cudaErrorInvalidValue;
}
