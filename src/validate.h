/* Validation of what a caller hands the public API: the problem, the gradient strides, the exec,
 * the mask (its structure when a plan is made, its arrays when the plan runs) and the pointers.
 * Every check names the offending field in its message (jattn_fail) and writes nothing else.
 * Used by the dispatch layer only (src/plan.c). */
#ifndef JATTN_VALIDATE_H
#define JATTN_VALIDATE_H

#include <stdint.h>

#include "backend.h"

/* The tensors of a call, in the order of jattn_plan.spans: the forward's q, k, v, out, lse, then
 * the backward's dout, dlse, dq, dk, dv. */
enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DLSE, T_DQ, T_DK, T_DV, T_COUNT };

/* Elements each tensor of a valid problem spans (0 for a tensor without elements). */
typedef struct problem_spans {
    int64_t t[T_COUNT];
} problem_spans;

/* The problem: dimensions (batch, heads, seq_q, seq_kv >= 0; head_dim >= 1; kv_heads 0 or
 * dividing heads), scale, dtype, and the strides of q, k, v and out (any valid layout, no
 * self-overlap, no overflow). Fills spans->t[T_Q .. T_LSE]. */
jattn_status jattn_check_problem(const jattn_problem *p, problem_spans *spans);

/* The backward's gradient strides (resolved: never NULL). Fills spans->t[T_DOUT .. T_DV]. */
jattn_status jattn_check_grad(const jattn_problem *p, const jattn_grad_strides *g, problem_spans *spans);

/* The enums and thread count of an exec, and its alignment (0 or a power of two >= 4). */
jattn_status jattn_check_exec(const jattn_exec *e);

/* The structure of a mask (which parts are set, their counts and strides) against the problem:
 * what a plan is made for. NULL: no mask. Nothing is read through its pointers. */
jattn_status jattn_check_mask_shape(const jattn_problem *p, const jattn_mask *m, jattn_mask_shape *shape);

/* A byte range [lo, hi) of an argument, for the overlap checks. */
typedef struct byte_range {
    const char *name;
    uintptr_t lo, hi;
} byte_range;

/* The range of `span` elements of `elem_bytes` at ptr: the pointer aligned to the element, the
 * range not wrapping the address space. */
jattn_status jattn_make_range(const char *name, const void *ptr, int64_t span, size_t elem_bytes, byte_range *r);

int jattn_ranges_overlap(const byte_range *a, const byte_range *b);

/* A run's mask: its structure the plan's, its arrays in range and (host memory) their values
 * valid, none overlapping an output (n_out byte ranges). Fills the call's mask fields. */
jattn_status jattn_check_mask_data(const jattn_plan *plan, const jattn_mask *m, const byte_range *outputs, int n_out,
                                   jattn_call *call);

#endif
