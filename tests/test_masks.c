/* Masks and grouped-query heads (jattn_mask, jattn_problem.kv_heads): one backend's forward
 * against the float64 reference applying the same mask, over a table of shapes and of mask
 * combinations (causal in both alignments, block-causal, segments, key bias, key padding, grouped
 * and multi-query heads), each drawn fresh from the four input distributions.
 *
 * The test holds its own definition of the mask (attends(), bias_of(): written from jattn.h, not
 * from the library's window code), and with it:
 *   - the ref backend (the oracle) is checked against a long-double dense evaluation (part
 *     `oracle`, run when BACKEND is ref);
 *   - every other backend is checked against the ref backend (part `parity`): every output
 *     element within the f32 gate, lse within its gate, rows with no attended key +0 with lse
 *     -inf, and the k and v rows of keys that no query attends set to NaN, so a backend that reads
 *     them or lets them reach an output fails;
 *   - problems with a zero dimension get PyTorch's answer, NULL pointers for tensors without
 *     elements (part `empty`, forward and, where the backend has one, backward);
 *   - plans (jattn_plan_create): the selection is what runs, bit for bit what the one-call function
 *     gives; a run whose mask differs in structure, or of the other pass, is refused; a plan's
 *     alignment assumption is enforced (part `plans`).
 *
 * usage: test_masks BACKEND [all|oracle|parity|empty|plans]   (exits 77 when the backend is absent)
 * With JATTN_CUDA_KERNEL set (a forced cuda kernel: tests/cuda.cmake) the problems it refuses are left out.
 * The backward of masked problems is tested by tests/test_backward.c (part `masks`). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---- a mask, described independently of the library ---------------------------------------- */

enum { MAX_B = 3, MAX_PARTS = 6 };

typedef enum bias_kind { BIAS_NONE, BIAS_BATCH, BIAS_HEAD, BIAS_BROADCAST } bias_kind;
typedef enum pad_kind { PAD_NONE, PAD_LEN, PAD_MASK } pad_kind;

typedef struct mask_spec {
    jattn_causal causal;
    int blocks;      /* number of blocks, 0: none */
    int segments;    /* number of segments, 0: none */
    int seg_batched; /* one row of segment offsets per batch */
    bias_kind bias;
    pad_kind pad;
} mask_spec;

typedef struct mask_data {
    mask_spec spec;
    int64_t B, H, Hkv, Sq, Skv;
    int64_t block_q[MAX_PARTS + 1], block_kv[MAX_PARTS + 1];
    int64_t seg_q[MAX_B][MAX_PARTS + 1], seg_kv[MAX_B][MAX_PARTS + 1];
    int64_t kv_len[MAX_B];
    uint8_t *key_mask; /* [B, Skv] */
    float *bias;       /* [B, H, Skv] dense (the call reads it at the spec's strides) */
    jattn_mask m;      /* the library's description of the same mask */
} mask_data;

/* Sorted cut points: n + 1 offsets from 0 to `last` (some parts may be empty). */
static void random_offsets(int64_t *o, int n, int64_t last, jt_rng *r) {
    o[0] = 0;
    o[n] = last;
    for (int i = 1; i < n; i++) o[i] = (int64_t)(jt_uniform(r) * (double)(last + 1));
    for (int i = 1; i < n; i++) /* insertion sort of the inner cuts */
        for (int j = i; j > 1 && o[j] < o[j - 1]; j--) {
            int64_t t = o[j];
            o[j] = o[j - 1];
            o[j - 1] = t;
        }
}

/* The segment of query i in batch b, or -1 (past the last segment). */
static int segment_of(const mask_data *md, int64_t b, int64_t i) {
    const int64_t *sq = md->seg_q[md->spec.seg_batched ? b : 0];
    for (int s = 0; s < md->spec.segments; s++)
        if (sq[s] <= i && i < sq[s + 1]) return s;
    return -1;
}

static float bias_of(const mask_data *md, int64_t b, int64_t h, int64_t j) {
    return md->bias ? md->bias[(b * md->H + h) * md->Skv + j] : 0.0f;
}

