/* The backward of the cpu backend's flash attention (cpu_kernels.h, bwd_outer and bwd_tile):
 * part of one instruction set's instance, included by cpu_flash_template.h after the
 * micro-kernels (cpu_microkernels_template.h), whose scores and P V it reuses. */
#ifndef JK_NQV
#error "included by cpu_flash_template.h, which defines what this part needs"
#endif

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

/* Query tiles of at most this many queries, and every tile of a call whose gradients have at most
 * JK_BWD_EXACT_CALL_ROWS query rows in all (B H Sq), compute dP exactly (bwd_tile). */
#define JK_BWD_EXACT_ROWS 4
#define JK_BWD_EXACT_CALL_ROWS 32

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
/* The largest exp2 argument a weight takes: 1 (P <= 2). The float32 lse the backward is handed
 * may lie below a near one-hot row's largest logit by up to half its ulp (u |lse| / 2, 2e-6 at
 * |lse| = 50), and that weight is then exp of a small positive x, as the float64 definition
 * exp(c S - lse) has it: clamping it at 1, as the forward's running softmax does for ties of its
 * max, would err by up to that much (16 u at |lse| = 50). The bound keeps a caller's wrong lse
 * from an overflow. exp2v_le0's reduction holds for any x <= 1 (f = x - round(x) in [-1/2, 1/2]). */
#define JK_BWD_X_MAX 1.0f
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
            jv_store(sp, JK(exp2v_le0)(jv_min(jv_set1(JK_BWD_X_MAX), jv_mul(x, l2e))));
        }
    }
}

/* The same for the small-head_dim path (D <= JK_EXACT_D, every tile's dP exact): c S - lse and
 * its product by log2(e) kept as pairs, the exp2 of the pair (exp2v_pair_le0): each weight within
 * ~1 ulp of exp(c S - lse) for the float32 lse, where bwd_probs rounds the difference (u |x|) and
 * its product by the float32 log2(e) (u |x| again) before a 1-2 ulp exp2. At D = 1 a row's dq is
 * a covariance over the keys, sum_j P_j (dP_j - Dl) k_j, whose terms nearly cancel (uniform
 * inputs: dq ~ 1e-3 from terms ~ 1e-2): independent errors of the weights pass into it
 * amplified (rel_l2 of dq 7e-6, 11x its float32 floor, against 2.3e-6 with every weight rounded
 * once from float64; 2.2e-6 here). */
static void JK(bwd_probs_exact)(int n, float c, float *st, const float *sl, const float *lse) {
    const jv cv = jv_set1(c), zero = jv_zero(), xmax = jv_set1(JK_BWD_X_MAX);
    const jv l2e = jv_set1((float)JK_LOG2E), l2e_lo = jv_set1((float)(JK_LOG2E - (double)(float)JK_LOG2E));
    JK_UNROLL for (int u = 0; u < JK_NQV; u++) {
        const jv lv = jv_load(lse + u * JK_VL), nlv = jv_sub(zero, lv);
        for (int j = 0; j < n; j++) {
            float *sp = st + (ptrdiff_t)j * JK_QB + u * JK_VL;
            const jv sv = jv_load(sp), hi = jv_mul(sv, cv);
            const jv lo = jv_fma(jv_load(sl + (ptrdiff_t)j * JK_QB + u * JK_VL), cv,
                                 jv_nan_to_zero(jv_fma_exact(sv, cv, jv_sub(zero, hi))));
            const jv xh = jv_add(hi, nlv), bt = jv_sub(xh, hi); /* TwoSum of hi and -lse */
            const jv xl = jv_add(jv_nan_to_zero(jv_add(jv_sub(hi, jv_sub(xh, bt)), jv_sub(nlv, bt))), lo);
            const jv yh = jv_mul(xh, l2e);
            const jv yl =
                jv_nan_to_zero(jv_add(jv_fma_exact(xh, l2e, jv_sub(zero, yh)), jv_fma(xh, l2e_lo, jv_mul(xl, l2e))));
            jv_store(sp, JK(exp2v_pair_le0)(jv_min(xmax, yh), jv_select_gt(yh, xmax, zero, yl)));
        }
    }
}

