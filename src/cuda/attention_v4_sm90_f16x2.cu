/* attention v4 (launcher jattn_cuda_launch_v4, reported as cuda_v4_flash_*_f16x2_sm90_wgmma_st_64x64):
 * fp32-accurate flash attention on Hopper's fp16 wgmma, each operand split into two scaled fp16 parts (2xFP16,
 * after Ootomo & Yokota 2022), for sm_90a.
 *
 * Reads  q [B, H, Sq, D] (element strides, head_dim contiguous, float4 aligned), D in {64, 128},
 *        and the workspace the pre-pass attention_v4_split_kv_f16x2.cu wrote from k and v (f16x2_split.cuh).
 * Writes out [B, H, Sq, D] through its strides, and optionally lse [B, H, Sq] contiguous.
 * The launch contract of attention_sm90.h, plus the workspace.
 *
 * Why: v3.2 (3xTF32 on wgmma; removed since, src/cuda/JOURNAL.md) runs the TF32 tensor rate
 * (409 TFLOP/s measured), six products per attention FLOP in f32 mode, and every CTA splits K and V
 * again in registers. The fp16 rate is twice TF32's with the same 11-bit significand, so
 * hi*hi + hi*lo + lo*hi with fp16 parts is as exact as 3xTF32 at half the tensor time; fp16's narrow range is handled
 * by a power-of-two scale per q row, per k row and per (key tile, head_dim column) of v (f16x2_split.cuh), and P (in
 * [0, 1]) enters as P * 2^15. K and V are split once per head by the pre-pass, already in the register order of the A
 * fragments: the kernel loads them with 16-byte loads and converts nothing. The structure is v3.2's (one warpgroup, 64
 * queries per CTA, two or three CTAs per SM):
 *  - S^T = K Q^T: wgmma m64n64k16, A = the K tile (64 keys x 16 head_dim) from registers,
 *    B = the CTA's 64 queries, hi and lo, from shared memory (staged once, K-major over head_dim).
 *    head_dim order inside a k16 slice is free: slice s position 2c + j (j < 2) and 2c + 8 + j - 2
 *    hold d = 16 s + 4 c + j, so that chunk 4 s + c of a k_split row is exactly thread c's
 *    fragment of that row. Three accumulators: the corrections (lo*hi, hi*lo), and hi*hi of each
 *    half of head_dim (the tensor core's fp32 accumulation error grows with the length of the
 *    chain: one chain of eight k16 steps failed the f32 gate on 1.4% of single-row peaky cases,
 *    two chains of four on 0.2%); the 3-CTA instance at D = 128 keeps one hi*hi chain (its
 *    registers), it runs long grids only, where the gate is on many rows.
 *  - scores: t = S^T * 2^-ek of the key: the true score times 2^eq of the query (the row scale
 *    of q); the softmax runs in t, with exp2((t - m_t) * 2^-eq log2 e).
 *  - O^T = V^T P^T per 64 rows of head_dim: A = V^T from registers (v_split chunks), B = P^T
 *    (64 queries x 64 keys, hi and lo, K-major over keys). Position 16 ks + 2 g + r of P^T
 *    holds key 16 ks + g + 8 r, so that the two keys a thread holds for one query are one
 *    32-bit store; v_split is written in that key order. The tile's product (a fresh
 *    accumulator) is scaled back per column and added into O in fp32.
 *  - Split-KV over a cluster of two CTAs for short grids, merged through distributed shared
 *    memory, as in v3.2.
 * f32 mode: three fp16 products in both matmuls; tf32 mode: three in Q K^T (the softmax
 * amplifies logit errors), one (hi*hi) in P V: an 11-bit significand, as TF32.
 *
 * Each instance is compiled for 2 or 3 CTAs per SM (f16x2_plan picks one per call).
 *
 * Measured: src/cuda/NOTES.md's version table; the steps from v4.0 on: JOURNAL.md, "v4". */
#include "attention_sm90.h"

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177 /* the shared helpers are unused where the kernel body is a trap */
#endif

