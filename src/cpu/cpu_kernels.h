/* The cpu backend's layers: a portable driver (cpu_backend.c: tasks, threads, workspace) over
 * one table of micro-kernels per instruction set (cpu_kernels_<isa>.c, each an instantiation
 * of cpu_flash_template.h), chosen once per call by cpu_isa.c.
 *
 * Formulation (transposed flash attention; see NOTES.md). One task owns a query block of QB
 * queries of one (b, h). Vectors run along queries, so:
 *   Qt  [D][QB]   the block's queries, transposed and scaled by scale*log2(e) (packed once);
 *   St  [BK][QB]  S^T = K Qt for a block of BK keys: K[j][d] is broadcast straight from K's rows;
 *   softmax over keys = element-wise max / add across the rows of St (no horizontal reduction),
 *                 exp2 in place gives P^T; running max m[QB] and sum l[QB] are vectors;
 *   Ot  [D][QB]   O^T = alpha * O^T + V^T P^T, V[j][d] broadcast straight from V's rows;
 *   out[q][d] = Ot[d][q] / l[q]  (the transpose and the normalisation folded into the write).
 * Neither K nor V is packed or copied: every full tile reads them in place, any strides. */
#ifndef JATTN_CPU_KERNELS_H
#define JATTN_CPU_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "jattn.h"

/* Largest head_dim the cpu backend runs (workspace grows as D * QB per thread). */
#define JATTN_CPU_MAX_HEAD_DIM 1024

/* head_dim up to which the scores and P V keep every rounding error (scores' and pv_exact's
 * compensated sums): with few columns nothing averages an error away. */
#define CPU_EXACT_HEAD_DIM 16

struct jattn_call; /* src/backend.h: the call, for the mask's windows (cpu_key_blocks.c) */

/* One call, resolved for the kernels: element pointers, extents, element strides. q, out, lse
 * are [B, H, Sq, ...]; k, v are [B, Hkv, Skv, D]: query head h reads key/value head h / (H / Hkv)
 * in place (grouped-query heads; Hkv = H without them). */
typedef struct cpu_flash_args {
    const float *q, *k, *v;
    float *out, *lse;
    int64_t B, H, Sq, Skv, D;
    jattn_strides qs, ks, vs, os;
    float scale;           /* the softmax scale */
    float scale_log2e;     /* scale * log2(e): exp2 gets (s - m) * scale_log2e */
    const double *k_norm2; /* [B * Hkv] (list mode): max over the attended keys of (b, hk) of |k|^2 */
    /* Key padding (jattn_key_padding, validated; lengths in [0, Skv]): NULL when absent. */
    const int64_t *kv_len; /* [B] */
    const uint8_t *mask;   /* row b at mask + b * mask_stride */
    int64_t mask_stride;
    int64_t Hkv; /* key/value heads, dividing H */
    /* The rest of the mask (jattn_mask): a call with windows (segments, causal, blocks) or a key
     * bias runs in grid mode (cpu_key_blocks below); NULL / 0 otherwise. */
    const struct jattn_call *call; /* the windows: jattn_call_key_window */
    int grid;                      /* 1: grid mode */
    const float *key_bias;         /* row (b, h) at + b * bias_bs + h * bias_hs; -inf leaves a key out */
    int64_t bias_bs, bias_hs;
    const float *k_norm_keys; /* grid mode: [B, Hkv, Skv] |k_j|^2 (max_row_norm2 of the row), filled
                                 for the keys some query of (b, its heads) attends, never read elsewhere */
} cpu_flash_args;

/* The key/value head of query head h, and the key bias row of (b, h) (NULL without a bias). */
static inline int64_t cpu_kv_head(const cpu_flash_args *a, int64_t h) { return h / (a->H / a->Hkv); }
static inline const float *cpu_bias_row(const cpu_flash_args *a, int64_t b, int64_t h) {
    return a->key_bias ? a->key_bias + b * a->bias_bs + h * a->bias_hs : NULL;
}

/* A block of query rows [q0, q0 + nq) of one batch (nq <= the table's QB), as the driver cuts
 * them: consecutive blocks of QB from each segment's first query (one segment [0, Sq) without
 * segments), the short block at a segment's end run on the narrowest table that holds it. The
 * forward and the backward cut alike, so that each query block's scores are computed the same. */
