/* attention v5 (launcher jattn_cuda_launch_v5, reported as cuda_v5_flash_*_f16x2_sm90_ws_128x64):
 * kernel v4's 2xFP16 arithmetic (f16x2_split.cuh; the same pre-pass and workspace) in a
 * warp-specialized CTA, for sm_90a.
 *
 * Reads  q [B, H, Sq, D] (element strides, head_dim contiguous, float4 aligned), D in {64, 128},
 *        and the workspace attention_v4_split_kv_f16x2.cu wrote from k and v (f16x2_split.cuh).
 * Writes out [B, H, Sq, D] through its strides, and optionally lse [B, H, Sq] contiguous.
 * Same contract as v4 (attention_sm90.h), calls without key padding.
 *
 * Why: v4's profile (JOURNAL.md, "v4") has the tensor pipe 34% busy, its top stall the wgmma fence
 * waiting for K and V fragments loaded from global memory by the consumers themselves, and one
 * warpgroup per CTA that runs S^T, the softmax and P V in series. v5, one CTA of three
 * warpgroups per SM and 128 queries per CTA:
 *  - warpgroup 0, the producer (setmaxnreg down to 24 registers): one thread moves each split
 *    key tile (the K tile, then the V tile, 64 keys x D x hi, lo = 64 D x 4 bytes each, already
 *    contiguous in the pre-pass's fragment order) by one bulk copy (cp.async.bulk) into a ring
 *    of kStages shared-memory slots, each guarded by a "full" mbarrier (the copy's bytes) and an
 *    "empty" one (one arrival per consumer thread once its fragments are in registers: an
 *    arrival releases the arriving thread's own reads only, PTX memory model);
 *  - warpgroups 1 and 2, the consumers (setmaxnreg up to 240): each owns 64 queries and runs
 *    v4's per-tile step on them, S^T = K Q^T (A = K fragments read from the ring by 16-byte
 *    shared loads, B = its Q hi and lo), the softmax down the columns (two named barriers of its
 *    128 threads), O^T = V^T P^T (A = V fragments from the ring, B = its P^T hi and lo);
 *  - ping-pong (variant 2, off by default: measured 1% slower): a pair of named barriers over
 *    the 256 consumer threads gives the tensor core to the consumers in turns (one's S^T, the
 *    other's S^T, one's P V, the other's P V, ...).
 * Numerics are v4's, operation for operation (the same accumulators, chains, scales and
 * softmax): the same bits as v4's two-CTA instance without its split-KV cluster (bench tables:
 * equal rel_l2 where the plan runs that instance).
 *
 * Shared memory per CTA (D = 128 / 64): two consumer regions (Q hi, lo 32 / 16 KB; P^T hi, lo
 * 16 KB; the softmax state 4.75 KB) and the ring, 3 slots of 32 KB / 8 of 16 KB: 203 / 203 KB.
 *
 * Measured against v4 in the same runs: src/cuda/NOTES.md's version table. v5 is faster only
 * where a head's split K and V outgrow half the L2, so it is the default only there
 * (cuda_backend.c). The profile and what limits it: JOURNAL.md, section "v5". */
#include "attention_sm90.h"

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177 /* the shared helpers are unused where the kernel body is a trap */
#endif

#include "f16x2_split.cuh"
#include "f16x2_tile_step.cuh"
#include "sm90_pipeline_ptx.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kConsumers = 2;
constexpr int kWgThreads = 128;
constexpr int kThreads = kWgThreads * (1 + kConsumers);
constexpr int kWarps = kWgThreads / 32; /* warps of one consumer */
constexpr int kQ = 64;                  /* queries per consumer: N of both products */
constexpr int kCtaQ = kConsumers * kQ;
constexpr int kK = kF16Tile; /* keys per tile */
constexpr int kF16K = 16;
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
constexpr int kMaxSmem = 227 * 1024;
/* named barriers: 1 + c = consumer c's own; 3 + c = consumer c's turn at the tensor core */
constexpr int kBarOwn = 1, kBarTurn = 3;

struct V5Params {
    Params base;
    const uint4 *k_split, *v_split;
    const float *k_unscale, *v_unscale;
    const int *v_tiny;
    int tiles;
    int pingpong; /* 1: the consumers take turns at the tensor core (variant 2); 0: they do not */
};

