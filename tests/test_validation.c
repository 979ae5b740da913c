/* Validation: every error the dispatch layer reports, from a table of broken problems and
 * calls (key padding included). For each: the status code, a message that names the offending field, and nothing
 * written to out or lse. Also: status names, versions, the message being per thread and
 * cleared by a successful call, and the workspace contract. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { B = 2, H = 3, S = 9, D = 16 };
#define N ((size_t)B * H * S * D)

static float q_buf[N], k_buf[N], v_buf[N], out_buf[2 * N], lse_buf[B * H * S];

/* The mask of a case: run_case resets it, a mask case fills it and points mask at it. */
static jattn_mask mask_st;
static const jattn_mask *mask;
#define pad_buf (mask_st.padding)
static int64_t lens[B + 1];
static uint8_t mask_buf[2 * S + 8];
static int64_t offsets[2][4]; /* blocks or segments: [0] queries, [1] keys */
static float bias_buf[B * H * S];

typedef struct broken {
    const char *what;
    jattn_status want;
    const char *field; /* must appear in the message */
    void (*apply)(jattn_problem *p, jattn_exec *e, const void **q, const void **k, const void **v, void **o,
                  float **lse);
} broken;

#define CASE(name, body)                                                                                        \
    static void name(jattn_problem *p, jattn_exec *e, const void **q, const void **k, const void **v, void **o, \
                     float **lse) {                                                                             \
        (void)p, (void)e, (void)q, (void)k, (void)v, (void)o, (void)lse;                                        \
        body;                                                                                                   \
    }

CASE(null_q, *q = NULL)
CASE(null_k, *k = NULL)
CASE(null_v, *v = NULL)
CASE(null_out, *o = NULL)
CASE(batch_neg, p->batch = -1)
CASE(heads_neg, p->heads = -1)
CASE(seq_q_neg, p->seq_q = -3)
CASE(seq_kv_neg, p->seq_kv = -1)
CASE(kv_heads_neg, p->kv_heads = -1)
CASE(kv_heads_not_dividing, p->kv_heads = 2)
CASE(kv_heads_above, p->kv_heads = 2 * H)
CASE(head_dim0, p->head_dim = 0)
CASE(count_overflow, p->heads = INT64_MAX / 4; p->batch = 3)
CASE(stride_overflow, p->k.token = INT64_MAX / 4)
CASE(span_overflow, p->v.token = INT64_MAX / 30)
CASE(neg_stride_q, p->q.token = -D)
CASE(neg_stride_out, p->out.head = -1)
CASE(overlap_out_token, p->out.token = D - 1)
CASE(overlap_q_head0, p->q.head = 0)
CASE(overlap_k_batch, p->k.batch = p->k.head)
CASE(overlap_v_interleave, p->v.head = D; p->v.token = 2 * D) /* heads 0,1,2 vs tokens: head 2 = token 1 */
CASE(alias_out_q, *o = (void *)*q)
CASE(alias_out_v_partial, *o = (void *)(v_buf + N - 5))
CASE(alias_lse_out, *lse = (float *)*o + 7)
CASE(alias_lse_k, *lse = (float *)k_buf)
CASE(scale_nan, p->scale = NAN)
CASE(scale_inf, p->scale = INFINITY)
CASE(scale_neg, p->scale = -0.5f)
CASE(dtype_bad, p->dtype = (jattn_dtype)9)
CASE(dtype_bf16, p->dtype = JATTN_DTYPE_BF16)
CASE(backend_bad, e->backend = (jattn_backend)42)
CASE(precision_bad, e->precision = (jattn_precision)3)
CASE(memory_bad, e->memory = (jattn_memory)-1)
CASE(threads_neg, e->threads = -2)
CASE(ref_device_memory, e->backend = JATTN_BACKEND_REF; e->memory = JATTN_MEMORY_DEVICE)
CASE(ref_tf32, e->backend = JATTN_BACKEND_REF; e->precision = JATTN_PRECISION_TF32)
CASE(misaligned_q, *q = (const char *)q_buf + 2)
CASE(wrap_address, *k = (const void *)(UINTPTR_MAX - 64 + 1))
CASE(workspace_small, e->backend = JATTN_BACKEND_REF; e->workspace = out_buf + N; e->workspace_bytes = 8)
/* key padding: a valid mask [B, S] and lengths, then one thing broken */
#define PAD(body)                                                                                  \
    pad_buf.mask = mask_buf, pad_buf.mask_batch = B, pad_buf.mask_keys = S, pad_buf.kv_len = lens; \
    mask = &mask_st;                                                                               \
    body
