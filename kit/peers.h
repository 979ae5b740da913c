/* Peers that `jattn bench` measures beside jattn in the same run (CPU):
 *  - the machine's float32 FMA peak, from independent FMA chains held in registers;
 *  - the BLAS attention baseline (per head: sgemm Q K^T, row softmax, sgemm P V), through an
 *    OpenBLAS found at run time (dlopen), so the build never depends on it. */
#ifndef JATTN_PEERS_H
#define JATTN_PEERS_H

#include <stddef.h>

/* FMA peak in GFLOP/s on `threads` threads (median of repeats), for the widest vector ISA
 * this CPU has; *isa names it ("avx512", "avx2", "neon", "scalar").
 * @return 0, or -1 when it cannot be measured (message in err). */
int jattn_peer_fma_peak(int threads, double *gflops, const char **isa, char *err, size_t errlen);

/* BLAS attention on head-major q, k, v [H, S, D] into token-major out [S, H*D], `threads`
 * threads over heads (BLAS itself single-threaded), timed as the median of `reps` runs
 * after a warm-up. @return 0 and *ms; -1 when no BLAS library is found (message in err). */
int jattn_peer_blas_attention(int heads, int seq, int dim, int threads, int reps, const float *q, const float *k,
                              const float *v, float *out, double *ms, char *err, size_t errlen);

#endif
