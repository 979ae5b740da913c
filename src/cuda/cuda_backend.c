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
    const char *benv = getenv("JATTN_CUDA_BWD_KERNEL"); /* v3, v4, or 3, 4 */
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

/* ---- selection -------------------------------------------------------------------------- */

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

/* The version a plan runs, forward or backward: the forced one (JATTN_CUDA_KERNEL,
 * jattn_cuda_set_kernel, JATTN_CUDA_BWD_KERNEL) or AUTO's, as the ladders of src/cuda/NOTES.md say
 * (cuda_versions.c), asked with everything the plan knows (its mask parts, grouped heads, gradient
 * strides and pointer alignment), so that the version named is the version its runs launch. */
static jattn_status select_version(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    int cc = 0;
    const jattn_status st = device_checks(p, &cc);
    if (st != JATTN_OK) return st;
    if (plan->empty) { /* no kernel runs (write_empty): any version, forced or not, serves it */
        plan->threads = 1;
        plan->selection.isa = cc == 90 ? "sm_90a" : "sm_80";
        return JATTN_OK;
    }
    const int backward = plan->pass == JATTN_PASS_BACKWARD;
    const cuda_query q = {.p = p,
                          .grad = backward ? &plan->grad : NULL,
                          .precision = e->precision,
                          .cc = cc,
                          .features = plan->features,
                          .causal = plan->mask.causal,
                          .alignment = plan->alignment};
    const int forced = backward ? atomic_load(&bwd_kernel_choice) : atomic_load(&kernel_choice);
    const char *why = "";
    const cuda_version *ver = backward ? jattn_cuda_backward_version((jattn_cuda_bwd_kernel)forced, &q, &why)
                                       : jattn_cuda_forward_version((jattn_cuda_kernel)forced, &q, &why);
    if (!ver) {
        if (forced == 0) return jattn_fail(JATTN_ERROR_UNSUPPORTED, "%s", why);
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "%s (kernel v%d is forced: %s)", why, forced,
                          backward ? "JATTN_CUDA_BWD_KERNEL" : "JATTN_CUDA_KERNEL or jattn_cuda_set_kernel");
    }
    plan->kernel = ver;
    plan->threads = 1;
    plan->selection.kernel = ver->name[jattn_cuda_arithmetic(e->precision, p->head_dim)];
    plan->selection.isa = cc == 90 ? "sm_90a" : "sm_80";
    return JATTN_OK;
}

/* The device workspace of a call: the mask's region (the key padding pre-pass's output, for a plan
 * with key padding), then the version's own part. Both sizes are multiples of 256 bytes. */
static size_t mask_bytes(const jattn_plan *plan) {
    const jattn_problem *p = &plan->problem;
    return plan->features & JATTN_FEATURE_KEY_PADDING ? jattn_cuda_padding_bytes(p->batch, p->seq_kv) : 0;
}

static size_t kernel_bytes(const jattn_plan *plan) {
    const cuda_version *ver = plan->kernel;
    return ver->workspace_bytes ? ver->workspace_bytes(&plan->problem) : 0;
}

static size_t cuda_workspace_size(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)p;
    (void)e;
    return mask_bytes(plan) + kernel_bytes(plan);
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
    enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (stream && cudaGetDevice(&dev) == cudaSuccess && (stream_ptr != checked_stream || dev != checked_device)) {
        /* cudaStreamGetDevice on a stream being captured invalidates the capture (CUDA 13.0, H100:
         * cudaErrorStreamCaptureUnsupported): a captured stream is not asked (its kernels' launch fails
         * if it is another device's, JATTN_ERROR_CUDA) */
        if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) (void)cudaGetLastError();
        if (capturing == cudaStreamCaptureStatusNone) { /* a captured stream is not asked, nor remembered */
            if (cudaStreamGetDevice(stream, &sdev) != cudaSuccess) {
                (void)cudaGetLastError(); /* not known: the launch reports a bad stream */
            } else if (sdev != dev) {
                return jattn_fail(JATTN_ERROR_INVALID_ARGUMENT,
                                  "exec.cuda_stream: a stream of device %d, but the current device is %d (the call "
                                  "runs on the current device: cudaSetDevice(%d) first)",
                                  sdev, dev, sdev);
            } else {
                checked_stream = stream_ptr, checked_device = dev;
            }
        }
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

