/* jattn_internal.h: the internal door. The one header through which tests and benchmarks reach
 * inside the library, as ggml's tests reach a backend's extras through its registry instead of its
 * private headers (CONTRIBUTING.md, "The internal door"). Nothing that ships includes it: not the
 * library's own sources, not the public headers, not the command, not the bindings.
 *
 * A test or benchmark includes this header and no other header of src/ or tools/; its CMake target
 * links jattn_internal (the top CMakeLists.txt), which puts this folder, and no other folder of
 * src/, on its include path. The ctest test_door checks both (tests/test_door.cmake).
 *
 * What it opens, and who uses it:
 *   backend.h              the backend table, jattn_fail, jattn_alloc_aligned (tests/test_cpu_kernels.c)
 *   cpu/cpu_kernels.h      the cpu micro-kernels' tables and contracts, one table per instruction set
 *                          (tests/test_cpu_kernels.c, test_cpu_exp.c, test_cpu_threads.c)
 *   cuda/cuda_internal.h   the cuda backend's knobs and counters: jattn_cuda_set_kernel,
 *                          jattn_cuda_alloc_count, the versions' limits and
 *                          workspace sizes (tests/test_cuda_device.c, test_cuda_faults.c,
 *                          test_cuda_kernels.c, bench/gpu/jattn_gpu_bench.c, bench/gpu/sanitize_small.c)
 *   cuda/cuda_versions.h   the versions' tables and the ladders walked over them (tests/test_cuda_ladder.c,
 *                          which checks src/cuda/NOTES.md's ladder table against them)
 *   vulkan/vk_internal.h   the vk backend's modules, range plan, context counters and kernel timer
 *                          (tests/test_vulkan.c, bench/vulkan/vk_bench.c); only where the vk backend
 *                          is built (it needs the Vulkan headers): jattn_internal then defines
 *                          JATTN_INTERNAL_VK and adds their folder
 *   parallel/sp_ctx.h, parallel/sp_transport.h, parallel/sp_collectives.h
 *                          the sequence-parallel layer's context, transports and collectives, so a test
 *                          can run every rank in one process (tests/test_sp_threads.c,
 *                          test_sp_device.c, sp_threads_transport.h)
 * Declaring a function here does not link it: a cuda or vk symbol exists only in a build with that
 * backend (tests/cuda.cmake and vulkan.cmake register their tests only then).
 *
 * These are internal interfaces: they change with the code, under no version policy. A test that
 * needs more from inside adds it to this list (and to CONTRIBUTING.md), never an include path. */
#ifndef JATTN_INTERNAL_H
#define JATTN_INTERNAL_H

#include "../backend.h"
#include "../cpu/cpu_kernels.h"
#include "../cuda/cuda_internal.h"
#include "../cuda/cuda_versions.h"
#include "../parallel/sp_collectives.h"
#include "../parallel/sp_ctx.h"
#include "../parallel/sp_transport.h"
#ifdef JATTN_INTERNAL_VK
#include "../vulkan/vk_internal.h"
#endif

#endif /* JATTN_INTERNAL_H */
