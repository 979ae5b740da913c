/* The public API: version, status names, error messages, layouts, validation and dispatch.
 *
 * Every entry point validates what it is given here, once, before any backend sees it, so
 * a backend can assume a well-formed problem: dimensions >= 1, strides that address each
 * tensor without overlap and without overflow, non-NULL pointers that do not alias outputs. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* ---- version, names, errors --------------------------------------------------------- */

unsigned jattn_version_number(void) { return JATTN_VERSION_NUMBER; }
const char *jattn_version_string(void) { return JATTN_VERSION_STRING; }

#define STATUS_NAME_(name, value, meaning) [value] = #name,
static const char *const status_names[JATTN_STATUS_COUNT] = {JATTN_STATUS_LIST(STATUS_NAME_)};
#undef STATUS_NAME_

/* The codes are 0 .. JATTN_STATUS_COUNT - 1: each value below the count (the designated
 * initializers above), none twice (-Woverride-init), as many as the count. */
#define STATUS_ONE_(name, value, meaning) +1
_Static_assert(0 JATTN_STATUS_LIST(STATUS_ONE_) == JATTN_STATUS_COUNT,
               "JATTN_STATUS_COUNT is the number of codes in JATTN_STATUS_LIST (jattn.h)");
#undef STATUS_ONE_

const char *jattn_status_name(jattn_status status) {
    if ((int)status < 0 || (int)status >= JATTN_STATUS_COUNT) return "JATTN_STATUS_UNKNOWN";
    return status_names[status];
}

static _Thread_local char last_error[256];

const char *jattn_last_error(void) { return last_error; }

jattn_status jattn_fail(jattn_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

jattn_status jattn_set_last_error(jattn_status status, const char *message) {
    snprintf(last_error, sizeof last_error, "%s", message ? message : "");
    return status;
}

static jattn_status succeed(void) {
    last_error[0] = '\0';
    return JATTN_OK;
}

/* ---- the backends, from their one list (backend.h, JATTN_BACKENDS) --------------------- */

#define COUNT_ONE_(ID, name) +1
_Static_assert(1 JATTN_BACKENDS(COUNT_ONE_) == JATTN_BACKEND_COUNT,
               "JATTN_BACKENDS (backend.h) lists every jattn_backend but AUTO, once");
#undef COUNT_ONE_
#define COUNT_VALUE_(name, value) +1
_Static_assert(0 JATTN_BACKEND_LIST(COUNT_VALUE_) == JATTN_BACKEND_COUNT,
               "JATTN_BACKEND_COUNT is the number of values in JATTN_BACKEND_LIST (jattn.h)");
#undef COUNT_VALUE_

/* Indexed by jattn_backend; [JATTN_BACKEND_AUTO] is NULL. */
#define OPS_ENTRY_(ID, name) [JATTN_BACKEND_##ID] = &jattn_backend_##name,
static const jattn_backend_ops *const backends[JATTN_BACKEND_COUNT] = {JATTN_BACKENDS(OPS_ENTRY_)};
#undef OPS_ENTRY_

#define NAME_ENTRY_(ID, name) [JATTN_BACKEND_##ID] = #name,
static const char *const backend_names[JATTN_BACKEND_COUNT] = {[JATTN_BACKEND_AUTO] = "auto",
                                                               JATTN_BACKENDS(NAME_ENTRY_)};
#undef NAME_ENTRY_

/* The order in which AUTO tries backends: the list's. */
#define ORDER_ENTRY_(ID, name) JATTN_BACKEND_##ID,
static const jattn_backend auto_order[] = {JATTN_BACKENDS(ORDER_ENTRY_)};
#undef ORDER_ENTRY_

const char *jattn_backend_name(jattn_backend backend) {
    if ((int)backend < 0 || (int)backend >= JATTN_BACKEND_COUNT) return NULL;
    return backend_names[backend];
}

int jattn_backend_info_count(void) { return (int)(sizeof auto_order / sizeof auto_order[0]); }

jattn_status jattn_backend_info_at(int auto_rank, jattn_backend_info *info) {
    if (!info) return jattn_fail(JATTN_ERROR_NULL_POINTER, "info: NULL");
    if (auto_rank < 0 || auto_rank >= jattn_backend_info_count())
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "auto_rank: %d, must be in [0, %d)", auto_rank,
                          jattn_backend_info_count());
    const jattn_backend_ops *ops = backends[auto_order[auto_rank]];
    info->backend = ops->id;
    info->name = backend_names[ops->id];
    info->memory = ops->workspace_memory;
    info->is_gpu = ops->is_gpu != 0;
    info->has_backward = ops->select_backward != NULL;
    info->auto_rank = auto_rank;
    return succeed();
}

