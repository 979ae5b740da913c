/* Numerics at the edges of float32, one backend against the float64 reference.
 *
 * usage: test_edges BACKEND   (a jattn_backend_name); exits 77 (skipped) when the backend is absent.
 *
 * Every case draws fresh inputs (seed printed; JATTN_TEST_SEED replays), poisons the outputs,
 * and checks every element. The cases, and why each is built the way it is:
 *
 * large_logits_ties, large_logits_graded — logits up to +-1e4.
 *   softmax is well conditioned only in the sense that an error delta in a logit moves the
 *   output by about delta * |v|. A float32 logit of magnitude 1e4 computed from generic inputs
 *   carries a rounding error near 1e4 * 2^-24 = 6e-4, so generic random inputs at this scale
 *   would fail the f32 gate (max_abs 1e-5) through no fault of the max subtraction whenever two
 *   top logits are within a few units of each other. The inputs are therefore built so that
 *   every logit is exact in float32 whatever the summation order: q and k hold small integers,
 *   D = 64 so the default scale is 1/8 (a power of two), and every partial sum is an integer
 *   below 2^24. A row's top logit is drawn from [-1e4, 1e4] (the first rows take exactly +1e4
 *   and -1e4); rows of all-negative logits are where an unstabilised exp underflows to 0/0.
 *   - ties: each head has 1-4 keys sharing the top k row exactly (so their scores are equal
 *     bit for bit in any kernel) and every other key is >= 32 below the top. The answer is the
 *     mean of the tied v rows, up to e^-32; any kernel that subtracts the running max passes,
 *     including one that folds log2(e) into the scale before subtracting (its exponent error
 *     is 6e-4 only on keys weighted e^-32).
 *   - graded: the other keys sit 0..7 below the top (integer gaps), so their weights are
 *     e^0..e^-7 and an exponent error shows directly. An exact kernel subtracts the max from
 *     the exact logit before any rounding (s - m is exact here), then exponentiates. A kernel
 *     that computes exp2(s * c - m * c) with c = scale * log2(e) rounds s * c at magnitude
 *     1.4e4 (error 5e-4 in the exponent) and fails this case: that loss is the kernel's, not
 *     float32's, because the logits themselves are exact.
 * equal_scores — q = 0 (every score exactly 0) and k rows all identical: output = mean of v
 *   (the reference is also checked against that mean, computed here in float64).
 * single_key — seq_kv = 1: the weight is exp(0)/exp(0) = 1, so output = v row, bit for bit.
 * long_rows — seq_kv = 65536, H = 2, D = 16, logits of standard deviation 1 and 3, v = 1 +
 *   noise so that a relative error of the running sum shows in every output element. A single
 *   float32 running sum over 65536 terms drifts by about sqrt(n) * 2^-24 = 1.5e-5 relative,
 *   past the 2e-6 gate; blocked or compensated sums stay well inside it.
 * nonfinite — one NaN, +Inf or -Inf in q, k or v, against the rule in include/jattn.h:
 *   q row i of (b,h): out row i all NaN, lse non-finite.
 *   k row j of (b,h): each query row i has a score s_ij that is NaN or +-Inf. NaN or +Inf:
 *     out row i all NaN, lse non-finite. -Inf: key j gets weight 0 and row i is the attention over the
 *     other keys (checked against the reference run on the same inputs).
 *   v[j, d] of (b,h): column d of every out row of (b,h) non-finite; other columns and lse
 *     unaffected.
 *   Everything the rule leaves unaffected must be bitwise equal to the same backend's output
 *   on the clean inputs.
 * denormals — (a) q denormal (2^-129..2^-126), k near 2^102, scale 2^24: logits of order 1
 *   come from denormal q, so flushing them to zero (DAZ) gives uniform attention and fails the
 *   gate; the power-of-two scale keeps q * scale exact for a kernel that pre-scales q.
 *   (b) v denormal: outputs of denormal size must come out with gradual underflow, within
 *   (2 Skv + 2) quanta of 2^-149 plus 1e-5 relative (flush-to-zero misses by ~2^21 quanta).
 *   (c) q and k denormal: every score underflows to 0, output = mean of v.
 * scale — explicit scales: tiny (1e-30, and 1e-40, itself denormal: uniform attention),
 *   large (1e3 with inputs of 0.03, and 2^100 with inputs near 2^-52: logits of order 1). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static jattn_backend backend;
static jt_rng rng;
static jt_tally tally;

/* Row i of (b, h) of a tensor with strides s. */
static float *row_at(float *base, jattn_strides s, int64_t b, int64_t h, int64_t i) {
    return base + b * s.batch + h * s.head + i * s.token;
}

