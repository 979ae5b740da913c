/* The cuda backward with masks and grouped-query heads, device-resident: for each case, the backward
 * (jattn_plan_backward on device pointers, a caller workspace, the mask's arrays on the device) timed with
 * CUDA events after two warm-up calls, the median of `reps`; the same shape unmasked beside it is a case of
 * its own ("none"). out and lse come from a masked forward (cuda, else cpu: the first that serves the mask;
 * else a stand-in of the right sizes, standin_forward below: the line names which); q, k, v and dout standard
 * normal, fresh per case (seed printed). The kernel the plan names is printed; JATTN_CUDA_BWD_KERNEL forces a
 * version as everywhere.
 *
 * usage: masks_backward_bench [--reps N] CASE...
 *   CASE = B,H,Hkv,S,D[,Skv]:PARTS   PARTS joined by '+': none, causal (top-left), causal-br (bottom-right),
 *          blocks=N (N equal blocks of the queries and of the keys), segments=N (N equal packed sequences),
 *          bias (one row per batch, standard normal, about 1 key in 8 -inf), kvlen (batch b attends its first
 *          Skv - b * Skv / 8 keys); Hkv < H: grouped-query heads
 * prints per case: RESULT jattn <case> <ms> <TFLOP/s> <attended fraction> <kernel> <forward> reps=N
 *   (FLOPs 10 D per attended (query, key) pair per query head: the backward's five products)
 * built with the benchmarks (bench/CMakeLists.txt); run by bench/gpu/masks_backward_run.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "clock.h"
#include "jattn.h"
#include "rng.h"
#include "tensor.h"

#define CHECK(call)                                                                             \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

enum { MAX_PARTS = 64 };

typedef struct bench_case {
    int64_t B, H, Hkv, Sq, Skv, D;
    jattn_causal causal;
    int blocks, segments, bias, kvlen;
} bench_case;

static int parse_case(const char *arg, bench_case *c) {
    memset(c, 0, sizeof *c);
    long long v[6] = {0};
    const char *colon = strchr(arg, ':');
    const int got = sscanf(arg, "%lld,%lld,%lld,%lld,%lld,%lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]);
    if (got < 5 || !colon) return -1;
    c->B = v[0], c->H = v[1], c->Hkv = v[2], c->Sq = v[3], c->D = v[4], c->Skv = got == 6 ? v[5] : v[3];
    if (c->B < 1 || c->H < 1 || c->Hkv < 1 || c->H % c->Hkv || c->Sq < 1 || c->Skv < 1 || c->D < 1) return -1;
    char parts[256];
    snprintf(parts, sizeof parts, "%s", colon + 1);
    for (char *tok = strtok(parts, "+"); tok; tok = strtok(NULL, "+")) {
        if (!strcmp(tok, "none")) continue;
        if (!strcmp(tok, "causal"))
            c->causal = JATTN_CAUSAL_TOP_LEFT;
        else if (!strcmp(tok, "causal-br"))
            c->causal = JATTN_CAUSAL_BOTTOM_RIGHT;
        else if (!strncmp(tok, "blocks=", 7))
            c->blocks = atoi(tok + 7);
        else if (!strncmp(tok, "segments=", 9))
            c->segments = atoi(tok + 9);
        else if (!strcmp(tok, "bias"))
            c->bias = 1;
        else if (!strcmp(tok, "kvlen"))
            c->kvlen = 1;
        else
            return -1;
    }
    if (c->blocks < 0 || c->blocks > MAX_PARTS || c->segments < 0 || c->segments > MAX_PARTS) return -1;
    return 0;
}

/* The mask's host arrays, and the same on the device. */
typedef struct mask_arrays {
    int64_t block_q[MAX_PARTS + 1], block_kv[MAX_PARTS + 1], seg_q[MAX_PARTS + 1], seg_kv[MAX_PARTS + 1];
    int64_t *kv_len;
    float *bias;
    jattn_mask host, dev;
    void *d[6];
} mask_arrays;

static void equal_cuts(int64_t *o, int n, int64_t total) {
    for (int a = 0; a <= n; a++) o[a] = a * (total / n) + a * (total % n) / n;
}