void *jattn_alloc_aligned(size_t bytes) {
    if (bytes == 0) bytes = 64;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes) return NULL;
    return aligned_alloc(64, rounded);
}

void jattn_free_aligned(void *p) { free(p); }

/* ---- layouts ------------------------------------------------------------------------ */

/* a*b, saturated to INT64_MAX / INT64_MIN where it overflows: layouts of absurd dimensions are
 * then rejected by validation (JATTN_ERROR_OVERFLOW), never computed with undefined behaviour. */
static int64_t mul_saturating(int64_t a, int64_t b) {
    if (a == 0 || b == 0) return 0;
    if (a > 0 && b > 0) return a > INT64_MAX / b ? INT64_MAX : a * b;
    if (a < 0 && b < 0) return a < INT64_MAX / b ? INT64_MAX : a * b;
    int64_t neg = a < 0 ? a : b, pos = a < 0 ? b : a;
    return neg < INT64_MIN / pos ? INT64_MIN : neg * pos;
}

jattn_strides jattn_strides_head_major(int64_t heads, int64_t seq, int64_t head_dim) {
    jattn_strides s = {mul_saturating(heads, mul_saturating(seq, head_dim)), mul_saturating(seq, head_dim), head_dim};
    return s;
}

jattn_strides jattn_strides_token_major(int64_t heads, int64_t seq, int64_t head_dim) {
    jattn_strides s = {mul_saturating(seq, mul_saturating(heads, head_dim)), head_dim, mul_saturating(heads, head_dim)};
    return s;
}

jattn_problem jattn_problem_flux(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim) {
    jattn_problem p;
    memset(&p, 0, sizeof p);
    p.batch = batch;
    p.heads = heads;
    p.seq_q = seq_q;
    p.seq_kv = seq_kv;
    p.head_dim = head_dim;
    p.scale = 0.0f;
    p.dtype = JATTN_DTYPE_F32;
    p.q = jattn_strides_head_major(heads, seq_q, head_dim);
    p.k = jattn_strides_head_major(heads, seq_kv, head_dim);
    p.v = jattn_strides_head_major(heads, seq_kv, head_dim);
    p.out = jattn_strides_token_major(heads, seq_q, head_dim);
    return p;
}

/* ---- problem validation ------------------------------------------------------------- */

/* a*b+c for non-negative int64 with overflow detection. */
static int mul_add_overflows(int64_t a, int64_t b, int64_t c, int64_t *r) {
    if (a != 0 && b > (INT64_MAX - c) / a) return 1;
    *r = a * b + c;
    return 0;
}

/* One 4-d tensor [batch, head, token, head_dim] as the validator sees it. */
typedef struct tensor_view {
    const char *name;
    int64_t extent[4]; /* B, H, S, D */
    int64_t stride[4]; /* batch, head, token, 1 */
} tensor_view;

static tensor_view make_view(const char *name, const jattn_problem *p, jattn_strides s, int64_t seq) {
    tensor_view t = {name, {p->batch, p->heads, seq, p->head_dim}, {s.batch, s.head, s.token, 1}};
    return t;
}

static const char *const dim_field[4] = {"batch", "head", "token", "head_dim"};

/* Number of elements the tensor spans: 1 + sum (n_i - 1) * s_i. Checks strides and overflow,
 * and that no two index tuples address the same element. */
