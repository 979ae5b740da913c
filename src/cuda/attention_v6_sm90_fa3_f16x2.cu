/* attention v6 (launcher jattn_cuda_launch_v6, reported as cuda_v6_flash_*_f16x2_sm90_fa3_ws_128x64):
 * version 6 of the cuda kernels, the FlashAttention-3 orientation (S = Q K^T with queries as
 * rows, the softmax along each row in registers) in 2xFP16 (f16x2_split.cuh) on the sm_90a fp16
 * wgmma, warp-specialized. AUTO's choice on compute capability 9.0 devices wherever it takes the
 * problem (D 64 and 128, f32 and tf32; cuda_backend.c, version_for).
 *
 * Reads  q [B, H, Sq, D] through element strides (head_dim contiguous, float4 aligned), D in
 *        {64, 128}; the workspace of its pre-pass (attention_v6_split_kv_f16x2.cu): per head and
 *        64-key tile a K record and a V record, each the hi and lo shared-memory images of the
 *        tile plus its scales and flags; with key padding, kv_count [B] (key_padding.cuh): the
 *        keys batch b attends, packed in order by the pre-pass.
 * Writes out [B, H, Sq, D] through its strides (float2 stores); lse [B, H, Sq] contiguous
 *        (natural log) when not NULL. Contract: attention_sm90.h (plus its workspace).
 *
 * Why: v4 (and v5, removed since) run the transposed orientation (S^T = K Q^T), whose column softmax needs
 * shuffles across the warp, a cross-warp exchange through shared memory and two barriers per
 * tile (~1500 warp instructions per warp per tile, JOURNAL.md "v5"). Here a thread holds two
 * whole rows' worth of a warp's 16 x 64 scores: the row maximum is two quad shuffles, and the
 * weights are the A fragments of the next wgmma as they stand (~720 instructions per tile).
 *
 * One CTA of three warpgroups per SM, 128 queries per CTA, 64-key tiles:
 *  - warpgroup 0, the producer (setmaxnreg 24): one thread moves the K record, then the V record
 *    of each attended tile, by one bulk copy (cp.async.bulk) each into a ring of 4 (D = 128) or
 *    8 (D = 64) shared-memory slots with "full" (copy bytes) and "empty" (256 consumer arrivals)
 *    mbarriers (sm90_pipeline_ptx.cuh);
 *  - warpgroups 1 and 2, the consumers (setmaxnreg 240), 64 queries each. Q * scale is staged once
 *    per consumer, scaled per row by 2^eq, as hi and lo images (the K-major A operand). Per tile:
 *    1. S = Q K^T, m64n64k16 ss (Q and K from shared memory), into two accumulators: X takes the
 *       16 correction products (Q_hi K_lo, Q_lo K_hi) first, then hi*hi of d < D/2; Y takes hi*hi
 *       of d >= D/2; S = X + Y (the tensor core's accumulation error grows with the chain). A K
 *       tile with a non-finite value (a flag of the pre-pass) computes S so too (a finite score's
 *       bits do not depend on another key's value), then hi*hi alone where S is NaN, as v4 keeps
 *       it: an infinite hi*hi keeps its sign, so a -Inf score weighs 0 and +Inf / NaN make the
 *       row NaN (jattn.h's rule).
 *    2. the row softmax in registers: the thread holds rows g, g+8 of its warp's 16 x 16 columns;
 *       keys past the attended count at -inf; row maximum by two quad shuffles; the tile's K
 *       scale folded into the exponent constant (c = 2^-eq 2^-ek log2 e); weights
 *       p = 2^(t c + bias) with bias = 15 - m 2^-eq log2 e (P carried as P 2^15),
 *       alpha = 2^(bias_new - bias_old); per-thread partial row sums with Kahan compensation
 *       across tiles, reduced at the end.
 *    3. P hi/lo = the 2xFP16 split of the S registers (the A fragments of the next wgmma);
 *       O_tile = P V, m64n128k16 (m64n64k16 at D = 64) rs with V hi/lo from shared memory
 *       (MN-major, imm-trans-b = 1): f32 mode P_lo V_hi, P_hi V_lo, then P_hi V_hi; tf32 mode
 *       P_hi V_hi only (an 11-bit significand, as TF32). Into a FRESH O_tile per tile
 *       (accumulating into O across tiles loses ~2 bits at long sequences).
 *    4. O = alpha O + O_tile 2^-ev (per column; a tiny V tile, split after * 2^64 so that
 *       denormal v keep their bits, is scaled back by 2^-64 first, as v4).
 *  - a row with no attended key (key padding, a window, -inf biases) gets 0 and lse -inf.
 *  - masks and grouped-query heads (src/cuda/NOTES.md, "Masks"): the records are per key/value head,
 *    read by the group's query heads (h / group); under a window (kMask 1) the CTA walks only the key
 *    tiles of its rows (query blocks last to first across every head: a grid of (heads, blocks, batch), at
 *    most 65535 blocks of 128 queries), a consumer skips the tiles none of its 64 rows
 *    attends (waiting for their slots and giving them back) and tests each element of a boundary tile
 *    against its row's window in attended keys; a key bias (kMask 2) is staged by the pre-pass and
 *    bulk-copied after each V record, and enters the row maximum and the exponent; the non-finite v the
 *    masked pre-pass left out are added into the rows that attend them after the output is written.
 *  - a consumer gives a slot back (slot_release) only after its shared loads from it (the
 *    tile's scales and flags) have returned: the arrival's address depends on the loaded values.
 * Shared memory: Q hi, lo 2 x 16 KB per consumer, the ring 4 x 33 KB, scales and barriers:
 * ~200 KB. Registers: 168 at entry (setmaxnreg 24 / 240), no local memory.
 *
 * Measured through the library (H200, 2026-12-01, lab/gpu/v6_library_run.sh, second call
 * with slot_release: bench/results/h200-2026-12-01-v6/library-r2), TFLOP/s of the whole call
 * (pre-pass included), v4 in the same run, PyTorch fp32 SDPA beside:
 *   shape                 v6 f32  v4 f32  v6 tf32  v4 tf32  PyTorch
 *   (1,24,1536,128)        131.1    95.0    157.5    112.4     39.1
 *   (1,24,4608,128)        197.6   117.7    259.9    145.8     43.8
 *   (1,48,4608,128)        202.8   121.7    248.7    152.9     45.2
 *   (1,24,16384,128)       202.6   129.7    265.1    165.3     45.5
 *   (1,40,32768,128)       206.3   120.3    273.3    151.3     44.8
 *   (1,24,4096x512,128)    141.6    99.2    165.6    117.9     36.4
 *   (1,24,1536,64)         103.0    74.8    124.5     84.3     29.0
 *   (1,24,4608,64)         154.3    91.0    195.4    102.8     33.5
 * f32 rel_l2 3.3e-7 .. 5.5e-7 (v4 3.5e-7 .. 5.8e-7), tf32 2.8e-4 .. 2.9e-4 (= v4's). Every GPU
 * test passes with v6 forced, its repeatable-bits cases included; the single-row peaky tail
 * (1000 draws) has 2 over the gate at D = 128 (v4 5) and 0 at D = 64 (v4 3). The first call
 * (bench/results/h200-2026-12-01-v6/library, before slot_release) gave wrong, non-repeatable f32
 * output at D = 128 (last ~16 head_dim columns; JOURNAL.md "v6 in the library"). Key padding
 * at (1,24,4608,128) (first call): kv_len = Skv/2 0.530x, last-half mask 0.537x, one masked key
 * 1.009x of the unpadded call. ncu (standalone, (1,24,4608,128) f32): tensor pipe ~74% busy,
 * issue slots 35%; what limits it (the tensor pipe idle while both consumers are in the
 * softmax; wave quantization at 1536; the pre-pass on short sequences): JOURNAL.md, "v6". */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

