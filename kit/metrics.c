/* Error metrics against the reference and the precision gates (see metrics.h). */
#include "metrics.h"

#include <math.h>

typedef struct sums {
    double diff2, ref2, out2, dot, max_abs, max_ref;
    int64_t count, nonfinite;
} sums;

static void accumulate(sums *s, float o, float r) {
    double od = o, rd = r;
    s->count++;
    if (!isfinite(rd)) return;
    if (!isfinite(od)) {
        s->nonfinite++;
        return;
    }
    double d = od - rd;
    s->diff2 += d * d;
    s->ref2 += rd * rd;
    s->out2 += od * od;
    s->dot += od * rd;
    if (fabs(d) > s->max_abs) s->max_abs = fabs(d);
    if (fabs(rd) > s->max_ref) s->max_ref = fabs(rd);
}

static void finish(const sums *s, jattn_metrics *m) {
    m->max_abs = s->max_abs;
    m->max_ref = s->max_ref;
    m->rel_l2 = s->ref2 > 0 ? sqrt(s->diff2 / s->ref2) : sqrt(s->diff2);
    m->cos = (s->ref2 > 0 && s->out2 > 0) ? s->dot / sqrt(s->ref2 * s->out2) : (s->diff2 == 0 ? 1.0 : 0.0);
    m->count = s->count;
    m->nonfinite = s->nonfinite;
    if (s->nonfinite) {
        m->max_abs = m->rel_l2 = INFINITY;
        m->cos = 0;
    }
}

void jattn_metrics_compute(const jattn_problem *p, const float *out, const float *ref, jattn_metrics *m) {
    sums s = {0};
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < p->seq_q; i++) {
                int64_t off = b * p->out.batch + h * p->out.head + i * p->out.token;
                for (int64_t d = 0; d < p->head_dim; d++) accumulate(&s, out[off + d], ref[off + d]);
            }
    finish(&s, m);
}

void jattn_metrics_compute_dense(const float *out, const float *ref, int64_t n, jattn_metrics *m) {
    sums s = {0};
    for (int64_t i = 0; i < n; i++) accumulate(&s, out[i], ref[i]);
    finish(&s, m);
}

int jattn_metrics_pass(const jattn_metrics *m, jattn_precision precision) {
    if (m->nonfinite || !(m->rel_l2 == m->rel_l2)) return 0;
    if (precision == JATTN_PRECISION_TF32) return m->rel_l2 <= JATTN_GATE_TF32_REL_L2;
    double abs_tol = JATTN_GATE_F32_MAX_ABS * (m->max_ref > 1 ? m->max_ref : 1);
    return m->rel_l2 <= JATTN_GATE_F32_REL_L2 && m->max_abs <= abs_tol && m->cos >= JATTN_GATE_F32_COS;
}

int jattn_metrics_pass_backward(const jattn_metrics *m) {
    if (m->nonfinite || !(m->rel_l2 == m->rel_l2)) return 0;
    const double abs_tol = JATTN_BWD_GATE_MAX_ABS * (m->max_ref > 1 ? m->max_ref : 1);
    if (m->max_ref == 0) return m->max_abs <= abs_tol; /* a gradient that vanishes: no direction to compare */
    return m->rel_l2 <= JATTN_BWD_GATE_REL_L2 && m->max_abs <= abs_tol && m->cos >= JATTN_BWD_GATE_COS;
}

int jattn_metrics_pass_backward_floor(const jattn_metrics *m, const jattn_metrics *f) {
    if (jattn_metrics_pass_backward(m)) return 1;
    if (m->nonfinite || !(m->rel_l2 == m->rel_l2)) return 0;
    const double k = JATTN_BWD_FLOOR_TIMES;
    const double abs_tol = JATTN_BWD_GATE_MAX_ABS * (m->max_ref > 1 ? m->max_ref : 1);
    const int rel_ok = m->max_ref == 0 || m->rel_l2 <= JATTN_BWD_GATE_REL_L2 || m->rel_l2 <= k * f->rel_l2;
    /* 1 - cos and the largest error of one element: k^2 (1 - cos grows as rel_l2^2; a maximum over
     * the elements varies more from draw to draw than the mean) */
    const int cos_ok = m->max_ref == 0 || m->cos >= JATTN_BWD_GATE_COS || 1 - m->cos <= k * k * (1 - f->cos) + 1e-12;
    return rel_ok && cos_ok && (m->max_abs <= abs_tol || m->max_abs <= k * k * f->max_abs);
}

int jattn_lse_pass(const float *lse, const float *ref, int64_t n, jattn_precision precision) {
    double tol = precision == JATTN_PRECISION_TF32 ? JATTN_GATE_LSE_TF32 : JATTN_GATE_LSE_F32;
    for (int64_t i = 0; i < n; i++) {
        double r = ref[i], e = fabs((double)lse[i] - r);
        if (!isfinite(r)) continue;
        if (!(e <= tol * (fabs(r) > 1 ? fabs(r) : 1))) return 0;
    }
    return 1;
}
