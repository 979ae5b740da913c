/* backward v1: the exact-f32 attention backward (dq, dk, dv) on tensor cores with
 * mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, every product on operands split into TF32
 * big + small parts (3xTF32: big*big + big*small + small*big, fp32 accumulation), as the
 * forward's v2 (attention_v2_mma.cu) does. The FlashAttention-2 backward in two kernels, no
 * atomics: every gradient element is summed by one thread in a fixed order, so the results are
 * bit-identical from run to run.
 *
 * Per (b, h), c = scale, lse the forward's row log-sum-exp (natural log):
 *   Dl_i  = sum_d dO_id O_id - dlse_i                      (pre-pass, float64, kept as hi + lo)
 *   S_ij  = (c q_i) . k_j;   P_ij = exp(S_ij - lse_i)      (recomputed, six TF32 products)
 *   dV_j  = sum_i P_ij dO_i;  dP_ij = dO_i . v_j            (dP as S, in both precisions)
 *   dS_ij = P_ij (dP_ij - Dl_i)
 *   dK_j  = sum_i dS_ij (c q_i);  dQ_i = c sum_j dS_ij k_j
 * S and dP: six TF32 products (big, small and tiny parts: the operands float32 whole) with the
 * big*big k-steps added by TwoSum (product_abt: the plain 3xTF32 chains missed the gate on peaky
 * and large inputs, measured). f32 precision: dV, dK, dQ 3xTF32. tf32 precision: S and dP
 * as in f32 (the softmax turns an error e of S into a relative error e of P; dP - Dl is a
 * difference of near-equal terms), dV, dK and dQ one TF32 product, except below head_dim 16
 * (jattn_cuda_arithmetic: the backend passes f32 there), where they stay at three: one TF32 product missed the tf32
 * gate (rel_l2 1e-3) at head_dim 1 on the H200 (dq 3.2e-3, dk 1.3e-3; a gradient element there is one sum over the
 * sequence, with no head_dim terms to average its rounding), at no speed to gain.
 *
 * Kernels (all on the caller's stream, in this order):
 *   bwd_row_terms     reads dout, out [B,H,Sq,D] (their strides), dlse [B,H,Sq] (or none);
 *                     writes Dl [B*H*Sq] float2 (hi, lo) into the workspace. One warp per row,
 *                     float64 products and a fixed-order warp reduction.
 *   bwd_zero_kv       key-padded calls only: +0 into every dk, dv row (the attended rows are
 *                     then overwritten; masked keys are never read and keep +0).
 *   bwd_dq            (below) also writes, per query row, the exact P of its P >= 1/2 element
 *                     (0: none) [B*H*Sq] float into the workspace, for bwd_dkdv.
 *   bwd_dkdv          a CTA of 4 warps owns 64 attended keys of one (b, h) (16 per warp); K and
 *                     V tiles [64][DT] stay in shared memory; it walks the query tiles [BR][DT]
 *                     of Q (pre-scaled by c) and dO in ascending order: S^T = K (cQ)^T and
 *                     dP^T = V dO^T per warp (16 keys x BR queries), P^T and dS^T from them,
 *                     then dV += P^T dO and dK += dS^T (cQ) into register accumulators (a fresh
 *                     tensor-core accumulator per query tile, added in fp32, as v2's P V).
 *                     Reads q, k, v, dout, lse, Dl; writes dk, dv [B,H,Skv,D] through their
 *                     strides (attended rows only).
 *   bwd_dq            a CTA of 4 warps owns 64 queries (16 per warp); cQ and dO stay in shared
 *                     memory; it walks the attended keys in tiles [BC][DT] of K and V in
 *                     ascending order: S = (cQ) K^T, dP = dO V^T, dS, then dQ += dS K; dQ * c
 *                     written through dq's strides (a query row of a batch with no key: +0).
 * Head dims: any D <= 128, run in a head-dim tile DT in {32, 64, 128} whose columns past D are
 * zero in shared memory (they add nothing and are never stored). Shared rows are padded to
 * DT + 4 floats (conflict-free fragment reads, as in v2). Operand loads are plain 4-byte loads
 * through any strides (speed is for the next version).
 *
 * Fragment layouts (PTX ISA, mma.m16n8k8 .tf32): A a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4),
 * a3 = (g+8, t+4); B b0 = (k t, n g), b1 = (k t+4, n g); C c0, c1 = (g, 2t), (g, 2t+1), c2, c3 =
 * (g+8, 2t), (g+8, 2t+1); g = lane / 4, t = lane % 4. An accumulator C becomes the A operand of
 * the next product without shuffles by relabelling its columns (contraction index 2t as A
 * column t, 2t+1 as t+4; the B rows read with the same relabelling), as v2's P V.
 *
 * Not handled yet (v2 handles them in the forward): tensor-core operands below 2^-126 (a TF32
 * small part of a value near the denormal range flushes: absolute error below 2^-148), infinite
 * inputs.
 *
 * Measured: src/cuda/NOTES.md, "The backward".
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "cuda_internal.h"
#include "key_padding.cuh"
#include "tf32_split.cuh"

namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 4; /* per CTA of bwd_dkdv and bwd_dq */
constexpr int kThreads = kWarps * kWarp;
constexpr int kRowsPerCta = kWarps * 16; /* keys of a bwd_dkdv CTA, queries of a bwd_dq CTA */
constexpr int kPad = 4;                  /* floats added to each shared row */
constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/* The parameter block of the kernels: jattn_cuda_args with the extents narrowed to int (the
 * backend's selection guarantees seq_q, seq_kv, batch * heads < 2^31). */
