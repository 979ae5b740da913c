/* The compensated scores tile of the AVX-512 instance in one inline-asm block (x86-64 only;
 * included by cpu_kernels_avx512.c before cpu_flash_template.h, whose scores_rows runs it for
 * every full tile: JK_SJ = 4 keys x JK_QB = 48 queries, D >= JK_DB).
 *
 * reads  k rows j < 4 (D floats each, row stride ks, any alignment), qt [D][48] (64-byte aligned)
 * writes st, sl [4][48] (64-byte aligned): st + sl = sum_d k[j][d] qt[d][q], the pair as the
 *        template's scores_rows leaves it before its non-finite check.
 *
 * Numerics (NOTES.md §3): the C kernel's blocked, compensated sum with its carry one block
 * later. Blocks of JK_DB = 16 head_dim elements; two register sets A and B take turns as the
 * block accumulators. Block b's 16 products are summed by FMAs into its set, which enters the
 * block holding the rounding error e(b-2) of the Fast2Sum two blocks back; then Fast2Sum adds
 * it into the running sum in st (t = sum + c; c = (sum - t) + c; sum = t), leaving e(b) in the
 * same set for block b+2. So no FMA of block b+1 waits for block b's additions (in the C
 * kernel, where block b+1 starts from e(b), the FMA pipes idle ~15 cycles per 96 at each block
 * end): the Fast2Sums of block b are placed among the first 12 head_dim steps of block b+1,
 * one accumulator per step, and run on the add pipes beside its FMAs. At the end the two
 * pending errors are added: sl = e(last) + e(last-1). The same operations per block as the C
 * kernel (the error enters a block's FMA chain, one Fast2Sum per block), one more rounding of
 * an error term at the end; the bits differ from the C kernel's from the third block on.
 * Non-finite terms or an overflow leave the carried error non-finite for good (inf - inf),
 * which the returned flag reports (sum of all final errors minus itself is NaN).
 *
 * Registers: set A zmm0-11, set B zmm12-23 (row j, query vector v: 3j + v), Qt row zmm24-26,
 * K broadcasts zmm27-28, Fast2Sum temporaries zmm30-31. GCC and clang see one asm statement
 * and cannot rewrite the schedule (JOURNAL.md §2: every C version got copies or spills). */
#ifndef JATTN_CPU_SCORES_AVX512_ASM_H
#define JATTN_CPU_SCORES_AVX512_ASM_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)

#if JK_SJ != 4 || JK_QB != 48 || JK_VL != 16 || JK_DB != 16
#error "the asm scores tile is written for 4 keys x 48 queries, blocks of 16"
#endif

#define JK_ASM_STR2(x) #x
/* The instruction macros keep their hand grouping (one step, one Fast2Sum per line). */
/* clang-format off */
#define JK_ASM_STR(x) JK_ASM_STR2(x)
#define JK_ASM_ROWB JK_ASM_STR(JK_QB) "*4" /* bytes per row of qt, st, sl */
#define JK_ASM_VB JK_ASM_STR(JK_VL) "*4"   /* bytes per vector */

/* One key row j of one head_dim step dd: broadcast k[j][dd], 3 FMAs into the accumulators of
 * row j (registers P0-P2). */
#define JK_ASM_ROW(dd, KJ, B, P0, P1, P2)                                       \
    "vbroadcastss " #dd "*4(%[" #KJ "]), %%zmm" #B "\n\t"                        \
    "vfmadd231ps %%zmm24, %%zmm" #B ", %%zmm" #P0 "\n\t"                         \
    "vfmadd231ps %%zmm25, %%zmm" #B ", %%zmm" #P1 "\n\t"                         \
    "vfmadd231ps %%zmm26, %%zmm" #B ", %%zmm" #P2 "\n\t"
/* Head_dim step dd of a block into the register set A (zmm0-11) or B (zmm12-23): the 3 vectors
 * of qt row dd, 4 rows x 3 products. */
