/* The tolerance model of DESIGN.md §2, written once: the error metrics of an output against
 * the float64 reference, and the gate each precision mode must pass. Used by the jattn
 * command's --check and by every test. */
#ifndef JATTN_METRICS_H
#define JATTN_METRICS_H

#include <stdint.h>

#include "jattn.h"

typedef struct jattn_metrics {
    double max_abs;    /* max |out - ref| */
    double rel_l2;     /* ||out - ref||_2 / ||ref||_2  (||out - ref||_2 when ref is all zero) */
    double cos;        /* cosine similarity of out and ref */
    double max_ref;    /* max |ref| */
    int64_t count;     /* elements compared */
    int64_t nonfinite; /* elements where out is not finite but ref is */
} jattn_metrics;

/* Compares out and ref, both laid out as the problem's out strides, over [B, H, Sq, D]. */
void jattn_metrics_compute(const jattn_problem *p, const float *out, const float *ref, jattn_metrics *m);

/* Compares two dense arrays of n elements (lse rows, sampled rows). */
void jattn_metrics_compute_dense(const float *out, const float *ref, int64_t n, jattn_metrics *m);

/* The gate of a precision mode:
 *   f32:  rel_l2 <= 2e-6, max_abs <= 1e-5 * max(1, max|ref|), cos >= 0.99999
 *   tf32: rel_l2 <= 1e-3
 * and, for both, every element finite where the reference is.
 * @return 1 when m passes, 0 otherwise. */
int jattn_metrics_pass(const jattn_metrics *m, jattn_precision precision);

/* The LSE gate: |lse - ref| <= tol * max(1, |ref|) with tol 1e-5 (f32) or 1e-2 (tf32).
 * @return 1 when every element passes. */
int jattn_lse_pass(const float *lse, const float *ref, int64_t n, jattn_precision precision);

#endif
