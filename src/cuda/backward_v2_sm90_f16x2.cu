/* backward v2 (launcher jattn_cuda_launch_bwd_v2, reported as cuda_bwd_v2_f16x2_sm90_wgmma): the
 * exact-f32 attention backward (dq, dk, dv) on Hopper's fp16 wgmma, every operand split into two
 * scaled fp16 parts (2xFP16, f16x2_split.cuh) and every product on three fp16 products
 * (hi*hi + hi*lo + lo*hi, fp32 accumulation). sm_90a, D 64 and 128, f32 precision.
 *
 * Per (b, h), c = scale, lse the forward's row log-sum-exp (natural log):
 *   Dl_i  = sum_d dO_id O_id - dlse_i                       (pre-pass, float64, kept as hi + lo)
 *   S_ij  = (c q_i) . k_j;   P_ij = exp(S_ij - lse_i)       (recomputed)
 *   dP_ij = dO_i . v_j;      dS_ij = P_ij (dP_ij - Dl_i)
 *   dV_j  = sum_i P_ij dO_i;  dK_j = sum_i dS_ij (c q_i);  dQ_i = c sum_j dS_ij k_j
 *
 * Kernels, all on the caller's stream (no atomics: every gradient element is summed by one thread
 * in a fixed order, so the results are bit-identical from run to run):
 *   bwd_v2_split (backward_v2_split_f16x2.cu): the tile records (backward_v2_records.cuh) of
 *       q * c, dout (with Dl), k, v (with lse in the q records), one power of two per 64-row tile.
 *   bwd_v2_kernel<D, role>, three instances of one structure (roles dQ, dK, dV), grid
 *       (ceil(T_rows / 2), H, B): a CTA of three warpgroups, as kernel v6's. Warpgroup 0 (one
 *       thread, setmaxnreg 24) bulk-copies the two "row" records of each consumer once (dQ: q and
 *       dout of its 64 queries; dK: k and v of its 64 keys; dV: k) and then streams the "column"
 *       records tile by tile, two per tile (dQ: k then v; dK, dV: q then dout) through a ring of
 *       three shared-memory slots (full / empty mbarriers). Warpgroups 1 and 2 (setmaxnreg 240)
 *       own 64 rows each and walk every column tile in ascending order:
 *        1. S = A_row B_col^T over head_dim (dQ: S = Q K^T; dK, dV: S^T = K Q^T): m64n64k16 ss,
 *           both operands from shared memory; the 2 D/16 corrections (hi*lo, lo*hi) in one chain,
 *           hi*hi one k16 slice at a time into a fresh accumulator added by Kahan summation into a
 *           (big, cor) pair: the tensor core's fp32 accumulation of the hi*hi chain is the
 *           error that matters for S (the removed backward v1's measurement, src/cuda/JOURNAL.md), and an error
 *           e in S is a relative error e in P.
 *        2. P = exp((big u - lse) + cor u), u the two tiles' power-of-two unscale (exact);
 *           lse per query (a row in dQ, a column in dK / dV, from the q record); keys past seq_kv
 *           get P = 0 (dQ), queries past seq_q have lse = +inf (P = 0). A query's P >= 1/2 element
 *           (its dominant key, at most one) takes the P of its score recomputed exactly and (dQ, dK)
 *           the dS of its dP recomputed exactly: dQ finds it and leaves (P, dP - Dl, key) in the
 *           row's dominant weight, dK and dV take them from there (2b in the body).
 *        3. dQ, dK: dP = B_row C_col^T the same way (dQ: dO V^T; dK: V dO^T), dS = P ((dP_big u
 *           - Dl_hi) + dP_cor u - Dl_lo). kSChain and kDpChain (below) are the k16 slices of hi*hi
 *           per compensated term of S and of dP (0: one chain, uncompensated), kFastExp P by
 *           ex2.approx instead of expf: the arithmetic the tail run chose (src/cuda/NOTES.md).
 *        4. X = dS (dQ, dK) or P (dV), scaled per row by a power of two from the row's largest
 *           |X| over the tile (two quad shuffles) and split hi / lo from the registers into the
 *           A fragments of the last product: tile = X B' with B' the column tile whose rows are
 *           the contraction (dQ: K; dK: c Q; dV: dO), m64nDk16 rs, B MN-major (imm-trans-b)
 *           from the same image (lo*hi, hi*lo, hi*hi) into a FRESH accumulator, then
 *           acc += tile 2^-e_row u_col in fp32 (as v6's O).
 *       Written: dq (times c), dk, dv [B, H, S, D] through their strides (float2 stores), rows
 *       past the sequence skipped; dQ also the rows' dominant weights (backward_v2_records.cuh), so dK
 *       waits for dQ before it starts (and lets dV start only then).
 * Accumulator layout (m64nN, PTX ISA "wgmma register fragments"): thread (warp w, lane 4g + c)
 * holds rows 16w + g (regs 4i + e) and 16w + g + 8 (regs 4i + 2 + e) of columns 8i + 2c + e; an
 * m64n64 accumulator's regs 8ks .. 8ks + 7 are then exactly the A fragment of k16 slice ks of the
 * next product (as v6's P).
 * Shared memory (D = 128): row images 2 consumers x 2 records x 32 KB, ring 3 x 32 KB, the ring's
 * record extras 3 x 528 B: 226 KB of the 227.
 * Not taken (the launcher runs backward v3 instead): key padding, tf32 precision, pointers or
 * strides not float4-aligned, B*H > 65535; one key (cuda_versions.c). Non-finite inputs are not
 * handled (as the removed v1's), nor float32's denormal range: the tile's power of two is clamped at 2^126, so
 * values below about 2^-129 lose bits (v6's forward pre-scales such v tiles by 2^64). As in every
 * 2xFP16 split (f16x2_split.cuh), an element more than 2^17 below its tile's largest keeps an
 * absolute error under 2^-39 of that largest.
 *
 * Registers (ptxas 13.0): 168 at entry, setmaxnreg 24 / 240, no local memory.
 * Measured (H200, 2026-12-02, bench/results/h200-2026-12-02-bwd-v2/call2): 1.059 / 8.417 / 103.75 ms
 * at (1,24,S,128), S = 1536 / 4608 / 16384 = 2.38x / 2.26x / 2.15x PyTorch's fp32 SDPA backward;
 * every case of test_backward it runs passed; the variants and what limits it: src/cuda/NOTES.md,
 * "The backward". */
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

