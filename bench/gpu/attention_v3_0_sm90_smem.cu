/* attention_f32_sm90_wgmma_64x64 — version 3 of the cuda kernels (after SIMT v1 and the
 * mma.sync 3xTF32 v2): fp32-accurate flash attention with Hopper's wgmma, for sm_90a.
 *
 * Reads  q [B, H, Sq, D], k and v [B, H, Skv, D] (element strides per batch/head/token,
 *        head_dim contiguous, float4 aligned), D in {64, 128}.
 * Writes out [B, H, Sq, D] through its strides (token-major [S, H*D] for FLUX), and
 *        optionally lse [B, H, Sq] contiguous.
 *
 * Design (v3.0, correctness first; details and predictions in src/cuda/JOURNAL.md, "v3.0"):
 *  - One CTA = one warpgroup (128 threads) = 64 query rows of one (b, h): grid
 *    (ceil(Sq/64), H, B). Key/value tiles of 64 keys, online softmax in fp32 registers.
 *  - S = Q K^T: wgmma m64n64k8 tf32, A = Q and B = K from shared memory, both K-major over
 *    head_dim as stored (row i of the tile = one token, D contiguous), 128-byte swizzle.
 *  - O_tile = P V: wgmma m64n{D}k8 tf32 with P from registers (the S accumulator re-used as
 *    the A fragment, see below) and B = V^T staged in shared memory K-major over keys
 *    (a transposing copy from global), 128-byte swizzle. Each key tile's product goes into a
 *    fresh accumulator and is added into O in fp32 registers (O = O * alpha + O_tile).
 *  - f32 mode: every operand x is split into big = tf32_rn(x) and small = tf32_rn(x - big)
 *    while it is staged (Q, K, V in shared memory, P in registers); each product runs as
 *    small*big and big*small for every k-slice first, then the big*big terms
 *    (fewer roundings at full accumulator magnitude), fp32 accumulation.
 *    tf32 mode: big*big only, half the shared memory, two CTAs per SM.
 *  - Overlap (within the one warpgroup): the V^T tile is loaded, split and stored while the
 *    S wgmmas run; the next K tile while the P V wgmmas run. Plain ld.global / st.shared,
 *    no TMA yet (the transposing V copy and the split need the registers anyway).
 *
 * Shared memory: K-major operand tiles in the 128-byte-swizzle layout described in
 *   sm90_wgmma_ptx.cuh (with its descriptors).
 *
 * Register fragments (PTX ISA "wgmma register fragments", tf32): thread t of the warpgroup,
 * warp w = t/32, g = (t%32)/4, c = t%4.
 *   accumulator m64nN: reg 4i+0 -> (row 16w+g,   col 8i+2c), 4i+1 -> (16w+g,   8i+2c+1),
 *                      reg 4i+2 -> (row 16w+g+8, col 8i+2c), 4i+3 -> (16w+g+8, 8i+2c+1).
 *   A operand m64k8:   reg 0 -> (16w+g, k=c), 1 -> (16w+g+8, c), 2 -> (16w+g, c+4),
 *                      3 -> (16w+g+8, c+4).
 *   So the S accumulator of key block i becomes P's A fragment for k-slice i without any
 *   shuffle if slice position c holds key 8i+2c and position c+4 holds key 8i+2c+1:
 *   a = {s[4i+0], s[4i+2], s[4i+1], s[4i+3]}, and V^T is staged with the same key order
 *   inside every group of 8 keys (key j -> position (j>>1) + 4*(j&1)).
 *
 * Measured (H200, 2026-11-30, bench/results/h200-2026-11-30-lead): f32 28.0 / 32.8 / 36.2
 * TFLOP/s at (1,24,{1536,4608,16384},128), max_abs fails on large inputs; slower than v3.1,
 * so it stays out of the library (bench/gpu/wgmma_check.cu only). */
#include "attention_sm90.h"

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177 /* the shared helpers are unused where the kernel body is a trap */
#endif

