/* Validation of the public API's arguments (validate.h): every check once, here, before any
 * backend sees the call, so a backend can assume a well-formed problem and mask. */
#include "validate.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a*b+c for non-negative int64 with overflow detection. */
static int mul_add_overflows(int64_t a, int64_t b, int64_t c, int64_t *r) {
    if (a != 0 && b > (INT64_MAX - c) / a) return 1;
    *r = a * b + c;
    return 0;
}

/* ---- tensors ------------------------------------------------------------------------ */

/* One 4-d tensor [batch, head, token, head_dim] as the validator sees it. */
typedef struct tensor_view {
    const char *name;
    int64_t extent[4]; /* B, H, S, D */
    int64_t stride[4]; /* batch, head, token, 1 */
} tensor_view;

static tensor_view make_view(const char *name, const jattn_problem *p, int64_t heads, jattn_strides s, int64_t seq) {
    tensor_view t = {name, {p->batch, heads, seq, p->head_dim}, {s.batch, s.head, s.token, 1}};
    return t;
}

static const char *const dim_field[4] = {"batch", "head", "token", "head_dim"};

/* Number of elements the tensor spans: 1 + sum (n_i - 1) * s_i, or 0 when it has no element
 * (then only the strides' signs are looked at). Checks strides and overflow, and that no two index
 * tuples address the same element. */
static jattn_status check_tensor(const tensor_view *t, int64_t *span_elems) {
    for (int i = 0; i < 3; i++)
        if (t->stride[i] < 0)
            return jattn_fail(JATTN_ERROR_INVALID_STRIDE, "%s.%s: stride %lld is negative", t->name, dim_field[i],
                              (long long)t->stride[i]);
    for (int i = 0; i < 4; i++)
        if (t->extent[i] == 0) {
            *span_elems = 0;
            return JATTN_OK;
        }
    int64_t span = 1;
    for (int i = 0; i < 4; i++)
        if (mul_add_overflows(t->extent[i] - 1, t->stride[i], span, &span))
            return jattn_fail(JATTN_ERROR_OVERFLOW, "%s.%s: stride %lld times extent %lld overflows", t->name,
                              dim_field[i], (long long)t->stride[i], (long long)t->extent[i]);
    if (span > (int64_t)(PTRDIFF_MAX / sizeof(float)) || (uint64_t)span > SIZE_MAX / sizeof(float))
        return jattn_fail(JATTN_ERROR_OVERFLOW, "%s: spans %lld elements, more bytes than a pointer can address",
                          t->name, (long long)span);
    /* Non-overlap: order the dimensions of extent > 1 by stride; each stride must reach past
     * everything the smaller-stride dimensions span. */
    int order[4], n = 0;
    for (int i = 3; i >= 0; i--)
        if (t->extent[i] > 1) order[n++] = i;
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && t->stride[order[b]] < t->stride[order[b - 1]]; b--) {
            int tmp = order[b];
            order[b] = order[b - 1];
            order[b - 1] = tmp;
        }
    int64_t inner_span = 1; /* elements spanned by dimensions before order[a] */
    for (int a = 0; a < n; a++) {
        int d = order[a];
        if (t->stride[d] < inner_span) {
            if (a == 0)
                return jattn_fail(JATTN_ERROR_SELF_OVERLAP, "%s.%s: stride 0 with extent %lld makes %s overlap itself",
                                  t->name, dim_field[d], (long long)t->extent[d], t->name);
            return jattn_fail(JATTN_ERROR_SELF_OVERLAP,
                              "%s.%s: stride %lld < %lld elements spanned by %s.%s makes %s overlap itself", t->name,
                              dim_field[d], (long long)t->stride[d], (long long)inner_span, t->name,
                              dim_field[order[a - 1]], t->name);
        }
        inner_span += (t->extent[d] - 1) * t->stride[d]; /* cannot overflow: bounded by span above */
    }
    *span_elems = span;
    return JATTN_OK;
}

/* ---- the problem -------------------------------------------------------------------- */

static int64_t kv_heads_of(const jattn_problem *p) { return p->kv_heads ? p->kv_heads : p->heads; }

