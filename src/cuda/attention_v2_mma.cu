/* attention v2: flash attention (FlashAttention-2 style) on tensor cores with
 * mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, operands split into TF32 big + small
 * parts (3xTF32: big*big + big*small + small*big, fp32 accumulation).
 *   f32 mode:  3xTF32 for Q K^T and for P V.
 *   tf32 mode: 3xTF32 for Q K^T (the softmax turns a logit error e into a relative weight error
 *              e, and one TF32 product misses rel_l2 1e-3 on sharp rows), one TF32 product for P V.
 *
 * Reads  q [B,H,Sq,D], k and v [B,H,Skv,D] through element strides (head_dim contiguous);
 *        16-byte cp.async when every base pointer is 16-byte aligned and every stride is a
 *        multiple of 4 elements, else 4-byte cp.async (pointers need only 4-byte alignment);
 * writes out [B,H,Sq,D] through its strides (token-major directly), lse [B,H,Sq] contiguous.
 * D % 8 == 0, D <= 256; the kernel is compiled for a head-dim tile DT in {32, 64, 128, 256}
 * and zero-fills columns D..DT-1 (they add nothing to Q K^T and are never stored).
 *
 * Design: a block of WARPS warps owns BR = 16 * WARPS query rows of one (b,h), each warp 16
 * rows. The Q tile stays in shared memory; K and V tiles of BC keys are double-buffered in
 * shared memory by cp.async (rows beyond seq_q / seq_kv zero-filled by the copy itself, keys
 * beyond seq_kv masked to -inf). Shared rows are padded to DT + 4 floats, which makes the A
 * (Q), B (K) and relabelled B (V) fragment reads conflict-free.
 *   S = Q K^T: per warp a 16 x BC tile in registers (m16n8 accumulators), in natural units
 *     (q pre-scaled by the scale, exact when it is a power of two). For each k-step of 8
 *     head-dim columns the Q fragment is split once and reused over the BC/8 key sub-tiles.
 *     big*big accumulates apart from the two correction products; they are added in fp32 at
 *     the end of the tile (an infinite big*big is kept as is: its corrections are NaN).
 *   online softmax: row max over the quad by shuffles; weights exp2((s - max) * log2 e), so
 *     s - max is exact when s is; per-thread partial row sums, Kahan-compensated across tiles
 *     and reduced once at the end; O rescaled by alpha in registers.
 *   O += P V: P goes from the S accumulator straight into the A fragment without shuffles:
 *     the accumulator holds key columns (2t, 2t+1), the TF32 A fragment wants (t, t+4); since
 *     P V sums over keys, key 2t is used as A column t and key 2t+1 as column t+4, and the V
 *     B-fragment rows are read with the same relabelling. For each 8-column slice of O, the
 *     BC keys of the tile accumulate into fresh (zero) accumulators (big*big and each
 *     correction apart) that are then added into O with fp32 adds, so no tensor-core
 *     accumulation runs longer than one tile (docs/DESIGN.md §4: long tensor-core accumulations
 *     drifted past the gate). For DT = 32 the O adds are Kahan-compensated too.
 *
 * Accuracy limit: a TF32 pair big + small holds 22 of float32's 24 significant bits, so each
 * operand carries a relative error up to 2^-22. On normal inputs rel_l2 is 3e-7 (PyTorch's
 * 3xTF32 kernel 7e-7); on the "large" distribution (logits of standard deviation 30) the
 * worst element misses the max_abs part of the f32 gate by up to ~2x (JOURNAL.md, "Accuracy
 * limit of 3xTF32").
 *
 * Measured: src/cuda/NOTES.md's version table (each run and step: JOURNAL.md, "Outcomes").
 * Verdict: passes every gate but the "large" f32 max_abs (above); sanitizer-clean; slower than
 * PyTorch at D = 128, latency-bound (every warp re-splits K and V; 2 warps per scheduler).
 * TF32 rounding by cvt.rn on sm_90 (one instruction instead of four); V slices below 2^-63
 * scaled for their products (denormal v). On a 9.0 device the sm_90a kernels (v4, v5; v3 as
 * their fallback) run D 64 and 128; v2 runs the other head dims and other GPUs.
 */