#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kThreads = 128; /* one warpgroup */
constexpr int kBlockM = 64;   /* query rows per CTA = wgmma M */
constexpr int kBlockN = 64;   /* keys per tile */
static_assert(kBlockN % kTf32PerSwizzleRow == 0, "key tile must fill whole swizzle rows");
static_assert(kBlockM % 8 == 0 && kBlockN % 8 == 0, "tiles are made of 8-row groups");

template <int D, bool kSplit>
struct Config {
    static constexpr int kParts = kSplit ? 2 : 1; /* big (+ small) copies */
    static constexpr int kQBytes = kBlockM * D * 4;
    static constexpr int kKBytes = kBlockN * D * 4;
    static constexpr int kVtBytes = D * kBlockN * 4;
    static constexpr int kQOff = 0;
    static constexpr int kKOff = kQOff + kParts * kQBytes;
    static constexpr int kVtOff = kKOff + kParts * kKBytes;
    static constexpr int kSmemBytes = kVtOff + kParts * kVtBytes + kSwizzleAtomBytes; /* + alignment slack */
    static constexpr int kOAcc = D / 2; /* m64nD accumulator floats per thread */
    static constexpr int kSAcc = kBlockN / 2;
    static constexpr int kDSlices = D / kMmaK;       /* k-slices of Q K^T */
    static constexpr int kNSlices = kBlockN / kMmaK; /* k-slices of P V */
    static_assert(D % kTf32PerSwizzleRow == 0, "head_dim must fill whole swizzle rows");
    static_assert(kQBytes % kSwizzleAtomBytes == 0 && kKBytes % kSwizzleAtomBytes == 0 &&
                      kVtBytes % kSwizzleAtomBytes == 0,
                  "tile bases stay 1024-byte aligned");
};

template <int D>
__device__ __forceinline__ void wgmma_pv(float (&d)[D / 2], const uint32_t (&a)[4], uint64_t desc_b, int accumulate);
template <>
__device__ __forceinline__ void wgmma_pv<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    wgmma_m64n64k8_tf32_rs(d, a, desc_b, accumulate);
}
template <>
__device__ __forceinline__ void wgmma_pv<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    wgmma_m64n128k8_tf32_rs(d, a, desc_b, accumulate);
}

/* ---- tile staging (global fp32 -> shared tf32 big/small, swizzled) --------------------- */

/* Rows [row0, row0 + kRows) of a [token, D] matrix into a K-major tile (row = token);
 * rows at or past `rows_valid` are zero. Each warp moves whole rows, float4 per lane. */
template <int D, int kRows, bool kSplit>
__device__ __forceinline__ void stage_rows(unsigned char *big, unsigned char *small, const float *src,
                                           int64_t token_stride, int row0, int rows_valid, int tid) {
    constexpr int kVec = D / 4; /* float4 per row */
    constexpr int kIters = kRows * kVec / kThreads;
    constexpr int kBatch = 4; /* loads in flight per thread: the K tile is staged while O,
                                 the P V accumulator and P's fragments are all live */
    static_assert(kIters % kBatch == 0, "");
#pragma unroll 1
    for (int it0 = 0; it0 < kIters; it0 += kBatch) {
        float4 x[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int idx = (it0 + u) * kThreads + tid;
            const int row = idx / kVec, c4 = idx % kVec;
            x[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row0 + row < rows_valid)
                x[u] = __ldg(reinterpret_cast<const float4 *>(src + (int64_t)(row0 + row) * token_stride) + c4);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int idx = (it0 + u) * kThreads + tid;
            const int row = idx / kVec, c4 = idx % kVec;
            const uint32_t off = swizzled_offset(row, c4 * 4, kRows);
            uint4 b, s;
            if (kSplit) {
                tf32_split(x[u].x, b.x, s.x);
                tf32_split(x[u].y, b.y, s.y);
                tf32_split(x[u].z, b.z, s.z);
                tf32_split(x[u].w, b.w, s.w);
                *reinterpret_cast<uint4 *>(small + off) = s;
            } else {
                b = make_uint4(tf32_round(x[u].x), tf32_round(x[u].y), tf32_round(x[u].z), tf32_round(x[u].w));
            }
            *reinterpret_cast<uint4 *>(big + off) = b;
        }
    }
}

