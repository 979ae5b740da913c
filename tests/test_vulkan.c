/* The vk backend beyond the parity, padding and mask suites (test_parity vk, test_padding vk,
 * test_masks vk): FLUX-length single heads (which also guard lavapipe's silent 65,535-iteration
 * loop limit: every element is checked), causal and grouped-query heads at FLUX length, the lse,
 * bitwise determinism with and without a context, a context that allocates nothing on a repeated
 * call, problems run in pieces (grouped-query heads in whole groups and in parts of a group), NaN
 * and Inf in v under causal masks (only the rows that attend the key see them), the host's exact
 * power-of-two normalisation that keeps denormals out of the kernel (per head and per group of
 * heads), the refusals (device memory, tf32, head_dim, the backward), auto never choosing a
 * software device, and the reasons given when there is no loader or no such device.
 *
 * usage: test_vulkan [main | pieces | noloader | baddevice]
 *   main       (default) exits 77 (skipped) when no Vulkan device is usable here
 *   pieces     run under JATTN_VK_MAX_BINDING_BYTES=65536: every problem in pieces of a few heads
 *   noloader   run under JATTN_VK_LOADER=<missing file>: vk unavailable, the reason named
 *   baddevice  run under JATTN_VK_DEVICE=99: vk unavailable, the reason named */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "jattn_internal.h" /* vulkan/vk_internal.h */

static jattn_exec vk_exec(void) {
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_VK;
    return e;
}

/* One problem, one distribution, checked element by element (lse too). */
static int parity(jt_tally *t, jattn_problem p, jt_dist dist, jt_rng *rng) {
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        printf("FAIL allocation\n");
        jt_tally_add(t, 0);
        return 0;
    }
    jt_case_fill(&c, dist, rng);
    int ok = jt_case_reference(&c) == JATTN_OK;
    jattn_exec e = vk_exec();
    ok = ok && jt_case_check(&c, &e, 1);
    const jattn_metrics *m = jt_last_metrics();
    printf("%s %s: rel_l2 %.3g max_abs %.3g\n", ok ? "ok  " : "FAIL", c.label, m->rel_l2, m->max_abs);
    jt_tally_add(t, ok);
    jt_case_free(&c);
    return ok;
}

/* One problem under a mask (k and v with the problem's kv_heads), checked as parity() does. */
static int masked_parity(jt_tally *t, jattn_problem p, const jattn_mask *m, const char *what, jt_dist dist,
                         jt_rng *rng) {
    jt_case c;
    if (jt_case_init(&c, &p) != 0) {
        printf("FAIL allocation\n");
        jt_tally_add(t, 0);
        return 0;
    }
    c.mask = m;
    const size_t len = strlen(c.label);
    snprintf(c.label + len, sizeof c.label - len, " Hkv=%lld %s", (long long)p.kv_heads, what);
    jt_case_fill(&c, dist, rng);
    int ok = jt_case_reference(&c) == JATTN_OK;
    jattn_exec e = vk_exec();
    ok = ok && jt_case_check(&c, &e, 1);
    const jattn_metrics *mt = jt_last_metrics();
    printf("%s %s: rel_l2 %.3g max_abs %.3g\n", ok ? "ok  " : "FAIL", c.label, mt->rel_l2, mt->max_abs);
    jt_tally_add(t, ok);
    jt_case_free(&c);
    return ok;
}

static void fill(float *x, size_t n, jt_rng *r) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(2.0 * jt_uniform(r) - 1.0);
}

/* Two calls on one input, with a context and without, give the same bits; the second call of
 * one size allocates nothing. */
