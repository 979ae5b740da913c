/* The sequence-parallel algorithms with every rank in one process (tests/sp_threads_transport.h):
 * P = 1, 2, 3, 4 and 8 threads on the host, the cpu backend (one thread each), every case of
 * tests/sp_cases.c: the assembled output and lse against the float64 reference of the whole
 * problem under the f32 gate, nothing written outside the outputs, the inputs unchanged;
 * then the agreement: ranks that disagree, or one rank's bad argument, give every rank the
 * same status and message, and write nothing. Runs without MPI; under TSan and ASan too. */
#include <stdlib.h>
#include <string.h>

#include "jattn_internal.h" /* parallel/sp_ctx.h, sp_transport.h */
#include "sp_cases.h"
#include "sp_threads_transport.h"

static jt_tally tally;

typedef struct job {
    const spt_case *k;
    spt_world *world;
    spt_rank *rank;
    jattn_exec exec[SPT_MAX_RANKS];
    /* per rank: what it passes differently (the error tests), and what it got */
    jattn_sp_problem sp[SPT_MAX_RANKS];
    const float *q[SPT_MAX_RANKS];
    jattn_status status[SPT_MAX_RANKS];
    char message[SPT_MAX_RANKS][256];
} job;

static void rank_main(int rank, void *arg) {
    job *j = arg;
    spt_rank *r = &j->rank[rank];
    sp_collectives c;
    spt_world_collectives(j->world, rank, NULL, &c);
    jattn_sp_ctx *ctx = NULL;
    jattn_status st = jattn_sp_ctx_create(&ctx);
    if (st == JATTN_OK)
        st = sp_forward_collectives(&c, ctx, &j->sp[rank], &j->exec[rank], j->q[rank], r->k, r->v, r->out,
                                    j->k->want_lse ? r->lse : NULL);
    j->status[rank] = st;
    snprintf(j->message[rank], sizeof j->message[rank], "%s", jattn_last_error());
    jattn_sp_ctx_free(ctx);
}

static int run_job(job *j, int ranks) {
    static const spt_mover host = {JATTN_MEMORY_HOST, NULL, NULL};
    j->world = spt_world_create(ranks, host);
    if (!j->world) return -1;
    int rc = spt_run_ranks(ranks, rank_main, j);
    spt_world_free(j->world);
    return rc;
}

static void run_case(const spt_case *k, int ranks, uint64_t seed) {
    char label[256];
    spt_case_label(k, ranks, label, sizeof label);
    spt_whole w;
    spt_rank rank[SPT_MAX_RANKS];
    memset(rank, 0, sizeof rank);
    int ok = spt_whole_init(&w, k, ranks, seed, 1) == 0;
    for (int r = 0; r < ranks && ok; r++) ok = spt_rank_init(&rank[r], &w, k, r) == 0;
    if (!ok) {
        printf("FAIL %s: out of memory\n", label);
        jt_tally_add(&tally, 0);
        return;
    }
    job j;
    memset(&j, 0, sizeof j);
    j.k = k;
    j.rank = rank;
    for (int r = 0; r < ranks; r++) {
        j.exec[r].backend = JATTN_BACKEND_CPU;
        j.exec[r].threads = 1;
        j.sp[r] = rank[r].sp;
        j.q[r] = rank[r].q;
    }
    const uint64_t hash = w.c.input_hash;
    int pass = run_job(&j, ranks) == 0 && spt_assemble(&w, rank, ranks, j.status, j.message, label);
    jt_case_seal(&w.c);
    if (pass && w.c.input_hash != hash) {
        printf("FAIL %s: an input was modified\n", label);
        pass = 0;
    }
    if (pass) pass = spt_check(&w, k->want_lse, label);
    jt_tally_add(&tally, pass);
    for (int r = 0; r < ranks; r++) spt_rank_free(&rank[r]);
    spt_whole_free(&w);
}

/* ---- the agreement ---- */

typedef enum bad { BAD_SEQ_Q, BAD_HEADS, BAD_SHARDS, BAD_ALGORITHM, BAD_Q_NULL, BAD_RANKS, BAD_PRECISION } bad;

/* Rank `who` (or every rank for BAD_RANKS) passes something wrong: every rank must return
 * `want`, all the same message, holding `needle`, and write nothing. */
