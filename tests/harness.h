/* Test harness shared by every test: seeds, random inputs from the four distributions of
 * docs/DESIGN.md §2, cases with guarded and poisoned buffers, and the check of one call against
 * the float64 reference with the tolerance model of kit/metrics.h.
 *
 * Seeds: each test process draws a fresh seed and prints it; JATTN_TEST_SEED=<n> replays it. */
#ifndef JATTN_TEST_HARNESS_H
#define JATTN_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "jattn.h"
#include "metrics.h"
#include "rng.h"
#include "tensor.h"

/* Exit code ctest reads as "skipped" (SKIP_RETURN_CODE). */
#define JT_SKIP 77

/* ---- random numbers ---- */
typedef jattn_rng jt_rng; /* kit/rng.h, shared with the jattn command */

/* The process seed: JATTN_TEST_SEED if set, else fresh; printed once on first use. */
uint64_t jt_seed(void);
void jt_rng_init(jt_rng *r, uint64_t seed);
uint64_t jt_next(jt_rng *r);
double jt_uniform(jt_rng *r); /* [0, 1) */
double jt_normal(jt_rng *r);

/* ---- input distributions ---- */
typedef enum jt_dist {
    JT_UNIFORM, /* q, k, v uniform in [-1, 1] */
    JT_NORMAL,  /* standard normal */
    JT_PEAKY,   /* q, k normal scaled so the logits have standard deviation 8; v normal */
    JT_LARGE,   /* q, k, v uniform in [-1e3, 1e3]: products up to 1e6, raw dot products near 1e7
                   (past fp16's range; an un-scaled exp of them overflows); an explicit scale makes
                   the logits' standard deviation 8, as peaky. Larger logit spreads are not a fair
                   f32 gate: a logit of magnitude L carries float32 rounding ~6e-8*L, and the
                   output moves by about that much (softmax conditioning); test_edges covers
                   logits up to 1e4 with inputs built so that rounding cannot flip the result. */
    JT_DIST_COUNT
} jt_dist;
const char *jt_dist_name(jt_dist d);

/* ---- a case: a problem and its buffers ---- */
typedef struct jt_case {
    jattn_problem p;
    float *q, *k, *v, *out, *lse;     /* out and lse are poisoned before each run */
    float *ref, *ref_lse;             /* reference output (out's layout) and lse */
    int64_t n_q, n_k, n_v, n_out;     /* allocated elements: the tensor's span plus guards */
    uint64_t input_hash;              /* of q, k, v as filled, to prove no input was modified */
    const jattn_key_padding *padding; /* NULL (jt_case_init), or the key padding of every call:
                                         the reference and the checked call both apply it */
    const jattn_mask *mask;           /* NULL (jt_case_init), or the mask of every call (it wins
                                         over `padding`); k and v have the problem's kv_heads */
    char label[200];
} jt_case;

/* Allocates buffers for p (any valid strides): span + a guard region on each side. Inputs are
 * NaN everywhere (gaps and guards included) until filled; a backend that reads outside the
 * tensor therefore produces NaN and fails the check. @return 0, or -1 on allocation failure. */
int jt_case_init(jt_case *c, const jattn_problem *p);
void jt_case_free(jt_case *c);

/* Fills the elements q, k, v address from distribution d (sets p.scale for JT_LARGE). */
void jt_case_fill(jt_case *c, jt_dist d, jt_rng *r);

/* Records the hash of q, k, v after a test filled them by hand (jt_case_fill does this
 * itself), so that jt_case_check can prove no input was modified. */
void jt_case_seal(jt_case *c);

/* The mask a case's calls take: c->mask, else one holding c->padding (in *scratch), else NULL. */
const jattn_mask *jt_case_mask(const jt_case *c, jattn_mask *scratch);

/* Computes the reference output and lse with the ref backend. @return the status. */
jattn_status jt_case_reference(jt_case *c);

/* Poisons out and lse (NaN), runs jattn_forward with exec, and checks: status OK; every
 * element of out finite where the reference is and within the gate of exec->precision (f32:
 * past the gate, rows within JT_LOGIT_FLOOR_TIMES of their float32-logit floor are excused,
 * named in a note, and the rest must pass: logit_floor.h);
 * lse (when want_lse) within its gate; the guards and the gaps between rows of out still
 * poisoned; the inputs unchanged. Prints one line on failure (label, seed, metrics, first
 * mismatches) and, when JATTN_TEST_VERBOSE is set, on success. @return 1 pass, 0 fail. */
int jt_case_check(jt_case *c, const jattn_exec *exec, int want_lse);

/* The metrics of the last jt_case_check (for tests that report them). */
const jattn_metrics *jt_last_metrics(void);

/* Which backends can run in this build and on this machine (jattn_select on a small problem). */
int jt_backend_present(jattn_backend b);

/* Whether backend b (AUTO: its choice) takes JATTN_PRECISION_TF32: jattn_select (backward:
 * jattn_backward_select) of a small problem. The suites test tf32 where the library offers it. */
int jt_backend_takes_tf32(jattn_backend b, int backward);

/* The kernel a call of `pass` with this problem, mask structure (NULL: none) and exec would run: its plan's
 * (jattn_plan_create, jattn_plan_selection), the decision the call itself makes; a plan's alignment is the
 * exec's (0: 16 bytes, what the tests' allocations give). @return the kernel's name (static storage), or
 * "refused" when no plan can be made. */
const char *jt_plan_kernel(jattn_pass pass, const jattn_problem *p, const jattn_mask *mask, const jattn_exec *e);

/* The workspace a call of `pass` needs (jattn_plan_workspace_size of its plan, made as jt_plan_kernel's; grad
 * NULL: the gradients like the problem's): the least a caller's workspace may have. jattn_workspace_size and
 * jattn_backward_workspace_size report at least this (they cover any key padding). @return the bytes, or 0
 * when no plan can be made or none is needed. */
size_t jt_plan_workspace(jattn_pass pass, const jattn_problem *p, const jattn_grad_strides *grad,
                         const jattn_mask *mask, const jattn_exec *e);

/* The library's description of backend b (jattn_backend_info_at). @return 1, or 0 for AUTO or a
 * value the library does not know. */
int jt_backend_info(jattn_backend b, jattn_backend_info *info);

/* The backend argv[1] names, by the library's names (jattn_backend_name; "auto" only when
 * allow_auto), `fallback` when there is no argv[1]. @return 0 and *out, or 2 after printing
 * "usage: PROGRAM <the library's names> EXTRA" on stderr. */
int jt_backend_arg(int argc, char **argv, const char *fallback, int allow_auto, const char *extra, jattn_backend *out);

/* Counters for a test's summary line. */
typedef struct jt_tally {
    int passed, failed;
} jt_tally;
void jt_tally_add(jt_tally *t, int ok);
/* Prints "name: P passed, F failed (seed N)" and @return the process exit code. */
int jt_tally_finish(const jt_tally *t, const char *name);

/* Expect a status: prints the mismatch and the message. @return 1 when st == want. */
int jt_expect_status(jattn_status st, jattn_status want, const char *what);

#endif
