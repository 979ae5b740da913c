/* Fuzz harness: problem validation and dispatch (jattn_select, jattn_workspace_size,
 * jattn_forward) on arbitrary problems, executions and pointer arrangements.
 *
 * The input bytes choose small dimensions (so that valid calls really compute), the strides of
 * each tensor (contiguous head- or token-major, padded, or raw values: zero, negative, huge,
 * overlapping), the scale (any float bit pattern), the exec fields (any enum value, thread
 * counts, a caller workspace of a chosen size), and where q, k, v, out and lse lie in one
 * arena: apart, anywhere (so they may overlap), NULL, or misaligned.
 *
 * An independent model of the header's rules, computed here by brute force over every element
 * address, decides what the library must reject: a negative dimension (head_dim < 1), a
 * negative stride, a tensor two of whose elements share an address, an output element shared with
 * an input or the other output, a NULL or misaligned pointer to a tensor that has elements, a NaN,
 * infinite or negative scale, an enum out of range. (A problem with a zero dimension is valid: the
 * calls that the model finds valid there are not made, as for problems too large for the arena.) Properties:
 *   - every call returns a status in the enum; a failure leaves a one-line message;
 *   - the library never accepts what the model says is invalid;
 *   - a failed call writes nothing (the whole arena is compared with its snapshot);
 *   - a successful call writes only the elements of out and lse (every other arena element,
 *     the inputs included, keeps its bits), and agrees with the reference backend (f32 gate)
 *     run on a copy of the arena;
 *   - select and workspace_size agree with forward on success or failure.
 * Calls whose valid problem would reach outside the arena are not made (the model computes
 * every tensor's span first). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jattn.h"
#include "metrics.h"

#define ARENA_FLOATS 32768

static char described[600]; /* the call of the current input, printed when a property breaks */

#define REQUIRE(cond)                                                                                             \
    do {                                                                                                          \
        if (!(cond)) {                                                                                            \
            fprintf(stderr, "fuzz_forward: property broken: %s (line %d)\n  call: %s\n  last error: %s\n", #cond, \
                    __LINE__, described, jattn_last_error());                                                     \
            abort();                                                                                              \
        }                                                                                                         \
    } while (0)

static void describe(const jattn_problem *p, const jattn_exec *e, const int64_t *at) {
    snprintf(described, sizeof described,
             "B=%lld H=%lld Sq=%lld Skv=%lld D=%lld scale=%a dtype=%d q(%lld,%lld,%lld) k(%lld,%lld,%lld) "
             "v(%lld,%lld,%lld) out(%lld,%lld,%lld) backend=%d precision=%d memory=%d threads=%d ws=%zu "
             "at q=%lld k=%lld v=%lld out=%lld lse=%lld",
             (long long)p->batch, (long long)p->heads, (long long)p->seq_q, (long long)p->seq_kv,
             (long long)p->head_dim, (double)p->scale, (int)p->dtype, (long long)p->q.batch, (long long)p->q.head,
             (long long)p->q.token, (long long)p->k.batch, (long long)p->k.head, (long long)p->k.token,
             (long long)p->v.batch, (long long)p->v.head, (long long)p->v.token, (long long)p->out.batch,
             (long long)p->out.head, (long long)p->out.token, (int)e->backend, (int)e->precision, (int)e->memory,
             e->threads, e->workspace_bytes, (long long)at[0], (long long)at[1], (long long)at[2], (long long)at[3],
             (long long)at[4]);
}

typedef struct bytes {
    const uint8_t *p;
    size_t n;
} bytes;

static uint8_t take8(bytes *b) {
    if (!b->n) return 0;
    b->n--;
    return *b->p++;
}

static uint32_t take32(bytes *b) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)take8(b) << (8 * i);
    return v;
}

static uint64_t take64(bytes *b) { return (uint64_t)take32(b) | (uint64_t)take32(b) << 32; }