static void determinism_and_context(jt_tally *t, jt_rng *rng) {
    jattn_problem p = jattn_problem_flux(2, 3, 200, 300, 128);
    const size_t nq = 2 * 3 * 200 * 128, nk = 2 * 3 * 300 * 128, nl = 2 * 3 * 200;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
    float *o[3], *l[3];
    for (int i = 0; i < 3; i++) o[i] = malloc(nq * 4), l[i] = malloc(nl * 4);
    fill(q, nq, rng), fill(k, nk, rng), fill(v, nk, rng);
    jattn_ctx *ctx = NULL;
    int ok = jattn_ctx_create(&ctx) == JATTN_OK;
    jattn_exec e = vk_exec();
    ok = ok && jattn_forward(ctx, &p, &e, q, k, v, o[0], l[0]) == JATTN_OK;
    const long after_first = jattn_vk_ctx_allocations(ctx);
    ok = ok && jattn_forward(ctx, &p, &e, q, k, v, o[1], l[1]) == JATTN_OK;
    const long after_second = jattn_vk_ctx_allocations(ctx);
    ok = ok && jattn_forward(NULL, &p, &e, q, k, v, o[2], l[2]) == JATTN_OK;
    const int same = ok && !memcmp(o[0], o[1], nq * 4) && !memcmp(o[0], o[2], nq * 4) && !memcmp(l[0], l[1], nl * 4) &&
                     !memcmp(l[0], l[2], nl * 4);
    printf("%s determinism: three calls (context, context, none) bitwise equal\n", same ? "ok  " : "FAIL");
    jt_tally_add(t, same);
    const int no_alloc = ok && after_first > 0 && after_second == after_first;
    printf("%s context: first call allocated %ld buffers, the repeated call %ld more\n", no_alloc ? "ok  " : "FAIL",
           after_first, after_second - after_first);
    jt_tally_add(t, no_alloc);
    /* A smaller problem reuses the buffers (grow-only). */
    jattn_problem small = jattn_problem_flux(1, 2, 50, 60, 128);
    ok = jattn_forward(ctx, &small, &e, q, k, v, o[1], NULL) == JATTN_OK &&
         jattn_vk_ctx_allocations(ctx) == after_second;
    printf("%s context: a smaller call allocates nothing\n", ok ? "ok  " : "FAIL");
    jt_tally_add(t, ok);
    jattn_ctx_free(ctx);
    for (int i = 0; i < 3; i++) free(o[i]), free(l[i]);
    free(q), free(k), free(v);
}

/* Counts instructions `op` whose operand at `at` is `value` in a SPIR-V module. */
static int count_op(const uint32_t *w, size_t n, uint32_t op, size_t at, uint32_t value) {
    int found = 0;
    for (size_t i = 5; i < n && (w[i] >> 16);) {
        const size_t len = w[i] >> 16;
        if ((w[i] & 0xffffu) == op && at < len && w[i + at] == value) found++;
        i += len;
    }
    return found;
}

/* Every embedded module declares SignedZeroInfNanPreserve 32 (the build checks it with spirv-dis
 * too); the DenormPreserve copy declares both modes and differs by exactly those two instructions
 * (lavapipe does not take the mode, so the patched module runs only on devices that do). */
static void spirv_modes(jt_tally *t) {
    int ok = jattn_vk_module_count > 0;
    for (int m = 0; m < jattn_vk_module_count; m++) {
        const vk_spirv_module *x = &jattn_vk_modules[m];
        size_t n = 0;
        uint32_t *p = vk_spirv_with_denorm_preserve(x->words, x->n_words, &n);
        ok &= count_op(x->words, x->n_words, 17, 1, 4466) == 1 && count_op(x->words, x->n_words, 16, 2, 4461) == 1;
        ok &= p && n == x->n_words + 6 && count_op(p, n, 17, 1, 4464) == 1 && count_op(p, n, 16, 2, 4459) == 1 &&
              count_op(p, n, 16, 2, 4461) == 1 && count_op(p, n, 16, 3, 32) == 2;
        free(p);
    }
    printf("%s SPIR-V: %d modules declare SignedZeroInfNanPreserve 32; their DenormPreserve copies are well formed\n",
           ok ? "ok  " : "FAIL", jattn_vk_module_count);
    jt_tally_add(t, ok);
}

