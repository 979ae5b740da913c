/* The micro-kernels of the cpu backend's flash attention, and the data movement of a task:
 * part of one instruction set's instance, included by cpu_flash_template.h (which documents
 * the vocabulary and the tile constants they are written over). Each kernel's contract is in
 * cpu_kernels.h; the forward (cpu_forward_template.h) and the backward
 * (cpu_backward_template.h) are built from them. */
#ifndef JK_NQV
#error "included by cpu_flash_template.h, which defines what this part needs"
#endif

/* ---- exp2 ------------------------------------------------------------------------------
 * 2^x = 2^n * 2^f, n = round(x), f = x - n in [-1/2, 1/2]; 2^f = e^(f ln2) by its Taylor
 * polynomial of degree 7 (truncation < 2^-27 relative on |f| <= 1/2), Horner in float.
 * x is clamped to [-127, 0] first (so n fits the exponent); results for x < -126 (below FLT_MIN,
 * where the true value would be subnormal) are flushed to 0. exp2v_le0 is the same for callers
 * whose x is <= 0 or NaN (the plain softmax: s - max), without the clamp at 0; a vocabulary
 * whose jv_round and jv_mul_pow2 take any x and n (JK_EXP2_ANY_RANGE: AVX-512's roundscale and
 * scalef) skips the clamp at -127 too: every x below -126 is flushed to 0 all the same, so the
 * bits are those of the clamped function, with two operations fewer on the FMA ports (Intel). */
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

/* q with 2^f = 1 + f q on |f| <= 1/2: the polynomial's terms C1..C7, Horner in float. */
JK_INLINE jv JK(exp2_poly_q)(jv f) {
    jv q = jv_set1((float)JK_C7);
    q = jv_fma(q, f, jv_set1((float)JK_C6));
    q = jv_fma(q, f, jv_set1((float)JK_C5));
    q = jv_fma(q, f, jv_set1((float)JK_C4));
    q = jv_fma(q, f, jv_set1((float)JK_C3));
    q = jv_fma(q, f, jv_set1((float)JK_C2));
    return jv_fma(q, f, jv_set1((float)JK_C1));
}

JK_INLINE jv JK(exp2v_le0)(jv x) {
#ifndef JK_EXP2_ANY_RANGE
    x = jv_max(jv_set1(JK_EXP2_CLAMP), x); /* NaN x stays NaN */
#endif
    const jv n = jv_round(x);
    const jv f = jv_sub(x, n);
    const jv p = jv_fma(JK(exp2_poly_q)(f), f, jv_set1(1.0f));
    return jv_zero_if_below(x, jv_set1(JK_EXP2_FLUSH), jv_mul_pow2(p, n));
}
JK_INLINE jv JK(exp2v)(jv x) { return JK(exp2v_le0)(jv_min(jv_zero(), x)); /* x > 0 (ties of the max) gives 1 */ }

/* 2^(yh + yl) for an unevaluated pair, yh <= 1 or NaN and |yl| <= ulp(yh): the same reduction and
 * polynomial, with yl and the last step kept apart: 2^(f + yl) = (1 + f q)(1 + yl ln2) to u^2, so
 * 1 + (f q + yl ln2 (1 + f q)) with a single rounding of any size: within ~0.8 ulp of the exact
 * value (exp2v of the rounded yh + yl: the rounding of the argument, up to u |yh| relative, plus
 * the polynomial's ~1 ulp). The small-head_dim backward's weights (bwd_probs_exact; yh up to
 * JK_BWD_X_MAX = 1, which the reduction holds for as it does for exp2v_le0's x <= 1). */