static void run_disagreement(int ranks, bad what, int who, jattn_status want, const char *needle) {
    spt_case k = spt_small_case(ranks);
    k.layout = SPT_VIEWS;
    spt_whole w;
    spt_rank rank[SPT_MAX_RANKS];
    memset(rank, 0, sizeof rank);
    int ok = spt_whole_init(&w, &k, ranks, jt_seed(), 0) == 0;
    for (int r = 0; r < ranks && ok; r++) ok = spt_rank_init(&rank[r], &w, &k, r) == 0;
    job j;
    memset(&j, 0, sizeof j);
    j.k = &k;
    j.rank = rank;
    int64_t other_shards[SPT_MAX_RANKS];
    memcpy(other_shards, w.q_shards, sizeof other_shards);
    other_shards[0] += 1;
    other_shards[ranks - 1] -= 1;
    for (int r = 0; r < ranks && ok; r++) {
        j.exec[r].backend = JATTN_BACKEND_CPU;
        j.exec[r].threads = 1;
        j.sp[r] = rank[r].sp;
        j.q[r] = rank[r].q;
        if (r != who && what != BAD_RANKS) continue;
        switch (what) {
        case BAD_SEQ_Q: /* a consistent but other problem: one more query token on this rank */
            j.sp[r].whole.seq_q += 1;
            break;
        case BAD_HEADS: j.sp[r].whole.heads = 3; break;
        case BAD_SHARDS:
            j.sp[r].seq_q_shards = other_shards;
            j.sp[r].seq_kv_shards = other_shards;
            break;
        case BAD_ALGORITHM: j.sp[r].algorithm = JATTN_SP_ULYSSES; break;
        case BAD_Q_NULL: j.q[r] = NULL; break;
        case BAD_RANKS: j.sp[r].ranks = ranks + 1; break;
        case BAD_PRECISION: /* a rank whose backend cannot run its part */
            j.exec[r].precision = JATTN_PRECISION_TF32;
            break;
        }
    }
    if (what == BAD_SEQ_Q && ok) { /* keep that rank's own call valid: its shard array sums to its seq_q */
        other_shards[0] = w.q_shards[0] + 1;
        other_shards[ranks - 1] = w.q_shards[ranks - 1];
        j.sp[who].seq_q_shards = other_shards;
        j.sp[who].seq_kv_shards = w.kv_shards;
        j.sp[who].whole.seq_kv = w.c.p.seq_kv;
    }
    int pass = ok && run_job(&j, ranks) == 0;
    for (int r = 0; r < ranks && pass; r++) {
        if (j.status[r] != want || strcmp(j.message[r], j.message[0]) != 0 || !strstr(j.message[r], needle) ||
            !spt_rank_all_poison(&rank[r])) {
            printf("FAIL agreement P=%d case %d: rank %d: %s: '%s' (want %s with '%s', as rank 0: '%s')%s\n", ranks,
                   (int)what, r, jattn_status_name(j.status[r]), j.message[r], jattn_status_name(want), needle,
                   j.message[0], spt_rank_all_poison(&rank[r]) ? "" : " [wrote an output]");
            pass = 0;
        }
    }
    if (pass && getenv("JATTN_TEST_VERBOSE")) printf("ok   agreement P=%d: %s\n", ranks, j.message[0]);
    jt_tally_add(&tally, pass);
    for (int r = 0; r < ranks; r++) spt_rank_free(&rank[r]);
    spt_whole_free(&w);
}

int main(void) {
    if (!jt_backend_present(JATTN_BACKEND_CPU)) {
        printf("SKIP: the cpu backend is not present\n");
        return JT_SKIP;
    }
    const uint64_t seed = jt_seed();
    spt_case cases[64];
    static const int rank_counts[] = {1, 2, 3, 4, 8};
    for (size_t c = 0; c < sizeof rank_counts / sizeof rank_counts[0]; c++) {
        const int ranks = rank_counts[c];
        const int n = spt_cases(ranks, cases, 64);
        for (int i = 0; i < n; i++) run_case(&cases[i], ranks, seed + (uint64_t)(ranks * 1000 + i));
    }
    for (int ranks = 2; ranks <= 3; ranks++) {
        run_disagreement(ranks, BAD_SEQ_Q, 1, JATTN_ERROR_INVALID_ARGUMENT,
                         "problem.whole.seq_q is 24 on rank 0, 25 on rank 1");
        run_disagreement(ranks, BAD_HEADS, ranks - 1, JATTN_ERROR_INVALID_ARGUMENT, "problem.whole.heads");
        run_disagreement(ranks, BAD_SHARDS, 0, JATTN_ERROR_INVALID_ARGUMENT, "problem.seq_q_shards differs");
        run_disagreement(ranks, BAD_ALGORITHM, 1, JATTN_ERROR_INVALID_ARGUMENT,
                         "problem.algorithm is 2 on rank 0, 1 on rank 1");
        run_disagreement(ranks, BAD_Q_NULL, ranks - 1, JATTN_ERROR_NULL_POINTER, "q: NULL");
        run_disagreement(ranks, BAD_RANKS, 0, JATTN_ERROR_INVALID_ARGUMENT, "rank 0: problem.ranks");
        run_disagreement(ranks, BAD_PRECISION, ranks - 1, JATTN_ERROR_UNSUPPORTED, "exec.precision: the cpu backend");
    }
    return jt_tally_finish(&tally, "test_sp_threads");
}
