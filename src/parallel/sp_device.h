/* What the sequence-parallel layer keeps and asks of the CUDA runtime, behind plain C types so
 * that the rest of the layer builds without CUDA (sp_device_cuda.c, or sp_device_none.c whose
 * functions return JATTN_ERROR_BACKEND_UNAVAILABLE). */
#ifndef JATTN_SP_DEVICE_H
#define JATTN_SP_DEVICE_H

#include <stddef.h>

#include "jattn_parallel.h"

/* A second stream (non-blocking, of the greatest priority, for transfers beside the attention),
 * two events and a small grow-only device buffer, all of one device. */
typedef struct sp_device_state {
    int device;        /* the device they were made on */
    void *side_stream; /* cudaStream_t */
    void *work_done;   /* cudaEvent_t: recorded on the caller's stream */
    void *side_done;   /* cudaEvent_t: recorded on side_stream */
    void *staging;     /* device buffer for descriptors */
    size_t staging_bytes;
} sp_device_state;

/* Makes *st on the current device when it has none yet; fails (INVALID_ARGUMENT) when it was
 * made on another device. @return JATTN_OK or the failing status (message set). */
jattn_status sp_device_state_acquire(sp_device_state **st);
/* Grows st->staging to at least `bytes` (cudaMalloc; the old buffer is freed). */
jattn_status sp_device_staging(sp_device_state *st, size_t bytes);
void sp_device_state_free(sp_device_state *st); /* accepts NULL */

/* The current device. @return JATTN_OK, or the failing status. */
jattn_status sp_device_current(int *device);

/* Stream-ordered device memory on `stream` (cudaMallocAsync / cudaFreeAsync). */
jattn_status sp_device_alloc_async(size_t bytes, void *stream, void **ptr);
void sp_device_free_async(void *ptr, void *stream);

#endif
