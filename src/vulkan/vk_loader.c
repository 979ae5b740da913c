/* The Vulkan loader opened with dlopen, its entry points fetched into a table (vk_loader.h). */
#include "vk_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const loader_names[] = {
#if defined(__APPLE__)
    "libvulkan.1.dylib",
    "libvulkan.dylib",
    "libMoltenVK.dylib",
#else
    "libvulkan.so.1",
    "libvulkan.so",
#endif
};

int vk_loader_open(vk_fns *f, char *why, size_t why_len) {
    const char *forced = getenv("JATTN_VK_LOADER");
    void *lib = NULL;
    if (forced && forced[0]) {
        lib = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(why, why_len, "the Vulkan loader JATTN_VK_LOADER=%s could not be opened", forced);
            return -1;
        }
    } else {
        for (size_t i = 0; !lib && i < sizeof loader_names / sizeof loader_names[0]; i++)
            lib = dlopen(loader_names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(why, why_len, "no Vulkan loader found (%s)", loader_names[0]);
            return -1;
        }
    }
    /* The library stays open for the life of the process (entry points are kept in the table). */
    void *sym = dlsym(lib, "vkGetInstanceProcAddr");
    if (!sym) {
        snprintf(why, why_len, "the Vulkan loader has no vkGetInstanceProcAddr");
        return -1;
    }
    *(void **)&f->vkGetInstanceProcAddr = sym;
#define JATTN_VK_LOAD_GLOBAL(name)                                              \
    f->name = (PFN_##name)f->vkGetInstanceProcAddr(VK_NULL_HANDLE, #name);      \
    if (!f->name) {                                                             \
        snprintf(why, why_len, "the Vulkan loader does not provide %s", #name); \
        return -1;                                                              \
    }
    JATTN_VK_GLOBAL_FNS(JATTN_VK_LOAD_GLOBAL)
#undef JATTN_VK_LOAD_GLOBAL
    return 0;
}

int vk_loader_instance(vk_fns *f, VkInstance instance, char *why, size_t why_len) {
#define JATTN_VK_LOAD_INSTANCE(name)                                              \
    f->name = (PFN_##name)f->vkGetInstanceProcAddr(instance, #name);              \
    if (!f->name) {                                                               \
        snprintf(why, why_len, "the Vulkan instance does not provide %s", #name); \
        return -1;                                                                \
    }
    JATTN_VK_INSTANCE_FNS(JATTN_VK_LOAD_INSTANCE)
#undef JATTN_VK_LOAD_INSTANCE
    return 0;
}

int vk_loader_device(vk_fns *f, VkDevice device, char *why, size_t why_len) {
#define JATTN_VK_LOAD_DEVICE(name)                                              \
    f->name = (PFN_##name)f->vkGetDeviceProcAddr(device, #name);                \
    if (!f->name) {                                                             \
        snprintf(why, why_len, "the Vulkan device does not provide %s", #name); \
        return -1;                                                              \
    }
    JATTN_VK_DEVICE_FNS(JATTN_VK_LOAD_DEVICE)
#undef JATTN_VK_LOAD_DEVICE
    return 0;
}
