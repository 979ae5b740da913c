/* backward_v3_layout.cuh: the device workspace of the backward v3 (backward_v3_mma_f16x2.cu), written
 * by its pre-pass (backward_v3_split_f16x2.cu) and read by its kernels. Internal to src/cuda; internal
 * linkage.
 *
 * Each of q * scale, dout, k and v (tensor index kV3Q, kV3DO, kV3K, kV3V) is cut into records of 64 rows
 * (tokens) of one head; k and v rows are the attended keys of the batch in ascending order (key padding
 * compacted: record row r is key kv_index[b][r]), rows past the sequence (or past the attended keys) are
 * zeros. A record is two fp16 images of [64][Dp] (row-major, head_dim contiguous, columns D..Dp-1 zero):
 *   hi = fp16_rn(x 2^e),  lo = fp16_rn(x 2^e - hi)
 * and at Dp = 16 (head_dim <= 16) a third, tiny = fp16_rn(x 2^e - hi - lo) (fp16 subnormals below 2^-14:
 * an absolute error under 2^-25, 2^-39 of the record's largest), with one power of two e per record (its
 * largest finite magnitude to [2^14, 2^15), f16x2_split.cuh), so that the record's scale factors out of a
 * contraction over either of its indices (head_dim for S and dP, the rows for dV, dK and dQ). Regions, each
 * 256-byte aligned, in this order:
 *   img[t]      [B*H][T_t][parts][64][Dp] fp16      T_t = ceil(Sq / 64) for q, dout; ceil(Skv / 64) for k, v;
 *                                                   parts = bwd_v3_parts(Dp): hi, lo (and tiny)
 *   unscale[t]  [B*H][T_t] float 2^-e
 *   lse         [B*H][Tq * 64] float: the forward's lse of row r (natural log); -inf (a row with no key) and
 *               rows past seq_q as +inf, so that P = exp(S - lse) = 0 there
 *   dl          [B*H][Tq * 64] float2: Dl = dO.O - dlse summed in float64, as (hi, lo) floats; 0 past seq_q
 *   top         [B*H][Tq * 64] float4: written by the dQ kernel for every row below seq_q, read by the dK/dV
 *               kernel: (P, dP - Dl, key, 0) of the row's P >= 1/2 element (its dominant key, the attended
 *               index as an int's bits) with P and dP recomputed in float64; key -1 where the row has none
 * and for a masked call (a window part, a key bias or grouped-query heads; backward_v3_mask.cuh), written by
 * the pre-pass, unused otherwise:
 *   win         [B][Tq * 64] int2: the window (lo, hi) of keys of each query row (rows past the last segment
 *               and past seq_q: (Skv, Skv))
 *   wsum        [B][Tq * 4] int4: the summary of each 16 rows' windows
 *   bias        [B*H][Tk * 64] float: the key bias of each attended key (record row order), 0 past them
 * With grouped-query heads the k and v records (img[kV3K], img[kV3V], their unscales) are per key/value head:
 * [B*Hkv] in place of [B*H]. In a masked call the records hold non-finite values as 0, and the rows of the k
 * and v records of keys no query row of the group attends (backward_v3_mask.cuh, v3_key_reached) zeros.
 * The kernels copy 16-byte chunks of the images into shared rows of Dp + 8 halves (ldmatrix reads of 8
 * consecutive rows then fall on 8 different bank groups: (Dp + 8) / 8 is odd for every Dp below, and
 * (Dp / 2 + 8) / 8 for the half-width row images above Dp = 128). */
#ifndef JATTN_BACKWARD_V3_LAYOUT_CUH
#define JATTN_BACKWARD_V3_LAYOUT_CUH

#include <stdint.h>

namespace {

constexpr int kV3Rec = 64;    /* rows of a record */
constexpr int kV3Target = 14; /* a record's (and a P or dS row's) largest magnitude to [2^14, 2^15) */
constexpr int kV3Q = 0, kV3DO = 1, kV3K = 2, kV3V = 3;

/* The padded head dims the kernels are compiled for: D is rounded up to the first of them (the k16
 * slices of S and dP need a multiple of 16). */
inline int bwd_v3_padded_dim(int64_t d) {
    static const int dims[9] = {16, 32, 64, 80, 96, 128, 160, 192, 256};
    for (int i = 0; i < 9; ++i)
        if (d <= dims[i]) return dims[i];
    return 0;
}

/* fp16 parts per record value: three at Dp = 16. With D <= 16 a logit is a sum of a few products, and
 * two parts (22 of float32's 24 bits per operand) leave S and dP an error of ~|S| 2^-22 that the dQ and
 * dK cancellations of a peaky row amplify past the gate (D = 1 `large`: dq 1.5-2.9e-5); the third part
 * brings S and dP to float32's own rounding. */
__host__ __device__ constexpr int bwd_v3_parts(int64_t dp) { return dp <= 16 ? 3 : 2; }

struct BwdV3Layout {
    int64_t tq, tk, dp;
    int64_t img[4], unscale[4], lse, dl, top, win, wsum, bias, bytes;
};

inline int64_t bwd_v3_align(int64_t n) { return (n + 255) / 256 * 256; }

/* bh = B*H, bhkv = B*Hkv (bh without grouped-query heads). */
inline BwdV3Layout bwd_v3_layout(int64_t bh, int64_t bhkv, int64_t batch, int64_t seq_q, int64_t seq_kv,
                                 int64_t head_dim) {
    BwdV3Layout l;
    l.dp = bwd_v3_padded_dim(head_dim);
    l.tq = (seq_q + kV3Rec - 1) / kV3Rec;
    l.tk = (seq_kv + kV3Rec - 1) / kV3Rec;
    int64_t at = 0;
    for (int t = 0; t < 4; ++t) {
        const int64_t tiles = t < 2 ? bh * l.tq : bhkv * l.tk;
        l.img[t] = at;
        at += bwd_v3_align(tiles * bwd_v3_parts(l.dp) * kV3Rec * l.dp * 2);
    }
    for (int t = 0; t < 4; ++t) {
        const int64_t tiles = t < 2 ? bh * l.tq : bhkv * l.tk;
        l.unscale[t] = at;
        at += bwd_v3_align(tiles * 4);
    }
    l.lse = at;
    at += bwd_v3_align(bh * l.tq * kV3Rec * 4);
    l.dl = at;
    at += bwd_v3_align(bh * l.tq * kV3Rec * 8);
    l.top = at;
    at += bwd_v3_align(bh * l.tq * kV3Rec * 16);
    l.win = at;
    at += bwd_v3_align(batch * l.tq * kV3Rec * 8);
    l.wsum = at;
    at += bwd_v3_align(batch * l.tq * (kV3Rec / 16) * 16);
    l.bias = at;
    at += bwd_v3_align(bh * l.tk * kV3Rec * 4);
    l.bytes = at;
    return l;
}

} /* namespace */

#endif /* JATTN_BACKWARD_V3_LAYOUT_CUH */
