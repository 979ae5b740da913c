# Tests of the cuda backend beyond the parity suite (test_parity cuda): device pointers on the
# caller's stream, graph capture, alignment, aliasing, allocation counts, every kernel version.
# Built whenever the backend is; exits 77 (skipped) on a machine without a GPU.
if(JATTN_CUDA_ENABLED)
  jattn_add_test(test_cuda_device SOURCES test_cuda_device.c LIBS CUDA::cudart)
endif()