static int64_t int_in(int64_t lo, int64_t hi) { return lo + (int64_t)(jt_uniform(&rng) * (double)(hi - lo + 1)); }

typedef float (*elem_fn)(int64_t b, int64_t h, int64_t i, int64_t d, void *arg);

static void fill(const jattn_problem *p, float *x, jattn_strides s, int64_t seq, elem_fn f, void *arg) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < seq; i++) {
                float *r = row_at(x, s, b, h, i);
                for (int64_t d = 0; d < p->head_dim; d++) r[d] = f(b, h, i, d, arg);
            }
}

static float normal_elem(int64_t b, int64_t h, int64_t i, int64_t d, void *arg) {
    (void)b, (void)h, (void)i, (void)d;
    return (float)(*(const double *)arg * jt_normal(&rng));
}

static void fill_normal(const jattn_problem *p, float *x, jattn_strides s, int64_t seq, double amp) {
    fill(p, x, s, seq, normal_elem, &amp);
}

static jattn_exec exec_for(void) {
    jattn_exec e = {0};
    e.backend = backend;
    return e;
}

/* Reference, then the backend against it under the f32 gate; counts one result. */
static int check_against_reference(jt_case *c, const char *name, int want_lse) {
    jt_case_seal(c);
    size_t len = strlen(c->label);
    snprintf(c->label + len, sizeof c->label - len, " %s", name);
    jattn_status st = jt_case_reference(c);
    if (st != JATTN_OK) {
        printf("FAIL %s: reference: %s: %s\n", c->label, jattn_status_name(st), jattn_last_error());
        jt_tally_add(&tally, 0);
        return 0;
    }
    jattn_exec e = exec_for();
    int ok = jt_case_check(c, &e, want_lse);
    jt_tally_add(&tally, ok);
    return ok;
}

static int expect(int cond, const char *label, const char *what) {
    if (!cond) printf("FAIL %s: %s (seed %llu)\n", label, what, (unsigned long long)jt_seed());
    jt_tally_add(&tally, cond);
    return cond;
}

/* ---- logits up to +-1e4 --------------------------------------------------------------- */

enum { LL_D = 64, LL_TOP_K0 = 100 };

/* See the header comment: integer q and k, every logit exact, top logit of each row drawn
 * from [-1e4, 1e4]. */