struct bwd_params {
    const float *q, *k, *v, *o, *dout, *lse, *dlse;
    float *dq, *dk, *dv;
    float2 *dl;   /* [B*H*Sq] Dl as hi + lo */
    float *top_p; /* [B*H*Sq] the exact P of the row's P >= 1/2 element, 0 for none (bwd_dq) */
    int64_t q_b, q_h, q_s, k_b, k_h, k_s, v_b, v_h, v_s, o_b, o_h, o_s;
    int64_t do_b, do_h, do_s, dq_b, dq_h, dq_s, dk_b, dk_h, dk_s, dv_b, dv_h, dv_s;
    int batch, heads, seq_q, seq_kv, head_dim;
    float scale;
    const int *kv_count, *kv_index;
};

/* d += a * b, m16n8k8, TF32 operands, fp32 accumulation. */
__device__ __forceinline__ void mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Rows [0, ROWS) x columns [0, DT) of a shared tile (row stride DT + kPad) from global memory:
 * tile row r is row rows[first + r] (key padding) or first + r of src (row stride `stride`),
 * multiplied by `mul`, for r < valid and columns < d; everything else +0. */
template <int ROWS, int DT>
__device__ __forceinline__ void load_tile(float *dst, const float *src, int64_t stride, const int *rows, int first,
                                          int valid, int d, float mul) {
    constexpr int DS = DT + kPad;
    for (int i = threadIdx.x; i < ROWS * DT; i += kThreads) {
        const int r = i / DT, c = i % DT;
        float x = 0.0f;
        if (r < valid && c < d) x = __ldg(src + key_row(rows, first + r) * stride + c) * mul;
        dst[r * DS + c] = x;
    }
}

/* C = A B^T over DT columns, both operands 3xTF32: A the 16 rows at `a`, B the 8 NT rows at `b`
 * (shared, row stride DT + kPad). big: big*big; cor: big*small + small*big (fresh accumulators;
 * the caller adds big + cor). Two additions to plain 3xTF32: the three products of the TF32 "tiny"
 * parts (x - big - small: big*tiny + tiny*big + small*small), so the operands are float32 whole;
 * and big*big summed per k-step in a fresh accumulator, the k-steps added by TwoSum, the rounding
 * errors into cor. Measured on the H200 (test_backward cuda gate, 2026-12-02; the variants were
 * JATTN_CUDA_BWD_VARIANT's MODE 0-3 until issue 32, this is MODE 3): the plain 3xTF32 chains failed
 * 13 of 104 gate cases (peaky/large near 6e-6; the tensor core's fp32 accumulation of the 16 big*big
 * k-steps is the dominant error), the tiny parts alone 13, TwoSum alone 2, both 1 (D = 1 `large`,
 * dq 5.5e-6). */
