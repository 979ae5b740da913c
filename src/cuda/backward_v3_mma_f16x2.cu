/* backward v3 (launcher jattn_cuda_launch_bwd_v3, reported as cuda_bwd_v3_mma_f16x2): the exact-f32
 * attention backward (dq, dk, dv) on mma.sync.m16n8k16 fp16 with fp32 accumulation (sm_80 and newer),
 * every operand split into two scaled fp16 parts (2xFP16, f16x2_split.cuh; three for S and dP at
 * head_dim <= 16) and every product on three fp16 products (hi*hi + hi*lo + lo*hi). Any head_dim 1..256,
 * any strides (head_dim contiguous), key padding, every other mask part (causal in both alignments,
 * block-causal, segments, a key bias) and grouped-query heads (below: "Masks"), dlse, f32 and tf32 precision
 * (tf32 runs the f32 arithmetic), deterministic.
 *
 * Per (b, h), c = scale, lse the forward's row log-sum-exp (natural log):
 *   Dl_i  = sum_d dO_id O_id - dlse_i                       (pre-pass, float64, kept as hi + lo)
 *   S_ij  = (c q_i) . k_j;   P_ij = exp(S_ij - lse_i)       (recomputed)
 *   dP_ij = dO_i . v_j;      dS_ij = P_ij (dP_ij - Dl_i)
 *   dV_j  = sum_i P_ij dO_i;  dK_j = sum_i dS_ij (c q_i);  dQ_i = c sum_j dS_ij k_j
 *
 * Kernels, all on the caller's stream (no atomics: every gradient element is summed by one thread in a
 * fixed order, so the results are bit-identical from run to run):
 *   bwd_v3_split (backward_v3_split_f16x2.cu): the 64-row records of backward_v3_layout.cuh: q * c, dout,
 *       k, v as fp16 hi + lo (+ tiny at Dp = 16) images [64][Dp] with one power of two per record (D
 *       padded with zero columns to Dp in {16, 32, 64, 80, 96, 128, 160, 192, 256}; k and v compacted to
 *       the attended keys), lse, Dl.
 *   bwd_v3_zero_kv (key-padded calls): +0 into every dk, dv row (the attended rows are overwritten).
 *   bwd_v3_kernel<Dp, BR, role>, grid B*H*ceil(rows / (16 W / H)) CTAs of W warps (W in {1, 2, 4, 8},
 *       chosen per device and instance for the most resident warps per SM). Role dKV: rows = keys (k, v),
 *       columns = queries (q, dout), writes dk and dv; role dQ: rows = queries (q, dout), columns =
 *       attended keys (k, v), writes dq * c. Up to Dp = 128 (H = 1) each warp owns 16 rows and all of
 *       head_dim; above (H = 2, "half" kernels, W even) warps 2i and 2i + 1 own the same 16 rows, each one
 *       half of head_dim (DW = Dp / 2): its part of the S and dP contractions, whose partial sums (big,
 *       cor) the pair exchanges through shared memory (a float4 slot per lane, two 64-thread named
 *       barriers per exchange) and adds in a fixed order (half 0 first, big by TwoSum), and its half of
 *       the gradient columns. Every warp walks every column tile of BR columns (64 to Dp 64, 32 to 160, 16
 *       above) in ascending order.
 *       Shared memory: the CTA's row images (parts of both row tensors, [H][16 W / H][DW + 8] halves each,
 *       copied once), NS = 2 stages (1 where shared memory is short) of the column tiles ([BR][Dp + 8]
 *       halves per tensor and part, with the columns' lse and Dl), filled by 16-byte cp.async one tile
 *       ahead (one __syncthreads per tile), and the half kernels' exchange slots (W NB KB). Operands reach
 *       the registers by ldmatrix (x4; .trans for the B operand of the last product), conflict-free
 *       through the padded rows. Per column tile a warp does:
 *        1. S (dQ: S = Q K^T; else S^T = K Q^T): per k16 slice of its head_dim, the corrections (hi*lo,
 *           lo*hi; at Dp = 16 also lo*lo, hi*tiny, tiny*hi) in one chain (cor); hi*hi in chains of 2
 *           slices (1 where the slice count is odd), each from a fresh accumulator, added into big in
 *           fp32 (kernel v7's form with shorter chains: the tensor core truncates its fp32
 *           accumulation, so a long chain drifts low); half kernels: the pair's exchange.
 *        2. P = exp((big u - lse) + cor u), u the two records' unscales (exact): the S pair is never
 *           rounded to one float before lse is subtracted (backward v1's D = 1 `large` lesson); columns
 *           past the attended keys get P = 0 (dQ, last tile only); lse = +inf gives P = 0.
 *        2b. A query's P >= 1/2 element (its dominant key, at most one) takes the P of its score and,
 *           after step 4, the dS = P (dP - Dl) of its dP, both recomputed in float64 from the caller's
 *           q, k, dout, v (the truncated hi*hi chains leave that S and dP a little low; its weight
 *           carries S's error into every gradient, and dP - Dl cancels where |v| is large;
 *           src/cuda/NOTES.md, "The backward's accuracy"): dQ finds it (a warp-wide vote per tile,
 *           rare), leaves (P, dP - Dl, key) per query row in the workspace, and dK/dV takes them for
 *           the same element.
 *        3. dV: P^T scaled per row (key) by the power of two of its largest |P| in the tile (two quad
 *           shuffles), split from the registers into A fragments (an m16n8 accumulator pair is an m16k16
 *           A fragment), times dO (B by ldmatrix.trans) on three products into a FRESH accumulator per
 *           8 output columns, added into dv in fp32 (times 2^-e_row u_dO).
 *        4. dP (dP^T) the same way as S, dS = P ((dP_big u - Dl_hi) + dP_cor u - Dl_lo).
 *        5. dK += dS^T (c Q), dQ += dS K: as 3.
 *       A batch with a single attended key (P = 1, dS = dlse exactly: the output is that key's v row) is
 *       computed so, not through the split dP - Dl, whose residue the gate does not allow.
 * Accumulator layout (PTX ISA, mma.m16n8k16 f32): c0, c1 = (g, 2t), (g, 2t + 1); c2, c3 = (g + 8, ...),
 * g = lane / 4, t = lane % 4; A a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..);
 * B b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g).
 * Written: dq (times c), dk, dv [B, H, S, D] through their strides (4-byte stores), rows past the
 * sequence and columns past D never; masked keys' dk, dv rows +0. Workspace: the records (about 2 B (H Sq +
 * Hkv Skv) Dp x 4 bytes, as the backward v4's; x1.5 at Dp = 16) plus lse, Dl and the dominant (P, dP - Dl,
 * key) (28 bytes per query row) and the mask's regions (backward_v3_layout.cuh: 9 bytes per query row of a
 * batch, 4 per key of a query head).
 * Not handled (as v1, v2): non-finite inputs; values below about 2^-129 of their record lose bits (the
 * record's power of two is clamped at 2^126); an element more than 2^17 below its record's largest
 * keeps an absolute error under 2^-39 of that largest (every 2xFP16 split).
 *
 * The dQ kernel runs first (the dK/dV kernel reads its rows' dominant weights). On 9.0 and newer devices
 * the dK/dV kernel is launched with programmatic stream serialization: its CTAs start while the dQ kernel's
 * last wave runs, wait for that grid where a tile first holds a P >= 1/2 element (griddepcontrol.wait),
 * and before they end (as the removed backward v2's dK waited for its dQ).
 * Registers (ptxas 13.0, sm_90a): dQ 130-254, dK/dV 196-255; local memory only outside the tile loops
 * (dK/dV at Dp 128: one loop-invariant word, 8 bytes of stack; sm_80 16 bytes). SASS per warp and column tile
 * (the tile loop with its inner loops, sm_90a), chains of 4 / 2 / Kahan: Dp 128 dK/dV 2250 / ~2330 /
 * 3530 instructions (384 HMMA, 160 LDSM), dQ 1640 / ~1700 / 2906 (288, 128); the first form 3690 and
 * 3101; Dp 256 (half, 16 x 16 columns) 1843 and 1388 with chains of 4.
 * The index arithmetic is checked by a numpy emulation of the records, copies, ldmatrix addresses, mma
 * fragments and the pair exchange (lab/gpu/emulate_backward_v3.py).
 *
 * Masks (issue 35): a call with a window part (segments, causal, blocks), a key bias or grouped-query heads
 * runs instances of its own (bwd_v3_kernel<..., true>, bwd_v3_split<true>) beside the unmasked ones, whose
 * code is as it was (their PTX unchanged, entry by entry). k and v, and their records, are per key/value
 * head, read in place by the group's query heads: the dQ grid runs over query heads, each reading the
 * key/value head h / group; the dK/dV grid over key/value heads, each CTA walking the column tiles of every
 * query head of its group in turn (heads ascending, then tiles) into the same dK and dV accumulators: no
 * atomics, one order every run. The pre-pass writes each query row's window of keys (key_window.cuh:
 * src/mask.c's definition), their summaries per 16 rows and the attended keys' bias; its records take
 * non-finite values as 0, so that a masked pair (P = dS = 0) multiplies no Inf or NaN (a non-finite input
 * still reaches the rows attending it, through the out and lse its forward gave them), and leave out of k and
 * v the keys no query row of the group attends (as the padding's: whatever they hold sets no record's scale).
 * The walk (backward_v3_mask.cuh): a dQ CTA loads only the key tiles inside the hull of its rows' windows; a
 * dK/dV CTA only the query tiles from the first row whose window ends past its first key to the last whose
 * window starts at or before its last (windows never move back: binary searches); per warp and tile, a tile
 * no window of the warp's rows meets is skipped, one every window holds runs as unmasked, the rest (with a
 * key bias every tile) takes P per element: 0 outside the windows or where the bias is -inf (a select,
 * whatever S holds), the bias added by TwoSum (big u + bias and its error joining cor u: the score is never
 * rounded before lse is subtracted), and dS 0 where P was (whatever dP - Dl holds). The dominant element's
 * exact weight adds the bias in float64. Causal at Sq = Skv walks 0.50-0.54 of the unmasked tiles
 * (lab/gpu/emulate_backward_v3_masks.cc, which replays every walk against src/mask.c). At Dp = 64 the masked
 * kernels take column tiles of 32 (64 spilled); causal and block-causal dQ grids start with their longest row
 * blocks; a masked grid of fewer CTAs than the device has SMs takes smaller CTAs. Registers of the masked
 * instances (ptxas 13.0): sm_80 no local memory in any; sm_90a none but dK/dV at Dp 128 (8 bytes of stack, 8
 * / 12 bytes spilled) and 256 (4 / 4): one word stored before the tile loop, reloaded outside it.
 * Measured: src/cuda/NOTES.md ("v3"); the first form (Kahan per slice, dK and dV apart above Dp 128) in
 * bench/results/h200-2026-12-04-v7-call1. */