#include "backward_v2_records.cuh"
#include "cuda_internal.h"
#include "exact_score.cuh"
#include "f16x2_split.cuh"
#include "sm90_pipeline_ptx.cuh"
#include "sm90_wgmma_f16_ptx.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kWg = 128;
constexpr int kConsumers = 2;
constexpr int kThreads = kWg * (1 + kConsumers);
constexpr int kStages = 3;
constexpr int kExtrasPad = (kBwdExtras + 15) / 16 * 16;

enum BwdRole { kRoleDQ = 0, kRoleDK = 1, kRoleDV = 2 };

struct BwdV2Params {
    const unsigned char *row_rec[2]; /* the consumers' row records: [bh][row tiles] */
    const unsigned char *col_rec[2]; /* the streamed column records: [bh][col tiles] */
    float4 *top;                     /* [bh][Tq 64]: each query row's dominant (P, dP - Dl, key, 0) (2b) */
    const float *dout, *v;           /* the caller's (dQ: the dominant element's dP, 2b) */
    int64_t do_b, do_h, do_t, v_b, v_h, v_t;
    float *out;
    int64_t o_b, o_h, o_t;
    int heads, row_tiles, col_tiles, n_rows, n_cols;
    float out_scale;
    uint32_t v_lbo, v_sbo; /* descriptor fields of an MN-major image (16-byte units) */
    uint32_t zero;         /* 0, unknown to the compiler: slot_release */
};

/* The S and dP arithmetic, chosen by lab/gpu/backward_v2_tail.sh (issue 32: the variants measured
 * in src/cuda/NOTES.md, "The backward", left src with their environment knobs): k16 slices of
 * hi*hi per Kahan-compensated term of S and of dP (0: one chain, uncompensated), and P by
 * ex2.approx(a log2 e) instead of expf(a). */
constexpr int kSChain = 1, kDpChain = 1;
constexpr bool kFastExp = false;

template <int D, int kRole>
struct BwdConfig {
    using R = BwdRecord<D>;
    static constexpr int kRowRecs = kRole == kRoleDV ? 1 : 2;
    static constexpr int kRowOff = 0;
    static constexpr int kRingOff = kRowOff + kConsumers * kRowRecs * R::kImages;
    static constexpr int kSideOff = kRingOff + kStages * R::kImages;
    static constexpr int kBarOff = kSideOff + kStages * kExtrasPad;
    static constexpr int kSmemBytes = kBarOff + 8 * (2 * kStages + kConsumers) + kSwizzleAtomBytes;
    static constexpr int kOAcc = D / 2;
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
    static_assert(R::kImage % kSwizzleAtomBytes == 0, "1024-byte aligned images");
};

/* The last product of a tile, one k16 slice of the 64 columns: m64nDk16, B MN-major. */
__device__ __forceinline__ void last_mma(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    wgmma_m64n128k16_f16_rs_tb(d, a, desc_b, accumulate);
}
__device__ __forceinline__ void last_mma(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    wgmma_m64n64k16_f16_rs<1>(d, a, desc_b, accumulate);
}

__device__ __forceinline__ uint64_t desc_mn(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)lbo << 16) | ((uint64_t)sbo << 32) | (1ull << 62);
}

