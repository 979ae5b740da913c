/* The cpu backend: the portable driver of the flash micro-kernels (cpu_kernels.h).
 *
 * Reads  q [B, H, Sq, D], k and v [B, Hkv, Skv, D] (query head h reads key/value head
 *        h / (H / Hkv) in place, never copied), any element strides with head_dim contiguous;
 *        the backward also out, dout [B, H, Sq, D], lse, dlse [B, H, Sq].
 * Writes out [B, H, Sq, D] and lse [B, H, Sq] (forward); dq [B, H, Sq, D], dk and dv
 *        [B, Hkv, Skv, D] (backward; dk, dv of a key/value head summed over its query heads).
 *
 * Forward: tasks are (b, h, group of up to CPU_GROUP_MAX query blocks of QB queries), spread over
 * OpenMP threads (dynamic schedule); the blocks of a group walk the key blocks together, so that
 * each K/V block is reused from L2 (NOTES.md §1). Each query block is computed by one thread in a
 * fixed order whatever its group and owns its output rows, so the output is bitwise identical
 * for every thread count, group size and run. Masks (cpu_kernels.h, cpu_key_blocks): each query
 * block walks only the keys its rows attend, so blocks past kv_len or outside every row's window
 * (causal, block-causal, segments) are never loaded and masked keys never read. With segments the
 * query blocks start at each segment's first query (the forward and the backward cut alike:
 * qpart below). Workspace: one slice of cpu_task_workspace_floats() per thread, O(threads x
 * (group D + BK) x QB), plus the key norms: B Hkv doubles, and with a window or a key bias
 * B Hkv Skv floats (one per key), and with segments the query blocks of each batch; nothing of
 * size S x S. */
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "cpu_kernels.h"

#define LOG2E 1.4426950408889634074

int64_t cpu_norm_workspace_floats(int64_t batch, int64_t heads) {
    const int64_t line = 64 / (int64_t)sizeof(float);
    return (2 * batch * heads + line - 1) / line * line;
}

/* Floats of n items of `bytes` bytes each, rounded up to whole 64-byte lines. */
static int64_t ws_floats(int64_t n, size_t bytes) {
    const int64_t f = (n * (int64_t)bytes + (int64_t)sizeof(float) - 1) / (int64_t)sizeof(float);
    return (f + 15) / 16 * 16;
}

/* The mask parts that put a call in grid mode (cpu_kernels.h): a window or a key bias. */
#define GRID_FEATURES (JATTN_FEATURE_CAUSAL | JATTN_FEATURE_BLOCKS | JATTN_FEATURE_SEGMENTS | JATTN_FEATURE_KEY_BIAS)

static jattn_status cpu_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    if (e->memory != JATTN_MEMORY_HOST)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "exec.memory: the cpu backend reads host memory only");
    if (e->precision != JATTN_PRECISION_F32)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "exec.precision: the cpu backend computes f32 only");
    /* every mask part and grouped-query heads are served (plan->features) */
    if (p->head_dim > JATTN_CPU_MAX_HEAD_DIM)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "head_dim: %lld, the cpu backend supports up to %d",
                          (long long)p->head_dim, JATTN_CPU_MAX_HEAD_DIM);
    const char *why = "";
    const cpu_kernels *kern = cpu_kernels_select(&why);
    if (!kern) return jattn_fail(JATTN_ERROR_UNSUPPORTED, "%s", why);
    plan->kernel = kern;
    plan->threads = jattn_resolve_threads(e->threads);
    plan->selection.kernel = kern->kernel;
    plan->selection.isa = kern->isa;
    return JATTN_OK;
}

/* ---- the query blocks: how both passes cut the queries ------------------------------------
 * Without segments every batch has the same blocks: QB queries from 0 on, the last one short;
 * with segments each batch (each row of offsets) has its own: QB queries from each segment's first
 * query on, a short block at each segment's end, and the queries past the last segment (which
 * attend no key) in blocks of their own. A block runs on the table (kern or one of its narrow
 * tables) of the forward's rule: the narrowest that holds it when it is short and a narrow table
 * does, else kern. Units are what a task runs: up to `group` consecutive blocks on kern (walking
 * the key blocks together), or one block on a narrow table; in ascending order of queries (the
 * backward adds each head's dk, dv shares in that order). */
typedef struct cpu_unit {
    int64_t first; /* its first block (segments: index into the batch row's blocks) */
    int count;
    const cpu_kernels *kern;
} cpu_unit;

typedef struct qpart {
    const cpu_kernels *kern;
    int group;
    /* without segments */
    int64_t main_blocks, groups;  /* blocks run on kern, in `groups` groups of `group` */
    const cpu_kernels *last_kern; /* the short last block's narrow table, or NULL (it is a main block) */
    /* with segments: a row of blocks and units per batch, or one for all when the offsets are shared */
    const jattn_call *c;
    int64_t rows, cap;
    cpu_qblock *blocks; /* [rows][cap] */
    cpu_unit *units;    /* [rows][cap] */
    int64_t *nunits;    /* [rows] */
} qpart;

