/* Each micro-kernel of the cpu backend alone (contracts in src/cpu/cpu_kernels.h), for every
 * instruction set this build and CPU have, against a scalar float64 loop written here, over
 * every edge size of its tile (rows 1..SJ, 1..DR; head_dim and key counts that are no multiple
 * of anything) on fresh random inputs. Rows past the edge must stay untouched. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jattn_internal.h" /* backend.h, cpu/cpu_kernels.h */
#include "harness.h"

#define EPS ((double)FLT_EPSILON / 2) /* unit roundoff of float */
#define SENTINEL 12345.0f

static jt_rng rng;
static double normal(void) { return jt_normal(&rng); }

/* 64-byte aligned, as the kernels' workspace operands are (freed by jattn_free_aligned). */
static float *falloc(size_t n) { return jattn_alloc_aligned(n * sizeof(float)); }

static int check(int ok, const char *isa, const char *what) {
    if (!ok) printf("FAIL %s %s\n", isa, what);
    return ok;
}

typedef void (*scores_fn)(int jr, int64_t D, const float *k, ptrdiff_t ks, const float *qt, float *st, float *sl);

/* st + sl = K Qt. compensated (scores): error within (db + 2) u * sum |terms|, the a-priori bound
 * of the blocked, compensated sum (one block's rounding errors); plain (scores_plain): within
 * (2 D + 2) u * sum |terms| (D roundings, two per term where the FMA is not fused) and sl = 0. */
static int test_scores_kind(const cpu_kernels *k, int jr, int64_t D, int plain) {
    const scores_fn scores = plain ? k->scores_plain : k->scores;
    const double bound = plain ? (double)(2 * D + 2) : (double)(k->db + 2);
    const int QB = k->qb, SJ = plain ? k->sjp : k->sj;
    const ptrdiff_t ks = (ptrdiff_t)D + 3;
    float *qt = falloc((size_t)(D * QB)), *st = falloc((size_t)(SJ * QB)), *sl = falloc((size_t)(SJ * QB));
    float *kk = malloc((size_t)(jr * ks) * sizeof *kk);
    for (int64_t i = 0; i < D * QB; i++) qt[i] = (float)(normal() * 100);
    for (ptrdiff_t i = 0; i < jr * ks; i++) kk[i] = (float)(normal() * 100);
    for (int i = 0; i < SJ * QB; i++) st[i] = sl[i] = SENTINEL;
    scores(jr, D, kk, ks, qt, st, sl);
    int ok = 1;
    for (int j = 0; j < SJ; j++)
        for (int q = 0; q < QB; q++) {
            if (j >= jr) {
                ok &= st[j * QB + q] == SENTINEL && sl[j * QB + q] == SENTINEL;
                continue;
            }
            double ref = 0, mag = 0;
            for (int64_t d = 0; d < D; d++) {
                const double t = (double)kk[j * ks + d] * qt[d * QB + q];
                ref += t, mag += fabs(t);
            }
            const double got = (double)st[j * QB + q] + sl[j * QB + q];
            ok &= fabs(got - ref) <= bound * EPS * mag && (!plain || sl[j * QB + q] == 0.0f);
        }
    char what[96];
    snprintf(what, sizeof what, "%s jr=%d D=%lld", plain ? "scores_plain" : "scores", jr, (long long)D);
    free(kk);
    jattn_free_aligned(qt), jattn_free_aligned(st), jattn_free_aligned(sl);
    return check(ok, k->isa, what);
}

/* max_row_norm2 over n rows (stride xs, rows not aligned) against float64: relative error
 * within (D + VL + 2) u; 0 for no rows; an inf or a NaN element counts as 0 (the result is
 * bit for bit the one with a 0 there); a row of huge values (squares past FLT_MAX) and one of
 * tiny values (squares below FLT_MIN) still count, exactly. */
