/* The process-wide Vulkan device of the vk backend: the loader, one instance, the physical
 * device chosen (JATTN_VK_DEVICE=<index> picks one; otherwise the first discrete GPU, then
 * integrated, virtual, other, and a software device such as lavapipe last), its logical device,
 * queue and the compute pipelines (created on first use, one per head-dim family).
 *
 * Kept for the life of the process: pipelines are compiled once (lavapipe's JIT takes seconds),
 * and every context shares them; contexts own only buffers and command state (vk_backend.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

static pthread_mutex_t device_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static vk_device the_device;

void vk_device_lock(void) { pthread_mutex_lock(&device_mutex); }
void vk_device_unlock(void) { pthread_mutex_unlock(&device_mutex); }

int vk_module_for(const vk_device *d, int64_t head_dim) {
    int family = 0;
    for (int m = 0; m < jattn_vk_module_count; m++)
        if (jattn_vk_modules[m].dmax >= head_dim && (!family || jattn_vk_modules[m].dmax < family))
            family = jattn_vk_modules[m].dmax;
    int best = -1, best_score = -1;
    if (d->kernel_simt >= 2) {
        for (int m = 0; m < jattn_vk_module_count; m++) {
            const vk_spirv_module *x = &jattn_vk_modules[m];
            if (x->kind != d->kernel_simt || x->dmax != family || (uint32_t)x->shared_bytes > d->shared_limit) continue;
            if (x->shared_bytes > best_score) best = m, best_score = x->shared_bytes;
        }
        if (best >= 0) return best;
    }
    for (int m = 0; m < jattn_vk_module_count; m++) {
        const vk_spirv_module *x = &jattn_vk_modules[m];
        if (x->kind != 1 || x->dmax != family || (uint32_t)x->shared_bytes > d->shared_limit) continue;
        if (x->shared_bytes > 32768 && !d->wide) continue;
        const int score = (x->rows == d->rows ? 2 : 0) + (x->shared_bytes > 32768 ? 1 : 0);
        if (score > best_score) best = m, best_score = score;
    }
    return best;
}

int vk_cm_module_for(const vk_device *d, const jattn_problem *p) {
    if (((d->kernel != 10 && d->kernel != 13 && d->kernel != 14) || !d->coopmat) && d->kernel != 11) return -1;
    if (p->head_dim <= 64 || p->head_dim > 128 || p->seq_kv < 64) return -1;
    for (int m = 0; m < jattn_vk_module_count; m++) {
        const vk_spirv_module *x = &jattn_vk_modules[m];
        if (x->kind == d->kernel && x->dmax == 128 && (uint32_t)x->shared_bytes <= d->shared_limit &&
            vk_split_module_for(m) >= 0)
            return m;
    }
    return -1;
}

int vk_split_module_for(int m) {
    const int kind = jattn_vk_modules[m].kind == 14 ? 15 : 12; /* q and k in two parts, else three */
    for (int i = 0; i < jattn_vk_module_count; i++)
        if (jattn_vk_modules[i].kind == kind && jattn_vk_modules[i].dmax == jattn_vk_modules[m].dmax) return i;
    return -1;
}

uint64_t vk_cm_head_bytes(int m, int64_t seq_q, int64_t seq_kv) {
    const uint64_t dmax = (uint64_t)jattn_vk_modules[m].dmax;
    const uint64_t sqp = ((uint64_t)seq_q + 63) / 64 * 64, skp = ((uint64_t)seq_kv + 63) / 64 * 64;
    const uint64_t parts = jattn_vk_modules[m].kind == 14 ? 2 : 3; /* of q and k; v has two */
    const uint64_t words = ((sqp + skp) * parts * dmax / 2 + skp * dmax + sqp + skp + skp / 64 * dmax + 3) / 4 * 4;
    return words * 4; /* as ws_head_words() in shaders/f16x2_layout.glsl */
}

const char *jattn_vk_coopmat_info(void) {
    vk_device *d = vk_device_get();
    return d->status == JATTN_OK ? d->coopmat_info : "";
}

const char *vk_kernel_name(int m) {
    return m >= 0 && m < jattn_vk_module_count ? jattn_vk_modules[m].name : "vk_flash_f32";
}

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU (software)";
    default: return "other";
    }
}