static const cpu_kernels *table_for(const cpu_kernels *kern, int64_t nq) {
    const cpu_kernels *k = kern;
    while (k->narrow && k->narrow->qb >= nq) k = k->narrow;
    return k;
}

/* Blocks per batch row at most (segments): ceil(Sq / QB), plus a short one per segment and the tail. */
static int64_t qpart_cap(const jattn_problem *p, const cpu_kernels *kern, int64_t num_segments) {
    return (p->seq_q + kern->qb - 1) / kern->qb + num_segments + 1;
}
static int64_t qpart_rows(const jattn_problem *p, int64_t segments_stride) { return segments_stride ? p->batch : 1; }

/* Floats of workspace the segment rows take (0 without segments). */
static int64_t qpart_floats(const jattn_problem *p, const jattn_plan *plan) {
    if (!(plan->features & JATTN_FEATURE_SEGMENTS)) return 0;
    const int64_t rows = qpart_rows(p, plan->mask.segments_stride);
    const int64_t cap = qpart_cap(p, plan->kernel, plan->mask.num_segments);
    return ws_floats(rows * cap, sizeof(cpu_qblock)) + ws_floats(rows * cap, sizeof(cpu_unit)) +
           ws_floats(rows, sizeof(int64_t));
}

/* The group of the forward: as many blocks as CPU_GROUP_MAX while every thread keeps ~8 tasks of
 * groups to balance (the bits do not depend on it: each block's arithmetic is the same in any
 * group). `runs` and `longest`: the main blocks of every batch row in runs of consecutive ones. */
static int choose_group(int64_t heads_total, int64_t longest, int64_t (*units_of)(const void *, int), const void *ctx,
                        int threads) {
    int group = CPU_GROUP_MAX;
    while (group > 1 && (group / 2 >= longest || heads_total * units_of(ctx, group) < 8 * (int64_t)threads)) group /= 2;
    return group;
}

static int64_t regular_units(const void *ctx, int group) {
    const int64_t main_blocks = *(const int64_t *)ctx;
    return (main_blocks + group - 1) / group;
}

/* Segments: the blocks of batch row r into q->blocks (returns their count). */
static int64_t segment_blocks(const qpart *q, const jattn_problem *p, int64_t r, cpu_qblock *out) {
    const jattn_call *c = q->c;
    const int64_t *sq = c->cu_seqlens_q + r * c->segments_stride, n = c->num_segments, qb = q->kern->qb;
    int64_t cnt = 0;
    for (int64_t s = 0; s <= n; s++) {
        const int64_t lo = sq[s], hi = s < n ? sq[s + 1] : p->seq_q; /* s == n: the queries past the last */
        for (int64_t q0 = lo; q0 < hi; q0 += qb) out[cnt++] = (cpu_qblock){q0, (int)(hi - q0 < qb ? hi - q0 : qb)};
    }
    return cnt;
}

/* Segments: the units of group `group` of a row of blocks (into units when not NULL): runs of
 * consecutive blocks on kern cut every `group` blocks, a block on a narrow table alone. @return the
 * number of units; adds those on kern to *main_units and keeps in *longest the longest run. */
static int64_t segment_units(const qpart *q, const cpu_qblock *blocks, int64_t nb, int group, cpu_unit *units,
                             int64_t *main_units, int64_t *longest) {
    int64_t nu = 0, run = 0;
    for (int64_t i = 0; i < nb; i++) {
        const cpu_kernels *k = table_for(q->kern, blocks[i].nq);
        run = k == q->kern ? run + 1 : 0;
        if (run > *longest) *longest = run;
        if (run > 1 && (run - 1) % group != 0) { /* joins the unit before it */
            if (units) units[nu - 1].count++;
            continue;
        }
        if (units) units[nu] = (cpu_unit){i, 1, k};
        nu++;
        *main_units += k == q->kern;
    }
    return nu;
}

typedef struct seg_count_ctx {
    const qpart *q;
    const jattn_problem *p;
    int64_t batch_per_row; /* batches each row stands for */
} seg_count_ctx;

static int64_t segment_units_of(const void *ctx, int group) {
    const seg_count_ctx *x = ctx;
    int64_t total = 0, longest = 0;
    for (int64_t r = 0; r < x->q->rows; r++) {
        int64_t mains = 0;
        const cpu_qblock *blocks = x->q->blocks + r * x->q->cap;
        (void)segment_units(x->q, blocks, x->q->nunits[r], group, NULL, &mains, &longest);
        total += mains * x->batch_per_row;
    }
    return total;
}

