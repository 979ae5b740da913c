# Tests of the cuda backend beyond the parity suite (test_parity cuda): device pointers on the
# caller's stream, graph capture, alignment, aliasing, allocation counts, every kernel version.
# Built whenever the backend is; exits 77 (skipped) on a machine without a GPU.
if(JATTN_CUDA_ENABLED)
  jattn_add_test(test_cuda_device SOURCES test_cuda_device.c LIBS CUDA::cudart)
endif()
# Issue 37's GPU reliability tests (bench/gpu/battery.sh runs them under load and under
# compute-sanitizer): many host threads
# calling the backend at once, one context and one non-blocking stream each, every result against the
# reference; and faults and hostile calls: the refusals (host pointers during a capture, a stream of
# another device, a workspace too small) and an allocation failure with the device's memory exhausted
# (RUN_SERIAL: it takes nearly all of the GPU's memory for a moment).
if(JATTN_CUDA_ENABLED)
  find_package(Threads REQUIRED)
  jattn_add_test(test_cuda_threads SOURCES test_cuda_threads.c LIBS CUDA::cudart Threads::Threads)
  jattn_add_test(test_cuda_faults SOURCES test_cuda_faults.c LIBS CUDA::cudart)
  # small calls of the forced kernel (JATTN_CUDA_KERNEL / JATTN_CUDA_BWD_KERNEL; AUTO here) against the
  # reference: the battery's compute-sanitizer workload
  jattn_add_test(test_cuda_kernels SOURCES test_cuda_kernels.c LIBS CUDA::cudart)
  set_tests_properties(test_cuda_faults PROPERTIES RUN_SERIAL ON)
  # the sweep with the CUDA runtime linked: its device-memory and graph draws
  target_link_libraries(test_sweep PRIVATE CUDA::cudart)
  target_compile_definitions(test_sweep PRIVATE JATTN_TEST_SWEEP_CUDA=1)
endif()
# The backward on the cuda backend (test_backward_cuda, registered with every backend in
# CMakeLists.txt): test_backward's battery (host pointers) and tf32 part, and with the CUDA runtime
# linked its device part (device pointers, a caller workspace in device memory, graph capture).
if(JATTN_CUDA_ENABLED)
  target_link_libraries(test_backward PRIVATE CUDA::cudart)
  target_compile_definitions(test_backward PRIVATE JATTN_TEST_BACKWARD_CUDA=1)
  # the same battery with the mma.sync backward v3 forced: on Hopper AUTO runs v4 where it applies
  add_test(NAME test_backward_cuda_v3 COMMAND test_backward cuda)
  set_tests_properties(test_backward_cuda_v3 PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT JATTN_CUDA_BWD_KERNEL=v3)
endif()
# Masks and grouped-query heads (test_masks cuda: every mask part against the reference), with AUTO's kernels
# and with each forward version forced (v6: the problems it takes, on a 9.0 device; v1: the SIMT fallback).
if(JATTN_CUDA_ENABLED)
  if(NOT TEST test_masks_cuda)
    jattn_add_test(test_masks SOURCES test_masks.c ARGS cuda)
  endif()
  foreach(k v1 v6 v7)
    add_test(NAME test_masks_cuda_${k} COMMAND test_masks cuda parity)
    set_tests_properties(test_masks_cuda_${k} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT JATTN_CUDA_KERNEL=${k})
  endforeach()
endif()
# The parity and padding suites with the mma.sync kernel v7 forced: on Hopper AUTO runs v6 at head_dim
# 64 and 128, and v7 is what every other GPU runs there.
if(JATTN_CUDA_ENABLED)
  foreach(t test_parity test_padding)
    add_test(NAME ${t}_cuda_v7 COMMAND ${t} cuda)
    set_tests_properties(${t}_cuda_v7 PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT JATTN_CUDA_KERNEL=v7)
  endforeach()
endif()
# The fatbinary's targets (src/cuda/sources.cmake): machine code and PTX as JATTN_CUDA_ARCHS lists, the
# portable kernels in each; skipped where the toolkit has no cuobjdump.
if(JATTN_CUDA_ENABLED)
  find_program(JATTN_CUOBJDUMP cuobjdump HINTS ${CUDAToolkit_BIN_DIR})
  add_test(NAME test_fatbin COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_fatbin.sh $<TARGET_FILE:jattn_shared>
                                       "${JATTN_CUDA_ARCHS}" "${JATTN_CUOBJDUMP}")
  set_tests_properties(test_fatbin PROPERTIES SKIP_RETURN_CODE 77)
endif()
