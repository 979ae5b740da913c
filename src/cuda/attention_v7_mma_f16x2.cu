/* attention v7 (launcher jattn_cuda_launch_v7, reported as cuda_v7_flash_f16x2_mma16n8k16_*): the
 * 2xFP16 split (f16x2_split.cuh, after Ootomo & Yokota 2022) on mma.sync.m16n8k16 fp16 with fp32
 * accumulation, the FlashAttention-2 orientation. The portable fast path: every GPU from sm_80 on
 * (Ampere, Ada, Hopper, Blackwell through PTX), every head_dim 1 .. 256, key padding, lse, f32 and
 * tf32.
 *
 * Reads  q [B, H, Sq, D] through element strides (head_dim contiguous, 4-byte aligned); the
 *        records of its pre-pass (attention_v7_split_kv_f16x2.cu, f16x2_mma_records.cuh): per head
 *        and 64 keys the hi and lo fp16 images of K and V with their scales, head_dim padded with
 *        zeros to the tile DT (a multiple of 16); with key padding, kv_count [B]: the keys batch b
 *        attends, packed in order by the pre-pass.
 * Writes out [B, H, Sq, D] through its strides (float2 stores when aligned), lse [B, H, Sq]
 *        contiguous (natural log) when not NULL.
 *
 * One CTA of 8 warps owns 128 queries of one (b, h); each warp 16 query rows; K and V tiles of BC
 * keys (64, or 32 for DT > 128 where registers are short) pass through shared memory:
 *  - Q: each warp stages its 16 rows once, q * scale times the row's 2^eq (largest finite
 *    magnitude to [2^6, 2^7)), as hi and lo fp16 rows in shared memory; ldmatrix reads the A
 *    fragments per k16 slice of head_dim.
 *  - K and V: cp.async 16-byte copies of the records' images into shared rows padded by 16 bytes
 *    (DT / 8 + 1 chunks, an odd number: the 8 rows an ldmatrix reads fall in 8 distinct bank
 *    groups); V tile t is copied while S of tile t is computed, K tile t+1 while P V of tile t is
 *    (FlashAttention-2's overlap, two CTA barriers per tile).
 *  - per tile, in the order of the algorithm:
 *    1. S = Q K^T: per k16 slice the K fragments by ldmatrix (K rows are the B operand's columns),
 *       three products: Q_hi K_lo and Q_lo K_hi into one accumulator, Q_hi K_hi into chains of at
 *       most 4 slices (64 head_dim columns) each started from zero and added in fp32 (the tensor
 *       core's own accumulation error grows with the chain; kernel v6 keeps the same lengths);
 *       S = hi*hi + corrections. A K record with a non-finite value keeps an infinite hi*hi as it
 *       is (its corrections are NaN), so a -Inf score weighs 0 and +Inf or NaN make the row NaN
 *       (jattn.h's rule).
 *    2. the row softmax in registers (thread: rows g and g + 8 of its warp, two keys of each n8
 *       block): keys past the attended count at -inf; the row maximum by two quad shuffles; the
 *       record's K scale folded into the exponent's constant; weights p = 2^(s c + bias) with
 *       bias = 15 - m 2^-eq log2 e, so P comes out as P 2^15, a full fp16 range; alpha =
 *       2^(bias_new - bias_old); per-thread row sums Kahan-compensated across tiles.
 *    3. P hi and lo split from the registers: the S accumulators of key blocks 2ks and 2ks + 1 are
 *       the A fragment of key slice ks as they stand.
 *    4. O_tile = P V per pair of n8 column blocks, V fragments by ldmatrix.trans: f32 mode
 *       P_lo V_hi, P_hi V_lo, then P_hi V_hi (tf32 mode P_hi V_hi only), into a FRESH accumulator
 *       per tile (a long tensor-core accumulation drifts past the gate: docs/DESIGN.md §4);
 *       O = alpha O + O_tile 2^-ev per column (a tiny V record, split after * 2^64, scaled back).
 *  - the output O / l through the out strides; lse = (log2 l - bias) / log2 e; a row with no
 *    attended key gets 0 and lse -inf. f32 with lse (an instance of its own, kExactLse): the lse in
 *    float64 plus the row's largest-score key's exact score (q from global memory, k from its
 *    record's hi + lo, in float64) minus the tensor core's, weighted by that key's weight: the lane
 *    holding a row's maximum notes its key where the maximum moves (src/cuda/NOTES.md, "The
 *    backward's accuracy").
 * Masks and grouped-query heads (src/cuda/NOTES.md, "Masks"): the records are per key/value head, read
 * by the group's query heads (h / group); under a window (kMask 1) the CTA walks only the key tiles of
 * its rows (kw_tile_keys, query blocks last to first across every head), a warp skips the tiles none of its rows
 * attends and tests each element of a boundary tile against its row's window in attended keys; a key bias (kMask 2) is
 * staged by the pre-pass, copied with K, and enters the row maximum and the exponent; a row with no attended key gets 0
 * and lse -inf; the non-finite v the masked pre-pass left out are added into the rows that attend them after the output
 * is written. Shared memory (DT = 128): Q 2 x 128 x 272 B, K and V 2 x 64 x 272 B each: 140 KB, one CTA per SM.
 *
 * Measured: src/cuda/NOTES.md's version table. */
#include <float.h>
#include <atomic>
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "f16x2_mma_records.cuh"
#include "key_padding.cuh"
#include "key_window.cuh"
#include "mma_f16_ptx.cuh"