#include "attention_sm90.h"
#include "exact_score.cuh"
#include "f16x2_split.cuh"
#include "key_padding.cuh"
#include "key_window.cuh"
#include "sm90_pipeline_ptx.cuh"
#include "sm90_wgmma_f16_ptx.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kV6Consumers = 2;
constexpr int kV6WgThreads = 128;
constexpr int kV6Threads = kV6WgThreads * (1 + kV6Consumers);
constexpr int kV6Q = 64; /* queries per consumer */
constexpr int kV6CtaQ = kV6Consumers * kV6Q;
constexpr int kV6K = kF16Tile;         /* keys per tile */
constexpr int kV6BiasBytes = kV6K * 4; /* kBias: a tile's bias, copied into its V slot after the record */
constexpr int kV6MaskSmem = 16 + kV6Consumers * 4 * 16 + kV6Consumers * kV6Q * 8;
static_assert(kV6CtaQ == ATTENTION_SM90_V6_CTA_QUERIES, "attention_sm90.h states v6's queries per CTA");

struct V6Params {
    const float *q;
    float *out, *lse;
    int64_t q_b, q_h, q_t, o_b, o_h, o_t; /* element strides (head_dim contiguous) */
    const unsigned char *records;
    const int *kv_count; /* key padding: batch b attends kv_count[b] keys (packed by the pre-pass), or NULL */
    int heads, seq_q, seq_kv, tiles;
    float scale;
    uint32_t v_lbo, v_sbo; /* descriptor fields of the MN-major V operand (16-byte units) */
    uint32_t zero;         /* 0, unknown to the compiler: see slot_release */
    int group;             /* query heads per key/value head: head h reads the records of b Hkv + h / group */
    /* masked instances (kMask >= 1): the call's mask (key_window.cuh reads it), the key padding's row
     * list, v (the non-finite values the pre-pass left out) and the staged key bias */
    const int *kv_index;
    const float *v;
    int64_t v_b, v_h, v_t;
    const float *bias_ws; /* per query head and tile, 64 floats in attended-key order */
    KwMask a;
};

/* The four words after the K images of a K record (attention_v6_split_kv_f16x2.cu). */
struct V6TileInfo {
    float k_unscale; /* 2^-ek */
    uint32_t v_tiny; /* 1: the tile's V was split after * 2^64 */
    uint32_t k_bad;  /* 1: the K tile holds a non-finite value */
    uint32_t v_bad;  /* 1: the V tile held a non-finite value, written as 0 (masked calls only) */
};

template <int D>
struct V6Config {
    static constexpr int kImage = kV6K * D * 2;        /* one part (hi or lo) of a K or V tile */
    static constexpr int kRecord = 2 * kImage + 4 * D; /* as the pre-pass writes it */
    static constexpr int kKCopy = 2 * kImage + 16;     /* K: the images and 2^-ek */
    static constexpr int kVCopy = kRecord;             /* V: the images and 2^-ev [D] */
    static constexpr int kSlot = (kRecord + kSwizzleAtomBytes - 1) / kSwizzleAtomBytes * kSwizzleAtomBytes;
    static constexpr int kQImage = kV6Q * D * 2;
    static constexpr int kQRegion = 2 * kQImage;     /* hi, lo */
    static constexpr int kStages = D == 128 ? 4 : 8; /* ring slots: 4 x 33 KB or 8 x 17 KB */
    static constexpr int kRingOff = kV6Consumers * kQRegion;
    static constexpr int kScaleOff = kRingOff + kStages * kSlot; /* [consumer][2][64] floats */
    static constexpr int kBarOff = kScaleOff + kV6Consumers * 2 * kV6Q * 4;
    static constexpr int kSmemBytes = kBarOff + 2 * kStages * 8 + kSwizzleAtomBytes;
    /* masked instances, after the barriers (their launch adds kV6MaskSmem): the CTA's key tiles, each
     * consumer's warps' KwGroupKeys, each consumer's rows' windows in attended keys */
    static constexpr int kRangeOff = kBarOff + 2 * kStages * 8;
    static constexpr int kGrpOff = kRangeOff + 16;
    static constexpr int kWinOff = kGrpOff + kV6Consumers * 4 * 16;
    static constexpr int kSlices = D / 16;     /* k16 slices of head_dim */
    static constexpr int kPSlices = kV6K / 16; /* k16 slices of the key tile */
    static constexpr int kOAcc = D / 2;        /* O and O_tile registers (m64nD) */
    static constexpr int kOCols = D / 8;       /* n8 column blocks of O */
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
    static_assert(kRecord % 16 == 0 && kKCopy % 16 == 0, "bulk copies move multiples of 16 bytes");
};

/* Stages the consumer's queries q0 .. q0 + 63 (row stride q_t; rows past seq_q as zeros): two threads per row,
 * q * scale times the row's 2^eq, hi and lo into the K-major swizzled images (natural head_dim
 * order), and the row's 2^-eq and 2^-eq log2 e. */
