/* The cuda backend's internal interface, shared by the C launch code (cuda_backend.c), the
 * kernel files (attention_v*.cu) and the tests that look inside (test_cuda_device.c).
 * Plain C: every kernel file exports an extern "C" launcher taking jattn_cuda_params. */
#ifndef JATTN_CUDA_INTERNAL_H
#define JATTN_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One attention call as a kernel sees it: device pointers, element strides (B, H, S; head_dim
 * contiguous) and the resolved softmax scale. Kernels fold the scale into q (exact when it is a
 * power of two) and keep scores in natural units: s - max is exact when s is, and only then is
 * it multiplied by log2(e) for exp2. */
typedef struct jattn_cuda_params {
    const float *q, *k, *v;
    float *out;
    float *lse; /* [B, H, Sq] contiguous, or NULL */
    int64_t q_b, q_h, q_s;
    int64_t k_b, k_h, k_s;
    int64_t v_b, v_h, v_s;
    int64_t o_b, o_h, o_s;
    int batch, heads, seq_q, seq_kv, head_dim;
    float scale;
    /* Key padding, resolved on the device by the pre-pass of key_padding.cu; both NULL when
     * every key is attended. A kernel runs batch b over its kv_count[b] attended keys as if
     * they were the whole sequence: key j of it is row kv_index[b * seq_kv + j] of k and v
     * (row j when kv_index is NULL), and a row with none gets out 0 and lse -inf. */
    const int *kv_count; /* [B] */
    const int *kv_index; /* [B][seq_kv], ascending rows; entries past kv_count[b] unused */
} jattn_cuda_params;

/* The kernel versions kept side by side (see each file's opening comment). */
typedef enum jattn_cuda_kernel {
    JATTN_CUDA_KERNEL_AUTO = 0, /* v6 (D 64; D 128 tf32), v5 / v4 (D 128 f32), else v2, else v1 */
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
                                 * pre-pass and workspace; the same limits as v3, and seq_kv >= 2 (v1
                                 * runs a single key, as AUTO does) */
    JATTN_CUDA_KERNEL_COUNT = 7
} jattn_cuda_kernel;

/* Limits of each version. */
#define JATTN_CUDA_V1_MAX_HEAD_DIM 512
#define JATTN_CUDA_V2_MAX_HEAD_DIM 256
#define JATTN_CUDA_V2_HEAD_DIM_MULTIPLE 8
/* v3's and v4's head dims are 64 and 128 and their alignment is that of a float4
 * (attention_sm90.h). */
#define JATTN_CUDA_V3_CC_MAJOR 9
#define JATTN_CUDA_V3_CC_MINOR 0
#define JATTN_CUDA_V3_ALIGN_BYTES 16
#define JATTN_CUDA_V3_STRIDE_MULTIPLE (JATTN_CUDA_V3_ALIGN_BYTES / 4)
#define JATTN_CUDA_V3_TILE 64 /* queries per CTA and keys per tile */
#define JATTN_CUDA_V6_CTA_QUERIES 128 /* kernel v6: queries per CTA (two consumer warpgroups of 64) */

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

/* Launchers: enqueue one kernel on `stream` (a cudaStream_t), no allocation, no
 * synchronisation. @return the cudaError_t of the launch (as int; 0 = cudaSuccess). */
int jattn_cuda_launch_v1(const jattn_cuda_params *p, void *stream);
/* tf32x3 != 0: f32 mode (3xTF32 in both products); 0: tf32 mode (3xTF32 for Q K^T, whose
 * errors the softmax amplifies, one TF32 product for P V). */
int jattn_cuda_launch_v2(const jattn_cuda_params *p, int tf32x3, void *stream);

/* ---- knobs and counters for tests and the harness ---- */

/* Forces a kernel version for every later call of this process (AUTO restores the default;
 * the environment variable JATTN_CUDA_KERNEL=v1|...|v6 sets the initial value). v2 falls
 * back to v1 where it cannot run a problem; v3 to v6 make jattn_select() fail with UNSUPPORTED
 * (naming the reason) where they cannot, and a forward() whose pointers miss their 16-byte
 * alignment runs v2 for that call. */
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
