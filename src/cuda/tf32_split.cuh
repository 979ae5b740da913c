/* The 3xTF32 split of float32 operands for the TF32 tensor-core products (mma.sync: kernel v2 and
 * the backward v1): x = big + small, both TF32, so that big*big + big*small + small*big carries a
 * float32 product to about float32 accuracy. */
#pragma once
#include <stdint.h>

/* x rounded to the nearest TF32: one instruction on sm_90 (cvt.rn), four on sm_80 (cvt.rna,
 * emulated). Inf and NaN stay as they are. */
__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
#else
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
#endif
    return r;
}

/* x = big + small with big, small TF32 (small = the TF32 rounding of the remainder); small only
 * when X3 (the tf32 precision's one-product path leaves it unset). */
template <bool X3>
__device__ __forceinline__ void split_tf32(float x, uint32_t &big, uint32_t &small) {
    big = to_tf32(x);
    if (X3) small = to_tf32(x - __uint_as_float(big));
}