#include <math.h>
#include <stdint.h>

#include <atomic>
#include <type_traits>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backward_v3_layout.cuh"
#include "backward_v3_mask.cuh"
#include "cuda_internal.h"
#include "griddep_ptx.cuh"
#include "mma_f16_ptx.cuh"
#include "f16x2_split.cuh"
#include "key_padding.cuh"
#include "key_window.cuh"

namespace {

enum BwdV3Role { kRoleKV = 0, kRoleQ = 1 };

constexpr int kMaxWarps = 8;

/* The hi*hi chain length of S and dP in k16 slices: kChain (2, 32 head_dim columns) where it divides the
 * slice count, else 1 (a fresh accumulator per slice). With the tensor core's truncation modelled
 * (lab/gpu/emulate_backward_v3_chains.py, D = 128 peaky), chains of 2 stayed within the per-slice Kahan
 * form's rel_l2 (3.8 against 4.2e-6) where chains of 4 (kernel v7's) reached 5.5-5.9e-6; the Kahan form
 * (the first measurement's) and the chain length were compile-time A/B knobs until issue 38
 * (src/cuda/JOURNAL.md). */
constexpr int kChain = 2;
__host__ __device__ constexpr int chain_slices(int sl) { return sl % kChain == 0 ? kChain : 1; }

/* The column tile of the half kernels (Dp 192 and 256): at 32 they do not fit 8 warps. */
constexpr int kHalfColumnTile = 16;

/* The column tile per padded head dim (registers: the dK and dV accumulators hold DW floats per thread
 * together, S and dP 3 BR / 2 each; shared memory above 128: the half-width row images of 64 rows). */
__host__ __device__ constexpr int column_tile(int dp) { return dp <= 64 ? 64 : dp <= 160 ? 32 : kHalfColumnTile; }
/* A masked kernel's: at Dp = 64 tiles of 32 columns (64 left no register for the mask's per-element work: the
 * dQ and dK/dV kernels spilled 20-40 bytes, ptxas 13.0), and finer tiles along a causal diagonal. */
__host__ __device__ constexpr int column_tile_masked(int dp) { return dp == 64 ? 32 : column_tile(dp); }

/* DP: padded head dim; BR: columns per tile; ROLE: kRoleKV (rows keys, dK and dV) or kRoleQ (rows queries,
 * dQ). Above Dp = 128 a kernel is "half": warps 2i and 2i + 1 own the same 16 rows, each half of head_dim
 * (DW = Dp / 2) for both the contraction of S and dP (partial sums exchanged through shared memory) and
 * its gradients' columns. */
template <int DP, int BR, int ROLE, bool MASK = false>
struct V3Cfg {
    static constexpr bool kHalf = DP > 128;
    static constexpr int H = kHalf ? 2 : 1; /* warps per 16 rows */
    static constexpr int DW = DP / H;       /* head_dim columns of a warp */
    static constexpr int NB = BR / 8;       /* n8 blocks of a column tile */
    static constexpr int RS = DP + 8;       /* halves per shared column row */
    static constexpr int RSW = DW + 8;      /* halves per shared row-image row */
    static constexpr int kParts = bwd_v3_parts(DP);
    static constexpr bool kDQ = ROLE == kRoleQ;
    static constexpr bool kColData = !kDQ; /* lse and Dl of the columns in the stage */
    static constexpr int kColImages = 2 * kParts * BR * RS * 2;
    /* a masked kernel's data per column tile: dQ the keys' bias and positions (BR floats, BR ints); dK/dV the
     * queries' windows (BR int2) and their summaries (BR / 16 int4) */
    static constexpr int kMaskData = kColImages + (kColData ? BR * 12 : 0);
    static constexpr int kMaskBytes = !MASK ? 0 : kDQ ? BR * 8 : BR * 8 + BR;
    static constexpr int kStageBytes = kColImages + (kColData ? BR * 12 : 0) + kMaskBytes;
    static constexpr int kXchgWarpBytes = kHalf ? NB * 2 * 32 * 16 : 0; /* a warp's S or dP partial sums */
    __host__ __device__ static constexpr int row_bytes(int warps) { return 2 * kParts * 16 * warps * RSW * 2; }
    __host__ __device__ static constexpr int smem_bytes(int warps, int stages) {
        return row_bytes(warps) + stages * kStageBytes + warps * kXchgWarpBytes;
    }
    static_assert(DP % 16 == 0 && DW % 16 == 0 && BR % 16 == 0 && kV3Rec % BR == 0, "tiles");
    static_assert((RS / 8) % 2 == 1 && (RSW / 8) % 2 == 1, "conflict-free ldmatrix rows");
};

struct BwdV3Params {
    const unsigned char *img[4]; /* records of q, dout, k, v */
    const float *unscale[4];
    const float *lse;  /* [B*H][Tq*64] */
    const float2 *dl;  /* [B*H][Tq*64] */
    const float *dlse; /* [B*H][Sq] or NULL (the single-key batches read it) */
    float4 *top; /* [B*H][Tq*64]: (P, dP - Dl, key, 0) of each query row's dominant key (dQ writes, dK/dV reads) */
    const float *q, *k, *dout, *v; /* the caller's (the dominant key's score and dP, dQ) */
    int64_t q_b, q_h, q_t, k_b, k_h, k_t, do_b, do_h, do_t, v_b, v_h, v_t;
    float *dq, *dk, *dv;
    int64_t dq_b, dq_h, dq_t, dk_b, dk_h, dk_t, dv_b, dv_h, dv_t;
    const int *kv_count, *kv_index;
    int heads, seq_q, seq_kv, d, tq, tk;
    int warps, stages, row_blocks;
    uint32_t zero; /* 0, unknown to the compiler (last_product) */
    float scale;
};

/* A masked call's (a window part, a key bias or grouped-query heads): the kernels' rows and columns of k and v
 * are those of key/value head h / group, the dK/dV grid runs over key/value heads and walks each key tile
 * over the query heads of its group; the windows and the bias from the pre-pass (backward_v3_layout.cuh). */
struct BwdV3MaskParams : BwdV3Params {
    const int2 *win;   /* [B][Tq * 64] the query rows' windows, or NULL (no window part) */
    const int4 *wsum;  /* [B][Tq * 4] their summaries per 16 rows */
    const float *bias; /* [B*H][Tk * 64] the attended keys' bias, or NULL */
    int kv_heads, group;
    int reverse; /* dQ: the row blocks last to first (causal: the longest first) */
};

template <bool MASK>
struct V3ParamsOf {
    using type = BwdV3Params;
};
template <>
struct V3ParamsOf<true> {
    using type = BwdV3MaskParams;
};

/* ---- PTX (mma_f16_ptx.cuh, griddep_ptx.cuh) ---- */
/* A barrier of the two warps of pair `pair` (ids 1..4; 0 is __syncthreads'). */
__device__ __forceinline__ void pair_barrier(int pair) { asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory"); }

/* ---- the pieces of a column tile ---- */

/* C = A B^T over SL k16 slices: A the warp's 16 rows of a row image (hi at a_hi, lo at a_hi + a_part bytes,
 * tiny at a_hi + 2 a_part when PARTS = 3), B the NB*8 rows of a column image (b_hi, b_hi + b_part, ...;
 * BRS halves per row). a_hi / b_hi: this lane's ldmatrix byte addresses for slice 0. big + cor = the
 * products of the parts down to 2^-22 (PARTS 2: hi*hi + hi*lo + lo*hi; PARTS 3 also lo*lo + hi*tiny +
 * tiny*hi, down to 2^-33): the corrections in one chain (cor); hi*hi in chains of chain_slices(SL) slices,
 * each from a fresh accumulator, added into big in fp32 (kernel v7's S: the tensor core's truncating
 * accumulation grows with a chain). The slice loop is not unrolled across chains: unrolled, ptxas hoisted
 * the fragment loads of later slices and spilled. */
template <int SL, int NB, int BRS, int PARTS>
__device__ __forceinline__ void exact_product(float (&big)[NB][4], float (&cor)[NB][4], uint32_t a_hi, uint32_t a_part,
                                              uint32_t b_hi, uint32_t b_part) {
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) big[n][i] = cor[n][i] = 0.f;
    constexpr int CL = chain_slices(SL);
#pragma unroll 1
    for (int c = 0; c < SL / CL; ++c) {
        float sh[NB][4];
#pragma unroll
        for (int j = 0; j < CL; ++j) {
            const uint32_t so = (uint32_t)(c * CL + j) * 32;
            uint32_t ah[4], al[4], at[4];
            ldmatrix_x4(ah, a_hi + so);
            ldmatrix_x4(al, a_hi + a_part + so);
            if (PARTS == 3) ldmatrix_x4(at, a_hi + 2 * a_part + so);
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                uint32_t bh[4], bl[4], bt[4];
                const uint32_t off = np * 16 * BRS * 2 + so;
                ldmatrix_x4(bh, b_hi + off);
                ldmatrix_x4(bl, b_hi + b_part + off);
                if (PARTS == 3) ldmatrix_x4(bt, b_hi + 2 * b_part + off);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = 2 * np + e;
                    mma_f16(cor[n], ah, bl[2 * e], bl[2 * e + 1]);
                    mma_f16(cor[n], al, bh[2 * e], bh[2 * e + 1]);
                    if (PARTS == 3) {
                        mma_f16(cor[n], al, bl[2 * e], bl[2 * e + 1]);
                        mma_f16(cor[n], ah, bt[2 * e], bt[2 * e + 1]);
                        mma_f16(cor[n], at, bh[2 * e], bh[2 * e + 1]);
                    }
                    if (j == 0)
                        mma_f16_zero(sh[n], ah, bh[2 * e], bh[2 * e + 1]);
                    else
                        mma_f16(sh[n], ah, bh[2 * e], bh[2 * e + 1]);
                }
            }
        }
#pragma unroll
        for (int n = 0; n < NB; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) big[n][i] += sh[n][i];
    }
}

