/* The cuda backend on device pointers and through its context: results on the caller's
 * stream match the float64 reference; a CUDA graph capture replays to the same bits; 4-byte
 * (not 16-byte) aligned pointers work; an output overlapping an input is rejected before any
 * launch; the context allocates device memory once per size; every kernel version (v1, v6, v7)
 * passes the gate of each precision it takes; the forced sm_90a version (v6) refuses (UNSUPPORTED,
 * naming the reason) what it cannot run, pointers that miss its alignment included; the
 * same call twice gives the same bits (every version and precision); a caller's workspace is
 * used as given (no allocation) and one too small is refused; key padding in device memory
 * runs on every kernel version, in a graph, on a caller workspace; so do masks and grouped heads (causal
 * in both alignments, blocks, segments, a key bias), non-finite v under a window reaching only the rows
 * that attend its key. The kernel that ran is the call's plan's (jattn_plan_selection).
 * Exits 77 without a CUDA device. */
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

static size_t span_of(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return (size_t)kit_tensor_span(p, s, seq);
}

/* Device copies of a case's tensors, each placed `shift` floats past a 256-byte boundary, copied in on
 * the stream the test calls jattn on. Every copy to the device and every poisoning is made on that
 * (non-blocking) stream, so the call is ordered after it: a cudaMemcpy from pageable memory, or a
 * cudaMemset, on the legacy stream may still be in flight when a call on a non-blocking stream starts
 * (issue 37). Copies back follow a cudaStreamSynchronize of that stream. */
typedef struct dev_case {
    float *base[5];
    float *q, *k, *v, *out, *lse;
    size_t nq, nk, nv, no, nl;
} dev_case;

static float *dev_alloc(size_t n, int shift, float **base) {
    CUDA_OK(cudaMalloc((void **)base, (n + (size_t)shift) * sizeof(float)));
    return *base + shift;
}

static void dev_case_init(dev_case *d, const jt_case *c, int shift, cudaStream_t s) {
    const jattn_problem *p = &c->p;
    d->nq = span_of(p, p->q, p->seq_q);
    d->nk = (size_t)kit_kv_span(p, p->k); /* k and v have the problem's key/value heads */
    d->nv = (size_t)kit_kv_span(p, p->v);
    d->no = span_of(p, p->out, p->seq_q);
    d->nl = (size_t)(p->batch * p->heads * p->seq_q);
    d->q = dev_alloc(d->nq, shift, &d->base[0]);
    d->k = dev_alloc(d->nk, shift, &d->base[1]);
    d->v = dev_alloc(d->nv, shift, &d->base[2]);
    d->out = dev_alloc(d->no, shift, &d->base[3]);
    d->lse = dev_alloc(d->nl, shift, &d->base[4]);
    CUDA_OK(cudaMemcpyAsync(d->q, c->q, d->nq * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(d->k, c->k, d->nk * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(d->v, c->v, d->nv * sizeof(float), cudaMemcpyHostToDevice, s));
}

static void dev_case_free(dev_case *d) {
    for (int i = 0; i < 5; i++) cudaFree(d->base[i]);
}

/* Poisons the device output and lse (all bits set: a NaN) on stream s. */
static void dev_poison(dev_case *d, cudaStream_t s) {
    CUDA_OK(cudaMemsetAsync(d->out, 0xFF, d->no * sizeof(float), s));
    CUDA_OK(cudaMemsetAsync(d->lse, 0xFF, d->nl * sizeof(float), s));
}

/* Copies the device result into the case's host out/lse and checks it against the reference. */
static int dev_check(dev_case *d, jt_case *c, jattn_precision prec, const char *what) {
    const jattn_problem *p = &c->p;
    float *host = malloc(d->no * sizeof(float)), *lse = malloc(d->nl * sizeof(float));
    CUDA_OK(cudaMemcpy(host, d->out, d->no * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse, d->lse, d->nl * sizeof(float), cudaMemcpyDeviceToHost));
    jattn_metrics m;
    jattn_metrics_compute(p, host, c->ref, &m);
    int ok = jattn_metrics_pass(&m, prec) && jattn_lse_pass(lse, c->ref_lse, (int64_t)d->nl, prec);
    if (!ok || getenv("JATTN_TEST_VERBOSE"))
        printf("%s %s %s %s: rel_l2 %.3g max_abs %.3g cos %.9f nonfinite %lld (seed %llu)\n", ok ? "ok  " : "FAIL",
               what, c->label, prec == JATTN_PRECISION_TF32 ? "tf32" : "f32", m.rel_l2, m.max_abs, m.cos,
               (long long)m.nonfinite, (unsigned long long)jt_seed());
    free(host);
    free(lse);
    return ok;
}

static jattn_exec device_exec(cudaStream_t s, jattn_precision prec) {
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CUDA;
    e.memory = JATTN_MEMORY_DEVICE;
    e.precision = prec;
    e.cuda_stream = s;
    return e;
}

/* Device pointers on a non-default stream; then the same call captured into a graph and
 * replayed must give the first result bit for bit. */
static void test_stream_and_graph(jt_case *c, cudaStream_t s) {
    dev_case d;
    dev_case_init(&d, c, 0, s);
    for (int pi = 0; pi < 2; pi++) {
        jattn_precision prec = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
        jattn_exec e = device_exec(s, prec);
        dev_poison(&d, s);
        jattn_status st = jattn_forward(NULL, &c->p, &e, d.q, d.k, d.v, d.out, d.lse);
        jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "forward on device pointers"));
        CUDA_OK(cudaStreamSynchronize(s));
        jt_tally_add(&tally, dev_check(&d, c, prec, "stream"));
        float *first = malloc(d.no * sizeof(float)), *again = malloc(d.no * sizeof(float));
        CUDA_OK(cudaMemcpy(first, d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));

        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        st = jattn_forward(NULL, &c->p, &e, d.q, d.k, d.v, d.out, d.lse);
        CUDA_OK(cudaStreamEndCapture(s, &graph));
        jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "forward under graph capture"));
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        dev_poison(&d, s);
        CUDA_OK(cudaStreamSynchronize(s));
        for (int rep = 0; rep < 2; rep++) CUDA_OK(cudaGraphLaunch(exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(again, d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));
        int same = memcmp(first, again, d.no * sizeof(float)) == 0;
        if (!same) printf("FAIL graph replay differs from the first result (%s)\n", c->label);
        jt_tally_add(&tally, same);
        CUDA_OK(cudaGraphExecDestroy(exec));
        CUDA_OK(cudaGraphDestroy(graph));
        free(first);
        free(again);
    }
    dev_case_free(&d);
}

