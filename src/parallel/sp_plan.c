/* A rank's plan of a sequence-parallel call (see sp_plan.h): what one rank can validate
 * alone, in the order the messages name it; the algorithm's own part of the plan comes from
 * sp_ulysses.c or sp_ring.c, built from the blocks of sp_blocks.c. */
#include "sp_plan.h"

#include <stdint.h>
#include <string.h>

#include "sp_algorithms.h"
#include "sp_error.h"

jattn_sp_algorithm sp_auto_algorithm(int64_t heads, int ranks, int kv_replicated) {
    if (kv_replicated) return JATTN_SP_RING; /* nothing moves: one local call per rank */
    return heads % ranks == 0 ? JATTN_SP_ULYSSES : JATTN_SP_RING;
}

const char *sp_algorithm_name(jattn_sp_algorithm a) {
    return a == JATTN_SP_ULYSSES ? "ulysses" : a == JATTN_SP_RING ? "ring" : "auto";
}

/* The lengths of a shard array: each >= 1, summing to `whole` without overflow. */
static jattn_status check_shards(const char *name, const int64_t *shards, int ranks, int64_t whole,
                                 const char *whole_name) {
    if (!shards) return sp_fail(JATTN_ERROR_NULL_POINTER, "problem.%s: NULL", name);
    int64_t sum = 0;
    for (int r = 0; r < ranks; r++) {
        if (shards[r] < 1)
            return sp_fail(JATTN_ERROR_INVALID_DIMENSION, "problem.%s[%d]: %lld, must be >= 1", name, r,
                           (long long)shards[r]);
        if (shards[r] > INT64_MAX - sum)
            return sp_fail(JATTN_ERROR_OVERFLOW, "problem.%s: the sum overflows int64 at rank %d", name, r);
        sum += shards[r];
    }
    if (sum != whole)
        return sp_fail(JATTN_ERROR_INVALID_DIMENSION, "problem.%s: the shards sum to %lld, problem.whole.%s is %lld",
                       name, (long long)sum, whole_name, (long long)whole);
    return JATTN_OK;
}

/* The structure of a problem (dimensions, strides, sizes), whatever the caller's backend. */
static jattn_status check_structure(const jattn_problem *p, const char *what) {
    jattn_exec structural = {0};
    structural.backend = JATTN_BACKEND_REF;
    structural.memory = JATTN_MEMORY_HOST;
    jattn_selection sel;
    jattn_status st = jattn_select(p, &structural, &sel);
    if (st != JATTN_OK) return sp_fail(st, "%s: %s", what, jattn_last_error());
    return JATTN_OK;
}

size_t sp_plan_workspace_bytes(const sp_plan *pl) {
    const size_t local_off = (pl->layout_bytes + SP_ALIGN - 1) / SP_ALIGN * SP_ALIGN;
    return local_off + pl->local_workspace_bytes + SP_ALIGN - 1;
}