/* Keys [key0, key0 + kBlockN) of v [token, D] into the K-major tile V^T (row = d, column =
 * key position), keys in the P-fragment order (key j of a group of 8 at position
 * (j>>1) + 4*(j&1)); keys at or past `keys_valid` are zero (so 0 * garbage never makes NaN).
 * A warp reads 16 keys x 2 float4 per step; its scalar shared stores hit 32 distinct banks. */
template <int D, bool kSplit>
__device__ __forceinline__ void stage_vt(unsigned char *big, unsigned char *small, const float *src,
                                         int64_t token_stride, int key0, int keys_valid, int tid) {
    constexpr int kKeysPerStep = 16, kVecPerStep = 2;
    constexpr int kKeyGroups = kBlockN / kKeysPerStep;
    constexpr int kUnits = kKeyGroups * (D / 4 / kVecPerStep);
    constexpr int kWarps = kThreads / 32;
    constexpr int kIters = kUnits / kWarps;
    /* 8 float4 loads in flight per thread (the whole tile at D = 64, half at D = 128): this
     * runs while the S wgmmas are in flight, when only O and S are live. 16 at D = 128
     * spills in tf32 mode. */
    constexpr int kBatch = 8;
    static_assert(kIters % kBatch == 0, "");
    const int warp = tid / 32, lane = tid % 32;
#pragma unroll 1
    for (int it0 = 0; it0 < kIters; it0 += kBatch) {
        float4 x[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int unit = (it0 + u) * kWarps + warp;
            const int key = (unit % kKeyGroups) * kKeysPerStep + lane % kKeysPerStep;
            const int c4 = (unit / kKeyGroups) * kVecPerStep + lane / kKeysPerStep;
            x[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (key0 + key < keys_valid)
                x[u] = __ldg(reinterpret_cast<const float4 *>(src + (int64_t)(key0 + key) * token_stride) + c4);
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int unit = (it0 + u) * kWarps + warp;
            const int key = (unit % kKeyGroups) * kKeysPerStep + lane % kKeysPerStep;
            const int c4 = (unit / kKeyGroups) * kVecPerStep + lane / kKeysPerStep;
            const int pos = (key & ~7) | ((key & 7) >> 1) | ((key & 1) << 2);
            const float e[4] = {x[u].x, x[u].y, x[u].z, x[u].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint32_t off = swizzled_offset(c4 * 4 + j, pos, D);
                if (kSplit) {
                    uint32_t b, s;
                    tf32_split(e[j], b, s);
                    *reinterpret_cast<uint32_t *>(big + off) = b;
                    *reinterpret_cast<uint32_t *>(small + off) = s;
                } else {
                    *reinterpret_cast<uint32_t *>(big + off) = tf32_round(e[j]);
                }
            }
        }
    }
}

/* ---- the kernel ------------------------------------------------------------------------ */

template <int D, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1) attention_f32_sm90_wgmma_64x64_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    /* Compiled for another target (the library also emits compute_80 PTX): wgmma does not
     * exist there. The launch function refuses such devices; trap if reached anyway. */
    __trap();
#else
    using C = Config<D, kSplit>;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw_saddr = smem_u32(smem_raw);
    unsigned char *smem = smem_raw + ((kSwizzleAtomBytes - (raw_saddr % kSwizzleAtomBytes)) % kSwizzleAtomBytes);
    unsigned char *q_big = smem + C::kQOff, *q_small = q_big + C::kQBytes;
    unsigned char *k_big = smem + C::kKOff, *k_small = k_big + C::kKBytes;
    unsigned char *vt_big = smem + C::kVtOff, *vt_small = vt_big + C::kVtBytes;
    const uint32_t q_big_s = smem_u32(q_big), q_small_s = smem_u32(q_small);
    const uint32_t k_big_s = smem_u32(k_big), k_small_s = smem_u32(k_small);
    const uint32_t vt_big_s = smem_u32(vt_big), vt_small_s = smem_u32(vt_small);

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const int m0 = blockIdx.x * kBlockM;
    const int h = blockIdx.y, b = blockIdx.z;
    const float *qp = p.q + b * p.q_b + h * p.q_h;
    const float *kp = p.k + b * p.k_b + h * p.k_h;
    const float *vp = p.v + b * p.v_b + h * p.v_h;
    const float log2_scale = p.scale * kLog2e; /* exp(scale*x) = exp2(x*log2_scale) */
    const int n_tiles = (p.seq_kv + kBlockN - 1) / kBlockN;

    stage_rows<D, kBlockM, kSplit>(q_big, q_small, qp, p.q_t, m0, p.seq_q, tid);
    stage_rows<D, kBlockN, kSplit>(k_big, k_small, kp, p.k_t, 0, p.seq_kv, tid);
    fence_proxy_async();
    __syncthreads();

    float o[C::kOAcc];
