/* The device timer with CUDA: inputs copied to the device once, jattn_forward on device
 * pointers and a stream of its own, each timed call bracketed by CUDA events; the median. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "clock.h"
#include "device_timer.h"
#include "tensor.h"

static size_t span_of(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return (size_t)kit_tensor_span(p, s, seq);
}

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            snprintf(err, errlen, "device timing: %s: %s", #call, cudaGetErrorName(err_)); \
            goto done;                                                                     \
        }                                                                                  \
    } while (0)

/* The median of reps timed intervals, event pairs (ev[2 i], ev[2 i + 1]) already completed, into
 *ms_median; times holds reps floats of scratch. 0, or -1 with err written. */
static int events_median_ms(const cudaEvent_t *ev, float *times, int reps, double *ms_median, char *err,
                            size_t errlen) {
    for (int i = 0; i < reps; i++) CHECK(cudaEventElapsedTime(&times[i], ev[2 * i], ev[2 * i + 1]));
    double *ms = malloc((size_t)reps * sizeof *ms);
    if (!ms) {
        snprintf(err, errlen, "device timing: out of memory");
        goto done;
    }
    for (int i = 0; i < reps; i++) ms[i] = times[i];
    *ms_median = kit_median(ms, reps);
    free(ms);
    return 0;
done:
    return -1;
}

/* The mask's arrays (kv_len, key mask, block_q, block_kv, cu_seqlens_q, cu_seqlens_kv, key bias) copied to
 * the device on `stream` into dm[7] (cudaMalloc'd; the caller frees them), *dmask the mask on them. 0, or -1
 * with err written. */
static int stage_mask(const jattn_problem *p, const jattn_mask *mask, cudaStream_t stream, void *dm[7],
                      jattn_mask *dmask, char *err, size_t errlen) {
    *dmask = *mask;
    const jattn_key_padding *kp = &mask->padding;
    const int64_t kstride = kp->mask_batch_stride ? kp->mask_batch_stride : kp->mask_keys;
    const int64_t seg_rows = mask->segments_batch_stride ? p->batch - 1 : 0;
    const void *src[7] = {kp->kv_len,          kp->mask,      mask->block_q, mask->block_kv, mask->cu_seqlens_q,
                          mask->cu_seqlens_kv, mask->key_bias};
    const size_t bytes[7] = {
        (size_t)p->batch * sizeof(int64_t),
        kp->mask ? (size_t)((kp->mask_batch - 1) * kstride + kp->mask_keys) : 0,
        (size_t)(mask->num_blocks + 1) * sizeof(int64_t),
        (size_t)(mask->num_blocks + 1) * sizeof(int64_t),
        (size_t)(seg_rows * mask->segments_batch_stride + mask->num_segments + 1) * sizeof(int64_t),
        (size_t)(seg_rows * mask->segments_batch_stride + mask->num_segments + 1) * sizeof(int64_t),
        mask->key_bias ? (size_t)((p->batch - 1) * mask->key_bias_batch_stride +
                                  (p->heads - 1) * mask->key_bias_head_stride + p->seq_kv) *
                             sizeof(float)
                       : 0};
    for (int i = 0; i < 7; i++)
        if (src[i] && bytes[i]) {
            CHECK(cudaMalloc(&dm[i], bytes[i]));
            CHECK(cudaMemcpyAsync(dm[i], src[i], bytes[i], cudaMemcpyHostToDevice, stream));
        }
    dmask->padding.kv_len = dm[0];
    dmask->padding.mask = dm[1];
    dmask->block_q = dm[2];
    dmask->block_kv = mask->block_kv == mask->block_q ? dm[2] : dm[3];
    dmask->cu_seqlens_q = dm[4];
    dmask->cu_seqlens_kv = mask->cu_seqlens_kv == mask->cu_seqlens_q ? dm[4] : dm[5];
    dmask->key_bias = dm[6];
    return 0;
done:
    return -1;
}

