// The split workspace of the cooperative-matrix kernel (binding 6): written by split_f16x2.comp,
// read by attn_cm_f32.comp. Per batch-head of the piece, in 32-bit words (head bh at bh * ws_head_words()):
//   q rows  [SQP][WS_RQ] row i: DMAX/2 words of fp16 hi (two dims per word, the lower dim in the low half),
//                        with QK3 then DMAX/2 words of fp16 mid, then DMAX/2 words of fp16 lo:
//                        q 2^eq = hi (+ mid) + lo (SQP = seq_q rounded up to 64; zeros past seq_q)
//   k rows  [SKP][WS_RQ] the same for k with 2^ek per key (SKP = seq_kv rounded up to 64; zeros for keys not attended)
//   v rows  [SKP][DMAX]  hi, lo (always two parts) of v with 2^ev per 64-key tile and column (zeros for keys not attended)
//   eq [SQP], ek [SKP], ev [SKP / 64][DMAX]   the exponents (int32)
// The head's size is rounded up to whole uvec4 (coopMatLoadNV reads the rows as uvec4: 8 fp16 each).
// Needs pc (attn_common.glsl) and DMAX.
#ifdef QK3
#define WS_PARTS 3 // q and k as hi + mid + lo (33 bits: every float32 exactly)
#else
#define WS_PARTS 2 // hi + lo (22 bits)
#endif
#define WS_RQ (WS_PARTS * DMAX / 2) // words per q or k row
#define WS_RV DMAX                  // words per v row (hi then lo)

uint ws_sqp() { return (pc.seq_q + 63u) / 64u * 64u; }
uint ws_skp() { return (pc.seq_kv + 63u) / 64u * 64u; }
uint ws_head_words() {
    const uint sqp = ws_sqp(), skp = ws_skp();
    return ((sqp + skp) * WS_RQ + skp * WS_RV + sqp + skp + (skp / 64u) * DMAX + 3u) / 4u * 4u;
}
uint ws_q(uint bh) { return bh * ws_head_words(); }
uint ws_k(uint bh) { return ws_q(bh) + ws_sqp() * WS_RQ; }
uint ws_v(uint bh) { return ws_k(bh) + ws_skp() * WS_RQ; }
uint ws_eq(uint bh) { return ws_v(bh) + ws_skp() * WS_RV; }
uint ws_ek(uint bh) { return ws_eq(bh) + ws_sqp(); }
uint ws_ev(uint bh) { return ws_ek(bh) + ws_skp(); }

// The exponent e that puts amax 2^e in [2^14, 2^15) (fp16 keeps 11 bits from 2^-14 up: values
// 2^-17 below the largest keep a full lo); 0 for amax = 0.
int f16x2_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    int e;
    frexp(amax, e); // amax = f 2^e, f in [0.5, 1)
    return 15 - e;
}

// x rounded to 11 significant bits (to nearest, ties away from zero) on its bits: the low 13 of
// the 23 stored significand bits cleared after adding half of them (a carry moves into the
// exponent, as it should). Integer operations, so that no compiler can take hi for x: the first
// form, lo = x - unpackHalf2x16(packHalf2x16(x)), and then Veltkamp's c - (c - x) with
// c = 8193 x (both `precise`), ran on NVIDIA's driver as if every lo were 0 (rel_l2 3-4e-4 with
// the tensor cores and with the emulation alike; bench/results/vk-h200-2026-12-02c/), while
// lavapipe computed them exactly. Inf and NaN are returned as they are.
vec2 round11(vec2 x) {
    const uvec2 u = floatBitsToUint(x);
    const uvec2 r = (u + 0x1000u) & 0xffffe000u;
    return vec2((u.x & 0x7f800000u) == 0x7f800000u ? x.x : uintBitsToFloat(r.x),
                (u.y & 0x7f800000u) == 0x7f800000u ? x.y : uintBitsToFloat(r.y));
}

// hi and lo words of the pair (x0, x1) 2^e: hi = x 2^e to 11 bits (exact in fp16 from 2^-14 up),
// lo = fp16(x 2^e - hi) (the difference exact in float32). Non-finite x: hi = x, lo = NaN (a
// non-finite value takes no part in any scale and stays non-finite).
void f16x2_split_pair(float x0, float x1, int e, out uint hi, out uint lo) {
    const vec2 xs = vec2(ldexp(x0, e), ldexp(x1, e));
    const vec2 h = round11(xs);
    precise vec2 rest = xs - h;
    hi = packHalf2x16(h);
    lo = packHalf2x16(rest);
}

// The same in three parts: x 2^e = hi + mid + lo (11, 11 and at most 2 bits: exact).
void f16x3_split_pair(float x0, float x1, int e, out uint hi, out uint mid, out uint lo) {
    const vec2 xs = vec2(ldexp(x0, e), ldexp(x1, e));
    const vec2 h = round11(xs);
    precise vec2 rest = xs - h;
    const vec2 m = round11(rest);
    precise vec2 rest2 = rest - m;
    hi = packHalf2x16(h);
    mid = packHalf2x16(m);
    lo = packHalf2x16(rest2);
}
