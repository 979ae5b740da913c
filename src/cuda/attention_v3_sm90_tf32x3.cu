/* attention v3 (v3.2; launcher jattn_cuda_launch_v3, reported as cuda_v3_flash_*_sm90_wgmma_st_64x64;
 * on sm_90 for D 64 and 128 when forced, or when v4's workspace cannot be had: src/cuda/NOTES.md's
 * version table):
 * fp32-accurate flash attention with Hopper's wgmma in the transposed ("S^T") orientation, for
 * sm_90a.
 *
 * Reads  q [B, H, Sq, D], k and v [B, H, Skv, D] (element strides per batch/head/token,
 *        head_dim contiguous, float4 aligned), D in {64, 128}.
 * Writes out [B, H, Sq, D] through its strides, and optionally lse [B, H, Sq] contiguous.
 * Same contract as v3.0 (attention_sm90.h).
 *
 * Why: v3.0 (S = Q K^T with both operands in shared memory) spends 193 KB of shared memory
 * per CTA and saturates shared-memory bandwidth in the S phase (JOURNAL.md, "v3.0"). Here the
 * operand that changes every tile comes from registers, straight from global memory:
 *  - S^T = K Q^T: wgmma m64n64k8, A = the K tile (64 keys x 8 head_dim) from registers,
 *    B = the CTA's 64 queries (Q, K-major over head_dim) from shared memory, staged once
 *    (pre-scaled by the scale: scores in natural units).
 *  - O^T = V^T P^T: wgmma m64n64k8 per 64 rows of head_dim, A = V^T from registers, B = P^T
 *    (64 queries x 64 keys, K-major over keys) written to shared memory once per tile.
 *  Shared memory: Q (big, small) 64 KB + P^T (big, small) 32 KB + 3.5 KB of softmax state at
 *  D = 128: two CTAs per SM, each the other's latency hiding. wgmma reads 64 B/clk of
 *  shared memory instead of 128.
 *
 * Fragments (thread t of the warpgroup: w = t/32, g = (t%32)/4, c = t%4; the accumulator and
 * A-register layouts of the PTX ISA, as in v3.0):
 *  - head_dim is the summation index of S^T, so its order inside the hardware's k-slices is
 *    free: slice 2s+u, position c + 4h holds d = 16s + 4c + 2u + h. Then the float4
 *    k[key][16s+4c .. 16s+4c+3] of a thread is exactly its A fragment for slices 2s, 2s+1
 *    (rows key = 16w+g and 16w+g+8), and Q is staged with columns permuted the same way:
 *    d -> column 16(d>>4) + 8((d>>1)&1) + 4(d&1) + ((d>>2)&3).
 *  - S^T accumulator reg 4i+2r+e = (key 16w+g+8r, query 8i+2c+e): a query's scores lie down a
 *    column, across the 8 lanes g and the 4 warps. The tile's column max is reduced with
 *    shuffles over g and through shared memory over the warps (one barrier); row sums are
 *    reduced the same way and accumulated in shared memory by one thread per query.
 *  - the rows of O^T (head_dim) are also free to order: M block mb, row 16w+g+8h holds
 *    d = 2*(D/64)*(8w+g) + 2mb + h, so a thread's A fragment of V^T is a float2 of v per key
 *    and its output for one query is 2*(D/64) consecutive floats (one float4 at D = 128).
 *  - keys keep their order: slice ks position p = key 8ks+p in both V^T and P^T.
 *  - Q K^T is 3xTF32 in both modes: every operand is split into big = tf32_rn(x) and small =
 *    tf32_rn(x - big) (cvt.rn.tf32: one instruction on sm_90). S^T runs in one pass over
 *    the slices into three accumulators: the corrections small*big + big*small, and the
 *    big*big products of the two halves of head_dim; only those 2 x 8 accumulations round at
 *    full magnitude. P V is 3xTF32 in f32 mode (the three products of each slice together
 *    into a fresh accumulator per tile, added to O in fp32), one TF32 product in tf32 mode.
 *    The A fragments of a slice group stay untouched until `wgmma.wait_group 1` after the
 *    next group has been issued (two groups of A registers live).
 *  - Loads run one phase ahead: the next tile's first K pairs during the last V block's
 *    products, the first V block before the softmax's second barrier, the second V block
 *    during the first's products. (Issuing the first V block before the S^T wait and the K
 *    pairs one block earlier measured 2-5% slower in f32, 1-2% faster in tf32.)
 *  - A V block whose values are all below 2^-63 is scaled by 2^62 for its products (TF32
 *    keeps 11 significant bits only down to 2^-126) and its result by 2^-62 after.
 *  - Short grids: when a second CTA per query block fills the machine's last wave better
 *    (st_kv_split), a cluster of two CTAs splits the key tiles in halves; rank 1 sends its
 *    unnormalised O, max and sum through distributed shared memory and rank 0 merges them.
 *
 * Measured: src/cuda/NOTES.md's version table; v3.1 and v3.2 step by step: JOURNAL.md. */
