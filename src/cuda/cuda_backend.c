/* The cuda backend: device probing (once per process), kernel selection, launch on the
 * caller's stream for device pointers, and grow-only device buffers in the context for host
 * pointers. Kernels live in attention_v*.cu; this file is plain C over the CUDA runtime API. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static atomic_int v4_ctas;    /* 0, or the v4 instance forced (jattn_cuda_set_v4_ctas_per_sm) */
static atomic_int v5_variant; /* 0, or a v5 variant for A/B runs (JATTN_CUDA_V5_VARIANT) */
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
    const char *env = getenv("JATTN_CUDA_KERNEL"); /* v1 .. v6, or 1 .. 6 */
    if (env && env[0] == 'v') env++;
    for (int k = JATTN_CUDA_KERNEL_V1; env && k < JATTN_CUDA_KERNEL_COUNT; k++)
        if (env[0] == '0' + k && env[1] == '\0') atomic_store(&kernel_choice, k);
    const char *benv = getenv("JATTN_CUDA_BWD_KERNEL"); /* v1, v2, or 1, 2 */
    if (benv && benv[0] == 'v') benv++;
    for (int k = JATTN_CUDA_BWD_KERNEL_V1; benv && k < JATTN_CUDA_BWD_KERNEL_COUNT; k++)
        if (benv[0] == '0' + k && benv[1] == '\0') atomic_store(&bwd_kernel_choice, k);
    const char *ctas = getenv("JATTN_CUDA_V4_CTAS");
    if (ctas && (strcmp(ctas, "2") == 0 || strcmp(ctas, "3") == 0)) atomic_store(&v4_ctas, ctas[0] - '0');
    const char *v5v = getenv("JATTN_CUDA_V5_VARIANT");
    if (v5v && strcmp(v5v, "2") == 0) atomic_store(&v5_variant, 2);
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
    if ((int)k >= 0 && k < JATTN_CUDA_KERNEL_COUNT) atomic_store(&kernel_choice, (int)k);
}

void jattn_cuda_set_bwd_kernel(jattn_cuda_bwd_kernel k) {
    pthread_once(&device_once, probe_device); /* so the environment does not override it later */
    if ((int)k >= 0 && k < JATTN_CUDA_BWD_KERNEL_COUNT) atomic_store(&bwd_kernel_choice, (int)k);
}

void jattn_cuda_set_v4_ctas_per_sm(int n) {
    pthread_once(&device_once, probe_device);
    atomic_store(&v4_ctas, n == 2 || n == 3 ? n : 0);
}

jattn_cuda_kernel jattn_cuda_get_kernel(void) {
    pthread_once(&device_once, probe_device);
    return (jattn_cuda_kernel)atomic_load(&kernel_choice);
}

long jattn_cuda_alloc_count(void) { return atomic_load(&alloc_count); }

const char *jattn_cuda_last_kernel(void) { return last_kernel; }

/* ---- selection -------------------------------------------------------------------------- */

/* AUTO starts at v6 wherever it takes the problem: on the H200 (2026-12-01,
 * bench/results/h200-2026-12-01-v6/library and library-r2) it passed every GPU test in both
 * precisions at D 64 and 128, repeated bit for bit, and was the fastest version at every measured
 * shape: f32 1.38-1.71x v4 at D = 128 (1.60x v5 at (1,40,32768,128), where v5 had been the
 * default), tf32 1.42-1.85x v4, D = 64 1.38-1.70x v4. From there AUTO walks the refusal fallbacks
 * (cuda_versions.c): v4 where v6 refuses (sequences beyond its 32-bit 128-query CTAs) and on a
 * 9.0 device for the problems v4 takes (D 64 or 128, strides a multiple of 4 elements), else v2
 * where its head_dim limits allow, else v1; and v1 for seq_kv == 1, where it returns the v row bit
 * for bit (weight exp(0)/exp(0) = 1; a split of v would not). v3 and v5 run when forced. A forced
 * version stays as forced or fails (naming why), but for v2, which falls back to v1 beyond its
 * head_dim limits.
 * @return the version, or NULL with *why set. */
