/* NEON (aarch64) instance of the flash micro-kernels (cpu_flash_template.h): cpu_flash_f32_neon_3x16.
 * scores: 3 keys x 16 queries = 12 q-register block accumulators (carrying the compensation)
 *         + 4 Qt vectors + 1 broadcast (ld1r); the running sums live in st (L1), touched once
 *         per 16 head_dim elements.
 * P V:    6 head_dim rows x 16 queries = 24 accumulators + 4 Pt vectors + 1 broadcast.
 * NEON is baseline on aarch64: built only there (sources.cmake). */
#include <arm_neon.h>

#define JK_ISA "neon"
#define JK(name) cpu_neon_##name
#define JK_TABLE cpu_kernels_neon
#define JK_VL 4
#define JK_QB 16 /* queries per task: JK_VL * 4 vectors */
#define JK_SJ 3
#define JK_DR 6
#define JK_BK 96
#define JK_DB 16
#define JK_GK 6 /* bwd_outer: 6 keys x 4 vectors of head_dim (24 accumulators) */
#define JK_GD 4

typedef float32x4_t jv;
#define jv_zero() vdupq_n_f32(0.0f)
#define jv_set1(x) vdupq_n_f32(x)
#define jv_load(p) vld1q_f32(p)
#define jv_store(p, a) vst1q_f32((p), (a))
#define jv_bcast(p) vld1q_dup_f32(p)
#define jv_fma(a, b, c) vfmaq_f32((c), (a), (b))
#define jv_mul(a, b) vmulq_f32((a), (b))
#define jv_add(a, b) vaddq_f32((a), (b))
#define jv_sub(a, b) vsubq_f32((a), (b))
/* max with NaN in b returned (vmaxq propagates NaN from either operand, which is stronger). */
#define jv_max(a, b) vmaxq_f32((a), (b))
#define jv_round(x) vrndnq_f32(x)
#define jv_mul_pow2(p, n) \
    vmulq_f32((p), vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23)))
#define jv_zero_if_below(x, t, y) vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), vcltq_f32((x), (t))))
#define jv_nan_to_zero(x) vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(x), vceqq_f32((x), (x))))
#define jv_any_nan(x) (vminvq_u32(vceqq_f32((x), (x))) == 0)
#define jv_fma_exact(a, b, c) vfmaq_f32((c), (a), (b))
/* min with NaN in b returned (vminq propagates NaN from either operand, which is stronger). */
#define jv_min(a, b) vminq_f32((a), (b))
#define jv_select_gt(a, b, x, y) vbslq_f32(vcgtq_f32((a), (b)), (x), (y))
#define jv_loadu(p) vld1q_f32(p)
#define jv_storeu(p, a) vst1q_f32((p), (a))

/* jd: half a jv's lanes in float64 (bwd_dots_exact's sums): jd_lo, jd_hi widen lanes 0-1, 2-3;
 * jv_of_jd rounds two halves back to one jv. */
typedef float64x2_t jd;
#define jd_zero() vdupq_n_f64(0.0)
#define jd_set1(x) vdupq_n_f64(x)
#define jd_fma(a, b, c) vfmaq_f64((c), (a), (b))
#define jd_sub(a, b) vsubq_f64((a), (b))
#define jd_lo(x) vcvt_f64_f32(vget_low_f32(x))
#define jd_hi(x) vcvt_high_f64_f32(x)
#define jv_of_jd(lo, hi) vcvt_high_f32_f64(vcvt_f32_f64(lo), (hi))

/* r[i] lane j <-> r[j] lane i (4 x 4). */
static inline void jv_transpose(float32x4_t r[4]) {
    const float32x4x2_t a = vtrnq_f32(r[0], r[1]), b = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(a.val[0]), vget_low_f32(b.val[0]));
    r[1] = vcombine_f32(vget_low_f32(a.val[1]), vget_low_f32(b.val[1]));
    r[2] = vcombine_f32(vget_high_f32(a.val[0]), vget_high_f32(b.val[0]));
    r[3] = vcombine_f32(vget_high_f32(a.val[1]), vget_high_f32(b.val[1]));
}

#include "cpu_flash_template.h"
