/* split_kv_f16x2_v6: the pre-pass of kernel v6 (attention_v6_sm90_fa3_f16x2.cu). Splits K and V
 * of every head into scaled fp16 hi + lo pairs (f16x2_split.cuh) and writes each 64-key tile as
 * the shared-memory image the kernel's wgmma reads, so that the kernel moves a tile with one bulk
 * copy and no reordering.
 *
 * Reads  k, v [B, H, Skv, D] through element strides (head_dim contiguous, float4 aligned),
 *        D in {64, 128}; with key padding (kv_count, kv_index: key_padding.cuh) batch b's
 *        attended keys, packed in order: tile t holds attended keys 64 t .. 64 t + 63, and the
 *        tiles past them are neither read nor written.
 * Writes the workspace: for every head bh = b H + h and tile t, two records of
 * kRecordBytes = 2 * 64 * D * 2 + 4 * D bytes, the K record then the V record, at
 * ((bh T + t) 2 + {0, 1}) kRecordBytes (T = ceil(Skv / 64)):
 *   bytes [0, 64 D 2): the hi image, [64 D 2, 64 D 4): the lo image. Element (key r, d) of an
 *     image at swizzled_offset_f16(r, d, 64): blocks of 64 columns of head_dim (8 KB each), key
 *     r at r * 128 inside a block, its 16-byte chunks XOR-swizzled by r % 8 (the 128-byte swizzle
 *     of the wgmma descriptor). For K this is the K-major B operand of S = Q K^T; for V the
 *     MN-major B operand of P V (imm-trans-b).
 *   then K: four 32-bit words (V6TileInfo): 2^-ek, the whole tile's scale (k 2^ek has its
 *     largest finite magnitude in [2^14, 2^15)); the tile's V is tiny (1: every value of the V
 *     tile below 2^-63, split after * 2^64 so that denormal v keep their bits, as v4); the K
 *     tile holds a non-finite value (1: the kernel then keeps hi*hi apart, v4's rule); 0.
 *     V: D floats, 2^-ev of each head_dim column over the tile's keys.
 *   Keys past the attended ones are zeros (the kernel masks their scores).
 * Grouped-query heads: records per key/value head (bh = b Hkv + hk), each split once for its group.
 * A call with a window or a key bias (jattn_mask; the instance kMasked) also writes each non-finite v
 * as 0 and flags its tile (word 3 of the K record's info: with windows the rows of a tile attend
 * different keys, and a weight of exactly 0 times an Inf would be NaN in a row that does not attend
 * that key; the kernel adds the non-finite values into the rows that attend them), and stages the key
 * bias of every query head of the group in attended-key order, 64 floats per tile, after the records
 * (v6_bias_offset), so that the kernel's producer copies a tile's bias with its V record.
 * One CTA of 256 threads per (tile, head, batch); every thread owns 16-byte chunks (8 values of
 * head_dim of one key) of the images. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "attention_sm90.h"
#include "f16x2_split.cuh"
#include "key_padding.cuh"
#include "key_window.cuh"
#include "sm90_wgmma_ptx.cuh"

namespace {

constexpr int kV6SplitThreads = 256;

struct V6SplitParams {
    const float *k, *v;
    int64_t k_b, k_h, k_t, v_b, v_h, v_t;
    int heads, seq_kv, tiles;
    unsigned char *ws;
    const int *kv_count, *kv_index; /* key padding (jattn_cuda_args), or NULL */
    /* kMasked: the key bias (row of query head h at bias + b bias_b + h bias_h, or NULL), staged at
     * bias_ws for the group's query heads (group of them, q_heads in all) */
    const float *bias;
    int64_t bias_b, bias_h;
    float *bias_ws;
    int group, q_heads;
};