namespace {

constexpr int kV7MaxWarps = 8;   /* a CTA has 1 to 8 warps (v7_warps), 16 queries each */
constexpr int kV7BiasSmem = 256; /* masked instances: a tile's key bias (kBC <= 64 floats) */
constexpr float kV7Log2e = 1.4426950408889634f;

template <int DT>
struct V7Config {
    static constexpr int kBC = DT <= 128 ? 64 : 32; /* keys per tile */
    static constexpr int kRow = 2 * DT + 16;        /* bytes of a padded shared row */
    static constexpr int kSlices = DT / 16;         /* k16 slices of head_dim */
    static constexpr int kChain = 4;                /* hi*hi slices per chain */
    static constexpr int kNT = kBC / 8;             /* n8 key blocks of S */
    static constexpr int kKS = kBC / 16;            /* k16 key slices of P V */
    static constexpr int kOB = DT / 8;              /* n8 column blocks of O */
    /* column pairs of P V whose accumulators are live together: every pair up to DT = 128 (16
     * independent mma chains; 2 left the tensor pipe waiting on each chain's latency, measured), 4
     * above (registers) */
    static constexpr int kPVPairs = DT <= 128 ? DT / 16 : 4;
    static constexpr int kTilesPerRecord = kV7RecordKeys / kBC;
    static constexpr int kKOff = 0; /* K hi [kBC][kRow], K lo, info */
    static constexpr int kKInfoOff = kKOff + 2 * kBC * kRow;
    static constexpr int kVOff = kKInfoOff + 16; /* V hi, V lo, unscale [DT] */
    static constexpr int kVUnscaleOff = kVOff + 2 * kBC * kRow;
    static constexpr int kQOff = kVUnscaleOff + 4 * DT; /* Q hi [16 W][kRow], Q lo, then 2^-eq log2 e [16 W] */
    /* Shared memory of a CTA of w warps. */
    __host__ __device__ static constexpr int smem_bytes(int w) { return kQOff + 2 * 16 * w * kRow + 4 * 16 * w; }
    static constexpr int kSmemBytes = smem_bytes(kV7MaxWarps);
    static_assert(DT % 16 == 0 && DT <= 256, "head-dim tiles are multiples of 16 up to 256");
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
    static_assert(smem_bytes(1) <= 99 * 1024, "one warp's CTA fits every device from sm_80 on");
};

struct V7Params {
    const float *q;
    float *out, *lse;
    int64_t q_b, q_h, q_t, o_b, o_h, o_t; /* element strides (head_dim contiguous) */
    const unsigned char *records;
    const int *kv_count; /* key padding: batch b attends kv_count[b] keys (packed by the pre-pass), or NULL */
    int heads, seq_q, seq_kv, head_dim, records_per_head, q_blocks;
    float scale;
    int out_vec2; /* out and its strides allow 8-byte stores */
    int group;    /* query heads per key/value head: head h reads the records of b Hkv + h / group */
    /* masked instances (kMask >= 1): the call's mask (key_window.cuh reads it), the key padding's row
     * list, v (the non-finite values the pre-pass left out) and the staged key bias */
    const int *kv_index;
    const float *v;
    int64_t v_b, v_h, v_t;
    const float *bias_ws; /* per query head and record, 64 floats in attended-key order */
    KwMask a;
};

/* 2^x by the SFU (ex2.approx.ftz: ~2 ulp, subnormal results flushed to 0; 2^-inf = 0). */
__device__ __forceinline__ float exp2_sfu(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Stages the warp's 16 query rows q0 .. q0 + 15 (rows past seq_q, columns past D as zeros):
 * q * scale times the row's 2^eq, split into the hi and lo rows of shared memory, and the row's
 * 2^-eq log2 e. */
template <int DT>
__device__ __forceinline__ void v7_stage_q(const float *qh, int64_t q_t, int seq_q, int head_dim, int q0, float scale,
                                           int lane, unsigned char *q_hi, unsigned char *q_lo, float *q_log) {
    using C = V7Config<DT>;
    constexpr int kPer = (DT + 31) / 32;
#pragma unroll 1
    for (int r = 0; r < 16; ++r) {
        const int row = q0 + r;
        const float *src = qh + (int64_t)row * q_t;
        float x[kPer];
        float amax = 0.f;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
            const int d = lane + 32 * j;
            x[j] = row < seq_q && d < head_dim ? __ldg(src + d) * scale : 0.f;
            amax = fmaxf(amax, finite_abs(x[j]));
        }
#pragma unroll
        for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        const int eq = f16x2_exponent(amax, kQTarget);
        const float up = exp2_int(eq);
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
            const int d = lane + 32 * j;
            if (d < DT) {
                const float y = x[j] * up;
                const __half hi = __float2half_rn(y);
                const __half lo = __float2half_rn(y - __half2float(hi));
                reinterpret_cast<__half *>(q_hi + r * C::kRow)[d] = hi;
                reinterpret_cast<__half *>(q_lo + r * C::kRow)[d] = lo;
            }
        }
        if (lane == 0) q_log[r] = exp2_int(-eq) * kV7Log2e;
    }
}

/* cp.async of `rows` rows of a record image (row stride DT halves in global memory) into padded
 * shared rows. */
template <int DT>
__device__ __forceinline__ void v7_copy_image(uint32_t dst, const unsigned char *src, int rows, int tid) {
    using C = V7Config<DT>;
    constexpr int kChunks = DT / 8; /* 16-byte chunks of a row */
    for (int i = tid; i < rows * kChunks; i += (int)blockDim.x) {
        const int r = i / kChunks, c = i % kChunks;
        cp_async16(dst + (uint32_t)(r * C::kRow + 16 * c), src + (int64_t)r * DT * 2 + 16 * c);
    }
}

/* scale q . k in float64: q a float32 row of d columns, k a key row of a record's K hi and lo images
 * (k_hi, k_lo: DT halves each; k = (hi + lo) 2^-ek, exact in float64, hi + lo holding k 2^ek to about
 * 2^-23 of itself), over the four lanes of a quad (lane t = lane % 4 takes every fourth column; q NULL:
 * the lane adds 0). Every lane of the warp calls it. */
__device__ __forceinline__ double v7_exact_score(const float *q, const __half *k_hi, const __half *k_lo, int d,
                                                 float k_unscale, float scale, int t) {
    double dot = 0.0;
    if (q)
        for (int i = t; i < d; i += 4)
            dot = fma((double)__ldg(q + i), (double)__half2float(k_hi[i]) + (double)__half2float(k_lo[i]), dot);
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    dot += __shfl_xor_sync(0xffffffffu, dot, 2);
    return dot * (double)k_unscale * (double)scale;
}

/* The non-finite values of v that the rows of this lane attend, added into their out rows (masked calls,
 * kMask >= 1): the pre-pass wrote them as 0 and flagged their records (V7KeyInfo.v_bad), so that a
 * weight of exactly 0 never meets them in P V; a row that attends such a key gets its value here (out +
 * Inf is Inf, Inf and -Inf together NaN, as the sum of an exact evaluation), a row that does not never
 * sees it. Rare: runs only where a record of the warp's keys is flagged, after the lane has written its
 * out elements (it reads them back: a call of its own, so that the tile loop keeps its registers). Lane
 * (g, c) of the warp holds rows row0, row0 + 8 (windows w[0], w[1]) and columns 8 i + 2 c + {0, 1}. */
