/* backward v4 (launcher jattn_cuda_launch_bwd_v4, reported as cuda_bwd_v4_f16x2_sm90_fa3_ws_128x64 in f32 and
 * cuda_bwd_v4_s_dp_f16x2_grads_f16_sm90_fa3_ws_128x64 in tf32): the attention backward (dq, dk, dv) fused into one
 * warp-specialized sm_90a kernel in FlashAttention-3's orientation, on fp16 wgmma with every operand split into
 * two scaled fp16 parts (2xFP16, f16x2_split.cuh). Route A of ../shared/research/backward_fa3_route.md (issue 36).
 * D 64 and 128, f32 and tf32 precision, deterministic, graph-capturable.
 *
 * Per (b, h), c = scale, lse the forward's row log-sum-exp (natural log), as the backward v2:
 *   Dl_i  = sum_d dO_id O_id - dlse_i                       (pre-pass, float64, kept as hi + lo)
 *   S_ij  = (c q_i) . k_j;   P_ij = exp(S_ij - lse_i)       (recomputed)
 *   dP_ij = dO_i . v_j;      dS_ij = P_ij (dP_ij - Dl_i)
 *   dV_j  = sum_i P_ij dO_i;  dK_j = sum_i dS_ij (c q_i);  dQ_i = c sum_j dS_ij k_j
 *
 * Kernels, all on the caller's stream:
 *   the pre-pass (backward_v4_split_f16x2.cu, the removed backward v2's): the 64-row tile records of
 *       q * c, dout (with Dl), k, v (backward_v4_records.cuh: hi and lo fp16 images, one power of two per tile,
 *       lse in the q records); with a window the closed form does not give, the window table before them
 *       (bwd_v4_windows, bwd_v4_units: below, "Windows").
 *   bwd_v4_kernel<D, kSplit>: a persistent grid of G = min(132, SMs, items) CTAs; a work item is (b, h, n), the
 *       128 keys 128 n .. 128 n + 127 of one head; CTA g runs the W = ceil(items / G) consecutive items g W ..
 *       g W + W - 1 (item = (b H + h) N + n, N = ceil(Skv / 128)). A CTA is three warpgroups:
 *       - warpgroup 0, the producer (setmaxnreg 24): one thread bulk-copies per item the images of the two K and
 *         two V tile records (128 KB at D = 128), and per 64-query m-block the Q record and the dO record (images
 *         and extras, one slot each) on full / empty mbarriers;
 *       - warpgroups 1 and 2, the consumers (setmaxnreg 240), own keys 64 w .. 64 w + 63 of the item (their K and
 *         V tile); dK and dV of those keys accumulate in registers over all m-blocks. Per m-block (64 queries):
 *         1. S^T = K_w Q^T, m64n64k16 ss from the K-major images: X = the 2 D/16 corrections (K_hi Q_lo, K_lo
 *            Q_hi), then hi*hi of k16 slices 0-1; a fresh step accumulator per further pair of slices, waited for
 *            and added into X in fp32 (the "chains of 2" class of the backward v3).
 *         2. P = ex2((X u_k u_q - lse_i) log2 e) (ex2.approx of the product's rounded part, times 1 + its
 *            remainder ln 2); keys past seq_kv get P = 0; a warp vote on
 *            P >= 1/2 (the rare dominant element, 3b; P >= 1/8 in the f32 instances without the window table).
 *         3. dP^T = V_w dO^T in one chain (corrections, then hi*hi); dS = P ((dP u_v u_do - Dl_hi) - Dl_lo).
 *         3b. each element with P >= 1/2 (a query's dominant key; rare outside peaky rows) gets P and dS from its
 *            score (plus the key's bias) and dP recomputed in float64 from the caller's float32 q, k, v, dout (the
 *            whole warp per element, one value of the 32-lane dot product per lane): issue 30's rule, P and dP exact
 * (the backward v3's). One thread owns the element in every product below, so dV, dK and dQ agree on it.
 *            In f32 without the window table also each element with P >= 1/8 of a row whose |lse| >= 16 (kV4PeakyP:
 *            logits of tens, where S's chain truncation alone put dq, dk at ~3x the float32 floor).
 *         4. the power of two of each query's largest |dS| over the CTA's 128 keys (times the K-tile factor
 *            kfac_w = u_k,w / max(u_k,0, u_k,1)): exponent bytes, a byte-wise max over the 8 lanes of a column,
 *            an exchange through shared memory between the 8 consumer warps (named barrier B1, 256 threads).
 *         5. dS 2^s_i kfac_w split hi / lo and stored transposed ([query][key], the K-major A operand of dQ,
 *            128-byte swizzle) by stmatrix.trans; fence.proxy.async.
 *         6. dK += dS^T (c Q): dS split per key row (power of two of the row's largest |dS|, two quad shuffles)
 *            into the A fragments, m64n64k16 rs with Q MN-major, a fresh tile per 64 columns of head_dim (three
 *            products: lo*hi, hi*lo, hi*hi), added in fp32 with the row and tile unscales; the Q slot released.
 *         7. dV += P^T dO the same way; the dO slot released.
 *         8. named barrier B2 (both halves of dS stored): dQ partial = dS (64 x 128 keys) K: at D = 128 each
 *            warpgroup takes 64 columns of head_dim (m64n64k16 ss, A = dS K-major, B = K MN-major, three products
 *            over 8 k16 slices of keys); at D = 64, dQ^T: each warpgroup takes 32 queries (m64n32k16 ss, A = K^T
 *            MN-major, B = dS^T K-major); times 2^-s_i u_ref, pushed into the CTA's private fp32 copy of the
 *            head's dQ (st.global on the CTA's first item of the head, red.global.add after).
 *       After an item's last m-block: dK, dV rows of the warpgroup's keys (float2 stores), rows past seq_kv
 *       skipped.
 *   bwd_v4_dq_reduce: dq = c * (the sum of the head's private copies in ascending CTA order), through dq's
 *       strides. The copy of (CTA g, head bh) is slot g + bh of the workspace (the pairs of a monotone staircase:
 *       at most G + B H - 1 slots).
 * Deterministic: every element of a copy is written by one thread in program order (a fence at each item start),
 * every other gradient element by one thread, the copies summed in a fixed order: bit-identical repeats on one
 * device (the copies' grouping depends on G, so bits may differ between GPUs of different SM counts).
 * tf32 (kSplit false): S^T and dP^T as in f32; dK, dV and dQ one fp16 product (hi*hi) each.
 *
 * Accumulator layout (m64nN, PTX ISA "wgmma register fragments"): thread (warp v, lane 4g + c) of a warpgroup
 * holds rows 16v + g (regs 4i + e) and 16v + g + 8 (regs 4i + 2 + e) of columns 8i + 2c + e; rows of S^T and
 * dP^T are keys, columns queries; an m64n64 accumulator's regs 8ks .. 8ks + 7 are the A fragment of k16 slice
 * ks of the next product (dK, dV: K = queries).
 *
 * Shared memory (D = 128, bytes): K tiles 65,536 + V tiles 65,536 + Q images 32,768 + dO images 32,768 + dS
 * hi / lo 32,768 + Q extras 528 + dO extras 528 + exponent exchange 512 + dQ row factors 256 + the warpgroups'
 * tile scales 32 + mbarriers 64 + alignment 1,024 = 232,320 of 232,448. D = 64: 134,016 (one Q and dO slot too).
 * Registers: 168 at entry (384 threads, one CTA per SM), setmaxnreg 24 / 240; at the peak (the dK product, D =
 * 128 f32) 238 live: dK and dV 128, P (kept for dV) 32, dS's A fragments 32, the fresh tile 32, 14 others. What
 * keeps it there: the per-item values (tile scales) in shared memory, the thread's lane / warp read from %tid at
 * each use, 32-bit divisions (a 64-bit one called a subroutine that held 5 registers), the row exponents packed
 * in one word, the unscales read from the slots after each product's wait.
 * Workspace: the records (about 2 B H (Sq + Skv) D x 4 bytes) and (132 + B H - 1) fp32 copies of one
 * head's dQ (Tq 64 x D each): 1.3 GB at (1,24,16384,128), then the stream-K parts (2 x 132 slots of 128 keys' dK
 * and dV: 34.6 MB at D = 128), the grouped heads' parts, then the window table (backward_v4_windows.cuh: win [B][Tq
 * 64][2], range [B][N][2], pre [B N + 1] int and a counter word: 8 B Tq 64 + 12 B N + 8 bytes, 149 KB at
 * (4,24,4608,128)), then the staged key bias ([B H][N 128] floats: 1.6 MB at (1,24,16384,128)); every call counts
 * the tables and the bias (the size does not depend on the mask); never less than v3's (a call v4 refuses runs v3
 * in it).
 * Not taken (v3 runs it): seq_kv = 1, pointers not 16-byte aligned, strides not multiples of 4.
 * A key bias (key_bias, per batch and optionally per head; -inf leaves a key out) runs the kV4Windows instance
 * (alone: the window table's trivial rows, every row's window its batch's keys) with a runtime pointer, no instance
 * of its own: a fourth pre-pass kernel (bwd_v4_bias) stages it per query head in the records' key order ([B H][N
 * 128] floats in the workspace, 0 past the batch's attended keys), and each consumer thread reads the bias of its
 * two key rows once per m-block at step 2 (two loads, L1-resident after the item's first m-block: not held in
 * registers over the products, where the D = 128 f32 peak has none to spare, nor in shared memory, of which 128
 * bytes are left at D = 128). P = ex2((S + (b_j - lse_i)) log2 e) with b_j - lse_i the exact pair of a TwoSum (its
 * high part joins S in the fma, its remainder the exponent's: the score is never rounded before lse is
 * subtracted), and P = 0 (a select) where b_j = -inf; 3b adds b_j in float64. The records leave out (as 0) the
 * keys whose bias is -inf for every query head of their group, as the keys no window reaches (the backward v3's
 * v3_key_reached), so that whatever they hold sets no tile's power of two; their dK, dV are +0.
 * Key padding (kv_count, kv_index of key_padding.cu): batch b's records hold its kv_count[b] attended keys first
 * (kv_index: their rows, ascending, then the rows no query attends), zeros past them, and its keys from kv_count[b] on
 * get P = 0 (as keys past seq_kv do), so dK, dV of those are 0; a record row's dK, dV go to row kv_index[row] (so
 * every row of dk, dv is written once), 3b reads the caller's row kv_index[key]. A row with no key has lse -inf
 * (the pre-pass makes it +inf: P = 0). The grid still runs every 128-key block (the host does not read kv_count).
 * Grouped-query heads (kv_heads dividing heads, group G = heads / kv_heads): the k and v records are the key/value
 * heads' (the pre-pass reads k and v once per group), query head bh reads records bh / G (= b Hkv + h / G); the
 * items stay per query head, so each writes its dK, dV into a part of its own ([B H][seq_kv][D], dk's then dv's, in
 * the workspace), and bwd_v4_group_sum adds a group's parts in ascending query head order into dk, dv:
 * deterministic, 2 B H seq_kv D floats of workspace more. The K and V records of a group are re-read by each of
 * its query heads' items (from L2: consecutive items).
 * Windows that causal's closed form does not give (segments, block-causal, key padding with causal, top-left causal
 * with seq_q < seq_kv; bwd_v4_kernel<D, kSplit, kV4Windows>, backward_v4_windows.cuh): two more pre-pass kernels
 * before the records (bwd_v4_windows: each row's window in attended keys, non-decreasing over the rows; bwd_v4_units:
 * block n's m-blocks [first, last], one contiguous range of each batch, and the prefix of their counts), all on the
 * device: the offsets are never read on the host. The records then leave out the keys no row attends (as 0: what a
 * packed buffer holds past its last segment sets no tile's scale) and record non-finite k, v as 0 (as causal), and a
 * q record carries its rows' largest window start and smallest end (words 64, 65 of its row data). The kernel runs
 * block n's m-blocks first(n) .. last(n) (a block no row attends one, every P 0, so its dK = dV = +0 are written);
 * the grid keeps the unmasked call's CTA count (the host's bound) and each CTA takes its share of the table's total
 * (a CTA may get none: it runs no item); unit_item, an item's first unit, the dQ reduction's copies and the cut
 * items' sum read the table; the dQ store rule becomes the interval of v4w_cover (an item stores where m < A or m
 * >= B: items no longer all end at tq - 1); a warpgroup's 64 keys against an m-block are a full tile when every row's
 * window holds them (the q record's words), else each element tests its row's window (two rows an int4 of win from
 * L2), before the dominant vote; the key padding's kv_count test is then part of the window's.
 *
 * The grid (stream-K; measured on an H100: bench/results/h100-2026-12-06-gpunext/): the work is cut in units of
 * (head, 128-key block n, 64-query m-block), item-major, and CTA g runs units g U / G .. (g + 1) U / G - 1 (G =
 * min(132, SMs, U)): whole items, and at its ends the parts of items it shares with its neighbours. A whole item
 * writes dK, dV; a part leaves them in its slot (2 g: the CTA's first item, 2 g + 1: its last), and
 * bwd_v4_dkv_parts sums an item's parts in CTA order. dQ: an item stores into the m-blocks of its head's copy that
 * no earlier item of the head in the CTA reached (below `run`, kept in shared memory) and adds into the others;
 * bwd_v4_dq_reduce sums, for a row, the copies holding its m-block. Block n's units are its m-blocks from
 * first_mblock(n) on: all of them unmasked, and under causal (either alignment, every key attended; query i
 * attends key j <= i + off, off = 0 top-left, Skv - Sq bottom-right) those from the first whose queries attend its
 * keys (head_units: their count in closed form); where a warpgroup's keys pass an m-block's first query's limit
 * (the diagonal) P = 0 past each query's, before the dominant vote. The grid it replaces ran W = ceil(items / G)
 * whole items a CTA: 7 on most of 124 CTAs at (1,24,4608,128) (6.55 a multiprocessor); by units, the longest CTA
 * is 0.937x (4608), 0.74x (1536), 0.97x (16384) of that grid's, and a causal call's 0.48-0.49x of that grid's
 * unmasked one (lab/gpu/emulate_backward_v4_causal.py); measured, the backward 2.91 / 3.52 / 3.76x its forward at
 * (1,24,1536 / 4608 / 16384,128) (3.22 / 3.70 / 3.66x before), causal 0.62x the unmasked call. ptxas: the D = 128
 * f32 unmasked instance 8 bytes of spill stored, 12 loaded, the windows' 4 and 4, the others 0 (2026-12-07).
 *
 * Where it departs from the design note (route A): (1) the P >= 1/2 element is made exact inside the kernel (3b:
 * a warp-wide float64 dot per element, P and dP from the caller's inputs, then through the products like every
 * element, as the backward v3 does) rather than dropped and added back by a dQ post-pass and a key pass: no slots,
 * no extra passes, the kernel's three products agree on it by construction; its cost is one warp-wide dot per
 * element (~700 cycles with its L2 loads), which an attention sink (one key dominant for every query) turns into
 * up to 64 per m-block on one warp: a straggler the note's drop-and-fix avoids (not measured). (2) dK before dV
 * (the note's DK_FIRST: the Q slot is released two products earlier). (3) D = 64: dQ^T per warpgroup over 32
 * queries (A = K^T MN-major), as the 64 columns of head_dim do not split into two 64-column tiles. (4) dQ's
 * private copies take the first item's store instead of a zeroed workspace, and the dQ reduction applies c.
 * The pushes are red.global.add.v2.f32 from registers into copies that do not fit L2 (one head's dQ per CTA: 311
 * MB at S = 4608), so each m-block's 32 KB of pushes per CTA misses L2 (~1 TB/s of DRAM traffic at the model's
 * speed); backward_v4_mix.cu measures it beside the alternatives (route C's shared accumulator, order-free int64
 * fixed point: one per-head buffer in L2, no copies, bits independent of the SM count).
 *
 * ptxas 13.0 (-gencode arch=compute_90a,code=sm_90a -Xptxas -v), bwd_v4_kernel (2026-12-06): every instance
 *   (D 64 and 128, f32 and tf32) 168 registers at entry, 0 bytes spill, 5 barriers; the peak at D = 128 f32 is
 *   238 live registers (nvdisasm -lrm count) in the dK product. The last 2-3 registers came from the warpgroup
 *   index taken through a shuffle (ptxas then holds it, and the descriptors built on it, in uniform registers:
 *   CUTLASS's canonical_warp_group_idx): before it 12-72 bytes of spill moved with every edit. ptxas moves
 *   spills by 8-40 bytes between equivalent variants at this edge (the prototype's lesson; the smem base taken
 *   through a shuffle as well brought back 24 bytes).
 *   SASS per m-block and warpgroup (D = 128 f32): HGMMA 48 ss (S^T, dP^T) + 48 rs tnspB (dK, dV) + 24 ss tnspB
 *   (dQ) = 120 m64n64k16, 9 wgmma waits, 8 STSM, 33 MUFU.EX2, 16 REDG; tf32: 48 + 16 + 8 = 72. The m-block loop
 *   is 3009 static instructions (D = 64: 2598; tf32 2625 / 2258), the rare P >= 1/2 path and the first item's
 *   stores included (~500): ~2500 issued per thread and m-block on the normal path, i.e. ~5000 issue cycles per
 *   scheduler against 7680 tensor cycles per m-block at full rate (FMUL 237, LOP3 236, FADD 229, IMAD 275, FFMA
 *   196, F2FP + HADD2 192: the splits, exponents and unscales; R2UR 116 for the descriptors).
 * Measured (H100 / H200, bench/gpu/backward_v4_run.sh): not yet run: <ms and ratios at (1,24,1536 / 4608 / 16384,
 * 128) against v6's forward and PyTorch, the battery's pass counts, the mix's ceiling>. Targets (issue 36): at
 * (1,24,S,128), S = 1536 / 4608 / 16384, at most 3.5x (aim 3.0x) jattn's forward (v6) time and at least 3.5x PyTorch's
 * fp32 SDPA backward. */
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