/* Pointers 4 bytes past a 16-byte boundary: the 4-byte copy path. */
static void test_misaligned(jt_case *c, cudaStream_t s) {
    dev_case d;
    dev_case_init(&d, c, 1, s);
    for (int pi = 0; pi < 2; pi++) {
        jattn_precision prec = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
        jattn_exec e = device_exec(s, prec);
        dev_poison(&d, s);
        jattn_status st = jattn_forward(NULL, &c->p, &e, d.q, d.k, d.v, d.out, d.lse);
        jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "forward on 4-byte aligned pointers"));
        CUDA_OK(cudaStreamSynchronize(s));
        jt_tally_add(&tally, dev_check(&d, c, prec, "misaligned"));
    }
    dev_case_free(&d);
}

/* out overlapping q: rejected before the launch, q untouched. */
static void test_aliasing(jt_case *c, cudaStream_t s) {
    dev_case d;
    dev_case_init(&d, c, 0, s);
    jattn_exec e = device_exec(s, JATTN_PRECISION_F32);
    jattn_problem p = c->p;
    p.out = p.q; /* same layout, so out spans exactly q */
    jattn_status st = jattn_forward(NULL, &p, &e, d.q, d.k, d.v, d.q, NULL);
    jt_tally_add(&tally, jt_expect_status(st, JATTN_ERROR_ALIASING, "out overlapping q"));
    CUDA_OK(cudaStreamSynchronize(s));
    float *back = malloc(d.nq * sizeof(float));
    CUDA_OK(cudaMemcpy(back, d.q, d.nq * sizeof(float), cudaMemcpyDeviceToHost));
    int same = memcmp(back, c->q, d.nq * sizeof(float)) == 0;
    if (!same) printf("FAIL q was modified by a rejected call\n");
    jt_tally_add(&tally, same);
    free(back);
    dev_case_free(&d);
}

/* The context keeps device buffers: after the first call of a size, no further cudaMalloc
 * (same size, then a smaller one); without a context, results are still right. */
static void test_ctx_allocations(jt_case *big, jt_case *small) {
    jattn_ctx *ctx = NULL;
    jt_tally_add(&tally, jt_expect_status(jattn_ctx_create(&ctx), JATTN_OK, "ctx_create"));
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CUDA;
    jattn_status st = jattn_forward(ctx, &big->p, &e, big->q, big->k, big->v, big->out, big->lse);
    jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "first host call with ctx"));
    long after_first = jattn_cuda_alloc_count();
    for (int i = 0; i < 3; i++) {
        st = jattn_forward(ctx, &big->p, &e, big->q, big->k, big->v, big->out, big->lse);
        jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "repeated host call with ctx"));
    }
    st = jattn_forward(ctx, &small->p, &e, small->q, small->k, small->v, small->out, small->lse);
    jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "smaller host call with ctx"));
    long after_all = jattn_cuda_alloc_count();
    if (after_all != after_first)
        printf("FAIL ctx: %ld cudaMalloc calls after the first call of a size (want 0)\n", after_all - after_first);
    jt_tally_add(&tally, after_all == after_first);
    jattn_metrics m;
    jattn_metrics_compute(&small->p, small->out, small->ref, &m);
    int ok = jattn_metrics_pass(&m, JATTN_PRECISION_F32);
    if (!ok) printf("FAIL ctx result: rel_l2 %.3g (%s)\n", m.rel_l2, small->label);
    jt_tally_add(&tally, ok);
    jattn_ctx_free(ctx);
    /* without a context: allocated and freed per call */
    jt_tally_add(&tally, jt_case_check(small, &e, 1));
}

static int device_is_sm90(void) {
    int dev = 0, major = 0, minor = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return 10 * major + minor == 90; /* ATTENTION_SM90_CC (src/cuda/attention_sm90.h) */
}

static int is_sm90_version(int ver) { return ver == JATTN_CUDA_KERNEL_V6; }

/* Why a forced sm_90a version (v6) must refuse (p, e), as the word its error message must name, or NULL. */
static const char *sm90_must_refuse(const jattn_problem *p, const jattn_exec *e) {
    (void)e; /* both precisions run */
    if (!device_is_sm90()) return "device";
    if (p->head_dim != 64 && p->head_dim != 128) return "head_dim";
    return NULL;
}

/* A forced sm_90a version refuses with UNSUPPORTED and a message naming `word`. */
static int expect_sm90_refusal(const jattn_problem *p, const jattn_exec *e, const char *word) {
    jattn_selection sel;
    jattn_status st = jattn_select(p, e, &sel);
    int ok =
        jt_expect_status(st, JATTN_ERROR_UNSUPPORTED, "sm_90a refusal") && strstr(jattn_last_error(), word) != NULL;
    if (!ok)
        printf("FAIL sm_90a version on D=%lld: want a refusal naming \"%s\", got \"%s\"\n", (long long)p->head_dim,
               word, st == JATTN_OK ? sel.kernel : jattn_last_error());
    return ok;
}

/* Every kernel version against the reference, each precision it takes, on shapes each one
 * takes; a forced sm_90a version on a shape it does not take must refuse. */