/* The pointer, opaque to the optimizer (kept from being hoisted with its loads out of the loop). */
__device__ __forceinline__ const float *opaque_ptr(const float *ptr) {
    uint64_t x = reinterpret_cast<uint64_t>(ptr);
    asm volatile("" : "+l"(x));
    return reinterpret_cast<const float *>(x);
}

/* Programmatic dependent launch (PTX ISA "griddepcontrol"): let the grid launched next on the stream
 * with programmatic serialization start now; wait until the grid this one was so launched after
 * has completed and its writes are visible (no-op for a grid launched the ordinary way). */
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/* As v6's: the arrival's address depends on `loaded` (values this thread read from the slot), so the
 * slot is given back only after those loads returned. */
__device__ __forceinline__ void slot_release(uint32_t empty_bar, uint32_t loaded, uint32_t zero) {
    mbar_arrive(empty_bar + (loaded & zero));
}

/* C = A B^T over head_dim (64 x 64, both K-major images of 64 rows, hi and lo): cor = the
 * corrections A_hi B_lo + A_lo B_hi (one chain), big + cor = A_hi B_hi + cor. hi*hi in chains of
 * kChain k16 slices, each chain's fresh accumulator added into big by Kahan's compensated summation
 * with cor as its compensation (y = step + cor, t = big + y, cor = y - (t - big), big = t: the sum's
 * error stays within about 2 ulp of C plus second-order terms whatever the magnitudes; four adds
 * where TwoSum takes six); kChain = D / 16: one chain, no compensation. */
template <int D, int kChain>
__device__ __forceinline__ void chained_product(float (&big)[32], float (&cor)[32], float (&step)[32], uint64_t ah,
                                                uint64_t al, uint64_t bh, uint64_t bl) {
    constexpr int kS = D / 16;
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kS; ++s) {
        wgmma_m64n64k16_f16_ss(cor, f16_slice_desc(ah, s, kBwdTile), f16_slice_desc(bl, s, kBwdTile), s > 0 ? 1 : 0);
        wgmma_m64n64k16_f16_ss(cor, f16_slice_desc(al, s, kBwdTile), f16_slice_desc(bh, s, kBwdTile), 1);
    }
#pragma unroll
    for (int s = 0; s < kChain; ++s)
        wgmma_m64n64k16_f16_ss(big, f16_slice_desc(ah, s, kBwdTile), f16_slice_desc(bh, s, kBwdTile), s > 0 ? 1 : 0);
    wgmma_commit();
    if constexpr (kChain == kS) {
        wgmma_wait_all();
        fence_regs(big);
        fence_regs(cor);
    } else {
#pragma unroll
        for (int s0 = kChain; s0 < kS; s0 += kChain) {
            wgmma_fence();
#pragma unroll
            for (int s = s0; s < s0 + kChain; ++s)
                wgmma_m64n64k16_f16_ss(step, f16_slice_desc(ah, s, kBwdTile), f16_slice_desc(bh, s, kBwdTile),
                                       s > s0 ? 1 : 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(step);
            fence_regs(big);
            fence_regs(cor);
#pragma unroll
            for (int i = 0; i < 32; ++i) { /* Kahan: cor carries what big lost (and the corrections) */
                const float y = step[i] + cor[i], t = big[i] + y;
                cor[i] = y - (t - big[i]);
                big[i] = t;
            }
        }
    }
}

/* chained_product on the images at shared addresses a_hi, a_lo (A) and b_hi, b_lo (B); kChain 0: one
 * chain of D / 16 slices. */
template <int D, int kChain>
__device__ __forceinline__ void exact_product(float (&big)[32], float (&cor)[32], float (&step)[32], uint32_t a_hi,
                                              uint32_t a_lo, uint32_t b_hi, uint32_t b_lo) {
    const uint64_t ah = smem_desc_sw128(opaque(a_hi)), al = smem_desc_sw128(opaque(a_lo));
    const uint64_t bh = smem_desc_sw128(opaque(b_hi)), bl = smem_desc_sw128(opaque(b_lo));
    chained_product<D, kChain == 0 ? D / 16 : kChain>(big, cor, step, ah, al, bh, bl);
}