static jattn_status check_tensor(const tensor_view *t, int64_t *span_elems) {
    for (int i = 0; i < 3; i++)
        if (t->stride[i] < 0)
            return jattn_fail(JATTN_ERROR_INVALID_STRIDE, "%s.%s: stride %lld is negative", t->name, dim_field[i],
                              (long long)t->stride[i]);
    int64_t span = 1;
    for (int i = 0; i < 4; i++)
        if (mul_add_overflows(t->extent[i] - 1, t->stride[i], span, &span))
            return jattn_fail(JATTN_ERROR_OVERFLOW, "%s.%s: stride %lld times extent %lld overflows", t->name,
                              dim_field[i], (long long)t->stride[i], (long long)t->extent[i]);
    if (span > (int64_t)(PTRDIFF_MAX / sizeof(float)) || (uint64_t)span > SIZE_MAX / sizeof(float))
        return jattn_fail(JATTN_ERROR_OVERFLOW, "%s: spans %lld elements, more bytes than a pointer can address",
                          t->name, (long long)span);
    /* Non-overlap: order the dimensions of extent > 1 by stride; each stride must reach past
     * everything the smaller-stride dimensions span. */
    int order[4], n = 0;
    for (int i = 3; i >= 0; i--)
        if (t->extent[i] > 1) order[n++] = i;
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && t->stride[order[b]] < t->stride[order[b - 1]]; b--) {
            int tmp = order[b];
            order[b] = order[b - 1];
            order[b - 1] = tmp;
        }
    int64_t inner_span = 1; /* elements spanned by dimensions before order[a] */
    for (int a = 0; a < n; a++) {
        int d = order[a];
        if (t->stride[d] < inner_span) {
            if (a == 0)
                return jattn_fail(JATTN_ERROR_SELF_OVERLAP, "%s.%s: stride 0 with extent %lld makes %s overlap itself",
                                  t->name, dim_field[d], (long long)t->extent[d], t->name);
            return jattn_fail(JATTN_ERROR_SELF_OVERLAP,
                              "%s.%s: stride %lld < %lld elements spanned by %s.%s makes %s overlap itself", t->name,
                              dim_field[d], (long long)t->stride[d], (long long)inner_span, t->name,
                              dim_field[order[a - 1]], t->name);
        }
        inner_span += (t->extent[d] - 1) * t->stride[d]; /* cannot overflow: bounded by span above */
    }
    *span_elems = span;
    return JATTN_OK;
}

/* Element spans of q, k, v, out and lse of a valid problem. */
typedef struct problem_spans {
    int64_t q, k, v, out, lse;
} problem_spans;

static jattn_status check_problem(const jattn_problem *p, problem_spans *spans) {
    if (!p) return jattn_fail(JATTN_ERROR_NULL_POINTER, "problem: NULL");
    const struct {
        const char *name;
        int64_t value;
    } dims[] = {{"batch", p->batch},
                {"heads", p->heads},
                {"seq_q", p->seq_q},
                {"seq_kv", p->seq_kv},
                {"head_dim", p->head_dim}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].value < 1)
            return jattn_fail(JATTN_ERROR_INVALID_DIMENSION, "%s: %lld, must be >= 1", dims[i].name,
                              (long long)dims[i].value);
    if (!(p->scale >= 0.0f) || isinf(p->scale))
        return jattn_fail(JATTN_ERROR_INVALID_SCALE, "scale: %g, must be finite and >= 0 (0 selects 1/sqrt(head_dim))",
                          (double)p->scale);
    if ((int)p->dtype < 0 || (int)p->dtype > JATTN_DTYPE_F16)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "dtype: %d is not a jattn_dtype", (int)p->dtype);
    if (p->dtype != JATTN_DTYPE_F32)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "dtype: only JATTN_DTYPE_F32 is implemented");
    /* The element count of every tensor, and of the score matrix of one head, fit in int64. */
    int64_t count = 1;
    size_t largest = 0;
    int overflows = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].value > dims[largest].value) largest = i;
        if (!overflows && count > INT64_MAX / dims[i].value) overflows = 1;
        if (!overflows) count *= dims[i].value;
    }
    if (overflows) /* name the largest dimension: the one most likely wrong */
        return jattn_fail(JATTN_ERROR_OVERFLOW, "%s: %lld makes batch*heads*seq_q*seq_kv*head_dim overflow int64",
                          dims[largest].name, (long long)dims[largest].value);
    tensor_view views[4] = {make_view("q", p, p->q, p->seq_q), make_view("k", p, p->k, p->seq_kv),
                            make_view("v", p, p->v, p->seq_kv), make_view("out", p, p->out, p->seq_q)};
    int64_t *dst[4] = {&spans->q, &spans->k, &spans->v, &spans->out};
    for (int i = 0; i < 4; i++) {
        jattn_status st = check_tensor(&views[i], dst[i]);
        if (st != JATTN_OK) return st;
    }
    spans->lse = p->batch * p->heads * p->seq_q; /* <= count, so no overflow */
    return JATTN_OK;
}

static const jattn_exec default_exec;

static jattn_status check_exec(const jattn_exec *e) {
    if ((int)e->backend < 0 || (int)e->backend >= JATTN_BACKEND_COUNT)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.backend: %d is not a jattn_backend", (int)e->backend);
    if ((int)e->precision < 0 || (int)e->precision > JATTN_PRECISION_TF32)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.precision: %d is not a jattn_precision",
                          (int)e->precision);
    if ((int)e->memory < 0 || (int)e->memory > JATTN_MEMORY_DEVICE)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.memory: %d is not a jattn_memory", (int)e->memory);
    if (e->threads < 0)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.threads: %d, must be >= 0 (0 = all cores)", e->threads);
    return JATTN_OK;
}