#include "attention_sm90.h"

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177 /* the shared helpers are unused where the kernel body is a trap */
#endif

#include "key_padding.cuh"
#include "sm90_wgmma_ptx.cuh"
#include "tf32_tiny_values.h"

namespace {

constexpr int kStThreads = 128; /* one warpgroup */
constexpr int kStWarps = kStThreads / 32;
constexpr int kStQ = 64;     /* queries per CTA: N of both products */
constexpr int kStK = 64;     /* keys per tile: M of S^T, K of O^T */
constexpr int kStMRows = 64; /* wgmma M */

template <int D, bool kSplitPV>
struct StConfig {
    static constexpr int kPVParts = kSplitPV ? 2 : 1; /* P and V: big (+ small) */
    static constexpr int kQBytes = kStQ * D * 4;
    static constexpr int kPBytes = kStQ * kStK * 4;
    static constexpr int kQOff = 0;
    static constexpr int kPOff = kQOff + 2 * kQBytes;
    static constexpr int kStateOff = kPOff + kPVParts * kPBytes;
    /* floats: col_max[2][warps][Q], col_sum[warps][Q], m[2][Q], l[Q], alpha[Q], l_comp[Q] */
    static constexpr int kStateFloats = 2 * kStWarps * kStQ + kStWarps * kStQ + 2 * kStQ + kStQ + kStQ + kStQ;
    static constexpr int kSmemBytes = kStateOff + kStateFloats * 4 + kSwizzleAtomBytes; /* + alignment slack */
    static constexpr int kMBlocks = D / kStMRows;                                       /* 64-row blocks of O^T */
    static constexpr int kDPairs = D / 16; /* float4 per key row = pairs of S^T slices */
    static constexpr int kAcc = kStQ / 2;  /* m64n64 accumulator floats per thread */
    static constexpr int kVSlices = kStK / kMmaK;
    static constexpr int kOutVec = 2 * kMBlocks; /* consecutive d per thread and query */
    static_assert(D % kStMRows == 0, "head_dim must be a multiple of 64");
    static_assert(kQBytes % kSwizzleAtomBytes == 0 && kPBytes % kSwizzleAtomBytes == 0, "1024-byte aligned tiles");
};

/* Column of head_dim index d in the staged Q tile (the S^T k-slice order above). */
__device__ __forceinline__ int st_q_column(int d) {
    return 16 * (d >> 4) + 8 * ((d >> 1) & 1) + 4 * (d & 1) + ((d >> 2) & 3);
}

/* The descriptor of k-slice `slice` of a 64-row tile from the tile's own descriptor: the
 * start-address field (bits 0-13, address / 16) plus the slice's offset / 16, a constant once
 * unrolled. Shared addresses stay below 2^18, so the field never carries. */
__device__ __forceinline__ uint64_t st_desc(uint64_t tile_desc, int slice) {
    return tile_desc + (uint64_t)(((slice / kSlicesPerSwizzleRow) * kStQ * kSwizzleBytes +
                                   (slice % kSlicesPerSwizzleRow) * kSliceBytes) >>
                                  4);
}

template <int N>
__device__ __forceinline__ void st_split4(const float (&x)[4], uint32_t (&big)[4], uint32_t (&small)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (N == 2)
            split_tf32<true>(x[j], big[j], small[j]);
        else
            big[j] = to_tf32(x[j]);
    }
}