/* ---- bwd_dots_exact: dpt[j][q] + dpl[j][q] = x[j][:] . yt[:][q] for j < jr ----------------
 * reads x rows j < jr (D floats each, row stride xs), yt [D][QB]; writes dpt, dpl [jr][QB].
 * The dP and Dl of the small query tiles (bwd_tile) and of the dominant elements: v . dO is a sum
 * of terms of both signs whose partial sums fall below the next term, and dS = P (dP - Dl) of a near
 * one-hot row is the small difference of two such sums, so the sum keeps its digits: each product of
 * two floats is exact in float64, the sum runs in float64 (d ascending, one rounding of 2^-53 per
 * addition), and the result splits into the pair hi = round(s), lo = round(s - hi). Every lane of
 * every call does exactly these operations on its two factors (bwd_dl_exact too), so that with a
 * single key, where O is that key's v row bit for bit, dP - Dl is exactly 0. A non-finite term
 * leaves lo NaN: it is dropped, hi carries the inf. Two float64 FMAs per product and vector (the
 * float32 TwoSum pair it replaced took nine operations): the backward of a small call and of head
 * dims <= 16 take this path for every tile. */
#define JK_DOTS_EXACT_KEYS 4 /* keys whose sums run side by side */
static inline void JK(bwd_dots_split)(jd a0, jd a1, float *hi, float *lo) {
    const jv h = jv_of_jd(a0, a1);
    jv_store(hi, h);
    jv_store(lo, jv_nan_to_zero(jv_of_jd(jd_sub(a0, jd_lo(h)), jd_sub(a1, jd_hi(h)))));
}

static inline void JK(bwd_dots_exact_keys)(const int jn, int64_t D, const float *x, ptrdiff_t xs, const float *yt,
                                           float *dpt, float *dpl, int v) {
    jd acc[JK_DOTS_EXACT_KEYS][2];
    JK_UNROLL for (int j = 0; j < jn; j++) acc[j][0] = acc[j][1] = jd_zero();
    for (int64_t d = 0; d < D; d++) {
        const jv y = jv_load(yt + d * JK_QB + v * JK_VL);
        const jd y0 = jd_lo(y), y1 = jd_hi(y);
        JK_UNROLL for (int j = 0; j < jn; j++) {
            const jd b = jd_set1((double)x[j * xs + d]);
            acc[j][0] = jd_fma(b, y0, acc[j][0]);
            acc[j][1] = jd_fma(b, y1, acc[j][1]);
        }
    }
    JK_UNROLL for (int j = 0; j < jn; j++)
        JK(bwd_dots_split)(acc[j][0], acc[j][1], dpt + j * JK_QB + v * JK_VL, dpl + j * JK_QB + v * JK_VL);
}

static void JK(bwd_dots_exact)(int jr, int64_t D, const float *x, ptrdiff_t xs, const float *yt, float *dpt,
                               float *dpl) {
    for (int v = 0; v < JK_NQV; v++) {
        int j = 0;
        for (; j + JK_DOTS_EXACT_KEYS <= jr; j += JK_DOTS_EXACT_KEYS)
            JK(bwd_dots_exact_keys)(JK_DOTS_EXACT_KEYS, D, x + j * xs, xs, yt, dpt + j * JK_QB, dpl + j * JK_QB, v);
        for (; j < jr; j++) JK(bwd_dots_exact_keys)(1, D, x + j * xs, xs, yt, dpt + j * JK_QB, dpl + j * JK_QB, v);
    }
}

/* ---- bwd_dl_exact: dlt[q] + dll[q] = ot[:][q] . dot[:][q] for every lane q ---------------------
 * reads ot, dot [D][QB] (ot: the tile's O^T, pack_qt); writes dlt, dll [QB]. Dl of the tiles that
 * take it exactly (bwd_tile): lane q is, operation for operation, lane q of bwd_dots_exact(1, D,
 * o_q, 0, dot, ...) (the product o_q[d] dot[d][q] in float64, the float64 sum d ascending, the same
 * split), so the bits are that call's, at 1/QB of its work. */