jattn_status jattn_check_problem(const jattn_problem *p, problem_spans *spans) {
    if (!p) return jattn_fail(JATTN_ERROR_NULL_POINTER, "problem: NULL");
    const struct {
        const char *name;
        int64_t value, least;
    } dims[] = {{"batch", p->batch, 0},
                {"heads", p->heads, 0},
                {"seq_q", p->seq_q, 0},
                {"seq_kv", p->seq_kv, 0},
                {"head_dim", p->head_dim, 1}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].value < dims[i].least)
            return jattn_fail(JATTN_ERROR_INVALID_DIMENSION, "%s: %lld, must be >= %lld", dims[i].name,
                              (long long)dims[i].value, (long long)dims[i].least);
    if (p->kv_heads < 0)
        return jattn_fail(JATTN_ERROR_INVALID_DIMENSION, "kv_heads: %lld, must be >= 0 (0 means heads)",
                          (long long)p->kv_heads);
    if (p->kv_heads > 0 && (p->kv_heads > p->heads || p->heads % p->kv_heads != 0))
        return jattn_fail(JATTN_ERROR_INVALID_DIMENSION,
                          "kv_heads: %lld does not divide heads (%lld): each key/value head serves heads / kv_heads "
                          "query heads",
                          (long long)p->kv_heads, (long long)p->heads);
    if (!(p->scale >= 0.0f) || isinf(p->scale))
        return jattn_fail(JATTN_ERROR_INVALID_SCALE, "scale: %g, must be finite and >= 0 (0 selects 1/sqrt(head_dim))",
                          (double)p->scale);
    if ((int)p->dtype < 0 || (int)p->dtype > JATTN_DTYPE_F16)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "dtype: %d is not a jattn_dtype", (int)p->dtype);
    if (p->dtype != JATTN_DTYPE_F32)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "dtype: only JATTN_DTYPE_F32 is implemented");
    /* The element count of every tensor, and of the score matrix of one head, fit in int64. */
    int64_t count = 1;
    size_t largest = 0;
    int overflows = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].value > dims[largest].value) largest = i;
        if (dims[i].value == 0) {
            count = 0;
            continue;
        }
        if (!overflows && count > INT64_MAX / dims[i].value) overflows = 1;
        if (!overflows) count *= dims[i].value;
    }
    if (overflows && count != 0) /* name the largest dimension: the one most likely wrong */
        return jattn_fail(JATTN_ERROR_OVERFLOW, "%s: %lld makes batch*heads*seq_q*seq_kv*head_dim overflow int64",
                          dims[largest].name, (long long)dims[largest].value);
    /* each tensor's element count fits too (a zero dimension elsewhere does not make them small) */
    const int64_t kvh = kv_heads_of(p);
    const int64_t extents[2][4] = {{p->batch, p->heads, p->seq_q, p->head_dim},
                                   {p->batch, kvh, p->seq_kv, p->head_dim}};
    for (int t = 0; t < 2; t++) {
        int64_t n = 1;
        for (int i = 0; i < 4; i++) {
            if (extents[t][i] == 0) break;
            if (n > INT64_MAX / extents[t][i])
                return jattn_fail(JATTN_ERROR_OVERFLOW, "%s: %lld makes the %s tensors' element count overflow int64",
                                  t ? "seq_kv" : "seq_q", (long long)(t ? p->seq_kv : p->seq_q), t ? "k, v" : "q, out");
            n *= extents[t][i];
        }
    }
    tensor_view views[4] = {make_view("q", p, p->heads, p->q, p->seq_q), make_view("k", p, kvh, p->k, p->seq_kv),
                            make_view("v", p, kvh, p->v, p->seq_kv), make_view("out", p, p->heads, p->out, p->seq_q)};
    const int slot[4] = {T_Q, T_K, T_V, T_OUT};
    for (int i = 0; i < 4; i++) {
        jattn_status st = check_tensor(&views[i], &spans->t[slot[i]]);
        if (st != JATTN_OK) return st;
    }
    spans->t[T_LSE] = p->batch * p->heads * p->seq_q; /* <= q's elements, so no overflow */
    return JATTN_OK;
}