/* Preference of a device type when JATTN_VK_DEVICE is not set: lower is better. */
static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 4;
    default: return 3;
    }
}

static int has_extension(const VkExtensionProperties *ext, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(ext[i].extensionName, name) == 0) return 1;
    return 0;
}

#define FAIL(...)                                                     \
    do {                                                              \
        snprintf(d->why, sizeof d->why, "backend: vk: " __VA_ARGS__); \
        d->status = JATTN_ERROR_BACKEND_UNAVAILABLE;                  \
        return;                                                       \
    } while (0)

/* Whether a physical device can run the kernels: Vulkan 1.1, float controls with signed zero /
 * inf / nan preservation, 32 KiB of shared memory, 256 invocations, a compute queue. Fills
 * `why` when not. */
static int device_usable(vk_device *d, VkPhysicalDevice pd, const VkPhysicalDeviceProperties *p, char *why,
                         size_t why_len, uint32_t *family) {
    if (VK_API_VERSION_MINOR(p->apiVersion) < 1 && VK_API_VERSION_MAJOR(p->apiVersion) == 1) {
        snprintf(why, why_len, "%.96s supports Vulkan %u.%u, the kernels need 1.1", p->deviceName,
                 VK_API_VERSION_MAJOR(p->apiVersion), VK_API_VERSION_MINOR(p->apiVersion));
        return 0;
    }
    uint32_t n_ext = 0;
    d->f.vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, NULL);
    VkExtensionProperties *ext = calloc(n_ext ? n_ext : 1, sizeof *ext);
    if (!ext) {
        snprintf(why, why_len, "out of host memory");
        return 0;
    }
    d->f.vkEnumerateDeviceExtensionProperties(pd, NULL, &n_ext, ext);
    const int api12 = VK_API_VERSION_MINOR(p->apiVersion) >= 2 || VK_API_VERSION_MAJOR(p->apiVersion) > 1;
    const int fc_ext = has_extension(ext, n_ext, "VK_KHR_shader_float_controls");
    const int portability = has_extension(ext, n_ext, "VK_KHR_portability_subset");
    const char *want_stats = getenv("JATTN_VK_PIPELINE_STATS");
    const int stats = want_stats && strcmp(want_stats, "1") == 0 &&
                      has_extension(ext, n_ext, "VK_KHR_pipeline_executable_properties");
    free(ext);
    if (!api12 && !fc_ext) {
        snprintf(why, why_len, "%.96s has neither Vulkan 1.2 nor VK_KHR_shader_float_controls", p->deviceName);
        return 0;
    }
    VkPhysicalDeviceFloatControlsProperties fc;
    memset(&fc, 0, sizeof fc);
    fc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES;
    VkPhysicalDeviceProperties2 p2;
    memset(&p2, 0, sizeof p2);
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &fc;
    d->f.vkGetPhysicalDeviceProperties2(pd, &p2);
    if (!fc.shaderSignedZeroInfNanPreserveFloat32) {
        snprintf(why, why_len, "%.96s cannot preserve signed zeros, Inf and NaN in float32 (the exactness mode)",
                 p->deviceName);
        return 0;
    }
    if (p->limits.maxComputeSharedMemorySize < JATTN_VK_SHARED_BYTES ||
        p->limits.maxComputeWorkGroupInvocations < JATTN_VK_GROUP_SIZE ||
        p->limits.maxComputeWorkGroupSize[0] < JATTN_VK_GROUP_SIZE) {
        snprintf(why, why_len, "%.96s has %u bytes of shared memory and %u invocations per workgroup (need %d, %d)",
                 p->deviceName, p->limits.maxComputeSharedMemorySize, p->limits.maxComputeWorkGroupInvocations,
                 JATTN_VK_SHARED_BYTES, JATTN_VK_GROUP_SIZE);
        return 0;
    }
    uint32_t n_fam = 0;
    d->f.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_fam, NULL);
    VkQueueFamilyProperties fams[16];
    if (n_fam > 16) n_fam = 16;
    d->f.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_fam, fams);
    for (uint32_t i = 0; i < n_fam; i++)
        if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            *family = i;
            d->timestamps = fams[i].timestampValidBits > 0;
            d->n_device_extensions = 0;
            if (!api12) d->device_extensions[d->n_device_extensions++] = "VK_KHR_shader_float_controls";
            if (portability) d->device_extensions[d->n_device_extensions++] = "VK_KHR_portability_subset";
            d->pipeline_stats = stats;
            if (stats) d->device_extensions[d->n_device_extensions++] = "VK_KHR_pipeline_executable_properties";
            return 1;
        }
    snprintf(why, why_len, "%.96s has no compute queue", p->deviceName);
    return 0;
}

