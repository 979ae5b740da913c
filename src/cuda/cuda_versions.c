/* The cuda kernel versions as data (cuda_versions.h): each version's refusals, workspace and
 * launcher, the tables, forward and backward, and the ladders over them (where AUTO starts). Adding
 * a version: src/cuda/NOTES.md. */
#include "cuda_versions.h"

#include <stdint.h>
#include <stdio.h>

#include "attention_sm90.h"

/* Why the sm_90a kernels (v6, the backward v4) cannot run a problem (a message for jattn_fail), or
 * NULL when they can, pointers aside: their alignment is known in forward() only. The limits are
 * those of the launch contract (attention_sm90.h, checked by sm90_contract.c); v6 adds its own below. */
static const char *sm90_refusal(const jattn_problem *p, int cc) {
    if (cc != ATTENTION_SM90_CC) return "device: the sm_90a kernels (wgmma) need compute capability 9.0";
    const jattn_cuda_strides strides[4] = {{p->q.batch, p->q.head, p->q.token},
                                           {p->k.batch, p->k.head, p->k.token},
                                           {p->v.batch, p->v.head, p->v.token},
                                           {p->out.batch, p->out.head, p->out.token}};
    switch (attention_sm90_shape_supported(p->batch, p->heads, p->seq_q, p->seq_kv, p->head_dim, strides)) {
    case ATTENTION_SM90_SUPPORTED: return NULL;
    case ATTENTION_SM90_BAD_HEAD_DIM: return "head_dim: the sm_90a kernels take 64 or 128";
    case ATTENTION_SM90_MISALIGNED:
        return "strides: the sm_90a kernels need every stride of q, k, v, out a non-negative multiple of 4 elements";
    default:
        if (p->batch > ATTENTION_SM90_MAX_GRID || p->heads > ATTENTION_SM90_MAX_GRID)
            return "batch/heads: the sm_90a kernels take at most 65535 each";
        return "seq_q/seq_kv: the sm_90a kernels take at most 2^31 - 65 (their 64-row tiles index with 32 bits)";
    }
}

/* v6: the sm_90a contract, both precisions, but for 128-query CTAs (one more bit of the row index)
 * and a single key: its split of v does not return the v row bit for bit, which v1 does (AUTO runs
 * v1 there). */
static const char *v6_refusal(const cuda_query *q) {
    const jattn_problem *p = q->p;
    const char *why = sm90_refusal(p, q->cc);
    if (why) return why;
    if (q->alignment < ATTENTION_SM90_ALIGN_BYTES)
        return "alignment: kernel v6 moves q, k, v and out in 16-byte units (exec.alignment below 16)";
    const int64_t max_seq = INT32_MAX - ATTENTION_SM90_V6_CTA_QUERIES;
    if (p->seq_q > max_seq || p->seq_kv > max_seq)
        return "seq_q/seq_kv: kernel v6 takes at most 2^31 - 129 (its 128-query CTAs index with 32 bits)";
    if (p->seq_kv == 1)
        return "seq_kv: kernel v6 needs 2 or more keys (a single key's output is the v row bit for bit, which its "
               "split of v is not; v1 runs it)";
    /* a window or a key bias: a grid of (heads, query blocks, batch), whose y takes 65535 blocks of 128 */
    const unsigned masked =
        JATTN_FEATURE_CAUSAL | JATTN_FEATURE_BLOCKS | JATTN_FEATURE_SEGMENTS | JATTN_FEATURE_KEY_BIAS;
    if ((q->features & masked) && p->seq_q > ATTENTION_SM90_V6_MASKED_MAX_SEQ_Q)
        return "seq_q: kernel v6 takes at most 8388480 queries with a window or a key bias (65535 blocks of 128)";
    return NULL;
}

static const char *v1_refusal(const cuda_query *q) {
    (void)q; /* cuda_select checks v1's limits for the whole backend */
    return NULL;
}

/* v6's own device workspace: its split K and V tiles as shared-memory images
 * (attention_v6_split_kv_f16x2.cu); v1 needs none. */
static size_t v6_workspace_bytes(const jattn_problem *p) {
    return attention_f32_sm90_fa3_f16x2_workspace_bytes(p->batch, p->heads, p->kv_heads, p->seq_kv, p->head_dim);
}

/* v7 takes every head_dim up to 256 on every device the backend takes (8.0 and newer), any strides,
 * both precisions, and two or more keys (a single key's output is the v row bit for bit, which its
 * split of v is not; v1 runs it). */