typedef struct cpu_qblock {
    int64_t q0;
    int nq;
} cpu_qblock;

/* ---- the attended keys of one query block, in blocks (cpu_key_blocks.c) ----
 * List mode (no window, no key bias: the mask is at most key padding, the same for every row and
 * head of a batch): the blocks are the next BK attended keys in ascending order, from key 0:
 * without padding [0, BK), [BK, 2 BK), ..., keys past kv_len never visited and masked keys never
 * listed. Grid mode (windows or a key bias): the query block's rows attend keys inside windows
 * [lo_i, hi_i) (jattn_call_key_window) that share lo_i = ilo (the segment's first key; 0 without
 * segments) for every row with a key, so the block walks the cells [ilo + c BK, ilo + (c + 1) BK)
 * of [ilo, ihi) (ihi the largest hi_i), each block the keys of one cell that the padding and a
 * -inf-free bias of (b, h) leave (cells with none skipped). The cells are fixed by ilo alone: the
 * blocks of a group's members at one cell are prefixes of the same keys (their ihi differ), and
 * the backward's runs of cells never share a key. Keys outside every window are never listed. */
typedef struct cpu_key_blocks {
    const uint8_t *mask; /* the batch's mask row, or NULL */
    const float *bias;   /* grid mode: the bias row of (b, h), or NULL */
    int64_t end;         /* candidate keys are [.., end): kv_len[b] or Skv (list); min(ihi, that) (grid) */
    int64_t next;        /* the first candidate not yet taken (list); the next cell's first key (grid) */
    int grid;
    int64_t cell; /* grid mode: keys per cell (the table's BK) */
} cpu_key_blocks;

void cpu_key_blocks_init(cpu_key_blocks *kb, const cpu_flash_args *a, int64_t b);
/* Grid mode for (b, h): the cells of `cell` keys of [from, to) (from on the cell grid of the query
 * block: ilo + c BK). */
void cpu_key_blocks_init_grid(cpu_key_blocks *kb, const cpu_flash_args *a, int64_t b, int64_t h, int64_t from,
                              int64_t to, int64_t cell);
/* Takes the next block: rows[0 .. n) the key rows, ascending. @return n <= max (max >= cell in grid
 * mode; 0: no key left). */
int cpu_key_blocks_next(cpu_key_blocks *kb, int max, int64_t *rows);

/* Whether key j is attended by the padding of b and the bias row (NULL: none) of the call. */
static inline int cpu_key_listed(const cpu_flash_args *a, int64_t b, const float *bias, int64_t j) {
    return (!a->kv_len || j < a->kv_len[b]) && (!a->mask || a->mask[b * a->mask_stride + j]) &&
           !(bias && bias[j] == -INFINITY);
}

/* Grid mode: the windows of the query rows [q0, q0 + nq) of batch b: lane_hi[i] = hi_i (keys
 * j >= lane_hi[i] are outside row q0 + i's window; ilo for a row with an empty window, which then
 * masks every key), *ilo, *ihi (ihi <= ilo: no row has a key in its window). */
void cpu_query_windows(const cpu_flash_args *a, int64_t b, int64_t q0, int nq, int64_t *lane_hi, int64_t *ilo,
                       int64_t *ihi);

/* One backward call, resolved for the kernels: the forward's arguments (q, k, v, extents,
 * strides, scale, key norms, padding; f.out and f.lse unused) and the backward's own tensors. */
typedef struct cpu_bwd_args {
    cpu_flash_args f;
    const float *out, *lse, *dout, *dlse; /* out at f.os strides; lse, dlse [B, H, Sq]; dlse may be NULL */
    float *dq, *dk, *dv;
    jattn_strides dos, dqs, dks, dvs;
} cpu_bwd_args;