#include "backward_v4_records.cuh"
#include "backward_v4_windows.cuh"
#include "cuda_internal.h"
#include "f16x2_split.cuh"
#include "sm90_pipeline_ptx.cuh"
#include "sm90_wgmma_f16_ptx.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kWg = 128;
constexpr int kConsumers = 2;
constexpr int kThreads = kWg * (1 + kConsumers);
constexpr int kM = kBwdTile;                   /* queries per m-block */
constexpr int kWgKeys = kBwdTile;              /* keys per consumer warpgroup */
constexpr int kCtaKeys = kConsumers * kWgKeys; /* keys per work item */
/* log2 e - (float)log2 e (P's exponent as a pair) and ln 2 */
constexpr float kV4Log2eLo = (float)(1.4426950408889634074 - (double)kLog2e);
constexpr float kV4Ln2 = 0.6931471805599453f;
/* 3b's second class (the f32 instances without the window table, kPeaky): in a query row whose |lse| >= kV4PeakyLse
 * (logits of tens and more), the elements with P >= kV4PeakyP too. There S's absolute error (the k16 chains'
 * truncation, ~1-3 ulp of |S| ~ |lse|) is a relative error of P up to ~3x the float32 floor's (logits std 64:
 * test_backward's peaky64 floor case at 2.98-3.03x on an H100; lab/gpu/emulate_backward_v4_peaky.py: 3.7x worst of 120
 * draws, 1.2x with this class). Per row, at most 1 / kV4PeakyP elements; rows of |lse| < 16 (logits of a few units)
 * take none. */
constexpr float kV4PeakyP = 0.125f;
constexpr float kV4PeakyLse = 16.f;
/* Left out of tf32 (gate 1e-3) and of the kV4Windows instances: at D = 128 f32 the windows' instance spilled 12 /
 * 24 bytes with it (4 / 4 without; ptxas 13.0), the unmasked and causal ones unchanged. */
constexpr int kMaxCtas = 132;               /* the persistent grid's size at most (the workspace's copies) */
constexpr int kDsImage = kM * kCtaKeys * 2; /* one part of dS [64 queries][128 keys] fp16 */
constexpr int kExtrasPad = (kBwdExtras + 15) / 16 * 16;

/* The instances by mask: none (key padding and grouped heads included), causal alone where every key is attended
 * (first_mblock and head_units in closed form), and the windows the closed form does not give (segments, blocks,
 * key padding with causal, top-left causal with seq_q < seq_kv: the table of backward_v4_windows.cuh). */
enum V4Mask { kV4Plain = 0, kV4Causal = 1, kV4Windows = 2 };

/* The order of dK and dV in an m-block: dK first releases the Q slot earlier (the producer's next Q copy then
 * has dV and dQ to land in). */
constexpr bool kDkFirst = true;

template <int D>
struct V4Config {
    using R = BwdRecord<D>;
    static constexpr int kKOff = 0;                           /* K tiles 0, 1: hi, lo images each */
    static constexpr int kVOff = kKOff + 2 * R::kImages;      /* V tiles 0, 1 */
    static constexpr int kQOff = kVOff + 2 * R::kImages;      /* Q images (one slot) */
    static constexpr int kDoOff = kQOff + R::kImages;         /* dO images (one slot) */
    static constexpr int kDsOff = kDoOff + R::kImages;        /* dS hi, lo [64][128] */
    static constexpr int kQxOff = kDsOff + 2 * kDsImage;      /* Q record extras: 2^-e, lse per query */
    static constexpr int kDxOff = kQxOff + kExtrasPad;        /* dO record extras: 2^-e, (Dl hi, Dl lo) per query */
    static constexpr int kXchOff = kDxOff + kExtrasPad;       /* exponent words [8 warps][4 c][4] */
    static constexpr int kQfacOff = kXchOff + 8 * 4 * 16;     /* 2^-s per query [64] */
    static constexpr int kCstOff = kQfacOff + kM * 4;         /* per item and warpgroup: u_k, u_v, kfac, u_ref */
    static constexpr int kBarOff = kCstOff + kConsumers * 16; /* mbarriers */
    static constexpr int kCovOff = kBarOff + 64;              /* per warpgroup: the dQ coverage words (cov, run) */
    /* the CTA's units u0, u1 and items first, last (int32); then per warpgroup the item's m-blocks [begin, end)
     * and its batch's key count (key padding: the keys from it on get P = 0), one word spare */
    static constexpr int kUnitsOff = kCovOff + kConsumers * 8;
    static constexpr int kMOff = kUnitsOff + 16;
    static constexpr int kSmemBytes = kMOff + kConsumers * 16 + kSwizzleAtomBytes;
    static constexpr int kHalves = D / 64; /* 64-column tiles of dK and dV */
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
    static_assert(R::kImage % kSwizzleAtomBytes == 0 && kDsOff % kSwizzleAtomBytes == 0, "1024-byte aligned images");
};

struct BwdV4Params {
    const unsigned char *rec_q, *rec_do, *rec_k, *rec_v; /* the records, [B*H][tiles] each */
    float *copies;                                       /* [slot][tq * 64][D] */
    float *dk, *dv;
    int64_t dk_b, dk_h, dk_t, dv_b, dv_h, dv_t;
    /* the caller's inputs, for the dominant elements' exact score and dP (3b) */
    const float *q, *k, *v, *dout;
    int64_t q_b, q_h, q_t, k_b, k_h, k_t, v_b, v_h, v_t, do_b, do_h, do_t;
    float scale;
    int heads, seq_q, seq_kv, tq, tk;
    int group;    /* query heads per key/value head (1: no grouping); query head bh reads k, v records bh / group */
    int n_blocks; /* N: 128-key blocks per head */
    uint32_t v_lbo, v_sbo; /* descriptor fields of an MN-major image (16-byte units) */
    uint32_t zero;         /* 0, unknown to the compiler */
    int64_t causal_off;    /* causal: query i attends key j <= i + causal_off (0 top-left, Skv - Sq bottom-right) */
    /* stream-K: the units (item, m-block), item-major (causal: each block's from its first attending m-block),
     * `units` of them, CTA g runs units
     * g units / ctas .. (g + 1) units / ctas - 1; an item cut between CTAs leaves each part's dK, dV in `partials`
     * ([2 ctas][2][128 keys][D]: slot 2 g its first item's part, 2 g + 1 its last's), summed by bwd_v4_dkv_parts */
    int64_t units;
    int ctas;
    float *partials;
    /* key padding (key_padding.cu), NULL without: kv_count [B] (keys past it get P = 0), kv_index [B][seq_kv] (a
     * record row's k, v row, for 3b), dkv_rows (kv_index where dk, dv are the caller's, NULL where they are the
     * grouped query heads' parts: the group sum maps them) */
    const int *kv_count, *kv_index, *dkv_rows;
    int64_t head_units; /* units of one head (every head the same; not under kV4Windows) */
    /* kV4Windows: the rows' windows in attended keys, win [B][tq 64][2], and the unit tables (backward_v4_windows.cuh);
     * `units` and `head_units` are then the unmasked call's (the host's bound, which sized the grid), and the CTAs
     * share the table's total */
    const int *win;
    V4Table table;
    /* kV4Windows: the key bias staged by the pre-pass in record order, [B H][N 128] floats (item * 128 + key - 128 n:
     * the attended keys' bias, 0 past them; -inf a key the head does not attend), NULL without one */
    const float *bias;
};

/* ---- PTX wrappers this kernel adds ---------------------------------------------------------------- */

