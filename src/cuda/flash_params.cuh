/* The parameter block the v1 and v2 kernels take by value (attention_v1_simt.cu,
 * attention_v2_mma.cu): jattn_cuda_args (cuda_internal.h) with the extents narrowed to int,
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
};

inline jattn_cuda_params flash_params_from_args(const jattn_cuda_args *a) {
    jattn_cuda_params p = {a->q,
                           a->k,
                           a->v,
                           a->out,
                           a->lse,
                           a->q_strides.batch,
                           a->q_strides.head,
                           a->q_strides.token,
                           a->k_strides.batch,
                           a->k_strides.head,
                           a->k_strides.token,
                           a->v_strides.batch,
                           a->v_strides.head,
                           a->v_strides.token,
                           a->out_strides.batch,
                           a->out_strides.head,
                           a->out_strides.token,
                           (int)a->batch,
                           (int)a->heads,
                           (int)a->seq_q,
                           (int)a->seq_kv,
                           (int)a->head_dim,
                           a->scale,
                           a->kv_count,
                           a->kv_index};
    return p;
}

#endif /* JATTN_FLASH_PARAMS_CUH */
