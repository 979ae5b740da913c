/* Hashes of the cpu backend's outputs (out, lse, dq, dk, dv) over a fixed battery of small
 * problems, for "no behaviour change" checks: build it against two libjattn builds and diff the
 * lines (bench/cpu/hash_compare.sh). Not a test: it asserts nothing, it only prints.
 *
 * usage: output_hashes THREADS[,THREADS...]     (JATTN_CPU_ISA picks the instruction set)
 * One line per (case, thread count): the kernels that ran and an FNV-1a hash of each output's
 * bytes. The inputs are fixed (splitmix64 draws), so the same library prints the same lines.
 * The battery covers the paths of the cpu backend: plain and compensated scores (normal and
 * peaky / large logits), head dims 1 to 256 (the exact path at D <= 16, odd dims, edge tiles),
 * narrow tables (seq_q below a block), cross-attention, key padding by length and by mask,
 * token-major layouts, dlse present and absent, and the backward's one- and two-phase
 * schedules (B*H below and above the thread count). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jattn.h"

typedef struct hcase {
    int64_t B, H, Sq, Skv, D;
    int dist;      /* 0 normal, 1 peaky (q, k x4), 2 large (uniform +-1e3 on q, k), 3 uniform [-1, 1] */
    int token;     /* token-major q, k, v, out (else head-major, out token-major as the flux problem) */
    int padding;   /* 0 none, 1 kv_len, 2 mask, 3 both */
    int with_dlse; /* the backward gets a dlse */
} hcase;

static const hcase cases[] = {
    {1, 2, 200, 200, 128, 0, 0, 0, 0}, {1, 2, 200, 200, 128, 1, 0, 0, 1}, {1, 3, 150, 200, 64, 2, 0, 0, 0},
    {2, 2, 100, 77, 72, 0, 1, 1, 1},   {2, 2, 100, 300, 48, 1, 0, 2, 0},  {1, 1, 300, 100, 16, 0, 0, 0, 1},
    {1, 2, 33, 50, 1, 3, 0, 0, 0},     {1, 2, 7, 130, 3, 0, 1, 0, 1},     {1, 1, 1, 200, 128, 1, 0, 0, 0},
    {1, 2, 300, 260, 256, 1, 0, 3, 1}, {1, 4, 97, 97, 100, 2, 1, 0, 0},   {3, 1, 64, 500, 128, 0, 0, 3, 0},
};

static uint64_t rng_state;
static uint64_t splitmix(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uniform01(void) { return ((double)(splitmix() >> 11) + 0.5) * 0x1p-53; }
static float draw(int dist) {
    if (dist == 2) return (float)(2e3 * uniform01() - 1e3);
    if (dist == 3) return (float)(2.0 * uniform01() - 1.0);
    return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()));
}
static float *fill(int64_t n, int dist, float mul) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = draw(dist) * mul;
    return x;
}
static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static int run_case(int ci, const hcase *c, int threads) {
    rng_state = 1000u + (uint64_t)ci;
    jattn_problem p = jattn_problem_flux(c->B, c->H, c->Sq, c->Skv, c->D);
    if (c->token) {
        p.q = p.out = jattn_strides_token_major(c->H, c->Sq, c->D);
        p.k = p.v = jattn_strides_token_major(c->H, c->Skv, c->D);
    }
    const int64_t nq = c->B * c->H * c->Sq * c->D, nk = c->B * c->H * c->Skv * c->D, nl = c->B * c->H * c->Sq;
    const float qk_mul = c->dist == 1 ? 4.0f : 1.0f;
    const int qk_dist = c->dist, v_dist = c->dist == 2 ? 0 : c->dist;
    float *q = fill(nq, qk_dist, qk_mul), *k = fill(nk, qk_dist, qk_mul), *v = fill(nk, v_dist, 1.0f);
    float *dout = fill(nq, 0, 1.0f), *dlse = fill(nl, 0, 1.0f);
    float *out = calloc((size_t)nq, sizeof *out), *lse = calloc((size_t)nl, sizeof *lse);
    float *dq = calloc((size_t)nq, sizeof *dq), *dk = calloc((size_t)nk, sizeof *dk);
    float *dv = calloc((size_t)nk, sizeof *dv);
    int64_t kv_len[4];
    uint8_t *mask = malloc((size_t)(c->B * c->Skv));
    for (int64_t b = 0; b < c->B; b++) kv_len[b] = c->Skv - (c->Skv / 3) * b % c->Skv;
    for (int64_t i = 0; i < c->B * c->Skv; i++) mask[i] = (splitmix() % 5) != 0;
    jattn_key_padding pad = {0};
    if (c->padding & 1) pad.kv_len = kv_len;
    if (c->padding & 2) pad.mask = mask, pad.mask_batch = c->B, pad.mask_keys = c->Skv;
    jattn_exec ex = {0};
    ex.backend = JATTN_BACKEND_CPU;
    ex.threads = threads;
    jattn_selection sf, sb;
    int rc = 0;
    if (jattn_select(&p, &ex, &sf) != JATTN_OK || jattn_backward_select(&p, &ex, &sb) != JATTN_OK ||
        jattn_forward_padded(NULL, &p, &ex, q, k, v, c->padding ? &pad : NULL, out, lse) != JATTN_OK ||
        jattn_backward(NULL, &p, NULL, &ex, q, k, v, out, lse, dout, c->with_dlse ? dlse : NULL,
                       c->padding ? &pad : NULL, dq, dk, dv) != JATTN_OK) {
        fprintf(stderr, "case %d threads %d: %s\n", ci, threads, jattn_last_error());
        rc = 1;
    } else
        printf("case %2d (%lld,%lld,%lld,%lld,%lld) threads %d %s %s out %016llx lse %016llx dq %016llx dk %016llx "
               "dv %016llx\n",
               ci, (long long)c->B, (long long)c->H, (long long)c->Sq, (long long)c->Skv, (long long)c->D, threads,
               sf.kernel, sb.kernel, (unsigned long long)fnv(out, (size_t)nq * 4),
               (unsigned long long)fnv(lse, (size_t)nl * 4), (unsigned long long)fnv(dq, (size_t)nq * 4),
               (unsigned long long)fnv(dk, (size_t)nk * 4), (unsigned long long)fnv(dv, (size_t)nk * 4));
    free(q), free(k), free(v), free(dout), free(dlse), free(out), free(lse), free(dq), free(dk), free(dv), free(mask);
    return rc;
}

int main(int argc, char **argv) {
    const char *list = argc > 1 ? argv[1] : "1,2";
    int rc = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (const char *s = list; *s;) {
            char *end;
            const long t = strtol(s, &end, 10);
            if (end == s || t < 1) {
                fprintf(stderr, "usage: output_hashes THREADS[,THREADS...]\n");
                return 2;
            }
            rc |= run_case((int)ci, &cases[ci], (int)t);
            s = *end == ',' ? end + 1 : end;
        }
    return rc;
}