/* D[64 x 64] (+)= A[64 x 16] B[16 x 64]: A K-major, B MN-major (imm-trans-b = 1), both from shared memory. */
__device__ __forceinline__ void wgmma_m64n64k16_f16_ss_tb(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                          int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
                 "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* D[64 x 32] (+)= A[64 x 16] B[16 x 32]: A MN-major (imm-trans-a = 1), B K-major, both from shared memory. */
__device__ __forceinline__ void wgmma_m64n32k16_f16_ss_ta(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                                          int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* Four (x4) or two (x2) 8x8 b16 matrices stored transposed: lanes 8k .. 8k + 7 give the row addresses of
 * stored matrix k (rows = the registers' columns). */
__device__ __forceinline__ void stsm_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
__device__ __forceinline__ void stsm_x2_trans(uint32_t addr, uint32_t r0, uint32_t r1) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(addr), "r"(r0), "r"(r1)
                 : "memory");
}

__device__ __forceinline__ float lds_f32(uint32_t a) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ float2 lds_f32x2(uint32_t a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ float4 lds_f32x4(uint32_t a) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ uint4 lds_u32x4(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ int lds_s32(uint32_t a) {
    int v;
    asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ void sts_s32(uint32_t a, int v) {
    asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void sts_f32(uint32_t a, float v) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(a), "f"(v) : "memory");
}
__device__ __forceinline__ void sts_u32x4(uint32_t a, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

/* The dQ pushes into a private copy: store (the CTA's first item of the head) or add (red, performed at L2).
 * red.global.add.f32 flushes subnormal results to zero (REDG ... FTZ), outside the kernel's stated range. */
__device__ __forceinline__ void push_f32x2(float *p, float a, float b, bool store) {
    if (store)
        asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
    else
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void push_f32(float *p, float a, bool store) {
    if (store)
        asm volatile("st.global.f32 [%0], %1;\n" ::"l"(p), "f"(a) : "memory");
    else
        asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(a) : "memory");
}

/* The first unit of CTA g, and the CTA that runs unit u. */
__host__ __device__ __forceinline__ int64_t unit_start(int64_t g, int64_t units, int ctas) { return g * units / ctas; }
__host__ __device__ __forceinline__ int unit_cta(int64_t u, int64_t units, int ctas) {
    const int64_t g = ((u + 1) * ctas - 1) / units;
    return (int)(g < ctas - 1 ? g : ctas - 1);
}

/* Causal: the first 64-query m-block whose queries attend a key of block n (the queries i >= 128 n - off),
 * at most tq - 1 (an item runs one m-block or more: its K and V load with the first; a block no query attends
 * gets P = 0 there, and dK = dV = 0). */
__host__ __device__ __forceinline__ int causal_first_mblock(int n, int64_t off, int tq) {
    int64_t i0 = (int64_t)kCtaKeys * n - off;
    i0 = i0 < 0 ? 0 : i0;
    const int64_t mb = i0 / kM;
    return (int)(mb < tq - 1 ? mb : tq - 1);
}

/* floor(a / b), b > 0. */
__host__ __device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* A head's 128-key block n runs the m-blocks from first_mblock(n) (causal: the first whose queries attend its keys;
 * else 0) to tq - 1: tq - first_mblock(n) units. */
template <bool kCausal>
__host__ __device__ __forceinline__ int first_mblock(int n, int64_t off, int tq) {
    if constexpr (kCausal) return causal_first_mblock(n, off, tq);
    return 0;
}

/* The units of a head's blocks 0 .. n - 1, in closed form: causal, first_mblock(k) = min(max(0, 128 k - off) / 64,
 * tq - 1) is 0 below k0 (128 k < off), 2 k + f from there (f = floor(-off / 64)), tq - 1 from k1 on. */
template <bool kCausal>
__host__ __device__ __forceinline__ int64_t head_units(int n, int64_t off, int tq) {
    if constexpr (!kCausal) return (int64_t)n * tq;
    const int64_t k0 = off <= 0 ? 0 : (off + kCtaKeys - 1) / kCtaKeys, f = floor_div(-off, kM);
    const int64_t k1 = -floor_div(-(tq - 1 - f), 2); /* ceil((tq - 1 - f) / 2) */
    const int64_t lin_end = k1 > k0 ? k1 : k0;       /* the linear part: k0 .. lin_end - 1 */
    const int64_t a = k0 < n ? k0 : n, b = lin_end < n ? lin_end : n;
    int64_t sum = b > a ? (b - a) * f + (b * (b - 1) - a * (a - 1)) : 0;
    if (n > lin_end) sum += (n - lin_end) * (int64_t)(tq - 1);
    return (int64_t)n * tq - sum;
}

/* The block of a head whose units hold head unit r (0 <= r < head_units(n_blocks)): the last n with
 * head_units(n) <= r. */
template <bool kCausal>
__host__ __device__ __forceinline__ int unit_block(int64_t r, int n_blocks, int64_t off, int tq) {
    int lo = 0, hi = n_blocks - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (head_units<kCausal>(mid, off, tq) <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The item (b H + h) N + n that runs unit u. */
template <bool kCausal>
__host__ __device__ __forceinline__ int unit_item(int64_t u, int64_t per_head, int n_blocks, int64_t off, int tq) {
    const int64_t bh = u / per_head;
    return (int)(bh * n_blocks + unit_block<kCausal>(u - bh * per_head, n_blocks, off, tq));
}

/* The thread's index in its warpgroup, read from %tid at each use (volatile: recomputed where needed rather than
 * held in registers over the m-block, where the consumers have none to spare), and what derives from it. */
__device__ __forceinline__ int ctid() {
    uint32_t x;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(x));
    return (int)(x % kWg);
}
__device__ __forceinline__ int cwarp() { return ctid() / 32; }
__device__ __forceinline__ int clane() { return ctid() % 32; }

__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

/* Descriptor of an MN-major 128B-swizzled operand: start, LBO, SBO. */
__device__ __forceinline__ uint64_t desc_mn(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)lbo << 16) | ((uint64_t)sbo << 32) | (1ull << 62);
}

/* The descriptor of an operand `bytes` past the one of `desc` (the start field, 16-byte units, cannot carry:
 * shared addresses are below 2^18): one 64-bit add of a constant instead of the mask and shift of each start. */
__device__ __forceinline__ uint64_t desc_at(uint64_t desc, uint32_t bytes) { return desc + (uint64_t)(bytes >> 4); }

/* As v6's and v2's: the arrival's address depends on `loaded` (values computed from this thread's loads from the
 * slot), so the slot is given back only after those loads returned. */
__device__ __forceinline__ void slot_release(uint32_t empty_bar, uint32_t loaded, uint32_t zero) {
    mbar_arrive(empty_bar + (loaded & zero));
}

/* 2^a / 2^b for powers of two (exact; the exponent difference clamped to the normal range). */
__device__ __forceinline__ float pow2_ratio(float a, float b) {
    int e = (int)((__float_as_uint(a) >> 23) & 0xFFu) - (int)((__float_as_uint(b) >> 23) & 0xFFu);
    e = e < -126 ? -126 : (e > 126 ? 126 : e);
    return exp2_int(e);
}

/* Step 2 of the kernel: P of a consumer thread's 32 elements of S^T in place (its key rows r = 0, 1: 16 cwarp +
 * clane / 4 + 8 r of the warpgroup's keys; the m-block's query columns 2 (clane % 4) + 8 i + e), us the scale times
 * the block's q scale, qx the m-block's row data in shared memory (lse at kBwdRowData). t = S us - lse rounded once;
 * t log2 e as the pair (y, yl), so that the product's rounding (u |y|, ~2e-6 of P at |t| ~ 20) does not join ex2's
 * ~2 ulp: P = 2^y (1 + yl ln 2); yl clamped so that an infinite t (non-finite inputs, or a row with no key: lse
 * +inf) keeps 2^y's 0 or inf instead of inf - inf. kBias: bk[r] the key rows' bias, t = S us + (b - lse) with b -
 * lse as the exact pair (dh, dl) (TwoSum), dh joined to S by the fma (the score is never rounded before lse is
 * subtracted, as without a bias) and dl to the exponent's remainder; a key whose bias is -inf gets P = 0 whatever S
 * holds (a select). */
template <bool kBias>
__device__ __forceinline__ void scores_to_p(float (&x)[32], uint32_t qx, float us, const float (&bk)[2]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float2 l2 = lds_f32x2(qx + kBwdRowData + 4 * (8 * i + 2 * (clane() % 4)));
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int j = 4 * i + 2 * r + e;
                const float l = e ? l2.y : l2.x;
                if constexpr (kBias) {
                    const float dh = bk[r] - l, bb = dh - bk[r];
                    const float dl = (bk[r] - (dh - bb)) + (-l - bb);
                    const float t = fmaf(x[j], us, dh);
                    const float y = t * kLog2e;
                    const float yl = fmaxf(fmaf(dl, kLog2e, fmaf(t, kV4Log2eLo, fmaf(t, kLog2e, -y))), -1.f);
                    const float p0 = exp2_approx(y);
                    x[j] = bk[r] == -INFINITY ? 0.f : fmaf(p0, yl * kV4Ln2, p0);
                } else {
                    const float t = fmaf(x[j], us, -l);
                    const float y = t * kLog2e;
                    const float yl = fmaxf(fmaf(t, kV4Log2eLo, fmaf(t, kLog2e, -y)), -1.f);
                    const float p0 = exp2_approx(y);
                    x[j] = fmaf(p0, yl * kV4Ln2, p0);
                }
            }
    }
}

/* ---- the products ------------------------------------------------------------------------------ */

/* S^T = A B^T over head_dim (64 x 64; A rows = this warpgroup's keys, B rows = the m-block's queries), both
 * K-major images: x = the corrections (A_hi B_lo, A_lo B_hi) then hi*hi of slices 0-1 in one chain; hi*hi of each
 * further pair of slices in a fresh step accumulator, added into x in fp32. */
template <int D>
__device__ __forceinline__ void product_s(float (&x)[32], uint32_t ah, uint32_t al, uint32_t bh, uint32_t bl) {
    constexpr int kS = D / 16;
    const uint64_t dah = smem_desc_sw128(opaque(ah)), dal = smem_desc_sw128(opaque(al));
    const uint64_t dbh = smem_desc_sw128(opaque(bh)), dbl = smem_desc_sw128(opaque(bl));
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kS; ++s) {
        wgmma_m64n64k16_f16_ss(x, f16_slice_desc(dah, s, kBwdTile), f16_slice_desc(dbl, s, kBwdTile), s > 0 ? 1 : 0);
        wgmma_m64n64k16_f16_ss(x, f16_slice_desc(dal, s, kBwdTile), f16_slice_desc(dbh, s, kBwdTile), 1);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s)
        wgmma_m64n64k16_f16_ss(x, f16_slice_desc(dah, s, kBwdTile), f16_slice_desc(dbh, s, kBwdTile), 1);
    wgmma_commit();
    float st[32];
#pragma unroll
    for (int s0 = 2; s0 < kS; s0 += 2) {
        wgmma_fence();
        wgmma_m64n64k16_f16_ss(st, f16_slice_desc(dah, s0, kBwdTile), f16_slice_desc(dbh, s0, kBwdTile), 0);
        wgmma_m64n64k16_f16_ss(st, f16_slice_desc(dah, s0 + 1, kBwdTile), f16_slice_desc(dbh, s0 + 1, kBwdTile), 1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(st);
        fence_regs(x);
#pragma unroll
        for (int i = 0; i < 32; ++i) x[i] += st[i];
    }
}

/* dP^T = A B^T over head_dim in one chain: the corrections, then hi*hi. */
template <int D>
__device__ __forceinline__ void product_dp(float (&x)[32], uint32_t ah, uint32_t al, uint32_t bh, uint32_t bl) {
    constexpr int kS = D / 16;
    const uint64_t dah = smem_desc_sw128(opaque(ah)), dal = smem_desc_sw128(opaque(al));
    const uint64_t dbh = smem_desc_sw128(opaque(bh)), dbl = smem_desc_sw128(opaque(bl));
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kS; ++s) {
        wgmma_m64n64k16_f16_ss(x, f16_slice_desc(dah, s, kBwdTile), f16_slice_desc(dbl, s, kBwdTile), s > 0 ? 1 : 0);
        wgmma_m64n64k16_f16_ss(x, f16_slice_desc(dal, s, kBwdTile), f16_slice_desc(dbh, s, kBwdTile), 1);
    }
#pragma unroll
    for (int s = 0; s < kS; ++s)
        wgmma_m64n64k16_f16_ss(x, f16_slice_desc(dah, s, kBwdTile), f16_slice_desc(dbh, s, kBwdTile), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(x);
}

/* X (an m64n64 accumulator, rows = keys) scaled per row by the power of two of its largest |X| (two quad
 * shuffles), split into the A fragments of the next product (regs 8 ks .. 8 ks + 7: k16 slice ks); ex: the two
 * rows' exponents, packed in one word (e + 128 in bytes 0 and 1: one register over the products). kSplit false:
 * hi only. */
template <bool kSplit>
__device__ __forceinline__ void split_rows(const float (&x)[32], uint32_t (&xh)[4][4], uint32_t (&xl)[4][4],
                                           uint32_t &ex) {
    float up[2];
    ex = 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float m = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) m = fmaxf(m, fmaxf(fabsf(x[4 * i + 2 * r]), fabsf(x[4 * i + 2 * r + 1])));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const int e = f16x2_exponent(m, kBwdTarget);
        up[r] = exp2_int(e);
        ex |= (uint32_t)(e + 128) << (8 * r);
    }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float a = x[8 * ks + 2 * j] * up[j & 1], b = x[8 * ks + 2 * j + 1] * up[j & 1];
            if constexpr (kSplit) {
                f16x2_split2(a, b, xh[ks][j], xl[ks][j]);
            } else {
                const __half2 hh = __floats2half2_rn(a, b);
                xh[ks][j] = *reinterpret_cast<const uint32_t *>(&hh);
                xl[ks][j] = 0u;
            }
        }
}

