/* The parameter block kernel v1 takes by value (attention_v1_simt.cu; the removed v2 took it too):
 * jattn_cuda_args (cuda_internal.h) with the extents narrowed to int,
 * which the backend's selection guarantees (seq_q, seq_kv, batch * heads < 2^31). */
#ifndef JATTN_FLASH_PARAMS_CUH
#define JATTN_FLASH_PARAMS_CUH

#include <stdint.h>

#include "cuda_internal.h"

struct jattn_cuda_params {
    const float *q, *k, *v;
    float *out;
    float *lse; /* [B, H, Sq] contiguous, or NULL */
    int64_t q_b, q_h, q_s;
    int64_t k_b, k_h, k_s;
    int64_t v_b, v_h, v_s;
    int64_t o_b, o_h, o_s;
    int batch, heads, seq_q, seq_kv, head_dim;
    float scale;
    const int *kv_count; /* key padding as in jattn_cuda_args, or NULL */
    const int *kv_index;
    int group; /* query heads per key/value head: head h reads key/value head h / group */
};

inline jattn_cuda_params flash_params_from_args(const jattn_cuda_args *a) {
    jattn_cuda_params p = {.q = a->q,
                           .k = a->k,
                           .v = a->v,
                           .out = a->out,
                           .lse = a->lse,
                           .q_b = a->q_strides.batch,
                           .q_h = a->q_strides.head,
                           .q_s = a->q_strides.token,
                           .k_b = a->k_strides.batch,
                           .k_h = a->k_strides.head,
                           .k_s = a->k_strides.token,
                           .v_b = a->v_strides.batch,
                           .v_h = a->v_strides.head,
                           .v_s = a->v_strides.token,
                           .o_b = a->out_strides.batch,
                           .o_h = a->out_strides.head,
                           .o_s = a->out_strides.token,
                           .batch = (int)a->batch,
                           .heads = (int)a->heads,
                           .seq_q = (int)a->seq_q,
                           .seq_kv = (int)a->seq_kv,
                           .head_dim = (int)a->head_dim,
                           .scale = a->scale,
                           .kv_count = a->kv_count,
                           .kv_index = a->kv_index,
                           .group = (int)(a->heads / (a->kv_heads > 0 ? a->kv_heads : a->heads))};
    return p;
}

#endif /* JATTN_FLASH_PARAMS_CUH */
