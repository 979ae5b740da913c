/* jattn: exact float32 multi-head attention for diffusion transformers.
 *
 * For every batch b and head h (by default non-causal: every query sees every key):
 *
 *     S[i,j]     = scale * sum_d q[b,h,i,d] * k[b,g(h),j,d] + bias[b,h,j]   scale = 1/sqrt(D) unless given
 *     P[i,:]     = softmax(S[i,:])                           max-subtracted, over the keys row i attends
 *     out[i,d]   = sum_j P[i,j] * v[b,g(h),j,d]
 *     lse[b,h,i] = max_j S[i,j] + log(sum_j exp(S[i,j] - max))  (optional)
 *
 * g(h) = h / (heads / kv_heads) is the key/value head of query head h (grouped-query heads;
 * g(h) = h by default), bias is an optional additive key bias (0 by default), and which keys row i
 * attends (every key by default) is narrowed by the optional jattn_mask: key padding, causal,
 * block-causal and segment (packed sequence) masks.
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
#define JATTN_VERSION_MINOR 4
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

/* A problem. batch, heads, seq_q and seq_kv may be 0: such a problem has a defined answer
 * (PyTorch's): nothing to compute when batch, heads or seq_q is 0 (a pointer to a tensor of no
 * element may be NULL); with seq_kv = 0 every query row attends no key, so its out row is 0 and
 * its lse -inf (the backward: dq = 0; with seq_q = 0, dk = dv = 0). */
typedef struct jattn_problem {
    int64_t batch;     /* B  >= 0 */
    int64_t heads;     /* H  >= 0: query heads (q, out, lse) */
    int64_t seq_q;     /* Sq >= 0: query tokens */
    int64_t seq_kv;    /* Skv >= 0: key/value tokens (differs from Sq for cross-attention) */
    int64_t head_dim;  /* D  >= 1 */
    float scale;       /* > 0 and finite, or 0 for 1/sqrt(head_dim) */
    jattn_dtype dtype; /* element type of q, k, v and out */
    jattn_strides q, k, v, out;
    /* lse, when requested, is float32 [B, H, Sq], contiguous. */
    int64_t kv_heads; /* key/value heads (grouped-query and multi-query attention): 0 means heads;
                         otherwise >= 1 and dividing heads. k and v are [B, kv_heads, Skv, D] at their
                         strides (strides.head steps over key/value heads); query head h reads
                         key/value head h / (heads / kv_heads). Each key/value head is read in place
                         by its group, never copied. */
} jattn_problem;

/* @return strides of a contiguous head-major tensor [B, H, S, D]. */
JATTN_API jattn_strides jattn_strides_head_major(int64_t heads, int64_t seq, int64_t head_dim);
/* @return strides of a contiguous token-major tensor [B, S, H*D] (= [B, S, H, D]). */
JATTN_API jattn_strides jattn_strides_token_major(int64_t heads, int64_t seq, int64_t head_dim);
/* @return the FLUX problem: q [B,H,Sq,D], k and v [B,H,Skv,D] head-major, out [B,Sq,H*D]
 *         token-major, float32, default scale, kv_heads 0 (each query head its own key/value
 *         head). Dimensions are checked by the calls that use it. */
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
    void *cuda_stream; /* a cudaStream_t of the current device (another device's is refused,
                          JATTN_ERROR_INVALID_ARGUMENT); NULL = the legacy default stream. A call
                          orders itself after earlier work on this stream only: what writes its
                          inputs elsewhere must be ordered before it by the caller (jattn_forward) */
    void *workspace;   /* optional caller workspace (host memory for cpu, device for cuda) */
    size_t workspace_bytes;
    size_t alignment; /* plans only (jattn_plan_create): the byte alignment every data pointer of
                         the plan's calls has (a power of two >= 4); 0 means 16, what allocators give.
                         A kernel that needs more is not chosen. The one-call functions (jattn_forward
                         and the rest) read their own pointers and ignore it. */
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
 * This is the plan jattn_forward makes (jattn_plan_create for the forward, no mask), for data
 * pointers aligned as exec->alignment says (0: 16 bytes).
 * @return JATTN_OK and `*selection` filled; otherwise the status of the first problem found
 *         (invalid problem, JATTN_ERROR_UNSUPPORTED with the limit named, or
 *         JATTN_ERROR_BACKEND_UNAVAILABLE), jattn_last_error() saying why, `*selection` untouched. */