static const char *v7_refusal(const cuda_query *q) {
    const jattn_problem *p = q->p;
    if (p->head_dim > JATTN_CUDA_V7_MAX_HEAD_DIM) return "head_dim: kernel v7 takes at most 256";
    if (p->seq_q > JATTN_CUDA_V7_MAX_SEQ || p->seq_kv > JATTN_CUDA_V7_MAX_SEQ)
        return "seq_q/seq_kv: kernel v7 takes at most 2^31 - 129 (its 128-query CTAs index with 32 bits)";
    if (p->seq_kv == 1)
        return "seq_kv: kernel v7 needs 2 or more keys (a single key's output is the v row bit for bit, which its "
               "split of v is not; v1 runs it)";
    return NULL;
}

static size_t v7_workspace_bytes(const jattn_problem *p) {
    return jattn_cuda_v7_workspace_bytes(p->batch, p->heads, p->kv_heads, p->seq_kv, p->head_dim);
}

#define FWD(k) (&jattn_cuda_versions[JATTN_CUDA_KERNEL_##k])

/* Every mask part and grouped-query heads: what each forward version serves (src/cuda/NOTES.md, "Masks":
 * windows walked tile by tile, the key bias, key/value heads read in place). */
#define FWD_FEATURES                                                                                    \
    (JATTN_FEATURE_KEY_PADDING | JATTN_FEATURE_CAUSAL | JATTN_FEATURE_BLOCKS | JATTN_FEATURE_SEGMENTS | \
     JATTN_FEATURE_KEY_BIAS | JATTN_FEATURE_GQA)

/* Names give the method. Numbers 2, 3, 4 and 5 were v2, v3, v4 and v5 (removed: src/cuda/JOURNAL.md). */
const cuda_version jattn_cuda_versions[JATTN_CUDA_KERNEL_COUNT] = {
    [JATTN_CUDA_KERNEL_V1] = {.name = {"cuda_v1_flash_f32_simt_8x32", "cuda_v1_flash_f32_simt_8x32"},
                              .features = FWD_FEATURES,
                              .refusal = v1_refusal,
                              .launch = jattn_cuda_launch_v1},
    /* v6 takes every mask part and grouped heads; a problem it refuses runs v7 under AUTO; so does a call with
     * misaligned pointers, or whose workspace the pool cannot give (v7 takes any alignment, and walks on to v1 as its
     * own row says; v4 ran them until it was removed) */
    [JATTN_CUDA_KERNEL_V6] = {.name = {"cuda_v6_flash_f16x2_sm90_fa3_ws_128x64",
                                       "cuda_v6_flash_qk_f16x2_pv_f16_sm90_fa3_ws_128x64"},
                              .features = FWD_FEATURES,
                              .refusal = v6_refusal,
                              .workspace_bytes = v6_workspace_bytes,
                              .launch = jattn_cuda_launch_v6,
                              .refused_next = FWD(V7)},
    /* v7 runs every device and head_dim the sm_90a kernels do not; what it refuses (a single key,
     * head_dim above 256) runs v1, forced or not, and so does a call whose workspace the pool cannot
     * give (v1 needs none) */
    [JATTN_CUDA_KERNEL_V7] = {.name = {"cuda_v7_flash_f16x2_mma16n8k16", "cuda_v7_flash_qk_f16x2_pv_f16_mma16n8k16"},
                              .features = FWD_FEATURES,
                              .refusal = v7_refusal,
                              .workspace_bytes = v7_workspace_bytes,
                              .launch = jattn_cuda_launch_v7,
                              .refused_next = FWD(V1),
                              .forced_falls_back = 1},
};

int jattn_cuda_kernel_exists(jattn_cuda_kernel k) {
    return k > JATTN_CUDA_KERNEL_AUTO && k < JATTN_CUDA_KERNEL_COUNT && jattn_cuda_versions[k].launch != NULL;
}

int jattn_cuda_bwd_kernel_exists(jattn_cuda_bwd_kernel k) {
    return k > JATTN_CUDA_BWD_KERNEL_AUTO && k < JATTN_CUDA_BWD_KERNEL_COUNT &&
           jattn_cuda_bwd_versions[k].launch != NULL;
}

/* ---- the backward ---- */

static const char *bwd_v3_refusal(const cuda_query *q) {
    /* tf32 runs the f32 arithmetic; mma.sync fp16: every device the backend takes (8.0 and newer) */
    const jattn_problem *p = q->p;
    if (p->head_dim > JATTN_CUDA_BWD_V3_MAX_HEAD_DIM) return "head_dim: the cuda backward takes at most 256";
    /* its dK/dV CTAs count the query tiles of a group's heads with 32 bits (tiles of 16 queries or more) */
    if (p->kv_heads > 0 && p->heads / p->kv_heads * ((p->seq_q + 15) / 16) > INT32_MAX)
        return "heads / kv_heads * seq_q: the cuda backward walks at most 2^31 - 1 tiles of 16 queries per key tile";
    return NULL;
}

