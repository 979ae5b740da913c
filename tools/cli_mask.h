/* The masks and grouped-query heads of `jattn run` and `jattn bench` (--kv-heads, --causal, --blocks,
 * --segments, --segments-kv, --key-bias, beside the key padding of --kv-len and --key-mask): the
 * problem's key/value heads, the jattn_mask the options make, the plan that runs it, the timing of
 * its runs, and its check against the float64 reference with the same mask. Through the public API
 * only (jattn.h), as the rest of the command. */
#ifndef JATTN_CLI_MASK_H
#define JATTN_CLI_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "cli_args.h"
#include "jattn.h"
#include "reference.h"
#include "tensor.h"
#include "timing.h"

/* Sets p's key/value heads from --kv-heads: p->kv_heads, and k and v dense head-major
 * [B, Hkv, Skv, D]. No effect without --kv-heads. */
void cli_apply_kv_heads(const cli_options *o, jattn_problem *p);

/* --kv-heads against the heads: it must divide them. @return CLI_EXIT_OK, or CLI_EXIT_USAGE with
 * the error printed (naming the option). */
int cli_check_kv_heads(const cli_options *o, int64_t heads);

/* Elements of a dense k or v: B * Hkv * Skv * D (Hkv: kit_kv_heads). */
int64_t cli_kv_elems(const jattn_problem *p);

typedef struct cli_mask {
    jattn_mask m; /* what the calls take (cli_mask_of) */
    int any;      /* a part is set: key padding or one of the options' */
    int64_t *block_q, *block_kv, *cu_q, *cu_kv;
    float *bias;
    char note[320]; /* the parts, for the report ("" without a mask) */
} cli_mask;

/* Makes the mask the options ask for, for a valid problem p, with the key padding kp (NULL: none):
 * --blocks N equal blocks over the queries and over the keys, --segments (--segments-kv) as offsets,
 * --key-bias standard normal values from (seed, stream 9) with about 1 key in 8 -inf.
 * @return CLI_EXIT_OK, or an exit code with the error printed (an option's value that does not fit
 * the problem, named; out of memory). */
int cli_mask_make(const cli_options *o, const jattn_problem *p, const jattn_key_padding *kp, uint64_t seed,
                  cli_mask *cm);
void cli_mask_free(cli_mask *cm);

/* The mask to pass: &cm->m, or NULL when no part is set. */
const jattn_mask *cli_mask_of(const cli_mask *cm);

/* Host timing of a forward plan's runs, as kit_time_forward: one warm-up run, then `reps` timed
 * runs (0: about auto_seconds worth within [reps_min, reps_max]). @return the first failing status. */
jattn_status cli_time_plan(const jattn_plan *plan, jattn_ctx *ctx, const float *q, const float *k, const float *v,
                           const jattn_mask *m, float *out, float *lse, int reps, double auto_seconds, int reps_min,
                           int reps_max, kit_timing *t);

/* The reference of a masked call: the ref backend's output, under the same mask, of the first
 * batches and heads of p whose reference work, 4 D per attended pair, fits in budget_flops. Whole
 * query rows (a mask depends on the query's position, so rows are not sampled as kit_reference
 * does), and at least one group of query heads sharing a key/value head. Held in a kit_reference:
 * dense is the sub-problem (p's strides: out at out's strides), stride 1, rows Sq, out the
 * reference output (out's extent), lse [batches, heads, Sq] when wanted, gather_lse scratch; freed
 * by kit_reference_free. pairs: kit_attended_pairs(p, m), for the budget.
 * @return JATTN_OK, or the failing status with a one-line reason in err. */
jattn_status cli_mask_reference(kit_reference *r, const jattn_problem *p, const jattn_mask *m, double pairs,
                                const float *q, const float *k, const float *v, double budget_flops, int want_lse,
                                char *err, size_t errlen);

/* Compares out (p's out strides) and lse (contiguous [B, H, Sq], may be NULL) with the reference,
 * on its batches and heads, under the gate of precision. */
void cli_mask_compare(kit_reference *r, const jattn_problem *p, const float *out, const float *lse,
                      jattn_precision precision, kit_parity *res);

/* The parity line's "what": " with the same mask" and, when only some were checked, which. */
void cli_mask_checked(const kit_reference *r, const jattn_problem *p, char *buf, size_t cap);

/* The problem's description for the report's first line: "" or ", kv_heads 4" and the mask's note. */
void cli_mask_describe(const jattn_problem *p, const cli_mask *cm, char *buf, size_t cap);

#endif
