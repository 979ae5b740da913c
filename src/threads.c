/* Thread-count resolution shared by the CPU backends (ref and cpu). */
#include "backend.h"

#ifdef _OPENMP
#include <omp.h>
#endif

int jattn_resolve_threads(int requested) {
#ifdef _OPENMP
    int procs = omp_get_num_procs();
    if (requested <= 0) return procs > 0 ? procs : 1;
    return requested;
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
