/* See sp_cases.h. */
#include "sp_cases.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64
static const uint32_t POISON_BITS = 0x7FC0BEEFu;

static float poison(void) {
    float f;
    memcpy(&f, &POISON_BITS, sizeof f);
    return f;
}

static int is_poison(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u == POISON_BITS;
}

static int64_t sp_offset_of(const int64_t *shards, int r) {
    int64_t off = 0;
    for (int i = 0; i < r; i++) off += shards[i];
    return off;
}

/* ---- the table ---- */

typedef struct row {
    int64_t batch, heads, seq_q, seq_kv, dim;
    int shards; /* 0 even, 1 ones at the ends, 2 lopsided */
    spt_kv kv;
    jattn_sp_algorithm algorithm;
    jt_dist dist;
    spt_layout layout;
    int want_lse;
} row;

#define U JATTN_SP_ULYSSES
#define R JATTN_SP_RING
#define A JATTN_SP_AUTO

static const row table[] = {
    /* self-attention, even shards, every algorithm */
    {1, 4, 64, 64, 32, 0, SPT_KV_LIKE_Q, R, JT_NORMAL, SPT_VIEWS, 1},
    {1, 4, 64, 64, 32, 0, SPT_KV_LIKE_Q, U, JT_NORMAL, SPT_VIEWS, 1},
    {1, 4, 64, 64, 32, 0, SPT_KV_LIKE_Q, A, JT_UNIFORM, SPT_HEAD_MAJOR, 1},
    /* S not divisible by P; heads not divisible by P; batch 2 */
    {2, 5, 37, 37, 16, 0, SPT_KV_LIKE_Q, U, JT_UNIFORM, SPT_HEAD_MAJOR, 1},
    {2, 5, 37, 37, 16, 0, SPT_KV_LIKE_Q, R, JT_PEAKY, SPT_PADDED, 1},
    {2, 5, 37, 37, 16, 0, SPT_KV_LIKE_Q, A, JT_LARGE, SPT_VIEWS, 0},
    /* shards of one token */
    {1, 3, 21, 21, 64, 1, SPT_KV_LIKE_Q, R, JT_LARGE, SPT_VIEWS, 1},
    {1, 3, 21, 21, 64, 1, SPT_KV_LIKE_Q, U, JT_PEAKY, SPT_PADDED, 1},
    /* the merge's error at P steps: peaky and large logits, lopsided shards */
    {1, 8, 256, 256, 64, 2, SPT_KV_LIKE_Q, R, JT_PEAKY, SPT_VIEWS, 1},
    {1, 8, 256, 256, 64, 2, SPT_KV_LIKE_Q, R, JT_LARGE, SPT_HEAD_MAJOR, 1},
    {1, 8, 256, 256, 64, 2, SPT_KV_LIKE_Q, U, JT_LARGE, SPT_VIEWS, 1},
    /* cross-attention: k, v replicated (text tokens), or of another length and sharded */
    {1, 4, 40, 13, 32, 0, SPT_KV_REPLICATED, R, JT_NORMAL, SPT_VIEWS, 1},
    {1, 4, 40, 13, 32, 0, SPT_KV_REPLICATED, U, JT_PEAKY, SPT_HEAD_MAJOR, 1},
    {1, 4, 40, 13, 32, 0, SPT_KV_REPLICATED, A, JT_UNIFORM, SPT_PADDED, 0},
    {1, 2, 30, 50, 64, 2, SPT_KV_EVEN, R, JT_PEAKY, SPT_PADDED, 1},
    {1, 2, 30, 50, 64, 2, SPT_KV_EVEN, U, JT_NORMAL, SPT_VIEWS, 1}, /* fewer heads than ranks at P > 2 */
    /* one head: Ulysses ranks other than 0 idle; head_dim 128 */
    {1, 1, 48, 48, 128, 0, SPT_KV_LIKE_Q, U, JT_NORMAL, SPT_HEAD_MAJOR, 1},
    {1, 6, 48, 48, 128, 1, SPT_KV_LIKE_Q, R, JT_NORMAL, SPT_VIEWS, 0},
};

static void make_shards(int64_t seq, int ranks, int pattern, int64_t *shards) {
    jattn_sp_even_shards(seq, ranks, shards);
    if (ranks < 2 || pattern == 0) return;
    if (pattern == 1) { /* one token on the first and the last rank(s), the rest in between */
        int64_t rest = seq;
        for (int r = 0; r < ranks; r++) shards[r] = 1;
        rest -= ranks;
        shards[ranks > 2 ? ranks - 2 : 1] += rest;
        return;
    }
    /* lopsided: rank r gets a share growing with r, at least one */
    int64_t weights = 0, given = 0;
    for (int r = 0; r < ranks; r++) weights += 2 * r + 1;
    for (int r = 0; r < ranks; r++) {
        shards[r] = seq * (2 * r + 1) / weights;
        if (shards[r] < 1) shards[r] = 1;
        given += shards[r];
    }
    shards[ranks - 1] += seq - given;
}