static void test_versions(jt_rng *rng) {
    /* (1,24,720,33,128) and (1,2,65,600,128): a short grid with long rows and the reverse (the
     * instances of the removed v4; v7 picks its warps per CTA by the grid) */
    static const int64_t shapes[][5] = {{1, 2, 65, 130, 64},   {2, 1, 7, 33, 128},   {1, 2, 100, 77, 256},
                                        {1, 1, 129, 200, 32},  {1, 3, 40, 1, 8},     {1, 1, 33, 65, 24},
                                        {1, 2, 130, 257, 128}, {1, 2, 65, 600, 128}, {1, 24, 720, 33, 128},
                                        {1, 2, 70, 140, 72},   {1, 1, 45, 300, 160}, {2, 1, 20, 50, 40}};
    for (int ver = JATTN_CUDA_KERNEL_V1; ver < JATTN_CUDA_KERNEL_COUNT; ver++) {
        if (!jattn_cuda_kernel_exists((jattn_cuda_kernel)ver)) continue; /* a removed version's number */
        jattn_cuda_set_kernel((jattn_cuda_kernel)ver);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t *s = shapes[si];
            jattn_problem p = jattn_problem_flux(s[0], s[1], s[2], s[3], s[4]);
            jattn_exec e = {0};
            e.backend = JATTN_BACKEND_CUDA;
            jattn_selection sel;
            int sm90_ran = 1;
            if (is_sm90_version(ver)) {
                int refused = 0;
                for (int pi = 0; pi < 2; pi++) {
                    e.precision = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
                    const char *why = sm90_must_refuse(&p, &e);
                    if (why) jt_tally_add(&tally, expect_sm90_refusal(&p, &e, why));
                    refused |= why != NULL;
                }
                e.precision = JATTN_PRECISION_F32;
                if (refused) continue;
            }
            if (!jt_expect_status(jattn_select(&p, &e, &sel), JATTN_OK, "select")) {
                jt_tally_add(&tally, 0);
                continue;
            }
            /* a forced v7 runs a single key on v1 (its refusal's fallback) */
            const int want_ver = ver == JATTN_CUDA_KERNEL_V7 && s[3] == 1 ? JATTN_CUDA_KERNEL_V1 : ver;
            char want[8];
            snprintf(want, sizeof want, "cuda_v%d", want_ver);
            if (strncmp(sel.kernel, want, strlen(want)) != 0) {
                printf("FAIL version %d selected %s for D=%lld\n", ver, sel.kernel, (long long)s[4]);
                jt_tally_add(&tally, 0);
            }
            jt_case c;
            if (jt_case_init(&c, &p) != 0) {
                jt_tally_add(&tally, 0);
                continue;
            }
            for (int d = 0; d < JT_DIST_COUNT; d++) {
                jt_case_fill(&c, (jt_dist)d, rng);
                if (jt_case_reference(&c) != JATTN_OK) {
                    jt_tally_add(&tally, 0);
                    continue;
                }
                for (int pi = 0; pi < 2; pi++) {
                    e.precision = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
                    int ok = jt_case_check(&c, &e, 1);
                    if (!ok) printf("    (kernel %s)\n", sel.kernel);
                    jt_tally_add(&tally, ok);
                    /* the kernel the call ran: its plan's (one-call functions plan for their pointers) */
                    const char *ran = jt_plan_kernel(JATTN_PASS_FORWARD, &c.p, NULL, &e);
                    if (is_sm90_version(ver) && strncmp(ran, want, strlen(want)) != 0) {
                        printf("FAIL %s selected, %s ran (host memory, aligned buffers)\n", want, ran);
                        sm90_ran = 0;
                    }
                }
            }
            if (is_sm90_version(ver)) jt_tally_add(&tally, sm90_ran);
            jt_case_free(&c);
        }
    }
    jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
}

/* Determinism (jattn.h): the same call twice on device pointers gives the same bits, out and
 * lse, for each kernel version and precision, on a short grid with long rows and on longer
 * grids. */
static void test_repeatable(jt_rng *rng, cudaStream_t s) {
    static const int64_t shapes[][5] = {
        {1, 2, 65, 1000, 128}, {2, 2, 130, 257, 64}, {1, 2, 33, 77, 96}, {1, 1, 17, 9, 200}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t *sh = shapes[si];
        jattn_problem p = jattn_problem_flux(sh[0], sh[1], sh[2], sh[3], sh[4]);
        jt_case c;
        if (jt_case_init(&c, &p) != 0) {
            jt_tally_add(&tally, 0);
            continue;
        }
        jt_case_fill(&c, JT_PEAKY, rng);
        dev_case d;
        dev_case_init(&d, &c, 0, s);
        float *first = malloc(d.no * sizeof(float)), *again = malloc(d.no * sizeof(float));
        float *lse1 = malloc(d.nl * sizeof(float)), *lse2 = malloc(d.nl * sizeof(float));
        for (int ver = JATTN_CUDA_KERNEL_AUTO; ver < JATTN_CUDA_KERNEL_COUNT; ver++) {
            if (ver != JATTN_CUDA_KERNEL_AUTO && !jattn_cuda_kernel_exists((jattn_cuda_kernel)ver)) continue;
            jattn_cuda_set_kernel((jattn_cuda_kernel)ver);
            for (int pi = 0; pi < 2; pi++) {
                jattn_exec e = device_exec(s, pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32);
                jattn_selection sel;
                if (jattn_select(&p, &e, &sel) != JATTN_OK)
                    continue; /* a forced sm_90a version on D it does not take */
                int ok = 1;
                for (int run = 0; run < 2 && ok; run++) {
                    dev_poison(&d, s);
                    ok = jt_expect_status(jattn_forward(NULL, &p, &e, d.q, d.k, d.v, d.out, d.lse), JATTN_OK,
                                          "repeat forward");
                    CUDA_OK(cudaStreamSynchronize(s));
                    CUDA_OK(cudaMemcpy(run ? again : first, d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));
                    CUDA_OK(cudaMemcpy(run ? lse2 : lse1, d.lse, d.nl * sizeof(float), cudaMemcpyDeviceToHost));
                }
                ok = ok && memcmp(first, again, d.no * sizeof(float)) == 0 &&
                     memcmp(lse1, lse2, d.nl * sizeof(float)) == 0;
                if (!ok || getenv("JATTN_TEST_VERBOSE"))
                    printf("%s repeatable bits %s %s (%s)\n", ok ? "ok  " : "FAIL", c.label, pi ? "tf32" : "f32",
                           jt_plan_kernel(JATTN_PASS_FORWARD, &p, NULL, &e));
                jt_tally_add(&tally, ok);
            }
        }
        jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
        free(first), free(again), free(lse1), free(lse2);
        dev_case_free(&d);
        jt_case_free(&c);
    }
}

