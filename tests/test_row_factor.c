/* A forward's out carries no error common to a row: in a near one-hot row (one key of weight
 * > 0.99) each output element's error relative to the float64 answer must be its own rounding, not
 * a factor the whole row shares (a row sum or its reciprocal rounded once for every element). The
 * backward's Dl = sum(dO * out) keeps such a factor whole, and dP - Dl amplifies it by
 * 1 / (1 - P_max): docs/DESIGN.md section 2's float32 floor assumes out rounded once per element.
 *
 * Draws rows of two keys at head dims 24 (a tail below the vector width), 64, 128 and 256, logits
 * of standard deviation ~5 (near one-hot rows frequent), fresh each run; for every near one-hot row
 * the least-squares factor f = sum((o - o64) o64) / sum(o64^2); the median |f| over 160 such rows
 * of each head dim must stay below 1.5e-8. Independent roundings of an element's few operations give
 * a median of 3-9e-9 (falling with the head dim: 60 seeds, at most 1.04e-8 at 24 with 60 rows); a
 * factor rounded once per row gives 2.6-3.0e-8 at every head dim (the cpu forward before 2026-12-07).
 *
 * usage: test_row_factor BACKEND      (exits 77 when the backend is absent) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { B = 1, H = 4, SQ = 16, SKV = 2, ROWS_WANTED = 160, MAX_DRAWS = 80 };

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One draw at head dim D: appends |f| of its near one-hot rows to fs (up to cap). @return rows
 * appended, or -1 when the call failed. */
static int draw(jattn_backend backend, int64_t D, jt_rng *rng, double *fs, int have, int cap) {
    const size_t nq = (size_t)B * H * SQ * D, nk = (size_t)B * H * SKV * D;
    float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v),
          *out = malloc(nq * sizeof *out);
    int added = -1;
    if (!q || !k || !v || !out) goto done;
    for (size_t i = 0; i < nq; i++) q[i] = (float)jt_normal(rng);
    for (size_t i = 0; i < nk; i++) k[i] = (float)jt_normal(rng), v[i] = (float)jt_normal(rng);
    jattn_problem p = jattn_problem_flux(B, H, SQ, SKV, D);
    p.q = p.out = jattn_strides_head_major(H, SQ, D);
    p.k = p.v = jattn_strides_head_major(H, SKV, D);
    p.scale = (float)(5.0 / sqrt((double)D)); /* logits of standard deviation 5 */
    jattn_exec e = {0};
    e.backend = backend;
    if (jattn_forward(NULL, &p, &e, q, k, v, out, NULL) != JATTN_OK) {
        printf("FAIL %s D=%lld: %s\n", jattn_backend_name(backend), (long long)D, jattn_last_error());
        goto done;
    }
    added = 0;
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < SQ && have + added < cap; i++) {
            const float *qi = q + (h * SQ + i) * D, *o = out + (h * SQ + i) * D;
            double s[SKV], w[SKV], m = -INFINITY, l = 0.0;
            for (int j = 0; j < SKV; j++) {
                const float *kj = k + (h * SKV + j) * D;
                double dot = 0.0;
                for (int64_t d = 0; d < D; d++) dot += (double)qi[d] * kj[d];
                s[j] = dot * (double)p.scale;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j < SKV; j++) l += (w[j] = exp(s[j] - m));
            if (fmax(w[0], w[1]) / l <= 0.99) continue;
            double num = 0.0, den = 0.0;
            for (int64_t d = 0; d < D; d++) {
                double ref = 0.0;
                for (int j = 0; j < SKV; j++) ref += w[j] / l * (double)v[(h * SKV + j) * D + d];
                num += ((double)o[d] - ref) * ref;
                den += ref * ref;
            }
            if (den > 0.0) fs[have + added++] = fabs(num / den);
        }
done:
    free(q), free(k), free(v), free(out);
    return added;
}

int main(int argc, char **argv) {
    jattn_backend backend;
    if (jt_backend_arg(argc, argv, "cpu", 1, NULL, &backend)) return 2;
    if (!jt_backend_present(backend)) {
        printf("SKIP: backend %s is not present in this build or on this machine\n", jattn_backend_name(backend));
        return JT_SKIP;
    }
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0x726F77666163746Full);
    jt_tally tally = {0};
    const int64_t dims[] = {24, 64, 128, 256};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        double fs[ROWS_WANTED];
        int have = 0, ok = 1;
        for (int t = 0; t < MAX_DRAWS && have < ROWS_WANTED; t++) {
            const int got = draw(backend, dims[di], &rng, fs, have, ROWS_WANTED);
            if (got < 0) {
                ok = 0;
                break;
            }
            have += got;
        }
        if (ok && have < ROWS_WANTED / 2) {
            printf("FAIL D=%lld: only %d near one-hot rows drawn (seed %llu)\n", (long long)dims[di], have,
                   (unsigned long long)jt_seed());
            ok = 0;
        }
        if (ok) {
            qsort(fs, (size_t)have, sizeof fs[0], cmp_double);
            const double median = fs[have / 2];
            ok = median <= 1.5e-8;
            printf("%s D=%lld: %d near one-hot rows, median |row factor| %.2e, largest %.2e (want median <= 1.5e-8)\n",
                   ok ? "ok  " : "FAIL", (long long)dims[di], have, median, fs[have - 1]);
            if (!ok) printf("     seed %llu\n", (unsigned long long)jt_seed());
        }
        jt_tally_add(&tally, ok);
    }
    char title[64];
    snprintf(title, sizeof title, "test_row_factor %s", jattn_backend_name(backend));
    return jt_tally_finish(&tally, title);
}
