/* jattn: exact float32 multi-head attention for diffusion transformers.
 *
 * For every batch b and head h (non-causal, every query sees every key):
 *
 *     S[i,j]     = scale * sum_d q[b,h,i,d] * k[b,h,j,d]      scale = 1/sqrt(D) unless given
 *     P[i,:]     = softmax(S[i,:])                           max-subtracted, over all keys
 *     out[i,d]   = sum_j P[i,j] * v[b,h,j,d]
 *     lse[b,h,i] = max_j S[i,j] + log(sum_j exp(S[i,j] - max))  (optional)
 *
 * The FLUX call (head-major q/k/v [H,S,D] in, token-major [S,H*D] out) is one line:
 *
 *     jattn_problem p = jattn_problem_flux(1, 24, 1536, 1536, 128);
 *     jattn_status st = jattn_forward(NULL, &p, NULL, q, k, v, out, NULL);
 *     if (st != JATTN_OK) fprintf(stderr, "%s: %s\n", jattn_status_name(st), jattn_last_error());
 *
 * Conventions
 *  - Every call returns a jattn_status; JATTN_OK is 0. On failure nothing is written to any
 *    output, and jattn_last_error() gives a one-line message naming the offending field.
 *  - The library never exits, aborts, prints or modifies an input.
 *  - A zero-initialised jattn_exec (or NULL) means: best backend present, f32 precision, all
 *    CPU cores, the default CUDA stream, host pointers.
 *  - Numerics: the default precision is float32-exact on every backend: rel_l2 <= 2e-6
 *    against a float64 evaluation of the same float32 inputs. Results are deterministic:
 *    bitwise identical across runs, and on the CPU across thread counts.
 *  - Non-finite inputs (a NaN or Inf in one element; this is what an exact evaluation gives,
 *    and what every backend does):
 *      in q row i of (b,h): out row i is all NaN, lse[b,h,i] is not finite;
 *      a NaN in k of (b,h): every out row of (b,h) is all NaN, every lse of (b,h) not finite;
 *      an Inf in key row j of k of (b,h): query row i's score against key j is +Inf, -Inf or
 *        NaN (the sign of q[b,h,i,d] times the Inf; NaN where q[b,h,i,d] is 0). +Inf or NaN:
 *        out row i is all NaN and lse[b,h,i] not finite. -Inf: key j gets weight 0, and row i
 *        is the attention over the other keys (NaN when there is no other key);
 *      a NaN or Inf in v[b,h,j,d]: element d of every out row of (b,h) is not finite (NaN,
 *        or Inf); the other elements of those rows and lse are unaffected.
 *    Every element of out and lse not named above is bitwise what the same call gives with
 *    the non-finite element replaced by a finite one. Finite inputs whose scores overflow
 *    float32 (|scale * q_i . k_j| > FLT_MAX) are outside the float32 contract: rows holding
 *    such a score may come out NaN.
 */
#ifndef JATTN_H
#define JATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- visibility --------------------------------------------------------------------- */
#if defined(JATTN_STATIC_DEFINE)
#define JATTN_API
#elif defined(_WIN32)
#if defined(JATTN_BUILDING)
#define JATTN_API __declspec(dllexport)
#else
#define JATTN_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#define JATTN_API __attribute__((visibility("default")))
#else
#define JATTN_API
#endif

/* ---- version ------------------------------------------------------------------------ */
#define JATTN_VERSION_MAJOR 0
#define JATTN_VERSION_MINOR 3
#define JATTN_VERSION_PATCH 0
#define JATTN_VERSION_NUMBER (JATTN_VERSION_MAJOR * 10000 + JATTN_VERSION_MINOR * 100 + JATTN_VERSION_PATCH)
#define JATTN_STRINGIFY_(x) #x
#define JATTN_STRINGIFY(x) JATTN_STRINGIFY_(x)
#define JATTN_VERSION_STRING             \
    JATTN_STRINGIFY(JATTN_VERSION_MAJOR) \
    "." JATTN_STRINGIFY(JATTN_VERSION_MINOR) "." JATTN_STRINGIFY(JATTN_VERSION_PATCH)