template <int DT, int kMask>
__device__ __noinline__ void v7_add_nonfinite_v(const unsigned char *head, const int *rows, const float *vb,
                                                int64_t v_t, const float *bias_row, float *dst0, int64_t o_t, int row0,
                                                int seq_q, int head_dim, int ulo, int uhi, int2 w0, int2 w1, int c) {
    const int r0 = ulo / kV7RecordKeys, r1 = (uhi + kV7RecordKeys - 1) / kV7RecordKeys;
#pragma unroll 1
    for (int rec = r0; rec < r1; ++rec) {
        const V7KeyInfo *info =
            reinterpret_cast<const V7KeyInfo *>(head + (int64_t)rec * v7_record_bytes(DT) + v7_k_info_offset(DT));
        if (info->v_bad == 0) continue;
        const int j0 = max(rec * kV7RecordKeys, ulo), j1 = min((rec + 1) * kV7RecordKeys, uhi);
#pragma unroll 1
        for (int j = j0; j < j1; ++j) {
            const float bj = kMask == 2 ? bias_row[j] : 0.f;
            const float *vj = vb + key_row(rows, j) * v_t;
#pragma unroll 1
            for (int r = 0; r < 2; ++r) {
                const int2 w = r ? w1 : w0;
                const int row = row0 + 8 * r;
                if (row >= seq_q || j < w.x || j >= w.y || bj == -INFINITY) continue;
                float *dst = dst0 + (int64_t)8 * r * o_t;
#pragma unroll 1
                for (int col = 2 * c; col < head_dim; col += 8)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (col + e < head_dim) {
                            const float x = vj[col + e];
                            if (!isfinite(x)) dst[col + e] += x;
                        }
            }
        }
    }
}

/* kSplitPV: f32 mode (P V in three products); false: tf32 mode (P_hi V_hi only). kExactLse (f32 with
 * lse): each row's lse exact to float32's rounding rather than to the tensor core's S ("the output").
 * kMask: 0 no window and no key bias (grouped heads and key padding served as they come); 1 a window
 * (causal, blocks, segments); 2 a key bias, with or without a window (src/cuda/NOTES.md, "Masks"). */