JK_INLINE jv JK(exp2v_pair_le0)(jv yh, jv yl) {
#ifndef JK_EXP2_ANY_RANGE
    yh = jv_max(jv_set1(JK_EXP2_CLAMP), yh); /* NaN yh stays NaN */
#endif
    const jv n = jv_round(yh);
    const jv f = jv_sub(yh, n);
    const jv q = JK(exp2_poly_q)(f);
    const jv tail = jv_mul(jv_mul(yl, jv_set1((float)JK_LN2)), jv_fma(f, q, jv_set1(1.0f)));
    const jv p = jv_add(jv_set1(1.0f), jv_fma(f, q, tail));
    return jv_zero_if_below(yh, jv_set1(JK_EXP2_FLUSH), jv_mul_pow2(p, n));
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
 * Same shapes as scores_rows, up to JK_SJP rows. The task runs it instead of the compensated kernel when the
 * a-priori bound of its logits is small (task, below): then the rounding of the plain dot
 * product is no larger than the compensated kernel's on the gate's hardest inputs. */
JK_INLINE void JK(scores_rows_plain)(const int JR, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st,
                                     float *sl) {
    const float *kr[JK_SJP];
    jv c[JK_SJP][JK_NQV];
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
    switch (jr) { JK_EDGE_CASES(JK_SJP, JK_SCORES_PLAIN_CALL) default : break; }
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
 * the key with the largest pair (max_pair; ties: the earlier key, so results stay deterministic), and exp2 gets
 * ((st - m) + (sl - ml)) * c with c = scale * log2(e): st - m is exact for the keys that matter (st near m), the low
 * parts are not lost, and the max key gets exactly 2^0 = 1 (so a single key returns its v row bit for bit). A key
 * whose high part ties the max's but whose low part is larger once took x > 0 (weight clamped to 1: a -10000 key
 * bias, whose logits round to one float, lost its keys' differences); max_pair orders them by the whole pair. With ll
 * (the small-head_dim path) the row sum l is the pair (l + ll), every addition's and the rescale's rounding error kept:
 * a plain float sum of a row's weights errs by ~sqrt(n) u, a common factor of the whole out row that no column averages
 * away (D = 1, 77 keys: 5-10 ulp of out, which a near one-hot row's dq, dk then carry amplified
 * by 1 / (1 - P_max) in the backward). SAFE (a block of a masked call in which some rows' keys are
 * masked out: their st is -inf): a lane whose max is still -inf (every key so far masked) takes its
 * exponents against 0 instead, so that its weights and alpha are 0, not NaN (inf - inf); m stays
 * -inf, so the lane's first attended key later starts it as the first block would. */
#define JK_MAX_CHAINS 4
/* a > b ? a : b (NaN a or b gives b): jv_max where the instruction set's max is exactly that. */
#ifndef JK_MAX_OF
#define JK_MAX_OF(a, b) jv_select_gt((a), (b), (a), (b))
#endif
/* The running max of logit pairs: (m, ml) becomes (h, hl) where the pair is the larger, by its difference
 * (h - m) + (hl - ml) (h - m exact where it decides: Sterbenz), so that keys whose high parts tie (a logit
 * of tens of thousands, e.g. a -10000 key bias, rounds keys a few thousandths apart to one float) are ordered
 * by their low parts; an equal pair keeps the earlier key. -inf h never wins (-inf - -inf is NaN), a NaN h
 * never does (as JK_MAX_OF), and +inf always does. */
JK_INLINE void JK(max_pair)(jv h, jv hl, jv *m, jv *ml) {
    const jv d = jv_add(jv_sub(h, *m), jv_sub(hl, *ml)), zero = jv_zero();
    *ml = jv_select_gt(d, zero, hl, *ml);
    *m = jv_select_gt(d, zero, h, *m);
}

JK_INLINE void JK(softmax_block_lo)(const int LOW, const int PAIR, const int SAFE, int n, float c, float *st,
                                    const float *sl, float *m, float *ml, float *l, float *ll, float *alpha) {
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
                if (LOW)
                    JK(max_pair)(h, jv_load(slo + (ptrdiff_t)(j + ch) * JK_QB), &cm[ch], &cml[ch]);
                else
                    cm[ch] = JK_MAX_OF(h, cm[ch]);
            }
        for (int ch = 0; j < n; j++, ch++) {
            const jv h = jv_load(s + (ptrdiff_t)j * JK_QB);
            if (LOW)
                JK(max_pair)(h, jv_load(slo + (ptrdiff_t)j * JK_QB), &cm[ch], &cml[ch]);
            else
                cm[ch] = JK_MAX_OF(h, cm[ch]);
        }
        jv mx = cm[0], mxl = cml[0];
        JK_UNROLL for (int ch = 1; ch < JK_MAX_CHAINS; ch++) {
            if (LOW)
                JK(max_pair)(cm[ch], cml[ch], &mx, &mxl);
            else
                mx = JK_MAX_OF(cm[ch], mx);
        }
        /* the max the exponents take: mx, or 0 where a SAFE block leaves it -inf (-FLT_MAX > mx only
         * there: a NaN max stays NaN) */
        const jv me = SAFE ? jv_select_gt(jv_set1(-FLT_MAX), mx, jv_zero(), mx) : mx;
        /* without low parts, m_old - mx and h - mx are <= 0 (mx is their max) or NaN, and c > 0 */
        const jv a = LOW ? JK(exp2v)(jv_mul(jv_add(jv_sub(m_old, me), jv_sub(ml_old, mxl)), cv))
                         : JK(exp2v_le0)(jv_mul(jv_sub(m_old, me), cv));
        jv sum = jv_zero(), err = jv_zero();
        for (int j = 0; j < n; j++) {
            const jv h = jv_load(s + (ptrdiff_t)j * JK_QB);
            const jv d = LOW ? jv_add(jv_sub(h, me), jv_sub(jv_load(slo + (ptrdiff_t)j * JK_QB), mxl)) : jv_sub(h, me);
            const jv p = LOW ? JK(exp2v)(jv_mul(d, cv)) : JK(exp2v_le0)(jv_mul(d, cv));
            jv_store(s + (ptrdiff_t)j * JK_QB, p);
            if (PAIR) { /* TwoSum: the addition's rounding error into err */
                const jv t = jv_add(sum, p), bt = jv_sub(t, sum);
                err = jv_add(err, jv_add(jv_sub(sum, jv_sub(t, bt)), jv_sub(p, bt)));
                sum = t;
            } else
                sum = jv_add(sum, p);
        }
        jv_store(alpha + u * JK_VL, a);
        if (PAIR) { /* (l + ll) * a + (sum + err), the product's and the addition's errors kept */
            const jv hi = jv_load(l + u * JK_VL);
            const jv x = jv_mul(hi, a), x_err = jv_fma_exact(hi, a, jv_sub(jv_zero(), x));
            const jv t = jv_add(x, sum), bt = jv_sub(t, x);
            const jv t_err = jv_add(jv_sub(x, jv_sub(t, bt)), jv_sub(sum, bt));
            jv_store(ll + u * JK_VL,
                     jv_nan_to_zero(jv_add(jv_fma(jv_load(ll + u * JK_VL), a, err), jv_add(x_err, t_err))));
            jv_store(l + u * JK_VL, t);
        } else
            jv_store(l + u * JK_VL, jv_fma(jv_load(l + u * JK_VL), a, sum));
        jv_store(m + u * JK_VL, mx);
        jv_store(ml + u * JK_VL, mxl);
    }
}
static void JK(softmax_block)(int n, float c, float *st, const float *sl, float *m, float *ml, float *l, float *ll,
                              float *alpha) {
    if (ll)
        JK(softmax_block_lo)(1, 1, 0, n, c, st, sl, m, ml, l, ll, alpha);
    else
        JK(softmax_block_lo)(1, 0, 0, n, c, st, sl, m, ml, l, NULL, alpha);
}
/* The same for a block whose low parts are all 0 (plain scores, so ml stays 0 too): bit for bit
 * the result of softmax_block with sl = 0, without reading sl. */
