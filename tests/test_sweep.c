/* A randomised sweep of one backend's forward and backward against a float64 reference of its own
 * (issue 37): DRAWS draws, each a problem and a call built from the table of features below, every draw
 * checked as the suites check theirs: outputs poisoned (NaN) before the call, every element compared
 * with the reference under the gate of kit/metrics.h (f32: the forward's gate and lse gate, the
 * backward's gate or JATTN_BWD_FLOOR_TIMES of its float32 floor; tf32: rel_l2 1e-3), a query row with
 * no key -inf in lse, nothing written outside the outputs (the guards and the gaps of padded rows keep
 * their poison), no input modified (fused views share one buffer), masked keys' k and v rows NaN (never
 * read). The reference is this file's own (float64 scores, softmax, out, lse and gradients, key padding
 * applied), so the ref backend is checked too.
 *
 * A draw: head_dim 1..256 (64 and 128 often: the Hopper kernels), a sequence of 1..512 tokens (2048 with a
 * budget of 1e7 and more), then each
 * feature of `features` with its probability where it applies (cross-attention, batch, heads, layouts,
 * key lengths, masks, lse, the backward, dlse; grouped-query heads, causal, block-causal, segments and a
 * key bias where the backend serves them in the draw's pass (asked of jattn_plan_create); tf32, device
 * memory, CUDA graph capture, a caller workspace, a context, the call through a plan), a distribution (uniform, normal,
 * peaky, large; the backward's not large: the few-query `large` rows have test_backward's part of their own), then the
 * sizes shrunk to fit BUDGET (B H Sq Skv D). A feature the library adds to the API is one entry of `features` (its
 * draw), its term in build() (the problem and arrays), in attends_full() or reference() (the arithmetic) and, with
 * arrays, in run_call()'s device copies. Every draw lies within every backend's documented limits (head_dim <= 256,
 * tf32 and the backward only where the backend offers them, device memory on the cuda backend): a refusal fails.
 *
 * usage: test_sweep BACKEND [DRAWS [BUDGET]]   (default 120 draws, budget 2e6: ctest's, seconds per
 *        backend on 2 cores; bench/gpu/battery.sh runs hundreds with a budget of 3e7). The seed is
 *        printed; JATTN_TEST_SEED replays the run, JATTN_SWEEP_DRAW=n its draw n alone. Exits 77 when the
 *        backend is not present in this build or on this machine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#ifdef JATTN_TEST_SWEEP_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- guarded buffers ---- */
#define GUARD 32
static const uint32_t POISON_BITS = 0x7FC05EE9u;
static float poison(void) {
    float f;
    memcpy(&f, &POISON_BITS, sizeof f);
    return f;
}
static int is_poison(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u == POISON_BITS;
}

typedef struct buf {
    float *base; /* n floats; element 0 of the tensors' span at base + GUARD */
    int64_t n;
} buf;

static int buf_alloc(buf *b, int64_t span) {
    b->n = span + 2 * GUARD;
    b->base = malloc((size_t)b->n * sizeof(float));
    if (!b->base) return -1;
    for (int64_t i = 0; i < b->n; i++) b->base[i] = poison();
    return 0;
}
static void buf_free(buf *b) {
    free(b->base);
    b->base = NULL;
}
static uint64_t buf_hash(uint64_t h, const buf *b) {
    const unsigned char *x = (const unsigned char *)b->base;
    for (size_t i = 0; b->base && i < (size_t)b->n * sizeof(float); i++) h = (h ^ x[i]) * 0x100000001B3ull;
    return h;
}

/* ---- the draw ---- */
typedef enum layout { L_FLUX, L_HEAD, L_TOKEN, L_PADDED, L_FUSED } layout;
static const char *const layout_names[] = {"flux", "head-major", "token-major", "padded", "fused"};

typedef struct draw {
    int64_t B, H, Sq, Skv, D;
    layout lay_in;  /* q, k, v: head-major (FLUX), token-major, padded rows, fused views */
    layout lay_out; /* out: token-major (FLUX), head-major, padded rows */
    jt_dist dist;
    int kv_len, mask, mask_broadcast, empty_batch; /* key padding */
    int64_t kv_heads;                              /* grouped-query heads: 0 (none) or a divisor of H */
    int causal, blocks, segments, bias;            /* the other parts of jattn_mask */
    int lse, backward, dlse, tf32, device, graph, workspace, ctx, plan;
    char features[300]; /* the names of the features drawn */
} draw;

/* The parts of a problem and mask a backend may or may not serve (jattn_refuse_features). */
enum { M_GQA = 1u, M_CAUSAL = 2u, M_BLOCKS = 4u, M_SEGMENTS = 8u, M_BIAS = 16u, M_LAST = M_BIAS };

/* What the backend under test offers (asked of the library once). */
typedef struct offer {
    jattn_backend backend;
    int backward, tf32_fwd, tf32_bwd, device_memory;
    unsigned serves[2]; /* the M_* parts it serves, forward and backward */
} offer;

/* The M_* parts a backend serves in a pass: a plan of a small problem with each part alone. */
static unsigned probe_serves(jattn_backend b, jattn_pass pass) {
    unsigned served = 0;
    for (unsigned part = 1; part <= M_LAST; part <<= 1) {
        jattn_problem p = jattn_problem_flux(1, 2, 8, 8, 16);
        jattn_mask m;
        memset(&m, 0, sizeof m);
        int64_t cuts[2] = {0, 8};
        float bias[8] = {0};
        if (part == M_GQA) p.kv_heads = 1;
        if (part == M_CAUSAL) m.causal = JATTN_CAUSAL_TOP_LEFT;
        if (part == M_BLOCKS) m.block_q = m.block_kv = cuts, m.num_blocks = 1;
        if (part == M_SEGMENTS) m.cu_seqlens_q = m.cu_seqlens_kv = cuts, m.num_segments = 1;
        if (part == M_BIAS) m.key_bias = bias;
        jattn_exec e = {0};
        e.backend = b;
        jattn_plan *plan = NULL;
        if (jattn_plan_create(&plan, pass, &p, NULL, &m, &e) == JATTN_OK) served |= part;
        jattn_plan_free(plan);
    }
    return served;
}

typedef struct feature {
    const char *name;
    double probability;
    int (*applies)(const offer *, const draw *); /* NULL: always */
    void (*apply)(draw *, jt_rng *);
} feature;

static int64_t log_uniform(jt_rng *r, int64_t lo, int64_t hi) {
    const double x = exp(log((double)lo) + jt_uniform(r) * (log((double)hi + 1) - log((double)lo)));
    const int64_t v = (int64_t)x;
    return v < lo ? lo : v > hi ? hi : v;
}

static int64_t max_seq = 512; /* 2048 with a budget of 1e7 and more (main) */

