/* The mask of a call as a kernel reads it (jattn_cuda_args, cuda_internal.h): which key/value head a
 * query head reads, the window of keys a query row may attend (segments, causal, blocks: the same
 * definition as src/mask.c, the host's), and a key's bias. Device code, header-only; every version
 * that serves a mask part (cuda_versions.c, .features) reads it through these.
 *
 * The window helpers read their mask from `a`: a jattn_cuda_args, or a KwMask (below: its window fields
 * alone, the parameter block the forward kernels carry).
 *
 * Offsets come from the caller's device memory, where the library cannot check them (include/jattn.h):
 * they are clamped into range here, so a bad offset narrows or widens a window but never reads outside
 * the tensors. A tile of rows [i0, i1) attends at most the keys [min lo, max hi) of its rows: a kernel
 * walks those key tiles only, and masks per element where a tile straddles a row's window. */
#ifndef JATTN_CUDA_KEY_WINDOW_CUH
#define JATTN_CUDA_KEY_WINDOW_CUH

#include <stdint.h>

#include "cuda_internal.h"

/* Host and device: the same code runs in the kernels and in the emulator of lab/gpu/ (checked there
 * against src/mask.c on random masks). Reads go through KW_LDG (__ldg on the device). */
#ifdef __CUDA_ARCH__
#define KW_LDG(p) __ldg(p)
#else
#define KW_LDG(p) (*(p))
#endif
#define KW_FN __host__ __device__ __forceinline__

/* A mask's window fields as a kernel's parameter block carries them (the names of jattn_cuda_args). */
struct KwMask {
    int64_t seq_q, seq_kv;
    int causal;
    const int64_t *block_q, *block_kv;
    int64_t num_blocks;
    const int64_t *cu_seqlens_q, *cu_seqlens_kv;
    int64_t num_segments, segments_stride;
};

KW_FN KwMask kw_mask_of(const jattn_cuda_args &a) {
    return KwMask{a.seq_q,      a.seq_kv,       a.causal,        a.block_q,      a.block_kv,
                  a.num_blocks, a.cu_seqlens_q, a.cu_seqlens_kv, a.num_segments, a.segments_stride};
}

/* The key/value head that query head h reads. */
KW_FN int64_t kw_kv_head(const jattn_cuda_args &a, int64_t h) {
    return a.kv_heads > 0 && a.kv_heads < a.heads ? h / (a.heads / a.kv_heads) : h;
}

/* Whether a call has a window part (segments, causal or blocks). */
template <class A>
KW_FN bool kw_has_window(const A &a) {
    return a.cu_seqlens_q != nullptr || a.causal != JATTN_CAUSAL_NONE || a.block_q != nullptr;
}

