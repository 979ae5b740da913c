/* The transports behind jattn_sp_comm: each opens the caller's communicator into the
 * collectives of sp_collectives.h for one call, and closes it after (restoring whatever it
 * changed). A transport that was not built has the same functions, returning
 * JATTN_ERROR_BACKEND_UNAVAILABLE (sp_mpi_none.c, sp_nccl_none.c). */
#ifndef JATTN_SP_TRANSPORT_H
#define JATTN_SP_TRANSPORT_H

#include "jattn_parallel.h"
#include "sp_collectives.h"
#include "sp_ctx.h"

typedef struct sp_transport {
    sp_collectives coll;
    /* This rank can communicate, but its part of the call is wrong (e.g. the NCCL
     * communicator's device is not the current one): told to every rank by the agreement. */
    jattn_status local_status;
    char local_message[192];
    void (*close)(struct sp_transport *t);
    union {
        void *align_pointer;
        long double align_float;
        unsigned char bytes[512];
    } state; /* the transport's own */
} sp_transport;

/* Opens the communicator named by comm->handle for one call. Fails, without communicating,
 * when it cannot reach its peers (NULL handle, MPI_COMM_NULL, transport not built, MPI not
 * initialised). `exec` gives the stream (NCCL); ctx holds what outlives the call.
 * @return JATTN_OK (then close() must be called) or the failing status, message set. */
jattn_status sp_mpi_open(sp_transport *t, const void *handle, jattn_sp_ctx *ctx);
jattn_status sp_nccl_open(sp_transport *t, const void *handle, const jattn_exec *exec, jattn_sp_ctx *ctx);

/* jattn_sp_forward on collectives the caller made (the tests' in-process ranks); ctx is
 * required. The same checks, agreement and algorithms as through a jattn_sp_comm. */
jattn_status sp_forward_collectives(sp_collectives *coll, jattn_sp_ctx *ctx, const jattn_sp_problem *problem,
                                    const jattn_exec *exec, const void *q, const void *k, const void *v, void *out,
                                    float *lse);

#endif
