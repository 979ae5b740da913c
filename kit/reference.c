/* The sampled float64 reference and its comparison; see reference.h. */
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor.h"

void kit_reference_free(kit_reference *r) {
    free(r->out);
    free(r->lse);
    free(r->gather);
    free(r->gather_lse);
    memset(r, 0, sizeof *r);
}

jattn_status kit_reference_compute(kit_reference *r, const jattn_problem *p, const jattn_key_padding *kp,
                                   const float *q, const float *k, const float *v, double budget_flops, int want_lse,
                                   char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    int64_t stride = 1;
    double flops = kit_flops(p);
    if (flops > budget_flops) {
        double s = ceil(flops / budget_flops);
        stride = s >= (double)p->seq_q ? p->seq_q : (int64_t)s;
    }
    r->stride = stride;
    r->rows = (p->seq_q + stride - 1) / stride;
    r->dense = *p;
    r->dense.seq_q = r->rows;
    if (r->rows > 1) r->dense.q.token = p->q.token * stride; /* (rows-1)*stride < Sq: the span still fits */
    r->dense.out = jattn_strides_token_major(p->heads, r->rows, p->head_dim);
    int64_t n_out = kit_elems(p, r->rows), n_lse = p->batch * p->heads * r->rows;
    r->out = kit_alloc_floats(n_out);
    r->gather = kit_alloc_floats(n_out);
    if (want_lse) {
        r->lse = kit_alloc_floats(n_lse);
        r->gather_lse = kit_alloc_floats(n_lse);
    }
    if (!r->out || !r->gather || (want_lse && (!r->lse || !r->gather_lse))) {
        kit_reference_free(r);
        snprintf(err, errlen, "reference: out of memory for %lld output elements", (long long)n_out);
        return JATTN_ERROR_OUT_OF_MEMORY;
    }
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    jattn_status st = jattn_forward_padded(NULL, &r->dense, &e, q, k, v, kp, r->out, want_lse ? r->lse : NULL);
    if (st != JATTN_OK) {
        snprintf(err, errlen, "reference: %s: %s", jattn_status_name(st), jattn_last_error());
        kit_reference_free(r);
    }
    return st;
}

void kit_reference_compare(kit_reference *r, const jattn_problem *p, const float *out, const float *lse,
                           jattn_precision precision, kit_parity *res) {
    const jattn_problem *d = &r->dense;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < r->rows; i++)
                memcpy(r->gather + b * d->out.batch + h * d->out.head + i * d->out.token,
                       out + b * p->out.batch + h * p->out.head + i * r->stride * p->out.token,
                       (size_t)p->head_dim * sizeof(float));
    memset(res, 0, sizeof *res);
    jattn_metrics_compute(d, r->gather, r->out, &res->m);
    res->pass = jattn_metrics_pass(&res->m, precision);
    if (lse && r->lse) {
        for (int64_t bh = 0; bh < p->batch * p->heads; bh++)
            for (int64_t i = 0; i < r->rows; i++) r->gather_lse[bh * r->rows + i] = lse[bh * p->seq_q + i * r->stride];
        res->lse_checked = 1;
        res->lse_pass = jattn_lse_pass(r->gather_lse, r->lse, p->batch * p->heads * r->rows, precision);
    }
}