/* Whether query row i of (b, h) attends key j: every part of jattn.h's definition, written out. */
static int attends(const mask_data *md, int64_t b, int64_t h, int64_t i, int64_t j) {
    const mask_spec *s = &md->spec;
    int64_t t = i, u = j, len_q = md->Sq, len_k = md->Skv;
    if (s->segments) {
        const int seg = segment_of(md, b, i);
        if (seg < 0) return 0;
        const int64_t *sq = md->seg_q[s->seg_batched ? b : 0], *sk = md->seg_kv[s->seg_batched ? b : 0];
        if (j < sk[seg] || j >= sk[seg + 1]) return 0;
        t = i - sq[seg];
        u = j - sk[seg];
        len_q = sq[seg + 1] - sq[seg];
        len_k = sk[seg + 1] - sk[seg];
    }
    if (s->causal == JATTN_CAUSAL_TOP_LEFT && u > t) return 0;
    if (s->causal == JATTN_CAUSAL_BOTTOM_RIGHT && u > t + len_k - len_q) return 0;
    if (s->blocks) {
        int a = -1, c = -1;
        for (int x = 0; x < s->blocks; x++) {
            if (md->block_q[x] <= i && i < md->block_q[x + 1]) a = x;
            if (md->block_kv[x] <= j && j < md->block_kv[x + 1]) c = x;
        }
        if (c > a) return 0;
    }
    if (s->pad == PAD_LEN && j >= md->kv_len[b]) return 0;
    if (s->pad == PAD_MASK && !md->key_mask[b * md->Skv + j]) return 0;
    if (bias_of(md, b, h, j) == -INFINITY) return 0;
    return 1;
}

static void mask_free(mask_data *md) {
    free(md->key_mask);
    free(md->bias);
    memset(md, 0, sizeof *md);
}

/* Draws the arrays of a spec for problem p, and the jattn_mask describing them. */
static int mask_make(mask_data *md, const mask_spec *spec, const jattn_problem *p, jt_rng *r) {
    memset(md, 0, sizeof *md);
    md->spec = *spec;
    md->B = p->batch;
    md->H = p->heads;
    md->Hkv = p->kv_heads ? p->kv_heads : p->heads;
    md->Sq = p->seq_q;
    md->Skv = p->seq_kv;
    jattn_mask *m = &md->m;
    m->causal = spec->causal;
    if (spec->blocks) {
        random_offsets(md->block_q, spec->blocks, md->Sq, r);
        if (md->Sq == md->Skv && jt_uniform(r) < 0.7)
            memcpy(md->block_kv, md->block_q, sizeof md->block_kv);
        else
            random_offsets(md->block_kv, spec->blocks, md->Skv, r);
        m->block_q = md->block_q;
        m->block_kv = md->block_kv;
        m->num_blocks = spec->blocks;
    }
    if (spec->segments) {
        const int rows = spec->seg_batched ? (int)md->B : 1;
        for (int b = 0; b < rows; b++) {
            /* the last segment may end before the sequence: its tail attends (or is attended by) nothing */
            const int64_t end_q = jt_uniform(r) < 0.3 ? md->Sq - (int64_t)(jt_uniform(r) * (double)md->Sq / 4) : md->Sq;
            const int64_t end_k =
                jt_uniform(r) < 0.3 ? md->Skv - (int64_t)(jt_uniform(r) * (double)md->Skv / 4) : md->Skv;
            random_offsets(md->seg_q[b], spec->segments, end_q, r);
            if (md->Sq == md->Skv && end_q == end_k && jt_uniform(r) < 0.6)
                memcpy(md->seg_kv[b], md->seg_q[b], sizeof md->seg_kv[b]);
            else
                random_offsets(md->seg_kv[b], spec->segments, end_k, r);
        }
        m->cu_seqlens_q = md->seg_q[0];
        m->cu_seqlens_kv = md->seg_kv[0];
        m->num_segments = spec->segments;
        m->segments_batch_stride = spec->seg_batched ? MAX_PARTS + 1 : 0;
    }
    if (spec->bias != BIAS_NONE) {
        md->bias = malloc((size_t)(md->B * md->H * md->Skv) * sizeof(float));
        if (!md->bias) return -1;
        /* one row per (b, h) of the spec's extent, repeated over the broadcast dimensions */
        for (int64_t b = 0; b < md->B; b++)
            for (int64_t h = 0; h < md->H; h++)
                for (int64_t j = 0; j < md->Skv; j++) {
                    const int64_t bb = spec->bias == BIAS_BROADCAST ? 0 : b, hh = spec->bias == BIAS_HEAD ? h : 0;
                    float *x = &md->bias[(b * md->H + h) * md->Skv + j];
                    if (bb != b || hh != h) {
                        *x = md->bias[(bb * md->H + hh) * md->Skv + j];
                        continue;
                    }
                    const double u = jt_uniform(r);
                    *x = u < 0.08 ? -INFINITY : u < 0.16 ? -10000.0f : (float)(4.0 * jt_normal(r));
                }
        m->key_bias = md->bias;
        m->key_bias_batch_stride = spec->bias == BIAS_BROADCAST ? 0 : md->H * md->Skv;
        m->key_bias_head_stride = spec->bias == BIAS_HEAD ? md->Skv : 0;
    }
    if (spec->pad == PAD_LEN) {
        for (int64_t b = 0; b < md->B; b++) md->kv_len[b] = (int64_t)(jt_uniform(r) * (double)(md->Skv + 1));
        m->padding.kv_len = md->kv_len;
    } else if (spec->pad == PAD_MASK) {
        md->key_mask = malloc((size_t)(md->B * md->Skv));
        if (!md->key_mask) return -1;
        for (int64_t x = 0; x < md->B * md->Skv; x++) md->key_mask[x] = jt_uniform(r) < 0.7;
        m->padding.mask = md->key_mask;
        m->padding.mask_batch = md->B;
        m->padding.mask_keys = md->Skv;
    }
    return 0;
}