static size_t bwd_v3_workspace_bytes(const jattn_problem *p) {
    return jattn_cuda_bwd_v3_workspace_bytes_gqa(p->batch, p->heads, p->kv_heads, p->seq_q, p->seq_kv, p->head_dim);
}

/* v4: the sm_90a contract (compute capability 9.0, D 64 or 128, strides of q, k, v, out multiples of 4
 * elements), both precisions (tf32: dK, dV and dQ on one fp16 product), gradient strides multiples of 4 and
 * pointers 16-byte aligned, B*H <= 65535, seq_q and seq_kv at most 2^31 - 129, at most 2^31 - 1 work units
 * (jattn_cuda_bwd_v4_refusal, sm90_contract.c), two keys or more; grouped-query heads; every mask part: causal
 * where every key is attended by the closed form, segments, blocks, key padding with causal, top-left causal with
 * seq_q < seq_kv and a key bias (alone or with the others) by the window table (backward_v4_windows.cuh). */
static const char *bwd_v4_refusal(const cuda_query *q) {
    const jattn_problem *p = q->p;
    const char *why = sm90_refusal(p, q->cc);
    if (why) return why;
    why = jattn_cuda_bwd_v4_refusal(p, q->grad, q->alignment);
    if (why) return why;
    if (p->batch * p->heads > ATTENTION_SM90_MAX_GRID) return "batch*heads: the backward v4 takes at most 65535";
    /* one key: P = 1 and dq = dk = 0 exactly, which v3 gives (a batch with a single attended key takes P = 1
     * and dS = dlse); a 2xFP16 dP (22 significant bits per operand) left up to 3e-5 on `large` inputs in the
     * backward v2 (H200, bench/results/h200-2026-12-02-bwd-v2/call1), where the gate allows none */
    if (p->seq_kv == 1) return "seq_kv: a single key runs the backward v3";
    return NULL;
}

static size_t bwd_v4_workspace_bytes(const jattn_problem *p) {
    return jattn_cuda_bwd_v4_workspace_bytes(p->batch, p->heads, p->kv_heads, p->seq_q, p->seq_kv, p->head_dim);
}

#define BWD(k) (&jattn_cuda_bwd_versions[JATTN_CUDA_BWD_KERNEL_##k])

/* Numbers 1 and 2 were the backward v1 and v2 (removed: src/cuda/JOURNAL.md). */
const cuda_version jattn_cuda_bwd_versions[JATTN_CUDA_BWD_KERNEL_COUNT] = {
    /* backward_v3_mma_f16x2.cu: mma.sync m16n8k16 fp16 on 2xFP16 operands (sm_80 and newer), three fp16
     * products per product, S and dP hi*hi in chains of two k16 slices added in fp32; every head_dim up
     * to 256, any strides, every mask part (key padding, causal in both alignments, block-causal, segments,
     * a key bias) and grouped-query heads, a single key; tf32 runs the f32 arithmetic */
    [JATTN_CUDA_BWD_KERNEL_V3] = {.name = {"cuda_bwd_v3_mma_f16x2", "cuda_bwd_v3_mma_f16x2"},
                                  .features = JATTN_FEATURE_KEY_PADDING | JATTN_FEATURE_CAUSAL | JATTN_FEATURE_BLOCKS |
                                              JATTN_FEATURE_SEGMENTS | JATTN_FEATURE_KEY_BIAS | JATTN_FEATURE_GQA,
                                  .refusal = bwd_v3_refusal,
                                  .workspace_bytes = bwd_v3_workspace_bytes,
                                  .launch = jattn_cuda_launch_bwd_v3},
    /* backward_v4_sm90_fa3_f16x2.cu: one fused sm_90a kernel in FlashAttention-3's orientation (128 keys per
     * CTA in two consumer warpgroups, dK and dV in registers, dQ into per-CTA copies summed in a fixed order, a
     * persistent grid), 2xFP16, three fp16 products per product; tf32: dK, dV, dQ on one fp16 product; grouped
     * heads: each query head's dK, dV summed over the group in order; the windows (segments, blocks, causal, with
     * key padding) and a key bias through a device-side table of each key block's query blocks (a bias staged in
     * the records' key order). A problem it refuses runs v3,
     * forced or not (so the whole battery runs with v4 forced) */
    [JATTN_CUDA_BWD_KERNEL_V4] = {.name = {"cuda_bwd_v4_f16x2_sm90_fa3_ws_128x64",
                                           "cuda_bwd_v4_s_dp_f16x2_grads_f16_sm90_fa3_ws_128x64"},
                                  .features = JATTN_FEATURE_KEY_PADDING | JATTN_FEATURE_CAUSAL | JATTN_FEATURE_BLOCKS |
                                              JATTN_FEATURE_SEGMENTS | JATTN_FEATURE_KEY_BIAS | JATTN_FEATURE_GQA,
                                  .refusal = bwd_v4_refusal,
                                  .workspace_bytes = bwd_v4_workspace_bytes,
                                  .launch = jattn_cuda_launch_bwd_v4,
                                  .refused_next = BWD(V3),
                                  .forced_falls_back = 1},
};

