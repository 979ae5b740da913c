/* The vk backend when the library is built without it (no glslc / spirv-val / Vulkan headers, or
 * JATTN_VULKAN=OFF): it answers every question with JATTN_ERROR_BACKEND_UNAVAILABLE, so the
 * dispatch table needs no #ifdef. */
#include "../backend.h"

static jattn_status vk_unavailable_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    (void)p;
    (void)e;
    (void)plan;
    return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE,
                      "backend: vk is not built into this library (configure with glslc, spirv-val and the Vulkan "
                      "headers present, JATTN_VULKAN=ON)");
}

static size_t vk_unavailable_workspace(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)p;
    (void)e;
    (void)plan;
    return 0;
}

static jattn_status vk_unavailable_forward(const jattn_call *c, const jattn_plan *plan) {
    (void)c;
    (void)plan;
    return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "backend: vk is not built into this library");
}

/* Described as vk_backend.c's table describes the backend (jattn_backend_info_at describes a backend
 * whether or not it is built in). */
const jattn_backend_ops jattn_backend_vk = {
    .id = JATTN_BACKEND_VK,
    .is_gpu = 1,
    .workspace_memory = JATTN_MEMORY_HOST,
    .select = vk_unavailable_select,
    .workspace_size = vk_unavailable_workspace,
    .forward = vk_unavailable_forward,
    /* no backward */
};
