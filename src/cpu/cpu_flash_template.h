/* The flash-attention micro-kernels and the task loop, written once over a small vector
 * vocabulary and instantiated per instruction set (cpu_kernels_<isa>.c). See cpu_kernels.h
 * for the formulation and the contract of each micro-kernel.
 *
 * The including file defines, before including this file:
 *   JK_ISA               isa name (string), e.g. "avx512"
 *   JK(name)             the instance's symbol prefix, e.g. cpu_avx512_##name
 *   JK_TABLE             the table's name, e.g. cpu_kernels_avx512
 *   JK_VL                floats per vector; jv the vector type, and
 *   jv_zero() jv_set1(x) jv_load(p) jv_store(p, a) jv_bcast(p)    (load/store 64-byte aligned)
 *   jv_fma(a, b, c) = a*b + c   jv_mul  jv_add  jv_sub  jv_max(a, b) (NaN in b returns b)
 *   jv_round(x)          nearest integer, ties to even (|x| <= 2^22)
 *   jv_mul_pow2(p, n)    p * 2^n for integral n in [-127, 0] (NaN n or p gives NaN)
 *   jv_zero_if_below(x, t, y)  0 where x < t, else y (NaN x keeps y)
 *   jv_nan_to_zero(x)    0 where x is NaN, else x      jv_any_nan(x)  nonzero when a lane is NaN
 *   jv_min(a, b)         (NaN in b returns b)   jv_select_gt(a, b, x, y) = a > b ? x : y
 *   jv_fma_exact(a, b, c)  a*b + c rounded once (a true fused multiply-add)
 *   jv_loadu(p) jv_storeu(p, a)   any alignment
 *   jv_transpose(jv r[JK_VL])     in place: lane j of r[i] <-> lane i of r[j]
 *   JK_DB                head_dim elements per block of the scores' blocked D-reduction
 *   JK_QB JK_SJ JK_DR JK_BK   the tile: QB queries (NQV = QB/VL vectors), SJ keys x QB scores per
 *                        scores tile, DR head_dim rows x QB per P V tile, BK keys per block.
 * and may define
 *   JK_NARROW            the table's `narrow` (default NULL): the same instruction set with a
 *                        smaller JK_QB, declared before this file is included
 *   JK_SCORES_FULL_TILE(D, k, ks, qt, st, sl)  its own compensated scores for a full SJ x QB tile
 *                        and D >= JK_DB: st, sl as scores_rows leaves them before its check,
 *                        nonzero when a lane's sl is not finite (scores_fix_nonfinite then runs).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu_kernels.h"

#ifndef JK_NARROW
#define JK_NARROW NULL
#endif

#define JK_NQV (JK_QB / JK_VL)
#if JK_NQV * JK_VL != JK_QB
#error "JK_QB must be a multiple of JK_VL"
#endif
#define JK_STR2(x) #x
#define JK_STR(x) JK_STR2(x)
#define JK_KERNEL_NAME "cpu_flash_f32_" JK_ISA "_" JK_STR(JK_SJ) "x" JK_STR(JK_QB)
#define JK_BWD_KERNEL_NAME "cpu_flash_bwd_f32_" JK_ISA "_" JK_STR(JK_SJ) "x" JK_STR(JK_QB)

#if JK_SJ > 12 || JK_DR > 12
#error "tiles up to 12 rows: the edge dispatch below lists 12 cases"
#endif

#define JK_ALIGNED _Alignas(64)

#if defined(__GNUC__)
#define JK_INLINE static inline __attribute__((always_inline))
#define JK_UNROLL _Pragma("GCC unroll 16")
#else
#define JK_INLINE static inline
#define JK_UNROLL
#endif

/* ---- exp2 ------------------------------------------------------------------------------
 * 2^x = 2^n * 2^f, n = round(x), f = x - n in [-1/2, 1/2]; 2^f = e^(f ln2) by its Taylor
 * polynomial of degree 7 (truncation < 2^-27 relative on |f| <= 1/2), Horner in float.
 * x is clamped to [-127, 0] first (so n fits the exponent); results for x < -126 (below FLT_MIN,
 * where the true value would be subnormal) are flushed to 0. */
#define JK_LN2 0.6931471805599453094
#define JK_C1 (JK_LN2)
#define JK_C2 (JK_C1 * JK_LN2 / 2)
#define JK_C3 (JK_C2 * JK_LN2 / 3)
#define JK_C4 (JK_C3 * JK_LN2 / 4)
#define JK_C5 (JK_C4 * JK_LN2 / 5)
#define JK_C6 (JK_C5 * JK_LN2 / 6)
#define JK_C7 (JK_C6 * JK_LN2 / 7)
#define JK_EXP2_CLAMP (-127.0f)
#define JK_EXP2_FLUSH (-126.0f) /* log2(FLT_MIN) */

JK_INLINE jv JK(exp2v)(jv x) {
    x = jv_min(jv_zero(), x);              /* x > 0 (ties of the max, below) gives 1 */
    x = jv_max(jv_set1(JK_EXP2_CLAMP), x); /* NaN x stays NaN */
    const jv n = jv_round(x);
    const jv f = jv_sub(x, n);
    jv p = jv_set1((float)JK_C7);
    p = jv_fma(p, f, jv_set1((float)JK_C6));
    p = jv_fma(p, f, jv_set1((float)JK_C5));
    p = jv_fma(p, f, jv_set1((float)JK_C4));
    p = jv_fma(p, f, jv_set1((float)JK_C3));
    p = jv_fma(p, f, jv_set1((float)JK_C2));
    p = jv_fma(p, f, jv_set1((float)JK_C1));
    p = jv_fma(p, f, jv_set1(1.0f));
    return jv_zero_if_below(x, jv_set1(JK_EXP2_FLUSH), jv_mul_pow2(p, n));
}

static void JK(exp2)(int64_t n, const float *x, float *y) {
    int64_t i = 0;
    for (; i + JK_VL <= n; i += JK_VL) {
        JK_ALIGNED float t[JK_VL];
        memcpy(t, x + i, sizeof t);
        jv_store(t, JK(exp2v)(jv_load(t)));
        memcpy(y + i, t, sizeof t);
    }
    if (i < n) {
        JK_ALIGNED float t[JK_VL];
        for (int r = 0; r < JK_VL; r++) t[r] = i + r < n ? x[i + r] : 0.0f;
        jv_store(t, JK(exp2v)(jv_load(t)));
        for (int r = 0; i + r < n; r++) y[i + r] = t[r];
    }
}

/* ---- scores: St[j][:] = K[j][:] . Qt  (JR x QB tile, JR <= SJ known at compile time) -------
 * reads k rows j < JR (D floats each, row stride ks), qt [D][QB]; writes st, sl [JR][QB].
 * Per d: NQV vector loads of Qt, JR broadcasts of K[j][d], JR*NQV FMAs into registers.
 * The D-reduction is compensated, with the rounding error carried forward: each JK_DB head_dim
 * elements are summed by FMAs into the register `c`, which enters the block holding the
 * rounding error of the previous block's addition; then Fast2Sum adds c into the running sum
 * (t = sum + c; c = (sum - t) + c; sum = t), leaving the new rounding error in c. So the error
 * costs three vector additions per block and accumulator and never leaves the registers, and
 * the logit leaves as the pair st = sum, sl = c, never rounded to one float. Plain f32
 * accumulation of the large test distribution (|q|,|k| up to 1e3, logits of std 8) loses
 * ~3.4 ulp of the dot (rms at D = 512) and fails the f32 gate; this keeps it near 0.6 ulp
 * (NOTES.md §3). Blocks alternate the register set of the running sum (s0 -> s1 -> s0), so
 * the Fast2Sum needs no register copies. A non-finite term or an overflow makes the carried
 * error non-finite (inf - inf) and it would poison the following blocks; such a tile (a rare
 * one: inputs with inf/NaN, or dot products beyond FLT_MAX) is recomputed by scores_exact,
 * whose error term never feeds the sum, so a -inf score stays -inf (weight 0, not NaN). */
#define JK_SCORES_BLOCK(DN)                                                                         \
    do {                                                                                            \
        JK_UNROLL for (int64_t dd = 0; dd < (DN); dd++) {                                           \
            const int64_t d = d0 + dd;                                                              \
            jv qv[JK_NQV];                                                                          \
            JK_UNROLL for (int v = 0; v < JK_NQV; v++) qv[v] = jv_load(qt + d * JK_QB + v * JK_VL); \
            JK_UNROLL for (int j = 0; j < JR; j++) {                                                \
                const jv b = jv_bcast(kr[j] + d);                                                   \
                JK_UNROLL for (int v = 0; v < JK_NQV; v++) c[j][v] = jv_fma(b, qv[v], c[j][v]);     \
            }                                                                                       \
        }                                                                                           \
        d0 += (DN);                                                                                 \
    } while (0)
