/* f16x2_tile_step.cuh: the pieces of one warpgroup's work in kernel v4 (the transposed 2xFP16
 * attention of f16x2_split.cuh; v5 shared them until its removal): staging its 64 queries, the
 * scores and column maxima of a key tile, the softmax step between the barriers B1 and B2, and the
 * P V product of one 64-row block of head_dim.
 *
 * Layouts: S^T (64 keys x 64 queries) and O^T (64 head_dim rows x 64 queries) in m64n64
 * accumulators: thread (warp w, lane g*4+c) holds rows 16w+g (regs 4i+e) and 16w+g+8 (regs
 * 4i+2+e) of columns (queries) 8i+2c+e. Internal to src/cuda; internal linkage. */
#ifndef JATTN_F16X2_TILE_STEP_CUH
#define JATTN_F16X2_TILE_STEP_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>

#include "f16x2_split.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

/* Stages the warpgroup's queries q0 .. q0 + 63 once (rows past seq_q as zeros): two threads per
 * row (half the head_dim each), q * scale, the row's power of two, hi and lo into the swizzled
 * K-major tiles q_hi, q_lo in the S^T slice order (slice s position 2c + j and 2c + 8 + j - 2
 * hold d = 16 s + 4 c + j), and the row's 2^-eq and 2^-eq log2 e. */
template <int D, int kQ>
__device__ __forceinline__ void f16x2_stage_q(const float *qp, int64_t q_t, int seq_q, int q0, float scale, int tid,
                                              unsigned char *q_hi, unsigned char *q_lo, float *q_unscale,
                                              float *q_log2e) {
    constexpr int kPer = D / 8; /* float4 per thread */
    const int row = tid / 2, part = tid % 2;
    const bool valid = q0 + row < seq_q;
    const float4 *src = reinterpret_cast<const float4 *>(qp + (int64_t)(valid ? q0 + row : 0) * q_t) + part * kPer;
    float x[kPer][4];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const float4 v = valid ? __ldg(src + j) : make_float4(0.f, 0.f, 0.f, 0.f);
        x[j][0] = v.x * scale;
        x[j][1] = v.y * scale;
        x[j][2] = v.z * scale;
        x[j][3] = v.w * scale;
#pragma unroll
        for (int e = 0; e < 4; ++e) amax = fmaxf(amax, finite_abs(x[j][e]));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    const int eq = f16x2_exponent(amax, kQTarget);
    const float up = exp2_int(eq);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int d0 = 4 * (part * kPer + j);
        const int col = 16 * (d0 / 16) + 2 * ((d0 % 16) / 4); /* d0, d0+1 -> col, col+1; d0+2, d0+3 -> col+8, col+9 */
        uint32_t hi0, lo0, hi1, lo1;
        f16x2_split2(x[j][0] * up, x[j][1] * up, hi0, lo0);
        f16x2_split2(x[j][2] * up, x[j][3] * up, hi1, lo1);
        const uint32_t off0 = swizzled_offset_f16(row, col, kQ), off1 = swizzled_offset_f16(row, col + 8, kQ);
        *reinterpret_cast<uint32_t *>(q_hi + off0) = hi0;
        *reinterpret_cast<uint32_t *>(q_lo + off0) = lo0;
        *reinterpret_cast<uint32_t *>(q_hi + off1) = hi1;
        *reinterpret_cast<uint32_t *>(q_lo + off1) = lo1;
    }
    if (part == 0) {
        q_unscale[row] = exp2_int(-eq);
        q_log2e[row] = exp2_int(-eq) * kLog2e;
    }
}

/* The tile's scores in t units from the S^T accumulators (hi*hi in st, and in st2 when kHalves:
 * the second half of head_dim; the corrections in st_c), times 2^-ek of the thread's two keys
 * (kf), keys key0 + row >= n_kv at -inf; then each warp's column maxima into cmax [warps][64]. */
template <int kAcc, int kWarps, int kQ, bool kHalves, int kSt2>
__device__ __forceinline__ void f16x2_scores_column_max(float (&st)[kAcc], const float (&st2)[kSt2],
                                                        const float (&st_c)[kAcc], const float (&kf)[2], int key0,
                                                        int n_kv, float *cmax, int warp, int g, int c) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) { /* an infinite hi*hi (an Inf in k) keeps its sign: its corrections are NaN */
        float big = st[i];
        if constexpr (kHalves) big += st2[i];
        st[i] = (isinf(big) ? big : big + st_c[i]) * kf[(i / 2) % 2];
    }
    if (key0 + 64 > n_kv) { /* the last tile, partial: keys past n_kv get weight 0 */
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (key0 + warp * 16 + g + 8 * r >= n_kv) {
#pragma unroll
                for (int i = 0; i < kAcc / 4; ++i) st[4 * i + 2 * r] = st[4 * i + 2 * r + 1] = -INFINITY;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kAcc / 4; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float mx = fmaxf(st[4 * i + e], st[4 * i + 2 + e]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
            if (g == 0) cmax[warp * kQ + 8 * i + 2 * c + e] = mx;
        }
    }
}

/* The old maximum, the new one (over the four warps' column maxima) and the scale factor of
 * the thread's column pair i (queries 8i+2c, +1). */
template <int kWarps, int kQ>
__device__ __forceinline__ void read_column_pair(int i, int c, const float *cmax, const float *m_old,
                                                 const float *q_log2e, float (&mo)[2], float (&mn)[2], float (&cq)[2]) {
    const float2 mo2 = *reinterpret_cast<const float2 *>(m_old + 8 * i + 2 * c);
    const float2 cq2 = *reinterpret_cast<const float2 *>(q_log2e + 8 * i + 2 * c);
    float2 mn2 = mo2;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
        const float2 x = *reinterpret_cast<const float2 *>(cmax + w * kQ + 8 * i + 2 * c);
        mn2.x = fmaxf(mn2.x, x.x);
        mn2.y = fmaxf(mn2.y, x.y);
    }
    mo[0] = mo2.x;
    mo[1] = mo2.y;
    mn[0] = mn2.x;
    mn[1] = mn2.y;
    cq[0] = cq2.x;
    cq[1] = cq2.y;
}