/* Refusals: status, message, and nothing written. */
static void refusals(jt_tally *t) {
    jattn_problem p = jattn_problem_flux(1, 1, 8, 8, 64);
    float q[512], k[512], v[512], out[512];
    for (int i = 0; i < 512; i++) q[i] = k[i] = v[i] = 0.5f, out[i] = NAN;
    jattn_exec e = vk_exec();
    e.memory = JATTN_MEMORY_DEVICE;
    int ok =
        jt_expect_status(jattn_forward(NULL, &p, &e, q, k, v, out, NULL), JATTN_ERROR_UNSUPPORTED, "device memory");
    ok &= strstr(jattn_last_error(), "exec.memory") != NULL;
    e = vk_exec();
    e.precision = JATTN_PRECISION_TF32;
    ok &= jt_expect_status(jattn_forward(NULL, &p, &e, q, k, v, out, NULL), JATTN_ERROR_UNSUPPORTED, "tf32");
    ok &= strstr(jattn_last_error(), "exec.precision") != NULL;
    int untouched = 1;
    for (int i = 0; i < 512; i++) untouched &= isnan(out[i]);
    printf("%s refusals: device memory, tf32 (UNSUPPORTED, field named, out untouched)\n",
           ok && untouched ? "ok  " : "FAIL");
    jt_tally_add(t, ok && untouched);
    jattn_problem big = jattn_problem_flux(1, 1, 8, 8, 1025);
    jattn_selection sel;
    e = vk_exec();
    ok = jt_expect_status(jattn_select(&big, &e, &sel), JATTN_ERROR_UNSUPPORTED, "head_dim 1025");
    ok &= strstr(jattn_last_error(), "head_dim") != NULL;
    printf("%s refusals: head_dim 1025 (%s)\n", ok ? "ok  " : "FAIL", jattn_last_error());
    jt_tally_add(t, ok);
}

/* jattn_select names the kernel and the device; auto never picks a software device. */
static void selection(jt_tally *t) {
    jattn_problem p = jattn_problem_flux(1, 24, 1536, 1536, 128);
    jattn_exec e = vk_exec();
    jattn_selection sel;
    int ok = jattn_select(&p, &e, &sel) == JATTN_OK && sel.backend == JATTN_BACKEND_VK &&
             strstr(sel.kernel, "d128") != NULL && strncmp(sel.isa, "vulkan: ", 8) == 0;
    printf("%s select: kernel %s on \"%s\"\n", ok ? "ok  " : "FAIL", ok ? sel.kernel : "?", ok ? sel.isa : "?");
    jt_tally_add(t, ok);
    const int software = ok && (strstr(sel.isa, "llvmpipe") != NULL || strstr(sel.isa, "SwiftShader") != NULL);
    e.backend = JATTN_BACKEND_AUTO;
    ok = jattn_select(&p, &e, &sel) == JATTN_OK;
    if (software) ok = ok && sel.backend != JATTN_BACKEND_VK;
    printf("%s auto: chose %s%s\n", ok ? "ok  " : "FAIL", ok ? sel.backend_name : "?",
           software ? " (the Vulkan device is a software one: never auto's choice)" : "");
    jt_tally_add(t, ok);
}

static int unavailable(const char *what, const char *reason_part) {
    jattn_problem p = jattn_problem_flux(1, 1, 8, 8, 64);
    jattn_exec e = vk_exec();
    jattn_selection sel;
    int ok = jt_expect_status(jattn_select(&p, &e, &sel), JATTN_ERROR_BACKEND_UNAVAILABLE, what);
    ok &= strstr(jattn_last_error(), reason_part) != NULL;
    printf("%s %s: vk unavailable: %s\n", ok ? "ok  " : "FAIL", what, jattn_last_error());
    e.backend = JATTN_BACKEND_AUTO;
    const int auto_ok = jattn_select(&p, &e, &sel) == JATTN_OK && sel.backend != JATTN_BACKEND_VK;
    printf("%s %s: auto falls back to %s\n", auto_ok ? "ok  " : "FAIL", what, auto_ok ? sel.backend_name : "?");
    return ok && auto_ok ? 0 : 1;
}

