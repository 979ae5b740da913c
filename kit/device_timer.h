/* Device-resident timing for the jattn command: the cuda backend timed on its own, without
 * host-device copies in the measurement. */
#ifndef JATTN_DEVICE_TIMER_H
#define JATTN_DEVICE_TIMER_H

#include <stddef.h>

#include "jattn.h"

/* Copies q, k, v (host, laid out as p's strides; k and v of its key/value heads) and the mask's arrays
 * (host; mask may be NULL: key padding, causal, blocks, segments, key bias) to the device once, runs
 * jattn_forward_masked on device pointers `warmup` times, then `reps` times each timed with CUDA
 * events, and copies the output (and lse when not NULL) back. *ms_median = median time of one call.
 * @return 0; -1 when CUDA is not built in or the run fails (message in err). */
int jattn_device_timed_run(const jattn_problem *p, const jattn_exec *e, const jattn_mask *mask, const float *q,
                           const float *k, const float *v, float *out, float *lse, int warmup, int reps,
                           double *ms_median, char *err, size_t errlen);

/* The backward the same way: q, k, v, out, lse, dout and the mask's arrays (host; p's strides, k and v
 * of its key/value heads, the gradients at jattn_grad_strides_like(p); mask may be NULL) copied once,
 * jattn_backward_masked on device pointers with a device workspace of the size its plan reports,
 * `warmup` untimed calls, then `reps` calls each timed with CUDA events; dq, dk, dv copied back.
 * *ms_median = median time of one call.
 * @return 0; -1 when CUDA is not built in or the run fails (message in err). */
int jattn_device_timed_backward(const jattn_problem *p, const jattn_exec *e, const jattn_mask *mask, const float *q,
                                const float *k, const float *v, const float *out, const float *lse, const float *dout,
                                float *dq, float *dk, float *dv, int warmup, int reps, double *ms_median, char *err,
                                size_t errlen);

#endif
