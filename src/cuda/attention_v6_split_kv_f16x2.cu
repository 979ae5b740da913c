/* split_kv_f16x2_v6: the pre-pass of kernel v6 (attention_v6_sm90_fa3_f16x2.cu). Splits K and V
 * of every head into scaled fp16 hi + lo pairs (f16x2_split.cuh) and writes each 64-key tile as
 * the shared-memory image the kernel's wgmma reads, so that the kernel moves a tile with one bulk
 * copy and no reordering.
 *
 * Reads  k, v [B, H, Skv, D] head-major, contiguous, float32, D in {64, 128}.
 * Writes the workspace: for every head bh = b H + h and tile t, two records of
 * kRecordBytes = 2 * 64 * D * 2 + 4 * D bytes, the K record then the V record, at
 * ((bh T + t) 2 + {0, 1}) kRecordBytes (T = ceil(Skv / 64)):
 *   bytes [0, 64 D 2): the hi image, [64 D 2, 64 D 4): the lo image. Element (key r, d) of an
 *     image at swizzled_offset_f16(r, d, 64): blocks of 64 columns of head_dim (8 KB each), key
 *     r at r * 128 inside a block, its 16-byte chunks XOR-swizzled by r % 8 (the 128-byte swizzle
 *     of the wgmma descriptor). For K this is the K-major B operand of S = Q K^T; for V the
 *     MN-major B operand of P V (imm-trans-b).
 *   then K: one float, 2^-ek, the whole tile's scale (k 2^ek has its largest finite magnitude
 *     in [2^14, 2^15)); V: D floats, 2^-ev of each head_dim column over the tile's keys.
 *   Keys past Skv are zeros (the kernel masks their scores).
 * One CTA of 256 threads per (tile, head, batch); every thread owns 16-byte chunks (8 values of
 * head_dim of one key) of the images. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "f16x2_split.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kV6SplitThreads = 256;

template <int D>
__global__ void __launch_bounds__(kV6SplitThreads) split_kv_f16x2_v6_kernel(const float *k, const float *v, int heads,
                                                                           int seq_kv, int tiles, unsigned char *ws)
{
    constexpr int kChunksPerRow = D / 8;
    constexpr int kRowsPerPass = kV6SplitThreads / kChunksPerRow;
    constexpr int kPasses = kF16Tile / kRowsPerPass;
    constexpr int kImage = kF16Tile * D * 2;
    constexpr int kRecord = 2 * kImage + 4 * D;
    constexpr int kWarps = kV6SplitThreads / 32;
    __shared__ float red[kWarps][D];
    __shared__ float up_s[D];

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int64_t bh = (int64_t)b * heads + h;
    const int key0 = tile * kF16Tile;
    const int cc = tid % kChunksPerRow, row0 = tid / kChunksPerRow;
    unsigned char *rec_k = ws + ((bh * tiles + tile) * 2) * (int64_t)kRecord;
    unsigned char *rec_v = rec_k + kRecord;

    for (int which = 0; which < 2; ++which) {
        const float *src = (which == 0 ? k : v) + bh * (int64_t)seq_kv * D;
        unsigned char *rec = which == 0 ? rec_k : rec_v;
        float x[kPasses][8];
#pragma unroll
        for (int j = 0; j < kPasses; ++j) {
            const int key = key0 + row0 + j * kRowsPerPass;
            float4 a = make_float4(0.f, 0.f, 0.f, 0.f), c = a;
            if (key < seq_kv) {
                const float4 *p = reinterpret_cast<const float4 *>(src + (int64_t)key * D + 8 * cc);
                a = __ldg(p);
                c = __ldg(p + 1);
            }
            x[j][0] = a.x; x[j][1] = a.y; x[j][2] = a.z; x[j][3] = a.w;
            x[j][4] = c.x; x[j][5] = c.y; x[j][6] = c.z; x[j][7] = c.w;
        }
        float up[8];
        if (which == 0) {
            /* K: one scale for the tile */
            float amax = 0.f;
