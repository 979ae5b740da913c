/* The contract between the dispatch layer (src/jattn.c) and the backends.
 *
 * A backend is a table of functions. The dispatch layer validates the problem and the
 * pointers once; a backend's select() then only answers "can I run this, and with which
 * kernel" for a problem already known to be valid, and its forward() only computes. */
#ifndef JATTN_BACKEND_H
#define JATTN_BACKEND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "jattn.h"

/* A validated call, as a backend receives it. Dimensions and strides are the problem's;
 * `scale` is resolved (never 0); pointers are non-NULL except lse. */
typedef struct jattn_call {
    const jattn_problem *problem;
    float scale;
    const float *q, *k, *v;
    float *out;
    float *lse;               /* NULL when not requested */
    jattn_precision precision;
    jattn_memory memory;
    int threads;              /* resolved by select(): >= 1 */
    void *cuda_stream;
    void *workspace;          /* at least workspace_size() bytes, aligned to 64; NULL if 0 needed */
    jattn_ctx *ctx;           /* may be NULL */
    /* Key padding, validated (jattn.h, jattn_key_padding); all NULL / 0 when every key is
     * attended. In the call's memory (host or device). Host lengths are in [0, seq_kv]. */
    const int64_t *kv_len;    /* [B] or NULL */
    const uint8_t *mask;      /* row b at mask + b * mask_stride, seq_kv bytes; or NULL */
    int64_t mask_stride;      /* 0 when one row serves every batch */
} jattn_call;

/* Whether key j of batch b is attended (host memory only): the padding rule of jattn.h. */
static inline int jattn_call_attends(const jattn_call *c, int64_t b, int64_t j) {
    return (!c->kv_len || j < c->kv_len[b]) && (!c->mask || c->mask[b * c->mask_stride + j] != 0);
}

typedef struct jattn_backend_ops {
    jattn_backend id;
    const char *name;
    /* Can this backend run the (valid) problem under exec? On JATTN_OK fill every field of
     * *sel. Otherwise return JATTN_ERROR_UNSUPPORTED / _BACKEND_UNAVAILABLE via jattn_fail(),
     * naming the limit. Must be cheap: it runs on every call. */
    jattn_status (*select)(const jattn_problem *p, const jattn_exec *e, jattn_selection *sel);
    /* Workspace bytes (host memory for host backends, device memory for cuda) that forward()
     * needs for this selection; 0 when none. */
    size_t (*workspace_size)(const jattn_problem *p, const jattn_exec *e, const jattn_selection *sel);
    /* Compute. Writes out (and lse). On failure returns a status via jattn_fail(). */
    jattn_status (*forward)(const jattn_call *call, const jattn_selection *sel);
    /* Frees whatever this backend keeps in a context (may be NULL). */
    void (*release_ctx)(jattn_ctx *ctx);
} jattn_backend_ops;

extern const jattn_backend_ops jattn_backend_ref;
extern const jattn_backend_ops jattn_backend_cpu;
extern const jattn_backend_ops jattn_backend_cuda; /* a stub that reports unavailable when not built */
extern const jattn_backend_ops jattn_backend_vk;   /* likewise (src/vulkan/vk_unavailable.c) */

/* The context: grow-only buffers, one slot per backend. */
struct jattn_ctx {
    void *host_workspace;
    size_t host_workspace_bytes;
    void *backend_state[JATTN_BACKEND_COUNT]; /* owned by each backend, freed by release_ctx */
};

/* Records the message for jattn_last_error() (printf format) and returns `status`. */
jattn_status jattn_fail(jattn_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Threads a CPU backend uses for a request of `requested` (0 = all cores): >= 1, and 1
 * when the library was built without OpenMP. */
int jattn_resolve_threads(int requested);

/* `#pragma omp parallel for schedule(dynamic, chunk) num_threads(threads)` when built with
 * OpenMP, nothing otherwise (so a build without OpenMP stays warning-free). */
#define JATTN_PRAGMA(x) _Pragma(#x)
#ifdef _OPENMP
#define JATTN_PARALLEL_FOR_DYNAMIC(chunk, threads) JATTN_PRAGMA(omp parallel for schedule(dynamic, chunk) num_threads(threads))
#else
#define JATTN_PARALLEL_FOR_DYNAMIC(chunk, threads)
#endif

/* Index of the calling thread inside an OpenMP parallel region (0 outside one, or without
 * OpenMP): selects the thread's slice of the workspace. */
int jattn_thread_index(void);

/* Aligned allocation helpers (64-byte alignment). jattn_free_aligned accepts NULL. */
void *jattn_alloc_aligned(size_t bytes);
void jattn_free_aligned(void *p);

#endif /* JATTN_BACKEND_H */
