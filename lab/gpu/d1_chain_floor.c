/* Which part of the training chain misses the float32 floor at head_dim 1 (issue 37).
 *
 * test_backward's chain part hands the backward the backend's own forward's out and lse, and its
 * float32 floor excuses only out and lse rounded once from float64. At (1,1,100,77,1) the cuda
 * chain misses (dq, dk up to 21x the floor) where the same backward from the rounded float64
 * forward (the gate part) passes. This program separates the two: per draw it computes float64
 * gradients from three (out, lse) pairs (exact, rounded once = the floor's, the backend's forward)
 * with everything else exact, so the third's rel_l2 over the second's is what the forward's out
 * and lse alone cost, whatever the backward does. It also prints the forward's out and lse error in
 * float32 ulps. Usage: d1_chain_floor [draws] [cpu|cuda] [head_dim] (JATTN_CUDA_KERNEL picks the forward).
 * Built against a build's harness, kit and shared library (bench/results/h100-2026-12-06-d1chain/ ran it):
 *   gcc -O2 -std=c11 lab/gpu/d1_chain_floor.c -Itests -Ikit -Iinclude BUILD/tests/libjattn_test_harness.a \
 *       BUILD/kit/libjattn_kit.a -LBUILD -ljattn -lm -o d1_chain_floor */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { SQ = 100, SKV = 77, MAXD = 64 };
static int D = 1;

static double ulp_of(float x) {
    const float a = fabsf(x);
    return (double)(nextafterf(a, INFINITY) - a);
}

/* float64 gradients of a B = H = 1 problem [S, D] given out o [SQ, D] and lse l (per query row). */
static void grads(const double *q, const double *k, const double *v, const double *dout, double scale, const double *o,
                  const double *l, int round_logits, double *dq, double *dk, double *dv) {
    memset(dq, 0, SQ * D * sizeof *dq), memset(dk, 0, SKV * D * sizeof *dk), memset(dv, 0, SKV * D * sizeof *dv);
    for (int i = 0; i < SQ; i++) {
        double delta = 0;
        for (int d = 0; d < D; d++) delta += dout[i * D + d] * o[i * D + d];
        for (int j = 0; j < SKV; j++) {
            double s = 0, dp = 0;
            for (int d = 0; d < D; d++) s += q[i * D + d] * k[j * D + d], dp += dout[i * D + d] * v[j * D + d];
            const double logit = round_logits ? (double)(float)(scale * s) : scale * s;
            const double pij = exp(logit - l[i]), ds = pij * (dp - delta);
            for (int d = 0; d < D; d++) {
                dq[i * D + d] += scale * ds * k[j * D + d];
                dk[j * D + d] += scale * ds * q[i * D + d];
                dv[j * D + d] += pij * dout[i * D + d];
            }
        }
    }
}

static double rel_l2(const double *got, const double *want, int n) {
    double e = 0, w = 0;
    for (int i = 0; i < n; i++) e += (got[i] - want[i]) * (got[i] - want[i]), w += want[i] * want[i];
    return w > 0 ? sqrt(e / w) : sqrt(e);
}