static void large_logits(int graded) {
    const int64_t B = 1, H = 2, Sq = 33, Skv = 77, D = LL_D;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "large_logits", "allocation");
        return;
    }
    for (int64_t h = 0; h < H; h++) {
        /* k: column 0 carries the structure, column 1 is 1 (carries each row's offset), the
         * other columns are one integer vector shared by every key (adds a per-row constant). */
        int64_t kappa[LL_D];
        for (int64_t d = 2; d < D; d++) kappa[d] = int_in(-8, 8);
        int64_t n_top = int_in(1, 4);
        for (int64_t j = 0; j < Skv; j++) {
            float *kj = row_at(c.k, p.k, 0, h, j);
            int64_t k0;
            if (graded)
                k0 = LL_TOP_K0 - int_in(0, 7); /* with q0 = 8: gaps 0..7 in the logit */
            else
                k0 = j < n_top ? LL_TOP_K0 : int_in(0, LL_TOP_K0 - 4); /* q0 >= 64: gap >= 32 */
            kj[0] = (float)k0;
            kj[1] = 1.0f;
            for (int64_t d = 2; d < D; d++) kj[d] = (float)kappa[d];
        }
        if (!graded) /* move the tied keys to random places */
            for (int64_t t = 0; t < n_top; t++) {
                int64_t j = int_in(0, Skv - 1);
                float *a = row_at(c.k, p.k, 0, h, t), *b = row_at(c.k, p.k, 0, h, j);
                float tmp = a[0];
                a[0] = b[0];
                b[0] = tmp;
            }
        for (int64_t i = 0; i < Sq; i++) {
            float *qi = row_at(c.q, p.q, 0, h, i);
            int64_t q0 = graded ? 8 : int_in(64, 255);
            int64_t rest = 0;
            for (int64_t d = 2; d < D; d++) {
                int64_t x = int_in(-8, 8);
                qi[d] = (float)x;
                rest += x * kappa[d];
            }
            /* top logit T = (q0 * 100 + q1 + rest) / 8 exactly; choose 8T first. */
            int64_t t8 = i == 0 ? 80000 : i == 1 ? -80000 : int_in(-80000, 80000);
            qi[0] = (float)q0;
            qi[1] = (float)(t8 - q0 * LL_TOP_K0 - rest);
        }
    }
    fill_normal(&p, c.v, p.v, Skv, 1.0);
    const char *name = graded ? "large_logits_graded" : "large_logits_ties";
    int ok = check_against_reference(&c, name, 1);
    if (ok && !graded) {
        /* The oracle itself: each row must be the mean of its head's tied v rows. */
        double worst = 0;
        for (int64_t h = 0; h < H; h++) {
            double mean[LL_D] = {0};
            int n = 0;
            for (int64_t j = 0; j < Skv; j++)
                if (row_at(c.k, p.k, 0, h, j)[0] == (float)LL_TOP_K0) {
                    n++;
                    for (int64_t d = 0; d < D; d++) mean[d] += row_at(c.v, p.v, 0, h, j)[d];
                }
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t d = 0; d < D; d++) {
                    double e = fabs(row_at(c.ref, p.out, 0, h, i)[d] - mean[d] / n);
                    if (e > worst) worst = e;
                }
        }
        char what[96];
        snprintf(what, sizeof what, "reference differs from the mean of the tied v rows by %.3g", worst);
        expect(worst <= 1e-6, c.label, what);
    }
    jt_case_free(&c);
}

/* ---- all scores equal ----------------------------------------------------------------- */

static void equal_scores(int zero_q) {
    const int64_t B = 2, H = 2, Sq = 7, Skv = 1000, D = 64;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "equal_scores", "allocation");
        return;
    }
    fill_normal(&p, c.q, p.q, Sq, zero_q ? 0.0 : 3.0);
    fill_normal(&p, c.k, p.k, Skv, 3.0);
    fill_normal(&p, c.v, p.v, Skv, 1.0);
    if (!zero_q) /* every key row a copy of the first */
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 1; j < Skv; j++)
                    memcpy(row_at(c.k, p.k, b, h, j), row_at(c.k, p.k, b, h, 0), (size_t)D * sizeof(float));
    if (check_against_reference(&c, zero_q ? "equal_scores q=0" : "equal_scores k rows equal", 1)) {
        double worst = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) {
                    double mean = 0;
                    for (int64_t j = 0; j < Skv; j++) mean += row_at(c.v, p.v, b, h, j)[d];
                    mean /= (double)Skv;
                    for (int64_t i = 0; i < Sq; i++) {
                        double e = fabs(row_at(c.ref, p.out, b, h, i)[d] - mean);
                        if (e > worst) worst = e;
                    }
                }
        char what[96];
        snprintf(what, sizeof what, "reference differs from the mean of v by %.3g", worst);
        expect(worst <= 1e-6, c.label, what);
    }
    jt_case_free(&c);
}

/* ---- a single key --------------------------------------------------------------------- */

static void single_key(jt_dist dist) {
    const int64_t B = 2, H = 3, Sq = 65, Skv = 1, D = 128;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "single_key", "allocation");
        return;
    }
    jt_case_fill(&c, dist, &rng);
    if (check_against_reference(&c, "single_key", 1)) {
        int64_t mismatches = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < Sq; i++)
                    mismatches += memcmp(row_at(c.out, p.out, b, h, i), row_at(c.v, p.v, b, h, 0),
                                         (size_t)D * sizeof(float)) != 0;
        char what[96];
        snprintf(what, sizeof what, "%lld output rows are not bitwise the single v row", (long long)mismatches);
        expect(mismatches == 0, c.label, what);
    }
    jt_case_free(&c);
}

/* ---- very long rows ------------------------------------------------------------------- */

