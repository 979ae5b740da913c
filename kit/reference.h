/* The float64 reference of a problem on every query row or on sampled rows (so that large
 * problems stay cheap to check), compared under the gate of metrics.h: the parity check of the
 * command's run, bench and --parallel, and of the benchmarks. */
#ifndef JATTN_KIT_REFERENCE_H
#define JATTN_KIT_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "jattn.h"
#include "metrics.h"

/* The reference work of a full check: the FLUX.2 call of the command's default job, 4 B H S^2 D at
 * (1, 24, 1536, 128), about 1.5 s of the float64 reference on 2 cores. Larger problems are checked on
 * every n-th query row so that the check costs about as much (`jattn run --check`, `jattn run
 * --parallel`, bench/parallel/sp_gpu_bench). */
#define KIT_CHECK_BUDGET_FLOPS (4.0 * 1 * 24 * 1536 * 1536 * 128)

/* The reference output on every `stride`-th query row (stride 1: all rows), computed once and
 * compared with any number of outputs of the same problem and inputs. The sampled rows are a
 * sub-problem whose q strides step over rows, so the public API computes it. */
typedef struct kit_reference {
    jattn_problem dense;        /* the sub-problem: sampled q rows, out dense token-major [B, rows, H*D] */
    int64_t stride, rows;       /* rows = ceil(Sq / stride) per (b, h) */
    float *out, *lse;           /* reference, laid out as dense (lse [B, H, rows]) */
    float *gather, *gather_lse; /* scratch: the output's sampled rows in the same layout */
} kit_reference;

typedef struct kit_parity {
    jattn_metrics m;
    int pass;
    int lse_checked, lse_pass;
} kit_parity;

/* Computes the reference of p (any valid strides) on q, k, v with the ref backend on all cores,
 * applying the key padding kp (may be NULL), sampling query rows so that it costs at most
 * about budget_flops (at least one row per head).
 * @return JATTN_OK, or the failing status with a one-line reason in err. */
jattn_status kit_reference_compute(kit_reference *r, const jattn_problem *p, const jattn_key_padding *kp,
                                   const float *q, const float *k, const float *v, double budget_flops, int want_lse,
                                   char *err, size_t errlen);

/* Compares out (laid out as p's out strides) and lse (contiguous [B, H, Sq], may be NULL) with
 * the reference, under the gate of `precision`. */
void kit_reference_compare(kit_reference *r, const jattn_problem *p, const float *out, const float *lse,
                           jattn_precision precision, kit_parity *res);

void kit_reference_free(kit_reference *r);

#endif