template <int DT, int NT>
__device__ __forceinline__ void product_abt(float big[NT][4], float cor[NT][4], const float *a, const float *b, int g,
                                            int t) {
    constexpr int DS = DT + kPad;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) big[n][i] = cor[n][i] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DT / 8; kk++) {
        const float *aa = a + g * DS + kk * 8 + t;
        const float av[4] = {aa[0], aa[8 * DS], aa[4], aa[8 * DS + 4]};
        uint32_t a_big[4], a_small[4], a_tiny[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            split_tf32<true>(av[i], a_big[i], a_small[i]);
            a_tiny[i] = __float_as_uint((av[i] - __uint_as_float(a_big[i])) - __uint_as_float(a_small[i]));
        }
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const float *bb = b + (n * 8 + g) * DS + kk * 8 + t;
            uint32_t b_big[2], b_small[2];
            split_tf32<true>(bb[0], b_big[0], b_small[0]);
            split_tf32<true>(bb[4], b_big[1], b_small[1]);
            float step[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma(step, a_big, b_big);
#pragma unroll
            for (int i = 0; i < 4; i++) { /* TwoSum: big + step = s + err exactly */
                const float s = big[n][i] + step[i], bp = s - big[n][i];
                cor[n][i] += (big[n][i] - (s - bp)) + (step[i] - bp);
                big[n][i] = s;
            }
            mma(cor[n], a_big, b_small);
            mma(cor[n], a_small, b_big);
            const uint32_t b_tiny[2] = {
                __float_as_uint((bb[0] - __uint_as_float(b_big[0])) - __uint_as_float(b_small[0])),
                __float_as_uint((bb[4] - __uint_as_float(b_big[1])) - __uint_as_float(b_small[1]))};
            mma(cor[n], a_big, b_tiny);
            mma(cor[n], a_tiny, b_big);
            mma(cor[n], a_small, b_small);
        }
    }
}

/* acc[DT/8][4] += X B: X = 16 x 8 NT in accumulator layout (x[NT][4]), B the 8 NT rows at `b`
 * (shared, row = contraction index, DT columns). X3: three products, else big*big only. For each
 * 8-column slice a fresh accumulator per product, added into acc in fp32. */
template <int DT, int NT, bool X3>
__device__ __forceinline__ void accumulate_xb(float acc[DT / 8][4], const float x[NT][4], const float *b, int g,
                                              int t) {
    constexpr int DS = DT + kPad;
    uint32_t x_big[NT][4], x_small[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) { /* C (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) -> A columns t, t+4 */
        split_tf32<X3>(x[n][0], x_big[n][0], x_small[n][0]);
        split_tf32<X3>(x[n][2], x_big[n][1], x_small[n][1]);
        split_tf32<X3>(x[n][1], x_big[n][2], x_small[n][2]);
        split_tf32<X3>(x[n][3], x_big[n][3], x_small[n][3]);
    }
#pragma unroll
    for (int j = 0; j < DT / 8; j++) {
        float c0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const float *bs = b + 2 * t * DS + j * 8 + g; /* b0: row 2t, b1: row 2t + 1 (relabelled) */
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const float *bb = bs + n * 8 * DS;
            uint32_t b_big[2], b_small[2];
            split_tf32<X3>(bb[0], b_big[0], b_small[0]);
            split_tf32<X3>(bb[DS], b_big[1], b_small[1]);
            mma(c0, x_big[n], b_big);
            if (X3) {
                mma(c1, x_big[n], b_small);
                mma(c2, x_small[n], b_big);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] += c0[i] + (c1[i] + c2[i]);
    }
}

