/* The public API's small parts: version, status names, error messages, the backends' names and
 * descriptions, layouts and contexts. Validation is in validate.c, plans and the calls that run
 * them (dispatch) in plan.c. */
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

jattn_status jattn_succeed(void) {
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

const jattn_backend_ops *jattn_backend_ops_of(jattn_backend backend) { return backends[backend]; }

const jattn_backend_ops *jattn_backend_ops_at_rank(int rank) { return backends[auto_order[rank]]; }

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
    return jattn_succeed();
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

/* ---- context ------------------------------------------------------------------------ */

jattn_status jattn_ctx_create(jattn_ctx **ctx) {
    if (!ctx) return jattn_fail(JATTN_ERROR_NULL_POINTER, "ctx: NULL");
    jattn_ctx *c = calloc(1, sizeof *c);
    if (!c) return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "ctx: allocation of %zu bytes failed", sizeof *c);
    *ctx = c;
    return jattn_succeed();
}

void jattn_ctx_free(jattn_ctx *ctx) {
    if (!ctx) return;
    for (size_t i = 0; i < sizeof auto_order / sizeof auto_order[0]; i++)
        if (backends[auto_order[i]]->release_ctx) backends[auto_order[i]]->release_ctx(ctx);
    jattn_free_aligned(ctx->host_workspace);
    free(ctx);
}
