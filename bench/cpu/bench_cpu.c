/* Side-by-side CPU benchmark: the FMA peak, jattn --backend cpu and the BLAS attention
 * baseline, in one run, on the FLUX layout (q, k, v head-major [H, S, D], out token-major).
 *
 * usage: bench_cpu H D REPS THREADS[,THREADS...] SEQ[,SEQ...]
 * prints one JSON line per measurement: {"method", "isa", "heads", "seq", "dim", "threads",
 * "ms" (median of REPS after a warm-up), "gflops" (4*H*S*S*D / time); jattn also "best_gflops"
 * (fastest repeat, for a machine shared with other work)}; a peer that cannot be
 * measured prints {"method", "skipped": "why"}. With BENCH_PEERS=0 in the environment only
 * jattn runs (no peak, no BLAS: for the peak-memory measurement of bench/cpu/peak_memory.sh).
 * q and k are standard normal (logits of standard deviation 1 at the default scale 1/sqrt(D));
 * BENCH_LOGIT_STD=s multiplies both by sqrt(s), for logits of standard deviation s (8: the
 * "peaky" attention of trained DiTs, which runs jattn's compensated scores kernel; see
 * src/cpu/NOTES.md §3). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jattn.h"
#include "peers.h"
#include "rng.h"
#include "timing.h"

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        out[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return n;
}

static jattn_rng rng; /* seeded in main: the same inputs on every run */
static float normal(void) { return (float)jattn_rng_normal(&rng); }

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s H D REPS THREADS[,..] SEQ[,..]\n", argv[0]);
        return 2;
    }
    const int H = atoi(argv[1]), D = atoi(argv[2]), reps = atoi(argv[3]);
    jattn_rng_seed(&rng, 1);
    int threads[16], seqs[32];
    const int nt = parse_list(argv[4], threads, 16), ns = parse_list(argv[5], seqs, 32);
    if (H < 1 || D < 1 || reps < 1 || nt < 1 || ns < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    char err[256];
    const char *std_env = getenv("BENCH_LOGIT_STD");
    const double logit_std = std_env ? atof(std_env) : 1.0;
    if (!(logit_std > 0)) {
        fprintf(stderr, "BENCH_LOGIT_STD: %s, want a positive number\n", std_env);
        return 2;
    }
    const double qk_amp = sqrt(logit_std);
    const char *peers_env = getenv("BENCH_PEERS");
    const int peers = !(peers_env && strcmp(peers_env, "0") == 0);
    for (int ti = 0; peers && ti < nt; ti++) {
        double gf;
        const char *isa;
        if (jattn_peer_fma_peak(threads[ti], &gf, &isa, err, sizeof err) == 0)
            printf("{\"method\": \"fma_peak\", \"isa\": \"%s\", \"threads\": %d, \"gflops\": %.2f}\n", isa, threads[ti],
                   gf);
        else
            printf("{\"method\": \"fma_peak\", \"threads\": %d, \"skipped\": \"%s\"}\n", threads[ti], err);
        fflush(stdout);
    }
    for (int si = 0; si < ns; si++) {
        const int S = seqs[si];
        const size_t n = (size_t)H * S * D;
        float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4);
        if (!q || !k || !v || !o) {
            fprintf(stderr, "allocation failed at seq %d\n", S);
            return 1;
        }
        for (size_t i = 0; i < n; i++)
            q[i] = (float)(qk_amp * normal()), k[i] = (float)(qk_amp * normal()), v[i] = normal();
        const double flops = 4.0 * H * (double)S * S * D;
        jattn_problem p = jattn_problem_flux(1, H, S, S, D);
        for (int ti = 0; ti < nt; ti++) {
            jattn_exec e = {0};
            e.backend = JATTN_BACKEND_CPU;
            e.threads = threads[ti];
            jattn_selection sel;
            jattn_ctx *ctx = NULL;
            if (jattn_select(&p, &e, &sel) != JATTN_OK || jattn_ctx_create(&ctx) != JATTN_OK) {
                printf("{\"method\": \"jattn_cpu\", \"seq\": %d, \"skipped\": \"%s\"}\n", S, jattn_last_error());
            } else {
                kit_timing t; /* one warm-up call, then the median (and the fastest) of reps */
                jattn_status st = kit_time_forward(ctx, &p, &e, NULL, q, k, v, o, NULL, reps, 0, reps, reps, &t);
                if (st != JATTN_OK) {
                    printf("{\"method\": \"jattn_cpu\", \"seq\": %d, \"skipped\": \"%s\"}\n", S, jattn_last_error());
                } else {
                    printf(
                        "{\"method\": \"jattn_cpu\", \"isa\": \"%s\", \"kernel\": \"%s\", \"heads\": %d, \"seq\": %d, "
                        "\"dim\": %d, \"threads\": %d, \"ms\": %.3f, \"gflops\": %.2f, \"best_gflops\": %.2f}\n",
                        sel.isa, sel.kernel, H, S, D, sel.threads, t.ms, flops / (t.ms * 1e-3) / 1e9,
                        flops / (t.ms_min * 1e-3) / 1e9);
                }
            }
            jattn_ctx_free(ctx);
            fflush(stdout);
            double ms;
            if (!peers) continue;
            if (jattn_peer_blas_attention(H, S, D, threads[ti], reps, q, k, v, o, &ms, err, sizeof err) == 0)
                printf("{\"method\": \"blas_attention\", \"heads\": %d, \"seq\": %d, \"dim\": %d, \"threads\": %d, "
                       "\"ms\": %.3f, \"gflops\": %.2f}\n",
                       H, S, D, threads[ti], ms, flops / (ms * 1e-3) / 1e9);
            else
                printf("{\"method\": \"blas_attention\", \"seq\": %d, \"threads\": %d, \"skipped\": \"%s\"}\n", S,
                       threads[ti], err);
            fflush(stdout);
        }
        free(q), free(k), free(v), free(o);
    }
    return 0;
}