/* sum (in st, L1) += c by Fast2Sum, its rounding error left in c. */
#define JK_SCORES_FAST2SUM()                                                            \
    JK_UNROLL for (int j = 0; j < JR; j++) JK_UNROLL for (int v = 0; v < JK_NQV; v++) { \
        float *sp = st + j * JK_QB + v * JK_VL;                                         \
        const jv sum = jv_load(sp), t = jv_add(sum, c[j][v]);                           \
        c[j][v] = jv_add(jv_sub(sum, t), c[j][v]);                                      \
        jv_store(sp, t);                                                                \
    }                                                                                   \
    atomic_signal_fence(memory_order_seq_cst) /* sums stay in st, not in registers */

static void JK(scores_exact)(int jr, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st, float *sl);

/* The rare path of scores_rows: the scores whose carried error sl is not finite are replaced by
 * those of scores_exact; every other score keeps its value bit for bit (so a non-finite input
 * changes only the rows it reaches). */
static void JK(scores_fix_nonfinite)(int jr, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st,
                                     float *sl) {
    JK_ALIGNED float est[JK_SJ * JK_QB], esl[JK_SJ * JK_QB];
    JK(scores_exact)(jr, D, k, ks, qt, est, esl);
    for (int i = 0; i < jr * JK_QB; i++)
        if (!isfinite(sl[i])) st[i] = est[i], sl[i] = esl[i];
}

JK_INLINE void JK(scores_rows)(const int JR, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st,
                               float *sl) {
#ifdef JK_SCORES_FULL_TILE
    /* The instance's own full tile (cpu_scores_avx512_asm.h): the same pair, its own schedule. */
    if (JR == JK_SJ && D >= JK_DB) {
        if (JK_SCORES_FULL_TILE(D, k, ks, qt, st, sl)) JK(scores_fix_nonfinite)(JR, D, k, ks, qt, st, sl);
        return;
    }
#endif
    const float *kr[JK_SJ];
    jv c[JK_SJ][JK_NQV];
    JK_UNROLL for (int j = 0; j < JR; j++) {
        kr[j] = k + j * ks;
        JK_UNROLL for (int v = 0; v < JK_NQV; v++) c[j][v] = jv_zero();
    }
    int64_t d0 = 0;
    /* The first block's sum is exact to store: sum = c, error 0. */
    if (D >= JK_DB)
        JK_SCORES_BLOCK(JK_DB);
    else
        JK_SCORES_BLOCK(D);
    JK_UNROLL for (int j = 0; j < JR; j++) JK_UNROLL for (int v = 0; v < JK_NQV; v++) {
        jv_store(st + j * JK_QB + v * JK_VL, c[j][v]);
        c[j][v] = jv_zero();
    }
    for (; d0 + JK_DB <= D;) {
        JK_SCORES_BLOCK(JK_DB);
        JK_SCORES_FAST2SUM();
    }
    if (d0 < D) {
        JK_SCORES_BLOCK(D - d0);
        JK_SCORES_FAST2SUM();
    }
    /* A lane's carried error is non-finite exactly when some term or partial sum of it was. */
    jv chk = jv_zero();
    JK_UNROLL for (int j = 0; j < JR; j++) JK_UNROLL for (int v = 0; v < JK_NQV; v++) {
        jv_store(sl + j * JK_QB + v * JK_VL, c[j][v]);
        chk = jv_add(chk, c[j][v]);
    }
    if (jv_any_nan(jv_sub(chk, chk))) JK(scores_fix_nonfinite)(JR, D, k, ks, qt, st, sl);
}

/* ---- scores for small head_dim (D <= JK_EXACT_D): every product's rounding error is
 * captured too (p = b*q, its error fma(b, q, -p), Fast2Sum of p into the sum), so the logit
 * sum + err is the dot product to ~2^-44 relative. Where D is small the f32 rounding of a
 * product is not averaged away by anything and alone can fail the f32 gate on the large
 * distribution; the cost (4 flops per product) does not matter there. Same contract. */
#define JK_EXACT_D CPU_EXACT_HEAD_DIM
#define JK_PLAIN_LOGIT_BOUND 32.0 /* exp2 units: the plain kernel runs below this logit bound */
#define JK_PLAIN_QK_MAX 1e30      /* and where no partial sum can overflow */
static void JK(scores_exact)(int jr, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st, float *sl) {
    for (int j = 0; j < jr; j++)
        for (int v = 0; v < JK_NQV; v++) {
            jv sum = jv_zero(), err = jv_zero();
            for (int64_t d = 0; d < D; d++) {
                const jv b = jv_bcast(k + j * ks + d), qv = jv_load(qt + d * JK_QB + v * JK_VL);
                const jv prod = jv_mul(b, qv);
                const jv prod_err = jv_fma_exact(b, qv, jv_sub(jv_zero(), prod));
                const jv t = jv_add(sum, prod);
                err = jv_add(err, jv_add(jv_add(jv_sub(sum, t), prod), prod_err));
                sum = t;
            }
            jv_store(st + j * JK_QB + v * JK_VL, sum);
            jv_store(sl + j * JK_QB + v * JK_VL, jv_nan_to_zero(err));
        }
}

/* ---- P V: Ot[r][:] = alpha * Ot[r][:] + sum_j V[j][r] Pt[j][:]  (DRN x QB tile) ----------
 * reads v rows j < n at columns r < DRN (row stride vs), pt [n][QB], alpha [QB], ot [DRN][QB];
 * writes ot. Per key: NQV vector loads of Pt, DRN broadcasts of V[j][r], DRN*NQV FMAs. */
JK_INLINE void JK(pv_rows)(const int DRN, int n, const float *v, ptrdiff_t vs, const float *pt, const float *alpha,
                           float *ot) {
    jv acc[JK_DR][JK_NQV];
    JK_UNROLL for (int r = 0; r < DRN; r++) JK_UNROLL for (int u = 0; u < JK_NQV; u++) acc[r][u] = jv_zero();
    for (int j = 0; j < n; j++) {
        jv p[JK_NQV];
        JK_UNROLL for (int u = 0; u < JK_NQV; u++) p[u] = jv_load(pt + (ptrdiff_t)j * JK_QB + u * JK_VL);
        const float *vj = v + (ptrdiff_t)j * vs;
        JK_UNROLL for (int r = 0; r < DRN; r++) {
            const jv b = jv_bcast(vj + r);
            JK_UNROLL for (int u = 0; u < JK_NQV; u++) acc[r][u] = jv_fma(b, p[u], acc[r][u]);
        }
    }
    JK_UNROLL for (int u = 0; u < JK_NQV; u++) {
        const jv a = jv_load(alpha + u * JK_VL);
        JK_UNROLL for (int r = 0; r < DRN; r++) {
            float *o = ot + r * JK_QB + u * JK_VL;
            jv_store(o, jv_fma(jv_load(o), a, acc[r][u]));
        }
    }
}

/* ---- P V, compensated (the small-head_dim path, D <= JK_EXACT_D) ----------------------
 * (ot + otl)[r][:] = (ot + otl)[r][:] * alpha + sum_j V[j][r] Pt[j][:]   for r < dr, any dr.
 * Every product's rounding error (an exact FMA) and every addition's (TwoSum) is kept, so the
 * pair holds the sum to within a few u of the result itself plus ~n u^2 of the sum of |terms|,
 * whatever the cancellation. With few head_dim columns an output can be a sum of +-terms that
 * nearly cancels (D = 1, uniform v: out ~ 1e-3 from terms ~ 1e-2), where plain accumulation
 * errs by u times the partial sums: many ulps of the result, and rel_l2 has no other columns
 * to average it away. ~10 operations per product; at D <= 16 the exp2 costs more anyway.
 * A non-finite term leaves the error NaN: it is dropped (otl = 0), the sum carries the inf. */
static void JK(pv_exact)(int dr, int n, const float *v, ptrdiff_t vs, const float *pt, const float *alpha, float *ot,
                         float *otl) {
    for (int r = 0; r < dr; r++)
        for (int u = 0; u < JK_NQV; u++) {
            jv sum = jv_zero(), err = jv_zero();
            for (int j = 0; j < n; j++) {
                const jv b = jv_bcast(v + (ptrdiff_t)j * vs + r), p = jv_load(pt + (ptrdiff_t)j * JK_QB + u * JK_VL);
                const jv prod = jv_mul(b, p);
                const jv prod_err = jv_fma_exact(b, p, jv_sub(jv_zero(), prod));
                const jv t = jv_add(sum, prod), bt = jv_sub(t, sum);
                err = jv_add(err, jv_add(jv_add(jv_sub(sum, jv_sub(t, bt)), jv_sub(prod, bt)), prod_err));
                sum = t;
            }
            float *o = ot + r * JK_QB + u * JK_VL, *ol = otl + r * JK_QB + u * JK_VL;
            const jv a = jv_load(alpha + u * JK_VL), hi = jv_load(o);
            const jv x = jv_mul(hi, a), x_err = jv_fma_exact(hi, a, jv_sub(jv_zero(), x));
            const jv t = jv_add(x, sum), bt = jv_sub(t, x);
            const jv t_err = jv_add(jv_sub(x, jv_sub(t, bt)), jv_sub(sum, bt));
            jv_store(ol, jv_nan_to_zero(jv_add(jv_fma(jv_load(ol), a, err), jv_add(x_err, t_err))));
            jv_store(o, t);
        }
}

