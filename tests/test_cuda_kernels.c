/* Small calls of the cuda kernel the environment forces, each checked against the float64 reference: the
 * workload bench/gpu/battery.sh runs under compute-sanitizer (memcheck, racecheck, synccheck, initcheck)
 * once per tool and kernel (issue 37), and a test of its own (ctest, AUTO's kernels).
 *
 * JATTN_CUDA_KERNEL (v1, v6, v7) forces the forward's version, JATTN_CUDA_BWD_KERNEL (v3, v4) the
 * backward's; unset, AUTO chooses. Shapes with partial tiles at head dims the kernels take (64 and 128 for
 * the sm_90a ones, others for the portable ones; a single key, a single query), each with and without key
 * lengths (the key padding pre-pass, and the backward v3's zeroing of dk and dv), f32 and (forward) tf32,
 * lse and dlse, half on a caller workspace and half on the stream-ordered pool, so that every pre-pass of
 * the forced version (v6's and v7's splits of K and V, the backward v3's and v4's records) runs; and a call
 * with every mask part (grouped heads, causal, segments, a key bias, key lengths: the masked instances,
 * their tile walk and their non-finite fix-up path untaken), where the pass serves it. Each call runs
 * through its plan (jattn_plan_create), whose selection names the kernel that ran. Device
 * pointers on a non-blocking stream (inputs copied on it), outputs poisoned on it, every result against
 * the reference under the gate (normal inputs). A shape the forced version refuses (UNSUPPORTED: v6 at
 * head_dim 72) or hands to another version at selection (the backward v4 to v3 at head_dim 72) is left
 * out; a version that ran no call at all fails. Prints the kernels that ran. The backward part also runs
 * masked calls (run_masked below: grouped-query heads, causal, blocks, segments, a key bias, with key padding;
 * the backward v3's masked kernels and pre-pass), on their own as the part `masks`.
 *
 * usage: test_cuda_kernels [forward|backward|masks|all]. Exits 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "jattn_internal.h" /* cuda/cuda_internal.h */
#include "harness.h"

static jt_tally tally;

#define CUDA_OK(call)                                                                       \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* The kernels that ran, each once in the list. */
static char ran[1024];
static void note_kernel(const char *name) {
    if (!strstr(ran, name) && strlen(ran) + strlen(name) + 2 < sizeof ran) strcat(strcat(ran, " "), name);
}

static float *dev_copy(const float *h, int64_t n, cudaStream_t s) {
    float *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, (size_t)(n > 0 ? n : 1) * sizeof(float)));
    if (h) CUDA_OK(cudaMemcpyAsync(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, s));
    return d;
}

static void fetch(float *h, const float *d, int64_t n, cudaStream_t s) {
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
}

/* The forced versions' kernel name prefixes ("cuda_v6", "cuda_bwd_v4"; "" under AUTO): forward, backward. */
static char forced[2][16];

/* The calls of one shape: none, key lengths, and a mask of every part (grouped heads where H is even, causal
 * bottom-right, two segments per batch, a per-head key bias with some -inf, key lengths), each where the forced
 * version's plan takes it. */
enum { V_NONE, V_LEN, V_MASK, V_COUNT };
static const char *const variant_names[V_COUNT] = {"", " kv_len", " mask(gqa causal-br segments bias kv_len)"};

