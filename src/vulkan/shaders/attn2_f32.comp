#version 450
// vk_flash2_f32_d<DMAX>_32x64[_s32k]: exact-f32 flash attention forward for head-dim families
// DMAX = 64 and 128, shaped for GPUs with many register-rich SIMT lanes (NVIDIA, AMD): 128
// invocations, 32 query rows, q resident in shared memory for the whole key loop, register
// blocks for both products, 8 barriers per 64-key tile (attn_f32.comp: about 28).
//
// Reads  q [nbh, seq_q,  DMAX]  k, v [nbh, seq_kv, DMAX]   dense, rows zero-padded from head_dim to DMAX
//        keys: as attn_f32.comp (kv_end, mask bits, per-head softmax scales at pc.scales)
// Writes out [nbh, seq_q, DMAX], lse [nbh, seq_q] (when flags & 2)
//
// Grid: (ceil(seq_q / 32), nbh, 1). Invocation (ty, tx) = (id / 16, id % 16) owns query rows
// 4 ty .. 4 ty + 3 of the workgroup's 32; per 64-key tile:
//   QK^T:  s (4 rows x 4 keys: keys tx + 16 c) over head_dim chunks of KC staged in shared
//          memory ([key][d], padded pitch: conflict-free vec4 reads), q read from its resident
//          copy ([row][d]); each 32-long stretch of a dot product summed in fresh registers before
//          it joins s
//   max:   16 partial row maxima through shared memory, the same fixed-order reduction in every
//          invocation of a row
//   exp:   p = exp(fma(dot, scale, -m_new)), the kernel's own exp; l and O rescaled by
//          exp(m_old - m_new)
//   PV:    P to shared memory ([key][row]); V in chunks of VC keys ([key][d]); each invocation a
//          4 rows x 4 (DMAX / 64) vec4 block of O (dims 4 tx + 64 h), summed over the tile in fresh
//          registers before it joins O
// At the end the 16 partial row sums of a row are added in a fixed order: bitwise deterministic.
// Shared memory (floats): q 32 (DMAX + 4) + maxima 512 + max(k chunk 64 (KC + 4), P 64 x 36 +
// v chunk VC DMAX): d64 27.5 KiB; d128 43.5 KiB (KC 64, VC 32; devices with 48 KiB) or 31.5 KiB
// (SMALL: KC 32, VC 8; 32 KiB devices, lavapipe's tests).
// Exactness as attn_f32.comp: SignedZeroInfNanPreserve, the exponential computed here, `precise`
// sums, tile sums before running sums, no subgroup operations, loops over head_dim and keys of a
// tile with compile-time trip counts (lavapipe's 65,535-iteration limit).
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4466], 4461, 32);

#ifndef DMAX
#error "DMAX (the head-dim family: 64 or 128) must be defined"
#endif
#if DMAX != 64 && DMAX != 128
#error "attn2_f32.comp is built for DMAX 64 and 128"
#endif

#define WG 128
#define BR 32 // query rows per workgroup
#define BC 64 // keys per tile
#if DMAX == 128 && defined(SMALL)
#define KC 32 // head_dim chunk of k staged at once
#define VC 8  // keys per v chunk
#else
#define KC 64
#define VC 32
#endif
#define DSUM 32            // dot-product stretch summed in fresh registers
#define QP4 (DMAX / 4 + 1) // q row pitch, vec4 units
#define KP4 (KC / 4 + 1)   // k chunk row pitch
#define PP4 (BR / 4 + 1)   // P row (one key) pitch
#define DV4 (DMAX / 4)     // v row pitch
#define DPT4 (DMAX / 64)   // vec4 output blocks per invocation

#include "attn_common.glsl"

// Shared memory, vec4 units: q [BR][QP4] | maxima and sums [16][BR / 4] | region X: the k chunk
// [BC][KP4] during QK^T, then P [BC][PP4] followed by the v chunk [VC][DV4] during PV.
#define SQ 0
#define SM (BR * QP4)
#define SX (SM + 16 * BR / 4)
#define SP SX
#define SV (SX + BC * PP4)
#define X_SIZE max(BC * KP4, BC * PP4 + VC * DV4)
shared vec4 sh[SX + X_SIZE];

layout(local_size_x = WG) in;

// Staging of k and v chunks through registers: fetch_* loads a chunk from global memory into stg,
// put_* stores stg into region X. With PREFETCH the next chunk's fetch is issued before the
// current chunk's products, so its global-memory latency overlaps them (32 more registers).
#define K_PER (BC * (KC / 4) / WG) // vec4s of a k chunk per invocation
#define V_PER (VC * DV4 / WG)      // vec4s of a v chunk per invocation
vec4 stg[max(K_PER, V_PER)];
uint g_lid, g_kv_base4, g_kv_end, g_mask_base;
bool g_masked;

void fetch_k(uint kv0, uint kc) {
    [[unroll]] for (uint i = 0u; i < K_PER; ++i) {
        const uint e = g_lid + WG * i;
        const uint key = e / (KC / 4), d4 = e % (KC / 4);
        stg[i] = vec4(0.0f);
        if (kv0 + key < g_kv_end) stg[i] = k4[g_kv_base4 + (kv0 + key) * DV4 + kc * (KC / 4) + d4];
    }
}

