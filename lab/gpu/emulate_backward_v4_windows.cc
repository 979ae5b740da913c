/* emulate_backward_v4_windows: the backward v4 under a window that causal's closed form does not give (segments,
 * block-causal, key padding with causal, top-left causal with seq_q < seq_kv), replayed on the CPU and checked
 * against src/mask.c on random masks (issue 35: packed sequences on Hopper).
 *
 * What runs is the code of src/cuda/backward_v4_windows.cuh, compiled here for the host: the pre-pass's row
 * windows (v4w_row_window), block ranges (v4w_block_range) and reached keys (v4w_key_reached), the unit tables'
 * readers (v4t_units, v4t_item, v4t_unit_item, v4t_head_base, v4t_mblock_blocks, v4t_copy_holds) and the dQ
 * store rule (v4w_cover). The loops around them are the kernels' loops written again here: bwd_v4_units's scan,
 * the split pre-pass's m-block summary of the q records (words 64, 65), bwd_v4_kernel<..., kV4Windows>'s CTA
 * (its units, items, m-blocks, the store words, the whole / slot flags, the per-element test of a tile that is
 * not full), bwd_v4_dkv_parts (one block per boundary that cuts an item, empty CTAs skipped) and
 * bwd_v4_dq_reduce (the copies that hold a row's m-block).
 *
 * Checked per draw: (1) the row windows are src/mask.c's in attended keys (rows past seq_q and past the last
 * segment: the sentinel), non-decreasing; (2) the block ranges are non-decreasing in first and last, and every
 * attended (query, key) pair's m-block lies in its block's range; (3) a key is recorded (reached) exactly when
 * some row attends it; (4) the grid: every unit of every head run once by one CTA (the device total cut over the
 * host's CTA count, empty CTAs included), each unit back to its (item, m-block), every item run whole in one CTA
 * or in parts, each part in its own slot, each cut item summed once from exactly the slots its parts wrote; (5)
 * every attended pair of every head gets its P (not forced 0) exactly once, and no other pair does (the tile
 * summary's "full" and the element test); (6) dQ: in each copy the first push into an m-block is a store and the
 * later ones adds, no copy slot is shared by two (CTA, head) pairs, and the reduction sums for an m-block
 * exactly the copies that hold it; (7) the work: units against the unmasked call's.
 * With --mutate, each of seven broken variants of the rules must fail (the checks have teeth).
 *
 * build and run (from the repository root; gcc and g++, no GPU):
 *   gcc -O2 -c -Iinclude -Isrc src/mask.c -o /tmp/mask.o
 *   g++ -O2 -std=c++17 -Iinclude -Isrc lab/gpu/emulate_backward_v4_windows.cc /tmp/mask.o -o /tmp/emulate_v4w
 *   /tmp/emulate_v4w [draws [seed]] [--mutate]      (default 2000 draws, seed 1)
 * prints one line per failing draw (the first 20) and a summary; exit 1 on any failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#define __host__
#define __device__
#define __forceinline__ inline
#include "cuda/backward_v4_windows.cuh" /* key_window.cuh with it */

extern "C" {
#include "backend.h"
jattn_status jattn_fail(jattn_status status, const char *fmt, ...) { /* mask.c's refusal: not used here */
    (void)fmt;
    return status;
}
}

