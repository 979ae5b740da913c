/* Small calls of the cuda kernel the environment forces, each checked against the float64 reference: the
 * workload bench/gpu/battery.sh runs under compute-sanitizer (memcheck, racecheck, synccheck, initcheck)
 * once per tool and kernel (issue 37), and a test of its own (ctest, AUTO's kernels).
 *
 * JATTN_CUDA_KERNEL (v1, v6, v7) forces the forward's version, JATTN_CUDA_BWD_KERNEL (v3, v4) the
 * backward's; unset, AUTO chooses. Shapes with partial tiles at head dims the kernels take (64 and 128 for
 * the sm_90a ones, others for the portable ones; a single key, a single query), each with and without key
 * lengths (the key padding pre-pass, and the backward v3's zeroing of dk and dv), f32 and (forward) tf32,
 * lse and dlse, half on a caller workspace and half on the stream-ordered pool, so that every pre-pass of
 * the forced version (v6's and v7's splits of K and V, the backward v3's and v4's records) runs. Device
 * pointers on a non-blocking stream (inputs copied on it), outputs poisoned on it, every result against
 * the reference under the gate (normal inputs). A shape the forced version refuses (UNSUPPORTED: v6 at
 * head_dim 72) or hands to another version at selection (the backward v4 to v3 at head_dim 72) is left
 * out; a version that ran no call at all fails. Prints the kernels that ran.
 *
 * usage: test_cuda_kernels [forward|backward|all]. Exits 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "jattn_internal.h" /* cuda/cuda_internal.h */
#include "harness.h"

static jt_tally tally;

#define CUDA_OK(call)                                                                       \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* The kernels that ran, each once in the list. */
static char ran[1024];
static void note_kernel(const char *name) {
    if (!strstr(ran, name) && strlen(ran) + strlen(name) + 2 < sizeof ran) strcat(strcat(ran, " "), name);
}

static float *dev_copy(const float *h, int64_t n, cudaStream_t s) {
    float *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, (size_t)(n > 0 ? n : 1) * sizeof(float)));
    if (h) CUDA_OK(cudaMemcpyAsync(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, s));
    return d;
}

static void fetch(float *h, const float *d, int64_t n, cudaStream_t s) {
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
}

/* The forced versions' kernel name prefixes ("cuda_v6", "cuda_bwd_v4"; "" under AUTO): forward, backward. */
static char forced[2][16];

