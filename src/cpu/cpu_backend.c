/* Placeholder for the cpu backend until its driver lands: reports itself unavailable. */
#include "../backend.h"

static jattn_status cpu_select(const jattn_problem *p, const jattn_exec *e, jattn_selection *sel) {
    (void)p;
    (void)e;
    (void)sel;
    return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "backend: cpu is not implemented yet");
}

static size_t cpu_workspace(const jattn_problem *p, const jattn_exec *e, const jattn_selection *sel) {
    (void)p;
    (void)e;
    (void)sel;
    return 0;
}

static jattn_status cpu_forward(const jattn_call *c, const jattn_selection *sel) {
    (void)c;
    (void)sel;
    return jattn_fail(JATTN_ERROR_BACKEND_UNAVAILABLE, "backend: cpu is not implemented yet");
}

const jattn_backend_ops jattn_backend_cpu = {
    JATTN_BACKEND_CPU, "cpu", cpu_select, cpu_workspace, cpu_forward, NULL,
};