/* @return JATTN_VERSION_NUMBER of the library actually linked. */
JATTN_API unsigned jattn_version_number(void);
/* @return JATTN_VERSION_STRING of the library actually linked (static storage). */
JATTN_API const char *jattn_version_string(void);

/* ---- status ------------------------------------------------------------------------- */
/* Every status code, once: X(NAME, VALUE, "what it means"). The enum, jattn_status_name() and
 * the bindings' mirrors (checked by their ABI tests) derive from this list. Stable numbers: a
 * code keeps its value in every later version; a new one takes the next number, at the end. */
#define JATTN_STATUS_LIST(X)                                                                     \
    X(JATTN_OK, 0, "success")                                                                    \
    X(JATTN_ERROR_NULL_POINTER, 1, "a required pointer is NULL")                                 \
    X(JATTN_ERROR_INVALID_DIMENSION, 2, "a dimension is < 1")                                    \
    X(JATTN_ERROR_OVERFLOW, 3, "an element count or byte offset overflows")                      \
    X(JATTN_ERROR_INVALID_STRIDE, 4, "a negative stride")                                        \
    X(JATTN_ERROR_SELF_OVERLAP, 5, "strides make a tensor overlap itself")                       \
    X(JATTN_ERROR_ALIASING, 6, "an output overlaps an input or another output")                  \
    X(JATTN_ERROR_INVALID_SCALE, 7, "scale is NaN, infinite or negative")                        \
    X(JATTN_ERROR_INVALID_ARGUMENT, 8, "an enum out of range, a negative thread count")          \
    X(JATTN_ERROR_UNSUPPORTED, 9, "the chosen backend cannot run this problem")                  \
    X(JATTN_ERROR_BACKEND_UNAVAILABLE, 10, "backend not built in, or no device present")         \
    X(JATTN_ERROR_WORKSPACE_TOO_SMALL, 11, "caller workspace smaller than jattn_workspace_size") \
    X(JATTN_ERROR_OUT_OF_MEMORY, 12, "an allocation failed")                                     \
    X(JATTN_ERROR_CUDA, 13, "a CUDA call failed; the message names the CUDA error")              \
    X(JATTN_ERROR_TRANSPORT, 14, "an MPI or NCCL call failed (sequence parallel); the message names it")

#define JATTN_STATUS_ENUMERATOR_(name, value, meaning) name = value,
typedef enum jattn_status { JATTN_STATUS_LIST(JATTN_STATUS_ENUMERATOR_) } jattn_status;
#undef JATTN_STATUS_ENUMERATOR_

/* One more than the largest code (the library checks it against the list). */
#define JATTN_STATUS_COUNT 15

/* @return the name of a status code, e.g. "JATTN_ERROR_ALIASING" ("JATTN_STATUS_UNKNOWN" for
 *         a value outside the enum). Static storage. */
JATTN_API const char *jattn_status_name(jattn_status status);

/* @return the message of the last failing call made by this thread, naming the offending
 *         field (e.g. "k.token: stride 64 < head_dim 128 makes k overlap itself"); "" after a
 *         successful call. Thread-local storage, valid until this thread's next jattn call. */
JATTN_API const char *jattn_last_error(void);

/* ---- problem description ------------------------------------------------------------ */
typedef enum jattn_dtype {
    JATTN_DTYPE_F32 = 0, /* the only element type implemented; the others are reserved */
    JATTN_DTYPE_BF16 = 1,
    JATTN_DTYPE_F16 = 2
} jattn_dtype;

/* Element strides of a 4-d tensor [batch, head, token, head_dim]; head_dim is contiguous.
 * Strides are in elements, >= 0, and may be 0 only where that dimension has extent 1.
 * No two elements may share an address, checked by a nesting rule: ordered by stride, each
 * dimension's stride must reach past everything the smaller-stride dimensions span (every
 * dense, padded or sliced layout passes; exotic interleavings that happen not to collide are
 * refused with JATTN_ERROR_SELF_OVERLAP). */
typedef struct jattn_strides {
    int64_t batch;
    int64_t head;
    int64_t token;
} jattn_strides;