jattn_status jattn_check_grad(const jattn_problem *p, const jattn_grad_strides *g, problem_spans *spans) {
    const int64_t kvh = kv_heads_of(p);
    tensor_view views[4] = {
        make_view("grad.dout", p, p->heads, g->dout, p->seq_q), make_view("grad.dq", p, p->heads, g->dq, p->seq_q),
        make_view("grad.dk", p, kvh, g->dk, p->seq_kv), make_view("grad.dv", p, kvh, g->dv, p->seq_kv)};
    const int slot[4] = {T_DOUT, T_DQ, T_DK, T_DV};
    for (int i = 0; i < 4; i++) {
        jattn_status st = check_tensor(&views[i], &spans->t[slot[i]]);
        if (st != JATTN_OK) return st;
    }
    spans->t[T_DLSE] = spans->t[T_LSE];
    return JATTN_OK;
}

jattn_status jattn_check_exec(const jattn_exec *e) {
    if ((int)e->backend < 0 || (int)e->backend >= JATTN_BACKEND_COUNT)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.backend: %d is not a jattn_backend", (int)e->backend);
    if ((int)e->precision < 0 || (int)e->precision > JATTN_PRECISION_TF32)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.precision: %d is not a jattn_precision",
                          (int)e->precision);
    if ((int)e->memory < 0 || (int)e->memory > JATTN_MEMORY_DEVICE)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.memory: %d is not a jattn_memory", (int)e->memory);
    if (e->threads < 0)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "exec.threads: %d, must be >= 0 (0 = all cores)", e->threads);
    if (e->alignment != 0 && (e->alignment < 4 || (e->alignment & (e->alignment - 1)) != 0))
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                          "exec.alignment: %zu, must be 0 (16 bytes) or a power of two >= 4 (a float's alignment)",
                          e->alignment);
    return JATTN_OK;
}

/* ---- the mask's structure ------------------------------------------------------------- */

/* An offsets array of `count` entries per row and rows `stride` apart (0: one row for every one of
 * `rows` batches): its element span, or -1 when it overflows. */
static int64_t offsets_span(int64_t rows, int64_t stride, int64_t count) {
    int64_t span;
    if (stride == 0 || rows <= 1) return count;
    if (mul_add_overflows(rows - 1, stride, count, &span)) return -1;
    return span;
}