static int test_max_row_norm2(const cpu_kernels *k, int64_t n, int64_t D) {
    const ptrdiff_t xs = (ptrdiff_t)D + 5;
    float *buf = malloc((size_t)(n * xs + 1) * sizeof *buf), *x = buf + 1;
    for (ptrdiff_t i = 0; i < n * xs; i++) x[i] = (float)(normal() * 10);
    double ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double sq = 0;
        for (int64_t d = 0; d < D; d++) sq += (double)x[i * xs + d] * x[i * xs + d];
        if (sq > ref) ref = sq;
    }
    const double tol = (double)(D + k->vl + 2) * EPS;
    int ok = fabs(k->max_row_norm2(n, D, x, xs) - ref) <= tol * ref;
    if (n > 0) { /* a non-finite element counts as 0: bit for bit the result with a 0 there */
        const int64_t at = (int64_t)(jt_next(&rng) % (uint64_t)n) * xs + (int64_t)(jt_next(&rng) % (uint64_t)D);
        const float keep = x[at];
        x[at] = 0.0f;
        const double with_zero = k->max_row_norm2(n, D, x, xs);
        double want = 0;
        for (int64_t i = 0; i < n; i++) {
            double sq = 0;
            for (int64_t d = 0; d < D; d++) sq += (double)x[i * xs + d] * x[i * xs + d];
            if (sq > want) want = sq;
        }
        ok &= fabs(with_zero - want) <= tol * want;
        const float bad[] = {INFINITY, -INFINITY, NAN};
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            x[at] = bad[b];
            const double got = k->max_row_norm2(n, D, x, xs);
            ok &= memcmp(&got, &with_zero, sizeof got) == 0;
        }
        x[at] = keep;
    }
    if (n > 0) { /* scaled rows: 2^70 (squares overflow float) and 2^-70 (squares underflow) */
        const double scales[] = {0x1p70, 0x1p-70};
        for (size_t sc = 0; sc < 2; sc++) {
            for (ptrdiff_t i = 0; i < n * xs; i++) x[i] = (float)(x[i] * scales[sc]);
            const double want = ref * scales[sc] * scales[sc];
            ok &= fabs(k->max_row_norm2(n, D, x, xs) - want) <= tol * want;
            for (ptrdiff_t i = 0; i < n * xs; i++) x[i] = (float)(x[i] / scales[sc]);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "max_row_norm2 n=%lld D=%lld", (long long)n, (long long)D);
    free(buf);
    return check(ok, k->isa, what);
}

/* A non-finite value in one query lane of Qt (inf, -inf or NaN at one head_dim element): that
 * lane's scores are the float64 dot products (+-inf or NaN) with a finite sl (the compensation
 * is dropped, so a -inf score stays -inf); every other lane is bit for bit the clean run's. */
static int test_scores_nonfinite(const cpu_kernels *k, int jr, int64_t D, float bad) {
    const int QB = k->qb;
    const ptrdiff_t ks = (ptrdiff_t)D;
    const size_t tile = (size_t)(k->sj * QB);
    float *qt = falloc((size_t)(D * QB)), *st = falloc(tile), *sl = falloc(tile), *st0 = falloc(tile),
          *sl0 = falloc(tile);
    float *kk = malloc((size_t)(jr * ks) * sizeof *kk);
    for (int64_t i = 0; i < D * QB; i++) qt[i] = (float)normal();
    for (ptrdiff_t i = 0; i < jr * ks; i++) kk[i] = (float)normal();
    k->scores(jr, D, kk, ks, qt, st0, sl0);
    const int q0 = (int)(jt_next(&rng) % (uint64_t)QB);
    const int64_t d0 = (int64_t)(jt_next(&rng) % (uint64_t)D);
    qt[d0 * QB + q0] = bad;
    k->scores(jr, D, kk, ks, qt, st, sl);
    int ok = 1;
    for (int j = 0; j < jr; j++)
        for (int q = 0; q < QB; q++) {
            const int i = j * QB + q;
            if (q != q0) {
                ok &= memcmp(&st[i], &st0[i], sizeof *st) == 0 && memcmp(&sl[i], &sl0[i], sizeof *sl) == 0;
                continue;
            }
            double ref = 0;
            for (int64_t d = 0; d < D; d++) ref += (double)kk[j * ks + d] * qt[d * QB + q];
            ok &= isfinite(sl[i]) && (isnan(ref) ? isnan(st[i]) : (double)st[i] == ref);
        }
    char what[96];
    snprintf(what, sizeof what, "scores non-finite %g jr=%d D=%lld", (double)bad, jr, (long long)D);
    free(kk);
    jattn_free_aligned(qt), jattn_free_aligned(st), jattn_free_aligned(sl), jattn_free_aligned(st0),
        jattn_free_aligned(sl0);
    return check(ok, k->isa, what);
}