/* Edge tiles: one fully unrolled instance per row count, chosen by a switch. */
/* clang-format off */
#define JK_EDGE_CASES(MAX, CALL) \
    JK_EDGE_CASE(MAX, 1, CALL) JK_EDGE_CASE(MAX, 2, CALL) JK_EDGE_CASE(MAX, 3, CALL) JK_EDGE_CASE(MAX, 4, CALL) \
    JK_EDGE_CASE(MAX, 5, CALL) JK_EDGE_CASE(MAX, 6, CALL) JK_EDGE_CASE(MAX, 7, CALL) JK_EDGE_CASE(MAX, 8, CALL) \
    JK_EDGE_CASE(MAX, 9, CALL) JK_EDGE_CASE(MAX, 10, CALL) JK_EDGE_CASE(MAX, 11, CALL) JK_EDGE_CASE(MAX, 12, CALL)
/* clang-format on */
#define JK_EDGE_CASE(MAX, N, CALL) \
    case N:                        \
        if ((N) <= (MAX)) CALL(N); \
        break;

static void JK(scores)(int jr, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st, float *sl) {
    if (D <= JK_EXACT_D) {
        JK(scores_exact)(jr, D, k, ks, qt, st, sl);
        return;
    }
#define JK_SCORES_CALL(N) JK(scores_rows)(N, D, k, ks, qt, st, sl)
    switch (jr) { JK_EDGE_CASES(JK_SJ, JK_SCORES_CALL) default : break; }
#undef JK_SCORES_CALL
}

static void JK(pv)(int dr, int n, const float *v, ptrdiff_t vs, const float *pt, const float *alpha, float *ot) {
#define JK_PV_CALL(N) JK(pv_rows)(N, n, v, vs, pt, alpha, ot)
    switch (dr) { JK_EDGE_CASES(JK_DR, JK_PV_CALL) default : break; }
#undef JK_PV_CALL
}

/* ---- scores, plain: St[j][:] = K[j][:] . Qt by one FMA chain per score, sl = 0 ------------
 * Same shapes as scores_rows. The task runs it instead of the compensated kernel when the
 * a-priori bound of its logits is small (task, below): then the rounding of the plain dot
 * product is no larger than the compensated kernel's on the gate's hardest inputs. */
JK_INLINE void JK(scores_rows_plain)(const int JR, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st,
                                     float *sl) {
    const float *kr[JK_SJ];
    jv c[JK_SJ][JK_NQV];
    JK_UNROLL for (int j = 0; j < JR; j++) {
        kr[j] = k + j * ks;
        JK_UNROLL for (int v = 0; v < JK_NQV; v++) c[j][v] = jv_zero();
    }
    int64_t d0 = 0;
    for (; d0 + JK_DB <= D;) JK_SCORES_BLOCK(JK_DB); /* a constant trip count unrolls cleanly */
    if (d0 < D) JK_SCORES_BLOCK(D - d0);
    JK_UNROLL for (int j = 0; j < JR; j++) JK_UNROLL for (int v = 0; v < JK_NQV; v++) {
        jv_store(st + j * JK_QB + v * JK_VL, c[j][v]);
        if (sl) jv_store(sl + j * JK_QB + v * JK_VL, jv_zero());
    }
}

static void JK(scores_plain)(int jr, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st, float *sl) {
#define JK_SCORES_PLAIN_CALL(N) JK(scores_rows_plain)(N, D, k, ks, qt, st, sl)
    switch (jr) { JK_EDGE_CASES(JK_SJ, JK_SCORES_PLAIN_CALL) default : break; }
#undef JK_SCORES_PLAIN_CALL
}

/* ---- max_row_norm2: max over the rows i < n of |x_i|^2 = sum_d x[i][d]^2 (row stride xs),
 * non-finite elements counted as 0; 0 when n == 0. Counting an inf or NaN as 0 makes the bound
 * (and so the scores kernel every other row of the task runs) exactly what it is with that
 * element replaced by 0: include/jattn.h's rule for non-finite inputs. Summed in float in VL
 * lanes; a row whose float sum overflows or is tiny (squares that could underflow) is summed
 * again in double. */
#define JK_NORM2_TINY 0x1p-100f
static double JK(row_norm2_double)(int64_t D, const float *r) {
    double sum = 0.0;
    for (int64_t d = 0; d < D; d++)
        if (isfinite(r[d])) sum += (double)r[d] * r[d];
    return sum;
}
static double JK(max_row_norm2)(int64_t n, int64_t D, const float *x, ptrdiff_t xs) {
    double best = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float *r = x + i * xs;
        jv acc = jv_zero();
        int64_t d = 0;
        for (; d + JK_VL <= D; d += JK_VL) {
            JK_ALIGNED float t[JK_VL];
            memcpy(t, r + d, sizeof t);
            jv xv = jv_load(t);
            xv = jv_nan_to_zero(jv_add(xv, jv_sub(xv, xv))); /* x - x is NaN for inf and NaN */
            acc = jv_fma(xv, xv, acc);
        }
        JK_ALIGNED float lanes[JK_VL];
        jv_store(lanes, acc);
        float sumf = 0.0f;
        for (int l = 0; l < JK_VL; l++) sumf += lanes[l];
        for (; d < D; d++) {
            const float e = isfinite(r[d]) ? r[d] : 0.0f;
            sumf += e * e;
        }
        const double sum = isfinite(sumf) && sumf >= JK_NORM2_TINY ? (double)sumf : JK(row_norm2_double)(D, r);
        if (sum > best) best = sum;
    }
    return best;
}

/* The same maximum for a task's own queries, from its packed Qt (nq <= QB lanes, D rows): one
 * vector FMA per head_dim element and query vector, the NQV sums independent, where
 * max_row_norm2 on the rows spends a horizontal sum per row (5 % of a task with 77 keys). The
 * float sums run in head_dim order; non-finite elements count as 0 and a row whose float sum
 * overflows or is tiny is summed again in double from q, as there. */
static double JK(qt_max_norm2)(int nq, int64_t D, const float *qt, const float *q, ptrdiff_t qs) {
    jv acc[JK_NQV];
    for (int u = 0; u < JK_NQV; u++) acc[u] = jv_zero();
    for (int64_t d = 0; d < D; d++)
        for (int u = 0; u < JK_NQV; u++) {
            jv x = jv_load(qt + d * JK_QB + u * JK_VL);
            x = jv_nan_to_zero(jv_add(x, jv_sub(x, x))); /* x - x is NaN for inf and NaN */
            acc[u] = jv_fma(x, x, acc[u]);
        }
    JK_ALIGNED float sums[JK_QB];
    for (int u = 0; u < JK_NQV; u++) jv_store(sums + u * JK_VL, acc[u]);
    double best = 0.0;
    for (int i = 0; i < nq; i++) {
        const double sum =
            isfinite(sums[i]) && sums[i] >= JK_NORM2_TINY ? (double)sums[i] : JK(row_norm2_double)(D, q + i * qs);
        if (sum > best) best = sum;
    }
    return best;
}

/* ---- online softmax over one block of n key rows of St (in place -> Pt) ---------------
 * A logit is the pair (st, sl) in dot-product units. The running max is the pair (m, ml) of
 * the key with the largest st (ties: a fixed choice, so results stay deterministic), and exp2 gets ((st - m) + (sl -
 * ml)) * c with c = scale * log2(e): st - m is exact for the keys that matter (st near m), the low parts are not lost,
 * and the max key gets exactly 2^0 = 1 (so a single key returns its v row bit for bit). Ties with a larger low part
 * would give x > 0: exp2 returns 1 there. */