int jattn_device_timed_run(const jattn_problem *p, const jattn_exec *e, const jattn_mask *mask, const float *q,
                           const float *k, const float *v, float *out, float *lse, int warmup, int reps,
                           double *ms_median, char *err, size_t errlen) {
    const size_t nq = span_of(p, p->q, p->seq_q), nk = (size_t)kit_kv_span(p, p->k), nv = (size_t)kit_kv_span(p, p->v),
                 no = span_of(p, p->out, p->seq_q), nl = (size_t)(p->batch * p->heads * p->seq_q);
    float *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dlse = NULL;
    /* the mask's arrays on the device: kv_len, key mask, block_q, block_kv, cu_seqlens_q, cu_seqlens_kv,
     * key bias */
    void *dm[7] = {NULL};
    jattn_mask dmask = {0};
    float *times = NULL;
    cudaStream_t stream = NULL;
    cudaEvent_t *ev = NULL;
    int rc = -1, n_ev = 0;
    if (reps < 1) reps = 1;
    if (warmup < 0) warmup = 0;
    times = malloc(sizeof(float) * (size_t)reps);
    ev = calloc(2 * (size_t)reps, sizeof *ev);
    if (!times || !ev) {
        snprintf(err, errlen, "device timing: out of host memory");
        goto done;
    }
    CHECK(cudaMalloc((void **)&dq, nq * sizeof(float)));
    CHECK(cudaMalloc((void **)&dk, nk * sizeof(float)));
    CHECK(cudaMalloc((void **)&dv, nv * sizeof(float)));
    CHECK(cudaMalloc((void **)&dout, no * sizeof(float)));
    if (lse) CHECK(cudaMalloc((void **)&dlse, nl * sizeof(float)));
    /* the copies on the calls' stream (non-blocking: a cudaMemcpy from pageable memory on the legacy
     * stream may still be in flight when a call on it starts) */
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK(cudaMemcpyAsync(dq, q, nq * sizeof(float), cudaMemcpyHostToDevice, stream));
    CHECK(cudaMemcpyAsync(dk, k, nk * sizeof(float), cudaMemcpyHostToDevice, stream));
    CHECK(cudaMemcpyAsync(dv, v, nv * sizeof(float), cudaMemcpyHostToDevice, stream));
    CHECK(cudaMemcpyAsync(dout, out, no * sizeof(float), cudaMemcpyHostToDevice, stream)); /* keeps the gaps of out */
    if (mask && stage_mask(p, mask, stream, dm, &dmask, err, errlen) != 0) goto done;
    for (; n_ev < 2 * reps; n_ev++) CHECK(cudaEventCreate(&ev[n_ev]));

    jattn_exec x = e ? *e : (jattn_exec){0};
    x.backend = JATTN_BACKEND_CUDA;
    x.memory = JATTN_MEMORY_DEVICE;
    x.cuda_stream = stream;
    for (int i = 0; i < warmup + reps; i++) {
        int timed = i >= warmup;
        if (timed) CHECK(cudaEventRecord(ev[2 * (i - warmup)], stream));
        jattn_status st = jattn_forward_masked(NULL, p, &x, dq, dk, dv, mask ? &dmask : NULL, dout, dlse);
        if (st != JATTN_OK) {
            snprintf(err, errlen, "device timing: %s: %s", jattn_status_name(st), jattn_last_error());
            goto done;
        }
        if (timed) CHECK(cudaEventRecord(ev[2 * (i - warmup) + 1], stream));
    }
    CHECK(cudaStreamSynchronize(stream));
    if (events_median_ms(ev, times, reps, ms_median, err, errlen) != 0) goto done;
    CHECK(cudaMemcpy(out, dout, no * sizeof(float), cudaMemcpyDeviceToHost));
    if (lse) CHECK(cudaMemcpy(lse, dlse, nl * sizeof(float), cudaMemcpyDeviceToHost));
    rc = 0;
done:
    for (int i = 0; i < n_ev; i++) cudaEventDestroy(ev[i]);
    if (stream) cudaStreamDestroy(stream);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlse);
    for (int i = 0; i < 7; i++) cudaFree(dm[i]);
    free(times);
    free(ev);
    return rc;
}