/* The automatic choice (the ladder of src/cuda/NOTES.md) on a 9.0 device: v6 wherever it takes the
 * problem (D 64 and 128, both precisions, short and long grids, the long one where v5 used to be
 * chosen); else v7; v1 for seq_kv == 1, for D beyond v7's limits and for sequences beyond the
 * 32-bit index of v6's and v7's 128-query CTAs (selection only, nothing runs). */
static void test_auto_choice(void) {
    int dev = 0, sms = 0, l2 = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_OK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    const int64_t long_q = 128 * (int64_t)sms;               /* with 4 heads: 4 waves */
    const int64_t long_kv = (int64_t)l2 / (2 * 8 * 128) + 1; /* just over half the L2 at D = 128 */
    const int64_t beyond_v6 = INT32_MAX - 100;               /* v6 and v7 take <= 2^31 - 129 */
    const struct {
        int64_t h, sq, skv, d;
    } cases[] = {{2, 33, 77, 128},
                 {2, 33, 77, 64},
                 {2, 33, 77, 96},
                 {2, 33, 1, 128},
                 {2, 33, 77, 264},
                 {4, long_q, long_kv, 128},
                 {4, long_q, long_kv, 64},
                 {4, long_q, long_kv - 1, 128},
                 {4, long_q - 128, long_kv, 128},
                 {1, beyond_v6, 77, 128},
                 {1, 33, beyond_v6, 64}};
    jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jattn_problem p = jattn_problem_flux(1, cases[i].h, cases[i].sq, cases[i].skv, cases[i].d);
        const int sm90 = (cases[i].d == 64 || cases[i].d == 128) && device_is_sm90();
        const int v6_takes = cases[i].sq <= INT32_MAX - 128 && cases[i].skv <= INT32_MAX - 128;
        /* v7 indexes with 32 bits as v6 does: beyond v6's sequences v1 runs */
        const int v1 = cases[i].skv == 1 || cases[i].d > JATTN_CUDA_V7_MAX_HEAD_DIM || !v6_takes;
        const char *want = v1 ? "cuda_v1" : sm90 ? "cuda_v6" : "cuda_v7";
        for (int pi = 0; pi < 2; pi++) {
            jattn_exec e = {0};
            e.backend = JATTN_BACKEND_CUDA;
            e.precision = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
            jattn_selection sel = {0};
            int ok = jt_expect_status(jattn_select(&p, &e, &sel), JATTN_OK, "auto select") && sel.kernel &&
                     strncmp(sel.kernel, want, strlen(want)) == 0;
            if (!ok)
                printf("FAIL auto choice for seq_q=%lld seq_kv=%lld D=%lld: %s, want %s\n", (long long)cases[i].sq,
                       (long long)cases[i].skv, (long long)cases[i].d, sel.kernel ? sel.kernel : "none", want);
            jt_tally_add(&tally, ok);
        }
    }
}

/* The forced sm_90a version on device pointers: 16-byte aligned ones run the version forced (the call's
 * plan names it); 4-byte aligned ones are refused (UNSUPPORTED naming the alignment: a forced version runs
 * where it can or fails, and a plan is made for its pointers' alignment), nothing written; strides that are
 * no multiple of 4 elements are refused at selection, naming the strides. Only on a 9.0 device (elsewhere
 * test_versions checks the refusal). */
static void test_sm90_device_pointers(jt_case *c, cudaStream_t s, jattn_cuda_kernel ver) {
    if (!device_is_sm90()) return;
    jattn_cuda_set_kernel(ver);
    char forced[8];
    snprintf(forced, sizeof forced, "cuda_v%d", (int)ver);
    for (int shift = 0; shift < 2; shift++) {
        dev_case d;
        dev_case_init(&d, c, shift, s);
        jattn_exec e = device_exec(s, JATTN_PRECISION_F32);
        dev_poison(&d, s);
        jattn_status st = jattn_forward(NULL, &c->p, &e, d.q, d.k, d.v, d.out, d.lse);
        if (shift) {
            int ok =
                jt_expect_status(st, JATTN_ERROR_UNSUPPORTED, "a forced sm_90a version on 4-byte aligned pointers") &&
                strstr(jattn_last_error(), "alignment") != NULL;
            CUDA_OK(cudaStreamSynchronize(s));
            float first = 0;
            CUDA_OK(cudaMemcpy(&first, d.out, sizeof first, cudaMemcpyDeviceToHost));
            ok = ok && isnan(first); /* still the poison */
            if (!ok) printf("FAIL %s forced, 4-byte aligned pointers: %s\n", forced, jattn_last_error());
            jt_tally_add(&tally, ok);
        } else {
            jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "sm_90a forward on device pointers"));
            CUDA_OK(cudaStreamSynchronize(s));
            const char *ran = jt_plan_kernel(JATTN_PASS_FORWARD, &c->p, NULL, &e);
            const int same = strncmp(ran, forced, strlen(forced)) == 0;
            if (!same) printf("FAIL %s forced, pointers 16-byte aligned: the plan names %s\n", forced, ran);
            jt_tally_add(&tally, same);
            jt_tally_add(&tally, dev_check(&d, c, JATTN_PRECISION_F32, forced));
        }
        dev_case_free(&d);
    }
    jattn_problem p = c->p;
    p.q.token = p.head_dim + 1; /* rows padded by one element */
    p.q.head = p.seq_q * p.q.token;
    p.q.batch = p.heads * p.q.head;
    jattn_exec e = device_exec(s, JATTN_PRECISION_F32);
    jt_tally_add(&tally, expect_sm90_refusal(&p, &e, "strides"));
    jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
}

/* A caller workspace on device pointers (v6 or v7's split K and V): the size jattn_workspace_size
 * reports is enough, the call allocates nothing and meets the gate; one byte less than the
 * kernel needs (the reported size includes 63 bytes of alignment slack, none of which a
 * 256-byte aligned cudaMalloc pointer loses) is refused with WORKSPACE_TOO_SMALL naming
 * exec.workspace_bytes, before anything is written. */