KW_FN int64_t kw_clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The last index s in [0, n) with clamp(o[s]) <= x (binary search over non-decreasing offsets). */
KW_FN int64_t kw_last_at_most(const int64_t *o, int64_t n, int64_t x, int64_t limit) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (kw_clamp(KW_LDG(o + mid), 0, limit) <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The window [*lo, *hi) of keys query row i of batch b may attend (empty when *lo >= *hi); key padding
 * and a -inf bias leave out keys inside it. */
template <class A>
KW_FN void kw_window(const A &a, int64_t b, int64_t i, int64_t *lo_out, int64_t *hi_out) {
    int64_t lo = 0, hi = a.seq_kv, base_q = 0, base_k = 0, len_q = a.seq_q, len_k = a.seq_kv;
    if (a.cu_seqlens_q) {
        const int64_t *sq = a.cu_seqlens_q + b * a.segments_stride, *sk = a.cu_seqlens_kv + b * a.segments_stride;
        const int64_t n = a.num_segments;
        if (i >= kw_clamp(KW_LDG(sq + n), 0, a.seq_q)) {
            *lo_out = *hi_out = 0;
            return;
        }
        const int64_t s = kw_last_at_most(sq, n, i, a.seq_q);
        base_q = kw_clamp(KW_LDG(sq + s), 0, a.seq_q);
        len_q = kw_clamp(KW_LDG(sq + s + 1), base_q, a.seq_q) - base_q;
        base_k = kw_clamp(KW_LDG(sk + s), 0, a.seq_kv);
        len_k = kw_clamp(KW_LDG(sk + s + 1), base_k, a.seq_kv) - base_k;
        lo = base_k;
        hi = base_k + len_k;
    }
    if (a.causal != JATTN_CAUSAL_NONE) {
        const int64_t last = base_k + (i - base_q) + (a.causal == JATTN_CAUSAL_BOTTOM_RIGHT ? len_k - len_q : 0);
        if (last + 1 < hi) hi = last + 1;
    }
    if (a.block_q) {
        const int64_t blk = kw_last_at_most(a.block_q, a.num_blocks, i, a.seq_q);
        const int64_t end = kw_clamp(KW_LDG(a.block_kv + blk + 1), 0, a.seq_kv);
        if (end < hi) hi = end;
    }
    if (hi < lo) hi = lo;
    *lo_out = lo;
    *hi_out = hi;
}

/* The keys rows [i0, i1) of batch b may attend, together: [*lo, *hi), the union of their windows'
 * hull (exact for causal, blocks and segments, whose windows move monotonically with the row). */
template <class A>
KW_FN void kw_tile_window(const A &a, int64_t b, int64_t i0, int64_t i1, int64_t *lo, int64_t *hi) {
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
        const int64_t first = kw_clamp(KW_LDG(sk + s0), 0, a.seq_kv), last = kw_clamp(KW_LDG(sk + s1 + 1), 0, a.seq_kv);
        if (first < *lo) *lo = first;
        if (last > *hi) *hi = last;
    }
    if (*hi < *lo) *hi = *lo;
}

/* The bias row of (b, h) (query head h), or nullptr. */
KW_FN const float *kw_bias_row(const jattn_cuda_args &a, int64_t b, int64_t h) {
    return a.key_bias ? a.key_bias + b * a.bias_batch_stride + h * a.bias_head_stride : nullptr;
}

/* ---- windows over the attended keys (key padding) ----
 * Under key padding a kernel walks batch b's attended keys packed in order (key_padding.cuh): attended
 * key j is original key rows[j], or j itself when there is no key mask (rows NULL), j < n = kv_count[b].
 * Windows are in original positions; since rows ascend, the attended keys inside [lo, hi) are the
 * attended keys [kw_compact(lo), kw_compact(hi)): a binary search of the row list (none without a key
 * mask). Kernels compare attended-key indices with these bounds. */