#include "f16x2_split.cuh"
#include "f16x2_tile_step.cuh"
#include "key_padding.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kThreads = 128; /* one warpgroup */
constexpr int kWarps = kThreads / 32;
constexpr int kQ = 64;       /* queries per CTA: N of both products */
constexpr int kK = kF16Tile; /* keys per tile: M of S^T, K of O^T */
constexpr int kMRows = 64;   /* wgmma M */
constexpr int kF16K = 16;    /* fp16 wgmma K */
/* Each kernel instance is compiled for kCtas CTAs per SM (launch bounds: at most 255 registers
 * per thread for two, 168 for three). D = 64 runs three (no spills); D = 128 has both: two
 * with the next tile's K loaded whole during P V, three with two slices ahead (and a few hundred
 * bytes of spills), which fills short grids better (f16x2_plan). */

struct F16x2Params {
    Params base;
    const uint4 *k_split, *v_split;
    const float *k_unscale, *v_unscale;
    const int *v_tiny;
    int tiles;
};

template <int D, bool kSplitPV, int kCtas>
struct F16Config {
    static constexpr int kQBytes = kQ * D * 2; /* one part (hi or lo) */
    static constexpr int kPBytes = kQ * kK * 2;
    static constexpr int kQOff = 0;
    static constexpr int kPOff = kQOff + 2 * kQBytes;
    static constexpr int kStateOff = kPOff + 2 * kPBytes;
    /* floats: col_max[2][warps][Q], col_sum[warps][Q], m[2][Q], l[Q], alpha[Q], l_comp[Q],
     * q_unscale[Q] (2^-eq), q_log2e[Q] (2^-eq log2 e) */
    static constexpr int kStateFloats = 2 * kWarps * kQ + kWarps * kQ + 2 * kQ + 5 * kQ;
    static constexpr int kSmemBytes = kStateOff + kStateFloats * 4 + kSwizzleAtomBytes; /* + alignment slack */
    static constexpr int kSlices = D / kF16K;                                           /* k16 slices of S^T */
    static constexpr int kAhead = kCtas == 2 ? kSlices : 1; /* slices of the next tile's K loaded during P V */
    /* hi*hi in two accumulators (the halves of head_dim) except where the registers run out (the
     * 3-CTA instance at D = 128): the tensor core's accumulation error grows with the chain */
    static constexpr bool kHiHiHalves = !(D == 128 && kCtas == 3);
    static constexpr int kMBlocks = D / kMRows; /* 64-row blocks of O^T */
    static constexpr int kAcc = kQ / 2;         /* m64n64 accumulator floats per thread */
    static constexpr int kVSlices = kK / kF16K;
    static constexpr int kOutVec = 2 * kMBlocks; /* consecutive d per thread and query */
    static_assert(D % kMRows == 0, "head_dim must be a multiple of 64");
    static_assert(kQBytes % kSwizzleAtomBytes == 0 && kPBytes % kSwizzleAtomBytes == 0, "1024-byte aligned tiles");
    /* the split-KV merge receives rank 1's O, m and l in the Q and P^T tiles */
    static_assert(kMBlocks * kAcc * 4 * kThreads + 2 * kQ * 4 <= kStateOff, "merge buffer fits");
};

/* This thread's K fragments (hi, lo) of slices 0 .. N-1 of tile `tile_index` (= bh * T + tile),
 * and the unscale factors of its two keys (16w+g, 16w+g+8). */
template <int D, int N>
__device__ __forceinline__ void load_k(const F16x2Params &p, int64_t tile_index, int warp, int lane, uint4 (&kx)[N][2],
                                       float (&kf)[2]) {
    const uint4 *src = p.k_split + (tile_index * kWarps + warp) * (D / kF16K * 64) + lane;
#pragma unroll
    for (int s = 0; s < N; ++s) {
        kx[s][0] = src[64 * s];
        kx[s][1] = src[64 * s + 32];
    }
    const float *f = p.k_unscale + tile_index * kK + warp * 16 + lane / 4;
    kf[0] = f[0];
    kf[1] = f[8];
}

/* This thread's V^T fragments (hi, and lo when kLo) of one 64-row block of head_dim of a tile. */
template <bool kLo>
__device__ __forceinline__ void load_v(const uint4 *block_v, int warp, int lane, uint4 (&vx)[4][2]) {
    const uint4 *src = block_v + warp * 4 * 64 + lane;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        vx[ks][0] = src[64 * ks];
        if (kLo) vx[ks][1] = src[64 * ks + 32];
    }
}