/* The first kAhead float4 pairs of this thread's K rows (keys key0 + 16w+g, +8) of a tile:
 * its A fragments of slices 0 .. 2 kAhead - 1 (zeros past the n_kv attended keys; key j is
 * row key_row(rows, j)). */
template <int kAhead>
__device__ __forceinline__ void st_load_k(const float *kp, int64_t k_t, const int *rows, int n_kv, int key0, int warp,
                                          int g, int c, float4 (&kx)[kAhead][2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = key0 + warp * 16 + g + 8 * r;
        const bool valid = key < n_kv;
        const float4 *row = reinterpret_cast<const float4 *>(kp + (valid ? key_row(rows, key) : 0) * k_t);
#pragma unroll
        for (int s = 0; s < kAhead; ++s) kx[s][r] = valid ? row[4 * s + c] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

/* This thread's V^T A fragments of one 64-row block of head_dim (vp already offset to the
 * block's first column pair): v[key0 + 8 ks + c + 4 u][d_base .. d_base + 1] (zeros past the
 * n_kv attended keys; key j is row key_row(rows, j)). */
template <int kVSlices>
__device__ __forceinline__ void st_load_v(const float *vp, int64_t v_t, const int *rows, int n_kv, int key0, int d_base,
                                          int c, float2 (&vx)[kVSlices][2]) {
#pragma unroll
    for (int ks = 0; ks < kVSlices; ++ks)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int key = key0 + 8 * ks + c + 4 * u;
            vx[ks][u] = key < n_kv ? *reinterpret_cast<const float2 *>(vp + key_row(rows, key) * v_t + d_base)
                                   : make_float2(0.f, 0.f);
        }
}

template <int D, bool kSplitPV>
__global__ void __launch_bounds__(kStThreads, 2) attention_f32_sm90_wgmma_st_64x64_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* another target (the library's compute_80 PTX): the launch refuses such devices */
#else
    using C = StConfig<D, kSplitPV>;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw_saddr = smem_u32(smem_raw);
    unsigned char *smem = smem_raw + ((kSwizzleAtomBytes - (raw_saddr % kSwizzleAtomBytes)) % kSwizzleAtomBytes);
    unsigned char *q_big = smem + C::kQOff, *q_small = q_big + C::kQBytes;
    unsigned char *p_big = smem + C::kPOff, *p_small = p_big + C::kPBytes;
    float *col_max = reinterpret_cast<float *>(smem + C::kStateOff); /* [2][warps][Q] */
    float *col_sum = col_max + 2 * kStWarps * kStQ;                  /* [warps][Q] */
    float *m_state = col_sum + kStWarps * kStQ;                      /* [2][Q]: by tile parity */
    float *l_state = m_state + 2 * kStQ;                             /* [Q] */
    float *alpha_state = l_state + kStQ;                             /* [Q] */
    float *l_comp = alpha_state + kStQ;                              /* [Q]: Kahan compensation of l */
    const uint32_t q_big_s = smem_u32(q_big), q_small_s = smem_u32(q_small);
    const uint32_t p_big_s = smem_u32(p_big), p_small_s = smem_u32(p_small);

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    /* kv_split 2: a cluster of two CTAs per query block, rank r takes the r-th half of the
     * key tiles; rank 1 hands its unnormalised O, m and l to rank 0, which merges and writes. */
    const int split = p.kv_split;
    const int rank = split == 2 ? (int)cluster_ctarank() : 0;
    const int q0 = (blockIdx.x / split) * kStQ;
    const int h = blockIdx.y, b = blockIdx.z;
    const float *qp = p.q + b * p.q_b + h * p.q_h;
    const float *kp = p.k + b * p.k_b + h * p.k_h;
    const float *vp = p.v + b * p.v_b + h * p.v_h;
    const int n_kv = attended_keys(p.kv_count, b, p.seq_kv); /* key padding: its keys only */
    const int *kv_rows = attended_rows(p.kv_index, b, p.seq_kv);
    const int n_all = (n_kv + kStK - 1) / kStK;
    const int half = (n_all + 1) / 2;
    const int tile_begin = rank == 1 ? half : 0;
    const int tile_end = split == 2 && rank == 0 ? half : n_all;

    /* Stage Q once: rows = queries, columns in the S^T slice order, big and small. */
    {
        constexpr int kVec = D / 4;
#pragma unroll 4
        for (int idx = tid; idx < kStQ * kVec; idx += kStThreads) {
            const int row = idx / kVec, c4 = idx % kVec;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (q0 + row < p.seq_q) x = __ldg(reinterpret_cast<const float4 *>(qp + (int64_t)(q0 + row) * p.q_t) + c4);
            /* q pre-scaled (exact for a power-of-two scale): scores in natural units, and a
             * denormal q with a large scale keeps its bits instead of TF32's subnormal grid. */
            const float e[4] = {x.x * p.scale, x.y * p.scale, x.z * p.scale, x.w * p.scale};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint32_t off = swizzled_offset(row, st_q_column(4 * c4 + j), kStQ);
                uint32_t bg, sm;
                split_tf32<true>(e[j], bg, sm); /* Q K^T is 3xTF32 in both modes */
                *reinterpret_cast<uint32_t *>(q_small + off) = sm;
                *reinterpret_cast<uint32_t *>(q_big + off) = bg;
            }
        }
    }
    if (tid < kStQ) {
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

    /* Byte offsets of this thread's P^T elements (query 2c+e, key 16w+g+8r) in the swizzled
     * P^T tiles; query 8i+2c+e adds 1024 i. */
    uint32_t p_off[2][2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int e = 0; e < 2; ++e) p_off[r][e] = swizzled_offset(2 * c + e, warp * 16 + g + 8 * r, kStQ);

    /* K rows of this thread (keys 16w+g and 16w+g+8 of a tile) and the tile's first kAhead
     * float4 pairs of them: loaded one phase ahead (during the previous tile's P V), so the
     * S^T products start on registers that have arrived. */
    constexpr int kAhead = C::kDPairs / 2;
    float4 kx_next[kAhead][2];
    st_load_k<kAhead>(kp, p.k_t, kv_rows, n_kv, tile_begin * kStK, warp, g, c, kx_next);

    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const int key0 = tile * kStK;
        const int parity = (tile - tile_begin) & 1;
        const uint64_t q_big_t = smem_desc_sw128(opaque(q_big_s)), q_small_t = smem_desc_sw128(opaque(q_small_s));
        const uint64_t p_big_t = smem_desc_sw128(opaque(p_big_s)), p_small_t = smem_desc_sw128(opaque(p_small_s));

        /* ---- S^T = K Q^T: A = K from registers (rows 16w+g, 16w+g+8), B = Q ---- */
        /* One pass over the tile's K, three accumulators: st_c takes the correction products
         * (small*big, big*small) of every slice, st_lo / st_hi the big*big products of the two
         * halves of head_dim. Only the 2 x 8 big*big accumulations round at full magnitude;
         * the corrections accumulate at their own small magnitude (v3.1 ran them in a first
         * pass into the same accumulator, which needed K twice). */
        const float4 *krow[2];
        bool kvalid[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int key = key0 + warp * 16 + g + 8 * r;
            kvalid[r] = key < n_kv;
            krow[r] = reinterpret_cast<const float4 *>(kp + (kvalid[r] ? key_row(kv_rows, key) : 0) * p.k_t);
        }
        constexpr int kHalfPairs = C::kDPairs / 2;
        const int d_base = C::kOutVec * (8 * warp + g);
        float2 vx[C::kVSlices][2];
        float st_c[C::kAcc], st_lo[C::kAcc], st_hi[C::kAcc];
        {
            float4 kx[C::kDPairs][2];
#pragma unroll
            for (int s = 0; s < kAhead; ++s) {
                kx[s][0] = kx_next[s][0];
                kx[s][1] = kx_next[s][1];
            }
            uint32_t ka_big[C::kDPairs][2][4], ka_small[C::kDPairs][2][4];
#pragma unroll
            for (int s = 0; s < C::kDPairs; ++s) {
                const float slice0[4] = {kx[s][0].x, kx[s][1].x, kx[s][0].y, kx[s][1].y};
                const float slice1[4] = {kx[s][0].z, kx[s][1].z, kx[s][0].w, kx[s][1].w};
                st_split4<2>(slice0, ka_big[s][0], ka_small[s][0]);
                st_split4<2>(slice1, ka_big[s][1], ka_small[s][1]);
                wgmma_fence();
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const int ks = 2 * s + u;
                    const uint64_t qb = st_desc(q_big_t, ks);
                    wgmma_m64n64k8_tf32_rs(st_c, ka_small[s][u], qb, (s > 0 || u > 0) ? 1 : 0);
                    wgmma_m64n64k8_tf32_rs(st_c, ka_big[s][u], st_desc(q_small_t, ks), 1);
                    if (s < kHalfPairs)
                        wgmma_m64n64k8_tf32_rs(st_lo, ka_big[s][u], qb, (s > 0 || u > 0) ? 1 : 0);
                    else
                        wgmma_m64n64k8_tf32_rs(st_hi, ka_big[s][u], qb, (s > kHalfPairs || u > 0) ? 1 : 0);
                }
                wgmma_commit();
                if (s + kAhead < C::kDPairs) {
#pragma unroll
                    for (int r = 0; r < 2; ++r)
                        kx[s + kAhead][r] = kvalid[r] ? krow[r][4 * (s + kAhead) + c] : make_float4(0.f, 0.f, 0.f, 0.f);
                }
                if (s > 0) {
                    wgmma_wait<1>(); /* the previous pair's A registers are free again */
                    fence_regs(ka_big[s - 1]);
                    fence_regs(ka_small[s - 1]);
                }
            }
            wgmma_wait_all();
            fence_regs(st_c);
            fence_regs(st_lo);
            fence_regs(st_hi);
            fence_regs(ka_big[C::kDPairs - 1]);
            fence_regs(ka_small[C::kDPairs - 1]);
        }
        float st[C::kAcc];
#pragma unroll
        for (int i = 0; i < C::kAcc; ++i) {
            /* An infinite big*big (an Inf in k) keeps its sign: its corrections are NaN. */
            const float big = st_lo[i] + st_hi[i];
            st[i] = isinf(big) ? big : big + st_c[i];
        }

        /* ---- softmax down the columns of S^T ---- */
        if (key0 + kStK > n_kv) { /* the last tile, partial: keys past n_kv get weight 0 */
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (key0 + warp * 16 + g + 8 * r >= n_kv) {
#pragma unroll
                    for (int i = 0; i < C::kAcc / 4; ++i) st[4 * i + 2 * r] = st[4 * i + 2 * r + 1] = -INFINITY;
                }
            }
        }
        float *cmax = col_max + parity * kStWarps * kStQ;
