/* The public sequence-parallel calls of jattn.h: open the caller's communicator, validate
 * this rank's part, agree with every rank in one all-gather, then run the algorithm.
 *
 * This layer lives above include/jattn.h: it calls only the public API (jattn_select,
 * jattn_workspace_size, jattn_forward, jattn_set_last_error) and its own transports. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sp_agree.h"
#include "sp_algorithms.h"
#include "sp_ctx.h"
#include "sp_data.h"
#include "sp_error.h"
#include "sp_plan.h"
#include "sp_transport.h"

/* ---- problems and shards ---- */

jattn_sp_problem jattn_sp_problem_flux(int64_t batch, int64_t heads, int64_t head_dim, int ranks,
                                       const int64_t *seq_q_shards, const int64_t *seq_kv_shards, int rank) {
    jattn_sp_problem sp;
    memset(&sp, 0, sizeof sp);
    sp.ranks = ranks;
    sp.seq_q_shards = seq_q_shards;
    sp.seq_kv_shards = seq_kv_shards;
    sp.algorithm = JATTN_SP_AUTO;
    int64_t seq_q = 0, seq_kv = 0, mine_q = 0, mine_kv = 0;
    for (int r = 0; seq_q_shards && r < ranks; r++) {
        seq_q += seq_q_shards[r];
        if (r == rank) mine_q = seq_q_shards[r];
    }
    for (int r = 0; seq_kv_shards && r < ranks; r++) {
        seq_kv += seq_kv_shards[r];
        if (r == rank) mine_kv = seq_kv_shards[r];
    }
    if (!seq_kv_shards)
        seq_kv = mine_kv = seq_q; /* replicated k, v over the whole sequence: a caller
                                     with another length sets whole.seq_kv and k, v */
    sp.whole = jattn_problem_flux(batch, heads, mine_q, mine_kv, head_dim);
    sp.whole.seq_q = seq_q;
    sp.whole.seq_kv = seq_kv;
    return sp;
}

jattn_status jattn_sp_even_shards(int64_t seq, int ranks, int64_t *shards) {
    if (!shards) return sp_fail(JATTN_ERROR_NULL_POINTER, "shards: NULL");
    if (ranks < 1) return sp_fail(JATTN_ERROR_INVALID_DIMENSION, "ranks: %d, must be >= 1", ranks);
    if (seq < ranks)
        return sp_fail(JATTN_ERROR_INVALID_DIMENSION, "seq: %lld tokens cannot fill %d shards of at least one",
                       (long long)seq, ranks);
    for (int r = 0; r < ranks; r++) shards[r] = seq / ranks + (r < seq % ranks ? 1 : 0);
    return jattn_set_last_error(JATTN_OK, "");
}

/* ---- the context ---- */

jattn_status jattn_sp_ctx_create(jattn_sp_ctx **ctx) {
    if (!ctx) return sp_fail(JATTN_ERROR_NULL_POINTER, "ctx: NULL");
    jattn_sp_ctx *c = calloc(1, sizeof *c);
    if (!c) return sp_fail(JATTN_ERROR_OUT_OF_MEMORY, "ctx: allocation of %zu bytes failed", sizeof *c);
    jattn_status st = jattn_ctx_create(&c->local);
    if (st != JATTN_OK) {
        free(c);
        return st;
    }
    *ctx = c;
    return jattn_set_last_error(JATTN_OK, "");
}

void jattn_sp_ctx_free(jattn_sp_ctx *ctx) {
    if (!ctx) return;
    jattn_ctx_free(ctx->local);
    sp_device_state_free(ctx->device);
    free(ctx->scratch);
    free(ctx->transport_scratch);
    free(ctx->host_workspace);
    free(ctx);
}

/* A grow-only host buffer of at least `bytes`, aligned to `align`. */
static jattn_status grow(void **buf, size_t *have, size_t bytes, size_t align, const char *what) {
    if (*have >= bytes && *buf) return JATTN_OK;
    const size_t rounded = (bytes + align - 1) / align * align;
    void *p = rounded >= bytes ? aligned_alloc(align, rounded ? rounded : align) : NULL;
    if (!p) return sp_fail(JATTN_ERROR_OUT_OF_MEMORY, "%s: allocation of %zu bytes failed", what, bytes);
    free(*buf);
    *buf = p;
    *have = rounded;
    return JATTN_OK;
}

jattn_status sp_ctx_scratch(jattn_sp_ctx *ctx, size_t bytes, void **p) {
    jattn_status st = grow(&ctx->scratch, &ctx->scratch_bytes, bytes, 64, "scratch");
    if (st == JATTN_OK) *p = ctx->scratch;
    return st;
}

jattn_status sp_ctx_transport_scratch(jattn_sp_ctx *ctx, size_t bytes, void **p) {
    jattn_status st = grow(&ctx->transport_scratch, &ctx->transport_scratch_bytes, bytes, 64, "transport scratch");
    if (st == JATTN_OK) *p = ctx->transport_scratch;
    return st;
}