#include <cuda_runtime.h>

#include <atomic>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_internal.h"
#include "flash_params.cuh"
#include "key_padding.cuh"
#include "tf32_tiny_values.h"
#include "tf32_split.cuh"

#define WARP 32
#define MMA_M 16
#define MMA_N 8
#define MMA_K 8
#define SMEM_PAD 4 /* floats added to each shared row */
#define LOG2E 1.44269504088896340736f

/* 2^x by the SFU (ex2.approx.ftz: relative error ~2^-22; results below 2^-126, weights
 * negligible beside the row maximum's 1, flush to 0). */
__device__ __forceinline__ float exp2_sfu(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* sum += x with Kahan compensation c (sum - c is the better estimate). */
__device__ __forceinline__ void kahan_add(float &sum, float &c, float x) {
    const float y = x - c, t = sum + y;
    c = (t - sum) - y;
    sum = t;
}

/* x - big - small: exact, at most 2 significant bits, so a valid TF32 operand as it is. */
__device__ __forceinline__ uint32_t tiny_part(float x, uint32_t big, uint32_t small) {
    return __float_as_uint((x - __uint_as_float(big)) - __uint_as_float(small));
}

/* d += a * b, m16n8k8, TF32 inputs, fp32 accumulate. */
__device__ __forceinline__ void mma_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void cp_async_16(float *dst, const float *src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_4(float *dst, const float *src, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

/* Copies rows [0, ROWS) x columns [0, DT) of a tile whose first `valid_rows` rows and first
 * `d` columns exist in global memory into shared memory (row stride DT + SMEM_PAD); everything
 * else is zero-filled. Tile row r is row first + r of src (row stride `stride` elements), or
 * row rows[first + r] when a row list is given (key padding). */
template <int ROWS, int DT, int WARPS>
__device__ __forceinline__ void load_tile(float *dst, const float *src, int64_t stride, const int *rows, int first,
                                          int valid_rows, int d, bool vec4) {
    constexpr int DS = DT + SMEM_PAD, THREADS = WARPS * WARP;
    if (vec4) {
        constexpr int CHUNKS = DT / 4;
#pragma unroll 4
        for (int i = threadIdx.x; i < ROWS * CHUNKS; i += THREADS) {
            const int r = i / CHUNKS, c = (i % CHUNKS) * 4;
            const bool ok = r < valid_rows && c < d;
            cp_async_16(dst + r * DS + c, ok ? src + key_row(rows, first + r) * stride + c : src, ok);
        }
    } else {
#pragma unroll 4
        for (int i = threadIdx.x; i < ROWS * DT; i += THREADS) {
            const int r = i / DT, c = i % DT;
            const bool ok = r < valid_rows && c < d;
            cp_async_4(dst + r * DS + c, ok ? src + key_row(rows, first + r) * stride + c : src, ok);
        }
    }
}

/* DT: head-dim tile; BC: keys per tile; WARPS: warps per block (16 query rows each);
 * PV3: 3xTF32 for P V too (f32 mode; tf32 mode takes one TF32 product there);
 * KCH: k-steps of Q K^T per fresh accumulator (the chunk sums are added in fp32);
 * QK6: Q K^T from three TF32 parts per operand (big, small, tiny = the 2 bits the pair
 *      misses), six products: big*big + (big*small + small*big) + (big*tiny + tiny*big +
 *      small*small), so the logits see full float32 operands. */
/* PADDED: a key-padded call (p.kv_count set); the unpadded instances are the kernel as before
 * key padding (the padded code paths in them cost up to 9% at (1,24,1536,128), H200). */
template <int DT, int BC, int WARPS, bool PV3, int KCH, bool QK6, bool PADDED>
__global__ void __launch_bounds__(WARPS *WARP) attention_tf32_mma_v2(jattn_cuda_params p, int vec4) {
    constexpr int DS = DT + SMEM_PAD; /* shared row stride */
    constexpr int BR = WARPS * MMA_M;
    constexpr bool O_COMPENSATED = DT <= 32; /* Kahan-compensated O where registers allow */
    constexpr int NT = BC / MMA_N;           /* key sub-tiles of S per warp */
    constexpr int KD = DT / MMA_K;           /* k-steps of Q K^T = column slices of O */
    constexpr int KP = BC / MMA_K;           /* k-steps of P V */
    static_assert(NT == KP, "the P relabelling pairs S sub-tile n with P V k-step n");
    static_assert(KD % KCH == 0, "chunks of whole k-steps");
    extern __shared__ float4 smem_f4[];
    float *qs = reinterpret_cast<float *>(smem_f4); /* [BR][DS] */
    float *ks = qs + BR * DS;                       /* [2][BC][DS] */
    float *vs = ks + 2 * BC * DS;                   /* [2][BC][DS] */

    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int g = lane >> 2, t = lane & 3; /* fragment row group and thread in group */
    const int q_blocks = (p.seq_q + BR - 1) / BR;
    const int bh = blockIdx.x / q_blocks, qb = blockIdx.x % q_blocks;
    const int b = bh / p.heads, h = bh % p.heads;
    const int q0 = qb * BR;
    const float *q = p.q + b * p.q_b + h * p.q_h + (int64_t)q0 * p.q_s;
    const float *k = p.k + b * p.k_b + h * p.k_h;
    const float *v = p.v + b * p.v_b + h * p.v_h;
    const int n_kv = PADDED ? attended_keys(p.kv_count, b, p.seq_kv) : p.seq_kv; /* key padding: its keys only */
    const int *kv_rows = PADDED ? attended_rows(p.kv_index, b, p.seq_kv) : nullptr;
    const int n_tiles = (n_kv + BC - 1) / BC;
    const bool v4 = vec4 != 0;

    load_tile<BR, DT, WARPS>(qs, q, p.q_s, nullptr, 0, p.seq_q - q0, p.head_dim, v4);
    load_tile<BC, DT, WARPS>(ks, k, p.k_s, kv_rows, 0, n_kv, p.head_dim, v4);
    load_tile<BC, DT, WARPS>(vs, v, p.v_s, kv_rows, 0, n_kv, p.head_dim, v4);
    cp_async_commit();

    float o[KD][4], o_comp[O_COMPENSATED ? KD : 1][4];
#pragma unroll
    for (int j = 0; j < KD; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[j][i] = 0.0f;
#pragma unroll
    for (int j = 0; j < (O_COMPENSATED ? KD : 1); j++)
#pragma unroll
        for (int i = 0; i < 4; i++) o_comp[j][i] = 0.0f;
    /* rows g and g + 8: running max (natural units), Kahan-compensated partial row sums */
    float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.0f, 0.0f}, l_comp[2] = {0.0f, 0.0f};
    /* f32 with lse: the largest score's exact value (float64 q . k) minus the tensor core's (epilogue) */
    float top_fix[2] = {0.0f, 0.0f};
    const float scale = p.scale;
    const float *q_frag = qs + (warp * MMA_M + g) * DS + t;

    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait_all();
        __syncthreads(); /* tile `it` landed; every warp is done with tile it-1's buffers */
        if (it + 1 < n_tiles) {
            const int kv0 = (it + 1) * BC, stage = (it + 1) & 1;
            /* padded: rows kv_rows[kv0 + r]; else the tile's rows from its first (as before padding) */
            const float *kt0 = PADDED ? k : k + (int64_t)kv0 * p.k_s, *vt0 = PADDED ? v : v + (int64_t)kv0 * p.v_s;
            load_tile<BC, DT, WARPS>(ks + stage * BC * DS, kt0, p.k_s, kv_rows, PADDED ? kv0 : 0, n_kv - kv0,
                                     p.head_dim, v4);
            load_tile<BC, DT, WARPS>(vs + stage * BC * DS, vt0, p.v_s, kv_rows, PADDED ? kv0 : 0, n_kv - kv0,
                                     p.head_dim, v4);
        }
        cp_async_commit();
        const float *kt = ks + (it & 1) * BC * DS, *vt = vs + (it & 1) * BC * DS;

        /* ---- S = Q K^T ---- */
        float s_big[NT][4], s_cor[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) s_big[n][i] = s_cor[n][i] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KD; kc += KCH) {
            float s_chunk[NT][4]; /* big*big of KCH k-steps, from zero */
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) s_chunk[n][i] = 0.0f;
#pragma unroll
            for (int kk = kc; kk < kc + KCH; kk++) {
                const float *qa = q_frag + kk * MMA_K;
                const float a[4] = {qa[0] * scale, qa[8 * DS] * scale, qa[4] * scale, qa[8 * DS + 4] * scale};
                uint32_t a_big[4], a_small[4], a_tiny[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    split_tf32<true>(a[i], a_big[i], a_small[i]);
                    if (QK6) a_tiny[i] = tiny_part(a[i], a_big[i], a_small[i]);
                }
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const float *kb = kt + (n * MMA_N + g) * DS + kk * MMA_K + t;
                    uint32_t b_big[2], b_small[2], b_tiny[2];
                    split_tf32<true>(kb[0], b_big[0], b_small[0]);
                    split_tf32<true>(kb[4], b_big[1], b_small[1]);
                    mma_tf32(s_chunk[n], a_big, b_big);
                    mma_tf32(s_cor[n], a_big, b_small);
                    mma_tf32(s_cor[n], a_small, b_big);
                    if (QK6) {
                        b_tiny[0] = tiny_part(kb[0], b_big[0], b_small[0]);
                        b_tiny[1] = tiny_part(kb[4], b_big[1], b_small[1]);
                        mma_tf32(s_cor[n], a_big, b_tiny);
                        mma_tf32(s_cor[n], a_tiny, b_big);
                        mma_tf32(s_cor[n], a_small, b_small);
                    }
                }
            }
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) s_big[n][i] += s_chunk[n][i];
        }

        /* ---- online softmax (natural units: s - m is exact when s is, then exp2 of it * log2 e) ---- */
        const int key0 = it * BC;
        float m_tile[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int key = key0 + n * MMA_N + 2 * t + (i & 1);
                /* an infinite big*big keeps its sign: the corrections of an Inf operand are NaN */
                const float sb = s_big[n][i];
                const float s = key >= n_kv ? -INFINITY : isinf(sb) ? sb : sb + s_cor[n][i];
                s_big[n][i] = s;
                m_tile[i >> 1] = fmaxf(m_tile[i >> 1], s);
            }
        float alpha[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            m_tile[r] = fmaxf(m_tile[r], __shfl_xor_sync(0xffffffffu, m_tile[r], 1));
            m_tile[r] = fmaxf(m_tile[r], __shfl_xor_sync(0xffffffffu, m_tile[r], 2));
            const float m_new = fmaxf(m_run[r], m_tile[r]);
            if (PV3 && p.lse && m_tile[r] > m_run[r]) { /* f32 mode: the row's largest score so far is in this tile */
                const unsigned quad = 0xFu << (lane & 28);
                int col = -1;
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        if (s_big[n][2 * r + e] == m_tile[r]) col = n * MMA_N + 2 * t + e;
                col = max(col, __shfl_xor_sync(quad, col, 1));
                col = max(col, __shfl_xor_sync(quad, col, 2));
                double dot = 0.0; /* q (unscaled) and k rows in shared memory, float32 whole; columns past D are 0 */
                if (col >= 0) {
                    const float *qr = qs + (warp * MMA_M + g + 8 * r) * DS + t * (DT / 4),
                                *kr = kt + col * DS + t * (DT / 4);
#pragma unroll 1
                    for (int d = 0; d < DT / 4; d++) dot = fma((double)qr[d], (double)kr[d], dot);
                }
                dot += __shfl_xor_sync(quad, dot, 1);
                dot += __shfl_xor_sync(quad, dot, 2);
                top_fix[r] = col >= 0 ? (float)(dot * (double)scale - (double)m_tile[r]) : 0.0f;
            }
            m_use[r] = m_new == -INFINITY ? 0.0f : m_new; /* no keys of finite score yet: weights 0 */
            alpha[r] = exp2_sfu((m_run[r] - m_use[r]) * LOG2E);
            m_run[r] = m_new;
            l_part[r] *= alpha[r];
            l_comp[r] *= alpha[r];
        }
        uint32_t p_big[KP][4], p_small[KP][4]; /* A fragments of P, keys relabelled */
        float l_tile[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < NT; n++) {
            float pr[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                pr[i] = exp2_sfu((s_big[n][i] - m_use[i >> 1]) * LOG2E);
                l_tile[i >> 1] += pr[i];
            }
            /* C fragment (row g: keys 2t, 2t+1; row g+8: same) -> A fragment (a0 = (g, t),
             * a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4)) with key 2t as t, 2t+1 as t+4. */
            split_tf32<PV3>(pr[0], p_big[n][0], p_small[n][0]);
            split_tf32<PV3>(pr[2], p_big[n][1], p_small[n][1]);
            split_tf32<PV3>(pr[1], p_big[n][2], p_small[n][2]);
            split_tf32<PV3>(pr[3], p_big[n][3], p_small[n][3]);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) kahan_add(l_part[r], l_comp[r], l_tile[r]);
