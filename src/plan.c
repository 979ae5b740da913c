/* Dispatch: plans (jattn.h, jattn_plan_create) and the one path that runs them.
 *
 * Every public call, forward or backward, one-call or planned, goes the same way:
 *   plan_init   validates the problem, the gradient strides, the exec and the mask's structure
 *               once, asks the backends (the exec's, or AUTO's order) which can run it and with
 *               which kernel, and sizes its workspace;
 *   run_plan    checks the run's pointers and mask arrays against the plan, finds the workspace,
 *               writes the answer of an empty problem itself or hands the call, unchanged, to the
 *               kernel the plan chose.
 * The one-call functions make their plan on the stack, for the alignment their pointers have, and
 * run it once: there is no second decision, so what a plan's selection names is what runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "validate.h"

static const jattn_exec default_exec;

/* Caller workspaces are aligned inside, so the size reported includes 63 bytes of slack. */
#define WORKSPACE_SLACK 63

/* ---- making a plan -------------------------------------------------------------------- */

static unsigned features_of(const jattn_problem *p, const jattn_mask_shape *m) {
    unsigned f = 0;
    if (m->kv_len || m->mask) f |= JATTN_FEATURE_KEY_PADDING;
    if (m->causal != JATTN_CAUSAL_NONE) f |= JATTN_FEATURE_CAUSAL;
    if (m->num_blocks) f |= JATTN_FEATURE_BLOCKS;
    if (m->num_segments) f |= JATTN_FEATURE_SEGMENTS;
    if (m->key_bias) f |= JATTN_FEATURE_KEY_BIAS;
    if (p->kv_heads < p->heads) f |= JATTN_FEATURE_GQA;
    return f;
}

/* Asks one backend; on success its kernel choice is in the plan. The problem it is asked about is
 * the plan's, or for an empty plan the same problem with every empty dimension 1 (a backend's
 * select answers whether it is present and able; an empty problem runs no kernel). */
static jattn_status ask_backend(const jattn_backend_ops *ops, const jattn_exec *e, jattn_plan *plan) {
    plan->ops = ops;
    plan->kernel = NULL;
    plan->threads = 1;
    memset(&plan->selection, 0, sizeof plan->selection);
    if (plan->pass == JATTN_PASS_BACKWARD && !ops->select_backward)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "backend: %s has no backward", jattn_backend_name(ops->id));
    jattn_problem stand_in = plan->problem;
    if (plan->empty) {
        int64_t *dims[4] = {&stand_in.batch, &stand_in.heads, &stand_in.seq_q, &stand_in.seq_kv};
        for (int i = 0; i < 4; i++)
            if (*dims[i] == 0) *dims[i] = 1;
        if (stand_in.kv_heads == 0) stand_in.kv_heads = 1;
    }
    const jattn_problem *p = plan->empty ? &stand_in : &plan->problem;
    jattn_status st = plan->pass == JATTN_PASS_FORWARD ? ops->select(p, e, plan) : ops->select_backward(p, e, plan);
    if (st != JATTN_OK) return st;
    plan->selection.backend = ops->id;
    plan->selection.backend_name = jattn_backend_name(ops->id);
    plan->selection.threads = plan->threads;
    return JATTN_OK;
}

/* The plan of a call: everything validated, the backend and kernel chosen, the workspace sized.
 * alignment: the data pointers' (0: the exec's). */