/* ---- dispatch ----------------------------------------------------------------------- */

/* Which pass a plan is for: the forward's or the backward's entries of the tables. */
typedef enum pass { PASS_FORWARD, PASS_BACKWARD } pass;

/* Asks one backend; on success the plan is complete but for its workspace. */
static jattn_status plan_with(pass which, const jattn_backend_ops *ops, const jattn_problem *p, const jattn_exec *e,
                              jattn_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->ops = ops;
    if (which == PASS_BACKWARD && !ops->select_backward)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "backend: %s has no backward", backend_names[ops->id]);
    jattn_status st = which == PASS_FORWARD ? ops->select(p, e, plan) : ops->select_backward(p, e, plan);
    if (st != JATTN_OK) return st;
    plan->selection.backend = ops->id;
    plan->selection.backend_name = backend_names[ops->id];
    plan->selection.threads = plan->threads;
    return JATTN_OK;
}

/* The one dispatch function: validates, then asks the backend(s) whether they can run it.
 * On JATTN_OK *plan is filled, its workspace_bytes included. */
static jattn_status dispatch_pass(pass which, const jattn_problem *p, const jattn_exec *e, problem_spans *spans,
                                  jattn_plan *plan) {
    jattn_status st = check_problem(p, spans);
    if (st != JATTN_OK) return st;
    st = check_exec(e);
    if (st != JATTN_OK) return st;
    if (e->backend != JATTN_BACKEND_AUTO) {
        st = plan_with(which, backends[e->backend], p, e, plan);
    } else {
        char first_reason[sizeof last_error] = "";
        for (size_t i = 0; i < sizeof auto_order / sizeof auto_order[0]; i++) {
            st = plan_with(which, backends[auto_order[i]], p, e, plan);
            if (st == JATTN_OK) break;
            if (!first_reason[0]) snprintf(first_reason, sizeof first_reason, "%s", last_error);
        }
        if (st != JATTN_OK) return jattn_fail(st, "no backend can run this problem: %s", first_reason);
    }
    if (st != JATTN_OK) return st;
    plan->workspace_bytes =
        which == PASS_FORWARD ? plan->ops->workspace_size(p, e, plan) : plan->ops->workspace_size_backward(p, e, plan);
    return JATTN_OK;
}

static jattn_status dispatch(const jattn_problem *p, const jattn_exec *e, problem_spans *spans, jattn_plan *plan) {
    return dispatch_pass(PASS_FORWARD, p, e, spans, plan);
}

jattn_status jattn_select(const jattn_problem *problem, const jattn_exec *exec, jattn_selection *selection) {
    if (!selection) return jattn_fail(JATTN_ERROR_NULL_POINTER, "selection: NULL");
    problem_spans spans;
    jattn_plan plan;
    jattn_status st = dispatch(problem, exec ? exec : &default_exec, &spans, &plan);
    if (st != JATTN_OK) return st;
    *selection = plan.selection;
    return succeed();
}

/* Caller workspaces are aligned inside, so the size reported includes 63 bytes of slack. */
#define WORKSPACE_SLACK 63

jattn_status jattn_workspace_size(const jattn_problem *problem, const jattn_exec *exec, size_t *bytes) {
    if (!bytes) return jattn_fail(JATTN_ERROR_NULL_POINTER, "bytes: NULL");
    problem_spans spans;
    jattn_plan plan;
    jattn_status st = dispatch(problem, exec ? exec : &default_exec, &spans, &plan);
    if (st != JATTN_OK) return st;
    *bytes = plan.workspace_bytes ? plan.workspace_bytes + WORKSPACE_SLACK : 0;
    return succeed();
}

/* ---- context ------------------------------------------------------------------------ */

jattn_status jattn_ctx_create(jattn_ctx **ctx) {
    if (!ctx) return jattn_fail(JATTN_ERROR_NULL_POINTER, "ctx: NULL");
    jattn_ctx *c = calloc(1, sizeof *c);
    if (!c) return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "ctx: allocation of %zu bytes failed", sizeof *c);
    *ctx = c;
    return succeed();
}

void jattn_ctx_free(jattn_ctx *ctx) {
    if (!ctx) return;
    for (size_t i = 0; i < sizeof auto_order / sizeof auto_order[0]; i++)
        if (backends[auto_order[i]]->release_ctx) backends[auto_order[i]]->release_ctx(ctx);
    jattn_free_aligned(ctx->host_workspace);
    free(ctx);
}