/* ---- the communicator ---- */

static jattn_status open_transport(sp_transport *t, const jattn_sp_comm *comm, const jattn_exec *exec,
                                   jattn_sp_ctx *ctx) {
    static const jattn_exec defaults;
    memset(t, 0, sizeof *t);
    if (!comm) return sp_fail(JATTN_ERROR_NULL_POINTER, "comm: NULL");
    if (comm->transport != JATTN_SP_MPI && comm->transport != JATTN_SP_NCCL)
        return sp_fail(JATTN_ERROR_INVALID_ARGUMENT, "comm.transport: %d is not a jattn_sp_transport",
                       (int)comm->transport);
    if (!comm->handle)
        return sp_fail(JATTN_ERROR_NULL_POINTER, "comm.handle: NULL (the address of the caller's %s)",
                       comm->transport == JATTN_SP_MPI ? "MPI_Comm" : "ncclComm_t");
    return comm->transport == JATTN_SP_MPI ? sp_mpi_open(t, comm->handle, ctx)
                                           : sp_nccl_open(t, comm->handle, exec ? exec : &defaults, ctx);
}

/* This rank's plan: what the transport found, then the arguments. */
static jattn_status plan_rank(sp_plan *pl, const sp_transport *t, const jattn_sp_problem *sp, const jattn_exec *exec) {
    if (t->local_status != JATTN_OK) return sp_fail(t->local_status, "%s", t->local_message);
    return sp_plan_make(pl, sp, exec, t->coll.rank, t->coll.size, t->coll.memory, t->coll.max_message);
}

/* This rank's plan without communicating: open, plan, close. *transport gets its name. */
static jattn_status plan_alone(sp_plan *pl, const char **transport, const jattn_sp_problem *sp, const jattn_exec *exec,
                               const jattn_sp_comm *comm) {
    sp_transport t;
    jattn_status st = open_transport(&t, comm, exec, NULL);
    if (st != JATTN_OK) return st;
    st = plan_rank(pl, &t, sp, exec);
    *transport = t.coll.name;
    t.close(&t);
    return st == JATTN_OK ? jattn_set_last_error(JATTN_OK, "") : st;
}

jattn_status jattn_sp_select(const jattn_sp_problem *problem, const jattn_exec *exec, const jattn_sp_comm *comm,
                             jattn_sp_selection *selection) {
    if (!selection) return sp_fail(JATTN_ERROR_NULL_POINTER, "selection: NULL");
    sp_plan pl;
    const char *transport = NULL;
    jattn_status st = plan_alone(&pl, &transport, problem, exec, comm);
    if (st != JATTN_OK) return st;
    jattn_sp_selection s;
    s.algorithm = pl.algorithm;
    s.algorithm_name = sp_algorithm_name(pl.algorithm);
    s.transport_name = transport;
    s.rank = pl.rank;
    s.ranks = pl.ranks;
    s.heads = pl.heads;
    s.attention_calls = pl.attention_calls;
    if (pl.attention_calls) {
        s.local = pl.local;
    } else { /* a Ulysses rank without heads: what its backend would run */
        jattn_selection none = {.backend = pl.exec.backend,
                                .backend_name = jattn_backend_name(pl.exec.backend),
                                .kernel = "none",
                                .isa = "none",
                                .threads = 0};
        s.local = none;
    }
    *selection = s;
    return JATTN_OK;
}

jattn_status jattn_sp_workspace_size(const jattn_sp_problem *problem, const jattn_exec *exec, const jattn_sp_comm *comm,
                                     size_t *bytes) {
    if (!bytes) return sp_fail(JATTN_ERROR_NULL_POINTER, "bytes: NULL");
    sp_plan pl;
    const char *transport = NULL;
    jattn_status st = plan_alone(&pl, &transport, problem, exec, comm);
    if (st == JATTN_OK) *bytes = sp_plan_workspace_bytes(&pl);
    return st;
}

/* ---- the forward ---- */

/* The workspace of a planned call: the caller's, the context's (host), or the stream-ordered
 * pool's (device; *owned set, to be freed on the stream after the run). */
static jattn_status acquire_workspace(const sp_plan *pl, jattn_sp_ctx *ctx, char **base, void **owned) {
    const size_t need = sp_plan_workspace_bytes(pl);
    const jattn_exec *e = &pl->exec;
    void *raw;
    *owned = NULL;
    if (e->workspace) {
        if (e->workspace_bytes < need)
            return sp_fail(JATTN_ERROR_WORKSPACE_TOO_SMALL,
                           "exec.workspace_bytes: %zu, this rank needs %zu (see jattn_sp_workspace_size)",
                           e->workspace_bytes, need);
        raw = e->workspace;
    } else if (e->memory == JATTN_MEMORY_HOST) {
        jattn_status st = grow(&ctx->host_workspace, &ctx->host_workspace_bytes, need, SP_ALIGN, "workspace");
        if (st != JATTN_OK) return st;
        raw = ctx->host_workspace;
    } else {
        jattn_status st = sp_device_alloc_async(need, e->cuda_stream, owned);
        if (st != JATTN_OK) return st;
        raw = *owned;
    }
    *base = (char *)(((uintptr_t)raw + SP_ALIGN - 1) & ~(uintptr_t)(SP_ALIGN - 1));
    return JATTN_OK;
}

