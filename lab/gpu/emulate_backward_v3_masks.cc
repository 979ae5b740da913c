/* emulate_backward_v3_masks: the backward v3's walk of a mask (src/cuda/backward_v3_mask.cuh and the masked
 * instances of backward_v3_mma_f16x2.cu) replayed on the CPU and checked against src/mask.c, on random masks.
 *
 * The question: does every (query row, key) pair that jattn.h attends reach the kernels with its P and dS, and
 * does no other pair, for every mask part alone and combined (segments, causal in both alignments, blocks, key
 * padding, a key bias with -inf entries, grouped-query heads), every CTA shape the launcher may pick (1 to 8
 * warps, whole or half warps per 16 rows) and column tile (16, 32, 64)? And how much of the unmasked work do
 * the walks do?
 *
 * What runs is the code of the kernels where it is a function: the pre-pass's row windows (v3_row_window over
 * key_window.cuh's kw_window) and summaries (v3_sum_row, v3_sum_merge: the pre-pass reduces them with
 * shuffles, a tree of the same merges), the dQ CTA's key tiles (v3_dq_columns), the dK/dV CTA's query tiles
 * (v3_kv_rows), each warp's view of a tile (v3_classify) and the per-element test (v3_in); the loops around
 * them are the kernels' own loops written again here (the CTA, its warps' rows, the group's heads, the tiles,
 * the elements and their tests as bwd_v3_kernel<..., true> has them). The truth is src/mask.c
 * (jattn_call_key_window) with the key padding and a -inf bias (jattn_call_attends, as src/reference.c).
 *
 * Checked per case: (1) the windows the pre-pass stores are src/mask.c's (rows past the last segment and
 * past seq_q: (Skv, Skv)), non-decreasing in lo and hi, and the keys its k and v records keep
 * (v3_key_reached) are those some query row of the group attends; (2) dQ: every attended pair (i, j) lies in a tile its
 * CTA walks and its warp does not skip, and gets P (the element's test) exactly when attended, in every
 * tile the walk visits; (3) dK/dV: the same for every key tile of every key/value head over its group's
 * query heads; (4) the work: tiles loaded (CTA) and warp-tiles computed, against the unmasked walk.
 *
 * build and run (from the repository root; g++ and gcc, no GPU):
 *   gcc -O2 -c -Iinclude -Isrc src/mask.c -o /tmp/mask.o
 *   g++ -O2 -std=c++17 -Iinclude -Isrc lab/gpu/emulate_backward_v3_masks.cc /tmp/mask.o -o /tmp/emulate_v3_masks
 *   /tmp/emulate_v3_masks [draws [seed]]       (default 2000 draws, seed 1)
 * prints one line per failing case (the first 20) and a summary; exit 1 on any failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <vector>

#define __host__
#define __device__
#define __forceinline__ inline
struct int2 {
    int x, y;
};
struct int4 {
    int x, y, z, w;
};
#define V3M_HOST_TYPES
static int min(int a, int b) { return a < b ? a : b; }
#include "cuda/backward_v3_mask.cuh" /* key_window.cuh with it */

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

/* ---- a case ---- */
/* The problem's sizes (what src/mask.c reads of it). */
static jattn_problem problem(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Skv) {
    jattn_problem p;
    memset(&p, 0, sizeof p);
    p.batch = B, p.heads = H, p.kv_heads = Hkv, p.seq_q = Sq, p.seq_kv = Skv, p.head_dim = 64;
    return p;
}

struct Case {
    int64_t B, H, Hkv, Sq, Skv;
    jattn_causal causal;
    int blocks, segments, seg_batched, bias, pad; /* pad: 0 none, 1 kv_len, 2 key mask */
    std::vector<int64_t> block_q, block_kv, seg_q, seg_kv, kv_len;
    std::vector<uint8_t> key_mask;
    std::vector<float> key_bias; /* [B][H][Skv] */
    jattn_problem p;
    jattn_call c;
    jattn_cuda_args a;
    /* the key padding as the pre-pass resolves it: per batch the attended keys ascending */
    std::vector<std::vector<int>> kv_index;
    bool has_index;
};