static void describe(const mask_data *md, char *label, size_t cap) {
    static const char *const causal[] = {"", " causal", " causal-br"};
    static const char *const bias[] = {"", " bias-b", " bias-bh", " bias-1"};
    static const char *const pad[] = {"", " kv_len", " key-mask"};
    const size_t len = strlen(label);
    snprintf(label + len, cap - len, " Hkv=%lld%s%s%s%s%s%s", (long long)md->Hkv, causal[md->spec.causal],
             md->spec.blocks ? " blocks" : "", md->spec.segments ? " segments" : "",
             md->spec.seg_batched ? "-per-batch" : "", bias[md->spec.bias], pad[md->spec.pad]);
}

/* ---- the cases ------------------------------------------------------------------------- */

typedef struct shape {
    int64_t B, H, Hkv, Sq, Skv, D;
    int token_major;
} shape;

static const shape shapes[] = {
    {2, 4, 2, 33, 33, 64, 0},    {1, 6, 1, 70, 70, 128, 1},  {2, 2, 2, 65, 130, 32, 0}, {1, 3, 3, 130, 40, 16, 1},
    {2, 4, 4, 1, 50, 64, 0},     {1, 2, 1, 200, 200, 80, 0}, {2, 2, 2, 17, 17, 1, 1},   {1, 8, 2, 128, 128, 128, 0},
    {1, 2, 2, 150, 150, 256, 0}, {3, 2, 1, 64, 64, 72, 1},
};

static const mask_spec specs[] = {
    {JATTN_CAUSAL_NONE, 0, 0, 0, BIAS_NONE, PAD_NONE},         /* grouped heads alone */
    {JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, BIAS_NONE, PAD_NONE},     /* PyTorch's is_causal */
    {JATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, BIAS_NONE, PAD_NONE}, /* FlashAttention's */
    {JATTN_CAUSAL_NONE, 3, 0, 0, BIAS_NONE, PAD_NONE},         /* block-causal */
    {JATTN_CAUSAL_NONE, 0, 3, 0, BIAS_NONE, PAD_NONE},         /* packed sequences */
    {JATTN_CAUSAL_BOTTOM_RIGHT, 0, 4, 1, BIAS_NONE, PAD_NONE}, /* varlen causal, per batch */
    {JATTN_CAUSAL_NONE, 0, 0, 0, BIAS_BATCH, PAD_NONE},        /* a text encoder's float mask */
    {JATTN_CAUSAL_NONE, 0, 0, 0, BIAS_HEAD, PAD_NONE},
    {JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, BIAS_BROADCAST, PAD_LEN},
    {JATTN_CAUSAL_NONE, 5, 0, 0, BIAS_NONE, PAD_MASK},
    {JATTN_CAUSAL_TOP_LEFT, 0, 2, 1, BIAS_BROADCAST, PAD_NONE},
    {JATTN_CAUSAL_BOTTOM_RIGHT, 2, 3, 0, BIAS_HEAD, PAD_MASK}, /* every part at once */
};