template <int D, bool kSplitPV>
struct V5Config {
    static constexpr int kQBytes = kQ * D * 2; /* one part (hi or lo) */
    static constexpr int kPBytes = kQ * kK * 2;
    static constexpr int kQOff = 0;
    static constexpr int kPOff = kQOff + 2 * kQBytes;
    static constexpr int kStateOff = kPOff + 2 * kPBytes;
    /* floats: col_max[2][warps][Q], col_sum[warps][Q], m[2][Q], l[Q], alpha[Q], l_comp[Q],
     * q_unscale[Q], q_log2e[Q] */
    static constexpr int kStateFloats = 2 * kWarps * kQ + kWarps * kQ + 2 * kQ + 5 * kQ;
    static constexpr int kRegionBytes =
        (kStateOff + kStateFloats * 4 + kSwizzleAtomBytes - 1) / kSwizzleAtomBytes * kSwizzleAtomBytes;
    static constexpr int kSlotBytes = kK * D * 4; /* one split K or V tile (hi and lo) */
    static constexpr int kRingOff = kConsumers * kRegionBytes;
    static constexpr int kFreeSlots = (kMaxSmem - kSwizzleAtomBytes - kRingOff - 256) / kSlotBytes;
    static constexpr int kStages = kFreeSlots < 8 ? kFreeSlots : 8;
    static constexpr int kBarOff = kRingOff + kStages * kSlotBytes;
    static constexpr int kSmemBytes = kBarOff + 2 * kStages * 8 + kSwizzleAtomBytes; /* + alignment slack */
    static constexpr int kSlices = D / kF16K;
    static constexpr int kAhead = 4; /* K slices read from the ring ahead of their products */
    static constexpr int kMBlocks = D / 64;
    static constexpr int kAcc = kQ / 2;
    static constexpr int kVSlices = kK / kF16K;
    static constexpr int kOutVec = 2 * kMBlocks;
    static_assert(kStages >= 3, "the ring holds a K tile, a V tile and the next K tile");
    static_assert(kSmemBytes <= kMaxSmem, "shared memory");
    static_assert(kQBytes % kSwizzleAtomBytes == 0 && kPBytes % kSwizzleAtomBytes == 0, "1024-byte aligned tiles");
};

/* The pipeline position of ring use i (K of tile t: i = 2t, V: 2t + 1). */
template <int kStages>
__device__ __forceinline__ void ring_position(int i, int &slot, uint32_t &parity) {
    slot = i % kStages;
    parity = (uint32_t)((i / kStages) & 1);
}

/* One consumer warp's 16-byte fragments of a K slot: [w][slice][hi, lo][lane]. */
template <int N>
__device__ __forceinline__ void k_from_ring(const uint4 *warp_k, int s0, uint4 (&kx)[N][2], int at) {
    kx[at][0] = warp_k[64 * s0];
    kx[at][1] = warp_k[64 * s0 + 32];
}

/* This thread's V^T fragments (hi, and lo when kLo) of one 64-row block of head_dim. */
template <bool kLo>
__device__ __forceinline__ void v_from_ring(const uint4 *block_v, int warp, int lane, uint4 (&vx)[4][2]) {
    const uint4 *src = block_v + warp * 4 * 64 + lane;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        vx[ks][0] = src[64 * ks];
        if (kLo) vx[ks][1] = src[64 * ks + 32];
    }
}

