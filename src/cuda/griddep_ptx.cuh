/* griddep_ptx.cuh: programmatic dependent launch from inside a kernel (PTX ISA "griddepcontrol", sm_90
 * and newer; no-ops when compiled for older targets, and for a grid launched the ordinary way). The
 * launcher sets cudaLaunchAttributeProgrammaticStreamSerialization on the dependent grid. Internal to
 * src/cuda; internal linkage. */
#ifndef JATTN_GRIDDEP_PTX_CUH
#define JATTN_GRIDDEP_PTX_CUH

namespace {

/* Lets the grid launched next with programmatic serialization start (once every CTA of this grid has
 * called it or exited). */
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Waits until the grid this one was launched after (programmatically) has completed and its writes
 * are visible. A grid that calls it in every CTA completes only after that grid: so the stream's next
 * work, which waits for this grid, waits for both. */
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

} /* namespace */

#endif /* JATTN_GRIDDEP_PTX_CUH */
