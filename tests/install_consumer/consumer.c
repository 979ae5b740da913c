/* A program outside the jattn tree, built against an installed jattn (pkg-config or
 * find_package): one jattn_forward on a FLUX-layout problem with the default exec (the best
 * backend present), checked against the ref backend. Exit 0 when within the f32 gate. */
#include <jattn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    const char *label = argc > 1 ? argv[1] : "consumer";
    if (jattn_version_number() != JATTN_VERSION_NUMBER) {
        fprintf(stderr, "%s: header %s but library %s\n", label, JATTN_VERSION_STRING, jattn_version_string());
        return 1;
    }
    /* q, k, v head-major [B, H, S, D], out token-major [B, S, H*D]; Sq != Skv. */
    jattn_problem p = jattn_problem_flux(1, 4, 96, 80, 64);
    size_t nq = 4 * 96 * 64, nkv = 4 * 80 * 64;
    float *q = malloc(nq * sizeof *q), *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
    float *out = malloc(nq * sizeof *out), *ref = malloc(nq * sizeof *ref);
    if (!q || !k || !v || !out || !ref) return 1;
    unsigned long long s = 0x9E3779B97F4A7C15ull;
    float *arrays[3] = {q, k, v};
    size_t counts[3] = {nq, nkv, nkv};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < counts[a]; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            arrays[a][i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
    jattn_selection sel;
    jattn_status st = jattn_select(&p, NULL, &sel);
    if (st == JATTN_OK) st = jattn_forward(NULL, &p, NULL, q, k, v, out, NULL);
    if (st != JATTN_OK) {
        fprintf(stderr, "%s: %s: %s\n", label, jattn_status_name(st), jattn_last_error());
        return 1;
    }
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    st = jattn_forward(NULL, &p, &e, q, k, v, ref, NULL);
    if (st != JATTN_OK) {
        fprintf(stderr, "%s: ref: %s: %s\n", label, jattn_status_name(st), jattn_last_error());
        return 1;
    }
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < nq; i++) {
        double d = (double)out[i] - (double)ref[i];
        diff2 += d * d;
        ref2 += (double)ref[i] * (double)ref[i];
    }
    double rel_l2 = sqrt(diff2 / ref2);
    int ok = rel_l2 <= 2e-6; /* JATTN_GATE_F32_REL_L2 (kit/metrics.h; not installed) */
    printf("%s: jattn %s, backend %s, kernel %s: rel_l2 %.3g vs ref: %s\n", label, jattn_version_string(),
           sel.backend_name, sel.kernel, rel_l2, ok ? "OK" : "FAIL");
    free(q), free(k), free(v), free(out), free(ref);
    return ok ? 0 : 1;
}
