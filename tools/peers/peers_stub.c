/* Placeholder until the peers land: every peer reports itself unavailable. */
#include <stdio.h>

#include "peers.h"

int jattn_peer_fma_peak(int threads, double *gflops, const char **isa, char *err, size_t errlen) {
    (void)threads, (void)gflops, (void)isa;
    snprintf(err, errlen, "fma peak: not built");
    return -1;
}

int jattn_peer_blas_attention(int heads, int seq, int dim, int threads, int reps, const float *q, const float *k,
                              const float *v, float *out, double *ms, char *err, size_t errlen) {
    (void)heads, (void)seq, (void)dim, (void)threads, (void)reps, (void)q, (void)k, (void)v, (void)out, (void)ms;
    snprintf(err, errlen, "blas attention: not built");
    return -1;
}
