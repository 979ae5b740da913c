/* Ring attention. Rank r keeps its queries; the K/V shards travel around the ring r -> r+1
 * in P-1 steps. At step j rank r holds the shard of rank (r - j) mod P: it starts sending
 * that shard on and receiving the next, attends its queries to the shard in hand meanwhile,
 * and merges the partial output into the running one by their log-sum-exp (sp_data.h).
 *
 *   step 0:  out, lse  = attention(q, own k, v)            (the caller's strides, no copy)
 *   step j:  part, pl  = attention(q, shard of r - j)       (packed [B, H, Skv_s, D] K then V)
 *            out, lse  = merge(out, lse; part, pl)
 *
 * Exactness: each merge rounds out by a few float32 ulps and adds the partial lse's rounding
 * (~ulp(|lse|)) to the weights, comparable to the rounding of the logits that a single call
 * carries already; P-1 merges in sequence keep the f32 gate (tests/test_sp_*: P up to 4,
 * uneven shards, peaky and large inputs).
 *
 * With k, v replicated on every rank nothing travels: one call over the whole k, v.
 *
 * Workspace: two K/V buffers of the longest shard (the one in hand, the one arriving), the
 * partial output [B, Sq_r, H, D], its lse, and the running lse when the caller passes none. */
#include "sp_algorithms.h"

#include "sp_error.h"

enum { RING_KV0, RING_KV1, RING_PART, RING_PART_LSE, RING_ACC_LSE, RING_REGIONS };

static int64_t kv_shard(const sp_plan *pl, int r) { return pl->kv_shards[r]; }

/* The local problem of step j against the shard of rank `src`. */
static jattn_problem step_problem(const sp_plan *pl, int src) {
    const jattn_problem *w = &pl->whole;
    if (src == pl->rank) return sp_local_problem(pl, w->heads, pl->q_len, pl->kv_len, w->q, w->k, w->v, w->out);
    const jattn_strides packed = jattn_strides_head_major(w->heads, kv_shard(pl, src), w->head_dim);
    return sp_local_problem(pl, w->heads, pl->q_len, kv_shard(pl, src), w->q, packed, packed,
                            jattn_strides_token_major(w->heads, pl->q_len, w->head_dim));
}

jattn_status sp_ring_plan(sp_plan *pl) {
    const jattn_problem *w = &pl->whole;
    pl->heads = w->heads;
    pl->head_off = 0;
    jattn_status st;
    if (!pl->kv_shards || pl->ranks == 1) {
        jattn_problem p = sp_local_problem(pl, w->heads, pl->q_len, pl->kv_len, w->q, w->k, w->v, w->out);
        pl->attention_calls = 1;
        return sp_plan_local_call(pl, &p);
    }
    const int64_t row = w->batch * w->heads * w->head_dim; /* floats of one token over B and H */
    int64_t kv_max = 0;
    for (int s = 0; s < pl->ranks; s++) {
        if (kv_shard(pl, s) > kv_max) kv_max = kv_shard(pl, s);
        if (kv_shard(pl, s) > INT64_MAX / 2 / row) return sp_fail(JATTN_ERROR_OVERFLOW, "ring: a K/V shard overflows");
        if ((st = sp_plan_message(pl, 2 * row * kv_shard(pl, s), "ring: a K/V shard")) != JATTN_OK) return st;
    }
    const int64_t lse_floats = w->batch * w->heads * pl->q_len;
    const int64_t floats[RING_REGIONS] = {2 * row * kv_max, 2 * row * kv_max, row * pl->q_len, lse_floats, lse_floats};
    for (int i = 0; i < RING_REGIONS; i++)
        if (sp_plan_region(pl, floats[i]) != i) return sp_fail(JATTN_ERROR_OVERFLOW, "workspace: its size overflows");
    for (int s = 0; s < pl->ranks; s++) {
        jattn_problem p = step_problem(pl, s);
        if ((st = sp_plan_local_call(pl, &p)) != JATTN_OK) return st;
    }
    pl->attention_calls = pl->ranks;
    return JATTN_OK;
}

jattn_status sp_ring_run(const sp_plan *pl, const sp_run *run) {
    const jattn_problem *w = &pl->whole;
    if (!pl->kv_shards || pl->ranks == 1) {
        jattn_problem p = step_problem(pl, pl->rank);
        return sp_local_forward(pl, run, &p, run->q, run->k, run->v, run->out, run->lse);
    }
    const int P = pl->ranks, r = pl->rank, right = (r + 1) % P, left = (r + P - 1) % P;
    const int64_t row = w->batch * w->heads * w->head_dim;
    const sp_data *d = &run->data;
    float *buf[2] = {sp_region(pl, run, RING_KV0), sp_region(pl, run, RING_KV1)};
    float *part = sp_region(pl, run, RING_PART), *part_lse = sp_region(pl, run, RING_PART_LSE);
    float *lse = run->lse ? run->lse : sp_region(pl, run, RING_ACC_LSE);
    const sp_extent rows = {w->batch, w->heads, pl->q_len, w->head_dim};

    /* The own shard, packed for its trip: K then V, head-major. */
    const jattn_strides packed = jattn_strides_head_major(w->heads, pl->kv_len, w->head_dim);
    const sp_extent own = {w->batch, w->heads, pl->kv_len, w->head_dim};
    sp_outcome o = {JATTN_OK, JATTN_OK};
    sp_note_data(&o, d->copy(d, buf[0], packed, run->k, w->k, own));
    if (sp_may_compute(&o)) sp_note_data(&o, d->copy(d, buf[0] + row * pl->kv_len, packed, run->v, w->v, own));

    for (int j = 0; j < P && sp_may_communicate(&o); j++) {
        const int src = (r + P - j) % P, next = (r + 2 * P - j - 1) % P;
        float *cur = buf[j & 1], *arriving = buf[(j + 1) & 1];
        const int more = j + 1 < P;
        if (more)
            sp_note_collective(&o, run->coll->exchange_start(run->coll, cur, 2 * row * kv_shard(pl, src), right,
                                                             arriving, 2 * row * kv_shard(pl, next), left));
        if (sp_may_compute(&o)) {
            jattn_problem p = step_problem(pl, src);
            if (j == 0) {
                sp_note_data(&o, sp_local_forward(pl, run, &p, run->q, run->k, run->v, run->out, lse));
            } else {
                sp_note_data(&o,
                             sp_local_forward(pl, run, &p, run->q, cur, cur + row * kv_shard(pl, src), part, part_lse));
                if (sp_may_compute(&o))
                    sp_note_data(&o, d->merge(d, run->out, w->out, lse, part, p.out, part_lse, rows));
            }
        }
        if (more && sp_may_communicate(&o)) sp_note_collective(&o, run->coll->exchange_wait(run->coll));
    }
    return sp_outcome_status(&o);
}
