/* Sizes of a problem's tensors; see tensor.h. */
#include "tensor.h"

#include <stdlib.h>

double kit_flops(const jattn_problem *p) {
    return 4.0 * (double)p->batch * (double)p->heads * (double)p->seq_q * (double)p->seq_kv * (double)p->head_dim;
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