static void test_caller_workspace(jt_case *c, cudaStream_t s) {
    dev_case d;
    dev_case_init(&d, c, 0, s);
    for (int pi = 0; pi < 2; pi++) {
        jattn_precision prec = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
        jattn_exec e = device_exec(s, prec);
        size_t bytes = 0;
        jt_tally_add(&tally, jt_expect_status(jattn_workspace_size(&c->p, &e, &bytes), JATTN_OK, "workspace_size"));
        jattn_selection sel;
        jt_tally_add(&tally, jt_expect_status(jattn_select(&c->p, &e, &sel), JATTN_OK, "select"));
        /* every kernel reports the key padding's region, v6 and v7 their split K and V on top */
        const int split = strncmp(sel.kernel, "cuda_v6", 7) == 0 || strncmp(sel.kernel, "cuda_v7", 7) == 0;
        const size_t padding = jattn_cuda_padding_bytes(c->p.batch, c->p.seq_kv);
        const int sized = split ? bytes > padding + 63 : bytes == padding + 63;
        if (!sized) printf("FAIL workspace of %zu bytes for kernel %s\n", bytes, sel.kernel);
        jt_tally_add(&tally, sized);
        void *ws = NULL;
        CUDA_OK(cudaMalloc(&ws, bytes));
        e.workspace = ws;
        /* one byte short of what the call needs (its plan's size less the 63 bytes of slack; the key
         * padding's region that jattn_workspace_size also covers is not this call's): refused, nothing
         * written. A kernel that needs no workspace for this call has nothing to be short of. */
        const size_t own = jt_plan_workspace(JATTN_PASS_FORWARD, &c->p, NULL, NULL, &e);
        if (own > 64) {
            e.workspace_bytes = own - 64;
            dev_poison(&d, s);
            jattn_status st = jattn_forward(NULL, &c->p, &e, d.q, d.k, d.v, d.out, d.lse);
            int refused =
                jt_expect_status(st, JATTN_ERROR_WORKSPACE_TOO_SMALL, "workspace one byte short of the need") &&
                strstr(jattn_last_error(), "workspace_bytes") != NULL;
            CUDA_OK(cudaStreamSynchronize(s));
            float first = 0;
            CUDA_OK(cudaMemcpy(&first, d.out, sizeof first, cudaMemcpyDeviceToHost));
            refused = refused && isnan(first); /* still the poison */
            if (!refused) printf("FAIL a workspace one byte short: %s\n", jattn_last_error());
            jt_tally_add(&tally, refused);
        }
        e.workspace_bytes = bytes;
        const long allocs = jattn_cuda_alloc_count();
        jattn_status st = jattn_forward(NULL, &c->p, &e, d.q, d.k, d.v, d.out, d.lse);
        jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "forward on a caller workspace"));
        CUDA_OK(cudaStreamSynchronize(s));
        const int none = jattn_cuda_alloc_count() == allocs;
        if (!none) printf("FAIL a call given a workspace allocated device memory\n");
        jt_tally_add(&tally, none);
        jt_tally_add(&tally, dev_check(&d, c, prec, "caller workspace"));
        CUDA_OK(cudaFree(ws));
    }
    dev_case_free(&d);
}

/* Key padding on device pointers (lengths and mask in device memory), every kernel version
 * that takes the shape: the pre-pass and the attention on the caller's stream, against the
 * reference applying the same padding; captured in a graph and replayed to the same bits; on
 * a caller workspace of jattn_workspace_size bytes, with no allocation. The masked keys' k and
 * v rows are NaN: they must never reach the output. */