static void f_cross(draw *d, jt_rng *r) {
    d->Skv = log_uniform(r, 1, max_seq);
    if (d->Skv == d->Sq) d->Skv = d->Sq > 1 ? d->Sq - 1 : 2;
}
static void f_batch(draw *d, jt_rng *r) { d->B = 2 + (int64_t)(jt_uniform(r) * 2); }
static void f_heads(draw *d, jt_rng *r) { d->H = 2 + (int64_t)(jt_uniform(r) * 3); }
static void f_token(draw *d, jt_rng *r) { (void)r, d->lay_in = L_TOKEN; }
static void f_fused(draw *d, jt_rng *r) { (void)r, d->lay_in = L_FUSED; }
static void f_padded(draw *d, jt_rng *r) { (void)r, d->lay_in = L_PADDED; }
static void f_out_head(draw *d, jt_rng *r) { (void)r, d->lay_out = L_HEAD; }
static void f_out_padded(draw *d, jt_rng *r) { (void)r, d->lay_out = L_PADDED; }
static void f_kv_len(draw *d, jt_rng *r) { (void)r, d->kv_len = 1; }
static void f_mask(draw *d, jt_rng *r) { (void)r, d->mask = 1; }
static void f_broadcast(draw *d, jt_rng *r) { (void)r, d->mask_broadcast = 1; }
static void f_empty(draw *d, jt_rng *r) { (void)r, d->empty_batch = 1; }
static void f_lse(draw *d, jt_rng *r) { (void)r, d->lse = 1; }
static void f_backward(draw *d, jt_rng *r) { (void)r, d->backward = 1; }
static void f_dlse(draw *d, jt_rng *r) { (void)r, d->dlse = 1; }
static void f_tf32(draw *d, jt_rng *r) { (void)r, d->tf32 = 1; }
static void f_device(draw *d, jt_rng *r) { (void)r, d->device = 1; }
static void f_graph(draw *d, jt_rng *r) { (void)r, d->graph = 1; }
static void f_workspace(draw *d, jt_rng *r) { (void)r, d->workspace = 1; }
static void f_ctx(draw *d, jt_rng *r) { (void)r, d->ctx = 1; }
static void f_plan(draw *d, jt_rng *r) { (void)r, d->plan = 1; }
static void f_kv_heads(draw *d, jt_rng *r) { d->kv_heads = d->H % 2 == 0 && jt_uniform(r) < 0.5 ? d->H / 2 : 1; }
static void f_causal(draw *d, jt_rng *r) { d->causal = jt_uniform(r) < 0.5 ? 1 : 2; }
static void f_blocks(draw *d, jt_rng *r) { d->blocks = 1 + (int)(jt_uniform(r) * 4); }
static void f_segments(draw *d, jt_rng *r) { d->segments = 1 + (int)(jt_uniform(r) * 3); }
static void f_bias(draw *d, jt_rng *r) { (void)r, d->bias = 1; }

static int a_padding(const offer *o, const draw *d) { return (void)o, d->kv_len || d->mask; }
static int a_broadcast(const offer *o, const draw *d) { return (void)o, d->mask && d->B > 1; }
static int a_backward(const offer *o, const draw *d) { return (void)d, o->backward; }
static int a_dlse(const offer *o, const draw *d) { return (void)o, d->backward; }
static int a_tf32(const offer *o, const draw *d) { return d->backward ? o->tf32_bwd : o->tf32_fwd; }
static int a_device(const offer *o, const draw *d) { return (void)d, o->device_memory; }
static int a_graph(const offer *o, const draw *d) { return (void)o, d->device; }
static int a_ctx(const offer *o, const draw *d) { return (void)o, !d->device; }
static int serves(const offer *o, const draw *d, unsigned part) { return (o->serves[d->backward] & part) != 0; }
static int a_kv_heads(const offer *o, const draw *d) { return d->H > 1 && d->lay_in != L_FUSED && serves(o, d, M_GQA); }
static int a_causal(const offer *o, const draw *d) { return serves(o, d, M_CAUSAL); }
static int a_blocks(const offer *o, const draw *d) { return serves(o, d, M_BLOCKS); }
static int a_segments(const offer *o, const draw *d) { return serves(o, d, M_SEGMENTS); }
static int a_bias(const offer *o, const draw *d) { return serves(o, d, M_BIAS); }

/* The features, drawn in this order (a feature's `applies` may read the earlier ones). */
static const feature features[] = {
    {"cross", 0.5, NULL, f_cross},
    {"batch", 0.4, NULL, f_batch},
    {"heads", 0.6, NULL, f_heads},
    {"token-major", 0.25, NULL, f_token},
    {"fused-qkv", 0.2, NULL, f_fused},
    {"padded-rows", 0.2, NULL, f_padded},
    {"out-head-major", 0.3, NULL, f_out_head},
    {"out-padded", 0.2, NULL, f_out_padded},
    {"kv_len", 0.25, NULL, f_kv_len},
    {"mask", 0.2, NULL, f_mask},
    {"mask-broadcast", 0.3, a_broadcast, f_broadcast},
    {"batch-without-keys", 0.2, a_padding, f_empty},
    {"lse", 0.6, NULL, f_lse},
    {"backward", 0.45, a_backward, f_backward},
    {"dlse", 0.5, a_dlse, f_dlse},
    /* the parts of jattn_mask beyond key padding, and grouped-query heads: where the backend serves them
     * in the draw's pass (probe_serves asks the library: the cuda backward serves every one) */
    {"kv-heads", 0.35, a_kv_heads, f_kv_heads},
    {"causal", 0.3, a_causal, f_causal},
    {"blocks", 0.2, a_blocks, f_blocks},
    {"segments", 0.2, a_segments, f_segments},
    {"key-bias", 0.25, a_bias, f_bias},
    {"tf32", 0.2, a_tf32, f_tf32},
    {"device-memory", 0.5, a_device, f_device},
    {"graph", 0.35, a_graph, f_graph},
    {"caller-workspace", 0.3, NULL, f_workspace},
    {"context", 0.3, a_ctx, f_ctx},
    {"plan", 0.3, NULL, f_plan},
};
enum { N_FEATURES = sizeof features / sizeof features[0] };

static const int64_t common_dims[] = {64, 128, 64, 128, 72, 96, 80, 256, 40, 16};

static void draw_one(draw *d, const offer *o, jt_rng *r, double budget, int hit[N_FEATURES]) {
    memset(d, 0, sizeof *d);
    d->B = 1, d->H = 1;
    d->D = jt_uniform(r) < 0.5 ? common_dims[(size_t)(jt_uniform(r) * 10)] : log_uniform(r, 1, 256);
    d->Sq = d->Skv = log_uniform(r, 1, max_seq);
    d->lay_in = L_FLUX, d->lay_out = L_FLUX;
    for (int f = 0; f < N_FEATURES; f++) {
        const feature *ft = &features[f];
        if (ft->applies && !ft->applies(o, d)) continue;
        if (jt_uniform(r) >= ft->probability) continue;
        ft->apply(d, r);
        hit[f] = 1;
        const size_t len = strlen(d->features);
        snprintf(d->features + len, sizeof d->features - len, " %s", ft->name);
    }
    if (d->lay_in == L_FUSED && d->lay_out == L_FLUX) d->lay_out = L_HEAD; /* as a fused projection's output */
    d->dist = (jt_dist)(jt_uniform(r) * (d->backward ? JT_DIST_COUNT - 1 : JT_DIST_COUNT));
    /* the budget: halve the longer sequence, then heads, then batch */
    while ((double)(d->B * d->H * d->Sq * d->Skv * d->D) > budget) {
        if (d->Sq > 1 || d->Skv > 1) {
            if (d->Sq >= d->Skv)
                d->Sq = (d->Sq + 1) / 2;
            else
                d->Skv = (d->Skv + 1) / 2;
        } else if (d->H > 1) {
            if (!d->kv_heads) /* with kv heads, heads stay a multiple of them */
                d->H--;
            else if (d->H > d->kv_heads)
                d->H -= d->kv_heads;
            else
                d->H = d->kv_heads = 1;
        } else if (d->B > 1) {
            d->B--;
        } else {
            break;
        }
    }
}