CASE(pad_len_high, PAD(lens[1] = S + 1))
CASE(pad_len_negative, PAD(lens[0] = -1))
CASE(pad_len_misaligned, PAD(pad_buf.kv_len = (const int64_t *)((const char *)lens + 4)))
CASE(pad_len_in_lse, PAD(pad_buf.kv_len = (const int64_t *)(void *)lse_buf))
CASE(pad_mask_batch, PAD(pad_buf.mask_batch = B + 1))
CASE(pad_mask_no_extent, PAD(pad_buf.mask_keys = 0))
CASE(pad_mask_keys, PAD(pad_buf.mask_keys = S + 1))
CASE(pad_mask_stride_neg, PAD(pad_buf.mask_batch_stride = -S))
CASE(pad_mask_rows_overlap, PAD(pad_buf.mask_batch_stride = S - 1))
CASE(pad_mask_stride_overflow, PAD(pad_buf.mask_batch_stride = INT64_MAX - 4))
CASE(pad_mask_in_out, PAD(pad_buf.mask = (const uint8_t *)(void *)(out_buf + 3)))
/* the other mask parts: blocks {0, 4, S} over queries and keys, segments {0, 5, S}, a bias [B, H, S] */
#define MASK(body)   \
    mask = &mask_st; \
    body
#define BLOCKS mask_st.block_q = offsets[0], mask_st.block_kv = offsets[1], mask_st.num_blocks = 2
#define SEGMENTS mask_st.cu_seqlens_q = offsets[0], mask_st.cu_seqlens_kv = offsets[1], mask_st.num_segments = 2
#define BIAS mask_st.key_bias = bias_buf, mask_st.key_bias_batch_stride = H * S, mask_st.key_bias_head_stride = S
CASE(causal_bad, MASK(mask_st.causal = (jattn_causal)7))
CASE(blocks_half, MASK(BLOCKS; mask_st.block_kv = NULL))
CASE(blocks_count0, MASK(BLOCKS; mask_st.num_blocks = 0))
CASE(blocks_count_alone, MASK(mask_st.num_blocks = 3))
CASE(blocks_first, MASK(BLOCKS; offsets[0][0] = 1))
CASE(blocks_decrease, MASK(BLOCKS; offsets[1][1] = S + 1))
CASE(blocks_last, MASK(BLOCKS; offsets[0][2] = S - 1))
CASE(blocks_in_out, MASK(BLOCKS; mask_st.block_q = (const int64_t *)(void *)(out_buf + 2)))
CASE(segments_half, MASK(SEGMENTS; mask_st.cu_seqlens_q = NULL))
CASE(segments_count0, MASK(SEGMENTS; mask_st.num_segments = 0))
CASE(segments_past, MASK(SEGMENTS; offsets[1][2] = S + 1))
CASE(segments_stride_neg, MASK(SEGMENTS; mask_st.segments_batch_stride = -3))
CASE(segments_in_lse, MASK(SEGMENTS; mask_st.cu_seqlens_kv = (const int64_t *)(void *)lse_buf))
CASE(bias_stride_neg, MASK(BIAS; mask_st.key_bias_head_stride = -S))
CASE(bias_stride_alone, MASK(mask_st.key_bias_batch_stride = 4))
CASE(bias_in_out, MASK(BIAS; mask_st.key_bias = out_buf + 1))
CASE(bias_misaligned, MASK(BIAS; mask_st.key_bias = (const float *)(const void *)((const char *)bias_buf + 1)))
CASE(alignment_bad, e->alignment = 12)