/* Whether the chosen device can run shaders/attn_cm_f32.comp: VK_NV_cooperative_matrix with a
 * 16x16x16 fp16 x fp16 + fp32 subgroup shape, the cooperativeMatrix, shaderFloat16 and
 * vulkanMemoryModel features (glslang declares the Vulkan memory model with cooperative matrices),
 * subgroups of 32 in compute shaders. Sets d->coopmat, d->coopmat_info and adds the extensions. */
static void probe_coopmat(vk_device *d) {
    size_t o = 0;
    char *info = d->coopmat_info;
    const size_t len = sizeof d->coopmat_info;
    info[0] = '\0';
    uint32_t n_ext = 0;
    d->f.vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n_ext, NULL);
    VkExtensionProperties *ext = calloc(n_ext ? n_ext : 1, sizeof *ext);
    if (!ext) return;
    d->f.vkEnumerateDeviceExtensionProperties(d->phys, NULL, &n_ext, ext);
    const int nv = has_extension(ext, n_ext, "VK_NV_cooperative_matrix");
    const int khr = has_extension(ext, n_ext, "VK_KHR_cooperative_matrix");
    const int mm = has_extension(ext, n_ext, "VK_KHR_vulkan_memory_model");
    const int f16 = has_extension(ext, n_ext, "VK_KHR_shader_float16_int8");
    free(ext);
    const int api12 = VK_API_VERSION_MINOR(d->props.apiVersion) >= 2 || VK_API_VERSION_MAJOR(d->props.apiVersion) > 1;
    o += (size_t)snprintf(info + o, len - o, "VK_NV_cooperative_matrix=%d VK_KHR_cooperative_matrix=%d", nv, khr);
    if (o >= len) o = len - 1;
    if (!nv) return;
    PFN_vkGetPhysicalDeviceFeatures2 features2 =
        (PFN_vkGetPhysicalDeviceFeatures2)d->f.vkGetInstanceProcAddr(d->instance, "vkGetPhysicalDeviceFeatures2");
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV shapes =
        (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)d->f.vkGetInstanceProcAddr(
            d->instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    if (!features2 || !shapes) return;
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm;
    VkPhysicalDeviceVulkanMemoryModelFeatures vmm;
    VkPhysicalDeviceShaderFloat16Int8Features fp16;
    memset(&cm, 0, sizeof cm);
    memset(&vmm, 0, sizeof vmm);
    memset(&fp16, 0, sizeof fp16);
    cm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
    vmm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES;
    fp16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
    cm.pNext = &vmm;
    vmm.pNext = &fp16;
    VkPhysicalDeviceFeatures2 f2;
    memset(&f2, 0, sizeof f2);
    f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    f2.pNext = &cm;
    features2(d->phys, &f2);
    VkPhysicalDeviceSubgroupProperties sub;
    memset(&sub, 0, sizeof sub);
    sub.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    VkPhysicalDeviceProperties2 p2;
    memset(&p2, 0, sizeof p2);
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &sub;
    d->f.vkGetPhysicalDeviceProperties2(d->phys, &p2);
    o += (size_t)snprintf(info + o, len - o,
                          " cooperativeMatrix=%u vulkanMemoryModel=%u shaderFloat16=%u subgroupSize=%u shapes:",
                          (unsigned)cm.cooperativeMatrix, (unsigned)vmm.vulkanMemoryModel, (unsigned)fp16.shaderFloat16,
                          sub.subgroupSize);
    VkCooperativeMatrixPropertiesNV props[32];
    uint32_t n = 32;
    for (uint32_t i = 0; i < n; i++) {
        memset(&props[i], 0, sizeof props[i]);
        props[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    }
    VkResult r = shapes(d->phys, &n, props);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) n = 0;
    static const char *const type_names[] = {"f16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"};
    int shape = 0;
    for (uint32_t i = 0; i < n && o + 1 < len; i++) {
        const VkCooperativeMatrixPropertiesNV *x = &props[i];
#define TYPE_NAME(t) ((unsigned)(t) < 11 ? type_names[(unsigned)(t)] : "?")
        o += (size_t)snprintf(info + o, len - o, " %ux%ux%u:%s*%s+%s=%s%s", x->MSize, x->NSize, x->KSize,
                              TYPE_NAME(x->AType), TYPE_NAME(x->BType), TYPE_NAME(x->CType), TYPE_NAME(x->DType),
                              x->scope == VK_SCOPE_SUBGROUP_NV ? "" : "(not subgroup)");
#undef TYPE_NAME
        if (o >= len) o = len - 1;
        if (x->MSize == 16 && x->NSize == 16 && x->KSize == 16 && x->AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
            x->BType == VK_COMPONENT_TYPE_FLOAT16_NV && x->CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
            x->DType == VK_COMPONENT_TYPE_FLOAT32_NV && x->scope == VK_SCOPE_SUBGROUP_NV)
            shape = 1;
    }
    const int usable = shape && cm.cooperativeMatrix && vmm.vulkanMemoryModel && fp16.shaderFloat16 &&
                       sub.subgroupSize == 32 && (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                       (api12 || (mm && f16)) && d->n_device_extensions + 3 <= 8;
    /* Enabled only where the kernel is asked for (JATTN_VK_KERNEL=10): opt-in until it has passed
     * the suites on a GPU, so that the device the other kernels use is created as before. */
    o += (size_t)snprintf(info + o, len - o, " -> %s",
                          !usable                                                 ? "not usable"
                          : d->kernel != 10 && d->kernel != 13 && d->kernel != 14 ? "usable (not asked for)"
                                                                                  : "enabled");
    if (!usable || (d->kernel != 10 && d->kernel != 13 && d->kernel != 14)) return;
    d->coopmat = 1;
    d->device_extensions[d->n_device_extensions++] = "VK_NV_cooperative_matrix";
    if (mm) d->device_extensions[d->n_device_extensions++] = "VK_KHR_vulkan_memory_model";
    if (f16) d->device_extensions[d->n_device_extensions++] = "VK_KHR_shader_float16_int8";
}

static void probe(void) {
    vk_device *d = &the_device;
    d->status = JATTN_OK;
    char why[200];
    if (vk_loader_open(&d->f, why, sizeof why) != 0) FAIL("%.180s", why);

    /* The instance: Vulkan 1.1; portability enumeration where the loader offers it (MoltenVK,
     * KosmicKrisp on macOS are portability drivers, invisible without it). */
    uint32_t n_ext = 0;
    d->f.vkEnumerateInstanceExtensionProperties(NULL, &n_ext, NULL);
    VkExtensionProperties *ext = calloc(n_ext ? n_ext : 1, sizeof *ext);
    if (!ext) FAIL("out of host memory");
    d->f.vkEnumerateInstanceExtensionProperties(NULL, &n_ext, ext);
    const int portability = has_extension(ext, n_ext, "VK_KHR_portability_enumeration");
    free(ext);
    const char *inst_ext[1] = {"VK_KHR_portability_enumeration"};
    VkApplicationInfo app;
    memset(&app, 0, sizeof app);
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "jattn";
    app.pEngineName = "jattn";
    app.apiVersion = VK_API_VERSION_1_1;
    VkInstanceCreateInfo ici;
    memset(&ici, 0, sizeof ici);
    ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ici.pApplicationInfo = &app;
    if (portability) {
        ici.flags = VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
        ici.enabledExtensionCount = 1;
        ici.ppEnabledExtensionNames = inst_ext;
    }
    VkResult r = d->f.vkCreateInstance(&ici, NULL, &d->instance);
    if (r != VK_SUCCESS) FAIL("vkCreateInstance failed (VkResult %d): no usable Vulkan driver", (int)r);
    if (vk_loader_instance(&d->f, d->instance, why, sizeof why) != 0) FAIL("%.180s", why);

    uint32_t n = 0;
    d->f.vkEnumeratePhysicalDevices(d->instance, &n, NULL);
    if (n == 0) FAIL("no Vulkan device");
    VkPhysicalDevice devs[16];
    if (n > 16) n = 16;
    d->f.vkEnumeratePhysicalDevices(d->instance, &n, devs);

    const char *pick = getenv("JATTN_VK_DEVICE");
    int chosen = -1;
    char reason[200] = "";
    if (pick && pick[0]) {
        char *end;
        long i = strtol(pick, &end, 10);
        if (*end || i < 0 || i >= (long)n) FAIL("JATTN_VK_DEVICE=%s: not a device index (0..%u)", pick, n - 1);
        VkPhysicalDeviceProperties p;
        d->f.vkGetPhysicalDeviceProperties(devs[i], &p);
        if (!device_usable(d, devs[i], &p, reason, sizeof reason, &d->queue_family))
            FAIL("JATTN_VK_DEVICE=%ld: %.160s", i, reason);
        chosen = (int)i;
    } else {
        int best_rank = 99;
        for (uint32_t i = 0; i < n; i++) {
            VkPhysicalDeviceProperties p;
            d->f.vkGetPhysicalDeviceProperties(devs[i], &p);
            uint32_t family;
            char r_i[200];
            if (!device_usable(d, devs[i], &p, r_i, sizeof r_i, &family)) {
                if (!reason[0]) memcpy(reason, r_i, sizeof reason);
                continue;
            }
            if (type_rank(p.deviceType) < best_rank) {
                best_rank = type_rank(p.deviceType);
                chosen = (int)i;
            }
        }
        if (chosen < 0) FAIL("no usable Vulkan device (%.160s)", reason);
        VkPhysicalDeviceProperties p;
        d->f.vkGetPhysicalDeviceProperties(devs[chosen], &p);
        device_usable(d, devs[chosen], &p, reason, sizeof reason, &d->queue_family); /* the chosen one's extensions */
    }
    d->phys = devs[chosen];
    d->f.vkGetPhysicalDeviceProperties(d->phys, &d->props);
    d->f.vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
    d->is_cpu = d->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    snprintf(d->isa, sizeof d->isa, "vulkan: %.200s", d->props.deviceName);
    /* One binding: the storage range, at most 1 GiB (staging memory stays bounded);
     * JATTN_VK_MAX_BINDING_BYTES lowers it (tests of the piecewise path). */
    uint64_t max_binding = d->props.limits.maxStorageBufferRange;
    if (max_binding > (1ull << 30)) max_binding = 1ull << 30;
    const char *cap = getenv("JATTN_VK_MAX_BINDING_BYTES");
    if (cap && cap[0]) {
        unsigned long long c = strtoull(cap, NULL, 10);
        if (c >= 4096 && c < max_binding) max_binding = c;
    }
    d->max_binding = max_binding & ~(uint64_t)255;
    /* Rows per workgroup: 128, the faster on the H200 (src/vulkan/NOTES.md); JATTN_VK_ROWS=64
     * chooses 64. The wide (48 KiB) modules only with JATTN_VK_WIDE=1: not yet run on a GPU. */
    const char *rows = getenv("JATTN_VK_ROWS"), *wide = getenv("JATTN_VK_WIDE");
    d->rows = rows && strcmp(rows, "64") == 0 ? 64 : 128;
    d->wide = wide && strcmp(wide, "1") == 0;
    /* The kernel: JATTN_VK_KERNEL=4 picks attn3_f32.comp (head dims 64 and 128), 5 the same with
     * PREFETCH, 6 and 7 attn3_f32.comp with TX=32 (head dim 128), 8 and 9 with TX=32 and RPT=4
     * (head dim 128), 1 attn_f32.comp (also what a kind without a module for the family runs);
     * 10, 13, 14 attn_cm_f32.comp on cooperative matrices, 11 its emulation (vk_cm_module_for). */
    const char *kernel = getenv("JATTN_VK_KERNEL");
    /* Shared memory the modules may use: the device's, or less with JATTN_VK_SHARED_LIMIT=<bytes>
     * (the 32 KiB modules on a 48 KiB device: measurements, Apple's limit). On a software device
     * it may also raise it to 48 KiB: lavapipe reports 32 KiB but runs the 48 KiB modules, so the
     * tests cover the modules NVIDIA runs (tests/vulkan.cmake). */
    d->shared_limit = d->props.limits.maxComputeSharedMemorySize;
    const char *shared = getenv("JATTN_VK_SHARED_LIMIT");
    if (shared && shared[0]) {
        const unsigned long long c = strtoull(shared, NULL, 10);
        if (c >= JATTN_VK_SHARED_BYTES && (c < d->shared_limit || (d->is_cpu && c <= 49152)))
            d->shared_limit = (uint32_t)c;
    }
    d->kernel = 1;
    if (kernel && kernel[0]) {
        char *end;
        const long k = strtol(kernel, &end, 10);
        if (!*end && k >= 1 && k <= 14 && k != 12) d->kernel = (int)k;
    }
    /* NVIDIA: attn3_f32.comp with TX=32 and PREFETCH (kind 7) by default, where the family has it
     * (head dim 128): measured faster than attn_f32.comp on the H200 (src/vulkan/NOTES.md). */
    if (!(kernel && kernel[0]) && d->props.vendorID == 0x10DE) d->kernel = 7;
    /* Kinds 10 (attn_cm_f32.comp on cooperative matrices), 13 (the same with subgroup barriers), 14
     * (q and k in two fp16 parts) and 11 (the emulation of 10) take the calls vk_cm_module_for
     * accepts; the others go to the SIMT kernel the device would run. */
    d->kernel_simt = d->kernel <= 9 ? d->kernel : d->props.vendorID == 0x10DE ? 7 : 1;
    probe_coopmat(d);
    VkPhysicalDeviceFloatControlsProperties fc;
    memset(&fc, 0, sizeof fc);
    fc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES;
    VkPhysicalDeviceProperties2 p2;
    memset(&p2, 0, sizeof p2);
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &fc;
    d->f.vkGetPhysicalDeviceProperties2(d->phys, &p2);
    d->denorm_preserve = fc.shaderDenormPreserveFloat32 == VK_TRUE;
    const char *indep = fc.denormBehaviorIndependence == VK_SHADER_FLOAT_CONTROLS_INDEPENDENCE_32_BIT_ONLY
                            ? "32_BIT_ONLY"
                        : fc.denormBehaviorIndependence == VK_SHADER_FLOAT_CONTROLS_INDEPENDENCE_ALL  ? "ALL"
                        : fc.denormBehaviorIndependence == VK_SHADER_FLOAT_CONTROLS_INDEPENDENCE_NONE ? "NONE"
                                                                                                      : "?";
    snprintf(d->float_controls, sizeof d->float_controls,
             "denormBehaviorIndependence=%s shaderDenormPreserveFloat32=%u shaderDenormFlushToZeroFloat32=%u "
             "shaderSignedZeroInfNanPreserveFloat32=%u shaderRoundingModeRTEFloat32=%u",
             indep, (unsigned)fc.shaderDenormPreserveFloat32, (unsigned)fc.shaderDenormFlushToZeroFloat32,
             (unsigned)fc.shaderSignedZeroInfNanPreserveFloat32, (unsigned)fc.shaderRoundingModeRTEFloat32);
}

const char *jattn_vk_float_controls(void) {
    vk_device *d = vk_device_get();
    return d->status == JATTN_OK ? d->float_controls : "";
}

vk_device *vk_device_get(void) {
    pthread_once(&probe_once, probe);
    return &the_device;
}

const char *vk_device_type_name(const vk_device *d) { return type_name(d->props.deviceType); }

#undef FAIL
#define FAIL(status, ...) return jattn_fail(status, "backend: vk: " __VA_ARGS__)

static jattn_status open_device(vk_device *d) {
    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci;
    memset(&qci, 0, sizeof qci);
    qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qci.queueFamilyIndex = d->queue_family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    VkDeviceCreateInfo dci;
    memset(&dci, 0, sizeof dci);
    dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = d->n_device_extensions;
    dci.ppEnabledExtensionNames = d->device_extensions;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe;
    memset(&pe, 0, sizeof pe);
    pe.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
    pe.pipelineExecutableInfo = VK_TRUE;
    if (d->pipeline_stats) dci.pNext = &pe;
    /* shaders/attn_cm_f32.comp: cooperative matrices, fp16, the Vulkan memory model (probe_coopmat) */
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm;
    VkPhysicalDeviceVulkanMemoryModelFeatures vmm;
    VkPhysicalDeviceShaderFloat16Int8Features fp16;
    memset(&cm, 0, sizeof cm);
    memset(&vmm, 0, sizeof vmm);
    memset(&fp16, 0, sizeof fp16);
    cm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
    cm.cooperativeMatrix = VK_TRUE;
    vmm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES;
    vmm.vulkanMemoryModel = VK_TRUE;
    fp16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
    fp16.shaderFloat16 = VK_TRUE;
    if (d->coopmat) {
        cm.pNext = &vmm;
        vmm.pNext = &fp16;
        fp16.pNext = (void *)dci.pNext;
        dci.pNext = &cm;
    }
    VkResult r = d->f.vkCreateDevice(d->phys, &dci, NULL, &d->device);
    if (r != VK_SUCCESS) FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "vkCreateDevice failed (VkResult %d)", (int)r);
    char why[200];
    if (vk_loader_device(&d->f, d->device, why, sizeof why) != 0) FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "%.180s", why);
    d->f.vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);

    /* Bindings 0..5: q, k, v, out, lse, keys (shaders/attn_common.glsl), 6: the split workspace
     * (shaders/f16x2_layout.glsl); push constants: 8 words. */
    VkDescriptorSetLayoutBinding b[7];
    memset(b, 0, sizeof b);
    for (uint32_t i = 0; i < 7; i++) {
        b[i].binding = i;
        b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        b[i].descriptorCount = 1;
        b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo lci;
    memset(&lci, 0, sizeof lci);
    lci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    lci.bindingCount = 7;
    lci.pBindings = b;
    if (d->f.vkCreateDescriptorSetLayout(d->device, &lci, NULL, &d->set_layout) != VK_SUCCESS)
        FAIL(JATTN_ERROR_OUT_OF_MEMORY, "vkCreateDescriptorSetLayout failed");
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 32};
    VkPipelineLayoutCreateInfo pci;
    memset(&pci, 0, sizeof pci);
    pci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    pci.setLayoutCount = 1;
    pci.pSetLayouts = &d->set_layout;
    pci.pushConstantRangeCount = 1;
    pci.pPushConstantRanges = &pcr;
    if (d->f.vkCreatePipelineLayout(d->device, &pci, NULL, &d->pipeline_layout) != VK_SUCCESS)
        FAIL(JATTN_ERROR_OUT_OF_MEMORY, "vkCreatePipelineLayout failed");
    d->device_ready = 1;
    return JATTN_OK;
}