static void make_case(Case &k, bool big) {
    k.B = 1 + below(3);
    k.Hkv = 1 + below(3);
    k.H = k.Hkv * (1 + below(4));
    const int64_t max_s = big ? 700 : 150;
    k.Sq = 1 + below(max_s);
    k.Skv = uniform() < 0.4 ? k.Sq : 1 + below(max_s);
    k.causal = (jattn_causal)below(3);
    k.blocks = uniform() < 0.3 ? 1 + (int)below(6) : 0;
    k.segments = uniform() < 0.35 ? 1 + (int)below(6) : 0;
    k.seg_batched = k.segments && uniform() < 0.5;
    k.bias = uniform() < 0.3 ? 1 + (int)below(3) : 0; /* 1 per batch, 2 per head, 3 one for all */
    k.pad = (int)below(3);
    if (uniform() < 0.1) k.causal = JATTN_CAUSAL_NONE, k.blocks = k.segments = 0; /* padding / bias / GQA only */
    k.p = problem(k.B, k.H, k.Hkv, k.Sq, k.Skv);
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
            const int64_t eq = uniform() < 0.3 ? k.Sq - below(k.Sq / 3 + 1) : k.Sq;
            const int64_t ek = uniform() < 0.3 ? k.Skv - below(k.Skv / 3 + 1) : k.Skv;
            std::vector<int64_t> q, kv;
            cut(q, k.segments, eq);
            if (k.Sq == k.Skv && eq == ek && uniform() < 0.5)
                kv = q;
            else
                cut(kv, k.segments, ek);
            std::copy(q.begin(), q.end(), k.seg_q.begin() + (size_t)r * (k.segments + 1));
            std::copy(kv.begin(), kv.end(), k.seg_kv.begin() + (size_t)r * (k.segments + 1));
        }
        k.c.cu_seqlens_q = k.seg_q.data(), k.c.cu_seqlens_kv = k.seg_kv.data();
        k.c.num_segments = k.segments, k.c.segments_stride = k.seg_batched ? k.segments + 1 : 0;
    }
    if (k.bias) {
        k.key_bias.assign((size_t)(k.B * k.H * k.Skv), 0.f);
        for (float &x : k.key_bias) {
            const double u = uniform();
            x = u < 0.1 ? -INFINITY : u < 0.2 ? -10000.f : (float)(uniform() - 0.5);
        }
        k.c.key_bias = k.key_bias.data();
        k.c.bias_batch_stride = k.bias == 3 ? 0 : k.H * k.Skv;
        k.c.bias_head_stride = k.bias == 2 ? k.Skv : 0;
    }
    if (k.pad == 1) {
        k.kv_len.resize(k.B);
        for (auto &l : k.kv_len) l = uniform() < 0.2 ? k.Skv : below(k.Skv + 1);
        k.c.kv_len = k.kv_len.data();
    } else if (k.pad == 2) {
        k.key_mask.resize((size_t)(k.B * k.Skv));
        for (auto &m : k.key_mask) m = uniform() < 0.7;
        k.c.mask = k.key_mask.data(), k.c.mask_stride = k.Skv;
    }
    /* the kernel's view: jattn_cuda_args (cuda_backend.c's launch_args) */
    memset(&k.a, 0, sizeof k.a);
    k.a.batch = k.B, k.a.heads = k.H, k.a.seq_q = k.Sq, k.a.seq_kv = k.Skv, k.a.head_dim = 64;
    k.a.kv_heads = k.Hkv;
    k.a.causal = (int)k.causal;
    k.a.block_q = k.c.block_q, k.a.block_kv = k.c.block_kv, k.a.num_blocks = k.c.num_blocks;
    k.a.cu_seqlens_q = k.c.cu_seqlens_q, k.a.cu_seqlens_kv = k.c.cu_seqlens_kv;
    k.a.num_segments = k.c.num_segments, k.a.segments_stride = k.c.segments_stride;
    k.a.key_bias = k.c.key_bias;
    k.a.bias_batch_stride = k.c.bias_batch_stride, k.a.bias_head_stride = k.c.bias_head_stride;
    /* key_padding.cu: kv_count, kv_index (with a key mask only) */
    k.has_index = k.pad == 2;
    k.kv_index.assign(k.B, {});
    for (int64_t b = 0; b < k.B; b++)
        for (int64_t j = 0; j < k.Skv; j++)
            if (jattn_call_attends(&k.c, b, j)) k.kv_index[b].push_back((int)j);
}

