/* The device side of the sequence-parallel layer when the library is built without CUDA:
 * device memory is refused, everything else is never reached. */
#include "sp_data.h"
#include "sp_device.h"
#include "sp_error.h"

static jattn_status unavailable(void) {
    return sp_fail(JATTN_ERROR_BACKEND_UNAVAILABLE,
                   "exec.memory: device memory needs libjattn_parallel built with CUDA (JATTN_CUDA)");
}

jattn_status sp_device_current(int *device) {
    (void)device;
    return unavailable();
}

jattn_status sp_device_state_acquire(sp_device_state **st) {
    (void)st;
    return unavailable();
}

jattn_status sp_device_staging(sp_device_state *st, size_t bytes) {
    (void)st;
    (void)bytes;
    return unavailable();
}

void sp_device_state_free(sp_device_state *st) { (void)st; }

jattn_status sp_device_alloc_async(size_t bytes, void *stream, void **ptr) {
    (void)bytes;
    (void)stream;
    *ptr = 0;
    return unavailable();
}

void sp_device_free_async(void *ptr, void *stream) {
    (void)ptr;
    (void)stream;
}

jattn_status sp_data_device(sp_data *d, void *stream) {
    (void)d;
    (void)stream;
    return unavailable();
}