/* SPIR-V: OpCapability = 17, OpExecutionMode = 16; capability / mode SignedZeroInfNanPreserve =
 * 4466 / 4461, DenormPreserve = 4464 / 4459. */
enum { OP_EXECUTION_MODE = 16, OP_CAPABILITY = 17 };

/* The module with DenormPreserve 32 declared beside SignedZeroInfNanPreserve 32 (a copy of each of
 * those two instructions with the other enum), for devices that support it: float32 denormals
 * then survive (NVIDIA flushes them otherwise). @return a malloc'd copy, NULL on failure. */
uint32_t *vk_spirv_with_denorm_preserve(const uint32_t *w, size_t n, size_t *n_out) {
    uint32_t *out = malloc((n + 16) * sizeof *out);
    if (!out || n < 5) {
        free(out);
        return NULL;
    }
    memcpy(out, w, 5 * sizeof *w);
    size_t o = 5;
    for (size_t i = 5; i < n;) {
        const uint32_t len = w[i] >> 16, op = w[i] & 0xffffu;
        if (len == 0 || i + len > n || o + 2 * len > n + 16) {
            free(out);
            return NULL;
        }
        memcpy(out + o, w + i, len * sizeof *w);
        o += len;
        if (op == OP_CAPABILITY && len == 2 && w[i + 1] == 4466) {
            out[o++] = w[i], out[o++] = 4464;
        } else if (op == OP_EXECUTION_MODE && len == 4 && w[i + 2] == 4461) {
            memcpy(out + o, w + i, 4 * sizeof *w);
            out[o + 2] = 4459;
            o += 4;
        }
        i += len;
    }
    *n_out = o;
    return out;
}