template <int D, int kRole>
__global__ void __launch_bounds__(kThreads, 1) bwd_v2_kernel(const BwdV2Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();
#else
    using C = BwdConfig<D, kRole>;
    using R = BwdRecord<D>;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw_saddr = smem_u32(smem_raw);
    unsigned char *smem = smem_raw + ((kSwizzleAtomBytes - (raw_saddr % kSwizzleAtomBytes)) % kSwizzleAtomBytes);
    const uint32_t smem_s = smem_u32(smem);
    const uint32_t ring_s = smem_s + C::kRingOff, side_s = smem_s + C::kSideOff;
    const unsigned char *side = smem + C::kSideOff;
    const uint32_t full_s = smem_s + C::kBarOff, empty_s = full_s + 8u * kStages, rows_s = empty_s + 8u * kStages;

    const int wg = threadIdx.x / kWg;
    const int h = blockIdx.y, b = blockIdx.z;
    const int64_t bh = (int64_t)b * p.heads + h;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(full_s + 8u * s, 1);
            mbar_init(empty_s + 8u * s, kConsumers * kWg);
        }
        for (int cw = 0; cw < kConsumers; ++cw) mbar_init(rows_s + 8u * cw, 1);
        fence_mbar_init();
    }
    __syncthreads();
    /* The next of the three kernels may start as this one's last CTAs run. dK reads what dQ writes
     * (the rows' dominant weights, 2b below), so dK waits for dQ first and lets dV start only then: dV
     * reads nothing dK writes (and dQ, whose weights it reads too, has completed by then). */
    if (kRole == kRoleDK) grid_dependency_wait();
    launch_dependents();

    if (wg == 0) {
        /* ---- producer: the row records once, then two column records per tile ---- */
        setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            for (int cw = 0; cw < kConsumers; ++cw) {
                int rt = 2 * (int)blockIdx.x + cw;
                if (rt >= p.row_tiles) rt = p.row_tiles - 1; /* an idle consumer recomputes, stores nothing */
                mbar_arrive_expect_tx(rows_s + 8u * cw, (uint32_t)(C::kRowRecs * R::kImages));
                const int64_t at = (bh * p.row_tiles + rt) * (int64_t)R::kBytes;
                const uint32_t dst = smem_s + (uint32_t)(cw * C::kRowRecs * R::kImages);
                bulk_copy_g2s(dst, p.row_rec[0] + at, R::kImages, rows_s + 8u * cw);
                if (C::kRowRecs == 2) bulk_copy_g2s(dst + R::kImages, p.row_rec[1] + at, R::kImages, rows_s + 8u * cw);
            }
            for (int i = 0; i < 2 * p.col_tiles; ++i) {
                const int slot = i % kStages;
                const uint32_t parity = (uint32_t)((i / kStages) & 1);
                mbar_wait(empty_s + 8u * slot, parity ^ 1u);
                mbar_arrive_expect_tx(full_s + 8u * slot, (uint32_t)(R::kImages + kBwdExtras));
                const unsigned char *src =
                    ((i & 1) ? p.col_rec[1] : p.col_rec[0]) + (bh * p.col_tiles + i / 2) * (int64_t)R::kBytes;
                bulk_copy_g2s(ring_s + (uint32_t)(slot * R::kImages), src, R::kImages, full_s + 8u * slot);
                bulk_copy_g2s(side_s + (uint32_t)(slot * kExtrasPad), src + R::kImages, kBwdExtras, full_s + 8u * slot);
            }
            /* launched after the previous kernel with programmatic serialization (launch_instance):
             * this CTA completes only once that kernel has, so that the last of the three kernels
             * completing means all three have (for the caller's next work on the stream) */
            grid_dependency_wait();
        }
        return;
    }
    setmaxnreg_inc<240>();

    /* ---- consumer cw: rows 64 rt .. 64 rt + 63 ---- */
    const int cw = wg - 1;
    const int tid = threadIdx.x - wg * kWg;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const bool stores = 2 * (int)blockIdx.x + cw < p.row_tiles;
    const int rt = stores ? 2 * (int)blockIdx.x + cw : p.row_tiles - 1;
    const uint32_t row_a = smem_s + (uint32_t)(cw * C::kRowRecs * R::kImages);
    const uint32_t row_b = row_a + (uint32_t)((C::kRowRecs - 1) * R::kImages);
    /* the row records' scales, and in dQ the rows' lse and Dl (from global memory) */
    const float *ext_a =
        reinterpret_cast<const float *>(p.row_rec[0] + (bh * p.row_tiles + rt) * (int64_t)R::kBytes + R::kImages);
    const float *ext_b = reinterpret_cast<const float *>(p.row_rec[C::kRowRecs - 1] +
                                                         (bh * p.row_tiles + rt) * (int64_t)R::kBytes + R::kImages);
    const float u_row_a = __ldg(ext_a), u_row_b = __ldg(ext_b);
    const int row_w = 16 * warp + g; /* the thread's rows: row_w, row_w + 8 */
    float acc[C::kOAcc];
#pragma unroll
    for (int i = 0; i < C::kOAcc; ++i) acc[i] = 0.f;
    mbar_wait(rows_s + 8u * cw, 0);

