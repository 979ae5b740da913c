/* Ulysses attention. An all-to-all turns sequence shards into head shards: rank r sends
 * every rank t the heads of t's group from its own tokens and receives its own group's heads
 * over the whole sequence; one local attention per rank; an all-to-all turns the output back.
 *
 * Layouts. A block that travels is [S_len, B, Ht, D] (token outermost): rank t's group from
 * one shard's tokens, so received blocks of consecutive shards are consecutive tokens: the
 * receive buffer is the head-group tensor [S, B, Hr, D]. The local attention writes its output
 * in that layout (token-major, as the FLUX call does) and sends its token ranges back from where
 * it wrote them. Its inputs are first copied to head-major [B, Hr, S, D] (FLUX's q, k, v): read
 * in place by strides the cpu backend ran 20 % slower on token-major q, k, v at (12, 1536, 128)
 * (two ranks on two cores: 605 against 490 ms), while the copy streams O(S) floats beside the
 * O(S^2) attention. Other copies remain where the caller's strides meet a block: packing q, k,
 * v, unpacking out (and lse).
 *
 * Heads: rank t attends sp_head_count(H, P, t) heads, the first H mod P ranks one more; a
 * rank with none takes part in the all-to-alls with empty blocks.
 *
 * Workspace: the send buffer (the longest of this rank's q, k, v shards; the returning output
 * lands there too), the receive buffer (the longer of the head group's q, k, v), the head-group
 * q, k, v (k, v not when replicated: their head group is read from the caller's tensors),
 * output and lse, and the lse's send and receive blocks. */
#include "sp_algorithms.h"

#include "sp_error.h"

enum { U_SEND, U_RECV, U_Q, U_K, U_V, U_OUT, U_LSE, U_LSE_SEND, U_LSE_RECV, U_REGIONS };

/* Strides of a travelling block / head-group tensor of `heads` heads: [S, B, heads, D]. */
static jattn_strides block_strides(const sp_plan *pl, int64_t heads) {
    const int64_t D = pl->whole.head_dim;
    jattn_strides s = {heads * D, D, pl->whole.batch * heads * D};
    return s;
}

/* The local attention: head-major q, k, v of the head group (k, v: the caller's when
 * replicated), output [S, B, Hr, D]. */
static jattn_problem local_problem(const sp_plan *pl) {
    const jattn_problem *w = &pl->whole;
    const jattn_strides hq = jattn_strides_head_major(pl->heads, w->seq_q, w->head_dim);
    const jattn_strides hkv = jattn_strides_head_major(pl->heads, w->seq_kv, w->head_dim);
    const int replicated = pl->kv_shards == NULL;
    return sp_local_problem(pl, pl->heads, w->seq_q, w->seq_kv, hq, replicated ? w->k : hkv, replicated ? w->v : hkv,
                            block_strides(pl, pl->heads));
}

jattn_status sp_ulysses_plan(sp_plan *pl) {
    const jattn_problem *w = &pl->whole;
    const int P = pl->ranks, r = pl->rank;
    pl->heads = sp_head_count(w->heads, P, r);
    pl->head_off = sp_head_offset(w->heads, P, r);
    const int replicated = pl->kv_shards == NULL;
    const int64_t token_all = w->batch * w->heads * w->head_dim; /* one token, every head */
    const int64_t token_group = w->batch * pl->heads * w->head_dim;
    const int64_t send = token_all * (replicated || pl->q_len >= pl->kv_len ? pl->q_len : pl->kv_len);
    const int64_t lse_group = w->batch * pl->heads * w->seq_q;
    const int64_t longest = w->seq_q > w->seq_kv || replicated ? w->seq_q : w->seq_kv;
    const int64_t floats[U_REGIONS] = {send,
                                       token_group * longest,
                                       token_group * w->seq_q,
                                       replicated ? 0 : token_group * w->seq_kv,
                                       replicated ? 0 : token_group * w->seq_kv,
                                       token_group * w->seq_q,
                                       lse_group,
                                       lse_group,
                                       w->batch * w->heads * pl->q_len};
    for (int i = 0; i < U_REGIONS; i++)
        if (sp_plan_region(pl, floats[i]) != i) return sp_fail(JATTN_ERROR_OVERFLOW, "workspace: its size overflows");
    /* Every count and offset of the all-to-alls is at most one of these. */
    jattn_status st;
    if ((st = sp_plan_message(pl, send, "ulysses: this rank's shards")) != JATTN_OK ||
        (st = sp_plan_message(pl, token_group * (w->seq_q > w->seq_kv ? w->seq_q : w->seq_kv),
                              "ulysses: this rank's head group")) != JATTN_OK)
        return st;
    pl->attention_calls = pl->heads > 0;
    if (pl->heads == 0) return JATTN_OK;
    jattn_problem p = local_problem(pl);
    return sp_plan_local_call(pl, &p);
}