#pragma unroll
        for (int i = 0; i < C::kAcc / 4; ++i) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float mx = fmaxf(st[4 * i + e], st[4 * i + 2 + e]);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                if (g == 0) cmax[warp * kStQ + 8 * i + 2 * c + e] = mx;
            }
        }
        __syncthreads(); /* B1: column maxima of every warp */

        const float *m_old = m_state + parity * kStQ;
        float *m_new_state = m_state + (parity ^ 1) * kStQ;
#pragma unroll
        for (int i = 0; i < C::kAcc / 4; ++i) {
            /* the two queries 8i+2c, 8i+2c+1 of this thread: float2 reads */
            const float2 mo2 = *reinterpret_cast<const float2 *>(m_old + 8 * i + 2 * c);
            float2 mn2 = mo2;
#pragma unroll
            for (int w = 0; w < kStWarps; ++w) {
                const float2 x = *reinterpret_cast<const float2 *>(cmax + w * kStQ + 8 * i + 2 * c);
                mn2.x = fmaxf(mn2.x, x.x);
                mn2.y = fmaxf(mn2.y, x.y);
            }
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int q = 8 * i + 2 * c + e;
                const float mo = e ? mo2.y : mo2.x;
                const float mn = e ? mn2.y : mn2.x;
                if (warp == 0 && g == 0) {
                    m_new_state[q] = mn;
                    alpha_state[q] = exp2_approx((mo - mn) * kLog2e);
                }
                float sum = 0.f;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float &x = st[4 * i + 2 * r + e];
                    x = exp2_approx((x - mn) * kLog2e);
                    sum += x;
                    /* P^T[query q][key 16w+g+8r], big and small: rows 8i apart are 1024 bytes
                     * apart in the swizzled tile (8 rows of 128 bytes; the XOR pattern repeats). */
                    const uint32_t off = p_off[r][e] + (uint32_t)(i * kSwizzleAtomBytes);
                    uint32_t bg, sm;
                    if (kSplitPV) {
                        split_tf32<true>(x, bg, sm);
                        *reinterpret_cast<uint32_t *>(p_small + off) = sm;
                    } else {
                        bg = to_tf32(x);
                    }
                    *reinterpret_cast<uint32_t *>(p_big + off) = bg;
                }
                sum += __shfl_xor_sync(0xffffffffu, sum, 4);
                sum += __shfl_xor_sync(0xffffffffu, sum, 8);
                sum += __shfl_xor_sync(0xffffffffu, sum, 16);
                if (g == 0) col_sum[warp * kStQ + q] = sum;
            }
        }
        /* the first V block of the tile, loaded before B2: the barrier and the row-sum update
         * cover part of its latency */
        st_load_v<C::kVSlices>(vp, p.v_t, kv_rows, n_kv, key0, d_base, c, vx);
        fence_proxy_async();
        __syncthreads(); /* B2: P^T, alpha, the new maxima and the column sums are complete */

        if (tid < kStQ) {
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < kStWarps; ++w) sum += col_sum[w * kStQ + tid];
            /* l = l * alpha + sum, Kahan-compensated: 256 tiles at Skv = 16384 would otherwise
             * cost ~5e-7 of relative error in every output row. */
            const float a = alpha_state[tid];
            const float l = l_state[tid] * a, comp = l_comp[tid] * a;
            const float y = sum - comp;
            const float t = l + y;
            l_comp[tid] = (t - l) - y;
            l_state[tid] = t;
        }

        /* ---- O^T_tile = V^T P^T per 64 rows of head_dim; O = O * alpha + O_tile ---- */
        float alpha[C::kAcc / 2];
