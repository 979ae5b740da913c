/* The sequence-parallel context (jattn.h, jattn_sp_ctx): what repeated calls keep. */
#ifndef JATTN_SP_CTX_H
#define JATTN_SP_CTX_H

#include <stddef.h>

#include "jattn_parallel.h"
#include "sp_device.h"

struct jattn_sp_ctx {
    jattn_ctx *local; /* for the local jattn_forward calls */
    void *scratch;    /* host: descriptors, all-to-all counts; grow-only */
    size_t scratch_bytes;
    void *transport_scratch; /* host, the transport's own (MPI's int counts); grow-only */
    size_t transport_scratch_bytes;
    void *host_workspace; /* when the caller gives none (MPI); grow-only */
    size_t host_workspace_bytes;
    sp_device_state *device; /* side stream, events, descriptor staging; made at the first device call */
};

/* Host scratch of at least `bytes`, 64-byte aligned. @return JATTN_OK or JATTN_ERROR_OUT_OF_MEMORY. */
jattn_status sp_ctx_scratch(jattn_sp_ctx *ctx, size_t bytes, void **p);
jattn_status sp_ctx_transport_scratch(jattn_sp_ctx *ctx, size_t bytes, void **p);

#endif
