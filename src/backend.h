/* The contract between the dispatch layer (src/jattn.c) and the backends.
 *
 * A backend is a table of functions. The dispatch layer validates the problem, the mask and
 * the exec once, when it makes a plan (struct jattn_plan below; the public plans of jattn.h are
 * these); a backend's select() then only answers "can I run this, and with which kernel" for a
 * problem already known to be valid, and fills the plan's kernel choice, which dispatch hands,
 * unchanged, to the backend's workspace_size() and, at each run (after the pointers are
 * checked), to its forward() or backward(): a kernel choice travels as the backend's own
 * descriptor, never as a name to parse or compare again, so what a plan names is what runs.
 * One plan, one call description (jattn_call) and one run path serve both passes.
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
 * exec, jattn_plan; the same jattn_call, with the gradients set). Dispatch runs the same
 * validation, then the same loop over JATTN_BACKENDS with select_backward; a NULL entry reads
 * as "this backend has no backward" (JATTN_ERROR_UNSUPPORTED, naming the backend; its
 * jattn_backend_info.has_backward is 0), so backends gain it one at a time. The plan's kernel
 * pointer is then the backward kernel's descriptor.
 *
 * Masks and grouped-query heads (jattn_mask, jattn_problem.kv_heads): dispatch sets
 * plan->features before select(); a backend refuses what it does not serve with
 * jattn_refuse_features() (so AUTO moves on to one that does), and serves the rest through the
 * mask fields of jattn_call (jattn_call_key_window, jattn_call_attends, jattn_call_bias_row and
 * jattn_kv_head give their meaning for host memory). */
#ifndef JATTN_BACKEND_H
#define JATTN_BACKEND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "jattn.h"

/* A validated call, forward or backward, as a backend receives it: the one call description of
 * both passes. Dimensions and strides are the plan's problem (kv_heads resolved: >= 1 whenever
 * heads >= 1); `scale` is resolved (never 0); the required pointers are non-NULL. */
typedef struct jattn_call {
    const jattn_problem *problem;
    jattn_pass pass;
    float scale;
    const float *q, *k, *v;
    float *out; /* forward: written; backward: read (the forward's output) */
    float *lse; /* forward: written, NULL when not requested; backward: read, [B, H, Sq] contiguous */
    /* The backward's tensors (NULL in a forward call). */
    const float *dout;
    const float *dlse; /* [B, H, Sq] contiguous, or NULL (zero) */
    float *dq, *dk, *dv;
    jattn_grad_strides g; /* dout, dq, dk, dv strides (resolved: never NULL) */
    jattn_precision precision;
    jattn_memory memory;
    int threads; /* the plan's: >= 1 */
    void *cuda_stream;
    void *workspace; /* at least plan->workspace_bytes, aligned to 64; NULL if 0 needed, and
                        NULL for a device-memory backend given no workspace by the caller */
    jattn_ctx *ctx;  /* may be NULL */
    /* The mask, validated (jattn.h, jattn_mask), in the call's memory; all NULL / 0 when every key
     * is attended. Host offsets are in range; device ones are the caller's (kernels clamp). */
    const int64_t *kv_len; /* [B] or NULL */
    const uint8_t *mask;   /* row b at mask + b * mask_stride, seq_kv bytes; or NULL */
    int64_t mask_stride;   /* 0 when one row serves every batch */
    jattn_causal causal;
    const int64_t *block_q, *block_kv; /* num_blocks + 1 offsets each, or NULL */
    int64_t num_blocks;
    const int64_t *cu_seqlens_q, *cu_seqlens_kv; /* row b at + b * segments_stride; or NULL */
    int64_t num_segments;
    int64_t segments_stride;
    const float *key_bias; /* row (b, h) at + b * bias_batch_stride + h * bias_head_stride; or NULL */
    int64_t bias_batch_stride, bias_head_stride;
} jattn_call;

/* The parts of a mask a plan is made for (jattn_plan.features), so that a backend's select can
 * refuse what it does not serve and pick the kernel that does. */
enum {
    JATTN_FEATURE_KEY_PADDING = 1u << 0, /* kv_len or a boolean key mask */
    JATTN_FEATURE_CAUSAL = 1u << 1,
    JATTN_FEATURE_BLOCKS = 1u << 2,   /* block-causal */
    JATTN_FEATURE_SEGMENTS = 1u << 3, /* packed sequences */
    JATTN_FEATURE_KEY_BIAS = 1u << 4,
    JATTN_FEATURE_GQA = 1u << 5, /* kv_heads < heads */
    JATTN_FEATURE_COUNT = 6
};

/* The name of the lowest feature bit set ("causal", ...), for messages; "none" for 0. */
static inline const char *jattn_feature_name(unsigned feature) {
    static const char *const names[JATTN_FEATURE_COUNT] = {
        "key padding", "causal",   "block-causal blocks",
        "segments",    "key bias", "grouped-query heads (kv_heads < heads)",
    };
    for (int i = 0; i < JATTN_FEATURE_COUNT; i++)
        if (feature & (1u << i)) return names[i];
    return "none";
}

/* Whether key j of batch b is attended by the key padding (host memory only): the padding rule
 * of jattn.h. The windows (jattn_call_key_window) and a -inf key bias narrow it further. */
static inline int jattn_call_attends(const jattn_call *c, int64_t b, int64_t j) {
    return (!c->kv_len || j < c->kv_len[b]) && (!c->mask || c->mask[b * c->mask_stride + j] != 0);
}

/* The key bias of (b, h), or NULL (host or device memory: the pointer only). */
static inline const float *jattn_call_bias_row(const jattn_call *c, int64_t b, int64_t h) {
    return c->key_bias ? c->key_bias + b * c->bias_batch_stride + h * c->bias_head_stride : NULL;
}