#pragma unroll 1
    for (int t = 0; t < p.col_tiles; ++t) {
        const int ia = 2 * t, ib = 2 * t + 1;
        const int sa = ia % kStages, sb = ib % kStages;
        const uint32_t pa = (uint32_t)((ia / kStages) & 1), pb = (uint32_t)((ib / kStages) & 1);
        const uint32_t img_a = ring_s + (uint32_t)(sa * R::kImages), img_b = ring_s + (uint32_t)(sb * R::kImages);
        const float *side_a = reinterpret_cast<const float *>(side + sa * kExtrasPad);
        const float *side_b = reinterpret_cast<const float *>(side + sb * kExtrasPad);

        /* ---- 1. S (dQ) or S^T (dK, dV) ---- */
        float big[32], cor[32], step[32], x[32];
        mbar_wait(full_s + 8u * sa, pa);
        const float u_col_a = side_a[0];
        uint32_t loaded_a = __float_as_uint(u_col_a);
        exact_product<D, kSChain>(big, cor, step, row_a, row_a + R::kImage, img_a, img_a + R::kImage);
        /* ---- 2. P ---- */
        const float us = u_row_a * u_col_a;
        /* dQ: the rows' lse, loaded again per tile (L1) rather than held in registers */
        float lse_r[2] = {0.f, 0.f};
        {
            if (kRole == kRoleDQ) {
                const float *ea = opaque_ptr(ext_a) + kBwdRowData / 4 + row_w;
                lse_r[0] = __ldg(ea);
                lse_r[1] = __ldg(ea + 8);
            }
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = 8 * i + 2 * c + e;
                    float lse_c = 0.f;
                    if (kRole != kRoleDQ) {
                        lse_c = side_a[kBwdRowData / 4 + col];
                        loaded_a |= __float_as_uint(lse_c);
                    }
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int j = 4 * i + 2 * r + e;
                        const float l = kRole == kRoleDQ ? lse_r[r] : lse_c;
                        const float a = (big[j] * us - l) + cor[j] * us;
                        x[j] = kFastExp ? exp2_approx(a * kLog2e) : expf(a);
                    }
                }
        }
        if (kRole == kRoleDQ && (t + 1) * kBwdTile > p.n_cols) { /* the last key tile, partial: keys past seq_kv */
            const int lim = p.n_cols - t * kBwdTile;
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    if (8 * i + 2 * c + e >= lim) x[4 * i + e] = x[4 * i + 2 + e] = 0.f;
        }
        /* ---- 2b. A row's P >= 1/2 element (at most one per query row): P and dP from float64 ----
         * The tensor core truncates S's and dP's fp32 sums (each hi*hi slice a little low): the weight of a
         * row's dominant key, exp(S - lse), carries S's error as a relative error of dV (and dK, dQ) past
         * what float32's lse allows, and its dS = P (dP - Dl) carries dP's where dP - Dl cancels (|v|
         * large: test_backward's few-query `large` rows, issue 37; src/cuda/NOTES.md, "The backward's
         * accuracy"). dQ, which walks whole query rows, finds that element (rare: a warp-wide vote),
         * recomputes its score in float64 from the two tile images (exact_score.cuh) and its dP from the
         * caller's float32 dout and v rows (the four lanes of the row's quad take D / 4 each), replaces
         * its P, and leaves (P, dP - Dl, key) in the row's dominant weight; dK and dV, which see the
         * element as one of a key row's, take the P (and dK the dS) of the query whose dominant key their
         * row is. dom: the elements replaced (bit j of x), whose dS step 3 takes from the exact pair. */
        uint32_t dom = 0u;
        float ds_dom[2] = {0.f, 0.f}; /* dQ: the exact dS of the row's element */
        if (kRole == kRoleDQ) {
            float pm = 0.f;
#pragma unroll
            for (int j = 0; j < 32; ++j) pm = fmaxf(pm, x[j]);
            if (__any_sync(0xffffffffu, pm >= 0.5f)) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    int col = -1;
#pragma unroll
                    for (int i = 0; i < 8; ++i)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            if (x[4 * i + 2 * r + e] >= 0.5f) col = 8 * i + 2 * c + e;
                    col = max(col, __shfl_xor_sync(0xffffffffu, col, 1));
                    col = max(col, __shfl_xor_sync(0xffffffffu, col, 2));
                    const int key = t * kBwdTile + col;
                    double dot = 0.0, dp = 0.0;
                    if (col >= 0) { /* then row < seq_q (else lse = +inf, P = 0) and key < seq_kv (else P = 0) */
                        const int row = rt * kBwdTile + row_w + 8 * r;
                        const unsigned char *qi = smem + (row_a - smem_s), *kj = smem + (img_a - smem_s);
#pragma unroll
                        for (int m = 0; m < D / 32; ++m) {
                            const int d0 = c * (D / 4) + 8 * m;
                            double qx[8], kx[8];
                            f16x2_chunk_f64(qi, qi + R::kImage, row_w + 8 * r, d0, kBwdTile, qx);
                            f16x2_chunk_f64(kj, kj + R::kImage, col, d0, kBwdTile, kx);
#pragma unroll
                            for (int k = 0; k < 8; ++k) dot = fma(qx[k], kx[k], dot);
                        }
                        const float4 *dr =
                            reinterpret_cast<const float4 *>(p.dout + b * p.do_b + h * p.do_h + (int64_t)row * p.do_t);
                        const float4 *vr =
                            reinterpret_cast<const float4 *>(p.v + b * p.v_b + h * p.v_h + (int64_t)key * p.v_t);
#pragma unroll 4
                        for (int m = c * (D / 16); m < (c + 1) * (D / 16); ++m) {
                            const float4 o = __ldg(dr + m), w = __ldg(vr + m);
                            dp = fma((double)o.x, (double)w.x, dp);
                            dp = fma((double)o.y, (double)w.y, dp);
                            dp = fma((double)o.z, (double)w.z, dp);
                            dp = fma((double)o.w, (double)w.w, dp);
                        }
                    }
                    dot = quad_sum(dot);
                    dp = quad_sum(dp);
                    if (col >= 0) {
                        const float pe = expf((float)(dot * (double)us - (double)lse_r[r]));
                        const float2 dl = __ldg(reinterpret_cast<const float2 *>(opaque_ptr(ext_b) + kBwdRowData / 4) +
                                                row_w + 8 * r);
                        const float de = (float)((dp - (double)dl.x) - (double)dl.y);
                        ds_dom[r] = pe * de;
#pragma unroll
                        for (int i = 0; i < 8; ++i)
#pragma unroll
                            for (int e = 0; e < 2; ++e)
                                if (8 * i + 2 * c + e == col) {
                                    x[4 * i + 2 * r + e] = pe;
                                    dom |= 1u << (4 * i + 2 * r + e);
                                }
                        if (stores && (col >> 1 & 3) == c) /* the lane that holds it */
                            p.top[(bh * p.row_tiles + rt) * kBwdTile + row_w + 8 * r] =
                                make_float4(pe, de, __int_as_float(key), 0.f);
                    }
                }
            }
        } else {
            /* dK, dV: an element of a query column with P >= 1/2 whose query's dominant key (dQ's) is this
             * row takes that P. dQ has completed (dK waited for it, and dV starts after dK did); the loads
             * bypass L1 (ld.global.cg), which no kernel boundary of the programmatic launch need clean */
            float pm = 0.f;
#pragma unroll
            for (int j = 0; j < 32; ++j) pm = fmaxf(pm, x[j]);
            if (__any_sync(0xffffffffu, pm >= 0.5f)) {
#pragma unroll
                for (int i = 0; i < 8; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
#pragma unroll
                        for (int r = 0; r < 2; ++r)
                            if (x[4 * i + 2 * r + e] >= 0.5f) {
                                const float4 tp = __ldcg(p.top + (bh * p.col_tiles + t) * kBwdTile + 8 * i + 2 * c + e);
                                if (__float_as_int(tp.z) == rt * kBwdTile + row_w + 8 * r) {
                                    x[4 * i + 2 * r + e] = tp.x;
                                    dom |= 1u << (4 * i + 2 * r + e);
                                }
                            }
            }
        }
        uint32_t img_last, loaded_last;
        int slot_last;
        float u_last;
        if (kRole == kRoleDV) {
            slot_release(empty_s + 8u * sa, loaded_a, p.zero); /* q is done with */
            mbar_wait(full_s + 8u * sb, pb);
            u_last = side_b[0];
            img_last = img_b, slot_last = sb, loaded_last = __float_as_uint(u_last);
        } else {
            /* ---- 3. dP (dP^T), dS ---- */
            mbar_wait(full_s + 8u * sb, pb);
            const float u_col_b = side_b[0];
            uint32_t loaded_b = __float_as_uint(u_col_b);
            /* dP's operand address depends on every P (dep = 0 at run time): ptxas then computes P
             * before it issues dP, rather than interleaving P's exps with dP's wgmmas, which holds
             * S's and dP's registers at once (spills) */
            uint32_t dep = 0;
#pragma unroll
            for (int j = 0; j < 32; ++j) dep |= __float_as_uint(x[j]);
            dep &= p.zero;
            exact_product<D, kDpChain>(big, cor, step, row_b + dep, row_b + dep + R::kImage, img_b, img_b + R::kImage);
            const float ud = u_row_b * u_col_b;
            float dlh_r[2] = {0.f, 0.f}, dll_r[2] = {0.f, 0.f};
            if (kRole == kRoleDQ) {
                const float2 *eb = reinterpret_cast<const float2 *>(opaque_ptr(ext_b) + kBwdRowData / 4) + row_w;
                const float2 d0 = __ldg(eb), d1 = __ldg(eb + 8);
                dlh_r[0] = d0.x, dll_r[0] = d0.y, dlh_r[1] = d1.x, dll_r[1] = d1.y;
            }
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = 8 * i + 2 * c + e;
                    float dh_c = 0.f, dl_c = 0.f;
                    if (kRole != kRoleDQ) {
                        const float2 d2 = *reinterpret_cast<const float2 *>(side_b + kBwdRowData / 4 + 2 * col);
                        dh_c = d2.x, dl_c = d2.y;
                        loaded_b |= __float_as_uint(dh_c) | __float_as_uint(dl_c);
                    }
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int j = 4 * i + 2 * r + e;
                        const float dh = kRole == kRoleDQ ? dlh_r[r] : dh_c, dl = kRole == kRoleDQ ? dll_r[r] : dl_c;
                        x[j] *= ((big[j] * ud - dh) + cor[j] * ud) - dl;
                    }
                }
            if (dom) { /* 2b's elements: dS = P (dP - Dl) from the exact pair (rare) */
#pragma unroll
                for (int i = 0; i < 8; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
#pragma unroll
                        for (int r = 0; r < 2; ++r)
                            if (dom >> (4 * i + 2 * r + e) & 1u) {
                                if (kRole == kRoleDQ) {
                                    x[4 * i + 2 * r + e] = ds_dom[r];
                                } else { /* read again */
                                    const float4 tp =
                                        __ldcg(p.top + (bh * p.col_tiles + t) * kBwdTile + 8 * i + 2 * c + e);
                                    x[4 * i + 2 * r + e] = tp.x * tp.y;
                                }
                            }
            }
            slot_release(empty_s + 8u * sb, loaded_b, p.zero); /* v (dQ) or dout (dK) is done with */
            img_last = img_a, slot_last = sa, u_last = u_col_a, loaded_last = loaded_a;
        }

        /* ---- 4. X per row to [2^14, 2^15), split into A fragments; tile = X B'; acc += ---- */
        float down[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float m = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i)
                m = fmaxf(m, fmaxf(finite_abs(x[4 * i + 2 * r]), finite_abs(x[4 * i + 2 * r + 1])));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            const int ex = f16x2_exponent(m, kBwdTarget);
            const float up = exp2_int(ex);
            down[r] = exp2_int(-ex);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                x[4 * i + 2 * r] *= up;
                x[4 * i + 2 * r + 1] *= up;
            }
        }
        uint32_t xh[4][4], xl[4][4];
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
            for (int j = 0; j < 4; ++j) f16x2_split2(x[8 * ks + 2 * j], x[8 * ks + 2 * j + 1], xh[ks][j], xl[ks][j]);
        float tile[C::kOAcc];
        {
            const uint32_t lh = opaque(img_last), ll = lh + R::kImage;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) last_mma(tile, xl[ks], desc_mn(lh + ks * 2048, p.v_lbo, p.v_sbo), ks > 0);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) last_mma(tile, xh[ks], desc_mn(ll + ks * 2048, p.v_lbo, p.v_sbo), 1);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) last_mma(tile, xh[ks], desc_mn(lh + ks * 2048, p.v_lbo, p.v_sbo), 1);
            wgmma_commit();
            wgmma_wait_all();
            fence_regs(tile);
            fence_regs(xh);
            fence_regs(xl);
        }
        slot_release(empty_s + 8u * slot_last, loaded_last, p.zero);