static jattn_cuda_strides cuda_strides(jattn_strides s) {
    const jattn_cuda_strides r = {.batch = s.batch, .head = s.head, .token = s.token};
    return r;
}

/* The device pointers of a call, forward or backward (the caller's, or the host path's copies): the
 * tensors and the mask's arrays, in one order (validate.h's for the tensors). */
enum {
    X_Q,
    X_K,
    X_V,
    X_OUT,
    X_LSE,
    X_DOUT,
    X_DLSE,
    X_DQ,
    X_DK,
    X_DV,
    X_KV_LEN,
    X_MASK,
    X_BLOCK_Q,
    X_BLOCK_KV,
    X_SEG_Q,
    X_SEG_KV,
    X_BIAS,
    X_COUNT
};
typedef struct device_arrays {
    void *x[X_COUNT];
} device_arrays;

static device_arrays call_arrays(const jattn_call *c) {
    const device_arrays d = {{[X_Q] = (void *)c->q,
                              [X_K] = (void *)c->k,
                              [X_V] = (void *)c->v,
                              [X_OUT] = c->out,
                              [X_LSE] = c->lse,
                              [X_DOUT] = (void *)c->dout,
                              [X_DLSE] = (void *)c->dlse,
                              [X_DQ] = c->dq,
                              [X_DK] = c->dk,
                              [X_DV] = c->dv,
                              [X_KV_LEN] = (void *)c->kv_len,
                              [X_MASK] = (void *)c->mask,
                              [X_BLOCK_Q] = (void *)c->block_q,
                              [X_BLOCK_KV] = (void *)c->block_kv,
                              [X_SEG_Q] = (void *)c->cu_seqlens_q,
                              [X_SEG_KV] = (void *)c->cu_seqlens_kv,
                              [X_BIAS] = (void *)c->key_bias}};
    return d;
}

/* The launch arguments of every version, forward or backward: the problem, the device pointers, the
 * mask (the key padding as the pre-pass resolved it: count, index) and the gradients' strides. */
static jattn_cuda_args launch_args(const jattn_call *c, const device_arrays *d, const int *count, const int *index) {
    const jattn_problem *p = c->problem;
    jattn_cuda_args a = {.q = d->x[X_Q],
                         .k = d->x[X_K],
                         .v = d->x[X_V],
                         .out = d->x[X_OUT],
                         .lse = d->x[X_LSE],
                         .batch = p->batch,
                         .heads = p->heads,
                         .seq_q = p->seq_q,
                         .seq_kv = p->seq_kv,
                         .head_dim = p->head_dim,
                         .q_strides = cuda_strides(p->q),
                         .k_strides = cuda_strides(p->k),
                         .v_strides = cuda_strides(p->v),
                         .out_strides = cuda_strides(p->out),
                         .scale = c->scale,
                         .precision = jattn_cuda_arithmetic(c->precision, p->head_dim),
                         .kv_count = count,
                         .kv_index = index,
                         .kv_heads = p->kv_heads,
                         .causal = (int)c->causal,
                         .block_q = d->x[X_BLOCK_Q],
                         .block_kv = d->x[X_BLOCK_KV],
                         .num_blocks = c->num_blocks,
                         .cu_seqlens_q = d->x[X_SEG_Q],
                         .cu_seqlens_kv = d->x[X_SEG_KV],
                         .num_segments = c->num_segments,
                         .segments_stride = c->segments_stride,
                         .key_bias = d->x[X_BIAS],
                         .bias_batch_stride = c->bias_batch_stride,
                         .bias_head_stride = c->bias_head_stride};
    if (c->pass == JATTN_PASS_BACKWARD) {
        a.dout = d->x[X_DOUT];
        a.dlse = d->x[X_DLSE];
        a.dq = d->x[X_DQ];
        a.dk = d->x[X_DK];
        a.dv = d->x[X_DV];
        a.dout_strides = cuda_strides(c->g.dout);
        a.dq_strides = cuda_strides(c->g.dq);
        a.dk_strides = cuda_strides(c->g.dk);
        a.dv_strides = cuda_strides(c->g.dv);
    }
    return a;
}