/* Half kernels: the pair's two partial sums (big, cor) of S or dP, each over half of head_dim, exchanged
 * through shared memory (mine: this warp's slot, theirs: the other's; NB * 2 float4 per lane) and added in
 * a fixed order (half 0's first, so both warps get the same bits): big by TwoSum, its error into cor. The
 * first barrier keeps a slot from being written before the other warp has read it (it read it before this
 * point in the tile's order), the second publishes it. */
template <int NB>
__device__ __forceinline__ void exchange_pair(float (&big)[NB][4], float (&cor)[NB][4], float4 *mine,
                                              const float4 *theirs, int half, int pair, int lane) {
    pair_barrier(pair);
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r)
            mine[(2 * n + r) * 32 + lane] =
                make_float4(big[n][2 * r], cor[n][2 * r], big[n][2 * r + 1], cor[n][2 * r + 1]);
    pair_barrier(pair);
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float4 o = theirs[(2 * n + r) * 32 + lane];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float ob = e ? o.z : o.x, oc = e ? o.w : o.y;
                const float mb = big[n][2 * r + e], mc = cor[n][2 * r + e];
                const float a = half ? ob : mb, b = half ? mb : ob; /* half 0's sum first */
                const float ca = half ? oc : mc, cb = half ? mc : oc;
                const float s = a + b, bb = s - a;
                const float err = (a - (s - bb)) + (b - bb);
                big[n][2 * r + e] = s;
                cor[n][2 * r + e] = (ca + cb) + err;
            }
        }
}

/* X (accumulator layout, NB n8 blocks: rows g and g + 8) scaled per row by the power of two that puts its
 * largest finite |X| in [2^14, 2^15), split into the hi and lo A fragments of the NB / 2 k16 slices;
 * down[r] = the inverse power of two of row g + 8 r. */
template <int NB>
__device__ __forceinline__ void split_rows(const float (&x)[NB][4], uint32_t (&xh)[NB / 2][4],
                                           uint32_t (&xl)[NB / 2][4], float (&down)[2]) {
    float up[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float m = 0.f;
#pragma unroll
        for (int n = 0; n < NB; ++n) m = fmaxf(m, fmaxf(finite_abs(x[n][2 * r]), finite_abs(x[n][2 * r + 1])));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const int ex = f16x2_exponent(m, kV3Target);
        up[r] = exp2_int(ex);
        down[r] = exp2_int(-ex);
    }
#pragma unroll
    for (int kk = 0; kk < NB / 2; ++kk) {
        f16x2_split2(x[2 * kk][0] * up[0], x[2 * kk][1] * up[0], xh[kk][0], xl[kk][0]);
        f16x2_split2(x[2 * kk][2] * up[1], x[2 * kk][3] * up[1], xh[kk][1], xl[kk][1]);
        f16x2_split2(x[2 * kk + 1][0] * up[0], x[2 * kk + 1][1] * up[0], xh[kk][2], xl[kk][2]);
        f16x2_split2(x[2 * kk + 1][2] * up[1], x[2 * kk + 1][3] * up[1], xh[kk][3], xl[kk][3]);
    }
}

/* acc += (X B) f: X the A fragments of split_rows (16 rows x NB*8 contraction), B the column image
 * (contraction rows x DW output columns, BRS halves per row; hi at b_hi, lo at b_hi + b_part, this lane's
 * ldmatrix.trans address included); for each 16 output columns the three products (lo*hi, hi*lo, hi*hi)
 * go to fresh accumulators, added into acc in fp32 times f[row]. The B address of columns 16 np depends on
 * the results of columns 16 (np - 2) (zero: 0 at run time): ptxas otherwise hoisted the fragment loads of
 * later columns and spilled the accumulators. */
template <int DW, int NB, int BRS>
__device__ __forceinline__ void last_product(float (&acc)[DW / 8][4], const uint32_t (&xh)[NB / 2][4],
                                             const uint32_t (&xl)[NB / 2][4], uint32_t b_hi, uint32_t b_part,
                                             const float (&f)[2], uint32_t zero) {
    uint32_t dep1 = 0, dep2 = 0;
#pragma unroll
    for (int np = 0; np < DW / 16; ++np) {
        float c0[4], c1[4];
        b_hi += dep2;
#pragma unroll
        for (int kk = 0; kk < NB / 2; ++kk) {
            uint32_t bh[4], bl[4];
            const uint32_t off = kk * 16 * BRS * 2 + np * 32;
            ldmatrix_x4_trans(bh, b_hi + off);
            ldmatrix_x4_trans(bl, b_hi + b_part + off);
            if (kk == 0) {
                mma_f16_zero(c0, xl[kk], bh[0], bh[1]);
                mma_f16_zero(c1, xl[kk], bh[2], bh[3]);
            } else {
                mma_f16(c0, xl[kk], bh[0], bh[1]);
                mma_f16(c1, xl[kk], bh[2], bh[3]);
            }
            mma_f16(c0, xh[kk], bl[0], bl[1]);
            mma_f16(c1, xh[kk], bl[2], bl[3]);
            mma_f16(c0, xh[kk], bh[0], bh[1]);
            mma_f16(c1, xh[kk], bh[2], bh[3]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[2 * np][i] = fmaf(c0[i], f[i >> 1], acc[2 * np][i]);
            acc[2 * np + 1][i] = fmaf(c1[i], f[i >> 1], acc[2 * np + 1][i]);
        }
        dep2 = dep1;
        dep1 = (__float_as_uint(c0[0]) | __float_as_uint(c1[0])) & zero;
    }
}

/* Stores a warp's 16 x DW block of acc * mul: row g + 8 r of the warp to dst_r (NULL: skipped), columns
 * 8 n + 2 t (+1) below d (d counted from the block's first column). */
template <int DW>
__device__ __forceinline__ void store_rows(const float (&acc)[DW / 8][4], float *dst0, float *dst1, int d, int t,
                                           float mul) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float *dst = r ? dst1 : dst0;
        if (!dst) continue;
#pragma unroll
        for (int n = 0; n < DW / 8; ++n) {
            const int col = 8 * n + 2 * t;
            if (col < d) dst[col] = acc[n][2 * r] * mul;
            if (col + 1 < d) dst[col + 1] = acc[n][2 * r + 1] * mul;
        }
    }
}

/* Copies rows [row0, row0 + rows) of a tensor's records (PARTS parts, Dp columns) into the CTA's shared
 * row images (part p at dst + p H rows (DW + 8) 2 bytes; within it, head_dim half hf of row r at
 * ((hf rows + r) (DW + 8)) 2 bytes; H = Dp / DW); rows past the records zero. */