/* Cuts the queries of a call. group 0: the forward's rule (choose_group); else that group. seg_ws:
 * the segment rows' workspace (qpart_floats). */
static qpart qpart_make(const jattn_call *c, const jattn_plan *plan, int group, int threads, float *seg_ws) {
    const jattn_problem *p = c->problem;
    qpart q;
    memset(&q, 0, sizeof q);
    q.kern = plan->kernel;
    q.c = c;
    const int64_t qb = q.kern->qb;
    if (!(plan->features & JATTN_FEATURE_SEGMENTS)) {
        const int64_t qblocks = (p->seq_q + qb - 1) / qb, last = p->seq_q - (qblocks - 1) * qb;
        q.main_blocks = q.kern->narrow && q.kern->narrow->qb >= last ? qblocks - 1 : qblocks;
        q.last_kern = q.main_blocks < qblocks ? table_for(q.kern, last) : NULL;
        q.group =
            group ? group : choose_group(p->batch * p->heads, q.main_blocks, regular_units, &q.main_blocks, threads);
        q.groups = (q.main_blocks + q.group - 1) / q.group;
        return q;
    }
    q.rows = qpart_rows(p, c->segments_stride);
    q.cap = qpart_cap(p, q.kern, c->num_segments);
    q.blocks = (cpu_qblock *)seg_ws;
    q.units = (cpu_unit *)(seg_ws + ws_floats(q.rows * q.cap, sizeof(cpu_qblock)));
    q.nunits = (int64_t *)((float *)q.units + ws_floats(q.rows * q.cap, sizeof(cpu_unit)));
    int64_t longest = 0, mains = 0;
    for (int64_t r = 0; r < q.rows; r++) { /* nunits holds the block counts until the units are made */
        q.nunits[r] = segment_blocks(&q, p, r, q.blocks + r * q.cap);
        (void)segment_units(&q, q.blocks + r * q.cap, q.nunits[r], 1, NULL, &mains, &longest);
    }
    const seg_count_ctx ctx = {&q, p, p->batch / q.rows};
    q.group = group ? group : choose_group(p->heads, longest, segment_units_of, &ctx, threads);
    for (int64_t r = 0; r < q.rows; r++)
        q.nunits[r] =
            segment_units(&q, q.blocks + r * q.cap, q.nunits[r], q.group, q.units + r * q.cap, &mains, &longest);
    return q;
}

static int64_t qpart_units(const qpart *q, int64_t b) {
    if (!q->blocks) return q->groups + (q->last_kern ? 1 : 0);
    return q->nunits[q->rows > 1 ? b : 0];
}

/* Unit u of batch b: its blocks into blk (at most CPU_GROUP_MAX), its table into *kern. @return count. */
static int qpart_unit(const qpart *q, int64_t b, int64_t u, cpu_qblock *blk, const cpu_kernels **kern) {
    const int64_t Sq = q->c->problem->seq_q, qb = q->kern->qb;
    if (!q->blocks) {
        if (u == q->groups) { /* the short last block */
            blk[0] = (cpu_qblock){q->main_blocks * qb, (int)(Sq - q->main_blocks * qb)};
            *kern = q->last_kern;
            return 1;
        }
        const int64_t first = u * q->group;
        const int n = (int)(q->main_blocks - first < q->group ? q->main_blocks - first : q->group);
        for (int i = 0; i < n; i++) {
            const int64_t q0 = (first + i) * qb;
            blk[i] = (cpu_qblock){q0, (int)(Sq - q0 < qb ? Sq - q0 : qb)};
        }
        *kern = q->kern;
        return n;
    }
    const int64_t r = q->rows > 1 ? b : 0;
    const cpu_unit *un = q->units + r * q->cap + u;
    for (int i = 0; i < un->count; i++) blk[i] = q->blocks[r * q->cap + un->first + i];
    *kern = un->kern;
    return un->count;
}

/* Threads a forward without segments uses: no more than it has tasks (the workspace's slices). */
static int forward_threads(const jattn_problem *p, const jattn_plan *plan, int threads, int *group) {
    if (plan->features & JATTN_FEATURE_SEGMENTS) {
        *group = CPU_GROUP_MAX;
        return threads;
    }
    jattn_call c;
    memset(&c, 0, sizeof c);
    c.problem = p;
    const qpart q = qpart_make(&c, plan, 0, threads, NULL);
    const int64_t tasks = p->batch * p->heads * qpart_units(&q, 0);
    *group = q.group;
    return tasks < threads ? (int)tasks : threads;
}

