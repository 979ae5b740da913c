/* Sizes of a problem's tensors; see tensor.h. */
#include "tensor.h"

#include <math.h>
#include <stdlib.h>

double kit_flops(const jattn_problem *p) {
    return 4.0 * (double)p->batch * (double)p->heads * (double)p->seq_q * (double)p->seq_kv * (double)p->head_dim;
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

/* The window [*lo, *hi) of keys query row i of batch b may attend (segments, causal, blocks). */
static void key_window(const jattn_problem *p, const jattn_mask *m, int64_t b, int64_t i, int64_t *lo_out,
                       int64_t *hi_out) {
    int64_t lo = 0, hi = p->seq_kv, base_q = 0, base_k = 0, len_q = p->seq_q, len_k = p->seq_kv;
    if (m->cu_seqlens_q) {
        const int64_t n = m->num_segments, row = b * m->segments_batch_stride;
        const int64_t *sq = m->cu_seqlens_q + row, *sk = m->cu_seqlens_kv + row;
        if (i >= sq[n]) { /* past the last segment: no key */
            *lo_out = *hi_out = 0;
            return;
        }
        const int64_t s = last_at_most(sq, n, i);
        base_q = sq[s], len_q = sq[s + 1] - sq[s];
        base_k = sk[s], len_k = sk[s + 1] - sk[s];
        lo = base_k, hi = base_k + len_k;
    }
    if (m->causal != JATTN_CAUSAL_NONE) {
        const int64_t last = base_k + (i - base_q) + (m->causal == JATTN_CAUSAL_BOTTOM_RIGHT ? len_k - len_q : 0);
        if (last + 1 < hi) hi = last + 1;
    }
    if (m->block_q) {
        const int64_t a = last_at_most(m->block_q, m->num_blocks, i);
        if (m->block_kv[a + 1] < hi) hi = m->block_kv[a + 1];
    }
    if (lo < 0) lo = 0;
    if (hi < lo) hi = lo;
    *lo_out = lo;
    *hi_out = hi;
}

double kit_attended_pairs(const jattn_problem *p, const jattn_mask *m) {
    if (!m) return (double)p->batch * (double)p->heads * (double)p->seq_q * (double)p->seq_kv;
    const jattn_key_padding *kp = &m->padding;
    /* Keys attended beyond the window, as prefix counts: before[j] = attended keys < j. The bias
     * varies over heads only with a head stride; otherwise one count serves every head. */
    const int per_head = m->key_bias && m->key_bias_head_stride != 0;
    int64_t *before = malloc(((size_t)p->seq_kv + 1) * sizeof *before);
    if (!before) return NAN;
    double pairs = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        const uint8_t *mask_row = NULL;
        if (kp->mask) {
            const int64_t stride = kp->mask_batch_stride ? kp->mask_batch_stride : kp->mask_keys;
            mask_row = kp->mask + (kp->mask_batch > 1 ? b * stride : 0);
        }
        const int64_t keys = kp->kv_len ? kp->kv_len[b] : p->seq_kv;
        for (int64_t h = 0; h < (per_head ? p->heads : 1); h++) {
            const float *bias =
                m->key_bias ? m->key_bias + b * m->key_bias_batch_stride + h * m->key_bias_head_stride : NULL;
            before[0] = 0;
            for (int64_t j = 0; j < p->seq_kv; j++)
                before[j + 1] = before[j] + (j < keys && (!mask_row || mask_row[j]) && !(bias && bias[j] == -INFINITY));
            double row_pairs = 0;
            for (int64_t i = 0; i < p->seq_q; i++) {
                int64_t lo, hi;
                key_window(p, m, b, i, &lo, &hi);
                row_pairs += (double)(before[hi] - before[lo]);
            }
            pairs += per_head ? row_pairs : row_pairs * (double)p->heads;
        }
    }
    free(before);
    return pairs;
}

double kit_flops_masked(const jattn_problem *p, const jattn_mask *m) {
    return m ? 4.0 * (double)p->head_dim * kit_attended_pairs(p, m) : kit_flops(p);
}

int64_t kit_elems(const jattn_problem *p, int64_t seq) { return p->batch * p->heads * seq * p->head_dim; }

int64_t kit_tensor_span(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return 1 + (p->batch - 1) * s.batch + (p->heads - 1) * s.head + (seq - 1) * s.token + (p->head_dim - 1);
}

int64_t kit_kv_heads(const jattn_problem *p) { return p->kv_heads ? p->kv_heads : p->heads; }

int64_t kit_kv_span(const jattn_problem *p, jattn_strides s) {
    return 1 + (p->batch - 1) * s.batch + (kit_kv_heads(p) - 1) * s.head + (p->seq_kv - 1) * s.token +
           (p->head_dim - 1);
}

float *kit_alloc_floats(int64_t n) {
    enum { ALIGN = 64 };
    if (n < 0 || (uint64_t)n > (SIZE_MAX - ALIGN) / sizeof(float)) return NULL;
    size_t bytes = ((size_t)(n ? n : 1) * sizeof(float) + ALIGN - 1) / ALIGN * ALIGN;
    return aligned_alloc(ALIGN, bytes);
}