/* ---- forward ------------------------------------------------------------------------ */

/* Byte range [lo, hi) of a tensor, with the address-space wrap checked. */
typedef struct byte_range {
    const char *name;
    uintptr_t lo, hi;
} byte_range;

static jattn_status make_range_of(const char *name, const void *ptr, int64_t span_elems, size_t elem_bytes,
                                  byte_range *r) {
    uintptr_t lo = (uintptr_t)ptr, bytes = (uintptr_t)span_elems * elem_bytes;
    if (lo % elem_bytes)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "%s: pointer %p is not aligned to %zu bytes", name, ptr,
                          elem_bytes);
    if (lo > UINTPTR_MAX - bytes)
        return jattn_fail(JATTN_ERROR_OVERFLOW, "%s: pointer %p plus %lld elements wraps the address space", name, ptr,
                          (long long)span_elems);
    r->name = name;
    r->lo = lo;
    r->hi = lo + bytes;
    return JATTN_OK;
}

static jattn_status make_range(const char *name, const void *ptr, int64_t span_elems, byte_range *r) {
    return make_range_of(name, ptr, span_elems, sizeof(float), r);
}

static int ranges_overlap(const byte_range *a, const byte_range *b) { return a->lo < b->hi && b->lo < a->hi; }

static jattn_status check_pointers(const problem_spans *s, const void *q, const void *k, const void *v, const void *out,
                                   const float *lse) {
    const void *ptrs[4] = {q, k, v, out};
    const char *names[4] = {"q", "k", "v", "out"};
    for (int i = 0; i < 4; i++)
        if (!ptrs[i]) return jattn_fail(JATTN_ERROR_NULL_POINTER, "%s: NULL", names[i]);
    const int64_t spans[5] = {s->q, s->k, s->v, s->out, s->lse};
    byte_range r[5];
    int n = lse ? 5 : 4;
    for (int i = 0; i < n; i++) {
        jattn_status st = make_range(i < 4 ? names[i] : "lse", i < 4 ? ptrs[i] : (const void *)lse, spans[i], &r[i]);
        if (st != JATTN_OK) return st;
    }
    /* Outputs (out, lse) must not overlap any input or each other; inputs may share memory. */
    for (int o = 3; o < n; o++)
        for (int i = 0; i < o; i++)
            if (ranges_overlap(&r[o], &r[i]))
                return jattn_fail(JATTN_ERROR_ALIASING, "%s: overlaps %s (%s is written, %s is read)", r[o].name,
                                  r[i].name, r[o].name, r[i].name);
    return JATTN_OK;
}

/* Key padding: the mask's extent and stride, the length array, neither overlapping an output,
 * and (host memory) every length in range. Fills the call's padding fields. */
/* The padding a call passes, validated: the fields of jattn_call / jattn_bwd_call. */
typedef struct padding_fields {
    const int64_t *kv_len;
    const uint8_t *mask;
    int64_t mask_stride;
} padding_fields;