#pragma unroll
        for (int i = 0; i < C::kOAcc / 4; ++i)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = 4 * i + 2 * r + e;
                    acc[j] = fmaf(tile[j] * down[r], u_last, acc[j]);
                }
    }

    if (!stores) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = rt * kBwdTile + 16 * warp + g + 8 * r;
        if (row >= p.n_rows) continue;
        float *dst = p.out + b * p.o_b + h * p.o_h + (int64_t)row * p.o_t;
#pragma unroll
        for (int i = 0; i < C::kOAcc / 4; ++i)
            *reinterpret_cast<float2 *>(dst + 8 * i + 2 * c) =
                make_float2(acc[4 * i + 2 * r] * p.out_scale, acc[4 * i + 2 * r + 1] * p.out_scale);
    }
#endif
}

/* dK and dV are launched with programmatic stream serialization (pdl): their CTAs may start while
 * the kernel before them (dQ, dK) runs its last wave, which at (1,24,1536,128) is a partial one of
 * 2.2 waves; dQ waits for the pre-pass the ordinary way. */
template <int D, int kRole>
cudaError_t launch_role(const BwdV2Params &p, unsigned batch, cudaStream_t stream) {
    auto kernel = bwd_v2_kernel<D, kRole>;
    const int smem = BwdConfig<D, kRole>::kSmemBytes;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((p.row_tiles + 1) / 2), (unsigned)p.heads, batch);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = stream;
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &pdl;
    cfg.numAttrs = kRole == kRoleDQ ? 0 : 1;
    return cudaLaunchKernelEx(&cfg, kernel, p);
}