typedef struct jattn_problem {
    int64_t batch;     /* B  >= 1 */
    int64_t heads;     /* H  >= 1 */
    int64_t seq_q;     /* Sq >= 1: query tokens */
    int64_t seq_kv;    /* Skv >= 1: key/value tokens (differs from Sq for cross-attention) */
    int64_t head_dim;  /* D  >= 1 */
    float scale;       /* > 0 and finite, or 0 for 1/sqrt(head_dim) */
    jattn_dtype dtype; /* element type of q, k, v and out */
    jattn_strides q, k, v, out;
    /* lse, when requested, is float32 [B, H, Sq], contiguous. */
} jattn_problem;

/* @return strides of a contiguous head-major tensor [B, H, S, D]. */
JATTN_API jattn_strides jattn_strides_head_major(int64_t heads, int64_t seq, int64_t head_dim);
/* @return strides of a contiguous token-major tensor [B, S, H*D] (= [B, S, H, D]). */
JATTN_API jattn_strides jattn_strides_token_major(int64_t heads, int64_t seq, int64_t head_dim);
/* @return the FLUX problem: q [B,H,Sq,D], k and v [B,H,Skv,D] head-major, out [B,Sq,H*D]
 *         token-major, float32, default scale. Dimensions are checked by the calls that use it. */
JATTN_API jattn_problem jattn_problem_flux(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                                           int64_t head_dim);

/* ---- execution ---------------------------------------------------------------------- */
/* Every backend value, once: X(NAME, VALUE). The enum and the bindings' ABI probe derive from
 * this list. What each backend is (its name, whether it computes on a GPU, the memory it works
 * in, whether it has a backward, its place in AUTO's order) the library says at run time:
 * jattn_backend_info_at() below. Stable numbers: a new backend takes the next, at the end. */
#define JATTN_BACKEND_LIST(X)                                                                 \
    X(JATTN_BACKEND_AUTO, 0) /* the first backend in AUTO's order that is present and able */ \
    X(JATTN_BACKEND_REF, 1)  /* the float64 scalar reference (the oracle; slow) */            \
    X(JATTN_BACKEND_CPU, 2)  /* flash attention on the CPU, SIMD micro-kernels, OpenMP */     \
    X(JATTN_BACKEND_CUDA, 3) /* NVIDIA GPUs */                                                \
    X(JATTN_BACKEND_VK, 4)   /* any Vulkan GPU, host memory (JATTN_VK_DEVICE=<index> picks one) */

#define JATTN_BACKEND_ENUMERATOR_(name, value) name = value,
typedef enum jattn_backend { JATTN_BACKEND_LIST(JATTN_BACKEND_ENUMERATOR_) } jattn_backend;
#undef JATTN_BACKEND_ENUMERATOR_

/* One more than the largest value (the library checks it against its backends). */
#define JATTN_BACKEND_COUNT 5

typedef enum jattn_precision {
    JATTN_PRECISION_F32 = 0, /* float32-exact (default) */
    JATTN_PRECISION_TF32 = 1 /* opt-in, GPU: TF32 tensor-core products, rel_l2 <= 1e-3 */
} jattn_precision;

typedef enum jattn_memory {
    JATTN_MEMORY_HOST = 0,  /* q, k, v, out, lse are host pointers */
    JATTN_MEMORY_DEVICE = 1 /* they are CUDA device pointers of the current device */
} jattn_memory;

typedef struct jattn_exec {
    jattn_backend backend;
    jattn_precision precision;
    jattn_memory memory;
    int threads;       /* CPU threads; 0 = all cores */
    void *cuda_stream; /* a cudaStream_t; NULL = the legacy default stream */
    void *workspace;   /* optional caller workspace (host memory for cpu, device for cuda) */
    size_t workspace_bytes;
} jattn_exec;

