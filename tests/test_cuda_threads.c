/* Many host threads calling the cuda backend at once (issue 37). Each thread has its own context and its
 * own problem (shapes, head dims and key padding differ from thread to thread, so different kernels run
 * side by side), and makes rounds of four calls, in an order of its own each round, all threads released
 * together: a forward and a backward on host pointers through its context, and a forward and a backward
 * on device pointers on its own non-blocking stream (its inputs copied on that stream, its outputs
 * poisoned on it; half the threads give a caller workspace, half let the call take one from the pool).
 * Each round also runs two plans every thread shares (a forward and a backward of one problem, made once:
 * jattn.h says a plan may be run by any number of threads at once), on the thread's own device copies of
 * that problem's inputs, on its stream, with its workspace or the pool.
 * Every result is checked against the float64 reference (the ref backend, before the threads start: the
 * forward's out and lse, and the backward of those) under the gate, outputs poisoned (NaN) before each
 * call and every element checked; and every round must give the bits of the thread's first round on the
 * same path (the backend is deterministic, so a race shows as a difference). A failing call of another
 * thread's field between its good calls checks that jattn_last_error() stays the thread's own.
 *
 * usage: test_cuda_threads [THREADS [ROUNDS]]   (default 16 threads, 3 rounds). Exits 77 without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"

enum { MAX_THREADS = 64, CALLS = 6 };
enum { FWD_HOST, BWD_HOST, FWD_DEVICE, BWD_DEVICE, FWD_PLAN, BWD_PLAN };
static const char *const call_names[CALLS] = {"forward host",    "backward host",       "forward device",
                                              "backward device", "shared forward plan", "shared backward plan"};

/* The plans every thread runs at once (jattn.h: a plan is immutable, any number of threads may run it),
 * each thread on device copies of its own of the plans' problem's inputs, on its stream. */
static struct shared {
    jattn_problem p;
    jattn_plan *fwd, *bwd;
    int64_t nq, nk, nl;
    float *q, *k, *v, *dout, *dlse;      /* inputs */
    float *ref_out, *ref_lse, *ref_g[3]; /* the reference (ref_out, ref_lse: the backward's inputs) */
} sh;

typedef struct shape {
    int64_t B, H, Sq, Skv, D;
    int padded; /* key lengths (the backward v3 and the forwards' padded paths) */
} shape;

/* Shapes dealt out to the threads in turn: the forward v6 / v7 / v1 and the backward v4 / v3 side by side
 * on a Hopper (D 64 and 128 against the others, a single key, a single query, key padding). */
static const shape shapes[] = {
    {1, 4, 256, 256, 128, 0}, {2, 2, 130, 77, 64, 0},  {1, 3, 100, 200, 72, 0}, {1, 2, 64, 300, 128, 1},
    {2, 2, 33, 65, 256, 0},   {1, 4, 200, 128, 40, 0}, {1, 2, 1, 500, 128, 0},  {2, 3, 77, 1, 64, 0},
    {1, 2, 96, 160, 16, 1},   {2, 2, 150, 90, 96, 0},  {1, 1, 300, 64, 1, 0},   {2, 2, 65, 129, 128, 1},
};

typedef struct job {
    int index, rounds;
    shape s;
    jattn_problem p;
    jattn_key_padding kp;
    int64_t kv_len[2];
    int64_t nq, nk, nout, nl; /* elements (dense spans) */
    float *q, *k, *v, *dout, *dlse;
    float *ref_out, *ref_lse, *ref_dq, *ref_dk, *ref_dv; /* the float64 reference, rounded once */
    float *out, *lse, *dq, *dk, *dv;                     /* host results */
    float *first[CALLS][3];                              /* the first round's bits: out (or dq, dk, dv) */
    float *sh_out, *sh_lse, *sh_g[3];                    /* host results of the shared plans */
    int caller_ws;
    int passed, failed;
    char why[300];
} job;