template <int DP, int DW, int PARTS>
__device__ __forceinline__ void copy_rows(uint32_t dst, const unsigned char *img, int64_t bh, int tiles, int row0,
                                          int rows) {
    constexpr int CP = DP / 8, CW = DW / 8, RSW = DW + 8, H = DP / DW;
    const int n = PARTS * rows * CP;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int part = i / (rows * CP), j = i - part * rows * CP;
        const int r = j / CP, c = j - r * CP;
        const int hf = c / CW, cc = c - hf * CW;
        const int grow = row0 + r, rec = grow / kV3Rec;
        const bool valid = rec < tiles;
        const unsigned char *src =
            img + (((bh * tiles + (valid ? rec : 0)) * PARTS + part) * kV3Rec + grow % kV3Rec) * (int64_t)DP * 2 +
            c * 16;
        cp_async16_zfill(dst + (((part * H + hf) * rows + r) * RSW + cc * 8) * 2, src, valid);
    }
}

/* Copies the BR rows of column tile t (rows t BR .., all inside one record: BR divides 64) of a tensor's
 * records into shared images of BR x (Dp + 8) halves (part p at dst + p BR (Dp + 8) 2 bytes): in the
 * records those rows are contiguous per part. */
template <int DP, int BR, int PARTS>
__device__ __forceinline__ void copy_tile_rows(uint32_t dst, const unsigned char *img, int64_t bh, int tiles, int t) {
    constexpr int CP = DP / 8, RS = DP + 8, N = BR * CP;
    const int64_t part_bytes = (int64_t)kV3Rec * DP * 2;
    const unsigned char *src = img + (bh * tiles + t * BR / kV3Rec) * PARTS * part_bytes + (t * BR % kV3Rec) * DP * 2;
    for (int i = threadIdx.x; i < PARTS * N; i += blockDim.x) {
        const int part = i / N, j = i - part * N, r = j / CP, c = j - r * CP;
        cp_async16_zfill(dst + ((part * BR + r) * RS + c * 8) * 2, src + part * part_bytes + j * 16, true);
    }
}

/* ---- a query row's dominant weight (P >= 1/2) from its exact score ----
 * The tensor core truncates its fp32 sums, so S and dP of a row's dominant key come out a little low (each
 * hi*hi chain): its weight exp(S - lse) carries S's error as a relative error of dV, dK and dQ past what a
 * float32 lse allows, and dS = P (dP - Dl) carries dP's where dP - Dl cancels (|v| large: test_backward's
 * single-query `large` cases, emulated dq 1.4e-5 -> 1.6e-6; src/cuda/NOTES.md, "The backward's
 * accuracy"). The dQ kernel, which walks whole query rows, finds each row's P >= 1/2 element (rare: a
 * warp-wide vote per tile), recomputes its score and dP in float64 from the caller's float32 q, k, dout, v
 * and leaves (P, dP - Dl, key) in the workspace; the dK/dV kernel, which sees that element as one of a key
 * row's, takes the same (dominant_from_dq). Both return a mask of the elements they replaced (bit 4 n + i),
 * whose dS they set to P (dP - Dl) after step 4 (dominant_ds). */

/* (exp(scale q . k - lse), dO . v - Dl) with the dots of the float32 rows q, k and dout, v (d columns) in
 * float64 (Dl = dl_hi + dl_lo): the four lanes of a quad (lanes 4g .. 4g + 3, t = lane % 4) take every
 * fourth column and sum; q NULL: the lane adds zeros. Every lane of the warp calls it. Not inlined: its
 * registers stay out of the tile loop. */
__device__ __noinline__ float2 exact_weight(const float *q, const float *k, const float *dout, const float *v, int d,
                                            float scale, float lse, float dl_hi, float dl_lo, int t) {
    double s = 0.0, dp = 0.0;
    if (q)
        for (int c = t; c < d; c += 4) {
            s = fma((double)__ldg(q + c), (double)__ldg(k + c), s);
            dp = fma((double)__ldg(dout + c), (double)__ldg(v + c), dp);
        }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    dp += __shfl_xor_sync(0xffffffffu, dp, 1);
    dp += __shfl_xor_sync(0xffffffffu, dp, 2);
    return make_float2(expf((float)(s * (double)scale - (double)lse)), (float)((dp - (double)dl_hi) - (double)dl_lo));
}

/* exact_weight with a key bias: exp(scale q . k + bias - lse) (the sum in float64), dO . v - Dl. */
__device__ __noinline__ float2 exact_weight_biased(const float *q, const float *k, const float *dout, const float *v,
                                                   int d, float scale, float bias, float lse, float dl_hi, float dl_lo,
                                                   int t) {
    double s = 0.0, dp = 0.0;
    if (q)
        for (int c = t; c < d; c += 4) {
            s = fma((double)__ldg(q + c), (double)__ldg(k + c), s);
            dp = fma((double)__ldg(dout + c), (double)__ldg(v + c), dp);
        }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    dp += __shfl_xor_sync(0xffffffffu, dp, 1);
    dp += __shfl_xor_sync(0xffffffffu, dp, 2);
    return make_float2(expf((float)((s * (double)scale + (double)bias) - (double)lse)),
                       (float)((dp - (double)dl_hi) - (double)dl_lo));
}

/* dQ: the P >= 1/2 element of rows row0 and row0 + 8 (at most one each) in a column tile of P (x, NB n8
 * blocks, keys key0 ..) takes its exact P; top_p, top_d, top_key keep (P, dP - Dl, key) for the row. hk: the
 * key/value head of k and v; MASK: bias_s the tile's key bias (NULL: none). */
template <int NB, bool MASK = false>
__device__ __forceinline__ uint32_t dominant_in_dq(float (&x)[NB][4], float (&top_p)[2], float (&top_d)[2],
                                                   int (&top_key)[2], const BwdV3Params &p, int b, int h, int hk,
                                                   int row0, const int *kv_rows, int key0, const float (&lse)[2],
                                                   const float (&dl_hi)[2], const float (&dl_lo)[2], int t,
                                                   const float *bias_s = nullptr) {
    static_assert(NB * 4 <= 32, "a bit per element");
    float pm = 0.f;
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) pm = fmaxf(pm, x[n][i]);
    if (!__any_sync(0xffffffffu, pm >= 0.5f)) return 0u;
    uint32_t mask = 0u;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        int col = -1;
#pragma unroll
        for (int n = 0; n < NB; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                if (x[n][2 * r + e] >= 0.5f) col = 8 * n + 2 * t + e;
        col = max(col, __shfl_xor_sync(0xffffffffu, col, 1));
        col = max(col, __shfl_xor_sync(0xffffffffu, col, 2));
        const int row = row0 + 8 * r;
        const bool have = col >= 0 && row < p.seq_q;
        const int64_t kj = have ? key_row(kv_rows, key0 + col) : 0;
        const float *qr = have ? p.q + b * p.q_b + h * p.q_h + (int64_t)row * p.q_t : nullptr;
        const float *kr = p.k + b * p.k_b + hk * p.k_h + kj * p.k_t;
        const float *dr = p.dout + b * p.do_b + h * p.do_h + (int64_t)row * p.do_t;
        const float *vr = p.v + b * p.v_b + hk * p.v_h + kj * p.v_t;
        float2 pe;
        if constexpr (MASK)
            pe = exact_weight_biased(qr, kr, dr, vr, p.d, p.scale, bias_s && col >= 0 ? bias_s[col] : 0.f, lse[r],
                                     dl_hi[r], dl_lo[r], t);
        else
            pe = exact_weight(qr, kr, dr, vr, p.d, p.scale, lse[r], dl_hi[r], dl_lo[r], t);
        if (col < 0) continue;
        top_p[r] = pe.x, top_d[r] = pe.y, top_key[r] = key0 + col;
#pragma unroll
        for (int n = 0; n < NB; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                if (8 * n + 2 * t + e == col) x[n][2 * r + e] = pe.x, mask |= 1u << (4 * n + 2 * r + e);
    }
    return mask;
}

/* dK/dV: rows = keys key_a, key_a + 8 (attended indices), columns = queries q0 + 8 n + 2 t + e of a tile of
 * P^T (x). An element with P >= 1/2 whose query's dominant key (the dQ kernel's) is its row takes that P.
 * Where a warp meets one it waits for the dQ grid first (griddepcontrol.wait: its completion and memory; it
 * returns at once once that grid is done). */
template <int NB>
__device__ __forceinline__ uint32_t dominant_from_dq(float (&x)[NB][4], const BwdV3Params &p, int64_t bh, int key_a,
                                                     int q0, int t) {
    static_assert(NB * 4 <= 32, "a bit per element");
    float pm = 0.f;
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) pm = fmaxf(pm, x[n][i]);
    if (!__any_sync(0xffffffffu, pm >= 0.5f)) return 0u;
    grid_dependency_wait();
    const float4 *top = p.top + bh * p.tq * kV3Rec;
    uint32_t mask = 0u;
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (x[n][i] >= 0.5f) { /* P >= 1/2: the query is below seq_q (past it lse = +inf, P = 0) */
                const float4 tp = top[q0 + 8 * n + 2 * t + (i & 1)];
                if (__float_as_int(tp.z) == key_a + 8 * (i >> 1)) x[n][i] = tp.x, mask |= 1u << (4 * n + i);
            }
    return mask;
}

/* After step 4: the elements a dominant_* call replaced (mask) get dS = P (dP - Dl) from the exact pair
 * (dQ: top_p, top_d of the element's row; dK/dV: the workspace's, read again: rare). */