#pragma unroll
            for (int j = 0; j < kPasses; ++j)
#pragma unroll
                for (int e = 0; e < 8; ++e) amax = fmaxf(amax, finite_abs(x[j][e]));
#pragma unroll
            for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
            if (lane == 0) red[warp][0] = amax;
            __syncthreads();
            amax = 0.f;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, red[w][0]);
            const int e = f16x2_exponent(amax, kKTarget);
#pragma unroll
            for (int i = 0; i < 8; ++i) up[i] = exp2_int(e);
            if (tid == 0) *reinterpret_cast<float *>(rec + 2 * kImage) = exp2_int(-e);
            __syncthreads(); /* red is reused by V */
        } else {
            /* V: one scale per head_dim column over the tile's keys */
            float cmax[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                cmax[e] = 0.f;
#pragma unroll
                for (int j = 0; j < kPasses; ++j) cmax[e] = fmaxf(cmax[e], finite_abs(x[j][e]));
                /* lanes with the same chunk column: lane ^ kChunksPerRow, ... (within the warp) */
#pragma unroll
                for (int m = kChunksPerRow; m < 32; m *= 2)
                    cmax[e] = fmaxf(cmax[e], __shfl_xor_sync(0xffffffffu, cmax[e], m));
            }
            if (lane < kChunksPerRow) {
#pragma unroll
                for (int e = 0; e < 8; ++e) red[warp][8 * cc + e] = cmax[e];
            }
            __syncthreads();
            if (tid < D) {
                float m = 0.f;
#pragma unroll
                for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red[w][tid]);
                const int e = f16x2_exponent(m, kVTarget);
                up_s[tid] = exp2_int(e);
                reinterpret_cast<float *>(rec + 2 * kImage)[tid] = exp2_int(-e);
            }
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 8; ++i) up[i] = up_s[8 * cc + i];
        }
#pragma unroll
        for (int j = 0; j < kPasses; ++j) {
            const int r = row0 + j * kRowsPerPass;
            uint4 hi, lo;
            f16x2_split2(x[j][0] * up[0], x[j][1] * up[1], hi.x, lo.x);
            f16x2_split2(x[j][2] * up[2], x[j][3] * up[3], hi.y, lo.y);
            f16x2_split2(x[j][4] * up[4], x[j][5] * up[5], hi.z, lo.z);
            f16x2_split2(x[j][6] * up[6], x[j][7] * up[7], hi.w, lo.w);
            const uint32_t off = swizzled_offset_f16(r, 8 * cc, kF16Tile);
            *reinterpret_cast<uint4 *>(rec + off) = hi;
            *reinterpret_cast<uint4 *>(rec + kImage + off) = lo;
        }
    }
}

} /* namespace */

/* Bytes of the workspace of kernel v6 for one call. */
extern "C" size_t attention_v6_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_kv, int64_t head_dim)
{
    const int64_t tiles = (seq_kv + kF16Tile - 1) / kF16Tile;
    return (size_t)(batch * heads * tiles * 2 * (2 * kF16Tile * head_dim * 2 + 4 * head_dim));
}

/* Enqueues the pre-pass (the caller checked the shapes; D in {64, 128}; k, v 16-byte aligned). */
extern "C" cudaError_t split_kv_f16x2_v6(const float *k, const float *v, int batch, int heads, int seq_kv, int head_dim,
                                         void *workspace, cudaStream_t stream)
{
    const int tiles = (seq_kv + kF16Tile - 1) / kF16Tile;
    const dim3 grid((unsigned)tiles, (unsigned)heads, (unsigned)batch);
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    if (head_dim == 128)
        split_kv_f16x2_v6_kernel<128><<<grid, kV6SplitThreads, 0, stream>>>(k, v, heads, seq_kv, tiles, ws);
    else
        split_kv_f16x2_v6_kernel<64><<<grid, kV6SplitThreads, 0, stream>>>(k, v, heads, seq_kv, tiles, ws);
    return cudaGetLastError();
}
