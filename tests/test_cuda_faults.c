/* The cuda backend under faults and hostile calls (issue 37).
 *
 *   refusals  calls the library must refuse, each with its status and the field its message names,
 *             before anything is enqueued (nothing written, a capture left intact): host pointers on a
 *             stream being captured into a CUDA graph (thread-local and global capture modes; and on the
 *             legacy stream while a blocking stream of the device is captured), forward and backward; a
 *             stream of another device (skipped, with the reason, on a machine with one GPU); a caller
 *             workspace smaller than jattn_workspace_size / jattn_backward_workspace_size says (64 bytes
 *             short: the sizes carry up to 63 bytes of alignment slack) on device pointers, forward and
 *             backward.
 *   oom       device memory nearly exhausted first (allocated by the test in chunks until under 16 MiB
 *             is left, the stream-ordered pool trimmed), then calls whose workspace or device buffer
 *             cannot be had: the backward on device pointers without a workspace (the pool) returns
 *             JATTN_ERROR_OUT_OF_MEMORY naming cudaMallocAsync and writes nothing; host pointers without a
 *             context and through a fresh context (a device buffer) likewise, forward and backward; the
 *             forward on device pointers without a workspace may run the version its workspace fallback
 *             ends at (cuda_versions.c: v1 needs none) and then must be right, or fail with
 *             OUT_OF_MEMORY writing nothing. Then the memory is freed and every one of those calls runs
 *             and gives the bits of the same call made before the memory was exhausted (whose results
 *             were checked against the float64 reference under the gate).
 * Outputs poisoned (NaN) before each call and checked afterwards. Every kernel the calls launch runs
 * once before the memory is exhausted (modules load lazily, and loading takes device memory).
 *
 * usage: test_cuda_faults [refusals|oom|all]. Exits 77 without a GPU. The oom part takes nearly all of the
 * device's memory for a moment: run it alone (ctest runs it RUN_SERIAL; the GPU battery in a step of its
 * own). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "jattn_internal.h" /* cuda/cuda_internal.h */
#include "harness.h"

static jt_tally tally;

#define CUDA_OK(call)                                                                       \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* ---- a problem's arrays, on the host and on the device ---- */
typedef struct arrays {
    jattn_problem p;
    int64_t n[10]; /* q k v out lse dout dlse dq dk dv: dense elements */
    float *h[10];  /* host (inputs, or results) */
    float *d[10];  /* device */
    float *ref_out, *ref_lse, *ref_g[3];
} arrays;
enum { Q, K, V, OUT, LSE, DOUT, DLSE, DQ, DK, DV };