/* What a backend would run for a problem. Strings have static storage. */
typedef struct jattn_selection {
    jattn_backend backend; /* the backend chosen (never AUTO) */
    const char *backend_name;
    const char *kernel; /* the kernel that runs, e.g. "cpu_flash_f32_avx512_4x48" */
    const char *isa;    /* instruction set: "scalar", "avx512", "avx2", "neon", "generic", "sm_90a", ... */
    int threads;        /* CPU threads it would use (1 for GPU backends) */
} jattn_selection;

/* @return the name of a backend (e.g. "cpu"; "auto" for JATTN_BACKEND_AUTO), NULL if out of range.
 *         Static storage. */
JATTN_API const char *jattn_backend_name(jattn_backend backend);

/* What a backend is, for tools and bindings that list, describe or choose backends without
 * restating them. Strings have static storage. A backend not built into this library (or
 * without a device here) is still described: jattn_select() says whether it can run. */
typedef struct jattn_backend_info {
    jattn_backend backend; /* its value (never AUTO) */
    const char *name;      /* jattn_backend_name(backend) */
    jattn_memory memory;   /* the memory it computes from: JATTN_MEMORY_DEVICE (it also takes host
                              pointers, copying them to the device and back) or JATTN_MEMORY_HOST */
    int is_gpu;            /* 1 when it computes on a GPU, 0 on the CPU */
    int has_backward;      /* 1 when jattn_backward can run on it (where it is present and able) */
    int auto_rank;         /* its place in AUTO's order: 0 is tried first */
} jattn_backend_info;

/* @return the number of backends of the library linked (AUTO is not one): JATTN_BACKEND_COUNT - 1
 *         of the header it was built from. */
JATTN_API int jattn_backend_info_count(void);

/* Describes the backend AUTO tries at place `auto_rank` (0 first, < jattn_backend_info_count()):
 * enumerating 0, 1, ... lists every backend in AUTO's order.
 * @return JATTN_OK and `*info` filled; JATTN_ERROR_NULL_POINTER, or JATTN_ERROR_INVALID_ARGUMENT
 *         for a rank out of range (then `*info` is untouched). */
JATTN_API jattn_status jattn_backend_info_at(int auto_rank, jattn_backend_info *info);

/* Can the backend of `exec` (NULL: defaults) run `problem`, and which kernel would run it?
 * This is the function jattn_forward dispatches with.
 * @return JATTN_OK and `*selection` filled; otherwise the status of the first problem found
 *         (invalid problem, JATTN_ERROR_UNSUPPORTED with the limit named, or
 *         JATTN_ERROR_BACKEND_UNAVAILABLE), jattn_last_error() saying why, `*selection` untouched. */
JATTN_API jattn_status jattn_select(const jattn_problem *problem, const jattn_exec *exec, jattn_selection *selection);

/* @return JATTN_OK and `*bytes` = the workspace the selected kernel needs (0 when none), for
 *         jattn_forward and for jattn_forward_padded with any padding; otherwise the status
 *         jattn_select would give. */
JATTN_API jattn_status jattn_workspace_size(const jattn_problem *problem, const jattn_exec *exec, size_t *bytes);

/* ---- context ------------------------------------------------------------------------ */
/* A context keeps grow-only buffers (host workspace; device copies of host arrays for the
 * cuda backend) between calls, so that repeated calls of one size allocate nothing.
 * A context may be used by one thread at a time. */
typedef struct jattn_ctx jattn_ctx;

/* @return JATTN_OK and `*ctx` a new context; JATTN_ERROR_NULL_POINTER or
 *         JATTN_ERROR_OUT_OF_MEMORY (then `*ctx` is untouched). */
JATTN_API jattn_status jattn_ctx_create(jattn_ctx **ctx);
/* Frees a context and every buffer it holds. Accepts NULL. */
JATTN_API void jattn_ctx_free(jattn_ctx *ctx);