/* kPadded: a key-padded call (fp.base.kv_count set). The unpadded instances are the kernel as it
 * was before key padding, instruction for instruction (padding support in them cost 1-5% of
 * the speed, H200: bench/results/h200-2026-12-01-padding). */
template <int D, bool kSplitPV, int kCtas, bool kPadded>
__global__ void __launch_bounds__(kThreads, kCtas) attention_f32_sm90_wgmma_f16x2_64x64_kernel(const F16x2Params fp) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* another target (the library's compute_80 PTX): the launch refuses such devices */
#else
    using C = F16Config<D, kSplitPV, kCtas>;
    const Params &p = fp.base;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw_saddr = smem_u32(smem_raw);
    unsigned char *smem = smem_raw + ((kSwizzleAtomBytes - (raw_saddr % kSwizzleAtomBytes)) % kSwizzleAtomBytes);
    unsigned char *q_hi = smem + C::kQOff, *q_lo = q_hi + C::kQBytes;
    unsigned char *p_hi = smem + C::kPOff, *p_lo = p_hi + C::kPBytes;
    float *col_max = reinterpret_cast<float *>(smem + C::kStateOff); /* [2][warps][Q] */
    float *col_sum = col_max + 2 * kWarps * kQ;                      /* [warps][Q] */
    float *m_state = col_sum + kWarps * kQ;                          /* [2][Q]: by tile parity, in t units */
    float *l_state = m_state + 2 * kQ;                               /* [Q] */
    float *alpha_state = l_state + kQ;                               /* [Q] */
    float *l_comp = alpha_state + kQ;                                /* [Q]: Kahan compensation of l */
    float *q_unscale = l_comp + kQ;                                  /* [Q]: 2^-eq */
    float *q_log2e = q_unscale + kQ;                                 /* [Q]: 2^-eq log2(e) */
    const uint32_t q_hi_s = smem_u32(q_hi), q_lo_s = smem_u32(q_lo);
    const uint32_t p_hi_s = smem_u32(p_hi), p_lo_s = smem_u32(p_lo);

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const int split = p.kv_split;
    const int rank = split == 2 ? (int)cluster_ctarank() : 0;
    const int q0 = (blockIdx.x / split) * kQ;
    const int h = blockIdx.y, b = blockIdx.z;
    const int64_t bh = (int64_t)b * p.heads + h;
    const float *qp = p.q + b * p.q_b + h * p.q_h;
    /* key padding: the pre-pass split only this batch's attended keys, in order. The count is
     * read again from shared memory where it is needed (the last tile, the write), so that it
     * holds no register through the loop. */
    __shared__ int n_kv_shared;
    const int n_all = kPadded ? (attended_keys(p.kv_count, b, p.seq_kv) + kK - 1) / kK : fp.tiles;
    if (kPadded && tid == 0) n_kv_shared = attended_keys(p.kv_count, b, p.seq_kv);
    const int half = (n_all + 1) / 2;
    const int tile_begin = rank == 1 ? half : 0;
    const int tile_end = split == 2 && rank == 0 ? half : n_all;
    const uint4 *v_head = fp.v_split + bh * fp.tiles * D * 16;
    const float *v_unscale_head = fp.v_unscale + bh * fp.tiles * D;
    const int *v_tiny_head = fp.v_tiny + bh * fp.tiles;

    f16x2_stage_q<D, kQ>(qp, p.q_t, p.seq_q, q0, p.scale, tid, q_hi, q_lo, q_unscale, q_log2e);
    if (tid < kQ) {
        m_state[tid] = -INFINITY;
        l_state[tid] = 0.f;
        l_comp[tid] = 0.f;
    }
    fence_proxy_async();
    __syncthreads();

    float o[C::kMBlocks][C::kAcc];
#pragma unroll
    for (int mb = 0; mb < C::kMBlocks; ++mb)
#pragma unroll
        for (int i = 0; i < C::kAcc; ++i) o[mb][i] = 0.f;

    /* Byte offsets of this thread's P^T pairs (query 2c+e, positions 16w+2g, +1) in the
     * swizzled P^T tiles; query 8i+2c+e adds 1024 i. */
    uint32_t p_off[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) p_off[e] = swizzled_offset_f16(2 * c + e, warp * 16 + 2 * g, kQ);

    uint4 kx_next[C::kAhead][2];
    float kf_next[2];
    if (!kPadded || tile_begin < tile_end)
        load_k<D, C::kAhead>(fp, bh * fp.tiles + tile_begin, warp, lane, kx_next, kf_next);

    const int d_base = C::kOutVec * (8 * warp + g);
    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const int key0 = tile * kK;
        const int parity = (tile - tile_begin) & 1;
        const uint64_t q_hi_t = smem_desc_sw128(opaque(q_hi_s)), q_lo_t = smem_desc_sw128(opaque(q_lo_s));
        const uint64_t p_hi_t = smem_desc_sw128(opaque(p_hi_s)), p_lo_t = smem_desc_sw128(opaque(p_lo_s));
        const uint4 *tile_v = v_head + (int64_t)tile * D * 16; /* [mb][w][ks][part][lane]: 1024 chunks per mb */
        const float kf[2] = {kf_next[0], kf_next[1]};
        /* this tile's column factors and tiny flag: used after the products */
        float vf[C::kOutVec];
        {
            const float *src = v_unscale_head + (int64_t)tile * D + d_base;
            if (C::kOutVec == 4) {
                const float4 f = *reinterpret_cast<const float4 *>(src);
                vf[0] = f.x;
                vf[1] = f.y;
                vf[C::kOutVec - 2] = f.z;
                vf[C::kOutVec - 1] = f.w;
            } else {
                const float2 f = *reinterpret_cast<const float2 *>(src);
                vf[0] = f.x;
                vf[1] = f.y;
            }
        }
        const bool tiny = v_tiny_head[tile] != 0;

        /* ---- S^T = K Q^T ---- */
        float st[C::kAcc], st_c[C::kAcc], st2[C::kHiHiHalves ? C::kAcc : 1];
        {
            uint4 kx[C::kSlices][2];
#pragma unroll
            for (int s = 0; s < C::kAhead; ++s) {
                kx[s][0] = kx_next[s][0];
                kx[s][1] = kx_next[s][1];
            }
            const uint4 *k_tile = fp.k_split + ((bh * fp.tiles + tile) * kWarps + warp) * (C::kSlices * 64) + lane;
            uint32_t ka_hi[C::kSlices][4], ka_lo[C::kSlices][4];
#pragma unroll
            for (int s = 0; s < C::kSlices; ++s) {
                ka_hi[s][0] = kx[s][0].x;
                ka_hi[s][1] = kx[s][0].y;
                ka_hi[s][2] = kx[s][0].z;
                ka_hi[s][3] = kx[s][0].w;
                ka_lo[s][0] = kx[s][1].x;
                ka_lo[s][1] = kx[s][1].y;
                ka_lo[s][2] = kx[s][1].z;
                ka_lo[s][3] = kx[s][1].w;
                wgmma_fence();
                const uint64_t qh = f16_slice_desc(q_hi_t, s, kQ);
                wgmma_m64n64k16_f16_rs(st_c, ka_lo[s], qh, s > 0 ? 1 : 0);
                wgmma_m64n64k16_f16_rs(st_c, ka_hi[s], f16_slice_desc(q_lo_t, s, kQ), 1);
                if (!C::kHiHiHalves || s < C::kSlices / 2)
                    wgmma_m64n64k16_f16_rs(st, ka_hi[s], qh, s > 0 ? 1 : 0);
                else if constexpr (C::kHiHiHalves)
                    wgmma_m64n64k16_f16_rs(st2, ka_hi[s], qh, s > C::kSlices / 2 ? 1 : 0);
                wgmma_commit();
                if (s + C::kAhead < C::kSlices) {
#pragma unroll
                    for (int part = 0; part < 2; ++part)
                        kx[s + C::kAhead][part] = k_tile[64 * (s + C::kAhead) + 32 * part];
                }
                if (s > 0) {
                    wgmma_wait<1>(); /* the previous slice's A registers are free again */
                    fence_regs(ka_hi[s - 1]);
                    fence_regs(ka_lo[s - 1]);
                }
            }
            wgmma_wait_all();
            fence_regs(st);
            if constexpr (C::kHiHiHalves) fence_regs(st2);
            fence_regs(st_c);
            fence_regs(ka_hi[C::kSlices - 1]);
            fence_regs(ka_lo[C::kSlices - 1]);
        }
        /* ---- softmax down the columns of S^T, in t units ---- */
        float *cmax = col_max + parity * kWarps * kQ;
        f16x2_scores_column_max<C::kAcc, kWarps, kQ, C::kHiHiHalves>(
            st, st2, st_c, kf, key0, kPadded ? n_kv_shared : p.seq_kv, cmax, warp, g, c);
        __syncthreads(); /* B1: column maxima of every warp */

        f16x2_column_softmax<C::kAcc, kWarps, kQ, kSplitPV, (kCtas == 2 || D == 64)>(
            st, cmax, m_state + parity * kQ, m_state + (parity ^ 1) * kQ, alpha_state, q_log2e, col_sum, p_hi, p_lo,
            p_off, warp, g, c);
        /* the first V block of the tile, loaded before B2 */
        uint4 vx[C::kVSlices][2];
        load_v<kSplitPV>(tile_v, warp, lane, vx);
        fence_proxy_async();
        __syncthreads(); /* B2: P^T, alpha, the new maxima and the column sums are complete */

        /* this tile's alpha of the thread's queries, read before the stores of the l update */
        float alpha[C::kAcc / 2];
#pragma unroll
        for (int i = 0; i < C::kAcc / 4; ++i) {
            const float2 a2 = *reinterpret_cast<const float2 *>(alpha_state + 8 * i + 2 * c);
            alpha[2 * i] = a2.x;
            alpha[2 * i + 1] = a2.y;
        }
        if (tid < kQ) {
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) sum += col_sum[w * kQ + tid];
            /* l = l * alpha + sum, Kahan-compensated (as v3.2) */
            const float a = alpha_state[tid];
            const float l = l_state[tid] * a, comp = l_comp[tid] * a;
            const float y = sum - comp;
            const float t = l + y;
            l_comp[tid] = (t - l) - y;
            l_state[tid] = t;
        }

        /* ---- O^T_tile = V^T P^T per 64 rows of head_dim; O = O * alpha + O_tile * 2^-ev ---- */