static jattn_status create_pipeline(vk_device *d, int m) {
    VkShaderModuleCreateInfo sci;
    memset(&sci, 0, sizeof sci);
    sci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    sci.codeSize = jattn_vk_modules[m].n_words * 4;
    sci.pCode = jattn_vk_modules[m].words;
    uint32_t *patched = NULL;
    if (d->denorm_preserve) {
        size_t n = 0;
        patched = vk_spirv_with_denorm_preserve(jattn_vk_modules[m].words, jattn_vk_modules[m].n_words, &n);
        if (!patched) FAIL(JATTN_ERROR_OUT_OF_MEMORY, "adding DenormPreserve to %s failed", vk_kernel_name(m));
        sci.codeSize = n * 4;
        sci.pCode = patched;
    }
    VkShaderModule sm;
    VkResult r = d->f.vkCreateShaderModule(d->device, &sci, NULL, &sm);
    free(patched);
    if (r != VK_SUCCESS)
        FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "vkCreateShaderModule(%s) failed (VkResult %d)", vk_kernel_name(m),
             (int)r);
    VkComputePipelineCreateInfo cpi;
    memset(&cpi, 0, sizeof cpi);
    cpi.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpi.stage.module = sm;
    cpi.stage.pName = "main";
    cpi.layout = d->pipeline_layout;
    if (d->pipeline_stats) cpi.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    r = d->f.vkCreateComputePipelines(d->device, VK_NULL_HANDLE, 1, &cpi, NULL, &d->pipelines[m]);
    d->f.vkDestroyShaderModule(d->device, sm, NULL);
    if (r != VK_SUCCESS)
        FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "vkCreateComputePipelines(%s) failed (VkResult %d)", vk_kernel_name(m),
             (int)r);
    return JATTN_OK;
}

