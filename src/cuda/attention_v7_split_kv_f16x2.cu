/* split_kv_f16x2_v7: the pre-pass of kernel v7 (attention_v7_mma_f16x2.cu). Splits K and V of
 * every head into scaled fp16 hi + lo images, 64 keys a record (f16x2_mma_records.cuh), so that
 * the kernel's CTAs copy them with cp.async and read them with ldmatrix, never splitting again.
 *
 * Reads  k, v [B, H, Skv, D] through element strides (head_dim contiguous, 4-byte aligned), any
 *        D <= 256; with key padding (kv_count, kv_index: key_padding.cuh) batch b's attended keys,
 *        packed in order: record r holds attended keys 64 r .. 64 r + 63, and the records past
 *        them are neither read nor written.
 * Writes the workspace: one record per head and 64 keys, columns D .. DT-1 and keys past the
 *        attended ones as zeros.
 * Grouped-query heads: records per key/value head (B Hkv of them), each split once for its group.
 * A call with a window or a key bias (jattn_mask; the instance kMasked) also
 *  - writes each non-finite v as 0 and flags its record (V7KeyInfo.v_bad): with windows the rows of a
 *    tile attend different keys, and a weight of exactly 0 times an Inf would be NaN in a row that does
 *    not attend that key; the kernel adds the non-finite values into the rows that attend them
 *    (attention_v7_mma_f16x2.cu, its epilogue);
 *  - stages the key bias of every query head of the group in attended-key order, 64 floats per record
 *    (0 past the attended keys), after the records (v7_bias_offset), so that the kernel copies a tile's
 *    bias with cp.async as it copies K.
 * One CTA of 256 threads per (record, head, batch), a one-dimensional grid: thread t owns the
 * 8-column chunk t % (DT / 8) of rows t / (DT / 8) + 256 / (DT / 8) j: two 16-byte loads a row and
 * chunk (4-byte ones where the tensor's base or strides do not allow it) kept in registers, the K
 * record's maximum by a block reduction, each V column's over the row groups in shared memory,
 * 16-byte stores of 8 hi and 8 lo halves. Memory-bound: it reads K and V once and writes as many
 * bytes. (Its first form, a thread per column with 4-byte loads and 2-byte stores, moved under
 * 1 TB/s: 80 us of the forward's 0.5 ms at (1,24,1536,128), bench/results/h200-2026-12-04-v7-call4.) */
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "f16x2_mma_records.cuh"
#include "key_padding.cuh"
#include "key_window.cuh"

namespace {

struct V7SplitParams {
    const float *k, *v;
    int64_t k_b, k_h, k_t, v_b, v_h, v_t;
    int heads, seq_kv, head_dim, records;
    int k_vec4, v_vec4; /* 16-byte loads: base 16-byte aligned, every stride a multiple of 4 */
    unsigned char *ws;
    const int *kv_count, *kv_index; /* key padding (jattn_cuda_args), or NULL */
    /* kMasked: the key bias (row of query head h at bias + b bias_b + h bias_h, or NULL), staged at
     * bias_ws for the group's query heads (group of them, q_heads in all) */
    const float *bias;
    int64_t bias_b, bias_h;
    float *bias_ws;
    int group, q_heads;
};

constexpr int kSplitThreads = 256;

/* The CTA's threads over a record: thread t owns the 8-column chunk t % chunks of head_dim and the
 * rows t / chunks + pass rows_per_pass (a thread past chunks * rows_per_pass owns nothing). */
template <int DT>
struct V7SplitShape {
    static constexpr int kChunks = DT / 8;
    static constexpr int kRowsPerPass = kSplitThreads / kChunks;
    static constexpr int kPasses = (kV7RecordKeys + kRowsPerPass - 1) / kRowsPerPass;
};

/* The 8 values of row `row` (attended key index; zeros past n_kv), columns c0 .. c0 + 7 (zeros past D):
 * two 16-byte loads when the tensor allows, else 4-byte ones. */
__device__ __forceinline__ void load8(const float *base, int64_t t_stride, const int *rows, int row, int n_kv, int c0,
                                      int d, bool vec4, float (&x)[8]) {
    if (row >= n_kv || c0 >= d) {
#pragma unroll
        for (int k = 0; k < 8; ++k) x[k] = 0.f;
        return;
    }
    const float *src = base + key_row(rows, row) * t_stride + c0;
    if (vec4 && c0 + 8 <= d) {
        const float4 a = __ldg(reinterpret_cast<const float4 *>(src)),
                     b = __ldg(reinterpret_cast<const float4 *>(src) + 1);
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) x[k] = c0 + k < d ? __ldg(src + k) : 0.f;
    }
}