/* The online softmax step against its definition in float64; with pair, l as the pair (l + ll):
 * within 4 u of the float64 sum of the weights it wrote and l0 alpha (plus ~n^2 u^2 l), where
 * the plain sum may err by ~n u l. */
static int test_softmax(const cpu_kernels *k, int n, int fresh, int pair) {
    const int QB = k->qb;
    const float c = 0.125f * 1.4426950408889634f;
    float *st = falloc((size_t)(n * QB)), *sl = falloc((size_t)(n * QB));
    float *m = falloc((size_t)QB), *ml = falloc((size_t)QB), *l = falloc((size_t)QB), *alpha = falloc((size_t)QB);
    float *ll = falloc((size_t)QB);
    float *st0 = malloc((size_t)(n * QB) * sizeof *st0), m0[64], ml0[64], l0[64], ll0[64];
    for (int i = 0; i < n * QB; i++) {
        st[i] = (float)(normal() * 40);
        sl[i] = (float)(normal() * 1e-6 * fabs((double)st[i]));
        st0[i] = st[i];
    }
    for (int q = 0; q < QB; q++) {
        m[q] = fresh ? -INFINITY : (float)(normal() * 40 + 20);
        ml[q] = fresh ? 0.0f : (float)(normal() * 1e-6);
        l[q] = fresh ? 0.0f : (float)(1 + jt_uniform(&rng) * 10);
        ll[q] = fresh ? 0.0f : l[q] * (float)(EPS * (2 * jt_uniform(&rng) - 1));
        m0[q] = m[q], ml0[q] = ml[q], l0[q] = l[q], ll0[q] = ll[q];
    }
    k->softmax_block(n, c, st, sl, m, ml, l, pair ? ll : NULL, alpha);
    int ok = 1;
    for (int q = 0; q < QB; q++) {
        /* the max pair: the largest st; its low part from the same key (any of tied keys) */
        double mx = m0[q];
        for (int j = 0; j < n; j++) mx = fmax(mx, st0[j * QB + q]);
        ok &= (double)m[q] == mx;
        int pair_found = mx == m0[q] && ml[q] == ml0[q];
        for (int j = 0; j < n; j++) pair_found |= st0[j * QB + q] == m[q] && sl[j * QB + q] == ml[q];
        ok &= pair_found;
        const double top = (double)m[q] + ml[q];
        const double a_ref = fresh ? 0.0 : exp2(fmin(0.0, ((double)m0[q] + ml0[q] - top) * c));
        ok &= fabs(alpha[q] - a_ref) <=
              (4 + fabs(log2(a_ref > 0 ? a_ref : 1))) * 2 * EPS * a_ref + (a_ref < 1e-37 ? 1e-37 : 0);
        double sum = 0, written = 0;
        for (int j = 0; j < n; j++) {
            const double x = fmin(0.0, ((double)st0[j * QB + q] + sl[j * QB + q] - top) * c);
            const double p = x < -126 ? 0.0 : exp2(x);
            const double got = st[j * QB + q];
            ok &= fabs(got - p) <= (4 + fabs(x)) * 2 * EPS * p + (x < -125 ? 1.2e-38 : 0);
            sum += p, written += got;
        }
        const double l_ref = l0[q] * a_ref + sum;
        ok &= fabs(l[q] - l_ref) <= (n + 8) * 4 * EPS * l_ref;
        if (pair) { /* the pair against the weights and alpha it computed, summed in float64 */
            const double w_ref = ((double)l0[q] + ll0[q]) * alpha[q] + written;
            ok &= fabs((double)l[q] + ll[q] - w_ref) <= 4 * EPS * w_ref + (double)(n + 4) * (n + 4) * EPS * EPS * w_ref;
        } else
            ok &= ll[q] == ll0[q]; /* not written */
    }
    char what[96];
    snprintf(what, sizeof what, "softmax_block n=%d %s%s", n, fresh ? "first block" : "later block",
             pair ? " pair" : "");
    free(st0);
    jattn_free_aligned(st), jattn_free_aligned(sl), jattn_free_aligned(m), jattn_free_aligned(ml);
    jattn_free_aligned(l), jattn_free_aligned(ll), jattn_free_aligned(alpha);
    return check(ok, k->isa, what);
}

