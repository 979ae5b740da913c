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

/* ---- the device, probed once ------------------------------------------------------------ */

static struct {
    int present;
    char why[160]; /* when not present */
} device;
/* Compute capability (10 major + minor) of each device, asked the first time a call runs on it
 * (a process may hold GPUs of several kinds; each call runs on the calling thread's current one). */
#define MAX_DEVICES 64
static atomic_int device_cc[MAX_DEVICES];
static atomic_int device_sms[MAX_DEVICES]; /* multiprocessors of each device, asked with its cc */
static atomic_int device_l2[MAX_DEVICES];  /* its L2 cache bytes */
static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static atomic_int kernel_choice = JATTN_CUDA_KERNEL_AUTO;
static atomic_int v4_ctas; /* 0, or the v4 instance forced (jattn_cuda_set_v4_ctas_per_sm) */
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
    const char *env = getenv("JATTN_CUDA_KERNEL");
    if (env && (strcmp(env, "v1") == 0 || strcmp(env, "1") == 0)) atomic_store(&kernel_choice, JATTN_CUDA_KERNEL_V1);
    if (env && (strcmp(env, "v2") == 0 || strcmp(env, "2") == 0)) atomic_store(&kernel_choice, JATTN_CUDA_KERNEL_V2);
    if (env && (strcmp(env, "v3") == 0 || strcmp(env, "3") == 0)) atomic_store(&kernel_choice, JATTN_CUDA_KERNEL_V3);
    if (env && (strcmp(env, "v4") == 0 || strcmp(env, "4") == 0)) atomic_store(&kernel_choice, JATTN_CUDA_KERNEL_V4);
    if (env && (strcmp(env, "v5") == 0 || strcmp(env, "5") == 0)) atomic_store(&kernel_choice, JATTN_CUDA_KERNEL_V5);
    if (env && (strcmp(env, "v6") == 0 || strcmp(env, "6") == 0)) atomic_store(&kernel_choice, JATTN_CUDA_KERNEL_V6);
    const char *ctas = getenv("JATTN_CUDA_V4_CTAS");
    if (ctas && (strcmp(ctas, "2") == 0 || strcmp(ctas, "3") == 0)) atomic_store(&v4_ctas, ctas[0] - '0');
    const char *v5v = getenv("JATTN_CUDA_V5_VARIANT");
    if (v5v && strcmp(v5v, "2") == 0) atomic_store(&v5_variant, 2);
    device.present = 1;
}

/* The compute capability of the calling thread's current device (10 major + minor), or -1 when
 * it cannot be asked (*dev_out: the device; *sms_out: its multiprocessors; *l2_out: its L2 bytes). */
static int current_cc(int *dev_out, int *sms_out, int *l2_out) {
    int dev = 0, major = 0, minor = 0, sms = 0, l2 = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    *dev_out = dev;
    if (dev >= 0 && dev < MAX_DEVICES) {
        const int cc = atomic_load(&device_cc[dev]);
        *sms_out = atomic_load(&device_sms[dev]);
        *l2_out = atomic_load(&device_l2[dev]);
        if (cc) return cc;
    }
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    const int cc = 10 * major + minor;
    if (dev >= 0 && dev < MAX_DEVICES) {
        atomic_store(&device_sms[dev], sms);
        atomic_store(&device_l2[dev], l2);
        atomic_store(&device_cc[dev], cc);
    }
    *sms_out = sms;
    *l2_out = l2;
    return cc;
}

