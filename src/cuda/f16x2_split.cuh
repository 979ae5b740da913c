/* f16x2_split.cuh: the 2xFP16 operand split (after Ootomo & Yokota, 2022) of every 2xFP16 kernel
 * (v6, v7, the backwards v3 and v4) and their pre-passes. Internal to src/cuda; internal linkage.
 *
 * A float x, multiplied by a power of two 2^e chosen per row or block, becomes hi + lo with
 * hi = fp16_rn(x 2^e) and lo = fp16_rn(x 2^e - hi): 22 significant bits, like 3xTF32's
 * big + small. fp16 keeps 11 bits only in [2^-14, 2^16), so e puts the largest finite
 * magnitude of the row or block at [2^target, 2^(target+1)); values 2^-17 below that maximum
 * keep a full-precision lo, smaller ones an absolute error under 2^-25 in scaled units
 * (2^-39 of the maximum), and the products hi*hi + hi*lo + lo*hi are exact in the tensor core.
 * e is clamped to [-126, 126] so that 2^e and 2^-e are normal floats. Inf and NaN are left out
 * of the maximum and stay non-finite (hi = x, lo = NaN), so a non-finite element changes the
 * scale of no other element. A tile whose every value lies below 2^-63 (kTinyLimit) is scaled by
 * 2^64 first, so that denormal values keep their bits. Each kernel's workspace layout is its own
 * (v6: attention_v6_split_kv_f16x2.cu; v7: f16x2_mma_records.cuh; backward v3: backward_v3_layout.cuh;
 * backward v4: backward_v4_records.cuh). */
#ifndef JATTN_F16X2_SPLIT_CUH
#define JATTN_F16X2_SPLIT_CUH

#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kF16Tile = 64;       /* keys per tile of v6's pre-pass and kernel */
constexpr int kQTarget = 6;        /* q * scale rows scaled to [2^6, 2^7): scores stay below 2^127 */
constexpr int kKTarget = 14;       /* k rows to [2^14, 2^15) */
constexpr int kVTarget = 14;       /* v columns of a tile to [2^14, 2^15) */
constexpr float kPScale = 32768.f; /* P in [0, 1] enters the product as P * 2^15 */
constexpr float kTinyLimit = 0x1p-63f;
constexpr float kTinyUp = 0x1p64f;
constexpr float kTinyDown = 0x1p-64f;

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