/* The key norms' floats: B Hkv doubles (list mode), or B Hkv Skv floats (grid mode). */
static int64_t norm_floats(const jattn_problem *p, const jattn_plan *plan) {
    if (plan->features & GRID_FEATURES) return ws_floats(p->batch * p->kv_heads * p->seq_kv, sizeof(float));
    return cpu_norm_workspace_floats(p->batch, p->kv_heads);
}

static size_t cpu_workspace(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    const cpu_kernels *kern = plan->kernel;
    int group;
    const int threads = forward_threads(p, plan, plan->threads, &group);
    return ((size_t)threads *
                (size_t)cpu_task_workspace_floats(kern, p->head_dim, group, (plan->features & GRID_FEATURES) != 0) +
            (size_t)norm_floats(p, plan) + (size_t)qpart_floats(p, plan)) *
           sizeof(float);
}

/* The largest |k|^2 over the attended keys of each (b, hk) (list mode): half of the a-priori logit
 * bound by which a task picks the plain or the compensated scores kernel (cpu_forward_template.h,
 * task); keys left out by the padding are not read, so they cannot change that choice. The forward
 * and the backward compute it alike, so that the backward's scores are the forward's. */
/* The key norms' loops' view of a call (key_norms, key_norms_grid): one (b, hk) an iteration. */
typedef struct key_norms_loop {
    const cpu_kernels *kern;
    const cpu_flash_args *a;
    const jattn_call *c; /* grid mode */
    double *k_norm2;     /* list mode */
    float *norm;         /* grid mode */
    int64_t group, nseg; /* grid mode */
} key_norms_loop;

static void key_norms_head(void *arg, int64_t bh, int thread) {
    (void)thread;
    const key_norms_loop *l = arg;
    const cpu_kernels *kern = l->kern;
    const cpu_flash_args *a = l->a;
    double *k_norm2 = l->k_norm2;
    const int64_t b = bh / a->Hkv;
    const float *kh = a->k + b * a->ks.batch + bh % a->Hkv * a->ks.head;
    if (!a->mask) { /* the attended keys are rows [0, kv_len or Skv) */
        k_norm2[bh] = kern->max_row_norm2(a->kv_len ? a->kv_len[b] : a->Skv, a->D, kh, a->ks.token);
        return;
    }
    cpu_key_blocks keys;
    cpu_key_blocks_init(&keys, a, b);
    int64_t rows[256];
    double best = 0.0;
    for (int n; (n = cpu_key_blocks_next(&keys, 256, rows)) > 0;) {
        /* runs of consecutive attended rows at a time */
        for (int r0 = 0, r1; r0 < n; r0 = r1) {
            for (r1 = r0 + 1; r1 < n && rows[r1] == rows[r1 - 1] + 1; r1++) {
            }
            const double run = kern->max_row_norm2(r1 - r0, a->D, kh + rows[r0] * a->ks.token, a->ks.token);
            if (run > best) best = run;
        }
    }
    k_norm2[bh] = best;
}

static void key_norms(const cpu_kernels *kern, const cpu_flash_args *a, double *k_norm2, int threads) {
    key_norms_loop l = {.kern = kern, .a = a, .k_norm2 = k_norm2};
    jattn_parallel_for(a->B * a->Hkv, threads, key_norms_head, &l);
}

/* The key ranges [*lo, *hi) that the query rows of segment s of batch b (s = 0 and the whole
 * sequence without segments) attend at most: the segment's keys up to its last query's window end. */
static void segment_keys(const jattn_call *c, int64_t b, int64_t s, int64_t *qlo, int64_t *qhi, int64_t *klo,
                         int64_t *khi) {
    const jattn_problem *p = c->problem;
    if (!c->cu_seqlens_q) {
        *qlo = 0, *qhi = p->seq_q, *klo = 0, *khi = p->seq_kv;
        return;
    }
    const int64_t *sq = c->cu_seqlens_q + b * c->segments_stride, *sk = c->cu_seqlens_kv + b * c->segments_stride;
    *qlo = sq[s], *qhi = sq[s + 1], *klo = sk[s], *khi = sk[s + 1];
}

/* Grid mode: |k_j|^2 of every key that some query row of (b, a head of hk) attends: the keys of each
 * segment's window range (the same start for its rows, the end of its last row's window: windows
 * end no earlier for later rows) that the padding and the bias of one of the heads leave. The
 * keys nobody attends are not read. */