static jattn_status plan_init(jattn_plan *plan, jattn_pass pass, const jattn_problem *p, const jattn_grad_strides *grad,
                              const jattn_mask *mask, const jattn_exec *e, size_t alignment) {
    memset(plan, 0, sizeof *plan);
    problem_spans spans;
    memset(&spans, 0, sizeof spans);
    jattn_status st = jattn_check_problem(p, &spans);
    if (st != JATTN_OK) return st;
    plan->pass = pass;
    plan->problem = *p;
    if (plan->problem.kv_heads == 0) plan->problem.kv_heads = p->heads;
    if (pass == JATTN_PASS_BACKWARD) {
        plan->grad = grad ? *grad : jattn_grad_strides_like(p);
        st = jattn_check_grad(&plan->problem, &plan->grad, &spans);
        if (st != JATTN_OK) return st;
    }
    st = jattn_check_exec(e);
    if (st != JATTN_OK) return st;
    st = jattn_check_mask_shape(&plan->problem, mask, &plan->mask);
    if (st != JATTN_OK) return st;
    memcpy(plan->spans, spans.t, sizeof plan->spans);
    plan->features = features_of(&plan->problem, &plan->mask);
    plan->alignment = alignment ? alignment : e->alignment ? e->alignment : 16;
    plan->empty = p->batch == 0 || p->heads == 0 || p->seq_q == 0 || p->seq_kv == 0;
    /* A zero scale is replaced by the default only when the caller passes 0: an explicit
     * positive scale that underflows is the caller's. */
    plan->scale = p->scale > 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->head_dim));
    plan->precision = e->precision;
    plan->memory = e->memory;
    if (e->backend != JATTN_BACKEND_AUTO) {
        st = ask_backend(jattn_backend_ops_of(e->backend), e, plan);
    } else {
        char first_reason[256] = "";
        for (int i = 0; i < jattn_backend_info_count(); i++) {
            st = ask_backend(jattn_backend_ops_at_rank(i), e, plan);
            if (st == JATTN_OK) break;
            if (!first_reason[0]) snprintf(first_reason, sizeof first_reason, "%s", jattn_last_error());
        }
        if (st != JATTN_OK) return jattn_fail(st, "no backend can run this problem: %s", first_reason);
    }
    if (st != JATTN_OK) return st;
    if (plan->empty) {
        plan->kernel = NULL;
        plan->selection.kernel = "none (an empty problem: no query or no key)";
        plan->workspace_bytes = 0;
        return JATTN_OK;
    }
    plan->workspace_bytes = pass == JATTN_PASS_FORWARD ? plan->ops->workspace_size(&plan->problem, e, plan)
                                                       : plan->ops->workspace_size_backward(&plan->problem, e, plan);
    return JATTN_OK;
}

/* ---- running a plan -------------------------------------------------------------------- */

/* The data of one run: the tensors (those of the other pass NULL) and the mask. */
typedef struct run_data {
    const void *t[T_COUNT]; /* validate.h's order: q, k, v, out, lse, dout, dlse, dq, dk, dv */
    const jattn_mask *mask;
} run_data;

static const char *const tensor_names[T_COUNT] = {"q", "k", "v", "out", "lse", "dout", "dlse", "dq", "dk", "dv"};

/* The byte alignment of a pointer (its lowest set bit), capped at 256. */
static size_t pointer_alignment(const void *ptr) {
    const uintptr_t a = (uintptr_t)ptr;
    size_t al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

/* The tensors the kernels read with wide loads: the alignment a plan assumes is theirs. */
static int aligned_tensor(int t) { return t != T_LSE && t != T_DLSE; }

/* The alignment the pointers of a one-call function have (the plan it makes assumes it). */
static size_t data_alignment(const run_data *d) {
    size_t al = 256;
    for (int t = 0; t < T_COUNT; t++)
        if (d->t[t] && aligned_tensor(t)) {
            const size_t a = pointer_alignment(d->t[t]);
            if (a < al) al = a;
        }
    return al < 4 ? 4 : al;
}

/* The pointers of a run: the required ones non-NULL (a tensor without elements may be NULL),
 * each aligned to its element and to the plan's alignment, the outputs overlapping neither an
 * input nor each other (inputs may share memory). Fills the byte ranges of the outputs. */
static jattn_status check_pointers(const jattn_plan *plan, const run_data *d, byte_range *outputs, int *n_out) {
    const int fwd = plan->pass == JATTN_PASS_FORWARD;
    const int last = fwd ? T_LSE : T_DV;
    byte_range r[T_COUNT];
    int is_out[T_COUNT], n = 0;
    for (int t = 0; t <= last; t++) {
        const int optional = t == T_LSE ? fwd : t == T_DLSE;
        const int64_t span = plan->spans[t];
        if (!d->t[t]) {
            if (optional || span == 0) continue;
            return jattn_fail(JATTN_ERROR_NULL_POINTER, "%s: NULL", tensor_names[t]);
        }
        if (span == 0) continue; /* nothing is read or written there */
        jattn_status st = jattn_make_range(tensor_names[t], d->t[t], span, sizeof(float), &r[n]);
        if (st != JATTN_OK) return st;
        if (aligned_tensor(t) && pointer_alignment(d->t[t]) < plan->alignment)
            return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                              "%s: pointer %p is %zu-byte aligned; the plan's kernel (%s) was chosen for %zu-byte "
                              "aligned pointers (exec.alignment)",
                              tensor_names[t], d->t[t], pointer_alignment(d->t[t]), plan->selection.kernel,
                              plan->alignment);
        is_out[n] = fwd ? t == T_OUT || t == T_LSE : t >= T_DQ;
        n++;
    }
    *n_out = 0;
    for (int o = 0; o < n; o++) {
        if (!is_out[o]) continue;
        for (int i = 0; i < n; i++)
            if (i != o && (i < o || !is_out[i]) && jattn_ranges_overlap(&r[o], &r[i]))
                return jattn_fail(JATTN_ERROR_ALIASING, "%s: overlaps %s (%s is written, %s is %s)", r[o].name,
                                  r[i].name, r[o].name, r[i].name, is_out[i] ? "written" : "read");
        outputs[(*n_out)++] = r[o];
    }
    return JATTN_OK;
}