static void arrays_init(arrays *a, const jattn_problem *p, jt_rng *r) {
    memset(a, 0, sizeof *a);
    a->p = *p;
    const int64_t nq = p->batch * p->heads * p->seq_q * p->head_dim, nk = p->batch * p->heads * p->seq_kv * p->head_dim,
                  nl = p->batch * p->heads * p->seq_q;
    const int64_t n[10] = {nq, nk, nk, nq, nl, nq, nl, nq, nk, nk};
    for (int i = 0; i < 10; i++) {
        a->n[i] = n[i];
        a->h[i] = malloc((size_t)n[i] * sizeof(float));
        if (!a->h[i]) exit(1);
        CUDA_OK(cudaMalloc((void **)&a->d[i], (size_t)n[i] * sizeof(float)));
    }
    for (int i = 0; i < 10; i++)
        for (int64_t e = 0; e < n[i]; e++) a->h[i][e] = (float)jt_normal(r);
    a->ref_out = malloc((size_t)nq * sizeof(float)), a->ref_lse = malloc((size_t)nl * sizeof(float));
    for (int t = 0; t < 3; t++) a->ref_g[t] = malloc((size_t)n[DQ + t] * sizeof(float));
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    jattn_status st = jattn_forward(NULL, p, &e, a->h[Q], a->h[K], a->h[V], a->ref_out, a->ref_lse);
    if (st == JATTN_OK)
        st = jattn_backward(NULL, p, NULL, &e, a->h[Q], a->h[K], a->h[V], a->ref_out, a->ref_lse, a->h[DOUT],
                            a->h[DLSE], NULL, a->ref_g[0], a->ref_g[1], a->ref_g[2]);
    if (st != JATTN_OK) {
        printf("FAIL reference: %s\n", jattn_last_error());
        exit(1);
    }
    /* the backward's out and lse: the reference's, rounded once */
    memcpy(a->h[OUT], a->ref_out, (size_t)nq * sizeof(float));
    memcpy(a->h[LSE], a->ref_lse, (size_t)nl * sizeof(float));
    for (int i = 0; i <= DLSE; i++)
        CUDA_OK(cudaMemcpy(a->d[i], a->h[i], (size_t)n[i] * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize()); /* the calls run on streams of their own */
}

static void arrays_free(arrays *a) {
    for (int i = 0; i < 10; i++) free(a->h[i]), (void)cudaFree(a->d[i]);
    free(a->ref_out), free(a->ref_lse);
    for (int t = 0; t < 3; t++) free(a->ref_g[t]);
}

/* Host result arrays, poisoned. */
typedef struct results {
    float *out, *lse, *g[3];
} results;

static void results_init(results *r, const arrays *a) {
    r->out = malloc((size_t)a->n[OUT] * sizeof(float)), r->lse = malloc((size_t)a->n[LSE] * sizeof(float));
    for (int t = 0; t < 3; t++) r->g[t] = malloc((size_t)a->n[DQ + t] * sizeof(float));
}
static void results_free(results *r) {
    free(r->out), free(r->lse);
    for (int t = 0; t < 3; t++) free(r->g[t]);
}

static void poison_host(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}
static int all_poison(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i])) return 0;
    return 1;
}
static void poison_results(results *r, const arrays *a) {
    poison_host(r->out, a->n[OUT]), poison_host(r->lse, a->n[LSE]);
    for (int t = 0; t < 3; t++) poison_host(r->g[t], a->n[DQ + t]);
}
static int results_untouched(const results *r, const arrays *a, int backward) {
    if (!backward) return all_poison(r->out, a->n[OUT]) && all_poison(r->lse, a->n[LSE]);
    for (int t = 0; t < 3; t++)
        if (!all_poison(r->g[t], a->n[DQ + t])) return 0;
    return 1;
}

/* Device results (the arrays of `arrays` hold the inputs). */
typedef struct dresults {
    float *out, *lse, *g[3];
} dresults;
static void dresults_init(dresults *d, const arrays *a) {
    CUDA_OK(cudaMalloc((void **)&d->out, (size_t)a->n[OUT] * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&d->lse, (size_t)a->n[LSE] * sizeof(float)));
    for (int t = 0; t < 3; t++) CUDA_OK(cudaMalloc((void **)&d->g[t], (size_t)a->n[DQ + t] * sizeof(float)));
}
static void dresults_free(dresults *d) {
    (void)cudaFree(d->out), (void)cudaFree(d->lse);
    for (int t = 0; t < 3; t++) (void)cudaFree(d->g[t]);
}
static void dresults_poison(dresults *d, const arrays *a, cudaStream_t s) {
    CUDA_OK(cudaMemsetAsync(d->out, 0xFF, (size_t)a->n[OUT] * sizeof(float), s));
    CUDA_OK(cudaMemsetAsync(d->lse, 0xFF, (size_t)a->n[LSE] * sizeof(float), s));
    for (int t = 0; t < 3; t++) CUDA_OK(cudaMemsetAsync(d->g[t], 0xFF, (size_t)a->n[DQ + t] * sizeof(float), s));
}
/* Copies the device results back (after synchronising s). */
static void dresults_fetch(const dresults *d, results *r, const arrays *a, cudaStream_t s) {
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(r->out, d->out, (size_t)a->n[OUT] * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(r->lse, d->lse, (size_t)a->n[LSE] * sizeof(float), cudaMemcpyDeviceToHost));
    for (int t = 0; t < 3; t++)
        CUDA_OK(cudaMemcpy(r->g[t], d->g[t], (size_t)a->n[DQ + t] * sizeof(float), cudaMemcpyDeviceToHost));
}