#pragma unroll
        for (int j = 0; j < KD; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                o[j][i] *= alpha[i >> 1];
                if (O_COMPENSATED) o_comp[j][i] *= alpha[i >> 1];
            }

            /* ---- O += P V, one fresh accumulator per 8-column slice of O ---- */
#pragma unroll
        for (int j = 0; j < KD; j++) {
            float acc_big[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc_cor1[4] = {0.0f, 0.0f, 0.0f, 0.0f},
                  acc_cor2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            /* B fragments (k = key, n = column): b0 = (t, g) -> key 2t, b1 = (t+4, g) -> key 2t+1 */
            const float *vslice = vt + 2 * t * DS + j * MMA_N + g;
            uint32_t bits = 0;
#pragma unroll
            for (int n = 0; n < KP; n++)
                bits |= __float_as_uint(vslice[n * MMA_K * DS]) | __float_as_uint(vslice[n * MMA_K * DS + DS]);
            /* The slice scaled when all its values of this tile are tiny (tf32_tiny_values.h):
             * warp-uniform; the values are read from shared memory again below (holding them
             * spills). */
            const bool tiny = !__any_sync(0xffffffffu, (bits & JATTN_TINY_EXPONENT_BITS) != 0);
            const float vscale = tiny ? JATTN_TINY_SCALE : 1.0f;
#pragma unroll
            for (int n = 0; n < KP; n++) {
                const float *vb = vslice + n * MMA_K * DS;
                uint32_t b_big[2], b_small[2];
                split_tf32<PV3>(vb[0] * vscale, b_big[0], b_small[0]);
                split_tf32<PV3>(vb[DS] * vscale, b_big[1], b_small[1]);
                mma_tf32(acc_big, p_big[n], b_big);
                if (PV3) {
                    mma_tf32(acc_cor1, p_big[n], b_small);
                    mma_tf32(acc_cor2, p_small[n], b_big);
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (tiny)
                    acc_big[i] = (acc_big[i] + (acc_cor1[i] + acc_cor2[i])) * JATTN_TINY_UNSCALE,
                    acc_cor1[i] = acc_cor2[i] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float add = acc_big[i] + (acc_cor1[i] + acc_cor2[i]);
                if (O_COMPENSATED)
                    kahan_add(o[j][i], o_comp[O_COMPENSATED ? j : 0][i], add);
                else
                    o[j][i] += add;
            }
        }
    }
    cp_async_wait_all();

    /* ---- epilogue: O / l, written through the out strides; lse ---- */
    if (O_COMPENSATED)
#pragma unroll
        for (int j = 0; j < KD; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[j][i] -= o_comp[O_COMPENSATED ? j : 0][i];
    float inv_l[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_part[r] -= l_comp[r];
        l_part[r] += __shfl_xor_sync(0xffffffffu, l_part[r], 1);
        l_part[r] += __shfl_xor_sync(0xffffffffu, l_part[r], 2);
        inv_l[r] = 1.0f / l_part[r];
    }
    float *out = p.out + b * p.o_b + h * p.o_h;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = q0 + warp * MMA_M + g + 8 * r;
        if (row >= p.seq_q) continue;
        float *orow = out + (int64_t)row * p.o_s;
        const bool empty = PADDED && n_kv == 0; /* no key to attend (key padding): 0, and lse -inf */
#pragma unroll
        for (int j = 0; j < KD; j++) {
            const int col = j * MMA_N + 2 * t;
            if (col < p.head_dim) {
                orow[col] = empty ? 0.0f : o[j][2 * r] * inv_l[r];
                orow[col + 1] = empty ? 0.0f : o[j][2 * r + 1] * inv_l[r];
            }
        }
        /* lse = m + log l in float64, plus the largest-score key's exact score minus the tensor core's
         * (top_fix) times its weight 1 / l: the truncating fp32 accumulation of S's k-steps leaves
         * the largest score low by ~1 ulp, and a backward that recomputes S more exactly would carry
         * that as a relative error of every weight of the row (src/cuda/NOTES.md, "The backward's
         * accuracy") */
        const double fix = (double)top_fix[r] / (double)l_part[r];
        if (p.lse && t == 0)
            p.lse[(int64_t)bh * p.seq_q + row] =
                empty ? -INFINITY
                : PV3 ? (float)((double)m_run[r] + log((double)l_part[r]) + (isfinite(fix) ? fix : 0.0))
                      : m_run[r] + logf(l_part[r]);
    }
}

