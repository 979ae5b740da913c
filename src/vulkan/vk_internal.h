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
    int rows;         /* query rows per workgroup: 64 or 128 */
    int shared_bytes; /* shared memory it declares (at most) */
    const char *name; /* "vk_flash_f32_d<dmax>_<rows>x64[_dk32]" */
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
#define JATTN_VK_MAX_MODULES 32

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
    int timestamps;       /* the queue writes timestamps */
    uint64_t max_binding; /* bytes one storage-buffer binding may cover */
    int rows;             /* rows per workgroup: 128 unless JATTN_VK_ROWS=64 */
    int wide;             /* the 48 KiB (dk32) modules allowed (JATTN_VK_WIDE=1; where shared memory suffices) */
    int denorm_preserve;  /* the device keeps float32 denormals when a module asks (DenormPreserve) */
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
/* The module for a head_dim: the smallest family that holds it; of its modules the one with the
 * device's rows per workgroup, the wide (dk32) one where allowed. -1 if none. */
int vk_module_for(const vk_device *d, int64_t head_dim);
/* "vk_flash_f32_d<dmax>_<rows>x64" of module m (static storage). */
const char *vk_kernel_name(int m);

/* Seconds the GPU spent in the kernel dispatches of ctx's last call (timestamps; 0 when the queue
 * has none). For benchmarks linked against the static library; not part of the public API. */
double jattn_vk_last_kernel_seconds(const jattn_ctx *ctx);

/* A copy of SPIR-V module w (n words) that also declares DenormPreserve 32 (vk_device.c), for
 * devices that keep float32 denormals. @return malloc'd words (count in *n_out), NULL on failure. */
uint32_t *vk_spirv_with_denorm_preserve(const uint32_t *w, size_t n, size_t *n_out);

/* Vulkan buffers ctx's vk state has allocated so far (0 without one). For tests. */
long jattn_vk_ctx_allocations(const jattn_ctx *ctx);

#endif /* JATTN_VK_INTERNAL_H */
