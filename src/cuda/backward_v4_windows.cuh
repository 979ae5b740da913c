/* backward_v4_windows.cuh: the backward v4's work under a window that causal's closed form does not give
 * (segments, block-causal, key padding with causal, top-left causal with seq_q < seq_kv): the table of each
 * 128-key block's m-blocks, the units counted from it, and the rules that the fused kernel, the dQ reduction
 * and the cut items' sum (backward_v4_sm90_fa3_f16x2.cu) read from it in place of first_mblock / head_units.
 * Internal to src/cuda; internal linkage. Plain integer code on plain pointers, __host__ __device__:
 * lab/gpu/emulate_backward_v4_windows.cc compiles this file on the CPU and checks it against src/mask.c.
 *
 * Keys are the records' rows: batch b's attended keys first (key padding: kv_index, key_padding.cu; without it
 * key j is row j), so a window in original positions becomes the attended keys inside it (kw_compact), which
 * never changes the order. Query row i of batch b attends the keys [lo_i, hi_i) of its window (empty when
 * equal); for segments, causal (either alignment) and block-causal windows lo_i and hi_i never decrease with i
 * (backward_v3_mask.cuh says why), and the rows past the last segment and past seq_q take (sentinel, sentinel),
 * a key past every block (128 N), which keeps both non-decreasing over all rows and puts those rows in no
 * block's range. So the rows attending some key of block n (keys [128 n, 128 n + 128)) lie in one interval:
 * from the first row whose window ends past 128 n to the last whose window starts before 128 n + 128; block
 * n's m-blocks are [first(n), last(n)], both non-decreasing in n.
 *
 * The tables (workspace, per call; written by the pre-pass kernels bwd_v4_windows and bwd_v4_units of
 * backward_v4_split_f16x2.cu, read-only after):
 *   win   [B][tq 64][2] int: (lo_i, hi_i) of every row of the records (rows past seq_q included);
 *   range [B][N][2] int: first(n), last(n); a block no row attends takes one m-block, min(r / 64, tq - 1) for r
 *         its first row whose window ends past 128 n: there every P is 0 (the per-element test), so its keys'
 *         dK = dV = +0 are written like every other block's, and first, last stay non-decreasing;
 *   pre   [B N + 1] int: pre[b N + n] = the units of one head of the blocks before (b, n) in batch-major order
 *         (count(b', n') = last - first + 1); head (b, h) then begins at unit H pre[b N] + h U_b, U_b = pre[(b +
 *         1) N] - pre[b N] its units, block n of it at + pre[b N + n] - pre[b N], and the call has H pre[B N].
 * The units are the causal path's: (item (b H + h) N + n, m-block m), item-major, m from first(n) to last(n);
 * the host sizes the grid from the unmasked count (an upper bound: it never reads the offsets, so the call
 * stays asynchronous and graph-capturable), and each CTA takes its share of the device-side total, which may
 * leave a CTA none. */
#ifndef JATTN_BACKWARD_V4_WINDOWS_CUH
#define JATTN_BACKWARD_V4_WINDOWS_CUH

#include <stdint.h>

#include "key_window.cuh"

#ifndef V4W_HD
#define V4W_HD __host__ __device__ __forceinline__
#endif

