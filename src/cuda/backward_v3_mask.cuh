/* backward_v3_mask.cuh: how the backward v3 (backward_v3_mma_f16x2.cu) walks a mask: the windows of the query
 * rows (key_window.cuh, kw_window: the definition of src/mask.c) as its pre-pass leaves them in the workspace
 * (backward_v3_layout.cuh), their summaries per 16 rows, the key tiles a CTA of query rows walks (dQ), the query
 * tiles a CTA of keys walks (dK/dV), and a warp's view of one tile: skipped, partial (masked per element) or
 * full. Internal to src/cuda; internal linkage. Plain code of integers on plain pointers, __host__ __device__:
 * lab/gpu/emulate_backward_v3_masks.cc compiles this file on the CPU and checks every walk against src/mask.c.
 *
 * The windows. Query row i attends the keys [lo_i, hi_i) (empty when lo_i == hi_i), less the key padding and
 * the keys whose bias is -inf. The pre-pass stores (lo_i, hi_i) per batch for every row of the records
 * (Tq * 64 rows): kw_window's, but (Skv, Skv) for the rows past the last segment and past seq_q. For
 * segments, causal (either alignment) and block-causal windows, lo_i and hi_i never decrease with i on the
 * rows before the last segment's end (a row's segment, its causal limit and its block all move forward with
 * it, and a segment's keys end where the next one's begin); the rows after it hold (Skv, Skv), past every
 * window. So over all rows lo and hi are non-decreasing, and the rows attending a key j are an interval:
 * the first row with hi > j to the last with lo <= j, which a binary search finds (offsets out of order in
 * device memory, which the library cannot check, break this: a window is then walked in part, never read
 * outside the tensors).
 *
 * The summaries. Per 16 rows (a warp's rows in the dQ kernel, and 16 columns of a tile in the dK/dV kernel),
 * over the rows below seq_q: the hull of the non-empty windows (min lo, max hi; a key outside it is attended
 * by none of the rows) and (max lo, min hi) over every row (a key inside [max lo, min hi) is attended by all
 * of them). A group with no row below seq_q is the empty summary (INT_MAX, INT_MIN, INT_MIN, INT_MAX): its
 * rows (records' padding: lse +inf, P = 0) neither widen the hull nor make a tile partial. */
#ifndef JATTN_BACKWARD_V3_MASK_CUH
#define JATTN_BACKWARD_V3_MASK_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>

#ifndef V3M_HOST_TYPES /* lab/gpu/emulate_backward_v3_masks.cc defines int2 and int4 itself */
#include <vector_types.h>
#endif

#include "key_window.cuh"

#ifndef V3M_HD
#define V3M_HD __host__ __device__ __forceinline__
#endif