jattn_status jattn_check_mask_shape(const jattn_problem *p, const jattn_mask *m, jattn_mask_shape *s) {
    memset(s, 0, sizeof *s);
    if (!m) return JATTN_OK;
    const jattn_key_padding *kp = &m->padding;
    if (kp->mask) {
        if (kp->mask_batch != 1 && kp->mask_batch != p->batch)
            return jattn_fail(JATTN_ERROR_INVALID_DIMENSION,
                              "key_padding.mask_batch: %lld, must be 1 (one row for every batch) or batch (%lld)",
                              (long long)kp->mask_batch, (long long)p->batch);
        if (kp->mask_keys != p->seq_kv)
            return jattn_fail(JATTN_ERROR_INVALID_DIMENSION,
                              "key_padding.mask_keys: %lld, must equal seq_kv (%lld): a mask needs its extent",
                              (long long)kp->mask_keys, (long long)p->seq_kv);
        if (kp->mask_batch_stride < 0)
            return jattn_fail(JATTN_ERROR_INVALID_STRIDE, "key_padding.mask_batch_stride: %lld is negative",
                              (long long)kp->mask_batch_stride);
        const int64_t stride = kp->mask_batch_stride ? kp->mask_batch_stride : kp->mask_keys;
        if (kp->mask_batch > 1 && stride < kp->mask_keys)
            return jattn_fail(JATTN_ERROR_SELF_OVERLAP,
                              "key_padding.mask_batch_stride: %lld < mask_keys %lld makes the mask rows overlap",
                              (long long)stride, (long long)kp->mask_keys);
        int64_t span;
        if (mul_add_overflows(kp->mask_batch > 0 ? kp->mask_batch - 1 : 0, stride, kp->mask_keys, &span) ||
            (uint64_t)span > (uint64_t)PTRDIFF_MAX)
            return jattn_fail(JATTN_ERROR_OVERFLOW,
                              "key_padding.mask_batch_stride: %lld times mask_batch %lld overflows", (long long)stride,
                              (long long)kp->mask_batch);
        s->mask = 1;
        s->mask_batch = kp->mask_batch;
        s->mask_stride = kp->mask_batch > 1 ? stride : 0;
    }
    s->kv_len = kp->kv_len != NULL;
    if ((int)m->causal < 0 || (int)m->causal > JATTN_CAUSAL_BOTTOM_RIGHT)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "mask.causal: %d is not a jattn_causal", (int)m->causal);
    s->causal = m->causal;
    if (m->block_q || m->block_kv) {
        if (!m->block_q || !m->block_kv)
            return jattn_fail(JATTN_ERROR_NULL_POINTER, "mask.%s: NULL while mask.%s is set (blocks need both)",
                              m->block_q ? "block_kv" : "block_q", m->block_q ? "block_q" : "block_kv");
        if (m->num_blocks < 1 || m->num_blocks >= INT64_MAX / 8)
            return jattn_fail(JATTN_ERROR_INVALID_DIMENSION, "mask.num_blocks: %lld, must be >= 1",
                              (long long)m->num_blocks);
        s->num_blocks = m->num_blocks;
    } else if (m->num_blocks != 0) {
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "mask.num_blocks: %lld without mask.block_q and block_kv",
                          (long long)m->num_blocks);
    }
    if (m->cu_seqlens_q || m->cu_seqlens_kv) {
        if (!m->cu_seqlens_q || !m->cu_seqlens_kv)
            return jattn_fail(JATTN_ERROR_NULL_POINTER, "mask.%s: NULL while mask.%s is set (segments need both)",
                              m->cu_seqlens_q ? "cu_seqlens_kv" : "cu_seqlens_q",
                              m->cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_kv");
        if (m->num_segments < 1 || m->num_segments >= INT64_MAX / 8)
            return jattn_fail(JATTN_ERROR_INVALID_DIMENSION, "mask.num_segments: %lld, must be >= 1",
                              (long long)m->num_segments);
        if (m->segments_batch_stride < 0)
            return jattn_fail(JATTN_ERROR_INVALID_STRIDE, "mask.segments_batch_stride: %lld is negative",
                              (long long)m->segments_batch_stride);
        const int64_t span = offsets_span(p->batch, m->segments_batch_stride, m->num_segments + 1);
        if (span < 0 || span > (int64_t)(PTRDIFF_MAX / 8))
            return jattn_fail(JATTN_ERROR_OVERFLOW, "mask.segments_batch_stride: %lld times batch %lld overflows",
                              (long long)m->segments_batch_stride, (long long)p->batch);
        s->num_segments = m->num_segments;
        s->segments_stride = p->batch > 1 ? m->segments_batch_stride : 0;
    } else if (m->num_segments != 0) {
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                          "mask.num_segments: %lld without mask.cu_seqlens_q and cu_seqlens_kv",
                          (long long)m->num_segments);
    }
    if (m->key_bias) {
        if (m->key_bias_batch_stride < 0 || m->key_bias_head_stride < 0)
            return jattn_fail(
                JATTN_ERROR_INVALID_STRIDE, "mask.key_bias_%s_stride: %lld is negative",
                m->key_bias_batch_stride < 0 ? "batch" : "head",
                (long long)(m->key_bias_batch_stride < 0 ? m->key_bias_batch_stride : m->key_bias_head_stride));
        int64_t span = p->seq_kv;
        if (p->batch > 0 && p->heads > 0 &&
            (mul_add_overflows(p->batch - 1, m->key_bias_batch_stride, span, &span) ||
             mul_add_overflows(p->heads - 1, m->key_bias_head_stride, span, &span) ||
             span > (int64_t)(PTRDIFF_MAX / sizeof(float))))
            return jattn_fail(JATTN_ERROR_OVERFLOW, "mask.key_bias: its strides times batch and heads overflow");
        s->key_bias = 1;
        s->bias_batch_stride = p->batch > 1 ? m->key_bias_batch_stride : 0;
        s->bias_head_stride = p->heads > 1 ? m->key_bias_head_stride : 0;
    } else if (m->key_bias_batch_stride != 0 || m->key_bias_head_stride != 0) {
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "mask.key_bias_%s_stride: set without mask.key_bias",
                          m->key_bias_batch_stride ? "batch" : "head");
    }
    return JATTN_OK;
}