/* The workspace of a run: the caller's (aligned inside), nothing for a device-memory backend
 * without one, the context's grow-only buffer, or one allocated for the run (*owned, freed by the
 * caller). A caller's workspace must have the size the call's plan reports (jattn_plan_workspace_size:
 * what it needs and the slack of an unaligned pointer), whatever the pointer's alignment: one byte
 * short is refused even where an aligned pointer would leave room. */
static jattn_status acquire_workspace(const jattn_plan *plan, jattn_ctx *ctx, void *given, size_t given_bytes,
                                      const char *field, void **workspace, void **owned) {
    const size_t need = plan->workspace_bytes;
    const size_t asked = need ? need + WORKSPACE_SLACK : 0;
    *workspace = NULL;
    *owned = NULL;
    if (given && given_bytes < asked)
        return jattn_fail(JATTN_ERROR_WORKSPACE_TOO_SMALL, "%s: %zu, this call needs %zu (see %s)", field, given_bytes,
                          asked,
                          plan->pass == JATTN_PASS_FORWARD ? "jattn_workspace_size or jattn_plan_workspace_size"
                                                           : "jattn_backward_workspace_size or "
                                                             "jattn_plan_workspace_size");
    if (need == 0) return JATTN_OK;
    if (given) {
        *workspace = (void *)(((uintptr_t)given + WORKSPACE_SLACK) & ~(uintptr_t)WORKSPACE_SLACK);
    } else if (plan->ops->workspace_memory == JATTN_MEMORY_DEVICE) {
        *workspace = NULL; /* the backend finds device memory itself (backend.h) */
    } else if (ctx) {
        if (ctx->host_workspace_bytes < need) {
            void *grown = jattn_alloc_aligned(need);
            if (!grown) return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "workspace: allocation of %zu bytes failed", need);
            jattn_free_aligned(ctx->host_workspace);
            ctx->host_workspace = grown;
            ctx->host_workspace_bytes = need;
        }
        *workspace = ctx->host_workspace;
    } else {
        *owned = jattn_alloc_aligned(need);
        if (!*owned) return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "workspace: allocation of %zu bytes failed", need);
        *workspace = *owned;
    }
    return JATTN_OK;
}

/* +0 in every row of a [B, heads, S, D] tensor at its strides (host memory). Without rows it writes
 * nothing and returns at once: batch and heads may be as large as int64 allows when S is 0. */
static void zero_rows(float *x, const jattn_problem *p, int64_t heads, jattn_strides s, int64_t seq) {
    if (seq == 0 || heads == 0) return;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < seq; i++)
                memset(x + b * s.batch + h * s.head + i * s.token, 0, (size_t)p->head_dim * sizeof(float));
}

/* The answer of an empty problem in host memory (jattn.h, jattn_problem): with no key, out rows 0
 * and lse -inf (the backward: dq 0); with no query, dk = dv = 0. */