static float offset_normal_elem(int64_t b, int64_t h, int64_t i, int64_t d, void *arg) {
    (void)b, (void)h, (void)i, (void)d, (void)arg;
    return (float)(1.0 + 0.5 * jt_normal(&rng));
}

static void long_rows(double logit_std) {
    const int64_t B = 1, H = 2, Sq = 5, Skv = 65536, D = 16;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "long_rows", "allocation");
        return;
    }
    /* logit std = scale * sqrt(D) * amp^2 = amp^2 */
    fill_normal(&p, c.q, p.q, Sq, sqrt(logit_std));
    fill_normal(&p, c.k, p.k, Skv, sqrt(logit_std));
    fill(&p, c.v, p.v, Skv, offset_normal_elem, NULL);
    char name[64];
    snprintf(name, sizeof name, "long_rows logit_std=%g", logit_std);
    check_against_reference(&c, name, 1);
    jt_case_free(&c);
}

/* ---- NaN and Inf ---------------------------------------------------------------------- */

typedef enum which_tensor { IN_Q, IN_K, IN_V } which_tensor;

static int bits_equal(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* One NaN/Inf in one tensor; checks the rule of the header comment (see the top of this file). */
static void nonfinite(which_tensor which, float bad, int64_t D) {
    const int64_t B = 2, H = 2, Sq = 9, Skv = 13;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "nonfinite", "allocation");
        return;
    }
    jt_case_fill(&c, JT_NORMAL, &rng);
    const int64_t n_out = kit_tensor_span(&p, p.out, Sq);
    const int64_t n_lse = B * H * Sq;
    jattn_exec e = exec_for();
    float *clean = malloc((size_t)n_out * sizeof(float)), *clean_lse = malloc((size_t)n_lse * sizeof(float));
    const int64_t bb = int_in(0, B - 1), hh = int_in(0, H - 1), row = int_in(0, (which == IN_Q ? Sq : Skv) - 1),
                  col = int_in(0, D - 1);
    if (which == IN_K) { /* one query row of each sign of q[., col], and one zero: all three outcomes */
        row_at(c.q, p.q, bb, hh, 0)[col] = 0.75f;
        row_at(c.q, p.q, bb, hh, 1)[col] = -0.75f;
        row_at(c.q, p.q, bb, hh, 2)[col] = 0.0f;
    }
    char label[400];
    static const char *const tensor_name[] = {"q", "k", "v"};
    snprintf(label, sizeof label, "%s nonfinite %s[b=%lld,h=%lld,row=%lld,d=%lld]=%g", c.label, tensor_name[which],
             (long long)bb, (long long)hh, (long long)row, (long long)col, (double)bad);
    jattn_status st =
        clean && clean_lse ? jattn_forward(NULL, &p, &e, c.q, c.k, c.v, clean, clean_lse) : JATTN_ERROR_OUT_OF_MEMORY;
    if (!expect(st == JATTN_OK, label, "clean call failed")) goto done;

    float *target = which == IN_Q ? c.q : which == IN_K ? c.k : c.v;
    jattn_strides ts = which == IN_Q ? p.q : which == IN_K ? p.k : p.v;
    row_at(target, ts, bb, hh, row)[col] = bad;
    jt_case_seal(&c);
    st = jt_case_reference(&c);
    if (!expect(st == JATTN_OK, label, "reference call failed")) goto done;
    for (int64_t j = 0; j < n_lse; j++) c.lse[j] = NAN;
    st = jattn_forward(NULL, &p, &e, c.q, c.k, c.v, c.out, c.lse);
    if (!expect(st == JATTN_OK, label, "call with a non-finite input failed")) goto done;

    int64_t wrong = 0;
    char first[200] = "";
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Sq; i++) {
                const int64_t off = b * p.out.batch + h * p.out.head + i * p.out.token;
                const int64_t li = (b * H + h) * Sq + i;
                const int here = b == bb && h == hh;
                /* Expected state of this row: 0 unaffected, 1 all NaN, 2 column col non-finite,
                 * 3 key excluded (compare with the reference on the same inputs). */
                int state = 0;
                if (here && which == IN_Q && i == row) state = 1;
                if (here && which == IN_K) {
                    double s = (double)row_at(c.q, p.q, b, h, i)[col] * (double)bad;
                    state = isnan(s) || s > 0 ? 1 : 3;
                }
                if (here && which == IN_V) state = 2;
                for (int64_t d = 0; d < D; d++) {
                    float o = c.out[off + d], cl = clean[off + d], r = c.ref[off + d];
                    int ok = state == 0   ? bits_equal(o, cl)
                             : state == 1 ? isnan(o)
                             : state == 2
                                 ? (d == col ? !isfinite(o) : bits_equal(o, cl))
                                 : isfinite(o) && fabs((double)o - r) <= JATTN_GATE_F32_MAX_ABS * fmax(1.0, fabs(r));
                    if (!ok && !wrong++)
                        snprintf(first, sizeof first,
                                 "out[b=%lld,h=%lld,i=%lld,d=%lld] = %g (clean %g, ref %g), rule %d", (long long)b,
                                 (long long)h, (long long)i, (long long)d, (double)o, (double)cl, (double)r, state);
                }
                float l = c.lse[li];
                int lse_ok = state == 0 || state == 2 ? bits_equal(l, clean_lse[li])
                             : state == 1             ? !isfinite(l)
                                                      : fabs((double)l - c.ref_lse[li]) <=
                                                JATTN_GATE_LSE_F32 * fmax(1.0, fabs(c.ref_lse[li]));
                if (!lse_ok && !wrong++)
                    snprintf(first, sizeof first, "lse[b=%lld,h=%lld,i=%lld] = %g (clean %g, ref %g), rule %d",
                             (long long)b, (long long)h, (long long)i, (double)l, (double)clean_lse[li],
                             (double)c.ref_lse[li], state);
            }
    char what[320];
    snprintf(what, sizeof what, "%lld elements break the non-finite rule; first: %s", (long long)wrong, first);
    expect(wrong == 0, label, what);
