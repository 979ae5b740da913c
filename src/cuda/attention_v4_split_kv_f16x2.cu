/* split_kv_f16x2: the pre-pass of kernel v4. Splits K and V of every head into scaled fp16
 * hi + lo pairs, in the fragment order the attention kernel loads (layout: f16x2_split.cuh).
 *
 * Reads  k, v [B, H, Skv, D] through element strides (head_dim contiguous, float4 aligned),
 *        D in {64, 128}.
 * Writes the workspace regions k_split, k_unscale, v_split, v_unscale, v_tiny of one call.
 *
 * One CTA of 256 threads per (64-key tile, head, batch):
 *  - K: the two key rows of one A fragment (16w+g and 16w+g+8) are read by D/4 lanes (one
 *    float4 of each), their finite maxima reduced by shuffles, and written as the fragments'
 *    hi and lo chunks (a warp's 32 hi chunks contiguous, then its 32 lo chunks).
 *  - V: the tile is staged in shared memory (rows padded by one float), every head_dim
 *    column's finite maximum taken over the tile's keys, and the A fragments of V^T written
 *    in the key order of kernel v4's P^T (coalesced in the same way).
 * Reads K and V once and writes as many bytes (hi and lo, 2 + 2 per element): measured (ncu,
 * H200) 21 us at (1,24,1536,128), 6.7% of the call, and 62 us at (1,24,4608,128), 2.7%, at
 * ~3.6 TB/s. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "attention_sm90.h"
#include "f16x2_split.cuh"
#include "key_padding.cuh"

namespace {

constexpr int kSplitThreads = 256;

struct SplitParams {
    const float *k, *v;
    int64_t k_b, k_h, k_t, v_b, v_h, v_t;
    int heads, seq_kv;
    unsigned char *ws;
    F16x2Layout layout;
    const int *kv_count, *kv_index; /* key padding (jattn_cuda_args), or NULL */
};

