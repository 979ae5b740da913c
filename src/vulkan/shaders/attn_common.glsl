// What the vk kernels (attn_f32.comp, attn3_f32.comp) share: the bindings and push constants the
// host fills (vk_backend.c), the exponential they compute themselves, the compensated joins of
// the dot products' partial sums, the key tests (key padding, key bias) and the key windows of the
// query rows (causal, block-causal, segments).
// Included after `#version`; needs GL_EXT_spirv_intrinsics only in the including file.

layout(std430, binding = 0) readonly buffer QBuf { vec4 q4[]; };
layout(std430, binding = 1) readonly buffer KBuf { vec4 k4[]; };
layout(std430, binding = 2) readonly buffer VBuf { vec4 v4[]; };
layout(std430, binding = 3) writeonly buffer OBuf { float out1[]; };
layout(std430, binding = 4) writeonly buffer LBuf { float lse1[]; };
layout(std430, binding = 5) readonly buffer KeyBuf { uint keys[]; };

layout(push_constant) uniform Push {
    uint seq_q;
    uint seq_kv;
    uint heads;
    uint bh0;           // first (query) batch-head of the piece
    uint batch;         // rows of keys[] (the problem's batch)
    uint words_per_row; // mask words per batch row
    uint flags;         // FLAG_* below
    uint scales;        // keys[scales + batch-head]: the head's softmax scale (float bits)
    uint group;         // query heads per key/value head (grouped-query heads; 1 otherwise)
    uint kv_bh0;        // the piece's first key/value batch-head (k, v head r of the piece is kv_bh0 + r)
    uint windows;       // keys[windows + 2 (w seq_q + i)]: keys [lo, hi) query row i may attend (FLAG_WINDOWS)
    uint ranges;        // keys[ranges + 4 (w tiles_q + x)]: of query tile x (BR rows), the union [lo, hi) and
                        // the intersection [lo, hi) of its rows' windows (tiles_q = gl_NumWorkGroups.x)
    uint window_batch;  // w = b when 1 (segments per batch), 0 when one set of windows serves every batch
    uint bias;          // keys[bias + b bias_b + h bias_h + key]: the key bias (float bits; FLAG_BIAS)
    uint bias_b;        // words between the bias rows of consecutive batches (0: one row for all)
    uint bias_h;        // words between the bias rows of consecutive heads (0: one row for all)
} pc;

#define FLAG_MASK 1u    // a boolean key mask: bits in keys[]
#define FLAG_LSE 2u     // write lse
#define FLAG_WINDOWS 4u // per-row key windows: query tiles walk only the key tiles of their union
#define FLAG_BIAS 8u    // an additive key bias

#define INF uintBitsToFloat(0x7f800000u)

// exp(x) for x <= 0 (and NaN, passed through); 0 below ln(FLT_MIN), where a weight is at most
// 2^-126 of the row's largest and no float32 sum can see it. n = round(x / ln 2) and
// r = x - n ln 2 in two fma steps (Cody-Waite); e^r by Taylor to degree 7 on |r| <= ln2 / 2
// (truncation < 1e-8 relative).
float exp_f32(float x) {
    if (isnan(x)) return x;
    if (x < -87.33654475f) return 0.0f;
    if (x > 88.0f) return INF; // never reached by the kernel (its arguments are <= 0)
    const float LOG2E = 1.44269504088896341f;
    const float LN2_HI = 0.693145751953125f;
    const float LN2_LO = 1.42860682030941723e-6f;
    float n = roundEven(x * LOG2E);
    float r = fma(-n, LN2_HI, x);
    r = fma(-n, LN2_LO, r);
    float p = 1.0f / 5040.0f;
    p = fma(p, r, 1.0f / 720.0f);
    p = fma(p, r, 1.0f / 120.0f);
    p = fma(p, r, 1.0f / 24.0f);
    p = fma(p, r, 1.0f / 6.0f);
    p = fma(p, r, 0.5f);
    p = fma(p, r, 1.0f);
    p = fma(p, r, 1.0f);
    return ldexp(p, int(n));
}

// The dot products q.k of head dims past 32 are float32 fma chains of JOIN products each, joined
// into the running sum s by TwoSum: the join's rounding error e starts the next chain (and is added
// to s after the last one), so only the chains' own roundings stay. Partial sums that grow over the
// whole head dim err by ~3x a float32 logit's own rounding at |q|, |k| ~ 1e3 and reached rel_l2 2e-6
// in a two-row case of test_padding (docs/DESIGN.md §2); chains of 8 err by ~1.5x it. An
// infinite sum keeps no error term (TwoSum's would be NaN): a dot product with an infinite
// product stays the infinity the plain sum gives (the non-finite rule of test_edges).
#define JOIN 8
void join_dot(inout float s, inout float e) {
    precise float t = s + e;
    precise float bt = t - s;
    precise float et = (s - (t - bt)) + (e - bt);
    s = t;
    e = isinf(t) ? 0.0f : et;
}
void join_dot4(inout vec4 s, inout vec4 e) {
    precise vec4 t = s + e;
    precise vec4 bt = t - s;
    precise vec4 et = (s - (t - bt)) + (e - bt);
    s = t;
    e = mix(et, vec4(0.0f), isinf(t));
}

bool attended(uint key, uint kv_end, bool masked, uint mask_base) {
    bool attend = key < kv_end;
    if (masked && attend) attend = (keys[mask_base + key / 32u] & (1u << (key % 32u))) != 0u;
    return attend;
}

// The key bias of `key` in the row at bias_base (of one batch and head).
float key_bias(uint bias_base, uint key) { return uintBitsToFloat(keys[bias_base + key]); }

// attended(), and with a key bias, a bias that is not -inf: the test every query row of a workgroup
// (one batch and head) shares. A key it leaves out is never read from v.
bool attended_biased(uint key, uint kv_end, bool masked, uint mask_base, bool biased, uint bias_base) {
    bool attend = attended(key, kv_end, masked, mask_base);
    if (biased && attend) attend = key_bias(bias_base, key) != -INF;
    return attend;
}

// The key tiles a workgroup walks, [*t_begin, *t_end), and the keys [*full_lo, *full_hi) inside the
// window of every one of its query rows: a tile inside them needs no per-row test (a "full" tile),
// one that is not (a "boundary" tile) tests each row's window. Without windows: every tile up to
// kv_end, every tile full. x: the query tile, w: the window row (a batch, or 0).
void key_tiles(bool windowed, uint x, uint w, uint kv_end, uint bc, out uint t_begin, out uint t_end, out uint full_lo,
               out uint full_hi) {
    t_begin = 0u, t_end = (kv_end + bc - 1u) / bc;
    full_lo = 0u, full_hi = 0xffffffffu;
    if (windowed) {
        const uint at = pc.ranges + 4u * (w * gl_NumWorkGroups.x + x);
        const uint lo = keys[at], hi = min(keys[at + 1u], kv_end);
        t_begin = lo / bc;
        t_end = hi > lo ? (hi + bc - 1u) / bc : t_begin;
        full_lo = keys[at + 2u], full_hi = keys[at + 3u];
    }
}

// The window [*lo, *hi) of query row `row` (clamped to the last row: rows past seq_q compute but are
// never written).
void row_window(uint w, uint row, out uint lo, out uint hi) {
    const uint at = pc.windows + 2u * (w * pc.seq_q + min(row, pc.seq_q - 1u));
    lo = keys[at], hi = keys[at + 1u];
}