/* One shape: the forward (both precisions the backend takes) or the backward, each variant. */
static void run_shape(const int64_t sh[5], int backward, jt_rng *r, cudaStream_t s, int *calls) {
    const int64_t B = sh[0], H = sh[1], Sq = sh[2], Skv = sh[3], D = sh[4];
    const int64_t nq = B * H * Sq * D, nk = B * H * Skv * D, nl = B * H * Sq;
    float *h[7];
    const int64_t n[7] = {nq, nk, nk, nq, nl, nq, nl}; /* q k v out lse dout dlse */
    for (int i = 0; i < 7; i++) {
        h[i] = malloc((size_t)n[i] * sizeof(float));
        if (!h[i]) exit(1);
        for (int64_t e = 0; e < n[i]; e++) h[i][e] = (float)jt_normal(r);
    }
    float *got = malloc((size_t)(nq > nk ? nq : nk) * sizeof(float)), *ref[3];
    for (int t = 0; t < 3; t++) ref[t] = malloc((size_t)(t ? nk : nq) * sizeof(float));
    int64_t kv_len[4], seg[4][3];
    for (int64_t b = 0; b < B; b++) {
        kv_len[b] = b % 2 ? 1 + (int64_t)(jt_uniform(r) * (double)Skv) : Skv - (Skv > 3);
        seg[b][0] = 0, seg[b][2] = Sq < Skv ? Sq : Skv, seg[b][1] = (int64_t)(jt_uniform(r) * (double)(seg[b][2] + 1));
    }
    float *bias = malloc((size_t)(B * H * Skv) * sizeof(float));
    for (int64_t x = 0; x < B * H * Skv; x++) bias[x] = jt_uniform(r) < 0.1 ? -INFINITY : (float)jt_normal(r);
    for (int variant = 0; variant < V_COUNT; variant++) {
        jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
        jattn_mask m = {0};
        if (variant >= V_LEN) m.padding.kv_len = kv_len;
        if (variant == V_MASK) {
            p.kv_heads = H % 2 == 0 ? H / 2 : H;
            p.k = p.v = jattn_strides_head_major(p.kv_heads, Skv, D);
            m.causal = JATTN_CAUSAL_BOTTOM_RIGHT;
            m.cu_seqlens_q = m.cu_seqlens_kv = seg[0];
            m.num_segments = 2;
            m.segments_batch_stride = 3;
            m.key_bias = bias;
            m.key_bias_batch_stride = H * Skv;
            m.key_bias_head_stride = Skv;
        }
        jattn_exec e = {0};
        e.backend = JATTN_BACKEND_REF;
        /* the reference: out, lse (into h[3], h[4]: the backward's inputs), and the gradients */
        jattn_status st = jattn_forward_masked(NULL, &p, &e, h[0], h[1], h[2], &m, h[3], h[4]);
        if (st == JATTN_OK && backward)
            st = jattn_backward_masked(NULL, &p, NULL, &e, h[0], h[1], h[2], h[3], h[4], h[5], h[6], &m, ref[0], ref[1],
                                       ref[2]);
        if (st != JATTN_OK) {
            printf("FAIL reference: %s\n", jattn_last_error());
            jt_tally_add(&tally, 0);
            continue;
        }
        float *d[7];
        for (int i = 0; i < 7; i++) d[i] = dev_copy(h[i], n[i], s);
        float *dg[3] = {dev_copy(NULL, nq, s), dev_copy(NULL, nk, s), dev_copy(NULL, nk, s)};
        /* the mask's arrays in device memory */
        int64_t *dlen = NULL, *dseg = NULL;
        CUDA_OK(cudaMalloc((void **)&dlen, sizeof kv_len));
        CUDA_OK(cudaMalloc((void **)&dseg, sizeof seg));
        CUDA_OK(cudaMemcpyAsync(dlen, kv_len, sizeof kv_len, cudaMemcpyHostToDevice, s));
        CUDA_OK(cudaMemcpyAsync(dseg, seg, sizeof seg, cudaMemcpyHostToDevice, s));
        float *dbias = dev_copy(bias, B * H * Skv, s);
        jattn_mask dm = m;
        if (m.padding.kv_len) dm.padding.kv_len = dlen;
        if (m.cu_seqlens_q) dm.cu_seqlens_q = dm.cu_seqlens_kv = dseg;
        if (m.key_bias) dm.key_bias = dbias;
        for (int pi = 0; pi < (backward ? 1 : 2); pi++) {
            e.backend = JATTN_BACKEND_CUDA;
            e.memory = JATTN_MEMORY_DEVICE;
            e.cuda_stream = s;
            e.precision = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
            /* the kernel that runs: the call's plan's (the same decision the call makes) */
            const jattn_pass pass = backward ? JATTN_PASS_BACKWARD : JATTN_PASS_FORWARD;
            const char *kernel = jt_plan_kernel(pass, &p, &dm, &e);
            if (!strcmp(kernel, "refused")) continue; /* a forced version's limit, or a mask the pass does not serve */
            if (forced[backward][0] && strncmp(kernel, forced[backward], strlen(forced[backward])))
                continue; /* the forced version hands this shape to another (its own run covers that one) */
            jattn_plan *plan = NULL;
            st = jattn_plan_create(&plan, pass, &p, NULL, &dm, &e);
            if (!jt_expect_status(st, JATTN_OK, "plan")) {
                jt_tally_add(&tally, 0);
                continue;
            }
            size_t need = 0;
            void *ws = NULL;
            if (variant % 2 == (int)(D % 2)) { /* half the calls on a caller workspace */
                need = jattn_plan_workspace_size(plan);
                if (need) CUDA_OK(cudaMalloc(&ws, need));
            }
            char what[200];
            snprintf(what, sizeof what, "%s B=%lld H=%lld Sq=%lld Skv=%lld D=%lld%s %s",
                     backward ? "backward" : "forward", (long long)B, (long long)H, (long long)Sq, (long long)Skv,
                     (long long)D, variant_names[variant], pi ? "tf32" : "f32");
            if (backward) {
                for (int t = 0; t < 3; t++)
                    CUDA_OK(cudaMemsetAsync(dg[t], 0xFF, (size_t)(t ? nk : nq) * sizeof(float), s));
                st = jattn_plan_backward(plan, NULL, s, ws, need, d[0], d[1], d[2], d[3], d[4], d[5], d[6], &dm, dg[0],
                                         dg[1], dg[2]);
            } else {
                CUDA_OK(cudaMemsetAsync(dg[0], 0xFF, (size_t)nq * sizeof(float), s));
                CUDA_OK(cudaMemsetAsync(dg[1], 0xFF, (size_t)nl * sizeof(float), s));
                st = jattn_plan_forward(plan, NULL, s, ws, need, d[0], d[1], d[2], &dm, dg[0], dg[1]);
            }
            int ok = jt_expect_status(st, JATTN_OK, what);
            if (ok) {
                note_kernel(kernel);
                (*calls)++;
                jattn_metrics m2 = {0};
                const int64_t nkv = B * (p.kv_heads ? p.kv_heads : H) * Skv * D; /* dk, dv: the key/value heads' */
                if (backward) {
                    for (int t = 0; t < 3 && ok; t++) {
                        fetch(got, dg[t], t ? nkv : nq, s);
                        jattn_metrics_compute_dense(got, ref[t], t ? nkv : nq, &m2);
                        ok = jattn_metrics_pass_backward(&m2);
                    }
                } else {
                    fetch(got, dg[0], nq, s);
                    jattn_metrics_compute_dense(got, h[3], nq, &m2);
                    ok = jattn_metrics_pass(&m2, e.precision);
                    fetch(got, dg[1], nl, s);
                    ok = ok && jattn_lse_pass(got, h[4], nl, e.precision);
                }
                if (!ok || getenv("JATTN_TEST_VERBOSE"))
                    printf("%s %s (%s): rel_l2 %.3g max_abs %.3g (seed %llu)\n", ok ? "ok  " : "FAIL", what, kernel,
                           m2.rel_l2, m2.max_abs, (unsigned long long)jt_seed());
            }
            jt_tally_add(&tally, ok);
            CUDA_OK(cudaStreamSynchronize(s));
            (void)cudaFree(ws);
            jattn_plan_free(plan);
        }
        for (int i = 0; i < 7; i++) (void)cudaFree(d[i]);
        for (int t = 0; t < 3; t++) (void)cudaFree(dg[t]);
        (void)cudaFree(dlen);
        (void)cudaFree(dseg);
        (void)cudaFree(dbias);
    }
    for (int i = 0; i < 7; i++) free(h[i]);
    for (int t = 0; t < 3; t++) free(ref[t]);
    free(got);
    free(bias);
}