/* ---- a case: the draw's problem, buffers and padding ---- */
typedef struct sweep_case {
    draw d;
    jattn_problem p;
    jattn_grad_strides g;
    buf qb, kb, vb, outb, lseb, doutb, dlseb, dqb, dkb, dvb; /* kb, vb unused (base NULL) when fused */
    float *q, *k, *v;                                        /* the tensors (views into qb .. vb) */
    jattn_key_padding kp;
    int64_t *kv_len;
    uint8_t *mask;
    jattn_mask m;                 /* the draw's mask (m.padding = kp) when it has a part beyond key padding */
    int masked;                   /* m is the call's (jattn_*_masked) */
    int64_t *blocks, *segments;   /* block_q then block_kv offsets; cu_seqlens_q then _kv rows */
    int64_t n_blocks, n_segments; /* elements */
    float *bias;
    int64_t n_bias;
    int64_t KVH;                          /* key/value heads */
    double *ref_out, *ref_lse, *ref_g[3]; /* dense [B, H, Sq, D] / [B, H, Sq] / dk, dv [B, KVH, Skv, D] */
} sweep_case;

static jattn_strides padded_strides(int64_t H, int64_t S, int64_t D) {
    jattn_strides s;
    s.token = D + 5;
    s.head = S * s.token + 3;
    s.batch = H * s.head + 3;
    return s;
}

static jattn_strides strides_of(layout l, int64_t H, int64_t S, int64_t D) {
    return l == L_TOKEN    ? jattn_strides_token_major(H, S, D)
           : l == L_PADDED ? padded_strides(H, S, D)
                           : jattn_strides_head_major(H, S, D);
}

static int attends(const sweep_case *c, int64_t b, int64_t j) {
    if (c->kp.kv_len && j >= c->kp.kv_len[b]) return 0;
    if (c->kp.mask && !c->kp.mask[(c->kp.mask_batch > 1 ? b : 0) * c->kp.mask_keys + j]) return 0;
    return 1;
}

static float draw_value(jt_dist dist, int qk, jt_rng *r) {
    switch (dist) {
    case JT_UNIFORM: return (float)(2 * jt_uniform(r) - 1);
    case JT_NORMAL: return (float)jt_normal(r);
    case JT_PEAKY: return (float)(jt_normal(r) * (qk ? sqrt(8.0) : 1.0));
    default: return (float)(1e3 * (2 * jt_uniform(r) - 1)); /* large, as tests/harness.c */
    }
}

static void fill(const jattn_problem *p, int64_t heads, float *x, jattn_strides s, int64_t seq, jt_dist dist, int qk,
                 jt_rng *r) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < seq; i++)
                for (int64_t e = 0; e < p->head_dim; e++)
                    x[b * s.batch + h * s.head + i * s.token + e] = draw_value(dist, qk, r);
}

static void case_free(sweep_case *c) {
    buf *bs[] = {&c->qb, &c->kb, &c->vb, &c->outb, &c->lseb, &c->doutb, &c->dlseb, &c->dqb, &c->dkb, &c->dvb};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) buf_free(bs[i]);
    free(c->kv_len), free(c->mask), free(c->blocks), free(c->segments), free(c->bias);
    free(c->ref_out), free(c->ref_lse);
    for (int t = 0; t < 3; t++) free(c->ref_g[t]);
    memset(c, 0, sizeof *c);
}

