/* The tolerance model of docs/DESIGN.md §2, written once: the error metrics of an output
 * against the float64 reference, and the gate each precision mode must pass. Used by the jattn
 * command's --check, the tests, the fuzzers and the benchmarks; the gate's numbers below are
 * the only copy in C (the Python and Rust test suites mirror them, citing this file). */
#ifndef JATTN_METRICS_H
#define JATTN_METRICS_H

#include <stdint.h>

#include "jattn.h"

/* The gate's constants. f32: rel_l2, max_abs relative to max(1, max|ref|), cosine. tf32: rel_l2.
 * lse: |lse - ref| relative to max(1, |ref|), per precision. */
#define JATTN_GATE_F32_REL_L2 2e-6
#define JATTN_GATE_F32_MAX_ABS 1e-5
#define JATTN_GATE_F32_COS 0.99999
#define JATTN_GATE_TF32_REL_L2 1e-3
#define JATTN_GATE_LSE_F32 1e-5
#define JATTN_GATE_LSE_TF32 1e-2

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
 *   f32:  rel_l2 <= JATTN_GATE_F32_REL_L2, max_abs <= JATTN_GATE_F32_MAX_ABS * max(1, max|ref|),
 *         cos >= JATTN_GATE_F32_COS
 *   tf32: rel_l2 <= JATTN_GATE_TF32_REL_L2
 * and, for both, every element finite where the reference is.
 * @return 1 when m passes, 0 otherwise. */
int jattn_metrics_pass(const jattn_metrics *m, jattn_precision precision);

/* The backward's gate (f32), on each gradient (dq, dk, dv) separately against a float64
 * evaluation of the same float32 inputs:
 *   rel_l2 <= 5e-6, max_abs <= 2e-5 * max(1, max|ref|), cos >= 0.99999,
 * every element finite where the reference is. (Looser than the forward's: the gradients are
 * sums of products of the forward's weights, each carrying its rounding.) A reference that is
 * all zero (a gradient that vanishes exactly: dq and dk with a single key) has no direction for
 * rel_l2 and cos to measure: there max_abs alone is the gate.
 * @return 1 when m passes, 0 otherwise. */
#define JATTN_BWD_GATE_REL_L2 5e-6
#define JATTN_BWD_GATE_MAX_ABS 2e-5
#define JATTN_BWD_GATE_COS 0.99999
int jattn_metrics_pass_backward(const jattn_metrics *m);

/* The backward's gate where float32 itself stops it (docs/DESIGN.md §2): a backward is handed out
 * and lse in float32 and evaluates logits in float32, and on peaky rows (logits of tens and more)
 * one float32 ulp of lse, or of a dominant logit, is a relative error of the weights of its row
 * past the gate, whatever the backward does. So each metric of a gradient passes when it meets the
 * gate above or lies within JATTN_BWD_FLOOR_TIMES of the same metric of the float32 floor: a
 * float64 backward of the same float32 inputs handed the float64 forward's out and lse each
 * rounded to float32 once, the larger of two such evaluations, with its logits scale q.k rounded
 * to float32 once and with them exact (1 - cos and max_abs: within the
 * square of JATTN_BWD_FLOOR_TIMES, as 1 - cos grows with rel_l2^2 and a maximum over the elements
 * varies more from draw to draw). The caller computes the floor in float64 from the inputs
 * (tests/test_backward.c, python/tests). Every element finite where the reference is, in both cases.
 * @return 1 when m passes, 0 otherwise. */
#define JATTN_BWD_FLOOR_TIMES 3
int jattn_metrics_pass_backward_floor(const jattn_metrics *m, const jattn_metrics *floor);

/* The LSE gate: |lse - ref| <= tol * max(1, |ref|) with tol JATTN_GATE_LSE_F32 (f32) or
 * JATTN_GATE_LSE_TF32 (tf32).
 * @return 1 when every element passes. */
int jattn_lse_pass(const float *lse, const float *ref, int64_t n, jattn_precision precision);

#endif
