/* Threads of the CPU backends (ref and cpu): the thread count, a thread's index, the loop over them. */
#include "backend.h"

#ifdef _OPENMP
#include <omp.h>
#endif

int jattn_resolve_threads(int requested) {
#ifdef _OPENMP
    if (requested > 0) return requested;
    const int procs = omp_get_num_procs(); /* (a system call: only when asked for all cores) */
    return procs > 0 ? procs : 1;
#else
    (void)requested;
    return 1;
#endif
}

int jattn_thread_index(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

void jattn_parallel_for(int64_t n, int threads, jattn_loop_body *body, void *arg) {
#ifdef _OPENMP
    if (threads > 1) {
        JATTN_PARALLEL_FOR_DYNAMIC(1, threads)
        for (int64_t i = 0; i < n; i++) body(arg, i, omp_get_thread_num());
        return;
    }
#else
    (void)threads;
#endif
    for (int64_t i = 0; i < n; i++) body(arg, i, 0);
}