int spt_cases(int ranks, spt_case *cases, int cap) {
    int n = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0] && n < cap; i++) {
        const row *t = &table[i];
        spt_case k;
        memset(&k, 0, sizeof k);
        k.batch = t->batch;
        k.heads = t->heads;
        k.seq_q = t->seq_q;
        k.seq_kv = t->seq_kv;
        k.dim = t->dim;
        k.kv = t->kv;
        k.algorithm = t->algorithm;
        k.dist = t->dist;
        k.layout = t->layout;
        k.want_lse = t->want_lse;
        if (k.seq_q < ranks || k.seq_kv < ranks) continue;
        make_shards(k.seq_q, ranks, t->shards, k.q_shards);
        cases[n++] = k;
    }
    return n;
}

void spt_case_label(const spt_case *k, int ranks, char *buf, size_t cap) {
    static const char *const layouts[] = {"views", "head-major", "padded"};
    static const char *const kvs[] = {"self", "kv-sharded", "kv-replicated"};
    int len =
        snprintf(buf, cap, "P=%d %s B=%lld H=%lld Sq=%lld Skv=%lld D=%lld %s %s %s%s shards", ranks,
                 k->algorithm == JATTN_SP_ULYSSES ? "ulysses"
                 : k->algorithm == JATTN_SP_RING  ? "ring"
                                                  : "auto",
                 (long long)k->batch, (long long)k->heads, (long long)k->seq_q, (long long)k->seq_kv, (long long)k->dim,
                 jt_dist_name(k->dist), layouts[k->layout], kvs[k->kv], k->want_lse ? " lse" : "");
    for (int r = 0; r < ranks && len > 0 && (size_t)len < cap; r++)
        len += snprintf(buf + len, cap - (size_t)len, "%s%lld", r ? "," : " ", (long long)k->q_shards[r]);
}

/* ---- the whole problem ---- */

int spt_whole_init(spt_whole *w, const spt_case *k, int ranks, uint64_t seed, int with_reference) {
    memset(w, 0, sizeof *w);
    w->ranks = ranks;
    w->kv_replicated = k->kv == SPT_KV_REPLICATED;
    memcpy(w->q_shards, k->q_shards, sizeof w->q_shards);
    if (k->kv == SPT_KV_LIKE_Q)
        memcpy(w->kv_shards, k->q_shards, sizeof w->kv_shards);
    else if (k->kv == SPT_KV_EVEN)
        jattn_sp_even_shards(k->seq_kv, ranks, w->kv_shards);
    jattn_problem p = jattn_problem_flux(k->batch, k->heads, k->seq_q, k->seq_kv, k->dim);
    if (jt_case_init(&w->c, &p) != 0) return -1;
    jt_rng rng;
    jt_rng_init(&rng, seed);
    jt_case_fill(&w->c, k->dist, &rng);
    if (with_reference && jt_case_reference(&w->c) != JATTN_OK) return -1;
    const int64_t n_out = k->batch * k->seq_q * k->heads * k->dim, n_lse = k->batch * k->heads * k->seq_q;
    w->assembled = malloc((size_t)n_out * sizeof(float));
    w->assembled_lse = malloc((size_t)n_lse * sizeof(float));
    if (!w->assembled || !w->assembled_lse) return -1;
    for (int64_t i = 0; i < n_out; i++) w->assembled[i] = poison();
    for (int64_t i = 0; i < n_lse; i++) w->assembled_lse[i] = poison();
    return 0;
}

void spt_whole_free(spt_whole *w) {
    jt_case_free(&w->c);
    free(w->assembled);
    free(w->assembled_lse);
    memset(w, 0, sizeof *w);
}

/* ---- one rank ---- */

/* dst (strides ds) = the rows [first, first + n) of the whole head-major x of `seq` tokens. */
static void copy_rows(const jattn_problem *p, float *dst, jattn_strides ds, const float *x, int64_t seq, int64_t first,
                      int64_t n) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < n; i++)
                memcpy(dst + b * ds.batch + h * ds.head + i * ds.token,
                       x + ((b * p->heads + h) * seq + first + i) * p->head_dim, (size_t)p->head_dim * sizeof(float));
}

