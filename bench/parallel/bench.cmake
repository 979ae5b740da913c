# bench/parallel/sp_gpu_bench (the multi-GPU run of bench/parallel/multi_gpu.sh), built with
# the tests whenever the NCCL transport is, so that it compiles on every such build.
if(JATTN_NCCL_ENABLED AND TARGET jattn_kit)
  find_package(Threads REQUIRED)
  add_executable(sp_gpu_bench ${CMAKE_CURRENT_LIST_DIR}/sp_gpu_bench.c)
  target_include_directories(sp_gpu_bench PRIVATE ${JATTN_NCCL_INCLUDE_DIR})
  target_compile_definitions(sp_gpu_bench PRIVATE _POSIX_C_SOURCE=200809L)
  target_link_libraries(sp_gpu_bench PRIVATE jattn_parallel_static jattn_kit CUDA::cudart
    ${JATTN_NCCL_LIBRARY} Threads::Threads m)
  if(OpenMP_C_FOUND)
    target_link_libraries(sp_gpu_bench PRIVATE OpenMP::OpenMP_C)
  endif()
endif()