template <int D, bool kSplitPV>
__global__ void __launch_bounds__(kThreads, 1) attention_f32_sm90_ws_f16x2_128x64_kernel(const V5Params fp) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* another target (the library's compute_80 PTX): the launch refuses such devices */
#else
    using C = V5Config<D, kSplitPV>;
    const Params &p = fp.base;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw_saddr = smem_u32(smem_raw);
    unsigned char *smem = smem_raw + ((kSwizzleAtomBytes - (raw_saddr % kSwizzleAtomBytes)) % kSwizzleAtomBytes);
    unsigned char *ring = smem + C::kRingOff;
    const uint32_t ring_s = smem_u32(ring);
    const uint32_t full_s = smem_u32(smem + C::kBarOff), empty_s = full_s + 8u * C::kStages;

    const int wg = threadIdx.x / kWgThreads;
    const int h = blockIdx.y, b = blockIdx.z;
    const int64_t bh = (int64_t)b * p.heads + h;
    const int n_tiles = fp.tiles;

    if (threadIdx.x == 0) {
        for (int s = 0; s < C::kStages; ++s) {
            mbar_init(full_s + 8u * s, 1);
            mbar_init(empty_s + 8u * s, kConsumers * kWgThreads);
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer: K(t), V(t) for t = 0 .. T-1 through the ring ---- */
        setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == 0) {
            const unsigned char *k_head =
                reinterpret_cast<const unsigned char *>(fp.k_split) + bh * n_tiles * C::kSlotBytes;
            const unsigned char *v_head =
                reinterpret_cast<const unsigned char *>(fp.v_split) + bh * n_tiles * C::kSlotBytes;
            for (int i = 0; i < 2 * n_tiles; ++i) {
                int slot;
                uint32_t parity;
                ring_position<C::kStages>(i, slot, parity);
                mbar_wait(empty_s + 8u * slot, parity ^ 1u);
                mbar_arrive_expect_tx(full_s + 8u * slot, C::kSlotBytes);
                const unsigned char *src = ((i & 1) ? v_head : k_head) + (int64_t)(i >> 1) * C::kSlotBytes;
                bulk_copy_g2s(ring_s + (uint32_t)(slot * C::kSlotBytes), src, C::kSlotBytes, full_s + 8u * slot);
            }
        }
        return;
    }
    setmaxnreg_inc<kConsumerRegs>();

    /* ---- consumer cw: queries q0 .. q0 + 63 ---- */
    const int cw = wg - 1;
    unsigned char *region = smem + cw * C::kRegionBytes;
    unsigned char *q_hi = region + C::kQOff, *q_lo = q_hi + C::kQBytes;
    unsigned char *p_hi = region + C::kPOff, *p_lo = p_hi + C::kPBytes;
    float *col_max = reinterpret_cast<float *>(region + C::kStateOff); /* [2][warps][Q] */
    float *col_sum = col_max + 2 * kWarps * kQ;                        /* [warps][Q] */
    float *m_state = col_sum + kWarps * kQ;                            /* [2][Q]: by tile parity, in t units */
    float *l_state = m_state + 2 * kQ;                                 /* [Q] */
    float *alpha_state = l_state + kQ;                                 /* [Q] */
    float *l_comp = alpha_state + kQ;                                  /* [Q]: Kahan compensation of l */
    float *q_unscale = l_comp + kQ;                                    /* [Q]: 2^-eq */
    float *q_log2e = q_unscale + kQ;                                   /* [Q]: 2^-eq log2(e) */
    const uint32_t q_hi_s = smem_u32(q_hi), q_lo_s = smem_u32(q_lo);
    const uint32_t p_hi_s = smem_u32(p_hi), p_lo_s = smem_u32(p_lo);
    const int own_bar = kBarOwn + cw;

    const int tid = threadIdx.x - wg * kWgThreads;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const int q0 = blockIdx.x * kCtaQ + cw * kQ;
    const float *qp = p.q + b * p.q_b + h * p.q_h;
    const float *v_unscale_head = fp.v_unscale + bh * n_tiles * D;
    const int *v_tiny_head = fp.v_tiny + bh * n_tiles;

    f16x2_stage_q<D, kQ>(qp, p.q_t, p.seq_q, q0, p.scale, tid, q_hi, q_lo, q_unscale, q_log2e);
    if (tid < kQ) {
        m_state[tid] = -INFINITY;
        l_state[tid] = 0.f;
        l_comp[tid] = 0.f;
    }
    fence_proxy_async();
    named_bar_sync(own_bar, kWgThreads);

    float o[C::kMBlocks][C::kAcc];
#pragma unroll
    for (int mb = 0; mb < C::kMBlocks; ++mb)
#pragma unroll
        for (int i = 0; i < C::kAcc; ++i) o[mb][i] = 0.f;

    uint32_t p_off[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) p_off[e] = swizzled_offset_f16(2 * c + e, warp * 16 + 2 * g, kQ);

    /* consumer 0 has the first turn */
    const bool pingpong = fp.pingpong != 0;
    if (pingpong && cw == 1) named_bar_arrive(kBarTurn + 0, kConsumers * kWgThreads);

    const int d_base = C::kOutVec * (8 * warp + g);
    for (int tile = 0; tile < n_tiles; ++tile) {
        const int key0 = tile * kK;
        const int parity = tile & 1;
        const uint64_t q_hi_t = smem_desc_sw128(opaque(q_hi_s)), q_lo_t = smem_desc_sw128(opaque(q_lo_s));
        const uint64_t p_hi_t = smem_desc_sw128(opaque(p_hi_s)), p_lo_t = smem_desc_sw128(opaque(p_lo_s));
        int k_slot, v_slot;
        uint32_t k_par, v_par;
        ring_position<C::kStages>(2 * tile, k_slot, k_par);
        ring_position<C::kStages>(2 * tile + 1, v_slot, v_par);
        float kf[2];
        {
            const float *f = fp.k_unscale + (bh * n_tiles + tile) * kK + warp * 16 + g;
            kf[0] = f[0];
            kf[1] = f[8];
        }
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

        /* ---- S^T = K Q^T, K from the ring ---- */
        float st[C::kAcc], st_c[C::kAcc], st2[C::kAcc];
        {
            mbar_wait(full_s + 8u * k_slot, k_par);
            const uint4 *warp_k =
                reinterpret_cast<const uint4 *>(ring + k_slot * C::kSlotBytes) + warp * (C::kSlices * 64) + lane;
            uint4 kx[C::kSlices][2];
#pragma unroll
            for (int s = 0; s < C::kAhead; ++s) k_from_ring(warp_k, s, kx, s);
            if (pingpong) named_bar_sync(kBarTurn + cw, kConsumers * kWgThreads);
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
                if (s < C::kSlices / 2)
                    wgmma_m64n64k16_f16_rs(st, ka_hi[s], qh, s > 0 ? 1 : 0);
                else
                    wgmma_m64n64k16_f16_rs(st2, ka_hi[s], qh, s > C::kSlices / 2 ? 1 : 0);
                wgmma_commit();
                if (s + C::kAhead < C::kSlices) k_from_ring(warp_k, s + C::kAhead, kx, s + C::kAhead);
                if (s > 0) {
                    wgmma_wait<1>();
                    fence_regs(ka_hi[s - 1]);
                    fence_regs(ka_lo[s - 1]);
                }
            }
            if (pingpong) named_bar_arrive(kBarTurn + (cw ^ 1), kConsumers * kWgThreads); /* the other's turn */
            mbar_arrive(empty_s + 8u * k_slot); /* this thread's K fragments are in registers */
            wgmma_wait_all();
            fence_regs(st);
            fence_regs(st2);
            fence_regs(st_c);
            fence_regs(ka_hi[C::kSlices - 1]);
            fence_regs(ka_lo[C::kSlices - 1]);
        }
        /* ---- softmax down the columns of S^T, in t units (as v4) ---- */
        float *cmax = col_max + parity * kWarps * kQ;
        f16x2_scores_column_max<C::kAcc, kWarps, kQ, true>(st, st2, st_c, kf, key0, p.seq_kv, cmax, warp, g, c);
        named_bar_sync(own_bar, kWgThreads); /* B1: column maxima of every warp */

        f16x2_column_softmax<C::kAcc, kWarps, kQ, kSplitPV, true>(st, cmax, m_state + parity * kQ,
                                                                  m_state + (parity ^ 1) * kQ, alpha_state, q_log2e,
                                                                  col_sum, p_hi, p_lo, p_off, warp, g, c);
        /* the first V block of the tile, read from the ring before B2 */
        mbar_wait(full_s + 8u * v_slot, v_par);
        const uint4 *tile_v =
            reinterpret_cast<const uint4 *>(ring + v_slot * C::kSlotBytes); /* [mb][w][ks][part][lane] */
        uint4 vx[C::kVSlices][2];
        v_from_ring<kSplitPV>(tile_v, warp, lane, vx);
        fence_proxy_async();
        named_bar_sync(own_bar, kWgThreads); /* B2: P^T, alpha, the new maxima and the column sums */

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
            const float a = alpha_state[tid];
            const float l = l_state[tid] * a, comp = l_comp[tid] * a;
            const float y = sum - comp;
            const float t = l + y;
            l_comp[tid] = (t - l) - y;
            l_state[tid] = t;
        }

        /* ---- O^T_tile = V^T P^T per 64 rows of head_dim; O = O * alpha + O_tile * 2^-ev ---- */
        if (pingpong) named_bar_sync(kBarTurn + cw, kConsumers * kWgThreads);