/* ---- the backward with a mask (jattn_backward_masked: the backward v3's masked kernels; v4's windows, bias) ----
 * Grouped-query heads, causal in both alignments, block-causal, segments (with causal inside, per batch),
 * a key bias (-inf and -10000 entries), key lengths and a key mask, alone and together, at head dims of each
 * kind of instance (16, 40, 64, 72, 128, 256: the half kernels), cross-attention and a single query; every
 * array on the device (the mask's too), the call on the test's stream, half on a caller workspace; the
 * gradients against the ref backward under the gate (f32; the tf32 cases rel_l2 JATTN_GATE_TF32_REL_L2), and a
 * call captured into a CUDA graph and replayed twice bit for bit that of the direct call (the masked kernels'
 * determinism). */
typedef struct mask_case {
    int64_t B, H, Hkv, Sq, Skv, D;
    jattn_causal causal;
    int blocks, segments, bias, pad; /* bias: 0 none, 1 per batch, 2 per batch and head; pad: 0, kv_len, key mask */
    int tf32;                        /* the tf32 precision (gate rel_l2 JATTN_GATE_TF32_REL_L2), else f32 */
} mask_case;

static const mask_case mask_cases[] = {
    {2, 4, 2, 70, 70, 64, JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0},       /* grouped heads, causal */
    {1, 2, 1, 33, 77, 128, JATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 1, 0},  /* one key/value head, cross, key lengths */
    {1, 2, 2, 40, 40, 256, JATTN_CAUSAL_NONE, 3, 0, 2, 0, 0},          /* blocks, a bias per head (half kernels) */
    {2, 3, 3, 50, 45, 40, JATTN_CAUSAL_TOP_LEFT, 0, 3, 1, 2, 0},       /* segments per batch, causal, a key mask */
    {1, 4, 2, 100, 100, 16, JATTN_CAUSAL_BOTTOM_RIGHT, 2, 2, 2, 1, 0}, /* every part */
    {1, 2, 1, 1, 50, 72, JATTN_CAUSAL_NONE, 0, 0, 1, 0, 0},            /* a single query, a bias, one key/value head */
    {1, 2, 2, 40, 50, 5, JATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 1, 1, 0},    /* head_dim 5: v1's butterflies, masked */
    /* causal alone at head_dim 64 and 128: on Hopper the backward v4's (every key attended) */
    {1, 3, 3, 200, 200, 128, JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0},     /* the diagonal m-blocks, pair order */
    {2, 2, 2, 290, 150, 64, JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0},      /* seq_q > seq_kv */
    {1, 2, 2, 300, 130, 128, JATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0}, /* rows with no key: dq 0 */
    {2, 3, 3, 70, 390, 64, JATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0},   /* seq_q < seq_kv */
    /* grouped heads alone and with causal at head_dim 64 and 128: the backward v4's query heads' dK, dV summed over
     * each group (bwd_v4_group_sum), items cut between CTAs included */
    {2, 6, 2, 150, 300, 128, JATTN_CAUSAL_NONE, 0, 0, 0, 0, 0},    /* 3 query heads a key/value head */
    {1, 4, 1, 64, 200, 64, JATTN_CAUSAL_NONE, 0, 0, 0, 0, 0},      /* one key/value head (MQA) */
    {1, 4, 2, 260, 260, 64, JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0}, /* grouped and causal */
    /* key padding alone at head_dim 64 and 128: the backward v4's records in kv_index's order (the attended keys
     * first), dK, dV written back through it (the unattended rows 0), alone and through the group sum */
    {2, 4, 4, 130, 300, 128, JATTN_CAUSAL_NONE, 0, 0, 0, 2, 0}, /* a key mask */
    {2, 4, 2, 100, 260, 64, JATTN_CAUSAL_NONE, 0, 0, 0, 2, 0},  /* a key mask, grouped heads */
    {2, 2, 2, 70, 200, 64, JATTN_CAUSAL_NONE, 0, 0, 0, 1, 0},   /* key lengths, one of them short */
    /* the windows at head_dim 64 and 128: the backward v4's table of each key block's m-blocks (segments, blocks,
     * key padding with causal, top-left causal with fewer queries than keys), blocks no query attends, CTAs with
     * no unit (fewer units than the unmasked grid's CTAs) and items cut between CTAs */
    {1, 2, 2, 520, 520, 128, JATTN_CAUSAL_NONE, 0, 4, 0, 0, 0},         /* packed sequences */
    {2, 3, 3, 200, 180, 64, JATTN_CAUSAL_TOP_LEFT, 0, 3, 0, 2, 0},      /* segments per batch, causal, a key mask */
    {1, 2, 2, 300, 300, 128, JATTN_CAUSAL_NONE, 4, 0, 0, 0, 0},         /* block-causal */
    {2, 2, 2, 150, 260, 64, JATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 1, 0},  /* key lengths with causal */
    {2, 4, 2, 260, 260, 128, JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 2, 0},     /* a key mask with causal, grouped heads */
    {1, 3, 3, 100, 300, 128, JATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0},     /* top-left with seq_q < seq_kv */
    {2, 2, 2, 300, 300, 64, JATTN_CAUSAL_BOTTOM_RIGHT, 3, 3, 0, 1, 0},  /* every part but a key bias */
    {1, 1, 1, 600, 600, 64, JATTN_CAUSAL_NONE, 0, 6, 0, 0, 0},          /* fewer units than CTAs */
    {2, 6, 2, 400, 400, 128, JATTN_CAUSAL_BOTTOM_RIGHT, 0, 5, 0, 0, 0}, /* segments, causal, grouped heads */
    /* a key bias at head_dim 64 and 128 (-inf and -10000 entries): on Hopper the backward v4's windows instance (alone:
     * the table's trivial rows), the bias staged per query head in the records' key order, keys -inf for every head
     * of a group left out of the records; alone, with each other part and all of them, f32 and tf32 */
    {2, 4, 4, 200, 260, 128, JATTN_CAUSAL_NONE, 0, 0, 1, 0, 0},         /* alone, per batch */
    {2, 4, 4, 130, 300, 64, JATTN_CAUSAL_NONE, 0, 0, 2, 0, 0},          /* alone, per head */
    {2, 6, 2, 150, 300, 128, JATTN_CAUSAL_NONE, 0, 0, 2, 0, 0},         /* per head, 3 query heads a key/value head */
    {1, 4, 1, 64, 200, 64, JATTN_CAUSAL_NONE, 0, 0, 1, 0, 0},           /* per batch, one key/value head (MQA) */
    {2, 4, 4, 130, 300, 128, JATTN_CAUSAL_NONE, 0, 0, 2, 2, 0},         /* a key mask */
    {2, 2, 2, 150, 260, 64, JATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 1, 1, 0},  /* causal bottom-right, key lengths */
    {1, 3, 3, 200, 200, 128, JATTN_CAUSAL_TOP_LEFT, 0, 0, 2, 0, 0},     /* causal top-left */
    {1, 3, 3, 100, 300, 64, JATTN_CAUSAL_TOP_LEFT, 0, 0, 2, 0, 0},      /* top-left with seq_q < seq_kv */
    {1, 2, 2, 300, 300, 128, JATTN_CAUSAL_NONE, 4, 0, 2, 0, 0},         /* block-causal */
    {2, 4, 2, 260, 260, 64, JATTN_CAUSAL_TOP_LEFT, 0, 3, 2, 0, 0},      /* segments, causal, grouped heads */
    {2, 4, 2, 300, 300, 128, JATTN_CAUSAL_BOTTOM_RIGHT, 3, 3, 2, 1, 0}, /* every part */
    {2, 4, 2, 300, 300, 64, JATTN_CAUSAL_BOTTOM_RIGHT, 3, 3, 1, 2, 0},  /* every part, a key mask */
    {2, 4, 4, 200, 260, 128, JATTN_CAUSAL_NONE, 0, 0, 2, 0, 1},         /* tf32: alone */
    {2, 4, 2, 260, 260, 64, JATTN_CAUSAL_TOP_LEFT, 0, 3, 1, 1, 1},      /* tf32: segments, grouped heads, lengths */
    {2, 4, 2, 300, 300, 128, JATTN_CAUSAL_BOTTOM_RIGHT, 3, 3, 2, 2, 1}, /* tf32: every part */
};

