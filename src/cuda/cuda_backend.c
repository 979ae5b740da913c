/* The cuda backend: device probing (once per process), kernel selection, launch on the
 * caller's stream for device pointers, and grow-only device buffers in the context for host
 * pointers. Kernels live in attention_v*.cu; this file is plain C over the CUDA runtime API. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "../backend.h"
#include "attention_sm90.h"
#include "cuda_internal.h"
#include "cuda_versions.h"

/* ---- the device, probed once ------------------------------------------------------------ */

static struct {
    int present;
    char why[160]; /* when not present */
} device;
/* Compute capability (10 major + minor) of each device, asked the first time a call runs on it
 * (a process may hold GPUs of several kinds; each call runs on the calling thread's current one). */
#define MAX_DEVICES 64
static atomic_int device_cc[MAX_DEVICES];
static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static atomic_int kernel_choice = JATTN_CUDA_KERNEL_AUTO;
static atomic_int bwd_kernel_choice = JATTN_CUDA_BWD_KERNEL_AUTO;
static atomic_long alloc_count;
static _Thread_local const char *last_kernel = "";

static void probe_device(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        snprintf(device.why, sizeof device.why, "backend: cuda: no CUDA device (cudaGetDeviceCount: %s)",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
        (void)cudaGetLastError();
        return;
    }
    const char *env = getenv("JATTN_CUDA_KERNEL"); /* v1, v6, v7, or 1, 6, 7 */
    if (env && env[0] == 'v') env++;
    for (int k = JATTN_CUDA_KERNEL_V1; env && k < JATTN_CUDA_KERNEL_COUNT; k++)
        if (env[0] == '0' + k && env[1] == '\0' && jattn_cuda_kernel_exists((jattn_cuda_kernel)k))
            atomic_store(&kernel_choice, k);
    const char *benv = getenv("JATTN_CUDA_BWD_KERNEL"); /* v2, v3, or 2, 3 */
    if (benv && benv[0] == 'v') benv++;
    for (int k = JATTN_CUDA_BWD_KERNEL_AUTO + 1; benv && k < JATTN_CUDA_BWD_KERNEL_COUNT; k++)
        if (benv[0] == '0' + k && benv[1] == '\0' && jattn_cuda_bwd_kernel_exists((jattn_cuda_bwd_kernel)k))
            atomic_store(&bwd_kernel_choice, k);
    device.present = 1;
}

/* The compute capability of the calling thread's current device (10 major + minor), or -1 when
 * it cannot be asked (*dev_out: the device). */
static int current_cc(int *dev_out) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    *dev_out = dev;
    if (dev >= 0 && dev < MAX_DEVICES) {
        const int cc = atomic_load(&device_cc[dev]);
        if (cc) return cc;
    }
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    const int cc = 10 * major + minor;
    if (dev >= 0 && dev < MAX_DEVICES) atomic_store(&device_cc[dev], cc);
    return cc;
}

void jattn_cuda_set_kernel(jattn_cuda_kernel k) {
    pthread_once(&device_once, probe_device); /* so the environment does not override it later */
    if (k == JATTN_CUDA_KERNEL_AUTO || jattn_cuda_kernel_exists(k)) atomic_store(&kernel_choice, (int)k);
}

long jattn_cuda_alloc_count(void) { return atomic_load(&alloc_count); }

const char *jattn_cuda_last_kernel(void) { return last_kernel; }

/* ---- selection -------------------------------------------------------------------------- */

/* The version that runs a problem: the forced one (JATTN_CUDA_KERNEL or jattn_cuda_set_kernel) or
 * AUTO's, as the ladder of src/cuda/NOTES.md says (cuda_versions.c).
 * @return the version, or NULL with *why set. */
static const cuda_version *version_for(const jattn_problem *p, jattn_precision precision, int cc, const char **why) {
    return jattn_cuda_forward_version((jattn_cuda_kernel)atomic_load(&kernel_choice), p, precision, cc, why);
}

/* The checks every call of the backend passes, forward or backward: a device of compute
 * capability 8.0 or newer, head_dim within v1's limit, extents indexed with 32 bits.
 * @return JATTN_OK with *cc the current device's compute capability (10 major + minor). */
