#version 450
// vk_flash_f32_d<DMAX>_<BR>x64: exact-f32 flash attention forward, one module per head-dim family
// DMAX and row tile BR = 16 TM (TM = 4: 64 rows; TM = 8: 128 rows).
//
// Reads  q [nbh, seq_q,  DMAX]  k, v [nkv, seq_kv, DMAX]   dense, rows zero-padded from head_dim to DMAX;
//        query batch-head bh0 + y reads key/value batch-head (bh0 + y) / group (grouped-query heads:
//        each k, v head staged once and read by its group), row (bh0 + y) / group - kv_bh0 of k, v
//        keys: uint[batch] kv_end (keys >= kv_end[b] are never read), then [batch][words_per_row] bits
//              (bit j of row b set: key j attended), consulted when flags & 1, then from word
//              pc.scales one float per batch-head: the softmax scale of that head (the host's
//              exact power-of-two normalisation of q and k folded in, vk_backend.c); with
//              FLAG_WINDOWS each query row's key window [lo, hi) and each query tile's union and
//              intersection of them (attn_common.glsl: key_tiles, row_window); with FLAG_BIAS the
//              key bias rows, added to the scaled scores (-inf: the key is left out)
// Writes out [nbh, seq_q, DMAX] (dims >= head_dim are left as computed, the host copies head_dim of them)
//        lse [nbh, seq_q]  (when flags & 2; by the workgroups of dims slice 0)
// (nbh, nkv = the query and key/value batch-heads of the piece bound; the host gathers any strided
// layout into this one.)
//
// Grid: (ceil(seq_q / BR), nbh, DMAX / DO). A workgroup of 256 invocations owns BR query rows
// and DO output dims; invocation (ty, tx) = (id / 16, id % 16) owns rows TM ty .. TM ty + TM - 1.
// With windows (causal, block-causal, segments) a workgroup walks only the key tiles its rows'
// windows touch (the union), testing each row's window only in the tiles not inside all of them
// (boundary tiles), and the query tiles run last to first (under causal masks the longest first).
// Per 64-key tile:
//   QK^T:    S (BR x 64) over head_dim chunks of DK staged in shared memory (q and k transposed),
//            each invocation a TM x 4 register block: rows TM ty.., keys 4 tx..; the dot products
//            as fma chains of JOIN products joined into S by TwoSum (attn_common.glsl: a 512-long
//            float32 dot product of |x| ~ 1e3 inputs otherwise misses the gate); head dims to 32
//            carry them as pairs (COMP_PV)
//   row max: partial maxima through shared memory, the same 16-value reduction in every invocation
//   exp:     p = exp(fma(dot, scale, -m_new)) with the module's own exp (Cody-Waite + degree-7
//            polynomial): the scaled logit minus the row max in one rounding
//   rescale: O and the invocation's partial row sum l by exp(m_old - m_new)
//   PV:      P (transposed) in shared memory, in TM / 4 phases of 64 / (TM / 4) keys; V in chunks
//            of VK keys; each invocation a TM x DPT block of O (dims 4 tx + 64 h .. when DO is a
//            multiple of 64, else tx + 16 h), summed over the tile in fresh registers before it
//            joins O
// At the end the 16 partial row sums of a row are added in a fixed order: results are bitwise
// deterministic. Shared memory: at most 32 KiB (Apple, lavapipe: 32 KiB).
// No subgroup operations: the kernel assumes no subgroup size (lavapipe's is 8).
//
// Exactness does not rest on the driver: SignedZeroInfNanPreserve (so MoltenVK compiles without
// Metal fast math), the exponential computed here, `precise` on the sums of the softmax, explicit
// fma where a fused product is wanted. Loops over head_dim have compile-time trip counts and
// unroll (lavapipe stops an invocation after 65,535 executed loop iterations, silently).
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4466], 4461, 32);

#ifndef DMAX
#error "DMAX (the head-dim family) must be defined"
#endif
#ifndef TM
#define TM 4
#endif

