/* AVX2+FMA instance for the shortest query blocks (1 to 8 queries): cpu_flash_f32_avx2_6x8,
 * the narrow table of cpu_kernels_avx2 (seq_q < 9, or a head's last block of 8 or fewer).
 * scores: 6 keys x 8 queries = 6 ymm accumulators + 1 Qt vector + 1 broadcast.
 * P V:    12 head_dim rows x 8 queries = 12 ymm accumulators + 1 Pt vector + 1 broadcast.
 * Compiled with -mavx2 -mfma (sources.cmake); run only when cpuid reports AVX2 and FMA. */
#define JK_ISA "avx2"
#define JK(name) cpu_avx2_q8_##name
#define JK_TABLE cpu_kernels_avx2_q8
#define JK_VL 8
#define JK_QB 8 /* queries per task: one vector */
#define JK_SJ 6
#define JK_DR 12
#define JK_BK 96
#define JK_DB 16
#define JK_GK 6 /* bwd_outer: 6 keys x 2 vectors of head_dim (12 accumulators) */
#define JK_GD 2

#include "cpu_vocab_avx2.h"

#include "cpu_flash_template.h"
