/* The AVX2+FMA vector vocabulary of cpu_flash_template.h (jv = __m256, JK_VL = 8), shared by
 * the AVX2 instances (cpu_kernels_avx2*.c: 16 and 8 queries per task). Included once per
 * instance file, after JK_VL; compiled with -mavx2 -mfma. */
#ifndef JATTN_CPU_VOCAB_AVX2_H
#define JATTN_CPU_VOCAB_AVX2_H

#include <immintrin.h>

#if JK_VL != 8
#error "the AVX2 vocabulary has 8 lanes"
#endif

typedef __m256 jv;
#define jv_zero() _mm256_setzero_ps()
#define jv_set1(x) _mm256_set1_ps(x)
#define jv_load(p) _mm256_load_ps(p)
#define jv_store(p, a) _mm256_store_ps((p), (a))
#define jv_bcast(p) _mm256_broadcast_ss(p)
#define jv_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define jv_mul(a, b) _mm256_mul_ps((a), (b))
#define jv_add(a, b) _mm256_add_ps((a), (b))
#define jv_sub(a, b) _mm256_sub_ps((a), (b))
#define jv_max(a, b) _mm256_max_ps((a), (b))
#define jv_round(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* 2^n built in the exponent field (n in [-127, 0]: biased exponent 0..127; n = -127 gives
 * 0, harmless since such results are flushed), times p. */
#define jv_mul_pow2(p, n)                   \
    _mm256_mul_ps((p), _mm256_castsi256_ps( \
                           _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)))
#define jv_zero_if_below(x, t, y) _mm256_andnot_ps(_mm256_cmp_ps((x), (t), _CMP_LT_OQ), (y))
#define jv_nan_to_zero(x) _mm256_and_ps(_mm256_cmp_ps((x), (x), _CMP_ORD_Q), (x))
#define jv_any_nan(x) (_mm256_movemask_ps(_mm256_cmp_ps((x), (x), _CMP_UNORD_Q)) != 0)
#define jv_fma_exact(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define jv_min(a, b) _mm256_min_ps((a), (b))
#define jv_select_gt(a, b, x, y) _mm256_blendv_ps((y), (x), _mm256_cmp_ps((a), (b), _CMP_GT_OQ))
#define jv_loadu(p) _mm256_loadu_ps(p)
#define jv_storeu(p, a) _mm256_storeu_ps((p), (a))

/* jd: half a jv's lanes in float64 (bwd_dots_exact's sums): jd_lo, jd_hi widen lanes 0-3, 4-7;
 * jv_of_jd rounds two halves back to one jv. */
typedef __m256d jd;
#define jd_zero() _mm256_setzero_pd()
#define jd_set1(x) _mm256_set1_pd(x)
#define jd_fma(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define jd_sub(a, b) _mm256_sub_pd((a), (b))
#define jd_lo(x) _mm256_cvtps_pd(_mm256_castps256_ps128(x))
#define jd_hi(x) _mm256_cvtps_pd(_mm256_extractf128_ps((x), 1))
#define jv_of_jd(lo, hi) _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1)

/* r[i] lane j <-> r[j] lane i (8 x 8): interleave by 32 and 64 bits, then swap 128-bit halves. */
static inline void jv_transpose(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) { /* u[4g + m], half k: column 4k + m of rows 4g .. 4g + 3 */
        u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
        r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
}

#define JK_MAX_OF(a, b) jv_max((a), (b)) /* a > b ? a : b, NaN gives b */

#endif /* JATTN_CPU_VOCAB_AVX2_H */
