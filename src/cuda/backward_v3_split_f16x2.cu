/* bwd_v3_split: the pre-pass of the backward v3 (backward_v3_mma_f16x2.cu). Writes every byte of the
 * workspace regions of backward_v3_layout.cuh that the kernels read: q * scale, dout, k and v of every
 * head as 64-row records of scaled fp16 hi + lo images (hi + lo + tiny at Dp = 16; one power of two per
 * record), their unscales,
 * the row lse (-inf and rows past seq_q as +inf) and Dl = dO.O - dlse (float64 in a fixed order, kept as
 * float hi + lo).
 *
 * Reads  q, out, dout [B, H, Sq, D] and k, v [B, Hkv, Skv, D] through element strides (head_dim contiguous,
 *        any alignment of 4 bytes), any D <= 256; lse [B, H, Sq] contiguous; dlse likewise or NULL; the
 *        key padding's kv_count [B] and kv_index [B][Skv] (or NULL): k and v records hold the attended
 *        keys of the batch in ascending order, then zeros.
 * Writes img, unscale, lse, dl (workspace).
 * One CTA of 256 threads per (record, tensor, head), flattened into a one-dimensional grid: a pass over
 * the record's values for its largest magnitude (warps over rows, lanes over columns: coalesced), then a
 * pass writing 16-byte chunks of 8 halves per thread (the values read again, from L1), then the row data
 * (q: lse; dout: Dl, one warp per row). Memory-bound.
 * A masked call (a window part, a key bias or grouped-query heads: bwd_v3_split<true>) takes the same
 * records with non-finite values as 0 and the keys no query row attends as zeros (v3_key_reached), k and v
 * per key/value head (Hkv of them), and writes the mask's
 * regions: per (batch, query record) the 64 rows' windows and their four summaries (backward_v3_mask.cuh),
 * per (head, key record) the 64 attended keys' bias; those CTAs use 64 of their threads. */
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backward_v3_layout.cuh"
#include "backward_v3_mask.cuh"
#include "cuda_internal.h"
#include "f16x2_split.cuh"
#include "key_padding.cuh"
#include "key_window.cuh"

