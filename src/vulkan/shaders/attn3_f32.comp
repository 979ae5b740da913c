#version 450
// vk_flash3_f32_d<DMAX>_64x64[_tx32|_tx32r4][_s32k][_pf]: exact-f32 flash attention forward for
// head-dim families DMAX = 64 and 128, shaped for the FMA rate of SIMT GPUs (NVIDIA, AMD): 64 query
// rows per workgroup, RPT-row register blocks in both products, every operand staged once per tile
// in double-buffered shared memory, one barrier per stage. Forms: TX = 16 (128 invocations, 8 x 4
// blocks of S, 8 x 4 of O per 64-dim half), TX = 32 (256 invocations, 8 x 2 and 8 x 4; DMAX 128; the
// default on NVIDIA), TX = 32 with RPT = 4 (512 invocations, 4 x 2 and 4 x 4; DMAX 128).
//
// Reads  q [nbh, seq_q,  DMAX]  k, v [nkv, seq_kv, DMAX]   dense, rows zero-padded from head_dim to DMAX
//        (grouped-query heads, the key/value head of a query head, as attn_f32.comp)
//        keys: as attn_f32.comp (kv_end, mask bits, per-head softmax scales at pc.scales, windows,
//        key bias)
// Writes out [nbh, seq_q, DMAX], lse [nbh, seq_q] (when flags & 2)
//
// Grid: (ceil(seq_q / 64), nbh, 1). Invocation (ty, tx) = (id / TX, id % TX) owns query rows
// RPT ty .. RPT ty + RPT - 1, the keys tx + TX c (c < 64 / TX) of each 64-key tile in S, and the
// output dims 4 (TX h + tx) .. + 3 (h < DMAX / (4 TX)). With windows the workgroup walks the key
// tiles of its rows' union only, per-row tests in boundary tiles (as attn_f32.comp). A tile is a
// fixed sequence of stages,
// each a chunk of operands fetched from global memory into registers and stored into one of two
// shared buffers (alternating), then one barrier:
//   NQK stages of QK^T: the DK-dim chunk of the 64 q rows and of the 64 keys ([row][DK], vec4 slots
//          XOR-swizzled: conflict-free reads and stores); each invocation's RPT x 64/TX block of
//          dot products as fma chains of JOIN products joined into s by TwoSum (attn_common.glsl)
//   softmax: TX partial row maxima per row through shared memory (in the buffer the last QK stage
//          read; the same fixed-order reduction in every invocation of a row), p =
//          exp(fma(dot, scale, -m_new)) with the kernel's own exp, l rescaled, P to shared memory
//          ([key][row], swizzled), 2 barriers
//   NV stages of P V: VK keys x 4 TX dims of v ([key][TX vec4]); per part h of the dims the
//          RPT rows x 4 dims block summed over the tile's 64 keys in fresh registers, then
//          O = O alpha + acc
// With PREFETCH the next stage's global loads are issued before the current stage's products.
// At the end the TX partial row sums of a row are added in a fixed order: bitwise deterministic.
// Shared memory: 2 stage buffers + P [64][64]: 48 KiB (DK 32: devices with 48 KiB) or, with SMALL,
// 32 KiB (DK 16: Apple, lavapipe); a PV stage at most as large as a QK^T stage.
// Exactness as attn_f32.comp: SignedZeroInfNanPreserve, the exponential computed here, `precise`
// sums, tile sums before running sums, no subgroup operations, loops over head_dim and the keys of
// a stage of compile-time length (lavapipe's 65,535-iteration limit: about 15 loop iterations per
// 64-key tile).
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4466], 4461, 32);

#ifndef DMAX
#error "DMAX (the head-dim family: 64 or 128) must be defined"
#endif
#if DMAX != 64 && DMAX != 128
#error "attn3_f32.comp is built for DMAX 64 and 128"
#endif