/* The host's power-of-two normalisation (vk_range.c), which keeps float32 denormals out of the
 * kernel: heads in range keep their values (no shift, the scale as given); denormal q against
 * large k, and tiny v, are copied scaled by exact powers of two to largest magnitudes in [1, 2),
 * the scale compensating exactly; a head holding Inf is left alone. */
static float max_abs_of(const float *x, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static void normalisation(jt_tally *t, jt_rng *rng) {
    enum { R = 32, D = 100, DP = 128, N = R * D };
    float *q = malloc(N * 4), *k = malloc(N * 4), *v = malloc(N * 4), *dst = malloc(R * DP * 4);
    int ok = q && k && v && dst;
    vk_head_range r = {1, 1, 1, 0};
    if (ok) { /* in range: nothing to do */
        fill(q, N, rng), fill(k, N, rng), fill(v, N, rng);
        vk_range_plan(max_abs_of(q, N), max_abs_of(k, N), max_abs_of(v, N), 0.125f, &r);
        ok = r.q_shift == 0 && r.k_shift == 0 && r.v_shift == 0 && r.scale == 0.125f;
        k[7] = INFINITY; /* a head holding Inf: left alone whatever its scale */
        vk_range_plan(max_abs_of(q, N), max_abs_of(k, N), max_abs_of(v, N), 1e-30f, &r);
        ok = ok && r.q_shift == 0 && r.k_shift == 0 && r.scale == 1e-30f;
    }
    printf("%s normalisation: heads in range and heads holding Inf left as they are\n", ok ? "ok  " : "FAIL");
    jt_tally_add(t, ok);
    int ok2 = q && k && v && dst;
    if (ok2) { /* q denormal (below 2^-126), k ~ 2^102, v ~ 2^-80 */
        for (int i = 0; i < N; i++) {
            q[i] = (float)ldexp(2.0 * jt_uniform(rng) - 1.0, -126);
            k[i] = (float)ldexp(2.0 * jt_uniform(rng) - 1.0, 102);
            v[i] = (float)ldexp(2.0 * jt_uniform(rng) - 1.0, -80);
        }
        vk_range_plan(max_abs_of(q, N), max_abs_of(k, N), max_abs_of(v, N), 0x1p24f, &r);
        ok2 = ldexp((double)r.scale, r.q_shift + r.k_shift) == 0x1p24; /* the logits unchanged */
        const float *src[3] = {q, k, v};
        const int shift[3] = {r.q_shift, r.k_shift, r.v_shift};
        for (int x = 0; x < 3 && ok2; x++) {
            vk_copy_scaled(dst, src[x], R, D, D, DP, shift[x]);
            float m = 0;
            for (int i = 0; i < R && ok2; i++)
                for (int j = 0; j < DP && ok2; j++) {
                    const double want = j < D ? ldexp((double)src[x][i * D + j], shift[x]) : 0.0;
                    ok2 = (double)dst[i * DP + j] == want; /* exact */
                    m = fabsf(dst[i * DP + j]) > m ? fabsf(dst[i * DP + j]) : m;
                }
            ok2 = ok2 && m >= 1.0f && m < 2.0f;
        }
    }
    printf("%s normalisation: denormal q, k ~ 2^102, v ~ 2^-80 copied exactly scaled (by 2^%d, 2^%d, 2^%d; scale %g)\n",
           ok2 ? "ok  " : "FAIL", r.q_shift, r.k_shift, r.v_shift, (double)r.scale);
    jt_tally_add(t, ok2);
    free(q), free(k), free(v), free(dst);
}

/* NaN and Inf in v under a causal mask: a boundary tile's rows share its v rows, yet element d of
 * an out row is non-finite exactly when the row attends a key whose v[., d] is; every other element
 * within the gate of the reference's (bottom-right causal, a key bias and grouped heads besides). */
static void nonfinite_v(jt_tally *t, jt_rng *rng) {
    enum { B = 1, H = 2, HKV = 1, SQ = 100, SKV = 130, D = 64 };
    jattn_problem p = jattn_problem_flux(B, H, SQ, SKV, D);
    p.kv_heads = HKV;
    p.k = p.v = jattn_strides_head_major(HKV, SKV, D);
    float *q = malloc(B * H * SQ * D * 4), *k = malloc(B * HKV * SKV * D * 4), *v = malloc(B * HKV * SKV * D * 4);
    float *out = malloc(B * H * SQ * D * 4), *ref = malloc(B * H * SQ * D * 4), *bias = malloc(SKV * 4);
    int ok = q && k && v && out && ref && bias;
    if (ok) {
        fill(q, B * H * SQ * D, rng), fill(k, B * HKV * SKV * D, rng), fill(v, B * HKV * SKV * D, rng);
        for (int j = 0; j < SKV; j++) bias[j] = (float)(2.0 * jt_uniform(rng) - 1.0);
        /* bottom-right causal: query i attends keys j <= i + 30; row 40 and later see key 70,
         * rows 67 and later key 97 (inside the 64-key tiles the kernels walk) */
        v[70 * D + 3] = INFINITY, v[70 * D + 9] = -INFINITY, v[97 * D + 5] = NAN;
        v[129 * D + 1] = NAN; /* attended by row 99 only */
        jattn_mask m;
        memset(&m, 0, sizeof m);
        m.causal = JATTN_CAUSAL_BOTTOM_RIGHT;
        m.key_bias = bias;
        jattn_exec e = vk_exec(), er = {0};
        er.backend = JATTN_BACKEND_REF;
        ok = jattn_forward_masked(NULL, &p, &e, q, k, v, &m, out, NULL) == JATTN_OK &&
             jattn_forward_masked(NULL, &p, &er, q, k, v, &m, ref, NULL) == JATTN_OK;
        for (int64_t x = 0; ok && x < B * H * SQ * D; x++) { /* out is token-major, as ref */
            const int64_t i = (x / D) / H, d = x % D;
            const int want_bad =
                (d == 3 && i >= 40) || (d == 9 && i >= 40) || (d == 5 && i >= 67) || (d == 1 && i == 99);
            if (want_bad != !isfinite(out[x]) || want_bad != !isfinite(ref[x]) ||
                (!want_bad && !(fabsf(out[x] - ref[x]) <= 1e-5f))) {
                printf("FAIL nonfinite v: row %lld dim %lld: vk %g, ref %g\n", (long long)i, (long long)d,
                       (double)out[x], (double)ref[x]);
                ok = 0;
            }
        }
    }
    printf("%s non-finite v under causal masks: only the rows attending the key are non-finite there\n",
           ok ? "ok  " : "FAIL");
    jt_tally_add(t, ok);
    free(q), free(k), free(v), free(out), free(ref), free(bias);
}

/* The normalisation of a group of query heads sharing a key/value head (vk_range_plan_group): one
 * head is vk_range_plan; a group normalises when one head's q (or k, or the scale) is out of range,
 * each q head by its own power, k by one; a head holding Inf leaves the group as it is; a head of
 * zeros keeps its q and scale. */
static void normalisation_group(jt_tally *t) {
    const float maxima[] = {0.0f, 1e-40f, 3e-12f, 0.7f, 5.0f, 1e9f, 3e12f, 1e30f, INFINITY};
    const int n_max = (int)(sizeof maxima / sizeof maxima[0]);
    int ok = 1;
    for (int a = 0; a < n_max; a++)
        for (int b = 0; b < n_max; b++)
            for (int c = 0; c < n_max; c++) {
                vk_head_range one, group;
                vk_range_plan(maxima[a], maxima[b], maxima[c], 0.125f, &one);
                vk_range_plan_group(&maxima[a], 1, maxima[b], maxima[c], 0.125f, &group);
                ok &= memcmp(&one, &group, sizeof one) == 0;
            }
    vk_head_range r[3];
    const float in_range[3] = {0.5f, 3.0f, 100.0f}, one_small[3] = {0.5f, 1e-20f, 100.0f};
    const float with_inf[3] = {0.5f, 1e-20f, INFINITY}, with_zero[3] = {0.0f, 1e-20f, 100.0f};
    vk_range_plan_group(in_range, 3, 2.0f, 1.0f, 0.125f, r);
    ok &= r[0].q_shift == 0 && r[1].q_shift == 0 && r[2].k_shift == 0 && r[1].scale == 0.125f;
    vk_range_plan_group(one_small, 3, 2.0f, 1.0f, 0.125f, r);
    for (int i = 0; i < 3; i++) /* each head: q by 2^-e(max_q), k by 2^-1, the logits unchanged */
        ok &= r[i].k_shift == -1 && r[i].q_shift == -ilogbf(one_small[i]) &&
              ldexp((double)r[i].scale, r[i].q_shift + r[i].k_shift) == 0.125;
    vk_range_plan_group(with_inf, 3, 2.0f, 1.0f, 0.125f, r);
    ok &= r[1].q_shift == 0 && r[1].k_shift == 0 && r[1].scale == 0.125f;
    vk_range_plan_group(with_zero, 3, 2.0f, 1e-40f, 0.125f, r);
    ok &= r[0].q_shift == 0 && r[0].scale == 0.125f && r[0].k_shift == -1 && r[1].q_shift == -ilogbf(1e-20f) &&
          r[0].v_shift == r[2].v_shift && r[0].v_shift > 0;
    printf("%s normalisation: groups of query heads sharing k and v (one head as vk_range_plan)\n",
           ok ? "ok  " : "FAIL");
    jt_tally_add(t, ok);
}

/* The backward stays unavailable on vk (the issue asks for its forward). */
static void no_backward(jt_tally *t) {
    jattn_problem p = jattn_problem_flux(1, 1, 8, 8, 64);
    jattn_exec e = vk_exec();
    jattn_selection sel;
    int ok = jt_expect_status(jattn_backward_select(&p, &e, &sel), JATTN_ERROR_UNSUPPORTED, "vk backward");
    printf("%s refusals: the backward (%s)\n", ok ? "ok  " : "FAIL", jattn_last_error());
    jt_tally_add(t, ok);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "main";
    if (strcmp(mode, "noloader") == 0) return unavailable("no loader", "loader");
    if (strcmp(mode, "baddevice") == 0) return unavailable("JATTN_VK_DEVICE=99", "JATTN_VK_DEVICE");
    if (strcmp(mode, "main") != 0 && strcmp(mode, "pieces") != 0) {
        fprintf(stderr, "usage: test_vulkan [main | pieces | noloader | baddevice]\n");
        return 2;
    }
    if (!jt_backend_present(JATTN_BACKEND_VK)) {
        jattn_problem p = jattn_problem_flux(1, 1, 8, 8, 64);
        jattn_exec e = vk_exec();
        jattn_selection sel;
        jattn_select(&p, &e, &sel);
        printf("SKIP: no usable Vulkan device: %s\n", jattn_last_error());
        return JT_SKIP;
    }
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0x766b766bull);
    jt_tally t = {0};
    if (strcmp(mode, "pieces") == 0) {
        /* 64 KiB bindings: one head of (seq 200, family 64) takes 51 KB, so each piece is one head. */
        jattn_problem p = jattn_problem_flux(2, 3, 130, 200, 64);
        parity(&t, p, JT_NORMAL, &rng);
        p = jattn_problem_flux(3, 2, 50, 40, 200); /* family 256: 51 KB per head */
        p.out = jattn_strides_head_major(2, 50, 200);
        parity(&t, p, JT_PEAKY, &rng);
        /* grouped heads: whole groups per piece (q of a group of 2: 31 KB), and parts of a group
         * (q of a group of 6: 154 KB: pieces of 2 heads, each with the group's key/value head) */
        jattn_mask m;
        memset(&m, 0, sizeof m);
        m.causal = JATTN_CAUSAL_TOP_LEFT;
        p = jattn_problem_flux(2, 4, 60, 60, 64);
        p.kv_heads = 2;
        p.k = p.v = jattn_strides_head_major(2, 60, 64);
        masked_parity(&t, p, &m, "causal", JT_NORMAL, &rng);
        const int64_t seg_q[4] = {0, 30, 30, 100}, seg_kv[4] = {0, 20, 60, 90};
        float bias[100];
        for (int j = 0; j < 100; j++) bias[j] = j % 7 == 3 ? -INFINITY : (float)(4.0 * jt_uniform(&rng) - 2.0);
        m.cu_seqlens_q = seg_q, m.cu_seqlens_kv = seg_kv, m.num_segments = 3;
        m.key_bias = bias;
        p = jattn_problem_flux(1, 6, 100, 100, 64);
        p.kv_heads = 1;
        p.k = p.v = jattn_strides_head_major(1, 100, 64);
        masked_parity(&t, p, &m, "causal segments bias", JT_PEAKY, &rng);
        jattn_problem huge = jattn_problem_flux(1, 1, 300, 300, 64); /* one head of 77 KB: refused */
        jattn_exec e = vk_exec();
        jattn_selection sel;
        int ok = jt_expect_status(jattn_select(&huge, &e, &sel), JATTN_ERROR_UNSUPPORTED, "a head over one binding");
        printf("%s one head larger than a binding: %s\n", ok ? "ok  " : "FAIL", jattn_last_error());
        jt_tally_add(&t, ok);
        return jt_tally_finish(&t, "test_vulkan pieces");
    }
    spirv_modes(&t);
    normalisation(&t, &rng);
    normalisation_group(&t);
    selection(&t);
    refusals(&t);
    no_backward(&t);
    determinism_and_context(&t, &rng);
    nonfinite_v(&t, &rng);
    /* FLUX lengths, one head each (lavapipe runs ~1 GFLOP/s): every element checked. */
    parity(&t, jattn_problem_flux(1, 1, 1536, 1536, 128), JT_UNIFORM, &rng);
    parity(&t, jattn_problem_flux(1, 1, 1536, 1536, 128), JT_PEAKY, &rng);
    parity(&t, jattn_problem_flux(1, 1, 1536, 1536, 64), JT_NORMAL, &rng);
    parity(&t, jattn_problem_flux(1, 1, 4608, 4608, 128), JT_NORMAL, &rng);
    /* causal at FLUX length with grouped heads (4 query heads on 1 key/value head), and
     * bottom-right causal cross-attention with a key bias */
    jattn_mask m;
    memset(&m, 0, sizeof m);
    m.causal = JATTN_CAUSAL_TOP_LEFT;
    jattn_problem p = jattn_problem_flux(1, 4, 1536, 1536, 128);
    p.kv_heads = 1;
    p.k = p.v = jattn_strides_head_major(1, 1536, 128);
    masked_parity(&t, p, &m, "causal", JT_PEAKY, &rng);
    float *bias = malloc(1536 * sizeof *bias);
    if (bias) {
        for (int j = 0; j < 1536; j++) bias[j] = j % 5 == 0 ? -10000.0f : (float)(4.0 * jt_normal(&rng));
        m.causal = JATTN_CAUSAL_BOTTOM_RIGHT;
        m.key_bias = bias;
        masked_parity(&t, jattn_problem_flux(1, 1, 700, 1536, 64), &m, "causal-br bias", JT_NORMAL, &rng);
        free(bias);
    }
    return jt_tally_finish(&t, "test_vulkan");
}
