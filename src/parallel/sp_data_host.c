/* The data work of the sequence-parallel algorithms on host memory: row copies and the lse
 * merge, plain loops on the calling thread (they stream O(S) data beside the O(S^2) attention). */
#include <math.h>
#include <string.h>

#include "sp_data.h"

static jattn_status host_copy(const sp_data *d, float *dst, jattn_strides ds, const float *src, jattn_strides ss,
                              sp_extent n) {
    (void)d;
    for (int64_t b = 0; b < n.batch; b++)
        for (int64_t h = 0; h < n.heads; h++)
            for (int64_t s = 0; s < n.seq; s++)
                memcpy(dst + b * ds.batch + h * ds.head + s * ds.token, src + b * ss.batch + h * ss.head + s * ss.token,
                       (size_t)n.dim * sizeof(float));
    return JATTN_OK;
}

static jattn_status host_merge(const sp_data *d, float *out, jattn_strides os, float *lse, const float *part,
                               jattn_strides ps, const float *part_lse, sp_extent n) {
    (void)d;
    for (int64_t b = 0; b < n.batch; b++)
        for (int64_t h = 0; h < n.heads; h++)
            for (int64_t s = 0; s < n.seq; s++) {
                const int64_t row = (b * n.heads + h) * n.seq + s;
                float a = 0.0f, w = 0.0f, merged = 0.0f;
                const int how = sp_merge_weights(lse[row], part_lse[row], &a, &w, &merged);
                float *o = out + b * os.batch + h * os.head + s * os.token;
                const float *p = part + b * ps.batch + h * ps.head + s * ps.token;
                if (how == SP_KEEP) continue;
                if (how == SP_TAKE) {
                    memcpy(o, p, (size_t)n.dim * sizeof(float));
                    lse[row] = part_lse[row];
                    continue;
                }
                for (int64_t i = 0; i < n.dim; i++) o[i] = fmaf(a, o[i], w * p[i]);
                lse[row] = merged;
            }
    return JATTN_OK;
}

void sp_data_host(sp_data *d) {
    d->memory = JATTN_MEMORY_HOST;
    d->stream = NULL;
    d->copy = host_copy;
    d->merge = host_merge;
}
