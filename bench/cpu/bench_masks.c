/* Masks and grouped-query heads on the cpu backend, each beside the call it should match, timed
 * in one process, call by call in turn (interleaved, so that the load of a shared machine falls
 * on both alike), through the public API (plans, one context):
 *
 *   causal    the unmasked call against causal (top-left) at Sq = Skv: the time ratio (target
 *             <= 0.55: masked-out tiles are never loaded)
 *   gqa       H query heads with kv_heads = H (MHA) against kv_heads = H / 4 (GQA) and 1 (MQA):
 *             the same FLOPs, the time ratio (target ~1)
 *   segments  a padded batch of n sequences of L tokens (B = n) against the same tokens packed in
 *             one row with segments (B = 1, n segments of L): the same FLOPs (target ~1); and
 *             lengths L/2, L, 3L/2, L packed against the padded batch B = 4 at 3L/2 with key
 *             lengths (GFLOP/s of the useful FLOPs: the padded batch also computes its padded
 *             query rows)
 *   bias      the unmasked call against a per-batch key bias (no -inf), and one with 10 % -inf
 *
 * usage: bench_masks THREADS REPS H S D [PASS [CASE...]]
 *   PASS fwd (default), bwd or both; CASE causal, gqa, segments, bias (default all).
 * Prints one JSON line per variant: {"case", "variant", "pass", "B", "H", "Hkv", "Sq", "Skv",
 * "D", "threads", "ms" (median wall time of REPS), "cpu_ms" (median CPU time of the process: the
 * ratio a loaded machine distorts least on 1 thread), "gflop" (useful FLOPs: 4 D per attended
 * (query, key) pair, 2.5x that for the backward), "gflops" (gflop / median wall), "ratio" (wall,
 * against the case's first variant), "cpu_ratio"}. Inputs standard normal, FLUX layout (q, k, v
 * head-major, out token-major), a fixed seed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jattn.h"
#include "rng.h"

static double now(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float *normal_floats(jattn_rng *r, size_t n) {
    float *x = malloc(n * sizeof *x);
    if (x)
        for (size_t i = 0; i < n; i++) x[i] = (float)jattn_rng_normal(r);
    return x;
}

/* One variant: a problem, its mask, its buffers and its plan. */
typedef struct variant {
    const char *name;
    jattn_problem p;
    jattn_mask m;
    int64_t offsets[2][64], kv_len[64];
    float *bias;
    double pairs; /* attended (query, key) pairs */
    float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
    jattn_plan *plan;
    double wall[256], cpu[256];
} variant;

static int variant_setup(variant *x, int bwd, int threads, jattn_rng *r) {
    const jattn_problem *p = &x->p;
    const int64_t Hkv = p->kv_heads ? p->kv_heads : p->heads;
    const size_t nq = (size_t)(p->batch * p->heads * p->seq_q * p->head_dim);
    const size_t nk = (size_t)(p->batch * Hkv * p->seq_kv * p->head_dim);
    x->q = normal_floats(r, nq), x->k = normal_floats(r, nk), x->v = normal_floats(r, nk);
    x->out = calloc(nq, sizeof(float)), x->lse = calloc((size_t)(p->batch * p->heads * p->seq_q), sizeof(float));
    if (!x->q || !x->k || !x->v || !x->out || !x->lse) return -1;
    if (bwd) {
        x->dout = normal_floats(r, nq), x->dq = calloc(nq, sizeof(float));
        x->dk = calloc(nk, sizeof(float)), x->dv = calloc(nk, sizeof(float));
        if (!x->dout || !x->dq || !x->dk || !x->dv) return -1;
    }
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CPU;
    e.threads = threads;
    jattn_status st = jattn_plan_create(&x->plan, JATTN_PASS_FORWARD, p, NULL, &x->m, &e);
    if (st == JATTN_OK) st = jattn_plan_forward(x->plan, NULL, NULL, NULL, 0, x->q, x->k, x->v, &x->m, x->out, x->lse);
    if (st == JATTN_OK && bwd) {
        jattn_plan_free(x->plan);
        x->plan = NULL;
        st = jattn_plan_create(&x->plan, JATTN_PASS_BACKWARD, p, NULL, &x->m, &e);
    }
    if (st != JATTN_OK) {
        fprintf(stderr, "%s: %s: %s\n", x->name, jattn_status_name(st), jattn_last_error());
        return -1;
    }
    return 0;
}