JATTN_API jattn_status jattn_select(const jattn_problem *problem, const jattn_exec *exec, jattn_selection *selection);

/* @return JATTN_OK and `*bytes` = the workspace the selected kernel needs (0 when none), for
 *         jattn_forward and for jattn_forward_padded with any padding; otherwise the status
 *         jattn_select would give. A call given a workspace (exec.workspace) of fewer bytes than its
 *         own plan reports (jattn_plan_workspace_size, at most this value for an unmasked call; the
 *         slack for an unaligned pointer included, whatever the pointer's alignment) is refused:
 *         JATTN_ERROR_WORKSPACE_TOO_SMALL, nothing written. */
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
 * not be used by a concurrent call.) The call waits for earlier work on exec->cuda_stream and
 * nothing else: on a stream created with cudaStreamNonBlocking (which does not wait for the legacy
 * default stream), inputs written by cudaMemcpy (from pageable memory it can return before the
 * copy lands), cudaMemset or another stream's kernels must be ordered before the call by the
 * caller (copy with cudaMemcpyAsync on that stream, or cudaStreamWaitEvent, or synchronise), and
 * out and lse read only after the stream's work (cudaStreamSynchronize or an event). Host
 * pointers on a stream being captured are refused (JATTN_ERROR_INVALID_ARGUMENT): that path
 * copies and synchronises.
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

/* ---- masks: which keys each query attends, and a key bias (optional) ----------------------- */
/* Causal attention. With segments (below) it applies inside each segment, in the segment's own
 * token positions (t: the query's, u: the key's, Lq and Lk: the segment's query and key counts). */
typedef enum jattn_causal {
    JATTN_CAUSAL_NONE = 0,        /* every query may attend every key (the DiT default) */
    JATTN_CAUSAL_TOP_LEFT = 1,    /* query t attends keys u <= t: PyTorch's is_causal */
    JATTN_CAUSAL_BOTTOM_RIGHT = 2 /* query t attends keys u <= t + Lk - Lq: FlashAttention's causal
                                     (the last query sees every key); the same as TOP_LEFT when Sq == Skv */
} jattn_causal;

/* Everything that narrows the keys a query attends, and an additive key bias. A zero-initialised
 * jattn_mask (or NULL) attends every key with no bias. The parts combine: query row i of batch b
 * attends key j when j is inside every window below that is set (segments, causal, blocks) and the
 * key padding attends j (jattn_key_padding); a key with bias -inf is not attended either. Keys a
 * row does not attend never affect its outputs, whatever k and v hold there. A query row with no
 * attended key gets out row 0 (+0.0) and lse -inf (its backward: a dq row of +0); keys no query
 * attends get dk = dv = +0 rows.
 *
 * Arrays of int64 offsets live where the tensors do (host memory, or device memory with
 * JATTN_MEMORY_DEVICE: then nothing is read on the host, the call stays asynchronous and
 * capturable, and an offset out of range cannot be reported there: it is clamped into range). */
