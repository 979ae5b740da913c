/* The launch contract of the sm_90a kernels (v6, the backward v4; attention_sm90.h), checked on the
 * host: the one place its limits are tested, for the kernels' launchers and for the backend's
 * selection alike. Plain C, no CUDA call (tests/test_cuda_ladder.c builds it on any machine). */
#include <math.h>
#include <stdint.h>

#include "attention_sm90.h"

static int stride_ok(jattn_cuda_strides s) {
    const int64_t m = ATTENTION_SM90_STRIDE_MULTIPLE;
    return s.batch >= 0 && s.head >= 0 && s.token >= 0 && s.batch % m == 0 && s.head % m == 0 && s.token % m == 0;
}

static int aligned(const void *ptr, uintptr_t bytes) { return (uintptr_t)ptr % bytes == 0; }

attention_sm90_support attention_sm90_shape_supported(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                                                      int64_t head_dim, const jattn_cuda_strides strides[4]) {
    if (head_dim != 64 && head_dim != 128) return ATTENTION_SM90_BAD_HEAD_DIM;
    for (int i = 0; i < 4; i++)
        if (!stride_ok(strides[i])) return ATTENTION_SM90_MISALIGNED;
    if (batch < 1 || heads < 1 || seq_q < 1 || seq_kv < 1 || batch > ATTENTION_SM90_MAX_GRID ||
        heads > ATTENTION_SM90_MAX_GRID || seq_q > INT32_MAX - ATTENTION_SM90_TILE ||
        seq_kv > INT32_MAX - ATTENTION_SM90_TILE || heads * seq_q > INT64_MAX / batch)
        return ATTENTION_SM90_BAD_DIMENSION;
    return ATTENTION_SM90_SUPPORTED;
}

attention_sm90_support attention_f32_sm90_wgmma_supported(const jattn_cuda_args *a) {
    if (!a || !a->q || !a->k || !a->v || !a->out) return ATTENTION_SM90_NULL_POINTER;
    const jattn_cuda_strides strides[4] = {a->q_strides, a->k_strides, a->v_strides, a->out_strides};
    const attention_sm90_support shape =
        attention_sm90_shape_supported(a->batch, a->heads, a->seq_q, a->seq_kv, a->head_dim, strides);
    if (shape != ATTENTION_SM90_SUPPORTED) return shape;
    if (!aligned(a->q, ATTENTION_SM90_ALIGN_BYTES) || !aligned(a->k, ATTENTION_SM90_ALIGN_BYTES) ||
        !aligned(a->v, ATTENTION_SM90_ALIGN_BYTES) || !aligned(a->out, ATTENTION_SM90_ALIGN_BYTES) ||
        (a->lse && !aligned(a->lse, sizeof(float))))
        return ATTENTION_SM90_MISALIGNED;
    if (!(a->scale > 0.f) || !isfinite(a->scale)) return ATTENTION_SM90_BAD_SCALE;
    if (a->precision != JATTN_PRECISION_F32 && a->precision != JATTN_PRECISION_TF32)
        return ATTENTION_SM90_BAD_PRECISION;
    return ATTENTION_SM90_SUPPORTED;
}

int64_t jattn_cuda_bwd_v4_units(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv) {
    const int64_t tq = (seq_q + ATTENTION_SM90_TILE - 1) / ATTENTION_SM90_TILE;
    const int64_t blocks = (seq_kv + 2 * ATTENTION_SM90_TILE - 1) / (2 * ATTENTION_SM90_TILE);
    if (batch < 1 || heads < 1 || tq < 1 || blocks < 1) return 0;
    if (batch > INT64_MAX / heads) return INT64_MAX;
    const int64_t items = batch * heads;
    if (blocks > INT64_MAX / items) return INT64_MAX;
    const int64_t per = items * blocks;
    return tq > INT64_MAX / per ? INT64_MAX : per * tq;
}

const char *jattn_cuda_bwd_v4_refusal(const jattn_problem *p, const jattn_grad_strides *grad, size_t alignment) {
    if (alignment < ATTENTION_SM90_ALIGN_BYTES)
        return "alignment: the backward v4 moves every tensor in 16-byte units (exec.alignment below 16)";
    const jattn_strides s[4] = {grad->dout, grad->dq, grad->dk, grad->dv};
    for (int i = 0; i < 4; ++i) {
        const jattn_cuda_strides c = {s[i].batch, s[i].head, s[i].token};
        if (!stride_ok(c))
            return "grad strides: the backward v4 needs every stride of dout, dq, dk, dv a multiple of 4 elements";
    }
    /* its CTAs run 128 keys (two 64-row records, backward_v4_records.cuh) and index rows with 32 bits */
    if (p->seq_q > INT32_MAX - 2 * ATTENTION_SM90_TILE || p->seq_kv > INT32_MAX - 2 * ATTENTION_SM90_TILE)
        return "seq_q/seq_kv: the backward v4 takes at most 2^31 - 129";
    /* its persistent grid counts work units (a 128-key block of a head and a 64-query block) with 32 bits */
    if (jattn_cuda_bwd_v4_units(p->batch, p->heads, p->seq_q, p->seq_kv) > INT32_MAX)
        return "B H ceil(seq_q / 64) ceil(seq_kv / 128): the backward v4 takes at most 2^31 - 1 work units";
    return NULL;
}

int jattn_cuda_bwd_v4_call_refused(const jattn_cuda_args *a) {
    if ((a->head_dim != 64 && a->head_dim != 128) || a->seq_kv < 2) return 1;
    /* every mask part (segments and blocks with both offset arrays); grouped heads dividing heads */
    if ((a->kv_heads && (a->kv_heads < 0 || a->kv_heads > a->heads || a->heads % a->kv_heads != 0)) ||
        !a->block_q != !a->block_kv || !a->cu_seqlens_q != !a->cu_seqlens_kv)
        return 1;
    if (a->batch * a->heads > ATTENTION_SM90_MAX_GRID || a->heads > ATTENTION_SM90_MAX_GRID ||
        a->batch > ATTENTION_SM90_MAX_GRID)
        return 1;
    if (a->seq_q > INT32_MAX - 2 * ATTENTION_SM90_TILE || a->seq_kv > INT32_MAX - 2 * ATTENTION_SM90_TILE) return 1;
    if (jattn_cuda_bwd_v4_units(a->batch, a->heads, a->seq_q, a->seq_kv) > INT32_MAX) return 1;
    const void *ptrs[8] = {a->q, a->k, a->v, a->out, a->dout, a->dq, a->dk, a->dv};
    for (int i = 0; i < 8; ++i)
        if (!aligned(ptrs[i], ATTENTION_SM90_ALIGN_BYTES)) return 1;
    const jattn_cuda_strides s[8] = {a->q_strides,    a->k_strides,  a->v_strides,  a->out_strides,
                                     a->dout_strides, a->dq_strides, a->dk_strides, a->dv_strides};
    for (int i = 0; i < 8; ++i)
        if (!stride_ok(s[i])) return 1;
    return 0;
}
