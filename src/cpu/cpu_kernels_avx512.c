/* AVX-512F instance of the flash micro-kernels (cpu_flash_template.h): cpu_flash_f32_avx512_4x48.
 * scores: 4 keys x 48 queries = 12 zmm block accumulators (carrying the compensation) + 3 Qt
 *         vectors + 1 broadcast; the 12 running sums live in st (L1), touched by the Fast2Sum
 *         once per 16 head_dim elements; per head_dim element 3 loads, 4 broadcasts, 12 FMAs.
 *         On x86-64 the full tile is one inline-asm block (cpu_scores_avx512_asm.h: two sets
 *         of 12 accumulators taking turns, each block's Fast2Sum among the next block's FMAs);
 *         edge tiles (fewer than 4 keys) and 32-bit x86 run the template's C kernel.
 * P V:    8 head_dim rows x 48 queries = 24 zmm accumulators + 3 Pt vectors + 1 broadcast;
 *         per key 3 loads, 8 broadcasts, 24 FMAs. D = 64, 128, 256 tile without an edge.
 * K[j][d] and V[j][d] are broadcast straight from K's and V's rows (vbroadcastss; GCC keeps a
 * broadcast used by three FMAs in a register instead of embedding {1to16} in each).
 * Compiled with -mavx512f -mfma (sources.cmake); run only when cpuid reports AVX-512F. */
#define JK_ISA "avx512"
#define JK(name) cpu_avx512_##name
#define JK_TABLE cpu_kernels_avx512
#define JK_VL 16
#define JK_QB 48 /* queries per task: JK_VL * 3 vectors */
#define JK_SJ 4
#define JK_DR 8
#define JK_BK 96
#define JK_DB 16
#define JK_SJP 8 /* the plain scores tile: 8 keys x 48 queries, 24 accumulators */
#define JK_GK 6  /* bwd_outer: 6 keys x 4 vectors of head_dim (24 accumulators) */
#define JK_GD 4
#define JK_NARROW (&cpu_kernels_avx512_q32) /* the last, short block of a head */

#include "cpu_vocab_avx512.h"

#include "cpu_scores_avx512_asm.h" /* JK_SCORES_FULL_TILE on x86-64 */
#include "cpu_flash_template.h"
