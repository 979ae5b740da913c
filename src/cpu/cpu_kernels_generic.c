/* Portable C instance of the flash micro-kernels (cpu_flash_template.h): the twin of the SIMD
 * instances, same tiles and summation order, a "vector" being a struct of 8 floats operated
 * on by loops (compilers vectorise them for whatever the build targets). Any C11 compiler. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define JK_ISA "generic"
#define JK(name) cpu_generic_##name
#define JK_TABLE cpu_kernels_generic
#define JK_VL 8
#define JK_QB 16 /* queries per task: JK_VL * 2 vectors */
#define JK_SJ 4
#define JK_DR 4
#define JK_BK 96
#define JK_DB 8 /* its "FMA" may round twice (no contraction in C11 mode): shorter blocks */

typedef struct jv {
    float x[JK_VL];
} jv;

#define JV_MAP1(expr)                                     \
    jv r_;                                                \
    for (int i_ = 0; i_ < JK_VL; i_++) r_.x[i_] = (expr); \
    return r_

static inline jv jv_zero(void) { JV_MAP1(0.0f); }
static inline jv jv_set1(float x) { JV_MAP1(x); }
static inline jv jv_load(const float *p) { JV_MAP1(p[i_]); }
static inline void jv_store(float *p, jv a) { memcpy(p, a.x, sizeof a.x); }
static inline jv jv_bcast(const float *p) { JV_MAP1(*p); }
static inline jv jv_fma(jv a, jv b, jv c) { JV_MAP1(a.x[i_] * b.x[i_] + c.x[i_]); }
static inline jv jv_mul(jv a, jv b) { JV_MAP1(a.x[i_] * b.x[i_]); }
static inline jv jv_add(jv a, jv b) { JV_MAP1(a.x[i_] + b.x[i_]); }
static inline jv jv_sub(jv a, jv b) { JV_MAP1(a.x[i_] - b.x[i_]); }
static inline jv jv_max(jv a, jv b) { JV_MAP1(a.x[i_] > b.x[i_] ? a.x[i_] : b.x[i_]); }
/* Round to nearest even by the 1.5 * 2^23 trick (|x| <= 2^22). */
#define JV_ROUND_MAGIC 12582912.0f
static inline jv jv_round(jv x) {
    jv r;
    for (int i = 0; i < JK_VL; i++) {
        const float t = x.x[i] + JV_ROUND_MAGIC; /* rounds: not folded without -ffast-math */
        r.x[i] = t - JV_ROUND_MAGIC;
    }
    return r;
}
static inline jv jv_mul_pow2(jv p, jv n) {
    jv r;
    for (int i = 0; i < JK_VL; i++) {
        const int32_t e = n.x[i] == n.x[i] ? (int32_t)n.x[i] + 127 : 0; /* NaN: p is NaN too */
        const uint32_t bits = (uint32_t)e << 23;
        float s;
        memcpy(&s, &bits, sizeof s);
        r.x[i] = p.x[i] * s;
    }
    return r;
}
static inline jv jv_zero_if_below(jv x, jv t, jv y) { JV_MAP1(x.x[i_] < t.x[i_] ? 0.0f : y.x[i_]); }
static inline jv jv_nan_to_zero(jv x) { JV_MAP1(x.x[i_] == x.x[i_] ? x.x[i_] : 0.0f); }
static inline int jv_any_nan(jv x) {
    int any = 0;
    for (int i = 0; i < JK_VL; i++) any |= x.x[i] != x.x[i];
    return any;
}
static inline jv jv_fma_exact(jv a, jv b, jv c) { JV_MAP1(fmaf(a.x[i_], b.x[i_], c.x[i_])); }
static inline jv jv_min(jv a, jv b) { JV_MAP1(a.x[i_] < b.x[i_] ? a.x[i_] : b.x[i_]); }
static inline jv jv_select_gt(jv a, jv b, jv x, jv y) { JV_MAP1(a.x[i_] > b.x[i_] ? x.x[i_] : y.x[i_]); }
static inline jv jv_loadu(const float *p) { JV_MAP1(p[i_]); }
static inline void jv_storeu(float *p, jv a) { memcpy(p, a.x, sizeof a.x); }
static inline void jv_transpose(jv r[JK_VL]) { /* r[i] lane j <-> r[j] lane i */
    for (int i = 0; i < JK_VL; i++)
        for (int j = i + 1; j < JK_VL; j++) {
            const float x = r[i].x[j];
            r[i].x[j] = r[j].x[i];
            r[j].x[i] = x;
        }
}

/* jd: half a jv's lanes in float64 (bwd_dots_exact's sums); the product of two floats is exact
 * in float64, so jd_fma's one rounding is the same contracted or not. */
typedef struct jd {
    double x[JK_VL / 2];
} jd;
#define JD_MAP(expr)                                          \
    jd r_;                                                    \
    for (int i_ = 0; i_ < JK_VL / 2; i_++) r_.x[i_] = (expr); \
    return r_
static inline jd jd_zero(void) { JD_MAP(0.0); }
static inline jd jd_set1(double x) { JD_MAP(x); }
static inline jd jd_fma(jd a, jd b, jd c) { JD_MAP(a.x[i_] * b.x[i_] + c.x[i_]); }
static inline jd jd_sub(jd a, jd b) { JD_MAP(a.x[i_] - b.x[i_]); }
static inline jd jd_lo(jv x) { JD_MAP((double)x.x[i_]); }
static inline jd jd_hi(jv x) { JD_MAP((double)x.x[i_ + JK_VL / 2]); }
static inline jv jv_of_jd(jd lo, jd hi) { JV_MAP1((float)(i_ < JK_VL / 2 ? lo.x[i_] : hi.x[i_ - JK_VL / 2])); }

#define JK_MAX_OF(a, b) jv_max((a), (b)) /* a > b ? a : b, NaN gives b */

#include "cpu_flash_template.h"