static void test_padding_device(jt_rng *r, cudaStream_t s) {
    const int64_t B = 3, H = 2, Sq = 70, Skv = 200, D = 128;
    jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
    jt_case c;
    if (jt_case_init(&c, &p) != 0) exit(1);
    int64_t lens[3] = {Skv, 0, 1 + (int64_t)(jt_uniform(r) * (double)(Skv - 1))};
    uint8_t mask[3 * 200];
    for (int64_t j = 0; j < B * Skv; j++) mask[j] = jt_uniform(r) < 0.6;
    jattn_key_padding kp = {lens, mask, B, Skv, 0};
    c.padding = &kp;
    jt_case_fill(&c, JT_PEAKY, r);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < Skv; j++)
            if (j >= lens[b] || !mask[b * Skv + j])
                for (int64_t h = 0; h < H; h++)
                    for (int64_t d = 0; d < D; d++) {
                        c.k[b * p.k.batch + h * p.k.head + j * p.k.token + d] = NAN;
                        c.v[b * p.v.batch + h * p.v.head + j * p.v.token + d] = NAN;
                    }
    jt_case_seal(&c);
    if (jt_case_reference(&c) != JATTN_OK) exit(1);
    dev_case d;
    dev_case_init(&d, &c, 0, s);
    int64_t *dlen = NULL;
    uint8_t *dmask = NULL;
    CUDA_OK(cudaMalloc((void **)&dlen, sizeof lens));
    CUDA_OK(cudaMalloc((void **)&dmask, sizeof mask));
    CUDA_OK(cudaMemcpyAsync(dlen, lens, sizeof lens, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dmask, mask, sizeof mask, cudaMemcpyHostToDevice, s));
    jattn_key_padding dkp = {dlen, dmask, B, Skv, 0};
    const jattn_cuda_kernel versions[3] = {JATTN_CUDA_KERNEL_V1, JATTN_CUDA_KERNEL_V6, JATTN_CUDA_KERNEL_V7};
    float *first = malloc(d.no * sizeof(float)), *again = malloc(d.no * sizeof(float));
    for (int vi = 0; vi < 3; vi++) {
        jattn_cuda_set_kernel(versions[vi]);
        for (int pi = 0; pi < 2; pi++) {
            const jattn_precision prec = pi ? JATTN_PRECISION_TF32 : JATTN_PRECISION_F32;
            jattn_exec e = device_exec(s, prec);
            jattn_selection sel;
            if (jattn_select(&p, &e, &sel) != JATTN_OK) continue; /* v6 off a 9.0 device */
            char what[96];
            snprintf(what, sizeof what, "padding on device pointers, %s", sel.kernel);
            dev_poison(&d, s);
            jattn_status st = jattn_forward_padded(NULL, &p, &e, d.q, d.k, d.v, &dkp, d.out, d.lse);
            jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, what));
            CUDA_OK(cudaStreamSynchronize(s));
            jt_tally_add(&tally, dev_check(&d, &c, prec, what));
            CUDA_OK(cudaMemcpy(first, d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));
            /* batch 1 attends nothing: +0 rows */
            int zeros = 1;
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < Sq; i++)
                    for (int64_t x = 0; x < D; x++) {
                        const float o = first[1 * p.out.batch + h * p.out.head + i * p.out.token + x];
                        zeros &= o == 0.0f && !signbit(o);
                    }
            if (!zeros) printf("FAIL %s: a row with no key to attend is not +0\n", what);
            jt_tally_add(&tally, zeros);
            /* graph capture on a caller workspace: no allocation, the same bits */
            size_t bytes = 0;
            jt_tally_add(&tally, jt_expect_status(jattn_workspace_size(&p, &e, &bytes), JATTN_OK, "workspace_size"));
            void *ws = NULL;
            CUDA_OK(cudaMalloc(&ws, bytes));
            e.workspace = ws;
            e.workspace_bytes = bytes;
            const long allocs = jattn_cuda_alloc_count();
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            st = jattn_forward_padded(NULL, &p, &e, d.q, d.k, d.v, &dkp, d.out, d.lse);
            CUDA_OK(cudaStreamEndCapture(s, &graph));
            jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "padded forward under graph capture"));
            CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
            dev_poison(&d, s);
            CUDA_OK(cudaStreamSynchronize(s));
            CUDA_OK(cudaGraphLaunch(exec, s));
            CUDA_OK(cudaStreamSynchronize(s));
            CUDA_OK(cudaMemcpy(again, d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));
            const int same = memcmp(first, again, d.no * sizeof(float)) == 0 && jattn_cuda_alloc_count() == allocs;
            if (!same) printf("FAIL %s: the graph replay on a caller workspace differs or allocated\n", what);
            jt_tally_add(&tally, same);
            CUDA_OK(cudaGraphExecDestroy(exec));
            CUDA_OK(cudaGraphDestroy(graph));
            CUDA_OK(cudaFree(ws));
        }
    }
    jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
    free(first);
    free(again);
    cudaFree(dlen);
    cudaFree(dmask);
    dev_case_free(&d);
    jt_case_free(&c);
}

/* ---- masks (jattn_mask, grouped heads) on device pointers ---- */

/* The finite elements of got within the gate of the reference, and got non-finite exactly where the
 * reference is (a non-finite v reaches the rows that attend its key, and only those). */
static int masked_check(const float *got, const jt_case *c, const float *lse, const char *what) {
    const jattn_problem *p = &c->p;
    const size_t n = (size_t)kit_tensor_span(p, p->out, p->seq_q), nl = (size_t)(p->batch * p->heads * p->seq_q);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    size_t m = 0, pattern = 0;
    for (int64_t bb = 0; bb < p->batch; bb++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < p->seq_q; i++)
                for (int64_t x = 0; x < p->head_dim; x++) {
                    const int64_t at = bb * p->out.batch + h * p->out.head + i * p->out.token + x;
                    if (!isfinite(c->ref[at])) {
                        pattern += isfinite(got[at]) != 0;
                        continue;
                    }
                    a[m] = got[at], b[m] = c->ref[at], m++;
                }
    jattn_metrics mt;
    jattn_metrics_compute_dense(a, b, (int64_t)m, &mt);
    const int ok = pattern == 0 && jattn_metrics_pass(&mt, JATTN_PRECISION_F32) &&
                   jattn_lse_pass(lse, c->ref_lse, (int64_t)nl, JATTN_PRECISION_F32);
    if (!ok || getenv("JATTN_TEST_VERBOSE"))
        printf("%s %s %s: rel_l2 %.3g max_abs %.3g nonfinite %lld, %zu finite where the reference is not (seed %llu)\n",
               ok ? "ok  " : "FAIL", what, c->label, mt.rel_l2, mt.max_abs, (long long)mt.nonfinite, pattern,
               (unsigned long long)jt_seed());
    free(a);
    free(b);
    return ok;
}

/* Masks on device pointers (issue 35), every kernel version forced and AUTO: grouped heads, causal in both
 * alignments, block-causal, segments per batch, a key bias per head (some -inf), with key lengths or a key
 * mask; head-major and token-major layouts; the mask's arrays in device memory. The kernel that runs is the
 * call's plan's (and the forced one where it takes the problem); the plan's run matches the reference; a
 * graph capture of it replays to the same bits on the caller's workspace of the plan's size, allocating
 * nothing. Then non-finite v under a window: an Inf and a NaN in v of two keys, which the causal rows before
 * them do not attend: those rows stay exact, the rows after them are non-finite in that column. */