#pragma unroll
        for (int mb = 0; mb < C::kMBlocks; ++mb) {
            uint4 vn[C::kVSlices][2];
            if (mb + 1 < C::kMBlocks) v_from_ring<kSplitPV>(tile_v + (int64_t)(mb + 1) * 1024, warp, lane, vn);
            float ot[C::kAcc];
            uint32_t va_hi[C::kVSlices][4], va_lo[C::kVSlices][4];
            f16x2_pv_issue<kSplitPV, C::kVSlices, C::kAcc, kQ>(ot, vx, va_hi, va_lo, p_hi_t, p_lo_t);
            if (mb + 1 == C::kMBlocks) {
                if (pingpong) named_bar_arrive(kBarTurn + (cw ^ 1), kConsumers * kWgThreads); /* the other's turn */
                mbar_arrive(empty_s + 8u * v_slot); /* this thread's V fragments are in registers */
            }
            f16x2_pv_finish<kSplitPV, C::kVSlices, C::kAcc, C::kOutVec>(o[mb], ot, va_hi, va_lo, alpha, vf, mb, tiny);
            if (mb + 1 < C::kMBlocks) {
#pragma unroll
                for (int ks = 0; ks < C::kVSlices; ++ks) {
                    vx[ks][0] = vn[ks][0];
                    vx[ks][1] = vn[ks][1];
                }
            }
        }
    }
    /* consumer 1's last "your turn" to consumer 0 has no turn after it: take it */
    if (pingpong && cw == 0) named_bar_sync(kBarTurn + 0, kConsumers * kWgThreads);

    named_bar_sync(own_bar, kWgThreads); /* the last tile's l_state update */
    const float *m_final = m_state + (n_tiles & 1) * kQ;
    f16x2_write_out<C::kMBlocks, C::kAcc, C::kOutVec>(o, l_state, m_final, q_unscale, p.out + b * p.o_b + h * p.o_h,
                                                      p.o_t, p.lse != nullptr ? p.lse + bh * p.seq_q : nullptr, q0,
                                                      p.seq_q, d_base, false, warp, g, c);
