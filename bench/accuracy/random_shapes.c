/* Random problems against the float64 reference, through the tests harness (fresh inputs,
 * poisoned outputs, the f32 gate): B, H <= 3, Sq <= 300, Skv <= 400, head_dim 1..1024,
 * head- or token-major q and k, head- or token-major out, scales 0.1..4 x 1/sqrt(D) on a quarter
 * of the draws, the four distributions, 1 or 2 threads, with or without lse; cpu backend
 * (JATTN_CPU_ISA picks the instruction set).
 * usage: random_shapes [N]       exit 1 when a draw fails (its seed printed for replay) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "harness.h"
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    jt_rng rng;
    jt_rng_init(&rng, jt_seed());
    int fails = 0;
    for (int it = 0; it < n; it++) {
        int64_t B = 1 + jt_next(&rng) % 3, H = 1 + jt_next(&rng) % 3;
        int64_t Sq = 1 + jt_next(&rng) % 300, Skv = 1 + jt_next(&rng) % 400;
        static const int64_t Ds[] = {1,   2,   3,   4,   5,   7,   8,   9,   15,  16,  17,  24,  31,  32,
                                     33,  40,  48,  63,  64,  65,  72,  80,  96,  100, 112, 127, 128, 129,
                                     160, 192, 255, 256, 257, 320, 384, 511, 512, 513, 640, 1024};
        int64_t D = Ds[jt_next(&rng) % (sizeof Ds / sizeof Ds[0])];
        if (Sq * Skv * D * B * H > 40000000) {
            Sq = 1 + Sq / 4;
            Skv = 1 + Skv / 4;
        }
        jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
        if (jt_next(&rng) % 2) {
            p.q = jattn_strides_token_major(H, Sq, D);
            p.k = jattn_strides_token_major(H, Skv, D);
        }
        if (jt_next(&rng) % 2) p.out = jattn_strides_head_major(H, Sq, D);
        if (jt_next(&rng) % 4 == 0) p.scale = (float)((0.1 + 3.9 * jt_uniform(&rng)) / sqrt((double)D));
        jt_case c;
        if (jt_case_init(&c, &p) != 0) {
            printf("alloc fail\n");
            continue;
        }
        jt_dist d = (jt_dist)(jt_next(&rng) % JT_DIST_COUNT);
        float keep_scale = c.p.scale;
        jt_case_fill(&c, d, &rng);
        if (d != JT_LARGE) c.p.scale = keep_scale;
        if (jt_case_reference(&c) != JATTN_OK) {
            printf("ref fail\n");
            fails++;
            continue;
        }
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CPU;
        e.threads = 1 + (int)(jt_next(&rng) % 2);
        if (!jt_case_check(&c, &e, (int)(jt_next(&rng) % 2))) {
            fails++;
            printf("  ^ scale %g threads %d\n", c.p.scale, e.threads);
        }
        jt_case_free(&c);
    }
    printf("sweep: %d of %d failed (seed %llu)\n", fails, n, (unsigned long long)jt_seed());
    return fails != 0;
}