/* n + 1 sorted offsets from 0 to last. */
static void cut_offsets(int64_t *o, int n, int64_t last, jt_rng *r) {
    o[0] = 0, o[n] = last;
    for (int i = 1; i < n; i++) o[i] = (int64_t)(jt_uniform(r) * (double)(last + 1));
    for (int i = 1; i < n; i++)
        for (int j = i; j > 1 && o[j] < o[j - 1]; j--) {
            const int64_t t = o[j];
            o[j] = o[j - 1], o[j - 1] = t;
        }
}

static void *dev_bytes(const void *h, size_t n, cudaStream_t s) {
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, n > 0 ? n : 1));
    if (h && n) CUDA_OK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
    return d;
}

static void run_masked(const mask_case *mc, jt_rng *r, cudaStream_t s, int index, int *calls) {
    const int64_t B = mc->B, H = mc->H, Hkv = mc->Hkv, Sq = mc->Sq, Skv = mc->Skv, D = mc->D;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    p.kv_heads = Hkv;
    p.k = p.v = jattn_strides_head_major(Hkv, Skv, D);
    const int64_t nq = B * H * Sq * D, nk = B * Hkv * Skv * D, nl = B * H * Sq;
    float *h[7];
    const int64_t n[7] = {nq, nk, nk, nq, nl, nq, nl}; /* q k v out lse dout dlse */
    for (int i = 0; i < 7; i++) {
        h[i] = malloc((size_t)n[i] * sizeof(float));
        if (!h[i]) exit(1);
        for (int64_t e = 0; e < n[i]; e++) h[i][e] = (float)jt_normal(r);
    }
    /* the mask, on the host */
    enum { MAXP = 8 };
    int64_t block_q[MAXP + 1], block_kv[MAXP + 1], seg_q[2][MAXP + 1], seg_kv[2][MAXP + 1], kv_len[2];
    uint8_t *key_mask = malloc((size_t)(B * Skv));
    float *bias = malloc((size_t)(B * H * Skv) * sizeof(float));
    if (!key_mask || !bias) exit(1);
    jattn_mask m;
    memset(&m, 0, sizeof m);
    m.causal = mc->causal;
    if (mc->blocks) {
        cut_offsets(block_q, mc->blocks, Sq, r);
        cut_offsets(block_kv, mc->blocks, Skv, r);
        m.block_q = block_q, m.block_kv = block_kv, m.num_blocks = mc->blocks;
    }
    if (mc->segments) {
        for (int64_t b = 0; b < B; b++) {
            cut_offsets(seg_q[b], mc->segments, Sq - (b ? Sq / 5 : 0), r); /* batch 1: queries past the last one */
            cut_offsets(seg_kv[b], mc->segments, Skv, r);
        }
        m.cu_seqlens_q = seg_q[0], m.cu_seqlens_kv = seg_kv[0], m.num_segments = mc->segments;
        m.segments_batch_stride = B > 1 ? MAXP + 1 : 0;
    }
    if (mc->bias) {
        for (int64_t e = 0; e < B * H * Skv; e++) {
            const double u = jt_uniform(r);
            bias[e] = u < 0.1 ? -INFINITY : u < 0.2 ? -10000.0f : (float)jt_normal(r);
        }
        m.key_bias = bias;
        m.key_bias_batch_stride = H * Skv;
        m.key_bias_head_stride = mc->bias == 2 ? Skv : 0;
    }
    if (mc->pad == 1) {
        for (int64_t b = 0; b < B; b++) kv_len[b] = b % 2 ? 1 + (int64_t)(jt_uniform(r) * (double)Skv) : Skv - 3;
        m.padding.kv_len = kv_len;
    } else if (mc->pad == 2) {
        for (int64_t e = 0; e < B * Skv; e++) key_mask[e] = jt_uniform(r) < 0.7;
        m.padding.mask = key_mask, m.padding.mask_batch = B, m.padding.mask_keys = Skv;
    }
    char what[200];
    snprintf(what, sizeof what,
             "backward masked B=%lld H=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld causal=%d blocks=%d "
             "segments=%d bias=%d pad=%d %s",
             (long long)B, (long long)H, (long long)Hkv, (long long)Sq, (long long)Skv, (long long)D, (int)mc->causal,
             mc->blocks, mc->segments, mc->bias, mc->pad, mc->tf32 ? "tf32" : "f32");
    /* the reference: out, lse (h[3], h[4]) and the gradients */
    float *ref[3] = {malloc((size_t)nq * sizeof(float)), malloc((size_t)nk * sizeof(float)),
                     malloc((size_t)nk * sizeof(float))};
    float *got = malloc((size_t)(nq > nk ? nq : nk) * sizeof(float));
    if (!ref[0] || !ref[1] || !ref[2] || !got) exit(1);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_REF;
    jattn_status st = jattn_forward_masked(NULL, &p, &e, h[0], h[1], h[2], &m, h[3], h[4]);
    if (st == JATTN_OK)
        st = jattn_backward_masked(NULL, &p, NULL, &e, h[0], h[1], h[2], h[3], h[4], h[5], h[6], &m, ref[0], ref[1],
                                   ref[2]);
    if (!jt_expect_status(st, JATTN_OK, "the reference of a masked backward")) {
        jt_tally_add(&tally, 0);
        goto out;
    }
    {
        /* every array on the device, the mask's too */
        float *d[7], *dg[3];
        for (int i = 0; i < 7; i++) d[i] = dev_bytes(h[i], (size_t)n[i] * sizeof(float), s);
        for (int t = 0; t < 3; t++) dg[t] = dev_bytes(NULL, (size_t)(t ? nk : nq) * sizeof(float), s);
        jattn_mask dm = m;
        void *dptr[7] = {NULL};
        if (m.block_q) {
            dm.block_q = dptr[0] = dev_bytes(block_q, sizeof block_q, s);
            dm.block_kv = dptr[1] = dev_bytes(block_kv, sizeof block_kv, s);
        }
        if (m.cu_seqlens_q) {
            dm.cu_seqlens_q = dptr[2] = dev_bytes(seg_q, sizeof seg_q, s);
            dm.cu_seqlens_kv = dptr[3] = dev_bytes(seg_kv, sizeof seg_kv, s);
        }
        if (m.key_bias) dm.key_bias = dptr[4] = dev_bytes(bias, (size_t)(B * H * Skv) * sizeof(float), s);
        if (m.padding.kv_len) dm.padding.kv_len = dptr[5] = dev_bytes(kv_len, sizeof kv_len, s);
        if (m.padding.mask) dm.padding.mask = dptr[6] = dev_bytes(key_mask, (size_t)(B * Skv), s);
        e.backend = JATTN_BACKEND_CUDA;
        e.memory = JATTN_MEMORY_DEVICE;
        e.cuda_stream = s;
        e.precision = mc->tf32 ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
        jattn_plan *plan = NULL;
        st = jattn_plan_create(&plan, JATTN_PASS_BACKWARD, &p, NULL, &m, &e);
        jattn_selection sel;
        if (st == JATTN_OK) jattn_plan_selection(plan, &sel);
        void *ws = NULL;
        const size_t need = st == JATTN_OK ? jattn_plan_workspace_size(plan) : 0;
        if (st == JATTN_OK && index % 2 && need) CUDA_OK(cudaMalloc(&ws, need)); /* half on a caller workspace */
        int ok = jt_expect_status(st, JATTN_OK, what);
        if (ok && forced[1][0] && strncmp(sel.kernel, forced[1], strlen(forced[1]))) {
            ok = -1; /* the forced version hands masks to another (its own run covers that one) */
        } else if (ok) {
            for (int t = 0; t < 3; t++) CUDA_OK(cudaMemsetAsync(dg[t], 0xFF, (size_t)(t ? nk : nq) * sizeof(float), s));
            st = jattn_plan_backward(plan, NULL, s, ws, ws ? need : 0, d[0], d[1], d[2], d[3], d[4], d[5], d[6], &dm,
                                     dg[0], dg[1], dg[2]);
            ok = jt_expect_status(st, JATTN_OK, what);
            jattn_metrics mt = {0};
            for (int t = 0; t < 3 && ok; t++) {
                fetch(got, dg[t], t ? nk : nq, s);
                jattn_metrics_compute_dense(got, ref[t], t ? nk : nq, &mt);
                ok = mc->tf32 ? mt.rel_l2 <= JATTN_GATE_TF32_REL_L2 && !mt.nonfinite : jattn_metrics_pass_backward(&mt);
            }
            if (ok) note_kernel(sel.kernel), (*calls)++;
            if (!ok || getenv("JATTN_TEST_VERBOSE"))
                printf("%s %s (%s): rel_l2 %.3g max_abs %.3g (seed %llu)\n", ok ? "ok  " : "FAIL", what, sel.kernel,
                       mt.rel_l2, mt.max_abs, (unsigned long long)jt_seed());
        }
        if (ok == 1 && index == 0) { /* captured into a graph, replayed twice: the direct call's bits */
            float *g0 = malloc((size_t)nq * sizeof(float)), *g1 = malloc((size_t)nq * sizeof(float));
            if (!g0 || !g1) exit(1);
            fetch(g0, dg[0], nq, s);
            cudaGraph_t graph = NULL;
            cudaGraphExec_t exec = NULL;
            CUDA_OK(cudaMemsetAsync(dg[0], 0xFF, (size_t)nq * sizeof(float), s));
            CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            st = jattn_plan_backward(plan, NULL, s, ws, ws ? need : 0, d[0], d[1], d[2], d[3], d[4], d[5], d[6], &dm,
                                     dg[0], dg[1], dg[2]);
            CUDA_OK(cudaStreamEndCapture(s, &graph));
            ok = jt_expect_status(st, JATTN_OK, "a masked backward captured into a graph");
            if (ok) {
                CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
                for (int rep = 0; rep < 2; rep++) CUDA_OK(cudaGraphLaunch(exec, s));
                fetch(g1, dg[0], nq, s);
                ok = memcmp(g0, g1, (size_t)nq * sizeof(float)) == 0;
                if (!ok) printf("FAIL %s: the graph's replay differs from the direct call\n", what);
            }
            if (exec) CUDA_OK(cudaGraphExecDestroy(exec));
            if (graph) CUDA_OK(cudaGraphDestroy(graph));
            free(g0), free(g1);
        }
        if (ok >= 0) jt_tally_add(&tally, ok);
        CUDA_OK(cudaStreamSynchronize(s));
        jattn_plan_free(plan);
        (void)cudaFree(ws);
        for (int i = 0; i < 7; i++) (void)cudaFree(d[i]), (void)cudaFree(dptr[i]);
        for (int t = 0; t < 3; t++) (void)cudaFree(dg[t]);
    }
out:
    for (int i = 0; i < 7; i++) free(h[i]);
    for (int t = 0; t < 3; t++) free(ref[t]);
    free(got), free(key_mask), free(bias);
}