/* Dl of every row: one warp per (b, h, i), float64 products summed in a fixed order, minus dlse;
 * stored as hi = float(Dl), lo = float(Dl - hi). */
__global__ void __launch_bounds__(256) bwd_row_terms(bwd_params p) {
    const int64_t rows = (int64_t)p.batch * p.heads * p.seq_q;
    const int64_t row = (int64_t)blockIdx.x * 8 + threadIdx.x / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (row >= rows) return;
    const int i = (int)(row % p.seq_q);
    const int bh = (int)(row / p.seq_q), b = bh / p.heads, h = bh % p.heads;
    const float *o = p.o + b * p.o_b + h * p.o_h + (int64_t)i * p.o_s;
    const float *d = p.dout + b * p.do_b + h * p.do_h + (int64_t)i * p.do_s;
    double acc = 0.0;
    for (int c = lane; c < p.head_dim; c += kWarp) acc += (double)__ldg(o + c) * (double)__ldg(d + c);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        if (p.dlse) acc -= (double)__ldg(p.dlse + row);
        const float hi = (float)acc;
        p.dl[row] = make_float2(hi, (float)(acc - (double)hi));
    }
}

/* +0 into every element of dk and dv (key-padded calls): grid-stride over B*H*Skv rows x D. */
__global__ void __launch_bounds__(256) bwd_zero_kv(bwd_params p) {
    const int64_t n = (int64_t)p.batch * p.heads * p.seq_kv * p.head_dim;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(e % p.head_dim);
        const int64_t r = e / p.head_dim;
        const int j = (int)(r % p.seq_kv);
        const int bh = (int)(r / p.seq_kv), b = bh / p.heads, h = bh % p.heads;
        p.dk[b * p.dk_b + h * p.dk_h + (int64_t)j * p.dk_s + c] = 0.0f;
        p.dv[b * p.dv_b + h * p.dv_h + (int64_t)j * p.dv_s + c] = 0.0f;
    }
}

/* dK, dV of 64 attended keys of one (b, h): see the file comment. DT head-dim tile, BR queries per
 * step, X3: three products for dV and dK (f32 precision). */