static void key_norms_grid_head(void *arg, int64_t bh, int thread) {
    (void)thread;
    const key_norms_loop *l = arg;
    const cpu_kernels *kern = l->kern;
    const cpu_flash_args *a = l->a;
    const jattn_call *c = l->c;
    float *norm = l->norm;
    const int64_t group = l->group, nseg = l->nseg;
    const int64_t b = bh / a->Hkv, hk = bh % a->Hkv;
    const float *kh = a->k + b * a->ks.batch + hk * a->ks.head;
    float *nb = norm + bh * a->Skv;
    for (int64_t s = 0; s < nseg; s++) {
        int64_t qlo, qhi, klo, khi, lo, hi;
        segment_keys(c, b, s, &qlo, &qhi, &klo, &khi);
        if (qhi <= qlo) continue;
        jattn_call_key_window(c, b, qhi - 1, &lo, &hi);
        if (lo < klo) lo = klo; /* (lo == klo) */
        if (a->kv_len && a->kv_len[b] < hi) hi = a->kv_len[b];
        for (int64_t j = lo; j < hi; j++) {
            int any = 0;
            for (int64_t h = hk * group; h < (hk + 1) * group && !any; h++)
                any = cpu_key_listed(a, b, cpu_bias_row(a, b, h), j);
            if (any) nb[j] = (float)kern->max_row_norm2(1, a->D, kh + j * a->ks.token, a->ks.token);
        }
    }
}

static void key_norms_grid(const cpu_kernels *kern, const cpu_flash_args *a, const jattn_call *c, float *norm,
                           int threads) {
    key_norms_loop l = {.kern = kern,
                        .a = a,
                        .c = c,
                        .norm = norm,
                        .group = a->H / a->Hkv,
                        .nseg = c->cu_seqlens_q ? c->num_segments : 1};
    jattn_parallel_for(a->B * a->Hkv, threads, key_norms_grid_head, &l);
}

/* The kernels' view of a call (its forward tensors; the backward's are in cpu_bwd_args). */
static cpu_flash_args flash_args(const jattn_call *c, const jattn_plan *plan, float *norms) {
    const jattn_problem *p = c->problem;
    cpu_flash_args a;
    memset(&a, 0, sizeof a);
    a.q = c->q, a.k = c->k, a.v = c->v;
    a.out = c->pass == JATTN_PASS_FORWARD ? c->out : NULL;
    a.lse = c->pass == JATTN_PASS_FORWARD ? c->lse : NULL;
    a.B = p->batch, a.H = p->heads, a.Sq = p->seq_q, a.Skv = p->seq_kv, a.D = p->head_dim;
    a.qs = p->q, a.ks = p->k, a.vs = p->v, a.os = p->out;
    a.scale = c->scale;
    a.scale_log2e = (float)((double)c->scale * LOG2E);
    a.kv_len = c->kv_len, a.mask = c->mask, a.mask_stride = c->mask_stride;
    a.Hkv = p->kv_heads;
    a.grid = (plan->features & GRID_FEATURES) != 0;
    if (a.grid) {
        a.call = c;
        a.key_bias = c->key_bias, a.bias_bs = c->bias_batch_stride, a.bias_hs = c->bias_head_stride;
        a.k_norm_keys = norms;
    } else
        a.k_norm2 = (const double *)norms;
    return a;
}

static void compute_norms(const cpu_kernels *kern, const cpu_flash_args *a, const jattn_call *c, float *norms,
                          int threads) {
    if (a->grid)
        key_norms_grid(kern, a, c, norms, threads);
    else
        key_norms(kern, a, (double *)norms, threads);
}

/* The forward's task loop's view of a call: task t is query unit u of (b, h). */
typedef struct forward_loop {
    const jattn_problem *p;
    const cpu_flash_args *a;
    const qpart *q;
    float *ws; /* thread i's slice at ws + i per_thread */
    int64_t per_thread, bh_count;
    int heavy_first;
    int64_t chunk; /* heavy_first: heads walked side by side (the thread count) */
} forward_loop;

static void forward_task(void *arg, int64_t t, int thread) {
    const forward_loop *l = arg;
    const jattn_problem *p = l->p;
    const qpart *q = l->q;
    const int64_t bh_count = l->bh_count;
    float *mine = l->ws + (int64_t)thread * l->per_thread;
    int64_t b, h, u;
    if (q->rows > 1) { /* per-batch segments: batch by batch */
        int64_t rest = t;
        for (b = 0; rest >= p->heads * qpart_units(q, b); b++) rest -= p->heads * qpart_units(q, b);
        const int64_t nu = qpart_units(q, b);
        h = rest / nu, u = rest % nu;
    } else if (l->heavy_first) { /* chunks of `chunk` heads; in each, the units longest first, head by head */
        const int64_t nu = qpart_units(q, 0), base = t / (l->chunk * nu) * l->chunk;
        const int64_t size = bh_count - base < l->chunk ? bh_count - base : l->chunk, r = t - base * nu;
        const int64_t bh = base + r % size;
        u = nu - 1 - r / size, b = bh / p->heads, h = bh % p->heads;
    } else {
        const int64_t nu = qpart_units(q, 0), bh = t / nu;
        u = t % nu, b = bh / p->heads, h = bh % p->heads;
    }
    cpu_qblock blk[CPU_GROUP_MAX];
    const cpu_kernels *k;
    const int n = qpart_unit(q, b, u, blk, &k);
    k->task(l->a, b, h, blk, n, mine);
}

