/* The GPU side of `jattn run --parallel` when jattn is built without CUDA and NCCL. */
#include "cli_parallel_device.h"

#include <stdio.h>

int cli_sp_gpu_open(cli_sp_gpu **g, const void *mpi_comm, int rank, int size, int local_rank, char *err,
                    size_t errlen) {
    (void)mpi_comm, (void)rank, (void)size, (void)local_rank;
    *g = NULL;
    snprintf(err, errlen,
             "--parallel --backend cuda: this jattn was built without the NCCL transport (needs CUDA and "
             "NCCL at build time)");
    return -1;
}

void cli_sp_gpu_close(cli_sp_gpu *g) { (void)g; }
const void *cli_sp_gpu_comm(const cli_sp_gpu *g) { return g; }
void *cli_sp_gpu_stream(const cli_sp_gpu *g) { return (void *)g; }
int cli_sp_gpu_device(const cli_sp_gpu *g) { return g ? 0 : -1; }

static int missing(char *err, size_t errlen) {
    snprintf(err, errlen, "device memory: this jattn was built without CUDA");
    return -1;
}

int cli_sp_gpu_alloc(size_t bytes, void **p, char *err, size_t errlen) {
    (void)bytes;
    *p = NULL;
    return missing(err, errlen);
}

void cli_sp_gpu_free(void *p) { (void)p; }

int cli_sp_gpu_upload(void *dst, const float *src, int64_t rows, int64_t row_floats, int64_t src_pitch, char *err,
                      size_t errlen) {
    (void)dst, (void)src, (void)rows, (void)row_floats, (void)src_pitch;
    return missing(err, errlen);
}

int cli_sp_gpu_download(float *dst, const void *src, size_t floats, char *err, size_t errlen) {
    (void)dst, (void)src, (void)floats;
    return missing(err, errlen);
}

int cli_sp_gpu_sync(const cli_sp_gpu *g, char *err, size_t errlen) {
    (void)g;
    return missing(err, errlen);
}