static job jobs[MAX_THREADS];
static pthread_barrier_t start_line;

static void fail(job *j, const char *what, const char *detail) {
    j->failed++;
    if (!j->why[0]) snprintf(j->why, sizeof j->why, "%s: %s", what, detail);
}

static float *alloc_f(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

static void fill_nan(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

static void fill_normal(float *x, int64_t n, jt_rng *r) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)jt_normal(r);
}

/* The problem of thread t: the shape's FLUX problem; odd threads take token-major q, k, v. */
static void job_init(job *j, int t, int rounds, jt_rng *r) {
    memset(j, 0, sizeof *j);
    j->index = t;
    j->rounds = rounds;
    j->s = shapes[(size_t)t % (sizeof shapes / sizeof shapes[0])];
    const shape *s = &j->s;
    j->p = jattn_problem_flux(s->B, s->H, s->Sq, s->Skv, s->D);
    if (t % 2) {
        j->p.q = jattn_strides_token_major(s->H, s->Sq, s->D);
        j->p.k = jattn_strides_token_major(s->H, s->Skv, s->D);
        j->p.v = jattn_strides_token_major(s->H, s->Skv, s->D);
    }
    j->caller_ws = t % 4 < 2;
    if (s->padded) {
        j->kv_len[0] = s->Skv - 5 - t % 7;
        j->kv_len[1] = 1 + (int64_t)(jt_uniform(r) * (double)(s->Skv - 1));
        j->kp.kv_len = j->kv_len;
    }
    j->nq = kit_tensor_span(&j->p, j->p.q, s->Sq);
    j->nk = kit_tensor_span(&j->p, j->p.k, s->Skv);
    j->nout = kit_tensor_span(&j->p, j->p.out, s->Sq);
    j->nl = s->B * s->H * s->Sq;
}

static const jattn_key_padding *padding_of(const job *j) { return j->s.padded ? &j->kp : NULL; }

/* Inputs and the reference (before the threads start). @return 0 on success. */
static int job_prepare(job *j, jt_rng *r) {
    j->q = alloc_f(j->nq), j->k = alloc_f(j->nk), j->v = alloc_f(j->nk), j->dout = alloc_f(j->nout);
    j->dlse = alloc_f(j->nl);
    j->ref_out = alloc_f(j->nout), j->ref_lse = alloc_f(j->nl), j->ref_dq = alloc_f(j->nq);
    j->ref_dk = alloc_f(j->nk), j->ref_dv = alloc_f(j->nk);
    j->out = alloc_f(j->nout), j->lse = alloc_f(j->nl), j->dq = alloc_f(j->nq), j->dk = alloc_f(j->nk);
    j->dv = alloc_f(j->nk);
    for (int c = 0; c < CALLS; c++)
        for (int t = 0; t < 3; t++) j->first[c][t] = NULL;
    if (!j->q || !j->k || !j->v || !j->dout || !j->dlse || !j->ref_out || !j->ref_lse || !j->ref_dq || !j->ref_dk ||
        !j->ref_dv || !j->out || !j->lse || !j->dq || !j->dk || !j->dv)
        return -1;
    fill_normal(j->q, j->nq, r), fill_normal(j->k, j->nk, r), fill_normal(j->v, j->nk, r);
    fill_normal(j->dout, j->nout, r), fill_normal(j->dlse, j->nl, r);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    jattn_status st = jattn_forward_padded(NULL, &j->p, &e, j->q, j->k, j->v, padding_of(j), j->ref_out, j->ref_lse);
    if (st == JATTN_OK)
        st = jattn_backward(NULL, &j->p, NULL, &e, j->q, j->k, j->v, j->ref_out, j->ref_lse, j->dout, j->dlse,
                            padding_of(j), j->ref_dq, j->ref_dk, j->ref_dv);
    if (st != JATTN_OK) printf("FAIL reference of thread %d: %s\n", j->index, jattn_last_error());
    return st == JATTN_OK ? 0 : -1;
}