static jattn_status device_checks(const jattn_problem *p, int *cc_out) {
    pthread_once(&device_once, probe_device);
    if (!device.present) return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "%s", device.why);
    int dev = 0;
    const int cc = current_cc(&dev);
    if (cc < 0) return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "backend: cuda: cannot query the current device");
    if (cc < 80)
        return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE,
                          "backend: cuda: device %d has compute capability %d.%d, needs 8.0 or newer", dev, cc / 10,
                          cc % 10);
    if (p->head_dim > JATTN_CUDA_V1_MAX_HEAD_DIM)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "head_dim: %lld exceeds the cuda backend's limit of %d",
                          (long long)p->head_dim, JATTN_CUDA_V1_MAX_HEAD_DIM);
    if (p->seq_q > INT32_MAX || p->seq_kv > INT32_MAX || p->batch * p->heads > INT32_MAX)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED,
                          "seq_q/seq_kv/batch*heads: the cuda backend indexes them with 32 bits");
    *cc_out = cc;
    return JATTN_OK;
}

static jattn_status cuda_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    int cc = 0;
    jattn_status st = device_checks(p, &cc);
    if (st == JATTN_OK) st = jattn_refuse_features(plan, JATTN_FEATURE_KEY_PADDING, "the cuda backend");
    if (st != JATTN_OK) return st;
    const char *why = "";
    const cuda_version *ver = version_for(p, e->precision, cc, &why);
    if (!ver)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED,
                          "%s (kernel v%d is forced: JATTN_CUDA_KERNEL or jattn_cuda_set_kernel)", why,
                          (int)atomic_load(&kernel_choice));
    plan->kernel = ver;
    plan->threads = 1;
    plan->selection.kernel = ver->name[jattn_cuda_arithmetic(e->precision, p->head_dim)];
    plan->selection.isa = cc == 90 ? "sm_90a" : "sm_80";
    return JATTN_OK;
}

/* The device workspace of a call: the key padding's pre-pass output (used by padded calls
 * only, reported for every call so that one workspace serves both), then the version's own
 * part. Both sizes are multiples of 256 bytes. */
static size_t padding_bytes(const jattn_problem *p) { return jattn_cuda_padding_bytes(p->batch, p->seq_kv); }

static size_t kernel_bytes(const jattn_problem *p, const cuda_version *ver) {
    return ver->workspace_bytes ? ver->workspace_bytes(p) : 0;
}

static size_t cuda_workspace_size(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    return padding_bytes(p) + kernel_bytes(p, plan->kernel);
}

/* ---- launch ----------------------------------------------------------------------------- */

/* A failed CUDA call: JATTN_ERROR_OUT_OF_MEMORY where the device had no memory for it (a workspace
 * from the stream-ordered pool), else JATTN_ERROR_CUDA; the message names the call and the error. */
