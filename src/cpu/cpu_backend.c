/* The cpu backend: the portable driver of the flash micro-kernels (cpu_kernels.h).
 *
 * Tasks are (b, h, group of up to CPU_GROUP_MAX query blocks of QB queries), spread over OpenMP
 * threads (dynamic schedule); the blocks of a group walk the key blocks together, so that each
 * K/V block is reused from L2 (NOTES.md §1). Each query block is computed by one thread in a
 * fixed order whatever its group and owns its output rows, so the output is bitwise identical
 * for every thread count, group size and run. Key padding: each task walks only the keys its
 * batch attends (cpu_key_blocks), so blocks past kv_len are never loaded and masked keys never
 * read. Workspace: one slice of cpu_task_workspace_floats() per thread, O(threads x (group D +
 * BK) x QB), nothing of size S x S. */
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "cpu_kernels.h"

#define LOG2E 1.4426950408889634074

int64_t cpu_norm_workspace_floats(int64_t batch, int64_t heads) {
    const int64_t line = 64 / (int64_t)sizeof(float);
    return (2 * batch * heads + line - 1) / line * line;
}

static jattn_status cpu_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    if (e->memory != JATTN_MEMORY_HOST)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "exec.memory: the cpu backend reads host memory only");
    if (e->precision != JATTN_PRECISION_F32)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "exec.precision: the cpu backend computes f32 only");
    jattn_status st = jattn_refuse_features(plan, JATTN_FEATURE_KEY_PADDING, "the cpu backend");
    if (st != JATTN_OK) return st;
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

/* How the forward's work is cut into tasks: per (b, h), groups of up to `group` query blocks
 * of kern->qb queries, the blocks of a group walking the key blocks together (cpu_kernels.h,
 * task), and the head's last block on its own when it is short enough for a narrower table. */
typedef struct fwd_split {
    int group;           /* query blocks per group */
    int64_t main_blocks; /* blocks per head run on kern (in groups) */
    int64_t groups;      /* groups per head of those */
    int64_t per_head;    /* tasks per head: groups, plus 1 for a narrow last block */
    int64_t tasks;       /* B * H * per_head */
} fwd_split;

/* The group: as many blocks as CPU_GROUP_MAX while every thread keeps ~8 tasks to balance (the
 * bits do not depend on it: each block's arithmetic is the same in any group). */
static fwd_split forward_split(const jattn_problem *p, const cpu_kernels *kern, int threads) {
    const int64_t qblocks = (p->seq_q + kern->qb - 1) / kern->qb;
    const int64_t last = p->seq_q - (qblocks - 1) * kern->qb; /* queries in the last block */
    fwd_split s;
    s.main_blocks = kern->narrow && kern->narrow->qb >= last ? qblocks - 1 : qblocks;
    s.group = CPU_GROUP_MAX;
    while (s.group > 1 && (s.group / 2 >= s.main_blocks ||
                           p->batch * p->heads * ((s.main_blocks + s.group - 1) / s.group) < 8 * (int64_t)threads))
        s.group /= 2;
    s.groups = (s.main_blocks + s.group - 1) / s.group;
    s.per_head = s.groups + (qblocks - s.main_blocks);
    s.tasks = p->batch * p->heads * s.per_head;
    return s;
}

/* Threads actually used: no more than there are tasks. */
static int threads_used(const fwd_split *s, int threads) { return s->tasks < threads ? (int)s->tasks : threads; }

static size_t cpu_workspace(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    const cpu_kernels *kern = plan->kernel;
    const fwd_split s = forward_split(p, kern, plan->threads);
    return ((size_t)threads_used(&s, plan->threads) * (size_t)cpu_task_workspace_floats(kern, p->head_dim, s.group) +
            (size_t)cpu_norm_workspace_floats(p->batch, p->heads)) *
           sizeof(float);
}

/* The largest |k|^2 over the attended keys of each (b, h): half of the a-priori logit bound by
 * which a task picks the plain or the compensated scores kernel (cpu_forward_template.h, task);
 * keys left out by the padding are not read, so they cannot change that choice. The forward and
 * the backward compute it alike, so that the backward's scores are the forward's. */