/* A status and the words its message must hold (NULL: none). @return 1 when both match. */
static int expect(jattn_status st, jattn_status want, const char *what, const char *word1, const char *word2) {
    int ok = jt_expect_status(st, want, what);
    const char *msg = jattn_last_error();
    if (ok && ((word1 && !strstr(msg, word1)) || (word2 && !strstr(msg, word2)))) {
        printf("FAIL %s: the message \"%s\" does not name %s%s%s\n", what, msg, word1 ? word1 : "",
               word2 ? " and " : "", word2 ? word2 : "");
        ok = 0;
    }
    if (ok && getenv("JATTN_TEST_VERBOSE")) printf("ok   %s: %s: %s\n", what, jattn_status_name(st), msg);
    return ok;
}

/* The call kinds of the parts. */
typedef enum how { HOST_NO_CTX, HOST_CTX, DEVICE_POOL, DEVICE_WS } how;

/* One call (forward or backward) of a, on stream s, into r (host) via d (device). */
static jattn_status call(const arrays *a, int backward, how h, jattn_ctx *ctx, cudaStream_t s, void *ws,
                         size_t ws_bytes, results *r, dresults *d) {
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CUDA;
    e.cuda_stream = s;
    poison_results(r, a);
    if (h == HOST_NO_CTX || h == HOST_CTX) {
        jattn_ctx *c = h == HOST_CTX ? ctx : NULL;
        if (!backward) return jattn_forward(c, &a->p, &e, a->h[Q], a->h[K], a->h[V], r->out, r->lse);
        return jattn_backward(c, &a->p, NULL, &e, a->h[Q], a->h[K], a->h[V], a->h[OUT], a->h[LSE], a->h[DOUT],
                              a->h[DLSE], NULL, r->g[0], r->g[1], r->g[2]);
    }
    e.memory = JATTN_MEMORY_DEVICE;
    if (h == DEVICE_WS) e.workspace = ws, e.workspace_bytes = ws_bytes;
    dresults_poison(d, a, s);
    jattn_status st;
    if (!backward)
        st = jattn_forward(NULL, &a->p, &e, a->d[Q], a->d[K], a->d[V], d->out, d->lse);
    else
        st = jattn_backward(NULL, &a->p, NULL, &e, a->d[Q], a->d[K], a->d[V], a->d[OUT], a->d[LSE], a->d[DOUT],
                            a->d[DLSE], NULL, d->g[0], d->g[1], d->g[2]);
    dresults_fetch(d, r, a, s);
    return st;
}

/* The gate against the reference. */
static int correct(const results *r, const arrays *a, int backward, const char *what) {
    int ok = 1;
    jattn_metrics m;
    if (!backward) {
        jattn_metrics_compute_dense(r->out, a->ref_out, a->n[OUT], &m);
        ok = jattn_metrics_pass(&m, JATTN_PRECISION_F32) &&
             jattn_lse_pass(r->lse, a->ref_lse, a->n[LSE], JATTN_PRECISION_F32);
    } else {
        for (int t = 0; t < 3 && ok; t++) {
            jattn_metrics_compute_dense(r->g[t], a->ref_g[t], a->n[DQ + t], &m);
            ok = jattn_metrics_pass_backward(&m);
        }
    }
    if (!ok || getenv("JATTN_TEST_VERBOSE")) {
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CUDA;
        printf("%s %s: rel_l2 %.3g max_abs %.3g (%s)\n", ok ? "ok  " : "FAIL", what, m.rel_l2, m.max_abs,
               jt_plan_kernel(backward ? JATTN_PASS_BACKWARD : JATTN_PASS_FORWARD, &a->p, NULL, &e));
    }
    return ok;
}

