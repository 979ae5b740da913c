/* Pieces the jattn subcommands share: synthetic inputs, clocks, medians, the mapping of
 * library statuses to exit codes, the parity check against the float64 reference (full or on
 * sampled query rows), and a one-line JSON writer. */
#ifndef JATTN_CLI_COMMON_H
#define JATTN_CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "jattn.h"
#include "metrics.h"

/* FLOPs of one call: 4 * B * H * Sq * Skv * D (two matrix products of 2 FLOPs per term). */
double cli_flops(const jattn_problem *p);

/* Elements of a contiguous tensor of the problem: B*H*S*D (fits: the problem is validated). */
int64_t cli_elems(const jattn_problem *p, int64_t seq);

/* Fills x[0..n) with standard normal values from (seed, stream): reproducible, and each
 * stream (q = 0, k = 1, v = 2) independent. */
void cli_fill_normal(float *x, int64_t n, uint64_t seed, uint64_t stream);

/* 64-byte aligned allocation of n floats (NULL on failure or overflow); free with free(). */
float *cli_alloc_floats(int64_t n);

/* Whether `bytes` of buffers fit in this machine's physical memory: checked before allocating,
 * since with memory overcommit an allocation far larger than memory may succeed and then
 * thrash when touched. @return 0 (fits, or memory size unknown), or -1 with a one-line
 * "out of memory: ..." in err. */
int cli_memory_fits(double bytes, const char *what, char *err, size_t errlen);

/* Monotonic clock in seconds. */
double cli_now(void);

/* Median of n values (sorts them in place). */
double cli_median(double *v, int n);

/* "0.12 0.10 0.05" from /proc/loadavg, or "unknown". */
void cli_load_average(char *buf, size_t cap);

/* Exit code for a failing library status: 2 for an invalid problem or an unsupported
 * combination the user asked for, 1 for runtime failures (backend unavailable, out of
 * memory, CUDA errors). */
int cli_exit_for_status(jattn_status st);

/* ---- timing ---- */

typedef struct cli_timing {
    double ms, ms_min, ms_max; /* median, min and max of one call; min/max NaN when unknown */
    int reps;
    const char *clock;         /* "host" (monotonic clock around jattn_forward) or "device" */
} cli_timing;

/* Host timing of jattn_forward_padded (kp may be NULL): one warm-up call, then `reps` timed
 * calls; reps 0 = automatic: about auto_seconds worth, within [reps_min, reps_max].
 * @return the first failing status. */
jattn_status cli_time_forward(jattn_ctx *ctx, const jattn_problem *p, const jattn_exec *e, const jattn_key_padding *kp,
                              const float *q, const float *k, const float *v, float *out, float *lse, int reps,
                              double auto_seconds, int reps_min, int reps_max, cli_timing *t);

/* ---- parity against the reference ---- */

/* The reference output on every `stride`-th query row (stride 1: all rows), computed once and
 * compared with any number of outputs of the same problem and inputs. The sampled rows are a
 * sub-problem whose q strides step over rows, so the public API computes it. */
typedef struct cli_reference {
    jattn_problem dense;  /* the sub-problem: sampled q rows, out dense token-major [B, rows, H*D] */
    int64_t stride, rows; /* rows = ceil(Sq / stride) per (b, h) */
    float *out, *lse;     /* reference, laid out as dense (lse [B, H, rows]) */
    float *gather, *gather_lse; /* scratch: the output's sampled rows in the same layout */
} cli_reference;

typedef struct cli_parity {
    jattn_metrics m;
    int pass;
    int lse_checked, lse_pass;
} cli_parity;

/* Computes the reference of p (any valid strides) on q, k, v with the ref backend on all cores,
 * applying the key padding kp (may be NULL), sampling query rows so that it costs at most
 * about budget_flops (at least one row per head).
 * @return JATTN_OK, or the failing status with a one-line reason in err. */
jattn_status cli_reference_compute(cli_reference *r, const jattn_problem *p, const jattn_key_padding *kp,
                                   const float *q, const float *k, const float *v, double budget_flops, int want_lse,
                                   char *err, size_t errlen);

/* Compares out (laid out as p's out strides) and lse (contiguous [B, H, Sq], may be NULL) with
 * the reference, under the gate of `precision`. */
void cli_reference_compare(cli_reference *r, const jattn_problem *p, const float *out, const float *lse,
                           jattn_precision precision, cli_parity *res);

void cli_reference_free(cli_reference *r);

/* ---- one JSON object on one line ---- */
typedef struct cli_json {
    FILE *f;
    int fields;
} cli_json;

void cli_json_begin(cli_json *j, FILE *f);
void cli_json_str(cli_json *j, const char *key, const char *value); /* NULL -> null */
void cli_json_int(cli_json *j, const char *key, long long value);
void cli_json_num(cli_json *j, const char *key, double value); /* non-finite -> null */
void cli_json_bool(cli_json *j, const char *key, int value);
void cli_json_null(cli_json *j, const char *key);
void cli_json_end(cli_json *j); /* "}\n" */

#endif
