/* Parity suite: one backend against the float64 reference, over a table of shapes and
 * layouts, each with the four input distributions drawn fresh, outputs poisoned, every
 * element checked (docs/DESIGN.md §2).
 *
 * usage: test_parity BACKEND      (a jattn_backend_name, or auto). Exits 77 (skipped) when the
 *        backend is not present in this build or on this machine. A backend that takes tf32
 *        precision is also checked in it. JATTN_TEST_QUICK=1 leaves out the largest shape. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef enum layout {
    FLUX,        /* q, k, v head-major, out token-major */
    HEAD_MAJOR,  /* everything head-major */
    TOKEN_MAJOR, /* everything token-major */
    FUSED_QKV,   /* q, k, v views into one token-major [B, S, 3, H, D] buffer; out head-major */
    PADDED       /* every row padded by 5 elements, heads and batches by 3 more */
} layout;

static const char *const layout_names[] = {"flux", "head-major", "token-major", "fused-qkv", "padded"};

typedef struct shape {
    int64_t B, H, Sq, Skv, D;
    layout lay;
    int large; /* left out under JATTN_TEST_QUICK */
} shape;

static const shape shapes[] = {
    /* the origin project's parity set */
    {1, 2, 8, 8, 128, FLUX, 0},
    {1, 2, 40, 40, 128, FLUX, 0},
    {1, 1, 50, 50, 128, FLUX, 0},
    {1, 1, 64, 64, 128, FLUX, 0},
    {1, 24, 1536, 1536, 128, FLUX, 1},
    /* sizes that are no tile multiple */
    {1, 2, 1, 1, 64, FLUX, 0},
    {1, 2, 7, 7, 64, FLUX, 0},
    {1, 2, 33, 33, 64, FLUX, 0},
    {1, 2, 65, 65, 64, FLUX, 0},
    {1, 2, 127, 127, 64, FLUX, 0},
    {1, 2, 129, 129, 64, FLUX, 0},
    {1, 1, 1000, 1000, 64, FLUX, 0},
    /* batch > 1, cross-attention */
    {3, 2, 33, 33, 64, FLUX, 0},
    {2, 3, 7, 129, 64, FLUX, 0},
    {2, 3, 129, 7, 64, FLUX, 0},
    {1, 2, 1, 1000, 128, FLUX, 0},
    {1, 2, 1000, 1, 128, FLUX, 0},
    /* head dims */
    {1, 2, 65, 65, 8, FLUX, 0},
    {1, 2, 65, 65, 16, FLUX, 0},
    {1, 2, 65, 65, 80, FLUX, 0},
    {1, 2, 65, 65, 96, FLUX, 0},
    {1, 2, 65, 65, 256, FLUX, 0},
    {1, 2, 65, 65, 512, FLUX, 0},
    {1, 1, 100, 77, 1, FLUX, 0},
    {1, 1, 40, 40, 3, FLUX, 0},
    {1, 1, 40, 40, 200, FLUX, 0},
    /* layouts */
    {2, 3, 65, 33, 64, HEAD_MAJOR, 0},
    {2, 3, 65, 33, 64, TOKEN_MAJOR, 0},
    {2, 3, 65, 65, 64, FUSED_QKV, 0},
    {2, 3, 65, 33, 64, PADDED, 0},
    {2, 2, 130, 257, 128, PADDED, 0},
};

static jattn_strides padded(int64_t H, int64_t S, int64_t D) {
    jattn_strides s;
    s.token = D + 5;
    s.head = S * s.token + 3;
    s.batch = H * s.head + 3;
    return s;
}

static jattn_problem make_problem(const shape *s) {
    jattn_problem p = jattn_problem_flux(s->B, s->H, s->Sq, s->Skv, s->D);
    switch (s->lay) {
    case FLUX: break;
    case HEAD_MAJOR: p.out = jattn_strides_head_major(s->H, s->Sq, s->D); break;
    case TOKEN_MAJOR:
        p.q = jattn_strides_token_major(s->H, s->Sq, s->D);
        p.k = jattn_strides_token_major(s->H, s->Skv, s->D);
        p.v = jattn_strides_token_major(s->H, s->Skv, s->D);
        break;
    case FUSED_QKV: {
        /* [B, S, 3, H, D]: q at +0, k at +H*D, v at +2*H*D; the views share one buffer, which
         * the harness models as three tensors with the fused strides. */
        jattn_strides f = {s->Sq * 3 * s->H * s->D, s->D, 3 * s->H * s->D};
        p.q = p.k = p.v = f;
        p.out = jattn_strides_head_major(s->H, s->Sq, s->D);
        break;
    }
    case PADDED:
        p.q = padded(s->H, s->Sq, s->D);
        p.k = padded(s->H, s->Skv, s->D);
        p.v = padded(s->H, s->Skv, s->D);
        p.out = padded(s->H, s->Sq, s->D);
        break;
    }
    return p;
}

int main(int argc, char **argv) {
    jattn_backend backend;
    if (jt_backend_arg(argc, argv, "cpu", 1, NULL, &backend)) return 2;
    const char *name = jattn_backend_name(backend);
    if (!jt_backend_present(backend)) {
        printf("SKIP: backend %s is not present in this build or on this machine\n", name);
        return JT_SKIP;
    }
    const int quick = getenv("JATTN_TEST_QUICK") != NULL;
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ (uint64_t)backend * 0x9E3779B97F4A7C15ull);
    jt_tally tally = {0};

    jattn_precision precisions[2] = {JATTN_PRECISION_F32, JATTN_PRECISION_TF32};
    const int n_prec = jt_backend_takes_tf32(backend, 0) ? 2 : 1;

    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        if (quick && s->large) continue;
        jattn_problem p = make_problem(s);
        jt_case c;
        if (jt_case_init(&c, &p) != 0) {
            printf("FAIL allocation for shape %zu\n", si);
            jt_tally_add(&tally, 0);
            continue;
        }
        size_t len = strlen(c.label);
        snprintf(c.label + len, sizeof c.label - len, " %s", layout_names[s->lay]);
        for (int d = 0; d < JT_DIST_COUNT; d++) {
            jt_case_fill(&c, (jt_dist)d, &rng);
            jattn_status st = jt_case_reference(&c);
            if (st != JATTN_OK) {
                printf("FAIL reference %s: %s\n", c.label, jattn_last_error());
                jt_tally_add(&tally, 0);
                continue;
            }
            for (int pi = 0; pi < n_prec; pi++) {
                jattn_exec e = {0};
                e.backend = backend;
                e.precision = precisions[pi];
                jt_tally_add(&tally, jt_case_check(&c, &e, (int)((si + (size_t)d) % 2)));
            }
        }
        jt_case_free(&c);
    }
    char title[64];
    snprintf(title, sizeof title, "test_parity %s", name);
    return jt_tally_finish(&tally, title);
}
