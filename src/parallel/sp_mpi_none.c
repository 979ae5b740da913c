/* The MPI transport when libjattn_parallel is built without MPI. */
#include "sp_error.h"
#include "sp_transport.h"

jattn_status sp_mpi_open(sp_transport *t, const void *handle, jattn_sp_ctx *ctx) {
    (void)t;
    (void)handle;
    (void)ctx;
    return sp_fail(JATTN_ERROR_BACKEND_UNAVAILABLE,
                   "comm.transport: MPI is not built into libjattn_parallel (configure with an MPI found, e.g. "
                   "libopenmpi-dev; JATTN_MPI=ON)");
}