static const broken cases[] = {
    {"NULL q", JATTN_ERROR_NULL_POINTER, "q", null_q},
    {"NULL k", JATTN_ERROR_NULL_POINTER, "k", null_k},
    {"NULL v", JATTN_ERROR_NULL_POINTER, "v", null_v},
    {"NULL out", JATTN_ERROR_NULL_POINTER, "out", null_out},
    {"batch -1", JATTN_ERROR_INVALID_DIMENSION, "batch", batch_neg},
    {"heads -1", JATTN_ERROR_INVALID_DIMENSION, "heads", heads_neg},
    {"seq_q -3", JATTN_ERROR_INVALID_DIMENSION, "seq_q", seq_q_neg},
    {"seq_kv -1", JATTN_ERROR_INVALID_DIMENSION, "seq_kv", seq_kv_neg},
    {"kv_heads -1", JATTN_ERROR_INVALID_DIMENSION, "kv_heads", kv_heads_neg},
    {"kv_heads not dividing heads", JATTN_ERROR_INVALID_DIMENSION, "kv_heads", kv_heads_not_dividing},
    {"kv_heads above heads", JATTN_ERROR_INVALID_DIMENSION, "kv_heads", kv_heads_above},
    {"head_dim 0", JATTN_ERROR_INVALID_DIMENSION, "head_dim", head_dim0},
    {"element count overflows", JATTN_ERROR_OVERFLOW, "heads", count_overflow},
    {"k.token stride overflows", JATTN_ERROR_OVERFLOW, "k.token", stride_overflow},
    {"v span exceeds the address space", JATTN_ERROR_OVERFLOW, "v", span_overflow},
    {"negative q.token", JATTN_ERROR_INVALID_STRIDE, "q.token", neg_stride_q},
    {"negative out.head", JATTN_ERROR_INVALID_STRIDE, "out.head", neg_stride_out},
    {"out rows overlap", JATTN_ERROR_SELF_OVERLAP, "out.token", overlap_out_token},
    {"q heads share memory", JATTN_ERROR_SELF_OVERLAP, "q.head", overlap_q_head0},
    {"k batches overlap heads", JATTN_ERROR_SELF_OVERLAP, "k.", overlap_k_batch},
    {"v heads interleave tokens", JATTN_ERROR_SELF_OVERLAP, "v.", overlap_v_interleave},
    {"out is q", JATTN_ERROR_ALIASING, "out", alias_out_q},
    {"out overlaps the end of v", JATTN_ERROR_ALIASING, "out", alias_out_v_partial},
    {"lse inside out", JATTN_ERROR_ALIASING, "lse", alias_lse_out},
    {"lse inside k", JATTN_ERROR_ALIASING, "lse", alias_lse_k},
    {"scale NaN", JATTN_ERROR_INVALID_SCALE, "scale", scale_nan},
    {"scale inf", JATTN_ERROR_INVALID_SCALE, "scale", scale_inf},
    {"scale negative", JATTN_ERROR_INVALID_SCALE, "scale", scale_neg},
    {"dtype out of range", JATTN_ERROR_INVALID_ARGUMENT, "dtype", dtype_bad},
    {"dtype bf16", JATTN_ERROR_UNSUPPORTED, "dtype", dtype_bf16},
    {"backend out of range", JATTN_ERROR_INVALID_ARGUMENT, "exec.backend", backend_bad},
    {"precision out of range", JATTN_ERROR_INVALID_ARGUMENT, "exec.precision", precision_bad},
    {"memory out of range", JATTN_ERROR_INVALID_ARGUMENT, "exec.memory", memory_bad},
    {"threads negative", JATTN_ERROR_INVALID_ARGUMENT, "exec.threads", threads_neg},
    {"ref on device memory", JATTN_ERROR_UNSUPPORTED, "exec.memory", ref_device_memory},
    {"ref in tf32", JATTN_ERROR_UNSUPPORTED, "exec.precision", ref_tf32},
    {"q misaligned", JATTN_ERROR_INVALID_ARGUMENT, "q", misaligned_q},
    {"k wraps the address space", JATTN_ERROR_OVERFLOW, "k", wrap_address},
    {"workspace too small", JATTN_ERROR_WORKSPACE_TOO_SMALL, "exec.workspace_bytes", workspace_small},
    {"kv_len above seq_kv", JATTN_ERROR_INVALID_ARGUMENT, "key_padding.kv_len[1]", pad_len_high},
    {"kv_len negative", JATTN_ERROR_INVALID_ARGUMENT, "key_padding.kv_len[0]", pad_len_negative},
    {"kv_len misaligned", JATTN_ERROR_INVALID_ARGUMENT, "key_padding.kv_len", pad_len_misaligned},
    {"kv_len inside lse", JATTN_ERROR_ALIASING, "key_padding.kv_len", pad_len_in_lse},
    {"mask rows neither 1 nor batch", JATTN_ERROR_INVALID_DIMENSION, "key_padding.mask_batch", pad_mask_batch},
    {"mask without its extent", JATTN_ERROR_INVALID_DIMENSION, "key_padding.mask_keys", pad_mask_no_extent},
    {"mask keys not seq_kv", JATTN_ERROR_INVALID_DIMENSION, "key_padding.mask_keys", pad_mask_keys},
    {"mask stride negative", JATTN_ERROR_INVALID_STRIDE, "key_padding.mask_batch_stride", pad_mask_stride_neg},
    {"mask rows overlap", JATTN_ERROR_SELF_OVERLAP, "key_padding.mask_batch_stride", pad_mask_rows_overlap},
    {"mask stride overflows", JATTN_ERROR_OVERFLOW, "key_padding.mask_batch_stride", pad_mask_stride_overflow},
    {"mask inside out", JATTN_ERROR_ALIASING, "key_padding.mask", pad_mask_in_out},
    {"causal out of range", JATTN_ERROR_INVALID_ARGUMENT, "mask.causal", causal_bad},
    {"blocks without key offsets", JATTN_ERROR_NULL_POINTER, "mask.block_kv", blocks_half},
    {"blocks of count 0", JATTN_ERROR_INVALID_DIMENSION, "mask.num_blocks", blocks_count0},
    {"a block count without blocks", JATTN_ERROR_INVALID_ARGUMENT, "mask.num_blocks", blocks_count_alone},
    {"blocks not from 0", JATTN_ERROR_INVALID_ARGUMENT, "mask.block_q[0]", blocks_first},
    {"block offsets decrease", JATTN_ERROR_INVALID_ARGUMENT, "mask.block_kv[2]", blocks_decrease},
    {"blocks end before seq_q", JATTN_ERROR_INVALID_ARGUMENT, "mask.block_q[2]", blocks_last},
    {"block offsets inside out", JATTN_ERROR_ALIASING, "mask.block_q", blocks_in_out},
    {"segments without query offsets", JATTN_ERROR_NULL_POINTER, "mask.cu_seqlens_q", segments_half},
    {"segments of count 0", JATTN_ERROR_INVALID_DIMENSION, "mask.num_segments", segments_count0},
    {"segments past seq_kv", JATTN_ERROR_INVALID_ARGUMENT, "mask.cu_seqlens_kv[2]", segments_past},
    {"segments stride negative", JATTN_ERROR_INVALID_STRIDE, "mask.segments_batch_stride", segments_stride_neg},
    {"segment offsets inside lse", JATTN_ERROR_ALIASING, "mask.cu_seqlens_kv", segments_in_lse},
    {"key bias stride negative", JATTN_ERROR_INVALID_STRIDE, "mask.key_bias_head_stride", bias_stride_neg},
    {"key bias stride without a bias", JATTN_ERROR_INVALID_ARGUMENT, "mask.key_bias_batch_stride", bias_stride_alone},
    {"key bias inside out", JATTN_ERROR_ALIASING, "mask.key_bias", bias_in_out},
    {"key bias misaligned", JATTN_ERROR_INVALID_ARGUMENT, "mask.key_bias", bias_misaligned},
    {"alignment not a power of two", JATTN_ERROR_INVALID_ARGUMENT, "exec.alignment", alignment_bad},
};