template <int DT, bool kSplitPV, bool kExactLse, int kMask>
__global__ void __launch_bounds__(32 * kV7MaxWarps, 1) attention_f32_mma_f16x2_v7_kernel(const V7Params p) {
    using C = V7Config<DT>;
    constexpr int kBC = C::kBC, kNT = C::kNT, kKS = C::kKS, kOB = C::kOB, kSlices = C::kSlices;
    constexpr bool kWin = kMask >= 1, kBias = kMask == 2;
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    /* masked: the query blocks last to first, every head's block qb before any head's block qb - 1, so that the
     * longest (causal: the last rows) start first across the grid (lab/gpu/model_causal_dispatch.py) */
    const unsigned bh_count = gridDim.x / (unsigned)p.q_blocks;
    const int64_t bh = kWin ? blockIdx.x % bh_count : blockIdx.x / p.q_blocks;
    const int qb = kWin ? p.q_blocks - 1 - (int)(blockIdx.x / bh_count) : (int)(blockIdx.x % p.q_blocks);
    const int b = (int)(bh / p.heads), h = (int)(bh % p.heads);
    const int n_kv = p.kv_count ? __ldg(p.kv_count + b) : p.seq_kv;
    const int n_tiles = (n_kv + kBC - 1) / kBC;
    /* grouped-query heads: the records of key/value head bh / group (b Hkv + h / group) */
    const int bh_kv = (int)bh / p.group;
    const unsigned char *head = p.records + (int64_t)bh_kv * p.records_per_head * v7_record_bytes(DT);

    const uint32_t s_base = smem_addr(smem);
    const int cta_q = (int)blockDim.x / 2; /* 16 queries a warp */
    const uint32_t q_hi_s = s_base + C::kQOff, q_lo_s = q_hi_s + cta_q * C::kRow;
    const uint32_t k_hi_s = s_base + C::kKOff, k_lo_s = k_hi_s + kBC * C::kRow;
    const uint32_t v_hi_s = s_base + C::kVOff, v_lo_s = v_hi_s + kBC * C::kRow;
    const V7KeyInfo *k_info = reinterpret_cast<const V7KeyInfo *>(smem + C::kKInfoOff);
    const float *v_unscale = reinterpret_cast<const float *>(smem + C::kVUnscaleOff);
    float *q_log = reinterpret_cast<float *>(smem + C::kQOff + 2 * cta_q * C::kRow);
    /* masked: after the rest (V7Config::smem_bytes(warps)), the tile's key bias (kBias: kBC floats), the
     * windows of the CTA's rows in attended keys (lo, hi) and each warp's KwGroupKeys: kept in shared
     * memory, not in registers (the f32 instances use every register at DT >= 128) */
    const int bias_off = C::smem_bytes(cta_q / 16);
    const float *bias_s = reinterpret_cast<const float *>(smem + bias_off);
    int2 *win_s = reinterpret_cast<int2 *>(smem + bias_off + kV7BiasSmem);
    int4 *grp_s = reinterpret_cast<int4 *>(smem + bias_off + kV7BiasSmem + 8 * cta_q);
    /* masked: the key tiles of the CTA's rows (kw_tile_keys), in attended keys (key padding's row list) */
    const int *rows = kWin && p.kv_index ? p.kv_index + (int64_t)b * p.seq_kv : nullptr;
    const float *bias_row = kBias ? p.bias_ws + bh * p.records_per_head * kV7RecordKeys : nullptr;
    int t_begin = 0, t_end = n_tiles;
    if constexpr (kWin) {
        int lo, hi;
        kw_tile_keys(p.a, b, (int64_t)qb * cta_q, (int64_t)qb * cta_q + cta_q, rows, n_kv, &lo, &hi);
        t_begin = lo / kBC;
        t_end = lo < hi ? (hi + kBC - 1) / kBC : t_begin;
    }

    /* K tile t: rows of record t / kTilesPerRecord, from row (t % kTilesPerRecord) kBC */
    auto copy_k = [&](int t) {
        const unsigned char *rec = head + (int64_t)(t / C::kTilesPerRecord) * v7_record_bytes(DT);
        const int64_t row0 = (int64_t)(t % C::kTilesPerRecord) * kBC * DT * 2;
        v7_copy_image<DT>(k_hi_s, rec + row0, kBC, tid);
        v7_copy_image<DT>(k_lo_s, rec + v7_k_lo_offset(DT) + row0, kBC, tid);
        if (tid == 0) cp_async16(s_base + C::kKInfoOff, rec + v7_k_info_offset(DT));
        if constexpr (kBias) /* the tile's bias: kBC floats of the staged row */
            if (tid < kBC / 4) cp_async16(s_base + bias_off + 16 * tid, bias_row + (int64_t)t * kBC + 4 * tid);
    };
    auto copy_v = [&](int t) {
        const unsigned char *rec = head + (int64_t)(t / C::kTilesPerRecord) * v7_record_bytes(DT);
        const int64_t row0 = (int64_t)(t % C::kTilesPerRecord) * kBC * DT * 2;
        v7_copy_image<DT>(v_hi_s, rec + v7_v_hi_offset(DT) + row0, kBC, tid);
        v7_copy_image<DT>(v_lo_s, rec + v7_v_lo_offset(DT) + row0, kBC, tid);
        for (int i = tid; i < DT / 4; i += (int)blockDim.x)
            cp_async16(s_base + C::kVUnscaleOff + 16 * i, rec + v7_v_unscale_offset(DT) + 16 * i);
    };

    if (t_begin < t_end) copy_k(t_begin);
    cp_async_commit();

    /* ---- Q: the warp's 16 rows ---- */
    const int q0 = qb * cta_q + 16 * warp;
    v7_stage_q<DT>(p.q + b * p.q_b + h * p.q_h, p.q_t, p.seq_q, p.head_dim, q0, p.scale, lane,
                   smem + C::kQOff + 16 * warp * C::kRow, smem + C::kQOff + (cta_q + 16 * warp) * C::kRow,
                   q_log + 16 * warp);
    __syncwarp();
    float qlog[2], m_run[2], bias[2], l_run[2], l_comp[2];
    int top[2]; /* kExactLse: the attended key of the row's largest score, if this lane holds it, else -1 */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        top[r] = -1;
        qlog[r] = q_log[16 * warp + g + 8 * r];
        m_run[r] = -INFINITY;
        bias[r] = INFINITY;
        l_run[r] = 0.f;
        l_comp[r] = 0.f;
    }
    /* masked: the windows of the lane's rows in attended keys, and the warp's (skipped, full and boundary
     * tiles) */
    if constexpr (kWin) {
        int wlo[2], whi[2];
        kw_quad_rows(p.a, b, q0 + g, q0 + g + 8, rows, n_kv, c, wlo, whi);
        KwGroupKeys grp = kw_group_empty();
#pragma unroll
        for (int r = 0; r < 2; ++r) kw_group_add(grp, wlo[r], whi[r], q0 + g + 8 * r < p.seq_q);
        grp = kw_group_warp(grp);
        if (c == 0) {
            win_s[16 * warp + g] = make_int2(wlo[0], whi[0]);
            win_s[16 * warp + g + 8] = make_int2(wlo[1], whi[1]);
        }
        if (lane == 0) grp_s[warp] = make_int4(grp.ulo, grp.uhi, grp.ilo, grp.ihi);
        __syncwarp();
    }
    /* masked: the warp's keys (KwGroupKeys) and the lane's rows' windows, from shared memory */
    auto warp_keys = [&]() {
        const int4 x = grp_s[warp];
        return KwGroupKeys{x.x, x.y, x.z, x.w};
    };
    auto row_window = [&](int r) { return win_s[16 * warp + g + 8 * r]; };
    float o[kOB][4];
#pragma unroll
    for (int i = 0; i < kOB; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][e] = 0.f;

    /* ldmatrix row addresses of this lane: A (Q) rows 16 warp + (lane % 8) + 8 ((lane / 8) % 2),
     * k offset 8 (lane / 16); B (K) keys (lane % 8) + 8 (lane / 16), k offset 8 ((lane / 8) % 2);
     * B of P V (V, transposed) keys (lane % 8) + 8 ((lane / 8) % 2), columns 8 (lane / 16). */
    const uint32_t a_off = (uint32_t)((16 * warp + (lane % 8) + 8 * ((lane / 8) % 2)) * C::kRow + 16 * (lane / 16));
    const uint32_t k_off = (uint32_t)(((lane % 8) + 8 * (lane / 16)) * C::kRow + 16 * ((lane / 8) % 2));
    const uint32_t v_off = (uint32_t)(((lane % 8) + 8 * ((lane / 8) % 2)) * C::kRow + 16 * (lane / 16));