/* Sequence shards -> head groups: this rank's shard x (the caller's strides xs, `shards` the
 * lengths of every rank's) into the head-group tensor dst, head-major [B, Hr, S, D], through
 * the receive buffer [S, B, Hr, D]. */
static void scatter_heads(const sp_plan *pl, const sp_run *run, const float *x, jattn_strides xs, const int64_t *shards,
                          float *dst, sp_outcome *o) {
    const jattn_problem *w = &pl->whole;
    const int P = pl->ranks;
    const int64_t B = w->batch, D = w->head_dim, mine = shards[pl->rank];
    int64_t *send_count = run->counts, *send_off = send_count + P, *recv_count = send_off + P,
            *recv_off = recv_count + P;
    float *send = sp_region(pl, run, U_SEND);
    int64_t off = 0;
    for (int t = 0; t < P; t++) {
        const int64_t heads = sp_head_count(w->heads, P, t);
        send_count[t] = mine * B * heads * D;
        send_off[t] = off;
        off += send_count[t];
        if (heads && sp_may_compute(o)) {
            const sp_extent n = {B, heads, mine, D};
            sp_note_data(o, run->data.copy(&run->data, send + send_off[t], block_strides(pl, heads),
                                           x + sp_head_offset(w->heads, P, t) * xs.head, xs, n));
        }
    }
    for (int s = 0; s < P; s++) {
        recv_count[s] = shards[s] * B * pl->heads * D;
        recv_off[s] = sp_shard_offset(shards, s) * B * pl->heads * D;
    }
    float *recv = sp_region(pl, run, U_RECV);
    if (!sp_may_communicate(o)) return;
    sp_note_collective(o, run->coll->alltoallv(run->coll, send, send_count, send_off, recv, recv_count, recv_off));
    const int64_t seq = sp_shard_offset(shards, P);
    const sp_extent n = {B, pl->heads, seq, D};
    if (pl->heads && sp_may_compute(o))
        sp_note_data(o, run->data.copy(&run->data, dst, jattn_strides_head_major(pl->heads, seq, D), recv,
                                       block_strides(pl, pl->heads), n));
}

/* Head groups -> sequence shards: the output [S, B, Hr, D] back to the caller's out shard. */
static void gather_out(const sp_plan *pl, const sp_run *run, sp_outcome *o) {
    const jattn_problem *w = &pl->whole;
    const int P = pl->ranks;
    const int64_t B = w->batch, D = w->head_dim;
    int64_t *send_count = run->counts, *send_off = send_count + P, *recv_count = send_off + P,
            *recv_off = recv_count + P;
    float *back = sp_region(pl, run, U_SEND);
    int64_t off = 0;
    for (int s = 0; s < P; s++) {
        send_count[s] = pl->q_shards[s] * B * pl->heads * D;
        send_off[s] = sp_shard_offset(pl->q_shards, s) * B * pl->heads * D;
        recv_count[s] = pl->q_len * B * sp_head_count(w->heads, P, s) * D;
        recv_off[s] = off;
        off += recv_count[s];
    }
    if (!sp_may_communicate(o)) return;
    sp_note_collective(o, run->coll->alltoallv(run->coll, sp_region(pl, run, U_OUT), send_count, send_off, back,
                                               recv_count, recv_off));
    for (int t = 0; t < P && sp_may_compute(o); t++) {
        const int64_t heads = sp_head_count(w->heads, P, t);
        if (!heads) continue;
        const sp_extent n = {B, heads, pl->q_len, D};
        sp_note_data(o, run->data.copy(&run->data, run->out + sp_head_offset(w->heads, P, t) * w->out.head, w->out,
                                       back + recv_off[t], block_strides(pl, heads), n));
    }
}

