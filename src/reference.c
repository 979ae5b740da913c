/* The reference backend: the oracle every other backend and every test is measured against.
 *
 * Plain scalar C, no intrinsics. For each query row it computes the whole score row in
 * float64 from the float32 inputs, a full-row max-subtracted softmax in float64, and the
 * output row in float64, rounding to float32 only when writing. Rows are independent, so
 * the OpenMP split over rows cannot change any result.
 *
 * Reads  q [B,H,Sq,D], k and v [B,Hkv,Skv,D] at any valid strides (head_dim contiguous); query
 * head h reads key/value head h / (H / Hkv).
 * Writes out [B,H,Sq,D] at its strides, and lse [B,H,Sq] contiguous when requested.
 * Masks (jattn_mask, every part): each row walks only its key window (segments, causal, blocks);
 * keys the key padding leaves out are skipped (never read); the key bias is added to the scaled
 * score in float64, and a -inf bias leaves its key out. A row with no key left gets 0, -inf.
 * Workspace: per thread, Skv + D doubles (the score row and the output accumulator).
 * The backward (jattn_backward) is below ref_forward. */
#include <math.h>
#include <string.h>

#include "backend.h"

static size_t ref_row_doubles(const jattn_problem *p) { return (size_t)p->seq_kv + (size_t)p->head_dim; }

static jattn_status ref_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    if (e->memory != JATTN_MEMORY_HOST)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "exec.memory: the ref backend reads host memory only");
    if (e->precision != JATTN_PRECISION_F32)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED,
                          "exec.precision: the ref backend computes f32 (float64 inside) only");
    if ((uint64_t)ref_row_doubles(p) > SIZE_MAX / sizeof(double) / 1024)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "seq_kv: %lld, too long for the ref backend's row buffer",
                          (long long)p->seq_kv);
    /* every mask and grouped-query heads: the reference is the oracle of each */
    plan->kernel = NULL; /* one kernel */
    plan->threads = jattn_resolve_threads(e->threads);
    plan->selection.kernel = "ref_attention_f64_rowwise";
    plan->selection.isa = "scalar";
    return JATTN_OK;
}

static size_t ref_workspace_size(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    return (size_t)plan->threads * ref_row_doubles(p) * sizeof(double);
}

/* Dot product of two float32 rows in float64, four partial sums in a fixed order. */
static double dot_f64(const float *a, const float *b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t d = 0;
    for (; d + 4 <= n; d += 4) {
        s0 += (double)a[d] * (double)b[d];
        s1 += (double)a[d + 1] * (double)b[d + 1];
        s2 += (double)a[d + 2] * (double)b[d + 2];
        s3 += (double)a[d + 3] * (double)b[d + 3];
    }
    for (; d < n; d++) s0 += (double)a[d] * (double)b[d];
    return (s0 + s1) + (s2 + s3);
}

/* Whether key j is attended by row (b, h) beyond its window: the key padding, and a bias that is
 * not -inf. */
static int ref_attends(const jattn_call *c, int64_t b, const float *bias, int64_t j) {
    return jattn_call_attends(c, b, j) && !(bias && bias[j] == -INFINITY);
}

/* The score of query row qi and key row kj: scale q.k in float64, plus the key's bias. */
static double ref_score(const float *qi, const float *kj, int64_t D, double scale, const float *bias, int64_t j) {
    return scale * dot_f64(qi, kj, D) + (bias ? (double)bias[j] : 0.0);
}