/* The problem, its buffers and inputs. @return 0, or -1 on allocation failure. */
static int build(sweep_case *c, const draw *d, jt_rng *r) {
    memset(c, 0, sizeof *c);
    c->d = *d;
    jattn_problem *p = &c->p;
    const int64_t B = d->B, H = d->H, Sq = d->Sq, Skv = d->Skv, D = d->D, KVH = d->kv_heads ? d->kv_heads : H;
    *p = jattn_problem_flux(B, H, Sq, Skv, D);
    p->kv_heads = d->kv_heads;
    c->KVH = KVH;
    if (d->kv_heads) p->k = p->v = jattn_strides_head_major(KVH, Skv, D);
    int64_t k_off = 0, v_off = 0;
    if (d->lay_in == L_FUSED) { /* [B, S, 3, H, D] for q, k, v; with Sq != Skv, q alone and [B, Skv, 2, H, D] */
        if (Sq == Skv) {
            p->q.batch = p->k.batch = p->v.batch = Sq * 3 * H * D;
            p->q.head = p->k.head = p->v.head = D;
            p->q.token = p->k.token = p->v.token = 3 * H * D;
            k_off = H * D, v_off = 2 * H * D;
        } else {
            p->q = jattn_strides_token_major(H, Sq, D);
            p->k.batch = p->v.batch = Skv * 2 * H * D;
            p->k.head = p->v.head = D;
            p->k.token = p->v.token = 2 * H * D;
            v_off = H * D;
        }
    } else if (d->lay_in != L_FLUX) {
        p->q = strides_of(d->lay_in, H, Sq, D);
        p->k = strides_of(d->lay_in, KVH, Skv, D);
        p->v = strides_of(d->lay_in, KVH, Skv, D);
    }
    if (d->lay_out != L_FLUX) p->out = strides_of(d->lay_out, H, Sq, D);
    c->g = jattn_grad_strides_like(p);
    const int64_t nl = B * H * Sq;
    int fail = 0;
    if (d->lay_in == L_FUSED && Sq == Skv) {
        fail |= buf_alloc(&c->qb, kit_tensor_span(p, p->q, Sq) + v_off);
        c->q = c->qb.base + GUARD, c->k = c->q + k_off, c->v = c->q + v_off;
    } else if (d->lay_in == L_FUSED) {
        fail |= buf_alloc(&c->qb, kit_tensor_span(p, p->q, Sq));
        fail |= buf_alloc(&c->kb, kit_kv_span(p, p->k) + v_off);
        if (!fail) c->q = c->qb.base + GUARD, c->k = c->kb.base + GUARD, c->v = c->k + v_off;
    } else {
        fail |= buf_alloc(&c->qb, kit_tensor_span(p, p->q, Sq));
        fail |= buf_alloc(&c->kb, kit_kv_span(p, p->k));
        fail |= buf_alloc(&c->vb, kit_kv_span(p, p->v));
        if (!fail) c->q = c->qb.base + GUARD, c->k = c->kb.base + GUARD, c->v = c->vb.base + GUARD;
    }
    fail |= buf_alloc(&c->outb, kit_tensor_span(p, p->out, Sq));
    fail |= buf_alloc(&c->lseb, nl);
    if (d->backward) {
        fail |= buf_alloc(&c->doutb, kit_tensor_span(p, c->g.dout, Sq));
        if (d->dlse) fail |= buf_alloc(&c->dlseb, nl);
        fail |= buf_alloc(&c->dqb, kit_tensor_span(p, c->g.dq, Sq));
        fail |= buf_alloc(&c->dkb, kit_kv_span(p, c->g.dk));
        fail |= buf_alloc(&c->dvb, kit_kv_span(p, c->g.dv));
    }
    c->ref_out = malloc((size_t)(nl * D) * sizeof(double));
    c->ref_lse = malloc((size_t)nl * sizeof(double));
    for (int t = 0; t < 3 && d->backward; t++)
        c->ref_g[t] = calloc((size_t)(B * (t ? KVH * Skv : H * Sq) * D), sizeof(double));
    if (fail || !c->ref_out || !c->ref_lse || (d->backward && (!c->ref_g[0] || !c->ref_g[1] || !c->ref_g[2])))
        return -1;
    /* inputs; large: the explicit scale of tests/harness.c (logits of standard deviation 8) */
    if (d->dist == JT_LARGE) p->scale = (float)(8.0 / (sqrt((double)D) * 1e6 / 3.0));
    fill(p, H, c->q, p->q, Sq, d->dist, 1, r);
    fill(p, KVH, c->k, p->k, Skv, d->dist, 1, r);
    fill(p, KVH, c->v, p->v, Skv, d->dist, 0, r);
    if (d->backward) {
        fill(p, H, c->doutb.base + GUARD, c->g.dout, Sq, JT_NORMAL, 0, r);
        for (int64_t i = 0; i < nl && d->dlse; i++) c->dlseb.base[GUARD + i] = (float)jt_normal(r);
    }
    /* key padding: lengths in [0, Skv] (0 and Skv often), masks of density 0.6 (or one row broadcast) */
    if (d->kv_len || d->mask) {
        c->kv_len = d->kv_len ? malloc((size_t)B * sizeof *c->kv_len) : NULL;
        const int64_t rows = d->mask_broadcast ? 1 : B;
        c->mask = d->mask ? malloc((size_t)(rows * Skv)) : NULL;
        if ((d->kv_len && !c->kv_len) || (d->mask && !c->mask)) return -1;
        for (int64_t b = 0; b < B && c->kv_len; b++) {
            const double u = jt_uniform(r);
            c->kv_len[b] = u < 0.15 ? Skv : u < 0.25 ? 0 : (int64_t)(jt_uniform(r) * (double)(Skv + 1));
        }
        for (int64_t j = 0; j < rows * Skv && c->mask; j++) c->mask[j] = jt_uniform(r) < 0.6;
        if (d->empty_batch) { /* batch B-1 attends nothing */
            if (c->kv_len) c->kv_len[B - 1] = 0;
            if (c->mask && !c->kv_len)
                for (int64_t j = 0; j < Skv; j++) c->mask[(rows - 1) * Skv + j] = 0;
        }
        c->kp.kv_len = c->kv_len;
        c->kp.mask = c->mask;
        c->kp.mask_batch = c->mask ? rows : 0;
        c->kp.mask_keys = c->mask ? Skv : 0;
        /* the keys left out: NaN in k and v (a backend that reads them gives NaN) */
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < Skv; j++)
                if (!attends(c, b, j))
                    for (int64_t h = 0; h < KVH; h++)
                        for (int64_t e = 0; e < D; e++) {
                            c->k[b * p->k.batch + h * p->k.head + j * p->k.token + e] = NAN;
                            c->v[b * p->v.batch + h * p->v.head + j * p->v.token + e] = NAN;
                        }
    }
    /* the other parts of the mask */
    c->masked = d->causal || d->blocks || d->segments || d->bias;
    c->m.padding = c->kp;
    c->m.causal = (jattn_causal)d->causal;
    if (d->blocks) { /* block_q then block_kv: sorted cuts from 0 to Sq (Skv); the same array at Sq == Skv, often */
        const int64_t nb = d->blocks, shared = Sq == Skv && jt_uniform(r) < 0.5;
        c->n_blocks = 2 * (nb + 1);
        if (!(c->blocks = malloc((size_t)c->n_blocks * sizeof *c->blocks))) return -1;
        for (int side = 0; side < 2; side++) {
            int64_t *cut = c->blocks + side * (nb + 1);
            const int64_t n = side ? Skv : Sq;
            cut[0] = 0, cut[nb] = n;
            for (int64_t a = 1; a < nb; a++) cut[a] = (int64_t)(jt_uniform(r) * (double)(n + 1));
            for (int64_t a = 1; a < nb; a++) /* sorted */
                for (int64_t z = a + 1; z < nb; z++)
                    if (cut[z] < cut[a]) {
                        const int64_t t = cut[a];
                        cut[a] = cut[z], cut[z] = t;
                    }
        }
        c->m.block_q = c->blocks;
        c->m.block_kv = shared ? c->blocks : c->blocks + nb + 1;
        c->m.num_blocks = nb;
    }
    if (d->segments) { /* per batch rows (or one row for every batch) of cu_seqlens_q, then of _kv */
        const int64_t ns = d->segments, rows = B > 1 && jt_uniform(r) < 0.6 ? B : 1, stride = rows > 1 ? ns + 2 : 0;
        const int64_t row_len = rows > 1 ? stride : ns + 1;
        c->n_segments = 2 * rows * row_len;
        if (!(c->segments = calloc((size_t)c->n_segments, sizeof *c->segments))) return -1;
        for (int side = 0; side < 2; side++)
            for (int64_t b = 0; b < rows; b++) {
                int64_t *cu = c->segments + side * rows * row_len + b * row_len;
                const int64_t n = side ? Skv : Sq;
                for (int64_t sgm = 1; sgm <= ns; sgm++) /* non-decreasing, the last <= n */
                    cu[sgm] = cu[sgm - 1] + (int64_t)(jt_uniform(r) * (double)(n - cu[sgm - 1] + 1) *
                                                      (sgm == ns && jt_uniform(r) < 0.7 ? 1.0 : 0.6));
                if (jt_uniform(r) < 0.5) cu[ns] = n; /* often every token in a segment */
            }
        c->m.cu_seqlens_q = c->segments;
        c->m.cu_seqlens_kv = c->segments + rows * row_len;
        c->m.num_segments = ns;
        c->m.segments_batch_stride = stride;
    }
    if (d->bias) { /* normal values and some -inf; broadcast over the batch or the heads at random */
        const int64_t hs = jt_uniform(r) < 0.6 ? Skv : 0, bs = jt_uniform(r) < 0.6 ? (hs ? H * Skv : Skv) : 0;
        c->n_bias = (B - 1) * bs + (H - 1) * hs + Skv;
        if (!(c->bias = malloc((size_t)c->n_bias * sizeof *c->bias))) return -1;
        for (int64_t j = 0; j < c->n_bias; j++)
            c->bias[j] = jt_uniform(r) < 0.1 ? -INFINITY : (float)(2 * jt_normal(r));
        c->m.key_bias = c->bias;
        c->m.key_bias_batch_stride = bs;
        c->m.key_bias_head_stride = hs;
    }
    return 0;
}

/* Whether query i of (b, h) attends key j (jattn.h's jattn_mask: segments, causal, blocks, the key padding;
 * a key bias of -inf too), and its bias (0 without one). */
static int attends_full(const sweep_case *c, int64_t b, int64_t h, int64_t i, int64_t j, double *bias) {
    const jattn_mask *m = &c->m;
    *bias = 0;
    if (!attends(c, b, j)) return 0;
    int64_t t = i, u = j, lq = c->p.seq_q, lk = c->p.seq_kv;
    if (m->cu_seqlens_q) {
        const int64_t *cq = m->cu_seqlens_q + b * m->segments_batch_stride;
        const int64_t *ck = m->cu_seqlens_kv + b * m->segments_batch_stride;
        int64_t sg = -1;
        for (int64_t z = 0; z < m->num_segments && sg < 0; z++)
            if (cq[z] <= i && i < cq[z + 1]) sg = z;
        if (sg < 0 || j < ck[sg] || j >= ck[sg + 1]) return 0;
        t = i - cq[sg], u = j - ck[sg], lq = cq[sg + 1] - cq[sg], lk = ck[sg + 1] - ck[sg];
    }
    if (m->causal == JATTN_CAUSAL_TOP_LEFT && u > t) return 0;
    if (m->causal == JATTN_CAUSAL_BOTTOM_RIGHT && u > t + lk - lq) return 0;
    if (m->block_q)
        for (int64_t a = 0; a < m->num_blocks; a++)
            if (m->block_q[a] <= i && i < m->block_q[a + 1] && j >= m->block_kv[a + 1]) return 0;
    if (m->key_bias) {
        *bias = m->key_bias[b * m->key_bias_batch_stride + h * m->key_bias_head_stride + j];
        if (*bias == -INFINITY) return 0;
    }
    return 1;
}