/* The truth: query row i of (b, h) attends key j (src/mask.c, the padding, a -inf bias). */
static bool attends(const Case &k, int64_t b, int64_t h, int64_t i, int64_t j) {
    int64_t lo, hi;
    jattn_call_key_window(&k.c, b, i, &lo, &hi);
    if (j < lo || j >= hi || !jattn_call_attends(&k.c, b, j)) return false;
    const float *bias = jattn_call_bias_row(&k.c, b, h);
    return !(bias && bias[j] == -INFINITY);
}

static float bias_of(const Case &k, int64_t b, int64_t h, int64_t j) {
    const float *bias = jattn_call_bias_row(&k.c, b, h);
    return bias ? bias[j] : 0.f;
}

static int failures;
static long checked_pairs;
static void fail(const Case &k, const char *what, long long x, long long y, long long z) {
    if (failures++ < 20)
        printf("FAIL B=%lld H=%lld Hkv=%lld Sq=%lld Skv=%lld causal=%d blocks=%d segments=%d%s bias=%d pad=%d: %s "
               "(%lld, %lld, %lld)\n",
               (long long)k.B, (long long)k.H, (long long)k.Hkv, (long long)k.Sq, (long long)k.Skv, (int)k.causal,
               k.blocks, k.segments, k.seg_batched ? "/batch" : "", k.bias, k.pad, what, x, y, z);
}

/* ---- the pre-pass: windows and summaries (bwd_v3_split<true>) ---- */
struct Prepass {
    int tq;
    std::vector<std::vector<int2>> win; /* [B][tq * 64] */
    std::vector<std::vector<int4>> sum; /* [B][tq * 4] */
};

static void prepass(const Case &k, Prepass &pp) {
    pp.tq = (int)((k.Sq + 63) / 64);
    pp.win.assign(k.B, std::vector<int2>((size_t)pp.tq * 64));
    pp.sum.assign(k.B, std::vector<int4>((size_t)pp.tq * 4));
    for (int64_t b = 0; b < k.B; b++) {
        for (int i = 0; i < pp.tq * 64; i++) pp.win[b][i] = v3_row_window(k.a, b, i);
        for (int gi = 0; gi < pp.tq * 4; gi++) {
            int4 s = v3_sum_empty();
            for (int r = 0; r < 16; r++) s = v3_sum_merge(s, v3_sum_row(pp.win[b][gi * 16 + r], gi * 16 + r < k.Sq));
            pp.sum[b][gi] = s;
        }
        /* (1b) the keys the k and v records keep (v3_key_reached): those some row of some head of the group
         * attends */
        for (int64_t hk = 0; hk < k.Hkv; hk++)
            for (int j : k.kv_index[b]) {
                bool any = false;
                for (int64_t h = hk * (k.H / k.Hkv); h < (hk + 1) * (k.H / k.Hkv) && !any; h++)
                    for (int64_t i = 0; i < k.Sq && !any; i++) any = attends(k, b, h, i, j);
                if (v3_key_reached(k.a, b, hk, j) != any) fail(k, "key reached wrongly (b, key, truth)", b, j, any);
            }
        /* (1) the stored windows against src/mask.c, and their order */
        int2 prev = v3_int2(INT_MIN, INT_MIN);
        for (int i = 0; i < pp.tq * 64; i++) {
            const int2 w = pp.win[b][i];
            int64_t lo = k.Skv, hi = k.Skv;
            bool in_seg = i < k.Sq;
            if (in_seg && k.segments) in_seg = i < k.seg_q[(size_t)b * k.c.segments_stride + k.segments];
            if (in_seg) jattn_call_key_window(&k.c, b, i, &lo, &hi);
            if (w.x != lo || w.y != hi) fail(k, "window differs from src/mask.c (b, i, lo)", b, i, w.x);
            if (w.x < prev.x || w.y < prev.y) fail(k, "windows decrease at (b, i, lo)", b, i, w.x);
            prev = w;
        }
    }
}

