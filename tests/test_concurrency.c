/* Concurrency and determinism.
 *
 * 1. Eight threads call jattn_forward at the same moment, each on its own problem (shapes,
 *    layouts, input distributions and thread counts differ; the backends present are dealt
 *    out round-robin; half the threads use a private context, half none), several rounds
 *    each. Every result must be bitwise the result of the same call made serially before the
 *    threads start, and the serial results must pass the f32 gate against the reference.
 *    Each thread also makes a failing call naming its own field between its good calls: the
 *    message jattn_last_error() gives back must be that thread's, and a good call clears it.
 * 2. On the CPU backends (jattn_backend_info.is_gpu 0), outputs and lse are bitwise identical
 *    across repeated runs and across thread counts 1, 2, 3, 4, 8 and "all cores"; on every
 *    backend present, across repeated runs.
 *
 * Meant to run under ThreadSanitizer too (make test does so in build-tsan). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { N_THREADS = 8, ROUNDS = 3 };

typedef struct shape {
    int64_t B, H, Sq, Skv, D;
    int token_major_inputs;
} shape;

static const shape shapes[N_THREADS] = {
    {1, 2, 33, 33, 64, 0}, {1, 3, 65, 17, 32, 1}, {2, 2, 40, 40, 128, 0}, {1, 1, 129, 257, 64, 1},
    {1, 4, 7, 100, 16, 0}, {2, 1, 64, 64, 80, 1}, {1, 2, 100, 50, 96, 0}, {1, 2, 1, 300, 64, 0},
};

typedef struct job {
    shape s;
    jattn_backend backend;
    int threads;
    int use_ctx;
    jt_case c;
    int64_t n_out, n_lse;
    float *serial, *serial_lse; /* the serial result */
    int failures;
    char why[200];
} job;

static job jobs[N_THREADS];

static pthread_barrier_t start_line;

static const char *const bad_fields[] = {"batch", "heads", "seq_q", "seq_kv", "head_dim"};

static int64_t out_span(const jattn_problem *p) { return kit_tensor_span(p, p->out, p->seq_q); }

static jattn_exec exec_of(const job *j) {
    jattn_exec e = {0};
    e.backend = j->backend;
    e.threads = j->threads;
    return e;
}

static void fail(job *j, const char *what) {
    if (!j->failures++) snprintf(j->why, sizeof j->why, "%s", what);
}

static void *worker(void *arg) {
    job *j = arg;
    const jattn_exec e = exec_of(j);
    const int t = (int)(j - jobs);
    jattn_ctx *ctx = NULL;
    if (j->use_ctx && jattn_ctx_create(&ctx) != JATTN_OK) fail(j, "jattn_ctx_create failed");
    float *out = calloc((size_t)j->n_out, sizeof(float)), *lse = calloc((size_t)j->n_lse, sizeof(float));
    if (!out || !lse) fail(j, "allocation");
    pthread_barrier_wait(&start_line);
    for (int r = 0; r < ROUNDS && out && lse; r++) {
        /* A failing call naming this thread's field. */
        jattn_problem bad = j->c.p;
        int64_t *dims[] = {&bad.batch, &bad.heads, &bad.seq_q, &bad.seq_kv, &bad.head_dim};
        *dims[t % 5] = -1; /* invalid for every dimension */
        if (jattn_forward(ctx, &bad, &e, j->c.q, j->c.k, j->c.v, out, lse) != JATTN_ERROR_INVALID_DIMENSION ||
            strncmp(jattn_last_error(), bad_fields[t % 5], strlen(bad_fields[t % 5])) != 0 ||
            jattn_last_error()[strlen(bad_fields[t % 5])] != ':')
            fail(j, "the error message is not this thread's");
        memset(out, 0, (size_t)j->n_out * sizeof(float));
        memset(lse, 0, (size_t)j->n_lse * sizeof(float));
        jattn_status st = jattn_forward(ctx, &j->c.p, &e, j->c.q, j->c.k, j->c.v, out, lse);
        if (st != JATTN_OK) {
            fail(j, jattn_status_name(st));
            continue;
        }
        if (jattn_last_error()[0] != '\0') fail(j, "a successful call left an error message");
        if (memcmp(out, j->serial, (size_t)j->n_out * sizeof(float)) != 0)
            fail(j, "out differs bitwise from the serial result");
        if (memcmp(lse, j->serial_lse, (size_t)j->n_lse * sizeof(float)) != 0)
            fail(j, "lse differs bitwise from the serial result");
    }
    free(out);
    free(lse);
    jattn_ctx_free(ctx);
    return NULL;
}