/* The one launch path, forward and backward: the plan's version, on the call's stream, with its
 * workspace: the call's (cuda_workspace_size: the mask's region, then the version's part), or NULL,
 * then both come from the stream-ordered pool (allocated and freed in stream order: no
 * synchronisation, and a graph capture records it; a pool that cannot give it is
 * JATTN_ERROR_OUT_OF_MEMORY, nothing enqueued). The key padding's pre-pass runs first. */
static jattn_status launch(const jattn_call *c, const jattn_plan *plan, const device_arrays *d, void *workspace) {
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;
    const cuda_version *ver = plan->kernel;
    const size_t region = mask_bytes(plan), total = region + kernel_bytes(plan);
    void *owned = NULL;
    if (!workspace && total) {
        const cudaError_t err = cudaMallocAsync(&owned, total, stream);
        if (err != cudaSuccess) return cuda_fail(err, "cudaMallocAsync (the call's workspace)");
        atomic_fetch_add(&alloc_count, 1);
        workspace = owned;
    }
    const int *count = NULL, *index = NULL;
    cudaError_t err = cudaSuccess;
    const char *what = ver->name[jattn_cuda_arithmetic(c->precision, c->problem->head_dim)];
    if (d->x[X_KV_LEN] || d->x[X_MASK]) {
        err =
            (cudaError_t)jattn_cuda_launch_padding(d->x[X_KV_LEN], d->x[X_MASK], c->mask_stride, (int)c->problem->batch,
                                                   (int)c->problem->seq_kv, workspace, &count, &index, stream);
        if (err != cudaSuccess) what = "key padding pre-pass";
    }
    if (err == cudaSuccess) {
        const jattn_cuda_args a = launch_args(c, d, count, index);
        err = (cudaError_t)ver->launch(&a, kernel_bytes(plan) ? (char *)workspace + region : NULL, stream);
    }
    if (owned) {
        const cudaError_t ferr = cudaFreeAsync(owned, stream);
        if (err == cudaSuccess && ferr != cudaSuccess) err = ferr, what = "cudaFreeAsync (the call's workspace)";
    }
    if (err != cudaSuccess) return cuda_fail(err, what);
    return JATTN_OK;
}

/* ---- host arrays: staged through a device buffer --------------------------------------- */

/* Elements a tensor of `heads` heads spans (the validator has checked it fits). */
static size_t span_elems(const jattn_problem *p, int64_t heads, jattn_strides s, int64_t seq) {
    return (size_t)(1 + (p->batch - 1) * s.batch + (heads - 1) * s.head + (seq - 1) * s.token + (p->head_dim - 1));
}

/* Bytes of a tensor, and whether it is dense (no gaps to preserve). */
static size_t span_bytes(const jattn_problem *p, int64_t heads, jattn_strides s, int64_t seq) {
    return span_elems(p, heads, s, seq) * sizeof(float);
}
static int dense(const jattn_problem *p, int64_t heads, jattn_strides s, int64_t seq) {
    return span_elems(p, heads, s, seq) == (size_t)(p->batch * heads * seq * p->head_dim);
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
    size_t bytes; /* 0: absent (its device pointer stays NULL) */
} staged_array;

/* Host arrays, forward or backward: every array of the call and, unless the caller gave one, the
 * workspace in one device buffer (the context's grow-only one, else one for the call), each region
 * 256-byte aligned; the inputs copied in, the launch enqueued, the outputs copied back, the stream
 * waited for; the call's buffer freed. The tensors' gaps survive: an output with gaps is copied in
 * first. */
