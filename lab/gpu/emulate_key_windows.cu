/* emulate_key_windows: the cuda forward's walk of a masked call's keys (src/cuda/key_window.cuh, the
 * kernels v1, v6, v7), run on the CPU and checked against the host's definition of the mask
 * (src/mask.c, jattn_call_key_window, and the key padding rule) on random masks.
 *
 * What a kernel does (src/cuda/NOTES.md, "Masks"): the key padding's pre-pass packs each batch's
 * attended keys in order (rows[j], or j itself with lengths only); a CTA walks the key tiles of
 * kw_tile_keys (its rows' windows, converted to attended keys by a binary search of the row list:
 * kw_compact); each warp (v7) or warpgroup (v6) skips the tiles none of its rows attends
 * (kw_tile_skipped), takes those inside every row's window whole (kw_tile_full) and tests each element
 * of the others against its row's window in attended keys (kw_row_keys, what kw_quad_rows shares over a
 * quad); v1's lanes test their key in original positions (kw_window). The header's functions are
 * compiled here for the host (KW_LDG reads host memory) and called as the kernels call them.
 *
 * For every row i and attended key j of every draw: the walk reaches (i, j) exactly when the host's
 * rule attends it (window, key padding), for each geometry: v7 with CTAs of 1, 2, 4, 6, 8 warps and key
 * tiles of 64 and 32, v6 (128-row CTAs, two warpgroups, 64-key tiles), v1 (8-row blocks, 32-key steps);
 * and a row attends no key exactly when its window in attended keys is empty (out 0, lse -inf). Also the
 * grouped heads' record index (b Hkv + h / group) against the host's jattn_kv_head. With --mutate, a
 * broken walk (each of a few mutations) must fail: the check has teeth.
 *
 * Build and run (no GPU needed):
 *   cc -std=c11 -O1 -Iinclude -Isrc -c src/mask.c -o /tmp/mask.o &&
 *   nvcc -std=c++17 -O1 -arch=sm_80 -Iinclude -Isrc lab/gpu/emulate_key_windows.cu /tmp/mask.o -o /tmp/ekw &&
 *   /tmp/ekw [draws] [--mutate]
 * Prints one line per geometry (draws, rows, pairs checked, mismatches) and PASS or FAIL. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
}
#include "cuda/key_window.cuh"

/* mask.c's only dependency beyond the window. */
extern "C" jattn_status jattn_fail(jattn_status status, const char *fmt, ...) {
    (void)fmt;
    return status;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t uni(int64_t n) { return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0; }

enum { MAXB = 3, MAXP = 6 };

/* n + 1 sorted offsets from 0 to last */
static void offsets(int64_t *o, int n, int64_t last) {
    o[0] = 0;
    o[n] = last;
    for (int i = 1; i < n; i++) o[i] = uni(last + 1);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 1 && o[j] < o[j - 1]; j--) {
            const int64_t t = o[j];
            o[j] = o[j - 1];
            o[j - 1] = t;
        }
}

typedef struct draw {
    jattn_problem p;
    jattn_call c;
    jattn_cuda_args a;
    int64_t block_q[MAXP + 1], block_kv[MAXP + 1], seg_q[MAXB][MAXP + 1], seg_kv[MAXB][MAXP + 1], kv_len[MAXB];
    uint8_t *mask;
    int *rows[MAXB]; /* the pre-pass's row lists (NULL: lengths only, or no padding) */
    int n[MAXB];     /* attended keys per batch */
} draw;