static const jattn_key_padding *padding_of(const sweep_case *c) { return c->kv_len || c->mask ? &c->kp : NULL; }

/* ---- the float64 reference ----
 * For each (b, h, i): scores s_j = scale q_i . k_j over the attended keys (with round_logits each rounded
 * to float32 once), softmax, out and lse; with the backward, the gradients of sum(dout . out) +
 * sum(dlse . lse), its weights exp(s - lse) and its dO . O taken from given_out / given_lse (the float32
 * out and lse a backward is handed, dense) when those are given. Dense outputs. */
static double dot64(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t e = 0; e < n; e++) s += (double)a[e] * (double)b[e];
    return s;
}

static void reference(const sweep_case *c, int round_logits, const float *given_out, const float *given_lse,
                      double *out, double *lse, double *g[3]) {
    const jattn_problem *p = &c->p;
    const int64_t B = p->batch, H = p->heads, Sq = p->seq_q, Skv = p->seq_kv, D = p->head_dim, KVH = c->KVH;
    const double scale = p->scale > 0 ? (double)p->scale : (double)(float)(1.0 / sqrt((double)D));
    double *sc = malloc((size_t)Skv * sizeof *sc), *s = malloc((size_t)Skv * sizeof *s);
    double *o = malloc((size_t)D * sizeof *o);
    unsigned char *att = malloc((size_t)Skv);
    const float *dout = c->d.backward ? c->doutb.base + GUARD : NULL;
    const float *dlse = c->d.dlse ? c->dlseb.base + GUARD : NULL;
    for (int t = 0; t < 3 && g; t++) memset(g[t], 0, (size_t)(B * (t ? KVH * Skv : H * Sq) * D) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Sq; i++) {
                const int64_t kh = h / (H / KVH); /* the key/value head query head h reads */
                const float *qi = c->q + b * p->q.batch + h * p->q.head + i * p->q.token;
                const float *kb = c->k + b * p->k.batch + kh * p->k.head, *vb = c->v + b * p->v.batch + kh * p->v.head;
                const int64_t row = (b * H + h) * Sq + i;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < Skv; j++) {
                    double bias;
                    att[j] = (unsigned char)attends_full(c, b, h, i, j, &bias);
                    if (!att[j]) continue;
                    sc[j] = scale * dot64(qi, kb + j * p->k.token, D);
                    if (round_logits) sc[j] = (double)(float)sc[j];
                    sc[j] += bias;
                    if (sc[j] > mx) mx = sc[j];
                }
                memset(o, 0, (size_t)D * sizeof *o);
                if (mx == -INFINITY) { /* no key: out 0, lse -inf, gradients 0 */
                    if (out) memset(out + row * D, 0, (size_t)D * sizeof *out);
                    if (lse) lse[row] = -INFINITY;
                    continue;
                }
                for (int64_t j = 0; j < Skv; j++)
                    if (att[j]) sum += exp(sc[j] - mx);
                const double l = mx + log(sum);
                for (int64_t j = 0; j < Skv; j++)
                    if (att[j]) {
                        s[j] = given_lse ? exp(sc[j] - (double)given_lse[row]) : exp(sc[j] - mx) / sum;
                        for (int64_t e = 0; e < D; e++) o[e] += s[j] * (double)vb[j * p->v.token + e];
                    }
                if (out) memcpy(out + row * D, o, (size_t)D * sizeof *o);
                if (lse) lse[row] = l;
                if (!g || !dout) continue;
                const float *gi = dout + b * c->g.dout.batch + h * c->g.dout.head + i * c->g.dout.token;
                double dl = 0;
                for (int64_t e = 0; e < D; e++)
                    dl += (double)gi[e] * (given_out ? (double)given_out[row * D + e] : o[e]);
                if (dlse) dl -= (double)dlse[row];
                for (int64_t j = 0; j < Skv; j++)
                    if (att[j]) { /* dk, dv of a key/value head sum over the query heads that read it */
                        const float *kj = kb + j * p->k.token, *vj = vb + j * p->v.token;
                        const double ds = s[j] * (dot64(gi, vj, D) - dl) * scale;
                        double *dq = g[0] + row * D, *dk = g[1] + ((b * KVH + kh) * Skv + j) * D;
                        double *dv = g[2] + ((b * KVH + kh) * Skv + j) * D;
                        for (int64_t e = 0; e < D; e++) {
                            dq[e] += ds * (double)kj[e];
                            dk[e] += ds * (double)qi[e];
                            dv[e] += s[j] * (double)gi[e];
                        }
                    }
            }
    free(sc), free(s), free(o), free(att);
}

/* ---- the call ---- */

/* The tensor of strides s (heads, seq rows) in x gathered dense [B, heads, seq, D]. */
static void gather(const jattn_problem *p, int64_t heads, const float *x, jattn_strides s, int64_t seq, float *dense) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < seq; i++)
                memcpy(dense + ((b * heads + h) * seq + i) * p->head_dim, x + b * s.batch + h * s.head + i * s.token,
                       (size_t)p->head_dim * sizeof(float));
}

/* The inverse: dense [B, H, seq, D] into x through strides s. */
static void scatter(const jattn_problem *p, const float *dense, jattn_strides s, int64_t seq, float *x) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < seq; i++)
                memcpy(x + b * s.batch + h * s.head + i * s.token, dense + ((b * p->heads + h) * seq + i) * p->head_dim,
                       (size_t)p->head_dim * sizeof(float));
}

/* 1 when every element of b outside the tensor (strides s, heads, seq rows) is still poison. */
static int outside_untouched(const jattn_problem *p, int64_t heads, const buf *bf, jattn_strides s, int64_t seq) {
    unsigned char *inside = calloc((size_t)bf->n, 1);
    if (!inside) return 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < seq; i++)
                memset(inside + GUARD + b * s.batch + h * s.head + i * s.token, 1, (size_t)p->head_dim);
    int ok = 1;
    for (int64_t i = 0; i < bf->n && ok; i++)
        if (!inside[i] && !is_poison(bf->base[i])) ok = 0;
    free(inside);
    return ok;
}