typedef struct cpu_kernels {
    const char *isa;    /* "avx512", "avx2", "neon", "generic" */
    const char *kernel; /* "cpu_flash_f32_<isa>_<SJ>x<QB>" */
    int vl;             /* floats per vector */
    int qb;             /* queries per task (the vector dimension of every tile) */
    int sj;             /* keys per scores tile */
    int sjp;            /* keys per plain scores tile (scores_plain) */
    int dr;             /* head_dim rows per P V tile */
    int bk;             /* keys per key/value block (St rows): the same in a table and its narrow tables (the
                           cells of a masked call, which the backward's runs of key blocks do not split) */
    int db;             /* head_dim elements per block of the scores' D-reduction */

    /* scores: st[j][q] + sl[j][q] = sum_{d<D} k[j*ks + d] * qt[d*QB + q]   for j < jr <= SJ,
     * q < QB: the dot product as an unevaluated pair (sum, compensation). Summed in blocks of db
     * head_dim elements by FMAs, block sums added by Fast2Sum (D <= 16: every product's error
     * captured too). qt, st, sl: 64-byte aligned, row stride QB. k: any alignment, row stride
     * ks (elements). D >= 1. Rows j >= jr are not written. */
    void (*scores)(int jr, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st, float *sl);

    /* scores_plain: the same contract for jr <= SJP (sjp) with plain f32 accumulation (one FMA
     * chain per score, error within D u * sum |terms|) and sl = 0; run by a task whose logits
     * are bounded small. */
    void (*scores_plain)(int jr, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st, float *sl);

    /* softmax_block: for each query q (vector lane) and the n >= 1 rows of st, sl (dot products
     * as pairs): (m', ml') = the pair of the largest st among (m, ml) and the block's rows;
     *   alpha[q] = exp2(((m - m') + (ml - ml')) c);
     *   st[j][q] = exp2(((st[j][q] - m') + (sl[j][q] - ml')) c)   (exp2 of x > 0 is 1);
     *   l[q] = l[q] * alpha[q] + sum_j st[j][q] (summed in j order within the block);  m = m'.
     * With ll (not NULL) l is the unevaluated pair (l + ll), every rounding error of the sum and
     * of the rescale kept (within a few u of the sum of the st written; ll = 0 starts a row;
     * non-finite: ll = 0), as the forward's task runs it (every head_dim).
     * st, sl, m, ml, l, ll, alpha: 64-byte aligned, QB lanes. m = -inf, ml = l = 0 starts a row. */
    void (*softmax_block)(int n, float c, float *st, const float *sl, float *m, float *ml, float *l, float *ll,
                          float *alpha);

    /* pv: ot[r][q] = ot[r][q] * alpha[q] + sum_{j<n} v[j*vs + r] * pt[j*QB + q]
     *   for r < dr <= DR, q < QB, the sum over j in order into a fresh accumulator.
     * pt, ot, alpha: 64-byte aligned, row stride QB. v: any alignment, row stride vs. n >= 1. */
    void (*pv)(int dr, int n, const float *v, ptrdiff_t vs, const float *pt, const float *alpha, float *ot);

    /* pv_exact: the same sum for any dr, into the unevaluated pair (ot + otl):
     *   (ot + otl)[r][q] = (ot + otl)[r][q] * alpha[q] + sum_{j<n} v[j*vs + r] * pt[j*QB + q],
     * every product's and addition's rounding error kept, so the pair is within a few u of the
     * result itself plus ~n u^2 sum |terms| (plain pv: ~n u sum |terms|). A non-finite term
     * leaves otl = 0. The task runs it for D <= CPU_EXACT_HEAD_DIM; otl as ot. */
    void (*pv_exact)(int dr, int n, const float *v, ptrdiff_t vs, const float *pt, const float *alpha, float *ot,
                     float *otl);

    /* exp2: y[i] = 2^x[i] for i < n, any n; error <= 2 ulp for x in [-126, 0], 0 below -126
     * (and for -inf), 1 for x > 0, NaN for NaN. The vector exp the softmax uses. */
    void (*exp2)(int64_t n, const float *x, float *y);

    /* max_row_norm2: max over the rows i < n of sum_{d<D} x[i*xs + d]^2, an inf or NaN element
     * counted as 0 (0 when n == 0). x: any alignment. Relative error <= (D + VL) u. */
    double (*max_row_norm2)(int64_t n, int64_t D, const float *x, ptrdiff_t xs);

    /* task: the whole flash loop for the nblk (1..CPU_GROUP_MAX) query blocks blocks[0 .. nblk)
     * of (b, h) (ascending, each of at most QB queries), the blocks walking the key blocks together
     * (each K/V block reused from cache by the group); ws: cpu_task_workspace_floats(kern, D, nblk, a->grid)
     * floats, 64-byte aligned. Writes those out rows and their lse (rows attending no key: +0 and
     * -inf), bit for bit what nblk tasks of one block write. */
    void (*task)(const cpu_flash_args *a, int64_t b, int64_t h, const cpu_qblock *blocks, int nblk, float *ws);
    /* The same instruction set's table with fewer queries per task (a smaller qb), or NULL:
     * the driver runs a task of n < qb queries (the last block of a head, or seq_q < qb) on the
     * narrowest table whose qb >= n, so that fewer lanes compute nothing. */
    const struct cpu_kernels *narrow;

    /* ---- backward ---- */
    const char *bwd_kernel; /* "cpu_flash_bwd_f32_<isa>_<SJ>x<QB>" */

    /* bwd_outer: y[j*ys + d] += sum_{q<nq} pt[j*QB + q] * x[q*xs + d]   for j < n, d < D:
     * the dK / dV product (lanes along head_dim, pt broadcast). The sum over q runs in order
     * into a fresh accumulator, added once to y. pt 64-byte aligned; x, y any alignment. */
    void (*bwd_outer)(int n, int nq, int64_t D, const float *pt, const float *x, ptrdiff_t xs, float *y, ptrdiff_t ys);

    /* bwd_tile: the backward of the ntile (1..CPU_GROUP_MAX) query tiles tiles[0 .. ntile) of (b, h)
     * (the forward's query blocks, ascending; cpu_backward_template.h) against the key blocks of
     * their attended keys whose first key lies in [j0, j1) (0, INT64_MAX: all; the driver passes
     * bounds that are block starts), the tiles walking those key blocks together. parts &
     * CPU_BWD_DKV: adds each tile's share, in tile order, into the dk, dv rows (of key/value head
     * h / (H / Hkv)) of those keys (zeroed by the caller before the first share); parts & CPU_BWD_DQ
     * (then all key blocks): writes the tiles' dq rows. Bit for bit what ntile calls of one tile
     * would give; ws: cpu_bwd_tile_workspace_floats(kern, D, ntile, a->f.grid). */
    void (*bwd_tile)(const cpu_bwd_args *a, int64_t b, int64_t h, const cpu_qblock *tiles, int ntile, int64_t j0,
                     int64_t j1, int parts, float *ws);
} cpu_kernels;