/* kPadded: a key-padded call (p.kv_count set); the unpadded instance is the pre-pass as before. */
template <int D, bool kPadded>
__global__ void __launch_bounds__(kSplitThreads) split_kv_f16x2_kernel(const SplitParams p) {
    constexpr int kLanes = D / 4;                        /* lanes per K row pair, one float4 of each row */
    constexpr int kRowsPerPass = kSplitThreads / kLanes; /* row pairs per pass */
    constexpr int kSlices = D / 16;
    constexpr int kTileChunks = kF16Tile * D / 4; /* 16-byte chunks of one split tile (hi and lo) */
    constexpr int kOutVec = 2 * (D / 64);
    constexpr int kPitch = D + 1; /* padded V row in shared memory */
    __shared__ float v_tile[kF16Tile * kPitch];
    __shared__ float v_up[D]; /* 2^ev of each column */

    const int tid = threadIdx.x;
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int64_t bh = (int64_t)b * p.heads + h;
    const int key0 = tile * kF16Tile;
    const F16x2Layout &L = p.layout;
    /* Key padding: batch b's attended keys, packed in order (key j = row key_row(rows, j));
     * tiles past them are never read by the attention kernel, nor written here. */
    const int n_kv = kPadded ? attended_keys(p.kv_count, b, p.seq_kv) : p.seq_kv;
    const int *rows = kPadded ? attended_rows(p.kv_index, b, p.seq_kv) : nullptr;
    if (kPadded && key0 >= n_kv) return;

    /* ---- K: rows 16w+g and 16w+g+8 of the tile together, kLanes lanes per pair ---- */
    {
        const float *kp = p.k + b * p.k_b + h * p.k_h;
        uint4 *k_split = reinterpret_cast<uint4 *>(p.ws + L.k_split) + (bh * L.tiles + tile) * kTileChunks;
        float *k_unscale = reinterpret_cast<float *>(p.ws + L.k_unscale) + bh * L.rows + key0;
        const int n = tid % kLanes, s = n / 4, c = n % 4; /* head_dim 4n .. 4n+3: slice s, thread c */
#pragma unroll
        for (int pair = tid / kLanes; pair < kF16Tile / 2; pair += kRowsPerPass) {
            const int w = pair / 8, g = pair % 8;
            float4 x[2];
            float up[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int key = key0 + 16 * w + g + 8 * r;
                x[r] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (key < n_kv) x[r] = __ldg(reinterpret_cast<const float4 *>(kp + key_row(rows, key) * p.k_t) + n);
                float amax =
                    fmaxf(fmaxf(finite_abs(x[r].x), finite_abs(x[r].y)), fmaxf(finite_abs(x[r].z), finite_abs(x[r].w)));
#pragma unroll
                for (int m = kLanes / 2; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
                const int e = f16x2_exponent(amax, kKTarget);
                up[r] = exp2_int(e);
                if (n == 0) k_unscale[16 * w + g + 8 * r] = exp2_int(-e);
            }
            /* the A fragment words: row g then g+8, columns 2c..2c+1 (d 4n, 4n+1) then 2c+8..2c+9 */
            uint4 hi, lo;
            f16x2_split2(x[0].x * up[0], x[0].y * up[0], hi.x, lo.x);
            f16x2_split2(x[1].x * up[1], x[1].y * up[1], hi.y, lo.y);
            f16x2_split2(x[0].z * up[0], x[0].w * up[0], hi.z, lo.z);
            f16x2_split2(x[1].z * up[1], x[1].w * up[1], hi.w, lo.w);
            uint4 *dst = k_split + (w * kSlices + s) * 64 + 4 * g + c;
            dst[0] = hi;
            dst[32] = lo;
        }
    }

    /* ---- V: stage the tile, scale per column, write in P^T key order ---- */
    const float *vp = p.v + b * p.v_b + h * p.v_h;
    for (int idx = tid; idx < kF16Tile * kLanes; idx += kSplitThreads) {
        const int row = idx / kLanes, c4 = idx % kLanes;
        const int key = key0 + row;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (key < n_kv) x = __ldg(reinterpret_cast<const float4 *>(vp + key_row(rows, key) * p.v_t) + c4);
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
    uint4 *v_split = reinterpret_cast<uint4 *>(p.ws + L.v_split) + (bh * L.tiles + tile) * kTileChunks;
    for (int id = tid; id < kTileChunks / 2; id += kSplitThreads) {
        /* (mb, w, ks, lane): thread (w, lane) of kernel v4, 64-row block mb of head_dim, k16 slice ks */
        const int lane = id % 32, ks = (id / 32) % 4, w = (id / 128) % 4, mb = id / 512;
        const int g = lane / 4, c = lane % 4;
        const int d = kOutVec * (8 * w + g) + 2 * mb; /* rows g and g+8 of the block: d, d + 1 */
        const float *col = v_tile + (16 * ks + c) * kPitch + d;
        float x[2][4]; /* [row][keys c, c+8, c+4, c+12]: (v * pre) exact, then * 2^ev exact */
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float up = v_up[d + r];
            x[r][0] = col[r] * pre * up;
            x[r][1] = col[8 * kPitch + r] * pre * up;
            x[r][2] = col[4 * kPitch + r] * pre * up;
            x[r][3] = col[12 * kPitch + r] * pre * up;
        }
        uint4 hi, lo;
        f16x2_split2(x[0][0], x[0][1], hi.x, lo.x);
        f16x2_split2(x[1][0], x[1][1], hi.y, lo.y);
        f16x2_split2(x[0][2], x[0][3], hi.z, lo.z);
        f16x2_split2(x[1][2], x[1][3], hi.w, lo.w);
        v_split[2 * id - lane] = hi; /* chunk ((mb, w, ks) * 2 + part) * 32 + lane */
        v_split[2 * id - lane + 32] = lo;
    }
}

} /* namespace */

extern "C" size_t attention_f32_sm90_f16x2_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_kv,
                                                           int64_t head_dim) {
    return (size_t)f16x2_layout(batch, heads, seq_kv, head_dim).bytes;
}

/* Enqueues the pre-pass of a supported call (attention_v4_sm90_f16x2.cu checks it). */
extern "C" cudaError_t split_kv_f16x2(const jattn_cuda_args *a, void *workspace, cudaStream_t stream) {
    SplitParams p;
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
    p.kv_count = a->kv_count;
    p.kv_index = a->kv_index;
    p.ws = static_cast<unsigned char *>(workspace);
    p.layout = f16x2_layout(a->batch, a->heads, a->seq_kv, a->head_dim);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)p.layout.tiles, (unsigned)a->heads, (unsigned)a->batch);
    cfg.blockDim = dim3(kSplitThreads, 1, 1);
    cfg.stream = stream;
    if (p.kv_count)
        return a->head_dim == 128 ? cudaLaunchKernelEx(&cfg, split_kv_f16x2_kernel<128, true>, p)
                                  : cudaLaunchKernelEx(&cfg, split_kv_f16x2_kernel<64, true>, p);
    return a->head_dim == 128 ? cudaLaunchKernelEx(&cfg, split_kv_f16x2_kernel<128, false>, p)
                              : cudaLaunchKernelEx(&cfg, split_kv_f16x2_kernel<64, false>, p);
}
