#version 450
// vk_cm_f32_d<DMAX>_64x64: exact-f32 flash attention forward on the tensor cores through
// VK_NV_cooperative_matrix (fp16 A/B, fp32 accumulators, 16 x 16 x 16, subgroups of 32), with each
// float32 operand carried as scaled fp16 parts: q and k in three (QK3: hi + mid + lo, every float32
// exactly; six products), v and P in two (hi + lo, 22 bits, as the cuda backend's v4 kernel:
// src/cuda/f16x2_split.cuh; three products). The scores need the third part: softmax turns an
// absolute score error into a relative weight error, and with two parts (22 bits; vk_cm2_f32_d*,
// QK3 off) a single peaky row missed the f32 gate where the float32 kernels pass. Built with
// EMULATE, the same data flow with the matrix products done by plain float32 loops
// (vk_cm_emul_f32_d<DMAX>_64x64): what lavapipe, which has no cooperative matrices, runs in tests.
//
// Reads  the split workspace of split_f16x2.comp (binding 6, f16x2_layout.glsl): q 2^eq, k 2^ek,
//        v 2^ev as fp16 hi + lo with their exponents; keys (kv_end, mask bits, per-head scale)
// Writes out [nbh, seq_q, DMAX], lse [nbh, seq_q] (when flags & 2)
//
// Grid: (ceil(seq_q / 64), nbh, 1), 128 invocations = 4 subgroups; subgroup g owns query rows
// 16 g .. 16 g + 15 of the workgroup's 64 and works alone (the workgroup barriers only keep the
// four in step; with SG_SYNC subgroup barriers instead). Per 64-key tile, subgroup g:
//   S:  the 16 x 64 scores, one 16 x 16 block after the other; over the DMAX / 16 k16 steps the
//       products hi*hi + (lo*hi + hi*lo + mid*mid + mid*hi + hi*mid) (those below 2^-33 left out;
//       without QK3 hi*hi + (lo*hi + hi*lo), 2^-22): hi*hi in DMAX / 32 chains of two steps (the
//       fp32 accumulation error grows with the length of a chain: in the tensor core, as the cuda
//       kernel found, and in the emulation; attn_f32.comp sums 32-dim chunks the same way), the
//       corrections in one more; joined per element in a fixed order, chains then corrections, or
//       the chains alone where they are infinite (an Inf in q or k keeps its sign: its
//       corrections are NaN). Stored to shared memory.
//   softmax: lane l owns row l / 2 and keys 32 (l % 2) .. + 31: the dot product = S 2^-(eq + ek)
//       (exact), key padding, the row maximum (the two lanes through shared memory), the weights
//       with attn_common.glsl's exponential exactly as attn3_f32.comp (the row's largest logit at
//       weight exactly 1), the lane's partial row sum (tile sum, then joined), P 2^15 (P <= 1)
//       split into fp16 hi + lo in shared memory.
//   PV: per 64-column half of head_dim, a fresh accumulator per 16 x 16 block of O_tile = P V
//       over the tile's 64 keys (lo*hi, hi*lo, hi*hi in that order: the small terms first),
//       stored to shared memory; lane l then joins its 32 columns of row l / 2:
//       O = O alpha + O_tile 2^-(15 + ev) (the tile sum before it joins the running sum).
// At the end the two lanes' partial row sums are added in a fixed order: bitwise deterministic.
// The running O (64 floats per lane) lives in registers in a known layout; the matrices' element
// layout is the driver's and is only used element-wise between matrices of one type.
// Shared memory: S / O_tile [4][16][64] float, P hi and lo [4][2][16][64] fp16, [4][32] floats
// for the row maxima and sums: 32.5 KiB.
// Opt-in (JATTN_VK_KERNEL=10): on the H200 it measured 5-6.6 TFLOP/s, below the SIMT kernels, and
// its splits were then miscompiled (src/vulkan/NOTES.md, "The tensor-core kernel").
// Exactness as the other kernels: SignedZeroInfNanPreserve, the exponential computed here,
// `precise` joins, no float32 denormal from the host (vk_range.c); the products are exact in the
// tensor core (11 x 11 bits) and hi + lo keeps 22 bits of each operand (rel. error <= 2^-22).
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#ifndef EMULATE
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#ifdef SG_SYNC
#extension GL_KHR_shader_subgroup_basic : require
#endif
#endif

spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4466], 4461, 32);

#ifndef DMAX
#error "DMAX must be defined"
#endif
#if DMAX != 64 && DMAX != 128
#error "attn_cm_f32.comp is built for DMAX 64 and 128"
#endif

