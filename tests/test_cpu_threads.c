/* The cpu backend's run-time contract beyond accuracy:
 *  - determinism: the output (and lse) is bitwise identical for 1, 2, 3 and 7 threads and on a
 *    repeated run, for every instruction set present (each output row is owned by one task,
 *    summed in a fixed order), also where the thread count changes how many query blocks a
 *    task groups;
 *  - the instruction-set choice: JATTN_CPU_ISA selects each set present and is reported in
 *    jattn_selection.isa / .kernel; a set not present or not known makes select() fail with
 *    JATTN_ERROR_UNSUPPORTED naming JATTN_CPU_ISA;
 *  - limits and workspace: head_dim above JATTN_CPU_MAX_HEAD_DIM is UNSUPPORTED naming head_dim;
 *    the workspace grows with threads, not with the sequence (no S x S buffer). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdlib.h>
#include <string.h>

#include "jattn_internal.h" /* cpu/cpu_kernels.h */
#include "harness.h"

static int set_isa(const char *isa) {
#if defined(_WIN32)
    return _putenv_s("JATTN_CPU_ISA", isa ? isa : "");
#else
    return isa ? setenv("JATTN_CPU_ISA", isa, 1) : unsetenv("JATTN_CPU_ISA");
#endif
}

/* mask NULL: jattn_forward; else jattn_forward_masked (grid mode: causal, a key bias), whose tasks run
 * longest first in chunks of `threads` heads (cpu_backend.c, forward_task). */
static int determinism(jt_rng *rng, const char *isa, jattn_problem p, const jattn_mask *mask) {
    jt_case c;
    if (jt_case_init(&c, &p) != 0) return 0;
    jt_case_fill(&c, JT_PEAKY, rng);
    const int64_t n_out = kit_tensor_span(&p, p.out, p.seq_q);
    const int64_t n_lse = p.batch * p.heads * p.seq_q;
    float *first = malloc((size_t)n_out * sizeof *first), *first_lse = malloc((size_t)n_lse * sizeof *first_lse);
    const int threads[] = {1, 2, 3, 7, 1};
    int ok = first && first_lse;
    for (size_t t = 0; ok && t < sizeof threads / sizeof threads[0]; t++) {
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CPU;
        e.threads = threads[t];
        memset(c.out, 0, (size_t)n_out * sizeof *c.out);
        jattn_status st = mask ? jattn_forward_masked(NULL, &p, &e, c.q, c.k, c.v, mask, c.out, c.lse)
                               : jattn_forward(NULL, &p, &e, c.q, c.k, c.v, c.out, c.lse);
        if (st != JATTN_OK) {
            printf("FAIL %s threads=%d: %s\n", isa, threads[t], jattn_last_error());
            ok = 0;
        } else if (t == 0) {
            memcpy(first, c.out, (size_t)n_out * sizeof *first);
            memcpy(first_lse, c.lse, (size_t)n_lse * sizeof *first_lse);
        } else if (memcmp(first, c.out, (size_t)n_out * sizeof *first) != 0 ||
                   memcmp(first_lse, c.lse, (size_t)n_lse * sizeof *first_lse) != 0) {
            printf("FAIL %s: output with %d threads differs from 1 thread\n", isa, threads[t]);
            ok = 0;
        }
    }
    if (ok)
        printf("ok   %s (%lld,%lld,%lld,%lld,%lld)%s: bitwise identical for threads 1, 2, 3, 7 and a repeated run\n",
               isa, (long long)p.batch, (long long)p.heads, (long long)p.seq_q, (long long)p.seq_kv,
               (long long)p.head_dim, mask ? " causal, key bias" : "");
    free(first), free(first_lse);
    jt_case_free(&c);
    return ok;
}