static int same_bits(const results *x, const results *y, const arrays *a, int backward) {
    if (!backward)
        return memcmp(x->out, y->out, (size_t)a->n[OUT] * sizeof(float)) == 0 &&
               memcmp(x->lse, y->lse, (size_t)a->n[LSE] * sizeof(float)) == 0;
    for (int t = 0; t < 3; t++)
        if (memcmp(x->g[t], y->g[t], (size_t)a->n[DQ + t] * sizeof(float)) != 0) return 0;
    return 1;
}

/* ---- refusals ---- */

/* Host pointers on a stream being captured: refused, nothing written, the capture intact (it ends with a
 * graph of no node). legacy: a blocking stream captured, the call on the legacy stream (which the capture
 * reaches: work there would join it). */
static void refuse_host_in_capture(const arrays *a, results *r, enum cudaStreamCaptureMode mode, int legacy) {
    cudaStream_t s;
    CUDA_OK(legacy ? cudaStreamCreate(&s) : cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int backward = 0; backward < 2; backward++) {
        char what[160];
        snprintf(what, sizeof what, "host pointers %s during a %s capture (%s)",
                 legacy ? "on the legacy stream" : "on the captured stream",
                 mode == cudaStreamCaptureModeGlobal ? "global" : "thread-local", backward ? "backward" : "forward");
        CUDA_OK(cudaStreamBeginCapture(s, mode));
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CUDA;
        e.cuda_stream = legacy ? NULL : s;
        poison_results(r, a);
        const jattn_status st = backward
                                    ? jattn_backward(NULL, &a->p, NULL, &e, a->h[Q], a->h[K], a->h[V], a->h[OUT],
                                                     a->h[LSE], a->h[DOUT], a->h[DLSE], NULL, r->g[0], r->g[1], r->g[2])
                                    : jattn_forward(NULL, &a->p, &e, a->h[Q], a->h[K], a->h[V], r->out, r->lse);
        int ok = expect(st, JATTN_ERROR_INVALID_ARGUMENT, what, "exec.memory", "captur");
        cudaGraph_t g = NULL;
        const cudaError_t end = cudaStreamEndCapture(s, &g);
        size_t nodes = 1;
        if (end == cudaSuccess && g) (void)cudaGraphGetNodes(g, NULL, &nodes);
        if (end != cudaSuccess || nodes != 0) {
            printf("FAIL %s: the capture did not end clean (%s, %zu nodes)\n", what, cudaGetErrorName(end), nodes);
            (void)cudaGetLastError();
            ok = 0;
        }
        if (g) (void)cudaGraphDestroy(g);
        if (!results_untouched(r, a, backward)) {
            printf("FAIL %s: an output was written\n", what);
            ok = 0;
        }
        jt_tally_add(&tally, ok);
    }
    CUDA_OK(cudaStreamDestroy(s));
}

