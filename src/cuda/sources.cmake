# The cuda backend. JATTN_CUDA=AUTO builds it when an nvcc is found, ON requires it, OFF skips
# it; without it the stub cuda_unavailable.c reports the backend unavailable.
# Sets JATTN_CUDA_ENABLED (this file is include()d, so in the top directory's scope).
#
# Targets, per file (below): the portable files (the mma.sync and SIMT kernels, the pre-passes)
# carry machine code for sm_80, sm_86, sm_89 and sm_90a and PTX for compute_90; the sm_90a-only
# kernels (forward v6 and the backward v4, with their pre-passes) carry sm_90a machine code alone:
# the backend selects them on 9.0 devices only. The mma.sync backward is v3
# (backward_v3_mma_f16x2.cu, its pre-pass backward_v3_split_f16x2.cu); the forward's mma.sync
# kernel v7.
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
    ${CMAKE_CURRENT_LIST_DIR}/empty_fill.cu
    ${CMAKE_CURRENT_LIST_DIR}/key_padding.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v1_simt.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v1_small_head_dim.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v6_split_kv_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v6_sm90_fa3_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v7_split_kv_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/attention_v7_mma_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/backward_v4_split_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/backward_v4_sm90_fa3_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/backward_v3_split_f16x2.cu
    ${CMAKE_CURRENT_LIST_DIR}/backward_v3_mma_f16x2.cu)
  target_link_libraries(jattn_objects PRIVATE CUDA::cudart)
  # Machine code for Ampere (sm_80, sm_86), Ada (sm_89) and Hopper (sm_90a), and PTX for compute_90,
  # the newest virtual architecture whose PTX every later GPU's driver compiles (Blackwell's
  # sm_100, sm_103, sm_110, sm_120, sm_121 and after run the mma.sync kernels from it).
  # JATTN_CUDA_ARCHS narrows the list (a build for one GPU compiles faster: "90a" on a Hopper).
  set(JATTN_CUDA_ARCHS "80;86;89;90a;compute_90" CACHE STRING
      "CUDA targets of the portable kernels: NN for sm_NN machine code, compute_NN for PTX")
  set(JATTN_CUDA_GENCODE "")
  foreach(_arch IN LISTS JATTN_CUDA_ARCHS)
    if(_arch MATCHES "^compute_([0-9]+a?)$")
      list(APPEND JATTN_CUDA_GENCODE "-gencode=arch=compute_${CMAKE_MATCH_1},code=compute_${CMAKE_MATCH_1}")
    elseif(_arch MATCHES "^([0-9]+a?)$")
      list(APPEND JATTN_CUDA_GENCODE "-gencode=arch=compute_${_arch},code=sm_${_arch}")
    else()
      message(FATAL_ERROR "JATTN_CUDA_ARCHS: '${_arch}' is neither NN(a) nor compute_NN(a)")
    endif()
  endforeach()
  set(JATTN_CUDA_GENCODE_SM90A "-gencode=arch=compute_90a,code=sm_90a")
  set(_jattn_sm90a_only
    attention_v6_split_kv_f16x2.cu attention_v6_sm90_fa3_f16x2.cu
    backward_v4_split_f16x2.cu backward_v4_sm90_fa3_f16x2.cu)
  get_target_property(_jattn_sources jattn_objects SOURCES)
  foreach(_src IN LISTS _jattn_sources)
    get_filename_component(_name "${_src}" NAME)
    if(_name MATCHES "\\.cu$")
      if(_name IN_LIST _jattn_sm90a_only)
        set_source_files_properties(${_src} PROPERTIES COMPILE_OPTIONS "${JATTN_CUDA_GENCODE_SM90A}")
      else()
        set_source_files_properties(${_src} PROPERTIES COMPILE_OPTIONS "${JATTN_CUDA_GENCODE}")
      endif()
    endif()
  endforeach()
  # -fno-threadsafe-statics: the launch stubs nvcc writes use static locals; without guards
  # the library needs no C++ runtime, so C programs link libjattn.a with the C compiler.
  target_compile_options(jattn_objects PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-fno-threadsafe-statics>)
  # jattn_objects exists before CUDA is enabled: set its properties directly.
  # CUDA_VISIBILITY_PRESET: the kernels' extern "C" launchers stay internal to the shared library,
  # as the C sources' symbols do (only JATTN_API names are exported).
  set_target_properties(jattn_objects PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                 CUDA_VISIBILITY_PRESET hidden)
  set(JATTN_CUDA_ENABLED ON)
  message(STATUS "jattn: cuda backend built (${CMAKE_CUDA_COMPILER}, targets ${JATTN_CUDA_ARCHS}; sm_90a kernels 90a)")
else()
  target_sources(jattn_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_unavailable.c)
endif()
