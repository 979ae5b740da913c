/* The cuda backend when the library is built without CUDA: it answers every question with
 * JATTN_ERROR_BACKEND_UNAVAILABLE, so the dispatch table needs no #ifdef. */
#include "../backend.h"

static jattn_status cuda_unavailable_select(const jattn_problem *p, const jattn_exec *e, jattn_plan *plan) {
    (void)p;
    (void)e;
    (void)plan;
    return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE,
                      "backend: cuda is not built into this library (configure with nvcc present, JATTN_CUDA=ON)");
}

static size_t cuda_unavailable_workspace(const jattn_problem *p, const jattn_exec *e, const jattn_plan *plan) {
    (void)p;
    (void)e;
    (void)plan;
    return 0;
}

static jattn_status cuda_unavailable_forward(const jattn_call *c, const jattn_plan *plan) {
    (void)c;
    (void)plan;
    return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "backend: cuda is not built into this library");
}

static jattn_status cuda_unavailable_backward(const jattn_call *c, const jattn_plan *plan) {
    (void)c;
    (void)plan;
    return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "backend: cuda is not built into this library");
}

/* Described as cuda_backend.c's table describes the backend (jattn_backend_info_at describes a backend
 * whether or not it is built in). */
const jattn_backend_ops jattn_backend_cuda = {
    .id = JATTN_BACKEND_CUDA,
    .is_gpu = 1,
    .workspace_memory = JATTN_MEMORY_DEVICE,
    .select = cuda_unavailable_select,
    .workspace_size = cuda_unavailable_workspace,
    .forward = cuda_unavailable_forward,
    .select_backward = cuda_unavailable_select,
    .workspace_size_backward = cuda_unavailable_workspace,
    .backward = cuda_unavailable_backward,
};