/* The lse [B, Hr, S] of the head group back to the caller's [B, H, S_r]. */
static void gather_lse(const sp_plan *pl, const sp_run *run, sp_outcome *o) {
    const jattn_problem *w = &pl->whole;
    const int P = pl->ranks;
    const int64_t B = w->batch, S = w->seq_q, Hr = pl->heads;
    int64_t *send_count = run->counts, *send_off = send_count + P, *recv_count = send_off + P,
            *recv_off = recv_count + P;
    const float *group = sp_region(pl, run, U_LSE);
    float *send = sp_region(pl, run, U_LSE_SEND), *recv = sp_region(pl, run, U_LSE_RECV);
    const jattn_strides group_s = {Hr * S, S, 1};
    int64_t off = 0;
    for (int s = 0; s < P; s++) {
        const int64_t len = pl->q_shards[s], first = sp_shard_offset(pl->q_shards, s);
        send_count[s] = B * Hr * len;
        send_off[s] = B * Hr * first;
        recv_count[s] = B * sp_head_count(w->heads, P, s) * pl->q_len;
        recv_off[s] = off;
        off += recv_count[s];
        if (Hr && sp_may_compute(o)) {
            const jattn_strides block = {Hr * len, len, 1};
            const sp_extent n = {B, Hr, len, 1};
            sp_note_data(o, run->data.copy(&run->data, send + send_off[s], block, group + first, group_s, n));
        }
    }
    if (!sp_may_communicate(o)) return;
    sp_note_collective(o, run->coll->alltoallv(run->coll, send, send_count, send_off, recv, recv_count, recv_off));
    const jattn_strides mine = {w->heads * pl->q_len, pl->q_len, 1};
    for (int t = 0; t < P && sp_may_compute(o); t++) {
        const int64_t heads = sp_head_count(w->heads, P, t);
        if (!heads) continue;
        const jattn_strides block = {heads * pl->q_len, pl->q_len, 1};
        const sp_extent n = {B, heads, pl->q_len, 1};
        sp_note_data(o, run->data.copy(&run->data, run->lse + sp_head_offset(w->heads, P, t) * pl->q_len, mine,
                                       recv + recv_off[t], block, n));
    }
}

jattn_status sp_ulysses_run(const sp_plan *pl, const sp_run *run) {
    const jattn_problem *w = &pl->whole;
    const int replicated = pl->kv_shards == NULL;
    float *q = sp_region(pl, run, U_Q), *k = sp_region(pl, run, U_K), *v = sp_region(pl, run, U_V);
    sp_outcome o = {JATTN_OK, JATTN_OK};
    scatter_heads(pl, run, run->q, w->q, pl->q_shards, q, &o);
    if (!replicated) {
        scatter_heads(pl, run, run->k, w->k, pl->kv_shards, k, &o);
        scatter_heads(pl, run, run->v, w->v, pl->kv_shards, v, &o);
    }
    if (pl->heads > 0 && sp_may_compute(&o)) {
        jattn_problem p = local_problem(pl);
        const float *kk = replicated ? run->k + pl->head_off * w->k.head : k;
        const float *vv = replicated ? run->v + pl->head_off * w->v.head : v;
        sp_note_data(&o, sp_local_forward(pl, run, &p, q, kk, vv, sp_region(pl, run, U_OUT),
                                          run->lse ? sp_region(pl, run, U_LSE) : NULL));
    }
    gather_out(pl, run, &o);
    if (run->lse) gather_lse(pl, run, &o);
    return sp_outcome_status(&o);
}