static jattn_status cuda_fail(cudaError_t err, const char *what) {
    (void)cudaGetLastError(); /* clear a non-sticky error */
    return jattn_fail(err == cudaErrorMemoryAllocation ? JATTN_ERROR_OUT_OF_MEMORY : JATTN_ERROR_CUDA,
                      "cuda: %s failed: %s (%s)", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

/* What only a call knows (jattn_select sees no stream), checked before anything is enqueued, so that a
 * refused call writes nothing and leaves a capture intact:
 *  - a stream of another device than the current one: the call's pointers and kernels are the current
 *    device's, and a kernel launched into another device's stream fails (CUDA 12.8 and newer say which
 *    device a stream belongs to; with an older runtime the launch's error reports it);
 *  - host pointers on a stream being captured into a CUDA graph (or on the legacy stream while another
 *    stream of the device is captured): the host path copies through a device buffer it may allocate
 *    and synchronises, which a capture cannot record (it would be invalidated). */
/* The last stream found to be the current device's on this thread: a plan's runs on one stream ask the
 * driver once (a stream destroyed and another created at the same address on another device is not asked
 * again: its kernels' launch fails, JATTN_ERROR_CUDA). */
static _Thread_local void *checked_stream;
static _Thread_local int checked_device = -1;

static jattn_status check_call_stream(void *stream_ptr, jattn_memory memory) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
#if CUDART_VERSION >= 12080
    int dev = 0, sdev = 0; /* NULL, the legacy stream, is the current device's */
    if (stream && cudaGetDevice(&dev) == cudaSuccess && (stream_ptr != checked_stream || dev != checked_device)) {
        if (cudaStreamGetDevice(stream, &sdev) != cudaSuccess)
            (void)cudaGetLastError(); /* not known: the launch reports a bad stream */
        else if (sdev != dev)
            return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                              "exec.cuda_stream: a stream of device %d, but the current device is %d (the call runs "
                              "on the current device: cudaSetDevice(%d) first)",
                              sdev, dev, sdev);
        else
            checked_stream = stream_ptr, checked_device = dev;
    }
#endif
    if (memory == JATTN_MEMORY_HOST) {
        enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        const cudaError_t err = cudaStreamIsCapturing(stream, &capture);
        if (err != cudaSuccess) (void)cudaGetLastError(); /* so that no later cudaGetLastError reports it */
        if (err == cudaErrorStreamCaptureImplicit || (err == cudaSuccess && capture != cudaStreamCaptureStatusNone))
            return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                              "exec.memory: host pointers while %s is captured into a CUDA graph (the host path "
                              "copies and synchronises, which a capture cannot record): pass device pointers "
                              "(JATTN_MEMORY_DEVICE)",
                              err == cudaSuccess ? "exec.cuda_stream" : "a stream of the device");
    }
    return JATTN_OK;
}

/* The padding of a call on the device: kv_len and mask device pointers (the caller's, or the
 * host path's copies), the pre-pass output region, and what the pre-pass resolved. */
typedef struct device_padding {
    const int64_t *kv_len;
    const uint8_t *mask;
    const int *count, *index; /* set by the pre-pass; NULL without padding */
} device_padding;

static jattn_cuda_strides cuda_strides(jattn_strides s) {
    const jattn_cuda_strides r = {.batch = s.batch, .head = s.head, .token = s.token};
    return r;
}

/* The launch arguments of every version, forward or backward (the backward adds its gradients):
 * the problem, q, k, v, out and lse (device pointers) and the key padding the pre-pass resolved. */
static jattn_cuda_args launch_args(const jattn_problem *p, float scale, jattn_precision precision, const float *q,
                                   const float *k, const float *v, float *out, float *lse, const device_padding *pad) {
    const jattn_cuda_args a = {.q = q,
                               .k = k,
                               .v = v,
                               .out = out,
                               .lse = lse,
                               .batch = p->batch,
                               .heads = p->heads,
                               .seq_q = p->seq_q,
                               .seq_kv = p->seq_kv,
                               .head_dim = p->head_dim,
                               .q_strides = cuda_strides(p->q),
                               .k_strides = cuda_strides(p->k),
                               .v_strides = cuda_strides(p->v),
                               .out_strides = cuda_strides(p->out),
                               .scale = scale,
                               .precision = jattn_cuda_arithmetic(precision, p->head_dim),
                               .kv_count = pad->count,
                               .kv_index = pad->index};
    return a;
}

/* workspace: the call's (cuda_workspace_size: padding region, then the version's part), or
 * NULL (then the padding region and the version's part come from the stream-ordered pool,
 * allocated and freed in stream order: no synchronisation, and a graph capture records it).
 * The plan's version runs unless it refuses the call or the pool cannot give its workspace;
 * then its call_next does (jattn_cuda_versions[]). */