typedef struct jattn_mask {
    jattn_key_padding padding; /* per-key lengths and boolean masks, as jattn_forward_padded */
    jattn_causal causal;
    /* Block-causal attention (streaming and autoregressive video: a block per frame or chunk):
     * num_blocks >= 1 blocks cut the queries at block_q[0..num_blocks] and the keys at
     * block_kv[0..num_blocks] (non-decreasing int64 offsets, block_q[0] = block_kv[0] = 0,
     * block_q[num_blocks] = seq_q, block_kv[num_blocks] = seq_kv); a query of block a attends the
     * keys of blocks 0..a: keys j < block_kv[a + 1]. block_kv may be the same array as block_q
     * (self-attention). The same blocks for every batch and head. NULL block_q: no blocks. */
    const int64_t *block_q;
    const int64_t *block_kv;
    int64_t num_blocks;
    /* Segments: packed sequences of different lengths in one row (FlashAttention's varlen
     * cu_seqlens_q / cu_seqlens_k; a segment mask). Segment s holds the queries
     * [cu_seqlens_q[s], cu_seqlens_q[s + 1]) and the keys [cu_seqlens_kv[s], cu_seqlens_kv[s + 1]);
     * a query attends only keys of its own segment. num_segments >= 1; both arrays hold
     * num_segments + 1 non-decreasing int64 offsets from 0, cu_seqlens_q[num_segments] <= seq_q and
     * cu_seqlens_kv[num_segments] <= seq_kv (queries past the last segment attend no key). Row b of
     * the offsets is at + b * segments_batch_stride (0: the same segments for every batch). NULL
     * cu_seqlens_q: no segments. */
    const int64_t *cu_seqlens_q;
    const int64_t *cu_seqlens_kv;
    int64_t num_segments;
    int64_t segments_batch_stride; /* elements between batches' offset rows; 0 = one row for all */
    /* Additive key bias, float32, added to the scaled score: S[i,j] = scale q_i . k_j +
     * key_bias[b * key_bias_batch_stride + h * key_bias_head_stride + j] for query head h (the
     * float padding masks of text encoders, -10000 or -inf on padded keys). Strides in elements,
     * >= 0; 0 broadcasts (one row for every batch, or for every head); each row holds seq_kv
     * values, contiguous. -inf leaves the key out; +inf or NaN makes the row NaN. It is a constant
     * of the call: the backward gives no gradient for it. NULL: no bias. */
    const float *key_bias;
    int64_t key_bias_batch_stride;
    int64_t key_bias_head_stride;
} jattn_mask;

/* jattn_forward with a mask: the same call and guarantees, attending only the keys `mask` leaves
 * (and adding its key bias). mask == NULL is jattn_forward; a mask with only `padding` set is
 * jattn_forward_padded. Masked-out tiles of keys are never loaded (causal attention at seq_q ==
 * seq_kv does about half the work). The workspace such a call needs is jattn_plan_workspace_size()
 * of its plan (jattn_workspace_size covers key padding only).
 * @return JATTN_OK, or the status of the first problem found (the message names the field);
 *         nothing is written on failure. */
JATTN_API jattn_status jattn_forward_masked(jattn_ctx *ctx, const jattn_problem *problem, const jattn_exec *exec,
                                            const void *q, const void *k, const void *v, const jattn_mask *mask,
                                            void *out, float *lse);

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
 * would run it? This is the plan jattn_backward makes without key padding (jattn_plan_create for
 * the backward, gradients like the problem's, no mask; AUTO: the first backend, in AUTO's order, that
 * has a backward and can run it), for data pointers aligned as exec->alignment says.
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

/* jattn_backward with a mask (jattn_mask): the gradients of jattn_forward_masked's attention.
 * With grouped-query heads, dk and dv of a key/value head sum over the query heads that read it.
 * The key bias gets no gradient. mask == NULL is jattn_backward without padding.
 * @return as jattn_backward. */
JATTN_API jattn_status jattn_backward_masked(jattn_ctx *ctx, const jattn_problem *problem,
                                             const jattn_grad_strides *grad, const jattn_exec *exec, const void *q,
                                             const void *k, const void *v, const void *out, const float *lse,
                                             const void *dout, const float *dlse, const jattn_mask *mask, void *dq,
                                             void *dk, void *dv);

