// What the vk kernels (attn_f32.comp, attn3_f32.comp) share: the bindings and push constants the
// host fills (vk_backend.c), the exponential they compute themselves and the key-padding test.
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
    uint bh0;           // first batch-head of the piece
    uint batch;         // rows of keys[] (the problem's batch)
    uint words_per_row; // mask words per batch row
    uint flags;         // 1: key mask present, 2: write lse
    uint scales;        // keys[scales + batch-head]: the head's softmax scale (float bits)
} pc;

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

bool attended(uint key, uint kv_end, bool masked, uint mask_base) {
    bool attend = key < kv_end;
    if (masked && attend) attend = (keys[mask_base + key / 32u] & (1u << (key % 32u))) != 0u;
    return attend;
}