/* acc (+)= X B' for 64 columns of head_dim at a time: X the split A fragments (K = the m-block's 64 queries),
 * B' the image pair (64 queries x D) MN-major; a fresh tile per 64 columns, then acc += tile down[r] u, u the
 * record's unscale read from shared memory at u_s after the wait (not held in a register over the products).
 * @return a word of the result (for slot_release: it depends on u and on every value the products read). */
template <int D, bool kSplit>
__device__ __forceinline__ uint32_t last_product(float (&acc)[D / 64][32], const uint32_t (&xh)[4][4],
                                                 const uint32_t (&xl)[4][4], uint32_t ex, uint32_t u_s, uint32_t bh,
                                                 uint32_t bl, uint32_t lbo, uint32_t sbo) {
    uint32_t dep = 0;
#pragma unroll
    for (int t = 0; t < D / 64; ++t) {
        float tile[32];
        const uint64_t h = desc_mn(bh + t * kBwdTile * kSwizzleBytes, lbo, sbo);
        const uint64_t l = desc_mn(bl + t * kBwdTile * kSwizzleBytes, lbo, sbo);
        wgmma_fence();
        if constexpr (kSplit) {
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16_f16_rs<1>(tile, xl[ks], desc_at(h, ks * 2048), ks > 0);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16_f16_rs<1>(tile, xh[ks], desc_at(l, ks * 2048), 1);
        }
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
            wgmma_m64n64k16_f16_rs<1>(tile, xh[ks], desc_at(h, ks * 2048), kSplit || ks > 0 ? 1 : 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(tile);
        const float u = lds_f32(u_s);
        const float f0 = exp2_int(128 - (int)(ex & 0xFFu)) * u, f1 = exp2_int(128 - (int)((ex >> 8) & 0xFFu)) * u;
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[t][i] = fmaf(tile[i], (i >> 1) & 1 ? f1 : f0, acc[t][i]);
        dep = __float_as_uint(acc[t][0]); /* after u's load and the products */
    }
    return dep;
}

/* ---- the kernel --------------------------------------------------------------------------------- */

template <int D, bool kSplit, int kMask>
__global__ void __launch_bounds__(kThreads, 1) bwd_v4_kernel(const BwdV4Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();
#else
    constexpr bool kCausal = kMask == kV4Causal, kWindows = kMask == kV4Windows;
    constexpr bool kPeaky = kSplit && !kWindows; /* 3b's peaky class (kV4PeakyP) */
    using C = V4Config<D>;
    using R = BwdRecord<D>;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw_saddr = smem_u32(smem_raw);
    const uint32_t s0 = raw_saddr + ((kSwizzleAtomBytes - (raw_saddr % kSwizzleAtomBytes)) % kSwizzleAtomBytes);
    const uint32_t kv_full = s0 + C::kBarOff, kv_empty = kv_full + 8, q_full = kv_full + 16, q_empty = kv_full + 24,
                   do_full = kv_full + 32, do_empty = kv_full + 40;
    const int wg = threadIdx.x / kWg;

    if (threadIdx.x == 0) {
        mbar_init(kv_full, 1);
        mbar_init(kv_empty, kConsumers * kWg);
        mbar_init(q_full, 1);
        mbar_init(q_empty, kConsumers * kWg);
        mbar_init(do_full, 1);
        mbar_init(do_empty, kConsumers * kWg);
        fence_mbar_init();
        /* this CTA's units and the items that hold them, read from shared memory where needed; units <= 2^31 - 1
         * (the backward v4's limit): every unit index fits 32 bits */
        if constexpr (kWindows) { /* the table's total; a CTA may get no unit (its items 0 .. -1: no loop runs) */
            const int64_t units = v4t_units(p.table);
            const int64_t u0 = unit_start(blockIdx.x, units, p.ctas), u1 = unit_start(blockIdx.x + 1, units, p.ctas);
            sts_s32(s0 + C::kUnitsOff, (int)u0);
            sts_s32(s0 + C::kUnitsOff + 4, (int)u1);
            sts_s32(s0 + C::kUnitsOff + 8, u0 < u1 ? v4t_unit_item(p.table, u0) : 0);
            sts_s32(s0 + C::kUnitsOff + 12, u0 < u1 ? v4t_unit_item(p.table, u1 - 1) : -1);
        } else {
            const int64_t u0 = unit_start(blockIdx.x, p.units, p.ctas),
                          u1 = unit_start(blockIdx.x + 1, p.units, p.ctas);
            sts_s32(s0 + C::kUnitsOff, (int)u0);
            sts_s32(s0 + C::kUnitsOff + 4, (int)u1);
            sts_s32(s0 + C::kUnitsOff + 8, unit_item<kCausal>(u0, p.head_units, p.n_blocks, p.causal_off, p.tq));
            sts_s32(s0 + C::kUnitsOff + 12, unit_item<kCausal>(u1 - 1, p.head_units, p.n_blocks, p.causal_off, p.tq));
        }
    }
    __syncthreads();
    const uint32_t units_s = s0 + C::kUnitsOff; /* u0, u1, first item, last item */

    if (wg == 0) {
        /* ---- producer: per item K, V (two tiles each), per m-block Q then dO, one slot each ---- */
        setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            /* the CTA's units: whole items, and the parts of the items it shares with its neighbours */
            const int u0 = lds_s32(units_s), u1 = lds_s32(units_s + 4);
            const int first = lds_s32(units_s + 8), last = lds_s32(units_s + 12) + 1;
            int it = 0;
            for (int item = first, ii = 0; item < last; ++item, ++ii) {
                const int64_t bh = (int)((uint32_t)item / (uint32_t)p.n_blocks);
                const int n = item - (int)bh * p.n_blocks;
                const int t1 = min(2 * n + 1, p.tk - 1); /* a block past the last tile re-reads it (masked) */
                int m0, m1; /* its m-blocks here: from its first m-block or the CTA's first unit, to its last or the
                             * CTA's last unit */
                if constexpr (kWindows) {
                    int f0, l;
                    const int iu = (int)v4t_item(p.table, item, &f0, &l);
                    m0 = f0 + (u0 > iu ? u0 - iu : 0), m1 = min(l + 1, f0 + (u1 - iu));
                } else {
                    const int f0 = first_mblock<kCausal>(n, p.causal_off, p.tq);
                    const int iu =
                        (int)(bh * p.head_units + head_units<kCausal>(n, p.causal_off, p.tq)); /* its first unit */
                    m0 = f0 + (u0 > iu ? u0 - iu : 0), m1 = min(p.tq, f0 + (u1 - iu));
                }
                const int64_t bk = (int)((uint32_t)bh / (uint32_t)p.group); /* its key/value head b Hkv + hk */
                const unsigned char *kr0 = p.rec_k + (bk * p.tk + 2 * n) * (int64_t)R::kBytes;
                const unsigned char *kr1 = p.rec_k + (bk * p.tk + t1) * (int64_t)R::kBytes;
                const unsigned char *vr0 = p.rec_v + (bk * p.tk + 2 * n) * (int64_t)R::kBytes;
                const unsigned char *vr1 = p.rec_v + (bk * p.tk + t1) * (int64_t)R::kBytes;
                for (int m = m0; m < m1; ++m, ++it) {
                    const uint32_t par = (uint32_t)(it & 1);
                    const unsigned char *qr = p.rec_q + (bh * p.tq + m) * (int64_t)R::kBytes;
                    const unsigned char *dr = p.rec_do + (bh * p.tq + m) * (int64_t)R::kBytes;
                    mbar_wait(q_empty, par ^ 1u);
                    mbar_arrive_expect_tx(q_full, (uint32_t)(R::kImages + kBwdExtras));
                    bulk_copy_g2s(s0 + C::kQOff, qr, R::kImages, q_full);
                    bulk_copy_g2s(s0 + C::kQxOff, qr + R::kImages, kBwdExtras, q_full);
                    if (m == m0) {
                        mbar_wait(kv_empty, (uint32_t)(ii & 1) ^ 1u);
                        mbar_arrive_expect_tx(kv_full, (uint32_t)(4 * R::kImages));
                        bulk_copy_g2s(s0 + C::kKOff, kr0, R::kImages, kv_full);
                        bulk_copy_g2s(s0 + C::kKOff + R::kImages, kr1, R::kImages, kv_full);
                        bulk_copy_g2s(s0 + C::kVOff, vr0, R::kImages, kv_full);
                        bulk_copy_g2s(s0 + C::kVOff + R::kImages, vr1, R::kImages, kv_full);
                    }
                    mbar_wait(do_empty, par ^ 1u);
                    mbar_arrive_expect_tx(do_full, (uint32_t)(R::kImages + kBwdExtras));
                    bulk_copy_g2s(s0 + C::kDoOff, dr, R::kImages, do_full);
                    bulk_copy_g2s(s0 + C::kDxOff, dr + R::kImages, kBwdExtras, do_full);
                }
            }
        }
        return;
    }
    setmaxnreg_inc<240>();

    /* ---- consumer w: keys 64 w .. 64 w + 63 of each item ---- */
    const int w = __shfl_sync(0xffffffffu, wg, 0) - 1; /* through a shuffle: ptxas keeps it in a uniform register */
    const uint32_t kh = s0 + C::kKOff + (uint32_t)(w * R::kImages), kl = kh + R::kImage;
    const uint32_t vh = s0 + C::kVOff + (uint32_t)(w * R::kImages), vl = vh + R::kImage;
    const uint32_t qh = s0 + C::kQOff, ql = qh + R::kImage, doh = s0 + C::kDoOff, dol = doh + R::kImage;
    const uint32_t dsh = s0 + C::kDsOff, dsl = dsh + kDsImage;
    const uint32_t qx = s0 + C::kQxOff, dx = s0 + C::kDxOff, xch = s0 + C::kXchOff, qfac = s0 + C::kQfacOff;
    const uint32_t cst = s0 + C::kCstOff + 16u * w;

    uint32_t phase = 0; /* bit 0: the K/V barriers' parity (per item), bit 1: Q's and dO's (per m-block) */
    /* the items that hold the CTA's units, first to last (shared memory) */
#pragma unroll 1
    for (int item = lds_s32(units_s + 8); item <= lds_s32(units_s + 12); ++item) {
        const int64_t bh = (int)((uint32_t)item / (uint32_t)p.n_blocks); /* 32-bit: no division call */
        const int n = item - (int)bh * p.n_blocks;
        const int t1 = min(2 * n + 1, p.tk - 1);
        /* the tiles' scales, kept in shared memory (cst) for the m-blocks rather than in registers: u_k, u_v of
         * this warpgroup's tiles, kfac = u_k / u_ref (<= 1: this tile's dS for dQ against the common K scale);
         * written between two barriers of the warpgroup (the previous item's reads of cst are done) */
        if (w == 0) /* constant barrier ids: ptxas then counts 5 barriers, not 16 */
            named_bar_sync(3, kWg);
        else
            named_bar_sync(4, kWg);
        if (ctid() == 0) {
            const int64_t bk = (int)((uint32_t)bh / (uint32_t)p.group); /* the key/value head's records */
            const float uk0 =
                __ldg(reinterpret_cast<const float *>(p.rec_k + (bk * p.tk + 2 * n) * (int64_t)R::kBytes + R::kImages));
            const float uk1 =
                __ldg(reinterpret_cast<const float *>(p.rec_k + (bk * p.tk + t1) * (int64_t)R::kBytes + R::kImages));
            const float uv = __ldg(reinterpret_cast<const float *>(
                p.rec_v + (bk * p.tk + (w ? t1 : 2 * n)) * (int64_t)R::kBytes + R::kImages));
            const float uk = w ? uk1 : uk0, u_ref = fmaxf(uk0, uk1);
            sts_f32(cst, uk);
            sts_f32(cst + 4, uv);
            sts_f32(cst + 8, pow2_ratio(uk, u_ref));
            sts_f32(cst + 12, u_ref);
            if constexpr (kWindows) {
                /* the item's m-blocks in this CTA, [mb, me): from its first (the table's) or where the CTA's units
                 * begin, to its last or where they end */
                int f0, l;
                const int iu = (int)v4t_item(p.table, item, &f0, &l);
                const int u0 = lds_s32(units_s), u1 = lds_s32(units_s + 4);
                const int mb = f0 + (u0 > iu ? u0 - iu : 0), me = min(l + 1, f0 + (u1 - iu));
                /* dQ's store words (A, B) from the previous item's (v4w_cover): this item stores into m-block m
                 * when m < A or m >= B, and adds into the others */
                const uint32_t cov_s = s0 + C::kCovOff + 8u * w, m_s = s0 + C::kMOff + 16u * w;
                const bool first_of_head = item == lds_s32(units_s + 8) || n == 0;
                int a, bb;
                v4w_cover(first_of_head, p.tq, lds_s32(cov_s), lds_s32(m_s), lds_s32(m_s + 4), &a, &bb);
                sts_s32(cov_s, a);
                sts_s32(cov_s + 4, bb);
                sts_s32(m_s, mb);
                sts_s32(m_s + 4, me);
                /* the keys the item's batch attends: records past kv_count[b] are 0 (key padding), P = 0 there */
                sts_s32(m_s + 8, p.kv_count ? __ldg(p.kv_count + (int)((uint32_t)bh / (uint32_t)p.heads)) : p.seq_kv);
                /* bit 1: the item began and ended here (whole: its dK, dV to dk, dv); bit 0: else its part's slot
                 * is the CTA's last item's (2 g + 1), not its first's */
                sts_s32(m_s + 12, (iu >= u0 && me == l + 1 ? 2 : 0) | (iu > u0 ? 1 : 0));
            } else {
                /* the item's m-blocks in this CTA, [mb, me): from its first (causal: the first whose queries attend
                 * its keys) or where the CTA's units begin, to its last or where they end */
                const int f0 = first_mblock<kCausal>(n, p.causal_off, p.tq);
                const int iu = (int)(bh * p.head_units + head_units<kCausal>(n, p.causal_off, p.tq));
                const int u0 = lds_s32(units_s), u1 = lds_s32(units_s + 4);
                const int mb = f0 + (u0 > iu ? u0 - iu : 0), me = min(p.tq, f0 + (u1 - iu));
                sts_s32(s0 + C::kMOff + 16u * w, mb);
                sts_s32(s0 + C::kMOff + 16u * w + 4, me);
                /* the keys the item's batch attends: records past kv_count[b] are 0 (key padding), P = 0 there */
                sts_s32(s0 + C::kMOff + 16u * w + 8,
                        p.kv_count ? __ldg(p.kv_count + (int)((uint32_t)bh / (uint32_t)p.heads)) : p.seq_kv);
                /* dQ's coverage in the CTA's copy of the head: the earlier items of the head in this CTA pushed the
                 * m-blocks from `run` on (each from its first here to the last: every item but the CTA's last ends
                 * at tq - 1, and the last has none after it); this item stores into the m-blocks below that (cov) */
                const uint32_t cov_s = s0 + C::kCovOff + 8u * w;
                const bool first_of_head = item == lds_s32(units_s + 8) || n == 0;
                const int run = first_of_head ? p.tq : (int)__float_as_uint(lds_f32(cov_s + 4));
                sts_f32(cov_s, __uint_as_float((uint32_t)run));
                sts_f32(cov_s + 4, __uint_as_float((uint32_t)(mb < run ? mb : run)));
            }
        }
        const int key_w = kCtaKeys * n + kWgKeys * w; /* this warpgroup's first key */
        fence_acq_rel_gpu(); /* this thread's pushes of the previous item are ordered before this item's */
        if (w == 0)          /* cst written */
            named_bar_sync(3, kWg);
        else
            named_bar_sync(4, kWg);
        const bool partial = key_w + kWgKeys > lds_s32(s0 + C::kMOff + 16u * w + 8); /* keys past the batch's count */

        float dka[C::kHalves][32], dva[C::kHalves][32];
#pragma unroll
        for (int t = 0; t < C::kHalves; ++t)
#pragma unroll
            for (int i = 0; i < 32; ++i) dka[t][i] = dva[t][i] = 0.f;
        mbar_wait(kv_full, phase & 1u);
        phase ^= 1u;

        /* the item's m-blocks in this CTA (shared memory: [mb, me) of the item's units here) */
#pragma unroll 1
        for (int m = lds_s32(s0 + C::kMOff + 16u * w); m < lds_s32(s0 + C::kMOff + 16u * w + 4); ++m, phase ^= 2u) {
            const uint32_t par = phase >> 1;
            /* ---- 1. S^T = K_w Q^T ---- */
            float x[32];
            mbar_wait(q_full, par);
            product_s<D>(x, kh, kl, qh, ql);
            /* ---- 2. P = ex2((S - lse) log2 e); keys past seq_kv (key padding: the batch's kv_count): 0 ---- */
            const float uq = lds_f32(qx);
            const float us = lds_f32(cst) * uq;
            if (kWindows && p.bias) {
                /* the key bias of this thread's two key rows, from the staged row (L1 after the item's first
                 * m-block) */
                const float *bw = p.bias + (int64_t)(int)opaque((uint32_t)item) * kCtaKeys + kWgKeys * w +
                                  16 * cwarp() + (clane() / 4);
                const float bk[2] = {__ldg(bw), __ldg(bw + 8)};
                scores_to_p<true>(x, qx, us, bk);
            } else {
                const float bk[2] = {0.f, 0.f};
                scores_to_p<false>(x, qx, us, bk);
            }
            if (!kWindows && partial) {
                const int klim = lds_s32(s0 + C::kMOff + 16u * w + 8);
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (key_w + 16 * cwarp() + (clane() / 4) + 8 * r >= klim) {
#pragma unroll
                        for (int i = 0; i < 8; ++i) x[4 * i + 2 * r] = x[4 * i + 2 * r + 1] = 0.f;
                    }
            }
            if constexpr (kCausal) {
                /* query m 64 + col attends the keys up to m 64 + col + off: where a key of the warpgroup's lies
                 * past the first query's limit (the diagonal m-blocks), P = 0 past each query's */
                const int64_t lim = (int64_t)m * kM + p.causal_off;
                if (key_w + kWgKeys - 1 > lim) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int64_t key = key_w + 16 * cwarp() + (clane() / 4) + 8 * r;
#pragma unroll
                        for (int i = 0; i < 8; ++i)
#pragma unroll
                            for (int e = 0; e < 2; ++e)
                                if (key > lim + 8 * i + 2 * (clane() % 4) + e) x[4 * i + 2 * r + e] = 0.f;
                    }
                }
            }
            if constexpr (kWindows) {
                /* the m-block's rows' windows (the q record's words 64, 65: their largest lo, smallest hi) hold the
                 * warpgroup's 64 keys, or each element tests its row's window (win: two rows an int4) */
                const int lo_all = lds_s32(qx + kBwdRowData + 4 * kM), hi_all = lds_s32(qx + kBwdRowData + 4 * kM + 4);
                if (lo_all > key_w || hi_all < key_w + kWgKeys) {
                    const int bh_w = (int)(opaque((uint32_t)item) / (uint32_t)p.n_blocks);
                    const int b_w = (int)((uint32_t)bh_w / (uint32_t)p.heads);
                    const int4 *wr = reinterpret_cast<const int4 *>(p.win + ((int64_t)b_w * p.tq + m) * (2 * kM));
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const int4 w2 = __ldg(wr + 4 * i + (clane() % 4)); /* rows 8 i + 2 (lane % 4) + 0, 1 */
#pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            const int key = key_w + 16 * cwarp() + (clane() / 4) + 8 * r;
                            if (key < w2.x || key >= w2.y) x[4 * i + 2 * r] = 0.f;
                            if (key < w2.z || key >= w2.w) x[4 * i + 2 * r + 1] = 0.f;
                        }
                    }
                }
            }
            float pm = 0.f;