int jattn_device_timed_backward(const jattn_problem *p, const jattn_exec *e, const jattn_mask *mask, const float *q,
                                const float *k, const float *v, const float *out, const float *lse, const float *dout,
                                float *dq, float *dk, float *dv, int warmup, int reps, double *ms_median, char *err,
                                size_t errlen) {
    const size_t nq = span_of(p, p->q, p->seq_q), nk = (size_t)kit_kv_span(p, p->k), nv = (size_t)kit_kv_span(p, p->v),
                 no = span_of(p, p->out, p->seq_q), nl = (size_t)(p->batch * p->heads * p->seq_q);
    const size_t n[9] = {nq, nk, nv, no, nl, no, nq, nk, nv}; /* q k v out lse dout dq dk dv */
    const float *host_in[6] = {q, k, v, out, lse, dout};
    float *hg[3] = {dq, dk, dv};
    float *d[9] = {NULL};
    void *dm[7] = {NULL};
    jattn_mask dmask = {0};
    jattn_plan *plan = NULL;
    void *ws = NULL;
    size_t ws_bytes = 0;
    float *times = NULL;
    cudaStream_t stream = NULL;
    cudaEvent_t *ev = NULL;
    int rc = -1, n_ev = 0;
    if (reps < 1) reps = 1;
    if (warmup < 0) warmup = 0;
    times = malloc(sizeof(float) * (size_t)reps);
    ev = calloc(2 * (size_t)reps, sizeof *ev);
    if (!times || !ev) {
        snprintf(err, errlen, "device timing: out of host memory");
        goto done;
    }
    for (int i = 0; i < 9; i++) CHECK(cudaMalloc((void **)&d[i], n[i] * sizeof(float)));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int i = 0; i < 6; i++) /* on the calls' stream, as above */
        CHECK(cudaMemcpyAsync(d[i], host_in[i], n[i] * sizeof(float), cudaMemcpyHostToDevice, stream));
    if (mask && stage_mask(p, mask, stream, dm, &dmask, err, errlen) != 0) goto done;
    for (; n_ev < 2 * reps; n_ev++) CHECK(cudaEventCreate(&ev[n_ev]));
    jattn_exec x = e ? *e : (jattn_exec){0};
    x.backend = JATTN_BACKEND_CUDA;
    x.memory = JATTN_MEMORY_DEVICE;
    x.cuda_stream = stream;
    /* the workspace the call's plan (its mask structure) reports */
    jattn_status st = jattn_plan_create(&plan, JATTN_PASS_BACKWARD, p, NULL, mask ? &dmask : NULL, &x);
    if (st != JATTN_OK) {
        snprintf(err, errlen, "device timing: %s: %s", jattn_status_name(st), jattn_last_error());
        goto done;
    }
    ws_bytes = jattn_plan_workspace_size(plan);
    if (ws_bytes) CHECK(cudaMalloc(&ws, ws_bytes));
    x.workspace = ws;
    x.workspace_bytes = ws_bytes;
    for (int i = 0; i < warmup + reps; i++) {
        int timed = i >= warmup;
        if (timed) CHECK(cudaEventRecord(ev[2 * (i - warmup)], stream));
        st = jattn_backward_masked(NULL, p, NULL, &x, d[0], d[1], d[2], d[3], d[4], d[5], NULL, mask ? &dmask : NULL,
                                   d[6], d[7], d[8]);
        if (st != JATTN_OK) {
            snprintf(err, errlen, "device timing: %s: %s", jattn_status_name(st), jattn_last_error());
            goto done;
        }
        if (timed) CHECK(cudaEventRecord(ev[2 * (i - warmup) + 1], stream));
    }
    CHECK(cudaStreamSynchronize(stream));
    if (events_median_ms(ev, times, reps, ms_median, err, errlen) != 0) goto done;
    for (int i = 0; i < 3; i++) CHECK(cudaMemcpy(hg[i], d[6 + i], n[6 + i] * sizeof(float), cudaMemcpyDeviceToHost));
    rc = 0;
done:
    for (int i = 0; i < n_ev; i++) cudaEventDestroy(ev[i]);
    if (stream) cudaStreamDestroy(stream);
    for (int i = 0; i < 9; i++) cudaFree(d[i]);
    for (int i = 0; i < 7; i++) cudaFree(dm[i]);
    jattn_plan_free(plan);
    cudaFree(ws);
    free(times);
    free(ev);
    return rc;
}
