/* A query row of the v1 forward kernels (attention_v1_simt.cu, attention_v1_small_head_dim.cu): a block
 * owns `rows_per_block` consecutive query rows of one (batch, head), blocks ordered (b, h, row block);
 * this is what both kernels find first, before their own arithmetic. Device code, header-only. */
#ifndef JATTN_CUDA_V1_ROW_CUH
#define JATTN_CUDA_V1_ROW_CUH

#include <math.h>
#include <stdint.h>

#include "flash_params.cuh"
#include "key_padding.cuh"
#include "key_window.cuh"

struct V1Row {
    int b, h, bh;           /* the block's batch and head; bh = b * heads + h */
    int row;                /* the query row, within its head */
    bool row_valid;         /* row < seq_q (a block's last rows may lie past it) */
    const float *q, *k, *v; /* q's head, and k's and v's key/value head (grouped heads: h / group) */
    int n_kv;               /* key padding: the batch's attended keys (else seq_kv) */
    const int *rows;        /* key padding: their rows (else NULL: key j is row j) */
    int kv_lo, kv_hi;       /* the attended keys the block walks: every one, or under a mask its rows' windows */
    int64_t w_lo, w_hi;     /* the row's window of original keys (a row past seq_q: empty) */
    const float *bias_row;  /* under a mask with a key bias: the bias of (b, h)'s keys; else NULL */
};

/* The row `lane_row` (0 .. rows_per_block - 1) of this block. kMasked: a window or a key bias (mk: the
 * mask's windows, bias: the key bias [B, (H,) Skv] as jattn_cuda_args has it). */
template <bool kMasked>
__device__ __forceinline__ V1Row v1_row(const jattn_cuda_params &p, const KwMask &mk, const float *bias, int64_t bias_b,
                                        int64_t bias_h, int rows_per_block, int lane_row) {
    V1Row r;
    const int q_blocks = (p.seq_q + rows_per_block - 1) / rows_per_block;
    r.bh = blockIdx.x / q_blocks;
    const int qb = blockIdx.x % q_blocks;
    r.b = r.bh / p.heads;
    r.h = r.bh % p.heads;
    r.q = p.q + r.b * p.q_b + r.h * p.q_h;
    r.k = p.k + r.b * p.k_b + r.h / p.group * p.k_h;
    r.v = p.v + r.b * p.v_b + r.h / p.group * p.v_h;
    r.row = qb * rows_per_block + lane_row;
    r.row_valid = r.row < p.seq_q;
    r.n_kv = attended_keys(p.kv_count, r.b, p.seq_kv);
    r.rows = attended_rows(p.kv_index, r.b, p.seq_kv);
    r.kv_lo = 0;
    r.kv_hi = r.n_kv;
    r.w_lo = 0;
    r.w_hi = p.seq_kv;
    r.bias_row = kMasked && bias ? bias + r.b * bias_b + r.h * bias_h : nullptr;
    if constexpr (kMasked) {
        const int64_t first = (int64_t)qb * rows_per_block;
        kw_tile_keys(mk, r.b, first, first + rows_per_block, r.rows, r.n_kv, &r.kv_lo, &r.kv_hi);
        if (r.row_valid)
            kw_window(mk, r.b, r.row, &r.w_lo, &r.w_hi);
        else
            r.w_lo = r.w_hi = 0;
    }
    return r;
}

#endif