/* The number of attended keys before original position x: the first j with rows[j] >= x. */
KW_FN int kw_compact(const int *rows, int n, int64_t x) {
    if (x <= 0) return 0;
    if (!rows) return x < n ? (int)x : n;
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (KW_LDG(rows + mid) < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Query row i's window in attended keys, [*lo, *hi) (empty when equal; rows at or past seq_q: empty). */
template <class A>
KW_FN void kw_row_keys(const A &a, int64_t b, int64_t i, const int *rows, int n, int *lo, int *hi) {
    if (i >= a.seq_q) {
        *lo = *hi = 0;
        return;
    }
    int64_t l, h;
    kw_window(a, b, i, &l, &h);
    *lo = kw_compact(rows, n, l);
    *hi = kw_compact(rows, n, h);
}

/* The attended keys rows [i0, min(i1, seq_q)) of batch b may attend together: kw_tile_window's hull in
 * attended keys, [*lo, *hi) (empty when equal). A kernel's CTA walks the key tiles of this range only. */
template <class A>
KW_FN void kw_tile_keys(const A &a, int64_t b, int64_t i0, int64_t i1, const int *rows, int n, int *lo, int *hi) {
    if (i1 > a.seq_q) i1 = a.seq_q;
    int64_t l, h;
    kw_tile_window(a, b, i0, i1, &l, &h);
    *lo = kw_compact(rows, n, l);
    *hi = kw_compact(rows, n, h);
    if (*hi < *lo) *hi = *lo;
}

/* The keys of a group of query rows (a warp's 16, a warpgroup's 64): the hull of their windows' union
 * [ulo, uhi) (no row attends a key outside it) and their intersection [ilo, ihi) (every row attends every
 * key inside it); rows past seq_q take no part. A key tile [k0, k1) is then skipped (no row attends
 * it), full (no key of it needs a test) or a boundary tile (each element tests its row's window). */
struct KwGroupKeys {
    int ulo, uhi, ilo, ihi;
};

KW_FN KwGroupKeys kw_group_empty() { return KwGroupKeys{INT32_MAX, INT32_MIN, INT32_MIN, INT32_MAX}; }

/* Adds a row's window [lo, hi) (valid: the row is < seq_q). */
KW_FN void kw_group_add(KwGroupKeys &g, int lo, int hi, bool valid) {
    if (!valid) return;
    if (lo < hi) {
        g.ulo = lo < g.ulo ? lo : g.ulo;
        g.uhi = hi > g.uhi ? hi : g.uhi;
    }
    g.ilo = lo > g.ilo ? lo : g.ilo;
    g.ihi = hi < g.ihi ? hi : g.ihi;
}

KW_FN void kw_group_join(KwGroupKeys &g, const KwGroupKeys &o) {
    g.ulo = o.ulo < g.ulo ? o.ulo : g.ulo;
    g.uhi = o.uhi > g.uhi ? o.uhi : g.uhi;
    g.ilo = o.ilo > g.ilo ? o.ilo : g.ilo;
    g.ihi = o.ihi < g.ihi ? o.ihi : g.ihi;
}

KW_FN bool kw_tile_skipped(const KwGroupKeys &g, int k0, int k1) { return k1 <= g.ulo || k0 >= g.uhi || k0 >= k1; }
KW_FN bool kw_tile_full(const KwGroupKeys &g, int k0, int k1) { return k0 >= g.ilo && k1 <= g.ihi; }

#ifdef __CUDACC__
/* A warp's KwGroupKeys from each lane's (every lane of the warp calls it). */
__device__ __forceinline__ KwGroupKeys kw_group_warp(KwGroupKeys g) {
    g.ulo = __reduce_min_sync(0xffffffffu, g.ulo);
    g.uhi = __reduce_max_sync(0xffffffffu, g.uhi);
    g.ilo = __reduce_max_sync(0xffffffffu, g.ilo);
    g.ihi = __reduce_min_sync(0xffffffffu, g.ihi);
    return g;
}

/* The windows in attended keys of query rows r0 and r1 (in that order) held by the four lanes of a quad
 * (lanes 4 q .. 4 q + 3; t = lane % 4): each lane computes one of the four bounds (one binary search of the
 * row list, with a key mask) and the quad shares them. Every lane of the warp calls it. */
template <class A>
__device__ __forceinline__ void kw_quad_rows(const A &a, int64_t b, int64_t r0, int64_t r1, const int *rows, int n,
                                             int t, int (&lo)[2], int (&hi)[2]) {
    const int64_t i = t < 2 ? r0 : r1;
    int x = 0;
    if (i < a.seq_q) {
        int64_t l, h;
        kw_window(a, b, i, &l, &h);
        x = kw_compact(rows, n, t % 2 ? h : l);
    }
    const int base = (int)(threadIdx.x % 32) & ~3;
    lo[0] = __shfl_sync(0xffffffffu, x, base);
    hi[0] = __shfl_sync(0xffffffffu, x, base + 1);
    lo[1] = __shfl_sync(0xffffffffu, x, base + 2);
    hi[1] = __shfl_sync(0xffffffffu, x, base + 3);
}
#endif

#endif /* JATTN_CUDA_KEY_WINDOW_CUH */