static int poisoned(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) return 0;
    return 1;
}

static int run_case(const broken *c) {
    jattn_problem p = jattn_problem_flux(B, H, S, S, D);
    jattn_exec e = {0};
    const void *q = q_buf, *k = k_buf, *v = v_buf;
    void *o = out_buf;
    float *lse = lse_buf;
    mask = NULL;
    memset(&mask_st, 0, sizeof mask_st);
    for (int b = 0; b <= B; b++) lens[b] = S / 2;
    const int64_t valid[2][3] = {{0, 4, S}, {0, 5, S}};
    memcpy(offsets[0], valid[0], sizeof valid[0]);
    memcpy(offsets[1], valid[1], sizeof valid[1]);
    memset(mask_buf, 1, sizeof mask_buf);
    c->apply(&p, &e, &q, &k, &v, &o, &lse);
    for (size_t i = 0; i < 2 * N; i++) out_buf[i] = NAN;
    for (size_t i = 0; i < (size_t)B * H * S; i++) lse_buf[i] = NAN;
    jattn_status st = jattn_forward_masked(NULL, &p, &e, q, k, v, mask, o, lse);
    int ok = jt_expect_status(st, c->want, c->what);
    const char *msg = jattn_last_error();
    if (ok && !strstr(msg, c->field)) {
        printf("FAIL %s: message \"%s\" does not name %s\n", c->what, msg, c->field);
        ok = 0;
    }
    if (!poisoned(out_buf, 2 * N) || !poisoned(lse_buf, (size_t)B * H * S)) {
        printf("FAIL %s: an output was written by a failing call\n", c->what);
        ok = 0;
    }
    /* jattn_select and jattn_workspace_size report the same problem (the pointer checks
     * belong to the call). */
    jattn_selection sel;
    size_t bytes;
    int pointer_case = c->want == JATTN_ERROR_NULL_POINTER || c->want == JATTN_ERROR_ALIASING ||
                       c->want == JATTN_ERROR_WORKSPACE_TOO_SMALL || c->apply == misaligned_q ||
                       c->apply == wrap_address || mask != NULL; /* the mask is the call's too */
    if (!pointer_case) {
        ok &= jt_expect_status(jattn_select(&p, &e, &sel), c->want, c->what);
        ok &= jt_expect_status(jattn_workspace_size(&p, &e, &bytes), c->want, c->what);
    }
    if (getenv("JATTN_TEST_VERBOSE"))
        printf("%s %s: %s: %s\n", ok ? "ok  " : "FAIL", c->what, jattn_status_name(st), msg);
    return ok;
}