static jattn_problem make_problem(const shape *s) {
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
    return p;
}

/* The k and v rows of keys no query row attends become NaN. */
static void poison_unattended(jt_case *c, const mask_data *md) {
    const jattn_problem *p = &c->p;
    const int64_t group = md->H / md->Hkv;
    for (int64_t b = 0; b < md->B; b++)
        for (int64_t hk = 0; hk < md->Hkv; hk++)
            for (int64_t j = 0; j < md->Skv; j++) {
                int any = 0;
                for (int64_t h = hk * group; h < (hk + 1) * group && !any; h++)
                    for (int64_t i = 0; i < md->Sq && !any; i++) any = attends(md, b, h, i, j);
                if (any) continue;
                for (int64_t d = 0; d < p->head_dim; d++) {
                    c->k[b * p->k.batch + hk * p->k.head + j * p->k.token + d] = NAN;
                    c->v[b * p->v.batch + hk * p->v.head + j * p->v.token + d] = NAN;
                }
            }
    jt_case_seal(c);
}

/* Rows with no attended key: +0 everywhere and (with lse) lse -inf. */
static int empty_rows_ok(const jt_case *c, const mask_data *md, int want_lse) {
    const jattn_problem *p = &c->p;
    for (int64_t b = 0; b < md->B; b++)
        for (int64_t h = 0; h < md->H; h++)
            for (int64_t i = 0; i < md->Sq; i++) {
                int any = 0;
                for (int64_t j = 0; j < md->Skv && !any; j++) any = attends(md, b, h, i, j);
                if (any) continue;
                const float *o = c->out + b * p->out.batch + h * p->out.head + i * p->out.token;
                for (int64_t d = 0; d < p->head_dim; d++)
                    if (o[d] != 0.0f || signbit(o[d])) {
                        printf("FAIL %s: row b=%lld h=%lld i=%lld attends no key: out[%lld] = %g, want +0\n", c->label,
                               (long long)b, (long long)h, (long long)i, (long long)d, (double)o[d]);
                        return 0;
                    }
                const float l = c->lse[(b * md->H + h) * md->Sq + i];
                if (want_lse && !(isinf(l) && l < 0)) {
                    printf("FAIL %s: row b=%lld h=%lld i=%lld attends no key: lse %g, want -inf\n", c->label,
                           (long long)b, (long long)h, (long long)i, (double)l);
                    return 0;
                }
            }
    return 1;
}

/* The reference against a long-double dense evaluation of the test's own mask definition. */
static int oracle_ok(const jt_case *c, const mask_data *md) {
    const jattn_problem *p = &c->p;
    const int64_t D = p->head_dim, group = md->H / md->Hkv;
    const long double scale = p->scale > 0 ? p->scale : 1.0L / sqrtl((long double)D);
    long double *s = malloc((size_t)md->Skv * sizeof *s);
    float *dense = malloc((size_t)(md->B * md->H * md->Sq * D) * sizeof *dense);
    float *dense_ref = malloc((size_t)(md->B * md->H * md->Sq * D) * sizeof *dense_ref);
    int ok = s && dense && dense_ref;
    for (int64_t b = 0; ok && b < md->B; b++)
        for (int64_t h = 0; h < md->H; h++)
            for (int64_t i = 0; i < md->Sq; i++) {
                const int64_t hk = h / group;
                const float *qi = c->q + b * p->q.batch + h * p->q.head + i * p->q.token;
                long double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < md->Skv; j++) {
                    if (!attends(md, b, h, i, j)) continue;
                    const float *kj = c->k + b * p->k.batch + hk * p->k.head + j * p->k.token;
                    long double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += (long double)qi[d] * kj[d];
                    s[j] = scale * dot + bias_of(md, b, h, j);
                    if (s[j] > mx) mx = s[j];
                }
                float *o = dense + ((b * md->H + h) * md->Sq + i) * D;
                const float *r = c->ref + b * p->out.batch + h * p->out.head + i * p->out.token;
                memcpy(dense_ref + ((b * md->H + h) * md->Sq + i) * D, r, (size_t)D * sizeof *r);
                for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
                if (mx == -INFINITY) continue;
                long double acc[256] = {0};
                for (int64_t j = 0; j < md->Skv; j++) {
                    if (!attends(md, b, h, i, j)) continue;
                    const long double w = expl(s[j] - mx);
                    sum += w;
                    const float *vj = c->v + b * p->v.batch + hk * p->v.head + j * p->v.token;
                    for (int64_t d = 0; d < D; d++) acc[d] += w * vj[d];
                }
                for (int64_t d = 0; d < D; d++) o[d] = (float)(acc[d] / sum);
            }
    if (ok) {
        jattn_metrics m;
        jattn_metrics_compute_dense(dense_ref, dense, md->B * md->H * md->Sq * D, &m);
        ok = jattn_metrics_pass(&m, JATTN_PRECISION_F32) && m.nonfinite == 0;
        if (!ok)
            printf("FAIL %s: the reference against long double: rel_l2 %.3g max_abs %.3g nonfinite %lld (seed %llu)\n",
                   c->label, m.rel_l2, m.max_abs, (long long)m.nonfinite, (unsigned long long)jt_seed());
    }
    free(s);
    free(dense);
    free(dense_ref);
    return ok;
}