/* Tile configurations: chosen per head-dim tile and problem size below; the harness can force
 * one with JATTN_CUDA_V2_VARIANT=1|2|3 (D <= 128; see JOURNAL.md, "Outcomes", for what each measured). */
template <int DT, int BC, int WARPS, bool PV3, int KCH, bool QK6, bool PADDED = false>
static cudaError_t launch(const jattn_cuda_params *p, cudaStream_t stream) {
    constexpr int BR = WARPS * MMA_M, DS = DT + SMEM_PAD;
    const size_t smem = sizeof(float) * (size_t)(BR * DS + 4 * BC * DS);
    auto kernel = attention_tf32_mma_v2<DT, BC, WARPS, PV3, KCH, QK6, PADDED>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const long long q_blocks = (p->seq_q + BR - 1) / BR;
    const long long blocks = q_blocks * p->batch * p->heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    /* 16-byte copies need 16-byte aligned rows: base pointers and every stride. */
    const uintptr_t addr = (uintptr_t)p->q | (uintptr_t)p->k | (uintptr_t)p->v;
    const int64_t strides = p->q_b | p->q_h | p->q_s | p->k_b | p->k_h | p->k_s | p->v_b | p->v_h | p->v_s;
    const int vec4 = (addr % 16 == 0) && (strides % 4 == 0);
    kernel<<<(unsigned)blocks, WARPS * WARP, smem, stream>>>(*p, vec4);
    return cudaGetLastError();
}