#pragma unroll 1
    for (int tile = t_begin; tile < t_end; ++tile) {
        const int key0 = tile * kBC;
        /* masked: a tile no row of the warp attends is not computed (the warp still copies and waits); a
         * tile inside every row's window needs no test per key */
        const int key1 = min(key0 + kBC, n_kv);
        bool skip = false, full = true;
        if constexpr (kWin) {
            const KwGroupKeys grp = warp_keys(); /* the same in every lane: votes make that plain */
            skip = __all_sync(0xffffffffu, kw_tile_skipped(grp, key0, key1));
            full = __all_sync(0xffffffffu, kw_tile_full(grp, key0, key1));
        }
        cp_async_wait_all();
        __syncthreads(); /* K tile landed; every warp is done with the V buffer */
        copy_v(tile);
        cp_async_commit();

        uint32_t ph[kKS][4], pl[kKS][4];
        float alpha[2];
        V7KeyInfo info;
        if (!skip) {
            /* ---- 1. S = Q K^T: corrections in sc, hi*hi in chains of kChain slices added into s ---- */
            float s[kNT][4], sc[kNT][4], sh[kNT][4];
#pragma unroll
            for (int sl = 0; sl < kSlices; ++sl) {
                uint32_t ah[4], al[4];
                ldmatrix_x4(ah, q_hi_s + a_off + 32 * sl);
                ldmatrix_x4(al, q_lo_s + a_off + 32 * sl);
                const bool chain_start = sl % C::kChain == 0;
#pragma unroll
                for (int np = 0; np < kNT / 2; ++np) {
                    uint32_t bhi[4], blo[4]; /* n8 blocks 2 np (b0, b1) and 2 np + 1 (b0, b1) */
                    ldmatrix_x4(bhi, k_hi_s + k_off + 16 * np * C::kRow + 32 * sl);
                    ldmatrix_x4(blo, k_lo_s + k_off + 16 * np * C::kRow + 32 * sl);
#pragma unroll
                    for (int u = 0; u < 2; ++u) {
                        const int n = 2 * np + u;
                        if (sl == 0)
                            mma_f16_zero(sc[n], ah, blo[2 * u], blo[2 * u + 1]);
                        else
                            mma_f16(sc[n], ah, blo[2 * u], blo[2 * u + 1]);
                        mma_f16(sc[n], al, bhi[2 * u], bhi[2 * u + 1]);
                        if (chain_start)
                            mma_f16_zero(sh[n], ah, bhi[2 * u], bhi[2 * u + 1]);
                        else
                            mma_f16(sh[n], ah, bhi[2 * u], bhi[2 * u + 1]);
                    }
                }
                if (sl % C::kChain == C::kChain - 1 || sl == kSlices - 1) { /* a chain ends */
#pragma unroll
                    for (int n = 0; n < kNT; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) s[n][e] = sl < C::kChain ? sh[n][e] : s[n][e] + sh[n][e];
                }
            }
            info = *k_info;
            if (info.k_bad == 0) {
#pragma unroll
                for (int n = 0; n < kNT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[n][e] += sc[n][e];
            } else { /* a non-finite k (rare): an infinite hi*hi keeps its sign */
#pragma unroll
                for (int n = 0; n < kNT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[n][e] = isinf(s[n][e]) ? s[n][e] : s[n][e] + sc[n][e];
            }

            /* ---- 2. the row softmax ---- */
            if (!full) { /* masked, a boundary tile: keys outside a row's window get weight 0 */
                const int2 w[2] = {row_window(0), row_window(1)};
#pragma unroll
                for (int n = 0; n < kNT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int j = key0 + 8 * n + 2 * c + e % 2, r = e / 2;
                        if (j < w[r].x || j >= w[r].y) s[n][e] = -INFINITY;
                    }
            } else if (key0 + kBC > n_kv) { /* the last tile, partial: keys past n_kv get weight 0 */
#pragma unroll
                for (int n = 0; n < kNT; ++n)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (key0 + 8 * n + 2 * c + e >= n_kv) s[n][e] = s[n][2 + e] = -INFINITY;
            }
            /* kBias: a key's bias enters the row maximum (x = s k_un 2^-eq + b, natural units: a masked
             * element's x is -inf or NaN, which fmaxf passes over) and the exponent (below) */
            float kb[kNT][2] = {}, kq[2] = {0.f, 0.f};
            if constexpr (kBias) {
#pragma unroll
                for (int n = 0; n < kNT; ++n) {
                    const float2 bb = *reinterpret_cast<const float2 *>(bias_s + 8 * n + 2 * c);
                    kb[n][0] = bb.x;
                    kb[n][1] = bb.y;
                }
#pragma unroll
                for (int r = 0; r < 2; ++r) kq[r] = __fdiv_rn(qlog[r], kV7Log2e) * info.k_unscale;
            }
            float cexp[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = -INFINITY;
                if constexpr (kBias) {
#pragma unroll
                    for (int n = 0; n < kNT; ++n)
                        mx = fmaxf(mx,
                                   fmaxf(fmaf(s[n][2 * r], kq[r], kb[n][0]), fmaf(s[n][2 * r + 1], kq[r], kb[n][1])));
                } else {
#pragma unroll
                    for (int n = 0; n < kNT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                /* in units of 2^-eq; kBias: natural units */
                const float tile_m = kBias ? mx : mx * info.k_unscale;
                const float m_new = fmaxf(m_run[r], tile_m);
                if constexpr (kExactLse) {
                    if (tile_m > m_run[r]) { /* the row's largest score moves here */
                        int col = -1;
#pragma unroll
                        for (int n = 0; n < kNT; ++n)
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const float x = kBias ? fmaf(s[n][2 * r + e], kq[r], kb[n][e]) : s[n][2 * r + e];
                                if (x == mx) col = 8 * n + 2 * c + e;
                            }
                        top[r] = col >= 0 ? key0 + col : -1;
                    }
                }
                /* masked: a row with no score yet keeps its weights at 0 (no inf - inf) */
                const float m_use = kWin && m_new == -INFINITY ? 0.f : m_new;
                const float b_new = 15.f - m_use * (kBias ? kV7Log2e : qlog[r]);
                /* masked: nothing accumulated yet (a window's first tiles can be wholly masked, which left the
                 * bias at 15): the factor is 0, not 2^(b_new - 15), which overflows for a row whose scores
                 * and biases are far below 0 (inf times the accumulators' 0 is NaN) */
                alpha[r] = kWin && m_run[r] == -INFINITY ? 0.f : exp2_sfu(b_new - bias[r]);
                bias[r] = b_new;
                m_run[r] = m_new;
                /* at least the smallest normal float: with q and k near the bottom of the range the
                 * product underflows to 0, and a masked key's -inf score times 0 would be NaN */
                cexp[r] = fmaxf(qlog[r] * info.k_unscale, FLT_MIN);
            }
            float rsum[2] = {0.f, 0.f};
#pragma unroll
            for (int n = 0; n < kNT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = e / 2;
                    /* kBias: the bias joins the row's constant first, b log2 e + (15 - m log2 e), two terms
                     * that nearly cancel where the bias dominates the score (a text encoder's -10000), so
                     * that the score's part is not rounded at the bias' magnitude */
                    if constexpr (kBias) {
                        /* a key whose bias is -inf is not attended, and a masked element (-inf) weighs 0
                         * whatever its bias: neither may make a NaN here */
                        const float bj = kb[n][e % 2];
                        const float x = exp2_sfu(fmaf(s[n][e], cexp[r], fmaf(bj, kV7Log2e, bias[r])));
                        s[n][e] = s[n][e] == -INFINITY || bj == -INFINITY ? 0.f : x;
                    } else {
                        s[n][e] = exp2_sfu(fmaf(s[n][e], cexp[r], bias[r]));
                    }
                    rsum[r] += s[n][e];
                }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float l = l_run[r] * alpha[r], comp = l_comp[r] * alpha[r];
                const float y = rsum[r] - comp;
                const float t = l + y;
                l_comp[r] = (t - l) - y;
                l_run[r] = t;
            }

            /* ---- 3. P hi / lo: key blocks 2 ks, 2 ks + 1 are the A fragment of key slice ks ---- */
#pragma unroll
            for (int ks = 0; ks < kKS; ++ks)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float x0 = s[2 * ks + j / 2][2 * (j % 2)], x1 = s[2 * ks + j / 2][2 * (j % 2) + 1];
                    if constexpr (kSplitPV) {
                        f16x2_split2(x0, x1, ph[ks][j], pl[ks][j]);
                    } else {
                        const __half2 hh = __floats2half2_rn(x0, x1);
                        ph[ks][j] = *reinterpret_cast<const uint32_t *>(&hh);
                        pl[ks][j] = 0u;
                    }
                }
        }

        cp_async_wait_all();
        __syncthreads(); /* V tile landed; every warp is done with the K buffer */
        if (tile + 1 < t_end) copy_k(tile + 1);
        cp_async_commit();

        if (!skip) {
            /* ---- 4. O = alpha O + (P V) 2^-ev, a fresh accumulator per tile ---- */
            const float vdown = info.v_tiny != 0 ? kTinyDown : 1.f;
#pragma unroll
            for (int g0 = 0; g0 < kOB / 2; g0 += C::kPVPairs) { /* a group of column pairs, its accumulators live */
                float acc[2 * C::kPVPairs][4];
#pragma unroll
                for (int ks = 0; ks < kKS; ++ks)
#pragma unroll
                    for (int jp = g0; jp < g0 + C::kPVPairs; ++jp) {
                        /* b0, b1 of column block 2 jp, then of 2 jp + 1, for key slice ks */
                        uint32_t vh[4], vl[4];
                        ldmatrix_x4_trans(vh, v_hi_s + v_off + 16 * ks * C::kRow + 32 * jp);
                        if constexpr (kSplitPV) ldmatrix_x4_trans(vl, v_lo_s + v_off + 16 * ks * C::kRow + 32 * jp);
#pragma unroll
                        for (int u = 0; u < 2; ++u) {
                            float(&a)[4] = acc[2 * (jp - g0) + u];
                            if constexpr (kSplitPV) {
                                if (ks == 0)
                                    mma_f16_zero(a, pl[ks], vh[2 * u], vh[2 * u + 1]);
                                else
                                    mma_f16(a, pl[ks], vh[2 * u], vh[2 * u + 1]);
                                mma_f16(a, ph[ks], vl[2 * u], vl[2 * u + 1]);
                                mma_f16(a, ph[ks], vh[2 * u], vh[2 * u + 1]);
                            } else {
                                if (ks == 0)
                                    mma_f16_zero(a, ph[ks], vh[2 * u], vh[2 * u + 1]);
                                else
                                    mma_f16(a, ph[ks], vh[2 * u], vh[2 * u + 1]);
                            }
                        }
                    }
#pragma unroll
                for (int i = 0; i < 2 * C::kPVPairs; ++i) {
                    const int blk = 2 * g0 + i;
                    const float2 vs = *reinterpret_cast<const float2 *>(v_unscale + 8 * blk + 2 * c);
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float un = (e % 2 == 0 ? vs.x : vs.y) * vdown;
                        o[blk][e] = fmaf(acc[i][e], un, o[blk][e] * alpha[e / 2]);
                    }
                }
            }
        }
    }
    cp_async_wait_all();

    /* ---- the output: O / l through the out strides; lse ----
     * lse = (log2 l - bias) / log2 e. kExactLse: in float64, plus the row's largest-score key's exact
     * score (float64: q from global memory, k from its record's hi + lo) minus the tensor core's (m_run 2^-eq),
     * weighted by that key's weight 2^15 / l. The truncating fp32 accumulation of S's chains leaves the largest score
     * ~1.5 ulp low (and so the lse of a peaky row), and a backward that recomputes S more exactly than
     * this forward would carry that as a relative error of every weight of the row (src/cuda/NOTES.md,
     * "The backward's accuracy"), as kernel v6's kExactLse. kBias: m_run is the largest biased score in
     * natural units, and the exact one adds the key's bias. */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = q0 + g + 8 * r;
        double lse_fix = 0.0; /* kExactLse: the exact score's correction, quad-uniform */
        if constexpr (kExactLse) {
            int jt = top[r];
            jt = max(jt, __shfl_xor_sync(0xffffffffu, jt, 1));
            jt = max(jt, __shfl_xor_sync(0xffffffffu, jt, 2));
            const bool have = jt >= 0 && row < p.seq_q;
            const float *qr = have ? p.q + b * p.q_b + h * p.q_h + (int64_t)row * p.q_t : nullptr;
            /* the key's record (attended keys, packed in order by the pre-pass) and its row there */
            const int jr = have ? jt : 0;
            const unsigned char *rec = head + (int64_t)(jr / kV7RecordKeys) * v7_record_bytes(DT);
            const int64_t at = (int64_t)(jr % kV7RecordKeys) * DT * 2;
            const __half *k_hi = reinterpret_cast<const __half *>(rec + at);
            const __half *k_lo = reinterpret_cast<const __half *>(rec + v7_k_lo_offset(DT) + at);
            const float k_un = have ? reinterpret_cast<const V7KeyInfo *>(rec + v7_k_info_offset(DT))->k_unscale : 0.f;
            const double dot = v7_exact_score(qr, k_hi, k_lo, p.head_dim, k_un, p.scale, c);
            if (have) {
                /* qlog = 2^-eq log2 e exactly (a power of two times a float), so the quotient is 2^-eq */
                const double s_fwd = kBias ? (double)m_run[r] : (double)m_run[r] * ((double)qlog[r] / (double)kV7Log2e);
                const double exact = kBias ? dot + (double)bias_row[jt] : dot;
                const double fix = (32768.0 / (double)l) * (exact - s_fwd);
                lse_fix = isfinite(fix) ? fix : 0.0;
            }
        }
        /* no key to attend (key padding, a window, -inf biases): 0, and lse -inf */
        bool empty = n_tiles == 0;
        if constexpr (kWin) {
            const int2 w = row_window(r);
            empty = w.x >= w.y;
            if (kBias) { /* and every key of the window has bias -inf (the quad scans it; one step, mostly) */
                bool any = false;
                for (int j = w.x + c; j < w.y && !any; j += 4) any = bias_row[j] != -INFINITY;
                any |= __shfl_xor_sync(0xffffffffu, any, 1);
                any |= __shfl_xor_sync(0xffffffffu, any, 2);
                empty = !any;
            }
        }
        if (row >= p.seq_q) continue;
        float *dst = p.out + b * p.o_b + h * p.o_h + (int64_t)row * p.o_t;
        const float inv = 1.f / l; /* l holds the same 2^15 as O: it is in the exponent's bias */
