/* The collectives the sequence-parallel algorithms are written against, once, for every
 * transport: MPI on host memory (sp_mpi.c), NCCL on device memory (sp_nccl.c), and the tests'
 * in-process threads (tests/sp_threads_transport.c).
 *
 * Ordering. The data work of a rank (packs, local attention, merges) is issued in order on one
 * queue: the calling thread for host memory, the caller's CUDA stream for device memory. Each
 * collective is ordered after the data work issued before it, and the data work issued after
 * it sees its result, except exchange_start, which runs beside the work issued until its
 * exchange_wait. Counts and offsets are in floats. */
#ifndef JATTN_SP_COLLECTIVES_H
#define JATTN_SP_COLLECTIVES_H

#include <stddef.h>
#include <stdint.h>

#include "jattn_parallel.h"

typedef struct sp_collectives sp_collectives;

struct sp_collectives {
    const char *name; /* "mpi", "nccl", ... */
    int rank, size;
    jattn_memory memory; /* where the buffers of alltoallv and exchange live */
    int64_t max_message; /* the largest count or offset one message may have (MPI: INT_MAX) */

    /* Every rank's `bytes` of host memory, in rank order, into all[size * bytes]. Blocking:
     * returns when `all` is filled. */
    jattn_status (*allgather)(sp_collectives *c, const void *mine, void *all, size_t bytes);

    /* All-to-all: send_count[t] floats at send + send_off[t] go to rank t, and
     * recv_count[s] floats from rank s land at recv + recv_off[s] (counts may be 0). */
    jattn_status (*alltoallv)(sp_collectives *c, const float *send, const int64_t *send_count, const int64_t *send_off,
                              float *recv, const int64_t *recv_count, const int64_t *recv_off);

    /* Starts sending send[0, send_count) to rank `to` and receiving recv[0, recv_count) from
     * rank `from`. The data work issued until exchange_wait may read send but neither write it
     * nor touch recv. */
    jattn_status (*exchange_start)(sp_collectives *c, const float *send, int64_t send_count, int to, float *recv,
                                   int64_t recv_count, int from);
    /* Completes the exchange started last: the data work issued after it sees recv. */
    jattn_status (*exchange_wait)(sp_collectives *c);

    void *state; /* the transport's */
};

#endif