template <int D>
__device__ __forceinline__ void v6_stage_q(const float *qh, int64_t q_t, int seq_q, int q0, float scale, int tid,
                                           unsigned char *q_hi, unsigned char *q_lo, float *q_unscale, float *q_log2e) {
    constexpr int kPer = D / 8; /* float4 per thread */
    const int row = tid / 2, part = tid % 2;
    const bool valid = q0 + row < seq_q;
    const float4 *src = reinterpret_cast<const float4 *>(qh + (int64_t)(valid ? q0 + row : 0) * q_t) + part * kPer;
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
    for (int j = 0; j < kPer; j += 2) {
        const int d0 = 4 * (part * kPer + j); /* 8 values: one 16-byte chunk */
        uint4 hi, lo;
        f16x2_split2(x[j][0] * up, x[j][1] * up, hi.x, lo.x);
        f16x2_split2(x[j][2] * up, x[j][3] * up, hi.y, lo.y);
        f16x2_split2(x[j + 1][0] * up, x[j + 1][1] * up, hi.z, lo.z);
        f16x2_split2(x[j + 1][2] * up, x[j + 1][3] * up, hi.w, lo.w);
        const uint32_t off = swizzled_offset_f16(row, d0, kV6Q);
        *reinterpret_cast<uint4 *>(q_hi + off) = hi;
        *reinterpret_cast<uint4 *>(q_lo + off) = lo;
    }
    if (part == 0) {
        q_unscale[row] = exp2_int(-eq);
        q_log2e[row] = exp2_int(-eq) * kLog2e;
    }
}

/* O_tile (+)= P V for one k16 slice of keys: m64n128k16 (D = 128) or m64n64k16 (D = 64). */
__device__ __forceinline__ void v6_pv(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    wgmma_m64n128k16_f16_rs_tb(d, a, desc_b, accumulate);
}
__device__ __forceinline__ void v6_pv(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    wgmma_m64n64k16_f16_rs<1>(d, a, desc_b, accumulate);
}

/* Gives a ring slot back to the producer once this thread's shared loads from it have returned.
 * The arrival's address depends on the loaded values (`loaded & zero`, zero = 0 at run time but
 * not to the compiler), so the hardware waits for those loads before it: ptxas orders an
 * mbarrier arrival after neither the loads before it nor the arithmetic that consumes them
 * (read in the SASS of the f32 D = 128 instance: the arrival three instructions after the 16
 * loads of the tile's V scales, with no wait on their scoreboard), and a refill could overwrite
 * the slot under a pending load. The suspected cause of that instance's wrong last head_dim
 * columns on the H200 (JOURNAL.md, "v6 in the library"); not yet run on the GPU. */
__device__ __forceinline__ void slot_release(uint32_t empty_bar, uint32_t loaded, uint32_t zero) {
    mbar_arrive(empty_bar + (loaded & zero));
}

/* Descriptor of an MN-major 128B-swizzled operand (the V images): start, LBO, SBO. */
__device__ __forceinline__ uint64_t v6_desc_mn(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)lbo << 16) | ((uint64_t)sbo << 32) | (1ull << 62);
}

/* The non-finite values of v that the rows of this thread attend, added into their out rows (masked
 * calls, kMask >= 1): the pre-pass wrote them as 0 and flagged their tiles (V6TileInfo.v_bad), so that a
 * weight of exactly 0 never meets them in P V; a row that attends such a key gets its value here (out +
 * Inf is Inf, Inf and -Inf together NaN, as the sum of an exact evaluation), a row that does not never
 * sees it. Rare: runs only where a tile of the warpgroup's keys is flagged, after the thread has written
 * its out elements (it reads them back: a call of its own, so that the tile loop keeps its registers).
 * The thread holds rows row0, row0 + 8 (windows w0, w1) and columns 8 i + 2 c + {0, 1}. */
template <int D, int kMask>
__device__ __noinline__ void v6_add_nonfinite_v(const unsigned char *recs, const int *rows, const float *vb,
                                                int64_t v_t, const float *bias_row, float *dst0, int64_t o_t, int row0,
                                                int seq_q, int ulo, int uhi, int2 w0, int2 w1, int c) {
    using C = V6Config<D>;
#pragma unroll 1
    for (int t = ulo / kV6K; t * kV6K < uhi; ++t) {
        if (reinterpret_cast<const V6TileInfo *>(recs + (int64_t)t * 2 * C::kRecord + 2 * C::kImage)->v_bad == 0)
            continue;
        const int j0 = max(t * kV6K, ulo), j1 = min((t + 1) * kV6K, uhi);
#pragma unroll 1
        for (int j = j0; j < j1; ++j) {
            const float bj = kMask == 2 ? bias_row[j] : 0.f;
            const float *vj = vb + key_row(rows, j) * v_t;
#pragma unroll 1
            for (int r = 0; r < 2; ++r) {
                const int2 w = r ? w1 : w0;
                if (row0 + 8 * r >= seq_q || j < w.x || j >= w.y || bj == -INFINITY) continue;
                float *dst = dst0 + (int64_t)8 * r * o_t;
#pragma unroll 1
                for (int col = 2 * c; col < D; col += 8)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float x = vj[col + e];
                        if (!isfinite(x)) dst[col + e] += x;
                    }
            }
        }
    }
}

/* kSplitPV: f32 mode (P V in three products); false: tf32 mode (P_hi V_hi only). kExactLse (f32
 * with lse): the lse of each row exact to float32's rounding rather than to the tensor core's S
 * (below, "the output"). kMask: 0 no window and no key bias (grouped heads and key padding served as
 * they come); 1 a window (causal, blocks, segments); 2 a key bias, with or without a window
 * (src/cuda/NOTES.md, "Masks"). */
