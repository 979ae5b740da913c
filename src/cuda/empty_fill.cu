/* The answer of a problem without keys or queries (include/jattn.h, jattn_problem): +0 rows and
 * lse -inf, written by one grid-stride kernel on the call's stream (cuda_backend.c, write_empty).
 *
 * Writes x [batch, heads, rows, head_dim] at its element strides (head_dim contiguous) and, when
 * given, lse [batch, heads, rows] contiguous. Reads nothing. */
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_internal.h"

namespace {

constexpr int kThreads = 256;

__global__ void fill_rows_kernel(float *x, int64_t heads, int64_t rows, int64_t head_dim, jattn_cuda_strides s,
                                 float *lse, int64_t count) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = e % head_dim, row = e / head_dim;
        const int64_t i = row % rows, bh = row / rows;
        const int64_t b = bh / heads, h = bh % heads;
        x[b * s.batch + h * s.head + i * s.token + d] = 0.0f;
        if (lse && d == 0) lse[row] = -INFINITY;
    }
}

} // namespace

extern "C" int jattn_cuda_launch_fill_rows(float *x, int64_t batch, int64_t heads, int64_t rows, int64_t head_dim,
                                           jattn_cuda_strides strides, float *lse, void *stream) {
    const int64_t count = batch * heads * rows * head_dim;
    if (count == 0) return (int)cudaSuccess;
    const int64_t blocks = (count + kThreads - 1) / kThreads;
    fill_rows_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), kThreads, 0, (cudaStream_t)stream>>>(
        x, heads, rows, head_dim, strides, lse, count);
    return (int)cudaGetLastError();
}
