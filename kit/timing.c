/* The host timing loop; see timing.h. */
#include "timing.h"

#include <math.h>
#include <stdlib.h>

#include "clock.h"

jattn_status kit_time_forward(jattn_ctx *ctx, const jattn_problem *p, const jattn_exec *e, const jattn_key_padding *kp,
                              const float *q, const float *k, const float *v, float *out, float *lse, int reps,
                              double auto_seconds, int reps_min, int reps_max, kit_timing *t) {
    double t0 = kit_now();
    jattn_status st = jattn_forward_padded(ctx, p, e, q, k, v, kp, out, lse);
    double warm = kit_now() - t0;
    if (st != JATTN_OK) return st;
    if (!reps) {
        double r = ceil(auto_seconds / (warm > 1e-9 ? warm : 1e-9));
        reps = r < reps_min ? reps_min : r > reps_max ? reps_max : (int)r;
    }
    double *times = malloc((size_t)reps * sizeof *times);
    if (!times) return JATTN_ERROR_OUT_OF_MEMORY;
    for (int r = 0; r < reps && st == JATTN_OK; r++) {
        t0 = kit_now();
        st = jattn_forward_padded(ctx, p, e, q, k, v, kp, out, lse);
        times[r] = 1e3 * (kit_now() - t0);
    }
    if (st == JATTN_OK) {
        t->ms = kit_median(times, reps); /* sorts in place */
        t->ms_min = times[0];
        t->ms_max = times[reps - 1];
        t->reps = reps;
        t->clock = "host";
    }
    free(times);
    return st;
}