#include "attn_common.glsl"
layout(std430, binding = 6) readonly buffer WsBuf4 { uvec4 ws4[]; };
layout(std430, binding = 6) readonly buffer WsBuf1 { uint ws1[]; };
#include "f16x2_layout.glsl"

layout(local_size_x = 128) in;

#define NS (DMAX / 16)  // k16 steps of S
#define NCH (NS / 2)    // hi*hi chains of S (two k16 steps, 32 dims, each)
#define NHALF (DMAX / 64) // 64-column halves of O
#define SH_S_SG (16 * 64)      // floats of one subgroup's S / O_tile block
#define SH_P_SG (2 * 16 * 64 / 8) // uvec4 of one subgroup's P hi + lo
#define SH_P_LO (16 * 64 / 8)     // uvec4 offset of P lo

shared float shS[4 * SH_S_SG];
shared uvec4 shP4[4 * SH_P_SG];
shared float red[4 * 32];

uint g_lane;

// What orders a subgroup's shared-memory stores before its lanes' loads: the workgroup barrier, or
// with SG_SYNC (vk_cm_sg_f32_d*, JATTN_VK_KERNEL=13) the subgroup's own (nothing in shared memory
// crosses subgroups), which lets the four subgroups run out of step. The emulation, on devices with
// other subgroup sizes, always uses the workgroup barrier.
#if defined(SG_SYNC) && !defined(EMULATE)
#define SYNC() subgroupBarrier()
#else
#define SYNC() barrier()
#endif