static int names_and_versions(void) {
    int ok = 1;
    for (int s = 0; s < JATTN_STATUS_COUNT; s++) {
        const char *n = jattn_status_name((jattn_status)s);
        ok &= strncmp(n, "JATTN_", 6) == 0 && strcmp(n, "JATTN_STATUS_UNKNOWN") != 0;
        for (int t = 0; t < s; t++) ok &= strcmp(n, jattn_status_name((jattn_status)t)) != 0;
    }
    ok &= strcmp(jattn_status_name((jattn_status)JATTN_STATUS_COUNT), "JATTN_STATUS_UNKNOWN") == 0;
    ok &= strcmp(jattn_status_name((jattn_status)-1), "JATTN_STATUS_UNKNOWN") == 0;
    ok &= jattn_version_number() == JATTN_VERSION_NUMBER;
    ok &= strcmp(jattn_version_string(), JATTN_VERSION_STRING) == 0;
    ok &= jattn_backend_name((jattn_backend)JATTN_BACKEND_COUNT) == NULL;
    if (!ok) printf("FAIL status names or versions\n");
    return ok;
}

static int null_arguments(void) {
    jattn_problem p = jattn_problem_flux(1, 1, 4, 4, 8);
    jattn_selection sel;
    int ok = jt_expect_status(jattn_select(NULL, NULL, &sel), JATTN_ERROR_NULL_POINTER, "select(NULL problem)");
    ok &= strstr(jattn_last_error(), "problem") != NULL;
    ok &= jt_expect_status(jattn_select(&p, NULL, NULL), JATTN_ERROR_NULL_POINTER, "select(NULL selection)");
    ok &= jt_expect_status(jattn_workspace_size(&p, NULL, NULL), JATTN_ERROR_NULL_POINTER, "workspace_size(NULL)");
    ok &= jt_expect_status(jattn_ctx_create(NULL), JATTN_ERROR_NULL_POINTER, "ctx_create(NULL)");
    ok &= jt_expect_status(jattn_forward(NULL, NULL, NULL, q_buf, k_buf, v_buf, out_buf, NULL),
                           JATTN_ERROR_NULL_POINTER, "forward(NULL problem)");
    jattn_ctx_free(NULL); /* accepted */
    return ok;
}

