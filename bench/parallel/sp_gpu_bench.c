/* Sequence-parallel attention on P GPUs of one host through NCCL (libjattn_parallel), beside
 * the same problem on one GPU; no MPI needed: one process, one thread per GPU, the
 * communicators made by ncclCommInitAll.
 *
 *  1. parity: for each P, both algorithms (and k, v replicated), the assembled output of the
 *     P GPUs against the float64 reference of the whole problem (every n-th query row, as
 *     `jattn run --check` samples beyond the default job's size), under the f32 gate; uneven
 *     shards (S not divisible by P) and heads that P does not divide are among the shapes;
 *  2. time per call: jattn_forward on GPU 0 (t1) and jattn_sp_forward on P GPUs (tP), each the
 *     median of `reps` calls after a warm-up, on the host clock between barriers, a call's time
 *     being its slowest GPU's (each call ends with cudaStreamSynchronize); speedup t1 / tP and
 *     scaling efficiency t1 / (P * tP).
 *
 * Inputs: q, k, v uniform in [-sqrt(3), sqrt(3)] (variance 1), a hash of each element's index,
 * so every GPU fills its shard and the whole problem is the same. NVLink multicast (NVLS) is
 * turned off (NCCL_NVLS_ENABLE=0) before any communicator exists; nothing here calls
 * cuMulticastCreate.
 *
 * usage: sp_gpu_bench [--gpus 2,4,8] [--reps N] [--no-time] [--no-parity] [B,H,S,D ...]
 *        (default shapes: 1,24,16384,128 1,40,32768,128 1,40,75600,128)
 * exit:  0 all parity PASS and every efficiency >= 90% at S >= 32768; 1 a parity FAIL or an
 *        error; 3 parity PASS but an efficiency below 90% at S >= 32768. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "clock.h"
#include "reference.h"
#include "tensor.h"
#include "jattn_parallel.h"

#define MAX_GPUS 8
#define MAX_SHAPES 8
#define EFFICIENCY_TARGET 0.90
#define LONG_SEQ 32768 /* the efficiency target holds from here */

static void die(const char *file, int line, const char *call, const char *why, const char *detail) {
    fprintf(stderr, "sp_gpu_bench: %s:%d %s: %s%s%s\n", file, line, call, why, detail ? ": " : "",
            detail ? detail : "");
    exit(1);
}
#define CUDA_OK(call)                                                                      \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) die(__FILE__, __LINE__, #call, cudaGetErrorName(e_), NULL); \
    } while (0)
