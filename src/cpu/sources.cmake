# The cpu backend's sources, added to jattn_objects: the portable driver, the ISA choice, the
# portable C twin, and the micro-kernel files of each instruction set the target architecture
# has (a main table and its narrow tables for short query blocks), each compiled with its own flags (so a generic x86-64 build still carries AVX-512 and AVX2
# kernels and picks one at run time).
include(CheckCCompilerFlag)
set(JATTN_CPU_DIR ${CMAKE_CURRENT_LIST_DIR})
target_sources(jattn_objects PRIVATE
  ${JATTN_CPU_DIR}/cpu_backend.c
  ${JATTN_CPU_DIR}/cpu_isa.c
  ${JATTN_CPU_DIR}/cpu_key_blocks.c
  ${JATTN_CPU_DIR}/cpu_kernels_generic.c)

set(JATTN_CPU_ISAS generic)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i.86)$")
  check_c_compiler_flag("-mavx512f -mfma" JATTN_CC_HAS_AVX512F)
  check_c_compiler_flag("-mavx2 -mfma" JATTN_CC_HAS_AVX2)
  if(JATTN_CC_HAS_AVX512F)
    set(JATTN_CPU_AVX512_SOURCES ${JATTN_CPU_DIR}/cpu_kernels_avx512.c ${JATTN_CPU_DIR}/cpu_kernels_avx512_q32.c
      ${JATTN_CPU_DIR}/cpu_kernels_avx512_q16.c)
    target_sources(jattn_objects PRIVATE ${JATTN_CPU_AVX512_SOURCES})
    set_source_files_properties(${JATTN_CPU_AVX512_SOURCES} PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx2;-mfma")
    list(APPEND JATTN_CPU_ISAS avx512)
    set_property(SOURCE ${JATTN_CPU_DIR}/cpu_isa.c APPEND PROPERTY COMPILE_DEFINITIONS JATTN_CPU_HAVE_AVX512)
  endif()
  if(JATTN_CC_HAS_AVX2)
    set(JATTN_CPU_AVX2_SOURCES ${JATTN_CPU_DIR}/cpu_kernels_avx2.c ${JATTN_CPU_DIR}/cpu_kernels_avx2_q8.c)
    target_sources(jattn_objects PRIVATE ${JATTN_CPU_AVX2_SOURCES})
    set_source_files_properties(${JATTN_CPU_AVX2_SOURCES} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
    list(APPEND JATTN_CPU_ISAS avx2)
    set_property(SOURCE ${JATTN_CPU_DIR}/cpu_isa.c APPEND PROPERTY COMPILE_DEFINITIONS JATTN_CPU_HAVE_AVX2)
  endif()
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  target_sources(jattn_objects PRIVATE ${JATTN_CPU_DIR}/cpu_kernels_neon.c)
  list(APPEND JATTN_CPU_ISAS neon)
  set_property(SOURCE ${JATTN_CPU_DIR}/cpu_isa.c APPEND PROPERTY COMPILE_DEFINITIONS JATTN_CPU_HAVE_NEON)
endif()
message(STATUS "jattn cpu backend instruction sets: ${JATTN_CPU_ISAS}")