/* Key padding against the call's outputs (n_out byte ranges). */
static jattn_status check_padding_against(const jattn_problem *p, const jattn_exec *e, const jattn_key_padding *kp,
                                          const byte_range *outputs, int n_out, padding_fields *call) {
    jattn_status st;
    if (kp->mask) {
        if (kp->mask_batch != 1 && kp->mask_batch != p->batch)
            return jattn_fail(JATTN_ERROR_INVALID_DIMENSION,
                              "key_padding.mask_batch: %lld, must be 1 (one row for every batch) or batch (%lld)",
                              (long long)kp->mask_batch, (long long)p->batch);
        if (kp->mask_keys != p->seq_kv)
            return jattn_fail(JATTN_ERROR_INVALID_DIMENSION,
                              "key_padding.mask_keys: %lld, must equal seq_kv (%lld): a mask needs its extent",
                              (long long)kp->mask_keys, (long long)p->seq_kv);
        if (kp->mask_batch_stride < 0)
            return jattn_fail(JATTN_ERROR_INVALID_STRIDE, "key_padding.mask_batch_stride: %lld is negative",
                              (long long)kp->mask_batch_stride);
        const int64_t stride = kp->mask_batch_stride ? kp->mask_batch_stride : kp->mask_keys;
        if (kp->mask_batch > 1 && stride < kp->mask_keys)
            return jattn_fail(JATTN_ERROR_SELF_OVERLAP,
                              "key_padding.mask_batch_stride: %lld < mask_keys %lld makes the mask rows overlap",
                              (long long)stride, (long long)kp->mask_keys);
        int64_t span;
        if (mul_add_overflows(kp->mask_batch - 1, stride, kp->mask_keys, &span) ||
            (uint64_t)span > (uint64_t)PTRDIFF_MAX)
            return jattn_fail(JATTN_ERROR_OVERFLOW,
                              "key_padding.mask_batch_stride: %lld times mask_batch %lld overflows", (long long)stride,
                              (long long)kp->mask_batch);
        byte_range r = {NULL, 0, 0};
        st = make_range_of("key_padding.mask", kp->mask, span, 1, &r);
        if (st != JATTN_OK) return st;
        for (int o = 0; o < n_out; o++)
            if (ranges_overlap(&r, &outputs[o]))
                return jattn_fail(JATTN_ERROR_ALIASING,
                                  "key_padding.mask: overlaps %s (%s is written, the mask is read)", outputs[o].name,
                                  outputs[o].name);
        call->mask = kp->mask;
        call->mask_stride = kp->mask_batch > 1 ? stride : 0;
    }
    if (kp->kv_len) {
        byte_range r = {NULL, 0, 0};
        st = make_range_of("key_padding.kv_len", kp->kv_len, p->batch, sizeof(int64_t), &r);
        if (st != JATTN_OK) return st;
        for (int o = 0; o < n_out; o++)
            if (ranges_overlap(&r, &outputs[o]))
                return jattn_fail(JATTN_ERROR_ALIASING,
                                  "key_padding.kv_len: overlaps %s (%s is written, the lengths are read)",
                                  outputs[o].name, outputs[o].name);
        if (e->memory == JATTN_MEMORY_HOST)
            for (int64_t b = 0; b < p->batch; b++)
                if (kp->kv_len[b] < 0 || kp->kv_len[b] > p->seq_kv)
                    return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                                      "key_padding.kv_len[%lld]: %lld, must be in [0, seq_kv = %lld]", (long long)b,
                                      (long long)kp->kv_len[b], (long long)p->seq_kv);
        call->kv_len = kp->kv_len;
    }
    return JATTN_OK;
}

static jattn_status check_padding(const jattn_problem *p, const jattn_exec *e, const jattn_key_padding *kp,
                                  const problem_spans *spans, const void *out, const float *lse, jattn_call *call) {
    if (!kp) return JATTN_OK;
    byte_range outputs[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
    int n_out = 0;
    jattn_status st = make_range("out", out, spans->out, &outputs[n_out++]);
    if (st == JATTN_OK && lse) st = make_range("lse", lse, spans->lse, &outputs[n_out++]);
    if (st != JATTN_OK) return st;
    padding_fields f = {NULL, NULL, 0};
    st = check_padding_against(p, e, kp, outputs, n_out, &f);
    if (st != JATTN_OK) return st;
    call->kv_len = f.kv_len;
    call->mask = f.mask;
    call->mask_stride = f.mask_stride;
    return JATTN_OK;
}

/* The workspace of a planned call: the caller's (aligned inside), nothing for a device-memory
 * backend without one, the context's grow-only buffer, or one allocated for the call (*owned,
 * freed by the caller). */
static jattn_status acquire_workspace(jattn_ctx *ctx, const jattn_exec *e, const jattn_plan *plan,
                                      const char *size_call, void **workspace, void **owned) {
    const size_t need = plan->workspace_bytes;
    *workspace = NULL;
    *owned = NULL;
    if (need > 0) {
        if (e->workspace) {
            uintptr_t base = ((uintptr_t)e->workspace + WORKSPACE_SLACK) & ~(uintptr_t)WORKSPACE_SLACK;
            size_t lost = (size_t)(base - (uintptr_t)e->workspace);
            if (e->workspace_bytes < lost || e->workspace_bytes - lost < need)
                return jattn_fail(JATTN_ERROR_WORKSPACE_TOO_SMALL,
                                  "exec.workspace_bytes: %zu, this call needs %zu (see %s)", e->workspace_bytes,
                                  need + WORKSPACE_SLACK, size_call);
            *workspace = (void *)base;
        } else if (plan->ops->workspace_memory == JATTN_MEMORY_DEVICE) {
            *workspace = NULL; /* the backend finds device memory itself (backend.h) */
        } else if (ctx) {
            if (ctx->host_workspace_bytes < need) {
                void *grown = jattn_alloc_aligned(need);
                if (!grown)
                    return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "workspace: allocation of %zu bytes failed", need);
                jattn_free_aligned(ctx->host_workspace);
                ctx->host_workspace = grown;
                ctx->host_workspace_bytes = need;
            }
            *workspace = ctx->host_workspace;
        } else {
            *owned = jattn_alloc_aligned(need);
            if (!*owned)
                return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "workspace: allocation of %zu bytes failed", need);
            *workspace = *owned;
        }
    }
    return JATTN_OK;
}

