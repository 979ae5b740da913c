/* AVX-512F instance for the shortest query blocks (1 to 16 queries): cpu_flash_f32_avx512_8x16,
 * the narrow table of cpu_kernels_avx512_q32 (seq_q = 1, or a head's last block of 16 or fewer).
 * scores: 8 keys x 16 queries = 8 zmm accumulators (two FMA pipes x 4 cycles) + 1 Qt vector +
 *         1 broadcast.
 * P V:    12 head_dim rows x 16 queries = 12 zmm accumulators + 1 Pt vector + 1 broadcast.
 * Compiled with -mavx512f -mfma (sources.cmake); run only when cpuid reports AVX-512F. */
#define JK_ISA "avx512"
#define JK(name) cpu_avx512_q16_##name
#define JK_TABLE cpu_kernels_avx512_q16
#define JK_VL 16
#define JK_QB 16 /* queries per task: one vector */
#define JK_SJ 8
#define JK_DR 12
#define JK_BK 96
#define JK_DB 16
#define JK_GK 6 /* bwd_outer: 6 keys x 4 vectors of head_dim (24 accumulators) */
#define JK_GD 4

#include "cpu_vocab_avx512.h"

#include "cpu_flash_template.h"