namespace {

constexpr int kV3SumRows = 16; /* rows per window summary */

/* A warp's view of a tile of (rows, keys): no pair attended, some, or every pair attended (by the windows). */
enum V3TileClass { kV3Skip = 0, kV3Partial = 1, kV3Full = 2 };

V3M_HD int2 v3_int2(int x, int y) {
    int2 r;
    r.x = x, r.y = y;
    return r;
}

V3M_HD int4 v3_int4(int x, int y, int z, int w) {
    int4 r;
    r.x = x, r.y = y, r.z = z, r.w = w;
    return r;
}

/* The summary of no row: (min lo, max hi) of the non-empty windows, (max lo, min hi) of every row. */
V3M_HD int4 v3_sum_empty() { return v3_int4(INT_MAX, INT_MIN, INT_MIN, INT_MAX); }

/* The summary of one row's window w (valid: the row is below seq_q). */
V3M_HD int4 v3_sum_row(int2 w, bool valid) {
    if (!valid) return v3_sum_empty();
    const bool any = w.x < w.y;
    return v3_int4(any ? w.x : INT_MAX, any ? w.y : INT_MIN, w.x, w.y);
}

V3M_HD int4 v3_sum_merge(int4 a, int4 b) {
    return v3_int4(a.x < b.x ? a.x : b.x, a.y > b.y ? a.y : b.y, a.z > b.z ? a.z : b.z, a.w < b.w ? a.w : b.w);
}

/* A tile of the rows summarised by s against the keys of positions [jfirst, jlast] (the tile's keys lie in
 * it): kV3Skip when no row's window meets it, kV3Full when every row's window holds it, else kV3Partial. */
V3M_HD int v3_classify(int4 s, int jfirst, int jlast) {
    if (s.y <= jfirst || s.x > jlast) return kV3Skip;
    return s.z <= jfirst && s.w > jlast ? kV3Full : kV3Partial;
}

/* Whether window w holds key position j. */
V3M_HD bool v3_in(int2 w, int j) { return w.x <= j && j < w.y; }

/* The window the pre-pass stores for query row i of batch b: kw_window's, and (Skv, Skv) for the rows past the
 * last segment and past seq_q. */
__device__ __forceinline__ int2 v3_row_window(const jattn_cuda_args &a, int64_t b, int64_t i) {
    if (i >= a.seq_q) return v3_int2((int)a.seq_kv, (int)a.seq_kv);
    if (a.cu_seqlens_q &&
        i >= kw_clamp(a.cu_seqlens_q[b * a.segments_stride + a.num_segments], 0, a.seq_q)) /* no segment */
        return v3_int2((int)a.seq_kv, (int)a.seq_kv);
    int64_t lo, hi;
    kw_window(a, b, i, &lo, &hi);
    return v3_int2((int)lo, (int)hi);
}

/* Whether key j of batch b (a key the padding attends) is attended by some query row of some query head of
 * key/value head hk: a row whose window holds it (the first row whose window ends past j is the one whose
 * window starts first among those: windows never move back) and a head whose bias at j is not -inf. The
 * pre-pass leaves the other keys out of the k and v records, as the padding's, so that whatever they hold
 * (a packed buffer's unused tail past the last segment) never scales the records of the keys beside them. */
__device__ __forceinline__ bool v3_key_reached(const jattn_cuda_args &a, int64_t b, int64_t hk, int64_t j) {
    if (kw_has_window(a)) {
        int64_t lo = 0, hi = a.seq_q;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (v3_row_window(a, b, mid).y > j)
                hi = mid;
            else
                lo = mid + 1;
        }
        if (lo == a.seq_q || v3_row_window(a, b, lo).x > j) return false;
    }
    if (a.key_bias) {
        const int64_t group = a.heads / (a.kv_heads > 0 ? a.kv_heads : a.heads);
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
            if (kw_bias_row(a, b, h)[j] != -INFINITY) return true;
        return false;
    }
    return true;
}

/* The first row i in [0, n) with win[i].hi > j (n when none): hi never decreases. */
V3M_HD int v3_first_hi_above(const int2 *win, int n, int j) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (win[mid].y > j)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The last row i in [0, n) with win[i].lo <= j (-1 when none): lo never decreases. */
V3M_HD int v3_last_lo_at_most(const int2 *win, int n, int j) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (win[mid].x <= j)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

/* The first attended key (column) at key position pos or after: columns are the batch's attended keys in
 * ascending order (kv_index, key_padding.cu), or keys 0 .. n_kv - 1 (kv_index NULL). */
V3M_HD int v3_key_column(const int *kv_index, int n_kv, int pos) {
    if (!kv_index) return pos < n_kv ? pos : n_kv;
    int lo = 0, hi = n_kv;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (kv_index[mid] < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The key position of column c. */
V3M_HD int v3_key_pos(const int *kv_index, int c) { return kv_index ? kv_index[c] : c; }

/* dQ: the columns [*c_lo, *c_hi) that a CTA of query rows [r0, r0 + rows) walks: the attended keys inside the
 * hull of its rows' windows (sums: the batch's summaries, n_sums of them). */
V3M_HD void v3_dq_columns(const int4 *sums, int n_sums, int r0, int rows, const int *kv_index, int n_kv, int *c_lo,
                          int *c_hi) {
    int4 s = v3_sum_empty();
    for (int gi = r0 / kV3SumRows; gi < (r0 + rows) / kV3SumRows && gi < n_sums; ++gi) s = v3_sum_merge(s, sums[gi]);
    if (s.x >= s.y) {
        *c_lo = *c_hi = 0;
        return;
    }
    *c_lo = v3_key_column(kv_index, n_kv, s.x);
    *c_hi = v3_key_column(kv_index, n_kv, s.y);
}

/* dK/dV: the query rows [*i_lo, *i_hi) that attend some key of positions [jmin, jmax] (the batch's windows of
 * seq_q rows). */
V3M_HD void v3_kv_rows(const int2 *win, int seq_q, int jmin, int jmax, int *i_lo, int *i_hi) {
    const int a = v3_first_hi_above(win, seq_q, jmin), z = v3_last_lo_at_most(win, seq_q, jmax) + 1;
    *i_lo = a;
    *i_hi = z > a ? z : a;
}

} /* namespace */

#endif /* JATTN_BACKWARD_V3_MASK_CUH */
