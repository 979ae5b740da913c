/* The contract between the dispatch layer (src/jattn.c) and the backends.
 *
 * A backend is a table of functions. The dispatch layer validates the problem and the
 * pointers once; a backend's select() then only answers "can I run this, and with which
 * kernel" for a problem already known to be valid, and fills a plan (jattn_plan below) that
 * dispatch hands, unchanged, to the backend's workspace_size() and forward(): a kernel choice
 * travels as the backend's own descriptor, never as a name to parse or compare again.
 *
 * Adding a backend (as the Vulkan backend `vk` was) is four steps inside libjattn:
 *  1. include/jattn.h: one X(JATTN_BACKEND_<NAME>, value) line in JATTN_BACKEND_LIST (the next
 *     number; values are stable) and JATTN_BACKEND_COUNT one higher.
 *  2. JATTN_BACKENDS below: one X(ENUM_SUFFIX, name) line, at its place in AUTO's order (the
 *     list's order is the order AUTO tries backends). The names, the ops table, AUTO's order,
 *     the context's state slot and the count check all derive from that line.
 *  3. src/<folder>/: a `const jattn_backend_ops jattn_backend_<name>` (designated initializers:
 *     id, is_gpu, workspace_memory, select, workspace_size, forward, release_ctx, and the
 *     backward's three entries or none), and a stub of the same name and description reporting
 *     JATTN_ERROR_BACKEND_UNAVAILABLE for builds without it (src/cuda/cuda_unavailable.c is the
 *     model).
 *  4. src/<folder>/sources.cmake choosing between the two, include()d by CMakeLists.txt.
 * Then one line per binding enum: the constant in python/src/jattn/_clib.py, the constant in
 * rust/jattn-sys/src/lib.rs and the variant of rust/jattn's `Backend` (their ABI tests fail until
 * they agree with the header). Nothing else restates a backend: the command (its --backend
 * choices, `jattn backends`, AUTO's order, which backends are GPUs), both bindings' lists and
 * choices, and the tests ask jattn_backend_name() and jattn_backend_info_at(), whose answers come
 * from the list below and the ops tables; ctest registers the per-backend suites for each line of
 * the list below (cmake/backends.cmake reads it). tests/test_docs.sh then fails until README.md,
 * python/README.md and docs/DESIGN.md §3 name the new backend (and §3 its folder).
 *
 * The backward pass (jattn_backward): each backend has three entries beside the forward's,
 * `select_backward`, `workspace_size_backward` and `backward`, with the same shapes (problem,
 * exec, jattn_plan; a jattn_bwd_call carrying the gradients). Dispatch runs the same
 * validation, then the same loop over JATTN_BACKENDS with select_backward; a NULL entry reads
 * as "this backend has no backward" (JATTN_ERROR_UNSUPPORTED, naming the backend; its
 * jattn_backend_info.has_backward is 0), so backends gain it one at a time. jattn_plan needs no
 * change: its kernel pointer is the backward kernel's descriptor. */
#ifndef JATTN_BACKEND_H
#define JATTN_BACKEND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "jattn.h"

/* A validated call, as a backend receives it. Dimensions and strides are the problem's;
 * `scale` is resolved (never 0); pointers are non-NULL except lse. */
typedef struct jattn_call {
    const jattn_problem *problem;
    float scale;
    const float *q, *k, *v;
    float *out;
    float *lse; /* NULL when not requested */
    jattn_precision precision;
    jattn_memory memory;
    int threads; /* the plan's: >= 1 */
    void *cuda_stream;
    void *workspace; /* at least plan->workspace_bytes, aligned to 64; NULL if 0 needed, and
                        NULL for a device-memory backend given no workspace by the caller */
    jattn_ctx *ctx;  /* may be NULL */
    /* Key padding, validated (jattn.h, jattn_key_padding); all NULL / 0 when every key is
     * attended. In the call's memory (host or device). Host lengths are in [0, seq_kv]. */
    const int64_t *kv_len; /* [B] or NULL */
    const uint8_t *mask;   /* row b at mask + b * mask_stride, seq_kv bytes; or NULL */
    int64_t mask_stride;   /* 0 when one row serves every batch */
} jattn_call;

/* Whether key j of batch b is attended (host memory only): the padding rule of jattn.h. */
static inline int jattn_call_attends(const jattn_call *c, int64_t b, int64_t j) {
    return (!c->kv_len || j < c->kv_len[b]) && (!c->mask || c->mask[b * c->mask_stride + j] != 0);
}

/* A validated backward call (jattn_backward), as a backend receives it: the problem, its
 * inputs (out and lse are inputs here), the gradient tensors at their strides (resolved: never
 * NULL), and the same execution fields and key padding as jattn_call. */
typedef struct jattn_bwd_call {
    const jattn_problem *problem;
    float scale;
    const float *q, *k, *v, *out;
    const float *lse; /* [B, H, Sq] contiguous */
    const float *dout;
    const float *dlse; /* [B, H, Sq] contiguous, or NULL (zero) */
    float *dq, *dk, *dv;
    jattn_grad_strides g; /* dout, dq, dk, dv strides */
    jattn_precision precision;
    jattn_memory memory;
    int threads; /* the plan's: >= 1 */
    void *cuda_stream;
    void *workspace; /* as jattn_call's, plan->workspace_bytes of the backward plan */
    jattn_ctx *ctx;
    const int64_t *kv_len;
    const uint8_t *mask;
    int64_t mask_stride;
} jattn_bwd_call;

