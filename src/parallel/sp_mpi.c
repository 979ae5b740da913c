/* The MPI transport: the caller's MPI_Comm, host memory. Collectives map one to one:
 * MPI_Allgather, MPI_Alltoallv (counts and offsets in MPI_FLOATs, which MPI takes as int: the
 * plans refuse larger messages), MPI_Isend / MPI_Irecv completed by MPI_Waitall. For the
 * duration of a call the communicator returns errors (MPI_ERRORS_RETURN) instead of aborting,
 * and the caller's handler is restored at close. */
#include <limits.h>
#include <string.h>

#include <mpi.h>

#include "sp_error.h"
#include "sp_transport.h"

/* The tag of the ring's messages: one value, not likely among a caller's own. */
#define SP_MPI_TAG 31415

typedef struct mpi_state {
    MPI_Comm comm;
    MPI_Errhandler saved;
    MPI_Request request[2];
    jattn_sp_ctx *ctx;
} mpi_state;

_Static_assert(sizeof(mpi_state) <= sizeof(((sp_transport *)0)->state), "mpi_state fits sp_transport");

static mpi_state *state_of(sp_collectives *c) { return c->state; }

static jattn_status mpi_failed(int code, const char *call) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
    text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return sp_fail(JATTN_ERROR_TRANSPORT, "mpi: %s failed: %s", call, len ? text : "(no error string)");
}

static jattn_status mpi_allgather(sp_collectives *c, const void *mine, void *all, size_t bytes) {
    if (bytes > INT_MAX) return sp_fail(JATTN_ERROR_OVERFLOW, "mpi: a descriptor of %zu bytes", bytes);
    int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, state_of(c)->comm);
    return rc == MPI_SUCCESS ? JATTN_OK : mpi_failed(rc, "MPI_Allgather");
}

static jattn_status mpi_alltoallv(sp_collectives *c, const float *send, const int64_t *send_count,
                                  const int64_t *send_off, float *recv, const int64_t *recv_count,
                                  const int64_t *recv_off) {
    mpi_state *s = state_of(c);
    const int P = c->size;
    void *scratch = NULL;
    jattn_status st = sp_ctx_transport_scratch(s->ctx, 4 * (size_t)P * sizeof(int), &scratch);
    if (st != JATTN_OK) return st;
    int *sc = scratch, *so = sc + P, *rc = so + P, *ro = rc + P;
    for (int r = 0; r < P; r++) { /* within int: the plan checked every count and offset */
        sc[r] = (int)send_count[r];
        so[r] = (int)send_off[r];
        rc[r] = (int)recv_count[r];
        ro[r] = (int)recv_off[r];
    }
    int code = MPI_Alltoallv(send, sc, so, MPI_FLOAT, recv, rc, ro, MPI_FLOAT, s->comm);
    return code == MPI_SUCCESS ? JATTN_OK : mpi_failed(code, "MPI_Alltoallv");
}

static jattn_status mpi_exchange_start(sp_collectives *c, const float *send, int64_t send_count, int to, float *recv,
                                       int64_t recv_count, int from) {
    mpi_state *s = state_of(c);
    int code = MPI_Irecv(recv, (int)recv_count, MPI_FLOAT, from, SP_MPI_TAG, s->comm, &s->request[0]);
    if (code != MPI_SUCCESS) return mpi_failed(code, "MPI_Irecv");
    code = MPI_Isend(send, (int)send_count, MPI_FLOAT, to, SP_MPI_TAG, s->comm, &s->request[1]);
    if (code != MPI_SUCCESS) {
        MPI_Cancel(&s->request[0]);
        MPI_Request_free(&s->request[0]);
        return mpi_failed(code, "MPI_Isend");
    }
    return JATTN_OK;
}

static jattn_status mpi_exchange_wait(sp_collectives *c) {
    int code = MPI_Waitall(2, state_of(c)->request, MPI_STATUSES_IGNORE);
    return code == MPI_SUCCESS ? JATTN_OK : mpi_failed(code, "MPI_Waitall");
}

static void mpi_close(sp_transport *t) {
    mpi_state *s = (mpi_state *)(void *)t->state.bytes;
    MPI_Comm_set_errhandler(s->comm, s->saved);
    MPI_Errhandler_free(&s->saved);
}

jattn_status sp_mpi_open(sp_transport *t, const void *handle, jattn_sp_ctx *ctx) {
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    if (!initialised || finalised)
        return sp_fail(JATTN_ERROR_INVALID_ARGUMENT, "comm: MPI is %s",
                       finalised ? "finalised" : "not initialised (MPI_Init)");
    mpi_state *s = (mpi_state *)(void *)t->state.bytes;
    memset(s, 0, sizeof *s);
    s->comm = *(const MPI_Comm *)handle;
    s->ctx = ctx;
    if (s->comm == MPI_COMM_NULL) return sp_fail(JATTN_ERROR_NULL_POINTER, "comm.handle: points to MPI_COMM_NULL");
    int inter = 0;
    if (MPI_Comm_test_inter(s->comm, &inter) != MPI_SUCCESS || inter)
        return sp_fail(JATTN_ERROR_INVALID_ARGUMENT,
                       "comm.handle: an inter-communicator (an intra-communicator is needed)");
    MPI_Comm_get_errhandler(s->comm, &s->saved);
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    static const sp_collectives mpi = {.name = "mpi",
                                       .memory = JATTN_MEMORY_HOST,
                                       .max_message = INT_MAX,
                                       .allgather = mpi_allgather,
                                       .alltoallv = mpi_alltoallv,
                                       .exchange_start = mpi_exchange_start,
                                       .exchange_wait = mpi_exchange_wait};
    sp_collectives *c = &t->coll;
    *c = mpi;
    MPI_Comm_rank(s->comm, &c->rank);
    MPI_Comm_size(s->comm, &c->size);
    c->state = s;
    t->close = mpi_close;
    return JATTN_OK;
}