/* ---- the call ----------------------------------------------------------------------- */
/* Computes the attention of `problem` with the backend of `exec` (NULL: defaults).
 * ctx may be NULL: buffers are then allocated for the call and freed before it returns
 * (unless exec->workspace is given). out receives the attention; lse (may be NULL) receives
 * the log-sum-exp of each query row, float32 [B, H, Sq] contiguous.
 * With exec->memory == JATTN_MEMORY_DEVICE the call is asynchronous on exec->cuda_stream,
 * allocates nothing when a workspace is given (or none is needed), and never synchronises:
 * it can be captured in a CUDA graph. (Without one, the cuda backend takes the workspace its
 * kernel needs from the device's stream-ordered memory pool, cudaMallocAsync and
 * cudaFreeAsync on that stream; a graph capture records them. A given device workspace must
 * not be used by a concurrent call.)
 * @return JATTN_OK, or the status of the first problem found; nothing is written to out or
 *         lse on failure (device pointers: for failures detected before the launch). */
JATTN_API jattn_status jattn_forward(jattn_ctx *ctx, const jattn_problem *problem, const jattn_exec *exec,
                                     const void *q, const void *k, const void *v, void *out, float *lse);

/* ---- key padding (optional) --------------------------------------------------------- */
/* Which keys each batch attends, for DiTs that batch prompts of different lengths. Key j of
 * batch b is attended when
 *     (kv_len == NULL || j < kv_len[b])  and  (mask == NULL || mask[b * mask_batch_stride + j] != 0)
 * (with mask_batch == 1 the one row serves every batch). Softmax, out and lse run over the
 * attended keys only: a key that is not attended never affects any output, whatever k and v
 * hold there (NaN and Inf included), and keys j >= kv_len[b] are never read.
 * A query row with no attended key gets out row 0 (every element +0.0) and lse -inf; PyTorch's
 * scaled_dot_product_attention gives the same 0 row for a fully masked boolean mask (2.5 and
 * later; its math path gave NaN before).
 * The arrays live where the tensors do: host memory, or device memory with JATTN_MEMORY_DEVICE
 * (then nothing is read on the host and the call stays asynchronous and capturable; a length
 * out of range cannot be reported there and is clamped to [0, seq_kv]). A zero-initialised
 * jattn_key_padding (or NULL) attends every key. */
typedef struct jattn_key_padding {
    const int64_t *kv_len;     /* NULL, or [batch] key lengths, 0 <= kv_len[b] <= seq_kv */
    const uint8_t *mask;       /* NULL, or a boolean key mask: one byte per key, nonzero = attend */
    int64_t mask_batch;        /* the mask's rows: batch, or 1 (one row broadcast over the batch) */
    int64_t mask_keys;         /* the mask's bytes per row: must equal seq_kv */
    int64_t mask_batch_stride; /* bytes between rows when mask_batch > 1, >= mask_keys;
                                  0 means mask_keys (rows back to back) */
} jattn_key_padding;

/* jattn_forward with key padding: the same call, the same workspace (jattn_workspace_size
 * covers padded calls) and the same guarantees, attending only the keys `padding` selects.
 * padding == NULL is jattn_forward. Invalid padding (a length out of range, a mask whose
 * extent is not [batch or 1, seq_kv], a negative or overlapping row stride, a mask or length
 * array overlapping out or lse) fails with its own message before anything is written.
 * @return JATTN_OK, or the status of the first problem found; nothing is written on failure. */
JATTN_API jattn_status jattn_forward_padded(jattn_ctx *ctx, const jattn_problem *problem, const jattn_exec *exec,
                                            const void *q, const void *k, const void *v,
                                            const jattn_key_padding *padding, void *out, float *lse);

/* ---- backward (training) ------------------------------------------------------------ */
/* The gradients of the attention of a problem (the forward above) with respect to q, k and v,
 * given the gradient of its output, for training. Per (b, h), scale c, query rows i, keys j:
 *
 *     P[i,j] = exp(c * q_i . k_j - lse_i)           the forward's weights, recomputed
 *     Dl[i]  = dout_i . out_i - dlse_i               (dlse_i = 0 when dlse is NULL)
 *     dS[i,j] = P[i,j] * (dout_i . v_j - Dl[i])
 *     dq_i = c sum_j dS[i,j] k_j     dk_j = c sum_i dS[i,j] q_i     dv_j = sum_i P[i,j] dout_i
 *
 * `out` and `lse` are plain inputs: what jattn_forward (with an lse) produced for these q, k, v,
 * or the output and lse of a larger attention that this call's keys are a part of (a ring
 * backward passes the global out and lse with each K/V chunk). `dlse` is the gradient flowing
 * into the lse output (may be NULL). Key padding as in jattn_forward_padded: keys that are not
 * attended are never read and get dk = dv = +0 rows; a query row with no attended key gets a
 * dq row of +0. Accuracy (f32): each of dq, dk, dv within rel_l2 5e-6, max_abs
 * 2e-5 * max(1, max|ref|), cos 0.99999 of a float64 evaluation of the same float32 inputs
 * (jattn_forward's out and lse given). Deterministic as jattn_forward: bitwise identical across
 * runs and, on the CPU, across thread counts. Non-finite inputs propagate to the gradients they
 * reach; masked keys reach none. */