void jattn_cuda_set_kernel(jattn_cuda_kernel k) {
    pthread_once(&device_once, probe_device); /* so the environment does not override it later */
    if ((int)k >= 0 && k < JATTN_CUDA_KERNEL_COUNT) atomic_store(&kernel_choice, (int)k);
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

static int v2_applies(int64_t d) {
    return d % JATTN_CUDA_V2_HEAD_DIM_MULTIPLE == 0 && d <= JATTN_CUDA_V2_MAX_HEAD_DIM;
}

static int v3_stride_ok(jattn_strides s) {
    const int64_t m = JATTN_CUDA_V3_STRIDE_MULTIPLE;
    return s.batch >= 0 && s.head >= 0 && s.token >= 0 && s.batch % m == 0 && s.head % m == 0 && s.token % m == 0;
}

static int is_sm90_kernel(jattn_cuda_kernel k) {
    return k == JATTN_CUDA_KERNEL_V3 || k == JATTN_CUDA_KERNEL_V4 || k == JATTN_CUDA_KERNEL_V5 ||
           k == JATTN_CUDA_KERNEL_V6;
}

/* Why v3 to v6 cannot run a problem (a message for jattn_fail), or NULL when they can,
 * pointers aside: their alignment is known in forward() only. The conditions are those of the
 * launch contract in attention_sm90.h. */
static const char *sm90_refusal(const jattn_problem *p, int cc) {
    if (cc != 10 * JATTN_CUDA_V3_CC_MAJOR + JATTN_CUDA_V3_CC_MINOR)
        return "device: kernels v3 to v6 (sm_90a wgmma) need compute capability 9.0";
    if (p->head_dim != 64 && p->head_dim != 128) return "head_dim: kernels v3 to v6 take 64 or 128";
    if (!v3_stride_ok(p->q) || !v3_stride_ok(p->k) || !v3_stride_ok(p->v) || !v3_stride_ok(p->out))
        return "strides: kernels v3 to v6 need every stride of q, k, v, out a non-negative multiple of 4 elements";
    if (p->batch > 65535 || p->heads > 65535) return "batch/heads: kernels v3 to v6 take at most 65535 each";
    if (p->seq_q > INT32_MAX - JATTN_CUDA_V6_CTA_QUERIES || p->seq_kv > INT32_MAX - JATTN_CUDA_V6_CTA_QUERIES)
        return "seq_q/seq_kv: kernels v3 to v6 take at most 2^31 - 129 (their 64- and 128-row tiles index with 32 bits)";
    return NULL;
}

/* AUTO: v6 on a 9.0 device for the problems it takes (D 64 or 128, strides a multiple of 4
 * elements): faster than v4 and v5 at every measured shape (bench/results/h200-2026-12-01-v6);
 * else v2 where its head_dim limits allow, else v1; and v1 for seq_kv == 1, where it returns the
 * v row bit for bit (weight exp(0)/exp(0) = 1; a split of v would not). (Before v6: v5 where a
 * head's split K and V outgrew half the L2 on a grid of >= 4 waves, else v4; the device's SM
 * count and L2 size stay in the signature for rules of that kind.)
 * Forced v1 and v3 to v6 stay as forced (cuda_select reports why a forced one cannot run), but
 * for v6 at seq_kv == 1, which hands the call to v1 (the bitwise v row the contract promises);
 * forced v2 falls back to v1 beyond its head_dim limits. */
static jattn_cuda_kernel kernel_for(const jattn_problem *p, int cc, int sms, int l2_bytes) {
    jattn_cuda_kernel k = (jattn_cuda_kernel)atomic_load(&kernel_choice);
    if ((k == JATTN_CUDA_KERNEL_AUTO || k == JATTN_CUDA_KERNEL_V6) && p->seq_kv == 1) return JATTN_CUDA_KERNEL_V1;
    if (k == JATTN_CUDA_KERNEL_V1 || is_sm90_kernel(k)) return k;
    if (k == JATTN_CUDA_KERNEL_AUTO && sm90_refusal(p, cc) == NULL) return JATTN_CUDA_KERNEL_V6;
    (void)sms;
    (void)l2_bytes;
    return v2_applies(p->head_dim) ? JATTN_CUDA_KERNEL_V2 : JATTN_CUDA_KERNEL_V1;
}

/* Tiles of v2 depend on D and the problem's size (attention_v2_mma.cu); names give the method. */
static const char *kernel_name(jattn_cuda_kernel k, jattn_precision prec) {
    if (k == JATTN_CUDA_KERNEL_V1) return "cuda_v1_flash_f32_simt_8x32";
    if (k == JATTN_CUDA_KERNEL_V3)
        return prec == JATTN_PRECISION_TF32 ? "cuda_v3_flash_qk_tf32x3_pv_tf32_sm90_wgmma_st_64x64"
                                            : "cuda_v3_flash_tf32x3_sm90_wgmma_st_64x64";
    if (k == JATTN_CUDA_KERNEL_V4)
        return prec == JATTN_PRECISION_TF32 ? "cuda_v4_flash_qk_f16x2_pv_f16_sm90_wgmma_st_64x64"
                                            : "cuda_v4_flash_f16x2_sm90_wgmma_st_64x64";
    if (k == JATTN_CUDA_KERNEL_V5)
        return prec == JATTN_PRECISION_TF32 ? "cuda_v5_flash_qk_f16x2_pv_f16_sm90_ws_128x64"
                                            : "cuda_v5_flash_f16x2_sm90_ws_128x64";
    if (k == JATTN_CUDA_KERNEL_V6)
        return prec == JATTN_PRECISION_TF32 ? "cuda_v6_flash_qk_f16x2_pv_f16_sm90_fa3_ws_128x64"
                                            : "cuda_v6_flash_f16x2_sm90_fa3_ws_128x64";
    return prec == JATTN_PRECISION_TF32 ? "cuda_v2_flash_qk_tf32x3_pv_tf32_mma16n8k8" : "cuda_v2_flash_tf32x3_mma16n8k8";
}

static jattn_status cuda_select(const jattn_problem *p, const jattn_exec *e, jattn_selection *sel) {
    (void)e;
    pthread_once(&device_once, probe_device);
    if (!device.present) return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "%s", device.why);
    int dev = 0, sms = 0, l2 = 0;
    const int cc = current_cc(&dev, &sms, &l2);
    if (cc < 0) return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "backend: cuda: cannot query the current device");
    if (cc < 80)
        return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE,
                          "backend: cuda: device %d has compute capability %d.%d, needs 8.0 or newer", dev, cc / 10,
                          cc % 10);
    if (p->head_dim > JATTN_CUDA_V1_MAX_HEAD_DIM)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "head_dim: %lld exceeds the cuda backend's limit of %d",
                          (long long)p->head_dim, JATTN_CUDA_V1_MAX_HEAD_DIM);
    if (p->seq_q > INT32_MAX || p->seq_kv > INT32_MAX || p->batch * p->heads > INT32_MAX)
        return jattn_fail(JATTN_ERROR_UNSUPPORTED, "seq_q/seq_kv/batch*heads: the cuda backend indexes them with 32 bits");
    const jattn_cuda_kernel k = kernel_for(p, cc, sms, l2);
    if (is_sm90_kernel(k)) {
        const char *why = sm90_refusal(p, cc);
        if (why)
            return jattn_fail(JATTN_ERROR_UNSUPPORTED, "%s (kernel v%d is forced: JATTN_CUDA_KERNEL or jattn_cuda_set_kernel)",
                              why, (int)k);
    }
    sel->backend = JATTN_BACKEND_CUDA;
    sel->backend_name = "cuda";
    sel->kernel = kernel_name(k, e->precision);
    sel->isa = cc == 90 ? "sm_90a" : "sm_80";
    sel->threads = 1;
    return JATTN_OK;
}