#define JK_MAX_CHAINS 4
/* a > b ? a : b (NaN a or b gives b): jv_max where the instruction set's max is exactly that. */
#ifndef JK_MAX_OF
#define JK_MAX_OF(a, b) jv_select_gt((a), (b), (a), (b))
#endif
JK_INLINE void JK(softmax_block_lo)(const int LOW, int n, float c, float *st, const float *sl, float *m, float *ml,
                                    float *l, float *alpha) {
    const jv cv = jv_set1(c);
    JK_UNROLL for (int u = 0; u < JK_NQV; u++) {
        float *s = st + u * JK_VL;
        const float *slo = LOW ? sl + u * JK_VL : NULL;
        const jv m_old = jv_load(m + u * JK_VL), ml_old = jv_load(ml + u * JK_VL);
        /* JK_MAX_CHAINS independent max chains (rows j = ch mod chains), merged in chain order. */
        jv cm[JK_MAX_CHAINS], cml[JK_MAX_CHAINS];
        JK_UNROLL for (int ch = 0; ch < JK_MAX_CHAINS; ch++) cm[ch] = m_old, cml[ch] = ml_old;
        int j = 0;
        for (; j + JK_MAX_CHAINS <= n; j += JK_MAX_CHAINS) JK_UNROLL for (int ch = 0; ch < JK_MAX_CHAINS; ch++) {
                const jv h = jv_load(s + (ptrdiff_t)(j + ch) * JK_QB);
                if (LOW) cml[ch] = jv_select_gt(h, cm[ch], jv_load(slo + (ptrdiff_t)(j + ch) * JK_QB), cml[ch]);
                cm[ch] = JK_MAX_OF(h, cm[ch]);
            }
        for (int ch = 0; j < n; j++, ch++) {
            const jv h = jv_load(s + (ptrdiff_t)j * JK_QB);
            if (LOW) cml[ch] = jv_select_gt(h, cm[ch], jv_load(slo + (ptrdiff_t)j * JK_QB), cml[ch]);
            cm[ch] = JK_MAX_OF(h, cm[ch]);
        }
        jv mx = cm[0], mxl = cml[0];
        JK_UNROLL for (int ch = 1; ch < JK_MAX_CHAINS; ch++) {
            if (LOW) mxl = jv_select_gt(cm[ch], mx, cml[ch], mxl);
            mx = JK_MAX_OF(cm[ch], mx);
        }
        const jv a = JK(exp2v)(jv_mul(LOW ? jv_add(jv_sub(m_old, mx), jv_sub(ml_old, mxl)) : jv_sub(m_old, mx), cv));
        jv sum = jv_zero();
        for (int j = 0; j < n; j++) {
            const jv h = jv_load(s + (ptrdiff_t)j * JK_QB);
            const jv d = LOW ? jv_add(jv_sub(h, mx), jv_sub(jv_load(slo + (ptrdiff_t)j * JK_QB), mxl)) : jv_sub(h, mx);
            const jv p = JK(exp2v)(jv_mul(d, cv));
            jv_store(s + (ptrdiff_t)j * JK_QB, p);
            sum = jv_add(sum, p);
        }
        jv_store(alpha + u * JK_VL, a);
        jv_store(l + u * JK_VL, jv_fma(jv_load(l + u * JK_VL), a, sum));
        jv_store(m + u * JK_VL, mx);
        jv_store(ml + u * JK_VL, mxl);
    }
}
static void JK(softmax_block)(int n, float c, float *st, const float *sl, float *m, float *ml, float *l, float *alpha) {
    JK(softmax_block_lo)(1, n, c, st, sl, m, ml, l, alpha);
}
/* The same for a block whose low parts are all 0 (plain scores, so ml stays 0 too): bit for bit
 * the result of softmax_block with sl = 0, without reading sl. */
static void JK(softmax_block_plain)(int n, float c, float *st, float *m, float *ml, float *l, float *alpha) {
    JK(softmax_block_lo)(0, n, c, st, NULL, m, ml, l, alpha);
}

/* ---- the task's transposes: Q rows in, O^T out, by VL x VL register blocks -------------
 * With few keys (cross-attention to ~77 text tokens) the task's FMAs are few and these two
 * transposes, element by element, took ~15 % and ~17 % of the task (timing with each left out,
 * (1,10,4096,77,64)): a scalar load and store per element, against one FMA per element per key.
 * pack_qt: qt[d][i] = q[i][d] for i < nq, d < D, and 0 for nq <= i < QB (q rows of stride qs,
 * any alignment). write_out: out[i][d] = ot[d][i] * (1 / l[i]) for i < nq, d < D (rows of
 * stride os), the same product as element by element, so the bits are those of the scalar
 * write. A head_dim tail below VL goes element by element. */
static void JK(pack_qt)(int nq, int64_t D, const float *q, ptrdiff_t qs, float *qt) {
    const int64_t Dv = D / JK_VL * JK_VL;
    for (int i0 = 0; i0 < JK_QB; i0 += JK_VL) {
        const int rows = nq - i0 < 0 ? 0 : (nq - i0 < JK_VL ? nq - i0 : JK_VL);
        for (int64_t d0 = 0; d0 < Dv; d0 += JK_VL) {
            jv r[JK_VL];
            for (int j = 0; j < JK_VL; j++) r[j] = j < rows ? jv_loadu(q + (i0 + j) * qs + d0) : jv_zero();
            jv_transpose(r);
            for (int m = 0; m < JK_VL; m++) jv_store(qt + (d0 + m) * JK_QB + i0, r[m]);
        }
    }
    for (int64_t d = Dv; d < D; d++) {
        for (int i = 0; i < nq; i++) qt[d * JK_QB + i] = q[i * qs + d];
        for (int i = nq; i < JK_QB; i++) qt[d * JK_QB + i] = 0.0f;
    }
}

static void JK(write_out)(int nq, int64_t D, const float *ot, const float *l, float *out, ptrdiff_t os) {
    JK_ALIGNED float inv[JK_QB];
    for (int i = 0; i < JK_QB; i++) inv[i] = i < nq ? 1.0f / l[i] : 0.0f; /* lanes >= nq: never written */
    const int64_t Dv = D / JK_VL * JK_VL;
    for (int i0 = 0; i0 < nq; i0 += JK_VL) {
        const int rows = nq - i0 < JK_VL ? nq - i0 : JK_VL;
        const jv iv = jv_load(inv + i0);
        for (int64_t d0 = 0; d0 < Dv; d0 += JK_VL) {
            jv r[JK_VL];
            for (int m = 0; m < JK_VL; m++) r[m] = jv_mul(jv_load(ot + (d0 + m) * JK_QB + i0), iv);
            jv_transpose(r);
            for (int j = 0; j < rows; j++) jv_storeu(out + (i0 + j) * os + d0, r[j]);
        }
    }
    for (int i = 0; i < nq; i++)
        for (int64_t d = Dv; d < D; d++) out[i * os + d] = ot[d * JK_QB + i] * inv[i];
}

/* Every 64-byte line of rows r < n of x (D floats each, row stride xs) requested into the cache
 * (a hint: nothing is read). The one-vector tables (JK_NQV == 1: blocks of at most VL queries,
 * seq_q = 1 at the extreme) use each K and V element for so few FMAs that streaming them from
 * memory bounds the task; at each key block they ask for its V rows and the next block's K rows
 * ((1,24,1,4096,128): 9.9 -> 8.5 ms on 1 thread, 5.2 -> 4.6 ms on 2; one line per row: no
 * gain). */
#if JK_NQV == 1
static void JK(prefetch_rows)(int64_t n, int64_t D, const float *x, ptrdiff_t xs) {
#if defined(__GNUC__)
    for (int64_t r = 0; r < n; r++)
        for (int64_t d = 0; d < D; d += 64 / (int64_t)sizeof(float)) __builtin_prefetch(x + r * xs + d);
#else
    (void)n, (void)D, (void)x, (void)xs;
#endif
}
#endif

/* Every 64-byte line of the rows r0 <= r < r1 of x (D floats each, row stride xs) requested
 * into L2 (prefetcht1; a hint: nothing is read). A group of query blocks asks, a share before
 * each of its blocks, for the rows of the next key block, so that the group's first block does
 * not wait on L3 or memory for them: (1,2,16384,128) 1 thread, 8-block groups: see NOTES.md §1. */
static void JK(prefetch_rows_l2)(int64_t r0, int64_t r1, int64_t D, const float *x, ptrdiff_t xs) {
#if defined(__GNUC__)
    for (int64_t r = r0; r < r1; r++)
        for (int64_t d = 0; d < D; d += 64 / (int64_t)sizeof(float)) __builtin_prefetch(x + r * xs + d, 0, 2);
#else
    (void)r0, (void)r1, (void)D, (void)x, (void)xs;
#endif
}

/* Rows rows[0 .. n) of x (D floats each, row stride xs) copied back to back into packed. */
static void JK(pack_rows)(int n, const int64_t *rows, int64_t D, const float *x, ptrdiff_t xs, float *packed) {
    for (int r = 0; r < n; r++) memcpy(packed + r * D, x + rows[r] * xs, (size_t)D * sizeof *packed);
}