#endif
}

template <int D, bool kSplitPV>
cudaError_t v5_launch(const V5Params &fp, int64_t batch, int64_t heads, int64_t seq_q, cudaStream_t stream) {
    using C = V5Config<D, kSplitPV>;
    auto kernel = attention_f32_sm90_ws_f16x2_128x64_kernel<D, kSplitPV>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (err != cudaSuccess) return err;
    const dim3 grid((unsigned)((seq_q + kCtaQ - 1) / kCtaQ), (unsigned)heads, (unsigned)batch);
    kernel<<<grid, kThreads, C::kSmemBytes, stream>>>(fp);
    return cudaGetLastError();
}

} /* namespace */

extern "C" cudaError_t split_kv_f16x2(const jattn_cuda_args *a, void *workspace, cudaStream_t stream);

extern "C" int jattn_cuda_launch_v5(const jattn_cuda_args *a, void *workspace, void *stream_ptr) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    if (attention_f32_sm90_wgmma_supported(a) != ATTENTION_SM90_SUPPORTED || workspace == nullptr ||
        reinterpret_cast<uintptr_t>(workspace) % 16 != 0 || a->kv_count != nullptr)
        return cudaErrorInvalidValue;
    int dev = 0;
    cudaError_t err = sm90_current_device(&dev);
    if (err != cudaSuccess) return err;
    err = split_kv_f16x2(a, workspace, stream);
    if (err != cudaSuccess) return err;
    const F16x2Layout L = f16x2_layout(a->batch, a->heads, a->seq_kv, a->head_dim);
    const unsigned char *ws = static_cast<const unsigned char *>(workspace);
    V5Params fp;
    fp.base = params_from_args(a);
    fp.k_split = reinterpret_cast<const uint4 *>(ws + L.k_split);
    fp.k_unscale = reinterpret_cast<const float *>(ws + L.k_unscale);
    fp.v_split = reinterpret_cast<const uint4 *>(ws + L.v_split);
    fp.v_unscale = reinterpret_cast<const float *>(ws + L.v_unscale);
    fp.v_tiny = reinterpret_cast<const int *>(ws + L.v_tiny);
    fp.tiles = (int)L.tiles;
    fp.pingpong = a->v5_variant == 2 ? 1 : 0; /* measured: no gain (JOURNAL.md, "v5") */
    const bool f32 = a->precision == JATTN_PRECISION_F32;
    if (a->head_dim == 64)
        return f32 ? v5_launch<64, true>(fp, a->batch, a->heads, a->seq_q, stream)
                   : v5_launch<64, false>(fp, a->batch, a->heads, a->seq_q, stream);
    return f32 ? v5_launch<128, true>(fp, a->batch, a->heads, a->seq_q, stream)
               : v5_launch<128, false>(fp, a->batch, a->heads, a->seq_q, stream);
}
