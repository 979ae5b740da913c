/* The cuda kernel versions as data: one descriptor type for the forward's versions and the
 * backward's (its names, why it refuses a problem or a call, its workspace, its launcher, and the
 * fallbacks between versions), and the ladders walked over them (where AUTO starts). cuda_backend.c
 * selects and launches through these and knows no version by name. Plain C without the CUDA
 * runtime: tests/test_cuda_ladder.c builds it on any machine. */
#ifndef JATTN_CUDA_VERSIONS_H
#define JATTN_CUDA_VERSIONS_H

#include <stddef.h>

#include "../backend.h" /* JATTN_FEATURE_* */
#include "cuda_internal.h"
#include "jattn.h"

/* A problem as the ladders ask about it: what a plan knows before its runs (src/backend.h,
 * struct jattn_plan): the problem (kv_heads resolved), the backward's gradient strides (NULL in the
 * forward), the precision, the device's compute capability (10 major + minor), the mask parts and
 * grouped heads of the plan (JATTN_FEATURE_* bits) and the byte alignment of every data pointer of
 * its runs. A version decides from these alone, so the version a plan names is the one that runs. */
typedef struct cuda_query {
    const jattn_problem *p;
    const jattn_grad_strides *grad;
    jattn_precision precision;
    int cc;
    unsigned features;
    jattn_causal causal; /* the mask's causal part (JATTN_CAUSAL_NONE without one) */
    size_t alignment;
} cuda_query;

/* One kernel version, forward or backward, as the backend knows it: its descriptor. The plan of a
 * call points at one. */
typedef struct cuda_version {
    const char *name[2]; /* the reported name, by jattn_precision (F32, TF32) */
    unsigned features;   /* the mask parts and grouped heads it serves (JATTN_FEATURE_* bits) */
    /* Why it cannot run the query's problem (a message), or NULL; a feature outside `features` is
     * refused before this is asked. */
    const char *(*refusal)(const cuda_query *q);
    /* Its own device workspace (after the mask region); NULL: none. */
    size_t (*workspace_bytes)(const jattn_problem *p);
    /* Its launcher (cuda_internal.h): @return a cudaError_t as int. */
    int (*launch)(const jattn_cuda_args *a, void *workspace, void *stream);
    /* A problem this version refuses goes to `refused_next` (always for AUTO; for a forced version
     * only when `forced_falls_back`, else the forced choice fails, naming why). NULL: none. */
    const struct cuda_version *refused_next;
    int forced_falls_back;
} cuda_version;

/* The forward's versions, by jattn_cuda_kernel (the numbers of removed versions: all NULL). */
extern const cuda_version jattn_cuda_versions[JATTN_CUDA_KERNEL_COUNT];
/* The backward's versions (jattn_backward), by jattn_cuda_bwd_kernel. */
extern const cuda_version jattn_cuda_bwd_versions[JATTN_CUDA_BWD_KERNEL_COUNT];

/* The ladders: the version a problem runs, forward and backward (src/cuda/NOTES.md, "The kernel
 * ladders", is this code as a table; tests/test_docs.sh checks the two against each other). `forced`:
 * the version forced (JATTN_CUDA_KERNEL, JATTN_CUDA_BWD_KERNEL), or AUTO. The version is the forced one
 * or AUTO's first, walked along its refusal fallbacks (refused_next) to the first that takes the
 * problem; a forced version stays as forced or fails, but where its descriptor says forced_falls_back.
 * @return the version, or NULL with *why the last refusal. */
const cuda_version *jattn_cuda_forward_version(jattn_cuda_kernel forced, const cuda_query *q, const char **why);
const cuda_version *jattn_cuda_backward_version(jattn_cuda_bwd_kernel forced, const cuda_query *q, const char **why);

#endif /* JATTN_CUDA_VERSIONS_H */