static int variant(void) {
    static std::atomic<int> v{-1}; /* read once; concurrent first calls store the same value */
    int x = v.load(std::memory_order_relaxed);
    if (x < 0) {
        const char *env = getenv("JATTN_CUDA_V2_VARIANT");
        x = env ? atoi(env) : 0;
        v.store(x, std::memory_order_relaxed);
    }
    return x;
}

/* D <= 128: many blocks (>= 4 waves of 8-warp blocks) -> 8 warps x 32 keys (one 255-register
 * block per SM); fewer -> 4 warps x 16 keys (three blocks per SM), which fills the machine
 * with finer blocks. See JOURNAL.md ("Outcomes") for the measurements behind it. */
template <bool PV3, bool QK6>
static cudaError_t launch_dt(const jattn_cuda_params *p, cudaStream_t s) {
    const int D = p->head_dim;
    if (D <= 32) return launch<32, 64, 4, PV3, 4, QK6>(p, s);
    if (D <= 64) return launch<64, 64, 4, PV3, 8, QK6>(p, s);
    if (D <= 128) {
        int v = variant();
        if (v == 0) {
            const long long blocks8 = (long long)p->batch * p->heads * ((p->seq_q + 127) / 128);
            v = blocks8 >= 4 * 132 ? 2 : 1;
        }
        switch (v) {
        case 1: return launch<128, 16, 4, PV3, 16, QK6>(p, s);
        case 2: return launch<128, 32, 8, PV3, 16, QK6>(p, s);
        default: return launch<128, 32, 4, PV3, 16, QK6>(p, s);
        }
    }
    return launch<256, 16, 4, PV3, 32, QK6>(p, s);
}