static void write_empty_host(const jattn_call *c) {
    const jattn_problem *p = c->problem;
    if (c->pass == JATTN_PASS_FORWARD) {
        if (p->seq_kv != 0) return;
        zero_rows(c->out, p, p->heads, p->out, p->seq_q);
        if (c->lse)
            for (int64_t r = 0; r < p->batch * p->heads * p->seq_q; r++) c->lse[r] = -INFINITY;
        return;
    }
    if (p->seq_kv == 0) zero_rows(c->dq, p, p->heads, c->g.dq, p->seq_q);
    if (p->seq_q == 0) {
        zero_rows(c->dk, p, p->kv_heads, c->g.dk, p->seq_kv);
        zero_rows(c->dv, p, p->kv_heads, c->g.dv, p->seq_kv);
    }
}

/* The one run path of every call. */
static jattn_status run_plan(const jattn_plan *plan, jattn_ctx *ctx, void *stream, void *workspace,
                             size_t workspace_bytes, const char *workspace_field, const run_data *d) {
    byte_range outputs[3];
    int n_out = 0;
    jattn_status st = check_pointers(plan, d, outputs, &n_out);
    if (st != JATTN_OK) return st;
    jattn_call call = {
        .problem = &plan->problem,
        .pass = plan->pass,
        .scale = plan->scale,
        .q = d->t[T_Q],
        .k = d->t[T_K],
        .v = d->t[T_V],
        .out = (float *)d->t[T_OUT], /* the backward's out is read only */
        .lse = (float *)d->t[T_LSE],
        .dout = d->t[T_DOUT],
        .dlse = d->t[T_DLSE],
        .dq = (float *)d->t[T_DQ],
        .dk = (float *)d->t[T_DK],
        .dv = (float *)d->t[T_DV],
        .g = plan->grad,
        .precision = plan->precision,
        .memory = plan->memory,
        .threads = plan->threads,
        .cuda_stream = stream,
        .ctx = ctx,
    }; /* the mask and the workspace: set below */
    st = jattn_check_mask_data(plan, d->mask, outputs, n_out, &call);
    if (st != JATTN_OK) return st;
    if (plan->empty) {
        if (plan->memory == JATTN_MEMORY_HOST) {
            write_empty_host(&call);
            return jattn_succeed();
        }
        if (!plan->ops->write_empty)
            return jattn_fail(JATTN_ERROR_UNSUPPORTED, "backend: %s cannot write an empty problem's answer",
                              plan->selection.backend_name);
        st = plan->ops->write_empty(&call, plan);
        return st == JATTN_OK ? jattn_succeed() : st;
    }
    void *owned = NULL;
    st = acquire_workspace(plan, ctx, workspace, workspace_bytes, workspace_field, &call.workspace, &owned);
    if (st != JATTN_OK) return st;
    st = plan->pass == JATTN_PASS_FORWARD ? plan->ops->forward(&call, plan) : plan->ops->backward(&call, plan);
    jattn_free_aligned(owned);
    return st == JATTN_OK ? jattn_succeed() : st;
}

/* ---- the public plans ---------------------------------------------------------------- */

jattn_status jattn_plan_create(jattn_plan **plan, jattn_pass pass, const jattn_problem *problem,
                               const jattn_grad_strides *grad, const jattn_mask *mask, const jattn_exec *exec) {
    if (!plan) return jattn_fail(JATTN_ERROR_NULL_POINTER, "plan: NULL");
    if ((int)pass != JATTN_PASS_FORWARD && (int)pass != JATTN_PASS_BACKWARD)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "pass: %d is not a jattn_pass", (int)pass);
    jattn_plan made;
    jattn_status st = plan_init(&made, pass, problem, grad, mask, exec ? exec : &default_exec, 0);
    if (st != JATTN_OK) return st;
    jattn_plan *p = malloc(sizeof *p);
    if (!p) return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "plan: allocation of %zu bytes failed", sizeof *p);
    *p = made;
    *plan = p;
    return jattn_succeed();
}

void jattn_plan_free(jattn_plan *plan) { free(plan); }

