/* One instruction set's table of flash-attention kernels (cpu_kernels.h), written once over a
 * small vector vocabulary and instantiated per instruction set (cpu_kernels_<isa>.c). See
 * cpu_kernels.h for the formulation and the contract of each micro-kernel. This file holds
 * what the parts share and the table; the parts, included below in this order:
 *   cpu_microkernels_template.h  the micro-kernels (exp2, scores, softmax, P V) and the data
 *                                movement of a task (Q pack, output write, prefetch, row packing)
 *   cpu_forward_template.h       the forward task: a group of query blocks over the key blocks
 *   cpu_backward_template.h      the backward's own kernels and bwd_tile
 *
 * The including file defines, before including this file:
 *   JK_ISA               isa name (string), e.g. "avx512"
 *   JK(name)             the instance's symbol prefix, e.g. cpu_avx512_##name
 *   JK_TABLE             the table's name, e.g. cpu_kernels_avx512
 *   JK_VL                floats per vector; jv the vector type, and
 *   jv_zero() jv_set1(x) jv_load(p) jv_store(p, a) jv_bcast(p)    (load/store 64-byte aligned)
 *   jv_fma(a, b, c) = a*b + c   jv_mul  jv_add  jv_sub  jv_max(a, b) (NaN in b returns b)
 *   jv_round(x)          nearest integer, ties to even (|x| <= 2^22)
 *   jv_mul_pow2(p, n)    p * 2^n for integral n in [-127, 0] (NaN n or p gives NaN)
 *   jv_zero_if_below(x, t, y)  0 where x < t, else y (NaN x keeps y)
 *   jv_nan_to_zero(x)    0 where x is NaN, else x      jv_any_nan(x)  nonzero when a lane is NaN
 *   jv_min(a, b)         (NaN in b returns b)   jv_select_gt(a, b, x, y) = a > b ? x : y
 *   jv_fma_exact(a, b, c)  a*b + c rounded once (a true fused multiply-add)
 *   jv_loadu(p) jv_storeu(p, a)   any alignment
 *   jd                   half a jv's lanes in float64: jd_zero() jd_set1(x) jd_fma(a, b, c) jd_sub(a, b),
 *                        jd_lo(x) jd_hi(x) (lanes 0 .. VL/2 - 1 and the rest of a jv, widened),
 *                        jv_of_jd(lo, hi) (both rounded back into one jv)
 *   jv_transpose(jv r[JK_VL])     in place: lane j of r[i] <-> lane i of r[j]
 *   JK_DB                head_dim elements per block of the scores' blocked D-reduction
 *   JK_QB JK_SJ JK_DR JK_BK   the tile: QB queries (NQV = QB/VL vectors), SJ keys x QB scores per
 *                        scores tile, DR head_dim rows x QB per P V tile, BK keys per block.
 * and may define
 *   JK_NARROW            the table's `narrow` (default NULL): the same instruction set with a
 *                        smaller JK_QB, declared before this file is included
 *   JK_SCORES_FULL_TILE(D, k, ks, qt, st, sl)  its own compensated scores for a full SJ x QB tile
 *                        and D >= JK_DB: st, sl as scores_rows leaves them before its check,
 *                        nonzero when a lane's sl is not finite (scores_fix_nonfinite then runs).
 *   JK_SJP               keys per tile of the plain scores kernel (default JK_SJ; the plain
 *                        kernel sums each score alone, so the tile does not change its bits)
 *   JK_GK JK_GD          bwd_outer's tile: GK keys x GD vectors of head_dim (default 4 x 2)
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu_kernels.h"

#ifndef JK_NARROW
#define JK_NARROW NULL
#endif

#define JK_NQV (JK_QB / JK_VL)
#if JK_NQV * JK_VL != JK_QB
#error "JK_QB must be a multiple of JK_VL"
#endif
#define JK_STR2(x) #x
#define JK_STR(x) JK_STR2(x)
#define JK_KERNEL_NAME "cpu_flash_f32_" JK_ISA "_" JK_STR(JK_SJ) "x" JK_STR(JK_QB)
#define JK_BWD_KERNEL_NAME "cpu_flash_bwd_f32_" JK_ISA "_" JK_STR(JK_SJ) "x" JK_STR(JK_QB)

#ifndef JK_SJP
#define JK_SJP JK_SJ
#endif
#if JK_SJ > 12 || JK_DR > 12 || JK_SJP > 12
#error "tiles up to 12 rows: the edge dispatch below lists 12 cases"
#endif

#define JK_ALIGNED _Alignas(64)

#if defined(__GNUC__)
#define JK_INLINE static inline __attribute__((always_inline))
#define JK_UNROLL _Pragma("GCC unroll 16")
#else
#define JK_INLINE static inline
#define JK_UNROLL
#endif

/* Edge tiles: one fully unrolled instance per row count, chosen by a switch. */
/* clang-format off */
#define JK_EDGE_CASES(MAX, CALL) \
    JK_EDGE_CASE(MAX, 1, CALL) JK_EDGE_CASE(MAX, 2, CALL) JK_EDGE_CASE(MAX, 3, CALL) JK_EDGE_CASE(MAX, 4, CALL) \
    JK_EDGE_CASE(MAX, 5, CALL) JK_EDGE_CASE(MAX, 6, CALL) JK_EDGE_CASE(MAX, 7, CALL) JK_EDGE_CASE(MAX, 8, CALL) \
    JK_EDGE_CASE(MAX, 9, CALL) JK_EDGE_CASE(MAX, 10, CALL) JK_EDGE_CASE(MAX, 11, CALL) JK_EDGE_CASE(MAX, 12, CALL)
/* clang-format on */
#define JK_EDGE_CASE(MAX, N, CALL) \
    case N:                        \
        if ((N) <= (MAX)) CALL(N); \
        break;

#include "cpu_microkernels_template.h"
#include "cpu_forward_template.h"
#include "cpu_backward_template.h"

const cpu_kernels JK_TABLE = {
    JK_ISA,
    JK_KERNEL_NAME,
    JK_VL,
    JK_QB,
    JK_SJ,
    JK_SJP,
    JK_DR,
    JK_BK,
    JK_DB,
    JK(scores),
    JK(scores_plain),
    JK(softmax_block),
    JK(pv),
    JK(pv_exact),
    JK(exp2),
    JK(max_row_norm2),
    JK(task),
    JK_NARROW,
    JK_BWD_KERNEL_NAME,
    JK(bwd_outer),
    JK(bwd_tile),
};