template <int NB, bool kDQ>
__device__ __forceinline__ void dominant_ds(float (&x)[NB][4], uint32_t mask, const float (&top_p)[2],
                                            const float (&top_d)[2], const BwdV3Params &p, int64_t bh, int q0, int t) {
    if (!mask) return;
#pragma unroll
    for (int n = 0; n < NB; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (mask >> (4 * n + i) & 1u) {
                if (kDQ) {
                    x[n][i] = top_p[i >> 1] * top_d[i >> 1];
                } else {
                    const float4 tp = p.top[bh * p.tq * kV3Rec + q0 + 8 * n + 2 * t + (i & 1)];
                    x[n][i] = tp.x * tp.y;
                }
            }
}

/* +0 into every element of dk and dv (key-padded calls): grid-stride over B*H*Skv rows x D. */
__global__ void __launch_bounds__(256) bwd_v3_zero_kv(const BwdV3Params p) {
    const int64_t n = (int64_t)p.row_blocks * p.seq_kv * p.d; /* row_blocks: B*H here */
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(e % p.d);
        const int64_t r = e / p.d;
        const int j = (int)(r % p.seq_kv);
        const int64_t bh = r / p.seq_kv;
        const int b = (int)(bh / p.heads), h = (int)(bh % p.heads);
        p.dk[b * p.dk_b + h * p.dk_h + (int64_t)j * p.dk_t + c] = 0.0f;
        p.dv[b * p.dv_b + h * p.dv_h + (int64_t)j * p.dv_t + c] = 0.0f;
    }
}

/* cp.async of 4 bytes (a masked dQ tile's key positions: kv_index rows have no 16-byte alignment). */
__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}

/* The kernel of a role (kRoleQ: dQ, kRoleKV: dK and dV) at a padded head dim and column tile. MASK: a masked
 * call (BwdV3MaskParams): k and v of key/value head h / group; the dK/dV grid over key/value heads, each key
 * tile walking the column tiles of every query head of its group in turn (heads ascending, then tiles) into
 * the same accumulators; with a window part only the column tiles the CTA's rows reach (dQ: the keys inside
 * the hull of its rows' windows; dK/dV: the queries whose windows meet its keys), and per warp and tile
 * (backward_v3_mask.cuh) a tile no window of the warp's rows meets is skipped, one every window holds runs as
 * unmasked, the rest (and every tile with a key bias) takes P and dS per element: 0 outside the windows and
 * where the bias is -inf, the bias added to the score by TwoSum (S = big u + bias + cor u, the pair never
 * rounded before lse is subtracted). */
template <int DP, int BR, int ROLE, bool MASK>
__global__ void __launch_bounds__(kMaxWarps * 32) bwd_v3_kernel(const typename V3ParamsOf<MASK>::type p) {
    using C = V3Cfg<DP, BR, ROLE, MASK>;
    constexpr int NB = C::NB, RS = C::RS, RSW = C::RSW, DW = C::DW, H = C::H, PARTS = C::kParts;
    extern __shared__ __align__(16) unsigned char smem[];
    const int warps = p.warps, rows = 16 * warps / H;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int pair = warp / H, half = warp % H;   /* the warp's 16 rows (16 pair ..) and head_dim half */
    const int64_t bh = blockIdx.x / p.row_blocks; /* the rows' head (MASK dK/dV: a key/value head) */
    int rb = (int)(blockIdx.x % p.row_blocks);
    if constexpr (MASK && C::kDQ)
        if (p.reverse) rb = p.row_blocks - 1 - rb;
    const int r0 = rb * rows;
    int row_heads = p.heads;
    if constexpr (MASK && !C::kDQ) row_heads = p.kv_heads;
    const int b = (int)(bh / row_heads), h = (int)(bh % row_heads);
    /* the key/value head of k and v, and the columns' head (dK/dV: the group's first query head) */
    int hk = h;
    int64_t bh_col = bh;
    if constexpr (MASK) {
        if constexpr (C::kDQ) {
            hk = h / p.group;
            bh_col = (int64_t)b * p.kv_heads + hk;
        } else {
            bh_col = (int64_t)b * p.heads + (int64_t)h * p.group;
        }
    }
    const int n_kv = attended_keys(p.kv_count, b, p.seq_kv);
    const int *kv_rows = attended_rows(p.kv_index, b, p.seq_kv);
    const int n_rows = C::kDQ ? p.seq_q : n_kv, n_cols = C::kDQ ? n_kv : p.seq_q;
    /* dQ: the dK/dV kernel may start as this one's last CTAs run (it waits for this grid before it reads the
     * rows' dominant weights, and before it ends, so that its completion implies both) */
    launch_dependents();
    if (r0 >= n_rows) { /* keys past the attended ones (their dk, dv rows were zeroed) */
        grid_dependency_wait();
        return;
    }
    const bool one_key = n_kv == 1;
    /* tensors: rows (q, dout) and columns (k, v) for dQ; rows (k, v) and columns (q, dout) otherwise */
    const int rt0 = C::kDQ ? kV3Q : kV3K, rt1 = C::kDQ ? kV3DO : kV3V;
    const int ct0 = C::kDQ ? kV3K : kV3Q, ct1 = C::kDQ ? kV3V : kV3DO;
    const int row_tiles = C::kDQ ? p.tq : p.tk, col_tiles = C::kDQ ? p.tk : p.tq;

    const uint32_t smem_s = smem_addr(smem);
    const uint32_t row_s = smem_s, stage_s = smem_s + C::row_bytes(warps);
    const uint32_t row_part = (uint32_t)(16 * warps) * RSW * 2, col_part = (uint32_t)BR * RS * 2;
    const int n_tiles = (n_cols + BR - 1) / BR;
    float4 *xchg = reinterpret_cast<float4 *>(smem + C::row_bytes(warps) + p.stages * C::kStageBytes);
    float4 *x_mine = xchg + warp * (C::kXchgWarpBytes / 16);
    const float4 *x_theirs = xchg + (warp ^ 1) * (C::kXchgWarpBytes / 16);

    /* MASK: the walk, column tiles [t_lo, t_lo + nt) of n_heads heads (dK/dV: the group's query heads), and
     * what the tiles' per-warp views need: dQ the warp's rows' summary and the lane's rows' windows; dK/dV the
     * positions of the warp's first and last keys and of the lane's rows' keys */
    int t_lo = 0, nt = n_tiles, n_heads = 1;
    int4 sum_w = v3_sum_empty();
    int2 win_r[2] = {v3_int2(0, 0), v3_int2(0, 0)};
    int jmin_w = 0, jmax_w = 0;
    if constexpr (MASK) {
        const int row_w = r0 + 16 * pair + g; /* the lane's rows: row_w, row_w + 8 */
        if constexpr (C::kDQ) {
            if (p.win) {
                const int4 *sums = p.wsum + (int64_t)b * p.tq * (kV3Rec / kV3SumRows);
                int c_lo, c_hi;
                v3_dq_columns(sums, p.tq * (kV3Rec / kV3SumRows), r0, rows, kv_rows, n_kv, &c_lo, &c_hi);
                t_lo = c_lo / BR;
                nt = c_lo < c_hi ? (c_hi + BR - 1) / BR - t_lo : 0;
                const int gw = (r0 + 16 * pair) / kV3SumRows;
                if (gw < p.tq * (kV3Rec / kV3SumRows)) sum_w = sums[gw];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int row = row_w + 8 * r;
                    win_r[r] = row < p.tq * kV3Rec ? p.win[(int64_t)b * p.tq * kV3Rec + row] : v3_int2(0, 0);
                }
            }
        } else {
            n_heads = p.group;
            const int first = r0 + 16 * pair;
            if (first < n_kv) {
                jmin_w = v3_key_pos(kv_rows, first);
                jmax_w = v3_key_pos(kv_rows, min(first + 16, n_kv) - 1);
            } else { /* no key: every tile skipped */
                jmin_w = INT_MAX, jmax_w = INT_MIN;
            }
            if (p.win) {
                int i_lo, i_hi;
                v3_kv_rows(p.win + (int64_t)b * p.tq * kV3Rec, p.seq_q, v3_key_pos(kv_rows, r0),
                           v3_key_pos(kv_rows, min(r0 + rows, n_kv) - 1), &i_lo, &i_hi);
                t_lo = i_lo / BR;
                nt = i_lo < i_hi ? (i_hi + BR - 1) / BR - t_lo : 0;
            }
        }
    }
    /* iteration it: column tile t of the columns' head bhc (n_iter < 2^31: cuda_versions.c) */
    using Iter = int;
    const Iter n_iter = n_heads * nt;
    auto tile_of = [&](Iter it, int64_t &bhc, int &t) {
        if constexpr (MASK && !C::kDQ) {
            bhc = bh_col + it / nt;
            t = t_lo + it % nt;
        } else {
            bhc = bh_col;
            t = t_lo + it;
        }
    };

    /* the row images once, with the first column tile */
    copy_rows<DP, DW, PARTS>(row_s, p.img[rt0], bh, row_tiles, r0, rows);
    copy_rows<DP, DW, PARTS>(row_s + PARTS * row_part, p.img[rt1], bh, row_tiles, r0, rows);
    const float *lse_g = p.lse + bh * p.tq * kV3Rec;
    const float2 *dl_g = p.dl + bh * p.tq * kV3Rec;
    auto copy_tile = [&](Iter it, int slot) {
        int64_t bhc;
        int t;
        tile_of(it, bhc, t);
        const uint32_t st = stage_s + (uint32_t)slot * C::kStageBytes;
        copy_tile_rows<DP, BR, PARTS>(st, p.img[ct0], bhc, col_tiles, t);
        copy_tile_rows<DP, BR, PARTS>(st + PARTS * col_part, p.img[ct1], bhc, col_tiles, t);
        if (C::kColData) { /* lse (BR floats) and Dl (BR float2) of the tile's queries */
            const uint32_t ex = st + C::kColImages;
            const float *lse_c = MASK ? p.lse + bhc * p.tq * kV3Rec : lse_g;
            const float2 *dl_c = MASK ? p.dl + bhc * p.tq * kV3Rec : dl_g;
            for (int i = threadIdx.x; i < BR / 4 + BR / 2; i += blockDim.x) {
                const unsigned char *src =
                    i < BR / 4 ? reinterpret_cast<const unsigned char *>(lse_c + t * BR) + i * 16
                               : reinterpret_cast<const unsigned char *>(dl_c + t * BR) + (i - BR / 4) * 16;
                cp_async16_zfill(ex + i * 16, src, true);
            }
        }
        if constexpr (MASK) {
            const uint32_t mk = st + C::kMaskData;
            if constexpr (C::kDQ) { /* the keys' bias (of query head bh) and positions */
                if (p.bias)
                    for (int i = threadIdx.x; i < BR / 4; i += blockDim.x)
                        cp_async16(mk + i * 16, p.bias + bh * p.tk * kV3Rec + t * BR + 4 * i);
                if (p.win && kv_rows)
                    for (int i = threadIdx.x; i < BR; i += blockDim.x)
                        cp_async4(mk + BR * 4 + i * 4, kv_rows + min(t * BR + i, n_kv - 1));
            } else if (p.win) { /* the queries' windows and their summaries */
                const int64_t q0 = (int64_t)b * p.tq * kV3Rec + t * BR;
                for (int i = threadIdx.x; i < BR / 2 + BR / kV3SumRows; i += blockDim.x)
                    cp_async16(mk + i * 16, i < BR / 2
                                                ? static_cast<const void *>(p.win + q0 + 2 * i)
                                                : static_cast<const void *>(p.wsum + q0 / kV3SumRows + (i - BR / 2)));
            }
        }
    };
    if (p.stages == 2 && n_iter > 0) copy_tile(0, 0);
    cp_async_commit();

    /* this lane's ldmatrix offsets: A (non-trans, the warp's rows and half), B (non-trans, n-major rows, the
     * warp's head_dim half), B (trans, the warp's output columns) */
    const int lr = lane & 7, lm = lane >> 3;
    const uint32_t a_off = ((uint32_t)(half * rows + 16 * pair + lr + 8 * (lm & 1)) * RSW + 8 * (lm >> 1)) * 2;
    const uint32_t b_off = ((uint32_t)(lr + 8 * (lm >> 1)) * RS + 8 * (lm & 1) + half * DW) * 2;
    const uint32_t bt_off = ((uint32_t)(lr + 8 * (lm & 1)) * RS + 8 * (lm >> 1) + half * DW) * 2;

    /* the warp's row records: unscales (rows past the records: zeros, any unscale) */
    const int wrec = (r0 + 16 * pair) / kV3Rec;
    const int wrec_c = wrec < row_tiles ? wrec : row_tiles - 1;
    const float u_r0 = __ldg(p.unscale[rt0] + bh * row_tiles + wrec_c);
    const float u_r1 = __ldg(p.unscale[rt1] + bh * row_tiles + wrec_c);
    float acc0[DW / 8][4], acc1[DW / 8][4]; /* dQ: acc0; dKV: acc0 = dk, acc1 = dv */