#pragma unroll
            for (int j = 0; j < 32; ++j) pm = fmaxf(pm, x[j]);
            /* kPeaky: P >= kV4PeakyP (3b's peaky class, its rows' |lse| tested there); else P >= 1/2 */
            const bool dominant = __any_sync(0xffffffffu, pm >= (kPeaky ? kV4PeakyP : 0.5f));

            /* ---- 3. dP^T = V_w dO^T; dS = P ((dP - Dl_hi) - Dl_lo) ---- */
            float ds[32];
            {
                /* dP's operand addresses depend on every P (dep = 0 at run time): ptxas then finishes P before it
                 * issues dP rather than holding S's step registers and dP's at once */
                uint32_t dep = 0;
#pragma unroll
                for (int j = 0; j < 32; ++j) dep |= __float_as_uint(x[j]);
                dep &= p.zero;
                mbar_wait(do_full, par);
                product_dp<D>(ds, vh + dep, vl + dep, doh + dep, dol + dep);
            }
            const float udo = lds_f32(dx);
            {
                const float ud = lds_f32(cst + 4) * udo;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float4 d4 = lds_f32x4(dx + kBwdRowData + 8 * (8 * i + 2 * (clane() % 4)));
#pragma unroll
                    for (int r = 0; r < 2; ++r)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int j = 4 * i + 2 * r + e;
                            const float dh = e ? d4.z : d4.x, dlo = e ? d4.w : d4.y;
                            ds[j] = x[j] * (fmaf(ds[j], ud, -dh) - dlo);
                        }
                }
            }
            /* ---- 3b. the dominant elements (P >= 1/2): P and dS from float64 dots of the caller's inputs ---- */
            if (dominant) {
                uint32_t flags = 0;
                if constexpr (kPeaky) {
                    /* P >= 1/2, or P >= kV4PeakyP in a row whose |lse| >= kV4PeakyLse (rows past seq_q: +inf, P 0) */
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const float2 l2 = lds_f32x2(qx + kBwdRowData + 4 * (8 * i + 2 * (clane() % 4)));
                        const float th0 = fabsf(l2.x) >= kV4PeakyLse ? kV4PeakyP : 0.5f;
                        const float th1 = fabsf(l2.y) >= kV4PeakyLse ? kV4PeakyP : 0.5f;
#pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            flags |= (x[4 * i + 2 * r] >= th0 ? 1u : 0u) << (4 * i + 2 * r);
                            flags |= (x[4 * i + 2 * r + 1] >= th1 ? 1u : 0u) << (4 * i + 2 * r + 1);
                        }
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < 32; ++j) flags |= (x[j] >= 0.5f ? 1u : 0u) << j;
                }
                uint32_t pending = __ballot_sync(0xffffffffu, flags != 0);
                const int bh_d = (int)(opaque((uint32_t)item) / (uint32_t)p.n_blocks);
                const int b = (int)((uint32_t)bh_d / (uint32_t)p.heads), h = bh_d - b * p.heads;
                while (pending) {
                    const int src = __ffs(pending) - 1;
                    const uint32_t fs = __shfl_sync(0xffffffffu, flags, src);
                    const int j = __ffs(fs) - 1;
                    const int key = key_w + 16 * cwarp() + (src >> 2) + 8 * ((j >> 1) & 1);
                    const int qcol = 8 * (j >> 2) + 2 * (src & 3) + (j & 1); /* query within the m-block */
                    const int qrow = m * kM + qcol;
                    constexpr int kPer = D / 32; /* elements of the dot per clane() */
                    const float *qp = p.q + b * p.q_b + h * p.q_h + (int64_t)qrow * p.q_t + kPer * clane();
                    const int hk = (int)((uint32_t)h / (uint32_t)p.group); /* the key/value head */
                    const int krow = p.kv_index ? __ldg(p.kv_index + (int64_t)b * p.seq_kv + key) : key; /* its row */
                    const float *kp = p.k + b * p.k_b + hk * p.k_h + (int64_t)krow * p.k_t + kPer * clane();
                    const float *gp = p.dout + b * p.do_b + h * p.do_h + (int64_t)qrow * p.do_t + kPer * clane();
                    const float *vp = p.v + b * p.v_b + hk * p.v_h + (int64_t)krow * p.v_t + kPer * clane();
                    double sd = 0.0, dd = 0.0;
#pragma unroll 1 /* rare: the fewest registers, not the shortest latency */
                    for (int d = 0; d < kPer; d += 2) {
                        const float2 a = __ldg(reinterpret_cast<const float2 *>(qp + d));
                        const float2 kk = __ldg(reinterpret_cast<const float2 *>(kp + d));
                        const float2 gg = __ldg(reinterpret_cast<const float2 *>(gp + d));
                        const float2 vv = __ldg(reinterpret_cast<const float2 *>(vp + d));
                        sd = fma((double)a.x, (double)kk.x, sd);
                        sd = fma((double)a.y, (double)kk.y, sd);
                        dd = fma((double)gg.x, (double)vv.x, dd);
                        dd = fma((double)gg.y, (double)vv.y, dd);
                    }
#pragma unroll
                    for (int o = 16; o > 0; o /= 2) {
                        sd += __shfl_xor_sync(0xffffffffu, sd, o);
                        dd += __shfl_xor_sync(0xffffffffu, dd, o);
                    }
                    if (clane() == src) {
                        const float lse_i = lds_f32(qx + kBwdRowData + 4 * qcol);
                        const float2 dl = lds_f32x2(dx + kBwdRowData + 8 * qcol);
                        double sb = sd * (double)p.scale; /* the score, with the key's bias in float64 */
                        if constexpr (kWindows)
                            if (p.bias) sb += (double)__ldg(p.bias + (int64_t)bh_d * p.n_blocks * kCtaKeys + key);
                        const float pe = expf((float)(sb - (double)lse_i));
                        const float dse = (float)((double)pe * (dd - ((double)dl.x + (double)dl.y)));
#pragma unroll
                        for (int jj = 0; jj < 32; ++jj)
                            if (jj == j) x[jj] = pe, ds[jj] = dse;
                        flags &= ~(1u << j);
                    }
                    pending = __ballot_sync(0xffffffffu, flags != 0);
                }
            }

            /* ---- 4. each query's power of two over the CTA's 128 keys (dS kfac_w): exponent bytes ---- */
            uint32_t ew[4];
            const float kfac = lds_f32(cst + 8);
#pragma unroll
            for (int k4 = 0; k4 < 4; ++k4) {
                uint32_t word = 0;
#pragma unroll
                for (int bb = 0; bb < 4; ++bb) {
                    const int i = 2 * k4 + bb / 2, e = bb & 1;
                    const float mx = fmaxf(fabsf(ds[4 * i + e]), fabsf(ds[4 * i + 2 + e])) * kfac;
                    word |= ((__float_as_uint(mx) >> 23) & 0xFFu) << (8 * bb);
                }
                ew[k4] = word;
            }
