/* Exact power-of-two normalisation of a head's q, k and v in the staging buffer, so that the
 * kernel never sees float32 denormals whatever the driver does with them (NVIDIA's Vulkan driver
 * flushes them: src/vulkan/NOTES.md, "Denormals").
 *
 * Multiplying by 2^e is exact while the result stays normal, and (x 2^a)(y 2^b)(scale 2^-(a+b)) is
 * the same float32 product as x y scale: the logits, the row maxima and the exponentials the kernel
 * computes are the ones it would compute on the original values, bit for bit, as long as nothing
 * was denormal or overflowing there; where something was, the normalised values keep the bits the
 * driver would flush. So:
 *   - q and k, when a head's largest |q| or |k| is outside [2^-32, 2^33) or the scale outside
 *     [2^-64, 2^64]: each is scaled to a largest magnitude in [1, 2) and the head's softmax scale
 *     multiplied by the inverse powers (kept when that scale would overflow). A scale that then falls
 *     below FLT_MIN bounds every logit by 2^-126 * 4 * head_dim <= 2^-114: exp gives 1.0 either way.
 *     Elements below 2^-126 of their tensor's largest may round when a tensor is scaled down; each
 *     changes a dot product by less than 2^-126 of its largest term;
 *   - v, when a head's largest |v| is below 2^-32: scaled up to [1, 2) (exact), and the output
 *     rows scaled back by the host (vk_backend.c), which keeps gradual underflow.
 * Heads holding Inf are left as they are (NaN is ignored by the maxima and survives any scaling).
 * Everything is done in double and rounded once to float. Heads within range, the usual case,
 * cost one pass computing the maxima and are not modified. */
#include <math.h>

#include "vk_internal.h"

/* max |x| over n floats (NaN ignored; Inf when there is one). */
static float max_abs(const float *x, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static void scale_by(float *x, int64_t n, int e) {
    if (e == 0) return;
    const double f = ldexp(1.0, e);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * f);
}

/* The exponent e with 2^e <= m < 2^(e+1), for finite m > 0. */
static int exponent_of(float m) { return ilogbf(m); }

void vk_normalise_head(float *q, int64_t nq, float *k, int64_t nk, float *v, int64_t nv, float scale, float *scale_out,
                       int32_t *v_exp) {
    *scale_out = scale;
    *v_exp = 0;
    const float mq = max_abs(q, nq), mk = max_abs(k, nk), mv = max_abs(v, nv);
    if (mq > 0.0f && mk > 0.0f && isfinite(mq) && isfinite(mk) && isfinite(scale) && scale > 0.0f) {
        const int eq = exponent_of(mq), ek = exponent_of(mk);
        const double as = fabs((double)scale);
        const int in_range = eq >= -32 && eq <= 32 && ek >= -32 && ek <= 32 && as >= 0x1p-64 && as <= 0x1p64;
        const double s2 = ldexp((double)scale, eq + ek);
        if (!in_range && s2 <= (double)3.40282346638528859812e+38F) {
            scale_by(q, nq, -eq);
            scale_by(k, nk, -ek);
            *scale_out = (float)s2;
        }
    }
    if (mv > 0.0f && isfinite(mv)) {
        const int ev = exponent_of(mv);
        if (ev < -32) {
            scale_by(v, nv, -ev);
            *v_exp = -ev;
        }
    }
}