namespace {

constexpr int kSplitThreads = 256;
constexpr int kSplitWarps = kSplitThreads / 32;

struct BwdV3SplitParams {
    const float *src[4];
    int64_t s_b[4], s_h[4], s_t[4];
    const float *o;
    int64_t o_b, o_h, o_t;
    const float *lse, *dlse;
    const int *kv_count, *kv_index;
    unsigned char *ws;
    int64_t img[4], unscale[4], lse_off, dl_off;
    int heads, seq_q, seq_kv, d, dp, tq, tk;
    float scale;
};

/* The masked pre-pass (a window part, a key bias or grouped-query heads): the records with non-finite values
 * as 0, k and v per key/value head, and the mask's regions of backward_v3_layout.cuh (win, wsum, bias). */
struct BwdV3SplitMaskParams : BwdV3SplitParams {
    jattn_cuda_args a; /* the mask (key_window.cuh) */
    int kv_heads, batch;
    int64_t win_off, wsum_off, bias_off;
    int64_t blocks_q, blocks_kv, blocks_win; /* the grid: q and dout records, k and v records, windows, bias */
};

/* The windows of the 64 query rows of record qt of batch b (rows past the last segment and past seq_q:
 * (Skv, Skv)), and the summaries of their groups of 16 (backward_v3_mask.cuh). Threads 0..63. */
__device__ __forceinline__ void window_record(const BwdV3SplitMaskParams &m, int b, int qt) {
    const BwdV3SplitParams &p = m;
    const int tid = threadIdx.x, i = qt * kV3Rec + tid;
    const int2 w = v3_row_window(m.a, b, i);
    reinterpret_cast<int2 *>(p.ws + m.win_off)[(int64_t)b * p.tq * kV3Rec + i] = w;
    int4 sum = v3_sum_row(w, i < p.seq_q);
#pragma unroll
    for (int x = 1; x < kV3SumRows; x *= 2) {
        const int4 o = v3_int4(__shfl_xor_sync(0xffffffffu, sum.x, x), __shfl_xor_sync(0xffffffffu, sum.y, x),
                               __shfl_xor_sync(0xffffffffu, sum.z, x), __shfl_xor_sync(0xffffffffu, sum.w, x));
        sum = v3_sum_merge(sum, o);
    }
    if (tid % kV3SumRows == 0)
        reinterpret_cast<int4 *>(p.ws + m.wsum_off)[((int64_t)b * p.tq * kV3Rec + i) / kV3SumRows] = sum;
}

/* The key bias of head bh = (b, h) at the 64 attended keys of record kt (0 past them). Threads 0..63. */
__device__ __forceinline__ void bias_record(const BwdV3SplitMaskParams &m, int64_t bh, int b, int h, int kt) {
    const BwdV3SplitParams &p = m;
    const int c = kt * kV3Rec + (int)threadIdx.x;
    const int n = attended_keys(p.kv_count, b, p.seq_kv);
    const float *row = kw_bias_row(m.a, b, h);
    const float x = c < n ? __ldg(row + key_row(attended_rows(p.kv_index, b, p.seq_kv), c)) : 0.f;
    reinterpret_cast<float *>(p.ws + m.bias_off)[bh * p.tk * kV3Rec + c] = x;
}

template <bool MASKED>
struct SplitParamsOf {
    using type = BwdV3SplitParams;
};
template <>
struct SplitParamsOf<true> {
    using type = BwdV3SplitMaskParams;
};

/* One CTA: record `tile` of tensor `which` of head bh = (b, h) (k and v: MASKED, key/value head h) and its row
 * data (q: lse, dout: Dl); MASKED also a window or bias record (window_record, bias_record). MASKED: non-finite
 * values enter the images as 0, so that a masked (query, key) pair, whose P and dS are 0, multiplies no Inf or
 * NaN (their scale is that of the finite values either way). */
template <bool MASKED>
__global__ void __launch_bounds__(kSplitThreads) bwd_v3_split(const typename SplitParamsOf<MASKED>::type p) {
    __shared__ float red[kSplitWarps];
    int64_t bh;
    int r, which, tile, tiles, b, h;
    if constexpr (!MASKED) {
        const int per_bh = 2 * p.tq + 2 * p.tk;
        bh = blockIdx.x / per_bh;
        r = (int)(blockIdx.x % per_bh);
        if (r < p.tq)
            which = kV3Q;
        else if (r < 2 * p.tq)
            which = kV3DO, r -= p.tq;
        else if (r < 2 * p.tq + p.tk)
            which = kV3K, r -= 2 * p.tq;
        else
            which = kV3V, r -= 2 * p.tq + p.tk;
        tile = r, tiles = which < 2 ? p.tq : p.tk;
        b = (int)(bh / p.heads), h = (int)(bh % p.heads);
    } else {
        int64_t blk = blockIdx.x;
        if (blk < p.blocks_q) { /* q, dout of head bh */
            bh = blk / (2 * p.tq);
            r = (int)(blk % (2 * p.tq));
            which = r < p.tq ? kV3Q : kV3DO, tile = r % p.tq, tiles = p.tq;
            b = (int)(bh / p.heads), h = (int)(bh % p.heads);
        } else if ((blk -= p.blocks_q) < p.blocks_kv) { /* k, v of key/value head bh */
            bh = blk / (2 * p.tk);
            r = (int)(blk % (2 * p.tk));
            which = r < p.tk ? kV3K : kV3V, tile = r % p.tk, tiles = p.tk;
            b = (int)(bh / p.kv_heads), h = (int)(bh % p.kv_heads);
        } else {
            blk -= p.blocks_kv;
            if (threadIdx.x >= kV3Rec) return;
            if (blk < p.blocks_win) {
                window_record(p, (int)(blk / p.tq), (int)(blk % p.tq));
            } else {
                blk -= p.blocks_win;
                bh = blk / p.tk;
                bias_record(p, bh, (int)(bh / p.heads), (int)(bh % p.heads), (int)(blk % p.tk));
            }
            return;
        }
    }
    const bool keys = which >= 2;
    const int n = keys ? attended_keys(p.kv_count, b, p.seq_kv) : p.seq_q;
    const int *rows = keys ? attended_rows(p.kv_index, b, p.seq_kv) : nullptr;
    const float *src = p.src[which] + b * p.s_b[which] + h * p.s_h[which];
    const int64_t stride = p.s_t[which];
    const float mul = which == kV3Q ? p.scale : 1.f;
    const int r0 = tile * kV3Rec;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    /* MASKED k, v: the record's keys some query row attends (bit rr; v3_key_reached), the others left out as the
     * padding's are */
    uint64_t reach = ~0ull;
    if constexpr (MASKED) {
        if (keys) {
            const bool on = tid < kV3Rec && r0 + tid < n && v3_key_reached(p.a, b, h, key_row(rows, r0 + tid));
            const unsigned votes = __ballot_sync(0xffffffffu, on);
            if (lane == 0 && warp < 2) red[warp] = __uint_as_float(votes);
            __syncthreads();
            reach = (uint64_t)__float_as_uint(red[0]) | (uint64_t)__float_as_uint(red[1]) << 32;
            __syncthreads();
        }
    }

    /* 1. the record's largest finite magnitude */
    float amax = 0.f;
    for (int rr = warp; rr < kV3Rec; rr += kSplitWarps) {
        if (r0 + rr >= n) break;
        if (MASKED && !(reach >> rr & 1u)) continue;
        const float *row = src + key_row(rows, r0 + rr) * stride;
        for (int c = lane; c < p.d; c += 32) amax = fmaxf(amax, finite_abs(__ldg(row + c) * mul));
    }
#pragma unroll
    for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    if (lane == 0) red[warp] = amax;
    __syncthreads();
    amax = 0.f;
#pragma unroll
    for (int w = 0; w < kSplitWarps; ++w) amax = fmaxf(amax, red[w]);
    const int e = f16x2_exponent(amax, kV3Target);
    const float up = exp2_int(e);

    /* 2. the hi and lo (and tiny) images, 16-byte chunks of 8 columns */
    const int chunks = p.dp / 8, parts = bwd_v3_parts(p.dp);
    const int64_t part_bytes = (int64_t)kV3Rec * p.dp * 2;
    unsigned char *rec = p.ws + p.img[which] + (bh * tiles + tile) * parts * part_bytes;
    for (int i = tid; i < kV3Rec * chunks; i += kSplitThreads) {
        const int rr = i / chunks, c0 = (i % chunks) * 8;
        float x[8];
        const bool valid = r0 + rr < n && (!MASKED || (reach >> rr & 1u));
        const float *row = valid ? src + key_row(rows, r0 + rr) * stride : src;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            if (MASKED) {
                const float y = valid && c0 + k < p.d ? __ldg(row + c0 + k) * mul : 0.f;
                x[k] = isfinite(y) ? y * up : 0.f;
            } else {
                x[k] = valid && c0 + k < p.d ? __ldg(row + c0 + k) * mul * up : 0.f;
            }
        }
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) f16x2_split2(x[2 * k], x[2 * k + 1], hi[k], lo[k]);
        const int64_t off = ((int64_t)rr * p.dp + c0) * 2;
        *reinterpret_cast<uint4 *>(rec + off) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(rec + part_bytes + off) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        if (parts == 3) { /* tiny = x - hi - lo (both exact in float32: x has 24 bits, hi + lo its top 22) */
            uint32_t ti[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float2 h = __half22float2(*reinterpret_cast<const __half2 *>(&hi[k]));
                const float2 l = __half22float2(*reinterpret_cast<const __half2 *>(&lo[k]));
                const __half2 t = __floats2half2_rn((x[2 * k] - h.x) - l.x, (x[2 * k + 1] - h.y) - l.y);
                ti[k] = *reinterpret_cast<const uint32_t *>(&t);
            }
            *reinterpret_cast<uint4 *>(rec + 2 * part_bytes + off) = make_uint4(ti[0], ti[1], ti[2], ti[3]);
        }
    }
    if (tid == 0) reinterpret_cast<float *>(p.ws + p.unscale[which])[bh * tiles + tile] = exp2_int(-e);

    /* 3. the row data */
    if (which == kV3Q && tid < kV3Rec) {
        float l = INFINITY; /* rows past seq_q */
        if (r0 + tid < p.seq_q) {
            l = __ldg(p.lse + bh * p.seq_q + r0 + tid);
            if (l == -INFINITY) l = INFINITY; /* a row with no key: P = 0 */
        }
        reinterpret_cast<float *>(p.ws + p.lse_off)[bh * p.tq * kV3Rec + r0 + tid] = l;
    } else if (which == kV3DO) {
        for (int rr = warp; rr < kV3Rec; rr += kSplitWarps) {
            const int row = r0 + rr;
            double acc = 0.0;
            if (row < p.seq_q) {
                const float *dr = src + (int64_t)row * stride;
                const float *orow = p.o + b * p.o_b + h * p.o_h + (int64_t)row * p.o_t;
                for (int c = lane; c < p.d; c += 32) acc += (double)__ldg(dr + c) * (double)__ldg(orow + c);
            }
#pragma unroll
            for (int m = 16; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
            if (lane == 0) {
                if (row < p.seq_q && p.dlse) acc -= (double)__ldg(p.dlse + bh * p.seq_q + row);
                const float hi = (float)acc;
                reinterpret_cast<float2 *>(p.ws + p.dl_off)[bh * p.tq * kV3Rec + row] =
                    make_float2(hi, (float)(acc - (double)hi));
            }
        }
    }
}
} /* namespace */

