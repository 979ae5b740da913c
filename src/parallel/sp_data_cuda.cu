/* The data work of the sequence-parallel algorithms on device memory, on the caller's stream:
 *
 *   sp_copy_rows<V>  dst[b,h,s,:] = src[b,h,s,:]; rows of D floats, V = 4 (float4) when every
 *                    pointer and stride allows 16-byte accesses, else 1. blockDim (x over the
 *                    row's vectors, y over rows), grid-stride over the B*H*S rows.
 *   sp_merge_rows    the lse merge of sp_data.h, one warp per row: every lane reads the two
 *                    lse values, the warp syncs, lanes update the row's D elements, lane 0
 *                    writes the merged lse.
 *
 * Both are memory-bound passes over O(B*H*S*D) floats beside the O(S^2) attention. */
#include <stdint.h>

#include <cuda_runtime.h>

extern "C" {
#include "sp_data.h"
#include "sp_error.h"
}

namespace {

struct row_strides {
    int64_t batch, head, token;
};

__device__ inline int64_t row_offset(row_strides s, int64_t row, int64_t heads, int64_t seq) {
    const int64_t t = row % seq, bh = row / seq;
    return (bh / heads) * s.batch + (bh % heads) * s.head + t * s.token;
}

template <typename V>
__global__ void sp_copy_rows(float *dst, row_strides ds, const float *src, row_strides ss, int64_t heads, int64_t seq,
                             int64_t rows, int64_t vectors) {
    for (int64_t row = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; row < rows;
         row += (int64_t)gridDim.x * blockDim.y) {
        V *d = reinterpret_cast<V *>(dst + row_offset(ds, row, heads, seq));
        const V *x = reinterpret_cast<const V *>(src + row_offset(ss, row, heads, seq));
        for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) d[i] = x[i];
    }
}

__global__ void sp_merge_rows(float *out, row_strides os, float *lse, const float *part, row_strides ps,
                              const float *part_lse, int64_t heads, int64_t seq, int64_t rows, int64_t dim) {
    for (int64_t row = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; row < rows;
         row += (int64_t)gridDim.x * blockDim.y) {
        const float la = lse[row], lb = part_lse[row];
        float a = 0.0f, b = 0.0f, merged = 0.0f;
        const int how = sp_merge_weights(la, lb, &a, &b, &merged);
        __syncwarp(); /* every lane has read lse[row] before lane 0 writes it */
        if (how == SP_KEEP) continue;
        float *o = out + row_offset(os, row, heads, seq);
        const float *p = part + row_offset(ps, row, heads, seq);
        if (how == SP_TAKE) {
            for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = p[i];
            merged = lb;
        } else {
            for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = fmaf(a, o[i], b * p[i]);
        }
        if (threadIdx.x == 0) lse[row] = merged;
    }
}

row_strides strides_of(jattn_strides s) { return row_strides{s.batch, s.head, s.token}; }

/* Blocks for `rows` rows of `lanes` threads each (256 threads a block), at most 2^20 blocks. */
dim3 grid_for(int64_t rows, unsigned rows_per_block) {
    int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
    return dim3((unsigned)(blocks < (1 << 20) ? (blocks > 0 ? blocks : 1) : (1 << 20)));
}

jattn_status launched(const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return JATTN_OK;
    return sp_fail(JATTN_ERROR_CUDA, "cuda: %s launch failed: %s (%s)", kernel, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}

int aligned16(const void *p, jattn_strides s, int64_t dim) {
    return ((uintptr_t)p % 16) == 0 && s.batch % 4 == 0 && s.head % 4 == 0 && s.token % 4 == 0 && dim % 4 == 0;
}

jattn_status device_copy(const sp_data *d, float *dst, jattn_strides dst_s, const float *src, jattn_strides src_s,
                         sp_extent n) {
    const int64_t rows = n.batch * n.heads * n.seq;
    if (rows == 0 || n.dim == 0) return JATTN_OK;
    cudaStream_t stream = (cudaStream_t)d->stream;
    const int vec4 = aligned16(dst, dst_s, n.dim) && aligned16(src, src_s, n.dim);
    const int64_t vectors = vec4 ? n.dim / 4 : n.dim;
    unsigned lanes = 1;
    while (lanes < 32 && lanes < vectors) lanes *= 2;
    const dim3 block(lanes, 256 / lanes);
    if (vec4)
        sp_copy_rows<float4><<<grid_for(rows, block.y), block, 0, stream>>>(
            dst, strides_of(dst_s), src, strides_of(src_s), n.heads, n.seq, rows, vectors);
    else
        sp_copy_rows<float><<<grid_for(rows, block.y), block, 0, stream>>>(
            dst, strides_of(dst_s), src, strides_of(src_s), n.heads, n.seq, rows, vectors);
    return launched("sp_copy_rows");
}

jattn_status device_merge(const sp_data *d, float *out, jattn_strides out_s, float *lse, const float *part,
                          jattn_strides part_s, const float *part_lse, sp_extent n) {
    const int64_t rows = n.batch * n.heads * n.seq;
    if (rows == 0) return JATTN_OK;
    const dim3 block(32, 8); /* one warp per row */
    sp_merge_rows<<<grid_for(rows, block.y), block, 0, (cudaStream_t)d->stream>>>(
        out, strides_of(out_s), lse, part, strides_of(part_s), part_lse, n.heads, n.seq, rows, n.dim);
    return launched("sp_merge_rows");
}

} // namespace

extern "C" jattn_status sp_data_device(sp_data *d, void *stream) {
    d->memory = JATTN_MEMORY_DEVICE;
    d->stream = stream;
    d->copy = device_copy;
    d->merge = device_merge;
    return JATTN_OK;
}
