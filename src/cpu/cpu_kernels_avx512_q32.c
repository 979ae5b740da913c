/* AVX-512F instance for short query blocks (17 to 32 queries): cpu_flash_f32_avx512_6x32, the
 * narrow table of cpu_kernels_avx512 (the driver runs a head's last block here when it holds
 * 32 queries or fewer, so that 48 - 32 lanes do not compute nothing).
 * scores: 6 keys x 32 queries = 12 zmm accumulators + 2 Qt vectors + 1 broadcast (the C kernel;
 *         the inline-asm tile is for 4 x 48 only).
 * P V:    12 head_dim rows x 32 queries = 24 zmm accumulators + 2 Pt vectors + 1 broadcast.
 * Compiled with -mavx512f -mfma (sources.cmake); run only when cpuid reports AVX-512F. */
#define JK_ISA "avx512"
#define JK(name) cpu_avx512_q32_##name
#define JK_TABLE cpu_kernels_avx512_q32
#define JK_VL 16
#define JK_QB 32 /* queries per task: JK_VL * 2 vectors */
#define JK_SJ 6
#define JK_DR 12
#define JK_BK 96
#define JK_DB 16
#define JK_GK 6 /* bwd_outer: 6 keys x 4 vectors of head_dim (24 accumulators) */
#define JK_GD 4
#define JK_NARROW (&cpu_kernels_avx512_q16)

#include "cpu_vocab_avx512.h"

#include "cpu_flash_template.h"