/* A stride value from a class chosen by the input: small, zero, negative, huge. */
static int64_t raw_stride(bytes *b) {
    switch (take8(b) % 6) {
    case 0: return 0;
    case 1: return -(int64_t)(take8(b) % 64) - 1;
    case 2: return (int64_t)(take64(b) >> 1) * ((take8(b) & 1) ? 1 : -1); /* anything */
    case 3: return INT64_MAX / ((int64_t)(take8(b) % 8) + 1);
    default: return (int64_t)(take32(b) % 600);
    }
}

static jattn_strides choose_strides(bytes *b, int64_t H, int64_t S, int64_t D) {
    jattn_strides s;
    switch (take8(b) % 4) {
    case 0: return jattn_strides_head_major(H, S, D);
    case 1: return jattn_strides_token_major(H, S, D);
    case 2: /* padded head-major */
        s.token = D + take8(b) % 7;
        s.head = S * s.token + take8(b) % 5;
        s.batch = H * s.head + take8(b) % 5;
        return s;
    default:
        s.batch = raw_stride(b);
        s.head = raw_stride(b);
        s.token = raw_stride(b);
        return s;
    }
}

/* Model of one tensor: its span in elements (-1: invalid or too large to place) and whether
 * two index tuples share an element (marks every element address in `mark`). */
typedef struct tensor_model {
    int64_t span; /* 1 + max offset; -1 when a stride is negative or it exceeds the arena */
    int negative; /* a negative stride */
    int overlaps; /* two elements share an address (only meaningful when span >= 0) */
} tensor_model;

static tensor_model model_tensor(const jattn_problem *p, jattn_strides s, int64_t seq, unsigned char *mark) {
    tensor_model m = {-1, 0, 0};
    const int64_t ext[3] = {p->batch, p->heads, seq}, str[3] = {s.batch, s.head, s.token};
    __int128 span = p->head_dim;
    for (int i = 0; i < 3; i++) {
        if (str[i] < 0)
            m.negative = 1;
        else
            span += (__int128)(ext[i] - 1) * str[i];
    }
    if (m.negative || span > ARENA_FLOATS) return m;
    m.span = (int64_t)span;
    memset(mark, 0, (size_t)m.span);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < seq; i++)
                for (int64_t d = 0; d < p->head_dim; d++) {
                    int64_t off = b * s.batch + h * s.head + i * s.token + d;
                    if (mark[off]) m.overlaps = 1;
                    mark[off] = 1;
                }
    return m;
}

/* Marks (in `owner`, by arena element) the elements a tensor at element offset `at` covers. */
static int mark_elements(unsigned char *owner, unsigned char bit, int64_t at, const jattn_problem *p, jattn_strides s,
                         int64_t seq) {
    int shared = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < seq; i++)
                for (int64_t d = 0; d < p->head_dim; d++) {
                    int64_t off = at + b * s.batch + h * s.head + i * s.token + d;
                    if (owner[off] & ~bit) shared |= owner[off];
                    owner[off] |= bit;
                }
    return shared;
}

static float arena_a[ARENA_FLOATS + 1], arena_b[ARENA_FLOATS + 1], snapshot[ARENA_FLOATS + 1];
static unsigned char owner[ARENA_FLOATS], scratch[ARENA_FLOATS];