#pragma unroll
        for (int mb = 0; mb < C::kMBlocks; ++mb) {
            uint4 vn[C::kVSlices][2];
            if (mb + 1 < C::kMBlocks)
                load_v<kSplitPV>(tile_v + (int64_t)(mb + 1) * 1024, warp, lane, vn);
            else if (tile + 1 < tile_end)
                load_k<D, C::kAhead>(fp, bh * fp.tiles + tile + 1, warp, lane, kx_next, kf_next);
            float ot[C::kAcc];
            uint32_t va_hi[C::kVSlices][4], va_lo[C::kVSlices][4];
            f16x2_pv_issue<kSplitPV, C::kVSlices, C::kAcc, kQ>(ot, vx, va_hi, va_lo, p_hi_t, p_lo_t);
            f16x2_pv_finish<kSplitPV, C::kVSlices, C::kAcc, C::kOutVec>(o[mb], ot, va_hi, va_lo, alpha, vf, mb, tiny);
            if (mb + 1 < C::kMBlocks) {
#pragma unroll
                for (int ks = 0; ks < C::kVSlices; ++ks) {
                    vx[ks][0] = vn[ks][0];
                    vx[ks][1] = vn[ks][1];
                }
            }
        }
        /* The next tile's B1 orders this tile's reads of P^T and of the softmax state before
         * they are overwritten. */
    }

    __syncthreads(); /* the last tile's l_state update */
    float *m_final = m_state + ((tile_end - tile_begin) & 1) * kQ;
    if (split == 2) {
        /* Rank 0's Q and P^T tiles (no longer read) receive rank 1's O (the accumulator
         * registers of thread t at [j][t], float4 j), its m and its l. */
        float4 *x_o = reinterpret_cast<float4 *>(q_hi);
        float *x_m = reinterpret_cast<float *>(q_hi + C::kMBlocks * C::kAcc * 4 * kThreads);
        float *x_l = x_m + kQ;
        cluster_sync(); /* X1: both CTAs are done with their tiles */
        if (rank == 1) {
            const uint32_t remote_o = cluster_map(smem_u32(x_o), 0);
#pragma unroll
            for (int mb = 0; mb < C::kMBlocks; ++mb)
#pragma unroll
                for (int j = 0; j < C::kAcc / 4; ++j)
                    st_cluster_v4(remote_o + 16u * (uint32_t)((mb * C::kAcc / 4 + j) * kThreads + tid),
                                  make_float4(o[mb][4 * j], o[mb][4 * j + 1], o[mb][4 * j + 2], o[mb][4 * j + 3]));
            if (tid < kQ) {
                st_cluster_f32(cluster_map(smem_u32(x_m + tid), 0), m_final[tid]);
                st_cluster_f32(cluster_map(smem_u32(x_l + tid), 0), l_state[tid]);
            }
        }
        cluster_sync(); /* X2: rank 1's partial results are in rank 0's shared memory */
        if (rank == 1) return;
        float *a0 = col_max, *a1 = col_max + kQ;
        if (tid < kQ) {
            const float m0 = m_final[tid], m1 = x_m[tid];
            const float m = fmaxf(m0, m1);
            const float w0 = exp2f((m0 - m) * q_log2e[tid]), w1 = exp2f((m1 - m) * q_log2e[tid]);
            a0[tid] = w0;
            a1[tid] = w1;
            l_state[tid] = l_state[tid] * w0 + x_l[tid] * w1;
            m_final[tid] = m;
        }
        __syncthreads();
#pragma unroll
        for (int mb = 0; mb < C::kMBlocks; ++mb)
#pragma unroll
            for (int j = 0; j < C::kAcc / 4; ++j) {
                const float4 x = x_o[(mb * C::kAcc / 4 + j) * kThreads + tid];
                const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int q = 8 * j + 2 * c + (e % 2);
                    o[mb][4 * j + e] = o[mb][4 * j + e] * a0[q] + xs[e] * a1[q];
                }
            }
    }
    /* the output, written inline (as a call, shared with v5 until v5's removal, it cost the 3-CTA
     * instances 60-120 more bytes of spills, ptxas 13.0) */
