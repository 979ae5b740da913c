/* See cli_parallel_device.h: CUDA and NCCL. */
#include "cli_parallel_device.h"

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

struct cli_sp_gpu {
    int device;
    cudaStream_t stream;
    ncclComm_t comm;
};

static int cuda_error(cudaError_t e, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return -1;
}

int cli_sp_gpu_open(cli_sp_gpu **g, const void *mpi_comm, int rank, int size, int local_rank, char *err,
                    size_t errlen) {
    *g = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        snprintf(err, errlen, "--backend cuda: no CUDA device on this rank (%s)",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
        return -1;
    }
    cli_sp_gpu *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->device = local_rank % count;
    if ((e = cudaSetDevice(s->device)) != cudaSuccess || (e = cudaStreamCreate(&s->stream)) != cudaSuccess) {
        free(s);
        return cuda_error(e, "cudaSetDevice / cudaStreamCreate", err, errlen);
    }
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (rank == 0) r = ncclGetUniqueId(&id);
    int ok = r == ncclSuccess, all_ok = 0;
    MPI_Comm comm = *(const MPI_Comm *)mpi_comm;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, comm);
    if (all_ok) {
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm);
        r = ncclCommInitRank(&s->comm, size, id, rank);
    }
    if (!all_ok || r != ncclSuccess) {
        snprintf(err, errlen, "NCCL communicator of %d ranks: %s", size,
                 r != ncclSuccess ? ncclGetErrorString(r) : "ncclGetUniqueId failed on rank 0");
        cudaStreamDestroy(s->stream);
        free(s);
        return -1;
    }
    *g = s;
    return 0;
}

void cli_sp_gpu_close(cli_sp_gpu *g) {
    if (!g) return;
    cudaStreamSynchronize(g->stream);
    ncclCommDestroy(g->comm);
    cudaStreamDestroy(g->stream);
    free(g);
}

const void *cli_sp_gpu_comm(const cli_sp_gpu *g) { return &g->comm; }
void *cli_sp_gpu_stream(const cli_sp_gpu *g) { return g->stream; }
int cli_sp_gpu_device(const cli_sp_gpu *g) { return g->device; }

int cli_sp_gpu_alloc(size_t bytes, void **p, char *err, size_t errlen) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return cuda_error(e, "cudaMalloc", err, errlen);
    }
    return 0;
}

void cli_sp_gpu_free(void *p) {
    if (p) cudaFree(p);
}

int cli_sp_gpu_upload(void *dst, const float *src, int64_t rows, int64_t row_floats, int64_t src_pitch, char *err,
                      size_t errlen) {
    cudaError_t e = cudaMemcpy2D(dst, (size_t)row_floats * sizeof(float), src, (size_t)src_pitch * sizeof(float),
                                 (size_t)row_floats * sizeof(float), (size_t)rows, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : cuda_error(e, "cudaMemcpy2D", err, errlen);
}

int cli_sp_gpu_download(float *dst, const void *src, size_t floats, char *err, size_t errlen) {
    cudaError_t e = cudaMemcpy(dst, src, floats * sizeof(float), cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : cuda_error(e, "cudaMemcpy", err, errlen);
}

int cli_sp_gpu_sync(const cli_sp_gpu *g, char *err, size_t errlen) {
    cudaError_t e = cudaStreamSynchronize(g->stream);
    return e == cudaSuccess ? 0 : cuda_error(e, "cudaStreamSynchronize", err, errlen);
}