/* The parameters of either pre-pass: the call's tensors and the regions of layout L. */
static BwdV3SplitParams split_params(const jattn_cuda_args *a, const BwdV3Layout &L, void *workspace) {
    BwdV3SplitParams p;
    const float *srcs[4] = {a->q, a->dout, a->k, a->v};
    const jattn_cuda_strides *st[4] = {&a->q_strides, &a->dout_strides, &a->k_strides, &a->v_strides};
    for (int t = 0; t < 4; ++t) {
        p.src[t] = srcs[t];
        p.s_b[t] = st[t]->batch, p.s_h[t] = st[t]->head, p.s_t[t] = st[t]->token;
        p.img[t] = L.img[t], p.unscale[t] = L.unscale[t];
    }
    p.o = a->out, p.o_b = a->out_strides.batch, p.o_h = a->out_strides.head, p.o_t = a->out_strides.token;
    p.lse = a->lse, p.dlse = a->dlse;
    p.kv_count = a->kv_count, p.kv_index = a->kv_index;
    p.ws = static_cast<unsigned char *>(workspace);
    p.lse_off = L.lse, p.dl_off = L.dl;
    p.heads = (int)a->heads, p.seq_q = (int)a->seq_q, p.seq_kv = (int)a->seq_kv;
    p.d = (int)a->head_dim, p.dp = (int)L.dp, p.tq = (int)L.tq, p.tk = (int)L.tk;
    p.scale = a->scale;
    return p;
}