static jattn_status cpu_forward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const cpu_kernels *kern = plan->kernel;
    int group;
    const int threads = forward_threads(p, plan, c->threads, &group);
    const int64_t per_thread =
        cpu_task_workspace_floats(kern, p->head_dim, group, (plan->features & GRID_FEATURES) != 0);
    float *ws = c->workspace;
    float *norms = ws + (int64_t)threads * per_thread; /* 64-byte aligned */
    float *seg_ws = norms + norm_floats(p, plan);
    const cpu_flash_args a = flash_args(c, plan, norms);
    const qpart q = qpart_make(c, plan, 0, c->threads, seg_ws);
    compute_norms(kern, &a, c, norms, threads);

    const int64_t bh_count = p->batch * p->heads;
    int64_t tasks = 0;
    if (q.rows > 1)
        for (int64_t b = 0; b < p->batch; b++) tasks += p->heads * qpart_units(&q, b);
    else
        tasks = bh_count * qpart_units(&q, 0);
    forward_loop l = {.p = p,
                      .a = &a,
                      .q = &q,
                      .ws = ws,
                      .per_thread = per_thread,
                      .bh_count = bh_count,
                      /* causal: a head's last blocks have the most keys. Taken longest first over all
                       * heads, a thread moved to another head's K and V at each task (on one thread of
                       * a Xeon, causal at (1,8,1536,128) 0.59x the unmasked call's time; in chunks of
                       * `threads` heads 0.57x: src/cpu/JOURNAL.md §12) */
                      .heavy_first = a.grid && q.rows <= 1,
                      .chunk = threads < bh_count ? threads : bh_count};
    jattn_parallel_for(tasks, threads, forward_task, &l);
    return JATTN_OK;
}

/* ---- backward ----------------------------------------------------------------------------
 * Tasks are whole (b, hk), a key/value head: B*Hkv of them over OpenMP threads. A task zeroes its
 * dk, dv rows, then runs bwd_tile on the query tiles of each query head of its group in turn, in
 * ascending order (the forward's query blocks, each on the table the forward runs it on: the
 * narrow one for a short block), so every sum of dk and dv runs in one order whatever the thread
 * count, and the scores are the forward's bit for bit.
 * Workspace: one bwd_tile slice per thread (O((D + BK) x QB + BK x D) floats) plus the key norms
 * (as the forward's) and the segment rows: it grows with B*H and Skv, never with S x S. */
/* Query tiles a backward group walks the key blocks with (cpu_kernels.h, bwd_tile): the bits
 * do not depend on it. Per tile its state (3 D QB floats) and its q and dout rows stay in L2
 * beside the key block's K, V, dK and dV rows: 4 tiles of 48 queries at D = 128 are ~0.5 MB. */
#define CPU_BWD_GROUP 4

static jattn_status cpu_backward_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    jattn_status st = cpu_select(p, e, plan);
    if (st != JATTN_OK) return st;
    plan->selection.kernel = ((const cpu_kernels *)plan->kernel)->bwd_kernel;
    return JATTN_OK;
}

/* Threads used: all of them; with fewer heads than threads the two-phase schedule
 * (cpu_backward) gives every thread work. */
static int bwd_threads_used(int threads) { return threads; }

static size_t cpu_backward_workspace(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    const cpu_kernels *kern = plan->kernel;
    return ((size_t)bwd_threads_used(plan->threads) *
                (size_t)cpu_bwd_tile_workspace_floats(kern, p->head_dim, CPU_BWD_GROUP,
                                                      (plan->features & GRID_FEATURES) != 0) +
            (size_t)norm_floats(p, plan) + (size_t)qpart_floats(p, plan)) *
           sizeof(float);
}

static void zero_rows(float *x, jattn_strides s, int64_t b, int64_t h, int64_t rows, int64_t D) {
    float *base = x + b * s.batch + h * s.head;
    for (int64_t j = 0; j < rows; j++) memset(base + j * s.token, 0, (size_t)D * sizeof *base);
}

/* The query heads of (b, hk), each unit of its tiles in ascending order, that overlap the query
 * rows [qlo, qhi), against the key blocks whose first key is in [j0, j1), the given parts. */
