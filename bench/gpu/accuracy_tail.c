/* The tail of a backend's error on one problem shape and input distribution: N fresh draws
 * (each with new inputs from the tests' harness), each run through jattn_forward (host arrays,
 * the default kernel choice and its environment knobs) and compared with the float64
 * reference. A single parity run meets a rare case once in a while; this measures how often.
 *
 * usage: accuracy_tail BACKEND B H Sq Skv D DIST N [f32|tf32]
 *        BACKEND cpu|cuda, DIST uniform|normal|peaky|large
 * prints: TAIL <label> n=N rel_l2 p50 p90 p99 max  worst_max_abs/gate  fails=K
 * (the gate of docs/DESIGN.md §2, jattn_metrics_pass of kit/metrics.h). Exit status 0, or 1
 * when a call fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "harness.h"
#include "metrics.h"

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: accuracy_tail cpu|cuda B H Sq Skv D uniform|normal|peaky|large N [f32|tf32]\n");
        return 2;
    }
    jattn_backend backend = strcmp(argv[1], "cuda") == 0 ? JATTN_BACKEND_CUDA : JATTN_BACKEND_CPU;
    const int64_t B = atoll(argv[2]), H = atoll(argv[3]), Sq = atoll(argv[4]), Skv = atoll(argv[5]), D = atoll(argv[6]);
    jt_dist dist = JT_DIST_COUNT;
    for (int d = 0; d < JT_DIST_COUNT; d++)
        if (strcmp(argv[7], jt_dist_name((jt_dist)d)) == 0) dist = (jt_dist)d;
    const int n = atoi(argv[8]);
    const jattn_precision prec = argc > 9 && strcmp(argv[9], "tf32") == 0 ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
    if (dist == JT_DIST_COUNT || n < 1 || B < 1 || H < 1 || Sq < 1 || Skv < 1 || D < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    if (!jt_backend_present(backend)) {
        printf("SKIP: backend %s not present\n", argv[1]);
        return 0;
    }
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) return 1;
    jt_rng rng;
    jt_rng_init(&rng, jt_seed());
    double *rel = malloc(sizeof *rel * (size_t)n);
    double worst_abs = 0;
    int fails = 0;
    jattn_exec e = {0};
    e.backend = backend;
    e.precision = prec;
    for (int i = 0; i < n; i++) {
        jt_case_fill(&c, dist, &rng);
        if (jt_case_reference(&c) != JATTN_OK ||
            jattn_forward(NULL, &c.p, &e, c.q, c.k, c.v, c.out, NULL) != JATTN_OK) {
            fprintf(stderr, "call failed: %s\n", jattn_last_error());
            return 1;
        }
        jattn_metrics m;
        jattn_metrics_compute(&c.p, c.out, c.ref, &m);
        rel[i] = m.rel_l2;
        const double abs_gate = JATTN_GATE_F32_MAX_ABS * (m.max_ref > 1.0 ? m.max_ref : 1.0);
        if (m.max_abs / abs_gate > worst_abs) worst_abs = m.max_abs / abs_gate;
        fails += !jattn_metrics_pass(&m, prec);
    }
    kit_sort(rel, n);
    printf("TAIL %s B=%lld H=%lld Sq=%lld Skv=%lld D=%lld %s %s n=%d rel_l2 p50 %.3g p90 %.3g p99 %.3g max %.3g"
           "  worst max_abs/gate %.2f  fails=%d (seed %llu)\n",
           argv[1], (long long)B, (long long)H, (long long)Sq, (long long)Skv, (long long)D, argv[7],
           prec == JATTN_PRECISION_TF32 ? "tf32" : "f32", n, rel[n / 2], rel[(int)(0.9 * (n - 1))],
           rel[(int)(0.99 * (n - 1))], rel[n - 1], worst_abs, fails, (unsigned long long)jt_seed());
    free(rel);
    jt_case_free(&c);
    return 0;
}