/* out rows of a query block with no key to attend (key padding): 0, and lse -inf. */
static void JK(write_unattended)(const cpu_flash_args *a, int64_t b, int64_t h, int64_t q0, int nq) {
    float *out = a->out + b * a->os.batch + h * a->os.head + q0 * a->os.token;
    for (int i = 0; i < nq; i++) memset(out + i * a->os.token, 0, (size_t)a->D * sizeof *out);
    if (a->lse)
        for (int i = 0; i < nq; i++) a->lse[(b * a->H + h) * a->Sq + q0 + i] = -INFINITY;
}

/* ---- the task: a group of query blocks of one (b, h), all the keys they attend -----------
 * nblk (1..CPU_GROUP_MAX) query blocks of QB queries from q0 on (the last one may be short),
 * each with its own state, walk the key blocks together: for each key block, every block of
 * the group in turn. A K/V block (BK rows of K and of V, 2 BK D floats) is then read from
 * memory or L3 once per group and reused from L2 by the group's other blocks, where a lone
 * block streams all of the head's K and V (4.7 MB at S = 4608, D = 128: more than L2).
 * Each block's arithmetic is exactly the lone block's (the same key blocks in the same order
 * into its own running state), so the bits do not depend on the group size.
 * workspace (floats, each part 64-byte aligned): shared st, sl [BK][QB] and pk, pv [BK][D] (a
 * key block whose rows are not consecutive, a key mask, is packed there once for the group, so
 * masked rows are never read); then per block qt, ot [D][QB], m, ml, l, alpha [QB], and for
 * D <= JK_EXACT_D otl [D][QB] (cpu_task_workspace_floats). */
typedef struct JK(fwd_block) {
    float *qt, *ot, *otl, *m, *ml, *l, *alpha;
    int64_t q0;
    int nq, plain;
} JK(fwd_block);

