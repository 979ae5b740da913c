/* The backward (jattn_backward): dq, dk, dv of one backend against a float64 evaluation of the
 * gradients computed here, on fresh random inputs (seed printed, JATTN_TEST_SEED replays).
 *
 *   gate        every gradient separately within the backward's gate (tools/metrics.h) over the
 *               parity battery's small shapes, the four input distributions, the layouts
 *               (FLUX, head-major, token-major, fused QKV views, padded strides, gradients at
 *               strides of their own); out and lse from the float64 forward rounded to float32
 *               (the backward alone); gradients poisoned (NaN) before the call, every element
 *               checked, nothing outside them written, no input modified; a `large` gradient
 *               past the gate passes only within 4x of its float32-logit floor (DESIGN.md §2),
 *               any gradient only within JATTN_BWD_FLOOR_TIMES of the float32 floor (below),
 *               and the note says so
 *   chain       the same with out and lse from the backend's own forward (the training chain),
 *               shapes of 33 queries and more
 *   floor       every gradient within the gate or JATTN_BWD_FLOOR_TIMES of the float32 floor
 *               (kit/metrics.h), shapes of 150 and more keys, the four distributions and logits of
 *               std 16 and 64, out and lse from the float64 forward and from the backend's own
 *   padding     key lengths and masks, masked k, v rows NaN, as the gate
 *   fewq        rows of one to three queries on `large` inputs, many draws (D 64 and 128, dlse or not,
 *               FLUX, padded rows, key padding): the dominant key's dS is a small difference of large
 *               terms (issue 37: the backward v2 missed the float32 floor there)
 *   masks       grouped-query heads (kv_heads), causal in both alignments, block-causal, segments
 *               (causal inside them too), the key bias (-inf and -10000 entries), with key padding
 *               and dlse, the four distributions, as the gate (the float64 gradients and floors
 *               applying the mask by this file's own reading of jattn.h); the k, v rows nobody
 *               attends NaN, their dk, dv +0, the dq rows of queries without a key +0; masked
 *               calls bitwise identical on 1, 2, 3, 5 threads, forward and backward; and NaN and
 *               Inf in a key change no out, lse or dq row of a query that does not attend it. Where
 *               the backend's own forward does not serve a mask, out and lse come from the ref
 *               forward and the backward is checked alone (`forward_serves`)
 *   fd          (ref only) the ref backward against central finite differences of a float64
 *               forward at tiny shapes: the oracle itself checked
 *   properties  dout * 2^k gives gradients * 2^k bit for bit; permuting the keys permutes dk and
 *               dv; masked k and v rows filled with NaN reach no output and get dk = dv = +0;
 *               a query row with no key gets dq = +0
 *   validation  every error of the call, nothing written on failure
 *   determinism bitwise identical across runs and CPU thread counts
 *   tf32        the tf32 precision: every gradient within rel_l2 1e-3 (in `all` for a backend whose
 *               backward takes tf32: the library's answer, jattn_backward_select)
 *   device      (cuda) the gate, fewq, padding and scaling parts again with device pointers: every array
 *               (guards included) copied to the GPU, the call on a stream of the test's with a
 *               caller workspace in device memory (exec.memory = DEVICE), the arrays copied back
 *   graph       (cuda) a backward captured into a CUDA graph, replayed twice: bit-identical to a
 *               direct call (determinism on the device), and within the gate
 * A shape a backend refuses with UNSUPPORTED naming head_dim (the cuda backward takes D <= 256) is
 * reported as skipped, never as passed. JATTN_CUDA_BWD_KERNEL=v3|v4 forces a cuda backward version
 * for the whole battery (ctest runs it with v3 forced too).
 *
 * usage: test_backward BACKEND [PART]   (a jattn_backend_name, or auto; PART one of the above,
 * default all). Exits 77 when the backend has no backward in this build or on this machine (cuda:
 * no GPU; a backend whose jattn_backend_info.has_backward is 0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "mask_rule.h"

#ifdef JATTN_TEST_BACKWARD_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- the float64 reference: gradients of sum(dout . out) + sum(dlse . lse) -------------------
 * Own softmax from the float32 inputs (full row, float64), own out and lse: the exact gradient
 * of the attention at these inputs, as float64 autograd of the math formula gives it.
 * Gradients are written dense, dq [B, H, Sq, D] and dk, dv [B, Hkv, Skv, D] (a key/value head's summed
 * over its query heads), rounded to float32 once; a mask (jattn_mask) and grouped-query heads as
 * include/jattn.h defines them (mask_rule.h). With round_logits, each
 * logit scale * q.k is rounded to float32 once before the softmax and everything else stays
 * float64: the backward's float32-logit floor (DESIGN.md §2). With given_out and given_lse (the
 * float32 out, through p->out's strides, and lse [B, H, Sq] a backward is handed), the weights are
 * exp(logit - given lse) and dO.O takes the given out, the rest float64: what float64 arithmetic
 * reaches from those rounded inputs (with round_logits too: the float32 floor of kit/metrics.h). */
typedef struct grads64 {
    float *dq, *dk, *dv; /* dense */
} grads64;

static double dot64(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t d = 0; d < n; d++) s += (double)a[d] * (double)b[d];
    return s;
}

/* The mask holding only a key padding (NULL: none). */
static const jattn_mask *pad_mask(const jattn_key_padding *kp, jattn_mask *scratch) {
    if (!kp) return NULL;
    memset(scratch, 0, sizeof *scratch);
    scratch->padding = *kp;
    return scratch;
}

static void reference_grads(const jattn_problem *p, const jattn_mask *msk, const float *q, const float *k,
                            const float *v, const float *dout, jattn_strides dos, const float *dlse, int round_logits,
                            const float *given_out, const float *given_lse, grads64 *g) {
    const int64_t B = p->batch, H = p->heads, Sq = p->seq_q, Skv = p->seq_kv, D = p->head_dim;
    const int64_t Hkv = kit_kv_heads(p), group = H / Hkv;
    /* the default scale as the library applies it: 1/sqrt(D) rounded to float32 (jattn.h's scale is a
     * float; at D = 128 the exact value would move every logit by 1.7e-8 of itself, ~0.2 ulp of a
     * peaky row's lse, against the out and lse a backward is handed) */
    const double scale = p->scale > 0 ? (double)p->scale : (double)(float)(1.0 / sqrt((double)D));
    double *s = malloc((size_t)Skv * sizeof *s), *o = malloc((size_t)D * sizeof *o);
    double *dk = calloc((size_t)(Skv * D), sizeof *dk), *dv = calloc((size_t)(Skv * D), sizeof *dv);
    double *dq = malloc((size_t)D * sizeof *dq);
    unsigned char *att = malloc((size_t)Skv);
    for (int64_t b = 0; b < B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++) {
            memset(dk, 0, (size_t)(Skv * D) * sizeof *dk);
            memset(dv, 0, (size_t)(Skv * D) * sizeof *dv);
            const float *kb = k + b * p->k.batch + hk * p->k.head, *vb = v + b * p->v.batch + hk * p->v.head;
            for (int64_t h = hk * group; h < (hk + 1) * group; h++) /* dk, dv of hk: its query heads' sum */
                for (int64_t i = 0; i < Sq; i++) {
                    const float *qi = q + b * p->q.batch + h * p->q.head + i * p->q.token;
                    const float *gi = dout + b * dos.batch + h * dos.head + i * dos.token;
                    double mx = -INFINITY, sum = 0;
                    for (int64_t j = 0; j < Skv; j++)
                        if ((att[j] = (unsigned char)jt_mask_attends(msk, p, b, h, i, j)) != 0) {
                            s[j] = scale * dot64(qi, kb + j * p->k.token, D) + jt_key_bias(msk, b, h, j);
                            if (round_logits) s[j] = (double)(float)s[j]; /* the float32-logit floor */
                            if (s[j] > mx) mx = s[j];
                        }
                    memset(o, 0, (size_t)D * sizeof *o);
                    memset(dq, 0, (size_t)D * sizeof *dq);
                    float *dqo = g->dq + ((b * H + h) * Sq + i) * D;
                    if (mx == -INFINITY) { /* no key: every gradient of this row is 0 */
                        for (int64_t d = 0; d < D; d++) dqo[d] = 0.0f;
                        continue;
                    }
                    const double lse_given = given_lse ? (double)given_lse[(b * H + h) * Sq + i] : 0.0;
                    for (int64_t j = 0; j < Skv; j++)
                        if (att[j]) {
                            s[j] = given_lse ? exp(s[j] - lse_given) : exp(s[j] - mx);
                            sum += s[j];
                        }
                    for (int64_t j = 0; j < Skv; j++)
                        if (att[j]) {
                            if (!given_lse) s[j] /= sum;
                            for (int64_t d = 0; d < D; d++) o[d] += s[j] * (double)vb[j * p->v.token + d];
                        }
                    if (given_out) {
                        const float *oi = given_out + b * p->out.batch + h * p->out.head + i * p->out.token;
                        for (int64_t d = 0; d < D; d++) o[d] = (double)oi[d];
                    }
                    double dl = 0;
                    for (int64_t d = 0; d < D; d++) dl += (double)gi[d] * o[d];
                    if (dlse) dl -= (double)dlse[(b * H + h) * Sq + i];
                    for (int64_t j = 0; j < Skv; j++)
                        if (att[j]) {
                            const float *kj = kb + j * p->k.token;
                            const double ds = s[j] * (dot64(gi, vb + j * p->v.token, D) - dl) * scale;
                            for (int64_t d = 0; d < D; d++) {
                                dq[d] += ds * (double)kj[d];
                                dk[j * D + d] += ds * (double)qi[d];
                                dv[j * D + d] += s[j] * (double)gi[d];
                            }
                        }
                    for (int64_t d = 0; d < D; d++) dqo[d] = (float)dq[d];
                }
            for (int64_t j = 0; j < Skv * D; j++) {
                g->dk[(b * Hkv + hk) * Skv * D + j] = (float)dk[j];
                g->dv[(b * Hkv + hk) * Skv * D + j] = (float)dv[j];
            }
        }
    free(s), free(o), free(dk), free(dv), free(dq), free(att);
}

/* ---- guarded tensors ---- */
#define GUARD 64
static const uint32_t POISON_BITS = 0x7FC0BEEFu;
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

typedef struct tensor {
    float *base; /* n floats, the tensor at base + GUARD */
    int64_t n;
    jattn_strides s;
    int64_t heads, seq; /* [B, heads, seq, D]: heads (q's side) or kv_heads (k's side) */
} tensor;

static int64_t span_of(const jattn_problem *p, int64_t heads, jattn_strides s, int64_t seq) {
    return 1 + (p->batch - 1) * s.batch + (heads - 1) * s.head + (seq - 1) * s.token + (p->head_dim - 1);
}

static int tensor_init(tensor *t, const jattn_problem *p, int64_t heads, jattn_strides s, int64_t seq) {
    t->n = span_of(p, heads, s, seq) + 2 * GUARD;
    t->base = malloc((size_t)t->n * sizeof(float));
    t->s = s;
    t->heads = heads;
    t->seq = seq;
    if (!t->base) return -1;
    for (int64_t i = 0; i < t->n; i++) t->base[i] = poison();
    return 0;
}
static float *at(const tensor *t) { return t->base + GUARD; }
static void tensor_poison(tensor *t) {
    for (int64_t i = 0; i < t->n; i++) t->base[i] = poison();
}

/* The tensor gathered dense [B, heads, seq, D]. */
static void gather(const jattn_problem *p, const tensor *t, float *dense) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < t->heads; h++)
            for (int64_t i = 0; i < t->seq; i++)
                memcpy(dense + ((b * t->heads + h) * t->seq + i) * p->head_dim,
                       at(t) + b * t->s.batch + h * t->s.head + i * t->s.token, (size_t)p->head_dim * sizeof(float));
}

/* 1 when every element outside the tensor's rows is still poison. */
static int outside_untouched(const jattn_problem *p, const tensor *t) {
    unsigned char *inside = calloc((size_t)t->n, 1);
    if (!inside) return 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < t->heads; h++)
            for (int64_t i = 0; i < t->seq; i++)
                memset(inside + GUARD + b * t->s.batch + h * t->s.head + i * t->s.token, 1, (size_t)p->head_dim);
    int ok = 1;
    for (int64_t i = 0; i < t->n && ok; i++)
        if (!inside[i] && !is_poison(t->base[i])) ok = 0;
    free(inside);
    return ok;
}

static void fill_normal(const jattn_problem *p, tensor *t, jt_rng *r) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < t->heads; h++)
            for (int64_t i = 0; i < t->seq; i++)
                for (int64_t d = 0; d < p->head_dim; d++)
                    at(t)[b * t->s.batch + h * t->s.head + i * t->s.token + d] = (float)jt_normal(r);
}

/* ---- layouts (as test_parity's) ---- */
typedef enum layout { FLUX, HEAD_MAJOR, TOKEN_MAJOR, FUSED_QKV, PADDED, GRAD_PADDED, LAYOUT_COUNT } layout;
static const char *const layout_names[] = {"flux", "head-major", "token-major", "fused-qkv", "padded", "grad-padded"};

static jattn_strides padded(int64_t H, int64_t S, int64_t D) {
    jattn_strides s;
    s.token = D + 5;
    s.head = S * s.token + 3;
    s.batch = H * s.head + 3;
    return s;
}

typedef struct shape {
    int64_t B, H, Sq, Skv, D;
    layout lay;
} shape;

static const shape shapes[] = {
    {1, 2, 8, 8, 128, FLUX},        {1, 2, 40, 40, 128, FLUX},       {1, 1, 50, 50, 128, FLUX},
    {1, 1, 64, 64, 128, FLUX},      {1, 2, 1, 1, 64, FLUX},          {1, 2, 7, 7, 64, FLUX},
    {1, 2, 33, 33, 64, FLUX},       {1, 2, 65, 65, 64, FLUX},        {1, 1, 127, 129, 64, FLUX},
    {1, 1, 200, 300, 64, FLUX},     {3, 2, 33, 33, 64, FLUX},        {2, 3, 7, 129, 64, FLUX},
    {2, 3, 129, 7, 64, FLUX},       {1, 2, 1, 200, 128, FLUX},       {1, 2, 200, 1, 128, FLUX},
    {1, 2, 65, 65, 8, FLUX},        {1, 2, 65, 65, 16, FLUX},        {1, 2, 65, 65, 80, FLUX},
    {1, 1, 65, 65, 256, FLUX},      {1, 1, 40, 40, 3, FLUX},         {1, 1, 100, 77, 1, FLUX},
    {1, 1, 40, 40, 200, FLUX},      {1, 2, 70, 90, 72, FLUX},        {1, 1, 65, 50, 96, FLUX},
    {1, 1, 40, 70, 160, FLUX},      {1, 2, 33, 47, 37, FLUX},        {1, 1, 20, 30, 256, PADDED},
    {2, 3, 65, 33, 64, HEAD_MAJOR}, {2, 3, 65, 33, 64, TOKEN_MAJOR}, {2, 3, 65, 65, 64, FUSED_QKV},
    {2, 3, 65, 33, 64, PADDED},     {2, 2, 130, 257, 128, PADDED},   {2, 2, 70, 50, 64, GRAD_PADDED},
};

static jattn_problem make_problem(const shape *s, jattn_grad_strides *g) {
    jattn_problem p = jattn_problem_flux(s->B, s->H, s->Sq, s->Skv, s->D);
    switch (s->lay) {
    case FLUX:
    case GRAD_PADDED: break;
    case HEAD_MAJOR: p.out = jattn_strides_head_major(s->H, s->Sq, s->D); break;
    case TOKEN_MAJOR:
        p.q = jattn_strides_token_major(s->H, s->Sq, s->D);
        p.k = jattn_strides_token_major(s->H, s->Skv, s->D);
        p.v = jattn_strides_token_major(s->H, s->Skv, s->D);
        break;
    case FUSED_QKV: {
        jattn_strides f = {s->Sq * 3 * s->H * s->D, s->D, 3 * s->H * s->D};
        p.q = p.k = p.v = f;
        p.out = jattn_strides_head_major(s->H, s->Sq, s->D);
        break;
    }
    case PADDED:
        p.q = padded(s->H, s->Sq, s->D);
        p.k = padded(s->H, s->Skv, s->D);
        p.v = padded(s->H, s->Skv, s->D);
        p.out = padded(s->H, s->Sq, s->D);
        break;
    default: break;
    }
    *g = jattn_grad_strides_like(&p);
    if (s->lay == GRAD_PADDED) { /* the gradients at strides of their own */
        g->dout = jattn_strides_token_major(s->H, s->Sq, s->D);
        g->dq = padded(s->H, s->Sq, s->D);
        g->dk = jattn_strides_token_major(s->H, s->Skv, s->D);
        g->dv = padded(s->H, s->Skv, s->D);
    }
    return p;
}