#pragma unroll
            for (int k4 = 0; k4 < 4; ++k4) {
                ew[k4] = __vmaxu4(ew[k4], __shfl_xor_sync(0xffffffffu, ew[k4], 4));
                ew[k4] = __vmaxu4(ew[k4], __shfl_xor_sync(0xffffffffu, ew[k4], 8));
                ew[k4] = __vmaxu4(ew[k4], __shfl_xor_sync(0xffffffffu, ew[k4], 16));
            }
            if ((clane() / 4) == 0)
                sts_u32x4(xch + 16 * ((w * 4 + cwarp()) * 4 + (clane() % 4)), make_uint4(ew[0], ew[1], ew[2], ew[3]));
            /* B1: the exponents of both warpgroups posted; and both have finished the previous m-block's dQ (its
             * reads of dS and of the row factors) */
            named_bar_sync(1, kConsumers * kWg);
            {
                uint4 a = lds_u32x4(xch + 16 * (clane() % 4));
#pragma unroll
                for (int ww = 1; ww < 8; ++ww) {
                    const uint4 o = lds_u32x4(xch + 16 * (ww * 4 + (clane() % 4)));
                    a.x = __vmaxu4(a.x, o.x), a.y = __vmaxu4(a.y, o.y), a.z = __vmaxu4(a.z, o.z),
                    a.w = __vmaxu4(a.w, o.w);
                }
                ew[0] = a.x, ew[1] = a.y, ew[2] = a.z, ew[3] = a.w;
            }
            /* ---- 5. dS 2^s kfac split, stored transposed [query][key] ---- */
            /* stmatrix: lanes 8 k .. 8 k + 7 address stored matrix k: k = 0, 1 hi (key rows 8 (k & 1)), k = 2, 3 lo */
            const uint32_t st_base =
                ((clane() / 8) < 2 ? dsh : dsl) +
                swizzled_offset_f16(clane() & 7, kWgKeys * w + 16 * cwarp() + 8 * ((clane() / 8) & 1), kM);
#pragma unroll
            for (int qb = 0; qb < 8; ++qb) {
                float upc[2];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int be = (int)((ew[qb / 2] >> (8 * (2 * (qb & 1) + e))) & 0xFFu);
                    const int ex = be ? 141 - be : 0; /* 14 - unbiased exponent: the largest to [2^14, 2^15) */
                    const int exc = max(-126, min(126, ex));
                    upc[e] = exp2_int(exc) * kfac;
                    if (w == 0 && cwarp() == 0 && (clane() / 4) == 0)
                        sts_f32(qfac + 4 * (8 * qb + 2 * (clane() % 4) + e), exp2_int(-exc));
                }
                uint32_t hi[2], lo[2];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float a = ds[4 * qb + 2 * r] * upc[0], bb = ds[4 * qb + 2 * r + 1] * upc[1];
                    if constexpr (kSplit) {
                        f16x2_split2(a, bb, hi[r], lo[r]);
                    } else {
                        const __half2 hh = __floats2half2_rn(a, bb);
                        hi[r] = *reinterpret_cast<const uint32_t *>(&hh);
                    }
                }
                if constexpr (kSplit)
                    stsm_x4_trans(st_base + 1024u * qb, hi[0], hi[1], lo[0], lo[1]);
                else
                    stsm_x2_trans(st_base + 1024u * qb, hi[0], hi[1]);
            }
            fence_proxy_async();

            /* ---- 6, 7. dK += dS^T (c Q), dV += P^T dO: fresh 64-column tiles, per-key-row scales ---- */
            /* The slots are released after the products that read them, on a word of the product's result: it
             * depends (through dS and P) on every value this thread loaded from the Q and dO slots (lse, Dl, the
             * unscales), so the arrival waits for those loads (slot_release). */
            if constexpr (kDkFirst) {
                uint32_t dep;
                {
                    uint32_t xh[4][4], xl[4][4];
                    uint32_t down;
                    split_rows<kSplit>(ds, xh, xl, down);
                    dep = last_product<D, kSplit>(dka, xh, xl, down, qx, qh, ql, p.v_lbo, p.v_sbo);
                }
                slot_release(q_empty, dep, p.zero);
                {
                    uint32_t xh[4][4], xl[4][4];
                    uint32_t down;
                    split_rows<kSplit>(x, xh, xl, down);
                    /* dV's result depends on P and dO's unscale; dO's Dl went into dS, which dK consumed above */
                    dep = last_product<D, kSplit>(dva, xh, xl, down, dx, doh, dol, p.v_lbo, p.v_sbo);
                }
                slot_release(do_empty, dep, p.zero);
            } else {
                uint32_t dep;
                {
                    uint32_t xh[4][4], xl[4][4];
                    uint32_t down;
                    split_rows<kSplit>(x, xh, xl, down);
                    dep = last_product<D, kSplit>(dva, xh, xl, down, dx, doh, dol, p.v_lbo, p.v_sbo);
                }
                {
                    uint32_t xh[4][4], xl[4][4];
                    uint32_t down;
                    split_rows<kSplit>(ds, xh, xl, down);
                    dep |= last_product<D, kSplit>(dka, xh, xl, down, qx, qh, ql, p.v_lbo, p.v_sbo);
                }
                slot_release(do_empty, dep, p.zero);
                slot_release(q_empty, dep, p.zero);
            }

            /* ---- 8. dQ partial = dS K over the CTA's 128 keys, pushed into the CTA's copy ---- */
            named_bar_sync(2, kConsumers * kWg); /* B2: both halves of dS stored */
            const float u_ref = lds_f32(cst + 12);
            /* the CTA's copy of this head's dQ: slot g + bh; the first item of the head in this CTA stores */
            const int item_o = (int)opaque((uint32_t)item); /* recomputed here, not held over the m-block */
            const int bh_o = (int)((uint32_t)item_o / (uint32_t)p.n_blocks);
            bool store;
            if constexpr (kWindows) {
                store = m < lds_s32(s0 + C::kCovOff + 8u * w) || m >= lds_s32(s0 + C::kCovOff + 8u * w + 4);
            } else {
                const int cov = (int)__float_as_uint(lds_f32(s0 + C::kCovOff + 8u * w));
                store = m < cov;
            }
            float *copy = p.copies + ((int64_t)blockIdx.x + bh_o) * ((int64_t)p.tq * kM * D);
            if constexpr (D == 128) {
                /* warpgroup w: 64 queries x head_dim columns 64 w .. 64 w + 63; A = dS K-major, B = K MN-major */
                float dq[32];
                const uint64_t ah = smem_desc_sw128(opaque(dsh)), al = smem_desc_sw128(opaque(dsl));
                const uint64_t bkd =
                    desc_mn((s0 + C::kKOff) + (uint32_t)(w * kBwdTile * kSwizzleBytes), p.v_lbo, p.v_sbo);
                wgmma_fence();
                if constexpr (kSplit) {
#pragma unroll
                    for (int ks = 0; ks < 8; ++ks)
                        wgmma_m64n64k16_f16_ss_tb(dq, f16_slice_desc(al, ks, kM),
                                                  desc_at(bkd, (ks / 4) * R::kImages + (ks % 4) * 2048), ks > 0);
#pragma unroll
                    for (int ks = 0; ks < 8; ++ks)
                        wgmma_m64n64k16_f16_ss_tb(dq, f16_slice_desc(ah, ks, kM),
                                                  desc_at(bkd, R::kImage + (ks / 4) * R::kImages + (ks % 4) * 2048), 1);
                }
#pragma unroll
                for (int ks = 0; ks < 8; ++ks)
                    wgmma_m64n64k16_f16_ss_tb(dq, f16_slice_desc(ah, ks, kM),
                                              desc_at(bkd, (ks / 4) * R::kImages + (ks % 4) * 2048),
                                              kSplit || ks > 0 ? 1 : 0);
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(dq);
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int qr = 16 * cwarp() + (clane() / 4) + 8 * r;
                    const float f = lds_f32(qfac + 4 * qr) * u_ref;
                    float *dst = copy + (int64_t)(m * kM + qr) * D + 64 * w + 2 * (clane() % 4);
#pragma unroll
                    for (int i = 0; i < 8; ++i)
                        push_f32x2(dst + 8 * i, dq[4 * i + 2 * r] * f, dq[4 * i + 2 * r + 1] * f, store);
                }
            } else {
                /* D = 64: dQ^T, warpgroup w: head_dim 64 x queries 32 w .. 32 w + 31; A = K^T (MN-major), B = dS^T
                 * (K-major: rows 32 w .. of the dS image) */
                float dq[16];
                const uint64_t kad = desc_mn((s0 + C::kKOff), p.v_lbo, p.v_sbo);
                const uint64_t bh_d = smem_desc_sw128(opaque(dsh) + (uint32_t)(32 * w * kSwizzleBytes));
                const uint64_t bl_d = smem_desc_sw128(opaque(dsl) + (uint32_t)(32 * w * kSwizzleBytes));
                wgmma_fence();
                if constexpr (kSplit) {
#pragma unroll
                    for (int ks = 0; ks < 8; ++ks)
                        wgmma_m64n32k16_f16_ss_ta(dq, desc_at(kad, (ks / 4) * R::kImages + (ks % 4) * 2048),
                                                  f16_slice_desc(bl_d, ks, kM), ks > 0);
#pragma unroll
                    for (int ks = 0; ks < 8; ++ks)
                        wgmma_m64n32k16_f16_ss_ta(dq, desc_at(kad, R::kImage + (ks / 4) * R::kImages + (ks % 4) * 2048),
                                                  f16_slice_desc(bh_d, ks, kM), 1);
                }
#pragma unroll
                for (int ks = 0; ks < 8; ++ks)
                    wgmma_m64n32k16_f16_ss_ta(dq, desc_at(kad, (ks / 4) * R::kImages + (ks % 4) * 2048),
                                              f16_slice_desc(bh_d, ks, kM), kSplit || ks > 0 ? 1 : 0);
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(dq);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int q0 = 32 * w + 8 * i + 2 * (clane() % 4);
                    const float2 f2 = lds_f32x2(qfac + 4 * q0);
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int d = 16 * cwarp() + (clane() / 4) + 8 * r;
                        float *dst = copy + (int64_t)(m * kM + q0) * D + d;
                        push_f32(dst, dq[4 * i + 2 * r] * (f2.x * u_ref), store);
                        push_f32(dst + D, dq[4 * i + 2 * r + 1] * (f2.y * u_ref), store);
                    }
                }
            }
        }

        /* ---- the item's dK, dV rows ---- */
        mbar_arrive(kv_empty); /* every wgmma reading K and V has completed (waited above) */
        const int b = (int)((uint32_t)bh / (uint32_t)p.heads), h = (int)bh - b * p.heads;
        /* stream-K: an item cut between CTAs leaves its part here in its slot (2 g: the CTA's first item, 2 g + 1:
         * its last), for bwd_v4_dkv_parts */
        int iu, u0; /* the item's first unit and the CTA's (kV4Windows: the flags word's bit 0 for iu > u0) */
        bool whole; /* began and ended here */
        if constexpr (kWindows) {
            const int fl = lds_s32(s0 + C::kMOff + 16u * w + 12);
            iu = fl & 1, u0 = 0;
            whole = (fl & 2) != 0;
        } else {
            iu = (int)(bh * p.head_units + head_units<kCausal>(n, p.causal_off, p.tq));
            u0 = lds_s32(units_s);
            whole = iu >= u0 && lds_s32(s0 + C::kMOff + 16u * w + 4) == p.tq;
        }
        float *part = nullptr;
        if (!whole) {
            uint32_t g;
            asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(g));
            const int64_t slot = 2 * (int64_t)g + (iu > u0 ? 1 : 0);
            part = p.partials + slot * 2 * kCtaKeys * (int64_t)D;
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int key = key_w + 16 * cwarp() + (clane() / 4) + 8 * r;
            if (key >= p.seq_kv) continue;
            const int64_t local = key - (int64_t)kCtaKeys * n;
            /* key padding with a mask: record row key's gradients go to row dkv_rows[key] (the rows no query attends
             * after the others: their dK, dV = 0 written there) */
            const int64_t row = whole && p.dkv_rows ? __ldg(p.dkv_rows + (int64_t)b * p.seq_kv + key) : key;
            float *dkr = whole ? p.dk + b * p.dk_b + h * p.dk_h + row * p.dk_t : part + local * D;
            float *dvr = whole ? p.dv + b * p.dv_b + h * p.dv_h + row * p.dv_t : part + (kCtaKeys + local) * D;
#pragma unroll
            for (int t = 0; t < C::kHalves; ++t)
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int col = 64 * t + 8 * i + 2 * (clane() % 4);
                    *reinterpret_cast<float2 *>(dkr + col) =
                        make_float2(dka[t][4 * i + 2 * r], dka[t][4 * i + 2 * r + 1]);
                    *reinterpret_cast<float2 *>(dvr + col) =
                        make_float2(dva[t][4 * i + 2 * r], dva[t][4 * i + 2 * r + 1]);
                }
        }
    }
