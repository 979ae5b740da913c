/* GPU benchmark of the cuda backend's kernel versions, device-resident: for each shape and
 * each (version, precision), warm up, time `reps` calls each bracketed by CUDA events on a
 * stream of its own, report the median; then check the output against the float64 reference
 * of sampled query rows (kit/reference.h: about 16 rows per head, evenly spaced). Kernels that need a
 * device workspace (v6, v7: their split K and V) get one from the caller, sized by
 * jattn_workspace_size, as an engine passes it; the time includes their pre-pass.
 *
 * usage: jattn_gpu_bench [B,H,S,D | B,H,Sq,Skv,D ...]   (default: the five shapes of issue 4)
 * prints: RESULT <impl> <B> <H> <Sq> <D> <median us> <TFLOP/s> <rel_l2> <max_abs> <kernel> reps=N skv=Skv
 * FLOPs per call = 4 B H Sq Skv D. Inputs: standard normal, fresh per shape (seed printed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "clock.h"
#include "jattn.h"
#include "jattn_internal.h" /* cuda/cuda_internal.h: the kernel knobs */
#include "reference.h"
#include "rng.h"
#include "tensor.h"

#define CHECK(call)                                                                             \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

#define SAMPLE_ROWS 16

/* Median ms of `reps` calls (after `warmup`), all on stream s. */
static double time_calls(const jattn_problem *p, const jattn_exec *e, const float *q, const float *k, const float *v,
                         float *out, int warmup, int reps) {
    cudaEvent_t *ev = malloc(sizeof *ev * 2 * (size_t)reps);
    float *ms = malloc(sizeof *ms * (size_t)reps);
    double *ms_d = malloc(sizeof *ms_d * (size_t)reps);
    for (int i = 0; i < 2 * reps; i++) CHECK(cudaEventCreate(&ev[i]));
    cudaStream_t s = (cudaStream_t)e->cuda_stream;
    for (int i = 0; i < warmup + reps; i++) {
        if (i >= warmup) CHECK(cudaEventRecord(ev[2 * (i - warmup)], s));
        jattn_status st = jattn_forward(NULL, p, e, q, k, v, out, NULL);
        if (st != JATTN_OK) {
            fprintf(stderr, "forward: %s: %s\n", jattn_status_name(st), jattn_last_error());
            exit(1);
        }
        if (i >= warmup) CHECK(cudaEventRecord(ev[2 * (i - warmup) + 1], s));
    }
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < reps; i++) CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (int i = 0; i < reps; i++) ms_d[i] = ms[i];
    double med = kit_median(ms_d, reps);
    for (int i = 0; i < 2 * reps; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(ms);
    free(ms_d);
    return med;
}