static void JK(softmax_block_plain)(int n, float c, float *st, float *m, float *ml, float *l, float *ll, float *alpha) {
    if (ll)
        JK(softmax_block_lo)(0, 1, 0, n, c, st, NULL, m, ml, l, ll, alpha);
    else
        JK(softmax_block_lo)(0, 0, 0, n, c, st, NULL, m, ml, l, NULL, alpha);
}
/* Both for a block with masked-out keys (st -inf there): SAFE (above). */
static void JK(softmax_block_masked)(int n, int low, float c, float *st, const float *sl, float *m, float *ml, float *l,
                                     float *ll, float *alpha) {
    if (!low && ll)
        JK(softmax_block_lo)(0, 1, 1, n, c, st, NULL, m, ml, l, ll, alpha);
    else if (!low)
        JK(softmax_block_lo)(0, 0, 1, n, c, st, NULL, m, ml, l, NULL, alpha);
    else if (ll)
        JK(softmax_block_lo)(1, 1, 1, n, c, st, sl, m, ml, l, ll, alpha);
    else
        JK(softmax_block_lo)(1, 0, 1, n, c, st, sl, m, ml, l, NULL, alpha);
}

/* ---- the key bias and the windows of a masked call (grid mode) -------------------------------
 * add_bias: (st, sl)[j][:] += (bh + bl)[j] for j < n, every lane: the bias in dot-product units
 * (bias / scale as an unevaluated pair, cpu_bias_pair), added by TwoSum so that the logit stays a
 * pair within ~u^2 of scale q.k + bias: the forward's and the backward's scores alike. plain: the
 * block's sl is not written (plain scores): it counts as 0. A non-finite sum leaves sl = 0 (a -inf
 * score stays -inf: weight 0; +inf or NaN make the row NaN). */
