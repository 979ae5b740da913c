#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "jattn.h"
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
int main(int argc, char **argv) {
    int B = 1, H = 2, S = 16, D = 32;
    if (argc > 4) {
        B = atoi(argv[1]);
        H = atoi(argv[2]);
        S = atoi(argv[3]);
        D = atoi(argv[4]);
    }
    jattn_problem p = jattn_problem_flux(B, H, S, S, D);
    p.q = p.k = p.v = p.out = jattn_strides_head_major(H, S, D);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CPU;
    e.threads = 1;
    jattn_plan *plan;
    if (jattn_plan_create(&plan, JATTN_PASS_FORWARD, &p, NULL, NULL, &e)) {
        printf("plan: %s\n", jattn_last_error());
        return 1;
    }
    jattn_ctx *ctx;
    jattn_ctx_create(&ctx);
    size_t n = (size_t)B * H * S * D;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4),
          *l = malloc((size_t)B * H * S * 4);
    for (size_t i = 0; i < n; i++) {
        q[i] = (float)(i % 7) * 0.1f;
        k[i] = (float)(i % 5) * 0.1f;
        v[i] = (float)(i % 3);
    }
    double best = 1e9;
    for (int r = 0; r < 9; r++) {
        int N = 20000;
        double t = now();
        for (int i = 0; i < N; i++) jattn_plan_forward(plan, ctx, NULL, NULL, 0, q, k, v, NULL, o, NULL);
        t = (now() - t) / N * 1e6;
        if (t < best) best = t;
    }
    printf("plan_forward (%d,%d,%d,%d) 1 thread: %.3f us\n", B, H, S, D, best);
    best = 1e9;
    for (int r = 0; r < 9; r++) {
        int N = 20000;
        double t = now();
        for (int i = 0; i < N; i++) jattn_plan_forward(plan, ctx, NULL, NULL, 0, q, k, v, NULL, o, l);
        t = (now() - t) / N * 1e6;
        if (t < best) best = t;
    }
    printf("plan_forward with lse: %.3f us\n", best);
    return 0;
}