done:
    free(clean);
    free(clean_lse);
    jt_case_free(&c);
}

/* ---- denormals ------------------------------------------------------------------------ */

/* A random denormal: mantissa in [lo, 2^23), exponent field 0, random sign. */
static float denormal(uint32_t lo) {
    uint32_t m = lo + (uint32_t)(jt_next(&rng) % ((1u << 23) - lo));
    uint32_t bits = m | (jt_next(&rng) & 1u) << 31;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float denormal_elem(int64_t b, int64_t h, int64_t i, int64_t d, void *arg) {
    (void)b, (void)h, (void)i, (void)d;
    return denormal(*(const uint32_t *)arg);
}

static void denormals_q_significant(int64_t D) {
    const int64_t B = 1, H = 2, Sq = 33, Skv = 65;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    p.scale = 0x1p24f;
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "denormals", "allocation");
        return;
    }
    uint32_t lo = 1u << 20; /* |q| in [2^-129, 2^-126) */
    fill(&p, c.q, p.q, Sq, denormal_elem, &lo);
    /* |q| ~ 2^-127.5, |k| ~ 2^102 normal, scale 2^24: logit std about 2^-1.5 * sqrt(D), 2 to 2.8 */
    fill_normal(&p, c.k, p.k, Skv, 0x1p102);
    fill_normal(&p, c.v, p.v, Skv, 1.0);
    check_against_reference(&c, "denormal q (logits of order 1)", 1);
    jt_case_free(&c);
}

static void denormals_qk_underflow(int64_t D) {
    const int64_t B = 1, H = 2, Sq = 17, Skv = 40;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "denormals", "allocation");
        return;
    }
    uint32_t lo = 1;
    fill(&p, c.q, p.q, Sq, denormal_elem, &lo);
    fill(&p, c.k, p.k, Skv, denormal_elem, &lo);
    fill_normal(&p, c.v, p.v, Skv, 1.0);
    check_against_reference(&c, "denormal q and k (scores underflow)", 1);
    jt_case_free(&c);
}

