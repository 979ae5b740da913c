/* attention_sm90.h: the launch contract of the sm_90a wgmma kernels (v3.0, v3.2, v4) of the cuda backend.
 *
 * A standalone kernel with a plain C launch function, meant to be plugged into the cuda
 * backend as its next kernel version. Design, ceilings and predictions: NOTES_sm90.md.
 *
 * What it computes (DESIGN.md §1), for every batch b < B and head h < H:
 *     S[i,j]     = scale * sum_d q[b,h,i,d] * k[b,h,j,d]
 *     out[i,d]   = sum_j softmax(S[i,:])[j] * v[b,h,j,d]
 *     lse[b,h,i] = max_j S[i,j] + log(sum_j exp(S[i,j] - max))      (when lse != NULL)
 *
 * Contract of attention_f32_sm90_wgmma_64x64() and attention_f32_sm90_wgmma_st_64x64():
 *  - Device: the current device must have compute capability 9.0 (wgmma, sm_90a); on any
 *    other the call returns cudaErrorNoKernelImageForDevice and enqueues nothing. The file
 *    also compiles for other targets (e.g. the library's compute_80 PTX), where the kernel
 *    body is a trap.
 *  - Shapes: B, H, Sq, Skv >= 1; H <= 65535, B <= 65535; Sq, Skv < 2^31;
 *    head_dim D in {64, 128}.
 *  - Layout: every tensor is [B, H, token, D] described by element strides (batch, head,
 *    token) with D contiguous; any strides >= 0 (head-major, token-major, fused-QKV views).
 *    lse is float32 [B, H, Sq] contiguous.
 *  - Alignment: q, k, v, out 16-byte aligned and every stride a multiple of 4 elements
 *    (the kernel moves float4); lse 4-byte aligned.
 *  - scale: resolved by the caller, finite and > 0 (1/sqrt(D) by default).
 *  - precision: ATTENTION_SM90_F32 = 3xTF32 split (big = tf32(x), small = tf32(x - big),
 *    big*big + big*small + small*big) for both products, fp32 accumulation, meets the f32
 *    gate of DESIGN.md §2; ATTENTION_SM90_TF32 = one TF32 product for P V (tf32 gate): Q K^T
 *    stays 3xTF32 in the _st kernel (logit errors are amplified by the softmax), one product
 *    in v3.0.
 *  - Stream: the caller's; the call only enqueues one kernel. No allocation, no
 *    synchronisation, no host round trip, so it can be captured in a CUDA graph.
 *    It sets the kernel's dynamic shared memory limit (cudaFuncSetAttribute) on each call.
 *  - q, k, v are read only; out (and lse) must not overlap them.
 *
 * @return cudaSuccess when the kernel was enqueued; cudaErrorInvalidValue when
 *         attention_f32_sm90_wgmma_supported() rejects the arguments (nothing enqueued);
 *         otherwise the CUDA error of the launch. */
#ifndef JATTN_ATTENTION_SM90_H
#define JATTN_ATTENTION_SM90_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attention_sm90_precision {
    ATTENTION_SM90_F32 = 0, /* 3xTF32: fp32-accurate */
    ATTENTION_SM90_TF32 = 1 /* one TF32 product in P V (and in Q K^T in v3.0) */
} attention_sm90_precision;

typedef struct attention_sm90_strides {
    int64_t batch, head, token; /* element strides; head_dim is contiguous */
} attention_sm90_strides;

typedef struct attention_sm90_args {
    const float *q, *k, *v;  /* device pointers */
    float *out;              /* device pointer, written [B, H, Sq, D] through `out_strides` */
    float *lse;              /* device pointer [B, H, Sq] contiguous, or NULL */
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    attention_sm90_strides q_strides, k_strides, v_strides, out_strides;
    float scale;             /* > 0, finite */
    attention_sm90_precision precision;
    int v4_ctas_per_sm;      /* kernel v4 only: 0 = chosen per call; 2 or 3 = that instance (tests) */
    int v5_variant;          /* kernel v5: 0 = the kernel; 2 = with the consumers' ping-pong (A/B runs);
                              * kernel v6: bit 0 = the consumers' ping-pong */
    /* Key padding resolved by the pre-pass (key_padding.cu; cuda_internal.h): NULL, NULL when
     * every key is attended. Batch b then attends kv_count[b] keys, rows kv_index[b * seq_kv + j]
     * (rows 0 .. kv_count[b] - 1 when kv_index is NULL); a row with none gets 0 and lse -inf. */
    const int *kv_count;
    const int *kv_index;
} attention_sm90_args;