static void key_norms(const cpu_kernels *kern, const cpu_flash_args *a, double *k_norm2, int threads) {
    (void)threads; /* read by the OpenMP pragma only */
    const int64_t heads = a->B * a->H;
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t bh = 0; bh < heads; bh++) {
        const int64_t b = bh / a->H;
        const float *kh = a->k + b * a->ks.batch + bh % a->H * a->ks.head;
        if (!a->mask) { /* the attended keys are rows [0, kv_len or Skv) */
            k_norm2[bh] = kern->max_row_norm2(a->kv_len ? a->kv_len[b] : a->Skv, a->D, kh, a->ks.token);
            continue;
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
}

static jattn_status cpu_forward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const cpu_kernels *kern = plan->kernel;
    const fwd_split sp = forward_split(p, kern, c->threads);
    const int64_t per_thread = cpu_task_workspace_floats(kern, p->head_dim, sp.group);
    float *ws = c->workspace;
    const int threads = threads_used(&sp, c->threads);
    (void)threads; /* read by the OpenMP pragma only */

    double *k_norm2 = (double *)(ws + (int64_t)threads * per_thread); /* 64-byte aligned */
    const cpu_flash_args a = {
        c->q,      c->k,        c->v,    c->out,        c->lse, p->batch, p->heads, p->seq_q,
        p->seq_kv, p->head_dim, p->q,    p->k,          p->v,   p->out,   c->scale, (float)((double)c->scale * LOG2E),
        k_norm2,   c->kv_len,   c->mask, c->mask_stride};

    key_norms(kern, &a, k_norm2, threads);
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t t = 0; t < sp.tasks; t++) {
        float *mine = ws + (int64_t)jattn_thread_index() * per_thread;
        const int64_t bh = t / sp.per_head, gi = t % sp.per_head;
        if (gi < sp.groups) {
            const int64_t first = gi * sp.group;
            const int64_t nblk = sp.main_blocks - first < sp.group ? sp.main_blocks - first : sp.group;
            kern->task(&a, bh / p->heads, bh % p->heads, first * kern->qb, (int)nblk, mine);
            continue;
        }
        /* the head's short last block, on the narrowest table that holds it */
        const int64_t q0 = sp.main_blocks * kern->qb, n = p->seq_q - q0;
        const cpu_kernels *k = kern;
        while (k->narrow && k->narrow->qb >= n) k = k->narrow;
        k->task(&a, bh / p->heads, bh % p->heads, q0, 1, mine);
    }
    return JATTN_OK;
}

/* ---- backward ----------------------------------------------------------------------------
 * Tasks are whole (b, h): B*H of them over OpenMP threads. A task zeroes its dk, dv rows, then
 * runs bwd_tile on its query tiles in ascending order (each on the table the forward's task of
 * the same queries runs: the narrow one for a short last tile), so every sum of dk and dv runs
 * in one order whatever the thread count, and the scores are the forward's bit for bit.
 * Workspace: one bwd_tile slice per thread (O((D + BK) x QB + BK x D) floats) plus the key
 * norms (B*H doubles): it grows with B*H, never with the sequence. */
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
                (size_t)cpu_bwd_tile_workspace_floats(kern, p->head_dim, CPU_BWD_GROUP) +
            (size_t)cpu_norm_workspace_floats(p->batch, p->heads)) *
           sizeof(float);
}

static void zero_rows(float *x, jattn_strides s, int64_t b, int64_t h, int64_t rows, int64_t D) {
    float *base = x + b * s.batch + h * s.head;
    for (int64_t j = 0; j < rows; j++) memset(base + j * s.token, 0, (size_t)D * sizeof *base);
}

/* The query tiles of a head as the backward runs them: groups of CPU_BWD_GROUP full tiles in
 * ascending order, then a short last tile on the forward's table for those queries (the
 * narrowest that holds it). */
typedef struct bwd_tiles {
    int64_t main_tiles, groups, last; /* last: queries of the short last tile, 0 when none */
    const cpu_kernels *last_kern;
} bwd_tiles;

static bwd_tiles backward_tiles(const jattn_problem *p, const cpu_kernels *kern) {
    bwd_tiles t;
    const int64_t tiles = (p->seq_q + kern->qb - 1) / kern->qb, last = p->seq_q - (tiles - 1) * kern->qb;
    t.main_tiles = kern->narrow && kern->narrow->qb >= last ? tiles - 1 : tiles;
    t.groups = (t.main_tiles + CPU_BWD_GROUP - 1) / CPU_BWD_GROUP;
    t.last = t.main_tiles < tiles ? last : 0;
    t.last_kern = kern;
    while (t.last && t.last_kern->narrow && t.last_kern->narrow->qb >= last) t.last_kern = t.last_kern->narrow;
    return t;
}

/* Group gi of the head's tiles (gi == groups: the short last tile) against the key blocks
 * [kb0, kb0 + nkb) (nkb < 0: all), the given parts. */