#define WG 256
#define BR (16 * TM) // query rows per workgroup
#define BC 64        // keys per tile
#define TG (TM / 4)  // vec4 groups of rows per invocation
#define NPH (TM / 4) // P phases per tile
#define PH_KEYS (BC / NPH)
// (the GLSL preprocessor has no ?: operator)
#if TM == 4 && DMAX >= 32
#define DK 32 // head_dim chunk of QK^T
#elif TM == 4
#define DK DMAX
#else
#define DK 16 // (DMAX >= 16 always)
#endif
#if TM == 8
#define PAD 4 // row pitch padding of the q and k chunks (fewer bank conflicts on the transposed stores)
#else
#define PAD 0 // (the 64-row tiles use all 32 KiB already)
#endif
#define PQ (BR + PAD)
#define PK (BC + PAD)
#if DMAX < 256
#define DO DMAX // output dims per workgroup
#else
#define DO 256
#endif
#define NCHUNK (DMAX / DK)
#if (DO % 64) == 0
#define V_VEC4 1
#define DPT4 (DO / 64) // vec4 output blocks per invocation
#else
#define V_VEC4 0
#define DPT (DO / 16) // scalar output dims per invocation
#if DMAX <= 32
// Head dims up to 32: the logits and P V carried as float pairs (the products' errors by fma, the
// additions' by TwoSum), the row maximum as a pair (m, ml). With one to a few dims an output is
// often a near-cancelling sum of p v terms or a contest of two keys, and the rounding of a
// float32 logit or accumulation, relative to it, missed the f32 gate at head_dim 1 (rel_l2
// 2.2-2.9e-6 over the 2e-6 gate in a few of every hundred draws; the cpu backend's pairs pass).
#define COMP_PV 1
#endif
#endif
#ifndef COMP_PV
#define COMP_PV 0
#endif
#if DO <= 128
#define VK 16 // keys per v chunk
#else
#define VK 8
#endif

// Shared memory (vec4 units):
//   region A [0, SH_P): q chunk [DK][BR + PAD] at SH_Q and k chunk [DK][BC + PAD] at SH_K during QK^T;
//                       partial row values [16][BR] during the reductions; v chunk [VK][DO] during PV
//   region P [SH_P, SH_TOTAL): one phase of P, transposed: [PH_KEYS][BR]
#define SH_Q 0
#define SH_K (DK * PQ / 4)
#define SH_QK (DK * (PQ + PK) / 4)
#define SH_RED (16 * BR / 4)
#define SH_V (VK * DO / 4)
#define SH_P max(max(SH_QK, SH_RED), SH_V)
#define SH_TOTAL (SH_P + PH_KEYS * BR / 4)
shared vec4 sh[SH_TOTAL];

layout(local_size_x = WG) in;

#include "attn_common.glsl"

#if COMP_PV
// The exact rounding error of the float product p = a b, by Dekker's splitting (Vulkan does not
// promise that fma is fused: lavapipe's is not, and an fma-based error term there is 0); 0 where
// the splitting would overflow (|a|, |b| > 2^115: no such logit or weight reaches the gate).
float prod_err(float a, float b, float p) {
    precise float ca = 4097.0f * a, cb = 4097.0f * b;
    precise float ah = ca - (ca - a), bh = cb - (cb - b);
    precise float al = a - ah, bl = b - bh;
    precise float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return isinf(ca) || isinf(cb) || isinf(p) || isnan(e) ? 0.0f : e;
}
vec4 prod_err4(vec4 a, vec4 b, vec4 p) {
    return vec4(prod_err(a.x, b.x, p.x), prod_err(a.y, b.y, p.y), prod_err(a.z, b.z, p.z), prod_err(a.w, b.w, p.w));
}
#endif

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint tx = lid % 16u, ty = lid / 16u;
    const bool windowed = (pc.flags & FLAG_WINDOWS) != 0u;
    const bool biased = (pc.flags & FLAG_BIAS) != 0u;
    const uint qt = windowed ? gl_NumWorkGroups.x - 1u - gl_WorkGroupID.x : gl_WorkGroupID.x; // the query tile
    const uint row0 = qt * BR;
    const uint bh = gl_WorkGroupID.y; // inside the piece
    const uint slice = gl_WorkGroupID.z;
    const uint b = (pc.bh0 + bh) / pc.heads, head = (pc.bh0 + bh) % pc.heads;
    const uint kv_end = keys[b];
    const bool masked = (pc.flags & FLAG_MASK) != 0u;
    const uint mask_base = pc.batch + b * pc.words_per_row;
    const uint wrow = pc.window_batch * b; // the row of windows
    const uint bias_base = pc.bias + b * pc.bias_b + head * pc.bias_h;
    const uint q_base4 = bh * pc.seq_q * (DMAX / 4);
    const uint kv_base4 = ((pc.bh0 + bh) / pc.group - pc.kv_bh0) * pc.seq_kv * (DMAX / 4);
    const uint my_rows4 = ty * TG; // this invocation's first vec4 of rows in a [.][BR] array
    const float scale = uintBitsToFloat(keys[pc.scales + pc.bh0 + bh]);

    float m[TM]; // running row maxima (equal in the 16 invocations of a row)
    float l[TM]; // this invocation's partial row sums
    [[unroll]] for (int r = 0; r < TM; ++r) m[r] = -INF, l[r] = 0.0f;