template <int DT, int BR, bool X3>
__global__ void __launch_bounds__(kThreads) bwd_dkdv(bwd_params p) {
    constexpr int DS = DT + kPad, NT = BR / 8, KD = DT / 8;
    extern __shared__ float4 smem_f4[];
    float *ks = reinterpret_cast<float *>(smem_f4); /* [64][DS] */
    float *vs = ks + kRowsPerCta * DS;              /* [64][DS] */
    float *qs = vs + kRowsPerCta * DS;              /* [BR][DS], q * scale */
    float *ds_ = qs + BR * DS;                      /* [BR][DS], dout */
    __shared__ float lse_s[BR], dl_hi[BR], dl_lo[BR], top_s[BR];

    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
    const int kv_blocks = (p.seq_kv + kRowsPerCta - 1) / kRowsPerCta;
    const int bh = blockIdx.x / kv_blocks, j0 = (blockIdx.x % kv_blocks) * kRowsPerCta;
    const int b = bh / p.heads, h = bh % p.heads;
    const int n_kv = attended_keys(p.kv_count, b, p.seq_kv);
    if (j0 >= n_kv) return; /* no attended key here (key padding: dk, dv were filled with +0) */
    const int *kv_rows = attended_rows(p.kv_index, b, p.seq_kv);
    const float *q = p.q + b * p.q_b + h * p.q_h, *dout = p.dout + b * p.do_b + h * p.do_h;
    load_tile<kRowsPerCta, DT>(ks, p.k + b * p.k_b + h * p.k_h, p.k_s, kv_rows, j0, n_kv - j0, p.head_dim, 1.0f);
    load_tile<kRowsPerCta, DT>(vs, p.v + b * p.v_b + h * p.v_h, p.v_s, kv_rows, j0, n_kv - j0, p.head_dim, 1.0f);

    float dk[KD][4], dv[KD][4];
#pragma unroll
    for (int j = 0; j < KD; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) dk[j][i] = dv[j][i] = 0.0f;
    const float *k_warp = ks + warp * 16 * DS, *v_warp = vs + warp * 16 * DS;

    for (int i0 = 0; i0 < p.seq_q; i0 += BR) {
        __syncthreads(); /* every warp is done with the previous query tile */
        load_tile<BR, DT>(qs, q, p.q_s, nullptr, i0, p.seq_q - i0, p.head_dim, p.scale);
        load_tile<BR, DT>(ds_, dout, p.do_s, nullptr, i0, p.seq_q - i0, p.head_dim, 1.0f);
        for (int r = threadIdx.x; r < BR; r += kThreads) {
            const int row = i0 + r;
            float l = INFINITY, hi = 0.0f, lo = 0.0f, tp = 0.0f; /* rows past seq_q: P = 0 */
            if (row < p.seq_q) {
                const int64_t at = (int64_t)bh * p.seq_q + row;
                l = __ldg(p.lse + at);
                if (l == -INFINITY) l = INFINITY; /* a row with no key: P = 0 */
                const float2 dl = p.dl[at];
                hi = dl.x, lo = dl.y;
                tp = p.top_p[at];
            }
            lse_s[r] = l, dl_hi[r] = hi, dl_lo[r] = lo, top_s[r] = tp;
        }
        __syncthreads();

        float big[NT][4], cor[NT][4], pt[NT][4];
        product_abt<DT, NT>(big, cor, k_warp, qs, g, t); /* S^T: 16 keys x BR queries */
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) { /* (big - lse) + cor: S's pair is not rounded to one float first */
                const int c = n * 8 + 2 * t + (i & 1);
                const float e = expf((big[n][i] - lse_s[c]) + cor[n][i]), tp = top_s[c];
                /* a query's P >= 1/2 key (this one, if so): the exact P bwd_dq found (exact_top_p) */
                pt[n][i] = e >= 0.5f && tp > 0.0f ? tp : e;
            }
        product_abt<DT, NT>(big, cor, v_warp, ds_, g, t); /* dP^T */
        float dst[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int c = n * 8 + 2 * t + (i & 1);
                dst[n][i] = pt[n][i] * (((big[n][i] - dl_hi[c]) + cor[n][i]) - dl_lo[c]);
            }
        accumulate_xb<DT, NT, X3>(dv, pt, ds_, g, t); /* dV += P^T dO */
        accumulate_xb<DT, NT, X3>(dk, dst, qs, g, t); /* dK += dS^T (c Q) */
    }

    float *dkb = p.dk + b * p.dk_b + h * p.dk_h, *dvb = p.dv + b * p.dv_b + h * p.dv_h;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int jl = j0 + warp * 16 + g + 8 * r;
        if (jl >= n_kv) continue;
        const int64_t row = key_row(kv_rows, jl);
#pragma unroll
        for (int j = 0; j < KD; j++) {
            const int col = j * 8 + 2 * t;
            if (col < p.head_dim) {
                dkb[row * p.dk_s + col] = dk[j][2 * r];
                dvb[row * p.dv_s + col] = dv[j][2 * r];
            }
            if (col + 1 < p.head_dim) {
                dkb[row * p.dk_s + col + 1] = dk[j][2 * r + 1];
                dvb[row * p.dv_s + col + 1] = dv[j][2 * r + 1];
            }
        }
    }
}

/* The row's P >= 1/2 element (at most one per query row) of a dQ tile takes the P of its exact
 * score: the tensor core truncates the fp32 sums of S's k-steps (each big*big step a little low),
 * and the weight of a row's dominant key, exp(S - lse), carries that as a relative error of dV, dK
 * and dQ past what float32's lse allows (src/cuda/NOTES.md, "The backward's accuracy"). Rare (a
 * warp-wide vote, then exact_p): the four lanes of the row's quad sum (scale q_i) . k_j over D / 4
 * each in float64 (q from global memory, float32 whole; k from the shared tile). The P is kept in
 * top[r] for bwd_dkdv. pr: the tile's P (rows row0, row0 + 8 of head (b, h), BC keys). */