/* A successful call clears the message; the workspace path with a caller buffer works. */
static int success_paths(void) {
    jattn_problem p = jattn_problem_flux(1, 2, 5, 6, 8);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    jattn_forward(NULL, &p, &e, NULL, k_buf, v_buf, out_buf, NULL);
    int ok = jattn_last_error()[0] != '\0';
    size_t bytes = 0;
    ok &= jt_expect_status(jattn_workspace_size(&p, &e, &bytes), JATTN_OK, "workspace_size");
    char *ws = malloc(bytes + 1);
    e.workspace = ws + 1; /* unaligned on purpose */
    e.workspace_bytes = bytes;
    ok &= jt_expect_status(jattn_forward(NULL, &p, &e, q_buf, k_buf, v_buf, out_buf, NULL), JATTN_OK,
                           "forward with caller workspace");
    ok &= jattn_last_error()[0] == '\0';
    jattn_ctx *ctx = NULL;
    ok &= jt_expect_status(jattn_ctx_create(&ctx), JATTN_OK, "ctx_create");
    e.workspace = NULL;
    for (int i = 0; i < 3; i++)
        ok &= jt_expect_status(jattn_forward(ctx, &p, &e, q_buf, k_buf, v_buf, out_buf, NULL), JATTN_OK,
                               "forward with a context");
    jattn_ctx_free(ctx);
    free(ws);
    jattn_selection sel;
    e.backend = JATTN_BACKEND_AUTO;
    ok &= jt_expect_status(jattn_select(&p, &e, &sel), JATTN_OK, "select auto");
    ok &= sel.backend != JATTN_BACKEND_AUTO && sel.kernel && sel.isa && sel.threads >= 1;
    if (!ok) printf("FAIL success paths\n");
    return ok;
}

/* Problems without a query and without a key, of 2^53 batches or heads: nothing to write, and the
 * call returns at once (it once walked every (batch, head) pair of its empty rows), forward and
 * backward, on each host backend present. */
static int empty_problems_of_many_rows(void) {
    static const int64_t dims[][2] = {
        {INT64_C(1) << 53, 1}, {1, INT64_C(1) << 53}, {INT64_C(1) << 31, INT64_C(1) << 31}};
    static const jattn_backend backends[] = {JATTN_BACKEND_REF, JATTN_BACKEND_CPU};
    int ok = 1;
    for (size_t b = 0; b < sizeof backends / sizeof backends[0]; b++) {
        if (!jt_backend_present(backends[b])) continue;
        for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
            jattn_problem p = jattn_problem_flux(dims[t][0], dims[t][1], 0, 0, 8);
            jattn_exec e = {0};
            e.backend = backends[b];
            char what[96];
            snprintf(what, sizeof what, "%s forward, empty (%lld,%lld,0,0,8)", jattn_backend_name(backends[b]),
                     (long long)dims[t][0], (long long)dims[t][1]);
            ok &= jt_expect_status(jattn_forward(NULL, &p, &e, q_buf, k_buf, v_buf, out_buf, lse_buf), JATTN_OK, what);
            jattn_grad_strides g = jattn_grad_strides_like(&p);
            snprintf(what, sizeof what, "%s backward, empty (%lld,%lld,0,0,8)", jattn_backend_name(backends[b]),
                     (long long)dims[t][0], (long long)dims[t][1]);
            ok &= jt_expect_status(jattn_backward(NULL, &p, &g, &e, q_buf, k_buf, v_buf, out_buf, lse_buf, out_buf,
                                                  NULL, NULL, out_buf, out_buf + N / 2, out_buf + N),
                                   JATTN_OK, what);
        }
    }
    if (!ok) printf("FAIL empty problems of many rows\n");
    return ok;
}

/* jattn_backend_info_at: every backend value but AUTO once, in ranks 0..count-1, with the name
 * jattn_backend_name gives; its description agrees with what the calls do (a host-memory backend
 * present refuses device pointers, a backend without a backward refuses jattn_backward_select, AUTO takes
 * the first backend that can run, a GPU backend aside); out-of-range ranks and NULL refused. */