/* The softmax step between B1 and B2: reads st (scores in t units), cmax (the four warps' column
 * maxima), m_old and q_log2e; writes st (the weights exp2((t - m) 2^-eq log2 e)), m_new and
 * alpha (warp 0's lanes 0-3), col_sum [warps][64] and P^T * 2^15 as fp16 hi (and lo when
 * kSplitPV) at p_off[e] + 1024 i of the swizzled tiles p_hi, p_lo (position 16w+2g, +1 of
 * query 8i+2c+e: keys 16w+g, 16w+g+8, one 32-bit store).
 * kHoist: every shared-memory read of the step (the old maxima, the scale factors, the column
 * maxima of the four warps) before its first store. The compiler cannot move a shared load
 * above a shared store it may alias, so the interleaved order (kHoist false: pair i read just
 * before its stores) serializes the eight column pairs on the load latency (ncu of v5.0: 30%
 * of the stall samples in this step); hoisted, the step holds 48 more registers, which the
 * 3-CTA instance of v4 at D = 128 has not (its spills grow and it runs 2% slower:
 * bench/results/h200-2026-12-01-v5). */
template <int kAcc, int kWarps, int kQ, bool kSplitPV, bool kHoist>
__device__ __forceinline__ void f16x2_column_softmax(float (&st)[kAcc], const float *cmax, const float *m_old,
                                                     float *m_new, float *alpha_state, const float *q_log2e,
                                                     float *col_sum, unsigned char *p_hi, unsigned char *p_lo,
                                                     const uint32_t (&p_off)[2], int warp, int g, int c) {
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

/* Issues O^T_tile = V^T P^T for one 64-row block of head_dim: A = the block's V^T fragments vx
 * ([k16 slice][hi, lo]: copied into va_hi, va_lo, which the caller keeps until f16x2_pv_finish),
 * B = P^T hi and lo (f32: lo*hi, hi*lo, hi*hi; tf32: hi*hi). Leaves the last slice's group in
 * flight. */
template <bool kSplitPV, int kVSlices, int kAcc, int kQ>
__device__ __forceinline__ void f16x2_pv_issue(float (&ot)[kAcc], const uint4 (&vx)[kVSlices][2],
                                               uint32_t (&va_hi)[kVSlices][4], uint32_t (&va_lo)[kVSlices][4],
                                               uint64_t p_hi_t, uint64_t p_lo_t) {
#pragma unroll
    for (int ks = 0; ks < kVSlices; ++ks) {
        va_hi[ks][0] = vx[ks][0].x;
        va_hi[ks][1] = vx[ks][0].y;
        va_hi[ks][2] = vx[ks][0].z;
        va_hi[ks][3] = vx[ks][0].w;
        if (kSplitPV) {
            va_lo[ks][0] = vx[ks][1].x;
            va_lo[ks][1] = vx[ks][1].y;
            va_lo[ks][2] = vx[ks][1].z;
            va_lo[ks][3] = vx[ks][1].w;
        }
        wgmma_fence();
        const uint64_t ph = f16_slice_desc(p_hi_t, ks, kQ);
        if (kSplitPV) {
            wgmma_m64n64k16_f16_rs(ot, va_lo[ks], ph, ks > 0);
            wgmma_m64n64k16_f16_rs(ot, va_hi[ks], f16_slice_desc(p_lo_t, ks, kQ), 1);
            wgmma_m64n64k16_f16_rs(ot, va_hi[ks], ph, 1);
        } else {
            wgmma_m64n64k16_f16_rs(ot, va_hi[ks], ph, ks > 0);
        }
        wgmma_commit();
        if (ks > 0) {
            wgmma_wait<1>(); /* the previous slice's A registers are free again */
            fence_regs(va_hi[ks - 1]);
            if (kSplitPV) fence_regs(va_lo[ks - 1]);
        }
    }
}

/* Waits for the block's products, then O = O * alpha + O_tile * 2^-ev: accumulator reg 4i+2r+e is
 * head_dim row d_base + 2mb + r (factor vf[2mb + r]) of query 8i+2c+e (alpha[2i + e]); a tiny tile
 * (split after * 2^64) is scaled back first. */
template <bool kSplitPV, int kVSlices, int kAcc, int kOutVec>
__device__ __forceinline__ void f16x2_pv_finish(float (&o)[kAcc], float (&ot)[kAcc], uint32_t (&va_hi)[kVSlices][4],
                                                uint32_t (&va_lo)[kVSlices][4], const float (&alpha)[kAcc / 2],
                                                const float (&vf)[kOutVec], int mb, bool tiny) {
    wgmma_wait_all();
    fence_regs(ot);
    fence_regs(va_hi[kVSlices - 1]);
    if (kSplitPV) fence_regs(va_lo[kVSlices - 1]);
    if (tiny) { /* rarely taken */
#pragma unroll
        for (int i = 0; i < kAcc; ++i) ot[i] *= kTinyDown;
    }
#pragma unroll
    for (int i = 0; i < kAcc; ++i) o[i] = fmaf(o[i], alpha[2 * (i / 4) + (i % 2)], ot[i] * vf[2 * mb + (i / 2) % 2]);
}

} /* namespace */

#endif /* JATTN_F16X2_TILE_STEP_CUH */
