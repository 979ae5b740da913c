/* The NCCL transport when libjattn_parallel is built without it (no CUDA, or no nccl.h and
 * libnccl beside the CUDA toolkit). */
#include "sp_error.h"
#include "sp_transport.h"

jattn_status sp_nccl_open(sp_transport *t, const void *handle, const jattn_exec *exec, jattn_sp_ctx *ctx) {
    (void)t;
    (void)handle;
    (void)exec;
    (void)ctx;
    return sp_fail(JATTN_ERROR_BACKEND_UNAVAILABLE,
                   "comm.transport: NCCL is not built into libjattn_parallel (configure with CUDA and nccl.h / "
                   "libnccl found: JATTN_NCCL=ON, NCCL_ROOT=...)");
}