#pragma unroll
    for (int n = 0; n < DW / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc0[n][i] = acc1[n][i] = 0.f;
    float top_p[2] = {0.f, 0.f}, top_d[2] = {0.f, 0.f}; /* dQ: the rows' dominant (P, dP - Dl, key); key -1: none */
    int top_key[2] = {-1, -1};
    const int row_w = r0 + 16 * pair + g; /* the lane's rows: row_w, row_w + 8 */

    for (Iter it = 0; it < n_iter; ++it) {
        const int slot = p.stages == 2 ? (int)(it & 1) : 0;
        if (p.stages == 1) {
            if (it > 0) __syncthreads(); /* every warp is done with the previous tile */
            copy_tile(it, 0);
            cp_async_commit();
        }
        cp_async_wait_all();
        __syncthreads(); /* tile it has landed; every warp is done with tile it - 1 */
        if (p.stages == 2 && it + 1 < n_iter) {
            copy_tile(it + 1, (int)((it + 1) & 1));
            cp_async_commit();
        }
        int64_t bhc;
        int t;
        tile_of(it, bhc, t);
        const uint32_t st = stage_s + (uint32_t)slot * C::kStageBytes;
        const uint32_t c0_s = st, c1_s = st + PARTS * col_part;
        const unsigned char *ex = smem + C::row_bytes(warps) + slot * C::kStageBytes + C::kColImages;
        const float *lse_c = reinterpret_cast<const float *>(ex);
        const float4 *dl_c = reinterpret_cast<const float4 *>(ex + BR * 4); /* (hi, lo) of columns 2j, 2j+1 */
        const int crec = t * BR / kV3Rec;
        const float u_c0 = __ldg(p.unscale[ct0] + bhc * col_tiles + crec);
        const float u_c1 = __ldg(p.unscale[ct1] + bhc * col_tiles + crec);

        /* dQ: the rows' lse and Dl, read again per tile (L1) rather than held in registers */
        float lse_r[2] = {0.f, 0.f}, dlh_r[2] = {0.f, 0.f}, dll_r[2] = {0.f, 0.f};
        if (C::kDQ) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = r0 + 16 * pair + g + 8 * r;
                const bool in = row < p.tq * kV3Rec;
                lse_r[r] = in ? __ldg(lse_g + row) : INFINITY;
                const float2 dl = in ? __ldg(dl_g + row) : make_float2(0.f, 0.f);
                dlh_r[r] = dl.x, dll_r[r] = dl.y;
            }
        }

        /* MASK: this warp's view of the tile (skipped, partial, full) and, partial or with a key bias, P and
         * dS per element: mk the tile's mask data, att the elements attended (bit 4 n + i), brow the key
         * bias of the lane's rows (dK/dV) */
        const unsigned char *mk = ex - C::kColImages + C::kMaskData;
        int cls = kV3Full;
        bool elem = false;
        const float *bias_s = nullptr; /* dQ: the tile's key bias */
        uint32_t att = 0xffffffffu;
        bool biased = false;
        if constexpr (MASK) {
            biased = p.bias != nullptr;
            if (p.win) {
                if constexpr (C::kDQ) {
                    const int last = min(BR, n_cols - t * BR) - 1;
                    const int *pos_s = reinterpret_cast<const int *>(mk + BR * 4);
                    cls = v3_classify(sum_w, kv_rows ? pos_s[0] : t * BR, kv_rows ? pos_s[last] : t * BR + last);
                } else {
                    const int4 *sums_s = reinterpret_cast<const int4 *>(mk + BR * 8);
                    int4 s = sums_s[0];
#pragma unroll
                    for (int k = 1; k < BR / kV3SumRows; ++k) s = v3_sum_merge(s, sums_s[k]);
                    cls = v3_classify(s, jmin_w, jmax_w);
                }
                if (cls == kV3Skip) continue;
            }
            elem = cls == kV3Partial || p.bias != nullptr;
            if constexpr (C::kDQ)
                if (p.bias) bias_s = reinterpret_cast<const float *>(mk);
        }

        /* ---- 1. S (S^T), 2. P ---- */
        float x[NB][4];
        {
            float big[NB][4], cor[NB][4];
            exact_product<DW / 16, NB, RS, PARTS>(big, cor, row_s + a_off, row_part, c0_s + b_off, col_part);
            if (C::kHalf) exchange_pair<NB>(big, cor, x_mine, x_theirs, half, pair, lane);
            const float us = u_r0 * u_c0;
            if (MASK && elem) {
                /* dK/dV: the lane's rows' keys, their positions and bias (of query head bhc) */
                int jrow[2] = {-1, -1};
                float brow[2] = {0.f, 0.f};
                if constexpr (MASK && !C::kDQ) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int row = row_w + 8 * r;
                        if (cls == kV3Partial && row < n_kv) jrow[r] = v3_key_pos(kv_rows, row);
                        if (biased && row < p.tk * kV3Rec) brow[r] = __ldg(p.bias + bhc * p.tk * kV3Rec + row);
                    }
                }