/* Why a problem cannot run on this kernel. */
typedef enum attention_sm90_support {
    ATTENTION_SM90_SUPPORTED = 0,
    ATTENTION_SM90_NULL_POINTER = 1,     /* args, q, k, v or out is NULL */
    ATTENTION_SM90_BAD_DIMENSION = 2,    /* a dimension < 1 or beyond the grid limits */
    ATTENTION_SM90_BAD_HEAD_DIM = 3,     /* head_dim not 64 or 128 */
    ATTENTION_SM90_MISALIGNED = 4,       /* a pointer not 16-byte aligned or a stride not a multiple of 4 */
    ATTENTION_SM90_BAD_SCALE = 5,        /* scale not finite and > 0 */
    ATTENTION_SM90_BAD_PRECISION = 6     /* precision out of range */
} attention_sm90_support;

/* @return ATTENTION_SM90_SUPPORTED when attention_f32_sm90_wgmma_64x64() can run `args`,
 *         else the first reason it cannot. Host-only, no CUDA call. */
attention_sm90_support attention_f32_sm90_wgmma_supported(const attention_sm90_args *args);

/* Enqueues the attention on `stream` (see the contract above). Kernel v3.0: S = Q K^T and
 * P V with shared-memory operands, one warpgroup and 64 queries per CTA
 * (attention_v3_0_sm90_smem.cu). */
cudaError_t attention_f32_sm90_wgmma_64x64(const attention_sm90_args *args, cudaStream_t stream);

/* The same computation and contract with kernel v3.1: the transposed orientation S^T = K Q^T,
 * O^T = V^T P^T with K and V as register operands (attention_v3_sm90_tf32x3.cu). */
cudaError_t attention_f32_sm90_wgmma_st_64x64(const attention_sm90_args *args, cudaStream_t stream);

/* Kernel v4 (attention_v4_sm90_f16x2.cu): the same computation and contract, with the
 * operands split into two scaled fp16 parts (2xFP16) on the fp16 wgmma, in two kernels on
 * `stream`: a pre-pass (attention_v4_split_kv_f16x2.cu) that writes the split K and V into `workspace`, then
 * the attention. workspace: device memory of attention_f32_sm90_f16x2_workspace_bytes() bytes,
 * 16-byte aligned, not shared with a concurrent call (the size is about that of K plus V).
 * ATTENTION_SM90_TF32 keeps Q K^T at three products and runs one fp16 product (an 11-bit
 * significand, as TF32) in P V.
 * @return as attention_f32_sm90_wgmma_64x64(); cudaErrorInvalidValue also for a NULL or
 *         misaligned workspace. */
size_t attention_f32_sm90_f16x2_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_kv, int64_t head_dim);
cudaError_t attention_f32_sm90_wgmma_f16x2_64x64(const attention_sm90_args *args, void *workspace,
                                                 cudaStream_t stream);

/* Kernel v5 (attention_v5_sm90_ws_f16x2.cu): v4's computation, workspace and pre-pass in a
 * warp-specialized kernel (a producer warpgroup moving the split K and V tiles by bulk copies,
 * two consumer warpgroups of 64 queries each). Calls without key padding only (kv_count NULL).
 * @return as attention_f32_sm90_wgmma_f16x2_64x64(); cudaErrorInvalidValue also for a padded call. */
cudaError_t attention_f32_sm90_ws_f16x2_128x64(const attention_sm90_args *args, void *workspace,
                                               cudaStream_t stream);

/* Kernel v6 (attention_v6_sm90_fa3_f16x2.cu): the same computation and contract, key padding
 * included, in the FlashAttention-3 orientation (S = Q K^T, the row softmax in registers) with
 * 2xFP16 operands, warp-specialized; its own pre-pass (attention_v6_split_kv_f16x2.cu) writes
 * the split K and V tiles as shared-memory images into `workspace`
 * (attention_f32_sm90_fa3_f16x2_workspace_bytes() bytes, 16-byte aligned). ATTENTION_SM90_TF32
 * keeps Q K^T at three products and runs one (P_hi V_hi) in P V. v5_variant bit 0: the
 * consumers' ping-pong (A/B runs). Also needs seq_q, seq_kv <= 2^31 - 129.
 * @return as attention_f32_sm90_wgmma_f16x2_64x64(). */
size_t attention_f32_sm90_fa3_f16x2_workspace_bytes(int64_t batch, int64_t heads, int64_t seq_kv, int64_t head_dim);
cudaError_t attention_f32_sm90_fa3_f16x2_128x64(const attention_sm90_args *args, void *workspace,
                                                cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* JATTN_ATTENTION_SM90_H */
