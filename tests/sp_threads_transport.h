/* An in-process transport for the tests: P threads of one process are the P ranks of a
 * sequence-parallel call (src/parallel/sp_collectives.h), so that every rank's steps run in
 * one process: on the host, and on one GPU with device memory (each thread its own stream).
 * Not overlapped: a transfer is a copy between the threads' buffers at a barrier, after the
 * sender's stream is synchronised. */
#ifndef JATTN_TEST_SP_THREADS_TRANSPORT_H
#define JATTN_TEST_SP_THREADS_TRANSPORT_H

#include <stddef.h>

#include "jattn_internal.h" /* parallel/sp_collectives.h */

/* How the threads move bytes: memcpy on the host; cudaMemcpy and cudaStreamSynchronize on a
 * GPU (the device test supplies them). */
typedef struct spt_mover {
    jattn_memory memory;
    int (*copy)(void *dst, const void *src, size_t bytes); /* 0 on success */
    int (*sync)(void *stream);                             /* the rank's stream; 0 on success */
} spt_mover;

typedef struct spt_world spt_world;

/* @return a world of `ranks` ranks, or NULL when out of memory. */
spt_world *spt_world_create(int ranks, spt_mover mover);
void spt_world_free(spt_world *w);

/* The collectives of rank `rank`, whose data work is queued on `stream` (NULL on the host). */
void spt_world_collectives(spt_world *w, int rank, void *stream, sp_collectives *c);

/* Runs fn(rank, arg) on `ranks` threads and waits for them. @return 0, or -1 if a thread
 * could not start. */
int spt_run_ranks(int ranks, void (*fn)(int rank, void *arg), void *arg);

#endif