static int part_masks(jattn_backend backend, int oracle, jt_rng *r, jt_tally *tally) {
    const int n_prec = !oracle && jt_backend_takes_tf32(backend, 0) ? 2 : 1;
    const jattn_precision precisions[2] = {JATTN_PRECISION_F32, JATTN_PRECISION_TF32};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t mi = 0; mi < sizeof specs / sizeof specs[0]; mi++) {
            const shape *s = &shapes[si];
            if (s->D > 256 || (oracle && s->Sq * s->Skv * s->H > 60000 && mi % 2)) continue;
            jattn_problem p = make_problem(s);
            jt_case c;
            if (jt_case_init(&c, &p) != 0) {
                printf("FAIL allocation\n");
                jt_tally_add(tally, 0);
                continue;
            }
            mask_data md;
            if (mask_make(&md, &specs[mi], &p, r) != 0) {
                printf("FAIL allocation of a mask\n");
                jt_tally_add(tally, 0);
                jt_case_free(&c);
                continue;
            }
            const size_t len = strlen(c.label);
            snprintf(c.label + len, sizeof c.label - len, "%s", s->token_major ? " token-major" : " flux");
            describe(&md, c.label, sizeof c.label);
            c.mask = &md.m;
            jt_case_fill(&c, (jt_dist)((si + mi) % JT_DIST_COUNT), r);
            poison_unattended(&c, &md);
            if (jt_case_reference(&c) != JATTN_OK) {
                printf("FAIL reference %s: %s\n", c.label, jattn_last_error());
                jt_tally_add(tally, 0);
            } else if (oracle) {
                jt_tally_add(tally, oracle_ok(&c, &md));
            } else {
                for (int pi = 0; pi < n_prec; pi++) {
                    jattn_exec e = {0};
                    e.backend = backend;
                    e.precision = precisions[pi];
                    const int want_lse = (int)((si + mi + (size_t)pi) % 2);
                    /* a kernel forced by the environment (tests/cuda.cmake: JATTN_CUDA_KERNEL) runs the problems
                     * it takes; the others are left to its own limits' tests */
                    if (getenv("JATTN_CUDA_KERNEL") &&
                        !strcmp(jt_plan_kernel(JATTN_PASS_FORWARD, &c.p, &md.m, &e), "refused"))
                        continue;
                    int ok = jt_case_check(&c, &e, want_lse);
                    jt_tally_add(tally, ok && empty_rows_ok(&c, &md, want_lse));
                }
            }
            mask_free(&md);
            jt_case_free(&c);
        }
    return 0;
}

/* ---- zero-size problems --------------------------------------------------------------------- */

