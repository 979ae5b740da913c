/* The NCCL transport: the caller's ncclComm_t, device memory, the caller's stream.
 *
 *   allgather       the descriptors of the agreement: host -> the context's staging buffer,
 *                   ncclAllGather, -> host, on the side stream, which is then synchronised (the
 *                   one host wait of a call; the caller's stream is not waited for)
 *   alltoallv       grouped ncclSend / ncclRecv on the caller's stream
 *   exchange_start  the side stream waits for the caller's stream (event work_done), then a
 *                   grouped ncclSend / ncclRecv on the side stream, then event side_done
 *   exchange_wait   the caller's stream waits for side_done
 *
 * So a ring step's transfer runs beside that step's attention, and each buffer is reused only
 * after the work that read it. When the communicator's device is not the current one, the
 * rank's call is refused, but it still takes part in the agreement (on the communicator's
 * device, with a stream and buffer made for it and the current device restored), so that
 * every rank learns why. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "sp_error.h"
#include "sp_transport.h"

typedef struct nccl_state {
    ncclComm_t comm;
    cudaStream_t work;    /* the caller's */
    sp_device_state *dev; /* the context's, on the communicator's device; NULL when refused */
    int comm_device;
} nccl_state;

_Static_assert(sizeof(nccl_state) <= sizeof(((sp_transport *)0)->state), "nccl_state fits sp_transport");

static nccl_state *state_of(sp_collectives *c) { return c->state; }

static jattn_status nccl_failed(ncclResult_t r, const char *call, ncclComm_t comm) {
    const char *last = comm ? ncclGetLastError(comm) : "";
    return sp_fail(JATTN_ERROR_TRANSPORT, "nccl: %s failed: %s%s%s", call, ncclGetErrorString(r),
                   last && last[0] ? ": " : "", last ? last : "");
}

