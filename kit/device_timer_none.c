/* The device timer when CUDA is not built in. */
#include <stdio.h>

#include "device_timer.h"

int jattn_device_timed_run(const jattn_problem *p, const jattn_exec *e, const jattn_mask *mask, const float *q,
                           const float *k, const float *v, float *out, float *lse, int warmup, int reps,
                           double *ms_median, char *err, size_t errlen) {
    (void)p, (void)e, (void)mask, (void)q, (void)k, (void)v, (void)out, (void)lse, (void)warmup, (void)reps,
        (void)ms_median;
    snprintf(err, errlen, "device timing: cuda is not built into this jattn");
    return -1;
}

int jattn_device_timed_backward(const jattn_problem *p, const jattn_exec *e, const jattn_mask *mask, const float *q,
                                const float *k, const float *v, const float *out, const float *lse, const float *dout,
                                float *dq, float *dk, float *dv, int warmup, int reps, double *ms_median, char *err,
                                size_t errlen) {
    (void)p, (void)e, (void)mask, (void)q, (void)k, (void)v, (void)out, (void)lse, (void)dout, (void)dq, (void)dk,
        (void)dv, (void)warmup, (void)reps, (void)ms_median;
    snprintf(err, errlen, "device timing: cuda is not built into this jattn");
    return -1;
}
