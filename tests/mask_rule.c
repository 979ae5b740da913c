/* The tests' own reading of include/jattn.h's mask (mask_rule.h). */
#include "mask_rule.h"

#include <math.h>

int jt_padding_attends(const jattn_key_padding *kp, int64_t b, int64_t j) {
    if (!kp) return 1;
    if (kp->kv_len && j >= kp->kv_len[b]) return 0;
    if (kp->mask) {
        const int64_t stride = kp->mask_batch > 1 ? (kp->mask_batch_stride ? kp->mask_batch_stride : kp->mask_keys) : 0;
        if (!kp->mask[b * stride + j]) return 0;
    }
    return 1;
}

double jt_key_bias(const jattn_mask *m, int64_t b, int64_t h, int64_t j) {
    if (!m || !m->key_bias) return 0.0;
    return (double)m->key_bias[b * m->key_bias_batch_stride + h * m->key_bias_head_stride + j];
}

int jt_mask_attends(const jattn_mask *m, const jattn_problem *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!m) return 1;
    if (!jt_padding_attends(&m->padding, b, j)) return 0;
    int64_t t = i, u = j, len_q = p->seq_q, len_k = p->seq_kv;
    if (m->cu_seqlens_q) {
        const int64_t *sq = m->cu_seqlens_q + b * m->segments_batch_stride;
        const int64_t *sk = m->cu_seqlens_kv + b * m->segments_batch_stride;
        int64_t seg = -1;
        for (int64_t x = 0; x < m->num_segments; x++)
            if (sq[x] <= i && i < sq[x + 1]) seg = x;
        if (seg < 0 || j < sk[seg] || j >= sk[seg + 1]) return 0;
        t = i - sq[seg], u = j - sk[seg];
        len_q = sq[seg + 1] - sq[seg], len_k = sk[seg + 1] - sk[seg];
    }
    if (m->causal == JATTN_CAUSAL_TOP_LEFT && u > t) return 0;
    if (m->causal == JATTN_CAUSAL_BOTTOM_RIGHT && u > t + len_k - len_q) return 0;
    if (m->block_q) {
        int64_t bq = -1, bk = -1;
        for (int64_t x = 0; x < m->num_blocks; x++) {
            if (m->block_q[x] <= i && i < m->block_q[x + 1]) bq = x;
            if (m->block_kv[x] <= j && j < m->block_kv[x + 1]) bk = x;
        }
        if (bk > bq) return 0;
    }
    return jt_key_bias(m, b, h, j) != -INFINITY;
}