/* f32 mode: three-product Q K^T (measured); JATTN_CUDA_V2_QK=6 selects the six-product one
 * (three TF32 parts per operand; compiled and not yet measured on a GPU: JOURNAL.md, "Accuracy limit of 3xTF32"). */
static bool qk6(void) {
    static std::atomic<int> v{-1}; /* read once; concurrent first calls store the same value */
    int x = v.load(std::memory_order_relaxed);
    if (x < 0) {
        const char *env = getenv("JATTN_CUDA_V2_QK");
        x = env && atoi(env) == 6 ? 1 : 0;
        v.store(x, std::memory_order_relaxed);
    }
    return x == 1;
}

/* Key-padded calls: one tile configuration per head-dim tile (the 4-warp ones, which any grid
 * fills), three-product Q K^T; the padded instances are not tuned apart. */
template <bool PV3>
static cudaError_t launch_padded(const jattn_cuda_params *p, cudaStream_t s) {
    const int D = p->head_dim;
    if (D <= 32) return launch<32, 64, 4, PV3, 4, false, true>(p, s);
    if (D <= 64) return launch<64, 64, 4, PV3, 8, false, true>(p, s);
    if (D <= 128) return launch<128, 16, 4, PV3, 16, false, true>(p, s);
    return launch<256, 16, 4, PV3, 32, false, true>(p, s);
}

/* f32 precision: 3xTF32 in both products; tf32: 3xTF32 for Q K^T, whose errors the softmax
 * amplifies, one TF32 product for P V. */
extern "C" int jattn_cuda_launch_v2(const jattn_cuda_args *a, void *workspace, void *stream) {
    (void)workspace; /* none needed */
    const jattn_cuda_params kp = flash_params_from_args(a), *p = &kp;
    const int tf32x3 = a->precision == JATTN_PRECISION_F32;
    if (p->head_dim % JATTN_CUDA_V2_HEAD_DIM_MULTIPLE || p->head_dim > JATTN_CUDA_V2_MAX_HEAD_DIM)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    if (p->kv_count) return (int)(tf32x3 ? launch_padded<true>(p, s) : launch_padded<false>(p, s));
    if (!tf32x3) return (int)launch_dt<false, false>(p, s);
    return (int)(qk6() ? launch_dt<true, true>(p, s) : launch_dt<true, false>(p, s));
}