static void JK(bwd_dl_exact)(int64_t D, const float *ot, const float *dot, float *dlt, float *dll) {
    jd acc[JK_NQV][2];
    JK_UNROLL for (int v = 0; v < JK_NQV; v++) acc[v][0] = acc[v][1] = jd_zero();
    for (int64_t d = 0; d < D; d++) /* the vectors' sums side by side, each in its own order */
        JK_UNROLL for (int v = 0; v < JK_NQV; v++) {
            const jv o = jv_load(ot + d * JK_QB + v * JK_VL), y = jv_load(dot + d * JK_QB + v * JK_VL);
            acc[v][0] = jd_fma(jd_lo(o), jd_lo(y), acc[v][0]);
            acc[v][1] = jd_fma(jd_hi(o), jd_hi(y), acc[v][1]);
        }
    JK_UNROLL for (int v = 0; v < JK_NQV; v++)
        JK(bwd_dots_split)(acc[v][0], acc[v][1], dlt + v * JK_VL, dll + v * JK_VL);
}

/* ---- bwd_dp_dominant: the elements of dP whose weight is over 1/2, exact (grid mode) -------------
 * In a row whose weight sits mostly on one key (P > 1/2: at most one key a row), dq and dk are the
 * small differences dP - Dl ~ (1 - P) |dP| of that key, so the compensated kernel's rounding of its dP
 * is a relative error ~u / (1 - P) of them; and where a key bias makes most rows of a call near
 * one-hot on the same key (a text encoder's bias: every row of the batch), nothing averages it away
 * (MQA with a per-batch bias, uniform inputs: dq 4.8x the float32 floor). Those few elements (rows j
 * of the block with a lane over 1/2) take bwd_dots_exact, as Dl does in grid mode, so that with a
 * single key dP - Dl is still exactly 0. Reads v rows j < n, dot [D][QB], pt [n][QB]; rewrites dpt, dpl
 * there. */