/* bwd_tile's parts: the dk, dv shares, the dq rows. */
#define CPU_BWD_DKV 1
#define CPU_BWD_DQ 2

/* The most query blocks one task (or one backward group) walks the key blocks with. */
#define CPU_GROUP_MAX 8

/* The workspace of one forward task (cpu_kernels.h task) or one bwd_tile call, laid out once
 * here for the driver (its size) and the template (its parts). Offsets in floats from the
 * slice's start; every part starts 64-byte aligned when QB, BK and D allow (the tables' QB are
 * multiples of VL, BK = 96), and `floats`, the whole, is a multiple of 16 (64 bytes). */
#define CPU_WS_ROUND(x) (((x) + 15) / 16 * 16)

/* Forward: shared by the group's blocks st, sl [BK][QB] (the scores, then P^T) and pk, pv
 * [BK][D] (a gapped key block's rows, packed); then per query block g, at block + g *
 * block_floats: qt, ot [D][QB], m, ml, l, ll, alpha [QB], and otl [D][QB] for D <=
 * CPU_EXACT_HEAD_DIM (offsets within the block's state; ll is read there only). */
typedef struct cpu_fwd_layout {
    int64_t st, sl, pk, pv, block, block_floats;
    int64_t qt, ot, m, ml, l, ll, alpha, otl;
    int64_t pz; /* grid mode: [BK][D], a key block's V rows with Inf and NaN as 0 (the rows a masked lane
                   of a block must not read: task_block) */
    int64_t floats;
} cpu_fwd_layout;

static inline cpu_fwd_layout cpu_fwd_workspace_layout(int64_t qb, int64_t bk, int64_t D, int nblk, int grid) {
    cpu_fwd_layout w;
    w.st = 0, w.sl = bk * qb, w.pk = 2 * bk * qb, w.pv = w.pk + bk * D, w.block = w.pv + bk * D;
    w.qt = 0, w.ot = D * qb, w.m = 2 * D * qb, w.ml = w.m + qb, w.l = w.ml + qb, w.ll = w.l + qb, w.alpha = w.ll + qb;
    w.otl = w.alpha + qb;
    w.block_floats = CPU_WS_ROUND(w.otl + (D <= CPU_EXACT_HEAD_DIM ? D * qb : 0));
    w.floats = CPU_WS_ROUND(w.block + nblk * w.block_floats);
    w.pz = w.floats;
    if (grid) w.floats += CPU_WS_ROUND(bk * D);
    return w;
}

