/* The CUDA runtime calls of the sequence-parallel layer (sp_device.h). */
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "sp_device.h"
#include "sp_error.h"

static jattn_status cuda_failed(cudaError_t e, const char *call) {
    (void)cudaGetLastError();
    return sp_fail(e == cudaErrorMemoryAllocation ? JATTN_ERROR_OUT_OF_MEMORY : JATTN_ERROR_CUDA,
                   "cuda: %s failed: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
}

jattn_status sp_device_current(int *device) {
    cudaError_t e = cudaGetDevice(device);
    return e == cudaSuccess ? JATTN_OK : cuda_failed(e, "cudaGetDevice");
}

jattn_status sp_device_state_acquire(sp_device_state **st) {
    int device = 0;
    jattn_status status = sp_device_current(&device);
    if (status != JATTN_OK) return status;
    if (*st) {
        if ((*st)->device != device)
            return sp_fail(
                JATTN_ERROR_INVALID_ARGUMENT,
                "ctx: its stream was made on device %d, the current device is %d (one jattn_sp_ctx per device)",
                (*st)->device, device);
        return JATTN_OK;
    }
    sp_device_state *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(JATTN_ERROR_OUT_OF_MEMORY, "ctx: allocation of %zu bytes failed", sizeof *s);
    s->device = device;
    cudaStream_t stream = NULL;
    cudaEvent_t work_done = NULL, side_done = NULL;
    /* The side stream carries the ring's transfers: at the greatest priority, their (small)
     * kernels take the first multiprocessors the attention frees, instead of waiting for it. */
    int least = 0, greatest = 0;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&work_done, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&side_done, cudaEventDisableTiming);
    s->side_stream = stream;
    s->work_done = work_done;
    s->side_done = side_done;
    if (e != cudaSuccess) {
        sp_device_state_free(s);
        return cuda_failed(e, "cudaStreamCreate / cudaEventCreate");
    }
    *st = s;
    return JATTN_OK;
}

jattn_status sp_device_staging(sp_device_state *st, size_t bytes) {
    if (st->staging_bytes >= bytes && st->staging) return JATTN_OK;
    if (st->staging) cudaFree(st->staging);
    st->staging = NULL;
    st->staging_bytes = 0;
    cudaError_t e = cudaMalloc(&st->staging, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        st->staging = NULL;
        return cuda_failed(e, "cudaMalloc");
    }
    st->staging_bytes = bytes;
    return JATTN_OK;
}

void sp_device_state_free(sp_device_state *st) {
    if (!st) return;
    if (st->staging) cudaFree(st->staging);
    if (st->side_done) cudaEventDestroy((cudaEvent_t)st->side_done);
    if (st->work_done) cudaEventDestroy((cudaEvent_t)st->work_done);
    if (st->side_stream) cudaStreamDestroy((cudaStream_t)st->side_stream);
    free(st);
}

jattn_status sp_device_alloc_async(size_t bytes, void *stream, void **ptr) {
    *ptr = NULL;
    cudaError_t e = cudaMallocAsync(ptr, bytes ? bytes : 1, (cudaStream_t)stream);
    return e == cudaSuccess ? JATTN_OK : cuda_failed(e, "cudaMallocAsync");
}

void sp_device_free_async(void *ptr, void *stream) {
    if (ptr) cudaFreeAsync(ptr, (cudaStream_t)stream);
}