/* Element strides of the gradient tensors, each [batch, head, token, head_dim] as the problem's
 * tensors (head_dim contiguous): dout has out's extent, dq q's, dk k's and dv v's. */
typedef struct jattn_grad_strides {
    jattn_strides dout, dq, dk, dv;
} jattn_grad_strides;

/* @return the gradient strides that mirror the problem's own: dout like out, dq like q, dk like
 *         k, dv like v (what a NULL jattn_grad_strides means). */
JATTN_API jattn_grad_strides jattn_grad_strides_like(const jattn_problem *problem);

/* Can the backend of `exec` (NULL: defaults) run the backward of `problem`, and which kernel
 * would run it? This is the function jattn_backward dispatches with (AUTO: the first backend, in
 * AUTO's order, that has a backward and can run it).
 * @return JATTN_OK and `*selection` filled; otherwise the status of the first problem found
 *         (as jattn_select; JATTN_ERROR_UNSUPPORTED where a backend has no backward for the
 *         problem), jattn_last_error() saying why, `*selection` untouched. */
JATTN_API jattn_status jattn_backward_select(const jattn_problem *problem, const jattn_exec *exec,
                                             jattn_selection *selection);

/* @return JATTN_OK and `*bytes` = the workspace jattn_backward needs for this problem, gradient
 *         strides (NULL: like the problem's) and exec, with any key padding (0 when none);
 *         otherwise the status jattn_backward_select (or the strides' validation) gives. */
JATTN_API jattn_status jattn_backward_workspace_size(const jattn_problem *problem, const jattn_grad_strides *grad,
                                                     const jattn_exec *exec, size_t *bytes);

/* Computes dq, dk, dv (overwritten) of the attention of `problem` (see above). grad NULL: dout
 * like out, dq like q, dk like k, dv like v. exec, ctx and the workspace as for jattn_forward.
 * Required: q, k, v, out, lse (float32 [B, H, Sq] contiguous), dout, dq, dk, dv; dlse (float32
 * [B, H, Sq] contiguous) and padding may be NULL. dq, dk and dv must not overlap each other nor
 * any input (JATTN_ERROR_ALIASING); inputs may share memory. No input is modified.
 * @return JATTN_OK, or the status of the first problem found (the message names the field);
 *         nothing is written to dq, dk or dv on failure. */
JATTN_API jattn_status jattn_backward(jattn_ctx *ctx, const jattn_problem *problem, const jattn_grad_strides *grad,
                                      const jattn_exec *exec, const void *q, const void *k, const void *v,
                                      const void *out, const float *lse, const void *dout, const float *dlse,
                                      const jattn_key_padding *padding, void *dq, void *dk, void *dv);

/* ---- layers built on this API ------------------------------------------------------- */
/* The sequence-parallel API (one attention spread over several GPUs or processes) is declared
 * in jattn_parallel.h, defined in the separate library libjattn_parallel.
 *
 * For libraries layered on jattn's public API (libjattn_parallel, language bindings):
 * makes `message` (NULL: "") what jattn_last_error() returns on this thread, truncated to 255
 * bytes, so that their failures read like the library's own.
 * @return status, unchanged. */
JATTN_API jattn_status jattn_set_last_error(jattn_status status, const char *message);

#ifdef __cplusplus
}
#endif
#endif /* JATTN_H */