static int backend_infos(void) {
    const int count = jattn_backend_info_count();
    int ok = count == JATTN_BACKEND_COUNT - 1, seen[JATTN_BACKEND_COUNT] = {0};
    jattn_problem p = jattn_problem_flux(1, 1, 4, 4, 8);
    jattn_exec e = {0};
    jattn_selection sel, chosen;
    ok &= jt_expect_status(jattn_select(&p, &e, &chosen), JATTN_OK, "select auto");
    int passed_chosen = 0;
    for (int r = 0; r < count; r++) {
        jattn_backend_info info;
        memset(&info, 0xff, sizeof info);
        if (!jt_expect_status(jattn_backend_info_at(r, &info), JATTN_OK, "backend_info_at")) return 0;
        const int in_range = info.backend > JATTN_BACKEND_AUTO && info.backend < JATTN_BACKEND_COUNT;
        ok &= in_range && info.auto_rank == r && (info.is_gpu == 0 || info.is_gpu == 1) &&
              (info.has_backward == 0 || info.has_backward == 1) &&
              (info.memory == JATTN_MEMORY_HOST || info.memory == JATTN_MEMORY_DEVICE);
        if (!in_range) continue;
        ok &= !seen[info.backend]++ && info.name && strcmp(info.name, jattn_backend_name(info.backend)) == 0;
        e.backend = info.backend;
        e.memory = JATTN_MEMORY_HOST;
        const int runs = jattn_select(&p, &e, &sel) == JATTN_OK;
        if (!info.has_backward)
            ok &= jt_expect_status(jattn_backward_select(&p, &e, &sel), JATTN_ERROR_UNSUPPORTED, info.name);
        e.memory = JATTN_MEMORY_DEVICE;
        if (runs && info.memory == JATTN_MEMORY_HOST)
            ok &= jt_expect_status(jattn_select(&p, &e, &sel), JATTN_ERROR_UNSUPPORTED, info.name);
        e.memory = JATTN_MEMORY_HOST;
        if (info.backend == chosen.backend) {
            passed_chosen = 1;
            ok &= runs;
        } else if (!passed_chosen && runs && !info.is_gpu) { /* AUTO skips software GPUs only */
            printf("FAIL auto chose %s, but %s comes first in auto's order and can run\n", chosen.backend_name,
                   info.name);
            ok = 0;
        }
    }
    ok &= passed_chosen;
    jattn_backend_info untouched;
    memset(&untouched, 0x5a, sizeof untouched);
    ok &= jt_expect_status(jattn_backend_info_at(count, &untouched), JATTN_ERROR_INVALID_ARGUMENT, "rank count");
    ok &= strstr(jattn_last_error(), "auto_rank") != NULL;
    ok &= jt_expect_status(jattn_backend_info_at(-1, &untouched), JATTN_ERROR_INVALID_ARGUMENT, "rank -1");
    ok &= jt_expect_status(jattn_backend_info_at(0, NULL), JATTN_ERROR_NULL_POINTER, "info NULL");
    ok &= untouched.auto_rank == 0x5a5a5a5a;
    if (!ok) printf("FAIL backend descriptions (jattn_backend_info_at)\n");
    return ok;
}

/* Messages are per thread: two threads fail differently at once and each reads its own. */
static void *thread_fail(void *arg) {
    int which = *(int *)arg, good = 1;
    for (int it = 0; it < 2000; it++) {
        jattn_problem p = jattn_problem_flux(1, 1, 4, 4, 8);
        if (which)
            p.scale = -1;
        else
            p.seq_kv = -1;
        jattn_selection sel;
        jattn_select(&p, NULL, &sel);
        good &= strstr(jattn_last_error(), which ? "scale" : "seq_kv") != NULL;
    }
    *(int *)arg = good;
    return NULL;
}

static int per_thread_messages(void) {
    pthread_t t[2];
    int arg[2] = {0, 1};
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_fail, &arg[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    if (!(arg[0] && arg[1])) printf("FAIL error messages are not per thread\n");
    return arg[0] && arg[1];
}

int main(void) {
    jt_tally tally = {0};
    for (size_t i = 0; i < N; i++) q_buf[i] = k_buf[i] = v_buf[i] = 0.5f;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) jt_tally_add(&tally, run_case(&cases[i]));
    jt_tally_add(&tally, names_and_versions());
    jt_tally_add(&tally, null_arguments());
    jt_tally_add(&tally, success_paths());
    jt_tally_add(&tally, per_thread_messages());
    jt_tally_add(&tally, backend_infos());
    jt_tally_add(&tally, empty_problems_of_many_rows());
    if (!jt_backend_present(JATTN_BACKEND_CUDA)) {
        jattn_problem p = jattn_problem_flux(1, 1, 4, 4, 8);
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_CUDA;
        jattn_selection sel;
        jt_tally_add(&tally,
                     jt_expect_status(jattn_select(&p, &e, &sel), JATTN_ERROR_BACKEND_UNAVAILABLE, "cuda absent"));
    }
    return jt_tally_finish(&tally, "test_validation");
}