#define JK_ASM_QT(dd)                                                            \
    "vmovaps " #dd "*" JK_ASM_ROWB "(%[qt]), %%zmm24\n\t"                        \
    "vmovaps " #dd "*" JK_ASM_ROWB "+" JK_ASM_VB "(%[qt]), %%zmm25\n\t"          \
    "vmovaps " #dd "*" JK_ASM_ROWB "+2*" JK_ASM_VB "(%[qt]), %%zmm26\n\t"
#define JK_ASM_STEP_A(dd)                                                       \
    JK_ASM_QT(dd) JK_ASM_ROW(dd, k0, 27, 0, 1, 2) JK_ASM_ROW(dd, k1, 28, 3, 4, 5)  \
    JK_ASM_ROW(dd, k2, 27, 6, 7, 8) JK_ASM_ROW(dd, k3, 28, 9, 10, 11)
#define JK_ASM_STEP_B(dd)                                                       \
    JK_ASM_QT(dd) JK_ASM_ROW(dd, k0, 27, 12, 13, 14) JK_ASM_ROW(dd, k1, 28, 15, 16, 17) \
    JK_ASM_ROW(dd, k2, 27, 18, 19, 20) JK_ASM_ROW(dd, k3, 28, 21, 22, 23)
/* st offset of accumulator (j, v). */
#define JK_ASM_OFF(j, v) #j "*" JK_ASM_ROWB "+" #v "*" JK_ASM_VB
/* Fast2Sum of the block sum c (register E) into st[j][v], its rounding error left in E:
 * t = c + sum; c = c - (t - sum); sum = t (bit for bit the C kernel's (sum - t) + c: t - sum is
 * exactly -(sum - t); the sum is read from st by both operations). */
#define JK_ASM_F2S(j, v, E)                                                      \
    "vaddps " JK_ASM_OFF(j, v) "(%[st]), %%zmm" #E ", %%zmm31\n\t"               \
    "vsubps " JK_ASM_OFF(j, v) "(%[st]), %%zmm31, %%zmm30\n\t"                   \
    "vsubps %%zmm30, %%zmm" #E ", %%zmm" #E "\n\t"                               \
    "vmovaps %%zmm31, " JK_ASM_OFF(j, v) "(%[st])\n\t"
#define JK_ASM_ADD(X, Y) "vaddps %%zmm" #X ", %%zmm" #Y ", %%zmm" #Y "\n\t" /* Y = X + Y */
#define JK_ASM_F2S_SET(R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, R11)                            \
    JK_ASM_F2S(0, 0, R0) JK_ASM_F2S(0, 1, R1) JK_ASM_F2S(0, 2, R2) JK_ASM_F2S(1, 0, R3)                \
    JK_ASM_F2S(1, 1, R4) JK_ASM_F2S(1, 2, R5) JK_ASM_F2S(2, 0, R6) JK_ASM_F2S(2, 1, R7)                \
    JK_ASM_F2S(2, 2, R8) JK_ASM_F2S(3, 0, R9) JK_ASM_F2S(3, 1, R10) JK_ASM_F2S(3, 2, R11)
/* B += A, accumulator by accumulator. */
#define JK_ASM_ADD_A_TO_B                                                                                \
    JK_ASM_ADD(0, 12) JK_ASM_ADD(1, 13) JK_ASM_ADD(2, 14) JK_ASM_ADD(3, 15) JK_ASM_ADD(4, 16) JK_ASM_ADD(5, 17) \
    JK_ASM_ADD(6, 18) JK_ASM_ADD(7, 19) JK_ASM_ADD(8, 20) JK_ASM_ADD(9, 21) JK_ASM_ADD(10, 22) JK_ASM_ADD(11, 23)
/* Advance the K rows and qt by one block. */
#define JK_ASM_NEXT_BLOCK                                                        \
    "add $" JK_ASM_STR(JK_DB) "*4, %[k0]\n\t"                                    \
    "add $" JK_ASM_STR(JK_DB) "*4, %[k1]\n\t"                                    \
    "add $" JK_ASM_STR(JK_DB) "*4, %[k2]\n\t"                                    \
    "add $" JK_ASM_STR(JK_DB) "*4, %[k3]\n\t"                                    \
    "add $" JK_ASM_STR(JK_DB) "*" JK_ASM_ROWB ", %[qt]\n\t"
