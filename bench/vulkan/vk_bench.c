/* vk_bench: times the vk backend on one problem and checks it against float64.
 *
 * usage: vk_bench B H S D [reps=20] [mask words...]
 *   mask words (jattn_mask, jattn_problem.kv_heads; any combination):
 *     causal | causal-br   causal attention, top-left (PyTorch's is_causal) or bottom-right
 *     kv=N                 N key/value heads (grouped-query heads; N divides H)
 *     segments=N           N packed sequences of S/N tokens (FlashAttention's varlen cu_seqlens)
 *     bias                 a key bias per batch (normal, -10000 on every 8th key), broadcast over heads
 * Inputs: q, k, v standard normal, FLUX layout (head-major in, token-major out). One warm-up
 * call (pipeline creation, buffer growth), then `reps` calls on one context. Prints one line of
 * JSON: the kernel and device, the GPU time of the kernel dispatches (Vulkan timestamps) and the
 * whole call's host time (gather, copies, kernel, scatter), medians and minima, TFLOP/s from
 * 4*B*H*D*(attended query-key pairs) (S*S without a window; about half that causal), whether two
 * calls gave the same bits, a hash of the output's bits (to compare builds), and rel_l2 / max_abs
 * against a float64 evaluation of 16 sampled query rows of every head under the same mask (the
 * gate of docs/DESIGN.md: rel_l2 <= 2e-6). JATTN_VK_KERNEL=1|7 picks the kernel
 * (src/vulkan/NOTES.md). Built with the benchmarks where the vk backend is (<build>/bench/vk_bench),
 * against the static library (it reads the kernel time through the internal door,
 * src/internal/jattn_internal.h). */
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

/* The bench's masks: which keys [*lo, *hi) query row i attends (jattn.h's definition for the parts
 * the bench sets: segments of equal length, causal inside them). */
typedef struct bench_mask {
    jattn_causal causal;
    int64_t segments; /* 0: none */
    int64_t S;
} bench_mask;