/* ---- one backward case: inputs, forward, gradients ---- */
typedef struct bcase {
    jt_case c; /* q, k, v, out, lse (and the forward reference, unused) */
    jattn_grad_strides g;
    tensor dout, dq, dk, dv;
    float *dlse;
    grads64 ref;
    uint64_t hash;
    const jattn_mask *mask_in_use; /* of the last run (NULL: none) */
    jattn_mask pad_scratch;        /* mask_in_use of a run given a key padding alone */
} bcase;

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

/* Hash of every input of the backward (q, k, v, out, lse, dout, dlse, guards included). */
static uint64_t inputs_hash(const bcase *bc) {
    const jattn_problem *p = &bc->c.p;
    uint64_t h = 0xCBF29CE484222325ull;
    h = hash_bytes(h, bc->c.q - GUARD, (size_t)bc->c.n_q * sizeof(float));
    h = hash_bytes(h, bc->c.k - GUARD, (size_t)bc->c.n_k * sizeof(float));
    h = hash_bytes(h, bc->c.v - GUARD, (size_t)bc->c.n_v * sizeof(float));
    h = hash_bytes(h, bc->c.out - GUARD, (size_t)bc->c.n_out * sizeof(float));
    h = hash_bytes(h, bc->c.lse, (size_t)(p->batch * p->heads * p->seq_q) * sizeof(float));
    h = hash_bytes(h, bc->dout.base, (size_t)bc->dout.n * sizeof(float));
    if (bc->dlse) h = hash_bytes(h, bc->dlse, (size_t)(p->batch * p->heads * p->seq_q) * sizeof(float));
    return h;
}

static int bcase_init(bcase *bc, const jattn_problem *p, const jattn_grad_strides *g, int with_dlse) {
    memset(bc, 0, sizeof *bc);
    if (jt_case_init(&bc->c, p) != 0) return -1;
    bc->g = *g;
    const int64_t nl = p->batch * p->heads * p->seq_q;
    const int64_t Hkv = kit_kv_heads(p);
    if (tensor_init(&bc->dout, p, p->heads, g->dout, p->seq_q) || tensor_init(&bc->dq, p, p->heads, g->dq, p->seq_q) ||
        tensor_init(&bc->dk, p, Hkv, g->dk, p->seq_kv) || tensor_init(&bc->dv, p, Hkv, g->dv, p->seq_kv))
        return -1;
    if (with_dlse && !(bc->dlse = malloc((size_t)nl * sizeof(float)))) return -1;
    const int64_t BH = p->batch * p->heads, D = p->head_dim;
    bc->ref.dq = malloc((size_t)(BH * p->seq_q * D) * sizeof(float));
    bc->ref.dk = malloc((size_t)(p->batch * Hkv * p->seq_kv * D) * sizeof(float));
    bc->ref.dv = malloc((size_t)(p->batch * Hkv * p->seq_kv * D) * sizeof(float));
    return bc->ref.dq && bc->ref.dk && bc->ref.dv ? 0 : -1;
}

static void bcase_free(bcase *bc) {
    jt_case_free(&bc->c);
    free(bc->dout.base), free(bc->dq.base), free(bc->dk.base), free(bc->dv.base);
    free(bc->dlse), free(bc->ref.dq), free(bc->ref.dk), free(bc->ref.dv);
}

/* Draws q, k, v (distribution d), dout (normal), dlse; runs the forward on `fwd` for out and
 * lse; computes the float64 gradients. @return the forward's status. */
static jattn_status bcase_fill(bcase *bc, jt_dist d, jt_rng *r, jattn_backend fwd, const jattn_key_padding *kp) {
    jattn_problem *p = &bc->c.p;
    jt_case_fill(&bc->c, d, r);
    fill_normal(p, &bc->dout, r);
    const int64_t nl = p->batch * p->heads * p->seq_q;
    if (bc->dlse)
        for (int64_t i = 0; i < nl; i++) bc->dlse[i] = (float)jt_normal(r);
    jattn_exec e = {0};
    e.backend = fwd;
    jattn_status st = jattn_forward_padded(NULL, p, &e, bc->c.q, bc->c.k, bc->c.v, kp, bc->c.out, bc->c.lse);
    if (st != JATTN_OK) return st;
    jattn_mask pm;
    reference_grads(p, pad_mask(kp, &pm), bc->c.q, bc->c.k, bc->c.v, at(&bc->dout), bc->dout.s, bc->dlse, 0, NULL, NULL,
                    &bc->ref);
    bc->hash = inputs_hash(bc);
    return JATTN_OK;
}

#ifdef JATTN_TEST_BACKWARD_CUDA
static int device_pointers; /* the device part: bcase_run through device copies */

#define CUDA_TRY(x)                                                                           \
    do {                                                                                      \
        cudaError_t err_ = (x);                                                               \
        if (err_ != cudaSuccess) {                                                            \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
            st = JATTN_ERROR_CUDA;                                                            \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

/* The backward of a case through device copies of every array (guards included) on a stream of
 * the test's, with a caller workspace in device memory; graph: captured into a CUDA graph and
 * launched twice instead of called. The gradients (whole allocations) are copied back. Every copy
 * to the device is made on that stream (cudaMemcpyAsync), so the call is ordered after it: the stream
 * is non-blocking, and a cudaMemcpy from pageable memory on the legacy stream may return before its
 * DMA lands (issue 37: all-zero gradients under load). */
static jattn_status bcase_run_device(bcase *bc, const jattn_exec *e0, const jattn_key_padding *kp, int graph) {
    const jattn_problem *p = &bc->c.p;
    const int64_t nl = p->batch * p->heads * p->seq_q;
    const float *host_in[7] = {bc->c.q - GUARD, bc->c.k - GUARD, bc->c.v - GUARD, bc->c.out - GUARD,
                               bc->c.lse,       bc->dout.base,   bc->dlse};
    const int64_t n_in[7] = {bc->c.n_q, bc->c.n_k, bc->c.n_v, bc->c.n_out, nl, bc->dout.n, bc->dlse ? nl : 0};
    tensor *grads[3] = {&bc->dq, &bc->dk, &bc->dv};
    float *d_in[7] = {NULL}, *d_grad[3] = {NULL};
    int64_t *d_len = NULL;
    uint8_t *d_mask = NULL;
    void *ws = NULL;
    cudaStream_t s = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    jattn_status st = JATTN_OK;
    jattn_key_padding dkp;
    size_t need = 0;
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 7; i++)
        if (n_in[i]) {
            CUDA_TRY(cudaMalloc((void **)&d_in[i], (size_t)n_in[i] * sizeof(float)));
            CUDA_TRY(cudaMemcpyAsync(d_in[i], host_in[i], (size_t)n_in[i] * sizeof(float), cudaMemcpyHostToDevice, s));
        }
    for (int i = 0; i < 3; i++) {
        CUDA_TRY(cudaMalloc((void **)&d_grad[i], (size_t)grads[i]->n * sizeof(float)));
        CUDA_TRY(
            cudaMemcpyAsync(d_grad[i], grads[i]->base, (size_t)grads[i]->n * sizeof(float), cudaMemcpyHostToDevice, s));
    }
    if (kp) {
        dkp = *kp;
        if (kp->kv_len) {
            CUDA_TRY(cudaMalloc((void **)&d_len, (size_t)p->batch * sizeof(int64_t)));
            CUDA_TRY(cudaMemcpyAsync(d_len, kp->kv_len, (size_t)p->batch * sizeof(int64_t), cudaMemcpyHostToDevice, s));
            dkp.kv_len = d_len;
        }
        if (kp->mask) {
            const int64_t stride = kp->mask_batch_stride ? kp->mask_batch_stride : kp->mask_keys;
            const size_t n = (size_t)((kp->mask_batch - 1) * stride + kp->mask_keys);
            CUDA_TRY(cudaMalloc((void **)&d_mask, n));
            CUDA_TRY(cudaMemcpyAsync(d_mask, kp->mask, n, cudaMemcpyHostToDevice, s));
            dkp.mask = d_mask;
        }
    }
    jattn_exec e = *e0;
    e.memory = JATTN_MEMORY_DEVICE;
    e.cuda_stream = s;
    st = jattn_backward_workspace_size(p, &bc->g, &e, &need);
    if (st != JATTN_OK) goto done;
    if (need) CUDA_TRY(cudaMalloc(&ws, need));
    e.workspace = ws;
    e.workspace_bytes = need;
    if (graph) {
        CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    }
    st = jattn_backward(NULL, p, &bc->g, &e, d_in[0] + GUARD, d_in[1] + GUARD, d_in[2] + GUARD, d_in[3] + GUARD,
                        d_in[4], d_in[5] + GUARD, d_in[6], kp ? &dkp : NULL, d_grad[0] + GUARD, d_grad[1] + GUARD,
                        d_grad[2] + GUARD);
    if (graph) {
        CUDA_TRY(cudaStreamEndCapture(s, &g));
        if (st != JATTN_OK) goto done;
        CUDA_TRY(cudaGraphInstantiate(&ge, g, 0));
        for (int rep = 0; rep < 2; rep++) CUDA_TRY(cudaGraphLaunch(ge, s));
    }
    if (st != JATTN_OK) goto done;
    CUDA_TRY(cudaStreamSynchronize(s));
    for (int i = 0; i < 3; i++) /* after the stream's work (synchronised above) */
        CUDA_TRY(cudaMemcpy(grads[i]->base, d_grad[i], (size_t)grads[i]->n * sizeof(float), cudaMemcpyDeviceToHost));
done:
    if (ge) (void)cudaGraphExecDestroy(ge);
    if (g) (void)cudaGraphDestroy(g);
    for (int i = 0; i < 7; i++) (void)cudaFree(d_in[i]);
    for (int i = 0; i < 3; i++) (void)cudaFree(d_grad[i]);
    (void)cudaFree(d_len), (void)cudaFree(d_mask), (void)cudaFree(ws);
    if (s) (void)cudaStreamDestroy(s);
    return st;
}
#endif

static jattn_status bcase_run(bcase *bc, const jattn_exec *e, const jattn_key_padding *kp) {
    tensor_poison(&bc->dq), tensor_poison(&bc->dk), tensor_poison(&bc->dv);
    bc->mask_in_use = pad_mask(kp, &bc->pad_scratch);
#ifdef JATTN_TEST_BACKWARD_CUDA
    if (device_pointers) return bcase_run_device(bc, e, kp, 0);
#endif
    return jattn_backward(NULL, &bc->c.p, &bc->g, e, bc->c.q, bc->c.k, bc->c.v, bc->c.out, bc->c.lse, at(&bc->dout),
                          bc->dlse, kp, at(&bc->dq), at(&bc->dk), at(&bc->dv));
}

static jattn_backend backend; /* the backend under test */

/* 1 (after printing "skip") when the backend refused the call as its documented limits say: the
 * cuda backward refuses head_dim > 256 with UNSUPPORTED naming head_dim. Never counted as passed. */
static int refused_as_documented(jattn_status st, const jattn_problem *p, const char *label) {
    const char *msg = jattn_last_error();
    if (st != JATTN_ERROR_UNSUPPORTED || backend != JATTN_BACKEND_CUDA || !strstr(msg, "head_dim") ||
        p->head_dim <= 256)
        return 0;
    printf("skip %s: %s\n", label, jattn_last_error());
    return 1;
}

static double worst_fraction[JT_DIST_COUNT]; /* of the rel_l2 gate, per distribution */
static double worst_rel[JT_DIST_COUNT];

/* The float32 floor of a case (kit/metrics.h, JATTN_BWD_FLOOR_TIMES): the metrics of float64
 * gradients computed by this test from the logits scale q.k and the float64 forward's out and lse,
 * each rounded to float32 once (reference_grads with round_logits, given_out and given_lse; the
 * ref backend's forward, into the case's ref and ref_lse), against the float64 reference, for
 * gradient t (-1: all three into m[0..2]). What a float32 evaluation reaches: one float32 ulp of
 * lse is a relative error of every weight of its row, and one of a logit of that weight (on peaky
 * rows, logits of tens and more, past the gate), and in a near one-hot row dq and dk are small
 * differences dP - Dl whose inputs carry out's rounding, u / (1 - P_max) relative. It does not
 * depend on the out and lse the backward was handed (in the chain part the backend's own
 * forward's): a forward whose lse errs by more is not excused. Each metric is the larger of two
 * such evaluations, the logits rounded to float32 once and the logits exact: the second is what a
 * backward exact in every step but its float32 out and lse reaches, and a draw can leave the first
 * below it where a near one-hot row's logit and lse round alike (D = 1 peaky, seed
 * 236239941241384: dv of the exact-logit cpu backward 7.1x the rounded-logit floor, 1.0x the
 * exact-logit one, its dv a sum over the queries cancelling 100-fold). Computed here, not by the
 * ref backend, so that the ref backend is held to it too. @return 0 on success. */
static int input_floor(bcase *bc, int t, jattn_metrics *m) {
    const jattn_problem *p = &bc->c.p;
    const int64_t BH = p->batch * p->heads, BHkv = p->batch * kit_kv_heads(p), D = p->head_dim;
    const int64_t n[3] = {BH * p->seq_q * D, BHkv * p->seq_kv * D, BHkv * p->seq_kv * D};
    grads64 f = {malloc((size_t)n[0] * sizeof(float)), malloc((size_t)n[1] * sizeof(float)),
                 malloc((size_t)n[2] * sizeof(float))};
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    int ok = f.dq && f.dk && f.dv &&
             jattn_forward_masked(NULL, p, &e, bc->c.q, bc->c.k, bc->c.v, bc->mask_in_use, bc->c.ref, bc->c.ref_lse) ==
                 JATTN_OK;
    for (int round_logits = 1; ok && round_logits >= 0; round_logits--) {
        reference_grads(p, bc->mask_in_use, bc->c.q, bc->c.k, bc->c.v, at(&bc->dout), bc->dout.s, bc->dlse,
                        round_logits, bc->c.ref, bc->c.ref_lse, &f);
        const float *got[3] = {f.dq, f.dk, f.dv}, *refs[3] = {bc->ref.dq, bc->ref.dk, bc->ref.dv};
        for (int i = 0; i < 3; i++) {
            if (t >= 0 && t != i) continue;
            jattn_metrics *mi = &m[t < 0 ? i : 0], e;
            jattn_metrics_compute_dense(got[i], refs[i], n[i], round_logits ? mi : &e);
            if (round_logits) continue;
            if (e.rel_l2 > mi->rel_l2) mi->rel_l2 = e.rel_l2;
            if (e.max_abs > mi->max_abs) mi->max_abs = e.max_abs;
            if (e.cos < mi->cos) mi->cos = e.cos;
        }
    }
    free(f.dq), free(f.dk), free(f.dv);
    return ok ? 0 : -1;
}

/* The float32-logit floor of a case (DESIGN.md §2): the metrics of the gradients of a float64
 * backward whose logits are rounded to float32 once (its own softmax, out and lse, from the
 * same inputs) against the exact float64 ones, for dq, dk, dv. A `large` gradient that misses
 * the gate is excused when each metric passes or lies within 4x of this floor: in a near
 * one-hot row dq and dk are small and the rounding of the logits alone moves them, whatever a
 * float32 method does. A miss past it is printed with the floor and the ratio. @return 0 on
 * success. */
static int logit_floor(bcase *bc, jattn_metrics m[3]) {
    const jattn_problem *p = &bc->c.p;
    const int64_t BH = p->batch * p->heads, BHkv = p->batch * kit_kv_heads(p), D = p->head_dim;
    const int64_t n[3] = {BH * p->seq_q * D, BHkv * p->seq_kv * D, BHkv * p->seq_kv * D};
    grads64 f = {malloc((size_t)n[0] * sizeof(float)), malloc((size_t)n[1] * sizeof(float)),
                 malloc((size_t)n[2] * sizeof(float))};
    const int ok = f.dq && f.dk && f.dv;
    if (ok) {
        reference_grads(p, bc->mask_in_use, bc->c.q, bc->c.k, bc->c.v, at(&bc->dout), bc->dout.s, bc->dlse, 1, NULL,
                        NULL, &f);
        jattn_metrics_compute_dense(f.dq, bc->ref.dq, n[0], &m[0]);
        jattn_metrics_compute_dense(f.dk, bc->ref.dk, n[1], &m[1]);
        jattn_metrics_compute_dense(f.dv, bc->ref.dv, n[2], &m[2]);
    }
    free(f.dq), free(f.dk), free(f.dv);
    return ok ? 0 : -1;
}

/* 1 when each metric of m passes the backward's gate or lies within `times` of the floor f's. */
static int within_floor(const jattn_metrics *m, const jattn_metrics *f, double times) {
    const double abs_tol = JATTN_BWD_GATE_MAX_ABS * (m->max_ref > 1 ? m->max_ref : 1);
    return (m->rel_l2 <= JATTN_BWD_GATE_REL_L2 || m->rel_l2 <= times * f->rel_l2) &&
           (m->max_abs <= abs_tol || m->max_abs <= times * f->max_abs) &&
           (m->cos >= JATTN_BWD_GATE_COS || 1 - m->cos <= times * (1 - f->cos) + 1e-12);
}

/* Checks the gradients of the last run against the reference; prints on failure (or verbose). */
static int bcase_check(bcase *bc, const char *what, jt_dist dist) {
    const jattn_problem *p = &bc->c.p;
    const tensor *ts[3] = {&bc->dq, &bc->dk, &bc->dv};
    const float *refs[3] = {bc->ref.dq, bc->ref.dk, bc->ref.dv};
    const char *names[3] = {"dq", "dk", "dv"};
    int pass = 1;
    char line[1024];
    int len = snprintf(line, sizeof line, "%s %s", bc->c.label, what);
    jattn_metrics lf[3];
    int have_floor = 0; /* the float32-logit floor: 1 computed, -1 failed, 0 not yet */
    for (int t = 0; t < 3; t++) {
        const int64_t n = p->batch * ts[t]->heads * ts[t]->seq * p->head_dim;
        float *dense = malloc((size_t)n * sizeof *dense);
        if (!dense) return 0;
        gather(p, ts[t], dense);
        jattn_metrics m;
        jattn_metrics_compute_dense(dense, refs[t], n, &m);
        int64_t unwritten = 0;
        for (int64_t i = 0; i < n; i++) unwritten += is_poison(dense[i]);
        int ok = jattn_metrics_pass_backward(&m) && !unwritten && outside_untouched(p, ts[t]);
        if (!ok && !unwritten && !m.nonfinite && dist == JT_LARGE && outside_untouched(p, ts[t])) {
            if (!have_floor) have_floor = logit_floor(bc, lf) == 0 ? 1 : -1;
            if (have_floor == 1 && within_floor(&m, &lf[t], 4)) {
                ok = 1;
                printf("note %s %s: %s rel_l2 %.3g max_abs %.3g cos %.9f over the gate, excused: within 4x the "
                       "float32-logit floor (float64 backward from logits rounded to float32 once: rel_l2 %.3g "
                       "max_abs %.3g cos %.9f; %.2fx its rel_l2)\n",
                       bc->c.label, what, names[t], m.rel_l2, m.max_abs, m.cos, lf[t].rel_l2, lf[t].max_abs, lf[t].cos,
                       m.rel_l2 / lf[t].rel_l2);
            }
        }
        jattn_metrics f;
        int have_input_floor = 0;
        if (!ok && !unwritten && !m.nonfinite && outside_untouched(p, ts[t])) {
            have_input_floor = input_floor(bc, t, &f) == 0;
            if (have_input_floor && jattn_metrics_pass_backward_floor(&m, &f)) {
                ok = 1;
                printf("note %s %s: %s rel_l2 %.3g max_abs %.3g over the gate, excused: within %dx the float32 floor "
                       "(float64 from out, lse rounded to float32 once, logits rounded once or exact: rel_l2 %.3g "
                       "max_abs %.3g)\n",
                       bc->c.label, what, names[t], m.rel_l2, m.max_abs, JATTN_BWD_FLOOR_TIMES, f.rel_l2, f.max_abs);
            }
        }
        if (!ok) { /* where: the first element past the max_abs tolerance, and the worst one */
            const double tol = JATTN_BWD_GATE_MAX_ABS * (m.max_ref > 1 ? m.max_ref : 1);
            int64_t first = -1, worst = 0;
            double worst_err = -1;
            for (int64_t i = 0; i < n; i++) {
                const double err = fabs((double)dense[i] - (double)refs[t][i]);
                const int bad = !(err <= tol); /* NaN too */
                if (bad && first < 0) first = i;
                if (!(err <= worst_err)) worst_err = err, worst = i;
            }
            const int64_t D = p->head_dim, S = ts[t]->seq;
            const int64_t at_[2] = {first, worst};
            for (int w = 0; w < 2; w++)
                if (at_[w] >= 0)
                    printf("  %s %s %s element [b %lld, h %lld, s %lld, d %lld]: got %.9g, want %.9g\n", names[t],
                           w ? "worst" : "first past max_abs", bc->c.label, (long long)(at_[w] / D / S / p->heads),
                           (long long)(at_[w] / D / S % p->heads), (long long)(at_[w] / D % S), (long long)(at_[w] % D),
                           dense[at_[w]], refs[t][at_[w]]);
        }
        if (m.rel_l2 / JATTN_BWD_GATE_REL_L2 > worst_fraction[dist])
            worst_fraction[dist] = m.rel_l2 / JATTN_BWD_GATE_REL_L2;
        if (m.rel_l2 > worst_rel[dist]) worst_rel[dist] = m.rel_l2;
        pass &= ok;
        if (len < (int)sizeof line)
            len += snprintf(line + len, sizeof line - (size_t)len,
                            " | %s rel_l2 %.3g max_abs %.3g (max|ref| %.3g) cos %.9f%s%s", names[t], m.rel_l2,
                            m.max_abs, m.max_ref, m.cos, unwritten ? " [unwritten]" : "", ok ? "" : " [FAIL]");
        if (!ok && have_floor == 1 && len < (int)sizeof line) /* a `large` miss: how far past the floor */
            len += snprintf(line + len, sizeof line - (size_t)len,
                            " [float32-logit floor rel_l2 %.3g max_abs %.3g: %.1fx]", lf[t].rel_l2, lf[t].max_abs,
                            lf[t].rel_l2 > 0 ? m.rel_l2 / lf[t].rel_l2 : INFINITY);
        if (!ok && have_input_floor && len < (int)sizeof line) /* how far past the float32 floor */
            len += snprintf(line + len, sizeof line - (size_t)len, " [float32 floor rel_l2 %.3g max_abs %.3g: %.1fx]",
                            f.rel_l2, f.max_abs, f.rel_l2 > 0 ? m.rel_l2 / f.rel_l2 : INFINITY);
        free(dense);
    }
    const int inputs_ok = inputs_hash(bc) == bc->hash;
    pass &= inputs_ok;
    if (!pass || getenv("JATTN_TEST_VERBOSE"))
        printf("%s %s%s (seed %llu)\n", pass ? "ok  " : "FAIL", line, inputs_ok ? "" : " [modified an input]",
               (unsigned long long)jt_seed());
    return pass;
}

/* ---- the gate ---- */
/* out and lse from fwd_backend: ref (the float64 forward rounded once: the backward alone), or
 * the backend's own forward (the training chain; shapes of at least min_rows queries, where the
 * rows average: a single near one-hot row turns the forward's own rounding of out into a
 * relative error of the small dq, dk it leaves, u / (1 - P_max), whatever the backward does). */
static void part_gate(jt_rng *r, jt_tally *tally, jattn_backend fwd_backend, int64_t min_rows) {
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        if (shapes[si].Sq < min_rows) continue;
        jattn_grad_strides g;
        jattn_problem p = make_problem(&shapes[si], &g);
        bcase bc;
        if (bcase_init(&bc, &p, &g, (int)(si % 2)) != 0) {
            printf("FAIL allocation\n");
            jt_tally_add(tally, 0);
            bcase_free(&bc);
            continue;
        }
        size_t len = strlen(bc.c.label);
        snprintf(bc.c.label + len, sizeof bc.c.label - len, " %s%s%s", layout_names[shapes[si].lay],
                 bc.dlse ? " dlse" : "", fwd_backend == JATTN_BACKEND_REF ? "" : " chain");
        for (int d = 0; d < JT_DIST_COUNT; d++) {
            jattn_status st = bcase_fill(&bc, (jt_dist)d, r, fwd_backend, NULL);
            if (st != JATTN_OK) {
                printf("FAIL forward %s: %s\n", bc.c.label, jattn_last_error());
                jt_tally_add(tally, 0);
                continue;
            }
            jattn_exec e = {0};
            e.backend = backend;
            st = bcase_run(&bc, &e, NULL);
            if (refused_as_documented(st, &p, bc.c.label)) break;
            if (st != JATTN_OK) {
                printf("FAIL %s: %s: %s\n", bc.c.label, jattn_status_name(st), jattn_last_error());
                jt_tally_add(tally, 0);
                continue;
            }
            jt_tally_add(tally, bcase_check(&bc, "", (jt_dist)d));
        }
        bcase_free(&bc);
    }
}