int main(int argc, char **argv) {
    const char *part = argc > 1 ? argv[1] : "all";
    if (strcmp(part, "all") && strcmp(part, "forward") && strcmp(part, "backward") && strcmp(part, "masks")) {
        fprintf(stderr, "usage: %s [forward|backward|masks|all]\n", argv[0]);
        return 2;
    }
    if (!jt_backend_present(JATTN_BACKEND_CUDA)) {
        printf("SKIP: no cuda backend or no CUDA device\n");
        return JT_SKIP;
    }
    const char *env[2] = {getenv("JATTN_CUDA_KERNEL"), getenv("JATTN_CUDA_BWD_KERNEL")};
    for (int b = 0; b < 2; b++)
        if (env[b] && env[b][0])
            snprintf(forced[b], sizeof forced[b], "cuda_%sv%s", b ? "bwd_" : "", env[b] + (env[b][0] == 'v'));
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0x5A71ull);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* partial tiles everywhere: 64 and 128 for the sm_90a kernels, 72 and 40 for the portable ones at other
     * widths, 256 (the half kernels of the backward v3), a single key (the forward v1), a single query,
     * head_dim 3 (AUTO's forward v1 below 8: its P V by warp butterflies) */
    static const int64_t shapes[][5] = {{1, 2, 65, 130, 64}, {2, 1, 70, 33, 128}, {1, 1, 37, 77, 72},
                                        {2, 1, 20, 45, 40},  {1, 1, 17, 30, 256}, {1, 2, 1, 200, 128},
                                        {2, 2, 20, 1, 64},   {1, 2, 33, 70, 3}};
    int calls[2] = {0, 0}, masked = 0;
    for (int backward = 0; backward < 2; backward++) {
        if (!strcmp(part, backward ? "forward" : "backward") || !strcmp(part, "masks")) continue;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            run_shape(shapes[i], backward, &rng, s, &calls[backward]);
        if (!calls[backward]) {
            printf("FAIL the %s ran no call: the forced version took no shape\n", backward ? "backward" : "forward");
            jt_tally_add(&tally, 0);
        }
    }
    if (strcmp(part, "forward")) { /* the masked backward: part of `backward`, and alone */
        for (size_t i = 0; i < sizeof mask_cases / sizeof mask_cases[0]; i++)
            run_masked(&mask_cases[i], &rng, s, (int)i, &masked);
        if (!masked && !(forced[1][0] && strcmp(forced[1], "cuda_bwd_v3"))) {
            printf("FAIL the masked backward ran no call\n");
            jt_tally_add(&tally, 0);
        }
    }
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaDeviceSynchronize());
    printf("kernels that ran:%s\n", ran);
    char title[64];
    snprintf(title, sizeof title, "test_cuda_kernels %s", part);
    return jt_tally_finish(&tally, title);
}