#pragma unroll
        for (int i = 0; i < kOB; ++i) {
            const int col = 8 * i + 2 * c;
            const float x0 = empty ? 0.f : o[i][2 * r] * inv, x1 = empty ? 0.f : o[i][2 * r + 1] * inv;
            if (col + 1 < p.head_dim) {
                if (p.out_vec2)
                    *reinterpret_cast<float2 *>(dst + col) = make_float2(x0, x1);
                else
                    dst[col] = x0, dst[col + 1] = x1;
            } else if (col < p.head_dim) {
                dst[col] = x0;
            }
        }
        if constexpr (kExactLse) {
            if (p.lse != nullptr && c == 0)
                p.lse[bh * p.seq_q + row] =
                    empty ? -INFINITY : (float)((log2((double)l) - (double)bias[r]) / (double)kV7Log2e + lse_fix);
        } else {
            if (p.lse != nullptr && c == 0)
                p.lse[bh * p.seq_q + row] = empty ? -INFINITY : (log2f(l) - bias[r]) * (1.f / kV7Log2e);
        }
    }

    /* masked: the non-finite v of the keys this lane's rows attend (rare: flagged records only) */
    if constexpr (kWin) {
        const KwGroupKeys grp = warp_keys();
        bool bad = false;
        if (grp.ulo < grp.uhi)
            for (int rec = grp.ulo / kV7RecordKeys + lane; rec * kV7RecordKeys < grp.uhi; rec += 32)
                bad |= reinterpret_cast<const V7KeyInfo *>(head + (int64_t)rec * v7_record_bytes(DT) +
                                                           v7_k_info_offset(DT))
                           ->v_bad != 0;
        if (__any_sync(0xffffffffu, bad))
            v7_add_nonfinite_v<DT, kMask>(head, rows, p.v + b * p.v_b + (int64_t)(bh_kv % (p.heads / p.group)) * p.v_h,
                                          p.v_t, bias_row, p.out + b * p.o_b + h * p.o_h + (int64_t)(q0 + g) * p.o_t,
                                          p.o_t, q0 + g, p.seq_q, p.head_dim, grp.ulo, grp.uhi, row_window(0),
                                          row_window(1), c);
    }
}