static jattn_status variant_run(variant *x, jattn_ctx *ctx, int bwd) {
    if (bwd)
        return jattn_plan_backward(x->plan, ctx, NULL, NULL, 0, x->q, x->k, x->v, x->out, x->lse, x->dout, NULL, &x->m,
                                   x->dq, x->dk, x->dv);
    return jattn_plan_forward(x->plan, ctx, NULL, NULL, 0, x->q, x->k, x->v, &x->m, x->out, x->lse);
}

static void variant_free(variant *x) {
    jattn_plan_free(x->plan);
    free(x->q), free(x->k), free(x->v), free(x->out), free(x->lse), free(x->dout), free(x->dq), free(x->dk);
    free(x->dv), free(x->bias);
}

/* The variants of one case, timed in turn REPS times after a warm-up; one JSON line each. */
static int run_case(const char *name, variant *xs, int n, int bwd, int threads, int reps) {
    jattn_rng r;
    jattn_rng_seed(&r, 1);
    jattn_ctx *ctx = NULL;
    if (jattn_ctx_create(&ctx) != JATTN_OK) return -1;
    int ok = 1;
    for (int i = 0; i < n && ok; i++) ok = variant_setup(&xs[i], bwd, threads, &r) == 0;
    for (int rep = -1; rep < reps && ok; rep++)
        for (int i = 0; i < n && ok; i++) {
            const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
            ok = variant_run(&xs[i], ctx, bwd) == JATTN_OK;
            const double c1 = now(CLOCK_PROCESS_CPUTIME_ID), w1 = now(CLOCK_MONOTONIC);
            if (rep >= 0) xs[i].wall[rep] = w1 - w0, xs[i].cpu[rep] = c1 - c0;
        }
    double base_w = 0, base_c = 0;
    for (int i = 0; i < n && ok; i++) {
        qsort(xs[i].wall, (size_t)reps, sizeof(double), cmpd);
        qsort(xs[i].cpu, (size_t)reps, sizeof(double), cmpd);
        const double w = xs[i].wall[reps / 2], c = xs[i].cpu[reps / 2];
        if (i == 0) base_w = w, base_c = c;
        const jattn_problem *p = &xs[i].p;
        const double gflop = 4.0 * (double)p->head_dim * xs[i].pairs * (bwd ? 2.5 : 1.0) * 1e-9;
        printf("{\"case\": \"%s\", \"variant\": \"%s\", \"pass\": \"%s\", \"B\": %lld, \"H\": %lld, \"Hkv\": %lld, "
               "\"Sq\": %lld, \"Skv\": %lld, \"D\": %lld, \"threads\": %d, \"reps\": %d, \"ms\": %.3f, "
               "\"cpu_ms\": %.3f, \"gflop\": %.4f, \"gflops\": %.2f, \"ratio\": %.4f, \"cpu_ratio\": %.4f}\n",
               name, xs[i].name, bwd ? "bwd" : "fwd", (long long)p->batch, (long long)p->heads,
               (long long)(p->kv_heads ? p->kv_heads : p->heads), (long long)p->seq_q, (long long)p->seq_kv,
               (long long)p->head_dim, threads, reps, 1e3 * w, 1e3 * c, gflop, gflop / w, w / base_w, c / base_c);
        fflush(stdout);
    }
    for (int i = 0; i < n; i++) variant_free(&xs[i]);
    jattn_ctx_free(ctx);
    return ok ? 0 : -1;
}