/* ---- the floor: every gradient within the gate or JATTN_BWD_FLOOR_TIMES of the float32 floor ----
 * Shapes with enough rows and keys for rel_l2 to average (the single-row and few-key tails live in
 * the gate part), the four input distributions and two sharper ones: normal q, k times 4 and times
 * 8 (logits of standard deviation 16 and 64, the issue-30 inputs; powers of two, so the draws stay
 * exact), where one float32 ulp of lse (2-8e-6 relative at |lse| 30-250) puts even a float64
 * backward past the gate. Each case twice: out and lse from the float64 forward rounded once (the
 * backward alone), then from the backend's own forward (the training chain, whose lse the floor
 * does not excuse). Prints the largest ratio to the floor per distribution and gradient. cpu
 * (avx512, 61 seeds): at most 2.3x (logits of std 64, the backward alone), 2.0x in the chain. */
enum { FLOOR_PEAKY16 = JT_DIST_COUNT, FLOOR_PEAKY64, FLOOR_DIST_COUNT };
static const char *floor_dist_name(int d) {
    return d == FLOOR_PEAKY16 ? "peaky16" : d == FLOOR_PEAKY64 ? "peaky64" : jt_dist_name((jt_dist)d);
}

static void part_floor(jt_rng *r, jt_tally *tally) {
    static const shape fshapes[] = {{1, 2, 256, 256, 128, FLUX},
                                    {1, 2, 192, 384, 64, FLUX},
                                    {2, 1, 160, 200, 128, HEAD_MAJOR},
                                    {1, 2, 150, 257, 80, FLUX}};
    double worst[FLOOR_DIST_COUNT][3] = {{0}};
    const char *names[3] = {"dq", "dk", "dv"};
    for (size_t si = 0; si < sizeof fshapes / sizeof fshapes[0]; si++) {
        jattn_grad_strides g;
        jattn_problem p = make_problem(&fshapes[si], &g);
        bcase bc;
        if (bcase_init(&bc, &p, &g, (int)(si % 2)) != 0) {
            printf("FAIL allocation\n");
            jt_tally_add(tally, 0);
            bcase_free(&bc);
            continue;
        }
        const size_t len = strlen(bc.c.label);
        for (int d = 0; d < FLOOR_DIST_COUNT; d++)
            for (int chain = 0; chain < 2; chain++) {
                if (chain && backend == JATTN_BACKEND_REF) continue; /* the ref forward is the floor's */
                const jt_dist hd = d >= JT_DIST_COUNT ? JT_NORMAL : (jt_dist)d;
                bc.c.p.scale = p.scale; /* jt_case_fill sets the scale of `large` only */
                jt_case_fill(&bc.c, hd, r);
                const jattn_problem *cp = &bc.c.p;
                if (d >= JT_DIST_COUNT) { /* q, k times 4 or 8: exact in float32 */
                    const float amp = d == FLOOR_PEAKY16 ? 4.f : 8.f;
                    for (int64_t i = 0; i < bc.c.n_q; i++) bc.c.q[i - GUARD] *= amp;
                    for (int64_t i = 0; i < bc.c.n_k; i++) bc.c.k[i - GUARD] *= amp;
                    jt_case_seal(&bc.c);
                }
                snprintf(bc.c.label + len, sizeof bc.c.label - len, " %s dist=%s%s%s", layout_names[fshapes[si].lay],
                         floor_dist_name(d), bc.dlse ? " dlse" : "", chain ? " chain" : "");
                fill_normal(cp, &bc.dout, r);
                const int64_t nl = cp->batch * cp->heads * cp->seq_q;
                if (bc.dlse)
                    for (int64_t i = 0; i < nl; i++) bc.dlse[i] = (float)jt_normal(r);
                jattn_exec e = {0};
                e.backend = chain ? backend : JATTN_BACKEND_REF;
                jattn_status st = jattn_forward_padded(NULL, cp, &e, bc.c.q, bc.c.k, bc.c.v, NULL, bc.c.out, bc.c.lse);
                reference_grads(cp, NULL, bc.c.q, bc.c.k, bc.c.v, at(&bc.dout), bc.dout.s, bc.dlse, 0, NULL, NULL,
                                &bc.ref);
                bc.hash = inputs_hash(&bc);
                e.backend = backend;
                if (st == JATTN_OK) st = bcase_run(&bc, &e, NULL);
                if (refused_as_documented(st, cp, bc.c.label)) break;
                jattn_metrics fl[3];
                if (st != JATTN_OK || input_floor(&bc, -1, fl) != 0) {
                    printf("FAIL %s: %s: %s\n", bc.c.label, jattn_status_name(st), jattn_last_error());
                    jt_tally_add(tally, 0);
                    continue;
                }
                const tensor *ts[3] = {&bc.dq, &bc.dk, &bc.dv};
                const float *refs[3] = {bc.ref.dq, bc.ref.dk, bc.ref.dv};
                int pass = inputs_hash(&bc) == bc.hash;
                char line[1024];
                int n = snprintf(line, sizeof line, "%s", bc.c.label);
                for (int t = 0; t < 3; t++) {
                    const int64_t cnt = cp->batch * ts[t]->heads * ts[t]->seq * cp->head_dim;
                    float *dense = malloc((size_t)cnt * sizeof *dense);
                    if (!dense) {
                        pass = 0;
                        continue;
                    }
                    gather(cp, ts[t], dense);
                    jattn_metrics m;
                    jattn_metrics_compute_dense(dense, refs[t], cnt, &m);
                    free(dense);
                    const jattn_metrics f = fl[t];
                    const int ok = jattn_metrics_pass_backward_floor(&m, &f) && outside_untouched(cp, ts[t]);
                    const double ratio = f.rel_l2 > 0 ? m.rel_l2 / f.rel_l2 : 0;
                    if (ratio > worst[d][t]) worst[d][t] = ratio;
                    pass &= ok;
                    if (n < (int)sizeof line)
                        n += snprintf(line + n, sizeof line - (size_t)n,
                                      " | %s rel_l2 %.3g (floor %.3g, %.2fx) max_abs %.3g (floor %.3g)%s", names[t],
                                      m.rel_l2, f.rel_l2, ratio, m.max_abs, f.max_abs, ok ? "" : " [FAIL]");
                }
                if (!pass || getenv("JATTN_TEST_VERBOSE"))
                    printf("%s %s (seed %llu)\n", pass ? "ok  " : "FAIL", line, (unsigned long long)jt_seed());
                jt_tally_add(tally, pass);
            }
        bcase_free(&bc);
    }
    for (int d = 0; d < FLOOR_DIST_COUNT; d++)
        printf("floor %-8s largest rel_l2 / float32 floor: dq %.2f dk %.2f dv %.2f (pass: <= %d or the gate)\n",
               floor_dist_name(d), worst[d][0], worst[d][1], worst[d][2], JATTN_BWD_FLOOR_TIMES);
}