#pragma unroll
        for (int i = 0; i < C::kAcc / 4; ++i) {
            const float2 a2 = *reinterpret_cast<const float2 *>(alpha_state + 8 * i + 2 * c);
            alpha[2 * i] = a2.x;
            alpha[2 * i + 1] = a2.y;
        }
#pragma unroll
        for (int mb = 0; mb < C::kMBlocks; ++mb) {
            /* The three products of each slice together (a second pass with the corrections
             * first, as for S^T, spills at D = 128; P V starts from a fresh accumulator every
             * tile, so its partial sums stay small). Meanwhile the next block's V, or (after
             * the last block) the next tile's first K pairs, are loaded. */
            float2 vn[C::kVSlices][2];
            if (mb + 1 < C::kMBlocks)
                st_load_v<C::kVSlices>(vp + 2 * (mb + 1), p.v_t, kv_rows, n_kv, key0, d_base, c, vn);
            else
                st_load_k<kAhead>(kp, p.k_t, kv_rows, n_kv, key0 + kStK, warp, g, c, kx_next);
            /* This warp's V block scaled when all its values are tiny (tf32_tiny_values.h):
             * warp-uniform, one OR per value and a vote. */
            uint32_t bits = 0;
#pragma unroll
            for (int ks = 0; ks < C::kVSlices; ++ks)
#pragma unroll
                for (int u = 0; u < 2; ++u) bits |= __float_as_uint(vx[ks][u].x) | __float_as_uint(vx[ks][u].y);
            const bool tiny = !__any_sync(0xffffffffu, (bits & JATTN_TINY_EXPONENT_BITS) != 0);
            if (tiny) {
#pragma unroll
                for (int ks = 0; ks < C::kVSlices; ++ks)
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        vx[ks][u].x *= JATTN_TINY_SCALE;
                        vx[ks][u].y *= JATTN_TINY_SCALE;
                    }
            }
            float ot[C::kAcc];
            uint32_t va_big[C::kVSlices][4], va_small[C::kVSlices][4];