template <int D>
cudaError_t launch_d(const jattn_cuda_args *a, unsigned char *ws, cudaStream_t stream) {
    const jattn_cuda_args *f = a; /* the forward's fields */
    const BwdRecordLayout L = bwd_record_layout(f->batch * f->heads, f->seq_q, f->seq_kv, f->head_dim);
    const int tq = (int)((f->seq_q + kBwdTile - 1) / kBwdTile), tk = (int)((f->seq_kv + kBwdTile - 1) / kBwdTile);
    const unsigned batch = (unsigned)f->batch;
    BwdV2Params p;
    p.heads = (int)f->heads;
    /* MN-major, 128B swizzle: LBO = bytes between 64-column blocks of head_dim (one 8 KB block of
     * a 64-row image), SBO = bytes between 8-row groups (1024) */
    p.v_lbo = (uint32_t)(kBwdTile * kSwizzleBytes) >> 4;
    p.v_sbo = (uint32_t)kSwizzleAtomBytes >> 4;
    p.zero = 0;

    /* dQ: rows q (and dout), columns k (and v) */
    p.row_rec[0] = ws + L.q, p.row_rec[1] = ws + L.dout;
    p.top = reinterpret_cast<float4 *>(ws + L.top);
    p.dout = a->dout, p.v = f->v;
    p.do_b = a->dout_strides.batch, p.do_h = a->dout_strides.head, p.do_t = a->dout_strides.token;
    p.v_b = f->v_strides.batch, p.v_h = f->v_strides.head, p.v_t = f->v_strides.token;
    p.col_rec[0] = ws + L.k, p.col_rec[1] = ws + L.v;
    p.row_tiles = tq, p.col_tiles = tk, p.n_rows = (int)f->seq_q, p.n_cols = (int)f->seq_kv;
    p.out = a->dq, p.o_b = a->dq_strides.batch, p.o_h = a->dq_strides.head, p.o_t = a->dq_strides.token;
    p.out_scale = f->scale;
    cudaError_t err = launch_role<D, kRoleDQ>(p, batch, stream);
    if (err != cudaSuccess) return err;

    /* dK: rows k (and v), columns q (and dout) */
    p.row_rec[0] = ws + L.k, p.row_rec[1] = ws + L.v;
    p.col_rec[0] = ws + L.q, p.col_rec[1] = ws + L.dout;
    p.row_tiles = tk, p.col_tiles = tq, p.n_rows = (int)f->seq_kv, p.n_cols = (int)f->seq_q;
    p.out = a->dk, p.o_b = a->dk_strides.batch, p.o_h = a->dk_strides.head, p.o_t = a->dk_strides.token;
    p.out_scale = 1.f;
    err = launch_role<D, kRoleDK>(p, batch, stream);
    if (err != cudaSuccess) return err;

    /* dV: rows k, columns q and dout */
    p.row_rec[1] = ws + L.k;
    p.out = a->dv, p.o_b = a->dv_strides.batch, p.o_h = a->dv_strides.head, p.o_t = a->dv_strides.token;
    return launch_role<D, kRoleDV>(p, batch, stream);
}

