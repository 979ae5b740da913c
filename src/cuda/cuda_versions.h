/* The cuda kernel versions as data: one descriptor each (its names, why it refuses a problem or a
 * call, its workspace, its launcher) and the fallbacks between them. cuda_backend.c selects
 * and launches from this table and knows no version by name. */
#ifndef JATTN_CUDA_VERSIONS_H
#define JATTN_CUDA_VERSIONS_H

#include <stddef.h>

#include "jattn.h"
#include "cuda_internal.h"

/* One kernel version, as the backend knows it: its descriptor. The plan of a call points at one. */
typedef struct cuda_version {
    jattn_cuda_kernel id;
    const char *name[2]; /* the reported name, by jattn_precision (F32, TF32) */
    /* Why it cannot run a problem on a device of compute capability cc (a message), or NULL. */
    const char *(*refusal)(const jattn_problem *p, int cc);
    /* Whether it cannot run this call (what only the launch knows: pointers, padding); NULL: never. */
    int (*call_refused)(const jattn_cuda_args *a);
    /* Its own device workspace (after the padding region); NULL: none. */
    size_t (*workspace_bytes)(const jattn_problem *p);
    /* Its launcher (cuda_internal.h): @return a cudaError_t as int. */
    int (*launch)(const jattn_cuda_args *a, void *workspace, void *stream);
    /* Fallbacks. select: a problem this version refuses goes to `refused_next` (always for AUTO;
     * for a forced version only when `forced_falls_back`, else the forced choice fails, naming
     * why). launch: a call it refuses, or whose workspace the pool cannot give, runs
     * `call_next`. JATTN_CUDA_KERNEL_AUTO: none. */
    jattn_cuda_kernel refused_next;
    int forced_falls_back;
    jattn_cuda_kernel call_next;
} cuda_version;

extern const cuda_version jattn_cuda_versions[JATTN_CUDA_KERNEL_COUNT];

/* A backward kernel version (jattn_backward), as the backend knows it. */
typedef struct cuda_bwd_version {
    const char *name[2]; /* the reported name, by jattn_precision (F32, TF32) */
    /* Why it cannot run a problem on a device of compute capability cc (a message), or NULL. */
    const char *(*refusal)(const jattn_problem *p, int cc);
    /* Its own device workspace (after the padding region). */
    size_t (*workspace_bytes)(const jattn_problem *p);
    /* Its launcher (cuda_internal.h): @return a cudaError_t as int. */
    int (*launch)(const jattn_cuda_bwd_args *a, void *workspace, void *stream);
    /* Whether it cannot run this call (pointers, padding, precision); NULL: never. Such a call runs
     * `call_next` in the same workspace (which its workspace_bytes covers). */
    int (*call_refused)(const jattn_cuda_bwd_args *a);
    const struct cuda_bwd_version *call_next;
} cuda_bwd_version;

extern const cuda_bwd_version jattn_cuda_bwd_v1;
extern const cuda_bwd_version jattn_cuda_bwd_v2;
extern const cuda_bwd_version jattn_cuda_bwd_v3;

#endif /* JATTN_CUDA_VERSIONS_H */