template <int D, bool kSplitPV, bool kExactLse, int kMask>
__global__ void __launch_bounds__(kV6Threads, 1) attention_f32_sm90_fa3_f16x2_128x64_kernel(const V6Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();
#else
    using C = V6Config<D>;
    constexpr bool kWin = kMask >= 1, kBias = kMask == 2;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw_saddr = smem_u32(smem_raw);
    unsigned char *smem = smem_raw + ((kSwizzleAtomBytes - (raw_saddr % kSwizzleAtomBytes)) % kSwizzleAtomBytes);
    unsigned char *ring = smem + C::kRingOff;
    const uint32_t ring_s = smem_u32(ring);
    const uint32_t full_s = smem_u32(smem + C::kBarOff), empty_s = full_s + 8u * C::kStages;

    const int wg = threadIdx.x / kV6WgThreads;
    /* masked: the grid is (heads, query blocks, batch), the query blocks last to first: every head's block qb
     * is dispatched before any head's block qb - 1, the longest (causal: the last rows) first across the grid
     * (a causal grid in per-head order left the last heads' long blocks for the last wave:
     * lab/gpu/model_causal_dispatch.py); unmasked, (query blocks, heads, batch) */
    const int h = kWin ? blockIdx.x : blockIdx.y, b = blockIdx.z;
    const int qb = kWin ? (int)(gridDim.y - 1 - blockIdx.y) : (int)blockIdx.x;
    const int64_t bh = (int64_t)b * p.heads + h;
    /* grouped-query heads: the records of key/value head b Hkv + h / group */
    const int bh_kv = (int)bh / p.group;
    /* key padding: only the tiles of the attended keys (the pre-pass packed them in order) */
    const int n_kv = p.kv_count ? __ldg(p.kv_count + b) : p.seq_kv;
    const int n_tiles = (n_kv + kV6K - 1) / kV6K;
    /* masked: the key tiles of the CTA's rows (kw_tile_keys), in attended keys (key padding's row list) */
    const int *rows = kWin && p.kv_index ? p.kv_index + (int64_t)b * p.seq_kv : nullptr;
    int2 *range_s = reinterpret_cast<int2 *>(smem + C::kRangeOff);

    if (threadIdx.x == 0) {
        for (int s = 0; s < C::kStages; ++s) {
            mbar_init(full_s + 8u * s, 1);
            mbar_init(empty_s + 8u * s, kV6Consumers * kV6WgThreads);
        }
        fence_mbar_init();
        if constexpr (kWin) {
            int lo, hi;
            kw_tile_keys(p.a, b, (int64_t)qb * kV6CtaQ, (int64_t)qb * kV6CtaQ + kV6CtaQ, rows, n_kv, &lo, &hi);
            *range_s = make_int2(lo / kV6K, lo < hi ? (hi + kV6K - 1) / kV6K : lo / kV6K);
        }
    }
    __syncthreads();
    int t_begin = 0, t_end = n_tiles;
    if constexpr (kWin) {
        const int2 range = *range_s;
        t_begin = range.x;
        t_end = range.y;
    }

    if (wg == 0) {
        /* ---- producer: the K record, then the V record of tile t, t = 0 .. T-1 ---- */
        setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            const unsigned char *head = p.records + ((int64_t)bh_kv * p.tiles + t_begin) * 2 * (int64_t)C::kRecord;
            /* kBias: a tile's bias (the staged row of query head h) after its V record, in the V slot */
            const float *bias_row = kBias ? p.bias_ws + (bh * p.tiles + t_begin) * kV6K : nullptr;
            for (int i = 0; i < 2 * (t_end - t_begin); ++i) {
                const int slot = i % C::kStages;
                const uint32_t parity = (uint32_t)((i / C::kStages) & 1);
                const uint32_t bytes = (i & 1) ? C::kVCopy : C::kKCopy;
                mbar_wait(empty_s + 8u * slot, parity ^ 1u);
                mbar_arrive_expect_tx(full_s + 8u * slot, kBias && (i & 1) ? bytes + kV6BiasBytes : bytes);
                bulk_copy_g2s(ring_s + (uint32_t)(slot * C::kSlot), head + (int64_t)i * C::kRecord, bytes,
                              full_s + 8u * slot);
                if (kBias && (i & 1))
                    bulk_copy_g2s(ring_s + (uint32_t)(slot * C::kSlot + C::kRecord), bias_row + (i / 2) * kV6K,
                                  kV6BiasBytes, full_s + 8u * slot);
            }
        }
        return;
    }
    setmaxnreg_inc<240>();

    /* ---- consumer cw: queries q0 .. q0 + 63 ---- */
    const int cw = wg - 1;
    unsigned char *q_hi = smem + cw * C::kQRegion, *q_lo = q_hi + C::kQImage;
    float *q_unscale = reinterpret_cast<float *>(smem + C::kScaleOff) + cw * 2 * kV6Q;
    float *q_log2e = q_unscale + kV6Q;
    const int tid = threadIdx.x - wg * kV6WgThreads;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const int q0 = qb * kV6CtaQ + cw * kV6Q;
    const float *qh = p.q + b * p.q_b + h * p.q_h;

    v6_stage_q<D>(qh, p.q_t, p.seq_q, q0, p.scale, tid, q_hi, q_lo, q_unscale, q_log2e);
    const int row_a = 16 * warp + g; /* the thread's rows: row_a, row_a + 8 */
    /* masked: the windows of the consumer's rows in attended keys, and its warps' KwGroupKeys (the
     * warpgroup's: skipped, full and boundary tiles), in shared memory */
    int4 *grp_s = reinterpret_cast<int4 *>(smem + C::kGrpOff) + 4 * cw;
    int2 *win_s = reinterpret_cast<int2 *>(smem + C::kWinOff) + kV6Q * cw;
    if constexpr (kWin) {
        int wlo[2], whi[2];
        kw_quad_rows(p.a, b, q0 + row_a, q0 + row_a + 8, rows, n_kv, c, wlo, whi);
        KwGroupKeys grp = kw_group_empty();
#pragma unroll
        for (int r = 0; r < 2; ++r) kw_group_add(grp, wlo[r], whi[r], q0 + row_a + 8 * r < p.seq_q);
        grp = kw_group_warp(grp);
        if (c == 0) {
            win_s[row_a] = make_int2(wlo[0], whi[0]);
            win_s[row_a + 8] = make_int2(wlo[1], whi[1]);
        }
        if (lane == 0) grp_s[warp] = make_int4(grp.ulo, grp.uhi, grp.ilo, grp.ihi);
    }
    fence_proxy_async();
    named_bar_sync(1 + cw, kV6WgThreads);
    /* masked: the warpgroup's keys, and this thread's rows' windows */
    auto wg_keys = [&]() {
        KwGroupKeys k = kw_group_empty();
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int4 x = grp_s[w];
            kw_group_join(k, KwGroupKeys{x.x, x.y, x.z, x.w});
        }
        return k;
    };
    auto row_window = [&](int r) { return win_s[row_a + 8 * r]; };
    float qlog[2], m_run[2], bias[2], l_run[2], l_comp[2];
    int top[2]; /* kExactLse: the key of the row's largest score, if this lane holds it, else -1 */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        top[r] = -1;
        qlog[r] = q_log2e[row_a + 8 * r];
        m_run[r] = -INFINITY;
        bias[r] = INFINITY;
        l_run[r] = 0.f;
        l_comp[r] = 0.f;
    }
    float o[C::kOAcc];
