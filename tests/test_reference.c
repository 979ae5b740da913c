/* The oracle's own test: the ref backend against an independent long-double evaluation
 * written here (two passes over the keys, no shared code), plus properties that hold
 * exactly: a dominant key returns its value row, equal value rows return that row, and the
 * output does not depend on a constant added to every logit of a row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* out[i,:] and lse[i] of one (b,h), in long double, straight from the definition. */
static void naive(const jattn_problem *p, const float *q, const float *k, const float *v, long double *out,
                  long double *lse) {
    const int64_t D = p->head_dim;
    const long double scale = p->scale > 0 ? (long double)p->scale : (long double)(float)(1.0 / sqrt((double)D));
    long double *s = malloc((size_t)p->seq_kv * sizeof *s);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < p->seq_q; i++) {
                const float *qi = q + b * p->q.batch + h * p->q.head + i * p->q.token;
                long double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < p->seq_kv; j++) {
                    const float *kj = k + b * p->k.batch + h * p->k.head + j * p->k.token;
                    long double acc = 0;
                    for (int64_t d = 0; d < D; d++) acc += (long double)qi[d] * kj[d];
                    s[j] = scale * acc;
                    if (s[j] > mx) mx = s[j];
                }
                for (int64_t j = 0; j < p->seq_kv; j++) sum += expl(s[j] - mx);
                long double *o = out + ((b * p->heads + h) * p->seq_q + i) * D;
                for (int64_t d = 0; d < D; d++) {
                    long double acc = 0;
                    for (int64_t j = 0; j < p->seq_kv; j++)
                        acc += expl(s[j] - mx) * v[b * p->v.batch + h * p->v.head + j * p->v.token + d];
                    o[d] = acc / sum;
                }
                lse[(b * p->heads + h) * p->seq_q + i] = mx + logl(sum);
            }
    free(s);
}

static int against_naive(jt_case *c) {
    const jattn_problem *p = &c->p;
    int64_t rows = p->batch * p->heads * p->seq_q;
    long double *out = malloc((size_t)(rows * p->head_dim) * sizeof *out);
    long double *lse = malloc((size_t)rows * sizeof *lse);
    naive(p, c->q, c->k, c->v, out, lse);
    double worst = 0, worst_lse = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < p->seq_q; i++) {
                int64_t r = (b * p->heads + h) * p->seq_q + i;
                const float *got = c->ref + b * p->out.batch + h * p->out.head + i * p->out.token;
                for (int64_t d = 0; d < p->head_dim; d++) {
                    long double want = out[r * p->head_dim + d];
                    double e = (double)fabsl(got[d] - want) / (double)(fabsl(want) > 1 ? fabsl(want) : 1);
                    if (!(e <= worst)) worst = e;
                }
                double e = (double)fabsl(c->ref_lse[r] - lse[r]) / (double)(fabsl(lse[r]) > 1 ? fabsl(lse[r]) : 1);
                if (!(e <= worst_lse)) worst_lse = e;
            }
    free(out);
    free(lse);
    /* The ref rounds its float64 result to float32 once: half an ulp, 6e-8 relative. */
    int ok = worst <= 1.2e-7 && worst_lse <= 1.2e-7;
    if (!ok || getenv("JATTN_TEST_VERBOSE"))
        printf("%s %s: ref vs long double: worst relative error out %.3g lse %.3g\n", ok ? "ok  " : "FAIL", c->label,
               worst, worst_lse);
    return ok;
}

/* Property checks on one head: returns 1 when all hold exactly (to float32 rounding). */
static int properties(jt_rng *r) {
    const int64_t S = 37, D = 24;
    jattn_problem p = jattn_problem_flux(1, 1, S, S, D);
    size_t n = (size_t)(S * D);
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4), *o2 = malloc(n * 4);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    int ok = 1;

    /* 1. Key 5 dominates every row by > 200 in the logits: out rows equal v row 5. */
    for (size_t x = 0; x < n; x++) {
        q[x] = (float)(jt_uniform(r) * 0.01);
        k[x] = (float)(jt_uniform(r) * 0.01);
        v[x] = (float)jt_normal(r);
    }
    for (int64_t i = 0; i < S; i++) q[i * D] = 100.0f;
    k[5 * D] = 100.0f;
    jattn_forward(NULL, &p, &e, q, k, v, o, NULL);
    for (int64_t i = 0; i < S; i++)
        for (int64_t d = 0; d < D; d++) ok &= o[i * D + d] == v[5 * D + d];
    if (!ok) printf("FAIL property: a dominant key does not return its value row\n");

    /* 2. Every value row equal: out rows equal it. */
    for (int64_t j = 0; j < S; j++)
        for (int64_t d = 0; d < D; d++) v[j * D + d] = (float)(d - 7) * 0.25f;
    for (size_t x = 0; x < n; x++) q[x] = (float)jt_normal(r), k[x] = (float)jt_normal(r);
    jattn_forward(NULL, &p, &e, q, k, v, o, NULL);
    int ok2 = 1;
    for (int64_t i = 0; i < S; i++)
        for (int64_t d = 0; d < D; d++) ok2 &= o[i * D + d] == v[d];
    if (!ok2) printf("FAIL property: equal value rows do not come back unchanged\n");

    /* 3. Shifting a row's logits: k gets a component along a new axis that q has constant.
     * Put q[i,0] = c and k[j,0] = 1 for all j: every logit of row i gains c*scale; the output
     * must not move beyond float32 rounding of the logits. */
    for (size_t x = 0; x < n; x++) v[x] = (float)jt_normal(r);
    for (int64_t j = 0; j < S; j++) k[j * D] = 0.0f;
    for (int64_t i = 0; i < S; i++) q[i * D] = 0.0f;
    jattn_forward(NULL, &p, &e, q, k, v, o, NULL);
    for (int64_t j = 0; j < S; j++) k[j * D] = 1.0f;
    for (int64_t i = 0; i < S; i++) q[i * D] = 512.0f; /* a power of two: the shift is exact */
    jattn_forward(NULL, &p, &e, q, k, v, o2, NULL);
    jattn_metrics m;
    jattn_metrics_compute_dense(o2, o, (int64_t)n, &m);
    int ok3 = m.rel_l2 <= 1e-7;
    if (!ok3) printf("FAIL property: a constant logit shift moved the output by rel_l2 %.3g\n", m.rel_l2);

    free(q), free(k), free(v), free(o), free(o2);
    return ok && ok2 && ok3;
}

int main(void) {
    jt_rng rng;
    jt_rng_init(&rng, jt_seed());
    jt_tally tally = {0};
    const int64_t shapes[][5] = {
        {1, 1, 1, 1, 8}, {1, 2, 8, 8, 128}, {2, 2, 7, 33, 16}, {1, 1, 65, 3, 80}, {1, 3, 17, 17, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        jattn_problem p = jattn_problem_flux(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4]);
        jt_case c;
        if (jt_case_init(&c, &p)) return 1;
        for (int d = 0; d < JT_DIST_COUNT; d++) {
            jt_case_fill(&c, (jt_dist)d, &rng);
            jattn_status st = jt_case_reference(&c);
            jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, c.label) && against_naive(&c));
        }
        jt_case_free(&c);
    }
    jt_tally_add(&tally, properties(&rng));
    return jt_tally_finish(&tally, "test_reference");
}