#endif
}

/* Whether the copy of CTA g (its units [s, e) of the head, relative to the head's first unit) holds m-block m,
 * without the table (unmasked and causal: the closed forms): the first block n <= nm (the last block whose m-blocks
 * reach m) whose unit of m-block m, u(n) = head_units(n) + m - first_mblock(n) (never decreasing in n), is at s or
 * after is below e. */
template <bool kCausal>
__device__ __forceinline__ bool v4_copy_holds(int m, int nm, int64_t s, int64_t e, int64_t causal_off, int tq) {
    int a = 0, z = nm + 1;
    while (a < z) {
        const int mid = a + (z - a) / 2;
        if (head_units<kCausal>(mid, causal_off, tq) + m - first_mblock<kCausal>(mid, causal_off, tq) >= s)
            z = mid;
        else
            a = mid + 1;
    }
    return a <= nm && head_units<kCausal>(a, causal_off, tq) + m - first_mblock<kCausal>(a, causal_off, tq) < e;
}

/* dq = c * (the head's private copies summed in ascending CTA order): one float4 of one row per thread. A copy
 * holds the m-blocks of its CTA's units of the head: m-block m when one of them is unit head_units(n) + m -
 * first_mblock(n) of a block n with first_mblock(n) <= m (v4_copy_holds); the copies that do not hold a row's
 * m-block take no part in its sum (a row no copy holds attends no key: dq 0). kV4Windows: the same from the table
 * (v4t_mblock_blocks, v4t_copy_holds: block n reaches m when first(n) <= m <= last(n)), over the table's units.
 * A block's rows (8 at D = 128, 16 at D = 64) lie in one m-block of one head, so which of the head's copies hold
 * it is found once per block, into shared memory (thread 0 the head's CTAs, then a thread per copy), and every
 * thread sums the flagged copies in ascending order. Reads copies [slot][tq 64][D] (slot g + bh), and the table;
 * writes dq [B, H, seq_q, D] through its strides, every row below seq_q. */
template <int D, int kMask>
__global__ void __launch_bounds__(256)
    bwd_v4_dq_reduce(const float *copies, float *dq, int64_t dq_b, int64_t dq_h, int64_t dq_t, int heads, int seq_q,
                     int rows_pad, int n_blocks, int64_t causal_off, int64_t units, int ctas, int64_t per_head,
                     float scale, const V4Table table) {
    constexpr bool kCausal = kMask == kV4Causal;
    const int bh = blockIdx.y;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t row = idx / (D / 4);
    const int c4 = (int)(idx % (D / 4));
    const int tq = rows_pad / kM, m = (int)((int64_t)blockIdx.x * blockDim.x / (D / 4) / kM);
    __shared__ int span[3];                  /* g_lo, copies, nm (the last block reaching m; closed forms) */
    __shared__ unsigned char held[kMaxCtas]; /* copy g_lo + t holds m-block m */
    if (threadIdx.x == 0) {
        int64_t base, per, all;
        int nm = -1;
        if constexpr (kMask == kV4Windows) {
            base = v4t_head_base(table, bh, &per), all = v4t_units(table);
        } else {
            base = (int64_t)bh * per_head, per = per_head, all = units;
            int lo = 0, hi = n_blocks - 1; /* the blocks whose m-blocks reach m: 0 .. nm (first_mblock never
                                            * decreases) */
            while (lo <= hi) {
                const int mid = lo + (hi - lo) / 2;
                if (first_mblock<kCausal>(mid, causal_off, tq) <= m)
                    nm = mid, lo = mid + 1;
                else
                    hi = mid - 1;
            }
        }
        const int g_lo = unit_cta(base, all, ctas), g_hi = unit_cta(base + per - 1, all, ctas);
        span[0] = g_lo, span[1] = g_hi - g_lo + 1, span[2] = nm;
    }
    __syncthreads();
    const int g_lo = span[0], copies_n = span[1];
    for (int t = (int)threadIdx.x; t < copies_n; t += (int)blockDim.x) {
        const int gg = g_lo + t;
        bool holds;
        if constexpr (kMask == kV4Windows) {
            int64_t per;
            const int64_t base = v4t_head_base(table, bh, &per), all = v4t_units(table);
            int na, nb;
            v4t_mblock_blocks(table, bh / heads, m, &na, &nb);
            const int64_t s = max(unit_start(gg, all, ctas), base), e = min(unit_start(gg + 1, all, ctas), base + per);
            holds = na <= nb && v4t_copy_holds(table, bh / heads, base, m, na, nb, s, e);
        } else {
            const int64_t base = (int64_t)bh * per_head;
            const int64_t s = max(unit_start(gg, units, ctas), base) - base;
            const int64_t e = min(unit_start(gg + 1, units, ctas), base + per_head) - base;
            holds = span[2] >= 0 && v4_copy_holds<kCausal>(m, span[2], s, e, causal_off, tq);
        }
        held[t] = holds ? 1 : 0;
    }
    __syncthreads();
    if (row >= seq_q) return;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int t = 0; t < copies_n; ++t) {
        if (!held[t]) continue;
        const float4 v =
            __ldg(reinterpret_cast<const float4 *>(copies + ((int64_t)(g_lo + t + bh) * rows_pad + row) * D) + c4);
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
    }
    const int b = bh / heads, h = bh % heads;
    float *dst = dq + b * dq_b + h * dq_h + (int64_t)row * dq_t + 4 * c4;
    *reinterpret_cast<float4 *>(dst) = make_float4(acc.x * scale, acc.y * scale, acc.z * scale, acc.w * scale);
}

/* dK, dV of the items cut between CTAs: the parts in their slots summed in CTA order (kPartsSlices blocks per cut
 * item, at the first boundary inside it, each a slice of its 2 x 128 x D elements: one block of 256 threads looping
 * over all of them waited on its loads 16-32 times in turn, ~19 us at (1,24,256,64) beside the fused kernel's 22).
 * reads partials [2 ctas][2][128 keys][D]; writes the item's dk, dv rows below seq_kv through their strides (record
 * row key to row rows[b seq_kv + key] where rows is not NULL: key padding with a mask). kV4Windows: the items and units
 * from the table, over its total (`units` the host's bound): a CTA with no unit wrote no part and is passed over. */
template <int D, int kMask>
__global__ void __launch_bounds__(256)
    bwd_v4_dkv_parts(const float *partials, float *dk, float *dv, int64_t dk_b, int64_t dk_h, int64_t dk_t,
                     int64_t dv_b, int64_t dv_h, int64_t dv_t, int heads, int seq_kv, int n_blocks, int tq,
                     int64_t units, int ctas, int64_t per_head, int64_t causal_off, const int *rows,
                     const V4Table table) {
    constexpr bool kCausal = kMask == kV4Causal;
    const int bnd = (int)blockIdx.x + 1; /* the boundary between CTAs bnd - 1 and bnd */
    if constexpr (kMask == kV4Windows) {
        units = v4t_units(table);
        if (unit_start(bnd, units, ctas) >= units) return; /* the CTAs from bnd on run no unit */
    }
    const int64_t ub = unit_start(bnd, units, ctas);
    int item;
    if constexpr (kMask == kV4Windows)
        item = v4t_unit_item(table, ub);
    else
        item = unit_item<kCausal>(ub, per_head, n_blocks, causal_off, tq);
    const int bh = item / n_blocks, n = item % n_blocks, b = bh / heads, h = bh % heads;
    int64_t iu, len;
    if constexpr (kMask == kV4Windows) {
        int f, l;
        iu = v4t_item(table, item, &f, &l);
        len = l - f + 1;
    } else {
        iu = (int64_t)bh * per_head + head_units<kCausal>(n, causal_off, tq);
    }
    if (ub == iu) return;                              /* no item cut here */
    if (unit_start(bnd - 1, units, ctas) > iu) return; /* an earlier boundary cuts this item: its block sums it */
    if constexpr (kMask != kV4Windows) len = tq - first_mblock<kCausal>(n, causal_off, tq);
    const int g_first = unit_cta(iu, units, ctas), g_last = unit_cta(iu + len - 1, units, ctas);
    constexpr int kRow4 = D / 4;
    /* the parts' slots, once per block (not per element): CTA g's is 2 g + 1 where the item is its last and 2 g
     * where it is its first; -1 for a CTA with no unit (windows: fewer units than CTAs), which wrote none */
    __shared__ int slots[kMaxCtas];
    for (int t = (int)threadIdx.x; t <= g_last - g_first; t += (int)blockDim.x) {
        const int64_t ug = unit_start(g_first + t, units, ctas);
        slots[t] = ug == unit_start(g_first + t + 1, units, ctas) ? -1 : 2 * (g_first + t) + (iu > ug ? 1 : 0);
    }
    __syncthreads();
    for (int idx = (int)(blockIdx.y * blockDim.x + threadIdx.x); idx < 2 * kCtaKeys * kRow4;
         idx += (int)(gridDim.y * blockDim.x)) {
        const int tensor = idx / (kCtaKeys * kRow4), local = idx / kRow4 % kCtaKeys, c4 = idx % kRow4;
        const int64_t key = (int64_t)kCtaKeys * n + local;
        if (key >= seq_kv) continue;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int t = 0; t <= g_last - g_first; ++t) {
            const int slot = slots[t];
            if (slot < 0) continue;
            const float4 v = __ldg(
                reinterpret_cast<const float4 *>(partials + ((slot * 2 + tensor) * kCtaKeys + local) * (int64_t)D) +
                c4);
            acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
        }
        const int64_t row = rows ? __ldg(rows + (int64_t)b * seq_kv + key) : key;
        float *dst = tensor ? dv + b * dv_b + h * dv_h + row * dv_t : dk + b * dk_b + h * dk_h + row * dk_t;
        *reinterpret_cast<float4 *>(dst + 4 * c4) = acc;
    }
}

/* Blocks per cut item of bwd_v4_dkv_parts: 2 x 128 x D / 4 float4 elements over 8 x 256 threads, 2 (D = 64) or 4
 * (D = 128) each. */
constexpr unsigned kPartsSlices = 8;

/* Grouped-query heads: dK, dV of the key/value head (b, hk) = the sum over its group's query heads h = hk G + g of
 * their parts (the fused kernel's dK, dV of each query head, [B H][seq_kv][D] each, dk's then dv's), g ascending:
 * deterministic. One float4 of one row per thread; grid (ceil(seq_kv D / 4 / 256), B Hkv, 2: dk, dv). Key padding
 * with a mask: record row r goes to row rows[b seq_kv + r] (rows NULL: row r). */
template <int D>
__global__ void __launch_bounds__(256)
    bwd_v4_group_sum(const float *parts, float *dk, float *dv, int64_t dk_b, int64_t dk_h, int64_t dk_t, int64_t dv_b,
                     int64_t dv_h, int64_t dv_t, int heads, int kv_heads, int seq_kv, int64_t tensor_floats,
                     const int *rows) {
    constexpr int kRow4 = D / 4;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)seq_kv * kRow4) return;
    const int row = (int)(idx / kRow4), c4 = (int)(idx % kRow4);
    const int bk = blockIdx.y, b = bk / kv_heads, hk = bk % kv_heads, group = heads / kv_heads;
    const float *src =
        parts + (blockIdx.z ? tensor_floats : 0) + ((int64_t)(b * heads + hk * group) * seq_kv + row) * D;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int g = 0; g < group; ++g) {
        const float4 v = __ldg(reinterpret_cast<const float4 *>(src + (int64_t)g * seq_kv * D) + c4);
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
    }
    const int64_t at = rows ? __ldg(rows + (int64_t)b * seq_kv + row) : row;
    float *dst = blockIdx.z ? dv + b * dv_b + hk * dv_h + at * dv_t : dk + b * dk_b + hk * dk_h + at * dk_t;
    *reinterpret_cast<float4 *>(dst + 4 * c4) = acc;
}

/* The persistent grid: min(132, SMs, units) CTAs over the units (128-key block, 64-query m-block) of every head,
 * item-major (every head the same: per_head of them; causal, each block's from its first attending m-block). */
struct V4Grid {
    int n_blocks, ctas;
    int64_t per_head, units;
};

template <bool kCausal>
inline V4Grid v4_grid(int64_t bh, int64_t seq_q, int64_t seq_kv, int64_t causal_off, int sms) {
    V4Grid gr;
    gr.n_blocks = (int)((seq_kv + kCtaKeys - 1) / kCtaKeys);
    const int tq = (int)((seq_q + kM - 1) / kM);
    gr.per_head = head_units<kCausal>(gr.n_blocks, causal_off, tq);
    gr.units = bh * gr.per_head;
    const int64_t g = sms < kMaxCtas ? sms : kMaxCtas;
    gr.ctas = (int)(g < gr.units ? g : gr.units);
    if (gr.ctas < 1) gr.ctas = 1;
    return gr;
}

/* The floats of the cut items' dK, dV parts ([2 kMaxCtas][2][128][D]), after the copies. */
inline int64_t v4_parts_floats(int64_t head_dim) { return 2 * (int64_t)kMaxCtas * 2 * kCtaKeys * head_dim; }