/* ---- random numbers ---- */
static uint64_t rng_state;
static uint64_t next_u64() {
    rng_state += 0x9E3779B97F4A7C15ull;
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform() { return (double)(next_u64() >> 11) * 0x1p-53; }
static int64_t below(int64_t n) { return n > 0 ? (int64_t)(uniform() * (double)n) : 0; }

/* n + 1 sorted offsets from 0 to last (parts may be empty) */
static void cut(std::vector<int64_t> &o, int n, int64_t last) {
    o.assign(n + 1, 0);
    o[n] = last;
    for (int i = 1; i < n; i++) o[i] = below(last + 1);
    std::sort(o.begin() + 1, o.begin() + n);
}

/* ---- a case: a mask the windows path takes ---- */
struct Case {
    int64_t B, H, Sq, Skv;
    int sms;
    jattn_causal causal;
    int blocks, segments, seg_batched, pad; /* pad: 0 none, 1 kv_len, 2 key mask */
    std::vector<int64_t> block_q, block_kv, seg_q, seg_kv, kv_len;
    std::vector<uint8_t> key_mask;
    jattn_problem p;
    jattn_call c;
    jattn_cuda_args a;
    std::vector<std::vector<int>> kv_index; /* per batch the attended keys ascending (key_padding.cu) */
};

static void make_case(Case &k) {
    for (;;) {
        k.B = 1 + below(3);
        k.H = 1 + below(4);
        const int64_t max_s = uniform() < 0.25 ? 1300 : uniform() < 0.5 ? 400 : 140;
        k.Sq = 1 + below(max_s);
        k.Skv = uniform() < 0.4 ? k.Sq : 2 + below(max_s);
        k.sms = uniform() < 0.3 ? 132 : 1 + (int)below(132);
        k.causal = (jattn_causal)below(3);
        k.blocks = uniform() < 0.35 ? 1 + (int)below(6) : 0;
        k.segments = uniform() < 0.5 ? 1 + (int)below(6) : 0;
        k.seg_batched = k.segments && uniform() < 0.5;
        k.pad = (int)below(3);
        /* what the windows path serves: a segments or blocks part, key padding with causal, top-left causal with
         * fewer queries than keys (causal alone otherwise: the closed form; padding alone: the records) */
        const bool windows = k.segments || k.blocks || (k.pad && k.causal != JATTN_CAUSAL_NONE) ||
                             (k.causal == JATTN_CAUSAL_TOP_LEFT && k.Sq < k.Skv);
        if (windows) break;
    }
    memset(&k.p, 0, sizeof k.p);
    k.p.batch = k.B, k.p.heads = k.H, k.p.kv_heads = k.H, k.p.seq_q = k.Sq, k.p.seq_kv = k.Skv, k.p.head_dim = 64;
    memset(&k.c, 0, sizeof k.c);
    k.c.problem = &k.p;
    k.c.causal = k.causal;
    if (k.blocks) {
        cut(k.block_q, k.blocks, k.Sq);
        if (k.Sq == k.Skv && uniform() < 0.5)
            k.block_kv = k.block_q;
        else
            cut(k.block_kv, k.blocks, k.Skv);
        k.c.block_q = k.block_q.data(), k.c.block_kv = k.block_kv.data(), k.c.num_blocks = k.blocks;
    }
    if (k.segments) {
        const int rows = k.seg_batched ? (int)k.B : 1;
        k.seg_q.assign((size_t)rows * (k.segments + 1), 0);
        k.seg_kv.assign((size_t)rows * (k.segments + 1), 0);
        for (int r = 0; r < rows; r++) {
            /* a packed buffer: the last segment may end early (queries and keys past it attend and are attended
             * by none) */
            const int64_t eq = uniform() < 0.3 ? k.Sq - below(k.Sq / 3 + 1) : k.Sq;
            const int64_t ek = uniform() < 0.3 ? k.Skv - below(k.Skv / 3 + 1) : k.Skv;
            std::vector<int64_t> q, kv;
            if (uniform() < 0.3 && k.Sq == k.Skv) { /* equal packed sequences, as a trainer packs them */
                q.assign(k.segments + 1, 0);
                for (int s = 0; s <= k.segments; s++) q[s] = eq * s / k.segments;
                kv = q;
            } else {
                cut(q, k.segments, eq);
                if (k.Sq == k.Skv && eq == ek && uniform() < 0.5)
                    kv = q;
                else
                    cut(kv, k.segments, ek);
            }
            std::copy(q.begin(), q.end(), k.seg_q.begin() + (size_t)r * (k.segments + 1));
            std::copy(kv.begin(), kv.end(), k.seg_kv.begin() + (size_t)r * (k.segments + 1));
        }
        k.c.cu_seqlens_q = k.seg_q.data(), k.c.cu_seqlens_kv = k.seg_kv.data();
        k.c.num_segments = k.segments, k.c.segments_stride = k.seg_batched ? k.segments + 1 : 0;
    }
    if (k.pad == 1) {
        k.kv_len.resize(k.B);
        for (auto &l : k.kv_len) l = uniform() < 0.2 ? k.Skv : below(k.Skv + 1);
        k.c.kv_len = k.kv_len.data();
    } else if (k.pad == 2) {
        k.key_mask.resize((size_t)(k.B * k.Skv));
        const double keep = uniform() < 0.3 ? 0.2 : 0.7;
        for (auto &m : k.key_mask) m = uniform() < keep;
        k.c.mask = k.key_mask.data(), k.c.mask_stride = k.Skv;
    }
    memset(&k.a, 0, sizeof k.a);
    k.a.batch = k.B, k.a.heads = k.H, k.a.seq_q = k.Sq, k.a.seq_kv = k.Skv, k.a.head_dim = 64;
    k.a.causal = (int)k.causal;
    k.a.block_q = k.c.block_q, k.a.block_kv = k.c.block_kv, k.a.num_blocks = k.c.num_blocks;
    k.a.cu_seqlens_q = k.c.cu_seqlens_q, k.a.cu_seqlens_kv = k.c.cu_seqlens_kv;
    k.a.num_segments = k.c.num_segments, k.a.segments_stride = k.c.segments_stride;
    k.kv_index.assign(k.B, {});
    for (int64_t b = 0; b < k.B; b++)
        for (int64_t j = 0; j < k.Skv; j++)
            if (jattn_call_attends(&k.c, b, j)) k.kv_index[b].push_back((int)j);
}

static int mutation; /* 0: none; else one rule broken on purpose */
static long failures_draw;
static int failures;
static void fail(const Case &k, const char *what, long long x, long long y, long long z) {
    failures_draw++;
    if (failures++ < 20 && !mutation)
        printf("FAIL B=%lld H=%lld Sq=%lld Skv=%lld sms=%d causal=%d blocks=%d segments=%d%s pad=%d: %s (%lld, %lld, "
               "%lld)\n",
               (long long)k.B, (long long)k.H, (long long)k.Sq, (long long)k.Skv, k.sms, (int)k.causal, k.blocks,
               k.segments, k.seg_batched ? "/batch" : "", k.pad, what, x, y, z);
}

/* the rules as the kernels use them, with the mutations */
static void block_range(const int *win, int sq, int tq, int n, int *f, int *l) {
    v4w_block_range(win, sq, tq, n, f, l);
    if (mutation == 1 && *l > *f) --*l; /* the last m-block of a block dropped */
}
static void cover(bool first_of_head, int tq, int a_prev, int mb_prev, int me_prev, int *a, int *b) {
    v4w_cover(first_of_head, tq, a_prev, mb_prev, me_prev, a, b);
    if (mutation == 2 && !first_of_head) *b = tq; /* the causal rule: the earlier items reach the last m-block */
}
static bool key_reached(const int *win, int sq, int j) { return mutation == 3 || v4w_key_reached(win, sq, j); }

struct Stats {
    long draws, units, unmasked_units, pairs, empty_ctas, cut_items, partial_tiles, tiles;
};

static void run_case(const Case &k, Stats &st) {
    const int B = (int)k.B, H = (int)k.H, Sq = (int)k.Sq, Skv = (int)k.Skv;
    const int N = (Skv + 127) / 128, tq = (Sq + 63) / 64, rows_pad = tq * 64, sentinel = 128 * N;
    const KwMask mk = kw_mask_of(k.a);
    std::vector<int> n_kv(B);
    for (int b = 0; b < B; b++) n_kv[b] = (int)k.kv_index[b].size();
    auto rows_of = [&](int b) -> const int * { return k.pad == 2 ? k.kv_index[b].data() : nullptr; };
    auto orig = [&](int b, int j) { return k.kv_index[b][j]; }; /* without a mask: j itself (the list is 0..n-1) */

    /* ---- bwd_v4_windows: the row table ---- */
    std::vector<int> win((size_t)B * rows_pad * 2);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < rows_pad; i++) {
            int *w = &win[((size_t)b * rows_pad + i) * 2];
            v4w_row_window(mk, b, i, rows_of(b), n_kv[b], sentinel, &w[0], &w[1]);
            if (mutation == 5 && i < Sq) kw_row_keys(mk, b, i, rows_of(b), n_kv[b], &w[0], &w[1]); /* no sentinel */
        }
    /* (1) against src/mask.c; non-decreasing */
    std::vector<std::vector<uint8_t>> att(B); /* [b][i * n + j]: row i attends attended key j */
    for (int b = 0; b < B; b++) {
        const int n = n_kv[b];
        att[b].assign((size_t)Sq * (n ? n : 1), 0);
        const int *wb = &win[(size_t)b * rows_pad * 2];
        for (int i = 0; i < rows_pad; i++) {
            if (i && (wb[2 * i] < wb[2 * i - 2] || wb[2 * i + 1] < wb[2 * i - 1]))
                fail(k, "row windows decrease (b, i, lo)", b, i, wb[2 * i]);
            if (i >= Sq) {
                if (wb[2 * i] != sentinel || wb[2 * i + 1] != sentinel)
                    fail(k, "row past seq_q not the sentinel", b, i, 0);
                continue;
            }
            int64_t lo, hi;
            jattn_call_key_window(&k.c, b, i, &lo, &hi);
            for (int j = 0; j < n; j++) {
                const int x = orig(b, j);
                const bool want = x >= lo && x < hi;
                att[b][(size_t)i * n + j] = want;
                if (want != (j >= wb[2 * i] && j < wb[2 * i + 1])) fail(k, "row window differs (b, i, key)", b, i, j);
            }
        }
    }
    /* ---- bwd_v4_units: the block ranges and the scan ---- */
    std::vector<int> range((size_t)B * N * 2), pre((size_t)B * N + 1);
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++)
            block_range(&win[(size_t)b * rows_pad * 2], Sq, tq, n, &range[2 * ((size_t)b * N + n)],
                        &range[2 * ((size_t)b * N + n) + 1]);
    pre[0] = 0;
    for (size_t x = 0; x < (size_t)B * N; x++) pre[x + 1] = pre[x] + range[2 * x + 1] - range[2 * x] + 1;
    /* (2) order, and every attended pair inside its block's range */
    for (int b = 0; b < B; b++) {
        const int *r = &range[(size_t)b * N * 2];
        for (int n = 0; n < N; n++) {
            if (r[2 * n] < 0 || r[2 * n] > r[2 * n + 1] || r[2 * n + 1] >= tq) fail(k, "range out of order", b, n, 0);
            if (n && (r[2 * n] < r[2 * n - 2] || r[2 * n + 1] < r[2 * n - 1])) fail(k, "ranges decrease", b, n, 0);
        }
        const int n = n_kv[b];
        for (int i = 0; i < Sq; i++)
            for (int j = 0; j < n; j++)
                if (att[b][(size_t)i * n + j]) {
                    const int blk = j / 128, m = i / 64;
                    if (m < r[2 * blk] || m > r[2 * blk + 1]) {
                        fail(k, "attended pair outside its block's range (b, i, j)", b, i, j);
                        break;
                    }
                }
        /* (3) the keys recorded */
        const int *wb = &win[(size_t)b * rows_pad * 2];
        for (int j = 0; j < n; j++) {
            bool any = false;
            for (int i = 0; i < Sq && !any; i++) any = att[b][(size_t)i * n + j];
            if (key_reached(wb, Sq, j) != any) fail(k, "key reached wrongly (b, key, truth)", b, j, any);
        }
    }
    /* the split's q-record summary per (batch, m-block): the largest lo and the smallest hi of its rows below
     * seq_q (words 64, 65) */
    std::vector<int> ilo((size_t)B * tq), ihi((size_t)B * tq);
    for (int b = 0; b < B; b++)
        for (int m = 0; m < tq; m++) {
            int x = INT32_MIN, y = INT32_MAX;
            for (int r = m * 64; r < m * 64 + 64 && r < Sq; r++) {
                x = std::max(x, win[((size_t)b * rows_pad + r) * 2]);
                y = std::min(y, win[((size_t)b * rows_pad + r) * 2 + 1]);
            }
            ilo[(size_t)b * tq + m] = x, ihi[(size_t)b * tq + m] = y;
        }

    /* ---- the fused kernel's grid ---- */
    const V4Table t = {pre.data(), range.data(), B, H, N};
    const int64_t units = v4t_units(t);
    const int64_t host_units = (int64_t)B * H * N * tq; /* the unmasked call's: the host's bound */
    const int ctas = (int)std::max<int64_t>(1, std::min<int64_t>(std::min(k.sms, 132), host_units));
    st.units += units, st.unmasked_units += host_units;
    auto ustart = [&](int64_t g) { return g * units / ctas; };
    auto ucta = [&](int64_t u) { return (int)std::min<int64_t>((((u + 1) * ctas - 1) / units), ctas - 1); };
    std::vector<int> seen((size_t)units, 0);
    std::map<int64_t, int> slot_item;              /* parts slot -> item */
    std::set<int> whole, cutset;                   /* items */
    std::map<std::pair<int64_t, int>, int> copies; /* (copy slot, m) -> pushes */
    std::map<int64_t, std::pair<int, int>> slot_owner;
    std::vector<std::vector<uint8_t>> got(B * H); /* [bh][i * n + j]: P computed */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) got[b * H + h].assign((size_t)Sq * (n_kv[b] ? n_kv[b] : 1), 0);
    for (int g = 0; g < ctas; g++) {
        const int64_t u0 = ustart(g), u1 = ustart(g + 1);
        if (u0 >= u1) {
            st.empty_ctas++;
            continue; /* first item 0, last -1: no loop runs */
        }
        const int first = v4t_unit_item(t, u0), last = v4t_unit_item(t, u1 - 1);
        int a_w = 0, mb_w = 0, me_w = 0; /* the consumer's shared words: A, [mb, me) of the item before */
        for (int item = first; item <= last; item++) {
            int f, l;
            const int64_t iu = v4t_item(t, item, &f, &l);
            const int bh = item / N, n = item % N, b = bh / H;
            const int mb = f + (int)(u0 > iu ? u0 - iu : 0), me = (int)std::min<int64_t>(l + 1, f + (u1 - iu));
            if (mb >= me) fail(k, "an item of the CTA with no unit in it (g, item, mb)", g, item, mb);
            const bool first_of_head = item == first || n == 0;
            int a, bv;
            cover(first_of_head, tq, a_w, mb_w, me_w, &a, &bv);
            a_w = a, mb_w = mb, me_w = me;
            const int64_t cslot = (int64_t)g + bh;
            auto own = slot_owner.find(cslot);
            if (own == slot_owner.end())
                slot_owner[cslot] = {g, bh};
            else if (own->second != std::make_pair(g, bh))
                fail(k, "copy slot shared by two (CTA, head) pairs", cslot, g, bh);
            for (int m = mb; m < me; m++) {
                const int64_t u = iu + m - f;
                if (u < u0 || u >= u1) {
                    fail(k, "unit outside the CTA (g, item, m)", g, item, m);
                    continue;
                }
                seen[(size_t)u]++;
                if (v4t_unit_item(t, u) != item) fail(k, "unit maps to another item (u, item, m)", u, item, m);
                const bool store = m < a || m >= bv;
                int &cell = copies[{cslot, m}];
                if (store && cell) fail(k, "a store over earlier pushes (copy, m, item)", cslot, m, item);
                if (!store && !cell) fail(k, "an add into a copy never stored (copy, m, item)", cslot, m, item);
                cell++;
                /* the pairs: each warpgroup's 64 keys against the m-block's 64 queries */
                const int nb = n_kv[b]; /* the batch's attended keys: the window test alone gives P = 0 past them */
                for (int w = 0; w < 2; w++) {
                    const int key_w = 128 * n + 64 * w;
                    int lo_t = ilo[(size_t)b * tq + m], hi_t = ihi[(size_t)b * tq + m];
                    bool full = lo_t <= key_w && hi_t >= key_w + 64;
                    if (mutation == 4) full = lo_t <= key_w; /* the intersection's end left out */
                    st.tiles++, st.partial_tiles += !full;
                    for (int qi = 0; qi < 64; qi++) {
                        const int i = m * 64 + qi;
                        if (i >= Sq) continue; /* lse +inf: P = 0 */
                        const int *wr = &win[((size_t)b * rows_pad + i) * 2];
                        for (int kk = 0; kk < 64; kk++) {
                            const int j = key_w + kk;
                            const bool p_on = full || (j >= wr[0] && j < wr[1]);
                            if (j >= nb) {
                                if (p_on) fail(k, "a key past the batch's count gets P (b h, i, j)", bh, i, j);
                                continue;
                            }
                            if (p_on) got[bh][(size_t)i * nb + j]++;
                        }
                    }
                }
            }
            const bool is_whole = iu >= u0 && me == l + 1;
            if (is_whole) {
                if (!whole.insert(item).second) fail(k, "item whole twice", item, g, 0);
            } else {
                cutset.insert(item);
                const int64_t slot = 2 * (int64_t)g + (iu > u0 ? 1 : 0);
                auto it = slot_item.find(slot);
                if (it != slot_item.end() && it->second != item)
                    fail(k, "parts slot written twice (slot, items)", slot, it->second, item);
                slot_item[slot] = item;
            }
        }
    }
    for (int64_t u = 0; u < units; u++)
        if (seen[(size_t)u] != 1) {
            fail(k, "unit not run once (u, times, units)", u, seen[(size_t)u], units);
            break;
        }
    /* (5) every attended pair once, no other */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int n = n_kv[b];
            for (int i = 0; i < Sq; i++)
                for (int j = 0; j < n; j++) {
                    const int want = att[b][(size_t)i * n + j], have = got[b * H + h][(size_t)i * n + j];
                    st.pairs += want;
                    if (want != have) {
                        fail(k, "pair computed other than once if attended (b h, i, j)", b * H + h, i, j);
                        i = Sq;
                        break;
                    }
                }
        }
    /* (4) the parts' sums: bwd_v4_dkv_parts, one block per boundary */
    std::map<int, int> summed;
    for (int bnd = 1; bnd < ctas; bnd++) {
        const int64_t ub = ustart(bnd);
        if (ub >= units) continue; /* the CTAs from here on run nothing */
        const int item = v4t_unit_item(t, ub);
        int f, l;
        const int64_t iu = v4t_item(t, item, &f, &l);
        if (ub == iu || ustart(bnd - 1) > iu) continue;
        const int64_t len = l - f + 1;
        for (int g = ucta(iu); g <= ucta(iu + len - 1); g++) {
            if (mutation != 6 && ustart(g) == ustart(g + 1)) continue; /* an empty CTA wrote no part */
            const int64_t sl = 2 * (int64_t)g + (iu > ustart(g) ? 1 : 0);
            auto it = slot_item.find(sl);
            if (it == slot_item.end() || it->second != item)
                fail(k, "a cut item reads a slot it did not write", item, sl, g);
        }
        summed[item]++;
    }
    for (int it : cutset)
        if (summed[it] != 1) fail(k, "a cut item summed other than once (item, times)", it, summed[it], 0);
    for (auto &s : summed)
        if (!cutset.count(s.first)) fail(k, "a whole item summed as cut", s.first, 0, 0);
    st.cut_items += (long)cutset.size();
    for (int it : whole)
        if (cutset.count(it)) fail(k, "an item both whole and cut", it, 0, 0);
    if ((int64_t)(whole.size() + cutset.size()) != (int64_t)B * H * N)
        fail(k, "an item never run", whole.size(), cutset.size(), 0);
    /* (6) the reduction: per head and m-block, the copies it sums are those holding the m-block */
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H;
        int64_t per;
        const int64_t base = v4t_head_base(t, bh, &per);
        for (int m = 0; m < tq; m++) {
            int na, nb;
            v4t_mblock_blocks(t, b, m, &na, &nb);
            if (mutation == 7) na = 0;
            std::set<int> sum;
            for (int g = ucta(base); g <= ucta(base + per - 1) && na <= nb; g++) {
                const int64_t s = std::max(ustart(g), base), e = std::min(ustart(g + 1), base + per);
                if (v4t_copy_holds(t, b, base, m, na, nb, s, e)) sum.insert(g);
            }
            std::set<int> want;
            for (int g = 0; g < ctas; g++)
                if (copies.count({(int64_t)g + bh, m}) && slot_owner[(int64_t)g + bh] == std::make_pair(g, bh))
                    want.insert(g);
            if (sum != want)
                fail(k, "the reduction's copies differ (bh, m, copies held)", bh, m, (long long)want.size());
        }
    }
    st.draws++;
}