#pragma unroll
                for (int n = 0; n < NB; ++n) {
                    float2 lc = make_float2(0.f, 0.f);
                    if (!C::kDQ) lc = *reinterpret_cast<const float2 *>(lse_c + 8 * n + 2 * t4);
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int cc = 8 * n + 2 * t4 + e; /* the column in the tile */
                        bool in = true;
                        int jc = 0;
                        int2 wc = v3_int2(0, 0);
                        float bc = 0.f;
                        if (C::kDQ) {
                            in = t * BR + cc < n_cols;
                            if (cls == kV3Partial)
                                jc = kv_rows ? reinterpret_cast<const int *>(mk + BR * 4)[cc] : t * BR + cc;
                            if (bias_s) bc = bias_s[cc];
                        } else if (cls == kV3Partial) {
                            wc = reinterpret_cast<const int2 *>(mk)[cc];
                        }
#pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            const int i = 2 * r + e;
                            const float l = C::kDQ ? lse_r[r] : (e ? lc.y : lc.x);
                            const float bias = C::kDQ ? bc : brow[r];
                            float a = big[n][i] * us, c = cor[n][i] * us;
                            if (biased) { /* a + bias by TwoSum: its error joins cor */
                                const float s = a + bias, bb = s - a;
                                c += (a - (s - bb)) + (bias - bb);
                                a = s;
                            }
                            bool ok = in && bias != -INFINITY;
                            if (cls == kV3Partial) ok = ok && (C::kDQ ? v3_in(win_r[r], jc) : v3_in(wc, jrow[r]));
                            const float xv = one_key ? (l != INFINITY ? 1.f : 0.f) : expf((a - l) + c);
                            x[n][i] = ok ? xv : 0.f;
                            if (!ok) att &= ~(1u << (4 * n + i));
                        }
                    }
                }
            } else {
#pragma unroll
                for (int n = 0; n < NB; ++n) {
                    float2 lc = make_float2(0.f, 0.f);
                    if (!C::kDQ) lc = *reinterpret_cast<const float2 *>(lse_c + 8 * n + 2 * t4);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float l = C::kDQ ? lse_r[i >> 1] : (i & 1 ? lc.y : lc.x);
                        x[n][i] = one_key ? (l != INFINITY ? 1.f : 0.f) : expf((big[n][i] * us - l) + cor[n][i] * us);
                    }
                }
            }
            if (C::kDQ && (t + 1) * BR > n_cols) { /* the last key tile, partial: keys past the attended ones */
                const int lim = n_cols - t * BR;
#pragma unroll
                for (int n = 0; n < NB; ++n)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        if (8 * n + 2 * t4 + (i & 1) >= lim) x[n][i] = 0.f;
            }
        }
        /* ---- 2b. each query's dominant weight from its exact score (above) ---- */
        uint32_t dom = 0u; /* the elements 2b replaced (bit 4 n + i) */
        if (!one_key) {
            if constexpr (C::kDQ)
                dom = dominant_in_dq<NB, MASK>(x, top_p, top_d, top_key, p, b, h, hk, row_w, kv_rows, t * BR, lse_r,
                                               dlh_r, dll_r, t4, bias_s);
            else
                dom = dominant_from_dq<NB>(x, p, bhc, row_w, t * BR, t4);
        }
        /* ---- 3. dV += P^T dO ---- */
        if constexpr (!C::kDQ) {
            uint32_t xh[NB / 2][4], xl[NB / 2][4];
            float down[2];
            split_rows<NB>(x, xh, xl, down);
            const float f[2] = {down[0] * u_c1, down[1] * u_c1};
            last_product<DW, NB, RS>(acc1, xh, xl, c1_s + bt_off, col_part, f, p.zero);
        }
        /* ---- 4. dP (dP^T), dS ---- */
        {
            float big[NB][4], cor[NB][4];
            exact_product<DW / 16, NB, RS, PARTS>(big, cor, row_s + PARTS * row_part + a_off, row_part, c1_s + b_off,
                                                  col_part);
            if (C::kHalf) exchange_pair<NB>(big, cor, x_mine, x_theirs, half, pair, lane);
            const float ud = u_r1 * u_c1;
#pragma unroll
            for (int n = 0; n < NB; ++n) {
                float4 dc = make_float4(0.f, 0.f, 0.f, 0.f);
                if (!C::kDQ) dc = dl_c[4 * n + t4];
                float dlse_x[2] = {0.f, 0.f}; /* a single-key batch: dlse of the rows (dQ) or columns */
                if (one_key && p.dlse) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int q = C::kDQ ? r0 + 16 * pair + g + 8 * e : t * BR + 8 * n + 2 * t4 + e;
                        dlse_x[e] = q < p.seq_q ? __ldg(p.dlse + (C::kDQ ? bh : bhc) * p.seq_q + q) : 0.f;
                    }
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = i >> 1, e = i & 1;
                    const float dh = C::kDQ ? dlh_r[r] : (e ? dc.z : dc.x);
                    const float dl = C::kDQ ? dll_r[r] : (e ? dc.w : dc.y);
                    const float dlse = C::kDQ ? dlse_x[r] : dlse_x[e];
                    x[n][i] *= one_key ? dlse : ((big[n][i] * ud - dh) + cor[n][i] * ud) - dl;
                }
            }
            if (MASK && elem) /* outside the mask dS is 0, whatever dP - Dl holds (a row's Dl may be NaN) */
#pragma unroll
                for (int n = 0; n < NB; ++n)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        if (!(att >> (4 * n + i) & 1u)) x[n][i] = 0.f;
        }
        dominant_ds<NB, C::kDQ>(x, dom, top_p, top_d, p, C::kDQ ? bh : bhc, t * BR, t4); /* 2b's: exact dS */
        /* ---- 5. dK += dS^T (c Q), dQ += dS K ---- */
        {
            uint32_t xh[NB / 2][4], xl[NB / 2][4];
            float down[2];
            split_rows<NB>(x, xh, xl, down);
            const float f[2] = {down[0] * u_c0, down[1] * u_c0};
            last_product<DW, NB, RS>(acc0, xh, xl, c0_s + bt_off, col_part, f, p.zero);
        }
    }

    cp_async_wait_all(); /* a dQ CTA of a batch with no key started the row copies only */
    grid_dependency_wait();

    /* ---- stores: the warp's rows, its head_dim half ---- */
    const int row_a = r0 + 16 * pair + g, row_b = row_a + 8;
    const int col0 = half * DW, d_left = p.d - col0;
    if (C::kDQ) {
        if (half == 0 && t4 == 0) { /* the rows' dominant weights, for the dK/dV kernel */
            if (row_a < p.seq_q)
                p.top[bh * p.tq * kV3Rec + row_a] = make_float4(top_p[0], top_d[0], __int_as_float(top_key[0]), 0.f);
            if (row_b < p.seq_q)
                p.top[bh * p.tq * kV3Rec + row_b] = make_float4(top_p[1], top_d[1], __int_as_float(top_key[1]), 0.f);
        }
        float *base = p.dq + b * p.dq_b + h * p.dq_h + col0;
        store_rows<DW>(acc0, row_a < p.seq_q ? base + (int64_t)row_a * p.dq_t : nullptr,
                       row_b < p.seq_q ? base + (int64_t)row_b * p.dq_t : nullptr, d_left, t4, p.scale);
    } else {
        const int64_t ka = row_a < n_kv ? key_row(kv_rows, row_a) : -1;
        const int64_t kb = row_b < n_kv ? key_row(kv_rows, row_b) : -1;
        float *base = p.dk + b * p.dk_b + h * p.dk_h + col0;
        store_rows<DW>(acc0, ka >= 0 ? base + ka * p.dk_t : nullptr, kb >= 0 ? base + kb * p.dk_t : nullptr, d_left, t4,
                       1.f);
        base = p.dv + b * p.dv_b + h * p.dv_h + col0;
        store_rows<DW>(acc1, ka >= 0 ? base + ka * p.dv_t : nullptr, kb >= 0 ? base + kb * p.dv_t : nullptr, d_left, t4,
                       1.f);
    }
}

/* ---- launch ---- */

/* The warps per CTA (and stages) of an instance on the current device: the choice with the most resident
 * warps per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor), two stages unless even the smallest CTA
 * does not fit them, ties to the larger CTA (fewer CTAs stream the column tiles from L2); half kernels
 * take pairs of warps. Cached per device. */
template <int DP, int BR, int ROLE, bool MASK>
cudaError_t choose_shape(int *warps, int *stages) {
    using C = V3Cfg<DP, BR, ROLE, MASK>;
    static std::atomic<int> cache[64]; /* per device: 0 unknown, else 16 * warps + stages */
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    const int cached = dev < 64 ? cache[dev].load(std::memory_order_relaxed) : 0;
    if (cached) {
        *warps = cached / 16, *stages = cached % 16;
        return cudaSuccess;
    }
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return err;
    auto kernel = bwd_v3_kernel<DP, BR, ROLE, MASK>;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (err != cudaSuccess) return err;
    int best = 0, best_w = 0, best_s = 0;
    for (int s = 2; s >= 1 && !best; --s)
        for (int w = kMaxWarps; w >= C::H; w /= 2) {
            const int bytes = C::smem_bytes(w, s);
            if (bytes > optin) continue;
            int blocks = 0;
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, 32 * w, (size_t)bytes);
            if (err != cudaSuccess) return err;
            if (blocks * w > best) best = blocks * w, best_w = w, best_s = s;
        }
    if (!best) return cudaErrorInvalidConfiguration;
    *warps = best_w, *stages = best_s;
    if (dev < 64) cache[dev].store(16 * best_w + best_s, std::memory_order_relaxed);
    return cudaSuccess;
}

