/* The MPI transport for real: run as `mpirun -np P test_sp_mpi` (P = 2, 3, 4 in ctest).
 *
 * Every case of tests/sp_cases.c for P ranks, each rank in its own process on the cpu backend
 * (one thread): every rank computes its shard through jattn_sp_forward on MPI_COMM_WORLD, rank
 * 0 gathers the shards and checks the assembled output and lse against the float64 reference
 * of the whole problem under the f32 gate; every rank checks that nothing outside its outputs
 * was written. Every other case runs on a caller workspace of jattn_sp_workspace_size bytes.
 *
 * Then every error of the issue, each checked on every rank: the same status and message on
 * every rank of the communicator, nothing written, and no rank left waiting (ctest's timeout
 * catches a hang): problems that disagree between ranks, a communicator of the wrong size (a
 * wrong rank count; a sub-communicator), a NULL communicator (NULL comm, NULL handle,
 * MPI_COMM_NULL), a rank whose backend cannot run its part, a rank's own bad argument, a
 * workspace too small on one rank. Exit status: rank 0's. */
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "sp_cases.h"

static jt_tally tally;
static int world_rank, world_size;

#define MESSAGE_BYTES 256

/* Everything a rank reports to rank 0 after a call. */
typedef struct report {
    int status;
    int untouched; /* nothing outside out / lse written (or, for errors, nothing at all) */
    char message[MESSAGE_BYTES];
} report;

static void gather_reports(const report *mine, report *all) {
    MPI_Gather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE, 0, MPI_COMM_WORLD);
}

/* 1 on every rank when rank 0 says so. */
static int agreed(int ok) {
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok;
}

static jattn_sp_comm world_comm(MPI_Comm *comm) {
    jattn_sp_comm c = {JATTN_SP_MPI, comm};
    return c;
}

/* ---- the cases ---- */