/* ot = alpha ot + V^T Pt over n keys, dr rows; rows >= dr untouched. */
static int test_pv(const cpu_kernels *k, int dr, int n) {
    const int QB = k->qb, DRmax = k->dr;
    const ptrdiff_t vs = DRmax + 5;
    float *pt = falloc((size_t)(n * QB)), *ot = falloc((size_t)(DRmax * QB)), *alpha = falloc((size_t)QB);
    float *v = malloc((size_t)(n * vs) * sizeof *v), *ot0 = malloc((size_t)(DRmax * QB) * sizeof *ot0);
    for (int i = 0; i < n * QB; i++) pt[i] = (float)jt_uniform(&rng);
    for (ptrdiff_t i = 0; i < n * vs; i++) v[i] = (float)normal();
    for (int q = 0; q < QB; q++) alpha[q] = (float)jt_uniform(&rng);
    for (int i = 0; i < DRmax * QB; i++) ot[i] = ot0[i] = i < dr * QB ? (float)normal() : SENTINEL;
    k->pv(dr, n, v, vs, pt, alpha, ot);
    int ok = 1;
    for (int r = 0; r < DRmax; r++)
        for (int q = 0; q < QB; q++) {
            if (r >= dr) {
                ok &= ot[r * QB + q] == SENTINEL;
                continue;
            }
            double ref = (double)ot0[r * QB + q] * alpha[q], mag = fabs(ref);
            for (int j = 0; j < n; j++) {
                const double t = (double)v[j * vs + r] * pt[j * QB + q];
                ref += t, mag += fabs(t);
            }
            ok &= fabs(ot[r * QB + q] - ref) <= (n + 4) * 2 * EPS * mag;
        }
    char what[96];
    snprintf(what, sizeof what, "pv dr=%d n=%d", dr, n);
    free(v), free(ot0);
    jattn_free_aligned(pt), jattn_free_aligned(ot), jattn_free_aligned(alpha);
    return check(ok, k->isa, what);
}

/* (ot + otl) = alpha (ot + otl) + V^T Pt over n keys, dr rows, every rounding error kept: the
 * pair must be within 4 u of the result itself (plain accumulation misses this by ~n u of the
 * terms' magnitude), plus the worst case of the error terms' own sum, ~n^2 u^2 of the terms'
 * magnitude (5 orders below plain accumulation's). Rows >= dr untouched. */