__device__ __noinline__ float exact_p(const float *qr, const float *kr, int d0, int d1, float scale, float lse) {
    double dot = 0.0;
    if (qr) /* the parameters by value: a reference to the kernel's would copy them to local memory */
        for (int d = d0; d < d1; d++) dot = fma((double)__ldg(qr + d), (double)kr[d], dot);
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    dot += __shfl_xor_sync(0xffffffffu, dot, 2);
    return expf((float)(dot * (double)scale - (double)lse));
}

template <int DT, int NT>
__device__ __forceinline__ void exact_top_p(float pr[NT][4], float top[2], const bwd_params &p, int b, int h, int row0,
                                            const float *ks, const float lse[2], int t) {
    float pm = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) pm = fmaxf(pm, pr[n][i]);
    if (!__any_sync(0xffffffffu, pm >= 0.5f)) return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int col = -1;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (pr[n][2 * r + e] >= 0.5f) col = n * 8 + 2 * t + e;
        col = max(col, __shfl_xor_sync(0xffffffffu, col, 1));
        col = max(col, __shfl_xor_sync(0xffffffffu, col, 2));
        const int row = row0 + 8 * r;
        const float *qr = col >= 0 && row < p.seq_q ? p.q + b * p.q_b + h * p.q_h + (int64_t)row * p.q_s : nullptr;
        const int d0 = t * (DT / 4), d1 = min((t + 1) * (DT / 4), p.head_dim);
        const float pe = exact_p(qr, ks + (col >= 0 ? col : 0) * (DT + kPad), d0, d1, p.scale, lse[r]);
        if (col < 0) continue;
        top[r] = pe;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (n * 8 + 2 * t + e == col) pr[n][2 * r + e] = pe;
    }
}

/* dQ of 64 queries of one (b, h): see the file comment. BC keys per step. */
template <int DT, int BC, bool X3>
__global__ void __launch_bounds__(kThreads) bwd_dq(bwd_params p) {
    constexpr int DS = DT + kPad, NT = BC / 8, KD = DT / 8;
    extern __shared__ float4 smem_f4[];
    float *qs = reinterpret_cast<float *>(smem_f4); /* [64][DS], q * scale */
    float *ds_ = qs + kRowsPerCta * DS;             /* [64][DS], dout */
    float *ks = ds_ + kRowsPerCta * DS;             /* [BC][DS] */
    float *vs = ks + BC * DS;                       /* [BC][DS] */

    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
    const int q_blocks = (p.seq_q + kRowsPerCta - 1) / kRowsPerCta;
    const int bh = blockIdx.x / q_blocks, i0 = (blockIdx.x % q_blocks) * kRowsPerCta;
    const int b = bh / p.heads, h = bh % p.heads;
    const int n_kv = attended_keys(p.kv_count, b, p.seq_kv);
    const int *kv_rows = attended_rows(p.kv_index, b, p.seq_kv);
    const float *k = p.k + b * p.k_b + h * p.k_h, *v = p.v + b * p.v_b + h * p.v_h;
    load_tile<kRowsPerCta, DT>(qs, p.q + b * p.q_b + h * p.q_h, p.q_s, nullptr, i0, p.seq_q - i0, p.head_dim, p.scale);
    load_tile<kRowsPerCta, DT>(ds_, p.dout + b * p.do_b + h * p.do_h, p.do_s, nullptr, i0, p.seq_q - i0, p.head_dim,
                               1.0f);
    float lse[2], dl_hi[2], dl_lo[2]; /* rows g and g + 8 of the warp */
    float top[2] = {0.0f, 0.0f};      /* exact_top_p */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = i0 + warp * 16 + g + 8 * r;
        lse[r] = INFINITY, dl_hi[r] = dl_lo[r] = 0.0f; /* rows past seq_q: P = 0 */
        if (row < p.seq_q) {
            const int64_t at = (int64_t)bh * p.seq_q + row;
            lse[r] = __ldg(p.lse + at);
            if (lse[r] == -INFINITY) lse[r] = INFINITY;
            const float2 dl = p.dl[at];
            dl_hi[r] = dl.x, dl_lo[r] = dl.y;
        }
    }
    float dq[KD][4];