/* One shape: the forward (both precisions the backend takes) or the backward, with and without key lengths. */
static void run_shape(const int64_t sh[5], int backward, jt_rng *r, cudaStream_t s, int *calls) {
    const int64_t B = sh[0], H = sh[1], Sq = sh[2], Skv = sh[3], D = sh[4];
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    const int64_t nq = B * H * Sq * D, nk = B * H * Skv * D, nl = B * H * Sq;
    float *h[7];
    const int64_t n[7] = {nq, nk, nk, nq, nl, nq, nl}; /* q k v out lse dout dlse */
    for (int i = 0; i < 7; i++) {
        h[i] = malloc((size_t)n[i] * sizeof(float));
        if (!h[i]) exit(1);
        for (int64_t e = 0; e < n[i]; e++) h[i][e] = (float)jt_normal(r);
    }
    float *got = malloc((size_t)(nq > nk ? nq : nk) * sizeof(float)), *ref[3];
    for (int t = 0; t < 3; t++) ref[t] = malloc((size_t)(t ? nk : nq) * sizeof(float));
    int64_t kv_len[4];
    for (int64_t b = 0; b < B; b++) kv_len[b] = b % 2 ? 1 + (int64_t)(jt_uniform(r) * (double)Skv) : Skv - (Skv > 3);
    for (int padded = 0; padded < 2; padded++) {
        jattn_key_padding kp = {kv_len, NULL, 0, 0, 0};
        const jattn_key_padding *pad = padded ? &kp : NULL;
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_REF;
        /* the reference: out, lse (into h[3], h[4]: the backward's inputs), and the gradients */
        jattn_status st = jattn_forward_padded(NULL, &p, &e, h[0], h[1], h[2], pad, h[3], h[4]);
        if (st == JATTN_OK && backward)
            st = jattn_backward(NULL, &p, NULL, &e, h[0], h[1], h[2], h[3], h[4], h[5], h[6], pad, ref[0], ref[1],
                                ref[2]);
        if (st != JATTN_OK) {
            printf("FAIL reference: %s\n", jattn_last_error());
            jt_tally_add(&tally, 0);
            continue;
        }
        float *d[7];
        for (int i = 0; i < 7; i++) d[i] = dev_copy(h[i], n[i], s);
        float *dg[3] = {dev_copy(NULL, nq, s), dev_copy(NULL, nk, s), dev_copy(NULL, nk, s)};
        int64_t *dlen = NULL;
        CUDA_OK(cudaMalloc((void **)&dlen, sizeof kv_len));
        CUDA_OK(cudaMemcpyAsync(dlen, kv_len, sizeof kv_len, cudaMemcpyHostToDevice, s));
        jattn_key_padding dkp = {dlen, NULL, 0, 0, 0};
        for (int pi = 0; pi < (backward ? 1 : 2); pi++) {
            e.backend = JATTN_BACKEND_CUDA;
            e.memory = JATTN_MEMORY_DEVICE;
            e.cuda_stream = s;
            e.precision = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
            jattn_selection sel;
            st = backward ? jattn_backward_select(&p, &e, &sel) : jattn_select(&p, &e, &sel);
            if (st == JATTN_ERROR_UNSUPPORTED) continue; /* a forced version's limit (v6: head_dim 64 and 128) */
            if (st == JATTN_OK && forced[backward][0] &&
                strncmp(sel.kernel, forced[backward], strlen(forced[backward])))
                continue; /* the forced version hands this shape to another (its own run covers that one) */
            size_t need = 0;
            void *ws = NULL;
            if (padded == (int)(D % 2)) { /* half the calls on a caller workspace */
                st =
                    backward ? jattn_backward_workspace_size(&p, NULL, &e, &need) : jattn_workspace_size(&p, &e, &need);
                if (!jt_expect_status(st, JATTN_OK, "workspace size")) {
                    jt_tally_add(&tally, 0);
                    continue;
                }
                if (need) CUDA_OK(cudaMalloc(&ws, need));
                e.workspace = ws, e.workspace_bytes = need;
            }
            char what[160];
            snprintf(what, sizeof what, "%s B=%lld H=%lld Sq=%lld Skv=%lld D=%lld%s %s",
                     backward ? "backward" : "forward", (long long)B, (long long)H, (long long)Sq, (long long)Skv,
                     (long long)D, padded ? " kv_len" : "", pi ? "tf32" : "f32");
            if (backward) {
                for (int t = 0; t < 3; t++)
                    CUDA_OK(cudaMemsetAsync(dg[t], 0xFF, (size_t)(t ? nk : nq) * sizeof(float), s));
                st = jattn_backward(NULL, &p, NULL, &e, d[0], d[1], d[2], d[3], d[4], d[5], d[6], padded ? &dkp : NULL,
                                    dg[0], dg[1], dg[2]);
            } else {
                CUDA_OK(cudaMemsetAsync(dg[0], 0xFF, (size_t)nq * sizeof(float), s));
                CUDA_OK(cudaMemsetAsync(dg[1], 0xFF, (size_t)nl * sizeof(float), s));
                st = jattn_forward_padded(NULL, &p, &e, d[0], d[1], d[2], padded ? &dkp : NULL, dg[0], dg[1]);
            }
            int ok = jt_expect_status(st, JATTN_OK, what);
            if (ok) {
                note_kernel(jattn_cuda_last_kernel());
                (*calls)++;
                jattn_metrics m = {0};
                if (backward) {
                    for (int t = 0; t < 3 && ok; t++) {
                        fetch(got, dg[t], t ? nk : nq, s);
                        jattn_metrics_compute_dense(got, ref[t], t ? nk : nq, &m);
                        ok = jattn_metrics_pass_backward(&m);
                    }
                } else {
                    fetch(got, dg[0], nq, s);
                    jattn_metrics_compute_dense(got, h[3], nq, &m);
                    ok = jattn_metrics_pass(&m, e.precision);
                    fetch(got, dg[1], nl, s);
                    ok = ok && jattn_lse_pass(got, h[4], nl, e.precision);
                }
                if (!ok || getenv("JATTN_TEST_VERBOSE"))
                    printf("%s %s (%s): rel_l2 %.3g max_abs %.3g (seed %llu)\n", ok ? "ok  " : "FAIL", what,
                           jattn_cuda_last_kernel(), m.rel_l2, m.max_abs, (unsigned long long)jt_seed());
            }
            jt_tally_add(&tally, ok);
            CUDA_OK(cudaStreamSynchronize(s));
            (void)cudaFree(ws);
        }
        for (int i = 0; i < 7; i++) (void)cudaFree(d[i]);
        for (int t = 0; t < 3; t++) (void)cudaFree(dg[t]);
        (void)cudaFree(dlen);
    }
    for (int i = 0; i < 7; i++) free(h[i]);
    for (int t = 0; t < 3; t++) free(ref[t]);
    free(got);
}

int main(int argc, char **argv) {
    const char *part = argc > 1 ? argv[1] : "all";
    if (strcmp(part, "all") && strcmp(part, "forward") && strcmp(part, "backward")) {
        fprintf(stderr, "usage: %s [forward|backward|all]\n", argv[0]);
        return 2;
    }
    if (!jt_backend_present(JATTN_BACKEND_CUDA)) {
        printf("SKIP: no cuda backend or no CUDA device\n");
        return JT_SKIP;
    }
    const char *env[2] = {getenv("JATTN_CUDA_KERNEL"), getenv("JATTN_CUDA_BWD_KERNEL")};
    for (int b = 0; b < 2; b++)
        if (env[b] && env[b][0])
            snprintf(forced[b], sizeof forced[b], "cuda_%sv%s", b ? "bwd_" : "", env[b] + (env[b][0] == 'v'));
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0x5A71ull);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* partial tiles everywhere: 64 and 128 for the sm_90a kernels, 72 and 40 for the portable ones at other
     * widths, 256 (the half kernels of the backward v3), a single key (the forward v1), a single query */
    static const int64_t shapes[][5] = {{1, 2, 65, 130, 64}, {2, 1, 70, 33, 128}, {1, 1, 37, 77, 72},
                                        {2, 1, 20, 45, 40},  {1, 1, 17, 30, 256}, {1, 2, 1, 200, 128},
                                        {2, 2, 20, 1, 64}};
    int calls[2] = {0, 0};
    for (int backward = 0; backward < 2; backward++) {
        if (!strcmp(part, backward ? "forward" : "backward")) continue;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            run_shape(shapes[i], backward, &rng, s, &calls[backward]);
        if (!calls[backward]) {
            printf("FAIL the %s ran no call: the forced version took no shape\n", backward ? "backward" : "forward");
            jt_tally_add(&tally, 0);
        }
    }
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaDeviceSynchronize());
    printf("kernels that ran:%s\n", ran);
    char title[64];
    snprintf(title, sizeof title, "test_cuda_kernels %s", part);
    return jt_tally_finish(&tally, title);
}