static void draw_make(draw *d) {
    memset(d, 0, sizeof *d);
    const int64_t B = 1 + uni(MAXB), Sq = 1 + uni(uni(4) ? 300 : 20), Skv = uni(3) ? Sq : 1 + uni(300);
    d->p.batch = B, d->p.heads = 1 + uni(4), d->p.seq_q = Sq, d->p.seq_kv = Skv, d->p.head_dim = 8;
    d->c.problem = &d->p;
    d->c.causal = (jattn_causal)uni(3);
    if (uni(3) == 0) {
        d->c.num_blocks = 1 + uni(MAXP);
        offsets(d->block_q, (int)d->c.num_blocks, Sq);
        if (Sq == Skv && uni(2))
            memcpy(d->block_kv, d->block_q, sizeof d->block_kv);
        else
            offsets(d->block_kv, (int)d->c.num_blocks, Skv);
        d->c.block_q = d->block_q;
        d->c.block_kv = d->block_kv;
    }
    if (uni(3) == 0) {
        d->c.num_segments = 1 + uni(MAXP);
        const int batched = (int)uni(2);
        for (int b = 0; b < (batched ? B : 1); b++) {
            const int64_t eq = uni(3) ? Sq : Sq - uni(Sq / 4 + 1), ek = uni(3) ? Skv : Skv - uni(Skv / 4 + 1);
            offsets(d->seg_q[b], (int)d->c.num_segments, eq);
            if (Sq == Skv && eq == ek && uni(2))
                memcpy(d->seg_kv[b], d->seg_q[b], sizeof d->seg_kv[b]);
            else
                offsets(d->seg_kv[b], (int)d->c.num_segments, ek);
        }
        d->c.cu_seqlens_q = d->seg_q[0];
        d->c.cu_seqlens_kv = d->seg_kv[0];
        d->c.segments_stride = batched ? MAXP + 1 : 0;
    }
    const int pad = (int)uni(3); /* none, lengths, a key mask (with lengths sometimes) */
    if (pad >= 1 && uni(2)) {
        for (int64_t b = 0; b < B; b++) d->kv_len[b] = uni(3) ? uni(Skv + 1) : Skv;
        d->c.kv_len = d->kv_len;
    }
    if (pad == 2) {
        d->mask = (uint8_t *)malloc((size_t)(B * Skv));
        for (int64_t x = 0; x < B * Skv; x++) d->mask[x] = uni(10) < 7;
        d->c.mask = d->mask;
        d->c.mask_stride = Skv;
    }
    /* the pre-pass (key_padding.cu): counts, and row lists with a mask */
    for (int64_t b = 0; b < B; b++) {
        const int64_t end = d->c.kv_len ? d->kv_len[b] : Skv;
        if (!d->mask) {
            d->n[b] = (int)end;
            continue;
        }
        d->rows[b] = (int *)malloc((size_t)Skv * sizeof(int));
        for (int64_t j = 0; j < end; j++)
            if (d->mask[b * Skv + j]) d->rows[b][d->n[b]++] = (int)j;
    }
    /* the launch arguments the backend gives (cuda_backend.c, launch_args), host pointers here */
    d->a.batch = B, d->a.heads = d->p.heads, d->a.seq_q = Sq, d->a.seq_kv = Skv, d->a.head_dim = 8;
    d->a.causal = (int)d->c.causal;
    d->a.block_q = d->c.block_q, d->a.block_kv = d->c.block_kv, d->a.num_blocks = d->c.num_blocks;
    d->a.cu_seqlens_q = d->c.cu_seqlens_q, d->a.cu_seqlens_kv = d->c.cu_seqlens_kv;
    d->a.num_segments = d->c.num_segments, d->a.segments_stride = d->c.segments_stride;
}

static void draw_free(draw *d) {
    free(d->mask);
    for (int b = 0; b < MAXB; b++) free(d->rows[b]);
}

/* the host's rule: row i of batch b attends original key x */
static int host_attends(const draw *d, int64_t b, int64_t i, int64_t x) {
    int64_t lo, hi;
    jattn_call_key_window(&d->c, b, i, &lo, &hi);
    return x >= lo && x < hi && jattn_call_attends(&d->c, b, x);
}

static int mutation; /* 0: none; else the walk is broken on purpose */

static int orig(const draw *d, int64_t b, int j) { return d->rows[b] ? d->rows[b][j] : j; }

/* One geometry's walk of one batch: `group_rows` rows share their key tiles' classification (a v7 warp:
 * 16; a v6 warpgroup: 64), CTAs of cta_rows, key tiles of bc; got[i * n + j]: the walk computes (i, j). */
static void walk_tiles(const draw *d, int64_t b, int cta_rows, int group_rows, int bc, uint8_t *got) {
    const KwMask m = kw_mask_of(d->a);
    const int n = d->n[b], *rows = d->rows[b];
    const int64_t Sq = d->p.seq_q;
    for (int64_t q0 = 0; q0 < Sq; q0 += cta_rows) {
        int lo, hi;
        kw_tile_keys(m, b, q0, q0 + cta_rows, rows, n, &lo, &hi);
        int t_begin = lo / bc, t_end = lo < hi ? (hi + bc - 1) / bc : t_begin;
        if (mutation == 1 && t_end > t_begin) t_end--; /* the last tile of the range dropped */
        for (int64_t g0 = q0; g0 < q0 + cta_rows; g0 += group_rows) {
            KwGroupKeys grp = kw_group_empty();
            int wlo[256], whi[256];
            for (int r = 0; r < group_rows; r++) {
                kw_row_keys(m, b, g0 + r, rows, n, &wlo[r], &whi[r]);
                if (mutation == 2 && whi[r] > wlo[r]) whi[r]--; /* a window one key short */
                kw_group_add(grp, wlo[r], whi[r], g0 + r < Sq);
            }
            if (mutation == 3) grp.ilo = grp.ulo; /* the intersection taken as the union's start */
            for (int t = t_begin; t < t_end; t++) {
                const int k0 = t * bc, k1 = k0 + bc < n ? k0 + bc : n;
                if (kw_tile_skipped(grp, k0, k1)) continue;
                const bool full = kw_tile_full(grp, k0, k1);
                for (int r = 0; r < group_rows && g0 + r < Sq; r++)
                    for (int j = k0; j < k1; j++)
                        if (full || (j >= wlo[r] && j < whi[r])) got[(g0 + r) * n + j] = 1;
            }
        }
    }
}