/* kMasked: a call with a window or a key bias (non-finite v written as 0 and flagged; the bias staged). */
template <int D, bool kMasked>
__global__ void __launch_bounds__(kV6SplitThreads) split_kv_f16x2_v6_kernel(const V6SplitParams p) {
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
    const int64_t bh = (int64_t)b * p.heads + h;
    const int key0 = tile * kF16Tile;
    /* key padding: batch b's attended keys, packed in order (key j = row key_row(rows, j)) */
    const int n_kv = attended_keys(p.kv_count, b, p.seq_kv);
    const int *rows = attended_rows(p.kv_index, b, p.seq_kv);
    if (key0 >= n_kv) return; /* never read by the kernel */
    if (kMasked && p.bias) {  /* the group's query heads' bias, in attended-key order */
        for (int i = tid; i < p.group * kF16Tile; i += kV6SplitThreads) {
            const int hq = h * p.group + i / kF16Tile, key = key0 + i % kF16Tile;
            const float x = key < n_kv ? __ldg(p.bias + b * p.bias_b + hq * p.bias_h + key_row(rows, key)) : 0.f;
            p.bias_ws[((int64_t)(b * p.q_heads + hq) * p.tiles + tile) * kF16Tile + i % kF16Tile] = x;
        }
    }
    const int cc = tid % kChunksPerRow, row0 = tid / kChunksPerRow;
    unsigned char *rec_k = p.ws + ((bh * p.tiles + tile) * 2) * (int64_t)kRecord;
    unsigned char *rec_v = rec_k + kRecord;
    uint32_t *k_info = reinterpret_cast<uint32_t *>(rec_k + 2 * kImage); /* V6TileInfo */

    for (int which = 0; which < 2; ++which) {
        const float *src = which == 0 ? p.k + b * p.k_b + h * p.k_h : p.v + b * p.v_b + h * p.v_h;
        const int64_t t_stride = which == 0 ? p.k_t : p.v_t;
        unsigned char *rec = which == 0 ? rec_k : rec_v;
        float x[kPasses][8];
#pragma unroll
        for (int j = 0; j < kPasses; ++j) {
            const int key = key0 + row0 + j * kRowsPerPass;
            float4 a = make_float4(0.f, 0.f, 0.f, 0.f), c = a;
            if (key < n_kv) {
                const float4 *ptr = reinterpret_cast<const float4 *>(src + key_row(rows, key) * t_stride + 8 * cc);
                a = __ldg(ptr);
                c = __ldg(ptr + 1);
            }
            x[j][0] = a.x;
            x[j][1] = a.y;
            x[j][2] = a.z;
            x[j][3] = a.w;
            x[j][4] = c.x;
            x[j][5] = c.y;
            x[j][6] = c.z;
            x[j][7] = c.w;
        }
        float up[8];
        float pre = 1.f; /* V: 2^64 for a tiny tile */
        if (which == 0) {
            /* K: one scale for the tile, and whether it holds a non-finite value */
            float amax = 0.f;
            bool bad = false;
#pragma unroll
            for (int j = 0; j < kPasses; ++j)
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    amax = fmaxf(amax, finite_abs(x[j][e]));
                    bad |= !isfinite(x[j][e]);
                }
#pragma unroll
            for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
            if (lane == 0) red[warp][0] = amax;
            bad = __syncthreads_or(bad) != 0;
            amax = 0.f;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, red[w][0]);
            const int e = f16x2_exponent(amax, kKTarget);
#pragma unroll
            for (int i = 0; i < 8; ++i) up[i] = exp2_int(e);
            if (tid == 0) {
                k_info[0] = __float_as_uint(exp2_int(-e));
                k_info[2] = bad ? 1u : 0u;
                k_info[3] = 0u;
            }
            __syncthreads(); /* red is reused by V */
        } else {
            /* V: one scale per head_dim column over the tile's keys */
            float cmax[8];
            bool vbad = false;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                cmax[e] = 0.f;
#pragma unroll
                for (int j = 0; j < kPasses; ++j) {
                    cmax[e] = fmaxf(cmax[e], finite_abs(x[j][e]));
                    if (kMasked && !isfinite(x[j][e])) vbad = true, x[j][e] = 0.f; /* added back by the kernel */
                }
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
            float m = 0.f;
            if (tid < D) {
#pragma unroll
                for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red[w][tid]);
            }
            /* tiny: every value of the tile below 2^-63 (v4's rule, f16x2_split.cuh) */
            const bool tiny = !__syncthreads_or(tid < D && m >= kTinyLimit);
            pre = tiny ? kTinyUp : 1.f;
            if (tid < D) {
                const int e = f16x2_exponent(m * pre, kVTarget);
                up_s[tid] = exp2_int(e);
                reinterpret_cast<float *>(rec + 2 * kImage)[tid] = exp2_int(-e);
            }
            if (kMasked) vbad = __syncthreads_or(vbad) != 0;
            if (tid == 0) {
                k_info[1] = tiny ? 1u : 0u;
                if (kMasked) k_info[3] = vbad ? 1u : 0u;
            }
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 8; ++i) up[i] = up_s[8 * cc + i];
        }