static void *to_device(const void *h, size_t bytes) {
    void *d = NULL;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void mask_make(const bench_case *c, uint64_t seed, mask_arrays *ma) {
    memset(ma, 0, sizeof *ma);
    jattn_mask *m = &ma->host;
    m->causal = c->causal;
    if (c->blocks) {
        equal_cuts(ma->block_q, c->blocks, c->Sq);
        equal_cuts(ma->block_kv, c->blocks, c->Skv);
        m->block_q = ma->block_q, m->block_kv = ma->block_kv, m->num_blocks = c->blocks;
    }
    if (c->segments) {
        equal_cuts(ma->seg_q, c->segments, c->Sq);
        equal_cuts(ma->seg_kv, c->segments, c->Skv);
        m->cu_seqlens_q = ma->seg_q, m->cu_seqlens_kv = ma->seg_kv, m->num_segments = c->segments;
    }
    if (c->bias) {
        ma->bias = malloc((size_t)(c->B * c->Skv) * sizeof(float));
        if (!ma->bias) exit(1);
        jattn_rng_fill_normal(ma->bias, c->B * c->Skv, seed, 11);
        for (int64_t j = 0; j < c->B * c->Skv; j++)
            if ((j * 2654435761u) % 8 == 3) ma->bias[j] = -INFINITY;
        m->key_bias = ma->bias, m->key_bias_batch_stride = c->Skv;
    }
    if (c->kvlen) {
        ma->kv_len = malloc((size_t)c->B * sizeof(int64_t));
        if (!ma->kv_len) exit(1);
        for (int64_t b = 0; b < c->B; b++) ma->kv_len[b] = c->Skv - b * c->Skv / 8;
        m->padding.kv_len = ma->kv_len;
    }
    ma->dev = *m;
    const size_t blocks = (size_t)(c->blocks + 1) * sizeof(int64_t), segs = (size_t)(c->segments + 1) * sizeof(int64_t);
    if (m->block_q) ma->dev.block_q = ma->d[0] = to_device(ma->block_q, blocks);
    if (m->block_kv) ma->dev.block_kv = ma->d[1] = to_device(ma->block_kv, blocks);
    if (m->cu_seqlens_q) ma->dev.cu_seqlens_q = ma->d[2] = to_device(ma->seg_q, segs);
    if (m->cu_seqlens_kv) ma->dev.cu_seqlens_kv = ma->d[3] = to_device(ma->seg_kv, segs);
    if (m->key_bias) ma->dev.key_bias = ma->d[4] = to_device(ma->bias, (size_t)(c->B * c->Skv) * sizeof(float));
    if (m->padding.kv_len) ma->dev.padding.kv_len = ma->d[5] = to_device(ma->kv_len, (size_t)c->B * sizeof(int64_t));
}

/* Where no backend serves the masked forward (a tree whose forwards do not serve the mask yet): out 0 and
 * lse_i = log(n_i) + 1/2, n_i the keys row i attends, the log-sum-exp of n_i standard normal logits (q and k
 * standard normal, scale 1/sqrt(D)): weights of the sizes the real ones have, for the timing only. */
static void standin_forward(const bench_case *c, const mask_arrays *ma, float *out, float *lse) {
    memset(out, 0, (size_t)(c->B * c->H * c->Sq * c->D) * sizeof(float));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t i = 0; i < c->Sq; i++) {
            int64_t lo = 0, hi = c->Skv, base_q = 0, base_k = 0, len_q = c->Sq, len_k = c->Skv;
            if (c->segments) {
                int s = 0;
                while (s + 1 < c->segments && ma->seg_q[s + 1] <= i) s++;
                base_q = ma->seg_q[s], len_q = ma->seg_q[s + 1] - base_q;
                base_k = ma->seg_kv[s], len_k = ma->seg_kv[s + 1] - base_k;
                lo = base_k, hi = base_k + len_k;
            }
            if (c->causal) {
                const int64_t last =
                    base_k + (i - base_q) + (c->causal == JATTN_CAUSAL_BOTTOM_RIGHT ? len_k - len_q : 0);
                if (last + 1 < hi) hi = last + 1;
            }
            if (c->blocks) {
                int a = 0;
                while (a + 1 < c->blocks && ma->block_q[a + 1] <= i) a++;
                if (ma->block_kv[a + 1] < hi) hi = ma->block_kv[a + 1];
            }
            if (ma->kv_len && ma->kv_len[b] < hi) hi = ma->kv_len[b];
            int64_t n = 0;
            for (int64_t j = lo; j < hi; j++) n += !(ma->bias && ma->bias[b * c->Skv + j] == -INFINITY);
            for (int64_t h = 0; h < c->H; h++)
                lse[(b * c->H + h) * c->Sq + i] = n > 0 ? (float)(log((double)n) + 0.5) : -INFINITY;
        }
}

static void mask_free(mask_arrays *ma) {
    for (int i = 0; i < 6; i++) (void)cudaFree(ma->d[i]);
    free(ma->kv_len), free(ma->bias);
}