#pragma unroll
    for (int i = 0; i < C::kOAcc; ++i) o[i] = 0.f;

    const uint32_t q_hi_s = smem_u32(q_hi), q_lo_s = smem_u32(q_lo);

#pragma unroll 1
    for (int it = 0; it < t_end - t_begin; ++it) { /* it: the tile's place in the ring's sequence */
        const int tile = t_begin + it, key0 = tile * kV6K;
        const int k_slot = (2 * it) % C::kStages, v_slot = (2 * it + 1) % C::kStages;
        const uint32_t k_par = (uint32_t)(((2 * it) / C::kStages) & 1);
        const uint32_t v_par = (uint32_t)(((2 * it + 1) / C::kStages) & 1);
        const uint32_t k_s = ring_s + (uint32_t)(k_slot * C::kSlot), v_s = ring_s + (uint32_t)(v_slot * C::kSlot);
        /* masked: a tile no row of the warpgroup attends is not computed (its slots are waited for and
         * given back: the producer fills each slot once both consumers are done with it); a tile inside
         * every row's window needs no test per key */
        bool full = true;
        if constexpr (kWin) {
            const KwGroupKeys grp = wg_keys(); /* from shared memory each tile: registers are short */
            const int key1 = min(key0 + kV6K, n_kv);
            /* the same in every thread: votes, so that the compiler sees them uniform (the wgmma
             * descriptors stay in uniform registers) */
            full = __all_sync(0xffffffffu, kw_tile_full(grp, key0, key1));
            if (__all_sync(0xffffffffu, kw_tile_skipped(grp, key0, key1))) {
                mbar_wait(full_s + 8u * k_slot, k_par);
                mbar_arrive(empty_s + 8u * k_slot);
                mbar_wait(full_s + 8u * v_slot, v_par);
                mbar_arrive(empty_s + 8u * v_slot);
                continue;
            }
        }

        /* ---- 1. S = Q K^T: X = corrections, then hi*hi of d < D/2; Y = hi*hi of d >= D/2 ---- */
        float sx[32], sy[32];
        mbar_wait(full_s + 8u * k_slot, k_par);
        const V6TileInfo info = *reinterpret_cast<const V6TileInfo *>(ring + k_slot * C::kSlot + 2 * C::kImage);
        const float k_unscale = info.k_unscale;
        {
            const uint64_t qh_d = smem_desc_sw128(opaque(q_hi_s)), ql_d = smem_desc_sw128(opaque(q_lo_s));
            const uint64_t kh_d = smem_desc_sw128(opaque(k_s)), kl_d = smem_desc_sw128(opaque(k_s) + C::kImage);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < C::kSlices; ++s) {
                wgmma_m64n64k16_f16_ss(sx, f16_slice_desc(qh_d, s, kV6Q), f16_slice_desc(kl_d, s, kV6K), s > 0 ? 1 : 0);
                wgmma_m64n64k16_f16_ss(sx, f16_slice_desc(ql_d, s, kV6Q), f16_slice_desc(kh_d, s, kV6K), 1);
            }
#pragma unroll
            for (int s = 0; s < C::kSlices / 2; ++s)
                wgmma_m64n64k16_f16_ss(sx, f16_slice_desc(qh_d, s, kV6Q), f16_slice_desc(kh_d, s, kV6K), 1);
#pragma unroll
            for (int s = C::kSlices / 2; s < C::kSlices; ++s)
                wgmma_m64n64k16_f16_ss(sy, f16_slice_desc(qh_d, s, kV6Q), f16_slice_desc(kh_d, s, kV6K),
                                       s > C::kSlices / 2 ? 1 : 0);
            wgmma_commit();
            wgmma_wait_all();
            fence_regs(sx);
            fence_regs(sy);
#pragma unroll
            for (int i = 0; i < 32; ++i) sx[i] += sy[i];
            if (info.k_bad != 0) {
                /* A non-finite k (rare): the scores above stay where finite (the same arithmetic as a tile
                 * without one, so a key a row does not attend leaves that row's bits alone); where they are
                 * NaN, hi*hi alone, as v4 keeps it: an infinite hi*hi keeps its sign (its corrections are
                 * NaN), so a -Inf score gives weight 0 and +Inf or NaN the row NaN (jattn.h's rule). */
                wgmma_fence();
#pragma unroll
                for (int s = 0; s < C::kSlices; ++s)
                    wgmma_m64n64k16_f16_ss(sy, f16_slice_desc(qh_d, s, kV6Q), f16_slice_desc(kh_d, s, kV6K),
                                           s > 0 ? 1 : 0);
                wgmma_commit();
                wgmma_wait_all();
                fence_regs(sx);
                fence_regs(sy);
#pragma unroll
                for (int i = 0; i < 32; ++i) sx[i] = isnan(sx[i]) && isinf(sy[i]) ? sy[i] : sx[i];
            }
        }
        slot_release(empty_s + 8u * k_slot, __float_as_uint(info.k_unscale) | info.v_tiny | info.k_bad, p.zero);

        /* ---- 2. the row softmax ---- */
        if (!full) { /* masked, a boundary tile: keys outside a row's window get weight 0 */
            const int2 w[2] = {row_window(0), row_window(1)};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int r = 0; r < 2; ++r)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int j = key0 + 8 * i + 2 * c + e;
                        if (j < w[r].x || j >= w[r].y) sx[4 * i + 2 * r + e] = -INFINITY;
                    }
        } else if (key0 + kV6K > n_kv) { /* the last tile, partial: keys past n_kv get weight 0 */
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    if (key0 + 8 * i + 2 * c + e >= n_kv) sx[4 * i + e] = sx[4 * i + 2 + e] = -INFINITY;
        }
        /* kBias: the tile's bias, after the V record in the V slot (so the V copy is waited for here); a
         * key's bias enters the row maximum (x = s k_un 2^-eq + b, natural units: a masked element's x is
         * -inf or NaN, which fmaxf passes over) and the exponent (below) */
        float kb[8][2] = {}, kq[2] = {0.f, 0.f};
        if constexpr (kBias) {
            mbar_wait(full_s + 8u * v_slot, v_par);
            const float *bias_t = reinterpret_cast<const float *>(ring + v_slot * C::kSlot + C::kRecord);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float2 bb = *reinterpret_cast<const float2 *>(bias_t + 8 * i + 2 * c);
                kb[i][0] = bb.x;
                kb[i][1] = bb.y;
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) kq[r] = q_unscale[row_a + 8 * r] * k_unscale;
        }
        float alpha[2], cexp[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
            if constexpr (kBias) {
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    mx = fmaxf(mx, fmaxf(fmaf(sx[4 * i + 2 * r], kq[r], kb[i][0]),
                                         fmaf(sx[4 * i + 2 * r + 1], kq[r], kb[i][1])));
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) mx = fmaxf(mx, fmaxf(sx[4 * i + 2 * r], sx[4 * i + 2 * r + 1]));
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            /* in units of 2^-eq; kBias: natural units */
            const float tile_m = kBias ? mx : mx * k_unscale;
            const float m_new = fmaxf(m_run[r], tile_m);
            if (kExactLse && tile_m > m_run[r]) { /* the row's largest score so far is in this tile */
                int col = -1;
#pragma unroll
                for (int i = 0; i < 8; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float x = kBias ? fmaf(sx[4 * i + 2 * r + e], kq[r], kb[i][e]) : sx[4 * i + 2 * r + e];
                        if (x == mx) col = 8 * i + 2 * c + e;
                    }
                top[r] = col >= 0 ? key0 + col : -1;
            }
            /* masked: a row with no score yet keeps its weights at 0 (no inf - inf) */
            const float m_use = kWin && m_new == -INFINITY ? 0.f : m_new;
            const float b_new = 15.f - m_use * (kBias ? kLog2e : qlog[r]);
            /* masked: nothing accumulated yet (a window's first tiles can be wholly masked, which left the
             * bias at 15): the factor is 0, not 2^(b_new - 15), which overflows for a row whose scores
             * and biases are far below 0 (inf times the accumulators' 0 is NaN) */
            alpha[r] = kWin && m_run[r] == -INFINITY ? 0.f : exp2_approx(b_new - bias[r]);
            bias[r] = b_new;
            m_run[r] = m_new;
            /* at least the smallest normal float: with q and k near the bottom of the range the
             * product underflows to 0, and a masked key's -inf score times 0 would be NaN */
            cexp[r] = fmaxf(qlog[r] * k_unscale, FLT_MIN);
        }
        float rsum[2] = {0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = 4 * i + 2 * r + e;
                    if constexpr (kBias) {
                        /* the bias joins the row's constant first, b log2 e + (15 - m log2 e), two terms that
                         * nearly cancel where the bias dominates the score (a text encoder's -10000); a key
                         * whose bias is -inf is not attended, and a masked element (-inf) weighs 0 whatever
                         * its bias: neither may make a NaN here */
                        const float x = exp2_approx(fmaf(sx[j], cexp[r], fmaf(kb[i][e], kLog2e, bias[r])));
                        sx[j] = sx[j] == -INFINITY || kb[i][e] == -INFINITY ? 0.f : x;
                    } else {
                        sx[j] = exp2_approx(fmaf(sx[j], cexp[r], bias[r]));
                    }
                    rsum[r] += sx[j];
                }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float l = l_run[r] * alpha[r], comp = l_comp[r] * alpha[r];
            const float y = rsum[r] - comp;
            const float t = l + y;
            l_comp[r] = (t - l) - y;
            l_run[r] = t;
        }

        /* ---- 3. O_tile = P V, P split hi/lo from the registers ---- */
        uint32_t ph[C::kPSlices][4], pl[C::kPSlices][kSplitPV ? 4 : 1];
