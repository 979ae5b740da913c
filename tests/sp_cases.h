/* The cases of the sequence-parallel tests, shared by the in-process tests (host and GPU) and
 * the MPI test: a table of problems per rank count, the whole problem with its inputs and
 * float64 reference (tests/harness.h), each rank's shard tensors (views into the whole inputs,
 * or copies in another layout) with a poisoned, guarded out and lse, and the check of the
 * assembled output against the reference with the f32 gate of kit/metrics.h. */
#ifndef JATTN_TEST_SP_CASES_H
#define JATTN_TEST_SP_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "jattn_parallel.h"

#define SPT_MAX_RANKS 8

typedef enum spt_kv {
    SPT_KV_LIKE_Q,    /* self-attention: k, v sharded as q */
    SPT_KV_EVEN,      /* k, v of another length, sharded evenly */
    SPT_KV_REPLICATED /* k, v whole on every rank (cross-attention) */
} spt_kv;

typedef enum spt_layout {
    SPT_VIEWS,      /* q, k, v: views into the whole head-major inputs (no copy); out token-major */
    SPT_HEAD_MAJOR, /* dense head-major copies; out head-major */
    SPT_PADDED      /* token-major copies with padded rows; out token-major with other padding */
} spt_layout;

typedef struct spt_case {
    int64_t batch, heads, seq_q, seq_kv, dim;
    int64_t q_shards[SPT_MAX_RANKS]; /* all 0: even */
    spt_kv kv;
    jattn_sp_algorithm algorithm;
    jt_dist dist;
    spt_layout layout;
    int want_lse;
} spt_case;

/* The cases for `ranks` ranks: every algorithm and AUTO, uneven shards, shards of one token,
 * heads that `ranks` does not divide (and fewer heads than ranks), cross-attention with k, v
 * replicated and sharded, every input distribution, three layouts, with and without lse.
 * @return how many were written (at most cap). */
int spt_cases(int ranks, spt_case *cases, int cap);
void spt_case_label(const spt_case *k, int ranks, char *buf, size_t cap);

/* The whole problem: inputs drawn from the case's distribution, the reference (when asked),
 * the shard arrays, and the assembled output and lse. */
typedef struct spt_whole {
    jt_case c;
    int ranks;
    int64_t q_shards[SPT_MAX_RANKS], kv_shards[SPT_MAX_RANKS];
    int kv_replicated;
    float *assembled, *assembled_lse; /* out in c.p.out's layout, lse [B, H, Sq] */
} spt_whole;

/* @return 0, or -1 on allocation failure. */
int spt_whole_init(spt_whole *w, const spt_case *k, int ranks, uint64_t seed, int with_reference);
void spt_whole_free(spt_whole *w);

/* One rank's tensors and its sequence-parallel problem. */
typedef struct spt_rank {
    jattn_sp_problem sp;
    int rank;
    const float *q, *k, *v;
    float *copies[3];
    float *out, *lse; /* inside out_alloc / lse_alloc, past a guard */
    float *out_alloc, *lse_alloc;
    int64_t out_n, lse_n;  /* allocated floats, guards included */
    unsigned char *inside; /* [out_n]: 1 where out's tensor is */
} spt_rank;

/* @return 0, or -1 on allocation failure. out and lse are poisoned. */
int spt_rank_init(spt_rank *r, const spt_whole *w, const spt_case *k, int rank);
void spt_rank_free(spt_rank *r);
/* Poisons out and lse again (everything, guards included). */
void spt_rank_poison(spt_rank *r);
/* 1 when every element of out and lse outside their tensors is still poison. */
int spt_rank_untouched(const spt_rank *r);
/* 1 when every element of out and lse is still poison (a failed call wrote nothing). */
int spt_rank_all_poison(const spt_rank *r);
/* This rank's out as dense [B, H, Sq_r, D]: dense must hold B*H*Sq_r*D floats. */
void spt_rank_dense_out(const spt_rank *r, const spt_whole *w, float *dense);
/* Places rank `rank`'s dense out [B, H, Sq_r, D] and lse [B, H, Sq_r] into the assembled ones. */
void spt_whole_place(spt_whole *w, int rank, const float *dense, const float *lse);

/* The small self-attention case of the error tests: B=1 H=4 S=24 D=16, even shards, ring. */
spt_case spt_small_case(int ranks);

/* The in-process tests' collection: every rank's status OK (else "FAIL <label>: rank r: ..."),
 * nothing outside its outputs written, its shard placed into w. @return 1 when all were. */
int spt_assemble(spt_whole *w, const spt_rank *rank, int ranks, const jattn_status *status, const char (*message)[256],
                 const char *label);

/* The assembled output (and lse when want_lse) against the reference under the f32 gate.
 * Prints a line on failure (and with JATTN_TEST_VERBOSE). @return 1 pass, 0 fail. */
int spt_check(const spt_whole *w, int want_lse, const char *label);

#endif