#ifndef TX
#define TX 16 // invocations along the keys of S and the dims of O (16, or 32 at DMAX 128)
#endif
#ifndef RPT
#define RPT 8 // query rows per invocation (8, or 4)
#endif
#define G (RPT / 4) // vec4 groups of rows per invocation
#define WG ((64 / RPT) * TX)
#define KPT (BC / TX) // keys per invocation in S
#define BR 64 // query rows per workgroup
#define BC 64 // keys per tile
#ifdef SMALL
#define DK 16 // head_dim chunk of a QK^T stage
#else
#define DK 32
#endif
#if defined(SMALL)
#define VK (512 / TX) // keys of a PV stage
#elif DMAX == 64
#define VK 32
#else
#define VK (1024 / TX)
#endif
#define KV4 (DK / 4)             // vec4 per row of a q or k chunk
#define DV4 (DMAX / 4)           // vec4 per global row
#define NH (DV4 / TX)            // parts of O's dims (one vec4 of each per invocation and row)
#define NQK (DMAX / DK)          // QK^T stages per tile
#define NVK (BC / VK)            // PV stages per half
#define NV (NH * NVK)            // PV stages per tile
#define QN (BR * KV4)            // vec4 of a q chunk (= of a k chunk: BR == BC)
#define QK_PER (2 * QN / WG)     // vec4 per invocation of a QK^T stage
#define V_PER (VK * TX / WG)     // vec4 per invocation of a PV stage
#define STAGE max(2 * QN, VK * TX) // vec4 of a stage buffer
#define SP (2 * STAGE)           // P [BC][BR / 4 vec4] after the two stage buffers
#define SPT max(QK_PER, V_PER)
#if NH < 1 || (DV4 % TX) != 0
#error "TX 32 needs DMAX 128"
#endif
#if (NQK % 2) != 0 || (NV % 2) != 0
#error "the stage sequence assumes even NQK and NV (buffer 1 free during the softmax)"
#endif
// The swizzle of a q or k chunk: vec4 slot d4 of row x is stored at d4 ^ SW(x); conflict-free for
// the reads of keys tx + 16 c (8 consecutive tx) and for the stores of consecutive vec4.
#define SW(x) (((x) / (8 / KV4)) % KV4)

#include "attn_common.glsl"

shared vec4 sh[SP + BC * (BR / 4)];

layout(local_size_x = WG) in;

vec4 stg[SPT]; // the stage in flight: global memory -> registers -> shared memory
uint g_lid, g_row0, g_q_base4, g_kv_base4, g_kv_end, g_mask_base, g_bias_base;
bool g_masked, g_biased;

void fetch_qk(uint kv0, uint c) {
    [[unroll]] for (uint i = 0u; i < QK_PER; ++i) {
        const uint e = g_lid + WG * i;
        stg[i] = vec4(0.0f);
        if (QN % WG == 0 ? WG * i < QN : e < QN) { // (known at compile time where QN is a multiple of WG)
            const uint row = e / KV4, d4 = e % KV4;
            if (g_row0 + row < pc.seq_q) stg[i] = q4[g_q_base4 + (g_row0 + row) * DV4 + c * KV4 + d4];
        } else {
            const uint key = (e - QN) / KV4, d4 = e % KV4;
            if (kv0 + key < g_kv_end) stg[i] = k4[g_kv_base4 + (kv0 + key) * DV4 + c * KV4 + d4];
        }
    }
}

void put_qk(uint buf) {
    [[unroll]] for (uint i = 0u; i < QK_PER; ++i) {
        const uint e = g_lid + WG * i;
        const bool is_q = QN % WG == 0 ? WG * i < QN : e < QN;
        const uint x = (is_q ? e : e - QN) / KV4, d4 = e % KV4;
        sh[buf + (is_q ? 0u : QN) + x * KV4 + (d4 ^ SW(x))] = stg[i];
    }
}

void fetch_v(uint kv0, uint v) {
    const uint h = v / NVK, kc = v % NVK;
    [[unroll]] for (uint i = 0u; i < V_PER; ++i) {
        const uint e = g_lid + WG * i;
        const uint key = kv0 + kc * VK + e / TX, d4 = e % TX;
        stg[i] = vec4(0.0f);
        if (attended_biased(key, g_kv_end, g_masked, g_mask_base, g_biased, g_bias_base))
            stg[i] = v4[g_kv_base4 + key * DV4 + h * TX + d4];
    }
}

