#version 450
// vk_split_f16x2_d<DMAX>, vk_split2_f16x2_d<DMAX>: the pre-pass of the cooperative-matrix kernel
// (attn_cm_f32.comp). Splits each float32 q and k of a piece into three scaled fp16 parts (QK3:
// x 2^e = hi + mid + lo, exact) or two (hi + lo, 22 significant bits), and v into two, with a power
// of two per q row (eq), per k row (ek) and per 64-key tile and column of v (ev), each putting the
// largest finite magnitude at [2^14, 2^15) (f16x2_layout.glsl).
//
// Reads  q [nbh, seq_q, DMAX]  k, v [nbh, seq_kv, DMAX] (the staging layout of attn_f32.comp), keys
// Writes the split workspace (binding 6, f16x2_layout.glsl): keys not attended (past kv_end or
//        masked) and rows past seq_q as zeros, so that a non-finite value there reaches nothing.
// Grid: (ceil(max(seq_q, seq_kv) / 64), nbh, 1), 128 invocations: the 64 q rows, the 64 k rows and
// the 64-key v tile of index gl_WorkGroupID.x (where they exist). q, k: two invocations per row
// (half of head_dim each, the row maximum through shared memory); v: one invocation per column pair.
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4466], 4461, 32);

#ifndef DMAX
#error "DMAX must be defined"
#endif

#include "attn_common.glsl"
layout(std430, binding = 6) writeonly buffer WsBuf { uint ws1[]; };
#include "f16x2_layout.glsl"

layout(local_size_x = 128) in;

#define HALF4 (DMAX / 8) // vec4 per half row

shared float red[128];

float finite_abs(float x) { return isinf(x) || isnan(x) ? 0.0f : abs(x); }

// q (is_q) or k rows tile0 .. tile0 + 63 of batch-head bh into the workspace.
void split_rows(bool is_q, uint bh, uint tile0, uint kv_end, bool masked, uint mask_base) {
    const uint lid = gl_LocalInvocationID.x;
    const uint row = tile0 + lid / 2u, part = lid % 2u;
    const uint n_rows = is_q ? pc.seq_q : pc.seq_kv;
    bool live = row < n_rows;
    if (!is_q) live = attended(row, kv_end, masked, mask_base);
    const uint src = (bh * n_rows + (live ? row : 0u)) * (DMAX / 4) + part * HALF4;
    vec4 x[HALF4];
    float amax = 0.0f;
    [[unroll]] for (uint j = 0u; j < HALF4; ++j) {
        x[j] = vec4(0.0f);
        if (live) x[j] = is_q ? q4[src + j] : k4[src + j];
        amax = max(amax, max(max(finite_abs(x[j].x), finite_abs(x[j].y)), max(finite_abs(x[j].z), finite_abs(x[j].w))));
    }
    barrier();
    red[lid] = amax;
    barrier();
    const int e = f16x2_exponent(max(red[lid], red[lid ^ 1u]));
    const uint base = (is_q ? ws_q(bh) : ws_k(bh)) + row * WS_RQ + part * (DMAX / 4);
    [[unroll]] for (uint j = 0u; j < HALF4; ++j) {
        uint h0, l0, h1, l1;
#ifdef QK3
        uint m0, m1;
        f16x3_split_pair(x[j].x, x[j].y, e, h0, m0, l0);
        f16x3_split_pair(x[j].z, x[j].w, e, h1, m1, l1);
        ws1[base + DMAX / 2 + 2u * j] = m0;
        ws1[base + DMAX / 2 + 2u * j + 1u] = m1;
#else
        f16x2_split_pair(x[j].x, x[j].y, e, h0, l0);
        f16x2_split_pair(x[j].z, x[j].w, e, h1, l1);
#endif
        ws1[base + 2u * j] = h0;
        ws1[base + 2u * j + 1u] = h1;
        ws1[base + (WS_PARTS - 1) * (DMAX / 2) + 2u * j] = l0;
        ws1[base + (WS_PARTS - 1) * (DMAX / 2) + 2u * j + 1u] = l1;
    }
    if (part == 0u) ws1[(is_q ? ws_eq(bh) : ws_ek(bh)) + row] = uint(e);
}

void main() {
    const uint bh = gl_WorkGroupID.y;
    const uint tile0 = gl_WorkGroupID.x * 64u;
    const uint b = (pc.bh0 + bh) / pc.heads;
    const uint kv_end = keys[b];
    const bool masked = (pc.flags & 1u) != 0u;
    const uint mask_base = pc.batch + b * pc.words_per_row;
    if (tile0 < pc.seq_q) split_rows(true, bh, tile0, kv_end, masked, mask_base); // (uniform per workgroup)
    if (tile0 < pc.seq_kv) {
        split_rows(false, bh, tile0, kv_end, masked, mask_base);
        // v: invocation c < DMAX / 2 owns columns 2c, 2c + 1 of the tile's 64 keys
        const uint c = gl_LocalInvocationID.x;
        if (c < DMAX / 2) {
            float amax0 = 0.0f, amax1 = 0.0f;
            [[dont_unroll]] for (uint i = 0u; i < 64u; ++i) {
                const uint key = tile0 + i;
                if (!attended(key, kv_end, masked, mask_base)) continue;
                const vec4 x = v4[(bh * pc.seq_kv + key) * (DMAX / 4) + c / 2u];
                const vec2 y = (c % 2u) == 0u ? x.xy : x.zw;
                amax0 = max(amax0, finite_abs(y.x));
                amax1 = max(amax1, finite_abs(y.y));
            }
            const int e0 = f16x2_exponent(amax0), e1 = f16x2_exponent(amax1);
            [[dont_unroll]] for (uint i = 0u; i < 64u; ++i) {
                const uint key = tile0 + i;
                vec2 y = vec2(0.0f);
                if (attended(key, kv_end, masked, mask_base)) {
                    const vec4 x = v4[(bh * pc.seq_kv + key) * (DMAX / 4) + c / 2u];
                    y = (c % 2u) == 0u ? x.xy : x.zw;
                }
                uint h0, l0, h1, l1;
                f16x2_split_pair(y.x, 0.0f, e0, h0, l0);
                f16x2_split_pair(y.y, 0.0f, e1, h1, l1);
                const uint base = ws_v(bh) + key * WS_RV + c;
                ws1[base] = (h0 & 0xffffu) | (h1 << 16);
                ws1[base + DMAX / 2] = (l0 & 0xffffu) | (l1 << 16);
            }
            const uint ev = ws_ev(bh) + gl_WorkGroupID.x * DMAX + 2u * c;
            ws1[ev] = uint(e0);
            ws1[ev + 1u] = uint(e1);
        }
    }
}