#pragma unroll
    for (int i = 0; i < C::kAcc / 4; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int q = 8 * i + 2 * c + e;
            const int row = q0 + q;
            if (row >= p.seq_q) continue;
            const float l = l_state[q];
            const float inv = (1.f / kPScale) / l; /* O holds P * 2^15 */
            float *dst = p.out + b * p.o_b + h * p.o_h + (int64_t)row * p.o_t + d_base;
            if (kPadded && n_kv_shared == 0) { /* no key to attend (key padding): 0, and lse -inf */
                for (int j = 0; j < C::kOutVec; ++j) dst[j] = 0.f;
                if (p.lse != nullptr && warp == 0 && g == 0) p.lse[bh * p.seq_q + row] = -INFINITY;
                continue;
            }
            if (C::kMBlocks == 2) {
                *reinterpret_cast<float4 *>(dst) =
                    make_float4(o[0][4 * i + e] * inv, o[0][4 * i + 2 + e] * inv, o[C::kMBlocks - 1][4 * i + e] * inv,
                                o[C::kMBlocks - 1][4 * i + 2 + e] * inv);
            } else {
                *reinterpret_cast<float2 *>(dst) = make_float2(o[0][4 * i + e] * inv, o[0][4 * i + 2 + e] * inv);
            }
            if (p.lse != nullptr && warp == 0 && g == 0)
                p.lse[bh * p.seq_q + row] = m_final[q] * q_unscale[q] + logf(l);
        }
    }