static void backward_units(const cpu_bwd_args *a, const qpart *q, int64_t b, int64_t hk, int64_t qlo, int64_t qhi,
                           int64_t j0, int64_t j1, int parts, float *ws) {
    const int64_t group = a->f.H / a->f.Hkv, nu = qpart_units(q, b);
    for (int64_t h = hk * group; h < (hk + 1) * group; h++)
        for (int64_t u = 0; u < nu; u++) {
            cpu_qblock blk[CPU_GROUP_MAX] = {{0, 0}}; /* set: gcc cannot see that qpart_unit fills n >= 1 */
            const cpu_kernels *k;
            const int n = qpart_unit(q, b, u, blk, &k);
            if (blk[n - 1].q0 + blk[n - 1].nq <= qlo || blk[0].q0 >= qhi) continue;
            k->bwd_tile(a, b, h, blk, n, j0, j1, parts, ws);
        }
}

/* List mode, two phases: the first key of list block x of batch b (the (x BK)-th attended key), or
 * the end of its keys. */
static int64_t list_block_start(const cpu_flash_args *a, int64_t bk, int64_t b, int64_t x) {
    const int64_t end = a->kv_len ? a->kv_len[b] : a->Skv, want = x * bk;
    if (!a->mask) return want < end ? want : end;
    const uint8_t *m = a->mask + b * a->mask_stride;
    int64_t seen = 0;
    for (int64_t j = 0; j < end; j++)
        if (m[j] && seen++ == want) return j;
    return end;
}

/* The backward's loops' view of a call (the schedules below). */
typedef struct backward_loop {
    const jattn_call *c;
    const cpu_kernels *kern;
    const cpu_bwd_args *a;
    const qpart *q;
    float *ws; /* thread i's slice at ws + i per_thread */
    int64_t per_thread;
    int64_t run, runs, nseg; /* phase 1 */
} backward_loop;

/* One phase: the whole (b, hk) = bh. */
static void backward_head(void *arg, int64_t bh, int thread) {
    const backward_loop *l = arg;
    const jattn_call *c = l->c;
    const jattn_problem *p = c->problem;
    float *mine = l->ws + (int64_t)thread * l->per_thread;
    const int64_t b = bh / p->kv_heads, hk = bh % p->kv_heads;
    zero_rows(c->dk, c->g.dk, b, hk, p->seq_kv, p->head_dim);
    zero_rows(c->dv, c->g.dv, b, hk, p->seq_kv, p->head_dim);
    backward_units(l->a, l->q, b, hk, 0, p->seq_q, 0, INT64_MAX, CPU_BWD_DKV | CPU_BWD_DQ, mine);
}

/* Two phases, before phase 1: zero dk, dv of (b, hk) = bh. */
static void backward_zero_head(void *arg, int64_t bh, int thread) {
    (void)thread;
    const jattn_call *c = ((const backward_loop *)arg)->c;
    const jattn_problem *p = c->problem;
    zero_rows(c->dk, c->g.dk, bh / p->kv_heads, bh % p->kv_heads, p->seq_kv, p->head_dim);
    zero_rows(c->dv, c->g.dv, bh / p->kv_heads, bh % p->kv_heads, p->seq_kv, p->head_dim);
}

/* Phase 1: dk, dv of (b, hk), run r of its key blocks (grid mode: of segment s's cells). */
static void backward_key_run(void *arg, int64_t task, int thread) {
    const backward_loop *l = arg;
    const jattn_call *c = l->c;
    const jattn_problem *p = c->problem;
    const cpu_kernels *kern = l->kern;
    const cpu_bwd_args *a = l->a;
    const int64_t run = l->run, runs = l->runs, nseg = l->nseg;
    float *mine = l->ws + (int64_t)thread * l->per_thread;
    const int64_t bh = task / (nseg * runs), s = task / runs % nseg, r = task % runs;
    const int64_t b = bh / p->kv_heads, hk = bh % p->kv_heads;
    int64_t qlo, qhi, klo, khi, j0, j1;
    if (!a->f.grid) {
        qlo = 0, qhi = p->seq_q;
        j0 = list_block_start(&a->f, kern->bk, b, r * run), j1 = list_block_start(&a->f, kern->bk, b, (r + 1) * run);
    } else { /* the segment's cells: run r of ceil(keys / BK) */
        segment_keys(c, b, s, &qlo, &qhi, &klo, &khi);
        const int64_t cells = (khi - klo + kern->bk - 1) / kern->bk;
        const int64_t c0 = cells * r / runs, c1 = cells * (r + 1) / runs;
        j0 = klo + c0 * kern->bk, j1 = klo + c1 * kern->bk < khi ? klo + c1 * kern->bk : khi;
        if (c1 == c0 || qhi <= qlo) return;
    }
    if (j1 > j0) backward_units(a, l->q, b, hk, qlo, qhi, j0, j1, CPU_BWD_DKV, mine);
}