#define NCCL_OK(call)                                                                        \
    do {                                                                                     \
        ncclResult_t r_ = (call);                                                            \
        if (r_ != ncclSuccess) die(__FILE__, __LINE__, #call, ncclGetErrorString(r_), NULL); \
    } while (0)
#define JATTN_OK_OR_DIE(call)                                                                          \
    do {                                                                                               \
        jattn_status s_ = (call);                                                                      \
        if (s_ != JATTN_OK) die(__FILE__, __LINE__, #call, jattn_status_name(s_), jattn_last_error()); \
    } while (0)

/* ---- inputs: a hash of (tensor, element) ---- */

static float element(uint64_t tensor, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (tensor + 1) * 0xD1B54A32D192ED03ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 32;
    return (float)(((double)(x >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0) * 1.7320508075688772);
}

static float *make_tensor(uint64_t tensor, int64_t n) {
    float *x = kit_alloc_floats(n);
    if (!x) {
        fprintf(stderr, "sp_gpu_bench: out of host memory (%lld floats)\n", (long long)n);
        exit(1);
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] = element(tensor, (uint64_t)i);
    return x;
}

/* ---- device buffers ---- */

typedef struct gpu_set {
    cudaStream_t stream;
    float *q, *k, *v, *out;
    void *workspace;
} gpu_set;

static void gpu_set_alloc(gpu_set *g, int64_t nq, int64_t nkv, int64_t nout) {
    memset(g, 0, sizeof *g);
    CUDA_OK(cudaStreamCreate(&g->stream));
    CUDA_OK(cudaMalloc((void **)&g->q, (size_t)nq * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&g->k, (size_t)nkv * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&g->v, (size_t)nkv * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&g->out, (size_t)nout * sizeof(float)));
}

/* `rows` rows of `len` floats, `pitch` floats apart in src, to dense dst. */
static void upload_rows(float *dst, const float *src, int64_t rows, int64_t len, int64_t pitch) {
    CUDA_OK(cudaMemcpy2D(dst, (size_t)len * sizeof(float), src, (size_t)pitch * sizeof(float),
                         (size_t)len * sizeof(float), (size_t)rows, cudaMemcpyHostToDevice));
}

static void gpu_set_free(gpu_set *g) {
    CUDA_OK(cudaFree(g->workspace));
    CUDA_OK(cudaFree(g->q));
    CUDA_OK(cudaFree(g->k));
    CUDA_OK(cudaFree(g->v));
    CUDA_OK(cudaFree(g->out));
    CUDA_OK(cudaStreamDestroy(g->stream));
}

/* Times `reps` calls of fn on the set's stream, each to completion. */
static void time_calls(double *ms, int reps, pthread_barrier_t *barrier, void (*call)(void *), void *arg,
                       cudaStream_t stream) {
    for (int i = 0; i < reps; i++) {
        if (barrier) pthread_barrier_wait(barrier);
        const double t0 = kit_now();
        call(arg);
        CUDA_OK(cudaStreamSynchronize(stream));
        ms[i] = 1e3 * (kit_now() - t0);
    }
}

/* ---- one problem on P GPUs ---- */

typedef struct shape {
    int64_t batch, heads, seq, seq_kv, dim;
    int replicate_kv; /* k, v whole on every GPU */
} shape;

typedef struct run {
    shape s;
    int gpus;
    jattn_sp_algorithm algorithm;
    int reps;
    ncclComm_t *comms;
    const float *q, *k, *v; /* whole, host, head-major */
    float *out;             /* whole, host, token-major: filled when want_out */
    int want_out;
    int64_t shards[MAX_GPUS], kv_shards[MAX_GPUS];
    pthread_barrier_t barrier;
    double ms[MAX_GPUS][64]; /* per GPU, per rep */
    jattn_sp_selection sel;
} run;

typedef struct worker {
    run *r;
    int rank;
} worker;

static int64_t offset_of(const int64_t *shards, int r) {
    int64_t off = 0;
    for (int i = 0; i < r; i++) off += shards[i];
    return off;
}

/* One GPU's call, for time_calls. */
typedef struct sp_call {
    jattn_sp_ctx *ctx;
    jattn_sp_problem sp;
    jattn_exec e;
    jattn_sp_comm comm;
    gpu_set *g;
} sp_call;

static void call_sp(void *arg) {
    sp_call *c = arg;
    JATTN_OK_OR_DIE(jattn_sp_forward(c->ctx, &c->sp, &c->e, &c->comm, c->g->q, c->g->k, c->g->v, c->g->out, NULL));
}

static void *gpu_main(void *arg) {
    worker *wk = arg;
    run *r = wk->r;
    const int rank = wk->rank;
    const shape *s = &r->s;
    const int64_t B = s->batch, H = s->heads, D = s->dim, sq = r->shards[rank], qo = offset_of(r->shards, rank);
    const int64_t skv = s->replicate_kv ? s->seq_kv : r->kv_shards[rank];
    const int64_t kvo = s->replicate_kv ? 0 : offset_of(r->kv_shards, rank);
    CUDA_OK(cudaSetDevice(rank));
    gpu_set g;
    gpu_set_alloc(&g, B * H * sq * D, B * H * skv * D, B * sq * H * D);
    /* this GPU's shards: rows [first, first + len) of each (b, h) of the whole head-major tensors */
    upload_rows(g.q, r->q + qo * D, B * H, sq * D, s->seq * D);
    upload_rows(g.k, r->k + kvo * D, B * H, skv * D, s->seq_kv * D);
    upload_rows(g.v, r->v + kvo * D, B * H, skv * D, s->seq_kv * D);

    sp_call c;
    memset(&c, 0, sizeof c);
    c.g = &g;
    c.sp = jattn_sp_problem_flux(B, H, D, r->gpus, r->shards, s->replicate_kv ? NULL : r->kv_shards, rank);
    if (s->replicate_kv) {
        c.sp.whole.seq_kv = s->seq_kv;
        c.sp.whole.k = c.sp.whole.v = jattn_strides_head_major(H, s->seq_kv, D);
    }
    c.sp.algorithm = r->algorithm;
    c.e.backend = JATTN_BACKEND_CUDA;
    c.e.memory = JATTN_MEMORY_DEVICE;
    c.e.cuda_stream = g.stream;
    c.comm = (jattn_sp_comm){JATTN_SP_NCCL, &r->comms[rank]};
    size_t bytes = 0;
    JATTN_OK_OR_DIE(jattn_sp_workspace_size(&c.sp, &c.e, &c.comm, &bytes));
    if (rank == 0) JATTN_OK_OR_DIE(jattn_sp_select(&c.sp, &c.e, &c.comm, &r->sel));
    CUDA_OK(cudaMalloc(&g.workspace, bytes ? bytes : 1));
    c.e.workspace = g.workspace;
    c.e.workspace_bytes = bytes;
    JATTN_OK_OR_DIE(jattn_sp_ctx_create(&c.ctx));
    time_calls(r->ms[rank], 1, NULL, call_sp, &c, g.stream); /* warm-up */
    time_calls(r->ms[rank], r->reps, &r->barrier, call_sp, &c, g.stream);
    if (r->want_out) /* token-major [B, S_r, H*D] into the whole [B, S, H*D] */
        CUDA_OK(cudaMemcpy2D(r->out + qo * H * D, (size_t)(s->seq * H * D) * sizeof(float), g.out,
                             (size_t)(sq * H * D) * sizeof(float), (size_t)(sq * H * D) * sizeof(float), (size_t)B,
                             cudaMemcpyDeviceToHost));
    jattn_sp_ctx_free(c.ctx);
    gpu_set_free(&g);
    return NULL;
}

/* Runs r on r->gpus GPUs. @return the median over reps of the slowest GPU's time (ms). */
static double run_parallel(run *r) {
    jattn_sp_even_shards(r->s.seq, r->gpus, r->shards);
    if (!r->s.replicate_kv) jattn_sp_even_shards(r->s.seq_kv, r->gpus, r->kv_shards);
    pthread_barrier_init(&r->barrier, NULL, (unsigned)r->gpus);
    pthread_t t[MAX_GPUS];
    worker w[MAX_GPUS];
    for (int g = 0; g < r->gpus; g++) {
        w[g] = (worker){r, g};
        if (pthread_create(&t[g], NULL, gpu_main, &w[g]) != 0) {
            fprintf(stderr, "sp_gpu_bench: pthread_create failed\n");
            exit(1);
        }
    }
    for (int g = 0; g < r->gpus; g++) pthread_join(t[g], NULL);
    pthread_barrier_destroy(&r->barrier);
    double slowest[64];
    for (int i = 0; i < r->reps; i++) {
        slowest[i] = 0;
        for (int g = 0; g < r->gpus; g++)
            if (r->ms[g][i] > slowest[i]) slowest[i] = r->ms[g][i];
    }
    return kit_median(slowest, r->reps);
}

/* The whole problem on GPU 0, for time_calls. */
typedef struct single_call {
    jattn_problem p;
    jattn_exec e;
    gpu_set *g;
} single_call;

static void call_single(void *arg) {
    single_call *c = arg;
    JATTN_OK_OR_DIE(jattn_forward(NULL, &c->p, &c->e, c->g->q, c->g->k, c->g->v, c->g->out, NULL));
}

/* @return the median time (ms) of the whole problem on GPU 0. */
static double run_single(const shape *s, const float *q, const float *k, const float *v, int reps) {
    const int64_t B = s->batch, H = s->heads, D = s->dim;
    CUDA_OK(cudaSetDevice(0));
    gpu_set g;
    gpu_set_alloc(&g, B * H * s->seq * D, B * H * s->seq_kv * D, B * s->seq * H * D);
    upload_rows(g.q, q, 1, B * H * s->seq * D, B * H * s->seq * D);
    upload_rows(g.k, k, 1, B * H * s->seq_kv * D, B * H * s->seq_kv * D);
    upload_rows(g.v, v, 1, B * H * s->seq_kv * D, B * H * s->seq_kv * D);
    single_call c = {jattn_problem_flux(B, H, s->seq, s->seq_kv, D), {0}, &g};
    c.e.backend = JATTN_BACKEND_CUDA;
    c.e.memory = JATTN_MEMORY_DEVICE;
    c.e.cuda_stream = g.stream;
    size_t bytes = 0;
    JATTN_OK_OR_DIE(jattn_workspace_size(&c.p, &c.e, &bytes));
    CUDA_OK(cudaMalloc(&g.workspace, bytes ? bytes : 1));
    c.e.workspace = g.workspace;
    c.e.workspace_bytes = bytes;
    double ms[64];
    time_calls(ms, 1, NULL, call_single, &c, g.stream); /* warm-up */
    time_calls(ms, reps, NULL, call_single, &c, g.stream);
    gpu_set_free(&g);
    return kit_median(ms, reps);
}

static const char *algorithm_name(jattn_sp_algorithm a) {
    return a == JATTN_SP_ULYSSES ? "ulysses" : a == JATTN_SP_RING ? "ring" : "auto";
}

/* ---- parity ---- */

static int parity(ncclComm_t *comms, int gpus, const shape *s, jattn_sp_algorithm a) {
    const int64_t nq = s->batch * s->heads * s->seq * s->dim, nkv = s->batch * s->heads * s->seq_kv * s->dim;
    float *q = make_tensor(0, nq), *k = make_tensor(1, nkv), *v = make_tensor(2, nkv), *out = kit_alloc_floats(nq);
    run *r = calloc(1, sizeof *r);
    if (!out || !r) {
        fprintf(stderr, "sp_gpu_bench: out of host memory\n");
        exit(1);
    }
    *r = (run){.s = *s,
               .gpus = gpus,
               .algorithm = a,
               .reps = 1,
               .comms = comms,
               .q = q,
               .k = k,
               .v = v,
               .out = out,
               .want_out = 1};
    run_parallel(r);
    jattn_problem p = jattn_problem_flux(s->batch, s->heads, s->seq, s->seq_kv, s->dim);
    kit_reference ref;
    char why[512];
    const double budget = KIT_CHECK_BUDGET_FLOPS; /* as `jattn run --check` */
    int pass = 0;
    if (kit_reference_compute(&ref, &p, NULL, q, k, v, budget, 0, why, sizeof why) != JATTN_OK) {
        fprintf(stderr, "sp_gpu_bench: %s\n", why);
    } else {
        kit_parity par;
        kit_reference_compare(&ref, &p, out, NULL, JATTN_PRECISION_F32, &par);
        pass = par.pass;
        char shards[128] = "";
        for (int g = 0, len = 0; g < gpus && len < 100; g++)
            len += snprintf(shards + len, sizeof shards - (size_t)len, "%s%lld", g ? "," : "", (long long)r->shards[g]);
        printf("PARITY P=%d %-7s (%lld,%lld,%lld,%lld) Skv=%lld%s shards %s, heads/GPU %lld, kernel %s: rel_l2 %.3g "
               "max_abs %.3g cos %.9f (1 row in %lld): %s\n",
               gpus, r->sel.algorithm_name, (long long)s->batch, (long long)s->heads, (long long)s->seq,
               (long long)s->dim, (long long)s->seq_kv, s->replicate_kv ? " replicated" : "", shards,
               (long long)r->sel.heads, r->sel.local.kernel, par.m.rel_l2, par.m.max_abs, par.m.cos,
               (long long)ref.stride, pass ? "PASS" : "FAIL");
        kit_reference_free(&ref);
    }
    fflush(stdout);
    free(r);
    free(q);
    free(k);
    free(v);
    free(out);
    return pass;
}

/* ---- main ---- */

static int parse_shape(const char *arg, shape *s) {
    long long b, h, n, d;
    char tail;
    if (sscanf(arg, "%lld,%lld,%lld,%lld%c", &b, &h, &n, &d, &tail) != 4 || b < 1 || h < 1 || n < 1 || d < 1) return -1;
    *s = (shape){b, h, n, n, d, 0};
    return 0;
}

int main(int argc, char **argv) {
    /* Before any communicator: NVLink multicast off (it can take the host's GPUs out of service). */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    int count = 0;
    CUDA_OK(cudaGetDeviceCount(&count));
    int gpu_counts[MAX_GPUS], n_counts = 0, reps = 5, do_time = 1, do_parity = 1;
    shape shapes[MAX_SHAPES];
    int n_shapes = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gpus") == 0 && i + 1 < argc) {
            for (char *t = strtok(argv[++i], ","); t && n_counts < MAX_GPUS; t = strtok(NULL, ","))
                gpu_counts[n_counts++] = atoi(t);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--no-time") == 0) {
            do_time = 0;
        } else if (strcmp(argv[i], "--no-parity") == 0) {
            do_parity = 0;
        } else if (n_shapes < MAX_SHAPES && parse_shape(argv[i], &shapes[n_shapes]) == 0) {
            n_shapes++;
        } else {
            fprintf(stderr, "usage: sp_gpu_bench [--gpus 2,4,8] [--reps N] [--no-time] [--no-parity] [B,H,S,D ...]\n");
            return 1;
        }
    }
    if (reps < 1 || reps > 64) reps = 5;
    if (!n_counts)
        for (int p = 2; p <= count && p <= MAX_GPUS; p *= 2) gpu_counts[n_counts++] = p;
    for (int i = 0; i < n_counts; i++)
        if (gpu_counts[i] < 1 || gpu_counts[i] > count || gpu_counts[i] > MAX_GPUS) {
            fprintf(stderr, "sp_gpu_bench: %d GPUs asked for, %d present\n", gpu_counts[i], count);
            return 1;
        }
    if (!n_counts) {
        fprintf(stderr, "sp_gpu_bench: %d GPU(s): sequence parallelism needs 2 or more\n", count);
        return 1;
    }
    if (!n_shapes) {
        shapes[n_shapes++] = (shape){1, 24, 16384, 16384, 128, 0};
        shapes[n_shapes++] = (shape){1, 40, 32768, 32768, 128, 0};
        shapes[n_shapes++] = (shape){1, 40, 75600, 75600, 128, 0};
    }
    printf("sp_gpu_bench: jattn %s, %d GPUs present, NCCL %d.%d.%d, NCCL_NVLS_ENABLE=%s\n", jattn_version_string(),
           count, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, getenv("NCCL_NVLS_ENABLE"));
    int failures = 0, below = 0;
    static const jattn_sp_algorithm algorithms[2] = {JATTN_SP_ULYSSES, JATTN_SP_RING};
    double t1[MAX_SHAPES];
    if (do_time)
        for (int i = 0; i < n_shapes; i++) {
            shape *s = &shapes[i];
            const int64_t nq = s->batch * s->heads * s->seq * s->dim;
            float *q = make_tensor(0, nq), *k = make_tensor(1, nq), *v = make_tensor(2, nq);
            t1[i] = run_single(s, q, k, v, reps);
            printf("TIME1 (%lld,%lld,%lld,%lld) 1 GPU: %.3f ms\n", (long long)s->batch, (long long)s->heads,
                   (long long)s->seq, (long long)s->dim, t1[i]);
            fflush(stdout);
            free(q);
            free(k);
            free(v);
        }
    typedef struct row {
        int shape, gpus;
        jattn_sp_algorithm a;
        double ms;
    } row;
    row rows[MAX_SHAPES * MAX_GPUS * 2];
    int n_rows = 0;
    for (int c = 0; c < n_counts; c++) {
        const int P = gpu_counts[c];
        ncclComm_t comms[MAX_GPUS];
        int devs[MAX_GPUS];
        for (int g = 0; g < P; g++) devs[g] = g;
        NCCL_OK(ncclCommInitAll(comms, P, devs));
        if (do_parity) {
            const shape checks[] = {
                {1, 24, 4096, 4096, 128, 0},
                {1, 24, 4096 + P - 1, 4096 + P - 1, 128, 0}, /* S not divisible by P */
                {1, 5 * P + 1, 2048 + 1, 2048 + 1, 64, 0},   /* heads not divisible by P */
                {1, 24, 4096, 512, 128, 1},                  /* cross-attention, k, v replicated */
            };
            for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
                for (int a = 0; a < 2; a++) failures += !parity(comms, P, &checks[i], algorithms[a]);
        }
        if (do_time)
            for (int i = 0; i < n_shapes; i++) {
                shape *s = &shapes[i];
                const int64_t nq = s->batch * s->heads * s->seq * s->dim;
                float *q = make_tensor(0, nq), *k = make_tensor(1, nq), *v = make_tensor(2, nq);
                for (int a = 0; a < 2; a++) {
                    run *r = calloc(1, sizeof *r);
                    if (!r) return 1;
                    *r = (run){.s = *s,
                               .gpus = P,
                               .algorithm = algorithms[a],
                               .reps = reps,
                               .comms = comms,
                               .q = q,
                               .k = k,
                               .v = v};
                    const double ms = run_parallel(r);
                    rows[n_rows++] = (row){i, P, algorithms[a], ms};
                    printf("TIMEP (%lld,%lld,%lld,%lld) %d GPUs %s: %.3f ms, kernel %s\n", (long long)s->batch,
                           (long long)s->heads, (long long)s->seq, (long long)s->dim, P, algorithm_name(algorithms[a]),
                           ms, r->sel.local.kernel);
                    fflush(stdout);
                    free(r);
                }
                free(q);
                free(k);
                free(v);
            }
        for (int g = 0; g < P; g++) ncclCommDestroy(comms[g]);
    }
    if (do_time) {
        printf("\n| shape (B,H,S,D) | GPUs | algorithm | t1 ms (1 GPU) | tP ms | speedup t1/tP | efficiency t1/(P*tP) "
               "|\n");
        printf("| --- | --- | --- | --- | --- | --- | --- |\n");
        for (int i = 0; i < n_rows; i++) {
            const shape *s = &shapes[rows[i].shape];
            const double speedup = t1[rows[i].shape] / rows[i].ms, eff = speedup / rows[i].gpus;
            const int gated = s->seq >= LONG_SEQ;
            if (gated && eff < EFFICIENCY_TARGET) below++;
            printf("| (%lld,%lld,%lld,%lld) | %d | %s | %.2f | %.2f | %.2fx | %.1f%%%s |\n", (long long)s->batch,
                   (long long)s->heads, (long long)s->seq, (long long)s->dim, rows[i].gpus, algorithm_name(rows[i].a),
                   t1[rows[i].shape], rows[i].ms, speedup, 100 * eff,
                   gated ? (eff >= EFFICIENCY_TARGET ? " (>= 90%)" : " (BELOW 90%)") : "");
        }
    }
    printf("\nsp_gpu_bench: %d parity failure(s), %d efficiency(ies) below %.0f%% at S >= %d\n", failures, below,
           100 * EFFICIENCY_TARGET, LONG_SEQ);
    return failures ? 1 : below ? 3 : 0;
}
