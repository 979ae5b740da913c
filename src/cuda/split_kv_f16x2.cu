/* split_kv_f16x2: the pre-pass of kernel v4. Splits K and V of every head into scaled fp16
 * hi + lo pairs, in the fragment order the attention kernel loads (layout: f16x2_split.cuh).
 *
 * Reads  k, v [B, H, Skv, D] through element strides (head_dim contiguous, float4 aligned),
 *        D in {64, 128}.
 * Writes the workspace regions k_split, k_unscale, v_split, v_unscale, v_tiny of one call.
 *
 * One CTA of 256 threads per (64-key tile, head, batch):
 *  - K: each key row is read by D/4 lanes (one float4 each), its finite maximum reduced by
 *    shuffles, and written as D/4 chunks of 16 bytes (coalesced).
 *  - V: the tile is staged in shared memory (rows padded by one float), every head_dim
 *    column's finite maximum taken over the tile's keys, and each column written as 16 chunks
 *    in the key order of kernel v4's P^T (coalesced 256 bytes per column).
 * Reads and writes each byte of K and V once: ~2 x 4 bytes per element of K and V in, the same
 * out; about 2% of the attention's time at (24, 4608, 128). */
#include <stdint.h>

#include <cuda_runtime.h>

#include "attention_f32_sm90_wgmma.h"
#include "f16x2_split.cuh"

namespace {

constexpr int kSplitThreads = 256;

struct SplitParams {
    const float *k, *v;
    int64_t k_b, k_h, k_t, v_b, v_h, v_t;
    int heads, seq_kv;
    unsigned char *ws;
    F16x2Layout layout;
};

template <int D>
__global__ void __launch_bounds__(kSplitThreads) split_kv_f16x2_kernel(const SplitParams p)
{
    constexpr int kLanes = D / 4;                    /* lanes per K row, one float4 each */
    constexpr int kRowsPerPass = kSplitThreads / kLanes;
    constexpr int kPitch = D + 1;                    /* padded V row in shared memory */
    __shared__ float v_tile[kF16Tile * kPitch];
    __shared__ float v_up[D];                        /* 2^ev of each column */

    const int tid = threadIdx.x;
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int64_t bh = (int64_t)b * p.heads + h;
    const int key0 = tile * kF16Tile;
    const F16x2Layout &L = p.layout;

    /* ---- K: one row per kLanes lanes ---- */
    {
        const float *kp = p.k + b * p.k_b + h * p.k_h;
        uint4 *k_split = reinterpret_cast<uint4 *>(p.ws + L.k_split) + (bh * L.rows + key0) * kLanes;
        float *k_unscale = reinterpret_cast<float *>(p.ws + L.k_unscale) + bh * L.rows + key0;
        const int lane = tid % kLanes;
#pragma unroll
        for (int row = tid / kLanes; row < kF16Tile; row += kRowsPerPass) {
            const int key = key0 + row;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (key < p.seq_kv) x = __ldg(reinterpret_cast<const float4 *>(kp + (int64_t)key * p.k_t) + lane);
            float amax = fmaxf(fmaxf(finite_abs(x.x), finite_abs(x.y)), fmaxf(finite_abs(x.z), finite_abs(x.w)));
#pragma unroll
            for (int m = kLanes / 2; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
            const int e = f16x2_exponent(amax, kKTarget);
            const float up = exp2_int(e);
            uint4 out;
            f16x2_split2(x.x * up, x.y * up, out.x, out.z);
            f16x2_split2(x.z * up, x.w * up, out.y, out.w);
            k_split[(int64_t)row * kLanes + lane] = out;
            if (lane == 0) k_unscale[row] = exp2_int(-e);
        }
    }

    /* ---- V: stage the tile, scale per column, write in P^T key order ---- */
    const float *vp = p.v + b * p.v_b + h * p.v_h;
    for (int idx = tid; idx < kF16Tile * kLanes; idx += kSplitThreads) {
        const int row = idx / kLanes, c4 = idx % kLanes;
        const int key = key0 + row;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (key < p.seq_kv) x = __ldg(reinterpret_cast<const float4 *>(vp + (int64_t)key * p.v_t) + c4);
        float *dst = v_tile + row * kPitch + 4 * c4;
        dst[0] = x.x;
        dst[1] = x.y;
        dst[2] = x.z;
        dst[3] = x.w;
    }
    __syncthreads();
    float col_max = 0.f;
    if (tid < D)
        for (int row = 0; row < kF16Tile; ++row) col_max = fmaxf(col_max, finite_abs(v_tile[row * kPitch + tid]));
    const bool tiny = !__syncthreads_or(tid < D && col_max >= kTinyLimit);
    const float pre = tiny ? kTinyUp : 1.f;
    if (tid < D) {
        const int e = f16x2_exponent(col_max * pre, kVTarget);
        v_up[tid] = exp2_int(e);
        float *v_unscale = reinterpret_cast<float *>(p.ws + L.v_unscale) + (bh * L.tiles + tile) * D;
        v_unscale[tid] = exp2_int(-e);
    }
    if (tid == 0) reinterpret_cast<int *>(p.ws + L.v_tiny)[bh * L.tiles + tile] = tiny ? 1 : 0;
    __syncthreads();
    uint4 *v_split = reinterpret_cast<uint4 *>(p.ws + L.v_split) + (bh * L.tiles + tile) * D * 16;
    for (int id = tid; id < D * 16; id += kSplitThreads) {
        const int d = id / 16, ks = (id % 16) / 4, c = id % 4;
        const float up = v_up[d];
        const float *col = v_tile + (16 * ks + c) * kPitch + d;
        /* keys 16 ks + c, + 8, + 4, + 12: (v * pre) is exact, then * 2^ev exact */
        const float x0 = col[0] * pre * up, x1 = col[8 * kPitch] * pre * up;
        const float x2 = col[4 * kPitch] * pre * up, x3 = col[12 * kPitch] * pre * up;
        uint4 out;
        f16x2_split2(x0, x1, out.x, out.z);
        f16x2_split2(x2, x3, out.y, out.w);
        v_split[id] = out;
    }
}

} /* namespace */

extern "C" size_t attention_f32_sm90_f16x2_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_kv,
                                                           int64_t head_dim)
{
    return (size_t)f16x2_layout(batch, heads, seq_kv, head_dim).bytes;
}

/* Enqueues the pre-pass of a supported call (attention_f32_sm90_wgmma_f16x2.cu checks it). */
extern "C" cudaError_t split_kv_f16x2(const attention_sm90_args *a, void *workspace, cudaStream_t stream)
{
    SplitParams p;
    p.k = a->k;
    p.v = a->v;
    p.k_b = a->k_strides.batch; p.k_h = a->k_strides.head; p.k_t = a->k_strides.token;
    p.v_b = a->v_strides.batch; p.v_h = a->v_strides.head; p.v_t = a->v_strides.token;
    p.heads = (int)a->heads;
    p.seq_kv = (int)a->seq_kv;
    p.ws = static_cast<unsigned char *>(workspace);
    p.layout = f16x2_layout(a->batch, a->heads, a->seq_kv, a->head_dim);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)p.layout.tiles, (unsigned)a->heads, (unsigned)a->batch);
    cfg.blockDim = dim3(kSplitThreads, 1, 1);
    cfg.stream = stream;
    return a->head_dim == 128 ? cudaLaunchKernelEx(&cfg, split_kv_f16x2_kernel<128>, p)
                              : cudaLaunchKernelEx(&cfg, split_kv_f16x2_kernel<64>, p);
}