int main(int argc, char **argv) {
    static const int default_shapes[][4] = {
        {1, 24, 1536, 128}, {1, 24, 4608, 128}, {1, 48, 4608, 128}, {1, 24, 16384, 128}, {1, 24, 1536, 64}};
    int n_shapes = argc > 1 ? argc - 1 : (int)(sizeof default_shapes / sizeof default_shapes[0]);
    const char *versions = getenv("JATTN_BENCH_VERSIONS"); /* e.g. "v7" to leave v1 out */
    if (!versions) versions = "v1,v7";
    const uint64_t seed = (uint64_t)time(NULL) * 2654435761u | 1;
    printf("seed %llu\n", (unsigned long long)seed);
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int si = 0; si < n_shapes; si++) {
        int B, H, S, D, Skv;
        if (argc > 1) {
            const int got = sscanf(argv[si + 1], "%d,%d,%d,%d,%d", &B, &H, &S, &Skv, &D);
            if (got == 4) D = Skv, Skv = S;
            if (got != 4 && got != 5) {
                fprintf(stderr, "shape must be B,H,S,D or B,H,Sq,Skv,D: %s\n", argv[si + 1]);
                return 2;
            }
        } else {
            B = default_shapes[si][0], H = default_shapes[si][1], S = default_shapes[si][2], D = default_shapes[si][3];
            Skv = S;
        }
        jattn_problem p = jattn_problem_flux(B, H, S, Skv, D);
        /* q and out: Sq rows, k and v: Skv rows (the larger count allocated for all four) */
        const size_t n = (size_t)B * H * (S > Skv ? S : Skv) * D;
        float *hq = malloc(n * 4), *hk = malloc(n * 4), *hv = malloc(n * 4), *ho = malloc(n * 4);
        jattn_rng_fill_normal(hq, (int64_t)n, seed + (uint64_t)si, 0);
        jattn_rng_fill_normal(hk, (int64_t)n, seed + (uint64_t)si, 1);
        jattn_rng_fill_normal(hv, (int64_t)n, seed + (uint64_t)si, 2);
        float *dq, *dk, *dv, *dout;
        CHECK(cudaMalloc((void **)&dq, n * 4));
        CHECK(cudaMalloc((void **)&dk, n * 4));
        CHECK(cudaMalloc((void **)&dv, n * 4));
        CHECK(cudaMalloc((void **)&dout, n * 4));
        /* on the calls' stream: it is non-blocking, so a cudaMemcpy on the legacy stream would not be ordered */
        CHECK(cudaMemcpyAsync(dq, hq, n * 4, cudaMemcpyHostToDevice, stream));
        CHECK(cudaMemcpyAsync(dk, hk, n * 4, cudaMemcpyHostToDevice, stream));
        CHECK(cudaMemcpyAsync(dv, hv, n * 4, cudaMemcpyHostToDevice, stream));
        const double flops = kit_flops(&p);
        kit_reference ref; /* about SAMPLE_ROWS query rows per head */
        char why[256];
        if (kit_reference_compute(&ref, &p, NULL, hq, hk, hv, flops * SAMPLE_ROWS / S, 0, why, sizeof why) !=
            JATTN_OK) {
            fprintf(stderr, "%s\n", why);
            return 1;
        }
        for (int ver = JATTN_CUDA_KERNEL_V1; ver < JATTN_CUDA_KERNEL_COUNT; ver++) {
            char vname[8];
            snprintf(vname, sizeof vname, "v%d", ver);
            if (!strstr(versions, vname) || !jattn_cuda_kernel_exists((jattn_cuda_kernel)ver)) continue;
            jattn_cuda_set_kernel((jattn_cuda_kernel)ver);
            for (int pi = 0; pi < 2; pi++) {
                if (ver == JATTN_CUDA_KERNEL_V1 && pi) continue; /* v1 is fp32 in both modes */
                jattn_exec e = {0};
                e.backend = JATTN_BACKEND_CUDA;
                e.memory = JATTN_MEMORY_DEVICE;
                e.precision = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
                e.cuda_stream = stream;
                jattn_selection sel;
                if (jattn_select(&p, &e, &sel) != JATTN_OK) continue;
                /* a caller workspace, as an engine would pass (v6's or v7's split K and V) */
                size_t ws_bytes = 0;
                void *ws = NULL;
                if (jattn_workspace_size(&p, &e, &ws_bytes) == JATTN_OK && ws_bytes > 0) {
                    CHECK(cudaMalloc(&ws, ws_bytes));
                    e.workspace = ws;
                    e.workspace_bytes = ws_bytes;
                }
                CHECK(cudaMemsetAsync(dout, 0xFF, n * 4, stream));
                double once = time_calls(&p, &e, dq, dk, dv, dout, 1, 1);
                int reps = (int)(400.0 / (once > 1e-3 ? once : 1e-3));
                reps = reps < 5 ? 5 : reps > 50 ? 50 : reps;
                double ms = time_calls(&p, &e, dq, dk, dv, dout, 2, reps);
                CHECK(cudaMemcpy(ho, dout, n * 4, cudaMemcpyDeviceToHost));
                kit_parity par;
                kit_reference_compare(&ref, &p, ho, NULL, e.precision, &par);
                const double rel = par.m.rel_l2, mx = par.m.max_abs;
                printf("RESULT jattn-%s-%s %d %d %d %d %.1f %.2f %.3g %.3g %s reps=%d skv=%d\n", vname,
                       pi ? "tf32" : "f32", B, H, S, D, ms * 1e3, flops / (ms * 1e-3) / 1e12, rel, mx, sel.kernel, reps,
                       Skv);
                fflush(stdout);
                if (ws) CHECK(cudaFree(ws));
            }
        }
        jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
        kit_reference_free(&ref);
        cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);
        free(hq), free(hk), free(hv), free(ho);
    }
    CHECK(cudaStreamDestroy(stream));
    return 0;
}