/* ---- few-query `large` rows (issue 37) ----
 * Rows of one to three queries on `large` inputs (|v| up to 1e3): a row's dominant key (P >= 1/2) has
 * dS = P (dP - Dl), a small difference of large terms, so a backward that takes that element's P or dP
 * from truncated tensor-core chains misses the float32 floor. The backward v2 did before issue 37 (dq, dk
 * 7.1-7.4x the floor at B=1 H=2 Sq=1 Skv=200 D=128 on an H100; lab/gpu/emulate_backward_v2_dominant.py
 * models it and misses about one draw in seven of that shape), the backward v3 before issue 30's call 5.
 * So many draws, cheap ones: D 64 and 128, Sq 1, 2, 3, with and without dlse, each of four layouts, Skv
 * around the 64-key tiles: FLUX strides and rows padded by 8 elements (strides multiples of 4: the Hopper
 * backward v4 runs them on a 9.0 device; v2 did), rows padded by 5 and key padding (the backward v3 there). Out and
 * lse from the float64 forward; each case judged as the gate part's (the gate, else within 4x the
 * float32-logit floor, else within JATTN_BWD_FLOOR_TIMES of the float32 floor; bcase_check). */
enum { FEWQ_FLUX, FEWQ_PAD8, FEWQ_PAD5, FEWQ_KEYPAD, FEWQ_LAYOUTS };
static const char *const fewq_names[FEWQ_LAYOUTS] = {"flux", "padded-by-8", "padded-by-5", "key-padded"};

static jattn_strides fewq_padded(int64_t H, int64_t S, int64_t D, int64_t pad) {
    jattn_strides s;
    s.token = D + pad;
    s.head = S * s.token + 4;
    s.batch = H * s.head + 4;
    return s;
}

static void part_fewq(jt_rng *r, jt_tally *tally) {
    static const int64_t skvs[] = {200, 77, 129, 300, 64, 65};
    enum { REPS = 4 };
    int draws = 0;
    for (int64_t D = 64; D <= 128; D *= 2)
        for (int64_t Sq = 1; Sq <= 3; Sq++)
            for (int with_dlse = 0; with_dlse < 2; with_dlse++)
                for (int lay = 0; lay < FEWQ_LAYOUTS; lay++)
                    for (int rep = 0; rep < REPS; rep++) {
                        const int64_t Skv = skvs[(size_t)(rep + lay + Sq) % (sizeof skvs / sizeof skvs[0])];
                        const int64_t B = lay == FEWQ_KEYPAD ? 2 : 1, H = 2;
                        jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
                        if (lay == FEWQ_PAD8 || lay == FEWQ_PAD5) {
                            const int64_t pad = lay == FEWQ_PAD8 ? 8 : 5;
                            p.q = fewq_padded(H, Sq, D, pad);
                            p.k = fewq_padded(H, Skv, D, pad);
                            p.v = fewq_padded(H, Skv, D, pad);
                            p.out = fewq_padded(H, Sq, D, pad);
                        }
                        jattn_grad_strides g = jattn_grad_strides_like(&p);
                        int64_t kv_len[2] = {Skv - 7, Skv / 2 + 1};
                        jattn_key_padding kp = {kv_len, NULL, 0, 0, 0};
                        const jattn_key_padding *pad = lay == FEWQ_KEYPAD ? &kp : NULL;
                        bcase bc;
                        if (bcase_init(&bc, &p, &g, with_dlse) != 0) {
                            printf("FAIL allocation\n");
                            jt_tally_add(tally, 0);
                            bcase_free(&bc);
                            continue;
                        }
                        const size_t len = strlen(bc.c.label);
                        snprintf(bc.c.label + len, sizeof bc.c.label - len, " %s%s", fewq_names[lay],
                                 with_dlse ? " dlse" : "");
                        jattn_status st = bcase_fill(&bc, JT_LARGE, r, JATTN_BACKEND_REF, pad);
                        jattn_exec e = {0};
                        e.backend = backend;
                        if (st == JATTN_OK) st = bcase_run(&bc, &e, pad);
                        if (st != JATTN_OK) {
                            printf("FAIL fewq %s: %s: %s\n", bc.c.label, jattn_status_name(st), jattn_last_error());
                            jt_tally_add(tally, 0);
                        } else {
                            jt_tally_add(tally, bcase_check(&bc, "fewq", JT_LARGE));
                        }
                        draws++;
                        bcase_free(&bc);
                    }
    if (getenv("JATTN_TEST_VERBOSE")) printf("fewq: %d draws of few-query `large` rows\n", draws);
}

/* ---- key padding ---- */
typedef struct pad_shape {
    int64_t B, H, Sq, Skv, D;
    int token_major;
} pad_shape;
static const pad_shape pad_shapes[] = {
    {3, 2, 33, 77, 64, 0},  {2, 2, 130, 200, 128, 1}, {2, 1, 1, 300, 128, 0}, {2, 2, 40, 129, 1, 1},
    {2, 2, 50, 100, 80, 0}, {2, 2, 17, 257, 16, 1},   {2, 2, 9, 33, 3, 0},    {2, 1, 20, 70, 256, 0},
};

/* Padding patterns: 0 lengths at random, 1 lengths 0 / full / 1, 2 a random mask (1/2),
 * 3 a sparse mask (1/10), 4 a broadcast mask row with lengths too, 5 a batch attending nothing. */
#define PAD_PATTERNS 6
static void make_padding(int pat, const pad_shape *s, jt_rng *r, jattn_key_padding *kp, int64_t *kv_len,
                         uint8_t *mask) {
    memset(kp, 0, sizeof *kp);
    const int64_t B = s->B, S = s->Skv;
    if (pat == 0 || pat == 1 || pat == 4) {
        for (int64_t b = 0; b < B; b++)
            kv_len[b] = pat == 1 ? (b % 3 == 0 ? 0 : b % 3 == 1 ? S : 1) : (int64_t)(jt_uniform(r) * (double)(S + 1));
        kp->kv_len = kv_len;
    }
    if (pat >= 2) {
        const int64_t rows = pat == 4 ? 1 : B;
        const double keep = pat == 3 ? 0.1 : 0.5;
        for (int64_t b = 0; b < rows; b++)
            for (int64_t j = 0; j < S; j++) mask[b * S + j] = jt_uniform(r) < keep;
        if (pat == 5)
            for (int64_t j = 0; j < S; j++) mask[j] = 0;
        kp->mask = mask;
        kp->mask_batch = rows;
        kp->mask_keys = S;
    }
}

/* NaN into the k and v rows of every key the padding leaves out. */
static void poison_unattended(const jattn_problem *p, const jattn_key_padding *kp, float *k, float *v) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t j = 0; j < p->seq_kv; j++)
                if (!jt_padding_attends(kp, b, j))
                    for (int64_t d = 0; d < p->head_dim; d++) {
                        k[b * p->k.batch + h * p->k.head + j * p->k.token + d] = NAN;
                        v[b * p->v.batch + h * p->v.head + j * p->v.token + d] = NAN;
                    }
}

/* Every dk, dv row of a key left out is +0 (bits), and every dq row of a batch with no key. */
static int padding_zeros_ok(const bcase *bc, const jattn_key_padding *kp) {
    const jattn_problem *p = &bc->c.p;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t any = 0;
        for (int64_t j = 0; j < p->seq_kv; j++) any += jt_padding_attends(kp, b, j);
        for (int64_t h = 0; h < p->heads; h++) {
            for (int64_t j = 0; j < p->seq_kv; j++) {
                if (jt_padding_attends(kp, b, j)) continue;
                const float *dk = at(&bc->dk) + b * bc->g.dk.batch + h * bc->g.dk.head + j * bc->g.dk.token;
                const float *dv = at(&bc->dv) + b * bc->g.dv.batch + h * bc->g.dv.head + j * bc->g.dv.token;
                for (int64_t d = 0; d < p->head_dim; d++)
                    if (dk[d] != 0.0f || signbit(dk[d]) || dv[d] != 0.0f || signbit(dv[d])) return 0;
            }
            if (!any)
                for (int64_t i = 0; i < p->seq_q; i++) {
                    const float *dq = at(&bc->dq) + b * bc->g.dq.batch + h * bc->g.dq.head + i * bc->g.dq.token;
                    for (int64_t d = 0; d < p->head_dim; d++)
                        if (dq[d] != 0.0f || signbit(dq[d])) return 0;
                }
        }
    }
    return 1;
}

static void part_padding(jt_rng *r, jt_tally *tally) {
    for (size_t si = 0; si < sizeof pad_shapes / sizeof pad_shapes[0]; si++) {
        const pad_shape *s = &pad_shapes[si];
        jattn_problem p = jattn_problem_flux(s->B, s->H, s->Sq, s->Skv, s->D);
        if (s->token_major) {
            p.q = jattn_strides_token_major(s->H, s->Sq, s->D);
            p.k = jattn_strides_token_major(s->H, s->Skv, s->D);
            p.v = jattn_strides_token_major(s->H, s->Skv, s->D);
            p.out = jattn_strides_head_major(s->H, s->Sq, s->D);
        }
        jattn_grad_strides g = jattn_grad_strides_like(&p);
        int64_t kv_len[8];
        uint8_t *mask = malloc((size_t)(s->B * s->Skv));
        for (int pat = 0; pat < PAD_PATTERNS; pat++) {
            bcase bc;
            if (!mask || bcase_init(&bc, &p, &g, pat % 2) != 0) {
                printf("FAIL allocation\n");
                jt_tally_add(tally, 0);
                bcase_free(&bc);
                continue;
            }
            size_t len = strlen(bc.c.label);
            snprintf(bc.c.label + len, sizeof bc.c.label - len, " padding %d", pat);
            const jt_dist d = (jt_dist)((si + (size_t)pat) % JT_DIST_COUNT);
            jattn_key_padding kp;
            make_padding(pat, s, r, &kp, kv_len, mask);
            jt_case_fill(&bc.c, d, r);
            poison_unattended(&bc.c.p, &kp, bc.c.k, bc.c.v);
            /* bcase_fill redraws q, k, v: draw, then poison, then the forward and the reference */
            fill_normal(&bc.c.p, &bc.dout, r);
            jattn_exec e = {0};
            e.backend = JATTN_BACKEND_REF; /* out, lse: the float64 forward rounded once */
            jattn_status st = jattn_forward_padded(NULL, &bc.c.p, &e, bc.c.q, bc.c.k, bc.c.v, &kp, bc.c.out, bc.c.lse);
            if (bc.dlse)
                for (int64_t i = 0; i < p.batch * p.heads * p.seq_q; i++) bc.dlse[i] = (float)jt_normal(r);
            jattn_mask pm;
            reference_grads(&bc.c.p, pad_mask(&kp, &pm), bc.c.q, bc.c.k, bc.c.v, at(&bc.dout), bc.dout.s, bc.dlse, 0,
                            NULL, NULL, &bc.ref);
            bc.hash = inputs_hash(&bc);
            e.backend = backend;
            if (st == JATTN_OK) st = bcase_run(&bc, &e, &kp);
            if (refused_as_documented(st, &p, bc.c.label)) {
                bcase_free(&bc);
                break;
            }
            if (st != JATTN_OK) {
                printf("FAIL %s: %s: %s\n", bc.c.label, jattn_status_name(st), jattn_last_error());
                jt_tally_add(tally, 0);
            } else {
                int ok = bcase_check(&bc, "", d);
                if (!padding_zeros_ok(&bc, &kp)) {
                    printf("FAIL %s: a dk/dv row of a key left out (or a dq row without keys) is not +0\n", bc.c.label);
                    ok = 0;
                }
                jt_tally_add(tally, ok);
            }
            bcase_free(&bc);
        }
        free(mask);
    }
}

/* ---- finite differences of a float64 forward (the oracle checked) ---- */

/* sum(dout . out) + sum(dlse . lse) of the attention of double inputs, head-major dense. */
static double loss64(int64_t Sq, int64_t Skv, int64_t D, double scale, const double *q, const double *k,
                     const double *v, const double *dout, const double *dlse) {
    double total = 0;
    double *s = malloc((size_t)Skv * sizeof *s);
    for (int64_t i = 0; i < Sq; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Skv; j++) {
            double acc = 0;
            for (int64_t d = 0; d < D; d++) acc += q[i * D + d] * k[j * D + d];
            s[j] = scale * acc;
            if (s[j] > mx) mx = s[j];
        }
        for (int64_t j = 0; j < Skv; j++) sum += s[j] = exp(s[j] - mx);
        for (int64_t d = 0; d < D; d++) {
            double o = 0;
            for (int64_t j = 0; j < Skv; j++) o += s[j] * v[j * D + d];
            total += dout[i * D + d] * o / sum;
        }
        total += dlse[i] * (mx + log(sum));
    }
    free(s);
    return total;
}

static void part_fd(jt_rng *r, jt_tally *tally) {
    static const int64_t dims[][3] = {{3, 4, 5}, {1, 6, 4}, {5, 1, 3}, {4, 7, 8}};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        const int64_t Sq = dims[t][0], Skv = dims[t][1], D = dims[t][2];
        jattn_problem p = jattn_problem_flux(1, 1, Sq, Skv, D);
        p.out = jattn_strides_head_major(1, Sq, D);
        const double scale = 1.0 / sqrt((double)D);
        const int64_t nq = Sq * D, nk = Skv * D;
        float *f = malloc((size_t)(3 * nq + 4 * nk + 2 * Sq + nq) * sizeof *f);
        double *x = malloc((size_t)(2 * nq + 2 * nk + Sq) * sizeof *x);
        float *q = f, *k = q + nq, *v = k + nk, *out = v + nk, *dout = out + nq, *lse = dout + nq, *dlse = lse + Sq;
        float *dq = dlse + Sq, *dk = dq + nq, *dv = dk + nk;
        double *xq = x, *xk = xq + nq, *xv = xk + nk, *xdo = xv + nk, *xdl = xdo + nq;
        for (int64_t i = 0; i < nq; i++) q[i] = (float)jt_normal(r), dout[i] = (float)jt_normal(r);
        for (int64_t i = 0; i < nk; i++) k[i] = (float)jt_normal(r), v[i] = (float)jt_normal(r);
        for (int64_t i = 0; i < Sq; i++) dlse[i] = (float)jt_normal(r);
        for (int64_t i = 0; i < nq; i++) xq[i] = q[i], xdo[i] = dout[i];
        for (int64_t i = 0; i < nk; i++) xk[i] = k[i], xv[i] = v[i];
        for (int64_t i = 0; i < Sq; i++) xdl[i] = dlse[i];
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_REF;
        jattn_status st = jattn_forward(NULL, &p, &e, q, k, v, out, lse);
        if (st == JATTN_OK) st = jattn_backward(NULL, &p, NULL, &e, q, k, v, out, lse, dout, dlse, NULL, dq, dk, dv);
        if (st != JATTN_OK) {
            printf("FAIL fd: %s\n", jattn_last_error());
            jt_tally_add(tally, 0);
        } else {
            double *xs[3] = {xq, xk, xv};
            const float *gs[3] = {dq, dk, dv};
            const int64_t ns[3] = {nq, nk, nk};
            const char *names[3] = {"dq", "dk", "dv"};
            for (int w = 0; w < 3; w++) {
                float *fd = malloc((size_t)ns[w] * sizeof *fd);
                for (int64_t i = 0; i < ns[w]; i++) {
                    const double x0 = xs[w][i], hstep = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1);
                    xs[w][i] = x0 + hstep;
                    const double up = loss64(Sq, Skv, D, scale, xq, xk, xv, xdo, xdl);
                    xs[w][i] = x0 - hstep;
                    const double down = loss64(Sq, Skv, D, scale, xq, xk, xv, xdo, xdl);
                    xs[w][i] = x0;
                    fd[i] = (float)((up - down) / (2 * hstep));
                }
                jattn_metrics m;
                jattn_metrics_compute_dense(gs[w], fd, ns[w], &m);
                const int ok = m.rel_l2 <= 1e-6 && m.nonfinite == 0;
                if (!ok || getenv("JATTN_TEST_VERBOSE"))
                    printf("%s fd Sq=%lld Skv=%lld D=%lld %s: rel_l2 %.3g max_abs %.3g against central differences "
                           "(gate 1e-6)\n",
                           ok ? "ok  " : "FAIL", (long long)Sq, (long long)Skv, (long long)D, names[w], m.rel_l2,
                           m.max_abs);
                jt_tally_add(tally, ok);
                free(fd);
            }
        }
        free(f), free(x);
    }
}