static jattn_status launch(const jattn_call *c, const jattn_plan *plan, const float *q, const float *k, const float *v,
                           float *out, float *lse, void *workspace, device_padding *pad) {
    const jattn_problem *p = c->problem;
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;
    void *owned = NULL; /* the padding region, from the pool */
    if (pad->kv_len || pad->mask) {
        void *region = workspace;
        if (!region) {
            cudaError_t err = cudaMallocAsync(&owned, padding_bytes(p), stream);
            if (err != cudaSuccess) return cuda_fail(err, "cudaMallocAsync (key padding)");
            atomic_fetch_add(&alloc_count, 1);
            region = owned;
        }
        cudaError_t err =
            (cudaError_t)jattn_cuda_launch_padding(pad->kv_len, pad->mask, c->mask_stride, (int)p->batch,
                                                   (int)p->seq_kv, region, &pad->count, &pad->index, c->cuda_stream);
        if (err != cudaSuccess) {
            if (owned) (void)cudaFreeAsync(owned, stream);
            return cuda_fail(err, "key padding pre-pass");
        }
    }
    const jattn_cuda_args a = launch_args(p, c->scale, c->precision, q, k, v, out, lse, pad);
    void *kernel_ws = workspace ? (char *)workspace + padding_bytes(p) : NULL, *kernel_owned = NULL;
    const cuda_version *ver = jattn_cuda_call_version(plan->kernel, &a);
    while (ver->workspace_bytes && !kernel_ws) {
        if (cudaMallocAsync(&kernel_owned, ver->workspace_bytes(p), stream) == cudaSuccess) {
            atomic_fetch_add(&alloc_count, 1);
            kernel_ws = kernel_owned;
            break;
        }
        (void)cudaGetLastError();
        kernel_owned = NULL;
        ver = jattn_cuda_call_version(ver->call_next, &a);
    }
    const char *name = ver->name[a.precision];
    cudaError_t err = (cudaError_t)ver->launch(&a, ver->workspace_bytes ? kernel_ws : NULL, c->cuda_stream);
    if (kernel_owned) {
        cudaError_t ferr = cudaFreeAsync(kernel_owned, stream);
        if (err == cudaSuccess) err = ferr;
    }
    jattn_status st = err == cudaSuccess ? JATTN_OK : cuda_fail(err, name);
    if (owned) {
        cudaError_t ferr = cudaFreeAsync(owned, stream);
        if (st == JATTN_OK && ferr != cudaSuccess) st = cuda_fail(ferr, "cudaFreeAsync (key padding)");
    }
    if (st == JATTN_OK) last_kernel = name;
    return st;
}

/* ---- host arrays: staged through a device buffer --------------------------------------- */

/* Elements a tensor spans (the validator has checked it fits). */
static size_t span_elems(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return (size_t)(1 + (p->batch - 1) * s.batch + (p->heads - 1) * s.head + (seq - 1) * s.token + (p->head_dim - 1));
}

/* Bytes of a tensor, and whether it is dense (no gaps to preserve). */
static size_t span_bytes(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return span_elems(p, s, seq) * sizeof(float);
}
static int dense(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return span_elems(p, s, seq) == (size_t)(p->batch * p->heads * seq * p->head_dim);
}

/* Bytes of a call's mask (row b at mask + b * mask_stride, seq_kv bytes each). */
static size_t mask_span(const jattn_problem *p, const uint8_t *mask, int64_t mask_stride) {
    return mask ? (size_t)(mask_stride ? (p->batch - 1) * mask_stride + p->seq_kv : p->seq_kv) : 0;
}

/* Grow-only device memory kept in ctx->backend_state[JATTN_BACKEND_CUDA]. */
typedef struct cuda_state {
    void *buffer;
    size_t bytes;
} cuda_state;

#define BUFFER_ALIGN 256

static size_t align_up(size_t n) { return (n + BUFFER_ALIGN - 1) / BUFFER_ALIGN * BUFFER_ALIGN; }

static jattn_status device_alloc(void **ptr, size_t bytes) {
    cudaError_t err = cudaMalloc(ptr, bytes);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return jattn_fail(err == cudaErrorMemoryAllocation ? JATTN_ERROR_OUT_OF_MEMORY : JATTN_ERROR_CUDA,
                          "cuda: cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorName(err));
    }
    atomic_fetch_add(&alloc_count, 1);
    return JATTN_OK;
}

/* The device buffer of a host-pointer call: the context's grow-only one (ctx non-NULL), else a
 * cudaMalloc the caller frees after the call. */