jattn_status jattn_plan_selection(const jattn_plan *plan, jattn_selection *selection) {
    if (!plan) return jattn_fail(JATTN_ERROR_NULL_POINTER, "plan: NULL");
    if (!selection) return jattn_fail(JATTN_ERROR_NULL_POINTER, "selection: NULL");
    *selection = plan->selection;
    return jattn_succeed();
}

size_t jattn_plan_workspace_size(const jattn_plan *plan) {
    return plan && plan->workspace_bytes ? plan->workspace_bytes + WORKSPACE_SLACK : 0;
}

static jattn_status check_run(const jattn_plan *plan, jattn_pass pass) {
    if (!plan) return jattn_fail(JATTN_ERROR_NULL_POINTER, "plan: NULL");
    if (plan->pass != pass)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "plan: made for the %s, run as the %s",
                          plan->pass == JATTN_PASS_FORWARD ? "forward" : "backward",
                          pass == JATTN_PASS_FORWARD ? "forward" : "backward");
    return JATTN_OK;
}

jattn_status jattn_plan_forward(const jattn_plan *plan, jattn_ctx *ctx, void *cuda_stream, void *workspace,
                                size_t workspace_bytes, const void *q, const void *k, const void *v,
                                const jattn_mask *mask, void *out, float *lse) {
    jattn_status st = check_run(plan, JATTN_PASS_FORWARD);
    if (st != JATTN_OK) return st;
    const run_data d = {{q, k, v, out, lse}, mask};
    return run_plan(plan, ctx, cuda_stream, workspace, workspace_bytes, "workspace_bytes", &d);
}

jattn_status jattn_plan_backward(const jattn_plan *plan, jattn_ctx *ctx, void *cuda_stream, void *workspace,
                                 size_t workspace_bytes, const void *q, const void *k, const void *v, const void *out,
                                 const float *lse, const void *dout, const float *dlse, const jattn_mask *mask,
                                 void *dq, void *dk, void *dv) {
    jattn_status st = check_run(plan, JATTN_PASS_BACKWARD);
    if (st != JATTN_OK) return st;
    const run_data d = {{q, k, v, out, lse, dout, dlse, dq, dk, dv}, mask};
    return run_plan(plan, ctx, cuda_stream, workspace, workspace_bytes, "workspace_bytes", &d);
}

/* ---- the one-call functions: a plan on the stack, run once ------------------------------ */

/* A one-call function's run: the plan made for its pointers' alignment, then run with the
 * exec's stream and workspace. */
static jattn_status plan_and_run(jattn_pass pass, jattn_ctx *ctx, const jattn_problem *problem,
                                 const jattn_grad_strides *grad, const jattn_exec *exec, const jattn_mask *mask,
                                 const run_data *d) {
    const jattn_exec *e = exec ? exec : &default_exec;
    jattn_plan plan;
    jattn_status st = plan_init(&plan, pass, problem, grad, mask, e, data_alignment(d));
    if (st != JATTN_OK) return st;
    return run_plan(&plan, ctx, e->cuda_stream, e->workspace, e->workspace_bytes, "exec.workspace_bytes", d);
}

jattn_status jattn_forward_masked(jattn_ctx *ctx, const jattn_problem *problem, const jattn_exec *exec, const void *q,
                                  const void *k, const void *v, const jattn_mask *mask, void *out, float *lse) {
    const run_data d = {{q, k, v, out, lse}, mask};
    return plan_and_run(JATTN_PASS_FORWARD, ctx, problem, NULL, exec, mask, &d);
}

jattn_status jattn_forward(jattn_ctx *ctx, const jattn_problem *problem, const jattn_exec *exec, const void *q,
                           const void *k, const void *v, void *out, float *lse) {
    return jattn_forward_masked(ctx, problem, exec, q, k, v, NULL, out, lse);
}

jattn_status jattn_forward_padded(jattn_ctx *ctx, const jattn_problem *problem, const jattn_exec *exec, const void *q,
                                  const void *k, const void *v, const jattn_key_padding *padding, void *out,
                                  float *lse) {
    jattn_mask mask;
    memset(&mask, 0, sizeof mask);
    if (padding) mask.padding = *padding;
    return jattn_forward_masked(ctx, problem, exec, q, k, v, padding ? &mask : NULL, out, lse);
}