static void JK(add_bias)(int n, int plain, float *st, float *sl, const float *bh, const float *bl) {
    for (int j = 0; j < n; j++) {
        const jv b = jv_set1(bh[j]), b_lo = jv_set1(bl[j]);
        JK_UNROLL for (int u = 0; u < JK_NQV; u++) {
            const ptrdiff_t o = (ptrdiff_t)j * JK_QB + u * JK_VL;
            const jv x = jv_load(st + o), t = jv_add(x, b), bt = jv_sub(t, x);
            const jv e = jv_add(jv_sub(x, jv_sub(t, bt)), jv_sub(b, bt));
            const jv lo = plain ? b_lo : jv_add(jv_load(sl + o), b_lo);
            jv_store(sl + o, jv_nan_to_zero(jv_add(lo, e)));
            jv_store(st + o, t);
        }
    }
}

/* The pair (bh + bl)[r] = bias[rows[r]] / scale (the key bias in dot-product units), r < n. */
static void JK(bias_pair)(int n, const int64_t *rows, const float *bias, float scale, float *bh, float *bl) {
    for (int r = 0; r < n; r++) {
        const double x = (double)bias[rows[r]] / (double)scale;
        bh[r] = (float)x;
        bl[r] = isfinite(bh[r]) ? (float)(x - (double)bh[r]) : 0.0f;
    }
}

/* ---- a masked lane must not read a key it does not attend ---------------------------------------
 * In a key block that holds keys past some rows' windows, those rows' weights (forward) and dS
 * (backward) are exactly 0, but 0 times an Inf or NaN in a k or v row they do not attend would still
 * reach them through P V (forward) and dQ += K^T dS (backward). So when such a block's rows hold a
 * non-finite value (rows_nonfinite: one vector test per 16 elements; a rare block), the product
 * runs on a copy with those elements 0 (copy_finite) and the rows that attend the key get the
 * element's product added back (add_nonfinite): the element is then non-finite in exactly the rows
 * that attend its key, and every other element keeps its bits (jattn.h's rule for non-finite
 * inputs, applied to the rows a key reaches). */
static int JK(rows_nonfinite)(int n, int64_t D, const float *x, ptrdiff_t xs) {
    const int64_t Dv = D / JK_VL * JK_VL;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (ptrdiff_t)r * xs;
        jv acc = jv_zero();
        for (int64_t d = 0; d < Dv; d += JK_VL) {
            const jv v = jv_loadu(xr + d);
            acc = jv_add(acc, jv_sub(v, v)); /* x - x: 0, or NaN for Inf and NaN */
        }
        if (jv_any_nan(acc)) return 1;
        for (int64_t d = Dv; d < D; d++)
            if (!isfinite(xr[d])) return 1;
    }
    return 0;
}

static void JK(copy_finite)(int n, int64_t D, const float *x, ptrdiff_t xs, float *out) {
    for (int r = 0; r < n; r++)
        for (int64_t d = 0; d < D; d++) {
            const float e = x[(ptrdiff_t)r * xs + d];
            out[(ptrdiff_t)r * D + d] = isfinite(e) ? e : 0.0f;
        }
}

/* ot[d][i] += x[r][d] * pt[r][i] for each non-finite x[r][d] (r < n) and lane i < nq whose window holds
 * key rows[r] (rows[r] < lane_hi[i]). */