int main(int argc, char **argv) {
    long draws = 2000;
    uint64_t seed = 1;
    int mutate = 0, pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mutate"))
            mutate = 1;
        else if (pos++ == 0)
            draws = atol(argv[i]);
        else
            seed = strtoull(argv[i], NULL, 10);
    }
    bool ok = true;
    for (int mut = 0; mut <= (mutate ? 7 : 0); mut++) {
        mutation = mut;
        rng_state = seed;
        failures = 0;
        Stats st;
        memset(&st, 0, sizeof st);
        long failed_draws = 0;
        for (long d = 0; d < draws; d++) {
            Case k;
            make_case(k);
            failures_draw = 0;
            run_case(k, st);
            failed_draws += failures_draw > 0;
        }
        if (mut == 0) {
            printf("%ld draws: %ld attended (head, query, key) pairs, %ld units (%.3f of the unmasked calls'), %ld "
                   "empty CTAs, %ld cut items, %ld of %ld warpgroup tiles tested per element\n",
                   st.draws, st.pairs, st.units, (double)st.units / (double)st.unmasked_units, st.empty_ctas,
                   st.cut_items, st.partial_tiles, st.tiles);
            printf("failing draws: %ld\n", failed_draws);
            ok = failed_draws == 0;
        } else {
            printf("mutation %d: %ld of %ld draws fail (%s)\n", mut, failed_draws, draws,
                   failed_draws ? "caught" : "NOT CAUGHT");
            ok &= failed_draws > 0;
        }
    }
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