/* ---- properties ---- */

static int bits_equal(const tensor *a, const tensor *b) {
    return a->n == b->n && memcmp(a->base, b->base, (size_t)a->n * sizeof(float)) == 0;
}

/* dout * 2^k: every gradient * 2^k, bit for bit. */
static void part_scaling(jt_rng *r, jt_tally *tally) {
    jattn_problem p = jattn_problem_flux(1, 2, 70, 110, 64);
    jattn_grad_strides g = jattn_grad_strides_like(&p);
    bcase bc;
    if (bcase_init(&bc, &p, &g, 0) != 0 || bcase_fill(&bc, JT_PEAKY, r, JATTN_BACKEND_REF, NULL) != JATTN_OK) {
        printf("FAIL scaling setup\n");
        jt_tally_add(tally, 0);
        bcase_free(&bc);
        return;
    }
    jattn_exec e = {0};
    e.backend = backend;
    tensor base[3];
    int ok = bcase_run(&bc, &e, NULL) == JATTN_OK;
    tensor *grads[3] = {&bc.dq, &bc.dk, &bc.dv};
    for (int t = 0; t < 3; t++) {
        base[t] = *grads[t];
        base[t].base = malloc((size_t)grads[t]->n * sizeof(float));
        memcpy(base[t].base, grads[t]->base, (size_t)grads[t]->n * sizeof(float));
    }
    const int ks[] = {-3, 5};
    for (size_t ki = 0; ki < 2 && ok; ki++) {
        const float f = ldexpf(1.0f, ks[ki]);
        for (int64_t i = GUARD; i < bc.dout.n - GUARD; i++) bc.dout.base[i] *= f;
        ok &= bcase_run(&bc, &e, NULL) == JATTN_OK;
        for (int t = 0; t < 3 && ok; t++)
            for (int64_t i = 0; i < grads[t]->n; i++) {
                const float want = is_poison(base[t].base[i]) ? base[t].base[i] : base[t].base[i] * f;
                if (memcmp(&want, &grads[t]->base[i], sizeof want) != 0) {
                    printf("FAIL scaling: dout * 2^%d: gradient %d element %lld is %.9g, want %.9g\n", ks[ki], t,
                           (long long)i, grads[t]->base[i], want);
                    ok = 0;
                    break;
                }
            }
        for (int64_t i = GUARD; i < bc.dout.n - GUARD; i++) bc.dout.base[i] /= f;
    }
    if (ok && getenv("JATTN_TEST_VERBOSE")) printf("ok   dout * 2^-3, 2^5: gradients scaled bit for bit\n");
    jt_tally_add(tally, ok);
    for (int t = 0; t < 3; t++) free(base[t].base);
    bcase_free(&bc);
}

/* Keys permuted (k, v rows): dk, dv rows permuted alike, dq the same (within the gate). */
static void part_permutation(jt_rng *r, jt_tally *tally) {
    jattn_problem p = jattn_problem_flux(1, 2, 50, 130, 64);
    jattn_grad_strides g = jattn_grad_strides_like(&p);
    bcase a, b;
    if (bcase_init(&a, &p, &g, 1) != 0 || bcase_init(&b, &p, &g, 1) != 0 ||
        bcase_fill(&a, JT_NORMAL, r, JATTN_BACKEND_REF, NULL) != JATTN_OK) {
        printf("FAIL permutation setup\n");
        jt_tally_add(tally, 0);
        bcase_free(&a), bcase_free(&b);
        return;
    }
    int64_t perm[130];
    for (int64_t j = 0; j < p.seq_kv; j++) perm[j] = j;
    for (int64_t j = p.seq_kv - 1; j > 0; j--) {
        const int64_t i = (int64_t)(jt_uniform(r) * (double)(j + 1));
        const int64_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    /* b: the same inputs, key j of b = key perm[j] of a; out, lse as a's */
    memcpy(b.c.q - GUARD, a.c.q - GUARD, (size_t)a.c.n_q * sizeof(float));
    memcpy(b.c.out - GUARD, a.c.out - GUARD, (size_t)a.c.n_out * sizeof(float));
    memcpy(b.c.lse, a.c.lse, (size_t)(p.batch * p.heads * p.seq_q) * sizeof(float));
    memcpy(b.dout.base, a.dout.base, (size_t)a.dout.n * sizeof(float));
    memcpy(b.dlse, a.dlse, (size_t)(p.batch * p.heads * p.seq_q) * sizeof(float));
    for (int64_t h = 0; h < p.heads; h++)
        for (int64_t j = 0; j < p.seq_kv; j++) {
            memcpy(b.c.k + h * p.k.head + j * p.k.token, a.c.k + h * p.k.head + perm[j] * p.k.token,
                   64 * sizeof(float));
            memcpy(b.c.v + h * p.v.head + j * p.v.token, a.c.v + h * p.v.head + perm[j] * p.v.token,
                   64 * sizeof(float));
        }
    b.hash = inputs_hash(&b);
    jattn_exec e = {0};
    e.backend = backend;
    int ok = bcase_run(&a, &e, NULL) == JATTN_OK && bcase_run(&b, &e, NULL) == JATTN_OK;
    if (ok) {
        const int64_t nk = p.heads * p.seq_kv * 64;
        float *x = malloc((size_t)nk * sizeof *x), *y = malloc((size_t)nk * sizeof *y),
              *yp = malloc((size_t)nk * sizeof *yp);
        const tensor *ta[2] = {&a.dk, &a.dv}, *tb[2] = {&b.dk, &b.dv};
        for (int t = 0; t < 2; t++) {
            gather(&p, ta[t], x);
            gather(&p, tb[t], y);
            for (int64_t h = 0; h < p.heads; h++)
                for (int64_t j = 0; j < p.seq_kv; j++)
                    memcpy(yp + (h * p.seq_kv + perm[j]) * 64, y + (h * p.seq_kv + j) * 64, 64 * sizeof(float));
            jattn_metrics m;
            jattn_metrics_compute_dense(yp, x, nk, &m);
            if (!(m.rel_l2 <= 1e-6 && m.nonfinite == 0)) {
                printf("FAIL permutation: %s of the permuted keys, rows permuted back: rel_l2 %.3g against the "
                       "unpermuted call (bound 1e-6)\n",
                       t ? "dv" : "dk", m.rel_l2);
                ok = 0;
            }
        }
        free(x), free(y), free(yp);
    }
    if (ok && getenv("JATTN_TEST_VERBOSE")) printf("ok   permuted keys permute dk, dv\n");
    jt_tally_add(tally, ok);
    bcase_free(&a), bcase_free(&b);
}

/* Masked k, v rows: NaN there gives bit for bit the gradients of finite values there. */
static void part_masked_nan(jt_rng *r, jt_tally *tally) {
    jattn_problem p = jattn_problem_flux(2, 2, 60, 150, 64);
    jattn_grad_strides g = jattn_grad_strides_like(&p);
    uint8_t mask[2 * 150];
    int64_t kv_len[2] = {140, 97};
    for (int i = 0; i < 300; i++) mask[i] = jt_uniform(r) < 0.6;
    jattn_key_padding kp = {kv_len, mask, 2, 150, 0};
    bcase a;
    if (bcase_init(&a, &p, &g, 1) != 0 || bcase_fill(&a, JT_NORMAL, r, JATTN_BACKEND_REF, &kp) != JATTN_OK) {
        printf("FAIL masked-nan setup\n");
        jt_tally_add(tally, 0);
        bcase_free(&a);
        return;
    }
    jattn_exec e = {0};
    e.backend = backend;
    tensor saved[3];
    tensor *grads[3] = {&a.dq, &a.dk, &a.dv};
    int ok = bcase_run(&a, &e, &kp) == JATTN_OK;
    for (int t = 0; t < 3; t++) {
        saved[t] = *grads[t];
        saved[t].base = malloc((size_t)grads[t]->n * sizeof(float));
        memcpy(saved[t].base, grads[t]->base, (size_t)grads[t]->n * sizeof(float));
    }
    poison_unattended(&p, &kp, a.c.k, a.c.v);
    a.hash = inputs_hash(&a);
    ok = ok && bcase_run(&a, &e, &kp) == JATTN_OK;
    for (int t = 0; t < 3 && ok; t++)
        if (!bits_equal(&saved[t], grads[t])) {
            printf("FAIL masked-nan: NaN in masked k/v rows changed gradient %d\n", t);
            ok = 0;
        }
    if (ok) ok = bcase_check(&a, "masked rows NaN", JT_NORMAL) && padding_zeros_ok(&a, &kp);
    if (ok && getenv("JATTN_TEST_VERBOSE")) printf("ok   NaN in masked k/v rows reaches no output\n");
    jt_tally_add(tally, ok);
    for (int t = 0; t < 3; t++) free(saved[t].base);
    bcase_free(&a);
}

/* ---- masks and grouped-query heads (jattn_mask, kv_heads) ----------------------------------------
 * Every mask part and grouped-query heads, alone and combined with each other, with key padding and
 * with dlse: the gradients of jattn_backward_masked against the float64 gradients of this file
 * (tests/mask_rule.h: the tests' own reading of jattn.h), with the gate-or-floor machinery of the
 * gate part. The k and v rows of keys that no query row attends are NaN (never to be read), their dk,
 * dv rows must be +0, and the dq rows of queries that attend no key +0. out and lse come from the
 * ref forward (the backward alone), or for a third of the unbiased cases of 33 queries and more from
 * the backend's own masked forward (the chain). A backend that refuses a mask part by feature
 * ("does not serve") is reported as skipped, never as passed. */
enum { MASK_MAX_B = 3, MASK_MAX_PARTS = 6 };

typedef struct mask_shape {
    int64_t B, H, Hkv, Sq, Skv, D;
    int token_major;
} mask_shape;

typedef enum bias_kind { BIAS_NONE, BIAS_BATCH, BIAS_HEAD, BIAS_BROADCAST } bias_kind;
typedef enum pad_kind { PAD_NONE, PAD_LEN, PAD_MASK } pad_kind;

typedef struct mask_spec {
    jattn_causal causal;
    int blocks, segments, seg_batched; /* counts (0: none); one row of offsets per batch */
    bias_kind bias;
    pad_kind pad;
} mask_spec;

typedef struct mask_arrays {
    int64_t block_q[MASK_MAX_PARTS + 1], block_kv[MASK_MAX_PARTS + 1];
    int64_t seg_q[MASK_MAX_B][MASK_MAX_PARTS + 1], seg_kv[MASK_MAX_B][MASK_MAX_PARTS + 1];
    int64_t kv_len[MASK_MAX_B];
    uint8_t *key_mask; /* [B, Skv] */
    float *bias;       /* [B, H, Skv] */
    jattn_mask m;
} mask_arrays;

/* n + 1 sorted offsets from 0 to last (parts may be empty). */
static void cut_points(int64_t *o, int n, int64_t last, jt_rng *r) {
    o[0] = 0, o[n] = last;
    for (int i = 1; i < n; i++) o[i] = (int64_t)(jt_uniform(r) * (double)(last + 1));
    for (int i = 1; i < n; i++)
        for (int j = i; j > 1 && o[j] < o[j - 1]; j--) {
            const int64_t t = o[j];
            o[j] = o[j - 1], o[j - 1] = t;
        }
}

static int mask_draw(mask_arrays *ma, const mask_spec *sp, const jattn_problem *p, jt_rng *r) {
    memset(ma, 0, sizeof *ma);
    const int64_t B = p->batch, H = p->heads, Sq = p->seq_q, Skv = p->seq_kv;
    jattn_mask *m = &ma->m;
    m->causal = sp->causal;
    if (sp->blocks) {
        cut_points(ma->block_q, sp->blocks, Sq, r);
        if (Sq == Skv && jt_uniform(r) < 0.6)
            memcpy(ma->block_kv, ma->block_q, sizeof ma->block_kv);
        else
            cut_points(ma->block_kv, sp->blocks, Skv, r);
        m->block_q = ma->block_q, m->block_kv = ma->block_kv, m->num_blocks = sp->blocks;
    }
    if (sp->segments) {
        for (int64_t b = 0; b < (sp->seg_batched ? B : 1); b++) {
            /* the last segment may end early: the queries past it attend no key, the keys past it
             * are attended by none */
            const int64_t eq = jt_uniform(r) < 0.3 ? Sq - (int64_t)(jt_uniform(r) * (double)Sq / 4) : Sq;
            const int64_t ek = jt_uniform(r) < 0.3 ? Skv - (int64_t)(jt_uniform(r) * (double)Skv / 4) : Skv;
            cut_points(ma->seg_q[b], sp->segments, eq, r);
            if (Sq == Skv && eq == ek && jt_uniform(r) < 0.5)
                memcpy(ma->seg_kv[b], ma->seg_q[b], sizeof ma->seg_kv[b]);
            else
                cut_points(ma->seg_kv[b], sp->segments, ek, r);
        }
        m->cu_seqlens_q = ma->seg_q[0], m->cu_seqlens_kv = ma->seg_kv[0];
        m->num_segments = sp->segments;
        m->segments_batch_stride = sp->seg_batched ? MASK_MAX_PARTS + 1 : 0;
    }
    if (sp->bias != BIAS_NONE) {
        if (!(ma->bias = malloc((size_t)(B * H * Skv) * sizeof(float)))) return -1;
        m->key_bias = ma->bias;
        m->key_bias_batch_stride = sp->bias == BIAS_BROADCAST ? 0 : H * Skv;
        m->key_bias_head_stride = sp->bias == BIAS_HEAD ? Skv : 0;
        for (int64_t x = 0; x < B * H * Skv; x++) { /* -inf (left out), -10000 (a text encoder's padding) */
            const double u = jt_uniform(r);
            ma->bias[x] = u < 0.08 ? -INFINITY : u < 0.16 ? -10000.0f : (float)(4.0 * jt_normal(r));
        }
    }
    if (sp->pad == PAD_LEN) {
        for (int64_t b = 0; b < B; b++) ma->kv_len[b] = (int64_t)(jt_uniform(r) * (double)(Skv + 1));
        m->padding.kv_len = ma->kv_len;
    } else if (sp->pad == PAD_MASK) {
        if (!(ma->key_mask = malloc((size_t)(B * Skv)))) return -1;
        for (int64_t x = 0; x < B * Skv; x++) ma->key_mask[x] = jt_uniform(r) < 0.7;
        m->padding.mask = ma->key_mask, m->padding.mask_batch = B, m->padding.mask_keys = Skv;
    }
    return 0;
}

static void mask_arrays_free(mask_arrays *ma) { free(ma->key_mask), free(ma->bias); }

static void mask_label(const mask_spec *sp, const jattn_problem *p, char *label, size_t cap) {
    static const char *const causal[] = {"", " causal", " causal-br"};
    static const char *const bias[] = {"", " bias-b", " bias-bh", " bias-1"};
    static const char *const pad[] = {"", " kv_len", " key-mask"};
    const size_t len = strlen(label);
    snprintf(label + len, cap - len, " Hkv=%lld%s%s%s%s%s%s", (long long)kit_kv_heads(p), causal[sp->causal],
             sp->blocks ? " blocks" : "", sp->segments ? " segments" : "", sp->seg_batched ? "-per-batch" : "",
             bias[sp->bias], pad[sp->pad]);
}

/* Whether key j of (b, key/value head hk) is attended by some query row of one of its query heads. */
static int key_attended(const jattn_mask *m, const jattn_problem *p, int64_t b, int64_t hk, int64_t j) {
    const int64_t group = p->heads / kit_kv_heads(p);
    for (int64_t h = hk * group; h < (hk + 1) * group; h++)
        for (int64_t i = 0; i < p->seq_q; i++)
            if (jt_mask_attends(m, p, b, h, i, j)) return 1;
    return 0;
}

/* NaN into the k and v rows of every key no query row attends. */
static void poison_unattended_keys(jt_case *c, const jattn_mask *m) {
    const jattn_problem *p = &c->p;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t hk = 0; hk < kit_kv_heads(p); hk++)
            for (int64_t j = 0; j < p->seq_kv; j++)
                if (!key_attended(m, p, b, hk, j))
                    for (int64_t d = 0; d < p->head_dim; d++) {
                        c->k[b * p->k.batch + hk * p->k.head + j * p->k.token + d] = NAN;
                        c->v[b * p->v.batch + hk * p->v.head + j * p->v.token + d] = NAN;
                    }
}