static int part_empty(jattn_backend backend, jt_tally *tally) {
    jattn_backend_info info;
    const int has_backward = jt_backend_info(backend, &info) && info.has_backward;
    const int64_t dims[][4] = {{0, 2, 5, 6}, {2, 0, 5, 6}, {2, 3, 0, 6}, {2, 3, 5, 0}, {1, 1, 0, 0}};
    enum { D = 8, CAP = 2 * 3 * 6 * D };
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        jattn_problem p = jattn_problem_flux(dims[t][0], dims[t][1], dims[t][2], dims[t][3], D);
        jattn_exec e = {0};
        e.backend = backend;
        const int no_q = p.batch * p.heads * p.seq_q == 0, no_kv = p.batch * p.heads * p.seq_kv == 0;
        static float q[CAP], k[CAP], v[CAP], out[CAP], lse[CAP], dout[CAP], dq[CAP], dk[CAP], dv[CAP];
        for (int i = 0; i < CAP; i++)
            q[i] = k[i] = v[i] = dout[i] = 0.25f, out[i] = lse[i] = dq[i] = dk[i] = dv[i] = NAN;
        char what[96];
        snprintf(what, sizeof what, "empty B=%lld H=%lld Sq=%lld Skv=%lld backend=%s", (long long)p.batch,
                 (long long)p.heads, (long long)p.seq_q, (long long)p.seq_kv, jattn_backend_name(backend));
        /* tensors without elements are passed as NULL */
        jattn_status st = jattn_forward(NULL, &p, &e, no_q ? NULL : q, no_kv ? NULL : k, no_kv ? NULL : v,
                                        no_q ? NULL : out, no_q ? NULL : lse);
        int ok = jt_expect_status(st, JATTN_OK, what);
        const int64_t n_out = p.batch * p.heads * p.seq_q * D, n_lse = p.batch * p.heads * p.seq_q;
        for (int64_t i = 0; ok && i < CAP; i++) /* with no key: 0 rows and lse -inf; nothing else written */
            ok = i < n_out ? out[i] == 0.0f && !signbit(out[i]) : isnan(out[i]);
        for (int64_t i = 0; ok && i < CAP; i++) ok = i < n_lse ? isinf(lse[i]) && lse[i] < 0 : isnan(lse[i]);
        if (!ok && st == JATTN_OK) printf("FAIL %s: the forward's answer\n", what);
        if (ok && has_backward) {
            for (int i = 0; i < n_lse; i++) lse[i] = -INFINITY;
            st = jattn_backward(NULL, &p, NULL, &e, no_q ? NULL : q, no_kv ? NULL : k, no_kv ? NULL : v,
                                no_q ? NULL : out, no_q ? NULL : lse, no_q ? NULL : dout, NULL, NULL, no_q ? NULL : dq,
                                no_kv ? NULL : dk, no_kv ? NULL : dv);
            ok = jt_expect_status(st, JATTN_OK, what);
            const int64_t n_kv = p.batch * p.heads * p.seq_kv * D;
            for (int64_t i = 0; ok && i < CAP; i++) /* dq 0 with no key; dk, dv 0 with no query */
                ok = (i < n_out ? dq[i] == 0.0f && !signbit(dq[i]) : isnan(dq[i])) &&
                     (i < n_kv ? dk[i] == 0.0f && dv[i] == 0.0f && !signbit(dk[i]) : isnan(dk[i]) && isnan(dv[i]));
            if (!ok && st == JATTN_OK) printf("FAIL %s: the backward's answer\n", what);
        }
        jt_tally_add(tally, ok);
    }
    return 0;
}

/* ---- near-tied keys under a large key bias ---------------------------------------------------
 * Every key carries the bias -10000 (LTX's padded keys; rows where no other key is attended), and keys come
 * in near-duplicate pairs (k of the second = k of the first + 1e-4 noise): their logits, about -10000 plus
 * scale q.k, lie a few ten-thousandths apart, below a float's step at 10000 (~0.001), so a backend that rounds
 * the biased logit to one float, or orders a tie by its high part alone, weighs both keys alike where their
 * weights differ by ~1e-4 (the cpu backend did, src/cpu/JOURNAL.md §11). Causal rows: 1 to Sq keys each. */
