/* The AVX-512F vector vocabulary of cpu_flash_template.h (jv = __m512, JK_VL = 16), shared by
 * the AVX-512 instances (cpu_kernels_avx512*.c: 48, 32 and 16 queries per task). Included once
 * per instance file, after JK_VL; compiled with -mavx512f -mfma. */
#ifndef JATTN_CPU_VOCAB_AVX512_H
#define JATTN_CPU_VOCAB_AVX512_H

#include <immintrin.h>

#if JK_VL != 16
#error "the AVX-512 vocabulary has 16 lanes"
#endif

typedef __m512 jv;
#define jv_zero() _mm512_setzero_ps()
#define jv_set1(x) _mm512_set1_ps(x)
#define jv_load(p) _mm512_load_ps(p)
#define jv_store(p, a) _mm512_store_ps((p), (a))
#define jv_bcast(p) _mm512_set1_ps(*(p))
#define jv_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define jv_mul(a, b) _mm512_mul_ps((a), (b))
#define jv_add(a, b) _mm512_add_ps((a), (b))
#define jv_sub(a, b) _mm512_sub_ps((a), (b))
#define jv_max(a, b) _mm512_max_ps((a), (b))
#define jv_round(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define jv_mul_pow2(p, n) _mm512_scalef_ps((p), (n))
#define JK_EXP2_ANY_RANGE /* roundscale and scalef take any x and n: exp2v needs no clamp at -127 */
#define jv_zero_if_below(x, t, y) _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask((x), (t), _CMP_LT_OQ), (y))
#define jv_nan_to_zero(x) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask((x), (x), _CMP_ORD_Q), (x))
#define jv_any_nan(x) (_mm512_cmp_ps_mask((x), (x), _CMP_UNORD_Q) != 0)
#define jv_fma_exact(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define jv_min(a, b) _mm512_min_ps((a), (b))
#define jv_select_gt(a, b, x, y) _mm512_mask_blend_ps(_mm512_cmp_ps_mask((a), (b), _CMP_GT_OQ), (y), (x))
#define jv_loadu(p) _mm512_loadu_ps(p)
#define jv_storeu(p, a) _mm512_storeu_ps((p), (a))

/* jd: half a jv's lanes in float64 (bwd_dots_exact's sums): jd_lo, jd_hi widen lanes 0-7, 8-15;
 * jv_of_jd rounds two halves back to one jv. */
typedef __m512d jd;
#define jd_zero() _mm512_setzero_pd()
#define jd_set1(x) _mm512_set1_pd(x)
#define jd_fma(a, b, c) _mm512_fmadd_pd((a), (b), (c))
#define jd_sub(a, b) _mm512_sub_pd((a), (b))
#define jd_lo(x) _mm512_cvtps_pd(_mm512_castps512_ps256(x))
#define jd_hi(x) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
#define jv_of_jd(lo, hi)                                                                               \
    _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))), \
                                        _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1))

/* r[i] lane j <-> r[j] lane i (16 x 16): pairs of rows interleaved by 32 bits, then 64 bits,
 * then the 128-bit quarters gathered across the four groups of four rows (64 shuffles). */
static inline void jv_transpose(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + m], quarter k: column 4k + m of rows 4g .. 4g + 3 */
    for (int g = 0; g < 4; g++) {
        const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int m = 0; m < 4; m++) {
        const __m512 a0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88), a1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xdd);
        const __m512 a2 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
        const __m512 a3 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xdd);
        r[m] = _mm512_shuffle_f32x4(a0, a2, 0x88);
        r[4 + m] = _mm512_shuffle_f32x4(a1, a3, 0x88);
        r[8 + m] = _mm512_shuffle_f32x4(a0, a2, 0xdd);
        r[12 + m] = _mm512_shuffle_f32x4(a1, a3, 0xdd);
    }
}

#define JK_MAX_OF(a, b) jv_max((a), (b)) /* a > b ? a : b, NaN gives b */

#endif /* JATTN_CPU_VOCAB_AVX512_H */
