/* The cpu backend: the portable driver of the flash micro-kernels (cpu_kernels.h).
 *
 * Tasks are (b, h, query block of QB queries), B*H*ceil(Sq/QB) of them, spread over OpenMP
 * threads (dynamic schedule). Each task is computed start to finish by one thread in a fixed
 * order and owns its output rows, so the output is bitwise identical for every thread count
 * and every run. Key padding: each task walks only the keys its batch attends (cpu_key_blocks),
 * so blocks past kv_len are never loaded and masked keys never read. Workspace: one slice of cpu_task_workspace_floats() per thread, O(threads x
 * (D + BK) x QB), nothing of size S x S. */
#include <stdlib.h>

#include "../backend.h"
#include "cpu_kernels.h"

#define LOG2E 1.4426950408889634074

int64_t cpu_task_workspace_floats(const cpu_kernels *kern, int64_t D) {
    const int64_t low = D <= CPU_EXACT_HEAD_DIM ? D : 0; /* pv_exact's low parts of Ot */
    const int64_t packed = 2 * (int64_t)kern->bk * D; /* pk, pv: a gapped key block's rows */
    const int64_t floats = (int64_t)kern->qb * (2 * D + 2 * (int64_t)kern->bk + 4 + low) + packed;
    const int64_t line = 64 / (int64_t)sizeof(float);
    return (floats + line - 1) / line * line;
}

int64_t cpu_norm_workspace_floats(int64_t batch, int64_t heads) {
    const int64_t line = 64 / (int64_t)sizeof(float);
    return (2 * batch * heads + line - 1) / line * line;
}

static jattn_status cpu_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    if (e->memory != JATTN_MEMORY_HOST)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "exec.memory: the cpu backend reads host memory only");
    if (e->precision != JATTN_PRECISION_F32)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "exec.precision: the cpu backend computes f32 only");
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

static int64_t task_count(const jattn_problem *p, const cpu_kernels *kern) {
    return p->batch * p->heads * ((p->seq_q + kern->qb - 1) / kern->qb);
}

/* Threads actually used: no more than there are tasks. */
static int threads_used(const jattn_problem *p, const cpu_kernels *kern, int threads) {
    const int64_t tasks = task_count(p, kern);
    return tasks < threads ? (int)tasks : threads;
}

static size_t cpu_workspace(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    const cpu_kernels *kern = plan->kernel;
    return ((size_t)threads_used(p, kern, plan->threads) * (size_t)cpu_task_workspace_floats(kern, p->head_dim) +
            (size_t)cpu_norm_workspace_floats(p->batch, p->heads)) *
           sizeof(float);
}

static jattn_status cpu_forward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const cpu_kernels *kern = plan->kernel;
    const int64_t qblocks = (p->seq_q + kern->qb - 1) / kern->qb;
    const int64_t tasks = task_count(p, kern);
    const int64_t per_thread = cpu_task_workspace_floats(kern, p->head_dim);
    float *ws = c->workspace;
    const int threads = threads_used(p, kern, c->threads);
    (void)threads; /* read by the OpenMP pragma only */

    double *k_norm2 = (double *)(ws + (int64_t)threads * per_thread); /* 64-byte aligned */
    const cpu_flash_args a = {c->q,      c->k,      c->v,         c->out,     c->lse, p->batch, p->heads,
                              p->seq_q,  p->seq_kv, p->head_dim, p->q,      p->k,   p->v,     p->out,
                              c->scale,  (float)((double)c->scale * LOG2E), k_norm2, c->kv_len, c->mask,
                              c->mask_stride};

    /* The largest |k|^2 over the attended keys of each (b, h): half of the a-priori logit bound
     * by which a task picks the plain or the compensated scores kernel (cpu_flash_template.h,
     * task); keys left out by the padding are not read, so they cannot change that choice. */
    const int64_t heads = p->batch * p->heads;
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t bh = 0; bh < heads; bh++) {
        const int64_t b = bh / p->heads;
        const float *kh = c->k + b * p->k.batch + bh % p->heads * p->k.head;
        if (!a.mask) { /* the attended keys are rows [0, kv_len or Skv) */
            k_norm2[bh] = kern->max_row_norm2(a.kv_len ? a.kv_len[b] : p->seq_kv, p->head_dim, kh, p->k.token);
            continue;
        }
        cpu_key_blocks keys;
        cpu_key_blocks_init(&keys, &a, b);
        int64_t rows[256];
        double best = 0.0;
        for (int n; (n = cpu_key_blocks_next(&keys, 256, rows)) > 0;) {
            /* runs of consecutive attended rows at a time */
            for (int r0 = 0, r1; r0 < n; r0 = r1) {
                for (r1 = r0 + 1; r1 < n && rows[r1] == rows[r1 - 1] + 1; r1++) {
                }
                const double run = kern->max_row_norm2(r1 - r0, p->head_dim, kh + rows[r0] * p->k.token, p->k.token);
                if (run > best) best = run;
            }
        }
        k_norm2[bh] = best;
    }
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t t = 0; t < tasks; t++) {
        float *mine = ws + (int64_t)jattn_thread_index() * per_thread;
        const int64_t bh = t / qblocks, q0 = t % qblocks * kern->qb;
        const int64_t n = p->seq_q - q0 < kern->qb ? p->seq_q - q0 : kern->qb;
        const cpu_kernels *k = kern; /* a short block runs on the narrowest table that holds it */
        while (k->narrow && k->narrow->qb >= n) k = k->narrow;
        k->task(&a, bh / p->heads, bh % p->heads, q0, mine);
    }
    return JATTN_OK;
}

const jattn_backend_ops jattn_backend_cpu = {
    JATTN_BACKEND_CPU, cpu_select, cpu_workspace, cpu_forward, NULL, JATTN_MEMORY_HOST,
};
