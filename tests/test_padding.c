/* Key padding parity: per-batch key lengths and boolean key masks (jattn_forward_padded) on
 * one backend against the float64 reference applying the same padding, over a table of
 * shapes and padding patterns, each with the four input distributions drawn fresh.
 *
 * Every case also proves the padding contract of jattn.h: the k and v rows of keys left out
 * are NaN (so a backend that reads them, or lets them reach the output, fails the gate); a
 * query row with no attended key comes out +0.0 everywhere with lse -inf; the mask and the
 * lengths are not modified.
 *
 * usage: test_padding BACKEND      (a jattn_backend_name, or auto). Exits 77 (skipped) when the
 *        backend is not present. A backend that takes tf32 precision is also checked in it;
 *        JATTN_CUDA_KERNEL=v1|v6|v7 picks the kernel version (bench/gpu/run.sh runs each). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef enum pattern {
    LEN_RANDOM,       /* kv_len[b] uniform in [0, Skv] */
    LEN_EDGES,        /* kv_len cycling through 0, 1, Skv, Skv - 1 */
    MASK_HALF,        /* each key attended with probability 1/2 */
    MASK_SPARSE,      /* probability 1/10 (and at least one key per batch) */
    MASK_ONE_MISSING, /* every key but one */
    MASK_ONE_TILE,    /* the attended keys lie inside one 64-key tile */
    MASK_LAST_HALF,   /* the last half of the keys masked: a padding mask */
    MASK_BROADCAST,   /* one random row for every batch (mask_batch = 1) */
    MASK_STRIDED,     /* rows 13 bytes apart beyond seq_kv */
    LEN_AND_MASK,     /* both: the keys below kv_len that the mask keeps */
    MASK_EMPTY_ROW,   /* batch 0 attends nothing, the others at random */
    PATTERN_COUNT
} pattern;

static const char *const pattern_names[] = {"len-random",       "len-edges",     "mask-half",      "mask-sparse",
                                            "mask-one-missing", "mask-one-tile", "mask-last-half", "mask-broadcast",
                                            "mask-strided",     "len-and-mask",  "mask-empty-row"};

typedef struct shape {
    int64_t B, H, Sq, Skv, D;
    int token_major; /* q, k, v token-major and out head-major, else the FLUX layout */
} shape;

static const shape shapes[] = {
    {3, 2, 33, 77, 64, 0},    {2, 3, 130, 200, 128, 1}, {2, 1, 1, 300, 128, 0}, {3, 2, 65, 1, 64, 0},
    {2, 2, 40, 129, 1, 1},    {2, 2, 50, 100, 80, 0},   {2, 2, 17, 257, 16, 1}, {2, 2, 70, 70, 256, 0},
    {2, 2, 100, 1000, 64, 0}, {2, 1, 64, 64, 128, 1},   {2, 2, 9, 33, 3, 0},
};

/* Padding arrays of one case; the struct handed to jattn points into them. */
typedef struct padding_case {
    jattn_key_padding kp;
    int64_t kv_len[8];
    uint8_t *mask; /* mask_batch rows of mask_batch_stride (or seq_kv) bytes */
    size_t mask_bytes;
} padding_case;

static void make_padding(padding_case *pc, pattern pat, const shape *s, jt_rng *r) {
    memset(&pc->kp, 0, sizeof pc->kp);
    const int64_t B = s->B, S = s->Skv;
    if (pat == LEN_RANDOM || pat == LEN_EDGES || pat == LEN_AND_MASK) {
        for (int64_t b = 0; b < B; b++) {
            const int64_t edges[4] = {0, 1, S, S - 1};
            pc->kv_len[b] = pat == LEN_EDGES ? edges[b % 4] : (int64_t)(jt_uniform(r) * (double)(S + 1));
            if (pc->kv_len[b] > S) pc->kv_len[b] = S;
        }
        pc->kp.kv_len = pc->kv_len;
    }
    if (pat == LEN_RANDOM || pat == LEN_EDGES) return;
    const int64_t rows = pat == MASK_BROADCAST ? 1 : B;
    const int64_t stride = pat == MASK_STRIDED ? S + 13 : S;
    pc->mask_bytes = (size_t)(rows * stride);
    pc->mask = malloc(pc->mask_bytes);
    if (!pc->mask) return;
    memset(pc->mask, 0xA5, pc->mask_bytes); /* gaps between strided rows: nonzero, never read */
    for (int64_t b = 0; b < rows; b++) {
        uint8_t *row = pc->mask + b * stride;
        const int64_t tile = (int64_t)(jt_uniform(r) * (double)((S + 63) / 64)), missing = jt_next(r) % (uint64_t)S;
        for (int64_t j = 0; j < S; j++) {
            int on;
            switch (pat) {
            case MASK_SPARSE: on = jt_uniform(r) < 0.1; break;
            case MASK_ONE_MISSING: on = j != missing; break;
            case MASK_ONE_TILE: on = j / 64 == tile && jt_uniform(r) < 0.6; break;
            case MASK_LAST_HALF: on = j < (S + 1) / 2; break;
            case MASK_EMPTY_ROW: on = b > 0 && jt_uniform(r) < 0.5; break;
            default: on = jt_uniform(r) < 0.5; break;
            }
            /* any nonzero byte attends */
            row[j] = on ? (uint8_t)(1 + jt_next(r) % 255) : 0;
        }
        if (pat == MASK_SPARSE) row[jt_next(r) % (uint64_t)S] = 1;
    }
    pc->kp.mask = pc->mask;
    pc->kp.mask_batch = rows;
    pc->kp.mask_keys = S;
    pc->kp.mask_batch_stride = pat == MASK_STRIDED ? stride : 0;
}