#ifdef JATTN_TEST_SWEEP_CUDA
#define CUDA_TRY(x)                                                                                 \
    do {                                                                                            \
        cudaError_t err_ = (x);                                                                     \
        if (err_ != cudaSuccess) {                                                                  \
            snprintf(why, whylen, "%s:%d: %s: %s", __FILE__, __LINE__, #x, cudaGetErrorName(err_)); \
            st = JATTN_ERROR_CUDA;                                                                  \
            goto done;                                                                              \
        }                                                                                           \
    } while (0)
#endif

/* The pointers of one call (host, or the device copies). */
typedef struct call_args {
    const float *q, *k, *v, *dout, *dlse;
    float *out, *lse, *dq, *dk, *dv;
    const jattn_mask *mask; /* NULL: none */
} call_args;

static const jattn_mask *mask_of(const sweep_case *c) { return c->masked || padding_of(c) ? &c->m : NULL; }

/* One call of the draw: through its plan (the draw's `plan` feature), else the one-call function of its
 * kind (jattn_*_masked with a mask part beyond key padding, jattn_forward_padded / jattn_backward else). */
static jattn_status invoke(const sweep_case *c, const jattn_plan *plan, const jattn_exec *e, jattn_ctx *ctx,
                           const call_args *a) {
    const draw *d = &c->d;
    const jattn_key_padding *pad =
        a->mask && (a->mask->padding.kv_len || a->mask->padding.mask) ? &a->mask->padding : NULL;
    if (d->plan && !d->backward)
        return jattn_plan_forward(plan, ctx, e->cuda_stream, e->workspace, e->workspace_bytes, a->q, a->k, a->v,
                                  a->mask, a->out, a->lse);
    if (d->plan)
        return jattn_plan_backward(plan, ctx, e->cuda_stream, e->workspace, e->workspace_bytes, a->q, a->k, a->v,
                                   a->out, a->lse, a->dout, a->dlse, a->mask, a->dq, a->dk, a->dv);
    if (!d->backward)
        return c->masked ? jattn_forward_masked(ctx, &c->p, e, a->q, a->k, a->v, a->mask, a->out, a->lse)
                         : jattn_forward_padded(ctx, &c->p, e, a->q, a->k, a->v, pad, a->out, a->lse);
    return c->masked ? jattn_backward_masked(ctx, &c->p, &c->g, e, a->q, a->k, a->v, a->out, a->lse, a->dout, a->dlse,
                                             a->mask, a->dq, a->dk, a->dv)
                     : jattn_backward(ctx, &c->p, &c->g, e, a->q, a->k, a->v, a->out, a->lse, a->dout, a->dlse, pad,
                                      a->dq, a->dk, a->dv);
}

/* Runs the draw's call: host pointers (through ctx when the draw asks), or (cuda) device copies of every
 * buffer (guards included) and of the mask's arrays on a non-blocking stream of the test's, the inputs
 * copied on that stream, optionally captured into a CUDA graph and launched; the output buffers copied
 * back whole. The workspace (a caller's, when the draw asks) is the size the call's plan says. */
static jattn_status run_call(sweep_case *c, const offer *o, jattn_ctx *ctx, char *why, size_t whylen) {
    const draw *d = &c->d;
    jattn_exec e = {0};
    e.backend = o->backend;
    e.precision = d->tf32 ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
    e.memory = d->device ? JATTN_MEMORY_DEVICE : JATTN_MEMORY_HOST;
    /* a plan's alignment: the pointers' (fused views sit H D floats apart; the buffers' bases, host and
     * device copies alike, are 16-byte aligned) */
    e.alignment = 16;
    const float *ptrs[3] = {c->q, c->k, c->v};
    const buf *owner[3] = {&c->qb, c->kb.base ? &c->kb : &c->qb, c->vb.base ? &c->vb : c->kb.base ? &c->kb : &c->qb};
    for (int i = 0; i < 3; i++)
        while (((size_t)(ptrs[i] - owner[i]->base) * sizeof(float)) % e.alignment) e.alignment /= 2;
    jattn_plan *plan = NULL;
    jattn_status st =
        jattn_plan_create(&plan, d->backward ? JATTN_PASS_BACKWARD : JATTN_PASS_FORWARD, &c->p, &c->g, mask_of(c), &e);
    if (st != JATTN_OK) return st;
    const size_t need = jattn_plan_workspace_size(plan);
    call_args a = {c->q,
                   c->k,
                   c->v,
                   d->backward ? c->doutb.base + GUARD : NULL,
                   c->dlseb.base ? c->dlseb.base + GUARD : NULL,
                   c->outb.base + GUARD,
                   d->lse || d->backward ? c->lseb.base + GUARD : NULL,
                   d->backward ? c->dqb.base + GUARD : NULL,
                   d->backward ? c->dkb.base + GUARD : NULL,
                   d->backward ? c->dvb.base + GUARD : NULL,
                   mask_of(c)};
    if (!d->device) {
        void *ws = NULL;
        if (d->workspace && need) {
#ifdef JATTN_TEST_SWEEP_CUDA
            if (o->device_memory) { /* the cuda backend's workspace is device memory */
                if (cudaMalloc(&ws, need) != cudaSuccess) ws = NULL;
            } else
#endif
                ws = malloc(need);
            if (!ws) {
                jattn_plan_free(plan);
                return JATTN_ERROR_OUT_OF_MEMORY;
            }
            e.workspace = ws, e.workspace_bytes = need;
        }
        st = invoke(c, plan, &e, d->ctx ? ctx : NULL, &a);
#ifdef JATTN_TEST_SWEEP_CUDA
        if (ws && o->device_memory)
            (void)cudaFree(ws);
        else
#endif
            free(ws);
        jattn_plan_free(plan);
        return st;
    }
#ifndef JATTN_TEST_SWEEP_CUDA
    jattn_plan_free(plan);
    snprintf(why, whylen, "device memory: this test was built without the CUDA runtime");
    return JATTN_ERROR_UNSUPPORTED;
#else
    buf *bufs[10] = {&c->qb, &c->kb, &c->vb, &c->outb, &c->lseb, &c->doutb, &c->dlseb, &c->dqb, &c->dkb, &c->dvb};
    const int is_out[10] = {0, 0, 0, !d->backward, !d->backward, 0, 0, 1, 1, 1};
    float *dev[10] = {NULL}, *dbias = NULL;
    int64_t *dlen = NULL, *dblocks = NULL, *dsegs = NULL;
    uint8_t *dmask = NULL;
    void *ws = NULL;
    cudaStream_t s = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    jattn_mask dm = c->m; /* the mask with its arrays in device memory */
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 10; i++)
        if (bufs[i]->base) {
            CUDA_TRY(cudaMalloc((void **)&dev[i], (size_t)bufs[i]->n * sizeof(float)));
            CUDA_TRY(
                cudaMemcpyAsync(dev[i], bufs[i]->base, (size_t)bufs[i]->n * sizeof(float), cudaMemcpyHostToDevice, s));
        }
    if (c->kv_len) {
        CUDA_TRY(cudaMalloc((void **)&dlen, (size_t)c->p.batch * sizeof *dlen));
        CUDA_TRY(cudaMemcpyAsync(dlen, c->kv_len, (size_t)c->p.batch * sizeof *dlen, cudaMemcpyHostToDevice, s));
        dm.padding.kv_len = dlen;
    }
    if (c->mask) {
        const size_t n = (size_t)(c->kp.mask_batch * c->kp.mask_keys);
        CUDA_TRY(cudaMalloc((void **)&dmask, n));
        CUDA_TRY(cudaMemcpyAsync(dmask, c->mask, n, cudaMemcpyHostToDevice, s));
        dm.padding.mask = dmask;
    }
    if (c->blocks) {
        CUDA_TRY(cudaMalloc((void **)&dblocks, (size_t)c->n_blocks * sizeof *dblocks));
        CUDA_TRY(cudaMemcpyAsync(dblocks, c->blocks, (size_t)c->n_blocks * sizeof *dblocks, cudaMemcpyHostToDevice, s));
        dm.block_q = dblocks + (c->m.block_q - c->blocks), dm.block_kv = dblocks + (c->m.block_kv - c->blocks);
    }
    if (c->segments) {
        CUDA_TRY(cudaMalloc((void **)&dsegs, (size_t)c->n_segments * sizeof *dsegs));
        CUDA_TRY(cudaMemcpyAsync(dsegs, c->segments, (size_t)c->n_segments * sizeof *dsegs, cudaMemcpyHostToDevice, s));
        dm.cu_seqlens_q = dsegs + (c->m.cu_seqlens_q - c->segments);
        dm.cu_seqlens_kv = dsegs + (c->m.cu_seqlens_kv - c->segments);
    }
    if (c->bias) {
        CUDA_TRY(cudaMalloc((void **)&dbias, (size_t)c->n_bias * sizeof *dbias));
        CUDA_TRY(cudaMemcpyAsync(dbias, c->bias, (size_t)c->n_bias * sizeof *dbias, cudaMemcpyHostToDevice, s));
        dm.key_bias = dbias;
    }
    if (d->workspace && need) CUDA_TRY(cudaMalloc(&ws, need));
    e.cuda_stream = s;
    e.workspace = ws, e.workspace_bytes = ws ? need : 0;
    /* the tensors at the same offsets in the device copies */
#define DEV(i, ptr) ((ptr) ? dev[i] + ((ptr)-bufs[i]->base) : NULL)
    a.q = DEV(0, c->q);
    a.k = c->kb.base ? DEV(1, c->k) : dev[0] + (c->k - c->qb.base);
    a.v = c->vb.base ? DEV(2, c->v) : c->kb.base ? dev[1] + (c->v - c->kb.base) : dev[0] + (c->v - c->qb.base);
    a.out = dev[3] + GUARD;
    a.lse = a.lse ? dev[4] + GUARD : NULL;
    a.dout = a.dout ? dev[5] + GUARD : NULL;
    a.dlse = a.dlse ? dev[6] + GUARD : NULL;
    a.dq = a.dq ? dev[7] + GUARD : NULL, a.dk = a.dk ? dev[8] + GUARD : NULL, a.dv = a.dv ? dev[9] + GUARD : NULL;
    a.mask = a.mask ? &dm : NULL;
#undef DEV
    if (d->graph) CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    st = invoke(c, plan, &e, NULL, &a);
    if (d->graph) {
        CUDA_TRY(cudaStreamEndCapture(s, &graph));
        if (st != JATTN_OK) goto done;
        CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_TRY(cudaGraphLaunch(exec, s));
    }
    if (st != JATTN_OK) goto done;
    CUDA_TRY(cudaStreamSynchronize(s));
    for (int i = 0; i < 10; i++)
        if (is_out[i] && bufs[i]->base)
            CUDA_TRY(cudaMemcpy(bufs[i]->base, dev[i], (size_t)bufs[i]->n * sizeof(float), cudaMemcpyDeviceToHost));
done:
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
    for (int i = 0; i < 10; i++) (void)cudaFree(dev[i]);
    (void)cudaFree(dlen), (void)cudaFree(dmask), (void)cudaFree(dblocks), (void)cudaFree(dsegs), (void)cudaFree(dbias);
    (void)cudaFree(ws);
    if (s) (void)cudaStreamDestroy(s);
    jattn_plan_free(plan);
    return st;
#endif
}