static jattn_strides layout_strides(spt_layout layout, int64_t heads, int64_t seq, int64_t dim, int64_t pad) {
    if (layout == SPT_HEAD_MAJOR) return jattn_strides_head_major(heads, seq, dim);
    jattn_strides s = {seq * (heads * dim + pad), dim, heads * dim + pad};
    return s;
}

int spt_rank_init(spt_rank *r, const spt_whole *w, const spt_case *k, int rank) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
    const jattn_problem *whole = &w->c.p;
    const int64_t B = k->batch, H = k->heads, D = k->dim;
    const int64_t sq = w->q_shards[rank], qo = sp_offset_of(w->q_shards, rank);
    const int64_t skv = w->kv_replicated ? k->seq_kv : w->kv_shards[rank];
    const int64_t kvo = w->kv_replicated ? 0 : sp_offset_of(w->kv_shards, rank);
    jattn_sp_problem sp;
    memset(&sp, 0, sizeof sp);
    sp.whole = *whole; /* dims, scale (set by the distribution) */
    sp.ranks = w->ranks;
    sp.seq_q_shards = w->q_shards;
    sp.seq_kv_shards = w->kv_replicated ? NULL : w->kv_shards;
    sp.algorithm = k->algorithm;
    jattn_problem shard = *whole;
    shard.seq_q = sq;
    shard.seq_kv = skv;
    if (k->layout == SPT_VIEWS) {
        sp.whole.q = whole->q;
        sp.whole.k = whole->k;
        sp.whole.v = whole->v;
        r->q = w->c.q + qo * D;
        r->k = w->c.k + kvo * D;
        r->v = w->c.v + kvo * D;
        sp.whole.out = jattn_strides_token_major(H, sq, D);
    } else {
        const int64_t pad = k->layout == SPT_PADDED ? 4 : 0;
        sp.whole.q = layout_strides(k->layout, H, sq, D, pad);
        sp.whole.k = sp.whole.v = layout_strides(k->layout, H, skv, D, pad);
        shard.q = sp.whole.q;
        shard.k = sp.whole.k;
        const int64_t n[3] = {kit_tensor_span(&shard, sp.whole.q, sq), kit_tensor_span(&shard, sp.whole.k, skv),
                              kit_tensor_span(&shard, sp.whole.v, skv)};
        for (int t = 0; t < 3; t++) {
            r->copies[t] = malloc((size_t)n[t] * sizeof(float));
            if (!r->copies[t]) return -1;
            for (int64_t i = 0; i < n[t]; i++) r->copies[t][i] = NAN; /* gaps: a read of one shows */
        }
        copy_rows(whole, r->copies[0], sp.whole.q, w->c.q, k->seq_q, qo, sq);
        copy_rows(whole, r->copies[1], sp.whole.k, w->c.k, k->seq_kv, kvo, skv);
        copy_rows(whole, r->copies[2], sp.whole.v, w->c.v, k->seq_kv, kvo, skv);
        r->q = r->copies[0];
        r->k = r->copies[1];
        r->v = r->copies[2];
        sp.whole.out = layout_strides(k->layout, H, sq, D, k->layout == SPT_PADDED ? 8 : 0);
    }
    r->sp = sp;
    shard.out = sp.whole.out;
    const int64_t span = kit_tensor_span(&shard, shard.out, sq);
    r->out_n = span + 2 * GUARD;
    r->lse_n = B * H * sq + 2 * GUARD;
    r->out_alloc = malloc((size_t)r->out_n * sizeof(float));
    r->lse_alloc = malloc((size_t)r->lse_n * sizeof(float));
    r->inside = calloc((size_t)r->out_n, 1);
    if (!r->out_alloc || !r->lse_alloc || !r->inside) return -1;
    r->out = r->out_alloc + GUARD;
    r->lse = r->lse_alloc + GUARD;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < sq; i++)
                memset(r->inside + GUARD + b * shard.out.batch + h * shard.out.head + i * shard.out.token, 1,
                       (size_t)D);
    spt_rank_poison(r);
    return 0;
}

void spt_rank_free(spt_rank *r) {
    for (int t = 0; t < 3; t++) free(r->copies[t]);
    free(r->out_alloc);
    free(r->lse_alloc);
    free(r->inside);
    memset(r, 0, sizeof *r);
}

void spt_rank_poison(spt_rank *r) {
    for (int64_t i = 0; i < r->out_n; i++) r->out_alloc[i] = poison();
    for (int64_t i = 0; i < r->lse_n; i++) r->lse_alloc[i] = poison();
}