static jattn_status host_path_buffer(jattn_ctx *ctx, size_t total, void **buf) {
    if (!ctx) return device_alloc(buf, total);
    cuda_state *state = ctx->backend_state[JATTN_BACKEND_CUDA];
    if (!state) {
        state = calloc(1, sizeof *state);
        if (!state) return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "ctx: allocation of the cuda state failed");
        ctx->backend_state[JATTN_BACKEND_CUDA] = state;
    }
    if (state->bytes < total) {
        if (state->buffer) {
            cudaError_t err = cudaFree(state->buffer);
            state->buffer = NULL;
            state->bytes = 0;
            if (err != cudaSuccess) return cuda_fail(err, "cudaFree");
        }
        jattn_status st = device_alloc(&state->buffer, total);
        if (st != JATTN_OK) return st;
        state->bytes = total;
    }
    *buf = state->buffer;
    return JATTN_OK;
}

/* One host array of a call, staged in the device buffer: copied in before the run when `in` is
 * set, copied back after a successful run when `out` is set. */
typedef struct staged_array {
    const void *in;
    void *out;
    size_t bytes; /* 0: absent (dev stays NULL) */
    void *dev;    /* its place in the device buffer (set by stage_host_call) */
} staged_array;

/* Runs a staged call on the device: the kernels enqueued on the call's stream, reading and
 * writing the arrays' device copies; `workspace` the region stage_host_call reserved (or NULL). */
typedef jattn_status (*staged_run)(const void *call, const jattn_plan *plan, const staged_array *x, void *workspace);

/* Host arrays, forward or backward: the `n` arrays and `workspace_bytes` of workspace in one device
 * buffer (the context's grow-only one, else one for the call), each region 256-byte aligned, in
 * that order; the inputs copied in, the run enqueued, the outputs copied back, the stream waited
 * for; the call's buffer freed. */
static jattn_status stage_host_call(jattn_ctx *ctx, void *stream_ptr, staged_array *x, int n, size_t workspace_bytes,
                                    staged_run run, const void *call, const jattn_plan *plan) {
    cudaStream_t stream = (cudaStream_t)stream_ptr;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += align_up(x[i].bytes);
    const size_t off_w = total;
    total += align_up(workspace_bytes);
    void *buf = NULL;
    jattn_status st = host_path_buffer(ctx, total, &buf);
    if (st != JATTN_OK) return st;
    char *at = buf;
    for (int i = 0; i < n; i++) {
        x[i].dev = x[i].bytes ? at : NULL;
        at += align_up(x[i].bytes);
    }
    cudaError_t err = cudaSuccess;
    const char *what = "cudaMemcpyAsync (host to device)";
    for (int i = 0; i < n && err == cudaSuccess; i++)
        if (x[i].in && x[i].bytes) err = cudaMemcpyAsync(x[i].dev, x[i].in, x[i].bytes, cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) {
        st = run(call, plan, x, workspace_bytes ? (char *)buf + off_w : NULL);
        what = "cudaMemcpyAsync (device to host)";
        for (int i = 0; i < n && st == JATTN_OK && err == cudaSuccess; i++)
            if (x[i].out && x[i].bytes)
                err = cudaMemcpyAsync(x[i].out, x[i].dev, x[i].bytes, cudaMemcpyDeviceToHost, stream);
        if (st == JATTN_OK && err == cudaSuccess) {
            what = "cudaStreamSynchronize";
            err = cudaStreamSynchronize(stream);
        }
    }
    if (err != cudaSuccess) st = cuda_fail(err, what);
    if (!ctx) {
        cudaError_t ferr = cudaFree(buf);
        if (st == JATTN_OK && ferr != cudaSuccess) st = cuda_fail(ferr, "cudaFree");
    }
    return st;
}

/* The staged arrays of a forward call, in the device buffer's order. */
enum { FWD_Q, FWD_K, FWD_V, FWD_OUT, FWD_LSE, FWD_KV_LEN, FWD_MASK, FWD_ARRAYS };