#pragma unroll
    for (int j = 0; j < KD; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) dq[j][i] = 0.0f;
    const float *q_warp = qs + warp * 16 * DS, *do_warp = ds_ + warp * 16 * DS;

    for (int j0 = 0; j0 < n_kv; j0 += BC) {
        __syncthreads(); /* the Q, dO tiles landed; every warp is done with the previous K, V tile */
        load_tile<BC, DT>(ks, k, p.k_s, kv_rows, j0, n_kv - j0, p.head_dim, 1.0f);
        load_tile<BC, DT>(vs, v, p.v_s, kv_rows, j0, n_kv - j0, p.head_dim, 1.0f);
        __syncthreads();

        float big[NT][4], cor[NT][4], pr[NT][4];
        product_abt<DT, NT>(big, cor, q_warp, ks, g, t); /* S: 16 queries x BC keys */
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int key = j0 + n * 8 + 2 * t + (i & 1);
                /* (big - lse) + cor: rounding big + cor to one float first costs |S| 2^-24 on the logit,
                 * which dQ's cancellation on peaky rows turns into rel_l2 ~1e-5 (D = 1 `large`) */
                pr[n][i] = key < n_kv ? expf((big[n][i] - lse[i >> 1]) + cor[n][i]) : 0.0f;
            }
        exact_top_p<DT, NT>(pr, top, p, b, h, i0 + warp * 16 + g, ks, lse, t);
        product_abt<DT, NT>(big, cor, do_warp, vs, g, t); /* dP */
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = i >> 1;
                pr[n][i] *= ((big[n][i] - dl_hi[r]) + cor[n][i]) - dl_lo[r]; /* dS */
            }
        accumulate_xb<DT, NT, X3>(dq, pr, ks, g, t); /* dQ += dS K */
    }

    float *dqb = p.dq + b * p.dq_b + h * p.dq_h;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = i0 + warp * 16 + g + 8 * r;
        if (row >= p.seq_q) continue;
        if (t == 0) p.top_p[(int64_t)bh * p.seq_q + row] = top[r];
#pragma unroll
        for (int j = 0; j < KD; j++) {
            const int col = j * 8 + 2 * t;
            if (col < p.head_dim) dqb[(int64_t)row * p.dq_s + col] = dq[j][2 * r] * p.scale;
            if (col + 1 < p.head_dim) dqb[(int64_t)row * p.dq_s + col + 1] = dq[j][2 * r + 1] * p.scale;
        }
    }
}

/* The tiles per head-dim tile: DT = 128 takes 16 queries per dK/dV step and 16 keys per dQ step
 * (registers: dK and dV of 16 keys x 128 columns are 128 per thread), smaller DT 32 of each. */
template <int DT>
struct tiles {
    static constexpr int BR = DT == 128 ? 16 : 32;
    static constexpr int BC = DT == 128 ? 16 : 32;
};