static void test_masks_device(jt_rng *r, cudaStream_t s) {
    static const int64_t shapes[][7] = {/* B, H, Hkv, Sq, Skv, D, token-major */
                                        {2, 4, 2, 150, 150, 64, 1},
                                        {1, 3, 1, 70, 130, 128, 0},
                                        {2, 2, 2, 100, 100, 72, 0}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t *sh = shapes[si];
        const int64_t B = sh[0], H = sh[1], Hkv = sh[2], Sq = sh[3], Skv = sh[4], D = sh[5];
        jattn_problem p = jattn_problem_flux(B, H, Sq, Skv, D);
        p.kv_heads = Hkv;
        p.k = p.v = jattn_strides_head_major(Hkv, Skv, D);
        if (sh[6]) {
            p.q = jattn_strides_token_major(H, Sq, D);
            p.k = p.v = jattn_strides_token_major(Hkv, Skv, D);
        }
        /* the mask's arrays, host and device */
        int64_t seg[2][4], blocks[4] = {0, Sq / 3, Sq / 2, Sq}, blocks_kv[4] = {0, Skv / 4, Skv / 2, Skv}, kv_len[2];
        for (int64_t b = 0; b < 2; b++) {
            const int64_t end = (Sq < Skv ? Sq : Skv) - b * 5;
            seg[b][0] = 0, seg[b][1] = end / 3 + b, seg[b][2] = end / 2, seg[b][3] = end;
            kv_len[b] = Skv - 7 * b;
        }
        uint8_t *kmask = malloc((size_t)(B * Skv));
        float *bias = malloc((size_t)(B * H * Skv) * sizeof(float));
        for (int64_t x = 0; x < B * Skv; x++) kmask[x] = jt_uniform(r) < 0.8;
        for (int64_t x = 0; x < B * H * Skv; x++)
            bias[x] = jt_uniform(r) < 0.1 ? -INFINITY : (float)(2.0 * jt_normal(r));
        int64_t *dseg, *dblocks, *dblocks_kv, *dlen;
        uint8_t *dkmask;
        float *dbias;
        CUDA_OK(cudaMalloc((void **)&dseg, sizeof seg));
        CUDA_OK(cudaMalloc((void **)&dblocks, sizeof blocks));
        CUDA_OK(cudaMalloc((void **)&dblocks_kv, sizeof blocks_kv));
        CUDA_OK(cudaMalloc((void **)&dlen, sizeof kv_len));
        CUDA_OK(cudaMalloc((void **)&dkmask, (size_t)(B * Skv)));
        CUDA_OK(cudaMalloc((void **)&dbias, (size_t)(B * H * Skv) * sizeof(float)));
        CUDA_OK(cudaMemcpyAsync(dseg, seg, sizeof seg, cudaMemcpyHostToDevice, s));
        CUDA_OK(cudaMemcpyAsync(dblocks, blocks, sizeof blocks, cudaMemcpyHostToDevice, s));
        CUDA_OK(cudaMemcpyAsync(dblocks_kv, blocks_kv, sizeof blocks_kv, cudaMemcpyHostToDevice, s));
        CUDA_OK(cudaMemcpyAsync(dlen, kv_len, sizeof kv_len, cudaMemcpyHostToDevice, s));
        CUDA_OK(cudaMemcpyAsync(dkmask, kmask, (size_t)(B * Skv), cudaMemcpyHostToDevice, s));
        CUDA_OK(cudaMemcpyAsync(dbias, bias, (size_t)(B * H * Skv) * sizeof(float), cudaMemcpyHostToDevice, s));
        for (int mi = 0; mi < 4; mi++) {
            jattn_mask m = {0}, dm;
            const char *label = "";
            if (mi == 0) { /* PyTorch's causal, packed sequences per batch, a per-head key bias */
                m.causal = JATTN_CAUSAL_TOP_LEFT;
                m.cu_seqlens_q = m.cu_seqlens_kv = seg[0];
                m.num_segments = 3;
                m.segments_batch_stride = 4;
                m.key_bias = bias;
                m.key_bias_batch_stride = H * Skv;
                m.key_bias_head_stride = Skv;
                label = "causal segments bias-bh";
            } else if (mi == 1) { /* FlashAttention's causal, blocks, a key mask */
                m.causal = JATTN_CAUSAL_BOTTOM_RIGHT;
                m.block_q = blocks;
                m.block_kv = blocks_kv;
                m.num_blocks = 3;
                m.padding.mask = kmask;
                m.padding.mask_batch = B;
                m.padding.mask_keys = Skv;
                label = "causal-br blocks key-mask";
            } else if (mi == 2) { /* a text encoder's float mask per batch, key lengths */
                m.key_bias = bias;
                m.key_bias_batch_stride = H * Skv;
                m.padding.kv_len = kv_len;
                label = "bias-b kv_len";
            } else { /* the non-finite v under a window */
                m.causal = JATTN_CAUSAL_TOP_LEFT;
                label = "causal, Inf and NaN in v";
            }
            dm = m;
            if (m.cu_seqlens_q) dm.cu_seqlens_q = dm.cu_seqlens_kv = dseg;
            if (m.block_q) dm.block_q = dblocks, dm.block_kv = dblocks_kv;
            if (m.padding.mask) dm.padding.mask = dkmask;
            if (m.padding.kv_len) dm.padding.kv_len = dlen;
            if (m.key_bias) dm.key_bias = dbias;
            jt_case c;
            if (jt_case_init(&c, &p) != 0) exit(1);
            jt_case_fill(&c, (jt_dist)((si + (size_t)mi) % JT_DIST_COUNT), r);
            if (mi == 3) { /* v of keys 37 and 80 (every batch and key/value head): Inf at d = 3, NaN at d = 5 */
                for (int64_t b = 0; b < B; b++)
                    for (int64_t hk = 0; hk < Hkv; hk++) {
                        c.v[b * p.v.batch + hk * p.v.head + 37 * p.v.token + 3] = INFINITY;
                        c.v[b * p.v.batch + hk * p.v.head + 80 * p.v.token + 5] = NAN;
                    }
                jt_case_seal(&c);
            }
            c.mask = &m;
            snprintf(c.label + strlen(c.label), sizeof c.label - strlen(c.label), " Hkv=%lld %s%s", (long long)Hkv,
                     label, sh[6] ? " token-major" : "");
            if (jt_case_reference(&c) != JATTN_OK) exit(1);
            dev_case d;
            dev_case_init(&d, &c, 0, s);
            float *first = malloc(d.no * sizeof(float)), *again = malloc(d.no * sizeof(float));
            float *lse = malloc(d.nl * sizeof(float));
            for (int ver = JATTN_CUDA_KERNEL_AUTO; ver < JATTN_CUDA_KERNEL_COUNT; ver++) {
                if (ver != JATTN_CUDA_KERNEL_AUTO && !jattn_cuda_kernel_exists((jattn_cuda_kernel)ver)) continue;
                jattn_cuda_set_kernel((jattn_cuda_kernel)ver);
                jattn_exec e = device_exec(s, JATTN_PRECISION_F32);
                jattn_plan *plan = NULL;
                const jattn_status pst = jattn_plan_create(&plan, JATTN_PASS_FORWARD, &c.p, NULL, &dm, &e);
                if (pst == JATTN_ERROR_UNSUPPORTED && ver == JATTN_CUDA_KERNEL_V6) continue; /* v6's limits */
                if (!jt_expect_status(pst, JATTN_OK, "masked plan")) {
                    jt_tally_add(&tally, 0);
                    continue;
                }
                jattn_selection sel;
                jattn_plan_selection(plan, &sel);
                char want[16], what[300];
                snprintf(want, sizeof want, "cuda_v%d", ver);
                const int named = ver == JATTN_CUDA_KERNEL_AUTO || strncmp(sel.kernel, want, strlen(want)) == 0;
                if (!named) printf("FAIL %s forced: the masked plan names %s\n", want, sel.kernel);
                jt_tally_add(&tally, named);
                snprintf(what, sizeof what, "masked, device pointers, %s", sel.kernel);
                const size_t bytes = jattn_plan_workspace_size(plan);
                void *ws = NULL;
                if (bytes) CUDA_OK(cudaMalloc(&ws, bytes));
                dev_poison(&d, s);
                jt_tally_add(&tally, jt_expect_status(
                                         jattn_plan_forward(plan, NULL, s, ws, bytes, d.q, d.k, d.v, &dm, d.out, d.lse),
                                         JATTN_OK, what));
                CUDA_OK(cudaStreamSynchronize(s));
                CUDA_OK(cudaMemcpy(first, d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));
                CUDA_OK(cudaMemcpy(lse, d.lse, d.nl * sizeof(float), cudaMemcpyDeviceToHost));
                jt_tally_add(&tally, masked_check(first, &c, lse, what));
                /* a graph of the plan's run on the caller's workspace: no allocation, the same bits */
                const long allocs = jattn_cuda_alloc_count();
                cudaGraph_t graph;
                cudaGraphExec_t exec;
                CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                const jattn_status st = jattn_plan_forward(plan, NULL, s, ws, bytes, d.q, d.k, d.v, &dm, d.out, d.lse);
                CUDA_OK(cudaStreamEndCapture(s, &graph));
                jt_tally_add(&tally, jt_expect_status(st, JATTN_OK, "masked plan run under graph capture"));
                CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
                dev_poison(&d, s);
                CUDA_OK(cudaGraphLaunch(exec, s));
                CUDA_OK(cudaStreamSynchronize(s));
                CUDA_OK(cudaMemcpy(again, d.out, d.no * sizeof(float), cudaMemcpyDeviceToHost));
                const int same = memcmp(first, again, d.no * sizeof(float)) == 0 && jattn_cuda_alloc_count() == allocs;
                if (!same) printf("FAIL %s %s: the graph replay differs or allocated\n", what, c.label);
                jt_tally_add(&tally, same);
                CUDA_OK(cudaGraphExecDestroy(exec));
                CUDA_OK(cudaGraphDestroy(graph));
                if (ws) CUDA_OK(cudaFree(ws));
                jattn_plan_free(plan);
            }
            jattn_cuda_set_kernel(JATTN_CUDA_KERNEL_AUTO);
            free(first), free(again), free(lse);
            dev_case_free(&d);
            jt_case_free(&c);
        }
        cudaFree(dseg), cudaFree(dblocks), cudaFree(dblocks_kv), cudaFree(dlen), cudaFree(dkmask), cudaFree(dbias);
        free(kmask);
        free(bias);
    }
}