/* v4 and v5 share the pre-pass and its workspace; v6 has its own. */
static int is_v4_name(const char *name) { return strncmp(name, "cuda_v4", 7) == 0 || strncmp(name, "cuda_v5", 7) == 0; }
static int is_v6_name(const char *name) { return strncmp(name, "cuda_v6", 7) == 0; }

/* v4's device workspace (its split K and V); the other versions need none of their own. */
static size_t v4_workspace_bytes(const jattn_problem *p) {
    return attention_f32_sm90_f16x2_workspace_bytes(p->batch, p->heads, p->seq_kv, p->head_dim);
}

/* v6's: its split K and V tiles as shared-memory images. */
static size_t v6_workspace_bytes(const jattn_problem *p) {
    return attention_f32_sm90_fa3_f16x2_workspace_bytes(p->batch, p->heads, p->seq_kv, p->head_dim);
}

/* The device workspace of a call: the key padding's pre-pass output (used by padded calls
 * only, reported for every call so that one workspace serves both), then v4's own part.
 * Both sizes are multiples of 256 bytes. */
static size_t padding_bytes(const jattn_problem *p) { return jattn_cuda_padding_bytes(p->batch, p->seq_kv); }

static size_t kernel_bytes(const jattn_problem *p, const jattn_selection *sel) {
    return is_v4_name(sel->kernel) ? v4_workspace_bytes(p) : is_v6_name(sel->kernel) ? v6_workspace_bytes(p) : 0;
}

static size_t cuda_workspace_size(const jattn_problem *p, const jattn_exec *e, const jattn_selection *sel) {
    (void)e;
    return padding_bytes(p) + kernel_bytes(p, sel);
}

/* ---- launch ----------------------------------------------------------------------------- */

static jattn_status cuda_fail(cudaError_t err, const char *what) {
    (void)cudaGetLastError(); /* clear a non-sticky error */
    return jattn_fail(JATTN_ERROR_CUDA, "cuda: %s failed: %s (%s)", what, cudaGetErrorName(err),
                      cudaGetErrorString(err));
}

/* v3's and v4's launch arguments (kv_count, kv_index: the resolved key padding, or NULL); the
 * launch contract's check decides in forward() (pointers). */