#pragma unroll
    for (int i = 0; i < C::kOAcc; ++i) o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}; /* raw (unscaled) q.k maxima of rows g, g+8 */
    float row_sum[2] = {0.f, 0.f};             /* this thread's share of sum exp */
    float row_comp[2] = {0.f, 0.f};            /* its Kahan compensation */

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int key0 = tile * kBlockN;

        const uint32_t q_big_t = opaque(q_big_s), q_small_t = opaque(q_small_s);
        const uint32_t k_big_t = opaque(k_big_s), k_small_t = opaque(k_small_s);
        const uint32_t vt_big_t = opaque(vt_big_s), vt_small_t = opaque(vt_small_s);

        /* S = Q K^T (raw dot products), in flight while V^T is staged. */
        float s[C::kSAcc];
        wgmma_fence();
        if (kSplit) {
            /* The two correction terms of every slice first, while the accumulator is still
             * small, then the big*big terms: fewer roundings at full magnitude. */
#pragma unroll
            for (int ks = 0; ks < C::kDSlices; ++ks) {
                wgmma_m64n64k8_tf32_ss(s, slice_desc(q_small_t, ks, kBlockM), slice_desc(k_big_t, ks, kBlockN), ks > 0);
                wgmma_m64n64k8_tf32_ss(s, slice_desc(q_big_t, ks, kBlockM), slice_desc(k_small_t, ks, kBlockN), 1);
            }
        }
#pragma unroll
        for (int ks = 0; ks < C::kDSlices; ++ks)
            wgmma_m64n64k8_tf32_ss(s, slice_desc(q_big_t, ks, kBlockM), slice_desc(k_big_t, ks, kBlockN),
                                   kSplit || ks > 0);
        wgmma_commit();

        stage_vt<D, kSplit>(vt_big, vt_small, vp, p.v_t, key0, p.seq_kv, opaque(tid));
        fence_proxy_async();

        wgmma_wait_all();
        fence_regs(s);

        /* Online softmax over this tile: mask keys past seq_kv, row max, exp, row sum. */
        if (key0 + kBlockN > p.seq_kv) {
#pragma unroll
            for (int i = 0; i < C::kSAcc; ++i) {
                const int key = key0 + 8 * (i / 4) + 2 * c + (i % 2);
                if (key >= p.seq_kv) s[i] = -INFINITY;
            }
        }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = row_max[r];
#pragma unroll
            for (int i = 0; i < C::kSAcc / 4; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            alpha[r] = exp2f((row_max[r] - mx) * log2_scale);
            row_max[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < C::kSAcc / 4; ++i) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float &x = s[4 * i + 2 * r + e];
                    x = exp2f((x - mx) * log2_scale);
                    sum += x;
                }
            }
            { /* row_sum = row_sum * alpha + sum, Kahan-compensated (256 tiles at 16384 keys) */
                const float l = row_sum[r] * alpha[r], comp = row_comp[r] * alpha[r];
                const float y = sum - comp;
                const float t = l + y;
                row_comp[r] = (t - l) - y;
                row_sum[r] = t;
            }
        }

        /* P as the A operand of P V: k-slice i = keys 8i..8i+7 in the order described above. */
        uint32_t p_big[C::kNSlices][4], p_small[C::kNSlices][4];