namespace {

constexpr int kV4wBlockKeys = 128; /* keys of a work item (the kernel's kCtaKeys) */
constexpr int kV4wMRows = 64;      /* queries of an m-block (the kernel's kM) */

/* The window of query row i of batch b in attended keys (rows: batch b's kv_index row, NULL without a key mask;
 * n its attended keys): kw_row_keys's, and (sentinel, sentinel) for the rows past seq_q and past the last
 * segment. */
V4W_HD void v4w_row_window(const KwMask &a, int64_t b, int64_t i, const int *rows, int n, int sentinel, int *lo,
                           int *hi) {
    bool none = i >= a.seq_q;
    if (!none && a.cu_seqlens_q)
        none = i >= kw_clamp(KW_LDG(a.cu_seqlens_q + b * a.segments_stride + a.num_segments), 0, a.seq_q);
    if (none) {
        *lo = *hi = sentinel;
        return;
    }
    kw_row_keys(a, b, i, rows, n, lo, hi);
}

/* The first row r of [0, seq_q) whose window ends past key k (seq_q when none); win: the batch's rows. */
V4W_HD int v4w_first_hi_above(const int *win, int seq_q, int k) {
    int lo = 0, hi = seq_q;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (KW_LDG(win + 2 * mid + 1) > k)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The first row r of [0, seq_q) whose window starts at key k or after (seq_q when none). */
V4W_HD int v4w_first_lo_at_least(const int *win, int seq_q, int k) {
    int lo = 0, hi = seq_q;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (KW_LDG(win + 2 * mid) >= k)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Block n's m-blocks [*first, *last] (win: the batch's rows; tq = ceil(seq_q / 64)). */
V4W_HD void v4w_block_range(const int *win, int seq_q, int tq, int n, int *first, int *last) {
    const int k0 = kV4wBlockKeys * n;
    const int a = v4w_first_hi_above(win, seq_q, k0), z = v4w_first_lo_at_least(win, seq_q, k0 + kV4wBlockKeys);
    if (a < z) {
        *first = a / kV4wMRows;
        *last = (z - 1) / kV4wMRows;
    } else { /* no row attends the block: one m-block, all of its P 0 */
        *first = *last = a / kV4wMRows < tq - 1 ? a / kV4wMRows : tq - 1;
    }
}

/* Whether some row attends key (record row) j: the first row whose window ends past j starts at j or before
 * (the rows before it end at j or before, the rows after it start where it starts or after). The pre-pass
 * records the keys no row attends as 0 (as the backward v3 leaves them out of its records), so that whatever a
 * packed buffer holds there (past the last segment: a finite 1e30 as well as NaN) sets no tile's power of two
 * and enters no masked product. */
V4W_HD bool v4w_key_reached(const int *win, int seq_q, int j) {
    const int r = v4w_first_hi_above(win, seq_q, j);
    return r < seq_q && KW_LDG(win + 2 * r) <= j;
}

/* The tables in the workspace: int offsets from the region's start (win, range, pre, then the counter word that
 * bwd_v4_units's CTAs count themselves in), and the region's bytes. */
struct V4wLayout {
    int64_t win, range, pre, counter, bytes;
};

inline V4wLayout v4w_layout(int64_t batch, int64_t seq_q, int64_t seq_kv) {
    const int64_t tq = (seq_q + kV4wMRows - 1) / kV4wMRows, n = (seq_kv + kV4wBlockKeys - 1) / kV4wBlockKeys;
    V4wLayout l;
    l.win = 0;
    l.range = l.win + batch * tq * kV4wMRows * 2;
    l.pre = l.range + batch * n * 2;
    l.counter = l.pre + batch * n + 1;
    l.bytes = (l.counter + 1) * (int64_t)sizeof(int);
    return l;
}

/* The unit tables as the kernels read them. */
struct V4Table {
    const int *pre;   /* [B N + 1] */
    const int *range; /* [B N][2] */
    int batch, heads, n_blocks;
};

/* The call's units, H pre[B N]. */
V4W_HD int64_t v4t_units(const V4Table &t) { return (int64_t)t.heads * KW_LDG(t.pre + (int64_t)t.batch * t.n_blocks); }

/* Head bh = b H + h: its first unit, and its units in *per_head. */
V4W_HD int64_t v4t_head_base(const V4Table &t, int bh, int64_t *per_head) {
    const int b = bh / t.heads, h = bh - b * t.heads;
    const int64_t bn = (int64_t)b * t.n_blocks;
    const int p0 = KW_LDG(t.pre + bn), p1 = KW_LDG(t.pre + bn + t.n_blocks);
    *per_head = p1 - p0;
    return (int64_t)t.heads * p0 + (int64_t)h * (p1 - p0);
}

/* Item (b H + h) N + n: its first unit, and its m-blocks [*first, *last]. */
V4W_HD int64_t v4t_item(const V4Table &t, int item, int *first, int *last) {
    const int bh = item / t.n_blocks, n = item - bh * t.n_blocks;
    const int b = bh / t.heads, h = bh - b * t.heads;
    const int64_t bn = (int64_t)b * t.n_blocks;
    const int p0 = KW_LDG(t.pre + bn), p1 = KW_LDG(t.pre + bn + t.n_blocks), pn = KW_LDG(t.pre + bn + n);
    *first = KW_LDG(t.range + 2 * (bn + n));
    *last = KW_LDG(t.range + 2 * (bn + n) + 1);
    return (int64_t)t.heads * p0 + (int64_t)h * (p1 - p0) + (pn - p0);
}

/* The item that runs unit u (0 <= u < v4t_units): the last batch whose first unit is at u or before, the head
 * within it, the last block whose first unit is at the head's remainder or before (every block has a unit). */
V4W_HD int v4t_unit_item(const V4Table &t, int64_t u) {
    int lo = 0, hi = t.batch - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if ((int64_t)t.heads * KW_LDG(t.pre + (int64_t)mid * t.n_blocks) <= u)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int b = lo;
    const int64_t bn = (int64_t)b * t.n_blocks;
    const int p0 = KW_LDG(t.pre + bn), hu = KW_LDG(t.pre + bn + t.n_blocks) - p0;
    const int r = (int)(u - (int64_t)t.heads * p0); /* < H U_b <= the units: 32 bits */
    const int h = r / hu, rn = r - h * hu;
    lo = 0, hi = t.n_blocks - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (KW_LDG(t.pre + bn + mid) - p0 <= rn)
            lo = mid;
        else
            hi = mid - 1;
    }
    return (b * t.heads + h) * t.n_blocks + lo;
}

/* The blocks of batch b whose m-blocks reach m: [*na, *nb] (empty when *na > *nb): first and last never
 * decrease in n, so they are the blocks from the first with last(n) >= m to the last with first(n) <= m. */
V4W_HD void v4t_mblock_blocks(const V4Table &t, int b, int m, int *na, int *nb) {
    const int *r = t.range + 2 * (int64_t)b * t.n_blocks;
    int lo = 0, hi = t.n_blocks;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (KW_LDG(r + 2 * mid + 1) >= m)
            hi = mid;
        else
            lo = mid + 1;
    }
    *na = lo;
    lo = 0, hi = t.n_blocks;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (KW_LDG(r + 2 * mid) > m)
            hi = mid;
        else
            lo = mid + 1;
    }
    *nb = lo - 1;
}

