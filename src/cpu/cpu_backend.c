/* The cpu backend: the portable driver of the flash micro-kernels (cpu_kernels.h).
 *
 * Tasks are (b, h, query block of QB queries), B*H*ceil(Sq/QB) of them, spread over OpenMP
 * threads (dynamic schedule). Each task is computed start to finish by one thread in a fixed
 * order and owns its output rows, so the output is bitwise identical for every thread count
 * and every run. Workspace: one slice of cpu_task_workspace_floats() per thread, O(threads x
 * (D + BK) x QB), nothing of size S x S. */
#include <stdlib.h>

#include "../backend.h"
#include "cpu_kernels.h"

#define LOG2E 1.4426950408889634074

int64_t cpu_task_workspace_floats(const cpu_kernels *kern, int64_t D) {
    const int64_t floats = (int64_t)kern->qb * (2 * D + 2 * (int64_t)kern->bk + 4);
    const int64_t line = 64 / (int64_t)sizeof(float);
    return (floats + line - 1) / line * line;
}

static jattn_status cpu_select(const jattn_problem *p, const jattn_exec *e, jattn_selection *sel) {
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
    sel->backend = JATTN_BACKEND_CPU;
    sel->backend_name = "cpu";
    sel->kernel = kern->kernel;
    sel->isa = kern->isa;
    sel->threads = jattn_resolve_threads(e->threads);
    return JATTN_OK;
}

static const cpu_kernels *kernels_of(const jattn_selection *sel) {
    const cpu_kernels *all[8];
    int n = cpu_kernels_available(all, 8);
    for (int i = 0; i < n; i++)
        if (all[i]->kernel == sel->kernel) return all[i];
    return NULL;
}

static int64_t task_count(const jattn_problem *p, const cpu_kernels *kern) {
    return p->batch * p->heads * ((p->seq_q + kern->qb - 1) / kern->qb);
}

/* Threads actually used: no more than there are tasks. */
static int threads_used(const jattn_problem *p, const cpu_kernels *kern, int threads) {
    const int64_t tasks = task_count(p, kern);
    return tasks < threads ? (int)tasks : threads;
}

static size_t cpu_workspace(const jattn_problem *p, const jattn_exec *e, const jattn_selection *sel) {
    (void)e;
    const cpu_kernels *kern = kernels_of(sel);
    if (!kern) return 0;
    return (size_t)threads_used(p, kern, sel->threads) * (size_t)cpu_task_workspace_floats(kern, p->head_dim) *
           sizeof(float);
}

static jattn_status cpu_forward(const jattn_call *c, const jattn_selection *sel) {
    const jattn_problem *p = c->problem;
    const cpu_kernels *kern = kernels_of(sel);
    if (!kern) return jattn_fail(JATTN_ERROR_UNSUPPORTED, "kernel: %s is not available on this CPU", sel->kernel);
    const cpu_flash_args a = {c->q,      c->k,      c->v,         c->out,     c->lse, p->batch, p->heads,
                              p->seq_q,  p->seq_kv, p->head_dim, p->q,      p->k,   p->v,     p->out,
                              c->scale,  (float)((double)c->scale * LOG2E)};
    const int64_t qblocks = (p->seq_q + kern->qb - 1) / kern->qb;
    const int64_t tasks = task_count(p, kern);
    const int64_t per_thread = cpu_task_workspace_floats(kern, p->head_dim);
    float *ws = c->workspace;
    const int threads = threads_used(p, kern, c->threads);
    (void)threads; /* read by the OpenMP pragma only */
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t t = 0; t < tasks; t++) {
        float *mine = ws + (int64_t)jattn_thread_index() * per_thread;
        const int64_t bh = t / qblocks;
        kern->task(&a, bh / p->heads, bh % p->heads, t % qblocks, mine);
    }
    return JATTN_OK;
}

const jattn_backend_ops jattn_backend_cpu = {
    JATTN_BACKEND_CPU, "cpu", cpu_select, cpu_workspace, cpu_forward, NULL,
};