#pragma unroll
            for (int ks = 0; ks < C::kVSlices; ++ks) {
                const float a[4] = {vx[ks][0].x, vx[ks][0].y, vx[ks][1].x, vx[ks][1].y};
                st_split4<C::kPVParts>(a, va_big[ks], va_small[ks]);
                wgmma_fence();
                const uint64_t pb = st_desc(p_big_t, ks);
                if (kSplitPV) {
                    wgmma_m64n64k8_tf32_rs(ot, va_small[ks], pb, ks > 0);
                    wgmma_m64n64k8_tf32_rs(ot, va_big[ks], st_desc(p_small_t, ks), 1);
                    wgmma_m64n64k8_tf32_rs(ot, va_big[ks], pb, 1);
                } else {
                    wgmma_m64n64k8_tf32_rs(ot, va_big[ks], pb, ks > 0);
                }
                wgmma_commit();
                if (ks > 0) {
                    wgmma_wait<1>();
                    fence_regs(va_big[ks - 1]);
                    if (kSplitPV) fence_regs(va_small[ks - 1]);
                }
            }
            wgmma_wait_all();
            fence_regs(ot);
            fence_regs(va_big[C::kVSlices - 1]);
            if (kSplitPV) fence_regs(va_small[C::kVSlices - 1]);
            if (tiny) { /* a branch, not selects: rarely taken */
#pragma unroll
                for (int i = 0; i < C::kAcc; ++i) ot[i] *= JATTN_TINY_UNSCALE;
            }