static attention_sm90_args v3_args(const jattn_call *c, const float *q, const float *k, const float *v, float *out,
                                   float *lse, const int *kv_count, const int *kv_index) {
    const jattn_problem *p = c->problem;
    attention_sm90_args a = {q, k, v, out, lse,
                             p->batch, p->heads, p->seq_q, p->seq_kv, p->head_dim,
                             {p->q.batch, p->q.head, p->q.token}, {p->k.batch, p->k.head, p->k.token},
                             {p->v.batch, p->v.head, p->v.token}, {p->out.batch, p->out.head, p->out.token},
                             c->scale, c->precision == JATTN_PRECISION_TF32 ? ATTENTION_SM90_TF32 : ATTENTION_SM90_F32,
                             atomic_load(&v4_ctas), atomic_load(&v5_variant), kv_count, kv_index};
    return a;
}

/* v4, v5 or v6 on its workspace: the caller's (or the host path's buffer) when given; otherwise
 * device memory of the pool, allocated and freed in stream order (no synchronisation, and a
 * graph capture records it). If the pool cannot give it, the call runs v3. */
static jattn_status launch_v4(const jattn_call *c, const attention_sm90_args *a, void *workspace, const char **name) {
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;
    const int v6 = is_v6_name(*name);
    void *owned = NULL;
    if (!workspace) {
        const size_t bytes = v6 ? v6_workspace_bytes(c->problem) : v4_workspace_bytes(c->problem);
        if (cudaMallocAsync(&owned, bytes, stream) != cudaSuccess) {
            (void)cudaGetLastError();
            *name = kernel_name(JATTN_CUDA_KERNEL_V3, c->precision);
            cudaError_t err = attention_f32_sm90_wgmma_st_64x64(a, stream);
            return err == cudaSuccess ? JATTN_OK : cuda_fail(err, *name);
        }
        atomic_fetch_add(&alloc_count, 1);
        workspace = owned;
    }
    /* v5 takes calls without key padding; a padded one runs v4 */
    const int v5 = strncmp(*name, "cuda_v5", 7) == 0 && a->kv_count == NULL;
    if (!v5 && strncmp(*name, "cuda_v5", 7) == 0) *name = kernel_name(JATTN_CUDA_KERNEL_V4, c->precision);
    cudaError_t err = v6   ? attention_f32_sm90_fa3_f16x2_128x64(a, workspace, stream)
                      : v5 ? attention_f32_sm90_ws_f16x2_128x64(a, workspace, stream)
                           : attention_f32_sm90_wgmma_f16x2_64x64(a, workspace, stream);
    if (owned) {
        cudaError_t ferr = cudaFreeAsync(owned, stream);
        if (err == cudaSuccess) err = ferr;
    }
    return err == cudaSuccess ? JATTN_OK : cuda_fail(err, *name);
}

/* The padding of a call on the device: kv_len and mask device pointers (the caller's, or the
 * host path's copies), the pre-pass output region, and what the pre-pass resolved. */
typedef struct device_padding {
    const int64_t *kv_len;
    const uint8_t *mask;
    const int *count, *index; /* set by the pre-pass; NULL without padding */
} device_padding;

/* workspace: the call's (cuda_workspace_size: padding region, then v4's part), or NULL (then
 * the padding region and v4's part come from the stream-ordered pool when needed). */
static jattn_status launch(const jattn_call *c, const jattn_selection *sel, const float *q, const float *k,
                           const float *v, float *out, float *lse, void *workspace, device_padding *pad) {
    const jattn_problem *p = c->problem;
    const char *name = sel->kernel;
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
        cudaError_t err = (cudaError_t)jattn_cuda_launch_padding(pad->kv_len, pad->mask, c->mask_stride, (int)p->batch,
                                                                 (int)p->seq_kv, region, &pad->count, &pad->index,
                                                                 c->cuda_stream);
        if (err != cudaSuccess) {
            if (owned) (void)cudaFreeAsync(owned, stream);
            return cuda_fail(err, "key padding pre-pass");
        }
    }
    void *kernel_ws = workspace ? (char *)workspace + padding_bytes(p) : NULL;
    jattn_status st = JATTN_OK;
    int done = 0;
    if (strncmp(name, "cuda_v3", 7) == 0 || is_v4_name(name) || is_v6_name(name)) {
        const attention_sm90_args a = v3_args(c, q, k, v, out, lse, pad->count, pad->index);
        if (attention_f32_sm90_wgmma_supported(&a) == ATTENTION_SM90_SUPPORTED) {
            if (is_v4_name(name) || is_v6_name(name)) {
                st = launch_v4(c, &a, kernel_ws, &name);
            } else {
                cudaError_t err = attention_f32_sm90_wgmma_st_64x64(&a, stream);
                if (err != cudaSuccess) st = cuda_fail(err, name);
            }
            done = 1;
        } else {
            /* Pointers off the 16-byte grid (select checked the rest): this call runs v2, which
             * takes every D v3 to v6 take. */
            name = kernel_name(JATTN_CUDA_KERNEL_V2, c->precision);
        }
    }
    if (!done) {
        jattn_cuda_params kp = {q, k, v, out, lse,
                                p->q.batch, p->q.head, p->q.token,
                                p->k.batch, p->k.head, p->k.token,
                                p->v.batch, p->v.head, p->v.token,
                                p->out.batch, p->out.head, p->out.token,
                                (int)p->batch, (int)p->heads, (int)p->seq_q, (int)p->seq_kv, (int)p->head_dim,
                                c->scale, pad->count, pad->index};
        const int use_v1 = strncmp(name, "cuda_v1", 7) == 0;
        cudaError_t err = (cudaError_t)(use_v1 ? jattn_cuda_launch_v1(&kp, c->cuda_stream)
                                               : jattn_cuda_launch_v2(&kp, c->precision == JATTN_PRECISION_F32,
                                                                      c->cuda_stream));
        if (err != cudaSuccess) st = cuda_fail(err, name);
    }
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