static int part_ties(jattn_backend backend, jt_rng *r, jt_tally *tally) {
    static const int64_t dims[] = {32, 64, 128, 40};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        const int64_t H = 2, S = 48, D = dims[t];
        jattn_problem p = jattn_problem_flux(1, H, S, S, D);
        jt_case c;
        float *bias = malloc((size_t)S * sizeof *bias);
        if (!bias || jt_case_init(&c, &p) != 0) {
            printf("FAIL allocation\n");
            jt_tally_add(tally, 0);
            free(bias);
            return 0;
        }
        jt_case_fill(&c, JT_NORMAL, r);
        for (int64_t h = 0; h < H; h++) /* head-major k: key j + 1 a near copy of key j, j even */
            for (int64_t j = 0; j + 1 < S; j += 2)
                for (int64_t d = 0; d < D; d++) {
                    const int64_t at = (h * S + j) * D + d;
                    c.k[at + D] = c.k[at] + (float)(1e-4 * jt_normal(r));
                }
        jt_case_seal(&c);
        for (int64_t j = 0; j < S; j++) bias[j] = -10000.0f;
        jattn_mask m = {0};
        m.causal = JATTN_CAUSAL_TOP_LEFT;
        m.key_bias = bias; /* one row for every batch and head: strides 0 */
        c.mask = &m;
        snprintf(c.label, sizeof c.label, "ties B=1 H=%lld Sq=Skv=%lld D=%lld causal bias=-10000 near-duplicate keys",
                 (long long)H, (long long)S, (long long)D);
        jattn_exec e = {0};
        e.backend = backend;
        const int ok = jt_case_reference(&c) == JATTN_OK && jt_case_check(&c, &e, 1);
        jt_tally_add(tally, ok);
        jt_case_free(&c);
        free(bias);
    }
    return 0;
}

/* ---- plans ---------------------------------------------------------------------------------- */