/* pdl_after: launched with programmatic stream serialization after the previous role's kernel (9.0 and
 * newer devices: at (1,24,1536,128) a kernel is about two waves, whose last one the next fills). bh: the
 * heads of the grid (MASK dK/dV: key/value heads). A masked grid of fewer CTAs than the device has SMs (few
 * key/value heads, each CTA walking its group's query heads) takes smaller CTAs, so that it spreads over
 * more SMs. */
template <int DP, int BR, int ROLE, bool MASK>
cudaError_t launch_role(typename V3ParamsOf<MASK>::type p, int64_t bh, cudaStream_t stream, bool pdl_after) {
    using C = V3Cfg<DP, BR, ROLE, MASK>;
    cudaError_t err = choose_shape<DP, BR, ROLE, MASK>(&p.warps, &p.stages);
    if (err != cudaSuccess) return err;
    const int64_t rows = C::kDQ ? p.seq_q : p.seq_kv;
    if constexpr (MASK) {
        int dev = 0, sms = 0;
        err = cudaGetDevice(&dev);
        if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (err != cudaSuccess) return err;
        while (p.warps > C::H) {
            const int64_t cta_rows = 16 * p.warps / C::H;
            if (bh * ((rows + cta_rows - 1) / cta_rows) >= sms) break;
            p.warps /= 2;
        }
    }
    const int64_t cta_rows = 16 * p.warps / C::H;
    p.row_blocks = (int)((rows + cta_rows - 1) / cta_rows);
    const long long blocks = (long long)bh * p.row_blocks;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    auto kernel = bwd_v3_kernel<DP, BR, ROLE, MASK>;
    const int smem = C::smem_bytes(p.warps, p.stages);
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks, 1, 1);
    cfg.blockDim = dim3(32 * p.warps, 1, 1);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = stream;
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &pdl;
    cfg.numAttrs = pdl_after ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, p);
}

/* The dQ kernel over bh_q heads, then the dK/dV kernel over bh_kv (programmatic launch on 9.0 and newer),
 * which takes the rows' dominant weights dQ leaves. */
template <int DP, bool MASK>
cudaError_t launch_dp(const typename V3ParamsOf<MASK>::type &p, int64_t bh_q, int64_t bh_kv, cudaStream_t stream,
                      bool pdl) {
    constexpr int BR = MASK ? column_tile_masked(DP) : column_tile(DP);
    cudaError_t err = launch_role<DP, BR, kRoleQ, MASK>(p, bh_q, stream, false);
    if (err == cudaSuccess) err = launch_role<DP, BR, kRoleKV, MASK>(p, bh_kv, stream, pdl);
    return err;
}

template <bool MASK>
cudaError_t launch_padded_dim(int dp, const typename V3ParamsOf<MASK>::type &p, int64_t bh_q, int64_t bh_kv,
                              cudaStream_t stream, bool pdl) {
    switch (dp) {
    case 16: return launch_dp<16, MASK>(p, bh_q, bh_kv, stream, pdl);
    case 32: return launch_dp<32, MASK>(p, bh_q, bh_kv, stream, pdl);
    case 64: return launch_dp<64, MASK>(p, bh_q, bh_kv, stream, pdl);
    case 80: return launch_dp<80, MASK>(p, bh_q, bh_kv, stream, pdl);
    case 96: return launch_dp<96, MASK>(p, bh_q, bh_kv, stream, pdl);
    case 128: return launch_dp<128, MASK>(p, bh_q, bh_kv, stream, pdl);
    case 160: return launch_dp<160, MASK>(p, bh_q, bh_kv, stream, pdl);
    case 192: return launch_dp<192, MASK>(p, bh_q, bh_kv, stream, pdl);
    default: return launch_dp<256, MASK>(p, bh_q, bh_kv, stream, pdl);
    }
}

} /* namespace */

extern "C" cudaError_t bwd_v3_split_launch(const jattn_cuda_args *a, void *workspace, cudaStream_t stream);
extern "C" cudaError_t bwd_v3_split_masked_launch(const jattn_cuda_args *a, void *workspace, cudaStream_t stream);

extern "C" size_t jattn_cuda_bwd_v3_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                                                    int64_t head_dim) {
    return (size_t)bwd_v3_layout(batch * heads, batch * heads, batch, seq_q, seq_kv, head_dim).bytes;
}

extern "C" size_t jattn_cuda_bwd_v3_workspace_bytes_gqa(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q,
                                                        int64_t seq_kv, int64_t head_dim) {
    return (size_t)bwd_v3_layout(batch * heads, batch * kv_heads, batch, seq_q, seq_kv, head_dim).bytes;
}

extern "C" int jattn_cuda_launch_bwd_v3(const jattn_cuda_args *a, void *workspace, void *stream_ptr) {
    const jattn_cuda_args *f = a;
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    const int64_t kv_heads = f->kv_heads > 0 ? f->kv_heads : f->heads;
    if (f->head_dim < 1 || f->head_dim > JATTN_CUDA_BWD_V3_MAX_HEAD_DIM || !f->lse || !workspace ||
        reinterpret_cast<uintptr_t>(workspace) % 16 != 0 || kv_heads > f->heads || f->heads % kv_heads != 0)
        return (int)cudaErrorInvalidValue;
    /* a masked call: grouped-query heads, a window part (segments, causal, blocks) or a key bias */
    const bool window = kw_has_window(*f), masked = kv_heads < f->heads || window || f->key_bias;
    const int64_t bh = f->batch * f->heads, bh_kv = f->batch * kv_heads;
    const BwdV3Layout L = bwd_v3_layout(bh, bh_kv, f->batch, f->seq_q, f->seq_kv, f->head_dim);
    cudaError_t err =
        masked ? bwd_v3_split_masked_launch(a, workspace, stream) : bwd_v3_split_launch(a, workspace, stream);
    if (err != cudaSuccess) return (int)err;
    const unsigned char *ws = static_cast<const unsigned char *>(workspace);
    BwdV3Params p;
    for (int t = 0; t < 4; ++t) {
        p.img[t] = ws + L.img[t];
        p.unscale[t] = reinterpret_cast<const float *>(ws + L.unscale[t]);
    }
    p.lse = reinterpret_cast<const float *>(ws + L.lse);
    p.dl = reinterpret_cast<const float2 *>(ws + L.dl);
    p.dlse = a->dlse;
    p.top = reinterpret_cast<float4 *>(static_cast<unsigned char *>(workspace) + L.top);
    p.q = f->q, p.k = f->k, p.dout = a->dout, p.v = f->v;
    p.q_b = f->q_strides.batch, p.q_h = f->q_strides.head, p.q_t = f->q_strides.token;
    p.k_b = f->k_strides.batch, p.k_h = f->k_strides.head, p.k_t = f->k_strides.token;
    p.do_b = a->dout_strides.batch, p.do_h = a->dout_strides.head, p.do_t = a->dout_strides.token;
    p.v_b = f->v_strides.batch, p.v_h = f->v_strides.head, p.v_t = f->v_strides.token;
    p.dq = a->dq, p.dk = a->dk, p.dv = a->dv;
    p.dq_b = a->dq_strides.batch, p.dq_h = a->dq_strides.head, p.dq_t = a->dq_strides.token;
    p.dk_b = a->dk_strides.batch, p.dk_h = a->dk_strides.head, p.dk_t = a->dk_strides.token;
    p.dv_b = a->dv_strides.batch, p.dv_h = a->dv_strides.head, p.dv_t = a->dv_strides.token;
    p.kv_count = f->kv_count, p.kv_index = f->kv_index;
    p.heads = (int)f->heads, p.seq_q = (int)f->seq_q, p.seq_kv = (int)f->seq_kv, p.d = (int)f->head_dim;
    p.tq = (int)L.tq, p.tk = (int)L.tk;
    p.warps = p.stages = p.row_blocks = 0;
    p.zero = 0;
    p.scale = f->scale;
    if (f->kv_count) { /* masked keys keep dk = dv = +0 (k and v: key/value heads) */
        BwdV3Params z = p;
        z.row_blocks = (int)bh_kv;
        z.heads = (int)kv_heads;
        bwd_v3_zero_kv<<<1024, 256, 0, stream>>>(z);
        err = cudaGetLastError();
        if (err != cudaSuccess) return (int)err;
    }
    int dev = 0, major = 0;
    err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err != cudaSuccess) return (int)err;
    const bool pdl = major >= 9;
    if (!masked) return (int)launch_padded_dim<false>((int)L.dp, p, bh, bh, stream, pdl);
    BwdV3MaskParams m;
    static_cast<BwdV3Params &>(m) = p;
    m.win = window ? reinterpret_cast<const int2 *>(ws + L.win) : nullptr;
    m.wsum = window ? reinterpret_cast<const int4 *>(ws + L.wsum) : nullptr;
    m.bias = f->key_bias ? reinterpret_cast<const float *>(ws + L.bias) : nullptr;
    m.kv_heads = (int)kv_heads;
    m.group = (int)(f->heads / kv_heads);
    /* causal and block-causal: the last query rows attend the most keys, and start first */
    m.reverse = f->causal != JATTN_CAUSAL_NONE || f->block_q != nullptr;
    return (int)launch_padded_dim<true>((int)L.dp, m, bh, bh_kv, stream, pdl);
}