jattn_status jattn_forward(jattn_ctx *ctx, const jattn_problem *problem, const jattn_exec *exec, const void *q,
                           const void *k, const void *v, void *out, float *lse) {
    return jattn_forward_padded(ctx, problem, exec, q, k, v, NULL, out, lse);
}

jattn_status jattn_forward_padded(jattn_ctx *ctx, const jattn_problem *problem, const jattn_exec *exec, const void *q,
                                  const void *k, const void *v, const jattn_key_padding *padding, void *out,
                                  float *lse) {
    const jattn_exec *e = exec ? exec : &default_exec;
    problem_spans spans;
    jattn_plan plan;
    jattn_status st = dispatch(problem, e, &spans, &plan);
    if (st != JATTN_OK) return st;
    st = check_pointers(&spans, q, k, v, out, lse);
    if (st != JATTN_OK) return st;

    /* A zero scale is replaced by the default only when the caller passes 0: an explicit
     * positive scale that underflows is the caller's. */
    jattn_call call = {
        .problem = problem,
        .scale = problem->scale > 0.0f ? problem->scale : (float)(1.0 / sqrt((double)problem->head_dim)),
        .q = q,
        .k = k,
        .v = v,
        .out = out,
        .lse = lse,
        .precision = e->precision,
        .memory = e->memory,
        .threads = plan.threads,
        .cuda_stream = e->cuda_stream,
        .ctx = ctx,
    }; /* workspace and key padding: set below */
    st = check_padding(problem, e, padding, &spans, out, lse, &call);
    if (st != JATTN_OK) return st;

    void *owned = NULL;
    st = acquire_workspace(ctx, e, &plan, "jattn_workspace_size", &call.workspace, &owned);
    if (st != JATTN_OK) return st;
    st = plan.ops->forward(&call, &plan);
    jattn_free_aligned(owned);
    return st == JATTN_OK ? succeed() : st;
}

/* ---- backward ----------------------------------------------------------------------- */

jattn_grad_strides jattn_grad_strides_like(const jattn_problem *problem) {
    jattn_grad_strides g;
    memset(&g, 0, sizeof g);
    if (!problem) return g;
    g.dout = problem->out;
    g.dq = problem->q;
    g.dk = problem->k;
    g.dv = problem->v;
    return g;
}

/* Element spans of the gradient tensors. */
typedef struct grad_spans {
    int64_t dout, dq, dk, dv;
} grad_spans;

/* The problem, the gradient strides and exec of a backward call, validated; the plan made. */
static jattn_status dispatch_backward(const jattn_problem *p, const jattn_grad_strides *grad, const jattn_exec *e,
                                      problem_spans *spans, grad_spans *gspans, jattn_grad_strides *g,
                                      jattn_plan *plan) {
    jattn_status st = check_problem(p, spans);
    if (st != JATTN_OK) return st;
    *g = grad ? *grad : jattn_grad_strides_like(p);
    tensor_view views[4] = {make_view("grad.dout", p, g->dout, p->seq_q), make_view("grad.dq", p, g->dq, p->seq_q),
                            make_view("grad.dk", p, g->dk, p->seq_kv), make_view("grad.dv", p, g->dv, p->seq_kv)};
    int64_t *dst[4] = {&gspans->dout, &gspans->dq, &gspans->dk, &gspans->dv};
    for (int i = 0; i < 4; i++) {
        st = check_tensor(&views[i], dst[i]);
        if (st != JATTN_OK) return st;
    }
    return dispatch_pass(PASS_BACKWARD, p, e, spans, plan);
}

jattn_status jattn_backward_select(const jattn_problem *problem, const jattn_exec *exec, jattn_selection *selection) {
    if (!selection) return jattn_fail(JATTN_ERROR_NULL_POINTER, "selection: NULL");
    problem_spans spans;
    jattn_plan plan;
    jattn_status st = dispatch_pass(PASS_BACKWARD, problem, exec ? exec : &default_exec, &spans, &plan);
    if (st != JATTN_OK) return st;
    *selection = plan.selection;
    return succeed();
}

