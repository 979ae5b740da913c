/* vk_bench: times the vk backend on one problem and checks it against float64.
 *
 * usage: vk_bench B H S D [reps=20]
 * Inputs: q, k, v standard normal, FLUX layout (head-major in, token-major out). One warm-up
 * call (pipeline creation, buffer growth), then `reps` calls on one context. Prints one line of
 * JSON: the kernel and device, the GPU time of the kernel dispatches (Vulkan timestamps) and the
 * whole call's host time (gather, copies, kernel, scatter), medians and minima, TFLOP/s from
 * 4*B*H*S*S*D, whether two calls gave the same bits, and rel_l2 / max_abs against a float64
 * evaluation of 16 sampled query rows of every head (the gate of docs/DESIGN.md: rel_l2 <= 2e-6).
 * JATTN_VK_KERNEL=1|7 picks the kernel (src/vulkan/NOTES.md). Built with the benchmarks where the
 * vk backend is (<build>/bench/vk_bench), against the static library (it reads the kernel time
 * through the internal door, src/internal/jattn_internal.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jattn.h"
#include "jattn_internal.h" /* vulkan/vk_internal.h */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform01(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static float normal(void) { return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01())); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: vk_bench B H S D [reps]\n");
        return 2;
    }
    const int64_t B = atoll(argv[1]), H = atoll(argv[2]), S = atoll(argv[3]), D = atoll(argv[4]);
    const int reps = argc > 5 ? atoi(argv[5]) : 20;
    const size_t n = (size_t)(B * H * S * D);
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *out = malloc(n * 4), *out2 = malloc(n * 4);
    for (size_t i = 0; i < n; i++) q[i] = normal(), k[i] = normal(), v[i] = normal();
    jattn_problem p = jattn_problem_flux(B, H, S, S, D);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_VK;
    jattn_selection sel;
    if (jattn_select(&p, &e, &sel) != JATTN_OK) {
        printf("{\"error\": \"%s\"}\n", jattn_last_error());
        return 1;
    }
    jattn_ctx *ctx;
    jattn_ctx_create(&ctx);
    double t0 = now();
    if (jattn_forward(ctx, &p, &e, q, k, v, out2, NULL) != JATTN_OK) {
        printf("{\"error\": \"%s\"}\n", jattn_last_error());
        return 1;
    }
    const double first = now() - t0;
    double *kern = calloc((size_t)reps, sizeof *kern), *call = calloc((size_t)reps, sizeof *call);
    for (int r = 0; r < reps; r++) {
        t0 = now();
        if (jattn_forward(ctx, &p, &e, q, k, v, out, NULL) != JATTN_OK) {
            printf("{\"error\": \"%s\"}\n", jattn_last_error());
            return 1;
        }
        call[r] = now() - t0;
        kern[r] = jattn_vk_last_kernel_seconds(ctx);
    }
    const int same = memcmp(out, out2, n * 4) == 0;
    qsort(kern, (size_t)reps, sizeof *kern, cmp_double);
    qsort(call, (size_t)reps, sizeof *call, cmp_double);
    const double flop = 4.0 * (double)B * (double)H * (double)S * (double)S * (double)D;

    /* float64 on 16 sampled rows of every (b, h) */
    double err2 = 0, ref2 = 0, max_abs = 0, max_ref = 0;
    double *srow = malloc((size_t)S * sizeof *srow);
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, h = bh % H;
        const float *qh = q + bh * S * D, *kh = k + bh * S * D, *vh = v + bh * S * D;
        for (int64_t t = 0; t < 16; t++) {
            const int64_t i = (t * S) / 16 + (bh * 7) % (S / 16 > 0 ? S / 16 : 1);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < S; j++) {
                double s = 0;
                for (int64_t d = 0; d < D; d++) s += (double)qh[i * D + d] * (double)kh[j * D + d];
                srow[j] = s * scale;
                if (srow[j] > mx) mx = srow[j];
            }
            for (int64_t j = 0; j < S; j++) sum += (srow[j] = exp(srow[j] - mx));
            for (int64_t d = 0; d < D; d++) {
                double o = 0;
                for (int64_t j = 0; j < S; j++) o += srow[j] * (double)vh[j * D + d];
                o /= sum;
                const double got = out[b * p.out.batch + h * p.out.head + i * p.out.token + d];
                const double diff = fabs(got - o);
                err2 += diff * diff, ref2 += o * o;
                if (!(diff <= max_abs)) max_abs = diff;
                if (fabs(o) > max_ref) max_ref = fabs(o);
            }
        }
    }
    const double rel_l2 = sqrt(err2 / ref2);
    const int pass = rel_l2 <= 2e-6 && max_abs <= 1e-5 * (max_ref > 1 ? max_ref : 1);
    printf("{\"B\": %lld, \"H\": %lld, \"S\": %lld, \"D\": %lld, \"kernel\": \"%s\", \"device\": \"%s\", "
           "\"reps\": %d, \"first_call_s\": %.3f, \"kernel_ms_median\": %.4f, \"kernel_ms_min\": %.4f, "
           "\"call_ms_median\": %.4f, \"kernel_tflops\": %.2f, \"call_tflops\": %.2f, \"bitwise_repeat\": %s, "
           "\"rel_l2\": %.3g, \"max_abs\": %.3g, \"max_ref\": %.3g, \"gate\": \"%s\", \"float_controls\": \"%s\"}\n",
           (long long)B, (long long)H, (long long)S, (long long)D, sel.kernel, sel.isa, reps, first,
           kern[reps / 2] * 1e3, kern[0] * 1e3, call[reps / 2] * 1e3, flop / kern[reps / 2] * 1e-12,
           flop / call[reps / 2] * 1e-12, same ? "true" : "false", rel_l2, max_abs, max_ref, pass ? "pass" : "FAIL",
           jattn_vk_float_controls());
    jattn_ctx_free(ctx);
    return pass && same ? 0 : 1;
}