/* A block into set S (A or B) with the Fast2Sums of the other set T (the previous block) among
 * its first 12 steps, accumulator (j, v) of T in step 3j + v. */
#define JK_ASM_BLOCK(S, T0, T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11)                              \
    JK_ASM_STEP_##S(0) JK_ASM_F2S(0, 0, T0) JK_ASM_STEP_##S(1) JK_ASM_F2S(0, 1, T1)                    \
    JK_ASM_STEP_##S(2) JK_ASM_F2S(0, 2, T2) JK_ASM_STEP_##S(3) JK_ASM_F2S(1, 0, T3)                    \
    JK_ASM_STEP_##S(4) JK_ASM_F2S(1, 1, T4) JK_ASM_STEP_##S(5) JK_ASM_F2S(1, 2, T5)                    \
    JK_ASM_STEP_##S(6) JK_ASM_F2S(2, 0, T6) JK_ASM_STEP_##S(7) JK_ASM_F2S(2, 1, T7)                    \
    JK_ASM_STEP_##S(8) JK_ASM_F2S(2, 2, T8) JK_ASM_STEP_##S(9) JK_ASM_F2S(3, 0, T9)                    \
    JK_ASM_STEP_##S(10) JK_ASM_F2S(3, 1, T10) JK_ASM_STEP_##S(11) JK_ASM_F2S(3, 2, T11)                \
    JK_ASM_STEP_##S(12) JK_ASM_STEP_##S(13) JK_ASM_STEP_##S(14) JK_ASM_STEP_##S(15) JK_ASM_NEXT_BLOCK
#define JK_ASM_SET_A 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
#define JK_ASM_SET_B 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23
#define JK_ASM_EXPAND(M, ...) M(__VA_ARGS__)
#define JK_ASM_ZERO(E) "vpxord %%zmm" #E ", %%zmm" #E ", %%zmm" #E "\n\t"
#define JK_ASM_STORE(j, v, R, BASE) "vmovaps %%zmm" #R ", " JK_ASM_OFF(j, v) "(%[" #BASE "])\n\t"
#define JK_ASM_STORE_ALL(BASE, R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, R11)                        \
    JK_ASM_STORE(0, 0, R0, BASE) JK_ASM_STORE(0, 1, R1, BASE) JK_ASM_STORE(0, 2, R2, BASE)            \
    JK_ASM_STORE(1, 0, R3, BASE) JK_ASM_STORE(1, 1, R4, BASE) JK_ASM_STORE(1, 2, R5, BASE)            \
    JK_ASM_STORE(2, 0, R6, BASE) JK_ASM_STORE(2, 1, R7, BASE) JK_ASM_STORE(2, 2, R8, BASE)            \
    JK_ASM_STORE(3, 0, R9, BASE) JK_ASM_STORE(3, 1, R10, BASE) JK_ASM_STORE(3, 2, R11, BASE)
/* clang-format on */

/* The full tile; D >= JK_DB. The head_dim elements past the last full block (D % JK_DB) are
 * summed in C after the asm by the same scheme. @return nonzero when some lane's final e is not
 * finite (then the template recomputes those lanes). */