template <int DT, bool X3>
cudaError_t launch_dt(const bwd_params &p, cudaStream_t stream) {
    constexpr int DS = DT + kPad, BR = tiles<DT>::BR, BC = tiles<DT>::BC;
    const size_t smem_kv = sizeof(float) * (size_t)(2 * kRowsPerCta + 2 * BR) * DS;
    const size_t smem_q = sizeof(float) * (size_t)(2 * kRowsPerCta + 2 * BC) * DS;
    auto kdkdv = bwd_dkdv<DT, BR, X3>;
    auto kdq = bwd_dq<DT, BC, X3>;
    cudaError_t e = cudaFuncSetAttribute(kdkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(kdq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q);
    if (e != cudaSuccess) return e;
    const long long bh = (long long)p.batch * p.heads;
    const long long kv_ctas = bh * ((p.seq_kv + kRowsPerCta - 1) / kRowsPerCta);
    const long long q_ctas = bh * ((p.seq_q + kRowsPerCta - 1) / kRowsPerCta);
    const long long row_ctas = (bh * p.seq_q + 7) / 8;
    if (kv_ctas > 0x7fffffffLL || q_ctas > 0x7fffffffLL || row_ctas > 0x7fffffffLL)
        return cudaErrorInvalidConfiguration;
    bwd_row_terms<<<(unsigned)row_ctas, 256, 0, stream>>>(p);
    if (p.kv_count) bwd_zero_kv<<<1024, 256, 0, stream>>>(p);
    kdq<<<(unsigned)q_ctas, kThreads, smem_q, stream>>>(p); /* first: bwd_dkdv reads its top_p */
    kdkdv<<<(unsigned)kv_ctas, kThreads, smem_kv, stream>>>(p);
    return cudaGetLastError();
}

template <bool X3>
cudaError_t launch_x3(const bwd_params &p, cudaStream_t s) {
    if (p.head_dim <= 32) return launch_dt<32, X3>(p, s);
    if (p.head_dim <= 64) return launch_dt<64, X3>(p, s);
    return launch_dt<128, X3>(p, s);
}

} /* namespace */

/* Dl [B*H*Sq] float2, then top_p [B*H*Sq] float. */
extern "C" size_t jattn_cuda_bwd_v1_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_q) {
    return align_up((size_t)batch * (size_t)heads * (size_t)seq_q * (sizeof(float2) + sizeof(float)));
}

extern "C" int jattn_cuda_launch_bwd_v1(const jattn_cuda_args *a, void *workspace, void *stream) {
    const jattn_cuda_args *f = a; /* the forward's fields */
    if (f->head_dim < 1 || f->head_dim > JATTN_CUDA_BWD_MAX_HEAD_DIM || !f->lse || !workspace)
        return (int)cudaErrorInvalidValue;
    const bwd_params p = {
        .q = f->q,
        .k = f->k,
        .v = f->v,
        .o = f->out,
        .dout = a->dout,
        .lse = f->lse,
        .dlse = a->dlse,
        .dq = a->dq,
        .dk = a->dk,
        .dv = a->dv,
        .dl = static_cast<float2 *>(workspace),
        .top_p = reinterpret_cast<float *>(static_cast<float2 *>(workspace) + f->batch * f->heads * f->seq_q),
        .q_b = f->q_strides.batch,
        .q_h = f->q_strides.head,
        .q_s = f->q_strides.token,
        .k_b = f->k_strides.batch,
        .k_h = f->k_strides.head,
        .k_s = f->k_strides.token,
        .v_b = f->v_strides.batch,
        .v_h = f->v_strides.head,
        .v_s = f->v_strides.token,
        .o_b = f->out_strides.batch,
        .o_h = f->out_strides.head,
        .o_s = f->out_strides.token,
        .do_b = a->dout_strides.batch,
        .do_h = a->dout_strides.head,
        .do_s = a->dout_strides.token,
        .dq_b = a->dq_strides.batch,
        .dq_h = a->dq_strides.head,
        .dq_s = a->dq_strides.token,
        .dk_b = a->dk_strides.batch,
        .dk_h = a->dk_strides.head,
        .dk_s = a->dk_strides.token,
        .dv_b = a->dv_strides.batch,
        .dv_h = a->dv_strides.head,
        .dv_s = a->dv_strides.token,
        .batch = (int)f->batch,
        .heads = (int)f->heads,
        .seq_q = (int)f->seq_q,
        .seq_kv = (int)f->seq_kv,
        .head_dim = (int)f->head_dim,
        .scale = f->scale,
        .kv_count = f->kv_count,
        .kv_index = f->kv_index};
    cudaStream_t s = (cudaStream_t)stream;
    return (int)(f->precision == JATTN_PRECISION_F32 ? launch_x3<true>(p, s) : launch_x3<false>(p, s));
}
