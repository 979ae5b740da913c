/* The GPU side of `jattn run --parallel --backend cuda`: one GPU per rank (the rank's index
 * among the ranks of its host, modulo the GPUs it sees), an NCCL communicator over the MPI
 * ranks (the unique id broadcast by MPI), a stream, and device buffers.
 * cli_parallel_device.c with CUDA and NCCL; cli_parallel_device_none.c reports them missing. */
#ifndef JATTN_CLI_PARALLEL_DEVICE_H
#define JATTN_CLI_PARALLEL_DEVICE_H

#include <stddef.h>
#include <stdint.h>

typedef struct cli_sp_gpu cli_sp_gpu;

/* Opens rank `rank` of `size` (mpi_comm: an MPI_Comm *; local_rank: the rank among its host's).
 * @return 0, or -1 with a one-line reason in err. */
int cli_sp_gpu_open(cli_sp_gpu **g, const void *mpi_comm, int rank, int size, int local_rank, char *err, size_t errlen);
void cli_sp_gpu_close(cli_sp_gpu *g); /* accepts NULL */

const void *cli_sp_gpu_comm(const cli_sp_gpu *g); /* &the ncclComm_t, for jattn_sp_comm.handle */
void *cli_sp_gpu_stream(const cli_sp_gpu *g);     /* the cudaStream_t of the calls */
int cli_sp_gpu_device(const cli_sp_gpu *g);

/* Device memory. @return 0, or -1 with the reason in err. */
int cli_sp_gpu_alloc(size_t bytes, void **p, char *err, size_t errlen);
void cli_sp_gpu_free(void *p); /* accepts NULL */
/* rows rows of row_floats floats, from src (rows src_pitch floats apart) to dense dst. */
int cli_sp_gpu_upload(void *dst, const float *src, int64_t rows, int64_t row_floats, int64_t src_pitch, char *err,
                      size_t errlen);
int cli_sp_gpu_download(float *dst, const void *src, size_t floats, char *err, size_t errlen);
/* Waits for the stream. @return 0, or -1 with the reason in err. */
int cli_sp_gpu_sync(const cli_sp_gpu *g, char *err, size_t errlen);

#endif