/* ---- pointers ---------------------------------------------------------------------- */

jattn_status jattn_make_range(const char *name, const void *ptr, int64_t span, size_t elem_bytes, byte_range *r) {
    const uintptr_t lo = (uintptr_t)ptr, bytes = (uintptr_t)span * elem_bytes;
    if (lo % elem_bytes)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "%s: pointer %p is not aligned to %zu bytes", name, ptr,
                          elem_bytes);
    if (lo > UINTPTR_MAX - bytes)
        return jattn_fail(JATTN_ERROR_OVERFLOW, "%s: pointer %p plus %lld elements wraps the address space", name, ptr,
                          (long long)span);
    r->name = name;
    r->lo = lo;
    r->hi = lo + bytes;
    return JATTN_OK;
}

int jattn_ranges_overlap(const byte_range *a, const byte_range *b) { return a->lo < b->hi && b->lo < a->hi; }

/* ---- the mask's arrays ------------------------------------------------------------------ */

/* Which part of the structure differs between a run's mask and the plan's, or NULL. */
static const char *shape_difference(const jattn_mask_shape *a, const jattn_mask_shape *b) {
    if (a->kv_len != b->kv_len) return "key_padding.kv_len";
    if (a->mask != b->mask || a->mask_batch != b->mask_batch || a->mask_stride != b->mask_stride)
        return "key_padding.mask";
    if (a->causal != b->causal) return "mask.causal";
    if (a->num_blocks != b->num_blocks) return "mask.block_q / num_blocks";
    if (a->num_segments != b->num_segments || a->segments_stride != b->segments_stride)
        return "mask.cu_seqlens_q / num_segments";
    if (a->key_bias != b->key_bias || a->bias_batch_stride != b->bias_batch_stride ||
        a->bias_head_stride != b->bias_head_stride)
        return "mask.key_bias";
    return NULL;
}

/* An input array of the mask: in range, aligned, overlapping no output. */
static jattn_status check_array(const char *name, const void *ptr, int64_t span, size_t elem_bytes,
                                const byte_range *outputs, int n_out) {
    byte_range r = {NULL, 0, 0};
    jattn_status st = jattn_make_range(name, ptr, span, elem_bytes, &r);
    if (st != JATTN_OK) return st;
    for (int o = 0; o < n_out; o++)
        if (jattn_ranges_overlap(&r, &outputs[o]))
            return jattn_fail(JATTN_ERROR_ALIASING, "%s: overlaps %s (%s is written, %s is read)", name,
                              outputs[o].name, outputs[o].name, name);
    return JATTN_OK;
}

/* Host offsets: `count` + 1 non-decreasing values from 0, the last equal to `last` (exact) or at
 * most `last` (exact = 0). */
static jattn_status check_offsets(const char *name, int64_t row, const int64_t *o, int64_t count, int64_t last,
                                  int exact) {
    if (o[0] != 0)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "%s[%lld]: %lld, the first offset must be 0", name,
                          (long long)row, (long long)o[0]);
    for (int64_t i = 1; i <= count; i++)
        if (o[i] < o[i - 1])
            return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                              "%s[%lld]: %lld < the offset before it (%lld): offsets "
                              "must not decrease",
                              name, (long long)(row + i), (long long)o[i], (long long)o[i - 1]);
    if (exact ? o[count] != last : o[count] > last)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "%s[%lld]: %lld, the last offset must be %s %lld", name,
                          (long long)(row + count), (long long)o[count], exact ? "equal to" : "at most",
                          (long long)last);
    return JATTN_OK;
}

