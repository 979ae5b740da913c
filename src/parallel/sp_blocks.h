/* The building blocks of a sequence-parallel algorithm (sp_ulysses.c, sp_ring.c): a rank's plan
 * and run, shard and head arithmetic, workspace regions, message limits, and the local attention
 * call. The plan is made by sp_plan.c, which calls the algorithms; they call only these blocks,
 * never back into sp_plan.c. */
#ifndef JATTN_SP_BLOCKS_H
#define JATTN_SP_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "jattn_parallel.h"
#include "sp_collectives.h"
#include "sp_data.h"

/* Workspace regions, each aligned to SP_ALIGN bytes; their meaning is the algorithm's. */
#define SP_MAX_REGIONS 10
#define SP_ALIGN 256

typedef struct sp_plan {
    jattn_problem whole;      /* the caller's (strides: this rank's shards) */
    const int64_t *q_shards;  /* [ranks] */
    const int64_t *kv_shards; /* [ranks], or NULL when k, v are replicated */
    jattn_exec exec;          /* the caller's, or the defaults */
    int rank, ranks;
    jattn_sp_algorithm requested, algorithm; /* algorithm: resolved, never AUTO */
    int64_t max_message;                     /* the transport's limit on one count or offset */
    int64_t q_len, q_off;                    /* this rank's query tokens [q_off, q_off + q_len) */
    int64_t kv_len;                          /* this rank's key tokens (seq_kv when replicated) */
    int64_t heads, head_off;                 /* the heads this rank attends (Ulysses: its group; ring: all) */
    size_t region_off[SP_MAX_REGIONS];       /* byte offsets from the aligned base */
    int regions;
    size_t layout_bytes;          /* end of the last region */
    size_t local_workspace_bytes; /* the largest workspace of the local attention calls */
    jattn_selection local;        /* of the largest local call */
    double local_flops;           /* of that call, to pick the largest */
    int attention_calls;
} sp_plan;

/* Tokens before rank r's shard. */
int64_t sp_shard_offset(const int64_t *shards, int r);
/* Ulysses head groups: rank r of P attends heads [sp_head_offset, + sp_head_count). */
int64_t sp_head_count(int64_t heads, int ranks, int r);
int64_t sp_head_offset(int64_t heads, int ranks, int r);
/* The local attention problem over `heads` heads of the whole problem's scale and dims. */
jattn_problem sp_local_problem(const sp_plan *pl, int64_t heads, int64_t seq_q, int64_t seq_kv, jattn_strides q,
                               jattn_strides k, jattn_strides v, jattn_strides out);
/* Asks the caller's backend for a local call (selection and workspace), keeping the largest.
 * @return the status of jattn_select / jattn_workspace_size. */
jattn_status sp_plan_local_call(sp_plan *pl, const jattn_problem *p);
/* Appends a region of `floats` floats. @return its index, or -1 when it would overflow. */
int sp_plan_region(sp_plan *pl, int64_t floats);
/* Checks a message of `floats` floats (or an offset) against the transport's limit.
 * @return JATTN_OK or JATTN_ERROR_OVERFLOW (message set). */
jattn_status sp_plan_message(const sp_plan *pl, int64_t floats, const char *what);

/* What a run needs besides the plan. */
typedef struct sp_run {
    sp_collectives *coll;
    sp_data data;
    jattn_ctx *local_ctx; /* for the local jattn_forward calls (may be NULL) */
    char *base;           /* the workspace, aligned to SP_ALIGN */
    int64_t *counts;      /* host scratch of 4 * ranks: counts and offsets of an all-to-all */
    const float *q, *k, *v;
    float *out, *lse;
} sp_run;

static inline float *sp_region(const sp_plan *pl, const sp_run *run, int i) {
    return (float *)(void *)(run->base + pl->region_off[i]);
}

/* How a run is going. A failure of the data work (a copy, a local attention) stops the data
 * work but not the collectives after it, so that no peer waits for this rank; a failing
 * collective stops both. The run reports the data failure first. */
typedef struct sp_outcome {
    jattn_status data, collective;
} sp_outcome;

static inline int sp_may_compute(const sp_outcome *o) { return o->data == JATTN_OK && o->collective == JATTN_OK; }
static inline int sp_may_communicate(const sp_outcome *o) { return o->collective == JATTN_OK; }
static inline void sp_note_data(sp_outcome *o, jattn_status st) {
    if (o->data == JATTN_OK) o->data = st;
}
static inline void sp_note_collective(sp_outcome *o, jattn_status st) {
    if (o->collective == JATTN_OK) o->collective = st;
}
static inline jattn_status sp_outcome_status(const sp_outcome *o) {
    return o->data != JATTN_OK ? o->data : o->collective;
}

/* The local attention, with exec's workspace the plan's local region. */
jattn_status sp_local_forward(const sp_plan *pl, const sp_run *run, const jattn_problem *p, const float *q,
                              const float *k, const float *v, float *out, float *lse);

#endif
