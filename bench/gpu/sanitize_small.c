/* A small workload for compute-sanitizer (memcheck, racecheck, synccheck, initcheck): every
 * kernel version and precision on small odd shapes, device pointers (aligned and 4-byte
 * aligned), one host-pointer call through a context. Exits non-zero on any failed call but
 * the forced sm_90a version's refusals (v6, UNSUPPORTED: D other than 64 or 128). */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "jattn.h"
#include "jattn_internal.h" /* cuda/cuda_internal.h: the kernel knobs */

#define CHECK(call)                                                                             \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

int main(void) {
    static const int shapes[][5] = {
        {1, 2, 65, 33, 64}, {2, 1, 7, 70, 128}, {1, 1, 17, 9, 256}, {1, 2, 40, 40, 24}, {1, 1, 5, 3, 512}};
    int failures = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int *s = shapes[si];
        jattn_problem p = jattn_problem_flux(s[0], s[1], s[2], s[3], s[4]);
        size_t nq = (size_t)s[0] * s[1] * s[2] * s[4], nk = (size_t)s[0] * s[1] * s[3] * s[4];
        float *h = malloc(sizeof(float) * (nq > nk ? nq : nk));
        for (size_t i = 0; i < (nq > nk ? nq : nk); i++) h[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        for (int shift = 0; shift < 2; shift++) {
            float *dq, *dk, *dv, *dout, *dlse;
            CHECK(cudaMalloc((void **)&dq, (nq + 1) * 4));
            CHECK(cudaMalloc((void **)&dk, (nk + 1) * 4));
            CHECK(cudaMalloc((void **)&dv, (nk + 1) * 4));
            CHECK(cudaMalloc((void **)&dout, (nq + 1) * 4));
            CHECK(cudaMalloc((void **)&dlse, (size_t)s[0] * s[1] * s[2] * 4));
            CHECK(cudaMemcpy(dq + shift, h, nq * 4, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(dk + shift, h, nk * 4, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(dv + shift, h, nk * 4, cudaMemcpyHostToDevice));
            for (int ver = 1; ver < JATTN_CUDA_KERNEL_COUNT; ver++) {
                if (!jattn_cuda_kernel_exists((jattn_cuda_kernel)ver)) continue; /* a removed version's number */
                jattn_cuda_set_kernel((jattn_cuda_kernel)ver);
                for (int pi = 0; pi < 2; pi++) {
                    jattn_exec e = {0};
                    e.backend = JATTN_BACKEND_CUDA;
                    e.memory = JATTN_MEMORY_DEVICE;
                    e.precision = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
                    jattn_status st =
                        jattn_forward(NULL, &p, &e, dq + shift, dk + shift, dv + shift, dout + shift, dlse);
                    if (st == JATTN_ERROR_UNSUPPORTED && ver == JATTN_CUDA_KERNEL_V6)
                        continue; /* the sm_90a version forced: D not 64/128 */
                    if (st != JATTN_OK) {
                        fprintf(stderr, "forward: %s: %s\n", jattn_status_name(st), jattn_last_error());
                        failures++;
                    }
                }
            }
            CHECK(cudaDeviceSynchronize());
            cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dlse);
        }
        jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
        jattn_ctx *ctx;
        float *out = malloc(nq * 4);
        jattn_ctx_create(&ctx);
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CUDA;
        if (jattn_forward(ctx, &p, &e, h, h, h, out, NULL) != JATTN_OK) {
            fprintf(stderr, "host forward: %s\n", jattn_last_error());
            failures++;
        }
        jattn_ctx_free(ctx);
        free(out);
        free(h);
    }
    printf("sanitize_small: %d failures\n", failures);
    return failures != 0;
}