/* A stream of another device, device pointers of the current one: refused naming exec.cuda_stream. */
static void refuse_other_device(const arrays *a, results *r, dresults *d) {
    int n = 0;
    CUDA_OK(cudaGetDeviceCount(&n));
    if (n < 2) {
        printf("skip a stream of another device: this machine has %d GPU (the refusal needs two to be seen)\n", n);
        return;
    }
    int cur = 0;
    CUDA_OK(cudaGetDevice(&cur));
    cudaStream_t other;
    CUDA_OK(cudaSetDevice(cur == 0 ? 1 : 0));
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    CUDA_OK(cudaSetDevice(cur));
    cudaStream_t mine;
    CUDA_OK(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking));
    for (int backward = 0; backward < 2; backward++) {
        char what[96];
        snprintf(what, sizeof what, "a stream of another device (%s)", backward ? "backward" : "forward");
        dresults_poison(d, a, mine);
        CUDA_OK(cudaStreamSynchronize(mine));
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CUDA;
        e.memory = JATTN_MEMORY_DEVICE;
        e.cuda_stream = other;
        const jattn_status st = backward
                                    ? jattn_backward(NULL, &a->p, NULL, &e, a->d[Q], a->d[K], a->d[V], a->d[OUT],
                                                     a->d[LSE], a->d[DOUT], a->d[DLSE], NULL, d->g[0], d->g[1], d->g[2])
                                    : jattn_forward(NULL, &a->p, &e, a->d[Q], a->d[K], a->d[V], d->out, d->lse);
        int ok = expect(st, JATTN_ERROR_INVALID_ARGUMENT, what, "exec.cuda_stream", "device");
        CUDA_OK(cudaDeviceSynchronize());
        dresults_fetch(d, r, a, mine);
        if (!results_untouched(r, a, backward)) {
            printf("FAIL %s: an output was written\n", what);
            ok = 0;
        }
        jt_tally_add(&tally, ok);
    }
    CUDA_OK(cudaStreamDestroy(mine));
    CUDA_OK(cudaSetDevice(cur == 0 ? 1 : 0));
    CUDA_OK(cudaStreamDestroy(other));
    CUDA_OK(cudaSetDevice(cur));
}

/* A caller workspace 64 bytes short of the size the call's plan reports: WORKSPACE_TOO_SMALL naming workspace_bytes. */
static void refuse_small_workspace(const arrays *a, results *r, dresults *d) {
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int backward = 0; backward < 2; backward++) {
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CUDA;
        e.memory = JATTN_MEMORY_DEVICE;
        size_t need = 0;
        const jattn_status qs =
            backward ? jattn_backward_workspace_size(&a->p, NULL, &e, &need) : jattn_workspace_size(&a->p, &e, &need);
        char what[96];
        snprintf(what, sizeof what, "a workspace 64 bytes short (%s, %zu bytes needed)",
                 backward ? "backward" : "forward", need);
        if (!jt_expect_status(qs, JATTN_OK, "workspace size") || need < 64) {
            printf("FAIL %s: the size query gave %zu bytes\n", what, need);
            jt_tally_add(&tally, 0);
            continue;
        }
        /* one byte short of what this call needs: its plan's size less the 63 bytes of slack (the size query
         * also covers key padding, which this call has not) */
        jattn_exec pe = e;
        pe.cuda_stream = s;
        const size_t own =
            jt_plan_workspace(backward ? JATTN_PASS_BACKWARD : JATTN_PASS_FORWARD, &a->p, NULL, NULL, &pe);
        if (own < 64 || own > need) {
            printf("FAIL %s: the call's plan needs %zu bytes\n", what, own);
            jt_tally_add(&tally, 0);
            continue;
        }
        void *ws = NULL;
        CUDA_OK(cudaMalloc(&ws, need));
        const jattn_status st = call(a, backward, DEVICE_WS, NULL, s, ws, own - 64, r, d);
        int ok = expect(st, JATTN_ERROR_WORKSPACE_TOO_SMALL, what, "workspace_bytes", NULL);
        if (!results_untouched(r, a, backward)) {
            printf("FAIL %s: an output was written\n", what);
            ok = 0;
        }
        jt_tally_add(&tally, ok);
        /* the reported size itself runs, and right */
        const jattn_status full = call(a, backward, DEVICE_WS, NULL, s, ws, need, r, d);
        jt_tally_add(
            &tally, jt_expect_status(full, JATTN_OK, "the reported workspace size") &&
                        correct(r, a, backward,
                                backward ? "backward on the reported workspace" : "forward on the reported workspace"));
        CUDA_OK(cudaFree(ws));
    }
    CUDA_OK(cudaStreamDestroy(s));
}