/* The masked instances' extra shared memory (the kernel's "masked:" regions): the tile's key bias, the
 * rows' windows, the warps' keys. */
constexpr int kV7MaskSmem = kV7BiasSmem + kV7MaxWarps * (16 * 8 + 16);

template <int DT, bool kSplitPV, bool kExactLse, int kMask>
cudaError_t v7_launch(const V7Params &p, int warps, unsigned blocks, cudaStream_t stream) {
    auto kernel = attention_f32_mma_f16x2_v7_kernel<DT, kSplitPV, kExactLse, kMask>;
    const int smem = V7Config<DT>::smem_bytes(warps) + (kMask >= 1 ? kV7MaskSmem : 0);
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    kernel<<<blocks, 32 * warps, smem, stream>>>(p);
    return cudaGetLastError();
}

template <bool kSplitPV, bool kExactLse, int kMask>
cudaError_t v7_launch_dt(const V7Params &p, int warps, unsigned blocks, cudaStream_t s) {
    switch (v7_head_dim_tile(p.head_dim)) {
    case 32: return v7_launch<32, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    case 48: return v7_launch<48, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    case 64: return v7_launch<64, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    case 80: return v7_launch<80, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    case 96: return v7_launch<96, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    case 128: return v7_launch<128, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    case 160: return v7_launch<160, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    case 192: return v7_launch<192, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    default: return v7_launch<256, kSplitPV, kExactLse, kMask>(p, warps, blocks, s);
    }
}

/* The instance of a call: precision, lse, mask mode. */
template <int kMask>
cudaError_t v7_launch_mode(const V7Params &p, int warps, unsigned blocks, bool f32, cudaStream_t s) {
    if (!f32) return v7_launch_dt<false, false, kMask>(p, warps, blocks, s);
    return p.lse ? v7_launch_dt<true, true, kMask>(p, warps, blocks, s)
                 : v7_launch_dt<true, false, kMask>(p, warps, blocks, s);
}

/* Shared memory of a CTA of `warps` warps at head-dim tile dt. */
int v7_smem_bytes(int dt, int warps) {
    switch (dt) {
    case 32: return V7Config<32>::smem_bytes(warps);
    case 48: return V7Config<48>::smem_bytes(warps);
    case 64: return V7Config<64>::smem_bytes(warps);
    case 80: return V7Config<80>::smem_bytes(warps);
    case 96: return V7Config<96>::smem_bytes(warps);
    case 128: return V7Config<128>::smem_bytes(warps);
    case 160: return V7Config<160>::smem_bytes(warps);
    case 192: return V7Config<192>::smem_bytes(warps);
    default: return V7Config<256>::smem_bytes(warps);
    }
}

/* The calling thread's device: its multiprocessors, shared memory per multiprocessor and per CTA
 * (opt-in), asked once per device (no stream work: a graph capture may be under way). */
