/* Exact power-of-two normalisation of a head's q, k and v on their way into the staging buffer, so
 * that the kernel never sees float32 denormals whatever the driver does with them (NVIDIA's Vulkan
 * driver flushes them and does not offer DenormPreserve: src/vulkan/NOTES.md, "Denormals").
 *
 * Multiplying by 2^e is exact while the result stays normal, and (x 2^a)(y 2^b)(scale 2^-(a+b)) is
 * the same float32 product as x y scale: the logits, the row maxima and the exponentials the kernel
 * computes are the ones it would compute on the original values, bit for bit, as long as nothing
 * was denormal or overflowing there; where something was, the normalised values keep the bits the
 * driver would flush. So (vk_range_plan):
 *   - q and k, when a head's largest |q| or |k| is outside [2^-32, 2^33) or the scale outside
 *     [2^-64, 2^64]: each is scaled to a largest magnitude in [1, 2) and the head's softmax scale
 *     multiplied by the inverse powers (kept when that scale would overflow). A scale that then falls
 *     below FLT_MIN bounds every logit by 2^-126 * 4 * head_dim <= 2^-114: exp gives 1.0 either way.
 *     Elements below 2^-126 of their tensor's largest may round when a tensor is scaled down; each
 *     changes a dot product by less than 2^-126 of its largest term;
 *   - v, when a head's largest |v| is below 2^-32: scaled up to [1, 2) (exact), and the output
 *     rows scaled back by the host (vk_backend.c), which keeps gradual underflow.
 * Heads holding Inf are left as they are (NaN is ignored by the maxima and survives any scaling).
 * Grouped-query heads (vk_range_plan_group): k and v are staged once for the group of query heads
 * that reads them, so their shifts are the group's; each query head keeps its own q shift and scale.
 * The maxima come from the caller's arrays during the gather (vk_backend.c): the staging memory,
 * write-combined on discrete GPUs, is never read. Heads within range, the usual case, cost that
 * a vectorised maximum during the copy; the others are gathered again through vk_copy_scaled. */
#include <float.h>
#include <math.h>

#include "vk_internal.h"

void vk_range_plan(float max_q, float max_k, float max_v, float scale, vk_head_range *r) {
    r->q_shift = r->k_shift = r->v_shift = 0;
    r->scale = scale;
    if (max_q > 0.0f && max_k > 0.0f && isfinite(max_q) && isfinite(max_k) && isfinite(scale) && scale > 0.0f) {
        const int eq = ilogbf(max_q), ek = ilogbf(max_k); /* 2^e <= max < 2^(e+1) */
        const int in_range = eq >= -32 && eq <= 32 && ek >= -32 && ek <= 32 && scale >= 0x1p-64f && scale <= 0x1p64f;
        const double s2 = ldexp((double)scale, eq + ek);
        if (!in_range && s2 <= 3.40282346638528859812e+38) {
            r->q_shift = -eq;
            r->k_shift = -ek;
            r->scale = (float)s2; /* exact, or below FLT_MIN (see above) */
        }
    }
    if (max_v > 0.0f && isfinite(max_v) && ilogbf(max_v) < -32) r->v_shift = -ilogbf(max_v);
}

void vk_range_plan_group(const float *max_q, int64_t n, float max_k, float max_v, float scale, vk_head_range *r) {
    int v_shift = 0;
    if (max_v > 0.0f && isfinite(max_v) && ilogbf(max_v) < -32) v_shift = -ilogbf(max_v);
    for (int64_t i = 0; i < n; i++) r[i].q_shift = r[i].k_shift = 0, r[i].v_shift = v_shift, r[i].scale = scale;
    if (!(max_k > 0.0f && isfinite(max_k) && isfinite(scale) && scale > 0.0f)) return;
    /* q and k are normalised when a head's q, the shared k or the scale is out of range and every head
     * can be (no Inf in q, no scale overflowing): as vk_range_plan for each head, with the k shift shared.
     * A head whose q is all zero keeps q and its scale (its scores are 0 either way). */
    const int ek = ilogbf(max_k);
    int out_of_range = ek < -32 || ek > 32 || scale < 0x1p-64f || scale > 0x1p64f, some_q = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(max_q[i])) return; /* a head holding Inf: the group as it is */
        if (max_q[i] == 0.0f) continue;
        const int eq = ilogbf(max_q[i]);
        some_q = 1;
        if (eq < -32 || eq > 32) out_of_range = 1;
        if (ldexp((double)scale, eq + ek) > (double)FLT_MAX) return;
    }
    if (!some_q || !out_of_range) return;
    for (int64_t i = 0; i < n; i++) {
        r[i].k_shift = -ek;
        if (max_q[i] == 0.0f) continue;
        const int eq = ilogbf(max_q[i]);
        r[i].q_shift = -eq;
        r[i].scale = (float)ldexp((double)scale, eq + ek); /* exact, or below FLT_MIN (see above) */
    }
}

void vk_copy_scaled(float *dst, const float *src, int64_t rows, int64_t token_stride, int64_t head_dim, int64_t dp,
                    int shift) {
    const double f = ldexp(1.0, shift);
    for (int64_t i = 0; i < rows; i++) {
        const float *s = src + i * token_stride;
        float *d = dst + i * dp;
        for (int64_t j = 0; j < head_dim; j++) d[j] = (float)((double)s[j] * f); /* one rounding */
        for (int64_t j = head_dim; j < dp; j++) d[j] = 0.0f;
    }
}