int main(int argc, char **argv) {
    int reps = 20, first = 1;
    if (argc > 2 && !strcmp(argv[1], "--reps")) reps = atoi(argv[2]), first = 3;
    if (first >= argc || reps < 1) {
        fprintf(stderr, "usage: %s [--reps N] B,H,Hkv,S,D[,Skv]:PARTS ...\n", argv[0]);
        return 2;
    }
    const uint64_t seed = (uint64_t)time(NULL) * 2654435761u | 1;
    printf("seed %llu\n", (unsigned long long)seed);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int status = 0;
    for (int ci = first; ci < argc; ci++) {
        bench_case c;
        if (parse_case(argv[ci], &c)) {
            fprintf(stderr, "cannot read the case %s\n", argv[ci]);
            return 2;
        }
        jattn_problem p = jattn_problem_flux(c.B, c.H, c.Sq, c.Skv, c.D);
        p.kv_heads = c.Hkv;
        p.k = p.v = jattn_strides_head_major(c.Hkv, c.Skv, c.D);
        mask_arrays ma;
        mask_make(&c, seed + (uint64_t)ci, &ma);
        const int masked = c.causal || c.blocks || c.segments || c.bias || c.kvlen;
        const jattn_mask *hm = masked ? &ma.host : NULL, *dm = masked ? &ma.dev : NULL;
        const int64_t nq = c.B * c.H * c.Sq * c.D, nk = c.B * c.Hkv * c.Skv * c.D, nl = c.B * c.H * c.Sq;
        float *h[6]; /* q k v dout out lse */
        const int64_t n[6] = {nq, nk, nk, nq, nq, nl};
        for (int i = 0; i < 6; i++)
            if (!(h[i] = malloc((size_t)n[i] * sizeof(float)))) return 1;
        for (int i = 0; i < 4; i++) jattn_rng_fill_normal(h[i], n[i], seed + (uint64_t)ci, (uint64_t)i);
        /* out and lse: the first backend that serves the masked forward, else the stand-in */
        static const jattn_backend fwd[2] = {JATTN_BACKEND_CUDA, JATTN_BACKEND_CPU};
        const char *fwd_name = NULL;
        for (int f = 0; f < 2 && !fwd_name; f++) {
            jattn_exec e = {0};
            e.backend = fwd[f];
            if (jattn_forward_masked(NULL, &p, &e, h[0], h[1], h[2], hm, h[4], h[5]) == JATTN_OK)
                fwd_name = jattn_backend_name(fwd[f]);
        }
        if (!fwd_name) {
            standin_forward(&c, &ma, h[4], h[5]);
            fwd_name = "standin";
        }
        float *d[6], *g[3];
        for (int i = 0; i < 6; i++) d[i] = to_device(h[i], (size_t)n[i] * sizeof(float));
        for (int t = 0; t < 3; t++) CHECK(cudaMalloc((void **)&g[t], (size_t)(t ? nk : nq) * sizeof(float)));
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CUDA;
        e.memory = JATTN_MEMORY_DEVICE;
        jattn_plan *plan = NULL;
        jattn_status st = jattn_plan_create(&plan, JATTN_PASS_BACKWARD, &p, NULL, hm, &e);
        if (st != JATTN_OK) {
            printf("FAIL %s: %s: %s\n", argv[ci], jattn_status_name(st), jattn_last_error());
            status = 1;
        } else {
            jattn_selection sel;
            jattn_plan_selection(plan, &sel);
            const size_t bytes = jattn_plan_workspace_size(plan);
            void *ws = NULL;
            if (bytes) CHECK(cudaMalloc(&ws, bytes));
            cudaEvent_t *ev = malloc(sizeof *ev * 2 * (size_t)reps);
            double *ms = malloc(sizeof *ms * (size_t)reps);
            if (!ev || !ms) return 1;
            for (int i = 0; i < 2 * reps; i++) CHECK(cudaEventCreate(&ev[i]));
            for (int i = 0; i < 2 + reps && st == JATTN_OK; i++) {
                if (i >= 2) CHECK(cudaEventRecord(ev[2 * (i - 2)], s));
                st = jattn_plan_backward(plan, NULL, s, ws, bytes, d[0], d[1], d[2], d[4], d[5], d[3], NULL, dm, g[0],
                                         g[1], g[2]);
                if (i >= 2) CHECK(cudaEventRecord(ev[2 * (i - 2) + 1], s));
            }
            CHECK(cudaStreamSynchronize(s));
            if (st != JATTN_OK) {
                printf("FAIL %s: %s: %s\n", argv[ci], jattn_status_name(st), jattn_last_error());
                status = 1;
            } else {
                for (int i = 0; i < reps; i++) {
                    float t = 0;
                    CHECK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
                    ms[i] = t;
                }
                const double med = kit_median(ms, reps);
                const double pairs = kit_attended_pairs(&p, hm), flops = 10.0 * (double)c.D * pairs;
                printf("RESULT jattn %s %.4f %.2f %.4f %s %s reps=%d\n", argv[ci], med, flops / (med * 1e-3) / 1e12,
                       pairs / ((double)c.B * c.H * c.Sq * c.Skv), sel.kernel, fwd_name, reps);
            }
            fflush(stdout);
            for (int i = 0; i < 2 * reps; i++) cudaEventDestroy(ev[i]);
            free(ev), free(ms);
            (void)cudaFree(ws);
        }
        jattn_plan_free(plan);
        for (int i = 0; i < 6; i++) (void)cudaFree(d[i]), free(h[i]);
        for (int t = 0; t < 3; t++) (void)cudaFree(g[t]);
        mask_free(&ma);
    }
    CHECK(cudaStreamDestroy(s));
    return status;
}