void put_k() {
    [[unroll]] for (uint i = 0u; i < K_PER; ++i) {
        const uint e = g_lid + WG * i;
        sh[SX + (e / (KC / 4)) * KP4 + e % (KC / 4)] = stg[i];
    }
}

void fetch_v(uint kv0, uint vc) {
    [[unroll]] for (uint i = 0u; i < V_PER; ++i) {
        const uint e = g_lid + WG * i;
        const uint key = kv0 + vc * VC + e / DV4, d4 = e % DV4;
        stg[i] = vec4(0.0f);
        if (attended(key, g_kv_end, g_masked, g_mask_base)) stg[i] = v4[g_kv_base4 + key * DV4 + d4];
    }
}

void put_v() {
    [[unroll]] for (uint i = 0u; i < V_PER; ++i) sh[SV + g_lid + WG * i] = stg[i]; // [j][DV4]
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint tx = lid % 16u, ty = lid / 16u;
    const uint row0 = gl_WorkGroupID.x * BR;
    const uint bh = gl_WorkGroupID.y; // inside the piece
    const uint b = (pc.bh0 + bh) / pc.heads;
    const uint kv_end = keys[b];
    const bool masked = (pc.flags & 1u) != 0u;
    const uint mask_base = pc.batch + b * pc.words_per_row;
    const float scale = uintBitsToFloat(keys[pc.scales + pc.bh0 + bh]);
    const uint q_base4 = bh * pc.seq_q * DV4;
    const uint kv_base4 = bh * pc.seq_kv * DV4;
    g_lid = lid, g_kv_base4 = kv_base4, g_kv_end = kv_end, g_mask_base = mask_base, g_masked = masked;

    // q, resident: [row][d] (rows past seq_q zero)
    [[unroll]] for (uint i = 0u; i < BR * DV4 / WG; ++i) {
        const uint e = lid + WG * i;
        const uint row = e / DV4, d4 = e % DV4;
        vec4 qv = vec4(0.0f);
        if (row0 + row < pc.seq_q) qv = q4[q_base4 + (row0 + row) * DV4 + d4];
        sh[SQ + row * QP4 + d4] = qv;
    }

    float m[4]; // running row maxima (equal in the 16 invocations of a row)
    float l[4]; // this invocation's partial row sums
    vec4 o[4][DPT4];
    [[unroll]] for (int r = 0; r < 4; ++r) {
        m[r] = -INF, l[r] = 0.0f;
        [[unroll]] for (int h = 0; h < DPT4; ++h) o[r][h] = vec4(0.0f);
    }

    const uint n_tiles = (kv_end + BC - 1u) / BC;
#ifdef PREFETCH
    if (n_tiles > 0u) fetch_k(0u, 0u);
#endif
    for (uint tile = 0u; tile < n_tiles; ++tile) {
        const uint kv0 = tile * BC;

        // ---- QK^T: s[r][c] = q[4 ty + r] . k[kv0 + tx + 16 c] ----------------------------------
        vec4 s[4];
        [[unroll]] for (int r = 0; r < 4; ++r) s[r] = vec4(0.0f);
        [[dont_unroll]] for (uint kc = 0u; kc < DMAX / KC; ++kc) {
            barrier(); // region X free (the previous chunk's or tile's reads done)
#ifdef PREFETCH
            put_k();
            barrier();
            if (kc + 1u < DMAX / KC)
                fetch_k(kv0, kc + 1u);
            else
                fetch_v(kv0, 0u);
#else
            fetch_k(kv0, kc);
            put_k();
            barrier();
#endif
            [[unroll]] for (uint ds = 0u; ds < KC / DSUM; ++ds) {
                vec4 part[4]; // this stretch's sums
                [[unroll]] for (int r = 0; r < 4; ++r) part[r] = vec4(0.0f);
                [[unroll]] for (uint j = 0u; j < DSUM / 4; ++j) {
                    const uint d4 = ds * (DSUM / 4) + j;
                    vec4 kk[4], qq[4];
                    [[unroll]] for (uint c = 0u; c < 4u; ++c) kk[c] = sh[SX + (tx + 16u * c) * KP4 + d4];
                    [[unroll]] for (uint r = 0u; r < 4u; ++r) qq[r] = sh[SQ + (4u * ty + r) * QP4 + kc * (KC / 4) + d4];
                    [[unroll]] for (uint r = 0u; r < 4u; ++r)[[unroll]] for (uint c = 0u; c < 4u; ++c) {
                        float t = part[r][c];
                        t = fma(qq[r].x, kk[c].x, t);
                        t = fma(qq[r].y, kk[c].y, t);
                        t = fma(qq[r].z, kk[c].z, t);
                        t = fma(qq[r].w, kk[c].w, t);
                        part[r][c] = t;
                    }
                }
                [[unroll]] for (int r = 0; r < 4; ++r) {
                    precise vec4 joined = s[r] + part[r];
                    s[r] = joined;
                }
            }
        }

        // ---- key padding, row max ---------------------------------------------------------------
        vec4 pmax = vec4(-INF);
        [[unroll]] for (uint c = 0u; c < 4u; ++c) {
            const bool attend = attended(kv0 + tx + 16u * c, kv_end, masked, mask_base);
            [[unroll]] for (uint r = 0u; r < 4u; ++r) {
                s[r][c] = attend ? s[r][c] : -INF; // the raw dot product: scaled inside the exp below
                pmax[r] = max(pmax[r], s[r][c] * scale);
            }
        }
        sh[SM + tx * (BR / 4) + ty] = pmax; // (the previous tile's readers passed >= 2 barriers since)
        barrier(); // maxima written; region X free (every QK^T read done)
        vec4 mx = sh[SM + ty];
        [[unroll]] for (uint t = 1u; t < 16u; ++t) mx = max(mx, sh[SM + t * (BR / 4) + ty]);

        // ---- exp, tile sums, rescale; P to shared memory -----------------------------------------
        float alpha[4];
        [[unroll]] for (uint r = 0u; r < 4u; ++r) {
            const float m_new = max(m[r], mx[r]);
            alpha[r] = m_new == m[r] ? 1.0f : exp_f32(m[r] - m_new);
            m[r] = m_new;
            precise float tile_sum = 0.0f;
            [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                // scale s - m in one rounding (fma): the logit is never rounded on its own; the
                // row's largest (rounded, finite) logit gets x = 0, weight exactly 1, whether or not
                // the driver fuses the fma (Vulkan lets it compute fma as a product and a sum:
                // NVIDIA's did or did not with the same source, and a one-key row then missed being
                // its v row); an infinite one keeps x = NaN (inf - inf), the row NaN
                const float t = s[r][c] * scale;
                const float x = t == m_new && !isinf(t) ? 0.0f : fma(s[r][c], scale, -m_new);
                const float p = s[r][c] == -INF ? 0.0f : exp_f32(x);
                s[r][c] = p;
                tile_sum += p;
            }
            precise float lr = l[r] * alpha[r];
            l[r] = lr + tile_sum;
        }
        [[unroll]] for (uint c = 0u; c < 4u; ++c)
            sh[SP + (tx + 16u * c) * PP4 + ty] = vec4(s[0][c], s[1][c], s[2][c], s[3][c]);

        // ---- PV: acc = P V over the tile, then O = O alpha + acc --------------------------------
        vec4 acc[4][DPT4];
        [[unroll]] for (int r = 0; r < 4; ++r)[[unroll]] for (int h = 0; h < DPT4; ++h) acc[r][h] = vec4(0.0f);
        [[dont_unroll]] for (uint vc = 0u; vc < BC / VC; ++vc) {
            if (vc > 0u) barrier(); // the previous v chunk used
#ifdef PREFETCH
            put_v();
            barrier(); // v chunk and P written
            if (vc + 1u < BC / VC)
                fetch_v(kv0, vc + 1u);
            else if (tile + 1u < n_tiles)
                fetch_k(kv0 + BC, 0u);
#else
            fetch_v(kv0, vc);
            put_v();
            barrier(); // v chunk and P written
#endif
            [[unroll]] for (uint j = 0u; j < VC; ++j) {
                const vec4 pv = sh[SP + (vc * VC + j) * PP4 + ty];
                [[unroll]] for (uint h = 0u; h < DPT4; ++h) {
                    const vec4 vv = sh[SV + j * DV4 + tx + 16u * h];
                    [[unroll]] for (uint r = 0u; r < 4u; ++r) acc[r][h] = fma(vec4(pv[r]), vv, acc[r][h]);
                }
            }
        }
        [[unroll]] for (uint r = 0u; r < 4u; ++r)[[unroll]] for (uint h = 0u; h < DPT4; ++h) {
            precise vec4 scaled = o[r][h] * alpha[r];
            o[r][h] = scaled + acc[r][h];
        }
    }

    // ---- the row sums: 16 partials per row, added in a fixed order ---------------------------
    barrier();
    sh[SM + tx * (BR / 4) + ty] = vec4(l[0], l[1], l[2], l[3]);
    barrier();
    precise vec4 total = sh[SM + ty];
    [[unroll]] for (uint t = 1u; t < 16u; ++t) total += sh[SM + t * (BR / 4) + ty];

    [[unroll]] for (uint r = 0u; r < 4u; ++r) {
        const uint row = row0 + 4u * ty + r;
        if (row >= pc.seq_q) continue;
        const bool empty = total[r] == 0.0f; // no attended key: out row +0.0, lse -inf
        const uint ob = (bh * pc.seq_q + row) * DMAX;
        [[unroll]] for (uint h = 0u; h < DPT4; ++h) {
            const vec4 y = empty ? vec4(0.0f) : o[r][h] / total[r];
            [[unroll]] for (uint t = 0u; t < 4u; ++t) out1[ob + 4u * tx + 64u * h + t] = y[t];
        }
        if ((pc.flags & 2u) != 0u && tx == 0u) lse1[bh * pc.seq_q + row] = empty ? -INF : m[r] + log(total[r]);
    }
}