#pragma unroll
        for (int i = 0; i < C::kNSlices; ++i) {
            const float a[4] = {s[4 * i + 0], s[4 * i + 2], s[4 * i + 1], s[4 * i + 3]};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (kSplit)
                    tf32_split(a[j], p_big[i][j], p_small[i][j]);
                else
                    p_big[i][j] = tf32_round(a[j]);
            }
        }

        __syncthreads(); /* V^T staged by every warp; every warp's S wgmmas done (K free) */

        /* O_tile = P V into a fresh accumulator, in flight while the next K tile is staged. */
        float o_tile[C::kOAcc];
        wgmma_fence();
        if (kSplit) {
#pragma unroll
            for (int ks = 0; ks < C::kNSlices; ++ks) {
                wgmma_pv<D>(o_tile, p_small[ks], slice_desc(vt_big_t, ks, D), ks > 0);
                wgmma_pv<D>(o_tile, p_big[ks], slice_desc(vt_small_t, ks, D), 1);
            }
        }
#pragma unroll
        for (int ks = 0; ks < C::kNSlices; ++ks)
            wgmma_pv<D>(o_tile, p_big[ks], slice_desc(vt_big_t, ks, D), kSplit || ks > 0);
        wgmma_commit();

        if (tile + 1 < n_tiles) {
            stage_rows<D, kBlockN, kSplit>(k_big, k_small, kp, p.k_t, key0 + kBlockN, p.seq_kv, tid);
            fence_proxy_async();
        }

        wgmma_wait_all();
        fence_regs(o_tile);
        fence_regs(p_big);
        if (kSplit) fence_regs(p_small);

#pragma unroll
        for (int i = 0; i < C::kOAcc; ++i) o[i] = o[i] * alpha[(i / 2) % 2] + o_tile[i];

        __syncthreads(); /* next K tile staged; every warp's P V done (V^T free) */
    }

    /* Epilogue: O / l, written through the output strides; lse = scale * max + log(l).
     * The row sums are reduced over the 4 threads of a row before any thread may leave. */
    float l[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] = row_sum[r];
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = m0 + warp * 16 + g + 8 * r;
        if (row < p.seq_q) {
            const float inv = 1.f / l[r];
            float *dst = p.out + b * p.o_b + h * p.o_h + (int64_t)row * p.o_t;
#pragma unroll
            for (int i = 0; i < C::kOAcc / 4; ++i) {
                const float2 v2 = make_float2(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
                *reinterpret_cast<float2 *>(dst + 8 * i + 2 * c) = v2;
            }
            if (p.lse != nullptr && c == 0)
                p.lse[((int64_t)b * p.heads + h) * p.seq_q + row] = row_max[r] * p.scale + logf(l[r]);
        }
    }
#endif
}

template <int D, bool kSplit>
cudaError_t launch(const Params &p, int64_t batch, int64_t heads, int64_t seq_q, cudaStream_t stream) {
    using C = Config<D, kSplit>;
    auto kernel = attention_f32_sm90_wgmma_64x64_kernel<D, kSplit>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (err != cudaSuccess) return err;
    const dim3 grid((unsigned)((seq_q + kBlockM - 1) / kBlockM), (unsigned)heads, (unsigned)batch);
    kernel<<<grid, kThreads, C::kSmemBytes, stream>>>(p);
    return cudaGetLastError();
}

} /* namespace */

/* attention_f32_sm90_wgmma_supported(), the contract check of every sm_90a version, is defined in
 * src/cuda/sm90_contract.c; this file links with it. */

extern "C" cudaError_t attention_f32_sm90_wgmma_64x64(const jattn_cuda_args *a, cudaStream_t stream) {
    if (attention_f32_sm90_wgmma_supported(a) != ATTENTION_SM90_SUPPORTED) return cudaErrorInvalidValue;
    int dev = 0;
    cudaError_t err = sm90_current_device(&dev);
    if (err != cudaSuccess) return err;
    const Params p = params_from_args(a);
    const bool split = a->precision == JATTN_PRECISION_F32;
    if (a->head_dim == 128)
        return split ? launch<128, true>(p, a->batch, a->heads, a->seq_q, stream)
                     : launch<128, false>(p, a->batch, a->heads, a->seq_q, stream);
    return split ? launch<64, true>(p, a->batch, a->heads, a->seq_q, stream)
                 : launch<64, false>(p, a->batch, a->heads, a->seq_q, stream);
}