static int test_pv_exact(const cpu_kernels *k, int dr, int n) {
    const int QB = k->qb, rows = dr + 1;
    const ptrdiff_t vs = rows + 5;
    float *pt = falloc((size_t)(n * QB)), *ot = falloc((size_t)(rows * QB)), *otl = falloc((size_t)(rows * QB));
    float *alpha = falloc((size_t)QB);
    float *v = malloc((size_t)(n * vs) * sizeof *v);
    double *ref0 = malloc((size_t)(rows * QB) * sizeof *ref0);
    for (int i = 0; i < n * QB; i++) pt[i] = (float)jt_uniform(&rng);
    for (ptrdiff_t i = 0; i < n * vs; i++) v[i] = (float)normal();
    for (int q = 0; q < QB; q++) alpha[q] = (float)jt_uniform(&rng);
    for (int i = 0; i < rows * QB; i++) {
        ot[i] = i < dr * QB ? (float)normal() : SENTINEL;
        otl[i] = i < dr * QB ? ot[i] * (float)(EPS * (2 * jt_uniform(&rng) - 1)) : SENTINEL;
        ref0[i] = (double)ot[i] + otl[i];
    }
    /* Cancellation: the last key's v makes row r's sum for query 0 nearly 0. */
    if (n > 1)
        for (int r = 0; r < dr; r++) {
            double s = ref0[r * QB] * alpha[0];
            for (int j = 0; j < n - 1; j++) s += (double)v[j * vs + r] * pt[j * QB];
            v[(n - 1) * vs + r] = (float)(-s / pt[(n - 1) * QB]);
        }
    k->pv_exact(dr, n, v, vs, pt, alpha, ot, otl);
    int ok = 1;
    for (int r = 0; r < rows; r++)
        for (int q = 0; q < QB; q++) {
            if (r >= dr) {
                ok &= ot[r * QB + q] == SENTINEL && otl[r * QB + q] == SENTINEL;
                continue;
            }
            double ref = ref0[r * QB + q] * alpha[q], mag = fabs(ref);
            for (int j = 0; j < n; j++) {
                const double t = (double)v[j * vs + r] * pt[j * QB + q];
                ref += t, mag += fabs(t);
            }
            const double got = (double)ot[r * QB + q] + otl[r * QB + q];
            ok &= fabs(got - ref) <= 4 * EPS * fabs(ref) + (double)(n + 4) * (n + 4) * EPS * EPS * mag;
        }
    char what[96];
    snprintf(what, sizeof what, "pv_exact dr=%d n=%d", dr, n);
    free(v), free(ref0);
    jattn_free_aligned(pt), jattn_free_aligned(ot), jattn_free_aligned(otl), jattn_free_aligned(alpha);
    return check(ok, k->isa, what);
}

int main(void) {
    jt_rng_init(&rng, jt_seed());
    /* every table: each instruction set's main table and its narrow tables (short blocks) */
    const cpu_kernels *mains[8], *all[32];
    const int nm = cpu_kernels_available(mains, 8);
    int nk = 0;
    for (int t = 0; t < nm; t++)
        for (const cpu_kernels *k = mains[t]; k && nk < 32; k = k->narrow) all[nk++] = k;
    jt_tally tally = {0};
    static const int64_t dims[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 48, 64, 100, 128, 129, 200, 513};
    for (int t = 0; t < nk; t++) {
        const cpu_kernels *k = all[t];
        for (int jr = 1; jr <= k->sj || jr <= k->sjp; jr++)
            for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
                if (jr <= k->sjp) jt_tally_add(&tally, test_scores_kind(k, jr, dims[di], 1));
                if (jr > k->sj) continue;
                jt_tally_add(&tally, test_scores_kind(k, jr, dims[di], 0));
                const float bad[] = {INFINITY, -INFINITY, NAN};
                for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
                    jt_tally_add(&tally, test_scores_nonfinite(k, jr, dims[di], bad[b]));
            }
        const int64_t nrows[] = {0, 1, 7, 100};
        for (size_t i = 0; i < sizeof nrows / sizeof nrows[0]; i++)
            for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
                jt_tally_add(&tally, test_max_row_norm2(k, nrows[i], dims[di]));
        const int ns[] = {1, 2, 3, 5, 8, k->bk - 1, k->bk};
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int fresh = 0; fresh < 2; fresh++)
                for (int pair = 0; pair < 2; pair++) jt_tally_add(&tally, test_softmax(k, ns[i], fresh, pair));
        const int nv[] = {1, 2, 7, k->bk};
        for (int dr = 1; dr <= k->dr; dr++)
            for (size_t i = 0; i < sizeof nv / sizeof nv[0]; i++) jt_tally_add(&tally, test_pv(k, dr, nv[i]));
        const int exact_dims[] = {1, 2, 3, 16};
        for (size_t di = 0; di < sizeof exact_dims / sizeof exact_dims[0]; di++)
            for (size_t i = 0; i < sizeof nv / sizeof nv[0]; i++)
                jt_tally_add(&tally, test_pv_exact(k, exact_dims[di], nv[i]));
        printf("%s: %s (QB %d, SJ %d, plain SJ %d, DR %d, BK %d)\n", k->isa, k->kernel, k->qb, k->sj, k->sjp, k->dr,
               k->bk);
    }
    return jt_tally_finish(&tally, "test_cpu_kernels");
}