static jattn_status run_forward(const void *call, const jattn_plan *plan, const staged_array *x, void *workspace) {
    const jattn_call *c = call;
    device_padding pad = {.kv_len = x[FWD_KV_LEN].dev, .mask = x[FWD_MASK].dev};
    return launch(c, plan, x[FWD_Q].dev, x[FWD_K].dev, x[FWD_V].dev, x[FWD_OUT].dev, x[FWD_LSE].dev,
                  c->workspace ? c->workspace : workspace, &pad);
}

/* Host arrays: q, k, v (and out when it has gaps, so they survive) and the key padding copied
 * in, out (and lse) copied back. */
static jattn_status forward_host(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const size_t no = span_bytes(p, p->out, p->seq_q);
    staged_array x[FWD_ARRAYS] = {
        [FWD_Q] = {.in = c->q, .bytes = span_bytes(p, p->q, p->seq_q)},
        [FWD_K] = {.in = c->k, .bytes = span_bytes(p, p->k, p->seq_kv)},
        [FWD_V] = {.in = c->v, .bytes = span_bytes(p, p->v, p->seq_kv)},
        [FWD_OUT] = {.in = dense(p, p->out, p->seq_q) ? NULL : c->out, .out = c->out, .bytes = no},
        [FWD_LSE] = {.out = c->lse, .bytes = c->lse ? (size_t)(p->batch * p->heads * p->seq_q) * sizeof(float) : 0},
        [FWD_KV_LEN] = {.in = c->kv_len, .bytes = c->kv_len ? (size_t)p->batch * sizeof(int64_t) : 0},
        [FWD_MASK] = {.in = c->mask, .bytes = mask_span(p, c->mask, c->mask_stride)},
    };
    /* the workspace (padding region, then the version's part) unless the caller gave one or none is needed */
    const size_t kb = kernel_bytes(p, plan->kernel);
    const size_t nw = !c->workspace && (c->kv_len || c->mask || kb) ? padding_bytes(p) + kb : 0;
    return stage_host_call(c->ctx, c->cuda_stream, x, FWD_ARRAYS, nw, run_forward, c, plan);
}

static jattn_status cuda_forward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_status st = check_call_stream(c->cuda_stream, c->memory);
    if (st != JATTN_OK) return st;
    if (c->memory == JATTN_MEMORY_DEVICE) {
        device_padding pad = {.kv_len = c->kv_len, .mask = c->mask};
        return launch(c, plan, c->q, c->k, c->v, c->out, c->lse, c->workspace, &pad);
    }
    return forward_host(c, plan);
}

static void cuda_release_ctx(jattn_ctx *ctx) {
    cuda_state *state = ctx->backend_state[JATTN_BACKEND_CUDA];
    if (!state) return;
    if (state->buffer) (void)cudaFree(state->buffer);
    free(state);
    ctx->backend_state[JATTN_BACKEND_CUDA] = NULL;
}

/* ---- the backward ------------------------------------------------------------------------ */

/* The backward kernel: the forced one (JATTN_CUDA_BWD_KERNEL=v2|v3) or AUTO's, as the ladder of
 * src/cuda/NOTES.md says (cuda_versions.c); the forward's kernel choice (JATTN_CUDA_KERNEL) does not
 * apply to it. The one place the backward's version is chosen (a call v2 then refuses at launch, key
 * padding or alignment, runs v3: launch_backward). */
static jattn_status cuda_select_backward(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    int cc = 0;
    jattn_status st = device_checks(p, &cc);
    if (st == JATTN_OK) st = jattn_refuse_features(plan, JATTN_FEATURE_KEY_PADDING, "the cuda backend");
    if (st != JATTN_OK) return st;
    const char *why = "";
    const cuda_version *ver =
        jattn_cuda_backward_version((jattn_cuda_bwd_kernel)atomic_load(&bwd_kernel_choice), p, e->precision, cc, &why);
    if (!ver) return jattn_fail(JATTN_ERROR_UNSUPPORTED, "%s", why);
    plan->kernel = ver;
    plan->threads = 1;
    plan->selection.kernel = ver->name[jattn_cuda_arithmetic(e->precision, p->head_dim)];
    plan->selection.isa = cc == 90 ? "sm_90a" : "sm_80";
    return JATTN_OK;
}