static void job_free(job *j) {
    float *all[] = {j->q,      j->k,      j->v,   j->dout, j->dlse, j->ref_out, j->ref_lse, j->ref_dq,
                    j->ref_dk, j->ref_dv, j->out, j->lse,  j->dq,   j->dk,      j->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    for (int c = 0; c < CALLS; c++)
        for (int t = 0; t < 3; t++) free(j->first[c][t]);
    free(j->sh_out), free(j->sh_lse);
    for (int t = 0; t < 3; t++) free(j->sh_g[t]);
}

/* The gate on one result; and its bits against the first round's (kept on the first). */
static void check(job *j, int call, int which, const float *got, const float *ref, int64_t n, int backward) {
    static const char *const names[2][3] = {{"out", "lse", "?"}, {"dq", "dk", "dv"}};
    jattn_metrics m;
    jattn_metrics_compute_dense(got, ref, n, &m);
    int64_t unwritten = 0;
    for (int64_t i = 0; i < n; i++) unwritten += isnan(got[i]) && !isnan(ref[i]);
    int ok;
    if (!backward && which == 1)
        ok = jattn_lse_pass(got, ref, n, JATTN_PRECISION_F32) && !unwritten;
    else
        ok = (backward ? jattn_metrics_pass_backward(&m) : jattn_metrics_pass(&m, JATTN_PRECISION_F32)) && !unwritten;
    char detail[160];
    snprintf(detail, sizeof detail, "%s rel_l2 %.3g max_abs %.3g, %lld unwritten", names[backward][which], m.rel_l2,
             m.max_abs, (long long)unwritten);
    if (!ok) fail(j, call_names[call], detail);
    float **first = &j->first[call][which];
    if (!*first) {
        *first = malloc((size_t)n * sizeof(float));
        if (*first) memcpy(*first, got, (size_t)n * sizeof(float));
    } else if (memcmp(*first, got, (size_t)n * sizeof(float)) != 0) {
        ok = 0;
        fail(j, call_names[call],
             backward ? "a gradient differs from the first round's bits"
                      : "out or lse differs from the first round's bits");
    }
    if (ok) j->passed++;
}

/* The device buffers of a thread: the inputs (out and lse: the reference's, for the backward), the
 * forward's results (fo, fl) and the gradients. */
typedef struct dev {
    float *q, *k, *v, *out, *lse, *dout, *dlse, *dq, *dk, *dv, *fo, *fl;
    float *sh[12]; /* the shared plans' problem: the same twelve arrays */
    void *sh_ws;   /* its workspace (caller_ws threads) */
    size_t sh_ws_bytes;
    int64_t *kv_len;
    void *ws;
    size_t ws_bytes;
} dev;

#define CUDA_GO(call)                             \
    do {                                          \
        cudaError_t e_ = (call);                  \
        if (e_ != cudaSuccess) {                  \
            fail(j, #call, cudaGetErrorName(e_)); \
            return -1;                            \
        }                                         \
    } while (0)

static int dev_init(job *j, dev *d, cudaStream_t s) {
    memset(d, 0, sizeof *d);
    float **bufs[12] = {&d->q,    &d->k,  &d->v,  &d->out, &d->lse, &d->dout,
                        &d->dlse, &d->dq, &d->dk, &d->dv,  &d->fo,  &d->fl};
    const int64_t n[12] = {j->nq, j->nk, j->nk, j->nout, j->nl, j->nout, j->nl, j->nq, j->nk, j->nk, j->nout, j->nl};
    for (int i = 0; i < 12; i++) CUDA_GO(cudaMalloc((void **)bufs[i], (size_t)n[i] * sizeof(float)));
    const float *host[7] = {j->q, j->k, j->v, j->ref_out, j->ref_lse, j->dout, j->dlse};
    for (int i = 0; i < 7; i++) /* on the thread's stream: the calls on it are ordered after them */
        CUDA_GO(cudaMemcpyAsync(*bufs[i], host[i], (size_t)n[i] * sizeof(float), cudaMemcpyHostToDevice, s));
    if (j->s.padded) {
        CUDA_GO(cudaMalloc((void **)&d->kv_len, sizeof j->kv_len));
        CUDA_GO(cudaMemcpyAsync(d->kv_len, j->kv_len, sizeof j->kv_len, cudaMemcpyHostToDevice, s));
    }
    /* the shared plans' problem: inputs as `sh`, on this thread's stream */
    const int64_t m[12] = {sh.nq, sh.nk, sh.nk, sh.nq, sh.nl, sh.nq, sh.nl, sh.nq, sh.nk, sh.nk, sh.nq, sh.nl};
    const float *shost[7] = {sh.q, sh.k, sh.v, sh.ref_out, sh.ref_lse, sh.dout, sh.dlse};
    for (int i = 0; i < 12; i++) CUDA_GO(cudaMalloc((void **)&d->sh[i], (size_t)m[i] * sizeof(float)));
    for (int i = 0; i < 7; i++)
        CUDA_GO(cudaMemcpyAsync(d->sh[i], shost[i], (size_t)m[i] * sizeof(float), cudaMemcpyHostToDevice, s));
    if (j->caller_ws) {
        const size_t a = jattn_plan_workspace_size(sh.fwd), b = jattn_plan_workspace_size(sh.bwd);
        d->sh_ws_bytes = a > b ? a : b;
        if (d->sh_ws_bytes) CUDA_GO(cudaMalloc(&d->sh_ws, d->sh_ws_bytes));
    }
    j->sh_out = malloc((size_t)sh.nq * sizeof(float)), j->sh_lse = malloc((size_t)sh.nl * sizeof(float));
    for (int t = 0; t < 3; t++) j->sh_g[t] = malloc((size_t)(t ? sh.nk : sh.nq) * sizeof(float));
    if (!j->sh_out || !j->sh_lse || !j->sh_g[0] || !j->sh_g[1] || !j->sh_g[2]) {
        fail(j, "allocation", "host results of the shared plans");
        return -1;
    }
    if (j->caller_ws) {
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CUDA;
        e.memory = JATTN_MEMORY_DEVICE;
        size_t a = 0, b = 0;
        if (jattn_workspace_size(&j->p, &e, &a) != JATTN_OK ||
            jattn_backward_workspace_size(&j->p, NULL, &e, &b) != JATTN_OK) {
            fail(j, "workspace size", jattn_last_error());
            return -1;
        }
        d->ws_bytes = a > b ? a : b;
        if (d->ws_bytes) CUDA_GO(cudaMalloc(&d->ws, d->ws_bytes));
    }
    return 0;
}

static void dev_free(dev *d) {
    void *all[] = {d->q,  d->k,  d->v,  d->out, d->lse, d->dout,   d->dlse,
                   d->dq, d->dk, d->dv, d->fo,  d->fl,  d->kv_len, d->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) (void)cudaFree(all[i]);
    for (int i = 0; i < 12; i++) (void)cudaFree(d->sh[i]);
    (void)cudaFree(d->sh_ws);
}

/* A run of a shared plan on this thread's copies (dq, dk, dv and the forward's out, lse: sh[7..11]). */
static int plan_call(job *j, int call, dev *d, cudaStream_t s) {
    float **x = d->sh;
    jattn_status st;
    if (call == FWD_PLAN) {
        CUDA_GO(cudaMemsetAsync(x[10], 0xFF, (size_t)sh.nq * sizeof(float), s));
        CUDA_GO(cudaMemsetAsync(x[11], 0xFF, (size_t)sh.nl * sizeof(float), s));
        st = jattn_plan_forward(sh.fwd, NULL, s, d->sh_ws, d->sh_ws_bytes, x[0], x[1], x[2], NULL, x[10], x[11]);
    } else {
        for (int t = 0; t < 3; t++)
            CUDA_GO(cudaMemsetAsync(x[7 + t], 0xFF, (size_t)(t ? sh.nk : sh.nq) * sizeof(float), s));
        st = jattn_plan_backward(sh.bwd, NULL, s, d->sh_ws, d->sh_ws_bytes, x[0], x[1], x[2], x[3], x[4], x[5], x[6],
                                 NULL, x[7], x[8], x[9]);
    }
    if (st != JATTN_OK) {
        fail(j, call_names[call], jattn_last_error());
        return -1;
    }
    CUDA_GO(cudaStreamSynchronize(s));
    if (call == FWD_PLAN) {
        CUDA_GO(cudaMemcpy(j->sh_out, x[10], (size_t)sh.nq * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_GO(cudaMemcpy(j->sh_lse, x[11], (size_t)sh.nl * sizeof(float), cudaMemcpyDeviceToHost));
        check(j, call, 0, j->sh_out, sh.ref_out, sh.nq, 0);
        check(j, call, 1, j->sh_lse, sh.ref_lse, sh.nl, 0);
    } else {
        for (int t = 0; t < 3; t++) {
            CUDA_GO(
                cudaMemcpy(j->sh_g[t], x[7 + t], (size_t)(t ? sh.nk : sh.nq) * sizeof(float), cudaMemcpyDeviceToHost));
            check(j, call, t, j->sh_g[t], sh.ref_g[t], t ? sh.nk : sh.nq, 1);
        }
    }
    return 0;
}

/* One call of path `call`; the results into the host arrays (poisoned first), then checked. */
static int one_call(job *j, int call, jattn_ctx *ctx, dev *d, cudaStream_t s) {
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CUDA;
    const int backward = call == BWD_HOST || call == BWD_DEVICE;
    jattn_status st;
    if (backward)
        fill_nan(j->dq, j->nq), fill_nan(j->dk, j->nk), fill_nan(j->dv, j->nk);
    else
        fill_nan(j->out, j->nout), fill_nan(j->lse, j->nl);
    if (call == FWD_HOST) {
        st = jattn_forward_padded(ctx, &j->p, &e, j->q, j->k, j->v, padding_of(j), j->out, j->lse);
    } else if (call == BWD_HOST) {
        st = jattn_backward(ctx, &j->p, NULL, &e, j->q, j->k, j->v, j->ref_out, j->ref_lse, j->dout, j->dlse,
                            padding_of(j), j->dq, j->dk, j->dv);
    } else {
        e.memory = JATTN_MEMORY_DEVICE;
        e.cuda_stream = s;
        e.workspace = d->ws;
        e.workspace_bytes = d->ws_bytes;
        jattn_key_padding dkp = j->kp;
        dkp.kv_len = d->kv_len;
        const jattn_key_padding *pad = j->s.padded ? &dkp : NULL;
        if (backward) {
            CUDA_GO(cudaMemsetAsync(d->dq, 0xFF, (size_t)j->nq * sizeof(float), s));
            CUDA_GO(cudaMemsetAsync(d->dk, 0xFF, (size_t)j->nk * sizeof(float), s));
            CUDA_GO(cudaMemsetAsync(d->dv, 0xFF, (size_t)j->nk * sizeof(float), s));
            st = jattn_backward(NULL, &j->p, NULL, &e, d->q, d->k, d->v, d->out, d->lse, d->dout, d->dlse, pad, d->dq,
                                d->dk, d->dv);
        } else {
            CUDA_GO(cudaMemsetAsync(d->fo, 0xFF, (size_t)j->nout * sizeof(float), s));
            CUDA_GO(cudaMemsetAsync(d->fl, 0xFF, (size_t)j->nl * sizeof(float), s));
            st = jattn_forward_padded(NULL, &j->p, &e, d->q, d->k, d->v, pad, d->fo, d->fl);
        }
        if (st == JATTN_OK) {
            CUDA_GO(cudaStreamSynchronize(s));
            if (backward) {
                CUDA_GO(cudaMemcpy(j->dq, d->dq, (size_t)j->nq * sizeof(float), cudaMemcpyDeviceToHost));
                CUDA_GO(cudaMemcpy(j->dk, d->dk, (size_t)j->nk * sizeof(float), cudaMemcpyDeviceToHost));
                CUDA_GO(cudaMemcpy(j->dv, d->dv, (size_t)j->nk * sizeof(float), cudaMemcpyDeviceToHost));
            } else {
                CUDA_GO(cudaMemcpy(j->out, d->fo, (size_t)j->nout * sizeof(float), cudaMemcpyDeviceToHost));
                CUDA_GO(cudaMemcpy(j->lse, d->fl, (size_t)j->nl * sizeof(float), cudaMemcpyDeviceToHost));
            }
        }
    }
    if (st != JATTN_OK) {
        fail(j, call_names[call], jattn_last_error());
        return -1;
    }
    if (backward) {
        check(j, call, 0, j->dq, j->ref_dq, j->nq, 1);
        check(j, call, 1, j->dk, j->ref_dk, j->nk, 1);
        check(j, call, 2, j->dv, j->ref_dv, j->nk, 1);
    } else {
        check(j, call, 0, j->out, j->ref_out, j->nout, 0);
        check(j, call, 1, j->lse, j->ref_lse, j->nl, 0);
    }
    return 0;
}

static void *worker(void *arg) {
    job *j = arg;
    jattn_ctx *ctx = NULL;
    cudaStream_t s = NULL;
    dev d;
    memset(&d, 0, sizeof d);
    int ready = jattn_ctx_create(&ctx) == JATTN_OK;
    if (!ready) fail(j, "jattn_ctx_create", jattn_last_error());
    if (ready && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        fail(j, "cudaStreamCreateWithFlags", "failed");
        ready = 0;
    }
    if (ready) ready = dev_init(j, &d, s) == 0;
    pthread_barrier_wait(&start_line);
    jt_rng r;
    jt_rng_init(&r, jt_seed() ^ (uint64_t)(j->index + 1) * 0x9E3779B97F4A7C15ull);
    for (int round = 0; round < j->rounds && ready; round++) {
        int order[CALLS] = {0, 1, 2, 3, 4, 5};
        for (int i = CALLS - 1; i > 0; i--) { /* an order of its own each round */
            const int k = (int)(jt_uniform(&r) * (i + 1)), t = order[i];
            order[i] = order[k], order[k] = t;
        }
        for (int i = 0; i < CALLS; i++) {
            /* a failing call naming a field between the good ones: the message must stay this thread's */
            jattn_problem bad = j->p;
            bad.head_dim = 0;
            jattn_exec e = {0};
            e.backend = JATTN_BACKEND_CUDA;
            if (jattn_forward(ctx, &bad, &e, j->q, j->k, j->v, j->out, NULL) != JATTN_ERROR_INVALID_DIMENSION ||
                strncmp(jattn_last_error(), "head_dim", 8) != 0)
                fail(j, "a failing call's message", jattn_last_error());
            if (order[i] >= FWD_PLAN)
                plan_call(j, order[i], &d, s);
            else
                one_call(j, order[i], ctx, &d, s);
        }
    }
    dev_free(&d);
    if (s) (void)cudaStreamDestroy(s);
    jattn_ctx_free(ctx);
    return NULL;
}

/* The shared plans' problem, its inputs and reference, and the plans (device memory). @return 0 on success. */
static int shared_init(jt_rng *r) {
    sh.p = jattn_problem_flux(1, 4, 200, 300, 128);
    sh.nq = 4 * 200 * 128, sh.nk = 4 * 300 * 128, sh.nl = 4 * 200;
    float **in[5] = {&sh.q, &sh.k, &sh.v, &sh.dout, &sh.dlse};
    const int64_t n[5] = {sh.nq, sh.nk, sh.nk, sh.nq, sh.nl};
    for (int i = 0; i < 5; i++) {
        if (!(*in[i] = alloc_f(n[i]))) return -1;
        fill_normal(*in[i], n[i], r);
    }
    sh.ref_out = alloc_f(sh.nq), sh.ref_lse = alloc_f(sh.nl);
    for (int t = 0; t < 3; t++) sh.ref_g[t] = alloc_f(t ? sh.nk : sh.nq);
    if (!sh.ref_out || !sh.ref_lse || !sh.ref_g[0] || !sh.ref_g[1] || !sh.ref_g[2]) return -1;
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    jattn_status st = jattn_forward(NULL, &sh.p, &e, sh.q, sh.k, sh.v, sh.ref_out, sh.ref_lse);
    if (st == JATTN_OK)
        st = jattn_backward(NULL, &sh.p, NULL, &e, sh.q, sh.k, sh.v, sh.ref_out, sh.ref_lse, sh.dout, sh.dlse, NULL,
                            sh.ref_g[0], sh.ref_g[1], sh.ref_g[2]);
    e.backend = JATTN_BACKEND_CUDA;
    e.memory = JATTN_MEMORY_DEVICE;
    if (st == JATTN_OK) st = jattn_plan_create(&sh.fwd, JATTN_PASS_FORWARD, &sh.p, NULL, NULL, &e);
    if (st == JATTN_OK) st = jattn_plan_create(&sh.bwd, JATTN_PASS_BACKWARD, &sh.p, NULL, NULL, &e);
    if (st != JATTN_OK) printf("FAIL the shared plans: %s: %s\n", jattn_status_name(st), jattn_last_error());
    return st == JATTN_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 16, rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (threads < 1 || threads > MAX_THREADS || rounds < 1) {
        fprintf(stderr, "usage: %s [THREADS (1..%d) [ROUNDS]]\n", argv[0], MAX_THREADS);
        return 2;
    }
    if (!jt_backend_present(JATTN_BACKEND_CUDA)) {
        printf("SKIP: no cuda backend or no CUDA device\n");
        return JT_SKIP;
    }
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0x7A5EDull);
    jt_tally tally = {0};
    if (shared_init(&rng) != 0) return 1;
    for (int t = 0; t < threads; t++) {
        job_init(&jobs[t], t, rounds, &rng);
        if (job_prepare(&jobs[t], &rng) != 0) {
            printf("FAIL setup of thread %d\n", t);
            return 1;
        }
    }
    pthread_t tid[MAX_THREADS];
    pthread_barrier_init(&start_line, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) pthread_create(&tid[t], NULL, worker, &jobs[t]);
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start_line);
    for (int t = 0; t < threads; t++) {
        const job *j = &jobs[t];
        const int ok = j->failed == 0 && j->passed > 0;
        printf("%s thread %2d B=%lld H=%lld Sq=%lld Skv=%lld D=%lld%s%s: %d checks passed, %d failed%s%s\n",
               ok ? "ok  " : "FAIL", t, (long long)j->s.B, (long long)j->s.H, (long long)j->s.Sq, (long long)j->s.Skv,
               (long long)j->s.D, j->s.padded ? " kv_len" : "", j->caller_ws ? " caller-ws" : " pool-ws", j->passed,
               j->failed, j->why[0] ? ": first: " : "", j->why);
        tally.passed += j->passed;
        tally.failed += j->failed;
        job_free(&jobs[t]);
    }
    jattn_plan_free(sh.fwd), jattn_plan_free(sh.bwd);
    float *all[] = {sh.q, sh.k, sh.v, sh.dout, sh.dlse, sh.ref_out, sh.ref_lse, sh.ref_g[0], sh.ref_g[1], sh.ref_g[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    char title[64];
    snprintf(title, sizeof title, "test_cuda_threads (%d threads, %d rounds)", threads, rounds);
    return jt_tally_finish(&tally, title);
}