static void fill_arena(uint64_t seed) {
    for (int i = 0; i <= ARENA_FLOATS; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        snapshot[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) * 4.0 - 2.0);
    }
}

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_COUNT };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static jattn_ctx *ctx; /* kept across inputs: the grow-only buffers see many sizes */
    if (!ctx) REQUIRE(jattn_ctx_create(&ctx) == JATTN_OK);
    bytes in = {data, size};

    /* ---- the problem ---- */
    jattn_problem p;
    memset(&p, 0, sizeof p);
    const uint8_t dims = take8(&in);
    p.batch = dims & 1 ? 2 : 1;
    p.heads = 1 + (dims >> 1) % 3;
    p.seq_q = 1 + take8(&in) % 12;
    p.seq_kv = 1 + take8(&in) % 12;
    p.head_dim = 1 + take8(&in) % 24;
    const uint8_t special = take8(&in);
    if (special % 16 == 0) { /* a raw dimension: zero, negative or huge */
        int64_t *dim[5] = {&p.batch, &p.heads, &p.seq_q, &p.seq_kv, &p.head_dim};
        *dim[take8(&in) % 5] = (int64_t)take64(&in);
    }
    const uint32_t scale_bits = take32(&in);
    switch (take8(&in) % 4) {
    case 0: p.scale = 0.0f; break;
    case 1: memcpy(&p.scale, &scale_bits, sizeof p.scale); break; /* any bit pattern */
    default: p.scale = (float)(scale_bits % 1000) / 256.0f; break;
    }
    p.dtype = (take8(&in) % 8 == 0) ? (jattn_dtype)(take8(&in) % 5) : JATTN_DTYPE_F32;
    const int small = p.batch >= 1 && p.batch <= 2 && p.heads >= 1 && p.heads <= 3 && p.seq_q >= 1 && p.seq_q <= 12 &&
                      p.seq_kv >= 1 && p.seq_kv <= 12 && p.head_dim >= 1 && p.head_dim <= 24;
    const int64_t H = small ? p.heads : 1, Sq = small ? p.seq_q : 1, Skv = small ? p.seq_kv : 1,
                  D = small ? p.head_dim : 1;
    p.q = choose_strides(&in, H, Sq, D);
    p.k = choose_strides(&in, H, Skv, D);
    p.v = (take8(&in) % 4 == 0) ? p.k : choose_strides(&in, H, Skv, D);
    p.out = choose_strides(&in, H, Sq, D);

    /* ---- the exec ---- */
    jattn_exec e;
    memset(&e, 0, sizeof e);
    const uint8_t ex = take8(&in);
    e.backend = ex % 8 == 7 ? (jattn_backend)(int8_t)take8(&in) : (jattn_backend)(ex % 3); /* auto, ref, cpu */
    e.precision = ex % 16 == 5 ? (jattn_precision)(int8_t)take8(&in) : JATTN_PRECISION_F32;
    e.memory = ex % 32 == 9 ? (jattn_memory)(int8_t)take8(&in) : JATTN_MEMORY_HOST;
    e.threads = (int)(take8(&in) % 5) - (ex % 64 == 17 ? 3 : 0);
    void *workspace = NULL;
    if (take8(&in) % 4 == 0) {
        e.workspace_bytes = take32(&in) % 20000;
        workspace = malloc(e.workspace_bytes ? e.workspace_bytes : 1);
        e.workspace = workspace;
    }
    const int use_ctx = take8(&in) & 1;

    /* ---- the pointers ---- */
    const int64_t seqs[T_COUNT] = {p.seq_q, p.seq_kv, p.seq_kv, p.seq_q, 0};
    const jattn_strides *strs[T_COUNT] = {&p.q, &p.k, &p.v, &p.out, NULL};
    tensor_model tm[T_COUNT];
    /* hard: invalid whatever the sizes; model: invalid by the element-address model. */
    int hard_invalid = p.batch < 0 || p.heads < 0 || p.seq_q < 0 || p.seq_kv < 0 || p.head_dim < 1;
    /* a tensor without elements may have any pointer (its strides are still checked for sign) */
    const int empty_q = p.batch == 0 || p.heads == 0 || p.seq_q == 0,
              empty_kv = p.batch == 0 || p.heads == 0 || p.seq_kv == 0;
    const int empty[T_COUNT] = {empty_q, empty_kv, empty_kv, empty_q, empty_q};
    hard_invalid |= !(p.scale >= 0.0f) || isinf(p.scale) || p.dtype != JATTN_DTYPE_F32;
    hard_invalid |= (int)e.backend < 0 || (int)e.backend >= JATTN_BACKEND_COUNT;
    hard_invalid |= (int)e.precision < 0 || (int)e.precision > JATTN_PRECISION_TF32;
    hard_invalid |= (int)e.memory < 0 || (int)e.memory > JATTN_MEMORY_DEVICE || e.threads < 0;
    int model_invalid = 0;
    int too_big = 0;
    for (int t = 0; t < T_LSE; t++) {
        if (small) {
            tm[t] = model_tensor(&p, *strs[t], seqs[t], scratch);
            hard_invalid |= tm[t].negative;
            model_invalid |= tm[t].span >= 0 && tm[t].overlaps;
            too_big |= !tm[t].negative && tm[t].span < 0;
        } else {
            tm[t].span = -1;
            const jattn_strides *x = strs[t];
            hard_invalid |= x->batch < 0 || x->head < 0 || x->token < 0;
        }
    }
    tm[T_LSE].span = small ? p.batch * p.heads * p.seq_q : -1;
    tm[T_LSE].negative = tm[T_LSE].overlaps = 0;

    const void *ptr[T_COUNT];
    int64_t at[T_COUNT] = {0};
    int64_t next = 0;
    const uint8_t arrangement = take8(&in);
    for (int t = 0; t < T_COUNT; t++) {
        const int64_t span = tm[t].span > 0 ? tm[t].span : 1;
        const uint8_t mode = (arrangement >> (t % 4 * 2)) & 3;
        const uint8_t how = t == T_LSE ? take8(&in) % 3 : mode == 3 ? take8(&in) % 8 : 0;
        if (mode == 3 && how == 0) {
            ptr[t] = NULL;
            hard_invalid |= t != T_LSE && !empty[t];
            at[t] = -1;
            continue;
        }
        if (t == T_LSE && how == 0) {
            ptr[t] = NULL;
            at[t] = -1;
            continue;
        }
        if (mode == 1 || mode == 2 || (mode == 3 && how > 1)) /* anywhere: may overlap the others */
            at[t] = (int64_t)(take32(&in) % (ARENA_FLOATS + 1 - (span < ARENA_FLOATS ? span : ARENA_FLOATS)));
        else { /* after the previous ones */
            at[t] = next;
            next += span;
        }
        if (at[t] + span > ARENA_FLOATS) too_big = 1;
        ptr[t] = arena_a + (at[t] < ARENA_FLOATS ? at[t] : 0);
        if (mode == 3 && how == 1) { /* misaligned by 1..3 bytes */
            ptr[t] = (const char *)ptr[t] + 1 + take8(&in) % 3;
            hard_invalid |= !empty[t];
        }
    }
    /* Outputs sharing an element with an input or with each other. */
    if (small && !hard_invalid && !model_invalid && !too_big) {
        memset(owner, 0, sizeof owner);
        for (int t = 0; t < T_OUT; t++) mark_elements(owner, (unsigned char)(1u << t), at[t], &p, *strs[t], seqs[t]);
        int shared = mark_elements(owner, 1u << T_OUT, at[T_OUT], &p, p.out, p.seq_q);
        if (at[T_LSE] >= 0)
            for (int64_t j = 0; j < tm[T_LSE].span; j++)
                shared |= owner[at[T_LSE] + j], owner[at[T_LSE] + j] |= 1u << T_LSE;
        if (shared) model_invalid = 1;
    }
    model_invalid |= hard_invalid;
    if (!model_invalid && (!small || too_big)) { /* maybe valid, and would reach outside the arena: not made */
        free(workspace);
        return 0;
    }

    /* ---- the calls ---- */
    describe(&p, &e, at);
    if (getenv("FUZZ_FORWARD_DESCRIBE")) fprintf(stderr, "call: %s\n", described);
    fill_arena(take64(&in) ^ size);
    memcpy(arena_a, snapshot, sizeof snapshot);
    jattn_selection sel;
    memset(&sel, 0, sizeof sel);
    jattn_status st_sel = jattn_select(&p, &e, &sel);
    size_t ws = 0;
    jattn_status st_ws = jattn_workspace_size(&p, &e, &ws);
    REQUIRE(st_sel == st_ws);
    jattn_status st = jattn_forward(use_ctx ? ctx : NULL, &p, &e, ptr[T_Q], ptr[T_K], ptr[T_V], (void *)ptr[T_OUT],
                                    (float *)ptr[T_LSE]);
    REQUIRE((int)st >= 0 && (int)st < JATTN_STATUS_COUNT);
    if (st != JATTN_OK) {
        REQUIRE(jattn_last_error()[0] != '\0' && strchr(jattn_last_error(), '\n') == NULL);
        REQUIRE(memcmp(arena_a, snapshot, sizeof snapshot) == 0); /* nothing written */
        free(workspace);
        return 0;
    }
    REQUIRE(!model_invalid);
    REQUIRE(st_sel == JATTN_OK);
    REQUIRE(jattn_last_error()[0] == '\0');
    REQUIRE(sel.backend != JATTN_BACKEND_AUTO && sel.kernel && sel.isa && sel.threads >= 1);
    /* Only out and lse elements were written. */
    for (int64_t j = 0; j < ARENA_FLOATS + 1; j++)
        if (!(j < ARENA_FLOATS && (owner[j] & (1u << T_OUT | 1u << T_LSE))))
            REQUIRE(memcmp(&arena_a[j], &snapshot[j], sizeof(float)) == 0);
    /* The reference on a copy agrees. The arena holds values in [-2, 2), so |logit| <= bound
     * = scale * 4 * D. float32 logits carry a rounding error up to about (D + 2) * 2^-24 * bound,
     * which moves an output by at most that times max |v_j - out| <= 4: that is the tolerance
     * (absolute: these outputs are a handful of elements, often near 0 by cancellation, where
     * the relative rel_l2 gate of the parity tests means nothing); lse gets its gate for
     * bound <= 8.
     * Past FLT_MAX / 2 the logits or their differences overflow float32; below, every output
     * must be finite. */
    const double scale_used = p.scale > 0 ? (double)p.scale : 1.0 / sqrt((double)p.head_dim);
    const double logit_bound = scale_used * 4.0 * (double)p.head_dim;
    if (logit_bound <= 1e37)
        for (int64_t b = 0; b < p.batch; b++)
            for (int64_t h = 0; h < p.heads; h++)
                for (int64_t i = 0; i < p.seq_q; i++)
                    for (int64_t d = 0; d < p.head_dim; d++)
                        REQUIRE(isfinite(
                            ((const float *)ptr[T_OUT])[b * p.out.batch + h * p.out.head + i * p.out.token + d]));
    if (sel.backend != JATTN_BACKEND_REF && e.precision == JATTN_PRECISION_F32 && logit_bound <= 1e4) {
        memcpy(arena_b, snapshot, sizeof snapshot);
        const ptrdiff_t shift = arena_b - arena_a;
        jattn_exec r = {0};
        r.backend = JATTN_BACKEND_REF;
        float *lse_b = ptr[T_LSE] ? (float *)ptr[T_LSE] + shift : NULL;
        REQUIRE(jattn_forward(NULL, &p, &r, (const float *)ptr[T_Q] + shift, (const float *)ptr[T_K] + shift,
                              (const float *)ptr[T_V] + shift, (float *)ptr[T_OUT] + shift, lse_b) == JATTN_OK);
        jattn_metrics m;
        jattn_metrics_compute(&p, (const float *)ptr[T_OUT], (const float *)ptr[T_OUT] + shift, &m);
        const double tol = 4.0 * ((double)p.head_dim + 2.0) * 0x1p-24 * logit_bound + 1e-5;
        if (!(m.max_abs <= tol && m.nonfinite == 0))
            fprintf(stderr, "fuzz_forward: rel_l2 %.3g max_abs %.3g (tolerance %.3g) max|ref| %.3g nonfinite %lld\n",
                    m.rel_l2, m.max_abs, tol, m.max_ref, (long long)m.nonfinite);
        REQUIRE(m.max_abs <= tol && m.nonfinite == 0);
        if (lse_b && logit_bound <= 8)
            REQUIRE(jattn_lse_pass((const float *)ptr[T_LSE], lse_b, tm[T_LSE].span, JATTN_PRECISION_F32));
    }
    free(workspace);
    return 0;
}