/* Whether key j of batch b is attended in a backward call (host memory only). */
static inline int jattn_bwd_call_attends(const jattn_bwd_call *c, int64_t b, int64_t j) {
    return (!c->kv_len || j < c->kv_len[b]) && (!c->mask || c->mask[b * c->mask_stride + j] != 0);
}

/* Every backend, once, in the order AUTO tries them: X(ENUM_SUFFIX, name), where
 * JATTN_BACKEND_<ENUM_SUFFIX> is its public enum value, "name" its name
 * (jattn_backend_name()) and jattn_backend_<name> its ops table. */
#define JATTN_BACKENDS(X) \
    X(CUDA, cuda)         \
    X(VK, vk)             \
    X(CPU, cpu)           \
    X(REF, ref)

typedef struct jattn_backend_ops jattn_backend_ops;

/* A kernel choice: made once by a backend's select(), read by its workspace_size() and
 * forward() (and by dispatch, for the workspace). */
typedef struct jattn_plan {
    const jattn_backend_ops *ops; /* the backend that runs it (set by dispatch) */
    const void *kernel;           /* the backend's descriptor of the chosen kernel (a cpu_kernels
                                     table, a cuda version; the ref backend's is NULL) */
    int threads;                  /* CPU threads it runs on, >= 1 (1 on a GPU) */
    size_t workspace_bytes;       /* ops->workspace_size(), once dispatch asked; memory of
                                     ops->workspace_memory */
    jattn_selection selection;    /* what jattn_select() reports: backend and backend_name
                                     filled by dispatch, kernel and isa by select() */
} jattn_plan;

struct jattn_backend_ops {
    jattn_backend id;
    int is_gpu; /* it computes on a GPU (jattn_backend_info.is_gpu) */
    /* Can this backend run the (valid) problem under exec? On JATTN_OK fill plan->kernel,
     * plan->threads, plan->selection.kernel and plan->selection.isa. Otherwise return
     * JATTN_ERROR_UNSUPPORTED / _BACKEND_UNAVAILABLE via jattn_fail(), naming the limit.
     * Must be cheap: it runs on every call. */
    jattn_status (*select)(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan);
    /* Workspace bytes (in workspace_memory) that forward() needs for this plan; 0 when none. */
    size_t (*workspace_size)(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan);
    /* Compute. Writes out (and lse). On failure returns a status via jattn_fail(). */
    jattn_status (*forward)(const jattn_call *call, const jattn_plan *plan);
    /* Frees whatever this backend keeps in a context (may be NULL). */
    void (*release_ctx)(jattn_ctx *ctx);
    /* The memory the backend computes from (jattn_backend_info.memory), and so where its
     * workspace lives. JATTN_MEMORY_HOST: dispatch provides it when the caller gives none (the
     * context's grow-only buffer, or an allocation for the call). JATTN_MEMORY_DEVICE: without a
     * caller workspace forward() gets NULL and finds device memory itself (the cuda backend: the
     * context's buffers, or the stream-ordered pool). */
    jattn_memory workspace_memory;
    /* The backward (jattn_backward): the same contracts as select, workspace_size and forward,
     * with a plan of their own (plan->kernel the backward kernel's descriptor). NULL: this
     * backend has no backward (dispatch reports JATTN_ERROR_UNSUPPORTED naming it). */
    jattn_status (*select_backward)(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan);
    size_t (*workspace_size_backward)(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan);
    jattn_status (*backward)(const jattn_bwd_call *call, const jattn_plan *plan);
};

#define JATTN_BACKEND_DECLARE_(ID, name) extern const jattn_backend_ops jattn_backend_##name;
JATTN_BACKENDS(JATTN_BACKEND_DECLARE_) /* a backend not built in is a stub reporting unavailable */
#undef JATTN_BACKEND_DECLARE_

/* The context: grow-only buffers, one slot per backend. */
struct jattn_ctx {
    void *host_workspace;
    size_t host_workspace_bytes;
    void *backend_state[JATTN_BACKEND_COUNT]; /* indexed by jattn_backend; owned by each backend,
                                                 freed by its release_ctx */
};

/* Records the message for jattn_last_error() (printf format) and returns `status`. */
jattn_status jattn_fail(jattn_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Threads a CPU backend uses for a request of `requested` (0 = all cores): >= 1, and 1
 * when the library was built without OpenMP. */
int jattn_resolve_threads(int requested);

/* `#pragma omp parallel for schedule(dynamic, chunk) num_threads(threads)` when built with
 * OpenMP, nothing otherwise (so a build without OpenMP stays warning-free). */
#define JATTN_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
#define JATTN_PARALLEL_FOR_DYNAMIC(chunk, threads) JATTN_PRAGMA(omp parallel for schedule(dynamic, chunk) num_threads(threads))
#else
#define JATTN_PARALLEL_FOR_DYNAMIC(chunk, threads)
#endif

/* Index of the calling thread inside an OpenMP parallel region (0 outside one, or without
 * OpenMP): selects the thread's slice of the workspace. */
int jattn_thread_index(void);

/* Aligned allocation helpers (64-byte alignment). jattn_free_aligned accepts NULL. */
void *jattn_alloc_aligned(size_t bytes);
void jattn_free_aligned(void *p);

#endif /* JATTN_BACKEND_H */