/* Phase 2: dq of one tile group of (b, h), every key block. */
static void backward_query_group(void *arg, int64_t task, int thread) {
    const backward_loop *l = arg;
    const jattn_problem *p = l->c->problem;
    const qpart *q = l->q;
    float *mine = l->ws + (int64_t)thread * l->per_thread;
    int64_t b = 0, rest = task;
    if (q->rows > 1)
        for (; rest >= p->heads * qpart_units(q, b); b++) rest -= p->heads * qpart_units(q, b);
    else {
        b = task / (p->heads * qpart_units(q, 0));
        rest = task % (p->heads * qpart_units(q, 0));
    }
    const int64_t nu = qpart_units(q, b), h = rest / nu, u = rest % nu;
    cpu_qblock blk[CPU_GROUP_MAX];
    const cpu_kernels *k;
    const int n = qpart_unit(q, b, u, blk, &k);
    k->bwd_tile(l->a, b, h, blk, n, 0, INT64_MAX, CPU_BWD_DQ, mine);
}

/* Schedules. B*Hkv >= 5/7 of the threads: task = one (b, hk), its query heads' tile groups in
 * ascending order, each for every key block and every part. Fewer heads (two phases, so that every
 * thread has work): phase 1, task = (b, hk, a run of key blocks; grid mode: of one segment's
 * cells): every query head's tile groups in ascending order against those key blocks, dk and dv
 * only; phase 2, task = (b, h, tile group): dq only, every key block. The two phases recompute S, P,
 * dP and dS (7 products instead of 5), hence the 5/7; every sum runs in the same order as in the
 * one-phase schedule: each dk, dv row gets the shares of the query heads in ascending order and
 * of their tiles in ascending order, each dq row its key blocks in ascending order, so the bits
 * are the same whatever the schedule and the thread count. */
static jattn_status cpu_backward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const cpu_kernels *kern = plan->kernel;
    const int64_t per_thread =
        cpu_bwd_tile_workspace_floats(kern, p->head_dim, CPU_BWD_GROUP, (plan->features & GRID_FEATURES) != 0);
    float *ws = c->workspace;
    const int threads = bwd_threads_used(c->threads);
    float *norms = ws + (int64_t)threads * per_thread; /* 64-byte aligned */
    float *seg_ws = norms + norm_floats(p, plan);
    const cpu_bwd_args a = {flash_args(c, plan, norms),
                            c->out,
                            c->lse,
                            c->dout,
                            c->dlse,
                            c->dq,
                            c->dk,
                            c->dv,
                            c->g.dout,
                            c->g.dq,
                            c->g.dk,
                            c->g.dv};
    const qpart q = qpart_make(c, plan, CPU_BWD_GROUP, threads, seg_ws);
    compute_norms(kern, &a.f, c, norms, threads);
    const int64_t heads = p->batch * p->kv_heads;
    backward_loop l = {.c = c, .kern = kern, .a = &a, .q = &q, .ws = ws, .per_thread = per_thread};
    if (5 * (int64_t)threads <= 7 * heads) { /* the two phases do 7/5 of the work: worth it below 5/7 heads a thread */
        jattn_parallel_for(heads, threads, backward_head, &l);
        return JATTN_OK;
    }
    jattn_parallel_for(heads, threads, backward_zero_head, &l);
    /* phase 1: runs of key blocks, ~4 tasks a thread (the blocks past a batch's last attended key
     * make empty tasks); grid mode: runs of each segment's cells */
    const int64_t kblocks = (p->seq_kv + kern->bk - 1) / kern->bk;
    const int64_t nseg = a.f.grid && c->cu_seqlens_q ? c->num_segments : 1;
    int64_t run = (heads * kblocks + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads), runs;
    if (run < 1) run = 1;
    if (!a.f.grid)
        runs = (kblocks + run - 1) / run;
    else { /* each segment's cells cut into `runs` runs */
        runs = (4 * (int64_t)threads + heads * nseg - 1) / (heads * nseg);
        if (runs > kblocks) runs = kblocks;
    }
    l.run = run, l.runs = runs, l.nseg = nseg;
    jattn_parallel_for(heads * nseg * runs, threads, backward_key_run, &l);
    /* phase 2: dq, one tile group a task */
    int64_t tasks = 0;
    for (int64_t b = 0; b < (q.rows > 1 ? p->batch : 1); b++) tasks += qpart_units(&q, b);
    if (q.rows <= 1) tasks *= p->batch;
    jattn_parallel_for(tasks * p->heads, threads, backward_query_group, &l);
    return JATTN_OK;
}

const jattn_backend_ops jattn_backend_cpu = {
    .id = JATTN_BACKEND_CPU,
    .is_gpu = 0,
    .workspace_memory = JATTN_MEMORY_HOST,
    .select = cpu_select,
    .workspace_size = cpu_workspace,
    .forward = cpu_forward,
    .select_backward = cpu_backward_select,
    .workspace_size_backward = cpu_backward_workspace,
    .backward = cpu_backward,
};