#pragma unroll
            for (int i = 0; i < C::kAcc; ++i) o[mb][i] = fmaf(o[mb][i], alpha[2 * (i / 4) + (i % 2)], ot[i]);
            if (mb + 1 < C::kMBlocks) {
#pragma unroll
                for (int ks = 0; ks < C::kVSlices; ++ks) {
                    vx[ks][0] = vn[ks][0];
                    vx[ks][1] = vn[ks][1];
                }
            }
        }
        /* The next tile's B1 orders this tile's reads of P^T (by the wgmmas, all waited) and
         * of the softmax state before they are overwritten. */
    }

    __syncthreads(); /* the last tile's l_state update */
    float *m_final = m_state + ((tile_end - tile_begin) & 1) * kStQ;
    if (split == 2) {
        /* The Q tiles (no longer read) of rank 0 receive rank 1's O (the accumulator registers
         * of thread t at [j][t], float4 j), its m and its l. */
        float4 *x_o = reinterpret_cast<float4 *>(q_big);
        float *x_m = reinterpret_cast<float *>(q_big + C::kMBlocks * C::kAcc * 4 * kStThreads);
        float *x_l = x_m + kStQ;
        cluster_sync(); /* X1: both CTAs are done with their tiles; rank 0's Q region is free */
        if (rank == 1) {
            const uint32_t remote_o = cluster_map(smem_u32(x_o), 0);
#pragma unroll
            for (int mb = 0; mb < C::kMBlocks; ++mb)
#pragma unroll
                for (int j = 0; j < C::kAcc / 4; ++j)
                    st_cluster_v4(remote_o + 16u * (uint32_t)((mb * C::kAcc / 4 + j) * kStThreads + tid),
                                  make_float4(o[mb][4 * j], o[mb][4 * j + 1], o[mb][4 * j + 2], o[mb][4 * j + 3]));
            if (tid < kStQ) {
                st_cluster_f32(cluster_map(smem_u32(x_m + tid), 0), m_final[tid]);
                st_cluster_f32(cluster_map(smem_u32(x_l + tid), 0), l_state[tid]);
            }
        }
        cluster_sync(); /* X2: rank 1's partial results are in rank 0's shared memory */
        if (rank == 1) return;
        /* Per query: m = max(m0, m1), weights a0, a1 of the two halves, l = a0 l0 + a1 l1. */
        float *a0 = col_max, *a1 = col_max + kStQ;
        if (tid < kStQ) {
            const float m0 = m_final[tid], m1 = x_m[tid];
            const float m = fmaxf(m0, m1);
            const float w0 = exp2f((m0 - m) * kLog2e), w1 = exp2f((m1 - m) * kLog2e);
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
                const float4 x = x_o[(mb * C::kAcc / 4 + j) * kStThreads + tid];
                const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int q = 8 * j + 2 * c + (e % 2); /* accumulator register 4j+e */
                    o[mb][4 * j + e] = o[mb][4 * j + e] * a0[q] + xs[e] * a1[q];
                }
            }
    }
    const int d_base = C::kOutVec * (8 * warp + g);