static variant plain(const char *name, int64_t B, int64_t H, int64_t S, int64_t D) {
    variant x;
    memset(&x, 0, sizeof x);
    x.name = name;
    x.p = jattn_problem_flux(B, H, S, S, D);
    x.pairs = (double)(B * H) * (double)S * (double)S;
    return x;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s THREADS REPS H S D [fwd|bwd|both [causal|gqa|segments|bias ...]]\n", argv[0]);
        return 2;
    }
    const int threads = atoi(argv[1]), reps = atoi(argv[2]);
    const int64_t H = atoll(argv[3]), S = atoll(argv[4]), D = atoll(argv[5]);
    const char *pass = argc > 6 ? argv[6] : "fwd";
    if (threads < 1 || reps < 1 || reps > 256 || H < 4 || H % 4 || S < 8 || S % 8 || D < 1) {
        fprintf(stderr, "bad arguments (H a multiple of 4, S of 8, REPS <= 256)\n");
        return 2;
    }
    int failed = 0;
    for (int bwd = 0; bwd < 2; bwd++) {
        if ((bwd && !strcmp(pass, "fwd")) || (!bwd && !strcmp(pass, "bwd"))) continue;
        for (int ci = 0; ci < 4; ci++) {
            static const char *const cases[] = {"causal", "gqa", "segments", "bias"};
            int want = argc <= 7;
            for (int a = 7; a < argc; a++) want |= !strcmp(argv[a], cases[ci]);
            if (!want) continue;
            variant xs[3];
            int n = 0;
            if (ci == 0) {
                xs[n++] = plain("unmasked", 1, H, S, D);
                xs[n] = plain("causal", 1, H, S, D);
                xs[n].m.causal = JATTN_CAUSAL_TOP_LEFT;
                xs[n++].pairs = (double)H * (double)S * (double)(S + 1) / 2;
            } else if (ci == 1) {
                xs[n++] = plain("mha", 1, H, S, D);
                xs[n] = plain("gqa4", 1, H, S, D);
                xs[n++].p.kv_heads = H / 4;
                xs[n] = plain("mqa", 1, H, S, D);
                xs[n++].p.kv_heads = 1;
            } else if (ci == 2) { /* 4 sequences of L = S / 4 */
                const int64_t L = S / 4;
                xs[n++] = plain("padded-batch", 4, H, L, D);
                xs[n] = plain("segments", 1, H, S, D);
                for (int s = 0; s <= 4; s++) xs[n].offsets[0][s] = xs[n].offsets[1][s] = s * L;
                xs[n].pairs = (double)H * 4 * (double)L * (double)L;
                n++;
            } else {
                xs[n++] = plain("unmasked", 1, H, S, D);
                xs[n++] = plain("bias", 1, H, S, D);
                xs[n++] = plain("bias-10%-inf", 1, H, S, D);
            }
            for (int i = 0; i < n; i++) { /* arrays into the masks (after the copies above) */
                variant *x = &xs[i];
                if (x->offsets[0][4]) {
                    x->m.cu_seqlens_q = x->offsets[0], x->m.cu_seqlens_kv = x->offsets[1], x->m.num_segments = 4;
                }
                if (!strncmp(x->name, "bias", 4)) {
                    jattn_rng r;
                    jattn_rng_seed(&r, 2);
                    x->bias = malloc((size_t)S * sizeof(float));
                    int64_t left = 0;
                    for (int64_t j = 0; j < S; j++) {
                        const int out = strcmp(x->name, "bias") != 0 && jattn_rng_uniform(&r) < 0.1;
                        x->bias[j] = out ? -INFINITY : (float)jattn_rng_normal(&r);
                        left += !out;
                    }
                    x->m.key_bias = x->bias;
                    x->pairs = (double)H * (double)S * (double)left;
                }
            }
            failed |= run_case(cases[ci], xs, n, bwd, threads, reps) != 0;
            if (ci == 2) { /* lengths L/2, L, 3L/2, L: packed against the padded batch at 3L/2 */
                const int64_t L = S / 4, len[4] = {L / 2, L, 3 * L / 2, L};
                variant ys[2];
                ys[0] = plain("padded-batch-varlen", 4, H, 3 * L / 2, D);
                ys[1] = plain("segments-varlen", 1, H, S, D);
                double pairs = 0;
                for (int s = 0; s < 4; s++) {
                    ys[0].kv_len[s] = len[s];
                    ys[1].offsets[0][s + 1] = ys[1].offsets[1][s + 1] = ys[1].offsets[0][s] + len[s];
                    pairs += (double)H * (double)len[s] * (double)len[s];
                }
                ys[0].pairs = ys[1].pairs = pairs;
                ys[0].m.padding.kv_len = ys[0].kv_len;
                ys[1].m.cu_seqlens_q = ys[1].offsets[0], ys[1].m.cu_seqlens_kv = ys[1].offsets[1];
                ys[1].m.num_segments = 4;
                failed |= run_case("segments-varlen", ys, 2, bwd, threads, reps) != 0;
            }
        }
    }
    return failed;
}
