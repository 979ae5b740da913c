/* The cuda backend's internal interface, shared by the C launch code (cuda_backend.c,
 * cuda_versions.c), the kernel files (attention_v*.cu, backward_v*.cu) and, through the internal
 * door (src/internal/jattn_internal.h), the tests and benchmarks that look inside
 * (test_cuda_device.c, bench/gpu). Plain C: every kernel version exports one extern "C" launcher of
 * one shape, jattn_cuda_launch_vN(args, workspace, stream). */
#ifndef JATTN_CUDA_INTERNAL_H
#define JATTN_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "jattn.h" /* jattn_precision */

#ifdef __cplusplus
extern "C" {
#endif

/* One attention call, forward or backward, as every kernel version's launcher takes it: device
 * pointers, element strides (B, H, S; head_dim contiguous) and the resolved softmax scale. Kernels
 * fold the scale into q (exact when it is a power of two) and keep scores in natural units:
 * s - max is exact when s is, and only then is it multiplied by log2(e) for exp2. */
typedef struct jattn_cuda_strides {
    int64_t batch, head, token; /* element strides; head_dim is contiguous */
} jattn_cuda_strides;

typedef struct jattn_cuda_args {
    const float *q, *k, *v; /* device pointers */
    float *out;             /* device pointer [B, H, Sq, D] through `out_strides`: the forward writes
                             * it, the backward reads it (the forward's output) */
    float *lse;             /* device pointer [B, H, Sq] contiguous: the forward writes it (or NULL),
                             * the backward reads it (never NULL) */
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    jattn_cuda_strides q_strides, k_strides, v_strides, out_strides;
    float scale;               /* > 0, finite */
    jattn_precision precision; /* F32: float32-exact; TF32: the opt-in, each version's own way */
    /* Key padding, resolved on the device by the pre-pass of key_padding.cu; both NULL when
     * every key is attended. A kernel runs batch b over its kv_count[b] attended keys as if
     * they were the whole sequence: key j of it is row kv_index[b * seq_kv + j] of k and v
     * (row j when kv_index is NULL), and a row with none gets out 0 and lse -inf. */
    const int *kv_count; /* [B] */
    const int *kv_index; /* [B][seq_kv]: the attended rows ascending, then the others ascending (a
                          * permutation); the forward kernels read the first kv_count[b] */
    /* The backward's (jattn_backward) gradient tensors, each through its own element strides
     * (head_dim contiguous): dout read, dq, dk, dv written; dlse [B, H, Sq] contiguous or NULL
     * (zero). All NULL in a forward call. */
    const float *dout, *dlse;
    float *dq, *dk, *dv;
    jattn_cuda_strides dout_strides, dq_strides, dk_strides, dv_strides;
    /* Grouped-query heads: k and v (dk and dv) have kv_heads heads (== heads without grouping);
     * query head h reads key/value head h / (heads / kv_heads). */
    int64_t kv_heads;
    /* The rest of the mask (include/jattn.h, jattn_mask; key_window.cuh gives a row's window and a
     * key's bias from these), device pointers; NULL / 0 where the plan has no such part. A version
     * gets only the parts its descriptor serves (cuda_versions.c, .features). */
    int causal;                        /* a jattn_causal */
    const int64_t *block_q, *block_kv; /* num_blocks + 1 offsets each */
    int64_t num_blocks;
    const int64_t *cu_seqlens_q, *cu_seqlens_kv; /* row b at + b * segments_stride */
    int64_t num_segments, segments_stride;
    const float *key_bias; /* row (b, h) at + b * bias_batch_stride + h * bias_head_stride, seq_kv values */
    int64_t bias_batch_stride, bias_head_stride;
} jattn_cuda_args;

/* The kernel versions kept side by side (see each file's opening comment); which one AUTO runs
 * where: the ladder table of src/cuda/NOTES.md. */
typedef enum jattn_cuda_kernel {
    JATTN_CUDA_KERNEL_AUTO = 0, /* the ladder (src/cuda/NOTES.md): v6 where it applies, else v7, else v1 */
    JATTN_CUDA_KERNEL_V1 = 1,   /* attention_v1_simt.cu: plain fp32 SIMT, any D <= 512, every mask part */
    /* 2: v2 (mma.sync m16n8k8 3xTF32), removed: superseded by v7 (src/cuda/JOURNAL.md) */
    /* 3: v3 (sm_90a wgmma 3xTF32), removed: superseded by v4 and v6 (src/cuda/JOURNAL.md) */
    /* 4: v4 (sm_90a wgmma 2xFP16, transposed), removed: superseded by v6 (src/cuda/JOURNAL.md) */
    /* 5: v5 (v4's arithmetic warp-specialized), removed: superseded by v6 (src/cuda/JOURNAL.md) */
    JATTN_CUDA_KERNEL_V6 = 6, /* attention_v6_sm90_fa3_f16x2.cu: sm_90a wgmma on 2xFP16 operands in the
                               * FlashAttention-3 orientation (S = Q K^T, the row softmax in registers),
                               * warp-specialized, its own pre-pass and workspace: device 9.0, D 64 or
                               * 128, strides multiples of 4 (select refuses a forced v6 otherwise),
                               * seq_q and seq_kv <= 2^31 - 129 and seq_kv >= 2 (v1 runs a single key,
                               * as AUTO does); pointers 16-byte aligned; every mask part, grouped heads */
    JATTN_CUDA_KERNEL_V7 = 7, /* attention_v7_mma_f16x2.cu: 2xFP16 on mma.sync m16n8k16 (sm_80 and newer),
                               * its own pre-pass and workspace; any head_dim up to 256, any strides,
                               * every mask part, grouped heads; seq_kv >= 2 */
    JATTN_CUDA_KERNEL_COUNT = 8
} jattn_cuda_kernel;

/* Below this head_dim the tf32 precision runs the f32 arithmetic, forward and backward (the
 * backend passes JATTN_PRECISION_F32 to the launcher and names the f32 kernel): an output element
 * there is a sum over the sequence with few or no head_dim terms to average one product's
 * rounding, and one TF32 or fp16 product missed the tf32 gate (rel_l2 1e-3) at head_dim 1 on the
 * H200 (backward v1: dq 3.2e-3, dk 1.3e-3; kernel v7's P V: 1.05e-3), at no speed to gain. */
#define JATTN_CUDA_TF32_MIN_HEAD_DIM 16

/* The precision a kernel runs a call of this precision and head_dim in. */
static inline jattn_precision jattn_cuda_arithmetic(jattn_precision precision, int64_t head_dim) {
    return head_dim < JATTN_CUDA_TF32_MIN_HEAD_DIM ? JATTN_PRECISION_F32 : precision;
}

/* Limits of each version. */
#define JATTN_CUDA_V1_MAX_HEAD_DIM 512
#define JATTN_CUDA_V7_MAX_HEAD_DIM 256
/* AUTO's forward runs v1 below this head_dim: v7's split logits and weights leave out and lse too far
 * from float32 at a handful of columns for the backward's float32 floor (src/cuda/JOURNAL.md, "The
 * head_dim-1 chain is the forward's"); v1 runs its float64 kernel there (attention_v1_small_head_dim.cu). */
#define JATTN_CUDA_V1_SMALL_D 8
#define JATTN_CUDA_V7_MAX_SEQ (INT32_MAX - 128) /* its 128-query CTAs index rows with 32 bits */
/* v6's limits are those of the sm_90a launch contract (attention_sm90.h). */

/* Device bytes of the key padding's pre-pass output for a problem: kv_count and kv_index
 * (each region 256-byte aligned). Every kernel's workspace includes them. */
size_t jattn_cuda_padding_bytes(int64_t batch, int64_t seq_kv);

/* Enqueues the pre-pass of a padded call: from kv_len ([B] int64, or NULL) and the mask (row
 * b at mask + b * mask_stride, seq_kv bytes, or NULL), writes kv_count [B] (lengths clamped to
 * [0, seq_kv]) and, with a mask, kv_index [B][seq_kv] (the attended rows, then the others) into `out`
 * (jattn_cuda_padding_bytes, 256-byte aligned) and points *count, *index at them (*index NULL without a mask).
 * @return the cudaError_t of the launch (as int). */
int jattn_cuda_launch_padding(const int64_t *kv_len, const uint8_t *mask, int64_t mask_stride, int batch, int seq_kv,
                              void *out, const int **count, const int **index, void *stream);

/* The launchers, one per version and all of one shape: enqueue the version's kernel(s) on
 * `stream` (a cudaStream_t) for `a`, with `workspace` its own device workspace (v6:
 * attention_f32_sm90_fa3_f16x2_workspace_bytes(); v7: jattn_cuda_v7_workspace_bytes(); 16-byte
 * aligned; NULL for v1). No allocation, no synchronisation. v6 refuses (cudaErrorInvalidValue,
 * nothing enqueued) arguments outside its contract (attention_sm90.h).
 * @return the cudaError_t of the launch (as int; 0 = cudaSuccess). */
int jattn_cuda_launch_v1(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v1_simt.cu */
/* v1 below head_dim JATTN_CUDA_V1_SMALL_D (attention_v1_small_head_dim.cu; jattn_cuda_launch_v1 calls it) */
int jattn_cuda_launch_v1_small_head_dim(const jattn_cuda_args *a, void *stream);
int jattn_cuda_launch_v6(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v6_sm90_fa3_f16x2.cu */
int jattn_cuda_launch_v7(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v7_mma_f16x2.cu */

/* Device bytes of kernel v7's workspace (attention_v7_split_kv_f16x2.cu: the split K and V
 * records, about the size of K plus V with head_dim rounded up to its tile). */
size_t jattn_cuda_v7_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_kv, int64_t head_dim);

/* The answer of a problem without keys or queries (empty_fill.cu): +0 in every row of a
 * [batch, heads, rows, head_dim] tensor at `strides` and, when lse is not NULL, -inf in lse [batch,
 * heads, rows] contiguous, enqueued on `stream`. @return a cudaError_t as int. */
int jattn_cuda_launch_fill_rows(float *x, int64_t batch, int64_t heads, int64_t rows, int64_t head_dim,
                                jattn_cuda_strides strides, float *lse, void *stream);

/* ---- the backward (jattn_backward) ---- */

/* The backward v3 (backward_v3_mma_f16x2.cu: mma.sync m16n8k16 fp16 on 2xFP16 operands, sm_80 and newer):
 * every head_dim up to this, any strides, every mask part (key padding, causal, blocks, segments, a key
 * bias) and grouped-query heads, f32 and tf32 (run as f32). */
#define JATTN_CUDA_BWD_V3_MAX_HEAD_DIM 256

/* Device bytes of the backward v3's own workspace (backward_v3_layout.cuh: the 64-row records of q, dout,
 * k, v split into 2xFP16 with head_dim padded to a multiple of 16, about 2 B (H Sq + Hkv Skv) Dp x 4 bytes,
 * plus 28 bytes per query row and the mask's regions, 9 bytes per query row and 4 per key of each query
 * head). kv_heads = heads: the most any kv_heads needs. */
size_t jattn_cuda_bwd_v3_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim);
/* The same with kv_heads key/value heads (k and v records per key/value head). */
size_t jattn_cuda_bwd_v3_workspace_bytes_gqa(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q,
                                             int64_t seq_kv, int64_t head_dim);

/* Enqueues the backward v3 (backward_v3_mma_f16x2.cu) on `stream`: its split pre-pass, for a key-padded
 * call the +0 fill of dk and dv, the dQ kernel and the dK/dV kernel (which takes each query row's
 * dominant weight from dQ); a call with a window part, a key bias or grouped-query heads (a's mask and
 * kv_heads) runs their masked instances. `workspace`: jattn_cuda_bwd_v3_workspace_bytes_gqa(), 16-byte aligned.
 * No allocation, no synchronisation (the first call on a device asks it for its occupancy, once). Refuses
 * (cudaErrorInvalidValue, nothing enqueued) head_dim > JATTN_CUDA_BWD_V3_MAX_HEAD_DIM or kv_heads not
 * dividing heads.
 * @return the cudaError_t of the launches (as int; 0 = cudaSuccess). */
int jattn_cuda_launch_bwd_v3(const jattn_cuda_args *a, void *workspace, void *stream);

/* Device bytes of the backward v4's own workspace (backward_v4_sm90_fa3_f16x2.cu: the tile records of q, dout,
 * k, v split into 2xFP16 (backward_v4_records.cuh, about 2 B (H Sq + Hkv Skv) D x 4 bytes), then 132 + B H - 1
 * fp32 copies of one head's dQ, the split schedule's dK, dV slots (128 keys x D x 2 per CTA, at most 132) and, with
 * grouped heads (kv_heads < heads; 0 = heads), each query head's dK, dV (2 B H Skv D floats)), the window table and
 * the staged key bias (B H ceil(Skv / 128) 128 floats), counted for every call. */
size_t jattn_cuda_bwd_v4_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_kv,
                                         int64_t head_dim);

/* The backward v4's work units, B H ceil(seq_q / 64) ceil(seq_kv / 128) (its persistent grid counts them with
 * 32 bits: it takes at most INT32_MAX), INT64_MAX where that overflows (sm90_contract.c). */
int64_t jattn_cuda_bwd_v4_units(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv);

/* Why the backward v4 cannot run a plan with these gradient strides and this pointer alignment (the part of its
 * contract beyond the forward's sm_90a problem: gradients' strides multiples of 4 elements, pointers 16-byte
 * aligned, sequences below 2^31 - 128, at most 2^31 - 1 work units), or NULL (sm90_contract.c). */
const char *jattn_cuda_bwd_v4_refusal(const jattn_problem *p, const jattn_grad_strides *grad, size_t alignment);

/* Whether the backward v4's launcher refuses these arguments (segments or blocks missing one offset array,
 * kv_heads not dividing heads, D other than 64 and 128, a single key, B*H > 65535, seq_q or seq_kv above 2^31 - 129,
 * more than INT32_MAX work units, a pointer not 16-byte aligned or a stride not a non-negative multiple of 4): its own
 * guard. The backend's selection never hands it such a call: see jattn_cuda_bwd_v4_refusal. */
int jattn_cuda_bwd_v4_call_refused(const jattn_cuda_args *a);

/* Enqueues the backward v4 (backward_v4_sm90_fa3_f16x2.cu: one fused sm_90a kernel in FlashAttention-3's
 * orientation, 2xFP16) on `stream`: the pre-pass of its records, the fused kernel, the dQ reduction and
 * (a split schedule) the cut items' dK, dV. `workspace`: jattn_cuda_bwd_v4_workspace_bytes(), 16-byte aligned.
 * No allocation, no synchronisation. Refuses (cudaErrorInvalidValue, nothing enqueued) a call
 * jattn_cuda_bwd_v4_call_refused() names; cudaErrorNoKernelImageForDevice on a device other than compute
 * capability 9.0.
 * @return the cudaError_t of the launches (as int; 0 = cudaSuccess). */
int jattn_cuda_launch_bwd_v4(const jattn_cuda_args *a, void *workspace, void *stream);

/* The backward's kernel choice. AUTO: v4 on 9.0 devices where it takes the problem (f32 and tf32, D 64 or
 * 128, strides of every tensor multiples of 4, pointers 16-byte aligned, seq_kv >= 2, grouped heads, key padding
 * or causal where every key is attended, no other mask part), else v3 (every head_dim up to 256, every device, key
 * padding, every mask part, tf32 as f32): the ladder of src/cuda/NOTES.md. A forced v4 falls back to v3 where it cannot
 * run (so the whole test battery runs with it forced); a forced v3 runs everywhere it takes. */
typedef enum jattn_cuda_bwd_kernel {
    JATTN_CUDA_BWD_KERNEL_AUTO = 0,
    /* 1: the backward v1 (mma.sync 3xTF32), 2: the backward v2 (sm_90a wgmma, three kernels), removed:
     * superseded by v3 and v4 (src/cuda/JOURNAL.md) */
    JATTN_CUDA_BWD_KERNEL_V3 = 3, /* backward_v3_mma_f16x2.cu */
    JATTN_CUDA_BWD_KERNEL_V4 = 4, /* backward_v4_sm90_fa3_f16x2.cu */
    JATTN_CUDA_BWD_KERNEL_COUNT = 5
} jattn_cuda_bwd_kernel;

/* ---- knobs and counters for tests and the harness ---- */

/* Whether k is a backward version of the library (the numbers of the removed v1 and v2 stay unused):
 * what the environment variable JATTN_CUDA_BWD_KERNEL=v3|v4 accepts besides AUTO (it forces the backward's
 * kernel for every call of the process). */
int jattn_cuda_bwd_kernel_exists(jattn_cuda_bwd_kernel k);

/* Forces a kernel version for every later call of this process (AUTO restores the default;
 * the environment variable JATTN_CUDA_KERNEL=v1|v6|v7 sets the initial value). The fallbacks are
 * those of the versions' table (cuda_versions.c): v7 falls back to v1 where it cannot run a
 * problem; v6 makes a plan fail with UNSUPPORTED (naming the reason) where it cannot, pointers that
 * miss its 16-byte alignment included (a one-call function plans for its own pointers). */
void jattn_cuda_set_kernel(jattn_cuda_kernel k);

/* Whether k is a kernel version of the library (the numbers of removed versions stay unused, so
 * that vN keeps naming the same kernel): what jattn_cuda_set_kernel and JATTN_CUDA_KERNEL accept
 * besides AUTO. */
int jattn_cuda_kernel_exists(jattn_cuda_kernel k);

/* Number of cudaMalloc and cudaMallocAsync calls the backend has made in this process. */
long jattn_cuda_alloc_count(void);

#ifdef __cplusplus
}
#endif
#endif /* JATTN_CUDA_INTERNAL_H */
