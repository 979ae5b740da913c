/* The vk backend's shared pieces: the embedded SPIR-V modules, the process-wide Vulkan device
 * (vk_device.c) and what a context keeps (vk_backend.c). */
#ifndef JATTN_VK_INTERNAL_H
#define JATTN_VK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../backend.h"
#include "vk_loader.h"

/* ---- embedded SPIR-V (vk_spirv.c, generated at build time from shaders/attn_f32.comp) ---- */
typedef struct vk_spirv_module {
    int dmax;         /* the head-dim family: head_dim <= dmax, rows zero-padded to dmax */
    int rows;         /* query rows per workgroup: 64 or 128 (attn_f32.comp), 64 (attn3_f32.comp) */
    int kind;         /* 1: shaders/attn_f32.comp; 7: shaders/attn3_f32.comp, TX=32 with PREFETCH */
    int shared_bytes; /* shared memory it declares (at most) */
    const char *name; /* "vk_flash_f32_d<dmax>_<rows>x64", "vk_flash3_f32_d128_64x64_tx32[_s32k]_pf" */
    const uint32_t *words;
    size_t n_words;
} vk_spirv_module;
extern const vk_spirv_module jattn_vk_modules[];
extern const int jattn_vk_module_count;

/* The kernel's shape (shaders/attn_f32.comp): 64 or 128 query rows per workgroup (the module's),
 * 64-key tiles, 256 invocations, at most 32 KiB of shared memory; workgroups cover at most 256
 * output dims. */
#define JATTN_VK_GROUP_SIZE 256
#define JATTN_VK_SHARED_BYTES 32768
#define JATTN_VK_DIMS_PER_GROUP 256
#define JATTN_VK_MAX_HEAD_DIM 1024
#define JATTN_VK_MAX_MODULES 48
/* The push constants' size (shaders/attn_common.glsl, vk_backend.c), within the device's
 * maxPushConstantsSize (checked when the device is chosen). */
#define JATTN_VK_PUSH_BYTES 64

/* ---- the process-wide device ---- */
typedef struct vk_device {
    /* The probe (once per process): loader, instance, the physical device chosen. */
    jattn_status status; /* JATTN_OK, or why the backend is unavailable (in `why`) */
    char why[240];
    vk_fns f;
    VkInstance instance;
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    int is_cpu; /* a software device (lavapipe): never chosen by auto */
    uint32_t queue_family;
    int timestamps;           /* the queue writes timestamps */
    uint64_t max_binding;     /* bytes one storage-buffer binding may cover */
    uint32_t shared_limit;    /* shared memory a module may declare: the device's, JATTN_VK_SHARED_LIMIT lowers it */
    int kernel;               /* module kind wanted (JATTN_VK_KERNEL; NVIDIA 7, else 1) */
    int denorm_preserve;      /* the device keeps float32 denormals when a module asks (DenormPreserve) */
    char float_controls[200]; /* the float-controls properties, one line (jattn_vk_float_controls) */
    char isa[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE + 16]; /* "vulkan: <device name>" */
    const char *device_extensions[2];
    uint32_t n_device_extensions;
    /* Created by the first forward call, kept for the life of the process. */
    int device_ready;
    VkDevice device;
    VkQueue queue;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout pipeline_layout;
    VkPipeline pipelines[JATTN_VK_MAX_MODULES];
} vk_device;

/* The device, probed on first use. Check ->status before anything else. */
vk_device *vk_device_get(void);
/* Creates the logical device (first call) and the pipeline of module `m` (first use), under the
 * device lock. @return JATTN_OK or JATTN_ERROR_BACKEND_UNAVAILABLE / OUT_OF_MEMORY via jattn_fail. */
jattn_status vk_device_pipeline(vk_device *d, int m, VkPipeline *pipeline);
/* The device lock: queue submission and lazy creation are serialised across contexts. */
void vk_device_lock(void);
void vk_device_unlock(void);
/* "discrete GPU", "CPU (software)", ... of the device chosen. */
const char *vk_device_type_name(const vk_device *d);
/* The module for a head_dim: the smallest family that holds it; with d->kernel 7 the family's
 * attn3_f32.comp module with the most shared memory the device allows (head dim 128 only), else
 * (or where that family has none) its attn_f32.comp module. -1 if none. */
int vk_module_for(const vk_device *d, int64_t head_dim);
/* "vk_flash_f32_d<dmax>_<rows>x64" of module m (static storage). */
const char *vk_kernel_name(int m);

/* Seconds the GPU spent in the kernel dispatches of ctx's last call (timestamps; 0 when the queue
 * has none). For benchmarks linked against the static library; not part of the public API. */
double jattn_vk_last_kernel_seconds(const jattn_ctx *ctx);

/* A copy of SPIR-V module w (n words) that also declares DenormPreserve 32 (vk_device.c), for
 * devices that keep float32 denormals. @return malloc'd words (count in *n_out), NULL on failure. */
uint32_t *vk_spirv_with_denorm_preserve(const uint32_t *w, size_t n, size_t *n_out);

/* The exact power-of-two normalisation of one head (vk_range.c): shifts (powers of two) for q, k
 * and v, and the head's softmax scale with the q and k shifts folded in. */
typedef struct vk_head_range {
    int q_shift, k_shift, v_shift; /* 0: copied as they are; the output is scaled by 2^-v_shift */
    float scale;
} vk_head_range;
/* The plan for a head whose largest |q|, |k|, |v| (NaN ignored) are max_q, max_k, max_v. */
void vk_range_plan(float max_q, float max_k, float max_v, float scale, vk_head_range *r);
/* The plans of n query heads (max_q[i] each) that share one key/value head (grouped-query heads):
 * the k and v shifts are the group's, each head has its own q shift and scale. n = 1 gives
 * vk_range_plan's plan. */
void vk_range_plan_group(const float *max_q, int64_t n, float max_k, float max_v, float scale, vk_head_range *r);
/* rows of head_dim floats (token_stride apart) times 2^shift, rounded once, into dst [rows][dp]
 * (zero-padded past head_dim). */
void vk_copy_scaled(float *dst, const float *src, int64_t rows, int64_t token_stride, int64_t head_dim, int64_t dp,
                    int shift);

/* The device's float controls as one line ("denormBehaviorIndependence=... shaderDenormPreserveFloat32=..."),
 * "" before a successful probe. For benchmarks and diagnostics; not part of the public API. */
const char *jattn_vk_float_controls(void);

/* Vulkan buffers ctx's vk state has allocated so far (0 without one). For tests. */
long jattn_vk_ctx_allocations(const jattn_ctx *ctx);

#endif /* JATTN_VK_INTERNAL_H */