int spt_rank_untouched(const spt_rank *r) {
    const int64_t n_lse = r->lse_n - 2 * GUARD;
    for (int64_t i = 0; i < r->out_n; i++)
        if (!r->inside[i] && !is_poison(r->out_alloc[i])) return 0;
    for (int64_t i = 0; i < r->lse_n; i++)
        if ((i < GUARD || i >= GUARD + n_lse) && !is_poison(r->lse_alloc[i])) return 0;
    return 1;
}

int spt_rank_all_poison(const spt_rank *r) {
    for (int64_t i = 0; i < r->out_n; i++)
        if (!is_poison(r->out_alloc[i])) return 0;
    for (int64_t i = 0; i < r->lse_n; i++)
        if (!is_poison(r->lse_alloc[i])) return 0;
    return 1;
}

void spt_rank_dense_out(const spt_rank *r, const spt_whole *w, float *dense) {
    const jattn_problem *p = &w->c.p;
    const jattn_strides s = r->sp.whole.out;
    const int64_t sq = w->q_shards[r->rank];
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < sq; i++)
                memcpy(dense + ((b * p->heads + h) * sq + i) * p->head_dim,
                       r->out + b * s.batch + h * s.head + i * s.token, (size_t)p->head_dim * sizeof(float));
}

void spt_whole_place(spt_whole *w, int rank, const float *dense, const float *lse) {
    const jattn_problem *p = &w->c.p;
    const int64_t sq = w->q_shards[rank], qo = sp_offset_of(w->q_shards, rank);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < sq; i++) {
                memcpy(w->assembled + b * p->out.batch + h * p->out.head + (qo + i) * p->out.token,
                       dense + ((b * p->heads + h) * sq + i) * p->head_dim, (size_t)p->head_dim * sizeof(float));
                w->assembled_lse[(b * p->heads + h) * p->seq_q + qo + i] = lse[(b * p->heads + h) * sq + i];
            }
}

int spt_check(const spt_whole *w, int want_lse, const char *label) {
    const jattn_problem *p = &w->c.p;
    jattn_metrics m;
    jattn_metrics_compute(p, w->assembled, w->c.ref, &m);
    const int ok = jattn_metrics_pass(&m, JATTN_PRECISION_F32);
    const int lse_ok = !want_lse || jattn_lse_pass(w->assembled_lse, w->c.ref_lse, p->batch * p->heads * p->seq_q,
                                                   JATTN_PRECISION_F32);
    if (!ok || !lse_ok || getenv("JATTN_TEST_VERBOSE"))
        printf("%s %s: rel_l2 %.3g max_abs %.3g (max|ref| %.3g) cos %.9f nonfinite %lld%s%s (seed %llu)\n",
               ok && lse_ok ? "ok  " : "FAIL", label, m.rel_l2, m.max_abs, m.max_ref, m.cos, (long long)m.nonfinite,
               ok ? "" : " [out gate]", lse_ok ? "" : " [lse gate]", (unsigned long long)jt_seed());
    return ok && lse_ok;
}

spt_case spt_small_case(int ranks) {
    spt_case k;
    memset(&k, 0, sizeof k);
    k.batch = 1;
    k.heads = 4;
    k.seq_q = k.seq_kv = 24;
    k.dim = 16;
    k.kv = SPT_KV_LIKE_Q;
    k.algorithm = JATTN_SP_RING;
    k.layout = SPT_HEAD_MAJOR;
    k.want_lse = 1;
    jattn_sp_even_shards(k.seq_q, ranks, k.q_shards);
    return k;
}

int spt_assemble(spt_whole *w, const spt_rank *rank, int ranks, const jattn_status *status, const char (*message)[256],
                 const char *label) {
    const jattn_problem *p = &w->c.p;
    float *dense = malloc((size_t)(p->batch * p->heads * p->seq_q * p->head_dim) * sizeof(float));
    int pass = dense != NULL;
    for (int r = 0; r < ranks && pass; r++) {
        if (status[r] != JATTN_OK) {
            printf("FAIL %s: rank %d: %s: %s\n", label, r, jattn_status_name(status[r]), message[r]);
            pass = 0;
        } else if (!spt_rank_untouched(&rank[r])) {
            printf("FAIL %s: rank %d wrote outside its out or lse\n", label, r);
            pass = 0;
        } else {
            spt_rank_dense_out(&rank[r], w, dense);
            spt_whole_place(w, r, dense, rank[r].lse);
        }
    }
    free(dense);
    return pass;
}