#endif
}

constexpr int kMinTilesPerHalf = 4;
/* Time of one key tile of a CTA of the three-CTA instance, in units of the two-CTA instance's,
 * when either fills the machine: three CTAs share an SM (3/2) and run 5% less work per SM
 * (H200, (1,24,4608,128): 108.7 against 114.2 TFLOP/s). */
constexpr double kThreeCtaTileTime = 1.5 / 0.95;

struct F16x2Plan {
    int ctas_per_sm; /* 2 or 3: the kernel instance */
    int kv_split;    /* 1, or 2: a cluster of two CTAs per query block splits the key tiles */
};

/* The instance and split that finish first by a wave count model: waves = ceil(CTAs / (SMs x
 * CTAs per SM)), each as long as a CTA's key tiles (plus one tile for a split's merge). At
 * (1,24,1536,128) three CTAs per SM with the split (2.9 waves of 12 tiles) beat two (4.4 waves):
 * +5% measured; at (1,24,4608,128) two without split (6.5 waves of 72 tiles) beat three by 5%. */
F16x2Plan f16x2_plan(int64_t ctas, int64_t tiles, int sms, int head_dim) {
    F16x2Plan best = {head_dim == 64 ? 3 : 2, 1};
    double best_cost = -1.0;
    for (int cps = head_dim == 64 ? 3 : 2; cps <= 3; ++cps)
        for (int split = 1; split <= 2; ++split) {
            if (split == 2 && tiles < 2 * kMinTilesPerHalf) continue;
            const int64_t slots = (int64_t)cps * (sms > 0 ? sms : 1);
            const int64_t waves = (split * ctas + slots - 1) / slots;
            const int64_t per_cta = (tiles + split - 1) / split + (split == 2 ? 1 : 0);
            const double cost = (double)waves * (double)per_cta * (cps == 3 ? kThreeCtaTileTime : 1.0);
            if (best_cost < 0.0 || cost < best_cost) {
                best_cost = cost;
                best.ctas_per_sm = cps;
                best.kv_split = split;
            }
        }
    return best;
}

