/* The building blocks of the sequence-parallel algorithms (see sp_blocks.h). */
#include "sp_blocks.h"

#include <stdint.h>

#include "sp_error.h"

int64_t sp_shard_offset(const int64_t *shards, int r) {
    int64_t off = 0;
    for (int i = 0; i < r; i++) off += shards[i];
    return off;
}

int64_t sp_head_count(int64_t heads, int ranks, int r) { return heads / ranks + (r < heads % ranks ? 1 : 0); }

int64_t sp_head_offset(int64_t heads, int ranks, int r) {
    const int64_t extra = heads % ranks;
    return (int64_t)r * (heads / ranks) + (r < extra ? r : extra);
}

jattn_problem sp_local_problem(const sp_plan *pl, int64_t heads, int64_t seq_q, int64_t seq_kv, jattn_strides q,
                               jattn_strides k, jattn_strides v, jattn_strides out) {
    jattn_problem p = pl->whole;
    p.heads = heads;
    p.seq_q = seq_q;
    p.seq_kv = seq_kv;
    p.q = q;
    p.k = k;
    p.v = v;
    p.out = out;
    return p;
}

jattn_status sp_plan_local_call(sp_plan *pl, const jattn_problem *p) {
    jattn_selection sel;
    size_t bytes = 0;
    jattn_status st = jattn_select(p, &pl->exec, &sel);
    if (st == JATTN_OK) st = jattn_workspace_size(p, &pl->exec, &bytes);
    if (st != JATTN_OK) return st; /* jattn's message names the field */
    const double flops = (double)p->batch * (double)p->heads * (double)p->seq_q * (double)p->seq_kv;
    if (flops > pl->local_flops) {
        pl->local_flops = flops;
        pl->local = sel;
    }
    if (bytes > pl->local_workspace_bytes) pl->local_workspace_bytes = bytes;
    return JATTN_OK;
}

int sp_plan_region(sp_plan *pl, int64_t floats) {
    if (pl->regions == SP_MAX_REGIONS || floats < 0 || (uint64_t)floats > (SIZE_MAX - SP_ALIGN) / sizeof(float) / 2)
        return -1;
    const size_t start = (pl->layout_bytes + SP_ALIGN - 1) / SP_ALIGN * SP_ALIGN;
    const size_t bytes = (size_t)floats * sizeof(float);
    if (start < pl->layout_bytes || start > SIZE_MAX / 2 - bytes) return -1;
    pl->region_off[pl->regions] = start;
    pl->layout_bytes = start + bytes;
    return pl->regions++;
}

jattn_status sp_plan_message(const sp_plan *pl, int64_t floats, const char *what) {
    if (floats > pl->max_message)
        return sp_fail(JATTN_ERROR_OVERFLOW, "%s: %lld floats in one message, the transport takes at most %lld", what,
                       (long long)floats, (long long)pl->max_message);
    return JATTN_OK;
}

jattn_status sp_local_forward(const sp_plan *pl, const sp_run *run, const jattn_problem *p, const float *q,
                              const float *k, const float *v, float *out, float *lse) {
    jattn_exec e = pl->exec;
    const size_t local_off = (pl->layout_bytes + SP_ALIGN - 1) / SP_ALIGN * SP_ALIGN;
    e.workspace = pl->local_workspace_bytes ? run->base + local_off : NULL;
    e.workspace_bytes = pl->local_workspace_bytes;
    return jattn_forward(run->local_ctx, p, &e, q, k, v, out, lse);
}