static int zero_row(const float *x, int64_t D) {
    for (int64_t d = 0; d < D; d++)
        if (x[d] != 0.0f || signbit(x[d])) return 0;
    return 1;
}

/* dk, dv rows of keys no query attends and dq rows of queries that attend no key: +0 (bits). */
static int masked_zeros_ok(const bcase *bc, const jattn_mask *m) {
    const jattn_problem *p = &bc->c.p;
    const int64_t D = p->head_dim;
    for (int64_t b = 0; b < p->batch; b++) {
        for (int64_t hk = 0; hk < kit_kv_heads(p); hk++)
            for (int64_t j = 0; j < p->seq_kv; j++)
                if (!key_attended(m, p, b, hk, j) &&
                    (!zero_row(at(&bc->dk) + b * bc->g.dk.batch + hk * bc->g.dk.head + j * bc->g.dk.token, D) ||
                     !zero_row(at(&bc->dv) + b * bc->g.dv.batch + hk * bc->g.dv.head + j * bc->g.dv.token, D))) {
                    printf("FAIL %s: key b=%lld hk=%lld j=%lld is attended by no query: its dk, dv rows are not +0\n",
                           bc->c.label, (long long)b, (long long)hk, (long long)j);
                    return 0;
                }
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < p->seq_q; i++) {
                int any = 0;
                for (int64_t j = 0; j < p->seq_kv && !any; j++) any = jt_mask_attends(m, p, b, h, i, j);
                if (!any && !zero_row(at(&bc->dq) + b * bc->g.dq.batch + h * bc->g.dq.head + i * bc->g.dq.token, D)) {
                    printf("FAIL %s: query b=%lld h=%lld i=%lld attends no key: its dq row is not +0\n", bc->c.label,
                           (long long)b, (long long)h, (long long)i);
                    return 0;
                }
            }
    }
    return 1;
}

static jattn_status bcase_run_masked(bcase *bc, const jattn_exec *e, const jattn_mask *m) {
    tensor_poison(&bc->dq), tensor_poison(&bc->dk), tensor_poison(&bc->dv);
    bc->mask_in_use = m;
    return jattn_backward_masked(NULL, &bc->c.p, &bc->g, e, bc->c.q, bc->c.k, bc->c.v, bc->c.out, bc->c.lse,
                                 at(&bc->dout), bc->dlse, m, at(&bc->dq), at(&bc->dk), at(&bc->dv));
}

/* Whether the backend's own masked forward serves the mask of p (its plan): where it does not (the cuda
 * forward before it served masks), the parts that take out and lse from it take the ref forward's, so that
 * the backend's backward is still checked. */
static int forward_serves(const jattn_problem *p, const jattn_mask *m) {
    jattn_exec e = {0};
    e.backend = backend;
    jattn_plan *plan = NULL;
    const jattn_status st = jattn_plan_create(&plan, JATTN_PASS_FORWARD, p, NULL, m, &e);
    jattn_plan_free(plan);
    return st == JATTN_OK;
}

/* 1 (after printing "skip") when the backend refused a mask part it does not serve yet (by feature:
 * jattn_refuse_features' message). Never counted as passed. */
static int refused_mask_feature(jattn_status st, const char *label) {
    if (st != JATTN_ERROR_UNSUPPORTED || !strstr(jattn_last_error(), "does not serve")) return 0;
    printf("skip %s: %s\n", label, jattn_last_error());
    return 1;
}

static jattn_problem mask_problem(const mask_shape *s, jattn_grad_strides *g) {
    jattn_problem p = jattn_problem_flux(s->B, s->H, s->Sq, s->Skv, s->D);
    p.kv_heads = s->Hkv == s->H && s->B % 2 ? 0 : s->Hkv; /* 0 and heads mean the same */
    p.k = jattn_strides_head_major(s->Hkv, s->Skv, s->D);
    p.v = jattn_strides_head_major(s->Hkv, s->Skv, s->D);
    if (s->token_major) {
        p.q = jattn_strides_token_major(s->H, s->Sq, s->D);
        p.k = jattn_strides_token_major(s->Hkv, s->Skv, s->D);
        p.v = jattn_strides_token_major(s->Hkv, s->Skv, s->D);
        p.out = jattn_strides_head_major(s->H, s->Sq, s->D);
    }
    *g = jattn_grad_strides_like(&p);
    if (s->token_major) { /* the gradients at strides of their own */
        g->dq = padded(s->H, s->Sq, s->D);
        g->dk = jattn_strides_head_major(s->Hkv, s->Skv, s->D);
    }
    return p;
}

/* Draws the inputs of a masked case (distribution d; NaN in the keys nobody attends), its out and
 * lse from `fwd`'s masked forward, and the float64 gradients. @return the forward's status. */
static jattn_status mask_case_fill(bcase *bc, jt_dist d, jt_rng *r, jattn_backend fwd, const jattn_mask *m) {
    jattn_problem *p = &bc->c.p;
    jt_case_fill(&bc->c, d, r);
    poison_unattended_keys(&bc->c, m);
    fill_normal(p, &bc->dout, r);
    if (bc->dlse)
        for (int64_t i = 0; i < p->batch * p->heads * p->seq_q; i++) bc->dlse[i] = (float)jt_normal(r);
    jattn_exec e = {0};
    e.backend = fwd;
    jattn_status st = jattn_forward_masked(NULL, p, &e, bc->c.q, bc->c.k, bc->c.v, m, bc->c.out, bc->c.lse);
    if (st != JATTN_OK) return st;
    reference_grads(p, m, bc->c.q, bc->c.k, bc->c.v, at(&bc->dout), bc->dout.s, bc->dlse, 0, NULL, NULL, &bc->ref);
    bc->hash = inputs_hash(bc);
    return JATTN_OK;
}

static const mask_shape mask_shapes[] = {
    {2, 4, 2, 33, 33, 64, 0},    {1, 6, 1, 70, 70, 128, 1},  {2, 2, 2, 65, 130, 32, 0}, {1, 3, 3, 130, 40, 16, 1},
    {2, 4, 4, 1, 50, 64, 0},     {1, 2, 1, 200, 200, 80, 0}, {2, 2, 2, 17, 17, 1, 1},   {1, 8, 2, 128, 128, 128, 0},
    {1, 2, 2, 150, 150, 256, 0}, {3, 2, 1, 64, 64, 72, 1},   {1, 4, 2, 100, 77, 3, 0},
};

static const mask_spec mask_specs[] = {
    {JATTN_CAUSAL_NONE, 0, 0, 0, BIAS_NONE, PAD_NONE},         /* grouped heads alone */
    {JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, BIAS_NONE, PAD_NONE},     /* PyTorch's is_causal */
    {JATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, BIAS_NONE, PAD_LEN},  /* FlashAttention's, key lengths */
    {JATTN_CAUSAL_NONE, 3, 0, 0, BIAS_NONE, PAD_NONE},         /* block-causal */
    {JATTN_CAUSAL_NONE, 0, 3, 0, BIAS_NONE, PAD_NONE},         /* packed sequences */
    {JATTN_CAUSAL_TOP_LEFT, 0, 4, 1, BIAS_NONE, PAD_NONE},     /* causal inside segments, per batch */
    {JATTN_CAUSAL_BOTTOM_RIGHT, 0, 3, 0, BIAS_NONE, PAD_MASK}, /* the same, bottom-right, a key mask */
    {JATTN_CAUSAL_NONE, 0, 0, 0, BIAS_BATCH, PAD_NONE},        /* a text encoder's float mask */
    {JATTN_CAUSAL_NONE, 0, 0, 0, BIAS_HEAD, PAD_MASK},
    {JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, BIAS_BROADCAST, PAD_LEN},
    {JATTN_CAUSAL_NONE, 5, 0, 0, BIAS_HEAD, PAD_MASK},
    {JATTN_CAUSAL_BOTTOM_RIGHT, 2, 3, 1, BIAS_HEAD, PAD_LEN}, /* every part at once */
};

static void part_masks(jt_rng *r, jt_tally *tally) {
    const size_t nshapes = sizeof mask_shapes / sizeof mask_shapes[0],
                 nspecs = sizeof mask_specs / sizeof mask_specs[0];
    int skipped = 0;
    for (size_t si = 0; si < nshapes; si++)
        for (size_t mi = 0; mi < nspecs; mi++) {
            const mask_shape *ms = &mask_shapes[si];
            const mask_spec *sp = &mask_specs[mi];
            jattn_grad_strides g;
            jattn_problem p = mask_problem(ms, &g);
            bcase bc;
            mask_arrays ma;
            const int with_dlse = (int)((si + mi) % 2);
            /* the chain where rows average (the gate part's premise): not with a key bias, whose spread
             * (std 4) puts every row of a batch near one-hot on its largest-bias key, where the forward's
             * own rounding of out (any float32 forward) is a relative error u / (1 - P) of dq, dk that no
             * row averages away (cpu: 10.8x the floor at B=1 H=2 S=200 D=80 MQA uniform, seed
             * 25745585503291 before this; the same cases from the float64 forward sit at 1.0x) */
            int chain = ms->Sq >= 33 && (si + mi) % 3 == 0 && sp->bias == BIAS_NONE;
            if (bcase_init(&bc, &p, &g, with_dlse) != 0 || mask_draw(&ma, sp, &p, r) != 0) {
                printf("FAIL allocation\n");
                jt_tally_add(tally, 0);
                bcase_free(&bc);
                continue;
            }
            chain = chain && forward_serves(&p, &ma.m); /* else the backward alone, from the ref forward */
            const size_t len = strlen(bc.c.label);
            snprintf(bc.c.label + len, sizeof bc.c.label - len, "%s%s%s", ms->token_major ? " token-major" : " flux",
                     with_dlse ? " dlse" : "", chain ? " chain" : "");
            mask_label(sp, &p, bc.c.label, sizeof bc.c.label);
            const jt_dist d = (jt_dist)((si + mi) % JT_DIST_COUNT);
            jattn_status st = mask_case_fill(&bc, d, r, chain ? backend : JATTN_BACKEND_REF, &ma.m);
            jattn_exec e = {0};
            e.backend = backend;
            if (st == JATTN_OK) st = bcase_run_masked(&bc, &e, &ma.m);
            if (refused_mask_feature(st, bc.c.label) || refused_as_documented(st, &p, bc.c.label))
                skipped++;
            else if (st != JATTN_OK) {
                printf("FAIL %s: %s: %s\n", bc.c.label, jattn_status_name(st), jattn_last_error());
                jt_tally_add(tally, 0);
            } else {
                const int ok = bcase_check(&bc, "", d);
                jt_tally_add(tally, ok && masked_zeros_ok(&bc, &ma.m));
            }
            mask_arrays_free(&ma);
            bcase_free(&bc);
        }
    if (skipped) printf("masks: %d cases skipped (refused by the backend)\n", skipped);
}

/* Masked calls on 1, 2, 3 and 5 threads: the forward's out and lse and the backward's dq, dk, dv bit
 * for bit those of 1 thread (few key/value heads: the backward's two phases on several threads). */
static void part_masks_determinism(jt_rng *r, jt_tally *tally) {
    static const mask_shape dshapes[] = {
        {1, 4, 1, 150, 200, 64, 0}, {2, 4, 2, 130, 130, 128, 1}, {1, 2, 1, 300, 300, 16, 0}, {1, 3, 3, 97, 61, 40, 0}};
    static const mask_spec dspecs[] = {{JATTN_CAUSAL_BOTTOM_RIGHT, 0, 3, 0, BIAS_HEAD, PAD_NONE},
                                       {JATTN_CAUSAL_TOP_LEFT, 3, 0, 0, BIAS_NONE, PAD_LEN},
                                       {JATTN_CAUSAL_TOP_LEFT, 0, 5, 0, BIAS_BATCH, PAD_MASK},
                                       {JATTN_CAUSAL_NONE, 0, 0, 0, BIAS_BROADCAST, PAD_NONE}};
    for (size_t t = 0; t < sizeof dshapes / sizeof dshapes[0]; t++) {
        jattn_grad_strides g;
        jattn_problem p = mask_problem(&dshapes[t], &g);
        bcase bc;
        mask_arrays ma;
        if (bcase_init(&bc, &p, &g, 1) != 0 || mask_draw(&ma, &dspecs[t], &p, r) != 0) {
            printf("FAIL allocation\n");
            jt_tally_add(tally, 0);
            bcase_free(&bc);
            continue;
        }
        mask_label(&dspecs[t], &p, bc.c.label, sizeof bc.c.label);
        const jt_dist d = (jt_dist)((t + 1) % JT_DIST_COUNT);
        jattn_status st = mask_case_fill(&bc, d, r, JATTN_BACKEND_REF, &ma.m);
        const int64_t nl = p.batch * p.heads * p.seq_q;
        float *out1 = malloc((size_t)bc.c.n_out * sizeof(float)), *lse1 = malloc((size_t)nl * sizeof(float));
        float *out_t = malloc((size_t)bc.c.n_out * sizeof(float)), *lse_t = malloc((size_t)nl * sizeof(float));
        tensor first[3];
        tensor *grads[3] = {&bc.dq, &bc.dk, &bc.dv};
        static const int threads[] = {1, 2, 3, 5};
        int ok = st == JATTN_OK && out1 && lse1 && out_t && lse_t, skip = 0;
        /* a backend whose forward does not serve the mask: its backward's repeats alone (from the ref's out, lse) */
        const int own_forward = forward_serves(&p, &ma.m);
        if (ok) { /* the elements out does not span compare equal */
            memset(out1, 0, (size_t)bc.c.n_out * sizeof(float));
            memset(out_t, 0, (size_t)bc.c.n_out * sizeof(float));
        }
        for (size_t ti = 0; ti < sizeof threads / sizeof threads[0] && ok; ti++) {
            jattn_exec e = {0};
            e.backend = backend;
            e.threads = threads[ti];
            float *o = ti ? out_t : out1, *l = ti ? lse_t : lse1;
            if (own_forward) st = jattn_forward_masked(NULL, &p, &e, bc.c.q, bc.c.k, bc.c.v, &ma.m, o, l);
            if (st == JATTN_OK) st = bcase_run_masked(&bc, &e, &ma.m);
            if (refused_mask_feature(st, bc.c.label)) {
                skip = 1;
                break;
            }
            ok = st == JATTN_OK;
            if (ok && ti &&
                (memcmp(out1, out_t, (size_t)bc.c.n_out * sizeof(float)) != 0 ||
                 memcmp(lse1, lse_t, (size_t)nl * sizeof(float)) != 0)) {
                printf("FAIL masks determinism %s: the forward differs on %d threads from 1 thread\n", bc.c.label,
                       threads[ti]);
                ok = 0;
            }
            for (int k = 0; k < 3 && ok; k++) {
                if (ti == 0) {
                    first[k] = *grads[k];
                    first[k].base = malloc((size_t)grads[k]->n * sizeof(float));
                    memcpy(first[k].base, grads[k]->base, (size_t)grads[k]->n * sizeof(float));
                } else if (!bits_equal(&first[k], grads[k])) {
                    printf("FAIL masks determinism %s: gradient %d differs on %d threads from 1 thread\n", bc.c.label,
                           k, threads[ti]);
                    ok = 0;
                }
            }
        }
        if (st != JATTN_OK && !skip) printf("FAIL %s: %s: %s\n", bc.c.label, jattn_status_name(st), jattn_last_error());
        if (!skip) {
            if (ok) ok = bcase_check(&bc, "masks determinism", d) && masked_zeros_ok(&bc, &ma.m);
            jt_tally_add(tally, ok);
            for (int k = 0; k < 3; k++) free(first[k].base);
        }
        free(out1), free(lse1), free(out_t), free(lse_t);
        mask_arrays_free(&ma);
        bcase_free(&bc);
    }
}