/* v1: blocks of 8 rows walk kw_tile_keys in steps of 32; a lane tests its key in original positions. */
static void walk_v1(const draw *d, int64_t b, uint8_t *got) {
    const KwMask m = kw_mask_of(d->a);
    const int n = d->n[b], *rows = d->rows[b];
    for (int64_t q0 = 0; q0 < d->p.seq_q; q0 += 8) {
        int lo, hi;
        kw_tile_keys(m, b, q0, q0 + 8, rows, n, &lo, &hi);
        for (int64_t i = q0; i < q0 + 8 && i < d->p.seq_q; i++) {
            int64_t wl, wh;
            kw_window(m, b, i, &wl, &wh);
            for (int kv0 = lo; kv0 < hi; kv0 += 32)
                for (int j = kv0; j < kv0 + 32 && j < hi; j++) {
                    const int64_t x = orig(d, b, j);
                    if (x >= wl && x < wh) got[i * n + j] = 1;
                }
        }
    }
}

typedef struct tally {
    const char *name;
    long draws, rows, pairs, bad, empty_bad;
} tally;

static void check(const draw *d, int geometry, tally *t) {
    static const int kWarps[5] = {1, 2, 4, 6, 8};
    for (int64_t b = 0; b < d->p.batch; b++) {
        const int n = d->n[b];
        const int64_t Sq = d->p.seq_q;
        uint8_t *got = (uint8_t *)calloc((size_t)(Sq * (n ? n : 1)), 1);
        if (geometry < 10)
            walk_tiles(d, b, 16 * kWarps[geometry % 5], 16, geometry < 5 ? 64 : 32, got);
        else if (geometry == 10)
            walk_tiles(d, b, 128, 64, 64, got);
        else
            walk_v1(d, b, got);
        for (int64_t i = 0; i < Sq; i++) {
            int any = 0;
            for (int j = 0; j < n; j++) {
                const int want = host_attends(d, b, i, orig(d, b, j));
                any |= want;
                t->pairs++;
                if (want != got[i * n + j] && t->bad++ < 3 && !mutation)
                    printf("  %s: b=%lld row %lld attended key %d (original %d): host %d, walk %d\n", t->name,
                           (long long)b, (long long)i, j, orig(d, b, j), want, got[i * n + j]);
            }
            int lo, hi; /* a row with no attended key: its window in attended keys is empty */
            kw_row_keys(kw_mask_of(d->a), b, i, d->rows[b], n, &lo, &hi);
            if ((lo < hi) != any) t->empty_bad++;
            t->rows++;
        }
        free(got);
    }
    t->draws++;
}

int main(int argc, char **argv) {
    long draws = argc > 1 && argv[1][0] != '-' ? atol(argv[1]) : 3000;
    int mutate = 0;
    for (int i = 1; i < argc; i++) mutate |= strcmp(argv[i], "--mutate") == 0;
    static const char *names[12] = {"v7 1 warp, 64-key tiles",
                                    "v7 2 warps, 64",
                                    "v7 4 warps, 64",
                                    "v7 6 warps, 64",
                                    "v7 8 warps, 64",
                                    "v7 1 warp, 32-key tiles",
                                    "v7 2 warps, 32",
                                    "v7 4 warps, 32",
                                    "v7 6 warps, 32",
                                    "v7 8 warps, 32",
                                    "v6 (128-row CTAs, warpgroups of 64)",
                                    "v1 (8-row blocks, 32-key steps)"};
    int ok = 1;
    for (int mut = 0; mut <= (mutate ? 3 : 0); mut++) {
        mutation = mut;
        rng_state = 0x9E3779B97F4A7C15ull;
        tally t[12];
        memset(t, 0, sizeof t);
        for (int g = 0; g < 12; g++) t[g].name = names[g];
        long gqa_bad = 0;
        for (long k = 0; k < draws; k++) {
            draw d;
            draw_make(&d);
            for (int g = 0; g < 12; g++)
                if (mut == 0 || g < 11) check(&d, g, &t[g]);
            /* grouped heads: the kernels' record index b Hkv + h / group (bh / group) is the host's head */
            jattn_problem p = d.p;
            p.kv_heads = 1 + uni(p.heads);
            while (p.heads % p.kv_heads) p.kv_heads--;
            for (int64_t bb = 0; bb < p.batch; bb++)
                for (int64_t h = 0; h < p.heads; h++) {
                    const int64_t bh = bb * p.heads + h, group = p.heads / p.kv_heads;
                    if (bh / group != bb * p.kv_heads + jattn_kv_head(&p, h)) gqa_bad++;
                }
            draw_free(&d);
        }
        long bad = gqa_bad;
        if (mut == 0) printf("grouped heads: record index mismatches %ld\n", gqa_bad);
        for (int g = 0; g < 12; g++) {
            if (mut && g == 11) continue;
            if (mut == 0)
                printf("%-38s %ld draws, %ld rows, %ld (row, key) pairs: %ld mismatches, %ld empty-row mismatches\n",
                       t[g].name, t[g].draws, t[g].rows, t[g].pairs, t[g].bad, t[g].empty_bad);
            bad += t[g].bad + t[g].empty_bad;
        }
        if (mut == 0) {
            ok = bad == 0;
        } else {
            printf("mutation %d: %ld mismatches (%s)\n", mut, bad, bad ? "caught" : "NOT CAUGHT");
            ok &= bad != 0;
        }
    }
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