struct V7Device {
    int sms, smem_per_sm, smem_per_block;
};
V7Device v7_device(void) {
    static std::atomic<int> asked[64];
    static V7Device cache[64]; /* written before asked[dev] is set; the same values from every thread */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        dev = -1;
    }
    if (dev >= 0 && dev < 64 && asked[dev].load(std::memory_order_acquire)) return cache[dev];
    V7Device d = {0, 0, 0};
    if (dev < 0 || cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return V7Device{1, 99 * 1024, 99 * 1024}; /* the smallest shape runs anywhere */
    }
    if (dev < 64) {
        cache[dev] = d;
        asked[dev].store(1, std::memory_order_release);
    }
    return d;
}

/* Rows a multiprocessor computes per unit time with c CTAs of w warps, relative to one CTA of 8:
 * measured on the H200 (bench/results/h200-2026-12-04-v7-call2: each w forced at nine shapes by a
 * compile-time knob, JATTN_V7_FORCE_WARPS, which left with issue 38):
 * (6, 1) 0.78, (4, 2) 0.885, (4, 1) 0.65 (fewer resident warps hide less of the latency). */
double v7_rate(int w, int c) {
    if (w == 8) return 1.0;
    if (w == 6) return 0.78;
    if (w * c >= 8) return 0.885;
    return 0.65 * (w * c) / 4.0; /* below 4 resident warps (99 KB devices at DT >= 128): as 4, per warp */
}

/* Warps per CTA (1 to 8, 16 queries each): the count whose grid finishes first by a model of whole
 * rounds of CTAs over the multiprocessors, among those whose shared memory (smem_bytes(w)) the device
 * gives a CTA (99 KB on sm_86, sm_89, sm_120: DT 128 then takes at most 2 warps). A CTA of w warps
 * takes up to 255 registers a thread (one CTA of more than 4 warps per multiprocessor); a round runs
 * c CTAs on every multiprocessor, each at v7_rate(w, c) of one 8-warp CTA's query rate. At
 * (1,24,1536,128) 8-warp CTAs make 288 CTAs, 2.2 rounds of 132 on the H200, the third a fifth full;
 * 6-warp CTAs make 384, 2.9 rounds. */
int v7_warps(int64_t seq_q, int64_t heads_total, int dt, int extra_smem) {
    const V7Device d = v7_device();
    int best = 0;
    double best_time = 0;
    static const int kWarps[5] = {8, 6, 4, 2, 1};
    for (int i = 0; i < 5; ++i) {
        const int w = kWarps[i];
        const int smem = v7_smem_bytes(dt, w) + extra_smem;
        if (smem > d.smem_per_block) continue;
        int per_sm = d.smem_per_sm / (smem + 1024); /* 1 KB a CTA for the system */
        per_sm = per_sm < 1 ? 1 : per_sm > kV7MaxWarps / w ? kV7MaxWarps / w : per_sm;
        const int64_t ctas = (seq_q + 16 * w - 1) / (16 * w) * heads_total;
        const int64_t rounds = (ctas + (int64_t)d.sms * per_sm - 1) / ((int64_t)d.sms * per_sm);
        const double time = (double)rounds * 16 * w * per_sm / v7_rate(w, per_sm);
        if (best == 0 || time < best_time) best = w, best_time = time;
    }
    return best ? best : 1; /* 1 fits 99 KB at every DT (V7Config's assertion) */
}

} /* namespace */

extern "C" cudaError_t split_kv_f16x2_v7(const jattn_cuda_args *a, void *workspace, cudaStream_t stream);

/* Kernel v7 on `stream` (cuda_internal.h's launcher shape): the pre-pass, then the attention.
 * workspace: jattn_cuda_v7_workspace_bytes() bytes, 16-byte aligned.
 * @return cudaSuccess when both kernels were enqueued; cudaErrorInvalidValue for head_dim above
 *         JATTN_CUDA_V7_MAX_HEAD_DIM, seq_q or seq_kv above JATTN_CUDA_V7_MAX_SEQ, or a NULL or
 *         misaligned workspace; otherwise the CUDA error of a launch (as int). */
extern "C" int jattn_cuda_launch_v7(const jattn_cuda_args *a, void *workspace, void *stream_ptr) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    if (a->head_dim < 1 || a->head_dim > JATTN_CUDA_V7_MAX_HEAD_DIM || a->seq_q > JATTN_CUDA_V7_MAX_SEQ ||
        a->seq_kv > JATTN_CUDA_V7_MAX_SEQ || workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
        return cudaErrorInvalidValue;
    cudaError_t err = split_kv_f16x2_v7(a, workspace, stream);
    if (err != cudaSuccess) return err;
    V7Params p;
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
    p.head_dim = (int)a->head_dim;
    p.records_per_head = (int)((a->seq_kv + kV7RecordKeys - 1) / kV7RecordKeys);
    /* the instance: a window (causal, blocks, segments) and a key bias each need their own */
    const int mode = a->key_bias ? 2 : kw_has_window(*a) ? 1 : 0;
    const int dt = v7_head_dim_tile(a->head_dim);
    const int warps = v7_warps(a->seq_q, a->batch * a->heads, dt, mode >= 1 ? kV7MaskSmem : 0);
    p.q_blocks = (int)((a->seq_q + 16 * warps - 1) / (16 * warps));
    p.scale = a->scale;
    p.out_vec2 = reinterpret_cast<uintptr_t>(a->out) % 8 == 0 && a->out_strides.batch % 2 == 0 &&
                 a->out_strides.head % 2 == 0 && a->out_strides.token % 2 == 0;
    const int64_t kv_heads = a->kv_heads > 0 ? a->kv_heads : a->heads;
    p.group = (int)(a->heads / kv_heads);
    p.kv_index = a->kv_index;
    p.v = a->v;
    p.v_b = a->v_strides.batch;
    p.v_h = a->v_strides.head;
    p.v_t = a->v_strides.token;
    p.bias_ws = reinterpret_cast<const float *>(static_cast<const unsigned char *>(workspace) +
                                                v7_bias_offset(a->batch, kv_heads, p.records_per_head, dt));
    p.a = kw_mask_of(*a);
    const long long blocks = (long long)p.q_blocks * a->batch * a->heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
    const bool f32 = a->precision == JATTN_PRECISION_F32;
    if (mode == 2) return v7_launch_mode<2>(p, warps, (unsigned)blocks, f32, stream);
    if (mode == 1) return v7_launch_mode<1>(p, warps, (unsigned)blocks, f32, stream);
    return v7_launch_mode<0>(p, warps, (unsigned)blocks, f32, stream);
}