template <int D, bool kSplitPV, int kCtas>
cudaError_t f16x2_launch(F16x2Params fp, int64_t batch, int64_t heads, int64_t q_blocks, int kv_split,
                         cudaStream_t stream) {
    using C = F16Config<D, kSplitPV, kCtas>;
    auto kernel = fp.base.kv_count ? attention_f32_sm90_wgmma_f16x2_64x64_kernel<D, kSplitPV, kCtas, true>
                                   : attention_f32_sm90_wgmma_f16x2_64x64_kernel<D, kSplitPV, kCtas, false>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (err != cudaSuccess) return err;
    fp.base.kv_split = kv_split;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(q_blocks * kv_split), (unsigned)heads, (unsigned)batch);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = C::kSmemBytes;
    cfg.stream = stream;
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = (unsigned)kv_split;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cfg.attrs = &cluster;
    cfg.numAttrs = kv_split == 2 ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, fp);
}

} /* namespace */

extern "C" cudaError_t split_kv_f16x2(const jattn_cuda_args *a, void *workspace, cudaStream_t stream);

extern "C" int jattn_cuda_launch_v4(const jattn_cuda_args *a, void *workspace, void *stream_ptr) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    if (attention_f32_sm90_wgmma_supported(a) != ATTENTION_SM90_SUPPORTED || workspace == nullptr ||
        reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
        return cudaErrorInvalidValue;
    int dev = 0;
    cudaError_t err = sm90_current_device(&dev);
    if (err != cudaSuccess) return err;
    int sms = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = split_kv_f16x2(a, workspace, stream);
    if (err != cudaSuccess) return err;
    const F16x2Layout L = f16x2_layout(a->batch, a->heads, a->seq_kv, a->head_dim);
    const unsigned char *ws = static_cast<const unsigned char *>(workspace);
    F16x2Params fp;
    fp.base = params_from_args(a);
    fp.k_split = reinterpret_cast<const uint4 *>(ws + L.k_split);
    fp.k_unscale = reinterpret_cast<const float *>(ws + L.k_unscale);
    fp.v_split = reinterpret_cast<const uint4 *>(ws + L.v_split);
    fp.v_unscale = reinterpret_cast<const float *>(ws + L.v_unscale);
    fp.v_tiny = reinterpret_cast<const int *>(ws + L.v_tiny);
    fp.tiles = (int)L.tiles;
    const int64_t q_blocks = (a->seq_q + kQ - 1) / kQ;
    const F16x2Plan plan = f16x2_plan(q_blocks * a->heads * a->batch, L.tiles, sms, (int)a->head_dim);
    const bool f32 = a->precision == JATTN_PRECISION_F32;
    const int64_t B = a->batch, H = a->heads;
    if (a->head_dim == 64)
        return f32 ? f16x2_launch<64, true, 3>(fp, B, H, q_blocks, plan.kv_split, stream)
                   : f16x2_launch<64, false, 3>(fp, B, H, q_blocks, plan.kv_split, stream);
    if (plan.ctas_per_sm == 3)
        return f32 ? f16x2_launch<128, true, 3>(fp, B, H, q_blocks, plan.kv_split, stream)
                   : f16x2_launch<128, false, 3>(fp, B, H, q_blocks, plan.kv_split, stream);
    return f32 ? f16x2_launch<128, true, 2>(fp, B, H, q_blocks, plan.kv_split, stream)
               : f16x2_launch<128, false, 2>(fp, B, H, q_blocks, plan.kv_split, stream);
}