/* One query block against one key block (n rows kb, vb at row strides ks, vs). */
static void JK(task_block)(const cpu_flash_args *a, const JK(fwd_block) * s, int n, const float *kb, ptrdiff_t ks,
                           const float *vb, ptrdiff_t vs, float *st, float *sl) {
    const int64_t D = a->D;
    const int exact = D <= JK_EXACT_D;
    const float *qt = s->qt;
    int j = 0;
    if (s->plain) {
        for (; j + JK_SJ <= n; j += JK_SJ) /* sl = 0 is not written, softmax_block_plain never reads it */
            JK(scores_rows_plain)(JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, NULL);
        if (j < n) JK(scores_plain)(n - j, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
        JK(softmax_block_plain)(n, a->scale_log2e, st, s->m, s->ml, s->l, s->alpha);
        j = n;
    } else if (D > JK_EXACT_D)
        for (; j + JK_SJ <= n; j += JK_SJ)
            JK(scores_rows)(JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
    for (; j < n; j += JK_SJ)
        JK(scores)(n - j < JK_SJ ? n - j : JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
    if (!s->plain) JK(softmax_block)(n, a->scale_log2e, st, sl, s->m, s->ml, s->l, s->alpha);
    if (exact) {
        JK(pv_exact)((int)D, n, vb, vs, st, s->alpha, s->ot, s->otl);
        return;
    }
    int64_t d = 0;
    for (; d + JK_DR <= D; d += JK_DR) JK(pv_rows)(JK_DR, n, vb + d, vs, st, s->alpha, s->ot + d * JK_QB);
    if (d < D) JK(pv)((int)(D - d), n, vb + d, vs, st, s->alpha, s->ot + d * JK_QB);
}

static void JK(task)(const cpu_flash_args *a, int64_t b, int64_t h, int64_t q0, int nblk, float *ws) {
    const int64_t D = a->D;
    const int exact = D <= JK_EXACT_D;
    cpu_key_blocks keys;
    cpu_key_blocks_init(&keys, a, b);
    int64_t rows[JK_BK];
    int n = cpu_key_blocks_next(&keys, JK_BK, rows);
    JK(fwd_block) blk[CPU_GROUP_MAX];
    for (int g = 0; g < nblk; g++) {
        blk[g].q0 = q0 + (int64_t)g * JK_QB;
        blk[g].nq = (int)(a->Sq - blk[g].q0 < JK_QB ? a->Sq - blk[g].q0 : JK_QB);
    }
    if (n == 0) {
        for (int g = 0; g < nblk; g++) JK(write_unattended)(a, b, h, blk[g].q0, blk[g].nq);
        return;
    }
    float *st = ws, *sl = st + (int64_t)JK_BK * JK_QB, *pk = sl + (int64_t)JK_BK * JK_QB, *pv = pk + (int64_t)JK_BK * D;
    float *state = pv + (int64_t)JK_BK * D;
    const int64_t state_floats = cpu_task_block_floats(JK_QB, D);
    for (int g = 0; g < nblk; g++) {
        JK(fwd_block) *s = &blk[g];
        s->qt = state + g * state_floats;
        s->ot = s->qt + D * JK_QB;
        s->m = s->ot + D * JK_QB, s->ml = s->m + JK_QB, s->l = s->ml + JK_QB, s->alpha = s->l + JK_QB;
        s->otl = s->alpha + JK_QB; /* D <= JK_EXACT_D only: the low parts of Ot (pv_exact) */
        /* Pack Qt = Q^T, lanes past the last query zero. */
        const float *q = a->q + b * a->qs.batch + h * a->qs.head + s->q0 * a->qs.token;
        JK(pack_qt)(s->nq, D, q, (ptrdiff_t)a->qs.token, s->qt);
        /* The a-priori bound of this block's logits in exp2 units: |c q.k| <= c max|q| max|k|.
         * Below JK_PLAIN_LOGIT_BOUND the plain dot product's rounding (rms ~ u * bound / sqrt(2),
         * any D) is no larger than the compensated kernel's on the gate's hardest inputs (logits
         * of std 8 in natural units), so the plain kernel runs (NOTES.md §3); NaN/inf norms never do. */
        const double qk = sqrt(JK(qt_max_norm2)(s->nq, D, s->qt, q, (ptrdiff_t)a->qs.token) * a->k_norm2[b * a->H + h]);
        s->plain = D > JK_EXACT_D && qk <= JK_PLAIN_QK_MAX && fabs((double)a->scale_log2e) * qk <= JK_PLAIN_LOGIT_BOUND;
        for (int i = 0; i < JK_QB; i++) {
            s->m[i] = -INFINITY;
            s->ml[i] = s->l[i] = 0.0f;
        }
        memset(s->ot, 0, (size_t)(D * JK_QB) * sizeof *s->ot);
        if (exact) memset(s->otl, 0, (size_t)(D * JK_QB) * sizeof *s->otl);
    }

    const float *kh = a->k + b * a->ks.batch + h * a->ks.head;
    const float *vh = a->v + b * a->vs.batch + h * a->vs.head;
    for (; n > 0; n = cpu_key_blocks_next(&keys, JK_BK, rows)) {
        /* The block's K and V rows in place when consecutive (always, without a mask), else packed. */
        ptrdiff_t ks = (ptrdiff_t)a->ks.token, vs = (ptrdiff_t)a->vs.token;
        const float *kb = kh + rows[0] * ks, *vb = vh + rows[0] * vs;
        if (rows[n - 1] - rows[0] != n - 1) {
            JK(pack_rows)(n, rows, D, kh, ks, pk);
            JK(pack_rows)(n, rows, D, vh, vs, pv);
            kb = pk, vb = pv, ks = vs = (ptrdiff_t)D;
        }
#if JK_NQV == 1
        JK(prefetch_rows)(n, D, vb, vs);
        if (keys.next < keys.end) {
            const int64_t next = keys.end - keys.next;
            JK(prefetch_rows)(next < JK_BK ? next : JK_BK, D, kh + keys.next * a->ks.token, (ptrdiff_t)a->ks.token);
        }
#endif
        /* the next key block's rows (when consecutive: without a mask), a share per block */
        const int64_t nn = keys.mask ? 0 : keys.end - keys.next < JK_BK ? keys.end - keys.next : JK_BK;
        const int64_t next = nn > 0 ? keys.next : 0; /* no pointer past the rows when there is none */
        const float *kn = kh + next * a->ks.token, *vn = vh + next * a->vs.token;
        for (int g = 0; g < nblk; g++) {
            if (JK_NQV > 1 && nn > 0) {
                const int64_t r0 = nn * g / nblk, r1 = nn * (g + 1) / nblk;
                JK(prefetch_rows_l2)(r0, r1, D, kn, (ptrdiff_t)a->ks.token);
                JK(prefetch_rows_l2)(r0, r1, D, vn, (ptrdiff_t)a->vs.token);
            }
            JK(task_block)(a, &blk[g], n, kb, ks, vb, vs, st, sl);
        }
    }

    for (int g = 0; g < nblk; g++) {
        const JK(fwd_block) *s = &blk[g];
        /* out[q][d] = Ot[d][q] / l[q]: the normalisation and the transpose in one write. */
        float *out = a->out + b * a->os.batch + h * a->os.head + s->q0 * a->os.token;
        if (exact)
            for (int i = 0; i < s->nq; i++) {
                const float inv = 1.0f / s->l[i];
                float *o = out + i * a->os.token;
                for (int64_t d = 0; d < D; d++) o[d] = (s->ot[d * JK_QB + i] + s->otl[d * JK_QB + i]) * inv;
            }
        else
            JK(write_out)(s->nq, D, s->ot, s->l, out, (ptrdiff_t)a->os.token);
        if (a->lse) {
            float *lse = a->lse + (b * a->H + h) * a->Sq + s->q0;
            for (int i = 0; i < s->nq; i++)
                lse[i] = (float)(((double)s->m[i] + s->ml[i]) * a->scale + log((double)s->l[i]));
        }
    }
}
/* ==== backward ===========================================================================
 * One query tile of one (b, h) against every key it attends (cpu_kernels.h, bwd_tile): the
 * forward's own scores (the same key blocks, tiles, kernels and plain/compensated choice as
 * its task, so S is the forward's bit for bit), then per key block
 *   P^T  = exp(c S^T - lse)             in place of St (bwd_probs, the product c S kept exact)
 *   dP^T = V dO^T                       scores_plain with k := V rows, qt := dO^T
 *   dV  += P^T dO                       bwd_outer: lanes along head_dim, P^T[j][q] broadcast
 *   dS^T = c P^T (dP^T - Dl)            in place of dP^T
 *   dK  += dS^T Q                       bwd_outer
 *   dQ^T += K^T dS^T                    pv with v := K rows, pt := dS^T, alpha = 1
 * Every sum runs in a fixed order: dQ over key blocks ascending, dK and dV over query tiles in
 * the order the driver calls them (ascending), each tile's sum in a fresh accumulator added
 * once to the running value. */

/* Query tiles of at most this many queries compute dP exactly (bwd_tile). */
#define JK_BWD_EXACT_ROWS 4

/* Default tile of bwd_outer: GK keys x GD vectors of head_dim. */
#ifndef JK_GK
#define JK_GK 4
#endif
#ifndef JK_GD
#define JK_GD 2
#endif
#if JK_GK > 12
#error "bwd_outer tiles up to 12 keys: the edge dispatch lists 12 cases"
#endif

/* ---- bwd_probs: st[j][q] = exp(c (st + sl)[j][q] - lse[q]) for j < n, every lane ------------
 * reads st, sl [n][QB] (sl only when low), lse [QB] (natural log; +inf makes a lane 0);
 * writes st. c st is formed exactly as a pair (the product and its FMA-exact error), so the
 * only roundings left are those of the small difference and of its exp. */
#define JK_LOG2E 1.4426950408889634074
static void JK(bwd_probs)(int n, int low, float c, float *st, const float *sl, const float *lse) {
    const jv cv = jv_set1(c), l2e = jv_set1((float)JK_LOG2E);
    JK_UNROLL for (int u = 0; u < JK_NQV; u++) {
        const jv lv = jv_load(lse + u * JK_VL);
        for (int j = 0; j < n; j++) {
            float *sp = st + (ptrdiff_t)j * JK_QB + u * JK_VL;
            const jv sv = jv_load(sp), hi = jv_mul(sv, cv);
            jv lo = jv_nan_to_zero(jv_fma_exact(sv, cv, jv_sub(jv_zero(), hi)));
            if (low) lo = jv_fma(jv_load(sl + (ptrdiff_t)j * JK_QB + u * JK_VL), cv, lo);
            const jv x = jv_add(jv_sub(hi, lv), lo);
            jv_store(sp, JK(exp2v)(jv_mul(x, l2e)));
        }
    }
}

/* ---- bwd_dots_exact: dpt[j][q] + dpl[j][q] = x[j][:] . yt[:][q] for j < jr ----------------
 * reads x rows j < jr (D floats each, row stride xs), yt [D][QB]; writes dpt, dpl [jr][QB].
 * The dP and Dl of the small query tiles (bwd_tile): every product's rounding error (an exact
 * FMA) and every addition's by TwoSum, which unlike the Fast2Sum of scores_exact needs no
 * ordering of the two magnitudes: v . dO is a sum of terms of both signs whose partial sums
 * fall below the next term, where Fast2Sum's error term is wrong by up to u |term|, and dS =
 * P (dP - Dl) of a near one-hot row is the small difference of two such sums. (scores_exact
 * stays as it is: it is the forward's, and the backward recomputes the forward's S with it.)
 * A non-finite term leaves the error NaN: it is dropped, the sum carries the inf. */
static void JK(bwd_dots_exact)(int jr, int64_t D, const float *x, ptrdiff_t xs, const float *yt, float *dpt,
                               float *dpl) {
    for (int j = 0; j < jr; j++)
        for (int v = 0; v < JK_NQV; v++) {
            jv sum = jv_zero(), err = jv_zero();
            for (int64_t d = 0; d < D; d++) {
                const jv b = jv_bcast(x + j * xs + d), y = jv_load(yt + d * JK_QB + v * JK_VL);
                const jv prod = jv_mul(b, y);
                const jv prod_err = jv_fma_exact(b, y, jv_sub(jv_zero(), prod));
                const jv t = jv_add(sum, prod), bt = jv_sub(t, sum);
                err = jv_add(err, jv_add(jv_add(jv_sub(sum, jv_sub(t, bt)), jv_sub(prod, bt)), prod_err));
                sum = t;
            }
            jv_store(dpt + j * JK_QB + v * JK_VL, sum);
            jv_store(dpl + j * JK_QB + v * JK_VL, jv_nan_to_zero(err));
        }
}

/* ---- bwd_ds: dpt[j][q] = c * pt[j][q] * ((dpt - dl) + (dpl - dll))[j][q] for j < n ----------
 * dP and Dl both arrive as pairs (the compensated dot product; the float64 Dl split in two),
 * so their difference keeps its digits where the two nearly cancel: in a sharp row the key
 * that takes most of the weight has dP ~ Dl, and with one key dS is exactly 0. */
static void JK(bwd_ds)(int n, float c, const float *pt, float *dpt, const float *dpl, const float *dl,
                       const float *dll) {
    const jv cv = jv_set1(c);
    JK_UNROLL for (int u = 0; u < JK_NQV; u++) {
        const jv dv = jv_load(dl + u * JK_VL), dvl = jv_load(dll + u * JK_VL);
        for (int j = 0; j < n; j++) {
            const ptrdiff_t o = (ptrdiff_t)j * JK_QB + u * JK_VL;
            const jv diff = jv_add(jv_sub(jv_load(dpt + o), dv), jv_sub(jv_nan_to_zero(jv_load(dpl + o)), dvl));
            jv_store(dpt + o, jv_mul(jv_mul(jv_load(pt + o), cv), diff));
        }
    }
}

/* ---- bwd_outer: y[j][d] += sum_{q<nq} pt[j][q] * x[q][d]  (JR keys x NV vectors of head_dim) --
 * reads pt [JR][QB] (row stride QB), x rows q < nq (row stride xs, any alignment) at columns
 * [0, NV VL); y rows j < JR (row stride ys) at the same columns, read and written once. The
 * sum over q runs in order into a fresh accumulator, added to y at the end. */
JK_INLINE void JK(outer_rows)(const int JR, const int NV, int nq, const float *pt, const float *x, ptrdiff_t xs,
                              float *y, ptrdiff_t ys) {
    jv acc[JK_GK][JK_GD];
    JK_UNROLL for (int j = 0; j < JR; j++) JK_UNROLL for (int v = 0; v < NV; v++) acc[j][v] = jv_zero();
    for (int q = 0; q < nq; q++) {
        jv xv[JK_GD];
        JK_UNROLL for (int v = 0; v < NV; v++) xv[v] = jv_loadu(x + (ptrdiff_t)q * xs + v * JK_VL);
        JK_UNROLL for (int j = 0; j < JR; j++) {
            const jv b = jv_bcast(pt + (ptrdiff_t)j * JK_QB + q);
            JK_UNROLL for (int v = 0; v < NV; v++) acc[j][v] = jv_fma(b, xv[v], acc[j][v]);
        }
    }
    JK_UNROLL for (int j = 0; j < JR; j++) JK_UNROLL for (int v = 0; v < NV; v++) {
        float *yp = y + (ptrdiff_t)j * ys + v * JK_VL;
        jv_storeu(yp, jv_add(jv_loadu(yp), acc[j][v]));
    }
}

/* The whole key block: every n keys, every head_dim column D (full tiles, then one vector at a
 * time, then the columns past the last whole vector one by one, in the same q order). */
static void JK(bwd_outer)(int n, int nq, int64_t D, const float *pt, const float *x, ptrdiff_t xs, float *y,
                          ptrdiff_t ys) {
    const int64_t Dt = D / (JK_GD * JK_VL) * (JK_GD * JK_VL), Dv = D / JK_VL * JK_VL;
    for (int j0 = 0; j0 < n; j0 += JK_GK) {
        const int jr = n - j0 < JK_GK ? n - j0 : JK_GK;
        const float *pj = pt + (ptrdiff_t)j0 * JK_QB;
        float *yj = y + (ptrdiff_t)j0 * ys;
        for (int64_t d = 0; d < Dt; d += JK_GD * JK_VL) {
#define JK_OUTER_CALL(N) JK(outer_rows)(N, JK_GD, nq, pj, x + d, xs, yj + d, ys)
            switch (jr) { JK_EDGE_CASES(JK_GK, JK_OUTER_CALL) default : break; }
#undef JK_OUTER_CALL
        }
        for (int64_t d = Dt; d < Dv; d += JK_VL) {
#define JK_OUTER_CALL(N) JK(outer_rows)(N, 1, nq, pj, x + d, xs, yj + d, ys)
            switch (jr) { JK_EDGE_CASES(JK_GK, JK_OUTER_CALL) default : break; }
#undef JK_OUTER_CALL
        }
        /* The head_dim columns past the last vector (odd head dims; every column at D < JK_VL):
         * the tile's sum in float64, rounded once. With a few columns, dk = dS^T Q of one key is
         * a sum of terms of both signs over the queries whose float32 chain loses digits to the
         * cancellation (D = 1, uniform: dk rel_l2 5.5e-6 against the 5e-6 gate). */
        for (int j = 0; j < jr; j++)
            for (int64_t d = Dv; d < D; d++) {
                double acc = 0.0;
                for (int q = 0; q < nq; q++)
                    acc += (double)pj[(ptrdiff_t)j * JK_QB + q] * (double)x[(ptrdiff_t)q * xs + d];
                yj[(ptrdiff_t)j * ys + d] += (float)acc;
            }
    }
}

/* dk, dv rows of a gapped key block, accumulated apart (tk, tv [n][D], zeroed) and added back
 * to their rows: y[rows[r]] += t[r], the same single addition as in place. */
static void JK(bwd_scatter_add)(int n, const int64_t *rows, int64_t D, const float *t, float *y, ptrdiff_t ys) {
    for (int r = 0; r < n; r++) {
        float *yr = y + rows[r] * ys;
        for (int64_t d = 0; d < D; d++) yr[d] += t[(ptrdiff_t)r * D + d];
    }
}

/* ---- bwd_tile: ntile (1..CPU_GROUP_MAX) query tiles of QB queries from q0 on of (b, h) (the last
 * one may be short) against all their keys, the tiles walking the key blocks together: for each
 * key block, every tile in ascending order. The K and V rows of a key block and its dk, dv rows
 * are then read from memory or L3 once per group and reused from L2 by its other tiles, where a
 * lone tile streams all of the head's K, V, dK and dV (4 x 2.4 MB at S = 4608, D = 128).
 * Each tile's arithmetic is exactly the lone tile's, and the dk, dv rows still receive the tiles'
 * sums one by one in ascending tile order, so the bits do not depend on the group size.
 * reads q, k, v, out, lse, dout, dlse of (b, h); writes those dq rows; adds into every dk, dv
 * row of an attended key (the driver zeroes them first). Workspace (floats, 64-byte aligned
 * parts, cpu_bwd_tile_workspace_floats): shared st, sl, dpt, dpl [BK][QB], one [QB], pk, pv,
 * tk, tv [BK][D]; then per tile qt, dot, dqt [D][QB], dqtl [D][QB] for D <= JK_EXACT_D, and
 * lse, dl, dll [QB]. */
typedef struct JK(bwd_state) {
    float *qt, *dot, *dqt, *dqtl, *lse, *dl, *dll;
    const float *q, *g; /* the tile's q and dout rows */
    float *dq;
    int nq, plain, exact_dp;
} JK(bwd_state);

/* One tile against one key block (n rows kb, vb at strides ks, vs; its dk, dv rows dkb, dvb). */
static void JK(bwd_block)(const cpu_bwd_args *ba, const JK(bwd_state) * s, int n, const float *kb, ptrdiff_t ks,
                          const float *vb, ptrdiff_t vs, float *dkb, ptrdiff_t dks, float *dvb, ptrdiff_t dvs,
                          float *st, float *sl, float *dpt, float *dpl, const float *one, int parts) {
    const cpu_flash_args *a = &ba->f;
    const int64_t D = a->D;
    const int exact = D <= JK_EXACT_D;
    const ptrdiff_t qs = (ptrdiff_t)a->qs.token, gs = (ptrdiff_t)ba->dos.token;
    const float *qt = s->qt, *dot = s->dot;
    /* S^T: the forward's scores, tile for tile. */
    int j = 0;
    if (s->plain) {
        for (; j + JK_SJ <= n; j += JK_SJ) JK(scores_rows_plain)(JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, NULL);
        if (j < n) JK(scores_plain)(n - j, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
        j = n;
    } else if (D > JK_EXACT_D)
        for (; j + JK_SJ <= n; j += JK_SJ)
            JK(scores_rows)(JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
    for (; j < n; j += JK_SJ)
        JK(scores)(n - j < JK_SJ ? n - j : JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
    JK(bwd_probs)(n, !s->plain, a->scale, st, sl, s->lse);
    /* dP^T = V dO^T as a pair (bwd_ds subtracts Dl from it): exact where Dl is, else compensated */
    j = 0;
    if (s->exact_dp)
        for (; j < n; j += JK_SJ) JK(bwd_dots_exact)
    (n - j < JK_SJ ? n - j : JK_SJ, D, vb + j * vs, vs, dot, dpt + j * JK_QB, dpl + j * JK_QB);
    else if (D > JK_EXACT_D) for (; j + JK_SJ <= n; j += JK_SJ)
        JK(scores_rows)(JK_SJ, D, vb + j * vs, vs, dot, dpt + j * JK_QB, dpl + j * JK_QB);
    for (; j < n; j += JK_SJ)
        JK(scores)(n - j < JK_SJ ? n - j : JK_SJ, D, vb + j * vs, vs, dot, dpt + j * JK_QB, dpl + j * JK_QB);
    if (parts & CPU_BWD_DKV) JK(bwd_outer)(n, s->nq, D, st, s->g, gs, dvb, dvs);
    JK(bwd_ds)(n, a->scale, st, dpt, dpl, s->dl, s->dll);
    if (parts & CPU_BWD_DKV) JK(bwd_outer)(n, s->nq, D, dpt, s->q, qs, dkb, dks);
    if (!(parts & CPU_BWD_DQ)) return;
    if (exact)
        JK(pv_exact)((int)D, n, kb, ks, dpt, one, s->dqt, s->dqtl);
    else {
        int64_t d = 0;
        for (; d + JK_DR <= D; d += JK_DR) JK(pv_rows)(JK_DR, n, kb + d, ks, dpt, one, s->dqt + d * JK_QB);
        if (d < D) JK(pv)((int)(D - d), n, kb + d, ks, dpt, one, s->dqt + d * JK_QB);
    }
}

static void JK(bwd_tile)(const cpu_bwd_args *ba, int64_t b, int64_t h, int64_t q0, int ntile, int64_t kb0, int64_t nkb,
                         int parts, float *ws) {
    const cpu_flash_args *a = &ba->f;
    const int64_t D = a->D;
    const int exact = D <= JK_EXACT_D;
    cpu_key_blocks keys;
    cpu_key_blocks_init(&keys, a, b);
    int64_t rows[JK_BK];
    int n = cpu_key_blocks_next(&keys, JK_BK, rows);
    JK(bwd_state) tile[CPU_GROUP_MAX];
    for (int t = 0; t < ntile; t++) {
        const int64_t tq0 = q0 + (int64_t)t * JK_QB;
        tile[t].nq = (int)(a->Sq - tq0 < JK_QB ? a->Sq - tq0 : JK_QB);
        tile[t].dq = ba->dq + b * ba->dqs.batch + h * ba->dqs.head + tq0 * ba->dqs.token;
        if (n == 0 && (parts & CPU_BWD_DQ)) /* no key to attend: dq rows of +0 */
            for (int i = 0; i < tile[t].nq; i++)
                memset(tile[t].dq + i * ba->dqs.token, 0, (size_t)D * sizeof *tile[t].dq);
    }
    for (int64_t i = 0; i < kb0 && n > 0; i++) n = cpu_key_blocks_next(&keys, JK_BK, rows); /* the range's first */
    if (n == 0) return;
    float *st = ws, *sl = st + (int64_t)JK_BK * JK_QB, *dpt = sl + (int64_t)JK_BK * JK_QB;
    float *dpl = dpt + (int64_t)JK_BK * JK_QB, *one = dpl + (int64_t)JK_BK * JK_QB;
    float *pk = one + JK_QB, *pv = pk + (int64_t)JK_BK * D, *tk = pv + (int64_t)JK_BK * D,
          *tv = tk + (int64_t)JK_BK * D;
    float *state = tv + (int64_t)JK_BK * D;
    const int64_t state_floats = cpu_bwd_tile_state_floats(JK_QB, D);
    for (int i = 0; i < JK_QB; i++) one[i] = 1.0f;

    const ptrdiff_t qs = (ptrdiff_t)a->qs.token, gs = (ptrdiff_t)ba->dos.token;
    for (int t = 0; t < ntile; t++) {
        JK(bwd_state) *s = &tile[t];
        const int64_t tq0 = q0 + (int64_t)t * JK_QB;
        const int nq = s->nq;
        s->qt = state + t * state_floats;
        s->dot = s->qt + D * JK_QB, s->dqt = s->dot + D * JK_QB, s->dqtl = s->dqt + D * JK_QB;
        s->lse = s->dqtl + (exact ? D * JK_QB : 0), s->dl = s->lse + JK_QB, s->dll = s->dl + JK_QB;
        s->q = a->q + b * a->qs.batch + h * a->qs.head + tq0 * a->qs.token;
        s->g = ba->dout + b * ba->dos.batch + h * ba->dos.head + tq0 * ba->dos.token;
        const float *o = ba->out + b * a->os.batch + h * a->os.head + tq0 * a->os.token;
        JK(pack_qt)(nq, D, s->q, qs, s->qt);
        JK(pack_qt)(nq, D, s->g, gs, s->dot);
        /* The forward task's choice of scores kernel, from the same Qt and key norms. */
        const double qk = sqrt(JK(qt_max_norm2)(nq, D, s->qt, s->q, qs) * a->k_norm2[b * a->H + h]);
        s->plain = D > JK_EXACT_D && qk <= JK_PLAIN_QK_MAX && fabs((double)a->scale_log2e) * qk <= JK_PLAIN_LOGIT_BOUND;
        /* Dl_i = dO_i . O_i - dlse_i as a pair (dl, dll): the dot product by the same compensated
         * kernel (one row, lane i of its result) that computes dP, so that with a single key, where
         * the forward's O is that key's v row bit for bit, dP - Dl is exactly 0 as is dS. */
        /* A tile of at most JK_BWD_EXACT_ROWS queries computes dP and Dl keeping every rounding
         * error (bwd_dots_exact, as every tile does at D <= JK_EXACT_D): in a near one-hot row
         * (weight 1 - e on one key) dq and dk are the small differences dP - Dl ~ e |dP|, so the
         * compensated kernel's rounding inside its blocks (~u sqrt(sum of squared partial sums))
         * is a relative error ~u / e of them. Larger tiles keep the compensated kernel: there such
         * rows are a few among many (rel_l2 over the tensor), and the exact dot costs 4 operations
         * per product. */
        s->exact_dp = nq <= JK_BWD_EXACT_ROWS || D <= JK_EXACT_D;
        const int64_t row0 = (b * a->H + h) * a->Sq + tq0;
        for (int i = 0; i < JK_QB; i++) {
            if (i < nq) {
                if (s->exact_dp)
                    JK(bwd_dots_exact)(1, D, o + i * a->os.token, 0, s->dot, dpt, dpl);
                else
                    JK(scores)(1, D, o + i * a->os.token, 0, s->dot, dpt, dpl);
                s->lse[i] = ba->lse[row0 + i];
                /* dlse joins the pair in float64 (hi + lo is exact there), then splits again: in
                 * float32 lo - dlse would round at u |dlse|, an error of every dP - Dl of the row
                 * that a near one-hot row's small dS (~ (1 - P_max) |dP|) cannot absorb. */
                const double dl64 = ((double)dpt[i] + (double)dpl[i]) - (ba->dlse ? (double)ba->dlse[row0 + i] : 0.0);
                s->dl[i] = (float)dl64;
                s->dll[i] = (float)(dl64 - (double)s->dl[i]);
            } else {
                s->lse[i] = INFINITY; /* P = 0 in the lanes past the last query */
                s->dl[i] = s->dll[i] = 0.0f;
            }
        }
        memset(s->dqt, 0, (size_t)(D * JK_QB) * sizeof *s->dqt);
        if (exact) memset(s->dqtl, 0, (size_t)(D * JK_QB) * sizeof *s->dqtl);
    }

    const float *kh = a->k + b * a->ks.batch + h * a->ks.head;
    const float *vh = a->v + b * a->vs.batch + h * a->vs.head;
    float *dkh = ba->dk + b * ba->dks.batch + h * ba->dks.head;
    float *dvh = ba->dv + b * ba->dvs.batch + h * ba->dvs.head;
    int64_t left = nkb;
    for (; n > 0 && left != 0; n = --left != 0 ? cpu_key_blocks_next(&keys, JK_BK, rows) : 0) {
        ptrdiff_t ks = (ptrdiff_t)a->ks.token, vs = (ptrdiff_t)a->vs.token;
        ptrdiff_t dks = (ptrdiff_t)ba->dks.token, dvs = (ptrdiff_t)ba->dvs.token;
        const float *kb = kh + rows[0] * ks, *vb = vh + rows[0] * vs;
        float *dkb = dkh + rows[0] * dks, *dvb = dvh + rows[0] * dvs;
        const int gapped = rows[n - 1] - rows[0] != n - 1;
        if (gapped) {
            JK(pack_rows)(n, rows, D, kh, ks, pk);
            JK(pack_rows)(n, rows, D, vh, vs, pv);
            kb = pk, vb = pv, ks = vs = (ptrdiff_t)D;
            dkb = tk, dvb = tv, dks = dvs = (ptrdiff_t)D;
        }
        /* the next key block's K, V, dK and dV rows (when consecutive: without a mask) requested
         * into L2, a share before each tile */
        const int dkv = (parts & CPU_BWD_DKV) != 0;
        const int64_t nn = keys.mask || left == 1 ? 0 : keys.end - keys.next < JK_BK ? keys.end - keys.next : JK_BK;
        const int64_t next = nn > 0 ? keys.next : 0; /* no pointer past the rows when there is none */
        const float *kn = kh + next * a->ks.token, *vn = vh + next * a->vs.token;
        const float *dkn = dkh + next * ba->dks.token, *dvn = dvh + next * ba->dvs.token;
        for (int t = 0; t < ntile; t++) {
            if (nn > 0) {
                const int64_t r0 = nn * t / ntile, r1 = nn * (t + 1) / ntile;
                JK(prefetch_rows_l2)(r0, r1, D, kn, (ptrdiff_t)a->ks.token);
                JK(prefetch_rows_l2)(r0, r1, D, vn, (ptrdiff_t)a->vs.token);
                if (dkv) JK(prefetch_rows_l2)(r0, r1, D, dkn, (ptrdiff_t)ba->dks.token);
                if (dkv) JK(prefetch_rows_l2)(r0, r1, D, dvn, (ptrdiff_t)ba->dvs.token);
            }
            if (gapped && dkv) { /* each tile's sum alone, added to the rows as in place */
                memset(tk, 0, (size_t)n * (size_t)D * sizeof *tk);
                memset(tv, 0, (size_t)n * (size_t)D * sizeof *tv);
            }
            JK(bwd_block)(ba, &tile[t], n, kb, ks, vb, vs, dkb, dks, dvb, dvs, st, sl, dpt, dpl, one, parts);
            if (gapped && dkv) {
                JK(bwd_scatter_add)(n, rows, D, tk, dkh, (ptrdiff_t)ba->dks.token);
                JK(bwd_scatter_add)(n, rows, D, tv, dvh, (ptrdiff_t)ba->dvs.token);
            }
        }
    }
    if (!(parts & CPU_BWD_DQ)) return;
    for (int t = 0; t < ntile; t++) {
        const JK(bwd_state) *s = &tile[t];
        if (exact)
            for (int i = 0; i < s->nq; i++)
                for (int64_t d = 0; d < D; d++)
                    s->dq[i * ba->dqs.token + d] = s->dqt[d * JK_QB + i] + s->dqtl[d * JK_QB + i];
        else
            JK(write_out)(s->nq, D, s->dqt, one, s->dq, (ptrdiff_t)ba->dqs.token);
    }
}
const cpu_kernels JK_TABLE = {
    JK_ISA,
    JK_KERNEL_NAME,
    JK_VL,
    JK_QB,
    JK_SJ,
    JK_DR,
    JK_BK,
    JK_DB,
    JK(scores),
    JK(scores_plain),
    JK(softmax_block),
    JK(pv),
    JK(pv_exact),
    JK(exp2),
    JK(max_row_norm2),
    JK(task),
    JK_NARROW,
    JK_BWD_KERNEL_NAME,
    JK(bwd_outer),
    JK(bwd_tile),
};