/* ---- the walks ---- */
struct Work {
    double loaded, computed, unmasked; /* element slots: tiles loaded by CTAs, computed by warps, unmasked walk */
};

/* The dQ kernel's walk (bwd_v3_kernel<DP, BR, kRoleQ, true>): CTAs of `rows` query rows, warps of 16. */
static void walk_dq(const Case &k, const Prepass &pp, int rows, int BR, Work &w) {
    const bool window = kw_has_window(k.a);
    for (int64_t b = 0; b < k.B; b++) {
        const int n_kv = (int)k.kv_index[b].size(); /* attended keys (padding) */
        const int *kv_rows = k.has_index ? k.kv_index[b].data() : nullptr;
        const int n_cols = n_kv, n_tiles = (n_cols + BR - 1) / BR;
        for (int64_t h = 0; h < k.H; h++) {
            std::vector<char> seen((size_t)(k.Sq * (n_kv + 1)), 0);
            for (int r0 = 0; r0 < k.Sq; r0 += rows) {
                int t_lo = 0, nt = n_tiles;
                if (window) {
                    int c_lo, c_hi;
                    v3_dq_columns(pp.sum[b].data(), pp.tq * 4, r0, rows, kv_rows, n_kv, &c_lo, &c_hi);
                    t_lo = c_lo / BR;
                    nt = c_lo < c_hi ? (c_hi + BR - 1) / BR - t_lo : 0;
                }
                w.loaded += (double)nt * BR * rows;
                w.unmasked += (double)n_tiles * BR * rows;
                for (int pair = 0; pair < rows / 16; pair++) {
                    const int gw = (r0 + 16 * pair) / 16;
                    const int4 sum_w = window && gw < pp.tq * 4 ? pp.sum[b][gw] : v3_sum_empty();
                    for (int t = t_lo; t < t_lo + nt; t++) {
                        int cls = kV3Full;
                        if (window) {
                            const int last = min(BR, n_cols - t * BR) - 1;
                            cls = v3_classify(sum_w, v3_key_pos(kv_rows, t * BR), v3_key_pos(kv_rows, t * BR + last));
                            if (cls == kV3Skip) continue;
                        }
                        w.computed += 16.0 * BR;
                        for (int rr = 0; rr < 16; rr++) {
                            const int i = r0 + 16 * pair + rr;
                            if (i >= k.Sq) continue; /* lse +inf: P = 0, and not stored */
                            const int2 wr = i < pp.tq * 64 ? pp.win[b][i] : v3_int2(0, 0);
                            for (int cc = 0; cc < BR; cc++) {
                                const int c = t * BR + cc;
                                if (c >= n_cols) continue; /* the last tile's columns past the keys: P = 0 */
                                const int j = v3_key_pos(kv_rows, c);
                                const float bias = bias_of(k, b, h, j);
                                bool ok = bias != -INFINITY;
                                if (cls == kV3Partial) ok = ok && v3_in(wr, j);
                                const bool truth = attends(k, b, h, i, j);
                                checked_pairs++;
                                if (ok != truth) fail(k, "dQ: P of (i, j) taken wrongly (i, j, truth)", i, j, truth);
                                if (ok) seen[(size_t)i * (n_kv + 1) + c]++;
                            }
                        }
                    }
                }
            }
            for (int64_t i = 0; i < k.Sq; i++)
                for (int c = 0; c < n_kv; c++) {
                    const int64_t j = k.kv_index[b][c];
                    const int n = seen[(size_t)i * (n_kv + 1) + c];
                    if (attends(k, b, h, i, j) != (n == 1))
                        fail(k, "dQ: attended pair visited n times (i, j, n)", i, j, n);
                }
        }
    }
}