static void denormals_v(int64_t D) {
    const int64_t B = 1, H = 2, Sq = 17, Skv = 48;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "denormals", "allocation");
        return;
    }
    uint32_t lo = 1;
    fill_normal(&p, c.q, p.q, Sq, 1.0);
    fill_normal(&p, c.k, p.k, Skv, 1.0);
    fill(&p, c.v, p.v, Skv, denormal_elem, &lo);
    jt_case_seal(&c);
    strncat(c.label, " denormal v", sizeof c.label - strlen(c.label) - 1);
    jattn_exec e = exec_for();
    if (!expect(jt_case_reference(&c) == JATTN_OK, c.label, "reference call failed") ||
        !expect(jattn_forward(NULL, &p, &e, c.q, c.k, c.v, c.out, c.lse) == JATTN_OK, c.label, "call failed")) {
        jt_case_free(&c);
        return;
    }
    double max_ref = 0, worst = 0, nonzero_ref = 0, zero_out = 0;
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t d = 0; d < D; d++) {
                double o = row_at(c.out, p.out, 0, h, i)[d], r = row_at(c.ref, p.out, 0, h, i)[d];
                if (!isfinite(o)) worst = INFINITY;
                if (fabs(o - r) > worst) worst = fabs(o - r);
                if (fabs(r) > max_ref) max_ref = fabs(r);
                nonzero_ref += r != 0;
                zero_out += r != 0 && o == 0;
            }
    const double quantum = 0x1p-149, tol = (2.0 * (double)Skv + 2.0) * quantum + JATTN_GATE_F32_MAX_ABS * max_ref;
    char what[200];
    snprintf(what, sizeof what,
             "max_abs %.3g = %.1f quanta of 2^-149 > tolerance %.1f quanta; %.0f of %.0f nonzero "
             "outputs flushed to 0",
             worst, worst / quantum, tol / quantum, zero_out, nonzero_ref);
    expect(worst <= tol && nonzero_ref > 0, c.label, what);
    jt_case_free(&c);
}

/* ---- explicit scales ------------------------------------------------------------------ */

static void explicit_scale(float scale, double input_amp) {
    const int64_t B = 1, H = 2, Sq = 33, Skv = 70, D = 64;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    p.scale = scale;
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        expect(0, "scale", "allocation");
        return;
    }
    fill_normal(&p, c.q, p.q, Sq, input_amp);
    fill_normal(&p, c.k, p.k, Skv, input_amp);
    fill_normal(&p, c.v, p.v, Skv, 1.0);
    char name[64];
    snprintf(name, sizeof name, "scale=%g inputs~%g", (double)scale, input_amp);
    check_against_reference(&c, name, 1);
    jt_case_free(&c);
}

int main(int argc, char **argv) {
    if (jt_backend_arg(argc, argv, "cpu", 0, NULL, &backend)) return 2;
    const char *name = jattn_backend_name(backend);
    if (!jt_backend_present(backend)) {
        printf("SKIP: backend %s is not present in this build or on this machine\n", name);
        return JT_SKIP;
    }
    jt_rng_init(&rng, jt_seed() ^ (uint64_t)backend * 0x9E3779B97F4A7C15ull);

    large_logits(0);
    large_logits(1);
    equal_scores(1);
    equal_scores(0);
    for (int d = 0; d < JT_DIST_COUNT; d++) single_key((jt_dist)d);
    long_rows(1.0);
    long_rows(3.0);
    /* The non-finite and denormal cases at two head dims: on the cuda backend D = 32 runs
     * kernel v2 and D = 128 kernel v6 (on sm_90), whose operand splits differ. */
    const float bads[3] = {NAN, INFINITY, -INFINITY};
    const int64_t dims[2] = {32, 128};
    for (int di = 0; di < 2; di++)
        for (int t = IN_Q; t <= IN_V; t++)
            for (int i = 0; i < 3; i++) nonfinite((which_tensor)t, bads[i], dims[di]);
    for (int di = 0; di < 2; di++) {
        denormals_q_significant(dims[di] == 32 ? 32 : 64);
        denormals_qk_underflow(dims[di]);
        denormals_v(dims[di] == 32 ? 32 : 64);
    }
    explicit_scale(1e-30f, 1.0);
    explicit_scale(1e-40f, 1.0);
    explicit_scale(1e3f, 0.033);       /* logit std = 1e3 * 8 * 0.033^2 = 8.7 */
    explicit_scale(0x1p100f, 0x1p-52); /* logit std = 2^100 * 8 * 2^-104 = 0.5 */

    char title[64];
    snprintf(title, sizeof title, "test_edges %s", name);
    return jt_tally_finish(&tally, title);
}