static inline __attribute__((always_inline)) int jk_scores_full_tile_avx512(int64_t D, const float *k, ptrdiff_t ks,
                                                                            const float *qt, float *st, float *sl) {
    const float *k0 = k, *k1 = k + ks, *k2 = k + 2 * ks, *k3 = k + 3 * ks;
    const float *qtp = qt;
    int64_t nblk = D / JK_DB;
    int bad;
    /* Sums and both sets start at 0: the Fast2Sums of set B inside the first block add 0 to 0. */
    __asm__ volatile(
        JK_ASM_ZERO(30) JK_ASM_ZERO(12) JK_ASM_ZERO(13) JK_ASM_ZERO(14) JK_ASM_ZERO(15) JK_ASM_ZERO(16) JK_ASM_ZERO(17)
            JK_ASM_ZERO(18) JK_ASM_ZERO(19) JK_ASM_ZERO(20) JK_ASM_ZERO(21) JK_ASM_ZERO(22) JK_ASM_ZERO(23)
                JK_ASM_STORE_ALL(st, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30) JK_ASM_ZERO(0) JK_ASM_ZERO(1)
                    JK_ASM_ZERO(2) JK_ASM_ZERO(3) JK_ASM_ZERO(4) JK_ASM_ZERO(5) JK_ASM_ZERO(6) JK_ASM_ZERO(7)
                        JK_ASM_ZERO(8) JK_ASM_ZERO(9) JK_ASM_ZERO(10) JK_ASM_ZERO(
                            11) ".p2align 6\n\t"
                                "1:\n\t" JK_ASM_EXPAND(JK_ASM_BLOCK, A, JK_ASM_SET_B) "dec %[n]\n\t"
                                                                                      "jz 2f\n\t" JK_ASM_EXPAND(
                                                                                          JK_ASM_BLOCK, B,
                                                                                          JK_ASM_SET_A) "dec %[n]\n\t"
                                                                                                        "jnz 1b\n\t"
        /* ended with a block into B: its Fast2Sum, then the final error B += A */
        JK_ASM_EXPAND(JK_ASM_F2S_SET, JK_ASM_SET_B) "jmp 3f\n\t"
                                                    "2:\n\t"
        /* ended with a block into A: the same with the sets' roles swapped */
        JK_ASM_EXPAND(JK_ASM_F2S_SET, JK_ASM_SET_A) "3:\n\t" JK_ASM_ADD_A_TO_B JK_ASM_STORE_ALL(
            sl, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23)
        /* bad = a lane of some e is not finite: (sum of the 12 e) - itself is NaN there. */
        JK_ASM_ADD(13, 12) JK_ASM_ADD(15, 14) JK_ASM_ADD(17, 16) JK_ASM_ADD(19, 18) JK_ASM_ADD(21, 20)
            JK_ASM_ADD(23, 22) JK_ASM_ADD(14, 12) JK_ASM_ADD(18, 16) JK_ASM_ADD(22, 20) JK_ASM_ADD(16, 12)
                JK_ASM_ADD(20, 12) "vsubps %%zmm12, %%zmm12, %%zmm12\n\t"
                                   "vcmpps $3, %%zmm12, %%zmm12, %%k1\n\t" /* 3: unordered */
                                   "kmovw %%k1, %k[bad]\n\t"
        : [k0] "+r"(k0), [k1] "+r"(k1), [k2] "+r"(k2), [k3] "+r"(k3), [qt] "+r"(qtp), [n] "+r"(nblk), [bad] "=r"(bad)
        : [st] "r"(st), [sl] "r"(sl)
        : "cc", "memory", "k1", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
          "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22",
          "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");

    /* The last D % JK_DB elements: FMAs onto the carried error, Fast2Sum (the C kernel's step). */
    const int64_t dt = D - D % JK_DB;
    if (dt == D) return bad;
    const float *kr[JK_SJ] = {k, k + ks, k + 2 * ks, k + 3 * ks};
    for (int j = 0; j < JK_SJ; j++)
        for (int v = 0; v < JK_QB / JK_VL; v++) {
            float *sp = st + j * JK_QB + v * JK_VL, *ep = sl + j * JK_QB + v * JK_VL;
            jv c = jv_load(ep);
            for (int64_t d = dt; d < D; d++) c = jv_fma(jv_bcast(kr[j] + d), jv_load(qt + d * JK_QB + v * JK_VL), c);
            const jv sum = jv_load(sp), t = jv_add(sum, c);
            c = jv_add(jv_sub(sum, t), c);
            jv_store(ep, c);
            jv_store(sp, t);
            bad |= jv_any_nan(jv_sub(c, c));
        }
    return bad;
}
#define JK_SCORES_FULL_TILE(D, k, ks, qt, st, sl) jk_scores_full_tile_avx512((D), (k), (ks), (qt), (st), (sl))

#endif /* x86-64, GNU C */
#endif /* JATTN_CPU_SCORES_AVX512_ASM_H */