/* Non-finite values in a key that some rows attend and others (of the same query blocks) do not:
 * Inf in one element of its v row, NaN in one of its k row (key/value head 0). Every out row, lse and
 * dq row of a query that does not attend it is bit for bit that of the call with 0 in those elements
 * (jattn.h: keys a row does not attend never affect its outputs), and every out row that attends it
 * is not finite. */
static void part_masks_nonfinite(jt_rng *r, jt_tally *tally) {
    static const mask_shape nshapes[] = {
        {1, 2, 1, 150, 150, 64, 0}, {2, 4, 2, 90, 120, 16, 1}, {1, 2, 2, 100, 100, 128, 0}};
    static const mask_spec nspecs[] = {{JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, BIAS_NONE, PAD_NONE},
                                       {JATTN_CAUSAL_BOTTOM_RIGHT, 0, 2, 0, BIAS_HEAD, PAD_NONE},
                                       {JATTN_CAUSAL_NONE, 4, 0, 0, BIAS_BATCH, PAD_LEN}};
    for (size_t t = 0; t < sizeof nshapes / sizeof nshapes[0]; t++) {
        jattn_grad_strides g;
        jattn_problem p = mask_problem(&nshapes[t], &g);
        bcase a, z;
        mask_arrays ma;
        if (bcase_init(&a, &p, &g, 1) != 0 || bcase_init(&z, &p, &g, 1) != 0 ||
            mask_draw(&ma, &nspecs[t], &p, r) != 0) {
            printf("FAIL allocation\n");
            jt_tally_add(tally, 0);
            bcase_free(&a), bcase_free(&z);
            continue;
        }
        if (ma.m.padding.kv_len) /* every key attended by the padding: the window decides */
            for (int64_t b = 0; b < p.batch; b++) ma.kv_len[b] = p.seq_kv;
        if (ma.bias)
            for (int64_t x = 0; x < p.batch * p.heads * p.seq_kv; x++) ma.bias[x] = (float)jt_normal(r);
        mask_label(&nspecs[t], &p, a.c.label, sizeof a.c.label);
        const jt_dist d = (jt_dist)(t % JT_DIST_COUNT);
        jattn_exec e = {0}, fe = {0};
        e.backend = backend;
        /* the forward: the backend's, else (it does not serve the mask) the ref's, and the backward alone */
        fe.backend = forward_serves(&p, &ma.m) ? backend : JATTN_BACKEND_REF;
        if (fe.backend != backend) {
            const size_t len = strlen(a.c.label);
            snprintf(a.c.label + len, sizeof a.c.label - len, " (out, lse: ref)");
        }
        /* z: the key's elements 0; a: Inf and NaN there; the same inputs otherwise */
        jt_case_fill(&z.c, d, r);
        fill_normal(&p, &z.dout, r);
        for (int64_t i = 0; i < p.batch * p.heads * p.seq_q; i++) z.dlse[i] = (float)jt_normal(r);
        const int64_t j = p.seq_kv / 2 + 1, dd = p.head_dim / 2;
        z.c.k[j * p.k.token] = 0.0f, z.c.v[j * p.v.token + dd] = 0.0f; /* batch 0, key/value head 0 */
        memcpy(a.c.q - GUARD, z.c.q - GUARD, (size_t)z.c.n_q * sizeof(float));
        memcpy(a.c.k - GUARD, z.c.k - GUARD, (size_t)z.c.n_k * sizeof(float));
        memcpy(a.c.v - GUARD, z.c.v - GUARD, (size_t)z.c.n_v * sizeof(float));
        memcpy(a.dout.base, z.dout.base, (size_t)z.dout.n * sizeof(float));
        memcpy(a.dlse, z.dlse, (size_t)(p.batch * p.heads * p.seq_q) * sizeof(float));
        a.c.p.scale = z.c.p.scale;
        a.c.k[j * p.k.token] = NAN, a.c.v[j * p.v.token + dd] = INFINITY;
        bcase *cs[2] = {&z, &a};
        jattn_status st = JATTN_OK;
        for (int c = 0; c < 2 && st == JATTN_OK; c++) {
            st = jattn_forward_masked(NULL, &cs[c]->c.p, &fe, cs[c]->c.q, cs[c]->c.k, cs[c]->c.v, &ma.m, cs[c]->c.out,
                                      cs[c]->c.lse);
            if (st == JATTN_OK) st = bcase_run_masked(cs[c], &e, &ma.m);
        }
        int ok = st == JATTN_OK;
        if (refused_mask_feature(st, a.c.label)) {
            bcase_free(&a), bcase_free(&z), mask_arrays_free(&ma);
            continue;
        }
        if (!ok) printf("FAIL %s: %s: %s\n", a.c.label, jattn_status_name(st), jattn_last_error());
        const int64_t group = p.heads / kit_kv_heads(&p), D = p.head_dim;
        for (int64_t h = 0; h < group && ok; h++) /* the query heads of key/value head 0, batch 0 */
            for (int64_t i = 0; i < p.seq_q && ok; i++) {
                const int64_t ro = h * p.out.head + i * p.out.token, rq = h * a.g.dq.head + i * a.g.dq.token;
                const float *oa = a.c.out + ro, *oz = z.c.out + ro;
                if (jt_mask_attends(&ma.m, &p, 0, h, i, j)) {
                    int finite = 1;
                    for (int64_t x = 0; x < D; x++) finite &= isfinite(oa[x]) != 0;
                    if (finite) {
                        printf("FAIL %s: row h=%lld i=%lld attends the key with NaN and Inf, its out row is finite\n",
                               a.c.label, (long long)h, (long long)i);
                        ok = 0;
                    }
                    continue;
                }
                const int out_moved = memcmp(oa, oz, (size_t)D * sizeof(float)) != 0;
                const int lse_moved = memcmp(&a.c.lse[h * p.seq_q + i], &z.c.lse[h * p.seq_q + i], sizeof(float)) != 0;
                const int dq_moved = memcmp(at(&a.dq) + rq, at(&z.dq) + rq, (size_t)D * sizeof(float)) != 0;
                if (out_moved || lse_moved || dq_moved) {
                    double most = 0.0; /* the largest change of the first moved part */
                    const float *xa = out_moved ? oa : dq_moved ? at(&a.dq) + rq : &a.c.lse[h * p.seq_q + i];
                    const float *xz = out_moved ? oz : dq_moved ? at(&z.dq) + rq : &z.c.lse[h * p.seq_q + i];
                    for (int64_t x = 0; x < (out_moved || dq_moved ? D : 1); x++) {
                        const double dx = fabs((double)xa[x] - (double)xz[x]);
                        most = isnan(dx) ? INFINITY : dx > most ? dx : most;
                    }
                    printf("FAIL %s: row h=%lld i=%lld does not attend key %lld, but its%s%s%s changed with the key's "
                           "NaN and Inf (largest change %.3g; seed %llu)\n",
                           a.c.label, (long long)h, (long long)i, (long long)j, out_moved ? " out" : "",
                           lse_moved ? " lse" : "", dq_moved ? " dq" : "", most, (unsigned long long)jt_seed());
                    ok = 0;
                }
            }
        if (ok && getenv("JATTN_TEST_VERBOSE"))
            printf("ok   %s: a non-finite key reaches only the rows attending it\n", a.c.label);
        jt_tally_add(tally, ok);
        bcase_free(&a), bcase_free(&z), mask_arrays_free(&ma);
    }
}

/* ---- determinism: runs and thread counts ---- */
static void part_determinism(jt_rng *r, jt_tally *tally) {
    static const int64_t dims[][5] = {{1, 3, 150, 200, 128}, {2, 2, 97, 61, 64}, {1, 1, 300, 100, 16}};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        jattn_problem p = jattn_problem_flux(dims[t][0], dims[t][1], dims[t][2], dims[t][3], dims[t][4]);
        jattn_grad_strides g = jattn_grad_strides_like(&p);
        bcase a;
        if (bcase_init(&a, &p, &g, 1) != 0 ||
            bcase_fill(&a, (jt_dist)(t % JT_DIST_COUNT + 1), r, JATTN_BACKEND_REF, NULL) != JATTN_OK) {
            printf("FAIL determinism setup\n");
            jt_tally_add(tally, 0);
            bcase_free(&a);
            continue;
        }
        tensor first[3];
        tensor *grads[3] = {&a.dq, &a.dk, &a.dv};
        static const int threads[] = {1, 2, 3, 5, 1};
        int ok = 1;
        for (size_t ti = 0; ti < sizeof threads / sizeof threads[0] && ok; ti++) {
            jattn_exec e = {0};
            e.backend = backend;
            e.threads = threads[ti];
            ok = bcase_run(&a, &e, NULL) == JATTN_OK;
            for (int k = 0; k < 3 && ok; k++) {
                if (ti == 0) {
                    first[k] = *grads[k];
                    first[k].base = malloc((size_t)grads[k]->n * sizeof(float));
                    memcpy(first[k].base, grads[k]->base, (size_t)grads[k]->n * sizeof(float));
                } else if (!bits_equal(&first[k], grads[k])) {
                    printf("FAIL determinism %s: gradient %d differs on %d threads from 1 thread\n", a.c.label, k,
                           threads[ti]);
                    ok = 0;
                }
            }
        }
        if (ok) ok = bcase_check(&a, "determinism", (jt_dist)(t % JT_DIST_COUNT + 1));
        for (int k = 0; k < 3; k++) free(first[k].base);
        jt_tally_add(tally, ok);
        bcase_free(&a);
    }
}

/* ---- validation: every error, nothing written ---- */
static int untouched(const tensor *t) {
    for (int64_t i = 0; i < t->n; i++)
        if (!is_poison(t->base[i])) return 0;
    return 1;
}

typedef struct vcase {
    const char *what;
    jattn_status want;
    const jattn_problem *p;
    const jattn_grad_strides *g;
    const float *q, *k, *v, *out, *lse, *dout, *dlse;
    float *dq, *dk, *dv;
    const char *field; /* the message must name it */
} vcase;

static void part_validation(jt_rng *r, jt_tally *tally) {
    jattn_problem p = jattn_problem_flux(1, 2, 20, 30, 32);
    jattn_grad_strides g = jattn_grad_strides_like(&p);
    bcase bc;
    if (bcase_init(&bc, &p, &g, 1) != 0 || bcase_fill(&bc, JT_NORMAL, r, JATTN_BACKEND_REF, NULL) != JATTN_OK) {
        printf("FAIL validation setup\n");
        jt_tally_add(tally, 0);
        bcase_free(&bc);
        return;
    }
    jattn_exec e = {0};
    e.backend = backend;
    float *q = bc.c.q, *k = bc.c.k, *v = bc.c.v, *out = bc.c.out, *lse = bc.c.lse, *dout = at(&bc.dout);
    float *dlse = bc.dlse, *dq = at(&bc.dq), *dk = at(&bc.dk), *dv = at(&bc.dv);
    vcase cases[32];
    int n = 0;
#define CASE(W, S, P, G, Q, K, V, O, L, DO, DL, DQ, DK, DV, F) \
    cases[n++] = (vcase){W, S, P, G, Q, K, V, O, L, DO, DL, DQ, DK, DV, F}
    jattn_problem bad_dim = p, bad_scale = p;
    bad_dim.seq_kv = -1;
    bad_scale.scale = -1.0f;
    jattn_grad_strides neg = g, self = g, small_dq = g;
    neg.dk.token = -32;
    self.dv.token = 16;
    small_dq.dq.head = 8; /* dq overlaps itself */
    CASE("problem NULL", JATTN_ERROR_NULL_POINTER, NULL, &g, q, k, v, out, lse, dout, dlse, dq, dk, dv, "problem");
    CASE("seq_kv -1", JATTN_ERROR_INVALID_DIMENSION, &bad_dim, &g, q, k, v, out, lse, dout, dlse, dq, dk, dv, "seq_kv");
    CASE("scale < 0", JATTN_ERROR_INVALID_SCALE, &bad_scale, &g, q, k, v, out, lse, dout, dlse, dq, dk, dv, "scale");
    CASE("dk stride < 0", JATTN_ERROR_INVALID_STRIDE, &p, &neg, q, k, v, out, lse, dout, dlse, dq, dk, dv, "grad.dk");
    CASE("dv overlaps itself", JATTN_ERROR_SELF_OVERLAP, &p, &self, q, k, v, out, lse, dout, dlse, dq, dk, dv,
         "grad.dv");
    CASE("dq overlaps itself", JATTN_ERROR_SELF_OVERLAP, &p, &small_dq, q, k, v, out, lse, dout, dlse, dq, dk, dv,
         "grad.dq");
    CASE("q NULL", JATTN_ERROR_NULL_POINTER, &p, &g, NULL, k, v, out, lse, dout, dlse, dq, dk, dv, "q");
    CASE("k NULL", JATTN_ERROR_NULL_POINTER, &p, &g, q, NULL, v, out, lse, dout, dlse, dq, dk, dv, "k");
    CASE("v NULL", JATTN_ERROR_NULL_POINTER, &p, &g, q, k, NULL, out, lse, dout, dlse, dq, dk, dv, "v");
    CASE("out NULL", JATTN_ERROR_NULL_POINTER, &p, &g, q, k, v, NULL, lse, dout, dlse, dq, dk, dv, "out");
    CASE("lse NULL", JATTN_ERROR_NULL_POINTER, &p, &g, q, k, v, out, NULL, dout, dlse, dq, dk, dv, "lse");
    CASE("dout NULL", JATTN_ERROR_NULL_POINTER, &p, &g, q, k, v, out, lse, NULL, dlse, dq, dk, dv, "dout");
    CASE("dq NULL", JATTN_ERROR_NULL_POINTER, &p, &g, q, k, v, out, lse, dout, dlse, NULL, dk, dv, "dq");
    CASE("dk NULL", JATTN_ERROR_NULL_POINTER, &p, &g, q, k, v, out, lse, dout, dlse, dq, NULL, dv, "dk");
    CASE("dv NULL", JATTN_ERROR_NULL_POINTER, &p, &g, q, k, v, out, lse, dout, dlse, dq, dk, NULL, "dv");
    CASE("dq misaligned", JATTN_ERROR_INVALID_ARGUMENT, &p, &g, q, k, v, out, lse, dout, dlse,
         (float *)((char *)dq + 1), dk, dv, "dq");
    CASE("dq = q", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, q, dk, dv, "dq");
    CASE("dk = k", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, dq, k, dv, "dk");
    CASE("dv over v", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, dq, dk, v + 5, "dv");
    CASE("dq = out", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, out, dk, dv, "dq");
    CASE("dk over lse", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, dq, lse, dv, "dk");
    CASE("dv = dout", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, dq, dk, dout, "dv");
    CASE("dq over dlse", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, dlse, dk, dv, "dq");
    CASE("dk = dq", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, dq, dq, dv, "dk");
    CASE("dv over dk", JATTN_ERROR_ALIASING, &p, &g, q, k, v, out, lse, dout, dlse, dq, dk, dk + 7, "dv");
#undef CASE
    int all = 1;
    for (int i = 0; i < n; i++) {
        tensor_poison(&bc.dq), tensor_poison(&bc.dk), tensor_poison(&bc.dv);
        jattn_status st =
            jattn_backward(NULL, cases[i].p, cases[i].g, &e, cases[i].q, cases[i].k, cases[i].v, cases[i].out,
                           cases[i].lse, cases[i].dout, cases[i].dlse, NULL, cases[i].dq, cases[i].dk, cases[i].dv);
        int ok = jt_expect_status(st, cases[i].want, cases[i].what);
        if (ok && !strstr(jattn_last_error(), cases[i].field)) {
            printf("FAIL %s: message \"%s\" does not name %s\n", cases[i].what, jattn_last_error(), cases[i].field);
            ok = 0;
        }
        if (ok && (!untouched(&bc.dq) || !untouched(&bc.dk) || !untouched(&bc.dv))) {
            printf("FAIL %s: a gradient was written on failure\n", cases[i].what);
            ok = 0;
        }
        all &= ok;
    }
    /* padding: out of range, wrong mask extent, the mask overlapping a gradient */
    {
        int64_t bad_len[1] = {31};
        uint8_t mask[30];
        memset(mask, 1, sizeof mask);
        jattn_key_padding lens = {bad_len, NULL, 0, 0, 0}, extent = {NULL, mask, 1, 29, 0},
                          over = {NULL, (const uint8_t *)dk, 1, 30, 0};
        const struct {
            const jattn_key_padding *kp;
            jattn_status want;
            const char *field;
        } pc[3] = {{&lens, JATTN_ERROR_INVALID_ARGUMENT, "kv_len"},
                   {&extent, JATTN_ERROR_INVALID_DIMENSION, "mask_keys"},
                   {&over, JATTN_ERROR_ALIASING, "key_padding.mask"}};
        for (int i = 0; i < 3; i++) {
            tensor_poison(&bc.dq), tensor_poison(&bc.dk), tensor_poison(&bc.dv);
            jattn_status st = jattn_backward(NULL, &p, &g, &e, q, k, v, out, lse, dout, dlse, pc[i].kp, dq, dk, dv);
            int ok = jt_expect_status(st, pc[i].want, pc[i].field) && strstr(jattn_last_error(), pc[i].field) &&
                     untouched(&bc.dq) && untouched(&bc.dv);
            if (!ok) printf("FAIL padding %s: %s\n", pc[i].field, jattn_last_error());
            all &= ok;
        }
    }
    /* workspace: too small, then exactly the size reported (no allocation needed) */
    {
        size_t need = 0;
        jattn_status st = jattn_backward_workspace_size(&p, &g, &e, &need);
        all &= jt_expect_status(st, JATTN_OK, "jattn_backward_workspace_size");
        all &=
            jt_expect_status(jattn_backward_workspace_size(&p, &g, &e, NULL), JATTN_ERROR_NULL_POINTER, "bytes NULL");
        /* one byte short of what this call needs: its plan's size (no key padding) less the 63 bytes of slack */
        const size_t own = jt_plan_workspace(JATTN_PASS_BACKWARD, &p, &g, NULL, &e);
        if (need > 0 && own > 64) {
            void *ws = NULL;
#ifdef JATTN_TEST_BACKWARD_CUDA
            if (backend == JATTN_BACKEND_CUDA) { /* the backend's workspace is device memory */
                if (cudaMalloc(&ws, need) != cudaSuccess) ws = NULL;
            } else
#endif
                ws = malloc(need);
            jattn_exec small = e;
            small.workspace = ws;
            small.workspace_bytes = own - 64; /* the reported size carries up to 63 bytes of alignment slack */
            tensor_poison(&bc.dq), tensor_poison(&bc.dk), tensor_poison(&bc.dv);
            st = jattn_backward(NULL, &p, &g, &small, q, k, v, out, lse, dout, dlse, NULL, dq, dk, dv);
            all &= jt_expect_status(st, JATTN_ERROR_WORKSPACE_TOO_SMALL, "workspace 64 bytes short") &&
                   strstr(jattn_last_error(), "jattn_backward_workspace_size") && untouched(&bc.dq);
            small.workspace_bytes = need;
            bc.hash = inputs_hash(&bc);
            st = bcase_run(&bc, &small, NULL);
            all &= jt_expect_status(st, JATTN_OK, "workspace of the reported size") &&
                   bcase_check(&bc, "caller workspace", JT_NORMAL);
#ifdef JATTN_TEST_BACKWARD_CUDA
            if (backend == JATTN_BACKEND_CUDA)
                (void)cudaFree(ws);
            else
#endif
                free(ws);
        }
    }
    /* select */
    {
        jattn_selection sel;
        all &= jt_expect_status(jattn_backward_select(&p, &e, NULL), JATTN_ERROR_NULL_POINTER, "selection NULL");
        all &= jt_expect_status(jattn_backward_select(&p, &e, &sel), JATTN_OK, "jattn_backward_select");
        if (sel.backend != backend || !sel.kernel || (!strstr(sel.kernel, "bwd") && !strstr(sel.kernel, "backward"))) {
            printf("FAIL jattn_backward_select: backend %d kernel %s\n", (int)sel.backend,
                   sel.kernel ? sel.kernel : "?");
            all = 0;
        }
        /* the cuda backward from another backend's test: it runs (a GPU), or says why not, and
         * then writes nothing */
        jattn_exec cuda = e;
        cuda.backend = JATTN_BACKEND_CUDA;
        jattn_status st = jattn_backward_select(&p, &cuda, &sel);
        if (st != JATTN_OK && st != JATTN_ERROR_UNSUPPORTED && st != JATTN_ERROR_BACKEND_UNAVAILABLE) {
            printf("FAIL cuda backward select: %s (%s), want ok, unsupported or unavailable\n", jattn_status_name(st),
                   jattn_last_error());
            all = 0;
        }
        tensor_poison(&bc.dq);
        st = jattn_backward(NULL, &p, &g, &cuda, q, k, v, out, lse, dout, dlse, NULL, dq, dk, dv);
        all &= st == JATTN_OK ||
               ((st == JATTN_ERROR_UNSUPPORTED || st == JATTN_ERROR_BACKEND_UNAVAILABLE) && untouched(&bc.dq));
        /* device memory: the cuda backend takes it, the host backends refuse it */
        jattn_exec device = e;
        device.memory = JATTN_MEMORY_DEVICE;
        all &= jt_expect_status(jattn_backward_select(&p, &device, &sel),
                                backend == JATTN_BACKEND_CUDA ? JATTN_OK : JATTN_ERROR_UNSUPPORTED, "device memory");
    }
    if (all && getenv("JATTN_TEST_VERBOSE")) printf("ok   validation: %d error cases and the workspace\n", n);
    jt_tally_add(tally, all);
    bcase_free(&bc);
}