static void JK(bwd_dp_dominant)(int n, int64_t D, const float *v, ptrdiff_t vs, const float *dot, const float *pt,
                                float *dpt, float *dpl) {
    const jv half = jv_set1(0.5f), nan = jv_set1(NAN), zero = jv_zero();
    for (int j = 0; j < n; j++) {
        jv flag = zero;
        JK_UNROLL for (int u = 0; u < JK_NQV; u++) flag =
            jv_add(flag, jv_select_gt(jv_load(pt + (ptrdiff_t)j * JK_QB + u * JK_VL), half, nan, zero));
        if (!jv_any_nan(flag)) continue;
        JK_ALIGNED float t[JK_QB], l[JK_QB];
        JK(bwd_dots_exact)(1, D, v + (ptrdiff_t)j * vs, 0, dot, t, l);
        for (int i = 0; i < JK_QB; i++)
            if (pt[(ptrdiff_t)j * JK_QB + i] > 0.5f)
                dpt[(ptrdiff_t)j * JK_QB + i] = t[i], dpl[(ptrdiff_t)j * JK_QB + i] = l[i];
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

/* ---- outer_columns: y[j][c] += sum_q pt[j][q] x[q][c] for j < JR, c < NC, in float64 --------------
 * Head_dim columns past the last vector: each (key, column) sum over q in order in float64 (every
 * product of two floats exact there), rounded once into y; the JR x NC sums side by side. */
#define JK_TAIL_COLUMNS 4
JK_INLINE void JK(outer_columns)(const int JR, const int NC, int nq, const float *pt, const float *x, ptrdiff_t xs,
                                 float *y, ptrdiff_t ys) {
    double acc[JK_GK][JK_TAIL_COLUMNS];
    JK_UNROLL for (int j = 0; j < JR; j++) JK_UNROLL for (int c = 0; c < NC; c++) acc[j][c] = 0.0;
    for (int q = 0; q < nq; q++) {
        double xv[JK_TAIL_COLUMNS];
        JK_UNROLL for (int c = 0; c < NC; c++) xv[c] = (double)x[(ptrdiff_t)q * xs + c];
        JK_UNROLL for (int j = 0; j < JR; j++) {
            const double p = (double)pt[(ptrdiff_t)j * JK_QB + q];
            JK_UNROLL for (int c = 0; c < NC; c++) acc[j][c] += p * xv[c];
        }
    }
    JK_UNROLL for (int j = 0; j < JR; j++) JK_UNROLL for (int c = 0; c < NC; c++) y[(ptrdiff_t)j * ys + c] +=
        (float)acc[j][c];
}

/* The whole key block: every n keys, every head_dim column D (full tiles, then one vector at a
 * time, then the columns past the last whole vector in float64, 4 at a time, in the same q order). */
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
        int64_t d = Dv;
        for (; d + JK_TAIL_COLUMNS <= D; d += JK_TAIL_COLUMNS) {
#define JK_OUTER_CALL(N) JK(outer_columns)(N, JK_TAIL_COLUMNS, nq, pj, x + d, xs, yj + d, ys)
            switch (jr) { JK_EDGE_CASES(JK_GK, JK_OUTER_CALL) default : break; }
#undef JK_OUTER_CALL
        }
        for (; d < D; d++) {
#define JK_OUTER_CALL(N) JK(outer_columns)(N, 1, nq, pj, x + d, xs, yj + d, ys)
            switch (jr) { JK_EDGE_CASES(JK_GK, JK_OUTER_CALL) default : break; }
#undef JK_OUTER_CALL
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

/* ---- bwd_tile: ntile (1..CPU_GROUP_MAX) query tiles of at most QB queries of (b, h) (the forward's
 * query blocks) against all their keys, the tiles walking the key blocks together: for each key
 * block, every tile in ascending order. The K and V rows of a key block and its dk, dv rows are
 * then read from memory or L3 once per group and reused from L2 by its other tiles, where a lone
 * tile streams all of the head's K, V, dK and dV (4 x 2.4 MB at S = 4608, D = 128).
 * Each tile's arithmetic is exactly the lone tile's, and the dk, dv rows still receive the tiles'
 * sums one by one in ascending tile order, so the bits do not depend on the group size.
 * reads  q, out, dout rows [B, H, Sq, D] of the tiles, lse, dlse [B, H, Sq], and the k, v rows
 *        [B, Hkv, Skv, D] of key/value head hk = h / (H / Hkv) that the tiles attend (no other);
 * writes the tiles' dq rows [B, H, Sq, D] (parts & CPU_BWD_DQ; +0 for a row attending no key);
 *        adds into the dk, dv rows [B, Hkv, Skv, D] of hk of every attended key (parts &
 *        CPU_BWD_DKV; the driver zeroes them first, and sums the group's query heads in order).
 * Masks as the forward's task (cpu_forward_template.h): the same key blocks, bias and -inf scores,
 * so S is the forward's bit for bit; a masked score gives P = 0 and dS = 0. In grid mode a row
 * whose lse is -inf (the forward's answer for a row with no key) takes P = 0 everywhere.
 * Workspace: cpu_bwd_workspace_layout (cpu_kernels.h). */
typedef struct JK(bwd_state) {
    float *qt, *dot, *dqt, *dqtl, *lse, *dl, *dll;
    const float *q, *g; /* the tile's q and dout rows */
    float *dq;
    int64_t q0;
    int nq, plain, exact_dp;
    int64_t ilo, ihi, min_hi; /* grid mode: as the forward's fwd_block */
    int64_t lane_hi[JK_QB];
} JK(bwd_state);

/* One tile against one key block (n rows kb, vb at strides ks, vs; its dk, dv rows dkb, dvb; bh, bl
 * and rows as the forward's task_block). */
static void JK(bwd_block)(const cpu_bwd_args *ba, const JK(bwd_state) * s, int n, const float *kb, ptrdiff_t ks,
                          const float *vb, ptrdiff_t vs, float *dkb, ptrdiff_t dks, float *dvb, ptrdiff_t dvs,
                          float *st, float *sl, float *dpt, float *dpl, const float *one, int parts, const float *bh,
                          const float *bl, const int64_t *rows, float *pz) {
    const cpu_flash_args *a = &ba->f;
    const int64_t D = a->D;
    const int exact = D <= JK_EXACT_D;
    const ptrdiff_t qs = (ptrdiff_t)a->qs.token, gs = (ptrdiff_t)ba->dos.token;
    const float *qt = s->qt, *dot = s->dot;
    /* S^T: the forward's scores, tile for tile. */
    int j = 0;
    if (s->plain) {
        for (; j + JK_SJP <= n; j += JK_SJP)
            JK(scores_rows_plain)(JK_SJP, D, kb + j * ks, ks, qt, st + j * JK_QB, NULL);
        if (j < n) JK(scores_plain)(n - j, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
        j = n;
    } else if (D > JK_EXACT_D)
        for (; j + JK_SJ <= n; j += JK_SJ)
            JK(scores_rows)(JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
    for (; j < n; j += JK_SJ)
        JK(scores)(n - j < JK_SJ ? n - j : JK_SJ, D, kb + j * ks, ks, qt, st + j * JK_QB, sl + j * JK_QB);
    if (bh) JK(add_bias)(n, s->plain, st, sl, bh, bl);
    if (rows) JK(mask_block)(n, rows, s->nq, s->lane_hi, st, sl);
    if (exact)
        JK(bwd_probs_exact)(n, a->scale, st, sl, s->lse);
    else
        JK(bwd_probs)(n, !s->plain || bh, a->scale, st, sl, s->lse);
    /* dP^T = V dO^T as a pair (bwd_ds subtracts Dl from it): exact where Dl is, else compensated */
    j = 0;
    if (s->exact_dp)
        for (; j < n; j += JK_SJ) JK(bwd_dots_exact)
    (n - j < JK_SJ ? n - j : JK_SJ, D, vb + j * vs, vs, dot, dpt + j * JK_QB, dpl + j * JK_QB);
    else if (D > JK_EXACT_D) for (; j + JK_SJ <= n; j += JK_SJ)
        JK(scores_rows)(JK_SJ, D, vb + j * vs, vs, dot, dpt + j * JK_QB, dpl + j * JK_QB);
    for (; j < n; j += JK_SJ)
        JK(scores)(n - j < JK_SJ ? n - j : JK_SJ, D, vb + j * vs, vs, dot, dpt + j * JK_QB, dpl + j * JK_QB);
    if (a->grid && !s->exact_dp) JK(bwd_dp_dominant)(n, D, vb, vs, dot, st, dpt, dpl);
    if (parts & CPU_BWD_DKV) JK(bwd_outer)(n, s->nq, D, st, s->g, gs, dvb, dvs);
    JK(bwd_ds)(n, a->scale, st, dpt, dpl, s->dl, s->dll);
    if (rows) JK(mask_zero)(n, rows, s->nq, s->lane_hi, dpt); /* 0, not 0 times a dP that v made NaN */
    if (parts & CPU_BWD_DKV) JK(bwd_outer)(n, s->nq, D, dpt, s->q, qs, dkb, dks);
    if (!(parts & CPU_BWD_DQ)) return;
    const float *kq = kb; /* K rows as dQ reads them: with Inf and NaN as 0 where a masked row would read them */
    ptrdiff_t kqs = ks;
    const int fix = rows && JK(rows_nonfinite)(n, D, kb, ks);
    if (fix) {
        JK(copy_finite)(n, D, kb, ks, pz);
        kq = pz, kqs = (ptrdiff_t)D;
    }
    if (exact)
        JK(pv_exact)((int)D, n, kq, kqs, dpt, one, s->dqt, s->dqtl);
    else {
        int64_t d = 0;
        for (; d + JK_DR <= D; d += JK_DR) JK(pv_rows)(JK_DR, n, kq + d, kqs, dpt, one, s->dqt + d * JK_QB);
        if (d < D) JK(pv)((int)(D - d), n, kq + d, kqs, dpt, one, s->dqt + d * JK_QB);
    }
    if (fix) JK(add_nonfinite)(n, rows, D, kb, ks, dpt, s->nq, s->lane_hi, s->dqt);
}

/* The walk state of a group: the key block in hand and where the tiles' rows are. */
typedef struct JK(bwd_walk) {
    const cpu_bwd_args *ba;
    JK(bwd_state) * tile;
    const float *kh, *vh;
    float *dkh, *dvh;
    float *st, *sl, *dpt, *dpl, *one, *pk, *pv, *tk, *tv, *pz;
    int parts;
} JK(bwd_walk);

/* The tiles [t0, t1) against one key block: n rows (ascending) of keys; nn > 0: the next block's
 * rows [next, next + nn) are consecutive (requested into L2, a share before each tile); bias: the
 * bias row of (b, h) or NULL (grid mode); grid: each tile takes the rows below its ihi. */
static void JK(bwd_key_block)(const JK(bwd_walk) * w, int t0, int t1, int n, const int64_t *rows, int64_t next,
                              int64_t nn, const float *bias, int grid) {
    const cpu_bwd_args *ba = w->ba;
    const cpu_flash_args *a = &ba->f;
    const int64_t D = a->D;
    ptrdiff_t ks = (ptrdiff_t)a->ks.token, vs = (ptrdiff_t)a->vs.token;
    ptrdiff_t dks = (ptrdiff_t)ba->dks.token, dvs = (ptrdiff_t)ba->dvs.token;
    const float *kb = w->kh + rows[0] * ks, *vb = w->vh + rows[0] * vs;
    float *dkb = w->dkh + rows[0] * dks, *dvb = w->dvh + rows[0] * dvs;
    const int gapped = rows[n - 1] - rows[0] != n - 1;
    if (gapped) {
        JK(pack_rows)(n, rows, D, w->kh, ks, w->pk);
        JK(pack_rows)(n, rows, D, w->vh, vs, w->pv);
        kb = w->pk, vb = w->pv, ks = vs = (ptrdiff_t)D;
        dkb = w->tk, dvb = w->tv, dks = dvs = (ptrdiff_t)D;
    }
    JK_ALIGNED float bh[JK_BK], bl[JK_BK];
    if (bias) JK(bias_pair)(n, rows, bias, a->scale, bh, bl);
    const int dkv = (w->parts & CPU_BWD_DKV) != 0;
    const float *kn = w->kh + next * a->ks.token, *vn = w->vh + next * a->vs.token;
    const float *dkn = w->dkh + next * ba->dks.token, *dvn = w->dvh + next * ba->dvs.token;
    for (int t = t0; t < t1; t++) {
        const JK(bwd_state) *s = &w->tile[t];
        if (nn > 0) {
            const int64_t r0 = nn * (t - t0) / (t1 - t0), r1 = nn * (t - t0 + 1) / (t1 - t0);
            JK(prefetch_rows_l2)(r0, r1, D, kn, (ptrdiff_t)a->ks.token);
            JK(prefetch_rows_l2)(r0, r1, D, vn, (ptrdiff_t)a->vs.token);
            if (dkv) JK(prefetch_rows_l2)(r0, r1, D, dkn, (ptrdiff_t)ba->dks.token);
            if (dkv) JK(prefetch_rows_l2)(r0, r1, D, dvn, (ptrdiff_t)ba->dvs.token);
        }
        int ng = n; /* grid mode: the tile's keys are those below its ihi, a prefix */
        if (grid)
            while (ng > 0 && rows[ng - 1] >= s->ihi) ng--;
        if (ng == 0) continue;
        if (gapped && dkv) { /* each tile's sum alone, added to the rows as in place */
            memset(w->tk, 0, (size_t)ng * (size_t)D * sizeof *w->tk);
            memset(w->tv, 0, (size_t)ng * (size_t)D * sizeof *w->tv);
        }
        const int64_t *masked = grid && rows[ng - 1] >= s->min_hi ? rows : NULL;
        JK(bwd_block)
        (ba, s, ng, kb, ks, vb, vs, dkb, dks, dvb, dvs, w->st, w->sl, w->dpt, w->dpl, w->one, w->parts,
         bias ? bh : NULL, bias ? bl : NULL, masked, w->pz);
        if (gapped && dkv) {
            JK(bwd_scatter_add)(ng, rows, D, w->tk, w->dkh, (ptrdiff_t)ba->dks.token);
            JK(bwd_scatter_add)(ng, rows, D, w->tv, w->dvh, (ptrdiff_t)ba->dvs.token);
        }
    }
}

static void JK(bwd_tile)(const cpu_bwd_args *ba, int64_t b, int64_t h, const cpu_qblock *tiles, int ntile, int64_t j0,
                         int64_t j1, int parts, float *ws) {
    const cpu_flash_args *a = &ba->f;
    const int64_t D = a->D;
    const int exact = D <= JK_EXACT_D;
    const int64_t hk = cpu_kv_head(a, h);
    cpu_key_blocks keys;
    int64_t rows[JK_BK];
    int n = 0;
    JK(bwd_state) tile[CPU_GROUP_MAX];
    for (int t = 0; t < ntile; t++) {
        JK(bwd_state) *s = &tile[t];
        s->q0 = tiles[t].q0;
        s->nq = tiles[t].nq;
        s->dq = ba->dq + b * ba->dqs.batch + h * ba->dqs.head + s->q0 * ba->dqs.token;
        if (a->grid) cpu_query_windows(a, b, s->q0, s->nq, s->lane_hi, &s->ilo, &s->ihi);
    }
    if (!a->grid) {
        cpu_key_blocks_init(&keys, a, b);
        n = cpu_key_blocks_next(&keys, JK_BK, rows);
        if (n == 0 && (parts & CPU_BWD_DQ)) /* no key to attend: dq rows of +0 */
            for (int t = 0; t < ntile; t++)
                for (int i = 0; i < tile[t].nq; i++)
                    memset(tile[t].dq + i * ba->dqs.token, 0, (size_t)D * sizeof *tile[t].dq);
        while (n > 0 && rows[0] < j0) n = cpu_key_blocks_next(&keys, JK_BK, rows); /* the range's first */
        if (n == 0 || rows[0] >= j1) return;
    }
    const cpu_bwd_layout w = cpu_bwd_workspace_layout(JK_QB, JK_BK, D, ntile, a->grid);
    JK(bwd_walk) wk;
    memset(&wk, 0, sizeof wk);
    wk.ba = ba, wk.tile = tile, wk.parts = parts;
    wk.st = ws + w.st, wk.sl = ws + w.sl, wk.dpt = ws + w.dpt, wk.dpl = ws + w.dpl, wk.one = ws + w.one;
    wk.pk = ws + w.pk, wk.pv = ws + w.pv, wk.tk = ws + w.tk, wk.tv = ws + w.tv;
    wk.pz = a->grid ? ws + w.pz : NULL; /* grid mode: a masked block's K rows with Inf and NaN as 0 */
    float *one = wk.one, *dpt = wk.dpt, *dpl = wk.dpl;
    for (int i = 0; i < JK_QB; i++) one[i] = 1.0f;

    const ptrdiff_t qs = (ptrdiff_t)a->qs.token, gs = (ptrdiff_t)ba->dos.token;
    for (int t = 0; t < ntile; t++) {
        JK(bwd_state) *s = &tile[t];
        const int64_t tq0 = s->q0;
        const int nq = s->nq;
        float *state = ws + w.tile + t * w.tile_floats;
        s->qt = state + w.qt, s->dot = state + w.dot, s->dqt = state + w.dqt, s->dqtl = state + w.dqtl;
        s->lse = state + w.lse, s->dl = state + w.dl, s->dll = state + w.dll;
        s->q = a->q + b * a->qs.batch + h * a->qs.head + tq0 * a->qs.token;
        s->g = ba->dout + b * ba->dos.batch + h * ba->dos.head + tq0 * ba->dos.token;
        const float *o = ba->out + b * a->os.batch + h * a->os.head + tq0 * a->os.token;
        JK(pack_qt)(nq, D, s->q, qs, s->qt);
        JK(pack_qt)(nq, D, s->g, gs, s->dot);
        /* The forward task's choice of scores kernel, from the same Qt and key norms. */
        const double kn = a->grid ? JK(walked_key_norm2)(a, b, h, s->ilo, s->ihi) : a->k_norm2[b * a->Hkv + hk];
        const double qk = sqrt(JK(qt_max_norm2)(nq, D, s->qt, s->q, qs) * kn);
        s->plain = D > JK_EXACT_D && qk <= JK_PLAIN_QK_MAX && fabs((double)a->scale_log2e) * qk <= JK_PLAIN_LOGIT_BOUND;
        s->min_hi = s->ihi;
        if (a->grid)
            for (int i = 0; i < nq; i++) s->min_hi = s->lane_hi[i] < s->min_hi ? s->lane_hi[i] : s->min_hi;
        /* Dl_i = dO_i . O_i - dlse_i as a pair (dl, dll): the dot product by the same compensated
         * kernel (one row, lane i of its result; for the exact one, bwd_dl_exact gives those bits
         * for every lane at once) that computes dP, so that with a single key, where the forward's
         * O is that key's v row bit for bit, dP - Dl is exactly 0 as is dS. */
        /* A tile of at most JK_BWD_EXACT_ROWS queries computes dP and Dl keeping every rounding
         * error (bwd_dots_exact, as every tile does at D <= JK_EXACT_D): in a near one-hot row
         * (weight 1 - e on one key) dq and dk are the small differences dP - Dl ~ e |dP|, so the
         * compensated kernel's rounding inside its blocks (~u sqrt(sum of squared partial sums))
         * is a relative error ~u / e of them. Larger tiles keep the compensated kernel: there such
         * rows are a few among many (rel_l2 over the tensor), and the exact dot costs more than
         * the compensated kernel (with the float32 TwoSum dot it had before the float64 one, the
         * whole backward took 2.3x the time at (1,10,4096,77,64) and (1,4,1536,128)),
         * unless the call's rows are few in all: at (1,2,8,8,128) or (1,1,12,8,128), peaky or
         * large, the compensated dP put dq, dk 4.7-5.6x past the float32 floor in about 1 in 200
         * draws (no miss in 200 at 32 to 256 rows of 8 or 16 keys). */
        s->exact_dp = nq <= JK_BWD_EXACT_ROWS || D <= JK_EXACT_D || a->B * a->H * a->Sq <= JK_BWD_EXACT_CALL_ROWS;
        const int64_t row0 = (b * a->H + h) * a->Sq + tq0;
        const int dl_exact = s->exact_dp || a->grid; /* grid mode: exact, as the dominant dP (bwd_dp_dominant) */
        if (dl_exact) { /* every lane at once from O^T, held in dqt until its zeroing below */
            JK(pack_qt)(nq, D, o, (ptrdiff_t)a->os.token, s->dqt);
            JK(bwd_dl_exact)(D, s->dqt, s->dot, dpt, dpl);
        }
        for (int i = 0; i < JK_QB; i++) {
            if (i < nq) {
                if (!dl_exact) JK(scores)(1, D, o + i * a->os.token, 0, s->dot, dpt, dpl);
                s->lse[i] = ba->lse[row0 + i];
                /* grid mode: a row with no key (its lse -inf) takes P = 0, not exp(-inf + inf) */
                if (a->grid && s->lse[i] == -INFINITY) s->lse[i] = INFINITY;
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

    wk.kh = a->k + b * a->ks.batch + hk * a->ks.head;
    wk.vh = a->v + b * a->vs.batch + hk * a->vs.head;
    wk.dkh = ba->dk + b * ba->dks.batch + hk * ba->dks.head;
    wk.dvh = ba->dv + b * ba->dvs.batch + hk * ba->dvs.head;
    if (!a->grid)
        for (; n > 0 && rows[0] < j1; n = cpu_key_blocks_next(&keys, JK_BK, rows)) {
            /* the next key block's K, V, dK and dV rows (when consecutive: without a mask, and in
             * the range) requested into L2, a share before each tile */
            int64_t nn = keys.mask || keys.next >= j1 ? 0 : keys.end - keys.next < JK_BK ? keys.end - keys.next : JK_BK;
            JK(bwd_key_block)(&wk, 0, ntile, n, rows, nn > 0 ? keys.next : 0, nn, NULL, 0);
        }
    else {
        const float *bias = cpu_bias_row(a, b, h);
        for (int t0 = 0, t1; t0 < ntile; t0 = t1) { /* tiles sharing a window start walk its cells together */
            const int64_t ilo = tile[t0].ilo;
            int64_t top = tile[t0].ihi;
            for (t1 = t0 + 1; t1 < ntile && tile[t1].ilo == ilo; t1++)
                if (tile[t1].ihi > top) top = tile[t1].ihi;
            /* the cells whose first key is in [j0, j1) */
            const int64_t from = j0 <= ilo ? ilo : ilo + (j0 - ilo + JK_BK - 1) / JK_BK * JK_BK;
            if (j1 < top) top = j1;
            if (top <= from) continue;
            cpu_key_blocks_init_grid(&keys, a, b, h, from, top, JK_BK);
            for (n = cpu_key_blocks_next(&keys, JK_BK, rows); n > 0; n = cpu_key_blocks_next(&keys, JK_BK, rows)) {
                const int64_t nn = keys.mask ? 0 : keys.end - keys.next < JK_BK ? keys.end - keys.next : JK_BK;
                JK(bwd_key_block)(&wk, t0, t1, n, rows, nn > 0 ? keys.next : 0, nn, bias, 1);
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