static jattn_status run_host(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const int64_t H = p->heads, Hkv = p->kv_heads;
    const int fwd = c->pass == JATTN_PASS_FORWARD;
    const size_t rows = (size_t)(p->batch * H * p->seq_q) * sizeof(float);
    const size_t offsets = (size_t)(c->num_segments + 1) * sizeof(int64_t);
    const size_t seg_bytes =
        c->cu_seqlens_q
            ? (c->segments_stride ? (size_t)(p->batch - 1) * (size_t)c->segments_stride * sizeof(int64_t) + offsets
                                  : offsets)
            : 0;
    const size_t bias_bytes =
        c->key_bias ? ((size_t)((p->batch - 1) * c->bias_batch_stride + (H - 1) * c->bias_head_stride + p->seq_kv)) *
                          sizeof(float)
                    : 0;
    const size_t block_bytes = c->block_q ? (size_t)(c->num_blocks + 1) * sizeof(int64_t) : 0;
    const size_t no = span_bytes(p, H, p->out, p->seq_q);
    staged_array x[X_COUNT] = {
        [X_Q] = {.in = c->q, .bytes = span_bytes(p, H, p->q, p->seq_q)},
        [X_K] = {.in = c->k, .bytes = span_bytes(p, Hkv, p->k, p->seq_kv)},
        [X_V] = {.in = c->v, .bytes = span_bytes(p, Hkv, p->v, p->seq_kv)},
        [X_OUT] = fwd ? (staged_array){.in = dense(p, H, p->out, p->seq_q) ? NULL : c->out, .out = c->out, .bytes = no}
                      : (staged_array){.in = c->out, .bytes = no},
        [X_LSE] = fwd ? (staged_array){.out = c->lse, .bytes = c->lse ? rows : 0}
                      : (staged_array){.in = c->lse, .bytes = rows},
        [X_KV_LEN] = {.in = c->kv_len, .bytes = c->kv_len ? (size_t)p->batch * sizeof(int64_t) : 0},
        [X_MASK] = {.in = c->mask,
                    .bytes = c->mask
                                 ? (size_t)(c->mask_stride ? (p->batch - 1) * c->mask_stride + p->seq_kv : p->seq_kv)
                                 : 0},
        [X_BLOCK_Q] = {.in = c->block_q, .bytes = block_bytes},
        [X_BLOCK_KV] = {.in = c->block_kv, .bytes = block_bytes},
        [X_SEG_Q] = {.in = c->cu_seqlens_q, .bytes = seg_bytes},
        [X_SEG_KV] = {.in = c->cu_seqlens_kv, .bytes = seg_bytes},
        [X_BIAS] = {.in = c->key_bias, .bytes = bias_bytes},
    };
    if (!fwd) {
        const jattn_strides gq = c->g.dq, gk = c->g.dk, gv = c->g.dv;
        x[X_DOUT] = (staged_array){.in = c->dout, .bytes = span_bytes(p, H, c->g.dout, p->seq_q)};
        x[X_DLSE] = (staged_array){.in = c->dlse, .bytes = c->dlse ? rows : 0};
        x[X_DQ] = (staged_array){
            .in = dense(p, H, gq, p->seq_q) ? NULL : c->dq, .out = c->dq, .bytes = span_bytes(p, H, gq, p->seq_q)};
        x[X_DK] = (staged_array){.in = dense(p, Hkv, gk, p->seq_kv) ? NULL : c->dk,
                                 .out = c->dk,
                                 .bytes = span_bytes(p, Hkv, gk, p->seq_kv)};
        x[X_DV] = (staged_array){.in = dense(p, Hkv, gv, p->seq_kv) ? NULL : c->dv,
                                 .out = c->dv,
                                 .bytes = span_bytes(p, Hkv, gv, p->seq_kv)};
    }
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;
    const size_t workspace_bytes = c->workspace ? 0 : mask_bytes(plan) + kernel_bytes(plan);
    size_t total = 0;
    for (int i = 0; i < X_COUNT; i++) total += align_up(x[i].bytes);
    const size_t off_w = total;
    total += align_up(workspace_bytes);
    void *buf = NULL;
    jattn_status st = host_path_buffer(c->ctx, total, &buf);
    if (st != JATTN_OK) return st;
    device_arrays d = {{NULL}};
    char *at = buf;
    for (int i = 0; i < X_COUNT; i++) {
        d.x[i] = x[i].bytes ? at : NULL;
        at += align_up(x[i].bytes);
    }
    cudaError_t err = cudaSuccess;
    const char *what = "cudaMemcpyAsync (host to device)";
    for (int i = 0; i < X_COUNT && err == cudaSuccess; i++)
        if (x[i].in && x[i].bytes) err = cudaMemcpyAsync(d.x[i], x[i].in, x[i].bytes, cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) {
        st = launch(c, plan, &d, c->workspace ? c->workspace : workspace_bytes ? (char *)buf + off_w : NULL);
        what = "cudaMemcpyAsync (device to host)";
        for (int i = 0; i < X_COUNT && st == JATTN_OK && err == cudaSuccess; i++)
            if (x[i].out && x[i].bytes)
                err = cudaMemcpyAsync(x[i].out, d.x[i], x[i].bytes, cudaMemcpyDeviceToHost, stream);
        if (st == JATTN_OK && err == cudaSuccess) {
            what = "cudaStreamSynchronize";
            err = cudaStreamSynchronize(stream);
        }
    }
    if (err != cudaSuccess) st = cuda_fail(err, what);
    if (!c->ctx) {
        cudaError_t ferr = cudaFree(buf);
        if (st == JATTN_OK && ferr != cudaSuccess) st = cuda_fail(ferr, "cudaFree");
    }
    return st;
}