#pragma unroll
        for (int ks = 0; ks < C::kPSlices; ++ks)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if constexpr (kSplitPV) {
                    f16x2_split2(sx[8 * ks + 2 * j], sx[8 * ks + 2 * j + 1], ph[ks][j], pl[ks][j]);
                } else {
                    const __half2 hh = __floats2half2_rn(sx[8 * ks + 2 * j], sx[8 * ks + 2 * j + 1]);
                    ph[ks][j] = *reinterpret_cast<const uint32_t *>(&hh);
                }
            }
        float ot[C::kOAcc];
        mbar_wait(full_s + 8u * v_slot, v_par);
        {
            const uint32_t vh = opaque(v_s), vl = vh + C::kImage;
            wgmma_fence();
            if constexpr (kSplitPV) {
#pragma unroll
                for (int ks = 0; ks < C::kPSlices; ++ks)
                    v6_pv(ot, pl[ks], v6_desc_mn(vh + ks * 2048, p.v_lbo, p.v_sbo), ks > 0 ? 1 : 0);
#pragma unroll
                for (int ks = 0; ks < C::kPSlices; ++ks)
                    v6_pv(ot, ph[ks], v6_desc_mn(vl + ks * 2048, p.v_lbo, p.v_sbo), 1);
            }
#pragma unroll
            for (int ks = 0; ks < C::kPSlices; ++ks)
                v6_pv(ot, ph[ks], v6_desc_mn(vh + ks * 2048, p.v_lbo, p.v_sbo), kSplitPV || ks > 0 ? 1 : 0);
            wgmma_commit();
        }

        /* ---- 4. O = alpha O + O_tile 2^-ev ---- */
#pragma unroll
        for (int i = 0; i < C::kOCols; ++i)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int e = 0; e < 2; ++e) o[4 * i + 2 * r + e] *= alpha[r];
        const float *v_unscale = reinterpret_cast<const float *>(ring + v_slot * C::kSlot + 2 * C::kImage);
        float2 vf[C::kOCols];
