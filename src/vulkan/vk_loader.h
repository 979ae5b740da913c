/* The Vulkan loader, opened at run time: the library has no link-time dependency on Vulkan.
 *
 * vk_loader_open() dlopens libvulkan (libvulkan.so.1 on Linux; libvulkan.1.dylib, then
 * libMoltenVK.dylib on macOS; JATTN_VK_LOADER overrides the name) and fills the table of global
 * entry points; vk_loader_instance() and vk_loader_device() fill the instance and device ones
 * through vkGetInstanceProcAddr / vkGetDeviceProcAddr, as volk does. */
#ifndef JATTN_VK_LOADER_H
#define JATTN_VK_LOADER_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

/* X(name) for every entry point, by the level it is fetched at. */
#define JATTN_VK_GLOBAL_FNS(X) \
    X(vkCreateInstance)        \
    X(vkEnumerateInstanceExtensionProperties)

#define JATTN_VK_INSTANCE_FNS(X)                \
    X(vkDestroyInstance)                        \
    X(vkEnumeratePhysicalDevices)               \
    X(vkGetPhysicalDeviceProperties)            \
    X(vkGetPhysicalDeviceProperties2)           \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkGetPhysicalDeviceMemoryProperties)      \
    X(vkEnumerateDeviceExtensionProperties)     \
    X(vkCreateDevice)                           \
    X(vkGetDeviceProcAddr)

#define JATTN_VK_DEVICE_FNS(X)       \
    X(vkDestroyDevice)               \
    X(vkGetDeviceQueue)              \
    X(vkQueueSubmit)                 \
    X(vkCreateBuffer)                \
    X(vkDestroyBuffer)               \
    X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory)              \
    X(vkFreeMemory)                  \
    X(vkBindBufferMemory)            \
    X(vkMapMemory)                   \
    X(vkUnmapMemory)                 \
    X(vkCreateShaderModule)          \
    X(vkDestroyShaderModule)         \
    X(vkCreateDescriptorSetLayout)   \
    X(vkDestroyDescriptorSetLayout)  \
    X(vkCreatePipelineLayout)        \
    X(vkDestroyPipelineLayout)       \
    X(vkCreateComputePipelines)      \
    X(vkDestroyPipeline)             \
    X(vkCreateDescriptorPool)        \
    X(vkDestroyDescriptorPool)       \
    X(vkAllocateDescriptorSets)      \
    X(vkUpdateDescriptorSets)        \
    X(vkCreateCommandPool)           \
    X(vkDestroyCommandPool)          \
    X(vkAllocateCommandBuffers)      \
    X(vkBeginCommandBuffer)          \
    X(vkEndCommandBuffer)            \
    X(vkCmdBindPipeline)             \
    X(vkCmdBindDescriptorSets)       \
    X(vkCmdPushConstants)            \
    X(vkCmdDispatch)                 \
    X(vkCmdCopyBuffer)               \
    X(vkCmdPipelineBarrier)          \
    X(vkCmdWriteTimestamp)           \
    X(vkCmdResetQueryPool)           \
    X(vkCreateQueryPool)             \
    X(vkDestroyQueryPool)            \
    X(vkGetQueryPoolResults)         \
    X(vkCreateFence)                 \
    X(vkDestroyFence)                \
    X(vkWaitForFences)               \
    X(vkResetFences)

#define JATTN_VK_DECLARE(name) PFN_##name name;
typedef struct vk_fns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    JATTN_VK_GLOBAL_FNS(JATTN_VK_DECLARE)
    JATTN_VK_INSTANCE_FNS(JATTN_VK_DECLARE)
    JATTN_VK_DEVICE_FNS(JATTN_VK_DECLARE)
} vk_fns;
#undef JATTN_VK_DECLARE

/* Opens the loader and fills the global entry points. @return 0, or -1 with `why` (a sentence). */
int vk_loader_open(vk_fns *f, char *why, size_t why_len);
/* Fills the instance-level entry points. @return 0, or -1 naming the missing one in `why`. */
int vk_loader_instance(vk_fns *f, VkInstance instance, char *why, size_t why_len);
/* Fills the device-level entry points. @return 0, or -1 naming the missing one in `why`. */
int vk_loader_device(vk_fns *f, VkDevice device, char *why, size_t why_len);

#endif /* JATTN_VK_LOADER_H */