/* The tf32 precision (opt-in): every gradient within rel_l2 JATTN_GATE_TF32_REL_L2 of the float64
 * reference, written everywhere, finite, on the FLUX-layout shapes the backend takes, the four
 * distributions, with and without key padding. */
static void part_tf32(jt_rng *r, jt_tally *tally) {
    static const int64_t dims[][5] = {{1, 2, 40, 40, 128}, {1, 1, 127, 129, 64}, {2, 3, 65, 33, 64},
                                      {1, 2, 65, 65, 80},  {1, 1, 100, 77, 1},   {1, 2, 200, 1, 128},
                                      {1, 2, 50, 70, 3},   {1, 1, 90, 60, 8},    {1, 1, 40, 50, 200}};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        jattn_problem p = jattn_problem_flux(dims[t][0], dims[t][1], dims[t][2], dims[t][3], dims[t][4]);
        jattn_grad_strides g = jattn_grad_strides_like(&p);
        int64_t kv_len[2] = {dims[t][3] / 2 + 1, dims[t][3]};
        jattn_key_padding kp = {kv_len, NULL, 0, 0, 0};
        const jattn_key_padding *pad = t == 2 ? &kp : NULL;
        bcase bc;
        if (bcase_init(&bc, &p, &g, (int)(t % 2)) != 0) {
            printf("FAIL allocation\n");
            jt_tally_add(tally, 0);
            bcase_free(&bc);
            continue;
        }
        for (int d = 0; d < JT_DIST_COUNT; d++) {
            jattn_exec e = {0};
            e.backend = backend;
            e.precision = JATTN_PRECISION_TF32;
            jattn_status st = bcase_fill(&bc, (jt_dist)d, r, JATTN_BACKEND_REF, pad);
            if (st == JATTN_OK) st = bcase_run(&bc, &e, pad);
            if (refused_as_documented(st, &p, bc.c.label)) break;
            if (st != JATTN_OK) {
                printf("FAIL tf32 %s: %s: %s\n", bc.c.label, jattn_status_name(st), jattn_last_error());
                jt_tally_add(tally, 0);
                continue;
            }
            const tensor *ts[3] = {&bc.dq, &bc.dk, &bc.dv};
            const float *refs[3] = {bc.ref.dq, bc.ref.dk, bc.ref.dv};
            int ok = 1;
            char line[512];
            int len = snprintf(line, sizeof line, "%s %s tf32", bc.c.label, jt_dist_name((jt_dist)d));
            for (int k = 0; k < 3; k++) {
                const int64_t n = p.batch * ts[k]->heads * ts[k]->seq * p.head_dim;
                float *dense = malloc((size_t)n * sizeof *dense);
                if (!dense) {
                    ok = 0;
                    break;
                }
                gather(&p, ts[k], dense);
                jattn_metrics m;
                jattn_metrics_compute_dense(dense, refs[k], n, &m);
                int64_t unwritten = 0;
                for (int64_t i = 0; i < n; i++) unwritten += is_poison(dense[i]);
                const int pass = m.rel_l2 <= JATTN_GATE_TF32_REL_L2 && !m.nonfinite && !unwritten;
                ok &= pass;
                if (len < (int)sizeof line)
                    len += snprintf(line + len, sizeof line - (size_t)len, " | d%c rel_l2 %.3g%s", "qkv"[k], m.rel_l2,
                                    pass ? "" : " [FAIL]");
                free(dense);
            }
            if (!ok || getenv("JATTN_TEST_VERBOSE"))
                printf("%s %s (gate rel_l2 %g; seed %llu)\n", ok ? "ok  " : "FAIL", line, JATTN_GATE_TF32_REL_L2,
                       (unsigned long long)jt_seed());
            jt_tally_add(tally, ok);
        }
        bcase_free(&bc);
    }
}

#ifdef JATTN_TEST_BACKWARD_CUDA
/* The first differing element of two gradient tensors (for a failure message), or -1. */
static int64_t first_difference(const tensor *a, const tensor *b) {
    for (int64_t i = 0; i < a->n; i++)
        if (memcmp(&a->base[i], &b->base[i], sizeof(float)) != 0) return i;
    return -1;
}

/* A backward captured into a CUDA graph (replayed twice) against a direct call: bit-identical,
 * and within the gate; with and without key padding, f32 and the precision asked. */
static void part_graph(jt_rng *r, jt_tally *tally, jattn_precision precision) {
    static const int64_t dims[][5] = {{1, 3, 150, 200, 128}, {2, 2, 97, 61, 64}, {1, 2, 70, 90, 40}};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        jattn_problem p = jattn_problem_flux(dims[t][0], dims[t][1], dims[t][2], dims[t][3], dims[t][4]);
        jattn_grad_strides g = jattn_grad_strides_like(&p);
        int64_t kv_len[2] = {dims[t][3] - 7, dims[t][3] / 2};
        jattn_key_padding kp = {kv_len, NULL, 0, 0, 0};
        const jattn_key_padding *pad = t == 1 ? &kp : NULL;
        bcase a;
        if (bcase_init(&a, &p, &g, 1) != 0 ||
            bcase_fill(&a, (jt_dist)(t % JT_DIST_COUNT), r, JATTN_BACKEND_REF, pad) != JATTN_OK) {
            printf("FAIL graph setup\n");
            jt_tally_add(tally, 0);
            bcase_free(&a);
            continue;
        }
        jattn_exec e = {0};
        e.backend = backend;
        e.precision = precision;
        tensor direct[3];
        tensor *grads[3] = {&a.dq, &a.dk, &a.dv};
        device_pointers = 1;
        int ok = bcase_run(&a, &e, pad) == JATTN_OK;
        device_pointers = 0;
        for (int k = 0; k < 3; k++) {
            direct[k] = *grads[k];
            direct[k].base = malloc((size_t)grads[k]->n * sizeof(float));
            memcpy(direct[k].base, grads[k]->base, (size_t)grads[k]->n * sizeof(float));
        }
        tensor_poison(&a.dq), tensor_poison(&a.dk), tensor_poison(&a.dv);
        a.mask_in_use = pad_mask(pad, &a.pad_scratch);
        jattn_status st = ok ? bcase_run_device(&a, &e, pad, 1) : JATTN_ERROR_CUDA;
        if (st != JATTN_OK) {
            printf("FAIL graph %s: %s: %s\n", a.c.label, jattn_status_name(st), jattn_last_error());
            ok = 0;
        }
        for (int k = 0; k < 3 && ok; k++) {
            const int64_t at_ = first_difference(&direct[k], grads[k]);
            if (at_ >= 0) {
                printf("FAIL graph %s: gradient %d differs from the direct call at element %lld (%.9g vs %.9g)\n",
                       a.c.label, k, (long long)(at_ - GUARD), grads[k]->base[at_], direct[k].base[at_]);
                ok = 0;
            }
        }
        if (ok && precision == JATTN_PRECISION_F32) ok = bcase_check(&a, "graph", (jt_dist)(t % JT_DIST_COUNT));
        if (ok && getenv("JATTN_TEST_VERBOSE"))
            printf("ok   graph %s: replay bit-identical to the direct call\n", a.c.label);
        for (int k = 0; k < 3; k++) free(direct[k].base);
        jt_tally_add(tally, ok);
        bcase_free(&a);
    }
}
#endif

int main(int argc, char **argv) {
    const char *part = argc > 2 ? argv[2] : "all";
    if (jt_backend_arg(
            argc, argv, "cpu", 1,
            "[gate|chain|floor|padding|fewq|fd|properties|masks|validation|determinism|tf32|device|graph|all]",
            &backend))
        return 2;
    const char *name = jattn_backend_name(backend);
    jattn_problem probe = jattn_problem_flux(1, 1, 8, 8, 64);
    jattn_exec pe = {0};
    pe.backend = backend;
    jattn_selection sel;
    if (jattn_backward_select(&probe, &pe, &sel) != JATTN_OK) {
        printf("SKIP: backend %s has no backward here: %s\n", name, jattn_last_error());
        return JT_SKIP;
    }
    if (backend == JATTN_BACKEND_AUTO) backend = sel.backend;
    printf("backward on %s: %s (%s)\n", sel.backend_name, sel.kernel, sel.isa);
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0xB4C3A11D5EEDull ^ (uint64_t)backend);
    jt_tally tally = {0};
    const int all = strcmp(part, "all") == 0;
    if (all || !strcmp(part, "gate")) part_gate(&rng, &tally, JATTN_BACKEND_REF, 1);
    if ((all && backend != JATTN_BACKEND_REF) || !strcmp(part, "chain")) part_gate(&rng, &tally, backend, 33);
    if (all || !strcmp(part, "floor")) part_floor(&rng, &tally);
    if (all || !strcmp(part, "padding")) part_padding(&rng, &tally);
    if (all || !strcmp(part, "fewq")) part_fewq(&rng, &tally);
    if ((all && backend == JATTN_BACKEND_REF) || !strcmp(part, "fd")) part_fd(&rng, &tally);
    if (all || !strcmp(part, "properties")) {
        part_scaling(&rng, &tally);
        part_permutation(&rng, &tally);
        part_masked_nan(&rng, &tally);
    }
    if (all || !strcmp(part, "validation")) part_validation(&rng, &tally);
    if (all || !strcmp(part, "masks")) {
        part_masks(&rng, &tally);
        part_masks_determinism(&rng, &tally);
        part_masks_nonfinite(&rng, &tally);
    }
    if (all || !strcmp(part, "determinism")) part_determinism(&rng, &tally);
    if ((all && jt_backend_takes_tf32(backend, 1)) || !strcmp(part, "tf32")) part_tf32(&rng, &tally);
#ifdef JATTN_TEST_BACKWARD_CUDA
    if (backend == JATTN_BACKEND_CUDA && (all || !strcmp(part, "device"))) {
        device_pointers = 1;
        part_gate(&rng, &tally, JATTN_BACKEND_REF, 1);
        part_fewq(&rng, &tally);
        part_padding(&rng, &tally);
        part_scaling(&rng, &tally);
        device_pointers = 0;
    }
    if (backend == JATTN_BACKEND_CUDA && (all || !strcmp(part, "graph"))) part_graph(&rng, &tally, JATTN_PRECISION_F32);
#endif
    for (int d = 0; d < JT_DIST_COUNT; d++)
        if (worst_rel[d] > 0)
            printf("worst rel_l2 %-7s %.3g (%.2f of the gate)\n", jt_dist_name((jt_dist)d), worst_rel[d],
                   worst_fraction[d]);
    char title[64];
    snprintf(title, sizeof title, "test_backward %s %s", name, part);
    return jt_tally_finish(&tally, title);
}