#pragma unroll
        for (int j = 0; j < kPasses; ++j) {
            const int r = row0 + j * kRowsPerPass;
            float y[8]; /* (x * pre) exact, then * 2^e exact */
#pragma unroll
            for (int e = 0; e < 8; ++e) y[e] = x[j][e] * pre * up[e];
            uint4 hi, lo;
            f16x2_split2(y[0], y[1], hi.x, lo.x);
            f16x2_split2(y[2], y[3], hi.y, lo.y);
            f16x2_split2(y[4], y[5], hi.z, lo.z);
            f16x2_split2(y[6], y[7], hi.w, lo.w);
            const uint32_t off = swizzled_offset_f16(r, 8 * cc, kF16Tile);
            *reinterpret_cast<uint4 *>(rec + off) = hi;
            *reinterpret_cast<uint4 *>(rec + kImage + off) = lo;
        }
    }
}

} /* namespace */

/* Bytes of the workspace of kernel v6 for one call: two records per key/value head and 64-key tile,
 * then the key bias a masked call stages (4 bytes per query head and key, rounded up to tiles). */
extern "C" size_t attention_f32_sm90_fa3_f16x2_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads,
                                                               int64_t seq_kv, int64_t head_dim) {
    const int64_t tiles = (seq_kv + kF16Tile - 1) / kF16Tile;
    return (size_t)(v6_bias_offset(batch, kv_heads, tiles, head_dim) + batch * heads * tiles * kF16Tile * 4);
}

template <bool kMasked>
static void split_launch(const V6SplitParams &p, dim3 grid, int64_t head_dim, cudaStream_t stream) {
    if (head_dim == 128)
        split_kv_f16x2_v6_kernel<128, kMasked><<<grid, kV6SplitThreads, 0, stream>>>(p);
    else
        split_kv_f16x2_v6_kernel<64, kMasked><<<grid, kV6SplitThreads, 0, stream>>>(p);
}

/* Enqueues the pre-pass of a supported call (attention_v6_sm90_fa3_f16x2.cu checks it; D in
 * {64, 128}; k, v and their strides float4 aligned; workspace 16-byte aligned): the records of the
 * B Hkv key/value heads; for a call with a window or a key bias the masked instance. */
extern "C" cudaError_t split_kv_f16x2_v6(const jattn_cuda_args *a, void *workspace, cudaStream_t stream) {
    const int64_t kv_heads = a->kv_heads > 0 ? a->kv_heads : a->heads;
    V6SplitParams p;
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
    p.tiles = (int)((a->seq_kv + kF16Tile - 1) / kF16Tile);
    p.ws = static_cast<unsigned char *>(workspace);
    p.kv_count = a->kv_count;
    p.kv_index = a->kv_index;
    p.bias = a->key_bias;
    p.bias_b = a->bias_batch_stride;
    p.bias_h = a->bias_head_stride;
    p.bias_ws = reinterpret_cast<float *>(p.ws + v6_bias_offset(a->batch, kv_heads, p.tiles, a->head_dim));
    p.group = (int)(a->heads / kv_heads);
    p.q_heads = (int)a->heads;
    const dim3 grid((unsigned)p.tiles, (unsigned)kv_heads, (unsigned)a->batch);
    if (kw_has_window(*a) || a->key_bias)
        split_launch<true>(p, grid, a->head_dim, stream);
    else
        split_launch<false>(p, grid, a->head_dim, stream);
    return cudaGetLastError();
}