/* A call, forward or backward: the stream checked (check_call_stream), then device pointers launch
 * on the caller's stream; host arrays are staged through the device. */
static jattn_status cuda_run(const jattn_call *c, const jattn_plan *plan) {
    const jattn_status st = check_call_stream(c->cuda_stream, c->memory);
    if (st != JATTN_OK) return st;
    if (c->memory == JATTN_MEMORY_DEVICE) {
        const device_arrays d = call_arrays(c);
        return launch(c, plan, &d, c->workspace);
    }
    return run_host(c, plan);
}

/* The answer of a problem without queries or keys in device memory (backend.h, write_empty): the
 * rows to write set on the call's stream (jattn_cuda_launch_fill_rows: +0 rows, lse -inf). */
static jattn_status cuda_write_empty(const jattn_call *c, const jattn_plan *plan) {
    (void)plan;
    const jattn_problem *p = c->problem;
    cudaError_t err = cudaSuccess;
    if (c->pass == JATTN_PASS_FORWARD) {
        if (p->seq_kv == 0)
            err = (cudaError_t)jattn_cuda_launch_fill_rows(c->out, p->batch, p->heads, p->seq_q, p->head_dim,
                                                           cuda_strides(p->out), c->lse, c->cuda_stream);
    } else {
        if (p->seq_kv == 0)
            err = (cudaError_t)jattn_cuda_launch_fill_rows(c->dq, p->batch, p->heads, p->seq_q, p->head_dim,
                                                           cuda_strides(c->g.dq), NULL, c->cuda_stream);
        if (err == cudaSuccess && p->seq_q == 0)
            err = (cudaError_t)jattn_cuda_launch_fill_rows(c->dk, p->batch, p->kv_heads, p->seq_kv, p->head_dim,
                                                           cuda_strides(c->g.dk), NULL, c->cuda_stream);
        if (err == cudaSuccess && p->seq_q == 0)
            err = (cudaError_t)jattn_cuda_launch_fill_rows(c->dv, p->batch, p->kv_heads, p->seq_kv, p->head_dim,
                                                           cuda_strides(c->g.dv), NULL, c->cuda_stream);
    }
    return err == cudaSuccess ? JATTN_OK : cuda_fail(err, "the empty problem's fill");
}

static void cuda_release_ctx(jattn_ctx *ctx) {
    cuda_state *state = ctx->backend_state[JATTN_BACKEND_CUDA];
    if (!state) return;
    if (state->buffer) (void)cudaFree(state->buffer);
    free(state);
    ctx->backend_state[JATTN_BACKEND_CUDA] = NULL;
}

const jattn_backend_ops jattn_backend_cuda = {
    .id = JATTN_BACKEND_CUDA,
    .is_gpu = 1,
    .workspace_memory = JATTN_MEMORY_DEVICE,
    .select = select_version,
    .workspace_size = cuda_workspace_size,
    .forward = cuda_run,
    .release_ctx = cuda_release_ctx,
    .select_backward = select_version,
    .workspace_size_backward = cuda_workspace_size,
    .backward = cuda_run,
    .write_empty = cuda_write_empty,
};
