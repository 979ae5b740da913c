/* f16x2_split.cuh: the 2xFP16 operand split of kernel v4 (after Ootomo & Yokota, 2022), shared
 * by its pre-pass (attention_v4_split_kv_f16x2.cu) and its attention kernel
 * (attention_v4_sm90_f16x2.cu). Internal to src/cuda; internal linkage.
 *
 * A float x, multiplied by a power of two 2^e chosen per row or block, becomes hi + lo with
 * hi = fp16_rn(x 2^e) and lo = fp16_rn(x 2^e - hi): 22 significant bits, like 3xTF32's
 * big + small. fp16 keeps 11 bits only in [2^-14, 2^16), so e puts the largest finite
 * magnitude of the row or block at [2^target, 2^(target+1)); values 2^-17 below that maximum
 * keep a full-precision lo, smaller ones an absolute error under 2^-25 in scaled units
 * (2^-39 of the maximum), and the products hi*hi + hi*lo + lo*hi are exact in the tensor core.
 * e is clamped to [-126, 126] so that 2^e and 2^-e are normal floats. Inf and NaN are left out
 * of the maximum and stay non-finite (hi = x, lo = NaN), so a non-finite element changes the
 * scale of no other element.
 *
 * The workspace the pre-pass writes for one call (B*H heads, T = ceil(Skv / 64) key tiles), in
 * the register order of kernel v4's A fragments (thread (w, g, c) of its warpgroup: w = warp,
 * g = lane / 4, c = lane % 4), so that each 16-byte chunk is one fragment, hi or lo:
 *   k_split  [B*H][T][w 4][slice D/16][hi, lo][lane 32] 16-byte chunks of k * 2^ek: the words
 *            are (row g, d 4n..4n+1), (row g+8, d 4n..4n+1), (row g, d 4n+2..4n+3),
 *            (row g+8, d 4n+2..4n+3) with rows = keys 16w+g, 16w+g+8 of the tile and
 *            n = 4 slice + c (zeros past Skv)
 *   k_unscale [B*H][T*64] float 2^-ek per key (1 past Skv)
 *   v_split  [B*H][T][mb D/64][w 4][ks 4][hi, lo][lane 32] chunks of v * t * 2^ev (t = 2^64
 *            for a tiny tile, else 1): the words are (d, keys c, c+8), (d+1, keys c, c+8),
 *            (d, keys c+4, c+12), (d+1, keys c+4, c+12) with d = (D/32)(8w+g) + 2mb and keys
 *            16 ks + . of the tile (the key order of kernel v4's P^T columns)
 *   v_unscale [B*H][T][D] float 2^-ev per tile and head_dim column
 *   v_tiny   [B*H][T] int: 1 when every value of the tile lies below 2^-63 (then scaled by
 *            2^64 first, so that denormal v keep their bits), else 0 */
#ifndef JATTN_F16X2_SPLIT_CUH
#define JATTN_F16X2_SPLIT_CUH

#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kF16Tile = 64;       /* keys per tile of the pre-pass and of kernel v4 */
constexpr int kQTarget = 6;        /* q * scale rows scaled to [2^6, 2^7): scores stay below 2^127 */
constexpr int kKTarget = 14;       /* k rows to [2^14, 2^15) */
constexpr int kVTarget = 14;       /* v columns of a tile to [2^14, 2^15) */
constexpr float kPScale = 32768.f; /* P in [0, 1] enters the product as P * 2^15 */
constexpr float kTinyLimit = 0x1p-63f;
constexpr float kTinyUp = 0x1p64f;
constexpr float kTinyDown = 0x1p-64f;

/* Byte offsets inside the workspace of one call (each region 256-byte aligned). */
struct F16x2Layout {
    int64_t heads_total; /* B * H */
    int64_t tiles;       /* T */
    int64_t rows;        /* T * 64 */
    int64_t k_split, k_unscale, v_split, v_unscale, v_tiny, bytes;
};

inline int64_t f16x2_align(int64_t n) { return (n + 255) / 256 * 256; }

inline F16x2Layout f16x2_layout(int64_t batch, int64_t heads, int64_t seq_kv, int64_t head_dim) {
    F16x2Layout l;
    l.heads_total = batch * heads;
    l.tiles = (seq_kv + kF16Tile - 1) / kF16Tile;
    l.rows = l.tiles * kF16Tile;
    l.k_split = 0;
    l.k_unscale = l.k_split + f16x2_align(l.heads_total * l.rows * head_dim * 4);
    l.v_split = l.k_unscale + f16x2_align(l.heads_total * l.rows * 4);
    l.v_unscale = l.v_split + f16x2_align(l.heads_total * l.rows * head_dim * 4);
    l.v_tiny = l.v_unscale + f16x2_align(l.heads_total * l.tiles * head_dim * 4);
    l.bytes = l.v_tiny + f16x2_align(l.heads_total * l.tiles * 4);
    return l;
}

/* |x| when finite, else 0 (non-finite values take no part in a scale). */
__device__ __forceinline__ float finite_abs(float x) { return isfinite(x) ? fabsf(x) : 0.f; }

/* 2^e as a float, e in [-126, 127]. */
__device__ __forceinline__ float exp2_int(int e) { return __int_as_float((127 + e) << 23); }

/* The exponent e that puts amax * 2^e in [2^target, 2^(target+1)), clamped to [-126, 126];
 * 0 for amax == 0. */
__device__ __forceinline__ int f16x2_exponent(float amax, int target) {
    if (!(amax > 0.f)) return 0;
    const int e = target - ilogbf(amax);
    return e < -126 ? -126 : (e > 126 ? 126 : e);
}

/* hi and lo of two scaled values, packed as f16x2 (the first value in the low half). */
__device__ __forceinline__ void f16x2_split2(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 back = __half22float2(h);
    const __half2 l = __floats2half2_rn(x0 - back.x, x1 - back.y);
    hi = *reinterpret_cast<const uint32_t *>(&h);
    lo = *reinterpret_cast<const uint32_t *>(&l);
}

} /* namespace */

#endif /* JATTN_F16X2_SPLIT_CUH */