static int attends(const padding_case *pc, int64_t b, int64_t j) {
    const jattn_key_padding *kp = &pc->kp;
    if (kp->kv_len && j >= kp->kv_len[b]) return 0;
    if (!kp->mask) return 1;
    const int64_t stride = kp->mask_batch_stride ? kp->mask_batch_stride : kp->mask_keys;
    return kp->mask[(kp->mask_batch > 1 ? b : 0) * stride + j] != 0;
}

/* The k and v rows of every key left out become NaN: they must never reach the output. */
static void poison_left_out(jt_case *c, const padding_case *pc) {
    const jattn_problem *p = &c->p;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t j = 0; j < p->seq_kv; j++) {
            if (attends(pc, b, j)) continue;
            for (int64_t h = 0; h < p->heads; h++)
                for (int64_t d = 0; d < p->head_dim; d++) {
                    c->k[b * p->k.batch + h * p->k.head + j * p->k.token + d] = NAN;
                    c->v[b * p->v.batch + h * p->v.head + j * p->v.token + d] = NAN;
                }
        }
    jt_case_seal(c);
}

/* Rows with no attended key: every element +0.0 and (with lse) lse -inf. @return 1 when so. */
static int empty_rows_ok(const jt_case *c, const padding_case *pc, int want_lse) {
    const jattn_problem *p = &c->p;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t n = 0;
        for (int64_t j = 0; j < p->seq_kv; j++) n += attends(pc, b, j);
        if (n) continue;
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < p->seq_q; i++) {
                const float *o = c->out + b * p->out.batch + h * p->out.head + i * p->out.token;
                for (int64_t d = 0; d < p->head_dim; d++)
                    if (o[d] != 0.0f || signbit(o[d])) {
                        printf("FAIL %s: empty row b=%lld h=%lld i=%lld: out[%lld] = %g, want +0\n", c->label,
                               (long long)b, (long long)h, (long long)i, (long long)d, (double)o[d]);
                        return 0;
                    }
                const float l = c->lse[(b * p->heads + h) * p->seq_q + i];
                if (want_lse && !(isinf(l) && l < 0)) {
                    printf("FAIL %s: empty row b=%lld h=%lld i=%lld: lse %g, want -inf\n", c->label, (long long)b,
                           (long long)h, (long long)i, (double)l);
                    return 0;
                }
            }
    }
    return 1;
}

static jattn_problem make_problem(const shape *s) {
    jattn_problem p = jattn_problem_flux(s->B, s->H, s->Sq, s->Skv, s->D);
    if (s->token_major) {
        p.q = jattn_strides_token_major(s->H, s->Sq, s->D);
        p.k = jattn_strides_token_major(s->H, s->Skv, s->D);
        p.v = jattn_strides_token_major(s->H, s->Skv, s->D);
        p.out = jattn_strides_head_major(s->H, s->Sq, s->D);
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
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0x5bd1e995u ^ (uint64_t)backend);
    jt_tally tally = {0};
    const jattn_precision precisions[2] = {JATTN_PRECISION_F32, JATTN_PRECISION_TF32};
    const int n_prec = jt_backend_takes_tf32(backend, 0) ? 2 : 1;

    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        for (int pat = 0; pat < PATTERN_COUNT; pat++) {
            jattn_problem p = make_problem(s);
            jt_case c;
            padding_case pc = {0};
            if (jt_case_init(&c, &p) != 0) {
                printf("FAIL allocation for shape %zu\n", si);
                jt_tally_add(&tally, 0);
                continue;
            }
            size_t len = strlen(c.label);
            snprintf(c.label + len, sizeof c.label - len, " %s %s", s->token_major ? "token-major" : "flux",
                     pattern_names[pat]);
            const int dist = (int)((si + (size_t)pat) % JT_DIST_COUNT); /* every distribution meets every pattern */
            for (int rep = 0; rep < 2; rep++) {
                make_padding(&pc, (pattern)pat, s, &rng);
                if (pc.kp.mask_batch && !pc.mask) {
                    printf("FAIL allocation of a mask\n");
                    jt_tally_add(&tally, 0);
                    break;
                }
                c.padding = &pc.kp;
                jt_case_fill(&c, (jt_dist)((dist + rep * 2) % JT_DIST_COUNT), &rng);
                poison_left_out(&c, &pc);
                uint8_t *mask_copy = pc.mask ? malloc(pc.mask_bytes) : NULL;
                if (mask_copy) memcpy(mask_copy, pc.mask, pc.mask_bytes);
                int64_t len_copy[8];
                memcpy(len_copy, pc.kv_len, sizeof len_copy);
                jattn_status st = jt_case_reference(&c);
                if (st != JATTN_OK) {
                    printf("FAIL reference %s: %s\n", c.label, jattn_last_error());
                    jt_tally_add(&tally, 0);
                } else {
                    for (int pi = 0; pi < n_prec; pi++) {
                        jattn_exec e = {0};
                        e.backend = backend;
                        e.precision = precisions[pi];
                        const int want_lse = (int)((si + (size_t)pat + (size_t)rep) % 2);
                        int ok = jt_case_check(&c, &e, want_lse);
                        ok = ok && empty_rows_ok(&c, &pc, want_lse);
                        if (memcmp(len_copy, pc.kv_len, sizeof len_copy) != 0 ||
                            (mask_copy && memcmp(mask_copy, pc.mask, pc.mask_bytes) != 0)) {
                            printf("FAIL %s: the mask or the lengths were modified\n", c.label);
                            ok = 0;
                        }
                        jt_tally_add(&tally, ok);
                    }
                }
                free(mask_copy);
                free(pc.mask);
                pc.mask = NULL;
            }
            jt_case_free(&c);
        }
    }
    char title[64];
    snprintf(title, sizeof title, "test_padding %s", name);
    return jt_tally_finish(&tally, title);
}
