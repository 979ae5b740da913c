/* f16x2_column_softmax.cuh: the middle of one key tile's online softmax in kernels v4 and v5,
 * between their barriers B1 and B2. Both hold S^T (64 keys x 64 queries of a warpgroup) in the
 * m64n64 accumulator: thread (warp w, lane g*4+c) has keys 16w+g (regs 4i+e) and 16w+g+8
 * (regs 4i+2+e) of queries 8i+2c+e. Internal to src/cuda; internal linkage.
 *
 * Reads  st (scores in t units, keys past the row at -inf), cmax [warps][64] (each warp's column
 *        maxima of this tile), m_old [64], q_log2e [64] (2^-eq log2 e of each query).
 * Writes st (the weights exp2((t - m) 2^-eq log2 e)), m_new [64] and alpha [64] (warp 0's lanes
 *        0-3), col_sum [warps][64] (each warp's column sums), and P^T * 2^15 as fp16 hi (and lo
 *        when kSplitPV) at p_off[e] + 1024 i in the swizzled tiles p_hi, p_lo. */
#ifndef JATTN_F16X2_COLUMN_SOFTMAX_CUH
#define JATTN_F16X2_COLUMN_SOFTMAX_CUH

#include <stdint.h>

#include <cuda_fp16.h>

#include "f16x2_split.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

/* The old maximum, the new one (over the four warps' column maxima) and the scale factor of
 * the thread's column pair i (queries 8i+2c, +1). */
template <int kWarps, int kQ>
__device__ __forceinline__ void read_column_pair(int i, int c, const float *cmax, const float *m_old, const float *q_log2e,
                                                 float (&mo)[2], float (&mn)[2], float (&cq)[2])
{
    const float2 mo2 = *reinterpret_cast<const float2 *>(m_old + 8 * i + 2 * c);
    const float2 cq2 = *reinterpret_cast<const float2 *>(q_log2e + 8 * i + 2 * c);
    float2 mn2 = mo2;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
        const float2 x = *reinterpret_cast<const float2 *>(cmax + w * kQ + 8 * i + 2 * c);
        mn2.x = fmaxf(mn2.x, x.x);
        mn2.y = fmaxf(mn2.y, x.y);
    }
    mo[0] = mo2.x; mo[1] = mo2.y;
    mn[0] = mn2.x; mn[1] = mn2.y;
    cq[0] = cq2.x; cq[1] = cq2.y;
}

/* kHoist: every shared-memory read of the step (the old maxima, the scale factors, the column
 * maxima of the four warps) before its first store. The compiler cannot move a shared load
 * above a shared store it may alias, so the interleaved order (kHoist false: pair i read just
 * before its stores) serializes the eight column pairs on the load latency (ncu of v5.0: 30%
 * of the stall samples in this step); hoisted, the step holds 48 more registers, which the
 * 3-CTA instance of v4 at D = 128 has not (its spills grow and it runs 2% slower:
 * bench/results/h200-2026-12-01-v5). */
template <int kAcc, int kWarps, int kQ, bool kSplitPV, bool kHoist>
__device__ __forceinline__ void f16x2_column_softmax(float (&st)[kAcc], const float *cmax, const float *m_old, float *m_new,
                                                     float *alpha_state, const float *q_log2e, float *col_sum,
                                                     unsigned char *p_hi, unsigned char *p_lo, const uint32_t (&p_off)[2],
                                                     int warp, int g, int c)
{
    constexpr int kPairs = kAcc / 4; /* column pairs i of the thread */
    float mo[kPairs][2], mn[kPairs][2], cq[kPairs][2];
    if (kHoist) {
#pragma unroll
        for (int i = 0; i < kPairs; ++i) read_column_pair<kWarps, kQ>(i, c, cmax, m_old, q_log2e, mo[i], mn[i], cq[i]);
    }
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
        if (!kHoist) read_column_pair<kWarps, kQ>(i, c, cmax, m_old, q_log2e, mo[i], mn[i], cq[i]);
        float pv[2][2]; /* [e][r]: P * 2^15 */
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int q = 8 * i + 2 * c + e;
            if (warp == 0 && g == 0) {
                m_new[q] = mn[i][e];
                alpha_state[q] = exp2_approx((mo[i][e] - mn[i][e]) * cq[i][e]);
            }
            float sum = 0.f;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float &x = st[4 * i + 2 * r + e];
                x = exp2_approx((x - mn[i][e]) * cq[i][e]);
                sum += x;
                pv[e][r] = x * kPScale;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 4);
            sum += __shfl_xor_sync(0xffffffffu, sum, 8);
            sum += __shfl_xor_sync(0xffffffffu, sum, 16);
            if (g == 0) col_sum[warp * kQ + q] = sum;
            /* P^T[query q][positions 16w+2g, +1] = keys 16w+g, 16w+g+8: one 32-bit store */
            const uint32_t off = p_off[e] + (uint32_t)(i * kSwizzleAtomBytes);
            uint32_t hi, lo;
            if (kSplitPV) {
                f16x2_split2(pv[e][0], pv[e][1], hi, lo);
                *reinterpret_cast<uint32_t *>(p_lo + off) = lo;
            } else {
                const __half2 hh = __floats2half2_rn(pv[e][0], pv[e][1]);
                hi = *reinterpret_cast<const uint32_t *>(&hh);
            }
            *reinterpret_cast<uint32_t *>(p_hi + off) = hi;
        }
    }
}

} /* namespace */

#endif /* JATTN_F16X2_COLUMN_SOFTMAX_CUH */