/* The dK/dV kernel's walk (bwd_v3_kernel<DP, BR, kRoleKV, true>): CTAs of `rows` attended keys of a key/value
 * head, warps of 16, each key tile over the query tiles of every query head of the group. */
static void walk_dkv(const Case &k, const Prepass &pp, int rows, int BR, Work &w) {
    const bool window = kw_has_window(k.a);
    const int group = (int)(k.H / k.Hkv);
    for (int64_t b = 0; b < k.B; b++) {
        const int n_kv = (int)k.kv_index[b].size();
        const int *kv_rows = k.has_index ? k.kv_index[b].data() : nullptr;
        const int n_cols = (int)k.Sq, n_tiles = (n_cols + BR - 1) / BR;
        for (int64_t hk = 0; hk < k.Hkv; hk++) {
            std::vector<char> seen((size_t)(group * k.Sq * (n_kv + 1)), 0);
            for (int r0 = 0; r0 < n_kv; r0 += rows) {
                int t_lo = 0, nt = n_tiles;
                if (window) {
                    int i_lo, i_hi;
                    v3_kv_rows(pp.win[b].data(), (int)k.Sq, v3_key_pos(kv_rows, r0),
                               v3_key_pos(kv_rows, min(r0 + rows, n_kv) - 1), &i_lo, &i_hi);
                    t_lo = i_lo / BR;
                    nt = i_lo < i_hi ? (i_hi + BR - 1) / BR - t_lo : 0;
                }
                w.loaded += (double)group * nt * BR * rows;
                w.unmasked += (double)group * n_tiles * BR * rows;
                for (int pair = 0; pair < rows / 16; pair++) {
                    const int first = r0 + 16 * pair;
                    int jmin_w = INT_MAX, jmax_w = INT_MIN;
                    if (first < n_kv)
                        jmin_w = v3_key_pos(kv_rows, first), jmax_w = v3_key_pos(kv_rows, min(first + 16, n_kv) - 1);
                    for (int it = 0; it < group * nt; it++) {
                        const int gi = it / nt, t = t_lo + it % nt;
                        const int64_t h = hk * group + gi;
                        int cls = kV3Full;
                        if (window) {
                            int4 s = pp.sum[b][t * BR / 16];
                            for (int x = 1; x < BR / 16; x++) s = v3_sum_merge(s, pp.sum[b][t * BR / 16 + x]);
                            cls = v3_classify(s, jmin_w, jmax_w);
                            if (cls == kV3Skip) continue;
                        }
                        w.computed += 16.0 * BR;
                        for (int rr = 0; rr < 16; rr++) {
                            const int row = first + rr; /* an attended key */
                            if (row >= n_kv) continue;  /* not stored */
                            const int j = v3_key_pos(kv_rows, row);
                            const float bias = bias_of(k, b, h, j);
                            for (int cc = 0; cc < BR; cc++) {
                                const int i = t * BR + cc;
                                if (i >= k.Sq) continue; /* lse +inf, dout 0: P = dS = 0 */
                                bool ok = bias != -INFINITY;
                                if (cls == kV3Partial) ok = ok && v3_in(pp.win[b][i], j);
                                const bool truth = attends(k, b, h, i, j);
                                checked_pairs++;
                                if (ok != truth) fail(k, "dK/dV: P of (j, i, truth) taken wrongly", j, i, truth);
                                if (ok) seen[((size_t)gi * k.Sq + i) * (n_kv + 1) + row]++;
                            }
                        }
                    }
                }
            }
            for (int gi = 0; gi < group; gi++)
                for (int64_t i = 0; i < k.Sq; i++)
                    for (int c = 0; c < n_kv; c++) {
                        const int n = seen[((size_t)gi * k.Sq + i) * (n_kv + 1) + c];
                        const int64_t h = hk * group + gi, j = k.kv_index[b][c];
                        if (attends(k, b, h, i, j) != (n == 1))
                            fail(k, "dK/dV: attended pair visited n times (j, i, n)", j, i, n);
                    }
        }
    }
}