/* head_dim beyond the limit: UNSUPPORTED naming head_dim. */
static void test_limits(void) {
    jattn_problem p = jattn_problem_flux(1, 1, 4, 4, JATTN_CUDA_V1_MAX_HEAD_DIM + 8);
    jattn_exec e = {0};
    e.backend = JATTN_BACKEND_CUDA;
    jattn_selection sel;
    jattn_status st = jattn_select(&p, &e, &sel);
    int ok = jt_expect_status(st, JATTN_ERROR_UNSUPPORTED, "head_dim over the limit") &&
             strstr(jattn_last_error(), "head_dim") != NULL;
    jt_tally_add(&tally, ok);
    p.head_dim = 128;
    ok = jt_expect_status(jattn_select(&p, &e, &sel), JATTN_OK, "select D=128") && sel.isa &&
         (strcmp(sel.isa, "sm_90a") == 0 || strcmp(sel.isa, "sm_80") == 0);
    if (ok) printf("selected %s (%s)\n", sel.kernel, sel.isa);
    jt_tally_add(&tally, ok);
}

int main(void) {
    if (!jt_backend_present(JATTN_BACKEND_CUDA)) {
        printf("SKIP: no cuda backend or no CUDA device\n");
        return JT_SKIP;
    }
    jt_rng rng;
    jt_rng_init(&rng, jt_seed() ^ 0xC0DAull);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    jattn_problem p = jattn_problem_flux(2, 3, 100, 77, 64);
    jt_case c;
    jattn_problem ps = jattn_problem_flux(1, 2, 33, 50, 128);
    jt_case small;
    if (jt_case_init(&c, &p) != 0 || jt_case_init(&small, &ps) != 0) return 1;
    jt_case_fill(&c, JT_NORMAL, &rng);
    jt_case_fill(&small, JT_PEAKY, &rng);
    if (jt_case_reference(&c) != JATTN_OK || jt_case_reference(&small) != JATTN_OK) return 1;

    test_limits();
    test_stream_and_graph(&c, s);
    test_misaligned(&c, s);
    test_aliasing(&c, s);
    test_ctx_allocations(&c, &small);
    test_versions(&rng);
    test_auto_choice();
    test_repeatable(&rng, s);
    test_sm90_device_pointers(&c, s, JATTN_CUDA_KERNEL_V6);
    test_caller_workspace(&small, s);
    test_padding_device(&rng, s);
    test_masks_device(&rng, s);

    jt_case_free(&c);
    jt_case_free(&small);
    CUDA_OK(cudaStreamDestroy(s));
    return jt_tally_finish(&tally, "test_cuda_device");
}