static void backward_group(const cpu_bwd_args *a, const cpu_kernels *kern, const bwd_tiles *t, int64_t b, int64_t h,
                           int64_t gi, int64_t kb0, int64_t nkb, int parts, float *ws) {
    if (gi < t->groups) {
        const int64_t t0 = gi * CPU_BWD_GROUP;
        const int64_t nt = t->main_tiles - t0 < CPU_BWD_GROUP ? t->main_tiles - t0 : CPU_BWD_GROUP;
        kern->bwd_tile(a, b, h, t0 * kern->qb, (int)nt, kb0, nkb, parts, ws);
    } else
        t->last_kern->bwd_tile(a, b, h, t->main_tiles * kern->qb, 1, kb0, nkb, parts, ws);
}

/* Schedules. B*H >= 5/7 of the threads: task = one (b, h), its tile groups in ascending order,
 * each for every key block and every part. Fewer heads (two phases, so that every thread has
 * work): phase 1, task = (b, h, a run of key blocks): every tile group in ascending order
 * against those key blocks, dk and dv only; phase 2, task = (b, h, tile group): dq only, every
 * key block. The two phases recompute S, P, dP and dS (7 products instead of 5), hence the 5/7;
 * every sum runs in the same order as in the one-phase schedule: each dk, dv row gets the tiles'
 * shares in ascending tile order, each dq row its key blocks in ascending order, so the bits
 * are the same whatever the schedule and the thread count. */
static jattn_status cpu_backward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const cpu_kernels *kern = plan->kernel;
    const int64_t per_thread = cpu_bwd_tile_workspace_floats(kern, p->head_dim, CPU_BWD_GROUP);
    float *ws = c->workspace;
    const int threads = bwd_threads_used(c->threads);
    double *k_norm2 = (double *)(ws + (int64_t)threads * per_thread); /* 64-byte aligned */
    const cpu_bwd_args a = {
        {c->q,      c->k,        c->v,    NULL,          NULL, p->batch, p->heads, p->seq_q,
         p->seq_kv, p->head_dim, p->q,    p->k,          p->v, p->out,   c->scale, (float)((double)c->scale * LOG2E),
         k_norm2,   c->kv_len,   c->mask, c->mask_stride},
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
    key_norms(kern, &a.f, k_norm2, threads);
    const int64_t heads = p->batch * p->heads;
    const bwd_tiles t = backward_tiles(p, kern);
    const int64_t per_head = t.groups + (t.last ? 1 : 0);
    if (5 * (int64_t)threads <= 7 * heads) { /* the two phases do 7/5 of the work: worth it below 5/7 heads a thread */
        JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
        for (int64_t bh = 0; bh < heads; bh++) {
            float *mine = ws + (int64_t)jattn_thread_index() * per_thread;
            const int64_t b = bh / p->heads, h = bh % p->heads;
            zero_rows(c->dk, c->g.dk, b, h, p->seq_kv, p->head_dim);
            zero_rows(c->dv, c->g.dv, b, h, p->seq_kv, p->head_dim);
            for (int64_t gi = 0; gi < per_head; gi++)
                backward_group(&a, kern, &t, b, h, gi, 0, -1, CPU_BWD_DKV | CPU_BWD_DQ, mine);
        }
        return JATTN_OK;
    }
    /* phase 1: runs of key blocks, ~4 tasks a thread (the blocks past a batch's last attended
     * key make empty tasks) */
    const int64_t kblocks = (p->seq_kv + kern->bk - 1) / kern->bk;
    int64_t run = (heads * kblocks + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
    if (run < 1) run = 1;
    const int64_t runs = (kblocks + run - 1) / run;
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t bh = 0; bh < heads; bh++) {
        zero_rows(c->dk, c->g.dk, bh / p->heads, bh % p->heads, p->seq_kv, p->head_dim);
        zero_rows(c->dv, c->g.dv, bh / p->heads, bh % p->heads, p->seq_kv, p->head_dim);
    }
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t task = 0; task < heads * runs; task++) {
        float *mine = ws + (int64_t)jattn_thread_index() * per_thread;
        const int64_t bh = task / runs, kb0 = task % runs * run;
        for (int64_t gi = 0; gi < per_head; gi++)
            backward_group(&a, kern, &t, bh / p->heads, bh % p->heads, gi, kb0, run, CPU_BWD_DKV, mine);
    }
    /* phase 2: dq, one tile group a task */
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t task = 0; task < heads * per_head; task++) {
        float *mine = ws + (int64_t)jattn_thread_index() * per_thread;
        const int64_t bh = task / per_head;
        backward_group(&a, kern, &t, bh / p->heads, bh % p->heads, task % per_head, 0, -1, CPU_BWD_DQ, mine);
    }
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