/* The share of the unmasked work a causal call at Sq = Skv = S does, H = 1, for each CTA shape and tile. */
static void causal_share(int64_t S) {
    printf("causal (top-left), Sq = Skv = %lld: tiles loaded / computed by warps, against the unmasked walk\n",
           (long long)S);
    for (int BR : {64, 32, 16})
        for (int rows : {128, 64, 32}) {
            Case k;
            k.B = 1, k.H = k.Hkv = 1, k.Sq = k.Skv = S;
            k.causal = JATTN_CAUSAL_TOP_LEFT;
            k.blocks = k.segments = k.seg_batched = k.bias = k.pad = 0;
            k.p = problem(1, 1, 1, S, S);
            memset(&k.c, 0, sizeof k.c);
            k.c.problem = &k.p;
            k.c.causal = k.causal;
            memset(&k.a, 0, sizeof k.a);
            k.a.batch = 1, k.a.heads = k.a.kv_heads = 1, k.a.seq_q = k.a.seq_kv = S, k.a.head_dim = 64;
            k.a.causal = (int)k.causal;
            k.has_index = false;
            k.kv_index.assign(1, {});
            for (int64_t j = 0; j < S; j++) k.kv_index[0].push_back((int)j);
            Prepass pp;
            prepass(k, pp);
            Work q = {0, 0, 0}, kv = {0, 0, 0};
            walk_dq(k, pp, rows, BR, q);
            walk_dkv(k, pp, rows, BR, kv);
            printf("  BR %2d, CTA rows %3d: dQ %.3f / %.3f, dK/dV %.3f / %.3f\n", BR, rows, q.loaded / q.unmasked,
                   q.computed / q.unmasked, kv.loaded / kv.unmasked, kv.computed / kv.unmasked);
        }
}

int main(int argc, char **argv) {
    const int draws = argc > 1 ? atoi(argv[1]) : 2000;
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    static const int kTiles[3] = {16, 32, 64}, kRows[6] = {16, 32, 64, 128, 32, 64}; /* rows: 16 W / H */
    Work total = {0, 0, 0};
    for (int d = 0; d < draws; d++) {
        Case k;
        make_case(k, d % 10 == 0);
        Prepass pp;
        prepass(k, pp);
        const int BR = kTiles[below(3)], rows = kRows[below(6)];
        Work w = {0, 0, 0};
        walk_dq(k, pp, rows, BR, w);
        walk_dkv(k, pp, rows, BR, w);
        total.loaded += w.loaded, total.computed += w.computed, total.unmasked += w.unmasked;
    }
    printf("emulate_backward_v3_masks: %d draws, %ld (pair, tile) decisions checked against src/mask.c; %d "
           "failures\n",
           draws, checked_pairs, failures);
    printf("work over the draws: tiles loaded %.3f, computed %.3f of the unmasked walk\n",
           total.loaded / total.unmasked, total.computed / total.unmasked);
    causal_share(1536);
    causal_share(4608);
    return failures ? 1 : 0;
}
