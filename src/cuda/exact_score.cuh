/* exact_score.cuh: one score q . k recomputed exactly (float64) from the 2xFP16 tile images of the
 * sm_90a kernels, for the few elements whose tensor-core score is not exact enough: the forward's
 * largest score of a row (its lse, kernel v6) and the backward's P >= 1/2 element of a row
 * (the backward v2, removed; the backward v4 recomputes it from the caller's float32 inputs). Internal to
 * src/cuda; internal linkage.
 *
 * Why: the tensor core adds its fp32 products with truncation (toward zero, after Fasi et al.,
 * "Numerical behavior of NVIDIA tensor cores", 2021), so a long chain of them errs on the low side
 * by ~1 ulp of the score; the weight exp(S - lse) of a row's dominant key carries that error as a
 * relative one, and so does every weight of the row through the lse (src/cuda/NOTES.md, "The
 * backward's accuracy"). hi + lo of an image pair holds x 2^e to 2^-24 relative, and their
 * products and sums are exact in float64, so these sums err by float32's representation of the
 * inputs only.
 *
 * Image layout: swizzled_offset_f16 (sm90_wgmma_ptx.cuh), the layout of v6's K and V tile images and
 * of the backward v4's tile records (backward_v4_records.cuh). */
#ifndef JATTN_EXACT_SCORE_CUH
#define JATTN_EXACT_SCORE_CUH

#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "sm90_wgmma_ptx.cuh"

namespace {

/* hi + lo of elements (row, d0 .. d0 + 7) of a split image pair of `rows` rows (d0 a multiple of
 * 8), exactly, in float64; hi and lo in shared or global memory (generic addresses, 16-byte
 * aligned images). */
__device__ __forceinline__ void f16x2_chunk_f64(const unsigned char *hi, const unsigned char *lo, int row, int d0,
                                                int rows, double (&x)[8]) {
    const uint32_t off = swizzled_offset_f16(row, d0, rows);
    const uint4 h = *reinterpret_cast<const uint4 *>(hi + off), l = *reinterpret_cast<const uint4 *>(lo + off);
    const uint32_t hw[4] = {h.x, h.y, h.z, h.w}, lw[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&hw[k]));
        const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&lw[k]));
        x[2 * k] = (double)a.x + (double)b.x;
        x[2 * k + 1] = (double)a.y + (double)b.y;
    }
}

/* The sum of x over the four lanes of a quad (lanes 4g .. 4g + 3); every lane of the warp calls it. */
__device__ __forceinline__ double quad_sum(double x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

} /* namespace */

#endif /* JATTN_EXACT_SCORE_CUH */