/* Whether the CTA whose units are [s, e) holds m-block m of head (b, h) (base: the head's first unit; [na, nb]
 * from v4t_mblock_blocks): some block n of [na, nb] has its unit of m, base + pre(n) + m - first(n), in [s, e).
 * Over [na, nb] that unit increases with n (by last(n) + 1 - first(n + 1) >= 1): the first n at s or after
 * decides. */
V4W_HD bool v4t_copy_holds(const V4Table &t, int b, int64_t base, int m, int na, int nb, int64_t s, int64_t e) {
    const int64_t bn = (int64_t)b * t.n_blocks;
    const int p0 = KW_LDG(t.pre + bn);
    int lo = na, hi = nb + 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (base + (KW_LDG(t.pre + bn + mid) - p0) + m - KW_LDG(t.range + 2 * (bn + mid)) >= s)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo <= nb && base + (KW_LDG(t.pre + bn + lo) - p0) + m - KW_LDG(t.range + 2 * (bn + lo)) < e;
}

/* dQ's store rule in a CTA's copy of a head. The head's earlier items in the CTA pushed m-blocks [mb', me') each
 * (every one to its last(n') but the CTA's last item, which has none after it; the CTA's first item from where
 * its units begin); with first and last non-decreasing, what they pushed at or past this item's first m-block is
 * [max(A, first(n)), B): A the smallest mb' and B the previous item's me'. So an item stores into m-block m
 * (its first push there) when m < A or m >= B, and adds into the others. The words (A, B) of the next item from
 * this one's: first_of_head (the CTA's first item, or block 0): (tq, tq), every m-block stored; else (min(A,
 * mb), me) of the item before. */
V4W_HD void v4w_cover(bool first_of_head, int tq, int a_prev, int mb_prev, int me_prev, int *a, int *b) {
    if (first_of_head) {
        *a = *b = tq;
        return;
    }
    *a = a_prev < mb_prev ? a_prev : mb_prev;
    *b = me_prev;
}

} /* namespace */

#endif /* JATTN_BACKWARD_V4_WINDOWS_CUH */