#if COMP_PV
    float ml[TM]; // the running maximum's low part: the shift of the row is m + ml
    [[unroll]] for (int r = 0; r < TM; ++r) ml[r] = 0.0f;
#endif
#if V_VEC4
    vec4 o[TM][DPT4];
    [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT4; ++h) o[r][h] = vec4(0.0f);
#else
    float o[TM][DPT];
    [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT; ++h) o[r][h] = 0.0f;
#if COMP_PV
    float o_lo[TM][DPT]; // o + o_lo: the row's output sum as a pair
    [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT; ++h) o_lo[r][h] = 0.0f;
#endif
#endif

    uint t_begin, t_end, full_lo, full_hi;
    key_tiles(windowed, qt, wrow, kv_end, BC, t_begin, t_end, full_lo, full_hi);
    for (uint tile = t_begin; tile < t_end; ++tile) {
        const uint kv0 = tile * BC;
        const bool boundary = kv0 < full_lo || kv0 + BC > full_hi; // a row's window may end inside the tile

        // ---- QK^T: s[r][c] = q[TM ty + r] . k[kv0 + 4 tx + c] ------------------------------
        vec4 s[TM];
        [[unroll]] for (int r = 0; r < TM; ++r) s[r] = vec4(0.0f);
#if COMP_PV
        vec4 s_lo[TM]; // s + s_lo: the dot products as pairs; after the row max, tl (below)
        [[unroll]] for (int r = 0; r < TM; ++r) s_lo[r] = vec4(0.0f);
#else
        vec4 part[TM]; // the running sum of JOIN products, started from the last join's error
        [[unroll]] for (int r = 0; r < TM; ++r) part[r] = vec4(0.0f);
#endif
        [[dont_unroll]] for (uint c = 0u; c < NCHUNK; ++c) {
            barrier(); // region A free
            [[unroll]] for (uint i = 0u; i < BR * DK / 4 / WG; ++i) {
                const uint e = lid + WG * i; // vec4 element of the BR x DK chunk of q
                const uint row = e / (DK / 4), dq = e % (DK / 4);
                vec4 qv = vec4(0.0f);
                if (row0 + row < pc.seq_q) qv = q4[q_base4 + (row0 + row) * (DMAX / 4) + c * (DK / 4) + dq];
                [[unroll]] for (uint t = 0u; t < 4u; ++t) {
                    const uint at = (dq * 4u + t) * PQ + row; // transposed: [d][row]
                    sh[SH_Q + at / 4u][at % 4u] = qv[t];
                }
            }
            [[unroll]] for (uint i = 0u; i < BC * DK / 4 / WG; ++i) {
                const uint e = lid + WG * i; // vec4 element of the BC x DK chunk of k
                const uint key = e / (DK / 4), dq = e % (DK / 4);
                vec4 kv = vec4(0.0f);
                if (kv0 + key < kv_end) kv = k4[kv_base4 + (kv0 + key) * (DMAX / 4) + c * (DK / 4) + dq];
                [[unroll]] for (uint t = 0u; t < 4u; ++t) {
                    const uint at = (dq * 4u + t) * PK + key; // transposed: [d][key]
                    sh[SH_K + at / 4u][at % 4u] = kv[t];
                }
            }
            barrier();
#if COMP_PV
            vec4 part[TM]; // this chunk's sums
            [[unroll]] for (int r = 0; r < TM; ++r) part[r] = vec4(0.0f);
            vec4 part_lo[TM];
            [[unroll]] for (int r = 0; r < TM; ++r) part_lo[r] = vec4(0.0f);
#endif
            [[unroll]] for (uint d = 0u; d < DK; ++d) {
                const vec4 kk = sh[SH_K + d * (PK / 4) + tx];
                [[unroll]] for (uint g = 0u; g < TG; ++g) {
                    const vec4 a = sh[SH_Q + d * (PQ / 4) + my_rows4 + g];
#if COMP_PV
                    [[unroll]] for (uint r = 0u; r < 4u; ++r) {
                        precise vec4 y = vec4(a[r]) * kk;
                        const vec4 ey = prod_err4(vec4(a[r]), kk, y);
                        precise vec4 p0 = part[4u * g + r];
                        precise vec4 t = p0 + y;
                        precise vec4 bt = t - p0;
                        precise vec4 et = (p0 - (t - bt)) + (y - bt);
                        part_lo[4u * g + r] += ey + et;
                        part[4u * g + r] = t;
                    }
#else
                    [[unroll]] for (uint r = 0u; r < 4u; ++r) part[4u * g + r] = fma(vec4(a[r]), kk, part[4u * g + r]);
#endif
                }
#if !COMP_PV
                if ((d + 1u) % JOIN == 0u || d + 1u == DK)
                    [[unroll]] for (int r = 0; r < TM; ++r) join_dot4(s[r], part[r]);
#endif
            }
#if COMP_PV
            [[unroll]] for (int r = 0; r < TM; ++r) {
                precise vec4 s0 = s[r];
                precise vec4 p0 = part[r];
                precise vec4 t = s0 + p0;
                precise vec4 bt = t - s0;
                precise vec4 et = (s0 - (t - bt)) + (p0 - bt);
                s_lo[r] += part_lo[r] + et;
                s[r] = t;
            }
#endif
        }
#if !COMP_PV
        [[unroll]] for (int r = 0; r < TM; ++r) {
            precise vec4 folded = s[r] + part[r]; // the last join's error
            s[r] = folded;
        }
#endif

        // ---- scale, masks, row max ---------------------------------------------------------------
        // A key the key padding or a -inf bias leaves out gets -inf, and in boundary tiles so does a
        // key outside the row's window. With a key bias the row maximum is taken over the logits
        // s scale + bias (and with COMP_PV s holds the logit's high part from here on).
        float pmax[TM];
        [[unroll]] for (int r = 0; r < TM; ++r) pmax[r] = -INF;
#if COMP_PV
        float pml[TM]; // the largest tl among this invocation's keys at pmax
        [[unroll]] for (int r = 0; r < TM; ++r) pml[r] = -INF;
#endif
        bool key_ok[4];
        float kb[4]; // the keys' bias
        [[unroll]] for (int c = 0; c < 4; ++c) {
            const uint key = kv0 + tx * 4u + uint(c);
            key_ok[c] = attended(key, kv_end, masked, mask_base);
            kb[c] = 0.0f;
            if (biased && key_ok[c]) {
                kb[c] = key_bias(bias_base, key);
                key_ok[c] = kb[c] != -INF;
            }
        }
        [[unroll]] for (int r = 0; r < TM; ++r) {
            uint wlo = 0u, whi = 0xffffffffu;
            if (boundary) row_window(wrow, row0 + ty * TM + uint(r), wlo, whi);
            [[unroll]] for (int c = 0; c < 4; ++c) {
                const uint key = kv0 + tx * 4u + uint(c);
                const bool attend = key_ok[c] && key >= wlo && key < whi;
                s[r][c] = attend ? s[r][c] : -INF; // the raw dot product: scaled inside the exp below
#if COMP_PV
                // the scaled logit as t + tl: t = s scale rounded, tl its rounding error (exact by
                // fma) plus s_lo scale; with a bias, (t, tl) + bias by TwoSum, t kept in s
                float t = s[r][c] * scale;
                precise float tl = prod_err(s[r][c], scale, t) + s_lo[r][c] * scale;
                if (biased) {
                    precise float u = t + kb[c];
                    precise float bu = u - t;
                    precise float eu = (t - (u - bu)) + (kb[c] - bu);
                    tl = tl + eu;
                    t = u;
                    s[r][c] = u;
                }
                tl = attend && !isinf(t) ? tl : (attend ? 0.0f : -INF);
                s_lo[r][c] = tl;
                if (t > pmax[r]) pmax[r] = t, pml[r] = tl;
                else if (t == pmax[r]) pml[r] = max(pml[r], tl);
#else
                pmax[r] = max(pmax[r], biased ? fma(s[r][c], scale, kb[c]) : s[r][c] * scale); // the logit
#endif
            }
        }
        barrier(); // QK^T reads of region A done
        [[unroll]] for (uint g = 0u; g < TG; ++g)
            sh[tx * (BR / 4) + my_rows4 + g] = vec4(pmax[4u * g], pmax[4u * g + 1u], pmax[4u * g + 2u], pmax[4u * g + 3u]);
#if COMP_PV
        [[unroll]] for (uint g = 0u; g < TG; ++g)
            sh[SH_RED + tx * (BR / 4) + my_rows4 + g] = vec4(pml[4u * g], pml[4u * g + 1u], pml[4u * g + 2u], pml[4u * g + 3u]);
#endif
        barrier();
        float tmax[TM];
        [[unroll]] for (uint g = 0u; g < TG; ++g) {
            vec4 mx = sh[my_rows4 + g];
            [[unroll]] for (uint t = 1u; t < 16u; ++t) mx = max(mx, sh[t * (BR / 4) + my_rows4 + g]);
            [[unroll]] for (uint r = 0u; r < 4u; ++r) tmax[4u * g + r] = mx[r];
        }
#if COMP_PV
        float tml[TM]; // the tile's maximum as a pair (tmax, tml): the largest tl at tmax
        [[unroll]] for (uint g = 0u; g < TG; ++g) {
            vec4 lo = vec4(-INF);
            [[unroll]] for (uint t = 0u; t < 16u; ++t) {
                const vec4 mt = sh[t * (BR / 4) + my_rows4 + g], lt = sh[SH_RED + t * (BR / 4) + my_rows4 + g];
                [[unroll]] for (uint r = 0u; r < 4u; ++r)
                    if (mt[r] == tmax[4u * g + r]) lo[r] = max(lo[r], lt[r]);
            }
            [[unroll]] for (uint r = 0u; r < 4u; ++r) tml[4u * g + r] = lo[r];
        }
#endif

        // ---- exp, tile sums, rescale ------------------------------------------------------------
        float alpha[TM];
        [[unroll]] for (int r = 0; r < TM; ++r) {
#if COMP_PV
            // the running shift as a pair, the larger of (m, ml) and (tmax, tml) in that order
            const bool take = tmax[r] > m[r] || (tmax[r] == m[r] && tml[r] > ml[r]);
            const float m_new = take ? tmax[r] : m[r], ml_new = take ? tml[r] : ml[r];
            precise float shift = (m[r] - m_new) + (ml[r] - ml_new);
            alpha[r] = !take ? 1.0f : exp_f32(m[r] == -INF ? -INF : shift);
            m[r] = m_new;
            ml[r] = ml_new;
#else
            const float m_new = max(m[r], tmax[r]);
            alpha[r] = m_new == m[r] ? 1.0f : exp_f32(m[r] - m_new);
            m[r] = m_new;
#endif
            precise float tile_sum = 0.0f;
            [[unroll]] for (int c = 0; c < 4; ++c) {
                // scale s - m in one rounding (fma): the logit is never rounded on its own; the
                // row's largest (rounded, finite) logit gets x = 0, weight exactly 1, whether or not
                // the driver fuses the fma (Vulkan lets it compute fma as a product and a sum:
                // NVIDIA's did or did not with the same source, and a one-key row then missed being
                // its v row); an infinite one keeps x = NaN (inf - inf), the row NaN
#if COMP_PV
                const float t = biased ? s[r][c] : s[r][c] * scale; // (with a bias s holds the logit's high part)
                // (s scale - m) + (tl' - ml), tl' = the part of the exact logit below t: the key of
                // the pair maximum gets x = 0 exactly
                precise float xa = t - m_new; // exact where it matters (Sterbenz)
                precise float xb = s_lo[r][c] - ml_new;
                const float x = t == m_new && s_lo[r][c] == ml_new && !isinf(t) ? 0.0f : xa + xb;
#else
                const float t = s[r][c] * scale;
                float x = t == m_new && !isinf(t) ? 0.0f : fma(s[r][c], scale, -m_new);
                // with a bias: s scale + (bias - m) in one rounding, bias - m exact where it matters
                // (Sterbenz: a bias near the row maximum, -10000 on every key of a row included); the
                // row's largest logit is not singled out (its rounding would cost ulp(bias))
                if (biased && s[r][c] != -INF)
                    x = fma(s[r][c], scale, key_bias(bias_base, kv0 + tx * 4u + uint(c)) - m_new);
#endif
                const float p = s[r][c] == -INF ? 0.0f : exp_f32(x);
                s[r][c] = p;
                tile_sum += p;
            }
            precise float lr = l[r] * alpha[r];
            l[r] = lr + tile_sum;
        }

        // ---- PV: acc = P V over the tile, then O = O alpha + acc ------------------------------
#if V_VEC4
        vec4 acc[TM][DPT4];
        [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT4; ++h) acc[r][h] = vec4(0.0f);
#else
        float acc[TM][DPT];
        [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT; ++h) acc[r][h] = 0.0f;
#if COMP_PV
        float acc_lo[TM][DPT]; // the errors of acc's products and additions
        [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT; ++h) acc_lo[r][h] = 0.0f;
#endif
#endif
        [[unroll]] for (uint ph = 0u; ph < NPH; ++ph) {
            barrier(); // region A free (row maxima read); the previous phase's P and v chunk used
            if (tx / (16u / NPH) == ph) // this invocation's keys belong to this phase
                [[unroll]] for (uint c = 0u; c < 4u; ++c)[[unroll]] for (uint g = 0u; g < TG; ++g)
                    sh[SH_P + ((tx % (16u / NPH)) * 4u + c) * (BR / 4) + my_rows4 + g] =
                        vec4(s[4u * g][c], s[4u * g + 1u][c], s[4u * g + 2u][c], s[4u * g + 3u][c]);
            [[dont_unroll]] for (uint vc = 0u; vc < PH_KEYS / VK; ++vc) {
                if (vc > 0u) barrier(); // the previous v chunk used
                [[unroll]] for (uint i = 0u; i < (VK * DO / 4 + WG - 1) / WG; ++i) {
                    const uint e = lid + WG * i;
                    if (VK * DO / 4 % WG == 0 || e < VK * DO / 4) {
                        const uint j = e / (DO / 4), dv = e % (DO / 4);
                        const uint key = kv0 + ph * PH_KEYS + vc * VK + j;
                        vec4 vv = vec4(0.0f);
                        if (attended_biased(key, kv_end, masked, mask_base, biased, bias_base))
                            vv = v4[kv_base4 + key * (DMAX / 4) + slice * (DO / 4) + dv];
                        sh[e] = vv; // [j][DO]
                    }
                }
                barrier(); // v chunk (and P) written
                [[unroll]] for (uint j = 0u; j < VK; ++j) {
                    [[unroll]] for (uint g = 0u; g < TG; ++g) {
                        const vec4 pv = sh[SH_P + (vc * VK + j) * (BR / 4) + my_rows4 + g];
#if V_VEC4
                        [[unroll]] for (int h = 0; h < DPT4; ++h) {
                            const vec4 vv = sh[j * (DO / 4) + tx + 16u * uint(h)];
                            [[unroll]] for (uint r = 0u; r < 4u; ++r)
                                acc[4u * g + r][h] = fma(vec4(pv[r]), vv, acc[4u * g + r][h]);
                        }
#else
                        [[unroll]] for (int h = 0; h < DPT; ++h) {
                            const uint at = j * DO + tx + 16u * uint(h);
                            const float vv = sh[at / 4u][at % 4u];
                            [[unroll]] for (uint r = 0u; r < 4u; ++r) {
#if COMP_PV
                                precise float y = pv[r] * vv;
                                const float ey = prod_err(pv[r], vv, y); // the product's error
                                precise float a0 = acc[4u * g + r][h];
                                precise float t = a0 + y; // TwoSum(a0, y): t + et == a0 + y exactly
                                precise float bt = t - a0;
                                precise float et = (a0 - (t - bt)) + (y - bt);
                                acc_lo[4u * g + r][h] += ey + et;
                                acc[4u * g + r][h] = t;
#else
                                acc[4u * g + r][h] = fma(pv[r], vv, acc[4u * g + r][h]);
#endif
                            }
                        }
#endif
                    }
                }
            }
        }
#if V_VEC4
        [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT4; ++h) {
            precise vec4 scaled = o[r][h] * alpha[r];
            o[r][h] = scaled + acc[r][h];
        }
#elif COMP_PV
        [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT; ++h) {
            // (o, o_lo) = (o, o_lo) alpha + (acc, acc_lo), the sum's rounding kept in o_lo
            precise float scaled = o[r][h] * alpha[r];
            const float e_scaled = prod_err(o[r][h], alpha[r], scaled);
            precise float lo = o_lo[r][h] * alpha[r] + (e_scaled + acc_lo[r][h]);
            precise float a1 = acc[r][h];
            precise float t = scaled + a1;
            precise float bt = t - scaled;
            precise float et = (scaled - (t - bt)) + (a1 - bt);
            o[r][h] = t;
            o_lo[r][h] = lo + et;
        }
#else
        [[unroll]] for (int r = 0; r < TM; ++r)[[unroll]] for (int h = 0; h < DPT; ++h) {
            precise float scaled = o[r][h] * alpha[r];
            o[r][h] = scaled + acc[r][h];
        }
#endif
    }

    // ---- the row sums: 16 partials per row, added in a fixed order ---------------------------
    barrier();
    [[unroll]] for (uint g = 0u; g < TG; ++g)
        sh[tx * (BR / 4) + my_rows4 + g] = vec4(l[4u * g], l[4u * g + 1u], l[4u * g + 2u], l[4u * g + 3u]);
    barrier();
    float total[TM];
    [[unroll]] for (uint g = 0u; g < TG; ++g) {
        precise vec4 sum = sh[my_rows4 + g];
        [[unroll]] for (uint t = 1u; t < 16u; ++t) sum += sh[t * (BR / 4) + my_rows4 + g];
        [[unroll]] for (uint r = 0u; r < 4u; ++r) total[4u * g + r] = sum[r];
    }

    [[unroll]] for (int r = 0; r < TM; ++r) {
        const uint row = row0 + ty * TM + uint(r);
        if (row >= pc.seq_q) continue;
        const bool empty = total[r] == 0.0f; // no attended key: out row +0.0, lse -inf
        const uint ob = (bh * pc.seq_q + row) * DMAX + slice * DO;
#if V_VEC4
        [[unroll]] for (int h = 0; h < DPT4; ++h) {
            const vec4 y = empty ? vec4(0.0f) : o[r][h] / total[r];
            [[unroll]] for (int t = 0; t < 4; ++t) out1[ob + tx * 4u + 64u * uint(h) + uint(t)] = y[t];
        }
#else
#if COMP_PV
        [[unroll]] for (int h = 0; h < DPT; ++h) {
            precise float sum = isinf(o[r][h]) || isnan(o[r][h]) ? o[r][h] : o[r][h] + o_lo[r][h];
            out1[ob + tx + 16u * uint(h)] = empty ? 0.0f : sum / total[r];
        }
#else
        [[unroll]] for (int h = 0; h < DPT; ++h) out1[ob + tx + 16u * uint(h)] = empty ? 0.0f : o[r][h] / total[r];
#endif
#endif
        if ((pc.flags & 2u) != 0u && slice == 0u && tx == 0u)
#if COMP_PV
            lse1[bh * pc.seq_q + row] = empty ? -INF : m[r] + (ml[r] + log(total[r]));
#else
            lse1[bh * pc.seq_q + row] = empty ? -INF : m[r] + log(total[r]);
#endif
    }
}
