/* attention_sm90.h: the launch contract of the sm_90a wgmma kernels of the cuda backend (the
 * forward v6, launched through the one launcher family of cuda_internal.h, jattn_cuda_launch_v6;
 * the backward v4 takes the same problems): src/cuda/NOTES.md's version table and ladders. Their design,
 * ceilings and predictions, step by step: JOURNAL.md.
 *
 * What it computes (docs/DESIGN.md §1), for every batch b < B and head h < H:
 *     S[i,j]     = scale * sum_d q[b,h,i,d] * k[b,h,j,d]
 *     out[i,d]   = sum_j softmax(S[i,:])[j] * v[b,h,j,d]
 *     lse[b,h,i] = max_j S[i,j] + log(sum_j exp(S[i,j] - max))      (when lse != NULL)
 *
 * Contract of jattn_cuda_launch_v6():
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
 *  - precision: JATTN_PRECISION_F32 = three fp16 products on operands split into two scaled
 *    fp16 parts (2xFP16) in both products, fp32 accumulation, meets the f32 gate of
 *    docs/DESIGN.md §2; JATTN_PRECISION_TF32 = one product (hi*hi) for P V (tf32 gate): Q K^T
 *    stays three products (logit errors are amplified by the softmax).
 *  - Stream: the caller's; the call only enqueues its pre-pass and its kernel. No allocation, no
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

#include "cuda_internal.h" /* jattn_cuda_args, the launchers */

#ifdef __cplusplus
extern "C" {
#endif

/* The contract's limits, written once: attention_f32_sm90_wgmma_supported() (sm90_contract.c)
 * and the backend's selection (cuda_backend.c) both read them. */
#define ATTENTION_SM90_CC 90          /* compute capability 9.0 (10 major + minor) */
#define ATTENTION_SM90_MAX_GRID 65535 /* batch and heads, each */
#define ATTENTION_SM90_TILE 64        /* rows of a query and a key tile; seq_q, seq_kv <= INT32_MAX - TILE */
#define ATTENTION_SM90_ALIGN_BYTES 16 /* q, k, v, out: float4 moves */
#define ATTENTION_SM90_STRIDE_MULTIPLE (ATTENTION_SM90_ALIGN_BYTES / 4)
/* Kernel v6 runs 128 queries per CTA: seq_q, seq_kv <= INT32_MAX - V6_CTA_QUERIES (its launcher
 * and its refusal in cuda_versions.c both read this). */
#define ATTENTION_SM90_V6_CTA_QUERIES 128
/* Queries of v6 with a window or a key bias at most: its grid is (heads, query blocks, batch) then, 65535 blocks
 * of 128 in y. */
#define ATTENTION_SM90_V6_MASKED_MAX_SEQ_Q (65535 * ATTENTION_SM90_V6_CTA_QUERIES)

/* Why a problem cannot run on this kernel. */
typedef enum attention_sm90_support {
    ATTENTION_SM90_SUPPORTED = 0,
    ATTENTION_SM90_NULL_POINTER = 1,  /* args, q, k, v or out is NULL */
    ATTENTION_SM90_BAD_DIMENSION = 2, /* a dimension < 1 or beyond the grid limits */
    ATTENTION_SM90_BAD_HEAD_DIM = 3,  /* head_dim not 64 or 128 */
    ATTENTION_SM90_MISALIGNED = 4,    /* a pointer not 16-byte aligned or a stride not a multiple of 4 */
    ATTENTION_SM90_BAD_SCALE = 5,     /* scale not finite and > 0 */
    ATTENTION_SM90_BAD_PRECISION = 6  /* precision out of range */
} attention_sm90_support;

/* @return ATTENTION_SM90_SUPPORTED when the shape and strides are within the contract (head_dim,
 *         strides, batch and heads, sequence lengths, checked in that order), else the first
 *         reason they are not. The part of the contract known before the pointers: the backend's
 *         selection refuses a problem with it. Host-only, no CUDA call (sm90_contract.c). */
attention_sm90_support attention_sm90_shape_supported(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                                                      int64_t head_dim, const jattn_cuda_strides strides[4]);

/* @return ATTENTION_SM90_SUPPORTED when the sm_90a kernels can run `args` (the shape, the
 *         pointers and their alignment), else the first reason they cannot. Host-only, no CUDA
 *         call (sm90_contract.c). */
attention_sm90_support attention_f32_sm90_wgmma_supported(const jattn_cuda_args *args);

/* Kernel v6 (jattn_cuda_launch_v6, attention_v6_sm90_fa3_f16x2.cu) has its own pre-pass
 * (attention_v6_split_kv_f16x2.cu), which writes the split K and V tiles as shared-memory images
 * into its workspace: device memory of this many bytes, 16-byte aligned, not shared with a
 * concurrent call (about K plus V of its key/value heads). v6 also needs seq_q, seq_kv <= 2^31 - 129
 * and takes every mask part and grouped heads; ATTENTION_SM90_V6_CTA_QUERIES above. */
size_t attention_f32_sm90_fa3_f16x2_workspace_bytes(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_kv,
                                                    int64_t head_dim);

/* v6's workspace layout: the records of the B Hkv key/value heads (two of 2 64 D 2 + 4 D bytes per
 * 64-key tile), then, 256-byte aligned, the key bias a masked call stages (64 floats per query head
 * and tile). */
static inline int64_t v6_bias_offset(int64_t batch, int64_t kv_heads, int64_t tiles, int64_t head_dim) {
    return (batch * kv_heads * tiles * 2 * (2 * 64 * head_dim * 2 + 4 * head_dim) + 255) / 256 * 256;
}

#ifdef __cplusplus
}
#endif

#endif /* JATTN_ATTENTION_SM90_H */
