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
 * One CTA of DT threads per (record, head, batch): thread d owns head_dim column d of the 64 keys
 * (coalesced 4-byte loads and 2-byte stores along d), the K tile's maximum by a block reduction,
 * each V column's maximum in the thread. Memory-bound: it reads K and V once and writes as many
 * bytes. */
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "f16x2_mma_records.cuh"
#include "key_padding.cuh"

namespace {

struct V7SplitParams {
    const float *k, *v;
    int64_t k_b, k_h, k_t, v_b, v_h, v_t;
    int heads, seq_kv, head_dim, dt, records;
    unsigned char *ws;
    const int *kv_count, *kv_index; /* key padding (jattn_cuda_args), or NULL */
};

/* hi = fp16(y), lo = fp16(y - hi): y's 22 leading bits (f16x2_split.cuh). */
__device__ __forceinline__ void split_one(float y, __half &hi, __half &lo) {
    hi = __float2half_rn(y);
    lo = __float2half_rn(y - __half2float(hi));
}

/* The maximum of x over the CTA (blockDim.x threads, a multiple of 16, at most 256). */
__device__ __forceinline__ float block_max(float x, float *red) {
#pragma unroll
    for (int m = 16; m > 0; m /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
    const int warps = (blockDim.x + 31) / 32;
    __syncthreads(); /* red may still be read by the previous reduction */
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    float m = 0.f;
    for (int w = 0; w < warps; ++w) m = fmaxf(m, red[w]);
    return m;
}

__global__ void __launch_bounds__(256) split_kv_f16x2_v7_kernel(const V7SplitParams p) {
    __shared__ float red[8];
    const int d = threadIdx.x;
    const int64_t bh = blockIdx.x / p.records;
    const int rec = (int)(blockIdx.x % p.records);
    const int b = (int)(bh / p.heads), h = (int)(bh % p.heads);
    const int n_kv = attended_keys(p.kv_count, b, p.seq_kv);
    const int *rows = attended_rows(p.kv_index, b, p.seq_kv);
    const int key0 = rec * kV7RecordKeys;
    if (key0 >= n_kv) return; /* never read by the kernel */
    const int dt = p.dt;
    unsigned char *r = p.ws + (bh * p.records + rec) * v7_record_bytes(dt);
    V7KeyInfo *info = reinterpret_cast<V7KeyInfo *>(r + v7_k_info_offset(dt));
    const bool col = d < p.head_dim;

    /* K: one power of two for the record */
    {
        const float *src = p.k + b * p.k_b + h * p.k_h + d;
        float x[kV7RecordKeys];
        float amax = 0.f;
        int bad = 0;
#pragma unroll
        for (int j = 0; j < kV7RecordKeys; ++j) {
            const int key = key0 + j;
            x[j] = col && key < n_kv ? __ldg(src + key_row(rows, key) * p.k_t) : 0.f;
            amax = fmaxf(amax, finite_abs(x[j]));
            bad |= !isfinite(x[j]);
        }
        amax = block_max(amax, red);
        bad = __syncthreads_or(bad);
        const int e = f16x2_exponent(amax, kKTarget);
        const float up = exp2_int(e);
        __half *hi = reinterpret_cast<__half *>(r), *lo = reinterpret_cast<__half *>(r + v7_k_lo_offset(dt));
#pragma unroll
        for (int j = 0; j < kV7RecordKeys; ++j) split_one(x[j] * up, hi[j * dt + d], lo[j * dt + d]);
        if (d == 0) {
            info->k_unscale = exp2_int(-e);
            info->k_bad = bad ? 1u : 0u;
            info->unused = 0u;
        }
    }
    /* V: one power of two per head_dim column of the record */
    {
        const float *src = p.v + b * p.v_b + h * p.v_h + d;
        float x[kV7RecordKeys];
        float cmax = 0.f;
#pragma unroll
        for (int j = 0; j < kV7RecordKeys; ++j) {
            const int key = key0 + j;
            x[j] = col && key < n_kv ? __ldg(src + key_row(rows, key) * p.v_t) : 0.f;
            cmax = fmaxf(cmax, finite_abs(x[j]));
        }
        /* tiny: every value of the record below 2^-63, split after * 2^64 (f16x2_split.cuh) */
        const bool tiny = !__syncthreads_or(cmax >= kTinyLimit);
        const float pre = tiny ? kTinyUp : 1.f;
        const int e = f16x2_exponent(cmax * pre, kVTarget);
        const float up = exp2_int(e);
        __half *hi = reinterpret_cast<__half *>(r + v7_v_hi_offset(dt)),
               *lo = reinterpret_cast<__half *>(r + v7_v_lo_offset(dt));
#pragma unroll
        for (int j = 0; j < kV7RecordKeys; ++j) split_one(x[j] * pre * up, hi[j * dt + d], lo[j * dt + d]);
        reinterpret_cast<float *>(r + v7_v_unscale_offset(dt))[d] = exp2_int(-e);
        if (d == 0) info->v_tiny = tiny ? 1u : 0u;
    }
}

} /* namespace */

/* Bytes of kernel v7's workspace for one call: one record per head and 64 keys. */
extern "C" size_t jattn_cuda_v7_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_kv, int64_t head_dim) {
    const int64_t records = (seq_kv + kV7RecordKeys - 1) / kV7RecordKeys;
    return (size_t)(batch * heads * records * v7_record_bytes(v7_head_dim_tile(head_dim)));
}

/* Enqueues the pre-pass (attention_v7_mma_f16x2.cu checks the call: D <= 256, workspace 16-byte
 * aligned). */
extern "C" cudaError_t split_kv_f16x2_v7(const jattn_cuda_args *a, void *workspace, cudaStream_t stream) {
    V7SplitParams p;
    p.k = a->k;
    p.v = a->v;
    p.k_b = a->k_strides.batch;
    p.k_h = a->k_strides.head;
    p.k_t = a->k_strides.token;
    p.v_b = a->v_strides.batch;
    p.v_h = a->v_strides.head;
    p.v_t = a->v_strides.token;
    p.heads = (int)a->heads;
    p.seq_kv = (int)a->seq_kv;
    p.head_dim = (int)a->head_dim;
    p.dt = v7_head_dim_tile(a->head_dim);
    p.records = (int)((a->seq_kv + kV7RecordKeys - 1) / kV7RecordKeys);
    p.ws = static_cast<unsigned char *>(workspace);
    p.kv_count = a->kv_count;
    p.kv_index = a->kv_index;
    const long long blocks = (long long)p.records * a->batch * a->heads;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
    split_kv_f16x2_v7_kernel<<<(unsigned)blocks, p.dt, 0, stream>>>(p);
    return cudaGetLastError();
}