static const cuda_version *version_for(const jattn_problem *p, int cc, const char **why) {
    const jattn_cuda_kernel forced = (jattn_cuda_kernel)atomic_load(&kernel_choice);
    jattn_cuda_kernel k = forced;
    if (k == JATTN_CUDA_KERNEL_AUTO) k = p->seq_kv == 1 ? JATTN_CUDA_KERNEL_V1 : JATTN_CUDA_KERNEL_V6;
    for (;;) {
        const cuda_version *ver = &jattn_cuda_versions[k];
        const char *no = ver->refusal(p, cc);
        if (!no) return ver;
        const int forced_stays = forced != JATTN_CUDA_KERNEL_AUTO && !ver->forced_falls_back;
        if (ver->refused_next == JATTN_CUDA_KERNEL_AUTO || forced_stays) {
            *why = no;
            return NULL;
        }
        k = ver->refused_next;
    }
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
    const jattn_status st = device_checks(p, &cc);
    if (st != JATTN_OK) return st;
    const char *why = "";
    const cuda_version *ver = version_for(p, cc, &why);
    if (!ver)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED,
                          "%s (kernel v%d is forced: JATTN_CUDA_KERNEL or jattn_cuda_set_kernel)", why,
                          (int)atomic_load(&kernel_choice));
    plan->kernel = ver;
    plan->threads = 1;
    plan->selection.kernel = ver->name[e->precision];
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

static jattn_status cuda_fail(cudaError_t err, const char *what) {
    (void)cudaGetLastError(); /* clear a non-sticky error */
    return jattn_fail(JATTN_ERROR_CUDA, "cuda: %s failed: %s (%s)", what, cudaGetErrorName(err),
                      cudaGetErrorString(err));
}

/* The launch arguments of every version (kv_count, kv_index: the resolved key padding, or
 * NULL). */
static jattn_cuda_args launch_args(const jattn_call *c, const float *q, const float *k, const float *v, float *out,
                                   float *lse, const int *kv_count, const int *kv_index) {
    const jattn_problem *p = c->problem;
    jattn_cuda_args a = {q,
                         k,
                         v,
                         out,
                         lse,
                         p->batch,
                         p->heads,
                         p->seq_q,
                         p->seq_kv,
                         p->head_dim,
                         {p->q.batch, p->q.head, p->q.token},
                         {p->k.batch, p->k.head, p->k.token},
                         {p->v.batch, p->v.head, p->v.token},
                         {p->out.batch, p->out.head, p->out.token},
                         c->scale,
                         c->precision,
                         atomic_load(&v4_ctas),
                         atomic_load(&v5_variant),
                         kv_count,
                         kv_index};
    return a;
}

/* The padding of a call on the device: kv_len and mask device pointers (the caller's, or the
 * host path's copies), the pre-pass output region, and what the pre-pass resolved. */
typedef struct device_padding {
    const int64_t *kv_len;
    const uint8_t *mask;
    const int *count, *index; /* set by the pre-pass; NULL without padding */
} device_padding;

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
    const jattn_cuda_args a = launch_args(c, q, k, v, out, lse, pad->count, pad->index);
    const cuda_version *ver = plan->kernel;
    void *kernel_ws = workspace ? (char *)workspace + padding_bytes(p) : NULL, *kernel_owned = NULL;
    for (;;) {
        if (ver->call_refused && ver->call_refused(&a)) {
            ver = &jattn_cuda_versions[ver->call_next];
            continue;
        }
        if (ver->workspace_bytes && !kernel_ws) {
            if (cudaMallocAsync(&kernel_owned, ver->workspace_bytes(p), stream) != cudaSuccess) {
                (void)cudaGetLastError();
                kernel_owned = NULL;
                ver = &jattn_cuda_versions[ver->call_next];
                continue;
            }
            atomic_fetch_add(&alloc_count, 1);
            kernel_ws = kernel_owned;
        }
        break;
    }
    const char *name = ver->name[c->precision];
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