#pragma unroll
        for (int i = 0; i < C::kOCols; ++i) vf[i] = *reinterpret_cast<const float2 *>(v_unscale + 8 * i + 2 * c);
        wgmma_wait_all();
        fence_regs(ot);
        fence_regs(ph);
        if constexpr (kSplitPV) fence_regs(pl);
        if (info.v_tiny != 0) { /* rarely taken: the tile's V was split after * 2^64 */
#pragma unroll
            for (int i = 0; i < C::kOAcc; ++i) ot[i] *= kTinyDown;
        }
#pragma unroll
        for (int i = 0; i < C::kOCols; ++i)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                o[4 * i + 2 * r] = fmaf(ot[4 * i + 2 * r], vf[i].x, o[4 * i + 2 * r]);
                o[4 * i + 2 * r + 1] = fmaf(ot[4 * i + 2 * r + 1], vf[i].y, o[4 * i + 2 * r + 1]);
            }
        uint32_t loaded = 0; /* the tile's V scales, read from the slot */
#pragma unroll
        for (int i = 0; i < C::kOCols; ++i) loaded |= __float_as_uint(vf[i].x) | __float_as_uint(vf[i].y);
        slot_release(empty_s + 8u * v_slot, loaded, p.zero);
    }

    /* ---- the output: O / l, token-major [B, Sq, H * D]; lse ----
     * lse = (log2 l - bias) / log2 e. kExactLse: in float64, plus the row's largest-score key's
     * exact score minus the tensor core's (m_run), weighted by that key's weight 2^15 / l. The
     * truncating fp32 accumulation of S's chains leaves the largest score ~1.5 ulp low (so the
     * lse of a peaky row), and a backward that recomputes S more exactly than this forward
     * would carry that as a relative error of every weight of the row (src/cuda/NOTES.md, "The
     * backward's accuracy"); the float32 chain alone cost ~1 ulp more. */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = q0 + row_a + 8 * r;
        double lse_fix = 0.0; /* kExactLse: the exact score's correction, quad-uniform */
        if (kExactLse && p.lse != nullptr) {
            int jt = top[r];
            jt = max(jt, __shfl_xor_sync(0xffffffffu, jt, 1));
            jt = max(jt, __shfl_xor_sync(0xffffffffu, jt, 2));
            double dot = 0.0;
            if (jt >= 0 && row < p.seq_q) { /* q from global memory, k from its tile's record; lane c: D / 4 */
                const unsigned char *rec = p.records + ((int64_t)bh_kv * p.tiles + jt / kV6K) * 2 * (int64_t)C::kRecord;
                const float *qr = qh + (int64_t)row * p.q_t;
#pragma unroll
                for (int m = 0; m < D / 32; ++m) {
                    const int d0 = c * (D / 4) + 8 * m;
                    double kx[8];
                    f16x2_chunk_f64(rec, rec + C::kImage, jt % kV6K, d0, kV6K, kx);
                    const float4 qa = __ldg(reinterpret_cast<const float4 *>(qr + d0));
                    const float4 qb = __ldg(reinterpret_cast<const float4 *>(qr + d0 + 4));
                    const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                    for (int k = 0; k < 8; ++k) dot = fma((double)qv[k], kx[k], dot);
                }
                const float k_un = reinterpret_cast<const V6TileInfo *>(rec + 2 * C::kImage)->k_unscale;
                dot *= (double)k_un * (double)p.scale;
            }
            dot = quad_sum(dot);
            if (jt >= 0) {
                /* kBias: m_run is the largest biased score in natural units, and the exact one adds the
                 * key's bias */
                const double s_fwd = kBias ? (double)m_run[r] : (double)m_run[r] * (double)q_unscale[row_a + 8 * r];
                const double exact = kBias ? dot + (double)p.bias_ws[bh * p.tiles * kV6K + jt] : dot;
                const double fix = (kPScale / (double)l) * (exact - s_fwd);
                lse_fix = isfinite(fix) ? fix : 0.0;
            }
        }
        /* no key to attend (key padding, a window, -inf biases): 0, and lse -inf */
        bool empty = n_tiles == 0;
        if constexpr (kWin) {
            const int2 w = row_window(r);
            empty = w.x >= w.y;
            if (kBias) { /* and every key of the window has bias -inf (the quad scans it; one step, mostly) */
                const float *bias_row = p.bias_ws + bh * p.tiles * kV6K;
                bool any = false;
                for (int j = w.x + c; j < w.y && !any; j += 4) any = bias_row[j] != -INFINITY;
                any |= __shfl_xor_sync(0xffffffffu, any, 1);
                any |= __shfl_xor_sync(0xffffffffu, any, 2);
                empty = !any;
            }
            /* and a row whose every windowed key carries weight 0 (the key mask's keys inside the window) */
            empty = empty || l == 0.f;
        }
        if (row >= p.seq_q) continue;
        float *dst = p.out + b * p.o_b + h * p.o_h + (int64_t)row * p.o_t;
        if (empty) { /* no key to attend: 0, and lse -inf */
#pragma unroll
            for (int i = 0; i < C::kOCols; ++i)
                *reinterpret_cast<float2 *>(dst + 8 * i + 2 * c) = make_float2(0.f, 0.f);
            if (p.lse != nullptr && c == 0) p.lse[bh * p.seq_q + row] = -INFINITY;
            continue;
        }
        const float inv = 1.f / l; /* l holds the same 2^15 as O: it is in the exponent's bias */
#pragma unroll
        for (int i = 0; i < C::kOCols; ++i)
            *reinterpret_cast<float2 *>(dst + 8 * i + 2 * c) =
                make_float2(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
        if (p.lse != nullptr && c == 0)
            p.lse[bh * p.seq_q + row] = kExactLse
                                            ? (float)((log2((double)l) - (double)bias[r]) / (double)kLog2e + lse_fix)
                                            : (log2f(l) - bias[r]) * (1.f / kLog2e);
    }

    /* masked: the non-finite v of the keys this thread's rows attend (rare: flagged tiles only) */
    if constexpr (kWin) {
        const KwGroupKeys grp = wg_keys();
        const unsigned char *recs = p.records + (int64_t)bh_kv * p.tiles * 2 * C::kRecord;
        bool bad = false;
        if (grp.ulo < grp.uhi)
            for (int t = grp.ulo / kV6K + lane; t * kV6K < grp.uhi; t += 32)
                bad |=
                    reinterpret_cast<const V6TileInfo *>(recs + (int64_t)t * 2 * C::kRecord + 2 * C::kImage)->v_bad !=
                    0;
        if (__any_sync(0xffffffffu, bad))
            v6_add_nonfinite_v<D, kMask>(recs, rows, p.v + b * p.v_b + (int64_t)(bh_kv % (p.heads / p.group)) * p.v_h,
                                         p.v_t, kBias ? p.bias_ws + bh * p.tiles * kV6K : nullptr,
                                         p.out + b * p.o_b + h * p.o_h + (int64_t)(q0 + row_a) * p.o_t, p.o_t,
                                         q0 + row_a, p.seq_q, grp.ulo, grp.uhi, row_window(0), row_window(1), c);
    }
