/* The timing loop of the measurement kit: jattn_forward_padded timed on the host clock, one
 * warm-up call, then the median of the timed repeats. */
#ifndef JATTN_KIT_TIMING_H
#define JATTN_KIT_TIMING_H

#include "jattn.h"

typedef struct kit_timing {
    double ms, ms_min, ms_max; /* median, min and max of one call; min/max NaN when unknown */
    int reps;
    const char *clock; /* "host" (monotonic clock around jattn_forward) or "device" */
} kit_timing;

/* Host timing of jattn_forward_padded (kp may be NULL): one warm-up call, then `reps` timed
 * calls; reps 0 = automatic: about auto_seconds worth, within [reps_min, reps_max].
 * @return the first failing status. */
jattn_status kit_time_forward(jattn_ctx *ctx, const jattn_problem *p, const jattn_exec *e, const jattn_key_padding *kp,
                              const float *q, const float *k, const float *v, float *out, float *lse, int reps,
                              double auto_seconds, int reps_min, int reps_max, kit_timing *t);

#endif
