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

/* An emulation of the cuda forward v1's one-column path (D <= 32: attention_v1_simt.cu, COLS = 1) in
 * float arithmetic, for B = H = 1 without masks: 32-key tiles, a warp-butterfly tile sum, Kahan row
 * sum and out. variant bits: 1 = the tile's weight sum as a TwoSum pair carried into l's
 * compensation; 2 = lse from (m + ml) + log(l - l_comp) in double, rounded once. */
static void emu_v1(const float *q, const float *k, const float *v, float scale, float *out, float *lse, int variant) {
    for (int i = 0; i < SQ; i++) {
        float m = -INFINITY, ml = 0, l = 0, l_comp = 0, o[MAXD], o_comp[MAXD];
        for (int d = 0; d < D; d++) o[d] = o_comp[d] = 0;
        for (int kv0 = 0; kv0 < SKV; kv0 += 32) {
            const int keys = SKV - kv0 < 32 ? SKV - kv0 : 32;
            float s[32], slo[32], pj[32];
            for (int j = 0; j < 32; j++) {
                if (j >= keys) {
                    s[j] = -INFINITY, slo[j] = 0;
                    continue;
                }
                float sum = 0, err = 0;
                for (int d = 0; d < D; d++) {
                    const float a = q[i * D + d], b = k[(kv0 + j) * D + d];
                    const float prod = a * b, prod_err = fmaf(a, b, -prod);
                    const float t = sum + prod, bp = t - sum;
                    err += ((sum - (t - bp)) + (prod - bp)) + prod_err;
                    sum = t;
                }
                const float dot = sum + err, dot_lo = err - (dot - sum);
                s[j] = dot * scale;
                slo[j] = fmaf(dot, scale, -s[j]) + dot_lo * scale;
            }
            float tmax = -INFINITY;
            int at = -1;
            for (int j = 0; j < 32; j++)
                if (s[j] > tmax) tmax = s[j];
            for (int j = 0; j < 32; j++)
                if (j < keys && s[j] == tmax) {
                    at = j;
                    break;
                }
            const float tml = at >= 0 ? slo[at] : 0;
            const float m_new = fmaxf(m, tmax), ml_new = tmax > m ? tml : ml;
            const float alpha = (float)exp(((double)m - m_new) + ((double)ml - ml_new));
            for (int j = 0; j < 32; j++)
                pj[j] = j < keys ? (float)exp(((double)s[j] - m_new) + ((double)slo[j] - ml_new)) : 0.0f;
            float x[32], xe[32];
            for (int j = 0; j < 32; j++) x[j] = pj[j], xe[j] = 0;
            for (int off = 16; off > 0; off /= 2) {
                float y[32], ye[32];
                for (int j = 0; j < 32; j++) {
                    const float a = x[j], b = x[j ^ off], t = a + b, bp = t - a;
                    y[j] = t, ye[j] = xe[j] + xe[j ^ off] + ((a - (t - bp)) + (b - bp));
                }
                memcpy(x, y, sizeof x), memcpy(xe, ye, sizeof xe);
            }
            if (variant & 8) { /* the cpu's pairs: (l - l_comp) alpha + tile sum, every error kept */
                const float xx = l * alpha, xx_err = fmaf(l, alpha, -xx), t = xx + x[0], bt = t - xx;
                const float t_err = (xx - (t - bt)) + (x[0] - bt);
                l_comp = l_comp * alpha - (xx_err + t_err + ((variant & 1) ? xe[0] : 0.0f)), l = t;
            } else {
                l *= alpha, l_comp *= alpha;
                {
                    const float yy = x[0] - l_comp, t = l + yy;
                    l_comp = (t - l) - yy, l = t;
                }
                if (variant & 1) l_comp -= xe[0];
            }
            m = m_new, ml = ml_new;
            for (int d = 0; d < D; d++) {
                float ot = 0, otl = 0;
                for (int j = 0; j < keys; j++) {
                    const float pb = pj[j], xv = v[(kv0 + j) * D + d];
                    const float prod = pb * xv, prod_err = fmaf(pb, xv, -prod);
                    const float t = ot + prod, bp = t - ot;
                    otl += ((ot - (t - bp)) + (prod - bp)) + prod_err;
                    ot = t;
                }
                if (variant & 8) {
                    const float xx = o[d] * alpha, xx_err = fmaf(o[d], alpha, -xx), t = xx + ot, bt = t - xx;
                    const float t_err = (xx - (t - bt)) + (ot - bt);
                    o_comp[d] = o_comp[d] * alpha - (xx_err + t_err + otl), o[d] = t;
                } else {
                    o[d] *= alpha, o_comp[d] *= alpha;
                    const float yy = ot - o_comp[d], t = o[d] + yy;
                    o_comp[d] = (t - o[d]) - yy, o[d] = t;
                    o_comp[d] -= otl;
                }
            }
        }
        const float inv_l = 1.0f / (l - l_comp);
        for (int d = 0; d < D; d++)
            out[i * D + d] =
                (variant & 4) ? (float)(((double)o[d] - o_comp[d]) / ((double)l - l_comp)) : (o[d] - o_comp[d]) * inv_l;
        lse[i] = (variant & 2) ? (float)(((double)m + ml) + log((double)l - l_comp)) : (m + ml) + logf(l - l_comp);
    }
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
        if (getenv("EMU_V1"))
            emu_v1(c.q, c.k, c.v, (float)scale, c.out, c.lse, atoi(getenv("EMU_V1")));
        else if (jattn_forward(NULL, &c.p, &e, c.q, c.k, c.v, c.out, c.lse) != JATTN_OK) {
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
