/* The forward's float32-logit floor (docs/DESIGN.md §2, "Where the gate meets float32 itself"):
 * for each query row, how far float32 logits alone move its output. A row whose logits are large,
 * or whose few largest logits nearly tie, moves by sum_j P_j (v_j - o) e_j for logit errors e_j; a
 * kernel that forms each logit as a float32 dot product carries errors of the order of the
 * logit's rounding to float32, and in such a row that alone can pass the gate's rel_l2 (a case of
 * one or two rows, where nothing dilutes it). The floor of a row is the rms of that movement when
 * each logit is rounded to float32 once (a rounding error uniform in +-ulp/2, rms ulp / sqrt(12),
 * independent from key to key), to first order:
 *
 *     F^2 = sum_d sum_j (P_j (v_jd - o_d))^2 ulp(s_j)^2 / 12
 *
 * from the float64 logits s_j = scale q.k_j + bias_j, weights P_j and output o of the row (mask
 * and grouped-query heads as tests/mask_rule.h reads include/jattn.h). It is a property of the
 * inputs, not of any backend's result, and a row that attends no key has F = 0. */
#ifndef JATTN_TEST_LOGIT_FLOOR_H
#define JATTN_TEST_LOGIT_FLOOR_H

#include <stdint.h>

#include "jattn.h"

/* A row of a forward's output passes past the f32 gate when its error's L2 norm is within this many
 * times its floor F (jt_case_check): a kernel whose float32 dot products err by a few of their own
 * roundings stays inside it, a wrong weight or a lost key does not. */
#define JT_LOGIT_FLOOR_TIMES 4

/* Writes F of every query row of p, floor[(b * heads + h) * seq_q + i], from q, k, v through p's
 * strides and the mask m (NULL: none). @return 0, or -1 when memory runs out. */
int jt_logit_floor_rows(const jattn_problem *p, const jattn_mask *m, const float *q, const float *k, const float *v,
                        double *floor);

#endif