static void part_refusals(jt_rng *rng) {
    jattn_problem p = jattn_problem_flux(1, 2, 100, 150, 64);
    arrays a;
    arrays_init(&a, &p, rng);
    results r;
    results_init(&r, &a);
    dresults d;
    dresults_init(&d, &a);
    refuse_host_in_capture(&a, &r, cudaStreamCaptureModeThreadLocal, 0);
    refuse_host_in_capture(&a, &r, cudaStreamCaptureModeGlobal, 0);
    refuse_host_in_capture(&a, &r, cudaStreamCaptureModeThreadLocal, 1);
    refuse_other_device(&a, &r, &d);
    refuse_small_workspace(&a, &r, &d);
    dresults_free(&d);
    results_free(&r);
    arrays_free(&a);
}

/* ---- allocation failure ---- */

#define KEEP_FREE (16u << 20) /* what the exhaustion leaves: under 16 MiB */

/* Allocates device memory in chunks until less than KEEP_FREE is free. @return the allocations (NULL-ended). */
static void **exhaust(size_t *left) {
    size_t cap = 64, n = 0;
    void **held = calloc(cap + 1, sizeof *held);
    size_t chunk = (size_t)1 << 30;
    while (held && chunk >= ((size_t)1 << 20)) {
        size_t free_b = 0, total = 0;
        if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) break;
        if (free_b < KEEP_FREE) break;
        if (chunk > free_b - KEEP_FREE / 2) {
            chunk /= 2;
            continue;
        }
        void *ptr = NULL;
        if (cudaMalloc(&ptr, chunk) != cudaSuccess) {
            (void)cudaGetLastError();
            chunk /= 2;
            continue;
        }
        if (n == cap) {
            void **more = realloc(held, (2 * cap + 1) * sizeof *held);
            if (!more) break;
            held = more, cap *= 2;
        }
        held[n++] = ptr;
        held[n] = NULL;
    }
    size_t free_b = 0, total = 0;
    (void)cudaMemGetInfo(&free_b, &total);
    *left = free_b;
    return held;
}

static void release(void **held) {
    for (size_t i = 0; held && held[i]; i++) (void)cudaFree(held[i]);
    free(held);
}