/* ---- plans: decide once, call many times ----------------------------------------------- */
/* Every call above makes a plan (the problem, mask and exec validated; the backend, the kernel and
 * the workspace decided) and runs it, once. A caller that makes the same call many times (a model's
 * layers, a training loop, a binding) can make the plan once and run it per call: a run checks only
 * its pointers, so it costs the host a few hundred nanoseconds, and the kernel a plan names is the
 * kernel its runs launch (jattn_plan_selection): there is no second decision at run time.
 *
 * A plan is made for a pass (the forward, or the backward with its gradient strides) and for a mask
 * *structure*: which parts of jattn_mask are set, and their counts and strides (kv_len or not, a key
 * mask of mask_batch rows at its stride, causal, num_blocks, num_segments and its stride, a key bias
 * at its strides). A run gives the mask's arrays, which may change from run to run; a run whose mask
 * differs in structure from the plan's is refused (JATTN_ERROR_INVALID_ARGUMENT, naming the field).
 * The exec's backend, precision, memory, threads and alignment are the plan's; its cuda_stream and
 * workspace are not read: each run names its own. A plan is immutable: any number of threads may run
 * it at once (each with its own context, stream and workspace). */
typedef struct jattn_plan jattn_plan;

typedef enum jattn_pass {
    JATTN_PASS_FORWARD = 0, /* jattn_forward_masked */
    JATTN_PASS_BACKWARD = 1 /* jattn_backward_masked */
} jattn_pass;

/* Makes a plan. grad: the backward's gradient strides (NULL: like the problem's; not read for the
 * forward); mask: the structure the runs' masks have (NULL: no mask); exec NULL: defaults.
 * @return JATTN_OK and `*plan` a new plan, freed by jattn_plan_free; otherwise the status the one-call
 *         function would give for this problem (`*plan` untouched): an invalid problem, mask or exec,
 *         JATTN_ERROR_UNSUPPORTED (no backend can run it, the reason named), ..._UNAVAILABLE,
 *         ..._OUT_OF_MEMORY. */
JATTN_API jattn_status jattn_plan_create(jattn_plan **plan, jattn_pass pass, const jattn_problem *problem,
                                         const jattn_grad_strides *grad, const jattn_mask *mask,
                                         const jattn_exec *exec);
/* Frees a plan. Accepts NULL. */
JATTN_API void jattn_plan_free(jattn_plan *plan);

/* @return JATTN_OK and `*selection` what the plan's runs launch (backend, kernel, instruction set,
 *         threads); JATTN_ERROR_NULL_POINTER. */
JATTN_API jattn_status jattn_plan_selection(const jattn_plan *plan, jattn_selection *selection);

/* @return the workspace bytes a run of the plan needs when the caller provides one (0: none); the
 *         memory is the backend's (device memory for cuda, host memory otherwise). 0 for NULL. */
JATTN_API size_t jattn_plan_workspace_size(const jattn_plan *plan);

/* Runs a forward plan: as jattn_forward_masked with the plan's problem, mask structure and exec,
 * on `cuda_stream` (a cudaStream_t; NULL: the legacy default stream; ignored off the GPU) with the
 * caller's workspace (NULL: the context's or one allocated, as the one-call functions do; device
 * memory: the stream-ordered pool). @return as jattn_forward_masked; JATTN_ERROR_INVALID_ARGUMENT for
 * a backward plan or a mask of another structure. */
JATTN_API jattn_status jattn_plan_forward(const jattn_plan *plan, jattn_ctx *ctx, void *cuda_stream, void *workspace,
                                          size_t workspace_bytes, const void *q, const void *k, const void *v,
                                          const jattn_mask *mask, void *out, float *lse);

/* Runs a backward plan: as jattn_backward_masked (see jattn_plan_forward for the rest). */
JATTN_API jattn_status jattn_plan_backward(const jattn_plan *plan, jattn_ctx *ctx, void *cuda_stream, void *workspace,
                                           size_t workspace_bytes, const void *q, const void *k, const void *v,
                                           const void *out, const float *lse, const void *dout, const float *dlse,
                                           const jattn_mask *mask, void *dq, void *dk, void *dv);

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