#ifndef EMULATE
#define FRAG fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define ACC_ZERO ACC(0.0f)
#define ACC_ADD(a, b) ((a) + (b))
#define LOAD_WS(f, off, stride, col) coopMatLoadNV(f, ws4, off, stride, col)
#define LOAD_P(f, off, stride) coopMatLoadNV(f, shP4, off, stride, false)
#define MULADD(a, b, c) coopMatMulAddNV(a, b, c)
#define STORE_S(a, off, stride) coopMatStoreNV(a, shS, off, stride, false)
#define STORE_C(a, off, stride) coopMatStoreNV(a, shP4, off, stride, false)
#define INNER [[unroll]]
#else
// The emulation: a fragment is where its 16 x 16 fp16 matrix lies (src 0: the workspace, 1: P in
// shared memory; off and stride in uvec4); an accumulator holds lane l's 8 elements, row l / 2,
// columns 8 (l % 2) .. + 7.
struct FRAG {
    uint src, off, stride;
    bool col;
};
struct ACC {
    float e[8];
};
#define ACC_ZERO ACC(float[8](0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f))
#define ACC_ADD(a, b) emul_add(a, b)
#define LOAD_WS(f, o, s, c) f = FRAG(0u, o, s, c)
#define LOAD_P(f, o, s) f = FRAG(1u, o, s, false)
#define MULADD(a, b, c) emul_muladd(a, b, c)
#define STORE_S(a, o, s) emul_store(a, o, s)
#define STORE_C(a, o, s) emul_store_p(a, o, s)
#define INNER [[dont_unroll]]
float frag_at(FRAG f, uint r, uint c) {
    const uint h = f.off * 8u + (f.col ? c * f.stride * 8u + r : r * f.stride * 8u + c); // fp16 index
    const uint w = f.src == 0u ? ws1[h / 2u] : shP4[h / 8u][(h / 2u) % 4u];
    return unpackHalf2x16(w)[h % 2u];
}
ACC emul_muladd(FRAG a, FRAG b, ACC c) {
    const uint r = g_lane / 2u, c0 = 8u * (g_lane % 2u);
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        float t = c.e[i];
        [[unroll]] for (uint k = 0u; k < 16u; ++k) t = fma(frag_at(a, r, k), frag_at(b, k, c0 + i), t);
        c.e[i] = t;
    }
    return c;
}
void emul_store(ACC a, uint off, uint stride) {
    const uint r = g_lane / 2u, c0 = 8u * (g_lane % 2u);
    [[unroll]] for (uint i = 0u; i < 8u; ++i) shS[off + r * stride + c0 + i] = a.e[i];
}
void emul_store_p(ACC a, uint off, uint stride) { // float32 into shP4 (off, stride in uvec4)
    const uint r = g_lane / 2u, c0 = 8u * (g_lane % 2u);
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        const uint w = off * 4u + r * stride * 4u + c0 + i;
        shP4[w / 4u][w % 4u] = floatBitsToUint(a.e[i]);
    }
}
ACC emul_add(ACC a, ACC b) {
    [[unroll]] for (uint i = 0u; i < 8u; ++i) a.e[i] += b.e[i];
    return a;
}
#endif

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = lid / 32u, lane = lid % 32u;
    g_lane = lane;
    const uint r = lane / 2u, part = lane % 2u; // softmax and O: row r of the subgroup, keys / columns part
    const uint row0 = gl_WorkGroupID.x * 64u + 16u * sg;
    const uint bh = gl_WorkGroupID.y;
    const uint b = (pc.bh0 + bh) / pc.heads;
    const uint kv_end = keys[b];
    const bool masked = (pc.flags & 1u) != 0u;
    const uint mask_base = pc.batch + b * pc.words_per_row;
    const float scale = uintBitsToFloat(keys[pc.scales + pc.bh0 + bh]);
    const uint wq4 = (ws_q(bh) + row0 * WS_RQ) / 4u, wk4 = ws_k(bh) / 4u, wv4 = ws_v(bh) / 4u; // uvec4
    const uint rq4 = WS_RQ / 4u, rv4 = WS_RV / 4u, part4 = DMAX / 8u; // row strides, one part, in uvec4
    const int eq = int(ws1[ws_eq(bh) + row0 + r]);
    const uint s_base = sg * SH_S_SG, p_base = sg * SH_P_SG;

    float m = -INF, l = 0.0f;
    float o[NHALF][32];
    [[unroll]] for (int h = 0; h < NHALF; ++h)[[unroll]] for (int j = 0; j < 32; ++j) o[h][j] = 0.0f;

    const uint n_tiles = (kv_end + 63u) / 64u;
    [[dont_unroll]] for (uint tile = 0u; tile < n_tiles; ++tile) {
        const uint kv0 = tile * 64u;

        // ---- S = (q 2^eq)(k 2^ek)^T, 16 x 64, three products ---------------------------------
        // per 16-key block kb: hi*hi in NCH chains of 32 dims (as attn_f32.comp's 32-dim chunks),
        // the corrections in one; the chains joined in a fixed order, then the corrections
        [[dont_unroll]] for (uint kb = 0u; kb < 4u; ++kb) {
            ACC hh[NCH], cc = ACC_ZERO;
            [[unroll]] for (int c = 0; c < NCH; ++c) hh[c] = ACC_ZERO;
            INNER for (uint s = 0u; s < NS; ++s) {
                FRAG qh, ql, kh, kl; // k^T blocks: column-major views of the k rows
                LOAD_WS(qh, wq4 + 2u * s, rq4, false);
                LOAD_WS(ql, wq4 + (WS_PARTS - 1) * part4 + 2u * s, rq4, false);
                const uint at = wk4 + (kv0 + 16u * kb) * rq4 + 2u * s;
                LOAD_WS(kh, at, rq4, true);
                LOAD_WS(kl, at + (WS_PARTS - 1) * part4, rq4, true);
                cc = MULADD(ql, kh, cc); // the corrections, the smallest first
                cc = MULADD(qh, kl, cc);
#ifdef QK3
                FRAG qm, km;
                LOAD_WS(qm, wq4 + part4 + 2u * s, rq4, false);
                LOAD_WS(km, at + part4, rq4, true);
                cc = MULADD(qm, km, cc);
                cc = MULADD(qm, kh, cc);
                cc = MULADD(qh, km, cc);
#endif
                hh[s / 2u] = MULADD(qh, kh, hh[s / 2u]);
            }
            ACC big = hh[0]; // the chains in a fixed order; the corrections beside them (joined below)
            [[unroll]] for (int c = 1; c < NCH; ++c) big = ACC_ADD(big, hh[c]);
            STORE_S(big, s_base + 16u * kb, 64u);
            STORE_C(cc, p_base + 4u * kb, 16u); // float32 [16][64] in the P buffer (free until P)
        }
        SYNC();

        // ---- softmax: lane (r, part): keys kv0 + 32 part + j ---------------------------------
        // the chains plus the corrections, or the chains alone where they are infinite (an Inf in q
        // or k keeps its sign: its corrections are NaN); the dot product S 2^-(eq+ek), exact, back
        // into shS (the lane's own entries)
        float pmax = -INF;
        [[unroll]] for (uint j = 0u; j < 32u; ++j) {
            const uint key = kv0 + 32u * part + j;
            const uint at = r * 64u + 32u * part + j;
            const int ek = int(ws1[ws_ek(bh) + key]);
            const float big = shS[s_base + at];
            precise float all = big + uintBitsToFloat(shP4[p_base + at / 4u][at % 4u]);
            const float dot = ldexp(isinf(big) ? big : all, -(eq + ek));
            const float sd = attended(key, kv_end, masked, mask_base) ? dot : -INF; // scaled inside the exp
            shS[s_base + at] = sd;
            pmax = max(pmax, sd * scale);
        }
        red[sg * 32u + lane] = pmax;
        SYNC();
        const float m_new = max(m, max(pmax, red[sg * 32u + (lane ^ 1u)]));
        const float alpha = m_new == m ? 1.0f : exp_f32(m - m_new);
        m = m_new;
        precise float tile_sum = 0.0f;
        SYNC(); // every lane has read its corrections out of the P buffer
        // P 2^15 as fp16 hi + lo: row r, keys 32 part .. + 31 (16 words of each)
        [[unroll]] for (uint j = 0u; j < 32u; j += 8u) {
            uvec4 hi4, lo4v;
            [[unroll]] for (uint w = 0u; w < 4u; ++w) {
                float pw[2];
                [[unroll]] for (uint e = 0u; e < 2u; ++e) {
                    // the row's largest (rounded, finite) logit gets x = 0, weight exactly 1 (attn_f32.comp)
                    const float sd = shS[s_base + r * 64u + 32u * part + j + 2u * w + e];
                    const float t = sd * scale;
                    const float x = t == m_new && !isinf(t) ? 0.0f : fma(sd, scale, -m_new);
                    pw[e] = sd == -INF ? 0.0f : exp_f32(x);
                    tile_sum += pw[e];
                }
                uint h, lo;
                f16x2_split_pair(pw[0], pw[1], 15, h, lo);
                hi4[w] = h, lo4v[w] = lo;
            }
            const uint at = p_base + (r * 64u + 32u * part + j) / 8u;
            shP4[at] = hi4;
            shP4[at + SH_P_LO] = lo4v;
        }
        precise float lr = l * alpha;
        l = lr + tile_sum;
        SYNC();

        // ---- O_tile = P V per 64-column half, joined: O = O alpha + O_tile 2^-(15 + ev) --------
        [[unroll]] for (uint h = 0u; h < NHALF; ++h) {
            ACC ot[4];
            [[unroll]] for (int db = 0; db < 4; ++db) ot[db] = ACC_ZERO;
            [[dont_unroll]] for (uint kb = 0u; kb < 4u; ++kb) {
                FRAG ph, pl;
                LOAD_P(ph, p_base + 2u * kb, 8u);
                LOAD_P(pl, p_base + SH_P_LO + 2u * kb, 8u);
                [[unroll]] for (uint db = 0u; db < 4u; ++db) {
                    FRAG vh, vl;
                    const uint at = wv4 + (kv0 + 16u * kb) * rv4 + 8u * h + 2u * db;
                    LOAD_WS(vh, at, rv4, false);
                    LOAD_WS(vl, at + part4, rv4, false);
                    ot[db] = MULADD(pl, vh, ot[db]);
                    ot[db] = MULADD(ph, vl, ot[db]);
                    ot[db] = MULADD(ph, vh, ot[db]);
                }
            }
            [[unroll]] for (uint db = 0u; db < 4u; ++db) STORE_S(ot[db], s_base + 16u * db, 64u);
            SYNC();
            const uint ev = ws_ev(bh) + tile * DMAX + 64u * h + 32u * part;
            [[unroll]] for (uint j = 0u; j < 32u; ++j) {
                const float x = ldexp(shS[s_base + r * 64u + 32u * part + j], -(15 + int(ws1[ev + j])));
                precise float scaled = o[h][j] * alpha;
                o[h][j] = scaled + x;
            }
            SYNC();
        }
    }

    // ---- the row sum: the two lanes' partial sums in a fixed order; the output ---------------
    red[sg * 32u + lane] = l;
    SYNC();
    precise float total = red[sg * 32u + (lane & ~1u)] + red[sg * 32u + (lane | 1u)];
    const uint row = row0 + r;
    if (row < pc.seq_q) {
        const bool empty = total == 0.0f; // no attended key: out row +0.0, lse -inf
        const uint ob = (bh * pc.seq_q + row) * DMAX;
        [[unroll]] for (uint h = 0u; h < NHALF; ++h)[[unroll]] for (uint j = 0u; j < 32u; ++j)
            out1[ob + 64u * h + 32u * part + j] = empty ? 0.0f : o[h][j] / total;
        if ((pc.flags & 2u) != 0u && part == 0u) lse1[bh * pc.seq_q + row] = empty ? -INF : m + log(total);
    }
}