/* ---- the ladders (src/cuda/NOTES.md, "The kernel ladders") ---- */

/* Why a version cannot run the query: the first mask part or grouped heads it does not serve, then
 * its own refusal; NULL when it can. */
static const char *refusal_of(const cuda_version *ver, const cuda_query *q) {
    static _Thread_local char why[160];
    const unsigned missing = q->features & ~ver->features;
    if (missing) {
        snprintf(why, sizeof why, "mask: kernel %s does not serve %s", ver->name[0], jattn_feature_name(missing));
        return why;
    }
    return ver->refusal(q);
}

static const cuda_version *walk_refusals(const cuda_version *ver, int forced, const cuda_query *q, const char **why) {
    for (;;) {
        const char *no = refusal_of(ver, q);
        if (!no) return ver;
        if (!ver->refused_next || (forced && !ver->forced_falls_back)) {
            *why = no;
            return NULL;
        }
        ver = ver->refused_next;
    }
}

/* AUTO starts at v6 wherever it takes the problem: on the H200 (2026-12-01,
 * bench/results/h200-2026-12-01-v6/library and library-r2) it passed every GPU test in both
 * precisions at D 64 and 128, repeated bit for bit, and was the fastest version at every measured
 * shape: f32 1.38-1.71x v4 (the default before it) at D = 128 (1.60x v5 at (1,40,32768,128)), tf32
 * 1.42-1.85x v4, D = 64 1.38-1.70x v4. From there the refusal fallbacks: v7 where v6 refuses (mma.sync
 * 2xFP16: every other head_dim up to 256 on a 9.0 device, every problem up to 256 on the other
 * devices), else v1; and v1 for seq_kv == 1, where it returns the v row bit for bit (weight
 * exp(0)/exp(0) = 1; a split of v would not), and for head_dim below JATTN_CUDA_V1_SMALL_D, where
 * v7's out and lse cost the backward's float32 floor up to 12x (the head_dim-1 chain: src/cuda/JOURNAL.md). */
const cuda_version *jattn_cuda_forward_version(jattn_cuda_kernel forced, const cuda_query *q, const char **why) {
    const jattn_cuda_kernel start = forced != JATTN_CUDA_KERNEL_AUTO ? forced
                                    : q->p->seq_kv == 1 || q->p->head_dim < JATTN_CUDA_V1_SMALL_D
                                        ? JATTN_CUDA_KERNEL_V1
                                        : JATTN_CUDA_KERNEL_V6;
    return walk_refusals(&jattn_cuda_versions[start], forced != JATTN_CUDA_KERNEL_AUTO, q, why);
}

/* AUTO starts at v4 since its first H100 run (bench/results/h100-2026-12-06-bwd-v4-call1, issue 36): the
 * whole battery passed with it forced (test_backward cuda: 563 passed, 0 failed, repeats bit-identical,
 * graph replay), compute-sanitizer memcheck, racecheck and synccheck clean; 1.69x / 1.84x / 1.78x the
 * backward v2 it replaces at (1,24,S,128), S = 1536 / 4608 / 16384 (0.708 / 4.437 / 56.0 ms, 3.7x / 4.4x /
 * 4.0x PyTorch's fp32 SDPA backward in the same run), 1.69x at D = 64; tf32 3.56 ms at 4608. v4 refuses
 * what its kernel cannot run and falls back to v3 (mma.sync 2xFP16, every device, head_dim up to 256, key
 * padding) forced or not. */
const cuda_version *jattn_cuda_backward_version(jattn_cuda_bwd_kernel forced, const cuda_query *q, const char **why) {
    const jattn_cuda_bwd_kernel start = forced != JATTN_CUDA_BWD_KERNEL_AUTO ? forced : JATTN_CUDA_BWD_KERNEL_V4;
    return walk_refusals(&jattn_cuda_bwd_versions[start], forced != JATTN_CUDA_BWD_KERNEL_AUTO, q, why);
}