/* ---- the checks ---- */

/* Metrics of a gathered output against the float64 reference (rounded to float32 once). */
static void compare(const float *got, const double *ref, int64_t n, jattn_metrics *m) {
    float *r = malloc((size_t)n * sizeof *r);
    if (!r) {
        memset(m, 0, sizeof *m);
        m->rel_l2 = INFINITY;
        return;
    }
    for (int64_t i = 0; i < n; i++) r[i] = (float)ref[i];
    jattn_metrics_compute_dense(got, r, n, m);
    free(r);
}

/* The float32 floor of the gradients (kit/metrics.h, JATTN_BWD_FLOOR_TIMES): float64 gradients from the
 * forward's out and lse rounded to float32 once, logits rounded to float32 once and exact, the larger of
 * the two metrics, against the reference. */
static int floor_of(const sweep_case *c, const float *out32, const float *lse32, jattn_metrics f[3]) {
    const jattn_problem *p = &c->p;
    const int64_t n[3] = {p->batch * p->heads * p->seq_q * p->head_dim, p->batch * c->KVH * p->seq_kv * p->head_dim,
                          p->batch * c->KVH * p->seq_kv * p->head_dim};
    double *g[3] = {NULL, NULL, NULL};
    float *gf = malloc((size_t)(n[0] > n[1] ? n[0] : n[1]) * sizeof *gf);
    int ok = gf != NULL;
    for (int t = 0; t < 3; t++) ok &= (g[t] = malloc((size_t)n[t] * sizeof(double))) != NULL;
    for (int round = 1; ok && round >= 0; round--) {
        reference(c, round, out32, lse32, NULL, NULL, g);
        for (int t = 0; t < 3; t++) {
            for (int64_t i = 0; i < n[t]; i++) gf[i] = (float)g[t][i];
            jattn_metrics m;
            compare(gf, c->ref_g[t], n[t], &m);
            if (round) {
                f[t] = m;
            } else {
                if (m.rel_l2 > f[t].rel_l2) f[t].rel_l2 = m.rel_l2;
                if (m.max_abs > f[t].max_abs) f[t].max_abs = m.max_abs;
                if (m.cos < f[t].cos) f[t].cos = m.cos;
            }
        }
    }
    for (int t = 0; t < 3; t++) free(g[t]);
    free(gf);
    return ok ? 0 : -1;
}

/* Checks a draw's results; appends to line what it found. @return 1 pass. */
static int check(sweep_case *c, uint64_t inputs_before, char *line, size_t linelen) {
    const draw *d = &c->d;
    const jattn_problem *p = &c->p;
    const jattn_precision prec = d->tf32 ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
    const int64_t nl = p->batch * p->heads * p->seq_q, nq = nl * p->head_dim,
                  nk = p->batch * c->KVH * p->seq_kv * p->head_dim;
    int ok = 1;
    size_t len = strlen(line);
#define SAY(...) (len < linelen ? (void)(len += (size_t)snprintf(line + len, linelen - len, __VA_ARGS__)) : (void)0)
    uint64_t h = 0xCBF29CE484222325ull;
    h = buf_hash(h, &c->qb), h = buf_hash(h, &c->kb), h = buf_hash(h, &c->vb);
    if (d->backward) h = buf_hash(buf_hash(buf_hash(h, &c->outb), &c->lseb), &c->doutb), h = buf_hash(h, &c->dlseb);
    if (h != inputs_before) {
        SAY(" [modified an input]");
        ok = 0;
    }
    if (!d->backward) {
        float *got = malloc((size_t)nq * sizeof *got);
        if (!got) return 0;
        gather(p, p->heads, c->outb.base + GUARD, p->out, p->seq_q, got);
        jattn_metrics m;
        compare(got, c->ref_out, nq, &m);
        const int pass = jattn_metrics_pass(&m, prec);
        SAY(" | out rel_l2 %.3g max_abs %.3g%s", m.rel_l2, m.max_abs, pass ? "" : " [FAIL]");
        ok &= pass;
        free(got);
        if (!outside_untouched(p, p->heads, &c->outb, p->out, p->seq_q)) {
            SAY(" [wrote outside out]");
            ok = 0;
        }
        const float *lse = c->lseb.base + GUARD;
        if (d->lse) {
            float *ref = malloc((size_t)nl * sizeof *ref);
            int lpass = ref != NULL;
            for (int64_t i = 0; lpass && i < nl; i++) {
                ref[i] = (float)c->ref_lse[i];
                if (isinf(c->ref_lse[i]) && !(isinf(lse[i]) && lse[i] < 0)) lpass = 0; /* no key: -inf */
            }
            lpass = lpass && jattn_lse_pass(lse, ref, nl, prec);
            free(ref);
            SAY(" | lse%s", lpass ? " ok" : " [FAIL]");
            ok &= lpass;
        } else {
            for (int64_t i = 0; i < nl; i++)
                if (!is_poison(lse[i])) {
                    SAY(" [lse written, not asked]");
                    ok = 0;
                    break;
                }
        }
        return ok;
    }
    const buf *gb[3] = {&c->dqb, &c->dkb, &c->dvb};
    const jattn_strides gs[3] = {c->g.dq, c->g.dk, c->g.dv};
    const int64_t n[3] = {nq, nk, nk};
    const char *names[3] = {"dq", "dk", "dv"};
    jattn_metrics fl[3];
    int have_floor = 0;
    float *out32 = malloc((size_t)nq * sizeof *out32), *got = malloc((size_t)(nk > nq ? nk : nq) * sizeof *got);
    if (!out32 || !got) {
        free(out32), free(got);
        return 0;
    }
    gather(p, p->heads, c->outb.base + GUARD, p->out, p->seq_q, out32);
    for (int t = 0; t < 3; t++) {
        gather(p, t ? c->KVH : p->heads, gb[t]->base + GUARD, gs[t], t ? p->seq_kv : p->seq_q, got);
        jattn_metrics m;
        compare(got, c->ref_g[t], n[t], &m);
        int pass;
        if (prec == JATTN_PRECISION_TF32) {
            pass = m.rel_l2 <= JATTN_GATE_TF32_REL_L2 && !m.nonfinite;
        } else {
            pass = jattn_metrics_pass_backward(&m);
            if (!pass && !m.nonfinite) {
                if (!have_floor) have_floor = floor_of(c, out32, c->lseb.base + GUARD, fl) == 0 ? 1 : -1;
                pass = have_floor == 1 && jattn_metrics_pass_backward_floor(&m, &fl[t]);
                if (pass) SAY(" (%s within %dx the float32 floor %.3g)", names[t], JATTN_BWD_FLOOR_TIMES, fl[t].rel_l2);
            }
        }
        SAY(" | %s rel_l2 %.3g max_abs %.3g%s", names[t], m.rel_l2, m.max_abs, pass ? "" : " [FAIL]");
        ok &= pass;
        if (!outside_untouched(p, t ? c->KVH : p->heads, gb[t], gs[t], t ? p->seq_kv : p->seq_q)) {
            SAY(" [wrote outside %s]", names[t]);
            ok = 0;
        }
    }
    free(out32), free(got);
#undef SAY
    return ok;
}