/* Elements a tensor spans (the validator has checked it fits). */
static size_t span_elems(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return (size_t)(1 + (p->batch - 1) * s.batch + (p->heads - 1) * s.head + (seq - 1) * s.token + (p->head_dim - 1));
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

/* Bytes of a call's mask (row b at mask + b * mask_stride, seq_kv bytes each). */
static size_t mask_span(const jattn_call *c) {
    const jattn_problem *p = c->problem;
    return c->mask ? (size_t)(c->mask_stride ? (p->batch - 1) * c->mask_stride + p->seq_kv : p->seq_kv) : 0;
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

/* Host arrays: copy q, k, v (and out when it has gaps, so they survive) and the key padding to
 * device buffers, run, copy out (and lse) back, and wait for the stream. */
static jattn_status forward_host(const jattn_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const size_t nq = span_elems(p, p->q, p->seq_q), nk = span_elems(p, p->k, p->seq_kv),
                 nv = span_elems(p, p->v, p->seq_kv), no = span_elems(p, p->out, p->seq_q);
    const size_t nl = c->lse ? (size_t)(p->batch * p->heads * p->seq_q) : 0;
    const int padded = c->kv_len || c->mask;
    const size_t n_len = c->kv_len ? (size_t)p->batch * sizeof(int64_t) : 0, n_mask = mask_span(c);
    /* the workspace (padding region, then v4's part) unless the caller gave one or none is needed */
    const size_t kb = kernel_bytes(p, plan->kernel);
    const size_t nw = !c->workspace && (padded || kb) ? padding_bytes(p) + kb : 0;
    const size_t off_k = align_up(nq * sizeof(float)), off_v = off_k + align_up(nk * sizeof(float)),
                 off_o = off_v + align_up(nv * sizeof(float)), off_l = off_o + align_up(no * sizeof(float)),
                 off_len = off_l + align_up(nl * sizeof(float)), off_mask = off_len + align_up(n_len),
                 off_w = off_mask + align_up(n_mask), total = off_w + align_up(nw);
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;

    void *buf = NULL;
    jattn_status st = host_path_buffer(c->ctx, total, &buf);
    if (st != JATTN_OK) return st;

    char *base = buf;
    float *dq = (float *)base, *dk = (float *)(base + off_k), *dv = (float *)(base + off_v),
          *dout = (float *)(base + off_o), *dlse = nl ? (float *)(base + off_l) : NULL;
    void *dws = c->workspace ? c->workspace : nw ? base + off_w : NULL;
    device_padding pad = {c->kv_len ? (const int64_t *)(base + off_len) : NULL,
                          c->mask ? (const uint8_t *)(base + off_mask) : NULL, NULL, NULL};
    const int out_dense = no == (size_t)(p->batch * p->heads * p->seq_q * p->head_dim);
    cudaError_t err = cudaSuccess;
    const char *what = "cudaMemcpyAsync (host to device)";
    if ((err = cudaMemcpyAsync(dq, c->q, nq * sizeof(float), cudaMemcpyHostToDevice, stream)) == cudaSuccess &&
        (err = cudaMemcpyAsync(dk, c->k, nk * sizeof(float), cudaMemcpyHostToDevice, stream)) == cudaSuccess &&
        (err = cudaMemcpyAsync(dv, c->v, nv * sizeof(float), cudaMemcpyHostToDevice, stream)) == cudaSuccess &&
        (!n_len ||
         (err = cudaMemcpyAsync(base + off_len, c->kv_len, n_len, cudaMemcpyHostToDevice, stream)) == cudaSuccess) &&
        (!n_mask ||
         (err = cudaMemcpyAsync(base + off_mask, c->mask, n_mask, cudaMemcpyHostToDevice, stream)) == cudaSuccess) &&
        (out_dense ||
         (err = cudaMemcpyAsync(dout, c->out, no * sizeof(float), cudaMemcpyHostToDevice, stream)) == cudaSuccess)) {
        st = launch(c, plan, dq, dk, dv, dout, dlse, dws, &pad);
        what = "cudaMemcpyAsync (device to host)";
        if (st == JATTN_OK &&
            (err = cudaMemcpyAsync(c->out, dout, no * sizeof(float), cudaMemcpyDeviceToHost, stream)) == cudaSuccess &&
            (!nl || (err = cudaMemcpyAsync(c->lse, dlse, nl * sizeof(float), cudaMemcpyDeviceToHost, stream)) ==
                        cudaSuccess)) {
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

static jattn_status cuda_forward(const jattn_call *c, const jattn_plan *plan) {
    if (c->memory == JATTN_MEMORY_DEVICE) {
        device_padding pad = {c->kv_len, c->mask, NULL, NULL};
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

/* Whether AUTO runs the backward v2 where it takes the problem: yes since its H200 run
 * (bench/results/h200-2026-12-02-bwd-v2/call2): test_backward cuda passed every case v2 runs (nine
 * runs of the battery, fresh seeds; the cases that failed were v1's: tf32 D = 1, D = 1 `large`, a
 * padded single-query `large`), bit-identical repeats and graph replay included, memcheck and
 * racecheck clean; 2.38x / 2.26x / 2.15x PyTorch's fp32 SDPA backward at (1,24,S,128), S = 1536 /
 * 4608 / 16384 (v1: 0.27x / 0.30x). */
#define BWD_AUTO_V2 1

/* The backward kernel (cuda_versions.c): v2 (sm_90a wgmma, 2xFP16) where it takes the problem in f32
 * precision when forced (JATTN_CUDA_BWD_KERNEL=v2 or jattn_cuda_set_bwd_kernel) or when AUTO takes it
 * (BWD_AUTO_V2), else v1;
 * a forced v2 falls back to v1 likewise. The forward's kernel choice (JATTN_CUDA_KERNEL) does not
 * apply to it. The one place the backward's version is chosen (a call v2 then refuses at launch,
 * key padding or alignment, runs v1: launch_backward). */
static jattn_status cuda_select_backward(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    int cc = 0;
    const jattn_status st = device_checks(p, &cc);
    if (st != JATTN_OK) return st;
    const cuda_bwd_version *ver = &jattn_cuda_bwd_v1;
    const int choice = atomic_load(&bwd_kernel_choice);
    const int wants_v2 = choice == JATTN_CUDA_BWD_KERNEL_V2 || (choice == JATTN_CUDA_BWD_KERNEL_AUTO && BWD_AUTO_V2);
    if (wants_v2 && e->precision == JATTN_PRECISION_F32 && !jattn_cuda_bwd_v2.refusal(p, cc)) ver = &jattn_cuda_bwd_v2;
    const char *why = ver->refusal(p, cc);
    if (why) return jattn_fail(JATTN_ERROR_UNSUPPORTED, "%s", why);
    plan->kernel = ver;
    plan->threads = 1;
    plan->selection.kernel =
        ver->name[jattn_cuda_bwd_v1_grads_x3(e->precision, p->head_dim) ? JATTN_PRECISION_F32 : e->precision];
    plan->selection.isa = cc == 90 ? "sm_90a" : "sm_80";
    return JATTN_OK;
}

/* The device workspace of a backward call: the key padding's region (as the forward's), then the
 * kernel's own (Dl and the top P: 12 bytes per query row). Grows with B * H * (Sq + Skv), never with S^2. */
static size_t bwd_kernel_bytes(const jattn_problem *p, const jattn_plan *plan) {
    const cuda_bwd_version *ver = plan->kernel;
    return ver->workspace_bytes(p);
}

static size_t cuda_workspace_size_backward(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)e;
    return padding_bytes(p) + bwd_kernel_bytes(p, plan);
}

static jattn_cuda_strides cuda_strides(jattn_strides s) {
    const jattn_cuda_strides r = {s.batch, s.head, s.token};
    return r;
}

/* The device pointers of a backward call (the caller's, or the host path's copies). */
typedef struct bwd_pointers {
    const float *q, *k, *v, *out, *lse, *dout, *dlse;
    float *dq, *dk, *dv;
} bwd_pointers;

/* Enqueues the backward on the call's stream. workspace: the call's (padding region, then the
 * kernel's), or NULL: then both come from the stream-ordered pool (allocated and freed in stream
 * order: no synchronisation, recorded by a graph capture). */
static jattn_status launch_backward(const jattn_bwd_call *c, const jattn_plan *plan, const bwd_pointers *x,
                                    void *workspace, device_padding *pad) {
    const jattn_problem *p = c->problem;
    const cuda_bwd_version *ver = plan->kernel;
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;
    const size_t pad_bytes = padding_bytes(p), total = pad_bytes + bwd_kernel_bytes(p, plan);
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
    const char *name = ver->name[c->precision];
    const char *what = err == cudaSuccess ? name : "key padding pre-pass";
    if (err == cudaSuccess) {
        const jattn_cuda_bwd_args a = {{x->q,
                                        x->k,
                                        x->v,
                                        (float *)x->out, /* read only: the forward's output is an input here */
                                        (float *)x->lse,
                                        p->batch,
                                        p->heads,
                                        p->seq_q,
                                        p->seq_kv,
                                        p->head_dim,
                                        cuda_strides(p->q),
                                        cuda_strides(p->k),
                                        cuda_strides(p->v),
                                        cuda_strides(p->out),
                                        c->scale,
                                        c->precision,
                                        0,
                                        0,
                                        pad->count,
                                        pad->index},
                                       x->dout,
                                       x->dlse,
                                       x->dq,
                                       x->dk,
                                       x->dv,
                                       cuda_strides(c->g.dout),
                                       cuda_strides(c->g.dq),
                                       cuda_strides(c->g.dk),
                                       cuda_strides(c->g.dv)};
        if (ver->call_refused && ver->call_refused(&a)) { /* the next version, in the same workspace */
            ver = ver->call_next;
            name = what = ver->name[c->precision];
        }
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

/* Bytes of a gradient or input tensor, and whether it is dense (no gaps to preserve). */
static size_t span_bytes(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return span_elems(p, s, seq) * sizeof(float);
}
static int dense(const jattn_problem *p, jattn_strides s, int64_t seq) {
    return span_elems(p, s, seq) == (size_t)(p->batch * p->heads * seq * p->head_dim);
}

/* Host arrays: copy the inputs (and the gradients that have gaps, so the gaps survive) and the
 * key padding to device buffers, run, copy dq, dk, dv back, and wait for the stream. */
static jattn_status backward_host(const jattn_bwd_call *c, const jattn_plan *plan) {
    const jattn_problem *p = c->problem;
    const size_t nl = (size_t)(p->batch * p->heads * p->seq_q) * sizeof(float);
    const size_t bytes[11] = {span_bytes(p, p->q, p->seq_q),
                              span_bytes(p, p->k, p->seq_kv),
                              span_bytes(p, p->v, p->seq_kv),
                              span_bytes(p, p->out, p->seq_q),
                              nl,
                              span_bytes(p, c->g.dout, p->seq_q),
                              c->dlse ? nl : 0,
                              span_bytes(p, c->g.dq, p->seq_q),
                              span_bytes(p, c->g.dk, p->seq_kv),
                              span_bytes(p, c->g.dv, p->seq_kv),
                              0};
    const void *src[7] = {c->q, c->k, c->v, c->out, c->lse, c->dout, c->dlse};
    const size_t n_len = c->kv_len ? (size_t)p->batch * sizeof(int64_t) : 0,
                 n_mask =
                     c->mask ? (size_t)(c->mask_stride ? (p->batch - 1) * c->mask_stride + p->seq_kv : p->seq_kv) : 0;
    const size_t nw = c->workspace ? 0 : padding_bytes(p) + bwd_kernel_bytes(p, plan);
    size_t off[14], total = 0;
    for (int i = 0; i < 10; i++) off[i] = total, total += align_up(bytes[i]);
    off[10] = total, total += align_up(n_len);
    off[11] = total, total += align_up(n_mask);
    off[12] = total, total += align_up(nw);
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;

    void *buf = NULL;
    jattn_status st = host_path_buffer(c->ctx, total, &buf);
    if (st != JATTN_OK) return st;
    char *base = buf;
    float *grads_host[3] = {c->dq, c->dk, c->dv};
    const jattn_strides gs[3] = {c->g.dq, c->g.dk, c->g.dv};
    const int64_t gseq[3] = {p->seq_q, p->seq_kv, p->seq_kv};
    cudaError_t err = cudaSuccess;
    const char *what = "cudaMemcpyAsync (host to device)";
    for (int i = 0; i < 7 && err == cudaSuccess; i++)
        if (bytes[i]) err = cudaMemcpyAsync(base + off[i], src[i], bytes[i], cudaMemcpyHostToDevice, stream);
    for (int i = 0; i < 3 && err == cudaSuccess; i++)
        if (!dense(p, gs[i], gseq[i]))
            err = cudaMemcpyAsync(base + off[7 + i], grads_host[i], bytes[7 + i], cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess && n_len)
        err = cudaMemcpyAsync(base + off[10], c->kv_len, n_len, cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess && n_mask)
        err = cudaMemcpyAsync(base + off[11], c->mask, n_mask, cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) {
        const bwd_pointers x = {(const float *)(base + off[0]),
                                (const float *)(base + off[1]),
                                (const float *)(base + off[2]),
                                (const float *)(base + off[3]),
                                (const float *)(base + off[4]),
                                (const float *)(base + off[5]),
                                c->dlse ? (const float *)(base + off[6]) : NULL,
                                (float *)(base + off[7]),
                                (float *)(base + off[8]),
                                (float *)(base + off[9])};
        device_padding pad = {c->kv_len ? (const int64_t *)(base + off[10]) : NULL,
                              c->mask ? (const uint8_t *)(base + off[11]) : NULL, NULL, NULL};
        st = launch_backward(c, plan, &x, c->workspace ? c->workspace : base + off[12], &pad);
        what = "cudaMemcpyAsync (device to host)";
        for (int i = 0; i < 3 && st == JATTN_OK && err == cudaSuccess; i++)
            err = cudaMemcpyAsync(grads_host[i], base + off[7 + i], bytes[7 + i], cudaMemcpyDeviceToHost, stream);
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

static jattn_status cuda_backward(const jattn_bwd_call *c, const jattn_plan *plan) {
    if (c->memory == JATTN_MEMORY_DEVICE) {
        const bwd_pointers x = {c->q, c->k, c->v, c->out, c->lse, c->dout, c->dlse, c->dq, c->dk, c->dv};
        device_padding pad = {c->kv_len, c->mask, NULL, NULL};
        return launch_backward(c, plan, &x, c->workspace, &pad);
    }
    return backward_host(c, plan);
}

const jattn_backend_ops jattn_backend_cuda = {
    JATTN_BACKEND_CUDA,  cuda_select,          cuda_workspace_size,          cuda_forward,  cuda_release_ctx,
    JATTN_MEMORY_DEVICE, cuda_select_backward, cuda_workspace_size_backward, cuda_backward,
};
