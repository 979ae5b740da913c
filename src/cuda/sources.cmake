# The cuda backend. JATTN_CUDA=AUTO builds it when an nvcc is found, ON requires it, OFF skips
# it; without it the stub cuda_unavailable.c reports the backend unavailable.
# Sets JATTN_CUDA_ENABLED (this file is include()d, so in the top directory's scope).
#
# Targets: sm_90a machine code (Hopper) plus compute_80 PTX, which the driver compiles for
# Ampere, Ada and anything newer. The backward v1 (backward_v1_mma_tf32x3.cu) is mma.sync only; the
# backward v2 (backward_v2_sm90_f16x2.cu, its pre-pass backward_v2_split_f16x2.cu) is sm_90a only.
# Kernels v4 (attention_v4_sm90_f16x2.cu, with its pre-pass attention_v4_split_kv_f16x2.cu) and v6
# (attention_v6_sm90_fa3_f16x2.cu, with its pre-pass attention_v6_split_kv_f16x2.cu) have a real body in
# the sm_90a pass only (a trap in the PTX pass; the backend selects them on 9.0 devices only).
# CMAKE_CUDA_ARCHITECTURES is OFF: the flags are explicit.
set(JATTN_CUDA_ENABLED OFF)
set(_jattn_cuda_build OFF)
if(JATTN_CUDA STREQUAL "ON")
  set(_jattn_cuda_build ON)
elseif(JATTN_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(_jattn_cuda_build ON)
  else()
    message(STATUS "jattn: no CUDA compiler found, the cuda backend is not built")
  endif()
elseif(NOT JATTN_CUDA STREQUAL "OFF")
  message(FATAL_ERROR "JATTN_CUDA must be AUTO, ON or OFF (is ${JATTN_CUDA})")
endif()

if(_jattn_cuda_build)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES OFF)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_sources(jattn_objects PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.c
    ${CMAKE_CURRENT_LIST_DIR}/cuda_versions.c
    ${CMAKE_CURRENT_LIST_DIR}/sm90_contract.c
    ${CMAKE_CURRENT_LIST_DIR}/key_padding.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v1_simt.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v2_mma.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v4_split_kv_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v4_sm90_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v6_split_kv_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v6_sm90_fa3_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/backward_v1_mma_tf32x3.cu
    ${CMAKE_CURRENT_LIST_DIR}/backward_v2_split_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/backward_v2_sm90_f16x2.cu)
  target_link_libraries(jattn_objects PRIVATE CUDA::cudart)
  set(JATTN_CUDA_GENCODE
    "SHELL:-gencode arch=compute_90a,code=sm_90a"
    "SHELL:-gencode arch=compute_80,code=compute_80")
  # -fno-threadsafe-statics: the launch stubs nvcc writes use static locals; without guards
  # the library needs no C++ runtime, so C programs link libjattn.a with the C compiler.
  target_compile_options(jattn_objects PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:${JATTN_CUDA_GENCODE}>"
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-fno-threadsafe-statics>)
  # jattn_objects exists before CUDA is enabled: set its properties directly.
  # CUDA_VISIBILITY_PRESET: the kernels' extern "C" launchers stay internal to the shared library,
  # as the C sources' symbols do (only JATTN_API names are exported).
  set_target_properties(jattn_objects PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                 CUDA_VISIBILITY_PRESET hidden)
  set(JATTN_CUDA_ENABLED ON)
  message(STATUS "jattn: cuda backend built (${CMAKE_CUDA_COMPILER}, sm_90a + compute_80 PTX)")
else()
  target_sources(jattn_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_unavailable.c)
endif()