static jattn_status cuda_failed(cudaError_t e, const char *call) {
    (void)cudaGetLastError();
    return sp_fail(e == cudaErrorMemoryAllocation ? JATTN_ERROR_OUT_OF_MEMORY : JATTN_ERROR_CUDA,
                   "nccl transport: %s failed: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CUDA_TRY(call)                                        \
    do {                                                      \
        cudaError_t e_ = (call);                              \
        if (e_ != cudaSuccess) return cuda_failed(e_, #call); \
    } while (0)

/* The descriptors through device memory on `stream`, with `staging` of size * bytes. */
static jattn_status gather_through(nccl_state *s, int rank, int size, const void *mine, void *all, size_t bytes,
                                   char *staging, cudaStream_t stream) {
    CUDA_TRY(cudaMemcpyAsync(staging + (size_t)rank * bytes, mine, bytes, cudaMemcpyHostToDevice, stream));
    ncclResult_t r = ncclAllGather(staging + (size_t)rank * bytes, staging, bytes, ncclUint8, s->comm, stream);
    if (r != ncclSuccess) return nccl_failed(r, "ncclAllGather", s->comm);
    CUDA_TRY(cudaMemcpyAsync(all, staging, (size_t)size * bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_TRY(cudaStreamSynchronize(stream));
    ncclResult_t async = ncclSuccess;
    r = ncclCommGetAsyncError(s->comm, &async);
    if (r != ncclSuccess || async != ncclSuccess)
        return nccl_failed(r != ncclSuccess ? r : async, "ncclAllGather", s->comm);
    return JATTN_OK;
}

/* The agreement of a refused rank: on the communicator's device, then back. */
static jattn_status gather_on_comm_device(nccl_state *s, int rank, int size, const void *mine, void *all,
                                          size_t bytes) {
    int current = 0;
    CUDA_TRY(cudaGetDevice(&current));
    CUDA_TRY(cudaSetDevice(s->comm_device));
    cudaStream_t stream = NULL;
    void *staging = NULL;
    jattn_status st = JATTN_OK;
    cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&staging, (size_t)size * bytes);
    if (e != cudaSuccess)
        st = cuda_failed(e, "cudaStreamCreate / cudaMalloc");
    else
        st = gather_through(s, rank, size, mine, all, bytes, staging, stream);
    if (staging) cudaFree(staging);
    if (stream) cudaStreamDestroy(stream);
    cudaSetDevice(current);
    return st;
}

static jattn_status nccl_allgather(sp_collectives *c, const void *mine, void *all, size_t bytes) {
    nccl_state *s = state_of(c);
    if (!s->dev) return gather_on_comm_device(s, c->rank, c->size, mine, all, bytes);
    jattn_status st = sp_device_staging(s->dev, (size_t)c->size * bytes);
    if (st != JATTN_OK) return st;
    return gather_through(s, c->rank, c->size, mine, all, bytes, s->dev->staging, (cudaStream_t)s->dev->side_stream);
}

static jattn_status nccl_alltoallv(sp_collectives *c, const float *send, const int64_t *send_count,
                                   const int64_t *send_off, float *recv, const int64_t *recv_count,
                                   const int64_t *recv_off) {
    nccl_state *s = state_of(c);
    ncclResult_t r = ncclGroupStart(), first = ncclSuccess;
    const char *call = "ncclGroupStart";
    for (int t = 0; t < c->size && r == ncclSuccess; t++) {
        if (send_count[t] &&
            (r = ncclSend(send + send_off[t], (size_t)send_count[t], ncclFloat, t, s->comm, s->work)) != ncclSuccess)
            call = "ncclSend";
        if (r == ncclSuccess && recv_count[t] &&
            (r = ncclRecv(recv + recv_off[t], (size_t)recv_count[t], ncclFloat, t, s->comm, s->work)) != ncclSuccess)
            call = "ncclRecv";
    }
    first = r;
    r = ncclGroupEnd();
    if (first != ncclSuccess) return nccl_failed(first, call, s->comm);
    if (r != ncclSuccess) return nccl_failed(r, "ncclGroupEnd", s->comm);
    return JATTN_OK;
}

static jattn_status nccl_exchange_start(sp_collectives *c, const float *send, int64_t send_count, int to, float *recv,
                                        int64_t recv_count, int from) {
    nccl_state *s = state_of(c);
    cudaStream_t side = (cudaStream_t)s->dev->side_stream;
    CUDA_TRY(cudaEventRecord((cudaEvent_t)s->dev->work_done, s->work));
    CUDA_TRY(cudaStreamWaitEvent(side, (cudaEvent_t)s->dev->work_done, 0));
    ncclResult_t r = ncclGroupStart(), first;
    if (r == ncclSuccess) r = ncclSend(send, (size_t)send_count, ncclFloat, to, s->comm, side);
    if (r == ncclSuccess) r = ncclRecv(recv, (size_t)recv_count, ncclFloat, from, s->comm, side);
    first = r;
    r = ncclGroupEnd();
    if (first != ncclSuccess) return nccl_failed(first, "ncclSend / ncclRecv", s->comm);
    if (r != ncclSuccess) return nccl_failed(r, "ncclGroupEnd", s->comm);
    CUDA_TRY(cudaEventRecord((cudaEvent_t)s->dev->side_done, side));
    return JATTN_OK;
}

static jattn_status nccl_exchange_wait(sp_collectives *c) {
    nccl_state *s = state_of(c);
    CUDA_TRY(cudaStreamWaitEvent(s->work, (cudaEvent_t)s->dev->side_done, 0));
    return JATTN_OK;
}

static void nccl_close(sp_transport *t) { (void)t; }

jattn_status sp_nccl_open(sp_transport *t, const void *handle, const jattn_exec *exec, jattn_sp_ctx *ctx) {
    nccl_state *s = (nccl_state *)(void *)t->state.bytes;
    memset(s, 0, sizeof *s);
    s->comm = *(const ncclComm_t *)handle;
    if (!s->comm) return sp_fail(JATTN_ERROR_NULL_POINTER, "comm.handle: points to a NULL ncclComm_t");
    s->work = (cudaStream_t)exec->cuda_stream;
    static const sp_collectives nccl = {.name = "nccl",
                                        .memory = JATTN_MEMORY_DEVICE,
                                        .max_message = INT64_MAX,
                                        .allgather = nccl_allgather,
                                        .alltoallv = nccl_alltoallv,
                                        .exchange_start = nccl_exchange_start,
                                        .exchange_wait = nccl_exchange_wait};
    sp_collectives *c = &t->coll;
    *c = nccl;
    c->state = s;
    t->close = nccl_close;
    ncclResult_t r;
    if ((r = ncclCommUserRank(s->comm, &c->rank)) != ncclSuccess) return nccl_failed(r, "ncclCommUserRank", s->comm);
    if ((r = ncclCommCount(s->comm, &c->size)) != ncclSuccess) return nccl_failed(r, "ncclCommCount", s->comm);
    if ((r = ncclCommCuDevice(s->comm, &s->comm_device)) != ncclSuccess)
        return nccl_failed(r, "ncclCommCuDevice", s->comm);
    int current = -1;
    CUDA_TRY(cudaGetDevice(&current));
    if (current != s->comm_device) {
        t->local_status = JATTN_ERROR_INVALID_ARGUMENT;
        snprintf(t->local_message, sizeof t->local_message,
                 "comm: the NCCL communicator is on device %d, the current device is %d", s->comm_device, current);
    } else if (ctx) {
        jattn_status st = sp_device_state_acquire(&ctx->device);
        if (st != JATTN_OK) {
            t->local_status = st;
            snprintf(t->local_message, sizeof t->local_message, "%s", jattn_last_error());
        } else {
            s->dev = ctx->device;
        }
    }
    return JATTN_OK;
}
