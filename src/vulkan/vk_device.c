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

/* Of the family's modules of one kind within the device's shared-memory limit, the one that
 * declares the most; -1 if none. */
static int largest_module(const vk_device *d, int kind, int family) {
    int best = -1;
    for (int m = 0; m < jattn_vk_module_count; m++) {
        const vk_spirv_module *x = &jattn_vk_modules[m];
        if (x->kind != kind || x->dmax != family || (uint32_t)x->shared_bytes > d->shared_limit) continue;
        if (best < 0 || x->shared_bytes > jattn_vk_modules[best].shared_bytes) best = m;
    }
    return best;
}

int vk_module_for(const vk_device *d, int64_t head_dim) {
    int family = 0;
    for (int m = 0; m < jattn_vk_module_count; m++)
        if (jattn_vk_modules[m].dmax >= head_dim && (!family || jattn_vk_modules[m].dmax < family))
            family = jattn_vk_modules[m].dmax;
    const int m = d->kernel != 1 ? largest_module(d, d->kernel, family) : -1;
    return m >= 0 ? m : largest_module(d, 1, family);
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
    if (p->limits.maxPushConstantsSize < JATTN_VK_PUSH_BYTES) {
        snprintf(why, why_len, "%.96s has %u bytes of push constants (need %d)", p->deviceName,
                 p->limits.maxPushConstantsSize, JATTN_VK_PUSH_BYTES);
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
            return 1;
        }
    snprintf(why, why_len, "%.96s has no compute queue", p->deviceName);
    return 0;
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
    /* The kernel: JATTN_VK_KERNEL=7 picks attn3_f32.comp with TX=32 and PREFETCH (head dim 128;
     * the NVIDIA default there), 1 attn_f32.comp (also what a kind without a module for the family
     * runs: the other values once named forms removed since, src/vulkan/NOTES.md). */
    const char *kernel = getenv("JATTN_VK_KERNEL");
    /* Shared memory the modules may use: the device's, or less with JATTN_VK_SHARED_LIMIT=<bytes>
     * (kind 7's 32 KiB form on a 48 KiB device). On a software device it may also raise it to
     * 48 KiB: lavapipe reports 32 KiB but runs the 48 KiB modules, so the tests cover the module
     * NVIDIA runs (tests/vulkan.cmake). */
    d->shared_limit = d->props.limits.maxComputeSharedMemorySize;
    const char *shared = getenv("JATTN_VK_SHARED_LIMIT");
    if (shared && shared[0]) {
        const unsigned long long c = strtoull(shared, NULL, 10);
        if (c >= JATTN_VK_SHARED_BYTES && (c < d->shared_limit || (d->is_cpu && c <= 49152)))
            d->shared_limit = (uint32_t)c;
    }
    d->kernel = kernel && kernel[0] >= '1' && kernel[0] <= '9' && kernel[1] == '\0' ? kernel[0] - '0' : 1;
    /* NVIDIA: attn3_f32.comp with TX=32 and PREFETCH (kind 7) by default, where the family has it
     * (head dim 128): measured faster than attn_f32.comp on the H200 (src/vulkan/NOTES.md). */
    if (!(kernel && kernel[0]) && d->props.vendorID == 0x10DE) d->kernel = 7;
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
    VkResult r = d->f.vkCreateDevice(d->phys, &dci, NULL, &d->device);
    if (r != VK_SUCCESS) FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "vkCreateDevice failed (VkResult %d)", (int)r);
    char why[200];
    if (vk_loader_device(&d->f, d->device, why, sizeof why) != 0) FAIL(JATTN_ERROR_BACKEND_UNAVAILABLE, "%.180s", why);
    d->f.vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);

    /* Bindings 0..5: q, k, v, out, lse, keys (shaders/attn_common.glsl); push constants: 16 words. */
    VkDescriptorSetLayoutBinding b[6];
    memset(b, 0, sizeof b);
    for (uint32_t i = 0; i < 6; i++) {
        b[i].binding = i;
        b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        b[i].descriptorCount = 1;
        b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo lci;
    memset(&lci, 0, sizeof lci);
    lci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    lci.bindingCount = 6;
    lci.pBindings = b;
    if (d->f.vkCreateDescriptorSetLayout(d->device, &lci, NULL, &d->set_layout) != VK_SUCCESS)
        FAIL(JATTN_ERROR_OUT_OF_MEMORY, "vkCreateDescriptorSetLayout failed");
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, JATTN_VK_PUSH_BYTES};
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