/* The key/value head that query head h reads (grouped-query heads). */
static inline int64_t jattn_kv_head(const jattn_problem *p, int64_t h) { return h / (p->heads / p->kv_heads); }

/* The window of keys [*lo, *hi) that query row i of batch b may attend by the segments, causal and
 * blocks parts of the call's mask (host memory only); empty when *lo >= *hi. Key padding and a -inf
 * key bias leave out keys inside it. */
void jattn_call_key_window(const jattn_call *c, int64_t b, int64_t i, int64_t *lo, int64_t *hi);

/* Every backend, once, in the order AUTO tries them: X(ENUM_SUFFIX, name), where
 * JATTN_BACKEND_<ENUM_SUFFIX> is its public enum value, "name" its name
 * (jattn_backend_name()) and jattn_backend_<name> its ops table. */
#define JATTN_BACKENDS(X) \
    X(CUDA, cuda)         \
    X(VK, vk)             \
    X(CPU, cpu)           \
    X(REF, ref)

typedef struct jattn_backend_ops jattn_backend_ops;

/* The structure of a mask a plan is made for (jattn.h, plans): which parts are set, with their
 * counts and strides; a run's mask must have the same. */
typedef struct jattn_mask_shape {
    int kv_len, mask; /* key padding parts present */
    int64_t mask_batch, mask_stride;
    jattn_causal causal;
    int64_t num_blocks;   /* 0: no blocks */
    int64_t num_segments; /* 0: no segments */
    int64_t segments_stride;
    int key_bias;
    int64_t bias_batch_stride, bias_head_stride;
} jattn_mask_shape;

/* A plan (jattn.h, jattn_plan_create): what dispatch decided for a problem, made once and run
 * unchanged. A backend's select() fills the kernel choice: plan->kernel (its own descriptor of
 * the chosen kernel: a cpu_kernels table, a cuda version; NULL for ref), plan->threads,
 * plan->selection.kernel and .isa; it reads the rest (problem, features, alignment), which dispatch
 * fills first. A kernel choice travels as the backend's own descriptor, never as a name to parse or
 * compare again. */
struct jattn_plan {
    const jattn_backend_ops *ops; /* the backend that runs it (set by dispatch) */
    const void *kernel;           /* the backend's descriptor of the chosen kernel */
    int threads;                  /* CPU threads it runs on, >= 1 (1 on a GPU) */
    size_t workspace_bytes;       /* ops->workspace_size(); memory of ops->workspace_memory */
    jattn_selection selection;    /* what jattn_plan_selection() reports: backend and backend_name
                                     filled by dispatch, kernel and isa by select() */
    /* Filled by dispatch before select(): */
    jattn_pass pass;
    jattn_problem problem;   /* validated, kv_heads resolved */
    jattn_grad_strides grad; /* the backward's (resolved) */
    jattn_mask_shape mask;
    unsigned features; /* JATTN_FEATURE_* bits of the mask and the problem */
    size_t alignment;  /* bytes every data pointer of a run has (a power of two >= 4) */
    int empty;         /* the problem has no query or no key: dispatch writes the answer */
    float scale;       /* resolved */
    jattn_precision precision;
    jattn_memory memory;
    int64_t spans[10]; /* elements each tensor spans (run_plan's pointer checks) */
};

/* Refuses a plan whose features are not all in `supported`: JATTN_ERROR_UNSUPPORTED naming the
 * first one and `who` (e.g. "the vk backend"). @return JATTN_OK when all are supported. */
jattn_status jattn_refuse_features(const jattn_plan *plan, unsigned supported, const char *who);

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
    jattn_status (*backward)(const jattn_call *call, const jattn_plan *plan);
    /* Writes the answer of a call without queries or keys (plan->empty) in device memory: forward,
     * out rows +0 and lse -inf where seq_kv == 0; backward, dq +0 where seq_kv == 0, dk and dv +0
     * where seq_q == 0. NULL for host-memory backends (dispatch writes host memory itself). */
    jattn_status (*write_empty)(const jattn_call *call, const jattn_plan *plan);
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

/* The ops table of a backend (never AUTO), and of the backend AUTO tries at `rank`
 * (0 .. jattn_backend_info_count() - 1). */
const jattn_backend_ops *jattn_backend_ops_of(jattn_backend backend);
const jattn_backend_ops *jattn_backend_ops_at_rank(int rank);

/* Clears the message of jattn_last_error() and returns JATTN_OK: every public call that succeeds
 * ends with it. */
jattn_status jattn_succeed(void);

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

/* A loop body of jattn_parallel_for: iteration i, run by `thread` (0 .. threads - 1: the index of
 * its workspace slice). */
typedef void jattn_loop_body(void *arg, int64_t i, int thread);

/* body(arg, i, thread) for i = 0 .. n - 1: on `threads` OpenMP threads, one iteration at a time to
 * whichever is free (JATTN_PARALLEL_FOR_DYNAMIC(1, threads)), when threads > 1; otherwise (and
 * without OpenMP) a plain loop in ascending order on the calling thread, thread 0, which enters no
 * parallel region (libgomp's region costs a futex wake even for a team of one, ~0.4 us). */
void jattn_parallel_for(int64_t n, int threads, jattn_loop_body *body, void *arg);

/* Aligned allocation helpers (64-byte alignment). jattn_free_aligned accepts NULL. */
void *jattn_alloc_aligned(size_t bytes);
void jattn_free_aligned(void *p);

#endif /* JATTN_BACKEND_H */
