/* AVX2+FMA instance of the flash micro-kernels (cpu_flash_template.h): cpu_flash_f32_avx2_3x16.
 * scores: 3 keys x 16 queries = 6 ymm block accumulators (carrying the compensation) + 2 Qt
 *         vectors + 1 broadcast; the running sums live in st (L1), touched once per 16 head_dim
 *         elements.
 * P V:    6 head_dim rows x 16 queries = 12 ymm accumulators + 2 Pt vectors + 1 broadcast.
 * Compiled with -mavx2 -mfma (sources.cmake); run only when cpuid reports AVX2 and FMA. */
#define JK_ISA "avx2"
#define JK(name) cpu_avx2_##name
#define JK_TABLE cpu_kernels_avx2
#define JK_VL 8
#define JK_QB 16 /* queries per task: JK_VL * 2 vectors */
#define JK_SJ 3
#define JK_DR 6
#define JK_BK 96
#define JK_DB 16
#define JK_GK 6 /* bwd_outer: 6 keys x 2 vectors of head_dim (12 accumulators) */
#define JK_GD 2
#define JK_NARROW (&cpu_kernels_avx2_q8) /* the last, short block of a head */

#include "cpu_vocab_avx2.h"

#include "cpu_flash_template.h"
