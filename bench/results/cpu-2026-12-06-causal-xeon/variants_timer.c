/* The interleaved timer of the out-write variants (README.md): each call picks the variant by an environment
 * variable that variants.patch reads. Built against a build of this commit with variants.patch applied:
 *   cc -O2 -Iinclude variants_timer.c -Lbuild -ljattn -Wl,-rpath,$PWD/build -o variants_timer
 *   ./variants_timer 1536 0 15 && ./variants_timer 1536 1 15     (S, causal, rounds; 1 thread, CPU time) */
#define _GNU_SOURCE
#include "jattn.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    double x = *(double *)a, y = *(double *)b;
    return x < y ? -1 : x > y;
}
int main(int argc, char **argv) {
    const char *vars[] = {"NONE", "JX_PF", "JX_NT", "JX_SKIP"};
    int nv = 4;
    long long H = 8, S = atoi(argv[1]), D = 128;
    int causal = atoi(argv[2]);
    int rounds = atoi(argv[3]);
    jattn_problem p = jattn_problem_flux(1, H, S, S, D);
    size_t n = H * S * D;
    float *q = aligned_alloc(64, n * 4), *k = aligned_alloc(64, n * 4), *v = aligned_alloc(64, n * 4),
          *o = aligned_alloc(64, n * 4);
    for (size_t i = 0; i < n; i++) {
        q[i] = (rand() / (float)RAND_MAX) - 0.5f;
        k[i] = (rand() / (float)RAND_MAX) - 0.5f;
        v[i] = (rand() / (float)RAND_MAX) - 0.5f;
    }
    jattn_exec ex = {0};
    ex.backend = JATTN_BACKEND_CPU;
    ex.threads = 1;
    jattn_mask m;
    memset(&m, 0, sizeof m);
    m.causal = JATTN_CAUSAL_TOP_LEFT;
    double t[4][64];
    for (int r = 0; r <= rounds; r++)
        for (int x = 0; x < nv; x++) {
            unsetenv("JX_PF");
            unsetenv("JX_NT");
            unsetenv("JX_SKIP");
            if (x) setenv(vars[x], "1", 1);
            double t0 = cpu();
            if (causal)
                jattn_forward_masked(NULL, &p, &ex, q, k, v, &m, o, NULL);
            else
                jattn_forward(NULL, &p, &ex, q, k, v, o, NULL);
            if (r) t[x][r - 1] = cpu() - t0;
        }
    double med[4];
    for (int x = 0; x < nv; x++) {
        qsort(t[x], rounds, sizeof(double), cmpd);
        med[x] = t[x][rounds / 2];
    }
    printf("S=%lld causal=%d:", S, causal);
    for (int x = 0; x < nv; x++) printf(" %s %.2f ms", vars[x], med[x] * 1e3);
    printf("\n");
    return 0;
}