/* Byte offsets in the workspace: the records (backward_v4_records.cuh), then the copies (256-byte aligned), the
 * parts of the cut items, and with grouped heads the query heads' dK, dV parts (bwd_v4_group_sum). */
inline int64_t v4_copies_offset(int64_t bh, int64_t bhk, int64_t seq_q, int64_t seq_kv, int64_t head_dim) {
    const int64_t rec = bwd_record_layout(bh, bhk, seq_q, seq_kv, head_dim).bytes;
    return (rec + 255) / 256 * 256;
}

inline int64_t v4_copy_floats(int64_t seq_q, int64_t head_dim) {
    return (seq_q + kBwdTile - 1) / kBwdTile * kBwdTile * head_dim;
}

template <int D, bool kSplit, int kMask>
cudaError_t v4_launch(const BwdV4Params &p, int ctas, cudaStream_t stream) {
    auto kernel = bwd_v4_kernel<D, kSplit, kMask>;
    const int smem = V4Config<D>::kSmemBytes;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    kernel<<<(unsigned)ctas, kThreads, smem, stream>>>(p);
    return cudaGetLastError();
}

bool aligned16(const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

} /* namespace */

extern "C" cudaError_t bwd_v4_split_launch(const jattn_cuda_args *a, void *records, const int *win, float *bias_ws,
                                           cudaStream_t stream);
extern "C" cudaError_t bwd_v4_windows_launch(const jattn_cuda_args *a, void *tables, cudaStream_t stream);

/* The floats of the query heads' dK, dV parts with grouped heads (none without). */
inline int64_t v4_group_floats(int64_t bh, int64_t bhk, int64_t seq_kv, int64_t head_dim) {
    return bhk < bh ? 2 * bh * seq_kv * head_dim : 0;
}

/* The window tables' byte offset (backward_v4_windows.cuh: v4w_layout's region), after the floats. */
inline int64_t v4_tables_offset(int64_t bh, int64_t bhk, int64_t seq_q, int64_t seq_kv, int64_t head_dim) {
    const int64_t end = v4_copies_offset(bh, bhk, seq_q, seq_kv, head_dim) +
                        ((kMaxCtas + bh - 1) * v4_copy_floats(seq_q, head_dim) + v4_parts_floats(head_dim) +
                         v4_group_floats(bh, bhk, seq_kv, head_dim)) *
                            (int64_t)sizeof(float);
    return (end + 255) / 256 * 256; /* the rows' windows are read as int4 */
}

/* The staged key bias's byte offset ([B H][N 128] floats, written by bwd_v4_bias), after the tables. */
inline int64_t v4_bias_offset(int64_t batch, int64_t bh, int64_t bhk, int64_t seq_q, int64_t seq_kv, int64_t head_dim) {
    const int64_t end = v4_tables_offset(bh, bhk, seq_q, seq_kv, head_dim) + v4w_layout(batch, seq_q, seq_kv).bytes;
    return (end + 255) / 256 * 256;
}

inline int64_t v4_bias_floats(int64_t bh, int64_t seq_kv) {
    return bh * ((seq_kv + kCtaKeys - 1) / kCtaKeys) * kCtaKeys;
}

extern "C" size_t jattn_cuda_bwd_v4_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q,
                                                    int64_t seq_kv, int64_t head_dim) {
    const int64_t bh = batch * heads, bhk = batch * (kv_heads ? kv_heads : heads);
    /* every call counts the tables' and the staged bias's bytes (the size does not depend on the mask) */
    const size_t v4 = (size_t)(v4_bias_offset(batch, bh, bhk, seq_q, seq_kv, head_dim) +
                               v4_bias_floats(bh, seq_kv) * (int64_t)sizeof(float));
    const size_t v3 = jattn_cuda_bwd_v3_workspace_bytes(batch, heads, seq_q, seq_kv, head_dim);
    return v4 > v3 ? v4 : v3; /* a call v4 does not take runs v3 in the same workspace */
}

/* jattn_cuda_bwd_v4_call_refused, the launcher's guard: sm90_contract.c (plain C, with the plan's refusal). */

/* One instance's launches on the stream: the fused kernel (f32: P's exponent as a pair), dq = c * its copies
 * summed (bwd_v4_dq_reduce), and where the grid cut items (more than one CTA) their dK, dV parts summed
 * (bwd_v4_dkv_parts). */
template <int D, int kMask>
cudaError_t v4_run(const BwdV4Params &p, const V4Grid &gr, const jattn_cuda_args *a, bool f32, cudaStream_t stream) {
    cudaError_t err =
        f32 ? v4_launch<D, true, kMask>(p, gr.ctas, stream) : v4_launch<D, false, kMask>(p, gr.ctas, stream);
    if (err != cudaSuccess) return err;
    const dim3 rgrid((unsigned)((a->seq_q * (D / 4) + 255) / 256), (unsigned)(a->batch * a->heads));
    bwd_v4_dq_reduce<D, kMask><<<rgrid, 256, 0, stream>>>(
        p.copies, a->dq, a->dq_strides.batch, a->dq_strides.head, a->dq_strides.token, p.heads, p.seq_q,
        p.tq * kBwdTile, gr.n_blocks, p.causal_off, gr.units, gr.ctas, gr.per_head, a->scale, p.table);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    if (gr.ctas > 1) { /* into dk, dv, or with grouped heads the query heads' parts (p.dk, p.dv and strides) */
        bwd_v4_dkv_parts<D, kMask><<<dim3((unsigned)(gr.ctas - 1), kPartsSlices), 256, 0, stream>>>(
            p.partials, p.dk, p.dv, p.dk_b, p.dk_h, p.dk_t, p.dv_b, p.dv_h, p.dv_t, p.heads, p.seq_kv, gr.n_blocks,
            p.tq, gr.units, gr.ctas, gr.per_head, p.causal_off, p.dkv_rows, p.table);
        err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    if (p.group > 1) {
        const int kv_heads = p.heads / p.group;
        const dim3 sgrid((unsigned)(((int64_t)p.seq_kv * (D / 4) + 255) / 256), (unsigned)(a->batch * kv_heads), 2u);
        bwd_v4_group_sum<D><<<sgrid, 256, 0, stream>>>(p.dk, a->dk, a->dv, a->dk_strides.batch, a->dk_strides.head,
                                                       a->dk_strides.token, a->dv_strides.batch, a->dv_strides.head,
                                                       a->dv_strides.token, p.heads, kv_heads, p.seq_kv,
                                                       a->batch * p.heads * (int64_t)p.seq_kv * D, p.kv_index);
        err = cudaGetLastError();
    }
    return err;
}

/* The backward v4 on `stream`: the records (its pre-pass, backward_v4_split_f16x2.cu), then v4_run: the fused
 * kernel, the dQ reduction, the cut items' dK, dV sums. */
extern "C" int jattn_cuda_launch_bwd_v4(const jattn_cuda_args *a, void *workspace, void *stream_ptr) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    if (jattn_cuda_bwd_v4_call_refused(a) || !workspace || !aligned16(workspace) || !a->lse)
        return (int)cudaErrorInvalidValue;
    int dev = 0;
    cudaError_t err = sm90_current_device(&dev);
    if (err != cudaSuccess) return (int)err;
    int sms = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return (int)err;
    const jattn_cuda_args *f = a;
    const int64_t bh = f->batch * f->heads, kv_heads = f->kv_heads ? f->kv_heads : f->heads;
    const int64_t bhk = f->batch * kv_heads;
    const BwdRecordLayout L = bwd_record_layout(bh, bhk, f->seq_q, f->seq_kv, f->head_dim);
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    const bool causal = f->causal != JATTN_CAUSAL_NONE;
    /* the window table where causal's closed form does not give the units: segments, blocks, key padding with
     * causal, and top-left causal with seq_q < seq_kv (keys no query attends); and with a key bias (alone: every
     * row's window all of its batch's keys), whose kernel instance is the windows' */
    const bool windows = f->cu_seqlens_q || f->block_q || f->key_bias ||
                         (causal && (f->kv_count || (f->causal == JATTN_CAUSAL_TOP_LEFT && f->seq_q < f->seq_kv)));
    int *tables = reinterpret_cast<int *>(ws + v4_tables_offset(bh, bhk, f->seq_q, f->seq_kv, f->head_dim));
    const V4wLayout TL = v4w_layout(f->batch, f->seq_q, f->seq_kv);
    if (windows) {
        err = bwd_v4_windows_launch(a, tables, stream);
        if (err != cudaSuccess) return (int)err;
    }
    float *bias_ws =
        f->key_bias
            ? reinterpret_cast<float *>(ws + v4_bias_offset(f->batch, bh, bhk, f->seq_q, f->seq_kv, f->head_dim))
            : nullptr;
    err = bwd_v4_split_launch(a, workspace, windows ? tables + TL.win : nullptr, bias_ws, stream);
    if (err != cudaSuccess) return (int)err;

    const int64_t causal_off = f->causal == JATTN_CAUSAL_BOTTOM_RIGHT ? f->seq_kv - f->seq_q : 0;
    /* with the table the grid is the unmasked call's (the host's bound on the device-side total) */
    const V4Grid gr = causal && !windows ? v4_grid<true>(bh, f->seq_q, f->seq_kv, causal_off, sms)
                                         : v4_grid<false>(bh, f->seq_q, f->seq_kv, causal_off, sms);
    BwdV4Params p;
    p.rec_q = ws + L.q, p.rec_do = ws + L.dout, p.rec_k = ws + L.k, p.rec_v = ws + L.v;
    p.copies = reinterpret_cast<float *>(ws + v4_copies_offset(bh, bhk, f->seq_q, f->seq_kv, f->head_dim));
    p.partials = p.copies + (kMaxCtas + bh - 1) * v4_copy_floats(f->seq_q, f->head_dim);
    p.group = (int)(f->heads / kv_heads);
    if (p.group > 1) { /* each query head's dK, dV into its part ([B H][seq_kv][D]), summed by bwd_v4_group_sum */
        p.dk = p.partials + v4_parts_floats(f->head_dim);
        p.dv = p.dk + bh * f->seq_kv * f->head_dim;
        p.dk_b = p.dv_b = f->heads * f->seq_kv * f->head_dim;
        p.dk_h = p.dv_h = f->seq_kv * f->head_dim;
        p.dk_t = p.dv_t = f->head_dim;
    } else {
        p.dk = a->dk, p.dv = a->dv;
        p.dk_b = a->dk_strides.batch, p.dk_h = a->dk_strides.head, p.dk_t = a->dk_strides.token;
        p.dv_b = a->dv_strides.batch, p.dv_h = a->dv_strides.head, p.dv_t = a->dv_strides.token;
    }
    p.kv_count = f->kv_count, p.kv_index = f->kv_index;
    p.dkv_rows = p.group > 1 ? nullptr : f->kv_index; /* with grouped heads bwd_v4_group_sum maps the rows */
    p.q = f->q, p.k = f->k, p.v = f->v, p.dout = a->dout;
    p.q_b = f->q_strides.batch, p.q_h = f->q_strides.head, p.q_t = f->q_strides.token;
    p.k_b = f->k_strides.batch, p.k_h = f->k_strides.head, p.k_t = f->k_strides.token;
    p.v_b = f->v_strides.batch, p.v_h = f->v_strides.head, p.v_t = f->v_strides.token;
    p.do_b = a->dout_strides.batch, p.do_h = a->dout_strides.head, p.do_t = a->dout_strides.token;
    p.scale = f->scale;
    p.heads = (int)f->heads;
    p.seq_q = (int)f->seq_q;
    p.seq_kv = (int)f->seq_kv;
    p.tq = (int)((f->seq_q + kBwdTile - 1) / kBwdTile);
    p.tk = (int)((f->seq_kv + kBwdTile - 1) / kBwdTile);
    p.n_blocks = gr.n_blocks;
    /* MN-major, 128B swizzle: LBO = bytes between 64-column blocks (one 8 KB block of a 64-row image), SBO = bytes
     * between 8-row groups (1024) */
    p.v_lbo = (uint32_t)(kBwdTile * kSwizzleBytes) >> 4;
    p.v_sbo = (uint32_t)kSwizzleAtomBytes >> 4;
    p.zero = 0;
    p.causal_off = causal_off;
    p.units = gr.units;
    p.ctas = gr.ctas;
    p.head_units = gr.per_head;
    p.win = tables + TL.win;
    p.table.pre = tables + TL.pre;
    p.table.range = tables + TL.range;
    p.table.batch = (int)f->batch;
    p.table.heads = p.heads;
    p.table.n_blocks = gr.n_blocks;
    p.bias = bias_ws;
    const bool f32 = f->precision == JATTN_PRECISION_F32;
    if (f->head_dim == 128)
        err = windows  ? v4_run<128, kV4Windows>(p, gr, a, f32, stream)
              : causal ? v4_run<128, kV4Causal>(p, gr, a, f32, stream)
                       : v4_run<128, kV4Plain>(p, gr, a, f32, stream);
    else
        err = windows  ? v4_run<64, kV4Windows>(p, gr, a, f32, stream)
              : causal ? v4_run<64, kV4Causal>(p, gr, a, f32, stream)
                       : v4_run<64, kV4Plain>(p, gr, a, f32, stream);
    return (int)err;
}
