/* The cuda kernel versions as data: one descriptor type for the forward's versions and the
 * backward's (its names, why it refuses a problem or a call, its workspace, its launcher, and the
 * fallbacks between versions), and the ladders walked over them (where AUTO starts). cuda_backend.c
 * selects and launches through these and knows no version by name. Plain C without the CUDA
 * runtime: tests/test_cuda_ladder.c builds it on any machine. */
#ifndef JATTN_CUDA_VERSIONS_H
#define JATTN_CUDA_VERSIONS_H

#include <stddef.h>

#include "jattn.h"
#include "cuda_internal.h"

/* One kernel version, forward or backward, as the backend knows it: its descriptor. The plan of a
 * call points at one. */
typedef struct cuda_version {
    const char *name[2]; /* the reported name, by jattn_precision (F32, TF32) */
    /* Why it cannot run a problem in this precision on a device of compute capability cc (a
     * message), or NULL. */
    const char *(*refusal)(const jattn_problem *p, jattn_precision precision, int cc);
    /* Whether it cannot run this call (what only the launch knows: pointers, padding); NULL: never. */
    int (*call_refused)(const jattn_cuda_args *a);
    /* Its own device workspace (after the padding region); NULL: none. */
    size_t (*workspace_bytes)(const jattn_problem *p);
    /* Its launcher (cuda_internal.h): @return a cudaError_t as int. */
    int (*launch)(const jattn_cuda_args *a, void *workspace, void *stream);
    /* Fallbacks, versions of the same table. select: a problem this version refuses goes to
     * `refused_next` (always for AUTO; for a forced version only when `forced_falls_back`, else the
     * forced choice fails, naming why). launch: a call it refuses, or (forward) whose workspace the
     * pool cannot give, runs `call_next`. NULL: none. */
    const struct cuda_version *refused_next;
    int forced_falls_back;
    const struct cuda_version *call_next;
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
 * cc: the device's compute capability (10 major + minor).
 * @return the version, or NULL with *why the last refusal. */
const cuda_version *jattn_cuda_forward_version(jattn_cuda_kernel forced, const jattn_problem *p,
                                               jattn_precision precision, int cc, const char **why);
const cuda_version *jattn_cuda_backward_version(jattn_cuda_bwd_kernel forced, const jattn_problem *p,
                                                jattn_precision precision, int cc, const char **why);

/* The version that runs a call: `ver`, or the first of its call fallbacks (call_next) that does not
 * refuse the call (what only the launch knows: pointers, padding). */
const cuda_version *jattn_cuda_call_version(const cuda_version *ver, const jattn_cuda_args *a);

#endif /* JATTN_CUDA_VERSIONS_H */