jattn_status sp_plan_make(sp_plan *pl, const jattn_sp_problem *sp, const jattn_exec *exec, int rank, int size,
                          jattn_memory memory, int64_t max_message) {
    static const jattn_exec defaults;
    memset(pl, 0, sizeof *pl);
    if (!sp) return sp_fail(JATTN_ERROR_NULL_POINTER, "problem: NULL");
    pl->exec = exec ? *exec : defaults;
    if ((int)pl->exec.memory != (int)memory)
        return sp_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.memory: the %s transport moves %s memory",
                       memory == JATTN_MEMORY_HOST ? "mpi" : "nccl", memory == JATTN_MEMORY_HOST ? "host" : "device");
    if (sp->ranks < 1) return sp_fail(JATTN_ERROR_INVALID_DIMENSION, "problem.ranks: %d, must be >= 1", sp->ranks);
    if (sp->ranks != size)
        return sp_fail(JATTN_ERROR_INVALID_ARGUMENT, "problem.ranks: %d, the communicator has %d ranks", sp->ranks,
                       size);
    if ((int)sp->algorithm < JATTN_SP_AUTO || (int)sp->algorithm > JATTN_SP_RING)
        return sp_fail(JATTN_ERROR_INVALID_ARGUMENT, "problem.algorithm: %d is not a jattn_sp_algorithm",
                       (int)sp->algorithm);
    pl->whole = sp->whole;
    pl->q_shards = sp->seq_q_shards;
    pl->kv_shards = sp->seq_kv_shards;
    pl->rank = rank;
    pl->ranks = size;
    pl->requested = sp->algorithm;
    pl->max_message = max_message;
    const jattn_problem *w = &pl->whole;

    /* The whole problem's dimensions (dense strides: only its sizes are checked here). */
    jattn_problem dims = jattn_problem_flux(w->batch, w->heads, w->seq_q, w->seq_kv, w->head_dim);
    dims.scale = w->scale;
    dims.dtype = w->dtype;
    jattn_status st = check_structure(&dims, "problem.whole");
    if (st != JATTN_OK) return st;
    if ((st = check_shards("seq_q_shards", pl->q_shards, size, w->seq_q, "seq_q")) != JATTN_OK) return st;
    if (pl->kv_shards && (st = check_shards("seq_kv_shards", pl->kv_shards, size, w->seq_kv, "seq_kv")) != JATTN_OK)
        return st;

    pl->q_len = pl->q_shards[rank];
    pl->q_off = sp_shard_offset(pl->q_shards, rank);
    pl->kv_len = pl->kv_shards ? pl->kv_shards[rank] : w->seq_kv;
    /* This rank's shard tensors under the caller's strides. */
    jattn_problem shard = *w;
    shard.seq_q = pl->q_len;
    shard.seq_kv = pl->kv_len;
    if ((st = check_structure(&shard, "this rank's shards")) != JATTN_OK) return st;

    pl->algorithm =
        pl->requested == JATTN_SP_AUTO ? sp_auto_algorithm(w->heads, size, pl->kv_shards == NULL) : pl->requested;
    st = pl->algorithm == JATTN_SP_ULYSSES ? sp_ulysses_plan(pl) : sp_ring_plan(pl);
    if (st != JATTN_OK) return st;
    if (pl->local_workspace_bytes > SIZE_MAX / 2 - pl->layout_bytes)
        return sp_fail(JATTN_ERROR_OVERFLOW, "workspace: its size overflows size_t");
    return JATTN_OK;
}

/* ---- pointers ---- */

typedef struct span {
    const char *name;
    uintptr_t lo, hi;
} span;

static int64_t tensor_elems(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return 1 + (p->batch - 1) * s.batch + (p->heads - 1) * s.head + (seq - 1) * s.token + (p->head_dim - 1);
}

static jattn_status make_span(const char *name, const void *ptr, int64_t elems, span *out) {
    if (!ptr) return sp_fail(JATTN_ERROR_NULL_POINTER, "%s: NULL", name);
    const uintptr_t lo = (uintptr_t)ptr, bytes = (uintptr_t)elems * sizeof(float);
    if (lo % sizeof(float))
        return sp_fail(JATTN_ERROR_INVALID_ARGUMENT, "%s: pointer %p is not aligned to %zu bytes", name, ptr,
                       sizeof(float));
    if (lo > UINTPTR_MAX - bytes)
        return sp_fail(JATTN_ERROR_OVERFLOW, "%s: pointer %p plus %lld elements wraps the address space", name, ptr,
                       (long long)elems);
    out->name = name;
    out->lo = lo;
    out->hi = lo + bytes;
    return JATTN_OK;
}

jattn_status sp_plan_check_pointers(const sp_plan *pl, const void *q, const void *k, const void *v, const void *out,
                                    const float *lse) {
    const jattn_problem *w = &pl->whole;
    span s[5];
    jattn_status st;
    if ((st = make_span("q", q, tensor_elems(w, w->q, pl->q_len), &s[0])) != JATTN_OK ||
        (st = make_span("k", k, tensor_elems(w, w->k, pl->kv_len), &s[1])) != JATTN_OK ||
        (st = make_span("v", v, tensor_elems(w, w->v, pl->kv_len), &s[2])) != JATTN_OK ||
        (st = make_span("out", out, tensor_elems(w, w->out, pl->q_len), &s[3])) != JATTN_OK)
        return st;
    const int n = lse ? 5 : 4;
    if (lse && (st = make_span("lse", lse, w->batch * w->heads * pl->q_len, &s[4])) != JATTN_OK) return st;
    for (int o = 3; o < n; o++)
        for (int i = 0; i < o; i++)
            if (s[o].lo < s[i].hi && s[i].lo < s[o].hi)
                return sp_fail(JATTN_ERROR_ALIASING, "%s: overlaps %s (%s is written, %s is read)", s[o].name,
                               s[i].name, s[o].name, s[i].name);
    return JATTN_OK;
}