jattn_status vk_device_pipeline(vk_device *d, int m, VkPipeline *pipeline) {
    jattn_status st = JATTN_OK;
    vk_device_lock();
    if (!d->device_ready) st = open_device(d);
    if (st == JATTN_OK && !d->pipelines[m]) st = create_pipeline(d, m);
    if (st == JATTN_OK) *pipeline = d->pipelines[m];
    vk_device_unlock();
    return st;
}

const char *jattn_vk_pipeline_statistics(const char *kernel, char *buf, size_t len) {
    vk_device *d = vk_device_get();
    if (len) buf[0] = '\0';
    if (d->status != JATTN_OK || !d->pipeline_stats || !d->device_ready) return buf;
    PFN_vkGetPipelineExecutableStatisticsKHR stats = (PFN_vkGetPipelineExecutableStatisticsKHR)d->f.vkGetDeviceProcAddr(
        d->device, "vkGetPipelineExecutableStatisticsKHR");
    if (!stats) return buf;
    size_t o = 0;
    for (int m = 0; m < jattn_vk_module_count; m++) {
        if (!d->pipelines[m] || strcmp(vk_kernel_name(m), kernel) != 0) continue;
        VkPipelineExecutableInfoKHR info;
        memset(&info, 0, sizeof info);
        info.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR;
        info.pipeline = d->pipelines[m];
        info.executableIndex = 0;
        VkPipelineExecutableStatisticKHR st[32];
        uint32_t n = 32;
        for (uint32_t i = 0; i < n; i++) {
            memset(&st[i], 0, sizeof st[i]);
            st[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
        }
        vk_device_lock();
        VkResult r = stats(d->device, &info, &n, st);
        vk_device_unlock();
        if (r != VK_SUCCESS && r != VK_INCOMPLETE) return buf;
        for (uint32_t i = 0; i < n && o + 1 < len; i++) {
            int w = 0;
            switch (st[i].format) {
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
                w = snprintf(buf + o, len - o, "%s=%u; ", st[i].name, (unsigned)st[i].value.b32);
                break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
                w = snprintf(buf + o, len - o, "%s=%lld; ", st[i].name, (long long)st[i].value.i64);
                break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
                w = snprintf(buf + o, len - o, "%s=%llu; ", st[i].name, (unsigned long long)st[i].value.u64);
                break;
            default: w = snprintf(buf + o, len - o, "%s=%g; ", st[i].name, st[i].value.f64); break;
            }
            if (w < 0) break;
            o += (size_t)w < len - o ? (size_t)w : len - o - 1;
        }
        break;
    }
    return buf;
}