static int part_plans(jattn_backend backend, jt_rng *r, jt_tally *tally) {
    const shape s = {2, 4, 2, 40, 40, 64, 0};
    jattn_problem p = make_problem(&s);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) return jt_tally_add(tally, 0), 0;
    mask_data md;
    const mask_spec spec = {JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, BIAS_BATCH, PAD_LEN};
    if (mask_make(&md, &spec, &p, r) != 0) {
        jt_case_free(&c);
        return jt_tally_add(tally, 0), 0;
    }
    jt_case_fill(&c, JT_NORMAL, r);
    jattn_exec e = {0};
    e.backend = backend;
    jattn_plan *plan = NULL;
    int ok = jt_expect_status(jattn_plan_create(&plan, JATTN_PASS_FORWARD, &c.p, NULL, &md.m, &e), JATTN_OK,
                              "plan_create (forward, masked)");
    const int64_t n_out = kit_tensor_span(&c.p, c.p.out, c.p.seq_q), n_lse = c.p.batch * c.p.heads * c.p.seq_q;
    float *out1 = calloc((size_t)n_out, sizeof(float)), *out2 = calloc((size_t)n_out, sizeof(float));
    float *lse1 = calloc((size_t)n_lse, sizeof(float)), *lse2 = calloc((size_t)n_lse, sizeof(float));
    ok = ok && out1 && out2 && lse1 && lse2;
    if (ok) {
        jattn_selection sel;
        ok &= jt_expect_status(jattn_plan_selection(plan, &sel), JATTN_OK, "plan_selection");
        ok &= sel.backend == backend && sel.kernel && sel.isa;
        ok &= jt_expect_status(jattn_forward_masked(NULL, &c.p, &e, c.q, c.k, c.v, &md.m, out1, lse1), JATTN_OK,
                               "forward_masked");
        /* a caller workspace where it is host memory (cpu, ref, vk); cuda's is device memory: none given */
        const size_t ws = backend == JATTN_BACKEND_CUDA ? 0 : jattn_plan_workspace_size(plan);
        void *w = ws ? malloc(ws) : NULL;
        /* two runs: the mask's arrays change between them (other lengths), the structure does not */
        for (int run = 0; run < 2 && ok; run++) {
            if (run) md.kv_len[0] = md.Skv / 2;
            jattn_status st = jattn_plan_forward(plan, NULL, NULL, w, ws, c.q, c.k, c.v, &md.m, out2, lse2);
            ok &= jt_expect_status(st, JATTN_OK, "plan_forward");
            if (run == 0 && ok &&
                (memcmp(out1, out2, (size_t)n_out * sizeof(float)) != 0 ||
                 memcmp(lse1, lse2, (size_t)n_lse * sizeof(float)) != 0)) {
                printf("FAIL plans: the plan's run differs from jattn_forward_masked's bits\n");
                ok = 0;
            }
        }
        free(w);
        /* a run whose mask differs in structure, and a run of the other pass, are refused */
        jattn_mask other = md.m;
        other.causal = JATTN_CAUSAL_NONE;
        ok &= jt_expect_status(jattn_plan_forward(plan, NULL, NULL, NULL, 0, c.q, c.k, c.v, &other, out2, NULL),
                               JATTN_ERROR_INVALID_ARGUMENT, "plan run with another mask structure");
        ok &= strstr(jattn_last_error(), "mask.causal") != NULL;
        ok &= jt_expect_status(jattn_plan_forward(plan, NULL, NULL, NULL, 0, c.q, c.k, c.v, NULL, out2, NULL),
                               JATTN_ERROR_INVALID_ARGUMENT, "plan run without its mask");
        ok &= jt_expect_status(jattn_plan_backward(plan, NULL, NULL, NULL, 0, c.q, c.k, c.v, out1, lse1, out1, NULL,
                                                   &md.m, out2, NULL, NULL),
                               JATTN_ERROR_INVALID_ARGUMENT, "a forward plan run as a backward");
        /* the alignment a plan assumes: 16 bytes by default; a 4-byte aligned pointer is refused by a
         * plan made for 16 and runs under a plan made for 4 */
        jattn_plan *plan4 = NULL;
        e.alignment = 4;
        ok &= jt_expect_status(jattn_plan_create(&plan4, JATTN_PASS_FORWARD, &c.p, NULL, &md.m, &e), JATTN_OK,
                               "plan_create (alignment 4)");
        float *shifted = kit_alloc_floats(n_out + 1);
        if (ok && shifted) {
            ok &=
                jt_expect_status(jattn_plan_forward(plan, NULL, NULL, NULL, 0, c.q, c.k, c.v, &md.m, shifted + 1, NULL),
                                 JATTN_ERROR_INVALID_ARGUMENT, "a 4-byte aligned out under a 16-byte plan");
            ok &= strstr(jattn_last_error(), "out") != NULL;
            ok &= jt_expect_status(
                jattn_plan_forward(plan4, NULL, NULL, NULL, 0, c.q, c.k, c.v, &md.m, shifted + 1, NULL), JATTN_OK,
                "a 4-byte aligned out under a 4-byte plan");
        }
        free(shifted);
        jattn_plan_free(plan4);
    }
    jattn_plan_free(plan);
    jattn_plan_free(NULL);
    ok &= jt_expect_status(jattn_plan_create(NULL, JATTN_PASS_FORWARD, &c.p, NULL, NULL, &e), JATTN_ERROR_NULL_POINTER,
                           "plan_create(NULL)");
    ok &= jattn_plan_workspace_size(NULL) == 0;
    if (!ok) printf("FAIL plans (backend %s)\n", jattn_backend_name(backend));
    jt_tally_add(tally, ok);
    free(out1);
    free(out2);
    free(lse1);
    free(lse2);
    mask_free(&md);
    jt_case_free(&c);
    return 0;
}

int main(int argc, char **argv) {
    jattn_backend backend;
    if (jt_backend_arg(argc, argv, "cpu", 1, "[all|oracle|parity|empty|plans|ties]", &backend)) return 2;
    const char *part = argc > 2 ? argv[2] : "all";
    const char *name = jattn_backend_name(backend);
    if (!jt_backend_present(backend)) {
        printf("SKIP: backend %s is not present in this build or on this machine\n", name);
        return JT_SKIP;
    }
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0x6d61736bu ^ (uint64_t)backend);
    jt_tally tally = {0};
    const int all = strcmp(part, "all") == 0;
    if ((all || strcmp(part, "oracle") == 0) && backend == JATTN_BACKEND_REF) part_masks(backend, 1, &rng, &tally);
    if ((all || strcmp(part, "parity") == 0) && backend != JATTN_BACKEND_REF) part_masks(backend, 0, &rng, &tally);
    if (all || strcmp(part, "empty") == 0) part_empty(backend, &tally);
    if (all || strcmp(part, "plans") == 0) part_plans(backend, &rng, &tally);
    if ((all || strcmp(part, "ties") == 0) && backend != JATTN_BACKEND_REF) part_ties(backend, &rng, &tally);
    char title[64];
    snprintf(title, sizeof title, "test_masks %s", name);
    return jt_tally_finish(&tally, title);
}