/* The device workspace of a backward call: the key padding's region (as the forward's), then the
 * kernel's own (v2, v3: their tile records; v2's never less than v3's). */
static size_t cuda_workspace_size_backward(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    return padding_bytes(p) + kernel_bytes(p, plan->kernel);
}

/* The device pointers of a backward call (the caller's, or the host path's copies). */
typedef struct bwd_pointers {
    const float *q, *k, *v, *out, *lse, *dout, *dlse;
    float *dq, *dk, *dv;
} bwd_pointers;

/* Enqueues the backward on the call's stream. workspace: the call's (padding region, then the
 * kernel's), or NULL: then both come from the stream-ordered pool (allocated and freed in stream
 * order: no synchronisation, recorded by a graph capture). */
static jattn_status launch_backward(const jattn_call *c, const jattn_plan *plan, const bwd_pointers *x, void *workspace,
                                    device_padding *pad) {
    const jattn_problem *p = c->problem;
    const cuda_version *ver = plan->kernel;
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;
    const size_t pad_bytes = padding_bytes(p), total = pad_bytes + kernel_bytes(p, ver);
    void *owned = NULL;
    if (!workspace) {
        cudaError_t err = cudaMallocAsync(&owned, total, stream);
        if (err != cudaSuccess) return cuda_fail(err, "cudaMallocAsync (backward workspace)");
        atomic_fetch_add(&alloc_count, 1);
        workspace = owned;
    }
    cudaError_t err = cudaSuccess;
    if (pad->kv_len || pad->mask)
        err = (cudaError_t)jattn_cuda_launch_padding(pad->kv_len, pad->mask, c->mask_stride, (int)p->batch,
                                                     (int)p->seq_kv, workspace, &pad->count, &pad->index, stream);
    const char *name = ver->name[jattn_cuda_arithmetic(c->precision, p->head_dim)];
    const char *what = err == cudaSuccess ? name : "key padding pre-pass";
    if (err == cudaSuccess) {
        /* out and lse are read only: the forward's outputs are inputs here */
        jattn_cuda_args a =
            launch_args(p, c->scale, c->precision, x->q, x->k, x->v, (float *)x->out, (float *)x->lse, pad);
        a.dout = x->dout;
        a.dlse = x->dlse;
        a.dq = x->dq;
        a.dk = x->dk;
        a.dv = x->dv;
        a.dout_strides = cuda_strides(c->g.dout);
        a.dq_strides = cuda_strides(c->g.dq);
        a.dk_strides = cuda_strides(c->g.dk);
        a.dv_strides = cuda_strides(c->g.dv);
        /* a call the version refuses runs its call_next, in the same workspace */
        ver = jattn_cuda_call_version(ver, &a);
        name = what = ver->name[a.precision];
        err = (cudaError_t)ver->launch(&a, (char *)workspace + pad_bytes, stream);
    }
    if (owned) {
        cudaError_t ferr = cudaFreeAsync(owned, stream);
        if (err == cudaSuccess) err = ferr, what = "cudaFreeAsync (backward workspace)";
    }
    if (err != cudaSuccess) return cuda_fail(err, what);
    last_kernel = name;
    return JATTN_OK;
}

/* The staged arrays of a backward call, in the device buffer's order. */
enum {
    BWD_Q,
    BWD_K,
    BWD_V,
    BWD_OUT,
    BWD_LSE,
    BWD_DOUT,
    BWD_DLSE,
    BWD_DQ,
    BWD_DK,
    BWD_DV,
    BWD_KV_LEN,
    BWD_MASK,
    BWD_ARRAYS
};