#endif
}

template <int D, bool kSplitPV, bool kExactLse, int kMask>
cudaError_t v6_launch(const V6Params &p, dim3 grid, cudaStream_t stream) {
    auto kernel = attention_f32_sm90_fa3_f16x2_128x64_kernel<D, kSplitPV, kExactLse, kMask>;
    const int smem = V6Config<D>::kSmemBytes + (kMask >= 1 ? kV6MaskSmem : 0);
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    kernel<<<grid, kV6Threads, smem, stream>>>(p);
    return cudaGetLastError();
}

/* The instance of a call: head_dim, precision, lse. */
template <int kMask>
cudaError_t v6_launch_mode(const V6Params &p, dim3 grid, int64_t head_dim, bool f32, cudaStream_t stream) {
    if (head_dim == 128) {
        if (!f32) return v6_launch<128, false, false, kMask>(p, grid, stream);
        return p.lse ? v6_launch<128, true, true, kMask>(p, grid, stream)
                     : v6_launch<128, true, false, kMask>(p, grid, stream);
    }
    if (!f32) return v6_launch<64, false, false, kMask>(p, grid, stream);
    return p.lse ? v6_launch<64, true, true, kMask>(p, grid, stream)
                 : v6_launch<64, true, false, kMask>(p, grid, stream);
}

} /* namespace */

extern "C" cudaError_t split_kv_f16x2_v6(const jattn_cuda_args *a, void *workspace, cudaStream_t stream);

/* Kernel v6 on `stream` (cuda_internal.h's launcher shape): the pre-pass, then the attention
 * (contract: attention_sm90.h, key padding included; workspace:
 * attention_f32_sm90_fa3_f16x2_workspace_bytes() bytes, 16-byte aligned).
 * @return cudaSuccess when both kernels were enqueued; cudaErrorInvalidValue for arguments
 *         attention_f32_sm90_wgmma_supported() rejects, seq_q or seq_kv above 2^31 - 129, or a
 *         NULL or misaligned workspace; cudaErrorNoKernelImageForDevice on a device other than
 *         compute capability 9.0; otherwise the CUDA error of a launch (as int). */
extern "C" int jattn_cuda_launch_v6(const jattn_cuda_args *a, void *workspace, void *stream_ptr) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    if (attention_f32_sm90_wgmma_supported(a) != ATTENTION_SM90_SUPPORTED || workspace == nullptr ||
        reinterpret_cast<uintptr_t>(workspace) % 16 != 0 || a->seq_q > INT32_MAX - kV6CtaQ ||
        a->seq_kv > INT32_MAX - kV6CtaQ)
        return cudaErrorInvalidValue;
    int dev = 0;
    cudaError_t err = sm90_current_device(&dev); /* compute capability 9.0 only (sm_90a code) */
    if (err != cudaSuccess) return err;
    err = split_kv_f16x2_v6(a, workspace, stream);
    if (err != cudaSuccess) return err;
    V6Params p;
    p.q = a->q;
    p.out = a->out;
    p.lse = a->lse;
    p.q_b = a->q_strides.batch;
    p.q_h = a->q_strides.head;
    p.q_t = a->q_strides.token;
    p.o_b = a->out_strides.batch;
    p.o_h = a->out_strides.head;
    p.o_t = a->out_strides.token;
    p.records = static_cast<const unsigned char *>(workspace);
    p.kv_count = a->kv_count;
    p.heads = (int)a->heads;
    p.seq_q = (int)a->seq_q;
    p.seq_kv = (int)a->seq_kv;
    p.tiles = (int)((a->seq_kv + kV6K - 1) / kV6K);
    p.scale = a->scale;
    /* MN-major, 128B swizzle: LBO = bytes between 64-column blocks of head_dim (one 8 KB block
     * image), SBO = bytes between 8-key groups (1024) */
    p.v_lbo = (uint32_t)(kV6K * kSwizzleBytes) >> 4; /* unused at D = 64: one block */
    p.v_sbo = (uint32_t)kSwizzleAtomBytes >> 4;
    p.zero = 0;
    const int64_t kv_heads = a->kv_heads > 0 ? a->kv_heads : a->heads;
    p.group = (int)(a->heads / kv_heads);
    p.kv_index = a->kv_index;
    p.v = a->v;
    p.v_b = a->v_strides.batch;
    p.v_h = a->v_strides.head;
    p.v_t = a->v_strides.token;
    p.bias_ws = reinterpret_cast<const float *>(static_cast<const unsigned char *>(workspace) +
                                                v6_bias_offset(a->batch, kv_heads, p.tiles, a->head_dim));
    p.a = kw_mask_of(*a);
    const int64_t qblocks = (a->seq_q + kV6CtaQ - 1) / kV6CtaQ;
    /* masked: (heads, query blocks, batch), whose y takes at most 65535 query blocks (v6_refusal) */
    const bool masked = a->key_bias || kw_has_window(*a);
    if (masked && a->seq_q > ATTENTION_SM90_V6_MASKED_MAX_SEQ_Q) return cudaErrorInvalidValue;
    const dim3 grid = masked ? dim3((unsigned)a->heads, (unsigned)qblocks, (unsigned)a->batch)
                             : dim3((unsigned)qblocks, (unsigned)a->heads, (unsigned)a->batch);
    const bool f32 = a->precision == JATTN_PRECISION_F32;
    /* the instance: a window (causal, blocks, segments) and a key bias each need their own */
    if (a->key_bias) return v6_launch_mode<2>(p, grid, a->head_dim, f32, stream);
    if (kw_has_window(*a)) return v6_launch_mode<1>(p, grid, a->head_dim, f32, stream);
    return v6_launch_mode<0>(p, grid, a->head_dim, f32, stream);
}