/* One query row: scores, softmax, output. `s` holds Skv doubles, `acc` D doubles. */
static void ref_row(const jattn_call *c, int64_t b, int64_t h, int64_t i, double *s, double *acc) {
    const jattn_problem *p = c->problem;
    const int64_t D = p->head_dim, hk = jattn_kv_head(p, h);
    const float *qi = c->q + b * p->q.batch + h * p->q.head + i * p->q.token;
    const float *kb = c->k + b * p->k.batch + hk * p->k.head;
    const float *vb = c->v + b * p->v.batch + hk * p->v.head;
    const float *bias = jattn_call_bias_row(c, b, h);
    const double scale = (double)c->scale;

    /* Keys outside the window or left out are never read: their k and v rows may hold anything. */
    int64_t lo, hi;
    jattn_call_key_window(c, b, i, &lo, &hi);
    double mx = -INFINITY;
    int64_t attended = 0;
    for (int64_t j = lo; j < hi; j++) {
        if (!ref_attends(c, b, bias, j)) continue;
        s[j] = ref_score(qi, kb + j * p->k.token, D, scale, bias, j);
        if (s[j] > mx) mx = s[j];
        attended++;
    }
    float *oi = c->out + b * p->out.batch + h * p->out.head + i * p->out.token;
    float *lse = c->lse ? c->lse + (b * p->heads + h) * p->seq_q + i : NULL;
    if (attended == 0) { /* no key to attend: a zero row and lse -inf (jattn.h) */
        for (int64_t d = 0; d < D; d++) oi[d] = 0.0f;
        if (lse) *lse = -INFINITY;
        return;
    }
    /* A NaN score, or an infinite max (inf - inf), makes the sum NaN: the row comes out NaN. */
    double sum = 0;
    for (int64_t j = lo; j < hi; j++) {
        if (!ref_attends(c, b, bias, j)) continue;
        s[j] = exp(s[j] - mx);
        sum += s[j];
    }
    memset(acc, 0, (size_t)D * sizeof *acc);
    for (int64_t j = lo; j < hi; j++) {
        if (!ref_attends(c, b, bias, j)) continue;
        const float *vj = vb + j * p->v.token;
        const double pj = s[j];
        for (int64_t d = 0; d < D; d++) acc[d] += pj * (double)vj[d];
    }
    const double inv = 1.0 / sum;
    for (int64_t d = 0; d < D; d++) oi[d] = (float)(acc[d] * inv);
    if (lse) *lse = (float)(mx + log(sum));
}

static jattn_status ref_forward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const int64_t rows = p->batch * p->heads * p->seq_q;
    const size_t per_thread = ref_row_doubles(p);
    double *ws = c->workspace;
    const int threads = plan->threads;
    (void)threads; /* read by the OpenMP pragma only */
    JATTN_PARALLEL_FOR_DYNAMIC(8, threads)
    for (int64_t r = 0; r < rows; r++) {
        double *s = ws + (size_t)jattn_thread_index() * per_thread;
        const int64_t i = r % p->seq_q, bh = r / p->seq_q;
        ref_row(c, bh / p->heads, bh % p->heads, i, s, s + p->seq_kv);
    }
    return JATTN_OK;
}

/* ---- backward --------------------------------------------------------------------------
 * The float64 scalar backward (jattn.h): per (b, key/value head), for each query head of its group
 * and each query row i, the score row in float64 (the forward's, bias included), P[i,j] = exp(s_ij
 * - lse_i) from the given lse, Dl_i = dout_i . out_i - dlse_i from the given out, dS = P (dout_i .
 * v_j - Dl_i); dq_i rounded once from its float64 sum, dk and dv accumulated over the group's rows
 * in float64 and rounded once at the end. Tasks are whole (b, key/value head) (they own their dk,
 * dv rows), spread over OpenMP threads: the bits do not depend on the thread count. Keys a row
 * does not attend are never read for it; keys no row attends get dk = dv = +0; a row with no
 * attended key gets dq = +0.
 * Workspace: per thread, 2 Skv D (dk, dv accumulators) + D (dq) doubles. */
static size_t ref_bwd_doubles(const jattn_problem *p) {
    return 2 * (size_t)p->seq_kv * (size_t)p->head_dim + (size_t)p->head_dim;
}

static jattn_status ref_backward_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    jattn_status st = ref_select(p, e, plan);
    if (st != JATTN_OK) return st;
    if ((uint64_t)p->seq_kv > SIZE_MAX / sizeof(double) / 4 / (uint64_t)p->head_dim)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "seq_kv: %lld, too long for the ref backward's accumulators",
                          (long long)p->seq_kv);
    plan->selection.kernel = "ref_attention_backward_f64_rowwise";
    return JATTN_OK;
}

static size_t ref_backward_workspace_size(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    const int64_t heads = p->batch * p->kv_heads;
    const size_t threads = (size_t)(heads < plan->threads ? heads : plan->threads);
    return threads * ref_bwd_doubles(p) * sizeof(double);
}

/* The rows of query head h that read key/value head hk's keys: dq for them, and their share of
 * hk's dk and dv (accumulated in dk, dv). */