static jattn_status run_backward(const void *call, const jattn_plan *plan, const staged_array *x, void *workspace) {
    const jattn_call *c = call;
    const bwd_pointers d = {.q = x[BWD_Q].dev,
                            .k = x[BWD_K].dev,
                            .v = x[BWD_V].dev,
                            .out = x[BWD_OUT].dev,
                            .lse = x[BWD_LSE].dev,
                            .dout = x[BWD_DOUT].dev,
                            .dlse = x[BWD_DLSE].dev,
                            .dq = x[BWD_DQ].dev,
                            .dk = x[BWD_DK].dev,
                            .dv = x[BWD_DV].dev};
    device_padding pad = {.kv_len = x[BWD_KV_LEN].dev, .mask = x[BWD_MASK].dev};
    return launch_backward(c, plan, &d, c->workspace ? c->workspace : workspace, &pad);
}

/* Host arrays: the inputs (and the gradients that have gaps, so the gaps survive) and the key
 * padding copied in, dq, dk, dv copied back. */
static jattn_status backward_host(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const size_t nl = (size_t)(p->batch * p->heads * p->seq_q) * sizeof(float);
    const jattn_strides gq = c->g.dq, gk = c->g.dk, gv = c->g.dv;
    staged_array x[BWD_ARRAYS] = {
        [BWD_Q] = {.in = c->q, .bytes = span_bytes(p, p->q, p->seq_q)},
        [BWD_K] = {.in = c->k, .bytes = span_bytes(p, p->k, p->seq_kv)},
        [BWD_V] = {.in = c->v, .bytes = span_bytes(p, p->v, p->seq_kv)},
        [BWD_OUT] = {.in = c->out, .bytes = span_bytes(p, p->out, p->seq_q)},
        [BWD_LSE] = {.in = c->lse, .bytes = nl},
        [BWD_DOUT] = {.in = c->dout, .bytes = span_bytes(p, c->g.dout, p->seq_q)},
        [BWD_DLSE] = {.in = c->dlse, .bytes = c->dlse ? nl : 0},
        [BWD_DQ] = {.in = dense(p, gq, p->seq_q) ? NULL : c->dq, .out = c->dq, .bytes = span_bytes(p, gq, p->seq_q)},
        [BWD_DK] = {.in = dense(p, gk, p->seq_kv) ? NULL : c->dk, .out = c->dk, .bytes = span_bytes(p, gk, p->seq_kv)},
        [BWD_DV] = {.in = dense(p, gv, p->seq_kv) ? NULL : c->dv, .out = c->dv, .bytes = span_bytes(p, gv, p->seq_kv)},
        [BWD_KV_LEN] = {.in = c->kv_len, .bytes = c->kv_len ? (size_t)p->batch * sizeof(int64_t) : 0},
        [BWD_MASK] = {.in = c->mask, .bytes = mask_span(p, c->mask, c->mask_stride)},
    };
    const size_t nw = c->workspace ? 0 : padding_bytes(p) + kernel_bytes(p, plan->kernel);
    return stage_host_call(c->ctx, c->cuda_stream, x, BWD_ARRAYS, nw, run_backward, c, plan);
}

static jattn_status cuda_backward(const jattn_call *c, const jattn_plan *plan) {
    const jattn_status st = check_call_stream(c->cuda_stream, c->memory);
    if (st != JATTN_OK) return st;
    if (c->memory == JATTN_MEMORY_DEVICE) {
        const bwd_pointers x = {.q = c->q,
                                .k = c->k,
                                .v = c->v,
                                .out = c->out,
                                .lse = c->lse,
                                .dout = c->dout,
                                .dlse = c->dlse,
                                .dq = c->dq,
                                .dk = c->dk,
                                .dv = c->dv};
        device_padding pad = {.kv_len = c->kv_len, .mask = c->mask};
        return launch_backward(c, plan, &x, c->workspace, &pad);
    }
    return backward_host(c, plan);
}

const jattn_backend_ops jattn_backend_cuda = {
    .id = JATTN_BACKEND_CUDA,
    .is_gpu = 1,
    .workspace_memory = JATTN_MEMORY_DEVICE,
    .select = cuda_select,
    .workspace_size = cuda_workspace_size,
    .forward = cuda_forward,
    .release_ctx = cuda_release_ctx,
    .select_backward = cuda_select_backward,
    .workspace_size_backward = cuda_workspace_size_backward,
    .backward = cuda_backward,
};