static void JK(add_nonfinite)(int n, const int64_t *rows, int64_t D, const float *x, ptrdiff_t xs, const float *pt,
                              int nq, const int64_t *lane_hi, float *ot) {
    for (int r = 0; r < n; r++)
        for (int64_t d = 0; d < D; d++) {
            const float e = x[(ptrdiff_t)r * xs + d];
            if (isfinite(e)) continue;
            for (int i = 0; i < nq; i++)
                if (rows[r] < lane_hi[i]) ot[d * JK_QB + i] += e * pt[(ptrdiff_t)r * JK_QB + i];
        }
}

/* mask_zero: x[r][i] = 0 where key rows[r] lies past lane i's window (the backward's dS, whose masked
 * elements are 0 times a dP that an Inf or NaN in v may have made NaN). */
static void JK(mask_zero)(int n, const int64_t *rows, int nq, const int64_t *lane_hi, float *x) {
    for (int r = 0; r < n; r++)
        for (int i = 0; i < nq; i++)
            if (rows[r] >= lane_hi[i]) x[(ptrdiff_t)r * JK_QB + i] = 0.0f;
}

/* mask: st[r][i] = -inf, sl[r][i] = 0 where key rows[r] lies past lane i's window (rows[r] >=
 * lane_hi[i]), for r < n, i < nq (the block's keys are all >= every window's start). */
static void JK(mask_block)(int n, const int64_t *rows, int nq, const int64_t *lane_hi, float *st, float *sl) {
    for (int r = 0; r < n; r++) {
        const int64_t j = rows[r];
        float *sr = st + (ptrdiff_t)r * JK_QB, *lr = sl + (ptrdiff_t)r * JK_QB;
        for (int i = 0; i < nq; i++)
            if (j >= lane_hi[i]) sr[i] = -INFINITY, lr[i] = 0.0f;
    }
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

/* write_out_pair: out[i][d] = ot[d][i] / (l + ll)[i], the row sum a pair (softmax_block's): each
 * element within ~0.5 u of that quotient of ot as it stands. The reciprocal as a pair (r + rl), r = 1 / l
 * rounded and rl its correction to 1 / (l + ll) (one Newton step, the residual 1 - l r exact by an FMA),
 * then ot r + ot rl with the product's error kept (an FMA): no error common to the row's elements, which
 * write_out's rounded 1 / l is (up to ~1 u of the row sum's and the reciprocal's rounding, every element
 * alike), and which the backward's Dl = sum(dO O) cannot average away (a near one-hot row amplifies it by
 * 1 / (1 - P_max) in dP - Dl). */
static void JK(write_out_pair)(int nq, int64_t D, const float *ot, const float *l, const float *ll, float *out,
                               ptrdiff_t os) {
    JK_ALIGNED float inv[JK_QB], invl[JK_QB];
    for (int i = 0; i < JK_QB; i++) {
        if (i >= nq) { /* lanes >= nq: never written */
            inv[i] = invl[i] = 0.0f;
            continue;
        }
        const double sum = (double)l[i] + ll[i], r = (double)(1.0f / l[i]);
        inv[i] = (float)r;
        invl[i] = isfinite(sum) && sum != 0.0 ? (float)((1.0 - sum * r) * r) : 0.0f;
    }
    const int64_t Dv = D / JK_VL * JK_VL;
    for (int i0 = 0; i0 < nq; i0 += JK_VL) {
        const int rows = nq - i0 < JK_VL ? nq - i0 : JK_VL;
        const jv iv = jv_load(inv + i0), ivl = jv_load(invl + i0), zero = jv_zero();
        for (int64_t d0 = 0; d0 < Dv; d0 += JK_VL) {
            jv r[JK_VL];
            for (int m = 0; m < JK_VL; m++) {
                const jv o = jv_load(ot + (d0 + m) * JK_QB + i0), p = jv_mul(o, iv);
                r[m] = jv_add(p, jv_nan_to_zero(jv_fma(o, ivl, jv_fma_exact(o, iv, jv_sub(zero, p)))));
            }
            jv_transpose(r);
            for (int j = 0; j < rows; j++) jv_storeu(out + (i0 + j) * os + d0, r[j]);
        }
    }
    for (int i = 0; i < nq; i++)
        for (int64_t d = Dv; d < D; d++) {
            const float o = ot[d * JK_QB + i], p = o * inv[i];
            const float e = fmaf(o, invl[i], fmaf(o, inv[i], -p));
            out[i * os + d] = isfinite(e) ? p + e : p;
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