static void run_case(const spt_case *k, int index, uint64_t seed, jattn_sp_ctx *ctx) {
    char label[256];
    spt_case_label(k, world_size, label, sizeof label);
    spt_whole w;
    spt_rank r;
    int ok = spt_whole_init(&w, k, world_size, seed, world_rank == 0) == 0 && spt_rank_init(&r, &w, k, world_rank) == 0;
    MPI_Comm comm = MPI_COMM_WORLD;
    const jattn_sp_comm c = world_comm(&comm);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CPU;
    e.threads = 1;
    void *workspace = NULL;
    size_t bytes = 0;
    report mine;
    memset(&mine, 0, sizeof mine);
    jattn_status st = ok ? JATTN_OK : JATTN_ERROR_OUT_OF_MEMORY;
    if (ok && index % 2 == 1) { /* the caller's workspace, of the size asked for */
        st = jattn_sp_workspace_size(&r.sp, &e, &c, &bytes);
        if (st == JATTN_OK && !(workspace = malloc(bytes ? bytes : 1))) st = JATTN_ERROR_OUT_OF_MEMORY;
        e.workspace = workspace;
        e.workspace_bytes = bytes;
    }
    /* Every rank calls, whatever went wrong before: a rank that skipped would hang the others. */
    jattn_status call = jattn_sp_forward(ctx, &r.sp, &e, &c, r.q, r.k, r.v, r.out, k->want_lse ? r.lse : NULL);
    mine.status = st != JATTN_OK ? st : call;
    snprintf(mine.message, sizeof mine.message, "%s", jattn_last_error());
    mine.untouched = ok && spt_rank_untouched(&r);
    report all[SPT_MAX_RANKS];
    gather_reports(&mine, all);

    const int64_t B = k->batch, H = k->heads, D = k->dim, sq = w.q_shards[world_rank];
    float *dense = malloc((size_t)(B * H * sq * D) * sizeof(float));
    float *whole_dense = world_rank == 0 ? malloc((size_t)(B * H * k->seq_q * D) * sizeof(float)) : NULL;
    float *whole_lse = world_rank == 0 ? malloc((size_t)(B * H * k->seq_q) * sizeof(float)) : NULL;
    if (dense) spt_rank_dense_out(&r, &w, dense);
    int counts[SPT_MAX_RANKS], offs[SPT_MAX_RANKS], lcounts[SPT_MAX_RANKS], loffs[SPT_MAX_RANKS];
    for (int i = 0, off = 0, loff = 0; i < world_size; i++) {
        counts[i] = (int)(B * H * w.q_shards[i] * D);
        lcounts[i] = (int)(B * H * w.q_shards[i]);
        offs[i] = off;
        loffs[i] = loff;
        off += counts[i];
        loff += lcounts[i];
    }
    MPI_Gatherv(dense, counts[world_rank], MPI_FLOAT, whole_dense, counts, offs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    MPI_Gatherv(r.lse, lcounts[world_rank], MPI_FLOAT, whole_lse, lcounts, loffs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (world_rank == 0) {
        int pass = whole_dense && whole_lse;
        for (int i = 0; i < world_size && pass; i++) {
            if (all[i].status != JATTN_OK) {
                printf("FAIL %s: rank %d: %s: %s\n", label, i, jattn_status_name((jattn_status)all[i].status),
                       all[i].message);
                pass = 0;
            } else if (!all[i].untouched) {
                printf("FAIL %s: rank %d wrote outside its out or lse\n", label, i);
                pass = 0;
            } else {
                spt_whole_place(&w, i, whole_dense + offs[i], whole_lse + loffs[i]);
            }
        }
        if (pass) pass = spt_check(&w, k->want_lse, label);
        jt_tally_add(&tally, pass);
    }
    free(dense);
    free(whole_dense);
    free(whole_lse);
    free(workspace);
    spt_rank_free(&r);
    spt_whole_free(&w);
}

/* What this rank asks for: its algorithm and transport, as jattn_sp_select reports them. */
static void check_select(void) {
    int64_t shards[SPT_MAX_RANKS];
    jattn_sp_even_shards(64, world_size, shards);
    MPI_Comm comm = MPI_COMM_WORLD;
    const jattn_sp_comm c = world_comm(&comm);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CPU;
    int ok = 1;
    for (int heads = 1; heads <= 8; heads++) {
        jattn_sp_problem sp = jattn_sp_problem_flux(1, heads, 32, world_size, shards, shards, world_rank);
        jattn_sp_selection sel;
        jattn_status st = jattn_sp_select(&sp, &e, &c, &sel);
        const int ulysses = heads % world_size == 0;
        const int64_t want_heads = ulysses ? heads / world_size : heads;
        if (st != JATTN_OK || sel.algorithm != (ulysses ? JATTN_SP_ULYSSES : JATTN_SP_RING) ||
            strcmp(sel.transport_name, "mpi") != 0 || sel.rank != world_rank || sel.ranks != world_size ||
            sel.heads != want_heads || sel.attention_calls != (ulysses ? 1 : world_size) ||
            sel.local.backend != JATTN_BACKEND_CPU) {
            printf("FAIL rank %d: jattn_sp_select at H=%d: %s (%s), algorithm %s, heads %lld, calls %d\n", world_rank,
                   heads, jattn_status_name(st), jattn_last_error(), st == JATTN_OK ? sel.algorithm_name : "-",
                   st == JATTN_OK ? (long long)sel.heads : -1LL, st == JATTN_OK ? sel.attention_calls : -1);
            ok = 0;
        }
        /* replicated k, v: AUTO is the ring, which moves nothing */
        sp.seq_kv_shards = NULL;
        sp.whole.seq_kv = 77;
        sp.whole.k = sp.whole.v = jattn_strides_head_major(heads, 77, 32);
        st = jattn_sp_select(&sp, &e, &c, &sel);
        if (st != JATTN_OK || sel.algorithm != JATTN_SP_RING || sel.attention_calls != 1) {
            printf("FAIL rank %d: jattn_sp_select, replicated k, v at H=%d: %s (%s)\n", world_rank, heads,
                   jattn_status_name(st), jattn_last_error());
            ok = 0;
        }
    }
    int all_ok = 0;
    MPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
    if (world_rank == 0) jt_tally_add(&tally, all_ok);
}

/* ---- the errors ---- */

typedef enum error_case {
    ERR_SEQ_Q,         /* rank 1: a consistent problem of one more token */
    ERR_HEADS,         /* the last rank: other heads */
    ERR_SHARDS,        /* the last rank: other shard lengths of the same sum (its own one shorter) */
    ERR_ALGORITHM,     /* rank 1: another algorithm */
    ERR_SCALE,         /* the last rank: another scale */
    ERR_RANKS,         /* every rank: ranks = P + 1 */
    ERR_SUBCOMM,       /* a communicator of P - 1 ranks; the last rank holds MPI_COMM_NULL */
    ERR_COMM_NULL,     /* every rank: comm NULL */
    ERR_HANDLE_NULL,   /* every rank: comm.handle NULL */
    ERR_MPI_COMM_NULL, /* every rank: *handle == MPI_COMM_NULL */
    ERR_PRECISION,     /* the last rank's backend cannot run its part: tf32 on the cpu */
    ERR_MEMORY,        /* rank 0 passes device memory to the MPI transport */
    ERR_Q_NULL,        /* the last rank: q NULL */
    ERR_LSE_ALIAS,     /* rank 1: lse overlaps out */
    ERR_WORKSPACE,     /* rank 0: a workspace one byte too small */
    ERR_SUM,           /* every rank: shards that do not sum to seq_q */
    ERR_COUNT
} error_case;

typedef struct expectation {
    jattn_status status;
    const char *needle; /* in the message */
    int local;          /* the rank fails alone (NULL communicator): messages need not match others' */
} expectation;

static expectation expect(error_case e, int rank) {
    const int last = world_size - 1;
    switch (e) {
    case ERR_SEQ_Q:
        return (expectation){JATTN_ERROR_INVALID_ARGUMENT,
                             "ranks disagree: problem.whole.seq_q is 24 on rank 0, 25 on rank 1", 0};
    case ERR_HEADS:
        return (expectation){JATTN_ERROR_INVALID_ARGUMENT,
                             "ranks disagree: problem.whole.heads is 4 on rank 0, 3 on rank", 0};
    case ERR_SHARDS:
        return (expectation){JATTN_ERROR_INVALID_ARGUMENT,
                             "ranks disagree: problem.seq_q_shards differs between rank 0 and rank", 0};
    case ERR_ALGORITHM:
        return (expectation){JATTN_ERROR_INVALID_ARGUMENT,
                             "ranks disagree: problem.algorithm is 2 on rank 0, 1 on rank 1", 0};
    case ERR_SCALE:
        return (expectation){JATTN_ERROR_INVALID_ARGUMENT, "ranks disagree: problem.whole.scale differs", 0};
    case ERR_RANKS: return (expectation){JATTN_ERROR_INVALID_ARGUMENT, "rank 0: problem.ranks", 0};
    case ERR_SUBCOMM:
        if (rank == last) return (expectation){JATTN_ERROR_NULL_POINTER, "comm.handle: points to MPI_COMM_NULL", 1};
        return (expectation){JATTN_ERROR_INVALID_ARGUMENT, "rank 0: problem.ranks", 0};
    case ERR_COMM_NULL: return (expectation){JATTN_ERROR_NULL_POINTER, "comm: NULL", 1};
    case ERR_HANDLE_NULL: return (expectation){JATTN_ERROR_NULL_POINTER, "comm.handle: NULL", 1};
    case ERR_MPI_COMM_NULL: return (expectation){JATTN_ERROR_NULL_POINTER, "comm.handle: points to MPI_COMM_NULL", 1};
    case ERR_PRECISION:
        return (expectation){JATTN_ERROR_UNSUPPORTED, "exec.precision: the cpu backend computes f32 only", 0};
    case ERR_MEMORY:
        return (expectation){JATTN_ERROR_INVALID_ARGUMENT, "rank 0: exec.memory: the mpi transport moves host memory",
                             0};
    case ERR_Q_NULL: return (expectation){JATTN_ERROR_NULL_POINTER, "q: NULL", 0};
    case ERR_LSE_ALIAS: return (expectation){JATTN_ERROR_ALIASING, "rank 1: lse: overlaps out", 0};
    case ERR_WORKSPACE: return (expectation){JATTN_ERROR_WORKSPACE_TOO_SMALL, "rank 0: exec.workspace_bytes", 0};
    case ERR_SUM:
        return (expectation){JATTN_ERROR_INVALID_DIMENSION, "rank 0: problem.seq_q_shards: the shards sum to 23", 0};
    default: return (expectation){JATTN_OK, "", 0};
    }
}

static void run_error(error_case what) {
    const int last = world_size - 1;
    const spt_case k = spt_small_case(world_size);
    spt_whole w;
    spt_rank r;
    int ok = spt_whole_init(&w, &k, world_size, 1, 0) == 0 && spt_rank_init(&r, &w, &k, world_rank) == 0;
    if (!ok) abort(); /* a few kilobytes */

    jattn_sp_problem sp = r.sp;
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CPU;
    e.threads = 1;
    MPI_Comm comm = MPI_COMM_WORLD, sub = MPI_COMM_NULL, null_comm = MPI_COMM_NULL;
    jattn_sp_comm c = world_comm(&comm);
    const jattn_sp_comm *cp = &c;
    const float *q = r.q;
    float *lse = r.lse;
    void *workspace = NULL;
    int64_t other[SPT_MAX_RANKS];
    memcpy(other, w.q_shards, sizeof other);
    switch (what) {
    case ERR_SEQ_Q:
        if (world_rank == 1) {
            sp.whole.seq_q += 1;
            other[0] += 1;
            sp.seq_q_shards = other;
        }
        break;
    case ERR_HEADS:
        if (world_rank == last) sp.whole.heads = 3;
        break;
    case ERR_SHARDS:
        other[0] += 1;
        other[last] -= 1;
        if (world_rank == last) sp.seq_q_shards = sp.seq_kv_shards = other;
        break;
    case ERR_ALGORITHM:
        if (world_rank == 1) sp.algorithm = JATTN_SP_ULYSSES;
        break;
    case ERR_SCALE:
        if (world_rank == last) sp.whole.scale = 0.5f;
        break;
    case ERR_RANKS: sp.ranks = world_size + 1; break;
    case ERR_SUBCOMM:
        MPI_Comm_split(MPI_COMM_WORLD, world_rank < last ? 0 : MPI_UNDEFINED, world_rank, &sub);
        c.handle = &sub;
        break;
    case ERR_COMM_NULL: cp = NULL; break;
    case ERR_HANDLE_NULL: c.handle = NULL; break;
    case ERR_MPI_COMM_NULL: c.handle = &null_comm; break;
    case ERR_PRECISION:
        if (world_rank == last) e.precision = JATTN_PRECISION_TF32;
        break;
    case ERR_MEMORY:
        if (world_rank == 0) e.memory = JATTN_MEMORY_DEVICE;
        break;
    case ERR_Q_NULL:
        if (world_rank == last) q = NULL;
        break;
    case ERR_LSE_ALIAS:
        if (world_rank == 1) lse = r.out + 1;
        break;
    case ERR_WORKSPACE: {
        size_t bytes = 0;
        if (jattn_sp_workspace_size(&sp, &e, &c, &bytes) != JATTN_OK) abort();
        workspace = malloc(bytes);
        e.workspace = workspace;
        e.workspace_bytes = world_rank == 0 ? bytes - 1 : bytes;
        break;
    }
    case ERR_SUM:
        other[0] -= 1;
        sp.seq_q_shards = sp.seq_kv_shards = other;
        break;
    default: break;
    }
    report mine;
    memset(&mine, 0, sizeof mine);
    mine.status = jattn_sp_forward(NULL, &sp, &e, cp, q, r.k, r.v, r.out, lse);
    snprintf(mine.message, sizeof mine.message, "%s", jattn_last_error());
    mine.untouched = spt_rank_all_poison(&r);
    report all[SPT_MAX_RANKS];
    gather_reports(&mine, all);
    if (world_rank == 0) {
        int pass = 1;
        for (int i = 0; i < world_size; i++) {
            const expectation x = expect(what, i), x0 = expect(what, 0);
            const int same = x.local || x0.local || strcmp(all[i].message, all[0].message) == 0;
            if (all[i].status != (int)x.status || !strstr(all[i].message, x.needle) || !same || !all[i].untouched) {
                printf("FAIL error case %d, P=%d, rank %d: %s: '%s' (want %s with '%s'%s)%s\n", (int)what, world_size,
                       i, jattn_status_name((jattn_status)all[i].status), all[i].message, jattn_status_name(x.status),
                       x.needle, same ? "" : ", the message of rank 0", all[i].untouched ? "" : " [wrote an output]");
                pass = 0;
            }
        }
        if (pass && getenv("JATTN_TEST_VERBOSE")) printf("ok   error case %d: %s\n", (int)what, all[0].message);
        jt_tally_add(&tally, pass);
    }
    if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
    free(workspace);
    spt_rank_free(&r);
    spt_whole_free(&w);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_size > SPT_MAX_RANKS) {
        if (world_rank == 0) printf("test_sp_mpi: at most %d ranks\n", SPT_MAX_RANKS);
        MPI_Finalize();
        return 2;
    }
    unsigned long long seed = world_rank == 0 ? (unsigned long long)jt_seed() : 0;
    MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    if (world_rank == 0) printf("test_sp_mpi: %d ranks\n", world_size);

    jattn_sp_ctx *ctx = NULL; /* one context for every case: grow-only buffers, reused */
    if (jattn_sp_ctx_create(&ctx) != JATTN_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    spt_case cases[64];
    const int n = spt_cases(world_size, cases, 64);
    for (int i = 0; i < n; i++) run_case(&cases[i], i, seed + (uint64_t)i, ctx);
    jattn_sp_ctx_free(ctx);
    check_select();
    for (int e = 0; e < ERR_COUNT; e++) run_error((error_case)e);
    /* after the errors, the communicator works as before: the caller's error handler is back */
    MPI_Errhandler h;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &h);
    const int fatal = h == MPI_ERRORS_ARE_FATAL;
    MPI_Errhandler_free(&h);
    if (world_rank == 0) {
        if (!fatal) printf("FAIL: MPI_COMM_WORLD's error handler was not restored\n");
        jt_tally_add(&tally, fatal);
    }
    int rc = world_rank == 0 ? jt_tally_finish(&tally, "test_sp_mpi") : 0;
    rc = agreed(rc);
    MPI_Finalize();
    return rc;
}