/* Everything this rank checks alone before the agreement; fills the run. */
static jattn_status prepare(sp_plan *pl, sp_run *run, void **owned, const sp_transport *t, jattn_sp_ctx *ctx,
                            const jattn_sp_problem *sp, const jattn_exec *exec, const void *q, const void *k,
                            const void *v, void *out, float *lse) {
    jattn_status st = plan_rank(pl, t, sp, exec);
    if (st == JATTN_OK) st = sp_plan_check_pointers(pl, q, k, v, out, lse);
    if (st == JATTN_OK) {
        if (pl->exec.memory == JATTN_MEMORY_HOST)
            sp_data_host(&run->data);
        else
            st = sp_data_device(&run->data, pl->exec.cuda_stream);
    }
    if (st == JATTN_OK) st = acquire_workspace(pl, ctx, &run->base, owned);
    run->q = q;
    run->k = k;
    run->v = v;
    run->out = out;
    run->lse = lse;
    run->local_ctx = ctx->local;
    return st;
}

/* Every rank's descriptor, then the decision they all make. */
static jattn_status agree(sp_transport *t, jattn_sp_ctx *ctx, const jattn_sp_problem *sp, const jattn_exec *exec,
                          jattn_status local, int64_t **counts) {
    const int P = t->coll.size;
    void *scratch = NULL;
    const size_t desc_bytes = (size_t)P * sizeof(sp_descriptor);
    jattn_status st =
        sp_ctx_scratch(ctx, desc_bytes + sizeof(sp_descriptor) + 4 * (size_t)P * sizeof(int64_t), &scratch);
    if (st != JATTN_OK) return st; /* a few bytes per rank: the peers then wait (cannot be told) */
    sp_descriptor *all = scratch, *mine = all + P;
    *counts = (int64_t *)(void *)(mine + 1);
    sp_describe(mine, sp, exec, local, jattn_last_error());
    st = t->coll.allgather(&t->coll, mine, all, sizeof *mine);
    if (st != JATTN_OK) return st;
    return sp_agree(all, P);
}

/* The call on an open transport: this rank's checks, the agreement, the run. */
static jattn_status forward_on(sp_transport *t, jattn_sp_ctx *c, const jattn_sp_problem *problem,
                               const jattn_exec *exec, const void *q, const void *k, const void *v, void *out,
                               float *lse) {
    sp_plan pl;
    sp_run run;
    memset(&pl, 0, sizeof pl);
    memset(&run, 0, sizeof run);
    void *owned = NULL;
    jattn_status st = prepare(&pl, &run, &owned, t, c, problem, exec, q, k, v, out, lse);
    st = agree(t, c, problem, exec, st, &run.counts);
    if (st == JATTN_OK) {
        run.coll = &t->coll;
        st = pl.algorithm == JATTN_SP_ULYSSES ? sp_ulysses_run(&pl, &run) : sp_ring_run(&pl, &run);
    }
    if (owned) sp_device_free_async(owned, pl.exec.cuda_stream);
    return st;
}

static void close_nothing(sp_transport *t) { (void)t; }

jattn_status sp_forward_collectives(sp_collectives *coll, jattn_sp_ctx *ctx, const jattn_sp_problem *problem,
                                    const jattn_exec *exec, const void *q, const void *k, const void *v, void *out,
                                    float *lse) {
    sp_transport t;
    memset(&t, 0, sizeof t);
    t.coll = *coll;
    t.close = close_nothing;
    jattn_status st = forward_on(&t, ctx, problem, exec, q, k, v, out, lse);
    return st == JATTN_OK ? jattn_set_last_error(JATTN_OK, "") : st;
}

jattn_status jattn_sp_forward(jattn_sp_ctx *ctx, const jattn_sp_problem *problem, const jattn_exec *exec,
                              const jattn_sp_comm *comm, const void *q, const void *k, const void *v, void *out,
                              float *lse) {
    jattn_sp_ctx *c = ctx;
    jattn_status st;
    if (!c && (st = jattn_sp_ctx_create(&c)) != JATTN_OK) return st; /* for this call only */
    sp_transport t;
    st = open_transport(&t, comm, exec, c);
    if (st == JATTN_OK) {
        st = forward_on(&t, c, problem, exec, q, k, v, out, lse);
        t.close(&t);
    }
    if (!ctx) jattn_sp_ctx_free(c); /* leaves jattn_last_error() as it is */
    return st == JATTN_OK ? jattn_set_last_error(JATTN_OK, "") : st;
}