/* hi and lo images of 8 scaled values (y = x * pre * up[k], exact), one 16-byte chunk each. */
__device__ __forceinline__ void store8(const float (&x)[8], float pre, const float (&up)[8], unsigned char *hi,
                                       unsigned char *lo) {
    uint4 h, l;
    f16x2_split2(x[0] * pre * up[0], x[1] * pre * up[1], h.x, l.x);
    f16x2_split2(x[2] * pre * up[2], x[3] * pre * up[3], h.y, l.y);
    f16x2_split2(x[4] * pre * up[4], x[5] * pre * up[5], h.z, l.z);
    f16x2_split2(x[6] * pre * up[6], x[7] * pre * up[7], h.w, l.w);
    *reinterpret_cast<uint4 *>(hi) = h;
    *reinterpret_cast<uint4 *>(lo) = l;
}

/* kMasked: a call with a window or a key bias (non-finite v written as 0 and flagged; the bias staged). */
template <int DT, bool kMasked>
__global__ void __launch_bounds__(kSplitThreads) split_kv_f16x2_v7_kernel(const V7SplitParams p) {
    using S = V7SplitShape<DT>;
    __shared__ float red[S::kRowsPerPass][DT]; /* V: each row group's column maxima; K: the warps' */
    __shared__ float col_up[DT];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t bh = blockIdx.x / p.records;
    const int rec = (int)(blockIdx.x % p.records);
    const int b = (int)(bh / p.heads), h = (int)(bh % p.heads);
    const int n_kv = attended_keys(p.kv_count, b, p.seq_kv);
    const int *rows = attended_rows(p.kv_index, b, p.seq_kv);
    const int key0 = rec * kV7RecordKeys;
    if (key0 >= n_kv) return; /* never read by the kernel */
    if (kMasked && p.bias) {  /* the group's query heads' bias, in attended-key order */
        for (int i = tid; i < p.group * kV7RecordKeys; i += kSplitThreads) {
            const int hq = h * p.group + i / kV7RecordKeys, key = key0 + i % kV7RecordKeys;
            const float x = key < n_kv ? __ldg(p.bias + b * p.bias_b + hq * p.bias_h + key_row(rows, key)) : 0.f;
            p.bias_ws[((int64_t)(b * p.q_heads + hq) * p.records + rec) * kV7RecordKeys + i % kV7RecordKeys] = x;
        }
    }
    unsigned char *r = p.ws + (bh * p.records + rec) * v7_record_bytes(DT);
    V7KeyInfo *info = reinterpret_cast<V7KeyInfo *>(r + v7_k_info_offset(DT));
    const int chunk = tid % S::kChunks, rg = tid / S::kChunks, c0 = 8 * chunk;
    const bool owner = rg < S::kRowsPerPass;
    float x[S::kPasses][8];

    /* K: one power of two for the record */
    {
        const float *base = p.k + b * p.k_b + h * p.k_h;
        float amax = 0.f;
        int bad = 0;
#pragma unroll
        for (int j = 0; j < S::kPasses; ++j) {
            const int rr = rg + j * S::kRowsPerPass;
            load8(base, p.k_t, rows, key0 + rr, owner && rr < kV7RecordKeys ? n_kv : 0, c0, p.head_dim, p.k_vec4, x[j]);
#pragma unroll
            for (int k = 0; k < 8; ++k) amax = fmaxf(amax, finite_abs(x[j][k])), bad |= !isfinite(x[j][k]);
        }
#pragma unroll
        for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        if (lane == 0) red[0][warp] = amax;
        bad = __syncthreads_or(bad);
        amax = 0.f;
#pragma unroll
        for (int w = 0; w < kSplitThreads / 32; ++w) amax = fmaxf(amax, red[0][w]);
        const int e = f16x2_exponent(amax, kKTarget);
        const float up1 = exp2_int(e);
        const float up[8] = {up1, up1, up1, up1, up1, up1, up1, up1};
#pragma unroll
        for (int j = 0; j < S::kPasses; ++j) {
            const int rr = rg + j * S::kRowsPerPass;
            if (owner && rr < kV7RecordKeys) {
                const int64_t off = ((int64_t)rr * DT + c0) * 2;
                store8(x[j], 1.f, up, r + off, r + v7_k_lo_offset(DT) + off);
            }
        }
        if (tid == 0) {
            info->k_unscale = exp2_int(-e);
            info->k_bad = bad ? 1u : 0u;
            info->v_bad = 0u;
        }
        __syncthreads(); /* red is reused below */
    }
    /* V: one power of two per head_dim column of the record */
    {
        const float *base = p.v + b * p.v_b + h * p.v_h;
        float cmax[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        int vbad = 0;
#pragma unroll
        for (int j = 0; j < S::kPasses; ++j) {
            const int rr = rg + j * S::kRowsPerPass;
            load8(base, p.v_t, rows, key0 + rr, owner && rr < kV7RecordKeys ? n_kv : 0, c0, p.head_dim, p.v_vec4, x[j]);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                cmax[k] = fmaxf(cmax[k], finite_abs(x[j][k]));
                if (kMasked && !isfinite(x[j][k])) vbad = 1, x[j][k] = 0.f; /* added back by the kernel */
            }
        }
        if (owner) {
#pragma unroll
            for (int k = 0; k < 8; ++k) red[rg][c0 + k] = cmax[k];
        }
        __syncthreads();
        float m = 0.f;
        if (tid < DT) {
#pragma unroll 4
            for (int g = 0; g < S::kRowsPerPass; ++g) m = fmaxf(m, red[g][tid]);
        }
        /* tiny: every value of the record below 2^-63, split after * 2^64 (f16x2_split.cuh) */
        const bool tiny = !__syncthreads_or(tid < DT && m >= kTinyLimit);
        const float pre = tiny ? kTinyUp : 1.f;
        if (tid < DT) {
            const int e = f16x2_exponent(m * pre, kVTarget);
            col_up[tid] = exp2_int(e);
            reinterpret_cast<float *>(r + v7_v_unscale_offset(DT))[tid] = exp2_int(-e);
        }
        if (kMasked) vbad = __syncthreads_or(vbad);
        if (tid == 0) {
            info->v_tiny = tiny ? 1u : 0u;
            if (kMasked) info->v_bad = vbad ? 1u : 0u;
        }
        __syncthreads();
        float up[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) up[k] = col_up[c0 + k];
#pragma unroll
        for (int j = 0; j < S::kPasses; ++j) {
            const int rr = rg + j * S::kRowsPerPass;
            if (owner && rr < kV7RecordKeys) {
                const int64_t off = ((int64_t)rr * DT + c0) * 2;
                store8(x[j], pre, up, r + v7_v_hi_offset(DT) + off, r + v7_v_lo_offset(DT) + off);
            }
        }
    }
}

} /* namespace */