/* Enqueues the pre-pass (backward_v3_mma_f16x2.cu has checked the call). */
extern "C" cudaError_t bwd_v3_split_launch(const jattn_cuda_args *a, void *workspace, cudaStream_t stream) {
    const int64_t bh = a->batch * a->heads;
    const BwdV3Layout L = bwd_v3_layout(bh, bh, a->batch, a->seq_q, a->seq_kv, a->head_dim);
    const BwdV3SplitParams p = split_params(a, L, workspace);
    const long long blocks = (long long)bh * (2 * L.tq + 2 * L.tk);
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    bwd_v3_split<false><<<(unsigned)blocks, kSplitThreads, 0, stream>>>(p);
    return cudaGetLastError();
}

/* Enqueues the masked pre-pass (a window part, a key bias or grouped-query heads: kv_heads resolved). */
extern "C" cudaError_t bwd_v3_split_masked_launch(const jattn_cuda_args *a, void *workspace, cudaStream_t stream) {
    const int64_t bh = a->batch * a->heads, bhkv = a->batch * a->kv_heads;
    const BwdV3Layout L = bwd_v3_layout(bh, bhkv, a->batch, a->seq_q, a->seq_kv, a->head_dim);
    BwdV3SplitMaskParams m;
    static_cast<BwdV3SplitParams &>(m) = split_params(a, L, workspace);
    m.a = *a;
    m.kv_heads = (int)a->kv_heads, m.batch = (int)a->batch;
    m.win_off = L.win, m.wsum_off = L.wsum, m.bias_off = L.bias;
    m.blocks_q = bh * 2 * L.tq;
    m.blocks_kv = bhkv * 2 * L.tk;
    m.blocks_win = kw_has_window(*a) ? a->batch * L.tq : 0;
    const long long blocks = m.blocks_q + m.blocks_kv + m.blocks_win + (a->key_bias ? bh * L.tk : 0);
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    bwd_v3_split<true><<<(unsigned)blocks, kSplitThreads, 0, stream>>>(m);
    return cudaGetLastError();
}