/* Host arrays: copy q, k, v (and out when it has gaps, so they survive) and the key padding to
 * device buffers, run, copy out (and lse) back, and wait for the stream. */
static jattn_status forward_host(const jattn_call *c, const jattn_selection *sel) {
    const jattn_problem *p = c->problem;
    const size_t nq = span_elems(p, p->q, p->seq_q), nk = span_elems(p, p->k, p->seq_kv),
                 nv = span_elems(p, p->v, p->seq_kv), no = span_elems(p, p->out, p->seq_q);
    const size_t nl = c->lse ? (size_t)(p->batch * p->heads * p->seq_q) : 0;
    const int padded = c->kv_len || c->mask;
    const size_t n_len = c->kv_len ? (size_t)p->batch * sizeof(int64_t) : 0, n_mask = mask_span(c);
    /* the workspace (padding region, then v4's part) unless the caller gave one or none is needed */
    const size_t nw = !c->workspace && (padded || kernel_bytes(p, sel)) ? padding_bytes(p) + kernel_bytes(p, sel) : 0;
    const size_t off_k = align_up(nq * sizeof(float)), off_v = off_k + align_up(nk * sizeof(float)),
                 off_o = off_v + align_up(nv * sizeof(float)), off_l = off_o + align_up(no * sizeof(float)),
                 off_len = off_l + align_up(nl * sizeof(float)), off_mask = off_len + align_up(n_len),
                 off_w = off_mask + align_up(n_mask), total = off_w + align_up(nw);
    cudaStream_t stream = (cudaStream_t)c->cuda_stream;

    void *buf = NULL;
    cuda_state *state = NULL;
    jattn_status st;
    if (c->ctx) {
        state = c->ctx->backend_state[JATTN_BACKEND_CUDA];
        if (!state) {
            state = calloc(1, sizeof *state);
            if (!state) return jattn_fail(JATTN_ERROR_OUT_OF_MEMORY, "ctx: allocation of the cuda state failed");
            c->ctx->backend_state[JATTN_BACKEND_CUDA] = state;
        }
        if (state->bytes < total) {
            if (state->buffer) {
                cudaError_t err = cudaFree(state->buffer);
                state->buffer = NULL;
                state->bytes = 0;
                if (err != cudaSuccess) return cuda_fail(err, "cudaFree");
            }
            st = device_alloc(&state->buffer, total);
            if (st != JATTN_OK) return st;
            state->bytes = total;
        }
        buf = state->buffer;
    } else {
        st = device_alloc(&buf, total);
        if (st != JATTN_OK) return st;
    }

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
        st = launch(c, sel, dq, dk, dv, dout, dlse, dws, &pad);
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

static jattn_status cuda_forward(const jattn_call *c, const jattn_selection *sel) {
    if (c->memory == JATTN_MEMORY_DEVICE) {
        device_padding pad = {c->kv_len, c->mask, NULL, NULL};
        return launch(c, sel, c->q, c->k, c->v, c->out, c->lse, c->workspace, &pad);
    }
    return forward_host(c, sel);
}

static void cuda_release_ctx(jattn_ctx *ctx) {
    cuda_state *state = ctx->backend_state[JATTN_BACKEND_CUDA];
    if (!state) return;
    if (state->buffer) (void)cudaFree(state->buffer);
    free(state);
    ctx->backend_state[JATTN_BACKEND_CUDA] = NULL;
}

const jattn_backend_ops jattn_backend_cuda = {
    JATTN_BACKEND_CUDA, "cuda", cuda_select, cuda_workspace_size, cuda_forward, cuda_release_ctx,
};
