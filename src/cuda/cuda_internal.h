/* The cuda backend's internal interface, shared by the C launch code (cuda_backend.c,
 * cuda_versions.c), the kernel files (attention_v*.cu) and the tests that look inside
 * (test_cuda_device.c). Plain C: every kernel version exports one extern "C" launcher of one
 * shape, jattn_cuda_launch_vN(args, workspace, stream). */
#ifndef JATTN_CUDA_INTERNAL_H
#define JATTN_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "jattn.h" /* jattn_precision */

#ifdef __cplusplus
extern "C" {
#endif

/* One attention call as every kernel version's launcher takes it: device pointers, element
 * strides (B, H, S; head_dim contiguous) and the resolved softmax scale. Kernels fold the scale
 * into q (exact when it is a power of two) and keep scores in natural units: s - max is exact
 * when s is, and only then is it multiplied by log2(e) for exp2. */
typedef struct jattn_cuda_strides {
    int64_t batch, head, token; /* element strides; head_dim is contiguous */
} jattn_cuda_strides;

typedef struct jattn_cuda_args {
    const float *q, *k, *v; /* device pointers */
    float *out;             /* device pointer, written [B, H, Sq, D] through `out_strides` */
    float *lse;             /* device pointer [B, H, Sq] contiguous, or NULL */
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    jattn_cuda_strides q_strides, k_strides, v_strides, out_strides;
    float scale;               /* > 0, finite */
    jattn_precision precision; /* F32: float32-exact; TF32: the opt-in, each version's own way */
    int v4_ctas_per_sm;        /* kernel v4 only: 0 = chosen per call; 2 or 3 = that instance (tests) */
    int v5_variant;            /* kernel v5: 0 = the kernel; 2 = with the consumers' ping-pong (A/B runs);
                                * kernel v6: bit 0 = the consumers' ping-pong */
    /* Key padding, resolved on the device by the pre-pass of key_padding.cu; both NULL when
     * every key is attended. A kernel runs batch b over its kv_count[b] attended keys as if
     * they were the whole sequence: key j of it is row kv_index[b * seq_kv + j] of k and v
     * (row j when kv_index is NULL), and a row with none gets out 0 and lse -inf. */
    const int *kv_count; /* [B] */
    const int *kv_index; /* [B][seq_kv], ascending rows; entries past kv_count[b] unused */
} jattn_cuda_args;

/* The kernel versions kept side by side (see each file's opening comment). */
typedef enum jattn_cuda_kernel {
    JATTN_CUDA_KERNEL_AUTO = 0, /* v6 where it applies, else v4, else v2, else v1 (cuda_backend.c) */
    JATTN_CUDA_KERNEL_V1 = 1,   /* attention_v1_simt.cu: plain fp32 SIMT, any D <= 512 */
    JATTN_CUDA_KERNEL_V2 = 2,   /* attention_v2_mma.cu: mma.sync m16n8k8 3xTF32, D % 8 == 0, D <= 256 */
    JATTN_CUDA_KERNEL_V3 = 3,   /* attention_v3_sm90_tf32x3.cu (v3.2): sm_90a wgmma 3xTF32, transposed
                                 * S^T = K Q^T: device 9.0, D 64 or 128, strides multiples of 4
                                 * (select refuses a forced v3 otherwise), pointers 16-byte aligned
                                 * (else that call runs v2) */
    JATTN_CUDA_KERNEL_V4 = 4,   /* attention_v4_sm90_f16x2.cu: sm_90a wgmma on 2xFP16 operands split
                                 * by a pre-pass into a device workspace; the same limits as v3 */
    JATTN_CUDA_KERNEL_V5 = 5,   /* attention_v5_sm90_ws_f16x2.cu: v4's arithmetic in a warp-specialized CTA
                                 * (a bulk-copy producer, two consumer warpgroups in ping-pong); the
                                 * same limits and workspace as v4; a key-padded call runs v4 */
    JATTN_CUDA_KERNEL_V6 = 6,   /* attention_v6_sm90_fa3_f16x2.cu: 2xFP16 in the FlashAttention-3 orientation
                                 * (S = Q K^T, the row softmax in registers), warp-specialized, its own
                                 * pre-pass and workspace; v3's limits, seq_q and seq_kv <= 2^31 - 129
                                 * and seq_kv >= 2 (v1 runs a single key, as AUTO does) */
    JATTN_CUDA_KERNEL_COUNT = 7
} jattn_cuda_kernel;

/* Limits of each version. */
#define JATTN_CUDA_V1_MAX_HEAD_DIM 512
#define JATTN_CUDA_V2_MAX_HEAD_DIM 256
#define JATTN_CUDA_V2_HEAD_DIM_MULTIPLE 8
/* v3's to v6's limits are those of their launch contract (attention_sm90.h). */

/* Device bytes of the key padding's pre-pass output for a problem: kv_count and kv_index
 * (each region 256-byte aligned). Every kernel's workspace includes them. */
size_t jattn_cuda_padding_bytes(int64_t batch, int64_t seq_kv);

/* Enqueues the pre-pass of a padded call: from kv_len ([B] int64, or NULL) and the mask (row
 * b at mask + b * mask_stride, seq_kv bytes, or NULL), writes kv_count [B] (lengths clamped to
 * [0, seq_kv]) and, with a mask, kv_index [B][seq_kv] into `out` (jattn_cuda_padding_bytes,
 * 256-byte aligned) and points *count, *index at them (*index NULL without a mask).
 * @return the cudaError_t of the launch (as int). */
int jattn_cuda_launch_padding(const int64_t *kv_len, const uint8_t *mask, int64_t mask_stride, int batch, int seq_kv,
                              void *out, const int **count, const int **index, void *stream);

/* The launchers, one per version and all of one shape: enqueue the version's kernel(s) on
 * `stream` (a cudaStream_t) for `a`, with `workspace` its own device workspace (v4 and v5:
 * attention_f32_sm90_f16x2_workspace_bytes(); v6: attention_f32_sm90_fa3_f16x2_workspace_bytes();
 * 16-byte aligned; NULL for the others). No allocation, no synchronisation. v3 to v6 refuse
 * (cudaErrorInvalidValue, nothing enqueued) arguments outside their contract (attention_sm90.h),
 * v5 also a key-padded call.
 * @return the cudaError_t of the launch (as int; 0 = cudaSuccess). */
int jattn_cuda_launch_v1(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v1_simt.cu */
int jattn_cuda_launch_v2(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v2_mma.cu */
int jattn_cuda_launch_v3(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v3_sm90_tf32x3.cu */
int jattn_cuda_launch_v4(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v4_sm90_f16x2.cu */
int jattn_cuda_launch_v5(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v5_sm90_ws_f16x2.cu */
int jattn_cuda_launch_v6(const jattn_cuda_args *a, void *workspace, void *stream); /* attention_v6_sm90_fa3_f16x2.cu */

/* ---- the backward (jattn_backward) ---- */

/* One backward call as its launcher takes it: the forward's arguments (`fwd`: q, k, v, out
 * with their strides, lse [B, H, Sq] contiguous (an input here, never NULL), scale, precision,
 * the resolved key padding) and the gradient tensors: dout read, dq, dk, dv written, each
 * through its own element strides (head_dim contiguous); dlse [B, H, Sq] contiguous or NULL. */
typedef struct jattn_cuda_bwd_args {
    jattn_cuda_args fwd;
    const float *dout;
    const float *dlse;
    float *dq, *dk, *dv;
    jattn_cuda_strides dout_strides, dq_strides, dk_strides, dv_strides;
} jattn_cuda_bwd_args;

/* Limits of the backward kernels (backward_v1_mma_tf32x3.cu). */
#define JATTN_CUDA_BWD_MAX_HEAD_DIM 128
/* Below this head_dim the tf32 backward keeps dV, dK, dQ at three TF32 products, as f32 does
 * (backward_v1_mma_tf32x3.cu's opening comment says why). */
#define JATTN_CUDA_BWD_TF32_MIN_HEAD_DIM 16

/* Whether the backward v1 runs its gradient products dV, dK, dQ on three TF32 products (the f32
 * kernel, named so by the selection) rather than one. */
static inline int jattn_cuda_bwd_v1_grads_x3(jattn_precision precision, int64_t head_dim) {
    return precision == JATTN_PRECISION_F32 || head_dim < JATTN_CUDA_BWD_TF32_MIN_HEAD_DIM;
}

/* Device bytes of the backward v1's own workspace (after the key padding's region): the row
 * terms Dl = dO.O - dlse as float hi + lo pairs, then each row's exact P of its P >= 1/2 element
 * (one float), B * H * Sq of each (256-byte aligned). */
size_t jattn_cuda_bwd_v1_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_q);

/* Enqueues the backward v1 (backward_v1_mma_tf32x3.cu) on `stream`: the Dl pre-pass, for a
 * key-padded call the +0 fill of dk and dv, the dQ kernel, the dK/dV kernel. `workspace`:
 * jattn_cuda_bwd_v1_workspace_bytes(), 16-byte aligned. No allocation, no synchronisation.
 * Refuses (cudaErrorInvalidValue, nothing enqueued) head_dim > JATTN_CUDA_BWD_MAX_HEAD_DIM.
 * @return the cudaError_t of the launches (as int; 0 = cudaSuccess). */
int jattn_cuda_launch_bwd_v1(const jattn_cuda_bwd_args *a, void *workspace, void *stream);

/* Device bytes of the backward v2's own workspace (backward_v2_sm90_f16x2.cu: the tile records of
 * q, dout, k, v split into 2xFP16, about 2 B H (Sq + Skv) D x 4 bytes; never less than v1's, so that
 * a call v2 does not take runs v1 in it). */
size_t jattn_cuda_bwd_v2_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim);

/* Whether the backward v2 cannot run this call (what only the launch knows: f32 precision only, no
 * key padding, every pointer 16-byte aligned and every stride a non-negative multiple of 4; D 64 or
 * 128; B*H <= 65535); the backend then runs v1. */
int jattn_cuda_bwd_v2_call_refused(const jattn_cuda_bwd_args *a);

/* Enqueues the backward v2 (backward_v2_sm90_f16x2.cu: sm_90a wgmma on 2xFP16 operands) on
 * `stream`: its split pre-pass, the dQ, dK and dV kernels. `workspace`:
 * jattn_cuda_bwd_v2_workspace_bytes(), 16-byte aligned. No allocation, no synchronisation.
 * Refuses (cudaErrorInvalidValue, nothing enqueued) a call jattn_cuda_bwd_v2_call_refused() names;
 * cudaErrorNoKernelImageForDevice on a device other than compute capability 9.0.
 * @return the cudaError_t of the launches (as int; 0 = cudaSuccess). */
int jattn_cuda_launch_bwd_v2(const jattn_cuda_bwd_args *a, void *workspace, void *stream);

/* The backward's kernel choice. AUTO: v2 on 9.0 devices where it takes the problem (f32, D 64 or 128,
 * strides multiples of 4, seq_kv >= 2; cuda_backend.c, BWD_AUTO_V2), else v1; a call v2 refuses at
 * launch (key padding, alignment) runs v1. A forced v2 falls back to v1 where it cannot run (so the whole
 * test battery runs with it forced); a forced v1 runs v1 everywhere. */
typedef enum jattn_cuda_bwd_kernel {
    JATTN_CUDA_BWD_KERNEL_AUTO = 0,
    JATTN_CUDA_BWD_KERNEL_V1 = 1, /* backward_v1_mma_tf32x3.cu */
    JATTN_CUDA_BWD_KERNEL_V2 = 2, /* backward_v2_sm90_f16x2.cu */
    JATTN_CUDA_BWD_KERNEL_COUNT = 3
} jattn_cuda_bwd_kernel;

/* ---- knobs and counters for tests and the harness ---- */

/* Forces the backward's kernel for every later call of this process (AUTO restores the default;
 * the environment variable JATTN_CUDA_BWD_KERNEL=v1|v2 sets the initial value). */
void jattn_cuda_set_bwd_kernel(jattn_cuda_bwd_kernel k);

/* Forces a kernel version for every later call of this process (AUTO restores the default;
 * the environment variable JATTN_CUDA_KERNEL=v1|...|v6 sets the initial value). The
 * fallbacks are those of the versions' table (cuda_versions.c): v2 falls back to v1 where it
 * cannot run a problem; v3 to v6 make jattn_select() fail with UNSUPPORTED (naming the reason)
 * where they cannot, and a forward() whose pointers miss their 16-byte alignment runs v2 for
 * that call. */
void jattn_cuda_set_kernel(jattn_cuda_kernel k);
jattn_cuda_kernel jattn_cuda_get_kernel(void);

/* Forces kernel v4's instance for every later call: 2 or 3 CTAs per SM (D = 64 has the 3 only),
 * 0 restores the choice per call (f16x2_plan); the environment variable JATTN_CUDA_V4_CTAS=2|3
 * sets the initial value. For tests: each instance must pass on every shape. */
void jattn_cuda_set_v4_ctas_per_sm(int n);

/* Name of the kernel the last successful launch of the calling thread enqueued (the selection's
 * name, or the fallback's when forward() had to fall back), or "" before any. */
const char *jattn_cuda_last_kernel(void);

/* Number of cudaMalloc and cudaMallocAsync calls the backend has made in this process. */
long jattn_cuda_alloc_count(void);

#ifdef __cplusplus
}
#endif
#endif /* JATTN_CUDA_INTERNAL_H */
