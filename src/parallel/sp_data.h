/* The data work of the sequence-parallel algorithms besides attention, for the memory the
 * tensors live in: host loops (sp_data_host.c) or CUDA kernels on the caller's stream
 * (sp_data_cuda.cu). Tensors are [B, H, S, D] by element strides (batch, head, token) with
 * D contiguous, as jattn_problem describes them; an lse is [B, H, S] contiguous. */
#ifndef JATTN_SP_DATA_H
#define JATTN_SP_DATA_H

#include <math.h>
#include <stdint.h>

#include "jattn_parallel.h"

typedef struct sp_extent {
    int64_t batch, heads, seq, dim;
} sp_extent;

typedef struct sp_data {
    jattn_memory memory;
    void *stream; /* device: the cudaStream_t the work is queued on */
    /* dst[b,h,s,:] = src[b,h,s,:] over the extent. */
    jattn_status (*copy)(const struct sp_data *d, float *dst, jattn_strides dst_s, const float *src,
                         jattn_strides src_s, sp_extent n);
    /* Merges a partial attention (part, part_lse) over some keys into the running one (out,
     * lse) over others, row by row: with m = max(lse, part_lse), a = exp(lse - m) and
     * b = exp(part_lse - m): out = (a out + b part) / (a + b), lse = m + log(a + b). A side
     * whose lse is -inf has no key and weight 0. */
    jattn_status (*merge)(const struct sp_data *d, float *out, jattn_strides out_s, float *lse, const float *part,
                          jattn_strides part_s, const float *part_lse, sp_extent n);
} sp_data;

/* The host implementation (always present). */
void sp_data_host(sp_data *d);

/* The device implementation on `stream`. @return JATTN_OK, or JATTN_ERROR_BACKEND_UNAVAILABLE
 * when the library was built without CUDA. */
jattn_status sp_data_device(sp_data *d, void *stream);

/* How one row merges, shared by both implementations (host C and CUDA device code). A side
 * whose lse is -inf attended no key and has weight 0 exactly: the row keeps out (SP_KEEP) or
 * takes part (SP_TAKE), whatever the other side holds. Otherwise (SP_MIX) out = a out + b part
 * with a = wa / (wa + wb), b = wb / (wa + wb), wa = exp(lse - m), wb = exp(part_lse - m),
 * m = max(lse, part_lse) (one weight is exp(0) = 1 exactly), and the merged lse is
 * m + log1p(the other weight). A NaN lse makes a, b and the merged lse NaN. */
enum { SP_KEEP, SP_TAKE, SP_MIX };
#ifdef __CUDACC__
#define SP_HOST_DEVICE __host__ __device__
#else
#define SP_HOST_DEVICE
#endif
static inline SP_HOST_DEVICE int sp_merge_weights(float lse, float part_lse, float *a, float *b, float *merged) {
    if (part_lse == -INFINITY) return SP_KEEP;
    if (lse == -INFINITY) return SP_TAKE;
    const float m = lse > part_lse ? lse : part_lse;
    const float wa = expf(lse - m), wb = expf(part_lse - m);
    const float inv = 1.0f / (wa + wb);
    *a = wa * inv;
    *b = wb * inv;
    *merged = m + log1pf(lse > part_lse ? wb : wa);
    return SP_MIX;
}

#endif
