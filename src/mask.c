/* The meaning of a mask for the host-memory backends (backend.h): the window of keys a query row
 * may attend, and the features a plan is made for. The device kernels compute the same windows
 * from the same offsets (src/cuda). */
#include "backend.h"

jattn_status jattn_refuse_features(const jattn_plan *plan, unsigned supported, const char *who) {
    const unsigned missing = plan->features & ~supported;
    if (!missing) return JATTN_OK;
    return jattn_fail(JATTN_ERROR_UNSUPPORTED, "mask: %s does not serve %s%s", who, jattn_feature_name(missing),
                      plan->pass == JATTN_PASS_BACKWARD ? " in the backward" : "");
}

/* The last index s in [0, n) with o[s] <= x (o non-decreasing, o[0] <= x). */
static int64_t last_at_most(const int64_t *o, int64_t n, int64_t x) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (o[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void jattn_call_key_window(const jattn_call *c, int64_t b, int64_t i, int64_t *lo_out, int64_t *hi_out) {
    const jattn_problem *p = c->problem;
    int64_t lo = 0, hi = p->seq_kv;
    int64_t base_q = 0, base_k = 0, len_q = p->seq_q, len_k = p->seq_kv;
    if (c->cu_seqlens_q) {
        const int64_t *sq = c->cu_seqlens_q + b * c->segments_stride, *sk = c->cu_seqlens_kv + b * c->segments_stride;
        const int64_t n = c->num_segments;
        if (i >= sq[n]) { /* past the last segment: no key */
            *lo_out = *hi_out = 0;
            return;
        }
        const int64_t s = last_at_most(sq, n, i);
        base_q = sq[s];
        len_q = sq[s + 1] - sq[s];
        base_k = sk[s];
        len_k = sk[s + 1] - sk[s];
        lo = base_k;
        hi = base_k + len_k;
    }
    if (c->causal != JATTN_CAUSAL_NONE) {
        const int64_t last = base_k + (i - base_q) + (c->causal == JATTN_CAUSAL_BOTTOM_RIGHT ? len_k - len_q : 0);
        if (last + 1 < hi) hi = last + 1;
    }
    if (c->block_q) {
        const int64_t a = last_at_most(c->block_q, c->num_blocks, i);
        if (c->block_kv[a + 1] < hi) hi = c->block_kv[a + 1];
    }
    if (hi < lo) hi = lo;
    *lo_out = lo;
    *hi_out = hi;
}