#pragma unroll
    for (int i = 0; i < C::kAcc / 4; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int q = 8 * i + 2 * c + e;
            const int row = q0 + q;
            if (row >= p.seq_q) continue;
            const float l = l_state[q];
            const float inv = 1.f / l;
            float *dst = p.out + b * p.o_b + h * p.o_h + (int64_t)row * p.o_t + d_base;
            if (n_kv == 0) { /* no key to attend (key padding): 0, and lse -inf */
                for (int j = 0; j < C::kOutVec; ++j) dst[j] = 0.f;
                if (p.lse != nullptr && warp == 0 && g == 0)
                    p.lse[((int64_t)b * p.heads + h) * p.seq_q + row] = -INFINITY;
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
                p.lse[((int64_t)b * p.heads + h) * p.seq_q + row] = m_final[q] + logf(l);
        }
    }
#endif
}

/* Two CTAs per SM (registers, 200-244 per thread, and shared memory). */
constexpr int kStCtasPerSm = 2;

/* Split the keys of each query block over a cluster of two CTAs when that fills the last wave
 * of the machine better (at (1,24,1536) 576 CTAs take 2.18 waves of 264 slots, i.e. 3 waves
 * at 73% efficiency; 1152 half-length CTAs take 4.36, i.e. 5 at 87%), and each half keeps at
 * least kMinTilesPerHalf key tiles to amortise the merge. */
constexpr int kMinTilesPerHalf = 4;

int st_kv_split(int64_t ctas, int64_t seq_kv, int sms) {
    const int64_t slots = (int64_t)kStCtasPerSm * sms;
    if (slots <= 0 || (seq_kv + kStK - 1) / kStK < 2 * kMinTilesPerHalf) return 1;
    const double eff1 = (double)ctas / (double)(((ctas + slots - 1) / slots) * slots);
    const double eff2 = (double)(2 * ctas) / (double)(((2 * ctas + slots - 1) / slots) * slots);
    return eff2 > 1.1 * eff1 ? 2 : 1;
}

template <int D, bool kSplitPV>
cudaError_t st_launch(Params p, int64_t batch, int64_t heads, int64_t seq_q, int sms, cudaStream_t stream) {
    using C = StConfig<D, kSplitPV>;
    auto kernel = attention_f32_sm90_wgmma_st_64x64_kernel<D, kSplitPV>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (err != cudaSuccess) return err;
    const int64_t q_blocks = (seq_q + kStQ - 1) / kStQ;
    p.kv_split = st_kv_split(q_blocks * heads * batch, p.seq_kv, sms);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(q_blocks * p.kv_split), (unsigned)heads, (unsigned)batch);
    cfg.blockDim = dim3(kStThreads, 1, 1);
    cfg.dynamicSmemBytes = C::kSmemBytes;
    cfg.stream = stream;
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = (unsigned)p.kv_split;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cfg.attrs = &cluster;
    cfg.numAttrs = p.kv_split == 2 ? 1 : 0; /* a plain launch otherwise */
    return cudaLaunchKernelEx(&cfg, kernel, p);
}

} /* namespace */

extern "C" int jattn_cuda_launch_v3(const jattn_cuda_args *a, void *workspace, void *stream_ptr) {
    (void)workspace; /* none needed */
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    if (attention_f32_sm90_wgmma_supported(a) != ATTENTION_SM90_SUPPORTED) return cudaErrorInvalidValue;
    int dev = 0;
    cudaError_t err = sm90_current_device(&dev);
    if (err != cudaSuccess) return err;
    int sms = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    const Params p = params_from_args(a);
    const bool split = a->precision == JATTN_PRECISION_F32;
    if (a->head_dim == 128)
        return split ? st_launch<128, true>(p, a->batch, a->heads, a->seq_q, sms, stream)
                     : st_launch<128, false>(p, a->batch, a->heads, a->seq_q, sms, stream);
    return split ? st_launch<64, true>(p, a->batch, a->heads, a->seq_q, sms, stream)
                 : st_launch<64, false>(p, a->batch, a->heads, a->seq_q, sms, stream);
}
