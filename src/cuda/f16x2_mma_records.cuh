/* f16x2_mma_records.cuh: the split K/V records of kernel v7 (attention_v7_mma_f16x2.cu), written by
 * its pre-pass (attention_v7_split_kv_f16x2.cu) and read by its cp.async / ldmatrix pipeline.
 * Internal to src/cuda; internal linkage.
 *
 * The head dimension runs in a tile DT (a multiple of 16, v7_head_dim_tile): columns D..DT-1 are
 * zeros in every image, so they add nothing to Q K^T and their P V columns are never stored.
 * Per key/value head bh = b Hkv + hk and record r (keys 64 r .. 64 r + 63 of the head's attended
 * keys, packed in order under key padding), one record of v7_record_bytes(DT) bytes at (bh R + r) of
 * them (R = ceil(Skv / 64)):
 *   K hi image  [64][DT] fp16, row-major (key r at r DT): k 2^ek rounded to fp16
 *   K lo image  [64][DT] fp16: the rest, k 2^ek - hi, rounded to fp16
 *   K info      16 bytes (V7KeyInfo): 2^-ek; the V tile is tiny; the K tile holds a non-finite value;
 *               the V tile held a non-finite value (written as 0; masked calls only)
 *   V hi image  [64][DT] fp16: v t 2^ev(d) (t = 2^64 for a tiny tile, else 1)
 *   V lo image  [64][DT] fp16
 *   V unscale   [DT] float: 2^-ev(d), one per head_dim column over the record's keys
 * Keys past the attended ones are zeros (the kernel masks their scores). The scales are those
 * of f16x2_split.cuh: the whole K tile to [2^14, 2^15) (one power of two, so that it factors out
 * of every score of the tile), each V column of the tile to [2^14, 2^15) (it factors out of the
 * column of P V), non-finite values out of the maxima. */
#ifndef JATTN_F16X2_MMA_RECORDS_CUH
#define JATTN_F16X2_MMA_RECORDS_CUH

#include <stdint.h>

#include "f16x2_split.cuh"

namespace {

constexpr int kV7RecordKeys = 64; /* keys per record */

/* The head-dim tile of a head_dim (1 .. 256): the kernel instances DT. */
__host__ __device__ inline int v7_head_dim_tile(int64_t d) {
    return d <= 32    ? 32
           : d <= 48  ? 48
           : d <= 64  ? 64
           : d <= 80  ? 80
           : d <= 96  ? 96
           : d <= 128 ? 128
           : d <= 160 ? 160
           : d <= 192 ? 192
                      : 256;
}

struct V7KeyInfo {
    float k_unscale; /* 2^-ek */
    uint32_t v_tiny; /* 1: the record's V was split after * 2^64 (every value below 2^-63) */
    uint32_t k_bad;  /* 1: the record's K holds a non-finite value */
    uint32_t v_bad;  /* 1: the record's V held a non-finite value, written as 0 (a call with a window or a
                        key bias: attention_v7_split_kv_f16x2.cu) */
};

/* Byte offsets inside one record of head-dim tile dt. */
__host__ __device__ constexpr int64_t v7_image_bytes(int dt) { return (int64_t)kV7RecordKeys * dt * 2; }
__host__ __device__ constexpr int64_t v7_k_lo_offset(int dt) { return v7_image_bytes(dt); }
__host__ __device__ constexpr int64_t v7_k_info_offset(int dt) { return 2 * v7_image_bytes(dt); }
__host__ __device__ constexpr int64_t v7_v_hi_offset(int dt) { return 2 * v7_image_bytes(dt) + 16; }
__host__ __device__ constexpr int64_t v7_v_lo_offset(int dt) { return 3 * v7_image_bytes(dt) + 16; }
__host__ __device__ constexpr int64_t v7_v_unscale_offset(int dt) { return 4 * v7_image_bytes(dt) + 16; }
__host__ __device__ constexpr int64_t v7_record_bytes(int dt) { return 4 * v7_image_bytes(dt) + 16 + 4 * dt; }

/* After the B Hkv R records (256-byte aligned): the key bias of a masked call, per query head bh = b H + h
 * and record r, 64 floats at (bh R + r) 64, in attended-key order (attention_v7_split_kv_f16x2.cu). */
__host__ __device__ inline int64_t v7_bias_offset(int64_t batch, int64_t kv_heads, int64_t records, int dt) {
    return (batch * kv_heads * records * v7_record_bytes(dt) + 255) / 256 * 256;
}

} /* namespace */

#endif /* JATTN_F16X2_MMA_RECORDS_CUH */