/* ---- main ---- */

int main(int argc, char **argv) {
    jattn_backend backend;
    if (jt_backend_arg(argc, argv, "cpu", 0, "[DRAWS [BUDGET]]", &backend)) return 2;
    const int draws = argc > 2 ? atoi(argv[2]) : 120;
    const double budget = argc > 3 ? atof(argv[3]) : 2e6;
    if (budget >= 1e7) max_seq = 2048;
    const char *name = jattn_backend_name(backend);
    if (!jt_backend_present(backend)) {
        printf("SKIP: backend %s is not present in this build or on this machine\n", name);
        return JT_SKIP;
    }
    offer o = {0};
    o.backend = backend;
    jattn_backend_info info = {0};
    o.backward = jt_backend_info(backend, &info) && info.has_backward;
    o.tf32_fwd = jt_backend_takes_tf32(backend, 0);
    o.tf32_bwd = o.backward && jt_backend_takes_tf32(backend, 1);
    o.serves[0] = probe_serves(backend, JATTN_PASS_FORWARD);
    o.serves[1] = o.backward ? probe_serves(backend, JATTN_PASS_BACKWARD) : 0;
#ifdef JATTN_TEST_SWEEP_CUDA
    o.device_memory = info.memory == JATTN_MEMORY_DEVICE;
#endif
    printf("sweep of %s: %d draws, budget %.3g (B H Sq Skv D); backward %s, tf32 %s, device memory %s; mask parts "
           "served (kv-heads, causal, blocks, segments, key-bias bits) forward %#x, backward %#x\n",
           name, draws, budget, o.backward ? "yes" : "no", o.tf32_fwd ? "yes" : "no", o.device_memory ? "yes" : "no",
           o.serves[0], o.serves[1]);
    const char *only = getenv("JATTN_SWEEP_DRAW");
    const uint64_t seed = jt_seed();
    jattn_ctx *ctx = NULL;
    if (jattn_ctx_create(&ctx) != JATTN_OK) return 1;
    jt_tally tally = {0};
    int hits[N_FEATURES] = {0}, fails[N_FEATURES] = {0}, backward_draws = 0;
    for (int i = 0; i < draws; i++) {
        if (only && atoi(only) != i) continue;
        jt_rng r;
        jt_rng_init(&r, seed ^ (0xD7A3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull) ^ (uint64_t)backend);
        draw d;
        int hit[N_FEATURES] = {0};
        draw_one(&d, &o, &r, budget, hit);
        sweep_case c;
        char line[1024];
        snprintf(line, sizeof line, "draw %d: B=%lld H=%lld Sq=%lld Skv=%lld D=%lld dist=%s in=%s out=%s%s", i,
                 (long long)d.B, (long long)d.H, (long long)d.Sq, (long long)d.Skv, (long long)d.D,
                 jt_dist_name(d.dist), layout_names[d.lay_in], layout_names[d.lay_out], d.features);
        if (build(&c, &d, &r) != 0) {
            printf("FAIL %s: allocation\n", line);
            jt_tally_add(&tally, 0);
            case_free(&c);
            continue;
        }
        /* the reference; the backward is handed the float64 forward's out and lse rounded once */
        reference(&c, 0, NULL, NULL, c.ref_out, c.ref_lse, d.backward ? c.ref_g : NULL);
        if (d.backward) {
            float *o32 = malloc((size_t)(d.B * d.H * d.Sq * d.D) * sizeof *o32);
            if (!o32) return 1;
            for (int64_t e = 0; e < d.B * d.H * d.Sq * d.D; e++) o32[e] = (float)c.ref_out[e];
            scatter(&c.p, o32, c.p.out, d.Sq, c.outb.base + GUARD);
            for (int64_t e = 0; e < d.B * d.H * d.Sq; e++) c.lseb.base[GUARD + e] = (float)c.ref_lse[e];
            free(o32);
            backward_draws++;
        }
        uint64_t h = 0xCBF29CE484222325ull;
        h = buf_hash(h, &c.qb), h = buf_hash(h, &c.kb), h = buf_hash(h, &c.vb);
        if (d.backward) h = buf_hash(buf_hash(buf_hash(h, &c.outb), &c.lseb), &c.doutb), h = buf_hash(h, &c.dlseb);
        char why[256] = "";
        const jattn_status st = run_call(&c, &o, ctx, why, sizeof why);
        int ok;
        if (st != JATTN_OK) { /* a refusal too: every draw is within every backend's documented limits */
            printf("FAIL %s: %s: %s%s (seed %llu)\n", line, jattn_status_name(st), why[0] ? why : jattn_last_error(),
                   "", (unsigned long long)seed);
            ok = 0;
        } else {
            ok = check(&c, h, line, sizeof line);
            if (!ok || getenv("JATTN_TEST_VERBOSE"))
                printf("%s %s (seed %llu)\n", ok ? "ok  " : "FAIL", line, (unsigned long long)seed);
        }
        for (int f = 0; f < N_FEATURES; f++) hits[f] += hit[f], fails[f] += hit[f] && !ok;
        jt_tally_add(&tally, ok);
        case_free(&c);
    }
    jattn_ctx_free(ctx);
    printf("features (draws / failed):");
    for (int f = 0; f < N_FEATURES; f++) printf(" %s %d/%d", features[f].name, hits[f], fails[f]);
    printf("; backward draws %d\n", backward_draws);
    char title[64];
    snprintf(title, sizeof title, "test_sweep %s", name);
    return jt_tally_finish(&tally, title);
}