void put_v(uint buf) {
    [[unroll]] for (uint i = 0u; i < V_PER; ++i) sh[buf + g_lid + WG * i] = stg[i]; // [key][TX vec4]
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint tx = lid % TX, ty = lid / TX;
    const bool windowed = (pc.flags & FLAG_WINDOWS) != 0u;
    const bool biased = (pc.flags & FLAG_BIAS) != 0u;
    const uint qt = windowed ? gl_NumWorkGroups.x - 1u - gl_WorkGroupID.x : gl_WorkGroupID.x; // the query tile
    const uint row0 = qt * BR;
    const uint bh = gl_WorkGroupID.y; // inside the piece
    const uint b = (pc.bh0 + bh) / pc.heads, head = (pc.bh0 + bh) % pc.heads;
    const uint kv_end = keys[b];
    const bool masked = (pc.flags & FLAG_MASK) != 0u;
    const uint mask_base = pc.batch + b * pc.words_per_row;
    const uint wrow = pc.window_batch * b; // the row of windows
    const uint bias_base = pc.bias + b * pc.bias_b + head * pc.bias_h;
    const float scale = uintBitsToFloat(keys[pc.scales + pc.bh0 + bh]);
    g_lid = lid, g_row0 = row0, g_q_base4 = bh * pc.seq_q * DV4;
    g_kv_base4 = ((pc.bh0 + bh) / pc.group - pc.kv_bh0) * pc.seq_kv * DV4;
    g_kv_end = kv_end, g_mask_base = mask_base, g_masked = masked, g_biased = biased, g_bias_base = bias_base;
    const uint ksw = SW(tx); // = SW(tx + TX c)

    float m[RPT]; // running row maxima (equal in the TX invocations of a row)
    float l[RPT]; // this invocation's partial row sums
    vec4 o[RPT][NH];
    [[unroll]] for (int r = 0; r < RPT; ++r) {
        m[r] = -INF, l[r] = 0.0f;
        [[unroll]] for (int h = 0; h < NH; ++h) o[r][h] = vec4(0.0f);
    }

    uint t_begin, t_end, full_lo, full_hi;
    key_tiles(windowed, qt, wrow, kv_end, BC, t_begin, t_end, full_lo, full_hi);
    if (t_begin < t_end) {
        fetch_qk(t_begin * BC, 0u);
        put_qk(0u);
    }
    barrier();
    for (uint tile = t_begin; tile < t_end; ++tile) {
        const uint kv0 = tile * BC;
        const bool boundary = kv0 < full_lo || kv0 + BC > full_hi; // a row's window may end inside the tile

        // ---- QK^T stages: s[r][c] = q[8 ty + r] . k[kv0 + tx + TX c] -----------------------------
        float s[RPT][KPT];
        float part[RPT][KPT]; // the running chain of JOIN products, started from the last join's error
        [[unroll]] for (int r = 0; r < RPT; ++r)[[unroll]] for (int cc = 0; cc < KPT; ++cc) {
            s[r][cc] = 0.0f;
            part[r][cc] = 0.0f;
        }
        [[dont_unroll]] for (uint c = 0u; c < NQK; ++c) {
            const uint buf = (c % 2u) * STAGE;
#ifdef PREFETCH
            if (c + 1u < NQK)
                fetch_qk(kv0, c + 1u);
            else
                fetch_v(kv0, 0u);
#endif
            [[unroll]] for (uint d4 = 0u; d4 < KV4; ++d4) {
                vec4 kk[KPT];
                [[unroll]] for (uint cc = 0u; cc < KPT; ++cc)
                    kk[cc] = sh[buf + QN + (tx + TX * cc) * KV4 + (d4 ^ ksw)];
                [[unroll]] for (uint r = 0u; r < RPT; ++r) {
                    const vec4 qq = sh[buf + (RPT * ty + r) * KV4 + (d4 ^ SW(RPT * ty + r))];
                    [[unroll]] for (uint cc = 0u; cc < KPT; ++cc) {
                        float t = part[r][cc];
                        t = fma(qq.x, kk[cc].x, t);
                        t = fma(qq.y, kk[cc].y, t);
                        t = fma(qq.z, kk[cc].z, t);
                        t = fma(qq.w, kk[cc].w, t);
                        part[r][cc] = t;
                    }
                }
                if ((4u * d4 + 4u) % JOIN == 0u)
                    [[unroll]] for (int r = 0; r < RPT; ++r)[[unroll]] for (int cc = 0; cc < KPT; ++cc)
                        join_dot(s[r][cc], part[r][cc]);
            }
#ifndef PREFETCH
            if (c + 1u < NQK)
                fetch_qk(kv0, c + 1u);
            else
                fetch_v(kv0, 0u);
#endif
            if (c + 1u < NQK)
                put_qk(((c + 1u) % 2u) * STAGE);
            else
                put_v(0u);
            barrier();
        }
        [[unroll]] for (int r = 0; r < RPT; ++r)[[unroll]] for (int cc = 0; cc < KPT; ++cc) {
            precise float folded = s[r][cc] + part[r][cc]; // the last join's error
            s[r][cc] = folded;
        }

        // ---- masks, row max (partials in buffer 1, free until the second PV stage) ---------------
        // as attn_f32.comp: -inf for keys the key padding, a -inf bias or (boundary tiles) the row's
        // window leaves out; with a bias the row maximum is taken over the logits s scale + bias
        float pmax[RPT];
        [[unroll]] for (int r = 0; r < RPT; ++r) pmax[r] = -INF;
        bool key_ok[KPT];
        float kb[KPT]; // the keys' bias
        [[unroll]] for (uint cc = 0u; cc < KPT; ++cc) {
            const uint key = kv0 + tx + TX * cc;
            key_ok[cc] = attended(key, kv_end, masked, mask_base);
            kb[cc] = 0.0f;
            if (biased && key_ok[cc]) {
                kb[cc] = key_bias(bias_base, key);
                key_ok[cc] = kb[cc] != -INF;
            }
        }
        [[unroll]] for (uint r = 0u; r < RPT; ++r) {
            uint wlo = 0u, whi = 0xffffffffu;
            if (boundary) row_window(wrow, row0 + RPT * ty + r, wlo, whi);
            [[unroll]] for (uint cc = 0u; cc < KPT; ++cc) {
                const uint key = kv0 + tx + TX * cc;
                const bool attend = key_ok[cc] && key >= wlo && key < whi;
                s[r][cc] = attend ? s[r][cc] : -INF; // the raw dot product: scaled inside the exp below
                pmax[r] = max(pmax[r], biased ? fma(s[r][cc], scale, kb[cc]) : s[r][cc] * scale); // the logit
            }
        }
        [[unroll]] for (uint g = 0u; g < G; ++g)
            sh[STAGE + tx * 16u + G * ty + g] =
                vec4(pmax[4u * g], pmax[4u * g + 1u], pmax[4u * g + 2u], pmax[4u * g + 3u]);
        barrier();
        float alpha[RPT];
        [[unroll]] for (uint g = 0u; g < G; ++g) {
            vec4 mx = sh[STAGE + G * ty + g];
            [[unroll]] for (uint t = 1u; t < TX; ++t) mx = max(mx, sh[STAGE + t * 16u + G * ty + g]);

            // ---- exp, tile sums, rescale ------------------------------------------------------
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                const uint r = 4u * g + i;
                const float m_new = max(m[r], mx[i]);
                alpha[r] = m_new == m[r] ? 1.0f : exp_f32(m[r] - m_new);
                m[r] = m_new;
                precise float tile_sum = 0.0f;
                [[unroll]] for (uint cc = 0u; cc < KPT; ++cc) {
                    // scale s - m in one rounding (fma); the row's largest (rounded, finite) logit gets
                    // x = 0, weight exactly 1, whether or not the driver fuses the fma (see attn_f32.comp)
                    const float t = s[r][cc] * scale;
                    float x = t == m_new && !isinf(t) ? 0.0f : fma(s[r][cc], scale, -m_new);
                    // with a bias: s scale + (bias - m) in one rounding (see attn_f32.comp)
                    if (biased && s[r][cc] != -INF)
                        x = fma(s[r][cc], scale, key_bias(bias_base, kv0 + tx + TX * cc) - m_new);
                    const float p = s[r][cc] == -INF ? 0.0f : exp_f32(x);
                    s[r][cc] = p;
                    tile_sum += p;
                }
                precise float lr = l[r] * alpha[r];
                l[r] = lr + tile_sum;
            }
        }
        [[unroll]] for (uint cc = 0u; cc < KPT; ++cc) // P [key][row]: key tx + TX cc, swizzled by key % 16
            [[unroll]] for (uint g = 0u; g < G; ++g)
                sh[SP + (tx + TX * cc) * 16u + ((G * ty + g) ^ (tx % 16u))] =
                    vec4(s[4u * g][cc], s[4u * g + 1u][cc], s[4u * g + 2u][cc], s[4u * g + 3u][cc]);
        barrier();

        // ---- PV stages: per half h, acc = P V over the tile, then O = O alpha + acc ------------
        vec4 acc[RPT];
        [[unroll]] for (int r = 0; r < RPT; ++r) acc[r] = vec4(0.0f);
        [[dont_unroll]] for (uint v = 0u; v < NV; ++v) {
            const uint buf = (v % 2u) * STAGE;
            const uint kc = v % NVK;
#ifdef PREFETCH
            if (v + 1u < NV)
                fetch_v(kv0, v + 1u);
            else if (tile + 1u < t_end)
                fetch_qk(kv0 + BC, 0u);
#endif
            [[unroll]] for (uint j = 0u; j < VK; ++j) {
                const uint key = kc * VK + j; // (key % 16 = j % 16: VK is a multiple of 16)
                vec4 pp[G];
                [[unroll]] for (uint g = 0u; g < G; ++g) pp[g] = sh[SP + key * 16u + ((G * ty + g) ^ (j % 16u))];
                const vec4 vv = sh[buf + j * TX + tx];
                [[unroll]] for (uint g = 0u; g < G; ++g)[[unroll]] for (uint i = 0u; i < 4u; ++i)
                    acc[4u * g + i] = fma(vec4(pp[g][i]), vv, acc[4u * g + i]);
            }
            if (kc == NVK - 1u) { // the half's tile sum is complete: join it
                const uint h = v / NVK;
                [[unroll]] for (uint hh = 0u; hh < NH; ++hh) {
                    if (hh == h) {
                        [[unroll]] for (uint r = 0u; r < RPT; ++r) {
                            precise vec4 scaled = o[r][hh] * alpha[r];
                            o[r][hh] = scaled + acc[r];
                        }
                    }
                }
                [[unroll]] for (int r = 0; r < RPT; ++r) acc[r] = vec4(0.0f);
            }
#ifndef PREFETCH
            if (v + 1u < NV)
                fetch_v(kv0, v + 1u);
            else if (tile + 1u < t_end)
                fetch_qk(kv0 + BC, 0u);
#endif
            if (v + 1u < NV)
                put_v(((v + 1u) % 2u) * STAGE);
            else if (tile + 1u < t_end)
                put_qk(0u);
            barrier();
        }
    }

    // ---- the row sums: 16 partials per row, added in a fixed order ---------------------------
    [[unroll]] for (uint g = 0u; g < G; ++g)
        sh[tx * 16u + G * ty + g] = vec4(l[4u * g], l[4u * g + 1u], l[4u * g + 2u], l[4u * g + 3u]);
    barrier();
    float total[RPT];
    [[unroll]] for (uint g = 0u; g < G; ++g) {
        precise vec4 sum = sh[G * ty + g];
        [[unroll]] for (uint t = 1u; t < TX; ++t) sum += sh[t * 16u + G * ty + g];
        [[unroll]] for (uint i = 0u; i < 4u; ++i) total[4u * g + i] = sum[i];
    }

    [[unroll]] for (uint r = 0u; r < RPT; ++r) {
        const uint row = row0 + RPT * ty + r;
        if (row >= pc.seq_q) continue;
        const bool empty = total[r] == 0.0f; // no attended key: out row +0.0, lse -inf
        const uint ob = (bh * pc.seq_q + row) * DMAX;
        [[unroll]] for (uint h = 0u; h < NH; ++h) {
            const vec4 y = empty ? vec4(0.0f) : o[r][h] / total[r];
            [[unroll]] for (uint t = 0u; t < 4u; ++t) out1[ob + 4u * (TX * h + tx) + t] = y[t];
        }
        if ((pc.flags & 2u) != 0u && tx == 0u) lse1[bh * pc.seq_q + row] = empty ? -INF : m[r] + log(total[r]);
    }
}