jattn_status jattn_backward_masked(jattn_ctx *ctx, const jattn_problem *problem, const jattn_grad_strides *grad,
                                   const jattn_exec *exec, const void *q, const void *k, const void *v, const void *out,
                                   const float *lse, const void *dout, const float *dlse, const jattn_mask *mask,
                                   void *dq, void *dk, void *dv) {
    const run_data d = {{q, k, v, out, lse, dout, dlse, dq, dk, dv}, mask};
    return plan_and_run(JATTN_PASS_BACKWARD, ctx, problem, grad, exec, mask, &d);
}

jattn_status jattn_backward(jattn_ctx *ctx, const jattn_problem *problem, const jattn_grad_strides *grad,
                            const jattn_exec *exec, const void *q, const void *k, const void *v, const void *out,
                            const float *lse, const void *dout, const float *dlse, const jattn_key_padding *padding,
                            void *dq, void *dk, void *dv) {
    jattn_mask mask;
    memset(&mask, 0, sizeof mask);
    if (padding) mask.padding = *padding;
    return jattn_backward_masked(ctx, problem, grad, exec, q, k, v, out, lse, dout, dlse, padding ? &mask : NULL, dq,
                                 dk, dv);
}

/* ---- questions without a call ------------------------------------------------------------ */

jattn_status jattn_select(const jattn_problem *problem, const jattn_exec *exec, jattn_selection *selection) {
    if (!selection) return jattn_fail(JATTN_ERROR_NULL_POINTER, "selection: NULL");
    jattn_plan plan;
    jattn_status st = plan_init(&plan, JATTN_PASS_FORWARD, problem, NULL, NULL, exec ? exec : &default_exec, 0);
    if (st != JATTN_OK) return st;
    *selection = plan.selection;
    return jattn_succeed();
}

jattn_status jattn_backward_select(const jattn_problem *problem, const jattn_exec *exec, jattn_selection *selection) {
    if (!selection) return jattn_fail(JATTN_ERROR_NULL_POINTER, "selection: NULL");
    jattn_plan plan;
    jattn_status st = plan_init(&plan, JATTN_PASS_BACKWARD, problem, NULL, NULL, exec ? exec : &default_exec, 0);
    if (st != JATTN_OK) return st;
    *selection = plan.selection;
    return jattn_succeed();
}

/* The workspace of a call with any key padding (jattn_workspace_size's promise): the larger of
 * the plans without and with both padding parts. */
static jattn_status padded_workspace(jattn_pass pass, const jattn_problem *problem, const jattn_grad_strides *grad,
                                     const jattn_exec *exec, size_t *bytes) {
    if (!bytes) return jattn_fail(JATTN_ERROR_NULL_POINTER, "bytes: NULL");
    const jattn_exec *e = exec ? exec : &default_exec;
    jattn_plan plain, padded;
    jattn_status st = plan_init(&plain, pass, problem, grad, NULL, e, 0);
    if (st != JATTN_OK) return st;
    /* a structure only: the plan reads no array (the lengths and the mask stand for any) */
    static const int64_t any_len;
    static const uint8_t any_mask;
    jattn_mask mask;
    memset(&mask, 0, sizeof mask);
    mask.padding.kv_len = &any_len;
    mask.padding.mask = &any_mask;
    mask.padding.mask_batch = 1;
    mask.padding.mask_keys = problem->seq_kv;
    size_t need = plain.workspace_bytes;
    if (plan_init(&padded, pass, problem, grad, &mask, e, 0) == JATTN_OK && padded.workspace_bytes > need)
        need = padded.workspace_bytes;
    *bytes = need ? need + WORKSPACE_SLACK : 0;
    return jattn_succeed();
}

jattn_status jattn_workspace_size(const jattn_problem *problem, const jattn_exec *exec, size_t *bytes) {
    return padded_workspace(JATTN_PASS_FORWARD, problem, NULL, exec, bytes);
}

jattn_status jattn_backward_workspace_size(const jattn_problem *problem, const jattn_grad_strides *grad,
                                           const jattn_exec *exec, size_t *bytes) {
    return padded_workspace(JATTN_PASS_BACKWARD, problem, grad, exec, bytes);
}