bool aligned16(const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

} /* namespace */

extern "C" cudaError_t bwd_v2_split_launch(const jattn_cuda_args *a, void *records, cudaStream_t stream);

extern "C" size_t jattn_cuda_bwd_v2_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                                                    int64_t head_dim) {
    const size_t v3 = jattn_cuda_bwd_v3_workspace_bytes(batch, heads, seq_q, seq_kv, head_dim);
    const size_t v2 = (size_t)bwd_record_layout(batch * heads, seq_q, seq_kv, head_dim).bytes;
    return v2 > v3 ? v2 : v3; /* a call v2 does not take runs v3 in the same workspace */
}

/* jattn_cuda_bwd_v2_call_refused: sm90_contract.c (plain C, with the forward's sm_90a contract). */

extern "C" int jattn_cuda_launch_bwd_v2(const jattn_cuda_args *a, void *workspace, void *stream_ptr) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    if (jattn_cuda_bwd_v2_call_refused(a) || !workspace || !aligned16(workspace) || !a->lse)
        return (int)cudaErrorInvalidValue;
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    int major = 0, minor = 0;
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess) return (int)err;
    if (major != 9 || minor != 0) return (int)cudaErrorNoKernelImageForDevice;
    err = bwd_v2_split_launch(a, workspace, stream);
    if (err != cudaSuccess) return (int)err;
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    return (int)(a->head_dim == 128 ? launch_d<128>(a, ws, stream) : launch_d<64>(a, ws, stream));
}