static void ref_backward_query_head(const jattn_call *c, int64_t b, int64_t h, int64_t hk, double *dk, double *dv,
                                    double *dq) {
    const jattn_problem *p = c->problem;
    const int64_t D = p->head_dim, Sq = p->seq_q;
    const float *kb = c->k + b * p->k.batch + hk * p->k.head;
    const float *vb = c->v + b * p->v.batch + hk * p->v.head;
    const float *bias = jattn_call_bias_row(c, b, h);
    const double scale = (double)c->scale;
    for (int64_t i = 0; i < Sq; i++) {
        const float *qi = c->q + b * p->q.batch + h * p->q.head + i * p->q.token;
        const float *oi = c->out + b * p->out.batch + h * p->out.head + i * p->out.token;
        const float *gi = c->dout + b * c->g.dout.batch + h * c->g.dout.head + i * c->g.dout.token;
        float *dqi = c->dq + b * c->g.dq.batch + h * c->g.dq.head + i * c->g.dq.token;
        const int64_t row = (b * p->heads + h) * Sq + i;
        const double lse = (double)c->lse[row];
        const double dl = dot_f64(gi, oi, D) - (c->dlse ? (double)c->dlse[row] : 0.0);
        memset(dq, 0, (size_t)D * sizeof *dq);
        int64_t lo, hi, attended = 0;
        jattn_call_key_window(c, b, i, &lo, &hi);
        for (int64_t j = lo; j < hi; j++) {
            if (!ref_attends(c, b, bias, j)) continue;
            attended++;
            const float *kj = kb + j * p->k.token, *vj = vb + j * p->v.token;
            const double pij = exp(ref_score(qi, kj, D, scale, bias, j) - lse);
            const double ds = pij * (dot_f64(gi, vj, D) - dl) * scale;
            double *dkj = dk + j * D, *dvj = dv + j * D;
            for (int64_t d = 0; d < D; d++) {
                dq[d] += ds * (double)kj[d];
                dkj[d] += ds * (double)qi[d];
                dvj[d] += pij * (double)gi[d];
            }
        }
        for (int64_t d = 0; d < D; d++) dqi[d] = attended ? (float)dq[d] : 0.0f;
    }
}

static void ref_backward_head(const jattn_call *c, int64_t b, int64_t hk, double *ws) {
    const jattn_problem *p = c->problem;
    const int64_t D = p->head_dim, Skv = p->seq_kv, group = p->heads / p->kv_heads;
    double *dk = ws, *dv = dk + Skv * D, *dq = dv + Skv * D;
    memset(dk, 0, (size_t)(2 * Skv * D) * sizeof *dk);
    for (int64_t h = hk * group; h < (hk + 1) * group; h++) ref_backward_query_head(c, b, h, hk, dk, dv, dq);
    for (int64_t j = 0; j < Skv; j++) {
        float *dkj = c->dk + b * c->g.dk.batch + hk * c->g.dk.head + j * c->g.dk.token;
        float *dvj = c->dv + b * c->g.dv.batch + hk * c->g.dv.head + j * c->g.dv.token;
        for (int64_t d = 0; d < D; d++) {
            dkj[d] = (float)dk[j * D + d]; /* +0 for keys no row attends: never accumulated */
            dvj[d] = (float)dv[j * D + d];
        }
    }
}

static jattn_status ref_backward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const int64_t heads = p->batch * p->kv_heads;
    const int threads = heads < plan->threads ? (int)heads : plan->threads;
    (void)threads; /* read by the OpenMP pragma only */
    double *ws = c->workspace;
    const size_t per_thread = ref_bwd_doubles(p);
    JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
    for (int64_t bh = 0; bh < heads; bh++)
        ref_backward_head(c, bh / p->kv_heads, bh % p->kv_heads, ws + (size_t)jattn_thread_index() * per_thread);
    return JATTN_OK;
}

const jattn_backend_ops jattn_backend_ref = {
    .id = JATTN_BACKEND_REF,
    .is_gpu = 0,
    .workspace_memory = JATTN_MEMORY_HOST,
    .select = ref_select,
    .workspace_size = ref_workspace_size,
    .forward = ref_forward,
    .select_backward = ref_backward_select,
    .workspace_size_backward = ref_backward_workspace_size,
    .backward = ref_backward,
};