jattn_status jattn_backward_workspace_size(const jattn_problem *problem, const jattn_grad_strides *grad,
                                           const jattn_exec *exec, size_t *bytes) {
    if (!bytes) return jattn_fail(JATTN_ERROR_NULL_POINTER, "bytes: NULL");
    problem_spans spans;
    grad_spans gspans;
    jattn_grad_strides g;
    jattn_plan plan;
    jattn_status st = dispatch_backward(problem, grad, exec ? exec : &default_exec, &spans, &gspans, &g, &plan);
    if (st != JATTN_OK) return st;
    *bytes = plan.workspace_bytes ? plan.workspace_bytes + WORKSPACE_SLACK : 0;
    return succeed();
}

/* Pointers of a backward call: the required ones non-NULL and aligned; the gradients (dq, dk,
 * dv) overlapping neither each other nor any input. Inputs may share memory. */
static jattn_status check_backward_pointers(const problem_spans *s, const grad_spans *gs, const void *q, const void *k,
                                            const void *v, const void *out, const float *lse, const void *dout,
                                            const float *dlse, const void *dq, const void *dk, const void *dv,
                                            byte_range *grads) {
    const void *ptrs[10] = {q, k, v, out, lse, dout, dq, dk, dv, dlse};
    const char *names[10] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "dlse"};
    const int64_t spans[10] = {s->q, s->k, s->v, s->out, s->lse, gs->dout, gs->dq, gs->dk, gs->dv, s->lse};
    for (int i = 0; i < 9; i++)
        if (!ptrs[i]) return jattn_fail(JATTN_ERROR_NULL_POINTER, "%s: NULL", names[i]);
    byte_range r[10];
    const int n = dlse ? 10 : 9;
    for (int i = 0; i < n; i++) {
        jattn_status st = make_range(names[i], ptrs[i], spans[i], &r[i]);
        if (st != JATTN_OK) return st;
    }
    for (int o = 6; o < 9; o++) /* dq, dk, dv against every input and the gradients before them */
        for (int i = 0; i < n; i++)
            if ((i < o || i == 9) && ranges_overlap(&r[o], &r[i]))
                return jattn_fail(JATTN_ERROR_ALIASING, "%s: overlaps %s (%s is written, %s is %s)", r[o].name,
                                  r[i].name, r[o].name, r[i].name, i >= 6 && i < 9 ? "written" : "read");
    for (int o = 0; o < 3; o++) grads[o] = r[6 + o];
    return JATTN_OK;
}

jattn_status jattn_backward(jattn_ctx *ctx, const jattn_problem *problem, const jattn_grad_strides *grad,
                            const jattn_exec *exec, const void *q, const void *k, const void *v, const void *out,
                            const float *lse, const void *dout, const float *dlse, const jattn_key_padding *padding,
                            void *dq, void *dk, void *dv) {
    const jattn_exec *e = exec ? exec : &default_exec;
    problem_spans spans;
    grad_spans gspans;
    jattn_grad_strides g;
    jattn_plan plan;
    jattn_status st = dispatch_backward(problem, grad, e, &spans, &gspans, &g, &plan);
    if (st != JATTN_OK) return st;
    byte_range grads[3];
    st = check_backward_pointers(&spans, &gspans, q, k, v, out, lse, dout, dlse, dq, dk, dv, grads);
    if (st != JATTN_OK) return st;
    padding_fields pf = {NULL, NULL, 0};
    if (padding) {
        st = check_padding_against(problem, e, padding, grads, 3, &pf);
        if (st != JATTN_OK) return st;
    }
    jattn_bwd_call call = {
        .problem = problem,
        .scale = problem->scale > 0.0f ? problem->scale : (float)(1.0 / sqrt((double)problem->head_dim)),
        .q = q,
        .k = k,
        .v = v,
        .out = out,
        .lse = lse,
        .dout = dout,
        .dlse = dlse,
        .dq = dq,
        .dk = dk,
        .dv = dv,
        .g = g,
        .precision = e->precision,
        .memory = e->memory,
        .threads = plan.threads,
        .cuda_stream = e->cuda_stream,
        .ctx = ctx,
        .kv_len = pf.kv_len,
        .mask = pf.mask,
        .mask_stride = pf.mask_stride,
    }; /* workspace: set below */
    void *owned = NULL;
    st = acquire_workspace(ctx, e, &plan, "jattn_backward_workspace_size", &call.workspace, &owned);
    if (st != JATTN_OK) return st;
    st = plan.ops->backward(&call, &plan);
    jattn_free_aligned(owned);
    return st == JATTN_OK ? succeed() : st;
}
