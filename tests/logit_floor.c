/* The forward's float32-logit floor per query row (logit_floor.h). */
#include "logit_floor.h"

#include <math.h>
#include <stdlib.h>

#include "mask_rule.h"
#include "tensor.h"

/* The spacing of float32 numbers at |x| (x finite). */
static double ulp_f32(double x) {
    const float a = fabsf((float)x);
    return (double)nextafterf(a, INFINITY) - (double)a;
}

int jt_logit_floor_rows(const jattn_problem *p, const jattn_mask *m, const float *q, const float *k, const float *v,
                        double *floor) {
    const int64_t B = p->batch, H = p->heads, Sq = p->seq_q, Skv = p->seq_kv, D = p->head_dim;
    const int64_t group = H / kit_kv_heads(p);
    /* the scale as the library applies it: jattn.h's float, 1/sqrt(D) rounded to float32 by default */
    const double scale = p->scale > 0 ? (double)p->scale : (double)(float)(1.0 / sqrt((double)D));
    double *s = malloc((size_t)(Skv ? Skv : 1) * sizeof *s), *o = malloc((size_t)(D ? D : 1) * sizeof *o);
    unsigned char *att = malloc((size_t)(Skv ? Skv : 1));
    if (!s || !o || !att) {
        free(s), free(o), free(att);
        return -1;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const float *kb = k + b * p->k.batch + (h / group) * p->k.head;
            const float *vb = v + b * p->v.batch + (h / group) * p->v.head;
            for (int64_t i = 0; i < Sq; i++) {
                const float *qi = q + b * p->q.batch + h * p->q.head + i * p->q.token;
                double mx = -INFINITY, sum = 0, f2 = 0;
                for (int64_t j = 0; j < Skv; j++) {
                    att[j] = (unsigned char)jt_mask_attends(m, p, b, h, i, j);
                    if (!att[j]) continue;
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += (double)qi[d] * (double)kb[j * p->k.token + d];
                    s[j] = scale * dot + jt_key_bias(m, b, h, j);
                    if (s[j] > mx) mx = s[j];
                }
                double *fr = &floor[(b * H + h) * Sq + i];
                if (mx == -INFINITY) { /* no key: the output is 0 whatever the logits */
                    *fr = 0;
                    continue;
                }
                for (int64_t d = 0; d < D; d++) o[d] = 0;
                for (int64_t j = 0; j < Skv; j++)
                    if (att[j]) sum += exp(s[j] - mx);
                for (int64_t j = 0; j < Skv; j++)
                    if (att[j]) {
                        const double pj = exp(s[j] - mx) / sum;
                        for (int64_t d = 0; d < D; d++) o[d] += pj * (double)vb[j * p->v.token + d];
                    }
                for (int64_t j = 0; j < Skv; j++)
                    if (att[j]) {
                        const double pj = exp(s[j] - mx) / sum, u = ulp_f32(s[j]);
                        double dv2 = 0;
                        for (int64_t d = 0; d < D; d++) {
                            const double t = (double)vb[j * p->v.token + d] - o[d];
                            dv2 += t * t;
                        }
                        f2 += pj * pj * dv2 * u * u / 12.0;
                    }
                *fr = sqrt(f2);
            }
        }
    free(s), free(o), free(att);
    return 0;
}