static void window(const bench_mask *bm, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t base = 0, len = bm->S;
    if (bm->segments) {
        const int64_t s = i / (bm->S / bm->segments) < bm->segments - 1 ? i / (bm->S / bm->segments) : bm->segments - 1;
        base = s * (bm->S / bm->segments);
        len = s == bm->segments - 1 ? bm->S - base : bm->S / bm->segments;
    }
    *lo = base, *hi = base + len;
    if (bm->causal != JATTN_CAUSAL_NONE && i + 1 < *hi) *hi = i + 1; /* Sq == Skv: both alignments agree */
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: vk_bench B H S D [reps] [causal|causal-br] [kv=N] [segments=N] [bias]\n");
        return 2;
    }
    const int64_t B = atoll(argv[1]), H = atoll(argv[2]), S = atoll(argv[3]), D = atoll(argv[4]);
    const int reps = argc > 5 ? atoi(argv[5]) : 20;
    int64_t Hkv = H;
    bench_mask bm = {JATTN_CAUSAL_NONE, 0, S};
    int biased = 0;
    char mask_name[128] = "";
    for (int a = 6; a < argc; a++) {
        if (strcmp(argv[a], "causal") == 0)
            bm.causal = JATTN_CAUSAL_TOP_LEFT;
        else if (strcmp(argv[a], "causal-br") == 0)
            bm.causal = JATTN_CAUSAL_BOTTOM_RIGHT;
        else if (strncmp(argv[a], "kv=", 3) == 0)
            Hkv = atoll(argv[a] + 3);
        else if (strncmp(argv[a], "segments=", 9) == 0)
            bm.segments = atoll(argv[a] + 9);
        else if (strcmp(argv[a], "bias") == 0)
            biased = 1;
        else {
            fprintf(stderr, "vk_bench: unknown mask word %s\n", argv[a]);
            return 2;
        }
        const size_t len = strlen(mask_name);
        snprintf(mask_name + len, sizeof mask_name - len, "%s%s", len ? " " : "", argv[a]);
    }
    if (Hkv < 1 || H % Hkv != 0 || bm.segments < 0 || bm.segments > S) {
        fprintf(stderr, "vk_bench: kv=N must divide H, segments=N be at most S\n");
        return 2;
    }
    const size_t n = (size_t)(B * H * S * D), nkv = (size_t)(B * Hkv * S * D);
    float *q = malloc(n * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *out = malloc(n * 4), *out2 = malloc(n * 4);
    for (size_t i = 0; i < n; i++) q[i] = normal();
    for (size_t i = 0; i < nkv; i++) k[i] = normal(), v[i] = normal();
    jattn_problem p = jattn_problem_flux(B, H, S, S, D);
    p.kv_heads = Hkv;
    p.k = p.v = jattn_strides_head_major(Hkv, S, D);
    jattn_mask m;
    memset(&m, 0, sizeof m);
    m.causal = bm.causal;
    int64_t *cu = calloc((size_t)bm.segments + 1, sizeof *cu);
    float *bias = biased ? malloc((size_t)(B * S) * sizeof *bias) : NULL;
    if (bm.segments) {
        for (int64_t s = 0; s < bm.segments; s++) cu[s] = s * (S / bm.segments);
        cu[bm.segments] = S;
        m.cu_seqlens_q = m.cu_seqlens_kv = cu;
        m.num_segments = bm.segments;
    }
    if (bias) {
        for (int64_t j = 0; j < B * S; j++) bias[j] = j % 8 == 5 ? -10000.0f : normal();
        m.key_bias = bias;
        m.key_bias_batch_stride = S;
    }
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_VK;
    jattn_plan *plan = NULL;
    jattn_selection sel;
    if (jattn_plan_create(&plan, JATTN_PASS_FORWARD, &p, NULL, &m, &e) != JATTN_OK ||
        jattn_plan_selection(plan, &sel) != JATTN_OK) {
        printf("{\"error\": \"%s\"}\n", jattn_last_error());
        return 1;
    }
    jattn_plan_free(plan);
    jattn_ctx *ctx;
    jattn_ctx_create(&ctx);
    double t0 = now();
    if (jattn_forward_masked(ctx, &p, &e, q, k, v, &m, out2, NULL) != JATTN_OK) {
        printf("{\"error\": \"%s\"}\n", jattn_last_error());
        return 1;
    }
    const double first = now() - t0;
    double *kern = calloc((size_t)reps, sizeof *kern), *call = calloc((size_t)reps, sizeof *call);
    for (int r = 0; r < reps; r++) {
        t0 = now();
        if (jattn_forward_masked(ctx, &p, &e, q, k, v, &m, out, NULL) != JATTN_OK) {
            printf("{\"error\": \"%s\"}\n", jattn_last_error());
            return 1;
        }
        call[r] = now() - t0;
        kern[r] = jattn_vk_last_kernel_seconds(ctx);
    }
    const int same = memcmp(out, out2, n * 4) == 0;
    qsort(kern, (size_t)reps, sizeof *kern, cmp_double);
    qsort(call, (size_t)reps, sizeof *call, cmp_double);
    double pairs = 0; /* attended query-key pairs of one head */
    for (int64_t i = 0; i < S; i++) {
        int64_t lo, hi;
        window(&bm, i, &lo, &hi);
        pairs += (double)(hi - lo);
    }
    const double flop = 4.0 * (double)B * (double)H * pairs * (double)D;

    /* float64 on 16 sampled rows of every (b, h) */
    double err2 = 0, ref2 = 0, max_abs = 0, max_ref = 0;
    double *srow = malloc((size_t)S * sizeof *srow);
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t bh = 0; bh < B * H; bh++) {
        const int64_t b = bh / H, h = bh % H, bkv = b * Hkv + h / (H / Hkv);
        const float *qh = q + bh * S * D, *kh = k + bkv * S * D, *vh = v + bkv * S * D;
        for (int64_t t = 0; t < 16; t++) {
            const int64_t i = (t * S) / 16 + (bh * 7) % (S / 16 > 0 ? S / 16 : 1);
            int64_t lo, hi;
            window(&bm, i, &lo, &hi);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = lo; j < hi; j++) {
                double s = 0;
                for (int64_t d = 0; d < D; d++) s += (double)qh[i * D + d] * (double)kh[j * D + d];
                srow[j] = s * scale + (bias ? (double)bias[b * S + j] : 0.0);
                if (srow[j] > mx) mx = srow[j];
            }
            for (int64_t j = lo; j < hi; j++) sum += (srow[j] = exp(srow[j] - mx));
            for (int64_t d = 0; d < D; d++) {
                double o = 0;
                for (int64_t j = lo; j < hi; j++) o += srow[j] * (double)vh[j * D + d];
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
    printf("{\"B\": %lld, \"H\": %lld, \"S\": %lld, \"D\": %lld, \"mask\": \"%s\", \"pairs_fraction\": %.4f, "
           "\"kernel\": \"%s\", \"device\": \"%s\", "
           "\"reps\": %d, \"first_call_s\": %.3f, \"kernel_ms_median\": %.4f, \"kernel_ms_min\": %.4f, "
           "\"call_ms_median\": %.4f, \"kernel_tflops\": %.2f, \"call_tflops\": %.2f, \"bitwise_repeat\": %s, "
           "\"out_hash\": \"%016llx\", \"rel_l2\": %.3g, \"max_abs\": %.3g, \"max_ref\": %.3g, \"gate\": \"%s\", "
           "\"float_controls\": \"%s\"}\n",
           (long long)B, (long long)H, (long long)S, (long long)D, mask_name, pairs / ((double)S * (double)S),
           sel.kernel, sel.isa, reps, first, kern[reps / 2] * 1e3, kern[0] * 1e3, call[reps / 2] * 1e3,
           flop / kern[reps / 2] * 1e-12, flop / call[reps / 2] * 1e-12, same ? "true" : "false",
           (unsigned long long)fnv1a(out, n * 4), rel_l2, max_abs, max_ref, pass ? "pass" : "FAIL",
           jattn_vk_float_controls());
    jattn_ctx_free(ctx);
    free(cu);
    free(bias);
    return pass && same ? 0 : 1;
}