jattn_status jattn_check_mask_data(const jattn_plan *plan, const jattn_mask *m, const byte_range *outputs, int n_out,
                                   jattn_call *call) {
    const jattn_problem *p = &plan->problem;
    jattn_mask_shape shape;
    jattn_status st = jattn_check_mask_shape(p, m, &shape);
    if (st != JATTN_OK) return st;
    const char *differs = shape_difference(&shape, &plan->mask);
    if (differs)
        return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT, "%s: the mask's structure differs from the plan's (its %s)",
                          differs, differs);
    if (!m) return JATTN_OK;
    const int host = plan->memory == JATTN_MEMORY_HOST;
    const jattn_key_padding *kp = &m->padding;
    if (kp->mask) {
        const int64_t rows = shape.mask_batch;
        const int64_t span = rows > 0 ? (rows - 1) * shape.mask_stride + kp->mask_keys : 0;
        st = check_array("key_padding.mask", kp->mask, span, 1, outputs, n_out);
        if (st != JATTN_OK) return st;
        call->mask = kp->mask;
        call->mask_stride = shape.mask_stride;
    }
    if (kp->kv_len) {
        st = check_array("key_padding.kv_len", kp->kv_len, p->batch, sizeof(int64_t), outputs, n_out);
        if (st != JATTN_OK) return st;
        if (host)
            for (int64_t b = 0; b < p->batch; b++)
                if (kp->kv_len[b] < 0 || kp->kv_len[b] > p->seq_kv)
                    return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                                      "key_padding.kv_len[%lld]: %lld, must be in [0, seq_kv = %lld]", (long long)b,
                                      (long long)kp->kv_len[b], (long long)p->seq_kv);
        call->kv_len = kp->kv_len;
    }
    call->causal = m->causal;
    if (shape.num_blocks) {
        st = check_array("mask.block_q", m->block_q, shape.num_blocks + 1, sizeof(int64_t), outputs, n_out);
        if (st == JATTN_OK)
            st = check_array("mask.block_kv", m->block_kv, shape.num_blocks + 1, sizeof(int64_t), outputs, n_out);
        if (st == JATTN_OK && host) st = check_offsets("mask.block_q", 0, m->block_q, shape.num_blocks, p->seq_q, 1);
        if (st == JATTN_OK && host) st = check_offsets("mask.block_kv", 0, m->block_kv, shape.num_blocks, p->seq_kv, 1);
        if (st != JATTN_OK) return st;
        call->block_q = m->block_q;
        call->block_kv = m->block_kv;
        call->num_blocks = shape.num_blocks;
    }
    if (shape.num_segments) {
        const int64_t n = shape.num_segments, stride = shape.segments_stride;
        const int64_t span = offsets_span(p->batch, stride, n + 1);
        st = check_array("mask.cu_seqlens_q", m->cu_seqlens_q, span, sizeof(int64_t), outputs, n_out);
        if (st == JATTN_OK)
            st = check_array("mask.cu_seqlens_kv", m->cu_seqlens_kv, span, sizeof(int64_t), outputs, n_out);
        for (int64_t b = 0; host && st == JATTN_OK && b < (stride ? p->batch : 1); b++) {
            st = check_offsets("mask.cu_seqlens_q", b * stride, m->cu_seqlens_q + b * stride, n, p->seq_q, 0);
            if (st == JATTN_OK)
                st = check_offsets("mask.cu_seqlens_kv", b * stride, m->cu_seqlens_kv + b * stride, n, p->seq_kv, 0);
        }
        if (st != JATTN_OK) return st;
        call->cu_seqlens_q = m->cu_seqlens_q;
        call->cu_seqlens_kv = m->cu_seqlens_kv;
        call->num_segments = n;
        call->segments_stride = stride;
    }
    if (shape.key_bias) {
        const int64_t span = p->batch > 0 && p->heads > 0 ? (p->batch - 1) * shape.bias_batch_stride +
                                                                (p->heads - 1) * shape.bias_head_stride + p->seq_kv
                                                          : 0;
        st = check_array("mask.key_bias", m->key_bias, span, sizeof(float), outputs, n_out);
        if (st != JATTN_OK) return st;
        call->key_bias = m->key_bias;
        call->bias_batch_stride = shape.bias_batch_stride;
        call->bias_head_stride = shape.bias_head_stride;
    }
    return JATTN_OK;
}