int main(void) {
    jt_rng rng;
    jt_rng_init(&rng, jt_seed());
    jt_tally tally = {0};
    jattn_problem small = jattn_problem_flux(1, 2, 8, 8, 64);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CPU;
    jattn_selection sel;

    const cpu_kernels *all[8];
    const int n = cpu_kernels_available(all, 8);
    for (int i = 0; i < n; i++) {
        set_isa(all[i]->isa);
        jattn_status st = jattn_select(&small, &e, &sel);
        int ok = st == JATTN_OK && strcmp(sel.isa, all[i]->isa) == 0 && strcmp(sel.kernel, all[i]->kernel) == 0 &&
                 strstr(sel.kernel, "cpu_flash_f32_") == sel.kernel;
        if (!ok)
            printf("FAIL JATTN_CPU_ISA=%s: select gave %s\n", all[i]->isa,
                   st == JATTN_OK ? sel.isa : jattn_last_error());
        jt_tally_add(&tally, ok);
        jt_tally_add(&tally, determinism(&rng, all[i]->isa, jattn_problem_flux(2, 3, 97, 131, 64), NULL));
        /* 32 query blocks a head (AVX-512): the driver groups them by 8, 4, 2 and 1 (cpu_backend.c,
         * forward_split) on 1, 2, 3 and 7 threads, and the bits must not change with the group */
        jt_tally_add(&tally, determinism(&rng, all[i]->isa, jattn_problem_flux(1, 2, 1536, 200, 64), NULL));
        /* grid mode: 5 heads (chunks of 2 and 3 leave a short last chunk), several units a head, every
         * query row owned by one task whatever the order */
        jattn_problem pm = jattn_problem_flux(1, 5, 700, 700, 64);
        float *bias = malloc((size_t)(pm.heads * pm.seq_kv) * sizeof *bias);
        if (bias) {
            for (int64_t j = 0; j < pm.heads * pm.seq_kv; j++) bias[j] = (float)(2.0 * jt_uniform(&rng) - 1.0);
            jattn_mask m = {0};
            m.causal = JATTN_CAUSAL_TOP_LEFT;
            m.key_bias = bias;
            m.key_bias_head_stride = pm.seq_kv;
            m.key_bias_batch_stride = pm.heads * pm.seq_kv;
            jt_tally_add(&tally, determinism(&rng, all[i]->isa, pm, &m));
        } else
            jt_tally_add(&tally, 0);
        free(bias);
    }

    /* Sets that are not present: every name not in the list above, and one that is no set. */
    const char *names[] = {"avx512", "avx2", "neon", "generic", "sse9"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int present = 0;
        for (int j = 0; j < n; j++) present |= strcmp(all[j]->isa, names[i]) == 0;
        if (present) continue;
        set_isa(names[i]);
        jattn_status st = jattn_select(&small, &e, &sel);
        int ok = jt_expect_status(st, JATTN_ERROR_UNSUPPORTED, names[i]) && strstr(jattn_last_error(), "JATTN_CPU_ISA");
        if (ok) printf("ok   JATTN_CPU_ISA=%s: %s\n", names[i], jattn_last_error());
        jt_tally_add(&tally, ok);
    }
    set_isa(NULL);

    /* The default is the first (widest) set present. */
    jt_tally_add(&tally, jattn_select(&small, &e, &sel) == JATTN_OK && n > 0 && strcmp(sel.isa, all[0]->isa) == 0);

    jattn_problem wide = jattn_problem_flux(1, 1, 4, 4, JATTN_CPU_MAX_HEAD_DIM + 1);
    jattn_status st = jattn_select(&wide, &e, &sel);
    jt_tally_add(&tally, jt_expect_status(st, JATTN_ERROR_UNSUPPORTED, "head_dim over the limit") &&
                             strstr(jattn_last_error(), "head_dim") != NULL);

    /* Workspace: O(threads x block), independent of the sequence length. */
    size_t w1 = 0, w2 = 0, w_long = 0;
    jattn_problem p1 = jattn_problem_flux(1, 24, 1536, 1536, 128),
                  p_long = jattn_problem_flux(1, 24, 16384, 16384, 128);
    e.threads = 1;
    jattn_workspace_size(&p1, &e, &w1);
    jattn_workspace_size(&p_long, &e, &w_long);
    e.threads = 2;
    jattn_workspace_size(&p1, &e, &w2);
    const int ws_ok = w1 > 0 && w_long == w1 && w2 > w1 && w2 <= 2 * w1 && w1 < ((size_t)1 << 20);
    printf("%s workspace: %zu bytes on 1 thread (same at seq 16384), %zu on 2\n", ws_ok ? "ok  " : "FAIL", w1, w2);
    jt_tally_add(&tally, ws_ok);
    return jt_tally_finish(&tally, "test_cpu_threads");
}