static int setup_job(job *j, jattn_backend backend, int index, jt_rng *rng, jt_tally *tally) {
    j->s = shapes[index];
    j->backend = backend;
    j->threads = index % 3; /* 0 = all cores, 1, 2 */
    j->use_ctx = index % 2;
    jattn_problem p = jattn_problem_flux(j->s.B, j->s.H, j->s.Sq, j->s.Skv, j->s.D);
    if (j->s.token_major_inputs) {
        p.q = jattn_strides_token_major(j->s.H, j->s.Sq, j->s.D);
        p.k = jattn_strides_token_major(j->s.H, j->s.Skv, j->s.D);
        p.v = jattn_strides_token_major(j->s.H, j->s.Skv, j->s.D);
    }
    if (jt_case_init(&j->c, &p) != 0) return 0;
    jt_case_fill(&j->c, (jt_dist)(index % JT_DIST_COUNT), rng);
    size_t len = strlen(j->c.label);
    snprintf(j->c.label + len, sizeof j->c.label - len, " threads=%d ctx=%d", j->threads, j->use_ctx);
    if (jt_case_reference(&j->c) != JATTN_OK) return 0;
    jattn_exec e = exec_of(j);
    jt_tally_add(tally, jt_case_check(&j->c, &e, 1)); /* the serial result is right */
    j->n_out = out_span(&j->c.p);
    j->n_lse = j->s.B * j->s.H * j->s.Sq;
    j->serial = calloc((size_t)j->n_out, sizeof(float));
    j->serial_lse = calloc((size_t)j->n_lse, sizeof(float));
    if (!j->serial || !j->serial_lse) return 0;
    return jattn_forward(NULL, &j->c.p, &e, j->c.q, j->c.k, j->c.v, j->serial, j->serial_lse) == JATTN_OK;
}

/* Bitwise equality of out and lse across thread counts (CPU backends) and repeated runs. */
static void determinism(jattn_backend backend, jt_rng *rng, jt_tally *tally) {
    jattn_backend_info info;
    const int cpu_side = jt_backend_info(backend, &info) && !info.is_gpu;
    jattn_problem p = jattn_problem_flux(2, 3, 200, 333, 64);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        jt_tally_add(tally, 0);
        return;
    }
    jt_case_fill(&c, JT_PEAKY, rng);
    const int64_t n_out = out_span(&p), n_lse = 2 * 3 * 200;
    float *base = calloc((size_t)n_out, sizeof(float)), *base_lse = calloc((size_t)n_lse, sizeof(float));
    float *out = calloc((size_t)n_out, sizeof(float)), *lse = calloc((size_t)n_lse, sizeof(float));
    const int counts[] = {1, 2, 3, 4, 8, 0, 1, 2};
    const int n_runs = cpu_side ? (int)(sizeof counts / sizeof counts[0]) : 4;
    int ok = base && base_lse && out && lse;
    for (int r = 0; ok && r <= n_runs; r++) {
        jattn_exec e = {0};
        e.backend = backend;
        e.threads = cpu_side && r > 0 ? counts[r - 1] : cpu_side ? 1 : 0;
        float *o = r == 0 ? base : out, *l = r == 0 ? base_lse : lse;
        if (jattn_forward(NULL, &p, &e, c.q, c.k, c.v, o, l) != JATTN_OK) {
            printf("FAIL determinism %s: %s\n", jattn_backend_name(backend), jattn_last_error());
            ok = 0;
        } else if (r > 0 && (memcmp(o, base, (size_t)n_out * sizeof(float)) != 0 ||
                             memcmp(l, base_lse, (size_t)n_lse * sizeof(float)) != 0)) {
            printf("FAIL determinism %s: run %d (threads %d) differs bitwise from the first (threads %d) (seed %llu)\n",
                   jattn_backend_name(backend), r, e.threads, cpu_side ? 1 : 0, (unsigned long long)jt_seed());
            ok = 0;
        }
    }
    jt_tally_add(tally, ok);
    free(base);
    free(base_lse);
    free(out);
    free(lse);
    jt_case_free(&c);
}

int main(void) {
    jattn_backend present[JATTN_BACKEND_COUNT];
    int n_present = 0;
    for (int r = 0; r < jattn_backend_info_count() && n_present < JATTN_BACKEND_COUNT; r++) {
        jattn_backend_info info;
        if (jattn_backend_info_at(r, &info) == JATTN_OK && jt_backend_present(info.backend))
            present[n_present++] = info.backend;
    }
    jt_rng rng;
    jt_rng_init(&rng, jt_seed());
    jt_tally tally = {0};

    for (int i = 0; i < N_THREADS; i++)
        if (!setup_job(&jobs[i], present[i % n_present], i, &rng, &tally)) {
            printf("FAIL setting up job %d: %s\n", i, jattn_last_error());
            return 1;
        }
    pthread_barrier_init(&start_line, NULL, N_THREADS);
    pthread_t tid[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        if (pthread_create(&tid[i], NULL, worker, &jobs[i]) != 0) {
            printf("FAIL pthread_create\n");
            return 1;
        }
    for (int i = 0; i < N_THREADS; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&start_line);
    for (int i = 0; i < N_THREADS; i++) {
        job *j = &jobs[i];
        if (j->failures)
            printf("FAIL concurrent %s backend=%s: %d failures, first: %s (seed %llu)\n", j->c.label,
                   jattn_backend_name(j->backend), j->failures, j->why, (unsigned long long)jt_seed());
        jt_tally_add(&tally, j->failures == 0);
        free(j->serial);
        free(j->serial_lse);
        jt_case_free(&j->c);
    }
    for (int i = 0; i < n_present; i++) determinism(present[i], &rng, &tally);
    return jt_tally_finish(&tally, "test_concurrency");
}