/* Backward: shared by the group's tiles st, sl, dpt, dpl [BK][QB] (S^T then P^T, dP^T then
 * dS^T), one [QB] (ones: pv's alpha for dQ), pk, pv [BK][D] (a gapped block's K, V rows) and tk,
 * tv [BK][D] (its dK, dV shares); then per tile t, at tile + t * tile_floats: qt, dot, dqt [D][QB],
 * dqtl [D][QB] for D <= CPU_EXACT_HEAD_DIM, and lse, dl, dll [QB]. */
typedef struct cpu_bwd_layout {
    int64_t st, sl, dpt, dpl, one, pk, pv, tk, tv, tile, tile_floats;
    int64_t qt, dot, dqt, dqtl, lse, dl, dll;
    int64_t pz; /* grid mode: [BK][D], a key block's K rows with Inf and NaN as 0 (bwd_block's dQ) */
    int64_t floats;
} cpu_bwd_layout;

static inline cpu_bwd_layout cpu_bwd_workspace_layout(int64_t qb, int64_t bk, int64_t D, int ntile, int grid) {
    cpu_bwd_layout w;
    w.st = 0, w.sl = bk * qb, w.dpt = 2 * bk * qb, w.dpl = 3 * bk * qb, w.one = 4 * bk * qb;
    w.pk = w.one + qb, w.pv = w.pk + bk * D, w.tk = w.pv + bk * D, w.tv = w.tk + bk * D, w.tile = w.tv + bk * D;
    w.qt = 0, w.dot = D * qb, w.dqt = 2 * D * qb, w.dqtl = 3 * D * qb;
    w.lse = w.dqtl + (D <= CPU_EXACT_HEAD_DIM ? D * qb : 0), w.dl = w.lse + qb, w.dll = w.dl + qb;
    w.tile_floats = CPU_WS_ROUND(w.dll + qb);
    w.floats = CPU_WS_ROUND(w.tile + ntile * w.tile_floats);
    w.pz = w.floats;
    if (grid) w.floats += CPU_WS_ROUND(bk * D);
    return w;
}

/* Floats of workspace one task of nblk query blocks (cpu_fwd_workspace_layout) and one bwd_tile
 * call of ntile tiles (cpu_bwd_workspace_layout) need for head_dim D, per thread; the call needs
 * cpu_norm_workspace_floats beside them for the key norms. */
static inline int64_t cpu_task_workspace_floats(const cpu_kernels *kern, int64_t D, int nblk, int grid) {
    return cpu_fwd_workspace_layout(kern->qb, kern->bk, D, nblk, grid).floats;
}
static inline int64_t cpu_bwd_tile_workspace_floats(const cpu_kernels *kern, int64_t D, int ntile, int grid) {
    return cpu_bwd_workspace_layout(kern->qb, kern->bk, D, ntile, grid).floats;
}
int64_t cpu_norm_workspace_floats(int64_t batch, int64_t heads); /* 2 floats per double */

/* The tables compiled into this build (NULL-terminated inside cpu_isa.c). */
extern const cpu_kernels cpu_kernels_avx512;
extern const cpu_kernels cpu_kernels_avx512_q32; /* narrow tables: 32 and 16 queries per task */
extern const cpu_kernels cpu_kernels_avx512_q16;
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx2_q8;
extern const cpu_kernels cpu_kernels_neon;
extern const cpu_kernels cpu_kernels_generic;

/* The kernels for this machine: JATTN_CPU_ISA when set, else the widest the CPU supports.
 * @return the table, or NULL with *why set (static storage) when JATTN_CPU_ISA names an
 *         instruction set that is not built in or not supported by this CPU. */
const cpu_kernels *cpu_kernels_select(const char **why);

/* Every table built in and supported by this CPU, best first; @return how many (<= max). */
int cpu_kernels_available(const cpu_kernels **out, int max);

#endif /* JATTN_CPU_KERNELS_H */