/* Bytes of kernel v7's workspace for one call: one record per key/value head and 64 keys, then the key
 * bias a masked call stages (4 bytes per query head and key, rounded up to records). */
extern "C" size_t jattn_cuda_v7_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_kv,
                                                int64_t head_dim) {
    const int64_t records = (seq_kv + kV7RecordKeys - 1) / kV7RecordKeys;
    return (size_t)(v7_bias_offset(batch, kv_heads, records, v7_head_dim_tile(head_dim)) +
                    batch * heads * records * kV7RecordKeys * 4);
}

template <bool kMasked>
static void split_launch(const V7SplitParams &p, dim3 grid, int dt, cudaStream_t stream) {
    switch (dt) {
    case 32: split_kv_f16x2_v7_kernel<32, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    case 48: split_kv_f16x2_v7_kernel<48, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    case 64: split_kv_f16x2_v7_kernel<64, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    case 80: split_kv_f16x2_v7_kernel<80, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    case 96: split_kv_f16x2_v7_kernel<96, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    case 128: split_kv_f16x2_v7_kernel<128, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    case 160: split_kv_f16x2_v7_kernel<160, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    case 192: split_kv_f16x2_v7_kernel<192, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    default: split_kv_f16x2_v7_kernel<256, kMasked><<<grid, kSplitThreads, 0, stream>>>(p); break;
    }
}

/* Enqueues the pre-pass (attention_v7_mma_f16x2.cu checks the call: D <= 256, workspace 16-byte
 * aligned): the records of the B Hkv key/value heads; for a call with a window or a key bias the
 * masked instance. */
extern "C" cudaError_t split_kv_f16x2_v7(const jattn_cuda_args *a, void *workspace, cudaStream_t stream) {
    const int64_t kv_heads = a->kv_heads > 0 ? a->kv_heads : a->heads;
    V7SplitParams p;
    p.k = a->k;
    p.v = a->v;
    p.k_b = a->k_strides.batch;
    p.k_h = a->k_strides.head;
    p.k_t = a->k_strides.token;
    p.v_b = a->v_strides.batch;
    p.v_h = a->v_strides.head;
    p.v_t = a->v_strides.token;
    p.heads = (int)kv_heads;
    p.seq_kv = (int)a->seq_kv;
    p.head_dim = (int)a->head_dim;
    p.records = (int)((a->seq_kv + kV7RecordKeys - 1) / kV7RecordKeys);
    p.ws = static_cast<unsigned char *>(workspace);
    p.kv_count = a->kv_count;
    p.kv_index = a->kv_index;
    p.k_vec4 = (uintptr_t)a->k % 16 == 0 && p.k_b % 4 == 0 && p.k_h % 4 == 0 && p.k_t % 4 == 0;
    p.v_vec4 = (uintptr_t)a->v % 16 == 0 && p.v_b % 4 == 0 && p.v_h % 4 == 0 && p.v_t % 4 == 0;
    const int dt = v7_head_dim_tile(a->head_dim);
    p.bias = a->key_bias;
    p.bias_b = a->bias_batch_stride;
    p.bias_h = a->bias_head_stride;
    p.bias_ws = reinterpret_cast<float *>(p.ws + v7_bias_offset(a->batch, kv_heads, p.records, dt));
    p.group = (int)(a->heads / kv_heads);
    p.q_heads = (int)a->heads;
    const long long blocks = (long long)p.records * a->batch * kv_heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)blocks);
    if (kw_has_window(*a) || a->key_bias)
        split_launch<true>(p, grid, dt, stream);
    else
        split_launch<false>(p, grid, dt, stream);
    return cudaGetLastError();
}
