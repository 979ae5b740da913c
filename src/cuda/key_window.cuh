/* The mask of a call as a kernel reads it (jattn_cuda_args, cuda_internal.h): which key/value head a
 * query head reads, the window of keys a query row may attend (segments, causal, blocks: the same
 * definition as src/mask.c, the host's), and a key's bias. Device code, header-only; every version
 * that serves a mask part (cuda_versions.c, .features) reads it through these.
 *
 * Offsets come from the caller's device memory, where the library cannot check them (include/jattn.h):
 * they are clamped into range here, so a bad offset narrows or widens a window but never reads outside
 * the tensors. A tile of rows [i0, i1) attends at most the keys [min lo, max hi) of its rows: a kernel
 * walks those key tiles only, and masks per element where a tile straddles a row's window. */
#ifndef JATTN_CUDA_KEY_WINDOW_CUH
#define JATTN_CUDA_KEY_WINDOW_CUH

#include <stdint.h>

#include "cuda_internal.h"

/* The key/value head that query head h reads. */
__device__ __forceinline__ int64_t kw_kv_head(const jattn_cuda_args &a, int64_t h) {
    return a.kv_heads > 0 && a.kv_heads < a.heads ? h / (a.heads / a.kv_heads) : h;
}

/* Whether a call has a window part (segments, causal or blocks). */
__host__ __device__ __forceinline__ bool kw_has_window(const jattn_cuda_args &a) {
    return a.cu_seqlens_q != nullptr || a.causal != JATTN_CAUSAL_NONE || a.block_q != nullptr;
}

__device__ __forceinline__ int64_t kw_clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The last index s in [0, n) with clamp(o[s]) <= x (binary search over non-decreasing offsets). */
__device__ __forceinline__ int64_t kw_last_at_most(const int64_t *o, int64_t n, int64_t x, int64_t limit) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (kw_clamp(o[mid], 0, limit) <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The window [*lo, *hi) of keys query row i of batch b may attend (empty when *lo >= *hi); key padding
 * and a -inf bias leave out keys inside it. */
__device__ __forceinline__ void kw_window(const jattn_cuda_args &a, int64_t b, int64_t i, int64_t *lo_out,
                                          int64_t *hi_out) {
    int64_t lo = 0, hi = a.seq_kv, base_q = 0, base_k = 0, len_q = a.seq_q, len_k = a.seq_kv;
    if (a.cu_seqlens_q) {
        const int64_t *sq = a.cu_seqlens_q + b * a.segments_stride, *sk = a.cu_seqlens_kv + b * a.segments_stride;
        const int64_t n = a.num_segments;
        if (i >= kw_clamp(sq[n], 0, a.seq_q)) {
            *lo_out = *hi_out = 0;
            return;
        }
        const int64_t s = kw_last_at_most(sq, n, i, a.seq_q);
        base_q = kw_clamp(sq[s], 0, a.seq_q);
        len_q = kw_clamp(sq[s + 1], base_q, a.seq_q) - base_q;
        base_k = kw_clamp(sk[s], 0, a.seq_kv);
        len_k = kw_clamp(sk[s + 1], base_k, a.seq_kv) - base_k;
        lo = base_k;
        hi = base_k + len_k;
    }
    if (a.causal != JATTN_CAUSAL_NONE) {
        const int64_t last = base_k + (i - base_q) + (a.causal == JATTN_CAUSAL_BOTTOM_RIGHT ? len_k - len_q : 0);
        if (last + 1 < hi) hi = last + 1;
    }
    if (a.block_q) {
        const int64_t blk = kw_last_at_most(a.block_q, a.num_blocks, i, a.seq_q);
        const int64_t end = kw_clamp(a.block_kv[blk + 1], 0, a.seq_kv);
        if (end < hi) hi = end;
    }
    if (hi < lo) hi = lo;
    *lo_out = lo;
    *hi_out = hi;
}

/* The keys rows [i0, i1) of batch b may attend, together: [*lo, *hi), the union of their windows'
 * hull (exact for causal, blocks and segments, whose windows move monotonically with the row). */
__device__ __forceinline__ void kw_tile_window(const jattn_cuda_args &a, int64_t b, int64_t i0, int64_t i1, int64_t *lo,
                                               int64_t *hi) {
    if (!kw_has_window(a) || i0 >= i1) {
        *lo = 0;
        *hi = i0 < i1 ? a.seq_kv : 0;
        return;
    }
    int64_t l0, h0, l1, h1;
    kw_window(a, b, i0, &l0, &h0);
    kw_window(a, b, i1 - 1, &l1, &h1);
    /* rows past the last segment have empty windows: bound by the rows that have one */
    if (h0 <= l0) l0 = l1;
    if (h1 <= l1) h1 = h0;
    *lo = l0 < l1 ? l0 : l1;
    *hi = h0 > h1 ? h0 : h1;
    if (a.cu_seqlens_q) { /* segments between i0 and i1 may reach further: take the whole span */
        const int64_t *sq = a.cu_seqlens_q + b * a.segments_stride, *sk = a.cu_seqlens_kv + b * a.segments_stride;
        const int64_t n = a.num_segments;
        const int64_t s0 = kw_last_at_most(sq, n, i0, a.seq_q), s1 = kw_last_at_most(sq, n, i1 - 1, a.seq_q);
        const int64_t first = kw_clamp(sk[s0], 0, a.seq_kv), last = kw_clamp(sk[s1 + 1], 0, a.seq_kv);
        if (first < *lo) *lo = first;
        if (last > *hi) *hi = last;
    }
    if (*hi < *lo) *hi = *lo;
}

/* The bias row of (b, h) (query head h), or nullptr. */
__device__ __forceinline__ const float *kw_bias_row(const jattn_cuda_args &a, int64_t b, int64_t h) {
    return a.key_bias ? a.key_bias + b * a.bias_batch_stride + h * a.bias_head_stride : nullptr;
}

#endif /* JATTN_CUDA_KEY_WINDOW_CUH */