int main(int argc, char **argv) {
    const int draws = argc > 1 ? atoi(argv[1]) : 20;
    const jattn_backend be = argc > 2 && !strcmp(argv[2], "cpu") ? JATTN_BACKEND_CPU : JATTN_BACKEND_CUDA;
    jt_rng r;
    jt_rng_init(&r, jt_seed());
    D = argc > 3 ? atoi(argv[3]) : 1;
    if (D < 1 || D > MAXD) return 2;
    jattn_problem p = jattn_problem_flux(1, 1, SQ, SKV, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) return 1;
    double worst[2][3] = {{0}}, worst_out[2][3] = {{0}}, worst_lse[2][3] = {{0}};
    for (int n = 0; n < draws; n++) {
        const jt_dist dist = n % 2 ? JT_LARGE : JT_PEAKY;
        c.p.scale = 0;
        jt_case_fill(&c, dist, &r);
        const double scale = c.p.scale > 0 ? c.p.scale : (double)(float)(1.0 / sqrt((double)D));
        if (jt_case_reference(&c) != JATTN_OK) return 1;
        jattn_exec e = {0};
        e.backend = be;
        if (jattn_forward(NULL, &c.p, &e, c.q, c.k, c.v, c.out, c.lse) != JATTN_OK) {
            printf("forward: %s\n", jattn_last_error());
            return 1;
        }
        static double q[SQ * MAXD], k[SKV * MAXD], v[SKV * MAXD], dout[SQ * MAXD], o64[SQ * MAXD], l64[SQ],
            of[SQ * MAXD], lf[SQ], oc[SQ * MAXD], lc[SQ];
        for (int i = 0; i < SQ * D; i++) q[i] = c.q[i], dout[i] = jt_normal(&r);
        for (int j = 0; j < SKV * D; j++) k[j] = c.k[j], v[j] = c.v[j];
        double out_ulp = 0, lse_ulp = 0;
        for (int i = 0; i < SQ; i++) { /* the float64 forward, exact */
            double m = -INFINITY, sum = 0, sc[SKV];
            for (int j = 0; j < SKV; j++) {
                double s = 0;
                for (int d = 0; d < D; d++) s += q[i * D + d] * k[j * D + d];
                sc[j] = scale * s, m = fmax(m, sc[j]);
            }
            for (int d = 0; d < D; d++) o64[i * D + d] = 0;
            for (int j = 0; j < SKV; j++) {
                const double w = exp(sc[j] - m);
                sum += w;
                for (int d = 0; d < D; d++) o64[i * D + d] += w * v[j * D + d];
            }
            l64[i] = m + log(sum), lf[i] = (float)l64[i], lc[i] = c.lse[i];
            const double el = fabs(lc[i] - l64[i]) / ulp_of((float)l64[i]);
            if (el > lse_ulp) lse_ulp = el;
            for (int d = 0; d < D; d++) {
                const int x = i * D + d;
                o64[x] /= sum, of[x] = (float)o64[x], oc[x] = c.out[x];
                const double eo = fabs(oc[x] - o64[x]) / ulp_of((float)o64[x]);
                if (eo > out_ulp) out_ulp = eo;
            }
        }
        static double g[6][3][SQ * MAXD]; /* exact, floor (exact logits), backend, floor (rounded logits),
                                             the backend's out with lse rounded once, its lse with out rounded once */ /* [exact, floor, backend][dq, dk, dv] */
        const double *os[3] = {o64, of, oc}, *ls[3] = {l64, lf, lc};
        for (int w = 0; w < 3; w++) grads(q, k, v, dout, scale, os[w], ls[w], 0, g[w][0], g[w][1], g[w][2]);
        grads(q, k, v, dout, scale, of, lf, 1, g[3][0], g[3][1], g[3][2]);
        grads(q, k, v, dout, scale, oc, lf, 0, g[4][0], g[4][1], g[4][2]);
        grads(q, k, v, dout, scale, of, lc, 0, g[5][0], g[5][1], g[5][2]);
        printf("%-6s out err %6.2f ulp lse err %6.2f ulp |", jt_dist_name(dist), out_ulp, lse_ulp);
        const char *names[3] = {"dq", "dk", "dv"};
        for (int t = 0; t < 3; t++) {
            const int cnt = (t ? SKV : SQ) * D;
            const double fl = fmax(rel_l2(g[1][t], g[0][t], cnt), rel_l2(g[3][t], g[0][t], cnt)),
                         bk = rel_l2(g[2][t], g[0][t], cnt);
            const double ratio = fl > 0 ? bk / fl : 0;
            if (ratio > worst[n % 2][t]) worst[n % 2][t] = ratio;
            if (fl > 0 && rel_l2(g[4][t], g[0][t], cnt) / fl > worst_out[n % 2][t])
                worst_out[n % 2][t] = rel_l2(g[4][t], g[0][t], cnt) / fl;
            if (fl > 0 && rel_l2(g[5][t], g[0][t], cnt) / fl > worst_lse[n % 2][t])
                worst_lse[n % 2][t] = rel_l2(g[5][t], g[0][t], cnt) / fl;
            printf(" %s floor %.3g forward's %.3g (%.2fx)", names[t], fl, bk, ratio);
        }
        printf("\n");
    }
    for (int d = 0; d < 2; d++)
        printf("D %d worst %s: the forward's out and lse alone over the floor: dq %.2fx dk %.2fx dv %.2fx\n", D,
               d ? "large" : "peaky", worst[d][0], worst[d][1], worst[d][2]);
    for (int d = 0; d < 2; d++)
        printf("D %d worst %s: its out alone (lse rounded once) dq %.2fx dk %.2fx dv %.2fx; its lse alone (out rounded "
               "once) "
               "dq %.2fx dk %.2fx dv %.2fx\n",
               D, d ? "large" : "peaky", worst_out[d][0], worst_out[d][1], worst_out[d][2], worst_lse[d][0],
               worst_lse[d][1], worst_lse[d][2]);
    jt_case_free(&c);
    return 0;
}