static void part_oom(jt_rng *rng) {
    /* a backward workspace of ~68 MB (records of 2 B H (Sq + Skv) D floats), a cheap reference (Sq 64) */
    jattn_problem p = jattn_problem_flux(1, 8, 64, 8192, 128);
    arrays a;
    arrays_init(&a, &p, rng);
    results r, before[2][4];
    results_init(&r, &a);
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 4; h++) results_init(&before[b][h], &a);
    dresults d;
    dresults_init(&d, &a);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    jattn_ctx *ctx = NULL;
    static const char *const how_names[3] = {"host pointers, no context", "host pointers, a fresh context",
                                             "device pointers, the pool"};
    /* every call once with memory to spare (checked against the reference; modules loaded) */
    for (int backward = 0; backward < 2; backward++)
        for (int h = HOST_NO_CTX; h <= DEVICE_POOL; h++) {
            jattn_ctx_create(&ctx);
            char what[128];
            snprintf(what, sizeof what, "%s, %s, before", backward ? "backward" : "forward", how_names[h]);
            const jattn_status st = call(&a, backward, (how)h, ctx, s, NULL, 0, &before[backward][h], &d);
            jt_tally_add(&tally,
                         jt_expect_status(st, JATTN_OK, what) && correct(&before[backward][h], &a, backward, what));
            jattn_ctx_free(ctx);
            ctx = NULL;
        }
    /* the forward's fallback at the end of its chain, so that its module is loaded too */
    jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_V1);
    jt_tally_add(&tally, jt_expect_status(call(&a, 0, DEVICE_POOL, NULL, s, NULL, 0, &r, &d), JATTN_OK, "forward v1"));
    jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
    CUDA_OK(cudaDeviceSynchronize());
    int dev = 0;
    CUDA_OK(cudaGetDevice(&dev));
    cudaMemPool_t pool;
    CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, dev));
    CUDA_OK(cudaMemPoolTrimTo(pool, 0));

    /* fresh contexts (no device buffer yet) for the calls through a context: kept across the failure */
    jattn_ctx *ctxs[2] = {NULL, NULL};
    for (int b = 0; b < 2; b++) jt_tally_add(&tally, jt_expect_status(jattn_ctx_create(&ctxs[b]), JATTN_OK, "ctx"));
    size_t left = 0;
    void **held = exhaust(&left);
    printf("device memory exhausted: %.1f MiB left\n", (double)left / (1 << 20));
    if (left >= 2 * KEEP_FREE) {
        printf("FAIL could not exhaust the device's memory (%.1f MiB left)\n", (double)left / (1 << 20));
        jt_tally_add(&tally, 0);
    }
    for (int backward = 0; backward < 2; backward++)
        for (int h = HOST_NO_CTX; h <= DEVICE_POOL; h++) {
            char what[128];
            snprintf(what, sizeof what, "%s, %s, memory exhausted", backward ? "backward" : "forward", how_names[h]);
            const jattn_status st = call(&a, backward, (how)h, ctxs[backward], s, NULL, 0, &r, &d);
            int ok;
            if (!backward && h == DEVICE_POOL && st == JATTN_OK) { /* the workspace fallback ran: right? */
                ok = correct(&r, &a, 0, what);
                jattn_exec e = {0};
                e.backend = JATTN_BACKEND_CUDA;
                printf("%s %s: ran %s (the workspace fallback)\n", ok ? "ok  " : "FAIL", what,
                       jt_plan_kernel(JATTN_PASS_FORWARD, &a.p, NULL, &e));
            } else {
                ok = expect(st, JATTN_ERROR_OUT_OF_MEMORY, what, h == DEVICE_POOL ? "cudaMallocAsync" : "cudaMalloc",
                            NULL);
                if (!results_untouched(&r, &a, backward)) {
                    printf("FAIL %s: an output was written\n", what);
                    ok = 0;
                }
            }
            jt_tally_add(&tally, ok);
        }
    release(held);
    CUDA_OK(cudaDeviceSynchronize());
    /* memory back: every call runs (through the contexts that failed to grow, too), with the bits it gave
     * before */
    for (int backward = 0; backward < 2; backward++)
        for (int h = HOST_NO_CTX; h <= DEVICE_POOL; h++) {
            char what[128];
            snprintf(what, sizeof what, "%s, %s, after freeing", backward ? "backward" : "forward", how_names[h]);
            const jattn_status st = call(&a, backward, (how)h, ctxs[backward], s, NULL, 0, &r, &d);
            int ok = jt_expect_status(st, JATTN_OK, what);
            if (ok && !same_bits(&r, &before[backward][h], &a, backward)) {
                printf("FAIL %s: not the bits of the same call before\n", what);
                ok = 0;
            }
            if (ok && getenv("JATTN_TEST_VERBOSE")) printf("ok   %s\n", what);
            jt_tally_add(&tally, ok);
        }
    for (int b = 0; b < 2; b++) jattn_ctx_free(ctxs[b]);
    CUDA_OK(cudaStreamDestroy(s));
    dresults_free(&d);
    results_free(&r);
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 4; h++) results_free(&before[b][h]);
    arrays_free(&a);
}

int main(int argc, char **argv) {
    const char *part = argc > 1 ? argv[1] : "all";
    if (strcmp(part, "all") && strcmp(part, "refusals") && strcmp(part, "oom")) {
        fprintf(stderr, "usage: %s [refusals|oom|all]\n", argv[0]);
        return 2;
    }
    if (!jt_backend_present(JATTN_BACKEND_CUDA)) {
        printf("SKIP: no cuda backend or no CUDA device\n");
        return JT_SKIP;
    }
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0xFA17ull);
    if (!strcmp(part, "all") || !strcmp(part, "refusals")) part_refusals(&rng);
    if (!strcmp(part, "all") || !strcmp(part, "oom")) part_oom(&rng);
    char title[64];
    snprintf(title, sizeof title, "test_cuda_faults %s", part);
    return jt_tally_finish(&tally, title);
}
